/* model_ut.c - hotlun-snmp's model: JSON stats to table rows, indexes, histograms, notifications.
 */
#include "hl_test.h"
#include "snmp/snmp_internal.h"

#include <errno.h>
#include <string.h>

/* A stats reply shaped like hotlund's: d0 behind cache c0, d1 without one. */
static const char *STATS =
    "{\"disks\": {"
    "  \"d1\": {\"origin\": \"file:/x/d1\", \"size_bytes\": 1048576, \"block_size\": 512,"
    "          \"read_only\": true, \"read_cmds\": 7, \"write_cmds\": 3, \"other_cmds\": 1,"
    "          \"read_bytes\": 28672, \"write_bytes\": 12288, \"errors\": 0,"
    "          \"read_latency_log2_us\": [0, 0, 0, 0, 7, 0], \"write_latency_log2_us\": [0, 0, 0, "
    "0, 0, 3]},"
    "  \"d0\": {\"origin\": \"file:/x/d0\", \"size_bytes\": 8589934592, \"block_size\": 4096,"
    "          \"read_only\": false, \"cache\": \"c0\", \"read_cmds\": 100, \"write_cmds\": 0,"
    "          \"read_bytes\": 409600, \"errors\": 2,"
    "          \"read_latency_log2_us\": [0, 1, 48, 50, 0, 1], \"write_latency_log2_us\": [0, 0, "
    "0, 0, 0, 0]}"
    "}, \"caches\": {"
    "  \"c0\": {\"device\": \"/dev/nvme0n1\", \"block_size\": 65536, \"nslots\": 10, "
    "\"used_slots\": 4, \"write_ratio\": 0.1234, \"write_budget_pct\": 25,"
    "          \"read_reqs\": 100, \"read_hits\": 60, \"read_partial\": 5, \"read_misses\": 35,"
    "          \"read_bypass\": 5, \"admissions\": 9, \"rejections\": 2, \"evictions\": 1,"
    "          \"bytes_cache_write\": 589824, \"bytes_read_cache\": 245760, \"bytes_read_ram\": 8192,"
    "          \"bytes_read_origin\": 163840, \"dev_errors\": 0, \"passthrough\": false,"
    "          \"disks\": {\"d0\": {\"read_hits\": 60, \"read_partial\": 5, \"read_misses\": 35,"
    "                    \"read_bypass\": 5, \"bytes_read_cache\": 245760, \"bytes_read_ram\": "
    "4096,"
    "                    \"bytes_read_origin\": 159744}}}"
    "}, \"sessions\": 2, \"session_list\": ["
    "  {\"initiator\": \"iqn.b\", \"target\": \"iqn.t\", \"isid\": \"23d000000002\", \"tsih\": 9,"
    "   \"tpgt\": 1, \"portal\": \"127.0.0.1:3260\", \"peer\": \"127.0.0.1:5000\", \"since\": "
    "1800000000},"
    "  {\"initiator\": \"iqn.a\", \"target\": \"iqn.t\", \"isid\": \"23d000000001\", \"tsih\": 3,"
    "   \"tpgt\": 1, \"portal\": \"127.0.0.1:3260\", \"peer\": \"127.0.0.1:5001\", \"since\": "
    "1800000001}"
    "]}";

static json_t *load(const char *text)
{
	json_error_t e;
	json_t *j = json_loads(text, 0, &e);
	CU_ASSERT_PTR_NOT_NULL_FATAL(j);
	return j;
}

static const struct snmp_disk *disk(const struct snmp_snapshot *s, const char *name)
{
	for (size_t i = 0; i < s->n_disks; i++)
		if (!strcmp(s->disks[i].name, name))
			return &s->disks[i];
	return NULL;
}

static void build(struct snmp_snapshot *s, const char *stats_text)
{
	json_t *stats = load(stats_text);
	json_t *ver = load("{\"version\": \"0.1.0\"}");
	json_t *conf = load("{\"c0\": {\"admission\": \"frequency\", \"size\": 1048576}}");
	CU_ASSERT_EQUAL_FATAL(snmp_snapshot_build(stats, ver, conf, s), 0);
	json_decref(stats);
	json_decref(ver);
	json_decref(conf);
}

static void test_index_is_stable_hash(void)
{
	/* FNV-1a of "d0" is 0x2ab2a76e... fixed by the algorithm, not by position. */
	uint32_t a = snmp_name_index("d0"), b = snmp_name_index("d1");
	CU_ASSERT(a >= 1 && a <= 0x7fffffffu);
	CU_ASSERT_NOT_EQUAL(a, b);
	CU_ASSERT_EQUAL(a, snmp_name_index("d0"));
	CU_ASSERT_EQUAL(snmp_name_index(""), 2166136261u & 0x7fffffffu);

	struct snmp_snapshot s;
	build(&s, STATS);
	CU_ASSERT_EQUAL(disk(&s, "d0")->index, a);
	CU_ASSERT_EQUAL(disk(&s, "d1")->index, b);
	/* Rows sorted by index, as GETNEXT order wants. */
	CU_ASSERT(s.disks[0].index < s.disks[1].index);
	snmp_snapshot_free(&s);
}

static void test_disk_counters(void)
{
	struct snmp_snapshot s;
	build(&s, STATS);
	CU_ASSERT_TRUE(s.reachable);
	CU_ASSERT_STRING_EQUAL(s.version, "0.1.0");
	CU_ASSERT_EQUAL(s.n_disks, 2);

	const struct snmp_disk *d0 = disk(&s, "d0"), *d1 = disk(&s, "d1");
	CU_ASSERT_PTR_NOT_NULL_FATAL(d0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(d1);
	CU_ASSERT_EQUAL(d0->size, 8589934592ull);
	CU_ASSERT_EQUAL(d0->block_size, 4096);
	CU_ASSERT_STRING_EQUAL(d0->cache, "c0");
	CU_ASSERT_EQUAL(d0->read_cmds, 100);
	CU_ASSERT_EQUAL(d0->errors, 2);
	/* Hits and misses come from the cache's per-disk counters. */
	CU_ASSERT_EQUAL(d0->hits, 60);
	CU_ASSERT_EQUAL(d0->partial_hits, 5);
	CU_ASSERT_EQUAL(d0->misses, 35); /* the 5 bypassed reads are among them, not added */
	CU_ASSERT_EQUAL(d0->hits + d0->partial_hits + d0->misses, 100);
	/* bytes_read_ram is part of bytes_read_cache: never added twice */
	CU_ASSERT_EQUAL(d0->bytes_from_cache, 245760);
	CU_ASSERT_EQUAL(d0->bytes_from_origin, 159744);
	CU_ASSERT_EQUAL(d0->hit_ratio, 6060); /* 245760 / 405504 */

	/* No cache: no hits, every read a miss, every byte from the origin. */
	CU_ASSERT_STRING_EQUAL(d1->cache, "");
	CU_ASSERT_TRUE(d1->read_only);
	CU_ASSERT_EQUAL(d1->hits, 0);
	CU_ASSERT_EQUAL(d1->misses, 7);
	CU_ASSERT_EQUAL(d1->bytes_from_origin, 28672);
	CU_ASSERT_EQUAL(d1->hit_ratio, 0);
	snmp_snapshot_free(&s);
}

/* hlDiskOrigin never carries an origin's CHAP secret, whatever the daemon sends. */
static void test_origin_secret_masked(void)
{
	struct snmp_snapshot s;
	char *text = strdup(STATS), *at = strstr(text, "file:/x/d0");
	size_t head = (size_t)(at - text);
	char buf[8192];

	snprintf(buf, sizeof(buf), "%.*siscsi://u%%Sn7-MIBSECRET@h/iqn.x:t/0%s", (int)head, text,
	         at + strlen("file:/x/d0"));
	build(&s, buf);
	const struct snmp_disk *d0 = disk(&s, "d0");
	CU_ASSERT_PTR_NOT_NULL_FATAL(d0);
	CU_ASSERT_STRING_EQUAL(d0->origin, "iscsi://u%***@h/iqn.x:t/0");
	snmp_snapshot_free(&s);
	free(text);
}

/* hlAuthFailures / hlAuthThrottled come from stats' "iscsi" object (0 when absent). */
static void test_auth_counters(void)
{
	struct snmp_snapshot s;
	char buf[8192];

	build(&s, STATS);
	CU_ASSERT_EQUAL(s.auth_failures, 0);
	CU_ASSERT_EQUAL(s.auth_throttled, 0);
	snmp_snapshot_free(&s);
	snprintf(buf, sizeof(buf), "%.*s, \"iscsi\": {\"auth_failures\": 7, \"auth_throttled\": 40}}",
	         (int)strlen(STATS) - 1, STATS);
	build(&s, buf);
	CU_ASSERT_EQUAL(s.auth_failures, 7);
	CU_ASSERT_EQUAL(s.auth_throttled, 40);
	CU_ASSERT_EQUAL(s.wb_task_set_full, 0);
	snmp_snapshot_free(&s);
}

/* hlWriteBuffer* come from stats' "write_buffers" object (0 when absent). */
static void test_write_buffer_counters(void)
{
	struct snmp_snapshot s;
	char buf[8192];

	snprintf(buf, sizeof(buf),
	         "%.*s, \"write_buffers\": {\"limit\": 1073741824, \"held_bytes\": 65536, "
	         "\"peak_bytes\": 131072, \"waiting\": 2, \"r2t_deferred\": 9, "
	         "\"task_set_full\": 3}}",
	         (int)strlen(STATS) - 1, STATS);
	build(&s, buf);
	CU_ASSERT_EQUAL(s.wb_limit, 1073741824);
	CU_ASSERT_EQUAL(s.wb_held, 65536);
	CU_ASSERT_EQUAL(s.wb_peak, 131072);
	CU_ASSERT_EQUAL(s.wb_waiting, 2);
	CU_ASSERT_EQUAL(s.wb_deferred, 9);
	CU_ASSERT_EQUAL(s.wb_task_set_full, 3);
	snmp_snapshot_free(&s);
}

/*
 * hlAgentGroup3: every service counter of the stats reply, under the names
 * hotlund's daemon_stats gives them, lands in its own field (distinct
 * values, so two fields swapped would show); absent objects read 0.
 */
static void test_service_counters(void)
{
	struct snmp_snapshot s;
	char buf[8192];

	snprintf(buf, sizeof(buf),
	         "%.*s, \"iscsi\": {\"auth_failures\": 1, \"auth_throttled\": 2, \"logins\": 31, "
	         "\"login_failures\": 32, \"connections\": 33, \"pending_logins\": 34, "
	         "\"pending_evicted\": 35, \"refused_pending\": 36, \"refused_sessions\": 37, "
	         "\"accept_paused\": 38}, "
	         "\"write_buffers\": {\"limit\": 3221225472, \"conn_limit\": 268435456, "
	         "\"held_bytes\": 41, \"peak_bytes\": 42, \"waiting\": 43, "
	         "\"waiting_bytes\": 44, \"r2t_deferred\": 45, \"task_set_full\": 46, "
	         "\"window_closed\": 47, \"source_limit\": 1610612736, \"sources\": 48, "
	         "\"source_capped\": 49, \"closed_slow\": 50, \"closed_no_data\": 51}, "
	         "\"scratch_buffers\": {\"limit\": 268435456, \"used_bytes\": 61, "
	         "\"peak_bytes\": 62, \"refused\": 63}}",
	         (int)strlen(STATS) - 1, STATS);
	build(&s, buf);
	CU_ASSERT_EQUAL(s.auth_failures, 1);
	CU_ASSERT_EQUAL(s.auth_throttled, 2);
	CU_ASSERT_EQUAL(s.logins, 31);
	CU_ASSERT_EQUAL(s.login_failures, 32);
	CU_ASSERT_EQUAL(s.connections, 33);
	CU_ASSERT_EQUAL(s.pending_logins, 34);
	CU_ASSERT_EQUAL(s.pending_evicted, 35);
	CU_ASSERT_EQUAL(s.refused_pending, 36);
	CU_ASSERT_EQUAL(s.refused_sessions, 37);
	CU_ASSERT_EQUAL(s.accept_paused, 38);
	CU_ASSERT_EQUAL(s.wb_limit, 3221225472ull);
	CU_ASSERT_EQUAL(s.wb_conn_limit, 268435456);
	CU_ASSERT_EQUAL(s.wb_held, 41);
	CU_ASSERT_EQUAL(s.wb_peak, 42);
	CU_ASSERT_EQUAL(s.wb_waiting, 43);
	CU_ASSERT_EQUAL(s.wb_waiting_bytes, 44);
	CU_ASSERT_EQUAL(s.wb_deferred, 45);
	CU_ASSERT_EQUAL(s.wb_task_set_full, 46);
	CU_ASSERT_EQUAL(s.wb_window_closed, 47);
	CU_ASSERT_EQUAL(s.wb_source_limit, 1610612736);
	CU_ASSERT_EQUAL(s.wb_sources, 48);
	CU_ASSERT_EQUAL(s.wb_source_capped, 49);
	CU_ASSERT_EQUAL(s.wb_closed_slow, 50);
	CU_ASSERT_EQUAL(s.wb_closed_no_data, 51);
	CU_ASSERT_EQUAL(s.scratch_limit, 268435456);
	CU_ASSERT_EQUAL(s.scratch_used, 61);
	CU_ASSERT_EQUAL(s.scratch_peak, 62);
	CU_ASSERT_EQUAL(s.scratch_refused, 63);
	snmp_snapshot_free(&s);

	/* An older hotlund without them: zeros, not an error. */
	build(&s, STATS);
	CU_ASSERT_EQUAL(s.logins, 0);
	CU_ASSERT_EQUAL(s.connections, 0);
	CU_ASSERT_EQUAL(s.accept_paused, 0);
	CU_ASSERT_EQUAL(s.wb_source_limit, 0);
	CU_ASSERT_EQUAL(s.wb_closed_no_data, 0);
	CU_ASSERT_EQUAL(s.scratch_limit, 0);
	CU_ASSERT_EQUAL(s.scratch_refused, 0);
	snmp_snapshot_free(&s);

	/* A negative or non-numeric value reads 0 rather than a huge counter. */
	snprintf(buf, sizeof(buf), "%.*s, \"iscsi\": {\"logins\": -5, \"connections\": \"7\"}}",
	         (int)strlen(STATS) - 1, STATS);
	build(&s, buf);
	CU_ASSERT_EQUAL(s.logins, 0);
	CU_ASSERT_EQUAL(s.connections, 0);
	snmp_snapshot_free(&s);
}

static void test_cache_row(void)
{
	struct snmp_snapshot s;
	build(&s, STATS);
	CU_ASSERT_EQUAL_FATAL(s.n_caches, 1);
	const struct snmp_cache *c = &s.caches[0];
	CU_ASSERT_STRING_EQUAL(c->name, "c0");
	CU_ASSERT_STRING_EQUAL(c->device, "/dev/nvme0n1");
	CU_ASSERT_STRING_EQUAL(c->admission, "frequency");
	CU_ASSERT_EQUAL(c->index, snmp_name_index("c0"));
	CU_ASSERT_EQUAL(c->size, 10 * 65536);
	CU_ASSERT_EQUAL(c->used, 4 * 65536);
	CU_ASSERT_EQUAL(c->state, SNMP_CACHE_ACTIVE);
	CU_ASSERT_EQUAL(c->misses, 35);
	CU_ASSERT_EQUAL(c->dev_bytes_written, 589824);
	CU_ASSERT_EQUAL(c->bytes_from_cache, 245760); /* its 8192 RAM bytes are in it */
	CU_ASSERT_EQUAL(c->hit_ratio, 6000);          /* 245760 / 409600 */
	CU_ASSERT_EQUAL(c->write_ratio, 1234); /* hundredths of a percent */
	CU_ASSERT_EQUAL(c->write_budget, 25);
	snmp_snapshot_free(&s);
}

static void test_sessions_sorted_by_tsih(void)
{
	struct snmp_snapshot s;
	build(&s, STATS);
	CU_ASSERT_EQUAL(s.n_sessions_total, 2);
	CU_ASSERT_EQUAL_FATAL(s.n_sessions, 2);
	CU_ASSERT_EQUAL(s.sessions[0].tsih, 3);
	CU_ASSERT_STRING_EQUAL(s.sessions[0].initiator, "iqn.a");
	CU_ASSERT_EQUAL(s.sessions[0].since, 1800000001);
	CU_ASSERT_STRING_EQUAL(s.sessions[1].peer, "127.0.0.1:5000");
	snmp_snapshot_free(&s);
}

static void test_latency_rows_and_quantiles(void)
{
	struct snmp_snapshot s;
	build(&s, STATS);
	const struct snmp_disk *d0 = disk(&s, "d0"), *d1 = disk(&s, "d1");
	CU_ASSERT_EQUAL(d0->n_lat, 6);
	CU_ASSERT_EQUAL(s.n_lat, 12);
	/* d0 reads: 1 in [1,2), 48 in [2,4), 50 in [4,8), 1 in the open bucket. */
	CU_ASSERT_EQUAL(d0->read_p50, 8);
	CU_ASSERT_EQUAL(d0->read_p99, 8);
	CU_ASSERT_EQUAL(snmp_lat_quantile(d0->read_lat, 6, 1.0), UINT32_MAX);
	CU_ASSERT_EQUAL(d1->read_p50, 16);
	CU_ASSERT_EQUAL(d1->write_p99, UINT32_MAX);
	CU_ASSERT_EQUAL(d0->write_p50, 0); /* no writes */
	CU_ASSERT_EQUAL(snmp_lat_bound(0, 6), 1);
	CU_ASSERT_EQUAL(snmp_lat_bound(4, 6), 16);
	/* Latency rows: (disk index, bucket 1..n), disks in index order. */
	CU_ASSERT_PTR_EQUAL(s.lat[0].disk, &s.disks[0]);
	CU_ASSERT_EQUAL(s.lat[0].bucket, 1);
	CU_ASSERT_EQUAL(s.lat[5].bucket, 6);
	CU_ASSERT_PTR_EQUAL(s.lat[6].disk, &s.disks[1]);
	snmp_snapshot_free(&s);
}

static void test_bad_and_partial_input(void)
{
	struct snmp_snapshot s;
	json_t *j = load("[1, 2]");
	CU_ASSERT_EQUAL(snmp_snapshot_build(j, NULL, NULL, &s), -EPROTO);
	json_decref(j);
	/* An empty object and wrong member types give empty tables, not a crash. */
	j = load(
	    "{\"disks\": 5, \"caches\": [], \"session_list\": {\"a\": 1}, \"sessions\": \"x\"}");
	CU_ASSERT_EQUAL_FATAL(snmp_snapshot_build(j, NULL, NULL, &s), 0);
	CU_ASSERT_EQUAL(s.n_disks + s.n_caches + s.n_sessions, 0);
	snmp_snapshot_free(&s);
	json_decref(j);
	/* Sessions with TSIH 0 or a duplicate TSIH are dropped. */
	j = load(
	    "{\"session_list\": [{\"tsih\": 0}, {\"tsih\": 5}, {\"tsih\": 5}, {\"tsih\": 70000}]}");
	CU_ASSERT_EQUAL_FATAL(snmp_snapshot_build(j, NULL, NULL, &s), 0);
	CU_ASSERT_EQUAL(s.n_sessions, 1);
	snmp_snapshot_free(&s);
	json_decref(j);
}

static void test_iscsi_nodes_and_portals(void)
{
	struct snmp_snapshot s;
	build(&s, STATS);
	json_t *global =
	    load("{\"portal\": [\"127.0.0.1:3260\", \"[::1]:3261\", \"san.example:3262\", 7]}");
	json_t *targets =
	    load("{\"iqn.t\": {\"alias\": \"vmware datastore\"}, \"iqn.u\": {\"alias\": null}}");
	CU_ASSERT_EQUAL_FATAL(snmp_snapshot_add_iscsi(&s, global, targets), 0);
	CU_ASSERT_EQUAL_FATAL(s.n_nodes, 2);
	CU_ASSERT_EQUAL_FATAL(s.n_portals, 3); /* the non-string entry is skipped */
	CU_ASSERT_EQUAL(snmp_node_index(&s, "iqn.t"), snmp_name_index("iqn.t"));
	CU_ASSERT_EQUAL(snmp_node_index(&s, ""), 0); /* discovery: no node */
	for (size_t i = 0; i < s.n_nodes; i++)
		if (!strcmp(s.nodes[i].name, "iqn.t"))
			CU_ASSERT_STRING_EQUAL(s.nodes[i].alias, "vmware datastore");
	for (size_t i = 0; i < s.n_portals; i++) {
		const struct snmp_portal *p = &s.portals[i];
		CU_ASSERT_EQUAL(p->index, snmp_name_index(p->text));
		if (!strcmp(p->text, "127.0.0.1:3260")) {
			CU_ASSERT_EQUAL(p->addr_type, 1);
			CU_ASSERT_EQUAL(p->addr_len, 4);
			CU_ASSERT_EQUAL(p->addr[0], 127);
			CU_ASSERT_EQUAL(p->addr[3], 1);
			CU_ASSERT_EQUAL(p->port, 3260);
		} else if (!strcmp(p->text, "[::1]:3261")) {
			CU_ASSERT_EQUAL(p->addr_type, 2);
			CU_ASSERT_EQUAL(p->addr_len, 16);
			CU_ASSERT_EQUAL(p->addr[15], 1);
			CU_ASSERT_EQUAL(p->port, 3261);
		} else {
			CU_ASSERT_STRING_EQUAL(p->text, "san.example:3262");
			CU_ASSERT_EQUAL(p->addr_type, 16);
			CU_ASSERT_STRING_EQUAL(p->host, "san.example");
			CU_ASSERT_EQUAL(p->addr_len, strlen("san.example"));
			CU_ASSERT_EQUAL(p->port, 3262);
		}
	}
	json_decref(global);
	json_decref(targets);
	snmp_snapshot_free(&s);

	/* Nothing known: empty tables, no crash. */
	build(&s, STATS);
	CU_ASSERT_EQUAL(snmp_snapshot_add_iscsi(&s, NULL, NULL), 0);
	CU_ASSERT_EQUAL(s.n_nodes + s.n_portals, 0);
	snmp_snapshot_free(&s);
}

static int n_events;
static enum snmp_event last_ev;
static const char *last_name;

static void on_event(void *ctx, enum snmp_event ev, const void *row)
{
	(void)ctx;
	n_events++;
	last_ev = ev;
	last_name = ev == SNMP_EV_CACHE_FAILED || ev == SNMP_EV_CACHE_RECOVERED
	                ? ((const struct snmp_cache *)row)->name
	                : ((const struct snmp_disk *)row)->name;
}

static void poll_with(struct snmp_watch *w, const char *errors, const char *passthrough, double t,
                      struct snmp_snapshot *s)
{
	char text[1024];
	snprintf(text, sizeof(text),
	         "{\"disks\": {\"d0\": {\"errors\": %s, \"cache\": \"c0\"}},"
	         " \"caches\": {\"c0\": {\"passthrough\": %s}}}",
	         errors, passthrough);
	build(s, text);
	CU_ASSERT_EQUAL(snmp_watch_update(w, s, t, on_event, NULL), 0);
}

static void test_watch_origin_and_cache(void)
{
	struct snmp_watch w = {0};
	struct snmp_snapshot s;

	n_events = 0;
	/* Errors at the first sighting are a baseline, not an event. */
	poll_with(&w, "4", "false", 0, &s);
	CU_ASSERT_EQUAL(n_events, 0);
	CU_ASSERT_EQUAL(s.disks[0].origin_state, SNMP_ORIGIN_OK);
	snmp_snapshot_free(&s);

	poll_with(&w, "6", "false", 1, &s);
	CU_ASSERT_EQUAL(n_events, 1);
	CU_ASSERT_EQUAL(last_ev, SNMP_EV_ORIGIN_LOST);
	CU_ASSERT_STRING_EQUAL(last_name, "d0");
	CU_ASSERT_EQUAL(s.disks[0].origin_state, SNMP_ORIGIN_FAILING);
	snmp_snapshot_free(&s);

	/* More errors: still failing, no second notification. */
	poll_with(&w, "9", "false", 5, &s);
	CU_ASSERT_EQUAL(n_events, 1);
	snmp_snapshot_free(&s);
	/* Quiet, but not for long enough. */
	poll_with(&w, "9", "false", 5 + SNMP_ORIGIN_QUIET_S - 1, &s);
	CU_ASSERT_EQUAL(n_events, 1);
	CU_ASSERT_EQUAL(s.disks[0].origin_state, SNMP_ORIGIN_FAILING);
	snmp_snapshot_free(&s);
	poll_with(&w, "9", "false", 5 + SNMP_ORIGIN_QUIET_S, &s);
	CU_ASSERT_EQUAL(n_events, 2);
	CU_ASSERT_EQUAL(last_ev, SNMP_EV_ORIGIN_RECOVERED);
	CU_ASSERT_EQUAL(s.disks[0].origin_state, SNMP_ORIGIN_OK);
	snmp_snapshot_free(&s);

	/* The cache fails, stays failed (one event), recovers. */
	poll_with(&w, "9", "true", 20, &s);
	CU_ASSERT_EQUAL(n_events, 3);
	CU_ASSERT_EQUAL(last_ev, SNMP_EV_CACHE_FAILED);
	CU_ASSERT_STRING_EQUAL(last_name, "c0");
	snmp_snapshot_free(&s);
	poll_with(&w, "9", "true", 21, &s);
	CU_ASSERT_EQUAL(n_events, 3);
	snmp_snapshot_free(&s);
	poll_with(&w, "9", "false", 22, &s);
	CU_ASSERT_EQUAL(n_events, 4);
	CU_ASSERT_EQUAL(last_ev, SNMP_EV_CACHE_RECOVERED);
	snmp_snapshot_free(&s);

	/* A counter that goes down (hotlund restarted) is a new baseline. */
	poll_with(&w, "0", "false", 23, &s);
	CU_ASSERT_EQUAL(n_events, 4);
	CU_ASSERT_EQUAL(s.disks[0].origin_state, SNMP_ORIGIN_OK);
	snmp_snapshot_free(&s);
	snmp_watch_free(&w);
}

static void test_watch_cache_failed_at_start(void)
{
	struct snmp_watch w = {0};
	struct snmp_snapshot s;

	n_events = 0;
	poll_with(&w, "0", "true", 0, &s);
	CU_ASSERT_EQUAL(n_events, 1);
	CU_ASSERT_EQUAL(last_ev, SNMP_EV_CACHE_FAILED);
	snmp_snapshot_free(&s);
	snmp_watch_free(&w);
}

/* A disk shared between gateways carries "ownership"; one that is not, none. */
static void test_ownership(void)
{
	struct snmp_snapshot s;

	build(&s, "{\"disks\": {"
	          "  \"sh\": {\"ownership\": {\"gateway\": 2, \"state\": \"standby\","
	          "          \"alua\": \"standby\", \"owner\": 1, \"epoch\": 7, \"transitions\": 3,"
	          "          \"takeovers\": 1, \"lease_left_ms\": 0, \"last\": \"lost\"}},"
	          "  \"tr\": {\"ownership\": {\"alua\": \"transitioning\", \"owner\": 0,"
	          "          \"epoch\": 99999999999}},"
	          "  \"ao\": {\"ownership\": {\"alua\": \"active/optimized\", \"owner\": 2,"
	          "          \"epoch\": 8}},"
	          "  \"odd\": {\"ownership\": {\"alua\": \"sideways\", \"owner\": 4096}},"
	          "  \"lone\": {\"read_cmds\": 1}"
	          "}}");
	const struct snmp_disk *sh = disk(&s, "sh"), *tr = disk(&s, "tr"), *ao = disk(&s, "ao");
	const struct snmp_disk *odd = disk(&s, "odd"), *lone = disk(&s, "lone");
	CU_ASSERT_PTR_NOT_NULL_FATAL(sh);
	CU_ASSERT_PTR_NOT_NULL_FATAL(tr);
	CU_ASSERT_PTR_NOT_NULL_FATAL(ao);
	CU_ASSERT_PTR_NOT_NULL_FATAL(odd);
	CU_ASSERT_PTR_NOT_NULL_FATAL(lone);
	CU_ASSERT_EQUAL(sh->alua, SNMP_ALUA_STANDBY);
	CU_ASSERT_EQUAL(sh->owner_gw, 1);
	CU_ASSERT_EQUAL(sh->owner_epoch, 7);
	CU_ASSERT_EQUAL(sh->owner_moves, 3);
	CU_ASSERT_EQUAL(sh->takeovers, 1);
	CU_ASSERT_EQUAL(ao->alua, SNMP_ALUA_ACTIVE_OPTIMIZED);
	CU_ASSERT_EQUAL(ao->owner_gw, 2);
	CU_ASSERT_EQUAL(tr->alua, SNMP_ALUA_TRANSITIONING);
	CU_ASSERT_EQUAL(tr->owner_gw, 0);
	CU_ASSERT_EQUAL(tr->owner_epoch, UINT32_MAX); /* saturates, never wraps back */
	/* a state this subagent does not know is not reported as serving */
	CU_ASSERT_EQUAL(odd->alua, SNMP_ALUA_UNAVAILABLE);
	CU_ASSERT_EQUAL(odd->owner_gw, 0);
	/* not shared: notShared(255), no owner, nothing counted */
	CU_ASSERT_EQUAL(lone->alua, SNMP_ALUA_NOT_SHARED);
	CU_ASSERT_EQUAL(lone->owner_gw, 0);
	CU_ASSERT_EQUAL(lone->owner_epoch, 0);
	CU_ASSERT_EQUAL(lone->owner_moves, 0);
	CU_ASSERT_EQUAL(lone->takeovers, 0);
	snmp_snapshot_free(&s);
}

static void poll_alua(struct snmp_watch *w, const char *alua, struct snmp_snapshot *s)
{
	char text[512];
	snprintf(text, sizeof(text),
	         "{\"disks\": {\"d0\": {\"ownership\": {\"alua\": \"%s\", \"owner\": 1}},"
	         " \"d1\": {}}}",
	         alua);
	build(s, text);
	CU_ASSERT_EQUAL(snmp_watch_update(w, s, 0, on_event, NULL), 0);
}

/* hlDiskAluaStateChanged: once per change seen between polls, never at the first sighting. */
static void test_watch_alua(void)
{
	struct snmp_watch w = {0};
	struct snmp_snapshot s;

	n_events = 0;
	poll_alua(&w, "active/optimized", &s);
	CU_ASSERT_EQUAL(n_events, 0);
	snmp_snapshot_free(&s);
	poll_alua(&w, "active/optimized", &s);
	CU_ASSERT_EQUAL(n_events, 0);
	snmp_snapshot_free(&s);
	poll_alua(&w, "transitioning", &s);
	CU_ASSERT_EQUAL(n_events, 1);
	CU_ASSERT_EQUAL(last_ev, SNMP_EV_ALUA_CHANGED);
	CU_ASSERT_STRING_EQUAL(last_name, "d0");
	snmp_snapshot_free(&s);
	poll_alua(&w, "standby", &s);
	CU_ASSERT_EQUAL(n_events, 2);
	CU_ASSERT_EQUAL(last_ev, SNMP_EV_ALUA_CHANGED);
	snmp_snapshot_free(&s);
	poll_alua(&w, "standby", &s);
	CU_ASSERT_EQUAL(n_events, 2); /* d1 (not shared) never reports */
	snmp_snapshot_free(&s);
	snmp_watch_free(&w);
}

int main(void)
{
	static const struct hl_test tests[] = {
	    {"index is a stable hash of the name", test_index_is_stable_hash},
	    {"disk counters, hits and misses", test_disk_counters},
	    {"cache row", test_cache_row},
	    {"sessions sorted by tsih", test_sessions_sorted_by_tsih},
	    {"latency rows and quantiles", test_latency_rows_and_quantiles},
	    {"bad and partial input", test_bad_and_partial_input},
	    {"iscsi nodes and portals", test_iscsi_nodes_and_portals},
	    {"watch: origin loss and cache failure", test_watch_origin_and_cache},
	    {"hlDiskOrigin masks an origin's secret", test_origin_secret_masked},
	    {"hlAuthFailures and hlAuthThrottled", test_auth_counters},
	    {"hlWriteBuffer* from the write budget", test_write_buffer_counters},
	    {"hlAgentGroup3: logins, connections, shares", test_service_counters},
	    {"watch: cache already failed at start", test_watch_cache_failed_at_start},
	    {"ownership columns", test_ownership},
	    {"watch: ALUA state changes", test_watch_alua},
	    {NULL, NULL},
	};
	return hl_test_run("snmp_model", tests);
}
