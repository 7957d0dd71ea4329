/*
 * caches.h - the daemon's read caches (src/daemon/caches.c): one cache
 * engine per [cache NAME] section, attached to the disks that name it, and
 * their counters for the control socket. Main thread or the thread that
 * applies configuration; stats from any thread.
 */
#ifndef HL_DAEMON_CACHES_H
#define HL_DAEMON_CACHES_H

#include <jansson.h>
#include <stddef.h>

#include "hotlun/cache.h"
#include "hotlun/conf.h"
#include "hotlun/origin.h"

/** The RAM update buffer a [cache] section asks for, in bytes (0: off). */
static inline uint64_t daemon_cache_update_buffer(const struct hl_conf_cache *k)
{
	return k->update_buffer_set ? k->update_buffer : HL_CACHE_UPDATE_BUFFER_DEFAULT;
}

/** The write budget a [cache] section asks for, in percent (rule 10). */
static inline uint32_t daemon_cache_write_budget(const struct hl_conf_cache *k)
{
	return k->write_budget_set ? k->write_budget : HL_CACHE_WRITE_BUDGET_DEFAULT;
}

/**
 * Open every [cache] section of conf that is not open yet (warm restart or
 * format; blocking). A section already open is refused if its device,
 * size or block_size changed (they need a restart); its other settings are
 * daemon_caches_apply's. Map files live in conf->state_dir. @return 0 or
 * -errno with a message in err.
 */
int daemon_caches_open(const struct hl_conf *conf, char *err, size_t errlen);

/**
 * The checks daemon_caches_open makes on conf's text before it opens
 * anything, for --check-config and start-up (preflight.c): no two disks on
 * one origin (as far as the URIs show) where one is cached and the other
 * can write, no cache device that is another cache's device or a disk's
 * origin. @return 0, or -EINVAL with a message in err and in *line the
 * line of the refused key.
 */
int daemon_caches_check(const struct hl_conf *conf, int *line, char *err, size_t errlen);

/**
 * Give the open caches conf's admission, write_policy and update_buffer
 * (a resized update buffer is written back first: blocking). The last
 * step of a configuration change, when nothing can be refused any more.
 * @return 0 or -errno (-ENOMEM) with a message in err; a setting that
 * failed keeps its old value.
 */
int daemon_caches_apply(const struct hl_conf *conf, char *err, size_t errlen);

/**
 * The open-time half of the alias check that daemon_caches_open does on
 * the URIs' text: disk's origin, opened, names its data data_id
 * (hl_origin_data_id; "" none); other is a disk that is open or about to
 * be, other_id its data_id. Refused when the two are equal and one disk
 * is cached while the other can write: the cache keys blocks by disk, so
 * a write through the other disk would leave it stale. @return 0, or
 * -EINVAL with a message naming both disks in err.
 */
int daemon_alias_check(const struct hl_conf_disk *disk, const char *data_id,
                       const struct hl_conf_disk *other, const char *other_id, char *err,
                       size_t errlen);

/**
 * disk is about to serve origin (after the throttle, not cached yet): unless
 * it is read-only, every open cache but disk->cache forgets its proofs of
 * that origin (hl_cache_disown), so that blocks it cached before never come
 * back after writes it did not see. Blocking. @return 0 or -errno with a
 * message in err (the disk must not open).
 */
int daemon_caches_disown(const struct hl_conf_disk *disk, struct hl_origin *origin, char *err,
                         size_t errlen);

/**
 * Put disk->cache in front of *origin (after the throttle): on success
 * *origin is the cached origin, which owns the one it wraps; on error
 * *origin is unchanged and still the caller's. Blocking. @return 0 or
 * -errno with a message in err.
 */
int daemon_attach_cache(const struct hl_conf_disk *disk, struct hl_origin **origin, char *err,
                        size_t errlen);

/**
 * A clean stop, after the iSCSI server is destroyed and before the reactors
 * stop: every cache's requests still in flight finish (hl_cache_drain),
 * all of them within timeout_ms. @return the requests left (0: drained).
 */
unsigned daemon_caches_drain(unsigned timeout_ms);

/**
 * After the reactors stopped (joined) and before they are destroyed: no
 * cache hands work back to a reactor any more. daemon_caches_close() follows.
 */
void daemon_caches_quiesce(void);

/** Close every cache (clean shutdown: the next start is warm). After every disk is closed. */
void daemon_caches_close(void);

/**
 * Counters of every cache and of each disk attached to it, as a new JSON
 * object {"NAME": {..., "disks": {"DISK": {...}}}} (caller owns it).
 */
json_t *daemon_cache_stats_json(void);

/**
 * A shared disk's warm standby (hl_cache_shadow_stats) as a new JSON object
 * (docs/control.md, "shadow"), or NULL when cached has none.
 */
json_t *daemon_shadow_json(struct hl_origin *cached);

#endif
