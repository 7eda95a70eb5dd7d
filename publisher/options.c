/*
 * options.c: `bfpatch publish`'s options into one publish_config: a small
 * helper per option, each range-checked, then the checks that take
 * several options together. Nothing is opened here (publisher_open does
 * that), so a usage error leaves nothing to free.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "bfpatch.h"
#include "authmode.h"
#include "util.h"
#include "publisher.h"

const char publish_usage[] =
	"usage: bfpatch publish (--dir DIR | --buffer PATH) --listen ADDR:PORT [options]\n"
	"Publish each new version of a model as a patch from the previous one:\n"
	"frames go over UDP to every subscriber that JOINed (relays or shims,\n"
	"docs/PROTOCOL.md), paced to --rate; NACKs are answered from the last\n"
	"--keep patches; a subscriber too far behind gets a keyframe stream.\n"
	"  -d, --dir DIR             checkpoints DIR/step-NNNN.safetensors, or sharded\n"
	"                            ones DIR/step-NNNN/ (model.safetensors.index.json\n"
	"                            and its shards; the file where both are there),\n"
	"                            from the first one there; each new step is\n"
	"                            published when it appears (renamed in, or closed\n"
	"                            by its writer; a sharded one once its index and\n"
	"                            every shard load: write the index last)\n"
	"  -b, --buffer PATH         or a weight buffer the trainer commits into\n"
	"                            (wbuf.h): each committed version is published\n"
	"  -l, --listen ADDR:PORT    control port (JOIN, NACK); frames leave from it\n"
	"  -r, --rate BITS           send rate, e.g. 1g (default 1g; 0: unlimited); a\n"
	"                            subscriber's JOIN rate paces what goes to it\n"
	"  -s, --frame-size N        frame size (default 1200)\n"
	"  -k, --keep N              patches kept for NACKs and catch-up (default 4)\n"
	"      --nack-rate N         frames one subscriber's NACKs may ask for per\n"
	"                            second, after a first 4096 (65536; 0: no limit)\n"
	"  -H, --history DIR         also keep the last --keep patches on disk there\n"
	"                            (vBASE-vTARGET.bfp, atomic writes)\n"
	"  -R, --resume              start at the latest checkpoint in --dir (a\n"
	"                            restarted publisher; with --history it also\n"
	"                            takes the patches kept there back)\n"
	"  -K, --keyframes           send every version as a keyframe stream (the\n"
	"                            dense baseline through the same pipeline)\n"
	"      --self-contained      sparse frames that each decode alone\n"
	"                            (docs/FORMAT.md 3.5), not sharing a model per\n"
	"                            tensor chunk: 2-5% more bytes\n"
	"  -w, --wait-subscribers N  start publishing only once N subscribers joined\n"
	"  -n, --steps N             stop after publishing version N (no step above\n"
	"                            N is published, also where N is missing)\n"
	"  -L, --linger S            then keep answering NACKs for S seconds (5), and\n"
	"                            finish the catch-ups begun by then\n"
	"  -A, --key FILE            sign frames and heartbeats with this key and\n"
	"                            accept only JOINs/NACKs signed by a key given\n"
	"                            (repeatable: the first signs; docs/SECURITY.md;\n"
	"                            make one with bfpatch keygen FILE); required\n"
	"                            unless --insecure\n"
	"      --peer-keys FILE      a key per subscriber (one \"KEY_ID HEX64\" a\n"
	"                            line): each signs its JOINs and NACKs with its\n"
	"                            own, and what goes to it is signed with that\n"
	"                            key, so no subscriber can forge what another\n"
	"                            takes (docs/SECURITY.md)\n"
	"      --insecure            run without --key: then this publisher accepts\n"
	"                            unauthenticated JOINs and NACKs from anyone who\n"
	"                            can reach --listen and sends unsigned frames\n"
	"  -E, --events FILE         append JSON-lines events (docs/EVENTS.md)\n"
	"  -N, --name NAME           this publisher's name in the events (publish)\n"
	"  -h, --help\n";

static const struct option long_opts[] = {
	{"dir", required_argument, 0, 'd'}, {"buffer", required_argument, 0, 'b'},
	{"listen", required_argument, 0, 'l'}, {"rate", required_argument, 0, 'r'},
	{"frame-size", required_argument, 0, 's'}, {"keep", required_argument, 0, 'k'},
	{"history", required_argument, 0, 'H'}, {"keyframes", no_argument, 0, 'K'},
	{"resume", no_argument, 0, 'R'},
	{"self-contained", no_argument, 0, 'C'},
	{"wait-subscribers", required_argument, 0, 'w'},
	{"steps", required_argument, 0, 'n'}, {"linger", required_argument, 0, 'L'},
	{"events", required_argument, 0, 'E'}, {"name", required_argument, 0, 'N'},
	{"key", required_argument, 0, 'A'}, {"nack-rate", required_argument, 0, 'Q'},
	{"insecure", no_argument, 0, 'I'}, {"peer-keys", required_argument, 0, 'W'},
	{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};

/* A number in lo..hi for opt into *out: 0, or 2 after the message. */
static int opt_u32(const char *opt, const char *arg, uint32_t lo, uint32_t hi, uint32_t *out)
{
	return parse_u32(arg, lo, hi, out) ? bad_value("publish", opt, arg) : 0;
}

/* --listen ADDR:PORT */
static int opt_listen(publish_config *cf, const char *arg)
{
	if (rp_parse_hostport(arg, &cf->listen_ip, &cf->listen_port, NULL))
		return bad_value("publish", "--listen", arg);
	return 0;
}

/* --rate BITS: 1k up to 400g, or 0 for no limit */
static int opt_rate(publish_config *cf, const char *arg)
{
	if (rp_parse_rate(arg, 400000000000ull, &cf->rate_bps)) {
		fprintf(stderr, "bfpatch publish: invalid value '%s' for --rate (bit/s, at least "
			"1k: 100m is 100 Mbit/s; 0: unlimited)\n", arg);
		return 2;
	}
	return 0;
}

/* --key FILE, repeatable: the files are read by publisher_open */
static void opt_key(publish_config *cf, const char *arg)
{
	if (cf->n_keys < sizeof(cf->key_paths) / sizeof(cf->key_paths[0]))
		cf->key_paths[cf->n_keys++] = arg;
}

/* One option c with its argument arg: 0, or the exit status of a usage
 * error after its message. */
static int parse_one(publish_config *cf, int c, const char *arg)
{
	switch (c) {
	case 'd': cf->dir = arg; return 0;
	case 'b': cf->buffer = arg; return 0;
	case 'l': return opt_listen(cf, arg);
	case 'r': return opt_rate(cf, arg);
	case 's':
		return opt_u32("--frame-size", arg, BFP_FRAME_SIZE_MIN, BFP_FRAME_SIZE_MAX,
			       &cf->frame_size);
	case 'k': return opt_u32("--keep", arg, 1, MAX_KEEP, &cf->keep);
	case 'Q': return opt_u32("--nack-rate", arg, 0, 1000000000, &cf->nack_rate);
	case 'H': cf->history = arg; return 0;
	case 'K': cf->keyframes = 1; return 0;
	case 'R': cf->resume = 1; return 0;
	case 'C': cf->self_contained = 1; return 0;
	case 'w': return opt_u32("--wait-subscribers", arg, 0, MAX_SUBS, &cf->wait_subs);
	case 'n': return opt_u32("--steps", arg, 1, UINT32_MAX - 1, &cf->steps);
	case 'L': return opt_u32("--linger", arg, 0, 86400, &cf->linger_s);
	case 'E': cf->events_path = arg; return 0;
	case 'N': cf->name = arg; return 0;
	case 'A': opt_key(cf, arg); return 0;
	case 'I': cf->insecure = 1; return 0;
	case 'W': cf->peer_keys = arg; return 0;
	default: fputs(publish_usage, stderr); return 2;
	}
}

/* What the options say together: one source, a control port, no
 * --resume of a buffer, --key or else --insecure, room for the trailer in
 * a signed frame. */
static int check_together(publish_config *cf)
{
	if (cf->resume && cf->buffer) {
		fprintf(stderr, "bfpatch publish: --resume goes with --dir (a --buffer has one "
			"version, the one it holds)\n");
		return 2;
	}
	if (!cf->dir == !cf->buffer || !cf->listen_port) {
		fprintf(stderr, "bfpatch publish: %s\n%s",
			!cf->dir == !cf->buffer ? "give one of --dir and --buffer"
						: "--listen is required",
			publish_usage);
		return 2;
	}
	char reach[32];
	const uint32_t ip = cf->listen_ip;
	snprintf(reach, sizeof(reach), "%u.%u.%u.%u:%u", ip >> 24, ip >> 16 & 255, ip >> 8 & 255,
		 ip & 255, cf->listen_port);
	int rc = auth_mode_check("bfpatch publish", cf->n_keys + (cf->peer_keys != NULL),
				 cf->insecure, reach);
	if (rc)
		return rc;
	if (cf->n_keys || cf->peer_keys) { /* the trailer rides in the same datagram */
		if (cf->frame_size < BFP_FRAME_SIZE_MIN + RP_AUTH_LEN) {
			fprintf(stderr, "bfpatch publish: --frame-size too small for a signed frame\n");
			return 2;
		}
		cf->frame_size -= RP_AUTH_LEN;
	}
	return 0;
}

int publish_parse_args(int argc, char **argv, publish_config *cf)
{
	memset(cf, 0, sizeof(*cf));
	cf->rate_bps = 1000000000ull;
	cf->frame_size = BFP_FRAME_SIZE_DEFAULT;
	cf->keep = 4;
	cf->nack_rate = 65536;
	cf->steps = UINT32_MAX;
	cf->linger_s = 5;
	cf->name = "publish";
	int c;
	while ((c = getopt_long(argc, argv, "d:b:l:r:s:k:H:KRw:n:L:E:N:A:h", long_opts, NULL)) != -1) {
		if (c == 'h') {
			fputs(publish_usage, stdout);
			cf->help = 1;
			return 0;
		}
		int rc = parse_one(cf, c, optarg);
		if (rc)
			return rc;
	}
	if (optind != argc) {
		fprintf(stderr, "bfpatch publish: unexpected argument '%s' (the checkpoints go "
			"with --dir)\n%s", argv[optind], publish_usage);
		return 2;
	}
	return check_together(cf);
}
