/*
 * frame.c: the frame header of FORMAT.md section 2 (parse, validate,
 * write), the CRC32C and range hash, status strings and the manifest.
 * Everything a relay or a receiver needs without decoding payloads.
 */
#include "internal.h"

#define XXH_INLINE_ALL
#define XXH_STATIC_LINKING_ONLY
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* XXH3's AVX2 and AVX-512 inner loops as well as the build's default one,
 * picked at run time (bfp_hash_cpu); their accumulators need 64-byte
 * alignment. Every loop computes the same hash. */
#define BFP_XXH_X86 1
#include <immintrin.h>
#define XXH_ACC_ALIGN 64
#define XXH_DISPATCH_AVX2 1
#define XXH_DISPATCH_AVX512 1
#define XXH_TARGET_AVX2 __attribute__((target("avx2")))
#define XXH_TARGET_AVX512 __attribute__((target("avx512f")))
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#endif
#include <xxhash.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

const char *bfp_status_str(bfp_status s)
{
	switch (s) {
	case BFP_OK: return "ok";
	case BFP_DONE: return "done";
	case BFP_E_ARG: return "invalid argument";
	case BFP_E_SPACE: return "output buffer too small";
	case BFP_E_TRUNCATED: return "truncated input";
	case BFP_E_MAGIC: return "bad magic: not a bfpatch frame";
	case BFP_E_FORMAT_VERSION: return "unsupported frame format version";
	case BFP_E_RESERVED: return "reserved field not zero";
	case BFP_E_ENCODING: return "unknown encoding";
	case BFP_E_CHECKSUM: return "CRC32C mismatch";
	case BFP_E_RANGE: return "parameter range out of bounds";
	case BFP_E_COUNT: return "frame index/count inconsistent";
	case BFP_E_MODEL: return "frame is for another model";
	case BFP_E_BASE_VERSION: return "frame does not apply to this base version";
	case BFP_E_CORRUPT: return "corrupt payload";
	case BFP_E_HASH: return "target hash mismatch";
	case BFP_E_UNSUPPORTED: return "not supported by this build";
	case BFP_E_MANIFEST: return "invalid manifest";
	case BFP_E_LENGTH: return "frame length differs from its header";
	case BFP_E_NO_MODEL: return "frame's model (an earlier frame) not loaded";
	}
	return "unknown status";
}

#if defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
/* AArch64 builds for cores with the CRC32 extension (BlueField-2 and -3,
 * Grace; meson.build's -march=armv8-a+crc, unless c_args name another
 * -march or -mcpu, says so at compile time, as DPDK's Arm builds do) use
 * its crc32c instructions, eight bytes a step, freestanding build
 * included: instructions, not a library. */
#include <arm_acle.h>

uint32_t bfp_crc32c(uint32_t crc, const void *data, size_t len)
{
	const uint8_t *p = data;
	uint32_t c = ~crc;
	for (; len >= 8; p += 8, len -= 8)
		c = __crc32cd(c, bfp_ld64(p));
	while (len--)
		c = __crc32cb(c, *p++);
	return ~c;
}
#else
#include "crc32c_table.h"

/* CRC32C by tables, eight bytes a step: every CPU, and the freestanding
 * build. */
static uint32_t crc32c_table(uint32_t crc, const void *data, size_t len)
{
	const uint8_t *p = data;
	crc = ~crc;
	while (len >= 8) {
		uint32_t lo = crc ^ bfp_ld32(p);
		uint32_t hi = bfp_ld32(p + 4);
		crc = bfp_crc32c_table[7][lo & 0xFF] ^
		      bfp_crc32c_table[6][(lo >> 8) & 0xFF] ^
		      bfp_crc32c_table[5][(lo >> 16) & 0xFF] ^
		      bfp_crc32c_table[4][lo >> 24] ^
		      bfp_crc32c_table[3][hi & 0xFF] ^
		      bfp_crc32c_table[2][(hi >> 8) & 0xFF] ^
		      bfp_crc32c_table[1][(hi >> 16) & 0xFF] ^
		      bfp_crc32c_table[0][hi >> 24];
		p += 8;
		len -= 8;
	}
	while (len--)
		crc = (crc >> 8) ^ bfp_crc32c_table[0][(crc ^ *p++) & 0xFF];
	return ~crc;
}

#if defined(__x86_64__) && __STDC_HOSTED__ && (defined(__GNUC__) || defined(__clang__))
/* The hosted x86-64 build picks the SSE4.2 crc32 instruction (the same
 * polynomial, about ten times the tables' speed) when the CPU has it,
 * once, when the library is loaded (an ifunc: the loader's choice, not a
 * global of the codec's). The freestanding build has the tables only.
 *
 * The state c moved on by n zero bytes: the carry-less product of c and
 * K(n) = x^(8n - 33) mod P (bit-reflected), reduced by the crc32
 * instruction. The constants of n = 64, 128, 256 and 512. */
#define K64 0x9e4addf8u
#define K128 0x0d3b6092u
#define K256 0xb9e02b86u
#define K512 0xdd7e3b0cu

__attribute__((target("sse4.2,pclmul"))) static inline uint64_t crc_shift(uint64_t c, uint32_t k)
{
	const __m128i r = _mm_clmulepi64_si128(_mm_cvtsi64_si128((long long)c),
					       _mm_cvtsi32_si128((int)k), 0);
	return _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(r));
}

/* 3 b bytes from state c as three streams of b bytes at once (each
 * crc32 waits on its stream's last only), joined by shifting the first
 * by 2 b bytes (k2) and the second by b (k1). */
__attribute__((target("sse4.2,pclmul"))) static inline uint64_t
crc_three(uint64_t c, const uint8_t *p, size_t b, uint32_t k1, uint32_t k2)
{
	uint64_t c1 = 0, c2 = 0;
	for (size_t i = 0; i < b; i += 8) {
		c = _mm_crc32_u64(c, bfp_ld64(p + i));
		c1 = _mm_crc32_u64(c1, bfp_ld64(p + b + i));
		c2 = _mm_crc32_u64(c2, bfp_ld64(p + 2 * b + i));
	}
	return crc_shift(c, k2) ^ crc_shift(c1, k1) ^ c2;
}

__attribute__((target("sse4.2,pclmul"))) static uint32_t crc32c_sse42(uint32_t crc,
								     const void *data, size_t len)
{
	const uint8_t *p = data;
	uint64_t c = ~crc;
	for (; len >= 3 * 256; p += 3 * 256, len -= 3 * 256)
		c = crc_three(c, p, 256, K256, K512);
	for (; len >= 3 * 64; p += 3 * 64, len -= 3 * 64)
		c = crc_three(c, p, 64, K64, K128);
	for (; len >= 8; p += 8, len -= 8)
		c = _mm_crc32_u64(c, bfp_ld64(p));
	uint32_t c32 = (uint32_t)c;
	while (len--)
		c32 = _mm_crc32_u8(c32, *p++);
	return ~c32;
}

typedef uint32_t crc32c_fn(uint32_t, const void *, size_t);
/* runs while the loader relocates, before any sanitizer runtime is up:
 * not instrumented */
__attribute__((no_sanitize("address", "undefined", "thread"))) static crc32c_fn *crc32c_pick(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("pclmul") ? crc32c_sse42
										     : crc32c_table;
}

uint32_t bfp_crc32c(uint32_t crc, const void *data, size_t len)
	__attribute__((ifunc("crc32c_pick")));
#else
uint32_t bfp_crc32c(uint32_t crc, const void *data, size_t len)
{
	return crc32c_table(crc, data, len);
}
#endif
#endif /* AArch64 with CRC32 */

uint64_t bfp_hash_params(const uint16_t *params, size_t n)
{
	/* FORMAT.md 2.3: words are hashed as little-endian bytes; this is the
	 * in-memory layout on the little-endian hosts we build for. */
	return XXH3_64bits(params, n * sizeof(uint16_t));
}

#ifdef BFP_XXH_X86
__attribute__((target("avx512f"))) static uint64_t hash_long_avx512(const void *p, size_t n)
{
	return XXH3_hashLong_64b_internal(p, n, XXH3_kSecret, sizeof(XXH3_kSecret),
					  XXH3_accumulate_512_avx512, XXH3_scrambleAcc_avx512);
}

__attribute__((target("avx2"))) static uint64_t hash_long_avx2(const void *p, size_t n)
{
	return XXH3_hashLong_64b_internal(p, n, XXH3_kSecret, sizeof(XXH3_kSecret),
					  XXH3_accumulate_512_avx2, XXH3_scrambleAcc_avx2);
}

__attribute__((target("avx512f"))) static void update_avx512(XXH3_state_t *st, const void *p,
							     size_t n)
{
	(void)XXH3_update(st, (const xxh_u8 *)p, n, XXH3_accumulate_512_avx512,
			  XXH3_scrambleAcc_avx512);
}

__attribute__((target("avx2"))) static void update_avx2(XXH3_state_t *st, const void *p,
							size_t n)
{
	(void)XXH3_update(st, (const xxh_u8 *)p, n, XXH3_accumulate_512_avx2,
			  XXH3_scrambleAcc_avx2);
}
#endif

uint64_t bfp_hash_cpu(uint32_t cpu, const void *p, size_t n)
{
	(void)cpu;
#ifdef BFP_XXH_X86
	/* inputs up to XXH3_MIDSIZE_MAX take XXH3's short paths, which have
	 * no inner loop to pick */
	if (n > XXH3_MIDSIZE_MAX && (cpu & BFP_CPU_AVX512BW))
		return hash_long_avx512(p, n);
	if (n > XXH3_MIDSIZE_MAX && (cpu & BFP_CPU_AVX2))
		return hash_long_avx2(p, n);
#endif
	return XXH3_64bits(p, n);
}

static void hash_update(uint32_t cpu, XXH3_state_t *st, const void *p, size_t n)
{
	(void)cpu;
#ifdef BFP_XXH_X86
	if (cpu & BFP_CPU_AVX512BW) {
		update_avx512(st, p, n);
		return;
	}
	if (cpu & BFP_CPU_AVX2) {
		update_avx2(st, p, n);
		return;
	}
#endif
	XXH3_64bits_update(st, p, n);
}

uint64_t bfp_hash_with_changes(uint32_t cpu, uint16_t *chunk, size_t chunk_len,
			       const uint16_t *base, uint64_t n,
			       const uint32_t *pos, const uint16_t *val,
			       uint32_t n_changes)
{
	XXH3_state_t st;
	uint32_t c = 0;

	XXH3_INITSTATE(&st);
	XXH3_64bits_reset(&st);
	for (uint64_t off = 0; off < n;) {
		/* stretches without changes are hashed straight from base */
		uint64_t next = c < n_changes ? pos[c] : n;
		if (next - off >= chunk_len) {
			uint64_t run = (next - off) / chunk_len * chunk_len;
			hash_update(cpu, &st, base + off, (size_t)run * 2);
			off += run;
			continue;
		}
		size_t len = (size_t)(n - off < chunk_len ? n - off : chunk_len);
		BFP_MEMCPY(chunk, base + off, len * 2);
		while (c < n_changes && pos[c] < off + len) {
			chunk[pos[c] - off] = val[c];
			c++;
		}
		hash_update(cpu, &st, chunk, len * 2);
		off += len;
	}
	return XXH3_64bits_digest(&st);
}

/* ---- header: FORMAT.md 2.1 ---- */

void bfp_header_write(uint8_t *p, const bfp_frame_header *h)
{
	bfp_st32(p + 0, BFP_MAGIC);
	p[4] = BFP_FORMAT_VERSION;
	p[5] = h->encoding;
	bfp_st16(p + 6, h->flags);
	bfp_st64(p + 8, h->model_id);
	bfp_st32(p + 16, h->base_version);
	bfp_st32(p + 20, h->target_version);
	bfp_st32(p + 24, h->frame_index);
	bfp_st32(p + 28, h->frame_count);
	bfp_st64(p + 32, h->range_begin);
	bfp_st32(p + 40, h->range_len);
	bfp_st32(p + 44, h->payload_len);
	bfp_st64(p + 48, h->target_hash);
	bfp_st32(p + 56, 0);
}

static uint32_t frame_crc(const uint8_t *p, size_t len)
{
	uint32_t c = bfp_crc32c(0, p, 56);
	return bfp_crc32c(c, p + BFP_HEADER_SIZE, len - BFP_HEADER_SIZE);
}

void bfp_frame_seal(uint8_t *p, size_t len)
{
	bfp_st32(p + 56, frame_crc(p, len));
}

bfp_status bfp_frame_length(const void *buf, size_t avail, size_t *frame_len)
{
	const uint8_t *p = buf;
	BFP_CHECK(buf && frame_len, BFP_E_ARG);
	BFP_CHECK(avail >= BFP_HEADER_SIZE, BFP_E_TRUNCATED);
	BFP_CHECK(bfp_ld32(p) == BFP_MAGIC, BFP_E_MAGIC);
	uint32_t pl = bfp_ld32(p + 44);
	BFP_CHECK(pl <= BFP_PAYLOAD_MAX, BFP_E_LENGTH);
	BFP_CHECK(avail - BFP_HEADER_SIZE >= pl, BFP_E_TRUNCATED);
	*frame_len = BFP_HEADER_SIZE + pl;
	return BFP_OK;
}

bfp_status bfp_frame_parse(const void *frame, size_t len, bfp_frame_header *h)
{
	const uint8_t *p = frame;
	BFP_CHECK(frame && h, BFP_E_ARG);
	/* FORMAT.md 2.4, in this order */
	BFP_CHECK(len >= BFP_HEADER_SIZE, BFP_E_TRUNCATED);
	BFP_CHECK(bfp_ld32(p) == BFP_MAGIC, BFP_E_MAGIC);
	h->format_version = p[4];
	BFP_CHECK(h->format_version == BFP_FORMAT_VERSION, BFP_E_FORMAT_VERSION);
	h->payload_len = bfp_ld32(p + 44);
	BFP_CHECK(h->payload_len <= BFP_PAYLOAD_MAX, BFP_E_LENGTH);
	BFP_CHECK(len >= BFP_HEADER_SIZE + (size_t)h->payload_len,
		  BFP_E_TRUNCATED);
	BFP_CHECK(len == BFP_HEADER_SIZE + (size_t)h->payload_len, BFP_E_LENGTH);
	h->crc = bfp_ld32(p + 56);
	BFP_CHECK(frame_crc(p, len) == h->crc, BFP_E_CHECKSUM);
	h->encoding = p[5];
	h->flags = bfp_ld16(p + 6);
	BFP_CHECK(!(h->flags & ~BFP_FLAG_IN_PATCH), BFP_E_RESERVED);
	BFP_CHECK(bfp_encoding_known(h->encoding), BFP_E_ENCODING);
	h->model_id = bfp_ld64(p + 8);
	h->base_version = bfp_ld32(p + 16);
	h->target_version = bfp_ld32(p + 20);
	/* a keyframe stream's frame has base 0; a patch's frames (delta, or
	 * keyframe-coded with IN_PATCH) name the patch's base */
	if (bfp_encoding_is_delta(h->encoding))
		BFP_CHECK(!h->flags, BFP_E_RESERVED);
	if (!bfp_frame_in_patch(h))
		BFP_CHECK(h->base_version == 0, BFP_E_RESERVED);
	else
		BFP_CHECK(h->target_version > h->base_version,
			  BFP_E_BASE_VERSION);
	h->frame_index = bfp_ld32(p + 24);
	h->frame_count = bfp_ld32(p + 28);
	/* frame_count 0: streamed, the count was not known yet (FORMAT.md 2.5) */
	BFP_CHECK(h->frame_count == 0 || h->frame_index < h->frame_count,
		  BFP_E_COUNT);
	h->range_begin = bfp_ld64(p + 32);
	h->range_len = bfp_ld32(p + 40);
	BFP_CHECK(h->range_len > 0, BFP_E_RANGE);
	BFP_CHECK(h->range_begin <= UINT64_MAX - h->range_len, BFP_E_RANGE);
	h->target_hash = bfp_ld64(p + 48);
	return BFP_OK;
}

bfp_status bfp_frame_set_index(void *frame, size_t len, uint32_t index,
			       uint32_t count)
{
	uint8_t *p = frame;
	size_t fl;
	bfp_status st = bfp_frame_length(frame, len, &fl);
	if (st != BFP_OK)
		return st;
	BFP_CHECK(fl == len, BFP_E_LENGTH);
	BFP_CHECK(count == 0 || index < count, BFP_E_COUNT);
	bfp_st32(p + 24, index);
	bfp_st32(p + 28, count);
	bfp_frame_seal(p, len);
	return BFP_OK;
}

/* ---- manifest: FORMAT.md 2.2 ---- */

size_t bfp_dtype_size(uint32_t dt)
{
	switch (dt) {
	case BFP_DT_BF16: case BFP_DT_F16: case BFP_DT_I16: case BFP_DT_U16:
		return 2;
	case BFP_DT_F32: case BFP_DT_I32: case BFP_DT_U32:
		return 4;
	case BFP_DT_F64: case BFP_DT_I64: case BFP_DT_U64:
		return 8;
	case BFP_DT_I8: case BFP_DT_U8: case BFP_DT_BOOL:
	case BFP_DT_F8_E4M3: case BFP_DT_F8_E5M2:
		return 1;
	}
	return 0;
}

bfp_status bfp_manifest_check(const bfp_manifest *m)
{
	uint64_t at = 0;
	BFP_CHECK(m && (m->tensors || m->n_tensors == 0), BFP_E_ARG);
	for (size_t i = 0; i < m->n_tensors; i++) {
		const bfp_tensor *t = &m->tensors[i];
		size_t es = bfp_dtype_size(t->dtype);
		uint64_t n = 1;
		BFP_CHECK(es != 0, BFP_E_MANIFEST);
		BFP_CHECK(t->ndim <= BFP_MAX_DIMS, BFP_E_MANIFEST);
		BFP_CHECK(t->name || t->name_len == 0, BFP_E_MANIFEST);
		for (uint32_t d = 0; d < t->ndim; d++) {
			BFP_CHECK(t->shape[d] == 0 || n <= UINT64_MAX / t->shape[d],
				  BFP_E_MANIFEST);
			n *= t->shape[d];
		}
		BFP_CHECK(n <= UINT64_MAX / es, BFP_E_MANIFEST);
		BFP_CHECK(t->byte_begin == at, BFP_E_MANIFEST);
		BFP_CHECK(t->byte_end >= t->byte_begin &&
				  t->byte_end - t->byte_begin == n * es,
			  BFP_E_MANIFEST);
		at = t->byte_end;
	}
	BFP_CHECK(at == m->data_bytes, BFP_E_MANIFEST);
	return BFP_OK;
}

uint64_t bfp_manifest_params(const bfp_manifest *m)
{
	return m->data_bytes / 2 + (m->data_bytes & 1);
}

static void hash_u64(XXH3_state_t *st, uint64_t v)
{
	uint8_t b[8];
	bfp_st64(b, v);
	XXH3_64bits_update(st, b, 8);
}

uint64_t bfp_manifest_id(const bfp_manifest *m)
{
	XXH3_state_t st;
	XXH3_INITSTATE(&st);
	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, "bfpatch-manifest-v1", 19);
	hash_u64(&st, m->data_bytes);
	hash_u64(&st, m->n_tensors);
	for (size_t i = 0; i < m->n_tensors; i++) {
		const bfp_tensor *t = &m->tensors[i];
		hash_u64(&st, t->name_len);
		if (t->name_len)
			XXH3_64bits_update(&st, t->name, t->name_len);
		hash_u64(&st, t->dtype);
		hash_u64(&st, t->ndim);
		for (uint32_t d = 0; d < t->ndim; d++)
			hash_u64(&st, t->shape[d]);
		hash_u64(&st, t->byte_begin);
		hash_u64(&st, t->byte_end);
	}
	return XXH3_64bits_digest(&st);
}
