/* auth.c: frame and control-message authentication (auth.h). The tag
 * is AES-128 GMAC of the message with a fixed IV, sent through AES-128
 * under a second key (docs/PROTOCOL.md 4), made by intel-ipsec-mb on
 * x86-64 (RP_MAC_IPSEC_MB) or OpenSSL's libcrypto elsewhere
 * (RP_MAC_OPENSSL; the same tags): the GMAC is the fastest MAC measured
 * here (bench_mac), and the block
 * cipher after it makes the tag a deterministic PRF, so no signer keeps a
 * nonce and no two signers of one key can ever reuse one. The anti-replay
 * memory is fixed-size and kept per sender, so that no sender's messages,
 * however many or however stamped, move another's. */
#define _GNU_SOURCE
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdatomic.h>
#ifdef RP_MAC_IPSEC_MB
#include <intel-ipsec-mb.h>
#else
#include <openssl/evp.h>
#endif
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void wle32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t le64(const uint8_t *p)
{
	return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

/* ---- the MAC's backend: mac_init, mac_key, mac_tag ---- */

#ifdef RP_MAC_IPSEC_MB
_Static_assert(sizeof(struct gcm_key_data) <= sizeof(((rp_key *)0)->gmac), "rp_key.gmac");

/* intel-ipsec-mb's table of functions for this CPU: made once by
 * rp_auth_init, only read after (its direct API keeps no state in it, so
 * threads share it). */
static IMB_MGR *imb;

static int mac_init(void)
{
	if (imb)
		return 0;
	IMB_MGR *m = alloc_mb_mgr(0);
	if (!m)
		return -1;
	init_mb_mgr_auto(m, NULL);
	if (imb_get_errno(m)) {
		free_mb_mgr(m);
		return -1;
	}
	imb = m;
	return 0;
}

static void mac_key(rp_key *k)
{
	uint8_t dec[16 * 11];
	IMB_AES128_GCM_PRE(imb, k->mk, (struct gcm_key_data *)k->gmac);
	IMB_AES_KEYEXP_128(imb, k->mk + 16, k->prf, dec);
	sodium_memzero(dec, sizeof(dec));
}

/* tag = AES-128(K2, GMAC-AES-128(K1, IV 0^96, msg || head)) */
static void mac_tag(const rp_key *k, const uint8_t *msg, size_t len,
		    const uint8_t head[RP_AUTH_TAG_OFF], uint8_t tag[16])
{
	static const uint8_t iv[12], zero[16];
	const struct gcm_key_data *kd = (const struct gcm_key_data *)k->gmac;
	struct gcm_context_data ctx;
	uint8_t g[16];
	IMB_AES128_GMAC_INIT(imb, kd, &ctx, iv, sizeof(iv));
	IMB_AES128_GMAC_UPDATE(imb, kd, &ctx, msg, len);
	IMB_AES128_GMAC_UPDATE(imb, kd, &ctx, head, RP_AUTH_TAG_OFF);
	IMB_AES128_GMAC_FINALIZE(imb, kd, &ctx, g, sizeof(g));
	IMB_AES128_CFB_ONE(imb, tag, zero, g, k->prf, 16); /* 0 ^ AES(K2, g) */
}
#else
static int mac_init(void)
{
	return 0;
}

static void mac_key(rp_key *k)
{
	(void)k; /* contexts are made per thread, when first used */
}

/* An EVP context is keyed once and used by one thread at a time: each
 * thread (a relay's lcores verify at once) keeps its own, for the last
 * keys it used, by key serial. */
#define MAC_CTX_CACHE 16
static _Thread_local struct mac_ctx {
	uint64_t serial;
	EVP_CIPHER_CTX *gcm, *ecb;
} mac_ctx[MAC_CTX_CACHE];
static _Thread_local unsigned mac_ctx_next;

static struct mac_ctx *mac_ctx_of(const rp_key *k)
{
	for (unsigned i = 0; i < MAC_CTX_CACHE; i++)
		if (mac_ctx[i].serial == k->serial && mac_ctx[i].gcm)
			return &mac_ctx[i];
	struct mac_ctx *c = &mac_ctx[mac_ctx_next++ % MAC_CTX_CACHE];
	static const uint8_t iv[12];
	if (!c->gcm && !(c->gcm = EVP_CIPHER_CTX_new()))
		return NULL;
	if (!c->ecb && !(c->ecb = EVP_CIPHER_CTX_new()))
		return NULL;
	c->serial = 0;
	if (EVP_EncryptInit_ex(c->gcm, EVP_aes_128_gcm(), NULL, k->mk, iv) != 1 ||
	    EVP_EncryptInit_ex(c->ecb, EVP_aes_128_ecb(), NULL, k->mk + 16, NULL) != 1)
		return NULL;
	EVP_CIPHER_CTX_set_padding(c->ecb, 0);
	c->serial = k->serial;
	return c;
}

/* tag = AES-128(K2, GMAC-AES-128(K1, IV 0^96, msg || head)); a library
 * failure (out of memory) leaves a tag that verifies nothing */
static void mac_tag(const rp_key *k, const uint8_t *msg, size_t len,
		    const uint8_t head[RP_AUTH_TAG_OFF], uint8_t tag[16])
{
	static const uint8_t iv[12];
	struct mac_ctx *c = mac_ctx_of(k);
	uint8_t g[16], end[16];
	int n = 0, ok = c != NULL && len <= INT32_MAX;
	ok = ok && EVP_EncryptInit_ex(c->gcm, NULL, NULL, NULL, iv) == 1 &&
	     EVP_EncryptUpdate(c->gcm, NULL, &n, msg, (int)len) == 1 &&
	     EVP_EncryptUpdate(c->gcm, NULL, &n, head, RP_AUTH_TAG_OFF) == 1 &&
	     EVP_EncryptFinal_ex(c->gcm, end, &n) == 1 &&
	     EVP_CIPHER_CTX_ctrl(c->gcm, EVP_CTRL_GCM_GET_TAG, 16, g) == 1 &&
	     EVP_EncryptUpdate(c->ecb, tag, &n, g, 16) == 1 && n == 16;
	if (!ok)
		randombytes_buf(tag, 16);
}
#endif

int rp_auth_init(void)
{
	return sodium_init() < 0 || mac_init() ? -1 : 0;
}

uint64_t rp_auth_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* The two AES-128 keys of k, the first 16 and last 16 bytes of keyed
 * BLAKE2b-256 of a label under the key file's key (PROTOCOL.md 4). */
static void key_derive(rp_key *k)
{
	static const char label[] = "bfpatch auth v2";
	static atomic_uint_fast64_t serials;
	crypto_generichash(k->mk, sizeof(k->mk), (const uint8_t *)label, sizeof(label) - 1,
			   k->k, sizeof(k->k));
	k->serial = atomic_fetch_add(&serials, 1) + 1;
	mac_key(k);
}

static int fail(char *err, size_t errlen, const char *path, const char *why)
{
	snprintf(err, errlen, "key file %s: %s", path, why);
	return -1;
}

/* The key of id id among a->keys, and with peers among a->peers too;
 * NULL if none. */
static const rp_key *key_of_id(const rp_auth *a, uint32_t id, int peers)
{
	for (unsigned i = 0; i < a->n_keys; i++)
		if (a->keys[i].id == id)
			return &a->keys[i];
	return peers ? rp_auth_peer(a, id) : NULL;
}

/* A key file (or a table of them) opened for reading: a regular file that
 * only its owner may read or write; NULL after a message. */
static FILE *key_file_open(const char *path, char *err, size_t errlen)
{
	if (rp_auth_init()) {
		fail(err, errlen, path, "cannot initialise libsodium or intel-ipsec-mb");
		return NULL;
	}
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		fail(err, errlen, path, strerror(errno));
		return NULL;
	}
	struct stat sb;
	const char *why = NULL;
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
		why = "not a regular file";
	else if (sb.st_mode & 077)
		why = "readable or writable by others (chmod 600)";
	FILE *f = why ? NULL : fdopen(fd, "r");
	if (!f) {
		close(fd);
		fail(err, errlen, path, why ? why : strerror(errno));
	}
	return f;
}

/* The key of a line "KEY_ID HEX64" (trailing blanks allowed) into k, its
 * two AES keys derived: 0; -1 if the line is not of that form. */
static int key_parse(const char *line, rp_key *k)
{
	memset(k, 0, sizeof(*k));
	unsigned long id;
	char hex[65];
	int used = 0;
	size_t bin = 0;
	int ok = sscanf(line, "%lu %64[0-9a-fA-F]%n", &id, hex, &used) == 2 &&
		 strlen(hex) == 64 && id <= UINT32_MAX &&
		 strspn(line + used, " \t\r\n") == strlen(line + used) &&
		 sodium_hex2bin(k->k, sizeof(k->k), hex, 64, NULL, &bin, NULL) == 0 && bin == 32;
	sodium_memzero(hex, sizeof(hex));
	if (!ok)
		return -1;
	k->id = (uint32_t)id;
	key_derive(k);
	return 0;
}

int rp_auth_load(rp_auth *a, const char *path, char *err, size_t errlen)
{
	FILE *f = key_file_open(path, err, errlen);
	if (!f)
		return -1;
	char buf[256];
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	if (n == 0)
		return fail(err, errlen, path, "cannot read it");
	buf[n] = 0;
	rp_key k;
	int rc = key_parse(buf, &k);
	sodium_memzero(buf, sizeof(buf));
	if (rc)
		rc = fail(err, errlen, path, "expected one line: KEY_ID then 64 hex digits");
	else if (a->n_keys == RP_AUTH_MAX_KEYS)
		rc = fail(err, errlen, path, "too many keys (at most 4)");
	else if (key_of_id(a, k.id, 0))
		rc = fail(err, errlen, path, "a key with this id is loaded already");
	else
		a->keys[a->n_keys++] = k;
	sodium_memzero(&k, sizeof(k));
	return rc;
}

static int peer_cmp(const void *x, const void *y)
{
	const rp_key *a = x, *b = y;
	return a->id < b->id ? -1 : a->id > b->id;
}

/* A peer key by id (binary search of the sorted table), or NULL. */
const rp_key *rp_auth_peer(const rp_auth *a, uint32_t id)
{
	size_t lo = 0, hi = a->n_peers;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (a->peers[mid].id == id)
			return &a->peers[mid];
		if (a->peers[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

int rp_auth_load_peers(rp_auth *a, const char *path, char *err, size_t errlen)
{
	if (a->peers)
		return fail(err, errlen, path, "peer keys are loaded already");
	FILE *f = key_file_open(path, err, errlen);
	if (!f)
		return -1;
	rp_key *t = NULL, k;
	unsigned n = 0, cap = 0, line = 0;
	char buf[256], why[96];
	int rc = 0;
	while (!rc && fgets(buf, sizeof(buf), f)) {
		line++;
		const char *b = buf + strspn(buf, " \t");
		if (*b == '#' || *b == '\n' || *b == '\r' || !*b)
			continue;
		if (key_parse(b, &k)) {
			snprintf(why, sizeof(why), "line %u: expected KEY_ID then 64 hex digits", line);
			rc = fail(err, errlen, path, why);
		} else if (n == RP_AUTH_MAX_PEERS) {
			rc = fail(err, errlen, path, "too many peer keys (at most 65536)");
		} else if (key_of_id(a, k.id, 0)) {
			snprintf(why, sizeof(why), "line %u: key id %u is also a --key", line, k.id);
			rc = fail(err, errlen, path, why);
		} else if (n == cap) {
			rp_key *more = realloc(t, sizeof(*t) * (cap ? 2 * cap : 64));
			if (more) {
				t = more;
				cap = cap ? 2 * cap : 64;
			} else {
				rc = fail(err, errlen, path, "out of memory");
			}
		}
		if (!rc)
			t[n++] = k;
	}
	sodium_memzero(buf, sizeof(buf));
	sodium_memzero(&k, sizeof(k));
	fclose(f);
	if (!rc && !n)
		rc = fail(err, errlen, path, "no keys in it");
	if (!rc) {
		qsort(t, n, sizeof(*t), peer_cmp);
		for (unsigned i = 1; !rc && i < n; i++)
			if (t[i].id == t[i - 1].id) {
				snprintf(why, sizeof(why), "key id %u is there twice", t[i].id);
				rc = fail(err, errlen, path, why);
			}
	}
	if (rc) {
		if (t)
			sodium_memzero(t, sizeof(*t) * cap);
		free(t);
		return rc;
	}
	a->peers = t;
	a->n_peers = n;
	return 0;
}

void rp_auth_free(rp_auth *a)
{
	if (a->peers) {
		sodium_memzero(a->peers, sizeof(*a->peers) * a->n_peers);
		free(a->peers);
	}
	a->peers = NULL;
	a->n_peers = 0;
}

int rp_auth_is_peer(const rp_auth *a, const rp_key *k)
{
	return k && a->n_peers && k >= a->peers && k < a->peers + a->n_peers;
}

const rp_key *rp_auth_key_of(const rp_auth *a, const uint8_t *p, size_t msg_len)
{
	if (!a->n_keys && !a->n_peers)
		return NULL;
	return key_of_id(a, le32(p + msg_len + 4), 1);
}

static void wle64(uint8_t *p, uint64_t v)
{
	wle32(p, (uint32_t)v);
	wle32(p + 4, (uint32_t)(v >> 32));
}

void rp_auth_seal_key(const rp_key *k, uint64_t run, const uint8_t *msg, size_t len,
		      uint64_t time_us, uint8_t out[RP_AUTH_LEN])
{
	wle32(out, RP_AUTH_MAGIC);
	wle32(out + 4, k->id);
	wle64(out + 8, run);
	wle64(out + 16, time_us);
	mac_tag(k, msg, len, out, out + RP_AUTH_TAG_OFF);
}

void rp_auth_seal(const rp_auth *a, const uint8_t *msg, size_t len, uint64_t time_us,
		  uint8_t out[RP_AUTH_LEN])
{
	rp_auth_seal_key(&a->keys[0], a->run, msg, len, time_us, out);
}

uint64_t rp_auth_msg_run(const rp_auth *a, const uint8_t *p, size_t msg_len)
{
	return a->n_keys || a->n_peers ? le64(p + msg_len + 8) : 0;
}

uint64_t rp_auth_new_run(void)
{
	uint64_t r = 0;
	while (!r)
		randombytes_buf(&r, sizeof(r));
	return r;
}

int rp_auth_has_trailer(const uint8_t *p, size_t len)
{
	return len >= RP_AUTH_LEN && le32(p + len - RP_AUTH_LEN) == RP_AUTH_MAGIC;
}

/* The memory of sender from, or NULL. */
static rp_auth_sender *sender_find(rp_auth *a, uint64_t from)
{
	for (unsigned i = 0; i < RP_AUTH_SENDERS; i++)
		if (a->senders[i].n && a->senders[i].from == from)
			return &a->senders[i];
	return NULL;
}

/*
 * A slot for a new sender from (now_us: the receiver's clock): when
 * from's host holds RP_AUTH_SENDERS_PER_HOST slots, the least recently
 * seen of that host's; else a free one; else the least recently seen of
 * all is forgotten.
 *
 * Why eviction cannot lock anyone out: a forgotten sender's next message
 * takes a fresh slot with no cut-off and is accepted, so an evicted
 * sender "rejoins" with its next message, at once; only its replay
 * memory is lost, and a sender idle for RP_AUTH_WINDOW_S +
 * RP_AUTH_AHEAD_S loses nothing by that (all it sent is stale by then).
 * A flood from one address and port holds one slot and moves only its
 * own cut-off; one from many ports of one host holds at most
 * RP_AUTH_SENDERS_PER_HOST slots and then replaces only its own. Only a
 * flood of signed, fresh messages from more than RP_AUTH_SENDERS /
 * RP_AUTH_SENDERS_PER_HOST hosts (a key holder with that many source
 * addresses) replaces other hosts' memory within the window: a replay of
 * what they sent in the last RP_AUTH_WINDOW_S is then still refused while
 * its tag is in the cross-sender ring, and a key holder could sign such
 * a message anew anyway. Those evictions are counted (a->evicted).
 */
static rp_auth_sender *sender_take(rp_auth *a, uint64_t from, uint64_t now_us)
{
	const uint64_t idle = (uint64_t)(RP_AUTH_WINDOW_S + RP_AUTH_AHEAD_S) * 1000000u;
	rp_auth_sender *lru = NULL, *host_lru = NULL, *free_slot = NULL;
	unsigned host = 0;
	for (unsigned i = 0; i < RP_AUTH_SENDERS; i++) {
		rp_auth_sender *s = &a->senders[i];
		if (!s->n) {
			if (!free_slot)
				free_slot = s;
			continue;
		}
		if (!lru || s->last_us < lru->last_us)
			lru = s;
		if (s->from >> 16 == from >> 16) {
			host++;
			if (!host_lru || s->last_us < host_lru->last_us)
				host_lru = s;
		}
	}
	rp_auth_sender *v = host >= RP_AUTH_SENDERS_PER_HOST ? host_lru
			    : free_slot				? free_slot
								: lru;
	if (v->n && v->last_us + idle >= now_us)
		a->evicted++;
	memset(v, 0, sizeof(*v));
	return v;
}

static rp_auth_result ctl_refuse(rp_auth *a, rp_auth_result r, uint64_t ts, uint64_t now_us)
{
	if (r == RP_AUTH_STALE || r == RP_AUTH_FUTURE)
		a->last_skew_us = (int64_t)(ts - now_us);
	return r;
}

/* The control message with tag and time ts from sender from: fresh, not
 * seen before (by its sender's memory and the cross-sender ring), then
 * remembered. */
static rp_auth_result ctl_check(rp_auth *a, uint64_t from, const uint8_t tag[16], uint64_t ts,
				uint64_t now_us)
{
	const uint64_t w = (uint64_t)RP_AUTH_WINDOW_S * 1000000u;
	const uint64_t ahead = (uint64_t)RP_AUTH_AHEAD_S * 1000000u;
	if (now_us > w && ts < now_us - w)
		return ctl_refuse(a, RP_AUTH_STALE, ts, now_us);
	/* refused before any memory is touched: a time far ahead moves no
	 * cut-off, not even its sender's own */
	if (ts > now_us + ahead)
		return ctl_refuse(a, RP_AUTH_FUTURE, ts, now_us);
	rp_auth_sender *s = sender_find(a, from);
	if (s) {
		if (ts <= s->cutoff_ts)
			return ctl_refuse(a, RP_AUTH_STALE, ts, now_us);
		for (unsigned i = 0; i < s->n; i++)
			if (!memcmp(s->tag[i], tag, 16))
				return ctl_refuse(a, RP_AUTH_REPLAY, ts, now_us);
	}
	/* the same message from another address (a capture sent again) */
	for (unsigned i = 0; i < RP_AUTH_SEEN; i++)
		if (!memcmp(a->seen[i], tag, 16))
			return ctl_refuse(a, RP_AUTH_REPLAY, ts, now_us);
	if (!s) {
		s = sender_take(a, from, now_us);
		s->from = from;
	}
	if (s->n == RP_AUTH_SENDER_SEEN) {
		/* the slot's old tag is forgotten: nothing of this sender as
		 * old is accepted any more, since it might be that message
		 * again (its time is at most RP_AUTH_AHEAD_S ahead) */
		if (s->ts[s->next] > s->cutoff_ts)
			s->cutoff_ts = s->ts[s->next];
	} else {
		s->n++;
	}
	memcpy(s->tag[s->next], tag, 16);
	s->ts[s->next] = ts;
	s->next = (s->next + 1) % RP_AUTH_SENDER_SEEN;
	s->last_us = now_us;
	memcpy(a->seen[a->seen_next], tag, 16);
	a->seen_next = (a->seen_next + 1) % RP_AUTH_SEEN;
	return RP_AUTH_OK;
}

static rp_auth_result open_from(rp_auth *a, uint64_t from, const uint8_t *p, size_t len,
				int control, uint64_t now_us, size_t *msg_len)
{
	if (!rp_auth_has_trailer(p, len))
		return RP_AUTH_MISSING;
	const uint8_t *t = p + len - RP_AUTH_LEN;
	/* a peer sends control messages, never frames */
	const rp_key *k = key_of_id(a, le32(t + 4), control);
	if (!k)
		return RP_AUTH_UNKNOWN_KEY;
	uint8_t tag[16];
	mac_tag(k, p, len - RP_AUTH_LEN, t, tag);
	if (sodium_memcmp(tag, t + RP_AUTH_TAG_OFF, 16) != 0)
		return RP_AUTH_BAD_TAG;
	if (control) {
		rp_auth_result r = ctl_check(a, from, tag, le64(t + 16), now_us);
		if (r != RP_AUTH_OK)
			return r;
	} else if (le64(t + 16) != 0) {
		return RP_AUTH_BAD_TAG; /* frames carry no time */
	}
	*msg_len = len - RP_AUTH_LEN;
	return RP_AUTH_OK;
}

rp_auth_result rp_auth_open_from(rp_auth *a, uint32_t ip, uint16_t port, const uint8_t *p,
				 size_t len, int control, uint64_t now_us, size_t *msg_len)
{
	rp_auth_result r = open_from(a, (uint64_t)ip << 16 | port, p, len, control, now_us,
				     msg_len);
	if (control) {
		a->ctl[r]++;
		if (r != RP_AUTH_OK)
			a->last_ctl_refused = (uint8_t)r;
	}
	return r;
}

rp_auth_result rp_auth_open(rp_auth *a, const uint8_t *p, size_t len, int control,
			    uint64_t now_us, size_t *msg_len)
{
	return rp_auth_open_from(a, 0, 0, p, len, control, now_us, msg_len);
}

rp_auth_result rp_auth_accept_from(rp_auth *a, uint32_t ip, uint16_t port, const uint8_t *p,
				   size_t len, int control, size_t *msg_len)
{
	if (!a->n_keys && !a->n_peers) {
		*msg_len = rp_auth_strip(p, len);
		return RP_AUTH_OK;
	}
	rp_auth_result r = rp_auth_open_from(a, ip, port, p, len, control,
					     control ? rp_auth_now_us() : 0, msg_len);
	if (!control && r != RP_AUTH_OK) {
		a->frames[r]++;
		a->last_frame_refused = (uint8_t)r;
	}
	return r;
}
