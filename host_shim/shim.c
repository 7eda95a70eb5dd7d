/*
 * shim.c: bfpatch-shim, the actor-side daemon. It receives frames on a
 * kernel UDP socket (recvmmsg), stages those of version v+1 while the
 * actor runs on v, NACKs what is missing, and when the patch is complete
 * applies it into the weight buffer (wbuf.h) under the buffer's commit
 * marker: every frame is checked and hash-verified before it is written,
 * and a commit interrupted by a crash is finished on restart, because a
 * range already at the target is recognised by its hash and skipped.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bfpatch.h"
#include "model.h"
#include "proto.h"
#include "wbuf.h"

static volatile sig_atomic_t quit;
static void on_signal(int s)
{
	(void)s;
	quit = 1;
}

#define SLOTS 4

typedef struct slot {
	uint32_t target, count, have;
	int key;                /* a keyframe stream (resync), not a patch */
	uint8_t **frames;
	uint32_t *flen;
	uint64_t bytes;
} slot;

typedef struct shim {
	wbuf w;
	int sock;
	struct sockaddr_in upstream;
	uint16_t data_port;
	uint32_t rate_kbps;
	uint32_t nack_ms;
	uint32_t drop_every;    /* testing: discard every Nth frame once */
	uint64_t max_stage;     /* bytes of staged frames, at most */
	double exit_after;      /* testing: stop after this many seconds */
	/* staging: the next version and a few after it, which can arrive
	 * while the next one still waits for repairs */
	slot slots[SLOTS];
	uint64_t staged_bytes;
	double last_frame, next_nack;
	uint32_t nack_backoff_ms;
	bfp_decoder *dec;
	void *zws;              /* zstd workspace, for zstd keyframes */
	/* counters */
	uint64_t rx, dup, old, ahead, bad, other_model, nacks, commits, dropped_test;
	uint64_t verified_bytes;
} shim;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void ctl_send(shim *s, const rp_ctl *c)
{
	uint8_t msg[RP_CTL_HDR + 8 * RP_NACK_MAX + 4];
	size_t n = rp_ctl_build(msg, sizeof(msg), c);
	if (n)
		sendto(s->sock, msg, n, 0, (const struct sockaddr *)&s->upstream,
		       sizeof(s->upstream));
}

static void join(shim *s)
{
	rp_ctl c;
	memset(&c, 0, sizeof(c));
	c.type = RP_JOIN;
	c.model_id = s->w.h->model_id;
	c.version = atomic_load(&s->w.h->version);
	c.data_port = s->data_port;
	c.rate_kbps = s->rate_kbps;
	ctl_send(s, &c);
}

static void slot_free(shim *s, slot *sl)
{
	for (uint32_t i = 0; sl->frames && i < sl->count; i++)
		free(sl->frames[i]);
	free(sl->frames);
	free(sl->flen);
	s->staged_bytes -= sl->bytes;
	memset(sl, 0, sizeof(*sl));
}

static slot *slot_find(shim *s, uint32_t version, int key)
{
	for (unsigned i = 0; i < SLOTS; i++)
		if (s->slots[i].count && s->slots[i].target == version && s->slots[i].key == key)
			return &s->slots[i];
	return NULL;
}

/* A complete keyframe stream for the wanted version or later, if any. */
static slot *key_ready(shim *s, uint32_t want)
{
	for (unsigned i = 0; i < SLOTS; i++) {
		slot *k = &s->slots[i];
		if (k->count && k->key && k->target >= want && k->have == k->count)
			return k;
	}
	return NULL;
}

/* The version the buffer takes next. */
static uint32_t wanted(const shim *s)
{
	return atomic_load(&s->w.h->state) == WBUF_COMMITTING ? atomic_load(&s->w.h->target)
							      : atomic_load(&s->w.h->version) + 1;
}

static void send_nack(shim *s)
{
	rp_ctl c;
	uint32_t want = wanted(s);
	slot *sl = slot_find(s, want, 0);
	memset(&c, 0, sizeof(c));
	c.type = RP_NACK;
	c.model_id = s->w.h->model_id;
	c.version = want;
	if (!sl) {
		/* nothing of it arrived, later versions did: ask for it all */
		c.ranges[c.n_ranges++] = (rp_range){0, 4096};
	}
	for (uint32_t i = 0; sl && i < sl->count && c.n_ranges < RP_NACK_MAX; i++) {
		if (sl->frames[i])
			continue;
		rp_range *l = c.n_ranges ? &c.ranges[c.n_ranges - 1] : NULL;
		if (l && l->first + l->count == i)
			l->count++;
		else
			c.ranges[c.n_ranges++] = (rp_range){i, 1};
	}
	if (c.n_ranges) {
		ctl_send(s, &c);
		s->nacks++;
	}
}

/* Apply every frame of sl: checked, hash-verified, then written. A range
 * already at the target (a commit cut short by a crash) is skipped. */
static int commit(shim *s, slot *sl)
{
	double t0 = now_s();
	uint32_t base = atomic_load(&s->w.h->version);
	bfp_apply_opts o;
	memset(&o, 0, sizeof(o));
	o.model_id = s->w.h->model_id;
	o.base_version = base;
	o.zstd_workspace = s->zws;
	o.zstd_workspace_size = bfp_zstd_workspace_size();
	wbuf_begin(&s->w, sl->target);
	for (uint32_t i = 0; i < sl->count; i++) {
		bfp_status st = bfp_decode_apply(s->dec, &o, sl->frames[i], sl->flen[i], s->w.params,
						 s->w.h->n_params, NULL);
		if (st == BFP_E_HASH || st == BFP_E_CORRUPT) {
			/* the frame passed its CRC, so its range is not at the base:
			 * fine if it is already at the target */
			int at = 0;
			if (bfp_frame_check_target(sl->frames[i], sl->flen[i], s->w.params,
						   s->w.h->n_params, &at) == BFP_OK && at)
				continue; /* applied before a crash */
		}
		if (st != BFP_OK) {
			fprintf(stderr, "bfpatch-shim: commit %u -> %u: frame %u: %s; the buffer "
				"needs a keyframe resync\n", base, sl->target, i, bfp_status_str(st));
			return -1;
		}
		bfp_frame_header h;
		bfp_frame_parse(sl->frames[i], sl->flen[i], &h);
		s->verified_bytes += 2ull * h.range_len;
	}
	wbuf_end(&s->w);
	s->commits++;
	printf("bfpatch-shim: committed version %u -> %u%s: %u frames, %" PRIu64
	       " bytes, %.1f ms\n", base, sl->target, sl->key ? " (keyframe resync)" : "",
	       sl->count, sl->bytes, (now_s() - t0) * 1e3);
	fflush(stdout);
	uint32_t done = sl->target;
	slot_free(s, sl);
	for (unsigned i = 0; i < SLOTS; i++) /* what that made stale */
		if (s->slots[i].count && s->slots[i].target <= done)
			slot_free(s, &s->slots[i]);
	s->nack_backoff_ms = s->nack_ms;
	join(s); /* tell upstream the version we hold now */
	return 0;
}

static int on_frame(shim *s, const uint8_t *p, size_t len)
{
	bfp_frame_header h;
	s->rx++;
	if (bfp_frame_parse(p, len, &h) != BFP_OK) {
		s->bad++;
		return 0;
	}
	if (h.model_id != s->w.h->model_id) {
		s->other_model++;
		return 0;
	}
	uint32_t want = wanted(s);
	int key = h.encoding == BFP_ENC_KEY_RAW || h.encoding == BFP_ENC_KEY_ZSTD;
	if (h.target_version < want) {
		s->old++;
		return 0;
	}
	if (!key && h.target_version - want >= SLOTS) {
		s->ahead++; /* too far ahead: needs a keyframe resync */
		return 0;
	}
	if (s->drop_every && s->rx % s->drop_every == 0 && !s->dropped_test) {
		s->dropped_test++; /* testing: lose this one, repair it by NACK */
		return 0;
	}
	slot *sl = slot_find(s, h.target_version, key);
	if (sl && sl->count != h.frame_count)
		slot_free(s, sl), sl = NULL; /* a different patch to the same version */
	if (!sl) {
		for (unsigned i = 0; i < SLOTS && !sl; i++)
			if (!s->slots[i].count || s->slots[i].target < want)
				sl = &s->slots[i];
		/* all slots busy: a keyframe stream replaces the furthest patch */
		for (unsigned i = 0; i < SLOTS && !sl && key; i++)
			if (!s->slots[i].key)
				sl = &s->slots[i];
		if (!sl) {
			s->ahead++;
			return 0;
		}
		if (sl->count)
			slot_free(s, sl);
		if (h.frame_count > (1u << 24))
			return 0;
		sl->frames = calloc(h.frame_count, sizeof(*sl->frames));
		sl->flen = calloc(h.frame_count, sizeof(*sl->flen));
		if (!sl->frames || !sl->flen) {
			free(sl->frames);
			free(sl->flen);
			memset(sl, 0, sizeof(*sl));
			return -1;
		}
		sl->target = h.target_version;
		sl->count = h.frame_count;
		sl->key = key;
	}
	if (sl->frames[h.frame_index]) {
		s->dup++;
		return 0;
	}
	if (s->staged_bytes + len > s->max_stage) {
		s->bad++;
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
	s->last_frame = now_s();
	s->next_nack = s->last_frame + s->nack_backoff_ms / 1e3;
	/* commit what is complete: a keyframe stream (jumping to its
	 * version), else the next version and any staged after it */
	for (;;) {
		uint32_t w = wanted(s);
		slot *n = key_ready(s, w);
		if (!n) {
			n = slot_find(s, w, 0);
			if (!n || n->have != n->count)
				return 0;
		}
		if (commit(s, n))
			return -1;
	}
}

static const char usage[] =
	"usage: bfpatch-shim --buffer PATH --upstream ADDR:PORT [options]\n"
	"Receives a model's patch frames, stages and NACKs them, and commits\n"
	"each complete version into the weight buffer PATH.\n"
	"  -b, --buffer PATH       weight buffer (a file under /dev/shm)\n"
	"  -i, --init FILE         create PATH from a checkpoint first (version 0,\n"
	"                          or --version); refuses to overwrite\n"
	"  -V, --version N         version of --init (default 0)\n"
	"  -u, --upstream A:PORT   control port of the relay or publisher\n"
	"  -l, --listen A:PORT     where frames arrive (default 0.0.0.0:7500)\n"
	"  -r, --rate BITS         what this link takes, told in JOIN (0: default)\n"
	"  -n, --nack-ms N         NACK missing frames after N ms quiet (100)\n"
	"  -m, --max-stage BYTES   staged frames kept at most (default 1G)\n"
	"  -T, --exit-after S      stop after S seconds (tests)\n"
	"      --drop-every N      testing: discard one frame once, after N\n"
	"  -h, --help\n";

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{"buffer", required_argument, 0, 'b'}, {"init", required_argument, 0, 'i'},
		{"version", required_argument, 0, 'V'}, {"upstream", required_argument, 0, 'u'},
		{"listen", required_argument, 0, 'l'}, {"rate", required_argument, 0, 'r'},
		{"nack-ms", required_argument, 0, 'n'}, {"max-stage", required_argument, 0, 'm'},
		{"exit-after", required_argument, 0, 'T'}, {"drop-every", required_argument, 0, 'D'},
		{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	shim s;
	memset(&s, 0, sizeof(s));
	const char *buffer = NULL, *init = NULL;
	uint32_t lip = 0, uip = 0;
	uint16_t lport = 7500, uport = 0;
	uint64_t v, version = 0;
	char err[512] = "";
	s.nack_ms = 100;
	s.nack_backoff_ms = 100;
	s.max_stage = 1ull << 30;
	int c;
	while ((c = getopt_long(argc, argv, "b:i:V:u:l:r:n:m:T:h", lo, NULL)) != -1) {
		switch (c) {
		case 'b': buffer = optarg; break;
		case 'i': init = optarg; break;
		case 'V':
			if (rp_parse_num(optarg, 0, UINT32_MAX - 1, &version))
				goto bad;
			break;
		case 'u':
			if (rp_parse_hostport(optarg, &uip, &uport, NULL))
				goto bad;
			break;
		case 'l':
			if (rp_parse_hostport(optarg, &lip, &lport, NULL))
				goto bad;
			break;
		case 'r':
			if (rp_parse_num(optarg, 0, 4000000000000ull, &v))
				goto bad;
			s.rate_kbps = (uint32_t)(v / 1000 > UINT32_MAX ? UINT32_MAX : v / 1000);
			break;
		case 'n':
			if (rp_parse_num(optarg, 1, 60000, &v))
				goto bad;
			s.nack_ms = s.nack_backoff_ms = (uint32_t)v;
			break;
		case 'm':
			if (rp_parse_num(optarg, 1u << 20, 1ull << 40, &s.max_stage))
				goto bad;
			break;
		case 'T':
			s.exit_after = strtod(optarg, NULL);
			if (!(s.exit_after > 0))
				goto bad;
			break;
		case 'D':
			if (rp_parse_num(optarg, 1, 1u << 30, &v))
				goto bad;
			s.drop_every = (uint32_t)v;
			break;
		case 'h': fputs(usage, stdout); return 0;
		default:
		bad:
			fprintf(stderr, "bfpatch-shim: invalid option or value%s%s\n%s",
				optarg ? ": " : "", optarg ? optarg : "", usage);
			return 2;
		}
	}
	if (!buffer || !uport || optind != argc) {
		fputs(usage, stderr);
		return 2;
	}
	if (init) {
		model m;
		if (model_load(&m, init, err, sizeof(err)) ||
		    wbuf_create(buffer, &m, (uint32_t)version, 0, err, sizeof(err))) {
			fprintf(stderr, "bfpatch-shim: %s\n", err);
			return 1;
		}
		model_free(&m);
	}
	if (wbuf_open(&s.w, buffer, err, sizeof(err))) {
		fprintf(stderr, "bfpatch-shim: %s\n", err);
		return 1;
	}
	s.dec = malloc(sizeof(*s.dec));
	if (bfp_zstd_workspace_size())
		s.zws = malloc(bfp_zstd_workspace_size());
	s.sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int big = 16 << 20;
	setsockopt(s.sock, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
	struct sockaddr_in la = {.sin_family = AF_INET, .sin_port = htons(lport),
				 .sin_addr.s_addr = htonl(lip)};
	if (!s.dec || bfp_decoder_init(s.dec, 0) != BFP_OK || s.sock < 0 ||
	    bind(s.sock, (struct sockaddr *)&la, sizeof(la)) != 0) {
		fprintf(stderr, "bfpatch-shim: cannot listen on port %u: %s\n", lport, strerror(errno));
		return 1;
	}
	s.data_port = lport;
	s.upstream.sin_family = AF_INET;
	s.upstream.sin_port = htons(uport);
	s.upstream.sin_addr.s_addr = htonl(uip);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	if (atomic_load(&s.w.h->state) == WBUF_COMMITTING)
		printf("bfpatch-shim: a commit to version %u was interrupted; finishing it\n",
		       atomic_load(&s.w.h->target));
	printf("bfpatch-shim: buffer %s at version %u, %" PRIu64 " parameters, listening on %u\n",
	       buffer, atomic_load(&s.w.h->version), s.w.h->n_params, lport);
	fflush(stdout);

	enum { VLEN = 64 };
	static uint8_t bufs[VLEN][BFP_FRAME_SIZE_MAX + 64];
	struct mmsghdr msgs[VLEN];
	struct iovec iov[VLEN];
	double start = now_s(), next_join = 0;
	int rc = 0;
	while (!quit && rc == 0) {
		double t = now_s();
		if (s.exit_after > 0 && t - start > s.exit_after)
			break;
		if (t >= next_join) {
			join(&s); /* JOIN doubles as the heartbeat */
			next_join = t + 1.0;
		}
		int pending = 0;
		for (unsigned i = 0; i < SLOTS; i++)
			pending |= s.slots[i].count != 0;
		if (pending && t >= s.next_nack) {
			send_nack(&s);
			s.next_nack = t + s.nack_backoff_ms / 1e3;
			if (s.nack_backoff_ms < 1000)
				s.nack_backoff_ms *= 2;
		}
		struct pollfd pfd = {.fd = s.sock, .events = POLLIN};
		if (poll(&pfd, 1, 20) <= 0)
			continue;
		for (int i = 0; i < VLEN; i++) {
			iov[i].iov_base = bufs[i];
			iov[i].iov_len = sizeof(bufs[i]);
			memset(&msgs[i], 0, sizeof(msgs[i]));
			msgs[i].msg_hdr.msg_iov = &iov[i];
			msgs[i].msg_hdr.msg_iovlen = 1;
		}
		int n = recvmmsg(s.sock, msgs, VLEN, MSG_DONTWAIT, NULL);
		for (int i = 0; i < n && rc == 0; i++)
			rc = on_frame(&s, bufs[i], msgs[i].msg_len);
	}
	printf("bfpatch-shim: version %u; frames %" PRIu64 " (duplicates %" PRIu64
	       ", old %" PRIu64 ", ahead %" PRIu64 ", bad %" PRIu64 ", other model %" PRIu64
	       "), NACKs %" PRIu64 ", commits %" PRIu64 ", verified %" PRIu64 " bytes\n",
	       atomic_load(&s.w.h->version), s.rx, s.dup, s.old, s.ahead, s.bad, s.other_model,
	       s.nacks, s.commits, s.verified_bytes);
	for (unsigned i = 0; i < SLOTS; i++)
		slot_free(&s, &s.slots[i]);
	free(s.dec);
	free(s.zws);
	close(s.sock);
	wbuf_close(&s.w);
	return rc ? 1 : 0;
}
