/*
 * baseline.c: the PULSESync-style baseline size (moved here from
 * bench_codec.c so the bench and bfpatch report measure it with one
 * implementation). Analysis only: nothing here is on the patch path.
 */
#include "baseline.h"

#include <stdlib.h>
#include <string.h>

#if BFP_HAVE_ZSTD
#include <zstd.h>
#endif

int bl_put(bl_buf *b, const void *src, size_t n)
{
	if (b->n + n > b->cap) {
		size_t nc = (b->n + n) * 2 + 4096;
		uint8_t *np = realloc(b->p, nc);
		if (!np)
			return -1;
		b->p = np;
		b->cap = nc;
	}
	if (n)
		memcpy(b->p + b->n, src, n);
	b->n += n;
	return 0;
}

size_t bl_zstd_size(const bl_buf *b, int level)
{
#if BFP_HAVE_ZSTD
	size_t cap = ZSTD_compressBound(b->n);
	void *o = malloc(cap);
	if (!o)
		return 0;
	size_t r = ZSTD_compress(o, cap, b->p ? (const void *)b->p : "", b->n, level);
	free(o);
	return ZSTD_isError(r) ? 0 : r;
#else
	(void)b;
	(void)level;
	return 0;
#endif
}

size_t bl_pulse_size(const model *m, const uint16_t *a, const uint16_t *b)
{
	bl_buf out = {0};
	uint32_t *rows = NULL, *cols = NULL;
	uint16_t *vals = NULL;
	size_t cap = 0, z = 0;
	int fail = 0;
	for (size_t t = 0; t < m->n_tensors && !fail; t++) {
		const bfp_tensor *x = &m->tensors[t];
		uint64_t b0 = x->byte_begin / 2, e0 = x->byte_end / 2;
		uint64_t ncols = x->ndim >= 2 ? x->shape[x->ndim - 1] : (e0 - b0);
		size_t k = 0;
		if (!ncols)
			ncols = 1;
		for (uint64_t i = b0; i < e0 && !fail; i++) {
			if (a[i] == b[i])
				continue;
			if (k == cap) {
				size_t nc = cap * 2 + 1024;
				uint32_t *nr = realloc(rows, nc * 4);
				if (nr)
					rows = nr;
				uint32_t *ncl = realloc(cols, nc * 4);
				if (ncl)
					cols = ncl;
				uint16_t *nv = realloc(vals, nc * 2);
				if (nv)
					vals = nv;
				if (!nr || !ncl || !nv) {
					fail = 1;
					break;
				}
				cap = nc;
			}
			rows[k] = (uint32_t)((i - b0) / ncols);
			cols[k] = (uint32_t)((i - b0) % ncols);
			vals[k] = b[i];
			k++;
		}
		if (fail)
			break;
		uint64_t nk = k;
		fail |= bl_put(&out, &nk, 8);
		int r8 = 1, c16 = 1;
		for (size_t j = 0; j < k; j++) {
			uint32_t dr = rows[j] - (j ? rows[j - 1] : 0);
			uint32_t dc = (j && rows[j] == rows[j - 1]) ? cols[j] - cols[j - 1] : cols[j];
			r8 &= dr < 256;
			c16 &= dc < 65536;
		}
		uint8_t flags = (uint8_t)(r8 | (c16 << 1));
		fail |= bl_put(&out, &flags, 1);
		for (size_t j = 0; j < k; j++) {
			uint32_t dr = rows[j] - (j ? rows[j - 1] : 0);
			if (r8) {
				uint8_t v = (uint8_t)dr;
				fail |= bl_put(&out, &v, 1);
			} else {
				fail |= bl_put(&out, &dr, 4);
			}
		}
		for (size_t j = 0; j < k; j++) {
			uint32_t dc = (j && rows[j] == rows[j - 1]) ? cols[j] - cols[j - 1] : cols[j];
			if (c16) {
				uint16_t v = (uint16_t)dc;
				fail |= bl_put(&out, &v, 2);
			} else {
				fail |= bl_put(&out, &dc, 4);
			}
		}
		fail |= bl_put(&out, vals, k * 2);
	}
	if (!fail)
		z = bl_zstd_size(&out, 1);
	free(out.p);
	free(rows);
	free(cols);
	free(vals);
	return z;
}
