/*
 * cache_trace_mode_ut.c - HOTLUN_CACHE_TRACE's file is its owner's alone:
 * it records which blocks of which disk were read and when (the tenants'
 * access pattern), so whatever the umask it is 0600, and a file an older
 * hotlund left 0644 is made 0600 when it is taken again.
 */
#include "config.h"

#include "hl_test.h"
#include "cache/engine/cache_trace.h"

#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

static unsigned mode_of(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? (unsigned)(st.st_mode & 07777) : 01000000;
}

static void test_new_file_0600(void)
{
	char dir[] = "/tmp/hl-trace-mode-XXXXXX", path[96];

	CU_ASSERT_FATAL(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/cache-trace.%d", dir, (int)getpid());
	mode_t old = umask(022);
	int rc = cache_trace_open(dir);
	umask(old);
	CU_ASSERT_EQUAL_FATAL(rc, 0);
	cache_trace_close();
	CU_ASSERT_EQUAL(mode_of(path), 0600);
	unlink(path);
	rmdir(dir);
}

static void test_old_file_made_0600(void)
{
	char dir[] = "/tmp/hl-trace-mode-XXXXXX", path[96];

	CU_ASSERT_FATAL(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/cache-trace.%d", dir, (int)getpid());
	FILE *f = fopen(path, "w");
	CU_ASSERT_FATAL(f != NULL);
	fclose(f);
	CU_ASSERT_FATAL(chmod(path, 0644) == 0);
	CU_ASSERT_EQUAL_FATAL(cache_trace_open(dir), 0);
	cache_trace_close();
	CU_ASSERT_EQUAL(mode_of(path), 0600);
	unlink(path);
	rmdir(dir);
}

static const struct hl_test tests[] = {
    {"a new trace file is 0600 under umask 022", test_new_file_0600},
    {"a trace file left 0644 is made 0600", test_old_file_made_0600},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("cache_trace_mode", tests);
}
