/*
 * patch.c: multi-threaded patch encode and apply over the codec. Work is
 * split into fixed chunks (tensor boundaries and PATCH_CHUNK) so output
 * bytes are the same for any thread count; frames are indexed at the end,
 * and the header records a patch file carries (FORMAT.md 4.1) follow.
 */
#define _GNU_SOURCE
#include "patch.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int cpu_count(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
}

void cpu_name(char *out, size_t n)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[256];
	snprintf(out, n, "unknown");
	while (f && fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "model name", 10)) {
			char *c = strchr(line, ':');
			if (c) {
				snprintf(out, n, "%s", c + 2);
				out[strcspn(out, "\n")] = 0;
			}
			break;
		}
	}
	if (f)
		fclose(f);
}

void patch_free(patch *p)
{
	free(p->buf);
	free(p->off);
	free(p->rec);
	memset(p, 0, sizeof(*p));
}

static int reserve(patch *p, size_t add)
{
	if (p->len + add > p->cap) {
		size_t nc = (p->len + add) * 3 / 2 + 65536;
		uint8_t *nb = realloc(p->buf, nc);
		if (!nb)
			return -1;
		p->buf = nb;
		p->cap = nc;
	}
	return 0;
}

int patch_push(patch *p, const void *frame, size_t len)
{
	if (reserve(p, len))
		return -1;
	if (p->n + 1 >= p->off_cap) {
		size_t nc = p->off_cap * 2 + 64;
		size_t *no = realloc(p->off, nc * sizeof(size_t));
		if (!no)
			return -1;
		p->off = no;
		p->off_cap = nc;
	}
	memcpy(p->buf + p->len, frame, len);
	p->off[p->n++] = p->len;
	p->len += len;
	p->off[p->n] = p->len;
	return 0;
}

typedef patch_range range;

typedef struct enc_job {
	const uint16_t *base, *target;
	uint64_t n;
	uint64_t model_id;
	const patch_opts *o;
	range *chunks;
	size_t n_chunks;
	patch *parts;           /* one frame list per chunk */
	atomic_size_t next;
	atomic_int failed;
	atomic_uint_fast64_t done_params;
	atomic_size_t chunks_done;
	atomic_uint_fast64_t changed;
	int status;
	/* streaming (o->stream): workers push frames and mark chunks done
	 * under mu; the calling thread sends the in-order prefix */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint8_t *chunk_done;
} enc_job;

/* Workers tell the streaming sender about a frame, a finished chunk or a
 * failure; without streaming there is nobody to tell. */
static void enc_notify(enc_job *j, size_t c, int chunk_done)
{
	if (!j->o->stream)
		return;
	pthread_mutex_lock(&j->mu);
	if (chunk_done)
		j->chunk_done[c] = 1;
	pthread_cond_signal(&j->cv);
	pthread_mutex_unlock(&j->mu);
}

/* The last chunk is done: every other worker's parts are complete (the
 * chunk counter orders their writes before this), and the streaming
 * sender only reads them. */
static void enc_encoded(enc_job *j)
{
	size_t frames = 0, bytes = 0;
	for (size_t c = 0; c < j->n_chunks; c++) {
		frames += j->parts[c].n;
		bytes += j->parts[c].len;
	}
	j->o->encoded(j->o->stream_arg, frames, bytes, atomic_load(&j->changed));
}

static int enc_push(enc_job *j, size_t c, const uint8_t *frame, size_t len)
{
	if (!j->o->stream)
		return patch_push(&j->parts[c], frame, len);
	pthread_mutex_lock(&j->mu);
	int rc = patch_push(&j->parts[c], frame, len);
	pthread_cond_signal(&j->cv);
	pthread_mutex_unlock(&j->mu);
	return rc;
}

static void *enc_worker(void *arg)
{
	enc_job *j = arg;
	bfp_encoder *enc = malloc(sizeof(*enc));
	uint8_t frame[BFP_FRAME_SIZE_MAX];
	if (!enc) {
		atomic_store(&j->failed, 1);
		return NULL;
	}
	bfp_encode_opts eo;
	memset(&eo, 0, sizeof(eo));
	eo.frame_size = j->o->frame_size;
	eo.model_id = j->model_id;
	eo.base_version = j->o->base_version;
	eo.target_version = j->o->target_version;
	eo.flags = j->o->enc_flags | (j->o->stages ? BFP_ENC_F_STAGES : 0);
	eo.sparse = j->o->sparse;
	eo.frame_count = 1; /* fixed up by patch_finish() */
	void *ws = NULL;
	if (eo.flags & BFP_ENC_F_ZSTD) {
		eo.zstd_workspace_size = bfp_zstd_workspace_size();
		eo.zstd_workspace = ws = malloc(eo.zstd_workspace_size ? eo.zstd_workspace_size : 1);
	}
	bfp_status st = bfp_encoder_init(enc, &eo, j->base, j->target, j->n, 0, 0);
	if (st != BFP_OK) {
		j->status = st;
		atomic_store(&j->failed, 1);
	}
	for (;;) {
		size_t c = atomic_fetch_add(&j->next, 1);
		if (c >= j->n_chunks || atomic_load(&j->failed))
			break;
		st = bfp_encoder_reset(enc, j->base, j->target, j->n,
				       j->chunks[c].begin, j->chunks[c].end, 0);
		size_t len;
		while (st == BFP_OK) {
			st = bfp_encode_next(enc, frame, sizeof(frame), &len);
			if (st == BFP_OK && enc_push(j, c, frame, len))
				st = BFP_E_SPACE;
		}
		if (st != BFP_DONE) {
			j->status = st;
			atomic_store(&j->failed, 1);
			enc_notify(j, c, 0);
			break;
		}
		atomic_fetch_add(&j->done_params, j->chunks[c].end - j->chunks[c].begin);
		atomic_fetch_add(&j->changed, bfp_encoder_changed(enc));
		if (atomic_fetch_add(&j->chunks_done, 1) + 1 == j->n_chunks && j->o->encoded)
			enc_encoded(j);
		enc_notify(j, c, 1);
	}
	patch_stages *ps = j->o->stages;
	bfp_stage_counts sc;
	if (ps && bfp_encoder_stages(enc, &sc) == BFP_OK) { /* this thread's share */
		for (unsigned k = 0; k < BFP_STAGES; k++)
			__atomic_fetch_add(&ps->ticks[k], sc.ticks[k], __ATOMIC_RELAXED);
		__atomic_fetch_add(&ps->listed, sc.listed, __ATOMIC_RELAXED);
		__atomic_fetch_add(&ps->sized, sc.sized, __ATOMIC_RELAXED);
	}
	free(ws);
	free(enc);
	return NULL;
}

void patch_stages_print(FILE *f, const char *prefix, const patch_stages *st, double wall)
{
	static const char *const name[BFP_STAGES] = {
		"gather", "batch", "model", "plan", "cut", "write", "other", "hash", "all"};
	const double all = (double)st->ticks[BFP_STAGE_ALL];
	if (all == 0) {
		fprintf(f, "%sno stage times: this CPU has no cycle counter the encoder reads\n",
			prefix);
		return;
	}
	fprintf(f, "%s", prefix);
	uint64_t parts = 0;
	for (unsigned k = 0; k < BFP_STAGE_ALL; k++) {
		fprintf(f, "%s %.1f%%", name[k], 100.0 * (double)st->ticks[k] / all);
		fputs(k + 1 < BFP_STAGE_ALL ? ", " : "", f);
		parts += st->ticks[k];
	}
	fprintf(f, "; rest %.1f%%\n", 100.0 * (all - (double)parts) / all);
	if (!st->sized || !st->changed)
		return;
	fprintf(f, "%sticks a change: ", prefix);
	if (st->listed) /* none when every frame took its changes from a batch */
		fprintf(f, "gather %.1f a listed one (its pass over the parameters included), ",
			(double)st->ticks[BFP_STAGE_GATHER] / (double)st->listed);
	fprintf(f, "cut %.1f a sized one, write %.1f a written one; %.1f a written change in all",
		(double)st->ticks[BFP_STAGE_CUT] / (double)st->sized,
		(double)st->ticks[BFP_STAGE_WRITE] / (double)st->changed, all / (double)st->changed);
	if (wall > 0)
		fprintf(f, " (%.1f ns; %.2f G ticks/s)", wall * 1e9 / (double)st->changed,
			all / wall / 1e9);
	fputc('\n', f);
}

typedef struct workers {
	pthread_t tid[256];
	int started;
} workers;

/* Start n workers (0: one per online CPU); with none started, the work is
 * done here before this returns. */
static void threads_start(workers *t, int n, void *(*fn)(void *), void *arg)
{
	n = n > 0 ? n : cpu_count();
	if (n > 256)
		n = 256;
	t->started = 0;
	for (int i = 0; i < n; i++) {
		if (pthread_create(&t->tid[t->started], NULL, fn, arg) != 0)
			break;
		t->started++;
	}
	if (t->started == 0)
		fn(arg);
}

static void threads_join(workers *t)
{
	for (int i = 0; i < t->started; i++)
		pthread_join(t->tid[i], NULL);
	t->started = 0;
}

static int run_threads(int nthreads, void *(*fn)(void *), void *arg,
		       atomic_uint_fast64_t *done, uint64_t total, int progress,
		       const char *what)
{
	workers t;
	threads_start(&t, nthreads, fn, arg);
	if (progress && done) {
		struct timespec ts = {0, 200 * 1000 * 1000};
		int last = -1;
		for (;;) {
			uint64_t d = atomic_load(done);
			int pct = total ? (int)(d * 100 / total) : 100;
			if (pct / 10 != last / 10 || pct == 100) {
				fprintf(stderr, "%s: %3d%% (%llu of %llu parameters)\n", what, pct,
					(unsigned long long)d, (unsigned long long)total);
				last = pct;
			}
			if (d >= total)
				break;
			int alive = 0;
			for (int i = 0; i < t.started; i++)
				if (pthread_tryjoin_np(t.tid[i], NULL) == EBUSY)
					alive = 1;
				else
					t.tid[i] = t.tid[--t.started], i--;
			if (!alive)
				break;
			nanosleep(&ts, NULL);
		}
	}
	threads_join(&t);
	return 0;
}

/* Streaming: hand the frames of the finished prefix of chunks to
 * o->stream in index order, with frame_count 0 (FORMAT.md 2.5), while the
 * workers encode the rest. Frames are copied out under the lock, since a
 * worker may grow its chunk's buffer meanwhile. */
static void stream_frames(enc_job *j)
{
	enum { BATCH = 64 };
	uint8_t *buf = malloc((size_t)BATCH * BFP_FRAME_SIZE_MAX);
	uint8_t *fr[BATCH];
	size_t len[BATCH];
	size_t c = 0, sent = 0;
	uint32_t index = 0;
	if (!buf) {
		atomic_store(&j->failed, 1);
		return;
	}
	pthread_mutex_lock(&j->mu);
	while (c < j->n_chunks && !atomic_load(&j->failed)) {
		patch *pc = &j->parts[c];
		if (sent < pc->n) {
			size_t k = pc->n - sent < BATCH ? pc->n - sent : BATCH, at = 0;
			for (size_t i = 0; i < k; i++) {
				len[i] = pc->off[sent + i + 1] - pc->off[sent + i];
				fr[i] = buf + at;
				memcpy(fr[i], pc->buf + pc->off[sent + i], len[i]);
				at += len[i];
			}
			sent += k;
			pthread_mutex_unlock(&j->mu);
			for (size_t i = 0; i < k; i++)
				bfp_frame_set_index(fr[i], len[i], index++, 0);
			j->o->stream(j->o->stream_arg, fr, len, k);
			pthread_mutex_lock(&j->mu);
		} else if (j->chunk_done[c]) {
			c++;
			sent = 0;
		} else {
			pthread_cond_wait(&j->cv, &j->mu);
		}
	}
	pthread_mutex_unlock(&j->mu);
	free(buf);
}

/* Concatenate parts in chunk order and assign indices 0..n-1 of n. */
static int patch_finish(patch *parts, size_t n_parts, patch *out, char *err,
			size_t errlen)
{
	size_t total = 0, bytes = 0;
	memset(out, 0, sizeof(*out));
	for (size_t c = 0; c < n_parts; c++) {
		total += parts[c].n;
		bytes += parts[c].len;
	}
	if (total > UINT32_MAX)
		return set_err(err, errlen, "patch would have more than 2^32 frames");
	/* sized once: a dense patch is as big as the model */
	out->buf = malloc(bytes ? bytes : 1);
	out->off = malloc((total + 1) * sizeof(size_t));
	if (!out->buf || !out->off) {
		patch_free(out);
		return set_err(err, errlen, "out of memory");
	}
	out->cap = bytes;
	out->off_cap = total + 1;
	for (size_t c = 0; c < n_parts; c++) {
		for (size_t i = 0; i < parts[c].n; i++) {
			uint8_t *f = parts[c].buf + parts[c].off[i];
			size_t fl = parts[c].off[i + 1] - parts[c].off[i];
			bfp_frame_set_index(f, fl, (uint32_t)out->n, (uint32_t)total);
			if (patch_push(out, f, fl))
				return set_err(err, errlen, "out of memory");
		}
		patch_free(&parts[c]);
	}
	return 0;
}

static int encode_chunks(const uint16_t *base, const uint16_t *target,
			 uint64_t n, uint64_t model_id, const patch_opts *o,
			 range *chunks, size_t n_chunks, patch *out, char *err,
			 size_t errlen)
{
	enc_job j;
	memset(&j, 0, sizeof(j));
	j.base = base;
	j.target = target;
	j.n = n;
	j.model_id = model_id;
	j.o = o;
	j.chunks = chunks;
	j.n_chunks = n_chunks;
	j.parts = calloc(n_chunks ? n_chunks : 1, sizeof(patch));
	j.chunk_done = calloc(n_chunks ? n_chunks : 1, 1);
	if (!j.parts || !j.chunk_done) {
		free(j.parts);
		free(j.chunk_done);
		return set_err(err, errlen, "out of memory");
	}
	if (o->stream) {
		workers t;
		pthread_mutex_init(&j.mu, NULL);
		pthread_cond_init(&j.cv, NULL);
		threads_start(&t, o->threads, enc_worker, &j);
		stream_frames(&j);
		threads_join(&t);
		pthread_cond_destroy(&j.cv);
		pthread_mutex_destroy(&j.mu);
	} else {
		run_threads(o->threads, enc_worker, &j, &j.done_params, n, o->progress, "diff");
	}
	if (n_chunks == 0 && o->encoded)
		o->encoded(o->stream_arg, 0, 0, 0);
	if (o->stages)
		o->stages->changed += atomic_load(&j.changed);
	int rc = 0;
	if (atomic_load(&j.failed))
		rc = set_err(err, errlen, "encode failed: %s",
			  j.status ? bfp_status_str((bfp_status)j.status) : "out of memory");
	else
		rc = patch_finish(j.parts, n_chunks, out, err, errlen);
	for (size_t c = 0; c < n_chunks; c++)
		patch_free(&j.parts[c]);
	free(j.parts);
	free(j.chunk_done);
	return rc;
}

static size_t add_chunks(range **v, size_t *n, size_t *cap, uint64_t b, uint64_t e)
{
	while (b < e) {
		uint64_t x = e - b > PATCH_CHUNK ? b + PATCH_CHUNK : e;
		if (*n == *cap) {
			*cap = *cap * 2 + 64;
			range *nv = realloc(*v, *cap * sizeof(range));
			if (!nv)
				return 0;
			*v = nv;
		}
		(*v)[(*n)++] = (range){b, x};
		b = x;
	}
	return 1;
}

int patch_encode_arrays(const uint16_t *base, const uint16_t *target,
			uint64_t n, uint64_t model_id, const patch_opts *o,
			patch *out, char *err, size_t errlen)
{
	range *ch = NULL;
	size_t nc = 0, cap = 0;
	if (!add_chunks(&ch, &nc, &cap, 0, n))
		return set_err(err, errlen, "out of memory");
	int rc = encode_chunks(base, target, n, model_id, o, ch, nc, out, err, errlen);
	free(ch);
	return rc;
}

int patch_encode_ranges(const uint16_t *base, const uint16_t *target, uint64_t n_params,
			uint64_t model_id, const patch_opts *o, const patch_range *r, size_t n,
			patch *out, char *err, size_t errlen)
{
	range *ch = NULL;
	size_t nc = 0, cap = 0;
	memset(out, 0, sizeof(*out));
	for (size_t i = 0; i < n; i++)
		if (!add_chunks(&ch, &nc, &cap, r[i].begin, r[i].end)) {
			free(ch);
			return set_err(err, errlen, "out of memory");
		}
	int rc = encode_chunks(base, target, n_params, model_id, o, ch, nc, out, err, errlen);
	free(ch);
	return rc;
}

frame_changes frame_changes_keep(const bfp_decoder *d, const bfp_frame_header *h,
				 uint32_t *pos, uint16_t *val)
{
	const uint32_t *p;
	const uint16_t *v;
	const uint32_t n = bfp_decoder_changes(d, &p, &v);
	if (n) {
		memcpy(pos, p, (size_t)n * sizeof(*pos));
		memcpy(val, v, (size_t)n * sizeof(*val));
	}
	return (frame_changes){h->range_begin, n, h->range_len, pos, val};
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* Room for one more record index entry. */
static int rec_reserve(patch *p)
{
	patch_record *r = realloc(p->rec, (p->n_rec + 1) * sizeof(*r));
	if (!r)
		return -1;
	p->rec = r;
	return 0;
}

int patch_add_record(patch *p, uint32_t kind, uint32_t file, uint32_t files,
		     const void *bytes, size_t len)
{
	bfp_frame_header h;
	if (!p->n || bfp_frame_parse(p->buf, p->off[1], &h) != BFP_OK)
		return -1;
	const size_t total = PATCH_REC_FIXED + len + 4;
	if (reserve(p, total) || rec_reserve(p))
		return -1;
	/* FORMAT.md 4.1, the record's fields */
	uint8_t *r = p->buf + p->len;
	memset(r, 0, PATCH_REC_FIXED);
	put_le(r, PATCH_REC_MAGIC, 4);
	r[4] = 1; /* record_version */
	r[5] = (uint8_t)kind;
	put_le(r + 8, h.model_id, 8);
	put_le(r + 16, h.target_version, 4);
	put_le(r + 20, file, 4);
	put_le(r + 24, files, 4);
	put_le(r + 32, len, 8);
	memcpy(r + PATCH_REC_FIXED, bytes, len);
	put_le(r + PATCH_REC_FIXED + len, bfp_crc32c(0, r, PATCH_REC_FIXED + len), 4);
	p->rec[p->n_rec++] = (patch_record){kind, file, files, p->len + PATCH_REC_FIXED, len};
	p->len += total;
	return 0;
}

/* The records patch_encode adds: each file of nw whose header is not
 * old's, then a sharded checkpoint's index if it is not old's. */
static int add_records(const model *old, const model *nw, patch *out, char *err,
		       size_t errlen)
{
	const size_t files = model_n_files(nw);
	for (size_t k = 0; k < files; k++) {
		size_t la, lb;
		const uint8_t *a = model_file_header(old, k, &la), *b = model_file_header(nw, k, &lb);
		if ((la == lb && !memcmp(a, b, la)) || lb < 8)
			continue;
		if (patch_add_record(out, PATCH_REC_HEADER, (uint32_t)k, (uint32_t)files, b + 8,
				     lb - 8))
			return set_err(err, errlen, "out of memory");
	}
	if (nw->n_files && (old->index_len != nw->index_len ||
			    memcmp(old->index, nw->index, nw->index_len)) &&
	    patch_add_record(out, PATCH_REC_INDEX, 0, (uint32_t)files, nw->index, nw->index_len))
		return set_err(err, errlen, "out of memory");
	return 0;
}

int patch_encode(const model *old, const model *nw, const patch_opts *o,
		 patch *out, char *err, size_t errlen)
{
	range *ch = NULL;
	size_t nc = 0, cap = 0;
	if (old->n_params != nw->n_params || old->model_id != nw->model_id)
		return set_err(err, errlen, "the two models have different tensor layouts "
			    "(names, dtypes, shapes or offsets differ)");
	if (!model_same_files(old, nw))
		return set_err(err, errlen, "the two checkpoints are split into different files "
			       "(one file and shards, or other shard names or sizes)");
	/* chunks follow tensor boundaries (in words; a tensor starting at an
	 * odd byte shares its first word with the previous tensor) */
	uint64_t at = 0;
	for (size_t i = 0; i < nw->n_tensors; i++) {
		uint64_t e = (nw->tensors[i].byte_end + 1) / 2;
		if (e > at && !add_chunks(&ch, &nc, &cap, at, e)) {
			free(ch);
			return set_err(err, errlen, "out of memory");
		}
		if (e > at)
			at = e;
	}
	if (at < nw->n_params && !add_chunks(&ch, &nc, &cap, at, nw->n_params)) {
		free(ch);
		return set_err(err, errlen, "out of memory");
	}
	int rc = encode_chunks(old->params, nw->params, nw->n_params, nw->model_id,
			       o, ch, nc, out, err, errlen);
	free(ch);
	if (rc == 0 && add_records(old, nw, out, err, errlen)) {
		patch_free(out);
		return -1;
	}
	return rc;
}

/* The header records after the frames, from at to the end of p's bytes
 * (FORMAT.md 4.1: what a reader must reject). */
static int parse_records(patch *p, size_t at, const bfp_frame_header *first, char *err,
			 size_t errlen)
{
	free(p->rec);
	p->rec = NULL;
	p->n_rec = 0;
	while (at < p->len) {
		const uint8_t *r = p->buf + at;
		const size_t left = p->len - at, i = p->n_rec;
		if (left < 4 || get_le(r, 4) != PATCH_REC_MAGIC)
			return set_err(err, errlen, "byte %zu: after the last frame comes neither a "
				       "frame of the patch nor a header record", at);
		if (left < PATCH_REC_FIXED + 4)
			return set_err(err, errlen, "header record %zu: truncated", i);
		const uint64_t len = get_le(r + 32, 8);
		if (len > left - PATCH_REC_FIXED - 4)
			return set_err(err, errlen, "header record %zu: truncated (%llu bytes of "
				       "contents, %zu there)", i, (unsigned long long)len,
				       left - PATCH_REC_FIXED - 4);
		if (get_le(r + PATCH_REC_FIXED + len, 4) !=
		    bfp_crc32c(0, r, PATCH_REC_FIXED + (size_t)len))
			return set_err(err, errlen, "header record %zu: CRC mismatch", i);
		const uint32_t kind = r[5], file = (uint32_t)get_le(r + 20, 4),
			       files = (uint32_t)get_le(r + 24, 4);
		if (r[4] != 1)
			return set_err(err, errlen, "header record %zu: record version %u, not 1", i,
				       r[4]);
		if (kind != PATCH_REC_HEADER && kind != PATCH_REC_INDEX)
			return set_err(err, errlen, "header record %zu: unknown kind %u", i, kind);
		if (get_le(r + 6, 2) || get_le(r + 28, 4))
			return set_err(err, errlen, "header record %zu: reserved bits set", i);
		if (get_le(r + 8, 8) != first->model_id ||
		    get_le(r + 16, 4) != first->target_version)
			return set_err(err, errlen, "header record %zu: of another model or version "
				       "than the frames", i);
		if (files == 0 || file >= files || (kind == PATCH_REC_INDEX && file != 0))
			return set_err(err, errlen, "header record %zu: file %u of %u", i, file, files);
		if (i && (files != p->rec[i - 1].files || kind < p->rec[i - 1].kind ||
			  (kind == p->rec[i - 1].kind && file <= p->rec[i - 1].file)))
			return set_err(err, errlen, "header record %zu: out of order or repeated", i);
		if (kind == PATCH_REC_HEADER && (len < 2 || len > (100u << 20)))
			return set_err(err, errlen, "header record %zu: a header of %llu bytes", i,
				       (unsigned long long)len);
		if (rec_reserve(p))
			return set_err(err, errlen, "out of memory");
		p->rec[p->n_rec++] = (patch_record){kind, file, files, at + PATCH_REC_FIXED,
						    (size_t)len};
		at += PATCH_REC_FIXED + (size_t)len + 4;
	}
	return 0;
}

static uint8_t *dup_bytes(const uint8_t *b, size_t n)
{
	uint8_t *c = malloc(n ? n : 1);
	if (c && n)
		memcpy(c, b, n);
	return c;
}

/* The headers and index of t (a shallow copy of a model) as copies of
 * their own, or (undo) freed again. */
static int own_headers(model *t, int undo)
{
	const model_file *src = t->files;
	if (undo) {
		for (size_t k = 0; t->files && k < t->n_files; k++)
			free(t->files[k].header);
		free(t->files);
		free(t->header);
		free(t->index);
		return 0;
	}
	t->files = NULL;
	if (t->n_files && (t->files = calloc(t->n_files, sizeof(model_file))))
		for (size_t k = 0; k < t->n_files; k++) {
			t->files[k] = src[k]; /* the name stays the model's */
			t->files[k].header = dup_bytes(src[k].header, src[k].header_len);
		}
	t->header = t->header ? dup_bytes(t->header, t->header_len) : NULL;
	t->index = t->index ? dup_bytes(t->index, t->index_len) : NULL;
	return 0;
}

int patch_apply_records(const patch *p, model *m, char *err, size_t errlen)
{
	if (!p->n_rec)
		return 0;
	if (p->rec[0].files != model_n_files(m))
		return set_err(err, errlen, "the patch's header records are for a checkpoint of %u "
			       "file(s); the base has %zu", p->rec[0].files, model_n_files(m));
	/* every record put into a copy first: m changes only if all pass */
	model t = *m;
	own_headers(&t, 0);
	int rc = (m->n_files && !t.files) || (m->header && !t.header) || (m->index && !t.index)
			 ? set_err(err, errlen, "out of memory")
			 : 0;
	for (size_t k = 0; !rc && k < t.n_files; k++)
		if (!t.files[k].header)
			rc = set_err(err, errlen, "out of memory");
	for (size_t i = 0; !rc && i < p->n_rec; i++) {
		const patch_record *r = &p->rec[i];
		rc = r->kind == PATCH_REC_HEADER
			     ? model_set_header(&t, r->file, p->buf + r->off, r->len, err, errlen)
			     : model_set_index(&t, p->buf + r->off, r->len, err, errlen);
	}
	if (rc) {
		own_headers(&t, 1);
		return -1;
	}
	/* m takes the new headers, t the base's, and frees them */
	for (size_t k = 0; k < m->n_files; k++) {
		uint8_t *h = m->files[k].header;
		m->files[k].header = t.files[k].header;
		m->files[k].header_len = t.files[k].header_len;
		t.files[k].header = h;
	}
	uint8_t *h = m->header;
	m->header = t.header;
	m->header_len = t.header_len;
	t.header = h;
	h = m->index;
	m->index = t.index;
	m->index_len = t.index_len;
	t.index = h;
	own_headers(&t, 1); /* now the base's */
	return 0;
}

int patch_parse(patch *p, char *err, size_t errlen)
{
	size_t at = 0;
	bfp_frame_header first, h;
	const uint8_t *buf = p->buf;
	const size_t len = p->len;
	uint64_t end = 0; /* where the frames so far end */
	/* (re)build the frame index over the bytes in p->buf */
	memset(&first, 0, sizeof(first));
	p->n = 0;
	/* the frames, up to the count frame 0 gives; then header records */
	while (at < len && (p->n == 0 || p->n < first.frame_count)) {
		size_t fl;
		bfp_status st = bfp_frame_length(buf + at, len - at, &fl);
		if (st == BFP_OK)
			st = bfp_frame_parse(buf + at, fl, &h);
		if (st != BFP_OK)
			return set_err(err, errlen, "frame %zu at byte %zu: %s", p->n, at,
				    bfp_status_str(st));
		if (h.frame_count == 0) /* FORMAT.md 4: files hold finished patches */
			return set_err(err, errlen, "frame %zu: frame_count 0 (a streamed frame) in "
				    "a patch file", p->n);
		if (p->n == 0)
			first = h;
		else if (h.model_id != first.model_id ||
			 h.target_version != first.target_version ||
			 (h.base_version != first.base_version &&
			  bfp_frame_in_patch(&h) && bfp_frame_in_patch(&first)))
			return set_err(err, errlen, "frame %zu: model or versions differ from frame 0", p->n);
		if (h.frame_index != p->n || h.frame_count != first.frame_count)
			return set_err(err, errlen, "frame %zu: index %u of %u out of sequence",
				    p->n, h.frame_index, h.frame_count);
		/* FORMAT.md 2.5: frame 0 begins at parameter 0 and each next
		 * frame where the one before ended */
		if (h.range_begin != end)
			return set_err(err, errlen, "frame %zu: range begins at parameter %llu, not "
				    "at %llu where the frame before ended: the frames do not tile "
				    "the model", p->n, (unsigned long long)h.range_begin,
				    (unsigned long long)end);
		end = h.range_begin + h.range_len;
		if (p->n + 1 >= p->off_cap) {
			size_t nc = p->off_cap * 2 + 64;
			size_t *no = realloc(p->off, nc * sizeof(size_t));
			if (!no)
				return set_err(err, errlen, "out of memory");
			p->off = no;
			p->off_cap = nc;
		}
		p->off[p->n++] = at;
		at += fl;
		p->off[p->n] = at;
	}
	if (p->n == 0)
		return set_err(err, errlen, "patch has no frames");
	if (p->n != first.frame_count)
		return set_err(err, errlen, "patch is truncated: %zu of %u frames", p->n,
			    first.frame_count);
	return parse_records(p, at, &first, err, errlen);
}

int patch_read(const char *path, patch *p, char *err, size_t errlen)
{
	struct stat sb;
	memset(p, 0, sizeof(*p));
	int fd = open_input(path, &sb, err, errlen);
	if (fd < 0)
		return -1;
	if (!strcmp(path, "-"))
		path = "standard input"; /* in messages */
	p->buf = malloc((size_t)sb.st_size + 1);
	if (!p->buf) {
		close(fd);
		return set_err(err, errlen, "%s: out of memory", path);
	}
	size_t got = 0;
	while (got < (size_t)sb.st_size) {
		ssize_t r = read(fd, p->buf + got, (size_t)sb.st_size - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	if (got != (size_t)sb.st_size) {
		patch_free(p);
		return set_err(err, errlen, "%s: read error", path);
	}
	p->len = got;
	char e2[256];
	if (patch_parse(p, e2, sizeof(e2))) {
		patch_free(p);
		return set_err(err, errlen, "%s: %s", path, e2);
	}
	return 0;
}

static int cmp_range(const void *a, const void *b)
{
	const range *x = a, *y = b;
	return x->begin < y->begin ? -1 : (x->begin > y->begin);
}

/* Ranges r[0..n) (sorted here) tile [0, n_params) exactly. */
static int check_tiling(range *r, size_t n, uint64_t n_params, char *err, size_t errlen)
{
	qsort(r, n, sizeof(range), cmp_range);
	uint64_t at = 0;
	for (size_t i = 0; i < n; i++) {
		if (r[i].begin != at)
			return set_err(err, errlen, "frames do not tile the model: %s at parameter %llu",
				       r[i].begin > at ? "gap" : "overlap", (unsigned long long)at);
		at = r[i].end;
	}
	if (at != n_params)
		return set_err(err, errlen, "frames cover %llu parameters, the model has %llu",
			       (unsigned long long)at, (unsigned long long)n_params);
	return 0;
}

/* The range of a frame that already passed bfp_frame_parse. */
static range frame_range(const uint8_t *f)
{
	uint64_t b = 0;
	uint32_t l = 0;
	for (int i = 7; i >= 0; i--)
		b = b << 8 | f[32 + i];
	for (int i = 3; i >= 0; i--)
		l = l << 8 | f[40 + i];
	return (range){b, b + l};
}

int patch_check_cover(const patch *p, uint64_t n_params, char *err, size_t errlen)
{
	range *r = malloc((p->n ? p->n : 1) * sizeof(range));
	if (!r)
		return set_err(err, errlen, "out of memory");
	for (size_t i = 0; i < p->n; i++)
		r[i] = frame_range(p->buf + p->off[i]);
	int rc = check_tiling(r, p->n, n_params, err, errlen);
	free(r);
	return rc;
}

int frames_check_cover(const uint8_t *const *frames, size_t n, uint64_t n_params, char *err,
		       size_t errlen)
{
	range *r = malloc((n ? n : 1) * sizeof(range));
	if (!r)
		return set_err(err, errlen, "out of memory");
	for (size_t i = 0; i < n; i++)
		r[i] = frame_range(frames[i]);
	int rc = check_tiling(r, n, n_params, err, errlen);
	free(r);
	return rc;
}

typedef struct apply_job {
	const uint8_t *const *frames;
	const uint32_t *lens;
	size_t n_frames;
	uint16_t *params;
	uint64_t n;
	uint64_t model_id;
	uint32_t base_version;
	int resume;
	const frame_changes *const *changes;
	const apply_ctl *ctl;
	atomic_uint workers;
	atomic_size_t next;
	atomic_int failed;
	atomic_uint_fast64_t done_params, skipped;
	size_t bad_frame;
	int status;
} apply_job;

/* Write n verified changes of the range at begin, journalled around the
 * writes when the commit keeps an undo journal. */
static void write_changes(const apply_job *j, unsigned worker, uint64_t begin,
			  const uint32_t *pos, const uint16_t *val, uint32_t n)
{
	const apply_ctl *c = j->ctl;
	const int journal = c && c->undo_note;
	uint16_t *w = j->params + begin;
	if (journal)
		c->undo_note(c->undo, worker, begin, pos, n);
	for (uint32_t k = 0; k < n; k++)
		w[pos[k]] = val[k];
	if (journal)
		c->undo_done(c->undo, worker);
}

/* Decode and verify delta frame f (nothing written), then write it
 * journalled: the journalled version of bfp_decode_apply. */
static bfp_status apply_journalled(apply_job *j, unsigned worker, bfp_decoder *dec,
				   const bfp_apply_opts *ao, const uint8_t *f, uint32_t len,
				   bfp_frame_header *h)
{
	/* a keyframe needs no journal: it applies to whatever its range
	 * holds, so one cut short is simply applied again (the encoding byte
	 * only picks the path: both calls check the whole frame) */
	if (len < BFP_HEADER_SIZE || !bfp_encoding_is_delta(f[5]))
		return bfp_decode_apply(dec, ao, f, len, j->params, j->n, h);
	bfp_status st = bfp_decode_verify(dec, ao, f, len, j->params, j->n, h);
	if (st != BFP_OK)
		return st;
	const uint32_t *pos;
	const uint16_t *val;
	const uint32_t n = bfp_decoder_changes(dec, &pos, &val);
	write_changes(j, worker, h->range_begin, pos, val, n);
	return BFP_OK;
}

static void *apply_worker(void *arg)
{
	apply_job *j = arg;
	const unsigned worker = atomic_fetch_add(&j->workers, 1);
	const int journal = j->ctl && j->ctl->undo_note;
	bfp_decoder *dec = malloc(sizeof(*dec));
	if (!dec || bfp_decoder_init(dec, 0) != BFP_OK) {
		free(dec);
		atomic_store(&j->failed, 1);
		return NULL;
	}
	bfp_apply_opts ao;
	memset(&ao, 0, sizeof(ao));
	ao.model_id = j->model_id;
	ao.base_version = j->base_version;
	ao.zstd_workspace_size = bfp_zstd_workspace_size();
	if (ao.zstd_workspace_size && !(ao.zstd_workspace = malloc(ao.zstd_workspace_size))) {
		free(dec);
		atomic_store(&j->failed, 1);
		return NULL;
	}
	for (;;) {
		size_t i = atomic_fetch_add(&j->next, 1);
		if (i >= j->n_frames || atomic_load(&j->failed))
			break;
		bfp_frame_header h;
		bfp_status st;
		const frame_changes *fc = j->changes ? j->changes[i] : NULL;
		if (fc) {
			write_changes(j, worker, fc->range_begin, fc->pos, fc->val, fc->n);
			int at = 0;
			st = bfp_frame_check_target(j->frames[i], j->lens[i], j->params, j->n, &at);
			if (st == BFP_OK && !at)
				st = BFP_E_HASH;
			h.range_len = fc->range_len; /* all that is used of h below */
		} else if ((st = bfp_decoder_model_for(dec, j->frames[i], j->lens[i], j->frames,
						       j->lens, j->n_frames)) != BFP_OK) {
			/* its model is not among the frames */
		} else if (journal) {
			st = apply_journalled(j, worker, dec, &ao, j->frames[i], j->lens[i], &h);
		} else {
			st = bfp_decode_apply(dec, &ao, j->frames[i], j->lens[i], j->params, j->n, &h);
		}
		if (j->resume && (st == BFP_E_HASH || st == BFP_E_CORRUPT)) {
			/* the frame passed its CRC, so its range is not at the
			 * base: fine if it is already at the target */
			int at = 0;
			if (bfp_frame_check_target(j->frames[i], j->lens[i], j->params, j->n, &at) ==
				    BFP_OK && at && bfp_frame_parse(j->frames[i], j->lens[i], &h) == BFP_OK) {
				st = BFP_OK;
				atomic_fetch_add(&j->skipped, 1);
			}
		}
		if (st != BFP_OK) {
			j->status = st;
			j->bad_frame = i;
			atomic_store(&j->failed, 1);
			break;
		}
		atomic_fetch_add(&j->done_params, h.range_len);
	}
	free(ao.zstd_workspace);
	free(dec);
	return NULL;
}

int patch_apply_frames(const uint8_t *const *frames, const uint32_t *lens, size_t n_frames,
		       uint16_t *params, uint64_t n_params, uint64_t model_id,
		       uint32_t base_version, const apply_ctl *ctl, apply_result *res, char *err,
		       size_t errlen)
{
	apply_job j;
	memset(&j, 0, sizeof(j));
	j.frames = frames;
	j.lens = lens;
	j.n_frames = n_frames;
	j.params = params;
	j.n = n_params;
	j.model_id = model_id;
	j.base_version = base_version;
	j.resume = ctl ? ctl->resume : 0;
	j.changes = ctl ? ctl->changes : NULL;
	j.ctl = ctl;
	run_threads(ctl ? ctl->threads : 0, apply_worker, &j, &j.done_params, n_params,
		    ctl ? ctl->progress : 0, "apply");
	if (res) {
		res->verified_bytes = 2 * atomic_load(&j.done_params); /* every range verified */
		res->skipped_frames = atomic_load(&j.skipped);
		res->bad_frame = j.bad_frame;
		res->status = j.status;
	}
	if (atomic_load(&j.failed))
		return set_err(err, errlen, "frame %zu: %s", j.bad_frame,
			    j.status ? bfp_status_str((bfp_status)j.status) : "out of memory");
	return 0;
}

int patch_apply(const patch *p, uint16_t *params, uint64_t n_params,
		uint64_t model_id, int threads, int progress, char *err,
		size_t errlen)
{
	bfp_frame_header h0;
	bfp_frame_parse(p->buf, p->off[1], &h0);
	if (h0.model_id != model_id)
		return set_err(err, errlen, "patch is for another model (model id %016llx, "
			    "base has %016llx)", (unsigned long long)h0.model_id,
			    (unsigned long long)model_id);
	if (patch_check_cover(p, n_params, err, errlen))
		return -1;
	/* all frames of the patch share one base version (checked by
	 * patch_parse); files written before FORMAT.md's IN_PATCH flag may
	 * hold keyframe-coded frames with base 0 among them */
	uint32_t base_version = h0.base_version;
	for (size_t i = 0; i < p->n; i++) {
		bfp_frame_header h;
		bfp_frame_parse(p->buf + p->off[i], p->off[i + 1] - p->off[i], &h);
		if (bfp_frame_in_patch(&h)) {
			base_version = h.base_version;
			break;
		}
	}
	const uint8_t **f = malloc(p->n * sizeof(*f));
	uint32_t *l = malloc(p->n * sizeof(*l));
	if (!f || !l) {
		free(f);
		free(l);
		return set_err(err, errlen, "out of memory");
	}
	for (size_t i = 0; i < p->n; i++) {
		f[i] = p->buf + p->off[i];
		l[i] = (uint32_t)(p->off[i + 1] - p->off[i]);
	}
	apply_ctl ctl = {.threads = threads, .progress = progress};
	apply_result res = {0};
	int rc = patch_apply_frames(f, l, p->n, params, n_params, model_id, base_version, &ctl,
				    &res, err, errlen);
	free(f);
	free(l);
	if (rc && (res.status == BFP_E_HASH || res.status == BFP_E_CORRUPT)) {
		/* the frame passed its CRC, model and version checks: what it
		 * met is not the weights it was made from */
		size_t k = strlen(err);
		if (k < errlen)
			snprintf(err + k, errlen - k,
				 " (the frame itself is intact: the weights it was applied to are "
				 "probably not version %u of this model, the patch's base)",
				 base_version);
	}
	return rc;
}
