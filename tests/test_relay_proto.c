/*
 * test_relay_proto.c: the relay's pure packet logic: classification of
 * good and malformed packets, header building (checksums checked by an
 * independent summation written here), ARP, control messages, pacing and
 * the repair-cache index against a reference model.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "bfpatch.h"
#include "proto.h"

#define OUR_IP 0xC6120001u   /* 198.18.0.1 */
#define PEER_IP 0xC6120002u  /* 198.18.0.2 */
static const uint8_t MAC_A[6] = {2, 0, 0, 0, 0, 1}, MAC_B[6] = {2, 0, 0, 0, 0, 2};

static rp_addrs addrs(void)
{
	rp_addrs a;
	memset(&a, 0, sizeof(a));
	a.ip[0] = OUR_IP;
	a.n_ip = 1;
	a.data_port = 7400;
	a.control_port = 7401;
	a.check_crc = 1;
	return a;
}

/* Independent one's-complement checksum over a byte string (RFC 1071). */
static uint16_t ref_cksum(const uint8_t *p, size_t n, uint32_t add)
{
	uint32_t s = add;
	for (size_t i = 0; i + 1 < n; i += 2)
		s += (uint32_t)(p[i] << 8 | p[i + 1]);
	if (n & 1)
		s += (uint32_t)(p[n - 1] << 8);
	while (s >> 16)
		s = (s & 0xFFFF) + (s >> 16);
	return (uint16_t)s;
}

/* A valid bfpatch frame (keyframe of 10 params) as UDP payload. */
static size_t make_frame(uint8_t *out)
{
	static bfp_encoder enc;
	uint16_t w[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
	bfp_encode_opts o;
	memset(&o, 0, sizeof(o));
	o.frame_size = 200;
	o.model_id = 77;
	o.target_version = 3;
	o.frame_count = 1;
	o.flags = BFP_ENC_F_KEYFRAME;
	size_t len = 0;
	assert_int_equal(bfp_encoder_init(&enc, &o, NULL, w, 10, 0, 10), BFP_OK);
	assert_int_equal(bfp_encode_next(&enc, out, 200, &len), BFP_OK);
	return len;
}

static size_t make_udp(uint8_t *pkt, uint32_t dst_ip, uint16_t dport, const uint8_t *pl, size_t n)
{
	rp_build_udp(pkt, MAC_A, MAC_B, PEER_IP, dst_ip, 5555, dport, (uint16_t)n,
		     rp_sum(pl, n, 0), 7);
	memcpy(pkt + RP_HDRS, pl, n);
	return RP_HDRS + n;
}

/* Built headers carry correct IPv4 and UDP checksums (independent sum). */
static void test_built_headers_have_valid_checksums(void **state)
{
	(void)state;
	uint8_t pl[300], pkt[400];
	for (size_t n = 0; n < 300; n += 37) {
		for (size_t i = 0; i < n; i++)
			pl[i] = (uint8_t)(i * 31 + n);
		size_t len = make_udp(pkt, OUR_IP, 9, pl, n);
		assert_int_equal(ref_cksum(pkt + 14, 20, 0), 0xFFFF);
		uint8_t ph[12] = {0xC6, 0x12, 0, 2, 0xC6, 0x12, 0, 1, 0, 17,
				  (uint8_t)((8 + n) >> 8), (uint8_t)(8 + n)};
		assert_int_equal(ref_cksum(pkt + 34, len - 34, ref_cksum(ph, 12, 0)), 0xFFFF);
	}
}

/* A valid frame to our data port is data; each kind of damage gets its
 * own drop class. */
static void test_classify_accepts_frames_and_names_each_drop(void **state)
{
	(void)state;
	rp_addrs a = addrs();
	rp_pkt k;
	uint8_t fr[256], pkt[400], bad[400];
	size_t fl = make_frame(fr);
	size_t len = make_udp(pkt, OUR_IP, 7400, fr, fl);
	assert_int_equal(rp_classify(pkt, len, &a, &k), RP_DATA);
	assert_int_equal(k.l4_off, RP_HDRS);
	assert_int_equal(k.l4_len, fl);
	assert_int_equal(k.src_port, 5555);
	assert_memory_equal(k.src_mac, MAC_B, 6);

	for (size_t l = 0; l < len; l++) /* every truncation is a drop */
		assert_true(rp_classify(pkt, l, &a, &k) < RP_ARP_REQUEST);
	memcpy(bad, pkt, len);
	bad[12] = 0x86, bad[13] = 0xDD;
	assert_int_equal(rp_classify(bad, len, &a, &k), RP_DROP_ETHERTYPE);
	memcpy(bad, pkt, len);
	bad[14] = 0x46; /* IP options */
	assert_int_equal(rp_classify(bad, len, &a, &k), RP_DROP_IP);
	memcpy(bad, pkt, len);
	bad[20] |= 0x20; /* more fragments */
	assert_int_equal(rp_classify(bad, len, &a, &k), RP_DROP_IP);
	memcpy(bad, pkt, len);
	bad[22] ^= 1; /* TTL: header checksum now wrong */
	assert_int_equal(rp_classify(bad, len, &a, &k), RP_DROP_IP);
	len = make_udp(bad, PEER_IP, 7400, fr, fl);
	assert_int_equal(rp_classify(bad, len, &a, &k), RP_DROP_NOT_OURS);
	len = make_udp(bad, OUR_IP, 7400, fr, fl);
	bad[len - 1] ^= 1; /* payload: UDP checksum now wrong */
	assert_int_equal(rp_classify(bad, len, &a, &k), RP_DROP_UDP);
	len = make_udp(bad, OUR_IP, 7402, fr, fl);
	assert_int_equal(rp_classify(bad, len, &a, &k), RP_DROP_PORT);
	fr[0] ^= 1; /* bad magic, checksums recomputed */
	len = make_udp(bad, OUR_IP, 7400, fr, fl);
	assert_int_equal(rp_classify(bad, len, &a, &k), RP_DROP_FRAME);
	fr[0] ^= 1;
	fr[70] ^= 1; /* payload damage: only the frame CRC tells */
	len = make_udp(bad, OUR_IP, 7400, fr, fl);
	assert_int_equal(rp_classify(bad, len, &a, &k), RP_DROP_FRAME);
	a.check_crc = 0;
	assert_int_equal(rp_classify(bad, len, &a, &k), RP_DATA);
	fr[70] ^= 1;
	/* an encoding this build does not know, under a valid CRC (a newer
	 * publisher): counted apart from damaged frames, with or without the
	 * CRC check */
	uint8_t newer[256];
	memcpy(newer, fr, fl);
	newer[5] = BFP_ENC_LAST + 1;
	uint32_t crc = bfp_crc32c(bfp_crc32c(0, newer, 56), newer + BFP_HEADER_SIZE,
				  fl - BFP_HEADER_SIZE);
	for (int i = 0; i < 4; i++)
		newer[56 + i] = (uint8_t)(crc >> (8 * i));
	len = make_udp(bad, OUR_IP, 7400, newer, fl);
	assert_int_equal(rp_classify(bad, len, &a, &k), RP_DROP_ENCODING);
	a.check_crc = 1;
	assert_int_equal(rp_classify(bad, len, &a, &k), RP_DROP_ENCODING);
	uint8_t flagged[256]; /* IN_PATCH (FORMAT.md 2.1) on a delta frame */
	memcpy(flagged, fr, fl);
	flagged[5] = BFP_ENC_SPARSE;
	flagged[6] = BFP_FLAG_IN_PATCH;
	a.check_crc = 0;
	size_t flen = make_udp(bad, OUR_IP, 7400, flagged, fl);
	assert_int_equal(rp_classify(bad, flen, &a, &k), RP_DROP_FRAME);
	a.check_crc = 1;
	newer[5] = BFP_ENC_SPARSE; /* the same bytes in a known encoding: only the CRC fails */
	len = make_udp(bad, OUR_IP, 7400, newer, fl);
	assert_int_equal(rp_classify(bad, len, &a, &k), RP_DROP_FRAME);
	a.check_crc = 0;
	len = make_udp(bad, OUR_IP, 7401, fr, 12);
	assert_int_equal(rp_classify(bad, len, &a, &k), RP_CONTROL);
	len = make_udp(pkt, OUR_IP, 7400, fr, fl);
	memcpy(bad, pkt, len);
	bad[23] = 6; /* TCP (fix the header checksum) */
	bad[24] = bad[25] = 0;
	uint16_t ck = (uint16_t)~ref_cksum(bad + 14, 20, 0);
	bad[24] = (uint8_t)(ck >> 8), bad[25] = (uint8_t)ck;
	assert_int_equal(rp_classify(bad, len, &a, &k), RP_DROP_PROTO);
}

/* ARP requests for our address are recognised and answered in place. */
static void test_arp_request_is_answered(void **state)
{
	(void)state;
	rp_addrs a = addrs();
	rp_pkt k;
	uint8_t p[64];
	size_t n = rp_arp_request(p, MAC_B, PEER_IP, OUR_IP);
	assert_int_equal(rp_classify(p, n, &a, &k), RP_ARP_REQUEST);
	assert_int_equal(k.src_ip, PEER_IP);
	assert_int_equal(rp_arp_reply_inplace(p, n, MAC_A), 0);
	assert_int_equal(rp_classify(p, n, &a, &k), RP_ARP_REPLY);
	assert_memory_equal(k.src_mac, MAC_A, 6);
	assert_int_equal(k.src_ip, OUR_IP);
	assert_memory_equal(p, MAC_B, 6); /* back to the asker */
	n = rp_arp_request(p, MAC_B, PEER_IP, 0xC6120009u);
	assert_int_equal(rp_classify(p, n, &a, &k), RP_DROP_ARP);
}

/* Control messages round-trip; malformed ones are refused. */
static void test_control_messages_round_trip_and_reject_damage(void **state)
{
	(void)state;
	rp_ctl c, d;
	uint8_t buf[2048];
	memset(&c, 0, sizeof(c));
	c.type = RP_NACK;
	c.model_id = 0x1234;
	c.version = 9;
	c.n_ranges = 3;
	c.ranges[0] = (rp_range){0, 1};
	c.ranges[1] = (rp_range){5, 7};
	c.ranges[2] = (rp_range){100, 1};
	size_t n = rp_ctl_build(buf, sizeof(buf), &c);
	assert_true(n == RP_CTL_HDR + 24 + 4);
	assert_int_equal(rp_ctl_parse(buf, n, &d), 0);
	assert_int_equal(d.type, RP_NACK);
	assert_int_equal(d.n_ranges, 3);
	assert_int_equal(d.ranges[1].first, 5);
	assert_int_equal(d.ranges[1].count, 7);
	for (size_t i = 0; i < n; i++) { /* any flipped byte is refused */
		buf[i] ^= 0x40;
		assert_int_equal(rp_ctl_parse(buf, n, &d), -1);
		buf[i] ^= 0x40;
	}
	assert_int_equal(rp_ctl_parse(buf, n - 1, &d), -1);
	memset(&c, 0, sizeof(c));
	c.type = RP_JOIN;
	c.model_id = 1;
	c.rate_kbps = 100000;
	c.data_port = 7500;
	n = rp_ctl_build(buf, sizeof(buf), &c);
	assert_int_equal(rp_ctl_parse(buf, n, &d), 0);
	assert_int_equal(d.data_port, 7500);
	assert_int_equal(d.rate_kbps, 100000);
	c.data_port = 0; /* a JOIN must say where to send */
	n = rp_ctl_build(buf, sizeof(buf), &c);
	assert_int_equal(rp_ctl_parse(buf, n, &d), -1);
	/* JOIN, LEAVE, HEARTBEAT: count (bytes 24-27) unused, so 0 */
	for (uint8_t t = RP_JOIN; t <= RP_HEARTBEAT; t++) {
		if (t == RP_NACK)
			continue;
		c.type = t;
		c.data_port = t == RP_JOIN ? 7500 : 0;
		c.rate_kbps = 0;
		n = rp_ctl_build(buf, sizeof(buf), &c);
		assert_int_equal(rp_ctl_parse(buf, n, &d), 0);
		buf[24] = 1;
		uint32_t crc = bfp_crc32c(0, buf, n - 4);
		memcpy(buf + n - 4, &crc, 4);
		assert_int_equal(rp_ctl_parse(buf, n, &d), -1);
	}
	memset(&c, 0, sizeof(c));
	c.type = RP_NACK; /* the KEY flag round-trips; other flag bits are refused */
	c.n_ranges = 1;
	c.ranges[0] = (rp_range){3, 2};
	c.flags = RP_NACK_KEY;
	n = rp_ctl_build(buf, sizeof(buf), &c);
	assert_int_equal(rp_ctl_parse(buf, n, &d), 0);
	assert_int_equal(d.flags, RP_NACK_KEY);
	assert_int_equal(d.data_port, 0);
	c.flags = 2;
	n = rp_ctl_build(buf, sizeof(buf), &c);
	assert_int_equal(rp_ctl_parse(buf, n, &d), -1);
	memset(&c, 0, sizeof(c));
	c.type = RP_NACK; /* empty NACK */
	n = rp_ctl_build(buf, sizeof(buf), &c);
	assert_int_equal(rp_ctl_parse(buf, n, &d), -1);
	c.n_ranges = 1; /* a range may end at index 2^32 - 1, not past it */
	c.ranges[0] = (rp_range){UINT32_MAX, 1};
	n = rp_ctl_build(buf, sizeof(buf), &c);
	assert_int_equal(rp_ctl_parse(buf, n, &d), 0);
	c.ranges[0] = (rp_range){UINT32_MAX - 1, 3};
	n = rp_ctl_build(buf, sizeof(buf), &c);
	assert_int_equal(rp_ctl_parse(buf, n, &d), -1);
	c.type = 9;
	n = rp_ctl_build(buf, sizeof(buf), &c);
	assert_int_equal(rp_ctl_parse(buf, n, &d), -1);
}

/* The token bucket admits the configured rate and burst, no more. */
static void test_token_bucket_paces_to_rate(void **state)
{
	(void)state;
	rp_bucket b;
	const uint64_t hz = 1000000;
	rp_bucket_init(&b, 1000, 1500, 0);
	assert_int_equal(rp_bucket_take(&b, 100, 0, hz), 0);
	assert_int_equal(rp_bucket_take(&b, 1500, 1500000, hz), 1);
	assert_int_equal(rp_bucket_take(&b, 1, 1500000, hz), 0);
	/* a long idle time fills only to the burst */
	assert_int_equal(rp_bucket_take(&b, 1500, 100000000, hz), 1);
	assert_int_equal(rp_bucket_take(&b, 10, 100000000, hz), 0);
	/* over 10 s at 1000 B/s, 100-byte packets: about 100 admitted */
	unsigned ok = 0;
	for (uint64_t t = 100000000; t < 110000000; t += 1000)
		ok += (unsigned)rp_bucket_take(&b, 100, t, hz);
	assert_true(ok >= 99 && ok <= 101);
	rp_bucket_init(&b, 0, 0, 0); /* unlimited */
	assert_int_equal(rp_bucket_take(&b, 1u << 30, 0, hz), 1);
	assert_int_equal(rp_bucket_take_upto(&b, 1u << 30, 0, hz), 1u << 30);
	/* filled: the whole burst at once, then what the rate refills */
	rp_bucket_init(&b, 10, 4096, 0);
	rp_bucket_fill(&b, hz);
	assert_int_equal(rp_bucket_take_upto(&b, 5000, 0, hz), 4096);
	assert_int_equal(rp_bucket_take_upto(&b, 5000, 0, hz), 0);
	assert_int_equal(rp_bucket_take_upto(&b, 5000, 2500000, hz), 25); /* 2.5 s at 10/s */
	assert_int_equal(rp_bucket_take_upto(&b, 3, 3000000, hz), 3);
	assert_int_equal(rp_bucket_take(&b, 3, 3000000, hz), 0); /* 2 left */
	assert_int_equal(rp_bucket_take(&b, 2, 3000000, hz), 1);
}

static unsigned dropped[4096];
static void drop_cb(void *ctx, void *obj)
{
	(void)ctx;
	dropped[(uintptr_t)obj]++;
}

/* The cache index finds what it holds, evicts oldest first by bytes and
 * by version window, and stays consistent over many insert/evict cycles
 * (checked against a reference list). */
static void test_repair_cache_evicts_oldest_and_stays_consistent(void **state)
{
	(void)state;
	enum { CAP = 64 };
	rp_cache_entry ring[CAP];
	uint64_t hash[2 * CAP];
	rp_cache c;
	memset(dropped, 0, sizeof(dropped));
	assert_int_equal(rp_cache_init(&c, ring, hash, CAP, 10000, 3), 0);
	assert_int_equal(rp_cache_put(&c, 1, 1, 0, 1000, (void *)1, drop_cb, NULL), 1);
	assert_int_equal(rp_cache_put(&c, 1, 1, 0, 1000, (void *)2, drop_cb, NULL), 0);
	assert_ptr_equal(rp_cache_get(&c, 1, 1, 0), (void *)1);
	assert_null(rp_cache_get(&c, 1, 1, 1));
	assert_null(rp_cache_get(&c, 2, 1, 0));
	assert_int_equal(rp_cache_put(&c, 1, 1, 9, 20000, (void *)3, drop_cb, NULL), -1);
	for (uintptr_t i = 1; i <= 10; i++) /* 11 x 1000 bytes > budget */
		assert_int_equal(rp_cache_put(&c, 1, 1, (uint32_t)i, 1000, (void *)(i + 10), drop_cb, NULL), 1);
	assert_int_equal(dropped[1], 1); /* the first one went */
	assert_null(rp_cache_get(&c, 1, 1, 0));
	assert_ptr_equal(rp_cache_get(&c, 1, 1, 10), (void *)20);
	/* version 4 pushes out version 1 (K = 3 keeps 2, 3, 4) */
	assert_int_equal(rp_cache_put(&c, 1, 4, 0, 10, (void *)30, drop_cb, NULL), 1);
	assert_null(rp_cache_get(&c, 1, 1, 10));
	assert_int_equal(c.len, 1);
	assert_int_equal(rp_cache_put(&c, 1, 1, 0, 10, (void *)31, drop_cb, NULL), -1);
	rp_cache_clear(&c, drop_cb, NULL);
	assert_int_equal(dropped[30], 1);

	/* stress against a reference FIFO */
	assert_int_equal(rp_cache_init(&c, ring, hash, CAP, 1u << 30, 1000000), 0);
	uint32_t ref[CAP], head = 0, len = 0;
	uint64_t s = 1;
	for (uint32_t step = 0; step < 20000; step++) {
		s = s * 6364136223846793005ull + 1;
		uint32_t key = (uint32_t)(s >> 33) % 300;
		int present = 0;
		for (uint32_t q = 0; q < len; q++)
			present |= ref[(head + q) % CAP] == key;
		/* a key not held goes in by either call (rp_cache_put_absent
		 * every other step: the relay's, after a look-up) */
		int r = !present && (step & 1)
				? rp_cache_put_absent(&c, 5, 1, key, 1, 0,
						      (void *)(uintptr_t)(key + 1), NULL, NULL)
				: rp_cache_put(&c, 5, 1, key, 1, (void *)(uintptr_t)(key + 1), NULL,
					       NULL);
		assert_int_equal(r, present ? 0 : 1);
		if (!present) {
			if (len == CAP)
				head = (head + 1) % CAP, len--;
			ref[(head + len) % CAP] = key;
			len++;
		}
		for (uint32_t q = 0; q < 300; q += 7) {
			int in = 0;
			for (uint32_t z = 0; z < len; z++)
				in |= ref[(head + z) % CAP] == q;
			void *g = rp_cache_get(&c, 5, 1, q);
			assert_true(in ? g == (void *)(uintptr_t)(q + 1) : g == NULL);
		}
	}
}

/* A stream's frames in index order are indexed by their runs, not the
 * hash (no hash slot is written: storing and evicting them touch none),
 * and look-ups agree with a reference FIFO over streams that continue,
 * jump, interleave, repeat frames and have versions dropped (entries in
 * runs and in the hash at once, dead ones among them). */
static void test_repair_cache_runs_skip_the_hash_and_stay_consistent(void **state)
{
	(void)state;
	enum { CAP = 64, STREAMS = 3 };
	rp_cache_entry ring[CAP];
	uint64_t hash[2 * CAP];
	rp_cache c;
	assert_int_equal(rp_cache_init(&c, ring, hash, CAP, 1u << 30, 1000000), 0);
	for (uint32_t i = 0; i < 5 * CAP; i++)
		assert_int_equal(rp_cache_put(&c, 7, 1, i, 1, (void *)(uintptr_t)(i + 1), NULL, NULL), 1);
	for (uint32_t k = 0; k < 2 * CAP; k++)
		assert_true(hash[k] == 0);
	for (uint32_t i = 0; i < 5 * CAP; i++) {
		void *g = rp_cache_get(&c, 7, 1, i);
		assert_true(i >= 4 * CAP ? g == (void *)(uintptr_t)(i + 1) : g == NULL);
	}

	/* the reference: ring order, live or dead */
	struct { uint64_t m; uint32_t v, i, obj; int live; } ref[CAP];
	uint32_t head = 0, len = 0;
	uint64_t sm[STREAMS] = {7, 8, 7};
	uint32_t sv[STREAMS] = {1, 1, 2}, si[STREAMS] = {0, 0, 0};
	uint64_t s = 42;
	unsigned cur = 0;
	assert_int_equal(rp_cache_init(&c, ring, hash, CAP, 1u << 30, 1000000), 0);
	for (uint32_t step = 1; step < 30000; step++) {
		s = s * 6364136223846793005ull + 1;
		const uint32_t r = (uint32_t)(s >> 33);
		if (r % 16 == 0)
			cur = r / 16 % STREAMS; /* another stream interleaves */
		if (r % 97 == 1)
			si[cur] = r / 97 % 200; /* a jump: out of order, or repeated */
		if (r % 1009 == 2) {
			/* a version made again: its entries dropped */
			const unsigned d = r / 1009 % STREAMS;
			uint32_t n = 0;
			for (uint32_t q = 0; q < len; q++) {
				uint32_t p = (head + q) % CAP;
				if (ref[p].live && ref[p].m == sm[d] && ref[p].v == sv[d])
					ref[p].live = 0, n++;
			}
			assert_int_equal(rp_cache_drop_version(&c, sm[d], sv[d], NULL, NULL), n);
		}
		const uint64_t m = sm[cur];
		const uint32_t v = sv[cur], i = si[cur]++ % 200;
		int present = 0;
		for (uint32_t q = 0; q < len; q++) {
			uint32_t p = (head + q) % CAP;
			present |= ref[p].live && ref[p].m == m && ref[p].v == v && ref[p].i == i;
		}
		int got = !present && (step & 1)
				  ? rp_cache_put_absent(&c, m, v, i, 1, 0, (void *)(uintptr_t)step,
							NULL, NULL)
				  : rp_cache_put(&c, m, v, i, 1, (void *)(uintptr_t)step, NULL, NULL);
		assert_int_equal(got, present ? 0 : 1);
		if (!present) {
			/* dead entries at the head go first, then the oldest while full */
			for (;;) {
				if (len && !ref[head].live) {
					head = (head + 1) % CAP, len--;
					continue;
				}
				if (len < CAP)
					break;
				head = (head + 1) % CAP, len--;
			}
			uint32_t p = (head + len) % CAP;
			ref[p].m = m, ref[p].v = v, ref[p].i = i, ref[p].obj = step, ref[p].live = 1;
			len++;
		}
		for (unsigned t = 0; t < STREAMS; t++)
			for (uint32_t q = 0; q < 200; q += 13) {
				uint32_t want = 0;
				for (uint32_t z = 0; z < len; z++) {
					uint32_t p = (head + z) % CAP;
					if (ref[p].live && ref[p].m == sm[t] && ref[p].v == sv[t] && ref[p].i == q)
						want = ref[p].obj;
				}
				assert_true(rp_cache_get(&c, sm[t], sv[t], q) == (void *)(uintptr_t)want);
			}
	}
	rp_cache_clear(&c, NULL, NULL);
	assert_int_equal(c.len, 0);
}

/* The version window is per model: a relay carrying model A at version
 * 100 still caches model B at version 5; a model beyond the models
 * tracked takes the slot of the one whose entries are oldest; a model
 * whose publisher starts over at lower versions is cached again. */
static void test_repair_cache_keeps_a_version_window_per_model(void **state)
{
	(void)state;
	enum { CAP = 64 };
	rp_cache_entry ring[CAP];
	uint64_t hash[2 * CAP];
	rp_cache c;
	memset(dropped, 0, sizeof(dropped));
	assert_int_equal(rp_cache_init(&c, ring, hash, CAP, 1u << 20, 2), 0);
	assert_int_equal(rp_cache_put(&c, 0xA, 100, 0, 10, (void *)1, drop_cb, NULL), 1);
	assert_int_equal(rp_cache_put(&c, 0xB, 5, 0, 10, (void *)2, drop_cb, NULL), 1);
	assert_int_equal(rp_cache_put(&c, 0xB, 6, 0, 10, (void *)3, drop_cb, NULL), 1);
	assert_ptr_equal(rp_cache_get(&c, 0xA, 100, 0), (void *)1);
	assert_ptr_equal(rp_cache_get(&c, 0xB, 5, 0), (void *)2);
	/* B's version 7 ends B's version 5 (K = 2), not A's 100 */
	assert_int_equal(rp_cache_put(&c, 0xB, 7, 0, 10, (void *)4, drop_cb, NULL), 1);
	assert_ptr_equal(rp_cache_get(&c, 0xA, 100, 0), (void *)1);
	assert_ptr_equal(rp_cache_get(&c, 0xB, 6, 0), (void *)3);
	/* B's version 8: B's 6 is out of the window (evicted once the
	 * entries before it are: eviction is oldest first), A's 100 stays */
	assert_int_equal(rp_cache_put(&c, 0xB, 8, 0, 10, (void *)5, drop_cb, NULL), 1);
	assert_ptr_equal(rp_cache_get(&c, 0xA, 100, 0), (void *)1);
	assert_int_equal(rp_cache_put(&c, 0xB, 6, 1, 10, (void *)6, drop_cb, NULL), -1);
	rp_cache_clear(&c, drop_cb, NULL);

	/* one model more than tracked: the oldest entries go until a slot is
	 * free (here model 1's, the first in) */
	memset(dropped, 0, sizeof(dropped));
	for (uintptr_t m = 1; m <= RP_CACHE_MODELS; m++)
		assert_int_equal(rp_cache_put(&c, m, 1, 0, 10, (void *)m, drop_cb, NULL), 1);
	assert_int_equal(rp_cache_put(&c, 99, 1, 0, 10, (void *)99, drop_cb, NULL), 1);
	assert_int_equal(dropped[1], 1);
	assert_null(rp_cache_get(&c, 1, 1, 0));
	for (uintptr_t m = 2; m <= RP_CACHE_MODELS; m++)
		assert_ptr_equal(rp_cache_get(&c, m, 1, 0), (void *)m);
	assert_ptr_equal(rp_cache_get(&c, 99, 1, 0), (void *)99);
	rp_cache_clear(&c, drop_cb, NULL);

	/* model A at 100; its publisher starts over at version 3: refused
	 * until RP_CACHE_RESTART frames in a row were older than the window,
	 * then cached, and A's newer entries leave */
	memset(dropped, 0, sizeof(dropped));
	assert_int_equal(rp_cache_put(&c, 0xA, 100, 0, 10, (void *)1, drop_cb, NULL), 1);
	for (uint32_t i = 0; i < RP_CACHE_RESTART - 1; i++)
		assert_int_equal(rp_cache_put(&c, 0xA, 3, i, 10, (void *)2, NULL, NULL), -1);
	assert_int_equal(rp_cache_put(&c, 0xA, 3, RP_CACHE_RESTART - 1, 10, (void *)3, drop_cb,
				      NULL), 1);
	assert_null(rp_cache_get(&c, 0xA, 100, 0));
	assert_int_equal(dropped[1], 1);
	assert_ptr_equal(rp_cache_get(&c, 0xA, 3, RP_CACHE_RESTART - 1), (void *)3);
	assert_int_equal(rp_cache_put(&c, 0xA, 4, 0, 10, (void *)4, drop_cb, NULL), 1);
	assert_int_equal(c.len, 2);
	rp_cache_clear(&c, drop_cb, NULL);
	assert_int_equal(c.len, 0);
}

/* Option parsing: addresses, ports and MACs, with every malformed form
 * refused. */
/* rp_cache_drop_version() drops exactly the entries of one (model,
 * version), each object once, and the cache stays consistent afterwards:
 * lookups, byte accounts and evictions through the dropped slots, checked
 * against a reference list over random puts and drops. */
static void test_repair_cache_drops_one_version(void **state)
{
	(void)state;
	enum { CAP = 64, KEYS = 200 };
	rp_cache_entry ring[CAP];
	uint64_t hash[2 * CAP];
	rp_cache c;
	memset(dropped, 0, sizeof(dropped));
	assert_int_equal(rp_cache_init(&c, ring, hash, CAP, 1u << 20, 3), 0);
	for (uintptr_t i = 0; i < 5; i++) {
		assert_int_equal(rp_cache_put(&c, 0xA, 1, (uint32_t)i, 10, (void *)(1 + i), drop_cb, NULL), 1);
		assert_int_equal(rp_cache_put(&c, 0xA, 2, (uint32_t)i, 10, (void *)(11 + i), drop_cb, NULL), 1);
		assert_int_equal(rp_cache_put(&c, 0xB, 1, (uint32_t)i, 10, (void *)(21 + i), drop_cb, NULL), 1);
	}
	assert_int_equal(rp_cache_drop_version(&c, 0xA, 1, drop_cb, NULL), 5);
	assert_int_equal(rp_cache_drop_version(&c, 0xA, 1, drop_cb, NULL), 0);
	for (uintptr_t i = 0; i < 5; i++) {
		assert_int_equal(dropped[1 + i], 1);
		assert_null(rp_cache_get(&c, 0xA, 1, (uint32_t)i));
		assert_ptr_equal(rp_cache_get(&c, 0xA, 2, (uint32_t)i), (void *)(11 + i));
		assert_ptr_equal(rp_cache_get(&c, 0xB, 1, (uint32_t)i), (void *)(21 + i));
	}
	assert_true(c.bytes == 100);
	/* made again: cached anew */
	assert_int_equal(rp_cache_put(&c, 0xA, 1, 0, 10, (void *)31, drop_cb, NULL), 1);
	assert_ptr_equal(rp_cache_get(&c, 0xA, 1, 0), (void *)31);
	rp_cache_clear(&c, drop_cb, NULL);
	assert_int_equal(c.len, 0);
	assert_true(c.bytes == 0);
	/* a full ring of one model's version, dropped: the model has nothing
	 * cached, every slot is a dropped one, and new entries take them */
	for (uintptr_t i = 0; i < CAP; i++)
		assert_int_equal(rp_cache_put(&c, 0xC, 1, (uint32_t)i, 1, (void *)(100 + i), drop_cb, NULL), 1);
	assert_int_equal(rp_cache_drop_version(&c, 0xC, 1, drop_cb, NULL), CAP);
	for (uintptr_t i = 0; i < CAP + 6; i++)
		assert_int_equal(rp_cache_put(&c, 0xD, 1, (uint32_t)i, 1, (void *)(200 + i), drop_cb, NULL), 1);
	assert_int_equal(c.len, CAP);
	for (uintptr_t i = 0; i < CAP + 6; i++)
		assert_ptr_equal(rp_cache_get(&c, 0xD, 1, (uint32_t)i), i < 6 ? NULL : (void *)(200 + i));
	for (uintptr_t i = 0; i < CAP; i++)
		assert_int_equal(dropped[100 + i], 1);
	rp_cache_clear(&c, drop_cb, NULL);
	/* objects 1-5, 11-15, 21-25 and 31 were cached: each dropped once */
	for (uintptr_t i = 1; i < 40; i++)
		assert_int_equal(dropped[i], (i % 10 >= 1 && i % 10 <= 5 && i < 26) || i == 31);

	/* random puts (versions 1..4, K = 3 windows) and drops of a version,
	 * against a reference of what must be findable */
	struct {
		uint32_t v, i;
		int live;
	} ref[CAP];
	uint32_t head = 0, len = 0;
	uint64_t s = 7, bytes = 0;
	memset(dropped, 0, sizeof(dropped));
	assert_int_equal(rp_cache_init(&c, ring, hash, CAP, 1u << 30, 1000), 0);
	for (uint32_t step = 0; step < 20000; step++) {
		s = s * 6364136223846793005ull + 1;
		uint32_t v = 1 + (uint32_t)(s >> 40) % 4, i = (uint32_t)(s >> 20) % (KEYS / 4);
		if ((s >> 60) == 0) { /* 1 in 16: drop a version */
			uint32_t want = 0;
			for (uint32_t q = 0; q < len; q++) {
				uint32_t x = (head + q) % CAP;
				if (ref[x].live && ref[x].v == v) {
					ref[x].live = 0;
					want++;
					bytes -= 1;
				}
			}
			assert_int_equal(rp_cache_drop_version(&c, 9, v, drop_cb, NULL), want);
		} else {
			int present = 0;
			for (uint32_t q = 0; q < len; q++) {
				uint32_t x = (head + q) % CAP;
				present |= ref[x].live && ref[x].v == v && ref[x].i == i;
			}
			uintptr_t obj = 1 + v * (KEYS / 4) + i;
			int r = rp_cache_put(&c, 9, v, i, 1, (void *)obj, drop_cb, NULL);
			assert_int_equal(r, present ? 0 : 1);
			if (!present) {
				if (len == CAP) { /* the oldest slot goes, live or not */
					bytes -= ref[head].live;
					head = (head + 1) % CAP;
					len--;
				}
				uint32_t x = (head + len) % CAP;
				ref[x].v = v;
				ref[x].i = i;
				ref[x].live = 1;
				len++;
				bytes++;
			}
		}
		assert_true(c.bytes == bytes);
		for (uint32_t vv = 1; vv <= 4; vv++)
			for (uint32_t ii = 0; ii < KEYS / 4; ii += 5) {
				int in = 0;
				for (uint32_t q = 0; q < len; q++) {
					uint32_t x = (head + q) % CAP;
					in |= ref[x].live && ref[x].v == vv && ref[x].i == ii;
				}
				void *g = rp_cache_get(&c, 9, vv, ii);
				assert_true(in ? g == (void *)(uintptr_t)(1 + vv * (KEYS / 4) + ii) : g == NULL);
			}
	}
	rp_cache_clear(&c, drop_cb, NULL);
	assert_true(c.bytes == 0);
}

static void test_address_and_mac_parsing_refuses_malformed_input(void **state)
{
	(void)state;
	uint32_t ip;
	uint16_t port;
	const char *rest;
	uint8_t mac[6];
	assert_int_equal(rp_parse_hostport("198.18.0.7:7400", &ip, &port, NULL), 0);
	assert_int_equal(ip, 0xC6120007u);
	assert_int_equal(port, 7400);
	assert_int_equal(rp_parse_hostport("198.18.0.7:7400,mac=x", &ip, &port, &rest), 0);
	assert_string_equal(rest, ",mac=x");
	static const char *const bad[] = {"198.18.0.7", "198.18.0.7:", "198.18.0.7:0",
		"198.18.0.7:65536", "198.18.0.7:-1", "198.18.0.7:12x", "198.18.0.256:1",
		"host:1", ":1", "198.18.0.7:7400,more"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(rp_parse_hostport(bad[i], &ip, &port, NULL), -1);
	uint64_t v;
	assert_int_equal(rp_parse_num("300k", 0, 1u << 30, &v), 0);
	assert_int_equal(v, 300000);
	assert_int_equal(rp_parse_num("2G", 0, 1ull << 40, &v), 0);
	assert_int_equal(v, 2000000000ull);
	assert_int_equal(rp_parse_num("0x10", 0, 100, &v), 0);
	assert_int_equal(v, 16);
	assert_int_equal(rp_parse_num("0012", 0, 100, &v), 0); /* decimal, not octal */
	assert_int_equal(v, 12);
	assert_int_equal(rp_parse_num("0009", 0, 100, &v), 0);
	assert_int_equal(v, 9);
	static const char *const badnum[] = {"", "-1", "+1", "k", "12q", "5g", "99999999999999999999",
					     "0x", "0xg"};
	for (size_t i = 0; i < sizeof(badnum) / sizeof(badnum[0]); i++)
		assert_int_equal(rp_parse_num(badnum[i], 1, 1000000000, &v), -1);
	assert_int_equal(rp_parse_num("1", 2, 10, &v), -1); /* below the range */
	/* sizes in bytes: binary multiples, so that the defaults the help
	 * gives (64M, 1G) read back as the defaults (64 MiB, 1 GiB) */
	assert_int_equal(rp_parse_bytes("64M", 0, 1ull << 40, &v), 0);
	assert_int_equal(v, 64ull << 20);
	assert_int_equal(rp_parse_bytes("1G", 0, 1ull << 40, &v), 0);
	assert_int_equal(v, 1ull << 30);
	assert_int_equal(rp_parse_bytes("3k", 0, 1ull << 40, &v), 0);
	assert_int_equal(v, 3072);
	assert_int_equal(rp_parse_bytes("1000", 0, 1ull << 40, &v), 0);
	assert_int_equal(v, 1000);
	assert_int_equal(rp_parse_bytes("1025G", 0, 1ull << 40, &v), -1); /* above */
	assert_int_equal(rp_parse_bytes("63k", 65536, 1ull << 40, &v), -1); /* below */
	for (size_t i = 0; i < sizeof(badnum) / sizeof(badnum[0]); i++)
		assert_int_equal(rp_parse_bytes(badnum[i], 1, 1000000000, &v), -1);
	/* rates: bit/s, 0 or at least 1k (a "100" meant as Mbit/s is refused) */
	assert_int_equal(rp_parse_rate("0", 1000000000, &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(rp_parse_rate("1k", 1000000000, &v), 0);
	assert_int_equal(v, 1000);
	assert_int_equal(rp_parse_rate("100m", 1000000000, &v), 0);
	assert_int_equal(v, 100000000);
	assert_int_equal(rp_parse_rate("100", 1000000000, &v), -1);
	assert_int_equal(rp_parse_rate("999", 1000000000, &v), -1);
	assert_int_equal(rp_parse_rate("2g", 1000000000, &v), -1); /* above hi */
	assert_int_equal(rp_parse_mac("02:00:0a:FF:00:01", mac), 0);
	assert_int_equal(mac[2], 0x0a);
	assert_int_equal(mac[3], 0xff);
	assert_int_equal(rp_parse_mac("02:00:0a:ff:00", mac), -1);
	assert_int_equal(rp_parse_mac("02:00:0a:ff:00:01:02", mac), -1);
	assert_int_equal(rp_parse_mac("02:00:0a:ff:00:100", mac), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_built_headers_have_valid_checksums),
		cmocka_unit_test(test_classify_accepts_frames_and_names_each_drop),
		cmocka_unit_test(test_arp_request_is_answered),
		cmocka_unit_test(test_control_messages_round_trip_and_reject_damage),
		cmocka_unit_test(test_token_bucket_paces_to_rate),
		cmocka_unit_test(test_repair_cache_evicts_oldest_and_stays_consistent),
		cmocka_unit_test(test_repair_cache_runs_skip_the_hash_and_stay_consistent),
		cmocka_unit_test(test_repair_cache_keeps_a_version_window_per_model),
		cmocka_unit_test(test_repair_cache_drops_one_version),
		cmocka_unit_test(test_address_and_mac_parsing_refuses_malformed_input),
	};
	return cmocka_run_group_tests_name("relay_proto", tests, NULL, NULL);
}
