/*
 * publisher.h: `bfpatch publish`'s internal interface: its configuration,
 * its state, and what each of its files gives the others. One thread
 * owns the state (the encode's workers only call back into pub_encoded).
 */
#ifndef BFP_PUBLISHER_H
#define BFP_PUBLISHER_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
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
enum { SEND_BATCH = 32 };
/* Bytes a frame takes on the wire: its trailer and Ethernet, IPv4 and
 * UDP headers too. */
#define WIRE(len) ((len) + RP_AUTH_LEN + 42)

/* Set by the signal handlers (main.c), read by the loops that wait. */
extern volatile sig_atomic_t pub_quit, pub_dump_stats;

/* What the publisher says that is neither a warning nor an error (its
 * progress, its summaries) goes through pub_info: to stderr unless -q.
 * main sets pub_verbosity from the options once, before anything runs. */
extern int pub_verbosity;
void pub_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

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
	uint32_t key_flags;       /* --key-encoding: BFP_ENC_F_* of keyframe streams */
	uint32_t wait_subs;       /* --wait-subscribers */
	uint32_t steps;           /* --steps; UINT32_MAX: none given */
	uint32_t linger_s;        /* --linger */
	/* --key files in order (the first signs); one past the most a
	 * process takes is kept, for its load to refuse it */
	const char *key_paths[RP_AUTH_MAX_KEYS + 1];
	unsigned n_keys;
	int insecure;             /* --insecure: no keys, on purpose */
	const char *peer_keys;    /* --peer-keys: a key per subscriber, or NULL */
	const char *events_path;  /* --events, or NULL */
	const char *name;         /* --name */
	/* sharded trainers (lead.c, rank.c; docs/PROTOCOL.md 5): a lead
	 * merges the frames of --ranks N ranks into one patch a version */
	uint32_t n_ranks;         /* --ranks N: this is the lead; 0: not */
	uint32_t rank_ip;         /* --rank-listen ADDR:PORT (TCP), host order */
	uint16_t rank_port;
	const char *init;         /* --init CKPT: the lead's first version */
	uint32_t init_version;    /* --init-version */
	/* a rank: --lead HOST:PORT, --rank I, --owned FILE */
	const char *lead;
	uint32_t lead_ip;
	uint16_t lead_port;
	uint32_t rank;
	int rank_given;
	const char *owned;
	int help;                 /* --help: the usage is printed, nothing to run */
	int verbosity;            /* 0 -q, 1, 2 -v */
} publish_config;

extern const char publish_usage[];
/* The whole usage (publish_usage, then the sharded trainers' options). */
void pub_print_usage(FILE *f);

/* The options of `bfpatch publish` (argv[0] "publish") into cf, defaults
 * for the rest. 0, or the exit status of a usage error (2) after its
 * message; with --help the usage goes to stdout and cf->help is set. */
int publish_parse_args(int argc, char **argv, publish_config *cf);

/* ---- state ---- */

typedef struct pub_sub {
	struct sockaddr_in data, ctl;
	double last_seen, last_catchup;
	double joined;          /* when it JOINed (not left since) */
	uint32_t version;       /* from its JOINs */
	double version_since;   /* when it first reported that version */
	int catchup;            /* behind: needs patches or a keyframe */
	uint32_t said_ahead;    /* the version it was said to be ahead at */
	rp_bucket nack;         /* frames its NACKs may still ask for */
	rp_bucket link;         /* its JOIN's rate_kbps (rate 0: none given) */
	uint32_t rate_kbps;
	/* the key its JOIN verified under: a peer key (--peer-keys) signs
	 * everything sent to it; NULL: keys[0] (--key), or none */
	const rp_key *key;
	/* a catch-up being sent, a slice per turn of the main loop (so that
	 * new versions, NACKs and HEARTBEATs go on meanwhile): the keyframe
	 * stream of cu_target, or the held patch cu_base -> cu_target and
	 * then the ones after it up to cu_end; frames from cu_next */
	int cu_active, cu_key;
	int cu_said;            /* its keyframe stream was said (made while sent) */
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

/* The version history (history.c): the last --keep patches, each in a
 * slot with its base and target version, and one keyframe stream. */
typedef struct pub_history {
	patch p[MAX_KEEP];
	uint32_t base[MAX_KEEP], ver[MAX_KEEP];
	unsigned keep, n;       /* --keep; slots in use */
	const char *dir;        /* --history DIR, or NULL */
	const char *ckpt;       /* --dir: the checkpoints, or NULL (--buffer) */
	patch key;              /* keyframe stream of key_ver, made on demand */
	uint32_t key_ver;
	/* while key_ver's stream is encoded (key_streaming): its frames so
	 * far, frame_count 0, as sent to catch-ups and answering NACKs */
	patch key_part;
	int key_streaming;
	uint64_t errors;        /* patches --history could not keep */
} pub_history;

typedef struct publisher {
	const publish_config *cf;
	int sock;               /* the control port; frames leave from it */
	rp_bucket bucket;       /* --rate */
	pub_sub subs[MAX_SUBS];
	unsigned n_subs;
	uint32_t nack_rate;     /* --nack-rate: frames/s per subscriber; 0: no limit */
	uint64_t nack_limited;  /* NACKed frames over a subscriber's budget */
	pub_history hist;       /* patches held, and the keyframe stream */
	/* frames of the version being encoded, as streamed so far (frame_count
	 * 0): NACKs that come meanwhile are answered from them */
	patch streamed;
	uint32_t streamed_ver;
	int streaming;
	double published_at;    /* when the current version went out */
	events ev;
	rp_auth auth;           /* --key: frames and heartbeats signed, JOIN/NACK verified */
	uint64_t sent_frames, sent_bytes, nacks, resent, keyframes, auth_fail;
	uint64_t key_streamed;  /* keyframe frames sent while their stream was encoded */
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
	int send_cut;           /* a signal cut a paced send short (pub_send_frames)
				 * since the version being sent began */
	uint64_t ctl_bad, other_model; /* control messages malformed, of another model */
	uint64_t other_run; /* NACKs, HEARTBEATs, LEAVEs bound to another run, refused */
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
	struct pub_lead *lead;  /* --ranks: the ranks and their versions */
	/* every version encoded here (not a lead's): count and time */
	uint64_t enc_versions;
	double enc_ms_sum;
} publisher;

/* ---- history.c: the patches held, on disk too ---- */

/* An empty history of keep (1..MAX_KEEP) patches, kept in dir too
 * (NULL: not), checked against and made from the checkpoints in ckpt
 * (NULL: a --buffer, none). */
void history_init(pub_history *h, unsigned keep, const char *dir, const char *ckpt);
/* Free every patch held (the files stay). */
void history_free(pub_history *h);
/* Whether p is a keyframe stream (its first frame is in no patch). */
int history_is_key(const patch *p);
/* The patch held to version target, or NULL (history_find); the keyframe
 * stream of target: the one made for catch-ups or, with --keyframes, a
 * slot's (history_key). */
const patch *history_find(const pub_history *h, uint32_t target);
const patch *history_key(const pub_history *h, uint32_t target);
/* The held patch base -> target; the one from base; a held patch's
 * target version. */
const patch *history_pair(const pub_history *h, uint32_t base, uint32_t target);
/* The patch (or keyframe stream) s's catch-up is sending now, or NULL. */
const patch *history_catchup(const pub_history *h, const pub_sub *s);
const patch *history_from(const pub_history *h, uint32_t base);
uint32_t history_target(const pub_history *h, const patch *p);
/* Whether held patches lead from version from to ver (a subscriber at
 * from catches up with them); *first: the target of the first. */
int history_chain(const pub_history *h, uint32_t from, uint32_t ver, uint32_t *first);
/* Room for the next patch: a free slot, or the one holding the oldest
 * target version, whose patch is freed now (its versions stay until
 * history_hold, its file until history_put). The slot, and what it held
 * (0, 0: nothing). */
unsigned history_evict(pub_history *h, uint32_t *old_base, uint32_t *old_ver);
/* The patch now in h->p[slot] goes from base to ver. */
void history_hold(pub_history *h, unsigned slot, uint32_t base, uint32_t ver);
/* Keep slot's patch in DIR/vBASE-vVER.bfp (written atomically) in place
 * of old_base -> old_ver's file. A failure (disk full, read-only
 * directory) is reported and counted in h->errors; the patch stays held. */
void history_put(pub_history *h, unsigned slot, uint32_t old_base, uint32_t old_ver);
/* The keyframe stream of cur as version ver into out (patch_encode's
 * result); the one held for catch-ups replaced by it (history_key_make:
 * on failure none is held; po->stream may send its frames meanwhile).
 * history_key_begin: the held one goes, and until history_key_make ends
 * history_key(ver) gives key_part, the frames streamed so far. */
int history_keyframes(const model *cur, uint32_t ver, const patch_opts *po, patch *out,
		      char *err, size_t errlen);
void history_key_begin(pub_history *h, uint32_t ver);
int history_key_make(pub_history *h, const model *cur, uint32_t ver, const patch_opts *po,
		     char *err, size_t errlen);
/* Take the newest patches in DIR back (a restarted publisher answers
 * NACKs and catches subscribers up with them): those of model_id that end
 * at or before version ver (cur) and at what the checkpoints hold now,
 * each read and checked frame by frame. Temporaries a killed publisher
 * left behind (NAME.tmp.XXXXXX) are removed; with resume, patch files not
 * taken back too. */
void history_load(pub_history *h, uint64_t model_id, uint32_t ver, const model *cur, int resume);
/* The patch b -> t from checkpoints mb and mt into the next slot, kept
 * on disk too; 0, or -1 after a message. */
int history_add(pub_history *h, const model *mb, const model *mt, uint32_t b, uint32_t t,
		const patch_opts *po);
/* A restart (--resume) that holds no patch to its version ver: make the
 * patches out of the checkpoints there, from the newest version its kept
 * ones reach (a publisher that was down for several steps), through the
 * steps in the directory (a trainer may keep every k-th), the last --keep
 * of them; holding none, the one from the step before ver. So subscribers
 * that were behind catch up with patches rather than a keyframe stream of
 * the whole model. */
void history_make(pub_history *h, const model *cur, uint32_t ver, const patch_opts *po);

/* ---- nack.c: answering NACKs ---- */

/* A NACK answer as nack_plan() decides it: ranges of frames of p. */
typedef struct nack_range {
	uint32_t first, count;
} nack_range;
typedef struct nack_reply {
	const patch *p;         /* answered from; NULL: nothing held */
	unsigned n;             /* ranges */
	nack_range r[RP_NACK_MAX];
	uint64_t frames, bytes; /* in the ranges */
	uint64_t limited;       /* frames asked for over the subscriber's budget */
} nack_reply;

/* A new subscriber's NACK budget at time t: a full answer at once
 * (RP_NACK_ANSWER_MAX frames), then nack_rate frames a second (0: no
 * limit). */
void nack_budget_init(rp_bucket *b, uint32_t nack_rate, double t);
/* The frames NACK c asks of: the held patch to its version, or with
 * RP_NACK_KEY the keyframe stream of it; else, while that version is
 * being encoded, the frames streamed so far. NULL if none is held or c
 * is of another model. */
const patch *nack_source(const publisher *P, const rp_ctl *c);
/* Frames one NACK of s gets at most: RP_NACK_ANSWER_MAX, or about 100 ms
 * of its link where its JOIN's rate is below --rate (at least 1). */
uint64_t nack_most(const publisher *P, const pub_sub *s);
/* What answers NACK c from s at time t, its ranges in its order, each
 * cut to the frames held (of the patch s's catch-up is sending, those
 * sent already), to nack_most() in all and to what s's budget holds,
 * which it spends. Sends nothing. */
void nack_plan(const publisher *P, pub_sub *s, const rp_ctl *c, double t, nack_reply *a);
/* nack_plan(), then the frames sent to s and counted (an event too);
 * whether anything was sent. */
int nack_answer(publisher *P, pub_sub *s, const rp_ctl *c, double t);

/* ---- source.c: where versions come from ---- */

/* The first version (cf's --dir or --buffer) into *cur and *ver: the
 * buffer's, or the first checkpoint in --dir (old ones may have been
 * pruned), with --resume the latest, once it is whole and loads (this
 * waits). 0, or the exit status after a message; source_close() frees
 * what it took either way. */
int source_open(source *S, const publish_config *cf, model *cur, uint32_t *ver);
/* The version after ver (cur), if there is one yet: 1 with it in *nw and
 * *nver, 0 if not yet, -1 on error (err). With --dir that is step ver+1;
 * if it is missing and a later step is there (a trainer that keeps every
 * k-th step, or one pruned before it was published), or it failed to
 * load for a minute while a later one is there, the lowest later step: a
 * patch may skip versions. */
int source_next(source *S, const model *cur, uint32_t ver, model *nw, uint32_t *nver,
		char *err, size_t errlen);
/* Free a version (what model_free would, less what a buffer's versions
 * share with its layout); a retired one's memory becomes the spare the
 * next is read into. */
void source_free_model(source *S, model *m);
void source_retire_model(source *S, model *m);
/* Free the version cur and everything source_open took. */
void source_close(source *S, model *cur);

/* ---- send.c: frames and control messages out, paced ---- */

/* "ADDR:PORT" of a, into out (n bytes). */
void pub_peer_str(const struct sockaddr_in *a, char *out, size_t n);
/* The token bucket's burst at rate_bps for frames of frame_size, and
 * the catch-up frames a turn of the main loop sends (about 10 ms). */
uint64_t pub_burst(uint64_t rate_bps, uint32_t frame_size);
size_t pub_slice(uint64_t rate_bps, uint32_t frame_size);
/* s's link as its JOIN tells it (rate_kbps; 0: none), at time t. */
void pub_sub_link(publisher *P, pub_sub *s, uint32_t rate_kbps, double t);
/* Send n frames to the n_to subscribers in to[], paced; a signal
 * (pub_quit) cuts it short. */
void pub_send_frames(publisher *P, uint8_t *const *fr, const size_t *lens, size_t n,
		     pub_sub *const *to, unsigned n_to);
/* Send every frame of p to every subscriber, paced. */
void pub_send_all(publisher *P, const patch *p);
/* Send frames [first, first + count) of p to s alone, paced. */
void pub_send_one(publisher *P, pub_sub *s, const patch *p, size_t first, size_t count);
/* Tell every subscriber the newest version (PROTOCOL.md 2.3). */
void pub_heartbeat(publisher *P, uint64_t model_id, uint32_t ver);
/* The same to one subscriber (the answer to its JOIN). */
void pub_heartbeat_one(publisher *P, const pub_sub *s, uint64_t model_id, uint32_t ver);

/* ---- subs.c: subscribers, control messages, catch-ups ---- */

/* Every control message waiting on the socket: JOINs, LEAVEs, NACKs
 * (answered, nack.c); then subscribers silent for SUB_TIMEOUT_S go. */
void pub_control(publisher *P);
/* Start a catch-up for each subscriber behind version ver (cur): the
 * patches held from its version, or else a keyframe stream; one made
 * here is encoded once for all that need it and sent to them while it
 * is encoded (catch-up slices, control messages and HEARTBEATs go on;
 * a new version waits for the encode). */
void pub_catchup(publisher *P, const model *cur, uint32_t ver, const patch_opts *po);
/* Whether s, behind version ver (sent at published), waits at instant t
 * before its catch-up starts (pub_catchup's rule). */
int pub_catchup_waits(const pub_sub *s, uint32_t ver, double published, double t);
/* Send one slice of every catch-up in progress; whether any goes on. */
int pub_catchup_send(publisher *P);

/* ---- ranklink.c: the TCP link from a rank to its lead (PROTOCOL.md 5) ---- */

#define RL_MAGIC 0x52504642u /* "BFPR" in file order */
#define RL_HDR 16u
#define RL_BODY_MAX (BFP_FRAME_SIZE_MAX + 256u)
#define RL_MSG_MAX (RL_HDR + RL_BODY_MAX + RP_AUTH_LEN)
#define RL_F_SIGNED 1u
#define RL_DOWN (1ull << 63) /* sequence numbers of lead -> rank messages */
enum { RL_HELLO = 1, RL_WELCOME = 2, RL_FRAME = 3, RL_END = 4, RL_RESULT = 5 };
#define RL_HELLO_LEN 32u
#define RL_WELCOME_LEN 40u
#define RL_END_LEN 32u

/* One end of a rank link: its socket, the key and session its messages
 * are sealed under, the sequence numbers, and what was read so far. */
typedef struct rl_conn {
	int fd;                 /* -1: none */
	const rp_key *key;      /* NULL: unsigned (--insecure) */
	uint64_t session;       /* the lead's id for this connection */
	uint64_t seq_out, seq_in;
	size_t in_len;
	uint8_t in[RL_MSG_MAX];
} rl_conn;

/* A message read: its type, body and the body's length. */
typedef struct rl_msg {
	unsigned type;
	const uint8_t *body;
	size_t len;
	size_t total;           /* bytes it took of c->in */
} rl_msg;

/* Build a message of type with body[0, len) into out (RL_MSG_MAX bytes),
 * sealed under c->key with the session and the next sequence number
 * (HELLO: run 0 and the current time, as a control message); its length. */
size_t rl_build(rl_conn *c, unsigned type, const void *body, size_t len, uint8_t *out);
/* rl_build, then all of it written to c->fd (blocking: 0, or -1 and errno;
 * nonblocking: MSG_DONTWAIT, -1 when the socket would block). */
int rl_send(rl_conn *c, unsigned type, const void *body, size_t len, int nonblocking);
/* Read what c->fd has (nonblocking): 1 if something came, 0 if nothing,
 * -1 when the peer closed or the connection failed. */
int rl_fill(rl_conn *c);
/* The first whole message in c->in: 1 and *m (checked: magic, version,
 * lengths; sealed under c->key, of its session, at the next sequence
 * number, unless hello: that is verified by the caller), 0 if none is
 * whole yet, -1 on a message refused (why says why). */
int rl_next(rl_conn *c, rl_msg *m, int hello, const char **why);
/* Take message m out of c->in. */
void rl_consume(rl_conn *c, const rl_msg *m);
/* Little-endian helpers. */
void rl_put32(uint8_t *p, uint32_t v);
void rl_put64(uint8_t *p, uint64_t v);
uint32_t rl_get32(const uint8_t *p);
uint64_t rl_get64(const uint8_t *p);

/* ---- lead.c: a lead publisher merges its ranks' frames ---- */

/* The lead's side, with --ranks: the model from --init, the listening
 * socket. 0, or the exit status after a message. */
int lead_open(publisher *P);
/* Accept ranks, read their frames; when every rank's frames of the next
 * version are there, check, verify, merge and publish it. Waits up to
 * wait_ms for something to do. 0, or the exit status of an error. */
int lead_step(publisher *P, int wait_ms);
/* The ranks' counters, on stderr (exit, SIGUSR1) and in the events. */
void lead_print_stats(publisher *P);
void lead_close(publisher *P);

/* ---- rank.c: a rank publisher encodes the tensors it owns ---- */

/* A rank's whole run (--lead): connect, encode each version's owned
 * ranges, send them to the lead. The exit status. */
int rank_run(publisher *P);

/* The parameter ranges of the owned tensors (names[0, n)) of m: each
 * tensor's words [ceil(byte_begin / 2), ceil(byte_end / 2)), the
 * ranges a whole-model encode gives it; in order, empty tensors left
 * out. 0, or -1 with a message (a name the layout does not have). */
typedef patch_range prange;
int rank_owned_ranges(const model *m, char *const *names, size_t n, prange **out,
		      size_t *n_out, char *err, size_t errlen);
/* Encode ranges r[0, n) of base -> target (each cut to PATCH_CHUNK) on
 * all cores, as patch_encode would the whole model, into out: frames
 * indexed 0..k-1 of k in range order. 0, or -1 with a message. */
int rank_encode(const model *base, const model *target, const prange *r, size_t n,
		const patch_opts *po, patch *out, char *err, size_t errlen);

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
