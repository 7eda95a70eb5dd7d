/*
 * send.c: what leaves the publisher's socket: frames in sendmmsg batches,
 * paced by the --rate token bucket and by each subscriber's link (its
 * JOIN's rate), signed with --key; control messages (HEARTBEAT). The
 * bursts and catch-up slices are sized here too.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "bfpatch.h"
#include "util.h"
#include "publisher.h"

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
uint64_t pub_burst(uint64_t rate_bps, uint32_t frame_size)
{
	uint64_t b = SEND_BATCH * (uint64_t)WIRE(frame_size), ms2 = rate_bps / 8 / 500;
	b = b > ms2 ? b : ms2;
	return b > WIRE(BFP_FRAME_SIZE_MAX) ? b : WIRE(BFP_FRAME_SIZE_MAX);
}

/* Catch-up frames per main-loop turn: about 10 ms at rate, 1 to 256. */
size_t pub_slice(uint64_t rate_bps, uint32_t frame_size)
{
	size_t n = rate_bps ? (size_t)(rate_bps / 8 / 100 / WIRE(frame_size)) : 256;
	return n < 1 ? 1 : (n > 256 ? 256 : n);
}

/* A subscriber's link, as its JOIN tells it (PROTOCOL.md 2.1): frames to
 * it are paced at that rate too. */
void pub_sub_link(publisher *P, pub_sub *s, uint32_t rate_kbps, double t)
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
void pub_send_frames(publisher *P, uint8_t *const *fr, const size_t *lens, size_t n,
			    pub_sub *const *to, unsigned n_to)
{
	enum { BATCH = SEND_BATCH };
	struct mmsghdr m[BATCH];
	struct iovec iov[2 * BATCH];
	uint8_t trailer[BATCH][RP_AUTH_LEN];
	const int keyed = P->auth.n_keys > 0 || P->auth.n_peers > 0;
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
		const rp_key *sealed = NULL; /* the key trailer[] holds tags of */
		for (size_t k = 0; k < nb; k++) { /* the same frames to everyone */
			iov[2 * k].iov_base = fr[i + k];
			iov[2 * k].iov_len = lens[i + k];
			iov[2 * k + 1].iov_base = trailer[k];
			iov[2 * k + 1].iov_len = keyed ? RP_AUTH_LEN : 0;
		}
		for (unsigned s = 0; s < n_to; s++) {
			/* signed under the subscriber's own key (a peer's), or the
			 * group key: sealed again only when the key changes */
			const rp_key *key = to[s]->key ? to[s]->key : &P->auth.keys[0];
			if (keyed && key != sealed) {
				for (size_t k = 0; k < nb; k++)
					rp_auth_seal_key(key, P->auth.run, iov[2 * k].iov_base,
							 iov[2 * k].iov_len, 0, trailer[k]);
				sealed = key;
			}
			for (size_t k = 0; k < nb; k++) {
				memset(&m[k], 0, sizeof(m[k]));
				m[k].msg_hdr.msg_name = (void *)&to[s]->data;
				m[k].msg_hdr.msg_namelen = sizeof(to[s]->data);
				m[k].msg_hdr.msg_iov = &iov[2 * k];
				m[k].msg_hdr.msg_iovlen = keyed ? 2 : 1;
			}
			if (!pub_wait_tokens(&to[s]->link, bytes) ||
			    !pub_wait_tokens(&P->bucket, bytes)) {
				P->send_cut = 1;
				return; /* SIGTERM while paced */
			}
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

/* A control message to s, signed when keyed (with its own key, if a
 * peer's). */
static void pub_ctl_send(publisher *P, const rp_ctl *c, const pub_sub *s)
{
	uint8_t msg[RP_CTL_HDR + 8 * RP_NACK_MAX + 4 + RP_AUTH_LEN];
	size_t n = rp_auth_ctl_build_key(&P->auth, s->key, msg, sizeof(msg), c);
	if (n)
		sendto(P->sock, msg, n, 0, (const struct sockaddr *)&s->ctl, sizeof(s->ctl));
}

void pub_send_all(publisher *P, const patch *p)
{
	pub_sub *to[MAX_SUBS];
	for (unsigned s = 0; s < P->n_subs; s++)
		to[s] = &P->subs[s];
	pub_send(P, p, 0, p->n, to, P->n_subs);
}

void pub_send_one(publisher *P, pub_sub *s, const patch *p, size_t first, size_t count)
{
	pub_sub *to[1] = {s};
	pub_send(P, p, first, count, to, 1);
}

/* Tell every subscriber the newest version (PROTOCOL.md 2.3), so one
 * that lost all of a patch learns of it and NACKs it. */
void pub_heartbeat_one(publisher *P, const pub_sub *s, uint64_t model_id, uint32_t ver)
{
	rp_ctl c;
	memset(&c, 0, sizeof(c));
	c.type = RP_HEARTBEAT;
	c.model_id = model_id;
	c.version = ver;
	pub_ctl_send(P, &c, s);
}

void pub_heartbeat(publisher *P, uint64_t model_id, uint32_t ver)
{
	for (unsigned i = 0; i < P->n_subs; i++)
		pub_heartbeat_one(P, &P->subs[i], model_id, ver);
}
