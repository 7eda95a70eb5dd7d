/*
 * output.c: where the bfpatch commands' -o goes. "-" is standard output,
 * for pipelines; anything else is written atomically (model.h). A tool
 * that writes patches and checkpoints replaces an existing file only when
 * the command line says so (--force, or apply's documented in-place
 * update of its BASE): a mistyped name must not destroy a checkpoint.
 */
#define _GNU_SOURCE
#include "output.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model.h"

int out_is_stdout(const char *out)
{
	return out && !strcmp(out, "-");
}

const char *out_name(const char *out)
{
	return out_is_stdout(out) ? "standard output" : out;
}

/* out names an existing regular file (through links), which a write
 * would replace. */
static int replaces_file(const char *out)
{
	struct stat sb;
	return stat(out, &sb) == 0 && S_ISREG(sb.st_mode);
}

int out_check(const char *cmd, const char *out, int force, int binary, const char *in_place)
{
	if (out_is_stdout(out)) {
		if (binary && isatty(STDOUT_FILENO)) {
			fprintf(stderr, "bfpatch %s: -o -: standard output is a terminal, and this "
				"output is binary: redirect or pipe it, or give -o FILE\n", cmd);
			return 2;
		}
		return 0;
	}
	if (!force && replaces_file(out) && !(in_place && same_file(out, in_place))) {
		fprintf(stderr, "bfpatch %s: %s exists: give --force to replace it\n", cmd, out);
		return 1;
	}
	return 0;
}

/* Every byte to standard output. SIGPIPE is ignored while writing, so a
 * reader that went away is EPIPE, said as such, with a non-zero exit. */
static int write_stdout(const void *const *bufs, const size_t *lens, size_t nbufs, char *err,
			size_t errlen)
{
	struct sigaction ign, old;
	memset(&ign, 0, sizeof(ign));
	ign.sa_handler = SIG_IGN;
	sigemptyset(&ign.sa_mask);
	sigaction(SIGPIPE, &ign, &old);
	fflush(stdout); /* nothing of stdio's may follow these bytes */
	int rc = 0;
	for (size_t b = 0; b < nbufs && rc == 0; b++) {
		const uint8_t *p = bufs[b];
		size_t n = lens[b];
		while (n > 0) {
			ssize_t w = write(STDOUT_FILENO, p, n > (1u << 30) ? (1u << 30) : n);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				const int e = w < 0 ? errno : 0;
				rc = set_err(err, errlen, "writing standard output: %s%s",
					     e ? strerror(e) : "short write",
					     e == EPIPE
						     ? " (its reader closed it early: what it read "
						       "is incomplete)"
						     : "");
				break;
			}
			p += w;
			n -= (size_t)w;
		}
	}
	sigaction(SIGPIPE, &old, NULL);
	return rc;
}

int out_write(const char *out, int force, const char *in_place, const void *const *bufs,
	      const size_t *lens, size_t nbufs, char *err, size_t errlen)
{
	if (out_is_stdout(out))
		return write_stdout(bufs, lens, nbufs, err, errlen);
	struct stat sb;
	const int other = stat(out, &sb) == 0 && !S_ISREG(sb.st_mode); /* device, FIFO */
	if (force || other || (in_place && same_file(out, in_place)))
		return write_file_atomic(out, bufs, lens, nbufs, err, errlen);
	int rc = write_file_new(out, bufs, lens, nbufs, err, errlen);
	const size_t l = strlen(err);
	if (rc && l >= 7 && !strcmp(err + l - 7, " exists")) /* made since out_check */
		snprintf(err + l, errlen - l, ": give --force to replace it");
	return rc;
}
