/*
 * baseline.h: sizes of the published sparse-sync encodings that bfpatch is
 * measured against, computed from the same checkpoints (bench_codec prints
 * them next to bfpatch; bfpatch report draws them in the packaging budget).
 */
#ifndef BFP_BASELINE_H
#define BFP_BASELINE_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

/* A growable byte buffer; zero-initialise, free(b.p) when done. */
typedef struct bl_buf {
	uint8_t *p;
	size_t n, cap;
} bl_buf;

/* Append n bytes; 0, or -1 when out of memory (b unchanged). */
int bl_put(bl_buf *b, const void *src, size_t n);

/* Bytes of b compressed by zstd at level; 0 when this build has no zstd,
 * on zstd errors and when out of memory. */
size_t bl_zstd_size(const bl_buf *b, int level);

/* PULSESync-style size of the change from a to b (m's tensor layout, both
 * m->n_params words): per tensor the changed (row, col) coordinates in
 * row-major order, row deltas as uint8 when all fit else int32, column
 * deltas (reset at each new row) as uint16 when all fit else int32, raw
 * BF16 new values, the whole payload through zstd level 1, as its public
 * code does it. 0 when unavailable (no zstd, out of memory). */
size_t bl_pulse_size(const model *m, const uint16_t *a, const uint16_t *b);

#endif
