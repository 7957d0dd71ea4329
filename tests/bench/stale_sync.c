/*
 * stale_sync.c - what the sync after a big drop costs under the cache
 * lock (issue 25): N records of one LUN restored into a core, the LUN
 * invalidated (N stale claims: the records on the device still claim the
 * blocks), then the sync's persisted phase, hl_cache_core_slot_persisted
 * for every slot in page order as page_persisted does, all under one hold
 * of the cache lock in hl_cache_meta_sync. Prints the invalidation's time,
 * the persisted phase's (the lock hold), and the longest single call.
 * Built against the library by tests/bench/stale_sync.sh:
 *
 *   stale_sync N [N...]
 *
 * STALE_SYNC_NO_PERSIST=1 (environment): the invalidation alone.
 * The invalidation runs under the cache lock with the probe thread below
 * (the longest wait for the lock is printed), in chunks
 * (hl_cache_core_invalidate_yield, the lock let go between them), or in
 * one hold with STALE_SYNC_ONE_HOLD=1 (as before issue 25's follow-up).
 *
 *   stale_sync --sync FILE N
 *
 * The same through the engine's real sync on a cache device file (sparse,
 * O_DIRECT; created, then removed): N records written, the LUN
 * invalidated, then cache_meta_sync_locked timed, with a thread that
 * takes the cache lock every 50 us as a reactor would and reports the
 * longest it waited (the longest hold of the lock).
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hotlun/cache.h"
#include "hotlun/cache_engine.h"

/* src/cache/engine/engine_internal.h */
int cache_meta_sync_locked(struct hl_cache_dev *d, struct hl_cache_layout *l,
                           struct hl_cache_core *c, pthread_mutex_t *lock);

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool probe_stop;
static uint64_t probe_max_ns, probe_n;

static void *probe(void *arg)
{
	(void)arg;
	while (!atomic_load(&probe_stop)) {
		uint64_t a = now_ns();
		pthread_mutex_lock(&lock);
		uint64_t w = now_ns() - a;
		pthread_mutex_unlock(&lock);
		if (w > probe_max_ns)
			probe_max_ns = w;
		probe_n++;
		usleep(50);
	}
	return NULL;
}

/* The invalidation's yield: let the reactors in, as the sync's persisted phase does. */
static uint64_t hold_start, hold_max_ns;

static void lock_yield(void *arg)
{
	uint64_t h = now_ns() - hold_start;

	if (h > hold_max_ns)
		hold_max_ns = h;
	pthread_mutex_unlock(arg);
	sched_yield();
	pthread_mutex_lock(arg);
	hold_start = now_ns();
}

/* The hold after the last yield (or the only one). */
static void lock_yield_last(void)
{
	uint64_t h = now_ns() - hold_start;

	if (h > hold_max_ns)
		hold_max_ns = h;
}

/*
 * N records of LUN 0 restored into slots 0..n-1 (dirty: to be written by
 * a sync), then the LUN invalidated whole: N stale claims. Prints the
 * invalidation's time. Returns 0 or the restore's error.
 */
static int restore_and_drop(struct hl_cache_core *c, uint64_t n, bool dirty,
                            int (*before_drop)(void *), void *arg)
{
	uint64_t t0, t1;
	pthread_t th;
	int rc = 0;

	for (uint64_t s = 0; !rc && s < n; s++) {
		struct hl_cache_slot_rec rec = {.lun = 0, .block = 3 * s + 1};
		rec.valid[0] = 1;
		rc = hl_cache_core_slot_restore(c, (uint32_t)s, &rec);
		if (dirty)
			hl_cache_core_slot_set_dirty(c, (uint32_t)s);
	}
	if (!rc && before_drop)
		rc = before_drop(arg);
	if (rc) {
		fprintf(stderr, "setup failed: %d\n", rc);
		return rc;
	}
	/* Under the cache lock, a thread taking it as a reactor would. */
	bool one_hold = getenv("STALE_SYNC_ONE_HOLD") != NULL;
	atomic_store(&probe_stop, false);
	probe_max_ns = probe_n = 0;
	pthread_create(&th, NULL, probe, NULL);
	usleep(20000);
	t0 = now_ns();
	pthread_mutex_lock(&lock);
	hold_start = now_ns();
	hold_max_ns = 0;
	hl_cache_core_invalidate_yield(c, 0, 0, UINT64_MAX, one_hold ? NULL : lock_yield, &lock);
	lock_yield_last();
	pthread_mutex_unlock(&lock);
	t1 = now_ns();
	usleep(20000);
	atomic_store(&probe_stop, true);
	pthread_join(th, NULL);
	printf("stale_claims=%llu invalidate_ms=%.1f (%s) longest_hold_ms=%.2f "
	       "invalidate_longest_lock_wait_ms=%.2f",
	       (unsigned long long)n, (t1 - t0) / 1e6, one_hold ? "one hold" : "in chunks",
	       hold_max_ns / 1e6, probe_max_ns / 1e6);
	fflush(stdout);
	return 0;
}

static int run(uint64_t n)
{
	struct hl_cache_params p;
	struct hl_cache_core *c = NULL;
	uint64_t t0, t1, maxc = 0, epoch;

	hl_cache_params_default(&p);
	p.capacity = n * 4096;
	p.block_size = 4096;
	p.window_bytes = 0;
	if (hl_cache_core_create(&p, &c) || hl_cache_core_lun_add(c, 0, 0)) {
		fprintf(stderr, "create failed\n");
		return 1;
	}
	if (restore_and_drop(c, n, false, NULL, NULL))
		return 1;
	if (getenv("STALE_SYNC_NO_PERSIST")) {
		/* (the invalidation only: for builds where the sync takes hours) */
		printf("\n");
		hl_cache_core_destroy(c);
		return 0;
	}
	/* The sync: a snapshot (the epoch), then every slot persisted claiming nothing. */
	epoch = hl_cache_core_meta_epoch(c) + 1;
	t0 = now_ns();
	for (uint64_t s = 0; s < n; s++) {
		uint64_t a = now_ns();
		hl_cache_core_slot_persisted(c, (uint32_t)s, false, epoch);
		uint64_t b = now_ns() - a;
		if (b > maxc)
			maxc = b;
	}
	t1 = now_ns();
	bool left = hl_cache_core_write_needs_sync(c, 0, 4096, 4096);
	printf(" persisted_phase_ms=%.1f (one lock hold) max_call_us=%.1f still_claimed=%d\n",
	       (t1 - t0) / 1e6, maxc / 1e3, left);
	hl_cache_core_destroy(c);
	return left;
}

struct sync_arg {
	struct hl_cache_dev *d;
	struct hl_cache_layout *l;
	struct hl_cache_core *c;
};

static int sync_records(void *arg)
{
	struct sync_arg *a = arg;

	return cache_meta_sync_locked(a->d, a->l, a->c, &lock);
}

static int run_sync(const char *path, uint64_t n)
{
	struct sync_arg sa;
	struct hl_cache_params p;
	struct hl_cache_core *c = NULL;
	struct hl_cache_dev *d = NULL;
	struct hl_cache_layout l;
	uint64_t t0, t1;
	pthread_t th;
	int rc;

	/* Room for n slots of 4 KiB and their metadata (a record of 32 bytes, the summary). */
	rc = hl_cache_dev_open_file(path, n * 4096 + n / 16 + (64ull << 20), &d);
	if (!rc)
		rc = hl_cache_meta_format(d, 4096, &l);
	if (rc) {
		fprintf(stderr, "device: %s\n", strerror(-rc));
		return 1;
	}
	hl_cache_params_default(&p);
	p.capacity = l.nslots * 4096;
	p.block_size = 4096;
	p.window_bytes = 0;
	if (l.nslots < n || hl_cache_core_create(&p, &c) || hl_cache_core_lun_add(c, 0, 0)) {
		fprintf(stderr, "create failed (%llu slots)\n", (unsigned long long)l.nslots);
		return 1;
	}
	hl_cache_layout_release(&l);
	rc = hl_cache_meta_load(d, c, &l);
	sa = (struct sync_arg){d, &l, c};
	if (rc || restore_and_drop(c, n, true, sync_records, &sa)) /* the records on the device */
		return 1;
	atomic_store(&probe_stop, false);
	probe_max_ns = probe_n = 0;
	pthread_create(&th, NULL, probe, NULL);
	usleep(20000);
	t0 = now_ns();
	rc = cache_meta_sync_locked(d, &l, c, &lock);
	t1 = now_ns();
	usleep(20000);
	atomic_store(&probe_stop, true);
	pthread_join(th, NULL);
	printf(" sync_ms=%.1f (rc %d) longest_lock_wait_ms=%.1f still_claimed=%d\n", (t1 - t0) / 1e6,
	       rc, probe_max_ns / 1e6, hl_cache_core_write_needs_sync(c, 0, 4096, 4096));
	hl_cache_core_destroy(c);
	hl_cache_layout_release(&l);
	hl_cache_dev_close(d);
	unlink(path);
	return rc != 0;
}

int main(int argc, char **argv)
{
	int rc = 0;

	if (argc == 4 && !strcmp(argv[1], "--sync"))
		return run_sync(argv[2], strtoull(argv[3], NULL, 0));

	for (int i = 1; i < argc; i++)
		rc |= run(strtoull(argv[i], NULL, 0));
	return rc;
}
