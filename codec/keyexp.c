/*
 * keyexp.c: keyframe-exp and keyframe-expm (FORMAT.md 3.10, 3.11).
 * Trained weights spend about 2.5 bits of entropy in their 8-bit exponent
 * and nearly 8 in sign and mantissa, so the exponent goes through rANS
 * (the tables and coder of rans.h) with a table fitted to the frame, and
 * sign and mantissa go raw, a byte a value (encoding 7). Encoding 8 codes
 * the mantissa's top bit with the exponent, at a share the table's
 * weights give, and packs the other 7 bits. Four interleaved states let
 * the decoder overlap the symbols; their initial values carry the last
 * values' raw bits. Encoding 9 codes encoding 8's symbols with a Huffman
 * code the same table gives (huf.h), in four bit streams that share one
 * byte stream: a lookup a symbol, where rANS takes a multiply and a
 * renormalisation on one chain.
 */
#include "keyexp.h"
#include "huf.h"
#include "rans.h"
#include "kxlog2.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KX_X86 1
#include <immintrin.h>
#endif

/* The table of a frame: exponents etop, etop - 1, .. one symbol each,
 * the last symbol (ns - 1) for its exponent and every one below. */
typedef struct kx_table {
	unsigned etop;
	bfp_mtab t; /* ns and the weights q */
} kx_table;

/* The prediction of a weight from the one before: an exponent below the
 * peak holds about half the values of the one above it. */
static inline unsigned kx_pred(unsigned q)
{
	return q >= 2 ? q - 2 : 0;
}

static inline uint32_t kx_zigzag(int d)
{
	return d >= 0 ? 2u * (uint32_t)d : 2u * (uint32_t)(-d) - 1u;
}

static unsigned table_bits(const kx_table *k)
{
	unsigned bits = 8 + bfp_eg0_bits(k->t.ns - 1u) + 5;
	for (unsigned i = 1; i < k->t.ns; i++)
		bits += bfp_eg0_bits(kx_zigzag((int)k->t.q[i] - (int)kx_pred(k->t.q[i - 1])));
	return bits;
}

static void table_write(bfp_bw *w, const kx_table *k)
{
	bfp_bw_put(w, k->etop, 8);
	bfp_put_eg0(w, k->t.ns - 1u);
	bfp_bw_put(w, k->t.q[0], 5);
	for (unsigned i = 1; i < k->t.ns; i++)
		bfp_put_eg0(w, kx_zigzag((int)k->t.q[i] - (int)kx_pred(k->t.q[i - 1])));
}

/* FORMAT.md 3.10: the table, with what a decoder rejects. */
static int table_parse(bfp_br *r, kx_table *k)
{
	k->etop = bfp_br_get(r, 8);
	const uint32_t m = bfp_get_eg0(r);
	if (r->err || m >= BFP_KEYEXP_SYMS || m > k->etop)
		return 0;
	k->t.on = 1;
	k->t.e = k->t.sb = 0;
	k->t.ns = (uint8_t)(m + 1);
	k->t.q[0] = (uint8_t)bfp_br_get(r, 5);
	if (k->t.q[0] > BFP_TAB_QMAX)
		return 0;
	for (unsigned i = 1; i < k->t.ns; i++) {
		const uint32_t z = bfp_get_eg0(r);
		const int64_t d = (z & 1) ? -(int64_t)(z >> 1) - 1 : (int64_t)(z >> 1);
		const int64_t q = (int64_t)kx_pred(k->t.q[i - 1]) + d;
		if (r->err || q < 0 || q > BFP_TAB_QMAX)
			return 0;
		k->t.q[i] = (uint8_t)q;
	}
	return !r->err;
}

static inline unsigned exp_of(uint16_t v)
{
	return (v >> 7) & 0xFFu;
}

/* Sign and mantissa as the raw byte: the sign in bit 7. */
static inline uint8_t raw_of(uint16_t v)
{
	return (uint8_t)(((v >> 8) & 0x80u) | (v & 0x7Fu));
}

/* Encoding 8's raw field: the sign in bit 6, the mantissa's low six
 * bits below it. */
static inline unsigned raw7_of(uint16_t v)
{
	return ((v >> 9) & 0x40u) | (v & 0x3Fu);
}

/* What a payload of encoding 7 (m = 0) or 8 (m = 1) holds: the values
 * the states carry, at most; the bytes of nraw raw fields; the coded
 * symbol of value v (its exponent, or with m its exponent and the
 * mantissa's top bit, as 2 e + m). */
static inline uint32_t kx_carry_max(int m)
{
	return m == 2 ? BFP_KEYHUF_CARRY : m ? BFP_KEYEXPM_CARRY : BFP_KEYEXP_CARRY;
}

static inline size_t kx_raw_bytes(int m, uint32_t nraw)
{
	return m ? (7 * (size_t)nraw + 7) / 8 : nraw;
}

static inline unsigned kx_key(int m, uint16_t v)
{
	return m ? (v >> 6) & 0x1FFu : exp_of(v);
}

/* FORMAT.md 3.11: the share out of 64 of exponent symbol s's values
 * whose mantissa's top bit is 0, by how much the symbol's weight differs
 * from the one above's (d = q_s - q_(s-1), from -2 to 12), and of s = 0. */
static const uint8_t kx_pm[15] = {32, 33, 34, 35, 39, 39, 40, 45, 45, 45, 48, 54, 54, 54, 54};
#define KX_PM_TOP 58u

/* The frequencies of encoding 8's 2 ns symbols from table t (FORMAT.md
 * 3.11): 0 when the table leaves the largest below 1. */
static int kxm_freqs(const bfp_mtab *t, uint16_t *f)
{
	uint32_t wv[2 * BFP_KEYEXP_SYMS];
	uint64_t sum = 0;
	const unsigned n = 2u * t->ns;
	for (unsigned s = 0; s < t->ns; s++) {
		unsigned p = KX_PM_TOP;
		if (s) {
			int d = (int)t->q[s] - (int)t->q[s - 1];
			d = d < -2 ? -2 : d > 12 ? 12 : d;
			p = kx_pm[d + 2];
		}
		wv[2 * s] = bfp_tab_w[t->q[s]] * p;
		wv[2 * s + 1] = bfp_tab_w[t->q[s]] * (64u - p);
		sum += (uint64_t)wv[2 * s] + wv[2 * s + 1];
	}
	uint32_t tot = 0;
	unsigned top = 0;
#ifdef __SIZEOF_INT128__
	/* floor(a / sum) for a below 2^35 by a multiply: r = floor((2^64 -
	 * 1) / sum) gives the quotient or one less, which the remainder
	 * tells */
	const uint64_t rcp = UINT64_MAX / sum;
#endif
	for (unsigned u = 0; u < n; u++) {
		const uint64_t a = (uint64_t)wv[u] * BFP_RANS_M;
#ifdef __SIZEOF_INT128__
		__extension__ typedef unsigned __int128 u128;
		uint64_t q = (uint64_t)(((u128)a * rcp) >> 64);
		q += a - q * sum >= sum;
		uint32_t v = (uint32_t)q;
#else
		uint32_t v = (uint32_t)(a / sum);
#endif
		v = v ? v : 1;
		f[u] = (uint16_t)v;
		tot += v;
		if (v > f[top])
			top = u;
	}
	const int32_t adj = (int32_t)f[top] + (int32_t)BFP_RANS_M - (int32_t)tot;
	if (adj < 1)
		return 0;
	f[top] = (uint16_t)adj;
	return 1;
}

/* The frequencies of table t's symbols for encoding m; their number in
 * *nsym. */
static int kx_freqs(int m, const bfp_mtab *t, uint16_t *f, unsigned *nsym)
{
	*nsym = m ? 2u * t->ns : t->ns;
	return m ? kxm_freqs(t, f) : bfp_tab_freqs(t, f);
}

/* ---- encoder ---- */

/* A symbol as the encoder puts it (bfp_rans_sym's fields, one word
 * each): the state sheds a byte from xmax on and another from xmax2 on,
 * then becomes x + bias + cmpl * ((x * rcp) >> sh), which is
 * floor(x / f) * M + x mod f + c. Padded to 32 bytes: one shift of the
 * exponent finds it. */
typedef struct kx_esym {
	uint32_t xmax, xmax2, rcp, sh, bias, cmpl, pad_[2];
} kx_esym;

/* The cost of an exponent: its escape bits from bit 40 on, its rANS
 * cost in 1/256 bit (at least the exact cost) below; sums of up to 8192
 * of them keep the fields apart. */
#define KX_COST(ebits, r256) ((uint64_t)(ebits) << 40 | (r256))
#define KX_EBITS(c) ((c) >> 40)
#define KX_R256(c) ((c) & ((1ull << 40) - 1))

/* A table fitted to some values and what each exponent costs with it.
 * Only the exponents present in those values (pe) are filled in: the
 * values the plan codes are among them. */
typedef struct kx_plan {
	kx_table k;
	int m;                 /* encoding 8: symbols by kx_key */
	unsigned tbits;        /* the table's bits */
	unsigned np;           /* exponents present */
	uint8_t pe[256];       /* them, from the largest down */
	uint32_t cnt[256];     /* the exponents of the values planned from */
	uint32_t cntm[512];    /* the same by exponent and mantissa top bit */
	uint64_t cost[512];    /* each kx_key's (KX_COST) */
	kx_esym sym[512];      /* each kx_key's symbol */
	uint16_t hcode[512];   /* encoding 9: each kx_key's code (its
				  length in bits 12-15) */
} kx_plan;

/* Bytes of the first k values with plan pl whose escapes take ebits and
 * symbols r256 / 256 bits: raw bytes, bit stream, rANS bytes (an upper
 * bound: symbol costs are never below exact, and the states started
 * below 2^24), states. */
static uint64_t kx_bytes(const kx_plan *pl, uint64_t k, uint64_t ebits, uint64_t r256)
{
	/* encoding 9: the table's bytes, then codes, raw fields and escapes
	 * in whole bytes but for the table's padding, the raw section's and
	 * the bits left after the last carried field (r256 / 256 exact) */
	if (pl->m == 2)
		return (pl->tbits + 7) / 8 + (r256 / 256 + 7 * k + ebits + 13) / 8;
	const uint64_t carry = k < kx_carry_max(pl->m) ? k : kx_carry_max(pl->m);
	/* encoding 8's states start below 2^31: a byte more each */
	return kx_raw_bytes(pl->m, (uint32_t)(k - carry)) + (pl->tbits + ebits + 7) / 8 +
	       (r256 + 2047) / 2048 + 1 + (pl->m ? 5 : 4) * BFP_KEYEXP_STATES;
}

/* How many of w[0..n) (n <= 8192) have each kx_key with m = 1 (the
 * exponent and the mantissa's top bit) into cntm, and each exponent into
 * cnt. Two 16-bit histograms, so that runs of one key do not wait on one
 * counter, and clearing and summing them is short. */
static void count_keys(const uint16_t *w, uint32_t n, uint32_t *cntm, uint32_t *cnt)
{
	uint16_t h[2][512];
	BFP_MEMSET(h, 0, sizeof(h));
	uint32_t i = 0;
	for (; i + 2 <= n; i += 2) {
		h[0][kx_key(1, w[i])]++;
		h[1][kx_key(1, w[i + 1])]++;
	}
	for (; i < n; i++)
		h[0][kx_key(1, w[i])]++;
	for (unsigned k = 0; k < 512; k++)
		cntm[k] = (uint32_t)h[0][k] + h[1][k];
	for (unsigned e = 0; e < 256; e++)
		cnt[e] = cntm[2 * e] + cntm[2 * e + 1];
}

/* Fit a table to words[0..n) (1 <= n <= 8192) for encoding 7 (m = 0)
 * or 8. 0 when none can be made. */
static int kx_plan_make(kx_plan *pl, const uint16_t *w, uint32_t n, int m)
{
	uint32_t *cnt = pl->cnt;
	uint8_t *pe = pl->pe;
	unsigned lc[256];
	uint32_t cum[256]; /* cum[e]: the values of exponent e or below */
	pl->m = m;
	count_keys(w, n, pl->cntm, cnt);
	unsigned etop = 255, np = 0;
	while (!cnt[etop])
		etop--;
	for (unsigned e = etop + 1; e-- > 0;)
		if (cnt[e]) {
			pe[np++] = (uint8_t)e;
			lc[e] = bfp_kx_log2(cnt[e]);
		}
	pl->np = np;
	uint32_t run = 0;
	for (unsigned e = 0; e <= etop; e++) {
		run += cnt[e];
		cum[e] = run;
	}
	/* the number of symbols: estimated entropy of the symbols with
	 * their counts, escape bits and about 3 table bits a symbol, for
	 * each tail that starts at an exponent present. The escape bits of
	 * a tail from t, the sum over its values of eg0_bits(t - e) =
	 * 1 + 2 floor(log2(t - e + 1)), are cum[t] and twice cum[t + 1 - 2^j]
	 * for each j >= 1 that leaves it >= 0. */
	const uint64_t ln = bfp_kx_log2(n);
	uint64_t best = UINT64_MAX, win = 0;
	unsigned ns = 1;
	for (unsigned j = 0; j < np; j++) {
		const unsigned t = pe[j], nt = etop - t + 1; /* symbols when t starts the tail */
		if (nt > BFP_KEYEXP_SYMS)
			break;
		const uint64_t ct = cum[t];
		uint64_t esc = 0;
		if (t) { /* exponent 0 alone: no escapes */
			esc = ct;
			for (unsigned b = 2; b <= t + 1; b *= 2)
				esc += 2 * (uint64_t)cum[t + 1 - b];
		}
		const uint64_t est = win + ct * (ln - bfp_kx_log2((uint32_t)ct)) + 256 * esc +
				     256 * (13 + bfp_eg0_bits(nt - 1) + 3 * (nt - 1));
		if (est < best) {
			best = est;
			ns = nt;
		}
		win += (uint64_t)cnt[t] * (ln - lc[t]);
	}
	/* the weights from the counts (FORMAT.md 3.6's scale) */
	uint32_t sc[BFP_KEYEXP_SYMS], cmax = 0;
	const unsigned tmax = etop - (ns - 1);
	for (unsigned s = 0; s + 1 < ns; s++)
		sc[s] = cnt[etop - s];
	sc[ns - 1] = cum[tmax];
	for (unsigned s = 0; s < ns; s++)
		cmax = sc[s] > cmax ? sc[s] : cmax;
	const unsigned q1 = bfp_tab_q(cmax, 1), q0 = q1 >= 3 ? q1 - 3 : 0;
	pl->k.etop = etop;
	pl->k.t.on = 1;
	pl->k.t.e = pl->k.t.sb = 0;
	pl->k.t.ns = (uint8_t)ns;
	for (unsigned s = 0; s < ns; s++) {
		unsigned q = sc[s] ? bfp_tab_q(cmax, sc[s]) : q0;
		/* unseen: what the prediction gives, if lower (1 table bit) */
		if (!sc[s] && s > 0 && kx_pred(pl->k.t.q[s - 1]) < q)
			q = kx_pred(pl->k.t.q[s - 1]);
		pl->k.t.q[s] = (uint8_t)q;
	}
	uint16_t f[2 * BFP_KEYEXP_SYMS];
	unsigned nsym;
	if (!kx_freqs(m, &pl->k.t, f, &nsym))
		return 0;
	pl->tbits = table_bits(&pl->k);
	/* each symbol as the encoder puts it, and its cost, for the
	 * exponents present: one symbol each above the tail, the tail's
	 * last (with m, two each: 2 s + the mantissa's top bit) */
	kx_esym ys[2 * BFP_KEYEXP_SYMS];
	unsigned rcs[2 * BFP_KEYEXP_SYMS], at = 0;
	uint8_t hl[2 * BFP_KEYEXP_SYMS];
	uint16_t hc[2 * BFP_KEYEXP_SYMS];
	if (m == 2) {
		bfp_huf_lengths(f, nsym, hl);
		bfp_huf_codes(hl, nsym, hc);
	}
	for (unsigned s = 0; s < nsym && m == 2; s++)
		rcs[s] = 256u * hl[s];
	for (unsigned s = 0; s < nsym && m != 2; s++) {
		const uint64_t put = bfp_rans_sym(f[s], at);
		const uint64_t xmax = (uint64_t)f[s] << (23 - BFP_RANS_BITS + 8);
		kx_esym *y = &ys[s];
		rcs[s] = BFP_RANS_BITS * 256 - bfp_kx_log2(f[s]);
		y->xmax = (uint32_t)xmax;
		y->xmax2 = xmax << 8 > 0xFFFFFFFFu ? 0xFFFFFFFFu : (uint32_t)(xmax << 8);
		y->rcp = (uint32_t)put;
		y->sh = 32 + (unsigned)(put >> 56);
		y->bias = (uint32_t)(put >> 32) & 0xFFFu;
		y->cmpl = (uint32_t)(put >> 44) & 0xFFFu;
		at += f[s];
	}
	for (unsigned j = 0; j < np; j++) {
		const unsigned e = pe[j], s = e > tmax ? etop - e : ns - 1;
		const unsigned eb = e > tmax || !tmax ? 0 : bfp_eg0_bits(tmax - e);
		for (unsigned b = 0; b <= (m ? 1u : 0u); b++) {
			const unsigned key = m ? 2 * e + b : e, u = m ? 2 * s + b : s;
			pl->cost[key] = KX_COST(eb, rcs[u]);
			if (m != 2)
				pl->sym[key] = ys[u];
			else
				pl->hcode[key] = (uint16_t)(hc[u] | hl[u] << 12);
		}
	}
	return 1;
}

/* The sum of the costs of the values planned from. */
static uint64_t kx_cost_sum(const kx_plan *pl)
{
	uint64_t c = 0;
	for (unsigned j = 0; j < pl->np; j++) {
		const unsigned e = pl->pe[j];
		if (pl->m)
			c += (uint64_t)pl->cntm[2 * e] * pl->cost[2 * e] +
			     (uint64_t)pl->cntm[2 * e + 1] * pl->cost[2 * e + 1];
		else
			c += (uint64_t)pl->cnt[e] * pl->cost[e];
	}
	return c;
}

/* Put value w's exponent into state x (below 2^31) as bfp_rans_put
 * (rans.h) does, with the bytes shed first and one step after: the same
 * state and bytes, and no branch for a compiler to make of a choice of
 * three steps (which bytes a state sheds is data: such a branch
 * mispredicts about once in three symbols). */
static inline __attribute__((always_inline)) void kx_put(uint32_t *x, uint8_t **out,
							 const kx_plan *pl, uint16_t w, int m)
{
	const kx_esym *y = &pl->sym[kx_key(m, w)];
	uint32_t v = *x;
	const unsigned nb = (unsigned)(v >= y->xmax) + (unsigned)(v >= y->xmax2);
	const uint16_t lo = (uint16_t)v;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	BFP_MEMCPY(*out, &lo, 2);
#else
	bfp_st16(*out, lo);
#endif
	*out += nb;
	v >>= 8 * nb;
	*x = v + y->bias + y->cmpl * (uint32_t)(((uint64_t)v * y->rcp) >> y->sh);
}

/* Values [0, i) (i a multiple of 4) into states x, from the last, four
 * at a time with the states in registers; the bytes go from o on. The
 * end of the bytes, or NULL once it passes end: o only grows, so a check
 * after each four finds what a check after each value would (the
 * scratch has room for the 8 bytes four can write past end and the 2
 * stored beyond). */
#define KX_PUTS4(name, attr, M)                                                                \
	attr static uint8_t *name(uint32_t *x, uint8_t *o, const kx_plan *pl, const uint16_t *w,  \
				  uint32_t i, const uint8_t *end)                                  \
	{                                                                                          \
		uint32_t x0 = x[0], x1 = x[1], x2 = x[2], x3 = x[3];                               \
		while (i) {                                                                        \
			i -= 4;                                                                    \
			kx_put(&x3, &o, pl, w[i + 3], M);                                             \
			kx_put(&x2, &o, pl, w[i + 2], M);                                             \
			kx_put(&x1, &o, pl, w[i + 1], M);                                             \
			kx_put(&x0, &o, pl, w[i], M);                                                 \
			if (BFP_UNLIKELY(o > end))                                                 \
				return NULL;                                                       \
		}                                                                                  \
		x[0] = x0;                                                                         \
		x[1] = x1;                                                                         \
		x[2] = x2;                                                                         \
		x[3] = x3;                                                                         \
		return o;                                                                          \
	}
KX_PUTS4(puts4, , 0)
KX_PUTS4(puts4m, , 1)
#ifdef KX_X86
KX_PUTS4(puts4_bmi2, __attribute__((target("bmi2"))), 0)
KX_PUTS4(puts4m_bmi2, __attribute__((target("bmi2"))), 1)
#endif

#ifdef KX_X86
/* The escapes of w[0..i) into bw for i, the values up to a multiple of
 * 16 below k, sixteen values a compare: the lanes whose exponent is at
 * most tmax (about one value in fifty in a trained checkpoint's frames)
 * are taken from the compare's mask in order. Returns i. */
__attribute__((target("avx2"))) static uint32_t escapes_avx2(bfp_bw *bw, const uint16_t *w,
							      uint32_t k, unsigned tmax)
{
	const __m256i m8 = _mm256_set1_epi16(0xFF), lim = _mm256_set1_epi16((short)(tmax + 1));
	uint32_t i = 0;
	for (; i + 16 <= k; i += 16) {
		const __m256i e = _mm256_and_si256(
			_mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)(const void *)(w + i)), 7),
			m8);
		for (uint32_t m = (uint32_t)_mm256_movemask_epi8(_mm256_cmpgt_epi16(lim, e)); m;
		     m &= m - 1, m &= m - 1)
			bfp_put_eg0(bw, tmax - exp_of(w[i + ((unsigned)__builtin_ctz(m) >> 1)]));
	}
	return i;
}
#endif

/* Write the first k values of w with pl; the payload's length, or 0
 * when it does not fit budget. */
#ifdef KX_X86
/* Encoding 8's raw fields of w[0..8 g) into out, 7 bytes for each 8
 * values (and one byte past them), with pext: its mask takes the six
 * low mantissa bits and the sign of each of four values, in order. */
__attribute__((target("bmi2"))) static void pack7_pext(uint8_t *out, const uint16_t *w,
							uint32_t g)
{
	const uint64_t mk = 0x803F803F803F803Full;
	for (uint32_t j = 0; j < g; j++) {
		const uint64_t lo = _pext_u64(bfp_ld64((const uint8_t *)(w + 8 * j)), mk);
		const uint64_t hi = _pext_u64(bfp_ld64((const uint8_t *)(w + 8 * j + 4)), mk);
		bfp_st64(out + 7 * j, lo | hi << 28);
	}
}
#endif

/* Encoding 8's raw fields of w[0..nraw) into out (FORMAT.md 3.11), and
 * the byte after them when nraw is at least 8 (a store of 8 bytes for
 * each 7). */
static void kx_pack7(uint8_t *out, const uint16_t *w, uint32_t nraw, uint32_t cpu)
{
	(void)cpu;
	/* 7 bits a value, from bit 0 of byte 0 on: eight values a
	 * store of 8 bytes (7 of them theirs; the caller has room for the
	 * eighth), four values' fields made at once in the 16-bit lanes of
	 * a word */
	uint64_t acc = 0;
	unsigned nb = 0;
	size_t o = 0;
	uint32_t i = 0;
#ifdef KX_X86
	if (cpu & BFP_CPU_PDEP) {
		pack7_pext(out, w, nraw / 8);
		i = nraw / 8 * 8;
		o = 7 * (size_t)(nraw / 8);
	}
#endif
	for (; i + 8 <= nraw; i += 8, o += 7) {
		uint64_t g = 0;
		for (unsigned h = 0; h < 2; h++) {
			const uint16_t *q = w + i + 4 * h;
			const uint64_t v = q[0] | (uint64_t)q[1] << 16 | (uint64_t)q[2] << 32 |
					   (uint64_t)q[3] << 48;
			const uint64_t t = (v & 0x003F003F003F003Full) |
					   ((v >> 9) & 0x0040004000400040ull);
			g |= ((t & 0x7Fu) | ((t >> 9) & (0x7Full << 7)) |
			      ((t >> 18) & (0x7Full << 14)) | ((t >> 27) & (0x7Full << 21)))
			     << (28 * h);
		}
		bfp_st64(out + o, g);
	}
	for (; i < nraw; i++) {
		acc |= (uint64_t)raw7_of(w[i]) << nb;
		nb += 7;
		if (nb >= 32) {
			bfp_st32(out + o, (uint32_t)acc);
			o += 4;
			acc >>= 32;
			nb -= 32;
		}
	}
	for (; nb > 0; nb = nb > 8 ? nb - 8 : 0, acc >>= 8)
		out[o++] = (uint8_t)acc;
}

/* The escapes of w[0..k) (FORMAT.md 3.10) into bw, for a table whose
 * last symbol starts at exponent tmax > 0. */
static void kx_escapes(bfp_bw *bw, const uint16_t *w, uint32_t k, unsigned tmax, uint32_t cpu)
{
	(void)cpu;
	/* four values a step: with x their exponents (a 16-bit lane
	 * each), x + 0x8000 - (tmax + 1) has its top bit set where
	 * x > tmax, and carries into no other lane */
	const uint64_t lanes = 0x0001000100010001ull, top = 0x8000u * lanes;
	const uint64_t add = (0x8000u - (tmax + 1)) * lanes;
	uint32_t i = 0;
#ifdef KX_X86
	if (cpu & (BFP_CPU_AVX2 | BFP_CPU_AVX512BW))
		i = escapes_avx2(bw, w, k, tmax);
#endif
	for (; i < k; i += 4) {
		if (i + 4 <= k) {
			uint64_t v;
			BFP_MEMCPY(&v, w + i, 8);
			if (((((v >> 7) & 0xFFu * lanes) + add) & top) == top)
				continue;
		}
		for (uint32_t j = i; j < i + 4 && j < k; j++) {
			const unsigned e = exp_of(w[j]);
			if (e <= tmax)
				bfp_put_eg0(bw, tmax - e);
		}
	}
}

static size_t kx_write(const kx_plan *pl, const uint16_t *w, uint32_t k, size_t budget,
		       uint8_t *out, uint8_t *scratch, uint32_t cpu)
{
	const int m = pl->m;
	const uint32_t cmax = kx_carry_max(m), carry = k < cmax ? k : cmax, nraw = k - carry;
	const size_t rawb = kx_raw_bytes(m, nraw);
	const unsigned ns = pl->k.t.ns, tmax = pl->k.etop - (ns - 1);
	if (rawb + 4 * BFP_KEYEXP_STATES >= budget)
		return 0;
	if (m)
		kx_pack7(out, w, nraw, cpu);
	else {
		for (uint32_t i = 0; i < nraw; i++)
			out[i] = raw_of(w[i]);
	}
	bfp_bw bw;
	bfp_bw_init(&bw, out + rawb, budget - rawb - 4 * BFP_KEYEXP_STATES);
	table_write(&bw, &pl->k);
	if (tmax)
		kx_escapes(&bw, w, k, tmax, cpu);
	const size_t bs = bfp_bw_finish(&bw);
	if (bw.overflow)
		return 0;
	/* the states start at 2^23 plus the last values' raw bits: 16 a
	 * state in bytes, or with m 30 a state in 7-bit fields */
	uint32_t x[BFP_KEYEXP_STATES] = {0};
	if (m) {
		for (uint32_t t = 0; t < carry; t++) {
			const unsigned r = raw7_of(w[nraw + t]), j = 7 * t / 30, o = 7 * t % 30;
			x[j] |= (r << o) & ((1u << 30) - 1);
			if (o > 23)
				x[j + 1] |= r >> (30 - o);
		}
	} else {
		for (uint32_t t = 0; t < carry; t++)
			x[t / 2] |= (uint32_t)raw_of(w[nraw + t]) << (8 * (t % 2));
	}
	for (unsigned j = 0; j < BFP_KEYEXP_STATES; j++)
		x[j] += BFP_RANS_L;
	const size_t room = budget - rawb - bs - 4 * BFP_KEYEXP_STATES;
	uint8_t *o = scratch;
	uint32_t i = k;
	/* the values past the last multiple of 4 first, then four at a time
	 * with the four states in registers; o only grows, so checking the
	 * room after each four finds what a check after each value would
	 * (scratch has room for the 8 bytes four can write past it, and the
	 * 2 stored beyond) */
	for (; i & (BFP_KEYEXP_STATES - 1);) {
		i--;
		kx_put(&x[i & (BFP_KEYEXP_STATES - 1)], &o, pl, w[i], m);
	}
	if ((size_t)(o - scratch) > room)
		return 0;
#ifdef KX_X86
	if (cpu & (BFP_CPU_AVX2 | BFP_CPU_AVX512BW))
		o = m ? puts4m_bmi2(x, o, pl, w, i, scratch + room)
		      : puts4_bmi2(x, o, pl, w, i, scratch + room);
	else
#endif
		o = m ? puts4m(x, o, pl, w, i, scratch + room) : puts4(x, o, pl, w, i, scratch + room);
	if (!o)
		return 0;
	const size_t rb = (size_t)(o - scratch);
	BFP_MEMCPY(out + rawb + bs, scratch, rb);
	uint8_t *st = out + rawb + bs + rb;
	for (unsigned j = 0; j < BFP_KEYEXP_STATES; j++)
		bfp_st32(st + 4 * j, x[j]);
	return rawb + bs + rb + 4 * BFP_KEYEXP_STATES;
}

/* ---- encoding 9 (FORMAT.md 3.12) ----
 *
 * Values in groups of KH_GROUP, value i in stream i mod 4. At each
 * group's start every stream takes from the shared byte stream the
 * whole bytes its 64-bit buffer has room for, less one bit: (63 - c) / 8
 * with c the bits it holds unread. A group's values take at most
 * 4 x 11 of the at least 56 bits each stream then holds. */
#define KH_GROUP 16u
/* The encoder's part of scratch for a stream: its codes (at most 11 bits
 * for each of 2048 values), its carried bits and the 8 bytes its last
 * store may write. */
#define KH_STREAM_CAP ((BFP_HUF_LMAX * BFP_KEYEXP_MAX / BFP_KEYHUF_STREAMS) / 8u + 16u)
_Static_assert(BFP_KEYHUF_STREAMS * KH_STREAM_CAP <= BFP_KEYEXP_SCRATCH, "encoder streams");
_Static_assert(sizeof(((bfp_kx_scratch *)0)->huf) == (2u << BFP_HUF_LMAX), "lookup table");

/* 8 bytes at p as a big-endian number, and the other way */
static inline uint64_t kh_ld64be(const uint8_t *p)
{
	uint64_t v;
	BFP_MEMCPY(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	v = __builtin_bswap64(v);
#endif
	return v;
}

static inline void kh_st64be(uint8_t *p, uint64_t v)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	v = __builtin_bswap64(v);
#endif
	BFP_MEMCPY(p, &v, 8);
}

/* A stream as the encoder writes it: bits from the top of acc down, nb
 * of them pending, stored 8 bytes at o each time (o then moves past the
 * whole bytes: the stream's buffer has 8 bytes of room after it). */
typedef struct kh_bits {
	uint8_t *o;
	uint64_t acc;
	unsigned nb;
} kh_bits;

static inline __attribute__((always_inline)) void kh_put(kh_bits *b, uint64_t v, unsigned len)
{
	b->acc |= v << (63 - b->nb - len) << 1; /* nb < 8, len <= 48 */
	b->nb += len;
	kh_st64be(b->o, b->acc);
	b->o += b->nb >> 3;
	b->acc <<= b->nb & ~7u;
	b->nb &= 7;
}

/* Bits [at, at + len) (len <= 32) of the carried fields' string cs
 * (bit 0 the top bit of cs[0]), which has a word of zeros at its end. */
static inline uint32_t kh_cbits(const uint64_t *cs, unsigned at, unsigned len)
{
	const unsigned q = at / 64, r = at % 64;
	const uint64_t v = (cs[q] << r) | (r ? cs[q + 1] >> (64 - r) : 0);
	return len ? (uint32_t)(v >> (64 - len)) : 0;
}

/* The first k values of w with pl (m = 2) into out; the payload's
 * length, or 0 when it does not fit budget. Each stream is written
 * whole into scratch first, since the bytes it takes at a group's start
 * hold codes of later groups; then the bytes go into out in the order
 * the decoder takes them. */
static size_t kh_write(const kx_plan *pl, const uint16_t *w, uint32_t k, size_t budget,
		       uint8_t *out, uint8_t *scratch, uint32_t cpu)
{
	const unsigned ns = pl->k.t.ns, tmax = pl->k.etop - (ns - 1);
	bfp_bw bw;
	bfp_bw_init(&bw, out, budget);
	table_write(&bw, &pl->k);
	const size_t tb = bfp_bw_finish(&bw);
	if (bw.overflow)
		return 0;
	/* one pass over the groups: the bytes each stream takes at a
	 * group's start (tk, in the decoder's order), and the group's four
	 * codes of each stream, put at once into the stream's own part of
	 * scratch; c: the bits each stream holds unread */
	uint8_t tk[(BFP_KEYEXP_MAX / KH_GROUP + 1) * BFP_KEYHUF_STREAMS];
	size_t hb = 0, ntk = 0;
	unsigned c[BFP_KEYHUF_STREAMS] = {0};
	kh_bits sb[BFP_KEYHUF_STREAMS];
	uint8_t *src[BFP_KEYHUF_STREAMS];
	for (unsigned j = 0; j < BFP_KEYHUF_STREAMS; j++) {
		src[j] = scratch + j * KH_STREAM_CAP;
		sb[j] = (kh_bits){src[j], 0, 0};
	}
	{
		kh_bits s0 = sb[0], s1 = sb[1], s2 = sb[2], s3 = sb[3];
		unsigned c0 = 0, c1 = 0, c2 = 0, c3 = 0;
#define KH_TK(cj)                                                                              \
	do {                                                                                   \
		const unsigned t_ = (63 - (cj)) >> 3;                                          \
		tk[ntk++] = (uint8_t)t_;                                                       \
		hb += t_;                                                                      \
		(cj) += 8 * t_;                                                                \
	} while (0)
/* stream j's four codes of the group at g, as one code of up to 48 bits */
#define KH_G4(sj, cj, j)                                                                       \
	do {                                                                                   \
		uint64_t v_ = 0;                                                               \
		unsigned l_ = 0;                                                               \
		for (unsigned q_ = 0; q_ < KH_GROUP; q_ += BFP_KEYHUF_STREAMS) {               \
			const uint32_t h_ = pl->hcode[kx_key(1, w[g + q_ + (j)])];             \
			v_ = v_ << (h_ >> 12) | (h_ & 0xFFFu);                                 \
			l_ += h_ >> 12;                                                        \
		}                                                                              \
		kh_put(&(sj), v_, l_);                                                         \
		(cj) -= l_;                                                                    \
	} while (0)
		uint32_t g = 0;
		for (; g + KH_GROUP <= k; g += KH_GROUP) {
			KH_TK(c0);
			KH_TK(c1);
			KH_TK(c2);
			KH_TK(c3);
			KH_G4(s0, c0, 0);
			KH_G4(s1, c1, 1);
			KH_G4(s2, c2, 2);
			KH_G4(s3, c3, 3);
		}
#undef KH_G4
		sb[0] = s0;
		sb[1] = s1;
		sb[2] = s2;
		sb[3] = s3;
		c[0] = c0;
		c[1] = c1;
		c[2] = c2;
		c[3] = c3;
		if (g < k) {
			for (unsigned j = 0; j < BFP_KEYHUF_STREAMS; j++)
				KH_TK(c[j]);
			for (uint32_t i = g; i < k; i++) {
				const uint32_t h = pl->hcode[kx_key(1, w[i])];
				kh_put(&sb[i % BFP_KEYHUF_STREAMS], h & 0xFFFu, h >> 12);
				c[i % BFP_KEYHUF_STREAMS] -= h >> 12;
			}
		}
#undef KH_TK
	}
	unsigned u = 0;
	for (unsigned j = 0; j < BFP_KEYHUF_STREAMS; j++)
		u += c[j];
	const uint32_t carry = u / 7 < k ? u / 7 : k, nraw = k - carry;
	const size_t rawb = kx_raw_bytes(1, nraw);
	/* room for the byte kx_pack7 stores past the raw fields */
	if (tb + hb + rawb + 1 > budget)
		return 0;
	/* the carried fields, 7 bits each, the first bit the highest, then
	 * zeros: stream 0's unread bits, then stream 1's, ... */
	uint64_t cs[(BFP_KEYHUF_STREAMS * 63 + 63) / 64 + 1] = {0};
	for (uint32_t t = 0; t < carry; t++) {
		const unsigned r = raw7_of(w[nraw + t]), b = 7 * t, q = b / 64, o = b % 64;
		if (o <= 57)
			cs[q] |= (uint64_t)r << (57 - o);
		else {
			cs[q] |= (uint64_t)r >> (o - 57);
			cs[q + 1] |= (uint64_t)r << (121 - o);
		}
	}
	unsigned cat = 0;
	for (unsigned j = 0; j < BFP_KEYHUF_STREAMS; j++) {
		const unsigned hi = c[j] > 32 ? c[j] - 32 : 0;
		kh_put(&sb[j], kh_cbits(cs, cat, hi), hi);
		kh_put(&sb[j], kh_cbits(cs, cat + hi, c[j] - hi), c[j] - hi);
		cat += c[j];
	}
	/* the bytes in the decoder's order, 8 bytes a copy while out has
	 * room for them */
	uint8_t *o = out + tb;
	for (size_t q = 0; q < ntk; q++) {
		const unsigned j = q % BFP_KEYHUF_STREAMS, t = tk[q];
		if (o + 8 <= out + budget)
			BFP_MEMCPY(o, src[j], 8);
		else
			for (unsigned y = 0; y < t; y++)
				o[y] = src[j][y];
		o += t;
		src[j] += t;
	}
	/* the raw fields of the values not carried, then the escapes, in
	 * one bit stream */
	kx_pack7(o, w, nraw, cpu);
	const size_t whole = 7 * (size_t)nraw / 8;
	const unsigned part = 7 * nraw % 8;
	bfp_bw_init(&bw, o + whole, budget - (size_t)(o - out) - whole);
	bw.acc = part ? o[whole] & ((1u << part) - 1) : 0;
	bw.n = part;
	if (tmax)
		kx_escapes(&bw, w, k, tmax, cpu);
	const size_t eb = bfp_bw_finish(&bw);
	if (bw.overflow)
		return 0;
	return (size_t)(o - out) + whole + eb;
}

/* The longest prefix of w[0..n) that fits budget with pl (kx_bytes),
 * where c is the sum of the costs of all n values. kx_bytes grows with
 * the prefix, so this is the largest i whose prefix fits; the costs of
 * w[i..n) are taken off c from the end, since a first guess of n
 * overshoots by a few percent. */
static uint32_t kx_prefix(const kx_plan *pl, const uint16_t *w, uint32_t n, uint64_t c,
			  size_t budget)
{
	uint32_t i = n;
	while (i > 0 && kx_bytes(pl, i, KX_EBITS(c), KX_R256(c)) > budget)
		c -= pl->cost[kx_key(pl->m, w[--i])];
	return i;
}

uint32_t bfp_keyexp_encode(const uint16_t *w, uint64_t avail, size_t budget, uint8_t *out,
			   size_t *len, uint8_t *scratch, uint32_t cpu, int m)
{
	kx_plan pl;
	uint64_t nmax = avail < BFP_KEYEXP_MAX ? avail : BFP_KEYEXP_MAX;
	if (budget <= 4 * BFP_KEYEXP_STATES + 4 || nmax == 0)
		return 0;
	/* raw fields alone: a byte a value, or 7 bits */
	const uint64_t most = (m ? budget * 8 / 7 : budget) + kx_carry_max(m);
	if (nmax > most)
		nmax = most;
	/* first at 10 bits a value; more when all of them fit well inside */
	uint64_t n = budget * 8 / 10;
	n = n < nmax ? n : nmax;
	n = n ? n : 1;
	uint32_t k = 0;
	for (int round = 0;; round++) {
		if (!kx_plan_make(&pl, w, (uint32_t)n, m))
			return 0;
		const uint64_t c = kx_cost_sum(&pl);
		const uint64_t bytes = kx_bytes(&pl, n, KX_EBITS(c), KX_R256(c));
		if (bytes <= budget) {
			k = (uint32_t)n;
			if (n == nmax || bytes >= budget - budget / 64 || round == 2)
				break;
			n = n * budget / bytes + 1;
			n = n < nmax ? n : nmax;
			continue;
		}
		k = kx_prefix(&pl, w, (uint32_t)n, c, budget);
		break;
	}
	/* the sizes are bounds: shrink in the rare case they were not */
	while (k > 0) {
		const size_t l = m == 2 ? kh_write(&pl, w, k, budget, out, scratch, cpu)
				      : kx_write(&pl, w, k, budget, out, scratch, cpu);
		if (l) {
			*len = l;
			return k;
		}
		k -= k / 64 + 1;
	}
	return 0;
}

/* ---- decoder ----
 *
 * Three passes over a frame's values: the rANS symbols, the four states
 * in registers (the pass that bounds the speed: each state waits for the
 * bytes the one before it took); each value from its symbol and raw byte,
 * listing the values whose symbol is the last; the escapes of those, in
 * order. The data decides no branch: the list is appended to without
 * one, and the escapes' loop runs as many times as it has entries. */


/* The slot map of table (f, ns) into slots (BFP_KEYEXP_SLOTS words). */
static void slots_build(uint32_t *slots, const uint16_t *f, unsigned ns)
{
	unsigned at = 0;
	for (unsigned s = 0; s < ns; s++) {
		const uint32_t b = bfp_rans_slot(s, f[s], 0);
		for (unsigned j = 0; j < f[s]; j++)
			slots[at + j] = b + ((uint32_t)j << 8);
		at += f[s];
	}
}

/* Pass 1 for values [0, n) in steps of four while at least 8 bytes
 * are left to read: their symbols into the low bytes of w. Each state
 * reads its bytes where the one before it stopped. Returns the first
 * value not decoded. */
#define KX_SYMS_FAST(name, attr)                                                               \
	attr static uint32_t name(uint32_t *xs, const uint8_t *pl, size_t *pp,                 \
				  const uint32_t *slots, uint32_t n, uint16_t *w)              \
	{                                                                                      \
		uint32_t x0 = xs[0], x1 = xs[1], x2 = xs[2], x3 = xs[3];                       \
		size_t p = *pp;                                                                \
		uint32_t i = 0;                                                                \
		for (; i + BFP_KEYEXP_STATES <= n && p >= 2 * BFP_KEYEXP_STATES;              \
		     i += BFP_KEYEXP_STATES) {                                                 \
			w[i] = (uint16_t)bfp_rans_get_packed(&x0, pl, &p, slots);              \
			w[i + 1] = (uint16_t)bfp_rans_get_packed(&x1, pl, &p, slots);          \
			w[i + 2] = (uint16_t)bfp_rans_get_packed(&x2, pl, &p, slots);          \
			w[i + 3] = (uint16_t)bfp_rans_get_packed(&x3, pl, &p, slots);          \
		}                                                                              \
		xs[0] = x0;                                                                    \
		xs[1] = x1;                                                                    \
		xs[2] = x2;                                                                    \
		xs[3] = x3;                                                                    \
		*pp = p;                                                                       \
		return i;                                                                      \
	}
KX_SYMS_FAST(syms_fast, )
#ifdef KX_X86
KX_SYMS_FAST(syms_fast_bmi2, __attribute__((target("bmi2,lzcnt"))))
#endif

/* Pass 2 for values [i, n): exponent etop - s and the raw byte (0 for
 * the carried values, whose raw bytes come last), and the index of each
 * value whose symbol is tail appended to esc from *nesc on (stored
 * either way, counted only then: no branch on the data). */
static void values(uint16_t *w, const uint8_t *pl, uint32_t i, uint32_t n, uint32_t nraw,
		   unsigned etop, unsigned tail, uint16_t *esc, uint32_t *nesc)
{
	uint32_t c = *nesc;
	for (; i < n; i++) {
		const unsigned s = w[i] & 0xFFu, b = i < nraw ? pl[i] : 0;
		w[i] = (uint16_t)(((etop - s) << 7) | (b & 0x7Fu) | ((b & 0x80u) << 8));
		esc[c] = (uint16_t)i;
		c += s == tail;
	}
	*nesc = c;
}

/* values() for encoding 8 (FORMAT.md 3.11): symbol u is exponent
 * symbol u / 2 with the mantissa's top bit u mod 2, and the raw fields are
 * 7 bits a value (the byte after the last one read is in the payload). */
static inline uint16_t kxm_value(unsigned u, unsigned r, unsigned etop)
{
	return (uint16_t)(((etop - (u >> 1)) << 7) | (u & 1u) << 6 | (r & 0x3Fu) | (r & 0x40u) << 9);
}

static void values_m(uint16_t *w, const uint8_t *pl, uint32_t i, uint32_t n, uint32_t nraw,
		     size_t lim, unsigned ush, unsigned etop, unsigned tail, uint16_t *esc,
		     uint32_t *nesc)
{
	uint32_t c = *nesc;
	/* eight values from seven bytes (i is a multiple of 8 here) */
	for (; i + 8 <= nraw && 7 * (size_t)i / 8 + 8 <= lim; i += 8) {
		const uint64_t g = bfp_ld64(pl + 7 * (size_t)i / 8);
		for (unsigned j = 0; j < 8; j++) {
			const unsigned u = (unsigned)(w[i + j] >> ush) & 0xFFu;
			w[i + j] = kxm_value(u, (unsigned)(g >> (7 * j)) & 0x7Fu, etop);
			esc[c] = (uint16_t)(i + j);
			c += (u >> 1) == tail;
		}
	}
	for (; i < n; i++) {
		const unsigned u = (unsigned)(w[i] >> ush) & 0xFFu;
		unsigned r = 0;
		if (i < nraw) {
			const size_t b = 7 * (size_t)i / 8;
			r = ((unsigned)(pl[b] | (b + 1 < lim ? pl[b + 1] : 0) << 8) >> (7 * i % 8)) &
			    0x7Fu;
		}
		w[i] = kxm_value(u, r, etop);
		esc[c] = (uint16_t)i;
		c += (u >> 1) == tail;
	}
	*nesc = c;
}

#ifdef KX_X86
/* slots_build, eight slots a store: a symbol's last store runs into the
 * next symbol's slots, which come after it, or into the map's padding. */
__attribute__((target("avx2"))) static void slots_build_avx2(uint32_t *slots, const uint16_t *f,
							      unsigned ns)
{
	const __m256i step = _mm256_set1_epi32(8 << 8);
	const __m256i lane = _mm256_setr_epi32(0, 1 << 8, 2 << 8, 3 << 8, 4 << 8, 5 << 8, 6 << 8,
					       7 << 8);
	unsigned at = 0;
	for (unsigned s = 0; s < ns; s++) {
		__m256i v = _mm256_add_epi32(_mm256_set1_epi32((int)bfp_rans_slot(s, f[s], 0)), lane);
		for (unsigned j = 0; j < f[s]; j += 8) {
			_mm256_storeu_si256((__m256i *)(void *)(slots + at + j), v);
			v = _mm256_add_epi32(v, step);
		}
		at += f[s];
	}
}

/* slots_build, sixteen slots a store (the map has padding for the last
 * store's 15 past its end). */
__attribute__((target("avx512f"))) static void slots_build_avx512(uint32_t *slots,
								   const uint16_t *f, unsigned ns)
{
	const __m512i step = _mm512_set1_epi32(16 << 8);
	const __m512i lane = _mm512_setr_epi32(0, 1 << 8, 2 << 8, 3 << 8, 4 << 8, 5 << 8, 6 << 8,
					       7 << 8, 8 << 8, 9 << 8, 10 << 8, 11 << 8, 12 << 8,
					       13 << 8, 14 << 8, 15 << 8);
	unsigned at = 0;
	for (unsigned s = 0; s < ns; s++) {
		__m512i v = _mm512_add_epi32(_mm512_set1_epi32((int)bfp_rans_slot(s, f[s], 0)), lane);
		for (unsigned j = 0; j < f[s]; j += 16) {
			_mm512_storeu_si512((void *)(slots + at + j), v);
			v = _mm512_add_epi32(v, step);
		}
		at += f[s];
	}
}

/* kx_sel[b]: the bits set in b, as eight byte offsets 0..7 (the first
 * in the low byte), for appending the values marked in a byte of a mask
 * without a branch. */
static const uint64_t kx_sel[256] = {
	0x0000000000000000ull, 0x0000000000000000ull, 0x0000000000000001ull, 0x0000000000000100ull,
	0x0000000000000002ull, 0x0000000000000200ull, 0x0000000000000201ull, 0x0000000000020100ull,
	0x0000000000000003ull, 0x0000000000000300ull, 0x0000000000000301ull, 0x0000000000030100ull,
	0x0000000000000302ull, 0x0000000000030200ull, 0x0000000000030201ull, 0x0000000003020100ull,
	0x0000000000000004ull, 0x0000000000000400ull, 0x0000000000000401ull, 0x0000000000040100ull,
	0x0000000000000402ull, 0x0000000000040200ull, 0x0000000000040201ull, 0x0000000004020100ull,
	0x0000000000000403ull, 0x0000000000040300ull, 0x0000000000040301ull, 0x0000000004030100ull,
	0x0000000000040302ull, 0x0000000004030200ull, 0x0000000004030201ull, 0x0000000403020100ull,
	0x0000000000000005ull, 0x0000000000000500ull, 0x0000000000000501ull, 0x0000000000050100ull,
	0x0000000000000502ull, 0x0000000000050200ull, 0x0000000000050201ull, 0x0000000005020100ull,
	0x0000000000000503ull, 0x0000000000050300ull, 0x0000000000050301ull, 0x0000000005030100ull,
	0x0000000000050302ull, 0x0000000005030200ull, 0x0000000005030201ull, 0x0000000503020100ull,
	0x0000000000000504ull, 0x0000000000050400ull, 0x0000000000050401ull, 0x0000000005040100ull,
	0x0000000000050402ull, 0x0000000005040200ull, 0x0000000005040201ull, 0x0000000504020100ull,
	0x0000000000050403ull, 0x0000000005040300ull, 0x0000000005040301ull, 0x0000000504030100ull,
	0x0000000005040302ull, 0x0000000504030200ull, 0x0000000504030201ull, 0x0000050403020100ull,
	0x0000000000000006ull, 0x0000000000000600ull, 0x0000000000000601ull, 0x0000000000060100ull,
	0x0000000000000602ull, 0x0000000000060200ull, 0x0000000000060201ull, 0x0000000006020100ull,
	0x0000000000000603ull, 0x0000000000060300ull, 0x0000000000060301ull, 0x0000000006030100ull,
	0x0000000000060302ull, 0x0000000006030200ull, 0x0000000006030201ull, 0x0000000603020100ull,
	0x0000000000000604ull, 0x0000000000060400ull, 0x0000000000060401ull, 0x0000000006040100ull,
	0x0000000000060402ull, 0x0000000006040200ull, 0x0000000006040201ull, 0x0000000604020100ull,
	0x0000000000060403ull, 0x0000000006040300ull, 0x0000000006040301ull, 0x0000000604030100ull,
	0x0000000006040302ull, 0x0000000604030200ull, 0x0000000604030201ull, 0x0000060403020100ull,
	0x0000000000000605ull, 0x0000000000060500ull, 0x0000000000060501ull, 0x0000000006050100ull,
	0x0000000000060502ull, 0x0000000006050200ull, 0x0000000006050201ull, 0x0000000605020100ull,
	0x0000000000060503ull, 0x0000000006050300ull, 0x0000000006050301ull, 0x0000000605030100ull,
	0x0000000006050302ull, 0x0000000605030200ull, 0x0000000605030201ull, 0x0000060503020100ull,
	0x0000000000060504ull, 0x0000000006050400ull, 0x0000000006050401ull, 0x0000000605040100ull,
	0x0000000006050402ull, 0x0000000605040200ull, 0x0000000605040201ull, 0x0000060504020100ull,
	0x0000000006050403ull, 0x0000000605040300ull, 0x0000000605040301ull, 0x0000060504030100ull,
	0x0000000605040302ull, 0x0000060504030200ull, 0x0000060504030201ull, 0x0006050403020100ull,
	0x0000000000000007ull, 0x0000000000000700ull, 0x0000000000000701ull, 0x0000000000070100ull,
	0x0000000000000702ull, 0x0000000000070200ull, 0x0000000000070201ull, 0x0000000007020100ull,
	0x0000000000000703ull, 0x0000000000070300ull, 0x0000000000070301ull, 0x0000000007030100ull,
	0x0000000000070302ull, 0x0000000007030200ull, 0x0000000007030201ull, 0x0000000703020100ull,
	0x0000000000000704ull, 0x0000000000070400ull, 0x0000000000070401ull, 0x0000000007040100ull,
	0x0000000000070402ull, 0x0000000007040200ull, 0x0000000007040201ull, 0x0000000704020100ull,
	0x0000000000070403ull, 0x0000000007040300ull, 0x0000000007040301ull, 0x0000000704030100ull,
	0x0000000007040302ull, 0x0000000704030200ull, 0x0000000704030201ull, 0x0000070403020100ull,
	0x0000000000000705ull, 0x0000000000070500ull, 0x0000000000070501ull, 0x0000000007050100ull,
	0x0000000000070502ull, 0x0000000007050200ull, 0x0000000007050201ull, 0x0000000705020100ull,
	0x0000000000070503ull, 0x0000000007050300ull, 0x0000000007050301ull, 0x0000000705030100ull,
	0x0000000007050302ull, 0x0000000705030200ull, 0x0000000705030201ull, 0x0000070503020100ull,
	0x0000000000070504ull, 0x0000000007050400ull, 0x0000000007050401ull, 0x0000000705040100ull,
	0x0000000007050402ull, 0x0000000705040200ull, 0x0000000705040201ull, 0x0000070504020100ull,
	0x0000000007050403ull, 0x0000000705040300ull, 0x0000000705040301ull, 0x0000070504030100ull,
	0x0000000705040302ull, 0x0000070504030200ull, 0x0000070504030201ull, 0x0007050403020100ull,
	0x0000000000000706ull, 0x0000000000070600ull, 0x0000000000070601ull, 0x0000000007060100ull,
	0x0000000000070602ull, 0x0000000007060200ull, 0x0000000007060201ull, 0x0000000706020100ull,
	0x0000000000070603ull, 0x0000000007060300ull, 0x0000000007060301ull, 0x0000000706030100ull,
	0x0000000007060302ull, 0x0000000706030200ull, 0x0000000706030201ull, 0x0000070603020100ull,
	0x0000000000070604ull, 0x0000000007060400ull, 0x0000000007060401ull, 0x0000000706040100ull,
	0x0000000007060402ull, 0x0000000706040200ull, 0x0000000706040201ull, 0x0000070604020100ull,
	0x0000000007060403ull, 0x0000000706040300ull, 0x0000000706040301ull, 0x0000070604030100ull,
	0x0000000706040302ull, 0x0000070604030200ull, 0x0000070604030201ull, 0x0007060403020100ull,
	0x0000000000070605ull, 0x0000000007060500ull, 0x0000000007060501ull, 0x0000000706050100ull,
	0x0000000007060502ull, 0x0000000706050200ull, 0x0000000706050201ull, 0x0000070605020100ull,
	0x0000000007060503ull, 0x0000000706050300ull, 0x0000000706050301ull, 0x0000070605030100ull,
	0x0000000706050302ull, 0x0000070605030200ull, 0x0000070605030201ull, 0x0007060503020100ull,
	0x0000000007060504ull, 0x0000000706050400ull, 0x0000000706050401ull, 0x0000070605040100ull,
	0x0000000706050402ull, 0x0000070605040200ull, 0x0000070605040201ull, 0x0007060504020100ull,
	0x0000000706050403ull, 0x0000070605040300ull, 0x0000070605040301ull, 0x0007060504030100ull,
	0x0000070605040302ull, 0x0007060504030200ull, 0x0007060504030201ull, 0x0706050403020100ull,
};

/* The indices of the lanes of t set (a 16-bit compare of values
 * i..i+15) appended to esc from c on, eight a store: their offsets from
 * kx_sel, widened and added to i (esc has room for the seven past the
 * last). Returns the new count. */
__attribute__((target("avx2,popcnt"))) static inline uint32_t esc_append16(__m256i t,
									     uint16_t *esc,
									     uint32_t c, uint32_t i)
{
	const unsigned mk = (unsigned)_mm_movemask_epi8(
		_mm_packs_epi16(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1)));
	for (unsigned h = 0; h < 2; h++) {
		const unsigned bt = (mk >> (8 * h)) & 0xFFu;
		const __m128i at =
			_mm_add_epi16(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)kx_sel[bt])),
				      _mm_set1_epi16((short)(i + 8 * h)));
		_mm_storeu_si128((__m128i *)(void *)(esc + c), at);
		c += (uint32_t)__builtin_popcount(bt);
	}
	return c;
}

/* values(), sixteen raw values a step; returns where it stopped. The
 * escapes of each 16 are appended eight at a time: their offsets from
 * kx_sel, widened and added to the first value's index, one store of
 * eight indices (esc has room for the seven past the last), the count
 * moved by those marked. */
__attribute__((target("avx2,popcnt"))) static uint32_t
values_avx2(uint16_t *w, const uint8_t *pl, uint32_t nraw, unsigned etop, unsigned tail,
	    uint16_t *esc, uint32_t *nesc)
{
	const __m256i top = _mm256_set1_epi16((short)etop), m7 = _mm256_set1_epi16(0x7F);
	const __m256i m80 = _mm256_set1_epi16((short)0x8000), m8 = _mm256_set1_epi16(0xFF);
	const __m256i tl = _mm256_set1_epi16((short)tail);
	uint32_t i = 0, c = *nesc;
	for (; i + 16 <= nraw; i += 16) {
		const __m256i s = _mm256_and_si256(
			_mm256_loadu_si256((const __m256i *)(const void *)(w + i)), m8);
		const __m256i b = _mm256_cvtepu8_epi16(
			_mm_loadu_si128((const __m128i *)(const void *)(pl + i)));
		const __m256i e = _mm256_slli_epi16(_mm256_sub_epi16(top, s), 7);
		const __m256i v = _mm256_or_si256(
			_mm256_or_si256(e, _mm256_and_si256(b, m7)),
			_mm256_and_si256(_mm256_slli_epi16(b, 8), m80));
		_mm256_storeu_si256((__m256i *)(void *)(w + i), v);
		c = esc_append16(_mm256_cmpeq_epi16(s, tl), esc, c, i);
	}
	*nesc = c;
	return i;
}

/* values_m(), sixteen values a step from fourteen bytes: each lane gets
 * the two bytes its 7 bits start in, shifted up so that they end at bit
 * 15 (a multiply by 2^(8 - offset)), then down by 8. */
__attribute__((target("avx2,popcnt"))) static uint32_t
values_m_avx2(uint16_t *w, const uint8_t *pl, uint32_t nraw, unsigned ush, unsigned etop,
	      unsigned tail, uint16_t *esc, uint32_t *nesc)
{
	const __m128i sh = _mm_cvtsi32_si128((int)ush);
	const __m256i top = _mm256_set1_epi16((short)etop), m7f = _mm256_set1_epi16(0x7F);
	const __m256i m3f = _mm256_set1_epi16(0x3F), m40 = _mm256_set1_epi16(0x40);
	const __m256i m8 = _mm256_set1_epi16(0xFF), one = _mm256_set1_epi16(1);
	const __m256i tl = _mm256_set1_epi16((short)tail);
	const __m256i pick = _mm256_setr_epi8(0, 1, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8,
					      7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14);
	const __m256i mul = _mm256_setr_epi16(256, 2, 4, 8, 16, 32, 64, 128, 256, 2, 4, 8, 16, 32,
					      64, 128);
	uint32_t i = 0, c = *nesc;
	/* the load takes 16 bytes from 7 i / 8 on: 2 past the 14 used, which
	 * the payload has (the caller limits nraw so) */
	for (; i + 16 <= nraw; i += 16) {
		const __m128i b16 = _mm_loadu_si128((const __m128i *)(const void *)(pl + 7 * (size_t)i / 8));
		const __m256i two = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(b16), pick);
		const __m256i r =
			_mm256_and_si256(_mm256_srli_epi16(_mm256_mullo_epi16(two, mul), 8), m7f);
		const __m256i u = _mm256_and_si256(
			_mm256_srl_epi16(_mm256_loadu_si256((const __m256i *)(const void *)(w + i)),
					 sh),
			m8);
		const __m256i s = _mm256_srli_epi16(u, 1);
		const __m256i e = _mm256_slli_epi16(_mm256_sub_epi16(top, s), 7);
		const __m256i v = _mm256_or_si256(
			_mm256_or_si256(e, _mm256_slli_epi16(_mm256_and_si256(u, one), 6)),
			_mm256_or_si256(_mm256_and_si256(r, m3f),
					_mm256_slli_epi16(_mm256_and_si256(r, m40), 9)));
		_mm256_storeu_si256((__m256i *)(void *)(w + i), v);
		c = esc_append16(_mm256_cmpeq_epi16(s, tl), esc, c, i);
	}
	*nesc = c;
	return i;
}
/* values_m() for values [i, n) whose raw fields come later (encoding
 * 9's carried values: 0 here), sixteen a step, the symbol in the high
 * byte; returns where it stopped. */
__attribute__((target("avx2,popcnt"))) static uint32_t
values_c_avx2(uint16_t *w, uint32_t i, uint32_t n, unsigned etop, unsigned tail, uint16_t *esc,
	      uint32_t *nesc)
{
	const __m256i top = _mm256_set1_epi16((short)etop), one = _mm256_set1_epi16(1);
	const __m256i tl = _mm256_set1_epi16((short)tail);
	uint32_t c = *nesc;
	for (; i + 16 <= n; i += 16) {
		const __m256i u =
			_mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)(const void *)(w + i)), 8);
		const __m256i s = _mm256_srli_epi16(u, 1);
		const __m256i v = _mm256_or_si256(_mm256_slli_epi16(_mm256_sub_epi16(top, s), 7),
						  _mm256_slli_epi16(_mm256_and_si256(u, one), 6));
		_mm256_storeu_si256((__m256i *)(void *)(w + i), v);
		c = esc_append16(_mm256_cmpeq_epi16(s, tl), esc, c, i);
	}
	*nesc = c;
	return i;
}
#endif


/* Encoding 8's end (FORMAT.md 3.11): the raw section's padding is zero,
 * the states are back at 2^23 plus 30 bits each, and those hold the raw
 * fields of the carried values w[nraw..nraw + carry) and zeros after. */
static bfp_status carried_m(uint16_t *w, const uint8_t *pl, uint32_t nraw, size_t rawb,
			    uint32_t carry, const uint32_t *x)
{
	const unsigned used = 7 * nraw % 8;
	BFP_CHECK(!used || (pl[rawb - 1] >> used) == 0, BFP_E_CORRUPT);
	uint32_t c[BFP_KEYEXP_STATES];
	const unsigned lim = 7 * carry;
	for (unsigned j = 0; j < BFP_KEYEXP_STATES; j++) {
		c[j] = x[j] - BFP_RANS_L;
		BFP_CHECK(c[j] < (1u << 30), BFP_E_CORRUPT);
		const unsigned at = 30 * j; /* c[j]'s first bit in the string */
		BFP_CHECK(lim >= at + 30 || (c[j] >> (lim > at ? lim - at : 0)) == 0, BFP_E_CORRUPT);
	}
	for (uint32_t t = 0; t < carry; t++) {
		const unsigned j = 7 * t / 30, o = 7 * t % 30;
		unsigned r = c[j] >> o;
		if (o > 23)
			r |= c[j + 1] << (30 - o);
		r &= 0x7Fu;
		w[nraw + t] = (uint16_t)(w[nraw + t] | (r & 0x3Fu) | (r & 0x40u) << 9);
	}
	return BFP_OK;
}

/* The zero bits that pad r's bit stream to its next byte: the bits read
 * before them, or UINT64_MAX when one is set or the stream ran out. */
static uint64_t kx_br_pad(bfp_br *r)
{
	const uint64_t bits = bfp_br_tell(r);
	if (bfp_br_get(r, (unsigned)((8 - (bits & 7)) & 7)) != 0 || r->err)
		return UINT64_MAX;
	return bits;
}

/* Pass 3 of encodings 7-9: the escapes of the values listed in esc[0..n),
 * in value order, from r (symbol ns - 1 gave those values exponent
 * tmax), then the padding to r's next byte (kx_br_pad). Returns the bits
 * read before the padding, or UINT64_MAX for a bad escape or padding. */
static uint64_t kx_escapes_read(bfp_br *r, uint16_t *w, const uint16_t *esc, uint32_t n,
				unsigned tmax)
{
	for (uint32_t j = 0; j < n; j++) {
		uint16_t *v = w + esc[j];
		const uint32_t e = bfp_get_eg0(r);
		if (r->err || e > tmax)
			return UINT64_MAX;
		*v = (uint16_t)((*v & 0x807Fu) | ((tmax - e) << 7));
	}
	return kx_br_pad(r);
}

/* ---- encoding 9's decoder (FORMAT.md 3.12) ----
 *
 * Each stream's 64-bit buffer holds its unread bits from the top down,
 * then a set bit, then zeros: the trailing zeros tell how many bytes
 * the stream takes at a group's start (tz / 8), and a code's length
 * (the low bits of its table entry) is the shift that takes it. */

#ifdef KX_X86
/* bfp_huf_table, 64 bytes a store where a code spans 32 entries or more */
__attribute__((target("avx512f,avx2"))) static void kh_table_avx512(const uint8_t *len,
								     const uint16_t *code,
								     unsigned ns, uint16_t *t)
{
	for (unsigned s = 0; s < ns; s++) {
		const unsigned sh = BFP_HUF_LMAX - len[s], at = (unsigned)code[s] << sh;
		const uint16_t e = (uint16_t)(len[s] | s << 8);
		if (sh >= 5) {
			const __m512i v = _mm512_set1_epi16((short)e);
			for (unsigned j = 0; j < (1u << sh); j += 32)
				_mm512_storeu_si512((void *)(t + at + j), v);
		} else if (sh >= 4) {
			_mm256_storeu_si256((__m256i *)(void *)(t + at), _mm256_set1_epi16((short)e));
		} else {
			for (unsigned j = 0; j < (1u << sh); j++)
				t[at + j] = e;
		}
	}
}

/* bfp_huf_table, 32 bytes a store where a code spans sixteen entries or
 * more */
__attribute__((target("avx2"))) static void kh_table_avx2(const uint8_t *len,
							   const uint16_t *code, unsigned ns,
							   uint16_t *t)
{
	for (unsigned s = 0; s < ns; s++) {
		const unsigned sh = BFP_HUF_LMAX - len[s], at = (unsigned)code[s] << sh;
		const uint16_t e = (uint16_t)(len[s] | s << 8);
		if (sh >= 4) {
			const __m256i v = _mm256_set1_epi16((short)e);
			for (unsigned j = 0; j < (1u << sh); j += 16)
				_mm256_storeu_si256((__m256i *)(void *)(t + at + j), v);
		} else {
			for (unsigned j = 0; j < (1u << sh); j++)
				t[at + j] = e;
		}
	}
}
#endif

/* Take a stream's bytes from *p (8 readable there). */
#define KH_TAKE(b, p)                                                                          \
	do {                                                                                   \
		const unsigned tz_ = (unsigned)__builtin_ctzll(b);                             \
		const uint64_t m_ = 1ull << (tz_ & 7);                                         \
		(b) = ((b) & ((b)-1)) | (((kh_ld64be(p) >> (tz_ ^ 63)) | m_) & (0 - m_));       \
		(p) += tz_ >> 3;                                                               \
	} while (0)
/* Decode value i from stream buffer b: its table entry into w[i]; sh is
 * 64 - BFP_HUF_LMAX. */
#define KH_SYM(b, t, w, i, sh)                                                                 \
	do {                                                                                   \
		const uint16_t e_ = (t)[(b) >> (sh)];                                          \
		(w)[i] = e_;                                                                   \
		(b) <<= (e_ & 63u);                                                            \
	} while (0)

/* Groups [0, n / 16) while the 28 bytes the takes may need and the 8
 * their loads read are there; returns the first value not decoded. The
 * shift of the look-up is a register's (a variable shift takes one
 * instruction where a constant one takes a copy and a shift). */
#define KH_SYMS_FAST(name, attr)                                                               \
	attr static uint32_t name(uint64_t *bs, const uint8_t **pp, const uint8_t *end,         \
				  const uint16_t *t, uint32_t n, uint16_t *w)                  \
	{                                                                                      \
		uint64_t b0 = bs[0], b1 = bs[1], b2 = bs[2], b3 = bs[3];                       \
		const uint8_t *p = *pp;                                                        \
		unsigned sh = 64 - BFP_HUF_LMAX;                                               \
		__asm__("" : "+r"(sh));                                                        \
		uint16_t *o = w;                                                               \
		for (; (uint32_t)(o - w) + KH_GROUP <= n && end - p >= 36; o += KH_GROUP) {    \
			KH_TAKE(b0, p);                                                        \
			KH_TAKE(b1, p);                                                        \
			KH_TAKE(b2, p);                                                        \
			KH_TAKE(b3, p);                                                        \
			for (unsigned q = 0; q < KH_GROUP; q += 4) {                           \
				KH_SYM(b0, t, o, q, sh);                                       \
				KH_SYM(b1, t, o, q + 1, sh);                                   \
				KH_SYM(b2, t, o, q + 2, sh);                                   \
				KH_SYM(b3, t, o, q + 3, sh);                                   \
			}                                                                      \
		}                                                                              \
		bs[0] = b0;                                                                    \
		bs[1] = b1;                                                                    \
		bs[2] = b2;                                                                    \
		bs[3] = b3;                                                                    \
		*pp = p;                                                                       \
		return (uint32_t)(o - w);                                                      \
	}
KH_SYMS_FAST(kh_syms_fast, )
#ifdef KX_X86
KH_SYMS_FAST(kh_syms_fast_bmi2, __attribute__((target("bmi,bmi2"))))
#endif

/* Append the len (1..63) bits v (at the bottom) to the bit string cs at
 * *at, the first bit the top of cs[0]. */
static inline void kh_cput(uint64_t *cs, unsigned *at, uint64_t v, unsigned len)
{
	const unsigned q = *at / 64, r = *at % 64;
	v <<= 64 - len; /* at the top */
	cs[q] |= v >> r;
	if (r + len > 64)
		cs[q + 1] |= v << (64 - r);
	*at += len;
}

static bfp_status kh_decode(const uint8_t *pl, size_t len, uint32_t n, uint16_t *w,
			    bfp_kx_scratch *ks, uint32_t cpu)
{
	kx_table k;
	uint16_t f[2 * BFP_KEYEXP_SYMS], code[2 * BFP_KEYEXP_SYMS];
	uint8_t hl[2 * BFP_KEYEXP_SYMS];
	unsigned nsym;
	(void)cpu;
	BFP_CHECK(n >= 1 && n <= BFP_KEYEXP_MAX, BFP_E_CORRUPT);
	bfp_br r;
	bfp_br_init(&r, pl, len);
	BFP_CHECK(table_parse(&r, &k), BFP_E_CORRUPT);
	BFP_CHECK(kx_freqs(1, &k.t, f, &nsym), BFP_E_CORRUPT);
	const uint64_t tbits = kx_br_pad(&r);
	BFP_CHECK(tbits != UINT64_MAX, BFP_E_CORRUPT);
	const unsigned ns = k.t.ns, tmax = k.etop - (ns - 1);
	const unsigned tail = tmax ? ns - 1 : 0xFFFFu;
	bfp_huf_lengths(f, nsym, hl);
	bfp_huf_codes(hl, nsym, code);
#ifdef KX_X86
	if (cpu & BFP_CPU_AVX512BW)
		kh_table_avx512(hl, code, nsym, ks->huf);
	else if (cpu & BFP_CPU_AVX2)
		kh_table_avx2(hl, code, nsym, ks->huf);
	else
#endif
		bfp_huf_table(hl, code, nsym, ks->huf);
	/* pass 1: each value's table entry */
	const uint8_t *p = pl + (tbits + 7) / 8, *end = pl + len;
	uint64_t b[BFP_KEYHUF_STREAMS];
	for (unsigned j = 0; j < BFP_KEYHUF_STREAMS; j++)
		b[j] = 1ull << 63;
	uint32_t i =
#ifdef KX_X86
		(cpu & (BFP_CPU_AVX2 | BFP_CPU_AVX512BW)) ? kh_syms_fast_bmi2(b, &p, end, ks->huf, n, w) :
#endif
		kh_syms_fast(b, &p, end, ks->huf, n, w);
	for (; i < n; i += KH_GROUP) {
		for (unsigned j = 0; j < BFP_KEYHUF_STREAMS; j++) {
			const size_t tk = (unsigned)__builtin_ctzll(b[j]) >> 3, have = (size_t)(end - p);
			uint8_t q[8] = {0};
			BFP_CHECK(tk <= have, BFP_E_CORRUPT);
			BFP_MEMCPY(q, p, have < 8 ? have : 8);
			const uint8_t *qp = q;
			KH_TAKE(b[j], qp);
			p += tk;
		}
		const uint32_t ge = n - i < KH_GROUP ? n : i + KH_GROUP;
		for (uint32_t v = i; v < ge; v++)
			KH_SYM(b[v % BFP_KEYHUF_STREAMS], ks->huf, w, v, 64 - BFP_HUF_LMAX);
	}
	/* the bits the streams hold unread carry the last values' raw fields */
	uint64_t cs[(BFP_KEYHUF_STREAMS * 63 + 63) / 64 + 1] = {0};
	unsigned u = 0;
	for (unsigned j = 0; j < BFP_KEYHUF_STREAMS; j++) {
		const unsigned c = 63 - (unsigned)__builtin_ctzll(b[j]); /* at least 8 */
		kh_cput(cs, &u, b[j] >> (64 - c), c);
	}
	const uint32_t carry = u / 7 < n ? u / 7 : n, nraw = n - carry;
	for (unsigned at = 7 * carry; at < u; at += 32) {
		const unsigned l = u - at < 32 ? u - at : 32;
		BFP_CHECK(kh_cbits(cs, at, l) == 0, BFP_E_CORRUPT);
	}
	/* pass 2: the raw fields after the bytes the streams took, and the
	 * values with escapes listed */
	const size_t rem = (size_t)(end - p), whole = 7 * (size_t)nraw / 8;
	const unsigned part = 7 * nraw % 8;
	BFP_CHECK(kx_raw_bytes(1, nraw) <= rem, BFP_E_CORRUPT);
	uint32_t nesc = 0;
	i = 0;
#ifdef KX_X86
	if (cpu & (BFP_CPU_AVX2 | BFP_CPU_AVX512BW)) {
		const uint32_t nv = rem < 16 ? 0 : (uint32_t)((rem - 16) * 8 / 7 + 16);
		i = values_m_avx2(w, p, nraw < nv ? nraw : nv, 8, k.etop, tail, ks->esc, &nesc);
		values_m(w, p, i, nraw, nraw, rem, 8, k.etop, tail, ks->esc, &nesc);
		i = values_c_avx2(w, nraw, n, k.etop, tail, ks->esc, &nesc);
	}
#endif
	values_m(w, p, i, n, nraw, rem, 8, k.etop, tail, ks->esc, &nesc);
	for (uint32_t t = 0; t < carry; t++) {
		const unsigned rf = kh_cbits(cs, 7 * t, 7);
		w[nraw + t] = (uint16_t)(w[nraw + t] | (rf & 0x3Fu) | (rf & 0x40u) << 9);
	}
	/* pass 3: the escapes, after the raw fields in the same bit stream,
	 * which ends the payload */
	bfp_br_init(&r, p + whole, rem - whole);
	(void)bfp_br_get(&r, part);
	const uint64_t bits = kx_escapes_read(&r, w, ks->esc, nesc, tmax);
	BFP_CHECK(bits != UINT64_MAX && (bits + 7) / 8 == rem - whole, BFP_E_CORRUPT);
	return BFP_OK;
}

bfp_status bfp_keyexp_decode(const uint8_t *pl, size_t len, uint32_t n, uint16_t *w,
			     bfp_kx_scratch *ks, uint32_t cpu, int m)
{
	kx_table k;
	uint16_t f[2 * BFP_KEYEXP_SYMS];
	unsigned nsym;
	(void)cpu;
	if (m == 2)
		return kh_decode(pl, len, n, w, ks, cpu);
	BFP_CHECK(n >= 1 && n <= BFP_KEYEXP_MAX, BFP_E_CORRUPT);
	const uint32_t cmax = kx_carry_max(m), carry = n < cmax ? n : cmax, nraw = n - carry;
	const size_t rawb = kx_raw_bytes(m, nraw);
	BFP_CHECK(len >= rawb + 4 * BFP_KEYEXP_STATES, BFP_E_CORRUPT);
	const size_t send = len - 4 * BFP_KEYEXP_STATES;
	bfp_br r;
	bfp_br_init(&r, pl + rawb, send - rawb);
	BFP_CHECK(table_parse(&r, &k), BFP_E_CORRUPT);
	BFP_CHECK(kx_freqs(m, &k.t, f, &nsym), BFP_E_CORRUPT);
	const unsigned ns = k.t.ns, tmax = k.etop - (ns - 1);
	/* the last symbol is followed by an escape unless it stands for
	 * exponent 0 alone */
	const unsigned tail = tmax ? ns - 1 : 0xFFFFu;
#ifdef KX_X86
	if (cpu & BFP_CPU_AVX512BW)
		slots_build_avx512(ks->slot, f, nsym);
	else if (cpu & BFP_CPU_AVX2)
		slots_build_avx2(ks->slot, f, nsym);
	else
#endif
		slots_build(ks->slot, f, nsym);
	uint32_t x[BFP_KEYEXP_STATES];
	for (unsigned j = 0; j < BFP_KEYEXP_STATES; j++) {
		x[j] = bfp_ld32(pl + send + 4 * j);
		BFP_CHECK(x[j] >= BFP_RANS_L && x[j] < (1u << 31), BFP_E_CORRUPT);
	}
	/* pass 1: the symbols, four values at a time while at least 8 bytes
	 * are left to read, then one at a time with the bounds checked */
	size_t p = send;
	uint32_t i =
#ifdef KX_X86
		(cpu & (BFP_CPU_AVX2 | BFP_CPU_AVX512BW)) ? syms_fast_bmi2(x, pl, &p, ks->slot, n, w) :
#endif
		syms_fast(x, pl, &p, ks->slot, n, w);
	bfp_rd d = {pl, p, 0, 0};
	for (; i < n; i++) {
		d.x = x[i & (BFP_KEYEXP_STATES - 1)];
		w[i] = (uint16_t)bfp_rans_get_packed_checked(&d, ks->slot);
		BFP_CHECK(!d.err, BFP_E_CORRUPT);
		x[i & (BFP_KEYEXP_STATES - 1)] = d.x;
	}
	/* pass 2, listing the values with escapes */
	uint32_t nesc = 0;
	i = 0;
	if (m) {
#ifdef KX_X86
		if (cpu & (BFP_CPU_AVX2 | BFP_CPU_AVX512BW))
			i = values_m_avx2(w, pl, nraw, 0, k.etop, tail, ks->esc, &nesc);
#endif
		values_m(w, pl, i, n, nraw, len, 0, k.etop, tail, ks->esc, &nesc);
	} else {
#ifdef KX_X86
		if (cpu & (BFP_CPU_AVX2 | BFP_CPU_AVX512BW))
			i = values_avx2(w, pl, nraw, k.etop, tail, ks->esc, &nesc);
#endif
		values(w, pl, i, n, nraw, k.etop, tail, ks->esc, &nesc);
	}
	/* pass 3: the escapes, in value order; symbol ns - 1 gave them the
	 * exponent tmax */
	/* the bit stream ends in its last byte with zero padding, and the
	 * rANS bytes were exactly those after it */
	const uint64_t bits = kx_escapes_read(&r, w, ks->esc, nesc, tmax);
	BFP_CHECK(bits != UINT64_MAX && d.p == rawb + (bits + 7) / 8, BFP_E_CORRUPT);
	if (m)
		return carried_m(w, pl, nraw, rawb, carry, x);
	/* the states are back at 2^23 plus the last values' raw bytes */
	uint64_t carried = 0;
	for (unsigned j = 0; j < BFP_KEYEXP_STATES; j++) {
		BFP_CHECK(x[j] - BFP_RANS_L < (1u << 16), BFP_E_CORRUPT);
		carried |= (uint64_t)(x[j] - BFP_RANS_L) << (16 * j);
	}
	BFP_CHECK(carry == BFP_KEYEXP_CARRY || (carried >> (8 * carry)) == 0, BFP_E_CORRUPT);
	for (uint32_t t = 0; t < carry; t++) {
		const unsigned b = (unsigned)(carried >> (8 * t)) & 0xFFu;
		w[nraw + t] = (uint16_t)(w[nraw + t] | (b & 0x7Fu) | ((b & 0x80u) << 8));
	}
	return BFP_OK;
}
