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
	"       bfpatch publish --ranks N --rank-listen ADDR:PORT --init CKPT --listen ADDR:PORT\n"
	"       bfpatch publish (--dir DIR | --buffer PATH) --lead ADDR:PORT --rank I\n"
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
	"      --key-encoding E      keyframe streams: huf (format 1.3's 9, the\n"
	"                            default), expm (1.2), exp (1.1), raw, zstd\n"
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
	"  -q, --quiet               nothing on stderr but warnings and errors\n"
	"  -v, --verbose             also every event (the lines --events writes)\n";

/* the rest of the usage: the sharded trainers' options (one string of
 * all would pass the 4095 bytes C99 promises) */
static const char usage_ranks[] =
	"Sharded trainers (docs/INTEGRATION.md): N ranks each encode the tensors\n"
	"they own and send the frames to one lead, which publishes each version\n"
	"once all of it is there and verifies:\n"
	"      --ranks N             be the lead of ranks 0..N-1 (no --dir/--buffer):\n"
	"                            merge their frames of each version into one\n"
	"                            patch, refused whole on a gap, an overlap or a\n"
	"                            frame that does not verify\n"
	"      --rank-listen ADDR:PORT  the lead's TCP port for its ranks\n"
	"      --init CKPT           the lead's first version: the checkpoint the\n"
	"                            ranks and the actors start from\n"
	"      --init-version N      its version (default 0)\n"
	"      --lead ADDR:PORT      be a rank: send this rank's frames to the lead\n"
	"                            there (with --dir or --buffer, no --listen)\n"
	"      --rank I              this rank's number, 0..N-1\n"
	"      --owned FILE          the tensors this rank publishes, one name a\n"
	"                            line (default: PATH.owned beside --buffer, as\n"
	"                            bfpatch.Publisher(owned=...) writes it; else\n"
	"                            all)\n"
	"  -h, --help\n";

void pub_print_usage(FILE *f)
{
	fputs(publish_usage, f);
	fputs(usage_ranks, f);
}

/* options without a short form */
enum {
	OPT_RANKS = 1000, OPT_RANK_LISTEN, OPT_INIT, OPT_INIT_VERSION, OPT_LEAD, OPT_RANK,
	OPT_OWNED,
};

static const struct option long_opts[] = {
	{"key-encoding", required_argument, 0, 'Y'},
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
	{"ranks", required_argument, 0, OPT_RANKS},
	{"rank-listen", required_argument, 0, OPT_RANK_LISTEN},
	{"init", required_argument, 0, OPT_INIT},
	{"init-version", required_argument, 0, OPT_INIT_VERSION},
	{"lead", required_argument, 0, OPT_LEAD}, {"rank", required_argument, 0, OPT_RANK},
	{"owned", required_argument, 0, OPT_OWNED},
	{"quiet", no_argument, 0, 'q'}, {"verbose", no_argument, 0, 'v'},
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
	case 'Y': /* --key-encoding: FORMAT.md 3.8-3.12 */
		if (!strcmp(arg, "huf"))
			cf->key_flags = BFP_ENC_F_KEY_HUF;
		else if (!strcmp(arg, "expm"))
			cf->key_flags = BFP_ENC_F_KEY_EXPM;
		else if (!strcmp(arg, "exp"))
			cf->key_flags = BFP_ENC_F_KEY_EXP;
		else if (!strcmp(arg, "raw"))
			cf->key_flags = 0;
		else if (!strcmp(arg, "zstd") && bfp_zstd_workspace_size())
			cf->key_flags = BFP_ENC_F_ZSTD;
		else
			return bad_value("publish", "--key-encoding", arg);
		return 0;
	case 'R': cf->resume = 1; return 0;
	case 'C': cf->self_contained = 1; return 0;
	case 'w': return opt_u32("--wait-subscribers", arg, 0, MAX_SUBS, &cf->wait_subs);
	case 'n': return opt_u32("--steps", arg, 1, UINT32_MAX - 1, &cf->steps);
	case 'L': return opt_u32("--linger", arg, 0, 86400, &cf->linger_s);
	case 'E': cf->events_path = arg; return 0;
	case 'N': cf->name = arg; return 0;
	case 'q': cf->verbosity = 0; return 0;
	case 'v': cf->verbosity = 2; return 0;
	case 'A': opt_key(cf, arg); return 0;
	case 'I': cf->insecure = 1; return 0;
	case 'W': cf->peer_keys = arg; return 0;
	case OPT_RANKS: return opt_u32("--ranks", arg, 1, 256, &cf->n_ranks);
	case OPT_RANK_LISTEN:
		return rp_parse_hostport(arg, &cf->rank_ip, &cf->rank_port, NULL)
			       ? bad_value("publish", "--rank-listen", arg) : 0;
	case OPT_INIT: cf->init = arg; return 0;
	case OPT_INIT_VERSION:
		return opt_u32("--init-version", arg, 0, UINT32_MAX - 2, &cf->init_version);
	case OPT_LEAD:
		cf->lead = arg;
		return rp_parse_hostport(arg, &cf->lead_ip, &cf->lead_port, NULL)
			       ? bad_value("publish", "--lead", arg) : 0;
	case OPT_RANK: cf->rank_given = 1; return opt_u32("--rank", arg, 0, 255, &cf->rank);
	case OPT_OWNED: cf->owned = arg; return 0;
	default: pub_print_usage(stderr); return 2;
	}
}

/* A usage error: the message, then 2. */
static int usage_error(const char *msg)
{
	fprintf(stderr, "bfpatch publish: %s\n", msg);
	return 2;
}

/* A sharded trainer's lead (--ranks) or rank (--lead): what each needs
 * and what it does not take. 0, or 2 after the message. */
static int check_ranks(const publish_config *cf)
{
	if (cf->n_ranks && cf->lead)
		return usage_error("--ranks (the lead) and --lead (a rank) are two processes");
	if (cf->n_ranks) {
		if (cf->dir || cf->buffer)
			return usage_error("the lead (--ranks) takes its versions from its ranks and "
					   "its first one from --init: no --dir or --buffer");
		if (!cf->init || !cf->rank_port)
			return usage_error("the lead (--ranks) needs --init CKPT and --rank-listen "
					   "ADDR:PORT");
		if (cf->resume || cf->keyframes)
			return usage_error("--resume and --keyframes do not go with --ranks");
		if (cf->rank_given || cf->owned)
			return usage_error("--rank and --owned are a rank's (--lead)");
		return 0;
	}
	if (cf->lead) {
		if (!cf->rank_given)
			return usage_error("a rank (--lead) needs --rank I");
		if (cf->listen_port || cf->wait_subs || cf->history || cf->resume || cf->keyframes ||
		    cf->peer_keys)
			return usage_error("a rank (--lead) sends only to its lead: no --listen, "
					   "--wait-subscribers, --history, --resume, --keyframes or "
					   "--peer-keys");
		if (cf->init || cf->rank_port)
			return usage_error("--init and --rank-listen are the lead's (--ranks)");
		return 0;
	}
	if (cf->init || cf->rank_port || cf->rank_given || cf->owned)
		return usage_error("--init and --rank-listen go with --ranks (a lead), --rank and "
				   "--owned with --lead (a rank)");
	return 0;
}

/* What the options say together: one source, a control port, no
 * --resume of a buffer, --key or else --insecure, room for the trailer in
 * a signed frame. */
static int check_together(publish_config *cf)
{
	int rk = check_ranks(cf);
	if (rk)
		return rk;
	if (cf->resume && cf->buffer) {
		fprintf(stderr, "bfpatch publish: --resume goes with --dir (a --buffer has one "
			"version, the one it holds)\n");
		return 2;
	}
	if ((!cf->n_ranks && !cf->dir == !cf->buffer) || (!cf->lead && !cf->listen_port)) {
		fprintf(stderr, "bfpatch publish: %s\n%s",
			!cf->n_ranks && !cf->dir == !cf->buffer ? "give one of --dir and --buffer"
								: "--listen is required",
			"");
		pub_print_usage(stderr);
		return 2;
	}
	char reach[80];
	const uint32_t ip = cf->listen_ip, rip = cf->rank_ip;
	if (cf->lead)
		snprintf(reach, sizeof(reach), "the lead it sends to, %s", cf->lead);
	else if (cf->n_ranks)
		snprintf(reach, sizeof(reach), "%u.%u.%u.%u:%u and TCP %u.%u.%u.%u:%u", ip >> 24,
			 ip >> 16 & 255, ip >> 8 & 255, ip & 255, cf->listen_port, rip >> 24,
			 rip >> 16 & 255, rip >> 8 & 255, rip & 255, cf->rank_port);
	else
		snprintf(reach, sizeof(reach), "%u.%u.%u.%u:%u", ip >> 24, ip >> 16 & 255,
			 ip >> 8 & 255, ip & 255, cf->listen_port);
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
	cf->verbosity = 1;
	cf->nack_rate = 65536;
	cf->steps = UINT32_MAX;
	cf->linger_s = 5;
	cf->key_flags = BFP_ENC_F_KEY_HUF;
	cf->name = "publish";
	int c;
	while ((c = getopt_long(argc, argv, "d:b:l:r:s:k:H:KRw:n:L:E:N:A:qvh", long_opts, NULL)) != -1) {
		if (c == 'h') {
			pub_print_usage(stdout);
			cf->help = 1;
			return 0;
		}
		int rc = parse_one(cf, c, optarg);
		if (rc)
			return rc;
	}
	if (optind != argc) {
		fprintf(stderr, "bfpatch publish: unexpected argument '%s' (the checkpoints go "
			"with --dir)\n", argv[optind]);
		pub_print_usage(stderr);
		return 2;
	}
	return check_together(cf);
}
