/*
 * fanout.c: a frame's outputs spread over several lcores (--fanout-lcores
 * N), with nothing on the fast path taking a lock.
 *
 * Ownership. The N fan-out lanes are the main lcore (lane 0) and the last
 * N - 1 worker lcores. Subscriber slot subs[i] belongs to lanes[i % N] for
 * as long as the relay runs, whoever takes or frees the slot; a new
 * subscriber takes a free slot of the lane that owns fewest (among the
 * lanes with a TX queue on its port). Each sub has two halves: the control
 * half (address, ports, MAC, model, JOIN version, key, pacing rate, NACK
 * budget, last heard) is written by the main lcore alone, which keeps the
 * subscriber table, JOIN/LEAVE/expiry, ARP and the repair cache; the output
 * half (a copy of what outputs are made from, its token bucket, queue,
 * held packet and tx/drop counters) by its owner lane alone. Lane l also
 * owns its used/queued masks, its TX queue (queue l of every port it sends
 * on) and its TX buffers, so pacing and transmit are per lane too.
 *
 * Handover. The main lcore reaches lane l (l > 0) through one
 * single-producer, single-consumer ring of jobs, in order: FRAME (a
 * received frame, its mbuf's refcount raised once for the lane, with its
 * model, version, payload sum and the run followed, so the lane reads
 * neither the cache nor the main lcore's run), RESEND (a cached frame for
 * one subscriber: a NACK's answer, sent by the owner) and SYNC (a
 * subscriber's control half copied into the job: taken, changed, flushed or
 * freed). A lane applies a SYNC to the output half between frames, so a
 * subscriber's fields never change under an output being made; a freed
 * slot is flushed by its owner, and since the slot's owner never changes,
 * the SYNC that takes it again comes after, through the same ring. Lane 0
 * runs the same jobs at once, on the main lcore. While a lane's ring has
 * no room for a burst, the main lcore takes no more packets (relay_lanes_full):
 * the ports' queues then drop what is too much, the same frames for every
 * subscriber (one NACK upstream repairs them all), as with one lcore;
 * rather than each lane losing other frames. A ring full all the same
 * drops a FRAME or RESEND for that lane (drop_lane_full); a SYNC waits for
 * room. FRAMEs are staged and handed over a burst at a time
 * (relay_lanes_flush, after each burst and before any other job): each
 * enqueue moves the ring's producer and consumer lines between the two
 * CPUs, once a burst rather than once a frame.
 *
 * The frame's payload is shared: each lane clones it for its own
 * subscribers (output.c); the cache holds its own reference. The lcore
 * that drops a frame's last reference puts its mbuf in that lcore's
 * mempool cache, and the main lcore receives into mbufs from its own: a
 * frame freed on a lane would reach the main lcore again only through the
 * pool's common ring, oldest first, and every frame it receives would land
 * (net_pcap's copy, a NIC's DMA) in a buffer its CPU cache has not held
 * since the whole pool went round (at 8000 bytes, net_pcap's RX took 0.84
 * against 0.18 us a frame; docs/BENCHMARKS.md). So a lane's clones of a
 * frame count on the lane's hold in the frame's private area (lane_hold),
 * and the one reference the hold keeps goes back to the main lcore
 * through the lane's done ring once its last clone is freed
 * (relay_lanes_reclaim); the frame's refcount is updated on the main lcore
 * alone: raised once for all lanes as the frame is handed over, lowered
 * once a lane as the references come back. The lane reads nothing of the
 * frame's mbuf (its clones are made from the frame_view in its job),
 * whose first cache line the main lcore's own clones write. Counters are
 * per lane (lane 0's are the main lcore's), summed by the readers. With
 * N = 1 (the default) there are no rings and the main lcore makes every
 * output itself.
 */
#include <inttypes.h>
#include <string.h>

#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_pause.h>

#include "bfpatch.h"
#include "relay.h"

int relay_lanes_create(relay *r)
{
	if (r->cf.fanout_lanes < 1)
		r->cf.fanout_lanes = 1;
	r->n_lanes = r->cf.fanout_lanes;
	for (unsigned k = 0; k < r->n_lanes; k++) {
		lane *l = &r->lanes[k];
		l->idx = k;
		l->txq = (uint16_t)k;
		l->rx_short = -1;
		l->st = k ? &l->own : &r->stats[rte_get_main_lcore()];
		l->lcore = k ? UINT32_MAX : rte_get_main_lcore();
		if (!k)
			continue;
		char name[32];
		snprintf(name, sizeof(name), "lane%u", k);
		l->jobs = rte_ring_create_elem(name, sizeof(lane_job), LANE_RING,
					       (int)rte_socket_id(), RING_F_SP_ENQ | RING_F_SC_DEQ);
		snprintf(name, sizeof(name), "done%u", k);
		l->done = rte_ring_create(name, LANE_DONE, (int)rte_socket_id(),
					  RING_F_SP_ENQ | RING_F_SC_DEQ);
		if (!l->jobs || !l->done)
			return -1;
	}
	for (unsigned i = 0; i < MAX_SUBS; i++)
		r->subs[i].lane = i % r->n_lanes;
	return 0;
}

int relay_lanes_place(relay *r)
{
	unsigned workers = rte_lcore_count() - 1, lc, w = 0;
	if (workers < r->n_lanes - 1) {
		RELAY_LOG(ERR, "--fanout-lcores %u needs %u worker lcore(s) beside the main one "
			  "(EAL -l), there are %u\n", r->n_lanes, r->n_lanes - 1, workers);
		return -1;
	}
	/* the last n_lanes - 1 workers fan out, those before them receive */
	RTE_LCORE_FOREACH_WORKER(lc) {
		if (w >= workers - (r->n_lanes - 1)) {
			unsigned k = w - (workers - (r->n_lanes - 1)) + 1;
			r->lanes[k].lcore = lc;
			r->lane_of[lc] = (uint8_t)k;
		}
		w++;
	}
	return 0;
}

/* Frame reference f, which lane l (l > 0) is done with, to the main
 * lcore; freed here if its ring is full. */
static void lane_done(lane *l, struct rte_mbuf *f)
{
	if (rte_ring_sp_enqueue(l->done, f) != 0)
		rte_pktmbuf_free(f);
}

/* The hold's free callback: the last clone that counted on it is gone. */
static void hold_release(void *addr, void *opaque)
{
	(void)addr;
	lane_hold *h = opaque;
	lane_done(h->l, h->f);
}

/* Lane l's hold on job frame f (l > 0), the job's reference of f taken
 * into it and counted once for the job itself; NULL, with f's reference
 * still the job's, where f has no slot for l (no view). Reads nothing of
 * f's mbuf but the slot. */
static lane_hold *hold_take(lane *l, struct rte_mbuf *f, const frame_view *fv)
{
	if (!fv->buf)
		return NULL;
	lane_hold *h = (lane_hold *)rte_mbuf_to_priv(f) + (l->idx - 1);
	if (rte_mbuf_ext_refcnt_read(&h->sh) == 0) {
		h->sh.free_cb = hold_release;
		h->sh.fcb_opaque = h;
		h->f = f;
		h->l = l;
		rte_mbuf_ext_refcnt_set(&h->sh, 1);
	} else { /* held already: an earlier job's clones are queued */
		rte_mbuf_ext_refcnt_update(&h->sh, 1);
		lane_done(l, f);
	}
	return h;
}

/* A FRAME or RESEND: f's outputs for lane l's subscribers (one of them,
 * RESEND) that take it. */
static void lane_frame(relay *r, lane *l, const lane_job *j)
{
	l->rx_short = -1;
	l->q_share = 0;
	if (j->op == JOB_RESEND) {
		sub *s = &r->subs[j->sub];
		if (s->out.used)
			relay_emit(r, l, s, j->f, j->sum, j->run);
		return;
	}
	/* a frame of a keyframe stream, not of a patch (FORMAT.md 2.1): not
	 * to a subscriber that holds its version or a later one (one
	 * subscriber's JOIN with version NONE must not send the whole model
	 * to every other); to those that asked (NONE), relays, static
	 * subscribers and those behind it */
	/* the first output on lane 0 may take the frame's headroom for its
	 * headers (output.c): one writer, since lane 0 alone runs FRAMEs on
	 * the main lcore, each frame once, and a RESEND never takes it. With
	 * FRAME_OWN (lane 0 only) the last output is the frame itself, which
	 * writes that headroom, so no clone takes it: each output is made as
	 * the next one is found, the last after the loop; with FRAME_KEEP too
	 * the cache takes f afterwards, and the last output is f with a
	 * reference of its own */
	const int own = l->idx == 0 && (j->flags & FRAME_OWN);
	int head = l->idx == 0 && !own;
	sub *last = NULL;
	for (uint64_t u = l->used_mask; u; u &= u - 1) {
		sub *s = &r->subs[__builtin_ctzll(u)];
		const sub_out *o = &s->out;
		if ((o->model_id == 0 || o->model_id == j->model) &&
		    (!j->key || o->is_static || o->join_version >= RP_VERSION_NONE ||
		     o->join_version < j->version)) {
			if (!own) {
				head &= !relay_emit_head(r, l, s, j->f, j->sum, j->run, head);
				continue;
			}
			if (last)
				relay_emit(r, l, last, j->f, j->sum, j->run);
			last = s;
		}
	}
	if (own && (j->flags & FRAME_KEEP))
		relay_emit_keep(r, l, last, j->f, j->sum, j->run);
	else if (own)
		relay_emit_own(r, l, last, j->f, j->sum, j->run); /* consumes f */
}

/* A SYNC: the subscriber's output half from the main lcore's copy. */
static void lane_sync(relay *r, lane *l, const lane_job *j)
{
	sub *s = &r->subs[j->sub];
	const uint64_t bit = 1ull << j->sub;
	if ((j->flags & SYNC_FLUSH) || !j->v.used) {
		relay_sub_flush(s); /* queued for an old port, or for one gone */
		l->queued_mask &= ~bit;
	}
	if (j->flags & SYNC_FRESH)
		s->tx_pkts = s->tx_bytes = s->drops = 0;
	if (j->flags & SYNC_BUCKET)
		rp_bucket_init(&s->bucket, j->rate, j->burst, rte_get_tsc_cycles());
	s->out = j->v;
	relay_out_template(r, s);
	if (j->v.used)
		l->used_mask |= bit;
	else
		l->used_mask &= ~bit;
}

static void lane_run(relay *r, lane *l, lane_job *j)
{
	if (j->op == JOB_SYNC) {
		lane_sync(r, l, j);
		return;
	}
	if (!l->idx) {
		lane_frame(r, l, j);
		return;
	}
	/* the reference handed over: into the hold, for the job's clones */
	l->hold = hold_take(l, j->f, &j->fv);
	l->fv = &j->fv;
	lane_frame(r, l, j);
	if (!l->hold)
		rte_pktmbuf_free(j->f);
	else if (rte_mbuf_ext_refcnt_update(&l->hold->sh, -1) == 0)
		hold_release(NULL, l->hold); /* no clone (left): the job's count was the last */
	l->hold = NULL;
}

/* f's view for a lane whose hold slot it has (else none: buf NULL). */
static void view_of(relay *r, const struct rte_mbuf *f, frame_view *fv)
{
	memset(fv, 0, sizeof(*fv));
	if (f->nb_segs != 1 || !RTE_MBUF_DIRECT(f) ||
	    rte_pktmbuf_priv_size(f->pool) < (r->n_lanes - 1) * sizeof(lane_hold))
		return;
	fv->buf = f->buf_addr;
	fv->iova = rte_mbuf_iova_get(f);
	fv->buf_len = f->buf_len;
	fv->data_off = f->data_off;
	fv->len = f->data_len;
	fv->off = relay_frame_off(f);
}

/* Hand job j to lane k: at once for lane 0, else through its ring (a
 * SYNC waits for room; anything else is dropped, counted, when full). */
static void lane_hand(relay *r, unsigned k, lane_job *j, lcore_stats *st)
{
	if (k == 0) {
		lane_run(r, &r->lanes[0], j);
		return;
	}
	lane *l = &r->lanes[k];
	relay_lanes_flush(r, st); /* the frames before it */
	if (j->op != JOB_SYNC)
		rte_mbuf_refcnt_update(j->f, 1); /* the lane's: its hold's */
	while (rte_ring_enqueue_elem(l->jobs, j, sizeof(*j)) != 0) {
		if (j->op != JOB_SYNC || force_quit) {
			if (j->op != JOB_SYNC)
				rte_pktmbuf_free(j->f);
			st->c[C_LANE_FULL]++;
			return;
		}
		rte_pause(); /* the lane empties its ring as it runs */
	}
}

int relay_lanes_full(const relay *r)
{
	for (unsigned k = 1; k < r->n_lanes; k++)
		if (r->lane_subs[k] && rte_ring_free_count(r->lanes[k].jobs) < BURST)
			return 1;
	return 0;
}

void relay_fanout(relay *r, struct rte_mbuf *f, uint64_t model, uint32_t version, int key,
		  uint32_t sum, int own, lcore_stats *st)
{
	/* only the fields a FRAME reads (not v, a SYNC's) */
	lane_job j;
	j.f = f;
	j.model = model;
	j.run = r->auth.run;
	j.sum = sum;
	j.version = version;
	j.op = JOB_FRAME;
	j.key = (uint8_t)key;
	j.sub = 0;
	j.flags = 0; /* FRAME_OWN is lane 0's alone, set below */
	if (r->n_lanes > 1)
		view_of(r, f, &j.fv);
	/* the other lanes' jobs staged, handed over after the burst
	 * (relay_lanes_flush), the frame's refcount raised once for them all;
	 * a frame another lane clones is not lane 0's to write (nor, stored,
	 * to go out itself: its headers would move its data under their
	 * clones) */
	uint32_t lanes = 0;
	for (unsigned k = 1; k < r->n_lanes; k++)
		if (r->lane_subs[k])
			lanes |= 1u << k;
	const int shared = lanes != 0;
	if (shared) {
		if (r->n_stage && (r->n_stage == BURST || lanes != r->stage_lanes))
			relay_lanes_flush(r, st);
		r->stage_lanes = lanes;
		r->stage[r->n_stage++] = j;
		rte_mbuf_refcnt_update(f, (int16_t)__builtin_popcount(lanes));
	}
	if (!shared && own != FAN_SHARED)
		j.flags = own == FAN_STORE ? FRAME_OWN | FRAME_KEEP : FRAME_OWN;
	lane_frame(r, &r->lanes[0], &j); /* lane_run's, for lane 0 */
	if (own == FAN_OWN && shared)
		rte_pktmbuf_free(f); /* the caller's reference, consumed */
}

void relay_resend(relay *r, sub *s, struct rte_mbuf *f, uint32_t sum, lcore_stats *st)
{
	lane_job j = {.f = f, .run = r->auth.run, .sum = sum, .op = JOB_RESEND,
		      .sub = (uint8_t)(s - r->subs)};
	if (s->lane)
		view_of(r, f, &j.fv);
	lane_hand(r, s->lane, &j, st);
}

void relay_sub_sync(relay *r, sub *s, unsigned flags)
{
	lane_job j;
	memset(&j, 0, sizeof(j));
	j.op = JOB_SYNC;
	j.sub = (uint8_t)(s - r->subs);
	j.flags = (uint8_t)flags;
	j.rate = s->pace_rate;
	j.burst = s->pace_burst;
	j.v.used = (uint8_t)s->used;
	j.v.has_mac = s->mac_from != MAC_NONE;
	j.v.is_static = (uint8_t)s->is_static;
	j.v.ip = s->ip;
	j.v.data_port = s->data_port;
	j.v.eth_port = s->eth_port;
	memcpy(j.v.mac, s->mac, 6);
	j.v.model_id = s->model_id;
	j.v.join_version = s->join_version;
	j.v.key = s->key;
	lane_hand(r, s->lane, &j, r->lanes[0].st);
}

unsigned relay_lane_poll(relay *r, lane *l)
{
	lane_job jobs[BURST];
	unsigned n = rte_ring_dequeue_burst_elem(l->jobs, jobs, sizeof(jobs[0]), BURST, NULL);
	for (unsigned i = 0; i < n; i++)
		lane_run(r, l, &jobs[i]);
	return n;
}

void relay_lanes_flush(relay *r, lcore_stats *st)
{
	if (!r->n_stage)
		return;
	for (uint32_t m = r->stage_lanes; m; m &= m - 1) {
		lane *l = &r->lanes[__builtin_ctz(m)];
		unsigned n = rte_ring_enqueue_burst_elem(l->jobs, r->stage, sizeof(lane_job),
							 r->n_stage, NULL);
		for (unsigned i = n; i < r->n_stage; i++) /* no room: dropped for this lane */
			rte_pktmbuf_free(r->stage[i].f);
		st->c[C_LANE_FULL] += r->n_stage - n;
	}
	r->n_stage = 0;
}

unsigned relay_lanes_reclaim(relay *r)
{
	unsigned n = 0;
	for (unsigned k = 1; k < r->n_lanes; k++) {
		struct rte_mbuf *f[2 * BURST];
		if (!r->lanes[k].done)
			continue;
		unsigned got = rte_ring_sc_dequeue_burst(r->lanes[k].done, (void **)f, 2 * BURST,
							 NULL);
		if (got)
			rte_pktmbuf_free_bulk(f, got);
		n += got;
	}
	return n;
}

static void lane_flush(relay *r, lane *l)
{
	for (uint16_t p = 0; p < r->n_ports; p++)
		if (l->txb[p])
			rte_eth_tx_buffer_flush(p, l->txq, l->txb[p]);
}

int relay_lane_main(relay *r, lane *l)
{
	uint64_t drain = r->hz / 10000 + 1, last_flush = 0;
	while (!force_quit) {
		relay_lane_poll(r, l);
		relay_pace(r, l);
		uint64_t now = rte_get_tsc_cycles();
		if (now - last_flush > drain) { /* TX drained on a timer */
			lane_flush(r, l);
			last_flush = now;
		}
	}
	lane_flush(r, l);
	return 0;
}

void relay_lanes_drain(relay *r)
{
	for (uint32_t m = r->stage_lanes; r->n_stage && m; m &= m - 1) /* never handed over */
		for (unsigned i = 0; i < r->n_stage; i++)
			rte_pktmbuf_free(r->stage[i].f);
	r->n_stage = 0;
	for (unsigned k = 1; k < r->n_lanes; k++) {
		lane_job j;
		while (r->lanes[k].jobs &&
		       rte_ring_dequeue_elem(r->lanes[k].jobs, &j, sizeof(j)) == 0)
			if (j.op != JOB_SYNC)
				rte_pktmbuf_free(j.f);
	}
}
