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
 * then opens, runs and closes a publisher, as the relay's main() does;
 * the rest is by role: source.c (versions in), history.c (patches held),
 * subs.c (control messages, subscribers, catch-ups), nack.c (NACK
 * answers), send.c (frames out, paced); for sharded trainers lead.c
 * (--ranks: a lead merges its ranks' frames), rank.c (--lead: a rank
 * encodes the tensors it owns) and ranklink.c (the link between them).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bfpatch.h"
#include "util.h"
#include "publish.h"
#include "publisher.h"

volatile sig_atomic_t pub_quit, pub_dump_stats;
int pub_verbosity = 1;

void pub_info(const char *fmt, ...)
{
	if (!pub_verbosity)
		return;
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
}
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
	pub_info("bfpatch publish: at version %u; sent %" PRIu64 " frames (%" PRIu64
		" bytes), %" PRIu64 " NACKs answered with %" PRIu64 " frames, %" PRIu64
		" keyframe streams, %" PRIu64 " history write errors, %" PRIu64 " control messages "
		"refused (authentication: %" PRIu64 " stale, %" PRIu64 " future, %" PRIu64
		" replayed, %" PRIu64 " bad tag, %" PRIu64 " unknown key, %" PRIu64 " unsigned; %"
		PRIu64 " senders' replay memory evicted), %" PRIu64 " NACKed frames over a "
		"subscriber's budget, %" PRIu64 " malformed control messages, %" PRIu64 " JOINs "
		"for another model, %" PRIu64 " messages of another publisher run; %u "
		"subscriber(s)\n",
		ver, P->sent_frames, P->sent_bytes, P->nacks, P->resent, P->keyframes,
		P->hist.errors, P->auth_fail, P->auth.ctl[RP_AUTH_STALE],
		P->auth.ctl[RP_AUTH_FUTURE], P->auth.ctl[RP_AUTH_REPLAY],
		P->auth.ctl[RP_AUTH_BAD_TAG], P->auth.ctl[RP_AUTH_UNKNOWN_KEY],
		P->auth.ctl[RP_AUTH_MISSING], P->auth.evicted, P->nack_limited, P->ctl_bad,
		P->other_model, P->other_run, P->n_subs);
	if (P->enc_versions)
		pub_info("bfpatch publish: encode per version: %.1f ms mean over %" PRIu64
			" versions\n", P->enc_ms_sum / (double)P->enc_versions, P->enc_versions);
	lead_print_stats((publisher *)P);
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
	char perr[512];
	if (P->cf->peer_keys && rp_auth_load_peers(&P->auth, P->cf->peer_keys, perr, sizeof(perr))) {
		fprintf(stderr, "bfpatch publish: %s\n", perr);
		return 1;
	}
	if ((P->cf->n_keys || P->cf->peer_keys) && !P->cf->lead) {
		/* (none for a rank: its link has sessions, PROTOCOL.md 5.2)
		 * this start's run: every frame and HEARTBEAT is bound to it,
		 * so nothing of another run or of before a restart (a rollback)
		 * is taken for it (docs/SECURITY.md "Runs") */
		char r[17];
		P->auth.run = rp_auth_new_run();
		rp_auth_run_str(P->auth.run, r);
		pub_info("bfpatch publish: publisher run %s\n", r);
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

int publisher_open(publisher *P, const publish_config *cf)
{
	memset(P, 0, sizeof(*P));
	P->cf = cf;
	P->sock = -1;
	P->ev.fd = -1;
	P->nack_rate = cf->nack_rate;
	history_init(&P->hist, cf->keep, cf->history, cf->buffer ? NULL : cf->dir);
	P->gate_open = cf->wait_subs == 0;
	P->po.frame_size = cf->frame_size;
	P->po.key_flags = cf->key_flags;
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
	if (cf->verbosity > 1)
		events_echo(&P->ev, 2);
	if (!cf->lead && pub_open_socket(P)) /* a rank has no subscribers */
		return 1;
	/* from here, before the first version loads (which, with --resume,
	 * may make patches for a while): SIGUSR1 asks for the counters */
	signal(SIGUSR1, on_usr1);
	if (cf->n_ranks ? lead_open(P) : source_open(&P->src, cf, &P->cur, &P->ver))
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
	pub_info("bfpatch publish: version %u from %s, %" PRIu64 " parameters%s\n", P->ver,
		cf->n_ranks ? "the ranks" : cf->buffer ? cf->buffer : cf->dir, P->cur.n_params,
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
			pub_info("bfpatch publish: waiting for %u subscriber(s) to JOIN before "
				"publishing (--wait-subscribers)\n", cf->wait_subs);
			P->gate_said = 1;
		}
		return 0;
	}
	if (!P->gate_open && cf->wait_subs)
		pub_info("bfpatch publish: %u subscriber(s) joined; publishing\n", P->n_subs);
	P->gate_open = 1;
	if (P->lead)
		return 0; /* its versions come from the ranks (lead_step) */
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
	uint32_t old_base, old_ver; /* the oldest patch held goes */
	const unsigned slot = history_evict(&P->hist, &old_base, &old_ver);
	P->po.base_version = ver;
	P->po.target_version = nver;
	events_emit(&P->ev, "encode_begin", "\"version\":%u", nver);
	stream_ctx sc = {.P = P, .version = nver, .params = nw->n_params, .key = keyframes};
	patch_free(&P->streamed);
	P->streamed_ver = nver;
	P->streaming = 1;
	P->send_cut = 0;
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
	/* every frame left, even if a signal came after the last one (while
	 * the patch was put together and kept) */
	if (!P->send_cut)
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
	pub_info("bfpatch publish: version %u -> %u: %.3f%% changed, %zu frames, %zu bytes "
		"(%.*fx %s than dense); first frame out after %.1f ms, encoded in %.1f ms, %s, %u "
		"subscriber(s)\n", ver, nver, 100.0 * (double)changed / (double)nw->n_params, p->n,
		p->len, x >= 1 ? 1 : 2, x >= 1 ? x : 1 / x, x >= 1 ? "smaller" : "larger",
		(sc.t_first - sc.t0) * 1e3, (sc.t_encoded - sc.t0) * 1e3, sent, P->n_subs);
	P->enc_versions++;
	P->enc_ms_sum += (sc.t_encoded - sc.t0) * 1e3;
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
	if (P->cf->lead)
		return rank_run(P);
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
		if (t >= P->next_heartbeat) {
			pub_heartbeat(P, P->cur.model_id, P->ver);
			P->next_heartbeat = t + 1.0;
		}
		model nw;
		uint32_t nver = 0;
		const int got = pub_next(P, t, catching_up, &nw, &nver, &rc);
		if (got < 0 || (got > 0 && (rc = pub_publish(P, &nw, nver)) != 0))
			break;
		if (P->lead) {
			if ((rc = lead_step(P, catching_up ? 0 : 20)) != 0)
				break;
		} else if (!got) {
			struct pollfd pfd = {.fd = P->sock, .events = POLLIN};
			poll(&pfd, 1, catching_up ? 0 : 20);
		}
	}
	pub_print_stats(P, P->ver);
	events_emit(&P->ev, "stats", "\"frames\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"nacks\":%"
		    PRIu64 ",\"resent\":%" PRIu64 ",\"version\":%u,\"auth_fail\":%" PRIu64
		    ",\"key_streamed\":%" PRIu64, P->sent_frames, P->sent_bytes, P->nacks, P->resent,
		    P->ver, P->auth_fail, P->key_streamed);
	return rc;
}

void publisher_close(publisher *P)
{
	history_free(&P->hist);
	patch_free(&P->streamed);
	lead_close(P); /* and the source: a lead's, or --dir's or --buffer's */
	events_close(&P->ev);
	rp_auth_free(&P->auth);
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
	pub_verbosity = cf.verbosity;
	publisher *P = calloc(1, sizeof(*P)); /* its rp_auth's replay memory: about 270 KB */
	if (!P)
		return die("publish", "out of memory");
	rc = publisher_open(P, &cf);
	if (!rc)
		rc = publisher_run(P);
	publisher_close(P);
	free(P);
	return rc;
}
