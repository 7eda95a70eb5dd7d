/*
 * kat_gen.c: writes the known-answer vectors under a directory:
 * NAME.base and NAME.target (raw little-endian BF16) and NAME.patch (the
 * frames, indexed 0..n-1). Run it only when the format changes on purpose
 * (docs/FORMAT.md version history); test_kat checks the committed files
 * and tests/kat_check.py decodes them independently.
 */
#include <stdio.h>

#include "kat_vectors.h"

static int write_file(const char *dir, const char *name, const char *ext,
		      const void *p, size_t n)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s.%s", dir, name, ext);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
		fprintf(stderr, "kat_gen: cannot write %s\n", path);
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: kat_gen DIR\n");
		return 2;
	}
	int rc = 0;
	for (size_t k = 0; k < sizeof(kat_vectors) / sizeof(kat_vectors[0]); k++) {
		const kat_vector *v = &kat_vectors[k];
		uint16_t *b = malloc(v->n * 2), *t = malloc(v->n * 2);
		t_frames f = {0};
		kat_inputs(v, b, t);
		bfp_encode_opts o = kat_opts(v);
		if (t_encode(&o, b, t, v->n, 0, v->n, &f) != BFP_OK)
			return 1;
		for (size_t i = 0; i < f.n; i++)
			bfp_frame_set_index(f.buf + f.off[i], t_frame_len(&f, i), (uint32_t)i,
					    (uint32_t)f.n);
		rc |= write_file(argv[1], v->name, "base", b, v->n * 2);
		rc |= write_file(argv[1], v->name, "target", t, v->n * 2);
		rc |= write_file(argv[1], v->name, "patch", f.buf, f.len);
		printf("%s: %zu parameters, %zu frames, %zu bytes\n", v->name, v->n, f.n, f.len);
		t_frames_free(&f);
		free(b);
		free(t);
	}
	return rc;
}
