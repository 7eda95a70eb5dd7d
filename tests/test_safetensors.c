/*
 * test_safetensors.c: the safetensors header parser accepts valid headers
 * and rejects everything the format forbids, with a message, never
 * reading outside the given bytes; model_map gives the words model_load
 * reads, and a mapped file that shrinks ends the process with a message;
 * model_load_into reads into a spare buffer.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "model.h"

/* Parse JSON as a header for a file with data_bytes of data. */
static int parse(const char *json, uint64_t data_bytes, model *m, char *err)
{
	size_t n = strlen(json);
	uint8_t *h = malloc(8 + n);
	for (int i = 0; i < 8; i++)
		h[i] = (uint8_t)((uint64_t)n >> (8 * i));
	memcpy(h + 8, json, n);
	int rc = model_parse_safetensors(m, h, 8 + n, 8 + n + data_bytes, err, 256);
	free(h);
	return rc;
}

/* Valid headers give the tensors sorted by offset, with names and shapes. */
static void test_valid_header_is_parsed_in_offset_order(void **state)
{
	(void)state;
	model m;
	char err[256] = "";
	const char *j = "{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[6,14]},"
			"\"__metadata__\":{\"format\":\"pt\"},"
			"\"a\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,6]},"
			"\"c\":{\"dtype\":\"U8\",\"shape\":[1,3],\"data_offsets\":[14,17]}}   ";
	assert_int_equal(parse(j, 17, &m, err), 0);
	assert_int_equal(m.n_tensors, 3);
	assert_string_equal(m.tensors[0].name, "a");
	assert_string_equal(m.tensors[1].name, "b");
	assert_int_equal(m.tensors[1].dtype, BFP_DT_F32);
	assert_int_equal(m.tensors[2].shape[1], 3);
	assert_int_equal(m.data_bytes, 17);
	assert_int_equal(m.n_params, 9); /* 17 bytes -> 9 words, last padded */
	model_free(&m);
}

/* The model id depends on names, dtypes, shapes and offsets. */
static void test_model_id_changes_with_the_layout(void **state)
{
	(void)state;
	model a, b, c;
	char err[256];
	assert_int_equal(parse("{\"x\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,8]}}", 8, &a, err), 0);
	assert_int_equal(parse("{\"x\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,8]}}", 8, &b, err), 0);
	assert_int_equal(parse("{\"y\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,8]}}", 8, &c, err), 0);
	assert_true(a.model_id != b.model_id);
	assert_true(a.model_id != c.model_id);
	model_free(&a);
	model_free(&b);
	model_free(&c);
}

/* Each header below breaks one rule of the format and is rejected. */
static void test_forbidden_headers_are_rejected(void **state)
{
	(void)state;
	static const struct {
		const char *json;
		uint64_t data;
		const char *why;
	} cases[] = {
		{"{\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]},"
		 "\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[4,8]}}", 8, "duplicate key"},
		{"{\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[2,6]}}", 6, "hole at start"},
		{"{\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]},"
		 "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[2,6]}}", 6, "overlap"},
		{"{\"a\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,4]}}", 4, "size vs shape"},
		{"{\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 6, "trailing data"},
		{"{\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 2, "data too short"},
		{"{\"a\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "unknown dtype"},
		{"{\"a\":{\"dtype\":\"BF16\",\"shape\":[-2],\"data_offsets\":[0,4]}}", 4, "negative dim"},
		{"{\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[4,0]}}", 4, "end before begin"},
		{"{\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0]}}", 4, "one offset"},
		{"{\"a\":{\"dtype\":\"BF16\",\"shape\":[2]}}", 4, "no offsets"},
		{"{\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4],\"x\":1}}", 4, "extra field"},
		{"{\"a\":[1,2]}", 0, "tensor not an object"},
		{"{\"__metadata__\":{\"k\":1}}", 0, "metadata value not a string"},
		{"{\"__metadata__\":[]}", 0, "metadata not an object"},
		{"[1,2,3]", 0, "not an object"},
		{"{\"a\":", 0, "truncated JSON"},
		{"{} x", 0, "garbage after JSON"},
		{" {}", 0, "does not start with {"},
		{"{\"a\":{\"dtype\":\"BF16\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,4]}}", 4, "shape overflow"},
		{"{\"a\":{\"dtype\":\"BF16\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,2]}}", 2, "too many dims"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		model m;
		char err[256] = "";
		int rc = parse(cases[i].json, cases[i].data, &m, err);
		if (rc == 0)
			fail_msg("accepted: %s", cases[i].why);
		assert_true(strlen(err) > 0);
	}
}

/* Header lengths beyond the buffer or the 100 MB limit are rejected. */
static void test_bad_header_lengths_are_rejected(void **state)
{
	(void)state;
	model m;
	char err[256];
	uint8_t h[16] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F, '{', '}'};
	assert_int_equal(model_parse_safetensors(&m, h, 10, 10, err, sizeof(err)), -1);
	uint8_t h2[16] = {20, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
	assert_int_equal(model_parse_safetensors(&m, h2, 10, 10, err, sizeof(err)), -1);
	assert_int_equal(model_parse_safetensors(&m, h2, 4, 4, err, sizeof(err)), -1);
}

/* Write a safetensors file: header JSON padded with spaces to hlen
 * bytes, then data_bytes of a pattern; returns the temporary's path. */
static char *write_st(uint64_t hlen, uint64_t data_bytes)
{
	static char path[64];
	char json[8192];
	snprintf(path, sizeof(path), "/tmp/bfp_st_XXXXXX.safetensors");
	int fd = mkstemps(path, 12);
	assert_true(fd >= 0);
	int n = snprintf(json, sizeof(json),
			 "{\"w\":{\"dtype\":\"U8\",\"shape\":[%llu],\"data_offsets\":[0,%llu]}}",
			 (unsigned long long)data_bytes, (unsigned long long)data_bytes);
	assert_true(n > 0 && (uint64_t)n <= hlen && hlen < sizeof(json));
	memset(json + n, ' ', (size_t)(hlen - (uint64_t)n));
	uint8_t len8[8];
	for (int i = 0; i < 8; i++)
		len8[i] = (uint8_t)(hlen >> (8 * i));
	uint8_t *data = malloc(data_bytes);
	for (uint64_t i = 0; i < data_bytes; i++)
		data[i] = (uint8_t)(i * 131 + (i >> 9)); /* not the same per page */
	assert_int_equal(write(fd, len8, 8), 8);
	assert_int_equal(write(fd, json, hlen), (ssize_t)hlen);
	assert_int_equal(write(fd, data, data_bytes), (ssize_t)data_bytes);
	free(data);
	close(fd);
	return path;
}

/* model_map gives the model model_load reads, word for word: mapped where
 * the data section is whole words at an even offset, copied where not. */
static void test_mapped_model_is_the_loaded_model(void **state)
{
	(void)state;
	static const struct {
		uint64_t hlen, data_bytes;
		int mapped;
	} cases[] = {
		{128, 1 << 20, 1},   /* data at offset 136 */
		{133, 1 << 20, 0},   /* odd offset: read */
		{128, 100001, 0},    /* odd length: read, last word padded */
		{4088, 8192, 1},     /* data at a page boundary */
	};
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		char *path = write_st(cases[c].hlen, cases[c].data_bytes);
		model a, b;
		char err[256] = "";
		assert_int_equal(model_load(&a, path, err, sizeof(err)), 0);
		assert_int_equal(model_map(&b, path, err, sizeof(err)), 0);
		assert_int_equal(b.map != NULL, cases[c].mapped);
		assert_int_equal(a.n_params, b.n_params);
		assert_true(a.model_id == b.model_id);
		assert_memory_equal(a.params, b.params, a.n_params * 2);
		if (cases[c].data_bytes % 2) /* the padding byte, zero */
			assert_int_equal(b.params[b.n_params - 1] >> 8, 0);
		model_free(&a);
		model_free(&b);
		unlink(path);
	}
	/* a raw BF16 file maps whole */
	char raw[] = "/tmp/bfp_raw_XXXXXX";
	int fd = mkstemp(raw);
	uint16_t w[3000];
	for (int i = 0; i < 3000; i++)
		w[i] = (uint16_t)(i * 40503u);
	assert_int_equal(write(fd, w, sizeof(w)), (ssize_t)sizeof(w));
	close(fd);
	model m;
	char err[256];
	assert_int_equal(model_map(&m, raw, err, sizeof(err)), 0);
	assert_non_null(m.map);
	assert_int_equal(m.n_params, 3000);
	assert_memory_equal(m.params, w, sizeof(w));
	model_free(&m);
	unlink(raw);
}

/* model_load_into reads into the caller's buffer when the data fits
 * (the model then owns it; an odd section's padding byte is zeroed over
 * whatever the buffer held), and leaves the buffer alone and the
 * caller's when it does not fit or the load fails. */
static void test_load_into_a_spare_buffer(void **state)
{
	(void)state;
	static const uint64_t sizes[] = {1 << 20, 100001};
	for (size_t c = 0; c < 2; c++) {
		char *path = write_st(128, sizes[c]);
		model a, b;
		char err[256] = "";
		const size_t cap = (size_t)sizes[c] + 1;
		uint8_t *buf = alloc_aligned(cap);
		memset(buf, 0xA5, cap);
		assert_int_equal(model_load(&a, path, err, sizeof(err)), 0);
		assert_int_equal(model_load_into(&b, path, buf, cap, err, sizeof(err)), 0);
		assert_ptr_equal(b.params, buf);
		assert_memory_equal(a.params, b.params, a.n_params * 2);
		model_free(&b); /* frees buf */
		/* too small: another buffer, this one untouched */
		uint8_t *small = alloc_aligned(64);
		memset(small, 0xA5, 64);
		assert_int_equal(model_load_into(&b, path, small, 64, err, sizeof(err)), 0);
		assert_true((uint8_t *)b.params != small);
		assert_memory_equal(a.params, b.params, a.n_params * 2);
		for (int i = 0; i < 64; i++)
			assert_int_equal(small[i], 0xA5);
		model_free(&b);
		/* failures: the buffer is still the caller's (freed below once) */
		assert_int_equal(model_load_into(&b, "/nonexistent/x.safetensors", small, 64, err,
						 sizeof(err)), -1);
		assert_int_equal(truncate(path, 100), 0);
		assert_int_equal(model_load_into(&b, path, small, 64, err, sizeof(err)), -1);
		assert_true(strlen(err) > 0);
		free(small);
		model_free(&a);
		unlink(path);
	}
}

/* A mapped file cut short under the process: the next read past its new
 * end is a SIGBUS, which atomic_cleanup_on_signals turns into a line on
 * stderr saying why before the process dies of it. */
static void test_mapped_file_that_shrinks_ends_with_a_message(void **state)
{
	(void)state;
	char *path = write_st(128, 64 << 10);
	int pfd[2];
	assert_int_equal(pipe(pfd), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		model m;
		char err[256];
		dup2(pfd[1], 2);
		atomic_cleanup_on_signals();
		if (model_map(&m, path, err, sizeof(err)) || !m.map)
			_exit(3);
		if (truncate(path, 4096) != 0)
			_exit(4);
		volatile uint16_t last = m.params[m.n_params - 1];
		(void)last;
		_exit(0); /* not reached when the read faults */
	}
	close(pfd[1]);
	char msg[512] = "";
	ssize_t got = 0, r;
	while ((r = read(pfd[0], msg + got, sizeof(msg) - 1 - (size_t)got)) > 0)
		got += r;
	close(pfd[0]);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	unlink(path);
	assert_true(WIFSIGNALED(st));
	assert_int_equal(WTERMSIG(st), SIGBUS);
	assert_non_null(strstr(msg, "input file shrank"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_valid_header_is_parsed_in_offset_order),
		cmocka_unit_test(test_model_id_changes_with_the_layout),
		cmocka_unit_test(test_forbidden_headers_are_rejected),
		cmocka_unit_test(test_bad_header_lengths_are_rejected),
		cmocka_unit_test(test_mapped_model_is_the_loaded_model),
		cmocka_unit_test(test_mapped_file_that_shrinks_ends_with_a_message),
		cmocka_unit_test(test_load_into_a_spare_buffer),
	};
	return cmocka_run_group_tests_name("safetensors", tests, NULL, NULL);
}
