/*
 * caches.c - the daemon's read caches: one struct hl_cache per [cache NAME]
 * section, opened before the disks that use it, stacked on a disk's origin
 * (above the throttle), closed after every logical unit is gone; and their
 * counters as JSON for the control socket's "stats" command.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/daemon_internal.h"
#include "hotlun/cache_engine.h"
#include "hotlun/event.h"
#include "hotlun/log.h"
#include "hotlun/util.h"

struct cache_rt {
	struct cache_rt *next;
	struct hl_conf_cache conf; /* strings owned */
	struct hl_cache *c;
	char **disks; /* names attached (for stats) */
	size_t n_disks;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER; /* guards g_caches */
static struct cache_rt *g_caches;

static struct cache_rt *find(const char *name)
{
	for (struct cache_rt *r = g_caches; r; r = r->next)
		if (!strcmp(r->conf.name, name))
			return r;
	return NULL;
}

static void rt_free(struct cache_rt *r)
{
	free(r->conf.name);
	free(r->conf.device);
	free(r->conf.admission);
	free(r->conf.write_policy);
	for (size_t i = 0; i < r->n_disks; i++)
		free(r->disks[i]);
	free(r->disks);
	free(r);
}

/*
 * Say where the cache device's completions interrupt, beside where the
 * reactors run: a hit completes on those CPUs (cache_irqs.c).
 */
static void log_irq_cpus(const struct hl_conf *conf, const struct hl_conf_cache *k)
{
	char cpus[256];

	if (daemon_cache_irq_cpus("/sys", "/proc", k->device, cpus, sizeof(cpus)))
		return;
	HL_NOTICE("daemon",
	          "cache %s: %s's device interrupts CPUs %s; reactors %s%s (hotlun.conf(5) cpus, "
	          "docs/service.md)",
	          k->name, k->device, cpus, conf->cpus ? "on CPUs " : "unpinned",
	          conf->cpus ? conf->cpus : "");
}

static int open_one(const struct hl_conf *conf, const struct hl_conf_cache *k, char *err,
                    size_t errlen)
{
	struct hl_cache_config cfg;
	struct cache_rt *r;
	char *map = NULL;
	int rc;

	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->conf.name = strdup(k->name);
	r->conf.device = strdup(k->device);
	r->conf.admission = k->admission ? strdup(k->admission) : NULL;
	r->conf.write_policy = k->write_policy ? strdup(k->write_policy) : NULL;
	r->conf.size = k->size;
	r->conf.block_size = k->block_size;
	r->conf.update_buffer = k->update_buffer;
	r->conf.update_buffer_set = k->update_buffer_set;
	r->conf.write_budget = k->write_budget;
	r->conf.write_budget_set = k->write_budget_set;
	if (!r->conf.name || !r->conf.device || (k->admission && !r->conf.admission) ||
	    (k->write_policy && !r->conf.write_policy) ||
	    (conf->state_dir && asprintf(&map, "%s/cache-%s.map", conf->state_dir, k->name) < 0)) {
		rt_free(r);
		return -ENOMEM;
	}
	memset(&cfg, 0, sizeof(cfg));
	cfg.name = k->name;
	cfg.device = k->device;
	cfg.size = k->size;
	cfg.block_size = k->block_size;
	cfg.admission = k->admission;
	cfg.write_policy = k->write_policy;
	if (k->update_buffer_set)
		cfg.update_buffer =
		    k->update_buffer ? k->update_buffer : HL_CACHE_UPDATE_BUFFER_OFF;
	cfg.write_budget =
	    daemon_cache_write_budget(k) ? daemon_cache_write_budget(k) : HL_CACHE_WRITE_BUDGET_OFF;
	cfg.map_path = map; /* NULL: beside the device */
	rc = hl_cache_open(&cfg, &r->c);
	free(map);
	if (rc) {
		rt_free(r);
		return daemon_fail(err, errlen, rc, "cache %s: cannot open %s: %s", k->name,
		                   k->device, strerror(-rc));
	}
	r->next = g_caches;
	g_caches = r;
	log_irq_cpus(conf, k);
	return 0;
}

/*
 * Do a and b (origin URIs or cache devices) name the same data, as far as
 * their text shows? The origin layer keys each (hl_origin_alias_key: a file
 * by device and inode, an iscsi:// LUN by portal, target and LUN, ...); a
 * key that does not fit compares by the text itself.
 */
static bool same_origin(const char *a, const char *b)
{
	char ka[HL_ORIGIN_ID_MAX], kb[HL_ORIGIN_ID_MAX];

	if (hl_origin_alias_key(a, ka, sizeof(ka)) || hl_origin_alias_key(b, kb, sizeof(kb)))
		return strcmp(a, b) == 0;
	return strcmp(ka, kb) == 0;
}

/* A cache device must not be another cache's device or a disk's origin. */
static int check_device(const struct hl_conf *conf, const struct hl_conf_cache *k, char *err,
                        size_t errlen)
{
	for (size_t j = 0; j < conf->n_caches; j++) {
		const struct hl_conf_cache *o = &conf->caches[j];
		if (o != k && same_origin(o->device, k->device))
			return daemon_fail(err, errlen, -EINVAL,
			                   "cache %s: device %s is also cache %s's device", k->name,
			                   k->device, o->name);
	}
	for (size_t j = 0; j < conf->n_disks; j++) {
		if (same_origin(conf->disks[j].origin, k->device))
			return daemon_fail(err, errlen, -EINVAL,
			                   "cache %s: device %s is disk %s's origin", k->name,
			                   k->device, conf->disks[j].name);
	}
	return 0;
}

/*
 * Two disks on one origin, one of them cached and the other writable: the
 * cache keys blocks by disk, so a write through the other disk never drops
 * them and the cached disk would serve the old bytes (ARCHITECTURE
 * invariant 1). Read-only or uncached views of one origin stay allowed.
 */
static bool alias_stale(const struct hl_conf_disk *a, const struct hl_conf_disk *b)
{
	return (a->cache && !b->read_only) || (b->cache && !a->read_only);
}

/* *line (if given): the line of the disk whose origin is refused. */
static int check_aliases(const struct hl_conf *conf, int *line, char *err, size_t errlen)
{
	for (size_t i = 0; i < conf->n_disks; i++) {
		const struct hl_conf_disk *a = &conf->disks[i];
		for (size_t j = 0; j < i; j++) {
			const struct hl_conf_disk *b = &conf->disks[j];
			char shown[2200]; /* credentials masked, as runtime.c shows origins */
			if (!alias_stale(a, b) || !same_origin(a->origin, b->origin))
				continue;
			hl_uri_redact(a->origin, false, shown, sizeof(shown));
			if (line)
				*line = a->origin_line ? a->origin_line : a->line;
			return daemon_fail(err, errlen, -EINVAL,
			                   "disk %s: origin %s is also disk %s's origin, and %s "
			                   "is cached: a write through one would leave the cache "
			                   "stale",
			                   a->name, shown, b->name, a->cache ? a->name : b->name);
		}
	}
	return 0;
}

int daemon_alias_check(const struct hl_conf_disk *disk, const char *data_id,
                       const struct hl_conf_disk *other, const char *other_id, char *err,
                       size_t errlen)
{
	char shown[2200];

	if (!*data_id || strcmp(data_id, other_id) || !alias_stale(disk, other))
		return 0;
	hl_uri_redact(disk->origin, false, shown, sizeof(shown));
	return daemon_fail(
	    err, errlen, -EINVAL,
	    "disk %s: origin %s is disk %s's origin under another name (%s), and %s is "
	    "cached: a write through one would leave the cache stale",
	    disk->name, shown, other->name, data_id, disk->cache ? disk->name : other->name);
}

int daemon_caches_check(const struct hl_conf *conf, int *line, char *err, size_t errlen)
{
	int rc = check_aliases(conf, line, err, errlen);

	for (size_t i = 0; i < conf->n_caches && !rc; i++) {
		const struct hl_conf_cache *k = &conf->caches[i];
		rc = check_device(conf, k, err, errlen);
		if (rc)
			*line = k->device_line ? k->device_line : k->line;
	}
	return rc;
}

int daemon_caches_open(const struct hl_conf *conf, char *err, size_t errlen)
{
	int rc = check_aliases(conf, NULL, err, errlen);

	if (rc)
		return rc;
	pthread_mutex_lock(&g_lock);
	for (size_t i = 0; i < conf->n_caches && !rc; i++) {
		const struct hl_conf_cache *k = &conf->caches[i];
		struct cache_rt *r = find(k->name);
		if (r) {
			if (!daemon_str_eq(r->conf.device, k->device) || r->conf.size != k->size ||
			    r->conf.block_size != k->block_size)
				rc = daemon_fail(
				    err, errlen, -EINVAL,
				    "cache %s: device, size and block_size change only with a "
				    "restart",
				    k->name);
			continue; /* the rest: daemon_caches_apply */
		}
		rc = check_device(conf, k, err, errlen);
		if (!rc)
			rc = open_one(conf, k, err, errlen);
	}
	pthread_mutex_unlock(&g_lock);
	return rc;
}

/* Replace *dst with a copy of src (NULL allowed). @return false without memory. */
static bool set_str(char **dst, const char *src)
{
	char *n = src ? strdup(src) : NULL;

	if (src && !n)
		return false;
	free(*dst);
	*dst = n;
	return true;
}

/* A string setting of running cache r: *cur becomes want through set() if they differ. */
static int apply_str(struct cache_rt *r, const char *key, char **cur, const char *want,
                     int (*set)(struct hl_cache *, const char *), char *err, size_t errlen)
{
	int e;

	if (daemon_str_eq(*cur, want))
		return 0;
	e = set(r->c, want);
	if (!e && !set_str(cur, want))
		e = -ENOMEM;
	if (e)
		return daemon_fail(err, errlen, e, "cache %s: %s %s: %s", r->conf.name, key,
		                   want ? want : "(default)", strerror(-e));
	return 0;
}

int daemon_caches_apply(const struct hl_conf *conf, char *err, size_t errlen)
{
	int rc = 0;

	pthread_mutex_lock(&g_lock);
	for (size_t i = 0; i < conf->n_caches; i++) {
		const struct hl_conf_cache *k = &conf->caches[i];
		struct cache_rt *r = find(k->name);
		int e;

		if (!r)
			continue;
		if (daemon_cache_update_buffer(&r->conf) != daemon_cache_update_buffer(k)) {
			e = hl_cache_set_update_buffer(r->c, daemon_cache_update_buffer(k));
			if (e) {
				rc = daemon_fail(err, errlen, e, "cache %s: update_buffer: %s",
				                 k->name, strerror(-e));
			} else {
				r->conf.update_buffer = k->update_buffer;
				r->conf.update_buffer_set = k->update_buffer_set;
			}
		}
		if (daemon_cache_write_budget(&r->conf) != daemon_cache_write_budget(k)) {
			e = hl_cache_set_write_budget(r->c, daemon_cache_write_budget(k));
			if (e) {
				rc = daemon_fail(err, errlen, e, "cache %s: write_budget: %s",
				                 k->name, strerror(-e));
			} else {
				r->conf.write_budget = k->write_budget;
				r->conf.write_budget_set = k->write_budget_set;
			}
		}
		e = apply_str(r, "write_policy", &r->conf.write_policy, k->write_policy,
		              hl_cache_set_write_policy, err, errlen);
		rc = e ? e : rc;
		e = apply_str(r, "admission", &r->conf.admission, k->admission,
		              hl_cache_set_admission, err, errlen);
		rc = e ? e : rc;
	}
	pthread_mutex_unlock(&g_lock);
	return rc;
}

int daemon_caches_disown(const struct hl_conf_disk *disk, struct hl_origin *origin, char *err,
                         size_t errlen)
{
	int rc = 0;

	if (disk->read_only)
		return 0; /* its reads change nothing */
	pthread_mutex_lock(&g_lock);
	for (struct cache_rt *r = g_caches; r && !rc; r = r->next) {
		if (disk->cache && !strcmp(r->conf.name, disk->cache))
			continue; /* its own: hl_cache_attach (its other names too) */
		rc = hl_cache_disown(r->c, origin);
		if (rc == -ETIMEDOUT)
			rc = daemon_fail(err, errlen, rc,
			                 "disk %s: cache %s cannot forget what it cached of this "
			                 "origin: its map file does not answer (its file system is "
			                 "hung?); see the log",
			                 disk->name, r->conf.name);
		else if (rc)
			rc = daemon_fail(err, errlen, rc,
			                 "disk %s: cache %s cannot forget what it cached of this "
			                 "origin: %s",
			                 disk->name, r->conf.name, strerror(-rc));
	}
	pthread_mutex_unlock(&g_lock);
	return rc;
}

int daemon_attach_cache(const struct hl_conf_disk *disk, struct hl_origin **origin, char *err,
                        size_t errlen)
{
	struct hl_origin *wrapped;
	struct cache_rt *r;
	char **names;
	int rc;

	pthread_mutex_lock(&g_lock);
	r = find(disk->cache);
	if (!r) {
		pthread_mutex_unlock(&g_lock);
		return daemon_fail(err, errlen, -ENOENT, "disk %s: cache '%s' is not open",
		                   disk->name, disk->cache);
	}
	rc = hl_cache_attach(r->c, disk->name, disk->cache_quota, *origin, &wrapped);
	if (rc) {
		pthread_mutex_unlock(&g_lock);
		return daemon_fail(
		    err, errlen, rc, "disk %s: cache %s: %s", disk->name, disk->cache,
		    rc == -EEXIST   ? "the disk is still attached (restart to change it)"
		    : rc == -ENOSPC ? "cache_quota does not fit in the cache"
		    : rc == -ETIMEDOUT
		        ? "the cache's map file or device does not answer (its file system or "
		          "SSD is hung?): not attached; see the log"
		        : strerror(-rc));
	}
	*origin = wrapped;
	for (size_t i = 0; i < r->n_disks; i++)
		if (!strcmp(r->disks[i], disk->name))
			goto out;
	names = realloc(r->disks, (r->n_disks + 1) * sizeof(*names));
	if (names) {
		r->disks = names;
		r->disks[r->n_disks] = strdup(disk->name);
		if (r->disks[r->n_disks])
			r->n_disks++;
	}
out:
	pthread_mutex_unlock(&g_lock);
	return 0;
}

unsigned daemon_caches_drain(unsigned timeout_ms)
{
	uint64_t t0 = hl_now_ns();
	unsigned left = 0;

	pthread_mutex_lock(&g_lock);
	for (struct cache_rt *r = g_caches; r; r = r->next) {
		uint64_t ms = (hl_now_ns() - t0) / 1000000;
		unsigned rest = ms < timeout_ms ? timeout_ms - (unsigned)ms : 0;

		left += (unsigned)hl_cache_drain(r->c, rest);
	}
	pthread_mutex_unlock(&g_lock);
	return left;
}

void daemon_caches_quiesce(void)
{
	pthread_mutex_lock(&g_lock);
	for (struct cache_rt *r = g_caches; r; r = r->next)
		hl_cache_quiesce(r->c);
	pthread_mutex_unlock(&g_lock);
}

void daemon_caches_close(void)
{
	pthread_mutex_lock(&g_lock);
	while (g_caches) {
		struct cache_rt *r = g_caches;
		g_caches = r->next;
		hl_cache_close(r->c);
		rt_free(r);
	}
	pthread_mutex_unlock(&g_lock);
}

/* ---- stats ---- */

static json_t *u64_array(const uint64_t *v, size_t n)
{
	json_t *a = json_array();

	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, json_integer((json_int_t)v[i]));
	return a;
}

static json_t *stats_json(const struct hl_cache_engine_stats *s, bool whole)
{
	const struct hl_cache_stats *k = &s->core;
	json_t *o = json_object();
	json_t *bounds = json_array();

#define PUT(name, v) json_object_set_new(o, name, json_integer((json_int_t)(v)))
	PUT("read_reqs", k->read_reqs);
	PUT("read_hits", k->read_hits);
	PUT("read_partial", k->read_partial);
	PUT("read_misses", k->read_misses);
	PUT("read_bypass", k->read_bypass);
	PUT("bytes_read_bypass", k->bytes_read_bypass);
	PUT("admissions", k->admissions);
	PUT("rejections", k->rejections);
	PUT("evictions", k->evictions);
	PUT("fills_dropped", k->fills_dropped);
	PUT("write_reqs", k->write_reqs);
	PUT("write_updates", k->write_updates);
	PUT("invalidations", k->invalidations);
	PUT("bytes_read", k->bytes_read);
	PUT("bytes_read_cache", k->bytes_read_cache);
	PUT("bytes_read_origin", k->bytes_read_origin);
	PUT("bytes_read_ram", k->bytes_read_ram);
	PUT("bytes_written", k->bytes_written);
	PUT("bytes_cache_write", k->bytes_cache_write);
	PUT("bytes_cache_update", k->bytes_cache_update);
	PUT("window_fills", k->window_fills);
	PUT("dev_errors", s->dev_errors);
	PUT("origin_errors", s->origin_errors);
	PUT("hit_retries", s->hit_retries);
	PUT("hit_streams", s->hit_streams);
	PUT("passthrough_ios", s->passthrough_ios);
	PUT("promotions", s->promotions);
	PUT("block_size", s->block_size);
	PUT("recommended_block_size", s->recommended_block_size);
	if (!whole) {
		/* what the last start kept of this disk's blocks (docs/cache-engine.md) */
		PUT("warm_kept", s->warm_kept);
		PUT("warm_dropped", s->warm_dropped);
		json_object_set_new(o, "warm_start", json_string(s->warm_start));
	}
	if (whole) {
		PUT("update_buffer_writebacks", s->ub_writebacks);
		PUT("update_buffer_bytes", s->ub_bytes);
		PUT("meta_syncs", s->meta_syncs);
		PUT("orphan_drops", s->orphan_drops);
		PUT("meta_waits", s->meta_waits);
		PUT("read_lock_wait_max_us", s->read_lock_wait_max_us);
		PUT("read_lock_waits_over_1ms", s->read_lock_waits_over_1ms);
		PUT("nslots", s->nslots);
		PUT("used_slots", s->used_slots);
		PUT("window_slots", s->window_slots);
		PUT("window_used_slots", s->window_used_slots);
		PUT("inflight", s->inflight);
		PUT("write_budget_pct", s->write_budget_pct);
		json_object_set_new(o, "write_ratio", json_real(s->write_ratio));
		json_object_set_new(o, "write_budget_open", json_boolean(s->write_budget_open));
		json_object_set_new(o, "meta_dirty", json_boolean(s->meta_dirty));
		/* the lazy restore of the slot records (docs/cache-format.md) */
		static const char *const phases[] = {"none", "running", "done", "stopped"};
		json_object_set_new(o, "restore_state",
		                    json_string(phases[s->restore_phase < 4 ? s->restore_phase : 0]));
		PUT("restore_pages", s->restore_pages);
		PUT("restore_pages_left", s->restore_pages_left);
		PUT("restore_restored", s->restore_restored);
		PUT("restore_dropped", s->restore_dropped);
		PUT("restore_written", s->restore_written);
		PUT("restore_ms", s->restore_ms);
		PUT("restore_max_lock_us", s->restore_max_lock_us);
	}
#undef PUT
	json_object_set_new(
	    o, "hit_ratio",
	    json_real(k->bytes_read ? (double)k->bytes_read_cache / (double)k->bytes_read : 0.0));
	json_object_set_new(o, "passthrough", json_boolean(s->passthrough));
	json_object_set_new(o, "read_hit_latency_log2_us",
	                    u64_array(s->read_hit_lat, HL_CACHE_LAT_BUCKETS));
	json_object_set_new(o, "read_miss_latency_log2_us",
	                    u64_array(s->read_miss_lat, HL_CACHE_LAT_BUCKETS));
	for (size_t i = 0; i < HL_CACHE_SIZE_BUCKETS; i++)
		json_array_append_new(bounds, json_integer(i + 1 < HL_CACHE_SIZE_BUCKETS
		                                               ? (json_int_t)hl_cache_size_bounds[i]
		                                               : -1));
	json_object_set_new(o, "origin_read_latency_log2_us",
	                    u64_array(s->origin_read_lat, HL_ORIGIN_LAT_BUCKETS));
	json_object_set_new(o, "origin_write_latency_log2_us",
	                    u64_array(s->origin_write_lat, HL_ORIGIN_LAT_BUCKETS));
	json_object_set_new(o, "origin_read_ns", json_integer((json_int_t)s->origin_read_ns));
	json_object_set_new(o, "origin_write_ns", json_integer((json_int_t)s->origin_write_ns));
	json_object_set_new(o, "io_length_bounds", bounds);
	json_object_set_new(o, "read_io_length", u64_array(s->read_size, HL_CACHE_SIZE_BUCKETS));
	json_object_set_new(o, "write_io_length", u64_array(s->write_size, HL_CACHE_SIZE_BUCKETS));
	return o;
}

json_t *daemon_cache_stats_json(void)
{
	json_t *all = json_object();
	struct hl_cache_engine_stats s;

	pthread_mutex_lock(&g_lock);
	for (struct cache_rt *r = g_caches; r; r = r->next) {
		json_t *o, *disks = json_object();
		if (hl_cache_get_stats(r->c, NULL, &s))
			continue;
		o = stats_json(&s, true);
		json_object_set_new(o, "device", json_string(r->conf.device));
		for (size_t i = 0; i < r->n_disks; i++)
			if (!hl_cache_get_stats(r->c, r->disks[i], &s))
				json_object_set_new(disks, r->disks[i], stats_json(&s, false));
		json_object_set_new(o, "disks", disks);
		json_object_set_new(all, r->conf.name, o);
	}
	pthread_mutex_unlock(&g_lock);
	return all;
}

json_t *daemon_shadow_json(struct hl_origin *cached)
{
	struct hl_cache_shadow_stats st;

	if (!cached || hl_cache_shadow_stats(cached, &st))
		return NULL;
	return json_pack("{s:b, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:s}",
	                 "supported", st.supported, "role", st.standby ? "standby" : "owner",
	                 "rate", (json_int_t)st.rate, "hot_blocks", (json_int_t)st.hot_blocks,
	                 "shadowed", (json_int_t)st.shadowed, "behind", (json_int_t)st.behind,
	                 "origin_reads", (json_int_t)st.origin_reads, "origin_bytes",
	                 (json_int_t)st.origin_bytes, "dropped", (json_int_t)st.dropped,
	                 "marks", (json_int_t)st.marks, "publishes", (json_int_t)st.publishes,
	                 "state", st.state);
}
