/*
 * authmode.c: secure by default. The publisher, the relay and the shim
 * refuse to start without a key unless told --insecure, and say so in the
 * same words, so no deployment runs unauthenticated by omission.
 */
#include "authmode.h"

#include <stdio.h>

int auth_mode_check(const char *prog, unsigned n_keys, int insecure, const char *reach)
{
	if (n_keys && insecure) {
		fprintf(stderr, "%s: --insecure turns authentication off and --key turns it on: "
			"give one of them\n", prog);
		return 2;
	}
	if (!n_keys && !insecure) {
		fprintf(stderr, "%s: no --key: make one with 'bfpatch keygen FILE' and give the "
			"same file to every part with --key FILE, or pass --insecure to turn "
			"authentication off\n", prog);
		return 2;
	}
	if (insecure)
		fprintf(stderr, "%s: warning: --insecure: authentication is off; this process "
			"accepts unauthenticated frames and control messages from anyone who can "
			"reach %s\n", prog, reach);
	return 0;
}
