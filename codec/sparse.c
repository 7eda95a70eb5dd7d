/*
 * sparse.c: FORMAT.md 3.4 and 3.8. Per base-exponent class, two sequences
 * are coded: the gaps between changes in the class's rank space, and the
 * step magnitudes. Each is either plain (every symbol coded) or run-coded
 * (runs of a common symbol, then the others), chosen per class and frame
 * by exact size; run coding is what brings high-rate classes (most gaps 0)
 * and single-step-dominated magnitudes well under one bit per symbol.
 * Encoding 5 codes the same sequences with fewer parameter bits (counts in
 * a frame-wide Exp-Golomb order, gap parameters predicted from the class,
 * a default magnitude code, a flag for classes whose magnitudes are all
 * equal) and codes magnitudes by their distance from the common one.
 */
#include "sparse.h"

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
	if (v2)
		return mag_fold(m, s->common, s->down) - s->runs;
	return (!s->runs || m < s->common) ? m - 1 : m - 2;
}

/* Encoding 5: predicted gap parameter of class c, and the bits of gk. */
static inline unsigned gk_pred(int gk0, unsigned c)
{
	int p = gk0 + (int)c;
	return p < 0 ? 0u : (p > 31 ? 31u : (unsigned)p);
}

static inline unsigned gk_bits(unsigned gk, unsigned pred)
{
	return gk == pred ? 1u : (gk + 1 == pred || gk == pred + 1) ? 3u : 7u;
}

/* Encoding 5 magnitude codes: equal (fields that do not apply are 0), and
 * their size: C, runs, all (run-coded), k and down (unless all; down only
 * when there are magnitudes below C), run parameter (run-coded, not all). */
static inline int same_code(const bfp_seq *a, const bfp_seq *b)
{
	return a->runs == b->runs && a->all == b->all && a->k == b->k &&
	       a->down == b->down && a->kr == b->kr && a->common == b->common;
}

static inline unsigned mag_code_bits(const bfp_seq *m)
{
	return bfp_eg0_bits(m->common - 1u) + 1 + m->runs +
	       (m->all ? 0 : 4 + (m->common > 1)) + (m->runs && !m->all ? 4 : 0);
}

/* Bits of a class count. */
static inline unsigned count_bits(const bfp_sparse_plan *pl, uint32_t n)
{
	return pl->v2 ? eg_bits(n, pl->kn) : bfp_eg0_bits(n);
}

/* Bits of class c's header after its count (the class has changes). */
static unsigned class_header_bits(const bfp_sparse_plan *pl, unsigned c)
{
	const bfp_seq *g = &pl->gap[c], *m = &pl->mag[c];
	if (!pl->v2)
		return 1 + 5 + (g->runs ? 5 : 0) + 1 + 4 +
		       (m->runs ? bfp_eg0_bits(m->common - 1u) + 5 : 0);
	return 1 + gk_bits(g->k, gk_pred(pl->gk0, c)) + (g->runs ? 4 : 0) + 1 +
	       (same_code(m, &pl->mdef) ? 0 : mag_code_bits(m));
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
static void plan_frame_v2(bfp_sparse_plan *pl)
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
	best = UINT64_MAX;
	unsigned top = 0;
	pl->mdef.common = 1;
	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		if (!pl->n[c])
			continue;
		int g0 = (int)pl->gap[c].k - (int)c;
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
	pl->fbits = 3 + 6 + mag_code_bits(&pl->mdef);
}

/* Codes are chosen from per-class statistics with a cost model (one pass
 * over the changes); bfp_sparse_cut then counts the exact size. */
void bfp_sparse_plan_make(const bfp_encoder *e, uint32_t k, int v2, bfp_sparse_plan *pl)
{
	cls_acc a[BFP_CLASSES];

	BFP_MEMSET(a, 0, sizeof(a));
	BFP_MEMSET(pl, 0, sizeof(*pl));
	pl->v2 = v2 ? 1 : 0;
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
		uint64_t plain = rice_est(n, x->gsum, 30, &kp);
		uint64_t runs = 5 + rice_est(nz, x->gsum - nz, 30, &ko) +
				rice_est(nz + 1, x->gzero, maxk, &kr);
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
	for (unsigned c = 0; c < BFP_CLASSES; c++)
		if (pl->n[c])
			pl->hbits[c] = (uint16_t)class_header_bits(pl, c);
}

uint32_t bfp_sparse_cut(const bfp_encoder *e, uint32_t k, bfp_sparse_plan *pl,
			uint64_t budget_bits)
{
	uint32_t n[BFP_CLASSES] = {0}, grun[BFP_CLASSES], mrun[BFP_CLASSES];
	uint8_t gopen[BFP_CLASSES] = {0}, mopen[BFP_CLASSES] = {0};
	uint64_t var[BFP_CLASSES];
	const unsigned zero = count_bits(pl, 0);
	uint64_t committed = pl->fbits, vsum = (uint64_t)BFP_CLASSES * zero;
	const int v2 = pl->v2;

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
			add += bfp_rice_bits(g, gs->k);
		} else {
			if (!gopen[c]) {
				gopen[c] = 1;
				grun[c] = 0;
			}
			if (g == 0) {
				grun[c]++;
			} else {
				add += bfp_rice_bits(grun[c], gs->kr) + bfp_rice_bits(g - 1, gs->k);
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
		n[c]++;
		uint64_t v = count_bits(pl, n[c]) + pl->hbits[c] +
			     (gopen[c] ? bfp_rice_bits(grun[c], gs->kr) : 0) +
			     (mopen[c] ? bfp_rice_bits(mrun[c], ms->kr) : 0);
		uint64_t total = committed + add + vsum - var[c] + v;
		if (total > budget_bits) {
			n[c]--;
			break;
		}
		committed += add;
		vsum += v - var[c];
		var[c] = v;
	}
	for (unsigned c = 0; c < BFP_CLASSES; c++)
		pl->n[c] = n[c];
	pl->bits = committed + vsum;
	return j;
}

/* Encoding 5 magnitude code (mag_code_bits). */
static void write_mag_code(bfp_bw *w, const bfp_seq *m)
{
	bfp_put_eg0(w, m->common - 1u);
	bfp_bw_put(w, m->runs, 1);
	if (m->runs)
		bfp_bw_put(w, m->all, 1);
	if (!m->all) {
		bfp_bw_put(w, m->k, 4);
		if (m->common > 1)
			bfp_bw_put(w, m->down, 1);
	}
	if (m->runs && !m->all)
		bfp_bw_put(w, m->kr, 4);
}

/* Encoding 5 header fields of a class, after its count. */
static void write_class_v2(bfp_bw *w, const bfp_sparse_plan *pl, unsigned c)
{
	const bfp_seq *gs = &pl->gap[c], *ms = &pl->mag[c];
	unsigned pred = gk_pred(pl->gk0, c);
	bfp_bw_put(w, gs->runs, 1);
	if (gs->k == pred) {
		bfp_bw_put(w, 1, 1);
	} else if (gs->k + 1u == pred || gs->k == pred + 1) {
		bfp_bw_put(w, 2, 2); /* 0 then 1 */
		bfp_bw_put(w, gs->k < pred, 1);
	} else {
		bfp_bw_put(w, 0, 2);
		bfp_bw_put(w, gs->k, 5);
	}
	if (gs->runs)
		bfp_bw_put(w, gs->kr, 4);
	int dflt = same_code(ms, &pl->mdef);
	bfp_bw_put(w, (unsigned)dflt, 1);
	if (!dflt)
		write_mag_code(w, ms);
}

static void write_class_v1(bfp_bw *w, const bfp_sparse_plan *pl, unsigned c)
{
	const bfp_seq *gs = &pl->gap[c], *ms = &pl->mag[c];
	bfp_bw_put(w, gs->runs, 1);
	bfp_bw_put(w, gs->k, 5);
	if (gs->runs)
		bfp_bw_put(w, gs->kr, 5);
	bfp_bw_put(w, ms->runs, 1);
	bfp_bw_put(w, ms->k, 4);
	if (ms->runs) {
		bfp_put_eg0(w, ms->common - 1u);
		bfp_bw_put(w, ms->kr, 5);
	}
}

/* Write a run-coded or plain sequence of symbols (FORMAT.md 3.4, 3.8). */
void bfp_sparse_write(bfp_encoder *e, uint32_t k, const bfp_sparse_plan *pl,
		      bfp_bw *w)
{
	uint32_t start[BFP_CLASSES + 1], fill[BFP_CLASSES];
	uint32_t *order = e->chg_order;
	const int v2 = pl->v2;

	if (v2) {
		bfp_bw_put(w, pl->kn, 3);
		bfp_bw_put(w, (unsigned)(pl->gk0 + 16), 6);
		write_mag_code(w, &pl->mdef);
	}
	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		if (v2)
			put_eg(w, pl->n[c], pl->kn);
		else
			bfp_put_eg0(w, pl->n[c]);
		if (!pl->n[c])
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
				bfp_put_rice(w, g, gs->k);
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
				bfp_put_rice(w, gap_other(gs, g), gs->k);
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

/* Encoding 5 magnitude code (write_mag_code); 0 when invalid. */
static int parse_mag_code(bfp_br *r, bfp_seq *m)
{
	uint32_t c = bfp_get_eg0(r);
	if (r->err || c >= 32768u)
		return 0;
	m->common = (uint16_t)(c + 1);
	m->runs = (uint8_t)bfp_br_get(r, 1);
	if (m->runs)
		m->all = (uint8_t)bfp_br_get(r, 1);
	if (!m->all) {
		m->k = (uint8_t)bfp_br_get(r, 4);
		if (m->common > 1)
			m->down = (uint8_t)bfp_br_get(r, 1);
	}
	if (m->runs && !m->all)
		m->kr = (uint8_t)bfp_br_get(r, 4);
	return !r->err;
}

/* Encoding 5 class header after the count. */
static int parse_class_v2(bfp_br *r, int gk0, const bfp_seq *mdef, unsigned c,
			  bfp_seq *gs, bfp_seq *ms)
{
	unsigned pred = gk_pred(gk0, c);
	gs->runs = (uint8_t)bfp_br_get(r, 1);
	if (bfp_br_get(r, 1)) {
		gs->k = (uint8_t)pred;
	} else if (bfp_br_get(r, 1)) {
		unsigned down = bfp_br_get(r, 1);
		if ((down && pred == 0) || (!down && pred == 31))
			return 0;
		gs->k = (uint8_t)(down ? pred - 1 : pred + 1);
	} else {
		gs->k = (uint8_t)bfp_br_get(r, 5);
	}
	if (gs->runs)
		gs->kr = (uint8_t)bfp_br_get(r, 4);
	if (bfp_br_get(r, 1))
		*ms = *mdef;
	else if (!parse_mag_code(r, ms))
		return 0;
	return !r->err;
}

static int parse_class_v1(bfp_br *r, bfp_seq *gs, bfp_seq *ms)
{
	gs->runs = (uint8_t)bfp_br_get(r, 1);
	gs->k = (uint8_t)bfp_br_get(r, 5);
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

/* The gaps of a class with n changes (FORMAT.md 3.4, 3.8); 0 if corrupt.
 * Separate functions with a local reader, so that the reader's fields
 * stay in registers. */
static __attribute__((noinline)) int read_gaps(bfp_br *rd, const bfp_seq *gs, uint32_t n,
					       uint32_t len, uint32_t *gap)
{
	bfp_br rl = *rd, *r = &rl;
	uint32_t run = 0;
	int due = 1;
	for (uint32_t j = 0; j < n; j++) {
		uint64_t g;
		if (!gs->runs) {
			g = bfp_get_rice(r, gs->k);
		} else {
			if (due) {
				run = bfp_get_rice(r, gs->kr);
				if (r->err || run > n - j)
					return 0;
				due = 0;
			}
			if (run > 0) {
				run--;
				g = 0;
			} else {
				g = (uint64_t)bfp_get_rice(r, gs->k) + 1;
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

bfp_status bfp_sparse_parse(bfp_br *rd, int v2, uint32_t len,
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

	BFP_MEMSET(gs, 0, sizeof(gs));
	BFP_MEMSET(ms, 0, sizeof(ms));
	BFP_MEMSET(&mdef, 0, sizeof(mdef));
	if (v2) {
		kn = bfp_br_get(r, 3);
		gk0 = (int)bfp_br_get(r, 6) - 16;
		BFP_CHECK(parse_mag_code(r, &mdef), BFP_E_CORRUPT);
	}
	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		t0 = bfp_br_tell(r);
		n[c] = v2 ? get_eg(r, kn) : bfp_get_eg0(r);
		total += n[c];
		BFP_CHECK(!r->err && total <= BFP_CHANGES_MAX && total <= len,
			  BFP_E_CORRUPT);
		if (n[c]) {
			int ok = v2 ? parse_class_v2(r, gk0, &mdef, c, &gs[c], &ms[c])
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
