/*
 * cache_dev_owner_ut.c - a cache file is hotlund's (h33g): one another
 * user owns, or that others or a group other than root's may write, is
 * refused (they could write blocks that hotlund serves as hits for any
 * disk); root's 0644 is opened (with a warning: others can read the cached
 * data), 0600 too, and root:root 0660 (only root may write it: refusing it
 * would stop a site whose file always had that mode).
 */
#include "config.h"

#include "hl_test.h"
#include "hotlun/cache_engine.h"
#include "hotlun/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "/tmp/hl-cachedev-owner-XXXXXX";

/* A 1 MiB file of mode `mode`, owner `uid` and group `gid`; the open's return. */
static int open_as(const char *name, mode_t mode, uid_t uid, gid_t gid)
{
	char path[96];
	struct hl_cache_dev *d = NULL;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	CU_ASSERT_FATAL(fd >= 0);
	CU_ASSERT_FATAL(ftruncate(fd, 1 << 20) == 0);
	CU_ASSERT_FATAL(fchmod(fd, mode) == 0);
	if (uid != geteuid() || gid != getegid()) {
		CU_ASSERT_FATAL(fchown(fd, uid, gid) == 0);
	}
	close(fd);
	int rc = hl_cache_dev_open_file(path, 1 << 20, &d);
	if (rc == 0) {
		hl_cache_dev_close(d);
	}
	unlink(path);
	return rc;
}

static void test_others_refused(void)
{
	CU_ASSERT_EQUAL(open_as("world.img", 0666, geteuid(), getegid()), -EPERM);
	if (geteuid() == 0) {
		CU_ASSERT_EQUAL(open_as("group.img", 0620, 0, 65534), -EPERM);
		CU_ASSERT_EQUAL(open_as("nobody.img", 0600, 65534, 0), -EPERM);
	} else {
		fprintf(stderr, "(not root: another owner cannot be tried)\n");
	}
}

static void test_own_opened(void)
{
	CU_ASSERT_EQUAL(open_as("mine.img", 0600, geteuid(), getegid()), 0);
	CU_ASSERT_EQUAL(open_as("readable.img", 0644, geteuid(), getegid()), 0);
	if (geteuid() == 0) {
		CU_ASSERT_EQUAL(open_as("rootgroup.img", 0660, 0, 0), 0);
	}
}

static const struct hl_test tests[] = {
    {"a cache file others own or may write is refused", test_others_refused},
    {"hotlund's own cache file opens, root:root 0660 too", test_own_opened},
    {NULL, NULL},
};

int main(void)
{
	hl_log_open(false, HL_LOG_ERR);
	if (!mkdtemp(dir))
		return 99;
	int rc = hl_test_run("cache_dev_owner", tests);
	rmdir(dir);
	return rc;
}
