/*
 * main.c: the bfpatch command-line tool. Subcommands: synth (trajectory),
 * diff, apply, info, demo (the README's main job), keygen (keygen.c). Every output file is
 * written through a temporary and a rename, so a failed command leaves
 * no output behind; errors go to stderr with a non-zero exit.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bfpatch.h"
#include "model.h"
#include "patch.h"
#include "report.h"
#include "synth.h"
#include "proto.h"
#include "auth.h"
#include "version.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include "cli.h"
#include "output.h"
#include "publish.h"

/* A command line without what it needs: the reason, then the usage. */
static int usage_error(const char *cmd, const char *usage, const char *why)
{
	fprintf(stderr, "bfpatch %s: %s\n%s", cmd, why, usage);
	return 2;
}

/* Two inputs cannot both be standard input; an output other than
 * standard output must not be an input (what refuse_same says). 0, or 2
 * after a message. */
static int check_io(const char *cmd, const char *out, const char *a, const char *what_a,
		    const char *b, const char *what_b)
{
	if (!strcmp(a, "-") && !strcmp(b, "-")) {
		fprintf(stderr, "bfpatch %s: only one input can be standard input ('-')\n", cmd);
		return 2;
	}
	if (out_is_stdout(out))
		return 0;
	if ((strcmp(a, "-") && what_a && refuse_same(cmd, out, a, what_a)) ||
	    (strcmp(b, "-") && what_b && refuse_same(cmd, out, b, what_b)))
		return 2;
	return 0;
}

static int print_command_json(const char *cmd, const patch *p, const char *out, double secs);
static void print_verbose(const char *cmd, const patch *p);
static void print_frames(FILE *f, const patch *p);

/* ---- diff ---- */

static const char diff_usage[] =
	"usage: bfpatch diff OLD NEW -o PATCH [options]\n"
	"Encode the change from OLD to NEW (safetensors or raw BF16 files, or sharded\n"
	"checkpoints: a directory with model.safetensors.index.json and its shards,\n"
	"or that index; the same tensor layout) as a patch of datagram-sized frames\n"
	"(docs/FORMAT.md; the sparse frames of each tensor chunk share one model,\n"
	"3.6). Where NEW's safetensors header (its __metadata__, say) or shard index\n"
	"differs from OLD's, the patch file carries NEW's (FORMAT.md 4.1), so apply\n"
	"reproduces NEW byte for byte. OLD or NEW may be - (standard input, read\n"
	"into memory).\n"
	"  -o, --output PATCH      patch file to write (atomically; not OLD or NEW;\n"
	"                          -: standard output, not a terminal)\n"
	"  -f, --force             replace PATCH if it exists (else refused)\n"
	"  -s, --frame-size BYTES  max frame size, 128..9000 (default 1200)\n"
	"  -b, --base-version N    version of OLD (default 0)\n"
	"  -t, --target-version N  version of NEW (default base + 1)\n"
	"  -k, --keyframe          absolute values only (bootstrap/resync)\n"
	"  -z, --zstd              keyframe-coded ranges (all of a --keyframe patch;\n"
	"                          a re-initialised tensor in a patch) may use zstd\n"
	"                          byte planes when smaller\n"
	"      --key-encoding E    keyframe-coded frames in huf (format 1.3's\n"
	"                          encoding 9, raw where smaller: the default with\n"
	"                          --keyframe), expm (1.2's encoding 8), exp (1.1's\n"
	"                          encoding 7), raw (1.0's encoding 3: the default\n"
	"                          otherwise, so a patch stays readable by 1.0\n"
	"                          receivers) or zstd (1.0's 3 and 4, as --zstd)\n"
	"      --self-contained    sparse frames that each decode alone (3.5), not\n"
	"                          sharing a model per tensor chunk: 2-5% more bytes\n"
	"  -j, --threads N         encoder threads (default: all CPUs)\n"
	"      --stages            print where the encoders' time went (their\n"
	"                          stage counters, summed over the threads)\n"
	"  -q, --quiet             no progress or summary on stderr\n"
	"  -v, --verbose           the summary, then the frames by encoding and the\n"
	"                          headers the patch carries\n"
	"      --json              the summary as one JSON object on stdout: what\n"
	"                          bfpatch info --json says of PATCH, with output\n"
	"                          and seconds (not with -o -)\n"
	"  -h, --help\n";

static int cmd_diff(int argc, char **argv)
{
	static const struct option lo[] = {
		{"output", required_argument, 0, 'o'}, {"frame-size", required_argument, 0, 's'},
		{"base-version", required_argument, 0, 'b'},
		{"target-version", required_argument, 0, 't'},
		{"keyframe", no_argument, 0, 'k'}, {"zstd", no_argument, 0, 'z'},
		{"key-encoding", required_argument, 0, 'Y'},
		{"self-contained", no_argument, 0, 'C'},
		{"threads", required_argument, 0, 'j'}, {"stages", no_argument, 0, 'S'},
		{"quiet", no_argument, 0, 'q'}, {"verbose", no_argument, 0, 'v'},
		{"force", no_argument, 0, 'f'}, {"json", no_argument, 0, 'J'},
		{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	const char *out = NULL;
	patch_opts po = {.frame_size = BFP_FRAME_SIZE_DEFAULT};
	patch_stages stages = {0};
	int have_target = 0, quiet = 0, verbose = 0, force = 0, json = 0, c;
	uint32_t th = 0;
	const char *key_enc = NULL; /* --key-encoding */
	while ((c = getopt_long(argc, argv, "o:s:b:t:kzj:qvfh", lo, NULL)) != -1) {
		switch (c) {
		case 'o': out = optarg; break;
		case 'f': force = 1; break;
		case 's':
			if (parse_u32(optarg, BFP_FRAME_SIZE_MIN, BFP_FRAME_SIZE_MAX, &po.frame_size))
				return bad_value("diff", "--frame-size", optarg);
			break;
		case 'b':
			if (parse_u32(optarg, 0, UINT32_MAX - 1, &po.base_version))
				return bad_value("diff", "--base-version", optarg);
			break;
		case 't':
			if (parse_u32(optarg, 1, UINT32_MAX, &po.target_version))
				return bad_value("diff", "--target-version", optarg);
			have_target = 1;
			break;
		case 'k': po.enc_flags |= BFP_ENC_F_KEYFRAME; break;
		case 'C': po.sparse = BFP_SPARSE_SELF_CONTAINED; break;
		case 'Y': key_enc = optarg; break;
		case 'z':
			if (!bfp_zstd_workspace_size())
				return die("diff", "--zstd: this build has no zstd support");
			po.enc_flags |= BFP_ENC_F_ZSTD;
			break;
		case 'j':
			if (parse_u32(optarg, 1, 256, &th))
				return bad_value("diff", "--threads", optarg);
			break;
		case 'S': po.stages = &stages; break;
		case 'q': quiet = 1, verbose = 0; break;
		case 'v': verbose = 1, quiet = 0; break;
		case 'J': json = 1; break;
		case 'h': fputs(diff_usage, stdout); return 0;
		default: fputs(diff_usage, stderr); return 2;
		}
	}
	if (argc - optind != 2)
		return usage_error("diff", diff_usage, "give OLD and NEW, nothing else");
	if (!out)
		return usage_error("diff", diff_usage, "-o PATCH is required");
	if (json && out_is_stdout(out))
		return usage_error("diff", diff_usage, "--json and -o - would share standard output");
	int rc = check_io("diff", out, argv[optind], "model", argv[optind + 1], "model");
	if (rc || (rc = out_check("diff", out, force, 1, NULL)))
		return rc;
	if (!have_target)
		po.target_version = po.base_version + 1;
	/* keyframe-coded frames (FORMAT.md 3.8-3.12): encoding 9 for
	 * keyframe patches unless asked otherwise */
	if (!key_enc)
		key_enc = po.enc_flags & BFP_ENC_F_KEYFRAME ? "huf" : "raw";
	if (!strcmp(key_enc, "huf"))
		po.enc_flags |= BFP_ENC_F_KEY_HUF;
	else if (!strcmp(key_enc, "expm"))
		po.enc_flags |= BFP_ENC_F_KEY_EXPM;
	else if (!strcmp(key_enc, "exp"))
		po.enc_flags |= BFP_ENC_F_KEY_EXP;
	else if (!strcmp(key_enc, "zstd") && bfp_zstd_workspace_size())
		po.enc_flags |= BFP_ENC_F_ZSTD;
	else if (strcmp(key_enc, "raw"))
		return bad_value("diff", "--key-encoding", key_enc);
	if (po.enc_flags & BFP_ENC_F_KEYFRAME)
		po.base_version = 0;
	else if (po.target_version <= po.base_version)
		return die("diff", "--target-version must be greater than --base-version");
	po.threads = (int)th;
	char err[ERRLEN] = "";
	model a, b;
	if (model_map(&a, argv[optind], err, sizeof(err)))
		return die("diff", err);
	if (model_map(&b, argv[optind + 1], err, sizeof(err))) {
		model_free(&a);
		return die("diff", err);
	}
	po.progress = !quiet && b.n_params > (64u << 20);
	if (b.n_params == 0) { /* a patch has at least one frame (FORMAT.md 4) */
		model_free(&a);
		model_free(&b);
		return die("diff", "the models have no parameters: nothing to patch");
	}
	patch p;
	double t0 = now_s();
	rc = patch_encode(&a, &b, &po, &p, err, sizeof(err));
	double t1 = now_s();
	if (rc == 0) {
		const void *bufs[1] = {p.buf};
		size_t lens[1] = {p.len};
		rc = out_write(out, force, NULL, bufs, lens, 1, err, sizeof(err));
		if (rc)
			patch_free(&p);
	}
	int jrc = 0; /* --json's exit status (its message printed) */
	if (rc == 0 && json)
		jrc = print_command_json("diff", &p, out, t1 - t0);
	else if (rc == 0 && !quiet)
		fprintf(stderr, "bfpatch diff: %llu parameters, %zu frames, %zu bytes "
			"(%.1fx smaller than dense BF16), encoded in %.3f s\n",
			(unsigned long long)b.n_params, p.n, p.len,
			p.len ? (double)b.n_params * 2 / (double)p.len : 0.0, t1 - t0);
	if (rc == 0 && verbose)
		print_verbose("diff", &p);
	if (rc == 0 && po.stages) /* the rate from the wall time on one thread only */
		patch_stages_print(stderr, "bfpatch diff: stages: ", &stages,
				   po.threads == 1 ? t1 - t0 : 0);
	if (rc == 0)
		patch_free(&p);
	model_free(&a);
	model_free(&b);
	return rc ? die("diff", err) : jrc;
}

/* ---- apply ---- */

static const char apply_usage[] =
	"usage: bfpatch apply BASE PATCH -o OUT [options]\n"
	"Apply PATCH to BASE and write the result to OUT (atomically). Every frame\n"
	"is checked (CRC, model, base version, range) and every range's target\n"
	"hash verified before OUT is written; on any error OUT is not created.\n"
	"The safetensors headers (and shard index) PATCH carries replace BASE's.\n"
	"A sharded BASE (a directory with model.safetensors.index.json, or that\n"
	"index) gives a directory OUT: every shard and the index, each written to\n"
	"a temporary in OUT and renamed once all are written.\n"
	"An existing OUT is replaced only with --force, or when it is BASE (the\n"
	"in-place update: replaced once the new version is verified and\n"
	"written); never PATCH. BASE or PATCH may be - (standard input).\n"
	"  -o, --output OUT   file to write (-: standard output, not a terminal)\n"
	"  -f, --force        replace OUT if it exists (else refused)\n"
	"  -j, --threads N    decoder threads (default: all CPUs)\n"
	"  -q, --quiet        no progress or summary on stderr\n"
	"  -v, --verbose      the summary, then the frames by encoding and the\n"
	"                     headers the patch carries\n"
	"      --json         the summary as one JSON object on stdout: what\n"
	"                     bfpatch info --json says of PATCH, with output and\n"
	"                     seconds (not with -o -)\n"
	"  -h, --help\n";

static int cmd_apply(int argc, char **argv)
{
	static const struct option lo[] = {
		{"output", required_argument, 0, 'o'}, {"threads", required_argument, 0, 'j'},
		{"quiet", no_argument, 0, 'q'}, {"verbose", no_argument, 0, 'v'},
		{"force", no_argument, 0, 'f'}, {"json", no_argument, 0, 'J'},
		{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	const char *out = NULL;
	int quiet = 0, verbose = 0, force = 0, json = 0, c;
	uint32_t th = 0;
	while ((c = getopt_long(argc, argv, "o:j:qvfh", lo, NULL)) != -1) {
		switch (c) {
		case 'o': out = optarg; break;
		case 'f': force = 1; break;
		case 'j':
			if (parse_u32(optarg, 1, 256, &th))
				return bad_value("apply", "--threads", optarg);
			break;
		case 'q': quiet = 1, verbose = 0; break;
		case 'v': verbose = 1, quiet = 0; break;
		case 'J': json = 1; break;
		case 'h': fputs(apply_usage, stdout); return 0;
		default: fputs(apply_usage, stderr); return 2;
		}
	}
	if (argc - optind != 2)
		return usage_error("apply", apply_usage, "give BASE and PATCH, nothing else");
	if (!out)
		return usage_error("apply", apply_usage, "-o OUT is required");
	if (json && out_is_stdout(out))
		return usage_error("apply", apply_usage, "--json and -o - would share standard output");
	const char *base = argv[optind];
	int rc = check_io("apply", out, base, NULL, argv[optind + 1], "patch");
	if (rc || (rc = out_check("apply", out, force, 1, strcmp(base, "-") ? base : NULL)))
		return rc;
	/* a sharded BASE: OUT is a directory, BASE's own for the in-place update */
	char base_dir[PATH_MAX];
	const int sharded = model_path_sharded(base);
	struct stat osb;
	snprintf(base_dir, sizeof(base_dir), "%s", base);
	if (sharded && stat(base, &osb) == 0 && !S_ISDIR(osb.st_mode)) { /* the index */
		char *slash = strrchr(base_dir, '/');
		snprintf(slash ? slash : base_dir, sizeof(base_dir) - (size_t)(slash ? slash - base_dir : 0),
			 "%s", slash ? "" : ".");
	}
	if (sharded && out_is_stdout(out))
		return usage_error("apply", apply_usage, "a sharded BASE gives a directory, which "
				   "standard output cannot hold");
	if (sharded && !force && stat(out, &osb) == 0 && !same_file(out, base_dir)) {
		fprintf(stderr, "bfpatch apply: %s exists: give --force to replace its files\n", out);
		return 1;
	}
	char err[ERRLEN] = "";
	model m;
	patch p;
	if (model_load(&m, argv[optind], err, sizeof(err)))
		return die("apply", err);
	if (!m.safetensors && model_named_safetensors(out)) {
		/* OUT keeps BASE's format: raw BF16 under a safetensors name
		 * would not read back */
		fprintf(stderr, "bfpatch apply: %s is raw BF16, so OUT is written raw too; "
			"-o %s names a safetensors file: give another name\n", argv[optind], out);
		model_free(&m);
		return 2;
	}
	if (patch_read(argv[optind + 1], &p, err, sizeof(err))) {
		model_free(&m);
		return die("apply", err);
	}
	double t0 = now_s();
	rc = patch_apply(&p, m.params, m.n_params, m.model_id, (int)th,
			 !quiet && m.n_params > (64u << 20), err, sizeof(err));
	if (rc == 0) /* the headers PATCH carries, checked before anything is written */
		rc = patch_apply_records(&p, &m, err, sizeof(err));
	double t1 = now_s();
	if (rc == 0 && m.n_files) {
		rc = model_save_dir(&m, out, force, base_dir, err, sizeof(err));
	} else if (rc == 0) { /* what model_save writes */
		const void *bufs[2] = {m.header, m.params};
		size_t lens[2] = {m.header_len, (size_t)m.data_bytes};
		const int st = m.safetensors;
		rc = out_write(out, force, strcmp(base, "-") ? base : NULL, bufs + !st, lens + !st,
			       st ? 2 : 1, err, sizeof(err));
	}
	int jrc = 0; /* --json's exit status (its message printed) */
	if (rc == 0 && json)
		jrc = print_command_json("apply", &p, out, t1 - t0);
	else if (rc == 0 && !quiet)
		fprintf(stderr, "bfpatch apply: %zu frames applied and verified in %.3f s, wrote %s\n",
			p.n, t1 - t0, out_name(out));
	if (rc == 0 && verbose)
		print_verbose("apply", &p);
	patch_free(&p);
	model_free(&m);
	return rc ? die("apply", err) : jrc;
}

/* ---- info ---- */

static const char info_usage[] =
	"usage: bfpatch info PATCH [--json]\n"
	"Print what a patch carries: parameters, changed parameters, frames per\n"
	"encoding, bytes, bits per changed parameter, ratio to dense BF16, the\n"
	"sparse frames' bits per change by base-exponent class, and the\n"
	"safetensors headers (and shard index) the file carries for NEW, with\n"
	"their lengths (FORMAT.md 4.1). PATCH may be - (standard input).\n"
	"      --json     one JSON object on stdout\n"
	"  -q, --quiet    print nothing: check PATCH only (exit status 0: every\n"
	"                 frame and record is well formed, FORMAT.md 2.4 and 4)\n"
	"  -v, --verbose  the summary, then a line per frame: index, encoding,\n"
	"                 parameter range, bytes, changes\n"
	"  -h, --help\n";

/* What `bfpatch info` says of a patch, and diff --json and apply --json
 * of the patch they wrote or applied. */
typedef struct patch_summary {
	bfp_frame_header h0;
	uint64_t params, changed, key_params;
	uint64_t by_enc[BFP_ENC_LAST + 1], model_bits, pos_bits, val_bits;
	/* sparse frames, per base-exponent class: changes, and bits of its
	 * counts and headers, positions and values */
	uint64_t cls[BFP_CLASSES][4];
	uint64_t sparse, with_model; /* sparse frames; those carrying a model */
	size_t frames, bytes;
	const patch_record *rec;     /* its header records (FORMAT.md 4.1) */
	size_t n_rec;
	double bpc, ratio;
} patch_summary;

/* Sum p's frame statistics into *S; 0, or -1 with a message in err. */
static int summarize(const patch *p, const char *name, patch_summary *S, char *err,
		     size_t errlen)
{
	memset(S, 0, sizeof(*S));
	bfp_frame_parse(p->buf, p->off[1], &S->h0);
	bfp_decoder *dec = malloc(sizeof(*dec));
	if (!dec)
		return set_err(err, errlen, "out of memory");
	bfp_decoder_init(dec, 0);
	for (size_t i = 0; i < p->n; i++) {
		bfp_frame_stats st;
		bfp_status s = bfp_frame_stats_get(dec, p->buf + p->off[i], p->off[i + 1] - p->off[i],
						   &st);
		if (s != BFP_OK) {
			free(dec);
			return set_err(err, errlen, "%s: frame %zu: %s", name, i, bfp_status_str(s));
		}
		S->params += st.range_len;
		S->changed += st.n_changes;
		S->by_enc[st.encoding]++;
		if (!bfp_encoding_is_delta(st.encoding))
			S->key_params += st.range_len;
		S->model_bits += st.model_bits;
		S->pos_bits += st.position_bits;
		S->val_bits += st.value_bits;
		for (unsigned k = 0; k < BFP_CLASSES; k++) {
			S->cls[k][0] += st.class_changes[k];
			S->cls[k][1] += st.class_model_bits[k];
			S->cls[k][2] += st.class_position_bits[k];
			S->cls[k][3] += st.class_value_bits[k];
		}
	}
	free(dec);
	S->with_model = S->by_enc[BFP_ENC_SPARSE_MODEL];
	for (unsigned e = 0; e <= BFP_ENC_LAST; e++)
		S->sparse += bfp_encoding_is_sparse(e) ? S->by_enc[e] : 0;
	S->frames = p->n;
	S->bytes = p->len;
	S->rec = p->rec;
	S->n_rec = p->n_rec;
	S->bpc = S->changed ? (double)p->len * 8 / (double)S->changed : 0;
	S->ratio = p->len ? (double)S->params * 2 / (double)p->len : 0;
	return 0;
}

/* The summary as info --json prints it; NULL when out of memory. */
static json_t *summary_json(const patch_summary *S)
{
	json_t *o = json_object();
	char mid[17];
	snprintf(mid, sizeof(mid), "%016llx", (unsigned long long)S->h0.model_id);
	json_object_set_new(o, "model_id", json_string(mid));
	json_object_set_new(o, "base_version", json_integer(S->h0.base_version));
	json_object_set_new(o, "target_version", json_integer(S->h0.target_version));
	json_object_set_new(o, "params", json_integer((json_int_t)S->params));
	json_object_set_new(o, "changed", json_integer((json_int_t)S->changed));
	json_object_set_new(o, "keyframe_params", json_integer((json_int_t)S->key_params));
	json_object_set_new(o, "frames", json_integer((json_int_t)S->frames));
	json_object_set_new(o, "bytes", json_integer((json_int_t)S->bytes));
	json_object_set_new(o, "header_bytes",
			    json_integer((json_int_t)(S->frames * BFP_HEADER_SIZE)));
	json_object_set_new(o, "model_bits", json_integer((json_int_t)S->model_bits));
	json_object_set_new(o, "position_bits", json_integer((json_int_t)S->pos_bits));
	json_object_set_new(o, "value_bits", json_integer((json_int_t)S->val_bits));
	json_object_set_new(o, "bits_per_changed", json_real(S->bpc));
	json_object_set_new(o, "ratio_to_dense", json_real(S->ratio));
	json_t *fe = json_object();
	json_object_set_new(fe, "sparse", json_integer((json_int_t)S->sparse));
	json_object_set_new(fe, "sparse_with_model", json_integer((json_int_t)S->with_model));
	json_object_set_new(fe, "dense", json_integer((json_int_t)S->by_enc[BFP_ENC_DENSE]));
	json_object_set_new(fe, "keyframe", json_integer((json_int_t)S->by_enc[BFP_ENC_KEY_RAW]));
	json_object_set_new(fe, "keyframe_zstd",
			    json_integer((json_int_t)S->by_enc[BFP_ENC_KEY_ZSTD]));
	json_object_set_new(fe, "keyframe_exp", json_integer((json_int_t)S->by_enc[BFP_ENC_KEY_EXP]));
	json_object_set_new(fe, "keyframe_expm",
			    json_integer((json_int_t)S->by_enc[BFP_ENC_KEY_EXPM]));
	json_object_set_new(fe, "keyframe_huf", json_integer((json_int_t)S->by_enc[BFP_ENC_KEY_HUF]));
	json_object_set_new(o, "frames_by_encoding", fe);
	json_t *ca = json_array();
	for (unsigned k = 0; k < BFP_CLASSES; k++) {
		json_t *x = json_object();
		json_object_set_new(x, "class", json_integer(k));
		json_object_set_new(x, "changes", json_integer((json_int_t)S->cls[k][0]));
		json_object_set_new(x, "model_bits", json_integer((json_int_t)S->cls[k][1]));
		json_object_set_new(x, "position_bits", json_integer((json_int_t)S->cls[k][2]));
		json_object_set_new(x, "value_bits", json_integer((json_int_t)S->cls[k][3]));
		json_array_append_new(ca, x);
	}
	json_object_set_new(o, "sparse_classes", ca);
	/* the safetensors headers (and shard index) the patch file carries */
	json_t *hr = json_array();
	for (size_t i = 0; i < S->n_rec; i++) {
		json_t *x = json_object();
		json_object_set_new(x, "kind", json_string(S->rec[i].kind == PATCH_REC_HEADER
								   ? "safetensors_header"
								   : "shard_index"));
		json_object_set_new(x, "file", json_integer(S->rec[i].file));
		json_object_set_new(x, "files", json_integer(S->rec[i].files));
		json_object_set_new(x, "bytes", json_integer((json_int_t)S->rec[i].len));
		json_array_append_new(hr, x);
	}
	json_object_set_new(o, "header_records", hr);
	return o;
}

/* o on stdout as one JSON object (and o released); 0, or -1 when out of
 * memory (the write itself is checked at exit, in main). */
static int print_json(json_t *o)
{
	char *s = o ? json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6))
		    : NULL;
	if (s)
		puts(s);
	free(s);
	json_decref(o);
	return s ? 0 : -1;
}

/* diff --json, apply --json: info's object for patch p, with what the
 * command did: the output it wrote and the seconds it took. */
static int print_command_json(const char *cmd, const patch *p, const char *out, double secs)
{
	char err[ERRLEN];
	patch_summary S;
	if (summarize(p, "the patch", &S, err, sizeof(err)))
		return die(cmd, err);
	json_t *o = summary_json(&S);
	if (o) {
		json_object_set_new(o, "output", json_string(out));
		json_object_set_new(o, "seconds", json_real(secs));
	}
	return print_json(o) ? die(cmd, "out of memory") : 0;
}

static int cmd_info(int argc, char **argv)
{
	static const struct option lo[] = {
		{"json", no_argument, 0, 'J'}, {"quiet", no_argument, 0, 'q'},
		{"verbose", no_argument, 0, 'v'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	int json = 0, verbosity = 1, c;
	while ((c = getopt_long(argc, argv, "qvh", lo, NULL)) != -1) {
		switch (c) {
		case 'J': json = 1; break;
		case 'q': verbosity = 0; break;
		case 'v': verbosity = 2; break;
		case 'h': fputs(info_usage, stdout); return 0;
		default: fputs(info_usage, stderr); return 2;
		}
	}
	if (argc - optind != 1)
		return usage_error("info", info_usage, "give one PATCH");
	char err[ERRLEN] = "";
	patch p;
	patch_summary S;
	if (patch_read(argv[optind], &p, err, sizeof(err)))
		return die("info", err);
	const int bad = summarize(&p, argv[optind], &S, err, sizeof(err));
	if (bad) {
		patch_free(&p);
		return die("info", err);
	}
	if (!verbosity) {
		patch_free(&p);
		return 0;
	}
	if (json) {
		const int jrc = print_json(summary_json(&S));
		patch_free(&p);
		return jrc ? die("info", "out of memory") : 0;
	}
	printf("model id          %016llx\n", (unsigned long long)S.h0.model_id);
	printf("versions          %u -> %u\n", S.h0.base_version, S.h0.target_version);
	printf("parameters        %llu\n", (unsigned long long)S.params);
	printf("changed           %llu (%.3f%%)\n", (unsigned long long)S.changed,
	       S.params ? 100.0 * (double)S.changed / (double)S.params : 0.0);
	printf("keyframe params   %llu\n", (unsigned long long)S.key_params);
	printf("frames            %zu (sparse %llu, dense %llu, keyframe %llu, keyframe-zstd %llu, "
	       "keyframe-exp %llu, keyframe-expm %llu, keyframe-huf %llu)\n",
	       S.frames, (unsigned long long)S.sparse, (unsigned long long)S.by_enc[BFP_ENC_DENSE],
	       (unsigned long long)S.by_enc[BFP_ENC_KEY_RAW],
	       (unsigned long long)S.by_enc[BFP_ENC_KEY_ZSTD],
	       (unsigned long long)S.by_enc[BFP_ENC_KEY_EXP],
	       (unsigned long long)S.by_enc[BFP_ENC_KEY_EXPM],
	       (unsigned long long)S.by_enc[BFP_ENC_KEY_HUF]);
	if (S.with_model)
		printf("                  %llu sparse frames carry the model of the frames "
		       "after them (FORMAT.md 3.6)\n",
		       (unsigned long long)S.with_model);
	printf("bytes             %zu (headers %zu, code parameters %llu, positions %llu, values %llu)\n",
	       S.bytes, S.frames * BFP_HEADER_SIZE, (unsigned long long)(S.model_bits / 8),
	       (unsigned long long)(S.pos_bits / 8), (unsigned long long)(S.val_bits / 8));
	printf("bits per changed  %.3f\n", S.bpc);
	printf("ratio to dense    %.1fx\n", S.ratio);
	if (!S.n_rec)
		printf("headers           none carried (the base's stay)\n");
	for (size_t i = 0; i < S.n_rec; i++) {
		if (S.rec[i].kind == PATCH_REC_HEADER)
			printf("%-18ssafetensors header of file %u of %u, %zu bytes\n",
			       i ? "" : "headers", S.rec[i].file, S.rec[i].files, S.rec[i].len);
		else
			printf("%-18sshard index, %zu bytes\n", i ? "" : "headers", S.rec[i].len);
	}
	if (S.sparse)
		printf("sparse frames by base-exponent class (FORMAT.md 3.3): bits per change,\n"
		       "and bytes of the class's counts and headers in all frames:\n"
		       "  class   changes  positions   values  count+header\n");
	for (unsigned k = 0; k < BFP_CLASSES && S.sparse; k++)
		if (S.cls[k][0])
			printf("  %5u %9llu %10.3f %8.3f %11llu B\n", k,
			       (unsigned long long)S.cls[k][0],
			       (double)S.cls[k][2] / (double)S.cls[k][0],
			       (double)S.cls[k][3] / (double)S.cls[k][0],
			       (unsigned long long)(S.cls[k][1] / 8));
	if (verbosity > 1)
		print_frames(stdout, &p);
	patch_free(&p);
	return 0;
}

/* -v: a line per frame of p: what bfpatch info -v adds to the summary. */
static void print_frames(FILE *f, const patch *p)
{
	static const char *const enc[BFP_ENC_LAST + 1] = {
		"?", "sparse", "dense", "keyframe", "keyframe-zstd",
		"sparse+model", "sparse/model", "keyframe-exp", "keyframe-expm", "keyframe-huf"};
	bfp_decoder *dec = malloc(sizeof(*dec));
	if (!dec)
		return;
	bfp_decoder_init(dec, 0);
	fprintf(f, "%8s %-14s %14s %10s %6s %8s\n", "frame", "encoding", "first param",
		"params", "bytes", "changes");
	for (size_t i = 0; i < p->n; i++) {
		bfp_frame_stats st;
		if (bfp_frame_stats_get(dec, p->buf + p->off[i], p->off[i + 1] - p->off[i], &st) !=
		    BFP_OK)
			break; /* summarize() checked every frame */
		bfp_frame_header h;
		bfp_frame_parse(p->buf + p->off[i], p->off[i + 1] - p->off[i], &h);
		fprintf(f, "%8zu %-14s %14llu %10u %6zu %8u\n", i,
			st.encoding <= BFP_ENC_LAST ? enc[st.encoding] : "?",
			(unsigned long long)h.range_begin, h.range_len, p->off[i + 1] - p->off[i],
			st.n_changes);
	}
	free(dec);
}

/* diff -v, apply -v: the frames by encoding and the headers p carries. */
static void print_verbose(const char *cmd, const patch *p)
{
	char err[ERRLEN];
	patch_summary S;
	if (summarize(p, "patch", &S, err, sizeof(err))) {
		fprintf(stderr, "bfpatch %s: %s\n", cmd, err);
		return;
	}
	fprintf(stderr, "bfpatch %s: frames: sparse %llu (%llu carry a model), dense %llu, "
		"keyframe %llu, keyframe-zstd %llu, keyframe-exp %llu, keyframe-expm %llu, "
		"keyframe-huf %llu; %llu of %llu parameters "
		"changed, %.3f bits each\n", cmd, (unsigned long long)S.sparse,
		(unsigned long long)S.with_model, (unsigned long long)S.by_enc[BFP_ENC_DENSE],
		(unsigned long long)S.by_enc[BFP_ENC_KEY_RAW],
		(unsigned long long)S.by_enc[BFP_ENC_KEY_ZSTD],
		(unsigned long long)S.by_enc[BFP_ENC_KEY_EXP],
		(unsigned long long)S.by_enc[BFP_ENC_KEY_EXPM],
		(unsigned long long)S.by_enc[BFP_ENC_KEY_HUF], (unsigned long long)S.changed,
		(unsigned long long)S.params, S.bpc);
	fprintf(stderr, "bfpatch %s: headers carried: %zu (FORMAT.md 4.1)\n", cmd, S.n_rec);
}

/* ---- synth ---- */

static const char synth_usage[] =
	"usage: bfpatch synth -o DIR [options]\n"
	"Write a deterministic RL-like trajectory of safetensors checkpoints\n"
	"DIR/step-0000.safetensors .. step-NNNN.safetensors (BF16 casts of FP32\n"
	"master weights trained with Adam).\n"
	"  -o, --output DIR     directory (created if missing; not -: a directory\n"
	"                       cannot go to standard output)\n"
	"  -f, --force          replace step files of this run that DIR holds\n"
	"                       (else refused; later steps, another run's, are\n"
	"                       refused either way)\n"
	"  -p, --params N       parameter count, rounded down to the shape's\n"
	"                       (default 4M; k/M/G ok; at least 4096): the width\n"
	"                       is a multiple of 64, so models come in steps of\n"
	"                       279k (the least), 1.1M, 2.4M, 4.3M, 6.7M, ...\n"
	"  -n, --steps N        optimizer steps after step 0 (default 5)\n"
	"  -l, --lr X           learning rate (default 1e-6)\n"
	"  -g, --ongrid         master starts on the BF16 grid (RL from a BF16\n"
	"                       checkpoint); default: off-grid FP32 master\n"
	"  -S, --seed N         seed (default 1)\n"
	"  -j, --threads N\n"
	"  -q, --quiet          no progress (a line per step written) on stderr\n"
	"  -v, --verbose        also how many parameters each step changed\n"
	"  -h, --help\n";

static int parse_lr(const char *s, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || *end || !(v > 0) || v > 1)
		return -1;
	*out = v;
	return 0;
}

/* dir holds steps past `last` (another run's): the trajectory this run
 * writes would end in them. */
static int stale_steps(const char *cmd, const char *dir, uint32_t last)
{
	uint32_t first, hi;
	if (!steps_scan(dir, last + 1, &first, &hi))
		return 0;
	fprintf(stderr, "bfpatch %s: %s already holds step-%04u.safetensors, past this run's "
		"last step (%u): those are another run's; remove them or write to another "
		"directory\n", cmd, dir, first, last);
	return 1;
}

static int cmd_synth(int argc, char **argv)
{
	static const struct option lo[] = {
		{"output", required_argument, 0, 'o'}, {"params", required_argument, 0, 'p'},
		{"steps", required_argument, 0, 'n'}, {"lr", required_argument, 0, 'l'},
		{"ongrid", no_argument, 0, 'g'}, {"seed", required_argument, 0, 'S'},
		{"threads", required_argument, 0, 'j'}, {"force", no_argument, 0, 'f'},
		{"quiet", no_argument, 0, 'q'}, {"verbose", no_argument, 0, 'v'},
		{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	synth_opts so = {.params = 4000000, .lr = 1e-6, .seed = 1};
	const char *dir = NULL;
	uint32_t steps = 5, th = 0;
	int c, force = 0, verbosity = 1;
	while ((c = getopt_long(argc, argv, "o:p:n:l:gS:j:fqvh", lo, NULL)) != -1) {
		switch (c) {
		case 'o': dir = optarg; break;
		case 'f': force = 1; break;
		case 'q': verbosity = 0; break;
		case 'v': verbosity = 2; break;
		case 'p':
			if (parse_u64(optarg, 1ull << 34, &so.params) || so.params < 4096) {
				fprintf(stderr, "bfpatch synth: invalid value '%s' for --params "
					"(4096 to 2^34)\n", optarg);
				return 2;
			}
			break;
		case 'n':
			if (parse_u32(optarg, 0, 100000, &steps))
				return bad_value("synth", "--steps", optarg);
			break;
		case 'l':
			if (parse_lr(optarg, &so.lr))
				return bad_value("synth", "--lr", optarg);
			break;
		case 'g': so.ongrid = 1; break;
		case 'S':
			if (parse_u64(optarg, UINT64_MAX, &so.seed))
				return bad_value("synth", "--seed", optarg);
			break;
		case 'j':
			if (parse_u32(optarg, 1, 64, &th))
				return bad_value("synth", "--threads", optarg);
			break;
		case 'h': fputs(synth_usage, stdout); return 0;
		default: fputs(synth_usage, stderr); return 2;
		}
	}
	if (optind != argc)
		return usage_error("synth", synth_usage, "unexpected argument (DIR goes with -o)");
	if (!dir)
		return usage_error("synth", synth_usage, "-o DIR is required");
	if (out_is_stdout(dir))
		return usage_error("synth", synth_usage, "-o -: synth writes a directory of "
				   "checkpoints, which standard output cannot hold");
	so.threads = (int)th;
	if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
		char e[ERRLEN];
		snprintf(e, sizeof(e), "%s: %s", dir, strerror(errno));
		return die("synth", e);
	}
	if (stale_steps("synth", dir, steps))
		return 2;
	uint32_t lo_step, hi_step;
	if (!force && steps_scan(dir, 0, &lo_step, &hi_step)) {
		fprintf(stderr, "bfpatch synth: %s already holds step-%04u.safetensors: give "
			"--force to replace this run's steps\n", dir, lo_step);
		return 1;
	}
	char err[ERRLEN] = "";
	model bf;
	synth *s = synth_new(&so, &bf, err, sizeof(err));
	if (!s)
		return die("synth", err);
	int rc = 0;
	/* -v: the parameters each step changed, against a copy of the last */
	uint16_t *prev = verbosity > 1 ? malloc((size_t)bf.n_params * 2) : NULL;
	if (verbosity > 1 && !prev)
		rc = set_err(err, sizeof(err), "out of memory");
	for (uint32_t k = 0; k <= steps && rc == 0; k++) {
		if (prev)
			memcpy(prev, bf.params, (size_t)bf.n_params * 2);
		if (k)
			synth_step(s, &bf);
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/step-%04u.safetensors", dir, k);
		const void *bufs[2] = {bf.header, bf.params};
		size_t lens[2] = {bf.header_len, (size_t)bf.data_bytes};
		rc = out_write(path, force, NULL, bufs, lens, 2, err, sizeof(err));
		if (rc == 0 && verbosity)
			fprintf(stderr, "bfpatch synth: wrote %s (%llu parameters)\n", path,
				(unsigned long long)bf.n_params);
		if (rc == 0 && prev && k) {
			uint64_t changed = 0;
			for (uint64_t i = 0; i < bf.n_params; i++)
				changed += prev[i] != bf.params[i];
			fprintf(stderr, "bfpatch synth: step %u changed %llu parameters (%.3f%%)\n",
				k, (unsigned long long)changed,
				100.0 * (double)changed / (double)bf.n_params);
		}
	}
	free(prev);
	synth_free(s);
	model_free(&bf);
	return rc ? die("synth", err) : 0;
}

/* ---- demo: the README's main job ---- */

/* ---- pcap: a patch as Ethernet/IPv4/UDP packets ---- */

static const char pcap_usage[] =
	"usage: bfpatch pcap PATCH -o FRAMES.pcap --dst ADDR:PORT [options]\n"
	"Write a patch's frames as Ethernet/IPv4/UDP packets (one frame per\n"
	"datagram) to a pcap file, for replay through DPDK's net_pcap.\n"
	"  -o, --output FILE      pcap file to write (atomically; -: standard\n"
	"                         output, not a terminal)\n"
	"  -f, --force            replace FILE if it exists (else refused)\n"
	"  -d, --dst ADDR:PORT    destination (a relay's data port)\n"
	"  -s, --src ADDR:PORT    source (default 198.18.0.100:7399)\n"
	"      --dst-mac MAC      (default 02:00:00:00:00:01)\n"
	"      --src-mac MAC      (default 02:00:00:00:00:64)\n"
	"  -A, --key FILE         sign each frame with this key, as a publisher\n"
	"                         with --key does (docs/SECURITY.md): the\n"
	"                         trailer adds 40 bytes to each datagram\n"
	"      --run HEX          bind the signed frames to this publisher run\n"
	"                         (16 hex digits; default: a new random one)\n"
	"  -q, --quiet            no summary on stderr\n"
	"  -v, --verbose          also a line per packet: frame, versions, range\n"
	"  -h, --help\n";

static void put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static int cmd_pcap(int argc, char **argv)
{
	static const struct option lo[] = {
		{"output", required_argument, 0, 'o'}, {"dst", required_argument, 0, 'd'},
		{"src", required_argument, 0, 's'}, {"dst-mac", required_argument, 0, 'M'},
		{"src-mac", required_argument, 0, 'S'}, {"key", required_argument, 0, 'A'},
		{"force", no_argument, 0, 'f'}, {"run", required_argument, 0, 'R'},
		{"quiet", no_argument, 0, 'q'}, {"verbose", no_argument, 0, 'v'},
		{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	static rp_auth auth;
	uint64_t run = 0;
	const char *out = NULL, *key_path = NULL;
	int force = 0, verbosity = 1;
	uint32_t sip = 0xC6120064u, dip = 0;
	uint16_t sport = 7399, dport = 0;
	uint8_t smac[6] = {2, 0, 0, 0, 0, 0x64}, dmac[6] = {2, 0, 0, 0, 0, 1};
	int c;
	while ((c = getopt_long(argc, argv, "o:d:s:A:fqvh", lo, NULL)) != -1) {
		switch (c) {
		case 'o': out = optarg; break;
		case 'f': force = 1; break;
		case 'q': verbosity = 0; break;
		case 'v': verbosity = 2; break;
		case 'A': {
			char kerr[512] = "cannot initialise libsodium";
			key_path = optarg;
			if (rp_auth_init() || rp_auth_load(&auth, optarg, kerr, sizeof(kerr))) {
				fprintf(stderr, "bfpatch pcap: %s\n", kerr);
				return 1;
			}
			break;
		}
		case 'R': {
			char *end;
			errno = 0;
			run = strtoull(optarg, &end, 16);
			if (errno || *end || !*optarg || strlen(optarg) > 16 || !run)
				return bad_value("pcap", "--run (1 to 16 hex digits, not 0)", optarg);
			break;
		}
		case 'd':
			if (rp_parse_hostport(optarg, &dip, &dport, NULL))
				return bad_value("pcap", "--dst", optarg);
			break;
		case 's':
			if (rp_parse_hostport(optarg, &sip, &sport, NULL))
				return bad_value("pcap", "--src", optarg);
			break;
		case 'M':
			if (rp_parse_mac(optarg, dmac))
				return bad_value("pcap", "--dst-mac", optarg);
			break;
		case 'S':
			if (rp_parse_mac(optarg, smac))
				return bad_value("pcap", "--src-mac", optarg);
			break;
		case 'h': fputs(pcap_usage, stdout); return 0;
		default: fputs(pcap_usage, stderr); return 2;
		}
	}
	if (argc - optind != 1)
		return usage_error("pcap", pcap_usage, "give one PATCH");
	if (!out)
		return usage_error("pcap", pcap_usage, "-o FILE is required");
	if (!dport)
		return usage_error("pcap", pcap_usage, "--dst ADDR:PORT is required");
	if (run && !key_path)
		return usage_error("pcap", pcap_usage, "--run binds signed frames: give --key");
	auth.run = run ? run : rp_auth_new_run(); /* else each capture a run of its own */
	int rc = check_io("pcap", out, argv[optind], "patch", key_path ? key_path : "",
			  key_path ? "key file" : NULL);
	if (rc || (rc = out_check("pcap", out, force, 1, NULL)))
		return rc;
	char err[ERRLEN] = "";
	patch p;
	if (patch_read(argv[optind], &p, err, sizeof(err)))
		return die("pcap", err);
	/* pcap: global header, then per packet a 16-byte record header */
	const size_t tl = auth.n_keys ? RP_AUTH_LEN : 0; /* the trailer */
	size_t total = 24 + p.n * (16 + RP_HDRS + tl) + p.off[p.n]; /* frames only */
	uint8_t *buf = malloc(total), *w = buf;
	if (!buf) {
		patch_free(&p);
		return die("pcap", "out of memory");
	}
	put_le32(w, 0xA1B2C3D4u);
	w[4] = 2, w[5] = 0, w[6] = 4, w[7] = 0;   /* version 2.4 */
	put_le32(w + 8, 0);
	put_le32(w + 12, 0);
	put_le32(w + 16, 65535);                  /* snaplen */
	put_le32(w + 20, 1);                      /* LINKTYPE_ETHERNET */
	w += 24;
	for (size_t i = 0; i < p.n; i++) {
		const uint8_t *f = p.buf + p.off[i];
		const size_t fl = p.off[i + 1] - p.off[i], dl = fl + tl;
		uint32_t len = (uint32_t)(RP_HDRS + dl);
		put_le32(w, (uint32_t)(i / 1000000));
		put_le32(w + 4, (uint32_t)(i % 1000000));
		put_le32(w + 8, len);
		put_le32(w + 12, len);
		uint8_t *d = w + 16 + RP_HDRS;
		memcpy(d, f, fl);
		if (tl)
			rp_auth_seal(&auth, d, fl, 0, d + fl);
		rp_build_udp(w + 16, dmac, smac, sip, dip, sport, dport, (uint16_t)dl,
			     rp_sum(d, dl, 0), (uint16_t)i);
		w += 16 + len;
		bfp_frame_header h;
		if (verbosity > 1 && bfp_frame_parse(f, fl, &h) == BFP_OK)
			fprintf(stderr, "bfpatch pcap: packet %zu: frame %u of %u, v%u -> v%u, "
				"encoding %u, parameters [%llu, %llu), %u bytes\n", i, h.frame_index,
				h.frame_count, h.base_version, h.target_version, h.encoding,
				(unsigned long long)h.range_begin,
				(unsigned long long)(h.range_begin + h.range_len), len);
	}
	const void *bufs[1] = {buf};
	size_t lens[1] = {total};
	rc = out_write(out, force, NULL, bufs, lens, 1, err, sizeof(err));
	if (rc == 0 && verbosity)
		fprintf(stderr, "bfpatch pcap: %zu packets (%zu bytes%s), wrote %s\n", p.n, total,
			tl ? ", signed" : "", out_name(out));
	free(buf);
	patch_free(&p);
	return rc ? die("pcap", err) : 0;
}

static const char usage[] =
	"usage: bfpatch COMMAND [options]\n"
	"Lossless sparse patches between versions of BF16 model weights.\n\n"
	"commands:\n"
	"  diff OLD NEW -o PATCH   encode the change between two checkpoints\n"
	"                          (outputs: -f to replace a file; - is stdin/stdout)\n"
	"  apply BASE PATCH -o OUT apply and verify a patch\n"
	"  info PATCH [--json]     what a patch carries\n"
	"  report -o PAGE.html [PATCH...]  HTML page: where a sync's bytes and time go\n"
	"  synth -o DIR            write a synthetic RL training trajectory\n"
	"  demo                    end-to-end demo: publisher -> relay -> 3 shims\n"
	"  pcap PATCH -o F --dst A:P  a patch as UDP packets in a pcap file\n"
	"  publish --dir D --listen A:P --key K  publish new versions to subscribers\n"
	"  keygen FILE [--id N]    make a new random key for --key (never replaces\n"
	"                          FILE); publish, bfpatch-relay and bfpatch-shim\n"
	"                          refuse to run without one unless --insecure\n"
	"  version\n\n"
	"Run 'bfpatch COMMAND --help' for a command's options.\n";

static int run(const char *cmd, int argc, char **argv)
{
	if (!strcmp(cmd, "diff"))
		return cmd_diff(argc, argv);
	if (!strcmp(cmd, "apply"))
		return cmd_apply(argc, argv);
	if (!strcmp(cmd, "info"))
		return cmd_info(argc, argv);
	if (!strcmp(cmd, "synth"))
		return cmd_synth(argc, argv);
	if (!strcmp(cmd, "demo"))
		return cmd_demo(argc, argv);
	if (!strcmp(cmd, "pcap"))
		return cmd_pcap(argc, argv);
	if (!strcmp(cmd, "publish"))
		return cmd_publish(argc, argv);
	if (!strcmp(cmd, "keygen"))
		return cmd_keygen(argc, argv);
	if (!strcmp(cmd, "report"))
		return report_main(argc, argv);
	if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
		if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
			fputs("usage: bfpatch version\nPrints the project's version, the codec "
			      "library's and the frame format version it writes\n(as bfpatch-shim "
			      "--version and bfpatch-relay --version do).\n", stdout);
			return 0;
		}
		if (argc > 1) {
			fprintf(stderr, "bfpatch version: unexpected argument '%s'\n", argv[1]);
			return 2;
		}
		bfp_version_print(stdout);
		return 0;
	}
	if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
		fputs(usage, stdout);
		return 0;
	}
	fprintf(stderr, "bfpatch: unknown command '%s'\n%s", cmd, usage);
	return 2;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fputs(usage, stderr);
		return 2;
	}
	static const char *const writers[] = {"diff", "apply", "synth", "pcap", "report"};
	for (size_t i = 0; i < sizeof(writers) / sizeof(writers[0]); i++)
		if (!strcmp(argv[1], writers[i]))
			atomic_cleanup_on_signals(); /* no temporaries left by ^C */
	malloc_keep_freed();
	/* getopt's own messages (an unknown option) then name the command
	 * as the others do: "bfpatch diff: ..." */
	const char *cmd = argv[1];
	char prog[64];
	snprintf(prog, sizeof(prog), "bfpatch %s", cmd);
	argv[1] = prog;
	int rc = run(cmd, argc - 1, argv + 1);
	/* what a command printed (info, --help, tables) must have reached
	 * stdout: a full disk or a closed stdout is an error, not exit 0 */
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "bfpatch %s: writing standard output: %s\n", cmd,
			errno ? strerror(errno) : "write error");
		return rc ? rc : 1;
	}
	return rc;
}
