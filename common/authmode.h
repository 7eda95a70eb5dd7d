/*
 * authmode.h: the rule every program that takes datagrams from the network
 * follows (docs/SECURITY.md "Keys"): it authenticates them with --key, and
 * runs without authentication only when the operator says --insecure.
 */
#ifndef BFP_AUTHMODE_H
#define BFP_AUTHMODE_H

/* Check prog's (e.g. "bfpatch-shim") --key count and --insecure flag:
 * 0 with keys; 0 after a warning on stderr with --insecure alone, naming
 * reach (what the network can send to, e.g. "127.0.0.1:7500"); 2, the
 * exit status of a usage error, after a one-line message when neither or
 * both are given. */
int auth_mode_check(const char *prog, unsigned n_keys, int insecure, const char *reach);

#endif
