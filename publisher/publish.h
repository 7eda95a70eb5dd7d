/*
 * publish.h: the trainer-side publisher, run as `bfpatch publish`.
 */
#ifndef BFP_PUBLISH_H
#define BFP_PUBLISH_H

/* `bfpatch publish ARGS...` (argv[0] is "publish"): runs until its steps
 * are done or a signal ends it; returns the exit status. */
int cmd_publish(int argc, char **argv);

#endif
