/*
 * snmp_internal.h - what the files of hotlun-snmp share: the snapshot of
 * hotlund's state that one poll of the control socket produces (plain C,
 * no net-snmp types, so it can be unit tested), the watcher that turns
 * changes between snapshots into notifications, and the net-snmp side
 * (tables, scalars, traps) that serves a snapshot.
 *
 * Ownership: a snapshot owns every string and array it points to; it is
 * replaced whole by the next poll (snmp_snapshot_free), never edited in
 * place while net-snmp may hold pointers into it.
 */
#ifndef HOTLUN_SNMP_INTERNAL_H
#define HOTLUN_SNMP_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SNMP_LAT_BUCKETS    64 /* most buckets kept per histogram */
#define SNMP_ORIGIN_QUIET_S 10 /* error-free seconds before "ok" again */

enum snmp_origin_state { SNMP_ORIGIN_OK = 1, SNMP_ORIGIN_FAILING = 2 };
enum snmp_cache_state { SNMP_CACHE_ACTIVE = 1, SNMP_CACHE_PASSTHROUGH = 2 };
/* hlCacheRestoreState: the background restore of a warm start (stats restore_state) */
enum snmp_restore_state {
	SNMP_RESTORE_NONE = 1,
	SNMP_RESTORE_RUNNING = 2,
	SNMP_RESTORE_DONE = 3,
	SNMP_RESTORE_STOPPED = 4
};

/*
 * hlDiskAluaState: this gateway's ALUA group state for a disk, the SPC-4
 * asymmetric access state codes, plus one value for a disk that only this
 * gateway serves (no ownership: always accessible, never moves).
 */
enum snmp_alua_state {
	SNMP_ALUA_ACTIVE_OPTIMIZED = 0x0,
	SNMP_ALUA_ACTIVE_NON_OPTIMIZED = 0x1,
	SNMP_ALUA_STANDBY = 0x2,
	SNMP_ALUA_UNAVAILABLE = 0x3,
	SNMP_ALUA_OFFLINE = 0xe,
	SNMP_ALUA_TRANSITIONING = 0xf,
	SNMP_ALUA_NOT_SHARED = 255,
};

struct snmp_disk {
	uint32_t index; /* hlDiskIndex: snmp_name_index() of name, unique in the snapshot */
	char *name, *origin, *cache; /* cache: "" without one */
	uint64_t size;
	uint32_t block_size;
	bool read_only;
	int origin_state; /* enum snmp_origin_state, set by snmp_watch_update */
	uint64_t read_cmds, write_cmds, other_cmds, read_bytes, write_bytes, errors;
	uint64_t hits, partial_hits, misses, bytes_from_cache, bytes_from_origin;
	uint32_t hit_ratio;                                /* hundredths of a percent */
	uint32_t read_p50, read_p99, write_p50, write_p99; /* microseconds */
	unsigned n_lat;                                    /* buckets in read_lat / write_lat */
	uint64_t read_lat[SNMP_LAT_BUCKETS], write_lat[SNMP_LAT_BUCKETS];
	/* ownership between gateways ("ownership" in stats; absent: not shared) */
	int alua;             /* enum snmp_alua_state */
	uint32_t owner_gw;    /* the owner's gateway id as last seen, 0: none known */
	uint32_t owner_epoch; /* the owner's epoch, saturated at UINT32_MAX */
	uint64_t owner_moves; /* times this gateway gained or lost the disk */
	uint64_t takeovers;   /* of those: forced takeovers of a silent owner */
	/* the warm standby (docs/gateways.md): hot set blocks, held, yet to read; pre-reads */
	uint64_t shadow_hot, shadowed, shadow_behind, shadow_reads, shadow_bytes;
};

struct snmp_cache {
	uint32_t index;
	char *name, *device, *admission;
	uint64_t size, used;
	uint32_t block_size;
	int state; /* enum snmp_cache_state */
	uint64_t read_reqs, hits, misses, admissions, rejections, evictions;
	uint64_t dev_bytes_written, bytes_from_cache, bytes_from_origin, dev_errors;
	uint32_t hit_ratio;
	uint32_t write_ratio;  /* hundredths of a percent of an admit-all cache's writes */
	uint32_t write_budget; /* percent */
	/* health (hlCacheGroup2): what was dropped or retried, and the warm start's restore */
	uint64_t invalidations, fills_dropped, orphan_drops, origin_errors, hit_retries;
	uint64_t hit_streams, passthrough_ios, bypass_reads, restore_pages_left;
	int restore_state; /* enum snmp_restore_state */
};

struct snmp_iscsi_session {
	uint32_t tsih;
	char *initiator, *isid, *target, *portal, *peer;
	int64_t since; /* unix seconds */
	uint32_t tpgt;
};

/* An iSCSI target node (ISCSI-MIB iscsiNodeAttributesTable). */
struct snmp_node {
	uint32_t index; /* iscsiNodeIndex: snmp_name_index() of the IQN, unique */
	char *name, *alias;
};

/* A listening portal (ISCSI-MIB iscsiPortalAttributesTable). */
struct snmp_portal {
	uint32_t index; /* iscsiPortalIndex: snmp_name_index() of "ADDR:PORT" */
	char *text;     /* as configured, "ADDR:PORT" or "[ADDR]:PORT" */
	int addr_type;  /* InetAddressType: ipv4(1), ipv6(2), dns(16) */
	unsigned char addr[16];
	size_t addr_len; /* 4, 16, or strlen of the name for dns */
	char *host;      /* the address part as text */
	uint32_t port;
};

/* One row of hlDiskLatencyTable: a (disk, bucket) pair. */
struct snmp_lat_row {
	const struct snmp_disk *disk;
	uint32_t bucket; /* 1-based */
};

struct snmp_snapshot {
	bool reachable;
	char *version;
	uint32_t n_sessions_total; /* "sessions" (may exceed n_sessions if the list is cut) */
	uint64_t auth_failures;    /* iscsi.auth_failures: wrong CHAP responses */
	uint64_t auth_throttled;   /* iscsi.auth_throttled: refused unchecked in a back-off */
	/* write_buffers: the budget of unfinished WRITE data (hlWriteBuffer*) */
	uint64_t wb_limit, wb_held, wb_peak, wb_waiting, wb_deferred, wb_task_set_full;
	/* ... its per-connection and per-source shares and what closed (hlAgentGroup3) */
	uint64_t wb_conn_limit, wb_waiting_bytes, wb_window_closed;
	uint64_t wb_source_limit, wb_sources, wb_source_capped, wb_closed_slow, wb_closed_no_data;
	/* scratch_buffers: the per-command scratch buffer budget (hlAgentGroup4) */
	uint64_t scratch_limit, scratch_used, scratch_peak, scratch_refused;
	/* iscsi: connections, logins and the admission limits' refusals (hlAgentGroup3) */
	uint64_t logins, login_failures, connections, pending_logins;
	uint64_t pending_evicted, refused_pending, refused_sessions, accept_paused;
	int64_t connected_at; /* unix seconds: when the subagent last connected to hotlund */
	size_t n_disks, n_caches, n_sessions, n_lat;
	struct snmp_disk *disks;             /* sorted by index */
	struct snmp_cache *caches;           /* sorted by index */
	struct snmp_iscsi_session *sessions; /* sorted by tsih */
	struct snmp_lat_row *lat;            /* sorted by (disk index, bucket) */
	size_t n_nodes, n_portals;
	struct snmp_node *nodes;     /* sorted by index */
	struct snmp_portal *portals; /* sorted by index */
};

/** The stable table index of a name: 31-bit FNV-1a, 0 becomes 1. */
uint32_t snmp_name_index(const char *name);

/**
 * Build a snapshot from the control socket's replies (all borrowed):
 * `stats` is the result of {"cmd":"stats"}, `version` the result of
 * {"cmd":"version"} (may be NULL), `cache_conf` an object mapping each
 * cache's name to the result of {"cmd":"get","args":{"path":"/caches/NAME"}}
 * (may be NULL or miss entries). Unknown members are ignored, missing ones
 * read as 0 / "", so an older or newer hotlund still gives a snapshot.
 * On success *out is filled (free with snmp_snapshot_free) and 0 returned;
 * -EPROTO when `stats` is not an object, -ENOMEM.
 */
int snmp_snapshot_build(json_t *stats, json_t *version, json_t *cache_conf,
                        struct snmp_snapshot *out);

/**
 * Add the iSCSI instance's nodes and portals (for the ISCSI-MIB tables) to
 * a built snapshot, from {"cmd":"get","args":{"path":"/"}} (`global`, for
 * its "portal" list) and an object mapping each target's IQN to the result
 * of {"cmd":"get","args":{"path":"/iscsi/IQN"}} (for its alias); both
 * borrowed, either may be NULL. @return 0 or -ENOMEM (the snapshot keeps
 * what it had).
 */
int snmp_snapshot_add_iscsi(struct snmp_snapshot *s, json_t *global, json_t *targets);

/** The iscsiNodeIndex of target `iqn` in `s`, 0 when it has none (discovery sessions). */
uint32_t snmp_node_index(const struct snmp_snapshot *s, const char *iqn);

/** Free what a snapshot owns and zero it (safe on a zeroed snapshot). */
void snmp_snapshot_free(struct snmp_snapshot *s);

/** Upper bound (exclusive, us) of histogram bucket b (0-based) of n; UINT32_MAX for the last. */
uint32_t snmp_lat_bound(unsigned b, unsigned n);

/** The bound of the bucket holding quantile q (0..1) of hist[0..n); 0 when empty. */
uint32_t snmp_lat_quantile(const uint64_t *hist, unsigned n, double q);

/* ---- the watcher: notifications from changes between polls ---- */

enum snmp_event {
	SNMP_EV_CACHE_FAILED,
	SNMP_EV_CACHE_RECOVERED,
	SNMP_EV_ORIGIN_LOST,
	SNMP_EV_ORIGIN_RECOVERED,
	SNMP_EV_ALUA_CHANGED, /* a disk's alua differs from the last poll's */
};

struct snmp_watch_item {
	char *name;
	uint64_t errors;     /* disks: last hlDiskErrors seen */
	double last_error_s; /* disks: when errors last grew */
	int state;           /* disks: origin state; caches: cache state */
	int alua;            /* disks: last hlDiskAluaState seen */
	bool seen;           /* present in the latest snapshot */
};

struct snmp_watch {
	struct snmp_watch_item *disks, *caches;
	size_t n_disks, n_caches;
};

/** Called once per change; `row` is a struct snmp_disk or snmp_cache of the new snapshot. */
typedef void (*snmp_event_fn)(void *ctx, enum snmp_event ev, const void *row);

/**
 * Compare snapshot `s` (a reachable one) with what the watcher remembers,
 * at time `now_s` (seconds, any monotonic origin): set each disk's
 * origin_state and call `fn` for each state change (origin state, ALUA
 * state). A disk seen for the first time starts ok with its current error
 * count and ALUA state as the baseline; a
 * cache seen for the first time starts active (so a cache already in
 * pass-through is reported once). Items gone from `s` are forgotten.
 * @return 0 or -ENOMEM (then nothing is reported).
 */
int snmp_watch_update(struct snmp_watch *w, struct snmp_snapshot *s, double now_s, snmp_event_fn fn,
                      void *ctx);

void snmp_watch_free(struct snmp_watch *w);

/* ---- net-snmp side (snmp_agent.c) ---- */

/**
 * Register the HOTLUN-MIB objects, and the ISCSI-MIB ones when `iscsi_mib`;
 * they serve *cur (caller keeps). @return 0, -ENOMEM, or -EEXIST when the
 * agent library refused a registration.
 */
int snmp_agent_register(struct snmp_snapshot *const *cur, const unsigned *poll_ms, bool iscsi_mib);

/** Send the notification for `ev` about `row` of the current snapshot through the master. */
void snmp_agent_notify(void *ctx, enum snmp_event ev, const void *row);

#endif
