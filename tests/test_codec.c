/*
 * test_codec.c: bit-exact round trips of the codec on edge patterns and
 * RL-like deltas, canonical output, SIMD/scalar equivalence, and one test
 * per reject rule of FORMAT.md 2.4 and 3 (exact status, buffer untouched).
 */
#include "bfp_test.h"
#include "../codec/internal.h" /* bit reader and writer (test_bit_codes_*) */
#include "../codec/rans.h"     /* table symbols (test_table_symbols_invert) */
#include "../codec/kxlog2.h"   /* the keyframe-exp logarithms (test_kx_log2_*) */
#include "../codec/huf.h"      /* keyframe-huf's code (test_huf_code_*) */
#include "../codec/classes.h"  /* the gather's estimate (test_gather_estimate) */

#define MODEL 0x1122334455667788ull

static void reseal(uint8_t *p, size_t len);
static void put32(uint8_t *p, uint32_t v);

static bfp_encode_opts opts(uint32_t fs)
{
	bfp_encode_opts o;
	memset(&o, 0, sizeof(o));
	o.frame_size = fs;
	o.model_id = MODEL;
	o.base_version = 7;
	o.target_version = 8;
	o.frame_count = 1u << 30;
	return o;
}

static bfp_apply_opts aopts(void)
{
	bfp_apply_opts o;
	memset(&o, 0, sizeof(o));
	o.model_id = MODEL;
	o.base_version = 7;
	return o;
}

/* Encode all of base->tgt, check coverage, apply to a copy of base and
 * compare with tgt byte for byte. Returns the frame count. */
static size_t roundtrip(const uint16_t *base, const uint16_t *tgt, size_t n,
			bfp_encode_opts o)
{
	t_frames f = {0};
	bfp_apply_opts ao = aopts();
	uint16_t *w = malloc(n * 2 + 2);
	assert_non_null(w);
	memcpy(w, base, n * 2);
	assert_int_equal(t_encode(&o, base, tgt, n, 0, n, &f), BFP_OK);
	t_assert_cover(&f, 0, n);
	if (o.flags & BFP_ENC_F_KEYFRAME)
		ao.base_version = 0;
	t_apply_all(&f, &ao, w, n);
	assert_words_equal(w, tgt, n);
	size_t frames = f.n;
	t_frames_free(&f);
	free(w);
	return frames;
}

static void roundtrip_all_sizes(const uint16_t *base, const uint16_t *tgt, size_t n)
{
	static const uint32_t sizes[] = {BFP_FRAME_SIZE_MIN, 200, 1200, 1500,
					 8900, BFP_FRAME_SIZE_MAX};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		bfp_encode_opts o = opts(sizes[i]);
		roundtrip(base, tgt, n, o);
		o.flags = BFP_ENC_F_NO_DENSE;
		roundtrip(base, tgt, n, o);
		o.flags = BFP_ENC_F_SCALAR;
		roundtrip(base, tgt, n, o);
		o.flags = 0;
		o.sparse = BFP_SPARSE_SELF_CONTAINED;
		roundtrip(base, tgt, n, o);
		o.sparse = BFP_SPARSE_SHARED;
		o.flags = BFP_ENC_F_KEYFRAME;
		o.base_version = 0;
		roundtrip(NULL == base ? tgt : base, tgt, n, o);
	}
}

/* RL-like deltas at several densities and odd lengths round-trip exactly
 * at every frame size limit. */
static void test_rl_deltas_round_trip_at_every_frame_size(void **state)
{
	(void)state;
	static const size_t lens[] = {1, 2, 31, 33, 1000, 65537, 300001};
	static const uint32_t ppm[] = {0, 100, 10000, 30000, 300000, 1000000};
	uint64_t s = 42;
	for (size_t a = 0; a < sizeof(lens) / sizeof(lens[0]); a++) {
		size_t n = lens[a];
		uint16_t *b = malloc(n * 2), *t = malloc(n * 2);
		for (size_t i = 0; i < n; i++)
			b[i] = t_weight(&s);
		for (size_t p = 0; p < sizeof(ppm) / sizeof(ppm[0]); p++) {
			t_mutate(b, t, n, ppm[p], &s);
			if (n > 70000 && p % 2)
				continue; /* keep the suite fast */
			roundtrip_all_sizes(b, t, n);
		}
		free(b);
		free(t);
	}
}

/* Special bit patterns and every kind of change between them round-trip:
 * +-0, NaN payloads, infinities, subnormals, sign flips, exponent
 * crossings, the largest jumps (including a delta of exactly -32768). */
static void test_special_values_and_huge_jumps_round_trip(void **state)
{
	(void)state;
	static const uint16_t pairs[][2] = {
		{0x0000, 0x8000}, {0x8000, 0x0000}, {0x0000, 0x0001},
		{0x8000, 0x8001}, {0x0001, 0x8001}, {0x7FC1, 0x7FC2},
		{0xFFFF, 0x7FFF}, {0x7F80, 0xFF80}, {0x7F80, 0x7F7F},
		{0x3F7F, 0x3F80}, {0x3F80, 0x3F7F}, {0xBF80, 0x3F80},
		{0x0000, 0x7FFF}, {0x8000, 0x7FFF}, {0x7FFF, 0x8000},
		{0xFFFF, 0x0000}, {0x0000, 0xFFFF}, {0x007F, 0x0080},
		{0x3C00, 0x3C01}, {0x3C00, 0x3BFF}, {0x4000, 0x3FFF},
	};
	enum { N = 4096 };
	static uint16_t b[N], t[N];
	uint64_t s = 7;
	size_t np = sizeof(pairs) / sizeof(pairs[0]);
	for (size_t i = 0; i < N; i++) {
		size_t k = (size_t)(t_rand(&s) % np);
		b[i] = pairs[k][0];
		t[i] = (t_rand(&s) % 3) ? pairs[k][1] : pairs[k][0];
	}
	roundtrip_all_sizes(b, t, N);
	/* every single 16-bit delta from a fixed base, sparse and dense */
	for (uint32_t d = 1; d < 65536; d += 257) {
		for (size_t i = 0; i < N; i++) {
			b[i] = (uint16_t)(i * 40503u);
			t[i] = (i % 97 == 0) ? bfp_unkey((uint16_t)(bfp_key(b[i]) + d)) : b[i];
		}
		roundtrip(b, t, N, opts(1200));
	}
}

/* Nothing changed: a handful of frames cover everything and verify. */
static void test_nothing_changed_costs_only_headers(void **state)
{
	(void)state;
	size_t n = 1u << 20;
	uint16_t *b = malloc(n * 2);
	uint64_t s = 1;
	for (size_t i = 0; i < n; i++)
		b[i] = t_weight(&s);
	size_t frames = roundtrip(b, b, n, opts(1200));
	assert_true(frames == 1);
	free(b);
}

/* Weights of one binade, 60% of them one step away; from index two_from
 * on, every 1000th two steps. */
static void one_binade(uint16_t *b, uint16_t *t, size_t n, uint64_t s, size_t two_from)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t r = t_rand(&s);
		b[i] = (uint16_t)(((r >> 8) & 0x8000u) | (120u << 7) | (r & 0x7Fu));
		int step = (r >> 20) % 10 < 6 ? ((r >> 30) & 1 ? 1 : -1) : 0;
		if (i >= two_from && i % 1000 == 0)
			step = 2;
		t[i] = bfp_unkey((uint16_t)(bfp_key(b[i]) + step));
	}
}

/* Sparse frames are filled to the size limit also where the encoder's
 * gather estimate runs high: weights of one binade, 60% of them one step
 * away (zero gaps run-coded, magnitudes all one: about two bits a change
 * against an estimate of three or more). Every frame but the range's
 * last is within 1/64 of the limit, in each sparse encoding. */
static void test_sparse_frames_are_full(void **state)
{
	(void)state;
	size_t n = 300000;
	uint16_t *b = malloc(n * 2), *t = malloc(n * 2);
	one_binade(b, t, n, 5, n);
	for (size_t f = 0; f < T_SPARSE_N; f++) {
		t_frames fr = {0};
		bfp_encode_opts o = opts(1200);
		o.sparse = t_sparse_mode[f];
		assert_int_equal(t_encode(&o, b, t, n, 0, n, &fr), BFP_OK);
		assert_true(fr.n > 10);
		for (size_t i = 0; i + 1 < fr.n; i++) {
			/* (by default the first frame carries the model) */
			assert_int_equal(fr.buf[fr.off[i] + 5],
					 i ? t_sparse_encs[f] : t_sparse_first[f]);
			if (t_frame_len(&fr, i) < 1200 - 1200 / 64)
				fail_msg("frame %zu of %zu: %zu bytes", i, fr.n, t_frame_len(&fr, i));
		}
		t_frames_free(&fr);
		roundtrip(b, t, n, o);
	}
	free(b);
	free(t);
}

/* FORMAT.md 3.6. Two ranges encoded with shared models (f: the sparse
 * mode of t_sparse_mode that shares them): each range's first frame
 * carries its model, the others refer to it. A frame that refers to a
 * model is rejected with BFP_E_NO_MODEL, the weights untouched, by a
 * decoder that holds no model or another range's; it decodes once its
 * model is loaded. Applied in reverse order, each frame after loading its
 * model from the frames by index, the patch gives the target exactly.
 * Returns the frames. */
static t_frames model_frames_need_their_model(size_t f)
{
	size_t n = 200000;
	uint16_t *b = malloc(n * 2), *t = malloc(n * 2), *w = malloc(n * 2);
	uint64_t s = 21;
	t_weights_changed(b, t, n, 30000, &s);
	t_frames fr = {0};
	bfp_encode_opts o = opts(1200);
	o.flags = BFP_ENC_F_NO_DENSE;
	o.sparse = t_sparse_mode[f];
	assert_int_equal(t_encode(&o, b, t, n, 0, n / 2, &fr), BFP_OK);
	const size_t second = fr.n;
	o.first_index = (uint32_t)second;
	assert_int_equal(t_encode(&o, b, t, n, n / 2, n, &fr), BFP_OK);
	assert_true(second > 2 && fr.n > second + 2);
	const uint8_t **fp = malloc(fr.n * sizeof(*fp));
	uint32_t *fl = malloc(fr.n * sizeof(*fl));
	for (size_t i = 0; i < fr.n; i++) {
		fp[i] = fr.buf + fr.off[i];
		fl[i] = (uint32_t)t_frame_len(&fr, i);
		uint32_t mi = 0;
		const uint8_t want = (i == 0 || i == second) ? t_sparse_first[f] : t_sparse_encs[f];
		assert_int_equal(fp[i][5], want);
		assert_int_equal(bfp_frame_model_index(fp[i], fl[i], &mi), BFP_OK);
		assert_int_equal(mi, i < second ? 0 : second);
	}
	static bfp_decoder d;
	bfp_apply_opts ao = aopts();
	assert_int_equal(bfp_decoder_init(&d, 0), BFP_OK);
	memcpy(w, b, n * 2);
	/* no model, then the other range's model */
	assert_int_equal(bfp_decode_apply(&d, &ao, fp[1], fl[1], w, n, NULL), BFP_E_NO_MODEL);
	assert_int_equal(bfp_decoder_load_model(&d, fp[second], fl[second]), BFP_OK);
	assert_int_equal(bfp_decode_apply(&d, &ao, fp[1], fl[1], w, n, NULL), BFP_E_NO_MODEL);
	assert_words_equal(w, b, n);
	/* frames without a model, and other encodings, are not models */
	assert_int_equal(bfp_decoder_load_model(&d, fp[1], fl[1]), BFP_E_ARG);
	/* its model missing from the frames by index */
	const uint8_t *hole = fp[0];
	fp[0] = NULL;
	assert_int_equal(bfp_decoder_model_for(&d, fp[1], fl[1], fp, fl, fr.n), BFP_E_NO_MODEL);
	fp[0] = hole;
	/* in reverse order, each with its model from the frames */
	for (size_t i = fr.n; i-- > 0;) {
		assert_int_equal(bfp_decoder_model_for(&d, fp[i], fl[i], fp, fl, fr.n), BFP_OK);
		assert_int_equal(bfp_decode_apply(&d, &ao, fp[i], fl[i], w, n, NULL), BFP_OK);
	}
	assert_words_equal(w, t, n);
	/* a reference before frame 0: frame 1 refers back one frame (b = 0,
	 * EG0 of 0: the payload's first bit is 1); as frame 0 it would refer
	 * to frame -1, which is corrupt */
	uint8_t p[BFP_FRAME_SIZE_MAX];
	memcpy(p, fp[1], fl[1]);
	assert_int_equal(p[BFP_HEADER_SIZE] & 1, 1);
	bfp_frame_header h;
	assert_int_equal(bfp_frame_parse(p, fl[1], &h), BFP_OK);
	assert_int_equal(bfp_frame_set_index(p, fl[1], 0, h.frame_count), BFP_OK);
	uint32_t mi;
	assert_int_equal(bfp_frame_model_index(p, fl[1], &mi), BFP_E_CORRUPT);
	memcpy(w, b, n * 2);
	assert_int_equal(bfp_decode_apply(&d, &ao, p, fl[1], w, n, NULL), BFP_E_CORRUPT);
	assert_words_equal(w, b, n);
	free(fp);
	free(fl);
	free(b);
	free(t);
	free(w);
	return fr;
}

static void test_model_frames_need_their_model(void **state)
{
	(void)state;
	t_frames fr = model_frames_need_their_model(0);
	t_frames_free(&fr);
}

/* A model is planned from the changes at the start of a range; a change
 * after them that its codes cannot say (here a two-step change in a class
 * whose planned changes were all single steps) ends the frame before it,
 * and the next frame carries a new model. Found by a known-answer vector:
 * the encoder had coded such a change as a single step, and the frame
 * failed its hash. */
static void test_model_codes_take_changes_past_the_plan(void **state)
{
	(void)state;
	size_t n = 150000;
	uint16_t *b = malloc(n * 2), *t = malloc(n * 2);
	one_binade(b, t, n, 23, 100001);
	for (size_t f = 0; f < 2; f++) {
		t_frames fr = {0};
		bfp_encode_opts o = opts(1200);
		o.flags = BFP_ENC_F_NO_DENSE;
		o.sparse = t_sparse_mode[f];
		roundtrip(b, t, n, o);
		assert_int_equal(t_encode(&o, b, t, n, 0, n, &fr), BFP_OK);
		size_t models = 0;
		for (size_t i = 0; i < fr.n; i++)
			models += fr.buf[fr.off[i] + 5] == t_sparse_first[f];
		assert_true(models >= 2);
		t_frames_free(&fr);
	}
	free(b);
	free(t);
}

/* bfp_frame_stats splits a sparse frame's bits by class: the changes of
 * each class match a count from the base and target (class rule of
 * FORMAT.md 3.3, written out here), and the parts add up to the payload
 * less its padding, in each sparse encoding. */
static void test_frame_stats_by_class(void **state)
{
	(void)state;
	size_t n = 200000;
	uint16_t *b = malloc(n * 2), *t = malloc(n * 2);
	uint64_t s = 11;
	t_weights_changed(b, t, n, 30000, &s);
	static bfp_decoder dec;
	assert_int_equal(bfp_decoder_init(&dec, 0), BFP_OK);
	for (size_t f = 0; f < T_SPARSE_N; f++) {
		t_frames fr = {0};
		bfp_encode_opts o = opts(1200);
		o.flags = BFP_ENC_F_NO_DENSE;
		o.sparse = t_sparse_mode[f];
		assert_int_equal(t_encode(&o, b, t, n, 0, n, &fr), BFP_OK);
		assert_true(fr.n > 5);
		for (size_t i = 0; i < fr.n; i++) {
			const uint8_t *p = fr.buf + fr.off[i];
			bfp_frame_header h;
			bfp_frame_stats st;
			uint32_t want[BFP_CLASSES] = {0}, sum_n = 0;
			uint64_t sum_h = 0, sum_p = 0, sum_v = 0;
			assert_int_equal(bfp_frame_parse(p, t_frame_len(&fr, i), &h), BFP_OK);
			assert_int_equal(bfp_frame_stats_get(&dec, p, t_frame_len(&fr, i), &st), BFP_OK);
			assert_int_equal(st.encoding, i ? t_sparse_encs[f] : t_sparse_first[f]);
			for (uint64_t x = h.range_begin; x < h.range_begin + h.range_len; x++) {
				unsigned e = (b[x] >> 7) & 0xFF;
				if (b[x] != t[x])
					want[e <= 108 ? 0 : e >= 123 ? 15 : e - 108]++;
			}
			for (unsigned c = 0; c < BFP_CLASSES; c++) {
				assert_int_equal(st.class_changes[c], want[c]);
				assert_true(st.class_model_bits[c] > 0); /* every count is coded */
				if (!want[c])
					assert_true(st.class_position_bits[c] == 0 &&
						    st.class_value_bits[c] == 0);
				sum_n += st.class_changes[c];
				sum_h += st.class_model_bits[c];
				sum_p += st.class_position_bits[c];
				sum_v += st.class_value_bits[c];
			}
			assert_int_equal(sum_n, st.n_changes);
			assert_int_equal(sum_p, st.position_bits);
			assert_int_equal(sum_v, st.value_bits);
			assert_true(sum_h <= st.model_bits);
			uint64_t used = (uint64_t)st.model_bits + st.position_bits + st.value_bits;
			assert_true(used <= 8ull * st.payload_len && used + 8 > 8ull * st.payload_len);
		}
		t_frames_free(&fr);
	}
	free(b);
	free(t);
}

/* Everything changed: every frame covers at least as many parameters as
 * a keyframe of the same size would (the encoder picks the densest). */
static void test_everything_changed_never_worse_than_keyframes(void **state)
{
	(void)state;
	size_t n = 100000;
	uint16_t *b = malloc(n * 2), *t = malloc(n * 2);
	uint64_t s = 3;
	t_frames f = {0};
	for (size_t i = 0; i < n; i++) {
		b[i] = t_weight(&s);
		t[i] = bfp_unkey((uint16_t)(bfp_key(b[i]) + 1));
	}
	bfp_encode_opts o = opts(1200);
	assert_int_equal(t_encode(&o, b, t, n, 0, n, &f), BFP_OK);
	for (size_t i = 0; i < f.n; i++) {
		bfp_frame_header h;
		assert_int_equal(bfp_frame_parse(f.buf + f.off[i], t_frame_len(&f, i), &h), BFP_OK);
		assert_true(h.range_len >= (1200 - BFP_HEADER_SIZE) / 2 || i == f.n - 1);
	}
	t_frames_free(&f);
	roundtrip(b, t, n, o);
	free(b);
	free(t);
}

/* Frames that hold as many changes as a frame may (BFP_CHANGES_MAX):
 * the decoder reads runs of zero gaps and of signs a block at a time,
 * writing past the run where the scratch has room; at the end of the
 * scratch it must not. Two classes: a few changes in class 0, whose steps
 * are decoded first, and the rest in class 8, in runs (one element in 24
 * unchanged), with a step of 2 now and then so that the magnitudes go in
 * runs too. Every sparse encoding, at two frame sizes. */
static void test_frames_at_the_change_limit_decode_exactly(void **state)
{
	(void)state;
	const size_t n = BFP_CHANGES_MAX * 25 / 24 + 5000;
	uint16_t *b = malloc(n * 2), *t = malloc(n * 2);
	uint64_t s = 11;
	for (size_t i = 0; i < n; i++) {
		const uint16_t mant = (uint16_t)(t_rand(&s) & 0x7F);
		b[i] = (uint16_t)((i % 50 == 0 ? 100u << 7 : 116u << 7) | mant);
		const uint64_t r = t_rand(&s) % 2400;
		const unsigned step = r < 100 ? 0 : r < 124 ? 2 : 1;
		t[i] = bfp_unkey((uint16_t)(bfp_key(b[i]) + step));
	}
	static const uint32_t sizes[] = {8900, BFP_FRAME_SIZE_MAX};
	for (size_t z = 0; z < 2; z++) {
		for (size_t f = 0; f < T_SPARSE_N; f++) {
			bfp_encode_opts o = opts(sizes[z]);
			o.flags = BFP_ENC_F_NO_DENSE;
			o.sparse = t_sparse_mode[f];
			t_frames fr = {0};
			bfp_decoder dec;
			bfp_frame_stats st;
			assert_int_equal(t_encode(&o, b, t, n, 0, n, &fr), BFP_OK);
			assert_int_equal(bfp_decoder_init(&dec, 0), BFP_OK);
			assert_int_equal(bfp_frame_stats_get(&dec, fr.buf, t_frame_len(&fr, 0), &st),
					 BFP_OK);
			if (st.n_changes != BFP_CHANGES_MAX || !st.class_changes[0])
				fail_msg("flags %u size %u: %u changes, %u of class 0", o.flags,
					 sizes[z], st.n_changes, st.class_changes[0]);
			t_frames_free(&fr);
			roundtrip(b, t, n, o);
		}
	}
	free(b);
	free(t);
}

/* A re-initialised block makes keyframe-coded frames inside a patch: they
 * carry IN_PATCH and the patch's base version (FORMAT.md 2.1), so that
 * receivers file them with the patch, while a keyframe stream's frames
 * carry neither; the parse rules of both hold. */
static void test_keyframe_coded_patch_frames_say_in_patch(void **state)
{
	(void)state;
	size_t n = 20000;
	uint16_t *b = malloc(n * 2), *t = malloc(n * 2);
	uint64_t s = 11;
	t_weights_changed(b, t, n, 20000, &s);
	for (size_t i = 2 * n / 5; i < 3 * n / 5; i++) /* any bit pattern */
		t[i] = (uint16_t)(t_rand(&s) >> 20);
	bfp_encode_opts o = opts(1200);
	t_frames f = {0};
	assert_int_equal(t_encode(&o, b, t, n, 0, n, &f), BFP_OK);
	size_t keyed = 0, in_key = SIZE_MAX;
	for (size_t i = 0; i < f.n; i++) {
		bfp_frame_header h;
		assert_int_equal(bfp_frame_parse(f.buf + f.off[i], t_frame_len(&f, i), &h), BFP_OK);
		assert_true(bfp_frame_in_patch(&h));
		assert_int_equal(h.base_version, 7);
		if (bfp_encoding_is_delta(h.encoding)) {
			assert_int_equal(h.flags, 0);
		} else {
			assert_int_equal(h.flags, BFP_FLAG_IN_PATCH);
			keyed++;
			in_key = i;
		}
	}
	assert_true(keyed > 0 && keyed < f.n);
	roundtrip(b, t, n, o);

	/* its rules: IN_PATCH with target <= base, IN_PATCH cleared while the
	 * base is not 0, IN_PATCH on a delta frame */
	uint8_t p[BFP_FRAME_SIZE_MAX];
	size_t len = t_frame_len(&f, in_key);
	bfp_frame_header h;
	memcpy(p, f.buf + f.off[in_key], len);
	put32(p + 20, 7);
	reseal(p, len);
	assert_int_equal(bfp_frame_parse(p, len, &h), BFP_E_BASE_VERSION);
	memcpy(p, f.buf + f.off[in_key], len);
	p[6] = 0;
	reseal(p, len);
	assert_int_equal(bfp_frame_parse(p, len, &h), BFP_E_RESERVED);
	size_t d = in_key == 0 ? 1 : 0;
	len = t_frame_len(&f, d);
	memcpy(p, f.buf + f.off[d], len);
	p[6] = BFP_FLAG_IN_PATCH;
	reseal(p, len);
	assert_int_equal(bfp_frame_parse(p, len, &h), BFP_E_RESERVED);
	t_frames_free(&f);

	/* the keyframe stream of the same target: base 0, no flag */
	o.flags = BFP_ENC_F_KEYFRAME;
	o.base_version = 0;
	assert_int_equal(t_encode(&o, NULL, t, n, 0, n, &f), BFP_OK);
	for (size_t i = 0; i < f.n; i++) {
		assert_int_equal(bfp_frame_parse(f.buf + f.off[i], t_frame_len(&f, i), &h), BFP_OK);
		assert_false(bfp_frame_in_patch(&h));
		assert_int_equal(h.flags, 0);
		assert_int_equal(h.base_version, 0);
	}
	t_frames_free(&f);
	free(b);
	free(t);
}

/* Ranges on tensor boundaries: encoding [0,a), [a,b), [b,n) separately
 * gives frames that never cross a boundary and still apply exactly. */
static void test_ranges_on_tensor_boundaries_apply_exactly(void **state)
{
	(void)state;
	size_t n = 50001, cut[] = {0, 1, 4097, 4098, 30000, 50001};
	uint16_t *b = malloc(n * 2), *t = malloc(n * 2), *w = malloc(n * 2);
	uint64_t s = 11;
	t_frames f = {0};
	t_weights_changed(b, t, n, 20000, &s);
	bfp_encode_opts o = opts(1200);
	for (size_t k = 0; k + 1 < sizeof(cut) / sizeof(cut[0]); k++) {
		size_t before = f.n;
		assert_int_equal(t_encode(&o, b, t, n, cut[k], cut[k + 1], &f), BFP_OK);
		for (size_t i = before; i < f.n; i++) {
			bfp_frame_header h;
			assert_int_equal(bfp_frame_parse(f.buf + f.off[i], t_frame_len(&f, i), &h), BFP_OK);
			assert_true(h.range_begin >= cut[k] && h.range_begin + h.range_len <= cut[k + 1]);
		}
	}
	t_assert_cover(&f, 0, n);
	memcpy(w, b, n * 2);
	bfp_apply_opts ao = aopts();
	t_apply_all(&f, &ao, w, n);
	assert_words_equal(w, t, n);
	t_frames_free(&f);
	free(b);
	free(t);
	free(w);
}

/* Canonical: same inputs and options give the same bytes; the SIMD and
 * scalar scan paths give identical frames. */
static void test_encoder_is_canonical_and_simd_matches_scalar(void **state)
{
	(void)state;
	size_t n = 200003;
	uint16_t *b = malloc(n * 2), *t = malloc(n * 2);
	uint64_t s = 5;
	t_weights_changed(b, t, n, 15000, &s);
	t_frames f1 = {0}, f2 = {0}, f3 = {0};
	bfp_encode_opts o = opts(1200);
	assert_int_equal(t_encode(&o, b, t, n, 0, n, &f1), BFP_OK);
	assert_int_equal(t_encode(&o, b, t, n, 0, n, &f2), BFP_OK);
	o.flags = BFP_ENC_F_SCALAR;
	assert_int_equal(t_encode(&o, b, t, n, 0, n, &f3), BFP_OK);
	assert_int_equal(f1.len, f2.len);
	assert_memory_equal(f1.buf, f2.buf, f1.len);
	assert_int_equal(f1.len, f3.len);
	assert_memory_equal(f1.buf, f3.buf, f1.len);

	/* the scalar decoder gives the same weights as the vector one */
	static bfp_decoder d1, d2;
	uint16_t *w1 = malloc(n * 2), *w2 = malloc(n * 2);
	memcpy(w1, b, n * 2);
	memcpy(w2, b, n * 2);
	assert_int_equal(bfp_decoder_init(&d1, 0), BFP_OK);
	assert_int_equal(bfp_decoder_init(&d2, BFP_DEC_F_SCALAR), BFP_OK);
	bfp_apply_opts ao = aopts();
	for (size_t i = 0; i < f1.n; i++) {
		assert_int_equal(bfp_decode_apply(&d1, &ao, f1.buf + f1.off[i], t_frame_len(&f1, i), w1, n, NULL), BFP_OK);
		assert_int_equal(bfp_decode_apply(&d2, &ao, f1.buf + f1.off[i], t_frame_len(&f1, i), w2, n, NULL), BFP_OK);
	}
	assert_words_equal(w1, t, n);
	assert_words_equal(w2, t, n);
	t_frames_free(&f1);
	t_frames_free(&f2);
	t_frames_free(&f3);
	free(b);
	free(t);
	free(w1);
	free(w2);
}

/* The frames after a model take their changes from the batch gathered to
 * plan it (codec/encode.c): the same bytes as gathering each frame's
 * afresh (BFP_ENC_F_NO_BATCH), with the vector and the scalar scans, for
 * ranges where the batch runs out (2% changed), where frames turn dense
 * (30%), and where it spans more than the class-count snapshots cover
 * (0.4%, about 9 M parameters a batch); and they apply exactly. */
static void test_frames_from_the_model_batch_match_fresh_gathers(void **state)
{
	(void)state;
	const size_t n = 11500000, cut[] = {0, 2000000, 2500000, n};
	const uint32_t ppm[] = {20000, 300000, 4000};
	uint16_t *b = malloc(n * 2), *t = malloc(n * 2), *w = malloc(n * 2);
	uint64_t s = 41;
	for (size_t i = 0; i < n; i++)
		b[i] = t_weight(&s);
	for (size_t k = 0; k < 3; k++)
		t_mutate(b + cut[k], t + cut[k], cut[k + 1] - cut[k], ppm[k], &s);
	const uint32_t fs[] = {1200, 8900}, flags[] = {0, BFP_ENC_F_SCALAR};
	for (size_t i = 0; i < 2; i++) {
		for (size_t j = 0; j < 2; j++) {
			t_frames f1 = {0}, f2 = {0};
			bfp_encode_opts o = opts(fs[i]);
			o.flags = flags[j];
			for (size_t k = 0; k < 3; k++)
				assert_int_equal(t_encode(&o, b, t, n, cut[k], cut[k + 1], &f1), BFP_OK);
			o.flags |= BFP_ENC_F_NO_BATCH;
			for (size_t k = 0; k < 3; k++)
				assert_int_equal(t_encode(&o, b, t, n, cut[k], cut[k + 1], &f2), BFP_OK);
			assert_int_equal(f1.len, f2.len);
			assert_memory_equal(f1.buf, f2.buf, f1.len);
			memcpy(w, b, n * 2);
			bfp_apply_opts ao = aopts();
			t_apply_all(&f1, &ao, w, n);
			assert_words_equal(w, t, n);
			t_frames_free(&f1);
			t_frames_free(&f2);
		}
	}
	free(b);
	free(t);
	free(w);
}

/* BFP_ENC_F_STAGES: the same frames as without it; every stage the
 * frames went through counted where the CPU has a counter (x86-64,
 * AArch64), the stages within the whole; nothing counted without it. */
static void test_stage_counters(void **state)
{
	(void)state;
	const size_t n = 3000000, dense_at = 2000000, dense_n = 200000;
	uint16_t *b = malloc(n * 2), *t = malloc(n * 2);
	uint64_t s = 43;
	for (size_t i = 0; i < n; i++)
		b[i] = t_weight(&s);
	t_mutate(b, t, n, 20000, &s);
	t_mutate(b + dense_at, t + dense_at, dense_n, 400000, &s); /* dense frames */
	static bfp_encoder enc;
	uint8_t out[BFP_FRAME_BOUND(1200)];
	t_frames ref = {0};
	bfp_encode_opts o = opts(1200);
	assert_int_equal(t_encode(&o, b, t, n, 0, n / 2, &ref), BFP_OK);
	o.first_index = (uint32_t)ref.n;
	assert_int_equal(t_encode(&o, b, t, n, n / 2, n, &ref), BFP_OK);
	o.first_index = 0;
	for (int on = 0; on < 2; on++) {
		t_frames f = {0};
		o.flags = on ? BFP_ENC_F_STAGES : 0;
		assert_int_equal(bfp_encoder_init(&enc, &o, b, t, n, 0, n / 2), BFP_OK);
		size_t len;
		bfp_status st;
		for (int half = 0; half < 2; half++) {
			if (half) /* counts add up over ranges */
				assert_int_equal(bfp_encoder_reset(&enc, b, t, n, n / 2, n,
								   (uint32_t)f.n),
						 BFP_OK);
			while ((st = bfp_encode_next(&enc, out, sizeof(out), &len)) == BFP_OK)
				t_frames_push(&f, out, len);
			assert_int_equal(st, BFP_DONE);
		}
		assert_int_equal(f.len, ref.len);
		assert_memory_equal(f.buf, ref.buf, f.len);
		uint64_t parts = 0;
		bfp_stage_counts sc;
		assert_int_equal(bfp_encoder_stages(&enc, &sc), BFP_OK);
		for (unsigned k = 0; k < BFP_STAGE_ALL; k++)
			parts += sc.ticks[k];
#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)
		const int counter = 1; /* the counters codec/encode.c reads */
#else
		const int counter = 0;
#endif
		if (!on || !counter) {
			assert_true(parts == 0 && sc.ticks[BFP_STAGE_ALL] == 0);
		} else {
			const unsigned used[] = {BFP_STAGE_GATHER, BFP_STAGE_MODEL, BFP_STAGE_PLAN,
						 BFP_STAGE_CUT, BFP_STAGE_WRITE, BFP_STAGE_OTHER,
						 BFP_STAGE_HASH};
			for (size_t k = 0; k < sizeof(used) / sizeof(used[0]); k++)
				assert_true(sc.ticks[used[k]] > 0);
			assert_true(parts <= sc.ticks[BFP_STAGE_ALL]);
		}
		if (on) { /* the cut sizes every change a gather lists */
			assert_true(sc.listed > 0);
			assert_true(sc.sized >= sc.listed);
		} else {
			assert_true(sc.listed == 0 && sc.sized == 0);
		}
		t_frames_free(&f);
	}
	t_frames_free(&ref);
	free(b);
	free(t);
}

/* The codec's internal hash entry points (codec/internal.h), so that each
 * vector loop is exercised whatever this machine picks by default. */
uint32_t bfp_cpu_features(void);
uint64_t bfp_hash_cpu(uint32_t cpu, const void *p, size_t n);
uint64_t bfp_hash_with_changes(uint32_t cpu, uint16_t *chunk, size_t chunk_len,
			       const uint16_t *base, uint64_t n, const uint32_t *pos,
			       const uint16_t *val, uint32_t n_changes);

/* Every XXH3 loop the codec may pick (AVX-512, AVX2 where the CPU has
 * them) gives the hash of the build's default loop, whole and streamed
 * with changes, at lengths around XXH3's block and stripe sizes and at
 * unaligned addresses; the default loop is the public bfp_hash_params. */
static void test_hash_loops_agree(void **state)
{
	(void)state;
	const uint32_t feats = bfp_cpu_features();
	const uint32_t cpus[] = {0, feats & 1u /* AVX2 */, feats & 2u /* AVX-512BW */};
	const size_t lens[] = {0, 1, 8, 120, 121, 128, 1023, 1024, 1025, 4096, 32769, 262147};
	enum { MAXN = 262147 + 8 };
	uint16_t *buf = malloc(MAXN * 2), *tgt = malloc(MAXN * 2), *chunk = malloc(8192 * 2);
	uint32_t *pos = malloc(MAXN * 4);
	uint16_t *val = malloc(MAXN * 2);
	uint64_t s = 77;
	for (size_t i = 0; i < MAXN; i++)
		buf[i] = (uint16_t)t_rand(&s);
	for (size_t c = 0; c < sizeof(cpus) / sizeof(cpus[0]); c++) {
		if (c && !cpus[c]) {
			print_message("hash loop %zu: not on this CPU\n", c);
			continue;
		}
		for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
			for (size_t off = 0; off < 3; off++) {
				const uint16_t *p = buf + off;
				const size_t n = lens[l];
				uint64_t ref = bfp_hash_params(p, n);
				assert_true(bfp_hash_cpu(cpus[c], p, n * 2) == ref);
				/* odd byte counts from an odd address */
				assert_true(bfp_hash_cpu(cpus[c], (const uint8_t *)p + 1, n) ==
					    bfp_hash_cpu(0, (const uint8_t *)p + 1, n));
				/* base with changes at every 37th word, against the
				 * changed words written out */
				memcpy(tgt, p, n * 2);
				uint32_t k = 0;
				for (size_t i = 5; i < n; i += 37 + (i & 1) * 4000) {
					pos[k] = (uint32_t)i;
					val[k] = (uint16_t)(p[i] ^ 0x0101u);
					tgt[i] = val[k];
					k++;
				}
				assert_true(bfp_hash_with_changes(cpus[c], chunk, 8192, p, n, pos, val,
								  k) == bfp_hash_params(tgt, n));
			}
		}
	}
	free(buf);
	free(tgt);
	free(chunk);
	free(pos);
	free(val);
}

/* Reference reader for test_bit_codes_read_back: one bit at a time,
 * LSB first (FORMAT.md 3.1); -1 past the end. */
typedef struct ref_br {
	const uint8_t *p;
	size_t nbits, at;
} ref_br;

static int ref_bit(ref_br *r)
{
	if (r->at >= r->nbits)
		return -1;
	int b = (r->p[r->at / 8] >> (r->at % 8)) & 1;
	r->at++;
	return b;
}

/* Rice (escape after 24 zeros: a 32-bit literal) or Exp-Golomb order 0;
 * 0 when the code runs past the end. */
static int ref_code(ref_br *r, int rice, unsigned k, uint64_t *v)
{
	unsigned z = 0;
	int b;
	while ((b = ref_bit(r)) == 0 && !(rice && z + 1 == BFP_RICE_ESC))
		z++;
	if (b < 0)
		return 0;
	unsigned nlow = k;
	uint64_t x = 0;
	if (rice && b == 0) { /* the 24th zero: escape */
		nlow = 32;
	} else if (!rice) {
		nlow = z;
	}
	for (unsigned i = 0; i < nlow; i++) {
		if ((b = ref_bit(r)) < 0)
			return 0;
		x |= (uint64_t)b << i;
	}
	if (rice)
		*v = nlow == 32 ? x : ((uint64_t)z << k) | x;
	else
		*v = ((1ull << z) | x) - 1;
	return 1;
}

/* FORMAT.md 3.6's magnitude symbols, for every table shape a frame may
 * carry: the encoder's symbol and raw bits of each magnitude 1..32768,
 * through the decoder's base, give the magnitude back; symbols run
 * 0..nsym-1 in the order of the magnitudes, each one used, and raw bits
 * fit their count. (Both functions are branch-free; this pins them to
 * each other and to the symbol count.) */
static void test_table_symbols_invert(void **state)
{
	(void)state;
	for (unsigned e = 0; e <= BFP_TAB_EMAX; e++) {
		for (unsigned sb = 0; sb <= BFP_TAB_SBMAX && sb <= e; sb++) {
			const unsigned nsym = bfp_tab_nsym(e, sb);
			unsigned prev = 0;
			for (unsigned m = 1; m <= 32768; m++) {
				unsigned nraw, nraw2;
				uint32_t raw;
				const unsigned s = bfp_tab_sym(m, e, sb, &nraw, &raw);
				assert_true(s < nsym);
				assert_true(m == 1 ? s == 0 : s == prev || s == prev + 1);
				assert_true(nraw < 32 && raw < (1u << nraw));
				const uint32_t base = bfp_tab_base(s, e, sb, &nraw2);
				assert_int_equal(nraw2, nraw);
				assert_int_equal(base + raw, m);
				prev = s;
			}
			assert_int_equal(prev, nsym - 1);
		}
	}
}

/* The keyframe-exp encoder's table of logarithms gives what
 * bfp_log2_fp8 gives, for every value it is asked about (1..8192): the
 * tables it fits, and so its frames, are those of the loop. */
static void test_kx_log2_matches_the_loop(void **state)
{
	(void)state;
	for (uint32_t v = 1; v <= 8192; v++)
		assert_int_equal(bfp_kx_log2(v), bfp_log2_fp8(v));
}

/* The rANS encoder's step without a division (bfp_rans_sym and
 * bfp_rans_step) against x / f and x % f, for every frequency 1..2^11:
 * at the edges of the quotients (x = k f + r, r = 0, 1, f / 2, f - 1, k
 * from 0 to 2^20 - 1: every state a step starts from once renormalised
 * lies in [1, f 2^20)) and at random such states; and a whole
 * put, renormalisation included, against the reference loop that sheds
 * one byte at a time: the same bytes and the same state. */
static uint32_t rans_ref(uint32_t x, unsigned f, unsigned cum, uint8_t **out)
{
	while (x >= ((uint32_t)f << 20)) {
		*(*out)++ = (uint8_t)x;
		x >>= 8;
	}
	return ((x / f) << BFP_RANS_BITS) + x % f + cum;
}

static void test_rans_put_divides(void **state)
{
	(void)state;
	uint64_t s = 99;
	for (unsigned f = 1; f <= BFP_RANS_M; f++) {
		const unsigned cum = (f * 7919u) % (BFP_RANS_M - f + 1);
		const uint64_t sym = bfp_rans_sym(f, cum);
		const uint32_t ks[] = {0, 1, 2, 1u << 19, (1u << 20) - 2, (1u << 20) - 1};
		const uint32_t rs[] = {0, 1, f / 2, f - 1};
		for (unsigned i = 0; i < 6; i++) {
			for (unsigned j = 0; j < 4; j++) {
				const uint64_t x = (uint64_t)ks[i] * f + rs[j];
				if (x == 0)
					continue; /* states are at least 2^7 */
				const uint64_t want = ((x / f) << BFP_RANS_BITS) + x % f + cum;
				assert_int_equal(bfp_rans_step((uint32_t)x, sym), want);
			}
		}
		for (unsigned i = 0; i < 16; i++) {
			const uint32_t x = (uint32_t)(t_rand(&s) % ((uint64_t)f << 20)) | 1u;
			const uint64_t want = ((uint64_t)(x / f) << BFP_RANS_BITS) + x % f + cum;
			assert_int_equal(bfp_rans_step(x, sym), want);
		}
		/* states the coder can hold, [L, 2^31): where it sheds one
		 * byte and two, either side, then random ones */
		const uint64_t edge[] = {((uint64_t)f << 20) - 1, (uint64_t)f << 20,
					 ((uint64_t)f << 28) - 1, (uint64_t)f << 28};
		for (unsigned i = 0; i < 20; i++) {
			const uint32_t x =
				i < 4 ? (uint32_t)edge[i]
				      : BFP_RANS_L + (uint32_t)(t_rand(&s) % (0x80000000u - BFP_RANS_L));
			if (x < BFP_RANS_L || x > 0x7FFFFFFFu || (i < 4 && edge[i] > 0x7FFFFFFFu))
				continue;
			uint8_t a[8] = {0}, b[8] = {0}, *pa = a, *pb = b;
			const uint32_t want = rans_ref(x, f, cum, &pa);
			uint32_t got = x;
			bfp_rans_put(&got, &pb, sym);
			assert_int_equal(got, want);
			assert_int_equal(pb - b, pa - a);
			assert_memory_equal(a, b, (size_t)(pa - a));
		}
	}
}

/* The gather's size estimate, which decides how many changes a frame
 * gathers (and so, for a frame whose changes all fit, its bytes), is the
 * sum its comment gives, for every magnitude and gaps either side of
 * every power of two. */
static void test_gather_estimate(void **state)
{
	(void)state;
	for (unsigned m = 1; m <= 32768; m++) {
		for (unsigned b = 0; b <= 32; b++) {
			for (int d = -1; d <= 1; d++) {
				const uint64_t g64 = (b < 32 ? 1ull << b : 0xFFFFFFFFull) + (uint64_t)(int64_t)d;
				if (g64 > 0xFFFFFFFFull)
					continue;
				const uint32_t gap = (uint32_t)g64;
				const unsigned bitlen = gap ? 32u - (unsigned)__builtin_clz(gap) : 0u;
				const unsigned want = 1u + (m > 1 ? bfp_eg0_bits(m - 2) : 0u) + bitlen + 2u;
				assert_int_equal(bfp_gather_est(gap, m), want);
			}
		}
	}
}

/* Rice and Exp-Golomb codes of every size, escapes included, written by
 * the codec's writer read back by its reader (whose fast path takes a
 * code at once when it is all buffered) exactly as a bit-by-bit reader
 * reads them, also when the payload is cut anywhere: the codes before
 * the cut read the same, and the first code across it sets the error. */
static void test_bit_codes_read_back(void **state)
{
	(void)state;
	enum { N = 4000 };
	static uint8_t buf[N * 8 + 64];
	static uint32_t val[N];
	static uint8_t kind[N], kk[N];
	uint64_t s = 1234;
	for (int round = 0; round < 20; round++) {
		bfp_bw w;
		bfp_bw_init(&w, buf, sizeof(buf));
		for (int i = 0; i < N; i++) {
			uint64_t r = t_rand(&s);
			kind[i] = (uint8_t)(r & 1);
			kk[i] = (uint8_t)((r >> 1) % 20);
			unsigned bits = (unsigned)((r >> 8) % 33); /* magnitude of the value */
			uint32_t v = (uint32_t)((r >> 16) & (bits ? 0xFFFFFFFFu >> (32 - bits) : 0));
			if (kind[i] == 0 && v == 0xFFFFFFFFu)
				v--; /* Exp-Golomb codes up to 2^32 - 2 */
			val[i] = v;
			if (kind[i])
				bfp_put_rice(&w, v, kk[i]);
			else
				bfp_put_eg0(&w, v);
		}
		size_t len = bfp_bw_finish(&w);
		assert_false(w.overflow);
		/* whole, and cut at a few byte lengths */
		for (int cut = 0; cut < 4; cut++) {
			size_t l = cut == 0 ? len : (size_t)(t_rand(&s) % (len + 1));
			bfp_br r;
			ref_br ref = {buf, l * 8, 0};
			bfp_br_init(&r, buf, l);
			for (int i = 0; i < N; i++) {
				uint64_t want;
				int ok = ref_code(&ref, kind[i], kk[i], &want);
				uint32_t got = kind[i] ? bfp_get_rice(&r, kk[i]) : bfp_get_eg0(&r);
				if (!ok) {
					assert_true(r.err);
					break;
				}
				assert_false(r.err);
				assert_true(want == val[i]);
				assert_int_equal(got, val[i]);
				assert_true(bfp_br_tell(&r) == ref.at);
			}
		}
	}
}

/* zstd keyframes (byte planes) round-trip, cover more parameters than raw
 * keyframes on weight-like data, and reject damaged or ambiguous zstd
 * payloads without touching the weights. */
static void test_zstd_keyframes_round_trip_and_reject_damage(void **state)
{
	(void)state;
	if (!bfp_zstd_workspace_size())
		skip();
	size_t n = 50000;
	uint16_t *b = malloc(n * 2), *t = malloc(n * 2), *w = malloc(n * 2);
	uint64_t s = 21;
	t_weights_changed(b, t, n, 30000, &s);
	bfp_encode_opts o = opts(1200);
	o.flags = BFP_ENC_F_KEYFRAME | BFP_ENC_F_ZSTD;
	o.base_version = 0;
	t_frames none = {0};
	assert_int_equal(t_encode(&o, b, t, n, 0, n, &none), BFP_E_ARG); /* no workspace */
	/* a workspace zstd cannot use (not 8-byte aligned): refused, not
	 * silently coded without zstd */
	uint8_t *mis = malloc(bfp_zstd_workspace_size() + 8);
	o.zstd_workspace = mis + 4;
	o.zstd_workspace_size = bfp_zstd_workspace_size();
	assert_int_equal(t_encode(&o, b, t, n, 0, n, &none), BFP_E_ARG);
	o.zstd_workspace = t_zstd_ws();
	o.zstd_workspace_size = bfp_zstd_workspace_size();
	t_frames f = {0};
	assert_int_equal(t_encode(&o, b, t, n, 0, n, &f), BFP_OK);
	t_assert_cover(&f, 0, n);
	size_t zframes = 0;
	for (size_t i = 0; i < f.n; i++) {
		bfp_frame_header h;
		assert_int_equal(bfp_frame_parse(f.buf + f.off[i], t_frame_len(&f, i), &h), BFP_OK);
		if (h.encoding == BFP_ENC_KEY_ZSTD) {
			zframes++;
			assert_true(h.range_len > (1200 - BFP_HEADER_SIZE) / 2);
		}
	}
	assert_true(zframes > f.n / 2);
	memcpy(w, b, n * 2);
	bfp_apply_opts ao = aopts();
	ao.base_version = 0;
	t_apply_all(&f, &ao, w, n);
	assert_words_equal(w, t, n);

	/* no workspace: refused, nothing written */
	static bfp_decoder d;
	assert_int_equal(bfp_decoder_init(&d, 0), BFP_OK);
	memcpy(w, b, n * 2);
	assert_int_equal(bfp_decode_apply(&d, &ao, f.buf, t_frame_len(&f, 0), w, n, NULL), BFP_E_ARG);
	assert_words_equal(w, b, n);
	/* damaged zstd payload under a valid CRC, and a payload with a second
	 * zstd frame appended: rejected, nothing written */
	ao.zstd_workspace = mis + 4; /* misaligned: refused */
	ao.zstd_workspace_size = bfp_zstd_workspace_size();
	assert_int_equal(bfp_decode_apply(&d, &ao, f.buf, t_frame_len(&f, 0), w, n, NULL), BFP_E_ARG);
	assert_words_equal(w, b, n);
	free(mis);
	ao.zstd_workspace = t_zstd_ws();
	ao.zstd_workspace_size = bfp_zstd_workspace_size();
	uint8_t p[BFP_FRAME_SIZE_MAX];
	size_t fl = t_frame_len(&f, 0);
	for (size_t at = BFP_HEADER_SIZE; at < fl; at += 7) {
		memcpy(p, f.buf, fl);
		p[at] ^= 0x10;
		reseal(p, fl);
		bfp_status st = bfp_decode_apply(&d, &ao, p, fl, w, n, NULL);
		assert_true(st == BFP_E_CORRUPT || st == BFP_E_HASH);
		assert_words_equal(w, b, n);
	}
	size_t pl = fl - BFP_HEADER_SIZE;
	memcpy(p, f.buf, fl);
	memcpy(p + fl, f.buf + BFP_HEADER_SIZE, pl);
	put32(p + 44, (uint32_t)(2 * pl));
	reseal(p, fl + pl);
	assert_int_equal(bfp_decode_apply(&d, &ao, p, fl + pl, w, n, NULL), BFP_E_CORRUPT);
	assert_words_equal(w, b, n);
	t_frames_free(&f);
	free(b);
	free(t);
	free(w);
}

/* ---- keyframe-exp (FORMAT.md 3.10) ---- */

/* Values shaped like trained weights: below the largest binades each
 * exponent holds about half the values of the one above (a density flat
 * near zero), and one in 500 is zero. */
static uint16_t kx_weight(uint64_t *s, unsigned etop)
{
	uint64_t r = t_rand(s);
	unsigned k = (unsigned)__builtin_ctzll(r | (1ull << 30)) + (unsigned)((r >> 62) & 1);
	const uint16_t sign = (uint16_t)((r >> 40) & 0x8000u);
	if ((r >> 32) % 500 == 0)
		return sign;
	return (uint16_t)(sign | ((etop - k) << 7) | ((r >> 48) & 0x7Fu));
}

static void kx_fill(uint16_t *w, size_t n, uint64_t seed)
{
	uint64_t s = seed;
	for (size_t i = 0; i < n; i++) /* per-tensor scales: a new top every 3000 */
		w[i] = kx_weight(&s, 118 + (unsigned)((i / 3000) % 7));
}

/* Frames of encoding enc among f, and whether each covers more than a raw
 * keyframe of the frame size would. */
static size_t count_enc(const t_frames *f, unsigned enc, uint32_t fs)
{
	size_t k = 0;
	for (size_t i = 0; i < f->n; i++) {
		bfp_frame_header h;
		assert_int_equal(bfp_frame_parse(f->buf + f->off[i], t_frame_len(f, i), &h), BFP_OK);
		if (h.encoding != enc)
			continue;
		k++;
		assert_true(h.range_len <= 8192);
		assert_true(h.range_len > (fs - BFP_HEADER_SIZE) / 2 || i + 1 == f->n);
	}
	return k;
}

/* The keyframe-exp tests below run on encoding 7 and again on 8 and 9
 * (FORMAT.md 3.10-3.12): kx_enc is the one they run on. */
static unsigned kx_enc = BFP_ENC_KEY_EXP;

static uint32_t kx_flag(void)
{
	return kx_enc == BFP_ENC_KEY_HUF    ? BFP_ENC_F_KEY_HUF
	       : kx_enc == BFP_ENC_KEY_EXPM ? BFP_ENC_F_KEY_EXPM
					    : BFP_ENC_F_KEY_EXP;
}

static int on_huf(void **state)
{
	(void)state;
	kx_enc = BFP_ENC_KEY_HUF;
	return 0;
}

static int on_expm(void **state)
{
	(void)state;
	kx_enc = BFP_ENC_KEY_EXPM;
	return 0;
}

static int on_exp(void **state)
{
	(void)state;
	kx_enc = BFP_ENC_KEY_EXP;
	return 0;
}

/* Keyframe streams of trained-like values round-trip bit-exactly against
 * an independent copy at every frame size, SIMD or scalar, and the
 * frames that use encoding 7 cover more than raw ones would. */
static void test_key_exp_round_trips_at_every_frame_size(void **state)
{
	(void)state;
	static const uint32_t sizes[] = {BFP_FRAME_SIZE_MIN, 129, 200, 1200, 1500, 8900,
					 BFP_FRAME_SIZE_MAX};
	const size_t n = 30011;
	uint16_t *t = malloc(n * 2), *copy = malloc(n * 2);
	kx_fill(t, n, 71);
	memcpy(copy, t, n * 2);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		for (int scalar = 0; scalar < 2; scalar++) {
			bfp_encode_opts o = opts(sizes[i]);
			o.flags = BFP_ENC_F_KEYFRAME | kx_flag() | (scalar ? BFP_ENC_F_SCALAR : 0);
			o.base_version = 0;
			t_frames f = {0};
			assert_int_equal(t_encode(&o, NULL, t, n, 0, n, &f), BFP_OK);
			t_assert_cover(&f, 0, n);
			/* every frame but perhaps the last is encoding 7 */
			assert_true(count_enc(&f, kx_enc, sizes[i]) + 1 >= f.n);
			uint16_t *w = calloc(n, 2);
			bfp_apply_opts ao = aopts();
			ao.base_version = 0;
			t_apply_all(&f, &ao, w, n);
			assert_words_equal(w, copy, n);
			/* about 11 bits a value or less (3 of exponent) */
			if (sizes[i] >= 1200)
				assert_true(f.len * 8 < n * 12);
			free(w);
			t_frames_free(&f);
		}
	}
	free(t);
	free(copy);
}

/* The scalar and vector paths of encoding 7 agree: the encoder writes
 * the same frames with and without BFP_ENC_F_SCALAR, and a scalar and a
 * default decoder, each fed the whole stream (tables change from frame
 * to frame, escapes or none), write the same values. */
static void test_key_exp_paths_agree(void **state)
{
	(void)state;
	static const uint32_t sizes[] = {BFP_FRAME_SIZE_MIN, 200, 1200, 8900};
	const size_t n = 30011;
	uint16_t *t = malloc(n * 2), *w0 = malloc(n * 2), *w1 = malloc(n * 2);
	uint64_t s = 13;
	kx_fill(t, n, 17);
	for (size_t i = 0; i < n; i += 1 + t_rand(&s) % 97) /* escapes: tiny values */
		t[i] = (uint16_t)((t[i] & 0x807Fu) | ((t_rand(&s) % 90) << 7));
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		t_frames f[2] = {{0}, {0}};
		for (int scalar = 0; scalar < 2; scalar++) {
			bfp_encode_opts o = opts(sizes[i]);
			o.flags = BFP_ENC_F_KEYFRAME | kx_flag() | (scalar ? BFP_ENC_F_SCALAR : 0);
			o.base_version = 0;
			assert_int_equal(t_encode(&o, NULL, t, n, 0, n, &f[scalar]), BFP_OK);
		}
		assert_int_equal(f[0].len, f[1].len);
		assert_memory_equal(f[0].buf, f[1].buf, f[0].len);
		assert_true(count_enc(&f[0], kx_enc, sizes[i]) + 1 >= f[0].n);
		static bfp_decoder d0, d1;
		bfp_apply_opts ao = aopts();
		ao.base_version = 0;
		assert_int_equal(bfp_decoder_init(&d0, 0), BFP_OK);
		assert_int_equal(bfp_decoder_init(&d1, BFP_DEC_F_SCALAR), BFP_OK);
		memset(w0, 0, n * 2);
		memset(w1, 0xFF, n * 2);
		for (size_t k = 0; k < f[0].n; k++) {
			const uint8_t *fr = f[0].buf + f[0].off[k];
			assert_int_equal(bfp_decode_apply(&d0, &ao, fr, t_frame_len(&f[0], k), w0, n, NULL),
					 BFP_OK);
			assert_int_equal(bfp_decode_apply(&d1, &ao, fr, t_frame_len(&f[0], k), w1, n, NULL),
					 BFP_OK);
		}
		assert_words_equal(w0, t, n);
		assert_words_equal(w1, t, n);
		t_frames_free(&f[0]);
		t_frames_free(&f[1]);
	}
	free(t);
	free(w0);
	free(w1);
}

/* Every range length from 1 up, the 8192 cap (all zeros: a raw byte a
 * value), special values (zeros, subnormals, infinities, NaNs), and
 * keyframe-coded frames of a patch (IN_PATCH) round-trip exactly. */
static void test_key_exp_edges_round_trip(void **state)
{
	(void)state;
	uint16_t t[40], copy[40];
	uint64_t s = 5;
	for (size_t n = 1; n <= 40; n++) {
		for (size_t i = 0; i < n; i++)
			t[i] = kx_weight(&s, 121);
		memcpy(copy, t, n * 2);
		for (uint32_t fs = BFP_FRAME_SIZE_MIN; fs <= 1200; fs += 1072) {
			bfp_encode_opts o = opts(fs);
			o.flags = BFP_ENC_F_KEYFRAME | kx_flag();
			o.base_version = 0;
			roundtrip(t, copy, n, o);
		}
	}
	const size_t n = 20000;
	uint16_t *z = calloc(n, 2), *b = malloc(n * 2);
	bfp_encode_opts o = opts(BFP_FRAME_SIZE_MAX);
	o.flags = BFP_ENC_F_KEYFRAME | kx_flag();
	o.base_version = 0;
	t_frames f = {0};
	assert_int_equal(t_encode(&o, NULL, z, n, 0, n, &f), BFP_OK);
	bfp_frame_header h;
	assert_int_equal(bfp_frame_parse(f.buf, t_frame_len(&f, 0), &h), BFP_OK);
	assert_int_equal(h.encoding, kx_enc);
	assert_int_equal(h.range_len, 8192);
	t_frames_free(&f);
	roundtrip(z, z, n, o);
	static const uint16_t sp[] = {0x0000, 0x8000, 0x0001, 0x807F, 0x7F80, 0xFF80,
				      0x7FC1, 0xFFFF, 0x7F7F, 0x3F80, 0x0080, 0x00FF};
	for (size_t i = 0; i < n; i++) {
		uint64_t r = t_rand(&s);
		z[i] = (r % 5) ? kx_weight(&s, 119) : sp[(r >> 8) % 12];
		b[i] = (uint16_t)t_rand(&s);
	}
	for (uint32_t fs = BFP_FRAME_SIZE_MIN; fs <= BFP_FRAME_SIZE_MAX; fs += 2957)
		roundtrip(z, z, n, o);
	/* a patch whose values are all new: keyframe-coded, encoding 7 (a
	 * few infinities would put the other exponents in the escapes) */
	kx_fill(z, n, 9);
	o = opts(1200);
	o.flags = kx_flag();
	assert_int_equal(t_encode(&o, b, z, n, 0, n, &f), BFP_OK);
	assert_true(count_enc(&f, kx_enc, 1200) > f.n / 2);
	assert_int_equal(bfp_frame_parse(f.buf, t_frame_len(&f, 0), &h), BFP_OK);
	assert_int_equal(h.flags, BFP_FLAG_IN_PATCH);
	assert_int_equal(h.base_version, 7);
	t_frames_free(&f);
	roundtrip(b, z, n, o);
	/* without the flag, the 1.0 encodings only */
	o.flags = 0;
	assert_int_equal(t_encode(&o, b, z, n, 0, n, &f), BFP_OK);
	assert_int_equal(count_enc(&f, kx_enc, 1200), 0);
	t_frames_free(&f);
	free(z);
	free(b);
}

/* One keyframe-exp frame of kx values over [0, KN) and its pieces. */
enum { KN = 10000 };
static uint16_t kxt[KN], kxw[KN], kxsnap[KN];

static size_t kx_frame(uint8_t *p)
{
	bfp_encode_opts o = opts(1200);
	o.flags = BFP_ENC_F_KEYFRAME | kx_flag();
	o.base_version = 0;
	static bfp_encoder enc;
	size_t len;
	kx_fill(kxt, KN, 3);
	assert_int_equal(bfp_encoder_init(&enc, &o, NULL, kxt, KN, 0, KN), BFP_OK);
	assert_int_equal(bfp_encode_next(&enc, p, BFP_FRAME_SIZE_MAX, &len), BFP_OK);
	assert_int_equal(p[5], kx_enc);
	for (size_t i = 0; i < KN; i++)
		kxsnap[i] = kxw[i] = (uint16_t)(i * 40503u);
	return len;
}

/* Apply p (len bytes) to kxw with a default and a scalar decoder: both
 * give the same status; an error leaves kxw untouched; success writes
 * exactly the target. Returns the status. */
static bfp_status kx_apply(const uint8_t *p, size_t len)
{
	static bfp_decoder d;
	bfp_apply_opts ao = aopts();
	bfp_frame_header h;
	assert_int_equal(bfp_decoder_init(&d, BFP_DEC_F_SCALAR), BFP_OK);
	const bfp_status scalar = bfp_decode_apply(&d, &ao, p, len, kxw, KN, &h);
	if (scalar == BFP_OK) {
		assert_words_equal(kxw + h.range_begin, kxt + h.range_begin, h.range_len);
		memcpy(kxw, kxsnap, sizeof(kxw));
	}
	else
		assert_words_equal(kxw, kxsnap, KN);
	assert_int_equal(bfp_decoder_init(&d, 0), BFP_OK);
	bfp_status st = bfp_decode_apply(&d, &ao, p, len, kxw, KN, &h);
	assert_int_equal(st, scalar);
	if (st == BFP_OK) {
		assert_words_equal(kxw + h.range_begin, kxt + h.range_begin, h.range_len);
		memcpy(kxw, kxsnap, sizeof(kxw));
	} else {
		assert_words_equal(kxw, kxsnap, KN);
	}
	return st;
}

/* A key frame with payload pl (plen bytes) and range_len n over the
 * header of frm. */
static size_t kx_with(uint8_t *p, const uint8_t *frm, const uint8_t *pl, size_t plen, uint32_t n)
{
	memcpy(p, frm, BFP_HEADER_SIZE);
	memcpy(p + BFP_HEADER_SIZE, pl, plen);
	put32(p + 40, n);
	put32(p + 44, (uint32_t)plen);
	reseal(p, BFP_HEADER_SIZE + plen);
	return BFP_HEADER_SIZE + plen;
}

/* Frame f0 (len bytes) under a valid CRC with one bit flipped, 4000
 * times at random (seed), and cut at every length or grown by a byte:
 * each is rejected with weights untouched, or (a flip the values do not
 * depend on, fewer than one in 40) writes exactly the target. */
static void kx_flips_and_cuts(const uint8_t *f0, size_t len, uint64_t s)
{
	static uint8_t p[BFP_FRAME_SIZE_MAX + 64], pl[BFP_FRAME_SIZE_MAX + 1];
	bfp_frame_header h;
	assert_int_equal(bfp_frame_parse(f0, len, &h), BFP_OK);
	const size_t plen = len - BFP_HEADER_SIZE;
	size_t ok = 0;
	for (int trial = 0; trial < 4000; trial++) {
		memcpy(p, f0, len);
		size_t at = BFP_HEADER_SIZE + (size_t)(t_rand(&s) % plen);
		p[at] ^= (uint8_t)(1u << (t_rand(&s) % 8));
		reseal(p, len);
		bfp_status st = kx_apply(p, len);
		ok += st == BFP_OK;
		assert_true(st == BFP_OK || st == BFP_E_CORRUPT || st == BFP_E_HASH);
	}
	assert_true(ok < 100);
	memcpy(pl, f0 + BFP_HEADER_SIZE, plen);
	pl[plen] = 0;
	for (size_t cut = 0; cut <= plen + 1; cut++) {
		if (cut == plen)
			continue;
		bfp_status st = kx_apply(p, kx_with(p, f0, pl, cut, h.range_len));
		assert_true(st == BFP_E_CORRUPT || st == BFP_E_HASH);
	}
}

/* Hostile keyframe-exp frames under a valid CRC: flipped bits, cut
 * payloads, truncated and over-long tables, too many symbols or values,
 * states out of range. Each is rejected with weights untouched, or
 * (a flip the values do not depend on) writes exactly the target. */
static void test_key_exp_rejects_hostile_frames(void **state)
{
	(void)state;
	uint8_t f0[BFP_FRAME_SIZE_MAX], p[BFP_FRAME_SIZE_MAX + 64], pl[BFP_FRAME_SIZE_MAX];
	const size_t len = kx_frame(f0);
	bfp_frame_header h;
	assert_int_equal(bfp_frame_parse(f0, len, &h), BFP_OK);
	assert_int_equal(kx_apply(f0, len), BFP_OK);
	const size_t plen = len - BFP_HEADER_SIZE;
	const uint32_t n = h.range_len;
	/* the raw section's bytes: the table starts after them */
	const uint32_t nraw = kx_enc == BFP_ENC_KEY_EXPM ? (7 * (n - 17) + 7) / 8 : n - 8;
	kx_flips_and_cuts(f0, len, 77);
	/* more values than the payload's raw bytes, or than 8192 */
	memcpy(pl, f0 + BFP_HEADER_SIZE, plen);
	assert_int_equal(kx_apply(p, kx_with(p, f0, pl, plen, n + (uint32_t)plen)), BFP_E_CORRUPT);
	assert_int_equal(kx_apply(p, kx_with(p, f0, pl, plen, 8193)), BFP_E_CORRUPT);
	assert_int_equal(kx_apply(p, kx_with(p, f0, pl, plen, UINT32_MAX / 2)), BFP_E_RANGE);
	/* tables: written by hand after the raw bytes, then the frame's own
	 * states (whatever they decode to, the table is checked first) */
	struct {
		unsigned etop, m;       /* ns - 1 */
		int long_m;             /* ns - 1 with 40 leading zeros */
		unsigned q0;
		int dq;                 /* the first delta's zigzag, -1: none */
	} bad[] = {
		{120, 64, 0, 5, -1},  /* 65 symbols */
		{10, 11, 0, 5, -1},   /* more symbols than exponents */
		{120, 0, 1, 5, -1},   /* an over-long code */
		{120, 0, 0, 30, -1},  /* a weight above 29 */
		{120, 1, 0, 29, 5},   /* 27 + (-3) fine; then */
		{120, 1, 0, 1, 3},    /* 0 - 2 < 0 */
		{120, 1, 0, 28, 64},  /* 26 + 32 > 29 */
	};
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		bfp_bw w;
		memcpy(pl, f0 + BFP_HEADER_SIZE, nraw);
		bfp_bw_init(&w, pl + nraw, 64);
		bfp_bw_put(&w, bad[k].etop, 8);
		if (bad[k].long_m)
			bfp_bw_put(&w, 0, 40);
		else
			bfp_put_eg0(&w, bad[k].m);
		bfp_bw_put(&w, bad[k].q0, 5);
		if (bad[k].dq >= 0)
			bfp_put_eg0(&w, (uint32_t)bad[k].dq);
		size_t tb = bfp_bw_finish(&w);
		memcpy(pl + nraw + tb, f0 + len - 16, 16);
		bfp_status st = kx_apply(p, kx_with(p, f0, pl, nraw + tb + 16, n));
		if (k == 4) /* a valid table: the stream it codes is then wrong */
			assert_true(st == BFP_E_CORRUPT || st == BFP_E_HASH);
		else
			assert_int_equal(st, BFP_E_CORRUPT);
	}
	/* a truncated table: nothing after the raw bytes but the states */
	memcpy(pl, f0 + BFP_HEADER_SIZE, nraw);
	memcpy(pl + nraw, f0 + len - 16, 16);
	assert_int_equal(kx_apply(p, kx_with(p, f0, pl, nraw + 16, n)), BFP_E_CORRUPT);
	/* states below 2^23 or from 2^31 */
	static const uint32_t xs[] = {0, (1u << 23) - 1, 1u << 31, UINT32_MAX};
	for (size_t k = 0; k < 4; k++) {
		memcpy(pl, f0 + BFP_HEADER_SIZE, plen);
		put32(pl + plen - 16 + 4 * (k % 4), xs[k]);
		assert_int_equal(kx_apply(p, kx_with(p, f0, pl, plen, n)), BFP_E_CORRUPT);
	}
	/* the same frame still applies */
	assert_int_equal(kx_apply(f0, len), BFP_OK);
}

/* Huffman code lengths by the plain construction (each step merges the
 * two lightest of all nodes): the reference for the two-queue one. */
static unsigned huf_plain(const uint16_t *f, unsigned ns, uint8_t *len)
{
	uint64_t wt[2 * BFP_HUF_SYMS];
	int par[2 * BFP_HUF_SYMS], alive[2 * BFP_HUF_SYMS];
	unsigned nn = ns, longest = 0;
	for (unsigned i = 0; i < ns; i++) {
		wt[i] = f[i];
		alive[i] = 1;
		par[i] = -1;
	}
	for (unsigned k = 0; k + 1 < ns; k++) {
		int a = -1, b = -1;
		for (unsigned i = 0; i < nn; i++) {
			if (!alive[i])
				continue;
			if (a < 0 || wt[i] < wt[a]) {
				b = a;
				a = (int)i;
			} else if (b < 0 || wt[i] < wt[b]) {
				b = (int)i;
			}
		}
		alive[a] = alive[b] = 0;
		wt[nn] = wt[a] + wt[b];
		alive[nn] = 1;
		par[nn] = -1;
		par[a] = par[b] = (int)nn++;
	}
	for (unsigned i = 0; i < ns; i++) {
		unsigned d = 0;
		for (int j = (int)i; par[j] >= 0; j = par[j])
			d++;
		len[i] = (uint8_t)d;
		longest = d > longest ? d : longest;
	}
	return longest;
}

/* FORMAT.md 3.12's code: where no length passes 11 bits the lengths cost
 * what the plain construction's do (Huffman's optimum); every code is
 * complete and at most 11 bits; the lookup table names each code at
 * every entry its bits begin; Fibonacci frequencies get limited. */
static void test_huf_code_is_optimal_and_limited(void **state)
{
	(void)state;
	uint64_t s = 41;
	static uint16_t t[1u << BFP_HUF_LMAX];
	unsigned limited = 0;
	for (int it = 0; it < 20000; it++) {
		const unsigned ns = 2 + (unsigned)(t_rand(&s) % (BFP_HUF_SYMS - 1));
		uint16_t f[BFP_HUF_SYMS], code[BFP_HUF_SYMS];
		uint8_t len[BFP_HUF_SYMS], ref[BFP_HUF_SYMS];
		const unsigned kind = it % 3;
		for (unsigned u = 0; u < ns; u++) {
			const uint64_t r = t_rand(&s);
			f[u] = (uint16_t)(kind == 0   ? 1 + r % 2048
					  : kind == 1 ? 1 + (r % 16 ? r % 4 : r % 2000)
						      : 1u << (r % 11));
		}
		if (it == 0) { /* 1, 1, 2, 3, 5, ...: a code 19 bits deep */
			f[0] = f[1] = 1;
			for (unsigned u = 2; u < 20; u++)
				f[u] = (uint16_t)(f[u - 1] + f[u - 2]);
		}
		bfp_huf_lengths(f, it == 0 ? 20 : ns, len);
		const unsigned n = it == 0 ? 20 : ns;
		const unsigned deep = huf_plain(f, n, ref);
		uint64_t kraft = 0, cost = 0, rcost = 0;
		for (unsigned u = 0; u < n; u++) {
			assert_true(len[u] >= 1 && len[u] <= BFP_HUF_LMAX);
			kraft += 1ull << (BFP_HUF_LMAX - len[u]);
			cost += (uint64_t)f[u] * len[u];
			rcost += (uint64_t)f[u] * ref[u];
		}
		assert_int_equal(kraft, 1u << BFP_HUF_LMAX);
		if (deep <= BFP_HUF_LMAX)
			assert_int_equal(cost, rcost);
		else
			limited++;
		if (it == 0)
			assert_true(deep > BFP_HUF_LMAX);
		bfp_huf_codes(len, n, code);
		memset(t, 0xFF, sizeof(t));
		bfp_huf_table(len, code, n, t);
		for (unsigned v = 0; v < (1u << BFP_HUF_LMAX); v++) {
			const unsigned u = t[v] >> 8, l = t[v] & 0xFFu;
			assert_true(t[v] != 0xFFFF && u < n && l == len[u]);
			assert_int_equal(v >> (BFP_HUF_LMAX - l), code[u]);
		}
	}
	assert_true(limited > 100);
}

/* Hostile keyframe-huf frames (FORMAT.md 3.12) under a valid CRC:
 * flipped bits, cut or grown payloads, too many values, bad tables at
 * the payload's start, a set bit in the table's padding or in the last
 * byte's. Each is rejected with weights untouched, or (a flip the values
 * do not depend on) writes exactly the target. */
static void test_key_huf_rejects_hostile_frames(void **state)
{
	(void)state;
	kx_enc = BFP_ENC_KEY_HUF;
	uint8_t f0[BFP_FRAME_SIZE_MAX], p[BFP_FRAME_SIZE_MAX + 64], pl[BFP_FRAME_SIZE_MAX];
	const size_t len = kx_frame(f0);
	bfp_frame_header h;
	assert_int_equal(bfp_frame_parse(f0, len, &h), BFP_OK);
	assert_int_equal(kx_apply(f0, len), BFP_OK);
	const size_t plen = len - BFP_HEADER_SIZE;
	const uint32_t n = h.range_len;
	kx_flips_and_cuts(f0, len, 78);
	memcpy(pl, f0 + BFP_HEADER_SIZE, plen);
	/* fewer or more values than the payload holds, or than 8192 */
	for (uint32_t d = 1; d <= 40; d++) {
		assert_int_equal(kx_apply(p, kx_with(p, f0, pl, plen, n - d)), BFP_E_CORRUPT);
		bfp_status st = kx_apply(p, kx_with(p, f0, pl, plen, n + d));
		assert_true(st == BFP_E_CORRUPT || st == BFP_E_RANGE);
	}
	assert_int_equal(kx_apply(p, kx_with(p, f0, pl, plen, 8193)), BFP_E_CORRUPT);
	/* bad tables at the payload's start, the frame's own bytes after */
	struct {
		unsigned etop, m, q0;
		int dq;
	} bad[] = {
		{120, 64, 5, -1}, /* 65 symbols */
		{10, 11, 5, -1},  /* more symbols than exponents */
		{120, 0, 30, -1}, /* a weight above 29 */
		{120, 1, 1, 3},   /* 0 - 2 < 0 */
		{120, 1, 28, 64}, /* 26 + 32 > 29 */
	};
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		bfp_bw w;
		bfp_bw_init(&w, pl, 64);
		bfp_bw_put(&w, bad[k].etop, 8);
		bfp_put_eg0(&w, bad[k].m);
		bfp_bw_put(&w, bad[k].q0, 5);
		if (bad[k].dq >= 0)
			bfp_put_eg0(&w, (uint32_t)bad[k].dq);
		const size_t tb = bfp_bw_finish(&w);
		memcpy(pl + tb, f0 + BFP_HEADER_SIZE + tb, plen - tb);
		assert_int_equal(kx_apply(p, kx_with(p, f0, pl, plen, n)), BFP_E_CORRUPT);
	}
	/* the table's padding: etop, ns - 1, q_0 and the deltas of the
	 * frame's own table, read back as the decoder does */
	memcpy(pl, f0 + BFP_HEADER_SIZE, plen);
	bfp_br r;
	bfp_br_init(&r, pl, plen);
	(void)bfp_br_get(&r, 8);
	const uint32_t m = bfp_get_eg0(&r);
	(void)bfp_br_get(&r, 5);
	for (uint32_t i = 0; i < m; i++)
		(void)bfp_get_eg0(&r);
	const uint64_t tbits = bfp_br_tell(&r);
	if (tbits % 8) {
		pl[tbits / 8] ^= 0x80;
		assert_int_equal(kx_apply(p, kx_with(p, f0, pl, plen, n)), BFP_E_CORRUPT);
		pl[tbits / 8] ^= 0x80;
	}
	/* the last byte's top bit: padding, or a bit the values use */
	pl[plen - 1] ^= 0x80;
	bfp_status st = kx_apply(p, kx_with(p, f0, pl, plen, n));
	assert_true(st == BFP_E_CORRUPT || st == BFP_E_HASH);
	/* the same frame still applies */
	assert_int_equal(kx_apply(f0, len), BFP_OK);
	kx_enc = BFP_ENC_KEY_EXP;
}

/* Encoding 9 codes encoding 8's symbols with a Huffman code in place of
 * rANS: its keyframe streams are within 1% of encoding 8's at every
 * frame size. */
static void test_key_huf_is_close_to_expm(void **state)
{
	(void)state;
	static const uint32_t sizes[] = {200, 1200, 8900};
	static const uint32_t flags[] = {BFP_ENC_F_KEY_EXPM, BFP_ENC_F_KEY_HUF};
	static const unsigned encs[] = {BFP_ENC_KEY_EXPM, BFP_ENC_KEY_HUF};
	const size_t n = 60000;
	uint16_t *t = malloc(n * 2);
	kx_fill(t, n, 23);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t len[2];
		for (int k = 0; k < 2; k++) {
			bfp_encode_opts o = opts(sizes[i]);
			o.flags = BFP_ENC_F_KEYFRAME | flags[k];
			o.base_version = 0;
			t_frames f = {0};
			assert_int_equal(t_encode(&o, NULL, t, n, 0, n, &f), BFP_OK);
			assert_true(count_enc(&f, encs[k], sizes[i]) + 1 >= f.n);
			len[k] = f.len;
			t_frames_free(&f);
		}
		assert_true(len[1] * 100 <= len[0] * 101);
	}
	free(t);
}

/* Encoding 8 codes the mantissa's top bit at the share the table gives:
 * on trained-like values (binades that fill less than twice as fast as
 * the one below) its frames hold more values than encoding 7's at every
 * frame size; and a raw section whose padding bits are set is rejected. */
static void test_key_expm_is_smaller_and_checks_its_padding(void **state)
{
	(void)state;
	static const uint32_t sizes[] = {200, 1200, 8900};
	const size_t n = 60000;
	uint16_t *t = malloc(n * 2);
	/* bell-shaped values (a sum of four uniforms, the float's top 16
	 * bits), whose upper binades thin out as trained weights' do */
	uint64_t r = 5;
	for (size_t i = 0; i < n; i++) {
		float v = -2.0f;
		for (int k = 0; k < 4; k++)
			v += (float)(t_rand(&r) >> 40) / (float)(1u << 24);
		v *= 0.02f;
		uint32_t u;
		memcpy(&u, &v, 4);
		t[i] = (uint16_t)(u >> 16);
	}
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t len[2];
		for (int m = 0; m < 2; m++) {
			bfp_encode_opts o = opts(sizes[i]);
			o.flags = BFP_ENC_F_KEYFRAME | (m ? BFP_ENC_F_KEY_EXPM : BFP_ENC_F_KEY_EXP);
			o.base_version = 0;
			t_frames f = {0};
			assert_int_equal(t_encode(&o, NULL, t, n, 0, n, &f), BFP_OK);
			assert_true(count_enc(&f, m ? BFP_ENC_KEY_EXPM : BFP_ENC_KEY_EXP, sizes[i]) + 1 >=
				    f.n);
			len[m] = f.len;
			t_frames_free(&f);
		}
		assert_true(len[1] < len[0]);
	}
	free(t);
	/* the padding: find a frame whose raw section ends inside a byte */
	kx_enc = BFP_ENC_KEY_EXPM;
	uint8_t f0[BFP_FRAME_SIZE_MAX], p[BFP_FRAME_SIZE_MAX + 64];
	const size_t len = kx_frame(f0);
	bfp_frame_header h;
	assert_int_equal(bfp_frame_parse(f0, len, &h), BFP_OK);
	const uint32_t bits = 7 * (h.range_len - 17);
	memcpy(p, f0, len);
	if (bits % 8) {
		p[BFP_HEADER_SIZE + bits / 8] ^= 0x80;
		reseal(p, len);
		assert_int_equal(kx_apply(p, len), BFP_E_CORRUPT);
	} else {
		/* the bit after the last field starts the table's etop */
		assert_int_equal(kx_apply(p, len), BFP_OK);
	}
	kx_enc = BFP_ENC_KEY_EXP;
}

/* ---- reject rules: each gives its exact status and leaves w untouched ---- */

enum { RN = 20000 };
static uint16_t rb[RN], rt[RN], rw[RN], rsnap[RN];
static uint8_t frame[BFP_FRAME_SIZE_MAX + 16];
static size_t frame_len;
static bfp_decoder rdec;

static int reject_setup(void **state)
{
	(void)state;
	uint64_t s = 99;
	bfp_encoder *enc = malloc(sizeof(*enc));
	t_weights_changed(rb, rt, RN, 10000, &s);
	bfp_encode_opts o = opts(1200);
	o.frame_count = 3;
	o.sparse = BFP_SPARSE_SELF_CONTAINED; /* one self-contained frame */
	assert_int_equal(bfp_encoder_init(enc, &o, rb, rt, RN, 0, RN), BFP_OK);
	assert_int_equal(bfp_encode_next(enc, frame, sizeof(frame), &frame_len), BFP_OK);
	free(enc);
	memcpy(rw, rb, sizeof(rb));
	memcpy(rsnap, rb, sizeof(rb));
	assert_int_equal(bfp_decoder_init(&rdec, 0), BFP_OK);
	return 0;
}

static void reseal(uint8_t *p, size_t len)
{
	uint32_t c = bfp_crc32c(0, p, 56);
	c = bfp_crc32c(c, p + BFP_HEADER_SIZE, len - BFP_HEADER_SIZE);
	p[56] = (uint8_t)c;
	p[57] = (uint8_t)(c >> 8);
	p[58] = (uint8_t)(c >> 16);
	p[59] = (uint8_t)(c >> 24);
}

static void expect_reject(const uint8_t *p, size_t len, bfp_status want)
{
	bfp_apply_opts ao = aopts();
	bfp_status st = bfp_decode_apply(&rdec, &ao, p, len, rw, RN, NULL);
	if (st != want)
		fail_msg("got %s, want %s", bfp_status_str(st), bfp_status_str(want));
	assert_words_equal(rw, rsnap, RN);
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* The unmodified frame applies (so the rejects below are due to edits). */
static void test_reject_fixture_frame_applies(void **state)
{
	(void)state;
	bfp_apply_opts ao = aopts();
	assert_int_equal(bfp_decode_apply(&rdec, &ao, frame, frame_len, rw, RN, NULL), BFP_OK);
	/* applying it twice fails the target hash and writes nothing */
	memcpy(rsnap, rw, sizeof(rw));
	expect_reject(frame, frame_len, BFP_E_HASH);
}

/* FORMAT.md 2.4 rule 1: shorter than a header, or than header+payload. */
static void test_reject_truncated(void **state)
{
	(void)state;
	for (size_t l = 0; l < frame_len; l += (l < 70 ? 1 : 37))
		expect_reject(frame, l, l < BFP_HEADER_SIZE ? BFP_E_TRUNCATED : BFP_E_TRUNCATED);
}

/* Rule: longer than header+payload (trailing bytes in the datagram). */
static void test_reject_trailing_bytes(void **state)
{
	(void)state;
	uint8_t p[BFP_FRAME_SIZE_MAX + 16];
	memcpy(p, frame, frame_len);
	p[frame_len] = 0;
	expect_reject(p, frame_len + 1, BFP_E_LENGTH);
}

static void test_reject_bad_magic(void **state)
{
	(void)state;
	uint8_t p[BFP_FRAME_SIZE_MAX];
	memcpy(p, frame, frame_len);
	p[0] ^= 0x20;
	reseal(p, frame_len);
	expect_reject(p, frame_len, BFP_E_MAGIC);
}

static void test_reject_unknown_format_version(void **state)
{
	(void)state;
	uint8_t p[BFP_FRAME_SIZE_MAX];
	memcpy(p, frame, frame_len);
	p[4] = 2;
	reseal(p, frame_len);
	expect_reject(p, frame_len, BFP_E_FORMAT_VERSION);
}

/* Every reserved bit (flags, bytes 6-7) set alone is rejected. */
static void test_reject_reserved_bits_set(void **state)
{
	(void)state;
	uint8_t p[BFP_FRAME_SIZE_MAX];
	for (int bit = 0; bit < 16; bit++) {
		memcpy(p, frame, frame_len);
		p[6 + bit / 8] ^= (uint8_t)(1u << (bit % 8));
		reseal(p, frame_len);
		expect_reject(p, frame_len, BFP_E_RESERVED);
	}
}

static void test_reject_unknown_encoding(void **state)
{
	(void)state;
	uint8_t p[BFP_FRAME_SIZE_MAX];
	static const uint8_t bad[] = {0, BFP_ENC_LAST + 1, 200, 255};
	for (size_t i = 0; i < sizeof(bad); i++) {
		memcpy(p, frame, frame_len);
		p[5] = bad[i];
		reseal(p, frame_len);
		expect_reject(p, frame_len, BFP_E_ENCODING);
	}
}

/* Any single flipped bit anywhere fails the CRC (or an earlier check). */
static void test_reject_any_flipped_bit(void **state)
{
	(void)state;
	uint8_t p[BFP_FRAME_SIZE_MAX];
	for (size_t bit = 0; bit < frame_len * 8; bit += 3) {
		memcpy(p, frame, frame_len);
		p[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		bfp_apply_opts ao = aopts();
		bfp_status st = bfp_decode_apply(&rdec, &ao, p, frame_len, rw, RN, NULL);
		assert_true(st != BFP_OK);
		if (bit / 8 >= 4 && !(bit / 8 >= 44 && bit / 8 < 48))
			assert_int_equal(st, (bit / 8 == 4) ? BFP_E_FORMAT_VERSION : BFP_E_CHECKSUM);
		assert_words_equal(rw, rsnap, RN);
	}
}

static void test_reject_range_out_of_bounds(void **state)
{
	(void)state;
	uint8_t p[BFP_FRAME_SIZE_MAX];
	bfp_frame_header h;
	assert_int_equal(bfp_frame_parse(frame, frame_len, &h), BFP_OK);
	/* begin past the end, end past the end, begin+len overflowing */
	uint64_t begins[] = {RN, RN - h.range_len + 1, UINT64_MAX - 2};
	for (size_t i = 0; i < 3; i++) {
		memcpy(p, frame, frame_len);
		put32(p + 32, (uint32_t)begins[i]);
		put32(p + 36, (uint32_t)(begins[i] >> 32));
		reseal(p, frame_len);
		expect_reject(p, frame_len, BFP_E_RANGE);
	}
	memcpy(p, frame, frame_len);
	put32(p + 40, 0); /* empty range */
	reseal(p, frame_len);
	expect_reject(p, frame_len, BFP_E_RANGE);
}

static void test_reject_counts_inconsistent(void **state)
{
	(void)state;
	uint8_t p[BFP_FRAME_SIZE_MAX];
	uint32_t pairs[][2] = {{3, 3}, {4, 3}, {UINT32_MAX, 1}, {1, 1}};
	for (size_t i = 0; i < 4; i++) {
		memcpy(p, frame, frame_len);
		put32(p + 24, pairs[i][0]);
		put32(p + 28, pairs[i][1]);
		reseal(p, frame_len);
		expect_reject(p, frame_len, BFP_E_COUNT);
	}
}

/* FORMAT.md 2.5: a streamed frame (count 0, any index) applies like any
 * other, and bit-exactly. */
static void test_streamed_frame_applies(void **state)
{
	(void)state;
	uint8_t p[BFP_FRAME_SIZE_MAX];
	bfp_frame_header h;
	bfp_apply_opts ao = aopts();
	memcpy(p, frame, frame_len);
	put32(p + 24, 77);
	put32(p + 28, 0);
	reseal(p, frame_len);
	assert_int_equal(bfp_decode_apply(&rdec, &ao, p, frame_len, rw, RN, NULL), BFP_OK);
	assert_int_equal(bfp_frame_parse(p, frame_len, &h), BFP_OK);
	/* the range is at the target the frame was encoded from, the rest at base */
	assert_words_equal(rw + h.range_begin, rt + h.range_begin, h.range_len);
	assert_words_equal(rw, rb, h.range_begin);
	assert_words_equal(rw + h.range_begin + h.range_len, rb + h.range_begin + h.range_len,
			   RN - h.range_begin - h.range_len);
}

/* bfp_decode_verify checks what bfp_decode_apply checks and writes
 * nothing; writing the changes it leaves gives the target over the range. */
static void test_decode_verify_writes_nothing(void **state)
{
	(void)state;
	uint8_t p[BFP_FRAME_SIZE_MAX];
	bfp_frame_header h;
	bfp_apply_opts ao = aopts();
	assert_int_equal(bfp_decode_verify(&rdec, &ao, frame, frame_len, rw, RN, &h), BFP_OK);
	assert_words_equal(rw, rsnap, RN);
	const uint32_t *pos;
	const uint16_t *val;
	const uint32_t n = bfp_decoder_changes(&rdec, &pos, &val);
	assert_true(n > 0);
	for (uint32_t i = 0; i < n; i++) {
		assert_true(pos[i] < h.range_len);
		rw[h.range_begin + pos[i]] = val[i];
	}
	assert_words_equal(rw + h.range_begin, rt + h.range_begin, h.range_len);
	assert_words_equal(rw, rb, h.range_begin);
	/* at the target already: the hash of base-with-changes fails, and
	 * the decoder then holds no changes */
	memcpy(rsnap, rw, sizeof(rw));
	expect_reject(frame, frame_len, BFP_E_HASH);
	assert_int_equal(bfp_decode_verify(&rdec, &ao, frame, frame_len, rw, RN, NULL), BFP_E_HASH);
	assert_int_equal(bfp_decoder_changes(&rdec, &pos, &val), 0);
	assert_null(pos);
	assert_null(val);
	/* a corrupt frame is refused as by apply */
	memcpy(p, frame, frame_len);
	p[frame_len - 1] ^= 1;
	assert_int_equal(bfp_decode_verify(&rdec, &ao, p, frame_len, rb, RN, NULL),
			 BFP_E_CHECKSUM);
	/* keyframes carry no changes */
	uint16_t key[64];
	size_t kl;
	static bfp_encoder enc;
	bfp_encode_opts o = opts(1200);
	o.flags = BFP_ENC_F_KEYFRAME;
	o.base_version = 0;
	o.frame_count = 1;
	memcpy(key, rt, sizeof(key));
	assert_int_equal(bfp_encoder_init(&enc, &o, NULL, key, 64, 0, 64), BFP_OK);
	assert_int_equal(bfp_encode_next(&enc, p, sizeof(p), &kl), BFP_OK);
	ao.flags = BFP_DEC_F_ANY_MODEL;
	assert_int_equal(bfp_decode_verify(&rdec, &ao, p, kl, rb, 64, NULL), BFP_E_UNSUPPORTED);
	assert_int_equal(bfp_decoder_changes(&rdec, NULL, NULL), 0);
}

static void test_reject_wrong_model(void **state)
{
	(void)state;
	uint8_t p[BFP_FRAME_SIZE_MAX];
	memcpy(p, frame, frame_len);
	p[8] ^= 1;
	reseal(p, frame_len);
	expect_reject(p, frame_len, BFP_E_MODEL);
}

static void test_reject_wrong_base_version(void **state)
{
	(void)state;
	uint8_t p[BFP_FRAME_SIZE_MAX];
	memcpy(p, frame, frame_len);
	put32(p + 16, 6);
	reseal(p, frame_len);
	expect_reject(p, frame_len, BFP_E_BASE_VERSION);
	/* target not after base */
	memcpy(p, frame, frame_len);
	put32(p + 20, 7);
	reseal(p, frame_len);
	expect_reject(p, frame_len, BFP_E_BASE_VERSION);
}

/* A payload edited under a valid CRC is corrupt or fails the hash; the
 * rare edit that leaves the decoded changes as they were (a parameter no
 * change of the frame uses) applies exactly the target. Both encodings. */
static void corrupt_payloads(const uint8_t *frm, size_t len)
{
	uint8_t p[BFP_FRAME_SIZE_MAX];
	uint64_t s = 1234;
	bfp_frame_header h;
	assert_int_equal(bfp_frame_parse(frm, len, &h), BFP_OK);
	for (int trial = 0; trial < 2000; trial++) {
		memcpy(p, frm, len);
		size_t at = BFP_HEADER_SIZE + (size_t)(t_rand(&s) % (len - BFP_HEADER_SIZE));
		p[at] ^= (uint8_t)(1u << (t_rand(&s) % 8));
		reseal(p, len);
		bfp_apply_opts ao = aopts();
		bfp_status st = bfp_decode_apply(&rdec, &ao, p, len, rw, RN, NULL);
		if (st == BFP_OK) {
			assert_words_equal(rw + h.range_begin, rt + h.range_begin, h.range_len);
			memcpy(rw, rsnap, sizeof(rw));
			continue;
		}
		/* (a frame that refers to a model, its reference hit: no model) */
		assert_true(st == BFP_E_CORRUPT || st == BFP_E_HASH || st == BFP_E_NO_MODEL);
		assert_words_equal(rw, rsnap, RN);
	}
}

static void test_reject_corrupt_payload_under_valid_crc(void **state)
{
	(void)state;
	uint8_t p[BFP_FRAME_SIZE_MAX];
	assert_int_equal(frame[5], BFP_ENC_SPARSE);
	corrupt_payloads(frame, frame_len);
	static bfp_encoder enc;
	/* the same for a frame that carries a model, then one that refers to
	 * it, with that model loaded */
	{
		const size_t f = 0;
		bfp_encode_opts o = opts(BFP_FRAME_SIZE_MIN); /* two frames at least */
		uint8_t p8[BFP_FRAME_SIZE_MAX];
		size_t len, len8;
		o.sparse = t_sparse_mode[f];
		assert_int_equal(bfp_encoder_init(&enc, &o, rb, rt, RN, 0, RN), BFP_OK);
		assert_int_equal(bfp_encode_next(&enc, p, sizeof(p), &len), BFP_OK);
		assert_int_equal(p[5], t_sparse_first[f]);
		bfp_status st8 = bfp_encode_next(&enc, p8, sizeof(p8), &len8);
		corrupt_payloads(p, len);
		assert_int_equal(st8, BFP_OK);
		assert_int_equal(p8[5], t_sparse_encs[f]);
		assert_int_equal(bfp_decoder_load_model(&rdec, p, len), BFP_OK);
		corrupt_payloads(p8, len8);
	}
	/* a payload shortened by one byte (header length adjusted) */
	memcpy(p, frame, frame_len);
	put32(p + 44, (uint32_t)(frame_len - BFP_HEADER_SIZE - 1));
	reseal(p, frame_len - 1);
	expect_reject(p, frame_len - 1, BFP_E_CORRUPT);
}

/* A test-side LSB-first bit writer (FORMAT.md 3.1), for crafted payloads. */
typedef struct tbits {
	uint8_t b[512];
	size_t n; /* bits */
} tbits;

static void tput(tbits *t, uint64_t v, unsigned k)
{
	for (unsigned i = 0; i < k; i++, t->n++)
		if (i < 64 && ((v >> i) & 1))
			t->b[t->n / 8] |= (uint8_t)(1u << (t->n % 8));
}

static void teg0(tbits *t, uint32_t v)
{
	uint64_t x = (uint64_t)v + 1;
	unsigned len = 0;
	while ((x >> len) > 1)
		len++;
	tput(t, 0, len);
	tput(t, 1, 1);
	tput(t, x, len);
}

/* Frame over rb[0..L) with t's bits as a payload of encoding enc; returns
 * the status of decode_apply (buffer checked untouched), or with stats,
 * of bfp_frame_stats_get (the payload parsed, nothing applied). */
enum { CL = 1000 };
static bfp_status crafted(const tbits *t, uint8_t enc, bfp_frame_stats *stats)
{
	uint8_t p[BFP_FRAME_SIZE_MAX];
	size_t pl = (t->n + 7) / 8, len = BFP_HEADER_SIZE + pl;
	memcpy(p, frame, BFP_HEADER_SIZE);
	p[5] = enc;
	memset(p + 32, 0, 8);
	put32(p + 40, CL);
	put32(p + 44, (uint32_t)pl);
	memcpy(p + BFP_HEADER_SIZE, t->b, pl);
	reseal(p, len);
	if (stats)
		return bfp_frame_stats_get(&rdec, p, len, stats);
	bfp_apply_opts ao = aopts();
	bfp_status st = bfp_decode_apply(&rdec, &ao, p, len, rw, RN, NULL);
	assert_words_equal(rw, rsnap, RN);
	return st;
}

static unsigned tclass(uint16_t x)
{
	unsigned e = (x >> 7) & 0xFF;
	return e <= 108 ? 0 : (e >= 123 ? 15 : e - 108);
}

/* A self-contained payload's own fields and the class headers up to
 * class c (which gets n changes, gaps plain at level 0, the default
 * magnitude code), the other classes empty: count order 0, the gap
 * level base such that class c's level is predicted 0, and the default
 * code of common magnitude dc, runs and all as given (k 0, down 0). */
static void head_sc(tbits *t, unsigned c, uint32_t n, uint32_t dc, unsigned druns,
		    unsigned dall)
{
	memset(t, 0, sizeof(*t));
	tput(t, 0, 3);          /* kn */
	tput(t, 64 - 2 * c, 7); /* g0 */
	teg0(t, dc - 1);        /* default code: C */
	tput(t, druns, 1);
	if (druns)
		tput(t, dall, 1);
	if (!(druns && dall)) {
		tput(t, 0, 4); /* k */
		if (dc > 1)
			tput(t, 0, 1); /* down */
	}
	if (druns && !dall)
		tput(t, 0, 4); /* kr */
	for (unsigned d = 0; d < c; d++)
		teg0(t, 0);
	teg0(t, n);
	tput(t, 0, 1); /* gaps plain */
	teg0(t, 0);    /* level as predicted */
	tput(t, 1, 1); /* default magnitude code */
}

static void tail_sc(tbits *t, unsigned c)
{
	for (unsigned d = c + 1; d < BFP_CLASSES; d++)
		teg0(t, 0);
}

/* One change at rank 0 of class c: gap 0 at level 0, the sign, and, if
 * v is not ~0, the magnitude's folded value v in EG0. */
static void one_change_sc(tbits *t, unsigned c, unsigned sign, uint32_t v)
{
	tail_sc(t, c);
	tput(t, 1, 1);
	tput(t, sign, 1);
	if (v != ~0u)
		teg0(t, v);
}

/* FORMAT.md 3.4: the magnitude rules of a sparse payload, each on a
 * crafted self-contained payload that is complete and well formed but
 * for the rule, next to a well-formed one built the same way. */
static void test_reject_sparse_magnitude_rules(void **state)
{
	(void)state;
	tbits t;
	bfp_frame_stats fs;
	unsigned c = tclass(rb[0]);
	/* well formed: one step up (default code: all magnitudes 1) */
	head_sc(&t, c, 1, 1, 1, 1);
	one_change_sc(&t, c, 0, ~0u);
	assert_int_equal(crafted(&t, BFP_ENC_SPARSE, &fs), BFP_OK);
	assert_int_equal(fs.n_changes, 1);
	/* a default common magnitude above 32768 (no changes) */
	memset(&t, 0, sizeof(t));
	tput(&t, 0, 3);
	tput(&t, 64, 7);
	teg0(&t, 32768);
	tput(&t, 3, 2); /* runs, all */
	tail_sc(&t, 0);
	teg0(&t, 0);
	assert_int_equal(crafted(&t, BFP_ENC_SPARSE, NULL), BFP_E_CORRUPT);
	/* +32768: every magnitude 32768, sign 0; with sign 1 it is valid */
	head_sc(&t, c, 1, 32768, 1, 1);
	one_change_sc(&t, c, 0, ~0u);
	assert_int_equal(crafted(&t, BFP_ENC_SPARSE, NULL), BFP_E_CORRUPT);
	head_sc(&t, c, 1, 32768, 1, 1);
	one_change_sc(&t, c, 1, ~0u);
	assert_int_equal(crafted(&t, BFP_ENC_SPARSE, &fs), BFP_OK);
	/* plain code centred on 32768: v = 65534 is magnitude 1, v = 65535
	 * folds past 32768 */
	head_sc(&t, c, 1, 32768, 0, 0);
	one_change_sc(&t, c, 1, 65534);
	assert_int_equal(crafted(&t, BFP_ENC_SPARSE, &fs), BFP_OK);
	head_sc(&t, c, 1, 32768, 0, 0);
	one_change_sc(&t, c, 1, 65535);
	assert_int_equal(crafted(&t, BFP_ENC_SPARSE, NULL), BFP_E_CORRUPT);
	/* ... and v = 0 is magnitude 32768 itself: +32768 (sign 0) is
	 * corrupt, -32768 valid */
	head_sc(&t, c, 1, 32768, 0, 0);
	one_change_sc(&t, c, 0, 0);
	assert_int_equal(crafted(&t, BFP_ENC_SPARSE, NULL), BFP_E_CORRUPT);
	head_sc(&t, c, 1, 32768, 0, 0);
	one_change_sc(&t, c, 1, 0);
	assert_int_equal(crafted(&t, BFP_ENC_SPARSE, &fs), BFP_OK);
	/* a run of common magnitudes longer than the class (2 of 1) */
	head_sc(&t, c, 1, 1, 1, 0);
	tail_sc(&t, c);
	tput(&t, 1, 1); /* gap */
	tput(&t, 4, 3); /* run length 2 in Rice(0) */
	tput(&t, 0, 1); /* sign */
	assert_int_equal(crafted(&t, BFP_ENC_SPARSE, NULL), BFP_E_CORRUPT);
	/* more changes than the range has elements */
	head_sc(&t, c, CL + 1, 1, 1, 1);
	tail_sc(&t, c);
	for (unsigned i = 0; i <= CL; i++)
		tput(&t, 1, 1); /* gaps 0 */
	tput(&t, 0, CL + 1); /* signs */
	assert_int_equal(crafted(&t, BFP_ENC_SPARSE, NULL), BFP_E_CORRUPT);
}

/* A self-contained payload (FORMAT.md 3.5): classes a - 1 and a of the fixture's range
 * get one change each at rank 0, with gap levels 0; class a - 1 uses the
 * default code (every magnitude 1), class a its own code relative to
 * it: C = 1 + dc, runs and all as given, k = kd (plain), and the one
 * magnitude is C. lv_dev: the zigzag deviation of class a's level from
 * its prediction (3 gives level 0). */
static void sparse6(tbits *t, unsigned a, uint32_t lv_dev, int32_t dc, unsigned all, int32_t kd)
{
	memset(t, 0, sizeof(*t));
	tput(t, 0, 3);                    /* kn */
	tput(t, 64 - 2 * (a - 1), 7);     /* g0: level of class a - 1 predicted 0 */
	teg0(t, 0);                       /* default code: C = 1 */
	tput(t, 3, 2);                    /* runs, all */
	for (unsigned d = 0; d + 1 < a; d++)
		teg0(t, 0);
	teg0(t, 1);                       /* class a - 1: one change */
	tput(t, 0, 1);                    /* gaps plain */
	teg0(t, 0);                       /* level as predicted: 0 */
	tput(t, 1, 1);                    /* default magnitude code */
	teg0(t, 1);                       /* class a: one change */
	tput(t, 0, 1);
	teg0(t, lv_dev);                  /* level: prediction 2 */
	tput(t, 0, 1);                    /* own code, relative to class a - 1 */
	teg0(t, dc >= 0 ? 2u * (uint32_t)dc : 2u * (uint32_t)(-dc) - 1);
	tput(t, all, 1);                  /* runs */
	if (all)
		tput(t, 1, 1);            /* all */
	else
		teg0(t, kd >= 0 ? 2u * (uint32_t)kd : 2u * (uint32_t)(-kd) - 1);
	if (!all && 1 + dc > 1)
		tput(t, 0, 1);            /* down */
	for (unsigned d = a + 1; d < BFP_CLASSES; d++)
		teg0(t, 0);
	tput(t, 1, 1);                    /* class a - 1: gap 0 */
	tput(t, 0, 1);                    /* its sign */
	tput(t, 1, 1);                    /* class a: gap 0 */
	if (lv_dev == 122)
		tput(t, 0, 32);           /* at level 63 (Rice(32)), were it valid */
	tput(t, 1, 1);                    /* sign 1 */
	if (!all && kd >= 0) {            /* magnitude C: folded 0 in EG(k) */
		tput(t, 1, 1);
		tput(t, 0, (unsigned)kd);
	}
}

/* FORMAT.md 3.5: each reject rule of a self-contained payload's class
 * header on a crafted payload, next to a well-formed one built the same
 * way. */
static void test_reject_self_contained_rules(void **state)
{
	(void)state;
	tbits t;
	bfp_frame_stats fs;
	unsigned in[BFP_CLASSES] = {0}, a = 1;
	for (unsigned i = 0; i < CL; i++)
		in[tclass(rb[i])]++;
	while (a < BFP_CLASSES && !(in[a] && in[a - 1]))
		a++;
	assert_true(a < BFP_CLASSES);
	/* well formed: C = 2, all; C = 32768, all (sign 1); plain, k = 15 */
	sparse6(&t, a, 3, 1, 1, 0);
	assert_int_equal(crafted(&t, BFP_ENC_SPARSE, &fs), BFP_OK);
	assert_int_equal(fs.n_changes, 2);
	sparse6(&t, a, 3, 32767, 1, 0);
	assert_int_equal(crafted(&t, BFP_ENC_SPARSE, &fs), BFP_OK);
	sparse6(&t, a, 3, 1, 0, 15);
	assert_int_equal(crafted(&t, BFP_ENC_SPARSE, &fs), BFP_OK);
	/* a common magnitude of 0 or 32769 */
	sparse6(&t, a, 3, -1, 1, 0);
	assert_int_equal(crafted(&t, BFP_ENC_SPARSE, NULL), BFP_E_CORRUPT);
	sparse6(&t, a, 3, 32768, 1, 0);
	assert_int_equal(crafted(&t, BFP_ENC_SPARSE, NULL), BFP_E_CORRUPT);
	/* an Exp-Golomb order of -1 or 16 */
	sparse6(&t, a, 3, 1, 0, -1);
	assert_int_equal(crafted(&t, BFP_ENC_SPARSE, NULL), BFP_E_CORRUPT);
	sparse6(&t, a, 3, 1, 0, 16);
	assert_int_equal(crafted(&t, BFP_ENC_SPARSE, NULL), BFP_E_CORRUPT);
	/* a gap level below 0 (prediction 2, deviation -3) */
	sparse6(&t, a, 5, 1, 1, 0);
	assert_int_equal(crafted(&t, BFP_ENC_SPARSE, NULL), BFP_E_CORRUPT);
	/* a gap level of 63: prediction 2, deviation +61 (the gap is written
	 * as Rice(32) would code it, so only the level rule rejects it) */
	sparse6(&t, a, 122, 1, 1, 0);
	assert_int_equal(crafted(&t, BFP_ENC_SPARSE, NULL), BFP_E_CORRUPT);
}

/* FORMAT.md 3.6, written out for the test: a table's frequencies, a
 * magnitude's symbol, and rANS coding. */
typedef struct ttab {
	unsigned e, sb, ns;
	int q[100];
	uint32_t f[100], cum[100];
} ttab;

static int ttab_freqs(ttab *t)
{
	static const uint32_t w[30] = {4,     6,     8,     11,    16,    23,    32,    45,
				       64,    91,    128,   181,   256,   362,   512,   724,
				       1024,  1448,  2048,  2896,  4096,  5793,  8192,  11585,
				       16384, 23170, 32768, 46341, 65536, 92682};
	uint32_t sum = 0, tot = 0;
	unsigned top = 0;
	for (unsigned i = 0; i < t->ns; i++)
		sum += w[t->q[i]];
	for (unsigned i = 0; i < t->ns; i++) {
		t->f[i] = w[t->q[i]] * 2048 / sum;
		t->f[i] += t->f[i] == 0;
		top = t->f[i] > t->f[top] ? i : top;
		tot += t->f[i];
	}
	if ((int64_t)t->f[top] + 2048 - tot < 1)
		return 0;
	t->f[top] = t->f[top] + 2048 - tot;
	for (unsigned i = 0, c = 0; i < t->ns; c += t->f[i], i++)
		t->cum[i] = c;
	return 1;
}

/* A payload that carries a model, over the crafted range: g0 0, default code "all
 * one", every class plain gaps at the predicted level, the default
 * magnitude code, count order 0; class 0 has table tb and n changes
 * (gaps 0) of magnitudes mag[] (sign = neg[]), coded with tb's shape and
 * frequencies (out of its rules, where they still work out; a table whose
 * frequencies do not goes with n 0); esc_extra is added to every escape;
 * state_add to the rANS initial state (or state_set replaces its final
 * one); gap_bytes stray bytes sit between the bit stream and the rANS
 * part. */
typedef struct t9 {
	ttab tb;
	unsigned n;
	unsigned mag[40], neg[40];
	unsigned esc_extra, gap_bytes;
	uint32_t state_add, state_set;
} t9;

static unsigned tsym(const ttab *tb, unsigned m, unsigned *nraw)
{
	if (m < (1u << tb->e)) {
		*nraw = 0;
		return m - 1;
	}
	unsigned j = 0;
	while ((m >> (j + 1)) != 0)
		j++;
	*nraw = j - tb->sb;
	return (1u << tb->e) - 1 + ((j - tb->e) << tb->sb) +
	       ((m >> (j - tb->sb)) & ((1u << tb->sb) - 1));
}

static void payload9(tbits *t, const t9 *x)
{
	uint8_t tail[64];
	unsigned sym[40], nt = 0;
	uint32_t signs = 0;
	ttab tb = x->tb;
	memset(t, 0, sizeof(*t));
	if (x->n)
		assert_true(ttab_freqs(&tb));
	tput(t, 64, 7);          /* g0 = 0 */
	teg0(t, 0);              /* default: C = 1 */
	tput(t, 3, 2);           /* runs, all */
	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		tput(t, 0, 4);   /* kc */
		tput(t, 0, 1);   /* gr */
		teg0(t, 0);      /* the predicted level */
		tput(t, c == 0, 1);
		if (c) {
			tput(t, 1, 1); /* the default magnitude code */
			continue;
		}
		tput(t, x->tb.e, 3);
		tput(t, x->tb.sb, 2);
		teg0(t, x->tb.ns - 1);
		tput(t, (unsigned)x->tb.q[0], 5);
		for (unsigned i = 1; i < x->tb.ns; i++) {
			int d = x->tb.q[i] - x->tb.q[i - 1];
			teg0(t, d >= 0 ? 2u * (unsigned)d : 2u * (unsigned)(-d) - 1);
		}
	}
	for (unsigned c = 0; c < BFP_CLASSES; c++)
		teg0(t, c ? 0 : x->n); /* counts in EG0 (order 0) */
	for (unsigned j = 0; j < x->n; j++)
		tput(t, 1, 1); /* gap 0 at level 0: Rice(0) */
	for (unsigned j = 0; j < x->n; j++) {
		unsigned nraw, s = tsym(&tb, x->mag[j], &nraw), top = tb.ns - 1;
		if (nt < 23)
			signs |= x->neg[j] << nt;
		else
			tput(t, x->neg[j], 1);
		nt++;
		if (s >= top)
			teg0(t, s - top + x->esc_extra);
		tput(t, x->mag[j], nraw);
		sym[j] = s < top ? s : top;
	}
	t->n = (t->n + 7) / 8 * 8;
	if (!x->n)
		return;
	for (unsigned i = 0; i < x->gap_bytes; i++)
		tput(t, 0x5A, 8);
	uint32_t st = x->state_set ? x->state_set : (1u << 23) + signs + x->state_add;
	size_t k = 0;
	for (unsigned j = x->n; j-- > 0;) {
		uint32_t f = tb.f[sym[j]];
		while (st >= (f << 20)) {
			tail[k++] = (uint8_t)st;
			st >>= 8;
		}
		st = ((st / f) << 11) + st % f + tb.cum[sym[j]];
	}
	for (size_t i = 0; i < k; i++)
		tput(t, tail[i], 8);
	tput(t, x->state_set ? x->state_set : st, 32);
}

/* FORMAT.md 3.6: the rules of a model's tables and rANS part, each
 * on a payload that differs from a well-formed one by that rule only. */
/* The status of the stats of y's payload. */
static void expect9(const t9 *y, bfp_status want)
{
	tbits t;
	bfp_frame_stats fs;
	payload9(&t, y);
	assert_int_equal(crafted(&t, BFP_ENC_SPARSE_MODEL, &fs), want);
}

static void test_reject_model_table_rules(void **state)
{
	(void)state;
	tbits t;
	bfp_frame_stats fs;
	static const unsigned mags[30] = {1, 2, 3, 4, 5, 1, 1, 2, 7, 300, 1, 2, 1, 3, 2,
					  1, 1, 32768, 2, 1, 4, 1, 9, 1, 2, 32768, 1, 2, 3, 1};
	t9 x = {.tb = {.e = 2, .sb = 1, .ns = 4, .q = {20, 18, 16, 10}}, .n = 30};
	assert_true(ttab_freqs(&x.tb));
	for (unsigned j = 0; j < x.n; j++) {
		x.mag[j] = mags[j];
		x.neg[j] = mags[j] == 32768 || (j * 7) % 3 == 0;
	}
	/* well formed: escapes, raw bits, -32768 with its sign in the state
	 * (change 17) and in the bit stream (25) */
	payload9(&t, &x);
	assert_int_equal(crafted(&t, BFP_ENC_SPARSE_MODEL, &fs), BFP_OK);
	assert_int_equal(fs.n_changes, 30);
	assert_int_equal(fs.class_changes[0], 30);
	/* each shape rule on a table whose payload decodes otherwise (30
	 * single steps, one symbol each): e above 6; sb above 2; sb above e;
	 * more symbols than the shape has (e 0, sb 0: 16) */
	t9 one = x;
	for (unsigned j = 0; j < one.n; j++)
		one.mag[j] = 1;
	static const unsigned shapes[4][3] = {{7, 1, 4}, {3, 3, 4}, {1, 2, 4}, {0, 0, 17}};
	for (unsigned i = 0; i < 4; i++) {
		t9 y = one;
		y.tb.e = shapes[i][0];
		y.tb.sb = shapes[i][1];
		y.tb.ns = shapes[i][2];
		for (unsigned k = 0; k < y.tb.ns; k++)
			y.tb.q[k] = 10 + (int)k % 3;
		expect9(&y, BFP_E_CORRUPT);
	}
	/* a weight of 30, and one below 0 (the weights would be out of the
	 * table: kept as a rule of their own) */
	t9 y = one;
	y.n = 0;
	y.tb.q[0] = 30;
	expect9(&y, BFP_E_CORRUPT);
	y.tb.q[0] = 20;
	y.tb.q[3] = -1;
	expect9(&y, BFP_E_CORRUPT);
	/* weights whose frequencies leave the largest below 1: 40 symbols of
	 * weight 29 and 60 of weight 0 (each rounded up to 1); no changes */
	y = x;
	y.tb.e = 6;
	y.tb.sb = 2;
	y.tb.ns = 100;
	for (unsigned i = 0; i < 100; i++)
		y.tb.q[i] = i < 40 ? 29 : 0;
	assert_false(ttab_freqs(&y.tb));
	y.n = 0;
	expect9(&y, BFP_E_CORRUPT);
	y.tb.ns = 90; /* (with 50 of weight 0 they do) */
	assert_true(ttab_freqs(&y.tb));
	expect9(&y, BFP_OK);
	/* an escape past the last symbol of the shape (30 for e 2, sb 1;
	 * its magnitude would be past 32768 too; the rule bounds the raw
	 * bits that follow) */
	y = x;
	y.esc_extra = 26;
	expect9(&y, BFP_E_CORRUPT);
	/* a magnitude above 32768: the last symbol with raw bits not 0 */
	y = x;
	y.mag[9] = 32769;
	expect9(&y, BFP_E_CORRUPT);
	/* +32768, its sign in the state, then in the bit stream */
	y = x;
	y.neg[17] = 0;
	expect9(&y, BFP_E_CORRUPT);
	y = x;
	y.neg[25] = 0;
	expect9(&y, BFP_E_CORRUPT);
	/* the rANS state: below 2^23, at 2^31 */
	y = x;
	y.n = 1;
	y.state_set = (1u << 23) - 1;
	expect9(&y, BFP_E_CORRUPT);
	y.state_set = 1u << 31;
	expect9(&y, BFP_E_CORRUPT);
	/* the decoding ends at another state than 2^23 plus the signs: one
	 * more than 23 signs' worth */
	y = x;
	y.state_add = 1u << 23;
	expect9(&y, BFP_E_CORRUPT);
	/* a byte between the bit stream and the rANS part */
	y = x;
	y.gap_bytes = 1;
	expect9(&y, BFP_E_CORRUPT);
}

static void test_reject_wrong_target_hash(void **state)
{
	(void)state;
	uint8_t p[BFP_FRAME_SIZE_MAX];
	memcpy(p, frame, frame_len);
	p[50] ^= 4;
	reseal(p, frame_len);
	expect_reject(p, frame_len, BFP_E_HASH);
}

/* bfp_frame_check_target tells applied from not applied. */
static void test_check_target_detects_applied_frames(void **state)
{
	(void)state;
	int at = -1;
	assert_int_equal(bfp_frame_check_target(frame, frame_len, rw, RN, &at), BFP_OK);
	assert_int_equal(at, 0);
	assert_int_equal(bfp_frame_check_target(frame, frame_len, rt, RN, &at), BFP_OK);
	assert_int_equal(at, 1);
}

/* set_index rewrites index/count and keeps the frame valid. */
static void test_set_index_reseals_the_frame(void **state)
{
	(void)state;
	uint8_t p[BFP_FRAME_SIZE_MAX];
	bfp_frame_header h;
	memcpy(p, frame, frame_len);
	assert_int_equal(bfp_frame_set_index(p, frame_len, 5, 9), BFP_OK);
	assert_int_equal(bfp_frame_parse(p, frame_len, &h), BFP_OK);
	assert_int_equal(h.frame_index, 5);
	assert_int_equal(h.frame_count, 9);
	assert_int_equal(bfp_frame_set_index(p, frame_len, 9, 9), BFP_E_COUNT);
	/* streamed (FORMAT.md 2.5): count 0, any index */
	assert_int_equal(bfp_frame_set_index(p, frame_len, UINT32_MAX, 0), BFP_OK);
	assert_int_equal(bfp_frame_parse(p, frame_len, &h), BFP_OK);
	assert_int_equal(h.frame_index, UINT32_MAX);
	assert_int_equal(h.frame_count, 0);
}

/* Encoder options are checked. */
static void test_encoder_rejects_bad_options(void **state)
{
	(void)state;
	static bfp_encoder enc;
	bfp_encode_opts o = opts(BFP_FRAME_SIZE_MIN - 1);
	assert_int_equal(bfp_encoder_init(&enc, &o, rb, rt, RN, 0, RN), BFP_E_ARG);
	o = opts(BFP_FRAME_SIZE_MAX + 1);
	assert_int_equal(bfp_encoder_init(&enc, &o, rb, rt, RN, 0, RN), BFP_E_ARG);
	o = opts(1200);
	o.target_version = o.base_version;
	assert_int_equal(bfp_encoder_init(&enc, &o, rb, rt, RN, 0, RN), BFP_E_ARG);
	o = opts(1200);
	assert_int_equal(bfp_encoder_init(&enc, &o, rb, rt, RN, 5, RN + 1), BFP_E_RANGE);
	assert_int_equal(bfp_encoder_init(&enc, &o, NULL, rt, RN, 0, RN), BFP_E_ARG);
	o.flags = 1u << 20;
	assert_int_equal(bfp_encoder_init(&enc, &o, rb, rt, RN, 0, RN), BFP_E_ARG);
	o = opts(1200);
	uint8_t out[64];
	size_t len;
	assert_int_equal(bfp_encoder_init(&enc, &o, rb, rt, RN, 0, RN), BFP_OK);
	assert_int_equal(bfp_encode_next(&enc, out, sizeof(out), &len), BFP_E_SPACE);
	/* reset of an encoder bfp_encoder_init never set up: refused (its
	 * zero frame size would have let frames overrun the buffer) */
	memset(&enc, 0, sizeof(enc));
	assert_int_equal(bfp_encoder_reset(&enc, rb, rt, RN, 0, RN, 0), BFP_E_ARG);
	/* a sparse mode that bfp_sparse_mode does not name; after a failed
	 * init the encoder is not set up, whatever it held before */
	bfp_encode_opts so = opts(1200);
	assert_int_equal(bfp_encoder_init(&enc, &so, rb, rt, RN, 0, RN), BFP_OK);
	so.sparse = BFP_SPARSE_SELF_CONTAINED + 1;
	assert_int_equal(bfp_encoder_init(&enc, &so, rb, rt, RN, 0, RN), BFP_E_ARG);
	assert_int_equal(bfp_encode_next(&enc, out, sizeof(out), &len), BFP_E_ARG);
	assert_int_equal(bfp_encoder_reset(&enc, rb, rt, RN, 0, RN, 0), BFP_E_ARG);
	bfp_stage_counts sc;
	assert_int_equal(bfp_encoder_stages(&enc, &sc), BFP_E_ARG);
	assert_int_equal(bfp_encoder_frames(&enc), 0);
	/* a failed reset leaves the encoder as it was: the same frames */
	so.sparse = BFP_SPARSE_SHARED;
	uint8_t first[BFP_FRAME_SIZE_MAX], again[BFP_FRAME_SIZE_MAX];
	size_t first_len, again_len;
	assert_int_equal(bfp_encoder_init(&enc, &so, rb, rt, RN, 0, RN), BFP_OK);
	assert_int_equal(bfp_encode_next(&enc, first, sizeof(first), &first_len), BFP_OK);
	assert_int_equal(bfp_encoder_init(&enc, &so, rb, rt, RN, 0, RN), BFP_OK);
	assert_int_equal(bfp_encoder_reset(&enc, rb, rt, RN, 0, RN + 1, 0), BFP_E_RANGE);
	assert_int_equal(bfp_encoder_reset(&enc, rb, NULL, RN, 0, RN, 0), BFP_E_ARG);
	assert_int_equal(bfp_encode_next(&enc, again, 16, &again_len), BFP_E_SPACE);
	assert_int_equal(bfp_encode_next(&enc, again, sizeof(again), &again_len), BFP_OK);
	assert_int_equal(again_len, first_len);
	assert_memory_equal(again, first, first_len);
	/* a decoder never set up, or whose set-up failed, refuses every call */
	static bfp_decoder z;
	memset(&z, 0, sizeof(z));
	bfp_apply_opts zo = aopts();
	assert_int_equal(bfp_decode_apply(&z, &zo, frame, frame_len, rw, RN, NULL), BFP_E_ARG);
	assert_int_equal(bfp_decoder_init(&z, 0), BFP_OK);
	assert_int_equal(bfp_decoder_init(&z, 2u), BFP_E_ARG);
	assert_int_equal(bfp_decode_verify(&z, &zo, frame, frame_len, rw, RN, NULL), BFP_E_ARG);
	bfp_frame_stats zst;
	assert_int_equal(bfp_frame_stats_get(&z, frame, frame_len, &zst), BFP_E_ARG);
	/* the decoder's SCALAR flag is no apply option: in bfp_apply_opts it
	 * is refused, not taken for BFP_DEC_F_ANY_MODEL */
	static bfp_decoder d;
	assert_int_equal(bfp_decoder_init(&d, BFP_DEC_F_SCALAR), BFP_OK);
	assert_int_equal(bfp_decoder_init(&d, 1u), BFP_E_ARG);
	assert_int_equal(bfp_decoder_init(&d, 2u), BFP_E_ARG);
	assert_true((BFP_DEC_F_SCALAR & (BFP_DEC_F_ANY_MODEL | BFP_DEC_F_ANY_BASE)) == 0);
	bfp_apply_opts ao = aopts();
	ao.flags = BFP_DEC_F_SCALAR;
	memcpy(rw, rb, sizeof(rw));
	assert_int_equal(bfp_encoder_init(&enc, &o, rb, rt, RN, 0, RN), BFP_OK);
	uint8_t fr[BFP_FRAME_SIZE_MAX];
	size_t fl;
	assert_int_equal(bfp_encode_next(&enc, fr, sizeof(fr), &fl), BFP_OK);
	assert_int_equal(bfp_decode_apply(&d, &ao, fr, fl, rw, RN, NULL), BFP_E_ARG);
	assert_memory_equal(rw, rb, sizeof(rw));
}

int main(void)
{
	const struct CMUnitTest roundtrips[] = {
		cmocka_unit_test(test_rl_deltas_round_trip_at_every_frame_size),
		cmocka_unit_test(test_special_values_and_huge_jumps_round_trip),
		cmocka_unit_test(test_kx_log2_matches_the_loop),
		cmocka_unit_test(test_key_exp_round_trips_at_every_frame_size),
		cmocka_unit_test(test_key_exp_paths_agree),
		cmocka_unit_test(test_key_exp_edges_round_trip),
		cmocka_unit_test(test_key_exp_rejects_hostile_frames),
		cmocka_unit_test_setup_teardown(test_key_exp_round_trips_at_every_frame_size, on_expm, on_exp),
		cmocka_unit_test_setup_teardown(test_key_exp_paths_agree, on_expm, on_exp),
		cmocka_unit_test_setup_teardown(test_key_exp_edges_round_trip, on_expm, on_exp),
		cmocka_unit_test_setup_teardown(test_key_exp_rejects_hostile_frames, on_expm, on_exp),
		cmocka_unit_test(test_key_expm_is_smaller_and_checks_its_padding),
		cmocka_unit_test_setup_teardown(test_key_exp_round_trips_at_every_frame_size, on_huf, on_exp),
		cmocka_unit_test_setup_teardown(test_key_exp_paths_agree, on_huf, on_exp),
		cmocka_unit_test_setup_teardown(test_key_exp_edges_round_trip, on_huf, on_exp),
		cmocka_unit_test(test_huf_code_is_optimal_and_limited),
		cmocka_unit_test(test_key_huf_rejects_hostile_frames),
		cmocka_unit_test(test_key_huf_is_close_to_expm),
		cmocka_unit_test(test_nothing_changed_costs_only_headers),
		cmocka_unit_test(test_everything_changed_never_worse_than_keyframes),
		cmocka_unit_test(test_frames_at_the_change_limit_decode_exactly),
		cmocka_unit_test(test_keyframe_coded_patch_frames_say_in_patch),
		cmocka_unit_test(test_sparse_frames_are_full),
		cmocka_unit_test(test_frame_stats_by_class),
		cmocka_unit_test(test_model_frames_need_their_model),
		cmocka_unit_test(test_model_codes_take_changes_past_the_plan),
		cmocka_unit_test(test_ranges_on_tensor_boundaries_apply_exactly),
		cmocka_unit_test(test_encoder_is_canonical_and_simd_matches_scalar),
		cmocka_unit_test(test_frames_from_the_model_batch_match_fresh_gathers),
		cmocka_unit_test(test_stage_counters),
		cmocka_unit_test(test_hash_loops_agree),
		cmocka_unit_test(test_bit_codes_read_back),
		cmocka_unit_test(test_table_symbols_invert),
		cmocka_unit_test(test_rans_put_divides),
		cmocka_unit_test(test_gather_estimate),
		cmocka_unit_test(test_zstd_keyframes_round_trip_and_reject_damage),
	};
	const struct CMUnitTest rejects[] = {
		cmocka_unit_test_setup(test_reject_fixture_frame_applies, reject_setup),
		cmocka_unit_test_setup(test_reject_truncated, reject_setup),
		cmocka_unit_test_setup(test_reject_trailing_bytes, reject_setup),
		cmocka_unit_test_setup(test_reject_bad_magic, reject_setup),
		cmocka_unit_test_setup(test_reject_unknown_format_version, reject_setup),
		cmocka_unit_test_setup(test_reject_reserved_bits_set, reject_setup),
		cmocka_unit_test_setup(test_reject_unknown_encoding, reject_setup),
		cmocka_unit_test_setup(test_reject_any_flipped_bit, reject_setup),
		cmocka_unit_test_setup(test_reject_range_out_of_bounds, reject_setup),
		cmocka_unit_test_setup(test_reject_counts_inconsistent, reject_setup),
		cmocka_unit_test_setup(test_streamed_frame_applies, reject_setup),
		cmocka_unit_test_setup(test_decode_verify_writes_nothing, reject_setup),
		cmocka_unit_test_setup(test_reject_wrong_model, reject_setup),
		cmocka_unit_test_setup(test_reject_wrong_base_version, reject_setup),
		cmocka_unit_test_setup(test_reject_corrupt_payload_under_valid_crc, reject_setup),
		cmocka_unit_test_setup(test_reject_sparse_magnitude_rules, reject_setup),
		cmocka_unit_test_setup(test_reject_self_contained_rules, reject_setup),
		cmocka_unit_test_setup(test_reject_model_table_rules, reject_setup),
		cmocka_unit_test_setup(test_reject_wrong_target_hash, reject_setup),
		cmocka_unit_test_setup(test_check_target_detects_applied_frames, reject_setup),
		cmocka_unit_test_setup(test_set_index_reseals_the_frame, reject_setup),
		cmocka_unit_test_setup(test_encoder_rejects_bad_options, reject_setup),
	};
	int fails = cmocka_run_group_tests_name("roundtrip", roundtrips, NULL, NULL);
	fails += cmocka_run_group_tests_name("reject", rejects, NULL, NULL);
	return fails;
}
