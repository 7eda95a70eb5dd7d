/*
 * model.h: model files for the command-line tool: safetensors (header
 * parsed and validated with jansson), Hugging Face sharded safetensors
 * checkpoints (an index and its shards, FORMAT.md 1) or raw flat BF16,
 * loaded into one aligned array of 16-bit parameter words, and written
 * back atomically.
 */
#ifndef BFP_MODEL_H
#define BFP_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "bfpatch.h"

struct stat;

/* One shard of a sharded checkpoint (FORMAT.md 1). */
typedef struct model_file {
	char *name;            /* its file name, as the index gives it */
	uint8_t *header;       /* its safetensors header: 8-byte length + JSON */
	size_t header_len;
	uint64_t data_begin;   /* its data section's first byte in the
				* parameter space (the sections concatenated) */
	uint64_t data_bytes;
	uint64_t layout_id;    /* the model id of the file alone (FORMAT.md 2.2) */
} model_file;

/* The index file of a sharded checkpoint directory. */
#define MODEL_INDEX_NAME "model.safetensors.index.json"

typedef struct model {
	int safetensors;       /* 0: raw flat BF16 */
	uint8_t *header;       /* safetensors: 8-byte length + JSON, verbatim;
				* sharded: the header of the one file that
				* holds the same data (model_single_header) */
	size_t header_len;
	uint16_t *params;      /* data section as words; odd tail zero-padded;
				* read-only when mapped (model_map) */
	uint64_t n_params;
	uint64_t data_bytes;
	bfp_tensor *tensors;   /* sorted by byte_begin */
	size_t n_tensors;
	char **names;          /* owned storage behind tensors[i].name */
	uint64_t model_id;
	void *map;             /* model_map: the file's mapping, else NULL */
	size_t map_len;
	model_file *files;     /* sharded: the shards in parameter-space
				* order (names sorted); else NULL */
	size_t n_files;
	uint8_t *index;        /* sharded: the index file, verbatim */
	size_t index_len;
	char *index_name;      /* sharded: the index file's name */
} model;

/* Parse a safetensors header (the 8-byte length and JSON). file_size is
 * the whole file size, for the data-section check. On error returns -1
 * and writes a message to err. The model owns nothing from hdr. */
int model_parse_safetensors(model *m, const uint8_t *hdr, size_t hdr_len,
			    uint64_t file_size, char *err, size_t errlen);

/* Load path: a sharded checkpoint if it is a directory (holding
 * MODEL_INDEX_NAME) or its name ends in .index.json (the index in its
 * directory); safetensors if the name ends in .safetensors, or if the
 * file parses as one whatever its name; else raw flat BF16 (even size,
 * not empty). "-" is standard input (open_input), here and in
 * model_load_into and model_map. A sharded checkpoint's index is checked
 * against its shards: every file it names is there, every tensor it maps
 * is in that file, every tensor of a shard is mapped to it. */
int model_load(model *m, const char *path, char *err, size_t errlen);

/* model_load into buf (cap bytes from alloc_aligned) when the data
 * section fits: m then owns buf. Otherwise, and on any error, buf stays
 * the caller's. For a process that loads version after version (publish):
 * the retired version's memory takes the next, where fresh memory would
 * be faulted in and cleared again (README). */
int model_load_into(model *m, const char *path, void *buf, size_t cap, char *err,
		    size_t errlen);
/* model_load for inputs that are only read (diff, report): the data
 * section is mapped read-only from the page cache instead of copied into
 * fresh memory, which on the VMs measured cost more than the encode
 * (README). Falls back to model_load's copy when the section is not a
 * whole number of words at an even offset. The file must not change
 * while mapped: one rewritten in place (not replaced by a rename) shows
 * through, and one truncated ends the process with SIGBUS
 * (atomic_cleanup_on_signals says why). */
int model_map(model *m, const char *path, char *err, size_t errlen);
/* Open path for reading if it is a regular file (a FIFO is refused, not
 * waited on); the fd, or -1 with a message in err. */
int open_regular(const char *path, struct stat *sb, char *err, size_t errlen);
/* open_regular, but "-" is standard input: read at offsets and mapped
 * where it is a regular file, else copied into memory first (a pipe). */
int open_input(const char *path, struct stat *sb, char *err, size_t errlen);
/* The name ends in .safetensors. */
int model_named_safetensors(const char *path);
/* path is a sharded checkpoint for model_load: a directory, or a name
 * ending in .index.json. */
int model_path_sharded(const char *path);
/* The safetensors files of m (1 for one file, the shards, 0 raw) and
 * the header of file k (8-byte length + JSON). */
size_t model_n_files(const model *m);
/* a and b are split into the same safetensors files (one each, or shards
 * of the same names and data sizes), so that file k means one file. */
int model_same_files(const model *a, const model *b);
const uint8_t *model_file_header(const model *m, size_t k, size_t *len);
/* Put json (the header JSON without its 8-byte length) in place of file
 * k's safetensors header: it must give file k the same tensor layout
 * (FORMAT.md 4.1). 0, or -1 with m unchanged. */
int model_set_header(model *m, size_t k, const uint8_t *json, size_t len, char *err,
		     size_t errlen);
/* Put json in place of a sharded m's index: it must map the same tensors
 * to the same files. 0, or -1 with m unchanged. */
int model_set_index(model *m, const uint8_t *json, size_t len, char *err, size_t errlen);
/* Write sharded m into dir (created if missing; an existing one only
 * with force, or when it is in_place): every shard and the index, each to
 * a temporary in dir, renamed only once all are written; on error
 * nothing is left (a dir created here is removed). */
int model_save_dir(const model *m, const char *dir, int force, const char *in_place, char *err,
		   size_t errlen);
/* The lowest and highest N >= from of the steps in DIR: files
 * step-N.safetensors and sharded checkpoints step-N/ (N of at least 4
 * digits, as written with %04u). 0 if there is none. */
int steps_scan(const char *dir, uint32_t from, uint32_t *lo, uint32_t *hi);
/* The highest (at most max) N in [from, to) of those steps, ascending in
 * out; their count. */
unsigned steps_last(const char *dir, uint32_t from, uint32_t to, uint32_t *out, unsigned max);
/* The path of step n in dir: DIR/step-%04u.safetensors, or where that is
 * not there and the directory DIR/step-%04u/ is, that (a sharded
 * checkpoint). out holds the file's name when neither is there. */
void step_path(char *out, size_t outlen, const char *dir, uint32_t n);
/* a and b exist and are the same file (through links too) */
int same_file(const char *a, const char *b);
/* For the tools: when the output path out is the input in (NULL: none),
 * print why `bfpatch cmd` will not write it and return 2; else 0. */
int refuse_same(const char *cmd, const char *out, const char *in, const char *what);
/* Write m to path atomically: temporary file in the same directory,
 * fsync, rename, fsync of the directory. Leaves nothing on error. */
int model_save(const model *m, const char *path, char *err, size_t errlen);

/* Build a raw model of n words (params allocated, zeroed). */
int model_init_raw(model *m, uint64_t n);

/* Fill manifest view of m. */
void model_manifest(const model *m, bfp_manifest *mf);

void model_free(model *m);

/* The huge page size of the hugetlbfs the fd's file is on, else 0: files
 * there take no write(2), and their sizes are whole huge pages. */
size_t huge_unit(int fd);

/* Write bufs to path atomically: PATH.tmp.XXXXXX, fsync, rename. A symbolic
 * link stays and the file it names is replaced; an existing device, FIFO
 * or socket (-o /dev/stdout) is written in place; on hugetlbfs the file is
 * filled through a mapping, in whole huge pages. */
int write_file_atomic(const char *path, const void *const *bufs,
		      const size_t *lens, size_t nbufs, char *err, size_t errlen);

/* write_file_atomic, but only where nothing is: the temporary is renamed
 * without replacing, so two creators racing on one file cannot both win
 * (the loser gets "PATH exists"). */
int write_file_new(const char *path, const void *const *bufs, const size_t *lens,
		   size_t nbufs, char *err, size_t errlen);

/* For the tools: SIGINT, SIGTERM, SIGHUP and SIGBUS (unless ignored)
 * first remove the temporaries write_file_atomic() is writing (a SIGBUS
 * with a model mapped also says that its file shrank), then end the
 * process as before; SIGXFSZ is ignored, so a file size limit is a write error. */
void atomic_cleanup_on_signals(void);

/* Format an error message into err (errlen bytes); returns -1. */
int set_err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* 64-byte aligned allocation of n bytes, zeroed; NULL on failure. */
void *alloc_aligned(size_t n);

/* For the programs' main(): keep freed heap memory for the next version
 * instead of giving it back to the kernel (glibc malloc; elsewhere
 * nothing). Encoding a version allocates its frame buffers anew; handed
 * back and faulted in again each time, they cost a process that encodes
 * version after version 15-20% of its encode time (32 M parameters
 * through patch_encode on one thread, 7 times: 1.31-1.37 G params/s,
 * 1.62 with this), where glibc's own thresholds had not risen yet
 * (bench_e2e's publisher showed no difference). Blocks of 32 MB and
 * more still come from the kernel and go back to it; up to 256 MB of
 * free heap is kept. */
void malloc_keep_freed(void);

#endif
