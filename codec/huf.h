/*
 * huf.h: the Huffman code of a keyframe-huf table (FORMAT.md 3.12),
 * which encoder and decoder derive alike from the table's symbol
 * frequencies, so that no code lengths travel: lengths by Huffman's
 * construction with every tie decided by symbol order, limited to
 * BFP_HUF_LMAX bits; canonical codes; the decoder's lookup table.
 */
#ifndef BFP_HUF_H
#define BFP_HUF_H

#include "internal.h"

#define BFP_HUF_LMAX 11u   /* bits of the longest code, and of a lookup */
#define BFP_HUF_SYMS 128u  /* symbols, at most */

/* Code lengths len[0..ns) (2 <= ns <= BFP_HUF_SYMS) of frequencies
 * f[0..ns), each at least 1: leaves sorted by (frequency, symbol), two
 * queues (leaves, then the nodes made in order), the leaf taken on a
 * tie; while the longest length is over BFP_HUF_LMAX, every frequency
 * becomes (f + 1) / 2 and the code is built again. */
static inline void bfp_huf_lengths(const uint16_t *f, unsigned ns, uint8_t *len)
{
	uint32_t key[BFP_HUF_SYMS];
	uint32_t w[2 * BFP_HUF_SYMS];
	uint8_t par[2 * BFP_HUF_SYMS], dep[2 * BFP_HUF_SYMS];
	for (unsigned s = 0; s < ns; s++)
		key[s] = (uint32_t)f[s] << 8 | s;
	for (;;) {
		/* leaves by (frequency, symbol): each key's rank is the number
		 * of keys below it (the keys differ; no branch on the data) */
		uint32_t sorted[BFP_HUF_SYMS];
		for (unsigned s = 0; s < ns; s++) {
			unsigned rank = 0;
			for (unsigned t = 0; t < ns; t++)
				rank += key[t] < key[s];
			sorted[rank] = key[s];
		}
		for (unsigned i = 0; i < ns; i++) {
			key[i] = sorted[i];
			w[i] = sorted[i] >> 8;
		}
		/* nodes 0..ns-1 the sorted leaves, ns.. the merged ones */
		unsigned lf = 0, nd = ns, made = ns;
		for (; made < 2 * ns - 1; made++) {
			unsigned pick[2];
			for (unsigned k = 0; k < 2; k++) {
				if (lf < ns && (nd == made || w[lf] <= w[nd]))
					pick[k] = lf++;
				else
					pick[k] = nd++;
			}
			w[made] = w[pick[0]] + w[pick[1]];
			par[pick[0]] = par[pick[1]] = (uint8_t)(made - ns);
		}
		/* depths from the root (the last node) down */
		unsigned longest = 0;
		dep[ns - 2] = 0;
		for (unsigned i = 2 * ns - 2; i-- > 0;) {
			const unsigned d = dep[par[i]] + 1u;
			if (i >= ns)
				dep[i - ns] = (uint8_t)d;
			else {
				len[key[i] & 0xFFu] = (uint8_t)d;
				longest = d > longest ? d : longest;
			}
		}
		if (longest <= BFP_HUF_LMAX)
			return;
		for (unsigned s = 0; s < ns; s++) {
			const uint32_t h = ((key[s] >> 8) + 1u) / 2u;
			key[s] = h << 8 | (key[s] & 0xFFu);
		}
	}
}

/* Canonical codes of lengths len[0..ns) (a complete code): by length,
 * then symbol, each the one before plus 1, shifted left as the length
 * grows; code[s] holds len[s] bits, the first sent the highest. */
static inline void bfp_huf_codes(const uint8_t *len, unsigned ns, uint16_t *code)
{
	unsigned cnt[BFP_HUF_LMAX + 1] = {0}, next[BFP_HUF_LMAX + 1];
	for (unsigned s = 0; s < ns; s++)
		cnt[len[s]]++;
	unsigned c = 0;
	cnt[0] = 0;
	for (unsigned l = 1; l <= BFP_HUF_LMAX; l++) {
		c = (c + cnt[l - 1]) << 1;
		next[l] = c;
	}
	for (unsigned s = 0; s < ns; s++)
		code[s] = (uint16_t)next[len[s]]++;
}

/* The decoder's table: entry v (the next BFP_HUF_LMAX bits) holds the
 * length of the code that starts v in its low byte and the symbol in
 * its high byte; eight bytes a store where a code spans four entries or
 * more. */
static inline void bfp_huf_table(const uint8_t *len, const uint16_t *code, unsigned ns,
				 uint16_t *t)
{
	for (unsigned s = 0; s < ns; s++) {
		const unsigned sh = BFP_HUF_LMAX - len[s], at = (unsigned)code[s] << sh;
		const uint16_t e = (uint16_t)(len[s] | s << 8);
		if (sh >= 2) {
			const uint64_t v = e * 0x0001000100010001ull;
			for (unsigned j = 0; j < (1u << sh); j += 4)
				BFP_MEMCPY(t + at + j, &v, 8);
		} else {
			for (unsigned j = 0; j < (1u << sh); j++)
				t[at + j] = e;
		}
	}
}

#endif
