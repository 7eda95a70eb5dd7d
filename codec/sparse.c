/*
 * sparse.c: FORMAT.md 3.4. Per base-exponent class, two sequences are
 * coded: the gaps between changes in the class's rank space, and the step
 * magnitudes. Each is either plain (every symbol coded) or run-coded (runs
 * of a common symbol, then the others), chosen per class and frame by
 * exact size; run coding is what brings high-rate classes (most gaps 0)
 * and single-step-dominated magnitudes well under one bit per symbol.
 */
#include "sparse.h"

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
	uint64_t gsum, bigsum;
	uint32_t gzero;
	uint32_t mhist[17]; /* magnitudes 1..16; [0] counts the larger ones */
} cls_acc;

/* Bits of the magnitudes of one class coded with Exp-Golomb order k:
 * plain (M == 0: v = m - 1) or the others of run mode (v = m-1 / m-2).
 * Exact for magnitudes up to 16, the mean for larger ones. */
static uint64_t eg_cost(const cls_acc *x, unsigned M, unsigned k)
{
	uint64_t bits = 0;
	for (unsigned m = 1; m <= 16; m++) {
		if (m == M || !x->mhist[m])
			continue;
		uint32_t v = (M == 0 || m < M) ? m - 1 : m - 2;
		bits += (uint64_t)x->mhist[m] * eg_bits(v, k);
	}
	if (x->mhist[0]) {
		uint32_t mean = (uint32_t)(x->bigsum / x->mhist[0]);
		bits += (uint64_t)x->mhist[0] * eg_bits(mean - (M ? 2 : 1), k);
	}
	return bits;
}

static uint64_t eg_best(const cls_acc *x, unsigned M, unsigned *kout)
{
	uint64_t best = UINT64_MAX;
	for (unsigned k = 0; k < 16; k++) {
		uint64_t b = eg_cost(x, M, k);
		if (b < best) {
			best = b;
			*kout = k;
		}
	}
	return best;
}

/* Codes are chosen from per-class statistics with a cost model (one pass
 * over the changes); bfp_sparse_cut then counts the exact size. */
void bfp_sparse_plan_make(const bfp_encoder *e, uint32_t k, bfp_sparse_plan *pl)
{
	cls_acc a[BFP_CLASSES];

	BFP_MEMSET(a, 0, sizeof(a));
	BFP_MEMSET(pl, 0, sizeof(*pl));
	for (uint32_t j = 0; j < k; j++) { /* no data-dependent branches */
		unsigned c = e->chg_class[j];
		uint32_t g = e->chg_rank[j];
		unsigned m = bfp_mag(e->chg_delta[j]);
		unsigned big = m > 16;
		pl->n[c]++;
		a[c].gsum += g;
		a[c].gzero += g == 0;
		a[c].mhist[big ? 0 : m]++;
		a[c].bigsum += big ? m : 0;
	}
	for (unsigned c = 0; c < BFP_CLASSES; c++) {
		const cls_acc *x = &a[c];
		uint32_t n = pl->n[c];
		bfp_seq *gs = &pl->gap[c], *ms = &pl->mag[c];
		unsigned kp, ko, kr;
		if (!n)
			continue;
		uint32_t nz = n - x->gzero;
		/* the nonzero gaps, each less one, sum to gsum - nz */
		uint64_t plain = rice_est(n, x->gsum, 30, &kp);
		uint64_t runs = 5 + rice_est(nz, x->gsum - nz, 30, &ko) +
				rice_est(nz + 1, x->gzero, 30, &kr);
		if (runs < plain) {
			gs->runs = 1;
			gs->k = (uint8_t)ko;
			gs->kr = (uint8_t)kr;
		} else {
			gs->k = (uint8_t)kp;
		}
		unsigned M = 1;
		for (unsigned v = 2; v <= 16; v++)
			if (x->mhist[v] > x->mhist[M])
				M = v;
		plain = eg_best(x, 0, &kp);
		runs = 5 + bfp_eg0_bits(M - 1) + eg_best(x, M, &ko) +
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
