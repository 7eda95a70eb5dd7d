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

static inline uint16_t class_off(unsigned c)
{
	unsigned lo, hi;
	bfp_class_bounds(c, &lo, &hi);
	return (uint16_t)(lo << 7);
}

static inline uint16_t class_lim(unsigned c)
{
	unsigned lo, hi;
	bfp_class_bounds(c, &lo, &hi);
	return (uint16_t)((hi - lo) << 7);
}

static inline int in_class(uint16_t x, uint16_t off, uint16_t lim)
{
	return (uint16_t)((x & 0x7F80u) - off) <= lim;
}

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

__attribute__((target("avx512f,avx512bw,popcnt")))
static uint64_t count_avx512(const uint16_t *v, uint64_t n, uint16_t off,
			     uint16_t lim, uint64_t *done)
{
	const __m512i mexp = _mm512_set1_epi16(0x7F80);
	const __m512i moff = _mm512_set1_epi16((short)off);
	const __m512i mlim = _mm512_set1_epi16((short)lim);
	uint64_t i = 0, cnt = 0;
	for (; i + 32 <= n; i += 32) {
		__m512i x = _mm512_loadu_si512((const void *)(v + i));
		x = _mm512_sub_epi16(_mm512_and_si512(x, mexp), moff);
		cnt += (uint64_t)__builtin_popcount(
			_mm512_cmple_epu16_mask(x, mlim));
	}
	*done = i;
	return cnt;
}

__attribute__((target("avx512f,avx512bw,popcnt,bmi2")))
static uint64_t find_avx512(const uint16_t *v, uint64_t n, uint16_t off,
			    uint16_t lim, uint64_t *r, uint64_t *done)
{
	const __m512i mexp = _mm512_set1_epi16(0x7F80);
	const __m512i moff = _mm512_set1_epi16((short)off);
	const __m512i mlim = _mm512_set1_epi16((short)lim);
	uint64_t i = 0;
	for (; i + 32 <= n; i += 32) {
		__m512i x = _mm512_loadu_si512((const void *)(v + i));
		x = _mm512_sub_epi16(_mm512_and_si512(x, mexp), moff);
		uint32_t m = _mm512_cmple_epu16_mask(x, mlim);
		uint64_t pc = (uint64_t)__builtin_popcount(m);
		if (*r < pc) {
			uint32_t bit = (uint32_t)_pdep_u32(1u << *r, m);
			*done = i;
			return i + (uint64_t)__builtin_ctz(bit);
		}
		*r -= pc;
	}
	*done = i;
	return UINT64_MAX;
}

__attribute__((target("avx2,popcnt")))
static uint64_t count_avx2(const uint16_t *v, uint64_t n, uint16_t off,
			   uint16_t lim, uint64_t *done)
{
	const __m256i mexp = _mm256_set1_epi16(0x7F80);
	const __m256i moff = _mm256_set1_epi16((short)off);
	const __m256i mlim = _mm256_set1_epi16((short)lim);
	uint64_t i = 0, cnt = 0;
	for (; i + 16 <= n; i += 16) {
		__m256i x = _mm256_loadu_si256((const __m256i *)(v + i));
		x = _mm256_sub_epi16(_mm256_and_si256(x, mexp), moff);
		__m256i le = _mm256_cmpeq_epi16(_mm256_min_epu16(x, mlim), x);
		cnt += (uint64_t)__builtin_popcount(
			(unsigned)_mm256_movemask_epi8(le));
	}
	*done = i;
	return cnt / 2;
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

uint64_t bfp_count_class(const uint16_t *v, uint64_t n, unsigned c,
			 uint32_t cpu)
{
	uint16_t off = class_off(c), lim = class_lim(c);
	uint64_t i = 0, cnt = 0;
	(void)cpu;
#ifdef BFP_X86
	if (cpu & BFP_CPU_AVX512BW)
		cnt = count_avx512(v, n, off, lim, &i);
	else if (cpu & BFP_CPU_AVX2)
		cnt = count_avx2(v, n, off, lim, &i);
#endif
	for (; i < n; i++)
		cnt += (uint64_t)in_class(v[i], off, lim);
	return cnt;
}

uint64_t bfp_find_rank(const uint16_t *v, uint64_t n, unsigned c, uint64_t r,
		       uint32_t cpu)
{
	uint16_t off = class_off(c), lim = class_lim(c);
	uint64_t i = 0;
	(void)cpu;
#ifdef BFP_X86
	if (cpu & BFP_CPU_AVX512BW) {
		uint64_t at = find_avx512(v, n, off, lim, &r, &i);
		if (at != UINT64_MAX)
			return at;
	}
#endif
	for (; i < n; i++) {
		if (in_class(v[i], off, lim)) {
			if (r == 0)
				return i;
			r--;
		}
	}
	return n;
}

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
