/*
 * kat_expm_probe.c CASES: decodes the keyframe-expm payloads that
 * tests/kat_expm_crafted.py made from FORMAT.md 3.11, each in a frame of
 * its own, with the vector and the scalar decoder: a valid one must give
 * its values, any other BFP_E_CORRUPT with the weights untouched.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bfpatch.h"

static void put_le(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* One case: u8 reject, u8 label length, label, u32 n, u32 payload
 * length, payload, n values (little-endian). 1 read, 0 at the end, -1
 * on a short read. */
static int read_case(FILE *f, int *reject, char *label, uint32_t *n, uint8_t **payload,
		     uint32_t *pl, uint16_t **vals)
{
	uint8_t h[2], l[8];
	if (fread(h, 1, 2, f) != 2)
		return 0;
	*reject = h[0];
	if (fread(label, 1, h[1], f) != h[1] || fread(l, 1, 8, f) != 8)
		return -1;
	label[h[1]] = 0;
	*n = (uint32_t)l[0] | (uint32_t)l[1] << 8 | (uint32_t)l[2] << 16 | (uint32_t)l[3] << 24;
	*pl = (uint32_t)l[4] | (uint32_t)l[5] << 8 | (uint32_t)l[6] << 16 | (uint32_t)l[7] << 24;
	if (*n == 0 || *n > (1u << 20) || *pl > BFP_FRAME_SIZE_MAX)
		return -1;
	*payload = malloc(BFP_HEADER_SIZE + *pl);
	uint8_t *v = malloc((size_t)*n * 2);
	*vals = malloc((size_t)*n * 2);
	if (!*payload || !v || !*vals || fread(*payload + BFP_HEADER_SIZE, 1, *pl, f) != *pl ||
	    fread(v, 2, *n, f) != *n)
		return -1;
	for (uint32_t i = 0; i < *n; i++)
		(*vals)[i] = (uint16_t)(v[2 * i] | v[2 * i + 1] << 8);
	free(v);
	return 1;
}

int main(int argc, char **argv)
{
	static bfp_decoder dec[2];
	FILE *f = argc == 2 ? fopen(argv[1], "rb") : NULL;
	if (!f) {
		fprintf(stderr, "usage: kat_expm_probe CASES\n");
		return 2;
	}
	if (bfp_decoder_init(&dec[0], 0) != BFP_OK ||
	    bfp_decoder_init(&dec[1], BFP_DEC_F_SCALAR) != BFP_OK)
		return 1;
	int bad = 0, cases = 0, r;
	char label[256];
	for (;;) {
		int reject;
		uint32_t n, pl;
		uint8_t *fr;
		uint16_t *vals;
		if ((r = read_case(f, &reject, label, &n, &fr, &pl, &vals)) <= 0)
			break;
		/* a keyframe of a keyframe stream (FORMAT.md 2.1), version 1 */
		put_le(fr, BFP_MAGIC, 4);
		fr[4] = BFP_FORMAT_VERSION;
		fr[5] = BFP_ENC_KEY_EXPM;
		put_le(fr + 6, 0, 2);
		put_le(fr + 8, 1, 8);
		put_le(fr + 16, 0, 4);
		put_le(fr + 20, 1, 4);
		put_le(fr + 24, 0, 4);
		put_le(fr + 28, 1, 4);
		put_le(fr + 32, 0, 8);
		put_le(fr + 40, n, 4);
		put_le(fr + 44, pl, 4);
		put_le(fr + 48, bfp_hash_params(vals, n), 8);
		put_le(fr + 56, bfp_crc32c(bfp_crc32c(0, fr, 56), fr + BFP_HEADER_SIZE, pl), 4);
		uint16_t *w = malloc((size_t)n * 2);
		for (int s = 0; s < 2 && w; s++) {
			bfp_apply_opts o;
			memset(&o, 0, sizeof(o));
			o.flags = BFP_DEC_F_ANY_MODEL;
			for (uint32_t i = 0; i < n; i++)
				w[i] = 0x5A5A;
			bfp_status st = bfp_decode_apply(&dec[s], &o, fr, BFP_HEADER_SIZE + pl, w, n,
							 NULL);
			int untouched = 1;
			for (uint32_t i = 0; i < n; i++)
				untouched &= w[i] == 0x5A5A;
			int good = reject ? st == BFP_E_CORRUPT && untouched
					  : st == BFP_OK && memcmp(w, vals, (size_t)n * 2) == 0;
			if (!good) {
				printf("not ok - %s (%s path): %s%s\n", label, s ? "scalar" : "vector",
				       bfp_status_str(st),
				       reject && !untouched ? ", weights written" : "");
				bad++;
			}
		}
		bad += !w;
		cases++;
		free(w);
		free(fr);
		free(vals);
	}
	fclose(f);
	if (r < 0) {
		fprintf(stderr, "kat_expm_probe: %s: short or malformed case file\n", argv[1]);
		return 1;
	}
	printf("%s - %d crafted frames of encoding 8 decoded on both paths as FORMAT.md 3.11 says"
	       "%s\n", bad ? "not ok" : "ok", cases, bad ? "" : " (valid: their values; "
	       "the others: BFP_E_CORRUPT, nothing written)");
	return bad != 0;
}
