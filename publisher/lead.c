/*
 * lead.c: `bfpatch publish --ranks N`, the lead of a sharded trainer. It
 * holds the whole model (from --init), takes each rank's frames of a
 * version over the rank link (docs/PROTOCOL.md 5), and publishes the
 * version only once all of it is there: the ranges tile the model
 * exactly once and every frame verifies against the lead's copy. Then the
 * frames become one patch, renumbered in range order, and from there on
 * this is an ordinary publisher (history, NACKs, keyframes to joiners).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bfpatch.h"
#include "util.h"
#include "publisher.h"

#define RANK_QUEUE 4   /* whole versions held per rank; then its link waits */
#define RANK_PENDING 16 /* connections that have not said HELLO yet */

/* One version a rank sent: its frames, whole once END came. */
typedef struct rank_ver {
	uint32_t base, target;
	patch frames;
	uint64_t encode_us;
	int done;
} rank_ver;

typedef struct pub_rank {
	rl_conn c;                 /* c.fd -1: not linked */
	char peer[64];
	rank_ver q[RANK_QUEUE];    /* q[0] the oldest; the last may be in progress */
	unsigned qn;
	uint64_t links, versions, frames, bytes, refused;
	double last_encode_ms;
} pub_rank;

typedef struct pub_lead {
	int lfd;
	struct {
		rl_conn c;
		char peer[64];
		uint32_t ip;
		uint16_t port;
		double since;
	} pend[RANK_PENDING];
	pub_rank *r;               /* --ranks of them */
	unsigned n;
	model layout;              /* --init's model, less its parameters */
	uint64_t versions, refused, links_refused;
	double enc_ms_sum, merge_ms_sum;
} pub_lead;

/* text into an event's JSON string: quotes, backslashes and control
 * characters (a tensor name may hold any) become '?' */
static const char *ev_text(const char *in, char *out, size_t n)
{
	size_t k = 0;
	for (; in[k] && k + 1 < n; k++)
		out[k] = in[k] == '"' || in[k] == '\\' || (unsigned char)in[k] < 32 ? '?' : in[k];
	out[k] = 0;
	return out;
}

static void ver_free(rank_ver *v)
{
	patch_free(&v->frames);
	memset(v, 0, sizeof(*v));
}

/* Take the rank's version at k (0: the oldest) out of its queue. */
static void rank_drop(pub_rank *r, unsigned k)
{
	ver_free(&r->q[k]);
	memmove(&r->q[k], &r->q[k + 1], (RANK_QUEUE - 1 - k) * sizeof(r->q[0]));
	memset(&r->q[RANK_QUEUE - 1], 0, sizeof(r->q[0]));
	r->qn--;
}

static void rank_pop(pub_rank *r)
{
	rank_drop(r, 0);
}

/* Tell rank r what came of version v: committed (st 0), refused (1),
 * or received whole (2), and why. */
static void rank_result(pub_rank *r, uint32_t v, uint32_t st, const char *why)
{
	if (r->c.fd < 0)
		return;
	uint8_t b[8 + 400];
	size_t n = strlen(why) < 400 ? strlen(why) : 400;
	rl_put32(b, v);
	rl_put32(b + 4, st);
	memcpy(b + 8, why, n);
	(void)rl_send(&r->c, RL_RESULT, b, 8 + n, 1); /* informative: dropped if it would block */
}

static void rank_unlink(publisher *P, unsigned i, const char *why)
{
	pub_rank *r = &P->lead->r[i];
	if (r->c.fd < 0)
		return;
	fprintf(stderr, "bfpatch publish: rank %u (%s) unlinked: %s\n", i, r->peer, why);
	events_emit(&P->ev, "rank_unlinked", "\"rank\":%u,\"peer\":\"%s\"", i, r->peer);
	close(r->c.fd);
	r->c.fd = -1;
	r->c.in_len = 0;
	/* a version it had not finished is dropped; whole ones stay */
	if (r->qn && !r->q[r->qn - 1].done)
		ver_free(&r->q[--r->qn]);
}

/* Refuse rank i's version at k of its queue, why: said, logged,
 * counted, told to the rank. */
static void rank_refuse_at(publisher *P, unsigned i, unsigned k, const char *why)
{
	pub_rank *r = &P->lead->r[i];
	const uint32_t v = r->q[k].target;
	fprintf(stderr, "bfpatch publish: rank %u's version %u -> %u refused: %s\n", i,
		r->q[k].base, v, why);
	char ew[512];
	events_emit(&P->ev, "rank_refused", "\"rank\":%u,\"base\":%u,\"version\":%u,\"why\":\"%s\"",
		    i, r->q[k].base, v, ev_text(why, ew, sizeof(ew)));
	r->refused++;
	rank_result(r, v, 1, why);
	rank_drop(r, k);
}

static void rank_refuse(publisher *P, unsigned i, const char *why)
{
	rank_refuse_at(P, i, 0, why);
}

int lead_open(publisher *P)
{
	const publish_config *cf = P->cf;
	char err[ERRLEN];
	pub_lead *L = calloc(1, sizeof(*L));
	if (!L)
		return die("publish", "out of memory");
	P->lead = L;
	L->lfd = -1;
	for (unsigned k = 0; k < RANK_PENDING; k++)
		L->pend[k].c.fd = -1;
	L->n = cf->n_ranks;
	L->r = calloc(L->n, sizeof(*L->r));
	if (!L->r)
		return die("publish", "out of memory");
	for (unsigned i = 0; i < L->n; i++)
		L->r[i].c.fd = -1;
	if (model_load(&L->layout, cf->init, err, sizeof(err))) {
		memset(&L->layout, 0, sizeof(L->layout)); /* nothing of it is freed later */
		return die("publish", err);
	}
	P->cur = L->layout; /* shares the layout; owns the parameters */
	L->layout.params = NULL;
	P->ver = cf->init_version;
	P->model_id = P->cur.model_id;
	L->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	int one = 1;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(cf->rank_port),
				.sin_addr.s_addr = htonl(cf->rank_ip)};
	if (L->lfd >= 0)
		setsockopt(L->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (L->lfd < 0 || bind(L->lfd, (struct sockaddr *)&a, sizeof(a)) || listen(L->lfd, 64)) {
		fprintf(stderr, "bfpatch publish: --rank-listen: cannot listen on TCP port %u: %s\n",
			cf->rank_port, strerror(errno));
		return 1;
	}
	char at[32];
	pub_peer_str(&a, at, sizeof(at));
	pub_info("bfpatch publish: lead of %u ranks at TCP %s: version %u from %s, %" PRIu64
		" parameters, %zu tensors\n", L->n, at, P->ver, cf->init, P->cur.n_params,
		P->cur.n_tensors);
	return 0;
}

void lead_close(publisher *P)
{
	pub_lead *L = P->lead;
	if (!L) {
		source_close(&P->src, &P->cur);
		return;
	}
	for (unsigned i = 0; L->r && i < L->n; i++) {
		if (L->r[i].c.fd >= 0)
			close(L->r[i].c.fd);
		for (unsigned k = 0; k < RANK_QUEUE; k++)
			ver_free(&L->r[i].q[k]);
	}
	for (unsigned k = 0; k < RANK_PENDING; k++)
		if (L->pend[k].c.fd >= 0)
			close(L->pend[k].c.fd);
	if (L->lfd >= 0)
		close(L->lfd);
	free(P->cur.params);
	P->cur.params = NULL;
	model_free(&L->layout);
	free(L->r);
	free(L);
	P->lead = NULL;
}

/* ---- links: accept, HELLO, messages ---- */

static void lead_accept(publisher *P)
{
	pub_lead *L = P->lead;
	for (;;) {
		struct sockaddr_in from;
		socklen_t fl = sizeof(from);
		int fd = accept4(L->lfd, (struct sockaddr *)&from, &fl, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0)
			return;
		unsigned k = 0;
		while (k < RANK_PENDING && L->pend[k].c.fd >= 0)
			k++;
		if (k == RANK_PENDING) { /* a flood of silent connections: the oldest go */
			k = 0;
			for (unsigned j = 1; j < RANK_PENDING; j++)
				if (L->pend[j].since < L->pend[k].since)
					k = j;
			close(L->pend[k].c.fd);
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		memset(&L->pend[k].c, 0, sizeof(L->pend[k].c));
		L->pend[k].c.fd = fd;
		L->pend[k].since = now_s();
		L->pend[k].ip = ntohl(from.sin_addr.s_addr);
		L->pend[k].port = ntohs(from.sin_port);
		pub_peer_str(&from, L->pend[k].peer, sizeof(L->pend[k].peer));
	}
}

/* Refuse a connection before or at its HELLO: said (the first few),
 * counted, closed; the rank hears why when it is one to tell. */
static void pend_refuse(publisher *P, unsigned k, const char *why, int tell)
{
	pub_lead *L = P->lead;
	if (L->links_refused++ < 20)
		fprintf(stderr, "bfpatch publish: rank link from %s refused: %s\n", L->pend[k].peer,
			why);
	char ew[512];
	events_emit(&P->ev, "rank_link_refused", "\"peer\":\"%s\",\"why\":\"%s\"", L->pend[k].peer,
		    ev_text(why, ew, sizeof(ew)));
	if (tell) {
		uint8_t b[8 + 200];
		size_t n = strlen(why) < 200 ? strlen(why) : 200;
		memset(b, 0, 8);
		memcpy(b + 8, why, n);
		L->pend[k].c.key = NULL; /* unsigned: it refuses nothing but says why */
		(void)rl_send(&L->pend[k].c, RL_RESULT, b, 8 + n, 1);
	}
	close(L->pend[k].c.fd);
	L->pend[k].c.fd = -1;
}

/* A pending connection's HELLO: verified like a control message (under
 * --key or a --peer-keys key, fresh, never replayed); then it is rank
 * HELLO.rank's link, and WELCOME answers it. */
static void lead_hello(publisher *P, unsigned k)
{
	pub_lead *L = P->lead;
	rl_conn *c = &L->pend[k].c;
	int got = rl_fill(c);
	rl_msg m;
	const char *why;
	int h = rl_next(c, &m, 1, &why);
	if (h == 0) {
		if (got < 0 || now_s() - L->pend[k].since > 10)
			pend_refuse(P, k, got < 0 ? "closed before its HELLO" : "no HELLO in 10 s", 0);
		return;
	}
	if (h < 0 || m.type != RL_HELLO) {
		pend_refuse(P, k, h < 0 ? why : "its first message is not a HELLO", 0);
		return;
	}
	size_t mlen;
	rp_auth_result ar = rp_auth_accept_from(&P->auth, L->pend[k].ip, L->pend[k].port, c->in,
						m.total, 1, &mlen);
	if (ar != RP_AUTH_OK || mlen != RL_HDR + RL_HELLO_LEN) {
		char w[96];
		snprintf(w, sizeof(w), "HELLO refused by authentication: %s",
			 ar != RP_AUTH_OK ? rp_auth_result_names[ar] : "length");
		pend_refuse(P, k, w, 0);
		return;
	}
	const uint32_t rank = rl_get32(m.body), ver = rl_get32(m.body + 4);
	const uint64_t mid = rl_get64(m.body + 8);
	char w[200];
	if (rank >= L->n) {
		snprintf(w, sizeof(w), "rank %u, but this lead has --ranks %u (ranks 0-%u)", rank, L->n,
			 L->n - 1);
		pend_refuse(P, k, w, 1);
		return;
	}
	if (mid != P->model_id) {
		snprintf(w, sizeof(w), "rank %u holds model %016" PRIx64 ", this lead %016" PRIx64
			 " (--init): every rank's source must have the whole model's layout", rank,
			 mid, P->model_id);
		pend_refuse(P, k, w, 1);
		return;
	}
	pub_rank *r = &L->r[rank];
	if (r->c.fd >= 0)
		rank_unlink(P, rank, "the same rank linked again");
	uint8_t nonce[16];
	memcpy(nonce, m.body + 16, 16);
	/* everything after is sealed with the key this HELLO verified under
	 * (NULL without keys) */
	const rp_key *key = rp_auth_key_of(&P->auth, c->in, mlen);
	rl_consume(c, &m);
	r->c = *c; /* what followed the HELLO comes along */
	r->c.key = key;
	snprintf(r->peer, sizeof(r->peer), "%s", L->pend[k].peer);
	c->fd = -1;
	uint64_t session = 0;
	while (!session && getrandom(&session, sizeof(session), 0) != (ssize_t)sizeof(session))
		;
	if (!session)
		session = 1;
	r->c.session = session;
	r->c.seq_out = RL_DOWN;
	r->c.seq_in = 0;
	uint8_t b[RL_WELCOME_LEN];
	rl_put32(b, rank);
	rl_put32(b + 4, P->ver);
	rl_put64(b + 8, P->model_id);
	rl_put64(b + 16, session);
	memcpy(b + 24, nonce, 16);
	r->links++;
	pub_info("bfpatch publish: rank %u linked from %s at version %u\n", rank, r->peer,
		ver);
	events_emit(&P->ev, "rank_linked", "\"rank\":%u,\"peer\":\"%s\",\"version\":%u", rank,
		    r->peer, ver);
	/* its next version goes on from the last one held of it, or from
	 * the lead's */
	const uint32_t next_base = r->qn ? r->q[r->qn - 1].target : P->ver;
	if (ver != next_base)
		fprintf(stderr, "bfpatch publish: rank %u is at version %u, this lead expects %u: "
			"its versions are refused unless their base is %u (start every rank from "
			"the lead's version)\n", rank, ver, next_base, next_base);
	if (rl_send(&r->c, RL_WELCOME, b, sizeof(b), 0))
		rank_unlink(P, rank, "cannot answer its HELLO");
}

/* One message of rank i: a frame of the version it is sending, or END. */
static int rank_msg(publisher *P, unsigned i, const rl_msg *m, char *why, size_t wl)
{
	pub_rank *r = &P->lead->r[i];
	if (m->type == RL_FRAME) {
		bfp_frame_header h;
		bfp_status st = bfp_frame_parse(m->body, m->len, &h);
		if (st != BFP_OK)
			return snprintf(why, wl, "a frame that does not parse: %s", bfp_status_str(st)), -1;
		if (m->len > P->frame_size) {
			snprintf(why, wl, "a frame of %zu bytes, more than this lead sends (%u: give "
				 "every rank the lead's --frame-size and --key)", m->len, P->frame_size);
			return -1;
		}
		if (h.model_id != P->model_id || !bfp_frame_in_patch(&h))
			return snprintf(why, wl, "a frame of another model or not of a patch"), -1;
		rank_ver *v = r->qn ? &r->q[r->qn - 1] : NULL;
		if (!v || v->done) {
			if (r->qn == RANK_QUEUE)
				return snprintf(why, wl, "more versions than the lead holds"), -1;
			v = &r->q[r->qn++];
			memset(v, 0, sizeof(*v));
			v->base = h.base_version;
			v->target = h.target_version;
		}
		if (h.base_version != v->base || h.target_version != v->target)
			return snprintf(why, wl, "frames of two versions mixed"), -1;
		if (patch_push(&v->frames, m->body, m->len))
			return snprintf(why, wl, "out of memory"), -1;
		r->frames++;
		r->bytes += m->len;
		return 0;
	}
	if (m->type != RL_END || m->len != RL_END_LEN)
		return snprintf(why, wl, "an unexpected message (type %u)", m->type), -1;
	const uint32_t base = rl_get32(m->body), target = rl_get32(m->body + 4);
	const uint32_t nf = rl_get32(m->body + 8);
	rank_ver *v = r->qn ? &r->q[r->qn - 1] : NULL;
	if (nf == 0 || !v || v->done || v->base != base || v->target != target || v->frames.n != nf)
		return snprintf(why, wl, "END of version %u -> %u does not match the frames sent",
				base, target), -1;
	/* versions follow one another: the first on the lead's, each next on
	 * the one before (ranks never skip one, PROTOCOL.md 5.3) */
	const uint32_t want = r->qn > 1 ? r->q[r->qn - 2].target : P->ver;
	if (base != want && target <= want) {
		/* sent again by a rank whose link broke after its END: held
		 * already, or published (then it hears so again) */
		ver_free(&r->q[--r->qn]);
		rank_result(r, target, target <= P->ver ? 0 : 2,
			    target <= P->ver ? "committed" : "received");
		return 0;
	}
	v->done = 1;
	v->encode_us = rl_get64(m->body + 24);
	r->versions++;
	r->last_encode_ms = (double)v->encode_us / 1e3;
	events_emit(&P->ev, "rank_version", "\"rank\":%u,\"base\":%u,\"version\":%u,\"frames\":%u,"
		    "\"bytes\":%zu,\"encode_ms\":%.3f", i, base, target, nf, v->frames.len,
		    r->last_encode_ms);
	if (base != want) {
		char w[200];
		snprintf(w, sizeof(w), "its base is version %u, the lead's is %u%s", base, want,
			 r->qn > 1 ? " (after the versions it holds of this rank)" : "");
		rank_refuse_at(P, i, r->qn - 1, w);
	} else {
		rank_result(r, target, 2, "received"); /* the rank may go on */
	}
	return 0;
}

/* Read what each link has, as long as its rank's queue has room. */
static void lead_read(publisher *P)
{
	pub_lead *L = P->lead;
	for (unsigned i = 0; i < L->n; i++) {
		pub_rank *r = &L->r[i];
		for (int turns = 0; r->c.fd >= 0 && turns < 64; turns++) {
			if (r->qn == RANK_QUEUE && r->q[RANK_QUEUE - 1].done)
				break; /* its link waits (TCP holds the rest back) */
			int got = rl_fill(&r->c);
			rl_msg m;
			const char *w;
			int k;
			char why[256] = "";
			while ((k = rl_next(&r->c, &m, 0, &w)) == 1) {
				int bad = rank_msg(P, i, &m, why, sizeof(why));
				rl_consume(&r->c, &m);
				if (bad)
					break;
				if (r->qn == RANK_QUEUE && r->q[RANK_QUEUE - 1].done)
					break;
			}
			if (k < 0 || *why) {
				rank_unlink(P, i, k < 0 ? w : why);
				break;
			}
			if (got < 0) {
				rank_unlink(P, i, "closed by the rank");
				break;
			}
			if (got == 0)
				break;
		}
	}
}

/* ---- a version: tiling, names, verification, merge ---- */

/* The tensors whose words meet [b, e), as "name, name, ..." into out. */
static void tensor_names(const model *m, uint64_t b, uint64_t e, char *out, size_t n)
{
	size_t at = 0, k = 0;
	out[0] = 0;
	for (size_t i = 0; i < m->n_tensors && at + 4 < n; i++) {
		const uint64_t tb = (m->tensors[i].byte_begin + 1) / 2;
		const uint64_t te = (m->tensors[i].byte_end + 1) / 2;
		if (te <= tb || te <= b || tb >= e)
			continue;
		if (k++ == 8) {
			snprintf(out + at, n - at, ", ...");
			return;
		}
		int w = snprintf(out + at, n - at, "%s%.*s", at ? ", " : "",
				 (int)m->tensors[i].name_len, m->tensors[i].name);
		at = w < 0 ? at : (at + (size_t)w < n ? at + (size_t)w : n - 1);
	}
	if (!k)
		snprintf(out, n, "parameters %" PRIu64 "-%" PRIu64, b, e - 1);
}

typedef struct lframe {
	uint64_t begin, end;
	unsigned rank;
	const uint8_t *f;
	uint32_t len;
} lframe;

static int lframe_cmp(const void *a, const void *b)
{
	const lframe *x = a, *y = b;
	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	return x->rank < y->rank ? -1 : x->rank > y->rank;
}

/* Whether the sorted frames fr[0, n) tile [0, n_params) exactly once;
 * else why, naming the tensors of the first gap or overlap. */
static int lead_tiles(const publisher *P, const lframe *fr, size_t n, char *why, size_t wl)
{
	uint64_t at = 0;
	unsigned last = 0;
	char names[256];
	for (size_t i = 0; i <= n; i++) {
		const uint64_t b = i < n ? fr[i].begin : P->cur.n_params;
		if (b > at) {
			tensor_names(&P->cur, at, b, names, sizeof(names));
			snprintf(why, wl, "no rank published %s (a gap in the model)", names);
			return 0;
		}
		if (b < at) {
			tensor_names(&P->cur, b, at < fr[i].end ? at : fr[i].end, names, sizeof(names));
			snprintf(why, wl, "ranks %u and %u both published %s (an overlap)", last,
				 fr[i].rank, names);
			return 0;
		}
		if (i < n) {
			at = fr[i].end;
			last = fr[i].rank;
		}
	}
	return 1;
}

/* ---- verification: every frame against the lead's version ---- */

typedef struct verify_job {
	const publisher *P;
	const uint8_t *const *fp;
	const uint32_t *fl;
	size_t n;
	atomic_size_t next;
	atomic_int failed;
	size_t bad;
	int status;
	pthread_mutex_t mu;
	/* each delta frame's verified changes: offsets from its range's
	 * first parameter and new values (bfp_decoder_changes), kept until
	 * every frame verified */
	uint32_t **pos;
	uint16_t **val;
	uint32_t *nch;
	uint64_t *begin;
} verify_job;

static void verify_fail(verify_job *j, size_t i, int st)
{
	pthread_mutex_lock(&j->mu);
	if (!atomic_load(&j->failed) || i < j->bad) {
		j->bad = i;
		j->status = st;
	}
	atomic_store(&j->failed, 1);
	pthread_mutex_unlock(&j->mu);
}

/* Delta frames, checked as bfp_decode_verify checks them (CRC, model,
 * base version, payload, target hash) against the lead's weights, which
 * nothing writes meanwhile. */
static void *verify_worker(void *arg)
{
	verify_job *j = arg;
	bfp_decoder *dec = malloc(sizeof(*dec));
	if (!dec || bfp_decoder_init(dec, 0) != BFP_OK) {
		free(dec);
		verify_fail(j, 0, 1);
		return NULL;
	}
	bfp_apply_opts ao;
	memset(&ao, 0, sizeof(ao));
	ao.model_id = j->P->model_id;
	ao.base_version = j->P->ver;
	for (;;) {
		const size_t i = atomic_fetch_add(&j->next, 1);
		if (i >= j->n || atomic_load(&j->failed))
			break;
		if (bfp_encoding_is_key(j->fp[i][5]))
			continue; /* absolute values: lead_verify_apply applies them with an undo */
		bfp_frame_header h;
		bfp_status st = bfp_decoder_model_for(dec, j->fp[i], j->fl[i], j->fp, j->fl, j->n);
		if (st == BFP_OK)
			st = bfp_decode_verify(dec, &ao, j->fp[i], j->fl[i], j->P->cur.params,
					       j->P->cur.n_params, &h);
		if (st != BFP_OK) {
			verify_fail(j, i, st);
			break;
		}
		const uint32_t *pos;
		const uint16_t *val;
		const uint32_t nc = bfp_decoder_changes(dec, &pos, &val);
		j->begin[i] = h.range_begin;
		j->nch[i] = nc;
		if (!nc)
			continue;
		j->pos[i] = malloc((size_t)nc * sizeof(*pos));
		j->val[i] = malloc((size_t)nc * sizeof(*val));
		if (!j->pos[i] || !j->val[i]) {
			verify_fail(j, i, 1);
			break;
		}
		memcpy(j->pos[i], pos, (size_t)nc * sizeof(*pos));
		memcpy(j->val[i], val, (size_t)nc * sizeof(*val));
	}
	free(dec);
	return NULL;
}

/* Verify the frames fp[0, n) of the next version against the lead's
 * weights before any is applied, then apply them: the delta frames are
 * verified on all cores, read only, their changes kept; the
 * keyframe-coded ones (dense ranges of the patch, whose check needs their
 * values decoded) are applied one by one, each checked before it
 * writes, and all put back if one fails; only then are the kept changes
 * written. 0: the weights are at the frames' version; else a bfp_status
 * (1: out of memory), the frame in *bad, and the weights as they were. */
static int lead_verify_apply(publisher *P, const uint8_t *const *fp, const uint32_t *fl,
			     size_t n, size_t *bad)
{
	verify_job j;
	memset(&j, 0, sizeof(j));
	j.P = P;
	j.fp = fp;
	j.fl = fl;
	j.n = n;
	j.pos = calloc(n ? n : 1, sizeof(*j.pos));
	j.val = calloc(n ? n : 1, sizeof(*j.val));
	j.nch = calloc(n ? n : 1, sizeof(*j.nch));
	j.begin = calloc(n ? n : 1, sizeof(*j.begin));
	int rc = 0;
	if (!j.pos || !j.val || !j.nch || !j.begin) {
		rc = 1;
		*bad = 0;
		goto out;
	}
	pthread_mutex_init(&j.mu, NULL);
	int nt = cpu_count();
	nt = nt > 64 ? 64 : nt;
	pthread_t tid[64];
	int started = 0;
	for (int i = 0; i < nt; i++)
		if (pthread_create(&tid[started], NULL, verify_worker, &j) == 0)
			started++;
	if (!started)
		verify_worker(&j);
	for (int i = 0; i < started; i++)
		pthread_join(tid[i], NULL);
	pthread_mutex_destroy(&j.mu);
	if (atomic_load(&j.failed)) {
		*bad = j.bad;
		rc = j.status;
		goto out;
	}
	/* the keyframe-coded frames: their ranges kept first */
	size_t words = 0, nk = 0;
	for (size_t i = 0; i < n; i++)
		if (bfp_encoding_is_key(fp[i][5])) {
			words += rl_get32(fp[i] + 40); /* range_len, FORMAT.md 2.1 */
			nk++;
		}
	if (nk) {
		uint16_t *keep = malloc(words * 2 + 2);
		bfp_decoder *dec = malloc(sizeof(*dec));
		bfp_apply_opts ao;
		memset(&ao, 0, sizeof(ao));
		ao.model_id = P->model_id;
		ao.base_version = P->ver;
		ao.zstd_workspace_size = bfp_zstd_workspace_size();
		void *ws = ao.zstd_workspace_size ? malloc(ao.zstd_workspace_size) : NULL;
		if (!keep || !dec || (ao.zstd_workspace_size && !ws) ||
		    bfp_decoder_init(dec, 0) != BFP_OK)
			rc = 1, *bad = 0;
		ao.zstd_workspace = ws;
		size_t at = 0, done = 0;
		for (size_t i = 0; !rc && i < n; i++) {
			if (!bfp_encoding_is_key(fp[i][5]))
				continue;
			bfp_frame_header h;
			bfp_status st = bfp_frame_parse(fp[i], fl[i], &h);
			if (st == BFP_OK && h.range_begin + h.range_len <= P->cur.n_params) {
				memcpy(keep + at, P->cur.params + h.range_begin, (size_t)h.range_len * 2);
				st = bfp_decode_apply(dec, &ao, fp[i], fl[i], P->cur.params,
						      P->cur.n_params, &h);
			} else if (st == BFP_OK) {
				st = BFP_E_RANGE;
			}
			if (st != BFP_OK) {
				rc = st;
				*bad = i;
				break;
			}
			at += h.range_len;
			done = i + 1;
		}
		if (rc) { /* put back every range applied */
			at = 0;
			for (size_t i = 0; i < done; i++) {
				if (!bfp_encoding_is_key(fp[i][5]))
					continue;
				bfp_frame_header h;
				bfp_frame_parse(fp[i], fl[i], &h);
				memcpy(P->cur.params + h.range_begin, keep + at, (size_t)h.range_len * 2);
				at += h.range_len;
			}
		}
		free(ws);
		free(dec);
		free(keep);
		if (rc)
			goto out;
	}
	/* every frame verified: the delta frames' changes written (each
	 * verified against these same weights, which nothing wrote since) */
	for (size_t i = 0; i < n; i++) {
		uint16_t *w = P->cur.params + j.begin[i];
		for (uint32_t k = 0; k < j.nch[i]; k++)
			w[j.pos[i][k]] = j.val[i][k];
	}
out:
	for (size_t i = 0; j.pos && i < n; i++)
		free(j.pos[i]);
	for (size_t i = 0; j.val && i < n; i++)
		free(j.val[i]);
	free(j.pos);
	free(j.val);
	free(j.nch);
	free(j.begin);
	return rc;
}

/* All ranks' oldest versions, of version t: tile, verify, merge, publish.
 * 0, or the exit status of an error. */
static int lead_merge(publisher *P, uint32_t t)
{
	pub_lead *L = P->lead;
	const double t0 = now_s();
	size_t n = 0;
	for (unsigned i = 0; i < L->n; i++)
		n += L->r[i].q[0].frames.n;
	lframe *fr = malloc((n ? n : 1) * sizeof(*fr));
	const uint8_t **fp = malloc((n ? n : 1) * sizeof(*fp));
	uint32_t *fl = malloc((n ? n : 1) * sizeof(*fl));
	char why[512] = "";
	int ok = fr && fp && fl;
	if (!ok)
		snprintf(why, sizeof(why), "out of memory");
	size_t k = 0;
	double enc_ms = 0;
	for (unsigned i = 0; ok && i < L->n; i++) {
		const patch *p = &L->r[i].q[0].frames;
		const double e = (double)L->r[i].q[0].encode_us / 1e3;
		enc_ms = e > enc_ms ? e : enc_ms;
		for (size_t j = 0; j < p->n; j++, k++) {
			bfp_frame_header h;
			fr[k].f = p->buf + p->off[j];
			fr[k].len = (uint32_t)(p->off[j + 1] - p->off[j]);
			bfp_frame_parse(fr[k].f, fr[k].len, &h); /* parsed as it came */
			fr[k].begin = h.range_begin;
			fr[k].end = h.range_begin + h.range_len;
			fr[k].rank = i;
		}
	}
	if (ok) {
		qsort(fr, n, sizeof(*fr), lframe_cmp);
		ok = lead_tiles(P, fr, n, why, sizeof(why));
	}
	/* one patch, in range order */
	patch merged;
	memset(&merged, 0, sizeof(merged));
	for (size_t j = 0; ok && j < n; j++)
		if (patch_push(&merged, fr[j].f, fr[j].len) ||
		    bfp_frame_set_index(merged.buf + merged.off[j], fr[j].len, (uint32_t)j,
					(uint32_t)n) != BFP_OK)
			ok = 0, snprintf(why, sizeof(why), "out of memory");
	for (size_t j = 0; ok && j < n; j++) {
		fp[j] = merged.buf + merged.off[j];
		fl[j] = fr[j].len;
	}
	if (ok) {
		size_t bad = 0;
		int st = lead_verify_apply(P, fp, fl, n, &bad);
		if (st) {
			char names[256];
			tensor_names(&P->cur, fr[bad].begin, fr[bad].end, names, sizeof(names));
			snprintf(why, sizeof(why), "rank %u's frame of %s does not verify against the "
				 "lead's version %u: %s", fr[bad].rank, names, P->ver,
				 st == 1 ? "out of memory" : bfp_status_str((bfp_status)st));
			ok = 0;
		}
	}
	const double t1 = now_s();
	if (!ok) {
		fprintf(stderr, "bfpatch publish: version %u refused, nothing sent: %s\n", t, why);
		char ew[512];
		events_emit(&P->ev, "version_refused", "\"version\":%u,\"why\":\"%s\"", t,
			    ev_text(why, ew, sizeof(ew)));
		L->refused++;
		for (unsigned i = 0; i < L->n; i++) {
			L->r[i].refused++;
			rank_result(&L->r[i], t, 1, why);
			rank_pop(&L->r[i]);
		}
		patch_free(&merged);
		free(fr);
		free(fp);
		free(fl);
		return 0;
	}
	free(fr);
	free(fp);
	free(fl);
	/* an ordinary publisher from here: the patch is sent, then held */
	uint32_t old_base, old_ver;
	const unsigned slot = history_evict(&P->hist, &old_base, &old_ver);
	patch *p = &P->hist.p[slot];
	patch_free(p);
	*p = merged;
	events_emit(&P->ev, "encode_end", "\"version\":%u,\"frames\":%zu,\"bytes\":%zu,"
		    "\"params\":%" PRIu64 ",\"ranks\":%u,\"encode_ms\":%.3f,\"merge_ms\":%.3f", t,
		    p->n, p->len, P->cur.n_params, L->n, enc_ms, (t1 - t0) * 1e3);
	events_emit(&P->ev, "first_frame", "\"version\":%u", t);
	P->send_cut = 0;
	pub_send_all(P, p);
	const double t2 = now_s();
	history_hold(&P->hist, slot, P->ver, t);
	if (!P->send_cut)
		events_emit(&P->ev, "send_end", "\"version\":%u,\"frames\":%zu,\"bytes\":%zu,"
			    "\"subscribers\":%u", t, p->n, p->len, P->n_subs);
	const double x = (double)P->cur.n_params * 2 / (double)(p->len ? p->len : 1);
	pub_info("bfpatch publish: version %u -> %u from %u ranks: %zu frames, %zu bytes "
		"(%.1fx smaller than dense); ranks' encode %.1f ms (slowest), tiled, verified "
		"and applied in %.1f ms, sent in %.1f ms, %u subscriber(s)\n", P->ver, t, L->n, p->n, p->len, x,
		enc_ms, (t1 - t0) * 1e3, (t2 - t1) * 1e3, P->n_subs);
	history_put(&P->hist, slot, old_base, old_ver);
	P->ver = t;
	P->published_at = now_s();
	L->versions++;
	L->enc_ms_sum += enc_ms;
	L->merge_ms_sum += (t1 - t0) * 1e3;
	for (unsigned i = 0; i < L->n; i++) {
		rank_result(&L->r[i], t, 0, "committed");
		rank_pop(&L->r[i]);
	}
	return 0;
}

/* The next version, if every rank's frames of it are there. */
static int lead_try(publisher *P)
{
	pub_lead *L = P->lead;
	/* a rank's oldest version not on the lead's: refused (its queue was
	 * checked as it came; the lead's version moved since, or not) */
	for (unsigned i = 0; i < L->n; i++)
		while (L->r[i].qn && L->r[i].q[0].done && L->r[i].q[0].base != P->ver) {
			char w[160];
			snprintf(w, sizeof(w), "its base is version %u, the lead's is %u", L->r[i].q[0].base,
				 P->ver);
			rank_refuse(P, i, w);
		}
	uint32_t lo = UINT32_MAX, hi = 0;
	for (unsigned i = 0; i < L->n; i++) {
		if (!L->r[i].qn || !L->r[i].q[0].done)
			return 0;
		const uint32_t t = L->r[i].q[0].target;
		lo = t < lo ? t : lo;
		hi = t > hi ? t : hi;
	}
	if (lo != hi) {
		/* a rank went past version lo: lo can never be whole */
		for (unsigned i = 0; i < L->n; i++)
			if (L->r[i].q[0].target == lo) {
				char w[200];
				snprintf(w, sizeof(w), "another rank sent version %u on version %u, none "
					 "of %u (ranks must not skip versions)", hi, P->ver, lo);
				rank_refuse(P, i, w);
			}
		L->refused++;
		events_emit(&P->ev, "version_refused", "\"version\":%u,\"why\":\"a rank skipped it\"",
			    lo);
		return 0;
	}
	return lead_merge(P, lo) ? -1 : 1;
}

int lead_step(publisher *P, int wait_ms)
{
	pub_lead *L = P->lead;
	struct pollfd pfd[2 + RANK_PENDING + 256];
	unsigned np = 0;
	pfd[np++] = (struct pollfd){.fd = P->sock, .events = POLLIN};
	pfd[np++] = (struct pollfd){.fd = L->lfd, .events = POLLIN};
	for (unsigned k = 0; k < RANK_PENDING; k++)
		if (L->pend[k].c.fd >= 0)
			pfd[np++] = (struct pollfd){.fd = L->pend[k].c.fd, .events = POLLIN};
	for (unsigned i = 0; i < L->n && np < sizeof(pfd) / sizeof(pfd[0]); i++)
		if (L->r[i].c.fd >= 0 && !(L->r[i].qn == RANK_QUEUE && L->r[i].q[RANK_QUEUE - 1].done))
			pfd[np++] = (struct pollfd){.fd = L->r[i].c.fd, .events = POLLIN};
	if (wait_ms)
		poll(pfd, np, wait_ms);
	lead_accept(P);
	for (unsigned k = 0; k < RANK_PENDING; k++)
		if (L->pend[k].c.fd >= 0)
			lead_hello(P, k);
	lead_read(P);
	int got = 0;
	while (P->gate_open && !pub_quit && P->ver < P->cf->steps && (got = lead_try(P)) > 0)
		;
	return got < 0 ? 1 : 0;
}

void lead_print_stats(publisher *P)
{
	pub_lead *L = P->lead;
	if (!L)
		return;
	pub_info("bfpatch publish: lead of %u ranks: %" PRIu64 " versions merged, %" PRIu64
		" refused, %" PRIu64 " rank links refused; ranks' encode per version: %.1f ms mean "
		"(the slowest rank's), tiling, verification and apply %.1f ms mean\n", L->n, L->versions,
		L->refused, L->links_refused,
		L->versions ? L->enc_ms_sum / (double)L->versions : 0.0,
		L->versions ? L->merge_ms_sum / (double)L->versions : 0.0);
	for (unsigned i = 0; i < L->n; i++) {
		const pub_rank *r = &L->r[i];
		pub_info("bfpatch publish:   rank %u: %s, %" PRIu64 " links, %" PRIu64
			" versions received, %" PRIu64 " frames, %" PRIu64 " bytes, %" PRIu64
			" refused, last encode %.1f ms\n", i, r->c.fd >= 0 ? "linked" : "not linked",
			r->links, r->versions, r->frames, r->bytes, r->refused, r->last_encode_ms);
		events_emit(&P->ev, "rank_stats", "\"rank\":%u,\"linked\":%s,\"links\":%" PRIu64
			    ",\"versions\":%" PRIu64 ",\"frames\":%" PRIu64 ",\"bytes\":%" PRIu64
			    ",\"refused\":%" PRIu64, i, r->c.fd >= 0 ? "true" : "false", r->links,
			    r->versions, r->frames, r->bytes, r->refused);
	}
}
