/*
 * main.c: bfpatch-shim, the actor-side daemon. It receives frames on a
 * kernel UDP socket (recvmmsg) or a DPDK port, stages those of the next
 * versions while the actor runs on the current one, NACKs what is
 * missing, and when a version is complete (and the actor is at a safe
 * point, if so configured) applies it into the weight buffer (wbuf.h) on
 * several threads, every frame checked and hash-verified before it is
 * written (stage.c). main() has the relay's shape: options into a config
 * (options.c), open (setup.c), run (here), close.
 */
#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "events.h"
#include "shim.h"
#ifdef BFP_SHIM_DPDK
#include "shim_dpdk.h"
#endif
#include "util.h"

static volatile sig_atomic_t quit, dump_stats;

static void on_signal(int sig)
{
	if (sig == SIGUSR1)
		dump_stats = 1;
	else
		quit = 1;
}

static void catch_signals(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);
}

/* The counters, on SIGUSR1 and on exit (tests read this line). */
static void print_stats(const shim *s)
{
	const uint32_t state = shim_state(s);
	printf("bfpatch-shim: version %u (%s); frames %" PRIu64 " (%" PRIu64 " bytes; duplicates %"
	       PRIu64 ", old %" PRIu64 ", ahead %" PRIu64 ", patches during a resync %" PRIu64
	       ", bad %" PRIu64 ", other model %" PRIu64
	       ", over budget %" PRIu64 "), staged %" PRIu64 " bytes, NACKs %" PRIu64
	       ", commits %" PRIu64 " (%" PRIu64 " keyframe), resyncs %" PRIu64
	       ", verified %" PRIu64 " bytes, commit ms mean %.1f max %.1f, frames prepared "
	       "while staged %" PRIu64 " (refused %" PRIu64 ", dropped for room %" PRIu64 "), "
	       "refused by authentication %" PRIu64 ", frames of another publisher run %" PRIu64
	       ", new runs %" PRIu64 ", HEARTBEATs not from --upstream %" PRIu64
	       ", staged patches dropped for another frame count %" PRIu64
	       ", later versions dropped for room %" PRIu64 ", dropped by the kernel (socket "
	       "full) %u\n",
	       shim_version(s), state == WBUF_READY ? "ready" : state == WBUF_COMMITTING ?
	       "committing" : "resync", s->rx, s->rx_bytes, s->dup, s->old, s->ahead,
	       s->in_resync, s->bad, s->other_model, s->over_budget, s->staged_bytes, s->nacks,
	       s->commits, s->key_commits, s->resyncs, s->verified_bytes,
	       s->commits ? s->commit_ms_total / (double)s->commits : 0.0, s->commit_ms_max,
	       s->prepared, s->prep_fail, s->prep_dropped, s->auth_fail, s->other_run,
	       s->run_changes, s->foreign_hb, s->recount, s->evicted, s->sock_drops);
	fflush(stdout);
}

/* What the shim starts from, said once the signals are caught. */
static void print_start(shim *s)
{
	if (shim_state(s) == WBUF_COMMITTING)
		printf("bfpatch-shim: a commit to version %u was interrupted; finishing it\n",
		       atomic_load(&s->w.h->target));
	if (shim_state(s) == WBUF_RESYNC)
		printf("bfpatch-shim: the buffer failed verification before; waiting for a "
		       "keyframe stream\n");
	printf("bfpatch-shim: buffer %s at version %u, %" PRIu64 " parameters, listening on %u, "
	       "%d apply threads, commit %s\n", s->cf.buffer, shim_version(s), s->w.h->n_params,
	       s->cf.listen_port, s->cf.threads,
	       s->cf.safe_point ? "at the actor's safe point" : "when complete");
	fflush(stdout);
	char addr[INET_ADDRSTRLEN];
	struct in_addr ia = {.s_addr = htonl(s->cf.listen_ip)};
	inet_ntop(AF_INET, &ia, addr, sizeof(addr));
	events_emit(&s->ev, "start", "\"version\":%u,\"params\":%" PRIu64 ",\"rate_bps\":%" PRIu64
		    ",\"addr\":\"%s:%u\"", shim_version(s), s->w.h->n_params,
		    (uint64_t)s->cf.rate_kbps * 1000, addr, s->cf.listen_port);
}

/* The counters on exit: the event log's, and the DPDK devices'. */
static void print_end(shim *s)
{
	events_emit(&s->ev, "stats", "\"frames\":%" PRIu64 ",\"rx_bytes\":%" PRIu64 ",\"dup\":%"
		    PRIu64 ",\"old\":%" PRIu64 ",\"bad\":%" PRIu64 ",\"nacks\":%" PRIu64
		    ",\"commits\":%" PRIu64 ",\"resyncs\":%" PRIu64 ",\"verified_bytes\":%" PRIu64
		    ",\"version\":%u,\"auth_fail\":%" PRIu64 ",\"ahead\":%" PRIu64
		    ",\"in_resync\":%" PRIu64 ",\"over_budget\":%" PRIu64 ",\"foreign_heartbeats\":%"
		    PRIu64 ",\"socket_drops\":%u,\"other_run\":%" PRIu64 ",\"run_changes\":%" PRIu64,
		    s->rx, s->rx_bytes, s->dup, s->old, s->bad, s->nacks, s->commits, s->resyncs,
		    s->verified_bytes, shim_version(s), s->auth_fail, s->ahead, s->in_resync,
		    s->over_budget, s->foreign_hb, s->sock_drops, s->other_run, s->run_changes);
#ifdef BFP_SHIM_DPDK
	if (s->port) {
		shim_port_stats ps;
		shim_port_stats_get(s->port, &ps);
		printf("bfpatch-shim: port: %" PRIu64 " packets, %" PRIu64 " frames delivered, "
		       "link down %" PRIu64 " times, %" PRIu64 " restarts\n",
		       ps.rx_packets, ps.delivered, ps.link_downs, ps.restarts);
	}
	if (s->dma) {
		shim_dma_stats ds;
		shim_dma_stats_get(s->dma, &ds);
		printf("bfpatch-shim: dma: %" PRIu64 " copies, %" PRIu64 " bytes, %" PRIu64
		       " errors\n", ds.copies, ds.bytes, ds.errors);
	}
#endif
}

int shim_run(shim *s)
{
	print_start(s);
	s->start = now_s();
	int rc = 0;
	while (!quit && rc == 0) {
		double t = now_s();
		if (s->cf.exit_after > 0 && t - s->start > s->cf.exit_after)
			break;
		if (dump_stats) {
			dump_stats = 0;
			print_stats(s);
		}
		if (t >= s->next_join) {
			stage_join(s); /* JOIN doubles as the heartbeat */
			s->next_join = t + 1.0;
			net_say_quiet(s, t);
		}
		stage_nack_due(s, t);
		rc = stage_try_commit(s); /* also when the actor reached its safe point */
		/* between bursts of frames: prepare what is staged */
		int more_prep = rc == 0 && stage_prepare_some(s, 0.002);
		int wait_ms = more_prep ? 0 : 10;
		if (s->port && t >= s->port_next_watch) {
			net_port_watch(s, t);
			s->port_next_watch = t + 0.1;
		}
		int sock = 1;
		if (s->port && !rc) {
			if (net_port_poll(s, &rc) && !rc) {
				rc = stage_try_commit(s);
				/* while the port delivers, the socket too, without
				 * waiting, once a millisecond: a port that never runs
				 * dry (a long keyframe stream, a flood) must not keep
				 * HEARTBEATs from being heard (a new run, a version to
				 * NACK), nor cost a system call per burst */
				sock = t >= s->port_next_sock;
				if (sock)
					s->port_next_sock = t + 0.001;
			}
			wait_ms = 0; /* poll mode */
		}
		if (!rc && sock)
			rc = net_receive(s, wait_ms);
	}
	print_stats(s);
	print_end(s);
	return rc;
}

int main(int argc, char **argv)
{
	shim_config cfg;
	int rc = shim_parse_args(argc, argv, &cfg);
	if (rc)
		return rc < 0 ? 2 : 0;
	shim S;
	rc = shim_open(&S, &cfg);
	if (rc == 0) {
		catch_signals();
		rc = shim_run(&S);
	}
	shim_close(&S);
	return rc ? 1 : 0;
}
