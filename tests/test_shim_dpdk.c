/*
 * test_shim_dpdk.c: the shim's DPDK backends under a real EAL (--no-huge
 * --no-pci, IOVA as VA): dma_skeleton copies land byte-exact, a patch
 * applied through the dmadev commit path gives exactly the target made
 * independently, a bad frame writes nothing, and a net_pcap port hands
 * over every frame payload byte-identical while counting what it drops.
 */
#include "bfp_test.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "patch.h"
#include "shim_dpdk.h"
#include "wbuf.h"

#include <rte_dev.h>
#include <rte_ethdev.h>
#include <rte_interrupts.h>
#include <rte_mbuf.h>

#include "eal_rundir.h"

#define MODEL_ID 0x5EED5EED12345678ull
#define DATA_PORT 7400
#define OUR_IP 0x0A000002u   /* 10.0.0.2 */
#define PEER_IP 0x0A000001u

static bfp_decoder dec;

static int eal_up(void **state)
{
	(void)state;
	char args[256], err[256];
	snprintf(args, sizeof(args),
		 "--no-huge -m 512 --no-pci --file-prefix bfpshimdpdk%d -l 0 --iova-mode=va "
		 "--vdev dma_skeleton0 --log-level=lib.eal:error", (int)getpid());
	if (shim_eal_init(args, err, sizeof(err))) {
		fprintf(stderr, "%s\n", err);
		return -1;
	}
	t_eal_rundir_at_exit();
	return bfp_decoder_init(&dec, 0) == BFP_OK ? 0 : -1;
}

static int eal_down(void **state)
{
	(void)state;
	shim_eal_fini();
	return 0;
}

static shim_dma *dma_open(uint32_t copy_max, size_t arena)
{
	shim_dma_conf c = {.name = "dma_skeleton0", .copy_max = copy_max, .arena_bytes = arena};
	shim_dma *d = NULL;
	char err[256] = "";
	if (shim_dma_open(&c, &d, err, sizeof(err)))
		fail_msg("%s", err);
	return d;
}

/* A base model and an RL-like target (2.5% changed, mostly +-1 step), both
 * made with integer arithmetic on the bit patterns (bfp_test.h). */
static void make_pair(uint16_t *base, uint16_t *tgt, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		base[i] = t_weight(&seed);
	t_mutate(base, tgt, n, 25000, &seed);
}

static void encode(const uint16_t *base, const uint16_t *tgt, size_t n, uint32_t frame_size,
		   uint32_t flags, patch *p)
{
	/* keyframes name no base version */
	patch_opts po = {.frame_size = frame_size,
			 .base_version = (flags & BFP_ENC_F_KEYFRAME) ? 0 : 7, .target_version = 8,
			 .enc_flags = flags, .threads = 1};
	char err[256] = "";
	memset(p, 0, sizeof(*p));
	if (patch_encode_arrays(base, tgt, n, MODEL_ID, &po, p, err, sizeof(err)))
		fail_msg("%s", err);
	assert_true(p->n > 2);
}

/* Frame pointer and length arrays over a patch image, as the stager keeps them. */
static void frame_list(const patch *p, const uint8_t ***fr, uint32_t **ln)
{
	*fr = malloc(p->n * sizeof(**fr));
	*ln = malloc(p->n * sizeof(**ln));
	assert_non_null(*fr);
	assert_non_null(*ln);
	for (size_t i = 0; i < p->n; i++) {
		(*fr)[i] = p->buf + p->off[i];
		(*ln)[i] = (uint32_t)(p->off[i + 1] - p->off[i]);
	}
}

static const bfp_apply_opts APPLY = {.model_id = MODEL_ID, .base_version = 7};

/* Many copies of random lengths and offsets (odd ones included, some split
 * at copy_max) land exactly where a plain memcpy puts the same bytes. */
static void test_dma_copies_of_random_ranges_equal_an_independent_memcpy(void **state)
{
	(void)state;
	const size_t N = 8u << 20;
	uint8_t *src = malloc(N), *dst = calloc(1, N), *ref = calloc(1, N);
	assert_non_null(src);
	assert_non_null(dst);
	assert_non_null(ref);
	uint64_t s = 42;
	for (size_t i = 0; i < N; i += 8) {
		uint64_t r = t_rand(&s);
		memcpy(src + i, &r, 8);
	}
	shim_dma *d = dma_open(64u << 10, 0);
	char err[256] = "";
	for (int k = 0; k < 3000; k++) {
		size_t len = 1 + (size_t)(t_rand(&s) % (k % 10 == 0 ? 300000 : 5000));
		/* src[off] to dst[off]: overlapping copies then write the same
		 * bytes, so the result does not depend on completion order */
		size_t off = (size_t)(t_rand(&s) % (N - len));
		if (shim_dma_copy(d, dst + off, src + off, len, err, sizeof(err)))
			fail_msg("%s", err);
		memcpy(ref + off, src + off, len);
	}
	if (shim_dma_flush(d, err, sizeof(err)))
		fail_msg("%s", err);
	assert_memory_equal(dst, ref, N);
	shim_dma_stats st;
	shim_dma_stats_get(d, &st);
	assert_true(st.copies > 3000); /* the long ones were split */
	assert_int_equal(st.errors, 0);
	shim_dma_close(d);
	free(src);
	free(dst);
	free(ref);
}

/* Non-overlapping copies between two distinct buffers at unrelated offsets. */
static void test_dma_copies_to_unrelated_offsets_are_exact(void **state)
{
	(void)state;
	const size_t N = 4u << 20, SLOT = 4096;
	uint8_t *src = malloc(N), *dst = calloc(1, N), *ref = calloc(1, N);
	uint32_t *perm = malloc((N / SLOT) * sizeof(uint32_t));
	assert_non_null(src);
	assert_non_null(perm);
	uint64_t s = 7;
	for (size_t i = 0; i < N; i++)
		src[i] = (uint8_t)t_rand(&s);
	const size_t n = N / SLOT;
	for (size_t i = 0; i < n; i++)
		perm[i] = (uint32_t)i;
	for (size_t i = n - 1; i > 0; i--) {
		size_t j = (size_t)(t_rand(&s) % (i + 1));
		uint32_t t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
	shim_dma *d = dma_open(0, 0);
	char err[256] = "";
	for (size_t i = 0; i < n; i++) {
		size_t len = 1 + (size_t)(t_rand(&s) % SLOT);
		if (shim_dma_copy(d, dst + perm[i] * SLOT, src + i * SLOT, len, err, sizeof(err)))
			fail_msg("%s", err);
		memcpy(ref + perm[i] * SLOT, src + i * SLOT, len);
	}
	if (shim_dma_flush(d, err, sizeof(err)))
		fail_msg("%s", err);
	assert_memory_equal(dst, ref, N);
	shim_dma_close(d);
	free(src);
	free(dst);
	free(ref);
	free(perm);
}

/* A sparse patch applied through the DMA path gives, bit for bit, the
 * target the test made itself, and every frame is counted as verified. */
static void test_dma_apply_of_a_patch_equals_the_independent_target(void **state)
{
	(void)state;
	const size_t n = 3u << 20;
	uint16_t *base = malloc(n * 2), *tgt = malloc(n * 2), *w = malloc(n * 2);
	assert_non_null(w);
	make_pair(base, tgt, n, 1);
	assert_memory_not_equal(base, tgt, n * 2);
	patch p;
	encode(base, tgt, n, 1200, 0, &p);
	const uint8_t **fr;
	uint32_t *ln;
	frame_list(&p, &fr, &ln);

	/* a small arena (drained several times), then a large one with short
	 * copies (many merged runs enqueued while decoding goes on) */
	static const struct {
		uint32_t copy_max;
		size_t arena;
	} cf[] = {{0, 1u << 20}, {200u << 10, 0}, {0, 0}};
	for (size_t k = 0; k < sizeof(cf) / sizeof(cf[0]); k++) {
		memcpy(w, base, n * 2);
		shim_dma *d = dma_open(cf[k].copy_max, cf[k].arena);
		shim_dma_result r;
		char err[256] = "";
		if (shim_dma_apply(d, &dec, &APPLY, fr, ln, (uint32_t)p.n, w, n, NULL, &r, err,
				   sizeof(err)))
			fail_msg("config %zu: %s", k, err);
		assert_words_equal(w, tgt, n);
		assert_int_equal(r.applied, p.n);
		assert_int_equal(r.by_cpu, 0);
		assert_int_equal(r.failed_frame, UINT32_MAX);
		assert_true(r.verified_params == n);
		assert_true(r.dma_bytes == n * 2);
		shim_dma_close(d);
	}
	patch_free(&p);
	free(fr);
	free(ln);
	free(base);
	free(tgt);
	free(w);
}

/* A journal that checks shim_dma_apply()'s promises: a frame is noted
 * while its range still holds the base values (nothing written yet), is
 * retired oldest first, only once its range holds the target, and every
 * noted frame is retired by the end. full_every: refuse every such note
 * the first time (a full journal), which the apply must ride out. */
typedef struct mock_journal {
	const uint16_t *base, *tgt;
	const uint16_t *w;
	uint64_t begin[4096];
	uint32_t n[4096];
	uint32_t head, tail, notes, refusals, full_every;
	int bad;
} mock_journal;

static int mock_note(void *arg, uint64_t begin, const uint32_t *pos, uint32_t n)
{
	mock_journal *m = arg;
	if (m->full_every && (m->notes + m->refusals) % m->full_every == m->full_every - 1) {
		m->refusals++;
		return -1;
	}
	for (uint32_t k = 0; k < n; k++)
		if (m->w[begin + pos[k]] != m->base[begin + pos[k]] ||
		    m->base[begin + pos[k]] == m->tgt[begin + pos[k]])
			m->bad |= 1; /* written before it was noted, or not a change */
	if (m->tail - m->head == 4096)
		m->bad |= 2;
	m->begin[m->tail % 4096] = begin;
	m->n[m->tail % 4096] = n;
	m->tail++;
	m->notes++;
	return 0;
}

static void mock_retire(void *arg)
{
	mock_journal *m = arg;
	if (m->head == m->tail) {
		m->bad |= 4;
		return;
	}
	m->head++;
}

static void test_dma_journal_notes_before_writes_and_retires_in_order(void **state)
{
	(void)state;
	const size_t n = 3u << 20;
	uint16_t *base = malloc(n * 2), *tgt = malloc(n * 2), *w = malloc(n * 2);
	assert_non_null(w);
	make_pair(base, tgt, n, 5);
	patch p;
	encode(base, tgt, n, 1200, 0, &p);
	const uint8_t **fr;
	uint32_t *ln;
	frame_list(&p, &fr, &ln);
	/* a small arena (drained often), frames larger than the arena (the
	 * CPU path), and a journal that is full now and then */
	static const struct {
		size_t arena;
		uint32_t full_every;
	} cf[] = {{1u << 20, 0}, {1u << 20, 7}, {64u << 10, 0}, {0, 3}};
	for (size_t k = 0; k < sizeof(cf) / sizeof(cf[0]); k++) {
		static mock_journal m;
		memset(&m, 0, sizeof(m));
		m.base = base;
		m.tgt = tgt;
		m.w = w;
		m.full_every = cf[k].full_every;
		const shim_dma_journal jn = {.note = mock_note, .retire = mock_retire, .arg = &m};
		memcpy(w, base, n * 2);
		shim_dma *d = dma_open(0, cf[k].arena);
		shim_dma_result r;
		char err[256] = "";
		if (shim_dma_apply(d, &dec, &APPLY, fr, ln, (uint32_t)p.n, w, n, &jn, &r, err,
				   sizeof(err)))
			fail_msg("config %zu: %s", k, err);
		assert_words_equal(w, tgt, n);
		assert_int_equal(m.bad, 0);
		assert_int_equal(m.notes, p.n); /* every frame is a delta frame here */
		assert_int_equal(m.head, m.tail);
		if (cf[k].full_every)
			assert_true(m.refusals > 0);
		if (cf[k].arena == (64u << 10))
			assert_true(r.by_cpu > 0);
		shim_dma_close(d);
	}
	patch_free(&p);
	free(fr);
	free(ln);
	free(base);
	free(tgt);
	free(w);
}

/* The DMA log (wbuf_dlog): records outlive the process in PATH.dmalog, the
 * ring wraps, and rollback restores exactly the values noted by records
 * not yet retired, then forgets them; a log for another buffer size is
 * emptied on open. */
static void test_dma_log_rolls_back_what_was_not_retired(void **state)
{
	(void)state;
	const uint64_t n = 1u << 22;
	uint16_t *w = malloc(n * 2), *orig = malloc(n * 2);
	uint32_t *pos = malloc(BFP_CHANGES_MAX * 4);
	assert_non_null(pos);
	uint64_t s = 11;
	for (uint64_t i = 0; i < n; i++)
		w[i] = (uint16_t)t_rand(&s);
	char path[64];
	snprintf(path, sizeof(path), "/tmp/bfp_dlog_test.%d", (int)getpid());
	char err[256] = "";
	wbuf_dlog l;
	assert_int_equal(wbuf_dlog_open(&l, w, n, path, err, sizeof(err)), 0);
	/* 60 frames of up to 35760 changes (about 2.5 ring lengths), each
	 * written after it is noted; all but the last 5 retired */
	uint32_t *all_pos[60];
	for (int f = 0; f < 60; f++) {
		uint32_t cnt = BFP_CHANGES_MAX - (uint32_t)(t_rand(&s) % 1000);
		/* the last five, in flight together, do not overlap (frames in
		 * flight never do); the others fall anywhere */
		uint64_t b = f >= 55 ? (uint64_t)(f - 55) * 200000 : t_rand(&s) % (n - 100000);
		uint32_t at = 0;
		for (uint32_t k = 0; k < cnt; k++) {
			at += 1 + (uint32_t)(t_rand(&s) % 2);
			pos[k] = at;
		}
		all_pos[f] = malloc(cnt * 4);
		memcpy(all_pos[f], pos, cnt * 4);
		if (f == 55)
			memcpy(orig, w, n * 2); /* the values before the last five */
		assert_int_equal(wbuf_dlog_note(&l, b, pos, cnt), 0);
		for (uint32_t k = 0; k < cnt; k++)
			w[b + pos[k]] ^= 0x5555;
		if (f >= 3 && f < 58)
			wbuf_dlog_retire(&l); /* keeps 3 in flight, then 5 left */
	}
	wbuf_dlog_close(&l);
	/* "restart": reopen and roll back */
	assert_int_equal(wbuf_dlog_open(&l, w, n, path, err, sizeof(err)), 0);
	assert_int_equal(wbuf_dlog_rollback(&l, 0), 5);
	assert_memory_equal(w, orig, n * 2); /* as before the last 5 frames */
	assert_int_equal(wbuf_dlog_rollback(&l, 0), 0); /* forgotten */
	wbuf_dlog_close(&l);
	/* the same file for a buffer of another size: nothing to restore */
	assert_int_equal(wbuf_dlog_open(&l, w, n / 2, path, err, sizeof(err)), 0);
	assert_int_equal(wbuf_dlog_note(&l, 0, pos, 10), 0);
	wbuf_dlog_close(&l);
	assert_int_equal(wbuf_dlog_open(&l, w, n, path, err, sizeof(err)), 0);
	assert_int_equal(wbuf_dlog_rollback(&l, 0), 0);
	wbuf_dlog_close(&l);
	char jp[80];
	snprintf(jp, sizeof(jp), "%s.dmalog", path);
	unlink(jp);
	for (int f = 0; f < 60; f++)
		free(all_pos[f]);
	free(w);
	free(orig);
	free(pos);
}

/* Keyframes (thousands of small adjacent ranges, merged into few copies)
 * and frames larger than the arena (applied in place by the CPU) end at
 * the target too. */
static void test_dma_apply_handles_keyframes_and_ranges_larger_than_the_arena(void **state)
{
	(void)state;
	const size_t n = 1u << 20;
	uint16_t *base = malloc(n * 2), *tgt = malloc(n * 2), *w = malloc(n * 2);
	assert_non_null(w);
	make_pair(base, tgt, n, 2);
	patch p;
	const uint8_t **fr;
	uint32_t *ln;
	shim_dma_result r;
	char err[256] = "";

	encode(base, tgt, n, 9000, BFP_ENC_F_KEYFRAME, &p);
	frame_list(&p, &fr, &ln);
	memcpy(w, base, n * 2);
	shim_dma *d = dma_open(0, 0);
	if (shim_dma_apply(d, &dec, &APPLY, fr, ln, (uint32_t)p.n, w, n, NULL, &r, err, sizeof(err)))
		fail_msg("%s", err);
	assert_words_equal(w, tgt, n);
	assert_int_equal(r.applied, p.n);
	shim_dma_stats st;
	shim_dma_stats_get(d, &st);
	assert_true(st.copies < p.n / 10); /* adjacent ranges were merged */
	shim_dma_close(d);
	patch_free(&p);
	free(fr);
	free(ln);

	/* an arena between the smallest and the largest frame range: some
	 * frames go by DMA, the others by the CPU */
	encode(base, tgt, n, 1200, 0, &p);
	frame_list(&p, &fr, &ln);
	uint64_t lo = UINT64_MAX, hi = 0;
	for (size_t i = 0; i < p.n; i++) {
		bfp_frame_header h;
		assert_int_equal(bfp_frame_parse(fr[i], ln[i], &h), BFP_OK);
		lo = h.range_len < lo ? h.range_len : lo;
		hi = h.range_len > hi ? h.range_len : hi;
	}
	assert_true(lo < hi);
	memcpy(w, base, n * 2);
	d = dma_open(0, (size_t)(lo + hi)); /* bytes: the mean range length */
	if (shim_dma_apply(d, &dec, &APPLY, fr, ln, (uint32_t)p.n, w, n, NULL, &r, err, sizeof(err)))
		fail_msg("%s", err);
	assert_words_equal(w, tgt, n);
	assert_int_equal(r.applied, p.n);
	assert_true(r.by_cpu > 0 && r.by_cpu < p.n);
	shim_dma_close(d);
	patch_free(&p);
	free(fr);
	free(ln);
	free(base);
	free(tgt);
	free(w);
}

static int range_of(const uint8_t *f, uint32_t len, uint64_t *b, uint64_t *e)
{
	bfp_frame_header h;
	if (bfp_frame_parse(f, len, &h) != BFP_OK)
		return -1;
	*b = h.range_begin;
	*e = h.range_begin + h.range_len;
	return 0;
}

/* A frame whose payload was altered (and CRC resealed, so only decoding
 * can tell) is rejected by index; its range and every later one stay at
 * base, earlier ones are at target. A frame with a bad CRC is rejected the
 * same way. */
static void test_dma_apply_rejects_a_bad_frame_and_writes_nothing_to_its_range(void **state)
{
	(void)state;
	const size_t n = 2u << 20;
	uint16_t *base = malloc(n * 2), *tgt = malloc(n * 2), *w = malloc(n * 2);
	assert_non_null(w);
	make_pair(base, tgt, n, 3);
	patch p;
	encode(base, tgt, n, 1200, 0, &p);
	const uint8_t **fr;
	uint32_t *ln;
	frame_list(&p, &fr, &ln);
	shim_dma *d = dma_open(0, 256u << 10);

	for (int mode = 0; mode < 2; mode++) {
		const uint32_t k = (uint32_t)(p.n / 2 + (size_t)mode * 3);
		uint8_t bad[BFP_FRAME_SIZE_MAX];
		memcpy(bad, fr[k], ln[k]);
		bfp_frame_header h;
		assert_int_equal(bfp_frame_parse(bad, ln[k], &h), BFP_OK);
		/* change bits in the middle of the payload */
		bad[BFP_HEADER_SIZE + h.payload_len / 2] ^= 0x5A;
		if (mode == 0)
			assert_int_equal(bfp_frame_set_index(bad, ln[k], h.frame_index,
							     h.frame_count), BFP_OK);
		const uint8_t *saved = fr[k];
		fr[k] = bad;
		memcpy(w, base, n * 2);
		shim_dma_result r;
		char err[256] = "", want[32];
		assert_int_equal(shim_dma_apply(d, &dec, &APPLY, fr, ln, (uint32_t)p.n, w, n, NULL, &r,
						err, sizeof(err)), -1);
		fr[k] = saved;
		assert_int_equal(r.failed_frame, k);
		assert_true(r.status < 0);
		if (mode == 1)
			assert_int_equal(r.status, BFP_E_CHECKSUM);
		snprintf(want, sizeof(want), "frame %u:", k);
		assert_non_null(strstr(err, want));
		assert_int_equal(r.applied, k);
		uint64_t b = 0, e = 0;
		for (uint32_t i = 0; i < p.n; i++) {
			assert_int_equal(range_of(fr[i], ln[i], &b, &e), 0);
			const uint16_t *want_w = i < k ? tgt : base;
			if (memcmp(w + b, want_w + b, (size_t)(e - b) * 2) != 0)
				fail_msg("mode %d: frame %u (bad frame %u) is not at %s", mode, i, k,
					 i < k ? "target" : "base");
		}
	}
	shim_dma_close(d);
	patch_free(&p);
	free(fr);
	free(ln);
	free(base);
	free(tgt);
	free(w);
}

/* A page-aligned mapping (like the weight buffer's) registers with the
 * EAL, takes DMA copies, and unregisters. */
static void test_dma_map_registers_a_mapping_and_copies_into_it(void **state)
{
	(void)state;
	const size_t len = 1u << 20;
	uint8_t *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(m != MAP_FAILED);
	uint8_t *src = malloc(len);
	assert_non_null(src);
	for (size_t i = 0; i < len; i++)
		src[i] = (uint8_t)(i * 131u + 7u);
	shim_dma *d = dma_open(0, 0);
	char err[256] = "";
	if (shim_dma_map(d, m, len, 4096, err, sizeof(err)))
		fail_msg("%s", err);
	if (shim_dma_copy(d, m, src, len, err, sizeof(err)) || shim_dma_flush(d, err, sizeof(err)))
		fail_msg("%s", err);
	assert_memory_equal(m, src, len);
	assert_int_equal(shim_dma_unmap(d, m, len, err, sizeof(err)), 0);
	shim_dma_close(d);
	munmap(m, len);
	free(src);
}

/* ---- net_pcap frame source ---- */

typedef struct pcap_out {
	FILE *f;
} pcap_out;

static void le32w(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void pcap_open_w(pcap_out *o, const char *path)
{
	uint8_t h[24] = {0};
	le32w(h, 0xA1B2C3D4u);
	h[4] = 2;          /* version 2.4 */
	h[6] = 4;
	le32w(h + 16, 65535); /* snaplen */
	le32w(h + 20, 1);     /* Ethernet */
	o->f = fopen(path, "wb");
	assert_non_null(o->f);
	assert_int_equal(fwrite(h, 1, 24, o->f), 24);
}

static void pcap_put(pcap_out *o, const uint8_t *pkt, size_t len)
{
	uint8_t r[16] = {0};
	le32w(r + 8, (uint32_t)len);
	le32w(r + 12, (uint32_t)len);
	assert_int_equal(fwrite(r, 1, 16, o->f), 16);
	assert_int_equal(fwrite(pkt, 1, len, o->f), len);
}

static const uint8_t OUR_MAC[6] = {2, 0, 0, 0, 0, 2}, PEER_MAC[6] = {2, 0, 0, 0, 0, 1};

/* One Ethernet/IPv4/UDP packet carrying pl. */
static size_t udp_pkt(uint8_t *pkt, uint32_t dst_ip, uint16_t dport, const uint8_t *pl, size_t n)
{
	rp_build_udp(pkt, OUR_MAC, PEER_MAC, PEER_IP, dst_ip, 5555, dport, (uint16_t)n,
		     rp_sum(pl, n, 0), 1);
	memcpy(pkt + RP_HDRS, pl, n);
	return RP_HDRS + n;
}

typedef struct rx_log {
	uint8_t *buf;
	size_t len, cap;
	size_t n;
	size_t off[4096];
	size_t plen[4096];
} rx_log;

static void on_frame(void *ctx, const uint8_t *p, size_t len)
{
	rx_log *l = ctx;
	if (l->n == 4096)
		return;
	if (l->len + len > l->cap) {
		l->cap = (l->len + len) * 2;
		l->buf = realloc(l->buf, l->cap);
	}
	memcpy(l->buf + l->len, p, len);
	l->off[l->n] = l->len;
	l->plen[l->n++] = len;
	l->len += len;
}

static void poll_all(shim_port *pt, rx_log *l)
{
	int idle = 0;
	while (idle < 200) { /* the file is read to its end, then bursts are empty */
		shim_port_stats st;
		shim_port_stats_get(pt, &st);
		uint64_t before = st.rx_packets;
		shim_port_poll(pt, on_frame, l);
		shim_port_stats_get(pt, &st);
		if (st.rx_packets == before) {
			idle++;
			usleep(1000);
		} else {
			idle = 0;
		}
	}
}

/* Frames of 1200 and 9000 bytes, interleaved with packets that are not
 * frames to us, read from a pcap through net_pcap: every frame arrives,
 * in order, byte-identical; each other packet is counted by its reason. */
static void test_pcap_port_delivers_every_frame_byte_identical_and_counts_the_rest(void **state)
{
	(void)state;
	const size_t n = 1u << 18;
	uint16_t *base = malloc(n * 2), *tgt = malloc(n * 2);
	assert_non_null(tgt);
	make_pair(base, tgt, n, 4);
	patch small, big;
	encode(base, tgt, n, 1200, 0, &small);
	encode(base, tgt, n, 9000, BFP_ENC_F_KEYFRAME, &big);

	char path[64];
	snprintf(path, sizeof(path), "/tmp/bfp_shim_dpdk_%d.pcap", (int)getpid());
	pcap_out o;
	pcap_open_w(&o, path);
	static uint8_t pkt[SHIM_PORT_PKT_MAX + 64], tmp[BFP_FRAME_SIZE_MAX];
	size_t want = 0;
	uint64_t junk[RP_CLASS_COUNT] = {0};
	const size_t total = small.n + big.n;
	/* expected frames in send order: all of small, then all of big,
	 * with junk after every 5th frame */
	const uint8_t **exp = malloc(total * sizeof(*exp));
	size_t *exp_len = malloc(total * sizeof(*exp_len));
	assert_non_null(exp_len);
	for (size_t i = 0; i < total; i++) {
		const patch *p = i < small.n ? &small : &big;
		size_t j = i < small.n ? i : i - small.n;
		exp[i] = p->buf + p->off[j];
		exp_len[i] = p->off[j + 1] - p->off[j];
		pcap_put(&o, pkt, udp_pkt(pkt, OUR_IP, DATA_PORT, exp[i], exp_len[i]));
		want++;
		if (i % 5)
			continue;
		size_t len;
		switch ((i / 5) % 6) {
		case 0: /* another UDP port */
			pcap_put(&o, pkt, udp_pkt(pkt, OUR_IP, DATA_PORT + 1, exp[i], exp_len[i]));
			junk[RP_DROP_PORT]++;
			break;
		case 1: /* another host */
			pcap_put(&o, pkt, udp_pkt(pkt, OUR_IP + 1, DATA_PORT, exp[i], exp_len[i]));
			junk[RP_DROP_NOT_OURS]++;
			break;
		case 2: /* a bad UDP checksum */
			len = udp_pkt(pkt, OUR_IP, DATA_PORT, exp[i], exp_len[i]);
			pkt[40] ^= 0x01;
			pcap_put(&o, pkt, len);
			junk[RP_DROP_UDP]++;
			break;
		case 3: /* a frame with a bad CRC (the port checks CRCs here) */
			memcpy(tmp, exp[i], exp_len[i]);
			tmp[exp_len[i] - 1] ^= 0x80;
			pcap_put(&o, pkt, udp_pkt(pkt, OUR_IP, DATA_PORT, tmp, exp_len[i]));
			junk[RP_DROP_FRAME]++;
			break;
		case 4: /* IPv6 */
			len = udp_pkt(pkt, OUR_IP, DATA_PORT, exp[i], exp_len[i]);
			pkt[12] = 0x86;
			pkt[13] = 0xDD;
			pcap_put(&o, pkt, len);
			junk[RP_DROP_ETHERTYPE]++;
			break;
		default: /* a runt */
			pcap_put(&o, pkt, 10);
			junk[RP_DROP_SHORT]++;
			break;
		}
	}
	fclose(o.f);

	char dev[128], err[256] = "";
	snprintf(dev, sizeof(dev), "net_pcap7,rx_pcap=%s", path);
	shim_port_conf c = {.devargs = dev, .ip = OUR_IP, .udp_port = DATA_PORT, .check_crc = 1,
			    .n_mbufs = 1023};
	shim_port *pt = NULL;
	if (shim_port_open(&c, &pt, err, sizeof(err)))
		fail_msg("%s", err);
	rx_log *l = calloc(1, sizeof(*l));
	assert_non_null(l);
	poll_all(pt, l);
	shim_port_stats st;
	shim_port_stats_get(pt, &st);
	shim_port_close(pt);
	unlink(path);

	assert_int_equal(l->n, want);
	assert_true(st.delivered == want);
	for (size_t i = 0; i < want; i++) {
		assert_int_equal(l->plen[i], exp_len[i]);
		assert_memory_equal(l->buf + l->off[i], exp[i], exp_len[i]);
	}
	size_t max_len = 0;
	for (size_t i = 0; i < want; i++)
		if (exp_len[i] > max_len)
			max_len = exp_len[i];
	assert_true(max_len > 8800); /* jumbo frames went through whole */
	for (unsigned k = 0; k < RP_CLASS_COUNT; k++)
		if (k != RP_DATA && st.cls[k] != junk[k])
			fail_msg("class %s: counted %llu, sent %llu", rp_class_names[k],
				 (unsigned long long)st.cls[k], (unsigned long long)junk[k]);
	assert_int_equal(st.oversize, 0);

	free(l->buf);
	free(l);
	free(exp);
	free(exp_len);
	patch_free(&small);
	patch_free(&big);
	free(base);
	free(tgt);
}

struct unmap_job {
	void *addr;
	size_t len;
	int rc;
	atomic_int done;
};

static void *unmap_thread(void *arg)
{
	struct unmap_job *j = arg;
	j->rc = munmap(j->addr, j->len);
	atomic_store(&j->done, 1);
	return NULL;
}

/* An unmapping on another thread (as memif's disconnect handler does on the
 * EAL interrupt thread) waits while an RX burst is in progress, and a burst
 * that would start meanwhile is refused; then the unmapping goes ahead. */
static void test_munmap_waits_for_an_rx_burst_in_progress(void **state)
{
	(void)state;
	const size_t len = (size_t)sysconf(_SC_PAGESIZE);
	volatile uint8_t *m = mmap(NULL, len, PROT_READ | PROT_WRITE,
				   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(m != MAP_FAILED);
	m[0] = 7;
	assert_true(shim_rx_guard_enter());
	struct unmap_job j = {.addr = (void *)m, .len = len};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, unmap_thread, &j), 0);
	/* once the thread is in munmap, no new burst may start */
	int waiting = 0;
	for (int i = 0; i < 5000 && !waiting; i++) {
		if (shim_rx_guard_enter())
			shim_rx_guard_leave();
		else
			waiting = 1;
		if (!waiting)
			usleep(1000);
	}
	assert_true(waiting);
	usleep(100000); /* it waits for the burst still in progress */
	assert_int_equal(atomic_load(&j.done), 0);
	assert_int_equal(m[0], 7); /* still mapped */
	shim_rx_guard_leave();
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(atomic_load(&j.done), 1);
	assert_int_equal(j.rc, 0);
	unsigned char vec;
	assert_int_equal(mincore((void *)m, len, &vec), -1); /* gone now */
	assert_int_equal(errno, ENOMEM);
	/* and bursts go on */
	assert_true(shim_rx_guard_enter());
	shim_rx_guard_leave();
}

struct intr_barrier {
	int fd;
	volatile int done;
};

static void intr_barrier_cb(void *arg)
{
	struct intr_barrier *b = arg;
	uint64_t v;
	if (read(b->fd, &v, sizeof(v)) == sizeof(v))
		b->done = 1;
}

/* Returns once the EAL interrupt thread has finished what it was handling.
 * memif runs its control channel on that thread, and closing a port there
 * while this thread closes the peer's port races in the PMD (a disconnect
 * handler still walking queues that are being freed: SIGSEGV on that thread,
 * seen in CI under load). A callback of ours runs on the same thread, so once
 * it has run, the handler before it has returned. (Not an EAL alarm: in
 * 22.11.11, rte_eal_cleanup() after any alarm wakes that thread while memory
 * is being unmapped, another SIGSEGV.) */
static void intr_thread_drain(void)
{
	struct intr_barrier b = {eventfd(0, EFD_NONBLOCK), 0};
	assert_true(b.fd >= 0);
	struct rte_intr_handle *h = rte_intr_instance_alloc(RTE_INTR_INSTANCE_F_PRIVATE);
	assert_non_null(h);
	assert_int_equal(rte_intr_fd_set(h, b.fd), 0);
	assert_int_equal(rte_intr_type_set(h, RTE_INTR_HANDLE_EXT), 0);
	assert_int_equal(rte_intr_callback_register(h, intr_barrier_cb, &b), 0);
	uint64_t one = 1;
	assert_int_equal(write(b.fd, &one, sizeof(one)), sizeof(one));
	for (int i = 0; i < 5000 && !b.done; i++)
		usleep(1000);
	assert_true(b.done);
	assert_true(rte_intr_callback_unregister_sync(h, intr_barrier_cb, &b) > 0);
	rte_intr_instance_free(h);
	close(b.fd);
}

/* A memif pair in this process (the server side stands for a local relay):
 * frames of 1200 and 9000 bytes sent on the server arrive at the shim's
 * client port byte-identical and in order, the large ones through chained
 * mbufs. */
static void test_memif_port_receives_frames_from_a_local_sender(void **state)
{
	(void)state;
	const size_t n = 1u << 17;
	uint16_t *base = malloc(n * 2), *tgt = malloc(n * 2);
	assert_non_null(tgt);
	make_pair(base, tgt, n, 5);
	patch small, big;
	encode(base, tgt, n, 1200, 0, &small);
	encode(base, tgt, n, 9000, BFP_ENC_F_KEYFRAME, &big);

	char sock[64], dev[160], err[256] = "";
	snprintf(sock, sizeof(sock), "/tmp/bfp_shim_memif_%d.sock", (int)getpid());
	snprintf(dev, sizeof(dev), "net_memif10,role=server,socket=%s,socket-abstract=no", sock);
	assert_int_equal(rte_dev_probe(dev), 0);
	uint16_t tx;
	assert_int_equal(rte_eth_dev_get_port_by_name("net_memif10", &tx), 0);
	struct rte_mempool *mp = rte_pktmbuf_pool_create("memif_tx", 511, 0, 0,
							 RTE_PKTMBUF_HEADROOM + SHIM_PORT_PKT_MAX,
							 SOCKET_ID_ANY);
	assert_non_null(mp);
	struct rte_eth_conf ec;
	memset(&ec, 0, sizeof(ec));
	assert_int_equal(rte_eth_dev_configure(tx, 1, 1, &ec), 0);
	assert_int_equal(rte_eth_rx_queue_setup(tx, 0, 256, SOCKET_ID_ANY, NULL, mp), 0);
	assert_int_equal(rte_eth_tx_queue_setup(tx, 0, 256, SOCKET_ID_ANY, NULL), 0);
	assert_int_equal(rte_eth_dev_start(tx), 0);

	snprintf(dev, sizeof(dev), "net_memif11,role=client,socket=%s,socket-abstract=no", sock);
	/* 2 KiB mbufs: 9000-byte frames arrive chained and are copied whole */
	shim_port_conf c = {.devargs = dev, .ip = OUR_IP, .udp_port = DATA_PORT, .n_mbufs = 2047,
			    .mbuf_data = 2048};
	shim_port *pt = NULL;
	if (shim_port_open(&c, &pt, err, sizeof(err)))
		fail_msg("%s", err);
	rx_log *l = calloc(1, sizeof(*l));
	assert_non_null(l);
	/* the client connects within a few seconds */
	struct rte_eth_link lk;
	int up = 0;
	for (int i = 0; i < 1000 && !up; i++) {
		shim_port_poll(pt, on_frame, l);
		rte_eth_link_get_nowait(tx, &lk);
		up = lk.link_status == RTE_ETH_LINK_UP;
		if (!up)
			usleep(10000);
	}
	assert_true(up);

	const size_t total = small.n + big.n;
	size_t sent = 0;
	for (size_t i = 0; i < total; i++) {
		const patch *p = i < small.n ? &small : &big;
		size_t j = i < small.n ? i : i - small.n;
		size_t fl = p->off[j + 1] - p->off[j];
		struct rte_mbuf *m = rte_pktmbuf_alloc(mp);
		assert_non_null(m);
		uint8_t *d = (uint8_t *)rte_pktmbuf_append(m, (uint16_t)(RP_HDRS + fl));
		assert_non_null(d);
		udp_pkt(d, OUR_IP, DATA_PORT, p->buf + p->off[j], fl);
		int tries = 0;
		while (rte_eth_tx_burst(tx, 0, &m, 1) == 0) {
			shim_port_poll(pt, on_frame, l);
			assert_true(++tries < 100000);
		}
		sent++;
		shim_port_poll(pt, on_frame, l);
	}
	for (int i = 0; i < 2000 && l->n < sent; i++) {
		if (!shim_port_poll(pt, on_frame, l))
			usleep(1000);
	}
	assert_int_equal(l->n, sent);
	for (size_t i = 0; i < sent; i++) {
		const patch *p = i < small.n ? &small : &big;
		size_t j = i < small.n ? i : i - small.n;
		assert_int_equal(l->plen[i], p->off[j + 1] - p->off[j]);
		assert_memory_equal(l->buf + l->off[i], p->buf + p->off[j], l->plen[i]);
	}
	shim_port_stats st;
	shim_port_stats_get(pt, &st);
	assert_true(st.chained == big.n);
	shim_port_close(pt);
	/* the server sees the client go away on the interrupt thread; let that
	 * handler finish before this thread frees the server's queues */
	for (int i = 0; i < 500 && up; i++) {
		rte_eth_link_get_nowait(tx, &lk);
		up = lk.link_status == RTE_ETH_LINK_UP;
		if (up)
			usleep(10000);
	}
	assert_false(up);
	intr_thread_drain();
	struct rte_eth_dev_info info;
	assert_int_equal(rte_eth_dev_info_get(tx, &info), 0);
	rte_eth_dev_stop(tx);
	rte_eth_dev_close(tx);
	assert_int_equal(rte_dev_remove(info.device), 0);
	rte_mempool_free(mp);
	unlink(sock);
	free(l->buf);
	free(l);
	patch_free(&small);
	patch_free(&big);
	free(base);
	free(tgt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dma_copies_of_random_ranges_equal_an_independent_memcpy),
		cmocka_unit_test(test_dma_copies_to_unrelated_offsets_are_exact),
		cmocka_unit_test(test_dma_apply_of_a_patch_equals_the_independent_target),
		cmocka_unit_test(test_dma_apply_handles_keyframes_and_ranges_larger_than_the_arena),
		cmocka_unit_test(test_dma_journal_notes_before_writes_and_retires_in_order),
		cmocka_unit_test(test_dma_log_rolls_back_what_was_not_retired),
		cmocka_unit_test(test_dma_apply_rejects_a_bad_frame_and_writes_nothing_to_its_range),
		cmocka_unit_test(test_dma_map_registers_a_mapping_and_copies_into_it),
		cmocka_unit_test(test_pcap_port_delivers_every_frame_byte_identical_and_counts_the_rest),
		cmocka_unit_test(test_memif_port_receives_frames_from_a_local_sender),
		cmocka_unit_test(test_munmap_waits_for_an_rx_burst_in_progress),
	};
	return cmocka_run_group_tests(tests, eal_up, eal_down);
}
