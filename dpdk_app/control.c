/*
 * control.c: bfpatch-relay's control plane, on the core lcore: JOIN,
 * LEAVE, NACK and HEARTBEAT (PROTOCOL.md), the subscriber table, NACKs
 * answered from the repair cache or asked of the upstream, ARP, the
 * once-a-second housekeeping, and the counters' readers (telemetry, exit).
 * A subscriber's changes reach the lane that makes its outputs as a SYNC
 * (fanout.c).
 */
#include <inttypes.h>
#include <stddef.h>
#include <string.h>
#include <arpa/inet.h>

#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_telemetry.h>

#include "relay.h"

static const char *const cnames[C_COUNT] = {
	"rx", "tx", "fanout_copies", "drop_queue_full", "drop_inbound_full",
	"drop_no_mbuf", "drop_no_mac", "cache_hits", "cache_misses", "nacks",
	"nacks_forwarded", "nacks_refused", "joins", "leaves", "expired",
	"drop_control", "cache_stored", "tx_failed", "nack_suppressed", "drop_auth",
	"nack_frames_limited", "drop_bad_version", "nack_frames_unasked", "drop_share_full",
	"cache_replaced", "joins_refused", "drop_rx_reserve", "drop_other_run", "run_changes", "drop_lane_full",
};

static relay *R; /* for the telemetry callbacks only (they take no argument) */

/* News of model m at version v: a frame (newer only), or a HEARTBEAT of
 * the upstream, which knows (set, so a publisher that started over at
 * lower versions is followed). Model 0 (an upstream relay built before
 * per-model HEARTBEATs): every model known. A model beyond those tracked
 * takes the slot with the oldest news. Called for every frame relayed: a
 * frame of the version last noted, the usual case, is no news. */
void relay_latest_note(relay *r, uint64_t m, uint32_t v, int set)
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

const char *relay_ip_str(uint32_t ip, char *buf)
{
	struct in_addr a = {.s_addr = htonl(ip)};
	inet_ntop(AF_INET, &a, buf, INET_ADDRSTRLEN);
	return buf;
}

/* Control message c to dip:dport, signed with key (a subscriber's peer
 * key), or --key when key is NULL. */
static struct rte_mbuf *ctl_packet(relay *r, uint16_t port, const uint8_t dmac[6],
				   uint32_t dip, uint16_t dport, const rp_ctl *c,
				   const rp_key *key, lcore_stats *st)
{
	uint8_t msg[RP_CTL_HDR + 8 * RP_NACK_MAX + 4 + RP_AUTH_LEN];
	size_t n = rp_auth_ctl_build_key(&r->auth, key, msg, sizeof(msg), c);
	struct rte_mbuf *m = rte_pktmbuf_alloc(r->pool[port]);
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

/* The address whose MAC frames to ip leave port with: ip itself on the
 * port's subnet (or with no gateway), else the port's gateway. */
static uint32_t next_hop(const relay *r, uint16_t port, uint32_t ip)
{
	uint32_t mask = prefix_mask(r->cf.prefix[port]);
	if (!r->cf.gateway[port] || ((ip ^ r->cf.ip[port]) & mask) == 0)
		return ip;
	return r->cf.gateway[port];
}

/* Ask for the MAC of the next hop towards ip (relay_on_arp_reply keeps it). */
static void arp_request(relay *r, uint16_t port, uint32_t ip, lcore_stats *st)
{
	ip = next_hop(r, port, ip);

	struct rte_mbuf *m = rte_pktmbuf_alloc(r->pool[port]);
	if (!m) {
		st->c[C_NO_MBUF]++;
		return;
	}
	uint8_t *p = (uint8_t *)rte_pktmbuf_append(m, 60);
	memset(p, 0, 60);
	rp_arp_request(p, r->mac[port].addr_bytes, r->cf.ip[port], ip);
	relay_send(r, port, m, st);
}

/* ---- subscribers ---- */

static sub *sub_find(relay *r, uint32_t ip, uint16_t data_port)
{
	for (unsigned i = 0; i < MAX_SUBS; i++)
		if (r->subs[i].used && r->subs[i].ip == ip && r->subs[i].data_port == data_port)
			return &r->subs[i];
	return NULL;
}

sub *relay_sub_by_control(relay *r, uint32_t ip, uint16_t ctl_port)
{
	for (unsigned i = 0; i < MAX_SUBS; i++)
		if (r->subs[i].used && r->subs[i].ip == ip && r->subs[i].ctl_port == ctl_port)
			return &r->subs[i];
	return NULL;
}

void relay_sub_flush(sub *s)
{
	struct rte_mbuf *m;
	rte_pktmbuf_free(s->held);
	s->held = NULL;
	while (rte_ring_dequeue(s->q, (void **)&m) == 0)
		rte_pktmbuf_free(m);
}

/* A free slot for a subscriber on port eth_port: one of the lane that
 * owns fewest (lanes[i % n_lanes] owns subs[i]), among the lanes with a TX
 * queue on that port; NULL if there is none. */
static sub *free_slot(relay *r, uint16_t eth_port)
{
	const unsigned n_tx = r->n_txq[eth_port] ? r->n_txq[eth_port] : 1;
	sub *best = NULL;
	for (unsigned i = 0; i < MAX_SUBS; i++) {
		sub *s = &r->subs[i];
		const unsigned k = i % r->n_lanes;
		if (!s->used && k < n_tx && (!best || r->lane_subs[k] < r->lane_subs[best->lane]))
			best = s;
	}
	return best;
}

sub *relay_sub_add(relay *r, uint32_t ip, uint16_t data_port, uint16_t eth_port,
		   uint64_t rate_bps, lcore_stats *st)
{
	sub *s = sub_find(r, ip, data_port);
	int fresh = !s;
	if (!s) {
		if (!(s = free_slot(r, eth_port)))
			return NULL;
		/* the control half only: the output half is its lane's, reset
		 * there by the SYNC below */
		memset(s, 0, offsetof(sub, out));
		s->lane = (unsigned)(s - r->subs) % r->n_lanes;
		s->used = 1;
		r->n_used++;
		r->lane_subs[s->lane]++;
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
			    relay_ip_str(ip, a), data_port, rate_bps);
		RELAY_LOG(DEBUG, "subscriber %s:%u on port %u, %" PRIu64 " bit/s (0: the "
			  "default), fan-out lcore %u\n", a, data_port, eth_port, rate_bps, s->lane);
	}
	uint64_t rate = rate_bps ? rate_bps : r->cf.default_rate_bps;
	/* burst: 2 ms at the rate, at least 64 kB, so short bursts pass; a
	 * JOIN (every second) of a subscriber already paced at that rate, or
	 * of a static one (its configured rate stands), keeps its bucket */
	uint64_t burst = rate / 8 / 500 > 65536 ? rate / 8 / 500 : 65536;
	unsigned flags = fresh ? SYNC_FRESH | SYNC_FLUSH : 0;
	if (fresh || (!s->is_static && s->pace_rate != (rate + 7) / 8)) {
		s->pace_rate = (rate + 7) / 8;
		s->pace_burst = burst;
		flags |= SYNC_BUCKET;
	}
	s->last_seen = rte_get_tsc_cycles();
	if (flags)
		relay_sub_sync(r, s, flags);
	return s;
}

void relay_sub_remove(relay *r, sub *s)
{
	if (!s->used)
		return;
	s->used = 0;
	r->n_used--;
	r->lane_subs[s->lane]--;
	relay_sub_sync(r, s, 0); /* its lane flushes what it holds */
}

/* ---- control messages, ARP, housekeeping ---- */

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
					r->cf.upstream_port, want, NULL, st);
	relay_send(r, r->up_port, m, st);
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

/* Tell s the newest version of its model, or of every model for one
 * that JOINed for all (PROTOCOL.md 2.3), bound to the run followed. */
static void sub_heartbeat(relay *r, const sub *s, lcore_stats *st)
{
	if (!s->used || s->mac_from == MAC_NONE || !s->ctl_port)
		return;
	for (unsigned k = 0; k < RP_CACHE_MODELS; k++) {
		const struct model_latest *l = &r->latest[k];
		if (!l->t || (s->model_id && s->model_id != l->id))
			continue;
		rp_ctl c;
		memset(&c, 0, sizeof(c));
		c.type = RP_HEARTBEAT;
		c.model_id = l->id;
		c.version = l->version;
		relay_send(r, s->eth_port, ctl_packet(r, s->eth_port, s->mac, s->ip, s->ctl_port,
						    &c, s->key, st), st);
	}
}

/* Follow run, the one a frame or the upstream's HEARTBEAT named
 * (docs/SECURITY.md "Runs"): the repair cache holds the old run's frames,
 * which no subscriber of the new one takes, so it is emptied. */
void relay_follow_run(relay *r, uint64_t run, lcore_stats *st)
{
	char was[17], now[17];
	rp_auth_run_str(r->auth.run, was);
	rp_auth_run_str(run, now);
	if (r->auth.run) {
		RELAY_LOG(NOTICE, "upstream announced publisher run %s (was %s); repair cache "
			  "emptied\n", now, was);
		st->c[C_RUN_CHANGE]++;
	} else {
		RELAY_LOG(INFO, "following publisher run %s\n", now);
	}
	events_emit(&r->ev, "run", "\"run\":\"%s\",\"was\":\"%s\"", now, r->auth.run ? was : "");
	rp_cache_clear(&r->cache, relay_mbuf_drop, NULL);
	r->auth.run = run;
}

void relay_on_control(relay *r, struct rte_mbuf *m, const rp_pkt *k, lcore_stats *st)
{
	rp_ctl c;
	const uint8_t *p = rte_pktmbuf_mtod(m, const uint8_t *) + k->l4_off;
	size_t len = k->l4_len;
	/* with --key: signed by a key holder, fresh, not seen before from
	 * this sender (each remembered apart: none refuses another's) */
	if (rp_auth_accept_from(&r->auth, k->src_ip, k->src_port, p, len, 1, &len) != RP_AUTH_OK) {
		st->c[C_AUTH_FAIL]++;
		return;
	}
	if (rp_ctl_parse(p, len, &c) != 0) {
		st->c[C_CTL_BAD]++;
		return;
	}
	/* keyed, each message names the run its sender follows
	 * (PROTOCOL.md 4): the upstream's HEARTBEAT announces it; a JOIN may
	 * name any (the HEARTBEAT answering it names ours); a NACK of
	 * another run is a capture, or a subscriber that has not heard of
	 * the new run yet: nothing in the cache is of its run */
	const uint64_t run = rp_auth_msg_run(&r->auth, p, len);
	const int from_up = r->cf.upstream_ip && k->src_ip == r->cf.upstream_ip &&
			    k->src_port == r->cf.upstream_port;
	if (r->auth.n_keys && c.type == RP_NACK && run && run != r->auth.run) {
		st->c[C_OTHER_RUN]++;
		return;
	}
	sub *s;
	char a[INET_ADDRSTRLEN];
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
		s = relay_sub_by_control(r, k->src_ip, k->src_port);
		unsigned moved = 0;
		if (s && !s->is_static && s->data_port != c.data_port &&
		    !sub_find(r, k->src_ip, c.data_port)) {
			moved = SYNC_FLUSH; /* what is queued for the old port goes */
			s->data_port = c.data_port;
		}
		if (!sub_find(r, k->src_ip, c.data_port) && !join_room(r, k->src_ip)) {
			/* a new subscription (one moved above is not) */
			st->c[C_JOIN_REFUSED]++;
			RELAY_LOG(DEBUG, "JOIN from %s:%u refused: --max-per-host %u\n",
				  relay_ip_str(k->src_ip, a), k->src_port, r->cf.max_per_host);
			return;
		}
		s = relay_sub_add(r, k->src_ip, c.data_port, m->port, (uint64_t)c.rate_kbps * 1000, st);
		if (!s) {
			st->c[C_JOIN_REFUSED]++; /* the table is full */
			RELAY_LOG(DEBUG, "JOIN from %s:%u refused: %u subscribers already\n",
				  relay_ip_str(k->src_ip, a), k->src_port, MAX_SUBS);
			return;
		}
		s->ctl_port = k->src_port;
		if (!s->is_static) { /* a static subscriber's model and key are configured */
			const rp_key *key = rp_auth_key_of(&r->auth, p, len);
			s->model_id = c.model_id;
			/* a peer's own key signs what goes to it (SECURITY.md
			 * "Keys per hop") */
			s->key = rp_auth_is_peer(&r->auth, key) ? key : NULL;
		}
		s->join_version = c.version;
		if (c.version == RP_VERSION_NONE) /* ask upstream for keyframes */
			r->want_key = 1;
		if (s->mac_from != MAC_CONF) {
			/* the JOIN's sender: an actor restarted on another NIC
			 * (same address and ports) is followed */
			memcpy(s->mac, k->src_mac, 6);
			s->mac_from = MAC_JOIN;
		}
		relay_sub_sync(r, s, moved);
		st->c[C_JOIN]++;
		sub_heartbeat(r, s, st); /* at once: a keyed subscriber needs the run */
		break;
	case RP_LEAVE:
		s = relay_sub_by_control(r, k->src_ip, k->src_port);
		if (s && !s->is_static) {
			RELAY_LOG(DEBUG, "subscriber %s:%u left\n", relay_ip_str(s->ip, a),
				  s->data_port);
			relay_sub_remove(r, s);
			st->c[C_LEAVE]++;
		}
		break;
	case RP_HEARTBEAT:
		if (from_up) {
			if (r->auth.n_keys && !run) {
				st->c[C_CTL_BAD]++; /* an upstream's HEARTBEAT names its run */
				return;
			}
			if (r->auth.n_keys && run != r->auth.run)
				relay_follow_run(r, run, st);
			if (c.version != RP_VERSION_RELAY && c.version != RP_VERSION_NONE)
				relay_latest_note(r, c.model_id, c.version, 1);
			break;
		}
		s = relay_sub_by_control(r, k->src_ip, k->src_port);
		if (s)
			s->last_seen = rte_get_tsc_cycles();
		break;
	case RP_NACK:
		st->c[C_NACK_RX]++;
		/* answered only to a JOINed subscriber's own address */
		s = relay_sub_by_control(r, k->src_ip, k->src_port);
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
				/* a frame whose checksum nothing checked is read
				 * once before it is resent: one corrupted on its
				 * way in is asked of upstream instead */
				if (f && relay_cached_sum_ok(f)) {
					st->c[C_CACHE_HIT]++;
					relay_resend(r, s, f, f->hash.fdir.hi, st); /* by its lane */
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

void relay_on_arp_reply(relay *r, const rp_pkt *k)
{
	for (unsigned i = 0; i < MAX_SUBS; i++) {
		sub *s = &r->subs[i];
		if (s->used && next_hop(r, s->eth_port, s->ip) == k->src_ip &&
		    (s->mac_from == MAC_NONE || s->mac_from == MAC_ARP)) {
			const int same = s->mac_from == MAC_ARP && !memcmp(s->mac, k->src_mac, 6);
			memcpy(s->mac, k->src_mac, 6);
			s->mac_from = MAC_ARP;
			if (!same)
				relay_sub_sync(r, s, 0);
		}
	}
	if (r->cf.upstream_ip && next_hop(r, r->up_port, r->cf.upstream_ip) == k->src_ip) {
		if (!r->upstream_has_mac || memcmp(r->upstream_mac, k->src_mac, 6)) {
			char a[INET_ADDRSTRLEN];
			RELAY_LOG(DEBUG, "upstream %s reached through %02x:%02x:%02x:%02x:%02x:%02x\n",
				  relay_ip_str(r->cf.upstream_ip, a), k->src_mac[0], k->src_mac[1],
				  k->src_mac[2], k->src_mac[3], k->src_mac[4], k->src_mac[5]);
		}
		memcpy(r->upstream_mac, k->src_mac, 6);
		r->upstream_has_mac = 1;
	}
}

void relay_housekeeping(relay *r, lcore_stats *st)
{
	r->hk_rounds++;
	uint64_t now = rte_get_tsc_cycles();
	uint64_t timeout = (uint64_t)r->cf.heartbeat_timeout_s * r->hz;
	for (unsigned i = 0; i < MAX_SUBS; i++) {
		sub *s = &r->subs[i];
		if (s->used && !s->is_static && now - s->last_seen > timeout) {
			char a[INET_ADDRSTRLEN];
			RELAY_LOG(DEBUG, "subscriber %s:%u expired: silent for %u s\n",
				  relay_ip_str(s->ip, a), s->data_port, r->cf.heartbeat_timeout_s);
			relay_sub_remove(r, s);
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
	for (unsigned i = 0; i < MAX_SUBS; i++)
		sub_heartbeat(r, &r->subs[i], st);
	if (r->cf.upstream_ip) { /* subscribe to the upstream relay or publisher */
		rp_ctl c;
		memset(&c, 0, sizeof(c));
		c.type = RP_JOIN;
		c.data_port = r->cf.data_port;
		/* a relay: no catch-up stream, unless a subscriber asked for one */
		c.version = r->want_key ? RP_VERSION_NONE : RP_VERSION_RELAY;
		if (r->upstream_has_mac) {
			relay_send(r, r->up_port, ctl_packet(r, r->up_port, r->upstream_mac,
							   r->cf.upstream_ip, r->cf.upstream_port,
							   &c, NULL, st), st);
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

/* ---- counters: telemetry and exit ---- */

/* every lcore's, and every fan-out lane's beyond the main lcore's */
uint64_t relay_sum_counter(const relay *r, int k)
{
	uint64_t s = 0;
	for (unsigned l = 0; l < RTE_MAX_LCORE; l++)
		s += r->stats[l].c[k];
	for (unsigned l = 1; l < r->n_lanes; l++)
		s += r->lanes[l].own.c[k];
	return s;
}

static uint64_t sum_class(const relay *r, int k)
{
	uint64_t s = 0;
	for (unsigned l = 0; l < RTE_MAX_LCORE; l++)
		s += r->stats[l].cls[k];
	return s;
}

/* why control messages were refused (drop_auth counts them with
 * frames), by the names telemetry and the exit lines give them */
static const struct {
	const char *name;
	rp_auth_result r;
} auth_why[] = {
	{"auth_ctl_stale", RP_AUTH_STALE},     {"auth_ctl_future", RP_AUTH_FUTURE},
	{"auth_ctl_replay", RP_AUTH_REPLAY},   {"auth_ctl_bad_tag", RP_AUTH_BAD_TAG},
	{"auth_ctl_unknown_key", RP_AUTH_UNKNOWN_KEY}, {"auth_ctl_unsigned", RP_AUTH_MISSING},
};

static int tel_stats(const char *cmd, const char *params, struct rte_tel_data *d)
{
	(void)cmd;
	(void)params;
	rte_tel_data_start_dict(d);
	for (int k = 0; k < C_COUNT; k++)
		rte_tel_data_add_dict_u64(d, cnames[k], relay_sum_counter(R, k));
	for (int k = 0; k < RP_CLASS_COUNT; k++)
		rte_tel_data_add_dict_u64(d, rp_class_names[k], sum_class(R, k));
	rte_tel_data_add_dict_u64(d, "cache_frames", R->cache.len);
	rte_tel_data_add_dict_u64(d, "cache_bytes", R->cache.bytes);
	for (size_t k = 0; k < sizeof(auth_why) / sizeof(auth_why[0]); k++)
		rte_tel_data_add_dict_u64(d, auth_why[k].name, R->auth.ctl[auth_why[k].r]);
	rte_tel_data_add_dict_u64(d, "auth_senders_evicted", R->auth.evicted);
	return 0;
}

int relay_tel_subscribers(const relay *r, struct rte_tel_data *d)
{
	rte_tel_data_start_dict(d);
	int rc = 0;
	for (unsigned i = 0; i < MAX_SUBS; i++) {
		const sub *s = &r->subs[i];
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

static int tel_subscribers(const char *cmd, const char *params, struct rte_tel_data *d)
{
	(void)cmd;
	(void)params;
	return relay_tel_subscribers(R, d);
}

void relay_telemetry_register(relay *r)
{
	R = r;
	rte_telemetry_register_cmd("/bfpatch/stats", tel_stats,
				   "bfpatch-relay counters. No parameters");
	rte_telemetry_register_cmd("/bfpatch/subscribers", tel_subscribers,
				   "Per-subscriber bytes and drops. No parameters");
}

void relay_print_stats(const relay *r, FILE *f)
{
	char ip[INET_ADDRSTRLEN];
	fprintf(f, "bfpatch-relay counters:\n");
	for (int k = 0; k < C_COUNT; k++)
		fprintf(f, "  %-20s %" PRIu64 "\n", cnames[k], relay_sum_counter(r, k));
	for (int k = 0; k < RP_CLASS_COUNT; k++)
		fprintf(f, "  %-20s %" PRIu64 "\n", rp_class_names[k], sum_class(r, k));
	fprintf(f, "  %-20s %u frames, %" PRIu64 " bytes\n", "cache", r->cache.len, r->cache.bytes);
	for (size_t k = 0; k < sizeof(auth_why) / sizeof(auth_why[0]); k++)
		fprintf(f, "  %-20s %" PRIu64 "\n", auth_why[k].name, r->auth.ctl[auth_why[k].r]);
	fprintf(f, "  %-20s %" PRIu64 "\n", "auth_senders_evicted", r->auth.evicted);
	for (unsigned k = 0; k < r->n_lanes && r->n_lanes > 1; k++)
		fprintf(f, "  fan-out lcore %u (lcore %u)  %u subscribers, %" PRIu64 " outputs\n",
			k, r->lanes[k].lcore, r->lane_subs[k], r->lanes[k].st->c[C_FANOUT]);
	for (unsigned i = 0; i < MAX_SUBS; i++) {
		const sub *s = &r->subs[i];
		if (s->used)
			fprintf(f, "  subscriber %s:%u  tx %" PRIu64 " packets, %" PRIu64
				" bytes, drops %" PRIu64 "\n",
				relay_ip_str(s->ip, ip), s->data_port, s->tx_pkts, s->tx_bytes, s->drops);
	}
	fflush(f);
}
