/*
 * classes.h: scanning primitives over base values: count the elements of
 * one base-exponent class (FORMAT.md 3.3), find the element of a class
 * with a given rank, find the next changed element. These are the inner
 * loops of sparse encode and decode, which walk each class in its own rank
 * space. Each has vector versions, picked at context init from
 * bfp_cpu_features(): AVX-512BW (with GFNI and BITALG or without), AVX2
 * (with a fast pdep or without) on x86, Advanced SIMD on AArch64.
 */
#ifndef BFP_CLASSES_H
#define BFP_CLASSES_H

#include "internal.h"

/* Gather the changes ahead of e->pos up to end into e->chg_* (offset,
 * class, gap in the class's rank space, step); stop once the running
 * size estimate exceeds limit_bits or the scratch is full. Returns the
 * first position not examined. */
uint64_t bfp_gather(bfp_enc *e, uint64_t end, uint64_t limit_bits);

/* Elements between the class-count snapshots of e->bat_snap. */
#define BFP_SNAP_EVERY 8192u
#define BFP_SNAP_MAX (sizeof(((bfp_enc *)0)->bat_snap) / sizeof(((bfp_enc *)0)->bat_snap[0]))

/* bfp_gather with no size limit that also takes a snapshot of the class
 * counts every BFP_SNAP_EVERY elements (e->bat_snap, e->bat_nsnap). */
uint64_t bfp_gather_snap(bfp_enc *e, uint64_t end);

/* The gather's size estimate of a change of gap gap and magnitude m
 * (m >= 1): 1 + (m > 1 ? EG0(m - 2) : 0) + bitlen(gap) + 2. Without
 * branches and in few instructions, as every change takes it: EG0(m - 2)
 * is 2 bitlen(m - 1) - 1 bits, bitlen(v) is log2(2 v + 1) rounded down,
 * and 63 ^ clz is one bsr. */
static inline unsigned bfp_gather_est(uint32_t gap, unsigned m)
{
	const unsigned lm = 63u ^ (unsigned)__builtin_clzll(2ull * m - 1),
		       lg = 63u ^ (unsigned)__builtin_clzll(2ull * gap + 1);
	return 3u + 2u * lm - (unsigned)(m > 1) + lg;
}

/* Add the number of elements of each class among base[0, n) to cnt. */
void bfp_class_counts(uint32_t cpu, const uint16_t *base, uint64_t n,
		      uint64_t cnt[BFP_CLASSES]);

/* Elements per scan chunk; a divisor of the decoder's hash chunk, so
 * changes ordered by scan chunk are in the order the range hash needs. */
#define BFP_SCAN_CHUNK 4096u

/* Decoder: per-class gaps and steps (grouped by class, start[c] ..
 * start[c+1]) to positions and new values, ordered by BFP_SCAN_CHUNK
 * chunk (not within a chunk). */
bfp_status bfp_positions(uint32_t cpu, const uint16_t *base, uint32_t len,
			 const uint32_t start[BFP_CLASSES + 1],
			 const uint32_t *gaps, const uint16_t *steps,
			 uint32_t *pos, uint16_t *val);

/* Smallest i in [0, n) with a[i] != b[i], or n. */
uint64_t bfp_next_diff(const uint16_t *a, const uint16_t *b, uint64_t n,
		       uint32_t cpu);

#endif
