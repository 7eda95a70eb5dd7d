/*
 * bfp_deps.h: the codec's only boundary to the C library. Everything the
 * codec needs from libc is here, mapped to compiler builtins that lower to
 * memcpy/memset/memmove, so the freestanding build links nothing else.
 */
#ifndef BFP_DEPS_H
#define BFP_DEPS_H

#include <stddef.h>
#include <stdint.h>

#define BFP_MEMCPY(d, s, n) __builtin_memcpy((d), (s), (n))
#define BFP_MEMSET(d, c, n) __builtin_memset((d), (c), (n))
#define BFP_MEMMOVE(d, s, n) __builtin_memmove((d), (s), (n))

#endif
