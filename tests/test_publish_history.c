/*
 * test_publish_history.c: the publisher's version history
 * (publisher/history.c): which patches --keep holds and --history keeps
 * on disk, which ones lead a subscriber at version v to the current one,
 * what a restart (--resume) takes back from disk or makes from the
 * checkpoints, and what a full disk or a rolled-back trainer does to it.
 * Every patch held is checked by applying it; checkpoints are small
 * safetensors files in a temporary directory.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bfp_test.h"
#include "util.h"
#include "publisher.h"

#define NP 20000u   /* parameters of the test model */
#define NV 6        /* versions 0..5 */

typedef struct fixture {
	char root[64];           /* the temporary directory */
	char ckpt[96];           /* checkpoints: step-NNNN.safetensors */
	char hist[96];           /* --history */
	uint16_t *w[NV];         /* each version's weights */
	model m[NV];             /* each version loaded from its checkpoint */
	patch_opts po;
	pub_history h;
} fixture;

/* A one-tensor safetensors checkpoint of w as dir/step-NNNN. */
static void write_ckpt(const char *dir, unsigned step, const uint16_t *w)
{
	char json[160], path[256];
	int n = snprintf(json, sizeof(json), "{\"w\":{\"dtype\":\"BF16\",\"shape\":[%u],"
			 "\"data_offsets\":[0,%u]}}", NP, 2 * NP);
	while (n % 8)
		json[n++] = ' ';
	uint8_t len[8];
	for (int i = 0; i < 8; i++)
		len[i] = (uint8_t)((uint64_t)n >> (8 * i));
	snprintf(path, sizeof(path), "%s/step-%04u.safetensors", dir, step);
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(len, 1, 8, f), 8);
	assert_int_equal(fwrite(json, 1, (size_t)n, f), (size_t)n);
	assert_int_equal(fwrite(w, 2, NP, f), NP); /* little-endian words, as on the hosts */
	assert_int_equal(fclose(f), 0);
}

static void load_ckpt(const fixture *f, unsigned step, model *m)
{
	char path[256], err[ERRLEN];
	snprintf(path, sizeof(path), "%s/step-%04u.safetensors", f->ckpt, step);
	if (model_load(m, path, err, sizeof(err)))
		fail_msg("%s", err);
}

/* Weights of another run: what a trainer that rolled back writes. */
static uint16_t *other_weights(const uint16_t *from, uint64_t seed)
{
	uint16_t *w = malloc(NP * 2);
	assert_non_null(w);
	t_mutate(from, w, NP, 50000, &seed);
	return w;
}

static int setup(void **state)
{
	fixture *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	snprintf(f->root, sizeof(f->root), "/tmp/bfphistXXXXXX");
	assert_non_null(mkdtemp(f->root));
	snprintf(f->ckpt, sizeof(f->ckpt), "%s/ckpt", f->root);
	snprintf(f->hist, sizeof(f->hist), "%s/hist", f->root);
	assert_int_equal(mkdir(f->ckpt, 0700), 0);
	assert_int_equal(mkdir(f->hist, 0700), 0);
	uint64_t seed = 11;
	for (unsigned v = 0; v < NV; v++) {
		f->w[v] = malloc(NP * 2);
		assert_non_null(f->w[v]);
		if (v == 0)
			for (unsigned i = 0; i < NP; i++)
				f->w[0][i] = t_weight(&seed);
		else
			t_mutate(f->w[v - 1], f->w[v], NP, 2000, &seed);
		write_ckpt(f->ckpt, v, f->w[v]);
		load_ckpt(f, v, &f->m[v]);
	}
	f->po.frame_size = BFP_FRAME_SIZE_DEFAULT;
	f->po.threads = 1;
	*state = f;
	return 0;
}

static void remove_all(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		char path[512];
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (unlink(path) != 0)
			remove_all(path);
	}
	if (d)
		closedir(d);
	rmdir(dir);
}

static int teardown(void **state)
{
	fixture *f = *state;
	history_free(&f->h);
	for (unsigned v = 0; v < NV; v++) {
		model_free(&f->m[v]);
		free(f->w[v]);
	}
	remove_all(f->root);
	free(f);
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in dir, sorted, each followed by a space (as `ls | tr`). */
static const char *listing(const char *dir)
{
	static char out[1024];
	char *names[32];
	size_t n = 0;
	DIR *d = opendir(dir);
	struct dirent *e;
	assert_non_null(d);
	while ((e = readdir(d)))
		if (e->d_name[0] != '.' && n < 32)
			names[n++] = strdup(e->d_name);
	closedir(d);
	qsort(names, n, sizeof(names[0]), cmp_str);
	out[0] = 0;
	for (size_t i = 0; i < n; i++) {
		strncat(out, names[i], sizeof(out) - strlen(out) - 2);
		strcat(out, " ");
		free(names[i]);
	}
	return out;
}

/* Domain assert: p takes the weights of version from to those of to. */
static void assert_patch_goes(const fixture *f, const patch *p, const uint16_t *from,
			      const uint16_t *to)
{
	char err[ERRLEN];
	uint16_t *w = malloc(NP * 2);
	assert_non_null(p);
	assert_non_null(w);
	memcpy(w, from, NP * 2);
	if (patch_apply(p, w, NP, f->m[0].model_id, 1, 0, err, sizeof(err)))
		fail_msg("patch does not apply: %s", err);
	assert_words_equal(w, to, NP);
	free(w);
}

static void add(fixture *f, unsigned b, unsigned t)
{
	assert_int_equal(history_add(&f->h, &f->m[b], &f->m[t], b, t, &f->po), 0);
}

/* --keep 2 after patches 0->1, 1->2, 2->3: the two newest are held and
 * are the only files in --history; 0->1 is gone from both. */
static void test_the_newest_keep_patches_are_held_and_older_ones_dropped(void **state)
{
	fixture *f = *state;
	history_init(&f->h, 2, f->hist, f->ckpt);
	add(f, 0, 1);
	add(f, 1, 2);
	add(f, 2, 3);
	assert_int_equal(f->h.n, 2);
	assert_null(history_find(&f->h, 1));
	assert_patch_goes(f, history_find(&f->h, 2), f->w[1], f->w[2]);
	assert_patch_goes(f, history_find(&f->h, 3), f->w[2], f->w[3]);
	assert_string_equal(listing(f->hist), "v00000001-v00000002.bfp v00000002-v00000003.bfp ");
	assert_int_equal(f->h.errors, 0);
}

/* The next patch takes a free slot while there is one (nothing evicted),
 * then the slot of the lowest target version, whichever slot that is (a
 * restart fills slots in directory order). */
static void test_evicting_takes_a_free_slot_then_the_oldest_target(void **state)
{
	fixture *f = *state;
	uint32_t ob = 99, ov = 99;
	history_init(&f->h, 3, NULL, NULL);
	const uint32_t pairs[3][2] = {{4, 5}, {2, 3}, {3, 4}};
	for (unsigned i = 0; i < 3; i++) {
		unsigned slot = history_evict(&f->h, &ob, &ov);
		assert_int_equal(slot, i);
		assert_int_equal(ob, 0);
		assert_int_equal(ov, 0);
		history_hold(&f->h, slot, pairs[i][0], pairs[i][1]);
	}
	assert_int_equal(history_evict(&f->h, &ob, &ov), 1);
	assert_int_equal(ob, 2);
	assert_int_equal(ov, 3);
	assert_int_equal(f->h.n, 3);
}

/* A subscriber at v catches up with the held patches that lead from v to
 * the current version (versions may be skipped), starting with the one
 * from v; from a version no held patch starts at, ahead of the current
 * one, or across a gap, there is no chain (it gets a keyframe stream). */
static void test_a_subscriber_at_v_gets_the_held_patches_that_lead_from_v(void **state)
{
	fixture *f = *state;
	uint32_t first = 0;
	history_init(&f->h, 4, NULL, f->ckpt);
	add(f, 1, 2);
	add(f, 2, 3);
	add(f, 3, 5); /* a trainer that kept no step 4 */
	assert_true(history_chain(&f->h, 1, 5, &first));
	assert_int_equal(first, 2);
	assert_true(history_chain(&f->h, 2, 5, &first));
	assert_int_equal(first, 3);
	assert_true(history_chain(&f->h, 3, 5, &first));
	assert_int_equal(first, 5);
	assert_false(history_chain(&f->h, 4, 5, &first));
	assert_false(history_chain(&f->h, 0, 5, &first));
	assert_false(history_chain(&f->h, 6, 5, &first));
	const patch *q = history_from(&f->h, 3);
	assert_ptr_equal(q, history_pair(&f->h, 3, 5));
	assert_int_equal(history_target(&f->h, q), 5);
	assert_null(history_pair(&f->h, 3, 4));
	assert_patch_goes(f, q, f->w[3], f->w[5]);

	history_free(&f->h);
	history_init(&f->h, 4, NULL, f->ckpt);
	add(f, 1, 2);
	add(f, 3, 4);
	assert_false(history_chain(&f->h, 1, 4, &first));
	assert_true(history_chain(&f->h, 3, 4, &first));
}

/* A NACK for a patch finds the patch, one for a keyframe stream the
 * stream (the one made for catch-ups, or a --keyframes slot), never the
 * other kind of the same version. */
static void test_lookups_tell_patches_from_keyframe_streams(void **state)
{
	fixture *f = *state;
	char err[ERRLEN];
	history_init(&f->h, 3, NULL, f->ckpt);
	add(f, 1, 2);
	assert_int_equal(history_key_make(&f->h, &f->m[2], 2, &f->po, err, sizeof(err)), 0);
	const patch *p = history_find(&f->h, 2), *k = history_key(&f->h, 2);
	assert_non_null(p);
	assert_ptr_equal(k, &f->h.key);
	assert_false(history_is_key(p));
	assert_true(history_is_key(k));
	assert_null(history_key(&f->h, 1));
	assert_null(history_find(&f->h, 3));
	uint16_t *zero = calloc(NP, 2);
	assert_patch_goes(f, k, zero, f->w[2]); /* a keyframe stream applies over anything */

	/* --keyframes: a slot holds the keyframe stream of version 3 */
	uint32_t ob, ov;
	unsigned slot = history_evict(&f->h, &ob, &ov);
	assert_int_equal(history_keyframes(&f->m[3], 3, &f->po, &f->h.p[slot], err, sizeof(err)), 0);
	history_hold(&f->h, slot, 0, 3);
	assert_ptr_equal(history_key(&f->h, 3), &f->h.p[slot]);
	assert_null(history_find(&f->h, 3));
	assert_patch_goes(f, history_key(&f->h, 3), zero, f->w[3]);
	free(zero);
}

/* A restart with --resume takes back, of the files in --history, the
 * newest --keep patches that end at or before the version it resumes at,
 * byte for byte usable; it removes the patch files it does not hold and
 * a temporary a killed publisher left, and leaves other files alone. */
static void test_resume_takes_back_the_patches_kept_on_disk(void **state)
{
	fixture *f = *state;
	history_init(&f->h, 4, f->hist, f->ckpt);
	add(f, 0, 1);
	add(f, 1, 2);
	add(f, 2, 3);
	add(f, 3, 4);
	history_free(&f->h);
	char path[256];
	snprintf(path, sizeof(path), "%s/v00000005-v00000006.bfp.tmp.Ab12Cd", f->hist);
	fclose(fopen(path, "w"));
	snprintf(path, sizeof(path), "%s/notes.txt", f->hist);
	fclose(fopen(path, "w"));

	history_init(&f->h, 2, f->hist, f->ckpt);
	history_load(&f->h, f->m[3].model_id, 3, &f->m[3], 1);
	assert_int_equal(f->h.n, 2);
	assert_patch_goes(f, history_find(&f->h, 2), f->w[1], f->w[2]);
	assert_patch_goes(f, history_find(&f->h, 3), f->w[2], f->w[3]);
	assert_null(history_find(&f->h, 1));
	assert_null(history_find(&f->h, 4));
	assert_string_equal(listing(f->hist),
			    "notes.txt v00000001-v00000002.bfp v00000002-v00000003.bfp ");
}

/* Whatever order the directory lists them in, a restart holds the newest
 * patches: an older one read after a newer one does not displace it. */
static void test_resume_holds_the_newest_patches_in_any_listing_order(void **state)
{
	fixture *f = *state;
	history_init(&f->h, MAX_KEEP, f->hist, f->ckpt);
	for (unsigned v = 0; v + 1 < NV; v++)
		add(f, v, v + 1);
	for (unsigned keep = 1; keep <= 2; keep++) {
		history_free(&f->h);
		history_init(&f->h, keep, f->hist, f->ckpt);
		history_load(&f->h, f->m[5].model_id, 5, &f->m[5], 0);
		assert_int_equal(f->h.n, keep);
		assert_patch_goes(f, history_find(&f->h, 5), f->w[4], f->w[5]);
		if (keep == 2)
			assert_patch_goes(f, history_find(&f->h, 4), f->w[3], f->w[4]);
	}
}

/* A patch file of another model (other tensor names, the same weights)
 * is not taken back, though its frames end at the weights of the
 * checkpoint its name gives; with --resume it is removed. */
static void test_a_patch_of_another_model_is_not_taken_back(void **state)
{
	fixture *f = *state;
	model r1, r2;
	patch p;
	char err[ERRLEN], path[256];
	assert_int_equal(model_init_raw(&r1, NP), 0);
	assert_int_equal(model_init_raw(&r2, NP), 0);
	assert_true(r1.model_id != f->m[1].model_id);
	memcpy(r1.params, f->w[1], NP * 2);
	memcpy(r2.params, f->w[2], NP * 2);
	patch_opts po = f->po;
	po.base_version = 1;
	po.target_version = 2;
	assert_int_equal(patch_encode(&r1, &r2, &po, &p, err, sizeof(err)), 0);
	snprintf(path, sizeof(path), "%s/v00000001-v00000002.bfp", f->hist);
	const void *bufs[1] = {p.buf};
	assert_int_equal(write_file_atomic(path, bufs, &p.len, 1, err, sizeof(err)), 0);
	history_init(&f->h, 4, f->hist, f->ckpt);
	history_load(&f->h, f->m[3].model_id, 3, &f->m[3], 1);
	assert_int_equal(f->h.n, 0);
	assert_string_equal(listing(f->hist), "");
	patch_free(&p);
	model_free(&r1);
	model_free(&r2);
}

/* Without --resume the files not taken back stay (the directory may be
 * a later run's); only the leftover temporary goes. */
static void test_a_start_without_resume_leaves_the_files_not_taken_back(void **state)
{
	fixture *f = *state;
	history_init(&f->h, 4, f->hist, f->ckpt);
	add(f, 0, 1);
	add(f, 1, 2);
	add(f, 2, 3);
	history_free(&f->h);
	char path[256];
	snprintf(path, sizeof(path), "%s/v00000001-v00000002.bfp.tmp.Zz99Yy", f->hist);
	fclose(fopen(path, "w"));

	history_init(&f->h, 1, f->hist, f->ckpt);
	history_load(&f->h, f->m[2].model_id, 2, &f->m[2], 0);
	assert_int_equal(f->h.n, 1);
	assert_patch_goes(f, history_find(&f->h, 2), f->w[1], f->w[2]);
	assert_string_equal(listing(f->hist), "v00000000-v00000001.bfp v00000001-v00000002.bfp "
					      "v00000002-v00000003.bfp ");
}

/* A patch kept before the trainer rolled back and wrote another step 2 is
 * refused: one to an earlier version is checked against its checkpoint,
 * one to the version resumed at against the weights loaded; patches that
 * still end at their checkpoints are taken back. */
static void test_a_patch_kept_from_before_a_rollback_is_refused(void **state)
{
	fixture *f = *state;
	history_init(&f->h, 4, f->hist, f->ckpt);
	add(f, 1, 2);
	add(f, 2, 3);
	history_free(&f->h);
	uint16_t *w2 = other_weights(f->w[1], 77);
	write_ckpt(f->ckpt, 2, w2);

	history_init(&f->h, 4, f->hist, f->ckpt);
	history_load(&f->h, f->m[3].model_id, 3, &f->m[3], 0);
	assert_null(history_find(&f->h, 2));
	assert_patch_goes(f, history_find(&f->h, 3), f->w[2], f->w[3]);
	history_free(&f->h);

	model m2;
	load_ckpt(f, 2, &m2);
	history_init(&f->h, 4, f->hist, f->ckpt);
	history_load(&f->h, m2.model_id, 2, &m2, 1);
	assert_int_equal(f->h.n, 0);
	assert_null(history_find(&f->h, 2));
	assert_string_equal(listing(f->hist), "");
	model_free(&m2);
	free(w2);
}

/* history_load with stderr caught: what it said, in a static buffer. */
static const char *load_said(fixture *f, uint64_t model_id, uint32_t ver, const model *cur,
			     int resume)
{
	static char said[4096];
	char path[256];
	snprintf(path, sizeof(path), "%s/said", f->root);
	fflush(stderr);
	int was = dup(2), fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	assert_true(was >= 0 && fd >= 0);
	dup2(fd, 2);
	history_load(&f->h, model_id, ver, cur, resume);
	fflush(stderr);
	dup2(was, 2);
	close(was);
	ssize_t n = pread(fd, said, sizeof(said) - 1, 0);
	said[n > 0 ? n : 0] = 0;
	close(fd);
	unlink(path);
	return said;
}

/* A kept file renamed by hand is refused whatever its frames end at: the
 * patch 1 -> 2 named 0 -> 2, and the keyframe stream of version 3 named
 * as the patch 2 -> 3, would be served to subscribers at the base the
 * name gives. Each is named in a line saying why; --resume removes them,
 * and the one correctly named is taken back. */
static void test_a_kept_file_whose_name_lies_about_its_base_is_refused(void **state)
{
	fixture *f = *state;
	char err[ERRLEN], from[256], to[256];
	history_init(&f->h, 4, f->hist, f->ckpt);
	add(f, 1, 2);
	add(f, 3, 4);
	uint32_t ob, ov;
	unsigned slot = history_evict(&f->h, &ob, &ov);
	assert_int_equal(history_keyframes(&f->m[3], 3, &f->po, &f->h.p[slot], err, sizeof(err)), 0);
	history_hold(&f->h, slot, 0, 3);
	history_put(&f->h, slot, ob, ov);
	history_free(&f->h);
	snprintf(from, sizeof(from), "%s/v00000001-v00000002.bfp", f->hist);
	snprintf(to, sizeof(to), "%s/v00000000-v00000002.bfp", f->hist);
	assert_int_equal(rename(from, to), 0);
	snprintf(from, sizeof(from), "%s/v00000000-v00000003.bfp", f->hist);
	snprintf(to, sizeof(to), "%s/v00000002-v00000003.bfp", f->hist);
	assert_int_equal(rename(from, to), 0);

	history_init(&f->h, 4, f->hist, f->ckpt);
	const char *said = load_said(f, f->m[4].model_id, 4, &f->m[4], 1);
	assert_int_equal(f->h.n, 1);
	assert_null(history_pair(&f->h, 0, 2));
	assert_null(history_pair(&f->h, 2, 3));
	assert_null(history_key(&f->h, 3));
	assert_patch_goes(f, history_pair(&f->h, 3, 4), f->w[3], f->w[4]);
	assert_non_null(strstr(said, "v00000000-v00000002.bfp: its frame 0 is of versions 1 -> 2"));
	assert_non_null(strstr(said, "v00000002-v00000003.bfp: its frame 0 is of versions 0 -> 3"));
	assert_string_equal(listing(f->hist), "v00000003-v00000004.bfp ");
}

/* On a full disk (a file size limit: EFBIG, as ENOSPC) the patch is
 * reported and counted as not kept, no partial file is left, and every
 * patch stays held for NACKs and catch-ups. */
static void test_a_full_disk_is_reported_and_the_patches_held_stay(void **state)
{
	fixture *f = *state;
	history_init(&f->h, 3, f->hist, f->ckpt);
	add(f, 0, 1);
	struct rlimit was, small;
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &was), 0);
	small = was;
	small.rlim_cur = 64;
	void (*old)(int) = signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
	int rc = history_add(&f->h, &f->m[1], &f->m[2], 1, 2, &f->po);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &was), 0);
	signal(SIGXFSZ, old);
	assert_int_equal(rc, 0);
	assert_int_equal(f->h.errors, 1);
	const patch *p2 = history_find(&f->h, 2);
	assert_non_null(p2);
	assert_true(p2->len > 64); /* larger than the limit: its write did fail */
	assert_patch_goes(f, history_find(&f->h, 1), f->w[0], f->w[1]);
	assert_patch_goes(f, history_find(&f->h, 2), f->w[1], f->w[2]);
	assert_string_equal(listing(f->hist), "v00000000-v00000001.bfp ");
}

/* A restart whose history ends at 1 while the checkpoints go on to 3 (a
 * publisher down for two steps) makes 1->2 and 2->3 from the
 * checkpoints and keeps them on disk, so a subscriber at 1 catches up
 * with patches. */
static void test_resume_makes_the_patches_since_the_newest_one_kept(void **state)
{
	fixture *f = *state;
	history_init(&f->h, 4, f->hist, f->ckpt);
	add(f, 0, 1);
	history_make(&f->h, &f->m[3], 3, &f->po);
	assert_int_equal(f->h.n, 3);
	assert_patch_goes(f, history_pair(&f->h, 1, 2), f->w[1], f->w[2]);
	assert_patch_goes(f, history_pair(&f->h, 2, 3), f->w[2], f->w[3]);
	uint32_t first = 0;
	assert_true(history_chain(&f->h, 1, 3, &first));
	assert_string_equal(listing(f->hist), "v00000000-v00000001.bfp v00000001-v00000002.bfp "
					      "v00000002-v00000003.bfp ");
}

/* Holding nothing, a restart makes only the patch from the step before
 * the one it resumes at: the step before that is there, where a trainer
 * keeps every k-th step. */
static void test_resume_holding_nothing_makes_the_patch_from_the_step_before(void **state)
{
	fixture *f = *state;
	history_init(&f->h, 4, NULL, f->ckpt);
	history_make(&f->h, &f->m[3], 3, &f->po);
	assert_int_equal(f->h.n, 1);
	assert_patch_goes(f, history_pair(&f->h, 2, 3), f->w[2], f->w[3]);
	history_free(&f->h);

	char path[256];
	snprintf(path, sizeof(path), "%s/step-0004.safetensors", f->ckpt);
	assert_int_equal(unlink(path), 0);
	history_init(&f->h, 4, NULL, f->ckpt);
	history_make(&f->h, &f->m[5], 5, &f->po);
	assert_int_equal(f->h.n, 1);
	assert_patch_goes(f, history_pair(&f->h, 3, 5), f->w[3], f->w[5]);
}

int main(void)
{
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
	const struct CMUnitTest tests[] = {
		T(test_the_newest_keep_patches_are_held_and_older_ones_dropped),
		T(test_evicting_takes_a_free_slot_then_the_oldest_target),
		T(test_a_subscriber_at_v_gets_the_held_patches_that_lead_from_v),
		T(test_lookups_tell_patches_from_keyframe_streams),
		T(test_resume_takes_back_the_patches_kept_on_disk),
		T(test_resume_holds_the_newest_patches_in_any_listing_order),
		T(test_a_patch_of_another_model_is_not_taken_back),
		T(test_a_start_without_resume_leaves_the_files_not_taken_back),
		T(test_a_patch_kept_from_before_a_rollback_is_refused),
		T(test_a_kept_file_whose_name_lies_about_its_base_is_refused),
		T(test_a_full_disk_is_reported_and_the_patches_held_stay),
		T(test_resume_makes_the_patches_since_the_newest_one_kept),
		T(test_resume_holding_nothing_makes_the_patch_from_the_step_before),
	};
#undef T
	return cmocka_run_group_tests_name("publish-history", tests, NULL, NULL);
}
