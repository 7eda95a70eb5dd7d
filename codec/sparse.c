/*
 * sparse.c: FORMAT.md 3.4. Per base-exponent class, two sequences are
 * coded: the gaps between changes in the class's rank space, and the step
 * magnitudes. Each is either plain (every symbol coded) or run-coded (runs
 * of a common symbol, then the others), chosen per class and frame by
 * exact size; run coding is what brings high-rate classes (most gaps 0)
 * and single-step-dominated magnitudes well under one bit per symbol.
 */
#include "sparse.h"

#define NCAND 3 /* parameters tried around each guess */

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

/* Other-symbol values: gaps in run mode skip 0; magnitudes skip 0 and,
 * in run mode, the common magnitude M. */
static inline uint32_t gap_other(const bfp_seq *s, uint32_t g)
{
	return s->runs ? g - 1 : g;
}

static inline uint32_t mag_other(const bfp_seq *s, unsigned m)
{
	return (!s->runs || m < s->common) ? m - 1 : m - 2;
}

static inline unsigned header_bits(const bfp_seq *g, const bfp_seq *m)
{
	return 1 + 5 + (g->runs ? 5 : 0) + 1 + 4 +
	       (m->runs ? bfp_eg0_bits(m->common - 1u) + 5 : 0);
}

/* Largest k with 2^k <= mean * 0.7 (about log2(mean ln 2)), bounded. */
static unsigned guess(uint64_t sum, uint64_t cnt, unsigned maxk)
{
	if (cnt == 0)
		return 0;
	uint64_t mean = (sum * 7 / 10) / cnt;
	unsigned k = 0;
	while (k < maxk && (2ull << k) <= mean)
		k++;
	return k;
}

static unsigned lo3(unsigned k, unsigned maxk)
{
	/* first of NCAND candidates centred on k within [0, maxk] */
	if (k == 0)
		return 0;
	if (k + 1 > maxk)
		return maxk - (NCAND - 1);
	return k - 1;
}

typedef struct cls_acc {
	/* pass 1 */
	uint64_t gsum, gnzsum, msum;
	uint32_t gzero, mbig, mhist[17];
	/* pass 2: bits per candidate */
	uint64_t gplain[NCAND], gother[NCAND], grun[NCAND];
	uint64_t mplain[NCAND], mother[NCAND], mrun[NCAND];
	unsigned gp0, go0, gr0, mp0, mo0, mr0; /* first candidate of each */
	uint32_t grun_len, mrun_len;
	uint8_t gopen, mopen;
} cls_acc;

/* Close a run of length r: add its code length for each candidate. */
static inline void close_run(uint64_t *acc, unsigned k0, uint32_t r)
{
	for (unsigned t = 0; t < NCAND; t++)
		acc[t] += bfp_rice_bits(r, k0 + t);
}

static unsigned best_of(const uint64_t *v)
{
	unsigned b = 0;
	for (unsigned t = 1; t < NCAND; t++)
		if (v[t] < v[b])
			b = t;
	return b;
}

void bfp_sparse_plan_make(const bfp_encoder *e, uint32_t k, bfp_sparse_plan *pl)
{
	cls_acc a[BFP_CLASSES];

	BFP_MEMSET(a, 0, sizeof(a));
	BFP_MEMSET(pl, 0, sizeof(*pl));
	for (uint32_t j = 0; j < k; j++) {
		unsigned c = e->chg_class[j];
		uint32_t g = e->chg_rank[j];
		unsigned m = bfp_mag(e->chg_delta[j]);
		pl->n[c]++;
		a[c].gsum += g;
		if (g == 0)
			a[c].gzero++;
		else
			a[c].gnzsum += g - 1;
		a[c].msum += m - 1;
		if (m <= 16)
			a[c].mhist[m]++;
		else
			a[c].mbig++;
	}
	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		cls_acc *x = &a[c];
		uint32_t n = pl->n[c];
		if (!n)
			continue;
		unsigned M = 1;
		for (unsigned v = 2; v <= 16; v++)
			if (x->mhist[v] > x->mhist[M])
				M = v;
		pl->mag[c].common = (uint16_t)M;
		uint32_t nz = n - x->gzero, mo = n - x->mhist[M];
		uint64_t above = x->mbig;
		for (unsigned v = M + 1; v <= 16; v++)
			above += x->mhist[v];
		uint64_t osum = x->msum - (uint64_t)x->mhist[M] * (M - 1) - above;
		x->gp0 = lo3(guess(x->gsum, n, 29), 31);
		x->go0 = lo3(guess(x->gnzsum, nz, 29), 31);
		x->gr0 = lo3(guess(x->gzero, nz + 1, 29), 31);
		x->mp0 = lo3(guess(x->msum, n, 13), 15);
		x->mo0 = lo3(guess(osum, mo, 13), 15);
		x->mr0 = lo3(guess(x->mhist[M], mo + 1, 29), 31);
	}
	/* pass 2: exact bits of each candidate code */
	for (uint32_t j = 0; j < k; j++) {
		unsigned c = e->chg_class[j];
		cls_acc *x = &a[c];
		uint32_t g = e->chg_rank[j];
		unsigned m = bfp_mag(e->chg_delta[j]);
		unsigned M = pl->mag[c].common;
		for (unsigned t = 0; t < NCAND; t++) {
			x->gplain[t] += bfp_rice_bits(g, x->gp0 + t);
			x->mplain[t] += eg_bits(m - 1, x->mp0 + t);
		}
		if (!x->gopen) {
			x->gopen = 1;
			x->grun_len = 0;
		}
		if (g == 0) {
			x->grun_len++;
		} else {
			close_run(x->grun, x->gr0, x->grun_len);
			for (unsigned t = 0; t < NCAND; t++)
				x->gother[t] += bfp_rice_bits(g - 1, x->go0 + t);
			x->gopen = 0;
		}
		if (!x->mopen) {
			x->mopen = 1;
			x->mrun_len = 0;
		}
		if (m == M) {
			x->mrun_len++;
		} else {
			close_run(x->mrun, x->mr0, x->mrun_len);
			uint32_t v = m < M ? m - 1 : m - 2;
			for (unsigned t = 0; t < NCAND; t++)
				x->mother[t] += eg_bits(v, x->mo0 + t);
			x->mopen = 0;
		}
	}
	uint64_t bits = 0;
	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		cls_acc *x = &a[c];
		uint32_t n = pl->n[c];
		bits += bfp_eg0_bits(n);
		if (!n)
			continue;
		if (x->gopen)
			close_run(x->grun, x->gr0, x->grun_len);
		if (x->mopen)
			close_run(x->mrun, x->mr0, x->mrun_len);
		unsigned bp = best_of(x->gplain), bo = best_of(x->gother),
			 br = best_of(x->grun);
		uint64_t plain = x->gplain[bp], runs = x->gother[bo] + x->grun[br] + 5;
		bfp_seq *gs = &pl->gap[c], *ms = &pl->mag[c];
		if (runs < plain) {
			gs->runs = 1;
			gs->k = (uint8_t)(x->go0 + bo);
			gs->kr = (uint8_t)(x->gr0 + br);
			bits += runs - 5;
		} else {
			gs->k = (uint8_t)(x->gp0 + bp);
			bits += plain;
		}
		bp = best_of(x->mplain);
		bo = best_of(x->mother);
		br = best_of(x->mrun);
		plain = x->mplain[bp];
		runs = x->mother[bo] + x->mrun[br] + 5 + bfp_eg0_bits(ms->common - 1u);
		if (runs < plain) {
			ms->runs = 1;
			ms->k = (uint8_t)(x->mo0 + bo);
			ms->kr = (uint8_t)(x->mr0 + br);
			bits += x->mother[bo] + x->mrun[br];
		} else {
			ms->common = 0;
			ms->k = (uint8_t)(x->mp0 + bp);
			bits += plain;
		}
		bits += header_bits(gs, ms) + n; /* n sign bits */
	}
	pl->bits = bits;
}

uint32_t bfp_sparse_cut(const bfp_encoder *e, uint32_t k, bfp_sparse_plan *pl,
			uint64_t budget_bits)
{
	uint32_t n[BFP_CLASSES] = {0}, grun[BFP_CLASSES], mrun[BFP_CLASSES];
	uint8_t gopen[BFP_CLASSES] = {0}, mopen[BFP_CLASSES] = {0};
	uint64_t var[BFP_CLASSES] = {0};
	uint64_t committed = 0, vsum = BFP_CLASSES; /* EG0(0) = 1 bit each */

	for (unsigned c = 0; c < BFP_CLASSES; c++)
		var[c] = 1;
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
		if (!ms->runs) {
			add += eg_bits(m - 1, ms->k);
		} else {
			if (!mopen[c]) {
				mopen[c] = 1;
				mrun[c] = 0;
			}
			if (m == ms->common) {
				mrun[c]++;
			} else {
				add += bfp_rice_bits(mrun[c], ms->kr) + eg_bits(mag_other(ms, m), ms->k);
				mopen[c] = 0;
			}
		}
		n[c]++;
		uint64_t v = bfp_eg0_bits(n[c]) + header_bits(gs, ms) +
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

/* Write a run-coded or plain sequence of symbols (FORMAT.md 3.4). */
void bfp_sparse_write(bfp_encoder *e, uint32_t k, const bfp_sparse_plan *pl,
		      bfp_bw *w)
{
	uint32_t start[BFP_CLASSES + 1], fill[BFP_CLASSES];
	uint32_t *order = e->chg_order;

	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		const bfp_seq *gs = &pl->gap[c], *ms = &pl->mag[c];
		bfp_put_eg0(w, pl->n[c]);
		if (!pl->n[c])
			continue;
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
				bfp_put_rice(w, g - 1, gs->k);
				due = 1;
			}
		}
		due = 1;
		for (uint32_t t = a; t < b; t++) {
			uint16_t d = e->chg_delta[order[t]];
			unsigned m = bfp_mag(d);
			if (ms->runs && due) {
				uint32_t r = 0;
				while (t + r < b && bfp_mag(e->chg_delta[order[t + r]]) == ms->common)
					r++;
				bfp_put_rice(w, r, ms->kr);
				due = 0;
			}
			bfp_bw_put(w, ((int16_t)d < 0) ? 1u : 0u, 1);
			if (!ms->runs || m != ms->common) {
				put_eg(w, mag_other(ms, m), ms->k);
				due = 1;
			}
		}
	}
}

bfp_status bfp_sparse_parse(bfp_br *r, uint32_t len,
			    uint32_t start[BFP_CLASSES + 1], uint32_t *gaps,
			    uint16_t *steps, bfp_frame_stats *st)
{
	uint32_t n[BFP_CLASSES];
	bfp_seq gs[BFP_CLASSES], ms[BFP_CLASSES];
	uint64_t total = 0, t0;

	BFP_MEMSET(gs, 0, sizeof(gs));
	BFP_MEMSET(ms, 0, sizeof(ms));
	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		n[c] = bfp_get_eg0(r);
		total += n[c];
		BFP_CHECK(!r->err && total <= BFP_CHANGES_MAX && total <= len,
			  BFP_E_CORRUPT);
		if (!n[c])
			continue;
		gs[c].runs = (uint8_t)bfp_br_get(r, 1);
		gs[c].k = (uint8_t)bfp_br_get(r, 5);
		if (gs[c].runs)
			gs[c].kr = (uint8_t)bfp_br_get(r, 5);
		ms[c].runs = (uint8_t)bfp_br_get(r, 1);
		ms[c].k = (uint8_t)bfp_br_get(r, 4);
		if (ms[c].runs) {
			uint32_t M = bfp_get_eg0(r);
			BFP_CHECK(!r->err && M < 32768u, BFP_E_CORRUPT);
			ms[c].common = (uint16_t)(M + 1);
			ms[c].kr = (uint8_t)bfp_br_get(r, 5);
		}
	}
	BFP_CHECK(!r->err, BFP_E_CORRUPT);
	if (st)
		st->model_bits = (uint32_t)bfp_br_tell(r);
	start[0] = 0;
	for (unsigned c = 0; c < BFP_CLASSES; c++)
		start[c + 1] = start[c] + n[c];

	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		uint32_t *gap = gaps + start[c];
		uint16_t *step = steps + start[c];
		uint32_t run = 0;
		int due = 1;
		t0 = bfp_br_tell(r);
		for (uint32_t j = 0; j < n[c]; j++) {
			uint64_t g;
			if (!gs[c].runs) {
				g = bfp_get_rice(r, gs[c].k);
			} else {
				if (due) {
					run = bfp_get_rice(r, gs[c].kr);
					BFP_CHECK(!r->err && run <= n[c] - j, BFP_E_CORRUPT);
					due = 0;
				}
				if (run > 0) {
					run--;
					g = 0;
				} else {
					g = (uint64_t)bfp_get_rice(r, gs[c].k) + 1;
					due = 1;
				}
			}
			/* a gap can never reach past the range (FORMAT.md 3.4) */
			BFP_CHECK(!r->err && g < len, BFP_E_CORRUPT);
			gap[j] = (uint32_t)g;
		}
		if (st)
			st->position_bits += (uint32_t)(bfp_br_tell(r) - t0);
		t0 = bfp_br_tell(r);
		due = 1;
		for (uint32_t j = 0; j < n[c]; j++) {
			uint32_t m;
			if (ms[c].runs && due) {
				run = bfp_get_rice(r, ms[c].kr);
				BFP_CHECK(!r->err && run <= n[c] - j, BFP_E_CORRUPT);
				due = 0;
			}
			unsigned sign = bfp_br_get(r, 1);
			if (ms[c].runs && run > 0) {
				run--;
				m = ms[c].common;
			} else {
				uint32_t v = get_eg(r, ms[c].k);
				BFP_CHECK(!r->err && v < 32768u, BFP_E_CORRUPT);
				m = (!ms[c].runs || v + 1 < ms[c].common) ? v + 1 : v + 2;
				BFP_CHECK(m <= 32768u, BFP_E_CORRUPT);
				due = 1;
			}
			/* FORMAT.md 3.2: +32768 is written as -32768 */
			BFP_CHECK(m < 32768u || sign, BFP_E_CORRUPT);
			step[j] = (uint16_t)(sign ? 0x10000u - m : m);
		}
		if (st)
			st->value_bits += (uint32_t)(bfp_br_tell(r) - t0);
	}
	if (st)
		st->n_changes = (uint32_t)total;
	return BFP_OK;
}
