/*
 * rans.h: the magnitude tables of models (FORMAT.md 3.6) and
 * the rANS coder their symbols go through. A table maps each magnitude to
 * a symbol (small magnitudes one each, larger ones by bit length and the
 * bits after the leading one) and gives each symbol a frequency out of
 * 2^11, derived with integer arithmetic from weights on a half-octave
 * scale. The rANS state is 32 bits, renormalised a byte at a time; its
 * bytes fill the end of the payload, read backwards, and the state it
 * starts from carries the signs of the first table-coded changes.
 */
#ifndef BFP_RANS_H
#define BFP_RANS_H

#include "internal.h"

#define BFP_RANS_BITS 11u
#define BFP_RANS_M (1u << BFP_RANS_BITS)
#define BFP_RANS_L (1u << 23)     /* states lie in [L, 256 L) */
#define BFP_RANS_SIGNS 23u        /* signs carried by the initial state */
#define BFP_TAB_EMAX 6u           /* magnitudes below 2^e one symbol each */
#define BFP_TAB_SBMAX 2u          /* 2^sb symbols per larger bit length */
#define BFP_TAB_SYMS 100u         /* symbols of e = 6, sb = 2 */
#define BFP_TAB_QMAX 29u

/* A class's magnitude table as a model carries it. */
typedef struct bfp_mtab {
	uint8_t on;  /* 1: the class's magnitudes are table-coded */
	uint8_t e, sb;
	uint8_t ns;  /* symbols 0..ns-1; ns-1 also stands for the ones above */
	uint8_t q[BFP_TAB_SYMS];
} bfp_mtab;

/* The tables of a model, ready to code with: frequencies, cumulative
 * frequencies, the encoder's costs in 1/256 bit (never below the exact
 * cost), and the decoder's slot-to-symbol map or the encoder's symbols
 * (bfp_rans_sym). */
typedef struct bfp_rtab {
	uint16_t f[BFP_CLASSES][BFP_TAB_SYMS];
	uint16_t c[BFP_CLASSES][BFP_TAB_SYMS];
	uint16_t cost[BFP_CLASSES][BFP_TAB_SYMS];
	union {
		uint8_t slot[BFP_CLASSES][BFP_RANS_M];
		uint64_t put[BFP_CLASSES][BFP_TAB_SYMS];
	} u;
} bfp_rtab;

/* Symbol count of a table of parameters e, sb (e >= sb): 2^e - 1 single
 * magnitudes, then 2^sb symbols for each bit length from e + 1 to 15, and
 * one for 32768. */
static inline unsigned bfp_tab_nsym(unsigned e, unsigned sb)
{
	return (1u << e) + ((15u - e) << sb);
}

/* Symbol of magnitude m (1..32768); *nraw low bits *raw follow it. */
static inline unsigned bfp_tab_sym(unsigned m, unsigned e, unsigned sb, unsigned *nraw,
				   uint32_t *raw)
{
	if (m < (1u << e)) {
		*nraw = 0;
		*raw = 0;
		return m - 1;
	}
	const unsigned j = bfp_bitlen32(m) - 1, sh = j - sb;
	*nraw = sh;
	*raw = m & ((1u << sh) - 1);
	return (1u << e) - 1 + ((j - e) << sb) + ((m >> sh) & ((1u << sb) - 1));
}

/* The magnitude of symbol s (< bfp_tab_nsym) before its raw bits, and
 * how many raw bits follow (they are added to the returned value).
 * Without branches: which side of the single magnitudes a decoded symbol
 * falls is data, so a branch on it mispredicts (decode +0-2%, the most
 * at lr 1e-5); the other side's arithmetic is masked to 0 where it would
 * shift by too much.
 * (The encoder's bfp_tab_sym keeps its branch: masked, it made encode
 * 12-15% slower.) */
static inline uint32_t bfp_tab_base(unsigned s, unsigned e, unsigned sb, unsigned *nraw)
{
	const unsigned single = (1u << e) - 1;
	const unsigned big = 0u - (unsigned)(s >= single);
	const unsigned u = (s - single) & big, j = e + (u >> sb), sh = (j - sb) & big;
	*nraw = sh;
	const uint32_t m = ((1u << sb) | (u & ((1u << sb) - 1))) << sh;
	return ((s + 1) & ~big) | (m & big);
}

/* Symbol weights: round(2^(q/2 + 2)), q = 0..29. */
static const uint32_t bfp_tab_w[BFP_TAB_QMAX + 1] = {
	4,     6,     8,     11,    16,    23,    32,    45,    64,    91,
	128,   181,   256,   362,   512,   724,   1024,  1448,  2048,  2896,
	4096,  5793,  8192,  11585, 16384, 23170, 32768, 46341, 65536, 92682};

/* Frequencies of a table (FORMAT.md 3.6): each weight's share of 2^11,
 * rounded down, at least 1; the first largest takes up the difference.
 * 0 when that leaves it below 1, or for no symbols (the table is invalid). */
static inline int bfp_tab_freqs(const bfp_mtab *t, uint16_t *f)
{
	uint32_t s = 0, sum = 0;
	unsigned top = 0;
	if (t->ns == 0)
		return 0;
	for (unsigned i = 0; i < t->ns; i++)
		s += bfp_tab_w[t->q[i]];
	for (unsigned i = 0; i < t->ns; i++) {
		uint32_t v = bfp_tab_w[t->q[i]] * BFP_RANS_M / s;
		v = v ? v : 1;
		f[i] = (uint16_t)v;
		sum += v;
		if (v > f[top])
			top = i;
	}
	int32_t adj = (int32_t)f[top] + (int32_t)BFP_RANS_M - (int32_t)sum;
	if (adj < 1)
		return 0;
	f[top] = (uint16_t)adj;
	return 1;
}

/* Quantised weight of a symbol counted cnt times when the most frequent
 * one is counted cmax times: 29 less 2 log2(cmax / cnt), rounded (the
 * weights are half an octave apart), at least 0. */
static inline unsigned bfp_tab_q(uint32_t cmax, uint32_t cnt)
{
	uint64_t a = (uint64_t)cmax * cmax, b = (uint64_t)cnt * cnt;
	uint64_t r = 2 * (a * a) / (b * b); /* 2 (cmax / cnt)^4 >= 2 */
	unsigned t = (64u - (unsigned)__builtin_clzll(r) - 1u) >> 1;
	return t >= BFP_TAB_QMAX ? 0 : BFP_TAB_QMAX - t;
}

/* floor(256 log2 v) or a little less, v >= 1, integer arithmetic only. */
static inline unsigned bfp_log2_fp8(uint32_t v)
{
	const unsigned ip = bfp_bitlen32(v) - 1;
	uint64_t x = (uint64_t)v << (31 - ip); /* v / 2^ip in Q31, in [1, 2) */
	unsigned frac = 0;
	for (unsigned i = 0; i < 8; i++) {
		x = (x * x) >> 31;
		frac <<= 1;
		if (x >= (2ull << 31)) {
			x >>= 1;
			frac |= 1;
		}
	}
	return ip * 256 + frac;
}

/* ---- encoder: symbols go in backwards; bytes come out forwards and
 * are read back from the end ----
 *
 * Each symbol in the form the encoder puts it, one word: x / f by a
 * multiply (q = (x * rcp) >> 32 >> sh, rcp = ceil(2^(31 + s) / f),
 * s = ceil(log2 f), sh = s - 1: exact for every x < 2^31, Granlund and
 * Montgomery, as x < 2^31 always is here), then x + bias + q * (M - f),
 * which is q * M + x % f + cum. A frequency of 1 has rcp = 2^32 - 1,
 * sh = 0 and bias cum + M - 1 (q comes out as x - 1, for x > 0).
 * Bits 0-31 rcp, 32-43 bias, 44-55 M - f, 56-59 sh. */
static inline uint64_t bfp_rans_sym(unsigned f, unsigned cum)
{
	uint64_t rcp, bias = cum, sh = 0;
	if (f < 2) {
		rcp = 0xFFFFFFFFu;
		bias += BFP_RANS_M - 1;
	} else {
		const unsigned s = bfp_bitlen32(f - 1);
		rcp = ((1ull << (s + 31)) + f - 1) / f;
		sh = s - 1;
	}
	return rcp | bias << 32 | (uint64_t)(BFP_RANS_M - f) << 44 | sh << 56;
}

/* x coded with symbol sym (bfp_rans_sym), for 0 < x < 2^31 (a state
 * that shed bytes is still at least L >> 16). */
static inline uint32_t bfp_rans_step(uint32_t x, uint64_t sym)
{
	const uint32_t q = (uint32_t)(((uint64_t)x * (uint32_t)sym) >> 32) >> (sym >> 56);
	return x + ((uint32_t)(sym >> 32) & 0xFFFu) + q * ((uint32_t)(sym >> 44) & 0xFFFu);
}

/* Put symbol sym into state x (below 2^31). The state first sheds 0, 1
 * or 2 bytes (x >> 16 is below every bound f * 2^20). No branch and no
 * division: two bytes are stored either way and out moves by those that
 * count (the final state's 4 bytes go after them, so the room is there);
 * the step is worked out for all three shifts of x at once, and the one
 * that applies is picked, so the chain from one state to the next is
 * the step alone. */
static inline void bfp_rans_put(uint32_t *x, uint8_t **out, uint64_t sym)
{
	const uint64_t xmax = (uint64_t)(BFP_RANS_M - ((sym >> 44) & 0xFFFu))
			      << (23 - BFP_RANS_BITS + 8);
	const uint32_t v = *x;
	const unsigned nb = (unsigned)(v >= xmax) + (unsigned)(v >= xmax << 8);
	const uint32_t x0 = bfp_rans_step(v, sym), x1 = bfp_rans_step(v >> 8, sym),
		       x2 = bfp_rans_step(v >> 16, sym);
	(*out)[0] = (uint8_t)v;
	(*out)[1] = (uint8_t)(v >> 8);
	*out += nb;
	*x = nb == 0 ? x0 : nb == 1 ? x1 : x2;
}

/* Fill t's class c from table m (valid: bfp_tab_freqs gave 1), for the
 * encoder (its symbols) or the decoder (the slot map). */
static inline void bfp_rtab_build(const bfp_mtab *m, bfp_rtab *t, unsigned c, int encoder)
{
	uint16_t *f = t->f[c], *cu = t->c[c];
	unsigned at = 0;
	(void)bfp_tab_freqs(m, f);
	for (unsigned s = 0; s < m->ns; s++) {
		cu[s] = (uint16_t)at;
		t->cost[c][s] = (uint16_t)(BFP_RANS_BITS * 256 - bfp_log2_fp8(f[s]));
		if (encoder)
			t->u.put[c][s] = bfp_rans_sym(f[s], at);
		else
			BFP_MEMSET(t->u.slot[c] + at, (int)s, f[s]);
		at += f[s];
	}
}

/* ---- decoder ---- */
typedef struct bfp_rd {
	const uint8_t *buf;
	size_t p;    /* bytes below the next one to read: buf[p - 1] is next */
	uint32_t x;
	int err;
} bfp_rd;

static inline unsigned bfp_rans_get(bfp_rd *d, const uint8_t *slot, const uint16_t *f,
				    const uint16_t *cu)
{
	uint32_t x = d->x;
	const unsigned sl = x & (BFP_RANS_M - 1), s = slot[sl];
	x = f[s] * (x >> BFP_RANS_BITS) + sl - cu[s];
	while (x < BFP_RANS_L) { /* at most twice: x >= 2^12 here */
		if (BFP_UNLIKELY(d->p == 0)) {
			d->err = 1;
			x = BFP_RANS_L;
			break;
		}
		x = (x << 8) | d->buf[--d->p];
	}
	d->x = x;
	return s;
}

/* Decoder slots packed one word each, for coders that take one load a
 * symbol (keyframes, FORMAT.md 3.10): the symbol (bits 0-7), the slot
 * less the symbol's first slot (8-18) and its frequency (20-31, where
 * one shift takes it: it is on the chain from one state to the next). */
static inline uint32_t bfp_rans_slot(unsigned s, unsigned f, unsigned k)
{
	return (uint32_t)s | (uint32_t)k << 8 | (uint32_t)f << 20;
}

/* Decode one symbol from *x with packed slots and renormalise as
 * bfp_rans_get does, without a branch: the caller makes sure *p >= 2.
 * Returns the slot's word. y (at least 2^12) takes 0, 1 or 2 bytes, by
 * its bit length; sh is 16 less 8 for each, and (y << 16 | the two bytes
 * below buf[*p]) >> sh is the new state. */
static inline __attribute__((always_inline)) uint32_t
bfp_rans_get_packed(uint32_t *x, const uint8_t *buf, size_t *p, const uint32_t *slots)
{
	const uint32_t v = *x, e = slots[v & (BFP_RANS_M - 1)];
	const uint32_t y = (e >> 20) * (v >> BFP_RANS_BITS) + ((e >> 8) & 0x7FFu);
	const unsigned sh = (unsigned)(24 - __builtin_clz(y)) & 0x18u;
	uint16_t in;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	BFP_MEMCPY(&in, buf + *p - 2, 2);
#else
	in = (uint16_t)(buf[*p - 1] << 8 | buf[*p - 2]);
#endif
	*x = (uint32_t)((((uint64_t)y << 16) | in) >> sh);
	*p = *p - 2 + (sh >> 3);
	return e;
}

/* The same with the bounds checked: d->err when the bytes run out.
 * Returns the symbol. */
static inline unsigned bfp_rans_get_packed_checked(bfp_rd *d, const uint32_t *slots)
{
	const uint32_t v = d->x, e = slots[v & (BFP_RANS_M - 1)];
	uint32_t y = (e >> 20) * (v >> BFP_RANS_BITS) + ((e >> 8) & 0x7FFu);
	while (y < BFP_RANS_L) {
		if (BFP_UNLIKELY(d->p == 0)) {
			d->err = 1;
			y = BFP_RANS_L;
			break;
		}
		y = (y << 8) | d->buf[--d->p];
	}
	d->x = y;
	return e & 0xFFu;
}

#endif
