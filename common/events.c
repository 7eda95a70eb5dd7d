/* events.c: the JSON-lines event log (events.h, docs/EVENTS.md). */
#define _GNU_SOURCE
#include "events.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int events_open(events *e, const char *path, const char *src, const char *id)
{
	e->fd = -1;
	e->echo = 0;
	snprintf(e->src, sizeof(e->src), "%s", src);
	snprintf(e->id, sizeof(e->id), "%s", id && *id ? id : src);
	for (char *c = e->id; *c; c++) /* the id goes into JSON unescaped */
		if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20)
			*c = '_';
	if (!path)
		return 0;
	e->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	return e->fd < 0 ? -1 : 0;
}

void events_emit(events *e, const char *ev, const char *fields, ...)
{
	if (!e || (e->fd < 0 && !e->echo))
		return;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	char line[1024];
	int n = snprintf(line, sizeof(line), "{\"t\":%lld.%06ld,\"src\":\"%s\",\"id\":\"%s\",\"ev\":\"%s\"",
			 (long long)ts.tv_sec, ts.tv_nsec / 1000, e->src, e->id, ev);
	if (fields && n > 0 && (size_t)n < sizeof(line) - 1) {
		line[n++] = ',';
		va_list ap;
		va_start(ap, fields);
		int m = vsnprintf(line + n, sizeof(line) - (size_t)n, fields, ap);
		va_end(ap);
		n = m < 0 ? -1 : n + m;
	}
	if (n < 0 || (size_t)n > sizeof(line) - 3)
		return;
	line[n++] = '}';
	line[n++] = '\n';
	if (e->fd >= 0) {
		ssize_t w = write(e->fd, line, (size_t)n);
		(void)w;
	}
	if (e->echo) {
		ssize_t w = write(e->echo - 1, line, (size_t)n);
		(void)w;
	}
}

void events_echo(events *e, int fd)
{
	e->echo = fd + 1;
}

void events_close(events *e)
{
	if (e->fd >= 0)
		close(e->fd);
	e->fd = -1;
}
