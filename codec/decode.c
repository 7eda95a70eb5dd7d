/*
 * decode.c: validate-then-apply. A frame is decoded completely into the
 * decoder's scratch (positions and new values), its target hash is checked
 * against base-with-changes, and only then are the weights written, so a
 * frame that fails any check of FORMAT.md leaves the weights untouched.
 */
#include "classes.h"
#include "sparse.h"
#include "keyzstd.h"
#include "keyexp.h"

bfp_status bfp_decoder_init(bfp_decoder *decoder, uint32_t flags)
{
	BFP_CHECK(decoder, BFP_E_ARG);
	bfp_dec *dec = bfp_dec_of(decoder);
	dec->ready = 0; /* until it succeeds */
	BFP_CHECK(!(flags & ~BFP_DEC_F_SCALAR), BFP_E_ARG);
	dec->cpu = (flags & BFP_DEC_F_SCALAR) ? 0 : bfp_cpu_features();
	dec->n_changes = 0;
	dec->model_loaded = 0;
	dec->tables_at = 0;
	dec->ready = BFP_CTX_READY;
	return BFP_OK;
}

/* A set-up decoder behind decoder, or NULL. */
static bfp_dec *ready_dec(bfp_decoder *decoder)
{
	bfp_dec *d = decoder ? bfp_dec_of(decoder) : NULL;
	return d && d->ready == BFP_CTX_READY ? d : NULL;
}

uint32_t bfp_decoder_changes(const bfp_decoder *decoder, const uint32_t **pos,
			     const uint16_t **val)
{
	const bfp_dec *d = decoder ? bfp_dec_of_c(decoder) : NULL;
	if (!d || d->ready != BFP_CTX_READY || !d->n_changes) {
		if (pos)
			*pos = NULL;
		if (val)
			*val = NULL;
		return 0;
	}
	if (pos)
		*pos = d->chg_pos;
	if (val)
		*val = d->chg_val;
	return d->n_changes;
}

_Static_assert(sizeof(bfp_model) <= sizeof(((bfp_dec *)0)->model_codes),
	       "the decoder's model space holds a model");
_Static_assert(sizeof(bfp_rtab) <= sizeof(((bfp_dec *)0)->model_tables[0]),
	       "the decoder's table space holds a model's tables");

/* The loaded model's tables (spare 0), or the room to build a new
 * model's (spare 1) while its frame is checked. */
static bfp_rtab *model_tables(bfp_dec *d, unsigned spare)
{
	return (bfp_rtab *)(void *)d->model_tables[(d->tables_at ^ spare) & 1];
}

/* BFP_ENC_SPARSE_REF (FORMAT.md 3.6): the payload starts with the
 * distance back to the frame that carries the model, less one, in EG0.
 * Sets *index to that frame's index. */
static bfp_status model_ref(bfp_br *r, const bfp_frame_header *h, uint32_t *index)
{
	uint32_t back = bfp_get_eg0(r);
	BFP_CHECK(!r->err && back < h->frame_index, BFP_E_CORRUPT);
	*index = h->frame_index - back - 1;
	return BFP_OK;
}

/* Does d hold the model of frame index of h's patch? */
static int holds_model(const bfp_dec *d, const bfp_frame_header *h, uint32_t index)
{
	return d->model_loaded && d->model_index == index && d->model_id == h->model_id &&
	       d->model_base == h->base_version && d->model_target == h->target_version;
}

/* The model of a BFP_ENC_SPARSE_REF frame: the loaded one, if it is the
 * model of the frame it refers to. */
static bfp_status loaded_model(const bfp_dec *d, bfp_br *r, const bfp_frame_header *h,
			       bfp_model *m)
{
	uint32_t index;
	bfp_status st = model_ref(r, h, &index);
	if (st != BFP_OK)
		return st;
	BFP_CHECK(holds_model(d, h, index), BFP_E_NO_MODEL);
	BFP_MEMCPY(m, d->model_codes, sizeof(*m));
	return BFP_OK;
}

/* Keep the model of a frame that carries one and checked out, with the
 * tables built in the spare room. */
static void keep_model(bfp_dec *d, const bfp_frame_header *h, const bfp_model *m)
{
	BFP_MEMCPY(d->model_codes, m, sizeof(*m));
	d->tables_at ^= 1;
	d->model_index = h->frame_index;
	d->model_id = h->model_id;
	d->model_base = h->base_version;
	d->model_target = h->target_version;
	d->model_loaded = 1;
}

bfp_status bfp_frame_model_index(const void *frame, size_t frame_len, uint32_t *index)
{
	bfp_frame_header h;
	BFP_CHECK(frame && index, BFP_E_ARG);
	bfp_status st = bfp_frame_parse(frame, frame_len, &h);
	if (st != BFP_OK)
		return st;
	if (bfp_encoding_carries_model(h.encoding)) {
		*index = h.frame_index;
		return BFP_OK;
	}
	BFP_CHECK(bfp_encoding_refers(h.encoding), BFP_E_UNSUPPORTED);
	bfp_br r;
	bfp_br_init(&r, (const uint8_t *)frame + BFP_HEADER_SIZE, h.payload_len);
	return model_ref(&r, &h, index);
}

bfp_status bfp_decoder_model_for(bfp_decoder *decoder, const void *frame, size_t frame_len,
				 const uint8_t *const *frames, const uint32_t *lens,
				 size_t n_frames)
{
	bfp_frame_header h;
	uint32_t index;
	bfp_br r;
	bfp_dec *dec = ready_dec(decoder);
	BFP_CHECK(dec && frame && (frames || !n_frames), BFP_E_ARG);
	if (frame_len < BFP_HEADER_SIZE || !bfp_encoding_refers(((const uint8_t *)frame)[5]) ||
	    bfp_frame_parse(frame, frame_len, &h) != BFP_OK)
		return BFP_OK;
	bfp_br_init(&r, (const uint8_t *)frame + BFP_HEADER_SIZE, h.payload_len);
	if (model_ref(&r, &h, &index) != BFP_OK || holds_model(dec, &h, index))
		return BFP_OK;
	BFP_CHECK(index < n_frames && frames[index], BFP_E_NO_MODEL);
	bfp_frame_header mh;
	BFP_CHECK(bfp_frame_parse(frames[index], lens[index], &mh) == BFP_OK &&
			  bfp_encoding_carries_model(mh.encoding) && mh.frame_index == index &&
			  mh.model_id == h.model_id && mh.base_version == h.base_version &&
			  mh.target_version == h.target_version,
		  BFP_E_NO_MODEL);
	return bfp_decoder_load_model(decoder, frames[index], lens[index]);
}

bfp_status bfp_decoder_load_model(bfp_decoder *decoder, const void *frame, size_t frame_len)
{
	bfp_frame_header h;
	bfp_model m;
	bfp_br r;
	bfp_dec *dec = ready_dec(decoder);
	BFP_CHECK(dec && frame, BFP_E_ARG);
	bfp_status st = bfp_frame_parse(frame, frame_len, &h);
	if (st != BFP_OK)
		return st;
	BFP_CHECK(bfp_encoding_carries_model(h.encoding), BFP_E_ARG);
	bfp_br_init(&r, (const uint8_t *)frame + BFP_HEADER_SIZE, h.payload_len);
	BFP_CHECK(bfp_model_parse(&r, &m), BFP_E_CORRUPT);
	bfp_model_tables(&m, model_tables(dec, 1), 0);
	keep_model(dec, &h, &m);
	return BFP_OK;
}

/* FORMAT.md 3.1: the payload ends in the byte holding its last bit and
 * the padding bits after it are zero. */
static bfp_status check_end(bfp_br *r, size_t payload_len)
{
	BFP_CHECK(!r->err, BFP_E_CORRUPT);
	uint64_t bits = bfp_br_tell(r);
	BFP_CHECK((bits + 7) / 8 == payload_len, BFP_E_CORRUPT);
	unsigned pad = (unsigned)(payload_len * 8 - bits);
	BFP_CHECK(bfp_br_get(r, pad) == 0 && !r->err, BFP_E_CORRUPT);
	return BFP_OK;
}

/* Parse and check a sparse payload (FORMAT.md 3.4-3.6) into d's
 * per-class scratch, counting into st if not NULL; the model of a
 * modelled frame in *m (a new one's tables built in the spare room). */
static bfp_status parse_sparse(bfp_dec *d, const bfp_frame_header *h, const uint8_t *pl,
			       bfp_model *m, uint32_t start[BFP_CLASSES + 1], bfp_frame_stats *st)
{
	bfp_br r;
	size_t tail = 0;
	bfp_br_init(&r, pl, h->payload_len);
	bfp_status s = BFP_OK;
	if (bfp_encoding_refers(h->encoding))
		s = loaded_model(d, &r, h, m);
	if (s == BFP_OK)
		s = bfp_sparse_parse(&r, h->encoding, m,
				     model_tables(d, bfp_encoding_carries_model(h->encoding)),
				     h->range_len,
				     start, d->grp_pos, d->grp_val, st, &tail);
	if (s == BFP_OK)
		s = check_end(&r, h->payload_len - tail);
	return s;
}

/* ... and turn it into positions and new values over base */
static bfp_status decode_sparse(bfp_dec *d, const bfp_frame_header *h, const uint8_t *pl,
				const uint16_t *base, bfp_model *m)
{
	uint32_t start[BFP_CLASSES + 1];
	const uint32_t len = h->range_len;
	bfp_status st = parse_sparse(d, h, pl, m, start, NULL);
	if (st == BFP_OK)
		st = bfp_positions(d->cpu, base, len, start, d->grp_pos, d->grp_val,
				   d->chg_pos, d->chg_val);
	if (st == BFP_OK)
		d->n_changes = start[BFP_CLASSES];
	return st;
}

/* FORMAT.md 3.7 */
static bfp_status decode_dense(bfp_dec *d, const uint8_t *pl,
			       size_t pl_len, const uint16_t *base,
			       uint32_t len)
{
	bfp_br r;
	uint32_t k = 0;
	/* every parameter costs at least its flag bit */
	BFP_CHECK((uint64_t)len <= (uint64_t)pl_len * 8, BFP_E_CORRUPT);
	bfp_br_init(&r, pl, pl_len);
	for (uint32_t i = 0; i < len; i++) {
		if (!bfp_br_get(&r, 1))
			continue;
		unsigned sign = bfp_br_get(&r, 1);
		unsigned m = 1;
		if (bfp_br_get(&r, 1)) {
			uint32_t big = bfp_get_eg0(&r);
			BFP_CHECK(!r.err && big <= 32766u, BFP_E_CORRUPT);
			m = big + 2;
		}
		BFP_CHECK(!r.err && (m < 32768u || sign), BFP_E_CORRUPT);
		BFP_CHECK(k < BFP_CHANGES_MAX, BFP_E_CORRUPT);
		d->chg_pos[k] = i;
		d->chg_val[k] = bfp_unkey((uint16_t)(bfp_key(base[i]) + bfp_signed_step(sign, m)));
		k++;
	}
	bfp_status st = check_end(&r, pl_len);
	if (st != BFP_OK)
		return st;
	d->n_changes = k;
	return BFP_OK;
}

static bfp_status check_header(const bfp_apply_opts *o,
			       const bfp_frame_header *h, uint64_t n_params)
{
	BFP_CHECK((o->flags & BFP_DEC_F_ANY_MODEL) || h->model_id == o->model_id,
		  BFP_E_MODEL);
	if (bfp_encoding_is_delta(h->encoding))
		BFP_CHECK((o->flags & BFP_DEC_F_ANY_BASE) ||
				  h->base_version == o->base_version,
			  BFP_E_BASE_VERSION);
	BFP_CHECK(h->range_begin < n_params &&
			  h->range_len <= n_params - h->range_begin,
		  BFP_E_RANGE);
	return BFP_OK;
}

/* Parse and check a frame against the receiver's model and weights; for
 * a delta frame also decode its changes into d and check the target hash
 * of base-with-changes. Writes nothing. */
static bfp_status prepare_frame(bfp_dec *d, const bfp_apply_opts *o, const void *frame,
				size_t frame_len, const uint16_t *weights, uint64_t n_params,
				bfp_frame_header *h)
{
	bfp_status st;
	BFP_CHECK(o && frame && weights, BFP_E_ARG);
	BFP_CHECK(!(o->flags & ~(BFP_DEC_F_ANY_MODEL | BFP_DEC_F_ANY_BASE)),
		  BFP_E_ARG);
	st = bfp_frame_parse(frame, frame_len, h);
	if (st != BFP_OK)
		return st;
	st = check_header(o, h, n_params);
	if (st != BFP_OK || !bfp_encoding_is_delta(h->encoding))
		return st;
	const uint8_t *pl = (const uint8_t *)frame + BFP_HEADER_SIZE;
	const uint16_t *w = weights + h->range_begin;
	bfp_model m;
	st = h->encoding == BFP_ENC_DENSE ? decode_dense(d, pl, h->payload_len, w, h->range_len)
					  : decode_sparse(d, h, pl, w, &m);
	if (st != BFP_OK)
		return st;
	BFP_CHECK(bfp_hash_with_changes(d->cpu, d->chunk, sizeof(d->chunk) / sizeof(d->chunk[0]), w,
					h->range_len, d->chg_pos, d->chg_val, d->n_changes) ==
			  h->target_hash,
		  BFP_E_HASH);
	/* a frame that carries a model and checked out: its model is the
	 * one for the frames that refer to it */
	if (bfp_encoding_carries_model(h->encoding))
		keep_model(d, h, &m);
	return BFP_OK;
}

/* prepare_frame, and the decoder holds the frame's changes only if it
 * checked out (a delta frame: decoded; else none) */
static bfp_status prepare(bfp_dec *d, const bfp_apply_opts *o, const void *frame,
			  size_t frame_len, const uint16_t *weights, uint64_t n_params,
			  bfp_frame_header *h)
{
	d->n_changes = 0;
	bfp_status st = prepare_frame(d, o, frame, frame_len, weights, n_params, h);
	if (st != BFP_OK)
		d->n_changes = 0;
	return st;
}

bfp_status bfp_decode_verify(bfp_decoder *decoder, const bfp_apply_opts *o, const void *frame,
			     size_t frame_len, const uint16_t *weights, uint64_t n_params,
			     bfp_frame_header *hdr_out)
{
	bfp_frame_header h;
	bfp_dec *d = ready_dec(decoder);
	BFP_CHECK(d, BFP_E_ARG);
	bfp_status st = prepare(d, o, frame, frame_len, weights, n_params, &h);
	if (st != BFP_OK)
		return st;
	BFP_CHECK(bfp_encoding_is_delta(h.encoding), BFP_E_UNSUPPORTED);
	if (hdr_out)
		*hdr_out = h;
	return BFP_OK;
}

bfp_status bfp_decode_apply(bfp_decoder *decoder, const bfp_apply_opts *o,
			    const void *frame, size_t frame_len,
			    uint16_t *weights, uint64_t n_params,
			    bfp_frame_header *hdr_out)
{
	bfp_frame_header h;
	bfp_dec *d = ready_dec(decoder);
	BFP_CHECK(d, BFP_E_ARG);
	bfp_status st = prepare(d, o, frame, frame_len, weights, n_params, &h);
	if (st != BFP_OK)
		return st;

	const uint8_t *pl = (const uint8_t *)frame + BFP_HEADER_SIZE;
	uint16_t *w = weights + h.range_begin;
	switch (h.encoding) {
	case BFP_ENC_KEY_RAW:
		BFP_CHECK((uint64_t)h.payload_len == 2ull * h.range_len,
			  BFP_E_CORRUPT);
		BFP_CHECK(bfp_hash_cpu(d->cpu, pl, h.payload_len) == h.target_hash,
			  BFP_E_HASH);
		for (uint32_t i = 0; i < h.range_len; i++)
			w[i] = bfp_ld16(pl + 2 * i);
		break;
	case BFP_ENC_KEY_ZSTD:
#ifdef BFP_HAVE_ZSTD
		BFP_CHECK(o->zstd_workspace, BFP_E_ARG);
		BFP_CHECK(h.range_len <= BFP_KEYZSTD_MAX, BFP_E_CORRUPT);
		st = bfp_keyzstd_decompress(o->zstd_workspace, o->zstd_workspace_size,
					    pl, h.payload_len, h.range_len,
					    (uint8_t *)d->grp_val, d->chunk);
		if (st != BFP_OK)
			return st;
		BFP_CHECK(bfp_hash_cpu(d->cpu, d->chunk, (size_t)h.range_len * 2) == h.target_hash,
			  BFP_E_HASH);
		BFP_MEMCPY(w, d->chunk, (size_t)h.range_len * 2);
		break;
#else
		return BFP_E_UNSUPPORTED;
#endif
	case BFP_ENC_KEY_EXP:
	case BFP_ENC_KEY_EXPM:
	case BFP_ENC_KEY_HUF:
		/* FORMAT.md 3.10-3.12: decoded whole and checked before it is
		 * written */
		BFP_CHECK(h.range_len <= BFP_KEYEXP_MAX, BFP_E_CORRUPT);
		st = bfp_keyexp_decode(pl, h.payload_len, h.range_len, d->chunk, &d->key_scratch,
				       d->cpu,
				       h.encoding == BFP_ENC_KEY_HUF    ? 2
				       : h.encoding == BFP_ENC_KEY_EXPM ? 1
									: 0);
		if (st != BFP_OK)
			return st;
		BFP_CHECK(bfp_hash_cpu(d->cpu, d->chunk, (size_t)h.range_len * 2) == h.target_hash,
			  BFP_E_HASH);
		BFP_MEMCPY(w, d->chunk, (size_t)h.range_len * 2);
		break;
	case BFP_ENC_SPARSE:
	case BFP_ENC_DENSE:
	case BFP_ENC_SPARSE_MODEL:
	case BFP_ENC_SPARSE_REF:
		/* decoded and verified by prepare() */
		for (uint32_t i = 0; i < d->n_changes; i++)
			w[d->chg_pos[i]] = d->chg_val[i];
		break;
	default:
		return BFP_E_ENCODING; /* unreachable: parse checked it */
	}
	if (hdr_out)
		*hdr_out = h;
	return BFP_OK;
}

bfp_status bfp_frame_check_target(const void *frame, size_t frame_len,
				  const uint16_t *weights, uint64_t n_params,
				  int *at_target)
{
	bfp_frame_header h;
	bfp_apply_opts o;
	BFP_CHECK(frame && weights && at_target, BFP_E_ARG);
	bfp_status st = bfp_frame_parse(frame, frame_len, &h);
	if (st != BFP_OK)
		return st;
	BFP_MEMSET(&o, 0, sizeof(o));
	o.flags = BFP_DEC_F_ANY_MODEL | BFP_DEC_F_ANY_BASE;
	st = check_header(&o, &h, n_params);
	if (st != BFP_OK)
		return st;
	*at_target = bfp_hash_params(weights + h.range_begin, h.range_len) ==
		     h.target_hash;
	return BFP_OK;
}

bfp_status bfp_frame_stats_get(bfp_decoder *decoder, const void *frame,
			       size_t frame_len, bfp_frame_stats *out)
{
	bfp_frame_header h;
	bfp_br r;
	bfp_dec *dec = ready_dec(decoder);
	BFP_CHECK(dec && frame && out, BFP_E_ARG);
	bfp_status st = bfp_frame_parse(frame, frame_len, &h);
	if (st != BFP_OK)
		return st;
	BFP_MEMSET(out, 0, sizeof(*out));
	out->encoding = h.encoding;
	out->range_len = h.range_len;
	out->payload_len = h.payload_len;
	bfp_br_init(&r, (const uint8_t *)frame + BFP_HEADER_SIZE, h.payload_len);
	if (bfp_encoding_is_sparse(h.encoding)) {
		uint32_t start[BFP_CLASSES + 1];
		bfp_model m;
		st = parse_sparse(dec, &h, (const uint8_t *)frame + BFP_HEADER_SIZE, &m, start, out);
		/* like decoding it, reading a frame that carries a model loads it */
		if (st == BFP_OK && bfp_encoding_carries_model(h.encoding))
			keep_model(dec, &h, &m);
		return st;
	} else if (h.encoding == BFP_ENC_DENSE) {
		BFP_CHECK((uint64_t)h.range_len <= (uint64_t)h.payload_len * 8,
			  BFP_E_CORRUPT);
		for (uint32_t i = 0; i < h.range_len && !r.err; i++) {
			out->position_bits++;
			if (!bfp_br_get(&r, 1))
				continue;
			uint64_t t0 = bfp_br_tell(&r);
			(void)bfp_br_get(&r, 1);
			if (bfp_br_get(&r, 1))
				(void)bfp_get_eg0(&r);
			out->value_bits += (uint32_t)(bfp_br_tell(&r) - t0);
			out->n_changes++;
		}
	} else {
		return BFP_OK;
	}
	return check_end(&r, h.payload_len);
}
