/*
 * sparse.h: the sparse payloads of FORMAT.md 3.4 (encoding 1) and 3.8
 * (encoding 5): per-class gap and magnitude sequences, each plain or
 * run-coded; planning and writing on the encoder side, parsing on the
 * decoder side. One place for the rules of both.
 */
#ifndef BFP_SPARSE_H
#define BFP_SPARSE_H

#include "internal.h"

/* How one per-class sequence is coded. */
typedef struct bfp_seq {
	uint8_t runs;    /* 1: runs of the common symbol, then the others */
	uint8_t k;       /* parameter of the code of the other symbols */
	uint8_t kr;      /* Rice parameter of run lengths (runs == 1) */
	uint8_t all;     /* encoding 5 magnitudes: every one is the common one */
	uint8_t down;    /* encoding 5 magnitudes: fold below the common one first */
	uint16_t common; /* magnitudes: the common magnitude M (runs == 1);
			    in encoding 5 also the centre of the others */
} bfp_seq;

typedef struct bfp_sparse_plan {
	uint8_t v2;      /* 1: encoding 5, 0: encoding 1 */
	uint8_t kn;      /* encoding 5: Exp-Golomb order of the class counts */
	int8_t gk0;      /* encoding 5: gap parameter of class c predicted as gk0 + c */
	bfp_seq mdef;    /* encoding 5: the default magnitude code */
	uint32_t fbits;  /* bits before the first class count */
	uint32_t n[BFP_CLASSES];
	uint16_t hbits[BFP_CLASSES]; /* class header bits after its count */
	bfp_seq gap[BFP_CLASSES];
	bfp_seq mag[BFP_CLASSES];
	uint64_t bits;
} bfp_sparse_plan;

/* Choose codes for the first k gathered changes of e (cost model over
 * per-class statistics) for encoding 5 (v2) or 1; sizes come from
 * bfp_sparse_cut. */
void bfp_sparse_plan_make(const bfp_encoder *e, uint32_t k, int v2, bfp_sparse_plan *pl);

/* Largest prefix of the first k changes whose payload, with pl's codes,
 * fits budget_bits (exact count); sets pl->n and pl->bits for it. */
uint32_t bfp_sparse_cut(const bfp_encoder *e, uint32_t k, bfp_sparse_plan *pl,
			uint64_t budget_bits);

/* Write the payload of the first k changes with pl (pl->n must match). */
void bfp_sparse_write(bfp_encoder *e, uint32_t k, const bfp_sparse_plan *pl,
		      bfp_bw *w);

/* Parse a sparse payload (encoding 5 if v2, else 1) into per-class gaps
 * and steps (grouped by class: start[c] .. start[c+1]). Checks every rule
 * of FORMAT.md 3.4 and 3.8 that does not need the base values. st may be
 * NULL; else bits are accounted. */
bfp_status bfp_sparse_parse(bfp_br *r, int v2, uint32_t len,
			    uint32_t start[BFP_CLASSES + 1], uint32_t *gaps,
			    uint16_t *steps, bfp_frame_stats *st);

static inline unsigned bfp_mag(uint16_t step)
{
	int16_t s = (int16_t)step;
	return s < 0 ? (unsigned)(-(int32_t)s) : (unsigned)s;
}

#endif
