/*
 * main.c: `bfpatch publish`, the trainer side. Each new version of the
 * weights (a checkpoint file appearing in a directory, or a commit into a
 * shared-memory weight buffer the trainer writes through wbuf.h) is
 * encoded on all cores against the previous one and sent over UDP
 * (sendmmsg, token-bucket paced) to every subscriber that JOINed: relays
 * or shims (docs/PROTOCOL.md). NACKs are answered from the last --keep
 * patches; a subscriber stuck behind them gets the patches it misses or a
 * keyframe stream of the current version. Patches can be kept on disk
 * (--history, patch file format, written through a temporary + rename).
 *
 * Frames of a version leave while the rest of it is encoded: workers
 * encode chunks on all cores, and this thread sends each frame as soon as
 * every chunk before its own is done, with frame_count 0 (a streamed
 * frame, docs/FORMAT.md 2.5), so the first frame leaves after the first
 * chunk. NACKs are answered from the finished patch, whose frames carry
 * the count.
 *
 * cmd_publish() parses the options into a publish_config (options.c),
 * then opens, runs and closes a publisher, as the relay's main() does.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bfpatch.h"
#include "util.h"
#include "events.h"
#include "model.h"
#include "patch.h"
#include "proto.h"
#include "auth.h"
#include "wbuf.h"
#include "publish.h"
#include "publisher.h"

volatile sig_atomic_t pub_quit, pub_dump_stats;
static void on_signal(int s)
{
	(void)s;
	pub_quit = 1;
}
static void on_usr1(int s)
{
	(void)s;
	pub_dump_stats = 1;
}
/* The counters, on stderr: at exit and on SIGUSR1. */
static void pub_print_stats(const publisher *P, uint32_t ver)
{
	fprintf(stderr, "bfpatch publish: at version %u; sent %" PRIu64 " frames (%" PRIu64
		" bytes), %" PRIu64 " NACKs answered with %" PRIu64 " frames, %" PRIu64
		" keyframe streams, %" PRIu64 " history write errors, %" PRIu64 " control messages "
		"refused (authentication), %" PRIu64 " NACKed frames over a subscriber's budget, %"
		PRIu64 " malformed control messages, %" PRIu64 " JOINs for another model; %u "
		"subscriber(s)\n",
		ver, P->sent_frames, P->sent_bytes, P->nacks, P->resent, P->keyframes,
		P->hist.errors, P->auth_fail, P->nack_limited, P->ctl_bad, P->other_model,
		P->n_subs);
}

void pub_peer_str(const struct sockaddr_in *a, char *out, size_t n)
{
	char ip[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
	snprintf(out, n, "%s:%u", ip, ntohs(a->sin_port));
}


/* Token bucket burst: a sendmmsg batch of frames of the configured size,
 * or 2 ms at the rate if more, and never less than one largest frame (a
 * kept patch may have larger frames; batches are cut to fit the burst).
 * After an idle spell this much leaves at line rate: keep it small, as a
 * bottleneck queue on the path has to hold it. */
static uint64_t pub_burst(uint64_t rate_bps, uint32_t frame_size)
{
	uint64_t b = SEND_BATCH * (uint64_t)WIRE(frame_size), ms2 = rate_bps / 8 / 500;
	b = b > ms2 ? b : ms2;
	return b > WIRE(BFP_FRAME_SIZE_MAX) ? b : WIRE(BFP_FRAME_SIZE_MAX);
}

/* Catch-up frames per main-loop turn: about 10 ms at rate, 1 to 256. */
static size_t pub_slice(uint64_t rate_bps, uint32_t frame_size)
{
	size_t n = rate_bps ? (size_t)(rate_bps / 8 / 100 / WIRE(frame_size)) : 256;
	return n < 1 ? 1 : (n > 256 ? 256 : n);
}

/* A subscriber's link, as its JOIN tells it (PROTOCOL.md 2.1): frames to
 * it are paced at that rate too. */
static void sub_link(publisher *P, pub_sub *s, uint32_t rate_kbps, double t)
{
	if (s->rate_kbps == rate_kbps)
		return; /* a new subscriber's zeroed bucket: no limit, as for 0 */
	uint64_t bps = (uint64_t)rate_kbps * 1000;
	s->rate_kbps = rate_kbps;
	rp_bucket_init(&s->link, (bps + 7) / 8, pub_burst(bps, P->frame_size), (uint64_t)(t * 1e6));
}

/* Wait for len bytes of b's tokens; 0 on SIGTERM. */
static int pub_wait_tokens(rp_bucket *b, uint64_t len)
{
	while (!rp_bucket_take(b, len, (uint64_t)(now_s() * 1e6), 1000000)) {
		struct timespec ts = {0, 20000};
		if (pub_quit)
			return 0;
		nanosleep(&ts, NULL);
	}
	return 1;
}

/* Send n frames to the subscribers in to[] (n_to of them), in sendmmsg
 * batches, paced by the publisher's token bucket and by each
 * subscriber's link: one the same frames go to in turn waits for the
 * slowest (a relay paces each of its subscribers on its own). */
static void pub_send_frames(publisher *P, uint8_t *const *fr, const size_t *lens, size_t n,
			    pub_sub *const *to, unsigned n_to)
{
	enum { BATCH = SEND_BATCH };
	struct mmsghdr m[BATCH];
	struct iovec iov[2 * BATCH];
	uint8_t trailer[BATCH][RP_AUTH_LEN];
	int keyed = P->auth.n_keys > 0;
	/* a batch within every bucket's burst, or it never gets its tokens */
	uint64_t burst = P->bucket.burst;
	for (unsigned s = 0; s < n_to; s++)
		if (to[s]->link.rate && to[s]->link.burst < burst)
			burst = to[s]->link.burst;
	for (size_t i = 0; i < n;) {
		size_t nb = 0;
		size_t bytes = 0;
		while (nb < BATCH && i + nb < n && (nb == 0 || bytes + WIRE(lens[i + nb]) <= burst))
			bytes += WIRE(lens[i + nb++]);
		for (size_t k = 0; k < nb; k++) { /* the same datagrams to everyone */
			iov[2 * k].iov_base = fr[i + k];
			iov[2 * k].iov_len = lens[i + k];
			iov[2 * k + 1].iov_base = trailer[k];
			iov[2 * k + 1].iov_len = keyed ? RP_AUTH_LEN : 0;
			if (keyed)
				rp_auth_seal(&P->auth, iov[2 * k].iov_base, iov[2 * k].iov_len, 0,
					     trailer[k]);
		}
		for (unsigned s = 0; s < n_to; s++) {
			for (size_t k = 0; k < nb; k++) {
				memset(&m[k], 0, sizeof(m[k]));
				m[k].msg_hdr.msg_name = (void *)&to[s]->data;
				m[k].msg_hdr.msg_namelen = sizeof(to[s]->data);
				m[k].msg_hdr.msg_iov = &iov[2 * k];
				m[k].msg_hdr.msg_iovlen = keyed ? 2 : 1;
			}
			if (!pub_wait_tokens(&to[s]->link, bytes) ||
			    !pub_wait_tokens(&P->bucket, bytes))
				return; /* SIGTERM while paced */
			for (size_t k = 0; k < nb;) {
				int r = sendmmsg(P->sock, m + k, (unsigned)(nb - k), 0);
				if (r < 0 && (errno == ENOBUFS || errno == EAGAIN || errno == EINTR)) {
					struct timespec ts = {0, 100000};
					nanosleep(&ts, NULL);
					continue;
				}
				if (r <= 0)
					break; /* unreachable peer: its NACKs or catch-up repair it */
				for (int j = 0; j < r; j++) {
					P->sent_frames++;
					P->sent_bytes += iov[2 * (k + (size_t)j)].iov_len;
				}
				k += (size_t)r;
			}
		}
		i += nb;
	}
}

/* Send frames [first, first + count) of p to the subscribers in to[]. */
static void pub_send(publisher *P, const patch *p, size_t first, size_t count, pub_sub *const *to,
		     unsigned n_to)
{
	uint8_t *fr[SEND_BATCH];
	size_t lens[SEND_BATCH];
	size_t end = first + count < p->n ? first + count : p->n;
	for (size_t i = first; i < end;) {
		size_t nb = 0;
		for (; nb < SEND_BATCH && i < end; nb++, i++) {
			fr[nb] = p->buf + p->off[i];
			lens[nb] = p->off[i + 1] - p->off[i];
		}
		pub_send_frames(P, fr, lens, nb, to, n_to);
	}
}

/* A control message to a, signed when keyed. */
static void pub_ctl_send(publisher *P, const rp_ctl *c, const struct sockaddr_in *a)
{
	uint8_t msg[RP_CTL_HDR + 8 * RP_NACK_MAX + 4 + RP_AUTH_LEN];
	size_t n = rp_auth_ctl_build(&P->auth, msg, sizeof(msg), c);
	if (n)
		sendto(P->sock, msg, n, 0, (const struct sockaddr *)a, sizeof(*a));
}

void pub_send_one(publisher *P, pub_sub *s, const patch *p, size_t first, size_t count)
{
	pub_sub *to[1] = {s};
	pub_send(P, p, first, count, to, 1);
}

static void cu_start(pub_sub *s, int key, uint32_t base, uint32_t target, uint32_t end)
{
	s->cu_active = 1;
	s->cu_key = key;
	s->cu_base = base;
	s->cu_target = target;
	s->cu_end = end;
	s->cu_next = 0;
}

/* The patch s's catch-up is sending now, or NULL. */
const patch *pub_cu_patch(const publisher *P, const pub_sub *s)
{
	if (!s->cu_active)
		return NULL;
	return s->cu_key ? history_key(&P->hist, s->cu_target)
			 : history_pair(&P->hist, s->cu_base, s->cu_target);
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

static void pub_control(publisher *P)
{
	uint8_t buf[2048];
	struct sockaddr_in from;
	socklen_t fl = sizeof(from);
	ssize_t n;
	double t = now_s();
	while ((n = recvfrom(P->sock, buf, sizeof(buf), MSG_DONTWAIT, (struct sockaddr *)&from,
			     &fl)) > 0) {
		rp_ctl c;
		size_t len = (size_t)n;
		/* with keys: only what a key holder signed, fresh, once */
		rp_auth_result ar = rp_auth_accept(&P->auth, buf, len, 1, &len);
		if (ar != RP_AUTH_OK) {
			if (P->auth_fail++ < 10) {
				char peer[64];
				pub_peer_str(&from, peer, sizeof(peer));
				fprintf(stderr, "bfpatch publish: control message from %s refused: %s\n",
					peer, rp_auth_result_names[ar]);
			}
			continue;
		}
		if (rp_ctl_parse(buf, len, &c) != 0) {
			P->ctl_bad++;
			continue;
		}
		if (c.type == RP_JOIN && c.model_id && c.model_id != P->model_id) {
			/* another model's subscriber: it would be sent every frame
			 * and caught up for ever, all dropped at its end */
			if (P->other_model++ < 3) {
				char peer[64];
				pub_peer_str(&from, peer, sizeof(peer));
				fprintf(stderr, "bfpatch publish: JOIN from %s for model %016" PRIx64
					", not this one (%016" PRIx64 "); ignored\n", peer, c.model_id,
					P->model_id);
			}
			continue;
		}
		pub_sub *s = NULL;
		for (unsigned i = 0; i < P->n_subs; i++)
			if (P->subs[i].ctl.sin_addr.s_addr == from.sin_addr.s_addr &&
			    P->subs[i].ctl.sin_port == from.sin_port)
				s = &P->subs[i];
		if (c.type == RP_JOIN && !s && P->n_subs == MAX_SUBS && !P->told_full) {
			P->told_full = 1;
			fprintf(stderr, "bfpatch publish: %d subscribers already; more JOINs are "
				"ignored (put a bfpatch-relay in front for more)\n", MAX_SUBS);
		}
		if (c.type == RP_JOIN && !s && P->n_subs < MAX_SUBS) {
			s = &P->subs[P->n_subs++];
			memset(s, 0, sizeof(*s));
			s->ctl = from;
			s->data = from;
			s->data.sin_port = htons(c.data_port);
			s->version = c.version;
			nack_budget_init(&s->nack, P->nack_rate, t);
			for (unsigned j = 0; j < MAX_SUBS; j++) {
				struct pub_left *l = &P->left[j];
				if (l->ctl.sin_port == from.sin_port &&
				    l->ctl.sin_addr.s_addr == from.sin_addr.s_addr) {
					s->last_catchup = l->last_catchup;
					s->nack = l->nack;
					memset(l, 0, sizeof(*l));
				}
			}
			char peer[64];
			pub_peer_str(&s->data, peer, sizeof(peer));
			if (c.version == RP_VERSION_NONE)
				fprintf(stderr, "bfpatch publish: subscriber %s joined with no usable "
					"version\n", peer);
			else
				fprintf(stderr, "bfpatch publish: subscriber %s joined at version %u\n",
					peer, c.version);
			events_emit(&P->ev, "subscriber", "\"peer\":\"%s\",\"version\":%u", peer,
				    c.version);
		}
		if (!s)
			continue; /* NACKs only from JOINed subscribers, to their own address */
		s->last_seen = now_s(); /* a NACK answer before may have taken long */
		if (c.type == RP_JOIN) {
			/* a repeated JOIN updates the subscription (PROTOCOL.md 2.1) */
			s->data.sin_port = htons(c.data_port);
			if (c.version != s->version || s->version_since == 0)
				s->version_since = t;
			s->version = c.version;
			sub_link(P, s, c.rate_kbps, t);
			s->catchup = 1; /* the main loop decides */
		}
		if (c.type == RP_LEAVE) {
			sub_drop(P, (unsigned)(s - P->subs));
			continue;
		}
		if (c.type != RP_NACK)
			continue;
		nack_answer(P, s, &c, t);
	}
	/* subscribers JOIN every second; forget the silent ones */
	t = now_s();
	for (unsigned i = 0; i < P->n_subs; i++)
		if (t - P->subs[i].last_seen > SUB_TIMEOUT_S) {
			char peer[64];
			pub_peer_str(&P->subs[i].data, peer, sizeof(peer));
			fprintf(stderr, "bfpatch publish: subscriber %s silent for %.0f s, dropped\n",
				peer, SUB_TIMEOUT_S);
			sub_drop(P, i--);
		}
}

/* Tell every subscriber the newest version (PROTOCOL.md 2.3), so one
 * that lost all of a patch learns of it and NACKs it. */
static void pub_heartbeat(publisher *P, uint64_t model_id, uint32_t ver)
{
	rp_ctl c;
	memset(&c, 0, sizeof(c));
	c.type = RP_HEARTBEAT;
	c.model_id = model_id;
	c.version = ver;
	for (unsigned i = 0; i < P->n_subs; i++)
		pub_ctl_send(P, &c, &P->subs[i].ctl);
}

/* The publisher's side of a streamed encode (patch_opts.stream). */
typedef struct stream_ctx {
	publisher *P;
	uint32_t version;
	uint64_t params, changed;
	int key;
	double t0, t_first, t_encoded;
} stream_ctx;

/* Frames of the version being encoded, in index order with frame_count
 * 0: to every subscriber now; then NACKs of earlier versions and JOINs. */
static void pub_stream(void *arg, uint8_t *const *fr, const size_t *lens, size_t n)
{
	stream_ctx *sc = arg;
	publisher *P = sc->P;
	pub_sub *to[MAX_SUBS];
	if (sc->t_first == 0) {
		sc->t_first = now_s();
		events_emit(&P->ev, "first_frame", "\"version\":%u", sc->version);
	}
	for (unsigned s = 0; s < P->n_subs; s++)
		to[s] = &P->subs[s];
	pub_send_frames(P, fr, lens, n, to, P->n_subs);
	for (size_t i = 0; i < n; i++) /* no memory: those are not answered early */
		(void)patch_push(&P->streamed, fr[i], lens[i]);
	pub_control(P); /* may move subscribers: to[] is rebuilt each time */
}

/* Every frame encoded (on a worker thread; events are one write each). */
static void pub_encoded(void *arg, size_t frames, size_t bytes, uint64_t changed)
{
	stream_ctx *sc = arg;
	sc->t_encoded = now_s();
	sc->changed = changed;
	events_emit(&sc->P->ev, "encode_end", "\"version\":%u,\"frames\":%zu,\"bytes\":%zu,"
		    "\"params\":%" PRIu64 ",\"changed\":%" PRIu64 ",\"key\":%s", sc->version,
		    frames, bytes, sc->params, changed, sc->key ? "true" : "false");
}

/* Bring subscribers that are behind version ver up to it: the patches
 * still held, in order, or else a keyframe stream of the current model;
 * pub_catchup_send() sends them. */
static void pub_catchup(publisher *P, const model *cur, uint32_t ver, const patch_opts *po)
{
	double t = now_s();
	for (unsigned i = 0; i < P->n_subs && !P->closing; i++) {
		pub_sub *s = &P->subs[i];
		if (!s->catchup || s->cu_active)
			continue;
		s->catchup = 0;
		/* behind for a moment is patches in flight (NACKs repair
		 * them); behind at the same version for 3 s needs catching up */
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
		if (s->version == RP_VERSION_RELAY || t - s->last_catchup < 3 ||
		    (!none && (s->version >= ver || t - s->version_since < 3 ||
			       t - P->published_at < 3)))
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
		char err[ERRLEN];
		if ((P->hist.key_ver != kv || !P->hist.key.n) &&
		    history_key_make(&P->hist, cur, ver, po, err, sizeof(err))) {
			fprintf(stderr, "bfpatch publish: keyframe: %s\n", err);
			continue;
		}
		char peer[64];
		pub_peer_str(&s->data, peer, sizeof(peer));
		char at_v[32] = "no usable version";
		if (!none)
			snprintf(at_v, sizeof(at_v), "version %u", s->version);
		fprintf(stderr, "bfpatch publish: keyframe stream of version %u (%zu frames) to %s "
			"at %s\n", kv, P->hist.key.n, peer, at_v);
		events_emit(&P->ev, "keyframe", "\"version\":%u,\"peer\":\"%s\",\"frames\":%zu,"
			    "\"bytes\":%zu", kv, peer, P->hist.key.n, P->hist.key.len);
		P->keyframes++;
		cu_start(s, 1, 0, kv, kv);
	}
}


/* One slice of every catch-up in progress. A patch or keyframe stream no
 * longer held (a newer version took its place) ends the catch-up: the
 * subscriber's next JOINs start another. Returns whether any goes on. */
static int pub_catchup_send(publisher *P)
{
	int busy = 0;
	for (unsigned i = 0; i < P->n_subs; i++) {
		pub_sub *s = &P->subs[i];
		if (!s->cu_active)
			continue;
		const patch *p = pub_cu_patch(P, s);
		if (p && s->cu_next < p->n) {
			/* about 10 ms at --rate, or at the subscriber's link */
			size_t slice = s->link.rate && (!P->bucket.rate || s->link.rate < P->bucket.rate)
					       ? pub_slice((uint64_t)s->rate_kbps * 1000, P->frame_size)
					       : P->cu_slice;
			size_t n = p->n - s->cu_next < slice ? p->n - s->cu_next : slice;
			pub_send_one(P, s, p, s->cu_next, n);
			s->cu_next += n;
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
		if (!p || s->cu_next >= p->n) {
			s->cu_active = 0;
			s->last_catchup = now_s();
		}
		busy |= s->cu_active;
	}
	return busy;
}


/* Whether a process has path open for writing: a checkpoint written in
 * place (not renamed into the directory) is taken only once its writer
 * closed it, even if its size already looks right (a preallocated file).
 * A read lease is refused exactly then (fcntl(2)); where leases are not
 * to be had (another owner without CAP_LEASE, file systems without
 * them), the size check alone decides. */
static int being_written(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 1;
	int busy = fcntl(fd, F_SETLEASE, F_RDLCK) != 0 && errno == EAGAIN;
	if (!busy)
		(void)fcntl(fd, F_SETLEASE, F_UNLCK);
	close(fd);
	return busy;
}

/* A buffer file replaced at its path (a trainer that recreated it): map
 * the new one if it holds the same model. One behind version ver (the
 * one published) is followed too, and published once it passes ver. */
static void source_follow_buffer(source *S, uint32_t ver)
{
	struct stat sb;
	if (stat(S->path, &sb) != 0 || (sb.st_dev == S->dev && sb.st_ino == S->ino))
		return;
	char err[ERRLEN];
	wbuf nw;
	if (wbuf_open(&nw, S->path, err, sizeof(err)))
		return; /* half made: try again */
	S->dev = sb.st_dev;
	S->ino = sb.st_ino;
	if (nw.h->model_id != S->w.h->model_id || nw.h->n_params != S->w.h->n_params) {
		fprintf(stderr, "bfpatch publish: %s was replaced by a buffer of another model; "
			"still publishing from the one mapped before\n", S->path);
		wbuf_close(&nw);
		return;
	}
	uint32_t v = atomic_load(&nw.h->version);
	fprintf(stderr, "bfpatch publish: %s was replaced; following the new buffer (at version "
		"%u)\n", S->path, v);
	if (v <= ver)
		fprintf(stderr, "bfpatch publish: the new buffer is at version %u, not past version "
			"%u, which was published (a trainer that went back to an earlier "
			"checkpoint?): nothing is published until it passes %u\n", v, ver, ver);
	wbuf_close(&S->w);
	S->w = nw;
}

/* The entry of a step whose file fails to load, or -1. */
static int fail_find(const source *S, uint32_t step)
{
	for (int i = 0; i < (int)(sizeof(S->fail) / sizeof(S->fail[0])); i++)
		if (S->fail[i].step == step && step)
			return i;
	return -1;
}

/* Note that step's file failed to load at t (its first failure): in a free
 * entry, or the one of the lowest step. Returns the entry. */
static int fail_note(source *S, uint32_t step, double t)
{
	int at = fail_find(S, step);
	if (at >= 0)
		return at;
	at = 0;
	for (int i = 1; i < (int)(sizeof(S->fail) / sizeof(S->fail[0])); i++)
		if (S->fail[i].step < S->fail[at].step)
			at = i;
	S->fail[at].step = step;
	S->fail[at].first = S->fail[at].said = t;
	return at;
}

/* The version after ver, if there is one yet: 1 and *nw loaded, 0 if
 * not yet, -1 on error. With --dir that is step ver+1; if it is missing
 * and a later step is there (a trainer that keeps every k-th step, or
 * one pruned before it was published), or it failed to load for a minute
 * while a later one is there, the lowest later step: a patch may skip
 * versions. */
static int source_next(source *S, const model *cur, uint32_t ver, model *nw, uint32_t *nver,
		       char *err, size_t errlen)
{
	if (!S->is_buffer) {
		char path[PATH_MAX];
		const double t = now_s();
		if (S->cand <= ver || t - S->last_scan >= 1.0) {
			/* the step to take: ver + 1, or, where that is not there
			 * or fails to load for a minute, the next later one that
			 * is there (again and again: a missing step, then one cut
			 * short), never one past --steps */
			S->last_scan = t;
			uint32_t c = ver + 1, lo, hi;
			for (;;) {
				struct stat sb;
				snprintf(path, sizeof(path), "%s/step-%04u.safetensors", S->dir, c);
				const int missing = stat(path, &sb) != 0 && errno == ENOENT;
				const int f = fail_find(S, c);
				const int stuck = f >= 0 && t - S->fail[f].first > 60;
				if ((!missing && !stuck) || c == UINT32_MAX ||
				    !steps_scan(S->dir, c + 1, &lo, &hi))
					break;
				if (S->max_step && lo > S->max_step) {
					/* --steps N: N is not there or never loads, and
					 * the next step is past it */
					S->steps_done = 1;
					return 0;
				}
				c = lo;
			}
			if (c != ver + 1 && c != S->said_skip) {
				fprintf(stderr, "bfpatch publish: step %u %s; going on with step %u\n",
					ver + 1, fail_find(S, ver + 1) >= 0 ? "still fails to load"
									     : "is not there", c);
				S->said_skip = c;
			}
			S->cand = c;
		}
		const uint32_t next = S->cand;
		snprintf(path, sizeof(path), "%s/step-%04u.safetensors", S->dir, next);
		struct stat sb;
		if (stat(path, &sb) != 0 && errno == ENOENT)
			return 0;
		int f = fail_find(S, next);
		if (f >= 0 && sb.st_ino == S->other.st_ino && sb.st_dev == S->other.st_dev &&
		    sb.st_size == S->other.st_size && sb.st_mtim.tv_sec == S->other.st_mtim.tv_sec &&
		    sb.st_mtim.tv_nsec == S->other.st_mtim.tv_nsec)
			return 0; /* that file again, unchanged: not read again */
		int lrc;
		if (access(path, R_OK) != 0) /* unreadable (or a link loop): a load failure */
			lrc = set_err(err, errlen, "%s: %s", path, strerror(errno));
		else if (being_written(path))
			return 0;
		else /* a file still being written fails its size check: tried again */
			lrc = model_load_into(nw, path, S->spare, S->spare_cap, err, errlen);
		if (!lrc && (nw->model_id != cur->model_id || nw->n_params != cur->n_params)) {
			/* whole, but of another model: it never loads as this one */
			set_err(err, errlen, "%s has another tensor layout than version %u "
				"(another model); not published", path, ver);
			if (nw->params == S->spare) /* read into the spare: it stays */
				nw->params = NULL;
			model_free(nw);
			if (f < 0)
				fprintf(stderr, "bfpatch publish: %s\n", err);
			f = fail_note(S, next, t);
			S->fail[f].first = t - 61; /* passed over once a later step is there */
			S->other = sb;
			return 0;
		}
		if (lrc) {
			if (f < 0) {
				fail_note(S, next, t);
			} else if (t - S->fail[f].said > 10) {
				fprintf(stderr, "bfpatch publish: waiting for %s: %s\n", path, err);
				S->fail[f].said = t;
			}
			return 0;
		}
		if (nw->params == S->spare)
			S->spare = NULL;
		*nver = next;
		return 1;
	}
	source_follow_buffer(S, ver);
	uint32_t v = atomic_load(&S->w.h->version);
	if (v <= ver || atomic_load(&S->w.h->state) != WBUF_READY)
		return 0;
	*nw = S->proto; /* shares the layout; owns only its parameters */
	const size_t need = (size_t)S->proto.n_params * 2 + 64;
	nw->params = S->spare && S->spare_cap >= need ? S->spare : alloc_aligned(need);
	if (!nw->params)
		return set_err(err, errlen, "out of memory");
	if (wbuf_snapshot(&S->w, nw->params, nver) || *nver <= ver) {
		if (nw->params != S->spare)
			free(nw->params);
		return 0;
	}
	if (nw->params == S->spare)
		S->spare = NULL;
	return 1;
}


/* The buffer's layout as a model: its safetensors header, or raw. */
static int source_open_buffer(source *S, const char *path, model *cur, char *err, size_t errlen)
{
	if (wbuf_open(&S->w, path, err, errlen))
		return -1;
	S->is_buffer = 1;
	S->path = path;
	struct stat sb;
	if (fstat(S->w.fd, &sb) == 0) {
		S->dev = sb.st_dev;
		S->ino = sb.st_ino;
	}
	const wbuf_hdr *h = S->w.h;
	int rc;
	if (h->st_len) {
		rc = model_parse_safetensors(&S->proto, S->w.map + h->st_offset, h->st_len,
					     h->st_len + h->data_bytes, err, errlen);
		if (!rc && S->proto.n_params != h->n_params)
			rc = set_err(err, errlen, "%s: header and parameter count disagree", path);
		if (!rc && !(S->proto.header = malloc((size_t)h->st_len)))
			rc = set_err(err, errlen, "out of memory");
		if (!rc) { /* the parse keeps nothing of the buffer's bytes */
			memcpy(S->proto.header, S->w.map + h->st_offset, (size_t)h->st_len);
			S->proto.header_len = (size_t)h->st_len;
		}
	} else {
		rc = model_init_raw(&S->proto, h->n_params);
		free(S->proto.params);
	}
	S->proto.params = NULL;
	if (rc)
		return -1;
	*cur = S->proto;
	cur->params = alloc_aligned((size_t)h->n_params * 2 + 64);
	uint32_t v;
	if (!cur->params)
		return set_err(err, errlen, "out of memory");
	while (wbuf_snapshot(&S->w, cur->params, &v)) {
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	return (int)v;
}

/* Free what model_free would, minus what a buffer source's models share
 * with its prototype. */
static void source_free_model(source *S, model *m)
{
	if (S->is_buffer) {
		free(m->params);
		m->params = NULL;
	} else {
		model_free(m);
	}
}

/* A version retired: its parameters' memory becomes the spare the next
 * version is read into (one spare at most). */
static void source_retire_model(source *S, model *m)
{
	if (!S->spare && m->params && !m->map) {
		S->spare = m->params;
		S->spare_cap = (size_t)m->n_params * 2 + (S->is_buffer ? 64 : 0);
		m->params = NULL;
	}
	source_free_model(S, m);
}

/* ---- open, run, close ---- */

/* --key: libsodium, then each key file in order (the first signs). */
static int pub_open_keys(publisher *P)
{
	for (unsigned i = 0; i < P->cf->n_keys; i++) {
		char kerr[512] = "cannot initialise libsodium";
		if (rp_auth_init() || rp_auth_load(&P->auth, P->cf->key_paths[i], kerr, sizeof(kerr))) {
			fprintf(stderr, "bfpatch publish: %s\n", kerr);
			return 1;
		}
	}
	return 0;
}

/* The control port, bound (frames leave from it too), and the pacing at
 * --rate. */
static int pub_open_socket(publisher *P)
{
	const publish_config *cf = P->cf;
	rp_bucket_init(&P->bucket, (cf->rate_bps + 7) / 8, pub_burst(cf->rate_bps, cf->frame_size),
		       (uint64_t)(now_s() * 1e6));
	P->cu_slice = pub_slice(cf->rate_bps, cf->frame_size);
	P->frame_size = cf->frame_size;
	P->sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in la = {.sin_family = AF_INET, .sin_port = htons(cf->listen_port),
				 .sin_addr.s_addr = htonl(cf->listen_ip)};
	int big = 8 << 20;
	setsockopt(P->sock, SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
	if (P->sock < 0 || bind(P->sock, (struct sockaddr *)&la, sizeof(la)) != 0) {
		fprintf(stderr, "bfpatch publish: cannot bind port %u: %s\n", cf->listen_port,
			strerror(errno));
		return 1;
	}
	return 0;
}

/* The first version: the buffer's, or the first checkpoint in --dir
 * (old ones may have been pruned), with --resume the latest, once it
 * loads. 0, or the exit status after a message. */
static int pub_open_first(publisher *P)
{
	const publish_config *cf = P->cf;
	source *S = &P->src;
	char err[ERRLEN] = "", path[PATH_MAX];
	if (cf->buffer) {
		int v = source_open_buffer(S, cf->buffer, &P->cur, err, sizeof(err));
		if (v < 0)
			return die("publish", err);
		P->ver = (uint32_t)v;
		return 0;
	}
	S->dir = cf->dir;
	S->max_step = cf->steps == UINT32_MAX ? 0 : cf->steps;
	uint32_t first = 0, last = 0;
	if (!steps_scan(cf->dir, 0, &first, &last)) {
		fprintf(stderr, "bfpatch publish: no checkpoint DIR/step-NNNN.safetensors in %s\n",
			cf->dir);
		return 1;
	}
	uint32_t ver = cf->resume ? last : first;
	/* with the checks later steps get: not while a writer has it open
	 * (a preallocated file of zeros looks whole), not before it loads;
	 * --resume starts at the latest step that does */
	double said = 0;
	for (;;) {
		snprintf(path, sizeof(path), "%s/step-%04u.safetensors", cf->dir, ver);
		int busy = access(path, R_OK) == 0 && being_written(path);
		if (!busy && model_load(&P->cur, path, err, sizeof(err)) == 0)
			break;
		if (cf->resume && ver > first) {
			fprintf(stderr, "bfpatch publish: %s is not whole yet (%s); starting at the "
				"step before\n", path, busy ? "still being written" : err);
			/* the step before that is there (a trainer that keeps
			 * every k-th step leaves gaps) */
			struct stat sb;
			do {
				ver--;
				snprintf(path, sizeof(path), "%s/step-%04u.safetensors", cf->dir, ver);
			} while (ver > first && stat(path, &sb) != 0 && errno == ENOENT);
			continue;
		}
		if (now_s() - said > 10) {
			fprintf(stderr, "bfpatch publish: waiting for %s (%s)\n", path,
				busy ? "still being written" : err);
			said = now_s();
		}
		usleep(100000);
	}
	P->ver = ver;
	return 0;
}

int publisher_open(publisher *P, const publish_config *cf)
{
	memset(P, 0, sizeof(*P));
	P->cf = cf;
	P->sock = -1;
	P->ev.fd = -1;
	P->nack_rate = cf->nack_rate;
	history_init(&P->hist, cf->keep, cf->history, cf->buffer ? NULL : cf->dir);
	P->gate_open = cf->wait_subs == 0;
	/* actors hold tensor data: a new __metadata__ is no reason to stop */
	P->po.frame_size = cf->frame_size;
	P->po.any_header = 1;
	if (cf->self_contained)
		P->po.sparse = BFP_SPARSE_SELF_CONTAINED;
	if (pub_open_keys(P))
		return 1;
	if (cf->history && access(cf->history, W_OK) != 0) {
		fprintf(stderr, "bfpatch publish: --history %s: %s\n", cf->history, strerror(errno));
		return 1;
	}
	if (events_open(&P->ev, cf->events_path, "publish", cf->name)) {
		fprintf(stderr, "bfpatch publish: --events %s: %s\n", cf->events_path,
			strerror(errno));
		return 1;
	}
	if (pub_open_socket(P))
		return 1;
	/* from here, before the first version loads (which, with --resume,
	 * may make patches for a while): SIGUSR1 asks for the counters */
	signal(SIGUSR1, on_usr1);
	if (pub_open_first(P))
		return 1;
	P->model_id = P->cur.model_id;
	history_load(&P->hist, P->cur.model_id, P->ver, &P->cur, cf->resume);
	if (cf->resume && !cf->buffer && !cf->keyframes && P->ver > 0 &&
	    !history_find(&P->hist, P->ver))
		history_make(&P->hist, &P->cur, P->ver, &P->po);
	rp_catch_signal(SIGINT, on_signal);
	rp_catch_signal(SIGTERM, on_signal);
	rp_catch_signal(SIGHUP, on_signal);
	/* being_written's lease probe: a writer opening the file meanwhile
	 * breaks the lease, and the kernel says so with SIGIO (fatal unless
	 * ignored) */
	signal(SIGIO, SIG_IGN);
	return 0;
}

/* What is published from where, on stderr and in the events. */
static void pub_say_start(publisher *P)
{
	const publish_config *cf = P->cf;
	fprintf(stderr, "bfpatch publish: version %u from %s, %" PRIu64 " parameters%s\n", P->ver,
		cf->buffer ? cf->buffer : cf->dir, P->cur.n_params,
		cf->keyframes ? ", keyframes only" : "");
	events_emit(&P->ev, "start", "\"params\":%" PRIu64 ",\"model_id\":\"%016" PRIx64
		    "\",\"rate_bps\":%" PRIu64 ",\"frame_size\":%u,\"version\":%u", P->cur.n_params,
		    P->cur.model_id, cf->rate_bps, P->po.frame_size, P->ver);
	if (P->ver >= cf->steps)
		fprintf(stderr, "bfpatch publish: version %u is already at or past --steps %u: "
			"nothing new to publish; answering for --linger %u s\n", P->ver, cf->steps,
			cf->linger_s);
}

/* The next version, if it is time for one (at t): 1 with it in *nw and
 * *nver, 0 if none now, -1 to stop, *rc the exit status: --steps done
 * and --linger over with no catch-up left (catching_up), or the source
 * failed. */
static int pub_next(publisher *P, double t, int catching_up, model *nw, uint32_t *nver, int *rc)
{
	const publish_config *cf = P->cf;
	if (P->ver >= cf->steps || P->src.steps_done) {
		if (P->done_at == 0) {
			P->done_at = t;
			if (P->ver < cf->steps)
				fprintf(stderr, "bfpatch publish: no step from %u to --steps %u is there "
					"(or loads) and the next one is past it: stopping at version "
					"%u\n", P->ver + 1, cf->steps, P->ver);
		}
		/* then catch-ups in progress are finished, no new ones started
		 * (subscribers that keep coming would keep the publisher for
		 * ever) */
		P->closing = t - P->done_at >= cf->linger_s;
		return P->closing && !catching_up ? -1 : 0;
	}
	if (!P->gate_open && P->n_subs < cf->wait_subs) {
		/* --wait-subscribers: a gate at the start only (a subscriber
		 * that goes later must not stop the others) */
		if (!P->gate_said) {
			fprintf(stderr, "bfpatch publish: waiting for %u subscriber(s) to JOIN before "
				"publishing (--wait-subscribers)\n", cf->wait_subs);
			P->gate_said = 1;
		}
		return 0;
	}
	if (!P->gate_open && cf->wait_subs)
		fprintf(stderr, "bfpatch publish: %u subscriber(s) joined; publishing\n", P->n_subs);
	P->gate_open = 1;
	char err[ERRLEN] = "";
	int got = source_next(&P->src, &P->cur, P->ver, nw, nver, err, sizeof(err));
	if (got < 0)
		*rc = die("publish", err);
	return got;
}

/* Publish version nver (nw, taken over): encoded against the current one
 * and streamed to every subscriber while it is encoded (FORMAT.md 2.5),
 * then held in place of the oldest patch for NACKs and catch-ups. 0, or
 * the exit status of an error. */
static int pub_publish(publisher *P, model *nw, uint32_t nver)
{
	const int keyframes = P->cf->keyframes;
	model *cur = &P->cur;
	const uint32_t ver = P->ver;
	char err[ERRLEN] = "";
	if (nw->model_id != cur->model_id || nw->n_params != cur->n_params) {
		/* a weight buffer's layout is fixed; a step file's is checked
		 * by source_next */
		fprintf(stderr, "bfpatch publish: version %u has another tensor layout than version "
			"%u; not published\n", nver, ver);
		source_free_model(&P->src, nw);
		return 1;
	}
	if (cur->header_len != nw->header_len ||
	    (cur->header_len && memcmp(cur->header, nw->header, cur->header_len)))
		fprintf(stderr, "bfpatch publish: version %u: the safetensors header differs from "
			"version %u's beyond the tensor layout (__metadata__); the tensor data is "
			"published\n", nver, ver);
	uint32_t old_base, old_ver; /* the oldest patch held goes */
	const unsigned slot = history_evict(&P->hist, &old_base, &old_ver);
	P->po.base_version = ver;
	P->po.target_version = nver;
	events_emit(&P->ev, "encode_begin", "\"version\":%u", nver);
	stream_ctx sc = {.P = P, .version = nver, .params = nw->n_params, .key = keyframes};
	patch_free(&P->streamed);
	P->streamed_ver = nver;
	P->streaming = 1;
	patch_opts so = P->po;
	so.stream = pub_stream;
	so.encoded = pub_encoded;
	so.stream_arg = &sc;
	sc.t0 = now_s();
	patch *p = &P->hist.p[slot];
	int erc = keyframes ? history_keyframes(nw, nver, &so, p, err, sizeof(err))
			    : patch_encode(cur, nw, &so, p, err, sizeof(err));
	P->streaming = 0;
	patch_free(&P->streamed);
	if (erc) {
		source_free_model(&P->src, nw);
		return die("publish", err);
	}
	double t2 = now_s();
	history_hold(&P->hist, slot, keyframes ? 0 : ver, nver);
	if (!pub_quit)
		events_emit(&P->ev, "send_end", "\"version\":%u,\"frames\":%zu,\"bytes\":%zu,"
			    "\"subscribers\":%u", nver, p->n, p->len, P->n_subs);
	uint64_t changed = sc.changed;
	if (keyframes) /* the dense baseline: keyframes carry no changes */
		for (uint64_t i = 0; i < nw->n_params; i++)
			changed += cur->params[i] != nw->params[i];
	const double x = (double)nw->n_params * 2 / (double)p->len;
	char sent[64];
	if (pub_quit) /* a signal cut the sending short: the rest never left */
		snprintf(sent, sizeof(sent), "sending cut short by a signal");
	else
		snprintf(sent, sizeof(sent), "sent in %.1f ms", (t2 - sc.t0) * 1e3);
	fprintf(stderr, "bfpatch publish: version %u -> %u: %.3f%% changed, %zu frames, %zu bytes "
		"(%.*fx %s than dense); first frame out after %.1f ms, encoded in %.1f ms, %s, %u "
		"subscriber(s)\n", ver, nver, 100.0 * (double)changed / (double)nw->n_params, p->n,
		p->len, x >= 1 ? 1 : 2, x >= 1 ? x : 1 / x, x >= 1 ? "smaller" : "larger",
		(sc.t_first - sc.t0) * 1e3, (sc.t_encoded - sc.t0) * 1e3, sent, P->n_subs);
	history_put(&P->hist, slot, old_base, old_ver);
	source_retire_model(&P->src, cur);
	*cur = *nw;
	P->ver = nver;
	P->published_at = now_s();
	return 0;
}

int publisher_run(publisher *P)
{
	int rc = 0;
	pub_say_start(P);
	while (!pub_quit) {
		if (pub_dump_stats) {
			pub_dump_stats = 0;
			pub_print_stats(P, P->ver);
		}
		pub_control(P);
		pub_catchup(P, &P->cur, P->ver, &P->po);
		const int catching_up = pub_catchup_send(P);
		const double t = now_s();
		if (t >= P->next_heartbeat && P->ver > 0) {
			pub_heartbeat(P, P->cur.model_id, P->ver);
			P->next_heartbeat = t + 1.0;
		}
		model nw;
		uint32_t nver = 0;
		const int got = pub_next(P, t, catching_up, &nw, &nver, &rc);
		if (got < 0 || (got > 0 && (rc = pub_publish(P, &nw, nver)) != 0))
			break;
		if (!got) {
			struct pollfd pfd = {.fd = P->sock, .events = POLLIN};
			poll(&pfd, 1, catching_up ? 0 : 20);
		}
	}
	pub_print_stats(P, P->ver);
	events_emit(&P->ev, "stats", "\"frames\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"nacks\":%"
		    PRIu64 ",\"resent\":%" PRIu64 ",\"version\":%u,\"auth_fail\":%" PRIu64,
		    P->sent_frames, P->sent_bytes, P->nacks, P->resent, P->ver, P->auth_fail);
	return rc;
}

void publisher_close(publisher *P)
{
	source *S = &P->src;
	history_free(&P->hist);
	patch_free(&P->streamed);
	source_free_model(S, &P->cur);
	free(S->spare);
	S->spare = NULL;
	if (S->is_buffer) {
		model_free(&S->proto);
		wbuf_close(&S->w);
		S->is_buffer = 0;
	}
	events_close(&P->ev);
	if (P->sock >= 0)
		close(P->sock);
	P->sock = -1;
}

int cmd_publish(int argc, char **argv)
{
	publish_config cf;
	int rc = publish_parse_args(argc, argv, &cf);
	if (rc || cf.help)
		return rc;
	publisher *P = calloc(1, sizeof(*P)); /* its rp_auth's replay memory: about 100 KB */
	if (!P)
		return die("publish", "out of memory");
	rc = publisher_open(P, &cf);
	if (!rc)
		rc = publisher_run(P);
	publisher_close(P);
	free(P);
	return rc;
}
