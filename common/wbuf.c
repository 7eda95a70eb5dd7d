/*
 * wbuf.c: create, map, lock and version the actor weight buffer (wbuf.h).
 * The writer's lock is on the buffer file itself, so it holds whatever
 * path names the file; creation never replaces a file, so it cannot
 * slip a new buffer under a writer that holds the old one.
 */
#define _GNU_SOURCE
#include "wbuf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

static uint64_t page_up(uint64_t v)
{
	return (v + 4095) & ~4095ull;
}

int wbuf_create(const char *path, const model *m, uint32_t version, int replace,
		char *err, size_t errlen)
{
	uint64_t st_len = m->safetensors ? m->header_len : 0;
	uint64_t data_off = page_up(WBUF_HDR + st_len);
	uint8_t *head = calloc(1, (size_t)data_off);
	if (!head)
		return set_err(err, errlen, "out of memory");
	wbuf_hdr *h = (wbuf_hdr *)(void *)head;
	memcpy(h->magic, WBUF_MAGIC, 8);
	h->layout = 1;
	h->hdr_size = WBUF_HDR;
	h->n_params = m->n_params;
	h->model_id = m->model_id;
	h->st_offset = WBUF_HDR;
	h->st_len = st_len;
	h->data_offset = data_off;
	h->data_bytes = m->data_bytes;
	atomic_store(&h->version, version);
	atomic_store(&h->state, WBUF_READY);
	atomic_store(&h->target, version);
	atomic_store(&h->seq, 0);
	if (st_len)
		memcpy(head + WBUF_HDR, m->header, (size_t)st_len);
	const void *bufs[2] = {head, m->params};
	size_t lens[2] = {(size_t)data_off, (size_t)m->n_params * 2};
	int rc = replace ? write_file_atomic(path, bufs, lens, 2, err, errlen)
			 : write_file_new(path, bufs, lens, 2, err, errlen);
	free(head);
	return rc;
}

int wbuf_open(wbuf *w, const char *path, char *err, size_t errlen)
{
	struct stat sb;
	memset(w, 0, sizeof(*w));
	w->fd = open(path, O_RDWR | O_CLOEXEC);
	if (w->fd < 0)
		return set_err(err, errlen, "%s: %s", path, strerror(errno));
	if (fstat(w->fd, &sb) != 0 || (uint64_t)sb.st_size < WBUF_HDR) {
		close(w->fd);
		return set_err(err, errlen, "%s: not a weight buffer (too short)", path);
	}
	w->map_len = (size_t)sb.st_size;
	/* populated: the first commit must not pay the page faults of the
	 * whole model (a 400 MB buffer: about 1 s here) */
	w->map = mmap(NULL, w->map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, w->fd, 0);
	if (w->map == MAP_FAILED) {
		close(w->fd);
		return set_err(err, errlen, "%s: mmap: %s", path, strerror(errno));
	}
	w->h = (wbuf_hdr *)(void *)w->map;
	/* every offset and length inside the file: readers parse the
	 * safetensors header at st_offset for st_len bytes */
	const wbuf_hdr *h = w->h;
	if (memcmp(h->magic, WBUF_MAGIC, 8) || h->layout != 1 || h->hdr_size != WBUF_HDR ||
	    h->data_offset % 4096 || h->data_offset > w->map_len ||
	    h->n_params > (w->map_len - h->data_offset) / 2 || h->st_offset < WBUF_HDR ||
	    h->st_offset > h->data_offset || h->st_len > h->data_offset - h->st_offset) {
		wbuf_close(w);
		return set_err(err, errlen, "%s: not a bfpatch weight buffer (bad header)", path);
	}
	w->params = (uint16_t *)(void *)(w->map + w->h->data_offset);
	return 0;
}

void wbuf_prefault_write(wbuf *w)
{
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif
	/* MAP_POPULATE maps a shared file's pages for reading only, and on a
	 * virtual machine with shadow page tables the first access to each
	 * page is slow whatever the guest's tables say: without this the
	 * first commit into a 400 MB buffer took 0.9 s here, later ones 0.1 s.
	 * Fault every page writable (older kernels refuse the madvise), then
	 * touch each once, at start rather than while an actor waits. */
	(void)madvise(w->map, w->map_len, MADV_POPULATE_WRITE);
	volatile const uint8_t *p = w->map;
	uint8_t sink = 0;
	for (size_t off = 0; off < w->map_len; off += 4096)
		sink ^= p[off];
	(void)sink;
}

void wbuf_close(wbuf *w)
{
	if (w->map && w->map != MAP_FAILED)
		munmap(w->map, w->map_len);
	if (w->fd > 0)
		close(w->fd);
	memset(w, 0, sizeof(*w));
}

/* The process holding a FLOCK write lock on the file (dev, ino), from
 * /proc/locks (which shows no process for OFD locks: hence flock), with
 * its name from /proc/PID/comm; 0 when it is not to be seen (another pid
 * namespace, no /proc). */
static pid_t flock_holder(dev_t dev, ino_t ino, char *comm, size_t commlen)
{
	FILE *f = fopen("/proc/locks", "re");
	char line[256];
	pid_t who = 0;
	while (f && !who && fgets(line, sizeof(line), f)) {
		char type[16], rw[16];
		int pid;
		unsigned maj, min;
		unsigned long long in;
		/* "1: FLOCK  ADVISORY  WRITE 4242 00:1b:2617 0 EOF"; a waiter's
		 * line ("1: -> FLOCK ...") does not parse */
		if (sscanf(line, "%*d: %15s %*s %15s %d %x:%x:%llu", type, rw, &pid, &maj, &min,
			   &in) == 6 && !strcmp(type, "FLOCK") && !strcmp(rw, "WRITE") &&
		    pid > 0 && maj == major(dev) && min == minor(dev) &&
		    in == (unsigned long long)ino)
			who = pid;
	}
	if (f)
		fclose(f);
	snprintf(comm, commlen, "?");
	snprintf(line, sizeof(line), "/proc/%d/comm", (int)who);
	f = who ? fopen(line, "re") : NULL;
	if (f && fgets(comm, (int)commlen, f))
		comm[strcspn(comm, "\n")] = 0;
	if (f)
		fclose(f);
	return who;
}

int wbuf_lock(int fd, const char *path, char *err, size_t errlen)
{
	if (flock(fd, LOCK_EX | LOCK_NB) == 0)
		return 0;
	if (errno != EWOULDBLOCK)
		return set_err(err, errlen, "%s: cannot lock: %s", path, strerror(errno));
	struct stat sb;
	char comm[64], who[128] = "another process (not to be seen from here)";
	if (fstat(fd, &sb) != 0)
		memset(&sb, 0, sizeof(sb));
	pid_t pid = flock_holder(sb.st_dev, sb.st_ino, comm, sizeof(comm));
	if (pid > 0)
		snprintf(who, sizeof(who), "process %d (%s)", (int)pid, comm);
	char *real = realpath(path, NULL);
	const int other_name = real && strcmp(real, path);
	set_err(err, errlen, "%s%s%s%s: this file (device %u:%u, inode %llu) is locked by its "
		"writer, %s: one writer per file, whatever path names it", path,
		other_name ? " (" : "", other_name ? real : "", other_name ? ")" : "",
		major(sb.st_dev), minor(sb.st_dev), (unsigned long long)sb.st_ino, who);
	free(real);
	return -1;
}

/* ---- undo journal ---- */

#define UNDO_MAX BFP_CHANGES_MAX /* changes of a frame */

typedef struct undo_slot {
	_Atomic uint32_t valid;
	uint32_t n;
	uint64_t begin;
	uint32_t reserved[2];   /* 0 */
	uint32_t pos[UNDO_MAX]; /* offsets from begin */
	uint16_t old[UNDO_MAX]; /* the values there before the frame */
} undo_slot;

#define UNDO_SLOT_BYTES ((sizeof(undo_slot) + 4095) / 4096 * 4096)

static undo_slot *undo_at(const wbuf_undo *u, unsigned i)
{
	return (undo_slot *)(void *)(u->map + (size_t)i * UNDO_SLOT_BYTES);
}

/* A journal file beside the buffer, PATH.SUFFIX, opened (or created) and
 * mapped shared at *len bytes; with unit, a larger file keeps its size,
 * cut to a multiple of unit (it is never shrunk), else it is made exactly
 * *len. Returns the mapping (*fd, *len set) or NULL with err; then a file
 * this call created is removed and one it grew is cut back to its size
 * (what a crash left in it is kept), so a failure leaves nothing behind. */
static uint8_t *journal_map(const char *path, const char *suffix, size_t unit, size_t *len,
			    int *fd_out, char *err, size_t errlen)
{
	static const char reserve[] = "cannot reserve";
	char jp[4096];
	snprintf(jp, sizeof(jp), "%s.%s", path, suffix);
	/* the caller holds BUFFER.lock, so nobody else makes or removes it
	 * between the two opens */
	int created = 1;
	int fd = open(jp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 && errno == EEXIST) {
		created = 0;
		fd = open(jp, O_RDWR | O_CLOEXEC);
	}
	struct stat sb;
	size_t want = *len;
	off_t had = -1; /* its size when opened */
	int e = 0;
	const char *what = NULL;
	uint8_t *map;
	if (fd < 0 || fstat(fd, &sb) != 0) {
		e = errno;
		goto fail;
	}
	had = sb.st_size;
	if (unit && (size_t)sb.st_size > want)
		want = (size_t)sb.st_size / unit * unit;
	const size_t huge = huge_unit(fd); /* beside a buffer on hugetlbfs */
	if (huge)
		want = (want + huge - 1) / huge * huge;
	const int resize = unit ? (size_t)sb.st_size < want : (size_t)sb.st_size != want;
	if (resize && ftruncate(fd, (off_t)want) != 0) {
		e = errno;
		goto fail;
	}
	/* the blocks now, not at the first write through the mapping: a
	 * full disk (a tmpfs /dev/shm) is an error here, where there it
	 * would be a SIGBUS in the middle of a commit */
	int fe = posix_fallocate(fd, 0, (off_t)want);
	/* a filesystem that cannot reserve (hugetlbfs takes no writes for
	 * glibc's fallback) keeps the journal as it was: only a lack of
	 * space is an error */
	if (fe == ENOSPC || fe == EDQUOT || fe == EFBIG) {
		e = fe;
		what = reserve;
		goto fail;
	}
	map = mmap(NULL, want, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		e = errno;
		what = "mmap";
		goto fail;
	}
	*fd_out = fd;
	*len = want;
	return map;
fail:
	if (fd >= 0) {
		if (created)
			unlink(jp);
		else if (had >= 0 && (size_t)had < want)
			(void)!ftruncate(fd, had); /* only zeroed slots are cut */
		close(fd);
	}
	if (what == reserve)
		set_err(err, errlen, "%s: %s %zu bytes: %s", jp, what, want, strerror(e));
	else if (what)
		set_err(err, errlen, "%s: %s: %s", jp, what, strerror(e));
	else
		set_err(err, errlen, "%s: %s", jp, strerror(e));
	return NULL;
}

static void journal_unmap(uint8_t *map, size_t len, int fd)
{
	if (map)
		munmap(map, len);
	if (fd >= 0)
		close(fd);
}

int wbuf_undo_open(wbuf_undo *u, const wbuf *w, const char *path, unsigned slots, char *err,
		   size_t errlen)
{
	memset(u, 0, sizeof(*u));
	u->fd = -1;
	/* a journal of fewer slots (an earlier run with fewer threads) keeps
	 * its slots: grow it, never shrink it */
	u->map_len = (size_t)slots * UNDO_SLOT_BYTES;
	u->map = journal_map(path, "undo", UNDO_SLOT_BYTES, &u->map_len, &u->fd, err, errlen);
	if (!u->map)
		return -1;
	u->slots = (unsigned)(u->map_len / UNDO_SLOT_BYTES);
	u->params = w->params;
	u->n_params = w->h->n_params;
	return 0;
}

void wbuf_undo_close(wbuf_undo *u)
{
	journal_unmap(u->map, u->map_len, u->fd);
	memset(u, 0, sizeof(*u));
	u->fd = -1;
}

void wbuf_undo_note(void *arg, unsigned slot, uint64_t begin, const uint32_t *pos, uint32_t n)
{
	wbuf_undo *u = arg;
	undo_slot *j = undo_at(u, slot);
	const uint16_t *p = u->params + begin;
	j->begin = begin;
	j->n = n;
	for (uint32_t k = 0; k < n; k++) {
		j->pos[k] = pos[k];
		j->old[k] = p[pos[k]];
	}
	atomic_store_explicit(&j->valid, 1, memory_order_release);
}

void wbuf_undo_done(void *arg, unsigned slot)
{
	wbuf_undo *u = arg;
	atomic_store_explicit(&undo_at(u, slot)->valid, 0, memory_order_release);
}

unsigned wbuf_undo_rollback(wbuf_undo *u, int discard)
{
	unsigned restored = 0;
	for (unsigned i = 0; i < u->slots; i++) {
		undo_slot *j = undo_at(u, i);
		if (!atomic_load(&j->valid))
			continue;
		if (discard) {
			atomic_store(&j->valid, 0);
			continue;
		}
		/* a slot that does not fit the buffer is not this buffer's */
		if (j->n <= UNDO_MAX && j->begin < u->n_params) {
			uint16_t *p = u->params + j->begin;
			for (uint32_t k = 0; k < j->n; k++)
				if (j->pos[k] < u->n_params - j->begin)
					p[j->pos[k]] = j->old[k];
			restored++;
		}
		atomic_store(&j->valid, 0);
	}
	return restored;
}

/* ---- the DMA commit's journal ---- */

#define DLOG_MAGIC "BFPDLOG1"
#define DLOG_HDR 4096u

typedef struct dlog_hdr {
	char magic[8];
	uint64_t ring;             /* bytes of records after the header page */
	uint64_t n_params;         /* of the buffer it was made for */
	_Atomic uint64_t head;     /* bytes retired, ever */
	_Atomic uint64_t tail;     /* bytes noted, ever */
} dlog_hdr;

/* A record at byte (offset % ring): begin, n, then pos[n] and old[n],
 * padded to 16 bytes; skip 1: the rest of the ring is padding. */
typedef struct dlog_rec {
	uint64_t begin;
	uint32_t n;
	uint32_t skip;
} dlog_rec;

static dlog_hdr *dlog_h(const wbuf_dlog *l)
{
	return (dlog_hdr *)(void *)l->map;
}

/* 16-byte multiples: what is left before the ring's end holds a marker */
static uint64_t dlog_size(uint32_t n)
{
	return (sizeof(dlog_rec) + (uint64_t)n * 6 + 15) & ~15ull;
}

int wbuf_dlog_open(wbuf_dlog *l, uint16_t *params, uint64_t n_params, const char *path,
		   char *err, size_t errlen)
{
	memset(l, 0, sizeof(*l));
	l->fd = -1;
	l->map_len = DLOG_HDR + WBUF_DLOG_BYTES;
	l->map = journal_map(path, "dmalog", 0, &l->map_len, &l->fd, err, errlen);
	if (!l->map)
		return -1;
	l->ring = WBUF_DLOG_BYTES;
	l->params = params;
	l->n_params = n_params;
	dlog_hdr *h = dlog_h(l);
	if (memcmp(h->magic, DLOG_MAGIC, 8) || h->ring != l->ring || h->n_params != l->n_params ||
	    atomic_load(&h->tail) - atomic_load(&h->head) > l->ring) {
		/* new, or not this buffer's: nothing in it is ours to restore */
		memset(h, 0, sizeof(*h));
		h->ring = l->ring;
		h->n_params = l->n_params;
		memcpy(h->magic, DLOG_MAGIC, 8);
	}
	return 0;
}

void wbuf_dlog_close(wbuf_dlog *l)
{
	journal_unmap(l->map, l->map_len, l->fd);
	memset(l, 0, sizeof(*l));
	l->fd = -1;
}

static dlog_rec *dlog_at(const wbuf_dlog *l, uint64_t at)
{
	return (dlog_rec *)(void *)(l->map + DLOG_HDR + at % l->ring);
}

int wbuf_dlog_note(wbuf_dlog *l, uint64_t begin, const uint32_t *pos, uint32_t n)
{
	dlog_hdr *h = dlog_h(l);
	const uint64_t head = atomic_load(&h->head), tail = atomic_load(&h->tail);
	const uint64_t size = dlog_size(n), off = tail % l->ring;
	const uint64_t pad = l->ring - off < size ? l->ring - off : 0; /* wrap first */
	if (tail + pad + size - head > l->ring)
		return -1;
	if (pad) /* records are 16-byte multiples: the rest has room for a marker */
		*dlog_at(l, tail) = (dlog_rec){.skip = 1};
	dlog_rec *r = dlog_at(l, tail + pad);
	uint32_t *rp = (uint32_t *)(void *)(r + 1);
	uint16_t *ro = (uint16_t *)(void *)(rp + n);
	const uint16_t *p = l->params + begin;
	*r = (dlog_rec){.begin = begin, .n = n};
	for (uint32_t k = 0; k < n; k++) {
		rp[k] = pos[k];
		ro[k] = p[pos[k]];
	}
	/* the record is whole before the tail covers it */
	atomic_store_explicit(&h->tail, tail + pad + size, memory_order_release);
	return 0;
}

void wbuf_dlog_retire(wbuf_dlog *l)
{
	dlog_hdr *h = dlog_h(l);
	uint64_t head = atomic_load(&h->head);
	const uint64_t tail = atomic_load(&h->tail);
	if (head == tail)
		return;
	if (dlog_at(l, head)->skip)
		head += l->ring - head % l->ring;
	if (head < tail)
		head += dlog_size(dlog_at(l, head)->n);
	atomic_store_explicit(&h->head, head, memory_order_release);
}

unsigned wbuf_dlog_rollback(wbuf_dlog *l, int discard)
{
	dlog_hdr *h = dlog_h(l);
	uint64_t at = atomic_load(&h->head);
	const uint64_t tail = atomic_load(&h->tail);
	unsigned restored = 0;
	while (!discard && at < tail) {
		const dlog_rec *r = dlog_at(l, at);
		if (r->skip) {
			at += l->ring - at % l->ring;
			continue;
		}
		const uint64_t size = dlog_size(r->n);
		/* a record that does not fit the ring or the buffer is not ours */
		if (r->n > BFP_CHANGES_MAX || size > tail - at || l->ring - at % l->ring < size ||
		    r->begin >= l->n_params)
			break;
		const uint32_t *rp = (const uint32_t *)(const void *)(r + 1);
		const uint16_t *ro = (const uint16_t *)(const void *)(rp + r->n);
		uint16_t *p = l->params + r->begin;
		for (uint32_t k = 0; k < r->n; k++)
			if (rp[k] < l->n_params - r->begin)
				p[rp[k]] = ro[k];
		restored++;
		at += size;
	}
	atomic_store(&h->head, tail);
	return restored;
}

void wbuf_begin(wbuf *w, uint32_t target, uint32_t flags)
{
	atomic_store(&w->h->flags, flags);
	atomic_store(&w->h->target, target);
	atomic_store(&w->h->state, WBUF_COMMITTING);
	/* odd while the contents are not one whole version; a commit
	 * resumed after a crash or a resync finds it odd already */
	if (!(atomic_load(&w->h->seq) & 1))
		atomic_fetch_add(&w->h->seq, 1);
	msync(w->map, WBUF_HDR, MS_SYNC);
}

_Static_assert(offsetof(wbuf_hdr, version) % 8 == 0 &&
		       offsetof(wbuf_hdr, state) == offsetof(wbuf_hdr, version) + 4,
	       "version and state are stored together");
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the header is little-endian");

void wbuf_end(wbuf *w)
{
	msync(w->map, w->map_len, MS_SYNC); /* the parameters first */
	/* version and state in one store: a crash between two stores left
	 * "committing" with the version already the target, which no patch
	 * could finish */
	uint64_t vs = (uint64_t)atomic_load(&w->h->target) | (uint64_t)WBUF_READY << 32;
	__atomic_store_n((uint64_t *)(void *)&w->h->version, vs, __ATOMIC_SEQ_CST);
	atomic_store(&w->h->flags, 0);
	atomic_fetch_add(&w->h->seq, 1);
	msync(w->map, WBUF_HDR, MS_SYNC);
}

int wbuf_seq_repair(wbuf *w)
{
	if (atomic_load(&w->h->state) != WBUF_READY || !(atomic_load(&w->h->seq) & 1))
		return 0;
	atomic_fetch_add(&w->h->seq, 1);
	msync(w->map, WBUF_HDR, MS_SYNC);
	return 1;
}

void wbuf_invalid(wbuf *w)
{
	atomic_store(&w->h->state, WBUF_RESYNC);
	if (!(atomic_load(&w->h->seq) & 1))
		atomic_fetch_add(&w->h->seq, 1);
	msync(w->map, WBUF_HDR, MS_SYNC);
}

int wbuf_snapshot(const wbuf *w, uint16_t *dst, uint32_t *version)
{
	for (int tries = 0; tries < 8; tries++) {
		uint64_t s0 = atomic_load(&w->h->seq);
		if (s0 & 1)
			continue;
		uint32_t v = atomic_load(&w->h->version);
		memcpy(dst, w->params, (size_t)w->h->n_params * 2);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load(&w->h->seq) == s0) {
			*version = v;
			return 0;
		}
	}
	return -1;
}
