/*
 * engine_restore.c - a warm restart that serves at once: the cache's
 * loader thread restores the slot records the page summary marks, in the
 * background, while the disks are served (docs/cache-format.md, "Lazy
 * restore"). It reads up to 1 MiB of record pages without any lock and
 * restores them under the cache lock RESTORE_BATCH pages at a time, so a
 * reactor waits at most one batch (512 records of 4 KiB blocks, ~20 us:
 * the RAM they land on is faulted in and their index lines prefetched
 * before, without the lock; the loader is a real-time thread while it
 * holds it, and gives way to reads that wait: cache_meta.c). The core
 * keeps it safe meanwhile (no slot taken, writes noted and their records
 * dropped; cache_restore.c); the sync makes "restore pending" with the
 * blocks written durable before such a write reaches the origin
 * (cache_meta.c). At the end hl_cache_meta_load_finish syncs and clears
 * that state.
 *
 * HOTLUN_TEST_RESTORE_DELAY_MS (tests only, documented in
 * docs/cache-engine.md): read one record page at a time and sleep that long
 * before each, to make a small restore last long enough to be watched.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache/engine/engine_internal.h"
#include "hotlun/log.h"

#define RESTORE_READ_PAGES 256u /* 1 MiB of record pages per read */
#define RESTORE_BATCH      4u   /* pages restored per hold of the cache lock */

static void publish(struct hl_cache *c)
{
	atomic_store(&c->rs_pages_left, c->rs.pages_left);
	atomic_store(&c->rs_restored, c->rs.restored);
	atomic_store(&c->rs_dropped, c->rs.dropped);
	atomic_store(&c->rs_filtered, c->rs.filtered);
	atomic_store(&c->rs_max_lock_us, c->rs.max_hold_ns / 1000);
}

/*
 * The disks attached while restoring: what they kept (the blocks restored)
 * and dropped (their records the proof at attach, or a write since, had
 * dropped), as an attach before the restore would have said.
 */
static void warm_counts(struct hl_cache *c)
{
	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < c->n_ents; i++) {
		struct map_ent *e = c->ents[i];
		if (!e->warm_lazy)
			continue;
		e->warm_lazy = false;
		e->warm_kept = hl_cache_core_lun_blocks(c->core, e->id);
		e->warm_dropped += hl_cache_core_lun_restore_dropped(c->core, e->id);
		if (e->warm_dropped)
			HL_NOTICE("cache",
			          "cache %s: disk %s: warm start: kept %llu block(s), dropped %llu "
			          "(%s%s)",
			          c->name, e->name, (unsigned long long)e->warm_kept,
			          (unsigned long long)e->warm_dropped, e->warm_cold ? "cold: " : "",
			          e->warm_why);
		else
			HL_INFO("cache", "cache %s: disk %s: warm start: kept %llu block(s) (%s)",
			        c->name, e->name, (unsigned long long)e->warm_kept, e->warm_why);
	}
	pthread_mutex_unlock(&c->lock);
}

/* The longest holds of the cache lock, and what the loader did in them. */
static void log_worst(const struct hl_cache *c)
{
	const struct hl_cache_restore *r = &c->rs;

	HL_NOTICE("cache",
	          "cache %s: restore: the loader's CPU time under the lock %llu us of %llu us "
	          "(held as a real-time thread: %s%s); it gave way to waiting reads %llu time(s), "
	          "%llu us in all",
	          c->name, (unsigned long long)(r->hold_cpu_ns / 1000),
	          (unsigned long long)(r->hold_ns / 1000), r->rt_hold ? "yes" : "no",
	          r->rt_refused ? ", refused by the system: see the warning at its start" : "", (unsigned long long)r->gave_way,
	          (unsigned long long)(r->gave_way_ns / 1000));
	for (unsigned i = 0; i < HL_CACHE_RS_WORST && r->worst[i].wall_ns; i++) {
		const struct hl_cache_rs_hold *h = &r->worst[i];
		HL_NOTICE("cache",
		          "cache %s: restore: hold %u: %llu us under the lock, %llu us of it on the "
		          "CPU, %u+%u page fault(s) (minor+major), %u+%u context switch(es) "
		          "(voluntary+preempted), waited %llu us for the lock, record page %llu",
		          c->name, i + 1, (unsigned long long)(h->wall_ns / 1000),
		          (unsigned long long)(h->cpu_ns / 1000), h->minflt, h->majflt, h->nvcsw,
		          h->nivcsw, (unsigned long long)(h->wait_ns / 1000),
		          (unsigned long long)h->page);
	}
}

/*
 * HOTLUN_TEST_RESTORE_HOLD=PATH (tests only): before its next record page
 * the loader waits while PATH exists, holding no lock, so that a test's
 * checks run while the restore is surely not over however slow the machine.
 */
static void restore_test_hold(struct hl_cache *c)
{
	struct timespec ts = {0, 10000000};

	while (c->rs_hold && access(c->rs_hold, F_OK) == 0 && !atomic_load(&c->rs_stop))
		nanosleep(&ts, NULL);
}

static void restore_run(struct hl_cache *c)
{
	unsigned delay_ms = c->rs_delay_ms;
	int64_t left = 1;
	int rc = 0;

	while (left > 0 && !atomic_load(&c->rs_stop) && !atomic_load(&c->failed)) {
		if (delay_ms) {
			usleep(delay_ms * 1000u);
			if (atomic_load(&c->rs_stop))
				break;
		}
		restore_test_hold(c);
		if (atomic_load(&c->rs_stop))
			break;
		engine_meta_test_hold(c); /* a device read that does not return (tests) */
		/* (throttled for a test: one page per read) */
		left = hl_cache_meta_load_step(c->dev, &c->layout, c->core, &c->rs, &c->lock,
		                               &c->sync_lock, delay_ms ? 1 : RESTORE_READ_PAGES,
		                               RESTORE_BATCH);
		publish(c);
	}
	if (left < 0) {
		engine_dev_error(c, NULL, (int)left);
		atomic_store(&c->rs_phase, HL_CACHE_RESTORE_STOPPED);
		return;
	}
	if (left > 0) {
		/* Stopped (close, or the device failed): hl_cache_meta_close keeps the rules. */
		atomic_store(&c->rs_phase, HL_CACHE_RESTORE_STOPPED);
		return;
	}
	pthread_mutex_lock(&c->sync_lock);
	rc = hl_cache_meta_load_finish(c->dev, &c->layout, c->core, &c->lock);
	pthread_mutex_unlock(&c->sync_lock);
	atomic_fetch_add(&c->changes, 1); /* the dropped records: the next periodic sync */
	if (rc) {
		engine_dev_error(c, NULL, rc);
		atomic_store(&c->rs_phase, HL_CACHE_RESTORE_STOPPED);
		return;
	}
	warm_counts(c);
	atomic_store(&c->rs_ms, engine_now_ms() - c->rs_t0);
	atomic_store(&c->rs_phase, HL_CACHE_RESTORE_DONE);
	HL_NOTICE("cache",
	          "cache %s: %llu block(s) restored (restore done in %.1f s: %llu record page(s) "
	          "read, %llu record(s) dropped, %llu of them written while restoring; the "
	          "cache lock held %llu us on average, at most %llu us, %llu of %llu times over "
	          "1 ms)",
	          c->name, (unsigned long long)c->rs.restored,
	          (double)(engine_now_ms() - c->rs_t0) / 1000.0, (unsigned long long)c->rs.pages,
	          (unsigned long long)c->rs.dropped, (unsigned long long)c->rs.filtered,
	          (unsigned long long)(c->rs.holds ? c->rs.hold_ns / c->rs.holds / 1000 : 0),
	          (unsigned long long)(c->rs.max_hold_ns / 1000),
	          (unsigned long long)c->rs.holds_over_1ms, (unsigned long long)c->rs.holds);
	log_worst(c);
}

/*
 * The loader holds the cache lock as a real-time thread (cache_meta.c,
 * hold_rt) unless it already is one, or HOTLUN_RESTORE_HOLD_RT=0 (to
 * measure without it: tests/bench/cache_scale.sh).
 */
static void hold_rt_setup(struct hl_cache *c)
{
	const char *e = getenv("HOTLUN_RESTORE_HOLD_RT");
	struct sched_param sp, rt = {0};
	int rc;

	if (pthread_getschedparam(pthread_self(), &c->rs.sched_policy, &sp))
		return;
	c->rs.sched_prio = sp.sched_priority;
	c->rs.rt_hold = c->rs.sched_policy != SCHED_FIFO && c->rs.sched_policy != SCHED_RR &&
	                !(e && !strcmp(e, "0"));
	if (!c->rs.rt_hold)
		return;
	/*
	 * Tried once here, so that a refusal is logged when the restore
	 * starts, with what to do about it (the packaged unit allows it:
	 * RestrictRealtime=no, LimitRTPRIO=1; docs/service.md).
	 */
	rt.sched_priority = 1;
	rc = pthread_setschedparam(pthread_self(), SCHED_FIFO, &rt);
	if (!rc) {
		pthread_setschedparam(pthread_self(), c->rs.sched_policy, &sp);
		return;
	}
	c->rs.rt_hold = false;
	c->rs.rt_refused = rc;
	HL_WARN("cache",
	        "cache %s: restore: the loader cannot hold the cache lock as a real-time thread "
	        "(SCHED_FIFO priority 1: %s): preempted with the lock held, it can make hits wait "
	        "tens of milliseconds until the restore ends; allow it with LimitRTPRIO=1 and "
	        "RestrictRealtime=no in the systemd unit (the packaged hotlund.service has them), "
	        "or CAP_SYS_NICE, or `ulimit -r 1` before starting hotlund; "
	        "HOTLUN_RESTORE_HOLD_RT=0 does not try",
	        c->name, strerror(rc));
}

static void *restore_main(void *arg)
{
	struct hl_cache *c = arg;

	hold_rt_setup(c);
	c->rs.waiters = &c->read_waiters;
	restore_run(c);
	hl_cache_restore_release(&c->rs); /* its buffers (1 MiB, and the summary's copy) */
	atomic_store(&c->rs_exited, true); /* its last touch of c */
	return NULL;
}

int engine_restore_start(struct hl_cache *c, uint64_t t0_ms)
{
	const char *d = getenv("HOTLUN_TEST_RESTORE_DELAY_MS");
	const char *hold = getenv("HOTLUN_TEST_RESTORE_HOLD");
	int rc;

	c->rs_delay_ms = d ? (unsigned)strtoul(d, NULL, 10) : 0;
	free(c->rs_hold);
	c->rs_hold = hold && *hold ? strdup(hold) : NULL;
	c->rs_t0 = t0_ms ? t0_ms : engine_now_ms();
	publish(c);
	atomic_store(&c->rs_pages, c->rs.pages);
	atomic_store(&c->rs_phase, HL_CACHE_RESTORE_RUNNING);
	rc = -pthread_create(&c->rs_thr, NULL, restore_main, c);
	if (rc) {
		atomic_store(&c->rs_phase, HL_CACHE_RESTORE_STOPPED);
		return rc;
	}
	c->rs_started = true;
	return 0;
}

void engine_restore_stop(struct hl_cache *c)
{
	bool all, noted;

	uint64_t deadline = hl_now_ns() + (uint64_t)c->drain_ms * 1000000u;

	if (!c->rs_started)
		return;
	atomic_store(&c->rs_stop, true);
	/* bounded like the drain: a step in a device read that does not return */
	while (!atomic_load(&c->rs_exited) && hl_now_ns() < deadline) {
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	c->rs_started = false;
	if (!atomic_load(&c->rs_exited)) {
		/*
		 * It may hold sync_lock and c->rs, and write the core when it
		 * comes back: treated like a stuck metadata thread (never
		 * joined, the cache parked, the map sealed "failed").
		 */
		pthread_detach(c->rs_thr);
		atomic_store(&c->meta_stuck, true);
		HL_WARN("cache",
		        "cache %s: the restore did not stop within %u ms (a device read not "
		        "answering?): abandoned; its records are not trusted at the next start",
		        c->name, c->drain_ms);
		engine_map_seal(c);
		return;
	}
	pthread_join(c->rs_thr, NULL);
	pthread_mutex_lock(&c->lock); /* (writes may still note blocks) */
	all = hl_cache_core_restore_all(c->core);
	noted = hl_cache_core_restore_noted(c->core) != 0;
	pthread_mutex_unlock(&c->lock);
	if (atomic_load(&c->rs_phase) == HL_CACHE_RESTORE_STOPPED)
		HL_NOTICE("cache",
		          "cache %s: stopped while restoring (%llu of %llu record pages left): the "
		          "next start %s",
		          c->name, (unsigned long long)c->rs.pages_left,
		          (unsigned long long)c->rs.pages,
		          atomic_load(&c->failed) ? "is cold (the cache device failed)"
		          : all ? "is cold (too many blocks changed, or disks attached, while restoring)"
		          : noted
		              ? "restores what is on the device but the blocks changed while restoring"
		              : "restores what is on the device");
}

void hl_cache_restore_wait(struct hl_cache *c)
{
	while (c && atomic_load(&c->rs_phase) == HL_CACHE_RESTORE_RUNNING)
		usleep(1000);
}
