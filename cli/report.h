/*
 * report.h: bfpatch report, one self-contained HTML page (inline SVG, no
 * script or file it must fetch) showing where a weight sync's bytes and
 * time go, drawn only from measured input: patch files, the checkpoints
 * they were made from, and the JSON-lines event logs of docs/EVENTS.md.
 */
#ifndef BFP_REPORT_H
#define BFP_REPORT_H

#include <stddef.h>
#include <stdint.h>

/* What the page is made from. Zero-initialise, then fill what you have;
 * every pointer may be NULL (with its count 0). The function reads the
 * files named here and nothing else.
 *
 * patches: patch files (bfpatch diff, or the publisher's history), any
 *   order, one per target version, all of one model. Each is read and
 *   validated like `bfpatch info` does.
 * trajectory: a directory of checkpoints DIR/step-NNNN.safetensors, where
 *   NNNN is the version (%04u, as bfpatch synth and publish name them).
 *   For every patch whose base and target checkpoints are both there, the
 *   patch is applied to the base and must reproduce the target bit for
 *   bit (else an error), and the page gets the PULSESync-style size; the
 *   detailed version also gets the per-tensor heatmap and ULP table.
 * base, target: the checkpoints of the detailed version's patch, when no
 *   trajectory is given. target may be NULL: it is then computed by
 *   applying the patch to base (verified by its range hashes).
 * events: event-log files (publisher, shims, relays; docs/EVENTS.md). A
 *   malformed line is an error, except an unterminated last line (a log
 *   cut short by a crash), which is skipped and noted on the page.
 * link_bps, n_links: link rates in bit/s marked in the refresh-time
 *   chart and table; NULL: 1, 10 and 100 Gbit/s.
 * rollout_min_s, rollout_max_s: the rollout window drawn as a band on the
 *   refresh-time chart (0 < min <= max); both 0: none.
 * version: the target version to detail (heatmap, timeline, topology);
 *   0: the highest target version among the patches, or, without
 *   patches, the highest version that some shim committed.
 * title: page heading; NULL for "bfpatch report".
 * replace: an existing regular file at out_path is replaced; 0: it is
 *   refused (an error, the file left as it is).
 *
 * At least one patch or one event log is needed. Sections whose input is
 * absent are still on the page and say what they would need.
 */
typedef struct report_input {
	const char *const *patches;
	size_t n_patches;
	const char *trajectory;
	const char *base;
	const char *target;
	const char *const *events;
	size_t n_events;
	const double *link_bps;
	size_t n_links;
	double rollout_min_s;
	double rollout_max_s;
	uint32_t version;
	const char *title;
	int replace;
} report_input;

/* Build the page and write it to out_path atomically (temporary file in
 * the same directory, fsync, rename; "-": standard output). Returns 0, or -1 with a message in
 * err (errlen bytes) on bad input (unreadable, truncated or corrupt patch,
 * patches of different models or of one version twice, checkpoints that
 * do not match the patch, malformed event line, missing required event
 * key, bad options) or when out_path cannot be written; on error no file
 * is created or replaced. It has no global state (calls for different
 * outputs may run in parallel); with checkpoints it holds about three
 * copies of the model's parameters at a time. */
int report_write(const report_input *in, const char *out_path, char *err, size_t errlen);

/* The `bfpatch report` subcommand: parses argv (argv[0] is "report"),
 * prints usage for --help, returns the process exit status. */
int report_main(int argc, char **argv);

#endif
