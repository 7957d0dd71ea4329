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
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "hotlun/cache.h"

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
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
	for (uint64_t s = 0; s < n; s++) {
		struct hl_cache_slot_rec rec = {.lun = 0, .block = 3 * s + 1};
		rec.valid[0] = 1;
		if (hl_cache_core_slot_restore(c, (uint32_t)s, &rec)) {
			fprintf(stderr, "restore %llu failed\n", (unsigned long long)s);
			return 1;
		}
	}
	t0 = now_ns();
	hl_cache_core_invalidate(c, 0, 0, UINT64_MAX);
	t1 = now_ns();
	printf("stale_claims=%llu invalidate_ms=%.1f", (unsigned long long)n, (t1 - t0) / 1e6);
	fflush(stdout);
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

int main(int argc, char **argv)
{
	int rc = 0;

	for (int i = 1; i < argc; i++)
		rc |= run(strtoull(argv[i], NULL, 0));
	return rc;
}
