/*
 * bfp_gen.h: a seeded generator of RL-like BF16 deltas for the tests
 * and a bitwise CRC32C,
 * without cmocka (test_paths.c runs where cmocka is not built, under an
 * emulator in cross builds).
 */
#ifndef BFP_GEN_H
#define BFP_GEN_H

#include <stddef.h>
#include <stdint.h>

#include "bfpatch.h"

static inline uint64_t t_rand(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* CRC32C one bit at a time, from its definition (FORMAT.md 2.1): the
 * reference for the codec's table and instruction paths. */
static inline uint32_t t_crc32c_bitwise(uint32_t crc, const uint8_t *p, size_t n)
{
	crc = ~crc;
	while (n--) {
		crc ^= *p++;
		for (int k = 0; k < 8; k++)
			crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
	}
	return ~crc;
}

/* Base values shaped like weights: exponents 112..127 and some others. */
static inline uint16_t t_weight(uint64_t *s)
{
	uint64_t r = t_rand(s);
	unsigned e = 116 + (unsigned)(r % 8);
	if ((r >> 8) % 50 == 0)
		e = 126 + (unsigned)((r >> 16) % 2);
	return (uint16_t)(((r >> 20) & 0x8000u) | (e << 7) | ((r >> 32) & 0x7Fu));
}

/* Target from base: each element changes with probability ppm/1e6, by
 * +-1 step mostly, sometimes more, rarely anything. */
static inline void t_mutate(const uint16_t *base, uint16_t *tgt, size_t n,
			    uint32_t ppm, uint64_t *s)
{
	for (size_t i = 0; i < n; i++) {
		tgt[i] = base[i];
		uint64_t r = t_rand(s);
		if (r % 1000000u >= ppm)
			continue;
		unsigned k = (unsigned)((r >> 24) % 100);
		int step = k < 85 ? 1 : (k < 92 ? 2 : (k < 99 ? 3 + (int)((r >> 32) % 14) : 0));
		if (step == 0) {
			tgt[i] = (uint16_t)(r >> 40);
			if (tgt[i] == base[i])
				tgt[i] ^= 1;
			continue;
		}
		if ((r >> 50) & 1)
			step = -step;
		tgt[i] = bfp_unkey((uint16_t)(bfp_key(base[i]) + step));
	}
}

#endif
