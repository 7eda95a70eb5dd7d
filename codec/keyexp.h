/*
 * keyexp.h: keyframe-exp and keyframe-expm (FORMAT.md 3.10, 3.11): a
 * range's values as their exponents (and with expm the mantissa's top
 * bit) through rANS with a table the frame carries, and the other bits
 * raw.
 */
#ifndef BFP_KEYEXP_H
#define BFP_KEYEXP_H

#include "internal.h"

#define BFP_KEYEXP_MAX 8192u   /* parameters per frame, at most */
#define BFP_KEYEXP_STATES 4u   /* interleaved rANS states */
#define BFP_KEYEXP_CARRY 8u    /* raw bytes the states carry (2 each) */
#define BFP_KEYEXPM_CARRY 17u  /* expm: 7-bit raw fields they carry (30
				  bits each) */
#define BFP_KEYHUF_STREAMS 4u  /* keyframe-huf: bit streams */
#define BFP_KEYHUF_CARRY 36u   /* 7-bit raw fields the streams' last
				  bits carry, at most (4 x 63 bits) */
#define BFP_KEYEXP_SYMS 64u    /* exponents a table names, at most */

/* Scratch of the encoder: its rANS bytes, or keyframe-huf's four
 * streams, each with room for 12 bits a value (codes have at most 11)
 * and 16 bytes more. */
#define BFP_KEYEXP_SCRATCH (4u * ((12u * BFP_KEYEXP_MAX / 4u) / 8u + 16u))
_Static_assert(sizeof(((bfp_enc *)0)->tail) >= BFP_KEYEXP_SCRATCH, "encoder scratch");

/* Code as many of words[0..avail) as fit budget payload bytes into out
 * (budget bytes); returns how many (0: none fit) and sets *len. scratch:
 * BFP_KEYEXP_SCRATCH bytes; cpu: the paths allowed (bfp_cpu_features(),
 * 0 for scalar), which all write the same bytes; m: encoding 8 (1) or 7
 * (0). Canonical. */
uint32_t bfp_keyexp_encode(const uint16_t *words, uint64_t avail, size_t budget, uint8_t *out,
			   size_t *len, uint8_t *scratch, uint32_t cpu, int m);

/* Decode a payload of encoding 7 (m = 0) or 8 (m = 1) of n values into
 * words (n of them), with ks as scratch and cpu the paths allowed
 * (bfp_cpu_features(), 0 for scalar). BFP_E_CORRUPT for anything
 * FORMAT.md 3.10 or 3.11 rejects; words is then unspecified. */
bfp_status bfp_keyexp_decode(const uint8_t *pl, size_t len, uint32_t n, uint16_t *words,
			     bfp_kx_scratch *ks, uint32_t cpu, int m);

#endif
