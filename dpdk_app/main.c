/*
 * main.c: bfpatch-relay, a DPDK poll-mode relay for patch frames.
 * Worker lcores receive, classify (proto.c) and, with --key, verify data
 * frames' signatures; one core lcore owns the subscriber table, the
 * repair cache and the control plane, so nothing on the fast path takes a
 * lock: workers hand packets over through one MP/SC ring (datapath.c,
 * control.c). Fan-out, pacing and transmit run on the core lcore, or with
 * --fanout-lcores N on it and N - 1 more, each for the subscribers it
 * owns (fanout.c).
 * main() follows the DPDK examples' order, with the options first so that
 * a usage error or a missing --key stops it before EAL: options, EAL,
 * signals, pools, ports, launch, stop, cleanup.
 */
#include <inttypes.h>
#include <signal.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_malloc.h>

#include "relay.h"
#include "version.h"

static void on_signal(int sig)
{
	(void)sig;
	force_quit = 1;
}

static void on_usr1(int sig)
{
	(void)sig;
	dump_stats = 1;
}

/* The relay's usage or version without EAL (which needs hugepages or a
 * device to start, and answers --help with its own options only); 1 if
 * printed. */
static int usage_without_eal(int argc, char **argv)
{
	int dashes = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--version")) {
			bfp_version_print(stdout);
			return 1;
		}
		if (!strcmp(argv[i], "--help") || (dashes && !strcmp(argv[i], "-h"))) {
			fputs(relay_usage_text, stdout);
			fputs("EAL options (before --) are DPDK's: -l CORES, -a PCI, --vdev, "
			      "--file-prefix, -m MB, ... (DPDK's EAL documentation)\n", stdout);
			return 1;
		}
		dashes |= !strcmp(argv[i], "--");
	}
	if (argc > 1 && !dashes)
		RELAY_LOG(WARNING, "warning: no '--' on the command line, so every option went "
			  "to DPDK's EAL (where -m, -n, -c, -s, -d mean other things); the "
			  "relay's own options go after --\n");
	return 0;
}

/* The relay's own options (those after the first --, or none) into cf,
 * before EAL starts: a usage error or a missing --key then refuses to
 * start before hugepages or devices are touched. 0, or -1 after a
 * message. */
static int parse_before_eal(int argc, char **argv, relay_conf *cf)
{
	int at = 1;
	while (at < argc && strcmp(argv[at], "--"))
		at++;
	/* argv[0], then what follows --: getopt names argv[0] in its messages */
	int n = at < argc ? argc - at : 1;
	char **own = calloc((size_t)n + 1, sizeof(*own));
	if (!own) {
		RELAY_LOG(ERR, "out of memory\n");
		return -1;
	}
	own[0] = argv[0];
	for (int i = 1; i < n; i++)
		own[i] = argv[at + i];
	optind = 0; /* glibc: start getopt over */
	int rc = relay_parse_args(n, own, cf) || relay_check_auth(cf) ? -1 : 0;
	free(own);
	return rc;
}

static void print_start(const relay *r)
{
	RELAY_LOG(INFO, "%u port(s), %u worker lcore(s), %u fan-out lcore(s), data port %u, "
		  "control port %u, %u static subscriber(s), repair cache %u frames or %" PRIu64
		  " bytes\n", r->n_ports, r->n_workers, r->n_lanes, r->cf.data_port,
		  r->cf.control_port, r->cf.n_subs, r->cache.cap, r->cf.cache_bytes);
	for (uint16_t p = 0; p < r->n_ports; p++) {
		char ip[INET_ADDRSTRLEN];
		RELAY_LOG(INFO, "port %u %s, checksums in %s\n", p, relay_ip_str(r->cf.ip[p], ip),
			  r->csum_offload[p] ? "the NIC" : "software");
	}
	if (r->cf.upstream_ip) {
		char ip[INET_ADDRSTRLEN];
		RELAY_LOG(INFO, "upstream %s:%u through port %u\n",
			  relay_ip_str(r->cf.upstream_ip, ip), r->cf.upstream_port, r->up_port);
	}
}

/* After EAL, the signals and the options, in DPDK's examples' order:
 * pools, ports, links, subscribers, then the lcores until a signal or
 * --run-time, and the counters. 0, or -1 after a message. */
static int relay_run(relay *r)
{
	if (relay_prepare(r) ||
	    relay_pools_create(r) || relay_ports_start(r))
		return -1;
	relay_links_wait(r);
	if (relay_static_subs(r))
		return -1;
	relay_telemetry_register(r);
	print_start(r);
	char addr[INET_ADDRSTRLEN];
	events_emit(&r->ev, "start", "\"ports\":%u,\"lcores\":%u,\"addr\":\"%s:%u\"", r->n_ports,
		    r->n_workers + r->n_lanes, relay_ip_str(r->cf.ip[r->up_port], addr), r->cf.data_port);
	if (r->n_workers || r->n_lanes > 1)
		rte_eal_mp_remote_launch(relay_worker_main, r, SKIP_MAIN);
	relay_core_main(r);
	rte_eal_mp_wait_lcore();
	relay_print_stats(r, stdout);
	events_emit(&r->ev, "stats", "\"rx\":%" PRIu64 ",\"tx\":%" PRIu64 ",\"cache_hits\":%"
		    PRIu64 ",\"cache_misses\":%" PRIu64 ",\"nacks\":%" PRIu64 ",\"drop_auth\":%"
		    PRIu64, relay_sum_counter(r, C_RX), relay_sum_counter(r, C_TX),
		    relay_sum_counter(r, C_CACHE_HIT), relay_sum_counter(r, C_CACHE_MISS),
		    relay_sum_counter(r, C_NACK_RX), relay_sum_counter(r, C_AUTH_FAIL));
	return 0;
}

int main(int argc, char **argv)
{
	if (usage_without_eal(argc, argv))
		return 0;
	relay_conf cf;
	if (parse_before_eal(argc, argv, &cf))
		return 2;
	int ret = rte_eal_init(argc, argv);
	if (ret < 0) {
		RELAY_LOG(ERR, "EAL initialisation failed: %s\n", rte_strerror(rte_errno));
		return 1;
	}
	rp_catch_signal(SIGINT, on_signal);
	rp_catch_signal(SIGTERM, on_signal);
	rp_catch_signal(SIGHUP, on_signal);
	signal(SIGUSR1, on_usr1);

	relay *r = rte_zmalloc("relay", sizeof(*r), RTE_CACHE_LINE_SIZE);
	if (!r) {
		RELAY_LOG(ERR, "out of memory\n");
		rte_eal_cleanup();
		return 1;
	}
	r->ev.fd = -1;
	r->cf = cf;
	int rc = relay_run(r) ? 1 : 0;
	relay_teardown(r); /* stops and closes the ports */
	rte_eal_cleanup();
	return rc;
}
