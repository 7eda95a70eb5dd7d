/*
 * shim_dpdk.h: the actor shim's two DPDK backends, usable without the rest
 * of the shim: a dmadev copy engine with a verified commit path
 * (shim_dma_*), and a DPDK port as a frame source (shim_port_*). Both need
 * the EAL, brought up once per process with shim_eal_init().
 *
 * Memory. The DMA engine is handed plain virtual addresses (the weight
 * buffer is an mmap of /dev/shm, the frames are wherever the stager keeps
 * them). Addresses become IOVAs by identity, so shim_dma_open() requires
 * the EAL to run in IOVA-as-VA mode (`--iova-mode=va`, or what the EAL
 * picks by itself with --no-huge or an IOMMU). What a device then needs:
 *   - dma_skeleton (tests): nothing; it is a CPU thread doing memcpy on
 *     the addresses it is given.
 *   - idxd (DSA) work queues through the kernel driver (`dsa` bus,
 *     /dev/dsa/wqX.Y): nothing; they use shared virtual addressing.
 *   - idxd or ioat bound to vfio-pci, a DPU's engine behind VFIO: the weight
 *     buffer must be mapped into the IOMMU first: shim_dma_map(). The
 *     staging arena is EAL memory and is mapped by the EAL itself.
 * Only the first case is tested here (no DSA, IOAT or IOMMU on the test
 * machines); shim_dma_map()'s registration step is tested, its VFIO step
 * is not.
 *
 * Threads. A shim_dma or shim_port belongs to one thread at a time (a
 * dmadev vchan and an RX queue are not thread-safe); different handles may
 * be used from different threads.
 *
 * Errors. Fallible calls return 0 or -1 and write a message into
 * err[errlen] (NUL-terminated, truncated to fit; err may be NULL when
 * errlen is 0).
 */
#ifndef BFP_SHIM_DPDK_H
#define BFP_SHIM_DPDK_H

#include <stddef.h>
#include <stdint.h>

#include "bfpatch.h"
#include "proto.h"
#include "wbuf.h"

/* ---- EAL --------------------------------------------------------------- */

/* Initialise the EAL for a process that is not the relay. eal_args are EAL
 * options separated by spaces (no quoting), e.g.
 *   "--no-huge -m 512 --no-pci --file-prefix shim1 -l 0 --vdev dma_skeleton0"
 * At most 63 arguments. Call once per process: the EAL cannot be
 * initialised again, not even after shim_eal_fini(). The string is not
 * kept. Not thread-safe. */
int shim_eal_init(const char *eal_args, char *err, size_t errlen);

/* Release the EAL (rte_eal_cleanup) after every handle is closed. */
void shim_eal_fini(void);

/* ---- dmadev copy engine ------------------------------------------------ */

typedef struct shim_dma shim_dma;

typedef struct shim_dma_conf {
	const char *name;     /* dmadev name: "dma_skeleton0", an idxd work
				 queue ("wq0.0"), a PCI channel, ... */
	uint16_t n_desc;      /* ring size of the one vchan; 0: 1024
				 (clamped to what the device allows) */
	uint32_t copy_max;    /* largest single copy in bytes; longer ones are
				 split; 0: 2 MiB (DSA's usual max transfer) */
	size_t arena_bytes;   /* staging arena of shim_dma_apply() (EAL
				 memory); 0: 64 MiB */
	int vfio;             /* the device is driven through VFIO (idxd or
				 ioat bound to vfio-pci): shim_dma_map() also
				 maps the memory into the IOMMU. Untested. */
} shim_dma_conf;

/* Counters since open; written only by the owning thread. */
typedef struct shim_dma_stats {
	uint64_t copies;      /* copy descriptors enqueued */
	uint64_t bytes;       /* bytes copied by the engine */
	uint64_t submits;     /* doorbells */
	uint64_t full_waits;  /* times the ring was full and we polled */
	uint64_t errors;      /* copies that completed with an error status */
} shim_dma_stats;

/* Open dmadev c->name, configure one mem-to-mem vchan and start it.
 * On success *out is a new handle; on error *out is NULL and nothing is
 * left configured or allocated. Fails when the EAL is not in IOVA-as-VA
 * mode or the device cannot copy mem-to-mem. */
int shim_dma_open(const shim_dma_conf *c, shim_dma **out, char *err, size_t errlen);

/* Stop the device and free the handle (after waiting for copies still in
 * flight). NULL is a no-op. */
void shim_dma_close(shim_dma *d);

/* Enqueue a copy of len bytes from src to dst (split into copies of at
 * most copy_max). The copy is only guaranteed to be under way after
 * shim_dma_flush(); src and dst must stay valid and unmodified until then.
 * When the ring is full this polls completions until there is room.
 * Fails on a completion error (see shim_dma_flush) or a stalled engine
 * (no progress for 10 s). */
int shim_dma_copy(shim_dma *d, void *dst, const void *src, size_t len, char *err,
		  size_t errlen);

/* Submit everything enqueued and wait until every copy has completed.
 * Returns -1 if any copy completed with an error status since the last
 * flush (rte_dma_completed_status), naming the first status; the bytes of
 * the failed copies' destinations are then unspecified. After an error the
 * handle stays usable for new copies only if the device recovers by
 * itself; shim_dma_close() and reopen otherwise. */
int shim_dma_flush(shim_dma *d, char *err, size_t errlen);

void shim_dma_stats_get(const shim_dma *d, shim_dma_stats *st);

/* Make [addr, addr+len) usable as a DMA destination or source for devices
 * that need registered memory: registers it with the EAL as external
 * memory (rte_extmem_register, page_sz the mapping's page size, addr and
 * len multiples of it) and, with conf.vfio, maps it 1:1 (IOVA = VA) into
 * the default VFIO container. Not needed for
 * dma_skeleton or for idxd work queues through the kernel driver (SVA).
 * Call before shim_dma_apply() with the weight buffer's mapping (e.g. the
 * whole wbuf map, which is page-aligned). Registration is tested; the VFIO
 * mapping is not (no IOMMU on the test machines). */
int shim_dma_map(shim_dma *d, void *addr, size_t len, size_t page_sz, char *err,
		 size_t errlen);

/* Undo shim_dma_map(); call before unmapping the memory. */
int shim_dma_unmap(shim_dma *d, void *addr, size_t len, char *err, size_t errlen);

/* Outcome of shim_dma_apply(). */
typedef struct shim_dma_result {
	uint32_t applied;       /* frames now at target in params, verified */
	uint32_t by_cpu;        /* of those, frames whose range was larger than
				   the arena: applied in place by the CPU
				   (bfp_decode_apply verifies before writing) */
	uint32_t failed_frame;  /* index into frames[] of the first failure,
				   or UINT32_MAX */
	int status;             /* that frame's bfp_status, or 0; 0 also when
				   the failure was the DMA engine's */
	uint64_t verified_params; /* parameters of the applied frames */
	uint64_t dma_bytes;     /* bytes moved by the engine */
} shim_dma_result;

/* Crash safety for shim_dma_apply() (e.g. wbuf_dlog): note() keeps the
 * values at a delta frame's changed positions (pos relative to begin)
 * before the engine or the CPU may write its range, and returns -1 when
 * it has no room (shim_dma_apply then waits for the copies in flight and
 * tries once more); retire() forgets the oldest noted frame once its
 * range is verified at the target. Keyframe-coded frames are not noted:
 * they apply over whatever their range holds. */
typedef struct shim_dma_journal {
	int (*note)(void *arg, uint64_t begin, const uint32_t *pos, uint32_t n);
	void (*retire)(void *arg);
	void *arg;
} shim_dma_journal;

/* The journal hooks over a DMA log (wbuf_dlog), as the shim commits. */
shim_dma_journal shim_dma_journal_of(wbuf_dlog *l);

/* Apply frames[0 .. n_frames) (lens[i] bytes each, one frame per entry, as
 * staged) to params[0 .. n_params) through the DMA engine:
 *   1. the frame is parsed and checked (header, CRC, range within
 *      n_params);
 *   2. the CPU copies the range's current values from params into the
 *      staging arena;
 *   3. bfp_decode_apply() applies the frame to that copy, which verifies
 *      the frame's target hash (the frame's range is rebased to 0 in a
 *      private copy of the frame, resealed with a new CRC; the caller's
 *      frame is not modified and the format is unchanged);
 *   4. the engine copies the arena range into params (adjacent ranges are
 *      merged into one copy, up to copy_max);
 *   5. once the copy has completed, bfp_frame_check_target() re-verifies
 *      the range in params.
 * Decoding runs ahead of the engine; completions are reaped as frames are
 * decoded. A frame whose range overlaps one still in flight waits for it.
 * o and dec are as for bfp_decode_apply(): o->base_version is the version
 * params hold now.
 *
 * A range is written into params only after its frame passed step 3, so a
 * frame that fails its checks leaves its range untouched. Processing stops
 * at the first failure: frames before it (in array order) are at target
 * and verified (res->applied of them), copies in flight are waited for,
 * and frames after it are not touched, except after a DMA failure or a
 * failed step 5: later frames whose copies were already in flight then
 * land at target without being counted. Returns 0
 * when every frame was applied and verified, -1 otherwise with err naming
 * the frame index, its range and the reason. A DMA completion error or a
 * range that fails step 5 leaves that range's contents unspecified (at
 * neither base nor target; the per-range hashes used for crash recovery
 * tell).
 *
 * With jn, every delta frame is noted before its range may be written
 * and retired once it is verified there (a frame larger than the arena:
 * after the copies in flight are done).
 *
 * res may be NULL. dec is scratch. The frames are read only. Duplicates
 * of an already-applied frame fail with BFP_E_HASH (the caller drops
 * duplicates when staging). */
int shim_dma_apply(shim_dma *d, bfp_decoder *dec, const bfp_apply_opts *o,
		   const uint8_t *const *frames, const uint32_t *lens, uint32_t n_frames,
		   uint16_t *params, uint64_t n_params, const shim_dma_journal *jn,
		   shim_dma_result *res, char *err, size_t errlen);

/* Testing: the next shim_dma_apply() writes the first half of its first
 * copy with the CPU and then raises SIGKILL, as a crash while the engine
 * copies would leave the buffer. */
void shim_dma_tear_test(shim_dma *d);

/* ---- DPDK port frame source -------------------------------------------- */

typedef struct shim_port shim_port;

/* Largest Ethernet frame accepted: 9000 B of UDP payload
 * (BFP_FRAME_SIZE_MAX) plus headers fit. By default mbufs have this data
 * room, so ports that cannot scatter still take jumbo frames whole; a
 * chained packet is copied into one buffer; longer packets are counted
 * and dropped. */
#define SHIM_PORT_PKT_MAX 9216u
#define SHIM_PORT_BURST 32u

typedef struct shim_port_conf {
	const char *devargs;  /* "net_pcap0,rx_pcap=FILE",
				 "net_af_packet0,iface=eth1",
				 "net_memif0,role=client,socket=/run/relay.sock",
				 "net_af_xdp0,iface=eth1", ...: hot-plugged,
				 or found by name if the EAL args had it */
	uint32_t ip;          /* our IPv4 address (host order); 0: accept
				 any destination address */
	uint16_t udp_port;    /* UDP destination port of frames */
	uint32_t n_mbufs;     /* RX mempool size; 0: 4095 (about 38 MiB) */
	uint16_t n_rxd;       /* RX descriptors; 0: 512 */
	uint16_t mbuf_data;   /* mbuf data room after the headroom; 0:
				 SHIM_PORT_PKT_MAX. Smaller saves memory; longer
				 packets then need a port that scatters RX
				 (requested when it can) and are copied */
	int check_crc;        /* also check each frame's CRC32C (otherwise
				 only the cheap header checks: the stager
				 parses every frame anyway) */
} shim_port_conf;

/* Counters since open; written only by the polling thread. */
typedef struct shim_port_stats {
	uint64_t rx_packets;
	uint64_t rx_bytes;
	uint64_t delivered;   /* payloads handed to the callback */
	uint64_t oversize;    /* longer than SHIM_PORT_PKT_MAX: dropped */
	uint64_t chained;     /* arrived in several mbufs: copied into one */
	uint64_t link_downs;  /* times the link was seen to go down */
	uint64_t restarts;    /* restarts to reconnect (shim_port_watch) */
	uint64_t cls[RP_CLASS_COUNT]; /* every packet's rp_classify() class;
				 cls[RP_DATA] == delivered; the rest were
				 dropped (ARP is not answered: give the
				 sender a static MAC for us) */
} shim_port_stats;

/* Called once per accepted frame, with the UDP payload. The bytes are
 * valid only during the call (the mbuf is freed after it): copy them. */
typedef void (*shim_frame_cb)(void *ctx, const uint8_t *payload, size_t len);

/* Open the port: probe c->devargs if no port has its name yet, one RX and
 * one TX queue (TX unused), an RX mempool on the port's socket, MTU up to
 * 9000 where the port allows, promiscuous mode, start. Does not wait for
 * the link (a memif client takes seconds to connect; poll meanwhile). A
 * memif client with no server listening yet is opened stopped
 * (shim_port_waiting()); shim_port_watch() retries. On error *out is NULL
 * and what was taken is released. */
int shim_port_open(const shim_port_conf *c, shim_port **out, char *err, size_t errlen);

/* Receive one burst (at most SHIM_PORT_BURST packets), classify each with
 * rp_classify(), hand the payload of every IPv4/UDP packet to our address
 * and c->udp_port that looks like a bfpatch frame to cb, free all mbufs.
 * Returns the number of payloads delivered (0 when nothing arrived). */
unsigned shim_port_poll(shim_port *p, shim_frame_cb cb, void *ctx);

void shim_port_stats_get(const shim_port *p, shim_port_stats *st);

/* What shim_port_watch() saw since its last call. */
typedef enum {
	SHIM_LINK_SAME = 0,
	SHIM_LINK_UP,       /* the link came up (first time, or again) */
	SHIM_LINK_DOWN,     /* the link went down */
	SHIM_LINK_RESTART,  /* down still; the port was restarted to reconnect */
	SHIM_LINK_RESTART_FAILED, /* down still; the restart failed (no peer yet) */
} shim_link_event;

/* Watch the link; call it a few times a second from the polling thread,
 * with a monotonic time in seconds. A memif client whose server went away
 * (its relay restarted) never reconnects by itself: while such a port's link
 * is down it is stopped and started again every SHIM_PORT_RECONNECT_S
 * seconds, which reconnects once a server listens on the socket again (if a
 * start connects but no link follows, the wait doubles, up to 8 times).
 * Packets between two calls while the link looked down count as a link
 * that was up: UP is said, then DOWN at the next call. Other ports are only
 * watched. */
#define SHIM_PORT_RECONNECT_S 2.0
shim_link_event shim_port_watch(shim_port *p, double now);

/* Whether shim_port_watch() restarts this port while its link is down. */
int shim_port_reconnects(const shim_port *p);

/* A memif client port that could not connect (no server listening yet, at
 * open or at the last restart): stopped until shim_port_watch() restarts it. */
int shim_port_waiting(const shim_port *p);

/* Around an RX burst on a port whose rings another thread may unmap (memif:
 * the EAL interrupt thread, when the peer disconnects). Enter returns 0 when
 * an unmapping is under way: skip the burst then, and do not call leave.
 * While any thread is between enter and leave, munmap() (which this library
 * defines; the executable exports it) waits. shim_port_poll() uses them. */
int shim_rx_guard_enter(void);
void shim_rx_guard_leave(void);

/* Stop and close the port (removing it if shim_port_open probed it), free
 * its mempool and the handle. NULL is a no-op. */
void shim_port_close(shim_port *p);

#endif
