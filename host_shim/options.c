/*
 * options.c: bfpatch-shim's options into one shim_config: a small helper
 * per option, each range-checked, with the usage on error; then the
 * checks that take several options together. Nothing is opened here.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "authmode.h"
#include "patch.h"
#include "proto.h"
#include "shim.h"
#include "version.h"

const char shim_usage_text[] =
	"usage: bfpatch-shim --buffer PATH --upstream ADDR:PORT [options]\n"
	"Receives a model's patch frames, stages and NACKs them, and commits\n"
	"each complete version into the weight buffer PATH, verified.\n"
	"  -b, --buffer PATH       weight buffer (a file under /dev/shm or hugetlbfs)\n"
	"  -i, --init FILE         create PATH from a checkpoint first (version 0,\n"
	"                          or --init-version); a PATH that exists is used\n"
	"                          as it is (a restart), unless it holds another\n"
	"                          model\n"
	"  -V, --init-version N    version of --init (default 0)\n"
	"  -u, --upstream A:PORT   control port of the relay or publisher\n"
	"  -l, --listen A:PORT     where frames arrive (default 0.0.0.0:7500)\n"
	"  -r, --rate BITS         what this link takes, told in JOIN (0: default)\n"
	"  -c, --commit MODE       now (default): commit each version when complete;\n"
	"                          safe-point: wait until the actor allows it\n"
	"                          (bfpatch_buffer.py safe_point())\n"
	"  -t, --threads N         apply threads (default: online CPUs, at most 8)\n"
	"  -n, --nack-ms N         NACK missing frames after N ms quiet (100)\n"
	"  -m, --max-stage BYTES   staged frames kept at most (default 1G, or\n"
	"                          less: what 4 versions of the model can take),\n"
	"                          with the changes of frames prepared while\n"
	"                          staged (at most half of it; they give way to\n"
	"                          frames); K, M, G: KiB, MiB, GiB\n"
	"      --no-prepare        decode and verify frames only at commit (by\n"
	"                          default the next version's frames are decoded\n"
	"                          and verified as they arrive, 6 bytes per\n"
	"                          changed weight, so the commit only writes; a\n"
	"                          keyframe stream's go into the buffer if it\n"
	"                          holds no version, else into a shadow copy)\n"
	"      --changes N         keep the change lists of the last N versions in\n"
	"                          PATH.changes/ (default 4; 0: none): per commit,\n"
	"                          the positions and new values of what changed,\n"
	"                          for actors that apply versions into their own\n"
	"                          tensors (WeightBuffer.apply_changes)\n"
	"  -A, --key FILE          accept only frames and HEARTBEATs signed with this\n"
	"                          key; sign JOINs and NACKs (repeatable: two keys\n"
	"                          during a rollover, the first signs; make one with\n"
	"                          bfpatch keygen FILE); required unless --insecure\n"
	"      --insecure          run without --key: then this shim accepts\n"
	"                          unauthenticated frames and control messages from\n"
	"                          anyone who can reach --listen (or --port) and\n"
	"                          commits what they carry\n"
	"  -E, --events FILE       append JSON-lines events (docs/EVENTS.md)\n"
	"  -N, --name NAME         this shim's name in the events (shim)\n"
#ifdef BFP_SHIM_DPDK
	"      --dma DEV           commit through DPDK dmadev DEV (dma_skeleton0: the\n"
	"                          software engine, added as a vdev; idxd/ioat\n"
	"                          channels: give their EAL options in --eal)\n"
	"      --port DEVARGS      also take frames from a DPDK port, e.g.\n"
	"                          net_pcap0,rx_pcap=F.pcap or net_memif0,...\n"
	"                          (UDP to --listen's port; control stays on the\n"
	"                          kernel socket; a memif client reconnects after\n"
	"                          its server restarts)\n"
	"      --eal ARGS          EAL options for --dma/--port (default: --no-huge\n"
	"                          -m 512 --no-pci -l 0 --iova-mode=va\n"
	"                          --file-prefix bfpshim<pid>)\n"
#endif
	"  -T, --exit-after S      stop after S seconds (tests)\n"
	"      --drop-every N      testing: discard one frame once, after N\n"
	"      --crash-after N     testing: SIGKILL itself halfway through commit N\n"
	"  -h, --help\n"
	"      --version           print the version (alone: bfpatch version's line)\n"
	"SIGUSR1 prints the counters; SIGINT/SIGTERM print them and exit.\n";

static const struct option long_opts[] = {
	{"buffer", required_argument, 0, 'b'}, {"init", required_argument, 0, 'i'},
	{"init-version", required_argument, 0, 'V'}, {"upstream", required_argument, 0, 'u'},
	{"listen", required_argument, 0, 'l'}, {"rate", required_argument, 0, 'r'},
	{"commit", required_argument, 0, 'c'}, {"threads", required_argument, 0, 't'},
	{"nack-ms", required_argument, 0, 'n'}, {"max-stage", required_argument, 0, 'm'},
	{"events", required_argument, 0, 'E'}, {"name", required_argument, 0, 'N'},
	{"exit-after", required_argument, 0, 'T'}, {"drop-every", required_argument, 0, 'D'},
	{"crash-after", required_argument, 0, 'K'}, {"dma", required_argument, 0, 'M'},
	{"port", required_argument, 0, 'P'}, {"eal", required_argument, 0, 'G'},
	{"key", required_argument, 0, 'A'}, {"no-prepare", no_argument, 0, 'R'},
	{"insecure", no_argument, 0, 'S'}, {"changes", required_argument, 0, 'C'},
	{"help", no_argument, 0, 'h'}, {"version", no_argument, 0, 'v'},
	{0, 0, 0, 0}};

/* The long name of option c, for messages. */
static const char *long_name(int c)
{
	for (const struct option *o = long_opts; o->name; o++)
		if (o->val == c)
			return o->name;
	return "?";
}

/* An invalid value for option c; -1. */
static int bad(int c, const char *arg)
{
	fprintf(stderr, "bfpatch-shim: invalid value '%s' for --%s (see --help)\n",
		arg ? arg : "", long_name(c));
	return -1;
}

/* A number in lo..hi for option c, into *out (32 bits). */
static int opt_u32(int c, const char *arg, uint64_t lo, uint64_t hi, uint32_t *out)
{
	uint64_t v;
	if (rp_parse_num(arg, lo, hi, &v))
		return bad(c, arg);
	*out = (uint32_t)v;
	return 0;
}

/* --upstream, --listen: ADDR:PORT */
static int opt_hostport(int c, const char *arg, uint32_t *ip, uint16_t *port)
{
	return rp_parse_hostport(arg, ip, port, NULL) ? bad(c, arg) : 0;
}

/* --rate BITS: told in kbit/s */
static int opt_rate(shim_config *cf, const char *arg)
{
	uint64_t v;
	if (rp_parse_rate(arg, 4000000000000ull, &v)) {
		fprintf(stderr, "bfpatch-shim: invalid value '%s' for --rate (bit/s, at "
			"least 1k: 100m is 100 Mbit/s; 0 leaves it to the sender)\n", arg);
		return -1;
	}
	cf->rate_kbps = (uint32_t)(v / 1000 > UINT32_MAX ? UINT32_MAX : v / 1000);
	return 0;
}

/* --commit now|safe-point */
static int opt_commit(shim_config *cf, const char *arg)
{
	if (!strcmp(arg, "now"))
		cf->safe_point = 0;
	else if (!strcmp(arg, "safe-point"))
		cf->safe_point = 1;
	else
		return bad('c', arg);
	return 0;
}

/* --threads N */
static int opt_threads(shim_config *cf, const char *arg)
{
	uint32_t v;
	if (opt_u32('t', arg, 1, 256, &v))
		return -1;
	cf->threads = (int)v;
	return 0;
}

/* --max-stage BYTES[K|M|G] */
static int opt_max_stage(shim_config *cf, const char *arg)
{
	return rp_parse_bytes(arg, 1u << 20, 1ull << 40, &cf->max_stage) ? bad('m', arg) : 0;
}

/* --exit-after S: seconds, no unit, fractions allowed */
static int opt_exit_after(shim_config *cf, const char *arg)
{
	char *end;
	errno = 0;
	cf->exit_after = strtod(arg, &end);
	if (errno || end == arg || *end || !(cf->exit_after > 0) || cf->exit_after > 1e9)
		return bad('T', arg);
	return 0;
}

/* --key FILE, repeatable: loaded by shim_open() */
static void opt_key(shim_config *cf, const char *arg)
{
	if (cf->n_keys < RP_AUTH_MAX_KEYS + 1)
		cf->key_paths[cf->n_keys++] = arg;
}

static void conf_defaults(shim_config *cf)
{
	memset(cf, 0, sizeof(*cf));
	cf->listen_port = 7500;
	cf->nack_ms = 100;
	cf->max_stage = 1ull << 30;
	cf->threads = cpu_count() < 8 ? cpu_count() : 8;
	cf->name = "shim";
	cf->changes = 4;
}

/* One option of getopt_long's (c, with arg): 0; 1 after --help; -1
 * after a message. */
static int parse_one(shim_config *cf, int c, const char *arg)
{
	switch (c) {
	case 'b': cf->buffer = arg; return 0;
	case 'i': cf->init = arg; return 0;
	case 'V': return opt_u32(c, arg, 0, UINT32_MAX - 2, &cf->init_version);
	case 'u': return opt_hostport(c, arg, &cf->upstream_ip, &cf->upstream_port);
	case 'l': return opt_hostport(c, arg, &cf->listen_ip, &cf->listen_port);
	case 'r': return opt_rate(cf, arg);
	case 'c': return opt_commit(cf, arg);
	case 't': return opt_threads(cf, arg);
	case 'n': return opt_u32(c, arg, 1, 60000, &cf->nack_ms);
	case 'm': return opt_max_stage(cf, arg);
	case 'E': cf->events_path = arg; return 0;
	case 'N': cf->name = arg; return 0;
	case 'T': return opt_exit_after(cf, arg);
	case 'D': return opt_u32(c, arg, 1, 1u << 30, &cf->drop_every);
	case 'K': return opt_u32(c, arg, 1, 1u << 30, &cf->crash_after);
	case 'M': cf->dma_dev = arg; return 0;
	case 'R': cf->no_prep = 1; return 0;
	case 'P': cf->port_args = arg; return 0;
	case 'G': cf->eal_args = arg; return 0;
	case 'A': opt_key(cf, arg); return 0;
	case 'S': cf->insecure = 1; return 0;
	case 'C': return opt_u32(c, arg, 0, 1000, &cf->changes);
	case 'h':
		fputs(shim_usage_text, stdout);
		return 1;
	case 'v':
		/* alone only: a script that still gives --version N for
		 * --init's version must not end here with exit 0 */
		fprintf(stderr, "bfpatch-shim: --version takes no value and goes alone; "
			"the version of --init is --init-version N (-V N)\n");
		return -1;
	default:
		fputs(shim_usage_text, stderr); /* getopt said which option */
		return -1;
	}
}

/* --key, or else --insecure (authmode.h): 0, or -1 after a message. */
static int check_auth(const shim_config *cf)
{
	char reach[96];
	const uint32_t ip = cf->listen_ip;
	snprintf(reach, sizeof(reach), "%u.%u.%u.%u:%u%s", ip >> 24, ip >> 16 & 255,
		 ip >> 8 & 255, ip & 255, cf->listen_port,
		 cf->port_args ? " or its DPDK --port" : "");
	return auth_mode_check("bfpatch-shim", cf->n_keys, cf->insecure, reach) ? -1 : 0;
}

/* What the options need of each other; 0, or -1 after a message. */
static int check_together(const shim_config *cf, int argc, char **argv)
{
	const int extra = optind != argc;
	const char *why = extra ? "unexpected argument"
			  : !cf->buffer ? "--buffer FILE is required"
			  : !cf->upstream_port ? "--upstream ADDR:PORT is required"
			  : cf->init_version && !cf->init ? "--init-version goes with --init"
			  : cf->eal_args && !cf->dma_dev && !cf->port_args
				? "--eal goes with --dma or --port"
				: NULL;
	if (why) {
		fprintf(stderr, "bfpatch-shim: %s%s%s%s\n%s", why, extra ? " '" : "",
			extra ? argv[optind] : "", extra ? "'" : "", shim_usage_text);
		return -1;
	}
#ifndef BFP_SHIM_DPDK
	if (cf->dma_dev || cf->port_args || cf->eal_args) {
		fprintf(stderr, "bfpatch-shim: --dma, --port and --eal need a build with DPDK\n");
		return -1;
	}
#endif
	return check_auth(cf);
}

int shim_parse_args(int argc, char **argv, shim_config *cf)
{
	int c;
	conf_defaults(cf);
	if (argc == 2 && !strcmp(argv[1], "--version")) {
		bfp_version_print(stdout);
		return 1;
	}
	optind = 1;
	while ((c = getopt_long(argc, argv, "b:i:V:u:l:r:c:t:n:m:E:N:T:A:h", long_opts,
				NULL)) != -1) {
		int rc = parse_one(cf, c, optarg);
		if (rc)
			return rc;
	}
	return check_together(cf, argc, argv);
}
