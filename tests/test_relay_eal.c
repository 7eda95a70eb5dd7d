/*
 * test_relay_eal.c: the relay's data path under a real EAL (--no-huge
 * --no-pci, one net_null port): fan-out outputs are header mbufs chained
 * to clones of the one received payload (zero copies), carry each
 * subscriber's addresses with valid checksums, NACKs are answered from the
 * cache only to JOINed subscribers, the cache releases every mbuf it
 * held, and pacing admits about the configured rate; with two fan-out
 * lcores, each subscriber's outputs are made by the one that owns it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <rte_cycles.h>
#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_malloc.h>
#include <rte_telemetry.h>

#include "auth.h"
#include "bfpatch.h"
#include "relay.h"
#include "eal_rundir.h"

static relay *T;
static const uint8_t PEER_MAC[6] = {2, 0, 0, 0, 0, 0x42};
static bfp_encoder enc;

static int eal_up(void)
{
	static int done;
	if (done)
		return 0;
	char prefix[64];
	snprintf(prefix, sizeof(prefix), "--file-prefix=bfptest%d", (int)getpid());
	/* lcore 1, on the same CPU, is never launched: the fan-out group
	 * runs its lane's jobs from this thread (relay_lane_poll) */
	char *args[] = {"test", "--no-huge", "-m", "512", "--no-pci", prefix, "--lcores=0@0,1@0",
			"--vdev=net_null0", "--log-level=lib.eal:error", NULL};
	if (rte_eal_init(9, args) < 0)
		return -1;
	t_eal_rundir_at_exit();
	done = 1;
	return 0;
}

/* One relay for the group (closing a vdev port removes it). */
static int setup(void **state)
{
	(void)state;
	if (eal_up())
		return -1;
	T = rte_zmalloc("relay", sizeof(*T), RTE_CACHE_LINE_SIZE);
	char *argv[] = {"relay", "--cache-bytes", "1M", "--queue", "1024", NULL};
	if (!T || relay_parse_args(5, argv, &T->cf) || relay_prepare(T) ||
	    relay_pools_create(T) || relay_ports_start(T) || relay_static_subs(T))
		return -1;
	return 0;
}

/* A relay with two fan-out lanes: the main lcore and lcore 1. The first
 * group's port went with its relay (closing a vdev port removes it), so
 * this one gets a port of its own. */
static int setup_lanes(void **state)
{
	(void)state;
	if (eal_up() || (rte_eth_dev_count_avail() == 0 && rte_dev_probe("net_null1")))
		return -1;
	T = rte_zmalloc("relay", sizeof(*T), RTE_CACHE_LINE_SIZE);
	char *argv[] = {"relay", "--cache-bytes", "1M", "--fanout-lcores", "2", NULL};
	if (!T || relay_parse_args(5, argv, &T->cf) || relay_prepare(T) ||
	    relay_pools_create(T) || relay_ports_start(T) || relay_static_subs(T))
		return -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	relay_teardown(T);
	T = NULL;
	return 0;
}

/* After each test: no subscribers, nothing queued. */
static int drop_subs(void **state)
{
	(void)state;
	for (unsigned i = 0; i < MAX_SUBS; i++)
		if (T->subs[i].used)
			relay_sub_remove(T, &T->subs[i]);
	rte_eth_tx_buffer_flush(0, 0, T->txb[0]);
	return 0;
}

/* A received datagram from the peer to the relay, as the NIC gives it. */
static struct rte_mbuf *datagram(uint16_t dport, const uint8_t *pl, size_t n)
{
	struct rte_mbuf *m = rte_pktmbuf_alloc(T->pool[0]);
	assert_non_null(m);
	uint8_t *p = (uint8_t *)rte_pktmbuf_append(m, (uint16_t)(RP_HDRS + n));
	rp_build_udp(p, T->mac[0].addr_bytes, PEER_MAC, 0xC6120063u, T->cf.ip[0], 7777, dport,
		     (uint16_t)n, rp_sum(pl, n, 0), 1);
	memcpy(p + RP_HDRS, pl, n);
	m->port = 0;
	return m;
}

/* One frame of a patch to version (key 1: of the keyframe stream of it;
 * key 2: of the patch, but every value new, so keyframe-coded IN_PATCH). */
static size_t make_frame(uint8_t *out, uint32_t index, uint32_t version, int key)
{
	enum { N = 560 }; /* 300 used, or all for key 2 (more than sparse fits) */
	uint16_t b[N], w[N];
	const uint32_t n = key == 2 ? N : 300;
	for (uint32_t i = 0; i < n; i++) {
		b[i] = (uint16_t)(0x3C00 + i * 7 + index);
		w[i] = (uint16_t)(b[i] + (i % 3 == 0)); /* a third change by one step */
		if (key == 2)
			w[i] = (uint16_t)(b[i] ^ (0x5A5A + i * 0x9E37));
	}
	bfp_encode_opts o;
	memset(&o, 0, sizeof(o));
	o.frame_size = 1200;
	o.model_id = 99;
	o.base_version = key == 1 ? 0 : version - 1;
	o.target_version = version;
	o.first_index = index;
	o.frame_count = 1000;
	o.flags = key == 1 ? BFP_ENC_F_KEYFRAME : 0;
	size_t len;
	assert_int_equal(bfp_encoder_init(&enc, &o, key == 1 ? NULL : b, w, n, 0, n), BFP_OK);
	assert_int_equal(bfp_encode_next(&enc, out, 1200, &len), BFP_OK);
	return len;
}

static size_t frame(uint8_t *out, uint32_t index, uint32_t version)
{
	return make_frame(out, index, version, 0);
}

/* One packet as the RX loop handles it: a burst of one. */
static void receive(struct rte_mbuf *m)
{
	lcore_stats *st = &T->stats[rte_lcore_id()];
	if (relay_rx_classify(T, m, st))
		relay_core_packet(T, m, st);
	relay_evicted_free(T);
	relay_lanes_flush(T, st);
}

static sub *paced_sub(uint32_t ip, uint16_t port, uint8_t last_mac)
{
	sub *s = relay_sub_add(T, ip, port, 0, 8000000, &T->stats[rte_lcore_id()]);
	assert_non_null(s);
	s->is_static = 1;
	s->mac_from = MAC_CONF;
	uint8_t mac[6] = {2, 0, 0, 0, 1, last_mac};
	memcpy(s->mac, mac, 6);
	relay_sub_sync(T, s, 0);
	return s;
}

/* Each subscriber's output: its own header, chained to the cached
 * payload itself (no copy), with valid IPv4 and UDP checksums; the last
 * is the cached mbuf itself, its header in the frame's headroom, one
 * segment over the same bytes; the cached frame's bytes stay as received,
 * from relay_frame_off() on. */
static void test_fanout_chains_headers_to_the_shared_payload(void **state)
{
	(void)state;
	sub *s[3];
	for (int i = 0; i < 3; i++)
		s[i] = paced_sub(0xC6120010u + (uint32_t)i, (uint16_t)(7500 + i), (uint8_t)i);
	uint8_t fr[1200];
	size_t fl = frame(fr, 5, 2);
	receive(datagram(T->cf.data_port, fr, fl));
	struct rte_mbuf *cached = rp_cache_get(&T->cache, 99, 2, 5);
	assert_non_null(cached);
	/* the cache, 2 clones, the last output */
	assert_int_equal(rte_mbuf_refcnt_read(cached), 1 + 3);
	assert_int_equal(relay_frame_off(cached), RP_HDRS);
	const uint8_t *cf = rte_pktmbuf_mtod_offset(cached, uint8_t *, RP_HDRS);
	const uint16_t cached_len = rte_pktmbuf_data_len(cached);
	int in_head = 0;
	for (int i = 0; i < 3; i++) {
		struct rte_mbuf *o = NULL;
		assert_int_equal(rte_ring_dequeue(s[i]->q, (void **)&o), 0);
		if (o->nb_segs == 1) { /* the headers in the frame's headroom */
			in_head++;
			assert_ptr_equal(o, cached);
			assert_ptr_equal(rte_pktmbuf_mtod_offset(o, uint8_t *, RP_HDRS), cf);
		} else {
			assert_int_equal(o->nb_segs, 2);
			assert_int_equal(rte_pktmbuf_data_len(o), RP_HDRS);
			assert_ptr_equal(rte_pktmbuf_mtod(o->next, void *), cf);
		}
		uint8_t flat[1300];
		const uint8_t *p = rte_pktmbuf_read(o, 0, rte_pktmbuf_pkt_len(o), flat);
		rp_addrs a;
		memset(&a, 0, sizeof(a));
		a.ip[0] = s[i]->ip;
		a.n_ip = 1;
		a.data_port = s[i]->data_port;
		a.control_port = 1;
		a.check_crc = 1;
		rp_pkt k;
		/* the subscriber's view: to it, valid checksums, the frame */
		assert_int_equal(rp_classify(p, rte_pktmbuf_pkt_len(o), &a, &k), RP_DATA);
		assert_memory_equal(p, s[i]->mac, 6);
		assert_memory_equal(p + RP_HDRS, fr, fl);
		rte_pktmbuf_free(o);
	}
	assert_int_equal(in_head, 1);
	assert_int_equal(rte_mbuf_refcnt_read(cached), 1);
	assert_int_equal(rte_pktmbuf_data_len(cached), cached_len);
	assert_int_equal(cached_len, RP_HDRS + fl);
	assert_memory_equal(cf, fr, fl);
}

/* Per-subscriber counters reach DPDK telemetry: every name is one
 * telemetry accepts (it refuses '.' and ':', as in 198.18.0.16:7500). */
static void test_telemetry_lists_every_subscriber(void **state)
{
	(void)state;
	paced_sub(0xC6120010u, 7500, 1);
	paced_sub(0xC6120011u, 7501, 2);
	struct rte_tel_data *d = rte_tel_data_alloc();
	assert_non_null(d);
	assert_int_equal(relay_tel_subscribers(T, d), 0);
	rte_tel_data_free(d);
}

static const struct model_latest *latest_of(uint64_t m)
{
	for (unsigned i = 0; i < RP_CACHE_MODELS; i++)
		if (T->latest[i].t && T->latest[i].id == m)
			return &T->latest[i];
	return NULL;
}

/* The newest version told to subscribers is per model: model 99's frames
 * of version 2 do not make model 7's subscribers wait for a version 2 of
 * theirs; the upstream's HEARTBEAT sets it (a publisher that started over
 * lower is followed), frames only raise it; a model beyond those tracked
 * replaces the one with the oldest news. */
static void test_newest_version_is_kept_per_model(void **state)
{
	(void)state;
	memset(T->latest, 0, sizeof(T->latest));
	uint8_t fr[1200];
	size_t fl = frame(fr, 0, 2); /* model 99, version 2 */
	receive(datagram(T->cf.data_port, fr, fl));
	relay_latest_note(T, 7, 40, 0);
	assert_int_equal(latest_of(99)->version, 2);
	assert_int_equal(latest_of(7)->version, 40);
	relay_latest_note(T, 7, 39, 0); /* a late frame */
	assert_int_equal(latest_of(7)->version, 40);
	relay_latest_note(T, 7, 3, 1); /* upstream: started over */
	assert_int_equal(latest_of(7)->version, 3);
	assert_int_equal(latest_of(99)->version, 2);
	for (uint64_t m = 1000; m < 1000 + RP_CACHE_MODELS; m++)
		relay_latest_note(T, m, 1, 0);
	assert_null(latest_of(99)); /* the oldest news */
	assert_non_null(latest_of(1000 + RP_CACHE_MODELS - 1));
	memset(T->latest, 0, sizeof(T->latest));
}

/* Sizing: with the RX rings full and the cache full, the free RX mbufs
 * paced queues may fill down to the reserve are at least a quarter of
 * what the rings leave, for every configuration the relay accepts (the
 * reserve once counted the rings again and left nothing to queue). */
static void test_mbuf_sizing_leaves_room_to_queue(void **state)
{
	(void)state;
	for (unsigned ports = 1; ports <= 4; ports++)
		for (unsigned workers = 0; workers <= 8; workers++) {
			unsigned nq = workers ? workers : 1;
			unsigned rings = relay_rx_rings_of(ports, nq, workers);
			unsigned reserve = relay_rx_reserve_of(ports, nq, workers);
			for (uint32_t n = relay_rx_min_of(ports, nq, workers); n < rings + 300000;
			     n = n * 3 / 2) {
				uint32_t want;
				uint32_t cap = relay_cache_cap_of(n, rings, 1ull << 30, &want);
				assert_true(n - rings - cap >= reserve + (n - rings) / 4);
			}
		}
}

/* --events: first_frame for every version seen first, an older one too
 * (a publisher that started over), once each, with frames of two
 * versions interleaved */
static void test_first_frame_events_follow_versions_that_go_back(void **state)
{
	(void)state;
	char path[] = "/tmp/bfp-relay-events-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(events_open(&T->ev, path, "relay", "t"), 0);
	uint8_t fr[1200];
	const uint32_t seq[] = {53, 54, 53, 54, 51, 52, 51, 54};
	for (size_t i = 0; i < sizeof(seq) / sizeof(seq[0]); i++)
		receive(datagram(T->cf.data_port, fr, frame(fr, (uint32_t)i, seq[i])));
	events_close(&T->ev);
	T->ev.fd = -1;
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	char line[512], got[64] = "";
	while (fgets(line, sizeof(line), f)) {
		const char *v = strstr(line, "\"first_frame\",\"version\":");
		if (v)
			snprintf(got + strlen(got), sizeof(got) - strlen(got), "%u ",
				 (unsigned)strtoul(v + strlen("\"first_frame\",\"version\":"), NULL,
						   10));
	}
	fclose(f);
	unlink(path);
	assert_string_equal(got, "53 54 51 52 ");
}

/* A slow (paced) subscriber's queue never takes the RX mbufs the ports
 * need: with the pool down to its reserve, its output is dropped and
 * counted, and an unpaced subscriber still gets the frame. */
static void test_slow_subscriber_leaves_the_rx_reserve(void **state)
{
	(void)state;
	sub *slow = paced_sub(0xC6120010u, 7500, 1);
	sub *fast = paced_sub(0xC6120011u, 7501, 2);
	fast->bucket.rate = 0; /* unpaced: sent at once */
	unsigned avail = rte_mempool_avail_count(T->pool[0]);
	assert_true(avail > T->rx_reserve + 2);
	enum { MAXH = 16384 };
	static struct rte_mbuf *held[MAXH];
	unsigned n = avail - T->rx_reserve; /* leaves the reserve and 1 */
	assert_true(n < MAXH);
	assert_int_equal(rte_pktmbuf_alloc_bulk(T->pool[0], held, n), 0);
	uint8_t fr[1200];
	uint64_t drops = slow->drops, fast_tx = fast->tx_pkts;
	uint64_t reserve_drops = relay_sum_counter(T, C_RX_RESERVE);
	receive(datagram(T->cf.data_port, fr, frame(fr, 21, 2)));
	assert_int_equal(slow->drops, drops + 1);
	/* counted as what it is, not as a full queue */
	assert_int_equal(relay_sum_counter(T, C_RX_RESERVE), reserve_drops + 1);
	assert_int_equal(rte_ring_count(slow->q), 0);
	assert_int_equal(fast->tx_pkts, fast_tx + 1);
	for (unsigned i = 0; i < n; i++)
		rte_pktmbuf_free(held[i]);
	/* with the pool back, the slow subscriber's output is queued */
	receive(datagram(T->cf.data_port, fr, frame(fr, 22, 2)));
	assert_int_equal(rte_ring_count(slow->q), 1);
}

static void ctl_send_range(uint8_t type, uint16_t src_port, uint32_t first, uint32_t count,
			   uint16_t flags);

/* A control message msg[0, n) from the peer's UDP port src_port. */
static void ctl_deliver(const uint8_t *msg, size_t n, uint16_t src_port)
{
	struct rte_mbuf *m = datagram(T->cf.control_port, msg, n);
	/* the control message comes from src_port: rewrite and fix the sum */
	uint8_t *p = rte_pktmbuf_mtod(m, uint8_t *);
	p[34] = (uint8_t)(src_port >> 8);
	p[35] = (uint8_t)src_port;
	p[40] = p[41] = 0; /* UDP checksum 0: not computed (allowed in IPv4) */
	receive(m);
}

static void ctl_send_flags(uint8_t type, uint16_t src_port, uint32_t index, uint16_t flags)
{
	ctl_send_range(type, src_port, index, 1, flags);
}

static void ctl_send_range(uint8_t type, uint16_t src_port, uint32_t first, uint32_t count,
			   uint16_t flags)
{
	rp_ctl c;
	uint8_t msg[256];
	memset(&c, 0, sizeof(c));
	c.type = type;
	c.flags = flags;
	c.model_id = 99;
	/* a JOIN at version 2, or at NONE or RELAY given as its index */
	c.version = type == RP_JOIN && first >= RP_VERSION_NONE ? first : 2;
	if (type == RP_JOIN) /* 7600 from 9001; one subscriber per source port */
		c.data_port = (uint16_t)(src_port - 1401);
	if (type == RP_NACK) {
		c.n_ranges = 1;
		c.ranges[0] = (rp_range){first, count};
	}
	ctl_deliver(msg, rp_ctl_build(msg, sizeof(msg), &c), src_port);
}

static void ctl_send(uint8_t type, uint16_t src_port, uint32_t index)
{
	ctl_send_flags(type, src_port, index, 0);
}

/* cmd sent to this process's DPDK telemetry socket, as
 * dpdk-telemetry.py sends it; its JSON answer in out. */
static void telemetry_ask(const char *cmd, char *out, size_t cap)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/dpdk_telemetry.v2",
		 rte_eal_get_runtime_dir());
	int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_true(recv(fd, out, cap - 1, 0) > 0); /* its greeting */
	assert_int_equal(send(fd, cmd, strlen(cmd), 0), (ssize_t)strlen(cmd));
	ssize_t n = recv(fd, out, cap - 1, 0);
	assert_true(n > 0);
	out[n] = 0;
	close(fd);
}

/* The value of counter name in a telemetry answer. */
static uint64_t tel_counter(const char *json, const char *name)
{
	char key[64];
	snprintf(key, sizeof(key), "\"%s\":", name);
	const char *at = strstr(json, key);
	if (!at)
		fail_msg("no %s in %s", name, json);
	return strtoull(at + strlen(key), NULL, 10);
}

/* A key file of id 1 (mode 0600, docs/SECURITY.md) at path. */
static void key_file(const char *path, uint8_t fill)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "1 ");
	for (int i = 0; i < 32; i++)
		fprintf(f, "%02x", fill);
	fprintf(f, "\n");
	assert_int_equal(fclose(f), 0);
	assert_int_equal(chmod(path, 0600), 0);
}

/* With --key, control messages refused by authentication reach DPDK
 * telemetry by reason, as the exit lines give them: one unsigned and
 * one signed with another key of the same id are one auth_ctl_unsigned
 * and one auth_ctl_bad_tag, and two drop_auth. */
static void test_telemetry_counts_control_messages_refused_by_reason(void **state)
{
	(void)state;
	char path[64], err[256], before[16384], after[16384];
	rp_auth *other = calloc(1, sizeof(*other));
	assert_non_null(other);
	snprintf(path, sizeof(path), "/tmp/bfprelaykey%d", (int)getpid());
	assert_int_equal(rp_auth_init(), 0);
	key_file(path, 0x5A);
	if (rp_auth_load(&T->auth, path, err, sizeof(err))) {
		unlink(path);
		free(other);
		if (strstr(err, "libsodium"))
			skip(); /* a build that takes no keys */
		fail_msg("%s", err);
	}
	key_file(path, 0xA5);
	assert_int_equal(rp_auth_load(other, path, err, sizeof(err)), 0);
	unlink(path);
	relay_telemetry_register(T);
	telemetry_ask("/bfpatch/stats", before, sizeof(before));

	rp_ctl c;
	uint8_t msg[256];
	memset(&c, 0, sizeof(c));
	c.type = RP_JOIN;
	c.model_id = 99;
	c.data_port = 7600;
	ctl_deliver(msg, rp_ctl_build(msg, sizeof(msg), &c), 9010);
	ctl_deliver(msg, rp_auth_ctl_build(other, msg, sizeof(msg), &c), 9011);
	telemetry_ask("/bfpatch/stats", after, sizeof(after));
	T->auth.n_keys = 0; /* the other tests' relay runs without keys */
	free(other);
	assert_null(relay_sub_by_control(T, 0xC6120063u, 9010));
	assert_null(relay_sub_by_control(T, 0xC6120063u, 9011));
	static const char *const same[] = {"auth_ctl_stale", "auth_ctl_future", "auth_ctl_replay",
					   "auth_ctl_unknown_key", "auth_senders_evicted"};
	for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++)
		assert_int_equal(tel_counter(after, same[i]), tel_counter(before, same[i]));
	assert_int_equal(tel_counter(after, "auth_ctl_unsigned"),
			 tel_counter(before, "auth_ctl_unsigned") + 1);
	assert_int_equal(tel_counter(after, "auth_ctl_bad_tag"),
			 tel_counter(before, "auth_ctl_bad_tag") + 1);
	assert_int_equal(tel_counter(after, "drop_auth"), tel_counter(before, "drop_auth") + 2);
}

/* A keyframe stream and the patch of one version share (version, index):
 * the cache keeps both, and a NACK's KEY flag picks which is resent. */
static void test_cache_keeps_keyframes_apart_from_patch_frames(void **state)
{
	(void)state;
	uint8_t fp[1200], fk[1200];
	size_t lp = make_frame(fp, 11, 2, 0), lk = make_frame(fk, 11, 2, 1);
	receive(datagram(T->cf.data_port, fp, lp));
	receive(datagram(T->cf.data_port, fk, lk));
	struct rte_mbuf *p = rp_cache_get(&T->cache, 99, 2, 11);
	struct rte_mbuf *k = rp_cache_get(&T->cache, cache_model(99, 1), 2, 11);
	assert_non_null(p);
	assert_non_null(k);
	assert_int_equal(rte_pktmbuf_pkt_len(p), lp);
	assert_memory_equal(rte_pktmbuf_mtod(p, void *), fp, lp);
	assert_int_equal(rte_pktmbuf_pkt_len(k), lk);
	assert_memory_equal(rte_pktmbuf_mtod(k, void *), fk, lk);
	lcore_stats *st = &T->stats[rte_lcore_id()];
	ctl_send(RP_JOIN, 9002, 0);
	uint64_t hits = st->c[C_CACHE_HIT];
	assert_int_equal(rte_mbuf_refcnt_read(k), 1);
	ctl_send_flags(RP_NACK, 9002, 11, RP_NACK_KEY);
	assert_int_equal(st->c[C_CACHE_HIT], hits + 1);
	/* the keyframe's payload went out (a clone of it is queued) */
	assert_int_equal(rte_mbuf_refcnt_read(k), 2);
	assert_int_equal(rte_mbuf_refcnt_read(p), 1);
	ctl_send(RP_LEAVE, 9002, 0);
	/* a keyframe-coded frame of a patch (IN_PATCH) is a patch frame: a
	 * NACK of the patch finds it */
	uint8_t fi[1200];
	size_t li = make_frame(fi, 12, 2, 2);
	assert_true(fi[5] == BFP_ENC_KEY_RAW || fi[5] == BFP_ENC_KEY_ZSTD);
	assert_int_equal(fi[6], BFP_FLAG_IN_PATCH);
	receive(datagram(T->cf.data_port, fi, li));
	assert_non_null(rp_cache_get(&T->cache, 99, 2, 12));
	assert_null(rp_cache_get(&T->cache, cache_model(99, 1), 2, 12));
}

/* Outputs a subscriber has had: sent, queued or held for tokens. */
static uint64_t outputs(const sub *s)
{
	return s->tx_pkts + rte_ring_count(s->q) + (s->held != NULL);
}

/* A keyframe stream of version 2 goes to the subscriber whose JOIN asked
 * for one (NONE), to a relay and to static subscribers, not to one that
 * holds version 2 already: one JOIN must not send the whole model to
 * every subscriber; patch frames go to all. */
static void test_keyframe_streams_go_to_those_that_asked(void **state)
{
	(void)state;
	ctl_send(RP_JOIN, 9005, 0);                /* at version 2 */
	ctl_send(RP_JOIN, 9006, RP_VERSION_NONE);  /* asks for a keyframe stream */
	ctl_send(RP_JOIN, 9007, RP_VERSION_RELAY); /* a relay */
	sub *a = relay_sub_by_control(T, 0xC6120063u, 9005);
	sub *b = relay_sub_by_control(T, 0xC6120063u, 9006);
	sub *rl = relay_sub_by_control(T, 0xC6120063u, 9007);
	sub *st = paced_sub(0xC6120012u, 7502, 3);
	assert_non_null(a);
	assert_non_null(b);
	assert_non_null(rl);
	uint8_t fk[1200], fp[1200];
	uint64_t oa = outputs(a), ob = outputs(b), orl = outputs(rl), ost = outputs(st);
	receive(datagram(T->cf.data_port, fk, make_frame(fk, 0, 2, 1)));
	assert_int_equal(outputs(a), oa);
	assert_int_equal(outputs(b), ob + 1);
	assert_int_equal(outputs(rl), orl + 1);
	assert_int_equal(outputs(st), ost + 1);
	receive(datagram(T->cf.data_port, fp, make_frame(fp, 0, 3, 0)));
	assert_int_equal(outputs(a), oa + 1);
	assert_int_equal(outputs(b), ob + 2);
	/* once it JOINs at version 2, keyframe streams of 2 are not its any
	 * more; one of a later version is (it is behind that: --keyframes
	 * publishing sends every version so) */
	ctl_send(RP_JOIN, 9006, 0);
	receive(datagram(T->cf.data_port, fk, make_frame(fk, 1, 2, 1)));
	assert_int_equal(outputs(b), ob + 2);
	receive(datagram(T->cf.data_port, fk, make_frame(fk, 2, 3, 1)));
	assert_int_equal(outputs(a), oa + 2);
	assert_int_equal(outputs(b), ob + 3);
}

/* Two fan-out lanes: subscriber slot i is lane i % 2's, new subscribers
 * go to the lane with fewest; what the main lcore changes reaches lane 1
 * only through its ring (so nothing of lane 1's changes until lane 1 runs
 * its jobs); a frame reaches lane 1 with its refcount raised once, and
 * each lane makes its own subscribers' outputs, and only those; lane 1's
 * clones leave the frame's refcount alone, and the reference lane 1 was
 * handed is dropped on the main lcore, not on lane 1 (where the last of
 * them would put the frame's mbuf in lane 1's pool cache); a NACK is
 * answered by the lane that owns the subscriber; a LEAVE is flushed by
 * it; the counters of both lanes are summed. */
static void test_subscribers_are_owned_by_one_fanout_lcore_each(void **state)
{
	(void)state;
	lane *l0 = &T->lanes[0], *l1 = &T->lanes[1];
	assert_int_equal(T->n_lanes, 2);
	assert_int_equal(l1->lcore, 1);
	assert_int_equal(T->n_workers, 0); /* the main lcore receives */
	sub *s[4];
	for (int i = 0; i < 4; i++) {
		s[i] = paced_sub(0xC6120010u + (uint32_t)i, (uint16_t)(7500 + i), (uint8_t)i);
		assert_int_equal(s[i]->lane, (unsigned)i % 2);
	}
	assert_int_equal(T->lane_subs[0], 2);
	assert_int_equal(T->lane_subs[1], 2);
	assert_int_equal(l0->used_mask, 0x5);
	assert_int_equal(l1->used_mask, 0); /* handed over, not taken yet */
	assert_int_equal(relay_lane_poll(T, l1), 4); /* two SYNCs each */
	assert_int_equal(l1->used_mask, 0xA);
	assert_memory_equal(s[1]->out.mac, s[1]->mac, 6);

	uint64_t fanout = relay_sum_counter(T, C_FANOUT);
	uint8_t fr[1200];
	receive(datagram(T->cf.data_port, fr, frame(fr, 5, 2)));
	struct rte_mbuf *cached = rp_cache_get(&T->cache, 99, 2, 5);
	assert_non_null(cached);
	/* the cache, lane 0's two clones, lane 1's reference */
	assert_int_equal(rte_mbuf_refcnt_read(cached), 1 + 2 + 1);
	assert_int_equal(outputs(s[0]) + outputs(s[2]), 2);
	assert_int_equal(outputs(s[1]) + outputs(s[3]), 0);
	assert_int_equal(relay_lane_poll(T, l1), 1);
	/* lane 1's clones count on its hold in the frame's private area, not
	 * on the frame's refcount: its one reference stays the hold's */
	const lane_hold *h = (const lane_hold *)rte_mbuf_to_priv(cached);
	assert_int_equal(rte_mbuf_refcnt_read(cached), 1 + 2 + 1);
	assert_int_equal(rte_mbuf_ext_refcnt_read(&h->sh), 2);
	for (int i = 0; i < 4; i++)
		assert_int_equal(outputs(s[i]), 1);
	/* its output: headers chained to the cached payload itself (no copy),
	 * and the same bytes as lane 0's */
	struct rte_mbuf *o1 = NULL, *o0 = NULL;
	assert_int_equal(rte_ring_dequeue(s[1]->q, (void **)&o1), 0);
	assert_int_equal(rte_ring_dequeue(s[0]->q, (void **)&o0), 0);
	assert_int_equal(o1->nb_segs, 2);
	assert_true(RTE_MBUF_HAS_EXTBUF(o1->next));
	assert_ptr_equal(o1->next->shinfo, &h->sh);
	assert_ptr_equal(rte_pktmbuf_mtod(o1->next, const uint8_t *),
			 rte_pktmbuf_mtod_offset(cached, const uint8_t *, relay_frame_off(cached)));
	assert_int_equal(rte_pktmbuf_pkt_len(o1), rte_pktmbuf_pkt_len(o0));
	uint8_t b0[1300], b1[1300];
	const uint32_t ol = rte_pktmbuf_pkt_len(o0);
	assert_memory_equal(rte_pktmbuf_read(o1, RP_HDRS, ol - RP_HDRS, b1),
			    rte_pktmbuf_read(o0, RP_HDRS, ol - RP_HDRS, b0), ol - RP_HDRS);
	assert_int_equal(rte_ring_enqueue(s[1]->q, o1), 0);
	assert_int_equal(rte_ring_enqueue(s[0]->q, o0), 0);
	assert_int_equal(l1->own.c[C_FANOUT], 2);
	assert_int_equal(relay_sum_counter(T, C_FANOUT), fanout + 4);
	assert_int_equal(l1->queued_mask, 0xA);
	assert_int_equal(l0->queued_mask, 0x5);

	/* a JOINed subscriber of lane 1's (the fifth takes lane 0, the sixth
	 * lane 1): its NACK is answered there */
	ctl_send(RP_JOIN, 9001, 0);
	ctl_send(RP_JOIN, 9002, 0);
	sub *j = relay_sub_by_control(T, 0xC6120063u, 9002);
	assert_non_null(j);
	assert_int_equal(j->lane, 1);
	relay_lane_poll(T, l1);
	uint64_t before = outputs(j);
	ctl_send(RP_NACK, 9002, 5);
	assert_int_equal(outputs(j), before); /* not on the main lcore */
	assert_int_equal(rte_mbuf_refcnt_read(cached), 1 + 2 + 1 + 1); /* the RESEND's */
	assert_int_equal(relay_lane_poll(T, l1), 1);
	assert_int_equal(outputs(j), before + 1);
	/* held already: the RESEND's reference goes back to the main lcore,
	 * which frees it (the frame's mbuf returns to its own pool cache) */
	assert_int_equal(rte_mbuf_ext_refcnt_read(&h->sh), 3);
	assert_int_equal(rte_mbuf_refcnt_read(cached), 1 + 2 + 1 + 1);
	assert_int_equal(relay_lanes_reclaim(T), 1);
	assert_int_equal(rte_mbuf_refcnt_read(cached), 1 + 2 + 1);
	/* unpaced: sent at once, through lane 1's own TX queue and buffer */
	rte_eth_tx_buffer_flush(0, l1->txq, l1->txb[0]);
	assert_int_equal(rte_mbuf_ext_refcnt_read(&h->sh), 2);
	assert_int_equal(rte_mbuf_refcnt_read(cached), 1 + 2 + 1);

	/* a LEAVE frees the slot at once on the main lcore; its queue and
	 * outputs are its lane's to drop */
	sub *gone = s[3];
	relay_sub_remove(T, gone);
	assert_int_equal(T->lane_subs[1], 2);
	assert_int_equal(rte_ring_count(gone->q), 1);
	relay_lane_poll(T, l1);
	assert_int_equal(rte_ring_count(gone->q), 0);
	assert_int_equal(l1->used_mask & 0x8, 0);
	assert_int_equal(l1->queued_mask & 0x8, 0);
	assert_int_equal(rte_mbuf_ext_refcnt_read(&h->sh), 1);
	assert_int_equal(rte_mbuf_refcnt_read(cached), 1 + 2 + 1);
	/* the slot, taken again, is lane 1's still (ordered behind the LEAVE) */
	assert_ptr_equal(paced_sub(0xC6120030u, 7530, 30), gone);
	relay_lane_poll(T, l1);
	assert_int_equal(gone->tx_pkts, 0);
	for (unsigned i = 0; i < MAX_SUBS; i++)
		relay_sub_remove(T, &T->subs[i]);
	relay_lane_poll(T, l1);
	assert_int_equal(l0->used_mask | l1->used_mask, 0);
	/* lane 1's last clone freed (on lane 1): the hold's reference is
	 * dropped on the main lcore only */
	assert_int_equal(rte_mbuf_ext_refcnt_read(&h->sh), 0);
	assert_int_equal(rte_mbuf_refcnt_read(cached), 1 + 1);
	assert_int_equal(rte_ring_count(l1->done), 1);
	assert_int_equal(relay_lanes_reclaim(T), 1);
	assert_int_equal(rte_mbuf_refcnt_read(cached), 1);
}

/* A burst's frames reach a lane together, once the burst is handled
 * (relay_lanes_flush: one ring enqueue a lane per burst), each frame's
 * refcount raised once for the lanes; a job of another kind (a SYNC
 * here) hands the frames staged before it over first, so the lane runs
 * every job in the order the main lcore made them. */
static void test_frames_reach_a_lane_a_burst_at_a_time_in_order(void **state)
{
	(void)state;
	lane *l1 = &T->lanes[1];
	lcore_stats *st = &T->stats[rte_lcore_id()];
	sub *s[2];
	for (int i = 0; i < 2; i++)
		s[i] = paced_sub(0xC6120050u + (uint32_t)i, (uint16_t)(7550 + i), (uint8_t)(50 + i));
	assert_int_equal(s[1]->lane, 1);
	relay_lane_poll(T, l1);
	uint8_t fr[1200];
	struct rte_mbuf *m[2];
	for (uint32_t i = 0; i < 2; i++) {
		m[i] = datagram(T->cf.data_port, fr, frame(fr, 40 + i, 2));
		assert_true(relay_rx_classify(T, m[i], st));
		relay_core_packet(T, m[i], st);
	}
	assert_int_equal(rte_ring_count(l1->jobs), 0); /* staged */
	assert_int_equal(outputs(s[0]), 2);            /* lane 0's, at once */
	struct rte_mbuf *c = rp_cache_get(&T->cache, 99, 2, 41);
	assert_non_null(c);
	assert_int_equal(rte_mbuf_refcnt_read(c), 1 + 1 + 1); /* the cache, s[0]'s, lane 1's */
	relay_sub_sync(T, s[1], SYNC_FLUSH);             /* a SYNC after them */
	assert_int_equal(rte_ring_count(l1->jobs), 3);
	lane_job j[3];
	assert_int_equal(rte_ring_dequeue_burst_elem(l1->jobs, j, sizeof(j[0]), 3, NULL), 3);
	assert_int_equal(j[0].op, JOB_FRAME);
	assert_int_equal(j[1].op, JOB_FRAME);
	assert_int_equal(j[2].op, JOB_SYNC);
	assert_ptr_equal(j[1].f, c);
	assert_int_equal(rte_ring_enqueue_burst_elem(l1->jobs, j, sizeof(j[0]), 3, NULL), 3);
	assert_int_equal(relay_lane_poll(T, l1), 3);
	assert_int_equal(outputs(s[1]), 0); /* made, then flushed by the SYNC */
	assert_int_equal(rte_mbuf_refcnt_read(c), 1 + 1 + 1); /* lane 1's, back to the main lcore */
	assert_int_equal(relay_lanes_reclaim(T), 2);
	assert_int_equal(rte_mbuf_refcnt_read(c), 1 + 1);
	for (unsigned i = 0; i < MAX_SUBS; i++)
		relay_sub_remove(T, &T->subs[i]);
	relay_lane_poll(T, l1);
	assert_int_equal(rte_mbuf_refcnt_read(c), 1);
}

/* The output of B's flattened into flat: B's view of it is a valid
 * datagram to B whose payload is fr[fl], byte for byte. */
static void assert_output_is(struct rte_mbuf *o, const sub *b, const uint8_t *fr, size_t fl)
{
	uint8_t flat[1300];
	assert_int_equal(rte_pktmbuf_pkt_len(o), RP_HDRS + fl);
	const uint8_t *p = rte_pktmbuf_read(o, 0, rte_pktmbuf_pkt_len(o), flat);
	rp_addrs a;
	memset(&a, 0, sizeof(a));
	a.ip[0] = b->ip;
	a.n_ip = 1;
	a.data_port = b->data_port;
	a.control_port = 1;
	a.check_crc = 1;
	rp_pkt k;
	assert_int_equal(rp_classify(p, rte_pktmbuf_pkt_len(o), &a, &k), RP_DATA);
	assert_memory_equal(p, b->mac, 6);
	assert_memory_equal(p + RP_HDRS, fr, fl);
}

/* A frame stored at fan-out 1 goes out in its own mbuf, its headers in
 * front of the cached frame, and what reads the cached frame starts after
 * them: a NACK's answer (a clone, or a copy), and the payload check of a
 * frame whose checksum nothing checked, see the frame as it came. */
static void test_frame_stored_in_its_output_answers_nacks_as_received(void **state)
{
	(void)state;
	lcore_stats *st = &T->stats[rte_lcore_id()];
	sub *a = paced_sub(0xC6120040u, 7540, 40), *b = paced_sub(0xC6120041u, 7541, 41);
	relay_sub_remove(T, b); /* A alone takes the frame */
	uint8_t fr[1200];
	const size_t fl = frame(fr, 31, 2);
	receive(datagram(T->cf.data_port, fr, fl));
	struct rte_mbuf *cached = rp_cache_get(&T->cache, 99, 2, 31), *o = NULL;
	assert_non_null(cached);
	assert_int_equal(rte_ring_dequeue(a->q, (void **)&o), 0);
	assert_ptr_equal(o, cached); /* no clone: the received mbuf itself */
	assert_int_equal(relay_frame_off(cached), RP_HDRS);
	assert_int_equal(rte_mbuf_refcnt_read(cached), 2);
	assert_output_is(o, a, fr, fl);
	rte_pktmbuf_free(o); /* sent */
	cached->hash.usr |= SUM_UNCHECKED; /* its sum read once before a resend */
	assert_true(relay_cached_sum_ok(cached));
	b = paced_sub(0xC6120041u, 7541, 41);
	for (int copy = 0; copy < 2; copy++) {
		T->cf.copy_fanout = copy;
		relay_resend(T, b, cached, cached->hash.fdir.hi, st); /* as a NACK's answer */
		assert_int_equal(rte_ring_dequeue(b->q, (void **)&o), 0);
		assert_output_is(o, b, fr, fl);
		rte_pktmbuf_free(o);
	}
	T->cf.copy_fanout = 0;
	assert_int_equal(rte_mbuf_refcnt_read(cached), 1);
	assert_memory_equal(rte_pktmbuf_mtod_offset(cached, uint8_t *, RP_HDRS), fr, fl);
}

/* NACKs are answered from the cache to a JOINed subscriber only. */
static void test_nack_is_answered_from_the_cache_to_joined_subscribers_only(void **state)
{
	(void)state;
	uint8_t fr[1200];
	lcore_stats *st = &T->stats[rte_lcore_id()];
	receive(datagram(T->cf.data_port, fr, frame(fr, 7, 2)));
	ctl_send(RP_NACK, 9000, 7); /* not joined */
	assert_int_equal(st->c[C_NACK_REFUSED], 1);
	ctl_send(RP_JOIN, 9001, 0);
	sub *s = relay_sub_by_control(T, 0xC6120063u, 9001);
	assert_non_null(s);
	assert_int_equal(s->data_port, 7600);
	assert_memory_equal(s->mac, PEER_MAC, 6); /* from the JOIN until ARP answers */
	uint64_t hits = st->c[C_CACHE_HIT], before = T->stats[rte_lcore_id()].c[C_FANOUT];
	ctl_send(RP_NACK, 9001, 7);
	ctl_send(RP_NACK, 9001, 8); /* not cached: a miss */
	assert_int_equal(st->c[C_CACHE_HIT], hits + 1);
	assert_int_equal(st->c[C_CACHE_MISS], 1);
	assert_int_equal(st->c[C_FANOUT], before + 1);
	/* asked of upstream a moment ago: not asked again (suppression) */
	assert_int_equal(st->c[C_NACK_SUPPRESSED], 0);
	ctl_send(RP_NACK, 9001, 8);
	assert_int_equal(st->c[C_CACHE_MISS], 2);
	assert_int_equal(st->c[C_NACK_SUPPRESSED], 1);
	ctl_send(RP_LEAVE, 9001, 0);
	assert_null(relay_sub_by_control(T, 0xC6120063u, 9001));
}

/* One subscriber's NACKs ask for at most a full answer at once, then
 * --nack-rate frames a second; what is over is counted, not answered, and
 * other subscribers keep their own budget. */
static void test_nack_budget_is_per_subscriber(void **state)
{
	(void)state;
	uint8_t fr[1200];
	lcore_stats *st = &T->stats[rte_lcore_id()];
	const uint32_t rate = T->cf.nack_rate;
	T->cf.nack_rate = 10; /* frames per second */
	receive(datagram(T->cf.data_port, fr, frame(fr, 7, 2)));
	ctl_send(RP_JOIN, 9003, 0);
	ctl_send(RP_JOIN, 9004, 0);
	uint64_t hits = st->c[C_CACHE_HIT], limited = st->c[C_NACK_LIMITED];
	const double hz = (double)rte_get_tsc_hz();
	/* a whole answer's worth: what is cached (frame 7, and what earlier
	 * tests left) is answered, the others are misses */
	uint64_t t0 = rte_get_tsc_cycles();
	ctl_send_range(RP_NACK, 9003, 0, RP_NACK_ANSWER_MAX, 0);
	uint64_t t1 = rte_get_tsc_cycles();
	assert_true(st->c[C_CACHE_HIT] >= hits + 1);
	assert_int_equal(st->c[C_NACK_LIMITED], limited);
	hits = st->c[C_CACHE_HIT] - 1;
	/* its budget is spent: frame 7 again is refused, unless this machine
	 * took 100 ms (a frame's refill) to get here */
	ctl_send(RP_NACK, 9003, 7);
	if ((double)(rte_get_tsc_cycles() - t0) / hz < 0.09) {
		assert_int_equal(st->c[C_CACHE_HIT], hits + 1);
		assert_int_equal(st->c[C_NACK_LIMITED], limited + 1);
	}
	hits = st->c[C_CACHE_HIT];
	limited = st->c[C_NACK_LIMITED];
	/* another subscriber is answered */
	ctl_send(RP_NACK, 9004, 7);
	assert_int_equal(st->c[C_CACHE_HIT], hits + 1);
	/* a while later the first may ask for what refilled since: between
	 * the time since the big NACK ended and since it began, at 10 a second
	 * (less what the refused NACK above may have taken) */
	usleep(250000);
	uint64_t t2 = rte_get_tsc_cycles();
	ctl_send_range(RP_NACK, 9003, 7, 30, 0);
	uint64_t t3 = rte_get_tsc_cycles();
	assert_int_equal(st->c[C_CACHE_HIT], hits + 2); /* frame 7 first */
	uint64_t got = 30 - (st->c[C_NACK_LIMITED] - limited);
	double lo = (double)(t2 - t1) / hz * 10 - 1, hi = (double)(t3 - t0) / hz * 10;
	assert_true((double)got >= lo - 1 && (double)got <= hi);
	ctl_send(RP_LEAVE, 9003, 0);
	ctl_send(RP_LEAVE, 9004, 0);
	T->cf.nack_rate = rate;
}

/* The cache holds frames within its budget and releases every mbuf: after
 * clearing it, the pools hold no more than before. */
static void test_cache_releases_every_mbuf(void **state)
{
	(void)state;
	unsigned before = rte_mempool_in_use_count(T->pool[0]);
	uint8_t fr[1200];
	for (uint32_t i = 0; i < 3000; i++) /* 3000 x ~660 B > 1 MB budget */
		receive(datagram(T->cf.data_port, fr, frame(fr, i, 3)));
	assert_true(T->cache.bytes <= T->cache.budget);
	assert_true(T->cache.len < 3000);
	assert_non_null(rp_cache_get(&T->cache, 99, 3, 2999)); /* newest kept */
	assert_null(rp_cache_get(&T->cache, 99, 3, 0));        /* oldest gone */
	rp_cache_clear(&T->cache, relay_mbuf_drop, NULL);
	assert_true(rte_mempool_in_use_count(T->pool[0]) <= before);
	assert_int_equal(rte_mempool_in_use_count(T->clone_pool), 0);
	assert_int_equal(rte_mempool_in_use_count(T->hdr_pool), 0);
}

/* Pacing: a subscriber at 8 Mbit/s gets its burst, then about 1 MB/s. */
static void test_pacing_holds_a_subscriber_to_its_rate(void **state)
{
	(void)state;
	sub *s = paced_sub(0xC6120020u, 7700, 9);
	uint8_t fr[1200];
	size_t fl = make_frame(fr, 1, 4, 2); /* keyframe-coded: about 1.2 kB */
	assert_true(fl > 1000);
	receive(datagram(T->cf.data_port, fr, fl));
	struct rte_mbuf *f = rp_cache_get(&T->cache, 99, 4, 1);
	assert_non_null(f);
	/* 1000 x about 1.2 kB queued: more than 200 ms at the rate, so the
	 * pacer, not the queue, decides what leaves */
	for (int i = 0; i < 1000; i++)
		relay_emit(T, &T->lanes[0], s, f, f->hash.fdir.hi, T->auth.run);
	assert_true(rte_ring_count(s->q) >= 1000); /* and the frame as it came */
	uint64_t t0 = rte_get_tsc_cycles(), sent0 = s->tx_bytes, last = t0, starved = 0;
	/* a gap between two calls longer than the burst lasts (65536 B at
	 * 1e6 B/s) loses tokens: a loaded machine that runs us late is not
	 * the pacer's fault, so such time is left out of the lower bound */
	const uint64_t burst_t = T->hz * 65536 / 1000000;
	while (rte_get_tsc_cycles() - t0 < T->hz / 5) { /* 200 ms */
		uint64_t now = rte_get_tsc_cycles();
		if (now - last > burst_t)
			starved += now - last - burst_t;
		last = now;
		relay_pace(T, &T->lanes[0]);
	}
	double secs = (double)(rte_get_tsc_cycles() - t0) / (double)T->hz;
	double most = 65536 + 1e6 * secs + 1300; /* burst + rate * time */
	double got = (double)(s->tx_bytes - sent0);
	print_message("paced: %.0f bytes in %.3f s at 1e6 B/s (at most %.0f)\n", got, secs, most);
	assert_true(got <= most);
	assert_true(got >= 0.8e6 * (secs - (double)starved / (double)T->hz));
	rte_eth_tx_buffer_flush(0, 0, T->txb[0]);
}

/* A JOIN (every second) keeps a paced subscriber's bucket, and leaves a
 * static subscriber's configured rate and model alone. */
static void test_join_keeps_pacing_and_static_settings(void **state)
{
	(void)state;
	ctl_send(RP_JOIN, 9003, 0);
	sub *s = relay_sub_by_control(T, 0xC6120063u, 9003);
	assert_non_null(s);
	s->bucket.tokens = 12345;
	ctl_send(RP_JOIN, 9003, 0);
	assert_int_equal(s->bucket.tokens, 12345);
	s->is_static = 1;
	s->bucket.rate = 1000;
	s->model_id = 5;
	ctl_send(RP_JOIN, 9003, 0); /* rate 0 (the default), model 99 */
	assert_int_equal(s->bucket.rate, 1000);
	assert_int_equal(s->model_id, 5);
}

/* Each port receives into a pool on its own NUMA socket (the main
 * lcore's where the device does not say, as for net_null), one pool a
 * socket. */
static void test_rx_pools_sit_on_each_ports_socket(void **state)
{
	(void)state;
	for (uint16_t p = 0; p < T->n_ports; p++) {
		int socket = rte_eth_dev_socket_id(p);
		if (socket < 0)
			socket = (int)rte_socket_id();
		assert_non_null(T->pool[p]);
		assert_int_equal(T->pool[p]->socket_id, socket);
	}
	assert_int_equal(T->n_rx_pools, 1);
}

/* The relay waits for every port's link before forwarding, and a port
 * that is up (a started net_null port) is not counted as down. */
static void test_links_are_up_before_forwarding(void **state)
{
	(void)state;
	assert_int_equal(relay_links_wait(T), 0);
}

/* relay_parse_args on a fresh configuration; 0 or -1 */
static int parse(int argc, char **argv, relay_conf *cf)
{
	memset(cf, 0, sizeof(*cf));
	optind = 0; /* glibc: start getopt over */
	return relay_parse_args(argc, argv, cf);
}

static void test_options_refuse_nonsense_and_read_sizes_in_binary(void **state)
{
	(void)state;
	relay_conf cf;
	char *sizes[] = {"relay", "--cache-bytes", "64M", NULL};
	assert_int_equal(parse(3, sizes, &cf), 0);
	assert_int_equal(cf.cache_bytes, 64ull << 20);
	char *rate_ok[] = {"relay", "--rate", "1k", NULL};
	assert_int_equal(parse(3, rate_ok, &cf), 0);
	assert_int_equal(cf.default_rate_bps, 1000);
	char *rate_zero[] = {"relay", "--rate", "0", NULL};
	assert_int_equal(parse(3, rate_zero, &cf), 0);
	/* a rate under 1 kbit/s is someone's Mbit/s written as bit/s */
	char *rate_low[] = {"relay", "--rate", "100", NULL};
	assert_int_equal(parse(3, rate_low, &cf), -1);
	char *sub_low[] = {"relay", "--subscriber", "198.18.0.7:7500,rate=999", NULL};
	assert_int_equal(parse(3, sub_low, &cf), -1);
	char *sub_ok[] = {"relay", "--subscriber", "198.18.0.7:7500,rate=100m", NULL};
	assert_int_equal(parse(3, sub_ok, &cf), 0);
	assert_int_equal(cf.subs[0].rate_bps, 100000000ull);
	char *same_port[] = {"relay", "--data-port", "7400", "--control-port", "7400", NULL};
	assert_int_equal(parse(5, same_port, &cf), -1);
	char ip_arg[] = "9:198.18.0.1"; /* relay_parse_args cuts its copy */
	char *bad_ip[] = {"relay", "--ip", ip_arg, NULL};
	assert_int_equal(parse(3, bad_ip, &cf), -1);
	/* the command line ps shows stays as given */
	char ip_ok[] = "0:198.18.0.1/24", gw_ok[] = "0:198.18.0.254";
	char *ip_gw[] = {"relay", "--ip", ip_ok, "--gateway", gw_ok, NULL};
	assert_int_equal(parse(5, ip_gw, &cf), 0);
	assert_string_equal(ip_ok, "0:198.18.0.1/24");
	assert_string_equal(gw_ok, "0:198.18.0.254");
	/* one --subscriber an address and port: a second one's options
	 * would have been dropped without a word */
	char *twice[] = {"relay", "--subscriber", "198.18.0.7:7500", "--subscriber",
			 "198.18.0.7:7500,rate=1m", NULL};
	assert_int_equal(parse(5, twice, &cf), -1);
	/* frames to the upstream or to the relay itself would go round */
	char *to_up[] = {"relay", "--upstream", "198.18.0.2:7401", "--subscriber",
			 "198.18.0.2:7400", NULL};
	assert_int_equal(parse(5, to_up, &cf), -1);
	char *to_self[] = {"relay", "--subscriber", "198.18.0.1:7500", NULL};
	assert_int_equal(parse(3, to_self, &cf), -1);
	char *up_self[] = {"relay", "--upstream", "198.18.0.1:7401", NULL};
	assert_int_equal(parse(3, up_self, &cf), -1);
	char *up_any[] = {"relay", "--upstream", "0.0.0.0:7401", NULL};
	assert_int_equal(parse(3, up_any, &cf), -1);
	char *sub_any[] = {"relay", "--subscriber", "0.0.0.0:7500", NULL};
	assert_int_equal(parse(3, sub_any, &cf), -1);
	char *sub_bcast[] = {"relay", "--subscriber", "255.255.255.255:7500", NULL};
	assert_int_equal(parse(3, sub_bcast, &cf), -1);
	/* the upstream is reached through the port whose subnet holds it,
	 * else the one with a gateway (it was always port 0) */
	char a0[] = "0:198.18.0.1/24", a1[] = "1:198.18.1.1/24", g1[] = "1:198.18.1.254";
	char *two[] = {"relay", "--ip", a0, "--ip", a1, "--upstream", "198.18.1.10:7401", NULL};
	assert_int_equal(parse(7, two, &cf), 0);
	assert_int_equal(relay_upstream_port(&cf, 2), 1);
	char b0[] = "0:198.18.0.1/24", b1[] = "1:198.18.1.1/24";
	char *gw[] = {"relay",	   "--ip",	 b0, "--ip", b1, "--gateway", g1,
		      "--upstream", "10.9.0.1:7401", NULL};
	assert_int_equal(parse(9, gw, &cf), 0);
	assert_int_equal(relay_upstream_port(&cf, 2), 1);
	char c0[] = "0:198.18.0.1/24";
	char *on0[] = {"relay", "--ip", c0, "--upstream", "198.18.0.9:7401", NULL};
	assert_int_equal(parse(5, on0, &cf), 0);
	assert_int_equal(relay_upstream_port(&cf, 1), 0);
}

int main(void)
{
	if (getuid() != 0) {
		printf("skip: DPDK EAL needs root here\n");
		return 77;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_fanout_chains_headers_to_the_shared_payload, drop_subs),
		cmocka_unit_test_teardown(test_telemetry_lists_every_subscriber, drop_subs),
		cmocka_unit_test_teardown(test_telemetry_counts_control_messages_refused_by_reason,
					  drop_subs),
		cmocka_unit_test_teardown(test_newest_version_is_kept_per_model, drop_subs),
		cmocka_unit_test_teardown(test_slow_subscriber_leaves_the_rx_reserve, drop_subs),
		cmocka_unit_test_teardown(test_join_keeps_pacing_and_static_settings, drop_subs),
		cmocka_unit_test_teardown(test_frame_stored_in_its_output_answers_nacks_as_received, drop_subs),
		cmocka_unit_test_teardown(test_nack_is_answered_from_the_cache_to_joined_subscribers_only, drop_subs),
		cmocka_unit_test_teardown(test_nack_budget_is_per_subscriber, drop_subs),
		cmocka_unit_test_teardown(test_cache_keeps_keyframes_apart_from_patch_frames, drop_subs),
		cmocka_unit_test_teardown(test_cache_releases_every_mbuf, drop_subs),
		cmocka_unit_test_teardown(test_pacing_holds_a_subscriber_to_its_rate, drop_subs),
		cmocka_unit_test(test_options_refuse_nonsense_and_read_sizes_in_binary),
		cmocka_unit_test(test_mbuf_sizing_leaves_room_to_queue),
		cmocka_unit_test(test_links_are_up_before_forwarding),
		cmocka_unit_test(test_rx_pools_sit_on_each_ports_socket),
		cmocka_unit_test_teardown(test_keyframe_streams_go_to_those_that_asked, drop_subs),
		cmocka_unit_test_teardown(test_first_frame_events_follow_versions_that_go_back,
					  drop_subs),
	};
	const struct CMUnitTest lanes[] = {
		cmocka_unit_test(test_subscribers_are_owned_by_one_fanout_lcore_each),
		cmocka_unit_test(test_frames_reach_a_lane_a_burst_at_a_time_in_order),
	};
	int rc = cmocka_run_group_tests_name("relay_eal", tests, setup, teardown);
	rc |= cmocka_run_group_tests_name("relay_eal_fanout", lanes, setup_lanes, teardown);
	rte_eal_cleanup();
	return rc;
}
