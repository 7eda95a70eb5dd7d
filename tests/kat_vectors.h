/*
 * kat_vectors.h: the known-answer vectors: inputs made by the test PRNG
 * (bfp_test.h) from fixed seeds, and the encoder options for each.
 */
#ifndef BFP_KAT_VECTORS_H
#define BFP_KAT_VECTORS_H

#include "bfp_test.h"

typedef struct kat_vector {
	const char *name;
	size_t n;
	uint32_t ppm;        /* change density; 0 with edge = 1 */
	uint32_t frame_size;
	uint32_t flags;      /* BFP_ENC_F_* */
	int edge;            /* special values instead of weights */
	uint64_t seed;
} kat_vector;

static const kat_vector kat_vectors[] = {
	{"sparse", 60000, 50000, 1200, 0, 0, 101},
	{"dense", 3000, 400000, 600, 0, 0, 102},
	{"keyframe", 1000, 0, 300, BFP_ENC_F_KEYFRAME, 0, 103},
	{"edge", 777, 0, BFP_FRAME_SIZE_MIN, 0, 1, 104},
	{"jumbo", 100001, 30000, 8900, 0, 0, 105},
};

static inline void kat_inputs(const kat_vector *v, uint16_t *base, uint16_t *tgt)
{
	uint64_t s = v->seed;
	if (!v->edge) {
		for (size_t i = 0; i < v->n; i++)
			base[i] = t_weight(&s);
		t_mutate(base, tgt, v->n, v->ppm, &s);
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
	o.base_version = (v->flags & BFP_ENC_F_KEYFRAME) ? 0 : 41;
	o.target_version = 42;
	o.frame_count = 1;
	return o;
}

#endif
