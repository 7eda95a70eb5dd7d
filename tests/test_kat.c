/*
 * test_kat.c: the committed known-answer vectors (tests/kat/) still hold:
 * the encoder reproduces each patch byte for byte (the format and the
 * encoder are stable and canonical), and each committed patch applied to
 * its base gives exactly its target.
 */
#include <stdio.h>

#include "kat_vectors.h"

static const char *kat_dir;

static uint8_t *slurp(const char *name, const char *ext, size_t *len)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s.%s", kat_dir, name, ext);
	FILE *f = fopen(path, "rb");
	if (!f)
		fail_msg("cannot open %s", path);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *p = malloc((size_t)n + 1);
	assert_int_equal(fread(p, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return p;
}

/* Each vector: inputs, encoder output and decoder result all match. */
static void test_known_answer_vectors_hold(void **state)
{
	(void)state;
	for (size_t k = 0; k < sizeof(kat_vectors) / sizeof(kat_vectors[0]); k++) {
		const kat_vector *v = &kat_vectors[k];
		uint16_t *b = malloc(v->n * 2), *t = malloc(v->n * 2);
		size_t lb, lt, lp;
		kat_inputs(v, b, t);
		uint8_t *cb = slurp(v->name, "base", &lb), *ct = slurp(v->name, "target", &lt);
		uint8_t *cp = slurp(v->name, "patch", &lp);
		assert_int_equal(lb, v->n * 2);
		assert_memory_equal(cb, b, lb);
		assert_memory_equal(ct, t, lt);

		t_frames f = {0};
		bfp_encode_opts o = kat_opts(v);
		assert_int_equal(t_encode(&o, b, t, v->n, 0, v->n, &f), BFP_OK);
		for (size_t i = 0; i < f.n; i++)
			assert_int_equal(bfp_frame_set_index(f.buf + f.off[i], t_frame_len(&f, i),
							     (uint32_t)i, (uint32_t)f.n), BFP_OK);
		if (f.len != lp || memcmp(f.buf, cp, lp) != 0)
			fail_msg("%s: encoder output differs from the committed vector", v->name);

		/* apply the committed bytes, frame by frame, to the base */
		static bfp_decoder d;
		bfp_apply_opts ao;
		memset(&ao, 0, sizeof(ao));
		ao.model_id = o.model_id;
		ao.base_version = o.base_version;
		assert_int_equal(bfp_decoder_init(&d, 0), BFP_OK);
		uint16_t *w = malloc(v->n * 2);
		memcpy(w, cb, lb);
		size_t at = 0, frames = 0;
		while (at < lp) {
			size_t fl;
			assert_int_equal(bfp_frame_length(cp + at, lp - at, &fl), BFP_OK);
			assert_int_equal(bfp_decode_apply(&d, &ao, cp + at, fl, w, v->n, NULL), BFP_OK);
			at += fl;
			frames++;
		}
		assert_int_equal(frames, f.n);
		assert_memory_equal(w, ct, lt);
		t_frames_free(&f);
		free(w);
		free(b);
		free(t);
		free(cb);
		free(ct);
		free(cp);
	}
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: test_kat KAT_DIR\n");
		return 2;
	}
	kat_dir = argv[1];
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_known_answer_vectors_hold),
	};
	return cmocka_run_group_tests_name("kat", tests, NULL, NULL);
}
