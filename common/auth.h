/*
 * auth.h: message authentication for frames and control messages
 * (docs/PROTOCOL.md section 4, docs/SECURITY.md). A sender appends a
 * 32-byte trailer to the datagram: magic, key id, a timestamp and a
 * 16-byte keyed BLAKE2b tag (libsodium crypto_generichash) over the
 * message and the trailer's first 16 bytes. Receivers that hold keys
 * accept only datagrams whose trailer verifies under one of them (two
 * keys during a rollover); control messages must also be fresh (within
 * RP_AUTH_WINDOW_S of the receiver's clock) and not seen before.
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

#define RP_AUTH_MAGIC 0x41504642u /* "BFPA" */
#define RP_AUTH_LEN 32u
#define RP_AUTH_MAX_KEYS 4u
#define RP_AUTH_WINDOW_S 30u
/* control messages remembered; a message no newer than the newest one
 * forgotten is refused as stale, so a replay is refused even after its
 * tag left the table (at more than RP_AUTH_SEEN messages per window,
 * fresh ones sent with a late clock are refused too) */
#define RP_AUTH_SEEN 4096u
#define RP_AUTH_FUTURE 64u

typedef struct rp_key {
	uint32_t id;
	uint8_t k[32];
} rp_key;

typedef struct rp_auth {
	rp_key keys[RP_AUTH_MAX_KEYS]; /* keys[0] signs; all verify */
	unsigned n_keys;
	uint8_t seen[RP_AUTH_SEEN][16]; /* tags of recent control messages */
	uint64_t seen_ts[RP_AUTH_SEEN];  /* their times */
	unsigned seen_next;
	uint64_t forgotten_ts;           /* newest time of a tag forgotten */
	/* times of tags forgotten while still ahead of our clock (a sender
	 * whose clock is fast): refused exactly, until they leave the
	 * window, rather than raising forgotten_ts into the future and
	 * refusing every sender with a right clock meanwhile */
	uint64_t future_ts[RP_AUTH_FUTURE];
	unsigned n_future;
} rp_auth;

typedef enum rp_auth_result {
	RP_AUTH_OK = 0,
	RP_AUTH_MISSING = 1,  /* no trailer (or the message is too short) */
	RP_AUTH_UNKNOWN_KEY = 2,
	RP_AUTH_BAD_TAG = 3,  /* forged, tampered or truncated */
	RP_AUTH_STALE = 4,    /* control message outside the time window */
	RP_AUTH_REPLAY = 5,   /* control message seen before */
} rp_auth_result;

/* Initialise libsodium (once per process); 0 or -1. */
int rp_auth_init(void);

/* Add the key in path (the first added signs). 0, or -1 with a message:
 * unreadable, group/other permissions, malformed, duplicate id, too many. */
int rp_auth_load(rp_auth *a, const char *path, char *err, size_t errlen);

/* Fill out[RP_AUTH_LEN], the trailer of msg[0, len) under keys[0];
 * time_us is 0 for frames, the sender's Unix time in us for control. */
void rp_auth_seal(const rp_auth *a, const uint8_t *msg, size_t len, uint64_t time_us,
		  uint8_t out[RP_AUTH_LEN]);

/* Check the trailer at the end of p[0, len). On RP_AUTH_OK *msg_len is
 * the length without it. control: also check freshness against now_us
 * and remember the tag, refusing one seen before. */
rp_auth_result rp_auth_open(rp_auth *a, const uint8_t *p, size_t len, int control,
			    uint64_t now_us, size_t *msg_len);

/* What a receiver does with a datagram: with keys, rp_auth_open (now
 * taken from the clock for control messages); without keys, a trailer is
 * stripped unchecked. *msg_len is the length without the trailer. */
rp_auth_result rp_auth_accept(rp_auth *a, const uint8_t *p, size_t len, int control,
			      size_t *msg_len);

/* rp_ctl_build (proto.h) into p[0, cap), followed by a trailer signed at
 * the current time when a holds keys; the length, or 0 if it does not fit.
 * The control message type is passed opaque to keep this header free of
 * proto.h. */
struct rp_ctl;
size_t rp_auth_ctl_build(const rp_auth *a, uint8_t *p, size_t cap, const struct rp_ctl *c);

/* Whether p[0, len) ends in something shaped like a trailer (its magic). */
int rp_auth_has_trailer(const uint8_t *p, size_t len);

/* Unix time in microseconds (CLOCK_REALTIME). */
uint64_t rp_auth_now_us(void);

extern const char *const rp_auth_result_names[6];

#endif
