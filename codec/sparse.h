/*
 * sparse.h: the sparse payloads of FORMAT.md 3.4 (encoding 1), 3.8
 * (encoding 5) and 3.9 (encoding 6): per-class gap and magnitude
 * sequences, each plain or run-coded; planning and writing on the encoder
 * side, parsing on the decoder side. One place for the rules of all three.
 */
#ifndef BFP_SPARSE_H
#define BFP_SPARSE_H

#include "internal.h"
#include "rans.h"

/* How one per-class sequence is coded. */
typedef struct bfp_seq {
	uint8_t runs;    /* 1: runs of the common symbol, then the others */
	uint8_t k;       /* parameter of the code of the other symbols: for
			    gaps the level of FORMAT.md 3.9 (encodings 1 and
			    5 use the Rice levels only), for magnitudes the
			    Exp-Golomb order */
	uint8_t kr;      /* Rice parameter of run lengths (runs == 1) */
	uint8_t all;     /* encoding 5 magnitudes: every one is the common one */
	uint8_t down;    /* encoding 5 magnitudes: fold below the common one first */
	uint16_t common; /* magnitudes: the common magnitude M (runs == 1);
			    in encoding 5 also the centre of the others */
} bfp_seq;

/* A gap level's code (FORMAT.md 3.9), worked out once per class. */
typedef struct bfp_gcode {
	uint8_t k, s1, s2;
	uint32_t mul;
	uint64_t m, cut;
} bfp_gcode;

/* A model (FORMAT.md 3.10): the code parameters of every class, carried
 * by a frame of encoding 7 for itself and the frames of encoding 8 that
 * refer to it. */
typedef struct bfp_model {
	int8_t gk0;      /* gap levels predicted as gk0 + 2c */
	uint8_t v2;      /* carried by a frame of encoding 9 (FORMAT.md 3.11) */
	bfp_seq mdef;    /* the default magnitude code */
	bfp_seq gap[BFP_CLASSES];
	bfp_seq mag[BFP_CLASSES];
	uint8_t kc[BFP_CLASSES];   /* v2: Exp-Golomb orders of the counts */
	bfp_mtab tab[BFP_CLASSES]; /* v2: magnitude tables (tab[c].on) */
} bfp_model;

typedef struct bfp_sparse_plan {
	uint8_t enc;     /* BFP_ENC_SPARSE, _SPARSE2 or _SPARSE3 */
	uint8_t kn;      /* encodings 5, 6: Exp-Golomb order of the class counts */
	int8_t gk0;      /* encodings 5, 6: gap parameter of class c predicted
			    as gk0 + c (encoding 5) or gk0 + 2c (6) */
	bfp_seq mdef;    /* encodings 5, 6: the default magnitude code */
	uint32_t fbits;  /* bits before the first class count */
	uint32_t n[BFP_CLASSES];
	/* bfp_sparse_cut: where each class's changes start in e->chg_order
	 * (the first n[c] of them are the frame's) */
	uint32_t start[BFP_CLASSES + 1];
	/* class header bits after its count, [0] when the class below has no
	 * changes, [1] when it has (they differ in encoding 6 only) */
	uint16_t hbits[2][BFP_CLASSES];
	bfp_seq gap[BFP_CLASSES];
	bfp_seq mag[BFP_CLASSES];
	bfp_gcode gc[BFP_CLASSES]; /* the gap codes of gap[].k */
	const bfp_model *model; /* encodings 7-10: the codes come from it */
	const bfp_rtab *rt;     /* encodings 9, 10: the model's tables */
	uint64_t mbits[BFP_CLASSES]; /* bfp_sparse_plan_make: estimated bits
					of each class's magnitudes */
	uint64_t gbits[BFP_CLASSES]; /* ... and of its gaps */
	uint32_t dref;   /* encodings 8, 10: frames back to the model's frame */
	uint64_t bits;
	uint8_t stuck;   /* bfp_sparse_cut stopped at a change the model's
			    codes cannot say (a class whose magnitudes were
			    all one when the model was planned) */
} bfp_sparse_plan;

/* Choose codes for the first k gathered changes of e (cost model over
 * per-class statistics) for sparse encoding enc; sizes come from
 * bfp_sparse_cut. */
void bfp_sparse_plan_make(const bfp_encoder *e, uint32_t k, unsigned enc,
			  bfp_sparse_plan *pl);

/* The model of a plan made for encoding 6 (bfp_sparse_plan_make): its
 * codes, and for classes without changes a plain gap code at the
 * predicted level and the default magnitude code. */
void bfp_model_from_plan(const bfp_sparse_plan *pl, bfp_model *m);

/* The model of encoding 9 (FORMAT.md 3.11) for the first k gathered
 * changes of e and their plan for encoding 6: pl's codes, count orders
 * for frames of budget_bits, and magnitude tables where they pay. */
void bfp_model2_from_plan(const bfp_encoder *e, uint32_t k, const bfp_sparse_plan *pl,
			  uint64_t budget_bits, bfp_model *m);

/* Build the tables of a model's table-coded classes (m->v2). */
void bfp_model_tables(const bfp_model *m, bfp_rtab *rt, int encoder);

/* Bits of m's section at the start of an encoding 7 or 9 payload. */
unsigned bfp_model_bits(const bfp_model *m);

/* A plan for encoding 7 or 9 (m carried; dref 0) or 8 or 10 (dref
 * frames back to the frame that carried m) of the first k gathered
 * changes of e: the codes are m's (and rt its tables, encodings 9, 10). */
void bfp_sparse_plan_model(const bfp_encoder *e, uint32_t k, unsigned enc,
			   const bfp_model *m, const bfp_rtab *rt, uint32_t dref,
			   bfp_sparse_plan *pl);

/* Parse a model section (FORMAT.md 3.10; 3.11 when v2); 0 if corrupt. */
int bfp_model_parse(bfp_br *r, int v2, bfp_model *m);

/* Largest prefix of the first k changes whose payload, with pl's codes,
 * fits budget_bits (exact count) and that pl's codes can say; sets pl->n,
 * pl->bits and pl->stuck for it, and groups the changes by class in
 * e->chg_order (pl->start), with the rANS symbol of each table-coded one
 * in e->chg_sym, for bfp_sparse_write. */
uint32_t bfp_sparse_cut(bfp_encoder *e, uint32_t k, bfp_sparse_plan *pl,
			uint64_t budget_bits);

/* Write the payload of the changes bfp_sparse_cut took, with pl, as it
 * left them (pl->n, pl->start, e->chg_order, e->chg_sym):
 * the bit stream to w and, for encodings 9 and 10, the rANS part that
 * follows it (after padding) to tail; returns the rANS part's length. */
size_t bfp_sparse_write(const bfp_encoder *e, const bfp_sparse_plan *pl, bfp_bw *w,
			uint8_t *tail);

/* Parse a sparse payload of encoding enc into per-class gaps and steps
 * (grouped by class: start[c] .. start[c+1]). Checks every rule of
 * FORMAT.md 3.4, 3.8-3.11 that does not need the base values. Encodings
 * 7 and 9: the model section is parsed into *model (and, 9, its tables
 * built in *rt); encodings 8 and 10: r is past the frame's model
 * reference and *model (*rt) holds the model it refers to. *tail gets the
 * length of the rANS part at the payload's end (encodings 9, 10; else 0):
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
