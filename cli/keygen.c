/*
 * keygen.c: `bfpatch keygen FILE`, a new random key in the format
 * rp_auth_load reads (common/auth.h: "KEY_ID HEX64", owner-only). The key
 * is written to a temporary file beside FILE and linked into place only
 * if FILE does not exist, so an existing key is never replaced and no
 * half-written key is ever seen under FILE.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

static const char keygen_usage[] =
	"usage: bfpatch keygen FILE [--id N]\n"
	"Write a new random key to FILE (mode 0600; an existing FILE is never\n"
	"replaced), as --key of bfpatch publish, bfpatch-relay and bfpatch-shim\n"
	"reads it: one line, the key id then 32 random bytes in hex\n"
	"(docs/SECURITY.md). Give the same file to every part.\n"
	"  -i, --id N   key id, 0..4294967295 (default 1): the id receivers look\n"
	"               the key up by; keys held together need different ids\n"
	"  -q, --quiet  no summary on stderr\n"
	"  -v, --verbose  the summary with the key file's absolute path\n"
	"  -h, --help\n";

/* 32 bytes from the kernel's CSPRNG (getrandom(2), blocking until it is
 * seeded): 0, or -1 with errno. */
static int random_key(unsigned char k[32])
{
	size_t got = 0;
	while (got < 32) {
		ssize_t n = getrandom(k + got, 32 - got, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		got += (size_t)n;
	}
	return 0;
}

/* Write all of buf to fd: 0, or -1 with errno. */
static int write_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = write(fd, buf, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Move tmp to path unless path exists: renameat2's RENAME_NOREPLACE, or a
 * hard link where the file system lacks it. 0, or -1 with errno (EEXIST:
 * path exists). */
static int place_no_replace(const char *tmp, const char *path)
{
	if (renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_NOREPLACE) == 0)
		return 0;
	if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
		return -1;
	if (link(tmp, path))
		return -1;
	unlink(tmp);
	return 0;
}

/* The key line into a temporary file beside path, made durable, then put
 * at path if nothing is there. 0, or -1 after a message. */
static int write_key(const char *path, uint32_t id, const unsigned char k[32])
{
	char dir_buf[PATH_MAX], tmp[PATH_MAX + 32], line[96];
	if (snprintf(dir_buf, sizeof(dir_buf), "%s", path) >= (int)sizeof(dir_buf)) {
		fprintf(stderr, "bfpatch keygen: %s: path too long\n", path);
		return -1;
	}
	const char *dir = dirname(dir_buf);
	snprintf(tmp, sizeof(tmp), "%s/.bfpatch-keygen.XXXXXX", dir);
	int n = snprintf(line, sizeof(line), "%u ", id);
	for (int i = 0; i < 32; i++)
		n += snprintf(line + n, sizeof(line) - (size_t)n, "%02x", k[i]);
	line[n++] = '\n';
	int fd = mkostemp(tmp, O_CLOEXEC); /* mode 0600 */
	if (fd < 0) {
		fprintf(stderr, "bfpatch keygen: cannot create a file in %s: %s\n", dir,
			strerror(errno));
		explicit_bzero(line, sizeof(line));
		return -1;
	}
	int rc = fchmod(fd, 0600) || write_all(fd, line, (size_t)n) || fsync(fd) ? -1 : 0;
	int err = errno;
	explicit_bzero(line, sizeof(line));
	if (close(fd) && !rc)
		rc = -1, err = errno;
	if (!rc && place_no_replace(tmp, path))
		rc = -1, err = errno;
	if (rc) {
		unlink(tmp);
		if (err == EEXIST)
			fprintf(stderr, "bfpatch keygen: %s exists: not replacing a key (remove "
				"it first, or choose another name)\n", path);
		else
			fprintf(stderr, "bfpatch keygen: writing %s: %s\n", path, strerror(err));
		return -1;
	}
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* the new name, durable */
	if (dfd >= 0) {
		fsync(dfd);
		close(dfd);
	}
	return 0;
}

int keygen_file(const char *path, uint32_t id)
{
	unsigned char k[32];
	if (random_key(k)) {
		fprintf(stderr, "bfpatch keygen: getrandom: %s\n", strerror(errno));
		return -1;
	}
	int rc = write_key(path, id, k);
	explicit_bzero(k, sizeof(k));
	return rc;
}

int cmd_keygen(int argc, char **argv)
{
	static const struct option lo[] = {
		{"id", required_argument, 0, 'i'}, {"quiet", no_argument, 0, 'q'},
		{"verbose", no_argument, 0, 'v'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	uint32_t id = 1;
	int c, verbosity = 1;
	while ((c = getopt_long(argc, argv, "i:qvh", lo, NULL)) != -1) {
		switch (c) {
		case 'q': verbosity = 0; break;
		case 'v': verbosity = 2; break;
		case 'i':
			if (parse_u32(optarg, 0, UINT32_MAX, &id))
				return bad_value("keygen", "--id", optarg);
			break;
		case 'h': fputs(keygen_usage, stdout); return 0;
		default: fputs(keygen_usage, stderr); return 2;
		}
	}
	if (argc - optind != 1) {
		fprintf(stderr, "bfpatch keygen: give one FILE\n%s", keygen_usage);
		return 2;
	}
	const char *path = argv[optind];
	if (!strcmp(path, "-") || !*path) {
		fprintf(stderr, "bfpatch keygen: a key goes to a file of its own, not to "
			"standard output ('%s')\n", path);
		return 2;
	}
	if (keygen_file(path, id))
		return 1;
	char *abs = verbosity > 1 ? realpath(path, NULL) : NULL;
	if (verbosity)
		fprintf(stderr, "bfpatch keygen: wrote key %u to %s (mode 0600); give it to the "
			"publisher, relays and shims with --key %s\n", id, abs ? abs : path, path);
	if (verbosity > 1)
		fprintf(stderr, "bfpatch keygen: key %u is 32 bytes from getrandom(2); receivers "
			"look keys up by id, so keys held together need different ids\n", id);
	free(abs);
	return 0;
}
