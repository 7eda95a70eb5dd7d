/*
 * bench_apply.c: apply + verify rate of a sparse RL-like patch through the
 * shim's commit backends, all in one run on one patch: the CPU applying in
 * place (1 thread, all threads) and the dmadev path (decode into a staging
 * arena, DMA into the weights, re-verify), next to this machine's memcpy.
 * Every run's result is compared bit for bit with the target.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bfpatch.h"
#include "patch.h"
#include "proto.h"
#include "shim_dpdk.h"
#include "util.h"

#ifndef BENCH_BUILD
#define BENCH_BUILD "unknown"
#endif

#define MODEL_ID 0xBE7C4A991Dull

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* BF16 order key (FORMAT.md 3.2): adjacent values have adjacent keys. */
static uint16_t key(uint16_t x)
{
	return (uint16_t)((x & 0x8000u) ? (~x & 0xFFFFu) : (x | 0x8000u));
}

static uint16_t unkey(uint16_t k)
{
	return (uint16_t)((k & 0x8000u) ? (k & 0x7FFFu) : (~k & 0xFFFFu));
}

/* Weights with exponents of trained matrices (|w| ~ 2^-11 .. 2^-1); the
 * target changes ppm/1e6 of them, 85% by one BF16 step, the rest by 2-16
 * steps. Integer arithmetic on bit patterns only. */
static uint64_t make_pair(uint16_t *base, uint16_t *tgt, uint64_t n, uint32_t ppm)
{
	uint64_t s = 12345, changed = 0;
	for (uint64_t i = 0; i < n; i++) {
		uint64_t r = rnd(&s);
		unsigned e = 116 + (unsigned)(r % 10);
		base[i] = (uint16_t)(((r >> 20) & 0x8000u) | (e << 7) | ((r >> 32) & 0x7Fu));
		tgt[i] = base[i];
		if ((r >> 40) % 1000000u >= ppm)
			continue;
		unsigned k = (unsigned)((r >> 8) % 100);
		int step = k < 85 ? 1 : 2 + (int)((r >> 24) % 15);
		if ((r >> 60) & 1)
			step = -step;
		tgt[i] = unkey((uint16_t)(key(base[i]) + step));
		changed++;
	}
	return changed;
}

static void check_equal(const uint16_t *w, const uint16_t *tgt, uint64_t n, const char *what)
{
	if (memcmp(w, tgt, n * 2) != 0) {
		fprintf(stderr, "bench_apply: %s: result differs from the target\n", what);
		exit(1);
	}
}

static void report(const char *what, double t, uint64_t n)
{
	printf("  %-34s %8.1f ms  %6.2f G params/s  %6.2f GB/s of weights\n", what, t * 1e3,
	       (double)n / t * 1e-9, (double)n * 2 / t * 1e-9);
}

/* The ways of applying the patch that are measured. */
enum way { WAY_CPU, WAY_PREPARED, WAY_DMA };

typedef struct bench {
	const patch *p;
	const uint8_t **fr;        /* the patch's frames */
	uint32_t *lens;
	const frame_changes **fc;  /* WAY_PREPARED: every frame's changes */
	shim_dma *dma;             /* WAY_DMA */
	const shim_dma_journal *jn; /* WAY_DMA: the shim's crash journal, or NULL */
	bfp_decoder *dec;
	bfp_apply_opts ao;
	const uint16_t *base, *tgt;
	uint16_t *w;
	uint64_t n, reps;
} bench;

/* Best of reps runs of one way, each from a fresh copy of the base and
 * checked bit-exact against the target; printed as `what`. Exits on an
 * error: a benchmark of a failing path means nothing. */
static void measure(const bench *b, enum way way, int threads, const char *what)
{
	char err[512];
	double best = 1e30;
	for (uint64_t r = 0; r < b->reps; r++) {
		memcpy(b->w, b->base, b->n * 2);
		double t0 = now_s();
		int rc;
		if (way == WAY_CPU) {
			rc = patch_apply(b->p, b->w, b->n, MODEL_ID, threads, 0, err, sizeof(err));
		} else if (way == WAY_PREPARED) {
			apply_ctl ctl = {.threads = threads, .changes = b->fc};
			apply_result res;
			rc = patch_apply_frames(b->fr, b->lens, b->p->n, b->w, b->n, MODEL_ID, 1, &ctl,
						&res, err, sizeof(err));
		} else {
			shim_dma_result res;
			rc = shim_dma_apply(b->dma, b->dec, &b->ao, b->fr, b->lens, (uint32_t)b->p->n,
					    b->w, b->n, b->jn, &res, err, sizeof(err));
		}
		double t = now_s() - t0;
		if (rc) {
			fprintf(stderr, "bench_apply: %s: %s\n", what, err);
			exit(1);
		}
		best = t < best ? t : best;
		check_equal(b->w, b->tgt, b->n, what);
	}
	report(what, best, b->n);
}

static const char usage[] =
	"usage: bench_apply [--params N] [--ppm N] [--frame-size N] [--threads N] [--reps N]\n"
	"                   [--dma NAME] [--arena BYTES] [--eal 'ARGS']\n"
	"Applies one sparse patch (default 64M parameters, 25000 ppm changed) by the CPU\n"
	"(1 thread, N threads), from changes prepared while staged (as the shim commits),\n"
	"and through a dmadev (default dma_skeleton0), best of --reps runs each, every\n"
	"result checked bit-exact against the target.\n";

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{"params", required_argument, 0, 'p'}, {"ppm", required_argument, 0, 'c'},
		{"frame-size", required_argument, 0, 'f'}, {"threads", required_argument, 0, 'j'},
		{"reps", required_argument, 0, 'r'}, {"dma", required_argument, 0, 'd'},
		{"arena", required_argument, 0, 'a'}, {"eal", required_argument, 0, 'e'},
		{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	uint64_t n = 64000000, ppm = 25000, fs = 1200, threads = (uint64_t)cpu_count(), reps = 3,
		 arena = 64u << 20;
	const char *dma_name = "dma_skeleton0", *eal = NULL;
	int c;
	while ((c = getopt_long(argc, argv, "p:c:f:j:r:d:a:e:h", lo, NULL)) != -1) {
		int bad = 0;
		switch (c) {
		case 'p': bad = rp_parse_num(optarg, 4096, 1ull << 33, &n); break;
		case 'c': bad = rp_parse_num(optarg, 1, 1000000, &ppm); break;
		case 'f': bad = rp_parse_num(optarg, BFP_FRAME_SIZE_MIN, BFP_FRAME_SIZE_MAX, &fs); break;
		case 'j': bad = rp_parse_num(optarg, 1, 256, &threads); break;
		case 'r': bad = rp_parse_num(optarg, 1, 100, &reps); break;
		case 'a': bad = rp_parse_num(optarg, 1u << 16, 1ull << 32, &arena); break;
		case 'd': dma_name = optarg; break;
		case 'e': eal = optarg; break;
		case 'h': fputs(usage, stdout); return 0;
		default: bad = 1;
		}
		if (bad) {
			fputs(usage, stderr);
			return 2;
		}
	}
	char eal_buf[512], err[512] = "", cpu[128];
	if (!eal) {
		snprintf(eal_buf, sizeof(eal_buf),
			 "--no-huge -m 512 --no-pci --file-prefix bfpbench%d -l 0 --iova-mode=va "
			 "--vdev %s --no-telemetry --log-level=lib.eal:error "
			 "--log-level=pmd.dma.skeleton:warning",
			 (int)getpid(), "dma_skeleton0");
		eal = eal_buf;
	}
	cpu_name(cpu, sizeof(cpu));
	printf("bfpatch bench_apply: %s, %d online CPUs; %s; build: %s\n", cpu, cpu_count(),
	       __VERSION__, BENCH_BUILD);

	uint16_t *base = malloc(n * 2), *tgt = malloc(n * 2), *w = malloc(n * 2);
	if (!base || !tgt || !w) {
		fprintf(stderr, "bench_apply: out of memory for 3 x %llu parameters\n",
			(unsigned long long)n);
		return 1;
	}
	uint64_t changed = make_pair(base, tgt, n, (uint32_t)ppm);
	patch p;
	memset(&p, 0, sizeof(p));
	patch_opts po = {.frame_size = (uint32_t)fs, .base_version = 1, .target_version = 2};
	if (patch_encode_arrays(base, tgt, n, MODEL_ID, &po, &p, err, sizeof(err))) {
		fprintf(stderr, "bench_apply: encode: %s\n", err);
		return 1;
	}
	printf("model: %llu BF16 parameters (%.1f MB); patch: %llu changed (%.2f%%, 85%% by one "
	       "step), %zu frames of <= %llu B, %.2f MB (%.2f bits per change)\n",
	       (unsigned long long)n, (double)n * 2e-6, (unsigned long long)changed,
	       100.0 * (double)changed / (double)n, p.n, (unsigned long long)fs, (double)p.len * 1e-6,
	       (double)p.len * 8 / (double)changed);
	printf("rate = model parameters covered by the patch / wall time, best of %llu; "
	       "apply includes verifying every frame's target hash\n", (unsigned long long)reps);

	/* this machine's copy bandwidth, for scale */
	double best = 1e30;
	for (uint64_t r = 0; r < reps; r++) {
		double t0 = now_s();
		memcpy(w, base, n * 2);
		double t = now_s() - t0;
		best = t < best ? t : best;
	}
	report("memcpy of the weights (reference)", best, n);

	const uint8_t **fr = malloc(p.n * sizeof(*fr));
	uint32_t *lens = malloc(p.n * sizeof(*lens));
	frame_changes *fc = malloc(p.n * sizeof(*fc));
	const frame_changes **fcp = malloc(p.n * sizeof(*fcp));
	uint32_t *cpos = malloc((changed ? changed : 1) * sizeof(*cpos));
	uint16_t *cval = malloc((changed ? changed : 1) * sizeof(*cval));
	static bfp_decoder dec;
	if (!fr || !lens || !fc || !fcp || !cpos || !cval || bfp_decoder_init(&dec, 0) != BFP_OK) {
		fprintf(stderr, "bench_apply: out of memory for the frame lists\n");
		return 1;
	}
	for (size_t i = 0; i < p.n; i++) {
		fr[i] = p.buf + p.off[i];
		lens[i] = (uint32_t)(p.off[i + 1] - p.off[i]);
	}
	bench b = {.p = &p, .fr = fr, .lens = lens, .fc = fcp, .dec = &dec,
		   .ao = {.model_id = MODEL_ID, .base_version = 1},
		   .base = base, .tgt = tgt, .w = w, .n = n, .reps = reps};

	const uint64_t tlist[2] = {1, threads};
	for (int k = 0; k < (threads > 1 ? 2 : 1); k++) {
		char what[64];
		snprintf(what, sizeof(what), "CPU in place, %llu thread%s",
			 (unsigned long long)tlist[k], tlist[k] > 1 ? "s" : "");
		measure(&b, WAY_CPU, (int)tlist[k], what);
	}

	/* the shim's path: each frame decoded and verified against the base
	 * while it is staged, its changes kept; the commit then writes them
	 * and checks every range's hash in the weights */
	best = 1e30;
	for (uint64_t r = 0; r < reps; r++) {
		uint64_t used = 0;
		double t0 = now_s();
		for (size_t i = 0; i < p.n; i++) {
			bfp_frame_header h;
			if (bfp_decode_verify(&dec, &b.ao, fr[i], lens[i], base, n, &h) != BFP_OK ||
			    used + bfp_decoder_changes(&dec, NULL, NULL) > changed) {
				fprintf(stderr, "bench_apply: frame %zu does not prepare\n", i);
				return 1;
			}
			fc[i] = frame_changes_keep(&dec, &h, cpos + used, cval + used);
			fcp[i] = &fc[i];
			used += fc[i].n;
		}
		double t = now_s() - t0;
		best = t < best ? t : best;
	}
	report("prepare while staged, 1 thread", best, n);
	for (int k = 0; k < (threads > 1 ? 2 : 1); k++) {
		char what[64];
		snprintf(what, sizeof(what), "commit of prepared, %llu thread%s",
			 (unsigned long long)tlist[k], tlist[k] > 1 ? "s" : "");
		measure(&b, WAY_PREPARED, (int)tlist[k], what);
	}

	fflush(stdout);
	if (shim_eal_init(eal, err, sizeof(err))) {
		fprintf(stderr, "bench_apply: %s\n", err);
		return 1;
	}
	shim_dma_conf dc = {.name = dma_name, .arena_bytes = arena};
	if (shim_dma_open(&dc, &b.dma, err, sizeof(err))) {
		fprintf(stderr, "bench_apply: %s\n", err);
		return 1;
	}
	char what[96];
	snprintf(what, sizeof(what), "dmadev %s, 1 thread", dma_name);
	measure(&b, WAY_DMA, 1, what);
	shim_dma_stats ds;
	shim_dma_stats_get(b.dma, &ds);
	printf("  (%s: %llu copies, %.1f MB per run; staging arena %llu MiB; every range re-verified "
	       "in the weights after its copy)\n", dma_name,
	       (unsigned long long)(ds.copies / reps), (double)ds.bytes / (double)reps * 1e-6,
	       (unsigned long long)(arena >> 20));
	/* as the shim commits: each frame's old values journalled first */
	char jpath[64];
	snprintf(jpath, sizeof(jpath), "/tmp/bench_apply.%d", (int)getpid());
	wbuf_dlog dl;
	if (wbuf_dlog_open(&dl, b.w, b.n, jpath, err, sizeof(err))) {
		fprintf(stderr, "bench_apply: %s\n", err);
		return 1;
	}
	const shim_dma_journal jn = shim_dma_journal_of(&dl);
	b.jn = &jn;
	snprintf(what, sizeof(what), "dmadev %s, journalled", dma_name);
	measure(&b, WAY_DMA, 1, what);
	b.jn = NULL;
	wbuf_dlog_close(&dl);
	snprintf(jpath, sizeof(jpath), "/tmp/bench_apply.%d.dmalog", (int)getpid());
	unlink(jpath);
	if (!strncmp(dma_name, "dma_skeleton", 12))
		printf("note: dma_skeleton is a software copy engine (a DPDK thread doing memcpy on "
		       "a core), so its figure is the overhead of the DMA path, not a hardware DMA "
		       "rate; a DSA/IOAT or DPU engine frees the CPU from the copy.\n");
	shim_dma_close(b.dma);
	shim_eal_fini();
	patch_free(&p);
	free(fr);
	free(lens);
	free(fc);
	free(fcp);
	free(cpos);
	free(cval);
	free(base);
	free(tgt);
	free(w);
	return 0;
}
