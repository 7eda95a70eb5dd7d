/*
 * wbuf.h: the actor's weight buffer, a file under /dev/shm (or hugetlbfs)
 * that the shim writes and actors map: a 4 KiB header (layout below), the
 * model's safetensors header (so readers can find tensors), then the
 * parameters, page-aligned. Versions change under a sequence counter:
 * odd while a commit is in progress, so a reader that sees the same even
 * value before and after reading saw one whole version.
 */
#ifndef BFP_WBUF_H
#define BFP_WBUF_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"

#define WBUF_MAGIC "BFPWBUF1"
#define WBUF_HDR 4096u

/* state: READY (version is whole), COMMITTING (moving to target; a
 * restarted shim finishes it), RESYNC (a commit failed verification: the
 * contents are no version until a keyframe stream is committed) */
enum { WBUF_READY = 0, WBUF_COMMITTING = 1, WBUF_RESYNC = 2 };

/* flags: the commit in progress writes a keyframe stream (a restarted
 * shim asks for the rest of that stream, not for a patch) */
#define WBUF_F_KEY 1u

typedef struct wbuf_hdr {
	char magic[8];
	uint32_t layout;            /* 1 */
	uint32_t hdr_size;          /* WBUF_HDR */
	uint64_t n_params;
	uint64_t model_id;
	uint64_t st_offset;         /* safetensors header bytes (0 len: raw) */
	uint64_t st_len;
	uint64_t data_offset;       /* parameters, page-aligned */
	uint64_t data_bytes;        /* the model's data section size */
	_Atomic uint32_t version;   /* committed version */
	_Atomic uint32_t state;     /* WBUF_READY, WBUF_COMMITTING or WBUF_RESYNC */
	_Atomic uint32_t target;    /* version being committed */
	_Atomic uint32_t flags;     /* of the commit to target: WBUF_F_KEY */
	_Atomic uint64_t seq;       /* odd while committing */
	/* the safe-point handshake (shim --commit safe-point): the shim
	 * sets staged when version staged is complete and waits; the actor
	 * sets allow to a version at a safe point, and the shim commits up
	 * to it */
	_Atomic uint32_t staged;
	_Atomic uint32_t allow;
} wbuf_hdr;

typedef struct wbuf {
	int fd;
	uint8_t *map;
	size_t map_len;
	wbuf_hdr *h;
	uint16_t *params;
} wbuf;

/* Create path (atomically: temporary + rename) holding model m at
 * version. Unless replace, fails if path exists, and never replaces a
 * file, even one created under it while this one was being written. */
int wbuf_create(const char *path, const model *m, uint32_t version, int replace,
		char *err, size_t errlen);
int wbuf_open(wbuf *w, const char *path, char *err, size_t errlen);
/* For the buffer's writer: fault its pages in writable now, not in the
 * first commit (contents unchanged). */
void wbuf_prefault_write(wbuf *w);
void wbuf_close(wbuf *w);

/* For a writer: take an exclusive flock(2) on fd's file (the buffer's,
 * w->fd, or a lock file's), at once or not at all. The lock is on the
 * file, not its name: a second writer is refused whatever path it names
 * the file by (a symbolic or hard link, a relative path, one through
 * "..", a bind mount). It is held until the file's last descriptor from
 * that open() is closed (wbuf_close()), or the process ends however it
 * ends. Readers take no lock and are never blocked by it. 0, or -1 with
 * err naming path, the file and, where /proc/locks shows it, the
 * process that holds the lock. */
int wbuf_lock(int fd, const char *path, char *err, size_t errlen);

/* Mark a commit to target (flags: WBUF_F_KEY or 0) as started /
 * finished (flushes to the file). A trainer that publishes from a buffer
 * (bfpatch publish --buffer) writes its new weights between these two
 * calls. */
void wbuf_begin(wbuf *w, uint32_t target, uint32_t flags);
void wbuf_end(wbuf *w);
/* Mark the contents invalid (state RESYNC, sequence odd). */
void wbuf_invalid(wbuf *w);
/* The writer, on start: a crash inside wbuf_end() after the version was
 * published but before the sequence counter went even left readers
 * waiting for ever; make it even. Returns 1 if it did. */
int wbuf_seq_repair(wbuf *w);

/* Copy the parameters of one whole committed version into dst (n_params
 * words) under the sequence counter; returns 0 and its version, or -1 if
 * a commit kept overlapping the copy (try again later). */
int wbuf_snapshot(const wbuf *w, uint16_t *dst, uint32_t *version);

/* The commit's undo journal, PATH.undo beside the buffer: one slot per
 * apply thread holds the values a delta frame is about to overwrite (at
 * its changed positions) until they are written. A
 * SIGKILL inside a frame's writes leaves its range neither at the base
 * nor at the target; on restart the journal puts it back at the base,
 * and the interrupted commit can be finished. */
typedef struct wbuf_undo {
	int fd;
	uint8_t *map;
	size_t map_len;
	unsigned slots;
	uint16_t *params;
	uint64_t n_params;
} wbuf_undo;

/* Open (or create) the journal of the buffer at path for slots threads. */
int wbuf_undo_open(wbuf_undo *u, const wbuf *w, const char *path, unsigned slots, char *err,
		   size_t errlen);
void wbuf_undo_close(wbuf_undo *u);
/* Before writing: keep params[begin + pos[k]] for k < n (at most
 * BFP_CHANGES_MAX). After writing: done. For apply_ctl's hooks. */
void wbuf_undo_note(void *u, unsigned slot, uint64_t begin, const uint32_t *pos, uint32_t n);
void wbuf_undo_done(void *u, unsigned slot);
/* Put back what the journal holds (ranges cut short by a crash; only
 * while a commit is in progress), or with discard just forget it; returns
 * how many frames' values were restored. */
unsigned wbuf_undo_rollback(wbuf_undo *u, int discard);

/* The DMA commit's journal, PATH.dmalog beside the buffer: a ring of
 * records, one per delta frame whose range a DMA engine may be writing
 * (several at once, in the order they were noted), each holding the
 * values at the frame's changed positions before it. A record is noted
 * before the engine is given the copy and retired, oldest first, once
 * the range is verified at the target. On restart after a crash mid-copy
 * the records left put those ranges back at the base, and the commit can
 * be finished like any other. */
typedef struct wbuf_dlog {
	int fd;
	uint8_t *map;
	size_t map_len;
	uint64_t ring;          /* bytes of records */
	uint16_t *params;
	uint64_t n_params;
} wbuf_dlog;

#define WBUF_DLOG_BYTES (8u << 20) /* of records: 1.3 M changed weights */

/* Open (or create) PATH.dmalog for the n_params weights at params (the
 * buffer at PATH); a log made for another buffer size is emptied. */
int wbuf_dlog_open(wbuf_dlog *l, uint16_t *params, uint64_t n_params, const char *path,
		   char *err, size_t errlen);
void wbuf_dlog_close(wbuf_dlog *l);
/* Keep params[begin + pos[k]] for k < n (n <= BFP_CHANGES_MAX); 0, or -1
 * when the ring has no room for it (retire records first). */
int wbuf_dlog_note(wbuf_dlog *l, uint64_t begin, const uint32_t *pos, uint32_t n);
/* The oldest record's range is at the target: forget it. */
void wbuf_dlog_retire(wbuf_dlog *l);
/* Put back what the records hold (only while a commit is in progress), or
 * with discard just forget them; returns how many records were restored. */
unsigned wbuf_dlog_rollback(wbuf_dlog *l, int discard);

#endif
