/* auth_none.c: auth.h for builds without libsodium (cross builds whose
 * sysroot lacks it): no key can be loaded, nothing verifies, so a process
 * given --key refuses to start and one without keys runs unauthenticated. */
#include "auth.h"

#include <stdio.h>
#include <time.h>

int rp_auth_init(void)
{
	return 0;
}

uint64_t rp_auth_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

int rp_auth_load(rp_auth *a, const char *path, char *err, size_t errlen)
{
	(void)a;
	snprintf(err, errlen, "key file %s: this build has no libsodium", path);
	return -1;
}

void rp_auth_seal(const rp_auth *a, const uint8_t *msg, size_t len, uint64_t time_us,
		  uint8_t out[RP_AUTH_LEN])
{
	(void)a, (void)msg, (void)len, (void)time_us, (void)out;
}

int rp_auth_has_trailer(const uint8_t *p, size_t len)
{
	return len >= RP_AUTH_LEN && p[len - RP_AUTH_LEN] == 'B' &&
	       p[len - RP_AUTH_LEN + 1] == 'F' && p[len - RP_AUTH_LEN + 2] == 'A' &&
	       p[len - RP_AUTH_LEN + 3] == '2';
}

rp_auth_result rp_auth_open(rp_auth *a, const uint8_t *p, size_t len, int control,
			    uint64_t now_us, size_t *msg_len)
{
	(void)a, (void)p, (void)len, (void)control, (void)now_us, (void)msg_len;
	return RP_AUTH_UNKNOWN_KEY;
}

rp_auth_result rp_auth_open_from(rp_auth *a, uint32_t ip, uint16_t port, const uint8_t *p,
				 size_t len, int control, uint64_t now_us, size_t *msg_len)
{
	(void)ip, (void)port;
	return rp_auth_open(a, p, len, control, now_us, msg_len);
}

/* no keys here: a trailer is stripped unchecked */
rp_auth_result rp_auth_accept_from(rp_auth *a, uint32_t ip, uint16_t port, const uint8_t *p,
				   size_t len, int control, size_t *msg_len)
{
	(void)a, (void)ip, (void)port, (void)control;
	*msg_len = rp_auth_strip(p, len);
	return RP_AUTH_OK;
}

uint64_t rp_auth_msg_run(const rp_auth *a, const uint8_t *p, size_t msg_len)
{
	(void)a, (void)p, (void)msg_len;
	return 0;
}

uint64_t rp_auth_new_run(void)
{
	return 0; /* nothing is signed here, so nothing carries a run */
}

int rp_auth_load_peers(rp_auth *a, const char *path, char *err, size_t errlen)
{
	(void)a;
	snprintf(err, errlen, "peer keys %s: this build has no authentication", path);
	return -1;
}

void rp_auth_free(rp_auth *a)
{
	(void)a;
}

const rp_key *rp_auth_key_of(const rp_auth *a, const uint8_t *p, size_t msg_len)
{
	(void)a, (void)p, (void)msg_len;
	return NULL;
}

int rp_auth_is_peer(const rp_auth *a, const rp_key *k)
{
	(void)a, (void)k;
	return 0;
}

void rp_auth_seal_key(const rp_key *k, uint64_t run, const uint8_t *msg, size_t len,
		      uint64_t time_us, uint8_t out[RP_AUTH_LEN])
{
	(void)k, (void)run, (void)msg, (void)len, (void)time_us, (void)out;
}

const rp_key *rp_auth_peer(const rp_auth *a, uint32_t id)
{
	(void)a, (void)id;
	return NULL;
}
