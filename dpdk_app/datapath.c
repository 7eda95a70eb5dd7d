/*
 * datapath.c: bfpatch-relay's packets: RX bursts, classification (on the
 * lcore that received them), a frame's way to its subscribers (output.c
 * makes each output), the repair cache's intake, pacing and the lcore
 * loops. Workers only receive, classify and hand over through one MP/SC
 * ring; everything after that runs on the core lcore, but for the outputs
 * of subscribers that fan-out lanes own (fanout.c), so nothing here takes
 * a lock.
 */
#include <inttypes.h>
#include <limits.h>
#include <string.h>

#include <rte_byteorder.h>
#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_ip.h>
#include <rte_lcore.h>
#include <rte_prefetch.h>
#include <rte_udp.h>

#include "bfpatch.h"
#include "relay.h"

/* set by the signal handlers (main.c), polled by the lcore loops below */
volatile sig_atomic_t force_quit, dump_stats;

RTE_LOG_REGISTER(relay_logtype, bfpatch.relay, INFO);

/* A frame whose (model, version, index) is cached with another target
 * hash (FORMAT.md 2.1; not merely another CRC: a NACK answer carries the
 * frame count its streamed copy left 0) and whose own CRC holds: its
 * publisher started over and made this version again (a trainer resumed
 * from an earlier checkpoint), so every cached frame of the version is of
 * the old run and would answer NACKs with frames that fail their hash
 * checks. They are dropped; the new frames are cached as they come. */
static void cache_check_remade(relay *r, uint64_t cm, uint32_t version, const uint8_t *f,
			       size_t len, lcore_stats *st)
{
	bfp_frame_header h;
	size_t flen;
	if (bfp_frame_length(f, len, &flen) != BFP_OK || bfp_frame_parse(f, flen, &h) != BFP_OK)
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
	/* with --key, relay_rx_classify has checked its signature; here, on
	 * the lcore that keeps the run, that it is of the run followed: one
	 * of another run (a capture, or from before a rollback) is neither
	 * relayed nor cached, so it evicts nothing. A relay without
	 * --upstream has no HEARTBEAT to learn the run from: it follows the
	 * run of the first frame (docs/SECURITY.md "Runs"). */
	if (r->auth.n_keys) {
		uint64_t run = rp_auth_msg_run(&r->auth, f, l4_len - RP_AUTH_LEN);
		if (!r->auth.run && !r->cf.upstream_ip && run)
			relay_follow_run(r, run, st);
		if (!r->auth.run || run != r->auth.run) {
			st->c[C_OTHER_RUN]++;
			rte_pktmbuf_free(m);
			return;
		}
	}
	uint64_t model; /* FORMAT.md 2.1, little-endian fields */
	uint32_t version, index;
	memcpy(&model, f + 8, 8);
	memcpy(&version, f + 20, 4);
	memcpy(&index, f + 24, 4);
	model = rte_le_to_cpu_64(model);
	version = rte_le_to_cpu_32(version);
	index = rte_le_to_cpu_32(index);
	/* a frame of a keyframe stream, not of a patch (FORMAT.md 2.1), and
	 * its key in the repair cache */
	const int key = !bfp_encoding_is_delta(f[5]) && !(f[6] & BFP_FLAG_IN_PATCH);
	const uint64_t cm = cache_model(model, key);
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
	/* a copy the cache holds (the same target hash bytes, kept in its
	 * entry so that the cached frame is not read) is not stored again:
	 * then nothing keeps m after its outputs, and the fan-out sends m
	 * itself as one of them (fanout.c), as ipv4_multicast sends its last
	 * output in the input mbuf. Else the cache takes this reference,
	 * released on eviction, and the outputs hold their own: the last of
	 * them m itself, its headers in its headroom, where no lane but this
	 * lcore's takes the frame (FAN_STORE: written before the cache, and
	 * so a NACK answer, can reach m). A frame of a keyframe stream goes
	 * only to those that asked for one (fanout.c) */
	uint64_t tag;
	memcpy(&tag, f + 48, 8);
	const rp_cache_entry *e = rp_cache_find(&r->cache, cm, version, index);
	if (e && e->tag == tag) {
		relay_fanout(r, m, model, version, key, sum, FAN_OWN, st); /* consumes m */
		return;
	}
	relay_fanout(r, m, model, version, key, sum, FAN_STORE, st);
	if (e)
		cache_check_remade(r, cm, version, f, l4_len, st);
	/* not found above, and the fan-out leaves the cache alone */
	if ((e ? rp_cache_put_tagged : rp_cache_put_absent)(&r->cache, cm, version, index, l4_len,
							    tag, m, relay_mbuf_evict, r) == 1)
		st->c[C_CACHE_STORED]++;
	else
		rte_pktmbuf_free(m); /* not kept */
}

/* Frames ahead of the one being handled whose eviction is prepared: a
 * relay in steady state evicts about one cached frame per frame it
 * stores, and an old frame's index slot is cold. Loaded a few frames
 * ahead, not a burst: a burst's payloads would push them out of the
 * nearest cache again before their turn. (The evicted mbufs are read
 * when they are freed, after the burst: relay_evicted_free.) */
#define EVICT_AHEAD 4

/* The index slot of the cached frame that the frame EVICT_AHEAD after the
 * one about to be handled would evict once the cache is full, loaded
 * ahead of the eviction. */
static inline void cache_prefetch_evictee(const relay *r)
{
	const rp_cache *c = &r->cache;
	if (c->len + EVICT_AHEAD <= c->cap &&
	    c->bytes + (uint64_t)EVICT_AHEAD * r->cf.mbuf_size <= c->budget)
		return; /* room for them: nothing evicted */
	rp_cache_prefetch_evictee(c, EVICT_AHEAD);
}

/* Classify on the receiving lcore; drops are counted and freed there, so
 * garbage never reaches the core lcore. Keeps the class and UDP payload
 * length in the mbuf (hash.usr) for the core. Returns 0 if consumed. */
int relay_rx_classify(relay *r, struct rte_mbuf *m, lcore_stats *st)
{
	rp_pkt k;
	rp_class cls = RP_DROP_SHORT;
	/* UDP checksums (PROTOCOL.md 1): one the NIC checked is not summed
	 * again, and one no NIC checked is not checked here either: each
	 * output's checksum is derived from it (RFC 1624), so it holds
	 * exactly when the input's did and the receiver drops what was
	 * corrupted before the relay, which never sums the payload on this
	 * path. With --key the tag covers the payload; only a frame whose tag
	 * fails is summed (below), so that drop_auth counts forgeries and
	 * drop_udp line errors. */
	const uint64_t ck = m->ol_flags & (RTE_MBUF_F_RX_L4_CKSUM_MASK | RTE_MBUF_F_RX_IP_CKSUM_MASK);
	const int nic_good = (ck & RTE_MBUF_F_RX_L4_CKSUM_MASK) == RTE_MBUF_F_RX_L4_CKSUM_GOOD;
	if ((ck & RTE_MBUF_F_RX_IP_CKSUM_MASK) == RTE_MBUF_F_RX_IP_CKSUM_BAD)
		cls = RP_DROP_IP;
	else if ((ck & RTE_MBUF_F_RX_L4_CKSUM_MASK) == RTE_MBUF_F_RX_L4_CKSUM_BAD)
		cls = RP_DROP_UDP;
	else if (m->nb_segs == 1)
		cls = rp_classify(rte_pktmbuf_mtod(m, const uint8_t *), rte_pktmbuf_data_len(m),
				  &r->addrs_nosum, &k);
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
	const uint8_t *u = rte_pktmbuf_mtod_offset(m, const uint8_t *, RP_ETH_LEN + RP_IP_LEN);
	const int unchecked = cls == RP_DATA && !nic_good && !r->addrs.check_crc && (u[6] | u[7]);
	if (cls == RP_DATA && r->auth.n_keys &&
	    rp_auth_open(&r->auth, rte_pktmbuf_mtod(m, const uint8_t *) + k.l4_off, k.l4_len, 0,
			 0, &flen) != RP_AUTH_OK) {
		/* forged or tampered, or corrupted on the line (its UDP
		 * checksum, unchecked so far, fails): not relayed either way */
		const int summable = !nic_good && (u[6] | u[7]);
		m->hash.fdir.hi = k.payload_sum;
		m->hash.usr = SUM_UNCHECKED;
		if (summable && rte_pktmbuf_adj(m, (uint16_t)k.l4_off) &&
		    rte_pktmbuf_trim(m, (uint16_t)(rte_pktmbuf_pkt_len(m) - k.l4_len)) == 0 &&
		    !relay_cached_sum_ok(m)) {
			st->cls[RP_DATA]--;
			st->cls[RP_DROP_UDP]++;
		} else {
			st->c[C_AUTH_FAIL]++;
		}
		rte_pktmbuf_free(m);
		return 0;
	}
	m->hash.usr = (uint32_t)cls << 16 | k.l4_len | (unchecked ? SUM_UNCHECKED : 0);
	m->hash.fdir.hi = k.payload_sum; /* kept while the frame is cached */
	return 1;
}

int relay_cached_sum_ok(struct rte_mbuf *f)
{
	if (!(f->hash.usr & SUM_UNCHECKED))
		return 1;
	const uint16_t off = relay_frame_off(f);
	uint16_t want = rp_fold(f->hash.fdir.hi), got = rp_fold(rp_sum(
		rte_pktmbuf_mtod_offset(f, const void *, off), rte_pktmbuf_pkt_len(f) - off, 0));
	/* one's complement: 0 and 0xFFFF are both zero */
	if (want != got && !((want == 0 || want == 0xFFFF) && (got == 0 || got == 0xFFFF)))
		return 0;
	f->hash.usr &= ~SUM_UNCHECKED;
	return 1;
}

/* Handle one packet that relay_rx_classify() kept; consumes m. */
void relay_core_packet(relay *r, struct rte_mbuf *m, lcore_stats *st)
{
	rp_pkt k;
	rp_class cls = (rp_class)((m->hash.usr & ~(SUM_UNCHECKED | FRAME_BEHIND)) >> 16);
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

/* Lane l's queued outputs, as their subscribers' tokens allow. */
void relay_pace(relay *r, lane *l)
{
	if (!l->queued_mask)
		return;
	uint64_t now = rte_get_tsc_cycles();
	for (uint64_t u = l->queued_mask; u; u &= u - 1) {
		const unsigned i = (unsigned)__builtin_ctzll(u);
		sub *s = &r->subs[i];
		for (unsigned n = 0; n < BURST; n++) {
			if (!s->held && rte_ring_dequeue(s->q, (void **)&s->held) != 0) {
				l->queued_mask &= ~(1ull << i); /* nothing left */
				break;
			}
			uint32_t len = rte_pktmbuf_pkt_len(s->held);
			if (!rp_bucket_take(&s->bucket, len, now, r->hz))
				break;
			s->tx_pkts++;
			s->tx_bytes += len;
			relay_lane_send(l, s->out.eth_port, s->held);
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
		if (direct) {
			/* each packet handled as it is classified, while its mbuf
			 * and headers are in the CPU's nearest cache: the mbuf
			 * two packets ahead, whose data address the next packet's
			 * headers are loaded from (a burst's payloads push the
			 * mbufs the PMD wrote out of that cache) */
			if (n)
				rte_prefetch0(pkts[0]);
			for (uint16_t i = 0; i < n; i++) {
				if (i + 2 < n)
					rte_prefetch0(pkts[i + 2]);
				if (i + 1 < n) /* its headers, read next */
					rte_prefetch0(rte_pktmbuf_mtod(pkts[i + 1], const void *));
				cache_prefetch_evictee(r);
				if (relay_rx_classify(r, pkts[i], st))
					relay_core_packet(r, pkts[i], st);
			}
			relay_evicted_free(r);
			relay_lanes_flush(r, st);
			continue;
		}
		uint16_t keep = 0;
		for (uint16_t i = 0; i < n; i++) {
			if (i + 1 < n)
				rte_prefetch0(rte_pktmbuf_mtod(pkts[i + 1], const void *));
			if (relay_rx_classify(r, pkts[i], st))
				pkts[keep++] = pkts[i];
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
	if (r->lane_of[lc])
		return relay_lane_main(r, &r->lanes[r->lane_of[lc]]);
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
		if (r->n_lanes > 1)
			relay_lanes_reclaim(r); /* before RX: mbufs for the PMD to fill */
		if (r->n_lanes > 1 && relay_lanes_full(r)) {
			/* a fan-out lane is behind: packets wait in the ports
			 * (or the inbound ring), and are dropped there if need be */
		} else if (r->n_workers == 0) {
			rx_queue_poll(r, 0, st, 1);
		} else {
			struct rte_mbuf *pkts[BURST];
			unsigned n = rte_ring_dequeue_burst(r->inbound, (void **)pkts, BURST, NULL);
			for (unsigned i = 0; i < n; i++) {
				cache_prefetch_evictee(r);
				relay_core_packet(r, pkts[i], st);
			}
			relay_evicted_free(r);
			relay_lanes_flush(r, st);
		}
		relay_pace(r, &r->lanes[0]);
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
