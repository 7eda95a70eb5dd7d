/*
 * report.c: bfpatch report (report.h). Gathers numbers from patch files,
 * checkpoints and event logs, then writes one HTML page with inline SVG.
 * Charts come from the project's own SVG writer (svg.c), not gnuplot: the
 * charts are a few bars, lines and a heatmap, and drawing them here keeps
 * the page free of a subprocess and an extra package, lets every mark
 * carry hover text and data-* values that the browser test reads back,
 * and leaves nothing to sanitize from another tool's output. This is
 * analysis, not the patch path, so it uses floating point freely.
 */
#define _GNU_SOURCE
#include "report.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "baseline.h"
#include "bfpatch.h"
#include "model.h"
#include "output.h"
#include "patch.h"
#include "proto.h"
#include "svg.h"

/* Ethernet + IPv4 + UDP header bytes per datagram: what the publisher's
 * pacing adds to each frame (bfpatch.c pub_send), used for wire time. */
#define WIRE_OVERHEAD 42u
#define HEAT_BLOCKS 64u
#define N_ULP 10
static const char *const ulp_label[N_ULP] = {"<=-9", "-5..-8", "-3..-4", "-2", "-1",
					      "+1", "+2", "+3..+4", "+5..+8", ">=+9"};

/* ---- per patch ---- */

typedef struct pstep {
	const char *path;
	uint64_t model_id;
	uint32_t base_v, target_v;
	uint64_t params, changed, key_params, frames, bytes;
	uint64_t by_enc[BFP_ENC_LAST + 1];
	uint64_t model_bits, pos_bits, val_bits, pad_bits; /* delta frames */
	uint64_t key_payload;                              /* keyframe payloads */
	int have_ckpt;        /* base and target checkpoints found and verified */
	uint64_t ck_changed;  /* changed words counted from the checkpoints */
	size_t pulse;         /* PULSESync-style bytes; 0: unknown */
} pstep;

/* ---- per tensor, for the detailed version ---- */

typedef struct tstat {
	char *name;
	uint32_t dtype;
	uint64_t w0, w1;          /* words [w0, w1) */
	uint64_t changed;
	uint64_t ulp[N_ULP];
	uint32_t nblk;
	uint64_t blk_changed[HEAT_BLOCKS];
} tstat;

/* ---- events ---- */

enum { SRC_PUBLISH, SRC_SHIM, SRC_RELAY };

typedef struct evt {
	double t;
	int src;
	const char *id, *ev;   /* point into o */
	int64_t version;       /* -1 when the event has none */
	json_t *o;
} evt;

typedef struct node {
	int src;
	const char *id;
} node;

/* A logged span of one process: stage name and start/end times. */
typedef struct span {
	const char *who, *name;
	double a, b;
} span;

/* One version's stages, from the logs (times absolute; < 0: absent). */
typedef struct shim_tl {
	const char *id;
	double first, staged, apply_begin, apply_end, commit;
	double staged_bytes;
	int64_t nack_frames;
	int key, resync;
} shim_tl;

typedef struct tline {
	uint32_t version;
	const char *pub_id;
	double enc_begin, first, enc_end, send_end;
	double send_bytes, send_frames, enc_frames, enc_bytes;
	int64_t resent, repair_bytes; /* repair_bytes < 0: not in the log */
	double t0;
	size_t n_relays;
	const char *relay_id[64];
	double relay_first[64];
	size_t n_shims;
	shim_tl shims[256];
	double last_commit;      /* < 0: none */
	const char *bottleneck;
	double bottleneck_s;
} tline;

typedef struct rep {
	const report_input *in;
	char *err;
	size_t errlen;
	pstep *steps;
	size_t n_steps;
	size_t detail;           /* index in steps, or n_steps: none */
	uint32_t version;
	uint64_t model_id;
	/* checkpoints of the detailed version */
	tstat *ts;
	size_t n_ts;
	char ck_note[512];
	/* events */
	evt *ev;
	size_t n_ev, cap_ev;
	char ev_note[1024];
	node nodes[512];
	size_t n_nodes;
	sbuf out;
} rep;

static int fail(rep *R, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(rep *R, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(R->err, R->errlen, fmt, ap);
	va_end(ap);
	return -1;
}

/* ---- patches: what the frames carry (the same counts as bfpatch info) ---- */

static int read_patch_stats(rep *R, pstep *s, bfp_decoder *dec)
{
	patch p;
	char e[512];
	if (patch_read(s->path, &p, e, sizeof(e)))
		return fail(R, "%s", e);
	bfp_frame_header h0;
	bfp_frame_parse(p.buf, p.off[1], &h0);
	s->model_id = h0.model_id;
	s->base_v = h0.base_version;
	s->target_v = h0.target_version;
	s->frames = p.n;
	s->bytes = p.len;
	for (size_t i = 0; i < p.n; i++) {
		bfp_frame_stats st;
		bfp_status rc = bfp_frame_stats_get(dec, p.buf + p.off[i], p.off[i + 1] - p.off[i], &st);
		if (rc != BFP_OK) {
			patch_free(&p);
			return fail(R, "%s: frame %zu: %s", s->path, i, bfp_status_str(rc));
		}
		s->params += st.range_len;
		s->changed += st.n_changes;
		s->by_enc[st.encoding]++;
		if (!bfp_encoding_is_delta(st.encoding)) {
			s->key_params += st.range_len;
			s->key_payload += st.payload_len;
		} else {
			uint64_t used = (uint64_t)st.model_bits + st.position_bits + st.value_bits;
			s->model_bits += st.model_bits;
			s->pos_bits += st.position_bits;
			s->val_bits += st.value_bits;
			s->pad_bits += (uint64_t)st.payload_len * 8 - used;
		}
	}
	patch_free(&p);
	return 0;
}

static int cmp_step(const void *a, const void *b)
{
	const pstep *x = a, *y = b;
	return x->target_v < y->target_v ? -1 : x->target_v > y->target_v;
}

static int load_patches(rep *R)
{
	const report_input *in = R->in;
	if (!in->n_patches)
		return 0;
	R->steps = calloc(in->n_patches, sizeof(pstep));
	bfp_decoder *dec = malloc(sizeof(*dec));
	if (!R->steps || !dec) {
		free(dec);
		return fail(R, "out of memory");
	}
	bfp_decoder_init(dec, 0);
	int rc = 0;
	for (size_t i = 0; i < in->n_patches && rc == 0; i++) {
		R->steps[i].path = in->patches[i];
		rc = read_patch_stats(R, &R->steps[i], dec);
	}
	free(dec);
	if (rc)
		return rc;
	R->n_steps = in->n_patches;
	qsort(R->steps, R->n_steps, sizeof(pstep), cmp_step);
	R->model_id = R->steps[0].model_id;
	for (size_t i = 0; i < R->n_steps; i++) {
		if (R->steps[i].model_id != R->model_id)
			return fail(R, "%s and %s are patches of different models (%016llx, %016llx)",
				    R->steps[0].path, R->steps[i].path,
				    (unsigned long long)R->model_id,
				    (unsigned long long)R->steps[i].model_id);
		if (i && R->steps[i].target_v == R->steps[i - 1].target_v)
			return fail(R, "%s and %s both patch to version %u", R->steps[i - 1].path,
				    R->steps[i].path, R->steps[i].target_v);
	}
	return 0;
}

/* ---- checkpoints: verify, baseline, heatmap ---- */

static int file_exists(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static void ulp_count(uint64_t *ulp, uint16_t b, uint16_t t)
{
	int d = (int16_t)(uint16_t)(bfp_key(t) - bfp_key(b));
	int a = d < 0 ? -d : d, bin;
	if (a == 0)
		a = 32768; /* d = -32768 */
	bin = a == 1 ? 0 : a == 2 ? 1 : a <= 4 ? 2 : a <= 8 ? 3 : 4;
	ulp[d < 0 || a == 32768 ? 4 - bin : 5 + bin]++;
}

static int tensor_stats(rep *R, const model *m, const uint16_t *a, const uint16_t *b)
{
	R->ts = calloc(m->n_tensors ? m->n_tensors : 1, sizeof(tstat));
	if (!R->ts)
		return fail(R, "out of memory");
	R->n_ts = m->n_tensors;
	for (size_t i = 0; i < m->n_tensors; i++) {
		const bfp_tensor *x = &m->tensors[i];
		tstat *t = &R->ts[i];
		t->name = strndup(x->name, x->name_len);
		if (!t->name)
			return fail(R, "out of memory");
		t->dtype = x->dtype;
		t->w0 = x->byte_begin / 2;
		t->w1 = (x->byte_end + 1) / 2;
		uint64_t n = t->w1 - t->w0;
		t->nblk = n < HEAT_BLOCKS ? (uint32_t)n : HEAT_BLOCKS;
		uint64_t bs = t->nblk ? (n + t->nblk - 1) / t->nblk : 1;
		for (uint64_t w = t->w0; w < t->w1; w++) {
			if (a[w] == b[w])
				continue;
			t->changed++;
			t->blk_changed[(w - t->w0) / bs]++;
			ulp_count(t->ulp, a[w], b[w]);
		}
	}
	return 0;
}

static uint64_t blk_len(const tstat *t, uint32_t i)
{
	uint64_t n = t->w1 - t->w0, bs = (n + t->nblk - 1) / t->nblk;
	uint64_t b0 = i * bs, b1 = b0 + bs < n ? b0 + bs : n;
	return b1 > b0 ? b1 - b0 : 0;
}

/* Load base (and target, or base + patch), check they belong to the patch,
 * apply the patch to a copy of base and require the target bit for bit. */
static int check_step(rep *R, pstep *s, const char *bpath, const char *tpath, int detail)
{
	char e[512];
	model a = {0}, b = {0};
	patch p = {0};
	uint16_t *w = NULL;
	int rc = -1;
	if (model_map(&a, bpath, e, sizeof(e))) {
		fail(R, "%s", e);
		goto out;
	}
	if (a.model_id != s->model_id) {
		fail(R, "%s is not the model of %s (model id %016llx, patch %016llx)", bpath,
		     s->path, (unsigned long long)a.model_id, (unsigned long long)s->model_id);
		goto out;
	}
	if (tpath && model_map(&b, tpath, e, sizeof(e))) {
		fail(R, "%s", e);
		goto out;
	}
	if (tpath && (b.model_id != s->model_id || b.n_params != a.n_params)) {
		fail(R, "%s is not the model of %s", tpath, s->path);
		goto out;
	}
	if (patch_read(s->path, &p, e, sizeof(e)) ||
	    patch_check_cover(&p, a.n_params, e, sizeof(e))) {
		fail(R, "%s", e);
		goto out;
	}
	w = alloc_aligned(a.n_params * 2 + 64);
	if (!w) {
		fail(R, "out of memory");
		goto out;
	}
	memcpy(w, a.params, a.n_params * 2);
	if (patch_apply(&p, w, a.n_params, a.model_id, 0, 0, e, sizeof(e))) {
		fail(R, "%s does not apply to %s: %s", s->path, bpath, e);
		goto out;
	}
	if (tpath && memcmp(w, b.params, a.n_params * 2) != 0) {
		fail(R, "%s applied to %s does not give %s", s->path, bpath, tpath);
		goto out;
	}
	s->have_ckpt = 1;
	for (uint64_t i = 0; i < a.n_params; i++)
		s->ck_changed += a.params[i] != w[i];
	s->pulse = bl_pulse_size(&a, a.params, w);
	if (detail && tensor_stats(R, &a, a.params, w))
		goto out;
	if (detail)
		snprintf(R->ck_note, sizeof(R->ck_note), "%s -> %s", bpath,
			 tpath ? tpath : "(base + patch, range hashes verified)");
	rc = 0;
out:
	free(w);
	patch_free(&p);
	model_free(&a);
	model_free(&b);
	return rc;
}

static int load_checkpoints(rep *R)
{
	const report_input *in = R->in;
	if (in->trajectory) {
		for (size_t i = 0; i < R->n_steps; i++) {
			char bp[PATH_MAX], tp[PATH_MAX];
			pstep *s = &R->steps[i];
			snprintf(bp, sizeof(bp), "%s/step-%04u.safetensors", in->trajectory, s->base_v);
			snprintf(tp, sizeof(tp), "%s/step-%04u.safetensors", in->trajectory, s->target_v);
			uint64_t key = 0;
			for (unsigned e = 0; e <= BFP_ENC_LAST; e++)
				key += bfp_encoding_is_key(e) ? s->by_enc[e] : 0;
			if (key == s->frames)
				continue; /* a keyframe stream has no base */
			if (!file_exists(bp) || !file_exists(tp))
				continue;
			if (check_step(R, s, bp, tp, i == R->detail))
				return -1;
		}
		if (R->detail < R->n_steps && !R->steps[R->detail].have_ckpt)
			snprintf(R->ck_note, sizeof(R->ck_note),
				 "%s has no step-%04u and step-%04u .safetensors", in->trajectory,
				 R->steps[R->detail].base_v, R->steps[R->detail].target_v);
		return 0;
	}
	if (in->base) {
		if (R->detail >= R->n_steps)
			return fail(R, "--base needs the patch of the detailed version");
		return check_step(R, &R->steps[R->detail], in->base, in->target, 1);
	}
	if (in->target)
		return fail(R, "--target needs --base");
	return 0;
}

/* ---- event logs (docs/EVENTS.md) ---- */

static int ev_push(rep *R, const evt *e)
{
	if (R->n_ev == R->cap_ev) {
		size_t nc = R->cap_ev * 2 + 256;
		evt *n = realloc(R->ev, nc * sizeof(evt));
		if (!n)
			return -1;
		R->ev = n;
		R->cap_ev = nc;
	}
	R->ev[R->n_ev++] = *e;
	return 0;
}

static double jnum(const json_t *o, const char *k, double dflt)
{
	json_t *v = json_object_get(o, k);
	return json_is_number(v) ? json_number_value(v) : dflt;
}

static const char *jstr(const json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);
	return json_is_string(v) ? json_string_value(v) : NULL;
}

static int add_node(rep *R, int src, const char *id)
{
	for (size_t i = 0; i < R->n_nodes; i++)
		if (R->nodes[i].src == src && !strcmp(R->nodes[i].id, id))
			return 0;
	if (R->n_nodes == sizeof(R->nodes) / sizeof(R->nodes[0]))
		return -1;
	R->nodes[R->n_nodes].src = src;
	R->nodes[R->n_nodes].id = id;
	R->n_nodes++;
	return 0;
}

static int parse_line(rep *R, const char *path, size_t lineno, const char *line, size_t len)
{
	json_error_t je;
	json_t *o = json_loadb(line, len, 0, &je);
	if (!o)
		return fail(R, "%s:%zu: malformed JSON line: %s", path, lineno, je.text);
	evt e = {.o = o, .version = -1};
	json_t *t = json_object_get(o, "t");
	const char *src = jstr(o, "src");
	e.id = jstr(o, "id");
	e.ev = jstr(o, "ev");
	const char *miss = !json_is_object(o) ? "an object"
			   : !json_is_number(t) ? "key \"t\" (number)"
			   : !src ? "key \"src\" (string)"
			   : !e.id ? "key \"id\" (string)"
			   : !e.ev ? "key \"ev\" (string)" : NULL;
	if (miss) {
		json_decref(o);
		return fail(R, "%s:%zu: event needs %s (docs/EVENTS.md)", path, lineno, miss);
	}
	e.t = json_number_value(t);
	if (!strcmp(src, "publish"))
		e.src = SRC_PUBLISH;
	else if (!strcmp(src, "shim"))
		e.src = SRC_SHIM;
	else if (!strcmp(src, "relay"))
		e.src = SRC_RELAY;
	else {
		json_decref(o);
		return fail(R, "%s:%zu: unknown src \"%.40s\" (publish, shim or relay)", path,
			    lineno, src);
	}
	json_t *v = json_object_get(o, "version");
	if (v && !json_is_integer(v)) {
		json_decref(o);
		return fail(R, "%s:%zu: \"version\" is not an integer", path, lineno);
	}
	if (v)
		e.version = json_integer_value(v);
	if (!isfinite(e.t) || e.t < 0) {
		json_decref(o);
		return fail(R, "%s:%zu: \"t\" is not a time", path, lineno);
	}
	if (ev_push(R, &e) || add_node(R, e.src, e.id)) {
		json_decref(o);
		return fail(R, "out of memory (or more than 512 processes in the logs)");
	}
	return 0;
}

static int load_events(rep *R)
{
	const report_input *in = R->in;
	for (size_t f = 0; f < in->n_events; f++) {
		const char *path = in->events[f];
		/* a regular file only: a FIFO would hang the report */
		struct stat sb;
		int fd = open_regular(path, &sb, R->err, R->errlen);
		if (fd < 0)
			return -1;
		FILE *fp = fdopen(fd, "rb");
		if (!fp) {
			close(fd);
			return fail(R, "%s: %s", path, strerror(errno));
		}
		char *line = NULL;
		size_t cap = 0, lineno = 0;
		ssize_t n;
		int rc = 0;
		while (rc == 0 && (n = getline(&line, &cap, fp)) > 0) {
			lineno++;
			size_t len = (size_t)n;
			int whole = line[len - 1] == '\n';
			while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
				len--;
			size_t k = 0;
			while (k < len && isspace((unsigned char)line[k]))
				k++;
			if (k == len)
				continue;
			if (!whole) {
				/* unterminated last line: a log cut short (EVENTS.md) */
				json_t *o = json_loadb(line, len, 0, NULL);
				if (!o) {
					size_t u = strlen(R->ev_note);
					snprintf(R->ev_note + u, sizeof(R->ev_note) - u,
						 "%s%s: skipped an unterminated last line %zu (a log cut short).",
						 u ? " " : "", path, lineno);
					break;
				}
				json_decref(o);
			}
			rc = parse_line(R, path, lineno, line, len);
		}
		if (rc == 0 && ferror(fp))
			rc = fail(R, "%s: read error", path);
		free(line);
		fclose(fp);
		if (rc)
			return rc;
	}
	return 0;
}

static int ev_is(const evt *e, int src, const char *ev, int64_t version)
{
	return e->src == src && !strcmp(e->ev, ev) && (version < 0 || e->version == version);
}

static shim_tl *tl_shim(tline *L, const char *id)
{
	for (size_t i = 0; i < L->n_shims; i++)
		if (!strcmp(L->shims[i].id, id))
			return &L->shims[i];
	if (L->n_shims == sizeof(L->shims) / sizeof(L->shims[0]))
		return NULL;
	shim_tl *s = &L->shims[L->n_shims++];
	memset(s, 0, sizeof(*s));
	s->id = id;
	s->first = s->staged = s->apply_begin = s->apply_end = s->commit = -1;
	s->staged_bytes = -1;
	return s;
}

/* Keep the first time an event is seen (a re-sent stage repeats it). */
static void first_t(double *dst, double t)
{
	if (*dst < 0 || t < *dst)
		*dst = t;
}

static int cmp_shim(const void *a, const void *b)
{
	const shim_tl *x = a, *y = b;
	return strcmp(x->id, y->id);
}

/* The stages of version v from the logs; returns 0 when no event names v. */
static int timeline(const rep *R, uint32_t v, tline *L)
{
	memset(L, 0, sizeof(*L));
	L->version = v;
	L->enc_begin = L->first = L->enc_end = L->send_end = L->last_commit = -1;
	L->send_bytes = L->send_frames = L->enc_frames = L->enc_bytes = -1;
	L->repair_bytes = -1;
	int any = 0;
	double tmin = -1;
	for (size_t i = 0; i < R->n_ev; i++) {
		const evt *e = &R->ev[i];
		if (e->version != (int64_t)v)
			continue;
		any = 1;
		first_t(&tmin, e->t);
		if (e->src == SRC_PUBLISH) {
			if (!L->pub_id)
				L->pub_id = e->id;
			if (strcmp(L->pub_id, e->id))
				continue; /* one publisher per version */
			if (!strcmp(e->ev, "encode_begin"))
				first_t(&L->enc_begin, e->t);
			else if (!strcmp(e->ev, "first_frame"))
				first_t(&L->first, e->t);
			else if (!strcmp(e->ev, "encode_end")) {
				first_t(&L->enc_end, e->t);
				L->enc_frames = jnum(e->o, "frames", -1);
				L->enc_bytes = jnum(e->o, "bytes", -1);
			} else if (!strcmp(e->ev, "send_end")) {
				first_t(&L->send_end, e->t);
				L->send_frames = jnum(e->o, "frames", -1);
				L->send_bytes = jnum(e->o, "bytes", -1);
			} else if (!strcmp(e->ev, "nack")) {
				L->resent += (int64_t)jnum(e->o, "frames", 0);
				double rb = jnum(e->o, "bytes", -1); /* not in EVENTS.md v1 */
				if (rb >= 0)
					L->repair_bytes = (L->repair_bytes < 0 ? 0 : L->repair_bytes) +
							  (int64_t)rb;
			}
		} else if (e->src == SRC_RELAY) {
			if (!strcmp(e->ev, "first_frame")) {
				size_t k;
				for (k = 0; k < L->n_relays && strcmp(L->relay_id[k], e->id); k++)
					;
				if (k == L->n_relays && k < 64) {
					L->relay_id[k] = e->id;
					L->relay_first[k] = -1;
					L->n_relays++;
				}
				if (k < 64)
					first_t(&L->relay_first[k], e->t);
			}
		} else {
			shim_tl *s = tl_shim(L, e->id);
			if (!s)
				continue;
			if (!strcmp(e->ev, "first_frame"))
				first_t(&s->first, e->t);
			else if (!strcmp(e->ev, "staged")) {
				first_t(&s->staged, e->t);
				s->staged_bytes = jnum(e->o, "bytes", -1);
				s->key |= json_is_true(json_object_get(e->o, "key"));
			} else if (!strcmp(e->ev, "apply_begin"))
				first_t(&s->apply_begin, e->t);
			else if (!strcmp(e->ev, "apply_end"))
				first_t(&s->apply_end, e->t);
			else if (!strcmp(e->ev, "commit"))
				first_t(&s->commit, e->t);
			else if (!strcmp(e->ev, "nack"))
				s->nack_frames += (int64_t)jnum(e->o, "frames", 0);
			else if (!strcmp(e->ev, "resync"))
				s->resync = 1;
		}
	}
	if (!any)
		return 0;
	qsort(L->shims, L->n_shims, sizeof(shim_tl), cmp_shim);
	L->t0 = L->enc_begin >= 0 ? L->enc_begin : tmin;
	for (size_t i = 0; i < L->n_shims; i++)
		if (L->shims[i].commit > L->last_commit)
			L->last_commit = L->shims[i].commit;
	/* longest stage: publisher stages, then each actor's; the wait for the
	 * actor's safe point is the actor's choice, not a cost of the sync */
	span st[2 + 4 * 256];
	size_t n = 0;
	st[n++] = (span){NULL, "encode", L->enc_begin, L->enc_end};
	st[n++] = (span){NULL, "wire (publisher send)", L->first, L->send_end};
	for (size_t i = 0; i < L->n_shims; i++) {
		const shim_tl *s = &L->shims[i];
		st[n++] = (span){NULL, "stage (receive until complete)", s->first, s->staged};
		st[n++] = (span){NULL, "apply + verify", s->apply_begin, s->apply_end};
		st[n++] = (span){NULL, "commit", s->apply_end, s->commit};
	}
	L->bottleneck_s = -1;
	for (size_t i = 0; i < n; i++)
		if (st[i].a >= 0 && st[i].b >= st[i].a && st[i].b - st[i].a > L->bottleneck_s) {
			L->bottleneck_s = st[i].b - st[i].a;
			L->bottleneck = st[i].name;
		}
	return 1;
}

/* ---- page helpers ---- */

static void fmt_bytes(char *o, size_t n, double v)
{
	svg_si(o, n, v, "B");
}

static void fmt_rate(char *o, size_t n, double v)
{
	svg_si(o, n, v, "bit/s");
}

static void fmt_secs(char *o, size_t n, double v)
{
	svg_secs(o, n, v);
}

static void fmt_plain(char *o, size_t n, double v)
{
	svg_si(o, n, v, "");
}

static void fmt_pct(char *o, size_t n, double v)
{
	snprintf(o, n, "%.3g%%", v * 100);
}

static void h_text(sbuf *b, const char *s)
{
	sb_esc(b, s);
}

/* <td> with a shown text and the exact value in data-k / data-v. */
static void td_num(sbuf *b, const char *k, const char *vfmt_text, double v, int exact_int)
{
	sb_printf(b, "<td data-k=\"%s\" data-v=\"", k);
	if (exact_int)
		sb_printf(b, "%.0f", v);
	else
		sb_printf(b, "%.17g", v);
	sb_printf(b, "\">");
	sb_esc(b, vfmt_text);
	sb_printf(b, "</td>");
}

static void td_missing(sbuf *b, const char *k, const char *why)
{
	sb_printf(b, "<td data-k=\"%s\" class=\"na\" title=\"", k);
	sb_esc(b, why);
	sb_printf(b, "\">n/a</td>");
}

static void section_begin(sbuf *b, const char *id, const char *title, int ok)
{
	sb_printf(b, "<section id=\"%s\" data-status=\"%s\">\n<h2>", id, ok ? "ok" : "missing");
	sb_esc(b, title);
	sb_printf(b, "</h2>\n");
}

static void missing(sbuf *b, const char *what)
{
	sb_printf(b, "<p class=\"missing\">Not drawn: ");
	sb_esc(b, what);
	sb_printf(b, "</p>\n");
}

static const pstep *step_of(const rep *R, uint32_t v)
{
	for (size_t i = 0; i < R->n_steps; i++)
		if (R->steps[i].target_v == v)
			return &R->steps[i];
	return NULL;
}

static double bits_per_changed(const pstep *s)
{
	return s->changed ? (double)s->bytes * 8 / (double)s->changed : 0;
}

static double ratio_dense(const pstep *s)
{
	return s->bytes ? (double)s->params * 2 / (double)s->bytes : 0;
}

/* ---- summary ---- */

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

static void sec_summary(rep *R)
{
	sbuf *b = &R->out;
	size_t cap = R->n_steps + R->n_ev + 1, n = 0;
	uint32_t *vs = malloc(cap * sizeof(uint32_t));
	if (!vs) {
		b->oom = 1;
		return;
	}
	for (size_t i = 0; i < R->n_steps; i++)
		vs[n++] = R->steps[i].target_v;
	for (size_t i = 0; i < R->n_ev; i++)
		if (R->ev[i].version > 0 && R->ev[i].version <= UINT32_MAX &&
		    (ev_is(&R->ev[i], SRC_PUBLISH, "encode_begin", -1) ||
		     ev_is(&R->ev[i], SRC_SHIM, "commit", -1)))
			vs[n++] = (uint32_t)R->ev[i].version;
	qsort(vs, n, sizeof(uint32_t), cmp_u32);
	section_begin(b, "summary", "Summary", n > 0);
	sb_printf(b, "<p>One row per version (the patch's target version). Patch columns come "
		  "from the frames (the counts of <code>bfpatch info --json</code>); PULSESync-style "
		  "from the checkpoints; times from the event logs.</p>\n");
	sb_printf(b, "<table class=\"num\" id=\"summary-table\"><tr><th>version</th><th>parameters"
		  "</th><th>changed</th><th>changed fraction</th><th>frames</th><th>patch bytes</th>"
		  "<th>bits per changed parameter</th><th>ratio to dense BF16</th>"
		  "<th>PULSESync-style bytes</th><th>PULSESync-style / patch</th>"
		  "<th>publish to last commit</th><th>longest stage (the actor's wait for its "
		  "safe point aside)</th></tr>\n");
	tline *L = malloc(sizeof(*L));
	if (!L) {
		free(vs);
		b->oom = 1;
		return;
	}
	for (size_t i = 0; i < n; i++) {
		if (i && vs[i] == vs[i - 1])
			continue;
		const pstep *s = step_of(R, vs[i]);
		char t[64];
		sb_printf(b, "<tr data-version=\"%u\"%s>", vs[i],
			  vs[i] == R->version ? " class=\"detail\"" : "");
		if (s)
			snprintf(t, sizeof(t), "%u &#8594; %u", s->base_v, s->target_v);
		else
			snprintf(t, sizeof(t), "%u", vs[i]);
		sb_printf(b, "<td>%s</td>", t);
		if (s) {
			snprintf(t, sizeof(t), "%llu", (unsigned long long)s->params);
			td_num(b, "params", t, (double)s->params, 1);
			snprintf(t, sizeof(t), "%llu", (unsigned long long)s->changed);
			td_num(b, "changed", t, (double)s->changed, 1);
			fmt_pct(t, sizeof(t), s->params ? (double)s->changed / (double)s->params : 0);
			td_num(b, "changed_fraction", t,
			       s->params ? (double)s->changed / (double)s->params : 0, 0);
			snprintf(t, sizeof(t), "%llu", (unsigned long long)s->frames);
			td_num(b, "frames", t, (double)s->frames, 1);
			snprintf(t, sizeof(t), "%llu", (unsigned long long)s->bytes);
			td_num(b, "bytes", t, (double)s->bytes, 1);
			snprintf(t, sizeof(t), "%.2f", bits_per_changed(s));
			td_num(b, "bits_per_changed", t, bits_per_changed(s), 0);
			snprintf(t, sizeof(t), "%.1fx", ratio_dense(s));
			td_num(b, "ratio_to_dense", t, ratio_dense(s), 0);
			if (s->pulse) {
				snprintf(t, sizeof(t), "%zu", s->pulse);
				td_num(b, "pulse_bytes", t, (double)s->pulse, 1);
				snprintf(t, sizeof(t), "%.2fx", (double)s->pulse / (double)s->bytes);
				td_num(b, "pulse_ratio", t, (double)s->pulse / (double)s->bytes, 0);
			} else {
				const char *why = s->have_ckpt ? "this build has no zstd"
						  : "needs the base and target checkpoints";
				td_missing(b, "pulse_bytes", why);
				td_missing(b, "pulse_ratio", why);
			}
		} else {
			static const char *k[] = {"params", "changed", "changed_fraction", "frames",
						  "bytes", "bits_per_changed", "ratio_to_dense",
						  "pulse_bytes", "pulse_ratio"};
			for (size_t j = 0; j < sizeof(k) / sizeof(k[0]); j++)
				td_missing(b, k[j], "no patch file of this version was given");
		}
		if (timeline(R, vs[i], L) && L->enc_begin >= 0 && L->last_commit >= 0) {
			svg_secs(t, sizeof(t), L->last_commit - L->enc_begin);
			td_num(b, "publish_to_last_commit_s", t, L->last_commit - L->enc_begin, 0);
		} else {
			td_missing(b, "publish_to_last_commit_s",
				   "needs the publisher's encode_begin and a shim's commit of this version");
		}
		if (L->version == vs[i] && L->bottleneck) {
			char d[32];
			svg_secs(d, sizeof(d), L->bottleneck_s);
			sb_printf(b, "<td data-k=\"bottleneck\" data-v=\"");
			sb_esc(b, L->bottleneck);
			sb_printf(b, "\" data-s=\"%.17g\">", L->bottleneck_s);
			sb_esc(b, L->bottleneck);
			sb_printf(b, " (%s)</td>", d);
		} else {
			td_missing(b, "bottleneck", "needs event logs of this version");
		}
		sb_printf(b, "</tr>\n");
	}
	sb_printf(b, "</table>\n");
	if (!n)
		missing(b, "no patch file and no logged version; give patches (PATCH...) or event logs "
			   "(--events).");
	sb_printf(b, "</section>\n");
	free(L);
	free(vs);
}

/* ---- 1. heatmap ---- */

/* Colour of a changed fraction on a log scale between lo and hi (the
 * smallest and largest non-zero block fractions): light to dark orange. */
static void heat_colour(char *o, size_t n, double f, double lo, double hi)
{
	if (f <= 0) {
		snprintf(o, n, "#eeeeee");
		return;
	}
	double x = hi > lo ? (log(f) - log(lo)) / (log(hi) - log(lo)) : 1;
	x = x < 0 ? 0 : x > 1 ? 1 : x;
	static const double stop[4][3] = {
		{255, 237, 160}, {254, 178, 76}, {240, 59, 32}, {128, 0, 38}};
	double p = x * 3;
	int i = p >= 3 ? 2 : (int)p;
	double u = p - i;
	int c[3];
	for (int k = 0; k < 3; k++)
		c[k] = (int)lround(stop[i][k] + u * (stop[i + 1][k] - stop[i][k]));
	snprintf(o, n, "#%02x%02x%02x", c[0], c[1], c[2]);
}

static void ulp_text(char *o, size_t n, const uint64_t *u)
{
	size_t k = 0;
	for (int i = 0; i < N_ULP && k < n; i++)
		k += (size_t)snprintf(o + k, n - k, "%s%s: %llu", i ? ", " : "", ulp_label[i],
				      (unsigned long long)u[i]);
}

static void sec_heatmap(rep *R)
{
	sbuf *b = &R->out;
	section_begin(b, "heatmap", "Changed weights per tensor", R->ts != NULL);
	if (!R->ts) {
		char m[900];
		snprintf(m, sizeof(m),
			 "needs the base and target checkpoints of version %u's patch "
			 "(--trajectory DIR, or --base FILE with --target FILE or the patch)%s%s.",
			 R->version, R->ck_note[0] ? ": " : "", R->ck_note);
		missing(b, m);
		sb_printf(b, "</section>\n");
		return;
	}
	double lo = 2, hi = 0;
	uint64_t tot_c = 0, tot_p = 0, tot_u[N_ULP] = {0};
	for (size_t i = 0; i < R->n_ts; i++) {
		const tstat *t = &R->ts[i];
		tot_c += t->changed;
		tot_p += t->w1 - t->w0;
		for (int k = 0; k < N_ULP; k++)
			tot_u[k] += t->ulp[k];
		for (uint32_t j = 0; j < t->nblk; j++) {
			double f = (double)t->blk_changed[j] / (double)blk_len(t, j);
			if (f > 0 && f < lo)
				lo = f;
			if (f > hi)
				hi = f;
		}
	}
	sb_printf(b, "<p>Version %u (checkpoints ", R->version);
	sb_esc(b, R->ck_note);
	sb_printf(b, "): each row is a tensor cut into up to %u blocks of "
		  "consecutive parameters, coloured by the fraction of the block's parameters "
		  "that changed (log scale; grey: none). Hover a block for its numbers, a name for "
		  "its distribution of steps in BF16 ULPs (order-key difference, FORMAT.md 3.2). "
		  "%llu of %llu parameters changed (%.3f%%).</p>\n",
		  HEAT_BLOCKS, (unsigned long long)tot_c, (unsigned long long)tot_p,
		  tot_p ? 100.0 * (double)tot_c / (double)tot_p : 0.0);
	const double lab = 300, cw = 9, top = 46;
	double rh = R->n_ts <= 60 ? 12 : R->n_ts <= 200 ? 8 : 5;
	int W = (int)(lab + cw * HEAT_BLOCKS + 20), H = (int)(top + rh * (double)R->n_ts + 10);
	svg_begin(b, W, H, "heatmap-chart", "changed fraction per tensor block");
	/* legend */
	svg_text(b, lab, 14, "start", 11, "fraction of the block changed:");
	for (int i = 0; i <= 40; i++) {
		char c[16];
		double f = hi > 0 ? lo * pow(hi / lo, i / 40.0) : 0;
		heat_colour(c, sizeof(c), f, lo, hi);
		svg_rect(b, lab + 170 + i * 6, 4, 6, 12, c, NULL, NULL);
	}
	char s1[32], s2[32];
	fmt_pct(s1, sizeof(s1), hi > 0 ? lo : 0);
	fmt_pct(s2, sizeof(s2), hi);
	svg_text(b, lab + 168, 30, "start", 10, s1);
	svg_text(b, lab + 170 + 41 * 6, 30, "end", 10, s2);
	svg_rect(b, lab + 170 + 41 * 6 + 12, 4, 10, 12, "#eeeeee", NULL, NULL);
	svg_text(b, lab + 170 + 41 * 6 + 26, 14, "start", 10, "none");
	sbuf a = {0};
	for (size_t i = 0; i < R->n_ts; i++) {
		const tstat *t = &R->ts[i];
		double y = top + rh * (double)i;
		char u[512], nm[48];
		ulp_text(u, sizeof(u), t->ulp);
		snprintf(nm, sizeof(nm), "%s%.38s", strlen(t->name) > 38 ? "..." : "",
			 strlen(t->name) > 38 ? t->name + strlen(t->name) - 38 : t->name);
		if (rh >= 8) {
			sb_printf(b, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"end\" font-size=\"%.1f\">"
				  "<title>", lab - 6, y + rh - 2, rh - 2);
			sb_esc(b, t->name);
			sb_printf(b, ": %llu of %llu changed; ULP steps ",
				  (unsigned long long)t->changed, (unsigned long long)(t->w1 - t->w0));
			sb_esc(b, u);
			sb_printf(b, "</title>");
			sb_esc(b, nm);
			sb_printf(b, "</text>\n");
		}
		for (uint32_t j = 0; j < t->nblk; j++) {
			uint64_t len = blk_len(t, j);
			double f = (double)t->blk_changed[j] / (double)len;
			char c[16], title[600];
			heat_colour(c, sizeof(c), f, lo, hi);
			snprintf(title, sizeof(title), "%s block %u: %llu of %llu changed (%.3f%%)",
				 t->name, j, (unsigned long long)t->blk_changed[j],
				 (unsigned long long)len, 100 * f);
			a.n = 0;
			sb_printf(&a, "data-frac=\"%.6g\" data-t=\"%zu\"", f, i);
			if (a.oom)
				b->oom = 1;
			svg_rect(b, lab + cw * j, y, cw - 1, rh - 1, c, title, a.p);
		}
	}
	sb_free(&a);
	svg_end(b);
	/* overall ULP distribution */
	uint64_t umax = 1;
	for (int k = 0; k < N_ULP; k++)
		umax = tot_u[k] > umax ? tot_u[k] : umax;
	svg_begin(b, 620, 220, "ulp-chart", "distribution of change sizes in ULPs");
	svg_axis ya = {0, (double)umax, 180, 20, 0};
	svg_yaxis(b, &ya, 80, 600, fmt_plain, "changed parameters");
	for (int k = 0; k < N_ULP; k++) {
		char title[96], at[64];
		snprintf(title, sizeof(title), "%s ULP: %llu changes", ulp_label[k],
			 (unsigned long long)tot_u[k]);
		snprintf(at, sizeof(at), "data-ulp-bin=\"%d\" data-count=\"%llu\"", k,
			 (unsigned long long)tot_u[k]);
		double y = svg_map(&ya, (double)tot_u[k]);
		svg_rect(b, 90 + k * 51, y, 40, 180 - y, k < 5 ? "#6baed6" : "#fd8d3c", title, at);
		svg_text(b, 110 + k * 51, 196, "middle", 11, ulp_label[k]);
	}
	svg_text(b, 340, 214, "middle", 12, "step from base to target, BF16 ULPs");
	svg_end(b);
	/* table */
	sb_printf(b, "<details><summary>Per-tensor table (%zu tensors)</summary>\n"
		  "<table class=\"num\" id=\"tensor-table\"><tr><th>tensor</th><th>dtype</th>"
		  "<th>parameters</th><th>changed</th><th>fraction</th>", R->n_ts);
	for (int k = 0; k < N_ULP; k++)
	{
		sb_printf(b, "<th>");
		sb_esc(b, ulp_label[k]);
		sb_printf(b, "</th>");
	}
	sb_printf(b, "</tr>\n");
	for (size_t i = 0; i < R->n_ts; i++) {
		const tstat *t = &R->ts[i];
		uint64_t n = t->w1 - t->w0;
		sb_printf(b, "<tr data-tensor=\"");
		sb_esc(b, t->name);
		sb_printf(b, "\" data-params=\"%llu\" data-changed=\"%llu\" data-ulp=\"",
			  (unsigned long long)n, (unsigned long long)t->changed);
		for (int k = 0; k < N_ULP; k++)
			sb_printf(b, "%s%llu", k ? "," : "", (unsigned long long)t->ulp[k]);
		sb_printf(b, "\"><td>");
		sb_esc(b, t->name);
		sb_printf(b, "</td><td>%s</td><td>%llu</td><td>%llu</td><td>%.3f%%</td>",
			  t->dtype == BFP_DT_BF16 ? "BF16" : "other (16-bit words)",
			  (unsigned long long)n, (unsigned long long)t->changed,
			  n ? 100.0 * (double)t->changed / (double)n : 0.0);
		for (int k = 0; k < N_ULP; k++)
			sb_printf(b, "<td>%llu</td>", (unsigned long long)t->ulp[k]);
		sb_printf(b, "</tr>\n");
	}
	sb_printf(b, "<tr class=\"total\"><td>all</td><td></td><td>%llu</td><td>%llu</td>"
		  "<td>%.3f%%</td>", (unsigned long long)tot_p, (unsigned long long)tot_c,
		  tot_p ? 100.0 * (double)tot_c / (double)tot_p : 0.0);
	for (int k = 0; k < N_ULP; k++)
		sb_printf(b, "<td>%llu</td>", (unsigned long long)tot_u[k]);
	sb_printf(b, "</tr></table></details>\n</section>\n");
}

/* ---- 2. packaging budget ---- */

enum { P_HDR, P_CRC, P_MODEL, P_POS, P_VAL, P_PAD, P_KEY, P_REPAIR, N_PART };
static const char *const part_key[N_PART] = {"headers", "checksums", "code_params", "positions",
					      "values", "padding", "keyframes", "repairs"};
static const char *const part_name[N_PART] = {
	"frame headers (56 B each)", "checksums (CRC32C, 4 B per frame)",
	"code parameters (class headers)", "position coding", "value coding",
	"bit padding", "keyframe payloads", "repairs (resent frames)"};
static const char *const part_colour[N_PART] = {"#969696", "#525252", "#9e9ac8", "#3182bd",
						 "#fd8d3c", "#d9d9d9", "#31a354", "#e7298a"};

static void parts_of(const pstep *s, int64_t repair_bytes, double *p)
{
	p[P_HDR] = (double)s->frames * (BFP_HEADER_SIZE - 4);
	p[P_CRC] = (double)s->frames * 4;
	p[P_MODEL] = (double)s->model_bits / 8;
	p[P_POS] = (double)s->pos_bits / 8;
	p[P_VAL] = (double)s->val_bits / 8;
	p[P_PAD] = (double)s->pad_bits / 8;
	p[P_KEY] = (double)s->key_payload;
	p[P_REPAIR] = repair_bytes > 0 ? (double)repair_bytes : 0;
}

static void sec_budget(rep *R)
{
	sbuf *b = &R->out;
	section_begin(b, "budget", "Patch packaging budget", R->n_steps > 0);
	if (!R->n_steps) {
		missing(b, "needs patch files (bfpatch report PATCH...).");
		sb_printf(b, "</section>\n");
		return;
	}
	tline *L = malloc(sizeof(*L));
	if (!L) {
		b->oom = 1;
		return;
	}
	double xmax = 1;
	for (size_t i = 0; i < R->n_steps; i++) {
		const pstep *s = &R->steps[i];
		double p[N_PART], tot = 0;
		timeline(R, s->target_v, L);
		parts_of(s, L->repair_bytes, p);
		for (int k = 0; k < N_PART; k++)
			tot += p[k];
		xmax = fmax(xmax, fmax(tot, (double)s->pulse));
	}
	sb_printf(b, "<p>Bytes of each patch by what they carry, from the frames' headers and "
		  "payload structure (<code>bfp_frame_stats_get</code>): stacked bars; the black "
		  "tick is the PULSESync-style size of the same step (COO deltas, raw BF16 values, "
		  "zstd-1; from the checkpoints); dense BF16 is written at the right. Format "
		  "version 1 has no MAC, so authentication costs 0 bytes. Repairs are drawn where "
		  "the publisher's log gives their bytes.</p>\n");
	const double x0 = 80, x1 = 640, rowh = 26, top = 30;
	int H = (int)(top + rowh * (double)R->n_steps + 60);
	svg_begin(b, 900, H, "budget-chart", "patch bytes by part, per version");
	svg_axis xa = {0, xmax * 1.05, x0, x1, 0};
	double ybot = top + rowh * (double)R->n_steps + 4;
	svg_xaxis(b, &xa, ybot, top - 6, fmt_bytes, "bytes per patch");
	/* legend */
	for (int k = 0; k < N_PART; k++) {
		static const char *const shortname[N_PART] = {"headers", "CRC32C", "code params",
							      "positions", "values", "padding",
							      "keyframes", "repairs"};
		svg_rect(b, x0 + k * 92, 6, 10, 10, part_colour[k], part_name[k], NULL);
		svg_text(b, x0 + k * 92 + 14, 15, "start", 10, shortname[k]);
	}
	sbuf a = {0};
	for (size_t i = 0; i < R->n_steps; i++) {
		const pstep *s = &R->steps[i];
		double p[N_PART], x = 0, y = top + rowh * (double)i;
		char t[96], lbl[32];
		timeline(R, s->target_v, L);
		parts_of(s, L->repair_bytes, p);
		snprintf(lbl, sizeof(lbl), "v%u", s->target_v);
		svg_text(b, x0 - 6, y + 14, "end", 11, lbl);
		for (int k = 0; k < N_PART; k++) {
			if (k == P_REPAIR && L->repair_bytes < 0)
				continue;
			char title[160];
			fmt_bytes(t, sizeof(t), p[k]);
			snprintf(title, sizeof(title), "version %u: %s: %s (%.10g bytes, %.2f%%)",
				 s->target_v, part_name[k], t, p[k], 100 * p[k] / (double)s->bytes);
			a.n = 0;
			sb_printf(&a, "data-version=\"%u\" data-part=\"%s\" data-bytes=\"%.17g\"",
				  s->target_v, part_key[k], p[k]);
			b->oom |= a.oom;
			double xa0 = svg_map(&xa, x), xa1 = svg_map(&xa, x + p[k]);
			svg_rect(b, xa0, y + 2, xa1 - xa0, 16, part_colour[k], title, a.p);
			x += p[k];
		}
		if (s->pulse) {
			double px = svg_map(&xa, (double)s->pulse);
			a.n = 0;
			sb_printf(&a, "data-version=\"%u\" data-pulse=\"%zu\"", s->target_v, s->pulse);
			fmt_bytes(t, sizeof(t), (double)s->pulse);
			char title[256];
			snprintf(title, sizeof(title), "PULSESync-style: %s (%zu bytes), %.2fx the patch",
				 t, s->pulse, (double)s->pulse / (double)s->bytes);
			svg_rect(b, px - 1.5, y, 3, 20, "#000000", title, a.p);
		}
		fmt_bytes(t, sizeof(t), (double)s->params * 2);
		char d[128];
		snprintf(d, sizeof(d), "dense %s = %.1fx", t, ratio_dense(s));
		svg_text(b, x1 + 10, y + 14, "start", 11, d);
	}
	svg_end(b);
	/* detailed version: totals on a log scale, and the parts as a table */
	const pstep *s = step_of(R, R->version);
	if (s) {
		double p[N_PART];
		timeline(R, s->target_v, L);
		parts_of(s, L->repair_bytes, p);
		struct {
			const char *name, *key, *colour;
			double v;
		} bars[3] = {{"dense BF16", "dense", "#bdbdbd", (double)s->params * 2},
			     {"PULSESync-style", "pulse", "#000000", (double)s->pulse},
			     {"bfpatch patch", "bfpatch", "#3182bd", (double)s->bytes}};
		double lo = 1e300;
		for (int k = 0; k < 3; k++)
			if (bars[k].v > 0)
				lo = fmin(lo, bars[k].v);
		svg_axis xl = {pow(10, floor(log10(lo))), pow(10, ceil(log10(bars[0].v * 1.01))),
			       150, 640, 1};
		char lab[96];
		snprintf(lab, sizeof(lab), "version %u totals", s->target_v);
		svg_begin(b, 900, 140, "totals-chart", lab);
		svg_xaxis(b, &xl, 100, 10, fmt_bytes, "bytes (log scale)");
		for (int k = 0; k < 3; k++) {
			char t[64], title[128];
			double y = 14 + k * 28;
			svg_text(b, 144, y + 14, "end", 11, bars[k].name);
			if (!(bars[k].v > 0)) {
				svg_text(b, 150, y + 14, "start", 11,
					 "n/a: needs the base and target checkpoints");
				continue;
			}
			fmt_bytes(t, sizeof(t), bars[k].v);
			snprintf(title, sizeof(title), "%s: %s (%.0f bytes)", bars[k].name, t, bars[k].v);
			a.n = 0;
			sb_printf(&a, "data-total=\"%s\" data-bytes=\"%.0f\"", bars[k].key, bars[k].v);
			b->oom |= a.oom;
			svg_rect(b, 150, y, svg_map(&xl, bars[k].v) - 150, 20, bars[k].colour, title, a.p);
			svg_text(b, svg_map(&xl, bars[k].v) + 6, y + 14, "start", 11, t);
		}
		svg_end(b);
		sb_printf(b, "<table class=\"num\" id=\"budget-table\"><tr><th>version %u</th><th>bytes"
			  "</th><th>share of the patch</th></tr>\n", s->target_v);
		for (int k = 0; k < N_PART; k++) {
			if (k == P_REPAIR)
				continue;
			sb_printf(b, "<tr data-part=\"%s\"><td>%s</td><td data-v=\"%.17g\">%.1f</td>"
				  "<td>%.2f%%</td></tr>\n", part_key[k], part_name[k], p[k], p[k],
				  100 * p[k] / (double)s->bytes);
		}
		sb_printf(b, "<tr data-part=\"macs\"><td>MACs</td><td data-v=\"0\">0</td><td>none in "
			  "format version 1</td></tr>\n");
		if (L->repair_bytes >= 0)
			sb_printf(b, "<tr data-part=\"repairs\"><td>%s</td><td data-v=\"%lld\">%lld</td>"
				  "<td>%lld frames resent</td></tr>\n", part_name[P_REPAIR],
				  (long long)L->repair_bytes, (long long)L->repair_bytes,
				  (long long)L->resent);
		else if (L->version == s->target_v && L->pub_id)
			sb_printf(b, "<tr data-part=\"repairs\"><td>%s</td><td data-v=\"\">n/a</td>"
				  "<td>%lld frames resent (the log gives no bytes)</td></tr>\n",
				  part_name[P_REPAIR], (long long)L->resent);
		else
			sb_printf(b, "<tr data-part=\"repairs\"><td>%s</td><td data-v=\"\">n/a</td>"
				  "<td>needs the publisher's event log</td></tr>\n", part_name[P_REPAIR]);
		sb_printf(b, "<tr class=\"total\"><td>patch</td><td data-v=\"%llu\">%llu</td>"
			  "<td>100%%</td></tr></table>\n", (unsigned long long)s->bytes,
			  (unsigned long long)s->bytes);
	}
	sb_free(&a);
	free(L);
	sb_printf(b, "</section>\n");
}

/* ---- 3. refresh time against link bandwidth ---- */

static void sec_refresh(rep *R)
{
	sbuf *b = &R->out;
	const report_input *in = R->in;
	const pstep *s = step_of(R, R->version);
	section_begin(b, "refresh", "Refresh time against link bandwidth", s != NULL);
	if (!s || !s->params) {
		missing(b, "needs the patch file of the detailed version (bfpatch report PATCH...).");
		sb_printf(b, "</section>\n");
		return;
	}
	static const double dflt_links[3] = {1e9, 1e10, 1e11};
	const double *links = in->n_links ? in->link_bps : dflt_links;
	size_t n_links = in->n_links ? in->n_links : 3;
	double wire = (double)s->bytes + (double)WIRE_OVERHEAD * (double)s->frames;
	double bpp = wire / (double)s->params;
	double frac = (double)s->changed / (double)s->params;
	struct {
		char name[48];
		double n;
		const char *colour;
	} sz[4] = {{"", (double)s->params, "#3182bd"},
		   {"8B", 8e9, "#31a354"},
		   {"14B", 14e9, "#e6550d"},
		   {"70B", 70e9, "#756bb1"}};
	char t1[32], t2[32];
	fmt_plain(t1, sizeof(t1), (double)s->params);
	snprintf(sz[0].name, sizeof(sz[0].name), "measured (%s)", t1);
	sb_printf(b, "<p>Time to move one refresh over a link of the given rate: dense BF16 "
		  "(2 bytes per parameter; dashed) against this patch (solid): version %u, %llu "
		  "bytes in %llu frames plus %u bytes of Ethernet/IPv4/UDP headers per frame = "
		  "%.5g bytes per parameter. The 8B, 14B and 70B lines scale that to the parameter "
		  "count at the measured changed fraction (%.3f%%) and bits per changed parameter "
		  "(%.2f); they are transfer time only (encode and apply are in the timeline).",
		  s->target_v, (unsigned long long)s->bytes, (unsigned long long)s->frames,
		  WIRE_OVERHEAD, bpp, 100 * frac, bits_per_changed(s));
	if (in->rollout_max_s > 0) {
		svg_secs(t1, sizeof(t1), in->rollout_min_s);
		svg_secs(t2, sizeof(t2), in->rollout_max_s);
		sb_printf(b, " The band is the rollout window (%s to %s): a refresh below it hides "
			  "behind generation.", t1, t2);
	} else {
		sb_printf(b, " No rollout window given (--rollout), so no band.");
	}
	sb_printf(b, "</p>\n");
	double lmin = links[0], lmax = links[0];
	for (size_t i = 0; i < n_links; i++) {
		lmin = fmin(lmin, links[i]);
		lmax = fmax(lmax, links[i]);
	}
	svg_axis xa = {pow(10, floor(log10(lmin / 3))), pow(10, ceil(log10(lmax * 3))), 90, 620, 1};
	double tmin = bpp * sz[0].n * 8 / xa.hi, tmax = 2 * 70e9 * 8 / xa.lo;
	for (int k = 0; k < 4; k++)
		tmin = fmin(tmin, bpp * sz[k].n * 8 / xa.hi);
	if (in->rollout_max_s > 0) {
		tmin = fmin(tmin, in->rollout_min_s);
		tmax = fmax(tmax, in->rollout_max_s);
	}
	/* the measured end-to-end point, if the logs have one */
	tline *L = malloc(sizeof(*L));
	double meas_rate = -1, meas_t = -1;
	if (L && timeline(R, R->version, L) && L->enc_begin >= 0 && L->last_commit >= 0) {
		for (size_t i = 0; i < R->n_ev; i++)
			if (ev_is(&R->ev[i], SRC_PUBLISH, "start", -1) && L->pub_id &&
			    !strcmp(R->ev[i].id, L->pub_id))
				meas_rate = jnum(R->ev[i].o, "rate_bps", -1);
		meas_t = L->last_commit - L->enc_begin;
		if (!(meas_rate > 0))
			meas_rate = -1;
		if (meas_rate > 0 && meas_t > 0) {
			tmin = fmin(tmin, meas_t);
			tmax = fmax(tmax, meas_t);
			xa.lo = fmin(xa.lo, pow(10, floor(log10(meas_rate))));
			xa.hi = fmax(xa.hi, pow(10, ceil(log10(meas_rate * 1.01))));
		}
	}
	svg_axis ya = {pow(10, floor(log10(tmin))), pow(10, ceil(log10(tmax))), 400, 20, 1};
	svg_begin(b, 900, 450, "refresh-chart", "refresh time against link bandwidth");
	if (in->rollout_max_s > 0) {
		char title[96];
		snprintf(title, sizeof(title), "rollout window %s to %s", t1, t2);
		double y0 = svg_map(&ya, in->rollout_max_s), y1 = svg_map(&ya, in->rollout_min_s);
		sb_printf(b, "<g opacity=\"0.35\">");
		svg_rect(b, xa.px0, y0, xa.px1 - xa.px0, fmax(y1 - y0, 2), "#fdd835", title,
			 "data-band=\"rollout\"");
		sb_printf(b, "</g>\n");
	}
	svg_xaxis(b, &xa, 400, 20, fmt_rate, "link rate");
	svg_yaxis(b, &ya, 90, 620, fmt_secs, "refresh transfer time");
	sbuf a = {0};
	for (int k = 0; k < 4; k++)
		for (int dense = 0; dense < 2; dense++) {
			double bytes = dense ? 2 * sz[k].n : bpp * sz[k].n;
			double xs[2] = {xa.px0, xa.px1};
			double ys[2] = {svg_map(&ya, bytes * 8 / xa.lo), svg_map(&ya, bytes * 8 / xa.hi)};
			char title[400];
			snprintf(title, sizeof(title), "%s %s: %.6g bytes per refresh", sz[k].name,
				 dense ? "dense BF16" : "sparse", bytes);
			a.n = 0;
			sb_printf(&a, "data-series=\"%s\" data-size=\"%s\" data-bytes=\"%.17g\"",
				  dense ? "dense" : "sparse", k ? sz[k].name : "measured", bytes);
			b->oom |= a.oom;
			svg_polyline(b, xs, ys, 2, sz[k].colour, dense ? 1.5 : 2.5, dense ? "6 4" : NULL,
				     title, a.p);
			for (size_t i = 0; i < n_links; i++) {
				char tt[32], rt[32];
				double tm = bytes * 8 / links[i];
				svg_secs(tt, sizeof(tt), tm);
				fmt_rate(rt, sizeof(rt), links[i]);
				snprintf(title, sizeof(title), "%s %s at %s: %s", sz[k].name,
					 dense ? "dense" : "sparse", rt, tt);
				a.n = 0;
				sb_printf(&a, "data-point=\"%s\" data-size=\"%s\" data-link=\"%.17g\" "
					  "data-s=\"%.17g\"", dense ? "dense" : "sparse",
					  k ? sz[k].name : "measured", links[i], tm);
				b->oom |= a.oom;
				svg_circle(b, svg_map(&xa, links[i]), svg_map(&ya, tm), 3.5, sz[k].colour,
					   title, a.p);
			}
		}
	if (meas_rate > 0 && meas_t > 0) {
		char title[160], tt[32], rt[32];
		svg_secs(tt, sizeof(tt), meas_t);
		fmt_rate(rt, sizeof(rt), meas_rate);
		snprintf(title, sizeof(title), "measured: publish to last commit of version %u, "
			 "%s, publisher paced at %s", R->version, tt, rt);
		a.n = 0;
		sb_printf(&a, "data-measured-s=\"%.17g\" data-link=\"%.17g\"", meas_t, meas_rate);
		b->oom |= a.oom;
		double x = svg_map(&xa, meas_rate), y = svg_map(&ya, meas_t);
		svg_rect(b, x - 5, y - 5, 10, 10, "#000000", title, a.p);
	}
	/* legend */
	for (int k = 0; k < 4; k++) {
		double y = 30 + k * 18;
		svg_line(b, 640, y, 670, y, sz[k].colour, 2.5, NULL);
		svg_line(b, 675, y, 705, y, sz[k].colour, 1.5, "6 4");
		svg_text(b, 712, y + 4, "start", 11, sz[k].name);
	}
	svg_text(b, 640, 16, "start", 10, "sparse   dense");
	if (meas_rate > 0 && meas_t > 0) {
		svg_rect(b, 650, 30 + 4 * 18 - 5, 10, 10, "#000000", NULL, NULL);
		svg_text(b, 712, 30 + 4 * 18 + 4, "start", 11, "measured end to end");
	}
	svg_end(b);
	sb_free(&a);
	/* table */
	sb_printf(b, "<table class=\"num\" id=\"refresh-table\"><tr><th>model</th><th>coding</th>");
	for (size_t i = 0; i < n_links; i++) {
		fmt_rate(t1, sizeof(t1), links[i]);
		sb_printf(b, "<th>%s</th>", t1);
	}
	sb_printf(b, "</tr>\n");
	for (int k = 0; k < 4; k++)
		for (int dense = 0; dense < 2; dense++) {
			double bytes = dense ? 2 * sz[k].n : bpp * sz[k].n;
			sb_printf(b, "<tr><td>%s</td><td>%s</td>", sz[k].name, dense ? "dense BF16" : "sparse");
			for (size_t i = 0; i < n_links; i++) {
				double tm = bytes * 8 / links[i];
				int fits = in->rollout_max_s > 0 && tm <= in->rollout_min_s;
				svg_secs(t1, sizeof(t1), tm);
				sb_printf(b, "<td data-s=\"%.17g\"%s>%s%s</td>", tm,
					  fits ? " class=\"fits\"" : "", t1,
					  in->rollout_max_s > 0 ? (fits ? " &#10003;" : "") : "");
			}
			sb_printf(b, "</tr>\n");
		}
	sb_printf(b, "</table>\n");
	if (in->rollout_max_s > 0)
		sb_printf(b, "<p>&#10003;: fits under the shortest rollout.</p>\n");
	free(L);
	sb_printf(b, "</section>\n");
}

/* ---- 4. overlap timeline ---- */

static const char *const stage_colour[] = {"#9e9ac8", "#3182bd", "#74c476", "#d9d9d9",
					   "#fd8d3c", "#e7298a"};

static void tl_bar(sbuf *b, sbuf *a, const svg_axis *xa, double y, const tline *L,
		   const char *actor, const char *stage, int colour, double t0, double t1)
{
	if (t0 < 0 || t1 < 0 || t1 < t0)
		return;
	char title[256], d[32], s0[32];
	svg_secs(d, sizeof(d), t1 - t0);
	svg_secs(s0, sizeof(s0), t0 - L->t0);
	snprintf(title, sizeof(title), "%.60s %s: %s, from +%s", actor, stage, d, s0);
	a->n = 0;
	sb_printf(a, "data-stage=\"%s\" data-actor=\"", stage);
	sb_esc(a, actor);
	sb_printf(a, "\" data-t0=\"%.17g\" data-t1=\"%.17g\"", t0 - L->t0, t1 - L->t0);
	b->oom |= a->oom;
	double x0 = svg_map(xa, t0 - L->t0), x1 = svg_map(xa, t1 - L->t0);
	svg_rect(b, x0, y + 3, fmax(x1 - x0, 1.5), 14, stage_colour[colour], title, a->p);
}

static void sec_timeline(rep *R)
{
	sbuf *b = &R->out;
	tline *L = malloc(sizeof(*L));
	if (!L) {
		b->oom = 1;
		return;
	}
	int ok = timeline(R, R->version, L);
	section_begin(b, "timeline", "Overlap timeline of one published version", ok);
	if (!ok) {
		char m[256];
		snprintf(m, sizeof(m), "%s of version %u (--events FILE for the publisher, relays "
			 "and shims, docs/EVENTS.md).",
			 R->n_ev ? "the event logs have no events" : "needs the event logs", R->version);
		missing(b, m);
		sb_printf(b, "</section>\n");
		free(L);
		return;
	}
	double tend = 0;
	for (size_t i = 0; i < R->n_ev; i++)
		if (R->ev[i].version == (int64_t)R->version)
			tend = fmax(tend, R->ev[i].t - L->t0);
	sb_printf(b, "<p>Version %u, time from %s. Publisher: encode (encode_begin to "
		  "encode_end) and wire (first frame out to last frame out). Relays: first frame "
		  "in. Each actor: stage (first frame in until every frame is staged), waiting "
		  "for its safe point, apply + verify (the shim logs them as one span, "
		  "apply_begin to apply_end), commit.</p>\n", R->version,
		  L->enc_begin >= 0 ? "the publisher's encode_begin"
				    : "the first logged event (the publisher's log is missing)");
	size_t rows = (L->pub_id ? 2 : 0) + L->n_relays + L->n_shims;
	const double lab = 190, top = 34, rowh = 22;
	int H = (int)(top + rowh * (double)rows + 50);
	svg_begin(b, 900, H, "timeline-chart", "stages per process on one time axis");
	svg_axis xa = {0, tend > 0 ? tend * 1.05 : 1, lab, 860, 0};
	double ybot = top + rowh * (double)rows + 4;
	svg_xaxis(b, &xa, ybot, top - 4, fmt_secs, "time since publish");
	static const char *const leg[6] = {"encode", "wire", "stage", "wait for safe point",
					   "apply + verify", "commit"};
	for (int k = 0; k < 6; k++) {
		svg_rect(b, lab + k * 110, 8, 10, 10, stage_colour[k], NULL, NULL);
		svg_text(b, lab + k * 110 + 14, 17, "start", 10, leg[k]);
	}
	sbuf a = {0};
	double y = top;
	char lbl[128];
	if (L->pub_id) {
		snprintf(lbl, sizeof(lbl), "publish %.40s: encode", L->pub_id);
		svg_text(b, lab - 6, y + 14, "end", 11, lbl);
		tl_bar(b, &a, &xa, y, L, L->pub_id, "encode", 0, L->enc_begin, L->enc_end);
		y += rowh;
		snprintf(lbl, sizeof(lbl), "publish %.40s: wire", L->pub_id);
		svg_text(b, lab - 6, y + 14, "end", 11, lbl);
		tl_bar(b, &a, &xa, y, L, L->pub_id, "wire", 1, L->first, L->send_end);
		y += rowh;
	}
	for (size_t i = 0; i < L->n_relays; i++) {
		snprintf(lbl, sizeof(lbl), "relay %.40s", L->relay_id[i]);
		svg_text(b, lab - 6, y + 14, "end", 11, lbl);
		if (L->relay_first[i] >= 0) {
			char title[160], d[32];
			svg_secs(d, sizeof(d), L->relay_first[i] - L->t0);
			snprintf(title, sizeof(title), "relay %.60s: first frame in at +%s",
				 L->relay_id[i], d);
			a.n = 0;
			sb_printf(&a, "data-stage=\"relay_first_frame\" data-actor=\"");
			sb_esc(&a, L->relay_id[i]);
			sb_printf(&a, "\" data-t0=\"%.17g\"", L->relay_first[i] - L->t0);
			b->oom |= a.oom;
			svg_circle(b, svg_map(&xa, L->relay_first[i] - L->t0), y + 10, 5, "#525252",
				   title, a.p);
		}
		y += rowh;
	}
	for (size_t i = 0; i < L->n_shims; i++) {
		const shim_tl *s = &L->shims[i];
		snprintf(lbl, sizeof(lbl), "shim %.40s%s", s->id, s->key ? " (keyframes)" : "");
		svg_text(b, lab - 6, y + 14, "end", 11, lbl);
		tl_bar(b, &a, &xa, y, L, s->id, "stage", 2, s->first, s->staged);
		tl_bar(b, &a, &xa, y, L, s->id, "wait", 3, s->staged, s->apply_begin);
		tl_bar(b, &a, &xa, y, L, s->id, "apply_verify", 4, s->apply_begin, s->apply_end);
		tl_bar(b, &a, &xa, y, L, s->id, "commit", 5, s->apply_end, s->commit);
		y += rowh;
	}
	sb_free(&a);
	svg_end(b);
	/* table of the same numbers */
	sb_printf(b, "<table class=\"num\" id=\"timeline-table\"><tr><th>process</th><th>stage</th>"
		  "<th>from</th><th>to</th><th>duration</th></tr>\n");
	span r[2 + 4 * 256];
	size_t n = 0;
	if (L->pub_id) {
		r[n++] = (span){L->pub_id, "encode", L->enc_begin, L->enc_end};
		r[n++] = (span){L->pub_id, "wire", L->first, L->send_end};
	}
	for (size_t i = 0; i < L->n_shims; i++) {
		const shim_tl *s = &L->shims[i];
		r[n++] = (span){s->id, "stage", s->first, s->staged};
		r[n++] = (span){s->id, "wait", s->staged, s->apply_begin};
		r[n++] = (span){s->id, "apply + verify", s->apply_begin, s->apply_end};
		r[n++] = (span){s->id, "commit", s->apply_end, s->commit};
	}
	for (size_t i = 0; i < n; i++) {
		char f[32], t[32], d[32];
		sb_printf(b, "<tr><td>");
		sb_esc(b, r[i].who);
		if (r[i].a < 0 || r[i].b < 0 || r[i].b < r[i].a) {
			sb_printf(b, "</td><td>%s</td><td colspan=\"3\" class=\"na\">not in the log</td>"
				  "</tr>\n", r[i].name);
			continue;
		}
		svg_secs(f, sizeof(f), r[i].a - L->t0);
		svg_secs(t, sizeof(t), r[i].b - L->t0);
		svg_secs(d, sizeof(d), r[i].b - r[i].a);
		sb_printf(b, "</td><td>%s</td><td>+%s</td><td>+%s</td><td>%s</td></tr>\n", r[i].name,
			  f, t, d);
	}
	sb_printf(b, "</table>\n");
	if (L->enc_begin >= 0 && L->last_commit >= 0) {
		char d[32];
		svg_secs(d, sizeof(d), L->last_commit - L->enc_begin);
		sb_printf(b, "<p id=\"publish-to-last-commit\" data-s=\"%.17g\">Publish to last "
			  "commit: <b>%s</b>; longest stage apart from waiting for the actor's safe "
			  "point: ", L->last_commit - L->enc_begin, d);
		sb_esc(b, L->bottleneck ? L->bottleneck : "n/a");
		sb_printf(b, ".</p>\n");
	}
	sb_printf(b, "</section>\n");
	free(L);
}

/* ---- 5. topology ---- */

typedef struct tnode {
	int src;               /* SRC_*, or -1 for a peer address only */
	const char *id;        /* process id, or the peer "ip:port" */
	const char *addr;      /* "addr" of its start event, if any */
	int col;
	double x, y;
	char line[4][160];
	char attrs[256];
} tnode;

static const evt *last_ev(const rep *R, int src, const char *id, const char *ev)
{
	const evt *r = NULL;
	for (size_t i = 0; i < R->n_ev; i++)
		if (ev_is(&R->ev[i], src, ev, -1) && !strcmp(R->ev[i].id, id))
			r = &R->ev[i];
	return r;
}

static void node_text(const rep *R, const tline *L, tnode *n, int64_t pub_last)
{
	char a[32], c[32], d[32];
	const evt *st = last_ev(R, n->src, n->id, "stats");
	const evt *start = last_ev(R, n->src, n->id, "start");
	static const char *const kind[3] = {"publisher", "shim", "relay"};
	snprintf(n->line[0], sizeof(n->line[0]), "%s %.60s", kind[n->src], n->id);
	if (n->src == SRC_PUBLISH) {
		if (start && jnum(start->o, "rate_bps", -1) >= 0) {
			double r = jnum(start->o, "rate_bps", 0);
			fmt_rate(a, sizeof(a), r);
			snprintf(n->line[1], sizeof(n->line[1]), "paced at %s",
				 r > 0 ? a : "no limit");
		}
		if (st) {
			fmt_bytes(a, sizeof(a), jnum(st->o, "bytes", 0));
			snprintf(n->line[2], sizeof(n->line[2]), "sent %.0f frames, %s",
				 jnum(st->o, "frames", 0), a);
			snprintf(n->line[3], sizeof(n->line[3]), "%.0f NACKs, %.0f frames resent",
				 jnum(st->o, "nacks", 0), jnum(st->o, "resent", 0));
			snprintf(n->attrs, sizeof(n->attrs), "data-frames=\"%.0f\" data-bytes=\"%.0f\" "
				 "data-nacks=\"%.0f\" data-resent=\"%.0f\"", jnum(st->o, "frames", 0),
				 jnum(st->o, "bytes", 0), jnum(st->o, "nacks", 0),
				 jnum(st->o, "resent", 0));
		} else {
			snprintf(n->line[2], sizeof(n->line[2]), "no stats event (still running?)");
		}
	} else if (n->src == SRC_RELAY) {
		if (start) {
			const double ports = jnum(start->o, "ports", 0), lcores = jnum(start->o, "lcores", 0);
			snprintf(n->line[1], sizeof(n->line[1]), "%s%.40s%s%.0f port%s, %.0f lcore%s",
				 n->addr ? "at " : "", n->addr ? n->addr : "", n->addr ? ", " : "",
				 ports, ports == 1 ? "" : "s", lcores, lcores == 1 ? "" : "s");
		}
		if (st) {
			snprintf(n->line[2], sizeof(n->line[2]), "rx %.0f, tx %.0f, %.0f NACKs",
				 jnum(st->o, "rx", 0), jnum(st->o, "tx", 0), jnum(st->o, "nacks", 0));
			snprintf(n->line[3], sizeof(n->line[3]), "repair cache: %.0f hits, %.0f misses",
				 jnum(st->o, "cache_hits", 0), jnum(st->o, "cache_misses", 0));
			snprintf(n->attrs, sizeof(n->attrs), "data-rx=\"%.0f\" data-tx=\"%.0f\" "
				 "data-nacks=\"%.0f\" data-cache-hits=\"%.0f\"", jnum(st->o, "rx", 0),
				 jnum(st->o, "tx", 0), jnum(st->o, "nacks", 0),
				 jnum(st->o, "cache_hits", 0));
		} else {
			snprintf(n->line[2], sizeof(n->line[2]), "no stats event (still running?)");
		}
	} else {
		const shim_tl *s = NULL;
		for (size_t i = 0; i < L->n_shims; i++)
			if (!strcmp(L->shims[i].id, n->id))
				s = &L->shims[i];
		int64_t last = -1;
		for (size_t i = 0; i < R->n_ev; i++)
			if (ev_is(&R->ev[i], SRC_SHIM, "commit", -1) && !strcmp(R->ev[i].id, n->id) &&
			    R->ev[i].version > last)
				last = R->ev[i].version;
		double lag = s && s->commit >= 0 && L->enc_begin >= 0 ? s->commit - L->enc_begin : -1;
		double rate = s && s->staged > s->first && s->first >= 0 && s->staged_bytes >= 0
				      ? s->staged_bytes * 8 / (s->staged - s->first) : -1;
		if (lag >= 0)
			svg_secs(a, sizeof(a), lag);
		else
			snprintf(a, sizeof(a), "n/a");
		snprintf(n->line[1], sizeof(n->line[1]), "v%u committed %s after publish", L->version, a);
		if (rate > 0)
			fmt_rate(c, sizeof(c), rate);
		else
			snprintf(c, sizeof(c), "n/a");
		snprintf(n->line[2], sizeof(n->line[2]), "rx v%u at %s, %lld NACKed",
			 L->version, c, (long long)(s ? s->nack_frames : 0));
		if (last >= 0 && pub_last >= 0)
			snprintf(d, sizeof(d), "%lld behind", (long long)(pub_last - last));
		else
			snprintf(d, sizeof(d), "lag n/a");
		if (st)
			snprintf(n->line[3], sizeof(n->line[3]), "at v%lld (%s); %.0f NACKs, %.0f bad",
				 (long long)last, d, jnum(st->o, "nacks", 0), jnum(st->o, "bad", 0));
		else
			snprintf(n->line[3], sizeof(n->line[3]), "at v%lld (%s)", (long long)last, d);
		snprintf(n->attrs, sizeof(n->attrs), "data-lag-s=\"%.17g\" data-rx-rate=\"%.17g\" "
			 "data-nack-frames=\"%lld\" data-last-commit=\"%lld\"", lag, rate,
			 (long long)(s ? s->nack_frames : 0), (long long)last);
	}
}

static void sec_topology(rep *R)
{
	sbuf *b = &R->out;
	section_begin(b, "topology", "Topology", R->n_nodes > 0);
	if (!R->n_nodes) {
		missing(b, "needs the event logs of the publisher, relays and shims "
			   "(--events FILE, docs/EVENTS.md).");
		sb_printf(b, "</section>\n");
		return;
	}
	tline *L = malloc(sizeof(*L));
	size_t cap = R->n_nodes + R->n_ev;
	tnode *N = calloc(cap, sizeof(tnode));
	struct edge {
		size_t from, to;
		char label[96];
	} *E = calloc(R->n_ev + 1, sizeof(*E));
	if (!L || !N || !E) {
		free(L);
		free(N);
		free(E);
		b->oom = 1;
		return;
	}
	timeline(R, R->version, L);
	int64_t pub_last = -1;
	for (size_t i = 0; i < R->n_ev; i++)
		if (ev_is(&R->ev[i], SRC_PUBLISH, "encode_begin", -1) && R->ev[i].version > pub_last)
			pub_last = R->ev[i].version;
	size_t nn = 0, ne = 0;
	for (size_t i = 0; i < R->n_nodes; i++) {
		tnode *n = &N[nn++];
		n->src = R->nodes[i].src;
		n->id = R->nodes[i].id;
		n->col = n->src == SRC_PUBLISH ? 0 : n->src == SRC_RELAY ? 1 : 2;
		const evt *st = last_ev(R, n->src, n->id, "start");
		n->addr = st ? jstr(st->o, "addr") : NULL;
		node_text(R, L, n, pub_last);
		if (n->addr) /* for the reader and the test: where its subscribers send */
			snprintf(n->attrs + strlen(n->attrs), sizeof(n->attrs) - strlen(n->attrs),
				 "%sdata-addr=\"%.60s\"", n->attrs[0] ? " " : "", n->addr);
	}
	size_t n_proc = nn;
	/* edges from subscriber events: to the process whose start names the
	 * peer's address, else to a node for the address alone */
	for (size_t i = 0; i < R->n_ev; i++) {
		const evt *e = &R->ev[i];
		if (strcmp(e->ev, "subscriber") || e->src == SRC_SHIM)
			continue;
		const char *peer = jstr(e->o, "peer");
		if (!peer)
			continue;
		size_t from = 0, to = SIZE_MAX;
		for (size_t k = 0; k < n_proc; k++)
			if (N[k].src == e->src && !strcmp(N[k].id, e->id))
				from = k;
		for (size_t k = 0; k < nn; k++)
			if ((N[k].addr && !strcmp(N[k].addr, peer)) ||
			    (N[k].src < 0 && !strcmp(N[k].id, peer)))
				to = k;
		if (to == SIZE_MAX) {
			tnode *n = &N[nn];
			to = nn++;
			n->src = -1;
			n->id = peer;
			n->col = N[from].col + 1;
			/* the JOIN's version: two values are not versions
			 * (PROTOCOL.md, JOIN) */
			const int relay = e->version == RP_VERSION_RELAY;
			snprintf(n->line[0], sizeof(n->line[0]), "%s %.60s",
				 relay ? "relay" : "subscriber", peer);
			if (relay)
				snprintf(n->line[1], sizeof(n->line[1]), "a relay (holds no weights)");
			else if (e->version == RP_VERSION_NONE)
				snprintf(n->line[1], sizeof(n->line[1]),
					 "joined with no version (keyframes)");
			else if (e->version >= 0)
				snprintf(n->line[1], sizeof(n->line[1]), "joined at v%lld",
					 (long long)e->version);
			snprintf(n->line[2], sizeof(n->line[2]), "(no log names this address)");
		}
		struct edge *g = &E[ne++];
		g->from = from;
		g->to = to;
		double r = jnum(e->o, "rate_bps", -1);
		if (r < 0 && e->src == SRC_PUBLISH) {
			const evt *st = last_ev(R, SRC_PUBLISH, e->id, "start");
			r = st ? jnum(st->o, "rate_bps", -1) : -1;
		}
		char rt[32];
		fmt_rate(rt, sizeof(rt), r);
		snprintf(g->label, sizeof(g->label), "%s", r > 0 ? rt : r == 0 ? "unpaced" : "");
	}
	size_t per_col[4] = {0};
	for (size_t k = 0; k < nn; k++) {
		if (N[k].col > 2)
			N[k].col = 2;
		N[k].x = 10 + N[k].col * 310;
		N[k].y = 30 + (double)per_col[N[k].col]++ * 84;
	}
	size_t maxc = 1;
	for (int c = 0; c < 4; c++)
		maxc = per_col[c] > maxc ? per_col[c] : maxc;
	sb_printf(b, "<p>Processes found in the event logs, their counters (stats events, written "
		  "on exit) and, for version %u, each actor's publish-to-commit lag, receive rate "
		  "and NACKed frames. Links come from subscriber events; a subscriber address is "
		  "joined to the shim or relay whose start event gives it as <code>addr</code>, "
		  "and stands alone when no log given does.</p>\n", R->version);
	svg_begin(b, 900, (int)(40 + 84 * (double)maxc), "topology-chart",
		  "publisher, relays and actors with per-link rates");
	static const char *const head[4] = {"publisher", "relays / subscribers", "actors / subscribers",
					    "subscribers"};
	for (int c = 0; c < 4; c++)
		if (per_col[c])
			svg_text(b, 10 + c * 310, 16, "start", 12, head[c]);
	for (size_t i = 0; i < ne; i++) {
		const tnode *f = &N[E[i].from], *t = &N[E[i].to];
		sb_printf(b, "<g data-edge-from=\"");
		sb_esc(b, f->id);
		sb_printf(b, "\" data-edge-to=\"");
		sb_esc(b, t->id);
		sb_printf(b, "\">");
		svg_line(b, f->x + 235, f->y + 37, t->x, t->y + 37, "#636363", 1.5, NULL);
		if (E[i].label[0])
			svg_text(b, t->x - 4, t->y + 33, "end", 10, E[i].label);
		sb_printf(b, "</g>\n");
	}
	static const char *const fill[3] = {"#deebf7", "#e5f5e0", "#fee6ce"};
	for (size_t k = 0; k < nn; k++) {
		const tnode *n = &N[k];
		sb_printf(b, "<g data-node=\"");
		sb_esc(b, n->id);
		sb_printf(b, "\" data-kind=\"%s\" %s>", n->src == SRC_PUBLISH ? "publish"
			  : n->src == SRC_SHIM ? "shim" : n->src == SRC_RELAY ? "relay" : "peer",
			  n->attrs);
		svg_rect(b, n->x, n->y, 235, 74, n->src >= 0 ? fill[n->src] : "#f0f0f0", NULL,
			 "stroke=\"#636363\" rx=\"6\"");
		for (int l = 0; l < 4; l++)
			if (n->line[l][0])
				svg_text(b, n->x + 6, n->y + 16 + l * 16, "start", l ? 10 : 11, n->line[l]);
		sb_printf(b, "</g>\n");
	}
	svg_end(b);
	free(L);
	free(N);
	free(E);
	sb_printf(b, "</section>\n");
}

/* ---- the page ---- */

static const char css[] =
	"body{font-family:sans-serif;margin:24px auto;max-width:960px;color:#222}"
	"h1{font-size:22px}h2{font-size:17px;border-bottom:1px solid #ccc;padding-bottom:3px;"
	"margin-top:28px}p{font-size:13px;line-height:1.45}"
	"table.num{border-collapse:collapse;font-size:12px;margin:8px 0}"
	"table.num td,table.num th{border:1px solid #ddd;padding:2px 6px;text-align:right}"
	"table.num td:first-child,table.num th:first-child{text-align:left}"
	"tr.detail{background:#fff7bc}td.na{color:#999}td.fits{background:#e5f5e0}"
	"p.missing{background:#fff3f3;border-left:4px solid #e34a33;padding:6px 10px}"
	"svg.chart{display:block;margin:8px 0}code{font-size:12px}";

/* Once the browser has laid the page out: the number of marks with an
 * area in each chart (data-drawn) and the page height (data-height), for
 * the browser test and its full-page screenshot. The page works without it. */
static const char script[] =
	"<script>for(const s of document.querySelectorAll('svg.chart')){let n=0;"
	"for(const e of s.querySelectorAll('rect,circle,polyline')){const b=e.getBBox();"
	"if(b.width>0&&b.height>0)n++;}s.setAttribute('data-drawn',String(n));}"
	"document.body.setAttribute('data-height',String(document.documentElement.scrollHeight));"
	"</script>\n";

static void sec_inputs(rep *R)
{
	sbuf *b = &R->out;
	const report_input *in = R->in;
	sb_printf(b, "<section id=\"inputs\" data-status=\"ok\">\n<h2>Inputs</h2>\n<ul>\n");
	for (size_t i = 0; i < R->n_steps; i++) {
		sb_printf(b, "<li>patch <code>");
		sb_esc(b, R->steps[i].path);
		sb_printf(b, "</code>: version %u &#8594; %u, %llu frames, %llu bytes%s</li>\n",
			  R->steps[i].base_v, R->steps[i].target_v,
			  (unsigned long long)R->steps[i].frames, (unsigned long long)R->steps[i].bytes,
			  R->steps[i].have_ckpt ? "; checkpoints verified (base + patch = target)" : "");
	}
	if (in->trajectory) {
		sb_printf(b, "<li>trajectory <code>");
		sb_esc(b, in->trajectory);
		sb_printf(b, "</code></li>\n");
	}
	if (R->ck_note[0]) {
		sb_printf(b, "<li>checkpoints of version %u: ", R->version);
		sb_esc(b, R->ck_note);
		sb_printf(b, "</li>\n");
	}
	for (size_t i = 0; i < in->n_events; i++) {
		sb_printf(b, "<li>event log <code>");
		sb_esc(b, in->events[i]);
		sb_printf(b, "</code></li>\n");
	}
	sb_printf(b, "<li>%zu events from %zu processes</li>\n", R->n_ev, R->n_nodes);
	if (R->ev_note[0]) {
		sb_printf(b, "<li>");
		sb_esc(b, R->ev_note);
		sb_printf(b, "</li>\n");
	}
	sb_printf(b, "</ul>\n</section>\n");
}

static void page(rep *R)
{
	sbuf *b = &R->out;
	const char *title = R->in->title ? R->in->title : "bfpatch report";
	sb_printf(b, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
		  "<title>");
	sb_esc(b, title);
	sb_printf(b, "</title>\n<style>%s</style></head>\n<body>\n<h1>", css);
	sb_esc(b, title);
	sb_printf(b, "</h1>\n<p>bfpatch %s. ", BFP_VERSION_STRING);
	if (R->n_steps)
		sb_printf(b, "Model id <code>%016llx</code>. ", (unsigned long long)R->model_id);
	sb_printf(b, "Version %u is detailed. Every number on this page is computed from the "
		  "inputs listed at the end; sections whose input is missing say so.</p>\n",
		  R->version);
	sec_summary(R);
	sec_heatmap(R);
	sec_budget(R);
	sec_refresh(R);
	sec_timeline(R);
	sec_topology(R);
	sec_inputs(R);
	sb_printf(b, "%s</body></html>\n", script);
}

static void rep_free(rep *R)
{
	for (size_t i = 0; i < R->n_ts; i++)
		free(R->ts[i].name);
	free(R->ts);
	for (size_t i = 0; i < R->n_ev; i++)
		json_decref(R->ev[i].o);
	free(R->ev);
	free(R->steps);
	sb_free(&R->out);
}

int report_write(const report_input *in, const char *out_path, char *err, size_t errlen)
{
	rep *R = calloc(1, sizeof(*R));
	if (!R) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	R->in = in;
	R->err = err;
	R->errlen = errlen;
	int rc = -1;
	if (!out_path || !*out_path) {
		fail(R, "no output file");
		goto out;
	}
	if (!in->n_patches && !in->n_events) {
		fail(R, "nothing to report: give patch files and/or event logs");
		goto out;
	}
	if (in->rollout_min_s < 0 || in->rollout_max_s < in->rollout_min_s ||
	    (in->rollout_max_s > 0 && !(in->rollout_min_s > 0))) {
		fail(R, "the rollout window must satisfy 0 < min <= max");
		goto out;
	}
	if ((in->n_links && !in->link_bps) || (in->n_patches && !in->patches) ||
	    (in->n_events && !in->events)) {
		fail(R, "a count without its array in report_input");
		goto out;
	}
	for (size_t i = 0; i < in->n_links; i++)
		if (!(in->link_bps[i] >= 1e3 && in->link_bps[i] <= 1e13)) {
			fail(R, "link rate %g bit/s is out of range", in->link_bps[i]);
			goto out;
		}
	if (load_patches(R) || load_events(R))
		goto out;
	/* the detailed version */
	R->detail = R->n_steps;
	if (in->version) {
		R->version = in->version;
	} else if (R->n_steps) {
		R->version = R->steps[R->n_steps - 1].target_v;
	} else {
		for (size_t i = 0; i < R->n_ev; i++)
			if (ev_is(&R->ev[i], SRC_SHIM, "commit", -1) && R->ev[i].version > 0 &&
			    R->ev[i].version <= UINT32_MAX && (uint32_t)R->ev[i].version > R->version)
				R->version = (uint32_t)R->ev[i].version;
	}
	for (size_t i = 0; i < R->n_steps; i++)
		if (R->steps[i].target_v == R->version)
			R->detail = i;
	if (in->version && R->n_steps && R->detail == R->n_steps) {
		fail(R, "no patch of version %u among the patch files", in->version);
		goto out;
	}
	if (load_checkpoints(R))
		goto out;
	page(R);
	if (R->out.oom) {
		fail(R, "out of memory");
		goto out;
	}
	const void *bufs[1] = {R->out.p};
	size_t lens[1] = {R->out.n};
	rc = out_write(out_path, in->replace, NULL, bufs, lens, 1, err, errlen);
out:
	rep_free(R);
	free(R);
	return rc;
}

/* ---- command line ---- */

/* --trajectory DIR: it must be a directory, and out none of its
 * checkpoints (prints why and returns 1) */
static int trajectory_holds(const char *out, const char *dir)
{
	DIR *d = opendir(dir);
	if (!d) {
		fprintf(stderr, "bfpatch report: --trajectory %s: %s\n", dir, strerror(errno));
		return 1;
	}
	int bad = 0;
	for (struct dirent *e; !bad && (e = readdir(d));) {
		if (strncmp(e->d_name, "step-", 5))
			continue;
		char p[PATH_MAX];
		if (snprintf(p, sizeof(p), "%s/%s", dir, e->d_name) < (int)sizeof(p))
			bad = refuse_same("report", out, p, "checkpoint");
	}
	closedir(d);
	return bad != 0;
}

static const char usage[] =
	"usage: bfpatch report -o PAGE.html [options] [PATCH...]\n"
	"Write one self-contained HTML page (inline SVG charts) showing where a\n"
	"weight sync's bytes and time go: changed-weight heatmap, patch packaging\n"
	"budget against dense BF16 and PULSESync-style, refresh time against link\n"
	"bandwidth, overlap timeline, topology and a summary. Every number comes\n"
	"from the inputs; sections without their input say what is missing.\n"
	"  -o, --output PAGE       HTML file to write (atomically; -: standard output)\n"
	"  -f, --force             replace PAGE if it exists (else refused)\n"
	"  -T, --trajectory DIR    checkpoints DIR/step-NNNN.safetensors of the\n"
	"                          patches' versions (heatmap, PULSESync-style)\n"
	"  -B, --base FILE         base checkpoint of the detailed patch\n"
	"  -G, --target FILE       its target (default: base + patch, verified)\n"
	"  -e, --events FILE       event log of the publisher, a relay or a shim\n"
	"                          (docs/EVENTS.md); repeat for each process\n"
	"  -L, --link LIST         link rates, e.g. 1gbit,10gbit,400mbit\n"
	"                          (default 1gbit,10gbit,100gbit)\n"
	"  -r, --rollout MIN[-MAX] rollout window, e.g. 20s-40s or 500ms-2s\n"
	"  -n, --step N            target version to detail (default: the newest)\n"
	"  -t, --title TEXT        page heading\n"
	"  -q, --quiet             nothing on stderr but errors\n"
	"  -v, --verbose           also every input the page is made from\n"
	"  -h, --help\n";

/* "10gbit", "2.5g", "400mbit/s", "1e9": bit/s. */
static int parse_rate(const char *s, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || !(v > 0))
		return -1;
	switch (tolower((unsigned char)*end)) {
	case 'k': v *= 1e3; end++; break;
	case 'm': v *= 1e6; end++; break;
	case 'g': v *= 1e9; end++; break;
	case 't': v *= 1e12; end++; break;
	default: break;
	}
	if (*end && strcasecmp(end, "bit") && strcasecmp(end, "bit/s") && strcasecmp(end, "bps") &&
	    strcasecmp(end, "b"))
		return -1;
	if (!(v >= 1e3 && v <= 1e13))
		return -1;
	*out = v;
	return 0;
}

/* "20s", "500ms", "1.5min", "30": seconds. */
static int parse_secs(const char *s, const char *stop, double *out)
{
	char buf[64], *end;
	size_t n = (size_t)(stop - s);
	if (n == 0 || n >= sizeof(buf))
		return -1;
	memcpy(buf, s, n);
	buf[n] = 0;
	errno = 0;
	double v = strtod(buf, &end);
	if (errno || end == buf || !(v > 0))
		return -1;
	if (!strcmp(end, "ms"))
		v /= 1e3;
	else if (!strcmp(end, "min"))
		v *= 60;
	else if (*end && strcmp(end, "s"))
		return -1;
	if (!(v <= 1e6))
		return -1;
	*out = v;
	return 0;
}

static int parse_rollout(const char *s, double *lo, double *hi)
{
	const char *dash = strchr(s, '-');
	if (!dash)
		dash = s + strlen(s);
	if (parse_secs(s, dash, lo))
		return -1;
	if (!*dash) {
		*hi = *lo;
		return 0;
	}
	if (parse_secs(dash + 1, dash + 1 + strlen(dash + 1), hi) || *hi < *lo)
		return -1;
	return 0;
}

int report_main(int argc, char **argv)
{
	static const struct option lo[] = {
		{"output", required_argument, 0, 'o'}, {"trajectory", required_argument, 0, 'T'},
		{"base", required_argument, 0, 'B'}, {"target", required_argument, 0, 'G'},
		{"events", required_argument, 0, 'e'}, {"link", required_argument, 0, 'L'},
		{"rollout", required_argument, 0, 'r'}, {"step", required_argument, 0, 'n'},
		{"title", required_argument, 0, 't'}, {"force", no_argument, 0, 'f'},
		{"quiet", no_argument, 0, 'q'}, {"verbose", no_argument, 0, 'v'},
		{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	report_input in;
	memset(&in, 0, sizeof(in));
	const char *out = NULL;
	const char **ev = calloc((size_t)argc + 1, sizeof(char *));
	double links[64];
	size_t n_ev = 0, n_links = 0;
	int c, rc = 2, verbosity = 1;
	if (!ev) {
		fputs("bfpatch report: out of memory\n", stderr);
		return 1;
	}
	while ((c = getopt_long(argc, argv, "o:T:B:G:e:L:r:n:t:fqvh", lo, NULL)) != -1) {
		switch (c) {
		case 'o': out = optarg; break;
		case 'f': in.replace = 1; break;
		case 'T': in.trajectory = optarg; break;
		case 'B': in.base = optarg; break;
		case 'G': in.target = optarg; break;
		case 'e': ev[n_ev++] = optarg; break;
		case 'L': {
			char *dup = strdup(optarg), *save = NULL, *tok;
			int bad = !dup;
			n_links = 0;
			for (tok = dup ? strtok_r(dup, ",", &save) : NULL; tok && !bad;
			     tok = strtok_r(NULL, ",", &save))
				bad = n_links == 64 || parse_rate(tok, &links[n_links++]);
			free(dup);
			if (bad || !n_links) {
				fprintf(stderr, "bfpatch report: invalid value '%s' for --link "
					"(e.g. 1gbit,10gbit)\n", optarg);
				goto out;
			}
			break;
		}
		case 'r':
			if (parse_rollout(optarg, &in.rollout_min_s, &in.rollout_max_s)) {
				fprintf(stderr, "bfpatch report: invalid value '%s' for --rollout "
					"(e.g. 20s-40s)\n", optarg);
				goto out;
			}
			break;
		case 'n': {
			char *end;
			errno = 0;
			unsigned long v = strtoul(optarg, &end, 10);
			if (errno || *end || end == optarg || v == 0 || v > UINT32_MAX ||
			    optarg[0] == '-') {
				fprintf(stderr, "bfpatch report: invalid value '%s' for --step\n", optarg);
				goto out;
			}
			in.version = (uint32_t)v;
			break;
		}
		case 't': in.title = optarg; break;
		case 'q': verbosity = 0; break;
		case 'v': verbosity = 2; break;
		case 'h': fputs(usage, stdout); rc = 0; goto out;
		default: fputs(usage, stderr); goto out;
		}
	}
	if (!out) {
		fputs("bfpatch report: -o PAGE.html is required\n", stderr);
		fputs(usage, stderr);
		goto out;
	}
	if (out_is_stdout(out))
		goto checked; /* no input is replaced */
	/* the page must not take the place of an input */
	for (int i = optind; i < argc; i++)
		if (refuse_same("report", out, argv[i], "patch"))
			goto out;
	for (size_t i = 0; i < n_ev; i++)
		if (refuse_same("report", out, ev[i], "event log"))
			goto out;
	if (refuse_same("report", out, in.base, "base checkpoint") ||
	    refuse_same("report", out, in.target, "target checkpoint") ||
	    (in.trajectory && trajectory_holds(out, in.trajectory)))
		goto out;
	if ((rc = out_check("report", out, in.replace, 0, NULL)) != 0)
		goto out;
checked:
	in.patches = (const char *const *)(argv + optind);
	in.n_patches = (size_t)(argc - optind);
	in.events = ev;
	in.n_events = n_ev;
	in.link_bps = n_links ? links : NULL;
	in.n_links = n_links;
	char err[1024] = "";
	if (report_write(&in, out, err, sizeof(err))) {
		fprintf(stderr, "bfpatch report: %s\n", err);
		rc = 1;
		goto out;
	}
	if (verbosity > 1) {
		for (size_t i = 0; i < in.n_patches; i++)
			fprintf(stderr, "bfpatch report: patch %s\n", in.patches[i]);
		for (size_t i = 0; i < n_ev; i++)
			fprintf(stderr, "bfpatch report: event log %s\n", ev[i]);
		if (in.trajectory)
			fprintf(stderr, "bfpatch report: trajectory %s\n", in.trajectory);
		if (in.base)
			fprintf(stderr, "bfpatch report: base %s\n", in.base);
		if (in.target)
			fprintf(stderr, "bfpatch report: target %s\n", in.target);
	}
	if (verbosity)
		fprintf(stderr, "bfpatch report: wrote %s (%zu patch%s, %zu event log%s)\n",
			out_is_stdout(out) ? "standard output" : out, in.n_patches,
			in.n_patches == 1 ? "" : "es", n_ev, n_ev == 1 ? "" : "s");
	rc = 0;
out:
	free(ev);
	return rc;
}
