/*
 * sparse.h: the sparse payloads of FORMAT.md 3.4-3.6: per-class gap and
 * magnitude sequences, each plain or run-coded, with their codes in the
 * frame (self-contained) or in a model a frame carries for later ones;
 * planning and writing on the encoder side, parsing on the decoder side.
 */
#ifndef BFP_SPARSE_H
#define BFP_SPARSE_H

#include "internal.h"
#include "rans.h"

/* How one per-class sequence is coded. */
typedef struct bfp_seq {
	uint8_t runs;    /* 1: runs of the common symbol, then the others */
	uint8_t k;       /* parameter of the code of the other symbols: for
			    gaps the level of FORMAT.md 3.1, for magnitudes
			    the Exp-Golomb order */
	uint8_t kr;      /* Rice parameter of run lengths (runs == 1) */
	uint8_t all;     /* magnitudes: every one is the common one */
	uint8_t down;    /* magnitudes: fold below the common one first */
	uint16_t common; /* magnitudes: the common magnitude C, the centre
			    of the others */
} bfp_seq;

/* A gap level's code (FORMAT.md 3.1), worked out once per class. */
typedef struct bfp_gcode {
	uint8_t k, s1, s2;
	uint32_t mul;
	uint64_t m, cut;
} bfp_gcode;

/* A model (FORMAT.md 3.6): the codes of every class, carried by a frame
 * of BFP_ENC_SPARSE_MODEL for itself and the frames of
 * BFP_ENC_SPARSE_REF that refer to it. */
typedef struct bfp_model {
	int8_t gk0;      /* gap levels predicted as gk0 + 2c */
	bfp_seq mdef;    /* the default magnitude code */
	bfp_seq gap[BFP_CLASSES];
	bfp_seq mag[BFP_CLASSES];
	uint8_t kc[BFP_CLASSES];   /* Exp-Golomb orders of the counts */
	bfp_mtab tab[BFP_CLASSES]; /* magnitude tables (tab[c].on) */
} bfp_model;

typedef struct bfp_sparse_plan {
	uint8_t enc;     /* BFP_ENC_SPARSE, _SPARSE_MODEL or _SPARSE_REF */
	uint8_t kn;      /* self-contained: Exp-Golomb order of the class counts */
	int8_t gk0;      /* self-contained: gap level of class c predicted
			    as gk0 + 2c */
	bfp_seq mdef;    /* self-contained: the default magnitude code */
	uint32_t fbits;  /* bits before the first class count */
	uint32_t n[BFP_CLASSES];
	/* bfp_sparse_cut: where each class's changes start in e->chg_order
	 * (the first n[c] of them are the frame's) */
	uint32_t start[BFP_CLASSES + 1];
	/* class header bits after its count, [0] when the class below has no
	 * changes, [1] when it has (self-contained plans) */
	uint16_t hbits[2][BFP_CLASSES];
	bfp_seq gap[BFP_CLASSES];
	bfp_seq mag[BFP_CLASSES];
	bfp_gcode gc[BFP_CLASSES]; /* the gap codes of gap[].k */
	const bfp_model *model; /* modelled plans: the codes come from it */
	const bfp_rtab *rt;     /* ... and the model's tables */
	uint64_t mbits[BFP_CLASSES]; /* bfp_sparse_plan_make: estimated bits
					of each class's magnitudes */
	uint64_t gbits[BFP_CLASSES]; /* ... and of its gaps */
	uint32_t dref;   /* BFP_ENC_SPARSE_REF: frames back to the model's frame */
	uint64_t bits;
	uint8_t stuck;   /* bfp_sparse_cut stopped at a change the model's
			    codes cannot say (a class whose magnitudes were
			    all one when the model was planned) */
} bfp_sparse_plan;

/* Choose codes for the first k gathered changes of e (cost model over
 * per-class statistics) for a self-contained frame; sizes come from
 * bfp_sparse_cut. */
void bfp_sparse_plan_make(const bfp_enc *e, uint32_t k, bfp_sparse_plan *pl);

/* The model (FORMAT.md 3.6) for the first k gathered changes of e and
 * their self-contained plan pl: pl's codes (for classes without changes
 * a plain gap code at the predicted level and the default magnitude
 * code), count orders for frames of budget_bits, and magnitude tables
 * where they pay. */
void bfp_model_from_plan(const bfp_enc *e, uint32_t k, const bfp_sparse_plan *pl,
			 uint64_t budget_bits, bfp_model *m);

/* Build the tables of a model's table-coded classes. */
void bfp_model_tables(const bfp_model *m, bfp_rtab *rt, int encoder);

/* Bits of m's section at the start of a payload that carries it. */
unsigned bfp_model_bits(const bfp_model *m);

/* A plan for BFP_ENC_SPARSE_MODEL (m carried; dref 0) or
 * BFP_ENC_SPARSE_REF (dref frames back to the frame that carried m) of
 * the first k gathered changes of e: the codes are m's, rt its tables. */
void bfp_sparse_plan_model(const bfp_enc *e, uint32_t k, unsigned enc,
			   const bfp_model *m, const bfp_rtab *rt, uint32_t dref,
			   bfp_sparse_plan *pl);

/* Parse a model section (FORMAT.md 3.6); 0 if corrupt. */
int bfp_model_parse(bfp_br *r, bfp_model *m);

/* Largest prefix of the first k changes whose payload, with pl's codes,
 * fits budget_bits (exact count) and that pl's codes can say; sets pl->n,
 * pl->bits and pl->stuck for it, and groups the changes by class in
 * e->chg_order (pl->start), with the rANS symbol of each table-coded one
 * in e->chg_sym, for bfp_sparse_write. */
uint32_t bfp_sparse_cut(bfp_enc *e, uint32_t k, bfp_sparse_plan *pl,
			uint64_t budget_bits);

/* Write the payload of the changes bfp_sparse_cut took, with pl, as it
 * left them (pl->n, pl->start, e->chg_order, e->chg_sym):
 * the bit stream to w and, for modelled plans, the rANS part that
 * follows it (after padding) to tail; returns the rANS part's length. */
size_t bfp_sparse_write(const bfp_enc *e, const bfp_sparse_plan *pl, bfp_bw *w,
			uint8_t *tail);

/* Parse a sparse payload of encoding enc into per-class gaps and steps
 * (grouped by class: start[c] .. start[c+1]). Checks every rule of
 * FORMAT.md 3.4-3.6 that does not need the base values.
 * BFP_ENC_SPARSE_MODEL: the model section is parsed into *model and its
 * tables built in *rt; BFP_ENC_SPARSE_REF: r is past the frame's model
 * reference and *model (*rt) holds the model it refers to. *tail gets the
 * length of the rANS part at the payload's end (modelled frames; else 0):
 * the bit stream ends before it. st may be NULL; else bits are counted. */
bfp_status bfp_sparse_parse(bfp_br *r, unsigned enc, bfp_model *model, bfp_rtab *rt,
			    uint32_t len, uint32_t start[BFP_CLASSES + 1], uint32_t *gaps,
			    uint16_t *steps, bfp_frame_stats *st, size_t *tail);

static inline unsigned bfp_mag(uint16_t step)
{
	int16_t s = (int16_t)step;
	return s < 0 ? (unsigned)(-(int32_t)s) : (unsigned)s;
}

#endif
