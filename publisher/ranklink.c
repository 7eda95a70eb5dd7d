/*
 * ranklink.c: the messages of the TCP link from a trainer rank to its lead
 * publisher (docs/PROTOCOL.md 5): a 16-byte header, a body, and the auth
 * trailer sealed under the rank's key, bound to the connection's session
 * and to a sequence number, so nothing is replayed, reordered or moved
 * from one connection to another.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

#include "publisher.h"

void rl_put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

void rl_put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

uint32_t rl_get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint64_t rl_get64(const uint8_t *p)
{
	return (uint64_t)rl_get32(p) | (uint64_t)rl_get32(p + 4) << 32;
}

size_t rl_build(rl_conn *c, unsigned type, const void *body, size_t len, uint8_t *out)
{
	memset(out, 0, RL_HDR);
	rl_put32(out, RL_MAGIC);
	out[4] = 1;
	out[5] = (uint8_t)type;
	out[6] = c->key ? RL_F_SIGNED : 0;
	rl_put32(out + 8, (uint32_t)len);
	if (len)
		memcpy(out + RL_HDR, body, len);
	size_t n = RL_HDR + len;
	if (c->key) {
		/* a HELLO is checked as a control message: fresh, once; the
		 * rest by session and sequence number (PROTOCOL.md 5.2) */
		if (type == RL_HELLO)
			rp_auth_seal_key(c->key, 0, out, n, rp_auth_now_us(), out + n);
		else
			rp_auth_seal_key(c->key, c->session, out, n, ++c->seq_out, out + n);
		n += RP_AUTH_LEN;
	} else if (type != RL_HELLO) {
		++c->seq_out;
	}
	return n;
}

int rl_send(rl_conn *c, unsigned type, const void *body, size_t len, int nonblocking)
{
	uint8_t msg[RL_MSG_MAX];
	size_t n = rl_build(c, type, body, len, msg), at = 0;
	while (at < n) {
		ssize_t w = send(c->fd, msg + at, n - at,
				 MSG_NOSIGNAL | (nonblocking ? MSG_DONTWAIT : 0));
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && nonblocking && at > 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			/* never half a message: finish what began, or give the
			 * link up (a peer that reads nothing for a second) */
			struct pollfd pfd = {.fd = c->fd, .events = POLLOUT};
			if (poll(&pfd, 1, 1000) > 0)
				continue;
			shutdown(c->fd, SHUT_RDWR); /* its reader sees the link end */
			return -1;
		}
		if (w <= 0)
			return -1;
		at += (size_t)w;
	}
	return 0;
}

int rl_fill(rl_conn *c)
{
	if (c->in_len == sizeof(c->in))
		return 0;
	ssize_t r = recv(c->fd, c->in + c->in_len, sizeof(c->in) - c->in_len, MSG_DONTWAIT);
	if (r == 0)
		return -1;
	if (r < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
	c->in_len += (size_t)r;
	return 1;
}

/* Constant time: whether a and b, n bytes, are equal. */
static int same(const uint8_t *a, const uint8_t *b, size_t n)
{
	uint8_t d = 0;
	for (size_t i = 0; i < n; i++)
		d |= a[i] ^ b[i];
	return d == 0;
}

int rl_next(rl_conn *c, rl_msg *m, int hello, const char **why)
{
	*why = "";
	if (c->in_len < RL_HDR)
		return 0;
	const uint8_t *p = c->in;
	const uint32_t len = rl_get32(p + 8);
	if (rl_get32(p) != RL_MAGIC || p[4] != 1 || (p[6] & ~RL_F_SIGNED) || p[7] ||
	    rl_get32(p + 12) || p[5] < RL_HELLO || p[5] > RL_RESULT) {
		*why = "not a rank link message (magic, version or reserved fields)";
		return -1;
	}
	if (len > RL_BODY_MAX) {
		*why = "message longer than any the link carries";
		return -1;
	}
	const int sealed = p[6] & RL_F_SIGNED;
	const size_t total = RL_HDR + len + (sealed ? RP_AUTH_LEN : 0);
	if (c->in_len < total)
		return 0;
	m->type = p[5];
	m->body = p + RL_HDR;
	m->len = len;
	m->total = total;
	if (hello)
		return 1; /* the caller verifies it (rp_auth_accept_from) */
	if (c->key) {
		uint8_t want[RP_AUTH_LEN];
		if (!sealed) {
			*why = "unsigned message on a keyed link";
			return -1;
		}
		rp_auth_seal_key(c->key, c->session, p, RL_HDR + len, c->seq_in + 1, want);
		if (!same(want, p + RL_HDR + len, RP_AUTH_LEN)) {
			*why = "message failed authentication (tag, session or sequence)";
			return -1;
		}
	}
	c->seq_in++;
	return 1;
}

void rl_consume(rl_conn *c, const rl_msg *m)
{
	memmove(c->in, c->in + m->total, c->in_len - m->total);
	c->in_len -= m->total;
}
