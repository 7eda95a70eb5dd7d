/*
 * shim.h: bfpatch-shim's internal interface: its configuration, its
 * state and counters, and what each of its files gives the others
 * (main.c, options.c, setup.c, net.c, stage.c). One thread owns the
 * state; only the commit's apply threads run beside it.
 */
#ifndef BFP_SHIM_H
#define BFP_SHIM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>

#include "auth.h"
#include "bfpatch.h"
#include "changes.h"
#include "events.h"
#include "patch.h"
#include "proto.h"
#include "wbuf.h"

/* versions staged at once */
#define SLOTS 4
/* NACK rounds without progress before asking for a keyframe stream */
#define NACK_GIVE_UP 8
/* frames of one version that preparation refuses before it stops trying */
#define PREP_REFUSALS 3

/* ---- configuration ---- */

typedef struct shim_config {
	const char *buffer;         /* --buffer PATH */
	const char *init;           /* --init FILE: create PATH from it first */
	uint32_t init_version;      /* --init-version: of --init */
	uint32_t upstream_ip, listen_ip;     /* host order */
	uint16_t upstream_port, listen_port; /* listen_port: also told in JOIN */
	uint32_t rate_kbps;         /* --rate, told in JOIN (0: the sender's) */
	int safe_point;             /* --commit safe-point */
	int threads;                /* --threads: apply threads */
	uint32_t nack_ms;           /* --nack-ms: first NACK after this quiet */
	uint64_t max_stage;         /* --max-stage: bytes staged, at most */
	int no_prep;                /* --no-prepare */
	const char *events_path;    /* --events */
	const char *name;           /* --name */
	/* --key files; one more than can be loaded, so that loading says
	 * "too many" as it does for every other bad key */
	const char *key_paths[RP_AUTH_MAX_KEYS + 1];
	unsigned n_keys;
	int insecure;               /* --insecure: no keys, on purpose */
	const char *dma_dev;        /* --dma DEV */
	const char *port_args;      /* --port DEVARGS */
	const char *eal_args;       /* --eal ARGS */
	double exit_after;          /* --exit-after (tests; 0: until a signal) */
	uint32_t drop_every;        /* --drop-every (tests) */
	uint32_t crash_after;       /* --crash-after (tests) */
	uint32_t changes;           /* --changes N: change lists kept (0: none) */
} shim_config;

/* ---- state ---- */

/* A version being staged: a patch base -> target, or a keyframe stream
 * of target. */
typedef struct slot {
	int used;
	uint32_t base, target, have;
	uint32_t count;         /* frames of the patch; 0: not known yet (streamed
				 * frames, FORMAT.md 2.5) */
	uint32_t hi;            /* highest index staged, plus one */
	uint32_t cap;           /* entries of frames[] and flen[] */
	int key;                /* a keyframe stream (resync), not a patch */
	uint8_t **frames;
	uint32_t *flen;
	struct prep **preps;    /* frames decoded and verified while staging */
	uint32_t prepped;
	uint32_t refused;       /* frames preparation refused (and dropped) */
	int in_shadow;          /* a keyframe stream: its prepared frames are
				 * written into s->shadow, not the buffer */
	uint64_t bytes;         /* of the frames */
	uint64_t prep_bytes;
	uint64_t idx_bytes;     /* of frames[], flen[] and preps[] */
} slot;

/* What a slot's index arrays take per frame (frames[], flen[], preps[]):
 * counted against --max-stage, so a hostile frame_count buys nothing. */
#define IDX_BYTES (sizeof(uint8_t *) + sizeof(uint32_t) + sizeof(struct prep *))

/* A delta frame decoded and verified against the buffer's version while
 * it was staged (bfp_decode_verify): committing it is writing n values.
 * For a frame of a keyframe stream, n is 0: its values were written into
 * a buffer that holds no version, or into s->shadow (stage.c,
 * place_key), and committing it is checking its range's hash (after
 * copying it from the shadow). */
typedef struct prep {
	frame_changes fc;       /* pos and val point into v[] */
	uint32_t crc;           /* of its change list entry (--changes; has_crc) */
	int has_crc;
	uint32_t v[];           /* n offsets, then n uint16_t values */
} prep;

/* A keyframe stream too big to stage, written into the buffer as its
 * frames come (the buffer holds no version meanwhile). */
typedef struct shim_inplace {
	uint32_t target, count, have;
	uint8_t *done;          /* per frame index */
	uint64_t *begin;        /* its range, to check the frames tile */
	uint32_t *len;
	uint64_t bytes, verified;
	double t0;
} shim_inplace;

struct shim_dma;
struct shim_rxbufs; /* net.c */
struct shim_port;

typedef struct shim {
	shim_config cf;
	/* ---- what shim_open() takes (setup.c) ---- */
	int lock_fd;            /* BUFFER.lock, held while the shim runs */
	wbuf w;
	wbuf_undo undo;         /* PATH.undo: values a frame in writing overwrote */
	/* the DMA commits' journal, BUFFER.dmalog (map NULL: none); a build
	 * without DPDK still rolls back one a --dma run left */
	wbuf_dlog dlog;
	events ev;
	rp_auth auth;           /* --key: frames and HEARTBEATs must verify */
	int sock;
	struct sockaddr_in upstream;
	struct shim_rxbufs *rxb; /* recvmmsg()'s buffers */
	int eal_up;             /* the EAL is initialised (--dma or --port) */
	struct shim_dma *dma;   /* --dma: commits move ranges by dmadev */
	struct shim_port *port; /* --port: frames from a DPDK port */
	bfp_decoder *dma_dec;
	/* how JOINs and NACKs leave (net.c: to --upstream on the socket) */
	void (*ctl_send)(struct shim *s, const rp_ctl *c);

	/* ---- staging and commit (stage.c) ---- */
	/* the main thread's decoder (preparing staged frames, keyframes
	 * written in place: one at a time) and zstd workspace (those, and the
	 * DMA commit), made when first needed */
	bfp_decoder *dec;
	void *zws;
	int no_prep;            /* --no-prepare, or no memory for the decoder */
	slot slots[SLOTS];
	uint64_t staged_bytes;  /* frames and prepared changes */
	uint64_t prep_bytes;    /* prepared changes and the shadow, at most half
				 * of max_stage */
	/* the values of the keyframe stream that commits next, decoded as
	 * its frames come while the buffer holds a version readers use
	 * (n_params words, made when first needed, within the prepared
	 * half of the budget); NULL: none */
	uint16_t *shadow;
	uint64_t shadow_bytes;
	double last_frame, next_nack;
	uint32_t nack_backoff_ms;
	uint32_t nack_rounds;   /* since the last frame of the wanted version */
	int want_key;           /* JOIN with RP_VERSION_NONE */
	int rx_behind;          /* the last receive filled its batch: more frames
				 * wait in the socket, and keyframes are staged
				 * without being decoded until it drains */
	shim_inplace ip;
	shim_changes chg;       /* --changes: the commits' change lists */
	uint8_t told_encoding[32]; /* bit e: "encoding e unknown" was logged */

	/* ---- the network side and the run loop (net.c, main.c) ---- */
	uint32_t latest;        /* newest version upstream has (HEARTBEAT) */
	double heard;           /* when the last HEARTBEAT (from --upstream) or frame of
				 * this model came */
	double start, next_join, next_quiet_said;
	double behind_since;    /* upstream had a version none of whose frames
				 * came since then; 0: not behind */
	double sock_drops_said; /* when the kernel's drops were last said */
	int port_rc;            /* on_frame's result for frames from --port */
	double port_next_watch; /* when to look at the port's link again */
	double port_next_sock;  /* when to read the socket again while the port delivers */
	double port_down_since; /* the link went down then; 0: up */
	unsigned port_failed;   /* restarts in a row that found no server */

	/* ---- counters ---- */
	uint64_t rx, rx_bytes, dup, old, ahead, bad, other_model, over_budget, nacks, commits;
	uint64_t in_resync;     /* patch frames while only a keyframe stream helps */
	uint64_t foreign_hb;    /* HEARTBEATs not from --upstream, ignored */
	uint64_t other_run;     /* frames of a publisher run other than the one
				 * followed (auth.run), refused */
	uint64_t run_changes;   /* new runs announced by --upstream */
	uint64_t recount;       /* staged patches dropped for another frame count */
	uint64_t evicted;       /* later versions dropped for the next one's frames */
	uint32_t sock_drops;    /* datagrams the kernel dropped, socket full (SO_RXQ_OVFL) */
	uint64_t resyncs, key_commits, dropped_test, verified_bytes, auth_fail;
	uint64_t prepared, prep_fail, prep_dropped;
	double commit_ms_total, commit_ms_max;
} shim;

static inline uint32_t shim_state(const shim *s)
{
	return atomic_load(&s->w.h->state);
}

static inline uint32_t shim_version(const shim *s)
{
	return atomic_load(&s->w.h->version);
}

/* ---- options.c ---- */

extern const char shim_usage_text[];

/* The shim's options (argv[0] a program name) into cf, defaults for the
 * rest: 0 to run; 1 after --help (exit 0); -1 after a message and the
 * usage on stderr (exit 2). */
int shim_parse_args(int argc, char **argv, shim_config *cf);

/* ---- setup.c ---- */

/* Take everything the shim runs on, in this order: keys, the buffer's
 * lock, the buffer (created by --init), its crash journals (rolled back),
 * the event log, the socket, the EAL, --dma and --port, the receive
 * buffers. 0, or -1 after a message; shim_close() then frees what was
 * taken. cf is copied. */
int shim_open(shim *s, const shim_config *cf);
/* Free exactly what shim_open() took, also after it failed. */
void shim_close(shim *s);

/* ---- main.c ---- */

/* Say how the shim starts, then receive, stage, NACK and commit until a
 * signal, --exit-after or an error (out of memory); then print the
 * counters. 0, or -1. */
int shim_run(shim *s);

/* ---- net.c: control messages, datagrams, the DPDK port ---- */

/* recvmmsg()'s buffers into s->rxb (free() frees them); 0, or -1. */
int net_rxbufs_alloc(shim *s);
/* To --upstream on the socket, signed with --key: s->ctl_send. */
void net_ctl_send(shim *s, const rp_ctl *c);
/* One datagram; from_upstream: it came from --upstream's address and
 * port. Control messages are taken here, frames go to stage_frame().
 * 0, or -1 when out of memory. */
int net_datagram(shim *s, const uint8_t *p, size_t len, int from_upstream);
/* Wait up to wait_ms for the socket; what one recvmmsg() then brings
 * into net_datagram(), and the commits those frames complete. 0, or -1. */
int net_receive(shim *s, int wait_ms);
/* --upstream has been silent for 10 s: say so, now and then. */
void net_say_quiet(shim *s, double t);
/* --port: watch its link (t: now_s()), and poll one burst into
 * net_datagram(); the frames delivered, and *rc their result. */
void net_port_watch(shim *s, double t);
unsigned net_port_poll(shim *s, int *rc);

/* ---- stage.c: staging and commit ----
 * Versions move only forward and only whole; the buffer's state (wbuf.h)
 * and the slots decide what a frame is of use for, what commits next,
 * what a NACK asks for and when patches give way to a keyframe stream.
 * Nothing here does I/O but the buffer's: messages leave by s->ctl_send. */

/* The staging state's defaults from s->cf (the rest starts zeroed). */
void stage_init(shim *s);
/* Free the staged versions, a stream written in place, the decoder. */
void stage_fini(shim *s);
/* Drop everything staged (a new publisher run: none of it is of the run
 * followed now); the buffer and its version are kept. */
void stage_drop_all(shim *s);
/* A frame (authenticated, trailer stripped): checked, counted, staged
 * or written in place (a keyframe stream larger than half of
 * --max-stage). 0, or -1 when out of memory. */
int stage_frame(shim *s, const uint8_t *p, size_t len);
/* Commit what is complete, in order, as far as the safe point allows.
 * 0, or -1 after a message. */
int stage_try_commit(shim *s);
/* Prepare frames of the patch that commits next for at most budget_s;
 * 1 if some are left to prepare. */
int stage_prepare_some(shim *s, double budget_s);
/* Send the NACK for what commits next (or, when that only waits for the
 * safe point, for the first incomplete version after it); after
 * NACK_GIVE_UP unanswered rounds, ask for a keyframe stream. */
void stage_nack(shim *s);
/* At time t (now_s()), when the NACK timer is due and something is
 * missing (frames of a version being staged, a version upstream has none
 * of whose frames came for 0.3 s, a commit to finish): stage_nack(), and
 * the timer backs off, doubling up to 1 s (or --nack-ms, if longer). */
void stage_nack_due(shim *s, double t);
/* Send a JOIN with the version the shim holds (stage_join_version). */
void stage_join(shim *s);
uint32_t stage_join_version(shim *s);
/* Bytes the staged versions and prepared changes may take: --max-stage,
 * or less when that is more than this model's versions can ever take. */
uint64_t stage_budget(const shim *s);
/* The first version a frame must lead to, to be of use. */
uint32_t stage_floor_version(const shim *s);
/* The zstd workspace, made when first needed; 0: no memory. */
int stage_zws(shim *s);

#endif
