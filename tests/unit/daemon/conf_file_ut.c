/*
 * conf_file_ut.c - the checks on the configuration file hotlund reads
 * (conf_file.c): the file checked is the file parsed, and the folders
 * that hold it may not be changed by others.
 */
#include "hl_test.h"
#include "daemon/daemon_internal.h"
#include "hotlun/log.h"

/* The unit under test is part of the daemon, not the library. */
#include "../../../src/daemon/conf_file.c"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char good_text[] = "[disk d]\norigin = /nonexistent/disk.img\n";

static void write_file(const char *path, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	CU_ASSERT_FATAL(fd >= 0);
	CU_ASSERT_EQUAL(write(fd, good_text, strlen(good_text)), (ssize_t)strlen(good_text));
	CU_ASSERT_EQUAL(fchmod(fd, mode), 0);
	close(fd);
}

static void rm_rf(const char *dir)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CU_ASSERT_EQUAL(system(cmd), 0);
}

/* A 0600 file in a 0700 folder of ours loads. */
static void test_private_file_loads(void)
{
	char dir[] = "/tmp/hl-conffile-ut-XXXXXX", path[256], err[1024];
	struct hl_conf *c = NULL;

	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/h.conf", dir);
	write_file(path, 0600);
	CU_ASSERT_EQUAL(daemon_conf_file_load(path, &c, err, sizeof(err)), 0);
	CU_ASSERT_PTR_NOT_NULL(c);
	hl_conf_free(c);
	rm_rf(dir);
}

/*
 * The swap: what is read is a FIFO any user may write, and by the time
 * the parse is done a harmless 0600 file has been renamed over its name.
 * A check by path after the parse sees the 0600 file and passes what any
 * user fed in; a check of the opened file sees the FIFO.
 */
struct swap {
	char fifo[256], good[256];
};

static void *swap_writer(void *arg)
{
	struct swap *s = arg;
	int fd = open(s->fifo, O_WRONLY); /* returns once the loader has opened it */

	if (fd < 0)
		return NULL;
	(void)rename(s->good, s->fifo);
	(void)write(fd, good_text, strlen(good_text));
	close(fd);
	return NULL;
}

static void test_checks_the_file_it_parsed(void)
{
	char dir[] = "/tmp/hl-conffile-ut-XXXXXX", err[1024];
	struct hl_conf *c = NULL;
	struct swap s;
	pthread_t t;

	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
	snprintf(s.fifo, sizeof(s.fifo), "%s/h.conf", dir);
	snprintf(s.good, sizeof(s.good), "%s/good.conf", dir);
	write_file(s.good, 0600);
	CU_ASSERT_EQUAL_FATAL(mkfifo(s.fifo, 0600), 0);
	CU_ASSERT_EQUAL(chmod(s.fifo, 0666), 0);
	CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, swap_writer, &s), 0);
	int rc = daemon_conf_file_load(s.fifo, &c, err, sizeof(err));
	pthread_join(t, NULL);
	CU_ASSERT_EQUAL(rc, -EPERM);
	CU_ASSERT_PTR_NULL(c);
	if (rc == 0)
		hl_conf_free(c);
	else
		CU_ASSERT_PTR_NOT_NULL(strstr(err, s.fifo));
	rm_rf(dir);
}

/* A folder that any user may write (not sticky): any user could put another file there. */
static void test_folder_others_may_write_refused(void)
{
	char dir[] = "/tmp/hl-conffile-ut-XXXXXX", sub[128], path[256], err[1024];
	struct hl_conf *c = NULL;

	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
	snprintf(sub, sizeof(sub), "%s/etc", dir);
	CU_ASSERT_EQUAL_FATAL(mkdir(sub, 0700), 0);
	snprintf(path, sizeof(path), "%s/h.conf", sub);
	write_file(path, 0600);

	CU_ASSERT_EQUAL(chmod(dir, 0777), 0); /* a folder above the file's own */
	CU_ASSERT_EQUAL(daemon_conf_file_load(path, &c, err, sizeof(err)), -EPERM);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, dir));
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "may be written by any user"));
	CU_ASSERT_PTR_NULL(c);

	/* sticky and ours (as /tmp is root's): others cannot replace what we own there */
	CU_ASSERT_EQUAL(chmod(dir, 01777), 0);
	CU_ASSERT_EQUAL(daemon_conf_file_load(path, &c, err, sizeof(err)), 0);
	hl_conf_free(c);
	c = NULL;

	/* the file's own folder, reached through a symbolic link */
	char link[256];
	CU_ASSERT_EQUAL(chmod(dir, 0700), 0);
	CU_ASSERT_EQUAL(chmod(sub, 0777), 0);
	snprintf(link, sizeof(link), "%s/link.conf", dir);
	CU_ASSERT_EQUAL(symlink(path, link), 0);
	CU_ASSERT_EQUAL(daemon_conf_file_load(link, &c, err, sizeof(err)), -EPERM);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, sub));
	CU_ASSERT_PTR_NULL(c);
	rm_rf(dir);
}

/* A folder of another user: that user may replace the file (root only: chown). */
static void test_folder_of_another_user_refused(void)
{
	char dir[] = "/tmp/hl-conffile-ut-XXXXXX", path[256], err[1024];
	struct hl_conf *c = NULL;

	if (geteuid() != 0) {
		fprintf(stderr, "(skipped: needs root to chown) ");
		return;
	}
	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/h.conf", dir);
	write_file(path, 0600);
	CU_ASSERT_EQUAL(chown(dir, 65534, 0), 0);
	CU_ASSERT_EQUAL(daemon_conf_file_load(path, &c, err, sizeof(err)), -EPERM);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "owned by uid 65534"));
	CU_ASSERT_PTR_NULL(c);
	rm_rf(dir);
}

static const struct hl_test tests[] = {
	{"a private file loads", test_private_file_loads},
	{"the file checked is the file parsed", test_checks_the_file_it_parsed},
	{"a folder others may write is refused", test_folder_others_may_write_refused},
	{"a folder of another user is refused", test_folder_of_another_user_refused},
	{NULL, NULL},
};

int main(void)
{
	hl_log_open(false, HL_LOG_ERR);
	signal(SIGPIPE, SIG_IGN); /* the swap's writer may find the reader gone */
	return hl_test_run("daemon-conf-file", tests);
}
