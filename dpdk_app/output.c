/*
 * output.c: bfpatch-relay's outputs: one frame's output for one
 * subscriber (headers, checksums, pacing hand-off), made on the fan-out
 * lane that owns the subscriber (fanout.c), and transmit buffering. Both
 * the data path and the control plane (NACK answers, JOIN replies) send
 * through here, so it depends on neither.
 *
 * Fan-out (as DPDK's ipv4_multicast explains its two methods): each
 * subscriber gets a fresh header mbuf (Ethernet/IPv4/UDP for that
 * subscriber) chained to an indirect clone of the frame's payload, so the
 * payload is never copied and each output carries its own addresses. A
 * refcount-only method (the same bytes to all) cannot address several
 * unicast subscribers, so the real alternative is a full copy per output
 * (--copy-fanout keeps it, for measurement). bench/bench_relay.sh measures
 * both on one core (whole relay loop per output, fan-out 16, payload hot
 * in cache; docs/BENCHMARKS.md): at 1500 bytes the two cost about the
 * same (48-56 ns an output over runs), at 8000 bytes a copy about twice a
 * clone, so the relay clones at every size: a copy would also multiply
 * the frame's memory and memory traffic by the fan-out while the repair
 * cache holds the frame. One method keeps one payload shared by fan-out,
 * cache and repairs, with zero payload copies.
 *
 * One output of each frame needs no header mbuf or clone: as
 * ipv4_multicast sends its last output in the input mbuf itself, the last
 * output the main lcore makes of a received frame is the frame's own mbuf,
 * its subscriber's headers written in its headroom, where the frame's own
 * headers arrived (at fan-out 1, every output). A frame the repair cache
 * stores keeps that mbuf with a reference of its own (relay_emit_keep):
 * the headers are written before the cache takes it, so before any NACK
 * answer can reach it, and the frame is flagged FRAME_BEHIND, so that
 * every reader of a cached frame (NACK answers, their payload check, a
 * trailer signed per hop) starts after them (relay_frame_off); nothing
 * writes the cached frame again (NACK answers take header mbufs). Per hop
 * its trailer would be signed again in place, over the cached one: that
 * output is a clone reaching back into the frame's headroom instead, as is
 * the first output on the main lcore of a frame that another lane also
 * fans out (its clones must not see the frame's data move). A frame the
 * cache holds a copy of already (a repeat: the replayed rows of
 * bench_relay.sh, a frame sent again upstream) is kept by nothing after
 * its outputs, and its last output is the input mbuf itself, per hop its
 * trailer signed again in place (relay_emit_own). Either way, but for a
 * stored frame per hop, no mbuf is allocated at fan-out 1.
 * Headers come from a per-subscriber template: a 42-byte copy and two
 * checksum updates. On a fan-out lane other than the main lcore's, a clone
 * attaches the frame's buffer as an external one, counted on the lane's
 * hold and made from the frame's view in its job, not from its mbuf
 * (fanout.c).
 */
#include <string.h>

#include <rte_ethdev.h>
#include <rte_ip.h>
#include <rte_prefetch.h>
#include <rte_udp.h>

#include "bfpatch.h"
#include "relay.h"

/* Failures are counted by the buffer's error callback (on the stats of
 * the lcore that owns the buffer). */
void relay_send(relay *r, uint16_t port, struct rte_mbuf *m, lcore_stats *st)
{
	if (!m)
		return;
	st->c[C_TX]++;
	rte_eth_tx_buffer(port, 0, r->txb[port], m);
}

static inline void lane_send(lane *l, uint16_t port, struct rte_mbuf *m)
{
	l->st->c[C_TX]++;
	rte_eth_tx_buffer(port, l->txq, l->txb[port], m);
}

void relay_lane_send(lane *l, uint16_t port, struct rte_mbuf *m)
{
	lane_send(l, port, m);
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
static void deliver(relay *r, lane *l, sub *s, struct rte_mbuf *out)
{
	const uint64_t bit = 1ull << (s - r->subs);
	lcore_stats *st = l->st;
	if (s->bucket.rate == 0 && !(l->queued_mask & bit)) {
		st->c[C_FANOUT]++;
		s->tx_pkts++;
		s->tx_bytes += rte_pktmbuf_pkt_len(out);
		lane_send(l, s->out.eth_port, out);
		return;
	}
	/* a queued output holds its frame's RX mbuf: slow subscribers must
	 * not take the mbufs the ports receive with, or one of them would
	 * stop the relay for everyone (JOINs and ARP included); with a pool
	 * on each of several sockets, any pool short is short (one count
	 * serves a NACK answer's frames from every port) */
	if (l->rx_short < 0) {
		l->rx_short = 0;
		for (unsigned i = 0; i < r->n_rx_pools; i++)
			l->rx_short |= rte_mempool_avail_count(r->rx_pools[i]) < r->rx_reserve;
	}
	/* each queued output also holds a header mbuf and a clone: a
	 * subscriber may hold its share of those pools, two shares staying
	 * for the unpaced ones and NACK answers, or a few slow subscribers
	 * would take them all and starve the rest (PROTOCOL.md 3) */
	if (!l->q_share)
		l->q_share = OUT_POOL_N / (__atomic_load_n(&r->n_used, __ATOMIC_RELAXED) + 2);
	if (rte_ring_count(s->q) >= l->q_share) {
		rte_pktmbuf_free(out);
		st->c[C_SHARE_FULL]++;
		s->drops++;
		return;
	}
	if (l->rx_short) { /* it would take the RX mbufs the ports receive with */
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
	l->queued_mask |= bit;
	st->c[C_FANOUT]++;
}

/* The ones'-complement sum of the n bytes at p as a part of a larger sum
 * that they enter at an odd offset (odd) or an even one: byte-swapped at
 * an odd one (RFC 1071). */
static uint16_t sum_part(const uint8_t *p, size_t n, int odd)
{
	uint16_t x = rp_fold(rp_sum(p, n, 0));
	return odd ? (uint16_t)(x << 8 | x >> 8) : x;
}

/* Per hop (a subscriber with a peer key, SECURITY.md "Keys per hop"):
 * the trailer of frame f (its payload, which ends in the upstream's
 * trailer) for s, signed with s's key and bound to run (the one followed
 * when the frame was handed over), into t[RP_AUTH_LEN]; *sum, the
 * payload's sum, becomes that of the frame with t in place of the
 * upstream's trailer. */
static void reseal(const sub_out *o, uint64_t run, const uint8_t *fp, size_t fl, uint8_t *t,
		   uint32_t *sum)
{
	const size_t flen = fl - RP_AUTH_LEN;
	const int odd = flen & 1;
	/* the upstream's trailer is summed first: t may be where it is */
	const uint16_t old = sum_part(fp + flen, RP_AUTH_LEN, odd);
	rp_auth_seal_key(o->key, run, fp, flen, 0, t);
	*sum = (uint32_t)rp_fold(*sum) + (uint16_t)~old + sum_part(t, RP_AUTH_LEN, odd);
}

static inline void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

/* The one's-complement sum of the n (even) bytes at p, as 16-bit words
 * in network order. */
static uint32_t words_sum(const uint8_t *p, unsigned n)
{
	uint32_t x = 0;
	for (unsigned i = 0; i < n; i += 2)
		x += (uint32_t)(p[i] << 8 | p[i + 1]);
	return x;
}

void relay_out_template(relay *r, sub *s)
{
	const sub_out *o = &s->out;
	const uint32_t src = r->cf.ip[o->eth_port];
	/* rp_build_udp's headers with every per-output field 0 */
	rp_build_udp(s->hdr, o->mac, r->mac[o->eth_port].addr_bytes, src, o->ip, r->cf.data_port,
		     o->data_port, 0, 0, 0);
	for (unsigned k = 0; k < 2; k++) {
		put16(s->hdr + RP_ETH_LEN + 2 + 2 * k, 0);     /* total length, id */
		put16(s->hdr + RP_ETH_LEN + RP_IP_LEN + 4 + 2 * k, 0); /* length, checksum */
	}
	put16(s->hdr + RP_ETH_LEN + 10, 0);                    /* IPv4 checksum */
	s->ip_sum = words_sum(s->hdr + RP_ETH_LEN, RP_IP_LEN);
	/* the UDP header's fixed words and the pseudo-header's (RFC 768) but
	 * its length */
	s->udp_sum = words_sum(s->hdr + RP_ETH_LEN + RP_IP_LEN, RP_UDP_LEN) + (src >> 16) +
		     (src & 0xFFFF) + (o->ip >> 16) + (o->ip & 0xFFFF) + 17u;
	s->peer = (uint8_t)rp_auth_is_peer(&r->auth, o->key);
}

/* s's headers at h for a payload of len bytes whose sum is payload_sum:
 * the bytes rp_build_udp() writes, from s's template (the checksums are
 * those sums with the per-output fields added: the same value, RFC 1071). */
static inline void hdr_put(uint8_t *h, const sub *s, uint16_t len, uint32_t payload_sum,
			   uint16_t ip_id)
{
	const uint16_t ulen = (uint16_t)(RP_UDP_LEN + len), tot = (uint16_t)(RP_IP_LEN + ulen);
	memcpy(h, s->hdr, RP_HDRS);
	uint32_t x = s->ip_sum + tot + ip_id;
	x = (x & 0xFFFF) + (x >> 16);
	x = (x & 0xFFFF) + (x >> 16);
	uint64_t y = (uint64_t)s->udp_sum + 2u * ulen + payload_sum;
	y = (y & 0xFFFFFFFF) + (y >> 32);
	y = (y & 0xFFFF) + (y >> 16);
	y = (y & 0xFFFF) + (y >> 16);
	y = (y & 0xFFFF) + (y >> 16);
	const uint16_t ck = (uint16_t)~y;
	put16(h + RP_ETH_LEN + 2, tot);
	put16(h + RP_ETH_LEN + 4, ip_id);
	put16(h + RP_ETH_LEN + 10, (uint16_t)~x);
	put16(h + RP_ETH_LEN + RP_IP_LEN + 4, ulen);
	put16(h + RP_ETH_LEN + RP_IP_LEN + 6, ck ? ck : 0xFFFF); /* RFC 768: 0 is sent as all ones */
}

/* A payload copy per output: the method not taken, kept for
 * bench_relay.sh (--copy-fanout). */
static struct rte_mbuf *output_copy(relay *r, lane *l, const sub *s, struct rte_mbuf *f,
				    uint32_t payload_sum, uint64_t run)
{
	const sub_out *o = &s->out;
	struct rte_mbuf *m = rte_pktmbuf_alloc(r->pool[o->eth_port]);
	const uint16_t off = relay_frame_off(f), fl = (uint16_t)(rte_pktmbuf_pkt_len(f) - off);
	uint8_t *p = m ? (uint8_t *)rte_pktmbuf_append(m, (uint16_t)(RP_HDRS + fl)) : NULL;
	if (!p) {
		rte_pktmbuf_free(m);
		return NULL;
	}
	memcpy(p + RP_HDRS, rte_pktmbuf_mtod_offset(f, const void *, off), fl);
	if (s->peer)
		reseal(o, run, p + RP_HDRS, fl, p + RP_HDRS + fl - RP_AUTH_LEN, &payload_sum);
	hdr_put(p, s, fl, payload_sum, l->ip_id++);
	offload_csum(r, m, o->eth_port);
	return m;
}

/* An mbuf over frame f's data from off on: on a lane that holds f
 * (lane.hold, fanout.c), one attached to f's buffer as an external one,
 * counted on the hold; else an indirect one (rte_pktmbuf_clone, inline
 * for the single segment every received frame has). */
static struct rte_mbuf *payload_ref(relay *r, lane *l, struct rte_mbuf *f, uint16_t off)
{
	struct rte_mbuf *c;
	if (l->hold) { /* f's fields from its view: its mbuf is not read */
		const frame_view *v = l->fv;
		c = rte_pktmbuf_alloc(r->clone_pool);
		if (c) {
			rte_mbuf_ext_refcnt_update(&l->hold->sh, 1);
			rte_pktmbuf_attach_extbuf(c, v->buf, v->iova, v->buf_len, &l->hold->sh);
			c->data_off = v->data_off;
			c->data_len = v->len;
			c->pkt_len = v->len;
		}
	} else if (f->nb_segs != 1) {
		c = rte_pktmbuf_clone(f, r->clone_pool);
	} else {
		c = rte_pktmbuf_alloc(r->clone_pool);
		if (c)
			rte_pktmbuf_attach(c, f);
	}
	if (c && off)
		rte_pktmbuf_adj(c, off); /* within the first segment: f's headers */
	return c;
}

/* The fan-out method: a header mbuf for s chained to a clone of f; with
 * head (one output of the frame), the clone itself reaches back into f's
 * headroom, where the frame's own headers came in, for s's headers, as
 * ipv4_multicast sends its last output in the input mbuf: no header mbuf,
 * one segment less. The payload is never written: the cache and the other
 * outputs share it. Per hop, the clone stops before the upstream's trailer
 * and another mbuf holds s's own. */
static struct rte_mbuf *output_clone(relay *r, lane *l, const sub *s, struct rte_mbuf *f,
				     uint32_t payload_sum, uint64_t run, int head)
{
	const uint16_t off = l->hold ? l->fv->off : relay_frame_off(f),
		       fl = (uint16_t)((l->hold ? l->fv->len : rte_pktmbuf_pkt_len(f)) - off);
	struct rte_mbuf *h = NULL, *c;
	head = head && !off && RTE_MBUF_DIRECT(f) && f->nb_segs == 1 &&
	       rte_pktmbuf_headroom(f) >= RP_HDRS;
	if (!head) {
		h = rte_pktmbuf_alloc(r->hdr_pool);
		if (!h)
			return NULL;
	}
	c = payload_ref(r, l, f, off);
	if (!c) {
		rte_pktmbuf_free(h);
		return NULL;
	}
	if (s->peer) {
		struct rte_mbuf *t = rte_pktmbuf_alloc(r->hdr_pool);
		uint8_t *tp = t ? (uint8_t *)rte_pktmbuf_append(t, RP_AUTH_LEN) : NULL;
		if (!tp || rte_pktmbuf_trim(c, RP_AUTH_LEN) != 0 || rte_pktmbuf_chain(c, t) != 0) {
			rte_pktmbuf_free(t);
			rte_pktmbuf_free(c);
			rte_pktmbuf_free(h);
			return NULL;
		}
		reseal(&s->out, run, rte_pktmbuf_mtod(c, const uint8_t *), fl, tp, &payload_sum);
	}
	uint8_t *p;
	if (head) {
		h = c;
		p = (uint8_t *)rte_pktmbuf_prepend(h, RP_HDRS); /* the headroom is there */
	} else {
		p = (uint8_t *)rte_pktmbuf_append(h, RP_HDRS);
		if (rte_pktmbuf_chain(h, c) != 0) {
			rte_pktmbuf_free(h);
			rte_pktmbuf_free(c);
			return NULL;
		}
	}
	hdr_put(p, s, fl, payload_sum, l->ip_id++);
	offload_csum(r, h, s->out.eth_port);
	return h;
}

int relay_emit_head(relay *r, lane *l, sub *s, struct rte_mbuf *f, uint32_t payload_sum,
		    uint64_t run, int head)
{
	if (!s->out.has_mac) {
		l->st->c[C_NO_MAC]++;
		return 0;
	}
	struct rte_mbuf *out = r->cf.copy_fanout ? output_copy(r, l, s, f, payload_sum, run)
						 : output_clone(r, l, s, f, payload_sum, run, head);
	if (!out) {
		l->st->c[C_NO_MBUF]++;
		s->drops++;
		return head;
	}
	deliver(r, l, s, out);
	return head;
}

void relay_emit(relay *r, lane *l, sub *s, struct rte_mbuf *f, uint32_t payload_sum,
		uint64_t run)
{
	relay_emit_head(r, l, s, f, payload_sum, run, 0);
}

/* Whether s's output of frame f can be f itself, its headers written in
 * its headroom: f a single direct segment that is no cached frame's
 * output already, with the room. */
static int may_go_itself(const relay *r, const sub *s, const struct rte_mbuf *f)
{
	return s->out.has_mac && !r->cf.copy_fanout && RTE_MBUF_DIRECT(f) && f->nb_segs == 1 &&
	       !(f->hash.usr & FRAME_BEHIND) && rte_pktmbuf_headroom(f) >= RP_HDRS;
}

/* Frame f (fl bytes) out to s as itself: s's headers in its headroom. */
static void go_itself(relay *r, lane *l, sub *s, struct rte_mbuf *f, uint16_t fl,
		      uint32_t payload_sum)
{
	uint8_t *p = (uint8_t *)rte_pktmbuf_prepend(f, RP_HDRS);
	hdr_put(p, s, fl, payload_sum, l->ip_id++);
	offload_csum(r, f, s->out.eth_port);
	deliver(r, l, s, f);
}

void relay_emit_own(relay *r, lane *l, sub *s, struct rte_mbuf *f, uint32_t payload_sum,
		    uint64_t run)
{
	/* the frame's earlier outputs (clones) may still hold f: they see
	 * neither its headroom nor its metadata, but a trailer signed again
	 * in place would change theirs */
	if (s && may_go_itself(r, s, f) && (!s->peer || rte_mbuf_refcnt_read(f) == 1)) {
		const uint16_t fl = (uint16_t)rte_pktmbuf_pkt_len(f);
		if (s->peer)
			reseal(&s->out, run, rte_pktmbuf_mtod(f, const uint8_t *), fl,
			       rte_pktmbuf_mtod_offset(f, uint8_t *, fl - RP_AUTH_LEN), &payload_sum);
		go_itself(r, l, s, f, fl, payload_sum);
		return;
	}
	if (s) /* no MAC (counted there), or f not the output's alone */
		relay_emit(r, l, s, f, payload_sum, run);
	rte_pktmbuf_free(f);
}

void relay_emit_keep(relay *r, lane *l, sub *s, struct rte_mbuf *f, uint32_t payload_sum,
		     uint64_t run)
{
	if (!s)
		return;
	/* the frame's earlier outputs (clones) see neither its headroom nor
	 * its metadata: they were made before its data started at its
	 * headers, and they read from their own data_off */
	if (!s->peer && may_go_itself(r, s, f)) {
		rte_mbuf_refcnt_update(f, 1); /* the output's; the caller's is the cache's */
		f->hash.usr |= FRAME_BEHIND;
		go_itself(r, l, s, f, (uint16_t)rte_pktmbuf_pkt_len(f), payload_sum);
		return;
	}
	relay_emit_head(r, l, s, f, payload_sum, run, 1); /* no MAC: counted there */
}

/* The repair cache's release callback: its reference to a frame. */
void relay_mbuf_drop(void *ctx, void *obj)
{
	(void)ctx;
	rte_pktmbuf_free(obj);
}

/* A relay in steady state evicts a frame per frame it stores: their
 * mbufs go back to their pools a burst at a time (rte_pktmbuf_free_bulk:
 * one put per pool, and the pool's cache touched once), not one by one. */
void relay_mbuf_evict(void *ctx, void *obj)
{
	relay *r = ctx;
	if (r->n_evicted == BURST)
		relay_evicted_free(r);
	r->evicted[r->n_evicted++] = obj;
}

void relay_evicted_free(relay *r)
{
	if (!r->n_evicted)
		return;
	for (unsigned i = 0; i < r->n_evicted; i++) { /* cold: the lines the free reads */
		rte_prefetch0(r->evicted[i]);
		rte_prefetch0((const char *)r->evicted[i] + RTE_CACHE_LINE_SIZE);
	}
	rte_pktmbuf_free_bulk(r->evicted, r->n_evicted);
	r->n_evicted = 0;
}

void relay_tx_error_cb(struct rte_mbuf **unsent, uint16_t count, void *userdata)
{
	lcore_stats *st = userdata;
	st->c[C_TX_FAIL] += count;
	st->c[C_TX] -= count;
	for (uint16_t i = 0; i < count; i++)
		rte_pktmbuf_free(unsent[i]);
}
