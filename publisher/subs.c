/*
 * subs.c: the publisher's subscribers: control messages in (JOIN, LEAVE,
 * NACK, each verified with --key), the table of those that JOINed and of
 * those that left, and each one's catch-up when it is behind: the held
 * patches that lead from its version, or else a keyframe stream, sent a
 * slice per turn of the main loop so that nothing else waits for it.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "bfpatch.h"
#include "util.h"
#include "publisher.h"

static void cu_start(pub_sub *s, int key, uint32_t base, uint32_t target, uint32_t end)
{
	s->cu_active = 1;
	s->cu_key = key;
	s->cu_base = base;
	s->cu_target = target;
	s->cu_end = end;
	s->cu_next = 0;
	s->cu_said = 0;
}


/* Subscriber i leaves: remember what pub_left says, and take it out. */
static void sub_drop(publisher *P, unsigned i)
{
	pub_sub *s = &P->subs[i];
	struct pub_left *l = &P->left[P->left_next++ % MAX_SUBS];
	l->ctl = s->ctl;
	l->last_catchup = s->cu_active ? now_s() : s->last_catchup;
	l->nack = s->nack;
	*s = P->subs[--P->n_subs];
}

/* Whether the datagram buf[0, len) from from is a control message to
 * act on, parsed into *c: signed by a key held (with --key), well formed,
 * and not a JOIN for another model (each refusal counted). */
static int ctl_accept(publisher *P, uint8_t *buf, size_t len, const struct sockaddr_in *from,
		      rp_ctl *c, const rp_key **key)
{
	/* with keys: only what a key holder signed, fresh, once */
	/* remembered per sender: no sender's messages refuse another's */
	rp_auth_result ar = rp_auth_accept_from(&P->auth, ntohl(from->sin_addr.s_addr),
						ntohs(from->sin_port), buf, len, 1, &len);
	if (ar != RP_AUTH_OK) {
		if (P->auth_fail++ < 10) {
			char peer[64], why[96] = "";
			pub_peer_str(from, peer, sizeof(peer));
			if (ar == RP_AUTH_STALE || ar == RP_AUTH_FUTURE)
				rp_auth_skew_str(&P->auth, why, sizeof(why));
			fprintf(stderr, "bfpatch publish: control message from %s refused: %s%s%s%s\n",
				peer, rp_auth_result_names[ar], *why ? " (" : "", why, *why ? ")" : "");
		}
		return 0;
	}
	if (rp_ctl_parse(buf, len, c) != 0) {
		P->ctl_bad++;
		return 0;
	}
	/* keyed, each message names the run its sender follows: a JOIN may
	 * come from any (it asks for this one; the HEARTBEAT answering it
	 * names it), anything else must be of this run or of none yet, or it
	 * is a capture of another run (PROTOCOL.md 4) */
	uint64_t run = rp_auth_msg_run(&P->auth, buf, len);
	*key = rp_auth_key_of(&P->auth, buf, len);
	if (c->type != RP_JOIN && run && run != P->auth.run) {
		if (P->other_run++ < 3) {
			char peer[64], r[17];
			pub_peer_str(from, peer, sizeof(peer));
			rp_auth_run_str(run, r);
			fprintf(stderr, "bfpatch publish: control message from %s of publisher run %s, "
				"not this one; refused\n", peer, r);
		}
		return 0;
	}
	if (c->type == RP_JOIN && c->model_id && c->model_id != P->model_id) {
		/* another model's subscriber: it would be sent every frame and
		 * caught up for ever, all dropped at its end */
		if (P->other_model++ < 3) {
			char peer[64];
			pub_peer_str(from, peer, sizeof(peer));
			fprintf(stderr, "bfpatch publish: JOIN from %s for model %016" PRIx64 ", not "
				"this one (%016" PRIx64 "); ignored\n", peer, c->model_id,
				P->model_id);
		}
		return 0;
	}
	return 1;
}

/* The subscriber whose control port from is, or NULL. */
static pub_sub *sub_find(publisher *P, const struct sockaddr_in *from)
{
	pub_sub *s = NULL;
	for (unsigned i = 0; i < P->n_subs; i++)
		if (P->subs[i].ctl.sin_addr.s_addr == from->sin_addr.s_addr &&
		    P->subs[i].ctl.sin_port == from->sin_port)
			s = &P->subs[i];
	return s;
}

/* A JOIN c from a new subscriber at from, at time t: a table entry, with
 * what pub_left kept of it if it left before; NULL when the table is
 * full (said once). */
static pub_sub *sub_join(publisher *P, const struct sockaddr_in *from, const rp_ctl *c, double t)
{
	if (P->n_subs == MAX_SUBS) {
		if (!P->told_full) {
			P->told_full = 1;
			fprintf(stderr, "bfpatch publish: %d subscribers already; more JOINs are "
				"ignored (put a bfpatch-relay in front for more)\n", MAX_SUBS);
		}
		return NULL;
	}
	pub_sub *s = &P->subs[P->n_subs++];
	memset(s, 0, sizeof(*s));
	s->ctl = *from;
	s->data = *from;
	s->data.sin_port = htons(c->data_port);
	s->version = c->version;
	s->joined = t;
	nack_budget_init(&s->nack, P->nack_rate, t);
	for (unsigned j = 0; j < MAX_SUBS; j++) {
		struct pub_left *l = &P->left[j];
		if (l->ctl.sin_port == from->sin_port && l->ctl.sin_addr.s_addr == from->sin_addr.s_addr) {
			s->last_catchup = l->last_catchup;
			s->nack = l->nack;
			memset(l, 0, sizeof(*l));
		}
	}
	char peer[64];
	pub_peer_str(&s->data, peer, sizeof(peer));
	if (c->version == RP_VERSION_NONE)
		pub_info("bfpatch publish: subscriber %s joined with no usable version\n",
			peer);
	else
		pub_info("bfpatch publish: subscriber %s joined at version %u\n", peer,
			c->version);
	events_emit(&P->ev, "subscriber", "\"peer\":\"%s\",\"version\":%u", peer, c->version);
	return s;
}

void pub_control(publisher *P)
{
	uint8_t buf[2048];
	struct sockaddr_in from;
	socklen_t fl = sizeof(from);
	ssize_t n;
	double t = now_s();
	while ((n = recvfrom(P->sock, buf, sizeof(buf), MSG_DONTWAIT, (struct sockaddr *)&from,
			     &fl)) > 0) {
		rp_ctl c;
		const rp_key *key;
		if (!ctl_accept(P, buf, (size_t)n, &from, &c, &key))
			continue;
		pub_sub *s = sub_find(P, &from);
		if (c.type == RP_JOIN && !s)
			s = sub_join(P, &from, &c, t);
		if (!s)
			continue; /* NACKs only from JOINed subscribers, to their own address */
		s->last_seen = now_s(); /* a NACK answer before may have taken long */
		if (c.type == RP_JOIN) {
			/* a repeated JOIN updates the subscription (PROTOCOL.md 2.1) */
			s->data.sin_port = htons(c.data_port);
			if (c.version != s->version || s->version_since == 0)
				s->version_since = t;
			s->version = c.version;
			/* a peer's own key signs what goes to it (SECURITY.md
			 * "Keys per hop"); the group key: keys[0] signs */
			s->key = rp_auth_is_peer(&P->auth, key) ? key : NULL;
			pub_sub_link(P, s, c.rate_kbps, t);
			s->catchup = 1; /* the main loop decides */
			/* answered at once with the newest version and this run,
			 * which a keyed subscriber needs before it takes a frame */
			pub_heartbeat_one(P, s, P->model_id, P->ver);
		}
		if (c.type == RP_LEAVE)
			sub_drop(P, (unsigned)(s - P->subs));
		else if (c.type == RP_NACK)
			nack_answer(P, s, &c, t);
	}
	/* subscribers JOIN every second; forget the silent ones */
	t = now_s();
	for (unsigned i = 0; i < P->n_subs; i++)
		if (t - P->subs[i].last_seen > SUB_TIMEOUT_S) {
			char peer[64];
			pub_peer_str(&P->subs[i].data, peer, sizeof(peer));
			pub_info("bfpatch publish: subscriber %s silent for %.0f s, dropped\n",
				peer, SUB_TIMEOUT_S);
			sub_drop(P, i--);
		}
}

/* Say that s is sent the keyframe stream of version kv (held whole). */
static void key_said(publisher *P, const pub_sub *s, uint32_t kv)
{
	char peer[64];
	pub_peer_str(&s->data, peer, sizeof(peer));
	char at_v[32] = "no usable version";
	if (s->version != RP_VERSION_NONE)
		snprintf(at_v, sizeof(at_v), "version %u", s->version);
	pub_info("bfpatch publish: keyframe stream of version %u (%zu frames) to %s "
		"at %s\n", kv, P->hist.key.n, peer, at_v);
	events_emit(&P->ev, "keyframe", "\"version\":%u,\"peer\":\"%s\",\"frames\":%zu,"
		    "\"bytes\":%zu", kv, peer, P->hist.key.n, P->hist.key.len);
	P->keyframes++;
}

/* A keyframe stream's encode for catch-ups (patch_opts.stream): its
 * frames, in index order with frame_count 0, go to the subscribers that
 * wait for it as they come, a catch-up slice a call; once every frame is
 * encoded (done, set on a worker), the rest leave from the finished
 * stream, a slice per turn of the main loop, and the encode returns. */
typedef struct key_ctx {
	publisher *P;
	volatile int done;
	int full;               /* key_part out of memory: the rest waits */
	double t_first;
} key_ctx;

static void key_stream(void *arg, uint8_t *const *fr, const size_t *lens, size_t n)
{
	key_ctx *kc = arg;
	publisher *P = kc->P;
	for (size_t i = 0; i < n && !kc->full; i++)
		kc->full = patch_push(&P->hist.key_part, fr[i], lens[i]) != 0;
	if (__atomic_load_n(&kc->done, __ATOMIC_ACQUIRE) && kc->t_first != 0)
		return;
	uint64_t before = P->key_streamed;
	pub_catchup_send(P);
	if (kc->t_first == 0 && P->key_streamed > before) {
		kc->t_first = now_s();
		events_emit(&P->ev, "key_first_frame", "\"version\":%u", P->hist.key_ver);
	}
	pub_control(P);
	double t = now_s();
	if (t >= P->next_heartbeat) {
		pub_heartbeat(P, P->model_id, P->ver);
		P->next_heartbeat = t + 1.0;
	}
}

static void key_encoded(void *arg, size_t frames, size_t bytes, uint64_t changed)
{
	key_ctx *kc = arg;
	(void)changed;
	__atomic_store_n(&kc->done, 1, __ATOMIC_RELEASE);
	events_emit(&kc->P->ev, "key_encode_end", "\"version\":%u,\"frames\":%zu,\"bytes\":%zu",
		    kc->P->hist.key_ver, frames, bytes);
}

/* Make the keyframe stream of ver (cur) that history_key_begin() set up,
 * streamed to the catch-ups waiting for it; then say who was sent it.
 * On failure their catch-ups end (their next JOINs try again). */
static void key_stream_make(publisher *P, const model *cur, uint32_t ver, const patch_opts *po)
{
	key_ctx kc = {.P = P};
	patch_opts so = *po;
	so.stream = key_stream;
	so.encoded = key_encoded;
	so.stream_arg = &kc;
	char err[ERRLEN];
	events_emit(&P->ev, "key_encode_begin", "\"version\":%u", ver);
	int rc = history_key_make(&P->hist, cur, ver, &so, err, sizeof(err));
	if (rc)
		fprintf(stderr, "bfpatch publish: keyframe: %s\n", err);
	for (unsigned i = 0; i < P->n_subs; i++) {
		pub_sub *s = &P->subs[i];
		if (!s->cu_active || !s->cu_key || s->cu_target != ver || s->cu_said)
			continue;
		if (rc) {
			s->cu_active = 0;
			continue;
		}
		s->cu_said = 1;
		key_said(P, s, ver);
	}
}

int pub_catchup_waits(const pub_sub *s, uint32_t ver, double published, double t)
{
	if (s->version == RP_VERSION_RELAY || t - s->last_catchup < 3)
		return 1;
	if (s->version == RP_VERSION_NONE) /* asks for keyframes */
		return 0;
	if (s->version >= ver)
		return 1;
	/* behind for a moment is patches in flight (NACKs repair them);
	 * behind at the same version for 3 s needs catching up. Nothing in
	 * flight takes a subscriber that JOINed after ver went out, at a
	 * version before ver's base, any further: it starts at once. */
	if (s->joined > published && s->version + 1 < ver)
		return 0;
	return t - s->version_since < 3 || t - published < 3;
}

/* Bring subscribers that are behind version ver up to it: the patches
 * still held, in order, or else a keyframe stream of the current model;
 * pub_catchup_send() sends them. */
void pub_catchup(publisher *P, const model *cur, uint32_t ver, const patch_opts *po)
{
	double t = now_s();
	for (unsigned i = 0; i < P->n_subs && !P->closing; i++) {
		pub_sub *s = &P->subs[i];
		if (!s->catchup || s->cu_active)
			continue;
		s->catchup = 0;
		int none = s->version == RP_VERSION_NONE; /* asks for keyframes */
		if (!none && s->version != RP_VERSION_RELAY && s->version > ver &&
		    s->said_ahead != s->version) {
			/* a version this publisher has not made (yet): a rollback
			 * of the checkpoints, another run, a restart without
			 * --resume; nothing from here applies to it before the
			 * patch to the version after its own */
			char peer[64];
			pub_peer_str(&s->data, peer, sizeof(peer));
			fprintf(stderr, "bfpatch publish: subscriber %s is at version %u, ahead of "
				"this publisher's %u (checkpoints rolled back, another run, a restart "
				"without --resume?): it takes nothing from here before version %u, "
				"and if its weights are not this run's version %u it fails to verify "
				"then; restart its shim with --init of the current checkpoint\n",
				peer, s->version, ver, s->version + 1, s->version);
			s->said_ahead = s->version;
		}
		if (pub_catchup_waits(s, ver, P->published_at, t))
			continue;
		/* the chain of held patches from its version, if complete */
		uint32_t first = 0;
		if (!none && history_chain(&P->hist, s->version, ver, &first)) {
			cu_start(s, 0, s->version, first, ver);
			continue;
		}
		/* a keyframe stream: of ver, or of the older version whose stream
		 * another subscriber is being sent (one stream is held), if that
		 * leads this one further and held patches go on from it to ver;
		 * else a stream of ver replaces it, and the other subscriber's
		 * next JOINs start it on that one */
		uint32_t kv = ver, kfirst;
		for (unsigned j = 0; j < P->n_subs && P->hist.key.n && P->hist.key_ver != ver; j++)
			if (P->subs[j].cu_active && P->subs[j].cu_key &&
			    P->subs[j].cu_target == P->hist.key_ver &&
			    (none || P->hist.key_ver > s->version) &&
			    history_chain(&P->hist, P->hist.key_ver, ver, &kfirst))
				kv = P->hist.key_ver;
		/* none held: made below, once for every subscriber that needs
		 * it this turn, and streamed to them while it is encoded */
		if (P->hist.key_ver != kv || !(P->hist.key.n || P->hist.key_streaming))
			history_key_begin(&P->hist, ver);
		cu_start(s, 1, 0, kv, kv);
		if (P->hist.key_streaming)
			continue; /* said once the stream is made */
		s->cu_said = 1;
		key_said(P, s, kv);
	}
	if (P->hist.key_streaming)
		key_stream_make(P, cur, ver, po);
}

/* One slice of every catch-up in progress. A patch or keyframe stream no
 * longer held (a newer version took its place) ends the catch-up: the
 * subscriber's next JOINs start another. Returns whether any goes on. */
int pub_catchup_send(publisher *P)
{
	int busy = 0;
	for (unsigned i = 0; i < P->n_subs; i++) {
		pub_sub *s = &P->subs[i];
		if (!s->cu_active)
			continue;
		const patch *p = history_catchup(&P->hist, s);
		/* a keyframe stream being encoded: its frames so far */
		const int growing = p && p == &P->hist.key_part && P->hist.key_streaming;
		if (p && s->cu_next < p->n) {
			/* about 10 ms at --rate, or at the subscriber's link */
			size_t slice = s->link.rate && (!P->bucket.rate || s->link.rate < P->bucket.rate)
					       ? pub_slice((uint64_t)s->rate_kbps * 1000, P->frame_size)
					       : P->cu_slice;
			size_t n = p->n - s->cu_next < slice ? p->n - s->cu_next : slice;
			pub_send_one(P, s, p, s->cu_next, n);
			s->cu_next += n;
			if (growing)
				P->key_streamed += n;
		}
		if (p && s->cu_next >= p->n && !s->cu_key && s->cu_target != s->cu_end) {
			/* the next held patch of the chain */
			const patch *q = history_from(&P->hist, s->cu_target);
			if (q) {
				s->cu_base = s->cu_target;
				s->cu_target = history_target(&P->hist, q);
				s->cu_next = 0;
				busy = 1;
				continue;
			}
			p = NULL;
		}
		if (!growing && (!p || s->cu_next >= p->n)) {
			s->cu_active = 0;
			s->last_catchup = now_s();
		}
		busy |= s->cu_active;
	}
	return busy;
}
