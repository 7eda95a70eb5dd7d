/*
 * bfp_test.h: shared helpers and domain asserts for the cmocka suites:
 * the seeded generator of RL-like BF16 deltas (bfp_gen.h), whole-range
 * encode into a frame list, and apply-all with an independent byte
 * compare.
 */
#ifndef BFP_TEST_H
#define BFP_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "bfpatch.h"
#include "bfp_gen.h"

/* The sparse modes (bfp_encode_opts.sparse), the encoding of a range's
 * first sparse frame in each and that of the others (shared: the first
 * carries the model, the others refer to it). */
enum { T_SPARSE_N = 2 };
static const uint32_t t_sparse_mode[T_SPARSE_N] = {BFP_SPARSE_SHARED,
						   BFP_SPARSE_SELF_CONTAINED};
static const uint8_t t_sparse_first[T_SPARSE_N] = {BFP_ENC_SPARSE_MODEL, BFP_ENC_SPARSE};
static const uint8_t t_sparse_encs[T_SPARSE_N] = {BFP_ENC_SPARSE_REF, BFP_ENC_SPARSE};

/* A base of n weights (t_weight) and a target from it (t_mutate). */
static inline void t_weights_changed(uint16_t *base, uint16_t *tgt, size_t n, uint32_t ppm,
				     uint64_t *s)
{
	for (size_t i = 0; i < n; i++)
		base[i] = t_weight(s);
	t_mutate(base, tgt, n, ppm, s);
}

typedef struct t_frames {
	uint8_t *buf;
	size_t len, cap;
	size_t n;
	size_t *off; /* start of frame i */
	size_t off_cap;
} t_frames;

static inline void t_frames_free(t_frames *f)
{
	free(f->buf);
	free(f->off);
	memset(f, 0, sizeof(*f));
}

static inline void t_frames_push(t_frames *f, const void *p, size_t len)
{
	if (f->len + len > f->cap) {
		f->cap = (f->len + len) * 2 + 4096;
		f->buf = realloc(f->buf, f->cap);
		assert_non_null(f->buf);
	}
	if (f->n == f->off_cap) {
		f->off_cap = f->off_cap * 2 + 16;
		f->off = realloc(f->off, (f->off_cap + 1) * sizeof(size_t));
		assert_non_null(f->off);
	}
	memcpy(f->buf + f->len, p, len);
	f->off[f->n++] = f->len;
	f->len += len;
	f->off[f->n] = f->len;
}

static inline size_t t_frame_len(const t_frames *f, size_t i)
{
	return f->off[i + 1] - f->off[i];
}

/* Encode [begin, end) with opts into f; returns the status of the end. */
static inline bfp_status t_encode(const bfp_encode_opts *o, const uint16_t *base,
				  const uint16_t *tgt, uint64_t n, uint64_t begin,
				  uint64_t end, t_frames *f)
{
	static bfp_encoder enc; /* large; tests are single-threaded */
	uint8_t out[BFP_FRAME_SIZE_MAX];
	size_t len;
	bfp_status st = bfp_encoder_init(&enc, o, base, tgt, n, begin, end);
	if (st != BFP_OK)
		return st;
	while ((st = bfp_encode_next(&enc, out, sizeof(out), &len)) == BFP_OK) {
		uint32_t fs = o->frame_size ? o->frame_size : BFP_FRAME_SIZE_DEFAULT;
		assert_true(len <= fs);
		t_frames_push(f, out, len);
	}
	return st == BFP_DONE ? BFP_OK : st;
}

/* A zstd workspace for the tests (NULL when built without zstd). */
static inline void *t_zstd_ws(void)
{
	static void *ws;
	if (!ws && bfp_zstd_workspace_size())
		ws = malloc(bfp_zstd_workspace_size());
	return ws;
}

/* Apply every frame to w; all must succeed. */
static inline void t_apply_all(const t_frames *f, const bfp_apply_opts *o_in,
			       uint16_t *w, uint64_t n)
{
	static bfp_decoder dec;
	bfp_apply_opts o2 = *o_in, *o = &o2;
	o2.zstd_workspace = t_zstd_ws();
	o2.zstd_workspace_size = bfp_zstd_workspace_size();
	assert_int_equal(bfp_decoder_init(&dec, 0), BFP_OK);
	for (size_t i = 0; i < f->n; i++) {
		bfp_status st = bfp_decode_apply(&dec, o, f->buf + f->off[i],
						 t_frame_len(f, i), w, n, NULL);
		if (st != BFP_OK)
			fail_msg("frame %zu: %s", i, bfp_status_str(st));
	}
}

/* Domain assert: frames cover [begin, end) exactly, in order, no gaps. */
static inline void t_assert_cover(const t_frames *f, uint64_t begin, uint64_t end)
{
	uint64_t at = begin;
	for (size_t i = 0; i < f->n; i++) {
		bfp_frame_header h;
		assert_int_equal(bfp_frame_parse(f->buf + f->off[i], t_frame_len(f, i), &h),
				 BFP_OK);
		assert_true(h.range_begin == at);
		at += h.range_len;
	}
	assert_true(at == end);
}

#define assert_words_equal(a, b, n) \
	assert_memory_equal((a), (b), (size_t)(n) * sizeof(uint16_t))

#endif
