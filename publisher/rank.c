/*
 * rank.c: `bfpatch publish --lead HOST:PORT`, one rank of a sharded
 * trainer. It encodes only the tensors it owns, on all cores of its own
 * host, against its own previous version, and sends the frames to the
 * lead publisher over an authenticated TCP link (docs/PROTOCOL.md 5);
 * the lead checks, merges and publishes them. Encoding is the costly
 * part, so N ranks encode a version in parallel.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bfpatch.h"
#include "util.h"
#include "publisher.h"

int rank_owned_ranges(const model *m, char *const *names, size_t n, prange **out,
		      size_t *n_out, char *err, size_t errlen)
{
	prange *r = malloc((m->n_tensors ? m->n_tensors : 1) * sizeof(*r));
	unsigned char *own = calloc(m->n_tensors ? m->n_tensors : 1, 1);
	*out = NULL;
	*n_out = 0;
	if (!r || !own) {
		free(r);
		free(own);
		return set_err(err, errlen, "out of memory");
	}
	for (size_t k = 0; k < n; k++) {
		size_t i = 0;
		for (; i < m->n_tensors; i++)
			if (m->tensors[i].name_len == strlen(names[k]) &&
			    !memcmp(m->tensors[i].name, names[k], m->tensors[i].name_len))
				break;
		if (i == m->n_tensors) {
			free(r);
			free(own);
			return set_err(err, errlen, "owned tensor '%s' is not in the model's layout "
				       "(%zu tensors)", names[k], m->n_tensors);
		}
		own[i] = 1;
	}
	/* a 16-bit word two tensors share (a boundary at an odd byte) goes
	 * with the first tensor, and its rank must hold both tensors' bytes
	 * of it: one rank owns both, or neither */
	for (size_t i = 0; i < m->n_tensors; i++) {
		const bfp_tensor *t = &m->tensors[i];
		if (!own[i] || t->byte_end == t->byte_begin)
			continue;
		for (size_t j = 0; j < m->n_tensors; j++) {
			const bfp_tensor *u = &m->tensors[j];
			const int before = t->byte_begin % 2 && u->byte_begin < t->byte_begin &&
					   u->byte_end >= t->byte_begin && u->byte_end > u->byte_begin;
			const int after = t->byte_end % 2 && u->byte_begin <= t->byte_end &&
					  u->byte_end > t->byte_end;
			if (own[j] || j == i || !(before || after))
				continue;
			set_err(err, errlen, "tensors '%.*s' and '%.*s' share a 16-bit word (a "
				"boundary at byte %" PRIu64 "): one rank must own both, and this "
				"one owns only the first", (int)t->name_len, t->name,
				(int)u->name_len, u->name, before ? t->byte_begin : t->byte_end);
			free(r);
			free(own);
			return -1;
		}
	}
	size_t k = 0;
	for (size_t i = 0; i < m->n_tensors; i++) {
		/* the words a whole-model encode gives tensor i (patch_encode:
		 * a word two tensors share is the first one's) */
		const uint64_t b = (m->tensors[i].byte_begin + 1) / 2, e = (m->tensors[i].byte_end + 1) / 2;
		if (own[i] && e > b)
			r[k++] = (prange){b, e};
	}
	free(own);
	*out = r;
	*n_out = k;
	return 0;
}

/* ---- the owned ranges, encoded on all cores ---- */

int rank_encode(const model *base, const model *target, const prange *r, size_t n,
		const patch_opts *po, patch *out, char *err, size_t errlen)
{
	return patch_encode_ranges(base->params, target->params, target->n_params,
				   target->model_id, po, r, n, out, err, errlen);
}

/* ---- the rank's run ---- */

typedef struct rank_state {
	publisher *P;
	rl_conn c;
	char **names;           /* owned tensors (NULL: all) */
	size_t n_names;
	prange *r;
	size_t n_r;
	uint64_t owned_params;
	uint64_t sent_versions, sent_frames, sent_bytes, committed, refused, connects;
	uint32_t last_result;
	double said_connect;
	/* the version encoded last, until the lead said it has it whole
	 * (any RESULT of it): its frames, weights, number and encode time;
	 * sent: on the current link, waiting for that answer */
	int pending, sent;
	double sent_at;
	patch p;
	model nw;
	uint32_t nver;
	double enc_ms;
} rank_state;

/* The owned tensor names: --owned FILE, or PATH.owned beside a --buffer
 * (bfpatch.Publisher(owned=...) writes it), one name a line ('#' lines
 * and blank ones skipped); neither: every tensor. */
static int rank_read_owned(rank_state *R, const char *path, int must)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		if (!must && errno == ENOENT)
			return 0;
		fprintf(stderr, "bfpatch publish: owned tensors %s: %s\n", path, strerror(errno));
		return 1;
	}
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	size_t room = 0;
	R->n_names = 0;
	R->names = NULL;
	while ((n = getline(&line, &cap, f)) >= 0) {
		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
			line[--n] = 0;
		if (n == 0 || line[0] == '#')
			continue;
		if (R->n_names == room) {
			room = room * 2 + 64;
			char **nn = realloc(R->names, room * sizeof(*nn));
			if (!nn)
				break;
			R->names = nn;
		}
		if (!(R->names[R->n_names] = strdup(line)))
			break;
		R->n_names++;
	}
	int bad = ferror(f) || n >= 0;
	free(line);
	fclose(f);
	if (bad) {
		fprintf(stderr, "bfpatch publish: owned tensors %s: read error\n", path);
		return 1;
	}
	if (!R->names) /* a file with no name owns nothing: refused as a mistake */
		fprintf(stderr, "bfpatch publish: %s names no tensor\n", path);
	return R->names ? 0 : 1;
}

/* --buffer: PATH.taken holds the version this rank took last (written
 * beside the buffer, renamed in), so that a trainer commits the next
 * only once this one is taken (bfpatch.Publisher(owned=...) waits for
 * it): ranks never skip a version. Removed at exit (v UINT32_MAX). */
static void rank_mark_taken(const rank_state *R, uint32_t v)
{
	const char *buf = R->P->cf->buffer;
	char path[4096], tmp[4200];
	if (!buf)
		return;
	snprintf(path, sizeof(path), "%s.taken", buf);
	if (v == UINT32_MAX) {
		(void)unlink(path);
		return;
	}
	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
	FILE *f = fopen(tmp, "w");
	int ok = f && fprintf(f, "%u\n", v) > 0;
	if (f)
		ok = fclose(f) == 0 && ok;
	if (!ok || rename(tmp, path)) {
		static int said;
		if (!said++)
			fprintf(stderr, "bfpatch publish: rank: cannot write %s: %s\n", path,
				strerror(errno));
		(void)unlink(tmp);
	}
}

static void rank_close_conn(rank_state *R)
{
	if (R->c.fd >= 0)
		close(R->c.fd);
	R->c.fd = -1;
	R->c.in_len = 0;
	R->sent = 0; /* a version sent and not answered goes again */
}

/* Connect and say HELLO; wait (up to 10 s) for the WELCOME. 0 when the
 * link is up, 1 to try again later, -1 when the lead refused for good
 * (another model). */
static int rank_connect(rank_state *R)
{
	publisher *P = R->P;
	const publish_config *cf = P->cf;
	const double t = now_s();
	rl_conn *c = &R->c;
	memset(c, 0, sizeof(*c));
	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	c->key = P->auth.n_keys ? &P->auth.keys[0] : NULL;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(cf->lead_port),
				.sin_addr.s_addr = htonl(cf->lead_ip)};
	if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
		if (t - R->said_connect > 10) {
			fprintf(stderr, "bfpatch publish: rank %u: cannot reach the lead at %s: %s; "
				"trying again\n", cf->rank, cf->lead, strerror(errno));
			R->said_connect = t;
		}
		rank_close_conn(R);
		return 1;
	}
	int one = 1;
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	uint8_t hello[RL_HELLO_LEN], nonce[16];
	if (getrandom(nonce, sizeof(nonce), 0) != (ssize_t)sizeof(nonce))
		memset(nonce, 0, sizeof(nonce));
	rl_put32(hello, cf->rank);
	rl_put32(hello + 4, P->ver);
	rl_put64(hello + 8, P->cur.model_id);
	memcpy(hello + 16, nonce, 16);
	if (rl_send(c, RL_HELLO, hello, sizeof(hello), 0)) {
		rank_close_conn(R);
		return 1;
	}
	while (now_s() - t < 10 && !pub_quit) {
		struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
		poll(&pfd, 1, 100);
		int got = rl_fill(c);
		rl_msg m = {0};
		const char *why;
		if (got < 0)
			break;
		int k = rl_next(c, &m, 1, &why);
		if (k == 0)
			continue;
		if (k < 0 || m.type != RL_WELCOME || m.len < RL_WELCOME_LEN) {
			if (m.type == RL_RESULT && m.len > 8) /* the lead says why it refused */
				fprintf(stderr, "bfpatch publish: rank %u: the lead refused this rank "
					"(its answer, unsigned): %.*s\n", cf->rank, (int)(m.len - 8),
					(const char *)m.body + 8);
			break;
		}
		/* its session seals it too: verified as every message after */
		c->session = rl_get64(m.body + 16);
		c->seq_in = RL_DOWN;
		if (rl_next(c, &m, 0, &why) != 1 || memcmp(m.body + 24, nonce, 16) ||
		    rl_get32(m.body) != cf->rank) {
			fprintf(stderr, "bfpatch publish: rank %u: the lead's answer failed "
				"authentication (%s): is its --key this rank's?\n", cf->rank,
				*why ? why : "nonce or rank");
			break;
		}
		const uint32_t lv = rl_get32(m.body + 4);
		rl_consume(c, &m);
		R->connects++;
		pub_info("bfpatch publish: rank %u: linked to the lead at %s (lead at "
			"version %u, this rank at %u)\n", cf->rank, cf->lead, lv, P->ver);
		if (lv != P->ver)
			fprintf(stderr, "bfpatch publish: rank %u: the lead is at version %u, this "
				"rank at %u: the lead refuses a version whose base is not its own; "
				"start every rank from the lead's version\n", cf->rank, lv, P->ver);
		events_emit(&P->ev, "rank_linked", "\"rank\":%u,\"lead_version\":%u,\"version\":%u",
			    cf->rank, lv, P->ver);
		return 0;
	}
	if (!pub_quit && now_s() - t >= 10)
		fprintf(stderr, "bfpatch publish: rank %u: no answer from the lead at %s in 10 s\n",
			cf->rank, cf->lead);
	else if (!pub_quit)
		fprintf(stderr, "bfpatch publish: rank %u: the lead at %s closed the link (it "
			"refused this rank: key, rank number or model; its log says which)\n",
			cf->rank, cf->lead);
	rank_close_conn(R);
	return 1;
}

/* The lead has the version sent whole: the rank is at it. */
static void rank_delivered(rank_state *R)
{
	publisher *P = R->P;
	R->sent_versions++;
	R->sent_frames += R->p.n;
	R->sent_bytes += R->p.len;
	patch_free(&R->p);
	R->pending = R->sent = 0;
	source_retire_model(&P->src, &P->cur);
	P->cur = R->nw;
	P->ver = R->nver;
}

/* What the lead said about the versions sent (RESULT), read as it comes. */
static int rank_results(rank_state *R)
{
	const unsigned rank = R->P->cf->rank;
	if (R->c.fd < 0)
		return 0;
	int got = rl_fill(&R->c);
	rl_msg m;
	const char *why;
	int k;
	while ((k = rl_next(&R->c, &m, 0, &why)) == 1) {
		if (m.type == RL_RESULT && m.len >= 8) {
			const uint32_t v = rl_get32(m.body), st = rl_get32(m.body + 4);
			if (R->pending && R->sent && v == R->nver)
				rank_delivered(R);
			if (st == 2) {
				/* a receipt: the lead holds the version whole */
			} else if ((R->last_result = v, st == 0)) {
				R->committed++;
			} else {
				R->refused++;
				fprintf(stderr, "bfpatch publish: rank %u: the lead refused version %u: "
					"%.*s\n", rank, v, (int)(m.len - 8), (const char *)m.body + 8);
				events_emit(&R->P->ev, "rank_refused", "\"rank\":%u,\"version\":%u",
					    rank, v);
			}
		}
		rl_consume(&R->c, &m);
	}
	if (k < 0 || got < 0) {
		fprintf(stderr, "bfpatch publish: rank %u: link to the lead %s%s\n", rank,
			k < 0 ? "refused: " : "closed", k < 0 ? why : "");
		rank_close_conn(R);
		return -1;
	}
	return 0;
}

/* Send the version encoded last (R->p, R->nw): its frames and END. The
 * rank is at that version once the lead answers it (rank_delivered);
 * with the link lost before, it stays at its base and sends the version
 * again once linked again (bytes a socket took may never have reached
 * the lead). */
static void rank_send(rank_state *R)
{
	publisher *P = R->P;
	const patch *p = &R->p;
	for (size_t i = 0; i < p->n && R->c.fd >= 0; i++)
		if (rl_send(&R->c, RL_FRAME, p->buf + p->off[i], p->off[i + 1] - p->off[i], 0))
			rank_close_conn(R);
	uint8_t end[RL_END_LEN];
	rl_put32(end, P->ver);
	rl_put32(end + 4, R->nver);
	rl_put32(end + 8, (uint32_t)p->n);
	rl_put32(end + 12, 0);
	rl_put64(end + 16, p->len);
	rl_put64(end + 24, (uint64_t)(R->enc_ms * 1e3));
	if (R->c.fd >= 0 && rl_send(&R->c, RL_END, end, sizeof(end), 0))
		rank_close_conn(R);
	const int sent = R->c.fd >= 0;
	pub_info("bfpatch publish: rank %u: version %u -> %u: %zu tensors' %" PRIu64
		" parameters encoded in %.1f ms, %zu frames, %zu bytes %s\n", P->cf->rank, P->ver,
		R->nver, R->n_r, R->owned_params, R->enc_ms, p->n, p->len,
		sent ? "sent to the lead" : "not sent (link lost): sent again once linked");
	events_emit(&P->ev, "rank_sent", "\"rank\":%u,\"base\":%u,\"version\":%u,\"frames\":%zu,"
		    "\"bytes\":%zu,\"encode_ms\":%.3f,\"sent\":%s", P->cf->rank, P->ver, R->nver,
		    p->n, p->len, R->enc_ms, sent ? "true" : "false");
	R->sent = sent; /* the lead's receipt (a RESULT) delivers it */
	R->sent_at = now_s();
}

/* Encode version nver (nw, taken over) against the current one, owned
 * ranges only, and send it. 0, or the exit status. */
static int rank_publish(rank_state *R, model *nw, uint32_t nver)
{
	publisher *P = R->P;
	char err[ERRLEN] = "";
	if (nw->model_id != P->cur.model_id || nw->n_params != P->cur.n_params) {
		fprintf(stderr, "bfpatch publish: version %u has another tensor layout than version "
			"%u; not published\n", nver, P->ver);
		source_free_model(&P->src, nw);
		return 1;
	}
	patch_opts po = P->po;
	po.base_version = P->ver;
	po.target_version = nver;
	const double t0 = now_s();
	if (rank_encode(&P->cur, nw, R->r, R->n_r, &po, &R->p, err, sizeof(err))) {
		source_free_model(&P->src, nw);
		return die("publish", err);
	}
	R->enc_ms = (now_s() - t0) * 1e3;
	P->enc_versions++;
	P->enc_ms_sum += R->enc_ms;
	R->nw = *nw;
	R->nver = nver;
	R->pending = 1;
	/* ranks never skip a version, so all of them share the base
	 * (PROTOCOL.md 5.3): this one is sent before the next is taken */
	rank_send(R);
	return 0;
}

static void rank_print_stats(const rank_state *R)
{
	const publisher *P = R->P;
	pub_info("bfpatch publish: rank %u at version %u: %" PRIu64 " versions sent to the "
		"lead (%" PRIu64 " frames, %" PRIu64 " bytes), %" PRIu64 " committed, %" PRIu64
		" refused, %" PRIu64 " links; %zu tensors, %" PRIu64 " of %" PRIu64
		" parameters owned; encode per version: %.1f ms mean over %" PRIu64 "\n",
		P->cf->rank, P->ver, R->sent_versions, R->sent_frames, R->sent_bytes, R->committed,
		R->refused, R->connects, R->n_r, R->owned_params, P->cur.n_params,
		P->enc_versions ? P->enc_ms_sum / (double)P->enc_versions : 0.0, P->enc_versions);
	events_emit((events *)&P->ev, "stats", "\"rank\":%u,\"version\":%u,\"versions\":%" PRIu64
		    ",\"frames\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"committed\":%" PRIu64
		    ",\"refused\":%" PRIu64 ",\"encode_ms_mean\":%.3f", P->cf->rank, P->ver,
		    R->sent_versions, R->sent_frames, R->sent_bytes, R->committed, R->refused,
		    P->enc_versions ? P->enc_ms_sum / (double)P->enc_versions : 0.0);
}

int rank_run(publisher *P)
{
	const publish_config *cf = P->cf;
	rank_state R;
	memset(&R, 0, sizeof(R));
	R.P = P;
	R.c.fd = -1;
	int rc = 0;
	char err[ERRLEN];
	if (cf->owned) {
		rc = rank_read_owned(&R, cf->owned, 1);
	} else if (cf->buffer) {
		char path[4096];
		snprintf(path, sizeof(path), "%s.owned", cf->buffer);
		rc = rank_read_owned(&R, path, 0);
	}
	if (!rc && R.names) {
		if (rank_owned_ranges(&P->cur, R.names, R.n_names, &R.r, &R.n_r, err, sizeof(err)))
			rc = die("publish", err);
	} else if (!rc) { /* every tensor: the whole model, as one publisher */
		R.r = malloc(sizeof(*R.r));
		R.n_r = R.r ? 1 : 0;
		if (R.r)
			R.r[0] = (prange){0, P->cur.n_params};
		else
			rc = die("publish", "out of memory");
	}
	for (size_t i = 0; i < R.n_r; i++)
		R.owned_params += R.r[i].end - R.r[i].begin;
	if (!rc)
		pub_info("bfpatch publish: rank %u of the lead at %s: version %u from %s, "
			"%" PRIu64 " of %" PRIu64 " parameters owned (%zu tensors%s)\n", cf->rank,
			cf->lead, P->ver, cf->buffer ? cf->buffer : cf->dir, R.owned_params,
			P->cur.n_params, R.names ? R.n_names : P->cur.n_tensors,
			R.names ? "" : ": all");
	double linger_from = 0;
	if (!rc)
		rank_mark_taken(&R, P->ver);
	while (!rc && !pub_quit) {
		if (pub_dump_stats) {
			pub_dump_stats = 0;
			rank_print_stats(&R);
		}
		if (R.c.fd < 0) {
			/* no version is taken while the link is down: the rank
			 * goes on from the version it sent last */
			if (rank_connect(&R) > 0) {
				for (int i = 0; i < 10 && !pub_quit; i++)
					usleep(100000);
			}
			continue;
		}
		if (rank_results(&R) < 0)
			continue;
		if (R.pending && !R.sent) { /* linked again: the version the link lost */
			rank_send(&R);
			continue;
		}
		if (R.pending) { /* the lead's receipt of it, before the next */
			if (now_s() - R.sent_at > 60) {
				/* a lead busy for a minute, or a receipt lost: link
				 * again and send it again (the lead drops a version it
				 * has and says so) */
				fprintf(stderr, "bfpatch publish: rank %u: no receipt of version %u from "
					"the lead in 60 s; linking again\n", cf->rank, R.nver);
				rank_close_conn(&R);
				continue;
			}
			struct pollfd pfd = {.fd = R.c.fd, .events = POLLIN};
			poll(&pfd, 1, 20);
			continue;
		}
		if (P->ver >= cf->steps || P->src.steps_done) {
			/* --steps: the last version sent; the lead's answer to it,
			 * for --linger at most */
			if (!linger_from)
				linger_from = now_s();
			if (R.last_result >= P->ver || now_s() - linger_from >= cf->linger_s)
				break;
			struct pollfd pfd = {.fd = R.c.fd, .events = POLLIN};
			poll(&pfd, 1, 20);
			continue;
		}
		model nw;
		uint32_t nver = 0;
		int got = source_next(&P->src, &P->cur, P->ver, &nw, &nver, err, sizeof(err));
		if (got < 0) {
			rc = die("publish", err);
		} else if (got > 0) {
			rank_mark_taken(&R, nver); /* the trainer may go on */
			if (nver > P->ver + 1)
				fprintf(stderr, "bfpatch publish: rank %u: version %u follows %u here: "
					"versions %u-%u were never taken (a trainer that commits again "
					"before this rank took a version, or a missing step file); the "
					"lead refuses this rank's versions unless every rank skipped the "
					"same\n", cf->rank, nver, P->ver, P->ver + 1, nver - 1);
			rc = rank_publish(&R, &nw, nver);
		} else {
			struct pollfd pfd = {.fd = R.c.fd, .events = POLLIN};
			poll(&pfd, 1, 20);
		}
	}
	if (R.r) /* it ran (not refused at the start) */
		rank_print_stats(&R);
	rank_mark_taken(&R, UINT32_MAX);
	if (R.pending) {
		patch_free(&R.p);
		source_free_model(&P->src, &R.nw);
	}
	rank_close_conn(&R);
	for (size_t i = 0; i < R.n_names; i++)
		free(R.names[i]);
	free(R.names);
	free(R.r);
	return rc;
}
