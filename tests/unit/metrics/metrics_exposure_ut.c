/*
 * metrics_exposure_ut.c - what the unauthenticated /metrics endpoint shows
 * of an origin (its scheme only, never a path or host) and of a cache
 * device (a device node's path, never a file's) (docs/security.md, "A
 * metrics reader"); and that no label value can end its line early.
 */
#include "config.h"

#include "metrics_ut_lib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * The text of the object in stats holds every line of shown, and none of
 * the words of hidden (NULL-terminated lists).
 */
static void check_shown(const char *stats, const char *const *shown, const char *const *hidden)
{
	char *t = render_text(stats);

	for (; *shown; shown++) {
		CU_ASSERT(has_line(t, *shown));
		if (!has_line(t, *shown))
			fprintf(stderr, "missing: %s\n", *shown);
	}
	for (; *hidden; hidden++) {
		CU_ASSERT_PTR_NULL(strstr(t, *hidden));
		if (strstr(t, *hidden))
			fprintf(stderr, "shown: %s\n", *hidden);
	}
	free(t);
}

/* A bare path with ':' in it is a file, not a scheme: before, origin="/srv/acme". */
static void test_path_with_colon(void)
{
	static const char *const shown[] = {
	    "hotlun_disk_info{disk=\"d0\",origin=\"file\",cache=\"\"} 1",
	    "hotlun_disk_info{disk=\"d1\",origin=\"file\",cache=\"\"} 1",
	    "hotlun_disk_info{disk=\"d2\",origin=\"file\",cache=\"\"} 1",
	    "hotlun_disk_info{disk=\"d3\",origin=\"iscsi\",cache=\"\"} 1",
	    NULL,
	};
	static const char *const hidden[] = {"acme", "beta", "tenant-c", "san.example", NULL};

	check_shown("{\"disks\": {"
	            " \"d0\": {\"origin\": \"/srv/acme:lun0.img\"},"
	            " \"d1\": {\"origin\": \"throttle:/srv/beta:lun1.img\"},"
	            " \"d2\": {\"origin\": \"./tenant-c:x\"},"
	            " \"d3\": {\"origin\": \"iscsi://u%***@san.example:3260/iqn.x:t/0\"}}}",
	            shown, hidden);
}

/* A cache file's path is not shown (before: device="/srv/acme/cache.img"); a device node's is. */
static void test_cache_device(void)
{
	static const char *const shown[] = {
	    "hotlun_cache_info{cache=\"c0\",device=\"file\"} 1",
	    "hotlun_cache_info{cache=\"c1\",device=\"/dev/nvme0n1\"} 1",
	    "hotlun_cache_info{cache=\"c2\",device=\"file\"} 1",
	    NULL,
	};
	static const char *const hidden[] = {"acme", "beta", NULL};

	check_shown("{\"caches\": {"
	            " \"c0\": {\"device\": \"/srv/acme/cache.img\", \"nslots\": 1},"
	            " \"c1\": {\"device\": \"/dev/nvme0n1\", \"nslots\": 1},"
	            " \"c2\": {\"device\": \"/dev/../srv/beta/c.img\", \"nslots\": 1}}}",
	            shown, hidden);
}

/*
 * A target name with '"', '\' and a newline (the file refuses control
 * characters, but the renderer must not rely on it): every line of the
 * text is a comment or NAME{...} VALUE with the quotes balanced.
 */
static void test_label_lines_stay_whole(void)
{
	char *t = render_text("{\"targets\": {\"iqn.x:a\\\"b\\\\c\\nhotlun_fake 1\": "
	                      "{\"sessions\": 2}}}");
	char *save = NULL;

	CU_ASSERT_PTR_NOT_NULL(
	    strstr(t, "hotlun_iscsi_target_sessions{target=\"iqn.x:a\\\"b\\\\c\\nhotlun_fake 1\"} 2\n"));
	for (char *line = strtok_r(t, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (line[0] == '#')
			continue;
		CU_ASSERT_NOT_EQUAL(strncmp(line, "hotlun_fake", 11), 0);
		CU_ASSERT_EQUAL(strncmp(line, "hotlun_", 7), 0);
	}
	free(t);
}

static const struct hl_test tests[] = {
    {"an origin path with ':' is shown as file", test_path_with_colon},
    {"a cache file's path is shown as file", test_cache_device},
    {"a label value cannot start a line of its own", test_label_lines_stay_whole},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("metrics_exposure", tests);
}
