/*
 * test_shim_stage.c: the shim's staging and commit state machine
 * (host_shim/stage.c) driven frame by frame, with no network and nothing
 * timed: a weight buffer in a temporary directory, real patches and
 * keyframe streams between seeded weight versions, and the JOINs and
 * NACKs the stager sends caught by its ctl_send hook. Every commit is
 * checked byte for byte against the generator's copy of that version,
 * made without the shim or the buffer.
 */
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bfp_test.h"
#include "model.h"
#include "patch.h"
#include "shim.h"
#include "wbuf.h"

#define N 60000u                    /* parameters */
#define MODEL 0x5ee0f00dcafe0001ull /* the model id */
#define VERSIONS 8                  /* W[0 .. VERSIONS) */
#define PATCH_FRAME 256u            /* patch frame size: many frames */
#define KEY_FRAME 8000u             /* keyframe stream frame size */

/* The versions (W[v]), the patches v -> v + 1 (P[v]) and the keyframe
 * streams of v (K[v]): made once, read by every test. */
static uint16_t *W[VERSIONS];
static patch P[VERSIONS - 1];
static patch K[VERSIONS];
/* XW: a version 3 whose exponents fall off geometrically, as trained
 * weights' do, and its keyframe stream in format 1.1's encoding 7
 * (KEY_EXP wins on it) */
static uint16_t *XW;
static patch KX;

/* A test's shim and what it sent. The shim comes first: the ctl_send
 * hook finds the fixture from it. */
typedef struct fx {
	shim s;
	char dir[64], path[96];
	rp_ctl sent[256];
	unsigned n_sent;
} fx;

static const uint8_t *frame_of(const patch *p, size_t i)
{
	return p->buf + p->off[i];
}

static size_t len_of(const patch *p, size_t i)
{
	return p->off[i + 1] - p->off[i];
}

static uint64_t bytes_of(const patch *p)
{
	return p->off[p->n];
}

/* What a slot's index arrays take for p: its frame count, at least 64
 * entries (stage.c's slot_reserve). */
static uint64_t idx_of(const patch *p)
{
	return (p->n > 64 ? p->n : 64) * IDX_BYTES;
}

static void wr32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* A frame's CRC after its header was changed (FORMAT.md 2.1: header
 * bytes 0..55, then the payload), computed here bit by bit. */
static void reseal(uint8_t *f, size_t len)
{
	uint32_t crc = t_crc32c_bitwise(0, f, 56);
	wr32(f + 56, t_crc32c_bitwise(crc, f + 60, len - 60));
}

/* A copy of frame i of p to change (free it). */
static uint8_t *copy_of(const patch *p, size_t i)
{
	uint8_t *f = malloc(len_of(p, i));
	assert_non_null(f);
	memcpy(f, frame_of(p, i), len_of(p, i));
	return f;
}

/* A copy of frame i of p whose target hash is wrong, sealed with a
 * valid CRC: it parses, and fails only when its values are verified. */
static uint8_t *forged_hash(const patch *p, size_t i)
{
	uint8_t *f = copy_of(p, i);
	f[48] ^= 1;
	reseal(f, len_of(p, i));
	return f;
}

static bfp_frame_header header_of(const patch *p, size_t i)
{
	bfp_frame_header h;
	assert_int_equal(bfp_frame_parse(frame_of(p, i), len_of(p, i), &h), BFP_OK);
	return h;
}

static void record(shim *s, const rp_ctl *c)
{
	fx *f = (fx *)(void *)s;
	assert_true(f->n_sent < sizeof(f->sent) / sizeof(f->sent[0]));
	f->sent[f->n_sent++] = *c;
}

/* The last message of this type sent, or NULL. */
static const rp_ctl *last_sent(const fx *f, uint8_t type)
{
	for (unsigned i = f->n_sent; i-- > 0;)
		if (f->sent[i].type == type)
			return &f->sent[i];
	return NULL;
}

/* ---- set-up ---- */

static int make_versions(void **state)
{
	(void)state;
	uint64_t rs = 20240611;
	char err[256];
	for (unsigned v = 0; v < VERSIONS; v++) {
		W[v] = malloc(N * sizeof(uint16_t));
		if (!W[v])
			return -1;
		if (v == 0)
			for (unsigned i = 0; i < N; i++)
				W[0][i] = t_weight(&rs);
		else /* 3,000 changes, then 12,000 a version: the later
		      * patches outweigh what the budget test leaves them */
			t_mutate(W[v - 1], W[v], N, v == 1 ? 50000 : 200000, &rs);
	}
	for (unsigned v = 0; v + 1 < VERSIONS; v++) {
		patch_opts o = {.frame_size = PATCH_FRAME, .base_version = v, .target_version = v + 1,
				.threads = 1};
		if (patch_encode_arrays(W[v], W[v + 1], N, MODEL, &o, &P[v], err, sizeof(err)))
			return -1;
	}
	for (unsigned v = 1; v < VERSIONS; v++) {
		patch_opts o = {.frame_size = KEY_FRAME, .target_version = v, .threads = 1,
				.enc_flags = BFP_ENC_F_KEYFRAME};
		if (patch_encode_arrays(W[v], W[v], N, MODEL, &o, &K[v], err, sizeof(err)))
			return -1;
	}
	if (!(XW = malloc(N * sizeof(uint16_t))))
		return -1;
	for (unsigned i = 0; i < N; i++) {
		uint64_t r = t_rand(&rs);
		unsigned k = (unsigned)__builtin_ctzll(r | (1ull << 20));
		XW[i] = (uint16_t)(((r >> 40) & 0x8000u) | ((121 - k) << 7) | ((r >> 48) & 0x7Fu));
	}
	patch_opts o = {.frame_size = KEY_FRAME, .target_version = 3, .threads = 1,
			.enc_flags = BFP_ENC_F_KEYFRAME | BFP_ENC_F_KEY_EXP};
	if (patch_encode_arrays(XW, XW, N, MODEL, &o, &KX, err, sizeof(err)))
		return -1;
	return 0;
}

static int free_versions(void **state)
{
	(void)state;
	patch_free(&KX);
	free(XW);
	for (unsigned v = 0; v < VERSIONS; v++) {
		free(W[v]);
		patch_free(&K[v]);
		if (v + 1 < VERSIONS)
			patch_free(&P[v]);
	}
	return 0;
}

/* A buffer at version 0 (W[0]) and a shim on it as shim_open() leaves
 * one, but for the network: 64 MiB to stage, two apply threads,
 * commits when complete. */
static int fx_setup(void **state)
{
	fx *f = calloc(1, sizeof(*f));
	char err[256];
	model m;
	if (!f)
		return -1;
	snprintf(f->dir, sizeof(f->dir), "/tmp/bfp-stage-XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(f->path, sizeof(f->path), "%s/buf", f->dir);
	if (model_init_raw(&m, N))
		return -1;
	memcpy(m.params, W[0], N * sizeof(uint16_t));
	m.model_id = MODEL;
	int rc = wbuf_create(f->path, &m, 0, 0, err, sizeof(err));
	model_free(&m);
	shim *s = &f->s;
	s->cf.max_stage = 64u << 20;
	s->cf.threads = 2;
	s->cf.nack_ms = 100;
	s->cf.listen_port = 7500;
	s->lock_fd = s->sock = -1;
	s->undo.fd = s->dlog.fd = s->ev.fd = -1;
	s->ctl_send = record;
	if (rc || wbuf_open(&s->w, f->path, err, sizeof(err)) ||
	    wbuf_undo_open(&s->undo, &s->w, f->path, 2, err, sizeof(err))) {
		fprintf(stderr, "set-up: %s\n", err);
		return -1;
	}
	stage_init(s);
	*state = f;
	return 0;
}

static int fx_teardown(void **state)
{
	fx *f = *state;
	char p[128];
	stage_fini(&f->s);
	wbuf_undo_close(&f->s.undo);
	wbuf_close(&f->s.w);
	snprintf(p, sizeof(p), "%s.undo", f->path);
	unlink(p);
	unlink(f->path);
	rmdir(f->dir);
	free(f);
	return 0;
}

/* ---- domain asserts ---- */

/* The buffer holds version v, ready, equal to W[v] byte for byte. */
static void assert_buffer_at(const fx *f, uint32_t v)
{
	assert_int_equal(shim_state(&f->s), WBUF_READY);
	assert_int_equal(shim_version(&f->s), v);
	assert_words_equal(f->s.w.params, W[v], N);
}

/* The buffer's range [b, b + n) equals W[v]'s. */
static void assert_range_at(const fx *f, uint64_t b, uint64_t n, uint32_t v)
{
	assert_words_equal(f->s.w.params + b, W[v] + b, n);
}

/* The staging accounts add up to what the slots hold, within the budget,
 * prepared changes within half of it. */
static void assert_budget(const fx *f)
{
	const shim *s = &f->s;
	uint64_t all = 0, preps = 0;
	for (unsigned i = 0; i < SLOTS; i++) {
		const slot *sl = &s->slots[i];
		uint64_t frames = 0;
		for (uint32_t k = 0; sl->used && k < sl->cap; k++)
			frames += sl->frames[k] ? sl->flen[k] : 0;
		assert_int_equal(frames, sl->bytes);
		all += sl->bytes + sl->prep_bytes + sl->idx_bytes;
		preps += sl->prep_bytes;
	}
	all += s->shadow_bytes;
	preps += s->shadow_bytes;
	assert_int_equal(s->shadow_bytes, s->shadow ? N * sizeof(uint16_t) : 0);
	assert_int_equal(s->staged_bytes, all);
	assert_int_equal(s->prep_bytes, preps);
	assert_true(s->staged_bytes <= stage_budget(s));
	assert_true(s->prep_bytes <= stage_budget(s) / 2);
}

/* The slot staging target (a patch, or with key a keyframe stream), or
 * NULL. */
static const slot *slot_of(const fx *f, uint32_t target, int key)
{
	for (unsigned i = 0; i < SLOTS; i++)
		if (f->s.slots[i].used && f->s.slots[i].target == target && f->s.slots[i].key == key)
			return &f->s.slots[i];
	return NULL;
}

static void feed(fx *f, const uint8_t *p, size_t len)
{
	assert_int_equal(stage_frame(&f->s, p, len), 0);
	assert_budget(f);
}

static void feed_frame(fx *f, const patch *p, size_t i)
{
	feed(f, frame_of(p, i), len_of(p, i));
}

static void feed_all(fx *f, const patch *p)
{
	for (size_t i = 0; i < p->n; i++)
		feed_frame(f, p, i);
}

/* ---- tests ---- */

/* Frames of version 1 are staged while the buffer stays at version 0,
 * byte for byte, also while they are prepared; the version commits only
 * once every frame is staged, and then equals W[1]. */
static void test_a_patch_commits_only_when_every_frame_is_staged(void **state)
{
	fx *f = *state;
	const patch *p = &P[0];
	assert_true(p->n >= 8);
	for (size_t i = 0; i + 1 < p->n; i++) {
		feed_frame(f, p, i);
		assert_int_equal(stage_try_commit(&f->s), 0);
		assert_buffer_at(f, 0);
	}
	stage_prepare_some(&f->s, 1e9);
	assert_true(f->s.prepared > 0);
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_buffer_at(f, 0);
	feed_frame(f, p, p->n - 1);
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_buffer_at(f, 1);
	assert_int_equal(f->s.commits, 1);
	assert_int_equal(f->s.staged_bytes, 0);
	/* the shim tells upstream the version it holds */
	assert_non_null(last_sent(f, RP_JOIN));
	assert_int_equal(last_sent(f, RP_JOIN)->version, 1);
}

/* A patch commits the same bytes whether its frames were decoded and
 * verified while staged (the commit only writes their values) or are
 * decoded at the commit (--no-prepare). */
static void test_a_patch_commits_the_same_bytes_prepared_or_not(void **state)
{
	fx *f = *state;
	feed_all(f, &P[0]);
	while (stage_prepare_some(&f->s, 1e9))
		;
	assert_true(f->s.prepared > 0);
	assert_true(f->s.prep_bytes > 0);
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_buffer_at(f, 1);
	f->s.no_prep = 1;
	feed_all(f, &P[1]);
	const uint64_t prepared = f->s.prepared;
	assert_int_equal(stage_prepare_some(&f->s, 1e9), 0);
	assert_int_equal(f->s.prepared, prepared);
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_buffer_at(f, 2);
	assert_int_equal(f->s.commits, 2);
}

/* A complete set of frames that does not tile the model (two frames over
 * the same range) writes nothing: the version is dropped, one resync is
 * counted and the shim JOINs asking for a keyframe stream. */
static void test_frames_that_do_not_tile_the_model_are_never_committed(void **state)
{
	fx *f = *state;
	const patch *p = &P[0];
	uint8_t *twin = copy_of(p, 0); /* frame 0's range, as frame 1 */
	wr32(twin + 24, 1);
	reseal(twin, len_of(p, 0));
	feed_frame(f, p, 0);
	feed(f, twin, len_of(p, 0));
	for (size_t i = 2; i < p->n; i++)
		feed_frame(f, p, i);
	assert_int_equal(slot_of(f, 1, 0)->have, p->n);
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_buffer_at(f, 0);
	assert_int_equal(f->s.commits, 0);
	assert_int_equal(f->s.resyncs, 1);
	assert_null(slot_of(f, 1, 0));
	assert_int_equal(f->s.staged_bytes, 0);
	assert_int_equal(last_sent(f, RP_JOIN)->version, RP_VERSION_NONE);
	free(twin);
}

/* A frame whose values do not hash to its target is refused while it is
 * prepared and dropped, the buffer untouched; the genuine frame, when it
 * comes again, completes the version. */
static void test_a_frame_failing_verification_while_prepared_is_dropped(void **state)
{
	fx *f = *state;
	const patch *p = &P[0];
	const size_t k = 3;
	uint8_t *bad = forged_hash(p, k);
	for (size_t i = 0; i < p->n; i++) {
		if (i == k)
			feed(f, bad, len_of(p, k));
		else
			feed_frame(f, p, i);
	}
	while (stage_prepare_some(&f->s, 1e9))
		;
	assert_int_equal(f->s.bad, 1);
	assert_int_equal(f->s.prep_fail, 1);
	assert_int_equal(slot_of(f, 1, 0)->have, p->n - 1);
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_buffer_at(f, 0);
	feed_frame(f, p, k);
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_buffer_at(f, 1);
	free(bad);
}

/* Committed without preparing, a frame that fails verification writes
 * nothing: its range stays at the base while every other range is whole
 * at the base or at the target; the buffer is marked invalid (no version)
 * and the shim asks for a keyframe stream. */
static void test_a_frame_failing_verification_at_commit_is_never_written(void **state)
{
	fx *f = *state;
	const patch *p = &P[0];
	const size_t k = p->n / 2;
	uint8_t *bad = forged_hash(p, k);
	f->s.no_prep = 1;
	for (size_t i = 0; i < p->n; i++) {
		if (i == k)
			feed(f, bad, len_of(p, k));
		else
			feed_frame(f, p, i);
	}
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_int_equal(shim_state(&f->s), WBUF_RESYNC);
	assert_int_equal(f->s.commits, 0);
	assert_int_equal(f->s.resyncs, 1);
	assert_int_equal(last_sent(f, RP_JOIN)->version, RP_VERSION_NONE);
	for (size_t i = 0; i < p->n; i++) {
		bfp_frame_header h = header_of(p, i);
		const uint16_t *at = f->s.w.params + h.range_begin;
		const size_t bytes = (size_t)h.range_len * 2;
		if (i == k)
			assert_range_at(f, h.range_begin, h.range_len, 0);
		else
			assert_true(!memcmp(at, W[0] + h.range_begin, bytes) ||
				    !memcmp(at, W[1] + h.range_begin, bytes));
	}
	free(bad);
}

/* A frame that comes twice is counted as a duplicate and staged once:
 * the staged bytes do not grow, and the version still commits. */
static void test_a_duplicate_frame_is_counted_and_staged_once(void **state)
{
	fx *f = *state;
	const patch *p = &P[0];
	feed_frame(f, p, 0);
	const uint64_t staged = f->s.staged_bytes;
	feed_frame(f, p, 0);
	assert_int_equal(f->s.dup, 1);
	assert_int_equal(f->s.staged_bytes, staged);
	assert_int_equal(slot_of(f, 1, 0)->have, 1);
	for (size_t i = 1; i < p->n; i++)
		feed_frame(f, p, i);
	feed_frame(f, p, 1);
	assert_int_equal(f->s.dup, 2);
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_buffer_at(f, 1);
}

/* Frames of no use are refused, counted each in its own counter, and
 * staged nowhere: another model's, a damaged one, those of a version
 * the buffer already holds, a patch too far ahead, a version number the
 * protocol reserves. The buffer is untouched by all of them. */
static void test_frames_of_another_model_or_an_old_version_are_refused(void **state)
{
	fx *f = *state;
	uint8_t *other = copy_of(&P[0], 0);
	other[8] ^= 1; /* model_id */
	reseal(other, len_of(&P[0], 0));
	feed(f, other, len_of(&P[0], 0));
	assert_int_equal(f->s.other_model, 1);
	uint8_t *damaged = copy_of(&P[0], 0);
	damaged[len_of(&P[0], 0) - 1] ^= 1; /* the CRC no longer matches */
	feed(f, damaged, len_of(&P[0], 0));
	assert_int_equal(f->s.bad, 1);
	uint8_t *reserved = copy_of(&K[1], 0);
	wr32(reserved + 20, RP_VERSION_NONE);
	reseal(reserved, len_of(&K[1], 0));
	feed(f, reserved, len_of(&K[1], 0));
	assert_int_equal(f->s.bad, 2);
	assert_int_equal(f->s.staged_bytes, 0);

	feed_all(f, &P[0]);
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_buffer_at(f, 1);
	feed_frame(f, &P[0], 0);    /* the version held */
	feed_frame(f, &K[1], 0);    /* its keyframes */
	assert_int_equal(f->s.old, 2);
	feed_frame(f, &P[5], 0);    /* 5 -> 6: SLOTS versions past the next */
	assert_int_equal(f->s.ahead, 1);
	assert_int_equal(f->s.staged_bytes, 0);
	assert_buffer_at(f, 1);
	free(other);
	free(damaged);
	free(reserved);
}

/* Staged frames, their index arrays and prepared changes never take more
 * than --max-stage; when a frame needs room, prepared changes give way
 * before any frame is refused, and the version that commits next still
 * commits (decoded at commit) to the exact target. */
static void test_the_staging_budget_holds_and_prepared_changes_give_way_first(void **state)
{
	fx *f = *state;
	const patch *p = &P[0];
	uint32_t flen_max = 0;
	for (size_t i = 0; i < p->n; i++)
		flen_max = len_of(p, i) > flen_max ? (uint32_t)len_of(p, i) : flen_max;
	/* room for version 1's frames and index arrays and the bound of one
	 * frame's prepared changes (stage.c), little more */
	const uint64_t prep_most = sizeof(prep) + 6 * 8 * (uint64_t)flen_max;
	f->s.cf.max_stage = bytes_of(p) + idx_of(&P[0]) + idx_of(&P[1]) + idx_of(&P[2]) +
			    idx_of(&P[3]) + 2 * prep_most;
	/* the later versions cannot fit beside them */
	assert_true(bytes_of(&P[1]) + bytes_of(&P[2]) + bytes_of(&P[3]) > 3 * prep_most);

	for (size_t i = 0; i + 1 < p->n; i++)
		feed_frame(f, p, i);
	while (stage_prepare_some(&f->s, 1e9))
		;
	assert_true(f->s.prepared > 0);
	assert_true(f->s.prep_bytes > 0);
	assert_int_equal(f->s.over_budget + f->s.ahead, 0);
	for (unsigned v = 1; v <= 3; v++)
		for (size_t i = 0; i < P[v].n; i++) {
			const uint64_t refused = f->s.over_budget + f->s.ahead;
			const uint64_t prep_before = f->s.prep_bytes;
			feed_frame(f, &P[v], i);
			if (f->s.over_budget + f->s.ahead > refused) /* only once none is left */
				assert_int_equal(f->s.prep_bytes, 0);
			if (f->s.prep_bytes < prep_before)
				assert_int_equal(f->s.prep_bytes, 0);
		}
	assert_true(f->s.prep_dropped > 0);
	assert_true(f->s.over_budget + f->s.ahead > 0);
	feed_frame(f, p, p->n - 1);
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_true(shim_version(&f->s) >= 1);
	assert_buffer_at(f, shim_version(&f->s));
	assert_budget(f);
}

/* Changes prepared while staged never take more than half of
 * --max-stage, however much more the patch would give; what is not
 * prepared by then is decoded at the commit, which is exact. */
static void test_prepared_changes_take_at_most_half_the_budget(void **state)
{
	fx *f = *state;
	const patch *p = &P[1];
	uint32_t flen_max = 0;
	for (size_t i = 0; i < p->n; i++)
		flen_max = len_of(p, i) > flen_max ? (uint32_t)len_of(p, i) : flen_max;
	const uint64_t prep_most = sizeof(prep) + 6 * 8 * (uint64_t)flen_max;
	/* frames take a small part: half of it is the bound that holds */
	f->s.cf.max_stage = 5 * (bytes_of(p) + idx_of(p) + prep_most) / 2;
	feed_all(f, &P[0]);
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_buffer_at(f, 1);
	feed_all(f, p);
	while (stage_prepare_some(&f->s, 1e9))
		assert_budget(f);
	assert_budget(f);
	assert_true(f->s.prepared > 0);
	assert_true(f->s.prepared < p->n);
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_buffer_at(f, 2);
}

/* With the budget full, frames of the version that commits next evict
 * the versions staged after it, the furthest first; frames of a later
 * version never evict it (they are refused). Version 1 then commits
 * exactly. */
static void test_the_next_version_evicts_later_ones_never_the_reverse(void **state)
{
	fx *f = *state;
	/* two frames of version 1, and all of versions 2 and 3, fill it */
	f->s.cf.max_stage = len_of(&P[0], 0) + len_of(&P[0], 1) + bytes_of(&P[1]) +
			    bytes_of(&P[2]) + idx_of(&P[0]) + idx_of(&P[1]) + idx_of(&P[2]);
	feed_frame(f, &P[0], 0);
	feed_frame(f, &P[0], 1);
	feed_all(f, &P[1]);
	feed_all(f, &P[2]);
	assert_int_equal(f->s.staged_bytes, f->s.cf.max_stage);
	/* version 4's frame finds no room: refused, nothing evicted */
	feed_frame(f, &P[3], 0);
	assert_int_equal(f->s.over_budget + f->s.ahead, 1);
	assert_int_equal(f->s.evicted, 0);
	assert_null(slot_of(f, 4, 0));
	assert_int_equal(slot_of(f, 1, 0)->have, 2);
	assert_int_equal(slot_of(f, 2, 0)->have, P[1].n);
	assert_int_equal(slot_of(f, 3, 0)->have, P[2].n);
	/* version 1's next frame: version 3 goes first */
	feed_frame(f, &P[0], 2);
	assert_int_equal(f->s.evicted, 1);
	assert_null(slot_of(f, 3, 0));
	assert_non_null(slot_of(f, 2, 0));
	assert_int_equal(slot_of(f, 1, 0)->have, 3);
	for (size_t i = 3; i < P[0].n; i++)
		feed_frame(f, &P[0], i);
	assert_int_equal(slot_of(f, 1, 0)->have, P[0].n);
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_true(shim_version(&f->s) >= 1);
	assert_buffer_at(f, shim_version(&f->s));
}

/* Safe-point commits with four complete patches staged (0 -> 4, every
 * slot busy): a keyframe stream of version 1 arriving then is refused,
 * not put in place of the patch 3 -> 4 that is about to commit; once the
 * actor allows version 4, the buffer holds it exactly. */
static void test_a_keyframe_stream_never_evicts_a_staged_patch_about_to_commit(void **state)
{
	fx *f = *state;
	f->s.cf.safe_point = 1;
	for (unsigned v = 0; v < 4; v++)
		feed_all(f, &P[v]);
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_buffer_at(f, 0);
	assert_int_equal(atomic_load(&f->s.w.h->staged), 4);
	assert_int_equal(stage_join_version(&f->s), 4);
	feed_all(f, &K[1]);
	assert_int_equal(f->s.ahead, K[1].n);
	for (unsigned v = 1; v <= 4; v++)
		assert_int_equal(slot_of(f, v, 0)->have, P[v - 1].n);
	assert_null(slot_of(f, 1, 1));
	atomic_store(&f->s.w.h->allow, 4);
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_buffer_at(f, 4);
	assert_int_equal(f->s.commits, 4);
}

/* With commits at the safe point, complete versions wait: the buffer
 * stays at the version the actor runs, the JOIN says how far the staged
 * patches reach, and each allow commits up to the version allowed, in
 * order, catching up several at once. */
static void test_commits_wait_for_the_safe_point_and_catch_up_at_once(void **state)
{
	fx *f = *state;
	f->s.cf.safe_point = 1;
	for (unsigned v = 0; v < 3; v++)
		feed_all(f, &P[v]);
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_buffer_at(f, 0);
	assert_int_equal(stage_join_version(&f->s), 3);
	atomic_store(&f->s.w.h->allow, 1);
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_buffer_at(f, 1);
	atomic_store(&f->s.w.h->allow, 3);
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_buffer_at(f, 3);
	assert_int_equal(f->s.commits, 3);
}

/* A NACK names the version that commits next and exactly the frames of
 * it not staged, as runs of indices; with nothing of it staged, it asks
 * for all of it. */
static void test_a_nack_asks_for_exactly_the_missing_frames(void **state)
{
	fx *f = *state;
	const patch *p = &P[0];
	assert_true(p->n >= 8);
	stage_nack(&f->s);
	const rp_ctl *c = last_sent(f, RP_NACK);
	assert_non_null(c);
	assert_int_equal(c->version, 1);
	assert_int_equal(c->flags, 0);
	assert_int_equal(c->model_id, MODEL);
	assert_int_equal(c->n_ranges, 1);
	assert_int_equal(c->ranges[0].first, 0);
	assert_int_equal(c->ranges[0].count, 4096);

	for (size_t i = 0; i < p->n; i++)
		if (i != 1 && i != 2 && i != 5 && i != p->n - 1)
			feed_frame(f, p, i);
	stage_nack(&f->s);
	c = last_sent(f, RP_NACK);
	assert_int_equal(c->version, 1);
	assert_int_equal(c->flags, 0);
	assert_int_equal(c->n_ranges, 3);
	assert_int_equal(c->ranges[0].first, 1);
	assert_int_equal(c->ranges[0].count, 2);
	assert_int_equal(c->ranges[1].first, 5);
	assert_int_equal(c->ranges[1].count, 1);
	assert_int_equal(c->ranges[2].first, p->n - 1);
	assert_int_equal(c->ranges[2].count, 1);
	assert_int_equal(f->s.nacks, 2);

	/* complete, nothing is missing: no NACK */
	feed_frame(f, p, 1);
	feed_frame(f, p, 2);
	feed_frame(f, p, 5);
	feed_frame(f, p, p->n - 1);
	f->s.cf.safe_point = 1; /* it waits for the actor */
	assert_int_equal(stage_try_commit(&f->s), 0);
	stage_nack(&f->s);
	assert_int_equal(f->s.nacks, 2);
	/* ... but the first incomplete version after it is repaired */
	feed_frame(f, &P[1], 1);
	stage_nack(&f->s);
	c = last_sent(f, RP_NACK);
	assert_int_equal(f->s.nacks, 3);
	assert_int_equal(c->version, 2);
	assert_int_equal(c->ranges[0].first, 0);
	assert_int_equal(c->ranges[0].count, 1);
	assert_int_equal(c->ranges[1].first, 2);
	assert_int_equal(c->ranges[1].count, P[1].n - 2);
}

/* Frames streamed before their count was known (frame_count 0) are
 * staged; a NACK then asks for the gaps and for the tail past the
 * highest index seen, and the frame that reaches the model's end tells
 * the count, after which the version commits exactly. */
static void test_a_nack_for_a_streamed_patch_asks_for_its_tail(void **state)
{
	fx *f = *state;
	const patch *p = &P[0];
	uint8_t **fr = malloc(p->n * sizeof(*fr));
	assert_non_null(fr);
	for (size_t i = 0; i < p->n; i++) {
		fr[i] = copy_of(p, i);
		wr32(fr[i] + 28, 0); /* frame_count: not known yet */
		reseal(fr[i], len_of(p, i));
	}
	feed(f, fr[0], len_of(p, 0));
	feed(f, fr[2], len_of(p, 2));
	assert_int_equal(slot_of(f, 1, 0)->count, 0);
	stage_nack(&f->s);
	const rp_ctl *c = last_sent(f, RP_NACK);
	assert_int_equal(c->n_ranges, 2);
	assert_int_equal(c->ranges[0].first, 1);
	assert_int_equal(c->ranges[0].count, 1);
	assert_int_equal(c->ranges[1].first, 3);
	assert_int_equal(c->ranges[1].count, 256);
	feed(f, fr[p->n - 1], len_of(p, p->n - 1)); /* ends the model: the count */
	assert_int_equal(slot_of(f, 1, 0)->count, p->n);
	for (size_t i = 1; i + 1 < p->n; i++)
		feed(f, fr[i], len_of(p, i));
	assert_int_equal(f->s.dup, 1);
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_buffer_at(f, 1);
	for (size_t i = 0; i < p->n; i++)
		free(fr[i]);
	free(fr);
}

/* NACK_GIVE_UP rounds without a frame of the version that commits next
 * give up on its patch: one resync is counted and the shim JOINs asking
 * for a keyframe stream. A frame of that version starts the count over. */
static void test_unanswered_nacks_give_up_and_ask_for_keyframes(void **state)
{
	fx *f = *state;
	const patch *p = &P[0];
	for (size_t i = 3; i < p->n; i++)
		feed_frame(f, p, i);
	for (unsigned r = 0; r + 1 < NACK_GIVE_UP; r++)
		stage_nack(&f->s);
	feed_frame(f, p, 0); /* an answer: the rounds start over */
	for (unsigned r = 0; r + 1 < NACK_GIVE_UP; r++)
		stage_nack(&f->s);
	assert_int_equal(f->s.resyncs, 0);
	assert_null(last_sent(f, RP_JOIN));
	stage_nack(&f->s);
	assert_int_equal(f->s.resyncs, 1);
	assert_int_equal(f->s.want_key, 1);
	assert_int_equal(last_sent(f, RP_JOIN)->version, RP_VERSION_NONE);
	assert_int_equal(f->s.nacks, 2 * (NACK_GIVE_UP - 1) + 1);
	assert_buffer_at(f, 0);
}

/* A frame count is a claim: one of more frames than any version of the
 * model can have (a frame covers at least what a raw keyframe of its
 * size would) is refused outright, so hostile counts reserve no index
 * arrays; and however large --max-stage is, the budget is capped by what
 * the model's versions can take, while every real version still fits. */
static void test_a_frame_count_lie_is_held_to_the_staging_budget(void **state)
{
	fx *f = *state;
	f->s.cf.max_stage = 1ull << 40;
	const uint64_t budget = stage_budget(&f->s);
	assert_true(budget < 64u << 20); /* a 60,000-word model: not 1 TiB */
	for (uint32_t v = 1; v < VERSIONS; v++) /* real versions fit, SLOTS at once */
		assert_true(SLOTS * (bytes_of(&K[v]) + idx_of(&K[v])) <= budget &&
			    SLOTS * (bytes_of(&P[v - 1]) + idx_of(&P[v - 1])) <= budget);
	const size_t len = len_of(&K[1], 0);
	uint8_t *lie = copy_of(&K[1], 0);
	for (uint32_t v = 1; v <= 3; v++) {
		wr32(lie + 20, v);                            /* target version */
		wr32(lie + 24, 0);                            /* frame 0 */
		wr32(lie + 28, v == 1 ? 1000000 : 250000);    /* of so many */
		reseal(lie, len);
		feed(f, lie, len);
	}
	assert_int_equal(f->s.staged_bytes, 0);
	for (uint32_t v = 1; v <= 3; v++)
		assert_null(slot_of(f, v, 1));
	/* the frame as it was, with its true count, is staged */
	feed_frame(f, &K[1], 0);
	assert_non_null(slot_of(f, 1, 1));
	assert_true(f->s.staged_bytes > 0 && f->s.staged_bytes <= budget);
	assert_buffer_at(f, 0);
	free(lie);
}

/* After a crash in the middle of the commit 0 -> 1 (half of its frames
 * written, the buffer COMMITTING), the shim wants the same patch, NACKs
 * for it, and finishes the commit from it: ranges already at the target
 * are recognised and the whole buffer ends at W[1]; a patch 1 -> 2
 * staged meanwhile commits after it. */
static void test_a_commit_cut_short_is_finished_from_its_patch(void **state)
{
	fx *f = *state;
	const patch *p = &P[0];
	const uint8_t **fr = malloc(p->n * sizeof(*fr));
	uint32_t *lens = malloc(p->n * sizeof(*lens));
	char err[256];
	assert_non_null(fr);
	assert_non_null(lens);
	for (size_t i = 0; i < p->n; i++) {
		fr[i] = frame_of(p, i);
		lens[i] = (uint32_t)len_of(p, i);
	}
	wbuf_begin(&f->s.w, 1, 0);
	apply_ctl ctl = {.threads = 1};
	assert_int_equal(patch_apply_frames(fr, lens, p->n / 2, f->s.w.params, N, MODEL, 0, &ctl,
					    NULL, err, sizeof(err)), 0);
	assert_int_equal(shim_state(&f->s), WBUF_COMMITTING);
	assert_int_equal(stage_floor_version(&f->s), 1);
	stage_nack(&f->s);
	assert_int_equal(last_sent(f, RP_NACK)->version, 1);
	assert_int_equal(last_sent(f, RP_NACK)->flags, 0);
	feed_all(f, &P[1]);
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_int_equal(shim_state(&f->s), WBUF_COMMITTING);
	feed_all(f, p);
	f->s.cf.safe_point = 1; /* the commit cut short waits for no actor */
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_buffer_at(f, 1);
	atomic_store(&f->s.w.h->allow, 2);
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_buffer_at(f, 2);
	assert_int_equal(f->s.commits, 2);
	free(fr);
	free(lens);
}

/* After a crash in the middle of a keyframe commit to 2, the NACK asks
 * for the rest of that keyframe stream (a patch to 2 has another base),
 * and the stream finishes the commit exactly. */
static void test_a_keyframe_commit_cut_short_asks_for_its_stream(void **state)
{
	fx *f = *state;
	wbuf_begin(&f->s.w, 2, WBUF_F_KEY);
	stage_nack(&f->s);
	const rp_ctl *c = last_sent(f, RP_NACK);
	assert_int_equal(c->version, 2);
	assert_int_equal(c->flags, RP_NACK_KEY);
	feed_all(f, &K[2]);
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_buffer_at(f, 2);
	assert_int_equal(f->s.key_commits, 1);
}

/* With the buffer invalid (a failed verification), patch frames are
 * refused and counted, the JOIN asks for a keyframe stream, and a
 * complete stream commits its version over whatever the buffer held,
 * exactly. */
static void test_a_keyframe_stream_resyncs_an_invalid_buffer(void **state)
{
	fx *f = *state;
	wbuf_invalid(&f->s.w);
	memset(f->s.w.params, 0xAB, N * sizeof(uint16_t));
	feed_frame(f, &P[0], 0);
	feed_frame(f, &P[2], 0);
	assert_int_equal(f->s.in_resync, 2);
	assert_int_equal(f->s.staged_bytes, 0);
	assert_int_equal(stage_join_version(&f->s), RP_VERSION_NONE);
	feed_all(f, &K[3]);
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_buffer_at(f, 3);
	assert_int_equal(f->s.key_commits, 1);
	assert_int_equal(last_sent(f, RP_JOIN)->version, 3);
}

/* A keyframe stream larger than half of --max-stage is written into an
 * invalid buffer as it comes, each frame verified before it is written:
 * a forged frame writes nothing, the NACK asks for exactly the frames not
 * written, and the version is published only when the last one is. */
static void test_a_large_keyframe_stream_is_written_in_place_verified(void **state)
{
	fx *f = *state;
	const patch *k = &K[2];
	assert_true(k->n >= 4);
	f->s.cf.max_stage = bytes_of(k); /* staged, it would take more than half */
	wbuf_invalid(&f->s.w);
	memset(f->s.w.params, 0xAB, N * sizeof(uint16_t));
	uint16_t *before = malloc(N * sizeof(uint16_t));
	assert_non_null(before);
	memcpy(before, f->s.w.params, N * sizeof(uint16_t));
	const size_t bad_at = 1;
	uint8_t *bad = forged_hash(k, bad_at);
	feed(f, bad, len_of(k, bad_at));
	assert_int_equal(f->s.bad, 1);
	assert_words_equal(f->s.w.params, before, N);
	for (size_t i = 0; i < k->n; i++) {
		if (i == bad_at)
			continue;
		feed_frame(f, k, i);
		bfp_frame_header h = header_of(k, i);
		assert_range_at(f, h.range_begin, h.range_len, 2);
		assert_int_equal(shim_state(&f->s), WBUF_RESYNC);
	}
	bfp_frame_header h = header_of(k, bad_at);
	assert_words_equal(f->s.w.params + h.range_begin, before + h.range_begin, h.range_len);
	assert_int_equal(f->s.staged_bytes, 0);
	stage_nack(&f->s);
	const rp_ctl *c = last_sent(f, RP_NACK);
	assert_int_equal(c->version, 2);
	assert_int_equal(c->flags, RP_NACK_KEY);
	assert_int_equal(c->n_ranges, 1);
	assert_int_equal(c->ranges[0].first, bad_at);
	assert_int_equal(c->ranges[0].count, 1);
	feed_frame(f, k, bad_at);
	assert_buffer_at(f, 2);
	assert_int_equal(f->s.key_commits, 1);
	free(bad);
	free(before);
}

/* A keyframe stream written in place whose frames, all verified, do not
 * tile the model (two over the same range) is not published: the buffer
 * stays invalid until a stream that tiles it is complete. */
static void test_a_keyframe_stream_in_place_that_does_not_tile_is_not_published(void **state)
{
	fx *f = *state;
	const patch *k = &K[2];
	f->s.cf.max_stage = bytes_of(k);
	wbuf_invalid(&f->s.w);
	uint8_t *twin = copy_of(k, 0); /* frame 0's range, as frame 1 */
	wr32(twin + 24, 1);
	reseal(twin, len_of(k, 0));
	feed(f, twin, len_of(k, 0));
	for (size_t i = 0; i < k->n; i++)
		if (i != 1)
			feed_frame(f, k, i);
	assert_int_equal(shim_state(&f->s), WBUF_RESYNC);
	assert_int_equal(f->s.key_commits, 0);
	assert_null(f->s.ip.done);
	feed_all(f, k);
	assert_buffer_at(f, 2);
	assert_int_equal(f->s.key_commits, 1);
	free(twin);
}

/* A keyframe stream too large to stage, sent while it is encoded
 * (frame_count 0, FORMAT.md 2.5): the frames staged before one with the
 * count came are written in place by that count, as are the streamed ones
 * after it, each verified; the version is published once all are. Sizing
 * the stream by a staged frame's count of 0 would write past its tables. */
static void test_a_streamed_keyframe_stream_is_written_in_place_by_its_count(void **state)
{
	fx *f = *state;
	const patch *k = &K[2];
	assert_true(k->n >= 4);
	f->s.cf.max_stage = bytes_of(k);
	wbuf_invalid(&f->s.w);
	memset(f->s.w.params, 0xAB, N * sizeof(uint16_t));
	for (size_t i = 0; i < k->n; i++) {
		if (i == 2) { /* the first with its count: in place from here */
			assert_null(f->s.ip.done);
			feed_frame(f, k, i);
			assert_non_null(f->s.ip.done);
			assert_int_equal(f->s.ip.count, k->n);
			continue;
		}
		uint8_t *x = copy_of(k, i);
		wr32(x + 28, 0); /* frame_count */
		reseal(x, len_of(k, i));
		feed(f, x, len_of(k, i));
		free(x);
	}
	for (size_t i = 0; i < k->n; i++) {
		bfp_frame_header h = header_of(k, i);
		assert_range_at(f, h.range_begin, h.range_len, 2);
	}
	assert_int_equal(f->s.bad, 0);
	assert_buffer_at(f, 2);
	assert_int_equal(f->s.key_commits, 1);
}

/* The buffer's sequence counter is odd: readers take no version from it. */
static void assert_no_version_seen(const fx *f)
{
	assert_int_equal(shim_state(&f->s), WBUF_RESYNC);
	assert_true(atomic_load(&f->s.w.h->seq) & 1);
}

/* A keyframe stream staged while the buffer holds no version (a late
 * joiner, state RESYNC) is written into the buffer frame by frame as it
 * comes, each verified first: once every frame is staged the buffer
 * already holds the version byte for byte, still unpublished, and the
 * commit decodes nothing (every frame prepared) and publishes it. */
static void test_a_late_joiners_keyframes_are_written_while_staged(void **state)
{
	fx *f = *state;
	const patch *k = &K[2];
	assert_true(k->n >= 4);
	wbuf_invalid(&f->s.w);
	memset(f->s.w.params, 0xAB, N * sizeof(uint16_t));
	for (size_t i = 0; i < k->n; i++) {
		feed_frame(f, k, i);
		bfp_frame_header h = header_of(k, i);
		assert_range_at(f, h.range_begin, h.range_len, 2);
		if (i + 1 < k->n) {
			assert_int_equal(stage_try_commit(&f->s), 0);
			assert_no_version_seen(f);
		}
	}
	assert_words_equal(f->s.w.params, W[2], N); /* before the commit */
	assert_int_equal(f->s.prepared, k->n);
	assert_int_equal(slot_of(f, 2, 1)->prepped, k->n);
	assert_no_version_seen(f);
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_buffer_at(f, 2);
	assert_int_equal(f->s.key_commits, 1);
	assert_int_equal(f->s.bad, 0);
	assert_int_equal(f->s.staged_bytes, 0);
	assert_int_equal(f->s.prep_bytes, 0);
}

/* A damaged keyframe (a wrong target hash, a valid CRC) of a stream
 * written while staged is refused when it comes: counted as bad, not
 * staged, nothing written; the NACK asks for it; a repeated frame is
 * staged and written once; the right frame then completes the version. */
static void test_a_damaged_keyframe_written_while_staged_changes_nothing(void **state)
{
	fx *f = *state;
	const patch *k = &K[2];
	const size_t bad_at = 1;
	wbuf_invalid(&f->s.w);
	memset(f->s.w.params, 0xAB, N * sizeof(uint16_t));
	uint16_t *before = malloc(N * sizeof(uint16_t));
	assert_non_null(before);
	memcpy(before, f->s.w.params, N * sizeof(uint16_t));
	uint8_t *bad = forged_hash(k, bad_at);
	feed_frame(f, k, 0);
	feed(f, bad, len_of(k, bad_at));
	assert_int_equal(f->s.bad, 1);
	const slot *sl = slot_of(f, 2, 1);
	assert_non_null(sl);
	assert_null(sl->frames[bad_at]);
	assert_int_equal(sl->have, 1);
	bfp_frame_header h0 = header_of(k, 0);
	assert_range_at(f, h0.range_begin, h0.range_len, 2);
	assert_words_equal(f->s.w.params + h0.range_len, before + h0.range_len,
			   N - h0.range_len);
	feed_frame(f, k, 0); /* repeated */
	assert_int_equal(f->s.dup, 1);
	assert_int_equal(f->s.prepared, 1);
	for (size_t i = bad_at + 1; i < k->n; i++)
		feed_frame(f, k, i);
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_no_version_seen(f);
	bfp_frame_header hb = header_of(k, bad_at);
	assert_words_equal(f->s.w.params + hb.range_begin, before + hb.range_begin, hb.range_len);
	stage_nack(&f->s);
	const rp_ctl *c = last_sent(f, RP_NACK);
	assert_int_equal(c->version, 2);
	assert_int_equal(c->flags, RP_NACK_KEY);
	assert_int_equal(c->n_ranges, 1);
	assert_int_equal(c->ranges[0].first, bad_at);
	assert_int_equal(c->ranges[0].count, 1);
	feed_frame(f, k, bad_at);
	assert_int_equal(f->s.prepared, k->n);
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_buffer_at(f, 2);
	free(bad);
	free(before);
}

/* A streamed keyframe stream in encoding 7 (frame_count 0, FORMAT.md
 * 2.5; the last frame tells the count by reaching the model's end),
 * arriving out of order, is written while staged all the same and
 * commits exactly. */
static void test_a_streamed_keyframe_stream_is_written_while_staged(void **state)
{
	fx *f = *state;
	const patch *k = &KX;
	assert_true(k->n >= 4);
	assert_int_equal(header_of(k, 0).encoding, BFP_ENC_KEY_EXP);
	wbuf_invalid(&f->s.w);
	memset(f->s.w.params, 0x5A, N * sizeof(uint16_t));
	for (size_t j = 0; j < k->n; j++) {
		size_t i = k->n - 1 - j; /* the last first: its count known early */
		uint8_t *x = copy_of(k, i);
		wr32(x + 28, 0); /* frame_count */
		reseal(x, len_of(k, i));
		feed(f, x, len_of(k, i));
		free(x);
	}
	assert_words_equal(f->s.w.params, XW, N);
	assert_int_equal(f->s.prepared, k->n);
	assert_no_version_seen(f);
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_int_equal(shim_state(&f->s), WBUF_READY);
	assert_int_equal(shim_version(&f->s), 3);
	assert_words_equal(f->s.w.params, XW, N);
}

/* Two keyframe streams staged during one resync: the buffer holds the
 * frames of the newest only (an older stream's frames written before are
 * forgotten, so its commit decodes them again), a commit forgets those of
 * the streams it did not commit, and each version commits exactly. */
static void test_keyframe_streams_written_while_staged_never_mix(void **state)
{
	fx *f = *state;
	const patch *a = &K[2], *b = &K[3];
	wbuf_invalid(&f->s.w);
	for (size_t i = 0; i + 1 < a->n; i++)
		feed_frame(f, a, i);
	assert_int_equal(slot_of(f, 2, 1)->prepped, a->n - 1);
	feed_frame(f, b, 0); /* the newer stream takes the buffer */
	assert_int_equal(slot_of(f, 2, 1)->prepped, 0);
	assert_int_equal(slot_of(f, 3, 1)->prepped, 1);
	feed_frame(f, a, a->n - 1); /* not written: not the newest */
	assert_int_equal(slot_of(f, 2, 1)->prepped, 0);
	assert_int_equal(stage_try_commit(&f->s), 0); /* 2, decoded at the commit */
	assert_buffer_at(f, 2);
	assert_int_equal(slot_of(f, 3, 1)->prepped, 0); /* written over by that commit */
	for (size_t i = 1; i < b->n; i++)
		feed_frame(f, b, i);
	/* a version is held: into the shadow, frame 0 decoded at the commit */
	assert_int_equal(slot_of(f, 3, 1)->prepped, b->n - 1);
	assert_int_equal(slot_of(f, 3, 1)->in_shadow, 1);
	assert_buffer_at(f, 2);
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_buffer_at(f, 3);
	assert_null(f->s.shadow);
	assert_int_equal(f->s.key_commits, 2);
	assert_int_equal(f->s.resyncs, 0);
}

/* A new publisher run drops a stream written while staged: the buffer
 * still publishes no version; with --no-prepare nothing is written while
 * staged and the commit decodes every frame, to the same bytes. */
static void test_a_dropped_or_unprepared_keyframe_stream_publishes_nothing(void **state)
{
	fx *f = *state;
	const patch *k = &K[2];
	wbuf_invalid(&f->s.w);
	memset(f->s.w.params, 0xAB, N * sizeof(uint16_t));
	for (size_t i = 0; i + 1 < k->n; i++)
		feed_frame(f, k, i);
	assert_true(f->s.prepared > 0);
	stage_drop_all(&f->s);
	assert_int_equal(f->s.staged_bytes, 0);
	assert_int_equal(f->s.prep_bytes, 0);
	assert_no_version_seen(f);
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_no_version_seen(f);
	memset(f->s.w.params, 0xAB, N * sizeof(uint16_t));
	f->s.no_prep = 1;
	const uint64_t prepared = f->s.prepared;
	for (size_t i = 0; i + 1 < k->n; i++)
		feed_frame(f, k, i);
	assert_int_equal(f->s.prepared, prepared);
	assert_int_equal(f->s.w.params[0], 0xABAB);
	feed_frame(f, k, k->n - 1);
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_buffer_at(f, 2);
}

/* While frames wait in the socket (the last receive filled its batch),
 * keyframes are staged without being decoded: receiving comes first.
 * Those are decoded at the commit, the others were written as they came,
 * and the version is exact. */
static void test_keyframes_wait_for_the_commit_while_frames_wait_in_the_socket(void **state)
{
	fx *f = *state;
	const patch *k = &K[2];
	wbuf_invalid(&f->s.w);
	memset(f->s.w.params, 0xAB, N * sizeof(uint16_t));
	for (size_t i = 0; i < k->n; i++) {
		f->s.rx_behind = i % 2;
		feed_frame(f, k, i);
		bfp_frame_header h = header_of(k, i);
		if (i % 2)
			assert_int_equal(f->s.w.params[h.range_begin], 0xABAB);
	}
	assert_int_equal(f->s.prepared, (k->n + 1) / 2);
	f->s.rx_behind = 0;
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_buffer_at(f, 2);
}

/* A keyframe stream staged while the buffer holds a version readers use
 * (a joiner that has an old one) is decoded into the shadow as it comes,
 * never into the buffer: the buffer stays at its version byte for byte,
 * and a patch committed meanwhile leaves the shadow's frames valid. The
 * stream's commit copies them and checks their hashes, decoding none, and
 * frees the shadow. */
static void test_a_keyframe_stream_is_decoded_into_a_shadow_while_a_version_is_held(void **state)
{
	fx *f = *state;
	const patch *k = &K[3];
	for (size_t i = 0; i + 1 < k->n; i++) {
		feed_frame(f, k, i);
		assert_int_equal(stage_try_commit(&f->s), 0);
		assert_buffer_at(f, 0);
	}
	const slot *sl = slot_of(f, 3, 1);
	assert_int_equal(sl->prepped, k->n - 1);
	assert_int_equal(sl->in_shadow, 1);
	assert_non_null(f->s.shadow);
	for (size_t i = 0; i + 1 < k->n; i++) {
		bfp_frame_header h = header_of(k, i);
		assert_words_equal(f->s.shadow + h.range_begin, W[3] + h.range_begin, h.range_len);
	}
	feed_all(f, &P[0]); /* a patch commits first: the shadow is not the buffer */
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_buffer_at(f, 1);
	assert_int_equal(slot_of(f, 3, 1)->prepped, k->n - 1);
	feed_frame(f, k, k->n - 1);
	assert_int_equal(f->s.prepared, k->n);
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_buffer_at(f, 3);
	assert_int_equal(f->s.key_commits, 1);
	assert_null(f->s.shadow);
	assert_int_equal(f->s.staged_bytes, 0);
	assert_int_equal(f->s.prep_bytes, 0);
}

/* The shadow counts against the prepared half of the staging budget:
 * when it does not fit, a keyframe stream is staged alone and decoded at
 * its commit, to the same bytes. */
static void test_a_shadow_that_does_not_fit_the_budget_is_not_made(void **state)
{
	fx *f = *state;
	const patch *k = &K[2];
	f->s.cf.max_stage = 2 * N * sizeof(uint16_t) - 2; /* frames fit, the shadow not */
	assert_true(bytes_of(k) + idx_of(k) < stage_budget(&f->s));
	assert_true(stage_budget(&f->s) / 2 < N * sizeof(uint16_t));
	feed_all(f, k);
	assert_null(f->s.shadow);
	assert_int_equal(f->s.prepared, 0);
	assert_int_equal(stage_try_commit(&f->s), 0);
	assert_buffer_at(f, 2);
}

/* ---- the buffer's one writer (wbuf_lock) ---- */

/* err says the buffer is locked, names the path it was reached by, and
 * names this process, which holds the lock. */
static void assert_refused_naming_us(const char *err, const char *path)
{
	char us[64];
	snprintf(us, sizeof(us), "locked by its writer, process %d (", (int)getpid());
	assert_non_null(strstr(err, path));
	assert_non_null(strstr(err, us));
}

/* One writer per buffer file, whatever path names it: with the shim's
 * lock held, a second writer is refused through the same path, a
 * symbolic link, a hard link, a path through "..", a relative path;
 * readers open and snapshot it all the while; once the first writer
 * closes the buffer, the next one locks it. */
static void test_a_second_writer_is_refused_by_any_path_to_the_buffer(void **state)
{
	fx *f = *state;
	char err[512], sym[128], hard[128], dots[128], rel[128], cwd[4096];
	assert_int_equal(wbuf_lock(f->s.w.fd, f->path, err, sizeof(err)), 0);
	snprintf(sym, sizeof(sym), "%s/sym", f->dir);
	snprintf(hard, sizeof(hard), "%s/hard", f->dir);
	snprintf(dots, sizeof(dots), "%s/sub/../buf", f->dir);
	snprintf(rel, sizeof(rel), "%s/sub", f->dir);
	assert_int_equal(symlink(f->path, sym), 0);
	assert_int_equal(link(f->path, hard), 0);
	assert_int_equal(mkdir(rel, 0700), 0);
	assert_non_null(getcwd(cwd, sizeof(cwd)));
	assert_int_equal(chdir(rel), 0);
	const char *paths[] = {f->path, sym, hard, dots, "../buf"};
	for (unsigned i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		wbuf second;
		assert_int_equal(wbuf_open(&second, paths[i], err, sizeof(err)), 0);
		assert_int_equal(wbuf_lock(second.fd, paths[i], err, sizeof(err)), -1);
		assert_refused_naming_us(err, paths[i]);
		uint32_t v = 99; /* the reader's side: no lock, not blocked */
		uint16_t *copy = malloc(N * sizeof(uint16_t));
		assert_non_null(copy);
		assert_int_equal(wbuf_snapshot(&second, copy, &v), 0);
		assert_int_equal(v, 0);
		assert_words_equal(copy, W[0], N);
		free(copy);
		wbuf_close(&second);
	}
	assert_int_equal(chdir(cwd), 0);
	/* the lock went with the first writer's descriptor */
	wbuf_close(&f->s.w);
	assert_int_equal(wbuf_open(&f->s.w, hard, err, sizeof(err)), 0);
	assert_int_equal(wbuf_lock(f->s.w.fd, hard, err, sizeof(err)), 0);
	unlink(sym);
	unlink(hard);
	rmdir(rel);
}

/* Creating never replaces a buffer: not at its path, not through a
 * symbolic link to it; a link to a file not there yet gets that file
 * made where it points, and stays a link. */
static void test_creating_a_buffer_never_replaces_one(void **state)
{
	fx *f = *state;
	char err[512], sym[128], fresh[128], fsym[128];
	struct stat before, after;
	model m;
	assert_int_equal(model_init_raw(&m, N), 0);
	memcpy(m.params, W[1], N * sizeof(uint16_t));
	m.model_id = MODEL;
	snprintf(sym, sizeof(sym), "%s/sym", f->dir);
	snprintf(fresh, sizeof(fresh), "%s/fresh", f->dir);
	snprintf(fsym, sizeof(fsym), "%s/fresh-link", f->dir);
	assert_int_equal(symlink(f->path, sym), 0);
	assert_int_equal(symlink("fresh", fsym), 0);
	assert_int_equal(stat(f->path, &before), 0);
	assert_int_equal(wbuf_create(f->path, &m, 1, 0, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "exists"));
	assert_int_equal(wbuf_create(sym, &m, 1, 0, err, sizeof(err)), -1);
	assert_int_equal(stat(f->path, &after), 0);
	assert_true(before.st_ino == after.st_ino);
	assert_words_equal(f->s.w.params, W[0], N);
	/* through a link to nothing yet */
	assert_int_equal(wbuf_create(fsym, &m, 1, 0, err, sizeof(err)), 0);
	assert_int_equal(lstat(fsym, &after), 0);
	assert_true(S_ISLNK(after.st_mode));
	wbuf made;
	assert_int_equal(wbuf_open(&made, fresh, err, sizeof(err)), 0);
	assert_int_equal(atomic_load(&made.h->version), 1);
	assert_words_equal(made.params, W[1], N);
	wbuf_close(&made);
	model_free(&m);
	unlink(sym);
	unlink(fsym);
	unlink(fresh);
}

/* An undo journal that cannot be reserved (a file size limit: EFBIG, as
 * a full disk gives ENOSPC) leaves nothing behind: no journal where there
 * was none; one that was there keeps its size and the values it holds. */
static void test_an_undo_journal_without_room_leaves_nothing_behind(void **state)
{
	fx *f = *state;
	char err[512], path[128], jp[160];
	const uint32_t pos[3] = {1, 5, 9};
	struct rlimit was, low;
	struct stat sb;
	wbuf_undo u;
	snprintf(path, sizeof(path), "%s/other", f->dir);
	snprintf(jp, sizeof(jp), "%s.undo", path);
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &was), 0);
	void (*xfsz)(int) = signal(SIGXFSZ, SIG_IGN);
	low = was;
	low.rlim_cur = 4096;
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &low), 0);
	int rc = wbuf_undo_open(&u, &f->s.w, path, 2, err, sizeof(err));
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &was), 0);
	assert_int_equal(rc, -1);
	assert_non_null(strstr(err, jp));
	assert_int_equal(access(jp, F_OK), -1);
	/* a journal of one slot, holding a frame's values, asked to grow */
	assert_int_equal(wbuf_undo_open(&u, &f->s.w, path, 1, err, sizeof(err)), 0);
	wbuf_undo_note(&u, 0, 100, pos, 3);
	wbuf_undo_close(&u);
	assert_int_equal(stat(jp, &sb), 0);
	const off_t one = sb.st_size;
	low.rlim_cur = (rlim_t)one;
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &low), 0);
	rc = wbuf_undo_open(&u, &f->s.w, path, 2, err, sizeof(err));
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &was), 0);
	signal(SIGXFSZ, xfsz);
	assert_int_equal(rc, -1);
	assert_int_equal(stat(jp, &sb), 0);
	assert_true(sb.st_size == one);
	assert_int_equal(wbuf_undo_open(&u, &f->s.w, path, 1, err, sizeof(err)), 0);
	assert_int_equal(wbuf_undo_rollback(&u, 0), 1);
	wbuf_undo_close(&u);
	assert_words_equal(f->s.w.params, W[0], N);
	unlink(jp);
}

#define T(name) cmocka_unit_test_setup_teardown(name, fx_setup, fx_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_a_patch_commits_only_when_every_frame_is_staged),
		T(test_a_patch_commits_the_same_bytes_prepared_or_not),
		T(test_frames_that_do_not_tile_the_model_are_never_committed),
		T(test_a_frame_failing_verification_while_prepared_is_dropped),
		T(test_a_frame_failing_verification_at_commit_is_never_written),
		T(test_a_duplicate_frame_is_counted_and_staged_once),
		T(test_frames_of_another_model_or_an_old_version_are_refused),
		T(test_the_staging_budget_holds_and_prepared_changes_give_way_first),
		T(test_prepared_changes_take_at_most_half_the_budget),
		T(test_the_next_version_evicts_later_ones_never_the_reverse),
		T(test_a_keyframe_stream_never_evicts_a_staged_patch_about_to_commit),
		T(test_commits_wait_for_the_safe_point_and_catch_up_at_once),
		T(test_a_nack_asks_for_exactly_the_missing_frames),
		T(test_a_nack_for_a_streamed_patch_asks_for_its_tail),
		T(test_unanswered_nacks_give_up_and_ask_for_keyframes),
		T(test_a_frame_count_lie_is_held_to_the_staging_budget),
		T(test_a_commit_cut_short_is_finished_from_its_patch),
		T(test_a_keyframe_commit_cut_short_asks_for_its_stream),
		T(test_a_keyframe_stream_resyncs_an_invalid_buffer),
		T(test_a_large_keyframe_stream_is_written_in_place_verified),
		T(test_a_keyframe_stream_in_place_that_does_not_tile_is_not_published),
		T(test_a_streamed_keyframe_stream_is_written_in_place_by_its_count),
		T(test_a_late_joiners_keyframes_are_written_while_staged),
		T(test_a_damaged_keyframe_written_while_staged_changes_nothing),
		T(test_a_streamed_keyframe_stream_is_written_while_staged),
		T(test_keyframe_streams_written_while_staged_never_mix),
		T(test_a_dropped_or_unprepared_keyframe_stream_publishes_nothing),
		T(test_keyframes_wait_for_the_commit_while_frames_wait_in_the_socket),
		T(test_a_keyframe_stream_is_decoded_into_a_shadow_while_a_version_is_held),
		T(test_a_shadow_that_does_not_fit_the_budget_is_not_made),
		T(test_a_second_writer_is_refused_by_any_path_to_the_buffer),
		T(test_creating_a_buffer_never_replaces_one),
		T(test_an_undo_journal_without_room_leaves_nothing_behind),
	};
	return cmocka_run_group_tests(tests, make_versions, free_versions);
}
