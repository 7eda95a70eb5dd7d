/*
 * test_publish_nack.c: the publisher's NACK answers (publisher/nack.c):
 * which frames answer a NACK and from which held patch, keyframe stream
 * or stream in progress; the cap of 4096 frames a NACK, the slow link's
 * 100 ms and the subscriber's own budget; frames a catch-up has still to
 * send are not resent. The decisions are driven through nack_plan() at
 * given instants (no clock, no socket); one test sends an answer over
 * loopback to see that what was decided is what leaves. And when a
 * subscriber that is behind starts its catch-up (pub_catchup_waits).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bfp_test.h"
#include "util.h"
#include "publisher.h"

#define NP 300000u   /* parameters of the test model */
#define T0 1000.0    /* the instant of the first NACK, in s */

typedef struct fixture {
	publisher *P;
	model m1, m2, m3;
	patch_opts po;
	const patch *p;  /* the patch 1 -> 2 held */
	const patch *k;  /* the keyframe stream of 2, held for catch-ups */
	pub_sub s, s2;   /* two subscribers */
} fixture;

static void raw_model(model *m, const uint16_t *w)
{
	assert_int_equal(model_init_raw(m, NP), 0);
	memcpy(m->params, w, NP * 2);
}

static int setup(void **state)
{
	fixture *f = calloc(1, sizeof(*f));
	publisher *P = calloc(1, sizeof(*P));
	uint16_t *w1 = malloc(NP * 2), *w2 = malloc(NP * 2), *w3 = malloc(NP * 2);
	char err[ERRLEN];
	assert_true(f && P && w1 && w2 && w3);
	uint64_t seed = 5;
	for (unsigned i = 0; i < NP; i++)
		w1[i] = t_weight(&seed);
	t_mutate(w1, w2, NP, 300000, &seed); /* dense changes: a patch of many frames */
	t_mutate(w2, w3, NP, 300000, &seed);
	raw_model(&f->m1, w1);
	raw_model(&f->m2, w2);
	raw_model(&f->m3, w3);
	free(w1);
	free(w2);
	free(w3);
	f->po.frame_size = BFP_FRAME_SIZE_DEFAULT;
	f->po.threads = 1;
	f->po.base_version = 1;
	f->po.target_version = 2;
	P->sock = -1;
	P->ev.fd = -1;
	P->model_id = f->m2.model_id;
	P->frame_size = BFP_FRAME_SIZE_DEFAULT;
	rp_bucket_init(&P->bucket, 0, pub_burst(0, P->frame_size), 0); /* --rate 0 */
	history_init(&P->hist, 4, NULL, NULL);
	uint32_t ob, ov;
	unsigned slot = history_evict(&P->hist, &ob, &ov);
	assert_int_equal(patch_encode(&f->m1, &f->m2, &f->po, &P->hist.p[slot], err, sizeof(err)),
			 0);
	history_hold(&P->hist, slot, 1, 2);
	assert_int_equal(history_key_make(&P->hist, &f->m2, 2, &f->po, err, sizeof(err)), 0);
	f->P = P;
	f->p = history_find(&P->hist, 2);
	f->k = history_key(&P->hist, 2);
	assert_non_null(f->p);
	assert_ptr_equal(f->k, &P->hist.key);
	/* 128 ranges of the whole patch ask for more than one answer holds */
	assert_true(f->p->n * RP_NACK_MAX > RP_NACK_ANSWER_MAX);
	assert_true(f->p->n > 20);
	nack_budget_init(&f->s.nack, 65536, T0);
	nack_budget_init(&f->s2.nack, 65536, T0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	fixture *f = *state;
	history_free(&f->P->hist);
	patch_free(&f->P->streamed);
	if (f->P->sock >= 0)
		close(f->P->sock);
	free(f->P);
	model_free(&f->m1);
	model_free(&f->m2);
	model_free(&f->m3);
	free(f);
	return 0;
}

/* A NACK of version v (flags: RP_NACK_KEY or 0) for n ranges. */
static rp_ctl nack_of(uint32_t v, uint16_t flags, unsigned n, const rp_range *r)
{
	rp_ctl c;
	memset(&c, 0, sizeof(c));
	c.type = RP_NACK;
	c.version = v;
	c.flags = flags;
	c.n_ranges = (uint16_t)n;
	memcpy(c.ranges, r, n * sizeof(*r));
	return c;
}

/* 128 ranges, each the whole of a patch of n frames. */
static rp_ctl nack_all_128(uint32_t v, uint16_t flags, size_t n)
{
	rp_range r[RP_NACK_MAX];
	for (unsigned i = 0; i < RP_NACK_MAX; i++)
		r[i] = (rp_range){0, (uint32_t)n};
	return nack_of(v, flags, RP_NACK_MAX, r);
}

static uint64_t bytes_of(const patch *p, uint32_t first, uint32_t count)
{
	return p->off[first + count] - p->off[first];
}

/* Domain assert: the answer's ranges add up to its frame and byte
 * counts, and each is within its patch. */
static void assert_reply_consistent(const nack_reply *a)
{
	uint64_t frames = 0, bytes = 0;
	for (unsigned i = 0; i < a->n; i++) {
		assert_true(a->r[i].count > 0);
		assert_true(a->r[i].first + a->r[i].count <= a->p->n);
		frames += a->r[i].count;
		bytes += bytes_of(a->p, a->r[i].first, a->r[i].count);
	}
	assert_int_equal(frames, a->frames);
	assert_int_equal(bytes, a->bytes);
}

/* A NACK is answered with the frames its ranges name, in its order, from
 * the held patch to its version. */
static void test_a_nack_is_answered_with_the_frames_it_names(void **state)
{
	fixture *f = *state;
	nack_reply a;
	rp_ctl c = nack_of(2, 0, 2, (rp_range[]){{3, 5}, {10, 1}});
	nack_plan(f->P, &f->s, &c, T0, &a);
	assert_ptr_equal(a.p, f->p);
	assert_int_equal(a.n, 2);
	assert_int_equal(a.r[0].first, 3);
	assert_int_equal(a.r[0].count, 5);
	assert_int_equal(a.r[1].first, 10);
	assert_int_equal(a.r[1].count, 1);
	assert_int_equal(a.frames, 6);
	assert_int_equal(a.bytes, bytes_of(f->p, 3, 5) + bytes_of(f->p, 10, 1));
	assert_int_equal(a.limited, 0);
}

/* Ranges are cut to the frames the patch has; one past its end is
 * skipped, not answered with anything. */
static void test_ranges_are_cut_to_the_frames_held(void **state)
{
	fixture *f = *state;
	nack_reply a;
	const uint32_t n = (uint32_t)f->p->n;
	rp_ctl c = nack_of(2, 0, 3, (rp_range[]){{n - 2, 10}, {n + 5, 3}, {n, 1}});
	nack_plan(f->P, &f->s, &c, T0, &a);
	assert_int_equal(a.n, 1);
	assert_int_equal(a.r[0].first, n - 2);
	assert_int_equal(a.r[0].count, 2);
	assert_int_equal(a.frames, 2);
	assert_reply_consistent(&a);
}

/* However its ranges overlap, one NACK is answered with at most 4096
 * frames (PROTOCOL.md 2.4), not 128 copies of the patch, also where the
 * subscriber's budget is unlimited. */
static void test_one_nack_gets_at_most_4096_frames_however_its_ranges_overlap(void **state)
{
	fixture *f = *state;
	nack_reply a;
	nack_budget_init(&f->s.nack, 0, T0); /* --nack-rate 0 */
	rp_ctl c = nack_all_128(2, 0, f->p->n);
	for (int again = 0; again < 2; again++) {
		nack_plan(f->P, &f->s, &c, T0, &a);
		assert_int_equal(a.frames, RP_NACK_ANSWER_MAX);
		assert_int_equal(a.limited, 0);
		assert_int_equal(a.r[0].first, 0);
		assert_int_equal(a.r[0].count, f->p->n);
		assert_reply_consistent(&a);
	}
}

/* A new subscriber may ask for one full answer at once; a NACK over its
 * budget then gets nothing and is counted as limited, and one later gets
 * what --nack-rate refilled meanwhile (100 frames/s, 2 s: 200). */
static void test_a_subscriber_over_its_budget_gets_only_what_refilled(void **state)
{
	fixture *f = *state;
	nack_reply a;
	const uint64_t n = f->p->n;
	nack_budget_init(&f->s.nack, 100, T0);
	rp_ctl c = nack_all_128(2, 0, n);
	nack_plan(f->P, &f->s, &c, T0, &a);
	assert_int_equal(a.frames, RP_NACK_ANSWER_MAX);
	assert_int_equal(a.limited, 0);
	nack_plan(f->P, &f->s, &c, T0, &a);
	assert_non_null(a.p);
	assert_int_equal(a.frames, 0);
	assert_int_equal(a.n, 0);
	assert_int_equal(a.limited, RP_NACK_MAX * n);
	nack_plan(f->P, &f->s, &c, T0 + 2, &a);
	assert_int_equal(a.frames, 200);
	assert_int_equal(a.limited, RP_NACK_MAX * n - 200);
	assert_reply_consistent(&a);
}

/* One subscriber spending its budget leaves another's whole. */
static void test_each_subscriber_has_a_budget_of_its_own(void **state)
{
	fixture *f = *state;
	nack_reply a;
	nack_budget_init(&f->s.nack, 100, T0);
	nack_budget_init(&f->s2.nack, 100, T0);
	rp_ctl c = nack_all_128(2, 0, f->p->n);
	nack_plan(f->P, &f->s, &c, T0, &a);
	nack_plan(f->P, &f->s, &c, T0, &a);
	assert_int_equal(a.frames, 0);
	nack_plan(f->P, &f->s2, &c, T0, &a);
	assert_int_equal(a.frames, RP_NACK_ANSWER_MAX);
}

/* A keyframe-stream NACK (RP_NACK_KEY) is answered from the keyframe
 * stream of its version, never from the patch to it, and not at all
 * where no stream of it is held; with --keyframes, from the slot holding
 * that version's stream, which a patch NACK does not get. */
static void test_a_keyframe_nack_is_answered_from_the_keyframe_stream(void **state)
{
	fixture *f = *state;
	nack_reply a;
	char err[ERRLEN];
	rp_ctl c = nack_of(2, RP_NACK_KEY, 1, (rp_range[]){{0, 40}});
	nack_plan(f->P, &f->s, &c, T0, &a);
	assert_ptr_equal(a.p, f->k);
	assert_int_equal(a.frames, 40);
	assert_int_equal(a.bytes, bytes_of(f->k, 0, 40));
	c.version = 1;
	nack_plan(f->P, &f->s, &c, T0, &a);
	assert_null(a.p);
	assert_int_equal(a.frames, 0);

	uint32_t ob, ov;
	unsigned slot = history_evict(&f->P->hist, &ob, &ov);
	assert_int_equal(history_keyframes(&f->m3, 3, &f->po, &f->P->hist.p[slot], err,
					   sizeof(err)), 0);
	history_hold(&f->P->hist, slot, 0, 3);
	c.version = 3;
	nack_plan(f->P, &f->s, &c, T0, &a);
	assert_ptr_equal(a.p, &f->P->hist.p[slot]);
	assert_int_equal(a.frames, 40);
	c.flags = 0;
	nack_plan(f->P, &f->s, &c, T0, &a);
	assert_null(a.p);
}

/* Of the patch a subscriber's catch-up is sending, a NACK gets only the
 * frames sent already (the rest come anyway); frames still to come are
 * not resent, nor counted against its budget. Another subscriber, or
 * another patch or stream, is not cut. */
static void test_frames_of_a_catch_up_still_to_come_are_not_resent(void **state)
{
	fixture *f = *state;
	nack_reply a;
	const uint32_t n = (uint32_t)f->p->n;
	f->s.cu_active = 1;
	f->s.cu_base = 1;
	f->s.cu_target = f->s.cu_end = 2;
	f->s.cu_next = 7;
	rp_ctl c = nack_of(2, 0, 1, (rp_range[]){{0, n}});
	nack_plan(f->P, &f->s, &c, T0, &a);
	assert_int_equal(a.n, 1);
	assert_int_equal(a.r[0].count, 7);
	rp_ctl later = nack_of(2, 0, 1, (rp_range[]){{7, 3}});
	nack_plan(f->P, &f->s, &later, T0, &a);
	assert_int_equal(a.frames, 0);
	assert_int_equal(a.limited, 0);
	nack_plan(f->P, &f->s2, &c, T0, &a);
	assert_int_equal(a.frames, n);
	rp_ctl key = nack_of(2, RP_NACK_KEY, 1, (rp_range[]){{0, 30}});
	nack_plan(f->P, &f->s, &key, T0, &a);
	assert_int_equal(a.frames, 30);

	f->s.cu_key = 1; /* a keyframe-stream catch-up of version 2 */
	f->s.cu_next = 5;
	nack_plan(f->P, &f->s, &key, T0, &a);
	assert_int_equal(a.frames, 5);
	nack_plan(f->P, &f->s, &c, T0, &a);
	assert_int_equal(a.frames, n);
}

/* While a version is being encoded, a NACK of it is answered from the
 * frames streamed so far; once the stream ended and the version is not
 * held, nothing answers it. */
static void test_a_nack_while_its_version_streams_gets_the_frames_sent(void **state)
{
	fixture *f = *state;
	nack_reply a;
	publisher *P = f->P;
	P->streaming = 1;
	P->streamed_ver = 3;
	for (uint32_t i = 0; i < 5; i++)
		assert_int_equal(patch_push(&P->streamed, f->k->buf + f->k->off[i],
					    bytes_of(f->k, i, 1)), 0);
	rp_ctl c = nack_of(3, 0, 1, (rp_range[]){{0, 10}});
	nack_plan(P, &f->s, &c, T0, &a);
	assert_ptr_equal(a.p, &P->streamed);
	assert_int_equal(a.frames, 5);
	c.version = 4;
	nack_plan(P, &f->s, &c, T0, &a);
	assert_null(a.p);
	c.version = 3;
	P->streaming = 0;
	nack_plan(P, &f->s, &c, T0, &a);
	assert_null(a.p);
}

/* While a keyframe stream is encoded for catch-ups (history_key_begin),
 * a NACK with the KEY flag is answered from its frames so far, and to a
 * subscriber whose catch-up it is, only from those already sent; the
 * stream it replaced answers nothing. Once encoded, the finished stream
 * answers, its frames carrying the count. */
static void test_a_keyframe_nack_while_its_stream_is_encoded_gets_the_frames_so_far(void **state)
{
	fixture *f = *state;
	nack_reply a;
	publisher *P = f->P;
	char err[ERRLEN];
	history_key_begin(&P->hist, 3); /* the stream of 2 (f->k) goes */
	for (uint32_t i = 0; i < 8; i++) /* (frames that stand in for it) */
		assert_int_equal(patch_push(&P->hist.key_part, f->p->buf + f->p->off[i],
					    bytes_of(f->p, i, 1)), 0);
	rp_ctl key = nack_of(3, RP_NACK_KEY, 1, (rp_range[]){{0, 20}});
	nack_plan(P, &f->s2, &key, T0, &a);
	assert_ptr_equal(a.p, &P->hist.key_part);
	assert_int_equal(a.frames, 8);
	f->s.cu_active = 1;
	f->s.cu_key = 1;
	f->s.cu_target = f->s.cu_end = 3;
	f->s.cu_next = 5;
	nack_plan(P, &f->s, &key, T0, &a);
	assert_int_equal(a.frames, 5);
	rp_ctl old = nack_of(2, RP_NACK_KEY, 1, (rp_range[]){{0, 20}});
	nack_plan(P, &f->s2, &old, T0, &a);
	assert_null(a.p);

	assert_int_equal(history_key_make(&P->hist, &f->m3, 3, &f->po, err, sizeof(err)), 0);
	assert_int_equal(P->hist.key_streaming, 0);
	assert_null(P->hist.key_part.buf);
	nack_plan(P, &f->s2, &key, T0, &a);
	assert_ptr_equal(a.p, &P->hist.key);
	assert_int_equal(a.frames, 20);
	bfp_frame_header hd;
	assert_int_equal(bfp_frame_parse(a.p->buf, a.p->off[1], &hd), BFP_OK);
	assert_int_equal(hd.frame_count, a.p->n);
	assert_int_equal(hd.target_version, 3);
}

/* A NACK of a version not held, or of another model, is not answered
 * and spends nothing of the budget; model 0 means this one. */
static void test_a_nack_not_held_or_of_another_model_is_not_answered(void **state)
{
	fixture *f = *state;
	nack_reply a;
	nack_budget_init(&f->s.nack, 100, T0);
	rp_ctl c = nack_all_128(9, 0, f->p->n);
	nack_plan(f->P, &f->s, &c, T0, &a);
	assert_null(a.p);
	assert_int_equal(a.frames, 0);
	assert_int_equal(a.limited, 0);
	c.version = 2;
	c.model_id = f->P->model_id ^ 1;
	nack_plan(f->P, &f->s, &c, T0, &a);
	assert_null(a.p);
	c.model_id = 0;
	nack_plan(f->P, &f->s, &c, T0, &a);
	assert_int_equal(a.frames, RP_NACK_ANSWER_MAX);
	c.model_id = f->P->model_id;
	nack_plan(f->P, &f->s, &c, T0 + 1, &a);
	assert_int_equal(a.frames, 100);
}

/* A subscriber whose JOIN says its link is slower than --rate gets about
 * 100 ms of that link a NACK (2 Mbit/s: 19 frames of 1200 bytes on the
 * wire), at least one frame; one whose link is faster, the usual cap. */
static void test_a_slow_link_gets_about_100_ms_of_it_per_nack(void **state)
{
	fixture *f = *state;
	nack_reply a;
	publisher *P = f->P;
	rp_ctl c = nack_of(2, 0, 1, (rp_range[]){{0, (uint32_t)f->p->n}});
	pub_sub_link(P, &f->s, 2000, T0); /* --rate 0 (unlimited) */
	assert_int_equal(nack_most(P, &f->s), 19);
	nack_plan(P, &f->s, &c, T0, &a);
	assert_int_equal(a.frames, 19);
	rp_bucket_init(&P->bucket, 1000000000 / 8, pub_burst(1000000000, P->frame_size), 0);
	assert_int_equal(nack_most(P, &f->s), 19);
	pub_sub_link(P, &f->s, 8, T0);
	assert_int_equal(nack_most(P, &f->s), 1);
	pub_sub_link(P, &f->s, 2000000, T0); /* 2 Gbit/s, faster than --rate 1g */
	assert_int_equal(nack_most(P, &f->s), RP_NACK_ANSWER_MAX);
	assert_int_equal(nack_most(P, &f->s2), RP_NACK_ANSWER_MAX); /* no rate in its JOIN */
}

/* nack_answer() sends exactly the frames decided, to the subscriber's
 * data port, and counts the NACK; one with nothing to send is neither
 * sent nor counted. Loopback only. */
static void test_an_answer_leaves_as_decided_and_is_counted(void **state)
{
	fixture *f = *state;
	publisher *P = f->P;
	struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(lo);
	int rx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	P->sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(rx >= 0 && P->sock >= 0);
	assert_int_equal(bind(P->sock, (struct sockaddr *)&lo, sizeof(lo)), 0);
	assert_int_equal(bind(rx, (struct sockaddr *)&lo, sizeof(lo)), 0);
	assert_int_equal(getsockname(rx, (struct sockaddr *)&f->s.data, &len), 0);
	rp_ctl c = nack_of(2, 0, 2, (rp_range[]){{3, 4}, {20, 1}});
	assert_int_equal(nack_answer(P, &f->s, &c, T0), 1);
	const uint32_t want[5] = {3, 4, 5, 6, 20};
	for (unsigned i = 0; i < 5; i++) {
		uint8_t buf[BFP_FRAME_SIZE_MAX + RP_AUTH_LEN];
		struct pollfd pfd = {.fd = rx, .events = POLLIN};
		assert_int_equal(poll(&pfd, 1, 30000), 1); /* a bound, not a timing */
		ssize_t got = recv(rx, buf, sizeof(buf), 0);
		assert_int_equal(got, bytes_of(f->p, want[i], 1));
		assert_memory_equal(buf, f->p->buf + f->p->off[want[i]], (size_t)got);
	}
	assert_int_equal(P->nacks, 1);
	assert_int_equal(P->resent, 5);
	assert_int_equal(P->sent_frames, 5);
	c.version = 9;
	assert_int_equal(nack_answer(P, &f->s, &c, T0), 0);
	assert_int_equal(P->nacks, 1);
	assert_int_equal(P->sent_frames, 5);
	close(rx);
}

/* A subscriber behind the current version waits 3 s after it reported
 * its version and after the version went out (patches in flight may
 * bring it), except one that JOINed after the version went out at a
 * version before its base, which nothing in flight can bring: it starts
 * at once. Keyframe askers never wait; relays and a recent catch-up do. */
static void test_a_late_joiner_far_behind_starts_at_once(void **state)
{
	(void)state;
	const double pub = T0, t = T0 + 10;
	pub_sub s;
	memset(&s, 0, sizeof(s));
	s.last_catchup = 0;
	/* joined after version 5 went out, at version 2: at once */
	s.version = 2;
	s.joined = s.version_since = t - 0.1;
	assert_false(pub_catchup_waits(&s, 5, pub, t));
	/* at version 4, 5's base: the patch in flight (NACKs) may bring it */
	s.version = 4;
	assert_true(pub_catchup_waits(&s, 5, pub, t));
	assert_false(pub_catchup_waits(&s, 5, pub, t + 3.1));
	/* joined before 5 went out, at version 2: it may be taking 3 and 4 */
	s.version = 2;
	s.joined = pub - 1;
	assert_true(pub_catchup_waits(&s, 5, pub, t));
	assert_true(pub_catchup_waits(&s, 5, t - 1, t + 2.5));
	assert_false(pub_catchup_waits(&s, 5, pub, t + 3.1));
	/* up to date, or ahead: nothing to catch up */
	s.version = 5;
	assert_true(pub_catchup_waits(&s, 5, pub, t + 100));
	/* no usable version: keyframes at once; a relay never; a catch-up
	 * in the last 3 s first ends */
	s.version = RP_VERSION_NONE;
	assert_false(pub_catchup_waits(&s, 5, pub, t));
	s.last_catchup = t - 1;
	assert_true(pub_catchup_waits(&s, 5, pub, t));
	s.last_catchup = 0;
	s.version = RP_VERSION_RELAY;
	assert_true(pub_catchup_waits(&s, 5, pub, t + 100));
}

int main(void)
{
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
	const struct CMUnitTest tests[] = {
		T(test_a_nack_is_answered_with_the_frames_it_names),
		T(test_ranges_are_cut_to_the_frames_held),
		T(test_one_nack_gets_at_most_4096_frames_however_its_ranges_overlap),
		T(test_a_subscriber_over_its_budget_gets_only_what_refilled),
		T(test_each_subscriber_has_a_budget_of_its_own),
		T(test_a_keyframe_nack_is_answered_from_the_keyframe_stream),
		T(test_frames_of_a_catch_up_still_to_come_are_not_resent),
		T(test_a_nack_while_its_version_streams_gets_the_frames_sent),
		T(test_a_keyframe_nack_while_its_stream_is_encoded_gets_the_frames_so_far),
		T(test_a_nack_not_held_or_of_another_model_is_not_answered),
		T(test_a_slow_link_gets_about_100_ms_of_it_per_nack),
		T(test_an_answer_leaves_as_decided_and_is_counted),
		cmocka_unit_test(test_a_late_joiner_far_behind_starts_at_once),
	};
#undef T
	return cmocka_run_group_tests_name("publish-nack", tests, NULL, NULL);
}
