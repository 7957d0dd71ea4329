/*
 * daemon_internal.h - what the files of the daemon share: the running
 * state (struct daemon), applying a configuration to it, the control
 * commands, the state folder and stable disk identities.
 *
 * Threads: start-up and shutdown run on the main thread; once the control
 * reactor runs, every change (control requests, SIGHUP reload) runs on the
 * control reactor's thread, so struct daemon needs no lock of its own,
 * except the closes of removed disks (closing.c): their threads own the
 * disks they close, and close_job is guarded by close_mu.
 */
#ifndef HL_DAEMON_INTERNAL_H
#define HL_DAEMON_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "daemon/caches.h"
#include "hotlun/conf.h"
#include "hotlun/iscsi.h"
#include "hotlun/origin.h"
#include "hotlun/owner.h"
#include "hotlun/scsi.h"
#include "hotlun/util.h"

struct hl_reactor;
struct hl_iscsi_server;
struct hl_iscsi_chap;
struct hl_ctl_server;
struct hl_ctl_later;
struct close_job;

/** One opened disk: its LU (which owns the origin) and what it was opened with. */
struct disk_rt {
	struct hl_list link;        /* daemon.disks or daemon.retired_disks */
	struct hl_conf_disk conf;   /* deep copy of the section it was opened from */
	struct hl_lu *lu;
	struct hl_origin_stats *counters; /* owned by the counting origin inside lu */
	struct hl_owner *owner;     /* several gateways ([global] gateway): who owns it, or NULL */
	struct hl_origin *cached;   /* the cache's wrapper inside lu, or NULL (owner hooks) */
	struct hl_origin *pr_backend; /* keeps lu's shared reservation record (pr_*), or NULL */
	char data_id[HL_ORIGIN_ID_MAX]; /* what its origin names (hl_origin_data_id), "": none */
	/* daemon_owners_handover's, here so that a stop allocates nothing */
	pthread_t handover_thread;
	bool handover_threaded;
	unsigned handover_wait_ms;
};


/** One target's LUN map, given to the iSCSI server (which keeps pointing at it). */
struct target_rt {
	struct hl_list link;        /* daemon.targets or daemon.retired_targets */
	char *name;
	struct hl_scsi_lun_map *map;
};

struct daemon {
	struct hl_conf *conf;       /* the configuration that runs now */
	char *config_path;          /* where saveconfig writes and SIGHUP reads */
	uint64_t install_id;
	struct hl_list disks;
	struct hl_list targets;
	/* removed while sessions might still have commands on them: freed at exit */
	struct hl_list retired_disks;
	struct hl_list retired_targets;
	/* disks a change removed, handed to closing.c when the change returns */
	struct hl_list closing;
	/* the closes under way (closing.c): set and cleared on the control reactor */
	struct close_job *close_job; /* guarded by close_mu (the stop waits on close_cv) */
	pthread_mutex_t close_mu;
	pthread_cond_t close_cv;
	bool close_stopping; /* close_mu: the stop waits for the closes, no change runs */
	struct hl_reactor **reactors;
	unsigned n_reactors;
	struct hl_reactor *ctl_reactor;
	struct hl_ctl_server *ctl;
	struct hl_iscsi_server *server;
	/* who asked for the change daemon_apply is making, for its log lines */
	char change_by[128];
	/* [global] logout_timeout as it runs: read by the main thread at a planned stop */
	_Atomic unsigned logout_timeout_s;
};

/**
 * Write the printf-style message into err (errlen bytes) and return rc: the
 * one line a failing step of apply, caches or control ends with, e.g.
 * `return daemon_fail(err, errlen, -EINVAL, "no disk %s", name);`.
 */
int daemon_fail(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/** Two optional strings (NULL: unset) are equal: both unset, or both set and the same. */
static inline bool daemon_str_eq(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/**
 * Make the daemon run `next` (always taken: kept as d->conf, or freed when
 * nothing could be applied): opens new disks, adds/changes/removes targets, LUNs, ACLs,
 * CHAP and portals, closes what went away. Checks everything that can fail
 * before changing anything visible. Removing a LUN or target that has
 * sessions is refused (-EBUSY) unless force. @return 0 or -errno with err.
 */
int daemon_apply(struct daemon *d, struct hl_conf *next, bool force, char *err, size_t errlen);

/** Close a disk and free it (its owner, reservations, LU and origin stack). */
void daemon_disk_free(struct disk_rt *rt);

/**
 * A disk daemon_apply took out of every list and map: closed by
 * daemon_closes_start once the change returns (closing.c).
 */
void daemon_disk_close_later(struct daemon *d, struct disk_rt *rt);

/**
 * After a change (its result rc and err): close the disks it removed, each
 * on a thread of its own, all at once. @return 1 when they close in the
 * background: `later` (the change's deferred reply) is answered with rc
 * and err once they are closed, on the control reactor, or, for a SIGHUP
 * (sighup, later NULL), daemon_service_reloaded runs then; 0 when
 * there was nothing to close or it was done in line (answer now; `later`
 * untouched).
 */
int daemon_closes_start(struct daemon *d, struct hl_ctl_later *later, bool sighup, int rc,
                        const char *err);

/** -EBUSY with err while closes of an earlier change run (daemon_apply refuses then), or 0. */
int daemon_closing_busy(struct daemon *d, char *err, size_t errlen);

/** The stop: wait until the closes under way are done (before the control reactor stops). */
void daemon_closes_wait(struct daemon *d);

/** Milliseconds a control connection may stay without a request ([global] control_idle_timeout). */
static inline unsigned daemon_control_idle_ms(const struct hl_conf *c)
{
	return (c->control_idle_timeout < 0 ? HL_CONF_CONTROL_IDLE_DEFAULT
	                                    : (unsigned)c->control_idle_timeout) * 1000u;
}

/** Seconds initiators get to log out on a planned stop ([global] logout_timeout or its default). */
static inline unsigned daemon_logout_timeout(const struct hl_conf *c)
{
	return c->logout_timeout < 0 ? HL_CONF_LOGOUT_TIMEOUT_DEFAULT : (unsigned)c->logout_timeout;
}

/** The scratch buffer budget in bytes ([global] scratch_buffer_limit or its default). */
static inline uint64_t daemon_scratch_limit(const struct hl_conf *c)
{
	return c->scratch_buffer_limit ? c->scratch_buffer_limit : HL_SCSI_SCRATCH_DEFAULT;
}

/** The reactors' busy-poll window in microseconds ([global] poll_us or its default). */
static inline unsigned daemon_poll_us(const struct hl_conf *c)
{
	return c->poll_us < 0 ? HL_CONF_POLL_US_DEFAULT : (unsigned)c->poll_us;
}

/**
 * Do new iSCSI connections send through io_uring? [global] send_uring (default
 * no); the environment's HOTLUN_SEND_URING=1|0 overrides it (tests, A/B runs).
 */
static inline bool daemon_send_uring(const struct hl_conf *c)
{
	const char *e = getenv("HOTLUN_SEND_URING");

	if (e && (*e == '0' || *e == '1'))
		return *e == '1';
	return c->send_uring > 0;
}

/** conf's caps on connections and sessions for the iSCSI server (0: unset, derived). */
static inline void daemon_login_limits(const struct hl_conf *c, struct hl_iscsi_login_limits *out)
{
	out->max_pending_logins = c->max_pending_logins;
	out->max_pending_logins_per_addr = c->max_pending_logins_per_addr;
	out->max_sessions = c->max_sessions;
	out->max_sessions_per_addr = c->max_sessions_per_addr;
}

/** conf's discovery CHAP credentials for the iSCSI server (all zero when unset). */
void daemon_discovery_chap(const struct hl_conf *c, struct hl_iscsi_chap *out);

/** A copy of conf with its globals only: what runs before the first daemon_apply. */
struct hl_conf *daemon_conf_skeleton(const struct hl_conf *conf);

/** Release every runtime object (after the server is gone and reactors stopped). */
void daemon_release(struct daemon *d);

/** Find an open disk by name. */
struct disk_rt *daemon_disk_find(struct daemon *d, const char *name);

/**
 * A planned stop with peers: hand every disk this gateway owns to a peer
 * (hl_owner_handover, all at once), waiting up to wait_ms. Blocking.
 * @return how many disks this gateway owned.
 */
unsigned daemon_owners_handover(struct daemon *d, unsigned wait_ms);

/**
 * The stats object (docs/control.md, "stats"): every disk's and cache's
 * counters, ownership, sessions, the service's budgets. What the control
 * socket's stats command answers and the metrics endpoint renders. Control
 * thread. @return a new reference, or NULL (out of memory).
 */
json_t *daemon_stats(struct daemon *d);

/*
 * The metrics endpoint ([global] metrics_listen, docs/metrics.md), in
 * exporter.c. Its scrapes snapshot daemon_stats on the control reactor.
 */

/** Start it, if configured, once the control reactor runs (posted there; never blocks). */
void daemon_exporter_start(struct daemon *d);

/**
 * A change of the running configuration (daemon_apply, control thread):
 * move or stop the endpoint when metrics_listen changed; a no-op before the
 * control reactor runs. A failure to listen is logged and leaves the
 * endpoint off; the rest of the change stands.
 */
void daemon_exporter_apply(struct daemon *d, const struct hl_conf *cur,
                           const struct hl_conf *next);

/** Stop it: before the control reactor stops. Any thread. */
void daemon_exporter_stop(struct daemon *d);

/** Start the control socket on its own reactor thread. @return 0 or -errno. */
int daemon_control_start(struct daemon *d);
void daemon_control_stop(struct daemon *d);

/**
 * Re-read config_path and apply it (SIGHUP); runs on the control thread.
 * @return true when the disks it removed still close in the background
 * (then daemon_service_reloaded runs once they are closed).
 */
bool daemon_reload(struct daemon *d);

/**
 * Write the running configuration to path atomically (temporary file,
 * fsync, rename), keeping numbered backups path.1 .. path.N of what was
 * there. @return 0 or -errno with err.
 */
int daemon_save_config(const struct hl_conf *conf, const char *path, char *err, size_t errlen);

/**
 * Whether dir is safe for hotlund to create files in by name: every step of
 * its path (as written and resolved) owned by root or hotlund's user, no
 * folder on it writable by group or others unless sticky (dir itself never).
 * @return 0, or -EPERM (or -errno) with the reason in err.
 */
int daemon_dir_check(const char *dir, char *err, size_t errlen);

/**
 * daemon_dir_check on the control socket's folder, logged; missing_ok: a
 * folder that does not exist yet passes (start makes state_dir later).
 * @return 0 or -errno.
 */
int daemon_control_dir_check(const char *path, bool missing_ok);

/**
 * Create state_dir (and parents) if needed and read its install id, making
 * one (random, persisted in state_dir/install-id) on first start.
 * @return 0 or -errno (logged).
 */
int daemon_state_dir_init(const char *state_dir, uint64_t *install_id);

/**
 * The stable identity of a disk: a NAA-6 registered extended designator
 * (16 bytes, VPD 83h) and a unit serial number (VPD 80h). Each is, first
 * found: what the [disk] section sets (conf_naa, conf_serial: validated
 * already); derived from origin_ident (hl_origin_identity: the same on every
 * gateway that serves the same data, e.g. an rbd image); derived from the
 * install id and the disk's name (this gateway only). Stable across
 * restarts and the same on every portal. NULL strings: not set.
 */
void daemon_disk_identity(uint64_t install_id, const char *disk_name, const char *origin_ident,
			  const char *conf_serial, const char *conf_naa, uint8_t naa[16],
			  char serial[33]);

/**
 * Check the files conf names without taking them (preflight.c): local
 * origins exist, are regular files or block devices and hold at least a
 * block; cache devices are regular files or block devices, or can be
 * created, and have room for their size. For --check-config and start-up.
 * @return 0 or -EINVAL with "FILE:LINE: message" in err.
 */
int daemon_preflight(const struct hl_conf *conf, char *err, size_t errlen);

/**
 * Read the configuration file at path into *out (the caller's), after
 * checking who may change it (conf_file.c) on the very file it reads (the
 * open descriptor's fstat): another user's file, one any user may write,
 * or one in a folder (up to /) that another user owns or any user may
 * write (not sticky) is refused; a warning when a group may write the
 * file or a folder, or when the file holds a secret that any user may
 * read. At start, --check-config and each reload.
 * @return 0, or -EPERM (or another -errno, -EINVAL for its content) with
 * err set (naming path).
 */
int daemon_conf_file_load(const char *path, struct hl_conf **out, char *err, size_t errlen);

/** Wrap *origin with the throttle when the [disk] section asks for one. @return 0 or -errno. */
int daemon_wrap_origin(const struct hl_conf_disk *disk, struct hl_origin **origin);

/**
 * The CPUs that take the completion interrupts of the block device holding
 * @path (a cache device: a file or the device itself), as a CPU list
 * ("1", "0-3") in @out; @sys and @proc are where sysfs and procfs are
 * mounted ("/sys", "/proc"; other roots in tests). @return 0, or -ENODEV
 * when there is no such device or it has no MSI interrupts (tmpfs, loop),
 * or -errno of stat. cache_irqs.c.
 */
int daemon_cache_irq_cpus(const char *sys, const char *proc, const char *path, char *out,
                          size_t len);

#endif
