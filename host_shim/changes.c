/*
 * changes.c: the shim's change lists (changes.h). A patch prepared whole
 * while staged has its list written then, between bursts of frames, so
 * its commit only renames the file. Otherwise the positions come from the
 * hooks a commit already calls before it writes a delta frame's values
 * (the undo journal's, the DMA log's) or from the frames' preparation, the
 * values are the verified target words, and the commit writes 6 bytes per
 * changed weight and a CRC over them (a prepared frame's entry was summed
 * while staged: its CRC is combined, not computed again).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "bfpatch.h"
#include "changes.h"
#include "patch.h"
#include "util.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the lists are little-endian");

/* CRC-32 of zlib (reflected 0xEDB88320): Python checks it with
 * zlib.crc32, which every Python has. zlib's own where the build has it
 * (about twice as fast), else eight bytes a step from tables. */
#ifdef BFP_HAVE_ZLIB
#include <zlib.h>

static void crc_init(uint32_t t[8][256])
{
	(void)t;
}

static uint32_t crc_update(const uint32_t t[8][256], uint32_t crc, const uint8_t *p, size_t n)
{
	(void)t;
	while (n) {
		const uInt k = n > (1u << 30) ? 1u << 30 : (uInt)n;
		crc = (uint32_t)crc32(crc, p, k);
		p += k;
		n -= k;
	}
	return crc;
}
#else
static void crc_init(uint32_t t[8][256])
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
		t[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++)
		for (int k = 1; k < 8; k++)
			t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 255];
}

static uint32_t crc_update(const uint32_t t[8][256], uint32_t crc, const uint8_t *p, size_t n)
{
	crc = ~crc;
	for (; n >= 8; p += 8, n -= 8) {
		uint32_t a, b;
		memcpy(&a, p, 4);
		memcpy(&b, p + 4, 4);
		a ^= crc;
		crc = t[7][a & 255] ^ t[6][a >> 8 & 255] ^ t[5][a >> 16 & 255] ^ t[4][a >> 24] ^
		      t[3][b & 255] ^ t[2][b >> 8 & 255] ^ t[1][b >> 16 & 255] ^ t[0][b >> 24];
	}
	while (n--)
		crc = t[0][(crc ^ *p++) & 255] ^ (crc >> 8);
	return ~crc;
}
#endif

/* CRC-32 of A then B from those of A and B and B's length (zlib's
 * crc32_combine: multiplying by x^(8 len) modulo the polynomial, from
 * x2n[k] = x^(2^k)): a prepared frame's entry is summed while it is
 * staged, not again in the commit. */
static uint32_t multmodp(uint32_t a, uint32_t b)
{
	uint32_t m = 1u << 31, p = 0;
	for (;;) {
		if (a & m) {
			p ^= b;
			if (!(a & (m - 1)))
				break;
		}
		m >>= 1;
		b = b & 1 ? (b >> 1) ^ 0xEDB88320u : b >> 1;
	}
	return p;
}

static void x2n_init(uint32_t x2n[32])
{
	x2n[0] = 1u << 30; /* x^1 */
	for (int k = 1; k < 32; k++)
		x2n[k] = multmodp(x2n[k - 1], x2n[k - 1]);
}

static uint32_t crc_combine(const uint32_t x2n[32], uint32_t crc1, uint32_t crc2,
			    uint64_t len2)
{
	uint32_t p = 1u << 31; /* x^0 */
	for (unsigned k = 3; len2; len2 >>= 1, k++)
		if (len2 & 1)
			p = multmodp(x2n[k & 31], p);
	return multmodp(p, crc1) ^ crc2;
}

int changes_init(shim_changes *c, unsigned keep, const char *buffer)
{
	memset(c, 0, sizeof(*c));
	c->keep = keep;
	if (!keep)
		return 0;
	size_t n = strlen(buffer) + sizeof(".changes");
	if (!(c->dir = malloc(n))) {
		c->keep = 0;
		return -1;
	}
	snprintf(c->dir, n, "%s.changes", buffer);
	crc_init(c->crc_tab);
	x2n_init(c->x2n);
	return 0;
}

void changes_fini(shim_changes *c)
{
	changes_end(c);
	changes_prep_drop(c, NULL);
	free(c->dir);
	c->dir = NULL;
}

/* "0000000042.chg": 1 and its version, else 0 */
static int list_name(const char *name, uint32_t *v)
{
	char *end;
	if (strlen(name) != 14 || strcmp(name + 10, ".chg") || name[0] < '0' || name[0] > '9')
		return 0;
	unsigned long x = strtoul(name, &end, 10);
	if (end != name + 10 || x > UINT32_MAX)
		return 0;
	*v = (uint32_t)x;
	return 1;
}

static void list_path(const shim_changes *c, char *out, size_t n, uint32_t v, int tmp)
{
	snprintf(out, n, "%s/%s%010" PRIu32 ".chg%s", c->dir, tmp ? "." : "", v, tmp ? ".tmp" : "");
}

/* Whether the list at path is one of this buffer file's (its header). */
static int list_ours(const shim_changes *c, const char *path)
{
	uint8_t h[CHG_HDR];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t r = read(fd, h, sizeof(h));
	close(fd);
	uint64_t ino;
	memcpy(&ino, h + 32, 8);
	return r == (ssize_t)sizeof(h) && !memcmp(h, CHG_MAGIC, 8) && ino == c->ino;
}

/* Remove the lists past newest (all of them but newest with only), of
 * another buffer file (check), and every temporary; keep the newest keep
 * of the rest. */
static void sweep(shim_changes *c, uint32_t newest, int only, int check)
{
	DIR *d = opendir(c->dir);
	if (!d)
		return;
	uint32_t *v = NULL;
	size_t n = 0, cap = 0;
	char path[4096];
	for (struct dirent *e; (e = readdir(d));) {
		uint32_t x;
		const size_t len = strlen(e->d_name);
		if (e->d_name[0] == '.' && len > 4 && !strcmp(e->d_name + len - 4, ".tmp")) {
			snprintf(path, sizeof(path), "%s/%s", c->dir, e->d_name);
			unlink(path);
			continue;
		}
		if (!list_name(e->d_name, &x))
			continue;
		list_path(c, path, sizeof(path), x, 0);
		if (x > newest || (only && x != newest) || (check && !list_ours(c, path))) {
			unlink(path);
			continue;
		}
		if (n == cap) {
			size_t nc = cap ? 2 * cap : 16;
			uint32_t *g = realloc(v, nc * sizeof(*v));
			if (!g)
				break;
			v = g;
			cap = nc;
		}
		v[n++] = x;
	}
	closedir(d);
	/* newest first; everything after the first keep goes */
	for (size_t i = 1; i < n; i++)
		for (size_t k = i; k > 0 && v[k - 1] < v[k]; k--) {
			uint32_t t = v[k];
			v[k] = v[k - 1];
			v[k - 1] = t;
		}
	for (size_t i = c->keep; i < n; i++) {
		list_path(c, path, sizeof(path), v[i], 0);
		unlink(path);
	}
	free(v);
}

int changes_ready(shim_changes *c, int fd, uint32_t version)
{
	if (!c->keep || c->ready)
		return c->ready ? 0 : -1;
	struct statfs fs;
	if (!fstatfs(fd, &fs) && fs.f_type == HUGETLBFS_MAGIC) {
		/* its files take no write(2), and come in huge pages */
		fprintf(stderr, "bfpatch-shim: the buffer is on hugetlbfs: no change lists are "
			"kept (--changes needs a buffer on tmpfs or a disk)\n");
		c->keep = 0;
		return -1;
	}
	struct stat st;
	if (fstat(fd, &st) || (mkdir(c->dir, 0755) && errno != EEXIST)) {
		fprintf(stderr, "bfpatch-shim: --changes: %s: %s; no change lists are written\n",
			c->dir, strerror(errno));
		c->keep = 0;
		return -1;
	}
	c->ino = (uint64_t)st.st_ino;
	sweep(c, version, 0, 1);
	c->ready = 1;
	return 0;
}

void changes_end(shim_changes *c)
{
	for (uint32_t i = 0; c->f && i < c->n_frames; i++)
		free(c->f[i].own);
	free(c->f);
	free(c->at);
	c->f = NULL;
	c->at = NULL;
	c->n_frames = 0;
	c->lost = 0;
	c->params = NULL;
}

static int by_begin(const void *a, const void *b)
{
	const chg_frame *x = a, *y = b;
	return x->begin < y->begin ? -1 : x->begin > y->begin;
}

int changes_begin(shim_changes *c, const uint8_t *const *frames, const uint32_t *lens,
		  uint32_t n, const uint16_t *params)
{
	changes_end(c);
	c->f = calloc(n ? n : 1, sizeof(*c->f));
	c->at = calloc(n ? n : 1, sizeof(*c->at));
	if (!c->f || !c->at) {
		changes_end(c);
		return -1;
	}
	c->n_frames = n;
	c->params = params;
	for (uint32_t i = 0; i < n; i++) {
		bfp_frame_header h;
		if (bfp_frame_parse(frames[i], lens[i], &h) != BFP_OK) {
			c->lost = 1; /* checked by the staging: not reached */
			continue;
		}
		c->f[i].begin = h.range_begin;
		c->f[i].range_len = h.range_len;
		/* a keyframe-coded frame of the patch: its whole range is new */
		c->f[i].dense = !bfp_encoding_is_delta(h.encoding);
		c->f[i].idx = i;
	}
	/* in range order, the order of the file; at[] finds frame i's record */
	qsort(c->f, n, sizeof(*c->f), by_begin);
	for (uint32_t i = 0; i < n; i++)
		c->at[c->f[i].idx] = i;
	return 0;
}

/* The record of the frame whose range starts at begin (frames do not
 * overlap: at most one; the records are in range order). */
static chg_frame *frame_at(shim_changes *c, uint64_t begin)
{
	uint32_t lo = 0, hi = c->n_frames;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (c->f[mid].begin < begin)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < c->n_frames && c->f[lo].begin == begin && c->f[lo].range_len ? &c->f[lo]
										 : NULL;
}

void changes_take(shim_changes *c, uint32_t i, const uint32_t *pos, const uint16_t *val,
		  uint32_t n, const uint32_t *crc)
{
	if (!c->f || i >= c->n_frames)
		return;
	chg_frame *f = &c->f[c->at[i]];
	f->pos = pos;
	f->val = val;
	f->n = n;
	f->noted = 1;
	f->has_crc = crc != NULL;
	f->crc = crc ? *crc : 0;
}

/* Keep a copy of the positions a hook was given for the frame at begin. */
static void note(shim_changes *c, uint64_t begin, const uint32_t *pos, uint32_t n)
{
	if (!c->f)
		return;
	chg_frame *f = frame_at(c, begin);
	if (!f) {
		c->lost = 1;
		return;
	}
	if (f->noted && !f->own)
		return; /* prepared: known already */
	uint32_t *p = malloc((n ? n : 1) * sizeof(*p));
	if (!p) {
		c->lost = 1;
		return;
	}
	if (n)
		memcpy(p, pos, (size_t)n * sizeof(*p));
	free(f->own);
	f->own = p;
	f->pos = p;
	f->val = NULL;
	f->n = n;
	f->noted = 1;
	f->has_crc = 0;
}

void changes_undo_note(void *arg, unsigned worker, uint64_t begin, const uint32_t *pos,
		       uint32_t n)
{
	shim_changes *c = arg;
	note(c, begin, pos, n);
	if (c->undo_note)
		c->undo_note(c->undo, worker, begin, pos, n);
}

void changes_undo_done(void *arg, unsigned worker)
{
	shim_changes *c = arg;
	if (c->undo_done)
		c->undo_done(c->undo, worker);
}

int changes_dma_note(void *arg, uint64_t begin, const uint32_t *pos, uint32_t n)
{
	shim_changes *c = arg;
	if (c->dma_note && c->dma_note(c->dma_arg, begin, pos, n))
		return -1; /* no room: noted again once there is */
	note(c, begin, pos, n);
	return 0;
}

void changes_dma_retire(void *arg)
{
	shim_changes *c = arg;
	if (c->dma_retire)
		c->dma_retire(c->dma_arg);
}

/* A buffered sequential writer that sums its bytes (CRC) as it goes,
 * but for those put while nosum (summed already: combined by the caller). */
typedef struct wr {
	int fd, failed, nosum;
	uint8_t *buf;
	size_t used, summed, cap;
	uint32_t crc;
	uint64_t total, n_changes;
	const uint32_t (*tab)[256];
} wr;

static void wr_sum(wr *w)
{
	if (!w->nosum)
		w->crc = crc_update(w->tab, w->crc, w->buf + w->summed, w->used - w->summed);
	w->summed = w->used;
}

static void wr_flush(wr *w)
{
	wr_sum(w);
	for (size_t at = 0; at < w->used && !w->failed;) {
		ssize_t r = write(w->fd, w->buf + at, w->used - at);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			w->failed = errno ? errno : EIO;
		else
			at += (size_t)r;
	}
	w->total += w->used;
	w->used = 0;
	w->summed = 0;
}

static void *wr_room(wr *w, size_t n)
{
	if (w->used + n > w->cap)
		wr_flush(w);
	void *p = w->buf + w->used;
	w->used += n;
	return p;
}

static void wr_put(wr *w, const void *p, size_t n)
{
	while (n) {
		if (w->used == w->cap)
			wr_flush(w);
		size_t k = w->cap - w->used < n ? w->cap - w->used : n;
		memcpy(w->buf + w->used, p, k);
		w->used += k;
		p = (const uint8_t *)p + k;
		n -= k;
	}
}

static void put_u32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, 4);
}

static void put_u64(uint8_t *p, uint64_t v)
{
	memcpy(p, &v, 8);
}

/* A delta entry's bytes: record, offsets, values, padding. */
static size_t entry_len(uint32_t n)
{
	return CHG_REC + (size_t)n * 6 + (8 - (size_t)n * 6 % 8) % 8;
}

static void entry_rec(uint8_t *r, uint64_t begin, uint32_t range_len, uint32_t n)
{
	memset(r, 0, CHG_REC);
	put_u64(r, begin);
	put_u32(r + 8, range_len);
	put_u32(r + 12, n);
}

static void put_entry(wr *w, uint64_t begin, uint32_t range_len, const uint32_t *pos,
		      const uint16_t *val, uint32_t n)
{
	static const uint8_t pad[8];
	uint8_t r[CHG_REC];
	entry_rec(r, begin, range_len, n);
	wr_put(w, r, sizeof(r));
	wr_put(w, pos, (size_t)n * 4);
	wr_put(w, val, (size_t)n * 2);
	wr_put(w, pad, (8 - (size_t)n * 6 % 8) % 8);
}

uint32_t changes_entry_crc(const shim_changes *c, uint64_t begin, uint32_t range_len,
			   const uint32_t *pos, const uint16_t *val, uint32_t n)
{
	static const uint8_t pad[8];
	const uint32_t (*t)[256] = (const uint32_t (*)[256])c->crc_tab;
	uint8_t r[CHG_REC];
	entry_rec(r, begin, range_len, n);
	uint32_t crc = crc_update(t, 0, r, sizeof(r));
	crc = crc_update(t, crc, (const uint8_t *)pos, (size_t)n * 4);
	crc = crc_update(t, crc, (const uint8_t *)val, (size_t)n * 2);
	return crc_update(t, crc, pad, (8 - (size_t)n * 6 % 8) % 8);
}

/* The list file of target, into its temporary: the header (CHG_HDR)
 * first, with the CRC's field zero; 0, or -1 after a message. */
static int list_open(shim_changes *c, wr *w, uint32_t flags, uint64_t model_id,
		     uint64_t n_params, uint32_t base, uint32_t target, const chg_frame *f,
		     uint32_t nf)
{
	char tmp[4096];
	list_path(c, tmp, sizeof(tmp), target, 1);
	uint64_t n_changes = 0;
	for (uint32_t i = 0; i < nf; i++)
		n_changes += f[i].n;
	uint8_t h[CHG_HDR];
	memset(h, 0, sizeof(h));
	memcpy(h, CHG_MAGIC, 8);
	put_u32(h + 8, CHG_LAYOUT);
	put_u32(h + 12, flags);
	put_u64(h + 16, model_id);
	put_u64(h + 24, n_params);
	put_u64(h + 32, c->ino);
	put_u64(h + 40, n_changes);
	put_u32(h + 48, base);
	put_u32(h + 52, target);
	put_u32(h + 56, nf);
	*w = (wr){.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644),
		  .cap = 1u << 20, .tab = (const uint32_t (*)[256])c->crc_tab,
		  .n_changes = n_changes};
	if (w->fd < 0 || !(w->buf = malloc(w->cap))) {
		fprintf(stderr, "bfpatch-shim: change list of version %u: %s: %s\n", target, tmp,
			w->fd < 0 ? strerror(errno) : "out of memory");
		if (w->fd >= 0) {
			close(w->fd);
			unlink(tmp);
		}
		c->failed++;
		return -1;
	}
	/* the CRC sums the header up to its own field, then the records */
	w->crc = crc_update(w->tab, 0, h, CHG_HDR - 4);
	w->total = CHG_HDR;
	if (write(w->fd, h, CHG_HDR) != (ssize_t)CHG_HDR)
		w->failed = errno ? errno : EIO;
	return 0;
}

/* Entries [from, to) of f into w. */
static void list_entries(const shim_changes *c, wr *w, const chg_frame *f, uint32_t from,
			 uint32_t to)
{
	static const uint8_t pad[8];
	for (uint32_t i = from; i < to && !w->failed; i++) {
		if (f[i].has_crc && !f[i].dense && f[i].val) {
			/* summed while staged: written, its CRC combined */
			const size_t len = entry_len(f[i].n);
			wr_sum(w);
			w->nosum = 1;
			put_entry(w, f[i].begin, f[i].range_len, f[i].pos, f[i].val, f[i].n);
			wr_sum(w);
			w->nosum = 0;
			w->crc = crc_combine(c->x2n, w->crc, f[i].crc, len);
			continue;
		}
		uint8_t r[CHG_REC];
		memset(r, 0, sizeof(r));
		put_u64(r, f[i].begin);
		put_u32(r + 8, f[i].range_len);
		put_u32(r + 12, f[i].n);
		put_u32(r + 16, f[i].dense ? CHG_E_DENSE : 0);
		wr_put(w, r, sizeof(r));
		const uint16_t *at = c->params + f[i].begin;
		if (f[i].dense) {
			wr_put(w, at, (size_t)f[i].n * 2);
		} else {
			wr_put(w, f[i].pos, (size_t)f[i].n * 4);
			if (f[i].val) {
				wr_put(w, f[i].val, (size_t)f[i].n * 2);
			} else {
				/* the target's words, verified, at the noted positions */
				for (uint32_t k = 0; k < f[i].n;) {
					uint32_t m = f[i].n - k < 4096 ? f[i].n - k : 4096;
					uint16_t *o = wr_room(w, (size_t)m * 2);
					for (uint32_t j = 0; j < m; j++)
						o[j] = at[f[i].pos[k + j]];
					k += m;
				}
			}
		}
		wr_put(w, pad, (8 - (size_t)f[i].n * (f[i].dense ? 2 : 6) % 8) % 8);
	}
}

/* The last bytes, the CRC, and the temporary synced and closed: 0, or
 * -1 after a message (the temporary removed). */
static int list_close(shim_changes *c, wr *w, uint32_t target)
{
	wr_flush(w);
	uint8_t crc[4];
	put_u32(crc, w->crc);
	if (!w->failed && pwrite(w->fd, crc, 4, CHG_HDR - 4) != 4)
		w->failed = errno ? errno : EIO;
	/* on the disk before the version that names it (wbuf_end syncs the
	 * buffer the same way; on tmpfs this costs nothing) */
	if (!w->failed && fdatasync(w->fd))
		w->failed = errno;
	if (close(w->fd) && !w->failed)
		w->failed = errno;
	w->fd = -1;
	free(w->buf);
	w->buf = NULL;
	if (w->failed) {
		char tmp[4096];
		list_path(c, tmp, sizeof(tmp), target, 1);
		fprintf(stderr, "bfpatch-shim: change list of version %u not written: %s: %s\n",
			target, tmp, strerror(w->failed));
		unlink(tmp);
		c->failed++;
		return -1;
	}
	return 0;
}

/* The closed temporary of target renamed into place: 0, or -1 after a
 * message (the temporary removed). */
static int list_place(shim_changes *c, const wr *w, uint32_t target)
{
	char tmp[4096], path[4096];
	list_path(c, tmp, sizeof(tmp), target, 1);
	list_path(c, path, sizeof(path), target, 0);
	if (rename(tmp, path)) {
		fprintf(stderr, "bfpatch-shim: change list of version %u not written: %s: %s\n",
			target, tmp, strerror(errno));
		unlink(tmp);
		c->failed++;
		return -1;
	}
	c->lists++;
	c->changes += w->n_changes;
	c->bytes += w->total;
	return 0;
}

/* The list file of target: header and records, CRC last, into a
 * temporary renamed into place. 0, or -1 after a message. */
static int write_list(shim_changes *c, uint32_t flags, uint64_t model_id, uint64_t n_params,
		      uint32_t base, uint32_t target, const chg_frame *f, uint32_t nf)
{
	wr w;
	if (list_open(c, &w, flags, model_id, n_params, base, target, f, nf))
		return -1;
	list_entries(c, &w, f, 0, nf);
	if (list_close(c, &w, target))
		return -1;
	return list_place(c, &w, target);
}

int changes_write(shim_changes *c, uint64_t model_id, uint64_t n_params, uint32_t base,
		  uint32_t target)
{
	if (!c->keep || !c->ready || !c->f) {
		changes_end(c);
		return 0;
	}
	double t0 = now_s();
	uint32_t flags = c->lost ? CHG_F_RESUMED : 0;
	for (uint32_t i = 0; i < c->n_frames && !flags; i++) {
		chg_frame *f = &c->f[i];
		if (f->dense)
			f->n = f->range_len;
		else if (!f->noted)
			flags = CHG_F_RESUMED; /* found at the target: its changes are gone */
	}
	int rc = write_list(c, flags, model_id, n_params, base, target, c->f,
			    flags ? 0 : c->n_frames);
	if (!rc && flags)
		rc = 1;
	if (flags && !c->lost)
		fprintf(stderr, "bfpatch-shim: version %u was finished after a restart: its change "
			"list says its changes are not known (actors reload)\n", target);
	changes_end(c);
	double ms = (now_s() - t0) * 1e3;
	c->ms_total += ms;
	if (ms > c->ms_max)
		c->ms_max = ms;
	return rc;
}

/* A list written while its patch was prepared: the frames' changes as
 * stage_prepare_some() kept them, in range order, written a few entries a
 * call between bursts of frames, synced, and renamed into place by that
 * patch's commit. */
struct chg_pre {
	const void *owner;      /* the staged patch it is of */
	uint32_t base, target;
	chg_frame *f;
	uint32_t nf, next;      /* entries; the next to write */
	wr w;
	int state;              /* PRE_WRITING, PRE_WRITTEN, PRE_FAILED */
	double ms;              /* spent writing it */
};

enum { PRE_WRITING, PRE_WRITTEN, PRE_FAILED };

void changes_prep_drop(shim_changes *c, const void *owner)
{
	struct chg_pre *p = c->pre;
	if (!p || (owner && p->owner != owner))
		return;
	if (p->state != PRE_FAILED) {
		/* written for a preparation that is gone: never placed */
		char tmp[4096];
		if (p->w.fd >= 0)
			close(p->w.fd);
		free(p->w.buf);
		list_path(c, tmp, sizeof(tmp), p->target, 1);
		unlink(tmp);
	}
	free(p->f);
	free(p);
	c->pre = NULL;
}

int changes_prep_has(const shim_changes *c, const void *owner)
{
	return c->pre && c->pre->owner == owner;
}

int changes_prep_start(shim_changes *c, const void *owner, uint64_t model_id,
		       uint64_t n_params, uint32_t base, uint32_t target,
		       const struct frame_changes *const *fc, const uint32_t *const *crc,
		       uint32_t n)
{
	changes_prep_drop(c, NULL);
	if (!c->keep || !c->ready)
		return -1;
	struct chg_pre *p = calloc(1, sizeof(*p));
	if (!p)
		return -1;
	p->owner = owner;
	p->base = base;
	p->target = target;
	p->state = PRE_FAILED;
	p->w.fd = -1;
	c->pre = p; /* failed or not: this patch's commit writes it otherwise */
	if (!(p->f = calloc(n ? n : 1, sizeof(*p->f))))
		return -1;
	for (uint32_t i = 0; i < n; i++) {
		if (!fc[i])
			return -1;
		p->f[i] = (chg_frame){.begin = fc[i]->range_begin, .range_len = fc[i]->range_len,
				      .n = fc[i]->n, .pos = fc[i]->pos, .val = fc[i]->val,
				      .idx = i, .noted = 1, .has_crc = crc[i] != NULL,
				      .crc = crc[i] ? *crc[i] : 0};
	}
	p->nf = n;
	qsort(p->f, n, sizeof(*p->f), by_begin);
	const double t0 = now_s();
	if (list_open(c, &p->w, 0, model_id, n_params, base, target, p->f, n))
		return -1;
	p->state = PRE_WRITING;
	p->ms = (now_s() - t0) * 1e3;
	return 0;
}

/* More of p's entries, until the deadline (now_s(); 0: none); then the
 * CRC and the sync. */
static int pre_write(shim_changes *c, struct chg_pre *p, double until)
{
	const double t0 = now_s();
	while (p->state == PRE_WRITING && p->next < p->nf) {
		/* a frame carries at most BFP_CHANGES_MAX changes: 16 entries
		 * a look at the clock */
		uint32_t to = p->nf - p->next < 16 ? p->nf : p->next + 16;
		list_entries(c, &p->w, p->f, p->next, to);
		p->next = to;
		if (until && p->next < p->nf && now_s() > until)
			break;
	}
	if (p->state == PRE_WRITING && p->next == p->nf)
		p->state = list_close(c, &p->w, p->target) ? PRE_FAILED : PRE_WRITTEN;
	p->ms += (now_s() - t0) * 1e3;
	return p->state == PRE_WRITING;
}

int changes_prep_step(shim_changes *c, double until)
{
	return c->pre ? pre_write(c, c->pre, until) : 0;
}

int changes_prep_place(shim_changes *c, const void *owner, uint32_t base, uint32_t target,
		       double *ms)
{
	struct chg_pre *p = c->pre;
	if (!p || p->owner != owner || p->base != base || p->target != target)
		return -1;
	pre_write(c, p, 0); /* what the preparation had no time for */
	int rc = -1;
	if (p->state == PRE_WRITTEN) {
		p->state = PRE_FAILED; /* renamed or removed: nothing to drop */
		rc = list_place(c, &p->w, target);
		*ms = p->ms;
	}
	changes_prep_drop(c, owner);
	return rc;
}

int changes_key(shim_changes *c, uint64_t model_id, uint64_t n_params, uint32_t base,
		uint32_t target)
{
	changes_end(c);
	if (!c->keep || !c->ready)
		return 0;
	return write_list(c, CHG_F_KEY, model_id, n_params, base, target, NULL, 0);
}

void changes_prune(shim_changes *c, uint32_t target)
{
	if (!c->keep || !c->ready)
		return;
	char path[4096];
	list_path(c, path, sizeof(path), target, 0);
	uint8_t h[16];
	uint32_t flags = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		if (read(fd, h, sizeof(h)) == (ssize_t)sizeof(h))
			memcpy(&flags, h + 12, 4);
		close(fd);
	}
	/* a keyframe commit starts the chain over: nothing older leads here */
	sweep(c, target, (flags & CHG_F_KEY) != 0, 0);
}
