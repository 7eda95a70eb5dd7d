/*
 * version.h: the one version line that `bfpatch version`,
 * `bfpatch-shim --version` and `bfpatch-relay --version` print, so that
 * a deployment can compare them: the project's version (meson.build) and
 * the codec library's (bfpatch.h), with the frame format it writes.
 */
#ifndef BFP_PROGRAM_VERSION_H
#define BFP_PROGRAM_VERSION_H

#include <stdio.h>

#include "bfpatch.h"

#ifndef BFP_PROJECT_VERSION
#error "BFP_PROJECT_VERSION comes from meson.build"
#endif

static inline void bfp_version_print(FILE *f)
{
	fprintf(f, "bfpatch %s (libbfpatch %s, frame format %u)\n", BFP_PROJECT_VERSION,
		BFP_VERSION_STRING, BFP_FORMAT_VERSION);
}

#endif
