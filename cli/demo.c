/*
 * demo.c: `bfpatch demo`, the end-to-end demo. It generates a synthetic
 * RL trajectory (synth.h) and runs the real pipeline on this machine: the
 * publisher (`bfpatch publish`, watching a checkpoint directory), a
 * bfpatch-relay on a DPDK net_tap port in a network namespace it creates,
 * and 3 bfpatch-shim daemons, each in its own namespace behind a veth
 * pair and a bridge, each owning a weight buffer in /dev/shm. For every
 * step the trainer writes a checkpoint; the demo waits until every actor
 * has committed it and byte-compares each actor's buffer with the
 * trainer's BF16 weights in memory (no codec involved in that check).
 *
 * Every process runs with a key (--key) the demo makes in its work
 * directory, as a deployment would.
 *
 * Without root, `ip netns` or the relay binary it falls back to the
 * publisher sending straight to the 3 shims over loopback (and says so).
 * --in-process runs the codec alone: diff, re-parse, apply, compare.
 * Everything started is stopped by PID, namespaces and files removed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bfpatch.h"
#include "cli.h"
#include "model.h"
#include "patch.h"
#include "output.h"
#include "report.h"
#include "synth.h"
#include "wbuf.h"

#define ACTORS 3

static const char demo_usage[] =
	"usage: bfpatch demo [options]\n"
	"End-to-end demo: a synthetic RL trajectory published step by step by\n"
	"`bfpatch publish` through a bfpatch-relay (DPDK, net_tap, in network\n"
	"namespaces it creates) to 3 bfpatch-shim actors; after every step each\n"
	"actor's weight buffer is byte-compared with the trainer's BF16 weights.\n"
	"Every process authenticates with a key made for the run (bfpatch keygen).\n"
	"Without root, ip netns or bfpatch-relay: publisher -> shims on loopback.\n"
	"  -p, --params N      parameter count, rounded down to the model shape's\n"
	"                      as `bfpatch synth` does (default 16M: 12.9M)\n"
	"  -n, --steps N       steps (default 10)\n"
	"  -l, --lr X          learning rate (default 1e-6)\n"
	"  -g, --ongrid        master starts on the BF16 grid\n"
	"  -s, --frame-size N  frame size (default 1200)\n"
	"  -r, --rate BITS     publisher's send rate (default 1g)\n"
	"      --loopback      no relay: publisher -> shims over loopback\n"
	"      --in-process    codec only: diff, apply, compare in this process\n"
	"  -k, --keep DIR      keep the trajectory, patches, logs and event logs in DIR\n"
	"  -R, --report PAGE   then write a bfpatch report of the run (HTML)\n"
	"  -f, --force         replace PAGE if it exists (else refused at start)\n"
	"  -q, --quiet         only the last line (the verdict) and errors\n"
	"  -v, --verbose       also each process started, its command line and log\n"
	"  -h, --help\n";

typedef struct demo {
	char dir[64];            /* work directory, /tmp/bfpdemo.XXXXXX */
	char key[96];            /* the key every process takes: dir/key */
	char keep[1024];         /* --keep */
	char ns[32];             /* namespace prefix; "" in loopback mode */
	char self_dir[2048];     /* where bfpatch is */
	char shim_bin[PATH_MAX], relay_bin[PATH_MAX];
	char shm[ACTORS][64];
	pid_t pids[ACTORS + 2];
	unsigned n_pids;
	int netns;               /* namespaces created */
	uint64_t rate;
	uint32_t frame_size;
	int verbosity;           /* 0 -q, 1, 2 -v */
} demo;

static volatile sig_atomic_t interrupted;
static void on_int(int s)
{
	(void)s;
	interrupted = 1;
}

/* A shell command built here from fixed text and our own names. */
static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	int rc = system(cmd);
	return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static int find_bin(const demo *d, const char *name, const char *const *rel, char *out)
{
	for (const char *const *r = rel; *r; r++) {
		snprintf(out, PATH_MAX, "%s/%s%s", d->self_dir, *r, name);
		if (access(out, X_OK) == 0)
			return 0;
	}
	const char *path = getenv("PATH");
	char buf[4096];
	snprintf(buf, sizeof(buf), "%s", path ? path : "/usr/bin:/usr/local/bin");
	for (char *save = NULL, *p = strtok_r(buf, ":", &save); p; p = strtok_r(NULL, ":", &save)) {
		snprintf(out, PATH_MAX, "%s/%s", p, name);
		if (access(out, X_OK) == 0)
			return 0;
	}
	return -1;
}

/* Start argv (in namespace ns if not NULL) with output to log. */
static pid_t spawn(demo *d, const char *ns, const char *log, char *const *argv)
{
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		setpgid(0, 0);
		if (ns) {
			char *args[64] = {"ip", "netns", "exec", (char *)ns};
			int n = 4;
			for (int i = 0; argv[i] && n < 63; i++)
				args[n++] = argv[i];
			args[n] = NULL;
			execvp("ip", args);
		} else {
			execv(argv[0], argv);
		}
		_exit(127);
	}
	d->pids[d->n_pids++] = pid;
	if (d->verbosity > 1) {
		printf("started %d:%s%s", (int)pid, ns ? " ip netns exec " : "", ns ? ns : "");
		for (int i = 0; argv[i]; i++)
			printf(" %s", argv[i]);
		printf("\n  log: %s\n", log);
		fflush(stdout);
	}
	return pid;
}

static void stop_all(demo *d)
{
	for (unsigned i = 0; i < d->n_pids; i++)
		if (d->pids[i] > 0)
			kill(d->pids[i], SIGTERM);
	for (unsigned i = 0; i < d->n_pids; i++) {
		if (d->pids[i] <= 0)
			continue;
		int st;
		for (int t = 0; t < 100 && waitpid(d->pids[i], &st, WNOHANG) == 0; t++) {
			struct timespec ts = {0, 50 * 1000 * 1000};
			nanosleep(&ts, NULL);
		}
		if (waitpid(d->pids[i], &st, WNOHANG) == 0) {
			kill(d->pids[i], SIGKILL);
			waitpid(d->pids[i], &st, 0);
		}
		d->pids[i] = 0;
	}
	d->n_pids = 0;
}

static void cleanup(demo *d)
{
	stop_all(d);
	if (d->netns) {
		for (int i = 1; i <= ACTORS; i++)
			sh("ip netns del %sa%d 2>/dev/null", d->ns, i);
		sh("ip netns del %s 2>/dev/null", d->ns);
		sh("rm -rf /var/run/dpdk/%s", d->ns);
	}
	for (int i = 0; i < ACTORS; i++) {
		if (!d->shm[i][0])
			continue;
		char side[sizeof(d->shm[i]) + 8];
		unlink(d->shm[i]);
		snprintf(side, sizeof(side), "%s.undo", d->shm[i]); /* the commit journal */
		unlink(side);
		snprintf(side, sizeof(side), "%s.lock", d->shm[i]); /* one shim a buffer */
		unlink(side);
		sh("rm -rf '%s.changes'", d->shm[i]); /* the change lists (--changes) */
	}
	if (d->keep[0] && d->dir[0]) {
		sh("mkdir -p '%s' && cp -r '%s'/. '%s'/", d->keep, d->dir, d->keep);
		printf("demo: trajectory, logs and event logs kept in %s\n", d->keep);
	}
	if (d->dir[0])
		sh("rm -rf '%s'", d->dir);
}

static int wait_for_line(const char *log, const char *what, double timeout)
{
	double end = now_s() + timeout;
	char line[1024];
	while (now_s() < end && !interrupted) {
		FILE *f = fopen(log, "r");
		int found = 0;
		while (f && !found && fgets(line, sizeof(line), f))
			found = strstr(line, what) != NULL;
		if (f)
			fclose(f);
		if (found)
			return 0;
		struct timespec ts = {0, 100 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	return -1;
}

static void show_logs(const demo *d)
{
	sh("for f in '%s'/*.log; do echo \"== $f\"; tail -n 8 \"$f\"; done >&2", d->dir);
}

/* Network namespaces: <ns> holds the publisher, a bridge and the relay's
 * tap; <ns>a1..a3 hold one actor each, on a veth pair to the bridge. */
static int setup_netns(demo *d)
{
	const char *n = d->ns;
	if (sh("ip netns add %s 2>/dev/null", n))
		return -1;
	d->netns = 1;
	int rc = sh("ip netns exec %s ip link set lo up && "
		    "ip netns exec %s ip link add br0 type bridge && "
		    "ip netns exec %s ip addr add 198.18.0.10/24 dev br0 && "
		    "ip netns exec %s ip link set br0 up", n, n, n, n);
	for (int i = 1; i <= ACTORS && !rc; i++)
		rc = sh("ip netns add %sa%d && "
			"ip link add %sv%d netns %s type veth peer name eth0 netns %sa%d && "
			"ip netns exec %s ip link set %sv%d master br0 && "
			"ip netns exec %s ip link set %sv%d up && "
			"ip netns exec %sa%d ip link set lo up && "
			"ip netns exec %sa%d ip addr add 198.18.0.2%d/24 dev eth0 && "
			"ip netns exec %sa%d ip link set eth0 up", n, i, n, i, n, n, i, n, n, i, n, n,
			i, n, i, n, i, i, n, i);
	return rc;
}

static int start_relay(demo *d)
{
	char log[PATH_MAX], prefix[64], vdev[96];
	snprintf(log, sizeof(log), "%s/relay.log", d->dir);
	snprintf(prefix, sizeof(prefix), "%s", d->ns);
	snprintf(vdev, sizeof(vdev), "--vdev=net_tap0,iface=%sr", d->ns);
	char events[PATH_MAX];
	snprintf(events, sizeof(events), "%s/events.jsonl", d->dir);
	char *argv[] = {d->relay_bin, "--no-huge", "-m", "512", "--no-pci", "--file-prefix", prefix,
			"-l", "0", "--log-level=lib.eal:error", vdev, "--", "--ip", "0:198.18.0.1",
			"--upstream", "198.18.0.10:7401", "--cache-versions", "4", "--events", events,
			"--key", d->key, NULL};
	if (spawn(d, d->ns, log, argv) < 0 || wait_for_line(log, "checksums in", 30))
		return -1;
	/* the tap's kernel side shares the relay's MAC: give it another one
	 * before it joins the bridge */
	return sh("ip netns exec %s ip link set %sr address 02:00:00:00:ee:10 && "
		  "ip netns exec %s ip link set %sr master br0 && "
		  "ip netns exec %s ip link set %sr up", d->ns, d->ns, d->ns, d->ns, d->ns, d->ns);
}

static int start_shims(demo *d, const char *step0)
{
	for (int i = 1; i <= ACTORS; i++) {
		char log[PATH_MAX], listen[64], ns[48], name[16], events[PATH_MAX];
		snprintf(log, sizeof(log), "%s/shim%d.log", d->dir, i);
		snprintf(events, sizeof(events), "%s/events.jsonl", d->dir);
		snprintf(name, sizeof(name), "actor%d", i);
		snprintf(d->shm[i - 1], sizeof(d->shm[i - 1]), "/dev/shm/bfpdemo%d.%d", (int)getpid(), i);
		if (d->netns)
			snprintf(listen, sizeof(listen), "198.18.0.2%d:7500", i);
		else
			snprintf(listen, sizeof(listen), "127.0.0.1:%d", 7500 + (int)(getpid() % 1000) * 8 + i);
		char upstream[64];
		if (d->netns)
			snprintf(upstream, sizeof(upstream), "198.18.0.1:7401");
		else
			snprintf(upstream, sizeof(upstream), "127.0.0.1:%d", 7500 + (int)(getpid() % 1000) * 8);
		snprintf(ns, sizeof(ns), "%sa%d", d->ns, i);
		char *argv[] = {d->shim_bin, "--buffer", d->shm[i - 1], "--init", (char *)step0,
				"--upstream", upstream, "--listen", listen, "--threads", "1",
				"--events", events, "--name", name, "--key", d->key, NULL};
		if (spawn(d, d->netns ? ns : NULL, log, argv) < 0)
			return -1;
	}
	return 0;
}

static int start_publisher(demo *d, const char *traj)
{
	char log[PATH_MAX], listen[64], rate[32], fs[16], events[PATH_MAX], self[PATH_MAX];
	snprintf(log, sizeof(log), "%s/publish.log", d->dir);
	snprintf(events, sizeof(events), "%s/events.jsonl", d->dir);
	snprintf(self, sizeof(self), "%s/bfpatch", d->self_dir);
	if (d->netns)
		snprintf(listen, sizeof(listen), "198.18.0.10:7401");
	else
		snprintf(listen, sizeof(listen), "127.0.0.1:%d", 7500 + (int)(getpid() % 1000) * 8);
	snprintf(rate, sizeof(rate), "%" PRIu64, d->rate);
	snprintf(fs, sizeof(fs), "%u", d->frame_size);
	char hist[PATH_MAX];
	snprintf(hist, sizeof(hist), "%s/patches", d->dir);
	mkdir(hist, 0755);
	char *argv[] = {self, "publish", "--dir", (char *)traj, "--listen", listen, "--rate", rate,
			"--frame-size", fs, "--wait-subscribers", "1", "--linger", "3600",
			"--events", events, "--history", hist, "--keep", "16", "--key", d->key,
			NULL};
	return spawn(d, d->netns ? d->ns : NULL, log, argv) < 0 ? -1 : 0;
}

/* Bytes the publisher sent for version v (first transmission and NACK
 * answers), from its event log. */
static void sent_bytes(const demo *d, uint32_t v, uint64_t *bytes, uint64_t *frames,
		       uint64_t *resent)
{
	char path[PATH_MAX], line[2048];
	snprintf(path, sizeof(path), "%s/events.jsonl", d->dir);
	*bytes = *frames = *resent = 0;
	FILE *f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f)) {
		json_t *j = json_loads(line, 0, NULL);
		if (!j)
			continue;
		const char *src = json_string_value(json_object_get(j, "src"));
		const char *ev = json_string_value(json_object_get(j, "ev"));
		if (src && ev && !strcmp(src, "publish") &&
		    json_integer_value(json_object_get(j, "version")) == v) {
			if (!strcmp(ev, "encode_end")) {
				*bytes = (uint64_t)json_integer_value(json_object_get(j, "bytes"));
				*frames = (uint64_t)json_integer_value(json_object_get(j, "frames"));
			} else if (!strcmp(ev, "nack")) {
				*resent += (uint64_t)json_integer_value(json_object_get(j, "frames"));
			}
		}
		json_decref(j);
	}
	if (f)
		fclose(f);
}

static int run_in_process(synth *s, model *cur, patch_opts *po, uint32_t steps, int verbosity,
			  char *err);

/* bfpatch report of the run: its patches (the publisher's history), the
 * checkpoints and every process's events. */
static int write_report(const demo *d, const char *traj, uint32_t steps, const char *out,
			int force, char *err)
{
	char events[PATH_MAX];
	snprintf(events, sizeof(events), "%s/events.jsonl", d->dir);
	const char *ev[1] = {events};
	char *paths[16];
	const char *cpaths[16];
	size_t n = 0;
	uint32_t first = steps > 16 ? steps - 15 : 1;
	for (uint32_t v = first; v <= steps && n < 16; v++) {
		paths[n] = malloc(PATH_MAX);
		if (!paths[n])
			break;
		snprintf(paths[n], PATH_MAX, "%s/patches/v%08u-v%08u.bfp", d->dir, v - 1, v);
		cpaths[n] = paths[n];
		n++;
	}
	report_input in;
	memset(&in, 0, sizeof(in));
	in.patches = cpaths;
	in.n_patches = n;
	in.trajectory = traj;
	in.events = ev;
	in.n_events = 1;
	in.title = "bfpatch demo";
	in.replace = force;
	int rc = report_write(&in, out, err, ERRLEN);
	if (!rc)
		printf("report: %s\n", out);
	for (size_t i = 0; i < n; i++)
		free(paths[i]);
	return rc;
}

/* What the command line asks for. */
typedef struct demo_config {
	synth_opts so;
	patch_opts po;
	uint32_t steps;
	uint64_t rate;           /* publisher's send rate, bit/s */
	int loopback, in_process, rate_given;
	const char *keep;        /* --keep DIR, or NULL */
	const char *report;      /* --report PAGE, or NULL */
	int force;               /* --force: replace PAGE */
	int verbosity;           /* 0 -q, 1, 2 -v */
} demo_config;

/* Fill *cfg from the command line: -1 to go on, else the exit status. */
static int demo_parse(int argc, char **argv, demo_config *cfg)
{
	static const struct option lo[] = {
		{"params", required_argument, 0, 'p'}, {"steps", required_argument, 0, 'n'},
		{"lr", required_argument, 0, 'l'}, {"ongrid", no_argument, 0, 'g'},
		{"frame-size", required_argument, 0, 's'}, {"rate", required_argument, 0, 'r'},
		{"loopback", no_argument, 0, 'L'}, {"in-process", no_argument, 0, 'I'},
		{"keep", required_argument, 0, 'k'}, {"report", required_argument, 0, 'R'},
		{"force", no_argument, 0, 'f'}, {"quiet", no_argument, 0, 'q'},
		{"verbose", no_argument, 0, 'v'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	memset(cfg, 0, sizeof(*cfg));
	cfg->verbosity = 1;
	cfg->so = (synth_opts){.params = 16000000, .lr = 1e-6, .seed = 1};
	cfg->po = (patch_opts){.frame_size = BFP_FRAME_SIZE_DEFAULT};
	cfg->steps = 10;
	cfg->rate = 1000000000ull;
	int c;
	while ((c = getopt_long(argc, argv, "p:n:l:gs:r:k:R:fqvh", lo, NULL)) != -1) {
		switch (c) {
		case 'p':
			if (parse_u64(optarg, 1ull << 34, &cfg->so.params) || cfg->so.params < 4096)
				return bad_value("demo", "--params", optarg);
			break;
		case 'n':
			if (parse_u32(optarg, 1, 100000, &cfg->steps))
				return bad_value("demo", "--steps", optarg);
			break;
		case 'l': {
			char *e;
			cfg->so.lr = strtod(optarg, &e);
			if (*e || !(cfg->so.lr > 0 && cfg->so.lr < 1))
				return bad_value("demo", "--lr", optarg);
			break;
		}
		case 'g': cfg->so.ongrid = 1; break;
		case 's':
			if (parse_u32(optarg, BFP_FRAME_SIZE_MIN, BFP_FRAME_SIZE_MAX,
				      &cfg->po.frame_size))
				return bad_value("demo", "--frame-size", optarg);
			break;
		case 'r':
			if (parse_u64(optarg, 400000000000ull, &cfg->rate))
				return bad_value("demo", "--rate", optarg);
			cfg->rate_given = 1;
			break;
		case 'L': cfg->loopback = 1; break;
		case 'I': cfg->in_process = 1; break;
		case 'k': cfg->keep = optarg; break;
		case 'R': cfg->report = optarg; break;
		case 'f': cfg->force = 1; break;
		case 'q': cfg->verbosity = 0; break;
		case 'v': cfg->verbosity = 2; break;
		case 'h': fputs(demo_usage, stdout); return 0;
		default: fputs(demo_usage, stderr); return 2;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "bfpatch demo: unexpected argument '%s'\n%s", argv[optind],
			demo_usage);
		return 2;
	}
	if (cfg->keep && strlen(cfg->keep) >= sizeof(((demo *)0)->keep))
		return bad_value("demo", "--keep", cfg->keep);
	if (cfg->in_process && (cfg->keep || cfg->report || cfg->loopback || cfg->rate_given)) {
		/* nothing runs but this process: no logs to keep or report on */
		fprintf(stderr, "bfpatch demo: --in-process runs no publisher, relay or shims: "
			"%s does not apply to it\n",
			cfg->keep ? "--keep" : cfg->report ? "--report"
			: cfg->loopback ? "--loopback" : "--rate");
		return 2;
	}
	if (out_is_stdout(cfg->report)) {
		fprintf(stderr, "bfpatch demo: --report -: the demo's table goes to standard "
			"output; give the page a file\n");
		return 2;
	}
	int rc = cfg->report ? out_check("demo", cfg->report, cfg->force, 0, NULL) : 0;
	return rc ? rc : -1;
}

/* A running demo: the trainer's trajectory, and the processes, buffers
 * and files demo_open took. */
typedef struct demo_run_state {
	const demo_config *cfg;
	demo d;
	synth *s;
	model cur;
	int have_cur;
	char traj[128];
	wbuf w[ACTORS];
	uint16_t *prev;          /* the trainer's weights of the step before */
} demo_run_state;

/* Where the other programs are: next to this one (build tree or
 * install), else on PATH. */
static int find_programs(demo *d, int *have_relay, char *err)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	exe[n > 0 ? n : 0] = 0;
	const char *exe_dir = dirname(exe);
	if (strlen(exe_dir) >= sizeof(d->self_dir))
		return set_err(err, ERRLEN, "the path of this program is too long");
	snprintf(d->self_dir, sizeof(d->self_dir), "%s", exe_dir);
	static const char *const shim_rel[] = {"", "../host_shim/", NULL};
	static const char *const relay_rel[] = {"", "../dpdk_app/", NULL};
	if (find_bin(d, "bfpatch-shim", shim_rel, d->shim_bin))
		return set_err(err, ERRLEN, "bfpatch-shim not found next to bfpatch or on PATH");
	*have_relay = find_bin(d, "bfpatch-relay", relay_rel, d->relay_bin) == 0;
	return 0;
}

/* The relay in network namespaces where it can run (root, ip netns,
 * bfpatch-relay), else loopback; says which. */
static int choose_topology(demo *d, const demo_config *cfg, int have_relay, char *err)
{
	const char *why = NULL;
	if (cfg->loopback)
		why = "--loopback";
	else if (geteuid() != 0)
		why = "not root";
	else if (!have_relay)
		why = "bfpatch-relay not found";
	if (!why) {
		snprintf(d->ns, sizeof(d->ns), "bfpd%d", (int)getpid());
		if (setup_netns(d)) {
			why = "cannot create network namespaces";
		} else if (start_relay(d)) {
			show_logs(d);
			return set_err(err, ERRLEN, "bfpatch-relay did not start (log above)");
		}
	}
	if (why) {
		stop_all(d);
		if (d->netns) {
			for (int i = 1; i <= ACTORS; i++)
				sh("ip netns del %sa%d 2>/dev/null", d->ns, i);
			sh("ip netns del %s 2>/dev/null", d->ns);
			d->netns = 0;
		}
		d->ns[0] = 0;
		if (d->verbosity)
			printf("topology: publisher -> %d shims over loopback, no relay (%s)\n", ACTORS, why);
	} else if (d->verbosity) {
		printf("topology: publisher (netns %s, 198.18.0.10) -> bfpatch-relay (DPDK net_tap, "
		       "198.18.0.1) -> bridge -> %d shims (netns %sa1..a%d, 198.18.0.21-2%d, veth)\n",
		       d->ns, ACTORS, d->ns, ACTORS, ACTORS);
	}
	return 0;
}

/* Everything the demo runs on: the trajectory's step 0 on disk, relay,
 * shims and publisher started and joined, the actors' buffers mapped.
 * On error demo_close still frees what was taken. */
static int demo_open(demo_run_state *r, const demo_config *cfg, char *err)
{
	demo *d = &r->d;
	memset(r, 0, sizeof(*r));
	r->cfg = cfg;
	d->rate = cfg->rate;
	d->frame_size = cfg->po.frame_size;
	d->verbosity = cfg->verbosity;
	if (cfg->keep)
		snprintf(d->keep, sizeof(d->keep), "%s", cfg->keep);
	r->s = synth_new(&cfg->so, &r->cur, err, ERRLEN);
	if (!r->s)
		return -1;
	r->have_cur = 1;
	if (cfg->verbosity)
		printf("bfpatch demo: %" PRIu64 " parameters (%zu tensors), lr %g, %s master, frames of "
		       "%u bytes, %u steps\n", r->cur.n_params, r->cur.n_tensors, cfg->so.lr,
		       cfg->so.ongrid ? "on-grid" : "off-grid", cfg->po.frame_size, cfg->steps);
	if (cfg->in_process)
		return 0;
	int have_relay = 0;
	if (find_programs(d, &have_relay, err))
		return -1;
	snprintf(d->dir, sizeof(d->dir), "/tmp/bfpdemo.XXXXXX");
	if (!mkdtemp(d->dir)) {
		d->dir[0] = 0;
		return set_err(err, ERRLEN, "cannot create a work directory in /tmp");
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_int;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	snprintf(d->key, sizeof(d->key), "%s/key", d->dir);
	if (keygen_file(d->key, 1))
		return set_err(err, ERRLEN, "cannot make a key in %s", d->dir);
	char path[PATH_MAX];
	snprintf(r->traj, sizeof(r->traj), "%s/traj", d->dir);
	mkdir(r->traj, 0755);
	snprintf(path, sizeof(path), "%s/step-0000.safetensors", r->traj);
	if (model_save(&r->cur, path, err, ERRLEN) || choose_topology(d, cfg, have_relay, err))
		return -1;
	if (start_shims(d, path) || start_publisher(d, r->traj))
		return set_err(err, ERRLEN, "cannot start the shims or the publisher");
	for (int i = 0; i < ACTORS; i++) {
		char log[PATH_MAX];
		snprintf(log, sizeof(log), "%s/shim%d.log", d->dir, i + 1);
		if (wait_for_line(log, "listening on", 20) ||
		    wbuf_open(&r->w[i], d->shm[i], err, ERRLEN)) {
			show_logs(d);
			return set_err(err, ERRLEN, "shim %d did not start (log above)", i + 1);
		}
	}
	/* the shims JOIN once a second: wait until the publisher heard them */
	char log[PATH_MAX];
	snprintf(log, sizeof(log), "%s/publish.log", d->dir);
	if (wait_for_line(log, "joined", 20)) {
		show_logs(d);
		return set_err(err, ERRLEN, "no subscriber reached the publisher (logs above)");
	}
	struct timespec ts = {1, 200 * 1000 * 1000}; /* every shim JOINs the relay */
	nanosleep(&ts, NULL);
	r->prev = alloc_aligned((size_t)r->cur.n_params * 2);
	if (!r->prev)
		return set_err(err, ERRLEN, "out of memory");
	return 0;
}

/* Wait until every actor committed version k and is READY: 0, or -1
 * after 120 s or an interrupt. */
static int wait_all_committed(const demo_run_state *r, uint32_t k)
{
	double deadline = now_s() + 120;
	while (now_s() < deadline && !interrupted) {
		int all = 1;
		for (int i = 0; i < ACTORS; i++)
			all &= atomic_load(&r->w[i].h->version) >= k &&
			       atomic_load(&r->w[i].h->state) == WBUF_READY;
		if (all)
			return 0;
		struct timespec ts = {0, 200 * 1000};
		nanosleep(&ts, NULL);
	}
	return -1;
}

/* The trainer takes each step and writes its checkpoint; every actor
 * must commit it and hold the trainer's bytes. Then the processes stop
 * and their counters are shown. */
static int demo_run(demo_run_state *r, char *err)
{
	const demo_config *cfg = r->cfg;
	demo *d = &r->d;
	const size_t bytes = (size_t)r->cur.n_params * 2;
	char path[PATH_MAX];
	int rc = 0;
	if (cfg->verbosity)
		printf("%4s %9s %10s %8s %8s %9s %12s %s\n", "step", "changed", "wire B", "frames",
		       "resent", "x dense", "publish->all", "actors == trainer");
	double total_s = 0;
	uint64_t total_wire = 0;
	for (uint32_t k = 1; k <= cfg->steps && !rc && !interrupted; k++) {
		memcpy(r->prev, r->cur.params, bytes);
		synth_step(r->s, &r->cur);
		uint64_t changed = 0;
		for (uint64_t i = 0; i < r->cur.n_params; i++)
			changed += r->prev[i] != r->cur.params[i];
		snprintf(path, sizeof(path), "%s/step-%04u.safetensors", r->traj, k);
		if (model_save(&r->cur, path, err, ERRLEN)) /* the trainer publishes */
			return -1;
		double t0 = now_s(); /* the checkpoint is there (renamed into place) */
		if (wait_all_committed(r, k)) {
			show_logs(d);
			return set_err(err, ERRLEN, "step %u: not every actor committed it in 120 s "
				       "(logs above)", k);
		}
		double t1 = now_s();
		/* the independent check: each actor's bytes against the trainer's */
		int same = 1;
		for (int i = 0; i < ACTORS; i++)
			same &= atomic_load(&r->w[i].h->version) == k &&
				memcmp(r->w[i].params, r->cur.params, bytes) == 0;
		uint64_t wire, frames, resent;
		sent_bytes(d, k, &wire, &frames, &resent);
		total_s += t1 - t0;
		total_wire += wire;
		if (cfg->verbosity)
			printf("%4u %8.3f%% %10" PRIu64 " %8" PRIu64 " %8" PRIu64 " %8.1fx %9.1f ms %s\n", k,
			       100.0 * (double)changed / (double)r->cur.n_params, wire, frames, resent,
			       wire ? (double)bytes / (double)wire : 0.0, (t1 - t0) * 1e3,
			       same ? "yes, all 3 (byte compare)" : "NO");
		fflush(stdout);
		if (!same)
			rc = set_err(err, ERRLEN, "step %u: an actor's weights differ from the "
				     "trainer's", k);
		/* drop step k-1's file: the publisher holds what it needs */
		snprintf(path, sizeof(path), "%s/step-%04u.safetensors", r->traj, k - 1);
		if (!cfg->keep && !cfg->report)
			unlink(path);
	}
	if (rc)
		return rc;
	if (interrupted)
		return set_err(err, ERRLEN, "interrupted");
	printf("all %u steps: every actor bit-exact with the trainer; %.1f MB on the wire "
	       "instead of %.1f MB dense (%.1fx), mean %.1f ms from publish to the last "
	       "commit\n", cfg->steps, (double)total_wire / 1e6, (double)bytes * cfg->steps / 1e6,
	       total_wire ? (double)bytes * cfg->steps / (double)total_wire : 0.0,
	       total_s * 1e3 / cfg->steps);
	fflush(stdout); /* before the counters other processes print */
	for (int i = 0; i < ACTORS; i++)
		if (r->w[i].map)
			wbuf_close(&r->w[i]);
	stop_all(d);
	/* the counters each process printed on exit */
	sh("grep -h 'bfpatch-shim: version' '%s'/shim*.log | sed 's/^bfpatch-shim: /  shim: /'",
	   d->dir);
	sh("grep -h 'bfpatch publish: at version' '%s/publish.log' | "
	   "sed 's/^bfpatch publish: /  publisher: /'", d->dir);
	if (d->netns)
		sh("awk '$1 == \"rx\" || $1 == \"tx\" || $1 == \"cache_hits\" || "
		   "$1 == \"nacks\" { s = s sep $1 \" \" $2; sep = \", \" } "
		   "END { print \"  relay: \" s }' '%s/relay.log'", d->dir);
	if (cfg->report && write_report(d, r->traj, cfg->steps, cfg->report, cfg->force, err))
		return -1;
	return 0;
}

/* Free what demo_open took (also after it failed): buffers, processes,
 * namespaces, files, memory. */
static void demo_close(demo_run_state *r)
{
	for (int i = 0; i < ACTORS; i++)
		if (r->w[i].map)
			wbuf_close(&r->w[i]);
	cleanup(&r->d);
	free(r->prev);
	if (r->s)
		synth_free(r->s);
	if (r->have_cur)
		model_free(&r->cur);
}

int cmd_demo(int argc, char **argv)
{
	demo_config cfg;
	int rc = demo_parse(argc, argv, &cfg);
	if (rc >= 0)
		return rc;
	static demo_run_state r;
	char err[ERRLEN] = "";
	rc = demo_open(&r, &cfg, err);
	if (!rc)
		rc = cfg.in_process ? run_in_process(r.s, &r.cur, &cfg.po, cfg.steps, cfg.verbosity, err)
				    : demo_run(&r, err);
	demo_close(&r);
	return rc ? die("demo", err) : 0;
}

/* The codec alone: each step diffed, the frames re-parsed as a receiver
 * would, applied to an independent copy and byte-compared. */
static int run_in_process(synth *s, model *cur, patch_opts *po, uint32_t steps, int verbosity,
			  char *err)
{
	size_t bytes = (size_t)cur->n_params * 2;
	uint16_t *prev = alloc_aligned(bytes), *actor = alloc_aligned(bytes);
	if (!prev || !actor) {
		free(prev);
		free(actor);
		return set_err(err, ERRLEN, "out of memory");
	}
	memcpy(actor, cur->params, bytes);
	if (verbosity)
		printf("%4s %9s %10s %8s %10s %9s %9s %9s %s\n", "step", "changed", "patch B", "frames",
		       "bits/chg", "x dense", "enc ms", "apply ms", "actor == trainer");
	int rc = 0;
	for (uint32_t k = 1; k <= steps && rc == 0; k++) {
		memcpy(prev, cur->params, bytes);
		synth_step(s, cur);
		uint64_t changed = 0;
		for (uint64_t i = 0; i < cur->n_params; i++)
			changed += prev[i] != cur->params[i];
		po->base_version = k - 1;
		po->target_version = k;
		model old = *cur;
		old.params = prev;
		patch p;
		double t0 = now_s();
		rc = patch_encode(&old, cur, po, &p, err, ERRLEN);
		double t1 = now_s();
		if (rc)
			break;
		patch rx = {0};
		for (size_t i = 0; i < p.n && rc == 0; i++)
			rc = patch_push(&rx, p.buf + p.off[i], p.off[i + 1] - p.off[i]);
		if (rc == 0)
			rc = patch_parse(&rx, err, ERRLEN);
		double t2 = now_s();
		if (rc == 0)
			rc = patch_apply(&rx, actor, cur->n_params, cur->model_id, 0, 0, err, ERRLEN);
		double t3 = now_s();
		int same = rc == 0 && memcmp(actor, cur->params, bytes) == 0;
		if (verbosity)
			printf("%4u %8.3f%% %10zu %8zu %10.2f %8.1fx %9.1f %9.1f %s\n", k,
			       100.0 * (double)changed / (double)cur->n_params, p.len, p.n,
			       changed ? (double)p.len * 8 / (double)changed : 0.0,
			       (double)bytes / (double)p.len, (t1 - t0) * 1e3, (t3 - t2) * 1e3,
			       same ? "yes (byte compare)" : "NO");
		if (verbosity > 1) {
			size_t by_enc[BFP_ENC_LAST + 1] = {0};
			for (size_t i = 0; i < p.n; i++) {
				bfp_frame_header h;
				if (bfp_frame_parse(p.buf + p.off[i], p.off[i + 1] - p.off[i], &h) ==
				    BFP_OK && h.encoding <= BFP_ENC_LAST)
					by_enc[h.encoding]++;
			}
			printf("     frames by encoding:");
			for (unsigned e = 1; e <= BFP_ENC_LAST; e++)
				if (by_enc[e])
					printf(" %u: %zu", e, by_enc[e]);
			printf(" (docs/FORMAT.md 2.1)\n");
		}
		if (rc == 0 && !same)
			rc = set_err(err, ERRLEN, "step %u: actor weights differ from the trainer's", k);
		patch_free(&p);
		patch_free(&rx);
	}
	free(prev);
	free(actor);
	if (rc == 0)
		printf("all %u steps verified bit-exact\n", steps);
	return rc;
}
