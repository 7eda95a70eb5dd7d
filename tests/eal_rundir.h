/*
 * eal_rundir.h: a test that starts an EAL of its own removes the EAL's
 * runtime directory (/var/run/dpdk/<file-prefix>: config and fbarray
 * files, several MB of tmpfs) when it exits, as the shell tests do with
 * theirs, so that test runs leave nothing behind.
 */
#ifndef BFP_EAL_RUNDIR_H
#define BFP_EAL_RUNDIR_H

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rte_eal.h>

static char t_eal_rundir[PATH_MAX];

static void t_eal_rundir_remove(void)
{
	DIR *d = opendir(t_eal_rundir);
	if (!d)
		return;
	struct dirent *de;
	char p[PATH_MAX + 256];
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(p, sizeof(p), "%s/%s", t_eal_rundir, de->d_name);
		unlink(p);
	}
	closedir(d);
	rmdir(t_eal_rundir);
}

/* Call after the EAL is up: its runtime directory goes at exit (only one
 * of this project's file prefixes, which all start with "bfp"). */
static void t_eal_rundir_at_exit(void)
{
	const char *dir = rte_eal_get_runtime_dir();
	const char *base = dir ? strrchr(dir, '/') : NULL;
	if (!base || strncmp(base + 1, "bfp", 3) != 0)
		return;
	snprintf(t_eal_rundir, sizeof(t_eal_rundir), "%s", dir);
	atexit(t_eal_rundir_remove);
}

#endif
