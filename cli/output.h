/* output.h: where the bfpatch commands' -o goes (output.c). */
#ifndef BFP_CLI_OUTPUT_H
#define BFP_CLI_OUTPUT_H

#include <stddef.h>

/* out is "-": standard output. */
int out_is_stdout(const char *out);

/* The checks on -o OUT before a command does any work, so that a long
 * encode is not wasted on an output it will refuse. "-" is refused where
 * standard output is a terminal and binary output is asked for. Without
 * force, an existing regular file is refused, unless it is in_place (apply
 * -o BASE; NULL: none); a device, FIFO or socket (-o /dev/null) is written
 * to, not replaced, so it needs no force. 0, or the exit status after a
 * message naming `bfpatch cmd`. */
int out_check(const char *cmd, const char *out, int force, int binary, const char *in_place);

/* Write bufs to OUT: to standard output for "-" (every byte, or an error:
 * a reader that closes it early makes EPIPE an error here, not SIGPIPE);
 * else atomically (write_file_atomic), and without force never over a
 * regular file that exists by then unless it is in_place (write_file_new:
 * two writers racing cannot both win). 0, or -1 with a message in err. */
int out_write(const char *out, int force, const char *in_place, const void *const *bufs,
	      const size_t *lens, size_t nbufs, char *err, size_t errlen);

/* OUT for messages: "standard output" for "-". */
const char *out_name(const char *out);

#endif
