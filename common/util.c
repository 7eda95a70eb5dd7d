/*
 * util.c: the shared helpers of util.h.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <time.h>

#include "proto.h"
#include "util.h"

double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int die(const char *cmd, const char *msg)
{
	fprintf(stderr, "bfpatch %s: %s\n", cmd, msg);
	return 1;
}

int parse_u64(const char *s, uint64_t max, uint64_t *out)
{
	return rp_parse_num(s, 0, max, out);
}

int parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
	uint64_t v;
	if (parse_u64(s, hi, &v) || v < lo)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

int bad_value(const char *cmd, const char *opt, const char *val)
{
	fprintf(stderr, "bfpatch %s: invalid value '%s' for %s (see bfpatch %s --help)\n",
		cmd, val ? val : "", opt, cmd);
	return 2;
}
