/*
 * shim.h: bfpatch-shim's internal interface: its configuration, and
 * what each of its files gives the others (main.c, options.c).
 */
#ifndef BFP_SHIM_H
#define BFP_SHIM_H

#include <stdint.h>

#include "auth.h"

/* ---- configuration ---- */

typedef struct shim_config {
	const char *buffer;         /* --buffer PATH */
	const char *init;           /* --init FILE: create PATH from it first */
	uint32_t init_version;      /* --version: of --init */
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
	const char *dma_dev;        /* --dma DEV */
	const char *port_args;      /* --port DEVARGS */
	const char *eal_args;       /* --eal ARGS */
	double exit_after;          /* --exit-after (tests; 0: until a signal) */
	uint32_t drop_every;        /* --drop-every (tests) */
	uint32_t crash_after;       /* --crash-after (tests) */
} shim_config;

/* ---- options.c ---- */

extern const char shim_usage_text[];

/* The shim's options (argv[0] a program name) into cf, defaults for the
 * rest: 0 to run; 1 after --help (exit 0); -1 after a message and the
 * usage on stderr (exit 2). */
int shim_parse_args(int argc, char **argv, shim_config *cf);

#endif
