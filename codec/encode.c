/*
 * encode.c: the streaming encoder. Each call covers as many parameters as
 * fit one frame: it gathers the changes ahead (or takes them from those
 * gathered to plan its model), sizes the sparse payload exactly for a
 * prefix of them, compares with dense and keyframe coverage, and writes
 * the encoding that covers the most parameters (FORMAT.md 3).
 */
#include "classes.h"
#include "sparse.h"
#include "keyzstd.h"
#include "keyexp.h"

/* Range length cap per frame (a u32 field; keep well inside it). */
#define RANGE_CAP (1ull << 31)

/* Encodings 7, 8: a model is planned from the changes ahead (as many as
 * the scratch holds: about 20 frames' worth at 1200 bytes; planning it
 * from all of a 2^24-parameter chunk made patches no smaller, measured,
 * and encoding a third slower), and replaced after MODEL_SPAN frames, so
 * that no frame refers further back. */
#define MODEL_SPAN 4096u

_Static_assert(sizeof(bfp_model) <= sizeof(((bfp_enc *)0)->model_codes),
	       "the encoder's model space holds a model");
_Static_assert(sizeof(bfp_rtab) <= sizeof(((bfp_enc *)0)->model_tables),
	       "the encoder's table space holds a model's tables");

/* BFP_ENC_F_STAGES: a counter at a fixed rate, 0 where there is none */
static inline uint64_t ticks(void)
{
#if defined(__x86_64__) || defined(__i386__)
	return __builtin_ia32_rdtsc();
#elif defined(__aarch64__)
	uint64_t v;
	__asm__ volatile("mrs %0, cntvct_el0" : "=r"(v));
	return v;
#else
	return 0;
#endif
}

/* Time stmt as stage st of e when BFP_ENC_F_STAGES is set. */
#define STAGE(e, st, stmt)                                                     \
	do {                                                                   \
		if (BFP_UNLIKELY((e)->opts.flags & BFP_ENC_F_STAGES)) {        \
			const uint64_t t0_ = ticks();                          \
			stmt;                                                  \
			(e)->stage[st] += ticks() - t0_;                       \
		} else {                                                       \
			stmt;                                                  \
		}                                                              \
	} while (0)

/* The gather stops at a size estimate of gather_scale / 256 times the
 * budget. The estimate runs high where most changes cost a bit or two
 * (run-coded classes), low where magnitudes are large, so the scale
 * follows the frames: gathering too few leaves a frame short (the cut
 * takes them all) and is redone at once with the scale raised by what
 * was missing; gathering many more than fit is work thrown away, and the
 * scale comes down. Reset per range, so frames do not depend on how the
 * ranges are spread over threads. */
#define GATHER_SCALE0 320u
#define GATHER_SCALE_MIN 64u
#define GATHER_SCALE_MAX (256u * 64)

/* The batch: plan_model gathers the changes of about 20 frames ahead, and
 * the frames after it take theirs from that batch instead of gathering
 * them again. They are the same changes; only the gap of each class's
 * first change in a frame counts from the frame's start instead: its rank
 * in the batch less the class's elements between the batch's start and
 * the frame's (a snapshot of the gather's counts, and a count of the few
 * thousand elements after it). batch_gather gives what bfp_gather from
 * e->pos would, or nothing when the batch cannot say (the frame reaches
 * past it): then the frame gathers, and the batch is gone. */
static void batch_start(bfp_enc *e, uint64_t end, uint64_t scanned)
{
	e->bat_ok = 1;
	e->bat_n = e->n_changes;
	e->bat_at = 0;
	e->chg0 = 0;
	e->bat_begin = e->pos;
	e->bat_end = scanned;
	e->bat_limit = end;
	e->bat_nsaved = 0;
	BFP_MEMSET(e->bat_next, 0, sizeof(e->bat_next));
}

/* Put back the batch's gaps that a frame rewrote. */
static void batch_restore(bfp_enc *e)
{
	for (uint32_t i = 0; i < e->bat_nsaved; i++)
		e->chg_rank[e->bat_saved[i][0]] = e->bat_saved[i][1];
	e->bat_nsaved = 0;
}

/* bfp_gather(e, end, limit_bits) from the batch: the frame's changes are
 * e->chg_*[e->chg0 ..] (their offsets count from bat_begin). Returns 0
 * if the batch cannot say. */
static int batch_gather(bfp_enc *e, uint64_t end, uint64_t limit_bits, uint64_t *scanned)
{
	uint64_t next[BFP_CLASSES], cnt[BFP_CLASSES], est = 16 + 8 * 10;
	uint32_t seen = 0, n = 0;

	batch_restore(e);
	const uint64_t off = e->pos - e->bat_begin, snap = off / BFP_SNAP_EVERY;
	if (!e->bat_ok || end != e->bat_limit || snap >= e->bat_nsnap ||
	    (e->opts.flags & BFP_ENC_F_NO_BATCH))
		return 0;
	/* the class counts from the batch's start to the frame's */
	for (unsigned c = 0; c < BFP_CLASSES; c++)
		cnt[c] = e->bat_snap[snap][c];
	bfp_class_counts(e->cpu, e->base + e->bat_begin + snap * BFP_SNAP_EVERY,
			 off - snap * BFP_SNAP_EVERY, cnt);
	BFP_MEMCPY(next, e->bat_next, sizeof(next));
	for (uint32_t i = e->bat_at; i < e->bat_n; i++) {
		const unsigned c = e->chg_class[i];
		uint32_t g = e->chg_rank[i];
		const uint64_t r = next[c] + g;
		next[c] = r + 1;
		if (!(seen & (1u << c))) {
			seen |= 1u << c;
			e->bat_saved[e->bat_nsaved][0] = i;
			e->bat_saved[e->bat_nsaved][1] = g;
			e->bat_nsaved++;
			g = (uint32_t)(r - cnt[c]);
			e->chg_rank[i] = g;
		}
		est += bfp_gather_est(g, bfp_mag(e->chg_delta[i]));
		n++;
		if (n == BFP_CHANGES_MAX || est > limit_bits) {
			*scanned = e->bat_begin + e->chg_pos[i] + 1;
			goto done;
		}
	}
	if (e->bat_end < end) { /* the batch stopped short of the range's end */
		batch_restore(e);
		return 0;
	}
	*scanned = end;
done:
	e->n_changes = n;
	e->chg0 = e->bat_at;
	return 1;
}

/* After a frame: the batch's changes before e->pos are behind. */
static void batch_advance(bfp_enc *e)
{
	batch_restore(e);
	e->chg0 = 0;
	if (!e->bat_ok)
		return;
	const uint64_t off = e->pos - e->bat_begin;
	uint32_t i = e->bat_at;
	for (; i < e->bat_n && e->chg_pos[i] < off; i++)
		e->bat_next[e->chg_class[i]] += (uint64_t)e->chg_rank[i] + 1;
	e->bat_at = i;
}

/* Offset from the frame's start of its j-th gathered change. */
static uint64_t change_offset(const bfp_enc *e, uint32_t j)
{
	const uint32_t i = e->chg0 + j;
	return e->bat_ok ? e->chg_pos[i] - (e->pos - e->bat_begin) : e->chg_pos[i];
}

/* Plan a model from the changes ahead of e->pos; 0 when the rest of the
 * range has so few changes (two frames' worth at a byte each) that a
 * model would not pay for itself, or when the model would take more than
 * half a frame (tiny frames): the range's frames are then self-contained. */
static int plan_model(bfp_enc *e, uint64_t end, size_t budget, bfp_model *m, bfp_rtab *rt)
{
	bfp_sparse_plan pl;
	const uint64_t scanned = bfp_gather_snap(e, end);
	batch_start(e, end, scanned);
	if (scanned >= end && e->n_changes < 2 * budget)
		return 0;
	bfp_sparse_plan_make(e, e->n_changes, &pl);
	bfp_model_from_plan(e, e->n_changes, &pl, (uint64_t)budget * 8, m);
	bfp_model_tables(m, rt, 1);
	return bfp_model_bits(m) + 3 + 16 <= budget * 4;
}

static uint32_t clamp_scale(uint64_t s)
{
	return s < GATHER_SCALE_MIN ? GATHER_SCALE_MIN
				    : (s > GATHER_SCALE_MAX ? GATHER_SCALE_MAX : (uint32_t)s);
}

/* Bits of a dense change after its flag: sign, big flag, magnitude. */
static inline unsigned dense_bits(unsigned m)
{
	return 2u + (m > 1 ? bfp_eg0_bits(m - 2) : 0u);
}

/* Parameters covered by a dense frame starting at pos within budget. */
static uint64_t dense_cover(const bfp_enc *e, uint64_t end, size_t budget,
			    uint32_t cpu)
{
	uint64_t bits = 0, cap = (uint64_t)budget * 8, i = e->pos;
	while (i < end) {
		uint64_t j = i + bfp_next_diff(e->base + i, e->target + i,
					       end - i, cpu);
		if (j > end)
			j = end;
		if (bits + (j - i) > cap)
			return i - e->pos + (cap - bits);
		bits += j - i;
		i = j;
		if (i >= end)
			break;
		unsigned m = bfp_mag((uint16_t)(bfp_key(e->target[i]) -
					       bfp_key(e->base[i])));
		unsigned cb = 1 + dense_bits(m);
		if (bits + cb > cap)
			break;
		bits += cb;
		i++;
	}
	return i - e->pos;
}

/* Returns the number of changes written. */
static uint64_t write_dense(const bfp_enc *e, uint64_t len, bfp_bw *w)
{
	uint64_t changed = 0;
	for (uint64_t i = 0; i < len; i++) {
		uint16_t b = e->base[e->pos + i], t = e->target[e->pos + i];
		if (b == t) {
			bfp_bw_put(w, 0, 1);
			continue;
		}
		changed++;
		uint16_t d = (uint16_t)(bfp_key(t) - bfp_key(b));
		unsigned m = bfp_mag(d);
		bfp_bw_put(w, 1, 1);
		bfp_bw_put(w, ((int16_t)d < 0) ? 1u : 0u, 1);
		bfp_bw_put(w, m > 1, 1);
		if (m > 1)
			bfp_put_eg0(w, m - 2);
	}
	return changed;
}

/* Keyframe covering as much as fits from e->pos: of the keyframe
 * encodings allowed (FORMAT.md 3.8-3.10), the one that covers the most
 * parameters, raw words on a tie. Writes the payload at pl; returns the
 * range length, sets *enc and *len. */
static uint64_t key_frame(bfp_enc *e, uint64_t end, size_t budget,
			  uint8_t *pl, uint8_t *encoding, size_t *len)
{
	uint64_t raw = budget / 2 < end - e->pos ? budget / 2 : end - e->pos, best = raw;
	*encoding = BFP_ENC_KEY_RAW;
	if (e->opts.flags & (BFP_ENC_F_KEY_EXP | BFP_ENC_F_KEY_EXPM | BFP_ENC_F_KEY_HUF)) {
		/* 9 before 8 before 7 where more than one is allowed */
		const int m = (e->opts.flags & BFP_ENC_F_KEY_HUF)    ? 2
			      : (e->opts.flags & BFP_ENC_F_KEY_EXPM) ? 1
								     : 0;
		size_t xl = 0;
		const uint64_t nx = bfp_keyexp_encode(e->target + e->pos, end - e->pos, budget, pl,
						      &xl, e->tail, e->cpu, m);
		if (nx > best) {
			best = nx;
			*encoding = m == 2 ? BFP_ENC_KEY_HUF : m ? BFP_ENC_KEY_EXPM : BFP_ENC_KEY_EXP;
			*len = xl;
		}
	}
#ifdef BFP_HAVE_ZSTD
	if (e->opts.flags & BFP_ENC_F_ZSTD) {
		uint8_t *planes = (uint8_t *)e->chg_order;
		uint8_t *tmp = planes + 2 * BFP_KEYZSTD_MAX;
		size_t tmp_cap = sizeof(e->chg_order) - 2 * BFP_KEYZSTD_MAX;
		uint64_t L = end - e->pos < BFP_KEYZSTD_MAX ? end - e->pos : BFP_KEYZSTD_MAX;
		/* shrink the range in proportion until the frame fits */
		for (int tries = 0; tries < 8 && L > best; tries++) {
			size_t z = bfp_keyzstd_compress(e->opts.zstd_workspace,
							e->opts.zstd_workspace_size,
							e->target + e->pos, (uint32_t)L,
							planes, tmp, tmp_cap);
			if (z == 0)
				break;
			if (z <= budget) {
				BFP_MEMCPY(pl, tmp, z);
				*encoding = BFP_ENC_KEY_ZSTD;
				*len = z;
				return L;
			}
			L = L * budget / z * 31 / 32;
		}
	}
#endif
	if (*encoding == BFP_ENC_KEY_EXP || *encoding == BFP_ENC_KEY_EXPM ||
	    *encoding == BFP_ENC_KEY_HUF)
		return best;
	for (uint64_t i = 0; i < raw; i++)
		bfp_st16(pl + 2 * i, e->target[e->pos + i]);
	*len = (size_t)raw * 2;
	return raw;
}

/* The range checks of init and reset: nothing is changed. */
static bfp_status range_check(const bfp_enc *enc, const uint16_t *base, const uint16_t *target,
			      uint64_t n_params, uint64_t begin, uint64_t end)
{
	BFP_CHECK(target, BFP_E_ARG);
	BFP_CHECK(base || (enc->opts.flags & BFP_ENC_F_KEYFRAME), BFP_E_ARG);
	BFP_CHECK(begin <= end && end <= n_params, BFP_E_RANGE);
	return BFP_OK;
}

static void set_range(bfp_enc *enc, const uint16_t *base, const uint16_t *target,
		      uint64_t n_params, uint64_t begin, uint64_t end, uint32_t first_index)
{
	enc->opts.first_index = first_index;
	enc->base = base;
	enc->target = target;
	enc->n_params = n_params;
	enc->pos = begin;
	enc->end = end;
	enc->emitted = 0;
	enc->changed = 0;
	enc->n_changes = 0;
	enc->gather_scale = GATHER_SCALE0;
	enc->model_state = BFP_MODEL_NONE;
	enc->model_index = 0;
	enc->bat_ok = 0;
	enc->bat_nsaved = 0;
	enc->chg0 = 0;
}

bfp_status bfp_encoder_init(bfp_encoder *encoder, const bfp_encode_opts *opts,
			    const uint16_t *base, const uint16_t *target,
			    uint64_t n_params, uint64_t begin, uint64_t end)
{
	BFP_CHECK(encoder, BFP_E_ARG);
	bfp_enc *enc = bfp_enc_of(encoder);
	enc->ready = 0; /* until it succeeds */
	BFP_CHECK(opts, BFP_E_ARG);
	uint32_t fs = opts->frame_size ? opts->frame_size : BFP_FRAME_SIZE_DEFAULT;
	BFP_CHECK(fs >= BFP_FRAME_SIZE_MIN && fs <= BFP_FRAME_SIZE_MAX, BFP_E_ARG);
	if (opts->flags & BFP_ENC_F_KEYFRAME)
		BFP_CHECK(opts->base_version == 0, BFP_E_ARG);
	else
		BFP_CHECK(opts->target_version > opts->base_version, BFP_E_ARG);
	BFP_CHECK(!(opts->flags & ~(BFP_ENC_F_KEYFRAME | BFP_ENC_F_ZSTD |
				    BFP_ENC_F_NO_DENSE | BFP_ENC_F_SCALAR | BFP_ENC_F_NO_BATCH |
				    BFP_ENC_F_STAGES | BFP_ENC_F_KEY_EXP | BFP_ENC_F_KEY_EXPM |
				    BFP_ENC_F_KEY_HUF)),
		  BFP_E_ARG);
	BFP_CHECK(opts->sparse == BFP_SPARSE_SHARED || opts->sparse == BFP_SPARSE_SELF_CONTAINED,
		  BFP_E_ARG);
#ifndef BFP_HAVE_ZSTD
	BFP_CHECK(!(opts->flags & BFP_ENC_F_ZSTD), BFP_E_UNSUPPORTED);
#else
	BFP_CHECK(!(opts->flags & BFP_ENC_F_ZSTD) ||
			  (opts->zstd_workspace && BFP_WS_ALIGNED(opts->zstd_workspace) &&
			   opts->zstd_workspace_size >= bfp_zstd_workspace_size()),
		  BFP_E_ARG);
#endif
	enc->opts = *opts;
	enc->opts.frame_size = fs;
	BFP_MEMSET(enc->stage, 0, sizeof(enc->stage));
	enc->stage_listed = enc->stage_sized = 0;
	enc->cpu = (opts->flags & BFP_ENC_F_SCALAR) ? 0 : bfp_cpu_features();
	enc->base = enc->target = NULL;
	enc->pos = enc->end = 0;
	bfp_status st = range_check(enc, base, target, n_params, begin, end);
	if (st != BFP_OK)
		return st;
	enc->ready = BFP_CTX_READY;
	set_range(enc, base, target, n_params, begin, end, opts->first_index);
	return BFP_OK;
}

bfp_status bfp_encoder_reset(bfp_encoder *encoder, const uint16_t *base,
			     const uint16_t *target, uint64_t n_params,
			     uint64_t begin, uint64_t end, uint32_t first_index)
{
	BFP_CHECK(encoder, BFP_E_ARG);
	bfp_enc *enc = bfp_enc_of(encoder);
	/* an encoder bfp_encoder_init never set up (zeroed) */
	BFP_CHECK(enc->ready == BFP_CTX_READY, BFP_E_ARG);
	bfp_status st = range_check(enc, base, target, n_params, begin, end);
	if (st != BFP_OK)
		return st;
	set_range(enc, base, target, n_params, begin, end, first_index);
	return BFP_OK;
}

size_t bfp_frame_bound(uint32_t frame_size)
{
	return BFP_FRAME_BOUND(frame_size);
}

uint32_t bfp_encoder_frames(const bfp_encoder *encoder)
{
	const bfp_enc *enc = bfp_enc_of_c(encoder);
	return encoder && enc->ready == BFP_CTX_READY ? enc->emitted : 0;
}

uint64_t bfp_encoder_changed(const bfp_encoder *encoder)
{
	const bfp_enc *enc = bfp_enc_of_c(encoder);
	return encoder && enc->ready == BFP_CTX_READY ? enc->changed : 0;
}

bfp_status bfp_encoder_stages(const bfp_encoder *encoder, bfp_stage_counts *out)
{
	BFP_CHECK(encoder && out, BFP_E_ARG);
	const bfp_enc *enc = bfp_enc_of_c(encoder);
	BFP_CHECK(enc->ready == BFP_CTX_READY, BFP_E_ARG);
	BFP_MEMCPY(out->ticks, enc->stage, sizeof(out->ticks));
	out->listed = enc->stage_listed;
	out->sized = enc->stage_sized;
	return BFP_OK;
}

static bfp_status encode_next(bfp_enc *e, void *out, size_t out_cap, size_t *out_len)
{
	if (e->pos >= e->end)
		return BFP_DONE;
	BFP_CHECK(out_cap >= bfp_frame_bound(e->opts.frame_size), BFP_E_SPACE);

	uint8_t *p = out;
	const size_t budget = e->opts.frame_size - BFP_HEADER_SIZE;
	const uint64_t end = e->end - e->pos > RANGE_CAP ? e->pos + RANGE_CAP
							 : e->end;
	bfp_frame_header h;
	uint64_t len;
	size_t pl_len = 0;

	BFP_MEMSET(&h, 0, sizeof(h));
	if (e->opts.flags & BFP_ENC_F_KEYFRAME) {
		STAGE(e, BFP_STAGE_OTHER,
		      len = key_frame(e, end, budget, p + BFP_HEADER_SIZE, &h.encoding, &pl_len));
	} else {
		/* sparse: the longest prefix of the gathered changes that fits */
		const uint64_t bits = (uint64_t)budget * 8;
		unsigned enc = BFP_ENC_SPARSE;
		bfp_model *model = (bfp_model *)(void *)e->model_codes;
		bfp_rtab *rt = (bfp_rtab *)(void *)e->model_tables;
		const uint32_t index = e->opts.first_index + e->emitted;
		bfp_sparse_plan pl;
		uint64_t scanned;
		uint32_t n, k;
	replan:
		if (e->opts.sparse == BFP_SPARSE_SHARED) { /* a model shared by the range's frames */
			if (e->model_state == BFP_MODEL_SENT && index - e->model_index >= MODEL_SPAN)
				e->model_state = BFP_MODEL_NONE;
			if (e->model_state == BFP_MODEL_NONE) /* plan one from the changes ahead */
				STAGE(e, BFP_STAGE_MODEL,
				      e->model_state = plan_model(e, end, budget, model, rt)
							       ? BFP_MODEL_PLANNED
							       : BFP_MODEL_NEVER);
			if (e->model_state != BFP_MODEL_NEVER)
				enc = e->model_state == BFP_MODEL_PLANNED ? BFP_ENC_SPARSE_MODEL
									  : BFP_ENC_SPARSE_REF;
		}
		for (int round = 0;; round++) {
			const uint64_t limit = bits * e->gather_scale / 256;
			int from_batch;
			STAGE(e, BFP_STAGE_BATCH, from_batch = batch_gather(e, end, limit, &scanned));
			if (!from_batch) {
				e->bat_ok = 0; /* the gather overwrites it */
				e->chg0 = 0;
				STAGE(e, BFP_STAGE_GATHER, scanned = bfp_gather(e, end, limit));
				if (e->opts.flags & BFP_ENC_F_STAGES)
					e->stage_listed += e->n_changes;
			}
			n = e->n_changes;
			if (bfp_encoding_has_model(enc))
				STAGE(e, BFP_STAGE_PLAN,
				      bfp_sparse_plan_model(e, n, enc, model, rt,
							    index - e->model_index, &pl));
			else
				STAGE(e, BFP_STAGE_PLAN, bfp_sparse_plan_make(e, n, &pl));
			STAGE(e, BFP_STAGE_CUT, k = bfp_sparse_cut(e, n, &pl, bits));
			if (e->opts.flags & BFP_ENC_F_STAGES)
				e->stage_sized += n;
			if (pl.stuck) {
				/* the next change has a magnitude the model's codes
				 * cannot say: end the frame before it, or, if it is
				 * the first, plan a model that can (from the changes
				 * ahead, so it always can) */
				if (k == 0 && e->model_state == BFP_MODEL_SENT) {
					e->model_state = BFP_MODEL_NONE;
					goto replan;
				}
				break;
			}
			if (k < n) { /* aim at gathering about 1/32 more than fit */
				e->gather_scale = clamp_scale((uint64_t)e->gather_scale * k * 33 / 32 / n +
							      1);
				break;
			}
			/* all fit: the range ended, the scratch is full, the frame
			 * is nearly full, or the gather stopped short */
			if (scanned >= end || n == BFP_CHANGES_MAX || pl.bits >= bits - bits / 64 ||
			    round == 2)
				break;
			e->gather_scale = clamp_scale((uint64_t)e->gather_scale * bits * 33 / 32 /
						      (pl.bits ? pl.bits : 1));
		}
		uint64_t sparse_len = k < n ? change_offset(e, k) : scanned - e->pos;
		uint64_t dense_len = 0;
		uint64_t key_len = budget / 2 < end - e->pos ? budget / 2 : end - e->pos;
		if (!(e->opts.flags & BFP_ENC_F_NO_DENSE) &&
		    (uint64_t)k * 4 > sparse_len)
			STAGE(e, BFP_STAGE_OTHER, dense_len = dense_cover(e, end, budget, e->cpu));
		/* a range that changed so much that neither covers a byte's
		 * worth of parameters may be cheaper as a keyframe-exp one
		 * (FORMAT.md 3.10): try the keyframes (their payload is kept
		 * if they win) */
		int keyed = 0;
		if ((e->opts.flags & (BFP_ENC_F_KEY_EXP | BFP_ENC_F_KEY_EXPM | BFP_ENC_F_KEY_HUF)) &&
		    key_len < end - e->pos &&
		    sparse_len < budget && dense_len < budget) {
			STAGE(e, BFP_STAGE_OTHER,
			      key_len = key_frame(e, end, budget, p + BFP_HEADER_SIZE, &h.encoding,
						  &pl_len));
			keyed = 1;
		}
		if (key_len > sparse_len && key_len > dense_len) {
			if (keyed)
				len = key_len;
			else
				STAGE(e, BFP_STAGE_OTHER,
				      len = key_frame(e, end, budget, p + BFP_HEADER_SIZE,
						      &h.encoding, &pl_len));
		} else {
			bfp_bw w;
			size_t tail = 0;
			bfp_bw_init(&w, p + BFP_HEADER_SIZE, budget);
			if (dense_len > sparse_len) {
				len = dense_len;
				h.encoding = BFP_ENC_DENSE;
				STAGE(e, BFP_STAGE_OTHER, e->changed += write_dense(e, len, &w));
			} else {
				len = sparse_len;
				h.encoding = (uint8_t)enc;
				STAGE(e, BFP_STAGE_WRITE, tail = bfp_sparse_write(e, &pl, &w, e->tail));
				e->changed += k;
				if (bfp_encoding_carries_model(enc)) {
					/* the frames after it refer to it */
					e->model_state = BFP_MODEL_SENT;
					e->model_index = index;
				}
			}
			pl_len = bfp_bw_finish(&w);
			/* cannot happen: sizes are exact, or bounds (rANS) */
			if (w.overflow || pl_len + tail > budget)
				return BFP_E_SPACE;
			BFP_MEMCPY(p + BFP_HEADER_SIZE + pl_len, e->tail, tail);
			pl_len += tail;
		}
	}
	/* a keyframe-coded frame of a patch says so (FORMAT.md 2.1), so that
	 * receivers do not take it for a frame of a keyframe stream */
	const int stream = e->opts.flags & BFP_ENC_F_KEYFRAME;
	h.flags = (!stream && !bfp_encoding_is_delta(h.encoding)) ? BFP_FLAG_IN_PATCH : 0;
	h.model_id = e->opts.model_id;
	h.base_version = stream ? 0 : e->opts.base_version;
	h.target_version = e->opts.target_version;
	h.frame_index = e->opts.first_index + e->emitted;
	h.frame_count = e->opts.frame_count;
	h.range_begin = e->pos;
	h.range_len = (uint32_t)len;
	h.payload_len = (uint32_t)pl_len;
	STAGE(e, BFP_STAGE_HASH, {
		h.target_hash = bfp_hash_cpu(e->cpu, e->target + e->pos, (size_t)len * 2);
		bfp_header_write(p, &h);
		bfp_frame_seal(p, BFP_HEADER_SIZE + pl_len);
	});
	e->pos += len;
	batch_advance(e);
	e->emitted++;
	*out_len = BFP_HEADER_SIZE + pl_len;
	return BFP_OK;
}

bfp_status bfp_encode_next(bfp_encoder *encoder, void *out, size_t out_cap,
			   size_t *out_len)
{
	BFP_CHECK(encoder && out && out_len, BFP_E_ARG);
	bfp_enc *e = bfp_enc_of(encoder);
	BFP_CHECK(e->ready == BFP_CTX_READY, BFP_E_ARG);
	bfp_status st;
	STAGE(e, BFP_STAGE_ALL, st = encode_next(e, out, out_cap, out_len));
	return st;
}
