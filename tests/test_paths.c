/*
 * test_paths.c: every scan path the codec may pick on this CPU (scalar;
 * AVX2, AVX2 with pdep, AVX-512BW, AVX-512BW with GFNI and BITALG on
 * x86; Advanced SIMD on AArch64), forced through the encoder's and
 * decoder's cpu fields, writes the scalar path's frames byte for byte and
 * decodes them to the target: base values of every class (runs of one
 * class across whole chunks too), change densities from none to all,
 * lengths around the 64-element block and the 4096-element chunk. And the
 * build's CRC32C (tables, or the crc32 instructions of SSE4.2 or of
 * AArch64) against a bitwise one: encoder and decoder share it, so their
 * agreeing would not show it right.
 *
 * Plain C without cmocka, so that the cross build
 * (cross/aarch64-linux-gnu.ini) runs it under its emulator too. Exit
 * status 0 when every path agrees.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bfp_gen.h"
#include "../codec/internal.h" /* bfp_cpu_features, BFP_CPU_* */

#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "test_paths: %s:%d: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                          \
			fputc('\n', stderr);                                   \
			exit(1);                                               \
		}                                                              \
	} while (0)

enum { MAXN = 100003, OUT_CAP = 4u << 20 };

static bfp_encoder enc;
static bfp_decoder dec;

/* bfp_crc32c at every length to 300 and alignment to 8, and lengths to
 * 2600 in steps of 7 (the three-stream rounds of 192 and 768 bytes and
 * their tails), whole and in two parts, against the bitwise one; the
 * check value of the CRC catalogue. */
static void check_crc32c(void)
{
	uint8_t buf[2616];
	uint64_t s = 5;
	CHECK(bfp_crc32c(0, "123456789", 9) == 0xE3069283u, "CRC32C check value");
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)t_rand(&s);
	for (size_t off = 0; off < 8; off++)
		for (size_t n = 0; n <= 2600; n += n < 300 ? 1 : 7) {
			const uint32_t want = t_crc32c_bitwise(0, buf + off, n);
			const size_t h = n / 3;
			CHECK(bfp_crc32c(0, buf + off, n) == want &&
				      bfp_crc32c(bfp_crc32c(0, buf + off, h), buf + off + h, n - h) == want,
			      "CRC32C differs from the bitwise one (offset %zu, %zu bytes)", off, n);
		}
}

/* Encode base->tgt on path cpu into out (frame i at off[i]); the number
 * of frames. */
static size_t encode(uint32_t cpu, const uint16_t *b, const uint16_t *t, size_t n,
		     uint8_t *out, size_t *off)
{
	bfp_encode_opts o;
	memset(&o, 0, sizeof(o));
	o.frame_size = 1200;
	o.model_id = 1;
	o.base_version = 7;
	o.target_version = 8;
	o.flags = BFP_ENC_F_NO_DENSE; /* sparse frames at every density */
	CHECK(bfp_encoder_init(&enc, &o, b, t, n, 0, n) == BFP_OK, "encoder_init");
	bfp_enc_of(&enc)->cpu = cpu;
	size_t nf = 0, len;
	bfp_status st;
	off[0] = 0;
	while ((st = bfp_encode_next(&enc, out + off[nf], OUT_CAP - off[nf], &len)) == BFP_OK) {
		off[nf + 1] = off[nf] + len;
		nf++;
		CHECK(off[nf] + BFP_FRAME_SIZE_MAX <= OUT_CAP, "output buffer too small");
	}
	CHECK(st == BFP_DONE, "encode on path 0x%x: status %d", cpu, (int)st);
	return nf;
}

/* Keyframe streams in encodings 7, 8 and 9 (FORMAT.md 3.10-3.12) on each
 * path: the same frames as the scalar path's, and each path's decoder
 * gives back the values. Values of many scales and some escapes. */
static void check_keyframes(const uint32_t *paths, size_t np, uint32_t feats, uint16_t *t,
			    uint16_t *w, uint8_t *ref, size_t *ref_off, uint8_t *out, size_t *off)
{
	const size_t n = 40009;
	uint64_t s = 7;
	for (size_t i = 0; i < n; i++)
		t[i] = (uint16_t)((t_weight(&s) & 0x807Fu) |
				  ((110 + (i / 4000) + t_rand(&s) % 9 - (t_rand(&s) % 50 == 0) * 60) << 7));
	static const uint32_t kinds[] = {BFP_ENC_F_KEY_EXP, BFP_ENC_F_KEY_EXPM, BFP_ENC_F_KEY_HUF};
	static const uint32_t sizes[] = {BFP_FRAME_SIZE_MIN, 1200, 8900};
	for (size_t k = 0; k < 3; k++)
		for (size_t z = 0; z < 3; z++) {
			bfp_encode_opts o;
			memset(&o, 0, sizeof(o));
			o.frame_size = sizes[z];
			o.model_id = 1;
			o.target_version = 8;
			o.flags = BFP_ENC_F_KEYFRAME | kinds[k];
			size_t nf[2] = {0, 0};
			for (size_t p = 0; p < np; p++) {
				if ((paths[p] & feats) != paths[p])
					continue;
				uint8_t *o8 = p ? out : ref;
				size_t *of = p ? off : ref_off, len = 0, fl;
				CHECK(bfp_encoder_init(&enc, &o, NULL, t, n, 0, n) == BFP_OK, "init");
				bfp_enc_of(&enc)->cpu = paths[p];
				bfp_status st;
				size_t f = 0;
				while ((st = bfp_encode_next(&enc, o8 + len, OUT_CAP - len, &fl)) == BFP_OK) {
					of[f++] = len;
					len += fl;
				}
				of[f] = len;
				CHECK(st == BFP_DONE, "keyframes on path 0x%x: %d", paths[p], (int)st);
				nf[p != 0] = f;
				CHECK(!p || (f == nf[0] && memcmp(out, ref, len) == 0),
				      "path 0x%x: keyframes differ from the scalar path's (size %u)",
				      paths[p], sizes[z]);
				CHECK(bfp_decoder_init(&dec, 0) == BFP_OK, "decoder_init");
				bfp_dec_of(&dec)->cpu = paths[p];
				memset(w, 0, n * 2);
				bfp_apply_opts ao;
				memset(&ao, 0, sizeof(ao));
				ao.model_id = 1;
				for (size_t i = 0; i < nf[0]; i++)
					CHECK(bfp_decode_apply(&dec, &ao, ref + ref_off[i],
							       ref_off[i + 1] - ref_off[i], w, n,
							       NULL) == BFP_OK,
					      "path 0x%x: keyframe decode", paths[p]);
				CHECK(memcmp(w, t, n * 2) == 0, "path 0x%x: keyframes decode wrong",
				      paths[p]);
			}
		}
}

int main(void)
{
	const uint32_t feats = bfp_cpu_features();
	const uint32_t paths[] = {0,
				  BFP_CPU_AVX2,
				  BFP_CPU_AVX2 | BFP_CPU_PDEP,
				  BFP_CPU_AVX2 | BFP_CPU_AVX512BW,
				  BFP_CPU_AVX2 | BFP_CPU_AVX512BW | BFP_CPU_GFNI,
				  BFP_CPU_NEON};
	static const size_t lens[] = {1, 63, 64, 65, 4095, 4097, 12289, MAXN};
	static const uint32_t ppm[] = {0, 3000, 30000, 250000, 1000000};
	uint16_t *b = malloc(MAXN * 2), *t = malloc(MAXN * 2), *w = malloc(MAXN * 2);
	uint8_t *ref = malloc(OUT_CAP), *out = malloc(OUT_CAP);
	size_t *ref_off = malloc(sizeof(size_t) * (OUT_CAP / 64)),
	       *off = malloc(sizeof(size_t) * (OUT_CAP / 64));
	CHECK(b && t && w && ref && out && ref_off && off, "out of memory");
#ifdef __aarch64__
	CHECK(feats & BFP_CPU_NEON, "AArch64 without the Advanced SIMD path");
#endif
	check_crc32c();
	check_keyframes(paths, sizeof(paths) / sizeof(paths[0]), feats, t, w, ref, ref_off, out,
			off);
	uint64_t s = 99;
	size_t tried = 0, simd = 0;
	for (unsigned shape = 0; shape < 3; shape++) {
		for (size_t i = 0; i < MAXN; i++) {
			uint64_t r = t_rand(&s);
			if (shape == 0) /* every exponent */
				b[i] = (uint16_t)r;
			else if (shape == 1)
				b[i] = t_weight(&s);
			else /* one class per 5000 elements, a new one each time */
				b[i] = (uint16_t)((((i / 5000) * 7 % 16 + BFP_CLASS_EXP0) << 7) |
						  (r & 0x807Fu));
		}
		for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
			for (size_t d = 0; d < sizeof(ppm) / sizeof(ppm[0]); d++) {
				const size_t n = lens[l];
				t_mutate(b, t, n, ppm[d], &s);
				const size_t nf = encode(0, b, t, n, ref, ref_off);
				for (size_t p = 0; p < sizeof(paths) / sizeof(paths[0]); p++) {
					const uint32_t cpu = paths[p];
					if ((cpu & feats) != cpu)
						continue;
					if (cpu) {
						CHECK(encode(cpu, b, t, n, out, off) == nf &&
							      off[nf] == ref_off[nf] &&
							      memcmp(out, ref, off[nf]) == 0,
						      "path 0x%x: frames differ from the scalar path's "
						      "(n %zu, ppm %u, shape %u)",
						      cpu, n, ppm[d], shape);
						simd++;
					}
					CHECK(bfp_decoder_init(&dec, 0) == BFP_OK, "decoder_init");
					bfp_dec_of(&dec)->cpu = cpu;
					memcpy(w, b, n * 2);
					bfp_apply_opts ao;
					memset(&ao, 0, sizeof(ao));
					ao.model_id = 1;
					ao.base_version = 7;
					for (size_t i = 0; i < nf; i++) {
						bfp_status st = bfp_decode_apply(&dec, &ao, ref + ref_off[i],
										 ref_off[i + 1] - ref_off[i],
										 w, n, NULL);
						CHECK(st == BFP_OK, "path 0x%x: decode status %d", cpu,
						      (int)st);
					}
					CHECK(memcmp(w, t, n * 2) == 0,
					      "path 0x%x: decoded values differ from the target "
					      "(n %zu, ppm %u, shape %u)",
					      cpu, n, ppm[d], shape);
					tried++;
				}
			}
		}
	}
	printf("test_paths: %zu encodes and decodes agree, %zu on SIMD paths "
	       "(CPU features 0x%x)\n",
	       tried, simd, feats);
	free(b);
	free(t);
	free(w);
	free(ref);
	free(out);
	free(ref_off);
	free(off);
	return 0;
}
