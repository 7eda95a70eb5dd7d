/*
 * decode.c: validate-then-apply. A frame is decoded completely into the
 * decoder's scratch (positions and new values), its target hash is checked
 * against base-with-changes, and only then are the weights written, so a
 * frame that fails any check of FORMAT.md leaves the weights untouched.
 */
#include "classes.h"
#include "sparse.h"
#include "keyzstd.h"

bfp_status bfp_decoder_init(bfp_decoder *dec, uint32_t flags)
{
	BFP_CHECK(dec, BFP_E_ARG);
	BFP_CHECK(!(flags & ~BFP_DEC_F_SCALAR), BFP_E_ARG);
	dec->cpu = (flags & BFP_DEC_F_SCALAR) ? 0 : bfp_cpu_features();
	dec->n_changes = 0;
	dec->ready = 1;
	return BFP_OK;
}

/* Signed value delta from sign bit and magnitude, as a key difference. */
static inline uint16_t delta_of(unsigned sign, unsigned m)
{
	return (uint16_t)(sign ? 0x10000u - m : m);
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

/* FORMAT.md 3.4, 3.8, 3.9 (sparse encodings 1, 5, 6) */
static bfp_status decode_sparse(bfp_decoder *d, unsigned enc, const uint8_t *pl,
				size_t pl_len, const uint16_t *base,
				uint32_t len)
{
	uint32_t start[BFP_CLASSES + 1];
	bfp_br r;
	bfp_br_init(&r, pl, pl_len);
	bfp_status st = bfp_sparse_parse(&r, enc, len, start, d->grp_pos, d->grp_val, NULL);
	if (st == BFP_OK)
		st = check_end(&r, pl_len);
	if (st == BFP_OK)
		st = bfp_positions(d->cpu, base, len, start, d->grp_pos, d->grp_val,
				   d->chg_pos, d->chg_val);
	if (st == BFP_OK)
		d->n_changes = start[BFP_CLASSES];
	return st;
}

/* FORMAT.md 3.5 */
static bfp_status decode_dense(bfp_decoder *d, const uint8_t *pl,
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
		d->chg_val[k] = bfp_unkey((uint16_t)(bfp_key(base[i]) + delta_of(sign, m)));
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
static bfp_status prepare(bfp_decoder *d, const bfp_apply_opts *o, const void *frame,
			  size_t frame_len, const uint16_t *weights, uint64_t n_params,
			  bfp_frame_header *h)
{
	bfp_status st;
	BFP_CHECK(d && d->ready && o && frame && weights, BFP_E_ARG);
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
	st = h->encoding == BFP_ENC_DENSE
		     ? decode_dense(d, pl, h->payload_len, w, h->range_len)
		     : decode_sparse(d, h->encoding, pl, h->payload_len, w,
				     h->range_len);
	if (st != BFP_OK)
		return st;
	BFP_CHECK(bfp_hash_with_changes(d->cpu, d->chunk, sizeof(d->chunk) / sizeof(d->chunk[0]), w,
					h->range_len, d->chg_pos, d->chg_val, d->n_changes) ==
			  h->target_hash,
		  BFP_E_HASH);
	return BFP_OK;
}

bfp_status bfp_decode_verify(bfp_decoder *d, const bfp_apply_opts *o, const void *frame,
			     size_t frame_len, const uint16_t *weights, uint64_t n_params,
			     bfp_frame_header *hdr_out)
{
	bfp_frame_header h;
	bfp_status st = prepare(d, o, frame, frame_len, weights, n_params, &h);
	if (st != BFP_OK)
		return st;
	BFP_CHECK(bfp_encoding_is_delta(h.encoding), BFP_E_UNSUPPORTED);
	if (hdr_out)
		*hdr_out = h;
	return BFP_OK;
}

bfp_status bfp_decode_apply(bfp_decoder *d, const bfp_apply_opts *o,
			    const void *frame, size_t frame_len,
			    uint16_t *weights, uint64_t n_params,
			    bfp_frame_header *hdr_out)
{
	bfp_frame_header h;
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
	case BFP_ENC_SPARSE:
	case BFP_ENC_DENSE:
	case BFP_ENC_SPARSE2:
	case BFP_ENC_SPARSE3:
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

bfp_status bfp_frame_stats_get(bfp_decoder *dec, const void *frame,
			       size_t frame_len, bfp_frame_stats *out)
{
	bfp_frame_header h;
	bfp_br r;
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
		st = bfp_sparse_parse(&r, h.encoding, h.range_len, start,
				      dec->grp_pos, dec->grp_val, out);
		if (st != BFP_OK)
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
