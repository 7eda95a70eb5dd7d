/*
 * keyzstd.h: byte-plane zstd keyframes (FORMAT.md 3.9), present only in
 * builds with the zstd option.
 */
#ifndef BFP_KEYZSTD_H
#define BFP_KEYZSTD_H

#include "internal.h"

#define BFP_KEYZSTD_MAX 8192u  /* parameters per zstd keyframe, at most */
#define BFP_KEYZSTD_LEVEL 3

#ifdef BFP_HAVE_ZSTD
/* Compress words[0..n) as byte planes (planes: 2n bytes of scratch) into
 * out; returns the compressed size, or 0 if it does not fit cap. */
size_t bfp_keyzstd_compress(void *ws, size_t ws_size, const uint16_t *words,
			    uint32_t n, uint8_t *planes, void *out, size_t cap);

/* Decompress a keyframe-zstd payload of n words into words (planes: 2n
 * bytes of scratch); rejects anything but exactly one zstd frame holding
 * exactly 2n bytes. */
bfp_status bfp_keyzstd_decompress(void *ws, size_t ws_size, const uint8_t *src,
				  size_t len, uint32_t n, uint8_t *planes,
				  uint16_t *words);
#endif

#endif
