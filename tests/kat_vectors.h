/*
 * kat_vectors.h: the known-answer vectors: inputs made by the test PRNG
 * (bfp_test.h) from fixed seeds, and the encoder options for each.
 */
#ifndef BFP_KAT_VECTORS_H
#define BFP_KAT_VECTORS_H

#include "bfp_test.h"

enum kat_kind {
	KAT_WEIGHTS, /* t_weight bases, t_mutate changes */
	KAT_EDGE,    /* special values instead of weights */
	KAT_RL,      /* 28 binades; small weights change more often and by more
			steps, as under Adam (every magnitude code path) */
	KAT_REINIT,  /* KAT_WEIGHTS with a block of weights drawn anew (a
			re-initialised layer): keyframe-coded frames inside the
			patch, with FORMAT.md's IN_PATCH flag */
	KAT_GROW,    /* KAT_RL with steps of more than one 8 times larger in
			the last third: past the changes a model is planned
			from, magnitudes beyond its tables' symbols (escapes) */
	KAT_TRAINED, /* targets shaped like trained weights (kat_trained), a
			new scale every 1500 values and a few zeros: keyframe-exp
			and keyframe-expm frames (formats 1.1 and 1.2) */
	KAT_STEEP,   /* targets whose top binade is rarer than the next by a
			factor that grows every 2000 values (kat_steep):
			keyframe-expm tables with every share of FORMAT.md
			3.11's PM table */
	KAT_DEEP,    /* targets whose binades each hold about 0.38 of the
			values of the one below (kat_deep), so that the rare
			ones are at the top, where the table must name them:
			keyframe-huf codes that would be longer than 11 bits
			but for FORMAT.md 3.12's limit */
};

typedef struct kat_vector {
	const char *name;
	size_t n;
	uint32_t ppm;        /* change density (KAT_WEIGHTS, KAT_RL) */
	uint32_t frame_size;
	uint32_t flags;      /* BFP_ENC_F_* */
	uint32_t sparse;     /* bfp_sparse_mode */
	int kind;            /* enum kat_kind */
	uint64_t seed;
} kat_vector;

/* Self-contained sparse frames (edge: with dense frames; reinit: with
 * keyframe-coded frames in the patch), frames sharing a model (the
 * encoder's default), and a keyframe stream: every encoding but
 * keyframe-zstd, whose bytes depend on the zstd version. Format 1.1:
 * keyframe-exp frames in a keyframe stream and in a patch. Format 1.2:
 * keyframe-expm frames in keyframe streams (1200 and 8900-byte frames,
 * the latter near the 8192 values a frame may hold; steep: tables that
 * use every share of the PM table) and in a patch. Format 1.3: the same
 * with keyframe-huf frames. */
static const kat_vector kat_vectors[] = {
	{"sparse", 60000, 50000, 1200, 0, BFP_SPARSE_SELF_CONTAINED, KAT_WEIGHTS, 111},
	{"edge", 777, 0, BFP_FRAME_SIZE_MIN, 0, BFP_SPARSE_SELF_CONTAINED, KAT_EDGE, 112},
	{"rl", 40000, 5000, 1200, 0, BFP_SPARSE_SELF_CONTAINED, KAT_RL, 113},
	{"rl-jumbo", 30011, 5000, 8900, 0, BFP_SPARSE_SELF_CONTAINED, KAT_RL, 114},
	{"model", 60000, 50000, 1200, 0, BFP_SPARSE_SHARED, KAT_WEIGHTS, 117},
	{"rl-model", 60000, 5000, 1200, 0, BFP_SPARSE_SHARED, KAT_RL, 118},
	{"rl-model-jumbo", 50021, 8000, 8900, 0, BFP_SPARSE_SHARED, KAT_RL, 119},
	{"grow-model", 100000, 100000, 1200, 0, BFP_SPARSE_SHARED, KAT_GROW, 120},
	{"reinit", 20000, 20000, 1200, 0, BFP_SPARSE_SELF_CONTAINED, KAT_REINIT, 110},
	{"keyframe", 1000, 0, 300, BFP_ENC_F_KEYFRAME, 0, KAT_WEIGHTS, 103},
	{"keyframe-exp", 7001, 0, 1200, BFP_ENC_F_KEYFRAME | BFP_ENC_F_KEY_EXP, 0, KAT_TRAINED, 121},
	{"reinit-exp", 20000, 20000, 1200, BFP_ENC_F_KEY_EXP, BFP_SPARSE_SELF_CONTAINED, KAT_REINIT,
	 122},
	{"keyframe-expm", 7001, 0, 1200, BFP_ENC_F_KEYFRAME | BFP_ENC_F_KEY_EXPM, 0, KAT_TRAINED, 123},
	{"keyframe-expm-jumbo", 20011, 0, 8900, BFP_ENC_F_KEYFRAME | BFP_ENC_F_KEY_EXPM, 0,
	 KAT_TRAINED, 124},
	{"reinit-expm", 20000, 20000, 1200, BFP_ENC_F_KEY_EXPM, BFP_SPARSE_SELF_CONTAINED,
	 KAT_REINIT, 125},
	{"keyframe-expm-steep", 22000, 0, 1200, BFP_ENC_F_KEYFRAME | BFP_ENC_F_KEY_EXPM, 0,
	 KAT_STEEP, 126},
	{"keyframe-huf", 7001, 0, 1200, BFP_ENC_F_KEYFRAME | BFP_ENC_F_KEY_HUF, 0, KAT_TRAINED, 127},
	{"keyframe-huf-jumbo", 20011, 0, 8900, BFP_ENC_F_KEYFRAME | BFP_ENC_F_KEY_HUF, 0,
	 KAT_TRAINED, 128},
	{"keyframe-huf-steep", 22000, 0, 1200, BFP_ENC_F_KEYFRAME | BFP_ENC_F_KEY_HUF, 0,
	 KAT_STEEP, 129},
	{"reinit-huf", 20000, 20000, 1200, BFP_ENC_F_KEY_HUF, BFP_SPARSE_SELF_CONTAINED, KAT_REINIT,
	 130},
	{"keyframe-huf-deep", 20011, 0, 8900, BFP_ENC_F_KEYFRAME | BFP_ENC_F_KEY_HUF, 0, KAT_DEEP,
	 131},
};

/* KAT_TRAINED: below the top binades of each 1500 values (its scale)
 * every binade holds about half the values of the one above; one value
 * in 300 is zero (the last symbol's escapes). */
static inline uint16_t kat_trained(uint64_t *s, size_t i)
{
	uint64_t r = t_rand(s);
	unsigned top = 117 + (unsigned)((i / 1500) % 6);
	unsigned k = (unsigned)__builtin_ctzll(r | (1ull << 30)) + (unsigned)((r >> 62) & 1);
	uint16_t sign = (uint16_t)((r >> 40) & 0x8000u);
	if ((r >> 32) % 300 == 0)
		return sign;
	return (uint16_t)(sign | ((top - k) << 7) | ((r >> 48) & 0x7Fu));
}

/* KAT_STEEP: in block b of 2000 values, with d = 2 + b mod 11, the top
 * binade holds one value in 1 + 2^(d/2 + 1) (a threshold out of 2^16),
 * so the next holds about 2^(d/2) times as many (table weights d apart:
 * each d of FORMAT.md 3.11 from 2 to 12); below it each binade holds half
 * the values of the one above. */
static inline uint16_t kat_steep(uint64_t *s, size_t i)
{
	static const uint16_t top_share[11] = {13107, 9845, 7282, 5322, 3855, 2774,
					       1986,  1417, 1008, 716,  508};
	uint64_t r = t_rand(s);
	unsigned k = (r & 0xFFFF) < top_share[(i / 2000) % 11]
			     ? 0
			     : 1 + (unsigned)__builtin_ctzll((r >> 16) | (1ull << 30));
	uint16_t sign = (uint16_t)((r >> 40) & 0x8000u);
	return (uint16_t)(sign | ((120 - k) << 7) | ((r >> 48) & 0x7Fu));
}

/* KAT_DEEP: the binade above exponent 110 k times, k the number of
 * draws in a row below 389 out of 1024, at most 40. */
static inline uint16_t kat_deep(uint64_t *s)
{
	unsigned k = 0;
	uint64_t r = t_rand(s);
	const uint64_t low = r;
	for (unsigned c = 0; k < 40; c++) {
		if (c == 6) {
			r = t_rand(s);
			c = 0;
		}
		if (((r >> (10 * c)) & 1023) >= 389)
			break;
		k++;
	}
	const unsigned e = 110 + k;
	return (uint16_t)(((low >> 60) & 1) << 15 | e << 7 | ((low >> 61) & 0x7) << 4 |
			  (t_rand(s) & 0xF));
}

/* KAT_RL: exponent field 100..127; a weight of exponent e changes with
 * probability ppm * 2^(118-e) (capped at 90%) by about 2^(118-e) steps,
 * more often fewer than more (all integer arithmetic); from grow on, by 8
 * times as many where that is more than one. */
static inline void kat_rl(uint16_t *base, uint16_t *tgt, size_t n, uint32_t ppm,
			  size_t grow, uint64_t *s)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t r = t_rand(s);
		unsigned e = 100 + (unsigned)(r % 28);
		base[i] = (uint16_t)(((r >> 8) & 0x8000u) | (e << 7) | ((r >> 16) & 0x7Fu));
		tgt[i] = base[i];
		uint64_t p = e >= 118 ? ppm >> (e - 118) : (uint64_t)ppm << (118 - e);
		if (p > 900000)
			p = 900000;
		r = t_rand(s);
		if (r % 1000000u >= p)
			continue;
		unsigned sh = e >= 118 ? 0 : 118 - e, mag;
		if (sh > 9)
			sh = 9;
		if (sh == 0) {
			mag = 1;
		} else {
			unsigned top = 1u << sh, w = (unsigned)((r >> 24) % 16);
			/* below the top step 3 times in 4, by up to a half */
			mag = w < 12 ? top - (unsigned)((r >> 32) % (top / 2 + 1))
				     : top + (unsigned)((r >> 32) % (top / 4 + 1));
		}
		if (i >= grow && sh > 0)
			mag *= 8;
		int step = (r >> 50) & 1 ? -(int)mag : (int)mag;
		tgt[i] = bfp_unkey((uint16_t)(bfp_key(base[i]) + step));
	}
}

static inline void kat_inputs(const kat_vector *v, uint16_t *base, uint16_t *tgt)
{
	uint64_t s = v->seed;
	if (v->kind == KAT_RL || v->kind == KAT_GROW) {
		kat_rl(base, tgt, v->n, v->ppm, v->kind == KAT_GROW ? 2 * v->n / 3 : v->n, &s);
		return;
	}
	if (v->kind == KAT_TRAINED || v->kind == KAT_STEEP || v->kind == KAT_DEEP) {
		for (size_t i = 0; i < v->n; i++) {
			base[i] = t_weight(&s);
			tgt[i] = v->kind == KAT_TRAINED ? kat_trained(&s, i)
				 : v->kind == KAT_STEEP ? kat_steep(&s, i)
							: kat_deep(&s);
		}
		return;
	}
	if (v->kind == KAT_WEIGHTS || v->kind == KAT_REINIT) {
		for (size_t i = 0; i < v->n; i++)
			base[i] = t_weight(&s);
		t_mutate(base, tgt, v->n, v->ppm, &s);
		if (v->kind == KAT_REINIT) /* the middle fifth drawn anew */
			for (size_t i = 2 * v->n / 5; i < 3 * v->n / 5; i++)
				tgt[i] = t_weight(&s);
		return;
	}
	static const uint16_t sp[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x7F80, 0xFF80,
				      0x7FC1, 0xFFFF, 0x7F7F, 0x3F80, 0x3F7F, 0x007F};
	for (size_t i = 0; i < v->n; i++) {
		base[i] = sp[t_rand(&s) % 12];
		tgt[i] = (t_rand(&s) % 4) ? base[i] : sp[t_rand(&s) % 12];
	}
}

static inline bfp_encode_opts kat_opts(const kat_vector *v)
{
	bfp_encode_opts o;
	memset(&o, 0, sizeof(o));
	o.frame_size = v->frame_size;
	o.model_id = 0x6B61742D76656374ull; /* "kat-vect" */
	o.flags = v->flags;
	o.sparse = v->sparse;
	o.base_version = (v->flags & BFP_ENC_F_KEYFRAME) ? 0 : 41;
	o.target_version = 42;
	o.frame_count = 1;
	return o;
}

#endif
