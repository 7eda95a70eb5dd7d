/*
 * test_auth.c: frame and control-message authentication (common/auth.h):
 * a trailer verifies under its key and no other; every single flipped bit
 * anywhere in a signed datagram, and every truncation, is refused; a second
 * key (a rollover) verifies; control messages must be fresh and are
 * accepted once, remembered per sender so that no sender's messages (a
 * flood stamped ahead, many senders) refuse another's; key files with loose permissions or bad contents are
 * refused. The tag is also checked against libsodium's one-shot keyed
 * BLAKE2b, computed here independently.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>
#include <sodium.h>

#include "auth.h"

static char dir[] = "/tmp/bfpauthXXXXXX";

static const char *key_file(const char *name, const char *text, mode_t mode)
{
	static char path[256];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	fputs(text, f);
	fclose(f);
	chmod(path, mode);
	return path;
}

#define K1 "1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n"
#define K2 "2 ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100\n"

/* senders (IPv4, host order) */
#define RIGHT 0x7f000001u /* 127.0.0.1, an honest sender */
#define FAST 0x7f000002u
#define EVIL 0x7f000003u

static void load(rp_auth *a, const char *name, const char *text)
{
	char err[256];
	assert_int_equal(rp_auth_load(a, key_file(name, text, 0600), err, sizeof(err)), 0);
}

/* The tag of p[0, len) (message and trailer head) by OpenSSL, written
 * from PROTOCOL.md 4 alone: keys from keyed BLAKE2b-256 of the label;
 * AES-128-GCM with no plaintext, IV 0, p as associated data; its tag
 * through AES-128-ECB under the second key. */
static void openssl_tag(const uint8_t key[32], const uint8_t *p, size_t len, uint8_t tag[16])
{
	uint8_t dk[32], g[16];
	static const uint8_t iv[12];
	int n = 0;
	crypto_generichash(dk, 32, (const uint8_t *)"bfpatch auth v2", 15, key, 32);
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	assert_int_equal(EVP_EncryptInit_ex(c, EVP_aes_128_gcm(), NULL, dk, iv), 1);
	assert_int_equal(EVP_EncryptUpdate(c, NULL, &n, p, (int)len), 1);
	assert_int_equal(EVP_EncryptFinal_ex(c, g, &n), 1);
	assert_int_equal(EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, 16, g), 1);
	assert_int_equal(EVP_EncryptInit_ex(c, EVP_aes_128_ecb(), NULL, dk + 16, NULL), 1);
	EVP_CIPHER_CTX_set_padding(c, 0);
	assert_int_equal(EVP_EncryptUpdate(c, tag, &n, g, 16), 1);
	assert_int_equal(n, 16);
	EVP_CIPHER_CTX_free(c);
}

/* Sealed trailers are the documented layout, their tag what an
 * independent implementation computes, at every length class (empty,
 * partial blocks, whole blocks, jumbo), and they open again. */
static void test_seal_open_round_trip_matches_openssl(void **state)
{
	(void)state;
	static rp_auth a;
	memset(&a, 0, sizeof(a));
	load(&a, "k1", K1);
	static uint8_t d[8900 + RP_AUTH_LEN];
	uint8_t key[32], tag[16];
	for (int i = 0; i < 32; i++)
		key[i] = (uint8_t)i;
	a.run = 0x0123456789abcdefu;
	static const size_t lens[] = {0, 1, 15, 16, 17, 37, 1200, 1201, 1499, 8900};
	for (size_t t = 0; t < sizeof(lens) / sizeof(lens[0]); t++) {
		size_t len = lens[t];
		for (size_t i = 0; i < len; i++)
			d[i] = (uint8_t)(i * 31 + 7 + t);
		rp_auth_seal(&a, d, len, 0, d + len);
		size_t ml = 0;
		assert_int_equal(rp_auth_open(&a, d, len + RP_AUTH_LEN, 0, 0, &ml), RP_AUTH_OK);
		assert_int_equal(ml, len);
		assert_true(rp_auth_msg_run(&a, d, ml) == 0x0123456789abcdefu);
		openssl_tag(key, d, len + 24, tag);
		assert_memory_equal(tag, d + len + 24, 16);
		assert_memory_equal(d + len, "BFA2", 4);
		/* key id 1, then the run, little-endian */
		assert_memory_equal(d + len + 4, "\x01\0\0\0", 4);
		assert_memory_equal(d + len + 8, "\xef\xcd\xab\x89\x67\x45\x23\x01", 8);
	}
}

static void test_every_bit_flip_and_truncation_is_refused(void **state)
{
	(void)state;
	static rp_auth a;
	memset(&a, 0, sizeof(a));
	load(&a, "k1", K1);
	uint8_t d[300 + RP_AUTH_LEN];
	for (size_t i = 0; i < 300; i++)
		d[i] = (uint8_t)(i ^ 0x5A);
	rp_auth_seal(&a, d, 300, 0, d + 300);
	size_t ml;
	unsigned refused = 0, tried = 0;
	for (size_t byte = 0; byte < sizeof(d); byte++)
		for (int bit = 0; bit < 8; bit++) {
			d[byte] ^= (uint8_t)(1u << bit);
			tried++;
			refused += rp_auth_open(&a, d, sizeof(d), 0, 0, &ml) != RP_AUTH_OK;
			d[byte] ^= (uint8_t)(1u << bit);
		}
	assert_int_equal(refused, tried); /* 100% */
	for (size_t len = 0; len < sizeof(d); len++)
		assert_int_not_equal(rp_auth_open(&a, d, len, 0, 0, &ml), RP_AUTH_OK);
	assert_int_equal(rp_auth_open(&a, d, sizeof(d), 0, 0, &ml), RP_AUTH_OK);
}

static void test_wrong_key_and_rollover(void **state)
{
	(void)state;
	static rp_auth old, both, other;
	memset(&old, 0, sizeof(old));
	memset(&both, 0, sizeof(both));
	memset(&other, 0, sizeof(other));
	load(&old, "k1", K1);
	load(&both, "k2", K2); /* the new key signs, the old one still verifies */
	load(&both, "k1", K1);
	load(&other, "k3", "1 ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff\n");
	uint8_t d[64 + RP_AUTH_LEN], e[64 + RP_AUTH_LEN];
	memset(d, 7, 64);
	memcpy(e, d, 64);
	rp_auth_seal(&old, d, 64, 0, d + 64);
	rp_auth_seal(&both, e, 64, 0, e + 64);
	size_t ml;
	assert_int_equal(rp_auth_open(&both, d, sizeof(d), 0, 0, &ml), RP_AUTH_OK);
	assert_int_equal(rp_auth_open(&both, e, sizeof(e), 0, 0, &ml), RP_AUTH_OK);
	assert_int_equal(rp_auth_open(&old, e, sizeof(e), 0, 0, &ml), RP_AUTH_UNKNOWN_KEY);
	/* same key id, other key bytes: a forgery */
	assert_int_equal(rp_auth_open(&other, d, sizeof(d), 0, 0, &ml), RP_AUTH_BAD_TAG);
	/* no trailer at all */
	assert_int_equal(rp_auth_open(&old, d, 64, 0, 0, &ml), RP_AUTH_MISSING);
}

/* Keys per hop: a relay holding the upstream key and a table of peer
 * keys takes control messages from each peer under its own key, and what
 * it signs for peer A with A's key verifies at A and nowhere else; a peer
 * key never verifies a frame (a peer sends none), so an actor cannot
 * inject frames into its relay; peer tables are checked like key files. */
static void test_peer_keys_sign_for_one_peer_only(void **state)
{
	(void)state;
	static rp_auth relay, actor_a, actor_b;
	memset(&relay, 0, sizeof(relay));
	memset(&actor_a, 0, sizeof(actor_a));
	memset(&actor_b, 0, sizeof(actor_b));
	char err[256];
	load(&relay, "up", K1);
	const char *tab = key_file("peers",
		"# actors\n"
		"7 0707070707070707070707070707070707070707070707070707070707070707\n"
		"\n"
		"5 0505050505050505050505050505050505050505050505050505050505050505\n", 0600);
	assert_int_equal(rp_auth_load_peers(&relay, tab, err, sizeof(err)), 0);
	assert_int_equal(relay.n_peers, 2);
	load(&actor_a, "a", "7 0707070707070707070707070707070707070707070707070707070707070707\n");
	load(&actor_b, "b", "5 0505050505050505050505050505050505050505050505050505050505050505\n");
	/* a JOIN from actor A, under its key: the relay finds the key */
	uint64_t now = rp_auth_now_us();
	uint8_t j[32 + RP_AUTH_LEN];
	memset(j, 1, 32);
	rp_auth_seal(&actor_a, j, 32, now, j + 32);
	size_t ml = 0;
	assert_int_equal(rp_auth_open_from(&relay, 1, 1, j, sizeof(j), 1, now, &ml), RP_AUTH_OK);
	const rp_key *ka = rp_auth_key_of(&relay, j, ml);
	assert_non_null(ka);
	assert_int_equal(ka->id, 7);
	assert_true(rp_auth_is_peer(&relay, ka));
	assert_true(rp_auth_peer(&relay, 5) && rp_auth_peer(&relay, 5)->id == 5);
	assert_null(rp_auth_peer(&relay, 1));
	assert_false(rp_auth_is_peer(&relay, &relay.keys[0]));
	/* the same JOIN as a frame: peer keys verify no frame */
	uint8_t f[100 + RP_AUTH_LEN];
	memset(f, 9, 100);
	rp_auth_seal(&actor_a, f, 100, 0, f + 100);
	assert_int_equal(rp_auth_open(&relay, f, sizeof(f), 0, 0, &ml), RP_AUTH_UNKNOWN_KEY);
	/* a frame the relay signs for A: A takes it, B does not */
	rp_auth_seal_key(ka, 0x1234, f, 100, 0, f + 100);
	assert_int_equal(rp_auth_open(&actor_a, f, sizeof(f), 0, 0, &ml), RP_AUTH_OK);
	assert_true(rp_auth_msg_run(&actor_a, f, ml) == 0x1234);
	assert_int_equal(rp_auth_open(&actor_b, f, sizeof(f), 0, 0, &ml), RP_AUTH_UNKNOWN_KEY);
	/* B signing as if it were A (A's key id, B's key bytes): a forgery */
	static rp_auth forger;
	memset(&forger, 0, sizeof(forger));
	load(&forger, "f", "7 0505050505050505050505050505050505050505050505050505050505050505\n");
	rp_auth_seal(&forger, f, 100, 0, f + 100);
	assert_int_equal(rp_auth_open(&actor_a, f, sizeof(f), 0, 0, &ml), RP_AUTH_BAD_TAG);
	rp_auth_free(&relay);
	assert_null(relay.peers);
	assert_int_equal(relay.n_peers, 0);

	/* tables refused: loose mode, a bad line, an id twice, an id that is
	 * also the --key, no keys */
	static const struct {
		const char *text;
		mode_t mode;
	} bad[] = {
		{"7 0707070707070707070707070707070707070707070707070707070707070707\n", 0644},
		{"7 07070707\n", 0600},
		{"7 0707070707070707070707070707070707070707070707070707070707070707\n"
		 "7 0505050505050505050505050505050505050505050505050505050505050505\n", 0600},
		{"1 0707070707070707070707070707070707070707070707070707070707070707\n", 0600},
		{"# nothing\n", 0600},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(rp_auth_load_peers(&relay, key_file("bad", bad[i].text, bad[i].mode),
						    err, sizeof(err)), -1);
		assert_null(relay.peers);
	}
}

static void test_control_messages_are_fresh_and_accepted_once(void **state)
{
	(void)state;
	static rp_auth a;
	memset(&a, 0, sizeof(a));
	load(&a, "k1", K1);
	uint64_t now = rp_auth_now_us();
	uint8_t d[32 + RP_AUTH_LEN];
	memset(d, 3, 32);
	size_t ml;
	rp_auth_seal(&a, d, 32, now, d + 32);
	assert_int_equal(rp_auth_open(&a, d, sizeof(d), 1, now, &ml), RP_AUTH_OK);
	assert_int_equal(rp_auth_open(&a, d, sizeof(d), 1, now, &ml), RP_AUTH_REPLAY);
	rp_auth_seal(&a, d, 32, now - 31000000u, d + 32); /* 31 s old */
	assert_int_equal(rp_auth_open(&a, d, sizeof(d), 1, now, &ml), RP_AUTH_STALE);
	rp_auth_seal(&a, d, 32, now + 31000000u, d + 32); /* 31 s ahead */
	assert_int_equal(rp_auth_open(&a, d, sizeof(d), 1, now, &ml), RP_AUTH_FUTURE);
	rp_auth_seal(&a, d, 32, now - 29000000u, d + 32);
	assert_int_equal(rp_auth_open(&a, d, sizeof(d), 1, now, &ml), RP_AUTH_OK);
	/* a frame trailer carries no time: a control-style trailer is no frame */
	assert_int_equal(rp_auth_open(&a, d, sizeof(d), 0, now, &ml), RP_AUTH_BAD_TAG);

	/* a replay after its tag left its sender's memory (RP_AUTH_SENDER_SEEN
	 * and RP_AUTH_SEEN other messages since, within the time window) is
	 * still refused */
	uint8_t first[32 + RP_AUTH_LEN];
	memset(first, 7, 32);
	rp_auth_seal(&a, first, 32, now + 1000, first + 32);
	assert_int_equal(rp_auth_open(&a, first, sizeof(first), 1, now, &ml), RP_AUTH_OK);
	for (uint32_t i = 0; i < RP_AUTH_SEEN; i++) {
		memcpy(d, &i, sizeof(i));
		rp_auth_seal(&a, d, 32, now + 2000 + i, d + 32);
		assert_int_equal(rp_auth_open(&a, d, sizeof(d), 1, now + 5000000, &ml), RP_AUTH_OK);
	}
	assert_int_not_equal(rp_auth_open(&a, first, sizeof(first), 1, now + 15000000, &ml),
			     RP_AUTH_OK);
	/* newer messages still pass */
	rp_auth_seal(&a, d, 32, now + 15000000, d + 32);
	assert_int_equal(rp_auth_open(&a, d, sizeof(d), 1, now + 15000000, &ml), RP_AUTH_OK);

	/* a sender whose clock is 4 s fast (within RP_AUTH_AHEAD_S): once its
	 * message is forgotten, a sender with a right clock still passes,
	 * and its message replayed is still refused */
	static rp_auth b;
	memset(&b, 0, sizeof(b));
	load(&b, "k1", K1);
	const uint64_t t0 = now + 60000000;
	uint8_t fast[32 + RP_AUTH_LEN];
	memset(fast, 9, 32);
	rp_auth_seal(&b, fast, 32, t0 + 4000000, fast + 32);
	assert_int_equal(rp_auth_open_from(&b, FAST, 1, fast, sizeof(fast), 1, t0, &ml), RP_AUTH_OK);
	for (uint32_t i = 0; i < RP_AUTH_SEEN; i++) {
		memcpy(d, &i, sizeof(i));
		rp_auth_seal(&b, d, 32, t0 + 4000000 + 1 + i, d + 32);
		assert_int_equal(rp_auth_open_from(&b, FAST, 1, d, sizeof(d), 1, t0 + 10000, &ml),
				 RP_AUTH_OK);
	}
	memset(d, 5, 32);
	rp_auth_seal(&b, d, 32, t0 + 20000, d + 32);
	assert_int_equal(rp_auth_open_from(&b, RIGHT, 1, d, sizeof(d), 1, t0 + 20000, &ml),
			 RP_AUTH_OK);
	assert_int_equal(rp_auth_open_from(&b, FAST, 1, fast, sizeof(fast), 1, t0 + 30000, &ml),
			 RP_AUTH_STALE);
}

/* A signed control message from sender (ip, port) stamped ts, made
 * distinct by n, opened at now. */
static rp_auth_result ctl_from(rp_auth *a, uint32_t ip, uint16_t port, uint32_t n, uint64_t ts,
			       uint64_t now)
{
	uint8_t d[32 + RP_AUTH_LEN];
	memset(d, 0x11, 32);
	memcpy(d, &n, sizeof(n));
	memcpy(d + 4, &ip, sizeof(ip));
	memcpy(d + 8, &port, sizeof(port));
	rp_auth_seal(a, d, 32, ts, d + 32);
	size_t ml;
	return rp_auth_open_from(a, ip, port, d, sizeof(d), 1, now, &ml);
}

/* The attack: one key holder floods signed LEAVEs stamped 28 s ahead
 * (and, harder, as far ahead as is tolerated); an honest sender's fresh
 * message, and one it sent a little late, are still accepted: no
 * sender's messages move another's window. */
static void test_a_flood_stamped_ahead_does_not_make_another_sender_stale(void **state)
{
	(void)state;
	static rp_auth a;
	memset(&a, 0, sizeof(a));
	load(&a, "k1", K1);
	const uint64_t now = rp_auth_now_us();
	for (uint32_t i = 0; i < 2 * RP_AUTH_SEEN; i++)
		assert_int_equal(ctl_from(&a, EVIL, 40000, i, now + 28000000 + i, now + i),
				 RP_AUTH_FUTURE);
	for (uint32_t i = 0; i < 2 * RP_AUTH_SEEN; i++)
		assert_int_equal(ctl_from(&a, EVIL, 40000, i, now + RP_AUTH_AHEAD_S * 1000000u + i,
					  now + i), RP_AUTH_OK);
	/* the honest sender, now and with its clock 10 s behind */
	assert_int_equal(ctl_from(&a, RIGHT, 7401, 1, now + 10000, now + 10000), RP_AUTH_OK);
	assert_int_equal(ctl_from(&a, RIGHT, 7402, 1, now - 10000000, now + 10000), RP_AUTH_OK);
	assert_int_equal(a.ctl[RP_AUTH_FUTURE], 2 * RP_AUTH_SEEN);
	assert_int_equal(a.ctl[RP_AUTH_STALE], 0);
	/* the flooder moved its own cut-off only */
	assert_int_equal(ctl_from(&a, EVIL, 40000, 99999, now - 10000000, now + 10000),
			 RP_AUTH_STALE);
}

/* A timestamp beyond the tolerated skew is refused as future (counted
 * apart from stale, with how far ahead it was) and remembered nowhere:
 * it moves no window, not even its sender's. */
static void test_a_time_beyond_the_tolerance_is_refused_as_future_and_counted(void **state)
{
	(void)state;
	static rp_auth a;
	memset(&a, 0, sizeof(a));
	load(&a, "k1", K1);
	const uint64_t now = rp_auth_now_us(), ahead = RP_AUTH_AHEAD_S * 1000000u;
	assert_int_equal(ctl_from(&a, FAST, 1, 0, now + ahead + 1000000, now), RP_AUTH_FUTURE);
	assert_int_equal(a.ctl[RP_AUTH_FUTURE], 1);
	assert_int_equal(a.ctl[RP_AUTH_STALE], 0);
	assert_true(a.last_skew_us == (int64_t)(ahead + 1000000));
	assert_int_equal(a.last_ctl_refused, RP_AUTH_FUTURE);
	for (uint32_t i = 0; i < 4 * RP_AUTH_SENDER_SEEN; i++)
		assert_int_equal(ctl_from(&a, FAST, 1, i + 1, now + ahead + 1 + i, now),
				 RP_AUTH_FUTURE);
	/* the same sender, 20 s late, is still within its window */
	assert_int_equal(ctl_from(&a, FAST, 1, 7, now - 20000000, now), RP_AUTH_OK);
	assert_int_equal(ctl_from(&a, FAST, 1, 8, now + ahead, now), RP_AUTH_OK); /* at the edge */
	/* stale is counted as stale, with how far behind */
	assert_int_equal(ctl_from(&a, FAST, 1, 9, now - 31000000, now), RP_AUTH_STALE);
	assert_int_equal(a.ctl[RP_AUTH_STALE], 1);
	assert_true(a.last_skew_us == -31000000);
	assert_int_equal(a.ctl[RP_AUTH_OK], 2);
}

/* A replay is refused from its sender (in its memory, or by its cut-off
 * once forgotten) and from any other address (the cross-sender ring);
 * one sender's forgotten messages refuse nothing of another's. */
static void test_a_replay_is_refused_per_sender(void **state)
{
	(void)state;
	static rp_auth a;
	memset(&a, 0, sizeof(a));
	load(&a, "k1", K1);
	const uint64_t now = rp_auth_now_us();
	uint8_t m[32 + RP_AUTH_LEN];
	memset(m, 0x42, 32);
	rp_auth_seal(&a, m, 32, now - 5000000, m + 32);
	size_t ml;
	assert_int_equal(rp_auth_open_from(&a, RIGHT, 7401, m, sizeof(m), 1, now, &ml), RP_AUTH_OK);
	assert_int_equal(rp_auth_open_from(&a, RIGHT, 7401, m, sizeof(m), 1, now, &ml),
			 RP_AUTH_REPLAY);
	assert_int_equal(rp_auth_open_from(&a, EVIL, 7401, m, sizeof(m), 1, now, &ml),
			 RP_AUTH_REPLAY); /* captured and sent from elsewhere */
	/* RIGHT sends on: its first message leaves its memory, and is still
	 * refused by its cut-off */
	for (uint32_t i = 0; i < RP_AUTH_SENDER_SEEN; i++)
		assert_int_equal(ctl_from(&a, RIGHT, 7401, i, now - 4000000 + i, now), RP_AUTH_OK);
	assert_int_equal(rp_auth_open_from(&a, RIGHT, 7401, m, sizeof(m), 1, now, &ml),
			 RP_AUTH_STALE);
	/* another sender's older message is not refused by RIGHT's cut-off */
	assert_int_equal(ctl_from(&a, FAST, 7401, 1, now - 20000000, now), RP_AUTH_OK);
	assert_int_equal(a.ctl[RP_AUTH_REPLAY], 2);
	/* bad tags and unknown keys are counted apart */
	m[0] ^= 1;
	assert_int_equal(rp_auth_open_from(&a, RIGHT, 7401, m, sizeof(m), 1, now, &ml),
			 RP_AUTH_BAD_TAG);
	m[0] ^= 1;
	m[32 + 4] ^= 1; /* key id */
	assert_int_equal(rp_auth_open_from(&a, RIGHT, 7401, m, sizeof(m), 1, now, &ml),
			 RP_AUTH_UNKNOWN_KEY);
	assert_int_equal(a.ctl[RP_AUTH_BAD_TAG], 1);
	assert_int_equal(a.ctl[RP_AUTH_UNKNOWN_KEY], 1);
	/* frames refused are counted by rp_auth_accept_from only */
	assert_int_equal(rp_auth_accept_from(&a, RIGHT, 7400, m, sizeof(m), 0, &ml),
			 RP_AUTH_UNKNOWN_KEY);
	assert_int_equal(a.frames[RP_AUTH_UNKNOWN_KEY], 1);
	assert_int_equal(a.last_frame_refused, RP_AUTH_UNKNOWN_KEY);
}

/* The memory is fixed (RP_AUTH_SENDERS senders): many senders replace
 * the least recently seen, an evicted sender is accepted again at once,
 * and a flood from many ports of one host replaces only that host's
 * memory, not another's. */
static void test_the_table_stays_bounded_under_many_senders(void **state)
{
	(void)state;
	static rp_auth a;
	memset(&a, 0, sizeof(a));
	load(&a, "k1", K1);
	assert_true(sizeof(rp_auth) < 512 * 1024);
	const uint64_t now = rp_auth_now_us();
	uint8_t m[32 + RP_AUTH_LEN];
	memset(m, 0x24, 32);
	rp_auth_seal(&a, m, 32, now, m + 32);
	size_t ml;
	assert_int_equal(rp_auth_open_from(&a, RIGHT, 7401, m, sizeof(m), 1, now, &ml), RP_AUTH_OK);
	/* one host, 20000 ports: RIGHT's memory stays */
	for (uint32_t i = 0; i < 20000; i++)
		assert_int_equal(ctl_from(&a, EVIL, (uint16_t)(1000 + i), i, now, now + 1 + i),
				 RP_AUTH_OK);
	unsigned evil = 0, used = 0;
	for (unsigned i = 0; i < RP_AUTH_SENDERS; i++) {
		used += a.senders[i].n > 0;
		evil += a.senders[i].n > 0 && a.senders[i].from >> 16 == EVIL;
	}
	assert_int_equal(evil, RP_AUTH_SENDERS_PER_HOST);
	assert_int_equal(used, RP_AUTH_SENDERS_PER_HOST + 1);
	memset(a.seen, 0, sizeof(a.seen)); /* only RIGHT's own memory refuses it now */
	assert_int_equal(rp_auth_open_from(&a, RIGHT, 7401, m, sizeof(m), 1, now + 30000, &ml),
			 RP_AUTH_REPLAY);
	/* 20000 hosts, each one message: the table holds RP_AUTH_SENDERS and
	 * counts what it forgot within the window; RIGHT, forgotten, is
	 * accepted again with its next message */
	for (uint32_t i = 0; i < 20000; i++)
		assert_int_equal(ctl_from(&a, 0x0a000000u + i, 7401, i, now + 40000, now + 40000 + i),
				 RP_AUTH_OK);
	used = 0;
	for (unsigned i = 0; i < RP_AUTH_SENDERS; i++)
		used += a.senders[i].n > 0;
	assert_int_equal(used, RP_AUTH_SENDERS);
	assert_true(a.evicted >= 20000 - RP_AUTH_SENDERS);
	assert_int_equal(ctl_from(&a, RIGHT, 7401, 1, now + 50000, now + 60000), RP_AUTH_OK);
	/* a sender idle beyond the window is replaced without counting */
	const uint64_t evicted = a.evicted, later = now + 36000000 + 60000;
	assert_int_equal(ctl_from(&a, 0x0b000000u, 7401, 1, later, later), RP_AUTH_OK);
	assert_int_equal(a.evicted, evicted);
}

static void test_key_files_are_checked(void **state)
{
	(void)state;
	static rp_auth a;
	memset(&a, 0, sizeof(a));
	char err[256];
	assert_int_equal(rp_auth_load(&a, key_file("loose", K1, 0644), err, sizeof(err)), -1);
	assert_non_null(strstr(err, "chmod 600"));
	assert_int_equal(rp_auth_load(&a, key_file("short", "1 0011\n", 0600), err, sizeof(err)), -1);
	assert_int_equal(rp_auth_load(&a, key_file("junk", K1 "more\n", 0600), err, sizeof(err)), -1);
	assert_int_equal(rp_auth_load(&a, "/nonexistent/key", err, sizeof(err)), -1);
	assert_int_equal(a.n_keys, 0);
	assert_int_equal(rp_auth_load(&a, key_file("ro", K1, 0400), err, sizeof(err)), 0);
	assert_int_equal(rp_auth_load(&a, key_file("dup", K1, 0600), err, sizeof(err)), -1);
	assert_non_null(strstr(err, "id"));
}

int main(void)
{
	if (rp_auth_init() || !mkdtemp(dir))
		return 1;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_seal_open_round_trip_matches_openssl),
		cmocka_unit_test(test_every_bit_flip_and_truncation_is_refused),
		cmocka_unit_test(test_wrong_key_and_rollover),
		cmocka_unit_test(test_peer_keys_sign_for_one_peer_only),
		cmocka_unit_test(test_control_messages_are_fresh_and_accepted_once),
		cmocka_unit_test(test_a_flood_stamped_ahead_does_not_make_another_sender_stale),
		cmocka_unit_test(test_a_time_beyond_the_tolerance_is_refused_as_future_and_counted),
		cmocka_unit_test(test_a_replay_is_refused_per_sender),
		cmocka_unit_test(test_the_table_stays_bounded_under_many_senders),
		cmocka_unit_test(test_key_files_are_checked),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		rc = rc ? rc : 1;
	return rc;
}
