/*
 * sparse.c: FORMAT.md 3.4, 3.8 and 3.9. Per base-exponent class, two sequences
 * are coded: the gaps between changes in the class's rank space, and the
 * step magnitudes. Each is either plain (every symbol coded) or run-coded
 * (runs of a common symbol, then the others), chosen per class and frame
 * by exact size; run coding is what brings high-rate classes (most gaps 0)
 * and single-step-dominated magnitudes well under one bit per symbol.
 * Encoding 5 codes the same sequences with fewer parameter bits (counts in
 * a frame-wide Exp-Golomb order, gap parameters predicted from the class,
 * a default magnitude code, a flag for classes whose magnitudes are all
 * equal) and codes magnitudes by their distance from the common one.
 * Encoding 6 adds Golomb gap codes halfway between the Rice ones and
 * codes each class's magnitude code relative to the class below.
 */
#include "sparse.h"

#define LEVEL_MAX 62u /* encoding 6 gap levels: 0..62 */

#define MAG_BINS 64u /* magnitudes 1..64 counted one by one */

static inline unsigned eg_bits(uint32_t v, unsigned k)
{
	return bfp_eg0_bits(v >> k) + k;
}

static inline void put_eg(bfp_bw *w, uint32_t v, unsigned k)
{
	bfp_put_eg0(w, v >> k);
	bfp_bw_put(w, v, k);
}

static inline uint32_t get_eg(bfp_br *r, unsigned k)
{
	uint64_t hi = bfp_get_eg0(r);
	uint64_t v = (hi << k) | bfp_br_get(r, k);
	if (v > UINT32_MAX) {
		r->err = 1;
		return 0;
	}
	return (uint32_t)v;
}

/* Gap codes by level L (FORMAT.md 3.9): with k = (L + 1) / 2, Rice(k)
 * when L is 0 or odd; Golomb with m = 3 * 2^(k-1) when L is even. The
 * quotient and the escape are as in Rice; a Golomb remainder r below
 * 2^(k-1) takes k bits, a larger one 2^(k-1) + (r - 2^(k-1)) / 2 in k
 * bits and then the parity of r - 2^(k-1). Encodings 1 and 5 use the
 * Rice levels only (level 2k - 1 is their Rice(k)). */
static inline unsigned lv_k(unsigned L)
{
	return (L + 1) >> 1;
}

static inline unsigned lv_golomb(unsigned L)
{
	return L >= 2 && !(L & 1);
}

static inline unsigned rice_level(unsigned k)
{
	return k ? 2 * k - 1 : 0;
}

/* The code of level L, worked out once per class: the quotient is
 * ((v >> s1) * mul) >> s2 (a shift for Rice, an exact division by 3 after
 * the shift for Golomb), the remainder v - q * m takes k bits below cut
 * and k + 1 from it (cut = m at the Rice levels: never). */
static inline void gcode_of(unsigned L, bfp_gcode *g)
{
	const unsigned k = lv_k(L);
	g->k = (uint8_t)k;
	if (lv_golomb(L)) {
		g->s1 = (uint8_t)(k - 1);
		g->s2 = 33;
		g->mul = 0xAAAAAAABu;
		g->m = 3ull << (k - 1);
		g->cut = 1ull << (k - 1);
	} else {
		g->s1 = (uint8_t)k;
		g->s2 = 0;
		g->mul = 1;
		g->m = g->cut = 1ull << k;
	}
}

static inline uint32_t gc_split(uint32_t v, const bfp_gcode *g, uint64_t *rem)
{
	uint32_t q = (uint32_t)(((uint64_t)(v >> g->s1) * g->mul) >> g->s2);
	*rem = v - q * g->m;
	return q;
}

static inline unsigned gc_bits(uint32_t v, const bfp_gcode *g)
{
	uint64_t rem;
	uint32_t q = gc_split(v, g, &rem);
	if (q >= BFP_RICE_ESC)
		return BFP_RICE_ESC + 32;
	return q + 1 + g->k + (rem >= g->cut);
}

static inline void put_gc(bfp_bw *w, uint32_t v, const bfp_gcode *g)
{
	uint64_t rem;
	uint32_t q = gc_split(v, g, &rem);
	if (q >= BFP_RICE_ESC) {
		bfp_bw_put(w, 0, BFP_RICE_ESC);
		bfp_bw_put(w, v, 32);
		return;
	}
	bfp_bw_put(w, 1ull << q, q + 1);
	if (rem >= g->cut) {
		uint64_t x = rem - g->cut;
		bfp_bw_put(w, (g->cut + (x >> 1)) | ((x & 1) << g->k), g->k + 1u);
	} else {
		bfp_bw_put(w, rem, g->k);
	}
}

/* A gap of code g; values above 2^32 - 1 come back as they are (the
 * caller rejects gaps past the range). golomb is a constant at each use,
 * so that the Rice levels keep the plain Rice path. */
static inline __attribute__((always_inline)) uint64_t get_gc(bfp_br *r, const bfp_gcode *g,
							       const int golomb)
{
	const unsigned k = g->k;
	unsigned z = bfp_br_lead(r);
	if (BFP_LIKELY(z < BFP_RICE_ESC && z + 1 + golomb + k <= r->n)) {
		uint64_t a = r->acc >> (z + 1);
		uint64_t x = a & ((1ull << k) - 1);
		if (!golomb) {
			r->acc = a >> k;
			r->n -= z + 1 + k;
			return ((uint64_t)z << k) | x;
		}
		/* the remainder is long when bit k - 1 of x is set (x >= cut);
		 * then it is x + (x - cut + e), e the bit after x */
		const uint64_t lng = (x >> (k - 1)) & 1;
		const uint64_t e = (a >> k) & lng;
		r->acc = a >> (k + lng);
		r->n -= z + 1 + k + (unsigned)lng;
		return ((uint64_t)(3 * z) << (k - 1)) + x + ((x - g->cut + e) & (0 - lng));
	}
	unsigned q = bfp_br_unary(r, BFP_RICE_ESC);
	if (q == BFP_RICE_ESC)
		return bfp_br_get(r, 32);
	uint64_t x = bfp_br_get(r, k);
	if (golomb && x >= g->cut)
		x = 2 * x - g->cut + bfp_br_get(r, 1);
	return q * g->m + x;
}

/* Encoding 5: magnitude m as its distance from the centre C, alternating
 * above and below while both sides have values: C, C+1, C-1, C+2, C-2,
 * ... (or C, C-1, C+1, ... when down), then the values above 2C-1 in
 * order (FORMAT.md 3.8). */
static inline uint32_t mag_fold(unsigned m, unsigned c, unsigned down)
{
	unsigned below = c - 1;
	uint32_t v;
	if (m == c)
		return 0;
	if (m > c && m - c > below)
		return below + (m - c);
	v = m < c ? 2 * (c - m) : 2 * (m - c) - 1;
	return down ? ((v & 1) ? v + 1 : v - 1) : v;
}

/* Inverse of mag_fold; 0 for values that map past 32768. */
static inline uint32_t mag_unfold(uint64_t v, unsigned c, unsigned down)
{
	uint64_t below = c - 1, m;
	if (v == 0)
		return c;
	if (v > 2 * below) {
		m = c + (v - below);
		return m > 32768u ? 0 : (uint32_t)m;
	}
	if (down)
		v = (v & 1) ? v + 1 : v - 1;
	return (uint32_t)((v & 1) ? c + (v + 1) / 2 : c - v / 2);
}

/* Other-symbol values: gaps in run mode skip 0; magnitudes skip 0 and,
 * in run mode, the common magnitude M (encoding 1), or are folded around
 * M, less one in run mode (encoding 5). */
static inline uint32_t gap_other(const bfp_seq *s, uint32_t g)
{
	return s->runs ? g - 1 : g;
}

static inline uint32_t mag_other(int v2, const bfp_seq *s, unsigned m)
{
	if (v2) /* encodings 5 and 6 */
		return mag_fold(m, s->common, s->down) - s->runs;
	return (!s->runs || m < s->common) ? m - 1 : m - 2;
}

/* Encodings 5 and 6: predicted gap parameter of class c (the Rice k in
 * encoding 5, the level in 6), and the bits of the parameter. */
static inline unsigned gk_pred(unsigned enc, int gk0, unsigned c)
{
	const int top = enc == BFP_ENC_SPARSE3 ? (int)LEVEL_MAX : 31;
	int p = gk0 + (enc == BFP_ENC_SPARSE3 ? 2 : 1) * (int)c;
	return p < 0 ? 0u : (p > top ? (unsigned)top : (unsigned)p);
}

static inline uint32_t zigzag(int32_t d)
{
	return d >= 0 ? 2u * (uint32_t)d : 2u * (uint32_t)(-(d + 1)) + 1u;
}

static inline int32_t unzigzag(uint32_t z)
{
	return (z & 1) ? -(int32_t)(z >> 1) - 1 : (int32_t)(z >> 1);
}

/* Encoding 5: 1 (as predicted), 3 (one off) or 7 bits; encoding 6: the
 * difference from the prediction in EG0 after zigzag. */
static inline unsigned gk_bits(unsigned enc, unsigned gk, unsigned pred)
{
	if (enc == BFP_ENC_SPARSE3)
		return bfp_eg0_bits(zigzag((int32_t)gk - (int32_t)pred));
	return gk == pred ? 1u : (gk + 1 == pred || gk == pred + 1) ? 3u : 7u;
}

/* The gap parameter a class header carries: the level in encoding 6, the
 * Rice k in encodings 1 and 5. */
static inline unsigned gap_param(const bfp_sparse_plan *pl, unsigned c)
{
	return pl->enc == BFP_ENC_SPARSE3 ? pl->gap[c].k : lv_k(pl->gap[c].k);
}

/* Encoding 6: when the class below has changes, a class's own magnitude
 * code is coded relative to that class's: a binade up, the same update
 * spans half the steps, so the common magnitude is predicted halved and
 * the order one less. */
static inline void mag_pred(const bfp_seq *below, unsigned *cp, unsigned *kp)
{
	*cp = below->common > 1 ? below->common >> 1 : 1u;
	*kp = below->k ? below->k - 1u : 0u;
}

/* Encoding 5 magnitude codes: equal (fields that do not apply are 0), and
 * their size: C, runs, all (run-coded), k and down (unless all; down only
 * when there are magnitudes below C), run parameter (run-coded, not all). */
static inline int same_code(const bfp_seq *a, const bfp_seq *b)
{
	return a->runs == b->runs && a->all == b->all && a->k == b->k &&
	       a->down == b->down && a->kr == b->kr && a->common == b->common;
}

/* A magnitude code's fields (FORMAT.md 3.8): C as C - 1 in EG0 and k in
 * 4 bits, or, relative to the class below's code (below not NULL,
 * encoding 6, 3.9), each as its zigzag distance from the prediction in
 * EG0; the other fields are the same either way. */
static inline unsigned mag_code_bits(const bfp_seq *m, const bfp_seq *below)
{
	unsigned cp = 1, kp = 0, cb, kb;
	if (below) {
		mag_pred(below, &cp, &kp);
		cb = bfp_eg0_bits(zigzag((int32_t)m->common - (int32_t)cp));
		kb = bfp_eg0_bits(zigzag((int32_t)m->k - (int32_t)kp));
	} else {
		cb = bfp_eg0_bits(m->common - 1u);
		kb = 4;
	}
	return cb + 1 + m->runs + (m->all ? 0 : kb + (m->common > 1)) +
	       (m->runs && !m->all ? 4 : 0);
}

/* Bits of a class count. */
static inline unsigned count_bits(const bfp_sparse_plan *pl, uint32_t n)
{
	return pl->enc != BFP_ENC_SPARSE ? eg_bits(n, pl->kn) : bfp_eg0_bits(n);
}

/* Bits of class c's header after its count (the class has changes);
 * below: whether class c - 1 has changes (encoding 6 codes the magnitude
 * code relative to it then). */
static unsigned class_header_bits(const bfp_sparse_plan *pl, unsigned c, int below)
{
	const bfp_seq *g = &pl->gap[c], *m = &pl->mag[c];
	if (pl->enc == BFP_ENC_SPARSE)
		return 1 + 5 + (g->runs ? 5 : 0) + 1 + 4 +
		       (m->runs ? bfp_eg0_bits(m->common - 1u) + 5 : 0);
	unsigned b = 1 + gk_bits(pl->enc, gap_param(pl, c), gk_pred(pl->enc, pl->gk0, c)) +
		     (g->runs ? 4 : 0) + 1;
	if (same_code(m, &pl->mdef))
		return b;
	return b + mag_code_bits(m, pl->enc == BFP_ENC_SPARSE3 && below ? &pl->mag[c - 1] : NULL);
}

/* Estimated bits of n Rice(k) codes of values summing to sum, for the
 * best k (returned in *kout); floor effects counted for geometric data. */
static uint64_t rice_est(uint64_t n, uint64_t sum, unsigned maxk, unsigned *kout)
{
	uint64_t best = UINT64_MAX;
	*kout = 0;
	if (n == 0)
		return 0;
	for (unsigned k = 0; k <= maxk; k++) {
		/* 2 * (n (k + 1) + sum / 2^k - n / 2 + n / 2^(k+1)) */
		uint64_t twice = 2 * n * (k + 1) + ((2 * sum) >> k) + (n >> k) - n;
		if (twice < best) {
			best = twice;
			*kout = k;
		}
		if ((sum >> k) == 0)
			break;
	}
	return best / 2;
}

/* Encoding 6: estimated bits of n gap codes of values summing to sum, for
 * the best level (returned in *lout). In sixths of a bit, per code:
 * quotient sum/m - 1/2 + 1/(2m) as in rice_est; at a Golomb level the
 * remainder takes its longer code about 3 times in 5 (geometric data at
 * the level that suits it). */
static uint64_t level_est(uint64_t n, uint64_t sum, unsigned *lout)
{
	uint64_t best = UINT64_MAX;
	*lout = 0;
	if (n == 0)
		return 0;
	for (unsigned L = 0; L <= LEVEL_MAX; L++) {
		const unsigned k = lv_k(L);
		const uint64_t m = lv_golomb(L) ? 3ull << (k - 1) : 1ull << k;
		uint64_t six = 6 * n * (k + 1) + 6 * sum / m + 3 * n / m - 3 * n +
			       (lv_golomb(L) ? 18 * n / 5 : 0);
		if (six < best) {
			best = six;
			*lout = L;
		}
		if (sum / m == 0)
			break;
	}
	return best / 6;
}

typedef struct cls_acc {
	uint64_t gsum, sum16, sum64;
	uint32_t gzero, mmin, mmax;
	uint32_t mhist[MAG_BINS + 1]; /* magnitudes 1..64; [0] counts the larger ones */
} cls_acc;

/* Encoding 1: bits of the magnitudes of one class coded with Exp-Golomb
 * order k: plain (M == 0: v = m - 1) or the others of run mode (v = m-1 /
 * m-2). Exact for magnitudes up to 16, the mean for larger ones. */
static uint64_t eg_cost(const cls_acc *x, uint32_t n, unsigned M, unsigned k)
{
	uint64_t bits = 0;
	uint32_t small = 0;
	for (unsigned m = 1; m <= 16; m++) {
		small += x->mhist[m];
		if (m == M || !x->mhist[m])
			continue;
		uint32_t v = (M == 0 || m < M) ? m - 1 : m - 2;
		bits += (uint64_t)x->mhist[m] * eg_bits(v, k);
	}
	if (n > small) {
		uint32_t mean = (uint32_t)(x->sum16 / (n - small));
		bits += (uint64_t)(n - small) * eg_bits(mean - (M ? 2 : 1), k);
	}
	return bits;
}

static uint64_t eg_best(const cls_acc *x, uint32_t n, unsigned M, unsigned *kout)
{
	uint64_t best = UINT64_MAX;
	for (unsigned k = 0; k < 16; k++) {
		uint64_t b = eg_cost(x, n, M, k);
		if (b < best) {
			best = b;
			*kout = k;
		}
	}
	return best;
}

/* Encoding 1 magnitude code of one class. */
static void plan_mag_v1(const cls_acc *x, uint32_t n, bfp_seq *ms)
{
	unsigned kp, ko, kr;
	unsigned M = 1;
	for (unsigned v = 2; v <= 16; v++)
		if (x->mhist[v] > x->mhist[M])
			M = v;
	uint64_t plain = eg_best(x, n, 0, &kp);
	uint64_t runs = 5 + bfp_eg0_bits(M - 1) + eg_best(x, n, M, &ko) +
			rice_est(n - x->mhist[M] + 1, x->mhist[M], 30, &kr);
	if (runs < plain) {
		ms->runs = 1;
		ms->common = (uint16_t)M;
		ms->k = (uint8_t)ko;
		ms->kr = (uint8_t)kr;
	} else {
		ms->k = (uint8_t)kp;
	}
}

/* Encoding 5 magnitude code of one class: all equal, or centred on the
 * most frequent magnitude, plain or run-coded, folded either way, with
 * the Exp-Golomb order of the fewest bits (magnitudes above 64 costed at
 * their mean). Costs are summed over the distinct magnitudes only, and
 * orders stop past the bit length of the largest folded value (beyond
 * it every code only grows). */
static void plan_mag_v2(const cls_acc *x, uint32_t n, bfp_seq *ms)
{
	uint32_t val[2][MAG_BINS + 1], cnt[MAG_BINS + 1], vmax = 0;
	unsigned nd = 0, c = 0;

	if (x->mmin == x->mmax) {
		ms->runs = 1;
		ms->all = 1;
		ms->common = (uint16_t)x->mmin;
		return;
	}
	for (unsigned m = 1; m <= MAG_BINS; m++)
		if (x->mhist[m] > (c ? x->mhist[c] : 0))
			c = m;
	if (!c) /* every magnitude above 64: centre on their mean */
		c = (unsigned)(x->sum64 / x->mhist[0]);
	ms->common = (uint16_t)c;
	for (unsigned m = 0; m <= MAG_BINS; m++) {
		unsigned mm = m ? m : (x->mhist[0] ? (unsigned)(x->sum64 / x->mhist[0]) : 0);
		if (!x->mhist[m] || mm == c)
			continue;
		for (unsigned d = 0; d < 2; d++) {
			val[d][nd] = mag_fold(mm, c, d);
			vmax = val[d][nd] > vmax ? val[d][nd] : vmax;
		}
		cnt[nd++] = x->mhist[m];
	}
	/* run mode only for a symbol of probability >= 1/2 */
	const int runs_ok = c <= MAG_BINS && x->mhist[c] * 2 >= n;
	/* magnitudes equal to c: its bin, or the large ones c is the mean of */
	const uint64_t ncommon = x->mhist[c <= MAG_BINS ? c : 0];
	unsigned kr = 0;
	const uint64_t runs_bits =
		runs_ok ? 5 + rice_est(n - x->mhist[c] + 1, x->mhist[c], 15, &kr) : 0;
	const unsigned kmax = bfp_bitlen32(vmax) < 15 ? bfp_bitlen32(vmax) : 15;
	uint64_t best = UINT64_MAX;
	for (unsigned down = 0; down < 2; down++) {
		for (unsigned k = 0; k <= kmax; k++) {
			uint64_t plain = ncommon * (1 + k), runs = runs_bits;
			for (unsigned i = 0; i < nd; i++) {
				plain += (uint64_t)cnt[i] * eg_bits(val[down][i], k);
				runs += (uint64_t)cnt[i] * eg_bits(val[down][i] - 1, k);
			}
			if (plain < best) {
				best = plain;
				ms->runs = 0;
				ms->down = (uint8_t)down;
				ms->k = (uint8_t)k;
			}
			if (runs_ok && runs < best) {
				best = runs;
				ms->runs = 1;
				ms->down = (uint8_t)down;
				ms->k = (uint8_t)k;
				ms->kr = (uint8_t)kr;
			}
		}
	}
}

/* Encoding 5 frame-wide parameters: the count order, the gap parameter
 * base and the default magnitude code that cost the fewest bits. */
/* The Exp-Golomb order of the class counts that codes them in the
 * fewest bits. */
static void plan_kn(bfp_sparse_plan *pl)
{
	uint64_t best = UINT64_MAX;
	for (unsigned k = 0; k < 8; k++) {
		uint64_t b = 0;
		for (unsigned c = 0; c < BFP_CLASSES; c++)
			b += eg_bits(pl->n[c], k);
		if (b < best) {
			best = b;
			pl->kn = (uint8_t)k;
		}
	}
}

static void plan_frame_v2(bfp_sparse_plan *pl)
{
	uint64_t best = UINT64_MAX;
	plan_kn(pl);
	unsigned top = 0;
	pl->mdef.common = 1;
	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		if (!pl->n[c])
			continue;
		const unsigned slope = pl->enc == BFP_ENC_SPARSE3 ? 2 : 1;
		int g0 = (int)gap_param(pl, c) - (int)(slope * c);
		uint64_t b = 0;
		unsigned same = 0;
		for (unsigned d = 0; d < BFP_CLASSES; d++) {
			if (!pl->n[d])
				continue;
			b += gk_bits(pl->enc, gap_param(pl, d), gk_pred(pl->enc, g0, d));
			same += same_code(&pl->mag[d], &pl->mag[c]);
		}
		if (b < best) {
			best = b;
			pl->gk0 = (int8_t)g0;
		}
		if (same > top) {
			top = same;
			pl->mdef = pl->mag[c];
		}
	}
	pl->fbits = 3 + (pl->enc == BFP_ENC_SPARSE3 ? 7 : 6) + mag_code_bits(&pl->mdef, NULL);
}

/* Codes are chosen from per-class statistics with a cost model (one pass
 * over the changes); bfp_sparse_cut then counts the exact size. */
void bfp_sparse_plan_make(const bfp_encoder *e, uint32_t k, unsigned enc,
			  bfp_sparse_plan *pl)
{
	cls_acc a[BFP_CLASSES];
	const int v2 = enc != BFP_ENC_SPARSE;

	BFP_MEMSET(a, 0, sizeof(a));
	BFP_MEMSET(pl, 0, sizeof(*pl));
	pl->enc = (uint8_t)enc;
	for (unsigned c = 0; c < BFP_CLASSES; c++)
		a[c].mmin = UINT32_MAX;
	for (uint32_t j = 0; j < k; j++) { /* no data-dependent branches */
		unsigned c = e->chg_class[j];
		uint32_t g = e->chg_rank[j];
		unsigned m = bfp_mag(e->chg_delta[j]);
		unsigned big = m > MAG_BINS;
		pl->n[c]++;
		a[c].gsum += g;
		a[c].gzero += g == 0;
		a[c].mhist[big ? 0 : m]++;
		a[c].sum16 += m > 16 ? m : 0;
		a[c].sum64 += big ? m : 0;
		a[c].mmin = m < a[c].mmin ? m : a[c].mmin;
		a[c].mmax = m > a[c].mmax ? m : a[c].mmax;
	}
	const unsigned maxk = v2 ? 15 : 30; /* run parameters: 4 bits or 5 */
	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		const cls_acc *x = &a[c];
		uint32_t n = pl->n[c];
		bfp_seq *gs = &pl->gap[c];
		unsigned kp, ko, kr;
		if (!n)
			continue;
		uint32_t nz = n - x->gzero;
		/* the nonzero gaps, each less one, sum to gsum - nz */
		uint64_t plain, runs;
		if (enc == BFP_ENC_SPARSE3) {
			plain = level_est(n, x->gsum, &kp);
			runs = 5 + level_est(nz, x->gsum - nz, &ko);
		} else {
			plain = rice_est(n, x->gsum, 30, &kp);
			runs = 5 + rice_est(nz, x->gsum - nz, 30, &ko);
			kp = rice_level(kp);
			ko = rice_level(ko);
		}
		runs += rice_est(nz + 1, x->gzero, maxk, &kr);
		if (runs < plain) {
			gs->runs = 1;
			gs->k = (uint8_t)ko;
			gs->kr = (uint8_t)kr;
		} else {
			gs->k = (uint8_t)kp;
		}
		if (v2)
			plan_mag_v2(x, n, &pl->mag[c]);
		else
			plan_mag_v1(x, n, &pl->mag[c]);
	}
	if (v2)
		plan_frame_v2(pl);
	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		if (!pl->n[c])
			continue;
		gcode_of(pl->gap[c].k, &pl->gc[c]);
		pl->hbits[0][c] = (uint16_t)class_header_bits(pl, c, 0);
		pl->hbits[1][c] = c && pl->n[c - 1] ? (uint16_t)class_header_bits(pl, c, 1)
						    : pl->hbits[0][c];
	}
}

void bfp_model_from_plan(const bfp_sparse_plan *pl, bfp_model *m)
{
	BFP_MEMSET(m, 0, sizeof(*m));
	m->gk0 = pl->gk0;
	m->mdef = pl->mdef;
	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		if (pl->n[c]) {
			m->gap[c] = pl->gap[c];
			m->mag[c] = pl->mag[c];
		} else {
			m->gap[c].k = (uint8_t)gk_pred(BFP_ENC_SPARSE3, pl->gk0, c);
			m->mag[c] = pl->mdef;
		}
	}
}

/* The model's classes are coded like encoding 6 class headers in a frame
 * where every class has changes: a plan that says so. */
static void model_as_plan(const bfp_model *m, bfp_sparse_plan *pl)
{
	BFP_MEMSET(pl, 0, sizeof(*pl));
	pl->enc = BFP_ENC_SPARSE3;
	pl->gk0 = m->gk0;
	pl->mdef = m->mdef;
	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		pl->n[c] = 1;
		pl->gap[c] = m->gap[c];
		pl->mag[c] = m->mag[c];
	}
}

unsigned bfp_model_bits(const bfp_model *m)
{
	bfp_sparse_plan p;
	model_as_plan(m, &p);
	unsigned bits = 7 + mag_code_bits(&m->mdef, NULL);
	for (unsigned c = 0; c < BFP_CLASSES; c++)
		bits += class_header_bits(&p, c, c > 0);
	return bits;
}

void bfp_sparse_plan_model(const bfp_encoder *e, uint32_t k, unsigned enc,
			   const bfp_model *m, uint32_t dref, bfp_sparse_plan *pl)
{
	BFP_MEMSET(pl, 0, sizeof(*pl));
	pl->enc = (uint8_t)enc;
	pl->model = m;
	pl->dref = dref;
	pl->gk0 = m->gk0;
	pl->mdef = m->mdef;
	for (uint32_t j = 0; j < k; j++)
		pl->n[e->chg_class[j]]++;
	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		pl->gap[c] = m->gap[c];
		pl->mag[c] = m->mag[c];
		gcode_of(pl->gap[c].k, &pl->gc[c]);
	}
	plan_kn(pl);
	pl->fbits = 3 + (enc == BFP_ENC_MODEL ? bfp_model_bits(m) : bfp_eg0_bits(dref - 1));
}

uint32_t bfp_sparse_cut(const bfp_encoder *e, uint32_t k, bfp_sparse_plan *pl,
			uint64_t budget_bits)
{
	uint32_t n[BFP_CLASSES] = {0}, grun[BFP_CLASSES], mrun[BFP_CLASSES];
	uint8_t gopen[BFP_CLASSES] = {0}, mopen[BFP_CLASSES] = {0};
	uint64_t var[BFP_CLASSES];
	const unsigned zero = count_bits(pl, 0);
	uint64_t committed = pl->fbits, vsum = (uint64_t)BFP_CLASSES * zero;
	const int v2 = pl->enc != BFP_ENC_SPARSE;

	for (unsigned c = 0; c < BFP_CLASSES; c++)
		var[c] = zero;
	uint32_t j = 0;
	for (; j < k; j++) {
		unsigned c = e->chg_class[j];
		const bfp_seq *gs = &pl->gap[c], *ms = &pl->mag[c];
		uint32_t g = e->chg_rank[j];
		unsigned m = bfp_mag(e->chg_delta[j]);
		uint64_t add = 1; /* sign */
		if (!gs->runs) {
			add += gc_bits(g, &pl->gc[c]);
		} else {
			if (!gopen[c]) {
				gopen[c] = 1;
				grun[c] = 0;
			}
			if (g == 0) {
				grun[c]++;
			} else {
				add += bfp_rice_bits(grun[c], gs->kr) + gc_bits(g - 1, &pl->gc[c]);
				gopen[c] = 0;
			}
		}
		if (ms->all) {
			/* the magnitude is implied */
		} else if (!ms->runs) {
			add += eg_bits(mag_other(v2, ms, m), ms->k);
		} else {
			if (!mopen[c]) {
				mopen[c] = 1;
				mrun[c] = 0;
			}
			if (m == ms->common) {
				mrun[c]++;
			} else {
				add += bfp_rice_bits(mrun[c], ms->kr) +
				       eg_bits(mag_other(v2, ms, m), ms->k);
				mopen[c] = 0;
			}
		}
		/* the first change of class c turns the header of class c + 1,
		 * if it has changes, to its other form (encoding 6) */
		int64_t adj = 0;
		if (!n[c] && c + 1 < BFP_CLASSES && n[c + 1])
			adj = (int64_t)pl->hbits[1][c + 1] - (int64_t)pl->hbits[0][c + 1];
		n[c]++;
		uint64_t v = count_bits(pl, n[c]) + pl->hbits[c && n[c - 1]][c] +
			     (gopen[c] ? bfp_rice_bits(grun[c], gs->kr) : 0) +
			     (mopen[c] ? bfp_rice_bits(mrun[c], ms->kr) : 0);
		uint64_t total = committed + add + vsum - var[c] + v + (uint64_t)adj;
		if (total > budget_bits) {
			n[c]--;
			break;
		}
		committed += add;
		vsum += v - var[c] + (uint64_t)adj;
		var[c] = v;
		if (adj)
			var[c + 1] += (uint64_t)adj;
	}
	for (unsigned c = 0; c < BFP_CLASSES; c++)
		pl->n[c] = n[c];
	pl->bits = committed + vsum;
	return j;
}

/* A magnitude code, absolute or relative to below (mag_code_bits). */
static void write_mag_code(bfp_bw *w, const bfp_seq *m, const bfp_seq *below)
{
	unsigned cp = 1, kp = 0;
	if (below) {
		mag_pred(below, &cp, &kp);
		bfp_put_eg0(w, zigzag((int32_t)m->common - (int32_t)cp));
	} else {
		bfp_put_eg0(w, m->common - 1u);
	}
	bfp_bw_put(w, m->runs, 1);
	if (m->runs)
		bfp_bw_put(w, m->all, 1);
	if (!m->all) {
		if (below)
			bfp_put_eg0(w, zigzag((int32_t)m->k - (int32_t)kp));
		else
			bfp_bw_put(w, m->k, 4);
		if (m->common > 1)
			bfp_bw_put(w, m->down, 1);
	}
	if (m->runs && !m->all)
		bfp_bw_put(w, m->kr, 4);
}

/* Encoding 5 and 6 header fields of a class, after its count. */
static void write_class_v2(bfp_bw *w, const bfp_sparse_plan *pl, unsigned c)
{
	const bfp_seq *gs = &pl->gap[c], *ms = &pl->mag[c];
	const int v3 = pl->enc == BFP_ENC_SPARSE3;
	unsigned pred = gk_pred(pl->enc, pl->gk0, c), gk = gap_param(pl, c);
	bfp_bw_put(w, gs->runs, 1);
	if (v3) {
		bfp_put_eg0(w, zigzag((int32_t)gk - (int32_t)pred));
	} else if (gk == pred) {
		bfp_bw_put(w, 1, 1);
	} else if (gk + 1u == pred || gk == pred + 1) {
		bfp_bw_put(w, 2, 2); /* 0 then 1 */
		bfp_bw_put(w, gk < pred, 1);
	} else {
		bfp_bw_put(w, 0, 2);
		bfp_bw_put(w, gk, 5);
	}
	if (gs->runs)
		bfp_bw_put(w, gs->kr, 4);
	int dflt = same_code(ms, &pl->mdef);
	bfp_bw_put(w, (unsigned)dflt, 1);
	if (dflt)
		return;
	write_mag_code(w, ms, v3 && c && pl->n[c - 1] ? &pl->mag[c - 1] : NULL);
}

static void write_class_v1(bfp_bw *w, const bfp_sparse_plan *pl, unsigned c)
{
	const bfp_seq *gs = &pl->gap[c], *ms = &pl->mag[c];
	bfp_bw_put(w, gs->runs, 1);
	bfp_bw_put(w, gap_param(pl, c), 5);
	if (gs->runs)
		bfp_bw_put(w, gs->kr, 5);
	bfp_bw_put(w, ms->runs, 1);
	bfp_bw_put(w, ms->k, 4);
	if (ms->runs) {
		bfp_put_eg0(w, ms->common - 1u);
		bfp_bw_put(w, ms->kr, 5);
	}
}

/* The model section of an encoding 7 payload (FORMAT.md 3.10). */
static void write_model(bfp_bw *w, const bfp_model *m)
{
	bfp_sparse_plan p;
	model_as_plan(m, &p);
	bfp_bw_put(w, (unsigned)(m->gk0 + 64), 7);
	write_mag_code(w, &m->mdef, NULL);
	for (unsigned c = 0; c < BFP_CLASSES; c++)
		write_class_v2(w, &p, c);
}

/* Write a run-coded or plain sequence of symbols (FORMAT.md 3.4, 3.8,
 * 3.9, 3.10). */
void bfp_sparse_write(bfp_encoder *e, uint32_t k, const bfp_sparse_plan *pl,
		      bfp_bw *w)
{
	uint32_t start[BFP_CLASSES + 1], fill[BFP_CLASSES];
	uint32_t *order = e->chg_order;
	const int v2 = pl->enc != BFP_ENC_SPARSE;
	const int modelled = pl->enc == BFP_ENC_MODEL || pl->enc == BFP_ENC_MODELLED;

	if (pl->enc == BFP_ENC_MODEL)
		write_model(w, pl->model);
	else if (pl->enc == BFP_ENC_MODELLED)
		bfp_put_eg0(w, pl->dref - 1);
	if (v2)
		bfp_bw_put(w, pl->kn, 3);
	if (v2 && !modelled) { /* encodings 5, 6: gap parameter base, default code */
		if (pl->enc == BFP_ENC_SPARSE3)
			bfp_bw_put(w, (unsigned)(pl->gk0 + 64), 7);
		else
			bfp_bw_put(w, (unsigned)(pl->gk0 + 16), 6);
		write_mag_code(w, &pl->mdef, NULL);
	}
	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		if (v2)
			put_eg(w, pl->n[c], pl->kn);
		else
			bfp_put_eg0(w, pl->n[c]);
		if (!pl->n[c] || modelled)
			continue;
		if (v2)
			write_class_v2(w, pl, c);
		else
			write_class_v1(w, pl, c);
	}
	start[0] = 0;
	for (unsigned c = 0; c < BFP_CLASSES; c++)
		start[c + 1] = start[c] + pl->n[c];
	for (unsigned c = 0; c < BFP_CLASSES; c++)
		fill[c] = start[c];
	for (uint32_t j = 0; j < k; j++)
		order[fill[e->chg_class[j]]++] = j;

	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		const bfp_seq *gs = &pl->gap[c], *ms = &pl->mag[c];
		uint32_t a = start[c], b = start[c + 1];
		int due = 1;
		for (uint32_t t = a; t < b; t++) {
			uint32_t g = e->chg_rank[order[t]];
			if (!gs->runs) {
				put_gc(w, g, &pl->gc[c]);
				continue;
			}
			if (due) {
				uint32_t r = 0;
				while (t + r < b && e->chg_rank[order[t + r]] == 0)
					r++;
				bfp_put_rice(w, r, gs->kr);
				due = 0;
			}
			if (g != 0) {
				put_gc(w, gap_other(gs, g), &pl->gc[c]);
				due = 1;
			}
		}
		due = 1;
		for (uint32_t t = a; t < b; t++) {
			uint16_t d = e->chg_delta[order[t]];
			unsigned m = bfp_mag(d);
			if (ms->runs && !ms->all && due) {
				uint32_t r = 0;
				while (t + r < b && bfp_mag(e->chg_delta[order[t + r]]) == ms->common)
					r++;
				bfp_put_rice(w, r, ms->kr);
				due = 0;
			}
			bfp_bw_put(w, ((int16_t)d < 0) ? 1u : 0u, 1);
			if (!ms->runs || (!ms->all && m != ms->common)) {
				put_eg(w, mag_other(v2, ms, m), ms->k);
				due = 1;
			}
		}
	}
}

/* A magnitude code, absolute or relative to below (write_mag_code); 0
 * when invalid: C outside 1..32768, k outside 0..15. */
static int parse_mag_code(bfp_br *r, const bfp_seq *below, bfp_seq *m)
{
	unsigned cp = 1, kp = 0;
	int64_t c;
	if (below) {
		mag_pred(below, &cp, &kp);
		c = (int64_t)cp + unzigzag(bfp_get_eg0(r));
	} else {
		c = (int64_t)bfp_get_eg0(r) + 1;
	}
	if (r->err || c < 1 || c > 32768)
		return 0;
	m->common = (uint16_t)c;
	m->runs = (uint8_t)bfp_br_get(r, 1);
	if (m->runs)
		m->all = (uint8_t)bfp_br_get(r, 1);
	if (!m->all) {
		int64_t k = below ? (int64_t)kp + unzigzag(bfp_get_eg0(r)) : bfp_br_get(r, 4);
		if (r->err || k < 0 || k > 15)
			return 0;
		m->k = (uint8_t)k;
		if (m->common > 1)
			m->down = (uint8_t)bfp_br_get(r, 1);
	}
	if (m->runs && !m->all)
		m->kr = (uint8_t)bfp_br_get(r, 4);
	return !r->err;
}

/* Encoding 5 and 6 class header after the count; prev: the magnitude code
 * of class c - 1 if it has changes, else NULL. */
static int parse_class_v2(bfp_br *r, unsigned enc, int gk0, const bfp_seq *mdef,
			  const bfp_seq *prev, unsigned c, bfp_seq *gs, bfp_seq *ms)
{
	const int v3 = enc == BFP_ENC_SPARSE3;
	const unsigned top = v3 ? LEVEL_MAX : 31, pred = gk_pred(enc, gk0, c);
	unsigned gk;
	gs->runs = (uint8_t)bfp_br_get(r, 1);
	if (v3) {
		int64_t g = (int64_t)pred + unzigzag(bfp_get_eg0(r));
		if (r->err || g < 0 || g > (int64_t)top)
			return 0;
		gk = (unsigned)g;
	} else if (bfp_br_get(r, 1)) {
		gk = pred;
	} else if (bfp_br_get(r, 1)) {
		unsigned down = bfp_br_get(r, 1);
		if ((down && pred == 0) || (!down && pred == top))
			return 0;
		gk = down ? pred - 1 : pred + 1;
	} else {
		gk = bfp_br_get(r, 5);
	}
	gs->k = (uint8_t)(v3 ? gk : rice_level(gk));
	if (gs->runs)
		gs->kr = (uint8_t)bfp_br_get(r, 4);
	if (bfp_br_get(r, 1))
		*ms = *mdef;
	else if (!parse_mag_code(r, v3 ? prev : NULL, ms))
		return 0;
	return !r->err;
}

static int parse_class_v1(bfp_br *r, bfp_seq *gs, bfp_seq *ms)
{
	gs->runs = (uint8_t)bfp_br_get(r, 1);
	gs->k = (uint8_t)rice_level(bfp_br_get(r, 5));
	if (gs->runs)
		gs->kr = (uint8_t)bfp_br_get(r, 5);
	ms->runs = (uint8_t)bfp_br_get(r, 1);
	ms->k = (uint8_t)bfp_br_get(r, 4);
	if (ms->runs) {
		uint32_t m = bfp_get_eg0(r);
		if (r->err || m >= 32768u)
			return 0;
		ms->common = (uint16_t)(m + 1);
		ms->kr = (uint8_t)bfp_br_get(r, 5);
	}
	return !r->err;
}

/* The gaps of a class with n changes (FORMAT.md 3.4, 3.8, 3.9); 0 if
 * corrupt. Separate functions with a local reader, so that the reader's
 * fields stay in registers; one per kind of level. */
static inline __attribute__((always_inline)) int read_gaps_t(bfp_br *rd, const bfp_seq *gs,
							     uint32_t n, uint32_t len,
							     uint32_t *gap, const int golomb)
{
	bfp_br rl = *rd, *r = &rl;
	uint32_t run = 0;
	int due = 1;
	const int runs = gs->runs;
	const unsigned kr = gs->kr;
	bfp_gcode gc;
	gcode_of(gs->k, &gc);
	for (uint32_t j = 0; j < n; j++) {
		uint64_t g;
		if (!runs) {
			g = get_gc(r, &gc, golomb);
		} else {
			if (due) {
				run = bfp_get_rice(r, kr);
				if (r->err || run > n - j)
					return 0;
				due = 0;
			}
			if (run > 0) {
				run--;
				g = 0;
			} else {
				g = get_gc(r, &gc, golomb) + 1;
				due = 1;
			}
		}
		/* a gap can never reach past the range (FORMAT.md 3.4) */
		if (r->err || g >= len)
			return 0;
		gap[j] = (uint32_t)g;
	}
	*rd = rl;
	return 1;
}

static __attribute__((noinline)) int read_gaps_rice(bfp_br *rd, const bfp_seq *gs, uint32_t n,
						    uint32_t len, uint32_t *gap)
{
	return read_gaps_t(rd, gs, n, len, gap, 0);
}

static __attribute__((noinline)) int read_gaps_golomb(bfp_br *rd, const bfp_seq *gs, uint32_t n,
						      uint32_t len, uint32_t *gap)
{
	return read_gaps_t(rd, gs, n, len, gap, 1);
}

static int read_gaps(bfp_br *rd, const bfp_seq *gs, uint32_t n, uint32_t len, uint32_t *gap)
{
	return lv_golomb(gs->k) ? read_gaps_golomb(rd, gs, n, len, gap)
				: read_gaps_rice(rd, gs, n, len, gap);
}

/* The steps of a class with n changes; 0 if corrupt. */
static __attribute__((noinline)) int read_steps(bfp_br *rd, int v2, const bfp_seq *ms,
						uint32_t n, uint16_t *step)
{
	bfp_br rl = *rd, *r = &rl;
	const int all = ms->all, runs = ms->runs && !all;
	uint32_t run = 0;
	int due = 1;
	for (uint32_t j = 0; j < n; j++) {
		uint32_t m;
		if (runs && due) {
			run = bfp_get_rice(r, ms->kr);
			if (r->err || run > n - j)
				return 0;
			due = 0;
		}
		unsigned sign = bfp_br_get(r, 1);
		if (all) {
			m = ms->common;
		} else if (runs && run > 0) {
			run--;
			m = ms->common;
		} else {
			uint32_t v = get_eg(r, ms->k);
			if (r->err)
				return 0;
			if (v2) {
				m = mag_unfold((uint64_t)v + ms->runs, ms->common, ms->down);
				if (m == 0)
					return 0;
			} else {
				if (v >= 32768u)
					return 0;
				m = (!ms->runs || v + 1 < ms->common) ? v + 1 : v + 2;
				if (m > 32768u)
					return 0;
			}
			due = 1;
		}
		/* FORMAT.md 3.2: +32768 is written as -32768 */
		if (m >= 32768u && !sign)
			return 0;
		step[j] = (uint16_t)(sign ? 0x10000u - m : m);
	}
	*rd = rl;
	return 1;
}

int bfp_model_parse(bfp_br *r, bfp_model *m)
{
	BFP_MEMSET(m, 0, sizeof(*m));
	m->gk0 = (int8_t)((int)bfp_br_get(r, 7) - 64);
	if (!parse_mag_code(r, NULL, &m->mdef))
		return 0;
	for (unsigned c = 0; c < BFP_CLASSES; c++)
		if (!parse_class_v2(r, BFP_ENC_SPARSE3, m->gk0, &m->mdef, c ? &m->mag[c - 1] : NULL,
				    c, &m->gap[c], &m->mag[c]))
			return 0;
	return !r->err;
}

bfp_status bfp_sparse_parse(bfp_br *rd, unsigned enc, bfp_model *model, uint32_t len,
			    uint32_t start[BFP_CLASSES + 1], uint32_t *gaps,
			    uint16_t *steps, bfp_frame_stats *st)
{
	/* a local reader: its fields stay in registers (the stores to gaps
	 * and steps could alias the caller's) */
	bfp_br rl = *rd, *r = &rl;
	uint32_t n[BFP_CLASSES];
	bfp_seq gs[BFP_CLASSES], ms[BFP_CLASSES], mdef;
	uint64_t total = 0, t0;
	unsigned kn = 0;
	int gk0 = 0;
	const int v2 = enc != BFP_ENC_SPARSE;
	const int modelled = enc == BFP_ENC_MODEL || enc == BFP_ENC_MODELLED;

	BFP_MEMSET(gs, 0, sizeof(gs));
	BFP_MEMSET(ms, 0, sizeof(ms));
	BFP_MEMSET(&mdef, 0, sizeof(mdef));
	if (enc == BFP_ENC_MODEL)
		BFP_CHECK(bfp_model_parse(r, model), BFP_E_CORRUPT);
	if (v2) {
		kn = bfp_br_get(r, 3);
		if (enc == BFP_ENC_SPARSE3)
			gk0 = (int)bfp_br_get(r, 7) - 64;
		else if (enc == BFP_ENC_SPARSE2)
			gk0 = (int)bfp_br_get(r, 6) - 16;
		if (!modelled)
			BFP_CHECK(parse_mag_code(r, NULL, &mdef), BFP_E_CORRUPT);
	}
	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		t0 = bfp_br_tell(r);
		n[c] = v2 ? get_eg(r, kn) : bfp_get_eg0(r);
		total += n[c];
		BFP_CHECK(!r->err && total <= BFP_CHANGES_MAX && total <= len,
			  BFP_E_CORRUPT);
		if (n[c] && modelled) {
			gs[c] = model->gap[c];
			ms[c] = model->mag[c];
		} else if (n[c]) {
			const bfp_seq *prev = c && n[c - 1] ? &ms[c - 1] : NULL;
			int ok = v2 ? parse_class_v2(r, enc, gk0, &mdef, prev, c, &gs[c], &ms[c])
				    : parse_class_v1(r, &gs[c], &ms[c]);
			BFP_CHECK(ok, BFP_E_CORRUPT);
		}
		if (st) {
			st->class_changes[c] = n[c];
			st->class_model_bits[c] = (uint32_t)(bfp_br_tell(r) - t0);
		}
	}
	BFP_CHECK(!r->err, BFP_E_CORRUPT);
	if (st)
		st->model_bits = (uint32_t)bfp_br_tell(r);
	start[0] = 0;
	for (unsigned c = 0; c < BFP_CLASSES; c++)
		start[c + 1] = start[c] + n[c];

	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		t0 = bfp_br_tell(r);
		BFP_CHECK(read_gaps(r, &gs[c], n[c], len, gaps + start[c]), BFP_E_CORRUPT);
		if (st)
			st->class_position_bits[c] = (uint32_t)(bfp_br_tell(r) - t0);
		t0 = bfp_br_tell(r);
		BFP_CHECK(read_steps(r, v2, &ms[c], n[c], steps + start[c]), BFP_E_CORRUPT);
		if (st) {
			st->class_value_bits[c] = (uint32_t)(bfp_br_tell(r) - t0);
			st->position_bits += st->class_position_bits[c];
			st->value_bits += st->class_value_bits[c];
		}
	}
	if (st)
		st->n_changes = (uint32_t)total;
	*rd = rl;
	return BFP_OK;
}
