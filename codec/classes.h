/*
 * classes.h: scanning primitives over base values: count the elements of
 * one base-exponent class (FORMAT.md 3.3), find the element of a class
 * with a given rank, find the next changed element. These are the inner
 * loops of sparse encode and decode, which walk each class in its own rank
 * space; x86 builds pick an AVX-512BW or AVX2 version at context init.
 */
#ifndef BFP_CLASSES_H
#define BFP_CLASSES_H

#include "internal.h"

#define BFP_CPU_AVX2 1u
#define BFP_CPU_AVX512BW 2u

/* CPU features usable by the codec (0 on other architectures). */
uint32_t bfp_cpu_features(void);

/* Exponent bounds of class c: c holds exponents [lo, hi] (FORMAT.md 3.3). */
static inline void bfp_class_bounds(unsigned c, unsigned *lo, unsigned *hi)
{
	*lo = c == 0 ? 0u : 112u + c;
	*hi = c == 0 ? 112u : (c == 15 ? 255u : 112u + c);
}

/* Number of elements of v[0..n) of class c. */
uint64_t bfp_count_class(const uint16_t *v, uint64_t n, unsigned c,
			 uint32_t cpu);

/* Index in v of the element of class c preceded by exactly r elements of
 * class c, or n if v[0..n) has no such element. */
uint64_t bfp_find_rank(const uint16_t *v, uint64_t n, unsigned c, uint64_t r,
		       uint32_t cpu);

/* Smallest i in [0, n) with a[i] != b[i], or n. */
uint64_t bfp_next_diff(const uint16_t *a, const uint16_t *b, uint64_t n,
		       uint32_t cpu);

#endif
