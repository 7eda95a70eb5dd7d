/* auth.c: frame and control-message authentication (auth.h). */
#define _GNU_SOURCE
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *const rp_auth_result_names[6] = {
	"ok", "no trailer", "unknown key", "bad tag", "stale", "replay",
};

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

int rp_auth_init(void)
{
	return sodium_init() < 0 ? -1 : 0;
}

uint64_t rp_auth_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static int fail(char *err, size_t errlen, const char *path, const char *why)
{
	snprintf(err, errlen, "key file %s: %s", path, why);
	return -1;
}

int rp_auth_load(rp_auth *a, const char *path, char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return fail(err, errlen, path, strerror(errno));
	struct stat sb;
	char buf[256];
	ssize_t n = -1;
	if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && !(sb.st_mode & 077))
		n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (!S_ISREG(sb.st_mode))
		return fail(err, errlen, path, "not a regular file");
	if (sb.st_mode & 077)
		return fail(err, errlen, path, "readable or writable by others (chmod 600)");
	if (n <= 0)
		return fail(err, errlen, path, "cannot read it");
	buf[n] = 0;
	unsigned long id;
	char hex[65];
	int used = 0;
	if (sscanf(buf, "%lu %64[0-9a-fA-F]%n", &id, hex, &used) != 2 || strlen(hex) != 64 ||
	    id > UINT32_MAX || strspn(buf + used, " \t\r\n") != strlen(buf + used))
		return fail(err, errlen, path, "expected one line: KEY_ID then 64 hex digits");
	if (a->n_keys == RP_AUTH_MAX_KEYS)
		return fail(err, errlen, path, "too many keys (at most 4)");
	for (unsigned i = 0; i < a->n_keys; i++)
		if (a->keys[i].id == id)
			return fail(err, errlen, path, "a key with this id is loaded already");
	rp_key *k = &a->keys[a->n_keys];
	size_t bin = 0;
	if (sodium_hex2bin(k->k, sizeof(k->k), hex, 64, NULL, &bin, NULL) != 0 || bin != 32)
		return fail(err, errlen, path, "bad hex");
	k->id = (uint32_t)id;
	a->n_keys++;
	sodium_memzero(buf, sizeof(buf));
	sodium_memzero(hex, sizeof(hex));
	return 0;
}

static void tag_of(const rp_key *k, const uint8_t *msg, size_t len, const uint8_t head[16],
		   uint8_t tag[16])
{
	crypto_generichash_state st;
	crypto_generichash_init(&st, k->k, sizeof(k->k), 16);
	crypto_generichash_update(&st, msg, len);
	crypto_generichash_update(&st, head, 16);
	crypto_generichash_final(&st, tag, 16);
}

void rp_auth_seal(const rp_auth *a, const uint8_t *msg, size_t len, uint64_t time_us,
		  uint8_t out[RP_AUTH_LEN])
{
	wle32(out, RP_AUTH_MAGIC);
	wle32(out + 4, a->keys[0].id);
	wle32(out + 8, (uint32_t)time_us);
	wle32(out + 12, (uint32_t)(time_us >> 32));
	tag_of(&a->keys[0], msg, len, out, out + 16);
}

int rp_auth_has_trailer(const uint8_t *p, size_t len)
{
	return len >= RP_AUTH_LEN && le32(p + len - RP_AUTH_LEN) == RP_AUTH_MAGIC;
}

rp_auth_result rp_auth_open(rp_auth *a, const uint8_t *p, size_t len, int control,
			    uint64_t now_us, size_t *msg_len)
{
	if (!rp_auth_has_trailer(p, len))
		return RP_AUTH_MISSING;
	const uint8_t *t = p + len - RP_AUTH_LEN;
	const rp_key *k = NULL;
	for (unsigned i = 0; i < a->n_keys && !k; i++)
		if (a->keys[i].id == le32(t + 4))
			k = &a->keys[i];
	if (!k)
		return RP_AUTH_UNKNOWN_KEY;
	uint8_t tag[16];
	tag_of(k, p, len - RP_AUTH_LEN, t, tag);
	if (sodium_memcmp(tag, t + 16, 16) != 0)
		return RP_AUTH_BAD_TAG;
	if (control) {
		uint64_t ts = le64(t + 8), w = (uint64_t)RP_AUTH_WINDOW_S * 1000000u;
		if (ts + w < now_us || ts > now_us + w || ts <= a->forgotten_ts)
			return RP_AUTH_STALE;
		for (unsigned i = 0; i < a->n_future; i++)
			if (a->future_ts[i] == ts)
				return RP_AUTH_STALE;
		for (unsigned i = 0; i < RP_AUTH_SEEN; i++)
			if (!memcmp(a->seen[i], tag, 16))
				return RP_AUTH_REPLAY;
		/* the slot's old tag is forgotten: nothing as old is accepted
		 * any more, since it might be that message again; a time still
		 * ahead of ours is kept as it is (the window drops it later) */
		const uint64_t f = a->seen_ts[a->seen_next];
		unsigned keep = 0;
		for (unsigned i = 0; i < a->n_future; i++)
			if (a->future_ts[i] + w >= now_us)
				a->future_ts[keep++] = a->future_ts[i];
		a->n_future = keep;
		if (f > now_us && a->n_future < RP_AUTH_FUTURE)
			a->future_ts[a->n_future++] = f;
		else if (f > a->forgotten_ts)
			a->forgotten_ts = f;
		memcpy(a->seen[a->seen_next], tag, 16);
		a->seen_ts[a->seen_next] = ts;
		a->seen_next = (a->seen_next + 1) % RP_AUTH_SEEN;
	} else if (le64(t + 8) != 0) {
		return RP_AUTH_BAD_TAG; /* frames carry no time */
	}
	*msg_len = len - RP_AUTH_LEN;
	return RP_AUTH_OK;
}
