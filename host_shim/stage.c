/*
 * stage.c: the shim's staging and commit state machine. Frames of the
 * next versions are staged while the actor runs on the current one,
 * NACKed while missing, prepared between bursts, and committed whole,
 * verified, when complete (and the actor is at a safe point, if so
 * configured). It does no I/O but the weight buffer's and its journals':
 * JOINs and NACKs leave by s->ctl_send, so unit tests drive it alone.
 *
 * Versions move only forward and only whole:
 *   READY v       the buffer holds version v; a staged patch whose base is
 *                 v, or a keyframe stream of a later version, commits next
 *   COMMITTING t  a commit to t was cut short (crash): on restart the shim
 *                 gets the patch again (JOIN, NACK) and finishes it; ranges
 *                 already at t are recognised by their hash and skipped
 *   RESYNC        a commit failed verification: the contents are no
 *                 version; the shim JOINs with version NONE and commits
 *                 the next complete keyframe stream
 * Memory: staged frames are kept in their datagram size, at most
 * --max-stage bytes in all (default 1 GiB), in at most SLOTS versions.
 * Between bursts of frames the shim prepares the patch that commits next
 * (decodes and verifies each frame against the buffer, which stays at
 * its base until then) and keeps its changes, 6 bytes per changed weight
 * within at most half of the same budget, dropped when frames need the
 * room; that commit then only writes values. Once every frame is
 * prepared, its change list (--changes) is written too, so the commit
 * only renames it into place. Frames not prepared by then are decoded and
 * verified at the commit, which then writes the list itself. The
 * keyframe stream that commits next is decoded as it comes, each frame
 * verified first: into the buffer while it holds no version (RESYNC: a
 * late joiner, a failed verification), else into a shadow copy of the
 * model's values within the same half of the budget (a joiner that holds
 * an old version); its commit copies (or not) and checks the ranges'
 * hashes, and publishes.
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bfpatch.h"
#include "events.h"
#include "patch.h"
#include "proto.h"
#include "shim.h"
#ifdef BFP_SHIM_DPDK
#include "shim_dpdk.h"
#endif
#include "util.h"
#include "wbuf.h"


/* What the model's versions can take. Every frame of a patch or a
 * keyframe stream covers at least what a raw keyframe of its size would
 * (the encoder picks the encoding that covers the most, FORMAT.md 5), so
 * a version of n words takes at most n * 2 * 128 / 68 bytes in frames of
 * the smallest size, and one part frame more per range it was encoded in
 * (a tensor, or a 2^24-word chunk of one; a tensor takes 32 bytes of
 * the safetensors header at least). */
static uint64_t model_ranges(const shim *s)
{
	return s->w.h->st_len / 32 + 1 + s->w.h->n_params / (1u << 24) + 1;
}

/* Most frames a version of this model can have (this also bounds the
 * index arrays, IDX_BYTES a frame, that hostile frame counts ask for). */
static uint32_t max_frames(const shim *s)
{
	const uint64_t m = s->w.h->n_params / ((BFP_FRAME_SIZE_MIN - BFP_HEADER_SIZE) / 2) +
			   model_ranges(s);
	return m < (1u << 24) ? (uint32_t)m : (1u << 24);
}

/* The staging budget: --max-stage, or less when that is more than the
 * model's versions could ever need (SLOTS versions of frames and their
 * index arrays, and every word's change prepared). */
uint64_t stage_budget(const shim *s)
{
	const uint64_t n = s->w.h->n_params;
	const uint64_t version = (n * 2 * BFP_FRAME_SIZE_MIN + 67) /
				 (BFP_FRAME_SIZE_MIN - BFP_HEADER_SIZE) +
				 model_ranges(s) * BFP_FRAME_SIZE_MAX +
				 (uint64_t)max_frames(s) * IDX_BYTES;
	const uint64_t cap = SLOTS * version + 6 * n + sizeof(prep) * (uint64_t)max_frames(s);
	return cap < s->cf.max_stage ? cap : s->cf.max_stage;
}

/* The options to apply frames of the buffer's model from base (0 for
 * keyframes), with the zstd workspace. */
static bfp_apply_opts apply_opts(const shim *s, uint32_t base)
{
	bfp_apply_opts o;
	memset(&o, 0, sizeof(o));
	o.model_id = s->w.h->model_id;
	o.base_version = base;
	o.zstd_workspace = s->zws;
	o.zstd_workspace_size = s->zws ? bfp_zstd_workspace_size() : 0;
	return o;
}

/* Keep p (bytes long) as the prepared changes of sl's frame i. */
static void slot_add_prep(shim *s, slot *sl, uint32_t i, prep *p, size_t bytes)
{
	sl->preps[i] = p;
	sl->prepped++;
	sl->prep_bytes += bytes;
	s->prep_bytes += bytes;
	s->staged_bytes += bytes;
	s->prepared++;
}

static slot *next_slot(shim *s, int complete);
static void shadow_release(shim *s);
static uint32_t staged_through(const shim *s, const slot *first);
static void inplace_reset(shim *s);
static int inplace_frame(shim *s, const uint8_t *p, size_t len, const bfp_frame_header *h,
			 uint32_t count);

void stage_init(shim *s)
{
	s->nack_backoff_ms = s->cf.nack_ms;
	s->no_prep = s->cf.no_prep;
	if (changes_init(&s->chg, s->cf.buffer ? s->cf.changes : 0, s->cf.buffer))
		fprintf(stderr, "bfpatch-shim: out of memory: no change lists are written\n");
}

/* The version a JOIN says the shim holds: the committed one, or the
 * newest its complete staged patches reach (they wait for the actor's
 * safe point; a publisher that took the committed one for the shim's
 * would send them again every 3 s, PROTOCOL.md 2.1). */
uint32_t stage_join_version(shim *s)
{
	if (s->want_key || shim_state(s) == WBUF_RESYNC)
		return RP_VERSION_NONE;
	uint32_t v = shim_version(s);
	slot *n = shim_state(s) == WBUF_READY ? next_slot(s, 1) : NULL;
	if (n) {
		uint32_t far = staged_through(s, n);
		if (far > v)
			v = far;
	}
	return v;
}

void stage_join(shim *s)
{
	rp_ctl c;
	memset(&c, 0, sizeof(c));
	c.type = RP_JOIN;
	c.model_id = s->w.h->model_id;
	c.version = stage_join_version(s);
	c.data_port = s->cf.listen_port;
	c.rate_kbps = s->cf.rate_kbps;
	s->ctl_send(s, &c);
}

static void slot_free(shim *s, slot *sl)
{
	changes_prep_drop(&s->chg, sl);
	for (uint32_t i = 0; sl->frames && i < sl->cap; i++) {
		free(sl->frames[i]);
		free(sl->preps[i]);
	}
	free(sl->frames);
	free(sl->flen);
	free(sl->preps);
	s->staged_bytes -= sl->bytes + sl->prep_bytes + sl->idx_bytes;
	s->prep_bytes -= sl->prep_bytes;
	memset(sl, 0, sizeof(*sl));
	shadow_release(s);
}

/* The first version a frame must lead to, to be of use. */
uint32_t stage_floor_version(const shim *s)
{
	if (shim_state(s) == WBUF_RESYNC) /* a keyframe stream, never of an older version */
		return shim_version(s);
	if (shim_state(s) == WBUF_COMMITTING)
		return atomic_load(&s->w.h->target);
	return shim_version(s) + 1;
}

static int slot_complete(const slot *sl)
{
	return sl->used && sl->count && sl->have == sl->count;
}

/* What commits next, if staged completely or not: a keyframe stream of
 * a version at or past floor (the latest), else the patch from the
 * buffer's version (to the commit's target, if one is in progress). */
static slot *next_slot(shim *s, int complete)
{
	slot *best = NULL;
	uint32_t fl = stage_floor_version(s);
	for (unsigned i = 0; i < SLOTS; i++) {
		slot *k = &s->slots[i];
		if (k->used && k->key && k->target >= fl && (!complete || slot_complete(k)) &&
		    (!best || k->target > best->target))
			best = k;
	}
	if (best || shim_state(s) == WBUF_RESYNC)
		return best;
	for (unsigned i = 0; i < SLOTS; i++) {
		slot *k = &s->slots[i];
		if (k->used && !k->key && k->base == shim_version(s) &&
		    (shim_state(s) != WBUF_COMMITTING || k->target == fl) &&
		    (!complete || slot_complete(k)))
			return k;
	}
	return NULL;
}

void stage_nack(shim *s)
{
	rp_ctl c;
	const shim_inplace *ip = s->ip.done ? &s->ip : NULL; /* a stream written in place */
	slot *sl = ip ? NULL : next_slot(s, 0);
	int later = 0;
	if (sl && slot_complete(sl)) {
		/* the next version only waits (for the actor's safe point): repair
		 * the first incomplete one after it while caches still hold it */
		slot *l = NULL;
		for (unsigned i = 0; i < SLOTS; i++) {
			slot *k = &s->slots[i];
			if (k->used && !slot_complete(k) && k->target > sl->target &&
			    (!l || k->target < l->target))
				l = k;
		}
		if (!l)
			return;
		sl = l;
		later = 1;
	}
	/* nothing staged of a keyframe commit cut short: the rest of that
	 * stream finishes it (a patch to its version has another base) */
	const int key_resume = !sl && shim_state(s) == WBUF_COMMITTING &&
			       (atomic_load(&s->w.h->flags) & WBUF_F_KEY);
	memset(&c, 0, sizeof(c));
	c.type = RP_NACK;
	c.flags = ip || (sl && sl->key) || key_resume ? RP_NACK_KEY : 0;
	c.model_id = s->w.h->model_id;
	c.version = ip ? ip->target : sl ? sl->target : stage_floor_version(s);
	if (!ip && !sl) /* nothing of it arrived, later versions did: ask for it all */
		c.ranges[c.n_ranges++] = (rp_range){0, 4096};
	uint32_t asked = ip || sl ? 0 : 4096;
	uint32_t known = ip ? ip->count : sl ? (sl->count ? sl->count : sl->hi) : 0;
	for (uint32_t i = 0; i < known && c.n_ranges < RP_NACK_MAX; i++) {
		if (ip ? ip->done[i] : (i < sl->cap && sl->frames[i]))
			continue;
		asked++;
		rp_range *l = c.n_ranges ? &c.ranges[c.n_ranges - 1] : NULL;
		if (l && l->first + l->count == i)
			l->count++;
		else
			c.ranges[c.n_ranges++] = (rp_range){i, 1};
	}
	if (sl && !sl->count && c.n_ranges < RP_NACK_MAX) {
		/* streamed, and the frame that ends the model has not come: the
		 * tail is missing (or still being encoded; then nothing answers) */
		c.ranges[c.n_ranges++] = (rp_range){sl->hi, 256};
		asked += 256;
	}
	if (!c.n_ranges)
		return;
	s->ctl_send(s, &c);
	s->nacks++;
	events_emit(&s->ev, "nack", "\"version\":%u,\"frames\":%u,\"key\":%s", c.version, asked,
		    c.flags & RP_NACK_KEY ? "true" : "false");
	/* only the version that commits next gives up on patches */
	if (!ip && !later && ++s->nack_rounds == NACK_GIVE_UP && !s->want_key) {
		/* nobody holds that patch any more: start over from keyframes */
		s->want_key = 1;
		if (shim_state(s) == WBUF_RESYNC) {
			/* resyncing already (counted when it began): another stream */
			fprintf(stderr, "bfpatch-shim: keyframe stream of version %u unrepaired after "
				"%u NACKs; asking for another\n", c.version, NACK_GIVE_UP);
		} else {
			s->resyncs++;
			fprintf(stderr, "bfpatch-shim: version %u unrepaired after %u NACKs; asking "
				"for a keyframe stream\n", c.version, NACK_GIVE_UP);
			events_emit(&s->ev, "resync", "\"version\":%u,\"reason\":\"unrepaired\"",
				    c.version);
		}
		stage_join(s);
	}
}

/* Free the prepared changes of sl: its commit decodes those frames. */
static void slot_drop_preps(shim *s, slot *sl)
{
	for (uint32_t i = 0; sl->preps && i < sl->cap; i++) {
		if (!sl->preps[i])
			continue;
		free(sl->preps[i]);
		sl->preps[i] = NULL;
		s->prep_dropped++;
	}
	sl->prepped = 0;
	s->staged_bytes -= sl->prep_bytes;
	s->prep_bytes -= sl->prep_bytes;
	sl->prep_bytes = 0;
	shadow_release(s);
}

/* Free the shadow once no slot's prepared frames are in it. */
static void shadow_release(shim *s)
{
	for (unsigned k = 0; s->shadow && k < SLOTS; k++)
		if (s->slots[k].used && s->slots[k].in_shadow && s->slots[k].prepped)
			return;
	free(s->shadow);
	s->shadow = NULL;
	s->staged_bytes -= s->shadow_bytes;
	s->prep_bytes -= s->shadow_bytes;
	s->shadow_bytes = 0;
}

/* Free every prepared change, to make room for frames. */
static void drop_preps(shim *s)
{
	changes_prep_drop(&s->chg, NULL); /* its commit decodes: no list of it stands */
	for (unsigned k = 0; k < SLOTS; k++)
		slot_drop_preps(s, &s->slots[k]);
}

/* Frames of a keyframe stream written while staged (place_key) into
 * the buffer (shadow 0) or the shadow (1) are there only until something
 * else writes it: forget them in every keyframe slot but keep, whose
 * commit then decodes them again. */
static void unplace_keys(shim *s, const slot *keep, int shadow)
{
	for (unsigned k = 0; k < SLOTS; k++) {
		slot *sl = &s->slots[k];
		if (sl != keep && sl->used && sl->key && sl->prepped && sl->in_shadow == shadow)
			slot_drop_preps(s, sl);
	}
}

/* The main thread's decoder, made when first needed; NULL: no memory. */
static bfp_decoder *main_decoder(shim *s)
{
	if (!s->dec && (s->dec = malloc(sizeof(*s->dec))) && bfp_decoder_init(s->dec, 0) != BFP_OK) {
		free(s->dec);
		s->dec = NULL;
	}
	return s->dec;
}

/* The main thread's zstd workspace, made when first needed; 0: no memory
 * (a build without zstd needs none). */
int stage_zws(shim *s)
{
	size_t n = bfp_zstd_workspace_size();
	if (n && !s->zws)
		s->zws = malloc(n);
	return !n || s->zws;
}

/* Once every frame of sl is prepared, its change list is known: write it
 * (--changes; a few entries a call, until now_s() passes until), so that
 * its commit only renames it into place. 1 if some is left to write. */
static int prepare_list(shim *s, slot *sl, double until)
{
	if (!s->chg.keep || !sl->count || sl->prepped != sl->count)
		return 0;
	if (!changes_prep_has(&s->chg, sl)) {
		if (changes_ready(&s->chg, s->w.fd, sl->base))
			return 0;
		const frame_changes **fc = malloc((size_t)sl->count * sizeof(*fc));
		const uint32_t **crc = malloc((size_t)sl->count * sizeof(*crc));
		int rc = -1;
		if (fc && crc) {
			for (uint32_t i = 0; i < sl->count; i++) {
				const prep *p = sl->preps[i];
				fc[i] = p ? &p->fc : NULL;
				crc[i] = p && p->has_crc ? &p->crc : NULL;
			}
			rc = changes_prep_start(&s->chg, sl, s->w.h->model_id, s->w.h->n_params,
						sl->base, sl->target,
						(const struct frame_changes *const *)fc, crc,
						sl->count);
		}
		free(fc);
		free(crc);
		if (rc)
			return 0; /* its commit writes it */
	}
	return changes_prep_step(&s->chg, until);
}

/* Prepare frames of the patch that commits next while the actor still
 * runs on the buffer's version: decode and verify each against the
 * buffer (it stays at the base until this patch commits), keeping the
 * changes, so the commit only writes values; once all are, write its
 * change list. Works for at most budget_s; returns 1 if frames are left
 * to prepare or the list to write. A frame that fails is dropped (its
 * NACK brings it again; nothing was written). */
int stage_prepare_some(shim *s, double budget_s)
{
	if (s->no_prep || shim_state(s) != WBUF_READY)
		return 0;
	if (s->dma)
		return 0; /* the DMA backend decodes at commit */
	slot *sl = next_slot(s, 0);
	/* refusals that keep coming mean the buffer itself no longer holds
	 * the base: stop here, and let the commit find it out and resync */
	if (!sl || sl->key || sl->base != shim_version(s) || sl->refused >= PREP_REFUSALS)
		return 0;
	double t0 = now_s();
	if (sl->prepped == sl->have)
		return prepare_list(s, sl, t0 + budget_s);
	if (!main_decoder(s)) {
		s->no_prep = 1;
		return 0;
	}
	const bfp_apply_opts o = apply_opts(s, sl->base);
	uint32_t done = 0;
	for (uint32_t i = 0; i < sl->hi; i++) {
		/* a keyframe-coded frame of the patch (FORMAT.md 2.1 IN_PATCH)
		 * needs no base: the commit decodes it */
		if (!sl->frames[i] || sl->preps[i] || !bfp_encoding_is_delta(sl->frames[i][5]))
			continue;
		if (done && (done & 15) == 0 && now_s() - t0 > budget_s)
			return 1;
		/* every change takes at least its sign bit, and a frame carries
		 * at most BFP_CHANGES_MAX: this bounds what the prepared changes
		 * can take before the work of decoding; they get at most half
		 * the budget, frames always come first */
		uint64_t most_n = 8 * (uint64_t)sl->flen[i];
		if (most_n > BFP_CHANGES_MAX)
			most_n = BFP_CHANGES_MAX;
		uint64_t most = sizeof(prep) + 6 * most_n;
		if (s->prep_bytes + most > stage_budget(s) / 2 ||
		    s->staged_bytes + most > stage_budget(s))
			return 0; /* over budget: the commit decodes the rest */
		done++;
		bfp_frame_header h;
		bfp_decoder *d = s->dec;
		/* a frame coded with the model of an earlier frame (BFP_ENC_SPARSE_REF)
		 * waits for that frame: the commit decodes it */
		bfp_status st = bfp_decoder_model_for(d, sl->frames[i], sl->flen[i],
						      (const uint8_t *const *)sl->frames, sl->flen,
						      sl->hi);
		if (st == BFP_E_NO_MODEL)
			continue;
		if (st == BFP_OK)
			st = bfp_decode_verify(d, &o, sl->frames[i], sl->flen[i], s->w.params,
					       s->w.h->n_params, &h);
		if (st != BFP_OK) {
			if (s->prep_fail++ < 10)
				fprintf(stderr, "bfpatch-shim: frame %u of version %u refused: %s\n", i,
					sl->target, bfp_status_str(st));
			s->bad++;
			sl->refused++;
			sl->bytes -= sl->flen[i];
			s->staged_bytes -= sl->flen[i];
			free(sl->frames[i]);
			sl->frames[i] = NULL;
			sl->flen[i] = 0;
			sl->have--;
			continue;
		}
		const uint32_t nch = bfp_decoder_changes(d, NULL, NULL);
		size_t bytes = sizeof(prep) + (size_t)nch * 6;
		prep *p = malloc(bytes);
		if (!p)
			return 0;
		uint16_t *val = (uint16_t *)(void *)(p->v + nch);
		p->fc = frame_changes_keep(d, &h, p->v, val);
		/* its list entry's CRC, summed now rather than in the commit */
		p->has_crc = s->chg.keep != 0;
		p->crc = p->has_crc ? changes_entry_crc(&s->chg, p->fc.range_begin, p->fc.range_len,
							p->fc.pos, p->fc.val, p->fc.n)
				    : 0;
		slot_add_prep(s, sl, i, p, bytes);
	}
	return prepare_list(s, sl, t0 + budget_s);
}

/* Commit sl from its prepared frames: the apply threads write their
 * values (a keyframe stream's: in the buffer already, or copied from the
 * shadow first), then check each such range's hash in the buffer (what
 * was verified while staging was the base with the changes; this also
 * catches a buffer that changed since, e.g. an actor writing into its
 * weights), and decode, verify and write the other frames. */
static int commit_prepared(shim *s, slot *sl, uint32_t base, const apply_ctl *ctl,
			   apply_result *res, char *err, size_t errlen)
{
	const frame_changes **fc = malloc((size_t)sl->count * sizeof(*fc));
	if (!fc) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (uint32_t i = 0; i < sl->count; i++) {
		fc[i] = sl->preps[i] ? &sl->preps[i]->fc : NULL;
		if (fc[i] && sl->in_shadow) /* keyframes decoded while staged: copied */
			memcpy(s->w.params + fc[i]->range_begin, s->shadow + fc[i]->range_begin,
			       (size_t)fc[i]->range_len * 2);
	}
	apply_ctl c = *ctl;
	c.changes = fc;
	int failed = patch_apply_frames((const uint8_t *const *)sl->frames, sl->flen, sl->count,
					s->w.params, s->w.h->n_params, s->w.h->model_id, base, &c,
					res, err, errlen);
	free(fc);
	return failed;
}

/* The buffer now holds version target: drop what that made stale (slots
 * up to it, a keyframe stream written in place so far), reset repair, and
 * tell upstream the version held. */
static void committed_to(shim *s, uint32_t target)
{
	inplace_reset(s);
	for (unsigned i = 0; i < SLOTS; i++)
		if (s->slots[i].used && s->slots[i].target <= target)
			slot_free(s, &s->slots[i]);
	s->nack_backoff_ms = s->cf.nack_ms;
	s->nack_rounds = 0;
	s->want_key = 0;
	stage_join(s);
}

/* Apply every frame of sl into the buffer, verified, and publish it. */
static int commit(shim *s, slot *sl)
{
	char err[512];
	double t0 = now_s();
	uint32_t base = shim_version(s);
	int resume = shim_state(s) == WBUF_COMMITTING;
	int key = sl->key;
	if (frames_check_cover((const uint8_t *const *)sl->frames, sl->count, s->w.h->n_params,
			       err, sizeof(err))) {
		/* nothing written: drop it, and get it again from keyframes */
		fprintf(stderr, "bfpatch-shim: version %u not committed: %s\n", sl->target, err);
		events_emit(&s->ev, "resync", "\"version\":%u,\"reason\":\"cover\"", sl->target);
		s->resyncs++;
		s->want_key = 1;
		slot_free(s, sl);
		stage_join(s);
		return 0;
	}
	events_emit(&s->ev, "apply_begin", "\"version\":%u", sl->target);
	unplace_keys(s, sl, 0); /* this commit writes over every range */
	wbuf_begin(&s->w, sl->target, key ? WBUF_F_KEY : 0);
	apply_ctl ctl = {.threads = s->cf.threads, .resume = resume, .undo_note = wbuf_undo_note,
			 .undo_done = wbuf_undo_done, .undo = &s->undo};
	/* --changes: the journal's hooks see every delta frame's positions
	 * before its values are written; the recorder keeps them and calls
	 * the journal's in turn */
	const int rec = !key && s->chg.keep && !changes_ready(&s->chg, s->w.fd, base) &&
			!changes_begin(&s->chg, (const uint8_t *const *)sl->frames, sl->flen,
				       sl->count, s->w.params);
	if (rec) {
		for (uint32_t i = 0; !resume && i < sl->count; i++)
			if (sl->preps[i])
				changes_take(&s->chg, i, sl->preps[i]->fc.pos, sl->preps[i]->fc.val,
					     sl->preps[i]->fc.n,
					     sl->preps[i]->has_crc ? &sl->preps[i]->crc : NULL);
		s->chg.undo_note = ctl.undo_note;
		s->chg.undo_done = ctl.undo_done;
		s->chg.undo = ctl.undo;
		ctl.undo_note = changes_undo_note;
		ctl.undo_done = changes_undo_done;
		ctl.undo = &s->chg;
	}
	apply_result res;
	int crash = s->cf.crash_after && s->commits + 1 >= s->cf.crash_after;
#ifdef BFP_SHIM_DPDK
	if (crash && s->dma && !resume) {
		shim_dma_tear_test(s->dma); /* testing: dies in the middle of a copy */
		crash = 0;
	}
#endif
	if (crash) {
		/* testing: die after half of the frames, like a SIGKILL would */
		apply_ctl half = ctl;
		patch_apply_frames((const uint8_t *const *)sl->frames, sl->flen, sl->count / 2,
				   s->w.params, s->w.h->n_params, s->w.h->model_id, base, &half,
				   NULL, err, sizeof(err));
		fprintf(stderr, "bfpatch-shim: --crash-after: killing myself in the middle of the "
			"commit to version %u\n", sl->target);
		raise(SIGKILL);
	}
	const char *backend = "cpu";
	int failed = -1;
#ifdef BFP_SHIM_DPDK
	if (s->dma && !resume) {
		/* decode into staging, verify, DMA into the buffer, verify again */
		const bfp_apply_opts o = apply_opts(s, base);
		shim_dma_result dr;
		const shim_dma_journal jn = shim_dma_journal_of(&s->dlog);
		const shim_dma_journal jc = {.note = changes_dma_note, .retire = changes_dma_retire,
					     .arg = &s->chg};
		s->chg.dma_note = s->dlog.map ? jn.note : NULL;
		s->chg.dma_retire = s->dlog.map ? jn.retire : NULL;
		s->chg.dma_arg = jn.arg;
		failed = shim_dma_apply(s->dma, s->dma_dec, &o, (const uint8_t *const *)sl->frames,
					sl->flen, sl->count, s->w.params, s->w.h->n_params,
					rec ? &jc : s->dlog.map ? &jn : NULL, &dr, err, sizeof(err));
		if (!failed) {
			backend = "dma";
			memset(&res, 0, sizeof(res));
			res.verified_bytes = 2 * dr.verified_params;
		} else {
			/* the ranges before the failure are at the target: the CPU
			 * path in resume mode finishes, or finds the real fault */
			fprintf(stderr, "bfpatch-shim: DMA commit to %u: %s; finishing on the CPU\n",
				sl->target, err);
			ctl.resume = 1;
		}
	}
#endif
	uint32_t prepped = 0;
	if (failed && !ctl.resume && sl->prepped) {
		prepped = sl->prepped;
		failed = commit_prepared(s, sl, base, &ctl, &res, err, sizeof(err));
	} else if (failed) {
		failed = patch_apply_frames((const uint8_t *const *)sl->frames, sl->flen, sl->count,
					    s->w.params, s->w.h->n_params, s->w.h->model_id, base,
					    &ctl, &res, err, sizeof(err));
	}
	if (s->dlog.map) /* records a failed DMA pass left: at target or redone now */
		wbuf_dlog_rollback(&s->dlog, 1);
	if (failed) {
		changes_end(&s->chg);
		/* that frame wrote nothing, others did: the buffer is no version */
		wbuf_invalid(&s->w);
		s->resyncs++;
		fprintf(stderr, "bfpatch-shim: commit %u -> %u failed verification (%s); the "
			"buffer is invalid until a keyframe resync\n", base, sl->target, err);
		events_emit(&s->ev, "resync", "\"version\":%u,\"reason\":\"verification\"",
			    sl->target);
		slot_free(s, sl);
		stage_join(s);
		return 0;
	}
	/* the change list is in place before the version that names it: the
	 * one written while every frame was prepared, if this commit wrote
	 * exactly those frames' changes; else written now */
	char chg[128] = "";
	const uint64_t chg_before = s->chg.changes;
	const double chg_t0 = now_s();
	double pre_ms = 0;
	const int placed = !key && prepped && prepped == sl->count &&
			   !changes_prep_place(&s->chg, sl, base, sl->target, &pre_ms);
	changes_prep_drop(&s->chg, NULL); /* one of frames this commit did not write */
	if (placed) {
		changes_end(&s->chg);
		snprintf(chg, sizeof(chg), ", change list of %" PRIu64 " weights (written while "
			 "staged in %.1f ms, placed in %.1f ms)", s->chg.changes - chg_before,
			 pre_ms, (now_s() - chg_t0) * 1e3);
	} else if (key && s->chg.keep && !changes_ready(&s->chg, s->w.fd, base))
		changes_key(&s->chg, s->w.h->model_id, s->w.h->n_params, base, sl->target);
	else if (rec && !changes_write(&s->chg, s->w.h->model_id, s->w.h->n_params, base,
				       sl->target))
		snprintf(chg, sizeof(chg), ", change list of %" PRIu64 " weights in %.1f ms",
			 s->chg.changes - chg_before, (now_s() - chg_t0) * 1e3);
	else if (rec)
		snprintf(chg, sizeof(chg), ", no change list");
	events_emit(&s->ev, "apply_end", "\"version\":%u,\"verified_bytes\":%" PRIu64
		    ",\"backend\":\"%s\"", sl->target, res.verified_bytes, backend);
	wbuf_end(&s->w);
	changes_prune(&s->chg, sl->target);
	double ms = (now_s() - t0) * 1e3;
	s->commits++;
	s->key_commits += key;
	s->verified_bytes += res.verified_bytes;
	s->commit_ms_total += ms;
	if (ms > s->commit_ms_max)
		s->commit_ms_max = ms;
	events_emit(&s->ev, "commit", "\"version\":%u,\"ms\":%.3f,\"key\":%s,\"frames\":%u,"
		    "\"prepared\":%u", sl->target, ms, key ? "true" : "false", sl->count, prepped);
	char how[96] = "";
	if (resume)
		snprintf(how, sizeof(how), ", %" PRIu64 " ranges were done before a crash",
			 res.skipped_frames);
	else if (prepped)
		snprintf(how, sizeof(how), ", %u of the frames decoded and verified while staged",
			 prepped);
	printf("bfpatch-shim: committed version %u -> %u%s: %u frames, %" PRIu64 " bytes, %" PRIu64
	       " bytes verified, %.1f ms (%s)%s%s\n", base, sl->target,
	       key ? " (keyframe resync)" : "", sl->count, sl->bytes, res.verified_bytes, ms,
	       backend, how, chg);
	fflush(stdout);
	committed_to(s, sl->target); /* sl among them */
	return 0;
}

/* The newest version reachable from first through complete patches: an
 * actor several versions behind catches up at one safe point. */
static uint32_t staged_through(const shim *s, const slot *first)
{
	uint32_t far = first->target;
	for (int more = 1; more;) {
		more = 0;
		for (unsigned i = 0; i < SLOTS && !more; i++) {
			const slot *k = &s->slots[i];
			if (k->used && !k->key && k->base == far && slot_complete(k)) {
				far = k->target;
				more = 1;
			}
		}
	}
	return far;
}

/* Commit what is complete, in order, as far as the safe point allows. */
int stage_try_commit(shim *s)
{
	slot *n;
	while ((n = next_slot(s, 1))) {
		/* the safe point gates ordinary commits only: an interrupted
		 * commit or an invalid buffer is no version an actor can use */
		if (s->cf.safe_point && shim_state(s) == WBUF_READY) {
			uint32_t far = staged_through(s, n);
			if (atomic_load(&s->w.h->staged) != far) {
				atomic_store(&s->w.h->staged, far);
				printf("bfpatch-shim: version %u staged; waiting for the actor's safe "
				       "point\n", far);
				fflush(stdout);
			}
			uint32_t allow = atomic_load(&s->w.h->allow);
			if (allow < n->target)
				return 0;
		}
		if (commit(s, n))
			return -1;
	}
	return 0;
}


/* Make room for index i in sl's arrays; they count against --max-stage
 * (a hostile frame_count must not buy 20 bytes per frame it names). */
static int slot_reserve(shim *s, slot *sl, uint32_t i)
{
	if (i < sl->cap)
		return 0;
	if (i >= max_frames(s))
		return -1;
	uint64_t nc = sl->count ? sl->count : (uint64_t)sl->cap * 2;
	if (nc < (uint64_t)i + 1)
		nc = (uint64_t)i + 1;
	if (nc < 64)
		nc = 64;
	if (nc > max_frames(s))
		nc = max_frames(s);
	const uint64_t add = (nc - sl->cap) * IDX_BYTES;
	if (s->staged_bytes + add > stage_budget(s) && s->prep_bytes)
		drop_preps(s);
	if (s->staged_bytes + add > stage_budget(s))
		return -1;
	uint8_t **f = realloc(sl->frames, nc * sizeof(*f));
	if (!f)
		return -1;
	sl->frames = f;
	uint32_t *l = realloc(sl->flen, nc * sizeof(*l));
	if (!l)
		return -1;
	sl->flen = l;
	prep **pp = realloc(sl->preps, nc * sizeof(*pp));
	if (!pp)
		return -1;
	sl->preps = pp;
	memset(f + sl->cap, 0, (nc - sl->cap) * sizeof(*f));
	memset(l + sl->cap, 0, (nc - sl->cap) * sizeof(*l));
	memset(pp + sl->cap, 0, (nc - sl->cap) * sizeof(*pp));
	sl->cap = (uint32_t)nc;
	sl->idx_bytes += add;
	s->staged_bytes += add;
	return 0;
}

/* The frame count h tells: its frame_count, or for a streamed frame that
 * reaches the model's end, index + 1 (frames tile the model in index
 * order, FORMAT.md 2.5); 0 if it tells none. */
static uint32_t told_count(const shim *s, const bfp_frame_header *h)
{
	if (h->frame_count)
		return h->frame_count;
	if (h->range_begin + h->range_len == s->w.h->n_params && h->frame_index < UINT32_MAX)
		return h->frame_index + 1;
	return 0;
}

static slot *slot_get(shim *s, const bfp_frame_header *h, int key)
{
	uint32_t told = told_count(s, h);
	for (unsigned i = 0; i < SLOTS; i++) {
		slot *k = &s->slots[i];
		if (k->used && k->target == h->target_version && k->key == key &&
		    (key || k->base == h->base_version)) {
			if (!told || (k->count ? k->count == told : k->hi <= told)) {
				if (told && !k->count) {
					if (told > max_frames(s)) {
						slot_free(s, k);
						return NULL;
					}
					k->count = told;
				}
				return k;
			}
			/* a different patch to the same version (a forged frame or
			 * a broken sender: patches are canonical): start over */
			if (s->recount++ < 3)
				fprintf(stderr, "bfpatch-shim: a frame of version %u tells %u frames, "
					"the %u staged told %u: dropping those\n", h->target_version,
					told, k->have, k->count ? k->count : k->hi);
			slot_free(s, k);
			break;
		}
	}
	uint32_t fl = stage_floor_version(s);
	slot *sl = NULL;
	for (unsigned i = 0; i < SLOTS && !sl; i++)
		if (!s->slots[i].used || s->slots[i].target < fl)
			sl = &s->slots[i];
	/* all slots busy: a keyframe stream replaces the furthest patch, if
	 * it leads further (else those patches reach its version anyway);
	 * with keyframe streams in every slot, the incomplete one leading
	 * least far, if this one leads further (parts of streams nobody
	 * repairs would otherwise keep every newer stream out for good) */
	if (key && !sl) {
		for (unsigned i = 0; i < SLOTS; i++)
			if (!s->slots[i].key && (!sl || s->slots[i].target > sl->target))
				sl = &s->slots[i];
		if (!sl)
			for (unsigned i = 0; i < SLOTS; i++)
				if (!slot_complete(&s->slots[i]) &&
				    (!sl || s->slots[i].target < sl->target))
					sl = &s->slots[i];
		if (sl && sl->target >= h->target_version)
			sl = NULL;
	}
	if (!sl || told > max_frames(s))
		return NULL;
	if (sl->used)
		slot_free(s, sl);
	sl->used = 1;
	sl->base = key ? 0 : h->base_version;
	sl->target = h->target_version;
	sl->count = told;
	sl->key = key;
	if (told && slot_reserve(s, sl, told - 1)) {
		slot_free(s, sl);
		return NULL;
	}
	events_emit(&s->ev, "first_frame", "\"version\":%u,\"key\":%s", sl->target,
		    key ? "true" : "false");
	return sl;
}

static void inplace_reset(shim *s)
{
	free(s->ip.done);
	free(s->ip.begin);
	free(s->ip.len);
	memset(&s->ip, 0, sizeof(s->ip));
}

/* A keyframe stream goes into the buffer in place when staging it would
 * take more than half of --max-stage (a large model: about 2.1 bytes per
 * parameter), and the buffer holds no version to keep serving: after a
 * failed verification (RESYNC), or when the shim asked for keyframes
 * because its patches cannot be repaired, also after a restart in the
 * middle of a commit (then the buffer is invalidated first: actors see no
 * version until the stream is complete). Frames of the stream staged
 * before are written in place then: staged, it could never complete. */
static int inplace_wanted(shim *s, const bfp_frame_header *h, size_t len)
{
	if (s->ip.done) {
		/* the stream being written takes its streamed frames (count 0)
		 * too; another stream's streamed frames are staged */
		if (shim_state(s) == WBUF_RESYNC)
			return h->frame_count || h->target_version == s->ip.target;
		inplace_reset(s); /* a version was committed meanwhile: never write into it */
	}
	if (!h->frame_count)
		return 0; /* streamed keyframes: their count comes last */
	slot *staged = NULL;
	for (unsigned i = 0; i < SLOTS; i++)
		if (s->slots[i].used && s->slots[i].key && s->slots[i].target == h->target_version)
			staged = &s->slots[i];
	/* the stream's size by the frame at hand; once staging began, by the
	 * frames staged so far too (a first frame shorter than the rest) */
	uint64_t size = (uint64_t)h->frame_count * len;
	if (staged && staged->have &&
	    (uint64_t)h->frame_count * (staged->bytes / staged->have) > size)
		size = (uint64_t)h->frame_count * (staged->bytes / staged->have);
	if (size <= stage_budget(s) / 2)
		return 0;
	if (shim_state(s) != WBUF_RESYNC) {
		if (!s->want_key)
			return 0; /* the buffer's version stays, or the commit waits */
		fprintf(stderr, "bfpatch-shim: the keyframe stream of version %u (%u frames) is "
			"larger than half of --max-stage: the buffer is invalid until it is written "
			"in place\n", h->target_version, h->frame_count);
		wbuf_invalid(&s->w);
	}
	if (staged) {
		for (uint32_t i = 0; i < staged->cap; i++) {
			bfp_frame_header fh;
			if (staged->frames[i] &&
			    bfp_frame_parse(staged->frames[i], staged->flen[i], &fh) == BFP_OK &&
			    inplace_frame(s, staged->frames[i], staged->flen[i], &fh,
					  h->frame_count))
				break; /* out of memory: the rest comes again */
		}
		slot_free(s, staged);
	}
	return 1;
}

/* One frame of a keyframe stream written in place: checked (hash of the
 * values it writes) before it is written; the version is published once
 * every frame of the stream is, and they tile the model. count is the
 * stream's frame count: h's own, or for a streamed frame (frame_count 0,
 * FORMAT.md 2.5), one a counted frame of the same stream told; 0: none
 * known (then only a stream already being written can take h). */
static int inplace_frame(shim *s, const uint8_t *p, size_t len, const bfp_frame_header *h,
			 uint32_t count)
{
	shim_inplace *ip = &s->ip;
	if (shim_state(s) != WBUF_RESYNC) { /* the buffer holds a version: not in place */
		inplace_reset(s);
		s->bad++;
		return 0;
	}
	if (ip->done && (h->target_version != ip->target || (count && count != ip->count))) {
		if (h->target_version < ip->target) {
			s->old++;
			return 0;
		}
		inplace_reset(s); /* a newer stream: start over */
	}
	if (!ip->done) {
		if (!count || count > max_frames(s)) {
			s->bad++;
			return 0;
		}
		ip->done = calloc(count, 1);
		ip->begin = calloc(count, sizeof(*ip->begin));
		ip->len = calloc(count, sizeof(*ip->len));
		if (!ip->done || !ip->begin || !ip->len || !main_decoder(s) || !stage_zws(s)) {
			inplace_reset(s);
			return -1;
		}
		ip->target = h->target_version;
		ip->count = count;
		ip->t0 = now_s();
		printf("bfpatch-shim: keyframe stream of version %u (%u frames) written into the "
		       "buffer as it arrives (larger than half of --max-stage)\n", ip->target,
		       ip->count);
		fflush(stdout);
		events_emit(&s->ev, "apply_begin", "\"version\":%u", ip->target);
	}
	if (h->frame_index >= ip->count) { /* not of the stream it claims */
		s->bad++;
		return 0;
	}
	if (ip->done[h->frame_index]) {
		s->dup++;
		return 0;
	}
	const bfp_apply_opts o = apply_opts(s, 0);
	unplace_keys(s, NULL, 0); /* staged streams' frames written meanwhile are written over */
	bfp_status st = bfp_decode_apply(s->dec, &o, p, len, s->w.params, s->w.h->n_params, NULL);
	if (st != BFP_OK) { /* checked before anything is written */
		if (s->prep_fail++ < 10)
			fprintf(stderr, "bfpatch-shim: keyframe %u of version %u refused: %s\n",
				h->frame_index, h->target_version, bfp_status_str(st));
		s->bad++;
		return 0;
	}
	ip->done[h->frame_index] = 1;
	ip->begin[h->frame_index] = h->range_begin;
	ip->len[h->frame_index] = h->range_len;
	ip->have++;
	ip->bytes += len;
	ip->verified += 2 * (uint64_t)h->range_len; /* its hash was checked */
	s->last_frame = now_s();
	s->next_nack = s->last_frame + s->nack_backoff_ms / 1e3;
	s->nack_rounds = 0;
	if (ip->have < ip->count)
		return 0;
	/* every frame written: they must tile [0, n_params) in index order */
	uint64_t at = 0;
	for (uint32_t i = 0; i < ip->count && at != UINT64_MAX; i++)
		at = ip->begin[i] == at ? at + ip->len[i] : UINT64_MAX;
	if (at != s->w.h->n_params) {
		fprintf(stderr, "bfpatch-shim: keyframe stream of version %u does not tile the "
			"model; waiting for another\n", ip->target);
		inplace_reset(s);
		return 0;
	}
	uint32_t base = shim_version(s), target = ip->target;
	if (s->chg.keep && !changes_ready(&s->chg, s->w.fd, base))
		changes_key(&s->chg, s->w.h->model_id, s->w.h->n_params, base, target);
	wbuf_begin(&s->w, target, WBUF_F_KEY);
	wbuf_end(&s->w);
	changes_prune(&s->chg, target);
	double ms = (now_s() - ip->t0) * 1e3;
	s->commits++;
	s->key_commits++;
	s->commit_ms_total += ms;
	if (ms > s->commit_ms_max)
		s->commit_ms_max = ms;
	s->verified_bytes += ip->verified;
	events_emit(&s->ev, "apply_end", "\"version\":%u,\"verified_bytes\":%" PRIu64
		    ",\"backend\":\"cpu\"", target, ip->verified);
	events_emit(&s->ev, "commit", "\"version\":%u,\"ms\":%.3f,\"key\":true,\"frames\":%u,"
		    "\"prepared\":0", target, ms, ip->count);
	printf("bfpatch-shim: committed version %u -> %u (keyframe resync, written in place): %u "
	       "frames, %" PRIu64 " bytes, %" PRIu64 " bytes verified, %.1f ms since its first "
	       "frame\n", base, target, ip->count, ip->bytes, ip->verified, ms);
	fflush(stdout);
	committed_to(s, target);
	return 0;
}


/* A frame of the version that commits next does not fit --max-stage:
 * drop the furthest later versions staged (they come again by NACK)
 * rather than wait on them for ever. */
static void make_room_for_next(shim *s, const slot *next, size_t len)
{
	while (s->staged_bytes + len > stage_budget(s)) {
		slot *far = NULL;
		for (unsigned i = 0; i < SLOTS; i++) {
			slot *k = &s->slots[i];
			if (k->used && k != next && k->target > next->target &&
			    (!far || k->target > far->target))
				far = k;
		}
		if (!far)
			return;
		if (s->evicted++ < 3)
			fprintf(stderr, "bfpatch-shim: --max-stage is full: version %u staged is "
				"dropped to make room for version %u, which commits first\n",
				far->target, next->target);
		slot_free(s, far);
	}
}


/* Whether a parsed frame h is of use now, counting it if not: of this
 * model, a version ahead of the buffer's, a patch from the version held
 * (none during a resync), not too far ahead. */
static int frame_wanted(shim *s, const bfp_frame_header *h, int key)
{
	if (h->model_id != s->w.h->model_id) {
		s->other_model++;
		return 0;
	}
	s->heard = now_s(); /* a frame of this model: someone serves it */
	if (h->target_version >= RP_VERSION_NONE) {
		s->bad++; /* the control protocol's reserved values: never a version */
		return 0;
	}
	uint32_t fl = stage_floor_version(s);
	if (!key && shim_state(s) == WBUF_RESYNC && h->target_version >= fl) {
		s->in_resync++; /* of use only after the resync: fetched again then */
		return 0;
	}
	if (h->target_version < fl || (!key && shim_state(s) == WBUF_RESYNC) ||
	    (!key && h->base_version < shim_version(s))) {
		s->old++;
		return 0;
	}
	if (!key && h->target_version - fl >= SLOTS) {
		s->ahead++; /* too far ahead: NACKs, then a keyframe resync */
		return 0;
	}
	if (s->cf.drop_every && s->rx % s->cf.drop_every == 0 && !s->dropped_test) {
		s->dropped_test++; /* testing: lose this one, repair it by NACK */
		return 0;
	}
	return 1;
}

/* A frame (p, len bytes, header h) of the keyframe stream that commits
 * next is decoded, verified and written as it comes (FORMAT.md 2.1:
 * keyframe values need no base): into the buffer while it holds no
 * version (RESYNC: readers take nothing from it), else into the shadow,
 * so that the commit only copies it and checks its range's hash. Its
 * prep (no changes) marks it as written; one stream at a time is written
 * into each (the newest: the others' marks go). Returns 1 and *out, 0
 * (not written: the commit decodes it, as with --no-prepare, --dma, the
 * budget spent, or while frames wait in the socket: a shim that cannot
 * keep up with the link decodes at the commit rather than drop frames),
 * or -1: refused, nothing written (its NACK brings it again). */
static int place_key(shim *s, slot *sl, const uint8_t *p, size_t len,
		     const bfp_frame_header *h, prep **out)
{
	const uint32_t state = shim_state(s);
	const int shadow = state == WBUF_READY;
	if (!sl->key || s->no_prep || s->dma || s->ip.done || state == WBUF_COMMITTING ||
	    s->rx_behind || sl != next_slot(s, 0))
		return 0;
	if (sl->prepped && sl->in_shadow != shadow)
		slot_drop_preps(s, sl); /* the buffer became invalid meanwhile */
	unplace_keys(s, sl, shadow); /* their ranges are written over from here */
	const uint64_t room = shadow && !s->shadow ? s->w.h->n_params * 2 : 0;
	const uint64_t add = sizeof(prep) + room;
	if (s->prep_bytes + add > stage_budget(s) / 2 ||
	    s->staged_bytes + len + add > stage_budget(s))
		return 0;
	if (room && !(s->shadow = malloc((size_t)room)))
		return 0;
	s->shadow_bytes += room;
	s->prep_bytes += room;
	s->staged_bytes += room;
	prep *pp = calloc(1, sizeof(*pp));
	if (!pp || !main_decoder(s) || !stage_zws(s)) {
		free(pp);
		shadow_release(s);
		return 0;
	}
	sl->in_shadow = shadow;
	const bfp_apply_opts o = apply_opts(s, 0);
	bfp_frame_header dh;
	bfp_status st = bfp_decoder_model_for(s->dec, p, len, (const uint8_t *const *)sl->frames,
					      sl->flen, sl->hi);
	if (st == BFP_OK) /* checked whole before anything is written */
		st = bfp_decode_apply(s->dec, &o, p, len, shadow ? s->shadow : s->w.params,
				      s->w.h->n_params, &dh);
	if (st != BFP_OK) {
		if (s->prep_fail++ < 10)
			fprintf(stderr, "bfpatch-shim: keyframe %u of version %u refused: %s\n",
				h->frame_index, h->target_version, bfp_status_str(st));
		s->bad++;
		sl->refused++;
		free(pp);
		shadow_release(s);
		return -1;
	}
	pp->fc.range_begin = dh.range_begin;
	pp->fc.range_len = dh.range_len;
	pp->fc.pos = pp->v;
	pp->fc.val = (const uint16_t *)(const void *)pp->v;
	*out = pp;
	return 1;
}

/* Keep frame p (len bytes, header h) in sl, within --max-stage: prepared
 * changes give way first, then versions after the one that commits
 * next; a keyframe stream's frame is written into the buffer if it holds
 * no version (place_key). 0, or -1 when out of memory. */
static int slot_store(shim *s, slot *sl, const uint8_t *p, size_t len,
		      const bfp_frame_header *h)
{
	if ((sl->count && h->frame_index >= sl->count) || slot_reserve(s, sl, h->frame_index)) {
		s->bad++; /* past the end its patch told, or more than can be staged */
		return 0;
	}
	if (sl->frames[h->frame_index]) {
		s->dup++;
		return 0;
	}
	if (s->staged_bytes + len > stage_budget(s) && s->prep_bytes)
		drop_preps(s); /* frames come first: the commit decodes instead */
	if (s->staged_bytes + len > stage_budget(s) && sl == next_slot(s, 0))
		make_room_for_next(s, sl, len);
	if (s->staged_bytes + len > stage_budget(s)) {
		if (s->over_budget++ < 3)
			fprintf(stderr, "bfpatch-shim: a frame of version %u (%zu bytes) does not fit "
				"the staging budget: %" PRIu64 " of %" PRIu64 " bytes staged (%s); it "
				"is dropped and asked for again\n", h->target_version, len,
				s->staged_bytes, stage_budget(s),
				stage_budget(s) < s->cf.max_stage ? "all this model's versions can take"
								  : "--max-stage");
		return 0;
	}
	prep *placed = NULL;
	if (place_key(s, sl, p, len, h, &placed) < 0)
		return 0;
	sl->frames[h->frame_index] = malloc(len);
	if (!sl->frames[h->frame_index]) {
		free(placed);
		fprintf(stderr, "bfpatch-shim: out of memory staging a frame of version %u (%" PRIu64
			" bytes staged): stopping\n", h->target_version, s->staged_bytes);
		return -1;
	}
	if (placed)
		slot_add_prep(s, sl, h->frame_index, placed, sizeof(prep));
	memcpy(sl->frames[h->frame_index], p, len);
	sl->flen[h->frame_index] = (uint32_t)len;
	sl->bytes += len;
	s->staged_bytes += len;
	sl->have++;
	if (h->frame_index >= sl->hi)
		sl->hi = h->frame_index + 1;
	s->last_frame = now_s();
	s->next_nack = s->last_frame + s->nack_backoff_ms / 1e3;
	if (sl == next_slot(s, 0))
		s->nack_rounds = 0;
	if (sl->have == sl->count)
		events_emit(&s->ev, "staged", "\"version\":%u,\"frames\":%u,\"bytes\":%" PRIu64
			    ",\"key\":%s", sl->target, sl->count, sl->bytes,
			    sl->key ? "true" : "false");
	return 0;
}

int stage_frame(shim *s, const uint8_t *p, size_t len)
{
	bfp_frame_header h;
	bfp_status ps = bfp_frame_parse(p, len, &h);
	if (ps != BFP_OK) {
		s->bad++;
		if (ps == BFP_E_ENCODING && !(s->told_encoding[p[5] / 8] & (1u << (p[5] % 8)))) {
			/* a sender newer than this build (FORMAT.md 6): say so once */
			s->told_encoding[p[5] / 8] |= (uint8_t)(1u << (p[5] % 8));
			fprintf(stderr, "bfpatch-shim: frames in encoding %u, which this build does "
				"not read, are dropped (counted as bad): upgrade this shim, or have "
				"the publisher send encodings it reads (docs/DEPLOY.md, 'Upgrading a "
				"running tree', gives the publish option for each revision)\n",
				p[5]);
		}
		return 0;
	}
	int key = !bfp_frame_in_patch(&h); /* a frame of a keyframe stream */
	if (!frame_wanted(s, &h, key))
		return 0;
	if (key && inplace_wanted(s, &h, len))
		return inplace_frame(s, p, len, &h, h.frame_count);
	slot *sl = slot_get(s, &h, key);
	if (!sl) {
		s->ahead++;
		return 0;
	}
	return slot_store(s, sl, p, len, &h);
}

void stage_nack_due(shim *s, double t)
{
	int pending = s->ip.done != NULL;
	for (unsigned i = 0; i < SLOTS; i++)
		pending |= s->slots[i].used && !slot_complete(&s->slots[i]);
	/* behind: upstream has a version none of whose frames came */
	int behind = shim_state(s) != WBUF_RESYNC && s->latest >= stage_floor_version(s) &&
		     !next_slot(s, 0);
	if (!behind)
		s->behind_since = 0;
	else if (s->behind_since == 0)
		s->behind_since = t;
	behind = behind && t - s->behind_since >= 0.3; /* not frames in flight */
	if ((pending || behind || shim_state(s) == WBUF_COMMITTING) && t >= s->next_nack) {
		stage_nack(s);
		s->next_nack = t + s->nack_backoff_ms / 1e3;
		uint32_t cap = s->cf.nack_ms > 1000 ? s->cf.nack_ms : 1000;
		s->nack_backoff_ms = s->nack_backoff_ms * 2 < cap ? s->nack_backoff_ms * 2 : cap;
	}
}

void stage_drop_all(shim *s)
{
	inplace_reset(s);
	for (unsigned i = 0; i < SLOTS; i++)
		slot_free(s, &s->slots[i]);
}

void stage_fini(shim *s)
{
	inplace_reset(s);
	for (unsigned i = 0; i < SLOTS; i++)
		slot_free(s, &s->slots[i]);
	free(s->dec);
	s->dec = NULL;
	free(s->zws);
	s->zws = NULL;
	changes_fini(&s->chg);
}
