/*
 * main.c: bfpatch-shim, the actor-side daemon. It receives frames on a
 * kernel UDP socket (recvmmsg), stages those of the next versions while
 * the actor runs on the current one, NACKs what is missing, and when a
 * version is complete (and the actor is at a safe point, if so
 * configured) applies it into the weight buffer (wbuf.h) on several
 * threads under the buffer's commit marker: every frame is checked and
 * hash-verified before it is written.
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
 * room; that commit then only writes values. Frames not prepared by then
 * are decoded and verified at the commit.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bfpatch.h"
#include "events.h"
#include "model.h"
#include "patch.h"
#include "proto.h"
#include "auth.h"
#include "wbuf.h"
#include "shim.h"
#ifdef BFP_SHIM_DPDK
#include "shim_dpdk.h"
#endif
#include "util.h"

static volatile sig_atomic_t quit, dump_stats;
static void on_signal(int s)
{
	if (s == SIGUSR1)
		dump_stats = 1;
	else
		quit = 1;
}

#define SLOTS 4
/* NACK rounds without progress before asking for a keyframe stream */
#define NACK_GIVE_UP 8
/* frames of one version that preparation refuses before it stops trying */
#define PREP_REFUSALS 3

typedef struct slot {
	int used;
	uint32_t base, target, have;
	uint32_t count;         /* frames of the patch; 0: not known yet (streamed
				 * frames, FORMAT.md 2.5) */
	uint32_t hi;            /* highest index staged, plus one */
	uint32_t cap;           /* entries of frames[] and flen[] */
	int key;                /* a keyframe stream (resync), not a patch */
	uint8_t **frames;
	uint32_t *flen;
	struct prep **preps;    /* frames decoded and verified while staging */
	uint32_t prepped;
	uint32_t refused;       /* frames preparation refused (and dropped) */
	uint64_t bytes;         /* of the frames */
	uint64_t prep_bytes;
	uint64_t idx_bytes;     /* of frames[], flen[] and preps[] */
} slot;

/* A delta frame decoded and verified against the buffer's version while
 * it was staged (bfp_decode_verify): committing it is writing n values. */
typedef struct prep {
	frame_changes fc;       /* pos and val point into v[] */
	uint32_t v[];           /* n offsets, then n uint16_t values */
} prep;

typedef struct shim {
	wbuf w;
	wbuf_undo undo;         /* PATH.undo: values a frame in writing overwrote */
	int sock;
	struct sockaddr_in upstream;
	uint16_t data_port;
	uint32_t rate_kbps;
	uint32_t nack_ms;
	uint32_t drop_every;    /* testing: discard every Nth frame once */
	uint64_t max_stage;     /* bytes of staged frames, at most */
	double exit_after;      /* testing: stop after this many seconds */
	int safe_point;         /* commit only when the actor allows it */
	int threads;            /* apply threads */
	uint32_t crash_after;   /* testing: SIGKILL itself in a commit */
	events ev;
	rp_auth auth;           /* --key: frames and HEARTBEATs must verify */
	/* the DMA commits' journal, BUFFER.dmalog (map NULL: none); a build
	 * without DPDK still rolls back one a --dma run left */
	wbuf_dlog dlog;
#ifdef BFP_SHIM_DPDK
	shim_dma *dma;          /* --dma: commits move ranges by dmadev */
	shim_port *port;        /* --port: frames from a DPDK port */
	bfp_decoder *dma_dec;
#endif
	/* the main thread's decoder (preparing staged frames, keyframes
	 * written in place: one at a time) and zstd workspace (those, and the
	 * DMA commit), made when first needed */
	bfp_decoder *dec;
	void *zws;
	int no_prep;            /* --no-prepare, or no memory for the decoder */
	slot slots[SLOTS];
	uint64_t staged_bytes;  /* frames and prepared changes */
	uint64_t prep_bytes;    /* prepared changes, at most half of max_stage */
	double last_frame, next_nack;
	uint32_t nack_backoff_ms;
	uint32_t nack_rounds;   /* since the last frame of the wanted version */
	int want_key;           /* JOIN with RP_VERSION_NONE */
	int port_rc;            /* on_frame's result for frames from --port */
	double port_next_watch; /* when to look at the port's link again */
	double port_down_since; /* the link went down then; 0: up */
	unsigned port_failed;   /* restarts in a row that found no server */
	uint32_t latest;        /* newest version upstream has (HEARTBEAT) */
	/* a keyframe stream too big to stage, written into the buffer as its
	 * frames come (the buffer holds no version meanwhile) */
	struct inplace {
		uint32_t target, count, have;
		uint8_t *done;      /* per frame index */
		uint64_t *begin;    /* its range, to check the frames tile */
		uint32_t *len;
		uint64_t bytes, verified;
		double t0;
	} ip;
	/* counters */
	uint64_t rx, rx_bytes, dup, old, ahead, bad, other_model, over_budget, nacks, commits;
	uint64_t in_resync;     /* patch frames while only a keyframe stream helps */
	uint64_t foreign_hb;    /* HEARTBEATs not from --upstream, ignored */
	double heard;           /* when the last HEARTBEAT (from --upstream) or frame of
				 * this model came */
	uint64_t recount;       /* staged patches dropped for another frame count */
	uint64_t evicted;       /* later versions dropped for the next one's frames */
	uint32_t sock_drops;    /* datagrams the kernel dropped, socket full (SO_RXQ_OVFL) */
	uint8_t told_encoding[32]; /* bit e: "encoding e unknown" was logged */
	uint64_t resyncs, key_commits, dropped_test, verified_bytes, auth_fail;
	uint64_t prepared, prep_fail, prep_dropped;
	double commit_ms_total, commit_ms_max;
} shim;

static uint32_t state(const shim *s)
{
	return atomic_load(&s->w.h->state);
}

static uint32_t version(const shim *s)
{
	return atomic_load(&s->w.h->version);
}

static void ctl_send(shim *s, const rp_ctl *c)
{
	uint8_t msg[RP_CTL_HDR + 8 * RP_NACK_MAX + 4 + RP_AUTH_LEN];
	size_t n = rp_auth_ctl_build(&s->auth, msg, sizeof(msg), c);
	if (n)
		sendto(s->sock, msg, n, 0, (const struct sockaddr *)&s->upstream,
		       sizeof(s->upstream));
}

static slot *next_slot(shim *s, int complete);
static uint32_t staged_through(const shim *s, const slot *first);

/* The version a JOIN says the shim holds: the committed one, or the
 * newest its complete staged patches reach (they wait for the actor's
 * safe point; a publisher that took the committed one for the shim's
 * would send them again every 3 s, PROTOCOL.md 2.1). */
static uint32_t join_version(shim *s)
{
	if (s->want_key || state(s) == WBUF_RESYNC)
		return RP_VERSION_NONE;
	uint32_t v = version(s);
	slot *n = state(s) == WBUF_READY ? next_slot(s, 1) : NULL;
	if (n) {
		uint32_t far = staged_through(s, n);
		if (far > v)
			v = far;
	}
	return v;
}

static void join(shim *s)
{
	rp_ctl c;
	memset(&c, 0, sizeof(c));
	c.type = RP_JOIN;
	c.model_id = s->w.h->model_id;
	c.version = join_version(s);
	c.data_port = s->data_port;
	c.rate_kbps = s->rate_kbps;
	ctl_send(s, &c);
}

static void slot_free(shim *s, slot *sl)
{
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
}

/* The first version a frame must lead to, to be of use. */
static uint32_t floor_version(const shim *s)
{
	if (state(s) == WBUF_RESYNC) /* a keyframe stream, never of an older version */
		return version(s);
	if (state(s) == WBUF_COMMITTING)
		return atomic_load(&s->w.h->target);
	return version(s) + 1;
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
	uint32_t fl = floor_version(s);
	for (unsigned i = 0; i < SLOTS; i++) {
		slot *k = &s->slots[i];
		if (k->used && k->key && k->target >= fl && (!complete || slot_complete(k)) &&
		    (!best || k->target > best->target))
			best = k;
	}
	if (best || state(s) == WBUF_RESYNC)
		return best;
	for (unsigned i = 0; i < SLOTS; i++) {
		slot *k = &s->slots[i];
		if (k->used && !k->key && k->base == version(s) &&
		    (state(s) != WBUF_COMMITTING || k->target == fl) &&
		    (!complete || slot_complete(k)))
			return k;
	}
	return NULL;
}

static void send_nack(shim *s)
{
	rp_ctl c;
	const struct inplace *ip = s->ip.done ? &s->ip : NULL; /* a stream written in place */
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
	const int key_resume = !sl && state(s) == WBUF_COMMITTING &&
			       (atomic_load(&s->w.h->flags) & WBUF_F_KEY);
	memset(&c, 0, sizeof(c));
	c.type = RP_NACK;
	c.flags = ip || (sl && sl->key) || key_resume ? RP_NACK_KEY : 0;
	c.model_id = s->w.h->model_id;
	c.version = ip ? ip->target : sl ? sl->target : floor_version(s);
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
	ctl_send(s, &c);
	s->nacks++;
	events_emit(&s->ev, "nack", "\"version\":%u,\"frames\":%u,\"key\":%s", c.version, asked,
		    c.flags & RP_NACK_KEY ? "true" : "false");
	/* only the version that commits next gives up on patches */
	if (!ip && !later && ++s->nack_rounds == NACK_GIVE_UP && !s->want_key) {
		/* nobody holds that patch any more: start over from keyframes */
		s->want_key = 1;
		if (state(s) == WBUF_RESYNC) {
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
		join(s);
	}
}

/* Free every prepared change, to make room for frames. */
static void drop_preps(shim *s)
{
	for (unsigned k = 0; k < SLOTS; k++) {
		slot *sl = &s->slots[k];
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
static int main_zws(shim *s)
{
	size_t n = bfp_zstd_workspace_size();
	if (n && !s->zws)
		s->zws = malloc(n);
	return !n || s->zws;
}

/* Prepare frames of the patch that commits next while the actor still
 * runs on the buffer's version: decode and verify each against the
 * buffer (it stays at the base until this patch commits), keeping the
 * changes, so the commit only writes values. Works for at most budget_s;
 * returns 1 if frames are left to prepare. A frame that fails is dropped
 * (its NACK brings it again; nothing was written). */
static int prepare_some(shim *s, double budget_s)
{
	if (s->no_prep || state(s) != WBUF_READY)
		return 0;
#ifdef BFP_SHIM_DPDK
	if (s->dma)
		return 0; /* the DMA backend decodes at commit */
#endif
	slot *sl = next_slot(s, 0);
	/* refusals that keep coming mean the buffer itself no longer holds
	 * the base: stop here, and let the commit find it out and resync */
	if (!sl || sl->key || sl->base != version(s) || sl->prepped == sl->have ||
	    sl->refused >= PREP_REFUSALS)
		return 0;
	if (!main_decoder(s)) {
		s->no_prep = 1;
		return 0;
	}
	bfp_apply_opts o;
	memset(&o, 0, sizeof(o));
	o.model_id = s->w.h->model_id;
	o.base_version = sl->base;
	double t0 = now_s();
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
		if (s->prep_bytes + most > s->max_stage / 2 ||
		    s->staged_bytes + most > s->max_stage)
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
		sl->preps[i] = p;
		sl->prepped++;
		sl->prep_bytes += bytes;
		s->prep_bytes += bytes;
		s->staged_bytes += bytes;
		s->prepared++;
	}
	return 0;
}

/* Commit sl from its prepared frames: the apply threads write their
 * values, then check each such range's hash in the buffer (what was
 * verified while staging was the base with the changes; this also catches
 * a buffer that changed since, e.g. an actor writing into its weights),
 * and decode, verify and write the other frames. */
static int commit_prepared(shim *s, slot *sl, uint32_t base, const apply_ctl *ctl,
			   apply_result *res, char *err, size_t errlen)
{
	const frame_changes **fc = malloc((size_t)sl->count * sizeof(*fc));
	if (!fc) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (uint32_t i = 0; i < sl->count; i++)
		fc[i] = sl->preps[i] ? &sl->preps[i]->fc : NULL;
	apply_ctl c = *ctl;
	c.changes = fc;
	int failed = patch_apply_frames((const uint8_t *const *)sl->frames, sl->flen, sl->count,
					s->w.params, s->w.h->n_params, s->w.h->model_id, base, &c,
					res, err, errlen);
	free(fc);
	return failed;
}

static void inplace_reset(shim *s);

/* The buffer now holds version target: drop what that made stale (slots
 * up to it, a keyframe stream written in place so far), reset repair, and
 * tell upstream the version held. */
static void committed_to(shim *s, uint32_t target)
{
	inplace_reset(s);
	for (unsigned i = 0; i < SLOTS; i++)
		if (s->slots[i].used && s->slots[i].target <= target)
			slot_free(s, &s->slots[i]);
	s->nack_backoff_ms = s->nack_ms;
	s->nack_rounds = 0;
	s->want_key = 0;
	join(s);
}

/* Apply every frame of sl into the buffer, verified, and publish it. */
static int commit(shim *s, slot *sl)
{
	char err[512];
	double t0 = now_s();
	uint32_t base = version(s);
	int resume = state(s) == WBUF_COMMITTING;
	int key = sl->key;
	if (frames_check_cover((const uint8_t *const *)sl->frames, sl->count, s->w.h->n_params,
			       err, sizeof(err))) {
		/* nothing written: drop it, and get it again from keyframes */
		fprintf(stderr, "bfpatch-shim: version %u not committed: %s\n", sl->target, err);
		events_emit(&s->ev, "resync", "\"version\":%u,\"reason\":\"cover\"", sl->target);
		s->resyncs++;
		s->want_key = 1;
		slot_free(s, sl);
		join(s);
		return 0;
	}
	events_emit(&s->ev, "apply_begin", "\"version\":%u", sl->target);
	wbuf_begin(&s->w, sl->target, key ? WBUF_F_KEY : 0);
	apply_ctl ctl = {.threads = s->threads, .resume = resume, .undo_note = wbuf_undo_note,
			 .undo_done = wbuf_undo_done, .undo = &s->undo};
	apply_result res;
	int crash = s->crash_after && s->commits + 1 >= s->crash_after;
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
		bfp_apply_opts o;
		memset(&o, 0, sizeof(o));
		o.model_id = s->w.h->model_id;
		o.base_version = base;
		o.zstd_workspace = s->zws;
		o.zstd_workspace_size = s->zws ? bfp_zstd_workspace_size() : 0;
		shim_dma_result dr;
		const shim_dma_journal jn = shim_dma_journal_of(&s->dlog);
		failed = shim_dma_apply(s->dma, s->dma_dec, &o, (const uint8_t *const *)sl->frames,
					sl->flen, sl->count, s->w.params, s->w.h->n_params,
					s->dlog.map ? &jn : NULL, &dr, err, sizeof(err));
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
		/* that frame wrote nothing, others did: the buffer is no version */
		wbuf_invalid(&s->w);
		s->resyncs++;
		fprintf(stderr, "bfpatch-shim: commit %u -> %u failed verification (%s); the "
			"buffer is invalid until a keyframe resync\n", base, sl->target, err);
		events_emit(&s->ev, "resync", "\"version\":%u,\"reason\":\"verification\"",
			    sl->target);
		slot_free(s, sl);
		join(s);
		return 0;
	}
	events_emit(&s->ev, "apply_end", "\"version\":%u,\"verified_bytes\":%" PRIu64
		    ",\"backend\":\"%s\"", sl->target, res.verified_bytes, backend);
	wbuf_end(&s->w);
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
	       " bytes verified, %.1f ms (%s)%s\n", base, sl->target,
	       key ? " (keyframe resync)" : "", sl->count, sl->bytes, res.verified_bytes, ms,
	       backend, how);
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
static int try_commit(shim *s)
{
	slot *n;
	while ((n = next_slot(s, 1))) {
		/* the safe point gates ordinary commits only: an interrupted
		 * commit or an invalid buffer is no version an actor can use */
		if (s->safe_point && state(s) == WBUF_READY) {
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

/* Most frames a staged patch may have: no more than could ever be staged
 * (this bounds the index arrays, 20 B per frame, of hostile indices). */
static uint32_t max_frames(const shim *s)
{
	uint64_t m = s->max_stage / (BFP_HEADER_SIZE + 1);
	return m < (1u << 24) ? (uint32_t)m : (1u << 24);
}

#define IDX_BYTES (sizeof(uint8_t *) + sizeof(uint32_t) + sizeof(struct prep *))

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
	if (s->staged_bytes + add > s->max_stage && s->prep_bytes)
		drop_preps(s);
	if (s->staged_bytes + add > s->max_stage)
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
	uint32_t fl = floor_version(s);
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

/* A HEARTBEAT from upstream names the newest version (PROTOCOL.md 2.3);
 * one from any other address is ignored, as a relay does: believed, it
 * would make the shim ask for versions nobody has, and then for keyframe
 * streams, for ever. */
static void on_control(shim *s, const uint8_t *p, size_t len, int from_upstream)
{
	rp_ctl c;
	if (rp_ctl_parse(p, len, &c) || c.type != RP_HEARTBEAT ||
	    (c.model_id && c.model_id != s->w.h->model_id)) {
		s->bad++;
		return;
	}
	if (!from_upstream) {
		if (s->foreign_hb++ < 3)
			fprintf(stderr, "bfpatch-shim: HEARTBEAT (version %u) from an address other "
				"than --upstream ignored\n", c.version);
		return;
	}
	s->heard = now_s();
	if (c.version > s->latest && c.version != RP_VERSION_RELAY && c.version != RP_VERSION_NONE)
		s->latest = c.version;
}

static void inplace_reset(shim *s)
{
	free(s->ip.done);
	free(s->ip.begin);
	free(s->ip.len);
	memset(&s->ip, 0, sizeof(s->ip));
}

static int inplace_frame(shim *s, const uint8_t *p, size_t len, const bfp_frame_header *h);

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
	if (!h->frame_count)
		return 0; /* streamed keyframes: their count comes last */
	if (s->ip.done) {
		if (state(s) == WBUF_RESYNC)
			return 1;
		inplace_reset(s); /* a version was committed meanwhile: never write into it */
	}
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
	if (size <= s->max_stage / 2)
		return 0;
	if (state(s) != WBUF_RESYNC) {
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
			    inplace_frame(s, staged->frames[i], staged->flen[i], &fh))
				break; /* out of memory: the rest comes again */
		}
		slot_free(s, staged);
	}
	return 1;
}

/* One frame of a keyframe stream written in place: checked (hash of the
 * values it writes) before it is written; the version is published once
 * every frame of the stream is, and they tile the model. */
static int inplace_frame(shim *s, const uint8_t *p, size_t len, const bfp_frame_header *h)
{
	struct inplace *ip = &s->ip;
	if (state(s) != WBUF_RESYNC) { /* the buffer holds a version: not in place */
		inplace_reset(s);
		s->bad++;
		return 0;
	}
	if (ip->done && (h->target_version != ip->target || h->frame_count != ip->count)) {
		if (h->target_version < ip->target) {
			s->old++;
			return 0;
		}
		inplace_reset(s); /* a newer stream: start over */
	}
	if (!ip->done) {
		if (h->frame_count > max_frames(s)) {
			s->bad++;
			return 0;
		}
		ip->done = calloc(h->frame_count, 1);
		ip->begin = calloc(h->frame_count, sizeof(*ip->begin));
		ip->len = calloc(h->frame_count, sizeof(*ip->len));
		if (!ip->done || !ip->begin || !ip->len || !main_decoder(s) || !main_zws(s)) {
			inplace_reset(s);
			return -1;
		}
		ip->target = h->target_version;
		ip->count = h->frame_count;
		ip->t0 = now_s();
		printf("bfpatch-shim: keyframe stream of version %u (%u frames) written into the "
		       "buffer as it arrives (larger than half of --max-stage)\n", ip->target,
		       ip->count);
		fflush(stdout);
		events_emit(&s->ev, "apply_begin", "\"version\":%u", ip->target);
	}
	if (ip->done[h->frame_index]) {
		s->dup++;
		return 0;
	}
	bfp_apply_opts o;
	memset(&o, 0, sizeof(o));
	o.model_id = s->w.h->model_id;
	o.zstd_workspace = s->zws;
	o.zstd_workspace_size = s->zws ? bfp_zstd_workspace_size() : 0;
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
	uint32_t base = version(s), target = ip->target;
	wbuf_begin(&s->w, target, WBUF_F_KEY);
	wbuf_end(&s->w);
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

/* A datagram; from_upstream: it came from --upstream's address and port. */
/* A frame of the version that commits next does not fit --max-stage:
 * drop the furthest later versions staged (they come again by NACK)
 * rather than wait on them for ever. */
static void make_room_for_next(shim *s, const slot *next, size_t len)
{
	while (s->staged_bytes + len > s->max_stage) {
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

static int on_frame(shim *s, const uint8_t *p, size_t len, int from_upstream)
{
	bfp_frame_header h;
	int control = len >= 4 && p[0] == 'B' && p[1] == 'F' && p[2] == 'P' && p[3] == 'C';
	if (!control) {
		s->rx++;
		s->rx_bytes += len;
	}
	/* with keys, nothing unsigned is staged or believed */
	rp_auth_result ar = rp_auth_accept(&s->auth, p, len, control, &len);
	if (ar != RP_AUTH_OK) {
		if (s->auth_fail++ < 10)
			fprintf(stderr, "bfpatch-shim: %s refused: %s\n",
				control ? "control message" : "frame", rp_auth_result_names[ar]);
		return 0;
	}
	if (control) {
		on_control(s, p, len, from_upstream); /* control magic (PROTOCOL.md 2) */
		return 0;
	}
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
	if (h.model_id != s->w.h->model_id) {
		s->other_model++;
		return 0;
	}
	s->heard = now_s(); /* a frame of this model: someone serves it */
	if (h.target_version >= RP_VERSION_NONE) {
		s->bad++; /* the control protocol's reserved values: never a version */
		return 0;
	}
	int key = !bfp_frame_in_patch(&h); /* a frame of a keyframe stream */
	uint32_t fl = floor_version(s);
	if (!key && state(s) == WBUF_RESYNC && h.target_version >= fl) {
		s->in_resync++; /* of use only after the resync: fetched again then */
		return 0;
	}
	if (h.target_version < fl || (!key && state(s) == WBUF_RESYNC) ||
	    (!key && h.base_version < version(s))) {
		s->old++;
		return 0;
	}
	if (!key && h.target_version - fl >= SLOTS) {
		s->ahead++; /* too far ahead: NACKs, then a keyframe resync */
		return 0;
	}
	if (s->drop_every && s->rx % s->drop_every == 0 && !s->dropped_test) {
		s->dropped_test++; /* testing: lose this one, repair it by NACK */
		return 0;
	}
	if (key && inplace_wanted(s, &h, len))
		return inplace_frame(s, p, len, &h);
	slot *sl = slot_get(s, &h, key);
	if (!sl) {
		s->ahead++;
		return 0;
	}
	if ((sl->count && h.frame_index >= sl->count) || slot_reserve(s, sl, h.frame_index)) {
		s->bad++; /* past the end its patch told, or more than can be staged */
		return 0;
	}
	if (sl->frames[h.frame_index]) {
		s->dup++;
		return 0;
	}
	if (s->staged_bytes + len > s->max_stage && s->prep_bytes)
		drop_preps(s); /* frames come first: the commit decodes instead */
	if (s->staged_bytes + len > s->max_stage && sl == next_slot(s, 0))
		make_room_for_next(s, sl, len);
	if (s->staged_bytes + len > s->max_stage) {
		s->over_budget++;
		return 0;
	}
	sl->frames[h.frame_index] = malloc(len);
	if (!sl->frames[h.frame_index])
		return -1;
	memcpy(sl->frames[h.frame_index], p, len);
	sl->flen[h.frame_index] = (uint32_t)len;
	sl->bytes += len;
	s->staged_bytes += len;
	sl->have++;
	if (h.frame_index >= sl->hi)
		sl->hi = h.frame_index + 1;
	s->last_frame = now_s();
	s->next_nack = s->last_frame + s->nack_backoff_ms / 1e3;
	if (sl == next_slot(s, 0))
		s->nack_rounds = 0;
	if (sl->have == sl->count)
		events_emit(&s->ev, "staged", "\"version\":%u,\"frames\":%u,\"bytes\":%" PRIu64
			    ",\"key\":%s", sl->target, sl->count, sl->bytes, key ? "true" : "false");
	return 0;
}

#ifdef BFP_SHIM_DPDK
static void port_frame(void *ctx, const uint8_t *payload, size_t len)
{
	shim *s = ctx;
	if (!s->port_rc)
		s->port_rc = on_frame(s, payload, len, 0); /* control comes on the socket */
}
#endif

#ifdef BFP_SHIM_DPDK
/* --port's link: said when it changes; a memif client is reconnected (its
 * relay restarted). Frames lost meanwhile are NACKed as usual. */
static void port_watch(shim *s, double t)
{
	shim_port_stats ps;
	switch (shim_port_watch(s->port, t)) {
	case SHIM_LINK_UP:
		shim_port_stats_get(s->port, &ps);
		if (s->port_down_since > 0)
			printf("bfpatch-shim: port: link up again after %.1f s (%" PRIu64
			       " restarts so far)\n", t - s->port_down_since, ps.restarts);
		else
			printf("bfpatch-shim: port: link up\n");
		events_emit(&s->ev, "port_up", "\"down_s\":%.3f",
			    s->port_down_since > 0 ? t - s->port_down_since : 0.0);
		s->port_down_since = 0;
		s->port_failed = 0;
		break;
	case SHIM_LINK_RESTART_FAILED:
		/* the PMD logs each try; say how long it has been now and then */
		if (++s->port_failed % 30 == 0)
			printf("bfpatch-shim: port: still no memif server after %u tries\n",
			       s->port_failed);
		break;
	case SHIM_LINK_DOWN:
		s->port_down_since = t;
		if (shim_port_reconnects(s->port))
			printf("bfpatch-shim: port: link down; reconnecting every %.0f s\n",
			       SHIM_PORT_RECONNECT_S);
		else
			printf("bfpatch-shim: port: link down; waiting for it\n");
		events_emit(&s->ev, "port_down", "\"version\":%u", version(s));
		break;
	default:
		break;
	}
	fflush(stdout);
}
#endif

/* The kernel's running count of datagrams it dropped because the socket
 * was full (SO_RXQ_OVFL, on the newest datagram): said when it grows,
 * at most once a second (lost frames come again by NACK, at a cost). */
static void note_sock_drops(shim *s, struct msghdr *m)
{
	static double said;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SO_RXQ_OVFL)
			continue;
		uint32_t d;
		memcpy(&d, CMSG_DATA(c), sizeof(d));
		if (d == s->sock_drops)
			continue;
		double t = now_s();
		if (t - said >= 1.0) {
			said = t;
			fprintf(stderr, "bfpatch-shim: the kernel dropped %u datagrams for a full "
				"receive buffer (%u in all); raise net.core.rmem_max or pace the "
				"sender\n", d - s->sock_drops, d);
		}
		s->sock_drops = d;
	}
}

static void print_stats(const shim *s)
{
	printf("bfpatch-shim: version %u (%s); frames %" PRIu64 " (%" PRIu64 " bytes; duplicates %"
	       PRIu64 ", old %" PRIu64 ", ahead %" PRIu64 ", patches during a resync %" PRIu64
	       ", bad %" PRIu64 ", other model %" PRIu64
	       ", over budget %" PRIu64 "), staged %" PRIu64 " bytes, NACKs %" PRIu64
	       ", commits %" PRIu64 " (%" PRIu64 " keyframe), resyncs %" PRIu64
	       ", verified %" PRIu64 " bytes, commit ms mean %.1f max %.1f, frames prepared "
	       "while staged %" PRIu64 " (refused %" PRIu64 ", dropped for room %" PRIu64 "), "
	       "refused by authentication %" PRIu64 ", HEARTBEATs not from --upstream %" PRIu64
	       ", staged patches dropped for another frame count %" PRIu64
	       ", later versions dropped for room %" PRIu64 ", dropped by the kernel (socket "
	       "full) %u\n",
	       version(s), state(s) == WBUF_READY ? "ready" : state(s) == WBUF_COMMITTING ?
	       "committing" : "resync", s->rx, s->rx_bytes, s->dup, s->old, s->ahead, s->in_resync,
	       s->bad,
	       s->other_model, s->over_budget, s->staged_bytes, s->nacks, s->commits,
	       s->key_commits, s->resyncs, s->verified_bytes,
	       s->commits ? s->commit_ms_total / (double)s->commits : 0.0, s->commit_ms_max,
	       s->prepared, s->prep_fail, s->prep_dropped, s->auth_fail, s->foreign_hb, s->recount, s->evicted, s->sock_drops);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	shim_config cfg;
	int prc = shim_parse_args(argc, argv, &cfg);
	if (prc)
		return prc < 0 ? 2 : 0;
	static shim s;
	memset(&s, 0, sizeof(s));
	const char *buffer = cfg.buffer, *init = cfg.init, *events_path = cfg.events_path;
	const char *name = cfg.name;
	const char *dma_dev = cfg.dma_dev, *port_args = cfg.port_args, *eal_args = cfg.eal_args;
	uint32_t lip = cfg.listen_ip, uip = cfg.upstream_ip;
	uint16_t lport = cfg.listen_port, uport = cfg.upstream_port;
	uint64_t version0 = cfg.init_version;
	char err[512] = "";
	s.rate_kbps = cfg.rate_kbps;
	s.safe_point = cfg.safe_point;
	s.threads = cfg.threads;
	s.nack_ms = s.nack_backoff_ms = cfg.nack_ms;
	s.max_stage = cfg.max_stage;
	s.no_prep = cfg.no_prep;
	s.exit_after = cfg.exit_after;
	s.drop_every = cfg.drop_every;
	s.crash_after = cfg.crash_after;
	malloc_keep_freed();
	for (unsigned i = 0; i < cfg.n_keys; i++)
		if (rp_auth_init() || rp_auth_load(&s.auth, cfg.key_paths[i], err, sizeof(err))) {
			fprintf(stderr, "bfpatch-shim: %s\n", err);
			return 1;
		}
	/* one shim a buffer: a second would repair, roll back and commit
	 * into the first one's buffer (or --init a file over it). The lock is
	 * on BUFFER.lock, which --init's rename does not replace; the kernel
	 * drops it when this process ends, however it ends. */
	char lkp[4096];
	snprintf(lkp, sizeof(lkp), "%s.lock", buffer);
	int lock_fd = open(lkp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (lock_fd < 0) {
		fprintf(stderr, "bfpatch-shim: %s: %s\n", lkp, strerror(errno));
		return 1;
	}
	if (flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
		fprintf(stderr, "bfpatch-shim: %s is in use by another bfpatch-shim (%s is "
			"locked)\n", buffer, lkp);
		return 1;
	}
	uint64_t init_model = 0;
	if (init) {
		model m;
		if (model_load(&m, init, err, sizeof(err))) {
			fprintf(stderr, "bfpatch-shim: %s\n", err);
			return 1;
		}
		if (access(buffer, F_OK) == 0) {
			/* a restart with the same command line: the buffer, not the
			 * checkpoint, holds the actor's weights now */
			init_model = m.model_id;
		} else if (wbuf_create(buffer, &m, (uint32_t)version0, 0, err, sizeof(err))) {
			fprintf(stderr, "bfpatch-shim: %s\n", err);
			return 1;
		}
		model_free(&m);
	}
	if (wbuf_open(&s.w, buffer, err, sizeof(err))) {
		fprintf(stderr, "bfpatch-shim: %s\n", err);
		return 1;
	}
	if (init_model && s.w.h->model_id != init_model) {
		fprintf(stderr, "bfpatch-shim: %s holds another model (id %016" PRIx64 ") than "
			"--init %s (%016" PRIx64 "); remove the buffer to start over from it\n",
			buffer, s.w.h->model_id, init, init_model);
		return 1;
	}
	if (init_model)
		printf("bfpatch-shim: %s exists with this model: using it, not --init %s\n", buffer,
		       init);
	wbuf_prefault_write(&s.w);
	if (wbuf_seq_repair(&s.w))
		printf("bfpatch-shim: version %u was published by a run that died before it "
		       "told readers so; they see it now\n", version(&s));
	if (wbuf_undo_open(&s.undo, &s.w, buffer, (unsigned)s.threads, err, sizeof(err))) {
		fprintf(stderr, "bfpatch-shim: undo journal: %s\n", err);
		return 1;
	}
	/* frames whose writes a crash cut short go back to the base, so the
	 * interrupted commit can be finished (with RESYNC nothing is kept) */
	unsigned undone = wbuf_undo_rollback(&s.undo, state(&s) != WBUF_COMMITTING);
	/* the DMA commit's journal: with --dma, or left by a run that had it */
	char dlp[4096];
	snprintf(dlp, sizeof(dlp), "%s.dmalog", buffer);
	s.dlog.fd = -1;
	if ((dma_dev || access(dlp, F_OK) == 0) &&
	    wbuf_dlog_open(&s.dlog, s.w.params, s.w.h->n_params, buffer, err, sizeof(err))) {
		fprintf(stderr, "bfpatch-shim: DMA journal: %s\n", err);
		return 1;
	}
	if (s.dlog.map)
		undone += wbuf_dlog_rollback(&s.dlog, state(&s) != WBUF_COMMITTING);
	if (undone)
		printf("bfpatch-shim: %u frame(s) cut short by the crash put back at the base\n",
		       undone);
	if (events_open(&s.ev, events_path, "shim", name)) {
		fprintf(stderr, "bfpatch-shim: --events %s: %s\n", events_path, strerror(errno));
		return 1;
	}
	s.sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int big = 16 << 20;
	setsockopt(s.sock, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
	setsockopt(s.sock, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big));
	int one = 1; /* the kernel's count of datagrams dropped for a full socket */
	setsockopt(s.sock, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof(one));
	struct sockaddr_in la = {.sin_family = AF_INET, .sin_port = htons(lport),
				 .sin_addr.s_addr = htonl(lip)};
	if (port_args) { /* frames come from the DPDK port; this socket is control only */
		la.sin_port = 0;
		la.sin_addr.s_addr = htonl(INADDR_ANY);
	}
	if (s.sock < 0 || bind(s.sock, (struct sockaddr *)&la, sizeof(la)) != 0) {
		fprintf(stderr, "bfpatch-shim: cannot listen on port %u: %s\n", lport, strerror(errno));
		return 1;
	}
	s.data_port = lport;
#ifdef BFP_SHIM_DPDK
	if (dma_dev || port_args) {
		char eal[2048];
		int n = snprintf(eal, sizeof(eal), "%s",
				 eal_args ? eal_args : "--no-huge -m 512 --no-pci -l 0 --iova-mode=va "
				 "--log-level=lib.eal:error");
		if (!eal_args)
			n += snprintf(eal + n, sizeof(eal) - (size_t)n, " --file-prefix bfpshim%d",
				      (int)getpid());
		if (dma_dev && !strncmp(dma_dev, "dma_skeleton", 12))
			n += snprintf(eal + n, sizeof(eal) - (size_t)n, " --vdev %s", dma_dev);
		if (port_args)
			n += snprintf(eal + n, sizeof(eal) - (size_t)n, " --vdev %s", port_args);
		if ((size_t)n >= sizeof(eal) || shim_eal_init(eal, err, sizeof(err))) {
			fprintf(stderr, "bfpatch-shim: %s\n", (size_t)n >= sizeof(eal) ?
				"EAL options too long" : err);
			return 1;
		}
	}
	if (dma_dev) {
		shim_dma_conf dc = {.name = dma_dev};
		s.dma_dec = malloc(sizeof(*s.dma_dec));
		if (!s.dma_dec || bfp_decoder_init(s.dma_dec, 0) != BFP_OK || !main_zws(&s) ||
		    shim_dma_open(&dc, &s.dma, err, sizeof(err))) {
			fprintf(stderr, "bfpatch-shim: --dma %s: %s\n", dma_dev,
				s.dma_dec ? err : "out of memory");
			return 1;
		}
	}
	if (port_args) {
		char dev[256];
		snprintf(dev, sizeof(dev), "%s", port_args);
		dev[strcspn(dev, ",")] = 0; /* the device name, as the EAL named it */
		shim_port_conf pc = {.devargs = dev, .ip = lip, .udp_port = lport};
		if (shim_port_open(&pc, &s.port, err, sizeof(err))) {
			fprintf(stderr, "bfpatch-shim: --port %s: %s\n", port_args, err);
			return 1;
		}
		if (shim_port_waiting(s.port))
			printf("bfpatch-shim: port: no memif server listening yet; trying every "
			       "%.0f s\n", SHIM_PORT_RECONNECT_S);
	}
#endif
	s.upstream.sin_family = AF_INET;
	s.upstream.sin_port = htons(uport);
	s.upstream.sin_addr.s_addr = htonl(uip);
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);
	if (state(&s) == WBUF_COMMITTING)
		printf("bfpatch-shim: a commit to version %u was interrupted; finishing it\n",
		       atomic_load(&s.w.h->target));
	if (state(&s) == WBUF_RESYNC)
		printf("bfpatch-shim: the buffer failed verification before; waiting for a "
		       "keyframe stream\n");
	printf("bfpatch-shim: buffer %s at version %u, %" PRIu64 " parameters, listening on %u, "
	       "%d apply threads, commit %s\n", buffer, version(&s), s.w.h->n_params, lport,
	       s.threads, s.safe_point ? "at the actor's safe point" : "when complete");
	fflush(stdout);
	char addr[INET_ADDRSTRLEN];
	struct in_addr ia = {.s_addr = htonl(lip)};
	inet_ntop(AF_INET, &ia, addr, sizeof(addr));
	events_emit(&s.ev, "start", "\"version\":%u,\"params\":%" PRIu64 ",\"rate_bps\":%" PRIu64
		    ",\"addr\":\"%s:%u\"", version(&s), s.w.h->n_params,
		    (uint64_t)s.rate_kbps * 1000, addr, lport);

	enum { VLEN = 64 };
	static uint8_t bufs[VLEN][BFP_FRAME_SIZE_MAX + 64];
	struct mmsghdr msgs[VLEN];
	struct iovec iov[VLEN];
	struct sockaddr_in srcs[VLEN];
	static uint64_t cms[VLEN][(CMSG_SPACE(sizeof(uint32_t)) + 7) / 8]; /* aligned */
	double start = now_s(), next_join = 0, behind_since = 0, next_quiet_said = 0;
	char upstream_text[32];
	snprintf(upstream_text, sizeof(upstream_text), "%u.%u.%u.%u:%u", uip >> 24,
		 (uip >> 16) & 255, (uip >> 8) & 255, uip & 255, uport);
	int rc = 0;
	while (!quit && rc == 0) {
		double t = now_s();
		if (s.exit_after > 0 && t - start > s.exit_after)
			break;
		if (dump_stats) {
			dump_stats = 0;
			print_stats(&s);
		}
		if (t >= next_join) {
			join(&s); /* JOIN doubles as the heartbeat */
			next_join = t + 1.0;
			/* an upstream that never answers (none there, a firewall,
			 * a wrong port) is said, not waited on in silence */
			const double quiet = t - (s.heard > 0 ? s.heard : start);
			if (quiet >= 10 && t >= next_quiet_said) {
				fprintf(stderr, "bfpatch-shim: nothing of this model from --upstream %s "
					"for %.0f s (no HEARTBEAT, no frame): check that its publisher or "
					"relay runs there (a publisher still at its first version sends "
					"none)\n", upstream_text, quiet);
				next_quiet_said = t + 300;
			}
		}
		int pending = s.ip.done != NULL;
		for (unsigned i = 0; i < SLOTS; i++)
			pending |= s.slots[i].used && !slot_complete(&s.slots[i]);
		/* behind: upstream has a version none of whose frames came */
		int behind = state(&s) != WBUF_RESYNC && s.latest >= floor_version(&s) &&
			     !next_slot(&s, 0);
		if (!behind)
			behind_since = 0;
		else if (behind_since == 0)
			behind_since = t;
		behind = behind && t - behind_since >= 0.3; /* not frames in flight */
		if ((pending || behind || state(&s) == WBUF_COMMITTING) && t >= s.next_nack) {
			send_nack(&s);
			s.next_nack = t + s.nack_backoff_ms / 1e3;
			/* doubling up to 1 s (or --nack-ms, if longer) */
			uint32_t cap = s.nack_ms > 1000 ? s.nack_ms : 1000;
			s.nack_backoff_ms = s.nack_backoff_ms * 2 < cap ? s.nack_backoff_ms * 2 : cap;
		}
		rc = try_commit(&s); /* also when the actor reached its safe point */
		/* between bursts of frames: prepare what is staged */
		int more_prep = rc == 0 && prepare_some(&s, 0.002);
		int wait_ms = more_prep ? 0 : 10;
#ifdef BFP_SHIM_DPDK
		if (s.port && t >= s.port_next_watch) {
			port_watch(&s, t);
			s.port_next_watch = t + 0.1;
		}
		if (s.port && !rc) {
			unsigned got = shim_port_poll(s.port, port_frame, &s);
			rc = s.port_rc;
			if (got) {
				if (!rc)
					rc = try_commit(&s);
				continue;
			}
			wait_ms = 0; /* poll mode: look at the socket, then the port again */
		}
#endif
		struct pollfd pfd = {.fd = s.sock, .events = POLLIN};
		if (rc || poll(&pfd, 1, wait_ms) <= 0)
			continue;
		for (int i = 0; i < VLEN; i++) {
			iov[i].iov_base = bufs[i];
			iov[i].iov_len = sizeof(bufs[i]);
			memset(&msgs[i], 0, sizeof(msgs[i]));
			msgs[i].msg_hdr.msg_iov = &iov[i];
			msgs[i].msg_hdr.msg_iovlen = 1;
			msgs[i].msg_hdr.msg_name = &srcs[i];
			msgs[i].msg_hdr.msg_namelen = sizeof(srcs[i]);
			msgs[i].msg_hdr.msg_control = cms[i];
			msgs[i].msg_hdr.msg_controllen = sizeof(cms[i]);
		}
		int n = recvmmsg(s.sock, msgs, VLEN, MSG_DONTWAIT, NULL);
		if (n > 0)
			note_sock_drops(&s, &msgs[n - 1].msg_hdr);
		for (int i = 0; i < n && rc == 0; i++) {
			const int up = msgs[i].msg_hdr.msg_namelen == sizeof(srcs[i]) &&
				       srcs[i].sin_addr.s_addr == s.upstream.sin_addr.s_addr &&
				       srcs[i].sin_port == s.upstream.sin_port;
			rc = on_frame(&s, bufs[i], msgs[i].msg_len, up);
		}
		if (rc == 0)
			rc = try_commit(&s);
	}
	print_stats(&s);
	inplace_reset(&s);
	wbuf_undo_close(&s.undo);
	if (s.dlog.map)
		wbuf_dlog_close(&s.dlog);
	events_emit(&s.ev, "stats", "\"frames\":%" PRIu64 ",\"rx_bytes\":%" PRIu64 ",\"dup\":%"
		    PRIu64 ",\"old\":%" PRIu64 ",\"bad\":%" PRIu64 ",\"nacks\":%" PRIu64
		    ",\"commits\":%" PRIu64 ",\"resyncs\":%" PRIu64 ",\"verified_bytes\":%" PRIu64
		    ",\"version\":%u,\"auth_fail\":%" PRIu64 ",\"ahead\":%" PRIu64
		    ",\"in_resync\":%" PRIu64 ",\"over_budget\":%" PRIu64 ",\"foreign_heartbeats\":%"
		    PRIu64 ",\"socket_drops\":%u", s.rx, s.rx_bytes, s.dup, s.old, s.bad, s.nacks,
		    s.commits, s.resyncs, s.verified_bytes, version(&s), s.auth_fail, s.ahead,
		    s.in_resync, s.over_budget, s.foreign_hb, s.sock_drops);
	for (unsigned i = 0; i < SLOTS; i++)
		slot_free(&s, &s.slots[i]);
#ifdef BFP_SHIM_DPDK
	if (s.port) {
		shim_port_stats ps;
		shim_port_stats_get(s.port, &ps);
		printf("bfpatch-shim: port: %" PRIu64 " packets, %" PRIu64 " frames delivered, "
		       "link down %" PRIu64 " times, %" PRIu64 " restarts\n",
		       ps.rx_packets, ps.delivered, ps.link_downs, ps.restarts);
		shim_port_close(s.port);
	}
	if (s.dma) {
		shim_dma_stats ds;
		shim_dma_stats_get(s.dma, &ds);
		printf("bfpatch-shim: dma: %" PRIu64 " copies, %" PRIu64 " bytes, %" PRIu64
		       " errors\n", ds.copies, ds.bytes, ds.errors);
		shim_dma_close(s.dma);
	}
	if (s.dma || s.port)
		shim_eal_fini();
	free(s.dma_dec);
#endif
	free(s.dec);
	free(s.zws);
	events_close(&s.ev);
	close(s.sock);
	wbuf_close(&s.w);
	return rc ? 1 : 0;
}
