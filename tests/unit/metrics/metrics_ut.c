/*
 * metrics_ut.c - the stats object as Prometheus text (hl_metrics_render):
 * names, units and labels; log2 histograms as cumulative seconds buckets;
 * each family once, its samples together; label values escaped; nothing
 * made up for members the object lacks.
 */
#include "config.h"

#include "metrics_ut_lib.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A stats object shaped like hotlund's (docs/control.md): d0 cached by c0 and shared, d1 plain. */
static const char *STATS =
    "{\"version\": \"9.9\", \"gateway\": 2,"
    " \"disks\": {"
    "  \"d0\": {\"origin\": \"rbd:pool/img\", \"size_bytes\": 1048576, \"cache\": \"c0\","
    "          \"read_cmds\": 7, \"write_cmds\": 3, \"other_cmds\": 1, \"read_bytes\": 28672,"
    "          \"write_bytes\": 12288, \"errors\": 0, \"read_ns\": 1500000000, \"write_ns\": 3000,"
    "          \"read_latency_by_source_log2_us\": {\"hit\": [0, 2, 3], \"miss\": [0, 0, 1],"
    "              \"partial\": [1, 0, 0], \"uncached\": [0, 0, 0]},"
    "          \"read_ns_by_source\": {\"hit\": 500000000, \"miss\": 1000000000, \"partial\": 0,"
    "              \"uncached\": 0},"
    "          \"write_latency_log2_us\": [0, 3, 0],"
    "          \"ownership\": {\"gateway\": 2, \"state\": \"owner\", \"alua\": "
    "\"active/optimized\","
    "              \"owner\": 2, \"epoch\": 5, \"transitions\": 3, \"takeovers\": 1,"
    "              \"lease_left_ms\": 2500, \"last\": \"x\"}},"
    "  \"d1\": {\"origin\": \"file:/x/d1\", \"read_cmds\": 0}"
    " },"
    " \"caches\": {\"c0\": {\"device\": \"/dev/nvme0n1\", \"nslots\": 10, \"used_slots\": 4,"
    "   \"write_ratio\": 0.25, \"write_budget_pct\": 25, \"passthrough\": true,"
    "   \"restore_state\": \"running\", \"restore_pages_left\": 17, \"restore_restored\": 900,"
    "   \"restore_dropped\": 3,"
    "   \"disks\": {\"d0\": {\"read_hits\": 5, \"read_partial\": 1, \"read_misses\": 1,"
    "      \"bytes_cache_write\": 100, \"bytes_cache_update\": 30, \"warm_kept\": 4,"
    "      \"warm_dropped\": 1, \"warm_start\": \"kept 4, dropped 1 (a \\\"quoted\\\" why\\\\)\","
    "      \"origin_read_latency_log2_us\": [0, 0, 0, 0, 1], \"origin_read_ns\": 12000000}}}},"
    " \"sessions\": 1, \"targets\": {\"iqn.t\": {\"sessions\": 1}, \"iqn.u\": {\"sessions\": 0}},"
    " \"iscsi\": {\"auth_failures\": 4, \"auth_throttled\": 2},"
    " \"write_buffers\": {\"limit\": 1000, \"held_bytes\": 10, \"task_set_full\": 6},"
    " \"process\": {\"open_fds\": 12, \"max_fds\": 1024}}";

static char *render(void)
{
	return render_text(STATS);
}

static void test_counters_and_units(void)
{
	char *t = render();

	CU_ASSERT(has_line(t, "hotlun_disk_reads_completed_total{disk=\"d0\"} 7"));
	CU_ASSERT(has_line(t, "hotlun_disk_written_bytes_total{disk=\"d0\"} 12288"));
	CU_ASSERT(has_line(t, "hotlun_disk_read_seconds_total{disk=\"d0\"} 1.5"));
	CU_ASSERT(has_line(t, "hotlun_disk_info{disk=\"d0\",origin=\"rbd\",cache=\"c0\"} 1"));
	CU_ASSERT(has_line(t, "hotlun_disk_info{disk=\"d1\",origin=\"file\",cache=\"\"} 1"));
	CU_ASSERT(
	    has_line(t, "hotlun_cache_reads_total{cache=\"c0\",disk=\"d0\",result=\"hit\"} 5"));
	CU_ASSERT(has_line(t, "hotlun_cache_device_written_bytes_total{cache=\"c0\",disk=\"d0\","
	                      "kind=\"fill\"} 70"));
	CU_ASSERT(has_line(t, "hotlun_cache_write_budget_ratio{cache=\"c0\"} 0.25"));
	CU_ASSERT(has_line(t, "hotlun_cache_passthrough{cache=\"c0\"} 1"));
	CU_ASSERT(has_line(t, "hotlun_cache_restoring{cache=\"c0\"} 1"));
	CU_ASSERT(has_line(t, "hotlun_cache_restore_pages_left{cache=\"c0\"} 17"));
	CU_ASSERT(has_line(t, "hotlun_cache_restore_blocks_restored{cache=\"c0\"} 900"));
	CU_ASSERT(has_line(t, "hotlun_cache_restore_records_dropped{cache=\"c0\"} 3"));
	CU_ASSERT(has_line(t, "hotlun_iscsi_target_sessions{target=\"iqn.u\"} 0"));
	CU_ASSERT(has_line(t, "hotlun_iscsi_task_set_full_total 6"));
	CU_ASSERT(has_line(t, "hotlun_process_max_fds 1024"));
	CU_ASSERT(has_line(t, "hotlun_gateway_id 2"));
	CU_ASSERT(has_line(t, "hotlun_build_info{version=\"9.9\"} 1"));
	free(t);
}

/* Log2 microsecond buckets become cumulative `le` buckets in seconds, with +Inf, sum, count. */
static void test_histograms(void)
{
	char *t = render();

	CU_ASSERT(has_line(t, "hotlun_disk_read_latency_seconds_bucket{disk=\"d0\",source=\"hit\","
	                      "le=\"1e-06\"} 0"));
	CU_ASSERT(has_line(t, "hotlun_disk_read_latency_seconds_bucket{disk=\"d0\",source=\"hit\","
	                      "le=\"2e-06\"} 2"));
	CU_ASSERT(has_line(t, "hotlun_disk_read_latency_seconds_bucket{disk=\"d0\",source=\"hit\","
	                      "le=\"+Inf\"} 5"));
	CU_ASSERT(
	    has_line(t, "hotlun_disk_read_latency_seconds_count{disk=\"d0\",source=\"hit\"} 5"));
	CU_ASSERT(
	    has_line(t, "hotlun_disk_read_latency_seconds_sum{disk=\"d0\",source=\"hit\"} 0.5"));
	CU_ASSERT(
	    has_line(t, "hotlun_disk_read_latency_seconds_count{disk=\"d0\",source=\"miss\"} 1"));
	CU_ASSERT(has_line(t, "hotlun_cache_origin_read_latency_seconds_bucket{cache=\"c0\","
	                      "disk=\"d0\",le=\"8e-06\"} 0"));
	CU_ASSERT(has_line(t, "hotlun_cache_origin_read_latency_seconds_count{cache=\"c0\","
	                      "disk=\"d0\"} 1"));
	CU_ASSERT(has_line(t, "hotlun_cache_origin_read_latency_seconds_sum{cache=\"c0\","
	                      "disk=\"d0\"} 0.012"));
	free(t);
}

/* Each family's HELP and TYPE once, before its samples, which are all together. */
static void test_families_once_and_together(void)
{
	char *t = render(), *save = NULL, *copy = strdup(t);
	char last[128] = "";
	char seen[64][128];
	int n = 0;

	CU_ASSERT_PTR_NOT_NULL_FATAL(
	    strstr(t, "# TYPE hotlun_disk_read_latency_seconds histogram\n"));
	CU_ASSERT_PTR_NOT_NULL(strstr(t, "# TYPE hotlun_disk_reads_completed_total counter\n"));
	CU_ASSERT_PTR_NULL(strstr(strstr(t, "# TYPE hotlun_disk_reads_completed_total") + 1,
	                          "# TYPE hotlun_disk_reads_completed_total"));
	for (char *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		char fam[128];
		if (strncmp(l, "# TYPE ", 7))
			continue;
		sscanf(l + 7, "%127s", fam);
		for (int i = 0; i < n; i++)
			CU_ASSERT(strcmp(seen[i], fam) != 0);
		if (n < 64)
			snprintf(seen[n++], sizeof(seen[0]), "%s", fam);
		snprintf(last, sizeof(last), "%s", fam);
	}
	CU_ASSERT(n > 20);
	free(copy);
	free(t);
}

static void test_ownership(void)
{
	char *t = render();

	CU_ASSERT(has_line(t, "hotlun_disk_alua_state{disk=\"d0\",state=\"active/optimized\"} 1"));
	CU_ASSERT(has_line(t, "hotlun_disk_alua_state{disk=\"d0\",state=\"standby\"} 0"));
	CU_ASSERT(has_line(t, "hotlun_disk_owned{disk=\"d0\"} 1"));
	CU_ASSERT(has_line(t, "hotlun_disk_owner_epoch{disk=\"d0\"} 5"));
	CU_ASSERT(has_line(t, "hotlun_disk_lease_left_seconds{disk=\"d0\"} 2.5"));
	CU_ASSERT_PTR_NULL(strstr(t, "hotlun_disk_owned{disk=\"d1\"}"));
	free(t);
}

/* Quotes and backslashes in a label value are escaped; absent members are not invented. */
static void test_escapes_and_absent(void)
{
	char *t = render();

	CU_ASSERT_PTR_NOT_NULL(
	    strstr(t, "reason=\"kept 4, dropped 1 (a \\\"quoted\\\" why\\\\)\""));
	CU_ASSERT_PTR_NULL(strstr(t, "hotlun_disk_written_bytes_total{disk=\"d1\"}"));
	CU_ASSERT(has_line(t, "hotlun_disk_reads_completed_total{disk=\"d1\"} 0"));
	free(t);
}

static void test_empty_object(void)
{
	json_t *o = json_object();
	char *text = NULL;
	size_t len = 0;

	CU_ASSERT_EQUAL(hl_metrics_render(o, &text, &len), 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "hotlun_build_info{version="));
	free(text);
	json_decref(o);
}

static const struct hl_test tests[] = {
    {"counters in base units with _total, info gauges", test_counters_and_units},
    {"log2 histograms become cumulative seconds buckets", test_histograms},
    {"each family once, its samples together", test_families_once_and_together},
    {"a shared disk's ownership", test_ownership},
    {"label values escaped, absent members left out", test_escapes_and_absent},
    {"an empty stats object still renders", test_empty_object},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("metrics", tests);
}
