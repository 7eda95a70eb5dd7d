/*
 * keyexp.c: keyframe-exp (FORMAT.md 3.10). Trained weights spend about
 * 2.5 bits of entropy in their 8-bit exponent and nearly 8 in sign and
 * mantissa, so the exponent goes through rANS (the tables and coder of
 * rans.h) with a table fitted to the frame, and sign and mantissa go raw,
 * a byte a value. Four interleaved states let the decoder overlap the
 * symbols; their initial values carry the last values' raw bytes.
 */
#include "keyexp.h"
#include "rans.h"

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

/* ---- encoder ---- */

/* A table fitted to some values and what each exponent costs with it. */
typedef struct kx_plan {
	kx_table k;
	unsigned tbits;        /* the table's bits */
	uint64_t put[256];     /* each exponent's symbol (bfp_rans_sym) */
	uint16_t rcost[256];   /* its rANS cost, 1/256 bit, at least exact */
	uint8_t ebits[256];    /* its escape bits */
	uint32_t cnt[256];     /* the exponents of the values planned from */
} kx_plan;

/* Bytes of the first k values with plan pl whose escapes take ebits and
 * symbols r256 / 256 bits: raw bytes, bit stream, rANS bytes (an upper
 * bound: symbol costs are never below exact, and the states started
 * below 2^24), states. */
static uint64_t kx_bytes(const kx_plan *pl, uint64_t k, uint64_t ebits, uint64_t r256)
{
	const uint64_t carry = k < BFP_KEYEXP_CARRY ? k : BFP_KEYEXP_CARRY;
	return k - carry + (pl->tbits + ebits + 7) / 8 + (r256 + 2047) / 2048 + 1 +
	       4 * BFP_KEYEXP_STATES;
}

/* Fit a table to words[0..n) (n >= 1). 0 when none can be made. */
static int kx_plan_make(kx_plan *pl, const uint16_t *w, uint32_t n)
{
	uint32_t *cnt = pl->cnt;
	unsigned lc[256];
	BFP_MEMSET(cnt, 0, sizeof(pl->cnt));
	for (uint32_t i = 0; i < n; i++)
		cnt[exp_of(w[i])]++;
	unsigned etop = 255, pe[256], np = 0;
	while (!cnt[etop])
		etop--;
	for (unsigned e = etop + 1; e-- > 0;)
		if (cnt[e]) {
			pe[np++] = e;
			lc[e] = bfp_log2_fp8(cnt[e]);
		}
	/* the number of symbols: estimated entropy of the symbols with
	 * their counts, escape bits and about 3 table bits a symbol, for
	 * each tail that starts at an exponent present */
	const uint64_t ln = bfp_log2_fp8(n);
	uint64_t best = UINT64_MAX, win = 0;
	unsigned ns = 1;
	for (unsigned j = 0; j < np; j++) {
		const unsigned m = etop - pe[j] + 1; /* symbols when pe[j] starts the tail */
		if (m > BFP_KEYEXP_SYMS)
			break;
		uint64_t ct = 0, esc = 0;
		for (unsigned t = j; t < np; t++) {
			ct += cnt[pe[t]];
			esc += (uint64_t)cnt[pe[t]] * bfp_eg0_bits(pe[j] - pe[t]);
		}
		if (pe[j] == 0) /* exponent 0 alone: no escapes */
			esc = 0;
		const uint64_t est = win + ct * (ln - bfp_log2_fp8((uint32_t)ct)) + 256 * esc +
				     256 * (13 + bfp_eg0_bits(m - 1) + 3 * (m - 1));
		if (est < best) {
			best = est;
			ns = m;
		}
		win += (uint64_t)cnt[pe[j]] * (ln - lc[pe[j]]);
	}
	/* the weights from the counts (FORMAT.md 3.6's scale) */
	uint32_t sc[BFP_KEYEXP_SYMS], cmax = 0;
	const unsigned tmax = etop - (ns - 1);
	for (unsigned s = 0; s + 1 < ns; s++)
		sc[s] = cnt[etop - s];
	sc[ns - 1] = 0;
	for (unsigned e = 0; e <= tmax; e++)
		sc[ns - 1] += cnt[e];
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
	uint16_t f[BFP_KEYEXP_SYMS];
	if (!bfp_tab_freqs(&pl->k.t, f))
		return 0;
	pl->tbits = table_bits(&pl->k);
	unsigned cum = 0;
	for (unsigned s = 0; s < ns; s++) {
		const uint64_t put = bfp_rans_sym(f[s], cum);
		const uint16_t rc = (uint16_t)(BFP_RANS_BITS * 256 - bfp_log2_fp8(f[s]));
		if (s + 1 < ns) {
			pl->put[etop - s] = put;
			pl->rcost[etop - s] = rc;
			pl->ebits[etop - s] = 0;
		} else {
			for (unsigned e = 0; e <= tmax; e++) {
				pl->put[e] = put;
				pl->rcost[e] = rc;
				pl->ebits[e] = (uint8_t)(tmax ? bfp_eg0_bits(tmax - e) : 0);
			}
		}
		cum += f[s];
	}
	return 1;
}

/* Write the first k values of w with pl; the payload's length, or 0
 * when it does not fit budget. */
static size_t kx_write(const kx_plan *pl, const uint16_t *w, uint32_t k, size_t budget,
		       uint8_t *out, uint8_t *scratch)
{
	const uint32_t carry = k < BFP_KEYEXP_CARRY ? k : BFP_KEYEXP_CARRY, nraw = k - carry;
	const unsigned ns = pl->k.t.ns, tmax = pl->k.etop - (ns - 1);
	if (nraw + 4 * BFP_KEYEXP_STATES >= budget)
		return 0;
	for (uint32_t i = 0; i < nraw; i++)
		out[i] = raw_of(w[i]);
	bfp_bw bw;
	bfp_bw_init(&bw, out + nraw, budget - nraw - 4 * BFP_KEYEXP_STATES);
	table_write(&bw, &pl->k);
	if (tmax)
		for (uint32_t i = 0; i < k; i++) {
			const unsigned e = exp_of(w[i]);
			if (e <= tmax)
				bfp_put_eg0(&bw, tmax - e);
		}
	const size_t bs = bfp_bw_finish(&bw);
	if (bw.overflow)
		return 0;
	/* the states start at 2^23 plus the last values' raw bytes */
	uint64_t carried = 0;
	for (uint32_t t = 0; t < carry; t++)
		carried |= (uint64_t)raw_of(w[nraw + t]) << (8 * t);
	uint32_t x[BFP_KEYEXP_STATES];
	for (unsigned j = 0; j < BFP_KEYEXP_STATES; j++)
		x[j] = BFP_RANS_L + (uint32_t)((carried >> (16 * j)) & 0xFFFFu);
	const size_t room = budget - nraw - bs - 4 * BFP_KEYEXP_STATES;
	uint8_t *o = scratch;
	for (uint32_t i = k; i-- > 0;) {
		bfp_rans_put(&x[i & (BFP_KEYEXP_STATES - 1)], &o, pl->put[exp_of(w[i])]);
		if (BFP_UNLIKELY((size_t)(o - scratch) > room))
			return 0;
	}
	const size_t rb = (size_t)(o - scratch);
	BFP_MEMCPY(out + nraw + bs, scratch, rb);
	uint8_t *st = out + nraw + bs + rb;
	for (unsigned j = 0; j < BFP_KEYEXP_STATES; j++)
		bfp_st32(st + 4 * j, x[j]);
	return nraw + bs + rb + 4 * BFP_KEYEXP_STATES;
}

uint32_t bfp_keyexp_encode(const uint16_t *w, uint64_t avail, size_t budget, uint8_t *out,
			   size_t *len, uint8_t *scratch)
{
	kx_plan pl;
	uint64_t nmax = avail < BFP_KEYEXP_MAX ? avail : BFP_KEYEXP_MAX;
	if (budget <= 4 * BFP_KEYEXP_STATES + 4 || nmax == 0)
		return 0;
	if (nmax > budget + BFP_KEYEXP_CARRY)
		nmax = budget + BFP_KEYEXP_CARRY;
	/* first at 10 bits a value; more when all of them fit well inside */
	uint64_t n = budget * 8 / 10;
	n = n < nmax ? n : nmax;
	n = n ? n : 1;
	uint32_t k = 0;
	for (int round = 0;; round++) {
		if (!kx_plan_make(&pl, w, (uint32_t)n))
			return 0;
		uint64_t eb = 0, r256 = 0;
		for (unsigned e = 0; e < 256; e++) {
			eb += (uint64_t)pl.cnt[e] * pl.ebits[e];
			r256 += (uint64_t)pl.cnt[e] * pl.rcost[e];
		}
		const uint64_t bytes = kx_bytes(&pl, n, eb, r256);
		if (bytes <= budget) {
			k = (uint32_t)n;
			if (n == nmax || bytes >= budget - budget / 64 || round == 2)
				break;
			n = n * budget / bytes + 1;
			n = n < nmax ? n : nmax;
			continue;
		}
		/* the longest prefix that fits */
		eb = r256 = 0;
		uint32_t i = 0;
		for (; i < n; i++) {
			const unsigned e = exp_of(w[i]);
			if (kx_bytes(&pl, i + 1, eb + pl.ebits[e], r256 + pl.rcost[e]) > budget)
				break;
			eb += pl.ebits[e];
			r256 += pl.rcost[e];
		}
		k = i;
		break;
	}
	/* the sizes are bounds: shrink in the rare case they were not */
	while (k > 0) {
		const size_t l = kx_write(&pl, w, k, budget, out, scratch);
		if (l) {
			*len = l;
			return k;
		}
		k -= k / 64 + 1;
	}
	return 0;
}

/* ---- decoder ---- */

bfp_status bfp_keyexp_decode(const uint8_t *pl, size_t len, uint32_t n, uint16_t *w,
			     uint32_t *slots)
{
	kx_table k;
	uint16_t f[BFP_KEYEXP_SYMS], hi[BFP_KEYEXP_SYMS];
	BFP_CHECK(n >= 1 && n <= BFP_KEYEXP_MAX, BFP_E_CORRUPT);
	const uint32_t carry = n < BFP_KEYEXP_CARRY ? n : BFP_KEYEXP_CARRY, nraw = n - carry;
	BFP_CHECK(len >= (size_t)nraw + 4 * BFP_KEYEXP_STATES, BFP_E_CORRUPT);
	const size_t send = len - 4 * BFP_KEYEXP_STATES;
	bfp_br r;
	bfp_br_init(&r, pl + nraw, send - nraw);
	BFP_CHECK(table_parse(&r, &k), BFP_E_CORRUPT);
	BFP_CHECK(bfp_tab_freqs(&k.t, f), BFP_E_CORRUPT);
	/* the last symbol is followed by an escape unless it stands for
	 * exponent 0 alone */
	const unsigned ns = k.t.ns, tmax = k.etop - (ns - 1), tail = tmax ? ns - 1 : ~0u;
	unsigned at = 0;
	for (unsigned s = 0; s < ns; s++) {
		for (unsigned j = 0; j < f[s]; j++)
			slots[at + j] = bfp_rans_slot(s, f[s], j);
		at += f[s];
		hi[s] = (uint16_t)((k.etop - s) << 7);
	}
	uint32_t x[BFP_KEYEXP_STATES];
	for (unsigned j = 0; j < BFP_KEYEXP_STATES; j++) {
		x[j] = bfp_ld32(pl + send + 4 * j);
		BFP_CHECK(x[j] >= BFP_RANS_L && x[j] < (1u << 31), BFP_E_CORRUPT);
	}
	size_t p = send;
	uint32_t i = 0;
	/* four values at a time while at least 8 bytes are left to read */
	for (; i + BFP_KEYEXP_STATES <= nraw && p >= 2 * BFP_KEYEXP_STATES; i += BFP_KEYEXP_STATES) {
		for (unsigned j = 0; j < BFP_KEYEXP_STATES; j++) {
			const unsigned s = bfp_rans_get_packed(&x[j], pl, &p, slots);
			uint16_t h = hi[s];
			if (BFP_UNLIKELY(s == tail)) {
				const uint32_t d = bfp_get_eg0(&r);
				BFP_CHECK(!r.err && d <= tmax, BFP_E_CORRUPT);
				h = (uint16_t)((tmax - d) << 7);
			}
			const unsigned b = pl[i + j];
			w[i + j] = (uint16_t)(h | (b & 0x7Fu) | ((b & 0x80u) << 8));
		}
	}
	bfp_rd d = {pl, p, 0, 0};
	for (; i < n; i++) {
		d.x = x[i & (BFP_KEYEXP_STATES - 1)];
		const unsigned s = bfp_rans_get_packed_checked(&d, slots);
		BFP_CHECK(!d.err, BFP_E_CORRUPT);
		x[i & (BFP_KEYEXP_STATES - 1)] = d.x;
		uint16_t h = hi[s];
		if (s == tail) {
			const uint32_t e = bfp_get_eg0(&r);
			BFP_CHECK(!r.err && e <= tmax, BFP_E_CORRUPT);
			h = (uint16_t)((tmax - e) << 7);
		}
		const unsigned b = i < nraw ? pl[i] : 0;
		w[i] = (uint16_t)(h | (b & 0x7Fu) | ((b & 0x80u) << 8));
	}
	/* the bit stream ends in its last byte with zero padding, and the
	 * rANS bytes were exactly those after it */
	const uint64_t bits = bfp_br_tell(&r);
	const unsigned pad = (unsigned)((8 - (bits & 7)) & 7);
	BFP_CHECK(bfp_br_get(&r, pad) == 0 && !r.err, BFP_E_CORRUPT);
	BFP_CHECK(d.p == nraw + (bits + 7) / 8, BFP_E_CORRUPT);
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
