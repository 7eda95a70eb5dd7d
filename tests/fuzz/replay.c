/*
 * replay.c: runs a fuzz harness over every file of the given corpus
 * directories (the committed seeds and any crash reproducers), so that
 * `meson test` replays them with any compiler and sanitizer build.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv)
{
	size_t files = 0;
	for (int a = 1; a < argc; a++) {
		DIR *d = opendir(argv[a]);
		if (!d) {
			fprintf(stderr, "replay: cannot open %s\n", argv[a]);
			return 1;
		}
		struct dirent *e;
		while ((e = readdir(d)) != NULL) {
			if (e->d_name[0] == '.')
				continue;
			char path[4096];
			snprintf(path, sizeof(path), "%s/%s", argv[a], e->d_name);
			FILE *f = fopen(path, "rb");
			if (!f)
				continue;
			fseek(f, 0, SEEK_END);
			long n = ftell(f);
			fseek(f, 0, SEEK_SET);
			uint8_t *buf = malloc((size_t)n + 1);
			if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
				fprintf(stderr, "replay: read error on %s\n", path);
				return 1;
			}
			fclose(f);
			LLVMFuzzerTestOneInput(buf, (size_t)n);
			free(buf);
			files++;
		}
		closedir(d);
	}
	printf("replayed %zu inputs\n", files);
	return files ? 0 : 1;
}
