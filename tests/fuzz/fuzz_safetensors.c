/*
 * fuzz_safetensors.c: libFuzzer harness for the safetensors header parser;
 * the input is the whole file prefix, placed against a guard page.
 */
#include <stdlib.h>

#include "guard.h"
#include "model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	guarded in;
	model m;
	char err[256];
	if (guarded_alloc(&in, size))
		abort();
	memcpy(in.p, data, size);
	/* claim a file size a little larger than the input, as a real file */
	if (model_parse_safetensors(&m, in.p, size, size + (size & 63), err, sizeof(err)) == 0)
		model_free(&m);
	guarded_free(&in);
	return 0;
}
