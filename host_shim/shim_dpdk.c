/*
 * shim_dpdk.c: the shim's DPDK backends (shim_dpdk.h). The DMA commit path
 * decodes each frame into a staging arena on the CPU (which verifies it)
 * and lets the engine move only verified ranges into the weight buffer,
 * running the decoder ahead of the engine; the port source is one RX queue
 * whose packets go through the relay's classifier.
 */
#define _GNU_SOURCE /* RTLD_NEXT */
#include "shim_dpdk.h"

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <rte_common.h>
#include <rte_cycles.h>
#include <rte_dev.h>
#include <rte_devargs.h>
#include <rte_dmadev.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_kvargs.h>
#include <rte_malloc.h>
#include <rte_mbuf.h>
#include <rte_memory.h>
#include <rte_vfio.h>

static int fail(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -1;
}

/* ---- EAL ---------------------------------------------------------------- */

#define EAL_ARGS_MAX 64

int shim_eal_init(const char *eal_args, char *err, size_t errlen)
{
	char *argv[EAL_ARGS_MAX + 1];
	int argc = 0;
	char *buf = strdup(eal_args ? eal_args : "");
	if (!buf)
		return fail(err, errlen, "out of memory");
	argv[argc++] = "bfpatch-shim";
	char *save = NULL;
	for (char *t = strtok_r(buf, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) {
		if (argc == EAL_ARGS_MAX) {
			free(buf);
			return fail(err, errlen, "more than %d EAL arguments", EAL_ARGS_MAX - 1);
		}
		argv[argc++] = t;
	}
	argv[argc] = NULL;
	/* the EAL copies what it keeps (file prefix, devargs, saved args) */
	int ret = rte_eal_init(argc, argv);
	free(buf);
	if (ret < 0)
		return fail(err, errlen, "EAL initialisation failed: %s", rte_strerror(rte_errno));
	if (ret != argc - 1) {
		rte_eal_cleanup();
		return fail(err, errlen, "EAL arguments: unexpected non-EAL argument");
	}
	return 0;
}

void shim_eal_fini(void)
{
	rte_eal_cleanup();
}

/* ---- dmadev copy engine -------------------------------------------------- */

#define PEND_MAX 4096u    /* frames in flight per arena fill */
#define STALL_S 10u       /* no completion for this long: the engine is stuck */
#define SUBMIT_EVERY 32u  /* descriptors per doorbell at most */

/* A frame decoded into the arena whose copy to params is pending. */
typedef struct pend {
	uint32_t idx;      /* index in the caller's frames[] */
	uint32_t len;      /* parameters */
	uint64_t begin;
	uint64_t job_end;  /* copies issued up to and including this frame's;
			      UINT64_MAX while its copy is not enqueued */
	int noted;         /* in the journal: retire once verified */
} pend;

struct shim_dma {
	int16_t dev;
	uint16_t vchan;
	uint32_t copy_max;
	int vfio;
	uint64_t issued;     /* copies enqueued, ever */
	uint64_t done;       /* copies completed, ever */
	uint32_t unsubmitted;
	int has_err;         /* a completion error not yet reported */
	uint64_t err_job;    /* the first failed copy's number */
	int err_status;
	shim_dma_stats st;
	uint8_t *arena;
	size_t arena_bytes;
	pend *q;
	int tear;            /* testing: shim_dma_tear_test() */
	uint8_t fbuf[BFP_FRAME_SIZE_MAX]; /* private, rebased copy of a frame */
};

static int dlog_note(void *arg, uint64_t begin, const uint32_t *pos, uint32_t n)
{
	return wbuf_dlog_note(arg, begin, pos, n);
}

static void dlog_retire(void *arg)
{
	wbuf_dlog_retire(arg);
}

shim_dma_journal shim_dma_journal_of(wbuf_dlog *l)
{
	return (shim_dma_journal){.note = dlog_note, .retire = dlog_retire, .arg = l};
}

void shim_dma_tear_test(shim_dma *d)
{
	d->tear = 1;
}

int shim_dma_open(const shim_dma_conf *c, shim_dma **out, char *err, size_t errlen)
{
	*out = NULL;
	if (!c || !c->name)
		return fail(err, errlen, "dmadev: no device name");
	if (rte_eal_iova_mode() != RTE_IOVA_VA)
		return fail(err, errlen, "dmadev %s: the EAL is not in IOVA-as-VA mode "
			    "(use --iova-mode=va)", c->name);
	int dev = rte_dma_get_dev_id_by_name(c->name);
	if (dev < 0)
		return fail(err, errlen, "dmadev %s: no such device (EAL option --vdev "
			    "dma_skeleton0, or a bound idxd/ioat device)", c->name);
	struct rte_dma_info info;
	if (rte_dma_info_get((int16_t)dev, &info) != 0)
		return fail(err, errlen, "dmadev %s: cannot read its capabilities", c->name);
	if (!(info.dev_capa & RTE_DMA_CAPA_MEM_TO_MEM) || !(info.dev_capa & RTE_DMA_CAPA_OPS_COPY))
		return fail(err, errlen, "dmadev %s: cannot copy memory to memory", c->name);

	uint32_t nd = c->n_desc ? c->n_desc : 1024;
	if (info.max_desc && nd > info.max_desc)
		nd = info.max_desc;
	if (nd < info.min_desc)
		nd = info.min_desc;
	struct rte_dma_conf dc = {.nb_vchans = 1};
	struct rte_dma_vchan_conf vc = {.direction = RTE_DMA_DIR_MEM_TO_MEM,
					.nb_desc = (uint16_t)nd};
	int r = rte_dma_configure((int16_t)dev, &dc);
	if (r == -EBUSY && rte_dma_stop((int16_t)dev) == 0) /* started by someone else */
		r = rte_dma_configure((int16_t)dev, &dc);
	if (r != 0 || rte_dma_vchan_setup((int16_t)dev, 0, &vc) != 0)
		return fail(err, errlen, "dmadev %s: cannot configure one vchan of %u descriptors",
			    c->name, nd);

	size_t arena = c->arena_bytes ? c->arena_bytes : (size_t)64 << 20;
	arena &= ~(size_t)1;
	int socket = info.numa_node >= 0 ? info.numa_node : SOCKET_ID_ANY;
	shim_dma *d = rte_zmalloc_socket("shim_dma", sizeof(*d), RTE_CACHE_LINE_SIZE, socket);
	uint8_t *a = rte_malloc_socket("shim_dma_arena", arena, 4096, socket);
	pend *q = rte_malloc_socket("shim_dma_q", PEND_MAX * sizeof(pend), RTE_CACHE_LINE_SIZE,
				    socket);
	if (!d || !a || !q || arena < 2) {
		rte_free(d);
		rte_free(a);
		rte_free(q);
		return fail(err, errlen, "dmadev %s: cannot allocate a %zu-byte arena from EAL "
			    "memory (raise -m)", c->name, arena);
	}
	d->dev = (int16_t)dev;
	d->vchan = 0;
	d->copy_max = c->copy_max ? c->copy_max : 2u << 20;
	d->vfio = c->vfio;
	d->arena = a;
	d->arena_bytes = arena;
	d->q = q;
	if (rte_dma_start(d->dev) != 0) {
		rte_free(d->arena);
		rte_free(d->q);
		rte_free(d);
		return fail(err, errlen, "dmadev %s: cannot start", c->name);
	}
	*out = d;
	return 0;
}

/* Reap completions; remember the first error status. Returns how many. */
static uint16_t dma_poll(shim_dma *d)
{
	enum rte_dma_status_code s[64];
	uint16_t last;
	uint16_t n = rte_dma_completed_status(d->dev, d->vchan, 64, &last, s);
	for (uint16_t i = 0; i < n; i++) {
		if (s[i] == RTE_DMA_STATUS_SUCCESSFUL)
			continue;
		d->st.errors++;
		if (!d->has_err) {
			d->has_err = 1;
			d->err_job = d->done + i;
			d->err_status = (int)s[i];
		}
	}
	d->done += n;
	return n;
}

static void dma_submit(shim_dma *d)
{
	if (!d->unsubmitted)
		return;
	rte_dma_submit(d->dev, d->vchan);
	d->unsubmitted = 0;
	d->st.submits++;
}

/* Poll until `done` reaches job; -1 if the engine makes no progress. */
static int dma_wait(shim_dma *d, uint64_t job, char *err, size_t errlen)
{
	const uint64_t hz = rte_get_timer_hz();
	uint64_t deadline = rte_get_timer_cycles() + STALL_S * hz;
	dma_submit(d);
	while (d->done < job) {
		if (dma_poll(d)) {
			deadline = rte_get_timer_cycles() + STALL_S * hz;
			continue;
		}
		if (rte_get_timer_cycles() > deadline)
			return fail(err, errlen, "dmadev: no completion for %u s (%" PRIu64
				    " copies outstanding)", STALL_S, d->issued - d->done);
		rte_pause();
	}
	return 0;
}

/* One descriptor; polls for room when the ring is full. */
static int dma_enqueue(shim_dma *d, void *dst, const void *src, uint32_t len, char *err,
		       size_t errlen)
{
	for (;;) {
		int r = rte_dma_copy(d->dev, d->vchan, (rte_iova_t)(uintptr_t)src,
				     (rte_iova_t)(uintptr_t)dst, len, 0);
		if (r >= 0)
			break;
		if (r != -ENOSPC)
			return fail(err, errlen, "dmadev: enqueue failed: %s", strerror(-r));
		d->st.full_waits++;
		/* room comes back as copies complete: wait for the oldest quarter */
		uint64_t out = d->issued - d->done;
		if (dma_wait(d, d->done + (out > 4 ? out / 4 : 1), err, errlen))
			return -1;
	}
	d->issued++;
	d->st.copies++;
	d->st.bytes += len;
	if (++d->unsubmitted >= SUBMIT_EVERY)
		dma_submit(d);
	return 0;
}

static int dma_copy_split(shim_dma *d, uint8_t *dst, const uint8_t *src, size_t len, char *err,
			  size_t errlen)
{
	while (len) {
		uint32_t n = len > d->copy_max ? d->copy_max : (uint32_t)len;
		if (dma_enqueue(d, dst, src, n, err, errlen))
			return -1;
		dst += n;
		src += n;
		len -= n;
	}
	return 0;
}

static int dma_take_error(shim_dma *d, char *err, size_t errlen)
{
	if (!d->has_err)
		return 0;
	d->has_err = 0;
	return fail(err, errlen, "dmadev: copy %" PRIu64 " completed with status %d",
		    d->err_job, d->err_status);
}

int shim_dma_copy(shim_dma *d, void *dst, const void *src, size_t len, char *err,
		  size_t errlen)
{
	if (dma_copy_split(d, dst, src, len, err, errlen))
		return -1;
	return dma_take_error(d, err, errlen);
}

int shim_dma_flush(shim_dma *d, char *err, size_t errlen)
{
	if (dma_wait(d, d->issued, err, errlen))
		return -1;
	return dma_take_error(d, err, errlen);
}

void shim_dma_stats_get(const shim_dma *d, shim_dma_stats *st)
{
	*st = d->st;
}

void shim_dma_close(shim_dma *d)
{
	if (!d)
		return;
	dma_wait(d, d->issued, NULL, 0);
	/* stopped, not closed: closing a vdev dmadev releases it for good,
	 * and a later shim_dma_open() reconfigures a stopped one */
	rte_dma_stop(d->dev);
	rte_free(d->arena);
	rte_free(d->q);
	rte_free(d);
}

int shim_dma_map(shim_dma *d, void *addr, size_t len, size_t page_sz, char *err,
		 size_t errlen)
{
	if (rte_extmem_register(addr, len, NULL, 0, page_sz) != 0 && rte_errno != EEXIST)
		return fail(err, errlen, "registering %zu bytes at %p with the EAL: %s", len, addr,
			    rte_strerror(rte_errno));
	if (d->vfio && rte_vfio_container_dma_map(RTE_VFIO_DEFAULT_CONTAINER_FD,
						   (uint64_t)(uintptr_t)addr,
						   (uint64_t)(uintptr_t)addr, len) != 0) {
		int e = rte_errno;
		rte_extmem_unregister(addr, len);
		return fail(err, errlen, "mapping %zu bytes at %p for VFIO DMA: %s", len, addr,
			    rte_strerror(e));
	}
	return 0;
}

int shim_dma_unmap(shim_dma *d, void *addr, size_t len, char *err, size_t errlen)
{
	int rc = 0;
	if (d->vfio && rte_vfio_container_dma_unmap(RTE_VFIO_DEFAULT_CONTAINER_FD,
						     (uint64_t)(uintptr_t)addr,
						     (uint64_t)(uintptr_t)addr, len) != 0)
		rc = fail(err, errlen, "unmapping %p from VFIO: %s", addr, rte_strerror(rte_errno));
	if (rte_extmem_unregister(addr, len) != 0 && rc == 0)
		rc = fail(err, errlen, "unregistering %p: %s", addr, rte_strerror(rte_errno));
	return rc;
}

/* One shim_dma_apply() call. Pending frames sit in d->q[head, tail) in
 * arena order; the open run is the not yet enqueued copy that adjacent
 * frames extend. */
typedef struct apply_run {
	shim_dma *d;
	const uint8_t *const *frames;
	const uint32_t *lens;
	uint32_t n_frames;
	uint16_t *params;
	uint64_t n_params;
	const shim_dma_journal *jn;
	shim_dma_result *res;
	char *err;
	size_t errlen;
	uint32_t head, tail;
	uint64_t lo, hi;        /* parameters covered by pending frames */
	size_t used;            /* arena bytes */
	uint8_t *run_src;
	uint8_t *run_dst;
	size_t run_len;
	uint32_t run_first;     /* first pending frame of the open run */
} apply_run;

static int frame_fail(apply_run *a, uint32_t idx, int status, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int frame_fail(apply_run *a, uint32_t idx, int status, const char *fmt, ...)
{
	if (a->res->failed_frame <= idx)
		return -1; /* report the first failing frame in array order */
	a->res->failed_frame = idx;
	a->res->status = status;
	if (a->err && a->errlen) {
		int n = snprintf(a->err, a->errlen, "frame %u: ", idx);
		if (n >= 0 && (size_t)n < a->errlen) {
			va_list ap;
			va_start(ap, fmt);
			vsnprintf(a->err + n, a->errlen - (size_t)n, fmt, ap);
			va_end(ap);
		}
	}
	return -1;
}

/* Enqueue the open run; its frames learn the copy that completes them. */
static int run_emit(apply_run *a)
{
	if (!a->run_len)
		return 0;
	shim_dma *d = a->d;
	char msg[160];
	if (d->tear) {
		/* testing: what a crash while the engine copies leaves */
		memcpy(a->run_dst, a->run_src, a->run_len / 4 * 2);
		fprintf(stderr, "bfpatch-shim: testing: killing myself halfway through a DMA copy\n");
		raise(SIGKILL);
	}
	int rc = dma_copy_split(d, a->run_dst, a->run_src, a->run_len, msg, sizeof(msg));
	/* after a failure too: whatever was enqueued is waited for */
	for (uint32_t i = a->run_first; i < a->tail; i++)
		d->q[i].job_end = d->issued;
	dma_submit(d);
	a->run_len = 0;
	if (rc)
		return frame_fail(a, d->q[a->run_first].idx, 0, "%s", msg);
	return 0;
}

/* Verify the pending frames whose copies have completed, oldest first;
 * with wait, first enqueue the open run and wait for every copy, so the
 * queue and the arena end up empty. */
static int reap(apply_run *a, int wait)
{
	shim_dma *d = a->d;
	int rc = 0;
	if (wait) {
		char msg[160];
		if (run_emit(a))
			rc = -1;
		/* wait even after a failure: nothing may still be copying into
		 * params when we return */
		if (dma_wait(d, d->issued, msg, sizeof(msg)))
			return frame_fail(a, a->head < a->tail ? d->q[a->head].idx : 0, 0, "%s",
					  msg);
	} else {
		dma_poll(d);
	}
	while (a->head < a->tail && d->q[a->head].job_end <= d->done) {
		const pend *p = &d->q[a->head++];
		if (rc)
			continue; /* after a failure nothing more is counted */
		if (d->has_err && d->err_job < p->job_end) {
			rc = frame_fail(a, p->idx, 0, "range [%" PRIu64 ", %" PRIu64 "): DMA copy "
					"completed with status %d; the range is unspecified",
					p->begin, p->begin + p->len, d->err_status);
			d->has_err = 0;
			continue;
		}
		int at = 0;
		bfp_status st = bfp_frame_check_target(a->frames[p->idx], a->lens[p->idx],
						       a->params, a->n_params, &at);
		if (st != BFP_OK || !at) {
			rc = frame_fail(a, p->idx, st, "range [%" PRIu64 ", %" PRIu64 ") is not at "
					"target after the DMA copy (%s)", p->begin,
					p->begin + p->len,
					st != BFP_OK ? bfp_status_str(st) : "hash mismatch");
			continue;
		}
		if (p->noted)
			a->jn->retire(a->jn->arg);
		a->res->applied++;
		a->res->verified_params += p->len;
	}
	if (a->head == a->tail && !a->run_len) {
		a->head = a->tail = 0;
		a->used = 0;
		a->lo = UINT64_MAX;
		a->hi = 0;
	}
	return rc;
}

/* Apply frame i through the arena (steps 1-4 of shim_dma_apply()). */
static int apply_one(apply_run *a, bfp_decoder *dec, const bfp_apply_opts *o, uint32_t i,
		     int retried)
{
	shim_dma *d = a->d;
	const uint8_t *f = a->frames[i];
	const uint32_t flen = a->lens[i];
	bfp_frame_header h;
	bfp_status st = f ? bfp_frame_parse(f, flen, &h) : BFP_E_ARG;
	if (st != BFP_OK)
		return frame_fail(a, i, st, "%s", bfp_status_str(st));
	const uint64_t b = h.range_begin, e = b + h.range_len;
	if (b >= a->n_params || h.range_len > a->n_params - b)
		return frame_fail(a, i, BFP_E_RANGE, "range [%" PRIu64 ", %" PRIu64 ") beyond the "
				  "model's %" PRIu64 " parameters", b, e, a->n_params);
	const size_t bytes = (size_t)h.range_len * 2;
	const int overlaps = a->head < a->tail && e > a->lo && b < a->hi;

	const int journal = a->jn && bfp_encoding_is_delta(h.encoding);
	/* a frame coded with the model of an earlier frame (BFP_ENC_SPARSE_REF) */
	st = bfp_decoder_model_for(dec, f, flen, a->frames, a->lens, a->n_frames);
	if (st != BFP_OK)
		return frame_fail(a, i, st, "%s", bfp_status_str(st));
	if (bytes > d->arena_bytes) {
		/* too large to stage: the decoder verifies before it writes,
		 * so applying in place keeps the guarantee (journalled: after
		 * the copies in flight, so records retire in order) */
		if ((overlaps || journal) && reap(a, 1))
			return -1;
		if (!journal) {
			st = bfp_decode_apply(dec, o, f, flen, a->params, a->n_params, NULL);
		} else if ((st = bfp_decode_verify(dec, o, f, flen, a->params, a->n_params,
						   NULL)) == BFP_OK) {
			const uint32_t *pos;
			const uint16_t *val;
			const uint32_t n = bfp_decoder_changes(dec, &pos, &val);
			if (a->jn->note(a->jn->arg, b, pos, n))
				return frame_fail(a, i, 0, "range [%" PRIu64 ", %" PRIu64 "): no room "
						  "in the journal", b, e);
			for (uint32_t k = 0; k < n; k++)
				a->params[b + pos[k]] = val[k];
			a->jn->retire(a->jn->arg);
		}
		if (st != BFP_OK)
			return frame_fail(a, i, st, "range [%" PRIu64 ", %" PRIu64 "): %s", b, e,
					  bfp_status_str(st));
		a->res->applied++;
		a->res->by_cpu++;
		a->res->verified_params += h.range_len;
		return 0;
	}
	if ((overlaps || a->used + bytes > d->arena_bytes || a->tail == PEND_MAX) && reap(a, 1))
		return -1;

	uint8_t *slot = d->arena + a->used;
	memcpy(slot, a->params + b, bytes);
	/* rebase a private copy of the frame to parameter 0 of the slot: the
	 * range hash covers values only (FORMAT.md 2.3), the CRC is redone */
	memcpy(d->fbuf, f, flen);
	for (unsigned k = 0; k < 8; k++)
		d->fbuf[32 + k] = 0;
	st = bfp_frame_set_index(d->fbuf, flen, h.frame_index, h.frame_count);
	if (st == BFP_OK)
		st = bfp_decode_apply(dec, o, d->fbuf, flen, (uint16_t *)(void *)slot, h.range_len,
				      NULL);
	if (st != BFP_OK) {
		reap(a, 1); /* what was verified before stays counted */
		return frame_fail(a, i, st, "range [%" PRIu64 ", %" PRIu64 "): %s; nothing written",
				  b, e, bfp_status_str(st));
	}
	/* the values the copy will overwrite, kept before it can start; a
	 * full journal empties as the copies in flight complete, then this
	 * frame is done again (reaping them all resets the arena) */
	const uint32_t *pos;
	const uint32_t n = bfp_decoder_changes(dec, &pos, NULL);
	if (journal && a->jn->note(a->jn->arg, b, pos, n)) {
		if (retried)
			return frame_fail(a, i, 0, "range [%" PRIu64 ", %" PRIu64 "): no room in "
					  "the journal", b, e);
		return reap(a, 1) ? -1 : apply_one(a, dec, o, i, 1);
	}
	/* extend the open run when both sides are adjacent, else enqueue it
	 * (before this frame joins the queue: the run does not cover it) */
	uint8_t *dst = (uint8_t *)(a->params + b);
	const int extend = a->run_len && a->run_src + a->run_len == slot &&
			   a->run_dst + a->run_len == dst && a->run_len + bytes <= d->copy_max;
	if (!extend) {
		if (run_emit(a))
			return -1;
		a->run_src = slot;
		a->run_dst = dst;
		a->run_first = a->tail;
	}
	a->run_len += bytes;
	d->q[a->tail++] = (pend){.idx = i, .len = h.range_len, .begin = b, .job_end = UINT64_MAX,
				 .noted = journal};
	a->used += bytes;
	if (b < a->lo)
		a->lo = b;
	if (e > a->hi)
		a->hi = e;
	if (a->run_len >= d->copy_max && run_emit(a))
		return -1;
	return reap(a, 0);
}

int shim_dma_apply(shim_dma *d, bfp_decoder *dec, const bfp_apply_opts *o,
		   const uint8_t *const *frames, const uint32_t *lens, uint32_t n_frames,
		   uint16_t *params, uint64_t n_params, const shim_dma_journal *jn,
		   shim_dma_result *res, char *err, size_t errlen)
{
	shim_dma_result local;
	if (!res)
		res = &local;
	memset(res, 0, sizeof(*res));
	res->failed_frame = UINT32_MAX;
	if (!d || !dec || !o || (n_frames && (!frames || !lens)) || !params)
		return fail(err, errlen, "shim_dma_apply: invalid argument");
	/* copies of earlier shim_dma_copy() calls are not ours to count */
	if (shim_dma_flush(d, err, errlen))
		return -1;
	const shim_dma_stats before = d->st;
	apply_run a = {.d = d, .frames = frames, .lens = lens, .n_frames = n_frames, .params = params,
		       .n_params = n_params, .jn = jn, .res = res, .err = err, .errlen = errlen,
		       .lo = UINT64_MAX};
	int rc = 0;
	for (uint32_t i = 0; i < n_frames && rc == 0; i++)
		rc = apply_one(&a, dec, o, i, 0);
	if (reap(&a, 1))
		rc = -1;
	d->has_err = 0;
	res->dma_bytes = d->st.bytes - before.bytes;
	return rc;
}

/* ---- RX bursts against unmapping ------------------------------------------
 * DPDK 22.11's memif PMD handles its peer's disconnect on the EAL interrupt
 * thread and unmaps the shared rings there, without waiting for an RX burst
 * in progress on another thread; that burst then faults (a shim died this
 * way when its memif server exited under load). This executable defines
 * munmap(), so the PMD's calls, like every call through the PLT, come here:
 * an unmapping waits until no burst is in progress, and a burst that would
 * start meanwhile is skipped. Each side raises its own count and then reads
 * the other's, both sequentially consistent, so at least one of them sees
 * the other. */
static atomic_uint rx_bursts, unmaps;
static _Thread_local int rx_here; /* this thread is in a burst: never wait */

int shim_rx_guard_enter(void)
{
	rx_here++; /* first: a signal handler's munmap here must not wait on us */
	atomic_fetch_add(&rx_bursts, 1);
	if (atomic_load(&unmaps)) {
		atomic_fetch_sub(&rx_bursts, 1);
		rx_here--;
		return 0;
	}
	return 1;
}

void shim_rx_guard_leave(void)
{
	atomic_fetch_sub(&rx_bursts, 1);
	rx_here--;
}

/* the C library's munmap, or a sanitizer's in front of it; looked up before
 * main (dlsym takes the loader's lock: not from inside another munmap) */
static int (*next_munmap)(void *, size_t);

__attribute__((constructor)) static void find_next_munmap(void)
{
	next_munmap = (int (*)(void *, size_t))dlsym(RTLD_NEXT, "munmap");
}

int munmap(void *addr, size_t len)
{
	int (*f)(void *, size_t) = next_munmap;
	if (rx_here)
		return f ? f(addr, len) : (int)syscall(SYS_munmap, addr, len);
	atomic_fetch_add(&unmaps, 1);
	while (atomic_load(&rx_bursts))
		sched_yield();
	int r = f ? f(addr, len) : (int)syscall(SYS_munmap, addr, len);
	atomic_fetch_sub(&unmaps, 1);
	return r;
}

/* ---- DPDK port frame source ---------------------------------------------- */

struct shim_port {
	uint16_t port;
	int probed;            /* we hot-plugged it: remove on close */
	struct rte_mempool *pool;
	rp_addrs addrs;
	int any_ip;
	int reconnects;        /* a memif client: restarted while the link is down */
	int link_up;           /* as last seen by shim_port_watch() */
	int stopped;           /* a restart failed: not polled until one succeeds */
	int start_ok;          /* our last (re)start connected, no link since */
	double interval;       /* seconds between restarts */
	uint64_t rx_watched;   /* rx_packets at the last shim_port_watch() */
	double started;        /* when shim_port_watch() last (re)started it; 0: not yet */
	shim_port_stats st;
	uint8_t bounce[SHIM_PORT_PKT_MAX]; /* chained packets, made contiguous */
};

/* A memif port in the client role (the PMD's default), which connects
 * only when started. The role is read from the device's own arguments, so
 * a port the EAL arguments created (--vdev) is judged the same way. */
static int memif_client(const struct rte_eth_dev_info *info)
{
	if (strcmp(info->driver_name, "net_memif") != 0)
		return 0;
	const struct rte_devargs *da = rte_dev_devargs(info->device);
	struct rte_kvargs *kv = rte_kvargs_parse(da && da->args ? da->args : "", NULL);
	if (!kv)
		return 0; /* unreadable: leave it alone */
	const char *role = rte_kvargs_get(kv, "role");
	int client = !role || !strcmp(role, "client") || !strcmp(role, "slave");
	rte_kvargs_free(kv);
	return client;
}

int shim_port_open(const shim_port_conf *c, shim_port **out, char *err, size_t errlen)
{
	*out = NULL;
	if (!c || !c->devargs || !c->devargs[0] || !c->udp_port)
		return fail(err, errlen, "port: devargs and a UDP port are required");
	char name[RTE_ETH_NAME_MAX_LEN];
	size_t nl = strcspn(c->devargs, ",");
	if (nl >= sizeof(name))
		return fail(err, errlen, "port %s: device name too long", c->devargs);
	memcpy(name, c->devargs, nl);
	name[nl] = 0;

	uint16_t port;
	int probed = 0;
	if (rte_eth_dev_get_port_by_name(name, &port) != 0) {
		int r = rte_dev_probe(c->devargs);
		if (r != 0)
			return fail(err, errlen, "port %s: probe failed: %s", c->devargs,
				    rte_strerror(-r));
		if (rte_eth_dev_get_port_by_name(name, &port) != 0)
			return fail(err, errlen, "port %s: probed, but no ethdev named %s",
				    c->devargs, name);
		probed = 1;
	}
	struct rte_eth_dev_info info;
	if (rte_eth_dev_info_get(port, &info) != 0) {
		if (probed)
			rte_eth_dev_close(port);
		return fail(err, errlen, "port %s: no device info", name);
	}
	int socket = rte_eth_dev_socket_id(port);
	if (socket < 0)
		socket = (int)rte_socket_id();
	struct rte_eth_conf conf;
	int r;
	shim_port *p = rte_zmalloc_socket("shim_port", sizeof(*p), RTE_CACHE_LINE_SIZE, socket);
	if (!p)
		goto fail_nomem;
	p->port = port;
	p->probed = probed;
	p->addrs.ip[0] = c->ip;
	p->addrs.n_ip = 1;
	p->any_ip = c->ip == 0;
	p->addrs.data_port = c->udp_port;
	p->addrs.control_port = 0; /* control stays on the kernel socket */
	p->addrs.check_crc = c->check_crc;
	p->reconnects = memif_client(&info);

	char pool_name[RTE_MEMPOOL_NAMESIZE];
	snprintf(pool_name, sizeof(pool_name), "shim_rx%u", port);
	/* by default one mbuf holds a whole jumbo frame: no scattered RX needed */
	const uint32_t room = c->mbuf_data ? c->mbuf_data : SHIM_PORT_PKT_MAX;
	p->pool = rte_pktmbuf_pool_create(pool_name, c->n_mbufs ? c->n_mbufs : 4095, 64, 0,
					  (uint16_t)(RTE_PKTMBUF_HEADROOM + room), socket);
	if (!p->pool)
		goto fail_nomem;
	memset(&conf, 0, sizeof(conf));
	/* MTU 9000 where allowed; tap and af_xdp stop at 1500 and say so */
	uint32_t mtu = 9000;
	if (info.max_mtu && mtu > info.max_mtu)
		mtu = info.max_mtu;
	if (info.max_rx_pktlen && info.max_rx_pktlen < mtu + 18u)
		mtu = info.max_rx_pktlen > 18u ? info.max_rx_pktlen - 18u : 0;
	if (mtu > info.min_mtu)
		conf.rxmode.mtu = mtu;
	if (info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_SCATTER)
		conf.rxmode.offloads |= RTE_ETH_RX_OFFLOAD_SCATTER;
	r = rte_eth_dev_configure(port, 1, 1, &conf);
	if (r != 0) {
		fail(err, errlen, "port %s: configure: %s", name, rte_strerror(-r));
		goto fail;
	}
	uint16_t nrx = c->n_rxd ? c->n_rxd : 512, ntx = 64;
	rte_eth_dev_adjust_nb_rx_tx_desc(port, &nrx, &ntx);
	r = rte_eth_rx_queue_setup(port, 0, nrx, (unsigned)socket, NULL, p->pool);
	if (r == 0)
		r = rte_eth_tx_queue_setup(port, 0, ntx, (unsigned)socket, NULL);
	if (r != 0) {
		fail(err, errlen, "port %s: queue setup: %s", name, rte_strerror(-r));
		goto fail;
	}
	rte_eth_promiscuous_enable(port); /* not all PMDs can; harmless then */
	r = rte_eth_dev_start(port);
	if (r != 0 && p->reconnects) {
		p->stopped = 1; /* no memif server yet: shim_port_watch() retries */
	} else if (r != 0) {
		fail(err, errlen, "port %s: start: %s", name, rte_strerror(-r));
		goto fail;
	}
	*out = p;
	return 0;

fail_nomem:
	fail(err, errlen, "port %s: out of EAL memory for the handle or %u mbufs of %u B", name,
	     c->n_mbufs ? c->n_mbufs : 4095, SHIM_PORT_PKT_MAX);
fail:
	if (probed) {
		rte_eth_dev_close(port);
		rte_dev_remove(info.device);
	}
	if (p)
		rte_mempool_free(p->pool);
	rte_free(p);
	return -1;
}

unsigned shim_port_poll(shim_port *p, shim_frame_cb cb, void *ctx)
{
	struct rte_mbuf *m[SHIM_PORT_BURST];
	if (p->stopped || !shim_rx_guard_enter())
		return 0;
	uint16_t n = rte_eth_rx_burst(p->port, 0, m, SHIM_PORT_BURST);
	shim_rx_guard_leave(); /* the mbufs are ours */
	unsigned delivered = 0;
	for (uint16_t i = 0; i < n; i++) {
		const uint32_t len = rte_pktmbuf_pkt_len(m[i]);
		p->st.rx_packets++;
		p->st.rx_bytes += len;
		if (len > SHIM_PORT_PKT_MAX) {
			p->st.oversize++;
			rte_pktmbuf_free(m[i]);
			continue;
		}
		if (m[i]->nb_segs > 1)
			p->st.chained++;
		const uint8_t *b = rte_pktmbuf_read(m[i], 0, len, p->bounce);
		/* any address: take the packet's own IPv4 destination as ours */
		if (p->any_ip && len >= RP_ETH_LEN + 20u && b[12] == 0x08 && b[13] == 0x00)
			p->addrs.ip[0] = (uint32_t)b[30] << 24 | (uint32_t)b[31] << 16 |
					 (uint32_t)b[32] << 8 | b[33];
		rp_pkt pk;
		rp_class cl = rp_classify(b, len, &p->addrs, &pk);
		p->st.cls[cl]++;
		if (cl == RP_DATA) {
			p->st.delivered++;
			delivered++;
			cb(ctx, b + pk.l4_off, pk.l4_len);
		}
		rte_pktmbuf_free(m[i]);
	}
	return delivered;
}

void shim_port_stats_get(const shim_port *p, shim_port_stats *st)
{
	*st = p->st;
}

shim_link_event shim_port_watch(shim_port *p, double now)
{
	struct rte_eth_link lk;
	if (p->stopped || rte_eth_link_get_nowait(p->port, &lk) != 0)
		lk.link_status = RTE_ETH_LINK_DOWN;
	if (p->started == 0) { /* opened just before the first call */
		p->started = now;
		p->interval = SHIM_PORT_RECONNECT_S;
	}
	/* packets since the last look while down: it was up meanwhile, if only
	 * briefly; said as up now, and as down at the next call */
	const int blip = !p->link_up && p->st.rx_packets != p->rx_watched;
	p->rx_watched = p->st.rx_packets;
	if (lk.link_status == RTE_ETH_LINK_UP || blip) {
		p->interval = SHIM_PORT_RECONNECT_S;
		p->start_ok = 0;
		if (p->link_up)
			return SHIM_LINK_SAME;
		p->link_up = 1;
		return SHIM_LINK_UP;
	}
	if (p->link_up) {
		p->link_up = 0;
		p->started = now; /* a server may come back at once: give it time */
		p->st.link_downs++;
		return SHIM_LINK_DOWN;
	}
	if (!p->reconnects || now - p->started < p->interval)
		return SHIM_LINK_SAME;
	/* our last start connected to a server, yet no link came: it may still
	 * be shaking hands; wait twice as long before breaking in again */
	if (p->start_ok && p->interval < 8 * SHIM_PORT_RECONNECT_S)
		p->interval *= 2;
	p->started = now;
	p->st.restarts++;
	if (!p->stopped)
		rte_eth_dev_stop(p->port);
	p->stopped = rte_eth_dev_start(p->port) != 0;
	p->start_ok = !p->stopped;
	return p->stopped ? SHIM_LINK_RESTART_FAILED : SHIM_LINK_RESTART;
}

int shim_port_reconnects(const shim_port *p)
{
	return p->reconnects;
}

int shim_port_waiting(const shim_port *p)
{
	return p->stopped;
}

void shim_port_close(shim_port *p)
{
	if (!p)
		return;
	struct rte_eth_dev_info info;
	int have = rte_eth_dev_info_get(p->port, &info) == 0;
	if (!p->stopped)
		rte_eth_dev_stop(p->port);
	rte_eth_dev_close(p->port);
	if (p->probed && have)
		rte_dev_remove(info.device);
	rte_mempool_free(p->pool);
	rte_free(p);
}
