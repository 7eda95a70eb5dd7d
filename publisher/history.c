/*
 * history.c: the publisher's version history: the last --keep patches
 * (and one keyframe stream) held for NACKs and catch-ups, kept on disk
 * with --history, taken back and made from the checkpoints on --resume.
 * It sends nothing: the NACK answers (nack.c) and catch-ups (subs.c) look
 * patches up here, so it can be driven by tests without a socket.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bfpatch.h"
#include "util.h"
#include "publisher.h"

void history_init(pub_history *h, unsigned keep, const char *dir, const char *ckpt)
{
	memset(h, 0, sizeof(*h));
	h->keep = keep < 1 ? 1 : keep > MAX_KEEP ? MAX_KEEP : keep;
	h->dir = dir;
	h->ckpt = ckpt;
}

void history_free(pub_history *h)
{
	for (unsigned i = 0; i < MAX_KEEP; i++)
		patch_free(&h->p[i]);
	patch_free(&h->key);
	patch_free(&h->key_part);
	h->key_streaming = 0;
	h->n = 0;
}

int history_is_key(const patch *p)
{
	bfp_frame_header hd;
	return p->n && bfp_frame_parse(p->buf, p->off[1], &hd) == BFP_OK &&
	       !bfp_frame_in_patch(&hd);
}

/* The patch to version target, or the keyframe stream of it (key). */
static const patch *lookup(const pub_history *h, uint32_t target, int key)
{
	for (unsigned i = 0; i < h->n; i++)
		if (h->ver[i] == target && history_is_key(&h->p[i]) == key)
			return &h->p[i];
	return NULL;
}

const patch *history_find(const pub_history *h, uint32_t target)
{
	return lookup(h, target, 0);
}

const patch *history_key(const pub_history *h, uint32_t target)
{
	if (h->key_streaming && h->key_ver == target)
		return &h->key_part; /* being encoded: the frames so far */
	if (h->key.n && h->key_ver == target)
		return &h->key;
	return lookup(h, target, 1); /* --keyframes */
}

const patch *history_pair(const pub_history *h, uint32_t base, uint32_t target)
{
	for (unsigned i = 0; i < h->n; i++)
		if (h->base[i] == base && h->ver[i] == target && h->p[i].n)
			return &h->p[i];
	return NULL;
}

const patch *history_from(const pub_history *h, uint32_t base)
{
	for (unsigned i = 0; i < h->n; i++)
		if (h->base[i] == base && h->p[i].n)
			return &h->p[i];
	return NULL;
}

uint32_t history_target(const pub_history *h, const patch *p)
{
	return h->ver[p - h->p];
}

int history_chain(const pub_history *h, uint32_t from, uint32_t ver, uint32_t *first)
{
	uint32_t at = from;
	for (unsigned k = 0; at < ver && k < MAX_KEEP; k++) {
		const patch *q = history_from(h, at);
		if (!q)
			return 0;
		at = history_target(h, q);
		if (!k)
			*first = at;
	}
	return at == ver;
}

/* The slot for the next patch: a free one, or the one holding the
 * oldest target version. */
static unsigned next_slot(const pub_history *h)
{
	if (h->n < h->keep)
		return h->n;
	unsigned slot = 0;
	for (unsigned i = 1; i < h->n; i++)
		if (h->ver[i] < h->ver[slot])
			slot = i;
	return slot;
}

unsigned history_evict(pub_history *h, uint32_t *old_base, uint32_t *old_ver)
{
	unsigned slot = next_slot(h);
	if (slot == h->n)
		h->n++;
	*old_base = h->base[slot];
	*old_ver = h->ver[slot];
	patch_free(&h->p[slot]);
	return slot;
}

void history_hold(pub_history *h, unsigned slot, uint32_t base, uint32_t ver)
{
	h->base[slot] = base;
	h->ver[slot] = ver;
}

void history_put(pub_history *h, unsigned slot, uint32_t old_base, uint32_t old_ver)
{
	if (!h->dir)
		return;
	char path[PATH_MAX], err[ERRLEN];
	if (old_ver) {
		snprintf(path, sizeof(path), "%s/v%08u-v%08u.bfp", h->dir, old_base, old_ver);
		unlink(path);
	}
	snprintf(path, sizeof(path), "%s/v%08u-v%08u.bfp", h->dir, h->base[slot], h->ver[slot]);
	const void *bufs[1] = {h->p[slot].buf};
	size_t lens[1] = {h->p[slot].len};
	if (write_file_atomic(path, bufs, lens, 1, err, sizeof(err))) {
		h->errors++;
		fprintf(stderr, "bfpatch publish: history not kept: %s\n", err);
	}
}

int history_keyframes(const model *cur, uint32_t ver, const patch_opts *po, patch *out,
		      char *err, size_t errlen)
{
	patch_opts ko = *po;
	ko.enc_flags |= BFP_ENC_F_KEYFRAME | po->key_flags;
	ko.base_version = 0;
	ko.target_version = ver;
	return patch_encode(cur, cur, &ko, out, err, errlen);
}

void history_key_begin(pub_history *h, uint32_t ver)
{
	patch_free(&h->key);
	patch_free(&h->key_part);
	h->key_ver = ver;
	h->key_streaming = 1;
}

int history_key_make(pub_history *h, const model *cur, uint32_t ver, const patch_opts *po,
		     char *err, size_t errlen)
{
	if (!h->key_streaming || h->key_ver != ver)
		history_key_begin(h, ver);
	patch k;
	int rc = history_keyframes(cur, ver, po, &k, err, errlen);
	h->key_streaming = 0;
	patch_free(&h->key_part);
	if (rc)
		return -1;
	h->key = k;
	return 0;
}

/* Whether every frame of p (a patch to version t) holds what checkpoint t
 * holds now: cur for t == ver, else CKPT/step-t, if there is one. A patch
 * kept from before a rollback (the trainer went back and wrote another
 * step t) must not answer for the new version t. */
static int matches(const pub_history *h, const patch *p, uint32_t t, const model *cur,
		   uint32_t ver)
{
	model m;
	const model *at = cur;
	char path[PATH_MAX], err[ERRLEN] = "";
	if (t != ver) {
		if (!h->ckpt) /* --buffer: only version ver is at hand */
			goto stale;
		step_path(path, sizeof(path), h->ckpt, t);
		if (model_load(&m, path, err, sizeof(err)))
			goto stale;
		at = &m;
	}
	int ok = at->n_params == cur->n_params;
	for (size_t i = 0; ok && i < p->n; i++) {
		int hit = 0;
		ok = bfp_frame_check_target(p->buf + p->off[i], p->off[i + 1] - p->off[i], at->params,
					    at->n_params, &hit) == BFP_OK && hit;
	}
	if (at != cur)
		model_free(&m);
	if (ok)
		return 1;
stale:
	fprintf(stderr, "bfpatch publish: history: the patch to version %u does not end at "
		"checkpoint %u%s; ignored\n", t, t, err[0] ? " (none to check against)" : "");
	return 0;
}

/* Whether the frames of p, read from the file name, are this model's
 * and of the versions the name gives, vBASE-vTARGET.bfp (a keyframe
 * stream's frames have base 0, FORMAT.md 2.1, and its files are named
 * so): the name is all a catch-up looks up by, so a file renamed by hand
 * must not be served as the patch it is named after. Says why not. */
static int named_right(const patch *p, const char *name, uint64_t model_id, uint32_t b,
		       uint32_t t)
{
	for (size_t i = 0; i < p->n; i++) {
		bfp_frame_header hd;
		if (bfp_frame_parse(p->buf + p->off[i], p->off[i + 1] - p->off[i], &hd) != BFP_OK)
			return 0; /* patch_read parsed every frame */
		if (hd.model_id != model_id) {
			fprintf(stderr, "bfpatch publish: history: %s holds frames of model %016"
				PRIx64 ", not of this one (%016" PRIx64 "); ignored\n", name,
				hd.model_id, model_id);
			return 0;
		}
		if (hd.base_version != b || hd.target_version != t) {
			fprintf(stderr, "bfpatch publish: history: %s: its frame %zu is of versions "
				"%u -> %u, not %u -> %u as its name says (renamed?); ignored, never "
				"served\n", name, i, hd.base_version, hd.target_version, b, t);
			return 0;
		}
	}
	return 1;
}

/* With --resume, remove the patch files not held (beyond --keep, of
 * another model, from before a rollback, past the version resumed at):
 * the directory holds the patches held, no more, restart after restart
 * (without it, the history may be of a later run). */
static void remove_unheld(const pub_history *h)
{
	DIR *d = opendir(h->dir);
	struct dirent *e;
	unsigned removed = 0;
	while (d && (e = readdir(d))) {
		unsigned b, t, i;
		char tail[8];
		if (sscanf(e->d_name, "v%8u-v%8u.bf%1[p]%1s", &b, &t, tail, tail + 1) != 3 ||
		    strlen(e->d_name) != strlen("v00000000-v00000000.bfp"))
			continue;
		for (i = 0; i < h->n; i++)
			if (h->base[i] == b && h->ver[i] == t)
				break;
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/%s", h->dir, e->d_name);
		if (i == h->n && unlink(path) == 0)
			removed++;
	}
	if (d)
		closedir(d);
	if (removed)
		pub_info("bfpatch publish: history: removed %u patch file(s) not held (past "
			"--keep %u, another model's, or not of these checkpoints)\n", removed, h->keep);
}

void history_load(pub_history *h, uint64_t model_id, uint32_t ver, const model *cur, int resume)
{
	if (!h->dir)
		return;
	DIR *d = opendir(h->dir);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		unsigned b, t;
		char tail[8];
		if (sscanf(e->d_name, "v%8u-v%8u.bfp.tmp.%6s", &b, &t, tail) == 3 &&
		    strlen(e->d_name) == strlen("v00000000-v00000000.bfp.tmp.XXXXXX")) {
			char path[PATH_MAX];
			snprintf(path, sizeof(path), "%s/%s", h->dir, e->d_name);
			if (unlink(path) == 0)
				pub_info("bfpatch publish: history: removed %s, left by a "
					"publisher that stopped while writing it\n", e->d_name);
			continue;
		}
		if (sscanf(e->d_name, "v%8u-v%8u.bf%1[p]%1s", &b, &t, tail, tail + 1) != 3 || t > ver)
			continue;
		unsigned slot = next_slot(h);
		if (slot < h->n && h->ver[slot] >= t)
			continue; /* older than every patch held */
		char path[PATH_MAX], err[ERRLEN];
		patch p;
		snprintf(path, sizeof(path), "%s/%s", h->dir, e->d_name);
		if (patch_read(path, &p, err, sizeof(err))) {
			fprintf(stderr, "bfpatch publish: history: %s; ignored\n", err);
			continue;
		}
		if (!named_right(&p, e->d_name, model_id, b, t) || !matches(h, &p, t, cur, ver)) {
			patch_free(&p);
			continue;
		}
		if (slot == h->n)
			h->n++;
		patch_free(&h->p[slot]);
		h->p[slot] = p;
		h->base[slot] = b;
		h->ver[slot] = t;
	}
	if (d)
		closedir(d);
	for (unsigned i = 0; i < h->n; i++)
		pub_info("bfpatch publish: holds patch %u -> %u from %s\n", h->base[i],
			h->ver[i], h->dir);
	if (resume)
		remove_unheld(h);
}

int history_add(pub_history *h, const model *mb, const model *mt, uint32_t b, uint32_t t,
		const patch_opts *po)
{
	char err[ERRLEN];
	patch_opts so = *po;
	so.base_version = b;
	so.target_version = t;
	patch p;
	if (patch_encode(mb, mt, &so, &p, err, sizeof(err))) {
		fprintf(stderr, "bfpatch publish: patch %u -> %u: %s\n", b, t, err);
		return -1;
	}
	uint32_t old_base, old_ver;
	unsigned slot = history_evict(h, &old_base, &old_ver);
	h->p[slot] = p;
	history_hold(h, slot, b, t);
	pub_info("bfpatch publish: holds patch %u -> %u, made from the checkpoints\n", b, t);
	history_put(h, slot, old_base, old_ver);
	return 0;
}

void history_make(pub_history *h, const model *cur, uint32_t ver, const patch_opts *po)
{
	uint32_t from = 0, st[MAX_KEEP + 1];
	int held = 0;
	for (unsigned i = 0; i < h->n; i++)
		if (h->ver[i] < ver && (!held || h->ver[i] > from)) {
			from = h->ver[i];
			held = 1;
		}
	/* the bases: the highest steps in [from, ver), at most --keep */
	unsigned n = steps_last(h->ckpt, from, ver, st, held ? h->keep : 1);
	if (!n)
		return;
	st[n] = ver;
	char path[PATH_MAX], err[ERRLEN];
	model mb, mt;
	step_path(path, sizeof(path), h->ckpt, st[0]);
	if (model_load(&mb, path, err, sizeof(err)))
		return;
	for (unsigned i = 0; i < n; i++) {
		const model *t = cur;
		if (mb.model_id != cur->model_id)
			break;
		if (i + 1 < n) {
			step_path(path, sizeof(path), h->ckpt, st[i + 1]);
			if (model_load(&mt, path, err, sizeof(err)))
				break;
			t = &mt;
		}
		int rc = t->model_id == cur->model_id ? history_add(h, &mb, t, st[i], st[i + 1], po) : -1;
		model_free(&mb);
		if (t == cur)
			return;
		mb = mt;
		if (rc)
			break;
	}
	model_free(&mb);
}

const patch *history_catchup(const pub_history *h, const pub_sub *s)
{
	if (!s->cu_active)
		return NULL;
	return s->cu_key ? history_key(h, s->cu_target)
			 : history_pair(h, s->cu_base, s->cu_target);
}
