/*
 * setup.c: what bfpatch-shim runs on, taken in one order by shim_open()
 * and given back by shim_close(): keys, the buffer's lock, the weight
 * buffer (crash journals rolled back), the event log, the socket, the
 * EAL with --dma and --port, the receive buffers. Each step records what
 * it took in the shim, so close frees exactly that, after a failed open
 * too.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "model.h"
#include "shim.h"
#ifdef BFP_SHIM_DPDK
#include "shim_dpdk.h"
#endif

/* --key files, in the order given (the first signs) */
static int open_keys(shim *s, char *err, size_t errlen)
{
	for (unsigned i = 0; i < s->cf.n_keys; i++)
		if (rp_auth_init() || rp_auth_load(&s->auth, s->cf.key_paths[i], err, errlen)) {
			fprintf(stderr, "bfpatch-shim: %s\n", err);
			return -1;
		}
	return 0;
}

/* One shim a buffer. Its lock is on the buffer file itself (open_buffer):
 * a second shim is refused whatever path it names the file by. This one,
 * on BUFFER.lock, guards what is named after the path: the journals
 * (BUFFER.undo, BUFFER.dmalog) and --init's creation at it, which a
 * second shim must not share even where the path now names another file
 * (the first one's was removed or renamed away while it ran). The kernel
 * drops both locks when this process ends, however it ends. */
static int open_lock(shim *s)
{
	char lkp[4096], err[512];
	snprintf(lkp, sizeof(lkp), "%s.lock", s->cf.buffer);
	s->lock_fd = open(lkp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (s->lock_fd < 0) {
		fprintf(stderr, "bfpatch-shim: %s: %s\n", lkp, strerror(errno));
		return -1;
	}
	if (wbuf_lock(s->lock_fd, lkp, err, sizeof(err))) {
		fprintf(stderr, "bfpatch-shim: %s is in use by another bfpatch-shim: %s\n",
			s->cf.buffer, err);
		return -1;
	}
	return 0;
}

/* --init: create the buffer from the checkpoint, unless it exists (a
 * restart with the same command line: the buffer, not the checkpoint,
 * holds the actor's weights now); then *init_model is the checkpoint's
 * model, which the buffer must hold. The checkpoint is what model_load
 * reads: a safetensors or raw BF16 file, or a sharded checkpoint (its
 * directory or index), whose buffer holds the shards' data concatenated
 * under the header of the one file with the same tensors (FORMAT.md 1),
 * as the buffer made from that file does. */
static int init_buffer(shim *s, uint64_t *init_model, char *err, size_t errlen)
{
	model m;
	*init_model = 0;
	if (model_load(&m, s->cf.init, err, errlen)) {
		fprintf(stderr, "bfpatch-shim: %s\n", err);
		return -1;
	}
	int rc = 0;
	if (access(s->cf.buffer, F_OK) == 0) {
		*init_model = m.model_id;
	} else if (wbuf_create(s->cf.buffer, &m, s->cf.init_version, 0, err, errlen)) {
		/* made since we looked, by a shim through another path to it
		 * (wbuf_create never replaces it): taken as if it had been
		 * there, and its writer's lock refuses us in open_buffer */
		if (access(s->cf.buffer, F_OK) == 0) {
			*init_model = m.model_id;
		} else {
			fprintf(stderr, "bfpatch-shim: %s\n", err);
			rc = -1;
		}
	}
	model_free(&m);
	return rc;
}

/* The buffer, mapped and checked against --init, its sequence counter
 * repaired. */
static int open_buffer(shim *s, char *err, size_t errlen)
{
	uint64_t init_model = 0;
	if (s->cf.init && init_buffer(s, &init_model, err, errlen))
		return -1;
	/* locked before anything is read or repaired: the one writer's, by
	 * the file, whatever names it */
	if (wbuf_open(&s->w, s->cf.buffer, err, errlen) ||
	    wbuf_lock(s->w.fd, s->cf.buffer, err, errlen)) {
		fprintf(stderr, "bfpatch-shim: %s\n", err);
		return -1;
	}
	if (init_model && s->w.h->model_id != init_model) {
		fprintf(stderr, "bfpatch-shim: %s holds another model (id %016" PRIx64 ") than "
			"--init %s (%016" PRIx64 "); remove the buffer to start over from it\n",
			s->cf.buffer, s->w.h->model_id, s->cf.init, init_model);
		return -1;
	}
	if (init_model)
		printf("bfpatch-shim: %s exists with this model: using it, not --init %s\n",
		       s->cf.buffer, s->cf.init);
	wbuf_prefault_write(&s->w);
	if (wbuf_seq_repair(&s->w))
		printf("bfpatch-shim: version %u was published by a run that died before it "
		       "told readers so; they see it now\n", shim_version(s));
	return 0;
}

/* The commit's journals: frames whose writes a crash cut short go back
 * to the base, so the interrupted commit can be finished (with RESYNC
 * nothing is kept). */
static int open_journals(shim *s, char *err, size_t errlen)
{
	if (wbuf_undo_open(&s->undo, &s->w, s->cf.buffer, (unsigned)s->cf.threads, err,
			   errlen)) {
		fprintf(stderr, "bfpatch-shim: undo journal: %s\n", err);
		return -1;
	}
	unsigned undone = wbuf_undo_rollback(&s->undo, shim_state(s) != WBUF_COMMITTING);
	/* the DMA commit's journal: with --dma, or left by a run that had it */
	char dlp[4096];
	snprintf(dlp, sizeof(dlp), "%s.dmalog", s->cf.buffer);
	if ((s->cf.dma_dev || access(dlp, F_OK) == 0) &&
	    wbuf_dlog_open(&s->dlog, s->w.params, s->w.h->n_params, s->cf.buffer, err, errlen)) {
		fprintf(stderr, "bfpatch-shim: DMA journal: %s\n", err);
		return -1;
	}
	if (s->dlog.map)
		undone += wbuf_dlog_rollback(&s->dlog, shim_state(s) != WBUF_COMMITTING);
	if (undone)
		printf("bfpatch-shim: %u frame(s) cut short by the crash put back at the base\n",
		       undone);
	return 0;
}

/* The socket: frames and control on --listen; with --port, control only
 * (on any address and port). JOINs and NACKs go to --upstream from it. */
static int open_socket(shim *s)
{
	s->sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int big = 16 << 20;
	setsockopt(s->sock, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
	setsockopt(s->sock, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big));
	int one = 1; /* the kernel's count of datagrams dropped for a full socket */
	setsockopt(s->sock, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof(one));
	struct sockaddr_in la = {.sin_family = AF_INET, .sin_port = htons(s->cf.listen_port),
				 .sin_addr.s_addr = htonl(s->cf.listen_ip)};
	if (s->cf.port_args) { /* frames come from the DPDK port */
		la.sin_port = 0;
		la.sin_addr.s_addr = htonl(INADDR_ANY);
	}
	if (s->sock < 0 || bind(s->sock, (struct sockaddr *)&la, sizeof(la)) != 0) {
		fprintf(stderr, "bfpatch-shim: cannot listen on port %u: %s\n", s->cf.listen_port,
			strerror(errno));
		return -1;
	}
	s->upstream.sin_family = AF_INET;
	s->upstream.sin_port = htons(s->cf.upstream_port);
	s->upstream.sin_addr.s_addr = htonl(s->cf.upstream_ip);
	s->ctl_send = net_ctl_send;
	return 0;
}

#ifdef BFP_SHIM_DPDK
/* The EAL for --dma and --port: --eal's options, or ours (no hugepages,
 * no PCI, a file prefix of this process), and the devices as vdevs. */
static int open_eal(shim *s, char *err, size_t errlen)
{
	const shim_config *cf = &s->cf;
	char eal[2048];
	int n = snprintf(eal, sizeof(eal), "%s",
			 cf->eal_args ? cf->eal_args : "--no-huge -m 512 --no-pci -l 0 "
			 "--iova-mode=va --log-level=lib.eal:error");
	if (!cf->eal_args)
		n += snprintf(eal + n, sizeof(eal) - (size_t)n, " --file-prefix bfpshim%d",
			      (int)getpid());
	if (cf->dma_dev && !strncmp(cf->dma_dev, "dma_skeleton", 12))
		n += snprintf(eal + n, sizeof(eal) - (size_t)n, " --vdev %s", cf->dma_dev);
	if (cf->port_args)
		n += snprintf(eal + n, sizeof(eal) - (size_t)n, " --vdev %s", cf->port_args);
	if ((size_t)n >= sizeof(eal) || shim_eal_init(eal, err, errlen)) {
		fprintf(stderr, "bfpatch-shim: %s\n", (size_t)n >= sizeof(eal) ?
			"EAL options too long" : err);
		return -1;
	}
	s->eal_up = 1;
	return 0;
}

/* --dma DEV: its decoder, the zstd workspace, the device */
static int open_dma(shim *s, char *err, size_t errlen)
{
	shim_dma_conf dc = {.name = s->cf.dma_dev};
	s->dma_dec = malloc(sizeof(*s->dma_dec));
	if (!s->dma_dec || bfp_decoder_init(s->dma_dec, 0) != BFP_OK || !stage_zws(s) ||
	    shim_dma_open(&dc, &s->dma, err, errlen)) {
		fprintf(stderr, "bfpatch-shim: --dma %s: %s\n", s->cf.dma_dev,
			s->dma_dec ? err : "out of memory");
		return -1;
	}
	return 0;
}

/* --port DEVARGS: frames from a DPDK port, to --listen's address */
static int open_port(shim *s, char *err, size_t errlen)
{
	char dev[256];
	snprintf(dev, sizeof(dev), "%s", s->cf.port_args);
	dev[strcspn(dev, ",")] = 0; /* the device name, as the EAL named it */
	shim_port_conf pc = {.devargs = dev, .ip = s->cf.listen_ip,
			     .udp_port = s->cf.listen_port};
	if (shim_port_open(&pc, &s->port, err, errlen)) {
		fprintf(stderr, "bfpatch-shim: --port %s: %s\n", s->cf.port_args, err);
		return -1;
	}
	if (shim_port_waiting(s->port))
		printf("bfpatch-shim: port: no memif server listening yet; trying every "
		       "%.0f s\n", SHIM_PORT_RECONNECT_S);
	return 0;
}

static int open_dpdk(shim *s, char *err, size_t errlen)
{
	if ((s->cf.dma_dev || s->cf.port_args) && open_eal(s, err, errlen))
		return -1;
	if (s->cf.dma_dev && open_dma(s, err, errlen))
		return -1;
	if (s->cf.port_args && open_port(s, err, errlen))
		return -1;
	return 0;
}
#else
static int open_dpdk(shim *s, char *err, size_t errlen)
{
	(void)s;
	(void)err;
	(void)errlen;
	return 0; /* options.c refused --dma, --port and --eal */
}
#endif

int shim_open(shim *s, const shim_config *cf)
{
	char err[512] = "";
	memset(s, 0, sizeof(*s));
	s->cf = *cf;
	s->lock_fd = s->sock = -1;
	s->undo.fd = s->dlog.fd = s->ev.fd = -1;
	stage_init(s);
	malloc_keep_freed();
	if (open_keys(s, err, sizeof(err)) || open_lock(s) || open_buffer(s, err, sizeof(err)) ||
	    open_journals(s, err, sizeof(err)))
		return -1;
	if (events_open(&s->ev, cf->events_path, "shim", cf->name)) {
		fprintf(stderr, "bfpatch-shim: --events %s: %s\n", cf->events_path, strerror(errno));
		return -1;
	}
	if (open_socket(s) || open_dpdk(s, err, sizeof(err)))
		return -1;
	if (net_rxbufs_alloc(s)) {
		fprintf(stderr, "bfpatch-shim: out of memory\n");
		return -1;
	}
	return 0;
}

void shim_close(shim *s)
{
	stage_fini(s);
	wbuf_undo_close(&s->undo);
	if (s->dlog.map)
		wbuf_dlog_close(&s->dlog);
#ifdef BFP_SHIM_DPDK
	shim_port_close(s->port);
	shim_dma_close(s->dma);
	if (s->eal_up)
		shim_eal_fini();
#endif
	s->port = NULL;
	s->dma = NULL;
	free(s->dma_dec);
	s->dma_dec = NULL;
	free(s->rxb);
	s->rxb = NULL;
	events_close(&s->ev);
	if (s->sock >= 0)
		close(s->sock);
	s->sock = -1;
	wbuf_close(&s->w);
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	s->lock_fd = -1;
}
