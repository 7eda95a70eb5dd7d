/*
 * patch.h: whole patches for the tools: encode a model pair on several
 * threads into an ordered frame list, read and check a patch file, apply
 * a patch to a model on several threads. A patch file is its frames,
 * concatenated, then the header records of the files whose safetensors
 * header (or shard index) the target changes (docs/FORMAT.md section 4).
 */
#ifndef BFP_PATCH_H
#define BFP_PATCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "bfpatch.h"
#include "model.h"

/* Header record kinds (FORMAT.md 4.1) */
enum { PATCH_REC_HEADER = 1, PATCH_REC_INDEX = 2 };
#define PATCH_REC_MAGIC 0x48504642u /* "BFPH" in file order */
#define PATCH_REC_FIXED 40u         /* bytes before a record's contents */

/* One header record of a patch: its kind, the file it is for (of files,
 * FORMAT.md 1), and where its contents lie in the patch's buf. */
typedef struct patch_record {
	uint32_t kind, file, files;
	size_t off, len;
} patch_record;

typedef struct patch {
	uint8_t *buf;    /* the patch file's bytes: frames, then records */
	size_t len, cap;
	size_t *off;     /* off[i] = start of frame i; off[n] = end of the frames */
	size_t n, off_cap;
	patch_record *rec; /* header records, in file order */
	size_t n_rec;
} patch;

typedef struct patch_opts {
	uint32_t frame_size;
	uint32_t base_version;
	uint32_t target_version;
	uint32_t enc_flags;   /* BFP_ENC_F_* */
	uint32_t key_flags;   /* added to enc_flags for keyframe streams
				 (the publisher's history_keyframes) */
	uint32_t sparse;      /* bfp_sparse_mode */
	int threads;          /* 0 = all online CPUs */
	int progress;         /* print progress to stderr (not with stream) */
	/* Optional, for senders: called on the calling thread with each run
	 * of frames whose index is known (every earlier chunk is encoded), in
	 * index order and with frame_count 0 (FORMAT.md 2.5), while the
	 * workers encode the rest. The patch returned holds the same frames
	 * with the final count. */
	void (*stream)(void *arg, uint8_t *const *frames, const size_t *lens, size_t n);
	/* Optional: called once every frame is encoded (on a worker thread;
	 * with stream, the last frames may not have been sent yet), with the
	 * patch's frames, bytes and changed parameters (bfp_encoder_changed). */
	void (*encoded)(void *arg, size_t frames, size_t bytes, uint64_t changed);
	void *stream_arg;
	/* Optional: the encoders' stage counters (BFP_ENC_F_STAGES), added
	 * up over every thread */
	struct patch_stages *stages;
} patch_opts;

/* Where an encode's time went: each stage's ticks summed over the
 * threads' encoders (enum bfp_stage), the changes their gathers listed
 * and their cuts sized, and the changed parameters of the frames. */
typedef struct patch_stages {
	uint64_t ticks[BFP_STAGES];
	uint64_t listed, sized, changed;
} patch_stages;

/* Print st to f: each stage's share of all, then ticks a change; wall:
 * the seconds the encode took on one thread (0: unknown), for the
 * counter's rate. */
void patch_stages_print(FILE *f, const char *prefix, const patch_stages *st, double wall);

/* Chunk of parameters encoded as one unit: frames never span chunks or
 * tensors, so the output does not depend on the thread count. */
#define PATCH_CHUNK (1u << 24)

/* Encode old -> nw (the same tensor layout, split into the same files).
 * Where nw's safetensors header of a file, or its shard index, differs
 * from old's, the patch ends with a header record holding nw's (FORMAT.md
 * 4.1); frames streamed (o->stream) never carry them. */
int patch_encode(const model *old, const model *nw, const patch_opts *o,
		 patch *out, char *err, size_t errlen);

/* Append a header record with these contents to p (whose frames give
 * the model id and target version); 0, or -1 when out of memory. */
int patch_add_record(patch *p, uint32_t kind, uint32_t file, uint32_t files,
		     const void *bytes, size_t len);

/* Check p's header records against the base m and put the target's
 * headers (and index) into m, in place of the base's: each must be a
 * header of the same file with the same tensor layout (FORMAT.md 4.1).
 * Call before anything is written; on error m is unchanged. */
int patch_apply_records(const patch *p, model *m, char *err, size_t errlen);

/* Encode arrays directly (bench): frames cover [0, n) in PATCH_CHUNK units. */
int patch_encode_arrays(const uint16_t *base, const uint16_t *target,
			uint64_t n, uint64_t model_id, const patch_opts *o,
			patch *out, char *err, size_t errlen);

/* A range [begin, end) of the parameter space. */
typedef struct patch_range {
	uint64_t begin, end;
} patch_range;

/* Encode only ranges r[0, n) (ascending, disjoint, inside [0, n_params))
 * of base -> target, each cut in PATCH_CHUNK units, on o->threads cores
 * as patch_encode does the whole model: frames indexed 0..k-1 of k in
 * range order (a sharded trainer's rank encodes its own tensors). 0, or
 * -1 with a message. */
int patch_encode_ranges(const uint16_t *base, const uint16_t *target, uint64_t n_params,
			uint64_t model_id, const patch_opts *o, const patch_range *r, size_t n,
			patch *out, char *err, size_t errlen);

/* Split and check a patch image: every frame parses, all frames share
 * model, base and target version, indices are 0..n-1 with count n; the
 * bytes after the last frame are header records (FORMAT.md 4.1). */
int patch_parse(patch *p, char *err, size_t errlen);
/* Read and patch_parse the file path ("-": standard input, open_input). */
int patch_read(const char *path, patch *p, char *err, size_t errlen);

/* Frames must tile [0, n_params) exactly. */
int patch_check_cover(const patch *p, uint64_t n_params, char *err,
		      size_t errlen);
/* The same for n frames that each passed bfp_frame_parse. */
int frames_check_cover(const uint8_t *const *frames, size_t n, uint64_t n_params, char *err,
		       size_t errlen);

/* Apply every frame to params (validated frame by frame; on error the
 * buffer may be partly at target: callers write outputs only on success). */
int patch_apply(const patch *p, uint16_t *params, uint64_t n_params,
		uint64_t model_id, int threads, int progress, char *err,
		size_t errlen);

/* A frame's changes, decoded and verified earlier (bfp_decode_verify
 * against the same base): offsets from range_begin and new values. */
typedef struct frame_changes {
	uint64_t range_begin;
	uint32_t n, range_len;
	const uint32_t *pos;
	const uint16_t *val;
} frame_changes;

/* Keep the changes bfp_decode_verify left in d for the frame h: copy
 * them to pos (bfp_decoder_changes offsets) and val (as many values) and return
 * their record. */
frame_changes frame_changes_keep(const bfp_decoder *d, const bfp_frame_header *h,
				 uint32_t *pos, uint16_t *val);

typedef struct apply_ctl {
	int threads;     /* 0 = all online CPUs */
	int progress;    /* print progress to stderr */
	int resume;      /* a frame whose range is already at its target (a
			  * commit cut short) counts as applied */
	/* optional, one per frame (NULL entries allowed): write these values
	 * instead of decoding the frame, then check that its range hashes to
	 * the frame's target (it catches a buffer that changed since) */
	const frame_changes *const *changes;
	/* optional undo journal (wbuf_undo): before a delta frame's values
	 * are written, undo_note(undo, worker, range_begin, pos, n) keeps the
	 * values at those offsets, and undo_done(undo, worker) once they are
	 * written; worker is below the number of threads. Keyframes are not
	 * journalled: they apply over any contents */
	void (*undo_note)(void *undo, unsigned worker, uint64_t begin, const uint32_t *pos,
			  uint32_t n);
	void (*undo_done)(void *undo, unsigned worker);
	void *undo;
} apply_ctl;

typedef struct apply_result {
	uint64_t verified_bytes;  /* bytes whose target hash was checked */
	uint64_t skipped_frames;  /* resume: ranges found at the target */
	size_t bad_frame;         /* on error: the frame that failed */
	int status;               /* on error: its bfp_status (0: memory) */
} apply_result;

/* Apply n_frames frames (any order; disjoint ranges) to params on
 * several threads, each frame validated and hash-verified before it is
 * written. On error returns -1: every frame that failed wrote nothing,
 * others may have been applied. */
int patch_apply_frames(const uint8_t *const *frames, const uint32_t *lens, size_t n_frames,
		       uint16_t *params, uint64_t n_params, uint64_t model_id,
		       uint32_t base_version, const apply_ctl *ctl, apply_result *res, char *err,
		       size_t errlen);

void patch_free(patch *p);
int patch_push(patch *p, const void *frame, size_t len);

int cpu_count(void);
/* The CPU's model name from /proc/cpuinfo ("unknown" if none), for benches. */
void cpu_name(char *out, size_t n);

#endif
