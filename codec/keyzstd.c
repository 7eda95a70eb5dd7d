/*
 * keyzstd.c: keyframe-zstd (FORMAT.md 3.9): a range's words as two byte
 * planes (low bytes, then high bytes) in one zstd frame. The sign and
 * exponent byte of BF16 weights is highly repetitive, the mantissa byte is
 * not; planes let zstd see that. Only zstd's static-workspace API is used,
 * in memory the caller provides, so nothing is allocated.
 */
#include "keyzstd.h"

#ifdef BFP_HAVE_ZSTD
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

static ZSTD_compressionParameters cparams(void)
{
	return ZSTD_getCParams(BFP_KEYZSTD_LEVEL, 2 * BFP_KEYZSTD_MAX, 0);
}

size_t bfp_zstd_workspace_size(void)
{
	size_t c = ZSTD_estimateCCtxSize_usingCParams(cparams());
	size_t d = ZSTD_estimateDCtxSize();
	return c > d ? c : d;
}

size_t bfp_keyzstd_compress(void *ws, size_t ws_size, const uint16_t *words,
			    uint32_t n, uint8_t *planes, void *out, size_t cap)
{
	ZSTD_CCtx *cc = ZSTD_initStaticCCtx(ws, ws_size);
	if (!cc || n > BFP_KEYZSTD_MAX)
		return 0;
	for (uint32_t i = 0; i < n; i++) {
		planes[i] = (uint8_t)words[i];
		planes[n + i] = (uint8_t)(words[i] >> 8);
	}
	if (ZSTD_isError(ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel,
						 BFP_KEYZSTD_LEVEL)) ||
	    ZSTD_isError(ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 0)) ||
	    ZSTD_isError(ZSTD_CCtx_setParameter(cc, ZSTD_c_contentSizeFlag, 1)))
		return 0;
	size_t r = ZSTD_compress2(cc, out, cap, planes, 2 * (size_t)n);
	return ZSTD_isError(r) ? 0 : r;
}

bfp_status bfp_keyzstd_decompress(void *ws, size_t ws_size, const uint8_t *src,
				  size_t len, uint32_t n, uint8_t *planes,
				  uint16_t *words)
{
	BFP_CHECK(ws && BFP_WS_ALIGNED(ws) && ws_size >= bfp_zstd_workspace_size(), BFP_E_ARG);
	BFP_CHECK(n <= BFP_KEYZSTD_MAX, BFP_E_CORRUPT);
	/* exactly one zstd frame, declaring exactly the planes' size */
	BFP_CHECK(ZSTD_findFrameCompressedSize(src, len) == len, BFP_E_CORRUPT);
	BFP_CHECK(ZSTD_getFrameContentSize(src, len) == 2ull * n, BFP_E_CORRUPT);
	ZSTD_DCtx *dc = ZSTD_initStaticDCtx(ws, ws_size);
	BFP_CHECK(dc, BFP_E_ARG);
	size_t r = ZSTD_decompressDCtx(dc, planes, 2 * (size_t)n, src, len);
	BFP_CHECK(!ZSTD_isError(r) && r == 2ull * n, BFP_E_CORRUPT);
	for (uint32_t i = 0; i < n; i++)
		words[i] = (uint16_t)(planes[i] | (planes[n + i] << 8));
	return BFP_OK;
}
#else
size_t bfp_zstd_workspace_size(void)
{
	return 0;
}
#endif
