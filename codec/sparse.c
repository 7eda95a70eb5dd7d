/*
 * sparse.c: the sparse payloads (FORMAT.md 3.4-3.6). Per base-exponent
 * class, two sequences are coded: the gaps between changes in the class's
 * rank space, and the step magnitudes. Each is either plain (every symbol
 * coded) or run-coded (runs of a common symbol, then the others), chosen
 * per class by exact size; run coding is what brings high-rate classes
 * (most gaps 0) and single-step-dominated magnitudes well under one bit
 * per symbol. A self-contained frame carries its classes' codes; a model
 * carries them, with magnitude tables (rANS), for a run of frames.
 */
#include "sparse.h"

/* The current frame's gathered changes: e->chg_* from e->chg0 on. */
#define CHG_CLASS(e) ((e)->chg_class + (e)->chg0)
#define CHG_RANK(e) ((e)->chg_rank + (e)->chg0)
#define CHG_DELTA(e) ((e)->chg_delta + (e)->chg0)

#define LEVEL_MAX 62u /* gap levels: 0..62 */

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

/* Gap codes by level L (FORMAT.md 3.1): with k = (L + 1) / 2, Rice(k)
 * when L is 0 or odd; Golomb with m = 3 * 2^(k-1) when L is even. The
 * quotient and the escape are as in Rice; a Golomb remainder r below
 * 2^(k-1) takes k bits, a larger one 2^(k-1) + (r - 2^(k-1)) / 2 in k
 * bits and then the parity of r - 2^(k-1). */
static inline unsigned lv_k(unsigned L)
{
	return (L + 1) >> 1;
}

static inline unsigned lv_golomb(unsigned L)
{
	return L >= 2 && !(L & 1);
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
	/* the unary quotient and the remainder in one put: at most 24 + 32
	 * bits */
	uint64_t r = rem;
	unsigned nr = g->k;
	if (rem >= g->cut) {
		uint64_t x = rem - g->cut;
		r = (g->cut + (x >> 1)) | ((x & 1) << g->k);
		nr++;
	}
	bfp_bw_put_clean(w, (1ull << q) | (r << (q + 1)), q + 1 + nr);
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

/* Magnitude m as its distance from the centre C, alternating above and
 * below while both sides have values: C, C+1, C-1, C+2, C-2, ... (or C,
 * C-1, C+1, ... when down), then the values above 2C-1 in order
 * (FORMAT.md 3.4). */
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

/* Other-symbol values (gaps in run mode skip 0: write_gaps_t):
 * magnitudes folded around the common one, less one in run mode (where
 * the common one is never coded). */
static inline uint32_t mag_other(const bfp_seq *s, unsigned m)
{
	return mag_fold(m, s->common, s->down) - s->runs;
}

/* Predicted gap level of class c: two levels a class above the base. */
static inline unsigned gk_pred(int gk0, unsigned c)
{
	int p = gk0 + 2 * (int)c;
	return p < 0 ? 0u : (p > (int)LEVEL_MAX ? LEVEL_MAX : (unsigned)p);
}

static inline uint32_t zigzag(int32_t d)
{
	return d >= 0 ? 2u * (uint32_t)d : 2u * (uint32_t)(-(d + 1)) + 1u;
}

static inline int32_t unzigzag(uint32_t z)
{
	return (z & 1) ? -(int32_t)(z >> 1) - 1 : (int32_t)(z >> 1);
}

/* Bits of a gap level: its distance from the prediction in EG0 after
 * zigzag. */
static inline unsigned gk_bits(unsigned gk, unsigned pred)
{
	return bfp_eg0_bits(zigzag((int32_t)gk - (int32_t)pred));
}

/* A class's gap fields: gr, the level (as gk_bits), and gkr when
 * run-coded. */
static inline unsigned gap_fields_bits(const bfp_seq *g, unsigned gk, unsigned pred)
{
	return 1 + gk_bits(gk, pred) + (g->runs ? 4 : 0);
}

/* When the class below has changes, a class's own magnitude
 * code is coded relative to that class's: a binade up, the same update
 * spans half the steps, so the common magnitude is predicted halved and
 * the order one less. */
static inline void mag_pred(const bfp_seq *below, unsigned *cp, unsigned *kp)
{
	*cp = below->common > 1 ? below->common >> 1 : 1u;
	*kp = below->k ? below->k - 1u : 0u;
}

/* Magnitude codes: equal (fields that do not apply are 0), and their
 * size: C, runs, all (run-coded), k and down (unless all; down only when
 * there are magnitudes below C), run parameter (run-coded, not all). */
static inline int same_code(const bfp_seq *a, const bfp_seq *b)
{
	return a->runs == b->runs && a->all == b->all && a->k == b->k &&
	       a->down == b->down && a->kr == b->kr && a->common == b->common;
}

/* A magnitude code's fields (FORMAT.md 3.4): C as C - 1 in EG0 and k in
 * 4 bits, or, relative to the class below's code (below not NULL), each
 * as its zigzag distance from the prediction in EG0; the other fields are
 * the same either way. */
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

/* A plan whose codes come from a model (FORMAT.md 3.6): count orders
 * per class, and magnitude tables. */
static inline int plan_modelled(const bfp_sparse_plan *pl)
{
	return pl->enc != BFP_ENC_SPARSE;
}

/* The order of class c's count in a plan's frame. */
static inline unsigned count_order(const bfp_sparse_plan *pl, unsigned c)
{
	return plan_modelled(pl) ? pl->model->kc[c] : pl->kn;
}

/* Bits of class c's count n. */
static inline unsigned count_bits(const bfp_sparse_plan *pl, unsigned c, uint32_t n)
{
	return eg_bits(n, count_order(pl, c));
}

/* Class c's magnitude table, if the plan's model gives it one. */
static inline const bfp_mtab *plan_tab(const bfp_sparse_plan *pl, unsigned c)
{
	return plan_modelled(pl) && pl->model->tab[c].on ? &pl->model->tab[c] : NULL;
}

/* Bits of class c's header after its count (the class has changes);
 * below: whether class c - 1 has changes (the magnitude code is coded
 * relative to it then). */
static unsigned class_header_bits(const bfp_sparse_plan *pl, unsigned c, int below)
{
	const bfp_seq *g = &pl->gap[c], *m = &pl->mag[c];
	unsigned b = gap_fields_bits(g, g->k, gk_pred(pl->gk0, c)) + 1;
	if (same_code(m, &pl->mdef))
		return b;
	return b + mag_code_bits(m, below ? &pl->mag[c - 1] : NULL);
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
	uint64_t gsum, sum64;
	uint32_t gzero, mmin, mmax;
	uint32_t mhist[MAG_BINS + 1]; /* magnitudes 1..64; [0] counts the larger ones */
} cls_acc;

/* The magnitude code of one class: all equal, or centred on the
 * most frequent magnitude, plain or run-coded, folded either way, with
 * the Exp-Golomb order of the fewest bits (magnitudes above 64 costed at
 * their mean). Costs are summed over the distinct magnitudes only, and
 * orders stop past the bit length of the largest folded value (beyond
 * it every code only grows). */
static uint64_t plan_mag(const cls_acc *x, uint32_t n, bfp_seq *ms)
{
	uint32_t val[2][MAG_BINS + 1], cnt[MAG_BINS + 1], vmax = 0;
	unsigned nd = 0, c = 0;

	if (x->mmin == x->mmax) {
		ms->runs = 1;
		ms->all = 1;
		ms->common = (uint16_t)x->mmin;
		return 0;
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
	return best;
}

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

/* A self-contained frame's own fields: the count order, the gap level
 * base and the default magnitude code that cost the fewest bits. */
static void plan_frame(bfp_sparse_plan *pl)
{
	uint64_t best = UINT64_MAX;
	plan_kn(pl);
	unsigned top = 0;
	pl->mdef.common = 1;
	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		if (!pl->n[c])
			continue;
		int g0 = (int)pl->gap[c].k - (int)(2 * c);
		uint64_t b = 0;
		unsigned same = 0;
		for (unsigned d = 0; d < BFP_CLASSES; d++) {
			if (!pl->n[d])
				continue;
			b += gk_bits(pl->gap[d].k, gk_pred(g0, d));
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
	pl->fbits = 3 + 7 + mag_code_bits(&pl->mdef, NULL);
}

/* Codes are chosen from per-class statistics with a cost model (one pass
 * over the changes); bfp_sparse_cut then counts the exact size. */
void bfp_sparse_plan_make(const bfp_enc *e, uint32_t k, bfp_sparse_plan *pl)
{
	const uint8_t *const cls = CHG_CLASS(e);
	const uint32_t *const rank = CHG_RANK(e);
	const uint16_t *const delta = CHG_DELTA(e);
	cls_acc a[BFP_CLASSES];

	BFP_MEMSET(a, 0, sizeof(a));
	BFP_MEMSET(pl, 0, sizeof(*pl));
	pl->enc = BFP_ENC_SPARSE;
	for (unsigned c = 0; c < BFP_CLASSES; c++)
		a[c].mmin = UINT32_MAX;
	for (uint32_t j = 0; j < k; j++) { /* no data-dependent branches */
		unsigned c = cls[j];
		uint32_t g = rank[j];
		unsigned m = bfp_mag(delta[j]);
		unsigned big = m > MAG_BINS;
		pl->n[c]++;
		a[c].gsum += g;
		a[c].gzero += g == 0;
		a[c].mhist[big ? 0 : m]++;
		a[c].sum64 += big ? m : 0;
		a[c].mmin = m < a[c].mmin ? m : a[c].mmin;
		a[c].mmax = m > a[c].mmax ? m : a[c].mmax;
	}
	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		const cls_acc *x = &a[c];
		uint32_t n = pl->n[c];
		bfp_seq *gs = &pl->gap[c];
		unsigned kp, ko, kr;
		if (!n)
			continue;
		uint32_t nz = n - x->gzero;
		/* the nonzero gaps, each less one, sum to gsum - nz */
		uint64_t plain = level_est(n, x->gsum, &kp);
		uint64_t runs = 5 + level_est(nz, x->gsum - nz, &ko);
		runs += rice_est(nz + 1, x->gzero, 15, &kr); /* 4-bit run parameter */
		if (runs < plain) {
			gs->runs = 1;
			gs->k = (uint8_t)ko;
			gs->kr = (uint8_t)kr;
		} else {
			gs->k = (uint8_t)kp;
		}
		pl->gbits[c] = runs < plain ? runs : plain;
		pl->mbits[c] = plan_mag(x, n, &pl->mag[c]);
	}
	plan_frame(pl);
	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		if (!pl->n[c])
			continue;
		gcode_of(pl->gap[c].k, &pl->gc[c]);
		pl->hbits[0][c] = (uint16_t)class_header_bits(pl, c, 0);
		pl->hbits[1][c] = c && pl->n[c - 1] ? (uint16_t)class_header_bits(pl, c, 1)
						    : pl->hbits[0][c];
	}
}

/* The model of a self-contained plan: its codes, and for classes without
 * changes a plain gap code at the predicted level and the default
 * magnitude code. */
static void model_from_plan(const bfp_sparse_plan *pl, bfp_model *m)
{
	BFP_MEMSET(m, 0, sizeof(*m));
	m->gk0 = pl->gk0;
	m->mdef = pl->mdef;
	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		if (pl->n[c]) {
			m->gap[c] = pl->gap[c];
			m->mag[c] = pl->mag[c];
		} else {
			m->gap[c].k = (uint8_t)gk_pred(pl->gk0, c);
			m->mag[c] = pl->mdef;
		}
	}
}

/* ---- models (FORMAT.md 3.6) ---- */

/* Bits of a magnitude table: e, sb, ns - 1, the first weight and the
 * others as their zigzag distance from the one before. */
static unsigned tab_bits(const bfp_mtab *t)
{
	unsigned b = 3 + 2 + bfp_eg0_bits(t->ns - 1u) + 5;
	for (unsigned i = 1; i < t->ns; i++)
		b += bfp_eg0_bits(zigzag((int32_t)t->q[i] - (int32_t)t->q[i - 1]));
	return b;
}

/* The magnitude code a model's class c codes its own relative to:
 * class c - 1's, unless that class is table-coded (then none). */
static inline const bfp_seq *model_below(const bfp_model *m, unsigned c)
{
	return c && !m->tab[c - 1].on ? &m->mag[c - 1] : NULL;
}

static unsigned model_class_bits(const bfp_model *m, unsigned c)
{
	unsigned b = 4 + gap_fields_bits(&m->gap[c], m->gap[c].k, gk_pred(m->gk0, c)) + 1;
	if (m->tab[c].on)
		return b + tab_bits(&m->tab[c]);
	return b + 1 +
	       (same_code(&m->mag[c], &m->mdef) ? 0 : mag_code_bits(&m->mag[c], model_below(m, c)));
}

unsigned bfp_model_bits(const bfp_model *m)
{
	unsigned bits = 7 + mag_code_bits(&m->mdef, NULL);
	for (unsigned c = 0; c < BFP_CLASSES; c++)
		bits += model_class_bits(m, c);
	return bits;
}

/* Magnitudes of one class in the changes a model is planned from: 1..63
 * one by one, larger ones by bit length and the two bits after the
 * leading one (enough for every table shape). */
typedef struct mag_hist {
	uint32_t one[64];
	uint32_t big[10][4]; /* bit lengths 7..16 */
} mag_hist;

/* The table of shape (e, sb) for the magnitudes counted in h, and its
 * estimated bits (table, symbols, raw and escape bits; not the signs). 0
 * when no table of that shape can be made. */
static int tab_try(const mag_hist *h, unsigned e, unsigned sb, bfp_mtab *t, uint64_t *bits)
{
	uint32_t cnt[BFP_TAB_SYMS];
	uint64_t raw = 0, r256 = 0;
	unsigned ns = 0;
	uint32_t cmax = 0;
	uint16_t f[BFP_TAB_SYMS];

	BFP_MEMSET(cnt, 0, sizeof(cnt));
	for (unsigned m = 1; m < 64; m++) {
		unsigned nraw;
		uint32_t rv;
		unsigned s = bfp_tab_sym(m, e, sb, &nraw, &rv);
		cnt[s] += h->one[m];
		raw += (uint64_t)h->one[m] * nraw;
	}
	for (unsigned j = 6; j < 16; j++) /* each bucket by its first magnitude */
		for (unsigned t2 = 0; t2 < (j < 15 ? 4u : 1u); t2++) { /* 32768 alone */
			unsigned nraw;
			uint32_t rv;
			unsigned s = bfp_tab_sym((4u + t2) << (j - 2), e, sb, &nraw, &rv);
			cnt[s] += h->big[j - 6][t2];
			raw += (uint64_t)h->big[j - 6][t2] * nraw;
		}
	for (unsigned s = 0; s < bfp_tab_nsym(e, sb); s++) {
		if (cnt[s])
			ns = s + 1;
		cmax = cnt[s] > cmax ? cnt[s] : cmax;
	}
	if (!ns)
		return 0;
	const unsigned q1 = bfp_tab_q(cmax, 1);
	t->on = 1;
	t->e = (uint8_t)e;
	t->sb = (uint8_t)sb;
	t->ns = (uint8_t)ns;
	for (unsigned s = 0; s < ns; s++) /* unseen: about a third of once */
		t->q[s] = (uint8_t)(cnt[s] ? bfp_tab_q(cmax, cnt[s]) : (q1 >= 3 ? q1 - 3 : 0));
	if (!bfp_tab_freqs(t, f))
		return 0;
	for (unsigned s = 0; s < ns; s++)
		if (cnt[s])
			r256 += (uint64_t)cnt[s] * (BFP_RANS_BITS * 256 - bfp_log2_fp8(f[s]));
	*bits = r256 / 256 + raw + tab_bits(t);
	return 1;
}

/* Tables for the classes where one costs fewer bits than the class's
 * magnitude code over the first k changes. */
static void plan_tables(const bfp_enc *e, uint32_t k, const bfp_sparse_plan *pl,
			bfp_model *m)
{
	const uint8_t *const cls = CHG_CLASS(e);
	const uint16_t *const delta = CHG_DELTA(e);
	mag_hist h[BFP_CLASSES];
	BFP_MEMSET(h, 0, sizeof(h));
	for (uint32_t j = 0; j < k; j++) {
		unsigned c = cls[j], mg = bfp_mag(delta[j]);
		if (mg < 64) {
			h[c].one[mg]++;
		} else {
			unsigned b = bfp_bitlen32(mg) - 1;
			h[c].big[b - 6][(mg >> (b - 2)) & 3]++;
		}
	}
	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		if (!pl->n[c] || pl->mag[c].all)
			continue; /* all one magnitude: the parametric code is free */
		uint64_t best = pl->mbits[c] + 1 + mag_code_bits(&m->mag[c], NULL), bits;
		/* past the e whose single symbols hold every magnitude, shapes
		 * only cost the same again (and the first of equals is kept) */
		unsigned etop = BFP_TAB_EMAX, mmax = 63, big = 0;
		for (unsigned b = 0; b < 10 * 4; b++)
			big |= h[c].big[b / 4][b % 4];
		while (!big && mmax > 1 && !h[c].one[mmax])
			mmax--;
		if (!big && bfp_bitlen32(mmax) < etop)
			etop = bfp_bitlen32(mmax);
		for (unsigned ee = 0; ee <= etop; ee++)
			for (unsigned sb = 0; sb <= BFP_TAB_SBMAX && sb <= ee; sb++) {
				bfp_mtab t;
				if (tab_try(&h[c], ee, sb, &t, &bits) && bits < best) {
					best = bits;
					m->tab[c] = t;
				}
			}
		if (m->tab[c].on)
			m->mag[c] = m->mdef;
	}
}

/* Count orders: the ones that code the class counts of frames of about
 * the size the first k changes predict (their estimated bits over the
 * budget) in the fewest bits. */
static void plan_counts(const bfp_enc *e, uint32_t k, const bfp_sparse_plan *pl,
			uint64_t budget_bits, bfp_model *m)
{
	const uint8_t *const cls = CHG_CLASS(e);
	uint64_t est = 0, cost[BFP_CLASSES][16];
	uint32_t cnt[BFP_CLASSES], in = 0;
	for (unsigned c = 0; c < BFP_CLASSES; c++)
		est += pl->gbits[c] + pl->mbits[c] + pl->n[c];
	uint64_t g = est ? (uint64_t)k * budget_bits / est : k;
	g = g < 1 ? 1 : (g > k ? k : g);
	BFP_MEMSET(cost, 0, sizeof(cost));
	BFP_MEMSET(cnt, 0, sizeof(cnt));
	for (uint32_t j = 0; j < k; j++) {
		cnt[cls[j]]++;
		if (++in < g)
			continue;
		for (unsigned c = 0; c < BFP_CLASSES; c++) {
			for (unsigned kk = 0; kk < 16; kk++)
				cost[c][kk] += eg_bits(cnt[c], kk);
			cnt[c] = 0;
		}
		in = 0;
	}
	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		unsigned best = 0;
		for (unsigned kk = 1; kk < 16; kk++)
			best = cost[c][kk] < cost[c][best] ? kk : best;
		m->kc[c] = (uint8_t)best;
	}
}

void bfp_model_from_plan(const bfp_enc *e, uint32_t k, const bfp_sparse_plan *pl,
			 uint64_t budget_bits, bfp_model *m)
{
	model_from_plan(pl, m);
	plan_counts(e, k, pl, budget_bits, m);
	plan_tables(e, k, pl, m);
}

void bfp_model_tables(const bfp_model *m, bfp_rtab *rt, int encoder)
{
	for (unsigned c = 0; c < BFP_CLASSES; c++)
		if (m->tab[c].on)
			bfp_rtab_build(&m->tab[c], rt, c, encoder);
}

void bfp_sparse_plan_model(const bfp_enc *e, uint32_t k, unsigned enc,
			   const bfp_model *m, const bfp_rtab *rt, uint32_t dref,
			   bfp_sparse_plan *pl)
{
	const uint8_t *const cls = CHG_CLASS(e);
	BFP_MEMSET(pl, 0, sizeof(*pl));
	pl->enc = (uint8_t)enc;
	pl->model = m;
	pl->rt = rt;
	pl->dref = dref;
	pl->gk0 = m->gk0;
	pl->mdef = m->mdef;
	for (uint32_t j = 0; j < k; j++)
		pl->n[cls[j]]++;
	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		pl->gap[c] = m->gap[c];
		pl->mag[c] = m->mag[c];
		gcode_of(pl->gap[c].k, &pl->gc[c]);
	}
	pl->fbits = bfp_encoding_carries_model(enc) ? bfp_model_bits(m) : bfp_eg0_bits(dref - 1);
}

/* Plans of a model: a bound on the bits of the payload's rANS part and
 * the padding before it, for nt table-coded magnitudes of costs summing
 * to r256 (1/256 bit, each at least its exact cost), less the signs the
 * initial state carries. Each step codes at most 2^-12 * 1.5 bits more
 * than its cost; the bytes it writes, with the state's final 4, hold at
 * most 1 bit more than the costs (the state starts below 2 L). */
static inline uint64_t tail_bits(uint32_t nt, uint64_t r256)
{
	if (!nt)
		return 0;
	return 7 + 32 + (r256 + 255) / 256 + nt / 2048 + 2 -
	       (nt < BFP_RANS_SIGNS ? nt : BFP_RANS_SIGNS);
}

/* Bits of a table-coded magnitude in the bit stream (escape and raw
 * bits); its symbol (the top one for all above it) goes to *sym and its
 * cost in the rANS part to *r256. */
static inline unsigned tab_bits_of(const bfp_mtab *t, const uint16_t *cost, unsigned m,
				   uint8_t *sym, uint64_t *r256)
{
	unsigned nraw;
	uint32_t raw;
	const unsigned s = bfp_tab_sym(m, t->e, t->sb, &nraw, &raw), top = t->ns - 1u;
	if (s < top) {
		*sym = (uint8_t)s;
		*r256 += cost[s];
		return nraw;
	}
	*sym = (uint8_t)top;
	*r256 += cost[top];
	return nraw + bfp_eg0_bits(s - top);
}

/* How class c of a plan codes its magnitudes: table-coded, all of the
 * common one (signs only), in its own code without runs or with runs of
 * the common one. */
enum { MAG_TAB, MAG_ALL, MAG_PLAIN, MAG_RUNS };
static inline int mag_mode(const bfp_sparse_plan *pl, unsigned c)
{
	const bfp_seq *ms = &pl->mag[c];
	return plan_tab(pl, c) ? MAG_TAB : ms->all ? MAG_ALL : !ms->runs ? MAG_PLAIN : MAG_RUNS;
}

/* bfp_sparse_cut's per-class pass: the changes of class c (order[a..b),
 * in frame order) one after another, each one's running totals for its
 * class in cost[t] (CUT_*: the bits of the class's changes up to it that
 * stay whatever follows, and the bits of the runs still open after it)
 * and rcost[t] (their rANS symbols' costs, 1/256 bit). Returns the index
 * of the first change the class's codes cannot say (a model's class
 * whose magnitudes were all one), or UINT32_MAX. Going through one class
 * at a time keeps the branches on its codes predictable. */
#define CUT_BITS(x) ((x) & 0xFFFFFFu) /* a change adds at most 219 bits */
#define CUT_OPEN(x) ((x) >> 24)
_Static_assert(BFP_CHANGES_MAX * 256ull < (1ull << 24), "CUT_BITS holds a class's bits");
static inline __attribute__((always_inline)) uint32_t
cut_class_t(bfp_enc *e, const bfp_sparse_plan *pl, unsigned c, uint32_t a, uint32_t b,
	    uint32_t *cost, uint32_t *rcost, const int gruns, const int mode)
{
	const uint32_t *const rank = CHG_RANK(e);
	const uint16_t *const delta = CHG_DELTA(e);
	/* the class's codes in locals: the stores below to cost, rcost and
	 * the symbols could alias the plan's fields, which the loop would
	 * then load again after each */
	const bfp_seq gsv = pl->gap[c], msv = pl->mag[c], *gs = &gsv, *ms = &msv;
	const bfp_gcode gcv = pl->gc[c], *gc = &gcv;
	const bfp_mtab *tab = plan_tab(pl, c);
	const uint16_t *tcost = tab ? pl->rt->cost[c] : NULL;
	uint32_t grun = 0, mrun = 0, bits = 0;
	uint64_t r256 = 0;
	unsigned mopen = 0;
	for (uint32_t t = a; t < b; t++) {
		const uint32_t j = e->chg_order[t], g = rank[j];
		const unsigned m = bfp_mag(delta[j]);
		unsigned add = 1; /* sign */
		if (BFP_UNLIKELY(mode == MAG_ALL && m != ms->common))
			return j;
		unsigned gopen_bits = 0;
		if (!gruns) {
			add += gc_bits(g, gc);
		} else {
			/* Without a branch, as zero and other gaps mix (about
			 * half are zero in the classes that take runs): grun
			 * counts the zero gaps since the last other one. A zero
			 * gap leaves the run open (its code's bits are the open
			 * ones); another closes it with its code and its own
			 * (of 0 for a zero gap, so as not to take the escape). */
			const uint32_t z = 0u - (uint32_t)(g == 0);
			const unsigned rb = bfp_rice_bits(grun + (z & 1u), gs->kr);
			add += (rb + gc_bits((g - 1) & ~z, gc)) & ~z;
			gopen_bits = rb & z;
			grun = (grun + 1) & z;
		}
		if (mode == MAG_TAB) {
			add += tab_bits_of(tab, tcost, m, &e->chg_sym[t], &r256);
		} else if (mode == MAG_ALL) {
			/* the magnitude is implied */
		} else if (mode == MAG_PLAIN) {
			add += eg_bits(mag_other(ms, m), ms->k);
		} else {
			if (!mopen) {
				mopen = 1;
				mrun = 0;
			}
			if (m == ms->common) {
				mrun++;
			} else {
				add += bfp_rice_bits(mrun, ms->kr) + eg_bits(mag_other(ms, m), ms->k);
				mopen = 0;
			}
		}
		const unsigned open = gopen_bits + (mopen ? bfp_rice_bits(mrun, ms->kr) : 0);
		bits += add;
		cost[t] = bits | open << 24;
		rcost[t] = (uint32_t)r256;
	}
	return UINT32_MAX;
}

/* cut_class_t for each way a class codes its gaps (runs or not) and its
 * magnitudes, so that no loop tests that per change */
static uint32_t cut_class(bfp_enc *e, const bfp_sparse_plan *pl, unsigned c,
			  uint32_t a, uint32_t b, uint32_t *cost, uint32_t *rcost)
{
#define CUT_CASE(gr, md)                                                                 \
	case (gr) * 4 + (md):                                                            \
		return cut_class_t(e, pl, c, a, b, cost, rcost, gr, md)
	switch (pl->gap[c].runs * 4 + mag_mode(pl, c)) {
		CUT_CASE(0, MAG_TAB);
		CUT_CASE(0, MAG_ALL);
		CUT_CASE(0, MAG_PLAIN);
		CUT_CASE(0, MAG_RUNS);
		CUT_CASE(1, MAG_TAB);
		CUT_CASE(1, MAG_ALL);
		CUT_CASE(1, MAG_PLAIN);
	default:
		return cut_class_t(e, pl, c, a, b, cost, rcost, 1, MAG_RUNS);
	}
#undef CUT_CASE
}

/* A prefix's bits with a model's codes (no class headers), kept by
 * parts: all but the rANS part (body), and the rANS part's costs (r256,
 * 1/256 bit) and count of table-coded changes (nt). */
typedef struct {
	uint64_t body, r256;
	uint32_t nt;
} prefix_acc;

/* Class c's share of a prefix that holds its first nc changes: its
 * count, and its running totals at the last of them. */
static inline prefix_acc prefix_class(const bfp_enc *e, const bfp_sparse_plan *pl,
				      const uint8_t *tabbed, unsigned c, uint32_t nc)
{
	prefix_acc a = {count_bits(pl, c, nc), 0, 0};
	if (nc) {
		const uint32_t t = pl->start[c] + nc - 1, x = e->chg_cost[t];
		a.body += CUT_BITS(x) + CUT_OPEN(x);
		a.r256 = e->chg_rcost[t];
		a.nt = tabbed[c] ? nc : 0;
	}
	return a;
}

static inline uint64_t prefix_total(const prefix_acc *a)
{
	return a->body + tail_bits(a->nt, a->r256);
}

/* The payload of the first len changes, for a model's codes: each
 * class's share at its last change among them (a binary search in its
 * list of changes); n gets the per-class counts. */
static prefix_acc prefix_sum(const bfp_enc *e, const bfp_sparse_plan *pl,
			     const uint8_t *tabbed, uint32_t len, uint32_t *n)
{
	const uint32_t *order = e->chg_order, *start = pl->start;
	prefix_acc a = {pl->fbits, 0, 0};
	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		/* the class's changes before len: a search without branches */
		const uint32_t *p = order + start[c];
		uint32_t m = start[c + 1] - start[c];
		if (m) {
			while (m > 1) {
				const uint32_t half = m / 2;
				p = p[half] < len ? p + half : p;
				m -= half;
			}
			p += *p < len;
		}
		n[c] = (uint32_t)(p - order) - start[c];
		const prefix_acc x = prefix_class(e, pl, tabbed, c, n[c]);
		a.body += x.body;
		a.r256 += x.r256;
		a.nt += x.nt;
	}
	return a;
}

static uint64_t prefix_bits(const bfp_enc *e, const bfp_sparse_plan *pl,
			    const uint8_t *tabbed, uint32_t len, uint32_t *n)
{
	const prefix_acc a = prefix_sum(e, pl, tabbed, len, n);
	return prefix_total(&a);
}

/* With a model's codes, the longest prefix that fits when the first len
 * changes do not (a: their payload, n: their class counts; prefix_sum),
 * by taking the last change off
 * one at a time: the gather took about 1/32 more than fit, so this is a
 * few dozen steps, each of one class's share, where a binary search of
 * prefix_bits takes ~log2(len) times 16 searches. Sets n and pl->bits
 * for it; returns UINT32_MAX, n and pl->bits unchanged, when SHORTEN_MAX
 * steps are not enough (the binary search then finds it). */
#define SHORTEN_MAX 512u
static uint32_t shorten(const bfp_enc *e, bfp_sparse_plan *pl, const uint8_t *tabbed,
			prefix_acc a, uint32_t len, uint64_t budget_bits, uint32_t *n)
{
	const uint8_t *const cls = CHG_CLASS(e);
	uint32_t m[BFP_CLASSES];
	for (unsigned c = 0; c < BFP_CLASSES; c++)
		m[c] = n[c];
	for (uint32_t step = 0; step < SHORTEN_MAX && len > 0; step++) {
		/* change len - 1 is the last of its class among the first len */
		const unsigned c = cls[--len];
		if (m[c] == 0)
			__builtin_unreachable(); /* change len - 1 is one of them */
		const prefix_acc was = prefix_class(e, pl, tabbed, c, m[c]),
				 now = prefix_class(e, pl, tabbed, c, --m[c]);
		a.body += now.body - was.body;
		a.r256 += now.r256 - was.r256;
		a.nt += now.nt - was.nt;
		const uint64_t bits = prefix_total(&a);
		if (bits <= budget_bits) {
			for (unsigned k = 0; k < BFP_CLASSES; k++)
				n[k] = m[k];
			pl->bits = bits;
			return len;
		}
	}
	return UINT32_MAX;
}

uint32_t bfp_sparse_cut(bfp_enc *e, uint32_t k, bfp_sparse_plan *pl,
			uint64_t budget_bits)
{
	const uint8_t *const cls = CHG_CLASS(e);
	uint32_t n[BFP_CLASSES] = {0}, fill[BFP_CLASSES];
	uint32_t stop = k;
	uint32_t *start = pl->start, *cost = e->chg_cost, *rcost = e->chg_rcost;
	uint8_t tabbed[BFP_CLASSES];

	/* the changes grouped by class, in frame order within each */
	for (uint32_t j = 0; j < k; j++)
		n[cls[j]]++;
	start[0] = 0;
	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		start[c + 1] = start[c] + n[c];
		fill[c] = start[c];
		n[c] = 0;
	}
	for (uint32_t j = 0; j < k; j++)
		e->chg_order[fill[cls[j]]++] = j;
	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		uint32_t s = cut_class(e, pl, c, start[c], start[c + 1], cost, rcost);
		stop = s < stop ? s : stop;
		tabbed[c] = plan_tab(pl, c) != NULL;
	}
	uint32_t j = 0;
	if (bfp_encoding_has_model(pl->enc)) {
		/* No class headers here, so the size only grows with the prefix:
		 * each change's class totals, and its count, grow; a run that
		 * closes moves its open bits into the totals; a table-coded
		 * change whose sign the rANS state carries adds a bit less to
		 * the rANS part, and its sign was counted in its class's bits.
		 * The longest prefix that fits: the last change taken off
		 * one at a time (shorten), or a binary search. */
		const prefix_acc all = prefix_sum(e, pl, tabbed, stop, n);
		pl->bits = prefix_total(&all);
		j = stop;
		if (pl->bits > budget_bits)
			j = shorten(e, pl, tabbed, all, stop, budget_bits, n);
		if (j == UINT32_MAX) {
			uint32_t lo = 0, hi = stop; /* fits(lo) or lo == 0; !fits(hi) */
			while (lo + 1 < hi) {
				const uint32_t mid = lo + (hi - lo) / 2;
				if (prefix_bits(e, pl, tabbed, mid, n) <= budget_bits)
					lo = mid;
				else
					hi = mid;
			}
			pl->bits = prefix_bits(e, pl, tabbed, lo, n); /* n for lo */
			j = lo;
		}
	} else {
		/* in frame order, the size of each prefix */
		uint64_t var[BFP_CLASSES];
		uint64_t committed = pl->fbits, vsum = 0, r256 = 0;
		uint32_t nt = 0;
		for (unsigned c = 0; c < BFP_CLASSES; c++) {
			var[c] = count_bits(pl, c, 0);
			vsum += var[c];
		}
		for (; j < stop; j++) {
			const unsigned c = cls[j];
			const uint32_t t = start[c] + n[c];
			const uint32_t x = cost[t], px = n[c] ? cost[t - 1] : 0;
			/* the first change of class c turns the header of class
			 * c + 1, if it has changes, to its other form */
			int64_t adj = 0;
			if (!n[c] && c + 1 < BFP_CLASSES && n[c + 1])
				adj = (int64_t)pl->hbits[1][c + 1] - (int64_t)pl->hbits[0][c + 1];
			n[c]++;
			const uint64_t v =
				count_bits(pl, c, n[c]) + pl->hbits[c && n[c - 1]][c] + CUT_OPEN(x);
			const uint32_t nnt = nt + tabbed[c];
			const uint64_t nr256 = r256 + rcost[t] - (n[c] > 1 ? rcost[t - 1] : 0);
			const uint64_t add = CUT_BITS(x) - CUT_BITS(px);
			if (committed + add + vsum - var[c] + v + (uint64_t)adj +
				    tail_bits(nnt, nr256) >
			    budget_bits) {
				n[c]--;
				break;
			}
			committed += add;
			vsum += v - var[c] + (uint64_t)adj;
			var[c] = v;
			if (adj)
				var[c + 1] += (uint64_t)adj;
			nt = nnt;
			r256 = nr256;
		}
		pl->bits = committed + vsum + tail_bits(nt, r256);
	}
	pl->stuck = j == stop && stop < k;
	for (unsigned c = 0; c < BFP_CLASSES; c++)
		pl->n[c] = n[c];
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

/* A class's gap fields: gr, the level as its zigzag distance from the
 * prediction in EG0, gkr when run-coded. */
static void write_gap_fields(bfp_bw *w, const bfp_seq *gs, unsigned pred)
{
	bfp_bw_put(w, gs->runs, 1);
	bfp_put_eg0(w, zigzag((int32_t)gs->k - (int32_t)pred));
	if (gs->runs)
		bfp_bw_put(w, gs->kr, 4);
}

/* The bit d (1: the default magnitude code) and, if 0, the class's own
 * code, relative to below when not NULL. */
static void write_mag_fields(bfp_bw *w, const bfp_seq *ms, const bfp_seq *mdef,
			     const bfp_seq *below)
{
	int dflt = same_code(ms, mdef);
	bfp_bw_put(w, (unsigned)dflt, 1);
	if (!dflt)
		write_mag_code(w, ms, below);
}

/* A self-contained frame's header fields of a class, after its count. */
static void write_class(bfp_bw *w, const bfp_sparse_plan *pl, unsigned c)
{
	write_gap_fields(w, &pl->gap[c], gk_pred(pl->gk0, c));
	write_mag_fields(w, &pl->mag[c], &pl->mdef, c && pl->n[c - 1] ? &pl->mag[c - 1] : NULL);
}

static void write_tab(bfp_bw *w, const bfp_mtab *t)
{
	bfp_bw_put(w, t->e, 3);
	bfp_bw_put(w, t->sb, 2);
	bfp_put_eg0(w, t->ns - 1u);
	bfp_bw_put(w, t->q[0], 5);
	for (unsigned i = 1; i < t->ns; i++)
		bfp_put_eg0(w, zigzag((int32_t)t->q[i] - (int32_t)t->q[i - 1]));
}

/* The model section of a payload that carries one (FORMAT.md 3.6). */
static void write_model(bfp_bw *w, const bfp_model *m)
{
	bfp_bw_put(w, (unsigned)(m->gk0 + 64), 7);
	write_mag_code(w, &m->mdef, NULL);
	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		bfp_bw_put(w, m->kc[c], 4);
		write_gap_fields(w, &m->gap[c], gk_pred(m->gk0, c));
		bfp_bw_put(w, m->tab[c].on, 1);
		if (m->tab[c].on)
			write_tab(w, &m->tab[c]);
		else
			write_mag_fields(w, &m->mag[c], &m->mdef, model_below(m, c));
	}
}

/* Models: the rANS part of the payload for the table-coded
 * magnitudes (in decoding order: by class, then position), coded
 * backwards from a state that holds the signs the bit stream left out.
 * Returns its length. */
static size_t write_tail(const bfp_enc *e, const bfp_sparse_plan *pl, uint32_t signs,
			 uint8_t *tail)
{
	const uint8_t *const sym = e->chg_sym;
	uint32_t x = BFP_RANS_L + signs;
	uint8_t *out = tail;
	for (unsigned c = BFP_CLASSES; c-- > 0;) {
		if (!plan_tab(pl, c))
			continue;
		const uint64_t *put = pl->rt->u.put[c];
		for (uint32_t i = pl->start[c] + pl->n[c]; i-- > pl->start[c];)
			bfp_rans_put(&x, &out, put[sym[i]]);
	}
	bfp_st32(out, x);
	return (size_t)(out - tail) + 4;
}

/* bfp_sparse_write's loops over a class's changes order[a..b): its gaps
 * (with runs of zero gaps or without), then its magnitudes: table-coded,
 * all one (signs only), or in their own code with runs of the common one
 * or without. Each is inlined with its kind fixed, so that no loop tests
 * it per change. */
static inline __attribute__((always_inline)) void
write_gaps_t(bfp_bw *w, const uint32_t *rank, const uint32_t *order, uint32_t a, uint32_t b,
	     const bfp_seq *gs, const bfp_gcode *gc, const int runs)
{
	int due = 1;
	for (uint32_t t = a; t < b; t++) {
		uint32_t g = rank[order[t]];
		if (!runs) {
			put_gc(w, g, gc);
			continue;
		}
		if (due) {
			uint32_t r = 0;
			while (t + r < b && rank[order[t + r]] == 0)
				r++;
			bfp_put_rice(w, r, gs->kr);
			due = 0;
		}
		if (g != 0) {
			put_gc(w, g - 1, gc);
			due = 1;
		}
	}
}

/* signs only (with runs too): 56 a put */
static inline __attribute__((always_inline)) void
write_signs_t(bfp_bw *w, const uint16_t *delta, const uint32_t *order, uint32_t a, uint32_t b)
{
	uint64_t acc = 0;
	unsigned nb = 0;
	for (uint32_t t = a; t < b; t++) {
		acc |= (uint64_t)(delta[order[t]] >> 15) << nb;
		if (++nb == 56) {
			bfp_bw_put_clean(w, acc, 56);
			acc = 0;
			nb = 0;
		}
	}
	bfp_bw_put_clean(w, acc, nb);
}

/* sign (unless the rANS state carries it), escape, raw bits; the symbol
 * goes to the tail */
static inline __attribute__((always_inline)) void
write_tab_t(bfp_bw *w, const uint16_t *delta, const uint32_t *order, uint32_t a, uint32_t b,
	    const bfp_mtab *tab, uint32_t *ntabp, uint32_t *signsp)
{
	uint32_t ntab = *ntabp, signs = *signsp;
	for (uint32_t t = a; t < b; t++) {
		uint16_t d = delta[order[t]];
		unsigned m = bfp_mag(d), sign = ((int16_t)d < 0) ? 1u : 0u;
		unsigned nraw;
		uint32_t raw;
		const unsigned s = bfp_tab_sym(m, tab->e, tab->sb, &nraw, &raw),
			       top = tab->ns - 1u;
		const unsigned in_state = ntab < BFP_RANS_SIGNS;
		if (in_state)
			signs |= sign << ntab;
		ntab++;
		if (BFP_LIKELY(s < top)) { /* sign and raw bits in one put */
			bfp_bw_put_clean(w, in_state ? raw : sign | raw << 1, nraw + !in_state);
			continue;
		}
		if (!in_state)
			bfp_bw_put(w, sign, 1);
		bfp_put_eg0(w, s - top);
		bfp_bw_put(w, raw, nraw);
	}
	*ntabp = ntab;
	*signsp = signs;
}

/* in the class's own code (not all one), with runs of the common
 * magnitude or without */
static inline __attribute__((always_inline)) void
write_mags_t(bfp_bw *w, const uint16_t *delta, const uint32_t *order, uint32_t a, uint32_t b,
	     const bfp_seq *ms, const int runs)
{
	int due = 1;
	for (uint32_t t = a; t < b; t++) {
		uint16_t d = delta[order[t]];
		unsigned m = bfp_mag(d), sign = ((int16_t)d < 0) ? 1u : 0u;
		if (runs && due) {
			uint32_t r = 0;
			while (t + r < b && bfp_mag(delta[order[t + r]]) == ms->common)
				r++;
			bfp_put_rice(w, r, ms->kr);
			due = 0;
		}
		bfp_bw_put(w, sign, 1);
		if (!runs || m != ms->common) {
			put_eg(w, mag_other(ms, m), ms->k);
			due = 1;
		}
	}
}

/* Write a run-coded or plain sequence of symbols (FORMAT.md 3.4-3.6). */
size_t bfp_sparse_write(const bfp_enc *e, const bfp_sparse_plan *pl, bfp_bw *wout,
			uint8_t *tail)
{
	const uint32_t *const rank = CHG_RANK(e);
	const uint16_t *const delta = CHG_DELTA(e);
	const uint32_t *order = e->chg_order;
	const int modelled = plan_modelled(pl);
	uint32_t ntab = 0, signs = 0;

	if (bfp_encoding_carries_model(pl->enc)) {
		write_model(wout, pl->model);
	} else if (bfp_encoding_refers(pl->enc)) {
		bfp_put_eg0(wout, pl->dref - 1);
	} else { /* self-contained: count order, gap level base, default code */
		bfp_bw_put(wout, pl->kn, 3);
		bfp_bw_put(wout, (unsigned)(pl->gk0 + 64), 7);
		write_mag_code(wout, &pl->mdef, NULL);
	}
	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		put_eg(wout, pl->n[c], count_order(pl, c));
		if (pl->n[c] && !modelled)
			write_class(wout, pl, c);
	}
	/* the changes through a local writer: nothing else sees its address,
	 * so its fields stay in registers (the output bytes cannot alias it) */
	bfp_bw wl = *wout, *const w = &wl;
	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		const bfp_seq *gs = &pl->gap[c], *ms = &pl->mag[c];
		uint32_t a = pl->start[c], b = a + pl->n[c];
		if (gs->runs)
			write_gaps_t(w, rank, order, a, b, gs, &pl->gc[c], 1);
		else
			write_gaps_t(w, rank, order, a, b, gs, &pl->gc[c], 0);
		switch (mag_mode(pl, c)) {
		case MAG_TAB:
			write_tab_t(w, delta, order, a, b, plan_tab(pl, c), &ntab, &signs);
			break;
		case MAG_ALL:
			write_signs_t(w, delta, order, a, b);
			break;
		case MAG_PLAIN:
			write_mags_t(w, delta, order, a, b, ms, 0);
			break;
		default:
			write_mags_t(w, delta, order, a, b, ms, 1);
		}
	}
	*wout = wl;
	return ntab ? write_tail(e, pl, signs, tail) : 0;
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

/* A class's gap fields (write_gap_fields); 0 if invalid. */
static int parse_gap_fields(bfp_br *r, unsigned pred, bfp_seq *gs)
{
	gs->runs = (uint8_t)bfp_br_get(r, 1);
	int64_t g = (int64_t)pred + unzigzag(bfp_get_eg0(r));
	if (r->err || g < 0 || g > (int64_t)LEVEL_MAX)
		return 0;
	gs->k = (uint8_t)g;
	if (gs->runs)
		gs->kr = (uint8_t)bfp_br_get(r, 4);
	return !r->err;
}

/* The bit d and, if 0, the class's own magnitude code (write_mag_fields). */
static int parse_mag_fields(bfp_br *r, const bfp_seq *mdef, const bfp_seq *below, bfp_seq *ms)
{
	if (bfp_br_get(r, 1)) {
		*ms = *mdef;
		return !r->err;
	}
	return parse_mag_code(r, below, ms);
}

/* A self-contained frame's class header after the count; prev: the
 * magnitude code of class c - 1 if it has changes, else NULL. */
static int parse_class(bfp_br *r, int gk0, const bfp_seq *mdef, const bfp_seq *prev,
		       unsigned c, bfp_seq *gs, bfp_seq *ms)
{
	return parse_gap_fields(r, gk_pred(gk0, c), gs) && parse_mag_fields(r, mdef, prev, ms);
}

/* A magnitude table (write_tab); 0 when invalid: e above 6, sb above 2 or
 * above e, more symbols than the shape has, a weight outside 0..29, or
 * weights whose frequencies do not work out (FORMAT.md 3.6). */
static int parse_tab(bfp_br *r, bfp_mtab *t)
{
	uint16_t f[BFP_TAB_SYMS];
	t->on = 1;
	t->e = (uint8_t)bfp_br_get(r, 3);
	t->sb = (uint8_t)bfp_br_get(r, 2);
	if (r->err || t->e > BFP_TAB_EMAX || t->sb > BFP_TAB_SBMAX || t->sb > t->e)
		return 0;
	uint32_t ns1 = bfp_get_eg0(r);
	if (r->err || ns1 >= bfp_tab_nsym(t->e, t->sb))
		return 0;
	t->ns = (uint8_t)(ns1 + 1);
	int64_t q = bfp_br_get(r, 5);
	for (unsigned i = 0; i < t->ns; i++) {
		if (i)
			q += unzigzag(bfp_get_eg0(r));
		if (r->err || q < 0 || q > (int64_t)BFP_TAB_QMAX)
			return 0;
		t->q[i] = (uint8_t)q;
	}
	return bfp_tab_freqs(t, f);
}

/* The gaps of a class with n changes (FORMAT.md 3.4); 0 if
 * corrupt. Separate functions with a local reader, so that the reader's
 * fields stay in registers; one per kind of level. */
static inline __attribute__((always_inline)) int read_gaps_t(bfp_br *rd, const bfp_seq *gs,
							     uint32_t n, uint32_t len,
							     uint32_t *gap, uint32_t room,
							     const int golomb)
{
	bfp_br rl = *rd, *r = &rl;
	const unsigned kr = gs->kr;
	bfp_gcode gc;
	gcode_of(gs->k, &gc);
	if (!gs->runs) {
		for (uint32_t j = 0; j < n; j++) {
			uint64_t g = get_gc(r, &gc, golomb);
			/* a gap can never reach past the range (FORMAT.md 3.4) */
			if (r->err || g >= len)
				return 0;
			gap[j] = (uint32_t)g;
		}
		*rd = rl;
		return 1;
	}
	/* run by run: a run of zero gaps, then (unless the class ends) a
	 * gap of one or more */
	for (uint32_t j = 0; j < n;) {
		const uint32_t run = bfp_get_rice(r, kr);
		if (r->err || run > n - j || (run && !len))
			return 0;
		if (run <= 16 && room - j >= 16) {
			BFP_MEMSET(gap + j, 0, 16 * sizeof(*gap));
		} else {
			for (uint32_t i = 0; i < run; i++)
				gap[j + i] = 0;
		}
		j += run;
		if (j == n)
			break;
		uint64_t g = get_gc(r, &gc, golomb) + 1;
		if (r->err || g >= len)
			return 0;
		gap[j++] = (uint32_t)g;
	}
	*rd = rl;
	return 1;
}

static __attribute__((noinline)) int read_gaps_rice(bfp_br *rd, const bfp_seq *gs, uint32_t n,
						    uint32_t len, uint32_t *gap, uint32_t room)
{
	return read_gaps_t(rd, gs, n, len, gap, room, 0);
}

static __attribute__((noinline)) int read_gaps_golomb(bfp_br *rd, const bfp_seq *gs, uint32_t n,
						      uint32_t len, uint32_t *gap, uint32_t room)
{
	return read_gaps_t(rd, gs, n, len, gap, room, 1);
}

/* room (>= n): the entries of gap that may be written */
static int read_gaps(bfp_br *rd, const bfp_seq *gs, uint32_t n, uint32_t len, uint32_t *gap,
		     uint32_t room)
{
	return lv_golomb(gs->k) ? read_gaps_golomb(rd, gs, n, len, gap, room)
				: read_gaps_rice(rd, gs, n, len, gap, room);
}

/* The magnitude a non-common change codes (FORMAT.md 3.4); 0 if
 * corrupt. */
static inline uint32_t read_mag(bfp_br *r, const bfp_seq *ms)
{
	uint32_t v = get_eg(r, ms->k);
	if (r->err)
		return 0;
	return mag_unfold((uint64_t)v + ms->runs, ms->common, ms->down);
}

/* cnt (<= 32) steps of magnitude m from cnt sign bits; 0 if one of them
 * is +32768 (FORMAT.md 3.2: written as -32768). Writes 32 entries when
 * room allows, so that the loop has no branch on cnt. */
static inline int put_signs(uint16_t *step, uint32_t room, uint32_t bits, unsigned cnt,
			    uint32_t m)
{
	const uint16_t pos = bfp_signed_step(0, m), flip = (uint16_t)(pos ^ bfp_signed_step(1, m));
	if (m >= 32768u && bits != (uint32_t)((1ull << cnt) - 1))
		return 0;
	if (room >= 32) {
		typedef uint16_t v8u16 __attribute__((vector_size(16)));
		const v8u16 lo = {1, 2, 4, 8, 16, 32, 64, 128};
		const v8u16 hi = lo << 8;
		for (unsigned q = 0; q < 4; q++) {
			const uint16_t half = (uint16_t)(bits >> (q / 2 * 16));
			v8u16 b = {half, half, half, half, half, half, half, half};
			v8u16 neg = (v8u16)((b & ((q & 1) ? hi : lo)) != 0);
			v8u16 v = (v8u16){pos, pos, pos, pos, pos, pos, pos, pos} ^
				  ((v8u16){flip, flip, flip, flip, flip, flip, flip, flip} & neg);
			BFP_MEMCPY(step + 8 * q, &v, sizeof(v));
		}
	} else {
		for (unsigned i = 0; i < cnt; i++)
			step[i] = bfp_signed_step((bits >> i) & 1u, m);
	}
	return 1;
}

/* cnt steps of magnitude m from the next cnt bits (signs); 0 if corrupt */
static inline int read_signs(bfp_br *r, uint16_t *step, uint32_t room, uint32_t cnt, uint32_t m)
{
	while (cnt) {
		const unsigned t = cnt < 32 ? cnt : 32;
		if (!put_signs(step, room, bfp_br_get(r, t), t, m))
			return 0;
		step += t;
		room -= t;
		cnt -= t;
	}
	return !r->err;
}

/* The steps of a class with n changes; 0 if corrupt. room (>= n): the
 * entries of step that may be written. A class's changes go run by run:
 * the signs of a run of the common magnitude are read together. */
static __attribute__((noinline)) int read_steps(bfp_br *rd, const bfp_seq *ms,
						uint32_t n, uint16_t *step, uint32_t room)
{
	bfp_br rl = *rd, *r = &rl;
	if (ms->all) {
		if (!read_signs(r, step, room, n, ms->common))
			return 0;
		*rd = rl;
		return 1;
	}
	for (uint32_t j = 0; j < n;) {
		uint32_t run = 0;
		if (ms->runs) {
			run = bfp_get_rice(r, ms->kr);
			if (r->err || run > n - j)
				return 0;
			if (!read_signs(r, step + j, room - j, run, ms->common))
				return 0;
			j += run;
			if (j == n)
				break;
		}
		unsigned sign = bfp_br_get(r, 1);
		uint32_t m = read_mag(r, ms);
		/* FORMAT.md 3.2: +32768 is written as -32768; no branch on
		 * the sign */
		if ((m == 0) | ((m >= 32768u) & (sign ^ 1u)))
			return 0;
		step[j++] = bfp_signed_step(sign, m);
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
	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		m->kc[c] = (uint8_t)bfp_br_get(r, 4);
		if (!parse_gap_fields(r, gk_pred(m->gk0, c), &m->gap[c]))
			return 0;
		if (bfp_br_get(r, 1)) {
			if (!parse_tab(r, &m->tab[c]))
				return 0;
			m->mag[c] = m->mdef;
		} else if (!parse_mag_fields(r, &m->mdef, model_below(m, c), &m->mag[c])) {
			return 0;
		}
	}
	return !r->err;
}

/* The steps of a table-coded class with n changes (FORMAT.md 3.6); 0
 * if corrupt. Symbols come from the rANS part a; while fewer than
 * BFP_RANS_SIGNS table-coded changes came before, a change's sign is
 * left for the final state (its step is stored positive, its index in
 * defer) and is not in the bit stream. */
static __attribute__((noinline)) int read_steps_tab(bfp_br *rd, bfp_rd *a, const bfp_mtab *t,
						    const bfp_rtab *rt, unsigned c, uint32_t n,
						    uint16_t *step, uint32_t first, uint32_t *ntab,
						    uint32_t *defer)
{
	bfp_br rl = *rd, *r = &rl;
	bfp_rd al = *a;
	const unsigned top = t->ns - 1u, nsym = bfp_tab_nsym(t->e, t->sb);
	const uint8_t *slot = rt->u.slot[c];
	const uint16_t *f = rt->f[c], *cu = rt->c[c];
	uint32_t nt = *ntab;
	for (uint32_t j = 0; j < n; j++) {
		unsigned sign = 0;
		if (nt < BFP_RANS_SIGNS)
			defer[nt] = first + j;
		else
			sign = bfp_br_get(r, 1);
		nt++;
		unsigned s = bfp_rans_get(&al, slot, f, cu), nraw;
		if (s == top) {
			uint32_t x = bfp_get_eg0(r);
			if (r->err || x >= nsym - s)
				return 0;
			s += x;
		}
		uint32_t m = bfp_tab_base(s, t->e, t->sb, &nraw);
		m += bfp_br_get(r, nraw);
		/* FORMAT.md 3.2: +32768 is written as -32768 (deferred signs
		 * are checked with the final state); no branch on the sign */
		const unsigned may = sign | (nt <= BFP_RANS_SIGNS); /* 32768 allowed */
		if (m + 1u - may > 32768u)
			return 0;
		step[j] = bfp_signed_step(sign, m);
	}
	if (r->err || al.err)
		return 0;
	*rd = rl;
	*a = al;
	*ntab = nt;
	return 1;
}

/* Stats: the bits n table-coded magnitudes cost in the rANS part (their
 * symbols' costs, rounded). */
static uint64_t tab_value_bits(const bfp_mtab *t, const uint16_t *cost, const uint16_t *step,
			       uint32_t n)
{
	uint64_t r256 = 0;
	uint8_t sym;
	for (uint32_t j = 0; j < n; j++)
		(void)tab_bits_of(t, cost, bfp_mag(step[j]), &sym, &r256);
	return (r256 + 128) / 256;
}

/* Encodings 9 and 10: the rANS part ends the payload with its state. */
static int tail_open(const bfp_br *r, bfp_rd *a)
{
	if (r->len < 4)
		return 0;
	a->buf = r->buf;
	a->p = r->len - 4;
	a->x = bfp_ld32(r->buf + a->p);
	a->err = 0;
	return a->x >= BFP_RANS_L && a->x < 256u * BFP_RANS_L;
}

/* ... and decodes back to the state it started from: BFP_RANS_L plus the
 * signs of the first nt (at most BFP_RANS_SIGNS) table-coded changes,
 * which then go to their steps. */
static int tail_close(const bfp_rd *a, uint32_t nt, const uint32_t *defer, uint16_t *steps)
{
	const uint32_t d = nt < BFP_RANS_SIGNS ? nt : BFP_RANS_SIGNS;
	if (a->err || a->x < BFP_RANS_L || a->x - BFP_RANS_L >= (1u << d))
		return 0;
	const uint32_t signs = a->x - BFP_RANS_L;
	for (uint32_t i = 0; i < d; i++) {
		uint16_t *st = &steps[defer[i]];
		if ((signs >> i) & 1)
			*st = (uint16_t)(0x10000u - *st);
		else if (*st == 0x8000u) /* +32768 */
			return 0;
	}
	return 1;
}

bfp_status bfp_sparse_parse(bfp_br *rd, unsigned enc, bfp_model *model, bfp_rtab *rt,
			    uint32_t len, uint32_t start[BFP_CLASSES + 1], uint32_t *gaps,
			    uint16_t *steps, bfp_frame_stats *st, size_t *tail)
{
	/* a local reader: its fields stay in registers (the stores to gaps
	 * and steps could alias the caller's) */
	bfp_br rl = *rd, *r = &rl;
	uint32_t n[BFP_CLASSES];
	bfp_seq gs[BFP_CLASSES], ms[BFP_CLASSES], mdef;
	uint64_t total = 0, t0;
	unsigned kn = 0;
	int gk0 = 0;
	const int modelled = bfp_encoding_has_model(enc);
	uint32_t nt = 0, ntab = 0, defer[BFP_RANS_SIGNS];
	uint64_t rbits = 0; /* stats: bits the rANS part's symbols and signs cost */
	bfp_rd a = {0};

	BFP_MEMSET(gs, 0, sizeof(gs));
	BFP_MEMSET(ms, 0, sizeof(ms));
	BFP_MEMSET(&mdef, 0, sizeof(mdef));
	*tail = 0;
	if (bfp_encoding_carries_model(enc)) {
		BFP_CHECK(bfp_model_parse(r, model), BFP_E_CORRUPT);
		bfp_model_tables(model, rt, 0);
	}
	if (!modelled) { /* self-contained: count order, gap level base, default code */
		kn = bfp_br_get(r, 3);
		gk0 = (int)bfp_br_get(r, 7) - 64;
		BFP_CHECK(parse_mag_code(r, NULL, &mdef), BFP_E_CORRUPT);
	}
	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		t0 = bfp_br_tell(r);
		n[c] = get_eg(r, modelled ? model->kc[c] : kn);
		total += n[c];
		BFP_CHECK(!r->err && total <= BFP_CHANGES_MAX && total <= len,
			  BFP_E_CORRUPT);
		if (n[c] && modelled) {
			gs[c] = model->gap[c];
			ms[c] = model->mag[c];
			nt += model->tab[c].on ? n[c] : 0;
		} else if (n[c]) {
			const bfp_seq *prev = c && n[c - 1] ? &ms[c - 1] : NULL;
			BFP_CHECK(parse_class(r, gk0, &mdef, prev, c, &gs[c], &ms[c]), BFP_E_CORRUPT);
		}
		if (st) {
			st->class_changes[c] = n[c];
			st->class_model_bits[c] = (uint32_t)(bfp_br_tell(r) - t0);
		}
	}
	BFP_CHECK(!r->err, BFP_E_CORRUPT);
	BFP_CHECK(!nt || tail_open(r, &a), BFP_E_CORRUPT);
	if (st)
		st->model_bits = (uint32_t)bfp_br_tell(r);
	start[0] = 0;
	for (unsigned c = 0; c < BFP_CLASSES; c++)
		start[c + 1] = start[c] + n[c];

	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		t0 = bfp_br_tell(r);
		BFP_CHECK(read_gaps(r, &gs[c], n[c], len, gaps + start[c],
				    BFP_CHANGES_MAX - start[c]),
			  BFP_E_CORRUPT);
		if (st)
			st->class_position_bits[c] = (uint32_t)(bfp_br_tell(r) - t0);
		t0 = bfp_br_tell(r);
		const uint32_t nt0 = ntab;
		if (modelled && n[c] && model->tab[c].on)
			BFP_CHECK(read_steps_tab(r, &a, &model->tab[c], rt, c, n[c], steps + start[c],
						 start[c], &ntab, defer),
				  BFP_E_CORRUPT);
		else
			BFP_CHECK(read_steps(r, &ms[c], n[c], steps + start[c],
					     BFP_CHANGES_MAX - start[c]),
				  BFP_E_CORRUPT);
		if (st) {
			st->class_value_bits[c] = (uint32_t)(bfp_br_tell(r) - t0);
			if (ntab > nt0) {
				const uint64_t b = tab_value_bits(&model->tab[c], rt->cost[c],
								  steps + start[c], n[c]) +
						   (ntab < BFP_RANS_SIGNS ? ntab : BFP_RANS_SIGNS) -
						   (nt0 < BFP_RANS_SIGNS ? nt0 : BFP_RANS_SIGNS);
				st->class_value_bits[c] += (uint32_t)b;
				rbits += b;
			}
			st->position_bits += st->class_position_bits[c];
			st->value_bits += st->class_value_bits[c];
		}
	}
	if (nt) {
		BFP_CHECK(tail_close(&a, nt, defer, steps), BFP_E_CORRUPT);
		*tail = r->len - a.p;
		/* what the rANS part takes beyond its symbols' costs and the
		 * signs it carries (about the state's 4 bytes less those
		 * signs) goes to the first table-coded class */
		if (st) {
			unsigned c = 0;
			while (!(n[c] && model->tab[c].on))
				c++;
			const int64_t over = (int64_t)*tail * 8 - (int64_t)rbits;
			const int64_t v = (int64_t)st->class_value_bits[c] + over;
			st->value_bits = (uint32_t)((int64_t)st->value_bits - st->class_value_bits[c] +
						    (v > 0 ? v : 0));
			st->class_value_bits[c] = (uint32_t)(v > 0 ? v : 0);
		}
	}
	if (st)
		st->n_changes = (uint32_t)total;
	*rd = rl;
	return BFP_OK;
}
