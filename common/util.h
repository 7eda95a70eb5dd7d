/*
 * util.h: small helpers every program of the project shares: a monotonic
 * clock, range-checked number parsing, and the "bfpatch CMD: ..." error
 * lines of the command-line tool and the publisher.
 */
#ifndef BFP_UTIL_H
#define BFP_UTIL_H

#include <stdint.h>

#define ERRLEN 512

/* CLOCK_MONOTONIC in seconds */
double now_s(void);

/* Prints "bfpatch CMD: MSG" to stderr; returns 1 (the exit status). */
int die(const char *cmd, const char *msg);

/* Decimal (or 0x hex) within [0, max] / [lo, hi]: 0, else -1 and *out
 * untouched. */
int parse_u64(const char *s, uint64_t max, uint64_t *out);
int parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out);

/* Prints that VAL is no valid value of OPT for CMD; returns 2 (the exit
 * status of a usage error). */
int bad_value(const char *cmd, const char *opt, const char *val);

#endif
