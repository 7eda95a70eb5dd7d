/*
 * test_patch.c: the tools' multi-threaded patch encode (common/patch.c)
 * streams: frames reach the sender in index order with frame_count 0
 * while later chunks are still being encoded, they are the final patch's
 * frames but for the count, and they apply bit-exactly; the encoder's
 * change count matches an independent compare; frames applied from
 * changes prepared earlier are written and checked by range hash; the
 * header records after a patch file's frames (FORMAT.md 4.1) read back
 * as written, are refused when damaged, and replace a base's header only
 * when they keep its tensor layout.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "bfp_test.h"
#include "patch.h"

#define N (2 * (uint64_t)PATCH_CHUNK + 12345) /* three chunks */

typedef struct seen {
	t_frames f;        /* streamed frames, as handed over */
	atomic_int calls;  /* stream callbacks so far */
	atomic_int encoded;
	int encoded_before_stream;
	size_t enc_frames, enc_bytes;
	uint64_t enc_changed;
} seen;

static void on_stream(void *arg, uint8_t *const *fr, const size_t *lens, size_t n)
{
	seen *s = arg;
	for (size_t i = 0; i < n; i++)
		t_frames_push(&s->f, fr[i], lens[i]);
	atomic_fetch_add(&s->calls, 1);
}

/* Runs on the worker that finishes the last chunk. It waits (up to 30 s)
 * for the first stream callback: a sender that sent only after the whole
 * patch was encoded would never call it before this returns. */
static void on_encoded(void *arg, size_t frames, size_t bytes, uint64_t changed)
{
	seen *s = arg;
	for (int i = 0; i < 30000 && atomic_load(&s->calls) == 0; i++)
		nanosleep(&(struct timespec){0, 1000000}, NULL);
	s->encoded_before_stream = atomic_load(&s->calls) == 0;
	s->enc_frames = frames;
	s->enc_bytes = bytes;
	s->enc_changed = changed;
	atomic_fetch_add(&s->encoded, 1);
}

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void check_stream(int threads)
{
	uint16_t *base = malloc(N * 2), *tgt = malloc(N * 2), *w = malloc(N * 2);
	uint64_t rs = 7, changed = 0;
	assert_non_null(base);
	assert_non_null(tgt);
	assert_non_null(w);
	for (uint64_t i = 0; i < N; i++)
		base[i] = t_weight(&rs);
	t_mutate(base, tgt, N, 20000, &rs);
	for (uint64_t i = 0; i < N; i++)
		changed += base[i] != tgt[i];

	seen s;
	memset(&s, 0, sizeof(s));
	patch_opts o = {.frame_size = 1200, .base_version = 4, .target_version = 5,
			.threads = threads, .stream = on_stream, .encoded = on_encoded,
			.stream_arg = &s};
	patch p;
	char err[256];
	assert_int_equal(patch_encode_arrays(base, tgt, N, 0x1234, &o, &p, err, sizeof(err)), 0);

	/* the first frames left before the last was encoded */
	assert_int_equal(atomic_load(&s.encoded), 1);
	assert_false(s.encoded_before_stream);
	assert_int_equal(s.enc_frames, p.n);
	assert_int_equal(s.enc_bytes, p.len);
	assert_int_equal(s.enc_changed, changed);

	/* streamed frame i is final frame i with count 0 instead of p.n */
	assert_int_equal(s.f.n, p.n);
	for (size_t i = 0; i < p.n; i++) {
		const uint8_t *a = s.f.buf + s.f.off[i], *b = p.buf + p.off[i];
		size_t la = t_frame_len(&s.f, i), lb = p.off[i + 1] - p.off[i];
		bfp_frame_header h;
		assert_int_equal(la, lb);
		assert_int_equal(bfp_frame_parse(a, la, &h), BFP_OK);
		assert_int_equal(h.frame_index, i);
		assert_int_equal(h.frame_count, 0);
		assert_int_equal(bfp_frame_parse(b, lb, &h), BFP_OK);
		assert_int_equal(h.frame_index, i);
		assert_int_equal(h.frame_count, p.n);
		assert_memory_equal(a, b, 28);
		assert_int_equal(rd32(a + 28), 0);
		assert_memory_equal(a + 32, b + 32, 24);
		assert_memory_equal(a + 60, b + 60, la - 60);
	}

	/* the streamed frames tile the model and apply to the target */
	const uint8_t **fr = malloc(p.n * sizeof(*fr));
	uint32_t *lens = malloc(p.n * sizeof(*lens));
	assert_non_null(fr);
	assert_non_null(lens);
	for (size_t i = 0; i < p.n; i++) {
		fr[i] = s.f.buf + s.f.off[i];
		lens[i] = (uint32_t)t_frame_len(&s.f, i);
	}
	assert_int_equal(frames_check_cover(fr, p.n, N, err, sizeof(err)), 0);
	assert_int_not_equal(frames_check_cover(fr, p.n - 1, N, err, sizeof(err)), 0);
	memcpy(w, base, N * 2);
	apply_ctl ctl = {.threads = threads};
	apply_result res;
	assert_int_equal(patch_apply_frames(fr, lens, p.n, w, N, 0x1234, 4, &ctl, &res, err,
					    sizeof(err)), 0);
	assert_memory_equal(w, tgt, N * 2);

	free(fr);
	free(lens);
	t_frames_free(&s.f);
	patch_free(&p);
	free(base);
	free(tgt);
	free(w);
}

static void test_stream_one_thread(void **state)
{
	(void)state;
	check_stream(1);
}

static void test_stream_three_threads(void **state)
{
	(void)state;
	check_stream(3);
}

/* Frames given with their changes (decoded and verified earlier with
 * bfp_decode_verify) are written from those and checked by range hash;
 * the others are decoded; a range changed after its changes were made
 * fails its hash check. */
static void test_apply_prepared_changes(void **state)
{
	(void)state;
	enum { M = 300000 };
	static uint16_t base[M], tgt[M], w[M];
	uint64_t rs = 11;
	for (size_t i = 0; i < M; i++)
		base[i] = t_weight(&rs);
	t_mutate(base, tgt, M, 30000, &rs);
	patch_opts o = {.frame_size = 1200, .base_version = 2, .target_version = 3, .threads = 1};
	patch p;
	char err[256];
	assert_int_equal(patch_encode_arrays(base, tgt, M, 5, &o, &p, err, sizeof(err)), 0);
	const uint8_t **fr = calloc(p.n, sizeof(*fr));
	uint32_t *lens = calloc(p.n, sizeof(*lens));
	frame_changes *fc = calloc(p.n, sizeof(*fc));
	const frame_changes **fcp = calloc(p.n, sizeof(*fcp));
	uint32_t *pos = malloc((size_t)M * 4);
	uint16_t *val = malloc((size_t)M * 2);
	static bfp_decoder dec;
	assert_int_equal(bfp_decoder_init(&dec, 0), BFP_OK);
	bfp_apply_opts ao = {.model_id = 5, .base_version = 2};
	size_t used = 0;
	for (size_t i = 0; i < p.n; i++) {
		fr[i] = p.buf + p.off[i];
		lens[i] = (uint32_t)(p.off[i + 1] - p.off[i]);
		if (i % 2)
			continue; /* every other frame is prepared */
		bfp_frame_header h;
		assert_int_equal(bfp_decode_verify(&dec, &ao, fr[i], lens[i], base, M, &h), BFP_OK);
		fc[i] = frame_changes_keep(&dec, &h, pos + used, val + used);
		fcp[i] = &fc[i];
		used += fc[i].n;
	}
	apply_ctl ctl = {.threads = 2, .changes = fcp};
	apply_result res;
	memcpy(w, base, sizeof(w));
	assert_int_equal(patch_apply_frames(fr, lens, p.n, w, M, 5, 2, &ctl, &res, err,
					    sizeof(err)), 0);
	assert_memory_equal(w, tgt, sizeof(w));
	assert_int_equal(res.verified_bytes, 2 * (uint64_t)M);
	/* the buffer changed after frame 2 was prepared: its check fails */
	memcpy(w, base, sizeof(w));
	uint32_t at = fc[2].range_len / 2; /* a weight the patch does not change */
	for (int again = 1; again;) {
		again = 0;
		for (uint32_t k = 0; k < fc[2].n; k++)
			if (fc[2].pos[k] == at) {
				at++;
				again = 1;
			}
	}
	w[fc[2].range_begin + at] ^= 1;
	ctl.threads = 1;
	assert_int_not_equal(patch_apply_frames(fr, lens, p.n, w, M, 5, 2, &ctl, &res, err,
						sizeof(err)), 0);
	assert_int_equal(res.bad_frame, 2);
	assert_int_equal(res.status, BFP_E_HASH);
	free(fr);
	free(lens);
	free(fc);
	free(fcp);
	free(pos);
	free(val);
	patch_free(&p);
}

/* A patch file holds finished patches only: a streamed frame in one is
 * refused (FORMAT.md 4). */
static void test_file_refuses_streamed_frames(void **state)
{
	(void)state;
	enum { M = 50000 };
	static uint16_t base[M], tgt[M];
	uint64_t rs = 3;
	for (size_t i = 0; i < M; i++)
		base[i] = t_weight(&rs);
	t_mutate(base, tgt, M, 50000, &rs);
	patch_opts o = {.frame_size = 256, .base_version = 1, .target_version = 2, .threads = 1};
	patch p, q;
	char err[256];
	assert_int_equal(patch_encode_arrays(base, tgt, M, 9, &o, &p, err, sizeof(err)), 0);
	assert_true(p.n > 2);
	memset(&q, 0, sizeof(q));
	q.buf = malloc(p.len);
	memcpy(q.buf, p.buf, p.len);
	q.len = p.len;
	if (patch_parse(&q, err, sizeof(err)))
		fail_msg("%s", err);
	assert_int_equal(q.n, p.n);
	assert_int_equal(bfp_frame_set_index(q.buf + q.off[1], q.off[2] - q.off[1], 1, 0), BFP_OK);
	assert_int_not_equal(patch_parse(&q, err, sizeof(err)), 0);
	assert_non_null(strstr(err, "streamed"));
	patch_free(&q);
	patch_free(&p);
}

/* A one-tensor safetensors model of words words with metadata meta
 * (NULL: none, and the tensor 2 x words/2): its header JSON in json
 * (len), the model parsed from it. */
static void st_model(model *m, uint64_t words, const char *meta, char *json, size_t *len)
{
	int n = meta ? snprintf(json, 512, "{\"__metadata__\":{\"step\":\"%s\"},", meta)
		     : snprintf(json, 512, "{");
	n += snprintf(json + n, 512 - (size_t)n, "\"w\":{\"dtype\":\"BF16\",\"shape\":[%s%llu],"
		      "\"data_offsets\":[0,%llu]}}", meta ? "" : "2,",
		      (unsigned long long)(meta ? words : words / 2), (unsigned long long)words * 2);
	*len = (size_t)n;
	uint8_t h[520];
	for (int i = 0; i < 8; i++)
		h[i] = (uint8_t)((uint64_t)n >> (8 * i));
	memcpy(h + 8, json, (size_t)n);
	char err[256];
	if (model_parse_safetensors(m, h, 8 + (size_t)n, 8 + (size_t)n + words * 2, err,
				    sizeof(err)))
		fail_msg("%s", err);
	m->header = malloc(8 + (size_t)n);
	memcpy(m->header, h, 8 + (size_t)n);
	m->header_len = 8 + (size_t)n;
}

/* A copy of p's bytes, parsed again as a file reader would. */
static int reparse(const patch *p, size_t len, patch *q, char *err, size_t errlen)
{
	memset(q, 0, sizeof(*q));
	q->buf = malloc(p->len);
	memcpy(q->buf, p->buf, p->len);
	q->len = len;
	return patch_parse(q, err, errlen);
}

/* A header record written after the frames reads back with its kind,
 * file and contents; one damaged (CRC, truncated, reserved bits, out of
 * order) is refused; applied, it replaces the base's header only when the
 * tensor layout stays, and a refused one leaves the base as it was. */
static void test_header_records(void **state)
{
	(void)state;
	enum { M = 20000 };
	static uint16_t base[M], tgt[M];
	uint64_t rs = 5;
	for (size_t i = 0; i < M; i++)
		base[i] = t_weight(&rs);
	t_mutate(base, tgt, M, 300, &rs);
	model mb, mn, mo;
	char jb[512], jn[512], jo[512], err[256];
	size_t lb, ln, lo;
	st_model(&mb, M, "1", jb, &lb);
	st_model(&mn, M, "2-and-longer", jn, &ln);
	st_model(&mo, M, NULL, jo, &lo); /* another layout: the same bytes */
	assert_int_equal(mb.model_id, mn.model_id);
	patch_opts o = {.frame_size = 512, .base_version = 1, .target_version = 2, .threads = 1};
	patch p, q;
	assert_int_equal(patch_encode_arrays(base, tgt, M, mb.model_id, &o, &p, err, sizeof(err)), 0);
	const size_t frames = p.len;
	assert_int_equal(patch_add_record(&p, PATCH_REC_HEADER, 0, 1, jn, ln), 0);
	assert_int_equal(p.len, frames + PATCH_REC_FIXED + ln + 4);
	if (reparse(&p, p.len, &q, err, sizeof(err)))
		fail_msg("%s", err);
	assert_int_equal(q.n, p.n);
	assert_int_equal(q.off[q.n], frames);
	assert_int_equal(q.n_rec, 1);
	assert_int_equal(q.rec[0].kind, PATCH_REC_HEADER);
	assert_int_equal(q.rec[0].len, ln);
	assert_memory_equal(q.buf + q.rec[0].off, jn, ln);
	/* applied: the base takes the new header */
	if (patch_apply_records(&q, &mb, err, sizeof(err)))
		fail_msg("%s", err);
	assert_int_equal(mb.header_len, 8 + ln);
	assert_memory_equal(mb.header + 8, jn, ln);
	patch_free(&q);
	/* damaged: CRC, truncated, reserved bits */
	p.buf[frames + PATCH_REC_FIXED + 3] ^= 1;
	assert_int_not_equal(reparse(&p, p.len, &q, err, sizeof(err)), 0);
	assert_non_null(strstr(err, "CRC"));
	patch_free(&q);
	p.buf[frames + PATCH_REC_FIXED + 3] ^= 1;
	assert_int_not_equal(reparse(&p, p.len - 1, &q, err, sizeof(err)), 0);
	assert_non_null(strstr(err, "truncated"));
	patch_free(&q);
	p.buf[frames + 28] = 1;
	assert_int_not_equal(reparse(&p, p.len, &q, err, sizeof(err)), 0);
	patch_free(&q);
	p.buf[frames + 28] = 0;
	/* the same record twice: out of order */
	assert_int_equal(patch_add_record(&p, PATCH_REC_HEADER, 0, 1, jn, ln), 0);
	assert_int_not_equal(reparse(&p, p.len, &q, err, sizeof(err)), 0);
	assert_non_null(strstr(err, "out of order"));
	patch_free(&q);
	patch_free(&p);
	/* a header of another layout is refused, the base left as it was */
	assert_int_equal(patch_encode_arrays(base, tgt, M, mb.model_id, &o, &p, err, sizeof(err)), 0);
	assert_int_equal(patch_add_record(&p, PATCH_REC_HEADER, 0, 1, jo, lo), 0);
	if (reparse(&p, p.len, &q, err, sizeof(err)))
		fail_msg("%s", err);
	assert_int_not_equal(patch_apply_records(&q, &mb, err, sizeof(err)), 0);
	assert_non_null(strstr(err, "layout"));
	assert_memory_equal(mb.header + 8, jn, ln);
	/* and a shard index for a base of one file */
	patch_free(&q);
	patch_free(&p);
	assert_int_equal(patch_encode_arrays(base, tgt, M, mb.model_id, &o, &p, err, sizeof(err)), 0);
	assert_int_equal(patch_add_record(&p, PATCH_REC_INDEX, 0, 1, "{}", 2), 0);
	if (reparse(&p, p.len, &q, err, sizeof(err)))
		fail_msg("%s", err);
	assert_int_not_equal(patch_apply_records(&q, &mb, err, sizeof(err)), 0);
	patch_free(&q);
	patch_free(&p);
	model_free(&mb);
	model_free(&mn);
	model_free(&mo);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stream_one_thread),
		cmocka_unit_test(test_stream_three_threads),
		cmocka_unit_test(test_apply_prepared_changes),
		cmocka_unit_test(test_file_refuses_streamed_frames),
		cmocka_unit_test(test_header_records),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
