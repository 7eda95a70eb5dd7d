/*
 * fuzz_patch.c: libFuzzer harness for the patch file reader (frame
 * splitting and whole-patch consistency checks) and the coverage check.
 */
#include <stdlib.h>

#include "guard.h"
#include "patch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	patch p;
	char err[256];
	memset(&p, 0, sizeof(p));
	p.buf = malloc(size ? size : 1);
	memcpy(p.buf, data, size);
	p.len = p.cap = size;
	if (patch_parse(&p, err, sizeof(err)) == 0)
		(void)patch_check_cover(&p, 100000, err, sizeof(err));
	patch_free(&p);
	return 0;
}
