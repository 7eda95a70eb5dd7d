/*
 * classes.c: the scanning loops of the sparse codec. A class test is an
 * unsigned range compare on the exponent bits, so one subtract and one
 * compare per lane; the vector versions count with popcount of the mask.
 * All versions return identical results (tests force each one).
 */
#include "classes.h"

#if defined(__x86_64__) || defined(__i386__)
#define BFP_X86 1
#include <cpuid.h>
#include <immintrin.h>
#endif

#ifdef BFP_X86
uint32_t bfp_cpu_features(void)
{
	unsigned a, b, c, d;
	uint32_t f = 0;
	if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27)))
		return 0; /* no OSXSAVE */
	unsigned xlo, xhi;
	__asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
	if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
		return 0;
	if ((xlo & 0x6) == 0x6 && (b & (1u << 5)))
		f |= BFP_CPU_AVX2;
	if ((xlo & 0xE6) == 0xE6 && (b & (1u << 16)) && (b & (1u << 30)))
		f |= BFP_CPU_AVX512BW;
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

static inline unsigned popcnt_generic(uint32_t x)
{
	x = x - ((x >> 1) & 0x55555555u);
	x = (x & 0x33333333u) + ((x >> 2) & 0x33333333u);
	x = (x + (x >> 4)) & 0x0F0F0F0Fu;
	return (x * 0x01010101u) >> 24;
}

static inline uint32_t select_generic(uint32_t m, unsigned r)
{
	while (r--)
		m &= m - 1;
	return m & (0u - m);
}

static inline void masks_generic(const uint16_t *b, unsigned n,
				 uint32_t cm[BFP_CLASSES])
{
	BFP_MEMSET(cm, 0, BFP_CLASSES * sizeof(uint32_t));
	for (unsigned l = 0; l < n; l++)
		cm[bfp_class(b[l])] |= 1u << l;
}

static inline uint32_t neq_generic(const uint16_t *a, const uint16_t *b,
				   unsigned n)
{
	uint32_t m = 0;
	for (unsigned l = 0; l < n; l++)
		m |= (uint32_t)(a[l] != b[l]) << l;
	return m;
}

#define T_ATTR
#define T_NAME(x) x##_generic
#define t_masks masks_generic
#define t_neq neq_generic
#define t_popcnt popcnt_generic
#define t_select select_generic
#include "scan_tmpl.h"
#undef T_ATTR
#undef T_NAME
#undef t_masks
#undef t_neq
#undef t_popcnt
#undef t_select

#ifdef BFP_X86
#define AVX512_ATTR __attribute__((target("avx512f,avx512bw,bmi2,popcnt")))

AVX512_ATTR static inline __attribute__((always_inline)) void
masks_avx512(const uint16_t *b, unsigned n, uint32_t cm[BFP_CLASSES])
{
	__mmask32 lanes = n >= 32 ? 0xFFFFFFFFu : ((1u << n) - 1);
	__m512i x = _mm512_maskz_loadu_epi16(lanes, b);
	__m512i e = _mm512_and_si512(x, _mm512_set1_epi16(0x7F80));
	cm[0] = _mm512_mask_cmple_epu16_mask(lanes, e, _mm512_set1_epi16(BFP_CLASS_EXP0 << 7));
	for (unsigned c = 1; c < 15; c++)
		cm[c] = _mm512_mask_cmpeq_epi16_mask(lanes, e,
						     _mm512_set1_epi16((short)((BFP_CLASS_EXP0 + c) << 7)));
	cm[15] = _mm512_mask_cmpge_epu16_mask(lanes, e, _mm512_set1_epi16((BFP_CLASS_EXP0 + 15) << 7));
}

AVX512_ATTR static inline __attribute__((always_inline)) uint32_t
neq_avx512(const uint16_t *a, const uint16_t *b, unsigned n)
{
	__mmask32 lanes = n >= 32 ? 0xFFFFFFFFu : ((1u << n) - 1);
	return _mm512_mask_cmpneq_epi16_mask(lanes, _mm512_maskz_loadu_epi16(lanes, a),
					     _mm512_maskz_loadu_epi16(lanes, b));
}

AVX512_ATTR static inline __attribute__((always_inline)) unsigned
popcnt_avx512(uint32_t x)
{
	return (unsigned)__builtin_popcount(x);
}

AVX512_ATTR static inline __attribute__((always_inline)) uint32_t
select_avx512(uint32_t m, unsigned r)
{
	return _pdep_u32(1u << r, m);
}

#define T_ATTR AVX512_ATTR
#define T_NAME(x) x##_avx512
#define t_masks masks_avx512
#define t_neq neq_avx512
#define t_popcnt popcnt_avx512
#define t_select select_avx512
#include "scan_tmpl.h"
#endif

uint64_t bfp_gather(bfp_encoder *e, uint64_t end, uint64_t limit_bits)
{
#ifdef BFP_X86
	if (e->cpu & BFP_CPU_AVX512BW)
		return gather_avx512(e, end, limit_bits);
#endif
	return gather_generic(e, end, limit_bits);
}

bfp_status bfp_positions(uint32_t cpu, const uint16_t *base, uint32_t len,
			 const uint32_t start[BFP_CLASSES + 1],
			 const uint32_t *gaps, const uint16_t *steps,
			 uint32_t *pos, uint16_t *val)
{
	(void)cpu;
#ifdef BFP_X86
	if (cpu & BFP_CPU_AVX512BW)
		return positions_avx512(base, len, start, gaps, steps, pos, val);
#endif
	return positions_generic(base, len, start, gaps, steps, pos, val);
}
