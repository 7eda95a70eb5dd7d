/*
 * events.h: the JSON-lines event log of docs/EVENTS.md. Each line is
 * written with one write(2) on a file opened O_APPEND, so a crash leaves
 * whole lines only, and several processes may share one file.
 */
#ifndef BFP_EVENTS_H
#define BFP_EVENTS_H

typedef struct events {
	int fd;            /* -1: logging off, every call is a no-op */
	int echo;          /* 1 + a descriptor each line also goes to (a
			    * program's -v: stderr); 0: none */
	char src[16];
	char id[48];
} events;

/* Open path for appending (path NULL: off). src is "publish", "shim" or
 * "relay"; id the process's name. Returns 0, or -1 with errno set. */
int events_open(events *e, const char *path, const char *src, const char *id);

/* One line: {"t":...,"src":...,"id":...,"ev":ev<,fields>}. fields is
 * printf-style JSON members without braces or a leading comma, e.g.
 * "\"version\":%u", or NULL. Lines longer than 1 KiB are dropped. */
void events_emit(events *e, const char *ev, const char *fields, ...)
	__attribute__((format(printf, 3, 4)));

/* Also write every line to fd (e.g. 2 for stderr), with or without a
 * log file; events_open sets none. */
void events_echo(events *e, int fd);

void events_close(events *e);

#endif
