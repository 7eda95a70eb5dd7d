/* cli.h: the bfpatch subcommands that live in files of their own. */
#ifndef BFP_CLI_H
#define BFP_CLI_H

#include "util.h"

int cmd_demo(int argc, char **argv);      /* demo.c */

#endif
