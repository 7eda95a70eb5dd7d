/*
 * test_auth.c: frame and control-message authentication (common/auth.h):
 * a trailer verifies under its key and no other; every single flipped bit
 * anywhere in a signed datagram, and every truncation, is refused; a second
 * key (a rollover) verifies; control messages must be fresh and are
 * accepted once; key files with loose permissions or bad contents are
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

static void load(rp_auth *a, const char *name, const char *text)
{
	char err[256];
	assert_int_equal(rp_auth_load(a, key_file(name, text, 0600), err, sizeof(err)), 0);
}

static void test_seal_open_round_trip_matches_libsodium(void **state)
{
	(void)state;
	static rp_auth a;
	memset(&a, 0, sizeof(a));
	load(&a, "k1", K1);
	uint8_t d[1200 + RP_AUTH_LEN];
	for (size_t i = 0; i < 1200; i++)
		d[i] = (uint8_t)(i * 31 + 7);
	rp_auth_seal(&a, d, 1200, 0, d + 1200);
	size_t ml = 0;
	assert_int_equal(rp_auth_open(&a, d, sizeof(d), 0, 0, &ml), RP_AUTH_OK);
	assert_int_equal(ml, 1200);
	/* independently: BLAKE2b-128 keyed, over the message and the trailer head */
	uint8_t key[32], in[1200 + 16], tag[16];
	for (int i = 0; i < 32; i++)
		key[i] = (uint8_t)i;
	memcpy(in, d, 1200 + 16);
	crypto_generichash(tag, 16, in, sizeof(in), key, 32);
	assert_memory_equal(tag, d + 1200 + 16, 16);
	assert_memory_equal(d + 1200, "BFPA", 4);
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
	assert_int_equal(rp_auth_open(&a, d, sizeof(d), 1, now, &ml), RP_AUTH_STALE);
	rp_auth_seal(&a, d, 32, now - 29000000u, d + 32);
	assert_int_equal(rp_auth_open(&a, d, sizeof(d), 1, now, &ml), RP_AUTH_OK);
	/* a frame trailer carries no time: a control-style trailer is no frame */
	assert_int_equal(rp_auth_open(&a, d, sizeof(d), 0, now, &ml), RP_AUTH_BAD_TAG);

	/* a replay after its tag left the table (RP_AUTH_SEEN other messages
	 * since, within the time window) is still refused */
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

	/* a sender whose clock is 25 s fast: once its message is forgotten,
	 * senders with a right clock still pass, and its message replayed is
	 * still refused */
	static rp_auth b;
	memset(&b, 0, sizeof(b));
	load(&b, "k1", K1);
	const uint64_t t0 = now + 60000000;
	uint8_t fast[32 + RP_AUTH_LEN];
	memset(fast, 9, 32);
	rp_auth_seal(&b, fast, 32, t0 + 25000000, fast + 32);
	assert_int_equal(rp_auth_open(&b, fast, sizeof(fast), 1, t0, &ml), RP_AUTH_OK);
	for (uint32_t i = 0; i < RP_AUTH_SEEN; i++) {
		memcpy(d, &i, sizeof(i));
		rp_auth_seal(&b, d, 32, t0 + 1000 + i, d + 32);
		assert_int_equal(rp_auth_open(&b, d, sizeof(d), 1, t0 + 10000, &ml), RP_AUTH_OK);
	}
	memset(d, 5, 32);
	rp_auth_seal(&b, d, 32, t0 + 20000, d + 32);
	assert_int_equal(rp_auth_open(&b, d, sizeof(d), 1, t0 + 20000, &ml), RP_AUTH_OK);
	assert_int_equal(rp_auth_open(&b, fast, sizeof(fast), 1, t0 + 30000, &ml), RP_AUTH_STALE);
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
		cmocka_unit_test(test_seal_open_round_trip_matches_libsodium),
		cmocka_unit_test(test_every_bit_flip_and_truncation_is_refused),
		cmocka_unit_test(test_wrong_key_and_rollover),
		cmocka_unit_test(test_control_messages_are_fresh_and_accepted_once),
		cmocka_unit_test(test_key_files_are_checked),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		rc = rc ? rc : 1;
	return rc;
}
