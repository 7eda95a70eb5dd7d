/*
 * setup.c: what bfpatch-relay runs on, in main()'s order (after EAL): the
 * keys, event log and addresses; mempools sized by formula from the ports,
 * queues and lcores; the repair cache and queues; the ports; the static
 * subscribers; and the teardown that undoes any prefix of these.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <string.h>

#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_malloc.h>

#include "relay.h"

/* RX mbufs the RX rings hold (1024 descriptors a queue and port, filled
 * at start) and the bursts in flight (4 an lcore). */
unsigned relay_rx_rings_of(unsigned n_ports, unsigned nq, unsigned n_workers)
{
	return n_ports * nq * 1024u + 4 * BURST * (n_workers + 1);
}

/* Free RX mbufs paced queues must leave: two bursts a queue and port for
 * the rings to refill with, and the bursts in flight. */
unsigned relay_rx_reserve_of(unsigned n_ports, unsigned nq, unsigned n_workers)
{
	return n_ports * nq * 2 * BURST + 4 * BURST * (n_workers + 1);
}

/* The fewest RX mbufs the relay starts with: the rings', and beside them
 * at least 1024 and four times the reserve (half of it for the cache,
 * half for queues, of which the reserve stays free). */
unsigned relay_rx_min_of(unsigned n_ports, unsigned nq, unsigned n_workers)
{
	unsigned r4 = 4 * relay_rx_reserve_of(n_ports, nq, n_workers);
	return relay_rx_rings_of(n_ports, nq, n_workers) + (r4 > 1024 ? r4 : 1024);
}

/* Repair cache slots: the power of two that covers cache_bytes at 1 KiB a
 * frame (at least 1024; *want), unless half of what the RX rings leave of
 * n_mbufs is less. */
uint32_t relay_cache_cap_of(uint32_t n_mbufs, unsigned rx_need, uint64_t cache_bytes,
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
uint16_t relay_upstream_port(const relay_conf *cf, unsigned n_ports)
{
	for (unsigned p = 0; p < n_ports && p < MAX_PORTS; p++)
		if (cf->prefix[p] && !((cf->upstream_ip ^ cf->ip[p]) & prefix_mask(cf->prefix[p])))
			return (uint16_t)p;
	for (unsigned p = 0; p < n_ports && p < MAX_PORTS; p++)
		if (cf->gateway[p])
			return (uint16_t)p;
	return 0;
}

/* Worker lcores that receive: those the fan-out lanes beyond the main
 * lcore leave (fanout.c; too few is refused by relay_lanes_place). */
static unsigned rx_workers(const relay *r)
{
	unsigned workers = rte_lcore_count() - 1, lanes = r->cf.fanout_lanes ? r->cf.fanout_lanes : 1;
	return workers > lanes - 1 ? workers - (lanes - 1) : 0;
}

/* The NUMA socket of a port's device, or the main lcore's where the
 * device does not say (virtual devices). */
static int port_socket(uint16_t port)
{
	int socket = rte_eth_dev_socket_id(port);
	return socket == SOCKET_ID_ANY || socket < 0 ? (int)rte_socket_id() : socket;
}

/* The RX pool of port's socket, made the first time that socket is
 * asked for; NULL if it cannot be. Each mbuf's private area holds a
 * hold slot for every fan-out lane but the main lcore's (lane_hold). */
static struct rte_mempool *rx_pool_of(relay *r, uint16_t port)
{
	const int socket = port_socket(port);
	for (unsigned i = 0; i < r->n_rx_pools; i++)
		if (r->rx_pools[i]->socket_id == socket)
			return r->rx_pools[i];
	char name[RTE_MEMPOOL_NAMESIZE];
	snprintf(name, sizeof(name), "rx%d", socket);
	struct rte_mempool *mp = rte_pktmbuf_pool_create(
		name, r->cf.n_mbufs, 256, (uint16_t)((r->n_lanes - 1) * sizeof(lane_hold)),
		(uint16_t)(r->cf.mbuf_size + RTE_PKTMBUF_HEADROOM), socket);
	if (mp)
		r->rx_pools[r->n_rx_pools++] = mp;
	return mp;
}

/* The keys, the event log, the ports there are and each port's
 * address. */
int relay_prepare(relay *r)
{
	r->hz = rte_get_tsc_hz();
	for (unsigned i = 0; i < r->cf.n_keys; i++) {
		char err[512] = "libsodium did not initialise";
		if (rp_auth_init() || rp_auth_load(&r->auth, r->cf.key_paths[i], err, sizeof(err))) {
			RELAY_LOG(ERR, "%s\n", err);
			return -1;
		}
	}
	char perr[512];
	if (r->cf.peer_keys && rp_auth_load_peers(&r->auth, r->cf.peer_keys, perr, sizeof(perr))) {
		RELAY_LOG(ERR, "%s\n", perr);
		return -1;
	}
	if (events_open(&r->ev, r->cf.events_path, "relay", r->cf.name)) {
		RELAY_LOG(ERR, "--events %s: %s\n", r->cf.events_path, strerror(errno));
		return -1;
	}
	r->n_ports = rte_eth_dev_count_avail();
	if (r->n_ports == 0 || r->n_ports > MAX_PORTS) {
		RELAY_LOG(ERR, "need 1..%d ports (got %u); add --vdev=...\n", MAX_PORTS,
			  r->n_ports);
		r->n_ports = 0;
		return -1;
	}
	for (unsigned p = 0; p < MAX_PORTS; p++)
		if ((p < r->cf.n_ip && r->cf.ip[p] && p >= r->n_ports) ||
		    (r->cf.gateway[p] && p >= r->n_ports)) {
			RELAY_LOG(ERR, "--%s %u:...: there is no DPDK port %u (%u port%s: 0..%u)\n",
				  p < r->cf.n_ip && r->cf.ip[p] ? "ip" : "gateway", p, p,
				  r->n_ports, r->n_ports == 1 ? "" : "s", r->n_ports - 1);
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
	r->up_port = relay_upstream_port(&r->cf, r->n_ports);
	r->addrs.data_port = r->cf.data_port;
	r->addrs.control_port = r->cf.control_port;
	r->addrs.check_crc = r->cf.check_crc;
	/* the same, taking a data frame's payload sum from its UDP checksum
	 * (relay_rx_classify says when) */
	r->addrs_nosum = r->addrs;
	r->addrs_nosum.udp_sum_from_header = 1;
	return 0;
}

/* The mempools, the inbound ring, the repair cache and the subscribers'
 * queues. The RX pool holds the rings, the bursts in flight and the repair
 * cache's frames; header and clone pools one entry per output queued. */
int relay_pools_create(relay *r)
{
	unsigned n_workers = rx_workers(r), nq = n_workers ? n_workers : 1;
	if (relay_lanes_create(r)) {
		RELAY_LOG(ERR, "cannot create the fan-out rings: %s\n", rte_strerror(rte_errno));
		return -1;
	}
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
	const unsigned rx_need = relay_rx_rings_of(r->n_ports, nq, n_workers);
	/* the default grows with ports and queues: room for the rings, the
	 * reserve and a cache of 2048 frames beside as many queued */
	const unsigned rx_min = relay_rx_min_of(r->n_ports, nq, n_workers);
	while (!r->cf.n_mbufs_given && r->cf.n_mbufs < rx_min + 4096)
		r->cf.n_mbufs = r->cf.n_mbufs * 2 + 1;
	if (r->cf.n_mbufs < rx_min) {
		RELAY_LOG(ERR, "--mbufs %u is too few: the RX rings of %u port(s) x %u queue(s) "
			  "take %u; give at least %u\n", r->cf.n_mbufs, r->n_ports, nq, rx_need,
			  rx_min);
		return -1;
	}
	/* each port receives into a pool on its own NUMA socket, where its
	 * NIC writes; ports on one socket share it. Each pool holds all of
	 * --mbufs, sized as if its ports took every ring and the whole cache:
	 * one socket's ports may carry all the traffic. Headers and clones are
	 * written by the core lcore, so their pools are on its socket. */
	for (uint16_t p = 0; p < r->n_ports; p++)
		if (!(r->pool[p] = rx_pool_of(r, p))) {
			RELAY_LOG(ERR, "cannot create pools: %s\n", rte_strerror(rte_errno));
			return -1;
		}
	r->hdr_pool = rte_pktmbuf_pool_create("hdr", OUT_POOL_N, 256, 0,
					      HDR_ROOM + RTE_PKTMBUF_HEADROOM, (int)rte_socket_id());
	r->clone_pool = rte_pktmbuf_pool_create("clone", OUT_POOL_N, 256, 0, 0,
						(int)rte_socket_id());
	r->inbound = rte_ring_create("inbound", 4096, (int)rte_socket_id(), RING_F_SC_DEQ);
	if (!r->hdr_pool || !r->clone_pool || !r->inbound) {
		RELAY_LOG(ERR, "cannot create pools: %s\n", rte_strerror(rte_errno));
		return -1;
	}
	/* cache index sized for the budget at 1 kB frames, at least 1024; the
	 * cache holds RX mbufs, so at most half of what the RX rings leave of
	 * the pool, or a full cache would leave no mbuf to receive with (not
	 * even JOINs), nor for the frames paced queues hold */
	uint32_t want;
	uint32_t cap = relay_cache_cap_of(r->cf.n_mbufs, rx_need, r->cf.cache_bytes, &want);
	if (cap < want && r->cf.cache_bytes_given)
		RELAY_LOG(WARNING, "warning: the repair cache holds at most %u frames, half of "
			  "what --mbufs %u leaves beside the RX rings (%u) (about %.0f MB of "
			  "1200-byte frames, %.0f MB of 8900-byte ones), less than --cache-bytes %"
			  PRIu64 " asks for; give --mbufs %u to use it all\n", cap, r->cf.n_mbufs,
			  rx_need, cap * 1200.0 / 1e6, cap * 8900.0 / 1e6, r->cf.cache_bytes,
			  2 * want + rx_need);
	r->cache_ring = rte_zmalloc("cache_ring", cap * sizeof(rp_cache_entry), 0);
	r->cache_hash = rte_zmalloc("cache_hash", 2 * cap * sizeof(uint64_t), 0);
	if (!r->cache_ring || !r->cache_hash ||
	    rp_cache_init(&r->cache, r->cache_ring, r->cache_hash, cap, r->cf.cache_bytes,
			  r->cf.cache_versions)) {
		RELAY_LOG(ERR, "out of memory for the cache\n");
		return -1;
	}
	for (unsigned i = 0; i < MAX_SUBS; i++) {
		char name[32];
		snprintf(name, sizeof(name), "subq%u", i);
		r->subs[i].q = rte_ring_create(name, r->cf.queue_len, (int)rte_socket_id(),
					       RING_F_SP_ENQ | RING_F_SC_DEQ);
		if (!r->subs[i].q) {
			RELAY_LOG(ERR, "cannot create queues: %s\n", rte_strerror(rte_errno));
			return -1;
		}
	}
	r->n_rxq = nq;
	/* the free mbufs paced queues leave: what the RX rings take to refill
	 * (two bursts a queue and port) and the bursts in flight; the rings'
	 * own descriptors are already out of the pool */
	r->rx_reserve = relay_rx_reserve_of(r->n_ports, nq, n_workers);
	return 0;
}

/* One port: nq RX queues on the RX pool, checksum offload and jumbo
 * frames where it has them, a TX buffer, started. 0 or a negative errno. */
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
	/* and checked by the NIC on receive where it can: the relay then
	 * reads only headers (relay_rx_classify) */
	const uint64_t rck = RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_UDP_CKSUM;
	if ((info.rx_offload_capa & rck) == rck)
		conf.rxmode.offloads |= rck;
	if (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS)
		conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
	/* TX goes through queue k for fan-out lane k (queue 0: the main
	 * lcore); some PMDs (net_tap) want as many TX queues as RX ones, so
	 * any beyond the lanes are set up unused. A port with fewer than the
	 * lanes serves its subscribers from the lanes it has queues for. */
	uint16_t ntq = nq <= info.max_tx_queues ? nq : 1;
	if (ntq < r->n_lanes) {
		const unsigned fit = RTE_MIN(r->n_lanes, info.max_tx_queues);
		ntq = (uint16_t)(fit ? fit : 1);
	}
	r->n_txq[port] = (uint16_t)RTE_MIN(ntq, r->n_lanes);
	if (r->n_txq[port] < r->n_lanes)
		RELAY_LOG(WARNING, "port %u has %u TX queue(s): its subscribers go to %u of the %u "
			  "fan-out lcores\n", port, ntq, r->n_txq[port], r->n_lanes);
	rc = rte_eth_dev_configure(port, nq, ntq, &conf);
	if (rc)
		return rc;
	uint16_t nrx = 1024, ntx = 1024;
	rc = rte_eth_dev_adjust_nb_rx_tx_desc(port, &nrx, &ntx);
	if (rc)
		return rc;
	const int socket = port_socket(port);
	for (uint16_t q = 0; q < nq; q++) {
		rc = rte_eth_rx_queue_setup(port, q, nrx, (unsigned)socket, NULL, r->pool[port]);
		if (rc)
			return rc;
	}
	for (uint16_t q = 0; q < ntq; q++) {
		rc = rte_eth_tx_queue_setup(port, q, ntx, (unsigned)socket, NULL);
		if (rc)
			return rc;
	}
	/* a TX buffer per lane with a queue here, failures counted on its
	 * lane's counters; lane 0's is the main lcore's (relay_send) */
	for (unsigned k = 0; k < r->n_txq[port]; k++) {
		lane *l = &r->lanes[k];
		l->txb[port] = rte_zmalloc_socket("txb", RTE_ETH_TX_BUFFER_SIZE(BURST), 0, socket);
		if (!l->txb[port])
			return -ENOMEM;
		rte_eth_tx_buffer_init(l->txb[port], BURST);
		rte_eth_tx_buffer_set_err_callback(l->txb[port], relay_tx_error_cb, l->st);
	}
	r->txb[port] = r->lanes[0].txb[port];
	rc = rte_eth_dev_start(port);
	if (rc)
		return rc;
	rte_eth_promiscuous_enable(port); /* not all PMDs can; harmless */
	return rte_eth_macaddr_get(port, &r->mac[port]);
}

/* Each port configured with r->n_rxq RX queues and started; RX queues
 * given to the worker lcores. */
int relay_ports_start(relay *r)
{
	unsigned n_workers = rx_workers(r);
	if (relay_lanes_place(r))
		return -1;
	for (uint16_t p = 0; p < r->n_ports; p++) {
		int rc = port_init(r, p, r->n_rxq);
		if (rc) {
			RELAY_LOG(ERR, "port %u: %s\n", p, rte_strerror(-rc));
			return -1;
		}
	}
	/* one worker per RX queue; workers beyond the queues stay idle, since
	 * a queue cannot be shared without a lock */
	unsigned lc, qi = 0;
	RTE_LCORE_FOREACH_WORKER(lc) {
		if (r->lane_of[lc])
			continue; /* a fan-out lane (relay_lanes_place) */
		r->worker_q[lc] = qi < r->n_rxq ? qi : UINT_MAX;
		qi++;
	}
	r->n_workers = n_workers < r->n_rxq ? n_workers : r->n_rxq;
	if (n_workers > r->n_rxq)
		RELAY_LOG(WARNING, "%u RX queue(s) per port: %u worker lcore(s) idle\n", r->n_rxq,
			  n_workers - r->n_rxq);
	return 0;
}

/* Wait for every port's link, as DPDK's l2fwd does: up to 9 s, looked at
 * every 100 ms (virtual devices are up at once, a NIC takes a few seconds
 * to negotiate), then say how each port is. A port still down does not
 * stop the relay, which forwards on it once it comes up. Returns the
 * ports still down. */
unsigned relay_links_wait(relay *r)
{
	enum { CHECK_MS = 100, WAIT_MS = 9000 };
	unsigned down = 0, waited = 0;
	for (;;) {
		down = 0;
		for (uint16_t p = 0; p < r->n_ports; p++) {
			struct rte_eth_link link;
			memset(&link, 0, sizeof(link));
			if (rte_eth_link_get_nowait(p, &link) < 0 ||
			    link.link_status == RTE_ETH_LINK_DOWN)
				down++;
		}
		if (!down || waited >= WAIT_MS || force_quit)
			break;
		rte_delay_ms(CHECK_MS);
		waited += CHECK_MS;
	}
	for (uint16_t p = 0; p < r->n_ports; p++) {
		struct rte_eth_link link;
		memset(&link, 0, sizeof(link));
		if (rte_eth_link_get_nowait(p, &link) < 0 || link.link_status == RTE_ETH_LINK_DOWN)
			RELAY_LOG(WARNING, "port %u: link down after %.1f s; forwarding on it starts "
				  "when it comes up\n", p, waited / 1000.0);
		else if (link.link_speed == RTE_ETH_SPEED_NUM_NONE ||
			 link.link_speed == RTE_ETH_SPEED_NUM_UNKNOWN)
			RELAY_LOG(INFO, "port %u: link up\n", p);
		else /* rte_eth_link_to_str() is still experimental in 22.11 */
			RELAY_LOG(INFO, "port %u: link up, %u Mbps, %s duplex\n", p, link.link_speed,
				  link.link_duplex == RTE_ETH_LINK_FULL_DUPLEX ? "full" : "half");
	}
	return down;
}

/* The --subscriber entries, in the table for good. */
int relay_static_subs(relay *r)
{
	lcore_stats *st = &r->stats[rte_lcore_id()];
	for (unsigned i = 0; i < r->cf.n_subs; i++) {
		const sub_conf *sc = &r->cf.subs[i];
		if (sc->eth_port >= r->n_ports) {
			RELAY_LOG(ERR, "subscriber %u: no port %u\n", i, sc->eth_port);
			return -1;
		}
		sub *s = relay_sub_add(r, sc->ip, sc->port, sc->eth_port, sc->rate_bps, st);
		if (!s) {
			RELAY_LOG(ERR, "too many subscribers\n");
			return -1;
		}
		s->is_static = 1;
		if (sc->has_key && !(s->key = rp_auth_peer(&r->auth, sc->key_id))) {
			RELAY_LOG(ERR, "subscriber %u: key %u is not among --peer-keys\n", i,
				  sc->key_id);
			return -1;
		}
		if (sc->has_mac) {
			memcpy(s->mac, sc->mac, 6);
			s->mac_from = MAC_CONF;
		}
		relay_sub_sync(r, s, 0);
	}
	return 0;
}

/* Stops and closes the ports, frees everything the steps above took,
 * then r. */
void relay_teardown(relay *r)
{
	events_close(&r->ev);
	rp_auth_free(&r->auth);
	for (uint16_t p = 0; p < r->n_ports; p++) {
		rte_eth_dev_stop(p);
		rte_eth_dev_close(p);
	}
	/* the lanes have stopped: what they were handed and what they hold
	 * (a subscriber freed but not yet flushed by its lane included) */
	relay_lanes_drain(r);
	for (unsigned i = 0; i < MAX_SUBS; i++) {
		if (!r->subs[i].q)
			continue;
		relay_sub_flush(&r->subs[i]);
		rte_ring_free(r->subs[i].q);
	}
	while (relay_lanes_reclaim(r)) /* what the flushes gave back */
		;
	relay_evicted_free(r);
	if (r->cache_ring && r->cache_hash)
		rp_cache_clear(&r->cache, relay_mbuf_drop, NULL);
	rte_free(r->cache_ring);
	rte_free(r->cache_hash);
	for (unsigned k = 0; k < MAX_LANES; k++) {
		for (uint16_t p = 0; p < MAX_PORTS; p++)
			rte_free(r->lanes[k].txb[p]);
		rte_ring_free(r->lanes[k].jobs);
		rte_ring_free(r->lanes[k].done);
	}
	rte_ring_free(r->inbound);
	for (unsigned i = 0; i < r->n_rx_pools; i++)
		rte_mempool_free(r->rx_pools[i]);
	rte_mempool_free(r->hdr_pool);
	rte_mempool_free(r->clone_pool);
	rte_free(r);
}

