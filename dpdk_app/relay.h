/*
 * relay.h: bfpatch-relay's internal interface: its configuration, its
 * state and counters, and what each of its files gives the others
 * (main.c, options.c, setup.c, datapath.c, control.c, output.c); calls
 * run one way: datapath -> control -> fanout -> output, datapath ->
 * fanout -> output. One core lcore owns the state; worker lcores only
 * receive, classify and count; fan-out lcores (--fanout-lcores) each make
 * the outputs of the subscribers they own (fanout.c).
 */
#ifndef BFP_RELAY_H
#define BFP_RELAY_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include <rte_common.h>
#include <rte_ether.h>
#include <rte_log.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include "auth.h"
#include "events.h"
#include "proto.h"

#define BURST 32
#define MAX_PORTS 8
#define MAX_SUBS 64 /* at most 64: lane.used_mask */
#define MAX_LANES 16 /* fan-out lcores, the main one included */
#define LANE_RING 1024 /* jobs the main lcore may have handed a lane */
#define LANE_DONE 4096 /* frame references a lane hands back (full: it frees) */
#define NACK_MEMO_BITS 14
#define NACK_MEMO (1u << NACK_MEMO_BITS)
#define HDR_ROOM 128
#define OUT_POOL_N 16383u /* header and clone mbufs: one of each per output queued */
/* in a kept packet's hash.usr (class << 16 | UDP payload length): its
 * payload sum was taken from its UDP checksum, which nothing has checked */
#define SUM_UNCHECKED 0x80000000u
/* in a stored frame's hash.usr: its mbuf went out as one of its outputs,
 * whose headers (RP_HDRS bytes, written in its headroom before the cache
 * took it) precede the frame there; every reader of a cached frame starts
 * at relay_frame_off() (output.c) */
#define FRAME_BEHIND 0x40000000u

/* Set by the signal handlers (main.c), read by the lcore loops. */
extern volatile sig_atomic_t force_quit, dump_stats;

/* The relay's DPDK log type, "bfpatch.relay" (datapath.c), so that
 * --log-level=bfpatch.relay:LEVEL sets what it says (info by default;
 * debug adds subscribers coming and going). Every message starts
 * "bfpatch-relay: ", as the relay's other output does. */
extern int relay_logtype;
#define RELAY_LOG(level, ...) \
	rte_log(RTE_LOG_ ## level, relay_logtype, "bfpatch-relay: " __VA_ARGS__)

/* ---- configuration ---- */

typedef struct sub_conf {
	uint32_t ip;
	uint16_t port;       /* UDP data port of the subscriber */
	uint16_t eth_port;
	uint8_t mac[6];
	int has_mac;
	uint64_t rate_bps;   /* bits per second, 0 = the default */
	uint32_t key_id;     /* key=ID: its key among --peer-keys */
	int has_key;
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
	int insecure;                 /* --insecure: no keys, on purpose */
	const char *peer_keys;        /* --peer-keys: a key per subscriber, or NULL */
	uint32_t mbuf_size;
	uint32_t n_mbufs;
	unsigned fanout_lanes;        /* --fanout-lcores: 1, the main lcore only */
	double run_time_s;            /* 0: until a signal */
} relay_conf;

/* ---- state ---- */

/* Where a subscriber's MAC came from: the latest JOIN is followed (an
 * ARP reply for a shared next hop must not replace it), an ARP answer is
 * asked again now and then, a configured one stays. */
enum { MAC_NONE, MAC_ARP, MAC_JOIN, MAC_CONF };

/* What a subscriber's outputs are made from: its owner lane's copy of
 * the main lcore's fields, written by that lane only (fanout.c). */
typedef struct sub_out {
	uint32_t ip;
	uint16_t data_port, eth_port;
	uint8_t mac[6];
	uint8_t used, has_mac, is_static;
	uint32_t join_version;
	uint64_t model_id;
	const rp_key *key;
} sub_out;

typedef struct sub {
	/* ---- the control half: the main lcore's alone (control.c) ---- */
	int used, is_static;
	int mac_from;                 /* MAC_*; MAC_NONE: not known yet */
	uint32_t ip;
	uint16_t data_port, ctl_port, eth_port;
	uint8_t mac[6];
	uint64_t model_id;            /* 0: every model */
	uint32_t join_version;        /* its latest JOIN's (NONE: it asks for a
					 keyframe stream; RELAY: a relay) */
	uint64_t pace_rate, pace_burst; /* its bucket's, as last handed over */
	rp_bucket nack_bucket;        /* frames its NACKs may still ask for */
	uint64_t last_seen;
	/* a peer key (--peer-keys) its JOIN verified under, or its key=: what
	 * goes to it is signed again with it; NULL: frames go as signed
	 * upstream, control messages under --key */
	const rp_key *key;
	unsigned lane;                /* its owner: subs[i] is lanes[i % n_lanes]'s */
	/* ---- the output half: its owner lane's alone (fanout.c, output.c) ---- */
	sub_out out __rte_cache_aligned;
	/* its outputs' Ethernet/IPv4/UDP headers but for the fields that
	 * change per output (lengths, IPv4 id, checksums), and the partial
	 * sums of the fields that do not, so that an output's headers are a
	 * copy and two checksum updates (output.c); made from out on SYNC */
	uint8_t hdr[RP_HDRS];
	uint8_t peer;                 /* out.key is a peer key: signed per hop */
	uint32_t ip_sum, udp_sum;
	rp_bucket bucket;
	struct rte_ring *q;
	struct rte_mbuf *held;        /* dequeued, waiting for tokens */
	uint64_t tx_pkts, tx_bytes, drops;
} sub;

/* Counters: one cache-aligned block per lcore, written by that lcore only,
 * summed by readers (telemetry, exit). Their names: control.c. */
enum {
	C_RX, C_TX, C_FANOUT, C_RING_FULL, C_INBOUND_FULL, C_NO_MBUF, C_NO_MAC,
	C_CACHE_HIT, C_CACHE_MISS, C_NACK_RX, C_NACK_FWD, C_NACK_REFUSED,
	C_JOIN, C_LEAVE, C_EXPIRED, C_CTL_BAD, C_CACHE_STORED, C_TX_FAIL,
	C_NACK_SUPPRESSED, C_AUTH_FAIL, C_NACK_LIMITED, C_BAD_VERSION, C_NACK_UNASKED,
	C_SHARE_FULL, C_CACHE_REPLACED, C_JOIN_REFUSED, C_RX_RESERVE,
	C_OTHER_RUN, C_RUN_CHANGE, C_LANE_FULL,
	C_COUNT
};

typedef struct lcore_stats {
	uint64_t c[C_COUNT];
	uint64_t cls[RP_CLASS_COUNT];
} __rte_cache_aligned lcore_stats;

/* What a lane's clones of a single-segment frame read of its mbuf, taken
 * by the main lcore as it hands the frame over (buf NULL: the lane clones
 * the mbuf itself): a lane that read the mbuf would pull its first cache
 * line, where the main lcore's own clones update the refcount, over to its
 * CPU once an output (fanout.c). */
typedef struct frame_view {
	void *buf;
	rte_iova_t iova;
	uint16_t buf_len, data_off, len; /* len: the data's, from data_off */
	uint16_t off;            /* relay_frame_off() */
} frame_view;

/* A job the main lcore hands a fan-out lane (fanout.c). */
enum { JOB_FRAME, JOB_RESEND, JOB_SYNC };
enum { SYNC_FRESH = 1, SYNC_FLUSH = 2, SYNC_BUCKET = 4 };
/* FRAME on lane 0: nothing else holds f (the cache has a copy, no other
 * lane takes it), so its last output is f itself (fanout.c, output.c);
 * with FRAME_KEEP the cache takes f after its outputs, and the last one
 * is f with a reference of its own, its headers in front (FRAME_BEHIND) */
enum { FRAME_OWN = 1, FRAME_KEEP = 2 };
typedef struct lane_job {
	struct rte_mbuf *f;      /* FRAME, RESEND: a reference the lane frees */
	uint64_t model, run;     /* FRAME: its model; the run its outputs bind */
	uint32_t sum, version;   /* the payload's sum; FRAME: its version */
	uint8_t op, sub, key, flags; /* JOB_*; RESEND, SYNC: which subscriber;
				      * FRAME: of a keyframe stream; SYNC_*,
				      * FRAME_OWN */
	uint64_t rate, burst;    /* SYNC_BUCKET: the bucket's */
	union {
		sub_out v;       /* SYNC: the subscriber's output half */
		frame_view fv;   /* FRAME, RESEND to lanes[1..]: f's */
	};
} lane_job;

struct lane;

/* Lane l's hold on a frame it makes outputs of (l > 0): slot l - 1 of
 * the frame's mbuf private area (RX pools have n_lanes - 1 of them),
 * written by lane l only. The lane's clones of the frame count on sh
 * (external buffer), not on the frame's refcount; the one frame
 * reference the hold keeps goes back to the main lcore when the last of
 * them is freed (fanout.c). */
typedef struct lane_hold {
	struct rte_mbuf_ext_shared_info sh;
	struct rte_mbuf *f;
	struct lane *l;
} __rte_cache_aligned lane_hold;

/* A fan-out lane: one lcore's share of the subscribers (subs[i] with
 * i % n_lanes == idx), their queues, pacing and TX queue. Lane 0 is the
 * main lcore's; its stats are that lcore's. */
typedef struct lane {
	unsigned idx, lcore;
	uint16_t txq;            /* its TX queue on every port it sends on */
	struct rte_ring *jobs;   /* from the main lcore (lane 0: none) */
	/* frame references the lane is done with, for the main lcore to
	 * free (lane 0: none): a frame's mbuf goes back to the cache of the
	 * lcore that received it, not to the lane's (fanout.c) */
	struct rte_ring *done;
	lane_hold *hold;         /* the frame of the job running, NULL: none
				  * (lane 0, or a frame without the slot) */
	const frame_view *fv;    /* with hold: that frame's */
	struct rte_eth_dev_tx_buffer *txb[MAX_PORTS]; /* NULL: no TX queue there */
	/* bit i: subs[i] is in use (as its last SYNC said); subs[i] may have
	 * outputs queued or held (set on enqueue, cleared by pacing once its
	 * queue is empty). A frame visits only the first, pacing only the
	 * second, so an unpaced subscriber costs no queue look-ups, a free
	 * slot nothing */
	uint64_t used_mask, queued_mask;
	int rx_short;            /* fewer RX mbufs free than the reserve (-1:
				  * not counted yet): counted at most once per
				  * frame or NACK answer, only if an output is
				  * queued; counting walks every lcore's pool
				  * cache */
	unsigned q_share;        /* outputs one subscriber may hold queued (0:
				  * not counted yet; recounted like rx_short) */
	uint16_t ip_id;
	lcore_stats *st;         /* its counters: lane 0, the main lcore's */
	lcore_stats own;
} __rte_cache_aligned lane;

typedef struct relay {
	relay_conf cf;
	rp_addrs addrs;
	rp_addrs addrs_nosum;    /* addrs, with udp_sum_from_header */
	uint16_t n_ports;
	struct rte_ether_addr mac[MAX_PORTS];
	uint8_t csum_offload[MAX_PORTS]; /* port computes IPv4/UDP checksums */
	struct rte_mempool *pool[MAX_PORTS]; /* each port's RX pool: its NUMA socket's */
	struct rte_mempool *rx_pools[MAX_PORTS]; /* those pools, one a socket */
	unsigned n_rx_pools;
	struct rte_mempool *hdr_pool, *clone_pool; /* on the core lcore's socket */
	struct rte_ring *inbound;
	struct rte_eth_dev_tx_buffer *txb[MAX_PORTS];
	unsigned n_workers;
	unsigned worker_q[RTE_MAX_LCORE]; /* RX queue of each worker lcore */
	uint16_t n_rxq;
	unsigned rx_reserve;     /* RX mbufs paced queues leave free (in each pool) */
	sub subs[MAX_SUBS];
	unsigned n_used;         /* subscribers in use (main lcore writes) */
	lane lanes[MAX_LANES];
	unsigned n_lanes;        /* --fanout-lcores */
	unsigned lane_subs[MAX_LANES]; /* subscribers each lane owns (main's count) */
	uint8_t lane_of[RTE_MAX_LCORE]; /* a worker lcore's lane, 0: an RX worker */
	uint16_t n_txq[MAX_PORTS]; /* lanes that have a TX queue on each port */
	/* FRAME jobs for the lanes in stage_lanes (bit k: lanes[k]), handed
	 * over together once a burst is handled (relay_lanes_flush): one ring
	 * enqueue a lane per burst, not a frame */
	lane_job stage[BURST];
	unsigned n_stage;
	uint32_t stage_lanes;
	rp_cache cache;
	/* frames the cache evicted on the core lcore, freed together once a
	 * burst is handled (relay_evicted_free) */
	struct rte_mbuf *evicted[BURST];
	unsigned n_evicted;
	rp_cache_entry *cache_ring;
	uint64_t *cache_hash;
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
	lcore_stats stats[RTE_MAX_LCORE]; /* by lcore id: EAL gives every lcore,
					   * however mapped, an id below
					   * RTE_MAX_LCORE */
} relay;

/* Where frame f starts in its mbuf: after its output's headers when it
 * went out in its own mbuf (FRAME_BEHIND), else at its data. */
static inline uint16_t relay_frame_off(const struct rte_mbuf *f)
{
	return f->hash.usr & FRAME_BEHIND ? RP_HDRS : 0;
}

/* The netmask of a prefix length, host order (0: every address). */
static inline uint32_t prefix_mask(unsigned len)
{
	return len ? ~0u << (32 - len) : 0;
}

/* The cache keeps keyframe-stream frames apart from the patch frames of
 * the same version: they share (version, index) but not the model key. */
static inline uint64_t cache_model(uint64_t model, int key)
{
	return key ? model ^ 0x8000000000000000ull : model;
}

/* ---- options.c ---- */

extern const char relay_usage_text[];

/* The relay's options (argv[0] a program name) into cf, defaults for
 * the rest; 0, or -1 after a message and the usage on stderr. */
int relay_parse_args(int argc, char **argv, relay_conf *cf);

/* --key, or else --insecure (common/authmode.h): 0, with a warning on
 * stderr for --insecure; -1 after a message when neither or both are
 * given. */
int relay_check_auth(const relay_conf *cf);

/* ---- setup.c: sizing, pools, ports, teardown ---- */

unsigned relay_rx_rings_of(unsigned n_ports, unsigned nq, unsigned n_workers);
unsigned relay_rx_reserve_of(unsigned n_ports, unsigned nq, unsigned n_workers);
unsigned relay_rx_min_of(unsigned n_ports, unsigned nq, unsigned n_workers);
uint32_t relay_cache_cap_of(uint32_t n_mbufs, unsigned rx_need, uint64_t cache_bytes,
			    uint32_t *want);
uint16_t relay_upstream_port(const relay_conf *cf, unsigned n_ports);

/* In this order, after EAL initialisation, each 0 or -1 after a message;
 * on failure relay_teardown() undoes whatever was done. */
int relay_prepare(relay *r);      /* keys, events, ports, addresses */
int relay_pools_create(relay *r); /* mempools, rings, the repair cache */
int relay_ports_start(relay *r);  /* each port configured and started */
unsigned relay_links_wait(relay *r); /* ports still down after a bounded wait */
int relay_static_subs(relay *r);  /* the --subscriber table entries */
/* Stop and close the ports and free everything the above took; frees r. */
void relay_teardown(relay *r);

/* ---- output.c: one output for one subscriber, TX buffering ---- */

/* Buffer m for transmit on port from the main lcore (TX queue 0). */
void relay_send(relay *r, uint16_t port, struct rte_mbuf *m, lcore_stats *st);
/* The same from lane l, on its own TX queue. */
void relay_lane_send(lane *l, uint16_t port, struct rte_mbuf *m);
/* One output of frame f (its payload from relay_frame_off() on, its sum
 * precomputed) for s, on its owner lane l; per hop, signed under s's key
 * bound to run. */
void relay_emit(relay *r, lane *l, sub *s, struct rte_mbuf *f, uint32_t payload_sum,
		uint64_t run);
/* relay_emit, where the output may also take f's headroom for its headers
 * (no header mbuf: one mbuf less per output) when head is set: for one
 * output of a frame at most, on lane 0 only (fanout.c); 1 if it did. */
int relay_emit_head(relay *r, lane *l, sub *s, struct rte_mbuf *f, uint32_t payload_sum,
		    uint64_t run, int head);
/* The output of frame f for s (NULL: none) made of f itself, its headers
 * in f's headroom and, per hop, its trailer signed again in place: when
 * nothing but the frame's earlier outputs (clones) holds f (FRAME_OWN),
 * and for a trailer, not those either; the output then consumes f (else
 * a clone, as relay_emit, and f is released). */
void relay_emit_own(relay *r, lane *l, sub *s, struct rte_mbuf *f, uint32_t payload_sum,
		    uint64_t run);
/* The last output of frame f for s (NULL: none) when the repair cache
 * takes f after it and nothing else holds f: f itself, its headers in its
 * headroom (f then FRAME_BEHIND), with a reference of its own, as
 * ipv4_multicast sends its last output in the input mbuf; per hop (a
 * trailer signed again must not change the cached frame), a clone that
 * reaches into f's headroom. The caller's reference stays its own. */
void relay_emit_keep(relay *r, lane *l, sub *s, struct rte_mbuf *f, uint32_t payload_sum,
		     uint64_t run);
/* s's header template (hdr, ip_sum, udp_sum, peer) from s->out, on its
 * owner lane. */
void relay_out_template(relay *r, sub *s);
void relay_tx_error_cb(struct rte_mbuf **unsent, uint16_t count, void *userdata);

/* ---- datapath.c: RX, classify, a frame's fan-out, pacing, lcore loops ---- */

void relay_mbuf_drop(void *ctx, void *obj);
/* The cache's release callback on the core lcore's data path (ctx: the
 * relay): its reference to a frame, kept among r->evicted. */
void relay_mbuf_evict(void *ctx, void *obj);
/* Free what relay_mbuf_evict() kept (after each burst, and before the
 * cache is freed). */
void relay_evicted_free(relay *r);
int relay_rx_classify(relay *r, struct rte_mbuf *m, lcore_stats *st);
/* Whether cached frame f's payload matches the sum it was relayed with
 * (reading it once, for a frame whose checksum nothing checked). */
int relay_cached_sum_ok(struct rte_mbuf *f);
void relay_core_packet(relay *r, struct rte_mbuf *m, lcore_stats *st);
void relay_pace(relay *r, lane *l);
int relay_worker_main(void *arg);
void relay_core_main(relay *r);

/* ---- fanout.c: subscribers' ownership by lane, frames handed to lanes ---- */

/* The lanes' rings (lane 0 has none) and counters; 0 or -1. */
int relay_lanes_create(relay *r);
/* Which worker lcores are lanes (the last n_lanes - 1); 0, or -1 after a
 * message when there are too few. */
int relay_lanes_place(relay *r);
/* How relay_fanout() takes its frame: a reference the caller keeps
 * (FAN_SHARED); one that nothing else holds, which the fan-out consumes
 * (FAN_OWN); or one the caller keeps to store in the repair cache after
 * the fan-out, nothing else holding f (FAN_STORE: the last output may be
 * f itself, relay_emit_keep). */
enum { FAN_SHARED, FAN_OWN, FAN_STORE };
/* Frame f to every subscriber that takes it, each through its owner
 * lane, f taken as own (FAN_*) says. */
void relay_fanout(relay *r, struct rte_mbuf *f, uint64_t model, uint32_t version, int key,
		  uint32_t sum, int own, lcore_stats *st);
/* Whether a lane has no room for a burst of frames: the main lcore then
 * takes no packets in, so that the ports drop the same frames for all. */
int relay_lanes_full(const relay *r);
/* Cached frame f again to s (a NACK's answer), through its owner lane. */
void relay_resend(relay *r, sub *s, struct rte_mbuf *f, uint32_t sum, lcore_stats *st);
/* Hand s's control half (as the main lcore just set it) to its owner
 * lane, with SYNC_* flags. */
void relay_sub_sync(relay *r, sub *s, unsigned flags);
/* Hand the FRAME jobs relay_fanout() staged to their lanes (after each
 * burst, and before any other job: a lane runs its jobs in order); a lane
 * whose ring has no room drops them, counted on st. */
void relay_lanes_flush(relay *r, lcore_stats *st);
/* Run the jobs waiting for lane l (l != lanes[0]); how many ran. */
unsigned relay_lane_poll(relay *r, lane *l);
/* On the main lcore: free the frame references the lanes are done with;
 * how many. */
unsigned relay_lanes_reclaim(relay *r);
/* Lane l's loop, until force_quit. */
int relay_lane_main(relay *r, lane *l);
/* Every job still waiting, dropped (teardown, lanes stopped). */
void relay_lanes_drain(relay *r);

/* ---- control.c: control messages, subscribers, upstream, counters ---- */

const char *relay_ip_str(uint32_t ip, char *buf);
void relay_latest_note(relay *r, uint64_t m, uint32_t v, int set);
/* Follow publisher run `run` from now on (keyed): said, counted when it
 * replaces one, and the repair cache emptied of the old run's frames. */
void relay_follow_run(relay *r, uint64_t run, lcore_stats *st);
sub *relay_sub_add(relay *r, uint32_t ip, uint16_t data_port, uint16_t eth_port,
		   uint64_t rate_bps, lcore_stats *st);
sub *relay_sub_by_control(relay *r, uint32_t ip, uint16_t ctl_port);
void relay_sub_flush(sub *s);
void relay_sub_remove(relay *r, sub *s);
void relay_on_control(relay *r, struct rte_mbuf *m, const rp_pkt *k, lcore_stats *st);
void relay_on_arp_reply(relay *r, const rp_pkt *k);
void relay_housekeeping(relay *r, lcore_stats *st);
uint64_t relay_sum_counter(const relay *r, int k);
void relay_print_stats(const relay *r, FILE *f);
struct rte_tel_data;
int relay_tel_subscribers(const relay *r, struct rte_tel_data *d);
/* /bfpatch/stats and /bfpatch/subscribers for r (one relay a process) */
void relay_telemetry_register(relay *r);

#endif
