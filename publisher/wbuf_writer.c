/*
 * wbuf_writer.c: libbfpatch_wbuf (include/bfpatch_wbuf.h), the weight
 * buffer's commit protocol for a trainer that publishes from memory. It
 * only wraps common/wbuf.c, the code the shim commits with, so there is
 * one implementation of the protocol; Python reaches it through ctypes.
 */
#define _GNU_SOURCE
#include "bfpatch_wbuf.h"

#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "wbuf.h"

struct bfp_wbuf_writer {
	wbuf w;
	int in_commit;
};

int bfp_wbuf_abi(void)
{
	return BFP_WBUF_ABI;
}

static void no_err(char *err, size_t errlen)
{
	if (err && errlen)
		err[0] = 0;
}

int bfp_wbuf_create(const char *path, const void *st_header, size_t st_len, const void *data,
		    uint64_t data_bytes, uint32_t version, char *err, size_t errlen)
{
	char e[512];
	model m;
	no_err(err, errlen);
	if (!path || (st_len && !st_header))
		return set_err(err, errlen, "no path or no header");
	if (st_len) {
		if (model_parse_safetensors(&m, st_header, st_len, st_len + data_bytes, e,
					    sizeof(e)))
			return set_err(err, errlen, "%s: layout refused: %s", path, e);
		m.header = malloc(st_len);
		if (!m.header) {
			model_free(&m);
			return set_err(err, errlen, "out of memory");
		}
		memcpy(m.header, st_header, st_len);
		m.header_len = st_len;
		m.params = alloc_aligned((size_t)m.n_params * 2);
	} else {
		if (data_bytes % 2 || !data_bytes)
			return set_err(err, errlen, "%s: a raw model is a whole, non-zero number of "
				       "BF16 words (%llu bytes)", path, (unsigned long long)data_bytes);
		if (model_init_raw(&m, data_bytes / 2))
			return set_err(err, errlen, "out of memory");
	}
	if (!m.params) {
		model_free(&m);
		return set_err(err, errlen, "out of memory for %llu parameters",
			       (unsigned long long)m.n_params);
	}
	if (data)
		memcpy(m.params, data, (size_t)data_bytes);
	int rc = wbuf_create(path, &m, version, 0, err, errlen);
	model_free(&m);
	return rc;
}

bfp_wbuf_writer *bfp_wbuf_open(const char *path, char *err, size_t errlen)
{
	no_err(err, errlen);
	bfp_wbuf_writer *x = calloc(1, sizeof(*x));
	if (!x) {
		set_err(err, errlen, "out of memory");
		return NULL;
	}
	/* locked before anything is repaired, as the shim does (setup.c) */
	if (wbuf_open(&x->w, path, err, errlen)) {
		free(x);
		return NULL;
	}
	if (wbuf_lock(x->w.fd, path, err, errlen)) {
		wbuf_close(&x->w);
		free(x);
		return NULL;
	}
	wbuf_prefault_write(&x->w);
	(void)wbuf_seq_repair(&x->w);
	return x;
}

void bfp_wbuf_close(bfp_wbuf_writer *w)
{
	if (!w)
		return;
	wbuf_close(&w->w);
	free(w);
}

uint32_t bfp_wbuf_version(const bfp_wbuf_writer *w)
{
	return atomic_load(&w->w.h->version);
}

uint32_t bfp_wbuf_state(const bfp_wbuf_writer *w)
{
	return atomic_load(&w->w.h->state);
}

uint64_t bfp_wbuf_model_id(const bfp_wbuf_writer *w)
{
	return w->w.h->model_id;
}

const void *bfp_wbuf_st_header(const bfp_wbuf_writer *w, size_t *len)
{
	*len = (size_t)w->w.h->st_len;
	return w->w.map + w->w.h->st_offset;
}

void *bfp_wbuf_data(bfp_wbuf_writer *w, uint64_t *data_bytes)
{
	*data_bytes = w->w.h->data_bytes;
	return w->w.params;
}

int bfp_wbuf_begin(bfp_wbuf_writer *w, uint32_t version, char *err, size_t errlen)
{
	no_err(err, errlen);
	const uint32_t have = atomic_load(&w->w.h->version);
	if (version <= have)
		return set_err(err, errlen, "version %u is not newer than the buffer's version %u "
			       "(bfpatch publish sends only newer versions)", version, have);
	wbuf_begin(&w->w, version, 0);
	w->in_commit = 1;
	return 0;
}

int bfp_wbuf_commit(bfp_wbuf_writer *w, char *err, size_t errlen)
{
	no_err(err, errlen);
	if (!w->in_commit)
		return set_err(err, errlen, "no commit was begun");
	wbuf_end(&w->w);
	w->in_commit = 0;
	return 0;
}
