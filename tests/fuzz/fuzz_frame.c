/*
 * fuzz_frame.c: libFuzzer harness for frame parse, stats, check-target,
 * decode+verify (which must write nothing, and whose changes must stay
 * inside the range) and decode+apply. Input byte 0 selects whether the CRC is recomputed first
 * (so mutations reach the payload decoders) and the weight buffer length,
 * and (bit 6) whether the input starts with a frame that carries a model,
 * loaded first, so that frames that refer to it reach their payload
 * decoder; (bits 2-3) which of this CPU's vector
 * paths decodes, or (bit 7) the portable one; the rest is the frame,
 * placed against a guard page, as is the weight buffer. A rejected frame
 * must leave the weights untouched.
 */
#include <stdlib.h>

#include "bfpatch.h"
#include "guard.h"
#include "../../codec/internal.h" /* BFP_CPU_*: the decoder's paths */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void reseal(uint8_t *p, size_t len)
{
	if (len < BFP_HEADER_SIZE)
		return;
	uint32_t c = bfp_crc32c(0, p, 56);
	c = bfp_crc32c(c, p + BFP_HEADER_SIZE, len - BFP_HEADER_SIZE);
	for (int i = 0; i < 4; i++)
		p[56 + i] = (uint8_t)(c >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bfp_decoder dec;
	static uint16_t snap[1 << 17];
	guarded in, w;
	if (size < 1)
		return 0;
	uint8_t mode = data[0];
	size_t n = (mode & 2) ? 100001 : 4096 + ((mode & 63) >> 2);
	size_t mlen = 0; /* bytes of the model frame before the frame */
	bfp_decoder_init(&dec, (mode & 128) ? BFP_DEC_F_SCALAR : 0);
	/* every path the CPU has: the widest, AVX2 with pdep, AVX2 without,
	 * AVX-512BW without GFNI (Advanced SIMD on AArch64 for each) */
	static const uint32_t path[4] = {
		~0u, BFP_CPU_AVX2 | BFP_CPU_PDEP | BFP_CPU_NEON, BFP_CPU_AVX2 | BFP_CPU_NEON,
		BFP_CPU_AVX2 | BFP_CPU_AVX512BW | BFP_CPU_PDEP | BFP_CPU_NEON};
	bfp_dec_of(&dec)->cpu &= path[(mode >> 2) & 3];
	if ((mode & 64) && bfp_frame_length(data + 1, size - 1, &mlen) == BFP_OK) {
		if (guarded_alloc(&in, mlen))
			abort();
		memcpy(in.p, data + 1, mlen);
		if (mode & 1)
			reseal(in.p, mlen);
		(void)bfp_decoder_load_model(&dec, in.p, mlen);
		guarded_free(&in);
	}
	data += mlen;
	size -= mlen;
	if (guarded_alloc(&in, size - 1) || guarded_alloc(&w, n * 2))
		abort();
	memcpy(in.p, data + 1, size - 1);
	if (mode & 1)
		reseal(in.p, size - 1);
	uint16_t *wt = (uint16_t *)(void *)w.p;
	uint64_t s = 12345;
	for (size_t i = 0; i < n; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		wt[i] = (uint16_t)((s >> 33) & 0x3FFF) | 0x3800;
	}
	memcpy(snap, wt, n * 2);

	bfp_frame_header h;
	bfp_frame_stats st;
	int at;
	(void)bfp_frame_parse(in.p, size - 1, &h);
	(void)bfp_frame_stats_get(&dec, in.p, size - 1, &st);
	(void)bfp_frame_check_target(in.p, size - 1, wt, n, &at);
	bfp_apply_opts o;
	memset(&o, 0, sizeof(o));
	o.flags = BFP_DEC_F_ANY_MODEL | BFP_DEC_F_ANY_BASE;
	if (bfp_decode_verify(&dec, &o, in.p, size - 1, wt, n, &h) == BFP_OK) {
		const uint32_t *pos;
		const uint32_t nch = bfp_decoder_changes(&dec, &pos, NULL);
		for (uint32_t i = 0; i < nch; i++)
			if (pos[i] >= h.range_len)
				abort(); /* a change outside the frame's range */
	} else if (bfp_decoder_changes(&dec, NULL, NULL)) {
		abort(); /* changes kept after a rejected frame */
	}
	if (memcmp(snap, wt, n * 2) != 0)
		abort(); /* verify wrote */
	if (bfp_decode_apply(&dec, &o, in.p, size - 1, wt, n, NULL) != BFP_OK &&
	    memcmp(snap, wt, n * 2) != 0)
		abort(); /* a rejected frame changed the weights */
	guarded_free(&in);
	guarded_free(&w);
	return 0;
}
