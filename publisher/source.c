/*
 * source.c: where the publisher's versions come from: checkpoints
 * DIR/step-NNNN.safetensors or sharded DIR/step-NNNN/, each taken once
 * whole (renamed in, or closed by its writer), going on past steps that
 * are missing or never load; or
 * a weight buffer the trainer commits into (wbuf.h), followed when it is
 * replaced. A retired version's memory is reused for the next.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util.h"
#include "publisher.h"

/* Whether a process has path open for writing: a checkpoint written in
 * place (not renamed into the directory) is taken only once its writer
 * closed it, even if its size already looks right (a preallocated file).
 * A read lease is refused exactly then (fcntl(2)); where leases are not
 * to be had (another owner without CAP_LEASE, file systems without
 * them), the size check alone decides. */
static int being_written(const char *path)
{
	char ix[PATH_MAX];
	struct stat sb;
	if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
		/* a sharded step: its index, which a trainer writes last
		 * (a shard cut short fails its size check) */
		snprintf(ix, sizeof(ix), "%s/%s", path, MODEL_INDEX_NAME);
		path = ix;
	}
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 1;
	int busy = fcntl(fd, F_SETLEASE, F_RDLCK) != 0 && errno == EAGAIN;
	if (!busy)
		(void)fcntl(fd, F_SETLEASE, F_UNLCK);
	close(fd);
	return busy;
}

/* A buffer file replaced at its path (a trainer that recreated it): map
 * the new one if it holds the same model. One behind version ver (the
 * one published) is followed too, and published once it passes ver. */
static void source_follow_buffer(source *S, uint32_t ver)
{
	struct stat sb;
	if (stat(S->path, &sb) != 0 || (sb.st_dev == S->dev && sb.st_ino == S->ino))
		return;
	char err[ERRLEN];
	wbuf nw;
	if (wbuf_open(&nw, S->path, err, sizeof(err)))
		return; /* half made: try again */
	S->dev = sb.st_dev;
	S->ino = sb.st_ino;
	if (nw.h->model_id != S->w.h->model_id || nw.h->n_params != S->w.h->n_params) {
		fprintf(stderr, "bfpatch publish: %s was replaced by a buffer of another model; "
			"still publishing from the one mapped before\n", S->path);
		wbuf_close(&nw);
		return;
	}
	uint32_t v = atomic_load(&nw.h->version);
	pub_info("bfpatch publish: %s was replaced; following the new buffer (at version "
		"%u)\n", S->path, v);
	if (v <= ver)
		fprintf(stderr, "bfpatch publish: the new buffer is at version %u, not past version "
			"%u, which was published (a trainer that went back to an earlier "
			"checkpoint?): nothing is published until it passes %u\n", v, ver, ver);
	wbuf_close(&S->w);
	S->w = nw;
}

/* The entry of a step whose file fails to load, or -1. */
static int fail_find(const source *S, uint32_t step)
{
	for (int i = 0; i < (int)(sizeof(S->fail) / sizeof(S->fail[0])); i++)
		if (S->fail[i].step == step && step)
			return i;
	return -1;
}

/* Note that step's file failed to load at t (its first failure): in a free
 * entry, or the one of the lowest step. Returns the entry. */
static int fail_note(source *S, uint32_t step, double t)
{
	int at = fail_find(S, step);
	if (at >= 0)
		return at;
	at = 0;
	for (int i = 1; i < (int)(sizeof(S->fail) / sizeof(S->fail[0])); i++)
		if (S->fail[i].step < S->fail[at].step)
			at = i;
	S->fail[at].step = step;
	S->fail[at].first = S->fail[at].said = t;
	return at;
}

/* The version after ver, if there is one yet: 1 and *nw loaded, 0 if
 * not yet, -1 on error. With --dir that is step ver+1; if it is missing
 * and a later step is there (a trainer that keeps every k-th step, or
 * one pruned before it was published), or it failed to load for a minute
 * while a later one is there, the lowest later step: a patch may skip
 * versions. */
int source_next(source *S, const model *cur, uint32_t ver, model *nw, uint32_t *nver,
		       char *err, size_t errlen)
{
	if (!S->is_buffer) {
		char path[PATH_MAX];
		const double t = now_s();
		if (S->cand <= ver || t - S->last_scan >= 1.0) {
			/* the step to take: ver + 1, or, where that is not there
			 * or fails to load for a minute, the next later one that
			 * is there (again and again: a missing step, then one cut
			 * short), never one past --steps */
			S->last_scan = t;
			uint32_t c = ver + 1, lo, hi;
			for (;;) {
				struct stat sb;
				step_path(path, sizeof(path), S->dir, c);
				const int missing = stat(path, &sb) != 0 && errno == ENOENT;
				const int f = fail_find(S, c);
				const int stuck = f >= 0 && t - S->fail[f].first > 60;
				if ((!missing && !stuck) || c == UINT32_MAX ||
				    !steps_scan(S->dir, c + 1, &lo, &hi))
					break;
				if (S->max_step && lo > S->max_step) {
					/* --steps N: N is not there or never loads, and
					 * the next step is past it */
					S->steps_done = 1;
					return 0;
				}
				c = lo;
			}
			if (c != ver + 1 && c != S->said_skip) {
				fprintf(stderr, "bfpatch publish: step %u %s; going on with step %u\n",
					ver + 1, fail_find(S, ver + 1) >= 0 ? "still fails to load"
									     : "is not there", c);
				S->said_skip = c;
			}
			S->cand = c;
		}
		const uint32_t next = S->cand;
		step_path(path, sizeof(path), S->dir, next);
		struct stat sb;
		if (stat(path, &sb) != 0 && errno == ENOENT)
			return 0;
		int f = fail_find(S, next);
		if (f >= 0 && sb.st_ino == S->other.st_ino && sb.st_dev == S->other.st_dev &&
		    sb.st_size == S->other.st_size && sb.st_mtim.tv_sec == S->other.st_mtim.tv_sec &&
		    sb.st_mtim.tv_nsec == S->other.st_mtim.tv_nsec)
			return 0; /* that file again, unchanged: not read again */
		int lrc;
		if (access(path, R_OK) != 0) /* unreadable (or a link loop): a load failure */
			lrc = set_err(err, errlen, "%s: %s", path, strerror(errno));
		else if (being_written(path))
			return 0;
		else /* a file still being written fails its size check: tried again */
			lrc = model_load_into(nw, path, S->spare, S->spare_cap, err, errlen);
		if (!lrc && (nw->model_id != cur->model_id || nw->n_params != cur->n_params ||
			     !model_same_files(nw, cur))) {
			/* whole, but of another model, or split into other files
			 * (one file and shards): it never loads as this one */
			set_err(err, errlen, "%s has another tensor layout than version %u "
				"(another model, or split into other files); not published", path,
				ver);
			if (nw->params == S->spare) /* read into the spare: it stays */
				nw->params = NULL;
			model_free(nw);
			if (f < 0)
				fprintf(stderr, "bfpatch publish: %s\n", err);
			f = fail_note(S, next, t);
			S->fail[f].first = t - 61; /* passed over once a later step is there */
			S->other = sb;
			return 0;
		}
		if (lrc) {
			if (f < 0) {
				fail_note(S, next, t);
			} else if (t - S->fail[f].said > 10) {
				pub_info("bfpatch publish: waiting for %s: %s\n", path, err);
				S->fail[f].said = t;
			}
			return 0;
		}
		if (nw->params == S->spare)
			S->spare = NULL;
		*nver = next;
		return 1;
	}
	source_follow_buffer(S, ver);
	uint32_t v = atomic_load(&S->w.h->version);
	if (v <= ver || atomic_load(&S->w.h->state) != WBUF_READY)
		return 0;
	*nw = S->proto; /* shares the layout; owns only its parameters */
	const size_t need = (size_t)S->proto.n_params * 2 + 64;
	nw->params = S->spare && S->spare_cap >= need ? S->spare : alloc_aligned(need);
	if (!nw->params)
		return set_err(err, errlen, "out of memory");
	if (wbuf_snapshot(&S->w, nw->params, nver) || *nver <= ver) {
		if (nw->params != S->spare)
			free(nw->params);
		return 0;
	}
	if (nw->params == S->spare)
		S->spare = NULL;
	return 1;
}

/* The buffer's layout as a model: its safetensors header, or raw. */
static int source_open_buffer(source *S, const char *path, model *cur, char *err, size_t errlen)
{
	if (wbuf_open(&S->w, path, err, errlen))
		return -1;
	S->is_buffer = 1;
	S->path = path;
	struct stat sb;
	if (fstat(S->w.fd, &sb) == 0) {
		S->dev = sb.st_dev;
		S->ino = sb.st_ino;
	}
	const wbuf_hdr *h = S->w.h;
	int rc;
	if (h->st_len) {
		rc = model_parse_safetensors(&S->proto, S->w.map + h->st_offset, h->st_len,
					     h->st_len + h->data_bytes, err, errlen);
		if (!rc && S->proto.n_params != h->n_params)
			rc = set_err(err, errlen, "%s: header and parameter count disagree", path);
		if (!rc && !(S->proto.header = malloc((size_t)h->st_len)))
			rc = set_err(err, errlen, "out of memory");
		if (!rc) { /* the parse keeps nothing of the buffer's bytes */
			memcpy(S->proto.header, S->w.map + h->st_offset, (size_t)h->st_len);
			S->proto.header_len = (size_t)h->st_len;
		}
	} else {
		rc = model_init_raw(&S->proto, h->n_params);
		free(S->proto.params);
	}
	S->proto.params = NULL;
	if (rc)
		return -1;
	*cur = S->proto;
	cur->params = alloc_aligned((size_t)h->n_params * 2 + 64);
	uint32_t v;
	if (!cur->params)
		return set_err(err, errlen, "out of memory");
	while (wbuf_snapshot(&S->w, cur->params, &v)) {
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	return (int)v;
}

/* Free what model_free would, minus what a buffer source's models share
 * with its prototype. */
void source_free_model(source *S, model *m)
{
	if (S->is_buffer) {
		free(m->params);
		m->params = NULL;
	} else {
		model_free(m);
	}
}

/* A version retired: its parameters' memory becomes the spare the next
 * version is read into (one spare at most). */
void source_retire_model(source *S, model *m)
{
	if (!S->spare && m->params && !m->map) {
		S->spare = m->params;
		S->spare_cap = (size_t)m->n_params * 2 + (S->is_buffer ? 64 : 0);
		m->params = NULL;
	}
	source_free_model(S, m);
}

/* The first version: the buffer's, or the first checkpoint in --dir
 * (old ones may have been pruned), with --resume the latest, once it
 * loads. 0, or the exit status after a message. */
int source_open(source *S, const publish_config *cf, model *cur, uint32_t *ver_out)
{
	char err[ERRLEN] = "", path[PATH_MAX];
	memset(S, 0, sizeof(*S));
	if (cf->buffer) {
		int v = source_open_buffer(S, cf->buffer, cur, err, sizeof(err));
		if (v < 0)
			return die("publish", err);
		*ver_out = (uint32_t)v;
		return 0;
	}
	S->dir = cf->dir;
	S->max_step = cf->steps == UINT32_MAX ? 0 : cf->steps;
	uint32_t first = 0, last = 0;
	if (!steps_scan(cf->dir, 0, &first, &last)) {
		fprintf(stderr, "bfpatch publish: no checkpoint DIR/step-NNNN.safetensors (or sharded "
			"DIR/step-NNNN/) in %s\n", cf->dir);
		return 1;
	}
	uint32_t ver = cf->resume ? last : first;
	/* with the checks later steps get: not while a writer has it open
	 * (a preallocated file of zeros looks whole), not before it loads;
	 * --resume starts at the latest step that does */
	double said = 0;
	for (;;) {
		step_path(path, sizeof(path), cf->dir, ver);
		int busy = access(path, R_OK) == 0 && being_written(path);
		if (!busy && model_load(cur, path, err, sizeof(err)) == 0)
			break;
		if (cf->resume && ver > first) {
			pub_info("bfpatch publish: %s is not whole yet (%s); starting at the "
				"step before\n", path, busy ? "still being written" : err);
			/* the step before that is there (a trainer that keeps
			 * every k-th step leaves gaps) */
			struct stat sb;
			do {
				ver--;
				step_path(path, sizeof(path), cf->dir, ver);
			} while (ver > first && stat(path, &sb) != 0 && errno == ENOENT);
			continue;
		}
		if (now_s() - said > 10) {
			pub_info("bfpatch publish: waiting for %s (%s)\n", path,
				busy ? "still being written" : err);
			said = now_s();
		}
		usleep(100000);
	}
	*ver_out = ver;
	return 0;
}

void source_close(source *S, model *cur)
{
	source_free_model(S, cur);
	free(S->spare);
	S->spare = NULL;
	if (S->is_buffer) {
		model_free(&S->proto);
		wbuf_close(&S->w);
		S->is_buffer = 0;
	}
}
