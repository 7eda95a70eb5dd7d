/*
 * proto.c: pure packet logic of bfpatch-relay (see proto.h). Every read is
 * bounds-checked against the packet length first; fields are assembled
 * from bytes, never through casts of packet memory.
 */
#include "proto.h"
#include "auth.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bfpatch.h"

const char *const rp_class_names[RP_CLASS_COUNT] = {
	[RP_DROP_SHORT] = "drop_short",       [RP_DROP_ETHERTYPE] = "drop_ethertype",
	[RP_DROP_IP] = "drop_ip",             [RP_DROP_NOT_OURS] = "drop_not_ours",
	[RP_DROP_PROTO] = "drop_proto",       [RP_DROP_UDP] = "drop_udp",
	[RP_DROP_PORT] = "drop_port",         [RP_DROP_FRAME] = "drop_frame",
	[RP_DROP_ENCODING] = "drop_encoding", [RP_DROP_ARP] = "drop_arp",           [RP_ARP_REQUEST] = "arp_request",
	[RP_ARP_REPLY] = "arp_reply",         [RP_DATA] = "data",
	[RP_CONTROL] = "control",
};

static inline uint16_t be16(const uint8_t *p)
{
	return (uint16_t)((p[0] << 8) | p[1]);
}
static inline uint32_t be32(const uint8_t *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline void wbe16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}
static inline void wbe32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}
static inline uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t le64(const uint8_t *p)
{
	return (uint64_t)le32(p) | ((uint64_t)le32(p + 4) << 32);
}
static inline void wle32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}
static inline void wle64(uint8_t *p, uint64_t v)
{
	wle32(p, (uint32_t)v);
	wle32(p + 4, (uint32_t)(v >> 32));
}

/* rp_parse_num and rp_parse_bytes: k, m, g multiply by 1000^i, or by
 * 1024^i when bin */
static int parse_scaled(const char *s, uint64_t lo, uint64_t hi, int bin, uint64_t *out)
{
	char *end;
	errno = 0;
	if (!s || !*s || *s == '-' || *s == '+' || *s == ' ')
		return -1;
	/* decimal unless 0x: zero-padded versions (step-0012) are not octal */
	const int hex = s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
	unsigned long long v = strtoull(s, &end, hex ? 16 : 10);
	const uint64_t k = bin ? 1024 : 1000;
	uint64_t mul = 1;
	switch (*end) {
	case 'k': case 'K': mul = k; end++; break;
	case 'm': case 'M': mul = k * k; end++; break;
	case 'g': case 'G': mul = k * k * k; end++; break;
	default: break;
	}
	if (errno || end == s || *end || v > hi / mul || v * mul < lo)
		return -1;
	*out = v * mul;
	return 0;
}

int rp_parse_num(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	return parse_scaled(s, lo, hi, 0, out);
}

int rp_parse_bytes(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	return parse_scaled(s, lo, hi, 1, out);
}

int rp_parse_rate(const char *s, uint64_t hi, uint64_t *out)
{
	uint64_t v;
	if (parse_scaled(s, 0, hi, 0, &v) || (v && v < 1000))
		return -1;
	*out = v;
	return 0;
}

int rp_parse_mac(const char *s, uint8_t mac[6])
{
	unsigned v[6];
	char tail;
	if (sscanf(s, "%x:%x:%x:%x:%x:%x%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &tail) != 6)
		return -1;
	for (int i = 0; i < 6; i++) {
		if (v[i] > 255)
			return -1;
		mac[i] = (uint8_t)v[i];
	}
	return 0;
}

int rp_parse_hostport(const char *s, uint32_t *ip, uint16_t *port, const char **rest)
{
	char buf[64];
	struct in_addr a;
	const char *colon = strchr(s, ':');
	if (!colon || (size_t)(colon - s) >= sizeof(buf))
		return -1;
	memcpy(buf, s, (size_t)(colon - s));
	buf[colon - s] = 0;
	if (inet_pton(AF_INET, buf, &a) != 1)
		return -1;
	char *end;
	errno = 0;
	unsigned long v = strtoul(colon + 1, &end, 10);
	if (errno || end == colon + 1 || colon[1] == '-' || colon[1] == '+' || v == 0 ||
	    v > 65535 || (*end && (*end != ',' || !rest)))
		return -1;
	*ip = ntohl(a.s_addr);
	*port = (uint16_t)v;
	if (rest)
		*rest = end;
	return 0;
}

/* Native-order 32-bit words into a 64-bit sum (no carry is lost below
 * 2^32 words), folded and byte-swapped on a little-endian host at the
 * end: the one's-complement sum commutes with byte swapping (RFC 1071
 * 2(B)), and the compiler vectorises the word loop. */
uint32_t rp_sum(const void *data, size_t len, uint32_t sum)
{
	const uint8_t *p = data;
	uint64_t s = 0;
	for (; len >= 4; p += 4, len -= 4) {
		uint32_t w;
		memcpy(&w, p, 4);
		s += w;
	}
	if (len >= 2) {
		uint16_t w;
		memcpy(&w, p, 2);
		s += w;
		p += 2;
		len -= 2;
	}
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	if (len)
		s += p[0]; /* the low byte of a native word: the high one once swapped */
	s = (s & 0xFFFFFFFFu) + (s >> 32);
	s = (s & 0xFFFFFFFFu) + (s >> 32);
	uint32_t f = (uint32_t)s;
	f = (f & 0xFFFF) + (f >> 16);
	f = (f & 0xFFFF) + (f >> 16);
	f = ((f & 0xFF) << 8) | (f >> 8);
#else
	if (len)
		s += (uint32_t)p[0] << 8;
	s = (s & 0xFFFFFFFFu) + (s >> 32);
	s = (s & 0xFFFFFFFFu) + (s >> 32);
	uint32_t f = (uint32_t)s;
	f = (f & 0xFFFF) + (f >> 16);
	f = (f & 0xFFFF) + (f >> 16);
#endif
	uint64_t t = (uint64_t)sum + f;
	return (uint32_t)((t & 0xFFFFFFFFu) + (t >> 32));
}

static int ours(const rp_addrs *a, uint32_t ip)
{
	for (unsigned i = 0; i < a->n_ip; i++)
		if (a->ip[i] == ip)
			return 1;
	return 0;
}

static uint32_t pseudo_sum(uint32_t src, uint32_t dst, uint16_t udp_len)
{
	return (src >> 16) + (src & 0xFFFF) + (dst >> 16) + (dst & 0xFFFF) + 17u + udp_len;
}

/* The sum of a header's n (even, a constant) bytes: unrolled where it is
 * inlined, without rp_sum()'s set-up for long payloads. */
static inline uint32_t hdr_sum(const uint8_t *p, unsigned n, uint32_t sum)
{
	for (unsigned i = 0; i < n; i += 2)
		sum += be16(p + i);
	return sum;
}

/* Cheap frame-header checks for the data path (FORMAT.md 2.4 rules 1-4,
 * 6-7); the full CRC only when asked. An otherwise well-formed frame in an
 * encoding this build does not know is told apart, for the operator. */
static rp_class frame_class(const uint8_t *f, size_t len, int check_crc)
{
	if (len < BFP_HEADER_SIZE || le32(f) != BFP_MAGIC || f[4] != BFP_FORMAT_VERSION)
		return RP_DROP_FRAME;
	size_t flen = BFP_HEADER_SIZE + (size_t)le32(f + 44);
	/* the frame, or the frame and an authentication trailer (auth.h) */
	if ((flen != len && (flen + RP_AUTH_LEN != len || le32(f + flen) != RP_AUTH_MAGIC)) ||
	    (f[6] & ~BFP_FLAG_IN_PATCH) || f[7])
		return RP_DROP_FRAME;
	if (!bfp_encoding_known(f[5]))
		return RP_DROP_ENCODING;
	if (f[6] && bfp_encoding_is_delta(f[5])) /* IN_PATCH: keyframe-coded only */
		return RP_DROP_FRAME;
	if (check_crc) {
		bfp_frame_header h;
		return bfp_frame_parse(f, flen, &h) == BFP_OK ? RP_DATA : RP_DROP_FRAME;
	}
	return RP_DATA;
}

rp_class rp_classify(const uint8_t *p, size_t len, const rp_addrs *a, rp_pkt *o)
{
	memset(o, 0, sizeof(*o));
	if (len < RP_ETH_LEN)
		return o->cls = RP_DROP_SHORT;
	memcpy(o->src_mac, p + 6, 6);
	uint16_t et = be16(p + 12);
	if (et == 0x0806) {
		const uint8_t *q = p + RP_ETH_LEN;
		if (len < RP_ETH_LEN + 28)
			return o->cls = RP_DROP_SHORT;
		if (be16(q) != 1 || be16(q + 2) != 0x0800 || q[4] != 6 || q[5] != 4)
			return o->cls = RP_DROP_ARP;
		o->src_ip = be32(q + 14);
		o->arp_target_ip = be32(q + 24);
		memcpy(o->src_mac, q + 8, 6);
		if (be16(q + 6) == 1 && ours(a, o->arp_target_ip))
			return o->cls = RP_ARP_REQUEST;
		if (be16(q + 6) == 2)
			return o->cls = RP_ARP_REPLY;
		return o->cls = RP_DROP_ARP;
	}
	if (et != 0x0800)
		return o->cls = RP_DROP_ETHERTYPE;
	if (len < RP_HDRS)
		return o->cls = RP_DROP_SHORT;
	const uint8_t *ip = p + RP_ETH_LEN;
	uint16_t tot = be16(ip + 2);
	if (ip[0] != 0x45 || tot < RP_IP_LEN + RP_UDP_LEN || tot > len - RP_ETH_LEN)
		return o->cls = RP_DROP_IP;
	if (be16(ip + 6) & 0x3FFF) /* MF set or fragment offset: no reassembly */
		return o->cls = RP_DROP_IP;
	if (rp_fold(hdr_sum(ip, RP_IP_LEN, 0)) != 0xFFFF)
		return o->cls = RP_DROP_IP;
	o->src_ip = be32(ip + 12);
	o->dst_ip = be32(ip + 16);
	if (!ours(a, o->dst_ip))
		return o->cls = RP_DROP_NOT_OURS;
	if (ip[9] != 17)
		return o->cls = RP_DROP_PROTO;
	const uint8_t *u = ip + RP_IP_LEN;
	uint16_t ulen = be16(u + 4);
	if (ulen != tot - RP_IP_LEN)
		return o->cls = RP_DROP_UDP;
	/* data frames only: control messages are always checked */
	const int derive = a->udp_sum_from_header && be16(u + 6) != 0 &&
			   be16(u + 2) == a->data_port;
	if (derive) {
		/* the payload's sum is what the checksum leaves of pseudo-header
		 * and UDP header (RFC 1624): true if the checksum holds, which
		 * whoever receives what is built from it checks; the payload
		 * is not read */
		o->payload_sum = (uint16_t)~rp_fold(hdr_sum(u, RP_UDP_LEN,
							     pseudo_sum(o->src_ip, o->dst_ip, ulen)));
	} else {
		/* one pass over the payload serves the check and the relay's
		 * outgoing checksums (the payload starts at an even offset) */
		o->payload_sum = rp_sum(u + RP_UDP_LEN, ulen - RP_UDP_LEN, 0);
	}
	if (be16(u + 6) != 0 && !derive) {
		uint64_t s = (uint64_t)hdr_sum(u, RP_UDP_LEN, pseudo_sum(o->src_ip, o->dst_ip, ulen)) +
			     o->payload_sum;
		if (rp_fold((uint32_t)((s & 0xFFFFFFFF) + (s >> 32))) != 0xFFFF)
			return o->cls = RP_DROP_UDP;
	}
	o->src_port = be16(u);
	o->dst_port = be16(u + 2);
	o->l4_off = RP_HDRS;
	o->l4_len = (uint16_t)(ulen - RP_UDP_LEN);
	if (o->dst_port == a->data_port)
		return o->cls = frame_class(p + RP_HDRS, o->l4_len, a->check_crc);
	if (o->dst_port == a->control_port)
		return o->cls = RP_CONTROL;
	return o->cls = RP_DROP_PORT;
}

void rp_build_udp(uint8_t *h, const uint8_t dst_mac[6], const uint8_t src_mac[6],
		  uint32_t src_ip, uint32_t dst_ip, uint16_t src_port,
		  uint16_t dst_port, uint16_t payload_len, uint32_t payload_sum,
		  uint16_t ip_id)
{
	uint16_t ulen = (uint16_t)(RP_UDP_LEN + payload_len);
	memcpy(h, dst_mac, 6);
	memcpy(h + 6, src_mac, 6);
	wbe16(h + 12, 0x0800);
	uint8_t *ip = h + RP_ETH_LEN;
	ip[0] = 0x45;
	ip[1] = 0;
	wbe16(ip + 2, (uint16_t)(RP_IP_LEN + ulen));
	wbe16(ip + 4, ip_id);
	wbe16(ip + 6, 0x4000); /* don't fragment */
	ip[8] = 64;
	ip[9] = 17;
	wbe16(ip + 10, 0);
	wbe32(ip + 12, src_ip);
	wbe32(ip + 16, dst_ip);
	wbe16(ip + 10, (uint16_t)~rp_fold(hdr_sum(ip, RP_IP_LEN, 0)));
	uint8_t *u = ip + RP_IP_LEN;
	wbe16(u, src_port);
	wbe16(u + 2, dst_port);
	wbe16(u + 4, ulen);
	wbe16(u + 6, 0);
	uint32_t s = pseudo_sum(src_ip, dst_ip, ulen);
	s = hdr_sum(u, RP_UDP_LEN, s);
	uint64_t t = (uint64_t)s + payload_sum;
	uint16_t ck = (uint16_t)~rp_fold((uint32_t)((t & 0xFFFFFFFF) + (t >> 32)));
	wbe16(u + 6, ck ? ck : 0xFFFF); /* RFC 768: a computed 0 is sent as all ones */
}

int rp_arp_reply_inplace(uint8_t *p, size_t len, const uint8_t our_mac[6])
{
	if (len < RP_ETH_LEN + 28 || be16(p + 12) != 0x0806)
		return -1;
	uint8_t *q = p + RP_ETH_LEN;
	if (be16(q + 6) != 1)
		return -1;
	uint8_t sha[6], spa[4], tpa[4];
	memcpy(sha, q + 8, 6);
	memcpy(spa, q + 14, 4);
	memcpy(tpa, q + 24, 4);
	wbe16(q + 6, 2);
	memcpy(q + 8, our_mac, 6);
	memcpy(q + 14, tpa, 4);
	memcpy(q + 18, sha, 6);
	memcpy(q + 24, spa, 4);
	memcpy(p, sha, 6);
	memcpy(p + 6, our_mac, 6);
	return 0;
}

size_t rp_arp_request(uint8_t *p, const uint8_t our_mac[6], uint32_t our_ip,
		      uint32_t target_ip)
{
	memset(p, 0xFF, 6);
	memcpy(p + 6, our_mac, 6);
	wbe16(p + 12, 0x0806);
	uint8_t *q = p + RP_ETH_LEN;
	wbe16(q, 1);
	wbe16(q + 2, 0x0800);
	q[4] = 6;
	q[5] = 4;
	wbe16(q + 6, 1);
	memcpy(q + 8, our_mac, 6);
	wbe32(q + 14, our_ip);
	memset(q + 18, 0, 6);
	wbe32(q + 24, target_ip);
	return RP_ETH_LEN + 28;
}

/* ---- control messages (PROTOCOL.md section 2) ---- */

int rp_ctl_parse(const uint8_t *p, size_t len, rp_ctl *c)
{
	memset(c, 0, sizeof(*c));
	if (len < RP_CTL_HDR + 4 || le32(p) != RP_CTL_MAGIC || p[4] != RP_CTL_VERSION)
		return -1;
	if (bfp_crc32c(0, p, len - 4) != le32(p + len - 4))
		return -1;
	c->type = p[5];
	c->data_port = (uint16_t)(p[6] | (p[7] << 8));
	c->model_id = le64(p + 8);
	c->version = le32(p + 16);
	c->rate_kbps = le32(p + 20);
	c->n_ranges = (uint16_t)le32(p + 24);
	size_t body = len - RP_CTL_HDR - 4;
	switch (c->type) {
	case RP_JOIN: /* count (unused) must be 0, PROTOCOL.md 2 */
		return body == 0 && c->data_port != 0 && c->n_ranges == 0 && !le32(p + 24) ? 0
											  : -1;
	case RP_LEAVE:
	case RP_HEARTBEAT:
		return body == 0 && c->data_port == 0 && c->rate_kbps == 0 && !le32(p + 24) ? 0
											    : -1;
	case RP_NACK:
		c->flags = c->data_port; /* bytes 6-7 carry the NACK's flags */
		c->data_port = 0;
		if (le32(p + 24) > RP_NACK_MAX || (c->flags & ~RP_NACK_KEY) || c->rate_kbps ||
		    body != 8u * c->n_ranges || c->n_ranges == 0)
			return -1;
		for (unsigned i = 0; i < c->n_ranges; i++) {
			c->ranges[i].first = le32(p + RP_CTL_HDR + 8 * i);
			c->ranges[i].count = le32(p + RP_CTL_HDR + 8 * i + 4);
			/* frames first .. first + count - 1: the last may be
			 * index 2^32 - 1, none past it */
			if (c->ranges[i].count == 0 ||
			    c->ranges[i].count - 1 > UINT32_MAX - c->ranges[i].first)
				return -1;
		}
		return 0;
	}
	return -1;
}

size_t rp_ctl_build(uint8_t *p, size_t cap, const rp_ctl *c)
{
	size_t n = c->type == RP_NACK ? c->n_ranges : 0;
	size_t len = RP_CTL_HDR + 8 * n + 4;
	if (cap < len || n > RP_NACK_MAX)
		return 0;
	wle32(p, RP_CTL_MAGIC);
	p[4] = RP_CTL_VERSION;
	p[5] = c->type;
	uint16_t w6 = c->type == RP_NACK ? c->flags : c->data_port;
	p[6] = (uint8_t)w6;
	p[7] = (uint8_t)(w6 >> 8);
	wle64(p + 8, c->model_id);
	wle32(p + 16, c->version);
	wle32(p + 20, c->rate_kbps);
	wle32(p + 24, (uint32_t)n);
	for (size_t i = 0; i < n; i++) {
		wle32(p + RP_CTL_HDR + 8 * i, c->ranges[i].first);
		wle32(p + RP_CTL_HDR + 8 * i + 4, c->ranges[i].count);
	}
	wle32(p + len - 4, bfp_crc32c(0, p, len - 4));
	return len;
}

/* ---- authenticated control I/O (auth.h; both auth.c and auth_none.c) ---- */

const char *const rp_auth_result_names[RP_AUTH_RESULTS] = {
	"ok", "no trailer", "unknown key", "bad tag", "stale", "replay", "future",
};

void rp_auth_run_str(uint64_t run, char buf[17])
{
	snprintf(buf, 17, "%016" PRIx64, run);
}

void rp_auth_skew_str(const rp_auth *a, char *buf, size_t cap)
{
	const int64_t d = a->last_skew_us;
	snprintf(buf, cap, "stamped %.1f s %s this clock: clock skew, %u s ahead tolerated",
		 (double)(d < 0 ? -d : d) / 1e6, d < 0 ? "behind" : "ahead of", RP_AUTH_AHEAD_S);
}

size_t rp_auth_strip(const uint8_t *p, size_t len)
{
	return rp_auth_has_trailer(p, len) ? len - RP_AUTH_LEN : len;
}

size_t rp_auth_ctl_build_key(const rp_auth *a, const rp_key *k, uint8_t *p, size_t cap,
			     const struct rp_ctl *c)
{
	if (cap < RP_AUTH_LEN)
		return 0;
	size_t n = rp_ctl_build(p, cap - RP_AUTH_LEN, c);
	if (n && (k || a->n_keys)) {
		rp_auth_seal_key(k ? k : &a->keys[0], a->run, p, n, rp_auth_now_us(), p + n);
		n += RP_AUTH_LEN;
	}
	return n;
}

size_t rp_auth_ctl_build(const rp_auth *a, uint8_t *p, size_t cap, const struct rp_ctl *c)
{
	return rp_auth_ctl_build_key(a, NULL, p, cap, c);
}

/* ---- token bucket ---- */

void rp_bucket_init(rp_bucket *b, uint64_t rate, uint64_t burst, uint64_t now)
{
	b->rate = rate;
	b->burst = burst;
	b->tokens = 0;
	b->last = now;
}

/* tokens are kept in byte*hz units so integer refill is exact */
static void bucket_refill(rp_bucket *b, uint64_t now, uint64_t hz)
{
	uint64_t cap = b->burst * hz;
	if (now > b->last) {
		uint64_t dt = now - b->last;
		if (dt >= cap / b->rate || b->tokens + dt * b->rate >= cap)
			b->tokens = cap;
		else
			b->tokens += dt * b->rate;
		b->last = now;
	}
}

int rp_bucket_take(rp_bucket *b, uint64_t len, uint64_t now, uint64_t hz)
{
	if (b->rate == 0)
		return 1;
	bucket_refill(b, now, hz);
	if (b->tokens < len * hz)
		return 0;
	b->tokens -= len * hz;
	return 1;
}

void rp_bucket_fill(rp_bucket *b, uint64_t hz)
{
	b->tokens = b->burst * hz;
}

uint64_t rp_bucket_take_upto(rp_bucket *b, uint64_t n, uint64_t now, uint64_t hz)
{
	if (b->rate == 0)
		return n;
	bucket_refill(b, now, hz);
	uint64_t k = b->tokens / hz < n ? b->tokens / hz : n;
	b->tokens -= k * hz;
	return k;
}

/* ---- repair cache index ----
 * Entries live in a ring in insertion order (eviction is always at the
 * head); a linear-probing hash of ring positions finds them, with
 * backward-shift deletion so no tombstones accumulate. Each hash slot
 * holds its entry's ring position + 1 (low 32 bits, 0: empty) and the
 * 32-bit hash of its key (high 32 bits), so that probing, deleting and
 * moving slots read the hash array alone, and an entry is read only when
 * its key's hash matches: a relay in steady state inserts and evicts a
 * frame per frame, and the entries it would read are cold. Entries that
 * continue the newest entry's run (rp_cache_run) are not hashed at all:
 * a stream's frames come in index order, and then a look-up, an insert
 * and an eviction are a few comparisons in the cache struct, where the
 * hash's slots would be lines the payloads push out of the CPU's cache
 * between two frames. */

static uint32_t hkey(uint64_t m, uint32_t v, uint32_t i)
{
	uint64_t z = m ^ (((uint64_t)v << 32) | i) * 0x9E3779B97F4A7C15ull;
	z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
	return (uint32_t)(z ^ (z >> 29));
}

int rp_cache_init(rp_cache *c, rp_cache_entry *ring, uint64_t *hash, uint32_t cap,
		  uint64_t budget, uint32_t keep_versions)
{
	if (cap == 0 || (cap & (cap - 1)) || cap > (1u << 30))
		return -1;
	memset(c, 0, sizeof(*c));
	memset(hash, 0, 2 * (size_t)cap * sizeof(*hash));
	c->ring = ring;
	c->hash = hash;
	c->cap = cap;
	c->budget = budget;
	c->keep_versions = keep_versions ? keep_versions : 1;
	c->tail_run = -1;
	return 0;
}

/* A hash slot's entry (h != 0). */
static const rp_cache_entry *at(const rp_cache *c, uint64_t h)
{
	return &c->ring[(uint32_t)h - 1];
}

/* Hash slot holding the entry whose key (m, v, i) hashes to x, or -1. */
static int64_t find(const rp_cache *c, uint32_t x, uint64_t m, uint32_t v, uint32_t i)
{
	const uint32_t mask = 2 * c->cap - 1;
	for (uint32_t k = x & mask;; k = (k + 1) & mask) {
		const uint64_t h = c->hash[k];
		if (h == 0)
			return -1;
		if ((uint32_t)(h >> 32) != x)
			continue;
		const rp_cache_entry *e = at(c, h);
		if (e->model_id == m && e->version == v && e->index == i)
			return k;
	}
}

/* The live entry of (m, v, i), or NULL: its run's, else the hash's. */
static const rp_cache_entry *lookup(const rp_cache *c, uint64_t m, uint32_t v, uint32_t i)
{
	for (unsigned k = 0; k < RP_CACHE_RUNS; k++) {
		const rp_cache_run *u = &c->runs[k];
		if (u->n && u->version == v && u->model_id == m && i - u->index < u->n) {
			const rp_cache_entry *e = &c->ring[(u->pos + (i - u->index)) & (c->cap - 1)];
			if (!e->dead) /* a dead one's key may be held again since */
				return e;
		}
	}
	if (!c->n_hashed)
		return NULL;
	int64_t k = find(c, hkey(m, v, i), m, v, i);
	return k < 0 ? NULL : at(c, c->hash[k]);
}

static void unhash(rp_cache *c, uint32_t k)
{
	uint32_t mask = 2 * c->cap - 1;
	c->hash[k] = 0;
	for (uint32_t j = (k + 1) & mask; c->hash[j]; j = (j + 1) & mask) {
		uint32_t home = (uint32_t)(c->hash[j] >> 32) & mask;
		/* move j back to the hole at k unless its home lies
		 * cyclically in (k, j] */
		if (((j - home) & mask) >= ((j - k) & mask)) {
			c->hash[k] = c->hash[j];
			c->hash[j] = 0;
			k = j;
		}
	}
}

static rp_cache_model *model_of(rp_cache *c, uint64_t m)
{
	for (unsigned s = 0; s < RP_CACHE_MODELS; s++)
		if (c->models[s].entries && c->models[s].id == m)
			return &c->models[s];
	return NULL;
}

/* Take a live entry out of the index and the accounts; its ring slot
 * stays until eviction reaches it. */
static void retire(rp_cache *c, rp_cache_entry *e, void (*drop)(void *, void *), void *ctx)
{
	/* its slot: the one on its probe path that holds its ring position
	 * (only hash slots are read, not the entries of the others) */
	if (!e->run) {
		const uint32_t mask = 2 * c->cap - 1, pos = (uint32_t)(e - c->ring) + 1;
		uint32_t k = e->hkey & mask;
		while (c->hash[k] && (uint32_t)c->hash[k] != pos)
			k = (k + 1) & mask;
		if (c->hash[k]) {
			unhash(c, k);
			c->n_hashed--;
		}
	}
	model_of(c, e->model_id)->entries--;
	c->bytes -= e->bytes;
	if (drop)
		drop(ctx, e->obj);
	e->obj = NULL;
	e->bytes = 0;
	e->dead = 1;
}

static void evict_oldest(rp_cache *c, void (*drop)(void *, void *), void *ctx)
{
	rp_cache_entry *e = &c->ring[c->head];
	if (!e->dead)
		retire(c, e, drop, ctx);
	if (e->run) { /* the oldest entry of a run: the one that starts at head */
		for (unsigned k = 0; k < RP_CACHE_RUNS; k++) {
			rp_cache_run *u = &c->runs[k];
			if (u->n && u->pos == c->head) {
				u->pos = (u->pos + 1) & (c->cap - 1);
				u->index++;
				if (--u->n == 0 && c->tail_run == (int)k)
					c->tail_run = -1;
				break;
			}
		}
		e->run = 0;
	}
	c->head = (c->head + 1) & (c->cap - 1);
	c->len--;
}

uint32_t rp_cache_drop_version(rp_cache *c, uint64_t m, uint32_t v,
			       void (*drop)(void *, void *), void *ctx)
{
	uint32_t n = 0;
	for (uint32_t q = 0; q < c->len; q++) {
		rp_cache_entry *e = &c->ring[(c->head + q) & (c->cap - 1)];
		if (!e->dead && e->model_id == m && e->version == v) {
			retire(c, e, drop, ctx);
			n++;
		}
	}
	return n;
}

int rp_cache_put(rp_cache *c, uint64_t m, uint32_t v, uint32_t i, uint32_t bytes,
		 void *obj, void (*drop)(void *, void *), void *ctx)
{
	return rp_cache_put_tagged(c, m, v, i, bytes, 0, obj, drop, ctx);
}

/* rp_cache_put_tagged; with absent, (m, v, i) is known not to be held. */
static int put(rp_cache *c, int absent, uint64_t m, uint32_t v, uint32_t i, uint32_t bytes,
	       uint64_t tag, void *obj, void (*drop)(void *, void *), void *ctx)
{
	if (bytes > c->budget)
		return -1;
	if (!absent && lookup(c, m, v, i))
		return 0;
	rp_cache_model *md = model_of(c, m);
	if (md) {
		if (v > md->newest) {
			md->newest = v;
		} else if (md->newest - v >= c->keep_versions) {
			if (++md->too_old < RP_CACHE_RESTART)
				return -1; /* older than the versions kept */
			md->newest = v; /* its publisher started over */
		}
		md->too_old = 0;
	} else {
		/* a model not cached: a free slot, made by evicting the oldest
		 * entries if every slot has some */
		for (;;) {
			for (unsigned s = 0; s < RP_CACHE_MODELS && !md; s++)
				if (c->models[s].entries == 0)
					md = &c->models[s];
			if (md)
				break;
			evict_oldest(c, drop, ctx);
		}
		*md = (rp_cache_model){.id = m, .newest = v};
	}
	md->entries++; /* counted now, so the eviction below keeps its slot */
	/* keep at most K versions of each model, the byte budget and the slot
	 * count: evict from the oldest. An entry newer than its model's
	 * newest is of a run that started over: evicted too. */
	for (;;) {
		const rp_cache_entry *h = &c->ring[c->head];
		if (c->len && h->dead) { /* a dropped entry: its slot goes */
			evict_oldest(c, drop, ctx);
			continue;
		}
		const rp_cache_model *hm = !c->len ? NULL
					   : h->model_id == m ? md /* the usual case */
					   : model_of(c, h->model_id);
		if (!hm || (hm->newest - h->version < c->keep_versions &&
			    c->bytes + bytes <= c->budget && c->len < c->cap))
			break;
		evict_oldest(c, drop, ctx);
	}
	uint32_t r = (c->head + c->len) & (c->cap - 1);
	rp_cache_entry *e = &c->ring[r];
	e->model_id = m;
	e->version = v;
	e->index = i;
	e->bytes = bytes;
	e->dead = 0;
	e->obj = obj;
	e->tag = tag;
	/* the next entry of the newest entry's run, a new run in a free run
	 * slot, or else one for the hash */
	rp_cache_run *u = c->tail_run >= 0 ? &c->runs[c->tail_run] : NULL;
	if (u && u->version == v && u->model_id == m && i == u->index + u->n &&
	    ((u->pos + u->n) & (c->cap - 1)) == r) {
		u->n++;
		e->run = 1;
		e->hkey = 0;
	} else {
		unsigned s;
		for (s = 0; s < RP_CACHE_RUNS && c->runs[s].n; s++)
			;
		if (s < RP_CACHE_RUNS) {
			c->runs[s] = (rp_cache_run){.model_id = m, .version = v, .index = i, .pos = r, .n = 1};
			c->tail_run = (int)s;
			e->run = 1;
			e->hkey = 0;
		} else {
			const uint32_t x = hkey(m, v, i), mask = 2 * c->cap - 1;
			uint32_t k = x & mask;
			while (c->hash[k])
				k = (k + 1) & mask;
			c->hash[k] = (uint64_t)x << 32 | (r + 1);
			c->n_hashed++;
			c->tail_run = -1;
			e->run = 0;
			e->hkey = x;
		}
	}
	c->len++;
	c->bytes += bytes;
	return 1;
}

int rp_cache_put_tagged(rp_cache *c, uint64_t m, uint32_t v, uint32_t i, uint32_t bytes,
			uint64_t tag, void *obj, void (*drop)(void *, void *), void *ctx)
{
	return put(c, 0, m, v, i, bytes, tag, obj, drop, ctx);
}

int rp_cache_put_absent(rp_cache *c, uint64_t m, uint32_t v, uint32_t i, uint32_t bytes,
			uint64_t tag, void *obj, void (*drop)(void *, void *), void *ctx)
{
	return put(c, 1, m, v, i, bytes, tag, obj, drop, ctx);
}

const rp_cache_entry *rp_cache_find(const rp_cache *c, uint64_t m, uint32_t v, uint32_t i)
{
	return lookup(c, m, v, i);
}

void *rp_cache_get(const rp_cache *c, uint64_t m, uint32_t v, uint32_t i)
{
	const rp_cache_entry *e = lookup(c, m, v, i);
	return e ? e->obj : NULL;
}

void rp_cache_clear(rp_cache *c, void (*drop)(void *, void *), void *ctx)
{
	while (c->len)
		evict_oldest(c, drop, ctx);
}

void rp_catch_signal(int sig, void (*fn)(int))
{
	struct sigaction old;
	if (sigaction(sig, NULL, &old) == 0 && old.sa_handler == SIG_IGN)
		return;
	signal(sig, fn);
}
