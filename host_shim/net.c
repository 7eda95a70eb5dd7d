/*
 * net.c: the shim's network side: JOINs and NACKs out to --upstream,
 * datagrams in from the kernel socket (recvmmsg) or a DPDK port,
 * authenticated, control messages (HEARTBEAT) taken here and frames
 * handed to the stager (stage.c).
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>

#include "auth.h"
#include "events.h"
#include "proto.h"
#include "shim.h"
#ifdef BFP_SHIM_DPDK
#include "shim_dpdk.h"
#endif
#include "util.h"

/* datagrams one recvmmsg() takes */
#define VLEN 64

struct shim_rxbufs {
	uint8_t bufs[VLEN][BFP_FRAME_SIZE_MAX + 64];
	struct mmsghdr msgs[VLEN];
	struct iovec iov[VLEN];
	struct sockaddr_in srcs[VLEN];
	uint64_t cms[VLEN][(CMSG_SPACE(sizeof(uint32_t)) + 7) / 8]; /* aligned */
};

int net_rxbufs_alloc(shim *s)
{
	s->rxb = malloc(sizeof(*s->rxb));
	return s->rxb ? 0 : -1;
}

void net_ctl_send(shim *s, const rp_ctl *c)
{
	uint8_t msg[RP_CTL_HDR + 8 * RP_NACK_MAX + 4 + RP_AUTH_LEN];
	size_t n = rp_auth_ctl_build(&s->auth, msg, sizeof(msg), c);
	if (n)
		sendto(s->sock, msg, n, 0, (const struct sockaddr *)&s->upstream,
		       sizeof(s->upstream));
}

/* A HEARTBEAT from --upstream, signed and fresh, bound to another run
 * than the one followed announces the publisher's new run (it restarted,
 * or training went back to an earlier checkpoint): from now on only that
 * run's frames are taken; what was staged of the old one is dropped
 * (docs/SECURITY.md "Runs"). */
static void follow_run(shim *s, uint64_t run)
{
	char was[17], now[17];
	rp_auth_run_str(s->auth.run, was);
	rp_auth_run_str(run, now);
	if (s->auth.run)
		fprintf(stderr, "bfpatch-shim: upstream announced publisher run %s (was %s): "
			"staged frames of the old run dropped\n", now, was);
	else
		printf("bfpatch-shim: following publisher run %s\n", now);
	fflush(stdout);
	events_emit(&s->ev, "run", "\"run\":\"%s\",\"was\":\"%s\",\"version\":%u", now,
		    s->auth.run ? was : "", shim_version(s));
	if (s->auth.run)
		s->run_changes++;
	stage_drop_all(s);
	s->auth.run = run;
	stage_join(s); /* upstream hears the run followed at once */
}

/* A HEARTBEAT from upstream names the newest version (PROTOCOL.md 2.3);
 * one from any other address is ignored, as a relay does: believed, it
 * would make the shim ask for versions nobody has, and then for keyframe
 * streams, for ever. */
static void on_control(shim *s, const uint8_t *p, size_t len, int from_upstream, uint64_t run)
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
	if (s->auth.n_keys && run != s->auth.run) {
		if (!run) { /* a publisher's or relay's HEARTBEAT names its run */
			s->bad++;
			return;
		}
		follow_run(s, run);
	}
	s->heard = now_s();
	if (c.version > s->latest && c.version != RP_VERSION_RELAY && c.version != RP_VERSION_NONE)
		s->latest = c.version;
}

int net_datagram(shim *s, const uint8_t *p, size_t len, int from_upstream)
{
	int control = len >= 4 && p[0] == 'B' && p[1] == 'F' && p[2] == 'P' && p[3] == 'C';
	if (!control) {
		s->rx++;
		s->rx_bytes += len;
	}
	/* with keys, nothing unsigned is staged or believed; control messages
	 * are remembered per sender, --upstream's apart from all others (only
	 * its HEARTBEATs count), so no other sender's can refuse its */
	rp_auth_result ar = rp_auth_accept_from(&s->auth, from_upstream ? s->cf.upstream_ip : 0,
						from_upstream ? s->cf.upstream_port : 0, p, len,
						control, &len);
	if (ar != RP_AUTH_OK) {
		if (s->auth_fail++ < 10) {
			char why[96] = "";
			if (ar == RP_AUTH_STALE || ar == RP_AUTH_FUTURE)
				rp_auth_skew_str(&s->auth, why, sizeof(why));
			fprintf(stderr, "bfpatch-shim: %s refused: %s%s%s%s\n",
				control ? "control message" : "frame", rp_auth_result_names[ar],
				*why ? " (" : "", why, *why ? ")" : "");
		}
		return 0;
	}
	uint64_t run = rp_auth_msg_run(&s->auth, p, len);
	if (control) {
		on_control(s, p, len, from_upstream, run); /* control magic (PROTOCOL.md 2) */
		return 0;
	}
	if (s->auth.n_keys && (!s->auth.run || run != s->auth.run)) {
		/* only frames of the run followed (PROTOCOL.md 4) */
		if (s->other_run++ < 10) {
			char got[17], want[17];
			rp_auth_run_str(run, got);
			rp_auth_run_str(s->auth.run, want);
			fprintf(stderr, "bfpatch-shim: frame of publisher run %s refused: %s%s\n", got,
				s->auth.run ? "following run " : "no run followed yet (waiting "
				"for a HEARTBEAT from --upstream)", s->auth.run ? want : "");
		}
		return 0;
	}
	return stage_frame(s, p, len);
}

/* The kernel's running count of datagrams it dropped because the socket
 * was full (SO_RXQ_OVFL, on the newest datagram): said when it grows,
 * at most once a second (lost frames come again by NACK, at a cost). */
static void note_sock_drops(shim *s, struct msghdr *m)
{
	for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SO_RXQ_OVFL)
			continue;
		uint32_t d;
		memcpy(&d, CMSG_DATA(c), sizeof(d));
		if (d == s->sock_drops)
			continue;
		double t = now_s();
		if (t - s->sock_drops_said >= 1.0) {
			s->sock_drops_said = t;
			fprintf(stderr, "bfpatch-shim: the kernel dropped %u datagrams for a full "
				"receive buffer (%u in all); raise net.core.rmem_max or pace the "
				"sender\n", d - s->sock_drops, d);
		}
		s->sock_drops = d;
	}
}

int net_receive(shim *s, int wait_ms)
{
	struct shim_rxbufs *r = s->rxb;
	struct pollfd pfd = {.fd = s->sock, .events = POLLIN};
	if (poll(&pfd, 1, wait_ms) <= 0)
		return 0;
	for (int i = 0; i < VLEN; i++) {
		r->iov[i].iov_base = r->bufs[i];
		r->iov[i].iov_len = sizeof(r->bufs[i]);
		memset(&r->msgs[i], 0, sizeof(r->msgs[i]));
		r->msgs[i].msg_hdr.msg_iov = &r->iov[i];
		r->msgs[i].msg_hdr.msg_iovlen = 1;
		r->msgs[i].msg_hdr.msg_name = &r->srcs[i];
		r->msgs[i].msg_hdr.msg_namelen = sizeof(r->srcs[i]);
		r->msgs[i].msg_hdr.msg_control = r->cms[i];
		r->msgs[i].msg_hdr.msg_controllen = sizeof(r->cms[i]);
	}
	int n = recvmmsg(s->sock, r->msgs, VLEN, MSG_DONTWAIT, NULL);
	if (n > 0)
		note_sock_drops(s, &r->msgs[n - 1].msg_hdr);
	s->rx_behind = n == VLEN; /* receiving comes before decoding (stage.c) */
	int rc = 0;
	for (int i = 0; i < n && rc == 0; i++) {
		const int up = r->msgs[i].msg_hdr.msg_namelen == sizeof(r->srcs[i]) &&
			       r->srcs[i].sin_addr.s_addr == s->upstream.sin_addr.s_addr &&
			       r->srcs[i].sin_port == s->upstream.sin_port;
		rc = net_datagram(s, r->bufs[i], r->msgs[i].msg_len, up);
	}
	if (rc == 0)
		rc = stage_try_commit(s);
	return rc;
}

void net_say_quiet(shim *s, double t)
{
	/* an upstream that never answers (none there, a firewall, a wrong
	 * port) is said, not waited on in silence */
	const double quiet = t - (s->heard > 0 ? s->heard : s->start);
	if (quiet < 10 || t < s->next_quiet_said)
		return;
	const uint32_t ip = s->cf.upstream_ip;
	fprintf(stderr, "bfpatch-shim: nothing of this model from --upstream %u.%u.%u.%u:%u "
		"for %.0f s (no HEARTBEAT, no frame): check that its publisher or relay runs "
		"there\n", ip >> 24,
		(ip >> 16) & 255, (ip >> 8) & 255, ip & 255, s->cf.upstream_port, quiet);
	/* and why, when something came but authentication refused it */
	const rp_auth *a = &s->auth;
	uint64_t nc = 0, nf = 0;
	for (unsigned r = 1; r < RP_AUTH_RESULTS; r++) {
		nc += a->ctl[r];
		nf += a->frames[r];
	}
	if (nc || nf) {
		char skew[96] = "";
		if (a->last_ctl_refused == RP_AUTH_STALE || a->last_ctl_refused == RP_AUTH_FUTURE)
			rp_auth_skew_str(a, skew, sizeof(skew));
		fprintf(stderr, "bfpatch-shim: refused by authentication so far: %" PRIu64
			" frames%s%s%s, %" PRIu64 " control messages%s%s%s%s%s\n", nf,
			nf ? " (last: " : "", nf ? rp_auth_result_names[a->last_frame_refused] : "",
			nf ? ")" : "", nc, nc ? " (last: " : "",
			nc ? rp_auth_result_names[a->last_ctl_refused] : "", *skew ? ", " : "", skew,
			nc ? ")" : "");
	}
	s->next_quiet_said = t + 300;
}

#ifdef BFP_SHIM_DPDK
static void port_frame(void *ctx, const uint8_t *payload, size_t len)
{
	shim *s = ctx;
	if (!s->port_rc)
		s->port_rc = net_datagram(s, payload, len, 0); /* control comes on the socket */
}

/* --port's link: said when it changes; a memif client is reconnected (its
 * relay restarted). Frames lost meanwhile are NACKed as usual. */
void net_port_watch(shim *s, double t)
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
		events_emit(&s->ev, "port_down", "\"version\":%u", shim_version(s));
		break;
	default:
		break;
	}
	fflush(stdout);
}

unsigned net_port_poll(shim *s, int *rc)
{
	unsigned got = shim_port_poll(s->port, port_frame, s);
	*rc = s->port_rc;
	return got;
}
#else
void net_port_watch(shim *s, double t)
{
	(void)s;
	(void)t;
}

unsigned net_port_poll(shim *s, int *rc)
{
	*rc = s->port_rc;
	return 0;
}
#endif
