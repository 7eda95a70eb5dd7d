/*
 * fuzz_control.c: libFuzzer harness for the control messages of
 * docs/PROTOCOL.md section 2 (rp_ctl_parse, rp_ctl_build), checked two
 * ways: against an independent statement of the section's rules, and as a
 * round trip (what parses rebuilds to the same bytes, what builds parses
 * back to the same fields). Authentication trailers are not fuzzed here.
 *
 * Input byte 0 picks the mode:
 *   bit 1 clear: the rest is a datagram; with bit 0 set its last 4 bytes
 *                are replaced by the CRC32C of those before them, so that
 *                the fuzzer gets past the CRC to the body's rules.
 *   bit 1 set:   the rest fills an rp_ctl field by field (fields_of()),
 *                which is built, then parsed.
 */
#include <stdlib.h>

#include "bfpatch.h"
#include "guard.h"
#include "proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MSG_MAX (RP_CTL_HDR + 8 * RP_NACK_MAX + 4)

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

/* PROTOCOL.md section 2, restated for the fields rp_ctl_build writes:
 * would a receiver accept them? */
static int rules_accept(const rp_ctl *c)
{
	switch (c->type) {
	case RP_JOIN:
		return c->data_port != 0;
	case RP_LEAVE:
	case RP_HEARTBEAT:
		return c->data_port == 0 && c->rate_kbps == 0;
	case RP_NACK:
		if (c->n_ranges < 1 || c->n_ranges > RP_NACK_MAX || c->rate_kbps ||
		    (c->flags & ~RP_NACK_KEY))
			return 0;
		for (unsigned i = 0; i < c->n_ranges; i++)
			if (c->ranges[i].count == 0 ||
			    (uint64_t)c->ranges[i].first + c->ranges[i].count > (uint64_t)UINT32_MAX + 1)
				return 0;
		return 1;
	default:
		return 0;
	}
}

static int same_fields(const rp_ctl *a, const rp_ctl *b)
{
	if (a->type != b->type || a->model_id != b->model_id || a->version != b->version ||
	    a->rate_kbps != b->rate_kbps)
		return 0;
	if (a->type != RP_NACK)
		return a->data_port == b->data_port;
	if (a->flags != b->flags || a->n_ranges != b->n_ranges)
		return 0;
	for (unsigned i = 0; i < a->n_ranges; i++)
		if (a->ranges[i].first != b->ranges[i].first ||
		    a->ranges[i].count != b->ranges[i].count)
			return 0;
	return 1;
}

/* A datagram: anything parsed is a well-formed message of exactly its
 * length, rebuilds to the same bytes, and no shorter prefix parses. */
static void datagram(const uint8_t *data, size_t size, int fix_crc)
{
	guarded in, out;
	rp_ctl c, d;
	if (guarded_alloc(&in, size) || guarded_alloc(&out, size))
		abort();
	memcpy(in.p, data, size);
	if (fix_crc && size >= 4) {
		uint32_t crc = bfp_crc32c(0, in.p, size - 4);
		for (int i = 0; i < 4; i++)
			in.p[size - 4 + i] = (uint8_t)(crc >> (8 * i));
	}
	if (rp_ctl_parse(in.p, size, &c) == 0) {
		size_t want = RP_CTL_HDR + 4 + (c.type == RP_NACK ? 8u * c.n_ranges : 0);
		if (!rules_accept(&c) || size != want || rd32(in.p + 24) != c.n_ranges)
			abort();
		if (rp_ctl_build(out.p, size, &c) != size || memcmp(out.p, in.p, size))
			abort(); /* accepted bytes the builder would not write */
		if (rp_ctl_build(out.p, size - 1, &c) != 0)
			abort();
		if (rp_ctl_parse(in.p + 1, size - 1, &d) == 0 ||
		    rp_ctl_parse(in.p, size - 1, &d) == 0)
			abort();
	}
	guarded_free(&in);
	guarded_free(&out);
}

/* Fields from bytes: a 26-byte block of type, data_port/flags, model_id,
 * version, rate_kbps and n_ranges (one byte, so past RP_NACK_MAX too) at
 * offsets 0, 1, 3, 11, 15, 19 (20-25 unused), then the ranges. */
static void fields_of(const uint8_t *p, size_t n, rp_ctl *c)
{
	uint8_t b[26] = {0};
	memset(c, 0, sizeof(*c));
	memcpy(b, p, n < sizeof(b) ? n : sizeof(b));
	c->type = b[0];
	c->data_port = (uint16_t)(b[1] | b[2] << 8);
	c->flags = c->type == RP_NACK ? c->data_port : 0;
	if (c->type == RP_NACK)
		c->data_port = 0;
	for (int i = 0; i < 8; i++)
		c->model_id |= (uint64_t)b[3 + i] << (8 * i);
	c->version = rd32(b + 11);
	c->rate_kbps = rd32(b + 15);
	c->n_ranges = b[19];
	p += n < sizeof(b) ? n : sizeof(b);
	n -= n < sizeof(b) ? n : sizeof(b);
	/* ranges: 8 bytes each while they last, then a pattern of them */
	for (unsigned i = 0; i < RP_NACK_MAX; i++) {
		if (n >= 8) {
			c->ranges[i].first = rd32(p);
			c->ranges[i].count = rd32(p + 4);
			p += 8;
			n -= 8;
		} else {
			c->ranges[i].first = 64 * i;
			c->ranges[i].count = 1 + i;
		}
	}
}

/* Fields: the builder's bytes parse if and only if the rules accept the
 * fields, and then back to the same fields. */
static void fields(const uint8_t *data, size_t size)
{
	uint8_t msg[MSG_MAX];
	rp_ctl c, d;
	guarded out;
	fields_of(data, size, &c);
	size_t n = rp_ctl_build(msg, sizeof(msg), &c);
	if (c.type == RP_NACK && c.n_ranges > RP_NACK_MAX) {
		if (n != 0)
			abort(); /* more ranges than a message holds */
		return;
	}
	if (n != RP_CTL_HDR + 4 + (c.type == RP_NACK ? 8u * c.n_ranges : 0))
		abort();
	if (guarded_alloc(&out, n))
		abort();
	memcpy(out.p, msg, n); /* its last byte against the guard page */
	int ok = rp_ctl_parse(out.p, n, &d) == 0;
	if (ok != rules_accept(&c) || (ok && !same_fields(&c, &d)))
		abort();
	guarded_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	if (data[0] & 2)
		fields(data + 1, size - 1);
	else
		datagram(data + 1, size - 1, data[0] & 1);
	return 0;
}
