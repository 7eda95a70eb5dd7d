/* cli.h: helpers shared by the bfpatch subcommands (bfpatch.c). */
#ifndef BFP_CLI_H
#define BFP_CLI_H

#include <stdint.h>

#define ERRLEN 512

double now_s(void);                       /* CLOCK_MONOTONIC seconds */
int die(const char *cmd, const char *msg); /* prints, returns 1 */
int parse_u64(const char *s, uint64_t max, uint64_t *out);
int parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out);
int bad_value(const char *cmd, const char *opt, const char *val); /* returns 2 */
/* --sparse-v1 with --self-contained (BFP_ENC_F_* in enc_flags): prints why
 * and returns 2; else 0 */
int sparse_flags_clash(const char *cmd, uint32_t enc_flags);

int cmd_publish(int argc, char **argv);   /* publish.c */
int cmd_demo(int argc, char **argv);      /* demo.c */

#endif
