/*
 * datapath.c: bfpatch-relay's packets: RX bursts, classification (on the
 * lcore that received them), fan-out to subscribers, the repair cache's
 * intake, pacing and TX. Workers only receive, classify and hand over
 * through one MP/SC ring; everything after that runs on the core lcore,
 * so nothing here takes a lock.
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
#include <inttypes.h>
#include <limits.h>
#include <string.h>

#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_ip.h>
#include <rte_lcore.h>
#include <rte_udp.h>

#include "bfpatch.h"
#include "relay.h"

/* set by the signal handlers (main.c), polled by the lcore loops below */
volatile sig_atomic_t force_quit, dump_stats;

RTE_LOG_REGISTER(relay_logtype, bfpatch.relay, INFO);

/* The repair cache's release callback: its reference to a frame. */
void relay_mbuf_drop(void *ctx, void *obj)
{
	(void)ctx;
	rte_pktmbuf_free(obj);
}

/* Buffer m for transmit on port (core lcore only); failures are counted
 * by the buffer's error callback. */
void relay_send(relay *r, uint16_t port, struct rte_mbuf *m, lcore_stats *st)
{
	if (!m)
		return;
	st->c[C_TX]++;
	rte_eth_tx_buffer(port, 0, r->txb[port], m);
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
		relay_send(r, s->eth_port, out, st);
		return;
	}
	/* a queued output holds its frame's RX mbuf: slow subscribers must
	 * not take the mbufs the ports receive with, or one of them would
	 * stop the relay for everyone (JOINs and ARP included); with a pool
	 * on each of several sockets, any pool short is short (one count
	 * serves a NACK answer's frames from every port) */
	if (r->rx_short < 0) {
		r->rx_short = 0;
		for (unsigned i = 0; i < r->n_rx_pools; i++)
			r->rx_short |= rte_mempool_avail_count(r->rx_pools[i]) < r->rx_reserve;
	}
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
	struct rte_mbuf *m = rte_pktmbuf_alloc(r->pool[s->eth_port]);
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
void relay_emit(relay *r, sub *s, struct rte_mbuf *f, uint32_t payload_sum,
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
	uint32_t n = rp_cache_drop_version(&r->cache, cm, version, relay_mbuf_drop, NULL);
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
	/* with --key, relay_rx_classify has checked its signature */
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
	if (model) /* 0 stands for every model in relay_latest_note() */
		relay_latest_note(r, model, version, 0);
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
			relay_emit(r, s, m, sum, st);
	}
	/* the cache holds its own reference, released on eviction */
	rte_mbuf_refcnt_update(m, 1);
	uint64_t cm = cache_model(model, key);
	cache_check_remade(r, cm, version, index, f, l4_len, st);
	int put = rp_cache_put(&r->cache, cm, version, index, l4_len, m, relay_mbuf_drop, NULL);
	if (put == 1)
		st->c[C_CACHE_STORED]++;
	else
		rte_mbuf_refcnt_update(m, -1);
	rte_pktmbuf_free(m);
}

/* Classify on the receiving lcore; drops are counted and freed there, so
 * garbage never reaches the core lcore. Keeps the class and UDP payload
 * length in the mbuf (hash.usr) for the core. Returns 0 if consumed. */
int relay_rx_classify(relay *r, struct rte_mbuf *m, lcore_stats *st)
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
	 * are checked there (relay_on_control). */
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

/* Handle one packet that relay_rx_classify() kept; consumes m. */
void relay_core_packet(relay *r, struct rte_mbuf *m, lcore_stats *st)
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
		relay_on_control(r, m, &k, st);
		break;
	case RP_ARP_REQUEST:
		if (rp_arp_reply_inplace(rte_pktmbuf_mtod(m, uint8_t *), rte_pktmbuf_data_len(m),
					 r->mac[m->port].addr_bytes) == 0) {
			relay_send(r, m->port, m, st);
			return;
		}
		break;
	case RP_ARP_REPLY:
		relay_on_arp_reply(r, &k);
		break;
	default:
		break;
	}
	rte_pktmbuf_free(m);
}

void relay_pace(relay *r, lcore_stats *st)
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
			relay_send(r, s->eth_port, s->held, st);
			s->held = NULL;
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
			if (relay_rx_classify(r, pkts[i], st))
				pkts[keep++] = pkts[i];
		if (direct) {
			for (uint16_t i = 0; i < keep; i++)
				relay_core_packet(r, pkts[i], st);
			continue;
		}
		unsigned done = rte_ring_enqueue_burst(r->inbound, (void **)pkts, keep, NULL);
		st->c[C_INBOUND_FULL] += keep - done;
		for (unsigned i = done; i < keep; i++)
			rte_pktmbuf_free(pkts[i]);
	}
}

int relay_worker_main(void *arg)
{
	relay *r = arg;
	unsigned lc = rte_lcore_id();
	if (r->worker_q[lc] == UINT_MAX)
		return 0; /* more workers than RX queues */
	while (!force_quit)
		rx_queue_poll(r, r->worker_q[lc], &r->stats[lc], 0);
	return 0;
}

void relay_core_main(relay *r)
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
				relay_core_packet(r, pkts[i], st);
		}
		relay_pace(r, st);
		if (now - last_flush > drain) { /* TX drained on a timer */
			for (uint16_t p = 0; p < r->n_ports; p++)
				rte_eth_tx_buffer_flush(p, 0, r->txb[p]);
			last_flush = now;
		}
		if (now >= next_hk) {
			relay_housekeeping(r, st);
			next_hk = now + r->hz; /* once a second */
		}
		if (dump_stats) { /* SIGUSR1: the counters, as at exit */
			dump_stats = 0;
			relay_print_stats(r, stdout);
			fflush(stdout);
		}
	}
	force_quit = 1;
	for (uint16_t p = 0; p < r->n_ports; p++)
		rte_eth_tx_buffer_flush(p, 0, r->txb[p]);
}

void relay_tx_error_cb(struct rte_mbuf **unsent, uint16_t count, void *userdata)
{
	lcore_stats *st = userdata;
	st->c[C_TX_FAIL] += count;
	st->c[C_TX] -= count;
	for (uint16_t i = 0; i < count; i++)
		rte_pktmbuf_free(unsent[i]);
}
