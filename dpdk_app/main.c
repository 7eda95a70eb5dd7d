/*
 * relay.c: bfpatch-relay, a DPDK poll-mode relay for patch frames.
 * Worker lcores receive, classify (proto.c) and, with --key, verify data
 * frames' signatures; one core lcore owns the
 * subscribers, the repair cache, pacing and transmit, so nothing on the
 * fast path takes a lock: workers hand packets over through one MP/SC
 * ring. main() follows the DPDK examples' order: EAL, signals, options,
 * pools, ports, launch, stop, cleanup.
 *
 * Fan-out (as DPDK's ipv4_multicast explains its two methods): each
 * subscriber gets a fresh header mbuf (Ethernet/IPv4/UDP for that
 * subscriber) chained to an indirect clone of the frame's payload, so the
 * payload is never copied and each output carries its own addresses. A
 * refcount-only method (the same bytes to all) cannot address several
 * unicast subscribers, so the real alternative is a full copy per output
 * (--copy-fanout keeps it, for measurement). bench/bench_relay.sh measured
 * both on one core here (whole relay loop per output, fan-out 16, payload
 * hot in cache): clone 79 ns and copy 64 ns at 1500 bytes, clone 115 ns
 * and copy 156 ns at 8000 bytes; the break-even is near 3 kB. The relay
 * clones at every size: below the cutoff a copy would save ~15 ns per
 * output (less once payloads come cold from the NIC), but it multiplies
 * the frame's memory and memory traffic by the fan-out while the repair
 * cache holds the frame; above it the clone wins by a growing margin. One
 * method keeps one payload shared by fan-out, cache and repairs, with
 * zero payload copies.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include <rte_common.h>
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_ip.h>
#include <rte_udp.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_malloc.h>
#include <rte_mbuf.h>
#include <rte_ring.h>
#include <rte_telemetry.h>

#include "bfpatch.h"
#include "auth.h"
#include "events.h"
#include "proto.h"

#define BURST 32
#define MAX_PORTS 8
#define MAX_SUBS 64
#define NACK_MEMO_BITS 14
#define NACK_MEMO (1u << NACK_MEMO_BITS)
#define MAX_LCORES 64
#define HDR_ROOM 128
#define OUT_POOL_N 16383u /* header and clone mbufs: one of each per output queued */

static volatile sig_atomic_t force_quit, dump_stats;

static void on_signal(int sig)
{
	(void)sig;
	force_quit = 1;
}

static void on_usr1(int sig)
{
	(void)sig;
	dump_stats = 1;
}

typedef struct relay relay;
static void print_stats(const relay *r, FILE *f);

/* ---- configuration ---- */

typedef struct sub_conf {
	uint32_t ip;
	uint16_t port;       /* UDP data port of the subscriber */
	uint16_t eth_port;
	uint8_t mac[6];
	int has_mac;
	uint64_t rate_bps;   /* bits per second, 0 = the default */
} sub_conf;

typedef struct relay_conf {
	uint32_t ip[MAX_PORTS];       /* per DPDK port, host order */
	uint8_t prefix[MAX_PORTS];    /* its subnet's prefix length; 0: every
				       * address is on the link */
	uint32_t gateway[MAX_PORTS];  /* next hop off the subnet; 0: none */
	unsigned n_ip;
	uint16_t data_port, control_port;
	sub_conf subs[MAX_SUBS];
	unsigned n_subs;
	uint32_t upstream_ip;
	uint16_t upstream_port;       /* upstream control port */
	uint64_t cache_bytes;
	uint32_t cache_versions;
	int cache_bytes_given;         /* --cache-bytes on the command line */
	int n_mbufs_given;             /* --mbufs on the command line */
	uint64_t default_rate_bps;
	uint32_t queue_len;
	uint32_t max_per_host;        /* subscriptions one address may JOIN;
				       * 0: no limit */
	uint32_t nack_rate;           /* frames a subscriber's NACKs may ask for
				       * per second; 0: unlimited */
	uint32_t heartbeat_timeout_s;
	int check_crc;
	int copy_fanout;              /* measurement only: copy payloads */
	const char *events_path;      /* --events */
	const char *name;             /* --name */
	const char *key_paths[RP_AUTH_MAX_KEYS]; /* --key */
	unsigned n_keys;
	uint32_t mbuf_size;
	uint32_t n_mbufs;
	double run_time_s;            /* 0: until a signal */
} relay_conf;

/* ---- state ---- */

/* Where a subscriber's MAC came from: the latest JOIN is followed (an
 * ARP reply for a shared next hop must not replace it), an ARP answer is
 * asked again now and then, a configured one stays. */
enum { MAC_NONE, MAC_ARP, MAC_JOIN, MAC_CONF };

typedef struct sub {
	int used, is_static;
	int mac_from;                 /* MAC_*; MAC_NONE: not known yet */
	uint32_t ip;
	uint16_t data_port, ctl_port, eth_port;
	uint8_t mac[6];
	uint64_t model_id;            /* 0: every model */
	uint32_t join_version;        /* its latest JOIN's (NONE: it asks for a
					 keyframe stream; RELAY: a relay) */
	rp_bucket bucket;
	rp_bucket nack_bucket;        /* frames its NACKs may still ask for */
	struct rte_ring *q;
	struct rte_mbuf *held;        /* dequeued, waiting for tokens */
	uint64_t last_seen;
	uint64_t tx_pkts, tx_bytes, drops;
} sub;

/* Counters: one cache-aligned block per lcore, written by that lcore only,
 * summed by readers (telemetry, exit). */
enum {
	C_RX, C_TX, C_FANOUT, C_RING_FULL, C_INBOUND_FULL, C_NO_MBUF, C_NO_MAC,
	C_CACHE_HIT, C_CACHE_MISS, C_NACK_RX, C_NACK_FWD, C_NACK_REFUSED,
	C_JOIN, C_LEAVE, C_EXPIRED, C_CTL_BAD, C_CACHE_STORED, C_TX_FAIL,
	C_NACK_SUPPRESSED, C_AUTH_FAIL, C_NACK_LIMITED, C_BAD_VERSION, C_NACK_UNASKED,
	C_SHARE_FULL, C_CACHE_REPLACED, C_JOIN_REFUSED, C_RX_RESERVE,
	C_COUNT
};
static const char *const cnames[C_COUNT] = {
	"rx", "tx", "fanout_copies", "drop_queue_full", "drop_inbound_full",
	"drop_no_mbuf", "drop_no_mac", "cache_hits", "cache_misses", "nacks",
	"nacks_forwarded", "nacks_refused", "joins", "leaves", "expired",
	"drop_control", "cache_stored", "tx_failed", "nack_suppressed", "drop_auth",
	"nack_frames_limited", "drop_bad_version", "nack_frames_unasked", "drop_share_full",
	"cache_replaced", "joins_refused", "drop_rx_reserve",
};

typedef struct lcore_stats {
	uint64_t c[C_COUNT];
	uint64_t cls[RP_CLASS_COUNT];
} __rte_cache_aligned lcore_stats;

typedef struct relay {
	relay_conf cf;
	rp_addrs addrs;
	uint16_t n_ports;
	struct rte_ether_addr mac[MAX_PORTS];
	uint8_t csum_offload[MAX_PORTS]; /* port computes IPv4/UDP checksums */
	struct rte_mempool *pool, *hdr_pool, *clone_pool;
	struct rte_ring *inbound;
	struct rte_eth_dev_tx_buffer *txb[MAX_PORTS];
	unsigned n_workers;
	unsigned worker_q[MAX_LCORES];  /* RX queue of each worker lcore */
	uint16_t n_rxq;
	unsigned rx_reserve;     /* RX mbufs paced queues leave free */
	unsigned q_share;        /* outputs one subscriber may hold queued (0: not
				  * counted yet; recounted like rx_short) */
	int rx_short;            /* fewer free than that (-1: not counted yet):
				  * counted at most once per frame fanned out
				  * or NACK answered, and only if an output is
				  * queued; its outputs share one RX mbuf, and
				  * counting walks every lcore's pool cache */
	sub subs[MAX_SUBS];
	rp_cache cache;
	rp_cache_entry *cache_ring;
	uint32_t *cache_hash;
	uint8_t upstream_mac[6];
	uint16_t up_port;        /* the port the upstream is reached through */
	int upstream_has_mac;
	unsigned upstream_arp_age;
	int want_key;            /* a subscriber JOINed with RP_VERSION_NONE */
	events ev;               /* JSON-lines event log (core lcore only) */
	rp_auth auth;            /* --key: its keys are read by every RX lcore
				  * (data frames), its control-message state
				  * used by the core lcore only */
	/* --events: the (model, version)s whose first frame was logged last,
	 * 16 of them (a ring; [ev_at - 1] the newest) */
	struct {
		uint64_t model;
		uint32_t version;
	} ev_seen[16];
	unsigned ev_at;
	/* per model, the newest version heard of (frames, HEARTBEATs), told
	 * to subscribers once a second */
	struct model_latest {
		uint64_t id, t;  /* t: TSC of the last news, 0 = free */
		uint32_t version;
	} latest[RP_CACHE_MODELS];
	unsigned latest_hint;    /* the entry noted last */
	/* frames asked of upstream lately (NACK suppression), direct-mapped */
	struct nack_memo {
		uint64_t model, t;
		uint32_t version, index;
	} memo[NACK_MEMO];
	unsigned hk_rounds;             /* housekeeping rounds so far */
	uint16_t ip_id;
	uint64_t hz;
	lcore_stats stats[MAX_LCORES];
} relay;

static relay *R; /* for the telemetry callbacks only; set once in main */

/* ---- helpers ---- */

static uint64_t sum_counter(const relay *r, int k)
{
	uint64_t s = 0;
	for (unsigned l = 0; l < MAX_LCORES; l++)
		s += r->stats[l].c[k];
	return s;
}

static uint64_t sum_class(const relay *r, int k)
{
	uint64_t s = 0;
	for (unsigned l = 0; l < MAX_LCORES; l++)
		s += r->stats[l].cls[k];
	return s;
}

static void mbuf_drop(void *ctx, void *obj)
{
	(void)ctx;
	rte_pktmbuf_free(obj);
}

static int ip_parse(const char *s, uint32_t *out)
{
	struct in_addr a;
	if (inet_pton(AF_INET, s, &a) != 1)
		return -1;
	*out = ntohl(a.s_addr);
	return 0;
}

/* News of model m at version v: a frame (newer only), or a HEARTBEAT of
 * the upstream, which knows (set, so a publisher that started over at
 * lower versions is followed). Model 0 (an upstream relay built before
 * per-model HEARTBEATs): every model known. A model beyond those tracked
 * takes the slot with the oldest news. Called for every frame relayed: a
 * frame of the version last noted, the usual case, is no news. */
static void latest_note(relay *r, uint64_t m, uint32_t v, int set)
{
	const struct model_latest *h = &r->latest[r->latest_hint];
	if (!set && m && h->t && h->id == m && v <= h->version)
		return;
	uint64_t now = rte_get_tsc_cycles();
	struct model_latest *slot = NULL, *oldest = &r->latest[0];
	for (unsigned i = 0; i < RP_CACHE_MODELS; i++) {
		struct model_latest *l = &r->latest[i];
		if (l->t && (m == 0 || l->id == m)) {
			if (set || v > l->version)
				l->version = v;
			l->t = now;
			slot = l;
		}
		if (l->t < oldest->t)
			oldest = l;
	}
	if (!slot && m) {
		*oldest = (struct model_latest){.id = m, .t = now, .version = v};
		slot = oldest;
	}
	if (slot)
		r->latest_hint = (unsigned)(slot - r->latest);
}

static const char *ip_str(uint32_t ip, char *buf)
{
	struct in_addr a = {.s_addr = htonl(ip)};
	inet_ntop(AF_INET, &a, buf, INET_ADDRSTRLEN);
	return buf;
}

static struct rte_mbuf *ctl_packet(relay *r, uint16_t port, const uint8_t dmac[6],
				   uint32_t dip, uint16_t dport, const rp_ctl *c,
				   lcore_stats *st)
{
	uint8_t msg[RP_CTL_HDR + 8 * RP_NACK_MAX + 4 + RP_AUTH_LEN];
	size_t n = rp_auth_ctl_build(&r->auth, msg, sizeof(msg), c); /* signed with --key */
	struct rte_mbuf *m = rte_pktmbuf_alloc(r->pool);
	if (!m || n == 0) {
		st->c[C_NO_MBUF]++;
		rte_pktmbuf_free(m);
		return NULL;
	}
	uint8_t *p = (uint8_t *)rte_pktmbuf_append(m, (uint16_t)(RP_HDRS + n));
	memcpy(p + RP_HDRS, msg, n);
	rp_build_udp(p, dmac, r->mac[port].addr_bytes, r->cf.ip[port], dip,
		     r->cf.control_port, dport, (uint16_t)n, rp_sum(msg, n, 0), r->ip_id++);
	m->port = port;
	return m;
}

/* Buffer m for transmit on port (core lcore only); failures are counted
 * by the buffer's error callback. */
static void send_now(relay *r, uint16_t port, struct rte_mbuf *m, lcore_stats *st)
{
	if (!m)
		return;
	st->c[C_TX]++;
	rte_eth_tx_buffer(port, 0, r->txb[port], m);
}

/* The netmask of a prefix length, host order (0: every address). */
static uint32_t prefix_mask(unsigned len)
{
	return len ? ~0u << (32 - len) : 0;
}

/* The address whose MAC frames to ip leave port with: ip itself on the
 * port's subnet (or with no gateway), else the port's gateway. */
static uint32_t next_hop(const relay *r, uint16_t port, uint32_t ip)
{
	uint32_t mask = prefix_mask(r->cf.prefix[port]);
	if (!r->cf.gateway[port] || ((ip ^ r->cf.ip[port]) & mask) == 0)
		return ip;
	return r->cf.gateway[port];
}

/* Ask for the MAC of the next hop towards ip (on_arp_reply keeps it). */
static void arp_request(relay *r, uint16_t port, uint32_t ip, lcore_stats *st)
{
	ip = next_hop(r, port, ip);

	struct rte_mbuf *m = rte_pktmbuf_alloc(r->pool);
	if (!m) {
		st->c[C_NO_MBUF]++;
		return;
	}
	uint8_t *p = (uint8_t *)rte_pktmbuf_append(m, 60);
	memset(p, 0, 60);
	rp_arp_request(p, r->mac[port].addr_bytes, r->cf.ip[port], ip);
	send_now(r, port, m, st);
}

/* ---- subscribers ---- */

static sub *sub_find(relay *r, uint32_t ip, uint16_t data_port)
{
	for (unsigned i = 0; i < MAX_SUBS; i++)
		if (r->subs[i].used && r->subs[i].ip == ip && r->subs[i].data_port == data_port)
			return &r->subs[i];
	return NULL;
}

static sub *sub_by_control(relay *r, uint32_t ip, uint16_t ctl_port)
{
	for (unsigned i = 0; i < MAX_SUBS; i++)
		if (r->subs[i].used && r->subs[i].ip == ip && r->subs[i].ctl_port == ctl_port)
			return &r->subs[i];
	return NULL;
}

static void sub_flush(sub *s)
{
	struct rte_mbuf *m;
	rte_pktmbuf_free(s->held);
	s->held = NULL;
	while (rte_ring_dequeue(s->q, (void **)&m) == 0)
		rte_pktmbuf_free(m);
}

static sub *sub_add(relay *r, uint32_t ip, uint16_t data_port, uint16_t eth_port,
		    uint64_t rate_bps, lcore_stats *st)
{
	sub *s = sub_find(r, ip, data_port);
	int fresh = !s;
	if (!s) {
		for (unsigned i = 0; i < MAX_SUBS && !s; i++)
			if (!r->subs[i].used)
				s = &r->subs[i];
		if (!s)
			return NULL;
		struct rte_ring *q = s->q;
		memset(s, 0, sizeof(*s));
		s->q = q;
		s->used = 1;
		s->ip = ip;
		s->data_port = data_port;
		s->eth_port = eth_port;
		/* a full NACK answer at once, then --nack-rate frames a second */
		rp_bucket_init(&s->nack_bucket, r->cf.nack_rate, RP_NACK_ANSWER_MAX,
			       rte_get_tsc_cycles());
		rp_bucket_fill(&s->nack_bucket, r->hz);
		arp_request(r, eth_port, ip, st);
		char a[INET_ADDRSTRLEN];
		events_emit(&r->ev, "subscriber", "\"peer\":\"%s:%u\",\"rate_bps\":%" PRIu64,
			    ip_str(ip, a), data_port, rate_bps);
	}
	uint64_t rate = rate_bps ? rate_bps : r->cf.default_rate_bps;
	/* burst: 2 ms at the rate, at least 64 kB, so short bursts pass; a
	 * JOIN (every second) of a subscriber already paced at that rate, or
	 * of a static one (its configured rate stands), keeps its bucket */
	uint64_t burst = rate / 8 / 500 > 65536 ? rate / 8 / 500 : 65536;
	if (fresh || (!s->is_static && s->bucket.rate != (rate + 7) / 8))
		rp_bucket_init(&s->bucket, (rate + 7) / 8, burst, rte_get_tsc_cycles());
	s->last_seen = rte_get_tsc_cycles();
	return s;
}

static void sub_remove(sub *s)
{
	sub_flush(s);
	s->used = 0;
}

/* On a port with checksum offload, leave the IPv4 and UDP checksums of the
 * header at the start of m to the NIC. */
static void offload_csum(relay *r, struct rte_mbuf *m, uint16_t port)
{
	if (!r->csum_offload[port])
		return;
	struct rte_ipv4_hdr *ip = rte_pktmbuf_mtod_offset(m, struct rte_ipv4_hdr *, RP_ETH_LEN);
	struct rte_udp_hdr *udp = rte_pktmbuf_mtod_offset(m, struct rte_udp_hdr *,
							  RP_ETH_LEN + RP_IP_LEN);
	m->l2_len = RP_ETH_LEN;
	m->l3_len = RP_IP_LEN;
	m->ol_flags |= RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM | RTE_MBUF_F_TX_UDP_CKSUM;
	ip->hdr_checksum = 0;
	udp->dgram_cksum = rte_ipv4_phdr_cksum(ip, m->ol_flags);
}

/* Hand one output to s: straight to the TX buffer when s is unpaced and
 * has nothing waiting, else into its queue (full: dropped, counted). */
static void deliver(relay *r, sub *s, struct rte_mbuf *out, lcore_stats *st)
{
	if (s->bucket.rate == 0 && !s->held && rte_ring_empty(s->q)) {
		st->c[C_FANOUT]++;
		s->tx_pkts++;
		s->tx_bytes += rte_pktmbuf_pkt_len(out);
		send_now(r, s->eth_port, out, st);
		return;
	}
	/* a queued output holds its frame's RX mbuf: slow subscribers must
	 * not take the mbufs the ports receive with, or one of them would
	 * stop the relay for everyone (JOINs and ARP included) */
	if (r->rx_short < 0)
		r->rx_short = rte_mempool_avail_count(r->pool) < r->rx_reserve;
	/* each queued output also holds a header mbuf and a clone: a
	 * subscriber may hold its share of those pools, two shares staying
	 * for the unpaced ones and NACK answers, or a few slow subscribers
	 * would take them all and starve the rest (PROTOCOL.md 3) */
	if (!r->q_share) {
		unsigned n = 0;
		for (unsigned i = 0; i < MAX_SUBS; i++)
			n += r->subs[i].used != 0;
		r->q_share = OUT_POOL_N / (n + 2);
	}
	if (rte_ring_count(s->q) >= r->q_share) {
		rte_pktmbuf_free(out);
		st->c[C_SHARE_FULL]++;
		s->drops++;
		return;
	}
	if (r->rx_short) { /* it would take the RX mbufs the ports receive with */
		rte_pktmbuf_free(out);
		st->c[C_RX_RESERVE]++;
		s->drops++;
		return;
	}
	if (rte_ring_enqueue(s->q, out) != 0) {
		rte_pktmbuf_free(out);
		st->c[C_RING_FULL]++;
		s->drops++;
		return;
	}
	st->c[C_FANOUT]++;
}

/* A payload copy per output: the method not taken, kept for
 * bench_relay.sh (--copy-fanout). */
static struct rte_mbuf *output_copy(relay *r, sub *s, struct rte_mbuf *f,
				    uint32_t payload_sum)
{
	struct rte_mbuf *m = rte_pktmbuf_alloc(r->pool);
	uint16_t fl = (uint16_t)rte_pktmbuf_pkt_len(f);
	uint8_t *p = m ? (uint8_t *)rte_pktmbuf_append(m, (uint16_t)(RP_HDRS + fl)) : NULL;
	if (!p) {
		rte_pktmbuf_free(m);
		return NULL;
	}
	rp_build_udp(p, s->mac, r->mac[s->eth_port].addr_bytes, r->cf.ip[s->eth_port], s->ip,
		     r->cf.data_port, s->data_port, fl, payload_sum, r->ip_id++);
	memcpy(p + RP_HDRS, rte_pktmbuf_mtod(f, const void *), fl);
	offload_csum(r, m, s->eth_port);
	return m;
}

/* The fan-out method: a header mbuf for s chained to a clone of f. */
static struct rte_mbuf *output_clone(relay *r, sub *s, struct rte_mbuf *f,
				     uint32_t payload_sum)
{
	struct rte_mbuf *h = rte_pktmbuf_alloc(r->hdr_pool);
	struct rte_mbuf *c = h ? rte_pktmbuf_clone(f, r->clone_pool) : NULL;
	if (!c) {
		rte_pktmbuf_free(h);
		return NULL;
	}
	uint8_t *p = (uint8_t *)rte_pktmbuf_append(h, RP_HDRS);
	rp_build_udp(p, s->mac, r->mac[s->eth_port].addr_bytes, r->cf.ip[s->eth_port], s->ip,
		     r->cf.data_port, s->data_port, (uint16_t)rte_pktmbuf_pkt_len(f), payload_sum,
		     r->ip_id++);
	if (rte_pktmbuf_chain(h, c) != 0) {
		rte_pktmbuf_free(h);
		rte_pktmbuf_free(c);
		return NULL;
	}
	offload_csum(r, h, s->eth_port);
	return h;
}

/* One output of frame f (payload only, sum precomputed) for s. */
static void emit(relay *r, sub *s, struct rte_mbuf *f, uint32_t payload_sum,
		 lcore_stats *st)
{
	if (s->mac_from == MAC_NONE) {
		st->c[C_NO_MAC]++;
		return;
	}
	struct rte_mbuf *out = r->cf.copy_fanout ? output_copy(r, s, f, payload_sum)
						 : output_clone(r, s, f, payload_sum);
	if (!out) {
		st->c[C_NO_MBUF]++;
		s->drops++;
		return;
	}
	deliver(r, s, out, st);
}

/* ---- core lcore: control, fan-out, cache, pacing ---- */

/* The cache keeps keyframe-stream frames apart from the patch frames of
 * the same version: they share (version, index) but not the model key. */
static uint64_t cache_model(uint64_t model, int key)
{
	return key ? model ^ 0x8000000000000000ull : model;
}

/* A frame whose (model, version, index) is cached with another target
 * hash (FORMAT.md 2.1; not merely another CRC: a NACK answer carries the
 * frame count its streamed copy left 0) and whose own CRC holds: its
 * publisher started over and made this version again (a trainer resumed
 * from an earlier checkpoint), so every cached frame of the version is of
 * the old run and would answer NACKs with frames that fail their hash
 * checks. They are dropped; the new frames are cached as they come. */
static void cache_check_remade(relay *r, uint64_t cm, uint32_t version, uint32_t index,
			       const uint8_t *f, size_t len, lcore_stats *st)
{
	struct rte_mbuf *old = rp_cache_get(&r->cache, cm, version, index);
	bfp_frame_header h;
	size_t flen;
	if (!old || !memcmp(rte_pktmbuf_mtod(old, const uint8_t *) + 48, f + 48, 8) ||
	    bfp_frame_length(f, len, &flen) != BFP_OK || bfp_frame_parse(f, flen, &h) != BFP_OK)
		return;
	uint32_t n = rp_cache_drop_version(&r->cache, cm, version, mbuf_drop, NULL);
	st->c[C_CACHE_REPLACED] += n;
	events_emit(&r->ev, "cache_replaced", "\"version\":%u,\"frames\":%u", version, n);
}

/* --events: a frame of a (model, version) not among the 16 logged last
 * logs first_frame (a version older than the newest too: a publisher
 * that started over, or another model at lower versions). */
static void note_first_frame(relay *r, uint64_t model, uint32_t version)
{
	const unsigned n = sizeof(r->ev_seen) / sizeof(r->ev_seen[0]);
	const unsigned last = (r->ev_at + n - 1) % n;
	if (r->ev_seen[last].model == model && r->ev_seen[last].version == version)
		return; /* the usual case: the version just logged */
	for (unsigned i = 0; i < n; i++)
		if (r->ev_seen[i].model == model && r->ev_seen[i].version == version &&
		    (model || version))
			return;
	r->ev_seen[r->ev_at].model = model;
	r->ev_seen[r->ev_at].version = version;
	r->ev_at = (r->ev_at + 1) % n;
	events_emit(&r->ev, "first_frame", "\"version\":%u,\"model\":\"%016" PRIx64 "\"", version,
		    model);
}

static void on_data(relay *r, struct rte_mbuf *m, uint16_t l4_len, lcore_stats *st)
{
	/* keep only the frame: strip headers and any Ethernet padding */
	rte_pktmbuf_adj(m, RP_HDRS);
	rte_pktmbuf_trim(m, (uint16_t)(rte_pktmbuf_pkt_len(m) - l4_len));
	const uint8_t *f = rte_pktmbuf_mtod(m, const uint8_t *);
	/* with --key, rx_classify has checked its signature */
	uint64_t model = 0;
	uint32_t version = 0, index = 0;
	for (int b = 7; b >= 0; b--) /* FORMAT.md 2.1, little-endian fields */
		model = (model << 8) | f[8 + b];
	for (int b = 3; b >= 0; b--) {
		version = (version << 8) | f[20 + b];
		index = (index << 8) | f[24 + b];
	}
	if (version >= RP_VERSION_NONE) {
		/* the control protocol's reserved values are never a version:
		 * believed, HEARTBEATs would name them and the cache window
		 * would turn away every real frame */
		st->c[C_BAD_VERSION]++;
		rte_pktmbuf_free(m);
		return;
	}
	uint32_t sum = m->hash.fdir.hi;
	if (model) /* 0 stands for every model in latest_note() */
		latest_note(r, model, version, 0);
	if (r->ev.fd >= 0)
		note_first_frame(r, model, version);
	r->rx_short = -1;
	r->q_share = 0;
	/* a frame of a keyframe stream, not of a patch (FORMAT.md 2.1): not
	 * to a subscriber that holds its version or a later one (one
	 * subscriber's JOIN with version NONE must not send the whole model
	 * to every other); to those that asked (NONE), relays, static
	 * subscribers and those behind it */
	const int key = !bfp_encoding_is_delta(f[5]) && !(f[6] & BFP_FLAG_IN_PATCH);
	for (unsigned i = 0; i < MAX_SUBS; i++) {
		sub *s = &r->subs[i];
		if (s->used && (s->model_id == 0 || s->model_id == model) &&
		    (!key || s->is_static || s->join_version >= RP_VERSION_NONE ||
		     s->join_version < version))
			emit(r, s, m, sum, st);
	}
	/* the cache holds its own reference, released on eviction */
	rte_mbuf_refcnt_update(m, 1);
	uint64_t cm = cache_model(model, key);
	cache_check_remade(r, cm, version, index, f, l4_len, st);
	int put = rp_cache_put(&r->cache, cm, version, index, l4_len, m, mbuf_drop, NULL);
	if (put == 1)
		st->c[C_CACHE_STORED]++;
	else
		rte_mbuf_refcnt_update(m, -1);
	rte_pktmbuf_free(m);
}

/* A frame asked of upstream in the last 200 ms is not asked again: the
 * answer to the first NACK comes back to every subscriber anyway, so
 * subscribers that lost the same frames (a drop on the relay's own link)
 * cost one upstream request, not one each. */
static int nack_recent(relay *r, uint64_t model, uint32_t version, uint32_t index, uint64_t now)
{
	uint64_t h = (model ^ ((uint64_t)version << 32 | index)) * 0x9E3779B97F4A7C15ull;
	struct nack_memo *e = &r->memo[h >> (64 - NACK_MEMO_BITS)];
	if (e->model == model && e->version == version && e->index == index && e->t &&
	    now - e->t < r->hz / 5)
		return 1;
	e->model = model;
	e->version = version;
	e->index = index;
	e->t = now;
	return 0;
}

static void forward_nack(relay *r, const rp_ctl *want, lcore_stats *st)
{
	if (!r->cf.upstream_ip)
		return;
	if (!r->upstream_has_mac) {
		st->c[C_NO_MAC]++;
		return;
	}
	struct rte_mbuf *m = ctl_packet(r, r->up_port, r->upstream_mac, r->cf.upstream_ip,
					r->cf.upstream_port, want, st);
	send_now(r, r->up_port, m, st);
	st->c[C_NACK_FWD]++;
}

/* Whether ip may JOIN one more subscription (--max-per-host): without
 * keys anyone can JOIN, and one host's JOINs from many ports would
 * otherwise take the whole table. Static subscribers do not count. */
static int join_room(const relay *r, uint32_t ip)
{
	uint32_t n = 0;
	for (unsigned i = 0; i < MAX_SUBS; i++)
		n += r->subs[i].used && !r->subs[i].is_static && r->subs[i].ip == ip;
	return !r->cf.max_per_host || n < r->cf.max_per_host;
}

static void on_control(relay *r, struct rte_mbuf *m, const rp_pkt *k, lcore_stats *st)
{
	rp_ctl c;
	const uint8_t *p = rte_pktmbuf_mtod(m, const uint8_t *) + k->l4_off;
	size_t len = k->l4_len;
	/* with --key: signed by a key holder, fresh, not seen before */
	if (rp_auth_accept(&r->auth, p, len, 1, &len) != RP_AUTH_OK) {
		st->c[C_AUTH_FAIL]++;
		return;
	}
	if (rp_ctl_parse(p, len, &c) != 0) {
		st->c[C_CTL_BAD]++;
		return;
	}
	sub *s;
	switch (c.type) {
	case RP_JOIN:
		if ((r->cf.upstream_ip && k->src_ip == r->cf.upstream_ip) ||
		    k->src_ip == r->cf.ip[m->port]) {
			/* frames sent to the relay's own source would come back
			 * round (a forged JOIN naming the upstream: a loop) */
			st->c[C_CTL_BAD]++;
			return;
		}
		/* a repeated JOIN from the same control port updates that
		 * subscription, its data port too (PROTOCOL.md 2.1): one
		 * subscriber, not one more per data port it has used */
		s = sub_by_control(r, k->src_ip, k->src_port);
		if (s && !s->is_static && s->data_port != c.data_port &&
		    !sub_find(r, k->src_ip, c.data_port)) {
			sub_flush(s); /* queued for the old port */
			s->data_port = c.data_port;
		}
		if (!sub_find(r, k->src_ip, c.data_port) && !join_room(r, k->src_ip)) {
			/* a new subscription (one moved above is not) */
			st->c[C_JOIN_REFUSED]++;
			return;
		}
		s = sub_add(r, k->src_ip, c.data_port, m->port, (uint64_t)c.rate_kbps * 1000, st);
		if (!s) {
			st->c[C_JOIN_REFUSED]++; /* the table is full */
			return;
		}
		s->ctl_port = k->src_port;
		if (!s->is_static) /* a static subscriber's model is configured */
			s->model_id = c.model_id;
		s->join_version = c.version;
		if (c.version == RP_VERSION_NONE) /* ask upstream for keyframes */
			r->want_key = 1;
		if (s->mac_from != MAC_CONF) {
			/* the JOIN's sender: an actor restarted on another NIC
			 * (same address and ports) is followed */
			memcpy(s->mac, k->src_mac, 6);
			s->mac_from = MAC_JOIN;
		}
		st->c[C_JOIN]++;
		break;
	case RP_LEAVE:
		s = sub_by_control(r, k->src_ip, k->src_port);
		if (s && !s->is_static) {
			sub_remove(s);
			st->c[C_LEAVE]++;
		}
		break;
	case RP_HEARTBEAT:
		if (r->cf.upstream_ip && k->src_ip == r->cf.upstream_ip &&
		    k->src_port == r->cf.upstream_port) {
			if (c.version != RP_VERSION_RELAY && c.version != RP_VERSION_NONE)
				latest_note(r, c.model_id, c.version, 1);
			break;
		}
		s = sub_by_control(r, k->src_ip, k->src_port);
		if (s)
			s->last_seen = rte_get_tsc_cycles();
		break;
	case RP_NACK:
		st->c[C_NACK_RX]++;
		/* answered only to a JOINed subscriber's own address */
		s = sub_by_control(r, k->src_ip, k->src_port);
		if (!s) {
			st->c[C_NACK_REFUSED]++;
			return;
		}
		s->last_seen = rte_get_tsc_cycles();
		rp_ctl miss;
		memset(&miss, 0, sizeof(miss));
		miss.type = RP_NACK;
		miss.model_id = c.model_id;
		miss.version = c.version;
		miss.flags = c.flags;
		uint64_t cmodel = cache_model(c.model_id, c.flags & RP_NACK_KEY);
		uint64_t now = rte_get_tsc_cycles();
		unsigned budget = RP_NACK_ANSWER_MAX;
		r->rx_short = -1;
		r->q_share = 0;
		for (unsigned i = 0; i < c.n_ranges; i++) {
			for (uint32_t j = 0; j < c.ranges[i].count && budget; j++, budget--) {
				uint32_t idx = c.ranges[i].first + j;
				/* one subscriber's NACKs cannot take the relay (or,
				 * through misses, upstream) from the others */
				if (!rp_bucket_take(&s->nack_bucket, 1, now, r->hz)) {
					st->c[C_NACK_LIMITED]++;
					continue;
				}
				struct rte_mbuf *f = rp_cache_get(&r->cache, cmodel, c.version, idx);
				if (f) {
					st->c[C_CACHE_HIT]++;
					emit(r, s, f, f->hash.fdir.hi, st);
					continue;
				}
				st->c[C_CACHE_MISS]++;
				rp_range *last = miss.n_ranges ? &miss.ranges[miss.n_ranges - 1] : NULL;
				const int extends = last && last->first + last->count == idx;
				if (!extends && miss.n_ranges == RP_NACK_MAX) {
					/* no room in this NACK upstream: not marked as
					 * asked, so the subscriber's next NACK asks */
					st->c[C_NACK_UNASKED]++;
					continue;
				}
				if (nack_recent(r, cmodel, c.version, idx, now)) {
					st->c[C_NACK_SUPPRESSED]++;
					continue;
				}
				if (extends)
					last->count++;
				else
					miss.ranges[miss.n_ranges++] = (rp_range){idx, 1};
			}
		}
		if (miss.n_ranges)
			forward_nack(r, &miss, st);
		break;
	}
}

static void on_arp_reply(relay *r, const rp_pkt *k)
{
	for (unsigned i = 0; i < MAX_SUBS; i++) {
		sub *s = &r->subs[i];
		if (s->used && next_hop(r, s->eth_port, s->ip) == k->src_ip &&
		    (s->mac_from == MAC_NONE || s->mac_from == MAC_ARP)) {
			memcpy(s->mac, k->src_mac, 6);
			s->mac_from = MAC_ARP;
		}
	}
	if (r->cf.upstream_ip && next_hop(r, r->up_port, r->cf.upstream_ip) == k->src_ip) {
		memcpy(r->upstream_mac, k->src_mac, 6);
		r->upstream_has_mac = 1;
	}
}

/* Classify on the receiving lcore; drops are counted and freed there, so
 * garbage never reaches the core lcore. Keeps the class and UDP payload
 * length in the mbuf (hash.usr) for the core. Returns 0 if consumed. */
static int rx_classify(relay *r, struct rte_mbuf *m, lcore_stats *st)
{
	rp_pkt k;
	rp_class cls = RP_DROP_SHORT;
	if (m->nb_segs == 1)
		cls = rp_classify(rte_pktmbuf_mtod(m, const uint8_t *), rte_pktmbuf_data_len(m),
				  &r->addrs, &k);
	st->cls[cls]++;
	if (cls < RP_ARP_REQUEST || cls == RP_DROP_ARP) {
		rte_pktmbuf_free(m);
		return 0;
	}
	/* --key: a data frame's signature is checked here, on the lcore that
	 * received it, so that verifying scales with the worker lcores (it
	 * is the keyed relay's largest per-frame cost; bench_relay.sh).
	 * Frames carry no time, so this reads only the keys; control
	 * messages, whose freshness and replay state the core lcore keeps,
	 * are checked there (on_control). */
	size_t flen;
	if (cls == RP_DATA && r->auth.n_keys &&
	    rp_auth_open(&r->auth, rte_pktmbuf_mtod(m, const uint8_t *) + k.l4_off, k.l4_len, 0,
			 0, &flen) != RP_AUTH_OK) {
		st->c[C_AUTH_FAIL]++; /* forged or tampered: not relayed */
		rte_pktmbuf_free(m);
		return 0;
	}
	m->hash.usr = (uint32_t)cls << 16 | k.l4_len;
	m->hash.fdir.hi = k.payload_sum; /* kept while the frame is cached */
	return 1;
}

/* Handle one packet that rx_classify() kept; consumes m. */
static void core_packet(relay *r, struct rte_mbuf *m, lcore_stats *st)
{
	rp_pkt k;
	rp_class cls = (rp_class)(m->hash.usr >> 16);
	if (cls == RP_DATA) {
		on_data(r, m, (uint16_t)m->hash.usr, st);
		return;
	}
	/* control path: parse again for the addresses */
	rp_classify(rte_pktmbuf_mtod(m, const uint8_t *), rte_pktmbuf_data_len(m), &r->addrs, &k);
	switch (cls) {
	case RP_CONTROL:
		on_control(r, m, &k, st);
		break;
	case RP_ARP_REQUEST:
		if (rp_arp_reply_inplace(rte_pktmbuf_mtod(m, uint8_t *), rte_pktmbuf_data_len(m),
					 r->mac[m->port].addr_bytes) == 0) {
			send_now(r, m->port, m, st);
			return;
		}
		break;
	case RP_ARP_REPLY:
		on_arp_reply(r, &k);
		break;
	default:
		break;
	}
	rte_pktmbuf_free(m);
}

static void pace(relay *r, lcore_stats *st)
{
	uint64_t now = rte_get_tsc_cycles();
	for (unsigned i = 0; i < MAX_SUBS; i++) {
		sub *s = &r->subs[i];
		if (!s->used)
			continue;
		for (unsigned n = 0; n < BURST; n++) {
			if (!s->held && rte_ring_dequeue(s->q, (void **)&s->held) != 0)
				break;
			uint32_t len = rte_pktmbuf_pkt_len(s->held);
			if (!rp_bucket_take(&s->bucket, len, now, r->hz))
				break;
			s->tx_pkts++;
			s->tx_bytes += len;
			send_now(r, s->eth_port, s->held, st);
			s->held = NULL;
		}
	}
}

static void housekeeping(relay *r, lcore_stats *st)
{
	r->hk_rounds++;
	uint64_t now = rte_get_tsc_cycles();
	uint64_t timeout = (uint64_t)r->cf.heartbeat_timeout_s * r->hz;
	for (unsigned i = 0; i < MAX_SUBS; i++) {
		sub *s = &r->subs[i];
		if (s->used && !s->is_static && now - s->last_seen > timeout) {
			sub_remove(s);
			st->c[C_EXPIRED]++;
		}
	}
	/* a subscriber still without a MAC (its first ARP lost, its host not
	 * up yet): ask again every second; one whose MAC an ARP answered:
	 * every 10 s, as next hops change (a replaced NIC, a router failover) */
	for (unsigned i = 0; i < MAX_SUBS; i++) {
		const sub *s = &r->subs[i];
		if (s->used && (s->mac_from == MAC_NONE ||
				(s->mac_from == MAC_ARP && r->hk_rounds % 10 == 0)))
			arp_request(r, s->eth_port, s->ip, st);
	}
	/* announce our addresses (gratuitous ARP) for the first 3 s: a relay
	 * restarted on another NIC or tap has another MAC, and neighbours
	 * would keep sending to the old one until their entries expire */
	if (r->hk_rounds <= 3)
		for (uint16_t p = 0; p < r->n_ports; p++)
			arp_request(r, p, r->cf.ip[p], st);
	/* tell each subscriber the newest version of its model, or of every
	 * model for one that JOINed for all (PROTOCOL.md 2.3) */
	for (unsigned i = 0; i < MAX_SUBS; i++) {
		sub *s = &r->subs[i];
		if (!s->used || s->mac_from == MAC_NONE || !s->ctl_port)
			continue;
		for (unsigned k = 0; k < RP_CACHE_MODELS; k++) {
			const struct model_latest *l = &r->latest[k];
			if (!l->t || (s->model_id && s->model_id != l->id))
				continue;
			rp_ctl c;
			memset(&c, 0, sizeof(c));
			c.type = RP_HEARTBEAT;
			c.model_id = l->id;
			c.version = l->version;
			send_now(r, s->eth_port, ctl_packet(r, s->eth_port, s->mac, s->ip,
							    s->ctl_port, &c, st), st);
		}
	}
	if (r->cf.upstream_ip) { /* subscribe to the upstream relay or publisher */
		rp_ctl c;
		memset(&c, 0, sizeof(c));
		c.type = RP_JOIN;
		c.data_port = r->cf.data_port;
		/* a relay: no catch-up stream, unless a subscriber asked for one */
		c.version = r->want_key ? RP_VERSION_NONE : RP_VERSION_RELAY;
		if (r->upstream_has_mac) {
			send_now(r, r->up_port, ctl_packet(r, r->up_port, r->upstream_mac,
							   r->cf.upstream_ip, r->cf.upstream_port,
							   &c, st), st);
			r->want_key = 0; /* asked (kept until a JOIN can go) */
		}
		/* resolve the upstream again: every second for the first 10 s
		 * (while links come up, an early answer can be stale), then
		 * every 10 s, as next hops change */
		if (!r->upstream_has_mac || r->hk_rounds < 10 || ++r->upstream_arp_age >= 10) {
			arp_request(r, r->up_port, r->cf.upstream_ip, st);
			r->upstream_arp_age = 0;
		}
	}
}

static void rx_queue_poll(relay *r, unsigned q, lcore_stats *st, int direct)
{
	struct rte_mbuf *pkts[BURST];
	for (uint16_t port = 0; port < r->n_ports; port++) {
		uint16_t n = rte_eth_rx_burst(port, (uint16_t)q, pkts, BURST);
		st->c[C_RX] += n;
		uint16_t keep = 0;
		for (uint16_t i = 0; i < n; i++)
			if (rx_classify(r, pkts[i], st))
				pkts[keep++] = pkts[i];
		if (direct) {
			for (uint16_t i = 0; i < keep; i++)
				core_packet(r, pkts[i], st);
			continue;
		}
		unsigned done = rte_ring_enqueue_burst(r->inbound, (void **)pkts, keep, NULL);
		st->c[C_INBOUND_FULL] += keep - done;
		for (unsigned i = done; i < keep; i++)
			rte_pktmbuf_free(pkts[i]);
	}
}

static int worker_main(void *arg)
{
	relay *r = arg;
	unsigned lc = rte_lcore_id();
	if (r->worker_q[lc] == UINT_MAX)
		return 0; /* more workers than RX queues */
	while (!force_quit)
		rx_queue_poll(r, r->worker_q[lc], &r->stats[lc], 0);
	return 0;
}

static void core_main(relay *r)
{
	unsigned lc = rte_lcore_id();
	lcore_stats *st = &r->stats[lc];
	uint64_t next_hk = 0, drain = r->hz / 10000 + 1, last_flush = 0;
	uint64_t stop = r->cf.run_time_s > 0
				? rte_get_tsc_cycles() + (uint64_t)(r->cf.run_time_s * (double)r->hz)
				: UINT64_MAX;
	while (!force_quit) {
		uint64_t now = rte_get_tsc_cycles();
		if (now >= stop)
			break;
		if (r->n_workers == 0) {
			rx_queue_poll(r, 0, st, 1);
		} else {
			struct rte_mbuf *pkts[BURST];
			unsigned n = rte_ring_dequeue_burst(r->inbound, (void **)pkts, BURST, NULL);
			for (unsigned i = 0; i < n; i++)
				core_packet(r, pkts[i], st);
		}
		pace(r, st);
		if (now - last_flush > drain) { /* TX drained on a timer */
			for (uint16_t p = 0; p < r->n_ports; p++)
				rte_eth_tx_buffer_flush(p, 0, r->txb[p]);
			last_flush = now;
		}
		if (now >= next_hk) {
			housekeeping(r, st);
			next_hk = now + r->hz; /* once a second */
		}
		if (dump_stats) { /* SIGUSR1: the counters, as at exit */
			dump_stats = 0;
			print_stats(r, stdout);
			fflush(stdout);
		}
	}
	force_quit = 1;
	for (uint16_t p = 0; p < r->n_ports; p++)
		rte_eth_tx_buffer_flush(p, 0, r->txb[p]);
}

static void tx_error_cb(struct rte_mbuf **unsent, uint16_t count, void *userdata)
{
	lcore_stats *st = userdata;
	st->c[C_TX_FAIL] += count;
	st->c[C_TX] -= count;
	for (uint16_t i = 0; i < count; i++)
		rte_pktmbuf_free(unsent[i]);
}

/* ---- telemetry ---- */

static int tel_stats(const char *cmd, const char *params, struct rte_tel_data *d)
{
	(void)cmd;
	(void)params;
	rte_tel_data_start_dict(d);
	for (int k = 0; k < C_COUNT; k++)
		rte_tel_data_add_dict_u64(d, cnames[k], sum_counter(R, k));
	for (int k = 0; k < RP_CLASS_COUNT; k++)
		rte_tel_data_add_dict_u64(d, rp_class_names[k], sum_class(R, k));
	rte_tel_data_add_dict_u64(d, "cache_frames", R->cache.len);
	rte_tel_data_add_dict_u64(d, "cache_bytes", R->cache.bytes);
	return 0;
}

static int tel_subscribers(const char *cmd, const char *params, struct rte_tel_data *d)
{
	(void)cmd;
	(void)params;
	rte_tel_data_start_dict(d);
	int rc = 0;
	for (unsigned i = 0; i < MAX_SUBS; i++) {
		const sub *s = &R->subs[i];
		if (!s->used)
			continue;
		/* telemetry names take letters, digits and '_' (no '.' or ':'):
		 * 198.18.0.21:7500 is 198_18_0_21_7500 */
		static const char *const what[3] = {"packets", "bytes", "drops"};
		const uint64_t val[3] = {s->tx_pkts, s->tx_bytes, s->drops};
		for (int k = 0; k < 3; k++) {
			char name[64];
			snprintf(name, sizeof(name), "%u_%u_%u_%u_%u_%s", s->ip >> 24,
				 (s->ip >> 16) & 0xFF, (s->ip >> 8) & 0xFF, s->ip & 0xFF,
				 s->data_port, what[k]);
			if (rte_tel_data_add_dict_u64(d, name, val[k]) != 0)
				rc = -1;
		}
	}
	return rc;
}

static void print_stats(const relay *r, FILE *f)
{
	char ip[INET_ADDRSTRLEN];
	fprintf(f, "bfpatch-relay counters:\n");
	for (int k = 0; k < C_COUNT; k++)
		fprintf(f, "  %-20s %" PRIu64 "\n", cnames[k], sum_counter(r, k));
	for (int k = 0; k < RP_CLASS_COUNT; k++)
		fprintf(f, "  %-20s %" PRIu64 "\n", rp_class_names[k], sum_class(r, k));
	fprintf(f, "  %-20s %u frames, %" PRIu64 " bytes\n", "cache", r->cache.len, r->cache.bytes);
	for (unsigned i = 0; i < MAX_SUBS; i++) {
		const sub *s = &r->subs[i];
		if (s->used)
			fprintf(f, "  subscriber %s:%u  tx %" PRIu64 " packets, %" PRIu64
				" bytes, drops %" PRIu64 "\n",
				ip_str(s->ip, ip), s->data_port, s->tx_pkts, s->tx_bytes, s->drops);
	}
	fflush(f);
}

/* ---- options ---- */

static const char usage_text[] =
	"usage: bfpatch-relay [EAL options] -- [options]\n"
	"Receives bfpatch frames (UDP/IPv4) and fans them out to subscribers.\n"
	"  -i, --ip PORT:ADDR[/LEN]    IPv4 address of DPDK port PORT, with its\n"
	"                              subnet's prefix length for --gateway\n"
	"                              (repeatable; default 0:198.18.0.1)\n"
	"  -g, --gateway PORT:ADDR     next hop of port PORT towards addresses off\n"
	"                              its subnet (subscribers, --upstream behind a\n"
	"                              router); default: every address is ARPed\n"
	"  -d, --data-port N           UDP port of frames (default 7400)\n"
	"  -c, --control-port N        UDP port of JOIN/LEAVE/NACK/heartbeat (7401)\n"
	"  -s, --subscriber ADDR:PORT[,mac=MAC][,rate=BITS][,eth=N]\n"
	"                              static subscriber (repeatable, up to 64)\n"
	"  -u, --upstream ADDR:PORT    relay or publisher to subscribe to (its\n"
	"                              control port); NACK misses go there\n"
	"  -C, --cache-bytes N         repair cache budget (default 64M; K, M, G:\n"
	"                              KiB, MiB, GiB); the cache also holds at\n"
	"                              most half of the --mbufs the RX rings leave\n"
	"  -K, --cache-versions K      target versions kept (default 2)\n"
	"  -r, --rate BITS             default per-subscriber rate, e.g. 1g, 100m;\n"
	"                              0 = unlimited (default)\n"
	"  -q, --queue N               per-subscriber queue, packets (1024)\n"
	"      --max-per-host N        subscriptions one address may hold by JOINs\n"
	"                              (16; 0 = no limit: the table holds 64)\n"
	"      --nack-rate N           frames one subscriber's NACKs may ask for per\n"
	"                              second, after a first 4096 (65536; 0 = no limit)\n"
	"  -t, --heartbeat-timeout S   drop silent subscribers after S s (10)\n"
	"  -k, --check-crc             verify each frame's CRC32C before relaying\n"
	"  -m, --mbuf-size N           mbuf data room (default 10240: 9000 B frames)\n"
	"  -n, --mbufs N               mbufs in the RX pool (default 8191, more\n"
	"                              with several ports or RX queues), each of\n"
	"                              --mbuf-size; the RX rings take 1024 a queue\n"
	"                              and port, cached frames keep theirs\n"
	"  -T, --run-time S            stop after S seconds (tests)\n"
	"  -A, --key FILE              relay only frames, and accept only control\n"
	"                              messages, signed with a key given; sign our own\n"
	"                              (repeatable: the first signs; docs/SECURITY.md)\n"
	"  -E, --events FILE           append JSON-lines events (docs/EVENTS.md)\n"
	"  -N, --name NAME             this relay's name in the events (relay)\n"
	"      --copy-fanout           copy each output's payload instead of\n"
	"                              cloning it (only to measure the difference)\n"
	"  -h, --help\n";

static int parse_sub(const char *s, sub_conf *sc)
{
	const char *rest;
	memset(sc, 0, sizeof(*sc));
	if (rp_parse_hostport(s, &sc->ip, &sc->port, &rest))
		return -1;
	while (*rest == ',') {
		rest++;
		const char *next = strchr(rest, ',');
		char opt[64];
		size_t n = next ? (size_t)(next - rest) : strlen(rest);
		if (n >= sizeof(opt))
			return -1;
		memcpy(opt, rest, n);
		opt[n] = 0;
		uint64_t v;
		if (!strncmp(opt, "mac=", 4)) {
			if (rp_parse_mac(opt + 4, sc->mac))
				return -1;
			sc->has_mac = 1;
		} else if (!strncmp(opt, "rate=", 5)) {
			if (rp_parse_rate(opt + 5, 400000000000ull, &v))
				return -1;
			sc->rate_bps = v;
		} else if (!strncmp(opt, "eth=", 4)) {
			if (rp_parse_num(opt + 4, 0, MAX_PORTS - 1, &v))
				return -1;
			sc->eth_port = (uint16_t)v;
		} else {
			return -1;
		}
		rest += n;
	}
	return 0;
}

static int bad(const char *opt, const char *val)
{
	fprintf(stderr, "bfpatch-relay: invalid value '%s' for %s\n%s", val ? val : "", opt,
		usage_text);
	return -1;
}

static int parse_args(int argc, char **argv, relay_conf *cf)
{
	static const struct option lo[] = {
		{"ip", required_argument, 0, 'i'}, {"gateway", required_argument, 0, 'g'},
		{"data-port", required_argument, 0, 'd'},
		{"control-port", required_argument, 0, 'c'},
		{"subscriber", required_argument, 0, 's'}, {"upstream", required_argument, 0, 'u'},
		{"cache-bytes", required_argument, 0, 'C'},
		{"cache-versions", required_argument, 0, 'K'}, {"rate", required_argument, 0, 'r'},
		{"queue", required_argument, 0, 'q'},
		{"heartbeat-timeout", required_argument, 0, 't'},
		{"check-crc", no_argument, 0, 'k'}, {"mbuf-size", required_argument, 0, 'm'},
		{"mbufs", required_argument, 0, 'n'}, {"run-time", required_argument, 0, 'T'},
		{"copy-fanout", no_argument, 0, 'P'}, {"events", required_argument, 0, 'E'},
		{"name", required_argument, 0, 'N'}, {"key", required_argument, 0, 'A'},
		{"nack-rate", required_argument, 0, 'L'},
		{"max-per-host", required_argument, 0, 'H'},
		{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	uint64_t v;
	int c;
	memset(cf, 0, sizeof(*cf));
	cf->data_port = 7400;
	cf->control_port = 7401;
	cf->cache_bytes = 64u << 20;
	cf->cache_versions = 2;
	cf->queue_len = 1024;
	cf->nack_rate = 65536;
	cf->max_per_host = 16;
	cf->heartbeat_timeout_s = 10;
	cf->mbuf_size = 10240;
	cf->n_mbufs = 8191;
	optind = 1;
	while ((c = getopt_long(argc, argv, "i:g:d:c:s:u:C:K:r:q:t:km:n:T:E:N:A:h", lo, NULL)) != -1) {
		switch (c) {
		case 'i':
		case 'g': {
			/* cut up a copy: optarg is the process's command line,
			 * which ps shows */
			char whole[64], buf[64];
			snprintf(whole, sizeof(whole), "%s", optarg);
			if (snprintf(buf, sizeof(buf), "%s", optarg) >= (int)sizeof(buf))
				return bad(c == 'i' ? "--ip" : "--gateway", whole);
			char *arg = buf;
			char *colon = strchr(arg, ':'), *slash = strchr(arg, '/');
			uint64_t len = 0;
			uint32_t ip;
			if (slash && (c == 'g' || rp_parse_num(slash + 1, 1, 32, &len)))
				return bad(c == 'i' ? "--ip (prefix length 1..32)" : "--gateway", whole);
			if (slash)
				*slash = 0;
			if (!colon || rp_parse_num((*colon = 0, arg), 0, MAX_PORTS - 1, &v) ||
			    ip_parse(colon + 1, &ip) || !ip)
				return bad(c == 'i' ? "--ip (PORT:A.B.C.D[/LEN])" : "--gateway (PORT:A.B.C.D)",
					   whole);
			if (c == 'g') {
				cf->gateway[v] = ip;
				break;
			}
			cf->ip[v] = ip;
			cf->prefix[v] = (uint8_t)len;
			if (v + 1 > cf->n_ip)
				cf->n_ip = (unsigned)v + 1;
			break;
		}
		case 'd':
			if (rp_parse_num(optarg, 1, 65535, &v))
				return bad("--data-port", optarg);
			cf->data_port = (uint16_t)v;
			break;
		case 'c':
			if (rp_parse_num(optarg, 1, 65535, &v))
				return bad("--control-port", optarg);
			cf->control_port = (uint16_t)v;
			break;
		case 's':
			if (cf->n_subs == MAX_SUBS || parse_sub(optarg, &cf->subs[cf->n_subs]) ||
			    !cf->subs[cf->n_subs].ip || cf->subs[cf->n_subs].ip == 0xFFFFFFFFu)
				return bad("--subscriber (A.B.C.D:PORT[,mac=MAC][,rate=BITS][,eth=N], "
					   "a host's address; rate at least 1k)",
					   optarg);
			for (unsigned i = 0; i < cf->n_subs; i++)
				if (cf->subs[i].ip == cf->subs[cf->n_subs].ip &&
				    cf->subs[i].port == cf->subs[cf->n_subs].port) {
					fprintf(stderr, "bfpatch-relay: --subscriber %s is given twice "
						"(one --subscriber an address and port, with all its "
						"options)\n", optarg);
					return -1;
				}
			cf->n_subs++;
			break;
		case 'u':
			if (rp_parse_hostport(optarg, &cf->upstream_ip, &cf->upstream_port, NULL) ||
			    !cf->upstream_ip || cf->upstream_ip == 0xFFFFFFFFu)
				return bad("--upstream (A.B.C.D:PORT, a host's address)", optarg);
			break;
		case 'C':
			if (rp_parse_bytes(optarg, 65536, 1ull << 40, &cf->cache_bytes))
				return bad("--cache-bytes", optarg);
			cf->cache_bytes_given = 1;
			break;
		case 'K':
			if (rp_parse_num(optarg, 1, 1000, &v))
				return bad("--cache-versions", optarg);
			cf->cache_versions = (uint32_t)v;
			break;
		case 'r':
			if (rp_parse_rate(optarg, 400000000000ull, &cf->default_rate_bps))
				return bad("--rate (bit/s, at least 1k, e.g. 100m; 0: unlimited)", optarg);
			break;
		case 'q':
			if (rp_parse_num(optarg, 16, 65536, &v) || (v & (v - 1)))
				return bad("--queue (a power of two, 16..65536)", optarg);
			cf->queue_len = (uint32_t)v;
			break;
		case 'H':
			if (rp_parse_num(optarg, 0, MAX_SUBS, &v))
				return bad("--max-per-host (0..64)", optarg);
			cf->max_per_host = (uint32_t)v;
			break;
		case 'L':
			if (rp_parse_num(optarg, 0, 1000000000, &v))
				return bad("--nack-rate", optarg);
			cf->nack_rate = (uint32_t)v;
			break;
		case 't':
			if (rp_parse_num(optarg, 1, 86400, &v))
				return bad("--heartbeat-timeout", optarg);
			cf->heartbeat_timeout_s = (uint32_t)v;
			break;
		case 'k': cf->check_crc = 1; break;
		case 'P': cf->copy_fanout = 1; break;
		case 'E': cf->events_path = optarg; break;
		case 'N': cf->name = optarg; break;
		case 'A':
			if (cf->n_keys == RP_AUTH_MAX_KEYS)
				return bad("--key (at most 4)", optarg);
			cf->key_paths[cf->n_keys++] = optarg;
			break;
		case 'm':
			if (rp_parse_num(optarg, 2048, 65535 - RTE_PKTMBUF_HEADROOM, &v))
				return bad("--mbuf-size", optarg);
			cf->mbuf_size = (uint32_t)v;
			break;
		case 'n':
			if (rp_parse_num(optarg, 1023, 1u << 22, &v))
				return bad("--mbufs", optarg);
			cf->n_mbufs = (uint32_t)v;
			cf->n_mbufs_given = 1;
			break;
		case 'T': {
			char *end;
			double t = strtod(optarg, &end);
			if (*end || !(t > 0) || t > 1e6)
				return bad("--run-time", optarg);
			cf->run_time_s = t;
			break;
		}
		case 'h':
			fputs(usage_text, stdout);
			exit(0);
		default:
			fputs(usage_text, stderr);
			return -1;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "bfpatch-relay: unexpected argument '%s'\n%s", argv[optind], usage_text);
		return -1;
	}
	if (cf->n_ip == 0) {
		ip_parse("198.18.0.1", &cf->ip[0]);
		cf->n_ip = 1;
	}
	if (cf->data_port == cf->control_port) {
		fprintf(stderr, "bfpatch-relay: --control-port %u is the data port: give them "
			"different ports\n", cf->control_port);
		return -1;
	}
	/* frames sent to the upstream or to the relay itself would go round */
	for (unsigned p = 0; p < cf->n_ip; p++)
		if (cf->upstream_ip && cf->upstream_ip == cf->ip[p]) {
			fprintf(stderr, "bfpatch-relay: --upstream is this relay's own address "
				"(port %u)\n", p);
			return -1;
		}
	for (unsigned i = 0; i < cf->n_subs; i++) {
		int own = 0;
		for (unsigned p = 0; p < cf->n_ip; p++)
			own |= cf->subs[i].ip == cf->ip[p];
		if (own || (cf->upstream_ip && cf->subs[i].ip == cf->upstream_ip)) {
			fprintf(stderr, "bfpatch-relay: a --subscriber at %s is not allowed: frames "
				"to it would come back round\n",
				own ? "this relay's own address" : "the --upstream's address");
			return -1;
		}
	}
	for (unsigned p = 0; p < MAX_PORTS; p++) {
		if (!cf->gateway[p])
			continue;
		unsigned len = cf->prefix[p];
		uint32_t mask = prefix_mask(len);
		if (!len || len == 32 || ((cf->gateway[p] ^ cf->ip[p]) & mask) ||
		    cf->gateway[p] == cf->ip[p]) {
			fprintf(stderr,
				"bfpatch-relay: --gateway for port %u needs --ip %u:ADDR/LEN with the "
				"gateway on that subnet (and not the relay's own address)\n",
				p, p);
			return -1;
		}
	}
	return 0;
}

/* RX mbufs the RX rings hold (1024 descriptors a queue and port, filled
 * at start) and the bursts in flight (4 an lcore). */
static unsigned rx_rings_of(unsigned n_ports, unsigned nq, unsigned n_workers)
{
	return n_ports * nq * 1024u + 4 * BURST * (n_workers + 1);
}

/* Free RX mbufs paced queues must leave: two bursts a queue and port for
 * the rings to refill with, and the bursts in flight. */
static unsigned rx_reserve_of(unsigned n_ports, unsigned nq, unsigned n_workers)
{
	return n_ports * nq * 2 * BURST + 4 * BURST * (n_workers + 1);
}

/* The fewest RX mbufs the relay starts with: the rings', and beside them
 * at least 1024 and four times the reserve (half of it for the cache,
 * half for queues, of which the reserve stays free). */
static unsigned rx_min_of(unsigned n_ports, unsigned nq, unsigned n_workers)
{
	unsigned r4 = 4 * rx_reserve_of(n_ports, nq, n_workers);
	return rx_rings_of(n_ports, nq, n_workers) + (r4 > 1024 ? r4 : 1024);
}

/* Repair cache slots: the power of two that covers cache_bytes at 1 KiB a
 * frame (at least 1024; *want), unless half of what the RX rings leave of
 * n_mbufs is less. */
static uint32_t cache_cap_of(uint32_t n_mbufs, unsigned rx_need, uint64_t cache_bytes,
			     uint32_t *want)
{
	uint32_t cap = 1024;
	while ((uint64_t)cap * 1024 < cache_bytes && cap < (1u << 22))
		cap <<= 1;
	*want = cap;
	while (cap > 64 && cap > (n_mbufs - rx_need) / 2)
		cap >>= 1;
	return cap;
}

/* The port the upstream is reached through: the one whose subnet (--ip
 * A/LEN) holds it, else the first with a --gateway, else port 0. */
static uint16_t upstream_port(const relay_conf *cf, unsigned n_ports)
{
	for (unsigned p = 0; p < n_ports && p < MAX_PORTS; p++)
		if (cf->prefix[p] && !((cf->upstream_ip ^ cf->ip[p]) & prefix_mask(cf->prefix[p])))
			return (uint16_t)p;
	for (unsigned p = 0; p < n_ports && p < MAX_PORTS; p++)
		if (cf->gateway[p])
			return (uint16_t)p;
	return 0;
}

/* ---- ports ---- */

static int port_init(relay *r, uint16_t port, uint16_t nq)
{
	struct rte_eth_conf conf;
	struct rte_eth_dev_info info;
	memset(&conf, 0, sizeof(conf));
	int rc = rte_eth_dev_info_get(port, &info);
	if (rc)
		return rc;
	/* every port gets the same number of RX queues (the relay's loop polls
	 * queue q of each port), chosen by relay_init within every port's limit */
	if (nq > info.max_rx_queues)
		return -EINVAL;
	/* several RX queues: let RSS spread flows (where the port can hash) */
	uint64_t rss = (RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP) & info.flow_type_rss_offloads;
	if (nq > 1 && rss) {
		conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
		conf.rx_adv_conf.rss_conf.rss_hf = rss;
	}
	/* jumbo frames where the port allows them (18: Ethernet header + CRC) */
	if (info.max_rx_pktlen > 1518 + 18)
		conf.rxmode.mtu = (uint32_t)RTE_MIN(9000u, info.max_rx_pktlen - 18);
	/* checksums in the NIC where it can: the header mbuf then carries only
	 * the pseudo-header sum (RTE_MBUF_F_TX_UDP_CKSUM contract) */
	const uint64_t ck = RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_UDP_CKSUM;
	if ((info.tx_offload_capa & ck) == ck) {
		conf.txmode.offloads |= ck;
		r->csum_offload[port] = 1;
	}
	if (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS)
		conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
	/* TX goes through queue 0 (the main lcore); some PMDs (net_tap) want
	 * as many TX queues as RX ones, so the others are set up unused */
	const uint16_t ntq = nq <= info.max_tx_queues ? nq : 1;
	rc = rte_eth_dev_configure(port, nq, ntq, &conf);
	if (rc)
		return rc;
	uint16_t nrx = 1024, ntx = 1024;
	rc = rte_eth_dev_adjust_nb_rx_tx_desc(port, &nrx, &ntx);
	if (rc)
		return rc;
	int socket = rte_eth_dev_socket_id(port);
	for (uint16_t q = 0; q < nq; q++) {
		rc = rte_eth_rx_queue_setup(port, q, nrx, socket < 0 ? 0 : (unsigned)socket,
					    NULL, r->pool);
		if (rc)
			return rc;
	}
	for (uint16_t q = 0; q < ntq; q++) {
		rc = rte_eth_tx_queue_setup(port, q, ntx, socket < 0 ? 0 : (unsigned)socket, NULL);
		if (rc)
			return rc;
	}
	r->txb[port] = rte_zmalloc_socket("txb", RTE_ETH_TX_BUFFER_SIZE(BURST), 0,
					  socket < 0 ? 0 : socket);
	if (!r->txb[port])
		return -ENOMEM;
	rte_eth_tx_buffer_init(r->txb[port], BURST);
	rte_eth_tx_buffer_set_err_callback(r->txb[port], tx_error_cb,
					   &r->stats[rte_get_main_lcore()]);
	rc = rte_eth_dev_start(port);
	if (rc)
		return rc;
	rte_eth_promiscuous_enable(port); /* not all PMDs can; harmless */
	return rte_eth_macaddr_get(port, &r->mac[port]);
}

/* Pools, cache, queues, ports and static subscribers for r->cf (after
 * EAL initialisation). 0 on success; on failure relay_teardown() undoes
 * whatever was done. */
static int relay_setup(relay *r)
{
	r->hz = rte_get_tsc_hz();
	for (unsigned i = 0; i < r->cf.n_keys; i++) {
		char err[512] = "libsodium did not initialise";
		if (rp_auth_init() || rp_auth_load(&r->auth, r->cf.key_paths[i], err, sizeof(err))) {
			fprintf(stderr, "bfpatch-relay: %s\n", err);
			return -1;
		}
	}
	if (events_open(&r->ev, r->cf.events_path, "relay", r->cf.name)) {
		fprintf(stderr, "bfpatch-relay: --events %s: %s\n", r->cf.events_path,
			strerror(errno));
		return -1;
	}
	unsigned top = rte_get_main_lcore(), wl;
	RTE_LCORE_FOREACH_WORKER(wl)
		top = wl > top ? wl : top; /* per-lcore arrays are indexed by id */
	if (top >= MAX_LCORES) {
		fprintf(stderr, "bfpatch-relay: lcore ids must be below %d (got %u; map them, e.g. "
			"--lcores 0@0,1@1)\n", MAX_LCORES, top);
		return -1;
	}
	r->n_ports = rte_eth_dev_count_avail();
	if (r->n_ports == 0 || r->n_ports > MAX_PORTS) {
		fprintf(stderr, "bfpatch-relay: need 1..%d ports (got %u); add --vdev=...\n",
			MAX_PORTS, r->n_ports);
		r->n_ports = 0;
		return -1;
	}
	for (unsigned p = 0; p < MAX_PORTS; p++)
		if ((p < r->cf.n_ip && r->cf.ip[p] && p >= r->n_ports) ||
		    (r->cf.gateway[p] && p >= r->n_ports)) {
			fprintf(stderr, "bfpatch-relay: --%s %u:...: there is no DPDK port %u "
				"(%u port%s: 0..%u)\n", p < r->cf.n_ip && r->cf.ip[p] ? "ip" : "gateway",
				p, p, r->n_ports, r->n_ports == 1 ? "" : "s", r->n_ports - 1);
			r->n_ports = 0;
			return -1;
		}
	/* a port without --ip of its own uses the first address given */
	uint32_t ip_any = 0;
	for (unsigned i = 0; i < r->cf.n_ip && !ip_any; i++)
		ip_any = r->cf.ip[i];
	for (unsigned i = 0; i < RTE_MAX((unsigned)r->n_ports, r->cf.n_ip); i++)
		if (i >= r->cf.n_ip || !r->cf.ip[i])
			r->cf.ip[i] = ip_any;
	for (unsigned i = 0; i < r->cf.n_ip; i++)
		r->addrs.ip[r->addrs.n_ip++] = r->cf.ip[i];
	r->up_port = upstream_port(&r->cf, r->n_ports);
	r->addrs.data_port = r->cf.data_port;
	r->addrs.control_port = r->cf.control_port;
	r->addrs.check_crc = r->cf.check_crc;

	/* the RX pool holds the rings, the bursts in flight and the repair
	 * cache's frames; header and clone pools one entry per output queued */
	unsigned n_workers = rte_lcore_count() - 1, nq = n_workers ? n_workers : 1;
	/* one RX queue per worker, as many as the port with the fewest allows:
	 * a worker polls its queue on every port */
	for (uint16_t p = 0; p < r->n_ports; p++) {
		struct rte_eth_dev_info info;
		if (rte_eth_dev_info_get(p, &info) == 0 && info.max_rx_queues < nq)
			nq = info.max_rx_queues ? info.max_rx_queues : 1;
	}
	/* what the RX rings (1024 descriptors a queue, filled at start) and
	 * the bursts in flight hold: the pool must have that and room to
	 * spare, and the cache takes at most half of what is left */
	const unsigned rx_need = rx_rings_of(r->n_ports, nq, n_workers);
	/* the default grows with ports and queues: room for the rings, the
	 * reserve and a cache of 2048 frames beside as many queued */
	while (!r->cf.n_mbufs_given && r->cf.n_mbufs < rx_min_of(r->n_ports, nq, n_workers) + 4096)
		r->cf.n_mbufs = r->cf.n_mbufs * 2 + 1;
	if (r->cf.n_mbufs < rx_min_of(r->n_ports, nq, n_workers)) {
		fprintf(stderr, "bfpatch-relay: --mbufs %u is too few: the RX rings of %u port(s) x "
			"%u queue(s) take %u; give at least %u\n", r->cf.n_mbufs, r->n_ports, nq,
			rx_need, rx_min_of(r->n_ports, nq, n_workers));
		return -1;
	}
	r->pool = rte_pktmbuf_pool_create("rx", r->cf.n_mbufs, 256, 0,
					  (uint16_t)(r->cf.mbuf_size + RTE_PKTMBUF_HEADROOM),
					  (int)rte_socket_id());
	r->hdr_pool = rte_pktmbuf_pool_create("hdr", OUT_POOL_N, 256, 0,
					      HDR_ROOM + RTE_PKTMBUF_HEADROOM, (int)rte_socket_id());
	r->clone_pool = rte_pktmbuf_pool_create("clone", OUT_POOL_N, 256, 0, 0,
						(int)rte_socket_id());
	r->inbound = rte_ring_create("inbound", 4096, (int)rte_socket_id(), RING_F_SC_DEQ);
	if (!r->pool || !r->hdr_pool || !r->clone_pool || !r->inbound) {
		fprintf(stderr, "bfpatch-relay: cannot create pools: %s\n", rte_strerror(rte_errno));
		return -1;
	}
	/* cache index sized for the budget at 1 kB frames, at least 1024; the
	 * cache holds RX mbufs, so at most half of what the RX rings leave of
	 * the pool, or a full cache would leave no mbuf to receive with (not
	 * even JOINs), nor for the frames paced queues hold */
	uint32_t want;
	uint32_t cap = cache_cap_of(r->cf.n_mbufs, rx_need, r->cf.cache_bytes, &want);
	if (cap < want && r->cf.cache_bytes_given)
		fprintf(stderr, "bfpatch-relay: warning: the repair cache holds at most %u frames, "
			"half of what --mbufs %u leaves beside the RX rings (%u) (about %.0f MB of "
			"1200-byte frames, %.0f MB of 8900-byte ones), less than --cache-bytes %"
			PRIu64 " asks for; give --mbufs %u to use it all\n", cap, r->cf.n_mbufs,
			rx_need, cap * 1200.0 / 1e6, cap * 8900.0 / 1e6, r->cf.cache_bytes,
			2 * want + rx_need);
	r->cache_ring = rte_zmalloc("cache_ring", cap * sizeof(rp_cache_entry), 0);
	r->cache_hash = rte_zmalloc("cache_hash", 2 * cap * sizeof(uint32_t), 0);
	if (!r->cache_ring || !r->cache_hash ||
	    rp_cache_init(&r->cache, r->cache_ring, r->cache_hash, cap, r->cf.cache_bytes,
			  r->cf.cache_versions)) {
		fprintf(stderr, "bfpatch-relay: out of memory for the cache\n");
		return -1;
	}
	for (unsigned i = 0; i < MAX_SUBS; i++) {
		char name[32];
		snprintf(name, sizeof(name), "subq%u", i);
		r->subs[i].q = rte_ring_create(name, r->cf.queue_len, (int)rte_socket_id(),
					       RING_F_SP_ENQ | RING_F_SC_DEQ);
		if (!r->subs[i].q) {
			fprintf(stderr, "bfpatch-relay: cannot create queues: %s\n",
				rte_strerror(rte_errno));
			return -1;
		}
	}
	r->n_rxq = nq;
	/* the free mbufs paced queues leave: what the RX rings take to refill
	 * (two bursts a queue and port) and the bursts in flight; the rings'
	 * own descriptors are already out of the pool */
	r->rx_reserve = rx_reserve_of(r->n_ports, nq, n_workers);
	for (uint16_t p = 0; p < r->n_ports; p++) {
		int rc = port_init(r, p, (uint16_t)nq);
		if (rc) {
			fprintf(stderr, "bfpatch-relay: port %u: %s\n", p, rte_strerror(-rc));
			return -1;
		}
	}
	/* one worker per RX queue; workers beyond the queues stay idle, since
	 * a queue cannot be shared without a lock */
	unsigned lc, qi = 0;
	RTE_LCORE_FOREACH_WORKER(lc) {
		r->worker_q[lc] = qi < r->n_rxq ? qi : UINT_MAX;
		qi++;
	}
	r->n_workers = n_workers < r->n_rxq ? n_workers : r->n_rxq;
	if (n_workers > r->n_rxq)
		fprintf(stderr, "bfpatch-relay: %u RX queue(s) per port: %u worker lcore(s) idle\n",
			r->n_rxq, n_workers - r->n_rxq);
	lcore_stats *st = &r->stats[rte_lcore_id()];
	for (unsigned i = 0; i < r->cf.n_subs; i++) {
		const sub_conf *sc = &r->cf.subs[i];
		if (sc->eth_port >= r->n_ports) {
			fprintf(stderr, "bfpatch-relay: subscriber %u: no port %u\n", i, sc->eth_port);
			return -1;
		}
		sub *s = sub_add(r, sc->ip, sc->port, sc->eth_port, sc->rate_bps, st);
		if (!s) {
			fprintf(stderr, "bfpatch-relay: too many subscribers\n");
			return -1;
		}
		s->is_static = 1;
		if (sc->has_mac) {
			memcpy(s->mac, sc->mac, 6);
			s->mac_from = MAC_CONF;
		}
	}
	return 0;
}

/* Stop the ports and free everything relay_setup() took; frees r. */
static void relay_teardown(relay *r)
{
	events_close(&r->ev);
	for (uint16_t p = 0; p < r->n_ports; p++) {
		rte_eth_dev_stop(p);
		rte_eth_dev_close(p);
	}
	for (unsigned i = 0; i < MAX_SUBS; i++) {
		if (!r->subs[i].q)
			continue;
		if (r->subs[i].used)
			sub_flush(&r->subs[i]);
		rte_ring_free(r->subs[i].q);
	}
	if (r->cache_ring && r->cache_hash)
		rp_cache_clear(&r->cache, mbuf_drop, NULL);
	rte_free(r->cache_ring);
	rte_free(r->cache_hash);
	for (uint16_t p = 0; p < MAX_PORTS; p++)
		rte_free(r->txb[p]);
	rte_ring_free(r->inbound);
	rte_mempool_free(r->pool);
	rte_mempool_free(r->hdr_pool);
	rte_mempool_free(r->clone_pool);
	rte_free(r);
}

#ifndef BFP_RELAY_NO_MAIN
int main(int argc, char **argv)
{
	/* the relay's usage without EAL (which needs hugepages or a device
	 * to start, and answers --help with its own options only) */
	int dashes = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || (dashes && !strcmp(argv[i], "-h"))) {
			fputs(usage_text, stdout);
			fputs("EAL options (before --) are DPDK's: -l CORES, -a PCI, --vdev, "
			      "--file-prefix, -m MB, ... (DPDK's EAL documentation)\n", stdout);
			return 0;
		}
		dashes |= !strcmp(argv[i], "--");
	}
	if (argc > 1 && !dashes)
		fprintf(stderr, "bfpatch-relay: warning: no '--' on the command line, so every "
			"option went to DPDK's EAL (where -m, -n, -c, -s, -d mean other things); "
			"the relay's own options go after --\n");
	int ret = rte_eal_init(argc, argv);
	if (ret < 0) {
		fprintf(stderr, "bfpatch-relay: EAL initialisation failed: %s\n",
			rte_strerror(rte_errno));
		return 1;
	}
	argc -= ret;
	argv += ret;
	rp_catch_signal(SIGINT, on_signal);
	rp_catch_signal(SIGTERM, on_signal);
	rp_catch_signal(SIGHUP, on_signal);
	signal(SIGUSR1, on_usr1);

	int rc = 1;
	relay *r = rte_zmalloc("relay", sizeof(*r), RTE_CACHE_LINE_SIZE);
	if (!r) {
		fprintf(stderr, "bfpatch-relay: out of memory\n");
		rte_eal_cleanup();
		return 1;
	}
	R = r;
	r->ev.fd = -1;
	if (parse_args(argc, argv, &r->cf) == 0 && relay_setup(r) == 0) {
		rte_telemetry_register_cmd("/bfpatch/stats", tel_stats,
					   "bfpatch-relay counters. No parameters");
		rte_telemetry_register_cmd("/bfpatch/subscribers", tel_subscribers,
					   "Per-subscriber bytes and drops. No parameters");
		printf("bfpatch-relay: %u port(s), %u worker lcore(s), data port %u, "
		       "control port %u, %u static subscriber(s), repair cache %u frames or %"
		       PRIu64 " bytes\n", r->n_ports, r->n_workers, r->cf.data_port,
		       r->cf.control_port, r->cf.n_subs, r->cache.cap, r->cf.cache_bytes);
		for (uint16_t p = 0; p < r->n_ports; p++) {
			char ip[INET_ADDRSTRLEN];
			printf("bfpatch-relay: port %u %s, checksums in %s\n", p,
			       ip_str(r->cf.ip[p], ip), r->csum_offload[p] ? "the NIC" : "software");
		}
		if (r->cf.upstream_ip) {
			char ip[INET_ADDRSTRLEN];
			printf("bfpatch-relay: upstream %s:%u through port %u\n",
			       ip_str(r->cf.upstream_ip, ip), r->cf.upstream_port, r->up_port);
		}
		fflush(stdout);
		events_emit(&r->ev, "start", "\"ports\":%u,\"lcores\":%u", r->n_ports,
			    r->n_workers + 1);
		if (r->n_workers)
			rte_eal_mp_remote_launch(worker_main, r, SKIP_MAIN);
		core_main(r);
		rte_eal_mp_wait_lcore();
		print_stats(r, stdout);
		events_emit(&r->ev, "stats", "\"rx\":%" PRIu64 ",\"tx\":%" PRIu64 ",\"cache_hits\":%"
			    PRIu64 ",\"cache_misses\":%" PRIu64 ",\"nacks\":%" PRIu64 ",\"drop_auth\":%"
			    PRIu64, sum_counter(r, C_RX), sum_counter(r, C_TX),
			    sum_counter(r, C_CACHE_HIT), sum_counter(r, C_CACHE_MISS),
			    sum_counter(r, C_NACK_RX), sum_counter(r, C_AUTH_FAIL));
		rc = 0;
	}
	relay_teardown(r);
	rte_eal_cleanup();
	return rc;
}
#endif
