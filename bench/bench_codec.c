/*
 * bench_codec.c: compression and speed of bfpatch on synthetic RL
 * trajectories, next to the baselines measured in the same run:
 * PULSESync-style COO + zstd-1, SparrowRL-style LEB128 gaps (raw and
 * zstd-1), zstd-3 of old XOR new, a plug-in conditional entropy estimate,
 * this machine's bandwidth for comparing two BF16 arrays, and the speed
 * of listing the changes uncoded (the least a sparse encoder does).
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "../codec/internal.h" /* bfp_cpu_features, BFP_CPU_*: the path table */
#include "baseline.h"
#include "bfpatch.h"
#include "model.h"
#include "patch.h"
#include "synth.h"
#include "util.h"

#ifndef BENCH_BUILD
#define BENCH_BUILD "unknown"
#endif

/* ---- the baselines' byte buffer (cli/baseline.c); the bench
 * stops on allocation failure ---- */
typedef bl_buf bytes;

static void put(bytes *b, const void *src, size_t n)
{
	if (bl_put(b, src, n)) {
		fprintf(stderr, "out of memory\n");
		exit(1);
	}
}

static size_t zstd_size(const bytes *b, int level)
{
	size_t r = bl_zstd_size(b, level);
	if (!r) {
		fprintf(stderr, "zstd failed\n");
		exit(1);
	}
	return r;
}

static size_t pulse_size(const model *m, const uint16_t *a, const uint16_t *b)
{
	size_t r = bl_pulse_size(m, a, b);
	if (!r) {
		fprintf(stderr, "PULSESync-style baseline failed\n");
		exit(1);
	}
	return r;
}

/* d as a LEB128 varint at g; returns the byte after it */
static inline uint8_t *put_leb(uint8_t *g, uint64_t d)
{
	while (d >= 0x80) {
		*g++ = (uint8_t)(d | 0x80);
		d >>= 7;
	}
	*g++ = (uint8_t)d;
	return g;
}

/* SparrowRL-style: sorted flat offsets as LEB128 varint gaps, then the raw
 * BF16 values; *raw gets the size without zstd, returns zstd-1 size. */
static size_t sparrow_size(const uint16_t *a, const uint16_t *b, uint64_t n,
			   size_t *raw)
{
	bytes gaps = {0}, vals = {0};
	uint64_t last = 0;
	int first = 1;
	for (uint64_t i = 0; i < n; i++) {
		if (a[i] == b[i])
			continue;
		uint64_t g = first ? i : i - last;
		first = 0;
		last = i;
		uint8_t v[10];
		put(&gaps, v, (size_t)(put_leb(v, g) - v));
		put(&vals, &b[i], 2);
	}
	put(&gaps, vals.p ? vals.p : (uint8_t *)"", vals.n);
	*raw = gaps.n;
	size_t z = zstd_size(&gaps, 1);
	free(gaps.p);
	free(vals.p);
	return z;
}

static size_t xor_zstd_size(const uint16_t *a, const uint16_t *b, uint64_t n)
{
	bytes x = {0};
	x.p = malloc(n * 2);
	x.n = x.cap = n * 2;
	uint16_t *w = (uint16_t *)x.p;
	for (uint64_t i = 0; i < n; i++)
		w[i] = a[i] ^ b[i];
	size_t z = zstd_size(&x, 3);
	free(x.p);
	return z;
}

/* The class of a base exponent (FORMAT.md 3.3). */
static unsigned class_of(unsigned e)
{
	return e <= 108 ? 0 : e >= 123 ? 15 : e - 108;
}

/* Plug-in entropy of positions and values conditioned on (tensor, base
 * exponent byte): per context, n*h(p) for the changed flag plus the
 * empirical entropy of the value delta (key difference; deltas beyond
 * +-64 pooled and costed by their pooled empirical entropy). In bits.
 * Also split by the class of the exponent (pos, val; the pooled cost of
 * the large deltas shared by their counts), and *pos_t: the changed flags
 * conditioned on the tensor alone (n*h(p) per tensor), the least any
 * format spends on positions when it does not look at the base value
 * (gaps in position order, as the baselines code them). */
#define DB 64
static double entropy_bits(const model *m, const uint16_t *a, const uint16_t *b,
			   double pos[BFP_CLASSES], double val[BFP_CLASSES], double *pos_t)
{
	double H = 0;
	*pos_t = 0;
	uint64_t esc_c[BFP_CLASSES] = {0};
	memset(pos, 0, BFP_CLASSES * sizeof(double));
	memset(val, 0, BFP_CLASSES * sizeof(double));
	uint32_t *hist = calloc(256 * (2 * DB + 2), sizeof(uint32_t));
	uint64_t *cnt = calloc(256, sizeof(uint64_t));
	uint32_t *esc = calloc(65536, sizeof(uint32_t));
	uint64_t n_esc = 0;
	for (size_t t = 0; t < m->n_tensors; t++) {
		const bfp_tensor *x = &m->tensors[t];
		uint64_t b0 = x->byte_begin / 2, e0 = x->byte_end / 2;
		memset(hist, 0, 256 * (2 * DB + 2) * sizeof(uint32_t));
		memset(cnt, 0, 256 * sizeof(uint64_t));
		for (uint64_t i = b0; i < e0; i++) {
			unsigned e = (a[i] >> 7) & 0xFF;
			cnt[e]++;
			if (a[i] == b[i])
				continue;
			int d = (int16_t)(uint16_t)(bfp_key(b[i]) - bfp_key(a[i]));
			unsigned bin = (d >= -DB && d <= DB) ? (unsigned)(d + DB) : 2 * DB + 1;
			if (bin == 2 * DB + 1) {
				esc[(uint16_t)d]++;
				esc_c[class_of(e)]++;
				n_esc++;
			}
			hist[e * (2 * DB + 2) + bin]++;
		}
		uint64_t kt = 0;
		for (unsigned e = 0; e < 256; e++) {
			uint64_t k = 0;
			uint32_t *h = hist + e * (2 * DB + 2);
			for (unsigned j = 0; j < 2 * DB + 2; j++)
				k += h[j];
			kt += k;
			if (!k || k == cnt[e]) {
				/* all or nothing changed: the flag costs nothing */
			} else {
				double p = (double)k / (double)cnt[e];
				double hp = (double)cnt[e] * (-p * log2(p) - (1 - p) * log2(1 - p));
				H += hp;
				pos[class_of(e)] += hp;
			}
			for (unsigned j = 0; j < 2 * DB + 2; j++)
				if (h[j]) {
					double hv = -(double)h[j] * log2((double)h[j] / (double)k);
					H += hv;
					val[class_of(e)] += hv;
				}
		}
		if (kt && kt < e0 - b0) {
			double p = (double)kt / (double)(e0 - b0);
			*pos_t += (double)(e0 - b0) * (-p * log2(p) - (1 - p) * log2(1 - p));
		}
	}
	double He = 0;
	for (unsigned j = 0; j < 65536; j++)
		if (esc[j])
			He -= (double)esc[j] * log2((double)esc[j] / (double)n_esc);
	H += He;
	for (unsigned c = 0; c < BFP_CLASSES; c++)
		val[c] += n_esc ? He * (double)esc_c[c] / (double)n_esc : 0;
	free(hist);
	free(cnt);
	free(esc);
	return H;
}

/* ---- bandwidth of comparing two BF16 arrays ---- */
#if defined(__x86_64__)
__attribute__((target("avx2")))
static uint64_t count_diff_avx2(const uint16_t *a, const uint16_t *b, uint64_t n)
{
	__m256i acc = _mm256_setzero_si256();
	uint64_t i = 0, c = 0;
	for (; i + 16 <= n; i += 16) {
		__m256i x = _mm256_loadu_si256((const __m256i *)(a + i));
		__m256i y = _mm256_loadu_si256((const __m256i *)(b + i));
		acc = _mm256_sub_epi16(acc, _mm256_cmpeq_epi16(x, y));
		if ((i & 0x3FFF0) == 0x3FFF0) { /* drain before 16-bit overflow */
			uint16_t t[16];
			_mm256_storeu_si256((__m256i *)t, acc);
			for (int k = 0; k < 16; k++)
				c += t[k];
			acc = _mm256_setzero_si256();
		}
	}
	uint16_t t[16];
	_mm256_storeu_si256((__m256i *)t, acc);
	for (int k = 0; k < 16; k++)
		c += t[k];
	for (; i < n; i++)
		c += a[i] == b[i];
	return n - c;
}
#endif

static uint64_t count_diff(const uint16_t *a, const uint16_t *b, uint64_t n)
{
#if defined(__x86_64__)
	if (__builtin_cpu_supports("avx2"))
		return count_diff_avx2(a, b, n);
#endif
	uint64_t c = 0;
	for (uint64_t i = 0; i < n; i++)
		c += a[i] != b[i];
	return c;
}

typedef struct cmp_job {
	const uint16_t *a, *b;
	uint64_t n;
	int parts;
	atomic_int next;
	atomic_uint_fast64_t sum;
} cmp_job;

static void *cmp_worker(void *arg)
{
	cmp_job *j = arg;
	int k = atomic_fetch_add(&j->next, 1);
	uint64_t lo = j->n * (uint64_t)k / (uint64_t)j->parts;
	uint64_t hi = j->n * (uint64_t)(k + 1) / (uint64_t)j->parts;
	atomic_fetch_add(&j->sum, count_diff(j->a + lo, j->b + lo, hi - lo));
	return NULL;
}

/* Every timing is the best of TIMING_REPS runs, so that a busy neighbour
 * on a shared machine (this project's VMs lose up to a third of a vCPU
 * at times) does not decide a figure. */
#define TIMING_REPS 5

/* Seconds to compare a and b with `threads` threads. */
static double compare_time(const uint16_t *a, const uint16_t *b, uint64_t n, int threads)
{
	double best = 1e9;
	for (int rep = 0; rep < TIMING_REPS; rep++) {
		cmp_job j = {.a = a, .b = b, .n = n, .parts = threads};
		pthread_t t[64];
		double t0 = now_s();
		for (int i = 0; i < threads; i++)
			pthread_create(&t[i], NULL, cmp_worker, &j);
		for (int i = 0; i < threads; i++)
			pthread_join(t[i], NULL);
		double dt = now_s() - t0;
		if (dt < best)
			best = dt;
	}
	return best;
}

/* ---- listing the changes, uncoded ---- */
/* The least any sparse encoder does: the pass over both arrays and, for
 * each changed parameter, its gap from the one before as a LEB128 varint
 * into gaps and its new value raw into vals (the SparrowRL-style bytes
 * before zstd: sparrow_size checks the count). The changes of each
 * LIST_CHUNK parameters are listed first, the first four of a 64-element
 * block without branches, as the encoder's gather does, then written in
 * a loop of known length. Returns the bytes of gaps and values. */
#define LIST_CHUNK 4096u

/* pos[] gets chunk offset + lane of each set bit of mask m; returns the
 * count */
static inline unsigned list_block(uint32_t *pos, uint32_t off, uint64_t m)
{
	const uint64_t top = 1ull << 63;
	uint64_t x = m;
	for (unsigned q = 0; q < 4; q++) {
		pos[q] = off + (uint32_t)__builtin_ctzll(x | top);
		x &= x - 1;
	}
	for (unsigned q = 4; x; q++) {
		pos[q] = off + (uint32_t)__builtin_ctzll(x);
		x &= x - 1;
	}
	return (unsigned)__builtin_popcountll(m);
}

/* the mask of a[i] != b[i] for 64 elements at a, b */
typedef uint64_t (*neq64_fn)(const uint16_t *a, const uint16_t *b);

static uint64_t neq64_c(const uint16_t *a, const uint16_t *b)
{
	uint64_t m = 0;
	for (unsigned k = 0; k < 64; k++)
		m |= (uint64_t)(a[k] != b[k]) << k;
	return m;
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) static uint64_t neq64_avx2(const uint16_t *a, const uint16_t *b)
{
	uint64_t m = 0;
	for (unsigned k = 0; k < 2; k++) {
		const __m256i *x = (const __m256i *)(a + 32 * k), *y = (const __m256i *)(b + 32 * k);
		__m256i e0 = _mm256_cmpeq_epi16(_mm256_loadu_si256(x), _mm256_loadu_si256(y));
		__m256i e1 = _mm256_cmpeq_epi16(_mm256_loadu_si256(x + 1), _mm256_loadu_si256(y + 1));
		/* packs interleaves the 128-bit lanes; the permute puts them back */
		__m256i p = _mm256_permute4x64_epi64(_mm256_packs_epi16(e0, e1), 0xD8);
		m |= (uint64_t)(uint32_t)~_mm256_movemask_epi8(p) << (32 * k);
	}
	return m;
}

__attribute__((target("avx512bw"))) static uint64_t neq64_avx512(const uint16_t *a,
								   const uint16_t *b)
{
	return (uint64_t)_mm512_cmpneq_epi16_mask(_mm512_loadu_si512(a), _mm512_loadu_si512(b)) |
	       (uint64_t)_mm512_cmpneq_epi16_mask(_mm512_loadu_si512(a + 32),
						  _mm512_loadu_si512(b + 32))
		       << 32;
}
#endif

static inline __attribute__((always_inline)) size_t
list_uncoded_t(const uint16_t *a, const uint16_t *b, uint64_t n, uint8_t *gaps, uint16_t *vals,
	       neq64_fn neq)
{
	uint32_t pos[LIST_CHUNK + 4];
	uint8_t *g = gaps;
	uint16_t *v = vals;
	uint64_t last = 0;
	int first = 1;
	for (uint64_t i0 = 0; i0 < n; i0 += LIST_CHUNK) {
		uint32_t cn = n - i0 < LIST_CHUNK ? (uint32_t)(n - i0) : LIST_CHUNK, np = 0, off = 0;
		for (; off + 64 <= cn; off += 64)
			np += list_block(pos + np, off, neq(a + i0 + off, b + i0 + off));
		for (; off < cn; off++) /* the tail of the last chunk */
			if (a[i0 + off] != b[i0 + off])
				pos[np++] = off;
		for (uint32_t q = 0; q < np; q++) {
			const uint64_t p = i0 + pos[q];
			g = put_leb(g, first ? p : p - last);
			first = 0;
			last = p;
			*v++ = b[p];
		}
	}
	return (size_t)(g - gaps) + 2 * (size_t)(v - vals);
}

static size_t list_uncoded_c(const uint16_t *a, const uint16_t *b, uint64_t n, uint8_t *gaps,
			     uint16_t *vals)
{
	return list_uncoded_t(a, b, n, gaps, vals, neq64_c);
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) static size_t
list_uncoded_avx2(const uint16_t *a, const uint16_t *b, uint64_t n, uint8_t *gaps, uint16_t *vals)
{
	return list_uncoded_t(a, b, n, gaps, vals, neq64_avx2);
}

__attribute__((target("avx512bw"))) static size_t
list_uncoded_avx512(const uint16_t *a, const uint16_t *b, uint64_t n, uint8_t *gaps,
		    uint16_t *vals)
{
	return list_uncoded_t(a, b, n, gaps, vals, neq64_avx512);
}
#endif

/* Seconds to list the changes of a -> b uncoded on one thread (the best
 * of TIMING_REPS); exits if the bytes differ from want. */
static double list_time(const uint16_t *a, const uint16_t *b, uint64_t n, uint64_t changed,
			size_t want)
{
	size_t (*fn)(const uint16_t *, const uint16_t *, uint64_t, uint8_t *, uint16_t *) =
		list_uncoded_c;
#if defined(__x86_64__)
	if (__builtin_cpu_supports("avx512bw"))
		fn = list_uncoded_avx512;
	else if (__builtin_cpu_supports("avx2"))
		fn = list_uncoded_avx2;
#endif
	/* at most 10 varint bytes a gap; written once before timing, so that
	 * no run pays for faulting the pages in */
	uint8_t *gaps = malloc(changed * 10 + 1);
	uint16_t *vals = malloc(changed * 2 + 2);
	if (!gaps || !vals) {
		fputs("list: out of memory\n", stderr);
		exit(1);
	}
	memset(gaps, 0, changed * 10 + 1);
	memset(vals, 0, changed * 2 + 2);
	double best = 1e9;
	for (int rep = 0; rep < TIMING_REPS; rep++) {
		double t0 = now_s();
		size_t got = fn(a, b, n, gaps, vals);
		double dt = now_s() - t0;
		best = dt < best ? dt : best;
		if (got != want) {
			fprintf(stderr, "list: %zu bytes, the SparrowRL-style baseline %zu\n", got, want);
			exit(1);
		}
	}
	free(gaps);
	free(vals);
	return best;
}

/* What a patch's frames spend, from bfp_frame_stats: code parameters in
 * all, and per class its changes and the bits of its count and header,
 * its positions and its values. */
typedef struct spend {
	uint64_t model_bits;
	uint64_t n[BFP_CLASSES], hdr[BFP_CLASSES], pos[BFP_CLASSES], val[BFP_CLASSES];
} spend;

static void patch_spend(const patch *p, spend *o)
{
	static bfp_decoder dec;
	bfp_decoder_init(&dec, 0);
	memset(o, 0, sizeof(*o));
	for (size_t i = 0; i < p->n; i++) {
		bfp_frame_stats st;
		if (bfp_frame_stats_get(&dec, p->buf + p->off[i], p->off[i + 1] - p->off[i],
					&st) != BFP_OK)
			continue;
		o->model_bits += st.model_bits;
		for (unsigned c = 0; c < BFP_CLASSES; c++) {
			o->n[c] += st.class_changes[c];
			o->hdr[c] += st.class_model_bits[c];
			o->pos[c] += st.class_position_bits[c];
			o->val[c] += st.class_value_bits[c];
		}
	}
}

/* Where the frames' bits go next to the estimate's (H bits in all),
 * class by class: positions and values in bits per change, and the
 * class's count and header (code parameters, which the estimate does not
 * pay; counts of 0 too) as a share of H. */
static void print_classes(const spend *sp, const double *epos, const double *eval,
			  double H)
{
	printf("  class   changes  count+header  positions (estimate)  values (estimate)\n");
	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		double k = sp->n[c] ? (double)sp->n[c] : 1;
		printf("  %5u %9llu %12.2f%% %10.3f (%6.3f) %10.3f (%6.3f)\n", c,
		       (unsigned long long)sp->n[c], 100.0 * (double)sp->hdr[c] / H,
		       (double)sp->pos[c] / k, epos[c] / k, (double)sp->val[c] / k, eval[c] / k);
	}
}

static double encode_time(const model *m, const uint16_t *a, const uint16_t *b,
			  uint32_t fs, uint32_t sparse, int threads, size_t *bytes_out,
			  size_t *frames, spend *sp)
{
	model old = *m, nw = *m;
	old.params = (uint16_t *)a;
	nw.params = (uint16_t *)b;
	patch_opts po = {.frame_size = fs, .base_version = 1, .target_version = 2,
			 .threads = threads, .sparse = sparse};
	char err[256];
	double best = 1e9;
	for (int rep = 0; rep < TIMING_REPS; rep++) {
		patch p;
		double t0 = now_s();
		if (patch_encode(&old, &nw, &po, &p, err, sizeof(err))) {
			fprintf(stderr, "encode: %s\n", err);
			exit(1);
		}
		double dt = now_s() - t0;
		best = dt < best ? dt : best;
		*bytes_out = p.len;
		*frames = p.n;
		if (sp && rep == 0)
			patch_spend(&p, sp);
		patch_free(&p);
	}
	return best;
}

static double apply_time(const model *m, const uint16_t *a, const uint16_t *b,
			 uint32_t fs, uint32_t sparse, int threads, uint16_t *scratch)
{
	model old = *m, nw = *m;
	old.params = (uint16_t *)a;
	nw.params = (uint16_t *)b;
	patch_opts po = {.frame_size = fs, .base_version = 1, .target_version = 2,
			 .sparse = sparse};
	char err[256];
	patch p;
	if (patch_encode(&old, &nw, &po, &p, err, sizeof(err))) {
		fprintf(stderr, "encode: %s\n", err);
		exit(1);
	}
	double best = 1e9;
	for (int rep = 0; rep < TIMING_REPS; rep++) {
		memcpy(scratch, a, m->n_params * 2);
		double t0 = now_s();
		if (patch_apply(&p, scratch, m->n_params, m->model_id, threads, 0, err,
				sizeof(err))) {
			fprintf(stderr, "apply: %s\n", err);
			exit(1);
		}
		double dt = now_s() - t0;
		best = dt < best ? dt : best;
		if (memcmp(scratch, b, m->n_params * 2) != 0) {
			fprintf(stderr, "apply: result differs from the target\n");
			exit(1);
		}
	}
	patch_free(&p);
	return best;
}

/* ---- each instruction-set path the codec has on this CPU, forced
 * through the encoder's and decoder's cpu fields: one thread over
 * 2^24-parameter ranges of 1200 B frames, bytes checked against the
 * scalar path's and the applied values against the target ---- */
static const struct {
	const char *name;
	uint32_t cpu;
} paths[] = {{"portable C", 0},
	     {"AVX2", BFP_CPU_AVX2},
	     {"AVX2 + pdep", BFP_CPU_AVX2 | BFP_CPU_PDEP},
	     {"AVX-512BW", BFP_CPU_AVX2 | BFP_CPU_AVX512BW},
	     {"AVX-512BW + GFNI", BFP_CPU_AVX2 | BFP_CPU_AVX512BW | BFP_CPU_GFNI},
	     {"Advanced SIMD", BFP_CPU_NEON}};

#define PATH_RANGE (1u << 24)

static bfp_encoder path_enc;
static uint64_t path_changed; /* changes in path_encode's frames */

/* Encode a -> b on path cpu in 2^24-parameter ranges, 1200 B frames, into
 * out (lens[] their lengths), or with out NULL into one frame buffer
 * (frames counted, not kept); flags: BFP_ENC_F_*. path_enc keeps the
 * encoder's stage counters for all the ranges. */
static size_t path_encode(uint32_t cpu, uint32_t flags, const uint16_t *a, const uint16_t *b,
			  uint64_t n, uint8_t *out, size_t cap, size_t *lens, size_t *nf)
{
	static uint8_t frame[BFP_FRAME_BOUND(1200)];
	bfp_encode_opts o;
	memset(&o, 0, sizeof(o));
	o.frame_size = 1200;
	o.model_id = 1;
	o.base_version = 1;
	o.target_version = 2;
	o.flags = flags;
	if (bfp_encoder_init(&path_enc, &o, a, b, n, 0, 0) != BFP_OK) {
		fputs("paths: encoder_init failed\n", stderr);
		exit(1);
	}
	bfp_enc_of(&path_enc)->cpu = cpu;
	size_t tot = 0;
	*nf = 0;
	path_changed = 0;
	for (uint64_t s = 0; s < n; s += PATH_RANGE) {
		bfp_encoder_reset(&path_enc, a, b, n, s, n - s < PATH_RANGE ? n : s + PATH_RANGE,
				  (uint32_t)*nf);
		size_t len;
		bfp_status st = BFP_OK;
		int full = 0;
		for (;;) {
			if (out && cap - tot < BFP_FRAME_SIZE_MAX) {
				full = 1;
				break;
			}
			st = bfp_encode_next(&path_enc, out ? out + tot : frame,
					     out ? cap - tot : sizeof(frame), &len);
			if (st != BFP_OK)
				break;
			if (out)
				lens[*nf] = len;
			(*nf)++;
			tot += len;
		}
		if (full || st != BFP_DONE) {
			fprintf(stderr, "paths: encode failed (%s)\n",
				full ? "buffer full" : bfp_status_str(st));
			exit(1);
		}
		path_changed += bfp_encoder_changed(&path_enc);
	}
	return tot;
}

/* Where the encoder's time goes on this CPU's path: its stage counters
 * (BFP_ENC_F_STAGES) in the best of three runs, each stage timed once a
 * frame as the encoder runs it. */
static void print_stages(const uint16_t *a, const uint16_t *b, uint64_t n)
{
	patch_stages best = {0};
	double wall = 0;
	for (int rep = 0; rep < 3; rep++) {
		size_t nf;
		double t0 = now_s();
		path_encode(bfp_cpu_features(), BFP_ENC_F_STAGES, a, b, n, NULL, 0, NULL, &nf);
		double dt = now_s() - t0;
		bfp_stage_counts sc;
		bfp_encoder_stages(&path_enc, &sc);
		if (rep == 0 || sc.ticks[BFP_STAGE_ALL] < best.ticks[BFP_STAGE_ALL]) {
			memcpy(best.ticks, sc.ticks, sizeof(best.ticks));
			best.listed = sc.listed;
			best.sized = sc.sized;
			best.changed = path_changed;
			wall = dt;
		}
	}
	printf("where encode time goes (1 thread, 2^24-parameter ranges, 1200 B frames; the encoder's stage counters, best of 3 runs):\n");
	patch_stages_print(stdout, "  ", &best, wall);
}

static void print_paths(const uint16_t *a, const uint16_t *b, uint64_t n, uint16_t *scratch)
{
	const uint32_t feats = bfp_cpu_features();
	const size_t cap = (size_t)n / 4 + (64u << 20), maxf = cap / 64;
	uint8_t *ref = malloc(cap), *out = malloc(cap);
	size_t *lens = malloc(maxf * sizeof(size_t)), ref_len = 0, ref_nf = 0;
	if (!ref || !out || !lens) {
		fputs("paths: out of memory\n", stderr);
		exit(1);
	}
	static bfp_decoder dec;
	printf("instruction-set paths on this CPU (1 thread, 2^24-parameter ranges, 1200 B frames):\n");
	for (size_t p = 0; p < sizeof(paths) / sizeof(paths[0]); p++) {
		if ((paths[p].cpu & feats) != paths[p].cpu)
			continue;
		double te = 1e9, ta = 1e9;
		size_t len = 0, nf = 0;
		for (int rep = 0; rep < TIMING_REPS; rep++) {
			double t0 = now_s();
			len = path_encode(paths[p].cpu, 0, a, b, n, p ? out : ref, cap, lens, &nf);
			double dt = now_s() - t0;
			te = dt < te ? dt : te;
		}
		if (p == 0) {
			ref_len = len;
			ref_nf = nf;
		} else if (len != ref_len || nf != ref_nf || memcmp(out, ref, len) != 0) {
			fprintf(stderr, "paths: %s writes other bytes than the portable path\n",
				paths[p].name);
			exit(1);
		}
		for (int rep = 0; rep < TIMING_REPS; rep++) {
			memcpy(scratch, a, n * 2);
			bfp_decoder_init(&dec, 0);
			bfp_dec_of(&dec)->cpu = paths[p].cpu;
			bfp_apply_opts ao;
			memset(&ao, 0, sizeof(ao));
			ao.model_id = 1;
			ao.base_version = 1;
			double t0 = now_s();
			size_t off = 0;
			for (size_t i = 0; i < nf; i++) {
				bfp_status st = bfp_decode_apply(&dec, &ao, ref + off, lens[i], scratch, n,
								 NULL);
				if (st != BFP_OK) {
					fprintf(stderr, "paths: %s: decode: %s\n", paths[p].name,
						bfp_status_str(st));
					exit(1);
				}
				off += lens[i];
			}
			double dt = now_s() - t0;
			ta = dt < ta ? dt : ta;
			if (memcmp(scratch, b, n * 2) != 0) {
				fprintf(stderr, "paths: %s: result differs from the target\n",
					paths[p].name);
				exit(1);
			}
		}
		printf("  %-18s encode %5.2f G params/s, decode+apply %5.2f G params/s\n",
		       paths[p].name, (double)n / te / 1e9, (double)n / ta / 1e9);
	}
	free(ref);
	free(out);
	free(lens);
}

/* ---- keyframes: the whole model, for a joining actor or a resync ---- */

/* Exponent entropy in bits a value: of the whole model, and the mean of
 * each tensor's own (what frames that never span tensors can reach). */
static void exp_entropy(const model *m, double *whole, double *per_tensor)
{
	uint64_t all[256] = {0};
	double pt = 0;
	uint64_t at = 0;
	for (size_t t = 0; t < m->n_tensors; t++) {
		uint64_t h[256] = {0}, end = (m->tensors[t].byte_end + 1) / 2, n = end - at;
		for (uint64_t i = at; i < end; i++)
			h[(m->params[i] >> 7) & 0xFF]++;
		for (unsigned e = 0; e < 256; e++) {
			all[e] += h[e];
			if (h[e])
				pt -= (double)h[e] * log2((double)h[e] / (double)n);
		}
		at = end;
	}
	double H = 0;
	for (unsigned e = 0; e < 256; e++)
		if (all[e])
			H -= (double)all[e] * log2((double)all[e] / (double)m->n_params);
	*whole = H / (double)m->n_params;
	*per_tensor = pt / (double)m->n_params;
}

typedef struct key_run {
	size_t bytes, frames, by_enc[BFP_ENC_LAST + 1];
	double enc_s, dec_s; /* best of TIMING_REPS, one thread */
} key_run;

/* Keyframes of m, one range a tensor, one thread; decoded and checked. */
static void key_frames(const model *m, uint32_t fs, uint32_t flags, key_run *r)
{
	static bfp_encoder enc;
	static bfp_decoder dec;
	const size_t cap = m->n_params * 3 + (m->n_tensors + 1) * BFP_FRAME_SIZE_MAX;
	uint8_t *buf = malloc(cap);
	uint16_t *w = alloc_aligned(m->n_params * 2 + 2);
	void *ws = bfp_zstd_workspace_size() ? alloc_aligned(bfp_zstd_workspace_size()) : NULL;
	bfp_encode_opts o = {.frame_size = fs, .model_id = m->model_id, .target_version = 1,
			     .flags = BFP_ENC_F_KEYFRAME | flags, .zstd_workspace = ws,
			     .zstd_workspace_size = bfp_zstd_workspace_size()};
	bfp_apply_opts ao = {.model_id = m->model_id, .zstd_workspace = ws,
			     .zstd_workspace_size = bfp_zstd_workspace_size()};
	memset(r, 0, sizeof(*r));
	r->enc_s = r->dec_s = 1e9;
	for (int rep = 0; rep < TIMING_REPS; rep++) {
		size_t len = 0, frames = 0;
		uint64_t at = 0;
		double t0 = now_s();
		for (size_t t = 0; t < m->n_tensors; t++) {
			uint64_t end = (m->tensors[t].byte_end + 1) / 2;
			if (end <= at)
				continue;
			size_t fl;
			/* set up once, reset for each range, as the patch code does */
			bfp_status st = at == 0 ? bfp_encoder_init(&enc, &o, NULL, m->params,
								   m->n_params, at, end)
						: bfp_encoder_reset(&enc, NULL, m->params, m->n_params,
								    at, end, 0);
			while (st == BFP_OK && (st = bfp_encode_next(&enc, buf + len, cap - len, &fl)) ==
						       BFP_OK) {
				len += fl;
				frames++;
			}
			if (st != BFP_DONE) {
				fprintf(stderr, "keyframes: %s\n", bfp_status_str(st));
				exit(1);
			}
			at = end;
		}
		double t1 = now_s();
		memset(w, 0, m->n_params * 2);
		double t2 = now_s();
		bfp_decoder_init(&dec, 0);
		for (size_t off = 0; off < len;) {
			size_t fl;
			bfp_frame_header h;
			if (bfp_frame_length(buf + off, len - off, &fl) != BFP_OK ||
			    bfp_decode_apply(&dec, &ao, buf + off, fl, w, m->n_params, &h) != BFP_OK) {
				fprintf(stderr, "keyframes: a frame does not apply\n");
				exit(1);
			}
			if (rep == 0)
				r->by_enc[h.encoding]++;
			off += fl;
		}
		double t3 = now_s();
		if (memcmp(w, m->params, m->n_params * 2) != 0) {
			fprintf(stderr, "keyframes: result differs from the model\n");
			exit(1);
		}
		r->bytes = len;
		r->frames = frames;
		r->enc_s = t1 - t0 < r->enc_s ? t1 - t0 : r->enc_s;
		r->dec_s = t3 - t2 < r->dec_s ? t3 - t2 : r->dec_s;
	}
	free(buf);
	free(w);
	free(ws);
}

/* Keyframes of m by each keyframe encoding at 1200 and 8900 B frames,
 * next to zstd -1 and -19 of the raw BF16 bytes and the bound of sign
 * and mantissa raw with the exponent at its entropy. */
static void print_keyframes(const model *m, const char *what, int targets)
{
	double hw, ht;
	exp_entropy(m, &hw, &ht);
	const double dense = (double)m->n_params * 2;
	bytes raw = {.p = (uint8_t *)m->params, .n = m->n_params * 2, .cap = m->n_params * 2};
	const size_t z1 = zstd_size(&raw, 1), z19 = zstd_size(&raw, 19);
	printf("\n== keyframes of %s: %llu parameters, %zu tensors ==\n", what,
	       (unsigned long long)m->n_params, m->n_tensors);
	printf("exponent entropy %.3f bits a value (whole model), %.3f (each tensor's own); "
	       "bound with sign and mantissa raw: %.1f%% of dense (%.1f%% per tensor)\n",
	       hw, ht, 100.0 * (8 + hw) / 16, 100.0 * (8 + ht) / 16);
	printf("%-38s %12s %9s %8s %11s %11s\n", "keyframes", "bytes", "% dense", "frames",
	       "enc GB/s", "dec GB/s");
	printf("%-38s %12.0f %8.2f%%\n", "dense BF16", dense, 100.0);
	static const struct {
		const char *name;
		uint32_t flags;
	} kinds[] = {{"KEY_RAW (3)", 0},
		     {"KEY_RAW/KEY_ZSTD (3, 4)", BFP_ENC_F_ZSTD},
		     {"KEY_EXP (7), with 3", BFP_ENC_F_KEY_EXP},
		     {"KEY_EXP (7), with 3, 4", BFP_ENC_F_KEY_EXP | BFP_ENC_F_ZSTD},
		     {"KEY_EXPM (8), with 3", BFP_ENC_F_KEY_EXPM},
		     {"KEY_HUF (9), with 3", BFP_ENC_F_KEY_HUF}};
	static const uint32_t sizes[] = {1200, 8900};
	/* the targets keyframes are held to: size of dense at each frame
	 * size, GB/s of BF16 per core */
	static const double max_pct[] = {70.0, 67.0}, min_enc = 0.5, min_dec = 1.0;
	for (size_t s = 0; s < 2; s++)
		for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
			key_run r;
			char name[64], vs[96] = "";
			if ((kinds[k].flags & BFP_ENC_F_ZSTD) && !bfp_zstd_workspace_size())
				continue;
			key_frames(m, sizes[s], kinds[k].flags, &r);
			snprintf(name, sizeof(name), "%s, %u B", kinds[k].name, sizes[s]);
			const double pct = 100.0 * (double)r.bytes / dense;
			const double enc = dense / r.enc_s / 1e9, dec = dense / r.dec_s / 1e9;
			if (targets && (kinds[k].flags & (BFP_ENC_F_KEY_EXPM | BFP_ENC_F_KEY_HUF)))
				snprintf(vs, sizeof(vs), "  vs <=%.0f%%/>=%.1f/>=%.1f: %s/%s/%s",
					 max_pct[s], min_enc, min_dec, pct <= max_pct[s] ? "met" : "SHORT",
					 enc >= min_enc ? "met" : "SHORT",
					 dec >= min_dec ? "met" : "SHORT");
			printf("%-38s %12zu %8.2f%% %8zu %11.2f %11.2f   (frames 3/4/7/8/9: "
			       "%zu/%zu/%zu/%zu/%zu)%s\n",
			       name, r.bytes, pct, r.frames, enc, dec, r.by_enc[BFP_ENC_KEY_RAW],
			       r.by_enc[BFP_ENC_KEY_ZSTD], r.by_enc[BFP_ENC_KEY_EXP],
			       r.by_enc[BFP_ENC_KEY_EXPM], r.by_enc[BFP_ENC_KEY_HUF], vs);
		}
	printf("%-38s %12zu %8.2f%%   (one stream, no frames)\n", "zstd -1 of the BF16 bytes", z1,
	       100.0 * (double)z1 / dense);
	printf("%-38s %12zu %8.2f%%   (one stream, no frames)\n", "zstd -19 of the BF16 bytes", z19,
	       100.0 * (double)z19 / dense);
	printf("(GB/s of BF16 output, one thread; frames include their 60 B headers)\n");
	if (targets)
		printf("(the targets of trained weights: size of dense at 1200 / 8900 B, encode and\n"
		       " decode GB/s per core)\n");
}

static const char usage[] =
	"usage: bench_codec [--params N] [--steps N] [--threads N] [--quick]\n"
	"       bench_codec --weights FILE.safetensors\n"
	"Runs three synthetic trajectories (lr 1e-6 off-grid, lr 1e-6 on-grid,\n"
	"lr 1e-5 off-grid) and prints compression against the baselines and\n"
	"throughput against this machine's compare bandwidth, all measured now;\n"
	"then the speed of each instruction-set path this CPU has.\n"
	"--weights: keyframes of a trained checkpoint (bench/train_tiny.py makes\n"
	"one) by each keyframe encoding, against zstd of its bytes, and the same\n"
	"for a synthetic checkpoint, whose values are not trained-like.\n";

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{"params", required_argument, 0, 'p'}, {"steps", required_argument, 0, 'n'},
		{"threads", required_argument, 0, 'j'}, {"quick", no_argument, 0, 'q'},
		{"weights", required_argument, 0, 'w'},
		{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	const char *weights = NULL;
	uint64_t params = 128000000;
	int steps = 3, threads = cpu_count(), c;
	malloc_keep_freed(); /* as bfpatch runs */
	while ((c = getopt_long(argc, argv, "p:n:j:qw:h", lo, NULL)) != -1) {
		switch (c) {
		case 'w': weights = optarg; break;
		case 'p': params = strtoull(optarg, NULL, 0); break;
		case 'n': steps = atoi(optarg); break;
		case 'j': threads = atoi(optarg); break;
		case 'q': params = 8000000; steps = 2; break;
		case 'h': fputs(usage, stdout); return 0;
		default: fputs(usage, stderr); return 2;
		}
	}
	if (params < 4096 || steps < 1 || threads < 1 || threads > 64) {
		fputs(usage, stderr);
		return 2;
	}
	char cpu[128];
	cpu_name(cpu, sizeof(cpu));
	printf("bfpatch bench_codec: %s, %d threads; %s; build: %s\n", cpu, threads,
	       __VERSION__, BENCH_BUILD);
	printf("codec working memory: encoder %zu B, decoder %zu B, independent of model size\n",
	       sizeof(bfp_encoder), sizeof(bfp_decoder));

	if (weights) {
		char err[256] = "";
		model km, sm;
		if (model_load(&km, weights, err, sizeof(err))) {
			fprintf(stderr, "%s: %s\n", weights, err);
			return 1;
		}
		print_keyframes(&km, weights, 1);
		const uint64_t kn = km.n_params;
		model_free(&km);
		synth_opts so = {.params = kn, .lr = 1e-6, .seed = 1, .threads = threads};
		synth *s = synth_new(&so, &sm, err, sizeof(err));
		if (!s) {
			fprintf(stderr, "synth: %s\n", err);
			return 1;
		}
		print_keyframes(&sm, "a synthetic checkpoint (bfpatch synth) of the same size", 0);
		synth_free(s);
		model_free(&sm);
		return 0;
	}
	static const struct {
		const char *name;
		double lr;
		int ongrid;
	} runs[] = {{"lr 1e-6 off-grid", 1e-6, 0}, {"lr 1e-6 on-grid", 1e-6, 1},
		    {"lr 1e-5 off-grid", 1e-5, 0}};
	for (size_t r = 0; r < sizeof(runs) / sizeof(runs[0]); r++) {
		synth_opts so = {.params = params, .lr = runs[r].lr, .ongrid = runs[r].ongrid,
				 .seed = 1, .threads = threads};
		char err[256] = "";
		model cur;
		synth *s = synth_new(&so, &cur, err, sizeof(err));
		if (!s) {
			fprintf(stderr, "synth: %s\n", err);
			return 1;
		}
		uint64_t n = cur.n_params;
		uint16_t *prev = alloc_aligned(n * 2), *scratch = alloc_aligned(n * 2);
		for (int k = 0; k < steps; k++) {
			memcpy(prev, cur.params, n * 2);
			synth_step(s, &cur);
		}
		const uint16_t *a = prev, *b = cur.params;
		uint64_t changed = count_diff(a, b, n);
		size_t b1200, f1200, b8900, f8900, sp_raw, sc1200, scf1200, sc8900, scf8900;
		spend sp;
		double te1 = encode_time(&cur, a, b, 1200, 0, 1, &b1200, &f1200, NULL);
		double ten = encode_time(&cur, a, b, 1200, 0, threads, &b1200, &f1200, &sp);
		(void)encode_time(&cur, a, b, 8900, 0, threads, &b8900, &f8900, NULL);
		double ta1 = apply_time(&cur, a, b, 1200, 0, 1, scratch);
		double tan = apply_time(&cur, a, b, 1200, 0, threads, scratch);
		/* the same with self-contained frames (each frame with its own
		 * code parameters) */
		double tse1 = encode_time(&cur, a, b, 1200, BFP_SPARSE_SELF_CONTAINED, 1, &sc1200,
					  &scf1200, NULL);
		(void)encode_time(&cur, a, b, 8900, BFP_SPARSE_SELF_CONTAINED, threads, &sc8900,
				  &scf8900, NULL);
		double tsa1 = apply_time(&cur, a, b, 1200, BFP_SPARSE_SELF_CONTAINED, 1, scratch);
		size_t pulse = pulse_size(&cur, a, b);
		size_t sparrow_z = sparrow_size(a, b, n, &sp_raw);
		size_t xz = xor_zstd_size(a, b, n);
		double epos[BFP_CLASSES], eval[BFP_CLASSES];
		double epos_t;
		double H = entropy_bits(&cur, a, b, epos, eval, &epos_t);
		double tc1 = compare_time(a, b, n, 1), tcn = compare_time(a, b, n, threads);
		double tl1 = list_time(a, b, n, changed, sp_raw);
		double dense = (double)n * 2;
		double ch = changed ? (double)changed : 1;

		printf("\n== %s: %llu parameters, step %d -> %d, changed %.3f%% ==\n", runs[r].name,
		       (unsigned long long)n, steps - 1, steps, 100.0 * (double)changed / (double)n);
		printf("%-34s %14s %12s %10s\n", "encoding", "bytes", "bits/chg", "x dense");
		struct {
			const char *name;
			double bytes;
		} rows[] = {
			{"dense BF16", dense},
			{"bfpatch, 1200 B frames", (double)b1200},
			{"bfpatch, 8900 B frames", (double)b8900},
			{"bfpatch, 1200 B, self-contained", (double)sc1200},
			{"bfpatch, 8900 B, self-contained", (double)sc8900},
			{"PULSESync-style (COO + zstd-1)", (double)pulse},
			{"SparrowRL-style (LEB128 + raw)", (double)sp_raw},
			{"SparrowRL-style + zstd-1", (double)sparrow_z},
			{"zstd -3 of old XOR new", (double)xz},
			{"entropy (tensor, base exponent)", H / 8},
		};
		for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
			printf("%-34s %14.0f %12.3f %9.1fx\n", rows[i].name, rows[i].bytes,
			       rows[i].bytes * 8 / ch, dense / rows[i].bytes);
		printf("bfpatch 1200 B frames: %zu frames (%.1f%% headers); %.2fx fewer bytes than PULSESync-style; %.1f%% above the entropy estimate (8900 B: %.1f%%)\n",
		       f1200, 100.0 * (double)f1200 * BFP_HEADER_SIZE / (double)b1200,
		       (double)pulse / (double)b1200, 100.0 * ((double)b1200 * 8 / H - 1),
		       100.0 * ((double)b8900 * 8 / H - 1));
		/* where the 1200 B frames' excess over the estimate goes */
		double hdr = (double)f1200 * BFP_HEADER_SIZE;
		printf("bfpatch 1200 B frames against the entropy estimate: headers +%.1f%%, code parameters +%.1f%%, positions and values %+.1f%%\n",
		       100.0 * hdr * 8 / H, 100.0 * (double)sp.model_bits / H,
		       100.0 * (((double)b1200 - hdr) * 8 - (double)sp.model_bits) / H - 100.0);
		print_classes(&sp, epos, eval, H);
		double hval = 0, hpos = 0;
		for (unsigned j = 0; j < BFP_CLASSES; j++) {
			hval += eval[j];
			hpos += epos[j];
		}
		printf("entropy with positions conditioned on the tensor alone (what a format spends at least when it codes positions without their base exponent, with no rank in a class): positions %.3f bits a change (%.3f with the exponent), %.1f%% above the estimate in all\n",
		       epos_t / ch, hpos / ch, 100.0 * ((epos_t + hval) / H - 1));
		printf("bfpatch 1200 B self-contained frames (no shared model): %zu frames; %.1f%% above the entropy estimate (8900 B: %.1f%%); encode 1 thread %.2f G params/s, decode+apply 1 thread %.2f G params/s\n",
		       scf1200, 100.0 * ((double)sc1200 * 8 / H - 1), 100.0 * ((double)sc8900 * 8 / H - 1),
		       (double)n / tse1 / 1e9, (double)n / tsa1 / 1e9);
		double cbw1 = (double)n / tc1, cbwn = (double)n / tcn;
		printf("compare two BF16 arrays: 1 thread %.2f G params/s (%.1f GB/s of input), %d threads %.2f G params/s\n",
		       cbw1 / 1e9, cbw1 * 4 / 1e9, threads, cbwn / 1e9);
		printf("list the changes uncoded (LEB128 gaps + raw values, as SparrowRL-style; no coding, frames or hashes): 1 thread %.2f G params/s (%.2f of compare)\n",
		       (double)n / tl1 / 1e9, (double)n / tl1 / cbw1);
		printf("encode:       1 thread %.2f G params/s (%.2f of compare), %d threads %.2f G params/s (%.2f)\n",
		       (double)n / te1 / 1e9, (double)n / te1 / cbw1, threads,
		       (double)n / ten / 1e9, (double)n / ten / cbwn);
		printf("decode+apply: 1 thread %.2f G params/s (%.2f of compare), %d threads %.2f G params/s (%.2f)\n",
		       (double)n / ta1 / 1e9, (double)n / ta1 / cbw1, threads,
		       (double)n / tan / 1e9, (double)n / tan / cbwn);
		print_stages(a, b, n);
		print_paths(a, b, n, scratch);
		free(prev);
		free(scratch);
		synth_free(s);
		model_free(&cur);
	}
	return 0;
}
