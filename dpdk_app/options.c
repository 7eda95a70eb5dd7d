/*
 * options.c: bfpatch-relay's own options (those after EAL's and --) into
 * one relay_conf: a small helper per option, each range-checked, with the
 * usage on error; then the checks that take several options together.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include <rte_mbuf.h>

#include "authmode.h"
#include "relay.h"

const char relay_usage_text[] =
	"usage: bfpatch-relay [EAL options] -- [options]\n"
	"Receives bfpatch frames (UDP/IPv4) and fans them out to subscribers.\n"
	"  -i, --ip PORT:ADDR[/LEN]    IPv4 address of DPDK port PORT, with its\n"
	"                              subnet's prefix length for --gateway\n"
	"                              (repeatable; default 0:198.18.0.1)\n"
	"  -g, --gateway PORT:ADDR     next hop of port PORT towards addresses off\n"
	"                              its subnet (subscribers, --upstream behind a\n"
	"                              router); default: every address is ARPed\n"
	"  -d, --data-port N           UDP port of frames (default 7400)\n"
	"  -c, --control-port N        UDP port of JOIN/LEAVE/NACK/heartbeat (7401)\n"
	"  -s, --subscriber ADDR:PORT[,mac=MAC][,rate=BITS][,eth=N][,key=ID]\n"
	"                              static subscriber (repeatable, up to 64);\n"
	"                              key=: its key among --peer-keys\n"
	"  -u, --upstream ADDR:PORT    relay or publisher to subscribe to (its\n"
	"                              control port); NACK misses go there\n"
	"  -C, --cache-bytes N         repair cache budget (default 64M; K, M, G:\n"
	"                              KiB, MiB, GiB); the cache also holds at\n"
	"                              most half of the --mbufs the RX rings leave\n"
	"  -K, --cache-versions K      target versions kept (default 2)\n"
	"  -r, --rate BITS             default per-subscriber rate, e.g. 1g, 100m;\n"
	"                              0 = unlimited (default)\n"
	"  -q, --queue N               per-subscriber queue, packets (1024)\n"
	"      --max-per-host N        subscriptions one address may hold by JOINs\n"
	"                              (16; 0 = no limit: the table holds 64)\n"
	"      --nack-rate N           frames one subscriber's NACKs may ask for per\n"
	"                              second, after a first 4096 (65536; 0 = no limit)\n"
	"  -t, --heartbeat-timeout S   drop silent subscribers after S s (10)\n"
	"  -k, --check-crc             verify each frame's CRC32C before relaying\n"
	"  -m, --mbuf-size N           mbuf data room (default 10240: 9000 B frames)\n"
	"  -n, --mbufs N               mbufs in the RX pool of each NUMA socket\n"
	"                              with ports (default 8191, more with several\n"
	"                              ports or RX queues), each of --mbuf-size;\n"
	"                              the RX rings take 1024 a queue and port,\n"
	"                              cached frames keep theirs\n"
	"  -T, --run-time S            stop after S seconds (tests)\n"
	"  -A, --key FILE              relay only frames, and accept only control\n"
	"                              messages, signed with a key given; sign our own\n"
	"                              (repeatable: the first signs; docs/SECURITY.md;\n"
	"                              make one with bfpatch keygen FILE); required\n"
	"                              unless --insecure\n"
	"      --peer-keys FILE        a key per subscriber (one \"KEY_ID HEX64\" a\n"
	"                              line): each signs its JOINs and NACKs with its\n"
	"                              own, and what goes to it is signed again with\n"
	"                              that key, so no subscriber can forge what\n"
	"                              another takes (docs/SECURITY.md); needs --key\n"
	"      --insecure              run without --key: then this relay accepts\n"
	"                              unauthenticated frames and control messages\n"
	"                              from anyone who can reach its ports and relays\n"
	"                              them to its subscribers\n"
	"  -E, --events FILE           append JSON-lines events (docs/EVENTS.md)\n"
	"  -N, --name NAME             this relay's name in the events (relay)\n"
	"      --fanout-lcores N       make outputs on N lcores: the main one and the\n"
	"                              last N - 1 of EAL's (-l), each for its own\n"
	"                              share of the subscribers, signing their\n"
	"                              outputs per hop; the others receive (1..16;\n"
	"                              default 1: the main lcore makes them all)\n"
	"      --copy-fanout           copy each output's payload instead of\n"
	"                              cloning it (only to measure the difference)\n"
	"  -h, --help\n"
	"      --version               print the version (as bfpatch version) and exit\n";

static int ip_parse(const char *s, uint32_t *out)
{
	struct in_addr a;
	if (inet_pton(AF_INET, s, &a) != 1)
		return -1;
	*out = ntohl(a.s_addr);
	return 0;
}

static int parse_sub(const char *s, sub_conf *sc)
{
	const char *rest;
	memset(sc, 0, sizeof(*sc));
	if (rp_parse_hostport(s, &sc->ip, &sc->port, &rest))
		return -1;
	while (*rest == ',') {
		rest++;
		const char *next = strchr(rest, ',');
		char opt[64];
		size_t n = next ? (size_t)(next - rest) : strlen(rest);
		if (n >= sizeof(opt))
			return -1;
		memcpy(opt, rest, n);
		opt[n] = 0;
		uint64_t v;
		if (!strncmp(opt, "mac=", 4)) {
			if (rp_parse_mac(opt + 4, sc->mac))
				return -1;
			sc->has_mac = 1;
		} else if (!strncmp(opt, "rate=", 5)) {
			if (rp_parse_rate(opt + 5, 400000000000ull, &v))
				return -1;
			sc->rate_bps = v;
		} else if (!strncmp(opt, "eth=", 4)) {
			if (rp_parse_num(opt + 4, 0, MAX_PORTS - 1, &v))
				return -1;
			sc->eth_port = (uint16_t)v;
		} else if (!strncmp(opt, "key=", 4)) {
			if (rp_parse_num(opt + 4, 0, UINT32_MAX, &v))
				return -1;
			sc->key_id = (uint32_t)v;
			sc->has_key = 1;
		} else {
			return -1;
		}
		rest += n;
	}
	return 0;
}

static int bad(const char *opt, const char *val)
{
	RELAY_LOG(ERR, "invalid value '%s' for %s\n", val ? val : "", opt);
	fputs(relay_usage_text, stderr);
	return -1;
}

/* A number in lo..hi for option opt, into *out (32 bits). */
static int opt_u32(const char *opt, const char *arg, uint64_t lo, uint64_t hi, uint32_t *out)
{
	uint64_t v;
	if (rp_parse_num(arg, lo, hi, &v))
		return bad(opt, arg);
	*out = (uint32_t)v;
	return 0;
}

/* --data-port, --control-port */
static int opt_udp_port(const char *opt, const char *arg, uint16_t *out)
{
	uint32_t v = 0;
	if (opt_u32(opt, arg, 1, 65535, &v))
		return -1;
	*out = (uint16_t)v;
	return 0;
}

/* --ip PORT:ADDR[/LEN] (gateway 0) and --gateway PORT:ADDR (gateway 1) */
static int opt_address(relay_conf *cf, int gateway, const char *arg)
{
	/* cut up a copy: arg is the process's command line, which ps shows */
	char whole[64], buf[64];
	snprintf(whole, sizeof(whole), "%s", arg);
	if (snprintf(buf, sizeof(buf), "%s", arg) >= (int)sizeof(buf))
		return bad(gateway ? "--gateway" : "--ip", whole);
	char *colon = strchr(buf, ':'), *slash = strchr(buf, '/');
	uint64_t port, len = 0;
	uint32_t ip;
	if (slash && (gateway || rp_parse_num(slash + 1, 1, 32, &len)))
		return bad(gateway ? "--gateway" : "--ip (prefix length 1..32)", whole);
	if (slash)
		*slash = 0;
	if (!colon || rp_parse_num((*colon = 0, buf), 0, MAX_PORTS - 1, &port) ||
	    ip_parse(colon + 1, &ip) || !ip)
		return bad(gateway ? "--gateway (PORT:A.B.C.D)" : "--ip (PORT:A.B.C.D[/LEN])", whole);
	if (gateway) {
		cf->gateway[port] = ip;
		return 0;
	}
	cf->ip[port] = ip;
	cf->prefix[port] = (uint8_t)len;
	if (port + 1 > cf->n_ip)
		cf->n_ip = (unsigned)port + 1;
	return 0;
}

/* --subscriber ADDR:PORT[,mac=MAC][,rate=BITS][,eth=N], once per address
 * and port */
static int opt_subscriber(relay_conf *cf, const char *arg)
{
	sub_conf *sc = &cf->subs[cf->n_subs];
	if (cf->n_subs == MAX_SUBS || parse_sub(arg, sc) || !sc->ip || sc->ip == 0xFFFFFFFFu)
		return bad("--subscriber (A.B.C.D:PORT[,mac=MAC][,rate=BITS][,eth=N][,key=ID], "
			   "a host's address; rate at least 1k)",
			   arg);
	for (unsigned i = 0; i < cf->n_subs; i++)
		if (cf->subs[i].ip == sc->ip && cf->subs[i].port == sc->port) {
			RELAY_LOG(ERR, "--subscriber %s is given twice (one --subscriber an "
				  "address and port, with all its options)\n", arg);
			return -1;
		}
	cf->n_subs++;
	return 0;
}

/* --upstream ADDR:PORT */
static int opt_upstream(relay_conf *cf, const char *arg)
{
	if (rp_parse_hostport(arg, &cf->upstream_ip, &cf->upstream_port, NULL) ||
	    !cf->upstream_ip || cf->upstream_ip == 0xFFFFFFFFu)
		return bad("--upstream (A.B.C.D:PORT, a host's address)", arg);
	return 0;
}

/* --cache-bytes N[K|M|G] */
static int opt_cache_bytes(relay_conf *cf, const char *arg)
{
	if (rp_parse_bytes(arg, 65536, 1ull << 40, &cf->cache_bytes))
		return bad("--cache-bytes", arg);
	cf->cache_bytes_given = 1;
	return 0;
}

/* --rate BITS */
static int opt_rate(relay_conf *cf, const char *arg)
{
	if (rp_parse_rate(arg, 400000000000ull, &cf->default_rate_bps))
		return bad("--rate (bit/s, at least 1k, e.g. 100m; 0: unlimited)", arg);
	return 0;
}

/* --queue N: a ring size, so a power of two */
static int opt_queue(relay_conf *cf, const char *arg)
{
	uint64_t v;
	if (rp_parse_num(arg, 16, 65536, &v) || (v & (v - 1)))
		return bad("--queue (a power of two, 16..65536)", arg);
	cf->queue_len = (uint32_t)v;
	return 0;
}

/* --key FILE, repeatable */
static int opt_key(relay_conf *cf, const char *arg)
{
	if (cf->n_keys == RP_AUTH_MAX_KEYS)
		return bad("--key (at most 4)", arg);
	cf->key_paths[cf->n_keys++] = arg;
	return 0;
}

/* --mbufs N */
static int opt_mbufs(relay_conf *cf, const char *arg)
{
	if (opt_u32("--mbufs", arg, 1023, 1u << 22, &cf->n_mbufs))
		return -1;
	cf->n_mbufs_given = 1;
	return 0;
}

/* --run-time S, fractions allowed */
static int opt_run_time(relay_conf *cf, const char *arg)
{
	char *end;
	double t = strtod(arg, &end);
	if (*end || !(t > 0) || t > 1e6)
		return bad("--run-time", arg);
	cf->run_time_s = t;
	return 0;
}

static void conf_defaults(relay_conf *cf)
{
	memset(cf, 0, sizeof(*cf));
	cf->data_port = 7400;
	cf->control_port = 7401;
	cf->cache_bytes = 64u << 20;
	cf->cache_versions = 2;
	cf->queue_len = 1024;
	cf->nack_rate = 65536;
	cf->max_per_host = 16;
	cf->heartbeat_timeout_s = 10;
	cf->mbuf_size = 10240;
	cf->n_mbufs = 8191;
	cf->fanout_lanes = 1;
}

/* One option of getopt_long's (c, with arg); 0 or -1. */
static int parse_one(relay_conf *cf, int c, const char *arg)
{
	switch (c) {
	case 'i': return opt_address(cf, 0, arg);
	case 'g': return opt_address(cf, 1, arg);
	case 'd': return opt_udp_port("--data-port", arg, &cf->data_port);
	case 'c': return opt_udp_port("--control-port", arg, &cf->control_port);
	case 's': return opt_subscriber(cf, arg);
	case 'u': return opt_upstream(cf, arg);
	case 'C': return opt_cache_bytes(cf, arg);
	case 'K': return opt_u32("--cache-versions", arg, 1, 1000, &cf->cache_versions);
	case 'r': return opt_rate(cf, arg);
	case 'q': return opt_queue(cf, arg);
	case 'H': return opt_u32("--max-per-host (0..64)", arg, 0, MAX_SUBS, &cf->max_per_host);
	case 'L': return opt_u32("--nack-rate", arg, 0, 1000000000, &cf->nack_rate);
	case 't': return opt_u32("--heartbeat-timeout", arg, 1, 86400, &cf->heartbeat_timeout_s);
	case 'k': cf->check_crc = 1; return 0;
	case 'P': cf->copy_fanout = 1; return 0;
	case 'F': return opt_u32("--fanout-lcores (1..16)", arg, 1, MAX_LANES, &cf->fanout_lanes);
	case 'E': cf->events_path = arg; return 0;
	case 'N': cf->name = arg; return 0;
	case 'A': return opt_key(cf, arg);
	case 'I': cf->insecure = 1; return 0;
	case 'W': cf->peer_keys = arg; return 0;
	case 'm':
		return opt_u32("--mbuf-size", arg, 2048, 65535 - RTE_PKTMBUF_HEADROOM, &cf->mbuf_size);
	case 'n': return opt_mbufs(cf, arg);
	case 'T': return opt_run_time(cf, arg);
	case 'h':
		fputs(relay_usage_text, stdout);
		exit(0);
	default:
		fputs(relay_usage_text, stderr);
		return -1;
	}
}

/* The data and control ports are told apart by number alone. */
static int check_ports_differ(const relay_conf *cf)
{
	if (cf->data_port != cf->control_port)
		return 0;
	RELAY_LOG(ERR, "--control-port %u is the data port: give them different ports\n",
		  cf->control_port);
	return -1;
}

/* Frames sent to the upstream or to the relay itself would go round. */
static int check_no_loops(const relay_conf *cf)
{
	for (unsigned p = 0; p < cf->n_ip; p++)
		if (cf->upstream_ip && cf->upstream_ip == cf->ip[p]) {
			RELAY_LOG(ERR, "--upstream is this relay's own address (port %u)\n", p);
			return -1;
		}
	for (unsigned i = 0; i < cf->n_subs; i++) {
		int own = 0;
		for (unsigned p = 0; p < cf->n_ip; p++)
			own |= cf->subs[i].ip == cf->ip[p];
		if (own || (cf->upstream_ip && cf->subs[i].ip == cf->upstream_ip)) {
			RELAY_LOG(ERR, "a --subscriber at %s is not allowed: frames to it would "
				  "come back round\n",
				  own ? "this relay's own address" : "the --upstream's address");
			return -1;
		}
	}
	return 0;
}

/* A gateway sits on its port's subnet (--ip with /LEN), and is not the
 * relay itself. */
static int check_gateways(const relay_conf *cf)
{
	for (unsigned p = 0; p < MAX_PORTS; p++) {
		if (!cf->gateway[p])
			continue;
		unsigned len = cf->prefix[p];
		uint32_t mask = prefix_mask(len);
		if (!len || len == 32 || ((cf->gateway[p] ^ cf->ip[p]) & mask) ||
		    cf->gateway[p] == cf->ip[p]) {
			RELAY_LOG(ERR, "--gateway for port %u needs --ip %u:ADDR/LEN with the "
				  "gateway on that subnet (and not the relay's own address)\n",
				  p, p);
			return -1;
		}
	}
	return 0;
}

int relay_check_auth(const relay_conf *cf)
{
	char reach[96];
	const uint32_t ip = cf->ip[0];
	snprintf(reach, sizeof(reach), "%u.%u.%u.%u%s (UDP ports %u and %u)", ip >> 24,
		 ip >> 16 & 255, ip >> 8 & 255, ip & 255, cf->n_ip > 1 ? " and its other ports" : "",
		 cf->data_port, cf->control_port);
	return auth_mode_check("bfpatch-relay", cf->n_keys, cf->insecure, reach) ? -1 : 0;
}

int relay_parse_args(int argc, char **argv, relay_conf *cf)
{
	static const struct option lo[] = {
		{"ip", required_argument, 0, 'i'}, {"gateway", required_argument, 0, 'g'},
		{"data-port", required_argument, 0, 'd'},
		{"control-port", required_argument, 0, 'c'},
		{"subscriber", required_argument, 0, 's'}, {"upstream", required_argument, 0, 'u'},
		{"cache-bytes", required_argument, 0, 'C'},
		{"cache-versions", required_argument, 0, 'K'}, {"rate", required_argument, 0, 'r'},
		{"queue", required_argument, 0, 'q'},
		{"heartbeat-timeout", required_argument, 0, 't'},
		{"check-crc", no_argument, 0, 'k'}, {"mbuf-size", required_argument, 0, 'm'},
		{"mbufs", required_argument, 0, 'n'}, {"run-time", required_argument, 0, 'T'},
		{"copy-fanout", no_argument, 0, 'P'}, {"fanout-lcores", required_argument, 0, 'F'}, {"events", required_argument, 0, 'E'},
		{"name", required_argument, 0, 'N'}, {"key", required_argument, 0, 'A'},
		{"nack-rate", required_argument, 0, 'L'},
		{"max-per-host", required_argument, 0, 'H'},
		{"insecure", no_argument, 0, 'I'}, {"peer-keys", required_argument, 0, 'W'},
		{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	int c;
	conf_defaults(cf);
	optind = 1;
	while ((c = getopt_long(argc, argv, "i:g:d:c:s:u:C:K:r:q:t:km:n:T:E:N:A:h", lo, NULL)) != -1)
		if (parse_one(cf, c, optarg))
			return -1;
	if (optind != argc) {
		RELAY_LOG(ERR, "unexpected argument '%s'\n", argv[optind]);
		fputs(relay_usage_text, stderr);
		return -1;
	}
	if (cf->n_ip == 0) {
		ip_parse("198.18.0.1", &cf->ip[0]);
		cf->n_ip = 1;
	}
	if (check_ports_differ(cf) || check_no_loops(cf) || check_gateways(cf))
		return -1;
	if (cf->peer_keys && !cf->n_keys) {
		RELAY_LOG(ERR, "--peer-keys needs --key: frames from upstream verify under "
			  "--key, never under a subscriber's key\n");
		return -1;
	}
	for (unsigned i = 0; i < cf->n_subs; i++)
		if (cf->subs[i].has_key && !cf->peer_keys) {
			RELAY_LOG(ERR, "--subscriber ...,key=%u needs --peer-keys\n",
				  cf->subs[i].key_id);
			return -1;
		}
	return 0;
}
