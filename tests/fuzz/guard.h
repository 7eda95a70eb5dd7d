/*
 * guard.h: buffers that end (or start) at an inaccessible page, so that any
 * read or write past an edge faults at once in fuzzing and replay.
 */
#ifndef BFP_GUARD_H
#define BFP_GUARD_H

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct guarded {
	uint8_t *map;
	size_t map_len;
	uint8_t *p; /* n usable bytes, the page after them is PROT_NONE */
} guarded;

static inline int guarded_alloc(guarded *g, size_t n)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	size_t body = (n + pg - 1) / pg * pg;
	g->map_len = body + 2 * pg;
	g->map = mmap(NULL, g->map_len, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (g->map == MAP_FAILED)
		return -1;
	mprotect(g->map, pg, PROT_NONE);
	mprotect(g->map + pg + body, pg, PROT_NONE);
	g->p = g->map + pg + body - n;
	return 0;
}

static inline void guarded_free(guarded *g)
{
	munmap(g->map, g->map_len);
}

#endif
