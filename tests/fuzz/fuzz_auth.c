/*
 * fuzz_auth.c: libFuzzer harness for the authentication trailer of
 * docs/PROTOCOL.md section 4 (common/auth.c) as receivers use it, with a
 * --key and a table of peer keys loaded, each datagram in guarded memory.
 *
 * Input byte 0 picks the mode (bits 0-1):
 *   0  the rest is a datagram opened as a frame;
 *   1  the rest is a control message from the sender and at the receiver
 *      time of bytes 1-8 (replay memory included);
 *   2  the rest is a message, sealed as a frame under the --key bound to
 *      the run of bytes 1-8, then (bit 2) one bit flipped at the place
 *      bytes 9-10 name: the sealed one must open to the same message and
 *      run, a flipped one must not open;
 *   3  the same sealed under a peer key, as a control message stamped at
 *      the receiver's time: it opens as control (once), never as a frame.
 * Any datagram that opens must end in a trailer whose key is held and
 * whose tag is the one sealing its message again gives.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"
#include "guard.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define DGRAM_MAX 9100

static rp_auth A; /* the receiver: --key id 1, peers 7 and 9 */

static void write_key(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0 || chmod(path, 0600) != 0)
		abort();
}

static void setup(void)
{
	char dir[] = "/tmp/bfpfuzzauthXXXXXX", path[64], err[256];
	if (!mkdtemp(dir))
		abort();
	snprintf(path, sizeof(path), "%s/key", dir);
	write_key(path, "1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n");
	if (rp_auth_load(&A, path, err, sizeof(err)))
		abort();
	unlink(path);
	snprintf(path, sizeof(path), "%s/peers", dir);
	write_key(path,
		  "7 0707070707070707070707070707070707070707070707070707070707070707\n"
		  "9 0909090909090909090909090909090909090909090909090909090909090909\n");
	if (rp_auth_load_peers(&A, path, err, sizeof(err)))
		abort();
	unlink(path);
	rmdir(dir);
}

static uint64_t rd64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* p[0, len) opened OK to msg_len: its trailer follows, under a key held,
 * and sealing the message again with that key, run and time gives it. */
static void check_opened(const uint8_t *p, size_t len, size_t msg_len)
{
	if (msg_len + RP_AUTH_LEN != len)
		abort();
	const rp_key *k = rp_auth_key_of(&A, p, msg_len);
	if (!k)
		abort();
	uint8_t t[RP_AUTH_LEN];
	rp_auth_seal_key(k, rp_auth_msg_run(&A, p, msg_len), p, msg_len, rd64(p + msg_len + 16), t);
	if (memcmp(t, p + msg_len, RP_AUTH_LEN))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int ready;
	static guarded g;
	if (!ready) {
		setup();
		if (guarded_alloc(&g, DGRAM_MAX + RP_AUTH_LEN))
			abort();
		ready = 1;
	}
	if (size < 11 || size - 11 > DGRAM_MAX)
		return 0;
	const int mode = data[0] & 3;
	const uint64_t v = rd64(data + 1);
	const size_t pos = (size_t)data[9] | (size_t)data[10] << 8;
	const uint8_t *rest = data + 11;
	const size_t n = size - 11;
	size_t ml = 0;
	if (mode < 2) { /* a datagram as it came, the end at the guard page */
		uint8_t *p = g.p + DGRAM_MAX + RP_AUTH_LEN - n;
		memcpy(p, rest, n);
		if (rp_auth_strip(p, n) > n)
			abort();
		rp_auth_result r = rp_auth_open_from(&A, (uint32_t)v, (uint16_t)(v >> 32), p, n,
						     mode == 1, v, &ml);
		if (r == RP_AUTH_OK)
			check_opened(p, n, ml);
		return 0;
	}
	/* a message sealed here, maybe with one bit flipped */
	uint8_t *p = g.p + DGRAM_MAX - n;
	memcpy(p, rest, n);
	const uint64_t now = rp_auth_now_us();
	if (mode == 2) {
		A.run = v;
		rp_auth_seal(&A, p, n, 0, p + n);
	} else {
		rp_auth_seal_key(rp_auth_peer(&A, (data[0] & 8) ? 9 : 7), v, p, n, now, p + n);
	}
	const int flip = data[0] & 4;
	if (flip) {
		size_t at = pos % ((n + RP_AUTH_LEN) * 8);
		p[at / 8] ^= (uint8_t)(1u << (at % 8));
	}
	rp_auth_result r = rp_auth_open_from(&A, (uint32_t)v, 7, p, n + RP_AUTH_LEN, mode == 3,
					     now, &ml);
	if (flip) {
		if (r == RP_AUTH_OK)
			abort(); /* a flipped bit always refused */
		return 0;
	}
	if (mode == 3 && r != RP_AUTH_OK && r != RP_AUTH_REPLAY)
		abort(); /* a fresh peer-signed control message, or the same again */
	if (mode == 2 && (r != RP_AUTH_OK || ml != n || rp_auth_msg_run(&A, p, ml) != v))
		abort();
	if (r == RP_AUTH_OK)
		check_opened(p, n + RP_AUTH_LEN, ml);
	if (mode == 3 && rp_auth_open(&A, p, n + RP_AUTH_LEN, 0, 0, &ml) != RP_AUTH_UNKNOWN_KEY)
		abort(); /* a peer key never verifies a frame */
	return 0;
}
