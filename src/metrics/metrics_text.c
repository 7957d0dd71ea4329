/*
 * metrics_text.c - the stats object as Prometheus text (hl_metrics_render).
 *
 * The stats object (docs/control.md) is the one source: this file only
 * renames and converts (microsecond buckets and nanosecond sums become
 * seconds, log2 histograms become cumulative `le` buckets), so what
 * Prometheus scrapes equals what `hotlunctl stats --json` and hotlun-snmp
 * show. The format wants all samples of a family together, but the object
 * is walked disk by disk; so each family collects its samples in a buffer
 * of its own and the families are printed in table order at the end.
 */
#include "config.h"

#include "hotlun/metrics.h"
#include "hotlun/origin.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum fam_id {
	F_BUILD,
	F_GATEWAY,
	/* per disk */
	F_DISK_INFO,
	F_DISK_SIZE,
	F_DISK_READS,
	F_DISK_WRITES,
	F_DISK_OTHER,
	F_DISK_READ_BYTES,
	F_DISK_WRITTEN_BYTES,
	F_DISK_ERRORS,
	F_DISK_READ_SECONDS,
	F_DISK_WRITE_SECONDS,
	F_DISK_READ_LAT,
	F_DISK_WRITE_LAT,
	/* gateways: a shared disk's ownership */
	F_OWN_ALUA,
	F_OWN_IS_OWNER,
	F_OWN_OWNER,
	F_OWN_EPOCH,
	F_OWN_MOVES,
	F_OWN_TAKEOVERS,
	F_OWN_LEASE,
	/* gateways: a shared disk's warm standby */
	F_SHADOW_HOT,
	F_SHADOWED,
	F_SHADOW_BEHIND,
	F_SHADOW_READS,
	F_SHADOW_BYTES,
	F_SHADOW_RATE,
	/* per cache and disk */
	F_CACHE_READS,
	F_CACHE_READ_BYTES,
	F_CACHE_BYPASS,
	F_CACHE_BYPASS_BYTES,
	F_CACHE_WRITES,
	F_CACHE_ADMISSIONS,
	F_CACHE_REJECTIONS,
	F_CACHE_EVICTIONS,
	F_CACHE_FILLS_DROPPED,
	F_CACHE_HIT_STREAMS,
	F_CACHE_INVALIDATIONS,
	F_CACHE_DEV_WRITTEN,
	F_CACHE_WARM,
	F_CACHE_WARM_INFO,
	F_CACHE_ORIGIN_READ_LAT,
	F_CACHE_ORIGIN_WRITE_LAT,
	/* per cache */
	F_CACHE_INFO,
	F_CACHE_BLOCKS,
	F_CACHE_BLOCKS_USED,
	F_CACHE_WIN_BLOCKS,
	F_CACHE_WIN_BLOCKS_USED,
	F_CACHE_BLOCK_SIZE,
	F_CACHE_WRITE_RATIO,
	F_CACHE_WRITE_BUDGET,
	F_CACHE_PASSTHROUGH,
	F_CACHE_PASSTHROUGH_IOS,
	F_CACHE_DEV_ERRORS,
	F_CACHE_ORIGIN_ERRORS,
	F_CACHE_HIT_RETRIES,
	F_CACHE_PROMOTIONS,
	F_CACHE_UB_BYTES,
	F_CACHE_UB_WRITEBACKS,
	F_CACHE_META_SYNCS,
	F_CACHE_ORPHAN_DROPS,
	F_CACHE_INFLIGHT,
	F_CACHE_RESTORING,
	F_CACHE_RESTORE_LEFT,
	F_CACHE_RESTORE_RESTORED,
	F_CACHE_RESTORE_DROPPED,
	/* the iSCSI service */
	F_TARGET_SESSIONS,
	F_SESSIONS,
	F_AUTH_FAILURES,
	F_AUTH_THROTTLED,
	F_WB_LIMIT,
	F_WB_CONN_LIMIT,
	F_WB_HELD,
	F_WB_PEAK,
	F_WB_WAITING,
	F_WB_WAITING_BYTES,
	F_WB_DEFERRED,
	F_WB_TASK_SET_FULL,
	F_WB_WINDOW_CLOSED,
	F_WB_SOURCE_LIMIT,
	F_WB_SOURCES,
	F_WB_SOURCE_CAPPED,
	F_WB_CLOSED_SLOW,
	F_WB_CLOSED_NO_DATA,
	F_SCRATCH_LIMIT,
	F_SCRATCH_USED,
	F_SCRATCH_PEAK,
	F_SCRATCH_REFUSED,
	F_LOGINS,
	F_LOGIN_FAILURES,
	F_CONNECTIONS,
	F_PENDING_LOGINS,
	F_PENDING_EVICTED,
	F_REFUSED_PENDING,
	F_REFUSED_SESSIONS,
	F_FD_PAUSES,
	F_FDS_OPEN,
	F_FDS_MAX,
	F_N
};

struct fam {
	const char *name, *type, *help;
};

/* Names follow Prometheus's conventions: hotlun_ prefix, base units, _total counters. */
static const struct fam fams[F_N] = {
    [F_BUILD] = {"hotlun_build_info", "gauge", "hotlund's version (always 1)"},
    [F_GATEWAY] = {"hotlun_gateway_id", "gauge",
                   "this gateway's id ([global] gateway; 0: a lone gateway)"},
    [F_DISK_INFO] = {"hotlun_disk_info", "gauge",
                     "a disk: its origin's kind and its cache (always 1)"},
    [F_DISK_SIZE] = {"hotlun_disk_size_bytes", "gauge", "size of the disk"},
    [F_DISK_READS] = {"hotlun_disk_reads_completed_total", "counter",
                      "READ commands completed (failed ones included)"},
    [F_DISK_WRITES] = {"hotlun_disk_writes_completed_total", "counter",
                       "WRITE commands completed (failed ones included)"},
    [F_DISK_OTHER] = {"hotlun_disk_other_commands_total", "counter",
                      "other block commands completed (flush, unmap, write same, ...)"},
    [F_DISK_READ_BYTES] = {"hotlun_disk_read_bytes_total", "counter",
                           "bytes read by successful READs"},
    [F_DISK_WRITTEN_BYTES] = {"hotlun_disk_written_bytes_total", "counter",
                              "bytes written by successful WRITEs"},
    [F_DISK_ERRORS] = {"hotlun_disk_errors_total", "counter",
                       "block commands that failed (a miscompare is not a failure)"},
    [F_DISK_READ_SECONDS] = {"hotlun_disk_read_seconds_total", "counter",
                             "time spent by READs, summed"},
    [F_DISK_WRITE_SECONDS] = {"hotlun_disk_write_seconds_total", "counter",
                              "time spent by WRITEs, summed"},
    [F_DISK_READ_LAT] = {"hotlun_disk_read_latency_seconds", "histogram",
                         "READ latency by where the data came from: hit (the cache), "
                         "miss (the origin), partial (both), uncached (no cache looked)"},
    [F_DISK_WRITE_LAT] = {"hotlun_disk_write_latency_seconds", "histogram", "WRITE latency"},
    [F_OWN_ALUA] = {"hotlun_disk_alua_state", "gauge",
                    "this gateway's ALUA state for a shared disk (1: the state it is in)"},
    [F_OWN_IS_OWNER] = {"hotlun_disk_owned", "gauge", "1 when this gateway owns the shared disk"},
    [F_OWN_OWNER] = {"hotlun_disk_owner_gateway", "gauge",
                     "the gateway id that owns the shared disk, as last seen (0: none)"},
    [F_OWN_EPOCH] = {"hotlun_disk_owner_epoch", "gauge", "the owner's epoch, as last seen"},
    [F_OWN_MOVES] = {"hotlun_disk_ownership_moves_total", "counter",
                     "times this gateway gained or lost the disk"},
    [F_OWN_TAKEOVERS] = {"hotlun_disk_takeovers_total", "counter",
                         "of those, forced takeovers of a silent owner"},
    [F_OWN_LEASE] = {"hotlun_disk_lease_left_seconds", "gauge",
                     "the owner's time left on its lease (negative: lapsed; 0 when not owner)"},
    [F_SHADOW_HOT] = {"hotlun_disk_shadow_hot_blocks", "gauge",
                      "warm standby: blocks in the owner's hot set (standby: as last read; "
                      "owner: as last published)"},
    [F_SHADOWED] = {"hotlun_disk_shadowed_blocks", "gauge",
                    "warm standby: of the hot set, blocks this standby's cache holds"},
    [F_SHADOW_BEHIND] = {"hotlun_disk_shadow_behind_blocks", "gauge",
                         "warm standby: hot blocks this standby has yet to pre-read"},
    [F_SHADOW_READS] = {"hotlun_disk_shadow_origin_reads_total", "counter",
                        "warm standby: pre-reads sent to the origin"},
    [F_SHADOW_BYTES] = {"hotlun_disk_shadow_origin_read_bytes_total", "counter",
                        "warm standby: bytes of those pre-reads"},
    [F_SHADOW_RATE] = {"hotlun_disk_shadow_rate_bytes", "gauge",
                       "warm standby: the pre-read rate, bytes per second (0: off)"},
    [F_CACHE_READS] = {"hotlun_cache_reads_total", "counter",
                       "reads that reached the cache, by result: hit, partial, miss"},
    [F_CACHE_READ_BYTES] = {"hotlun_cache_read_bytes_total", "counter",
                            "bytes of reads, by where they were read: cache, origin"},
    [F_CACHE_BYPASS] = {"hotlun_cache_bypass_reads_total", "counter",
                        "reads of a sequential stream (not admitted; included in reads)"},
    [F_CACHE_BYPASS_BYTES] = {"hotlun_cache_bypass_read_bytes_total", "counter",
                              "bytes of those reads"},
    [F_CACHE_WRITES] = {"hotlun_cache_writes_total", "counter",
                        "writes that went through the cache"},
    [F_CACHE_ADMISSIONS] = {"hotlun_cache_admissions_total", "counter",
                            "cache blocks given a slot on a miss (fills)"},
    [F_CACHE_REJECTIONS] = {"hotlun_cache_rejections_total", "counter",
                            "misses the admission policy refused"},
    [F_CACHE_EVICTIONS] = {"hotlun_cache_evictions_total", "counter",
                           "cache blocks evicted for another block"},
    [F_CACHE_FILLS_DROPPED] = {"hotlun_cache_fills_dropped_total", "counter",
                               "fills not installed because a write raced them"},
    [F_CACHE_HIT_STREAMS] = {"hotlun_cache_hit_streams_total", "counter",
                             "big hits whose leading data was sent before the rest was read"},
    [F_CACHE_INVALIDATIONS] = {"hotlun_cache_invalidations_total", "counter",
                               "cache blocks (partly) dropped by writes"},
    [F_CACHE_DEV_WRITTEN] = {"hotlun_cache_device_written_bytes_total", "counter",
                             "bytes written to the cache device, by kind: fill, update"},
    [F_CACHE_WARM] = {"hotlun_cache_warm_start_blocks", "gauge",
                      "what the last start kept of the disk's cached blocks and dropped"},
    [F_CACHE_WARM_INFO] = {"hotlun_cache_warm_start_info", "gauge",
                           "why the last start kept or dropped (always 1)"},
    [F_CACHE_ORIGIN_READ_LAT] = {"hotlun_cache_origin_read_latency_seconds", "histogram",
                                 "latency of the origin's reads as the cache sees them"},
    [F_CACHE_ORIGIN_WRITE_LAT] = {"hotlun_cache_origin_write_latency_seconds", "histogram",
                                  "latency of the origin's writes as the cache sees them"},
    [F_CACHE_INFO] = {"hotlun_cache_info", "gauge", "a cache and its device (always 1)"},
    [F_CACHE_BLOCKS] = {"hotlun_cache_blocks", "gauge", "SSD blocks of the cache"},
    [F_CACHE_BLOCKS_USED] = {"hotlun_cache_blocks_used", "gauge", "SSD blocks holding data"},
    [F_CACHE_WIN_BLOCKS] = {"hotlun_cache_window_blocks", "gauge", "RAM window blocks"},
    [F_CACHE_WIN_BLOCKS_USED] = {"hotlun_cache_window_blocks_used", "gauge",
                                 "RAM window blocks holding data"},
    [F_CACHE_BLOCK_SIZE] = {"hotlun_cache_block_size_bytes", "gauge", "cache block size"},
    [F_CACHE_WRITE_RATIO] = {"hotlun_cache_write_ratio", "gauge",
                             "recent SSD bytes written per byte an admit-all cache would write"},
    [F_CACHE_WRITE_BUDGET] = {"hotlun_cache_write_budget_ratio", "gauge",
                              "the budget for that ratio (write_budget)"},
    [F_CACHE_PASSTHROUGH] = {"hotlun_cache_passthrough", "gauge",
                             "1 when the cache device failed and the cache passes I/O through"},
    [F_CACHE_PASSTHROUGH_IOS] = {"hotlun_cache_passthrough_ios_total", "counter",
                                 "I/Os forwarded untouched while in pass-through"},
    [F_CACHE_DEV_ERRORS] = {"hotlun_cache_device_errors_total", "counter",
                            "cache device I/O errors"},
    [F_CACHE_ORIGIN_ERRORS] = {"hotlun_cache_origin_errors_total", "counter",
                               "origin errors returned to initiators"},
    [F_CACHE_HIT_RETRIES] = {"hotlun_cache_hit_retries_total", "counter",
                             "planned hits re-read from the origin after a device error"},
    [F_CACHE_PROMOTIONS] = {"hotlun_cache_promotions_total", "counter",
                            "RAM window blocks copied to the SSD"},
    [F_CACHE_UB_BYTES] = {"hotlun_cache_update_buffer_bytes", "gauge",
                          "bytes held by the RAM update buffer"},
    [F_CACHE_UB_WRITEBACKS] = {"hotlun_cache_update_buffer_writebacks_total", "counter",
                               "update buffer write-backs to the device"},
    [F_CACHE_META_SYNCS] = {"hotlun_cache_metadata_syncs_total", "counter",
                            "metadata flushes done"},
    [F_CACHE_ORPHAN_DROPS] = {"hotlun_cache_orphan_drops_total", "counter",
                              "fills of requests a disk's detach abandoned, dropped uninstalled"},
    [F_CACHE_INFLIGHT] = {"hotlun_cache_inflight_requests", "gauge",
                          "requests not finished (fills after the reply included)"},
    [F_CACHE_RESTORING] = {"hotlun_cache_restoring", "gauge",
                           "1 while the records of a warm start are restored in the background"},
    [F_CACHE_RESTORE_LEFT] = {"hotlun_cache_restore_pages_left", "gauge",
                              "record pages the background restore has not read yet"},
    [F_CACHE_RESTORE_RESTORED] = {"hotlun_cache_restore_blocks_restored", "gauge",
                                  "blocks the background restore of the last start restored"},
    [F_CACHE_RESTORE_DROPPED] = {"hotlun_cache_restore_records_dropped", "gauge",
                                 "records the background restore dropped (written first, "
                                 "duplicates, unknown disks)"},
    [F_TARGET_SESSIONS] = {"hotlun_iscsi_target_sessions", "gauge",
                           "iSCSI sessions logged in to a target"},
    [F_SESSIONS] = {"hotlun_iscsi_sessions", "gauge", "iSCSI sessions (all targets)"},
    [F_AUTH_FAILURES] = {"hotlun_iscsi_auth_failures_total", "counter", "wrong CHAP responses"},
    [F_AUTH_THROTTLED] = {"hotlun_iscsi_auth_throttled_total", "counter",
                          "CHAP responses refused unchecked during a back-off"},
    [F_WB_LIMIT] = {"hotlun_iscsi_write_buffer_limit_bytes", "gauge",
                    "bytes of WRITE data unfinished commands may hold together"},
    [F_WB_CONN_LIMIT] = {"hotlun_iscsi_write_buffer_connection_limit_bytes", "gauge",
                         "bytes of it one connection may hold"},
    [F_WB_HELD] = {"hotlun_iscsi_write_buffer_held_bytes", "gauge",
                   "bytes held by unfinished WRITEs now"},
    [F_WB_PEAK] = {"hotlun_iscsi_write_buffer_peak_bytes", "gauge",
                   "the most ever held since the start"},
    [F_WB_WAITING] = {"hotlun_iscsi_write_buffer_waiting_commands", "gauge",
                      "WRITEs whose R2Ts wait for budget now"},
    [F_WB_WAITING_BYTES] = {"hotlun_iscsi_write_buffer_waiting_bytes", "gauge", "bytes those hold"},
    [F_WB_DEFERRED] = {"hotlun_iscsi_write_buffer_deferred_total", "counter",
                       "WRITEs that had to wait for budget"},
    [F_WB_TASK_SET_FULL] = {"hotlun_iscsi_task_set_full_total", "counter",
                            "WRITEs refused with TASK SET FULL"},
    [F_WB_WINDOW_CLOSED] = {"hotlun_iscsi_window_closed_total", "counter",
                            "responses whose MaxCmdSN was held back"},
    [F_WB_SOURCE_LIMIT] = {"hotlun_iscsi_write_buffer_source_limit_bytes", "gauge",
                           "bytes of it one source (address, IPv6 /64) may hold now"},
    [F_WB_SOURCES] = {"hotlun_iscsi_write_buffer_sources", "gauge",
                      "sources whose WRITEs hold budget now"},
    [F_WB_SOURCE_CAPPED] = {"hotlun_iscsi_write_buffer_source_capped_total", "counter",
                            "WRITEs refused because their source had its share"},
    [F_WB_CLOSED_SLOW] = {"hotlun_iscsi_write_deadline_closed_total", "counter",
                          "connections closed: a WRITE's data not in by its deadline"},
    [F_WB_CLOSED_NO_DATA] = {"hotlun_iscsi_write_silent_closed_total", "counter",
                             "connections closed: owed WRITE data, none came for 30 s"},
    [F_SCRATCH_LIMIT] = {"hotlun_scsi_scratch_buffer_limit_bytes", "gauge",
                         "bytes per-command scratch buffers may hold together"},
    [F_SCRATCH_USED] = {"hotlun_scsi_scratch_buffer_used_bytes", "gauge",
                        "bytes per-command scratch buffers hold now"},
    [F_SCRATCH_PEAK] = {"hotlun_scsi_scratch_buffer_peak_bytes", "gauge",
                        "the most ever held since the start"},
    [F_SCRATCH_REFUSED] = {"hotlun_scsi_scratch_buffer_refused_total", "counter",
                           "commands answered BUSY: the scratch budget was spent"},
    [F_LOGINS] = {"hotlun_iscsi_logins_total", "counter", "sessions established"},
    [F_LOGIN_FAILURES] = {"hotlun_iscsi_login_failures_total", "counter",
                          "logins answered with a failure status"},
    [F_CONNECTIONS] = {"hotlun_iscsi_connections", "gauge", "accepted connections open"},
    [F_PENDING_LOGINS] = {"hotlun_iscsi_pending_logins", "gauge",
                          "connections that have not finished login"},
    [F_PENDING_EVICTED] = {"hotlun_iscsi_pending_evicted_total", "counter",
                           "silent connections in login closed to make room"},
    [F_REFUSED_PENDING] = {"hotlun_iscsi_refused_pending_total", "counter",
                           "connections closed at accept by a pending-login cap"},
    [F_REFUSED_SESSIONS] = {"hotlun_iscsi_refused_sessions_total", "counter",
                            "logins refused at a session cap"},
    [F_FD_PAUSES] = {"hotlun_iscsi_accept_paused_total", "counter",
                     "times a portal stopped accepting for want of descriptors"},
    [F_FDS_OPEN] = {"hotlun_process_open_fds", "gauge", "file descriptors open"},
    [F_FDS_MAX] = {"hotlun_process_max_fds", "gauge", "file descriptors allowed (soft limit)"},
};

struct render {
	FILE *f[F_N];
	char *buf[F_N];
	size_t len[F_N];
	bool nomem;
};

/* Labels as `name="value",...`, values escaped as the format says. */
struct labels {
	char s[1024];
	size_t n;
};

static void lbl_add(struct labels *l, const char *name, const char *value)
{
	size_t room = sizeof(l->s) - 1;

	if (l->n && l->n < room)
		l->s[l->n++] = ',';
	for (const char *p = name; *p && l->n < room; p++)
		l->s[l->n++] = *p;
	if (l->n + 2 < room) {
		l->s[l->n++] = '=';
		l->s[l->n++] = '"';
	}
	for (const char *p = value ? value : ""; *p && l->n + 3 < room; p++) {
		if (*p == '\\' || *p == '"' || *p == '\n') {
			l->s[l->n++] = '\\';
			l->s[l->n++] = *p == '\n' ? 'n' : *p;
		} else {
			l->s[l->n++] = *p;
		}
	}
	if (l->n < room)
		l->s[l->n++] = '"';
	l->s[l->n] = '\0';
}

static struct labels lbl1(const char *k, const char *v)
{
	struct labels l = {.n = 0};

	l.s[0] = '\0';
	lbl_add(&l, k, v);
	return l;
}

static struct labels lbl2(const char *k1, const char *v1, const char *k2, const char *v2)
{
	struct labels l = lbl1(k1, v1);

	lbl_add(&l, k2, v2);
	return l;
}

static FILE *fam_file(struct render *r, enum fam_id id)
{
	if (!r->f[id] && !r->nomem) {
		r->f[id] = open_memstream(&r->buf[id], &r->len[id]);
		if (!r->f[id])
			r->nomem = true;
	}
	return r->f[id];
}

/* One sample: NAME[SUFFIX]{labels} value. */
static void sample_u(struct render *r, enum fam_id id, const char *suffix, const struct labels *l,
                     uint64_t v)
{
	FILE *f = fam_file(r, id);

	if (f)
		fprintf(f, "%s%s%s%s%s %" PRIu64 "\n", fams[id].name, suffix, l ? "{" : "",
		        l ? l->s : "", l ? "}" : "", v);
}

static void sample_d(struct render *r, enum fam_id id, const char *suffix, const struct labels *l,
                     double v)
{
	FILE *f = fam_file(r, id);

	if (f)
		fprintf(f, "%s%s%s%s%s %.9g\n", fams[id].name, suffix, l ? "{" : "", l ? l->s : "",
		        l ? "}" : "", v);
}

static bool has(json_t *o, const char *key)
{
	return json_is_number(json_object_get(o, key));
}

static uint64_t u64(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	if (json_is_integer(v))
		return json_integer_value(v) > 0 ? (uint64_t)json_integer_value(v) : 0;
	if (json_is_real(v))
		return json_real_value(v) > 0 ? (uint64_t)json_real_value(v) : 0;
	return 0;
}

static double dbl(json_t *o, const char *key)
{
	return json_number_value(json_object_get(o, key));
}

/* A counter member, when the object has it (absent: nothing is invented). */
static void counter(struct render *r, enum fam_id id, const struct labels *l, json_t *o,
                    const char *key)
{
	if (has(o, key))
		sample_u(r, id, "", l, u64(o, key));
}

/*
 * A log2 microsecond histogram (bucket i: under 2^i us, the last: the rest;
 * hl_origin_lat_bucket) with its summed nanoseconds, as a Prometheus
 * histogram in seconds: cumulative buckets, +Inf, _sum, _count.
 */
static void histogram(struct render *r, enum fam_id id, const struct labels *base, json_t *buckets,
                      uint64_t sum_ns)
{
	size_t n = json_array_size(buckets);
	uint64_t run = 0;
	char le[32];

	if (!json_is_array(buckets) || !n)
		return;
	for (size_t i = 0; i < n; i++) {
		json_t *v = json_array_get(buckets, i);
		struct labels l = *base;

		run += json_is_integer(v) && json_integer_value(v) > 0
		           ? (uint64_t)json_integer_value(v)
		           : 0;
		if (i + 1 == n)
			break; /* the last bucket has no bound: it is +Inf's */
		snprintf(le, sizeof(le), "%.9g", (double)(1ull << i) / 1e6);
		lbl_add(&l, "le", le);
		sample_u(r, id, "_bucket", &l, run);
	}
	struct labels inf = *base;
	lbl_add(&inf, "le", "+Inf");
	sample_u(r, id, "_bucket", &inf, run);
	sample_d(r, id, "_sum", base, (double)sum_ns / 1e9);
	sample_u(r, id, "_count", base, run);
}

/*
 * The scheme of an origin URI ("file", "iscsi", "rbd"): never the URI (it may
 * name a host). A scheme is a letter, then letters, digits, '+', '-' or '.',
 * then ':' (the rule hl_origin_open reads it by); anything else is a bare
 * path, "file". Cutting at the first ':' instead gave "/srv/acme" for the
 * file /srv/acme:lun0.img: a path, on an endpoint without authentication.
 */
static void origin_kind(const char *uri, char *out, size_t len)
{
	size_t n = 0;

	if (uri && isalpha((unsigned char)uri[0]))
		while (isalnum((unsigned char)uri[n]) || uri[n] == '+' || uri[n] == '-' ||
		       uri[n] == '.')
			n++;
	if (!n || uri[n] != ':' || n >= len) {
		snprintf(out, len, "file");
		return;
	}
	memcpy(out, uri, n);
	out[n] = '\0';
	/* wrappers put their label first ("throttle:file:..."): the backend is last */
	if (!strcmp(out, "throttle") || !strcmp(out, "counted"))
		origin_kind(uri + n + 1, out, len);
}

static const char *const alua_states[] = {
    "active/optimized", "active/non-optimized", "standby", "unavailable",
    "offline",          "transitioning",
};

static void render_ownership(struct render *r, const char *disk, json_t *ow)
{
	struct labels l = lbl1("disk", disk);
	const char *alua = json_string_value(json_object_get(ow, "alua"));
	const char *state = json_string_value(json_object_get(ow, "state"));
	bool owner = state && !strcmp(state, "owner");

	for (size_t i = 0; i < sizeof(alua_states) / sizeof(alua_states[0]); i++) {
		struct labels s = lbl2("disk", disk, "state", alua_states[i]);
		sample_u(r, F_OWN_ALUA, "", &s, alua && !strcmp(alua, alua_states[i]));
	}
	sample_u(r, F_OWN_IS_OWNER, "", &l, owner);
	counter(r, F_OWN_OWNER, &l, ow, "owner");
	counter(r, F_OWN_EPOCH, &l, ow, "epoch");
	counter(r, F_OWN_MOVES, &l, ow, "transitions");
	counter(r, F_OWN_TAKEOVERS, &l, ow, "takeovers");
	if (has(ow, "lease_left_ms"))
		sample_d(r, F_OWN_LEASE, "", &l,
		         owner ? (double)json_integer_value(json_object_get(ow, "lease_left_ms")) /
		                     1e3
		               : 0.0);
}

static void render_disk(struct render *r, const char *disk, json_t *o)
{
	struct labels l = lbl1("disk", disk);
	const char *cache = json_string_value(json_object_get(o, "cache"));
	char kind[32];
	json_t *bysrc = json_object_get(o, "read_latency_by_source_log2_us");
	json_t *nssrc = json_object_get(o, "read_ns_by_source");
	json_t *ow = json_object_get(o, "ownership");

	origin_kind(json_string_value(json_object_get(o, "origin")), kind, sizeof(kind));
	struct labels info = lbl2("disk", disk, "origin", kind);
	lbl_add(&info, "cache", cache ? cache : "");
	sample_u(r, F_DISK_INFO, "", &info, 1);
	counter(r, F_DISK_SIZE, &l, o, "size_bytes");
	counter(r, F_DISK_READS, &l, o, "read_cmds");
	counter(r, F_DISK_WRITES, &l, o, "write_cmds");
	counter(r, F_DISK_OTHER, &l, o, "other_cmds");
	counter(r, F_DISK_READ_BYTES, &l, o, "read_bytes");
	counter(r, F_DISK_WRITTEN_BYTES, &l, o, "write_bytes");
	counter(r, F_DISK_ERRORS, &l, o, "errors");
	if (has(o, "read_ns"))
		sample_d(r, F_DISK_READ_SECONDS, "", &l, (double)u64(o, "read_ns") / 1e9);
	if (has(o, "write_ns"))
		sample_d(r, F_DISK_WRITE_SECONDS, "", &l, (double)u64(o, "write_ns") / 1e9);
	if (json_is_object(bysrc)) {
		static const char *const srcs[] = {"hit", "partial", "miss", "uncached"};
		for (size_t i = 0; i < sizeof(srcs) / sizeof(srcs[0]); i++) {
			struct labels s = lbl2("disk", disk, "source", srcs[i]);
			histogram(r, F_DISK_READ_LAT, &s, json_object_get(bysrc, srcs[i]),
			          u64(nssrc, srcs[i]));
		}
	}
	histogram(r, F_DISK_WRITE_LAT, &l, json_object_get(o, "write_latency_log2_us"),
	          u64(o, "write_ns"));
	if (json_is_object(ow))
		render_ownership(r, disk, ow);
	json_t *sh = json_object_get(o, "shadow");
	if (json_is_object(sh)) {
		counter(r, F_SHADOW_HOT, &l, sh, "hot_blocks");
		counter(r, F_SHADOWED, &l, sh, "shadowed");
		counter(r, F_SHADOW_BEHIND, &l, sh, "behind");
		counter(r, F_SHADOW_READS, &l, sh, "origin_reads");
		counter(r, F_SHADOW_BYTES, &l, sh, "origin_bytes");
		counter(r, F_SHADOW_RATE, &l, sh, "rate");
	}
}

/* Counters of one disk in one cache. */
static void render_cache_disk(struct render *r, const char *cache, const char *disk, json_t *o)
{
	struct labels l = lbl2("cache", cache, "disk", disk);
	static const struct {
		const char *key, *result;
	} reads[] = {{"read_hits", "hit"}, {"read_partial", "partial"}, {"read_misses", "miss"}};

	for (size_t i = 0; i < sizeof(reads) / sizeof(reads[0]); i++) {
		struct labels s = l;
		lbl_add(&s, "result", reads[i].result);
		counter(r, F_CACHE_READS, &s, o, reads[i].key);
	}
	struct labels bc = l, bo = l;
	lbl_add(&bc, "source", "cache");
	lbl_add(&bo, "source", "origin");
	counter(r, F_CACHE_READ_BYTES, &bc, o, "bytes_read_cache");
	counter(r, F_CACHE_READ_BYTES, &bo, o, "bytes_read_origin");
	counter(r, F_CACHE_BYPASS, &l, o, "read_bypass");
	counter(r, F_CACHE_BYPASS_BYTES, &l, o, "bytes_read_bypass");
	counter(r, F_CACHE_WRITES, &l, o, "write_reqs");
	counter(r, F_CACHE_ADMISSIONS, &l, o, "admissions");
	counter(r, F_CACHE_REJECTIONS, &l, o, "rejections");
	counter(r, F_CACHE_EVICTIONS, &l, o, "evictions");
	counter(r, F_CACHE_FILLS_DROPPED, &l, o, "fills_dropped");
	counter(r, F_CACHE_HIT_STREAMS, &l, o, "hit_streams");
	counter(r, F_CACHE_INVALIDATIONS, &l, o, "invalidations");
	if (has(o, "bytes_cache_write") && has(o, "bytes_cache_update")) {
		uint64_t all = u64(o, "bytes_cache_write"), upd = u64(o, "bytes_cache_update");
		struct labels fl = l, ul = l;
		lbl_add(&fl, "kind", "fill");
		lbl_add(&ul, "kind", "update");
		sample_u(r, F_CACHE_DEV_WRITTEN, "", &fl, all >= upd ? all - upd : 0);
		sample_u(r, F_CACHE_DEV_WRITTEN, "", &ul, upd);
	}
	if (has(o, "warm_kept")) {
		struct labels k = l, d = l;
		lbl_add(&k, "outcome", "kept");
		lbl_add(&d, "outcome", "dropped");
		counter(r, F_CACHE_WARM, &k, o, "warm_kept");
		counter(r, F_CACHE_WARM, &d, o, "warm_dropped");
	}
	const char *why = json_string_value(json_object_get(o, "warm_start"));
	if (why) {
		struct labels w = l;
		lbl_add(&w, "reason", why);
		sample_u(r, F_CACHE_WARM_INFO, "", &w, 1);
	}
	histogram(r, F_CACHE_ORIGIN_READ_LAT, &l, json_object_get(o, "origin_read_latency_log2_us"),
	          u64(o, "origin_read_ns"));
	histogram(r, F_CACHE_ORIGIN_WRITE_LAT, &l,
	          json_object_get(o, "origin_write_latency_log2_us"), u64(o, "origin_write_ns"));
}

/*
 * A cache device as the endpoint shows it: a device node's path (the
 * host's hardware: which SSD failed), else "file". A cache file's path
 * (/srv/acme/cache.img) names a folder of the host: not for a reader
 * without authentication.
 */
static const char *device_shown(const char *dev)
{
	if (dev && strncmp(dev, "/dev/", 5) == 0 && !strstr(dev, "/.."))
		return dev;
	return dev ? "file" : NULL;
}

static void render_cache(struct render *r, const char *cache, json_t *o)
{
	struct labels l = lbl1("cache", cache);
	json_t *disks = json_object_get(o, "disks"), *d;
	const char *disk;

	struct labels info = l;
	lbl_add(&info, "device", device_shown(json_string_value(json_object_get(o, "device"))));
	sample_u(r, F_CACHE_INFO, "", &info, 1);
	counter(r, F_CACHE_BLOCKS, &l, o, "nslots");
	counter(r, F_CACHE_BLOCKS_USED, &l, o, "used_slots");
	counter(r, F_CACHE_WIN_BLOCKS, &l, o, "window_slots");
	counter(r, F_CACHE_WIN_BLOCKS_USED, &l, o, "window_used_slots");
	counter(r, F_CACHE_BLOCK_SIZE, &l, o, "block_size");
	if (has(o, "write_ratio"))
		sample_d(r, F_CACHE_WRITE_RATIO, "", &l, dbl(o, "write_ratio"));
	if (has(o, "write_budget_pct"))
		sample_d(r, F_CACHE_WRITE_BUDGET, "", &l,
		         (double)u64(o, "write_budget_pct") / 100.0);
	sample_u(r, F_CACHE_PASSTHROUGH, "", &l, json_is_true(json_object_get(o, "passthrough")));
	counter(r, F_CACHE_PASSTHROUGH_IOS, &l, o, "passthrough_ios");
	counter(r, F_CACHE_DEV_ERRORS, &l, o, "dev_errors");
	counter(r, F_CACHE_ORIGIN_ERRORS, &l, o, "origin_errors");
	counter(r, F_CACHE_HIT_RETRIES, &l, o, "hit_retries");
	counter(r, F_CACHE_PROMOTIONS, &l, o, "promotions");
	counter(r, F_CACHE_UB_BYTES, &l, o, "update_buffer_bytes");
	counter(r, F_CACHE_UB_WRITEBACKS, &l, o, "update_buffer_writebacks");
	counter(r, F_CACHE_META_SYNCS, &l, o, "meta_syncs");
	counter(r, F_CACHE_ORPHAN_DROPS, &l, o, "orphan_drops");
	counter(r, F_CACHE_INFLIGHT, &l, o, "inflight");
	if (json_is_string(json_object_get(o, "restore_state"))) {
		const char *rs = json_string_value(json_object_get(o, "restore_state"));
		sample_u(r, F_CACHE_RESTORING, "", &l, !strcmp(rs, "running"));
	}
	counter(r, F_CACHE_RESTORE_LEFT, &l, o, "restore_pages_left");
	counter(r, F_CACHE_RESTORE_RESTORED, &l, o, "restore_restored");
	counter(r, F_CACHE_RESTORE_DROPPED, &l, o, "restore_dropped");
	json_object_foreach(disks, disk, d)
	{
		render_cache_disk(r, cache, disk, d);
	}
}

static void render_service(struct render *r, json_t *stats)
{
	json_t *iscsi = json_object_get(stats, "iscsi");
	json_t *wb = json_object_get(stats, "write_buffers");
	json_t *scratch = json_object_get(stats, "scratch_buffers");
	json_t *targets = json_object_get(stats, "targets"), *t;
	json_t *proc = json_object_get(stats, "process");
	const char *name;

	json_object_foreach(targets, name, t)
	{
		struct labels l = lbl1("target", name);
		counter(r, F_TARGET_SESSIONS, &l, t, "sessions");
	}
	counter(r, F_SESSIONS, NULL, stats, "sessions");
	counter(r, F_AUTH_FAILURES, NULL, iscsi, "auth_failures");
	counter(r, F_AUTH_THROTTLED, NULL, iscsi, "auth_throttled");
	counter(r, F_WB_LIMIT, NULL, wb, "limit");
	counter(r, F_WB_CONN_LIMIT, NULL, wb, "conn_limit");
	counter(r, F_WB_HELD, NULL, wb, "held_bytes");
	counter(r, F_WB_PEAK, NULL, wb, "peak_bytes");
	counter(r, F_WB_WAITING, NULL, wb, "waiting");
	counter(r, F_WB_WAITING_BYTES, NULL, wb, "waiting_bytes");
	counter(r, F_WB_DEFERRED, NULL, wb, "r2t_deferred");
	counter(r, F_WB_TASK_SET_FULL, NULL, wb, "task_set_full");
	counter(r, F_WB_WINDOW_CLOSED, NULL, wb, "window_closed");
	counter(r, F_WB_SOURCE_LIMIT, NULL, wb, "source_limit");
	counter(r, F_WB_SOURCES, NULL, wb, "sources");
	counter(r, F_WB_SOURCE_CAPPED, NULL, wb, "source_capped");
	counter(r, F_WB_CLOSED_SLOW, NULL, wb, "closed_slow");
	counter(r, F_WB_CLOSED_NO_DATA, NULL, wb, "closed_no_data");
	counter(r, F_SCRATCH_LIMIT, NULL, scratch, "limit");
	counter(r, F_SCRATCH_USED, NULL, scratch, "used_bytes");
	counter(r, F_SCRATCH_PEAK, NULL, scratch, "peak_bytes");
	counter(r, F_SCRATCH_REFUSED, NULL, scratch, "refused");
	counter(r, F_LOGINS, NULL, iscsi, "logins");
	counter(r, F_LOGIN_FAILURES, NULL, iscsi, "login_failures");
	counter(r, F_CONNECTIONS, NULL, iscsi, "connections");
	counter(r, F_PENDING_LOGINS, NULL, iscsi, "pending_logins");
	counter(r, F_PENDING_EVICTED, NULL, iscsi, "pending_evicted");
	counter(r, F_REFUSED_PENDING, NULL, iscsi, "refused_pending");
	counter(r, F_REFUSED_SESSIONS, NULL, iscsi, "refused_sessions");
	counter(r, F_FD_PAUSES, NULL, iscsi, "accept_paused");
	counter(r, F_FDS_OPEN, NULL, proc, "open_fds");
	counter(r, F_FDS_MAX, NULL, proc, "max_fds");
}

int hl_metrics_render(json_t *stats, char **text, size_t *len)
{
	struct render r = {.nomem = false};
	json_t *disks = json_object_get(stats, "disks"), *caches = json_object_get(stats, "caches");
	json_t *o;
	const char *name;
	char *out = NULL;
	size_t outlen = 0;
	FILE *f;

	const char *version = json_string_value(json_object_get(stats, "version"));
	struct labels vl = lbl1("version", version ? version : PACKAGE_VERSION);
	sample_u(&r, F_BUILD, "", &vl, 1);
	counter(&r, F_GATEWAY, NULL, stats, "gateway");
	json_object_foreach(disks, name, o)
	{
		render_disk(&r, name, o);
	}
	json_object_foreach(caches, name, o)
	{
		render_cache(&r, name, o);
	}
	render_service(&r, stats);

	f = open_memstream(&out, &outlen);
	if (!f)
		r.nomem = true;
	for (int i = 0; i < F_N; i++) {
		if (!r.f[i])
			continue;
		fclose(r.f[i]);
		if (f && r.buf[i] && r.len[i])
			fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s", fams[i].name, fams[i].help,
			        fams[i].name, fams[i].type, r.buf[i]);
		free(r.buf[i]);
	}
	if (f && fclose(f))
		r.nomem = true;
	if (r.nomem) {
		free(out);
		return -ENOMEM;
	}
	*text = out;
	*len = outlen;
	return 0;
}
