/*
 * wbuf.h: the actor's weight buffer, a file under /dev/shm (or hugetlbfs)
 * that the shim writes and actors map: a 4 KiB header (layout below), the
 * model's safetensors header (so readers can find tensors), then the
 * parameters, page-aligned. Versions change under a sequence counter:
 * odd while a commit is in progress, so a reader that sees the same even
 * value before and after reading saw one whole version.
 */
#ifndef BFP_WBUF_H
#define BFP_WBUF_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"

#define WBUF_MAGIC "BFPWBUF1"
#define WBUF_HDR 4096u

enum { WBUF_READY = 0, WBUF_COMMITTING = 1 };

typedef struct wbuf_hdr {
	char magic[8];
	uint32_t layout;            /* 1 */
	uint32_t hdr_size;          /* WBUF_HDR */
	uint64_t n_params;
	uint64_t model_id;
	uint64_t st_offset;         /* safetensors header bytes (0 len: raw) */
	uint64_t st_len;
	uint64_t data_offset;       /* parameters, page-aligned */
	uint64_t data_bytes;        /* the model's data section size */
	_Atomic uint32_t version;   /* committed version */
	_Atomic uint32_t state;     /* WBUF_READY or WBUF_COMMITTING */
	_Atomic uint32_t target;    /* version being committed */
	uint32_t pad;
	_Atomic uint64_t seq;       /* odd while committing */
} wbuf_hdr;

typedef struct wbuf {
	int fd;
	uint8_t *map;
	size_t map_len;
	wbuf_hdr *h;
	uint16_t *params;
} wbuf;

/* Create path (atomically: temporary + rename) holding model m at
 * version; fails if path exists unless replace. */
int wbuf_create(const char *path, const model *m, uint32_t version, int replace,
		char *err, size_t errlen);
int wbuf_open(wbuf *w, const char *path, char *err, size_t errlen);
void wbuf_close(wbuf *w);

/* Mark a commit to target as started / finished (flushes to the file). */
void wbuf_begin(wbuf *w, uint32_t target);
void wbuf_end(wbuf *w);

#endif
