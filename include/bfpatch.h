/*
 * bfpatch.h: lossless sparse patches between two versions of a BF16 model.
 *
 * Memory contract. The library never allocates, has no mutable static or
 * global state, and does no I/O. Every context lives in memory the caller
 * provides: bfp_encoder and bfp_decoder are opaque storage of a fixed
 * size (BFP_ENCODER_SIZE, BFP_DECODER_SIZE) that only the library reads;
 * contexts hold no pointers into themselves and may be copied with
 * memcpy. The only libc functions it calls are memcpy, memset and
 * memmove (and libzstd's static-workspace API when built with zstd).
 * Different contexts may be used from different threads at the same time;
 * one context must not be used by two threads at once. A zstd workspace
 * (bfp_encode_opts, bfp_apply_opts) is part of the context that uses it:
 * give each encoder or decoder working at the same time its own.
 *
 * Errors. Every fallible function returns a bfp_status. Sizes come back
 * through out-parameters. Each function's comment says what its outputs
 * and its context hold after an error. Status values are pinned: new ones
 * are appended, none is ever renumbered.
 *
 * Parameter space. A model is a flat array of 16-bit words (BF16 bit
 * patterns) indexed 0 .. n_params-1. BF16 values are treated as bit
 * patterns only: no floating-point arithmetic happens anywhere.
 *
 * The wire and file format is specified in docs/FORMAT.md.
 */
#ifndef BFPATCH_H
#define BFPATCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BFP_VERSION_STRING "0.2.0"

/* Public functions; everything else in the shared library is hidden. */
#if defined(__GNUC__)
#define BFP_API __attribute__((visibility("default")))
#else
#define BFP_API
#endif

/* ---- status ---------------------------------------------------------- */

typedef enum bfp_status {
	BFP_OK = 0,              /* success */
	BFP_DONE = 1,            /* encoder: no more frames in this range */
	BFP_E_ARG = -1,          /* invalid argument (NULL, bad option) */
	BFP_E_SPACE = -2,        /* output buffer too small */
	BFP_E_TRUNCATED = -3,    /* input shorter than its headers say */
	BFP_E_MAGIC = -4,        /* not a bfpatch frame */
	BFP_E_FORMAT_VERSION = -5, /* frame format version not supported */
	BFP_E_RESERVED = -6,     /* a reserved field or bit is not zero */
	BFP_E_ENCODING = -7,     /* unknown encoding id */
	BFP_E_CHECKSUM = -8,     /* CRC32C mismatch */
	BFP_E_RANGE = -9,        /* parameter range empty or out of bounds */
	BFP_E_COUNT = -10,       /* frame index/count inconsistent */
	BFP_E_MODEL = -11,       /* frame belongs to another model */
	BFP_E_BASE_VERSION = -12, /* frame does not apply to this base version */
	BFP_E_CORRUPT = -13,     /* payload does not decode to a valid patch */
	BFP_E_HASH = -14,        /* decoded target values fail the range hash */
	BFP_E_UNSUPPORTED = -15, /* feature not compiled in (e.g. zstd) */
	BFP_E_MANIFEST = -16,    /* manifest invalid */
	BFP_E_LENGTH = -17,      /* frame length differs from header */
	BFP_E_NO_MODEL = -18,    /* a frame that refers to a model, without
				    that model loaded (bfp_decoder_load_model) */
} bfp_status;

/* Short, static, human-readable text for a status. Never NULL. */
BFP_API const char *bfp_status_str(bfp_status s);

/* ---- frame format constants (docs/FORMAT.md section 2) ---------------- */

#define BFP_MAGIC 0x54504642u         /* "BFPT" little-endian */
#define BFP_FORMAT_VERSION 1u
/* The format's minor version this build writes and reads: 1.1 adds
 * encoding 7 (BFP_ENC_KEY_EXP), 1.2 encoding 8 (BFP_ENC_KEY_EXPM), 1.3
 * encoding 9 (BFP_ENC_KEY_HUF); the header's version byte stays 1, and an
 * older decoder rejects an encoding it does not know (BFP_E_ENCODING). */
#define BFP_FORMAT_MINOR 3u
#define BFP_HEADER_SIZE 60u
#define BFP_FRAME_SIZE_MIN 128u
#define BFP_FRAME_SIZE_MAX 9000u
#define BFP_FRAME_SIZE_DEFAULT 1200u
#define BFP_PAYLOAD_MAX (BFP_FRAME_SIZE_MAX - BFP_HEADER_SIZE)
/* Bound on the bytes one frame occupies for a frame size limit (0 means
 * the default): encoders never write more. A constant expression for
 * constant arguments; it evaluates its argument twice (bfp_frame_bound()
 * once). */
#define BFP_FRAME_BOUND(frame_size) \
	((frame_size) ? (size_t)(frame_size) : (size_t)BFP_FRAME_SIZE_DEFAULT)
/* Upper bound on changed parameters one frame carries: encoders stop
 * there and decoders reject more (FORMAT.md 3.5, 3.6). Sizes the scratch. */
#define BFP_CHANGES_MAX (BFP_PAYLOAD_MAX * 4u)
/* Number of base-exponent contexts of the sparse encoding, and the BF16
 * exponent field of class 0's upper end (FORMAT.md 3.3). */
#define BFP_CLASSES 16u
#define BFP_CLASS_EXP0 108u

typedef enum bfp_encoding {
	BFP_ENC_SPARSE = 1,        /* sparse changes with their own code
				      parameters: decodes alone */
	BFP_ENC_DENSE = 2,         /* changed flag per parameter, then value */
	BFP_ENC_KEY_RAW = 3,       /* absolute values, little-endian */
	BFP_ENC_KEY_ZSTD = 4,      /* absolute values, byte planes through zstd */
	BFP_ENC_SPARSE_MODEL = 5,  /* sparse changes and the model (code
				      parameters and tables) they are coded
				      with, for the frames that refer to it */
	BFP_ENC_SPARSE_REF = 6,    /* sparse changes coded with the model of
				      an earlier frame of the same patch */
	BFP_ENC_KEY_EXP = 7,       /* absolute values: exponents through rANS
				      with the frame's table, sign and
				      mantissa raw (format 1.1) */
	BFP_ENC_KEY_EXPM = 8,      /* absolute values: exponents and the
				      mantissa's top bit through rANS with
				      the frame's table, sign and the low
				      mantissa bits raw (format 1.2) */
	BFP_ENC_KEY_HUF = 9,       /* absolute values: as BFP_ENC_KEY_EXPM,
				      through a Huffman code the table
				      gives, in four streams (format 1.3) */
} bfp_encoding;
/* The highest encoding this build knows. */
#define BFP_ENC_LAST BFP_ENC_KEY_HUF

/* The encodings this build knows: decoders reject any other
 * (BFP_E_ENCODING). */
static inline int bfp_encoding_known(unsigned encoding)
{
	return encoding == BFP_ENC_SPARSE || encoding == BFP_ENC_DENSE ||
	       encoding == BFP_ENC_KEY_RAW || encoding == BFP_ENC_KEY_ZSTD ||
	       encoding == BFP_ENC_SPARSE_MODEL || encoding == BFP_ENC_SPARSE_REF ||
	       encoding == BFP_ENC_KEY_EXP || encoding == BFP_ENC_KEY_EXPM ||
	       encoding == BFP_ENC_KEY_HUF;
}

/* The keyframe encodings: absolute values, applying to any base. */
static inline int bfp_encoding_is_key(unsigned encoding)
{
	return encoding == BFP_ENC_KEY_RAW || encoding == BFP_ENC_KEY_ZSTD ||
	       encoding == BFP_ENC_KEY_EXP || encoding == BFP_ENC_KEY_EXPM ||
	       encoding == BFP_ENC_KEY_HUF;
}

/* The sparse encodings. */
static inline int bfp_encoding_is_sparse(unsigned encoding)
{
	return encoding == BFP_ENC_SPARSE || encoding == BFP_ENC_SPARSE_MODEL ||
	       encoding == BFP_ENC_SPARSE_REF;
}

/* Encodings whose frames carry a model or refer to one. */
static inline int bfp_encoding_has_model(unsigned encoding)
{
	return encoding == BFP_ENC_SPARSE_MODEL || encoding == BFP_ENC_SPARSE_REF;
}

/* Frames that carry a model for the frames after them. */
static inline int bfp_encoding_carries_model(unsigned encoding)
{
	return encoding == BFP_ENC_SPARSE_MODEL;
}

/* Frames that refer to an earlier frame's model. */
static inline int bfp_encoding_refers(unsigned encoding)
{
	return encoding == BFP_ENC_SPARSE_REF;
}

/* Patch encodings (sparse, dense) apply to one base version; keyframe
 * encodings to any. */
static inline int bfp_encoding_is_delta(unsigned encoding)
{
	return bfp_encoding_is_sparse(encoding) || encoding == BFP_ENC_DENSE;
}

/* Header flags (FORMAT.md 2.1). IN_PATCH: a keyframe-coded frame
 * that is one of the frames of the patch base_version -> target_version
 * (a range the encoder found cheaper as absolute values), not a frame of
 * the keyframe stream of target_version. */
#define BFP_FLAG_IN_PATCH 0x0001u

/* A decoded frame header (fields of FORMAT.md 2.1, host order). */
typedef struct bfp_frame_header {
	uint8_t format_version;
	uint8_t encoding;
	uint16_t flags;
	uint64_t model_id;
	uint32_t base_version;
	uint32_t target_version;
	uint32_t frame_index;
	uint32_t frame_count;
	uint64_t range_begin;
	uint32_t range_len;
	uint32_t payload_len;
	uint64_t target_hash;
	uint32_t crc;
} bfp_frame_header;

/* Parse and fully validate a frame's header, its length and its CRC32C.
 * frame_len must be exactly the frame's length (one datagram); use
 * bfp_frame_length() to split a byte stream. On error *hdr is unspecified.
 * Does not check the payload. */
BFP_API bfp_status bfp_frame_parse(const void *frame, size_t frame_len,
			   bfp_frame_header *hdr);

/* Whether a parsed frame is one of the frames of the patch
 * base_version -> target_version (delta-coded, or keyframe-coded with
 * BFP_FLAG_IN_PATCH) rather than of the keyframe stream of target_version.
 * Receivers sort frames into patches and keyframe streams by this. */
static inline int bfp_frame_in_patch(const bfp_frame_header *h)
{
	return bfp_encoding_is_delta(h->encoding) || (h->flags & BFP_FLAG_IN_PATCH);
}

/* Length of the frame starting at buf (header + payload) from its header,
 * after checking magic and bounds; for splitting a patch file. */
BFP_API bfp_status bfp_frame_length(const void *buf, size_t avail, size_t *frame_len);

/* Rewrite frame_index and frame_count of an encoded frame and recompute
 * its CRC: a publisher that learns the count only after encoding, or
 * that streams frames before it (count 0, FORMAT.md 2.5). */
BFP_API bfp_status bfp_frame_set_index(void *frame, size_t frame_len,
			       uint32_t index, uint32_t count);

/* ---- hashing ---------------------------------------------------------- */

/* CRC32C (Castagnoli), as used by the frame checksum; crc starts at 0. */
BFP_API uint32_t bfp_crc32c(uint32_t crc, const void *data, size_t len);

/* The 64-bit range hash of FORMAT.md 2.3: XXH3-64 (seed 0) of the values
 * as little-endian 16-bit words. */
BFP_API uint64_t bfp_hash_params(const uint16_t *params, size_t n);

/* ---- manifest --------------------------------------------------------- */

typedef enum bfp_dtype {
	BFP_DT_BF16 = 1, BFP_DT_F16 = 2, BFP_DT_F32 = 3, BFP_DT_F64 = 4,
	BFP_DT_I8 = 5, BFP_DT_U8 = 6, BFP_DT_I16 = 7, BFP_DT_U16 = 8,
	BFP_DT_I32 = 9, BFP_DT_U32 = 10, BFP_DT_I64 = 11, BFP_DT_U64 = 12,
	BFP_DT_BOOL = 13, BFP_DT_F8_E4M3 = 14, BFP_DT_F8_E5M2 = 15,
} bfp_dtype;

#define BFP_MAX_DIMS 8u

/* One tensor. Its bytes occupy [byte_begin, byte_end) of the model's data;
 * the parameter space is those bytes read as little-endian 16-bit words,
 * so a tensor covers words [byte_begin/2, (byte_end+1)/2). Non-BF16
 * tensors are thereby carried bit-exactly as 16-bit words. */
typedef struct bfp_tensor {
	const char *name; /* not NUL-terminated necessarily */
	size_t name_len;
	uint32_t dtype;   /* bfp_dtype */
	uint32_t ndim;
	uint64_t shape[BFP_MAX_DIMS];
	uint64_t byte_begin;
	uint64_t byte_end;
} bfp_tensor;

typedef struct bfp_manifest {
	const bfp_tensor *tensors; /* sorted by byte_begin */
	size_t n_tensors;
	uint64_t data_bytes;       /* size of the data section */
} bfp_manifest;

/* Size in bytes of one element of dtype, or 0 if unknown. */
BFP_API size_t bfp_dtype_size(uint32_t dtype);

/* Check the manifest: known dtypes, byte sizes matching shapes, tensors
 * sorted, non-overlapping, contiguous and covering exactly data_bytes. */
BFP_API bfp_status bfp_manifest_check(const bfp_manifest *m);

/* Number of 16-bit parameter words of the model: ceil(data_bytes / 2). */
BFP_API uint64_t bfp_manifest_params(const bfp_manifest *m);

/* Model id: the 64-bit hash of the canonical manifest (FORMAT.md 2.2). */
BFP_API uint64_t bfp_manifest_id(const bfp_manifest *m);

/* ---- encoder ---------------------------------------------------------- */

typedef struct bfp_encode_opts {
	uint32_t frame_size;      /* max bytes per frame; 0 = default 1200 */
	uint64_t model_id;
	uint32_t base_version;
	uint32_t target_version;  /* must be > base_version for patches;
				     keyframes (BFP_ENC_F_KEYFRAME) need
				     base_version 0 */
	uint32_t first_index;     /* index of the first frame emitted */
	uint32_t frame_count;     /* written into every frame; 0 = not known
				     yet (streamed, FORMAT.md 2.5), or fix it
				     later with bfp_frame_set_index() (the
				     encoder writes it as given: a frame of
				     index frame_count or more is refused by
				     decoders until it is fixed) */
	uint32_t flags;           /* BFP_ENC_F_* */
	uint32_t sparse;          /* bfp_sparse_mode: how sparse frames get
				     their codes */
	void *zstd_workspace;     /* for BFP_ENC_F_ZSTD, see
				     bfp_zstd_workspace_size(); 8-byte
				     aligned, this encoder's alone */
	size_t zstd_workspace_size;
} bfp_encode_opts;

/* How sparse frames get their code parameters (bfp_encode_opts.sparse). */
typedef enum bfp_sparse_mode {
	/* the sparse frames of a range share one model: the first carries it
	 * (BFP_ENC_SPARSE_MODEL), the others refer to it (BFP_ENC_SPARSE_REF);
	 * a range too small for one gets BFP_ENC_SPARSE frames */
	BFP_SPARSE_SHARED = 0,
	/* every sparse frame carries its own codes (BFP_ENC_SPARSE) and
	 * decodes alone: for paths without repair, 2-5% more bytes */
	BFP_SPARSE_SELF_CONTAINED = 1,
} bfp_sparse_mode;

#define BFP_ENC_F_KEYFRAME 1u  /* emit keyframes (absolute values) only */
#define BFP_ENC_F_ZSTD 2u      /* keyframes may use byte planes + zstd */
#define BFP_ENC_F_NO_DENSE 4u  /* never choose the dense encoding (tests) */
#define BFP_ENC_F_SCALAR 8u    /* no SIMD paths (tests, comparisons) */
#define BFP_ENC_F_NO_BATCH 256u /* gather each frame's changes afresh,
				   not from those gathered for its model
				   (tests: the same bytes either way) */
#define BFP_ENC_F_STAGES 512u  /* count the time each stage of the encoder
				  takes, in the CPU's cycle counter ticks
				  (bfp_encoder_stages); the frames are the
				  same */
#define BFP_ENC_F_KEY_EXP 1024u /* keyframes, and keyframe-coded frames
				   of patches, may use BFP_ENC_KEY_EXP
				   (format 1.1) where it covers more than
				   KEY_RAW and KEY_ZSTD: for receivers built
				   for 1.1 (a 1.0 decoder rejects it) */
#define BFP_ENC_F_KEY_EXPM 2048u /* as BFP_ENC_F_KEY_EXP, with
				    BFP_ENC_KEY_EXPM (format 1.2) in place of
				    BFP_ENC_KEY_EXP: for receivers built for
				    1.2 */
#define BFP_ENC_F_KEY_HUF 4096u /* as BFP_ENC_F_KEY_EXP, with
				   BFP_ENC_KEY_HUF (format 1.3) in place of
				   BFP_ENC_KEY_EXP: a few bytes a frame
				   more than BFP_ENC_KEY_EXPM, coded and
				   decoded faster; for receivers built for
				   1.3 */

/* The encoder's stages (BFP_ENC_F_STAGES): the sums of their ticks over
 * the frames since bfp_encoder_init. Ticks are the time-stamp counter on
 * x86 and the virtual counter (cntvct_el0) on AArch64, both at a fixed
 * rate; elsewhere nothing is counted. */
enum bfp_stage {
	BFP_STAGE_GATHER = 0, /* listing a frame's changes in one pass over
				 base and target */
	BFP_STAGE_BATCH,      /* taking them from the changes gathered to
				 plan the model instead */
	BFP_STAGE_MODEL,      /* planning a model, with the gather of the
				 changes it is planned from */
	BFP_STAGE_PLAN,       /* each frame's plan of its codes */
	BFP_STAGE_CUT,        /* finding how many changes fit the frame */
	BFP_STAGE_WRITE,      /* writing the sparse payload (rANS part
				 included) */
	BFP_STAGE_OTHER,      /* dense and keyframe coverage and payloads */
	BFP_STAGE_HASH,       /* the target hash, header and CRC */
	BFP_STAGE_ALL,        /* all of bfp_encode_next */
	BFP_STAGES
};

/* Encoder state: BFP_ENCODER_SIZE bytes of opaque storage (about 1 MB,
 * whatever the model size) that only the library reads or writes. Place
 * it in static or heap memory, not on a small stack, and set it up with
 * bfp_encoder_init. It holds no pointers into itself: a set-up encoder
 * may be copied with memcpy (both copies then go on independently from
 * the same point). */
#define BFP_ENCODER_SIZE ((size_t)1048576)
typedef struct bfp_encoder {
	union {
		uint64_t u64;
		void *ptr;
		unsigned char bytes[8];
	} opaque_[BFP_ENCODER_SIZE / 8];
} bfp_encoder;

/* Set enc up to encode parameters [begin, end) of the model: base and
 * target point to element 0 of the full arrays of n_params words each
 * (base may be NULL with BFP_ENC_F_KEYFRAME); the encoder reads them, and
 * opts->zstd_workspace, until the range is done or it is reset, and
 * copies *opts. Frames never span beyond end, so call once per tensor to
 * keep frames within tensor boundaries. The ranges of one patch must
 * tile the model: where two tensors share a word (a tensor that ends at
 * an odd byte), start each range at the end of the one before, not at
 * the tensor's first word (two frames covering one word cannot both
 * verify).
 * Returns BFP_OK; BFP_E_ARG for NULL pointers, a frame size outside
 * BFP_FRAME_SIZE_MIN..MAX, versions that do not go up (a keyframe stream
 * needs base_version 0), unknown flags or sparse mode, or a missing or
 * misaligned zstd workspace with BFP_ENC_F_ZSTD; BFP_E_UNSUPPORTED for
 * BFP_ENC_F_ZSTD in a build without zstd; BFP_E_RANGE when begin > end or
 * end > n_params. After an error enc is not set up: every other call on
 * it fails with BFP_E_ARG until an init succeeds. */
BFP_API bfp_status bfp_encoder_init(bfp_encoder *enc, const bfp_encode_opts *opts,
			    const uint16_t *base, const uint16_t *target,
			    uint64_t n_params, uint64_t begin, uint64_t end);

/* Point a set-up encoder at another range (of the same or other arrays),
 * keeping its options and detected CPU features: cheaper than
 * bfp_encoder_init per tensor. Frames count from first_index again.
 * Returns BFP_OK; BFP_E_ARG for an encoder that is not set up or a
 * missing array, BFP_E_RANGE for a bad range; after an error the encoder
 * is unchanged. */
BFP_API bfp_status bfp_encoder_reset(bfp_encoder *enc, const uint16_t *base,
			     const uint16_t *target, uint64_t n_params,
			     uint64_t begin, uint64_t end, uint32_t first_index);

/* Function twin of BFP_FRAME_BOUND(). */
BFP_API size_t bfp_frame_bound(uint32_t frame_size);

/* Emit the next frame of the range into out (out_cap at least
 * bfp_frame_bound(opts.frame_size) bytes). Returns BFP_OK with *out_len
 * set, or BFP_DONE (nothing written) when the range is fully covered.
 * Canonical: the same inputs and options always produce the same bytes.
 * Errors: BFP_E_ARG (NULL pointers, an encoder that is not set up) and
 * BFP_E_SPACE (out_cap too small); the encoder is then unchanged and the
 * call may be repeated with a larger buffer. */
BFP_API bfp_status bfp_encode_next(bfp_encoder *enc, void *out, size_t out_cap,
			   size_t *out_len);

/* Frames emitted since the last init or reset (0 for an encoder that is
 * not set up). */
BFP_API uint32_t bfp_encoder_frames(const bfp_encoder *enc);

/* Parameters whose value changes, in the sparse and dense frames emitted
 * since the last init or reset (keyframes count none; 0 for an encoder
 * that is not set up). */
BFP_API uint64_t bfp_encoder_changed(const bfp_encoder *enc);

/* The stage counters of an encoder set up with BFP_ENC_F_STAGES, summed
 * since bfp_encoder_init (all 0 without the flag). */
typedef struct bfp_stage_counts {
	uint64_t ticks[BFP_STAGES]; /* ticks of each stage (enum bfp_stage) */
	uint64_t listed;            /* changes the gathers listed */
	uint64_t sized;             /* changes the cut sized (some more than
				       fit each frame) */
} bfp_stage_counts;

/* Copy enc's stage counters to *out. BFP_E_ARG for NULL pointers or an
 * encoder that is not set up (*out unchanged). */
BFP_API bfp_status bfp_encoder_stages(const bfp_encoder *enc, bfp_stage_counts *out);

/* Workspace bytes needed for zstd keyframes (0 if built without zstd). */
BFP_API size_t bfp_zstd_workspace_size(void);

/* ---- decoder ---------------------------------------------------------- */

typedef struct bfp_apply_opts {
	uint64_t model_id;       /* frames for another model are rejected */
	uint32_t base_version;   /* version the weights are at now; delta
				    frames must have this base version */
	uint32_t flags;          /* BFP_DEC_F_* */
	void *zstd_workspace;    /* for BFP_ENC_KEY_ZSTD frames; 8-byte
				    aligned, this decoder's alone */
	size_t zstd_workspace_size;
} bfp_apply_opts;

#define BFP_DEC_F_ANY_MODEL 1u   /* do not check model_id */
#define BFP_DEC_F_ANY_BASE 2u    /* do not check base_version */

/* bfp_decoder_init: no SIMD paths. A bit of its own, so that it in
 * bfp_apply_opts.flags is refused (BFP_E_ARG), not taken for
 * BFP_DEC_F_ANY_MODEL. */
#define BFP_DEC_F_SCALAR 256u

/* Decoder state: BFP_DECODER_SIZE bytes of opaque storage (about 0.6 MB,
 * whatever the model size) that only the library reads or writes: the
 * last frame's changes and the model that frames refer to. Place and copy
 * it as an encoder; set it up with bfp_decoder_init. */
#define BFP_DECODER_SIZE ((size_t)589824)
typedef struct bfp_decoder {
	union {
		uint64_t u64;
		void *ptr;
		unsigned char bytes[8];
	} opaque_[BFP_DECODER_SIZE / 8];
} bfp_decoder;

/* Set dec up; flags: BFP_DEC_F_SCALAR or 0. The decoder holds no model
 * and no changes. BFP_E_ARG for a NULL dec or other flags; after an error
 * dec is not set up (every other call on it fails with BFP_E_ARG). */
BFP_API bfp_status bfp_decoder_init(bfp_decoder *dec, uint32_t flags);

/* Validate a frame completely (header, CRC, model, base version, range
 * within [0, n_params), payload, target hash: FORMAT.md 2.4, in that
 * order) and only then write its target values into weights. hdr_out,
 * if not NULL, gets the frame's header on success. Applying the same
 * delta frame twice fails with BFP_E_HASH and changes nothing (unless the
 * frame changes nothing in its range: then it is at its target either
 * way). On success with a delta frame the decoder holds its changes
 * (bfp_decoder_changes), and after a frame that carries a model, that
 * model. On any error weights and the model the decoder holds are
 * unchanged, and it holds no changes. BFP_E_ARG also for a decoder that
 * is not set up and for unknown flags in opts. */
BFP_API bfp_status bfp_decode_apply(bfp_decoder *dec, const bfp_apply_opts *opts,
			    const void *frame, size_t frame_len,
			    uint16_t *weights, uint64_t n_params,
			    bfp_frame_header *hdr_out);

/* Everything bfp_decode_apply checks, the target hash included, for a
 * delta frame (sparse or dense; keyframes get BFP_E_UNSUPPORTED), but
 * nothing is written: the frame's changes stay in dec for
 * bfp_decoder_changes. Writing them later gives the frame's target values
 * as long as weights over the range are as they were here (a receiver
 * that prepares a patch before it commits). Errors as bfp_decode_apply. */
BFP_API bfp_status bfp_decode_verify(bfp_decoder *dec, const bfp_apply_opts *opts,
			     const void *frame, size_t frame_len,
			     const uint16_t *weights, uint64_t n_params,
			     bfp_frame_header *hdr_out);

/* The changes of the delta frame that the last bfp_decode_verify or
 * bfp_decode_apply on dec checked out: returns their number n, and sets
 * *pos to n offsets from the frame's first parameter (range_begin) and
 * *val to their n new values, in no particular order. The arrays live in
 * dec until its next decode call. 0 (and NULL pointers) after any other
 * outcome. pos or val may be NULL. */
BFP_API uint32_t bfp_decoder_changes(const bfp_decoder *dec, const uint32_t **pos,
				 const uint16_t **val);

/* Does weights already hold this frame's target values over its range?
 * (Crash recovery, duplicate detection.) After the header checks of
 * bfp_frame_parse (any model, any base) and the range check against
 * n_params, *at_target gets 1 or 0; on error it is unchanged. */
BFP_API bfp_status bfp_frame_check_target(const void *frame, size_t frame_len,
				  const uint16_t *weights, uint64_t n_params,
				  int *at_target);

/* Frames of BFP_ENC_SPARSE_REF are coded with the model (code parameters,
 * tables) that an earlier frame of BFP_ENC_SPARSE_MODEL of the same patch
 * carries (FORMAT.md 3.6). A decoder holds one model at a time; decoding
 * a frame that carries one loads it, and a frame of BFP_ENC_SPARSE_REF
 * whose model is not the one held is rejected with BFP_E_NO_MODEL.
 *
 * bfp_frame_model_index gives the index of that frame (for
 * BFP_ENC_SPARSE_MODEL the frame's own index; BFP_E_UNSUPPORTED for other
 * encodings), after the header checks of bfp_frame_parse; *index is
 * unchanged on error.
 *
 * bfp_decoder_load_model parses and checks a frame of
 * BFP_ENC_SPARSE_MODEL (header, CRC, model; BFP_E_ARG for another
 * encoding) and keeps its model in dec for the frames that refer to it.
 * On error dec keeps the model it held. */
BFP_API bfp_status bfp_frame_model_index(const void *frame, size_t frame_len,
				 uint32_t *index);
BFP_API bfp_status bfp_decoder_load_model(bfp_decoder *dec, const void *frame,
				  size_t frame_len);
/* For a receiver that holds a patch's frames by index: if frame is of
 * BFP_ENC_SPARSE_REF and dec does not hold its model, load it from
 * frames[model index] (lens[] their lengths, NULL where missing).
 * BFP_E_NO_MODEL when that frame is missing or is not the model's; BFP_OK
 * (nothing to do) for other encodings and for frames whose reference the
 * decoder rejects anyway. On error dec keeps the model it held. */
BFP_API bfp_status bfp_decoder_model_for(bfp_decoder *dec, const void *frame, size_t frame_len,
				 const uint8_t *const *frames, const uint32_t *lens,
				 size_t n_frames);

/* What a frame carries, read without the base weights (tools, reports). */
typedef struct bfp_frame_stats {
	uint32_t encoding;
	uint32_t range_len;
	uint32_t payload_len;
	uint32_t n_changes;    /* coded changes (keyframes: 0) */
	uint32_t model_bits;   /* sparse: class header bits (code parameters) */
	uint32_t position_bits; /* sparse: gap codes; dense: change flags */
	uint32_t value_bits;   /* signs, runs and magnitudes */
	/* sparse, per base-exponent class (FORMAT.md 3.3): changes, and bits
	 * of the class's count and header, its gaps, its values. The frame's
	 * own fields are model_bits less the classes' share. */
	uint32_t class_changes[BFP_CLASSES];
	uint32_t class_model_bits[BFP_CLASSES];
	uint32_t class_position_bits[BFP_CLASSES];
	uint32_t class_value_bits[BFP_CLASSES];
} bfp_frame_stats;

/* Parse a frame and its payload structure (not the values, which need the
 * base) and count what it carries into *st. Validates header, CRC and the
 * payload rules that do not need the base. dec (set up by
 * bfp_decoder_init) is scratch, and keeps the model of a frame that
 * carries one for the frames after it that refer to it, as decoding does;
 * the changes it holds for bfp_decoder_changes are kept. On error *st is
 * unspecified and dec keeps the model it held. */
BFP_API bfp_status bfp_frame_stats_get(bfp_decoder *dec, const void *frame,
			       size_t frame_len, bfp_frame_stats *st);

/* ---- value mapping (FORMAT.md 3.2), exposed for tools and tests ------- */

/* Order-preserving map of a BF16 bit pattern to an unsigned key: keys of
 * adjacent representable values differ by 1 (-0 and +0 are adjacent). */
static inline uint16_t bfp_key(uint16_t x)
{
	/* negative: every bit flipped; else the sign bit set */
	return (uint16_t)(x ^ (0x8000u | (0u - (unsigned)(x >> 15))));
}

static inline uint16_t bfp_unkey(uint16_t k)
{
	return (uint16_t)(k ^ (0x8000u | ((unsigned)(k >> 15) - 1u)));
}

/* Base-exponent context of a BF16 pattern (FORMAT.md 3.3). */
static inline unsigned bfp_class(uint16_t x)
{
	unsigned e = (x >> 7) & 0xFFu;
	return e <= BFP_CLASS_EXP0 ? 0u
	       : (e >= BFP_CLASS_EXP0 + 15u ? 15u : e - BFP_CLASS_EXP0);
}

#ifdef __cplusplus
}
#endif
#endif /* BFPATCH_H */
