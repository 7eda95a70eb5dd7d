/*
 * auth.h: message authentication for frames and control messages
 * (docs/PROTOCOL.md section 4, docs/SECURITY.md). A sender appends a
 * 40-byte trailer to the datagram: magic, key id, the publisher run the
 * message belongs to, a timestamp and a 16-byte tag over the message and
 * the trailer's first 24 bytes. Receivers that hold keys
 * accept only datagrams whose trailer verifies under one of them (two
 * keys during a rollover); control messages must also be fresh (from
 * RP_AUTH_WINDOW_S behind the receiver's clock to RP_AUTH_AHEAD_S ahead)
 * and not seen before, remembered per sender.
 *
 * Keys live in files of one line, "KEY_ID HEX64" (a decimal id, then 32
 * bytes in hex), readable by the owner only (mode 0600 or 0400): any
 * group or other permission is refused. Contexts are plain structs; one
 * per thread (the replay memory is written by rp_auth_open).
 */
#ifndef BFP_RP_AUTH_H
#define BFP_RP_AUTH_H

#include <stddef.h>
#include <stdint.h>

#define RP_AUTH_MAGIC 0x32414642u /* "BFA2" */
#define RP_AUTH_LEN 40u
#define RP_AUTH_TAG_OFF 24u /* the tag covers the message and trailer[0, 24) */
#define RP_AUTH_MAX_KEYS 4u
/* a control message is accepted from at most RP_AUTH_WINDOW_S seconds
 * behind the receiver's clock to RP_AUTH_AHEAD_S ahead of it (the clock
 * skew tolerated); one stamped further ahead is refused as RP_AUTH_FUTURE
 * and changes nothing */
#define RP_AUTH_WINDOW_S 30u
#define RP_AUTH_AHEAD_S 5u
/* Anti-replay memory (docs/SECURITY.md "Replays"), fixed in size:
 * - per sender (IPv4 address and UDP port a control message came from),
 *   RP_AUTH_SENDERS of them: its last RP_AUTH_SENDER_SEEN tags, and the
 *   newest time among those it forgot (a message of that sender no newer
 *   is refused as stale); one sender's messages move only its own;
 * - across senders, the last RP_AUTH_SEEN tags accepted from anyone, so a
 *   message captured from one sender is refused from another address.
 * A new sender takes a free slot, else the least recently seen one (of
 * its own host once that holds RP_AUTH_SENDERS_PER_HOST). */
#define RP_AUTH_SEEN 4096u
#define RP_AUTH_SENDERS 256u
#define RP_AUTH_SENDER_SEEN 32u
#define RP_AUTH_SENDERS_PER_HOST 16u
#define RP_AUTH_RESULTS 7u

/* A key, and what its tags are made with (auth.c), derived from k when
 * the key is loaded: the two AES-128 keys (mk), and for intel-ipsec-mb
 * the GMAC key data (expanded keys, GHASH tables) and the expanded key of
 * the outer block cipher; serial tells apart keys that took the same
 * memory one after the other (OpenSSL contexts are cached by it). */
typedef struct rp_key {
	uint32_t id;
	uint8_t k[32];
	uint8_t mk[32];
	uint64_t serial;
	_Alignas(64) uint8_t gmac[1024];
	_Alignas(16) uint8_t prf[16 * 11];
} rp_key;

typedef struct rp_auth_sender {
	uint64_t from;                   /* IPv4 address << 16 | port */
	uint64_t last_us;                /* receiver's clock at its latest message */
	uint64_t cutoff_ts;              /* newest time of a tag of its forgotten */
	uint64_t ts[RP_AUTH_SENDER_SEEN];
	uint8_t tag[RP_AUTH_SENDER_SEEN][16];
	unsigned next, n;                /* n == 0: a free slot */
} rp_auth_sender;

typedef struct rp_auth {
	rp_key keys[RP_AUTH_MAX_KEYS]; /* keys[0] signs; all verify */
	unsigned n_keys;
	/* --peer-keys: one key per downstream peer (docs/SECURITY.md "Keys
	 * per hop"), sorted by id; control messages verify under these too,
	 * frames never (a peer sends none), and what goes to a peer is
	 * signed with its own (rp_auth_key_of). Allocated by
	 * rp_auth_load_peers, freed by rp_auth_free. */
	rp_key *peers;
	unsigned n_peers;
	/* the publisher run this node's messages are bound to, sealed into
	 * every trailer it makes: a publisher's own (rp_auth_new_run), the
	 * one a relay or shim follows, 0 while it follows none */
	uint64_t run;
	rp_auth_sender senders[RP_AUTH_SENDERS];
	uint8_t seen[RP_AUTH_SEEN][16]; /* tags of recent control messages, any sender */
	unsigned seen_next;
	/* counters, by rp_auth_result: control messages (rp_auth_open*),
	 * frames refused (rp_auth_accept_from only: rp_auth_open writes
	 * nothing for a frame, so threads may share a context for frames) */
	uint64_t ctl[RP_AUTH_RESULTS];
	uint64_t frames[RP_AUTH_RESULTS];
	uint64_t evicted;        /* senders forgotten within the window */
	int64_t last_skew_us;    /* time_us - now of the last stale or future one */
	uint8_t last_ctl_refused, last_frame_refused; /* their rp_auth_result */
} rp_auth;

typedef enum rp_auth_result {
	RP_AUTH_OK = 0,
	RP_AUTH_MISSING = 1,  /* no trailer (or the message is too short) */
	RP_AUTH_UNKNOWN_KEY = 2,
	RP_AUTH_BAD_TAG = 3,  /* forged, tampered or truncated */
	RP_AUTH_STALE = 4,    /* control message older than the window, or no newer
			       * than one its sender's memory forgot */
	RP_AUTH_REPLAY = 5,   /* control message seen before */
	RP_AUTH_FUTURE = 6,   /* control message stamped beyond RP_AUTH_AHEAD_S */
} rp_auth_result;

/* Initialise libsodium (once per process); 0 or -1. */
int rp_auth_init(void);

/* Add the key in path (the first added signs). 0, or -1 with a message:
 * unreadable, group/other permissions, malformed, duplicate id, too many. */
int rp_auth_load(rp_auth *a, const char *path, char *err, size_t errlen);

/* Load a table of peer keys (one "KEY_ID HEX64" per line; blank lines
 * and lines starting with '#' are skipped; the file readable by its owner
 * only) into a->peers: 0, or -1 with a message (also for an id that is
 * one of a->keys, or twice in the table, or more than RP_AUTH_MAX_PEERS). */
#define RP_AUTH_MAX_PEERS 65536u
int rp_auth_load_peers(rp_auth *a, const char *path, char *err, size_t errlen);

/* Free what rp_auth_load_peers took. */
void rp_auth_free(rp_auth *a);

/* The key a message accepted with keys verified under (its trailer's key
 * id, among a->keys and a->peers); p[0, msg_len) as for rp_auth_msg_run.
 * NULL without keys. */
const rp_key *rp_auth_key_of(const rp_auth *a, const uint8_t *p, size_t msg_len);

/* The peer key of id id (--peer-keys), or NULL. */
const rp_key *rp_auth_peer(const rp_auth *a, uint32_t id);

/* Whether k is one of a's peer keys (what goes to its holder is signed
 * with k, not forwarded as signed upstream). */
int rp_auth_is_peer(const rp_auth *a, const rp_key *k);

/* The trailer of msg[0, len) under key k, bound to run (rp_auth_seal
 * with a chosen key). */
void rp_auth_seal_key(const rp_key *k, uint64_t run, const uint8_t *msg, size_t len,
		      uint64_t time_us, uint8_t out[RP_AUTH_LEN]);

/* Fill out[RP_AUTH_LEN], the trailer of msg[0, len) under keys[0],
 * bound to a->run; time_us is 0 for frames, the sender's Unix time in us
 * for control. */
void rp_auth_seal(const rp_auth *a, const uint8_t *msg, size_t len, uint64_t time_us,
		  uint8_t out[RP_AUTH_LEN]);

/* Check the trailer at the end of p[0, len). On RP_AUTH_OK *msg_len is
 * the length without it. control: also check freshness against now_us
 * and remember the tag, refusing one seen before, in the memory of the
 * sender at IPv4 address ip (host order) and UDP port port; no other
 * sender's messages are refused for anything this one sent. A frame
 * (control 0) is only verified: the context is not written. */
rp_auth_result rp_auth_open_from(rp_auth *a, uint32_t ip, uint16_t port, const uint8_t *p,
				 size_t len, int control, uint64_t now_us, size_t *msg_len);

/* rp_auth_open_from for a sender of unknown address (0.0.0.0:0): all
 * control messages opened so share one sender's memory. */
rp_auth_result rp_auth_open(rp_auth *a, const uint8_t *p, size_t len, int control,
			    uint64_t now_us, size_t *msg_len);

/* The length of p[0, len) without a trailer, if it ends in one
 * (unchecked: what a receiver without keys does). */
size_t rp_auth_strip(const uint8_t *p, size_t len);

/* What a receiver does with a datagram from ip:port (host order): with
 * keys, rp_auth_open_from (now taken from the clock for control
 * messages), a frame refused counted in a->frames too (so only for a
 * context one thread owns); without keys, rp_auth_strip. *msg_len is the
 * length without the trailer. */
rp_auth_result rp_auth_accept_from(rp_auth *a, uint32_t ip, uint16_t port, const uint8_t *p,
				   size_t len, int control, size_t *msg_len);

/* rp_ctl_build (proto.h) into p[0, cap), followed by a trailer signed at
 * the current time when a holds keys; the length, or 0 if it does not fit.
 * The control message type is passed opaque to keep this header free of
 * proto.h. */
struct rp_ctl;
size_t rp_auth_ctl_build(const rp_auth *a, uint8_t *p, size_t cap, const struct rp_ctl *c);
/* The same signed with key k (NULL: keys[0]): a message to a peer. */
size_t rp_auth_ctl_build_key(const rp_auth *a, const rp_key *k, uint8_t *p, size_t cap,
			     const struct rp_ctl *c);

/* The run a message accepted with keys is bound to: p[0, msg_len) is the
 * message as rp_auth_open* or rp_auth_accept_from left it, its trailer
 * follows. 0 for a message accepted without keys (no trailer read). */
uint64_t rp_auth_msg_run(const rp_auth *a, const uint8_t *p, size_t msg_len);

/* A new publisher run id: random, never 0. */
uint64_t rp_auth_new_run(void);

/* The run as operators read it: 16 hex digits. */
void rp_auth_run_str(uint64_t run, char buf[17]);

/* Whether p[0, len) ends in something shaped like a trailer (its magic). */
int rp_auth_has_trailer(const uint8_t *p, size_t len);

/* Unix time in microseconds (CLOCK_REALTIME). */
uint64_t rp_auth_now_us(void);

extern const char *const rp_auth_result_names[RP_AUTH_RESULTS];

/* How far off the time of the last control message refused as stale or
 * future was: "stamped 28.0 s ahead of this clock: clock skew, 5 s
 * ahead tolerated". */
void rp_auth_skew_str(const rp_auth *a, char *buf, size_t cap);

#endif
