/*
 * nack.c: answering a subscriber's NACK (docs/PROTOCOL.md 2.4): which
 * frames of which held patch or keyframe stream go back, at most
 * RP_NACK_ANSWER_MAX a NACK, about 100 ms of a slow subscriber's link,
 * and within its NACK budget (--nack-rate). nack_plan() decides without
 * sending, so tests drive it with no socket; nack_answer() sends.
 */
#include <inttypes.h>
#include <stdio.h>

#include "publisher.h"

void nack_budget_init(rp_bucket *b, uint32_t nack_rate, double t)
{
	/* a full NACK answer at once, then --nack-rate frames a second */
	rp_bucket_init(b, nack_rate, RP_NACK_ANSWER_MAX, (uint64_t)(t * 1e6));
	rp_bucket_fill(b, 1000000);
}

const patch *nack_source(const publisher *P, const rp_ctl *c)
{
	const patch *p = (c->flags & RP_NACK_KEY) ? history_key(&P->hist, c->version)
						  : history_find(&P->hist, c->version);
	if (!p && P->streaming && c->version == P->streamed_ver && P->streamed.n)
		p = &P->streamed; /* being encoded: what has been sent of it */
	if (!p || (c->model_id && c->model_id != P->model_id))
		return NULL; /* not held any more (catch-up handles it), or not ours */
	return p;
}

uint64_t nack_most(const publisher *P, const pub_sub *s)
{
	/* to a subscriber whose link is slower than --rate, about 100 ms of
	 * its link a NACK: the answer is sent paced at that link, and all
	 * else waits meanwhile (it NACKs the rest again) */
	uint64_t most = RP_NACK_ANSWER_MAX;
	if (s->link.rate && (!P->bucket.rate || s->link.rate < P->bucket.rate)) {
		uint64_t f = (uint64_t)s->rate_kbps * 1000 / 8 / 10 / WIRE(P->frame_size);
		most = f < 1 ? 1 : f < most ? f : most;
	}
	return most;
}

void nack_plan(const publisher *P, pub_sub *s, const rp_ctl *c, double t, nack_reply *a)
{
	a->p = nack_source(P, c);
	a->n = 0;
	a->frames = a->bytes = a->limited = 0;
	if (!a->p)
		return;
	const patch *p = a->p;
	/* at most RP_NACK_ANSWER_MAX frames per NACK, however its ranges
	 * overlap (PROTOCOL.md 2.4); of the patch its catch-up is being
	 * sent, only frames already sent (the rest come anyway) */
	const size_t end = p == history_catchup(&P->hist, s) ? s->cu_next : p->n;
	const uint64_t most = nack_most(P, s);
	for (unsigned r = 0; r < c->n_ranges && r < RP_NACK_MAX && a->frames < most; r++) {
		const uint32_t first = c->ranges[r].first;
		if (first >= end)
			continue;
		uint32_t cnt = c->ranges[r].count;
		if (cnt > end - first)
			cnt = (uint32_t)(end - first);
		if (cnt > most - a->frames)
			cnt = (uint32_t)(most - a->frames);
		/* one subscriber cannot take the link from the others */
		uint32_t ok = (uint32_t)rp_bucket_take_upto(&s->nack, cnt, (uint64_t)(t * 1e6),
							    1000000);
		a->limited += cnt - ok;
		if (!(cnt = ok))
			continue;
		a->r[a->n].first = first;
		a->r[a->n++].count = cnt;
		a->frames += cnt;
		a->bytes += p->off[first + cnt] - p->off[first];
	}
}

int nack_answer(publisher *P, pub_sub *s, const rp_ctl *c, double t)
{
	nack_reply a;
	nack_plan(P, s, c, t, &a);
	P->nack_limited += a.limited;
	for (unsigned i = 0; i < a.n; i++)
		pub_send_one(P, s, a.p, a.r[i].first, a.r[i].count);
	if (!a.frames)
		return 0; /* nothing of it held or within the budget: not answered */
	P->nacks++;
	P->resent += a.frames;
	char peer[64];
	pub_peer_str(&s->data, peer, sizeof(peer));
	events_emit(&P->ev, "nack", "\"version\":%u,\"peer\":\"%s\",\"frames\":%" PRIu64
		    ",\"bytes\":%" PRIu64, c->version, peer, a.frames, a.bytes);
	return 1;
}
