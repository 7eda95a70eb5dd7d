/*
 * classes.c: the scanning loops of the sparse codec. A class test is an
 * unsigned range compare on the exponent bits, so one subtract and one
 * compare per lane; the vector versions count with popcount of the mask.
 * All versions return identical results (tests force each one).
 */
#include "classes.h"
#include "select8_table.h"

#if defined(__x86_64__) || defined(__i386__)
#define BFP_X86 1
#include <cpuid.h>
#include <immintrin.h>
#elif defined(__aarch64__) && defined(__ARM_NEON) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define BFP_NEON 1
#include <arm_neon.h>
#endif

#ifdef BFP_X86
/* pdep is microcoded, tens to hundreds of cycles, on AMD (and Hygon)
 * before Zen 3 (family 19h); one instruction elsewhere. */
static int slow_pdep(void)
{
	unsigned a, b, c, d;
	if (!__get_cpuid(0, &a, &b, &c, &d))
		return 1;
	/* the vendor string: AuthenticAMD or HygonGenuine */
	const int amd = (b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u) ||
			(b == 0x6f677948u && d == 0x6e65476eu && c == 0x656e6975u);
	if (!amd)
		return 0;
	__get_cpuid(1, &a, &b, &c, &d);
	unsigned family = (a >> 8) & 0xF;
	if (family == 0xF)
		family += (a >> 20) & 0xFF;
	return family < 0x19;
}

uint32_t bfp_cpu_features(void)
{
	unsigned a, b, c, d;
	uint32_t f = 0;
	if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27)))
		return 0; /* no OSXSAVE */
	const int popcnt = (c >> 23) & 1;
	unsigned xlo, xhi;
	__asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
	if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
		return 0;
	const unsigned bmi2 = (b >> 8) & 1;
	if ((xlo & 0x6) == 0x6 && (b & (1u << 5))) {
		f |= BFP_CPU_AVX2;
		if (bmi2 && !slow_pdep())
			f |= BFP_CPU_PDEP;
	}
	/* the AVX-512 paths also use pdep (BMI2) and popcnt */
	if ((xlo & 0xE6) == 0xE6 && (b & (1u << 16)) && (b & (1u << 30)) && bmi2 && popcnt) {
		f |= BFP_CPU_AVX512BW;
		if ((c & (1u << 8)) && (c & (1u << 12))) /* GFNI, AVX512-BITALG */
			f |= BFP_CPU_GFNI;
	}
	return f;
}

__attribute__((target("avx2")))
static uint64_t diff_avx2(const uint16_t *a, const uint16_t *b, uint64_t n)
{
	uint64_t i = 0;
	for (; i + 32 <= n; i += 32) {
		__m256i x0 = _mm256_loadu_si256((const __m256i *)(a + i));
		__m256i y0 = _mm256_loadu_si256((const __m256i *)(b + i));
		__m256i x1 = _mm256_loadu_si256((const __m256i *)(a + i + 16));
		__m256i y1 = _mm256_loadu_si256((const __m256i *)(b + i + 16));
		__m256i e = _mm256_and_si256(_mm256_cmpeq_epi16(x0, y0),
					     _mm256_cmpeq_epi16(x1, y1));
		if ((unsigned)_mm256_movemask_epi8(e) != 0xFFFFFFFFu)
			break;
	}
	for (; i < n; i++)
		if (a[i] != b[i])
			return i;
	return n;
}
#elif defined(BFP_NEON)
uint32_t bfp_cpu_features(void)
{
	return BFP_CPU_NEON;
}
#else
uint32_t bfp_cpu_features(void)
{
	return 0;
}
#endif

uint64_t bfp_next_diff(const uint16_t *a, const uint16_t *b, uint64_t n,
		       uint32_t cpu)
{
	(void)cpu;
#ifdef BFP_X86
	if (cpu & (BFP_CPU_AVX2 | BFP_CPU_AVX512BW))
		return diff_avx2(a, b, n);
#endif
	for (uint64_t i = 0; i < n; i++)
		if (a[i] != b[i])
			return i;
	return n;
}

/* ---- generic block helpers (any target, freestanding) ---- */

typedef struct cls_generic {
	uint8_t v[64];
	unsigned n;
} cls_generic;

/* Each byte of x replaced by the number of its set bits. */
static inline uint64_t byte_counts_generic(uint64_t x)
{
	x = x - ((x >> 1) & 0x5555555555555555ull);
	x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
	return (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0Full;
}

static inline unsigned popcnt_generic(uint64_t x)
{
	return (unsigned)((byte_counts_generic(x) * 0x0101010101010101ull) >> 56);
}

/* The index of the r-th set bit of m (r < popcount(m)), without
 * branches: the byte that holds it is the first whose running popcount
 * exceeds r (bytes compared eight at a time; the counts never exceed 64,
 * so no byte borrows from the next), then a table look-up in that byte. */
static inline unsigned select_generic(uint64_t m, unsigned r)
{
	const uint64_t L = 0x0101010101010101ull, H = 0x8080808080808080ull;
	/* byte i: the set bits in bytes 0..i */
	const uint64_t run = byte_counts_generic(m) * L;
	const unsigned byte = (unsigned)__builtin_ctzll(((run | H) - (r + 1) * L) & H) / 8;
	const unsigned k = r - (unsigned)(((run << 8) >> (8 * byte)) & 0xFF);
	return 8 * byte + bfp_select8[(m >> (8 * byte)) & 0xFF][k];
}

static inline cls_generic classes_generic(const uint16_t *b, unsigned n)
{
	cls_generic k;
	k.n = n;
	for (unsigned l = 0; l < n; l++)
		k.v[l] = (uint8_t)bfp_class(b[l]);
	return k;
}

/* A row of 16 per-class counts (scan_tmpl.h), kept in memory. */
typedef struct run16 {
	uint16_t v[BFP_CLASSES];
} run16;

static inline run16 run_zero_generic(void)
{
	run16 r;
	BFP_MEMSET(&r, 0, sizeof(r));
	return r;
}

static inline void run_store_generic(run16 r, uint16_t *dst)
{
	BFP_MEMCPY(dst, r.v, sizeof(r.v));
}

/* Store the counts before this block in row, return them with its
 * elements added. */
static inline run16 count_row_generic(const cls_generic *k, run16 r, uint16_t *row)
{
	BFP_MEMCPY(row, r.v, sizeof(r.v));
	for (unsigned l = 0; l < k->n; l++)
		r.v[k->v[l]]++;
	return r;
}

/* Rows of counts per block to one line per class (scan_tmpl.h). */
static inline void transpose_generic(uint16_t rows[][BFP_CLASSES],
				     uint16_t cols[][BFP_SCAN_CHUNK / 64])
{
	for (unsigned k = 0; k < BFP_SCAN_CHUNK / 64; k++)
		for (unsigned c = 0; c < BFP_CLASSES; c++)
			cols[c][k] = rows[k][c];
}

static inline void cls_store_generic(uint8_t *dst, cls_generic k)
{
	for (unsigned l = 0; l < 64; l++)
		dst[l] = l < k.n ? k.v[l] : 0xFF;
}

/* The lanes of a 64-byte block equal to c, eight bytes a word: a byte
 * of x = word ^ c is zero where they match; its high bit is set by the
 * exact zero-byte test, and a multiply gathers the eight high bits. */
static inline uint64_t cmask_mem_generic(const uint8_t *src, unsigned c)
{
	const uint64_t lo7 = 0x7F7F7F7F7F7F7F7Full, cc = 0x0101010101010101ull * (c & 0xFF);
	uint64_t m = 0;
	for (unsigned w = 0; w < 8; w++) {
		uint64_t v;
		BFP_MEMCPY(&v, src + 8 * w, 8);
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
		v = __builtin_bswap64(v);
#endif
		const uint64_t x = v ^ cc;
		const uint64_t z = ~(((x & lo7) + lo7) | x | lo7); /* 0x80 where x's byte is 0 */
		m |= (((z >> 7) * 0x0102040810204080ull) >> 56) << (8 * w);
	}
	return m;
}

static inline uint64_t neq_generic(const uint16_t *a, const uint16_t *b,
				   unsigned n)
{
	uint64_t m = 0;
	for (unsigned l = 0; l < n; l++)
		m |= (uint64_t)(a[l] != b[l]) << l;
	return m;
}

/* How many of the 64 block counts are at most r: they never decrease
 * (0xFFFF past the chunk's end), so a search without branches. */
static inline unsigned blocks_upto_generic(const uint16_t *before, unsigned r)
{
	unsigned n = 0;
	for (unsigned half = BFP_SCAN_CHUNK / 128; half; half /= 2)
		n += (before[n + half - 1] <= r) ? half : 0;
	return n + (before[n] <= r);
}

#define T_ATTR
#define T_NAME(x) x##_generic
#define t_blocks_upto blocks_upto_generic
#define T_CLS cls_generic
#define T_RUN run16
#define t_classes classes_generic
#define t_run_zero run_zero_generic
#define t_run_store run_store_generic
#define t_count_row(k, r, row) count_row_generic(&(k), (r), (row))
#define t_transpose transpose_generic
#define t_cls_store cls_store_generic
#define t_cmask_mem cmask_mem_generic
#define t_neq neq_generic
#define t_popcnt popcnt_generic
#define t_select select_generic
#include "scan_tmpl.h"
#include "scan_undef.h"

#ifdef BFP_X86
/* ---- AVX2 block helpers (x86 without AVX-512BW: AMD Zen 1-3, Intel
 * client cores). The select is the portable one, or one pdep where pdep
 * is fast (BFP_CPU_PDEP, the _avx2p functions below). ---- */
#define AVX2_ATTR __attribute__((target("avx2,popcnt")))
#define AVX2_INLINE AVX2_ATTR static inline __attribute__((always_inline))

typedef struct cls_avx2 {
	__m256i lo, hi; /* class bytes of lanes 0-31 and 32-63 */
} cls_avx2;

/* 16-bit lanes to bytes in lane order: a pack interleaves the 128-bit
 * halves of its two sources, the permute puts them back. */
AVX2_INLINE __m256i pack_bytes_avx2(__m256i a, __m256i b)
{
	return _mm256_permute4x64_epi64(_mm256_packus_epi16(a, b), 0xD8);
}

AVX2_INLINE __m256i class32_avx2(const uint16_t *b)
{
	const __m256i ff = _mm256_set1_epi16(0xFF);
	__m256i e0 = _mm256_and_si256(_mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)b), 7), ff);
	__m256i e1 = _mm256_and_si256(
		_mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)(b + 16)), 7), ff);
	return _mm256_min_epu8(_mm256_subs_epu8(pack_bytes_avx2(e0, e1),
						_mm256_set1_epi8((char)BFP_CLASS_EXP0)),
			       _mm256_set1_epi8(15));
}

/* Class bytes of 64 values; lanes past n hold 0xFF, matching no class. */
AVX2_INLINE cls_avx2 classes_avx2(const uint16_t *b, unsigned n)
{
	cls_avx2 k;
	if (BFP_LIKELY(n >= 64)) {
		k.lo = class32_avx2(b);
		k.hi = class32_avx2(b + 32);
		return k;
	}
	uint16_t tmp[64] __attribute__((aligned(32)));
	BFP_MEMSET(tmp, 0, sizeof(tmp));
	BFP_MEMCPY(tmp, b, (size_t)n * 2);
	const __m256i idx = _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
					     17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31);
	const __m256i nn = _mm256_set1_epi8((char)n), n32 = _mm256_set1_epi8((char)(n - 32));
	/* 0xFF in the lanes at or past n */
	__m256i past_lo = _mm256_cmpeq_epi8(_mm256_min_epu8(nn, idx), nn);
	__m256i past_hi = n >= 32 ? _mm256_cmpeq_epi8(_mm256_min_epu8(n32, idx), n32)
				  : _mm256_set1_epi8((char)0xFF);
	k.lo = _mm256_or_si256(class32_avx2(tmp), past_lo);
	k.hi = _mm256_or_si256(class32_avx2(tmp + 32), past_hi);
	return k;
}

AVX2_INLINE uint64_t cmask_avx2(cls_avx2 k, unsigned c)
{
	const __m256i v = _mm256_set1_epi8((char)c);
	return (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(k.lo, v)) |
	       ((uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(k.hi, v)) << 32);
}

AVX2_INLINE void cls_store_avx2(uint8_t *dst, cls_avx2 k)
{
	_mm256_store_si256((__m256i *)dst, k.lo);
	_mm256_store_si256((__m256i *)(dst + 32), k.hi);
}

AVX2_INLINE uint64_t cmask_mem_avx2(const uint8_t *src, unsigned c)
{
	cls_avx2 k = {_mm256_load_si256((const __m256i *)src),
		      _mm256_load_si256((const __m256i *)(src + 32))};
	return cmask_avx2(k, c);
}

AVX2_INLINE uint32_t eq32_avx2(const uint16_t *a, const uint16_t *b)
{
	__m256i e0 = _mm256_cmpeq_epi16(_mm256_loadu_si256((const __m256i *)a),
					_mm256_loadu_si256((const __m256i *)b));
	__m256i e1 = _mm256_cmpeq_epi16(_mm256_loadu_si256((const __m256i *)(a + 16)),
					_mm256_loadu_si256((const __m256i *)(b + 16)));
	/* packs keeps 0 and -1 */
	return (uint32_t)_mm256_movemask_epi8(
		_mm256_permute4x64_epi64(_mm256_packs_epi16(e0, e1), 0xD8));
}

AVX2_INLINE uint64_t neq_avx2(const uint16_t *a, const uint16_t *b, unsigned n)
{
	if (BFP_LIKELY(n >= 64))
		return ~((uint64_t)eq32_avx2(a, b) | ((uint64_t)eq32_avx2(a + 32, b + 32) << 32));
	return neq_generic(a, b, n);
}

/* How many of the 64 block counts are at most r (a count c is at most r
 * where min(c, r) == c); order does not matter, so no permute. */
AVX2_INLINE unsigned blocks_upto_avx2(const uint16_t *before, unsigned r)
{
	const __m256i v = _mm256_set1_epi16((short)r);
	__m256i le[4];
	for (unsigned j = 0; j < 4; j++) {
		__m256i x = _mm256_load_si256((const __m256i *)(before + 16 * j));
		le[j] = _mm256_cmpeq_epi16(_mm256_min_epu16(x, v), x);
	}
	return (unsigned)__builtin_popcount((unsigned)_mm256_movemask_epi8(
		       _mm256_packs_epi16(le[0], le[1]))) +
	       (unsigned)__builtin_popcount((unsigned)_mm256_movemask_epi8(
		       _mm256_packs_epi16(le[2], le[3])));
}

AVX2_INLINE unsigned popcnt_avx2(uint64_t x)
{
	return (unsigned)__builtin_popcountll(x);
}

/* The index of the r-th set bit of m: one pdep (AVX-512 paths, and AVX2
 * where pdep is fast). */
__attribute__((target("bmi2"))) static inline __attribute__((always_inline)) unsigned
select_pdep(uint64_t m, unsigned r)
{
	return (unsigned)__builtin_ctzll(_pdep_u64(1ull << r, m));
}

AVX2_INLINE run16 count_row_avx2(cls_avx2 k, run16 r, uint16_t *row)
{
	BFP_MEMCPY(row, r.v, sizeof(r.v));
	for (unsigned c = 0; c < BFP_CLASSES; c++)
		r.v[c] = (uint16_t)(r.v[c] + __builtin_popcountll(cmask_avx2(k, c)));
	return r;
}

/* Counts of 16 classes in one 256-bit register (the gather's on AVX2,
 * all of them with GFNI) */
AVX2_INLINE __m256i run_zero_v256(void)
{
	return _mm256_setzero_si256();
}

AVX2_INLINE void run_store_v256(__m256i r, uint16_t *dst)
{
	_mm256_store_si256((__m256i *)dst, r);
}

/* The gather's counts of a block, all 16 as one vector and with vector
 * instructions only (the gather's own loop keeps the scalar ports busy,
 * so there this is 11-13% faster; the count passes of decode run faster
 * with the movemask and popcount above): per class, the lanes that match
 * (0 - 0xFF is 1) summed by psadbw to four 64-bit partial sums, four
 * classes' sums packed into the 16-bit fields of each, then the partial
 * sums added across lanes. */
AVX2_INLINE __m256i gcount_row_avx2(cls_avx2 k, __m256i r, uint16_t *row)
{
	_mm256_store_si256((__m256i *)row, r);
	const __m256i z = _mm256_setzero_si256();
	__m256i q[4];
	for (unsigned g = 0; g < 4; g++) {
		__m256i acc = z;
		for (unsigned j = 0; j < 4; j++) {
			const __m256i v = _mm256_set1_epi8((char)(4 * g + j));
			__m256i s = _mm256_sub_epi8(_mm256_sub_epi8(z, _mm256_cmpeq_epi8(k.lo, v)),
						    _mm256_cmpeq_epi8(k.hi, v));
			acc = _mm256_or_si256(acc, _mm256_slli_epi64(_mm256_sad_epu8(s, z), 16 * j));
		}
		q[g] = acc; /* 64-bit lane i: classes 4g..4g+3 of lanes 8i..8i+7, 32+8i.. */
	}
	__m256i x = _mm256_add_epi64(_mm256_unpacklo_epi64(q[0], q[1]),
				     _mm256_unpackhi_epi64(q[0], q[1]));
	__m256i y = _mm256_add_epi64(_mm256_unpacklo_epi64(q[2], q[3]),
				     _mm256_unpackhi_epi64(q[2], q[3]));
	return _mm256_add_epi16(r, _mm256_add_epi64(_mm256_permute2x128_si256(x, y, 0x20),
						    _mm256_permute2x128_si256(x, y, 0x31)));
}

#define T_ATTR AVX2_ATTR
#define T_NAME(x) x##_avx2
#define T_CLS cls_avx2
#define T_RUN run16
#define T_GRUN __m256i
#define t_grun_zero run_zero_v256
#define t_grun_store run_store_v256
#define t_gcount_row gcount_row_avx2
#define t_classes classes_avx2
#define t_run_zero run_zero_generic
#define t_run_store run_store_generic
#define t_count_row count_row_avx2
#define t_transpose transpose_generic
#define t_cls_store cls_store_avx2
#define t_cmask_mem cmask_mem_avx2
#define t_neq neq_avx2
#define t_popcnt popcnt_avx2
#define t_select select_generic
#define t_blocks_upto blocks_upto_avx2
#include "scan_tmpl.h"
#undef T_ATTR
#undef T_NAME
#undef t_select

/* AVX2 where pdep is fast (BFP_CPU_PDEP): the select is one pdep. Only
 * positions selects, so only it is compiled again (the gathers and
 * counts are the _avx2 ones whatever BFP_CPU_PDEP says). */
#define T_ATTR __attribute__((target("avx2,popcnt,bmi2")))
#define T_NAME(x) x##_avx2p
#define t_select select_pdep
#define T_POSITIONS_ONLY
#include "scan_tmpl.h"
#undef T_POSITIONS_ONLY
#include "scan_undef.h"

_Static_assert(BFP_SCAN_CHUNK == 64 * 64, "blocks_upto_avx512 compares 64 block counts");
#define AVX512_ATTR __attribute__((target("avx512f,avx512bw,bmi2,popcnt")))
#define AVX512_INLINE AVX512_ATTR static inline __attribute__((always_inline))

static inline __mmask64 lanes64(unsigned n)
{
	return n >= 64 ? ~0ull : ((1ull << n) - 1);
}

/* Class bytes of 64 values (lanes past n hold 0xFF, matching no class):
 * the exponent byte of each word, saturating-minus EXP0, capped at 15. */
AVX512_INLINE __m512i classes_avx512(const uint16_t *b, unsigned n)
{
	__mmask64 lanes = lanes64(n);
	__m512i lo, hi;
	if (BFP_LIKELY(n >= 64)) { /* plain loads: masked ones are slower */
		lo = _mm512_loadu_si512((const void *)b);
		hi = _mm512_loadu_si512((const void *)(b + 32));
	} else {
		lo = _mm512_maskz_loadu_epi16((__mmask32)lanes, b);
		hi = _mm512_maskz_loadu_epi16((__mmask32)(lanes >> 32), b + 32);
	}
	__m256i elo = _mm512_cvtepi16_epi8(_mm512_srli_epi16(lo, 7));
	__m256i ehi = _mm512_cvtepi16_epi8(_mm512_srli_epi16(hi, 7));
	__m512i e = _mm512_inserti64x4(_mm512_castsi256_si512(elo), ehi, 1);
	__m512i c = _mm512_min_epu8(_mm512_subs_epu8(e, _mm512_set1_epi8((char)BFP_CLASS_EXP0)),
				    _mm512_set1_epi8(15));
	return n >= 64 ? c : _mm512_mask_blend_epi8(lanes, _mm512_set1_epi8((char)0xFF), c);
}

AVX512_INLINE uint64_t cmask_avx512(__m512i k, unsigned c)
{
	return _mm512_cmpeq_epi8_mask(k, _mm512_set1_epi8((char)c));
}

AVX512_INLINE void cls_store_avx512(uint8_t *dst, __m512i k)
{
	_mm512_store_si512((void *)dst, k);
}

AVX512_INLINE uint64_t cmask_mem_avx512(const uint8_t *src, unsigned c)
{
	return _mm512_cmpeq_epi8_mask(_mm512_load_si512((const void *)src),
				      _mm512_set1_epi8((char)c));
}

AVX512_INLINE uint64_t neq_avx512(const uint16_t *a, const uint16_t *b, unsigned n)
{
	if (BFP_LIKELY(n >= 64)) {
		uint64_t m0 = _mm512_cmpneq_epi16_mask(_mm512_loadu_si512((const void *)a),
						       _mm512_loadu_si512((const void *)b));
		uint64_t m1 = _mm512_cmpneq_epi16_mask(_mm512_loadu_si512((const void *)(a + 32)),
						       _mm512_loadu_si512((const void *)(b + 32)));
		return m0 | (m1 << 32);
	}
	__mmask64 lanes = lanes64(n);
	__mmask32 l0 = (__mmask32)lanes, l1 = (__mmask32)(lanes >> 32);
	uint64_t m0 = _mm512_mask_cmpneq_epi16_mask(l0, _mm512_maskz_loadu_epi16(l0, a),
						    _mm512_maskz_loadu_epi16(l0, b));
	uint64_t m1 = _mm512_mask_cmpneq_epi16_mask(l1, _mm512_maskz_loadu_epi16(l1, a + 32),
						    _mm512_maskz_loadu_epi16(l1, b + 32));
	return m0 | (m1 << 32);
}

AVX512_INLINE unsigned blocks_upto_avx512(const uint16_t *before, unsigned r)
{
	__m512i v = _mm512_set1_epi16((short)r);
	uint64_t lo = _mm512_cmple_epu16_mask(_mm512_load_si512((const void *)before), v);
	uint64_t hi = _mm512_cmple_epu16_mask(_mm512_load_si512((const void *)(before + 32)), v);
	return (unsigned)__builtin_popcountll(lo | (hi << 32));
}

AVX512_INLINE unsigned popcnt_avx512(uint64_t x)
{
	return (unsigned)__builtin_popcountll(x);
}

/* Rows of counts (block k: 16 classes) to lines (class c: 64 blocks), 16
 * blocks at a time: eight registers of two rows each go through three
 * rounds of two-register word permutes; each round splits the classes of
 * a pair by one class bit (8, then 4, then 2) and joins their rows, so
 * register j ends with two classes (bit-reversed j) over 16 blocks. */
static const uint16_t transpose_idx[3][2][32] __attribute__((aligned(64))) = {
	{{0, 16, 32, 48, 1, 17, 33, 49, 2, 18, 34, 50, 3, 19, 35, 51,
	  4, 20, 36, 52, 5, 21, 37, 53, 6, 22, 38, 54, 7, 23, 39, 55},
	 {8, 24, 40, 56, 9, 25, 41, 57, 10, 26, 42, 58, 11, 27, 43, 59,
	  12, 28, 44, 60, 13, 29, 45, 61, 14, 30, 46, 62, 15, 31, 47, 63}},
	{{0, 1, 2, 3, 32, 33, 34, 35, 4, 5, 6, 7, 36, 37, 38, 39,
	  8, 9, 10, 11, 40, 41, 42, 43, 12, 13, 14, 15, 44, 45, 46, 47},
	 {16, 17, 18, 19, 48, 49, 50, 51, 20, 21, 22, 23, 52, 53, 54, 55,
	  24, 25, 26, 27, 56, 57, 58, 59, 28, 29, 30, 31, 60, 61, 62, 63}},
	{{0, 1, 2, 3, 4, 5, 6, 7, 32, 33, 34, 35, 36, 37, 38, 39,
	  8, 9, 10, 11, 12, 13, 14, 15, 40, 41, 42, 43, 44, 45, 46, 47},
	 {16, 17, 18, 19, 20, 21, 22, 23, 48, 49, 50, 51, 52, 53, 54, 55,
	  24, 25, 26, 27, 28, 29, 30, 31, 56, 57, 58, 59, 60, 61, 62, 63}},
};

AVX512_INLINE void transpose_avx512(uint16_t rows[][BFP_CLASSES],
				    uint16_t cols[][BFP_SCAN_CHUNK / 64])
{
	_Static_assert(BFP_CLASSES == 16, "transpose_avx512 moves 16 classes");
	for (unsigned g = 0; g < BFP_SCAN_CHUNK / 64; g += 16) {
		__m512i z[8];
		for (unsigned j = 0; j < 8; j++)
			z[j] = _mm512_load_si512((const void *)rows[g + 2 * j]);
		for (unsigned round = 0, bit = 1; round < 3; round++, bit <<= 1) {
			const __m512i ia = _mm512_load_si512((const void *)transpose_idx[round][0]);
			const __m512i ib = _mm512_load_si512((const void *)transpose_idx[round][1]);
			for (unsigned j = 0; j < 8; j++) {
				if (j & bit)
					continue;
				__m512i x = z[j], y = z[j | bit];
				z[j] = _mm512_permutex2var_epi16(x, ia, y);
				z[j | bit] = _mm512_permutex2var_epi16(x, ib, y);
			}
		}
		for (unsigned j = 0; j < 8; j++) {
			unsigned c = 2 * (((j & 1) << 2) | (j & 2) | (j >> 2));
			_mm256_store_si256((__m256i *)(cols[c] + g), _mm512_castsi512_si256(z[j]));
			_mm256_store_si256((__m256i *)(cols[c + 1] + g),
					   _mm512_extracti64x4_epi64(z[j], 1));
		}
	}
}

/* AVX-512BW: counts of a block one class at a time. */
AVX512_INLINE run16 count_row_avx512(__m512i k, run16 r, uint16_t *row)
{
	BFP_MEMCPY(row, r.v, sizeof(r.v));
	for (unsigned c = 0; c < BFP_CLASSES; c++)
		r.v[c] = (uint16_t)(r.v[c] + __builtin_popcountll(cmask_avx512(k, c)));
	return r;
}

#define T_ATTR AVX512_ATTR
#define T_NAME(x) x##_avx512
#define T_CLS __m512i
#define T_RUN run16
#define t_classes classes_avx512
#define t_run_zero run_zero_generic
#define t_run_store run_store_generic
#define t_count_row count_row_avx512
#define t_transpose transpose_avx512
#define t_cls_store cls_store_avx512
#define t_cmask_mem cmask_mem_avx512
#define t_neq neq_avx512
#define t_popcnt popcnt_avx512
#define t_select select_pdep
#define t_blocks_upto blocks_upto_avx512
#define t_low(m, l) _bzhi_u64((m), (l)) /* BMI2, which both AVX-512 paths have */
#include "scan_tmpl.h"
#undef T_ATTR
#undef T_NAME
#undef T_RUN
#undef t_run_zero
#undef t_run_store
#undef t_count_row

/* With GFNI and AVX512-BITALG, all 16 counts of a block at once: each
 * class byte becomes one bit (classes 0-7 in one register, 8-15 in
 * another), an affine transform transposes the 8x8 bit matrix of each
 * 8-byte group so that byte c holds the group's bits of class c, and a
 * byte popcount and three adds across groups leave 16 byte counts. */
#define AVX512G_ATTR __attribute__((target("avx512f,avx512bw,gfni,avx512bitalg,bmi2,popcnt")))
#define AVX512G_INLINE AVX512G_ATTR static inline __attribute__((always_inline))

AVX512G_INLINE __m128i count16_avx512g(__m512i k)
{
	const __m512i lut_lo = _mm512_broadcast_i32x4(
		_mm_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 0, 0, 0, 0, 0, 0, 0, 0));
	const __m512i lut_hi = _mm512_broadcast_i32x4(
		_mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 4, 8, 16, 32, 64, -128));
	const __m512i unit = _mm512_set1_epi64(0x8040201008040201ll);
	/* class bytes 0xFF (lanes past the end) select nothing */
	__m512i lo = _mm512_shuffle_epi8(lut_lo, k), hi = _mm512_shuffle_epi8(lut_hi, k);
	__m512i p = _mm512_popcnt_epi8(_mm512_gf2p8affine_epi64_epi8(unit, lo, 0));
	__m512i q = _mm512_popcnt_epi8(_mm512_gf2p8affine_epi64_epi8(unit, hi, 0));
	__m512i s = _mm512_add_epi8(_mm512_unpacklo_epi64(p, q), _mm512_unpackhi_epi64(p, q));
	__m256i t = _mm256_add_epi8(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
	return _mm_add_epi8(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
}

AVX512G_INLINE __m256i count_row_avx512g(__m512i k, __m256i r, uint16_t *row)
{
	_mm256_store_si256((__m256i *)row, r);
	return _mm256_add_epi16(r, _mm256_cvtepu8_epi16(count16_avx512g(k)));
}

#define T_ATTR AVX512G_ATTR
#define T_NAME(x) x##_avx512g
#define T_RUN __m256i
#define t_run_zero run_zero_v256
#define t_run_store run_store_v256
#define t_count_row count_row_avx512g
#include "scan_tmpl.h"
#include "scan_undef.h"
#endif

#ifdef BFP_NEON
/* ---- AArch64 Advanced SIMD block helpers (Grace, BlueField and other
 * Arm cores). NEON has no byte mask, so masks are built by a weighted
 * pairwise add (each byte's bit times its lane's bit value). ---- */
#define NEON_INLINE static inline __attribute__((always_inline))

typedef struct cls_neon {
	uint8x16_t v[4]; /* class bytes of lanes 0-15, ..., 48-63 */
} cls_neon;

typedef struct run_neon {
	uint16x8_t lo, hi; /* counts of classes 0-7 and 8-15 */
} run_neon;

/* The exponent byte of 16 values is the low byte of each value >> 7. */
NEON_INLINE uint8x16_t class16_neon(const uint16_t *b)
{
	uint8x16_t e = vshrn_high_n_u16(vshrn_n_u16(vld1q_u16(b), 7), vld1q_u16(b + 8), 7);
	return vminq_u8(vqsubq_u8(e, vdupq_n_u8(BFP_CLASS_EXP0)), vdupq_n_u8(15));
}

/* Class bytes of 64 values; lanes past n hold 0xFF, matching no class. */
NEON_INLINE cls_neon classes_neon(const uint16_t *b, unsigned n)
{
	cls_neon k;
	if (BFP_LIKELY(n >= 64)) {
		for (unsigned j = 0; j < 4; j++)
			k.v[j] = class16_neon(b + 16 * j);
		return k;
	}
	uint16_t tmp[64];
	BFP_MEMSET(tmp, 0, sizeof(tmp));
	BFP_MEMCPY(tmp, b, (size_t)n * 2);
	static const uint8_t lane[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
	const uint8x16_t idx = vld1q_u8(lane);
	for (unsigned j = 0; j < 4; j++) {
		const uint8x16_t at = vaddq_u8(idx, vdupq_n_u8((uint8_t)(16 * j)));
		k.v[j] = vorrq_u8(class16_neon(tmp + 16 * j), vcgeq_u8(at, vdupq_n_u8((uint8_t)n)));
	}
	return k;
}

/* 64 bytes of 0 or 0xFF to a 64-bit mask, lane i at bit i. */
NEON_INLINE uint64_t mask64_neon(uint8x16_t a, uint8x16_t b, uint8x16_t c, uint8x16_t d)
{
	static const uint8_t w[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
	const uint8x16_t bit = vld1q_u8(w);
	uint8x16_t ab = vpaddq_u8(vandq_u8(a, bit), vandq_u8(b, bit));
	uint8x16_t cd = vpaddq_u8(vandq_u8(c, bit), vandq_u8(d, bit));
	uint8x16_t x = vpaddq_u8(ab, cd);
	return vgetq_lane_u64(vreinterpretq_u64_u8(vpaddq_u8(x, x)), 0);
}

NEON_INLINE uint64_t cmask_neon(const cls_neon *k, unsigned c)
{
	const uint8x16_t v = vdupq_n_u8((uint8_t)c);
	return mask64_neon(vceqq_u8(k->v[0], v), vceqq_u8(k->v[1], v), vceqq_u8(k->v[2], v),
			   vceqq_u8(k->v[3], v));
}

NEON_INLINE void cls_store_neon(uint8_t *dst, cls_neon k)
{
	for (unsigned j = 0; j < 4; j++)
		vst1q_u8(dst + 16 * j, k.v[j]);
}

NEON_INLINE uint64_t cmask_mem_neon(const uint8_t *src, unsigned c)
{
	cls_neon k;
	for (unsigned j = 0; j < 4; j++)
		k.v[j] = vld1q_u8(src + 16 * j);
	return cmask_neon(&k, c);
}

NEON_INLINE uint8x16_t eq16_neon(const uint16_t *a, const uint16_t *b)
{
	return vcombine_u8(vmovn_u16(vceqq_u16(vld1q_u16(a), vld1q_u16(b))),
			   vmovn_u16(vceqq_u16(vld1q_u16(a + 8), vld1q_u16(b + 8))));
}

NEON_INLINE uint64_t neq_neon(const uint16_t *a, const uint16_t *b, unsigned n)
{
	if (BFP_LIKELY(n >= 64))
		return ~mask64_neon(eq16_neon(a, b), eq16_neon(a + 16, b + 16),
				    eq16_neon(a + 32, b + 32), eq16_neon(a + 48, b + 48));
	return neq_generic(a, b, n);
}

/* How many of the 64 block counts are at most r: each compare is 0 or
 * 0xFFFF, so their sum is minus the count. */
NEON_INLINE unsigned blocks_upto_neon(const uint16_t *before, unsigned r)
{
	const uint16x8_t v = vdupq_n_u16((uint16_t)r);
	uint16x8_t s = vdupq_n_u16(0);
	for (unsigned j = 0; j < 8; j++)
		s = vsubq_u16(s, vcleq_u16(vld1q_u16(before + 8 * j), v));
	return vaddvq_u16(s);
}

NEON_INLINE unsigned popcnt_neon(uint64_t x)
{
	return (unsigned)vaddv_u8(vcnt_u8(vcreate_u8(x)));
}

NEON_INLINE run_neon run_zero_neon(void)
{
	run_neon r = {vdupq_n_u16(0), vdupq_n_u16(0)};
	return r;
}

NEON_INLINE void run_store_neon(run_neon r, uint16_t *dst)
{
	vst1q_u16(dst, r.lo);
	vst1q_u16(dst + 8, r.hi);
}

/* All 16 counts of a block: per class, the lanes that match (0 - 0xFF
 * is 1) summed to 16 bytes of at most 4, then four rounds of pairwise
 * adds fold the 16 classes' vectors to one byte each. */
NEON_INLINE run_neon count_row_neon(cls_neon k, run_neon r, uint16_t *row)
{
	run_store_neon(r, row);
	uint8x16_t s[BFP_CLASSES];
	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		const uint8x16_t v = vdupq_n_u8((uint8_t)c);
		uint8x16_t x = vaddq_u8(vceqq_u8(k.v[0], v), vceqq_u8(k.v[1], v));
		uint8x16_t y = vaddq_u8(vceqq_u8(k.v[2], v), vceqq_u8(k.v[3], v));
		s[c] = vsubq_u8(vdupq_n_u8(0), vaddq_u8(x, y));
	}
	for (unsigned w = BFP_CLASSES; w > 1; w /= 2)
		for (unsigned c = 0; c < w / 2; c++)
			s[c] = vpaddq_u8(s[2 * c], s[2 * c + 1]);
	r.lo = vaddw_u8(r.lo, vget_low_u8(s[0]));
	r.hi = vaddw_high_u8(r.hi, s[0]);
	return r;
}

#define T_ATTR
#define T_NAME(x) x##_neon
#define T_CLS cls_neon
#define T_RUN run_neon
#define t_classes classes_neon
#define t_run_zero run_zero_neon
#define t_run_store run_store_neon
#define t_count_row count_row_neon
#define t_transpose transpose_generic
#define t_cls_store cls_store_neon
#define t_cmask_mem cmask_mem_neon
#define t_neq neq_neon
#define t_popcnt popcnt_neon
#define t_select select_generic
#define t_blocks_upto blocks_upto_neon
#include "scan_tmpl.h"
#include "scan_undef.h"
#endif

uint64_t bfp_gather_snap(bfp_enc *e, uint64_t end)
{
#ifdef BFP_X86
	if (e->cpu & BFP_CPU_AVX512BW)
		return (e->cpu & BFP_CPU_GFNI) ? gather_snap_avx512g(e, end)
					       : gather_snap_avx512(e, end);
	if (e->cpu & BFP_CPU_AVX2)
		return gather_snap_avx2(e, end);
#elif defined(BFP_NEON)
	if (e->cpu & BFP_CPU_NEON)
		return gather_snap_neon(e, end);
#endif
	return gather_snap_generic(e, end);
}

uint64_t bfp_gather(bfp_enc *e, uint64_t end, uint64_t limit_bits)
{
#ifdef BFP_X86
	if (e->cpu & BFP_CPU_AVX512BW)
		return (e->cpu & BFP_CPU_GFNI) ? gather_avx512g(e, end, limit_bits)
					       : gather_avx512(e, end, limit_bits);
	if (e->cpu & BFP_CPU_AVX2)
		return gather_avx2(e, end, limit_bits);
#elif defined(BFP_NEON)
	if (e->cpu & BFP_CPU_NEON)
		return gather_neon(e, end, limit_bits);
#endif
	return gather_generic(e, end, limit_bits);
}

void bfp_class_counts(uint32_t cpu, const uint16_t *base, uint64_t n,
		      uint64_t cnt[BFP_CLASSES])
{
	(void)cpu;
#ifdef BFP_X86
	if (cpu & BFP_CPU_AVX512BW) {
		if (cpu & BFP_CPU_GFNI)
			class_counts_avx512g(base, n, cnt);
		else
			class_counts_avx512(base, n, cnt);
		return;
	}
	if (cpu & BFP_CPU_AVX2) {
		class_counts_avx2(base, n, cnt);
		return;
	}
#elif defined(BFP_NEON)
	if (cpu & BFP_CPU_NEON) {
		class_counts_neon(base, n, cnt);
		return;
	}
#endif
	class_counts_generic(base, n, cnt);
}

bfp_status bfp_positions(uint32_t cpu, const uint16_t *base, uint32_t len,
			 const uint32_t start[BFP_CLASSES + 1],
			 const uint32_t *gaps, const uint16_t *steps,
			 uint32_t *pos, uint16_t *val)
{
	(void)cpu;
#ifdef BFP_X86
	if (cpu & BFP_CPU_AVX512BW)
		return (cpu & BFP_CPU_GFNI)
			       ? positions_avx512g(base, len, start, gaps, steps, pos, val)
			       : positions_avx512(base, len, start, gaps, steps, pos, val);
	if (cpu & BFP_CPU_AVX2)
		return (cpu & BFP_CPU_PDEP)
			       ? positions_avx2p(base, len, start, gaps, steps, pos, val)
			       : positions_avx2(base, len, start, gaps, steps, pos, val);
#elif defined(BFP_NEON)
	if (cpu & BFP_CPU_NEON)
		return positions_neon(base, len, start, gaps, steps, pos, val);
#endif
	return positions_generic(base, len, start, gaps, steps, pos, val);
}
