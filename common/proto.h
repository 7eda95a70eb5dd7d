/*
 * proto.h: the relay's packet logic as pure functions over bytes (no DPDK
 * types): classify an Ethernet frame, build Ethernet/IPv4/UDP headers with
 * correct checksums, ARP replies, the control messages of
 * docs/PROTOCOL.md, a token bucket and the repair-cache index. Unit tests
 * and fuzzers drive these directly; main.c wires them to mbufs.
 */
#ifndef BFP_RELAY_PROTO_H
#define BFP_RELAY_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define RP_ETH_LEN 14u
#define RP_IP_LEN 20u
#define RP_UDP_LEN 8u
#define RP_HDRS (RP_ETH_LEN + RP_IP_LEN + RP_UDP_LEN) /* 42 */

/* ---- option parsing shared by the relay and the CLI ---- */

/* An unsigned number (decimal, or 0x hex) with an optional k/m/g suffix
 * (x1e3, x1e6, x1e9), within [lo, hi]; 0 or -1. */
int rp_parse_num(const char *s, uint64_t lo, uint64_t hi, uint64_t *out);
/* A size in bytes: as rp_parse_num, but k/m/g are KiB, MiB, GiB (x2^10,
 * x2^20, x2^30), as operators size memory. */
int rp_parse_bytes(const char *s, uint64_t lo, uint64_t hi, uint64_t *out);
/* A rate in bit/s as rp_parse_num reads it, at most hi: 0 (none given)
 * or at least 1000, since "100" meant as Mbit/s would be 100 bit/s. */
int rp_parse_rate(const char *s, uint64_t hi, uint64_t *out);
/* The daemons' signal set-up (publisher, relay): fn handles sig unless
 * whoever started the process had it ignored (nohup: SIGHUP). */
void rp_catch_signal(int sig, void (*fn)(int));
/* "aa:bb:cc:dd:ee:ff" exactly; 0 or -1. */
int rp_parse_mac(const char *s, uint8_t mac[6]);
/* "A.B.C.D:PORT" (port 1..65535), host order; the text after the port must
 * be empty or start with ',' (then *rest points at it; rest may be NULL
 * only when nothing may follow). 0 or -1. */
int rp_parse_hostport(const char *s, uint32_t *ip, uint16_t *port, const char **rest);

/* ---- classification ---- */

typedef enum rp_class {
	RP_DROP_SHORT = 0,    /* too short for its headers */
	RP_DROP_ETHERTYPE,    /* not IPv4 or ARP (VLANs, IPv6, ...) */
	RP_DROP_IP,           /* bad IPv4 header, options, fragment, checksum */
	RP_DROP_NOT_OURS,     /* IPv4 not to one of our addresses */
	RP_DROP_PROTO,        /* not UDP */
	RP_DROP_UDP,          /* bad UDP length or checksum */
	RP_DROP_PORT,         /* UDP to a port we do not serve */
	RP_DROP_FRAME,        /* data port, but not a valid bfpatch frame */
	RP_DROP_ENCODING,     /* a frame in an encoding this build does not know
	                       * (from a newer publisher: docs/DEPLOY.md) */
	RP_DROP_ARP,          /* ARP we do not answer */
	RP_ARP_REQUEST,       /* who-has one of our addresses */
	RP_ARP_REPLY,         /* an answer: learn sender MAC */
	RP_DATA,              /* a frame on the data port */
	RP_CONTROL,           /* a message on the control port */
	RP_CLASS_COUNT
} rp_class;

extern const char *const rp_class_names[RP_CLASS_COUNT];

typedef struct rp_addrs {
	uint32_t ip[8];       /* our IPv4 addresses, host order */
	unsigned n_ip;
	uint16_t data_port;
	uint16_t control_port;
	int check_crc;        /* verify the frame CRC32C on the data path */
	int udp_sum_from_header; /* a data frame's UDP checksum is not checked here (a NIC
			      * did, or the receiver of what is relayed will):
			      * payload_sum is derived from it without reading
			      * the payload; a checksum of 0 is still summed */
} rp_addrs;

typedef struct rp_pkt {
	rp_class cls;
	uint32_t src_ip, dst_ip;    /* host order */
	uint16_t src_port, dst_port;
	uint8_t src_mac[6];
	uint16_t l4_off;            /* start of the UDP payload */
	uint16_t l4_len;            /* UDP payload length */
	uint32_t arp_target_ip;     /* ARP: target protocol address */
	uint32_t payload_sum;       /* data/control: rp_sum() of the UDP payload
				     * (or its equal, from the checksum) */
} rp_pkt;

/* Classify an Ethernet frame of len bytes. Reads only within [p, p+len). */
rp_class rp_classify(const uint8_t *p, size_t len, const rp_addrs *a, rp_pkt *out);

/* ---- building ---- */

/* Internet checksum helpers (RFC 1071), 32-bit partial sums. */
uint32_t rp_sum(const void *p, size_t len, uint32_t sum);
/* sum folded to 16 bits; inline: the relay folds a few sums per packet,
 * and a call to a library function (which position-independent code may
 * not inline) costs more than the fold */
static inline uint16_t rp_fold(uint32_t sum)
{
	while (sum >> 16)
		sum = (sum & 0xFFFF) + (sum >> 16);
	return (uint16_t)sum;
}

/* Write Ethernet/IPv4/UDP headers (RP_HDRS bytes) for a UDP payload of
 * payload_len bytes whose one's-complement sum is payload_sum (from
 * rp_sum(payload, len, 0)); both checksums are computed. ip_id: IPv4 id. */
void rp_build_udp(uint8_t *h, const uint8_t dst_mac[6], const uint8_t src_mac[6],
		  uint32_t src_ip, uint32_t dst_ip, uint16_t src_port,
		  uint16_t dst_port, uint16_t payload_len, uint32_t payload_sum,
		  uint16_t ip_id);

/* Turn an ARP request (as classified) in place into the reply from
 * our_mac; returns 0, or -1 if the packet is not an ARP request. */
int rp_arp_reply_inplace(uint8_t *p, size_t len, const uint8_t our_mac[6]);

/* Write a 42-byte ARP request for target_ip from (our_mac, our_ip). */
size_t rp_arp_request(uint8_t *p, const uint8_t our_mac[6], uint32_t our_ip,
		      uint32_t target_ip);

/* ---- control messages: docs/PROTOCOL.md ---- */

#define RP_CTL_MAGIC 0x43504642u /* "BFPC" */
#define RP_CTL_VERSION 1u
#define RP_CTL_HDR 28u
#define RP_NACK_MAX 128u
/* JOIN version of a relay: it holds no weights and wants no catch-up. */
/* frames answered per NACK, at most (PROTOCOL.md 2.4): a NACK of 128
 * ranges cannot make a sender resend more than this */
#define RP_NACK_ANSWER_MAX 4096u
#define RP_VERSION_RELAY 0xFFFFFFFFu
/* JOIN version of a subscriber that holds no usable version (new, or a
 * commit failed verification, or its repairs went unanswered): it asks
 * for a keyframe stream of the current version. */
#define RP_VERSION_NONE 0xFFFFFFFEu

typedef enum rp_ctl_type {
	RP_JOIN = 1,
	RP_LEAVE = 2,
	RP_NACK = 3,
	RP_HEARTBEAT = 4,
} rp_ctl_type;

/* NACK flag: the missing frames are of the keyframe stream of version
 * (encodings 3 and 4), not of the patch to it. */
#define RP_NACK_KEY 1u

typedef struct rp_range {
	uint32_t first; /* first missing frame index */
	uint32_t count; /* number of frames from first */
} rp_range;

typedef struct rp_ctl {
	uint8_t type;
	uint64_t model_id;
	uint32_t version;    /* JOIN/HEARTBEAT: version held; NACK: target */
	uint32_t rate_kbps;  /* JOIN: what the subscriber's link takes (0: default) */
	uint16_t data_port;  /* JOIN: where the subscriber receives frames */
	uint16_t flags;      /* NACK: RP_NACK_KEY */
	uint16_t n_ranges;   /* NACK */
	rp_range ranges[RP_NACK_MAX];
} rp_ctl;

/* Parse a control message; 0 on success, -1 if malformed (any rule of
 * PROTOCOL.md section 2). */
int rp_ctl_parse(const uint8_t *p, size_t len, rp_ctl *c);

/* Serialise; returns the length written, 0 if cap is too small. */
size_t rp_ctl_build(uint8_t *p, size_t cap, const rp_ctl *c);

/* ---- token bucket (pacing) ---- */

typedef struct rp_bucket {
	uint64_t rate;    /* bytes per second; 0 = unlimited */
	uint64_t burst;   /* bytes */
	uint64_t tokens;  /* scaled: bytes * hz */
	uint64_t last;    /* timestamp, in ticks */
} rp_bucket;

void rp_bucket_init(rp_bucket *b, uint64_t rate_bytes, uint64_t burst_bytes,
		    uint64_t now);
/* Take len bytes at time now (ticks of a clock at hz); 1 if allowed. */
int rp_bucket_take(rp_bucket *b, uint64_t len, uint64_t now, uint64_t hz);
/* Fill the bucket to its burst (it starts empty). */
void rp_bucket_fill(rp_bucket *b, uint64_t hz);
/* Take as many of n units as the bucket holds at time now: how many. */
uint64_t rp_bucket_take_upto(rp_bucket *b, uint64_t n, uint64_t now, uint64_t hz);

/* ---- repair cache index ---- */

/* The repair cache's index: entries in insertion order in a ring (cap
 * entries), found through a hash of 2*cap slots; evicts oldest first by
 * version window (the last K target versions of each model), byte budget
 * and slots. */
typedef struct rp_cache_entry {
	uint64_t model_id;
	uint32_t version;
	uint32_t index;
	uint32_t bytes;
	uint32_t dead;  /* dropped by rp_cache_drop_version(), still in the
			 * ring until eviction reaches it */
	void *obj;      /* the cached packet (an mbuf in the relay) */
	uint64_t tag;   /* the caller's (rp_cache_put_tagged), to tell copies
			 * apart without reading obj */
	uint32_t hkey;  /* the hash of (model_id, version, index) */
	uint32_t run;   /* 1: found through its run (rp_cache_run), not the
			 * hash */
} rp_cache_entry;

/* Models whose version windows the cache tracks at once; a frame of one
 * more evicts the oldest entries until a model has none left. */
#define RP_CACHE_MODELS 16
/* Frames of a model in a row that are older than its window: then its
 * publisher started over at lower versions (a training run resumed from
 * an earlier checkpoint), and the window follows them. */
#define RP_CACHE_RESTART 1024

typedef struct rp_cache_model {
	uint64_t id;
	uint32_t newest;       /* newest target version seen */
	uint32_t entries;      /* entries cached; 0: the slot is free */
	uint32_t too_old;      /* frames older than the window, in a row */
} rp_cache_model;

/* Entries of one (model, version) at consecutive indices and consecutive
 * ring positions, found by arithmetic: a stream's frames in the order
 * they were published are indexed without the hash, so that storing one
 * and evicting the oldest touch no hash slot. Other entries (out of
 * order, or while every run slot is in use) go through the hash. */
#define RP_CACHE_RUNS 8
typedef struct rp_cache_run {
	uint64_t model_id;
	uint32_t version;
	uint32_t index;        /* of its first entry */
	uint32_t pos;          /* ring position of its first entry */
	uint32_t n;            /* entries (dead ones too); 0: the slot is free */
} rp_cache_run;

typedef struct rp_cache {
	rp_cache_entry *ring;
	uint64_t *hash;        /* the key's hash << 32 | ring position + 1;
				* 0 = empty */
	uint32_t cap, head, len;
	uint64_t bytes, budget;
	uint32_t keep_versions; /* K */
	rp_cache_model models[RP_CACHE_MODELS];
	rp_cache_run runs[RP_CACHE_RUNS];
	int tail_run;          /* the run of the newest entry, -1: none */
	uint32_t n_hashed;     /* entries in the hash */
} rp_cache;

/* cap: a power of two; ring has cap entries, hash 2*cap slots. */
int rp_cache_init(rp_cache *c, rp_cache_entry *ring, uint64_t *hash,
		  uint32_t cap, uint64_t budget, uint32_t keep_versions);
/* Insert; evicted objects (oldest first) are passed to drop(ctx, obj).
 * Returns 1 if inserted, 0 if already present (obj not kept), -1 if not
 * cacheable (larger than the whole budget, or older than the K versions
 * of its model kept; obj not kept). */
int rp_cache_put(rp_cache *c, uint64_t model, uint32_t version, uint32_t index,
		 uint32_t bytes, void *obj, void (*drop)(void *, void *), void *ctx);
/* rp_cache_put, keeping tag in the entry. */
int rp_cache_put_tagged(rp_cache *c, uint64_t model, uint32_t version, uint32_t index,
			uint32_t bytes, uint64_t tag, void *obj,
			void (*drop)(void *, void *), void *ctx);
/* rp_cache_put_tagged of a key that rp_cache_find() did not find, the
 * cache unchanged since: the same, without looking for it again. */
int rp_cache_put_absent(rp_cache *c, uint64_t model, uint32_t version, uint32_t index,
			uint32_t bytes, uint64_t tag, void *obj,
			void (*drop)(void *, void *), void *ctx);
/* The live entry of (model, version, index), or NULL; valid until the
 * cache is next changed. */
const rp_cache_entry *rp_cache_find(const rp_cache *c, uint64_t model, uint32_t version,
				    uint32_t index);
void *rp_cache_get(const rp_cache *c, uint64_t model, uint32_t version,
		   uint32_t index);
void rp_cache_clear(rp_cache *c, void (*drop)(void *, void *), void *ctx);
/* The object of the entry q places after the oldest (the one that q + 1
 * insertions into a full cache evict), NULL if none, its index slot
 * loaded into the CPU's cache ahead of its eviction: a hint, which
 * changes nothing. */
static inline void *rp_cache_prefetch_evictee(const rp_cache *c, uint32_t q)
{
	if (q >= c->len)
		return NULL;
	const rp_cache_entry *e = &c->ring[(c->head + q) & (c->cap - 1)];
	if (e->dead)
		return NULL;
	if (!e->run)
		__builtin_prefetch(&c->hash[e->hkey & (2 * c->cap - 1)]);
	return e->obj;
}
/* Drop every entry of (model, version), passing each object to drop:
 * the frames of a version that its publisher made again with other
 * content. Returns how many. */
uint32_t rp_cache_drop_version(rp_cache *c, uint64_t model, uint32_t version,
			       void (*drop)(void *, void *), void *ctx);

#endif
