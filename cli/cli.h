/* cli.h: the bfpatch subcommands that live in files of their own. */
#ifndef BFP_CLI_H
#define BFP_CLI_H

#include "util.h"

int cmd_demo(int argc, char **argv);      /* demo.c */
int cmd_keygen(int argc, char **argv);    /* keygen.c */

/* A new random key of id in a new file at path, as `bfpatch keygen`
 * writes it (mode 0600; an existing path is left alone): 0, or -1 after
 * a message on stderr. */
int keygen_file(const char *path, uint32_t id);

#endif
