/*
 * model.c: safetensors, sharded safetensors and raw BF16 model files. The
 * safetensors header is validated against everything the format forbids
 * (duplicate keys, holes, overlaps, sizes not matching shapes, trailing
 * bytes), and a shard index against its shards, before any data is
 * trusted. Files are written through a temporary and a rename.
 */
#define _GNU_SOURCE
#include "model.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#ifndef HUGETLBFS_MAGIC
#define HUGETLBFS_MAGIC 0x958458f6
#endif

#define ST_HEADER_MAX (100u * 1024 * 1024) /* safetensors' own limit */

int set_err(char *err, size_t n, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, n, fmt, ap);
	va_end(ap);
	return -1;
}

void *alloc_aligned(size_t n)
{
	void *p = NULL;
	/* model-sized arrays: 2 MB aligned and backed by transparent huge
	 * pages where the kernel offers them, so touching 400 MB takes a few
	 * hundred page faults, not a hundred thousand */
	size_t align = n >= (32u << 20) ? (2u << 20) : 64;
	if (posix_memalign(&p, align, n ? n : 64) != 0)
		return NULL;
#ifdef MADV_HUGEPAGE
	if (align > 64)
		madvise(p, n, MADV_HUGEPAGE);
#endif
	memset(p, 0, n);
	return p;
}

void malloc_keep_freed(void)
{
#ifdef M_TRIM_THRESHOLD
	/* setting either ends glibc's own adjustment of both */
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
}

static const struct {
	const char *name;
	uint32_t dt;
} dtypes[] = {
	{"BF16", BFP_DT_BF16}, {"F16", BFP_DT_F16}, {"F32", BFP_DT_F32},
	{"F64", BFP_DT_F64}, {"I8", BFP_DT_I8}, {"U8", BFP_DT_U8},
	{"I16", BFP_DT_I16}, {"U16", BFP_DT_U16}, {"I32", BFP_DT_I32},
	{"U32", BFP_DT_U32}, {"I64", BFP_DT_I64}, {"U64", BFP_DT_U64},
	{"BOOL", BFP_DT_BOOL}, {"F8_E4M3", BFP_DT_F8_E4M3},
	{"F8_E5M2", BFP_DT_F8_E5M2},
};

static uint32_t dtype_of(const char *s)
{
	for (size_t i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); i++)
		if (strcmp(s, dtypes[i].name) == 0)
			return dtypes[i].dt;
	return 0;
}

static int cmp_tensor(const void *a, const void *b)
{
	const bfp_tensor *x = a, *y = b;
	if (x->byte_begin != y->byte_begin)
		return x->byte_begin < y->byte_begin ? -1 : 1;
	return x->byte_end < y->byte_end ? -1 : (x->byte_end > y->byte_end);
}

static int get_u64(json_t *v, uint64_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -1;
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

void model_free(model *m)
{
	if (!m)
		return;
	for (size_t k = 0; m->files && k < m->n_files; k++) {
		free(m->files[k].name);
		free(m->files[k].header);
	}
	free(m->files);
	free(m->index);
	free(m->index_name);
	free(m->header);
	if (m->map)
		munmap(m->map, m->map_len);
	else
		free(m->params);
	for (size_t i = 0; m->names && i < m->n_tensors; i++)
		free(m->names[i]);
	free(m->names);
	free(m->tensors);
	memset(m, 0, sizeof(*m));
}

void model_manifest(const model *m, bfp_manifest *mf)
{
	mf->tensors = m->tensors;
	mf->n_tensors = m->n_tensors;
	mf->data_bytes = m->data_bytes;
}

int model_parse_safetensors(model *m, const uint8_t *hdr, size_t hdr_len,
			    uint64_t file_size, char *err, size_t errlen)
{
	json_error_t je;
	json_t *root;
	uint64_t n = 0;

	memset(m, 0, sizeof(*m));
	if (hdr_len < 8)
		return set_err(err, errlen, "safetensors: file shorter than 8 bytes");
	for (int i = 0; i < 8; i++)
		n |= (uint64_t)hdr[i] << (8 * i);
	if (n < 2 || n > ST_HEADER_MAX)
		return set_err(err, errlen, "safetensors: header length %llu out of range",
			    (unsigned long long)n);
	if (hdr_len < 8 + n || file_size < 8 + n)
		return set_err(err, errlen, "safetensors: truncated header");
	if (hdr[8] != '{')
		return set_err(err, errlen, "safetensors: header does not start with '{'");
	root = json_loadb((const char *)hdr + 8, (size_t)n,
			  JSON_REJECT_DUPLICATES | JSON_DISABLE_EOF_CHECK |
				  JSON_ALLOW_NUL * 0,
			  &je);
	if (!root)
		return set_err(err, errlen, "safetensors: header JSON: %s (offset %d)",
			    je.text, je.position);
	/* Only spaces may follow the JSON object (safetensors pads so). */
	for (size_t i = (size_t)je.position; i < n; i++) {
		if (hdr[8 + i] != ' ') {
			json_decref(root);
			return set_err(err, errlen,
				    "safetensors: bytes after the header JSON");
		}
	}
	if (!json_is_object(root)) {
		json_decref(root);
		return set_err(err, errlen, "safetensors: header is not an object");
	}
	size_t cap = json_object_size(root);
	m->tensors = calloc(cap ? cap : 1, sizeof(bfp_tensor));
	m->names = calloc(cap ? cap : 1, sizeof(char *));
	if (!m->tensors || !m->names) {
		json_decref(root);
		model_free(m);
		return set_err(err, errlen, "out of memory");
	}
	const char *key;
	json_t *val;
	int rc = 0;
	json_object_foreach(root, key, val) {
		if (strcmp(key, "__metadata__") == 0) {
			const char *mk;
			json_t *mv;
			if (!json_is_object(val)) {
				rc = set_err(err, errlen, "safetensors: __metadata__ is not an object");
				break;
			}
			json_object_foreach(val, mk, mv) {
				if (!json_is_string(mv)) {
					rc = set_err(err, errlen, "safetensors: __metadata__ value of '%s' is not a string", mk);
					break;
				}
			}
			if (rc)
				break;
			continue;
		}
		bfp_tensor *t = &m->tensors[m->n_tensors];
		json_t *dt = json_object_get(val, "dtype");
		json_t *sh = json_object_get(val, "shape");
		json_t *off = json_object_get(val, "data_offsets");
		if (!json_is_object(val) || !json_is_string(dt) || !json_is_array(sh) ||
		    !json_is_array(off) || json_array_size(off) != 2 ||
		    json_object_size(val) != 3) {
			rc = set_err(err, errlen, "safetensors: tensor '%s': needs exactly dtype, shape, data_offsets", key);
			break;
		}
		t->dtype = dtype_of(json_string_value(dt));
		if (!t->dtype) {
			rc = set_err(err, errlen, "safetensors: tensor '%s': unknown dtype '%s'",
				  key, json_string_value(dt));
			break;
		}
		if (json_array_size(sh) > BFP_MAX_DIMS) {
			rc = set_err(err, errlen, "safetensors: tensor '%s': more than %u dimensions", key, BFP_MAX_DIMS);
			break;
		}
		t->ndim = (uint32_t)json_array_size(sh);
		for (uint32_t d = 0; d < t->ndim && !rc; d++)
			if (get_u64(json_array_get(sh, d), &t->shape[d]))
				rc = set_err(err, errlen, "safetensors: tensor '%s': bad shape", key);
		if (rc)
			break;
		if (get_u64(json_array_get(off, 0), &t->byte_begin) ||
		    get_u64(json_array_get(off, 1), &t->byte_end) ||
		    t->byte_end < t->byte_begin) {
			rc = set_err(err, errlen, "safetensors: tensor '%s': bad data_offsets", key);
			break;
		}
		m->names[m->n_tensors] = strdup(key);
		if (!m->names[m->n_tensors]) {
			rc = set_err(err, errlen, "out of memory");
			break;
		}
		t->name = m->names[m->n_tensors];
		t->name_len = strlen(key);
		m->n_tensors++;
	}
	json_decref(root);
	if (rc) {
		model_free(m);
		return -1;
	}
	/* sort tensors by offset; names follow their tensors */
	qsort(m->tensors, m->n_tensors, sizeof(bfp_tensor), cmp_tensor);
	for (size_t i = 0; i < m->n_tensors; i++)
		m->names[i] = (char *)m->tensors[i].name;
	m->data_bytes = file_size - 8 - n;
	bfp_manifest mf;
	model_manifest(m, &mf);
	if (bfp_manifest_check(&mf) != BFP_OK) {
		model_free(m);
		return set_err(err, errlen,
			    "safetensors: tensors do not tile the data section exactly "
			    "(holes, overlaps, sizes not matching shapes, or trailing bytes)");
	}
	m->safetensors = 1;
	m->header_len = (size_t)(8 + n);
	m->n_params = bfp_manifest_params(&mf);
	m->model_id = bfp_manifest_id(&mf);
	return 0;
}

static int read_full(int fd, void *buf, size_t n, uint64_t off)
{
	uint8_t *p = buf;
	while (n > 0) {
		ssize_t r = pread(fd, p, n > (1u << 30) ? (1u << 30) : n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		p += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

/* A raw model's manifest (one BF16 tensor "" of n words); no params. */
static int raw_model(model *m, uint64_t n)
{
	memset(m, 0, sizeof(*m));
	m->tensors = calloc(1, sizeof(bfp_tensor));
	m->names = calloc(1, sizeof(char *));
	if (m->names)
		m->names[0] = strdup("");
	if (!m->tensors || !m->names || !m->names[0]) {
		model_free(m);
		return -1;
	}
	m->n_tensors = 1;
	m->tensors[0].name = m->names[0];
	m->tensors[0].dtype = BFP_DT_BF16;
	m->tensors[0].ndim = 1;
	m->tensors[0].shape[0] = n;
	m->tensors[0].byte_end = n * 2;
	m->data_bytes = n * 2;
	m->n_params = n;
	bfp_manifest mf;
	model_manifest(m, &mf);
	m->model_id = bfp_manifest_id(&mf);
	return 0;
}

int model_init_raw(model *m, uint64_t n)
{
	if (raw_model(m, n))
		return -1;
	m->params = alloc_aligned((size_t)n * 2);
	if (!m->params) {
		model_free(m);
		return -1;
	}
	return 0;
}

int model_named_safetensors(const char *path)
{
	static const char suf[] = ".safetensors";
	const size_t a = strlen(path), b = sizeof(suf) - 1;
	return a >= b && strcmp(path + a - b, suf) == 0;
}

/* Set when a model is mapped: a SIGBUS then most likely means its file
 * shrank under the mapping, and on_fatal_signal says so. */
static atomic_int mapped_files;

/* Map the file read-only with the data section as m->params, when the
 * section is a whole number of words at an even offset (else 0: the
 * caller reads it). Files up to half the machine's memory are read in
 * and mapped at once (MAP_POPULATE): faulting 64 MB in page by page as
 * a pass reached it took 6-28 ms here, populating it 4-6 ms. */
static int map_params(model *m, int fd, uint64_t size)
{
	if (m->header_len % 2 || m->data_bytes % 2 || m->data_bytes == 0 || size > SIZE_MAX)
		return 0;
	const long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	int flags = MAP_PRIVATE;
	if (pages > 0 && psize > 0 && size <= (uint64_t)pages * (uint64_t)psize / 2)
		flags |= MAP_POPULATE;
	void *p = mmap(NULL, (size_t)size, PROT_READ, flags, fd, 0);
	if (p == MAP_FAILED)
		return 0;
	atomic_store(&mapped_files, 1);
	m->map = p;
	m->map_len = (size_t)size;
	m->params = (uint16_t *)(void *)((uint8_t *)p + m->header_len);
	return 1;
}

int open_regular(const char *path, struct stat *sb, char *err, size_t errlen)
{
	/* O_NONBLOCK: opening a FIFO for reading would wait for a writer */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return set_err(err, errlen, "%s: %s", path, strerror(errno));
	if (fstat(fd, sb) != 0 || !S_ISREG(sb->st_mode)) {
		close(fd);
		return set_err(err, errlen, "%s: not a regular file", path);
	}
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
		close(fd);
		return set_err(err, errlen, "%s: %s", path, strerror(errno));
	}
	return fd;
}

static int write_all(int fd, const void *const *bufs, const size_t *lens, size_t nbufs,
		     const char *path, char *err, size_t errlen);

/* Standard input as a file that can be read at offsets and mapped: itself
 * when it is a regular file read from its start (`< FILE`), else (a pipe)
 * its whole contents copied into a memfd, memory the kernel gives back
 * when the fd closes. A terminal is refused: nothing would come. */
static int stdin_file(struct stat *sb, char *err, size_t errlen)
{
	if (isatty(STDIN_FILENO))
		return set_err(err, errlen, "standard input is a terminal: give a file, or "
			       "redirect or pipe one into it");
	if (fstat(STDIN_FILENO, sb) == 0 && S_ISREG(sb->st_mode) &&
	    lseek(STDIN_FILENO, 0, SEEK_CUR) == 0) {
		int fd = fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3);
		return fd >= 0 ? fd : set_err(err, errlen, "standard input: %s", strerror(errno));
	}
	int fd = memfd_create("bfpatch-stdin", MFD_CLOEXEC);
	if (fd < 0)
		return set_err(err, errlen, "standard input: memfd: %s", strerror(errno));
	static const size_t chunk = 1u << 20;
	uint8_t *buf = malloc(chunk);
	ssize_t r = -1;
	while (buf) {
		r = read(STDIN_FILENO, buf, chunk);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		const void *bufs[1] = {buf};
		size_t lens[1] = {(size_t)r};
		if (write_all(fd, bufs, lens, 1, "standard input (its copy in memory)", err, errlen)) {
			free(buf);
			close(fd);
			return -1;
		}
	}
	const int rerr = errno;
	free(buf);
	if (!buf || r < 0 || fstat(fd, sb) != 0 || lseek(fd, 0, SEEK_SET) != 0) {
		close(fd);
		return set_err(err, errlen, "standard input: %s",
			       !buf ? "out of memory" : strerror(rerr));
	}
	return fd;
}

int open_input(const char *path, struct stat *sb, char *err, size_t errlen)
{
	return strcmp(path, "-") ? open_regular(path, sb, err, errlen) : stdin_file(sb, err, errlen);
}

/* A file whose JSON would begin where a safetensors header's does (the
 * cheap test before read_st_header's whole one). */
/* A safetensors file by its content: an 8-byte little-endian header
 * length that fits the file, then '{'. A raw BF16 file would need its
 * third and fourth words zero, its first two a length within the file and
 * the low byte of its fifth '{' to look so. */
static int starts_like_safetensors(int fd, uint64_t size)
{
	uint8_t b[9];
	if (size < 10 || read_full(fd, b, sizeof(b), 0) != 0 || b[8] != '{')
		return 0;
	uint64_t n = 0;
	for (int i = 7; i >= 0; i--)
		n = n << 8 | b[i];
	return n >= 2 && n <= size - 8;
}

/* Read and parse the safetensors header of the open file; m->header owns
 * it on success. */
static int read_st_header(model *m, int fd, const char *path, uint64_t size, char *err,
			  size_t errlen)
{
	uint8_t lenb[8];
	uint64_t n = 0;
	if (size < 8 || read_full(fd, lenb, 8, 0))
		return set_err(err, errlen, "%s: truncated safetensors file", path);
	for (int i = 0; i < 8; i++)
		n |= (uint64_t)lenb[i] << (8 * i);
	if (n > ST_HEADER_MAX || 8 + n > size)
		return set_err(err, errlen, "%s: safetensors header length %llu exceeds the file",
			       path, (unsigned long long)n);
	uint8_t *hdr = malloc((size_t)(8 + n));
	if (!hdr || read_full(fd, hdr, (size_t)(8 + n), 0)) {
		free(hdr);
		return set_err(err, errlen, "%s: cannot read header", path);
	}
	char e2[256];
	if (model_parse_safetensors(m, hdr, (size_t)(8 + n), size, e2, sizeof(e2))) {
		free(hdr);
		return set_err(err, errlen, "%s: %s", path, e2);
	}
	m->header = hdr;
	return 0;
}

/* ---- sharded checkpoints (FORMAT.md 1) ---- */

int model_path_sharded(const char *path)
{
	static const char suf[] = ".index.json";
	const size_t a = strlen(path), b = sizeof(suf) - 1;
	struct stat sb;
	if (a >= b && strcmp(path + a - b, suf) == 0)
		return 1;
	return strcmp(path, "-") && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

size_t model_n_files(const model *m)
{
	return m->n_files ? m->n_files : m->safetensors ? 1 : 0;
}

const uint8_t *model_file_header(const model *m, size_t k, size_t *len)
{
	if (m->n_files) {
		*len = k < m->n_files ? m->files[k].header_len : 0;
		return k < m->n_files ? m->files[k].header : NULL;
	}
	*len = k == 0 ? m->header_len : 0;
	return k == 0 ? m->header : NULL;
}

int model_same_files(const model *a, const model *b)
{
	if (a->n_files != b->n_files || model_n_files(a) != model_n_files(b))
		return 0;
	for (size_t k = 0; k < a->n_files; k++)
		if (strcmp(a->files[k].name, b->files[k].name) ||
		    a->files[k].data_bytes != b->files[k].data_bytes)
			return 0;
	return 1;
}

/* The whole of a small file (an index) into a new buffer. */
static int read_small(const char *path, uint8_t **out, size_t *len, char *err, size_t errlen)
{
	struct stat sb;
	int fd = open_regular(path, &sb, err, errlen);
	if (fd < 0)
		return -1;
	if ((uint64_t)sb.st_size > ST_HEADER_MAX) {
		close(fd);
		return set_err(err, errlen, "%s: larger than %u bytes", path, ST_HEADER_MAX);
	}
	*len = (size_t)sb.st_size;
	*out = malloc(*len + 1);
	if (!*out || read_full(fd, *out, *len, 0)) {
		close(fd);
		free(*out);
		*out = NULL;
		return set_err(err, errlen, "%s: cannot read it", path);
	}
	close(fd);
	return 0;
}

/* An index's JSON: an object whose weight_map maps tensor names to file
 * names (strings); any other member ("metadata") is kept as it is. */
static json_t *index_parse(const uint8_t *b, size_t len, char *err, size_t errlen)
{
	json_error_t je;
	json_t *root = json_loadb((const char *)b, len, JSON_REJECT_DUPLICATES, &je);
	if (!root) {
		set_err(err, errlen, "index JSON: %s (line %d)", je.text, je.line);
		return NULL;
	}
	json_t *wm = json_object_get(root, "weight_map");
	const char *k;
	json_t *v;
	if (!json_is_object(root) || !json_is_object(wm) || json_object_size(wm) == 0) {
		set_err(err, errlen, "index: no weight_map object naming the tensors' files");
		json_decref(root);
		return NULL;
	}
	json_object_foreach(wm, k, v) {
		const char *f = json_string_value(v);
		/* a file of the index's own directory, not a path anywhere */
		if (!f || !*f || strchr(f, '/') || !strcmp(f, ".") || !strcmp(f, "..")) {
			set_err(err, errlen, "index: weight_map entry '%s' is not a file name in the "
				"index's directory", k);
			json_decref(root);
			return NULL;
		}
	}
	return root;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The safetensors header of one file holding the whole parameter space
 * (the shards' data sections concatenated): the tensors in offset order,
 * no metadata, padded with spaces to 8 bytes as safetensors pads. It is
 * what a weight buffer made from a sharded checkpoint carries. */
static int single_header(model *m)
{
	json_t *o = json_object();
	for (size_t i = 0; o && i < m->n_tensors; i++) {
		const bfp_tensor *t = &m->tensors[i];
		json_t *e = json_object(), *sh = json_array(), *off = json_array();
		const char *dt = "";
		for (size_t d = 0; d < sizeof(dtypes) / sizeof(dtypes[0]); d++)
			if (dtypes[d].dt == t->dtype)
				dt = dtypes[d].name;
		for (uint32_t d = 0; d < t->ndim; d++)
			json_array_append_new(sh, json_integer((json_int_t)t->shape[d]));
		json_array_append_new(off, json_integer((json_int_t)t->byte_begin));
		json_array_append_new(off, json_integer((json_int_t)t->byte_end));
		json_object_set_new(e, "dtype", json_string(dt));
		json_object_set_new(e, "shape", sh);
		json_object_set_new(e, "data_offsets", off);
		json_object_set_new(o, m->names[i], e);
	}
	char *j = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	json_decref(o);
	if (!j)
		return -1;
	const size_t n = strlen(j), padded = (n + 7) / 8 * 8;
	m->header = malloc(8 + padded);
	if (m->header) {
		for (int i = 0; i < 8; i++)
			m->header[i] = (uint8_t)((uint64_t)padded >> (8 * i));
		memcpy(m->header + 8, j, n);
		memset(m->header + 8 + n, ' ', padded - n);
		m->header_len = 8 + padded;
	}
	free(j);
	return m->header ? 0 : -1;
}


static int cmp_file(const void *a, const void *b)
{
	return strcmp(((const model_file *)a)->name, ((const model_file *)b)->name);
}

/* Whether shard sh (a model of its own) holds a tensor named name. */
static int holds_tensor(const model *sh, const char *name)
{
	for (size_t i = 0; i < sh->n_tensors; i++)
		if (!strcmp(sh->names[i], name))
			return 1;
	return 0;
}

/* The shards' headers, checked against the index root: every file it
 * names is there, each tensor of file k is mapped to file k, and every
 * mapped tensor is in the file it is mapped to. sh[k] gets file k's
 * tensors, fds[k] the open file. */
static int shards_open(model *m, const char *dir, json_t *root, model *sh, int *fds, char *err,
		       size_t errlen)
{
	json_t *wm = json_object_get(root, "weight_map"), *v;
	const char *key;
	size_t tensors = 0;
	uint64_t at = 0;
	for (size_t k = 0; k < m->n_files; k++) {
		model_file *f = &m->files[k];
		char fp[PATH_MAX];
		struct stat sb;
		if ((size_t)snprintf(fp, sizeof(fp), "%s/%s", dir, f->name) >= sizeof(fp))
			return set_err(err, errlen, "%s/%s: path too long", dir, f->name);
		if (stat(fp, &sb) != 0 && errno == ENOENT)
			return set_err(err, errlen, "the index names %s, which is missing", fp);
		if ((fds[k] = open_regular(fp, &sb, err, errlen)) < 0 ||
		    read_st_header(&sh[k], fds[k], fp, (uint64_t)sb.st_size, err, errlen))
			return -1;
		f->header = sh[k].header;
		f->header_len = sh[k].header_len;
		sh[k].header = NULL;
		f->data_begin = at;
		f->data_bytes = sh[k].data_bytes;
		f->layout_id = sh[k].model_id;
		at += f->data_bytes;
		for (size_t i = 0; i < sh[k].n_tensors; i++) {
			const char *to = json_string_value(json_object_get(wm, sh[k].names[i]));
			if (!to)
				return set_err(err, errlen, "tensor '%s' of %s is not in the index's "
					       "weight_map", sh[k].names[i], fp);
			if (strcmp(to, f->name))
				return set_err(err, errlen, "tensor '%s' is in %s, but the index maps "
					       "it to %s", sh[k].names[i], fp, to);
		}
		tensors += sh[k].n_tensors;
	}
	if (tensors == json_object_size(wm))
		return 0;
	json_object_foreach(wm, key, v) {
		model_file probe = {.name = (char *)json_string_value(v)};
		model_file *f = bsearch(&probe, m->files, m->n_files, sizeof(model_file), cmp_file);
		if (f && !holds_tensor(&sh[f - m->files], key))
			return set_err(err, errlen, "the index maps tensor '%s' to %s/%s, which does "
				       "not hold it", key, dir, f->name);
	}
	return set_err(err, errlen, "the index and its shards disagree");
}

/* model_open for a sharded checkpoint (FORMAT.md 1): the shards' data
 * sections concatenated in the order of their names, read into one
 * array (into buf when it fits, as model_load_into). */
static int load_sharded(model *m, const char *path, void *buf, size_t cap, char *err,
			size_t errlen)
{
	char dir[PATH_MAX], ipath[PATH_MAX];
	struct stat sb;
	memset(m, 0, sizeof(*m));
	if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
		snprintf(dir, sizeof(dir), "%s", path);
		if ((size_t)snprintf(ipath, sizeof(ipath), "%s/%s", path, MODEL_INDEX_NAME) >=
		    sizeof(ipath))
			return set_err(err, errlen, "%s: path too long", path);
	} else {
		snprintf(ipath, sizeof(ipath), "%s", path);
		snprintf(dir, sizeof(dir), "%s", path);
		char *slash = strrchr(dir, '/');
		if (slash)
			*slash = 0;
		else
			snprintf(dir, sizeof(dir), ".");
	}
	uint8_t *ix = NULL;
	size_t ixlen = 0;
	char e2[512];
	if (read_small(ipath, &ix, &ixlen, err, errlen))
		return -1;
	json_t *root = index_parse(ix, ixlen, e2, sizeof(e2));
	if (!root) {
		free(ix);
		return set_err(err, errlen, "%s: %s", ipath, e2);
	}
	m->index = ix;
	m->index_len = ixlen;
	const char *slash = strrchr(ipath, '/');
	m->index_name = strdup(slash ? slash + 1 : ipath);
	/* the files, each once, sorted by name */
	json_t *wm = json_object_get(root, "weight_map"), *fset = json_object(), *v;
	const char *key;
	json_object_foreach(wm, key, v)
		json_object_set_new(fset, json_string_value(v), json_null());
	const size_t nf = json_object_size(fset);
	m->files = calloc(nf ? nf : 1, sizeof(model_file));
	model *sh = calloc(nf ? nf : 1, sizeof(model));
	int *fds = malloc((nf ? nf : 1) * sizeof(int));
	int rc = !m->files || !sh || !fds || !m->index_name ? set_err(err, errlen, "out of memory")
							    : 0;
	for (size_t k = 0; k < nf && fds; k++)
		fds[k] = -1;
	if (!rc) {
		json_object_foreach(fset, key, v) {
			if (!(m->files[m->n_files].name = strdup(key))) {
				rc = set_err(err, errlen, "out of memory");
				break;
			}
			m->n_files++;
		}
	}
	json_decref(fset);
	if (!rc) {
		qsort(m->files, m->n_files, sizeof(model_file), cmp_file);
		rc = shards_open(m, dir, root, sh, fds, err, errlen);
	}
	json_decref(root);
	/* the tensors of all shards, at their offsets in the concatenation */
	size_t total = 0;
	for (size_t k = 0; !rc && k < nf; k++)
		total += sh[k].n_tensors;
	if (!rc && (!(m->tensors = calloc(total ? total : 1, sizeof(bfp_tensor))) ||
		    !(m->names = calloc(total ? total : 1, sizeof(char *)))))
		rc = set_err(err, errlen, "out of memory");
	for (size_t k = 0; !rc && k < nf; k++) {
		for (size_t i = 0; i < sh[k].n_tensors; i++) {
			bfp_tensor *t = &m->tensors[m->n_tensors];
			*t = sh[k].tensors[i];
			t->byte_begin += m->files[k].data_begin;
			t->byte_end += m->files[k].data_begin;
			m->names[m->n_tensors++] = sh[k].names[i];
			sh[k].names[i] = NULL;
		}
	}
	for (size_t k = 0; sh && k < nf; k++)
		model_free(&sh[k]);
	free(sh);
	if (!rc) {
		m->data_bytes = nf ? m->files[nf - 1].data_begin + m->files[nf - 1].data_bytes : 0;
		bfp_manifest mf;
		model_manifest(m, &mf);
		if (bfp_manifest_check(&mf) != BFP_OK)
			rc = set_err(err, errlen, "%s: the shards' tensors do not tile their data", path);
		m->n_params = bfp_manifest_params(&mf);
		m->model_id = bfp_manifest_id(&mf);
		m->safetensors = 1;
		if (!rc && single_header(m))
			rc = set_err(err, errlen, "out of memory");
	}
	if (!rc) {
		const size_t need = (size_t)m->n_params * 2;
		m->params = buf && cap >= need ? buf : alloc_aligned(need);
		if (!m->params)
			rc = set_err(err, errlen, "%s: out of memory for %llu parameters", path,
				     (unsigned long long)m->n_params);
		else if (m->n_params)
			m->params[m->n_params - 1] = 0; /* an odd section's padding byte */
	}
	for (size_t k = 0; !rc && k < nf; k++) {
		const model_file *f = &m->files[k];
		if (read_full(fds[k], (uint8_t *)m->params + f->data_begin, (size_t)f->data_bytes,
			      f->header_len))
			rc = set_err(err, errlen, "%s/%s: read error", dir, f->name);
	}
	for (size_t k = 0; fds && k < nf; k++)
		if (fds[k] >= 0)
			close(fds[k]);
	free(fds);
	if (rc) {
		if (m->params == buf) /* still the caller's */
			m->params = NULL;
		model_free(m);
	}
	return rc;
}

int model_set_header(model *m, size_t k, const uint8_t *json, size_t len, char *err,
		     size_t errlen)
{
	const size_t files = model_n_files(m);
	if (k >= files)
		return files ? set_err(err, errlen, "a header for file %zu, the base has %zu "
				       "safetensors file(s)", k, files)
			     : set_err(err, errlen, "a safetensors header for a raw BF16 base");
	const uint64_t bytes = m->n_files ? m->files[k].data_bytes : m->data_bytes;
	const uint64_t id = m->n_files ? m->files[k].layout_id : m->model_id;
	const char *name = m->n_files ? m->files[k].name : "the base";
	if (len < 2 || len > ST_HEADER_MAX)
		return set_err(err, errlen, "the header for %s: length %zu out of range", name, len);
	uint8_t *h = malloc(8 + len);
	if (!h)
		return set_err(err, errlen, "out of memory");
	for (int i = 0; i < 8; i++)
		h[i] = (uint8_t)((uint64_t)len >> (8 * i));
	memcpy(h + 8, json, len);
	model t;
	char e2[256];
	if (model_parse_safetensors(&t, h, 8 + len, 8 + len + bytes, e2, sizeof(e2))) {
		free(h);
		return set_err(err, errlen, "the header for %s: %s", name, e2);
	}
	const int same = t.model_id == id && t.data_bytes == bytes;
	model_free(&t);
	if (!same) {
		free(h);
		return set_err(err, errlen, "the header for %s has another tensor layout than the "
			       "base's", name);
	}
	if (m->n_files) {
		free(m->files[k].header);
		m->files[k].header = h;
		m->files[k].header_len = 8 + len;
	} else {
		if (m->map) { /* the parameters stay where the mapping has them */
			free(h);
			return set_err(err, errlen, "a mapped model's header cannot be replaced");
		}
		free(m->header);
		m->header = h;
		m->header_len = 8 + len;
	}
	return 0;
}

int model_set_index(model *m, const uint8_t *json, size_t len, char *err, size_t errlen)
{
	if (!m->n_files)
		return set_err(err, errlen, "a shard index for a base that is not a sharded "
			       "checkpoint");
	char e2[256];
	json_t *nw = index_parse(json, len, e2, sizeof(e2));
	if (!nw)
		return set_err(err, errlen, "the index: %s", e2);
	json_t *old = index_parse(m->index, m->index_len, e2, sizeof(e2));
	const int same = old && json_equal(json_object_get(old, "weight_map"),
					   json_object_get(nw, "weight_map"));
	json_decref(old);
	json_decref(nw);
	if (!same)
		return set_err(err, errlen, "the index maps the tensors to other files than the "
			       "base's");
	uint8_t *c = malloc(len ? len : 1);
	if (!c)
		return set_err(err, errlen, "out of memory");
	memcpy(c, json, len);
	free(m->index);
	m->index = c;
	m->index_len = len;
	return 0;
}

/* model_load, model_map and model_load_into: map (map) or read the data
 * section, into buf when it is given and fits. */
static int model_open(model *m, const char *path, int map, void *buf, size_t cap, char *err,
		      size_t errlen)
{
	struct stat sb;
	memset(m, 0, sizeof(*m));
	if (model_path_sharded(path)) /* read, not mapped: one array of several files */
		return load_sharded(m, path, buf, cap, err, errlen);
	int fd = open_input(path, &sb, err, errlen);
	if (fd < 0)
		return -1;
	if (!strcmp(path, "-"))
		path = "standard input"; /* in messages */
	uint64_t size = (uint64_t)sb.st_size;
	if (size == 0) {
		close(fd);
		return set_err(err, errlen, "%s: empty file", path);
	}
	/* safetensors by its name or by its content (a header that fails to
	 * parse is an error either way, not raw data); anything else is raw
	 * BF16 */
	if (model_named_safetensors(path) || starts_like_safetensors(fd, size)) {
		if (read_st_header(m, fd, path, size, err, errlen)) {
			close(fd);
			return -1;
		}
	} else {
		if (size % 2) {
			close(fd);
			return set_err(err, errlen, "%s: raw BF16 file has an odd size (%llu bytes)",
				    path, (unsigned long long)size);
		}
		if (raw_model(m, size / 2)) {
			close(fd);
			return set_err(err, errlen, "out of memory");
		}
	}
	if (map && map_params(m, fd, size)) {
		close(fd);
		return 0;
	}
	if (buf && cap >= (size_t)m->n_params * 2) {
		m->params = buf;
		if (m->n_params) /* an odd section's padding byte */
			m->params[m->n_params - 1] = 0;
	} else {
		m->params = alloc_aligned((size_t)m->n_params * 2);
	}
	if (!m->params) {
		close(fd);
		model_free(m);
		return set_err(err, errlen, "%s: out of memory for %llu parameters", path,
			    (unsigned long long)m->n_params);
	}
	if (read_full(fd, m->params, (size_t)m->data_bytes, m->header_len)) {
		close(fd);
		if (m->params == buf) /* still the caller's */
			m->params = NULL;
		model_free(m);
		return set_err(err, errlen, "%s: read error", path);
	}
	close(fd);
	return 0;
}

int model_load(model *m, const char *path, char *err, size_t errlen)
{
	return model_open(m, path, 0, NULL, 0, err, errlen);
}

int model_load_into(model *m, const char *path, void *buf, size_t cap, char *err,
		    size_t errlen)
{
	return model_open(m, path, 0, buf, cap, err, errlen);
}

int model_map(model *m, const char *path, char *err, size_t errlen)
{
	return model_open(m, path, 1, NULL, 0, err, errlen);
}

/* ---- temporary files removed when a signal ends the process ----
 * write_file_atomic() lists the temporary it is writing here; the handler
 * of atomic_cleanup_on_signals() unlinks what is listed (unlink() is
 * async-signal-safe) and dies of the signal as it would have. A slot is
 * 0 free, 2 being filled, 1 listed. */
#define TMP_SLOTS 16
static char tmp_paths[TMP_SLOTS][4096];
static atomic_int tmp_state[TMP_SLOTS];

static int tmp_list(const char *path)
{
	if (strlen(path) >= sizeof(tmp_paths[0]))
		return -1; /* not listed: the write itself still works */
	for (int i = 0; i < TMP_SLOTS; i++) {
		int free_slot = 0;
		if (atomic_compare_exchange_strong(&tmp_state[i], &free_slot, 2)) {
			strcpy(tmp_paths[i], path);
			atomic_store(&tmp_state[i], 1);
			return i;
		}
	}
	return -1;
}

static void tmp_unlist(int slot)
{
	if (slot >= 0)
		atomic_store(&tmp_state[slot], 0);
}

static void on_fatal_signal(int sig)
{
	static const char bus[] = "bus error: a mapped input file shrank while in use "
				  "(rewritten in place?)\n";
	if (sig == SIGBUS && atomic_load(&mapped_files))
		(void)!write(2, bus, sizeof(bus) - 1);
	for (int i = 0; i < TMP_SLOTS; i++)
		if (atomic_load(&tmp_state[i]) == 1)
			unlink(tmp_paths[i]);
	signal(sig, SIG_DFL);
	raise(sig);
}

void atomic_cleanup_on_signals(void)
{
	static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGBUS};
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
		struct sigaction old, sa;
		/* a signal ignored by whoever started us stays ignored */
		if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
			continue;
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_fatal_signal;
		sigemptyset(&sa.sa_mask);
		sigaction(sigs[i], &sa, NULL);
	}
	/* over a file size limit, write() then fails with EFBIG and the
	 * error path removes the temporary, instead of the process dying */
	signal(SIGXFSZ, SIG_IGN);
}

static int write_all(int fd, const void *const *bufs, const size_t *lens, size_t nbufs,
		     const char *path, char *err, size_t errlen)
{
	for (size_t b = 0; b < nbufs; b++) {
		const uint8_t *p = bufs[b];
		size_t n = lens[b];
		while (n > 0) {
			ssize_t w = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0)
				return set_err(err, errlen, "%s: write failed: %s", path,
					       w < 0 ? strerror(errno) : "short write");
			p += w;
			n -= (size_t)w;
		}
	}
	return 0;
}

/* The path a symbolic link names, relative to the link's directory when
 * it is a relative name (malloc'd; NULL with errno on failure). */
static char *link_target(const char *path)
{
	char buf[PATH_MAX];
	ssize_t n = readlink(path, buf, sizeof(buf) - 1);
	if (n < 0)
		return NULL;
	if ((size_t)n >= sizeof(buf) - 1) {
		errno = ENAMETOOLONG;
		return NULL;
	}
	buf[n] = 0;
	const char *slash = strrchr(path, '/');
	char *out = NULL;
	if (buf[0] == '/' || !slash)
		out = strdup(buf);
	else if (asprintf(&out, "%.*s%s", (int)(slash + 1 - path), path, buf) < 0)
		out = NULL;
	if (!out)
		errno = ENOMEM;
	return out;
}

size_t huge_unit(int fd)
{
	struct statfs fs;
	struct stat sb;
	if (fstatfs(fd, &fs) != 0 || (unsigned long)fs.f_type != HUGETLBFS_MAGIC ||
	    fstat(fd, &sb) != 0 || sb.st_blksize <= 0)
		return 0;
	return (size_t)sb.st_blksize;
}

/* The contents into the new file fd: written, or on hugetlbfs (which
 * takes no write(2)) copied through a mapping of whole huge pages. */
static int put_contents(int fd, const void *const *bufs, const size_t *lens, size_t nbufs,
			const char *path, char *err, size_t errlen)
{
	const size_t unit = huge_unit(fd);
	if (!unit)
		return write_all(fd, bufs, lens, nbufs, path, err, errlen);
	size_t total = 0;
	for (size_t i = 0; i < nbufs; i++)
		total += lens[i];
	const size_t size = (total + unit - 1) / unit * unit;
	uint8_t *map = MAP_FAILED;
	if (ftruncate(fd, (off_t)size) == 0)
		map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED)
		return set_err(err, errlen, "%s: %zu bytes of huge pages: %s", path, size,
			       strerror(errno));
	size_t at = 0;
	for (size_t i = 0; i < nbufs; i++) {
		memcpy(map + at, bufs[i], lens[i]);
		at += lens[i];
	}
	munmap(map, size);
	return 0;
}

/* A whole-file write lock of the open file description fd: held by a
 * writer on its temporary until it is renamed or removed, and released
 * by the kernel when the writer dies however it dies. 0, or -1 when it
 * is held by another or the file system has no such locks. */
static int ofd_lock(int fd)
{
	struct flock fl;
	memset(&fl, 0, sizeof(fl));
	fl.l_type = F_WRLCK;
	fl.l_whence = SEEK_SET;
	return fcntl(fd, F_OFD_SETLK, &fl);
}

/* Temporaries that writers of path left when they were killed (SIGKILL,
 * a power cut) before they could remove them: names of tmpl's form
 * (PATH.tmp.XXXXXX or the short one) beside it, our own, older than a
 * few seconds and locked by no one (a live writer holds its lock from
 * just after creating it). They are removed; anything else is left. */
/* mkstemp(tmpl), the temporary listed for the signal clean-up (*slot)
 * and locked as ours (ofd_lock: remove_stale_temporaries passes it
 * over), with the fatal signals held meanwhile: one arriving in between
 * would leave it behind unlisted. The descriptor, or -1 with mkstemp's
 * errno in *mk_errno. */
static int mkstemp_listed(char *tmpl, int *slot, int *mk_errno)
{
	sigset_t fatal, was;
	sigemptyset(&fatal);
	sigaddset(&fatal, SIGINT);
	sigaddset(&fatal, SIGTERM);
	sigaddset(&fatal, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &fatal, &was);
	int fd = mkstemp(tmpl);
	*mk_errno = errno;
	if (fd >= 0) {
		*slot = tmp_list(tmpl);
		(void)ofd_lock(fd); /* ours while we live (no such locks: none) */
	}
	pthread_sigmask(SIG_SETMASK, &was, NULL);
	return fd;
}

static void remove_stale_temporaries(const char *tmpl)
{
	char *dcopy = strdup(tmpl), *bcopy = strdup(tmpl);
	if (!dcopy || !bcopy)
		goto out;
	const char *dir = dirname(dcopy), *base = basename(bcopy);
	const size_t pre = strlen(base) - 6; /* without XXXXXX */
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!d) {
		if (dfd >= 0)
			close(dfd);
		goto out;
	}
	const time_t now = time(NULL);
	struct dirent *e;
	while ((e = readdir(d))) {
		if (strlen(e->d_name) != pre + 6 || strncmp(e->d_name, base, pre) != 0)
			continue;
		int fd = openat(dfd, e->d_name, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0)
			continue;
		struct stat fs, ns;
		if (fstat(fd, &fs) == 0 && S_ISREG(fs.st_mode) && fs.st_uid == geteuid() &&
		    fs.st_mtime + 10 < now && ofd_lock(fd) == 0 &&
		    fstatat(dfd, e->d_name, &ns, AT_SYMLINK_NOFOLLOW) == 0 &&
		    ns.st_ino == fs.st_ino && ns.st_dev == fs.st_dev)
			(void)unlinkat(dfd, e->d_name, 0);
		close(fd);
	}
	closedir(d);
out:
	free(dcopy);
	free(bcopy);
}

/* Put the finished temporary in place: over what path names, or, with
 * noreplace, only where nothing is (a link cannot replace either, where
 * the file system has no such renames). */
static int put_in_place(const char *tmp, const char *path, int noreplace)
{
	if (!noreplace)
		return rename(tmp, path);
	if (renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_NOREPLACE) == 0)
		return 0;
	if (errno != EINVAL || link(tmp, path) != 0)
		return -1;
	unlink(tmp);
	return 0;
}

/* write_file_atomic, and with noreplace write_file_new. */
static int write_atomic(const char *path, const void *const *bufs, const size_t *lens,
			size_t nbufs, int noreplace, char *err, size_t errlen)
{
	char *tmp = NULL, *dcopy = NULL;
	int fd = -1, slot = -1;
	struct stat sb;
	if (lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode)) {
		/* a symbolic link: replace the file it names, keep the link;
		 * one that names a file not there yet (a buffer linked to a
		 * hugetlbfs mount before it is made) gets the file it names */
		const uid_t owner = sb.st_uid;
		char *real = realpath(path, NULL);
		if (!real && errno == ENOENT && stat(path, &sb) != 0 && errno == ENOENT) {
			/* followed by hand, so as the kernel would with
			 * fs.protected_symlinks: only a link of our own (one
			 * planted in /tmp or /dev/shm must not make us create a
			 * file where it points) */
			if (owner != geteuid())
				return set_err(err, errlen, "%s: a symbolic link of another user to a "
					       "file not there: refused", path);
			real = link_target(path);
		}
		if (real) {
			int rc = write_atomic(real, bufs, lens, nbufs, noreplace, err, errlen);
			free(real);
			return rc;
		}
		/* else a link to what has no path (a pipe of /proc/self/fd):
		 * written in place below */
	}
	if (noreplace && lstat(path, &sb) == 0)
		return set_err(err, errlen, "%s exists", path);
	if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
		return set_err(err, errlen, "%s: is a directory", path);
	if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
		/* a device, FIFO or socket (-o /dev/stdout): written in place;
		 * renaming a file over it would replace the device node */
		fd = open(path, O_WRONLY | O_CLOEXEC);
		if (fd < 0)
			return set_err(err, errlen, "%s: %s", path, strerror(errno));
		int rc = write_all(fd, bufs, lens, nbufs, path, err, errlen);
		if (close(fd) != 0 && rc == 0)
			rc = set_err(err, errlen, "%s: close failed: %s", path, strerror(errno));
		return rc;
	}
	/* PATH.tmp.XXXXXX, or, where that name would be too long for the
	 * directory (a name of NAME_MAX less 10 or more), a short one beside it */
	const char *slash = strrchr(path, '/');
	const char *base = slash ? slash + 1 : path;
	int rc_tmp = strlen(base) + 11 <= NAME_MAX
			     ? asprintf(&tmp, "%s.tmp.XXXXXX", path)
			     : asprintf(&tmp, "%.*s.bfpatch.tmp.XXXXXX", (int)(base - path), path);
	if (rc_tmp < 0)
		return set_err(err, errlen, "out of memory");
	remove_stale_temporaries(tmp);
	int mk_errno;
	fd = mkstemp_listed(tmp, &slot, &mk_errno);
	if (fd < 0) {
		set_err(err, errlen, "%s: cannot create temporary file: %s", path,
			strerror(mk_errno));
		free(tmp);
		return -1;
	}
	if (put_contents(fd, bufs, lens, nbufs, path, err, errlen))
		goto bad;
	if (fsync(fd) != 0) {
		set_err(err, errlen, "%s: fsync failed: %s", path, strerror(errno));
		goto bad;
	}
	/* mkstemp made it 0600: a file it replaces keeps its mode, group
	 * and (where we may give it) owner; a new one gets the mode a plain
	 * create would give */
	struct stat old;
	mode_t mode;
	if (stat(path, &old) == 0 && S_ISREG(old.st_mode)) {
		mode = old.st_mode & 07777;
		if (fchown(fd, old.st_uid, old.st_gid) != 0)
			(void)!fchown(fd, (uid_t)-1, old.st_gid);
	} else {
		mode_t um = umask(0);
		umask(um);
		mode = 0666 & ~um;
	}
	if (fchmod(fd, mode) != 0) {
		set_err(err, errlen, "%s: chmod failed: %s", path, strerror(errno));
		goto bad;
	}
	if (close(fd) != 0) {
		fd = -1;
		set_err(err, errlen, "%s: close failed: %s", path, strerror(errno));
		goto bad;
	}
	fd = -1;
	if (put_in_place(tmp, path, noreplace) != 0) {
		if (noreplace && errno == EEXIST) /* made since we looked */
			set_err(err, errlen, "%s exists", path);
		else
			set_err(err, errlen, "%s: rename failed: %s", path, strerror(errno));
		goto bad;
	}
	dcopy = strdup(path);
	if (dcopy) {
		int dfd = open(dirname(dcopy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd >= 0) {
			(void)fsync(dfd);
			close(dfd);
		}
	}
	free(dcopy);
	tmp_unlist(slot);
	free(tmp);
	return 0;
bad:
	if (fd >= 0)
		close(fd);
	unlink(tmp);
	tmp_unlist(slot);
	free(tmp);
	return -1;
}

int write_file_atomic(const char *path, const void *const *bufs, const size_t *lens,
		      size_t nbufs, char *err, size_t errlen)
{
	return write_atomic(path, bufs, lens, nbufs, 0, err, errlen);
}

int write_file_new(const char *path, const void *const *bufs, const size_t *lens,
		   size_t nbufs, char *err, size_t errlen)
{
	return write_atomic(path, bufs, lens, nbufs, 1, err, errlen);
}

/* One file of model_save_dir: a temporary beside dir/name, written,
 * synced and given the mode a plain create would give (or the mode of
 * the file it will replace); *tmp its name, *slot its signal-cleanup
 * listing. */
static int dir_temp(const char *dir, const char *name, const void *const *bufs,
		    const size_t *lens, size_t nbufs, char **tmp, int *slot, char *err,
		    size_t errlen)
{
	char path[PATH_MAX];
	struct stat old;
	*tmp = NULL;
	*slot = -1;
	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path) ||
	    (strlen(name) + 11 <= NAME_MAX ? asprintf(tmp, "%s.tmp.XXXXXX", path)
					   : asprintf(tmp, "%s/.bfpatch.tmp.XXXXXX", dir)) < 0) {
		*tmp = NULL;
		return set_err(err, errlen, "%s/%s: path too long", dir, name);
	}
	int mk_errno;
	int fd = mkstemp_listed(*tmp, slot, &mk_errno);
	if (fd < 0) {
		free(*tmp);
		*tmp = NULL;
		return set_err(err, errlen, "%s: cannot create temporary file: %s", path,
			       strerror(mk_errno));
	}
	mode_t mode;
	if (stat(path, &old) == 0 && S_ISREG(old.st_mode)) {
		mode = old.st_mode & 07777;
	} else {
		mode_t um = umask(0);
		umask(um);
		mode = 0666 & ~um;
	}
	int rc = write_all(fd, bufs, lens, nbufs, path, err, errlen);
	if (!rc && fsync(fd) != 0)
		rc = set_err(err, errlen, "%s: fsync failed: %s", path, strerror(errno));
	if (!rc && fchmod(fd, mode) != 0)
		rc = set_err(err, errlen, "%s: chmod failed: %s", path, strerror(errno));
	if (close(fd) != 0 && !rc)
		rc = set_err(err, errlen, "%s: close failed: %s", path, strerror(errno));
	return rc;
}

int model_save_dir(const model *m, const char *dir, int force, const char *in_place, char *err,
		   size_t errlen)
{
	struct stat sb;
	int created = 0, rc = 0;
	if (!m->n_files || !m->index)
		return set_err(err, errlen, "%s: not a sharded checkpoint to write", dir);
	if (stat(dir, &sb) == 0) {
		if (!S_ISDIR(sb.st_mode))
			return set_err(err, errlen, "%s exists and is not a directory", dir);
		if (!force && !(in_place && same_file(dir, in_place)))
			return set_err(err, errlen, "%s exists: give --force to replace its files",
				       dir);
	} else if (mkdir(dir, 0777) != 0) {
		return set_err(err, errlen, "%s: cannot create the directory: %s", dir,
			       strerror(errno));
	} else {
		created = 1;
	}
	const size_t n = m->n_files + 1; /* the shards, then the index */
	char **tmp = calloc(n, sizeof(char *));
	int *slot = malloc(n * sizeof(int));
	if (!tmp || !slot)
		rc = set_err(err, errlen, "out of memory");
	for (size_t k = 0; slot && k < n; k++)
		slot[k] = -1;
	for (size_t k = 0; !rc && k < n; k++) {
		if (k < m->n_files) {
			const model_file *f = &m->files[k];
			const void *bufs[2] = {f->header, (const uint8_t *)m->params + f->data_begin};
			const size_t lens[2] = {f->header_len, (size_t)f->data_bytes};
			rc = dir_temp(dir, f->name, bufs, lens, 2, &tmp[k], &slot[k], err, errlen);
		} else {
			const void *bufs[1] = {m->index};
			const size_t lens[1] = {m->index_len};
			rc = dir_temp(dir, m->index_name ? m->index_name : MODEL_INDEX_NAME, bufs, lens,
				      1, &tmp[k], &slot[k], err, errlen);
		}
	}
	/* all written: now each in place, the index last */
	for (size_t k = 0; !rc && k < n; k++) {
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/%s", dir,
			 k < m->n_files ? m->files[k].name
					: m->index_name ? m->index_name : MODEL_INDEX_NAME);
		if (rename(tmp[k], path) != 0)
			rc = set_err(err, errlen, "%s: rename failed: %s", path, strerror(errno));
		else {
			tmp_unlist(slot[k]);
			free(tmp[k]);
			tmp[k] = NULL;
		}
	}
	for (size_t k = 0; tmp && k < n; k++) {
		if (tmp[k]) {
			unlink(tmp[k]);
			tmp_unlist(slot[k]);
			free(tmp[k]);
		}
	}
	free(tmp);
	free(slot);
	if (rc && created)
		rmdir(dir); /* only if nothing of ours got in */
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		(void)fsync(dfd);
		close(dfd);
	}
	return rc;
}

/* Whether n is step-N.safetensors, or (dir: a directory) step-N, as
 * written with %04u (*v = N). */
static int step_name(const char *n, int dir, uint32_t *v)
{
	static const char suf[] = ".safetensors";
	const char *sx = dir ? "" : suf;
	size_t len = strlen(n), digits = 0;
	if (strncmp(n, "step-", 5) != 0)
		return 0;
	while (n[5 + digits] >= '0' && n[5 + digits] <= '9')
		digits++;
	if (digits < 4 || digits > 9 || strcmp(n + 5 + digits, sx) != 0 ||
	    len != 5 + digits + strlen(sx))
		return 0;
	*v = (uint32_t)strtoul(n + 5, NULL, 10);
	char canon[32]; /* only the name the publisher reads: step-%04u */
	snprintf(canon, sizeof(canon), "step-%04u%s", *v, sx);
	return strcmp(canon, n) == 0;
}

/* A directory entry of steps_scan and steps_last: a step file, or a
 * sharded step's directory. */
static int step_entry(DIR *d, const struct dirent *e, uint32_t *v)
{
	if (step_name(e->d_name, 0, v))
		return 1;
	if (!step_name(e->d_name, 1, v))
		return 0;
	struct stat sb;
	return fstatat(dirfd(d), e->d_name, &sb, 0) == 0 && S_ISDIR(sb.st_mode);
}

void step_path(char *out, size_t outlen, const char *dir, uint32_t n)
{
	struct stat sb;
	snprintf(out, outlen, "%s/step-%04u.safetensors", dir, n);
	if (stat(out, &sb) == 0 || errno != ENOENT)
		return;
	snprintf(out, outlen, "%s/step-%04u", dir, n);
	if (stat(out, &sb) != 0 || !S_ISDIR(sb.st_mode))
		snprintf(out, outlen, "%s/step-%04u.safetensors", dir, n);
}

unsigned steps_last(const char *dir, uint32_t from, uint32_t to, uint32_t *out, unsigned max)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	unsigned n = 0;
	uint32_t v;
	while (d && max && (e = readdir(d))) {
		if (!step_entry(d, e, &v) || v < from || v >= to)
			continue;
		unsigned j = 0; /* a step both as a file and a directory: once */
		while (j < n && out[j] != v)
			j++;
		if (j < n)
			continue;
		/* out[] ascending, the max highest kept */
		unsigned i;
		if (n < max) { /* in its place, the higher ones up */
			for (i = n++; i > 0 && out[i - 1] > v; i--)
				out[i] = out[i - 1];
		} else if (v > out[0]) { /* the lowest goes, the lower ones down */
			for (i = 0; i + 1 < n && out[i + 1] < v; i++)
				out[i] = out[i + 1];
		} else {
			continue;
		}
		out[i] = v;
	}
	if (d)
		closedir(d);
	return n;
}

int steps_scan(const char *dir, uint32_t from, uint32_t *lo, uint32_t *hi)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int found = 0;
	while (d && (e = readdir(d))) {
		uint32_t v;
		if (!step_entry(d, e, &v) || v < from)
			continue;
		if (!found || v < *lo)
			*lo = v;
		if (!found || v > *hi)
			*hi = v;
		found = 1;
	}
	if (d)
		closedir(d);
	return found;
}

int same_file(const char *a, const char *b)
{
	struct stat x, y;
	return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

int refuse_same(const char *cmd, const char *out, const char *in, const char *what)
{
	if (!in || !same_file(out, in))
		return 0;
	fprintf(stderr, "bfpatch %s: -o %s is the %s %s: writing it would destroy that input\n",
		cmd, out, what, in);
	return 2;
}

int model_save(const model *m, const char *path, char *err, size_t errlen)
{
	const void *bufs[2] = {m->header, m->params};
	size_t lens[2] = {m->header_len, (size_t)m->data_bytes};
	if (!m->safetensors)
		return write_file_atomic(path, bufs + 1, lens + 1, 1, err, errlen);
	return write_file_atomic(path, bufs, lens, 2, err, errlen);
}
