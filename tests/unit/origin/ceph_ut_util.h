/*
 * ceph_ut_util.h - the single-node Ceph of the rbd unit tests: each test
 * program brings up its own throw-away cluster (tests/functional/
 * mini_ceph.sh, one 64 MiB image "origin") under a temporary folder, runs
 * its suite against it and takes it down; exit 77 (skipped) where Ceph is
 * not installed. `conf` is the cluster's ceph.conf for the origins.
 */
#ifndef CEPH_UT_UTIL_H
#define CEPH_UT_UTIL_H

#include "hl_test.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[64], cluster[96], conf[128];
static bool ceph_up;

static int mini_ceph(const char *verb)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "MINI_CEPH_QUIET=1 %s %s %s %s >%s/ceph-%s.log 2>&1", MINI_CEPH,
	         verb, cluster, strcmp(verb, "up") ? "" : "origin:64M", dir, verb);
	int rc = system(cmd);
	return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void ceph_down(void)
{
	char log[128];

	if (ceph_up)
		mini_ceph("down");
	ceph_up = false;
	snprintf(log, sizeof(log), "%s/ceph-up.log", dir);
	unlink(log);
	snprintf(log, sizeof(log), "%s/ceph-down.log", dir);
	unlink(log);
	rmdir(dir);
}

/*
 * main() of an rbd unit test: the cluster up, suite `name`, then
 * close_left() (origins a fatal assertion left open: they must close while
 * the cluster is still there), the cluster down. @return the exit status.
 */
static int ceph_ut_main(const char *name, const struct hl_test *tests, void (*close_left)(void))
{
	int rc;

	snprintf(dir, sizeof(dir), "/tmp/hl-%s-XXXXXX", name);
	if (!mkdtemp(dir))
		return 99;
	snprintf(cluster, sizeof(cluster), "%s/ceph", dir);
	snprintf(conf, sizeof(conf), "%s/ceph.conf", cluster);
	rc = mini_ceph("up");
	if (rc == 3) {
		printf("SKIP: Ceph is not installed\n");
		ceph_down();
		return 77;
	}
	if (rc != 0) {
		printf("single-node Ceph did not start (see %s/ceph-up.log)\n", dir);
		return 99;
	}
	ceph_up = true;
	rc = hl_test_run(name, tests);
	close_left();
	ceph_down();
	return rc;
}

#endif
