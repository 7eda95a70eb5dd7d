/* bench_mac.c: single-thread cost of the candidate frame MACs and hashes
 * (libsodium, OpenSSL EVP, libgcrypt, intel-ipsec-mb) at the datagram
 * sizes the relay sees. Keys are set up once outside the timed loop, as a
 * receiver holds them; the per-message nonce/IV setup is inside it.
 * Every MAC is computed twice and compared, checked to change when the
 * message does, and checked against a second library where both
 * implement the same function, before it is timed. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <sodium.h>
#ifdef HAVE_GCRYPT
#include <gcrypt.h>
#endif
#ifdef HAVE_BFP_AUTH
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"
#endif
#ifdef HAVE_IPSEC_MB
#include <intel-ipsec-mb.h>
#endif

#ifndef BENCH_BUILD
#define BENCH_BUILD "unknown"
#endif

#define MAX_MSG 8900
#define MAX_TAG 64

static const size_t sizes[] = { 48, 1200, 1500, 8000, 8900 };
#define N_SIZES (sizeof(sizes) / sizeof(sizes[0]))

/* One candidate. mac() writes the tag of msg under message number seq
 * (which feeds the nonce, IV or per-message key) and returns its length,
 * or 0 on a library error. */
struct algo {
	const char *name;
	const char *group;
	int (*setup)(struct algo *a);
	size_t (*mac)(struct algo *a, uint64_t seq, const uint8_t *msg, size_t len, uint8_t *tag);
	void *ctx;  /* library context, keyed once */
	void *ctx2; /* a second one where the algorithm needs it */
	int ok;
	double best[N_SIZES], median[N_SIZES];
};

static uint8_t key[64];
static uint8_t scratch[MAX_MSG + 64];
static volatile uint8_t sink;

static void nonce12(uint8_t n[12], uint64_t seq)
{
	memset(n, 0, 12);
	for (int i = 0; i < 8; i++)
		n[4 + i] = (uint8_t)(seq >> (8 * i));
}

/* --- libsodium --- */

static int s_none(struct algo *a)
{
	(void)a;
	return 0;
}

static size_t s_b2b_keyed(struct algo *a, uint64_t seq, const uint8_t *m, size_t len, uint8_t *t)
{
	(void)a;
	(void)seq;
	return crypto_generichash(t, 16, m, len, key, 32) == 0 ? 16 : 0;
}

static int s_b2b_prekeyed_setup(struct algo *a)
{
	a->ctx = sodium_malloc(sizeof(crypto_generichash_state));
	if (!a->ctx)
		return -1;
	return crypto_generichash_init(a->ctx, key, 32, 16);
}

/* the keyed state after the key block, copied per message: one
 * compression less than crypto_generichash with a key */
static size_t s_b2b_prekeyed(struct algo *a, uint64_t seq, const uint8_t *m, size_t len, uint8_t *t)
{
	(void)seq;
	crypto_generichash_state st;
	memcpy(&st, a->ctx, sizeof(st));
	if (crypto_generichash_update(&st, m, len) || crypto_generichash_final(&st, t, 16))
		return 0;
	return 16;
}

static size_t s_b2b_hash(struct algo *a, uint64_t seq, const uint8_t *m, size_t len, uint8_t *t)
{
	(void)a;
	(void)seq;
	return crypto_generichash(t, 32, m, len, NULL, 0) == 0 ? 32 : 0;
}

static int s_aesgcm_setup(struct algo *a)
{
	if (!crypto_aead_aes256gcm_is_available())
		return -1;
	a->ctx = sodium_malloc(sizeof(crypto_aead_aes256gcm_state));
	if (!a->ctx)
		return -1;
	return crypto_aead_aes256gcm_beforenm(a->ctx, key);
}

static size_t s_aesgcm(struct algo *a, uint64_t seq, const uint8_t *m, size_t len, uint8_t *t)
{
	uint8_t n[12];
	unsigned long long tl;
	nonce12(n, seq);
	if (crypto_aead_aes256gcm_encrypt_detached_afternm(scratch, t, &tl, NULL, 0, m, len,
			NULL, n, a->ctx))
		return 0;
	return (size_t)tl;
}

static size_t s_chapoly(struct algo *a, uint64_t seq, const uint8_t *m, size_t len, uint8_t *t)
{
	(void)a;
	uint8_t n[12];
	unsigned long long tl;
	nonce12(n, seq);
	if (crypto_aead_chacha20poly1305_ietf_encrypt_detached(scratch, t, &tl, NULL, 0, m, len,
			NULL, n, key))
		return 0;
	return (size_t)tl;
}

static size_t s_xchapoly(struct algo *a, uint64_t seq, const uint8_t *m, size_t len, uint8_t *t)
{
	(void)a;
	uint8_t n[24] = { 0 };
	unsigned long long tl;
	nonce12(n + 12, seq);
	if (crypto_aead_xchacha20poly1305_ietf_encrypt_detached(scratch, t, &tl, NULL, 0, m, len,
			NULL, n, key))
		return 0;
	return (size_t)tl;
}

/* the same key every message: a lower bound only, Poly1305 keys are
 * one-time */
static size_t s_poly1305(struct algo *a, uint64_t seq, const uint8_t *m, size_t len, uint8_t *t)
{
	(void)a;
	(void)seq;
	return crypto_onetimeauth_poly1305(t, m, len, key) == 0 ? 16 : 0;
}

/* --- OpenSSL --- */

static int o_cipher_setup(struct algo *a, const char *cipher, const uint8_t *k)
{
	EVP_CIPHER *c = EVP_CIPHER_fetch(NULL, cipher, NULL);
	EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
	int ok = c && ctx && EVP_EncryptInit_ex(ctx, c, NULL, k, NULL) == 1;
	EVP_CIPHER_free(c);
	if (!ok) {
		EVP_CIPHER_CTX_free(ctx);
		return -1;
	}
	a->ctx = ctx;
	return 0;
}

static int o_aes128gcm_setup(struct algo *a)
{
	return o_cipher_setup(a, "AES-128-GCM", key);
}

static int o_aes256gcm_setup(struct algo *a)
{
	return o_cipher_setup(a, "AES-256-GCM", key);
}

static int o_chapoly_setup(struct algo *a)
{
	return o_cipher_setup(a, "ChaCha20-Poly1305", key);
}

static size_t o_aead_tag(EVP_CIPHER_CTX *ctx, uint8_t *t)
{
	int n;
	if (EVP_EncryptFinal_ex(ctx, scratch, &n) != 1 ||
	    EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, 16, t) != 1)
		return 0;
	return 16;
}

static size_t o_aead_aad(struct algo *a, uint64_t seq, const uint8_t *m, size_t len, uint8_t *t)
{
	uint8_t n[12];
	int nl;
	nonce12(n, seq);
	if (EVP_EncryptInit_ex(a->ctx, NULL, NULL, NULL, n) != 1 ||
	    EVP_EncryptUpdate(a->ctx, NULL, &nl, m, (int)len) != 1)
		return 0;
	return o_aead_tag(a->ctx, t);
}

static size_t o_aead_enc(struct algo *a, uint64_t seq, const uint8_t *m, size_t len, uint8_t *t)
{
	uint8_t n[12];
	int nl;
	nonce12(n, seq);
	if (EVP_EncryptInit_ex(a->ctx, NULL, NULL, NULL, n) != 1 ||
	    EVP_EncryptUpdate(a->ctx, scratch, &nl, m, (int)len) != 1)
		return 0;
	return o_aead_tag(a->ctx, t);
}

static int o_mac_setup(struct algo *a, const char *mac, const OSSL_PARAM *params,
	const uint8_t *k, size_t kl)
{
	EVP_MAC *mc = EVP_MAC_fetch(NULL, mac, NULL);
	EVP_MAC_CTX *ctx = mc ? EVP_MAC_CTX_new(mc) : NULL;
	EVP_MAC_free(mc);
	if (!ctx)
		return -1;
	if ((params && EVP_MAC_CTX_set_params(ctx, params) != 1) ||
	    (k && EVP_MAC_init(ctx, k, kl, params) != 1)) {
		EVP_MAC_CTX_free(ctx);
		return -1;
	}
	a->ctx = ctx;
	return 0;
}

static size_t o_mac_run(EVP_MAC_CTX *ctx, const uint8_t *k, size_t kl, const OSSL_PARAM *p,
	const uint8_t *m, size_t len, uint8_t *t)
{
	size_t tl;
	if (EVP_MAC_init(ctx, k, kl, p) != 1 || EVP_MAC_update(ctx, m, len) != 1 ||
	    EVP_MAC_final(ctx, t, &tl, MAX_TAG) != 1)
		return 0;
	return tl;
}

static int o_gmac_setup(struct algo *a)
{
	OSSL_PARAM p[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_CIPHER, (char *)a->ctx2, 0),
		OSSL_PARAM_construct_end(),
	};
	uint8_t n[12];
	nonce12(n, 0);
	OSSL_PARAM q[] = {
		OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_IV, n, sizeof(n)),
		OSSL_PARAM_construct_end(),
	};
	if (o_mac_setup(a, "GMAC", p, NULL, 0))
		return -1;
	/* key once; the IV alone per message */
	return EVP_MAC_init(a->ctx, key, strcmp(a->ctx2, "AES-128-GCM") ? 32 : 16, q) == 1 ? 0 : -1;
}

static size_t o_gmac(struct algo *a, uint64_t seq, const uint8_t *m, size_t len, uint8_t *t)
{
	uint8_t n[12];
	nonce12(n, seq);
	OSSL_PARAM q[] = {
		OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_IV, n, sizeof(n)),
		OSSL_PARAM_construct_end(),
	};
	return o_mac_run(a->ctx, NULL, 0, q, m, len, t);
}

static int o_poly1305_setup(struct algo *a)
{
	return o_mac_setup(a, "POLY1305", NULL, NULL, 0);
}

/* per-message key: as a ChaCha20 keystream block would give one (the
 * derivation itself is not timed) */
static size_t o_poly1305(struct algo *a, uint64_t seq, const uint8_t *m, size_t len, uint8_t *t)
{
	uint8_t k[32];
	memcpy(k, key, 32);
	for (int i = 0; i < 8; i++)
		k[16 + i] ^= (uint8_t)(seq >> (8 * i));
	return o_mac_run(a->ctx, k, 32, NULL, m, len, t);
}

static int o_hmac_setup(struct algo *a)
{
	OSSL_PARAM p[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, "SHA256", 0),
		OSSL_PARAM_construct_end(),
	};
	return o_mac_setup(a, "HMAC", p, key, 32);
}

/* no key: HMAC and KMAC restart from the key they hold */
static size_t o_mac_rekeyless(struct algo *a, uint64_t seq, const uint8_t *m, size_t len, uint8_t *t)
{
	(void)seq;
	return o_mac_run(a->ctx, NULL, 0, NULL, m, len, t);
}

static int o_siphash_setup(struct algo *a)
{
	size_t sz = 16;
	OSSL_PARAM p[] = {
		OSSL_PARAM_construct_size_t(OSSL_MAC_PARAM_SIZE, &sz),
		OSSL_PARAM_construct_end(),
	};
	return o_mac_setup(a, "SIPHASH", p, key, 16);
}

/* SipHash's key set up costs a few additions; it is passed every time
 * since a keyless init does not restart every 3.0 release's state */
static size_t o_siphash(struct algo *a, uint64_t seq, const uint8_t *m, size_t len, uint8_t *t)
{
	(void)seq;
	return o_mac_run(a->ctx, key, 16, NULL, m, len, t);
}

static int o_kmac_setup(struct algo *a)
{
	size_t sz = 16;
	OSSL_PARAM p[] = {
		OSSL_PARAM_construct_size_t(OSSL_MAC_PARAM_SIZE, &sz),
		OSSL_PARAM_construct_end(),
	};
	return o_mac_setup(a, "KMAC128", p, key, 32);
}

static int o_md_setup(struct algo *a)
{
	EVP_MD *md = EVP_MD_fetch(NULL, a->ctx2, NULL);
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	if (!md || !ctx) {
		EVP_MD_free(md);
		EVP_MD_CTX_free(ctx);
		return -1;
	}
	a->ctx = ctx;
	a->ctx2 = md;
	return 0;
}

static size_t o_md(struct algo *a, uint64_t seq, const uint8_t *m, size_t len, uint8_t *t)
{
	(void)seq;
	unsigned int tl;
	if (EVP_DigestInit_ex2(a->ctx, a->ctx2, NULL) != 1 ||
	    EVP_DigestUpdate(a->ctx, m, len) != 1 || EVP_DigestFinal_ex(a->ctx, t, &tl) != 1)
		return 0;
	return tl;
}

/* --- libgcrypt --- */

#ifdef HAVE_GCRYPT
static int g_mac_setup(struct algo *a, int algo, size_t kl)
{
	gcry_mac_hd_t h;
	if (gcry_mac_open(&h, algo, 0, NULL) || gcry_mac_setkey(h, key, kl))
		return -1;
	a->ctx = h;
	return 0;
}

static int g_gmac_setup(struct algo *a)
{
	return g_mac_setup(a, GCRY_MAC_GMAC_AES, 32);
}

static int g_poly1305aes_setup(struct algo *a)
{
	return g_mac_setup(a, GCRY_MAC_POLY1305_AES, 32);
}

static size_t g_mac(struct algo *a, const uint8_t *n, size_t nl, const uint8_t *m, size_t len,
	uint8_t *t)
{
	size_t tl = 16;
	/* reset after, not before: Poly1305-AES refuses a reset before
	 * its first nonce */
	if (gcry_mac_setiv(a->ctx, n, nl) || gcry_mac_write(a->ctx, m, len) ||
	    gcry_mac_read(a->ctx, t, &tl) || gcry_mac_reset(a->ctx))
		return 0;
	return tl;
}

static size_t g_gmac(struct algo *a, uint64_t seq, const uint8_t *m, size_t len, uint8_t *t)
{
	uint8_t n[12];
	nonce12(n, seq);
	return g_mac(a, n, 12, m, len, t);
}

static size_t g_poly1305aes(struct algo *a, uint64_t seq, const uint8_t *m, size_t len,
	uint8_t *t)
{
	uint8_t n[16] = { 0 };
	nonce12(n + 4, seq);
	return g_mac(a, n, 16, m, len, t);
}

static int g_blake2s_setup(struct algo *a)
{
	gcry_md_hd_t h;
	if (gcry_md_open(&h, GCRY_MD_BLAKE2S_256, 0))
		return -1;
	a->ctx = h;
	return 0;
}

static size_t g_blake2s(struct algo *a, uint64_t seq, const uint8_t *m, size_t len, uint8_t *t)
{
	(void)seq;
	gcry_md_reset(a->ctx);
	gcry_md_write(a->ctx, m, len);
	const uint8_t *d = gcry_md_read(a->ctx, GCRY_MD_BLAKE2S_256);
	if (!d)
		return 0;
	memcpy(t, d, 32);
	return 32;
}
#endif

#ifdef HAVE_BFP_AUTH
/* --- bfpatch's own trailer (common/auth.c): what every frame costs a
 * sender to seal and a shim or relay to open (the same tag, then a
 * compare) --- */
static rp_auth bfp_auth;

static int b_setup(struct algo *a)
{
	(void)a;
	char path[] = "/tmp/bench_macXXXXXX", line[80], err[256];
	int fd = mkstemp(path);
	if (fd < 0)
		return -1;
	int n = snprintf(line, sizeof(line), "1 ");
	for (int i = 0; i < 32; i++)
		n += snprintf(line + n, sizeof(line) - (size_t)n, "%02x", key[i]);
	line[n++] = '\n';
	int ok = fchmod(fd, 0600) == 0 && write(fd, line, (size_t)n) == n;
	close(fd);
	ok = ok && rp_auth_load(&bfp_auth, path, err, sizeof(err)) == 0;
	unlink(path);
	return ok ? 0 : -1;
}

static size_t b_seal(struct algo *a, uint64_t seq, const uint8_t *m, size_t len, uint8_t *t)
{
	(void)a;
	(void)seq;
	rp_auth_seal(&bfp_auth, m, len, 0, t);
	return RP_AUTH_LEN;
}
#endif

/* --- intel-ipsec-mb (the library under DPDK's crypto_ipsec_mb) --- */

#ifdef HAVE_IPSEC_MB
static IMB_MGR *imb;

static int i_gcm_setup(struct algo *a, int bits)
{
	struct gcm_key_data *kd = aligned_alloc(64, (sizeof(*kd) + 63) & ~(size_t)63);
	struct gcm_context_data *c = aligned_alloc(64, (sizeof(*c) + 63) & ~(size_t)63);
	if (!imb || !kd || !c) {
		free(kd);
		free(c);
		return -1;
	}
	if (bits == 128)
		IMB_AES128_GCM_PRE(imb, key, kd);
	else
		IMB_AES256_GCM_PRE(imb, key, kd);
	a->ctx = kd;
	a->ctx2 = c;
	return 0;
}

static int i_gcm128_setup(struct algo *a)
{
	return i_gcm_setup(a, 128);
}

static int i_gcm256_setup(struct algo *a)
{
	return i_gcm_setup(a, 256);
}

static size_t i_gmac128(struct algo *a, uint64_t seq, const uint8_t *m, size_t len, uint8_t *t)
{
	uint8_t n[12];
	nonce12(n, seq);
	IMB_AES128_GMAC_INIT(imb, a->ctx, a->ctx2, n, 12);
	IMB_AES128_GMAC_UPDATE(imb, a->ctx, a->ctx2, m, len);
	IMB_AES128_GMAC_FINALIZE(imb, a->ctx, a->ctx2, t, 16);
	return 16;
}

static size_t i_gmac256(struct algo *a, uint64_t seq, const uint8_t *m, size_t len, uint8_t *t)
{
	uint8_t n[12];
	nonce12(n, seq);
	IMB_AES256_GMAC_INIT(imb, a->ctx, a->ctx2, n, 12);
	IMB_AES256_GMAC_UPDATE(imb, a->ctx, a->ctx2, m, len);
	IMB_AES256_GMAC_FINALIZE(imb, a->ctx, a->ctx2, t, 16);
	return 16;
}

static size_t i_gcm128_enc(struct algo *a, uint64_t seq, const uint8_t *m, size_t len, uint8_t *t)
{
	uint8_t n[12];
	nonce12(n, seq);
	IMB_AES128_GCM_ENC(imb, a->ctx, a->ctx2, scratch, m, len, n, NULL, 0, t, 16);
	return 16;
}

static int i_chapoly_setup(struct algo *a)
{
	struct chacha20_poly1305_context_data *c = aligned_alloc(64, (sizeof(*c) + 63) & ~(size_t)63);
	if (!imb || !c)
		return -1;
	a->ctx = c;
	return 0;
}

static size_t i_chapoly(struct algo *a, uint64_t seq, const uint8_t *m, size_t len, uint8_t *t)
{
	uint8_t n[12];
	nonce12(n, seq);
	IMB_CHACHA20_POLY1305_INIT(imb, key, a->ctx, n, m, len);
	IMB_CHACHA20_POLY1305_ENC_FINALIZE(imb, a->ctx, t, 16);
	return 16;
}
#endif

static struct algo algos[] = {
	{ "sodium BLAKE2b-128 keyed", "MAC", s_none, s_b2b_keyed, 0, 0, 0, {0}, {0} },
	{ "sodium BLAKE2b-128 keyed, state copy", "MAC", s_b2b_prekeyed_setup, s_b2b_prekeyed, 0, 0, 0, {0}, {0} },
	{ "sodium AES-256-GCM AD-only (afternm)", "MAC", s_aesgcm_setup, s_aesgcm, 0, 0, 0, {0}, {0} },
	{ "sodium ChaCha20-Poly1305-IETF AD-only", "MAC", s_none, s_chapoly, 0, 0, 0, {0}, {0} },
	{ "sodium XChaCha20-Poly1305 AD-only", "MAC", s_none, s_xchapoly, 0, 0, 0, {0}, {0} },
	{ "sodium Poly1305 raw (fixed key)", "bound", s_none, s_poly1305, 0, 0, 0, {0}, {0} },
	{ "OpenSSL AES-128-GCM AAD-only", "MAC", o_aes128gcm_setup, o_aead_aad, 0, 0, 0, {0}, {0} },
	{ "OpenSSL AES-256-GCM AAD-only", "MAC", o_aes256gcm_setup, o_aead_aad, 0, 0, 0, {0}, {0} },
	{ "OpenSSL EVP_MAC GMAC AES-128", "MAC", o_gmac_setup, o_gmac, 0, "AES-128-GCM", 0, {0}, {0} },
	{ "OpenSSL EVP_MAC GMAC AES-256", "MAC", o_gmac_setup, o_gmac, 0, "AES-256-GCM", 0, {0}, {0} },
	{ "OpenSSL AES-128-GCM encrypt msg", "MAC", o_aes128gcm_setup, o_aead_enc, 0, 0, 0, {0}, {0} },
	{ "OpenSSL AES-256-GCM encrypt msg", "MAC", o_aes256gcm_setup, o_aead_enc, 0, 0, 0, {0}, {0} },
	{ "OpenSSL ChaCha20-Poly1305 AAD-only", "MAC", o_chapoly_setup, o_aead_aad, 0, 0, 0, {0}, {0} },
	{ "OpenSSL EVP_MAC POLY1305 msg key", "MAC", o_poly1305_setup, o_poly1305, 0, 0, 0, {0}, {0} },
	{ "OpenSSL EVP_MAC HMAC-SHA256", "MAC", o_hmac_setup, o_mac_rekeyless, 0, 0, 0, {0}, {0} },
	{ "OpenSSL EVP_MAC SIPHASH-2-4-128", "MAC", o_siphash_setup, o_siphash, 0, 0, 0, {0}, {0} },
	{ "OpenSSL EVP_MAC KMAC128-128", "MAC", o_kmac_setup, o_mac_rekeyless, 0, 0, 0, {0}, {0} },
#ifdef HAVE_GCRYPT
	{ "gcrypt GMAC-AES-256", "MAC", g_gmac_setup, g_gmac, 0, 0, 0, {0}, {0} },
	{ "gcrypt Poly1305-AES", "MAC", g_poly1305aes_setup, g_poly1305aes, 0, 0, 0, {0}, {0} },
#endif
#ifdef HAVE_BFP_AUTH
	{ "bfpatch trailer (GMAC-128, then AES-128)", "MAC", b_setup, b_seal, 0, 0, 0, {0}, {0} },
#endif
#ifdef HAVE_IPSEC_MB
	{ "ipsec-mb GMAC AES-128", "MAC", i_gcm128_setup, i_gmac128, 0, 0, 0, {0}, {0} },
	{ "ipsec-mb GMAC AES-256", "MAC", i_gcm256_setup, i_gmac256, 0, 0, 0, {0}, {0} },
	{ "ipsec-mb AES-128-GCM encrypt msg", "MAC", i_gcm128_setup, i_gcm128_enc, 0, 0, 0, {0}, {0} },
	{ "ipsec-mb ChaCha20-Poly1305 AAD-only", "MAC", i_chapoly_setup, i_chapoly, 0, 0, 0, {0}, {0} },
#endif
	{ "OpenSSL SHA-256", "hash", o_md_setup, o_md, 0, "SHA256", 0, {0}, {0} },
	{ "OpenSSL BLAKE2s-256", "hash", o_md_setup, o_md, 0, "BLAKE2S-256", 0, {0}, {0} },
	{ "OpenSSL BLAKE2b-512", "hash", o_md_setup, o_md, 0, "BLAKE2B-512", 0, {0}, {0} },
	{ "sodium BLAKE2b-256", "hash", s_none, s_b2b_hash, 0, 0, 0, {0}, {0} },
#ifdef HAVE_GCRYPT
	{ "gcrypt BLAKE2s-256", "hash", g_blake2s_setup, g_blake2s, 0, 0, 0, {0}, {0} },
#endif
};
#define N_ALGOS (sizeof(algos) / sizeof(algos[0]))

static struct algo *find(const char *name)
{
	for (size_t i = 0; i < N_ALGOS; i++)
		if (algos[i].ok && !strcmp(algos[i].name, name))
			return &algos[i];
	return NULL;
}

/* Repeatable with the same nonce, different when one message bit
 * flips, and (for a tag of the same size) different for another nonce
 * unless the algorithm takes none. */
static int self_check(struct algo *a, uint8_t *msg)
{
	uint8_t t1[MAX_TAG], t2[MAX_TAG];
	for (size_t s = 0; s < N_SIZES; s++) {
		size_t len = sizes[s];
		size_t l1 = a->mac(a, 7, msg, len, t1);
		size_t l2 = a->mac(a, 7, msg, len, t2);
		if (!l1 || l1 != l2 || sodium_memcmp(t1, t2, l1))
			return -1;
		msg[len / 2] ^= 0x10;
		l2 = a->mac(a, 7, msg, len, t2);
		msg[len / 2] ^= 0x10;
		if (l1 != l2 || !sodium_memcmp(t1, t2, l1))
			return -1;
	}
	return 0;
}

/* Where two libraries compute the same function, their tags agree. */
static int cross_check(const char *x, const char *y, uint8_t *msg)
{
	struct algo *a = find(x), *b = find(y);
	if (!a || !b)
		return 0;
	uint8_t t1[MAX_TAG], t2[MAX_TAG];
	for (size_t s = 0; s < N_SIZES; s++) {
		size_t l1 = a->mac(a, 99, msg, sizes[s], t1);
		size_t l2 = b->mac(b, 99, msg, sizes[s], t2);
		size_t l = l1 < l2 ? l1 : l2;
		if (!l || memcmp(t1, t2, l)) {
			printf("cross-check FAILED: %s vs %s at %zu B\n", x, y, sizes[s]);
			return -1;
		}
	}
	printf("cross-check ok: %s = %s\n", x, y);
	return 0;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* n messages, each with its own nonce; the tags feed a volatile sink */
static double run(struct algo *a, const uint8_t *msg, size_t len, uint64_t n, uint64_t *seq)
{
	uint8_t t[MAX_TAG] = { 0 };
	uint8_t acc = 0;
	double t0 = now_s();
	for (uint64_t i = 0; i < n; i++) {
		a->mac(a, (*seq)++, msg, len, t);
		acc ^= t[0];
	}
	double dt = now_s() - t0;
	sink = acc;
	return dt;
}

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;
	return (a > b) - (a < b);
}

static void measure(struct algo *a, const uint8_t *msg, size_t s, double rep_s)
{
	size_t len = sizes[s];
	uint64_t seq = 1, n = 16;
	/* warm up and size the run: until one batch takes a tenth of a rep */
	while (run(a, msg, len, n, &seq) < rep_s / 10)
		n *= 2;
	double dt = run(a, msg, len, n, &seq);
	n = (uint64_t)((double)n * rep_s / dt) + 1;
	double r[3];
	for (int i = 0; i < 3; i++)
		r[i] = run(a, msg, len, n, &seq) * 1e9 / (double)n;
	qsort(r, 3, sizeof(r[0]), cmp_double);
	a->best[s] = r[0];
	a->median[s] = r[1];
}

static void cpu_model(char *out, size_t outlen)
{
	snprintf(out, outlen, "unknown");
	FILE *f = fopen("/proc/cpuinfo", "r");
	if (!f)
		return;
	char line[256];
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "model name", 10)) {
			char *c = strchr(line, ':');
			if (c) {
				c += 2;
				c[strcspn(c, "\n")] = 0;
				snprintf(out, outlen, "%s", c);
			}
			break;
		}
	}
	fclose(f);
}

int main(int argc, char **argv)
{
	double rep_s = 0.2;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick")) {
			rep_s = 0.02;
		} else {
			fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
			return 2;
		}
	}
	if (sodium_init() < 0)
		return 1;
#ifdef HAVE_GCRYPT
	const char *gver = gcry_check_version(NULL);
	gcry_control(GCRYCTL_DISABLE_SECMEM, 0);
	gcry_control(GCRYCTL_INITIALIZATION_FINISHED, 0);
#else
	const char *gver = "not built";
#endif

#ifdef HAVE_IPSEC_MB
	static const char *const arch_name[] = { "none", "no-aesni", "sse", "avx", "avx2", "avx512" };
	IMB_ARCH arch = IMB_ARCH_NONE;
	imb = alloc_mb_mgr(0);
	if (imb)
		init_mb_mgr_auto(imb, &arch);
	char iver[64];
	snprintf(iver, sizeof(iver), "%s (%s)", imb_get_version_str(),
		(unsigned)arch < sizeof(arch_name) / sizeof(arch_name[0]) ? arch_name[arch] : "?");
#else
	const char *iver = "not built";
#endif

	char cpu[128];
	cpu_model(cpu, sizeof(cpu));
	printf("cpu:      %s\n", cpu);
	printf("compiler: %s\n", __VERSION__);
	printf("build:    %s\n", BENCH_BUILD);
	printf("libs:     libsodium %s, %s, libgcrypt %s, intel-ipsec-mb %s\n",
		sodium_version_string(), OpenSSL_version(OPENSSL_VERSION), gver, iver);
	printf("run:      1 thread, keys set up once, per-message nonce; best and median "
		"of 3 runs of %.2f s each\n\n", rep_s);

	static uint8_t msg[MAX_MSG];
	randombytes_buf(key, sizeof(key));
	randombytes_buf(msg, sizeof(msg));

	int bad = 0;
	for (size_t i = 0; i < N_ALGOS; i++) {
		struct algo *a = &algos[i];
		if (a->setup(a)) {
			printf("unavailable: %s\n", a->name);
			continue;
		}
		if (self_check(a, msg)) {
			printf("self-check FAILED: %s\n", a->name);
			bad = 1;
			continue;
		}
		a->ok = 1;
	}
	bad |= cross_check("sodium AES-256-GCM AD-only (afternm)", "OpenSSL AES-256-GCM AAD-only", msg);
	bad |= cross_check("OpenSSL AES-256-GCM AAD-only", "OpenSSL EVP_MAC GMAC AES-256", msg);
	bad |= cross_check("OpenSSL AES-128-GCM AAD-only", "OpenSSL EVP_MAC GMAC AES-128", msg);
	bad |= cross_check("sodium AES-256-GCM AD-only (afternm)", "gcrypt GMAC-AES-256", msg);
	bad |= cross_check("sodium ChaCha20-Poly1305-IETF AD-only", "OpenSSL ChaCha20-Poly1305 AAD-only", msg);
	bad |= cross_check("sodium AES-256-GCM AD-only (afternm)", "ipsec-mb GMAC AES-256", msg);
	bad |= cross_check("OpenSSL AES-128-GCM AAD-only", "ipsec-mb GMAC AES-128", msg);
	bad |= cross_check("OpenSSL AES-128-GCM encrypt msg", "ipsec-mb AES-128-GCM encrypt msg", msg);
	bad |= cross_check("sodium ChaCha20-Poly1305-IETF AD-only", "ipsec-mb ChaCha20-Poly1305 AAD-only", msg);
	bad |= cross_check("sodium BLAKE2b-128 keyed", "sodium BLAKE2b-128 keyed, state copy", msg);
	printf("\n");

	for (size_t i = 0; i < N_ALGOS; i++)
		if (algos[i].ok)
			for (size_t s = 0; s < N_SIZES; s++)
				measure(&algos[i], msg, s, rep_s);

	printf("ns per message, best of 3 (median)%*s", 9, "");
	for (size_t s = 0; s < N_SIZES; s++)
		printf(" %14zu B", sizes[s]);
	printf("  target\n");
	for (size_t i = 0; i < N_ALGOS; i++) {
		struct algo *a = &algos[i];
		if (!a->ok)
			continue;
		printf("%-5s %-37s", a->group, a->name);
		for (size_t s = 0; s < N_SIZES; s++)
			printf(" %7.1f (%6.1f)", a->best[s], a->median[s]);
		/* 1500 B under 350 ns and 8000 B under 900 ns */
		printf("  %s\n", a->best[2] < 350 && a->best[3] < 900 ? "yes" : "no");
	}
	printf("\nGB/s, from the best run%*s", 21, "");
	for (size_t s = 0; s < N_SIZES; s++)
		printf(" %6zu B", sizes[s]);
	printf("\n");
	for (size_t i = 0; i < N_ALGOS; i++) {
		struct algo *a = &algos[i];
		if (!a->ok)
			continue;
		printf("%-5s %-37s", a->group, a->name);
		for (size_t s = 0; s < N_SIZES; s++)
			printf(" %8.2f", (double)sizes[s] / a->best[s]);
		printf("\n");
	}
	return bad;
}
