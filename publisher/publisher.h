/*
 * publisher.h: `bfpatch publish`'s internal interface: its configuration,
 * its state, and what each of its files gives the others. One thread
 * owns the state (the encode's workers only call back into pub_encoded).
 */
#ifndef BFP_PUBLISHER_H
#define BFP_PUBLISHER_H

#include <signal.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/stat.h>

#include "auth.h"
#include "events.h"
#include "model.h"
#include "patch.h"
#include "proto.h"
#include "wbuf.h"

#define MAX_SUBS 64
#define MAX_KEEP 16
#define SUB_TIMEOUT_S 10.0

/* Set by the signal handlers (main.c), read by the loops that wait. */
extern volatile sig_atomic_t pub_quit, pub_dump_stats;

/* ---- configuration (options.c) ---- */

typedef struct publish_config {
	const char *dir;          /* --dir, or NULL */
	const char *buffer;       /* --buffer, or NULL: exactly one is given */
	uint32_t listen_ip;       /* --listen, host order */
	uint16_t listen_port;
	uint64_t rate_bps;        /* --rate; 0: unlimited */
	uint32_t frame_size;      /* bytes of a frame: --frame-size, less the
				   * trailer with --key (it rides in the
				   * same datagram) */
	uint32_t keep;            /* --keep: 1..MAX_KEEP */
	uint32_t nack_rate;       /* --nack-rate: frames/s; 0: no limit */
	const char *history;      /* --history DIR, or NULL */
	int resume;               /* --resume (with --dir only) */
	int keyframes;            /* --keyframes */
	int self_contained;       /* --self-contained */
	uint32_t wait_subs;       /* --wait-subscribers */
	uint32_t steps;           /* --steps; UINT32_MAX: none given */
	uint32_t linger_s;        /* --linger */
	/* --key files in order (the first signs); one past the most a
	 * process takes is kept, for its load to refuse it */
	const char *key_paths[RP_AUTH_MAX_KEYS + 1];
	unsigned n_keys;
	const char *events_path;  /* --events, or NULL */
	const char *name;         /* --name */
	int help;                 /* --help: the usage is printed, nothing to run */
} publish_config;

extern const char publish_usage[];

/* The options of `bfpatch publish` (argv[0] "publish") into cf, defaults
 * for the rest. 0, or the exit status of a usage error (2) after its
 * message; with --help the usage goes to stdout and cf->help is set. */
int publish_parse_args(int argc, char **argv, publish_config *cf);

/* ---- state ---- */

typedef struct pub_sub {
	struct sockaddr_in data, ctl;
	double last_seen, last_catchup;
	uint32_t version;       /* from its JOINs */
	double version_since;   /* when it first reported that version */
	int catchup;            /* behind: needs patches or a keyframe */
	uint32_t said_ahead;    /* the version it was said to be ahead at */
	rp_bucket nack;         /* frames its NACKs may still ask for */
	rp_bucket link;         /* its JOIN's rate_kbps (rate 0: none given) */
	uint32_t rate_kbps;
	/* a catch-up being sent, a slice per turn of the main loop (so that
	 * new versions, NACKs and HEARTBEATs go on meanwhile): the keyframe
	 * stream of cu_target, or the held patch cu_base -> cu_target and
	 * then the ones after it up to cu_end; frames from cu_next */
	int cu_active, cu_key;
	uint32_t cu_base, cu_target, cu_end;
	size_t cu_next;
} pub_sub;

/* Where the versions come from: checkpoints in --dir, or a --buffer. */
typedef struct source {
	const char *dir;
	wbuf w;                 /* --buffer */
	int is_buffer;
	const char *path;       /* --buffer: its path, and the file mapped */
	dev_t dev;
	ino_t ino;
	model proto;            /* the buffer's layout (no params) */
	/* --dir: steps whose file fails to load (0: a free entry; a step
	 * that never loads is passed over a minute after it first failed,
	 * once a later one is there) */
	struct {
		uint32_t step;
		double first;   /* it first failed */
		double said;    /* it was last said */
	} fail[8];
	int steps_done;         /* --steps N: N is not there, a later one is */
	double last_scan;       /* --dir: for a step after a missing one */
	uint32_t cand;          /* ... the step it chose (0: none yet) */
	uint32_t said_skip;     /* ... the last step said to be gone on with */
	uint32_t max_step;      /* --steps: no step above it is published */
	struct stat other;      /* the file found to be of another model */
	void *spare;            /* a retired version's parameters, for the next */
	size_t spare_cap;       /* (model_load_into): bytes */
} source;

typedef struct publisher {
	const publish_config *cf;
	int sock;               /* the control port; frames leave from it */
	rp_bucket bucket;       /* --rate */
	pub_sub subs[MAX_SUBS];
	unsigned n_subs;
	uint32_t nack_rate;     /* --nack-rate: frames/s per subscriber; 0: no limit */
	uint64_t nack_limited;  /* NACKed frames over a subscriber's budget */
	patch hist[MAX_KEEP];
	uint32_t hist_base[MAX_KEEP], hist_ver[MAX_KEEP];
	unsigned keep, n_hist;
	const char *history;    /* directory, or NULL */
	const char *dir;        /* --dir, or NULL (--buffer) */
	/* frames of the version being encoded, as streamed so far (frame_count
	 * 0): NACKs that come meanwhile are answered from them */
	patch streamed;
	uint32_t streamed_ver;
	int streaming;
	patch key;              /* keyframe stream of key_ver, made on demand */
	uint32_t key_ver;
	double published_at;    /* when the current version went out */
	events ev;
	rp_auth auth;           /* --key: frames and heartbeats signed, JOIN/NACK verified */
	uint64_t sent_frames, sent_bytes, nacks, resent, keyframes, history_errors, auth_fail;
	int told_full;          /* "subscriber table full" was said */
	/* subscribers that left (LEAVE, or silent): a JOIN from the same
	 * control port gets back the time of its last catch-up and its NACK
	 * budget, so leaving and joining again does not buy a keyframe
	 * stream (or a full NACK budget) each time */
	struct pub_left {
		struct sockaddr_in ctl;
		double last_catchup;
		rp_bucket nack;
	} left[MAX_SUBS];
	unsigned left_next;
	size_t cu_slice;        /* catch-up frames per subscriber and turn of
				 * the main loop: about 10 ms at --rate */
	uint32_t frame_size;    /* configured (kept patches may differ) */
	int closing;            /* --linger is over: no new catch-ups */
	uint64_t ctl_bad, other_model; /* control messages malformed, of another model */
	uint64_t model_id;      /* of every version published */
	/* the version published, and where the next one comes from */
	source src;
	model cur;
	uint32_t ver;
	patch_opts po;          /* how versions are encoded */
	/* publisher_run's progress */
	double done_at;         /* --steps reached: since when (0: not yet) */
	double next_heartbeat;
	int gate_open, gate_said; /* --wait-subscribers */
} publisher;

/* ---- main.c ---- */

/* Take everything cf asks for: keys, the history directory, the events
 * file, the socket, the first version (waiting for it to load) and the
 * patches kept; then the signal handlers. 0, or the exit status after a
 * message; either way publisher_close() frees what was taken. */
int publisher_open(publisher *P, const publish_config *cf);
/* Publish each new version until --steps and --linger are done or a
 * signal ends it; the counters then. The exit status. */
int publisher_run(publisher *P);
/* Free what publisher_open took, after a failed open too. */
void publisher_close(publisher *P);

#endif
