/*
 * changes.h: the shim's change lists (docs/INTEGRATION.md, "Change
 * lists"): after each commit, the flat positions and new 16-bit words of
 * every weight that changed, one file per target version in
 * BUFFER.changes/, so an inference engine applies a version into its own
 * tensors with one scatter per tensor. A patch whose every frame was
 * prepared while staged has its list written then, into a temporary that
 * its commit renames into place; otherwise the commit records each
 * frame's positions as the apply hooks see them and writes the file
 * (temporary, then rename). Either way it is in place before the buffer's
 * version flips to its target.
 */
#ifndef BFP_SHIM_CHANGES_H
#define BFP_SHIM_CHANGES_H

#include <stddef.h>
#include <stdint.h>

/* The file (little-endian; INTEGRATION.md gives every field) */
#define CHG_MAGIC "BFPCHGL1"
#define CHG_LAYOUT 1u
#define CHG_HDR 64u
#define CHG_REC 24u
/* header flags: a keyframe commit (no entries: the chain starts over);
 * a commit finished after a restart (its changes are not all known) */
#define CHG_F_KEY 1u
#define CHG_F_RESUMED 2u
/* entry flags: every position of the range (a keyframe-coded frame of a
 * patch), no offsets stored */
#define CHG_E_DENSE 1u

/* One frame's changes during a commit: offsets from its range_begin and
 * the new words (NULL: read from the buffer at the target when written). */
typedef struct chg_frame {
	uint64_t begin;
	uint32_t range_len, n;
	const uint32_t *pos;
	const uint16_t *val;
	uint32_t *own;          /* pos, when it is this record's copy */
	uint32_t idx;           /* the frame's index in the patch */
	uint32_t crc;           /* has_crc: of its entry's bytes (changes_entry_crc) */
	uint8_t dense, noted, has_crc;
} chg_frame;

typedef struct shim_changes {
	unsigned keep;          /* --changes N: lists of the last N versions */
	char *dir;              /* BUFFER.changes */
	uint64_t ino;           /* the buffer file's inode: lists of another file are stale */
	int ready;              /* dir made and cleaned */
	uint32_t crc_tab[8][256];
	uint32_t x2n[32];       /* x^(2^k) modulo the CRC's polynomial */
	/* the commit being recorded */
	const uint16_t *params;
	chg_frame *f;           /* in range order */
	uint32_t *at;           /* frame index -> its record in f */
	uint32_t n_frames;
	_Atomic int lost;       /* a record could not be kept (memory; set by apply threads) */
	/* the hooks chained behind the recorder's */
	void (*undo_note)(void *, unsigned, uint64_t, const uint32_t *, uint32_t);
	void (*undo_done)(void *, unsigned);
	void *undo;
	int (*dma_note)(void *, uint64_t, const uint32_t *, uint32_t);
	void (*dma_retire)(void *);
	void *dma_arg;
	/* the list written for the staged patch that commits next, while it
	 * was prepared (changes.c; NULL: none) */
	struct chg_pre *pre;
	/* counters */
	uint64_t lists, changes, bytes, failed;
	double ms_total, ms_max;
} shim_changes;

/* Take keep (0: no lists, nothing is touched) and the buffer's path;
 * 0, or -1 when out of memory. */
int changes_init(shim_changes *c, unsigned keep, const char *buffer);
/* Make BUFFER.changes if needed and remove what is not a list of this
 * buffer file (fd) up to version: temporaries, lists of a file the buffer
 * replaced, lists past its version. 0, or -1 after a message (the shim
 * then writes no lists). Done once; later calls return at once. */
int changes_ready(shim_changes *c, int fd, uint32_t version);
void changes_fini(shim_changes *c);

/* Start recording a patch's commit: its n frames (parsed and covering
 * the model) applied into params. 0, or -1 when out of memory (then no
 * list is written for this commit). */
int changes_begin(shim_changes *c, const uint8_t *const *frames, const uint32_t *lens,
		  uint32_t n, const uint16_t *params);
/* The CRC-32 of the entry of a frame's changes (INTEGRATION.md, "Files":
 * record, offsets, values, padding), summed while it is staged, so that
 * writing the list costs the commit no CRC of it. */
uint32_t changes_entry_crc(const shim_changes *c, uint64_t begin, uint32_t range_len,
			   const uint32_t *pos, const uint16_t *val, uint32_t n);
/* Frame i's changes are known already (prepared while staged), with the
 * CRC of their entry (crc; NULL: not summed); they must stay valid until
 * changes_end(). */
void changes_take(shim_changes *c, uint32_t i, const uint32_t *pos, const uint16_t *val,
		  uint32_t n, const uint32_t *crc);
/* apply_ctl's undo hooks and shim_dma_journal's, recording the positions
 * and calling the hooks set in c (undo_note..., dma_note...; NULL: none). */
void changes_undo_note(void *c, unsigned worker, uint64_t begin, const uint32_t *pos,
		       uint32_t n);
void changes_undo_done(void *c, unsigned worker);
int changes_dma_note(void *c, uint64_t begin, const uint32_t *pos, uint32_t n);
void changes_dma_retire(void *c);
/* The commit's frames are all at the target, verified: write base ->
 * target's list, or, when a frame's changes were not seen (a commit
 * finished after a restart), a record saying they are not known. Then
 * free the recording. 0 (a list), 1 (that record), or -1 after a message
 * (neither). */
int changes_write(shim_changes *c, uint64_t model_id, uint64_t n_params, uint32_t base,
		  uint32_t target);
/* Forget the recording (a failed commit). */
void changes_end(shim_changes *c);
/* A keyframe commit of target: a list without entries that says the
 * chain starts over, and every older list removed. */
int changes_key(shim_changes *c, uint64_t model_id, uint64_t n_params, uint32_t base,
		uint32_t target);
/* The list of a patch (owner: its staging record, an identity only) whose
 * n frames were all prepared, their changes fc[i] and entry CRCs crc[i]
 * (NULL: not summed; all valid until changes_prep_drop or
 * changes_prep_place): entries in range order, into target's temporary,
 * a few at a time by changes_prep_step(). Replaces any other; 0, or -1
 * (then that patch's commit writes its list itself). */
struct frame_changes;
int changes_prep_start(shim_changes *c, const void *owner, uint64_t model_id,
		       uint64_t n_params, uint32_t base, uint32_t target,
		       const struct frame_changes *const *fc, const uint32_t *const *crc,
		       uint32_t n);
/* Write more of it until now_s() passes until; 1 if some is left. */
int changes_prep_step(shim_changes *c, double until);
/* Whether owner has a list started (written, being written, or failed). */
int changes_prep_has(const shim_changes *c, const void *owner);
/* Its preparation is gone (prepared changes dropped, the patch dropped or
 * committed otherwise): remove the list written for owner (NULL: any). */
void changes_prep_drop(shim_changes *c, const void *owner);
/* In owner's commit from base to target, its prepared frames written and
 * verified: finish its list and rename it into place; *ms: the time spent
 * writing it. 0, or -1 (none: the commit writes it). Forgets it. */
int changes_prep_place(shim_changes *c, const void *owner, uint32_t base, uint32_t target,
		       double *ms);
/* After the version flipped to target: remove all but the newest keep
 * lists up to target. */
void changes_prune(shim_changes *c, uint32_t target);

#endif
