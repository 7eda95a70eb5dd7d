/*
 * test_wbuf_writer.c: libbfpatch_wbuf (include/bfpatch_wbuf.h), linked as
 * the shared library trainers load: a layout that does not tile its data
 * is refused, a buffer is never replaced, its writer is alone, and a
 * commit publishes a newer version only, read back through the C reader
 * (wbuf_snapshot) as the publisher reads it.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bfp_test.h"
#include "bfpatch_wbuf.h"
#include "wbuf.h"

/* {"w":BF16 [6]} then {"n":I64 []} (8 bytes): 20 bytes of data */
static const char json[] = "{\"w\":{\"dtype\":\"BF16\",\"shape\":[6],\"data_offsets\":[0,12]},"
			   "\"n\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[12,20]}}";

static size_t header(uint8_t *h)
{
	const size_t n = sizeof(json) - 1, pad = (8 - n % 8) % 8;
	for (int i = 0; i < 8; i++)
		h[i] = (uint8_t)((n + pad) >> (8 * i));
	memcpy(h + 8, json, n);
	memset(h + 8 + n, ' ', pad);
	return 8 + n + pad;
}

static int setup(void **state)
{
	char *path = malloc(64);
	snprintf(path, 64, "/dev/shm/bfpwbw%d", (int)getpid());
	unlink(path);
	*state = path;
	return 0;
}

static int teardown(void **state)
{
	unlink(*state);
	free(*state);
	return 0;
}

/* A header whose tensors do not tile the data, or a file already at the
 * path, is refused and leaves the path as it was. */
static void create_refuses_bad_layouts_and_existing_files(void **state)
{
	const char *path = *state;
	uint8_t h[256], data[24] = {0};
	char err[256];
	const size_t hl = header(h);
	assert_int_equal(bfp_wbuf_create(path, h, hl, data, 22, 0, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "layout refused"));
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(bfp_wbuf_create(path, h, hl, data, 20, 0, err, sizeof(err)), 0);
	assert_int_equal(bfp_wbuf_create(path, h, hl, data, 20, 0, err, sizeof(err)), -1);
}

/* One writer: a second open of the same file is refused while the
 * first is open, and taken once it is closed. */
static void a_second_writer_is_refused(void **state)
{
	const char *path = *state;
	uint8_t h[256];
	char err[512];
	assert_int_equal(bfp_wbuf_create(path, h, header(h), NULL, 20, 3, err, sizeof(err)), 0);
	bfp_wbuf_writer *a = bfp_wbuf_open(path, err, sizeof(err));
	assert_non_null(a);
	assert_null(bfp_wbuf_open(path, err, sizeof(err)));
	assert_non_null(strstr(err, "locked by its writer"));
	bfp_wbuf_close(a);
	a = bfp_wbuf_open(path, err, sizeof(err));
	assert_non_null(a);
	assert_int_equal(bfp_wbuf_version(a), 3);
	bfp_wbuf_close(a);
}

/* begin/commit: only a newer version; the data written between them is
 * what a reader's snapshot holds afterwards, at that version, with the
 * sequence counter odd during the commit and even after it. */
static void a_commit_publishes_a_newer_version_whole(void **state)
{
	const char *path = *state;
	uint8_t h[256];
	char err[256];
	assert_int_equal(bfp_wbuf_create(path, h, header(h), NULL, 20, 0, err, sizeof(err)), 0);
	bfp_wbuf_writer *w = bfp_wbuf_open(path, err, sizeof(err));
	assert_non_null(w);
	wbuf r;
	assert_int_equal(wbuf_open(&r, path, err, sizeof(err)), 0);
	assert_int_equal(bfp_wbuf_commit(w, err, sizeof(err)), -1);
	assert_int_equal(bfp_wbuf_begin(w, 0, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "not newer"));
	uint64_t n;
	uint8_t *d = bfp_wbuf_data(w, &n);
	assert_int_equal(n, 20);
	assert_int_equal(bfp_wbuf_begin(w, 2, err, sizeof(err)), 0);
	assert_int_equal(atomic_load(&r.h->seq) & 1, 1);
	assert_int_equal(bfp_wbuf_state(w), WBUF_COMMITTING);
	for (int i = 0; i < 20; i++)
		d[i] = (uint8_t)(0xA0 + i);
	assert_int_equal(bfp_wbuf_commit(w, err, sizeof(err)), 0);
	uint16_t snap[10];
	uint32_t v;
	assert_int_equal(wbuf_snapshot(&r, snap, &v), 0);
	assert_int_equal(v, 2);
	assert_int_equal(atomic_load(&r.h->seq), 2);
	assert_memory_equal(snap, d, 20);
	assert_int_equal(bfp_wbuf_state(w), WBUF_READY);
	assert_int_equal(bfp_wbuf_begin(w, 2, err, sizeof(err)), -1);
	wbuf_close(&r);
	bfp_wbuf_close(w);
}

int main(void)
{
	assert_int_equal(bfp_wbuf_abi(), BFP_WBUF_ABI);
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
	const struct CMUnitTest tests[] = {
		T(create_refuses_bad_layouts_and_existing_files),
		T(a_second_writer_is_refused),
		T(a_commit_publishes_a_newer_version_whole),
	};
	return cmocka_run_group_tests_name("wbuf-writer", tests, NULL, NULL);
}
