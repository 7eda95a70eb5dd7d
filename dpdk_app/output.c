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
 * (--copy-fanout keeps it, for measurement). bench/bench_relay.sh measured
 * both on one core here (whole relay loop per output, fan-out 16, payload
 * hot in cache): clone 86 ns and copy 75 ns at 1500 bytes, clone 124 ns
 * and copy 173 ns at 8000 bytes; the break-even is near 3 kB. The relay
 * clones at every size: below the cutoff a copy would save ~11 ns per
 * output (less once payloads come cold from the NIC), but it multiplies
 * the frame's memory and memory traffic by the fan-out while the repair
 * cache holds the frame; above it the clone wins by a growing margin. One
 * method keeps one payload shared by fan-out, cache and repairs, with
 * zero payload copies.
 */
#include <string.h>

#include <rte_ethdev.h>
#include <rte_ip.h>
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

void relay_lane_send(lane *l, uint16_t port, struct rte_mbuf *m)
{
	l->st->c[C_TX]++;
	rte_eth_tx_buffer(port, l->txq, l->txb[port], m);
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
		relay_lane_send(l, s->out.eth_port, out);
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
static void reseal(const sub_out *o, uint64_t run, struct rte_mbuf *f, uint8_t *t, uint32_t *sum)
{
	const uint8_t *fp = rte_pktmbuf_mtod(f, const uint8_t *);
	const size_t flen = rte_pktmbuf_pkt_len(f) - RP_AUTH_LEN;
	rp_auth_seal_key(o->key, run, fp, flen, 0, t);
	const int odd = flen & 1;
	*sum = (uint32_t)rp_fold(*sum) + (uint16_t)~sum_part(fp + flen, RP_AUTH_LEN, odd) +
	       sum_part(t, RP_AUTH_LEN, odd);
}

/* A payload copy per output: the method not taken, kept for
 * bench_relay.sh (--copy-fanout). */
static struct rte_mbuf *output_copy(relay *r, lane *l, const sub_out *o, struct rte_mbuf *f,
				    uint32_t payload_sum, uint64_t run)
{
	struct rte_mbuf *m = rte_pktmbuf_alloc(r->pool[o->eth_port]);
	uint16_t fl = (uint16_t)rte_pktmbuf_pkt_len(f);
	uint8_t *p = m ? (uint8_t *)rte_pktmbuf_append(m, (uint16_t)(RP_HDRS + fl)) : NULL;
	if (!p) {
		rte_pktmbuf_free(m);
		return NULL;
	}
	memcpy(p + RP_HDRS, rte_pktmbuf_mtod(f, const void *), fl);
	if (rp_auth_is_peer(&r->auth, o->key))
		reseal(o, run, f, p + RP_HDRS + fl - RP_AUTH_LEN, &payload_sum);
	rp_build_udp(p, o->mac, r->mac[o->eth_port].addr_bytes, r->cf.ip[o->eth_port], o->ip,
		     r->cf.data_port, o->data_port, fl, payload_sum, l->ip_id++);
	offload_csum(r, m, o->eth_port);
	return m;
}

/* The fan-out method: a header mbuf for s chained to a clone of f; per
 * hop, the clone stops before the upstream's trailer and a third mbuf
 * holds s's own. */
static struct rte_mbuf *output_clone(relay *r, lane *l, const sub_out *o, struct rte_mbuf *f,
				     uint32_t payload_sum, uint64_t run)
{
	struct rte_mbuf *h = rte_pktmbuf_alloc(r->hdr_pool);
	struct rte_mbuf *c = h ? rte_pktmbuf_clone(f, r->clone_pool) : NULL;
	if (!c) {
		rte_pktmbuf_free(h);
		return NULL;
	}
	if (rp_auth_is_peer(&r->auth, o->key)) {
		struct rte_mbuf *t = rte_pktmbuf_alloc(r->hdr_pool);
		uint8_t *tp = t ? (uint8_t *)rte_pktmbuf_append(t, RP_AUTH_LEN) : NULL;
		if (!tp || rte_pktmbuf_trim(c, RP_AUTH_LEN) != 0 || rte_pktmbuf_chain(c, t) != 0) {
			rte_pktmbuf_free(t);
			rte_pktmbuf_free(c);
			rte_pktmbuf_free(h);
			return NULL;
		}
		reseal(o, run, f, tp, &payload_sum);
	}
	uint8_t *p = (uint8_t *)rte_pktmbuf_append(h, RP_HDRS);
	rp_build_udp(p, o->mac, r->mac[o->eth_port].addr_bytes, r->cf.ip[o->eth_port], o->ip,
		     r->cf.data_port, o->data_port, (uint16_t)rte_pktmbuf_pkt_len(f), payload_sum,
		     l->ip_id++);
	if (rte_pktmbuf_chain(h, c) != 0) {
		rte_pktmbuf_free(h);
		rte_pktmbuf_free(c);
		return NULL;
	}
	offload_csum(r, h, o->eth_port);
	return h;
}

void relay_emit(relay *r, lane *l, sub *s, struct rte_mbuf *f, uint32_t payload_sum,
		uint64_t run)
{
	if (!s->out.has_mac) {
		l->st->c[C_NO_MAC]++;
		return;
	}
	struct rte_mbuf *out = r->cf.copy_fanout ? output_copy(r, l, &s->out, f, payload_sum, run)
						 : output_clone(r, l, &s->out, f, payload_sum, run);
	if (!out) {
		l->st->c[C_NO_MBUF]++;
		s->drops++;
		return;
	}
	deliver(r, l, s, out);
}

/* The repair cache's release callback: its reference to a frame. */
void relay_mbuf_drop(void *ctx, void *obj)
{
	(void)ctx;
	rte_pktmbuf_free(obj);
}

void relay_tx_error_cb(struct rte_mbuf **unsent, uint16_t count, void *userdata)
{
	lcore_stats *st = userdata;
	st->c[C_TX_FAIL] += count;
	st->c[C_TX] -= count;
	for (uint16_t i = 0; i < count; i++)
		rte_pktmbuf_free(unsent[i]);
}
