/*
 * fuzz_relay.c: libFuzzer harness for the relay's packet classification,
 * control-message parsing and authentication check (pure functions of
 * proto.c and auth.c), over a guard-paged copy of the input; an ARP
 * request is also answered in place, every classified payload range must
 * lie inside the packet, and nothing unsigned may verify.
 */
#include <stdlib.h>

#include "guard.h"
#include "auth.h"
#include "proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint8_t mac[6] = {2, 0, 0, 0, 0, 1};
	rp_addrs a;
	rp_pkt k;
	rp_ctl c;
	guarded in;
	memset(&a, 0, sizeof(a));
	a.ip[0] = 0xC6120001u;
	a.n_ip = 1;
	a.data_port = 7400;
	a.control_port = 7401;
	a.check_crc = size & 1;
	if (guarded_alloc(&in, size))
		abort();
	memcpy(in.p, data, size);
	rp_class cls = rp_classify(in.p, size, &a, &k);
	if (cls >= RP_CLASS_COUNT)
		abort();
	if ((cls == RP_DATA || cls == RP_CONTROL) && (size_t)k.l4_off + k.l4_len > size)
		abort(); /* a payload outside the packet */
	if (cls == RP_CONTROL)
		(void)rp_ctl_parse(in.p + k.l4_off, k.l4_len, &c);
	if (cls == RP_ARP_REQUEST && rp_arp_reply_inplace(in.p, size, mac) != 0)
		abort();
	(void)rp_ctl_parse(in.p, size, &c); /* raw bytes as a control message */
	/* raw bytes as a signed datagram: a fixed key; random input must not
	 * verify (a 128-bit tag), and a verified length must be in bounds */
	static rp_auth auth;
	if (!auth.n_keys) {
		auth.n_keys = 1;
		auth.keys[0].id = 1;
		memset(auth.keys[0].k, 0x5A, sizeof(auth.keys[0].k));
		if (rp_auth_init())
			abort();
	}
	size_t ml = 0;
	rp_auth_result ar = rp_auth_open(&auth, in.p, size, (int)(size & 2), rp_auth_now_us(), &ml);
	if (ar == RP_AUTH_OK && ml != size - RP_AUTH_LEN)
		abort();
	guarded_free(&in);
	return 0;
}
