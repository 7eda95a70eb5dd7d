/*
 * internal.h: helpers shared by the codec's encoder and decoder: bounds
 * checks, little-endian field access and the LSB-first bit stream. All
 * reads of untrusted bytes go through these; none casts packet bytes to
 * wider pointer types.
 */
#ifndef BFP_INTERNAL_H
#define BFP_INTERNAL_H

#include "bfp_deps.h"
#include "bfpatch.h"

/* ---- the contexts behind bfp_encoder and bfp_decoder ---- */

/* The mark of a set-up context: storage that is zero (static), or was
 * never set up, or whose set-up failed, is refused with BFP_E_ARG. */
#define BFP_CTX_READY 0x42465052u

/* Where an encoder stands with the model its range's frames share. */
enum bfp_model_state {
	BFP_MODEL_NONE = 0,    /* none yet: plan one from the changes ahead */
	BFP_MODEL_PLANNED = 1, /* the next sparse frame carries it */
	BFP_MODEL_SENT = 2,    /* frames refer to the one model_index carried */
	BFP_MODEL_NEVER = 3,   /* none for this range (too few changes, or
				  frames too small for one) */
};

/* What an encoder holds (bfpatch.h's bfp_encoder is its opaque storage). */
typedef struct bfp_enc {
	uint32_t ready;        /* BFP_CTX_READY once bfp_encoder_init succeeded */
	bfp_encode_opts opts;
	const uint16_t *base;
	const uint16_t *target;
	uint64_t n_params;
	uint64_t pos;
	uint64_t end;
	uint32_t emitted;
	uint32_t cpu;
	uint64_t changed;   /* changed parameters in the frames emitted */
	uint32_t n_changes;
	uint32_t gather_scale; /* changes gathered per frame: size estimate
				  limit over the budget, 1/256 units */
	uint32_t model_state;  /* enum bfp_model_state */
	uint32_t model_index;  /* index of the frame that carried it */
	/* the changes gathered to plan the model, which the frames after it
	 * take theirs from */
	uint32_t bat_ok;       /* 1: chg_* hold them */
	uint32_t bat_n;        /* how many */
	uint32_t bat_at;       /* the first after the frames emitted */
	uint32_t chg0;         /* the current frame's changes start here */
	uint64_t bat_begin;    /* ranks and offsets count from here */
	uint64_t bat_end;      /* gathered up to (exclusive) */
	uint64_t bat_limit;    /* the range end they were gathered for */
	uint64_t bat_next[BFP_CLASSES]; /* rank after the last change of each class
					   before bat_at */
	uint32_t bat_saved[BFP_CLASSES][2]; /* gaps the current frame rewrote: index, gap */
	uint32_t bat_nsaved;
	uint32_t bat_nsnap;
	uint32_t bat_snap[1024][BFP_CLASSES]; /* elements of each class from
						  bat_begin to every 8192nd */
	uint64_t model_codes[256]; /* the model's codes (a bfp_model) */
	uint64_t model_tables[5376]; /* the model's tables, ready to code with
					(a bfp_rtab) */
	uint8_t tail[12352]; /* a payload's rANS bytes, or the streams of
			      keyframe-huf (BFP_KEYEXP_SCRATCH) */
	uint32_t chg_pos[BFP_CHANGES_MAX];  /* offset from frame start */
	uint16_t chg_delta[BFP_CHANGES_MAX];
	uint8_t chg_class[BFP_CHANGES_MAX];
	uint32_t chg_rank[BFP_CHANGES_MAX]; /* class elements skipped */
	uint32_t chg_order[BFP_CHANGES_MAX];
	uint32_t chg_cost[BFP_CHANGES_MAX];  /* bits of each class's changes
						so far */
	uint32_t chg_rcost[BFP_CHANGES_MAX]; /* ... and of their rANS symbols */
	uint8_t chg_sym[BFP_CHANGES_MAX];    /* ... the symbols */
	/* BFP_ENC_F_STAGES: ticks of each stage (enum bfp_stage), the
	 * changes the gathers listed and those the cut sized (some more than
	 * fit each frame) */
	uint64_t stage[BFP_STAGES];
	uint64_t stage_listed, stage_sized;
} bfp_enc;

/* A keyframe-exp decoder's scratch (keyexp.c): a table's slot map, with
 * sixteen slots of padding for the vector stores that fill it, or the
 * lookup table of a keyframe-huf code (huf.h); and the indices of the
 * values with an escape (with room for the seven that the vector path
 * stores past the last). */
typedef struct bfp_kx_scratch {
	union {
		uint32_t slot[2048 + 16];
		uint16_t huf[2048]; /* 2^BFP_HUF_LMAX entries */
	};
	uint16_t esc[8192 + 8];
} bfp_kx_scratch;

/* What a decoder holds (bfp_decoder's storage). */
typedef struct bfp_dec {
	uint32_t ready;        /* BFP_CTX_READY once bfp_decoder_init succeeded */
	uint32_t cpu;
	uint32_t n_changes;
	uint32_t chg_pos[BFP_CHANGES_MAX];  /* offsets in the frame's range */
	uint16_t chg_val[BFP_CHANGES_MAX];  /* new values */
	uint32_t grp_pos[BFP_CHANGES_MAX];  /* the same, grouped by class */
	uint16_t grp_val[BFP_CHANGES_MAX];
	uint16_t chunk[8192];    /* target values: range hash, zstd and exp
				    keyframes */
	bfp_kx_scratch key_scratch; /* keyframe-exp */
	/* the model loaded for frames that refer to one: the identity of
	 * the frame that carried it, and its codes */
	uint32_t model_loaded;
	uint32_t model_index;
	uint32_t model_base, model_target;
	uint64_t model_id;
	uint32_t tables_at;      /* which of model_tables is the model's */
	uint64_t model_codes[256]; /* a bfp_model */
	/* the loaded model's tables, and room to build a new model's while
	 * its frame is checked (bfp_rtab each) */
	uint64_t model_tables[2][5376];
} bfp_dec;

_Static_assert(sizeof(bfp_enc) <= sizeof(bfp_encoder), "BFP_ENCODER_SIZE holds an encoder");
_Static_assert(sizeof(bfp_dec) <= sizeof(bfp_decoder), "BFP_DECODER_SIZE holds a decoder");
_Static_assert(_Alignof(bfp_enc) <= _Alignof(bfp_encoder) &&
		       _Alignof(bfp_dec) <= _Alignof(bfp_decoder),
	       "the opaque storage is aligned for the contexts");

static inline bfp_enc *bfp_enc_of(bfp_encoder *e)
{
	return (bfp_enc *)(void *)e;
}
static inline const bfp_enc *bfp_enc_of_c(const bfp_encoder *e)
{
	return (const bfp_enc *)(const void *)e;
}
static inline bfp_dec *bfp_dec_of(bfp_decoder *d)
{
	return (bfp_dec *)(void *)d;
}
static inline const bfp_dec *bfp_dec_of_c(const bfp_decoder *d)
{
	return (const bfp_dec *)(const void *)d;
}

/* The one bounds-check macro: on a false condition, fail with a status. */
#define BFP_CHECK(cond, status)                                                \
	do {                                                                   \
		if (!(cond))                                                   \
			return (status);                                       \
	} while (0)

/* zstd's static contexts need their workspace 8-byte aligned */
#define BFP_WS_ALIGNED(p) (((uintptr_t)(p) & 7u) == 0)

#define BFP_LIKELY(x) __builtin_expect(!!(x), 1)
#define BFP_UNLIKELY(x) __builtin_expect(!!(x), 0)

static inline uint16_t bfp_ld16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t bfp_ld32(const uint8_t *p)
{
	return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
	       ((uint32_t)p[3] << 24);
}
static inline uint64_t bfp_ld64(const uint8_t *p)
{
	return (uint64_t)bfp_ld32(p) | ((uint64_t)bfp_ld32(p + 4) << 32);
}
static inline void bfp_st16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}
static inline void bfp_st32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}
static inline void bfp_st64(uint8_t *p, uint64_t v)
{
	bfp_st32(p, (uint32_t)v);
	bfp_st32(p + 4, (uint32_t)(v >> 32));
}

/* ---- bit writer: LSB-first, FORMAT.md 3.1 ---- */
typedef struct bfp_bw {
	uint8_t *buf;
	size_t cap;   /* bytes */
	size_t pos;   /* bytes flushed */
	uint64_t acc; /* pending bits, LSB first */
	unsigned n;   /* number of pending bits (< 64) */
	int overflow;
} bfp_bw;

static inline void bfp_bw_init(bfp_bw *w, uint8_t *buf, size_t cap)
{
	w->buf = buf;
	w->cap = cap;
	w->pos = 0;
	w->acc = 0;
	w->n = 0;
	w->overflow = 0;
}

/* Append v, which is below 2^nbits, nbits <= 56. Whole bytes go out with
 * one 8-byte store while at least 8 bytes of room are left (no branch per
 * byte); near the end, byte by byte. Fewer than 64 bits are ever pending,
 * so the shift after a store needs no special case. */
static inline void bfp_bw_put_clean(bfp_bw *w, uint64_t v, unsigned nbits)
{
	w->acc |= v << w->n; /* n < 8 here, so nothing is lost */
	w->n += nbits;
	if (BFP_LIKELY(w->pos + 8 <= w->cap)) {
		uint64_t a = w->acc;
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
		a = __builtin_bswap64(a);
#endif
		BFP_MEMCPY(w->buf + w->pos, &a, 8);
		unsigned k = w->n >> 3;
		w->pos += k;
		w->acc >>= k * 8;
		w->n &= 7;
		return;
	}
	while (w->n >= 8) {
		if (w->pos < w->cap)
			w->buf[w->pos++] = (uint8_t)w->acc;
		else
			w->overflow = 1;
		w->acc >>= 8;
		w->n -= 8;
	}
}

/* Append the low nbits (<= 56) of v. */
static inline void bfp_bw_put(bfp_bw *w, uint64_t v, unsigned nbits)
{
	bfp_bw_put_clean(w, v & ((1ull << nbits) - 1), nbits);
}

/* Flush pending bits, zero-padded to a byte; returns bytes written. */
static inline size_t bfp_bw_finish(bfp_bw *w)
{
	if (w->n > 0)
		bfp_bw_put(w, 0, 8 - w->n);
	return w->pos;
}

/* ---- bit reader: never reads past end ---- */
typedef struct bfp_br {
	const uint8_t *buf;
	size_t len;
	size_t pos;   /* next byte to load */
	uint64_t acc;
	unsigned n;   /* valid bits in acc */
	int err;      /* set when a read went past the end */
} bfp_br;

static inline void bfp_br_init(bfp_br *r, const uint8_t *buf, size_t len)
{
	r->buf = buf;
	r->len = len;
	r->pos = 0;
	r->acc = 0;
	r->n = 0;
	r->err = 0;
}

static inline void bfp_br_refill(bfp_br *r)
{
	/* callers refill only when fewer than 32 bits are pending */
	if (BFP_LIKELY(r->pos + 8 <= r->len)) {
		uint64_t v;
		BFP_MEMCPY(&v, r->buf + r->pos, 8);
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
		v = __builtin_bswap64(v);
#endif
		unsigned take = (64u - r->n) >> 3;
		r->acc |= v << r->n;
		r->n += take * 8;
		if (r->n < 64)
			r->acc &= (1ull << r->n) - 1;
		r->pos += take;
		return;
	}
	while (r->n <= 56 && r->pos < r->len) {
		r->acc |= (uint64_t)r->buf[r->pos++] << r->n;
		r->n += 8;
	}
}

/* Read nbits (<= 32). Past the end it returns zeros and sets err. */
static inline uint32_t bfp_br_get(bfp_br *r, unsigned nbits)
{
	if (r->n < nbits) { /* never for nbits 0: no branch on it */
		bfp_br_refill(r);
		if (r->n < nbits) {
			r->err = 1;
			r->acc = 0;
			r->n = 64 - 8; /* keep returning zeros */
			return 0;
		}
	}
	uint32_t v = (uint32_t)(r->acc & ((1ull << nbits) - 1));
	r->acc >>= nbits;
	r->n -= nbits;
	return v;
}

/* Count of leading zero bits before the next 1, up to limit; consumes the
 * zeros and the 1. Returns limit (consuming limit zeros) if none found. */
static inline unsigned bfp_br_unary(bfp_br *r, unsigned limit)
{
	unsigned q = 0;
	for (;;) {
		if (r->n == 0) {
			bfp_br_refill(r);
			if (r->n == 0) {
				r->err = 1;
				return limit;
			}
		}
		if (r->acc == 0) {
			unsigned take = r->n;
			if (q + take >= limit) {
				r->n -= limit - q;
				return limit; /* acc stays all zeros */
			}
			q += take;
			r->acc = 0;
			r->n = 0;
			continue;
		}
		unsigned tz = (unsigned)__builtin_ctzll(r->acc);
		if (q + tz >= limit) {
			unsigned need = limit - q; /* need <= tz < 64 */
			r->acc >>= need;
			r->n -= need;
			return limit;
		}
		r->acc = (tz == 63) ? 0 : r->acc >> (tz + 1);
		r->n -= tz + 1;
		return q + tz;
	}
}

/* Bits consumed so far. */
static inline uint64_t bfp_br_tell(const bfp_br *r)
{
	return (uint64_t)r->pos * 8 - r->n;
}

/* The step of sign (0 or 1) and magnitude m as a key difference:
 * 0x10000 - m when negative. Without a branch: signs are coin flips. */
static inline uint16_t bfp_signed_step(unsigned sign, uint32_t m)
{
	return (uint16_t)((m ^ (0u - sign)) + sign);
}

/* ---- integer codes of FORMAT.md 3.1 ---- */

#define BFP_RICE_ESC 24u /* quotient that announces a 32-bit literal */

static inline unsigned bfp_bitlen32(uint32_t v)
{
	return v ? 32u - (unsigned)__builtin_clz(v) : 0u;
}

/* Rice code with escape: q = v >> k in unary (q zeros then a one) when
 * q < 24, then k low bits; otherwise 24 zeros and v in 32 bits. */
static inline void bfp_put_rice(bfp_bw *w, uint32_t v, unsigned k)
{
	uint32_t q = v >> k;
	if (q < BFP_RICE_ESC) {
		bfp_bw_put(w, 1ull << q, q + 1);
		bfp_bw_put(w, v, k);
	} else {
		bfp_bw_put(w, 0, BFP_RICE_ESC);
		bfp_bw_put(w, v, 32);
	}
}
static inline unsigned bfp_rice_bits(uint32_t v, unsigned k)
{
	uint32_t q = v >> k;
	return q < BFP_RICE_ESC ? q + 1 + k : BFP_RICE_ESC + 32;
}
/* Fast path of the readers below: with at least 32 bits pending, the
 * first set bit of the accumulator (bits past n are zero) ends the unary
 * part; when it and the bits after it are all pending, one shift takes
 * the whole code. Anything else (escapes, codes across a refill, the
 * end of the payload) goes the general way, with the same result. */
static inline unsigned bfp_br_lead(bfp_br *r)
{
	if (r->n < 32)
		bfp_br_refill(r);
	return (unsigned)__builtin_ctzll(r->acc | (1ull << 63));
}

static inline uint32_t bfp_get_rice(bfp_br *r, unsigned k)
{
	unsigned z = bfp_br_lead(r);
	if (BFP_LIKELY(z < BFP_RICE_ESC && z + 1 + k <= r->n)) {
		uint64_t a = r->acc >> (z + 1);
		r->acc = a >> k; /* z + 1 + k <= 55: no shift by 64 */
		r->n -= z + 1 + k;
		return ((uint32_t)z << k) | (uint32_t)(a & ((1ull << k) - 1));
	}
	unsigned q = bfp_br_unary(r, BFP_RICE_ESC);
	if (q == BFP_RICE_ESC)
		return bfp_br_get(r, 32);
	return ((uint32_t)q << k) | bfp_br_get(r, k);
}

/* Exp-Golomb order 0 of v (v < 2^32 - 1): n = bitlen(v+1), n-1 zeros,
 * then v+1 in n bits MSB... stored as: n-1 zeros, a one, n-1 low bits. */
static inline void bfp_put_eg0(bfp_bw *w, uint32_t v)
{
	uint64_t x = (uint64_t)v + 1;
	unsigned n = 64u - (unsigned)__builtin_clzll(x);
	bfp_bw_put(w, 1ull << (n - 1), n);
	bfp_bw_put(w, x, n - 1); /* the leading one is implied */
}
static inline unsigned bfp_eg0_bits(uint32_t v)
{
	uint64_t x = (uint64_t)v + 1;
	unsigned n = 64u - (unsigned)__builtin_clzll(x);
	return 2 * n - 1;
}
static inline uint32_t bfp_get_eg0(bfp_br *r)
{
	unsigned z = bfp_br_lead(r);
	if (BFP_LIKELY(2 * z + 1 <= r->n)) { /* z <= 31: x - 1 < 2^32 */
		uint64_t a = r->acc >> (z + 1);
		r->acc = a >> z;
		r->n -= 2 * z + 1;
		return (uint32_t)(((1ull << z) | (a & ((1ull << z) - 1))) - 1);
	}
	z = bfp_br_unary(r, 33);
	if (z > 32) {
		r->err = 1;
		return 0;
	}
	uint64_t x = (1ull << z) | (z ? bfp_br_get(r, z) : 0);
	if (x - 1 > 0xFFFFFFFFull) {
		r->err = 1;
		return 0;
	}
	return (uint32_t)(x - 1);
}

/* ---- CPU features (classes.c) ---- */
#define BFP_CPU_AVX2 1u
#define BFP_CPU_AVX512BW 2u
#define BFP_CPU_GFNI 4u /* with AVX512BW: GFNI and AVX512-BITALG too */
#define BFP_CPU_PDEP 8u /* with AVX2: BMI2 whose pdep is fast (not AMD before Zen 3) */
#define BFP_CPU_NEON 16u /* AArch64 Advanced SIMD (every AArch64 CPU) */

/* CPU features usable by the codec (0 on architectures without a SIMD
 * path). */
uint32_t bfp_cpu_features(void);

/* ---- shared helpers implemented in frame.c ---- */
void bfp_header_write(uint8_t *p, const bfp_frame_header *h);
/* Compute and store a written frame's CRC (FORMAT.md 2.1). */
void bfp_frame_seal(uint8_t *p, size_t len);
/* XXH3-64 (seed 0) of n bytes, through the widest vector loop that cpu
 * (bfp_cpu_features()) allows; every loop gives the same hash. */
uint64_t bfp_hash_cpu(uint32_t cpu, const void *p, size_t n);
/* Range hash of base[0..n) with val[i] at pos[i]: changes must be ordered
 * by chunk_len-aligned chunk (any order within a chunk). */
uint64_t bfp_hash_with_changes(uint32_t cpu, uint16_t *chunk, size_t chunk_len,
			       const uint16_t *base, uint64_t n,
			       const uint32_t *pos, const uint16_t *val,
			       uint32_t n_changes);

#endif

