/*
 * cache_meta_ut.c - on-device metadata: layout, format/load round trip,
 * warm restart after a clean close, foreign or damaged superblocks, and
 * recovery after a crash that tears the Nth device write, for every N of a
 * workload of reads, fills, evictions, write-through updates (with
 * read-modify-write of partial sectors), invalidations and syncs: no
 * recovered sector may ever differ from the origin.
 * The lazy restore (a restore running while I/O is served, crashes
 * during it): cache_lazy_ut.c. Fixture: cache_meta_ut_lib.h.
 */
#include "cache_meta_ut_lib.h"

static void test_layout(void)
{
	struct hl_cache_layout l;

	CU_ASSERT_EQUAL(hl_cache_layout_compute(1ull << 30, 65536, &l), 0);
	CU_ASSERT_EQUAL(l.rec_size, 32);
	CU_ASSERT_EQUAL(l.sum_off, 8192);
	CU_ASSERT_EQUAL(l.sum_len, 4096); /* one bit per record page */
	CU_ASSERT_EQUAL(l.meta_off, 8192 + 4096);
	CU_ASSERT_EQUAL(l.npages, l.meta_len / 4096);
	CU_ASSERT(l.npages * 128 >= l.nslots);
	CU_ASSERT_EQUAL(l.data_off % 65536, 0);
	CU_ASSERT(l.data_off >= l.meta_off + l.meta_len);
	CU_ASSERT(l.data_off + l.nslots * 65536 <= (1ull << 30));
	CU_ASSERT(l.nslots >= 16370 && l.nslots < 16384);
	CU_ASSERT(l.meta_len * 4096 / 32 >= l.nslots * 4096);
	CU_ASSERT_EQUAL(hl_cache_layout_compute(1ull << 30, 1024 * 1024, &l), 0);
	CU_ASSERT_EQUAL(l.rec_size, 64); /* 256 valid bits need the larger record */
	CU_ASSERT_EQUAL(hl_cache_layout_compute(1ull << 30, 3000, &l), -EINVAL);
	CU_ASSERT_EQUAL(hl_cache_layout_compute(8192, 4096, &l), -ENOSPC);
	/* 4 TiB of 4 KiB blocks: 1 Gi slots minus what records take, a 1 MiB summary. */
	CU_ASSERT_EQUAL(hl_cache_layout_compute(4ull << 40, 4096, &l), 0);
	CU_ASSERT(l.nslots > (1ull << 30) - (1ull << 30) / 128 - 256 && l.nslots < 1ull << 30);
	CU_ASSERT_EQUAL(l.sum_len, HL_ALIGN_UP(HL_DIV_ROUND_UP(l.npages, 8), 4096));
	CU_ASSERT(l.data_off + l.nslots * 4096 <= 4ull << 40);
	CU_ASSERT(l.data_off + (l.nslots + 1) * 4096 + 32 > 4ull << 40); /* no room for one more */
	/*
	 * 12 TiB: more than 2^31 slots (up to 2^32 - 3 fit the slot numbers):
	 * record bytes, offsets and the count a load returns past 32 bits.
	 */
	CU_ASSERT_EQUAL(hl_cache_layout_compute(12ull << 40, 4096, &l), 0);
	CU_ASSERT(l.nslots > 1ull << 31 && l.nslots < UINT32_MAX - 1);
	CU_ASSERT(l.meta_len > 1ull << 32 && l.meta_len == l.npages * 4096);
	CU_ASSERT(l.npages * 128 >= l.nslots);
	CU_ASSERT(l.data_off + l.nslots * 4096 <= 12ull << 40);
	_Static_assert(sizeof(hl_cache_meta_load(NULL, NULL, NULL)) >= sizeof(int64_t),
	               "a load restores up to 2^32 - 3 slots: an int does not hold the count");
	/* 17 TiB: 2^32 - 2 slots and more do not fit the 32-bit slot numbers: refused. */
	CU_ASSERT_EQUAL(hl_cache_layout_compute(17ull << 40, 4096, &l), -EINVAL);
}

static void test_warm_restart(void)
{
	struct rig r;
	struct hl_cache_core_info info;
	int restored;

	rig_start(&r, 2u << 20);
	workload(&r, 3000);
	CU_ASSERT_FALSE(r.crashed);
	CU_ASSERT_EQUAL(r.bad_hits, 0);
	hl_cache_core_info(r.c, &info);
	CU_ASSERT(info.used_slots > r.l.nslots / 2);
	uint64_t used = info.used_slots;
	CU_ASSERT_EQUAL(hl_cache_meta_close(r.d, &r.l, r.c), 0);
	CU_ASSERT_EQUAL(recover_and_check(&r, &restored), 0);
	/* A clean stop keeps every block that held valid data. */
	CU_ASSERT_EQUAL((uint64_t)restored, used);
	/* And the warm cache serves hits right away, with the right data. */
	struct hl_cache_stats st;
	workload(&r, 300);
	hl_cache_core_stats(r.c, -1, &st);
	CU_ASSERT(st.read_hits > 0);
	CU_ASSERT_EQUAL(r.bad_hits, 0);
	hl_cache_core_destroy(r.c);
	hl_cache_layout_release(&r.l);
	hl_cache_dev_close(r.d);
}

static void test_bad_superblock(void)
{
	struct rig r;
	uint8_t *z = NULL;
	struct hl_cache_core *c;
	struct hl_cache_layout l;

	rig_start(&r, 1u << 20);
	workload(&r, 200);
	hl_cache_meta_close(r.d, &r.l, r.c);
	hl_cache_core_destroy(r.c);
	/* One copy torn: the other one still opens the cache. */
	CU_ASSERT_FATAL(posix_memalign((void **)&z, 4096, 8192) == 0);
	memset(z, 0x5a, 8192);
	CU_ASSERT_EQUAL(r.d->ops->pwrite(r.d, z + 100, 1000, 4096 + 100), 0);
	c = new_core(&r.l);
	CU_ASSERT(hl_cache_meta_load(r.d, c, &l) > 0);
	hl_cache_layout_release(&l);
	hl_cache_core_destroy(c);
	/* Both gone: no cache, the caller formats. */
	CU_ASSERT_EQUAL(r.d->ops->pwrite(r.d, z, 8192, 0), 0);
	c = new_core(&r.l);
	CU_ASSERT_EQUAL(hl_cache_meta_load(r.d, c, &l), -ENODATA);
	hl_cache_core_destroy(c);
	/* A different block size is a different cache. */
	CU_ASSERT_EQUAL(hl_cache_meta_format(r.d, 4096, &l), 0);
	hl_cache_layout_release(&l);
	c = new_core(&r.l);
	CU_ASSERT_EQUAL(hl_cache_meta_load(r.d, c, &l), -ENODATA);
	hl_cache_core_destroy(c);
	free(z);
	hl_cache_layout_release(&r.l);
	hl_cache_dev_close(r.d);
}

/*
 * The device dies at each write of a scenario in turn (torn one way or
 * another), on a fresh device of `dev` bytes each time; every crash is
 * recovered and checked (summary, restored sectors, hits), then `after`
 * runs on the recovered cache when given. Counts the scenario's device
 * writes first (more than min_writes). Returns the stale findings.
 */
static unsigned crash_each_write(uint64_t dev, void (*scenario)(struct rig *r),
                                 void (*after)(struct rig *r), uint64_t min_writes,
                                 uint64_t *total_out, uint64_t *recovered_out)
{
	static const size_t torn[] = {0, 512, 1000, 2048, 4095};
	uint64_t total, n, crashes = 0, recovered_slots = 0;
	unsigned bad = 0;
	struct rig r;
	int restored;

	rig_start(&r, dev);
	uint64_t base = hl_cache_dev_mem_writes(r.d);
	scenario(&r);
	CU_ASSERT_FALSE_FATAL(r.crashed);
	CU_ASSERT_EQUAL(r.bad_hits, 0);
	total = hl_cache_dev_mem_writes(r.d) - base;
	hl_cache_core_destroy(r.c);
	hl_cache_layout_release(&r.l);
	hl_cache_dev_close(r.d);
	CU_ASSERT(total > min_writes);

	for (n = 0; n <= total; n++) {
		rig_start(&r, dev);
		hl_cache_dev_mem_fail_at(r.d, hl_cache_dev_mem_writes(r.d) + n, torn[n % 5]);
		scenario(&r);
		crashes += r.crashed;
		if (!summary_covers_claims(&r))
			bad++;
		bad += recover_and_check(&r, &restored);
		recovered_slots += (uint64_t)(restored > 0 ? restored : 0);
		bad += (unsigned)r.bad_hits;
		if (after) {
			/* The recovered cache keeps working correctly. */
			r.crashed = false;
			r.bad_hits = 0;
			after(&r);
			bad += (unsigned)r.bad_hits;
		}
		hl_cache_core_destroy(r.c);
		hl_cache_layout_release(&r.l);
		hl_cache_dev_close(r.d);
		if (bad) {
			fprintf(stderr, "stale data after a crash at write %llu of %llu\n",
			        (unsigned long long)n, (unsigned long long)total);
			break;
		}
	}
	CU_ASSERT_EQUAL(crashes, total);
	/* Recovery is not trivially "drop everything". */
	CU_ASSERT(recovered_slots > total);
	*total_out = total;
	*recovered_out = recovered_slots;
	return bad;
}

static void workload_400(struct rig *r)
{
	workload(r, 400);
}

static void workload_100(struct rig *r)
{
	workload(r, 100);
}

static void test_torn_write_every_step(void)
{
	uint64_t total, recovered;

	CU_ASSERT_EQUAL(crash_each_write(1u << 20, workload_400, workload_100, 300, &total, &recovered),
	                0);
}

/* The big drops' start: LUN 0 cached whole, LUN 1 half, and synced. */
static void fill_both_synced(struct rig *r)
{
	const uint64_t nb = LUNSECT / SPB;

	for (uint64_t b = 0; b < nb && !r->crashed; b++)
		do_read(r, 0, b * BS, BS, false);
	for (uint64_t b = 0; b < nb / 2 && !r->crashed; b++)
		do_read(r, 1, b * BS, BS, false);
	if (!r->crashed)
		dev_io(r, hl_cache_meta_sync(r->d, &r->l, r->c));
}

/*
 * A big drop (issue 25): both LUNs cached whole and synced, LUN 0 dropped
 * at once without a sync (a detach, a cold attach: hundreds of stale
 * claims), then freed slots refilled with LUN 1's blocks (fills deferred,
 * some needing a barrier), writes to LUN 0's blocks (each must wait for a
 * sync while a record still claims its block), an UNMAP and syncs. The
 * device dies at each of its writes in turn: nothing stale is restored.
 */
static void big_drop_workload(struct rig *r)
{
	const uint64_t nb = LUNSECT / SPB;

	fill_both_synced(r);
	touch(0, 0, nb * BS);
	hl_cache_core_invalidate(r->c, 0, 0, nb * BS);
	for (uint64_t b = 0; b < nb && !r->crashed; b++) {
		if (b % 3 == 0)
			do_write(r, 0, b * BS + (b % 4) * 4096, 4096 + (b % 5) * 512);
		if (b % 2 == 0 && nb / 2 + b / 2 < nb)
			do_read(r, 1, (nb / 2 + b / 2) * BS, BS, b % 4 == 0);
		if (b % 7 == 0)
			do_read(r, 0, (b / 2) * BS, 2 * BS, b % 3 == 0);
		if (b == nb / 2)
			do_invalidate(r, 1, 0, 40 * BS);
		if (b % 50 == 49 && !r->crashed)
			dev_io(r, hl_cache_meta_sync(r->d, &r->l, r->c));
	}
	if (r->npend)
		finish_pending(r);
	if (!r->crashed)
		dev_io(r, hl_cache_meta_sync(r->d, &r->l, r->c));
}

static void test_big_drop_crash_every_write(void)
{
	uint64_t total, recovered;
	unsigned bad;

	memset(touched, 0, sizeof(touched));
	bad = crash_each_write(8u << 20, big_drop_workload, NULL, 400, &total, &recovered);
	CU_ASSERT_EQUAL(bad, 0);
	fprintf(stderr, "\n  big drop: %llu device writes, a crash at each: %u stale, %llu slots restored",
	        (unsigned long long)total, bad, (unsigned long long)recovered);
}

/*
 * The big drop when the stale-claim list cannot grow (its realloc fails):
 * past `stale_limit` entries (1: none at all) the claims are not tracked,
 * every write syncs until a sync snapshotted after the last of them has
 * made the dirty records durable, and then writes go straight to the
 * origin again (checked at the end). A crash at each device write, across
 * the overflow and its recovery: nothing stale.
 */
static uint64_t stale_limit;
static unsigned overflow_writes_synced, overflow_writes_direct;

static void big_drop_overflow_workload(struct rig *r)
{
	const uint64_t nb = LUNSECT / SPB;

	hl_cache_core_test_stale_limit(r->c, stale_limit);
	big_drop_workload(r);
	if (r->crashed)
		return;
	/*
	 * Recovered: no claim is left, tracked or not, so the next write does
	 * not sync (the ones after it may: its unclaim may not be tracked).
	 */
	overflow_writes_synced += hl_cache_core_write_needs_sync(r->c, 0, 0, 4096);
	overflow_writes_direct += !hl_cache_core_write_needs_sync(r->c, 0, 0, 4096);
	for (uint64_t b = 0; b < nb; b += 5)
		do_write(r, 0, b * BS, 4096);
	/* Drop again (untracked claims), refill and write: syncs again, then recovers. */
	touch(1, 0, nb * BS);
	hl_cache_core_invalidate(r->c, 1, 0, nb * BS);
	for (uint64_t b = 0; b < nb && !r->crashed; b += 2) {
		do_read(r, 0, b * BS, BS, b % 6 == 0);
		do_write(r, 1, b * BS + 8192, 4096);
	}
	if (r->npend)
		finish_pending(r);
	if (!r->crashed)
		dev_io(r, hl_cache_meta_sync(r->d, &r->l, r->c));
	if (!r->crashed) {
		overflow_writes_direct += !hl_cache_core_write_needs_sync(r->c, 1, 0, BS);
		overflow_writes_synced += hl_cache_core_write_needs_sync(r->c, 1, 0, BS);
	}
}

static void stale_overflow_crash(uint64_t limit)
{
	uint64_t total, recovered;
	unsigned bad;

	memset(touched, 0, sizeof(touched));
	stale_limit = limit;
	overflow_writes_synced = overflow_writes_direct = 0;
	bad = crash_each_write(8u << 20, big_drop_overflow_workload, NULL, 400, &total,
	                       &recovered);
	CU_ASSERT_EQUAL(bad, 0);
	/* Every run that got through its syncs found writes direct again, never syncing. */
	CU_ASSERT(overflow_writes_direct > 0);
	CU_ASSERT_EQUAL(overflow_writes_synced, 0);
	fprintf(stderr,
	        "\n  stale list of at most %llu: %llu device writes, a crash at each: %u stale, "
	        "%llu slots restored, %u checks after recovery found writes direct",
	        (unsigned long long)limit, (unsigned long long)total, bad,
	        (unsigned long long)recovered, overflow_writes_direct);
}

static void test_stale_overflow_crash_every_write(void)
{
	stale_overflow_crash(1);   /* no claim tracked at all */
	stale_overflow_crash(256); /* part tracked, the rest not */
}

/*
 * A big drop in chunks (hl_cache_core_invalidate_yield, a chunk of 16
 * slots here): between two chunks other I/O runs as the reactors would,
 * reads of the range and of LUN 1, writes to both, and syncs (the
 * metadata thread). proof_drop: the origin of LUN 0 changed before the
 * drop (as when an attach finds its proof stale): a block of the range
 * served from the cache between chunks reads stale (bad_hits). Otherwise
 * an UNMAP: the origin changes after the drop's sync, and the device dies
 * at each of its writes in turn: nothing stale is restored.
 */
static bool chunk_proof_drop;
static unsigned chunk_k, chunk_range_reads;

static void chunk_yield(void *arg)
{
	struct rig *r = arg;
	const uint64_t nb = LUNSECT / SPB;
	unsigned k = chunk_k++;

	if (r->crashed)
		return;
	for (unsigned i = 0; i < 4; i++) {
		do_read(r, 0, ((k * 4 + i) * 7 % nb) * BS, BS, false);
		chunk_range_reads++;
	}
	do_read(r, 1, (k * 5 % nb) * BS, BS, false);
	if (k % 2)
		do_write(r, 1, (k * 3 % nb) * BS + 4096, 4096);
	if (k % 3 == 0)
		do_write(r, 0, (k * 11 % nb) * BS + 8192, 4096);
	if (k % 4 == 0 && !r->crashed)
		dev_io(r, hl_cache_meta_sync(r->d, &r->l, r->c));
}

static void chunk_drop_workload(struct rig *r)
{
	const uint64_t nb = LUNSECT / SPB;

	fill_both_synced(r);
	if (r->crashed)
		return;
	touch(0, 0, nb * BS);
	if (chunk_proof_drop)
		for (uint64_t s = 0; s < LUNSECT; s++)
			origin[0][s] += 1000;
	hl_cache_core_test_inval_chunk(r->c, 16);
	chunk_k = 0;
	hl_cache_core_invalidate_yield(r->c, 0, 0, nb * BS, chunk_yield, r);
	if (!r->crashed && !dev_io(r, hl_cache_meta_sync(r->d, &r->l, r->c)) && !chunk_proof_drop)
		for (uint64_t s = 0; s < LUNSECT; s++)
			origin[0][s] += 1000; /* the UNMAP reaches the origin after the sync */
	/* Served again after it. */
	for (uint64_t b = 0; b < nb && !r->crashed; b += 3)
		do_read(r, 0, b * BS, BS, b % 2 == 0);
	if (r->npend)
		finish_pending(r);
	if (!r->crashed)
		dev_io(r, hl_cache_meta_sync(r->d, &r->l, r->c));
}

static void test_chunked_drop(void)
{
	struct rig r;
	uint64_t total, recovered;
	unsigned bad;

	/* The origin changed before the drop: nothing of the range is served between chunks. */
	memset(touched, 0, sizeof(touched));
	chunk_proof_drop = true;
	chunk_range_reads = 0;
	rig_start(&r, 8u << 20);
	chunk_drop_workload(&r);
	CU_ASSERT_FALSE(r.crashed);
	CU_ASSERT(chunk_k > 10); /* it did yield, many times */
	CU_ASSERT(chunk_range_reads > 40);
	CU_ASSERT_EQUAL(r.bad_hits, 0);
	hl_cache_core_destroy(r.c);
	hl_cache_layout_release(&r.l);
	hl_cache_dev_close(r.d);
	/* An UNMAP in chunks, a crash at each device write. */
	chunk_proof_drop = false;
	bad = crash_each_write(8u << 20, chunk_drop_workload, NULL, 100, &total, &recovered);
	CU_ASSERT_EQUAL(bad, 0);
	fprintf(stderr, "\n  drop in chunks: %llu device writes, a crash at each: %u stale, %llu slots restored",
	        (unsigned long long)total, bad, (unsigned long long)recovered);
}

/*
 * The race behind hl_cache_core_write_needs_sync(): a miss evicts block X
 * from a slot whose record still claims X; before that record is rewritten
 * (the fill's barrier is still pending) X is written at the origin; then
 * the device dies. The old record must not bring X's old data back.
 */
/*
 * The device dies at its next write (the pending fill's barrier or data):
 * the restart must restore only sectors that match the origin, and keep
 * some. Ends the rig.
 */
static void crash_at_pending_fill(struct rig *r)
{
	int restored;

	hl_cache_dev_mem_fail_at(r->d, hl_cache_dev_mem_writes(r->d), 0);
	finish_pending(r);
	CU_ASSERT_TRUE(r->crashed);
	CU_ASSERT_EQUAL(recover_and_check(r, &restored), 0);
	CU_ASSERT(restored > 0);
	hl_cache_core_destroy(r->c);
	hl_cache_layout_release(&r->l);
	hl_cache_dev_close(r->d);
}

static void test_stale_claim_after_eviction(void)
{
	struct rig r;
	uint64_t x = UINT64_MAX;

	rig_start(&r, 1u << 20);
	for (uint64_t b = 0; b < r.l.nslots; b++)
		do_read(&r, 0, b * 3 * BS, BS, false);
	CU_ASSERT_EQUAL_FATAL(hl_cache_meta_sync(r.d, &r.l, r.c), 0);
	do_read(&r, 1, 0, BS, true); /* evicts one block of LUN 0, fill pending */
	for (uint64_t b = 0; b < r.l.nslots; b++)
		if (hl_cache_core_peek(r.c, 0, b * 3, NULL) == HL_CACHE_NO_SLOT)
			x = b * 3;
	CU_ASSERT_FATAL(x != UINT64_MAX);
	CU_ASSERT_TRUE(hl_cache_core_write_needs_sync(r.c, 0, x * BS, 4096));
	do_write(&r, 0, x * BS, BS);
	CU_ASSERT_FALSE(hl_cache_core_write_needs_sync(r.c, 0, x * BS, 4096));
	/* The device dies at the next write (the pending fill's barrier). */
	crash_at_pending_fill(&r);
}

/*
 * A sync snapshots the records, then writes them without the lock. What
 * happens to a slot in between must treat the snapshot's claims as if they
 * were already on the device: here a fill reuses a slot whose block the
 * snapshot claims (it must take a barrier before its data lands), or a
 * write changes a sector the snapshot claims (it must sync before the
 * origin sees it). Then the gateway dies before the next sync. Found by
 * tests/functional/cache_verify.sh as misdirected data after kill -9.
 */
static struct rig *race_rig;
static int race_action; /* 0 idle, 1 evict by a fill, 2 overwrite a claimed sector */
static bool race_write_waits; /* action 2: the write waits for a sync before the origin */
static struct hl_cache_dev_ops race_ops;
static const struct hl_cache_dev_ops *race_orig;

static int race_pwrite(struct hl_cache_dev *d, const void *buf, size_t len, uint64_t off)
{
	struct rig *r = race_rig;
	int rc = race_orig->pwrite(d, buf, len, off);
	int action = race_action;

	if (rc || !action || off < r->l.meta_off || off >= r->l.data_off)
		return rc;
	race_action = 0;
	if (action == 1) {
		do_read(r, 1, 0, BS, true); /* evicts a LUN 0 block; its fill waits */
		return rc;
	}
	/* A write of sector 0 (cached, claimed by the snapshot) starts. */
	struct hl_cache_io ios[16];
	int n = hl_cache_core_write_begin(r->c, 0, 0, HL_CACHE_SECTOR, ios, 16);
	bool sync = hl_cache_core_write_needs_sync(r->c, 0, 0, HL_CACHE_SECTOR);

	for (int i = 0; i < n; i++)
		sync |= ios[i].meta_barrier;
	race_write_waits = sync;
	if (!sync)
		origin[0][0]++; /* no sync needed: the origin has it at once */
	return rc;
}

static void race_one(int action)
{
	struct rig r;
	int restored;

	rig_start(&r, 1u << 20);
	for (uint64_t b = 0; b < r.l.nslots; b++)
		do_read(&r, 0, b * BS, BS, false); /* every slot holds a LUN 0 block, unsynced */
	race_rig = &r;
	race_orig = r.d->ops;
	race_ops = *r.d->ops;
	race_ops.pwrite = race_pwrite;
	r.d->ops = &race_ops;
	race_action = action;
	CU_ASSERT_EQUAL_FATAL(hl_cache_meta_sync(r.d, &r.l, r.c), 0);
	CU_ASSERT_EQUAL(race_action, 0); /* the race happened */
	if (r.npend)
		finish_pending(&r); /* the fill: barrier (if it knows it needs one), data */
	if (action == 2 && race_write_waits) {
		/* The sync the write asked for, then the origin write. */
		CU_ASSERT_EQUAL(hl_cache_meta_sync(r.d, &r.l, r.c), 0);
		origin[0][0]++;
	}
	/* (action 2: the gateway dies before the update reaches the cache) */
	r.d->ops = race_orig;
	CU_ASSERT_FALSE(r.crashed);
	/* The gateway dies now: no further sync. */
	CU_ASSERT_EQUAL(recover_and_check(&r, &restored), 0);
	CU_ASSERT(restored > 0);
	hl_cache_core_destroy(r.c);
	hl_cache_layout_release(&r.l);
	hl_cache_dev_close(r.d);
}

static void test_claims_of_a_sync_in_flight(void)
{
	race_one(1);
	race_one(2);
}

/*
 * Two writes touch one cached sector that the record on the device claims.
 * The first clears it in RAM and waits for a sync (barrier) before its
 * origin write; the second, arriving meanwhile, finds the sector already
 * invalid in RAM. It must wait for a sync too: the record still claims the
 * sector's old data until a snapshot taken after the first write's
 * write_begin is on the device. If the second write went to the origin at
 * once and the gateway died before that sync, the old record would bring the
 * old data back over an acknowledged write. Here the second write covers
 * only part of the sector (misaligned I/O, a read-modify-write candidate),
 * as two initiators' (or one's non-overlapping 512-byte) writes do; the same
 * holds for a range invalidation (UNMAP) whose sync is still pending.
 */
static void second_write_one(bool first_is_unmap)
{
	struct rig r;
	struct hl_cache_io ios[16];
	int restored, n;
	bool sync;

	rig_start(&r, 1u << 20);
	do_read(&r, 0, 0, BS, false); /* block 0 cached, every sector valid */
	CU_ASSERT_EQUAL_FATAL(hl_cache_meta_sync(r.d, &r.l, r.c), 0); /* ... and claimed */
	if (first_is_unmap) {
		/* An UNMAP of sector 0: dropped in RAM, its sync not done yet. */
		CU_ASSERT_EQUAL(hl_cache_core_invalidate(r.c, 0, 0, HL_CACHE_SECTOR), 0);
	} else {
		/* Write 1 of bytes [0, 3584) of sector 0: it needs a sync first, still queued. */
		n = hl_cache_core_write_begin(r.c, 0, 0, 3584, ios, 16);
		CU_ASSERT_EQUAL_FATAL(n, 1);
		CU_ASSERT_TRUE(ios[0].meta_barrier);
	}
	/* Write 2 of bytes [3584, 4096): the sector is not valid in RAM any more. */
	sync = hl_cache_core_write_needs_sync(r.c, 0, 3584, 512);
	n = hl_cache_core_write_begin(r.c, 0, 3584, 512, ios, 16);
	CU_ASSERT_EQUAL_FATAL(n, 1);
	sync |= ios[0].meta_barrier != 0;
	CU_ASSERT_TRUE(sync);
	if (sync)
		CU_ASSERT_EQUAL_FATAL(hl_cache_meta_sync(r.d, &r.l, r.c), 0);
	origin[0][0]++; /* write 2 reached the origin and was acknowledged */
	/* The gateway dies now (write 1's origin write never happened). */
	CU_ASSERT_EQUAL(recover_and_check(&r, &restored), 0);
	CU_ASSERT(restored > 0); /* the block's other sectors are still claimed */
	hl_cache_core_destroy(r.c);
	hl_cache_layout_release(&r.l);
	hl_cache_dev_close(r.d);
}

static void test_second_write_before_barrier(void)
{
	second_write_one(false);
	second_write_one(true);
}

/*
 * Records the load drops (here: their LUN is not configured this time)
 * still claim data on the device. A slot they name that is reused must take
 * a barrier first, or a crash before the next sync brings the old claim
 * back over the new block's data.
 */
/* Every slot holds a LUN 1 block, synced; then a restart without LUN 1 drops every record. */
static void restart_without_lun1(struct rig *r)
{
	rig_start(r, 1u << 20);
	for (uint64_t b = 0; b < r->l.nslots; b++)
		do_read(r, 1, b * BS, BS, false);
	CU_ASSERT_EQUAL_FATAL(hl_cache_meta_sync(r->d, &r->l, r->c), 0);
	hl_cache_core_destroy(r->c);
	hl_cache_dev_mem_reset(r->d);
	r->c = new_core(&r->l);
	hl_cache_core_lun_remove(r->c, 1);
	hl_cache_layout_release(&r->l);
	CU_ASSERT_EQUAL(hl_cache_meta_load(r->d, r->c, &r->l), 0);
}

static void test_dropped_records_still_claim(void)
{
	struct rig r;
	int restored;

	restart_without_lun1(&r);
	/* LUN 0 fills the free slots (each fill takes its barrier if it knows). */
	for (uint64_t b = 0; b < r.l.nslots; b++)
		do_read(&r, 0, b * BS, BS, false);
	CU_ASSERT_FALSE(r.crashed);
	/* Crash before any sync; the next start has LUN 1 again. */
	CU_ASSERT_EQUAL(recover_and_check(&r, &restored), 0);
	hl_cache_core_destroy(r.c);
	hl_cache_layout_release(&r.l);
	hl_cache_dev_close(r.d);
}

/*
 * The same dropped records when their LUN comes back without a restart (a
 * disk attached later): the device still claims its blocks' old content,
 * so a write to one of them must sync first (the sync rewrites the dropped
 * records), or a crash right after it would restore the old data at the
 * next start.
 */
static void test_dropped_claim_then_write(void)
{
	struct rig r;
	int restored;

	restart_without_lun1(&r);
	CU_ASSERT_FATAL(hl_cache_core_lun_add(r.c, 1, 0) == 0);
	/* Nothing of LUN 1 is cached, but the device still claims block 2. */
	CU_ASSERT_EQUAL(hl_cache_core_peek(r.c, 1, 2, NULL), HL_CACHE_NO_SLOT);
	CU_ASSERT_TRUE(hl_cache_core_write_needs_sync(r.c, 1, 2 * BS, 4096));
	do_write(&r, 1, 2 * BS, 4096);
	CU_ASSERT_FALSE(hl_cache_core_write_needs_sync(r.c, 1, 2 * BS, 4096));
	/* Crash at the next device write: the restart must not serve the old sector. */
	hl_cache_dev_mem_fail_at(r.d, hl_cache_dev_mem_writes(r.d), 0);
	do_read(&r, 0, 0, BS, false);
	CU_ASSERT_EQUAL(recover_and_check(&r, &restored), 0);
	hl_cache_core_destroy(r.c);
	hl_cache_layout_release(&r.l);
	hl_cache_dev_close(r.d);
}

/*
 * A slot given to a new block while its record still claims the old one:
 * only the io that took it waits for the barrier. A second read of the new
 * block (another sector, found in the slot with nothing valid) planned
 * before that barrier must not write into the slot either, or a crash
 * before the barrier restores the old block with the new one's sector
 * (found by tests/functional/cache_verify.sh with kill -9: one 4 KiB
 * sector of another block at the same offset).
 */
static void test_second_fill_before_take_barrier(void)
{
	struct rig r;
	uint64_t fresh = 3 * LUNSECT / SPB / 4; /* a block no slot holds */

	rig_start(&r, 1u << 20);
	for (uint64_t b = 0; b < r.l.nslots; b++)
		do_read(&r, 0, b * BS, BS, false);
	CU_ASSERT_EQUAL_FATAL(hl_cache_meta_sync(r.d, &r.l, r.c), 0);
	/* Evicts a claimed block; the fill waits (deferred) for its barrier. */
	do_read(&r, 1, fresh * BS, HL_CACHE_SECTOR, true);
	CU_ASSERT_EQUAL_FATAL(r.npend, 1);
	CU_ASSERT_TRUE(r.pend[0].meta_barrier);
	/* Another sector of the same block, from the slot it now has. */
	do_read(&r, 1, fresh * BS + HL_CACHE_SECTOR, HL_CACHE_SECTOR, false);
	/* The device dies at the barrier: the old record stays. */
	crash_at_pending_fill(&r);
}

/* Bytes a format writes: the superblocks and the summary, no record page. */
static uint64_t bytes_written;
static const struct hl_cache_dev_ops *count_orig;

static int count_pwrite(struct hl_cache_dev *d, const void *buf, size_t len, uint64_t off)
{
	bytes_written += len;
	return count_orig->pwrite(d, buf, len, off);
}

static void test_format_writes_no_records(void)
{
	struct hl_cache_dev *d;
	struct hl_cache_dev_ops ops;
	struct hl_cache_layout l;

	CU_ASSERT_FATAL(hl_cache_dev_open_mem(64u << 20, &d) == 0);
	count_orig = d->ops;
	ops = *d->ops;
	ops.pwrite = count_pwrite;
	d->ops = &ops;
	bytes_written = 0;
	CU_ASSERT_EQUAL_FATAL(hl_cache_meta_format(d, 4096, &l), 0);
	CU_ASSERT(l.meta_len >= 16 * 4096); /* 16 Ki slots: 128 record pages it need not zero */
	CU_ASSERT_EQUAL(bytes_written, 2 * 4096 + l.sum_len + 4096);
	d->ops = count_orig;
	hl_cache_layout_release(&l);
	hl_cache_dev_close(d);
}

/*
 * Format does not zero the record pages: what an earlier format (or
 * anything else) left there must never be restored, even where the
 * summary marks the page (a crash between a summary write and the page
 * write leaves exactly that).
 */
static void test_leftover_records_never_restored(void)
{
	struct rig r;
	int restored;
	uint8_t *ones, *junk;
	struct hl_cache_core_info info;

	rig_start(&r, 2u << 20);
	workload(&r, 1000);
	hl_cache_core_info(r.c, &info);
	CU_ASSERT_FATAL(info.used_slots > 0);
	CU_ASSERT_EQUAL_FATAL(hl_cache_meta_close(r.d, &r.l, r.c), 0);
	/* A clean restart keeps them (the records are good). */
	CU_ASSERT_EQUAL(recover_and_check(&r, &restored), 0);
	CU_ASSERT_EQUAL((uint64_t)restored, info.used_slots);
	/* Format again (a new uuid), then mark every page as a crash could. */
	hl_cache_layout_release(&r.l);
	CU_ASSERT_EQUAL_FATAL(hl_cache_meta_format(r.d, BS, &r.l), 0);
	ones = malloc(r.l.sum_len);
	memset(ones, 0xff, r.l.sum_len);
	CU_ASSERT_FATAL(r.d->ops->pwrite(r.d, ones, r.l.sum_len, r.l.sum_off) == 0);
	CU_ASSERT_EQUAL(recover_and_check(&r, &restored), 0);
	CU_ASSERT_EQUAL(restored, 0);
	/* Random bytes in every record page: nothing either. */
	junk = malloc(r.l.meta_len);
	rs = 0x9e3779b97f4a7c15ull;
	for (uint64_t i = 0; i < r.l.meta_len; i += 8) {
		uint64_t v = rnd();
		memcpy(junk + i, &v, 8);
	}
	CU_ASSERT_FATAL(r.d->ops->pwrite(r.d, junk, r.l.meta_len, r.l.meta_off) == 0);
	CU_ASSERT_FATAL(r.d->ops->pwrite(r.d, ones, r.l.sum_len, r.l.sum_off) == 0);
	CU_ASSERT_EQUAL(recover_and_check(&r, &restored), 0);
	CU_ASSERT_EQUAL(restored, 0);
	free(junk);
	free(ones);
	hl_cache_core_destroy(r.c);
	hl_cache_layout_release(&r.l);
	hl_cache_dev_close(r.d);
}

/* A cache of format version 1 (before the page summary) starts cold, never misread. */
static void test_version_1_starts_cold(void)
{
	struct rig r;
	uint8_t *sb = NULL;
	struct hl_cache_core *c;
	struct hl_cache_layout l;
	uint32_t crc;

	rig_start(&r, 1u << 20);
	workload(&r, 200);
	CU_ASSERT_EQUAL_FATAL(hl_cache_meta_close(r.d, &r.l, r.c), 0);
	hl_cache_core_destroy(r.c);
	/* Both copies say version 1 (with a good CRC). */
	CU_ASSERT_FATAL(posix_memalign((void **)&sb, 4096, 8192) == 0);
	CU_ASSERT_FATAL(r.d->ops->pread(r.d, sb, 8192, 0) == 0);
	for (int i = 0; i < 2; i++) {
		uint8_t *b = sb + i * 4096;
		if (memcmp(b, "HLCACHE", 8))
			continue;
		b[8] = 1;
		crc = ut_crc32c(b, 4092);
		memcpy(b + 4092, &crc, 4);
	}
	CU_ASSERT_FATAL(r.d->ops->pwrite(r.d, sb, 8192, 0) == 0);
	c = new_core(&r.l);
	CU_ASSERT_EQUAL(hl_cache_meta_load(r.d, c, &l), -ENODATA);
	hl_cache_core_destroy(c);
	free(sb);
	hl_cache_layout_release(&r.l);
	hl_cache_dev_close(r.d);
}

/* The summary follows the claims: pages that stopped claiming are not read after a clean stop. */
static void test_summary_shrinks(void)
{
	struct rig r;
	int restored;
	uint8_t *sum;
	unsigned bits = 0;

	rig_start(&r, 2u << 20);
	workload(&r, 1000);
	CU_ASSERT_EQUAL_FATAL(hl_cache_meta_sync(r.d, &r.l, r.c), 0);
	CU_ASSERT_TRUE(summary_covers_claims(&r));
	for (uint16_t lun = 0; lun < NLUN; lun++)
		CU_ASSERT_EQUAL(hl_cache_core_invalidate(r.c, lun, 0, UINT64_MAX), 0);
	CU_ASSERT_EQUAL_FATAL(hl_cache_meta_close(r.d, &r.l, r.c), 0);
	sum = malloc(r.l.sum_len);
	CU_ASSERT_FATAL(r.d->ops->pread(r.d, sum, r.l.sum_len, r.l.sum_off) == 0);
	for (uint64_t i = 0; i < r.l.sum_len; i++)
		bits += (unsigned)__builtin_popcount(sum[i]);
	CU_ASSERT_EQUAL(bits, 0);
	CU_ASSERT_EQUAL(recover_and_check(&r, &restored), 0);
	CU_ASSERT_EQUAL(restored, 0);
	free(sum);
	hl_cache_core_destroy(r.c);
	hl_cache_layout_release(&r.l);
	hl_cache_dev_close(r.d);
}

static void test_file_device(void)
{
	char path[] = "/var/tmp/hl-cache-ut-XXXXXX";
	int fd = mkstemp(path);
	struct hl_cache_dev *d;
	struct hl_cache_layout l;
	uint8_t *buf = NULL;

	CU_ASSERT_FATAL(fd >= 0);
	close(fd);
	int rc = hl_cache_dev_open_file(path, 4u << 20, &d);
	if (rc == -EINVAL) {
		/* This file system has no O_DIRECT: nothing to test here. */
		unlink(path);
		return;
	}
	CU_ASSERT_FATAL(rc == 0);
	CU_ASSERT_EQUAL(d->size, 4u << 20);
	CU_ASSERT_EQUAL(hl_cache_meta_format(d, 65536, &l), 0);
	CU_ASSERT_FATAL(posix_memalign((void **)&buf, 4096, 65536) == 0);
	memset(buf, 0x3c, 65536);
	CU_ASSERT_EQUAL(d->ops->pwrite(d, buf, 65536, l.data_off), 0);
	memset(buf, 0, 65536);
	CU_ASSERT_EQUAL(d->ops->pread(d, buf, 65536, l.data_off), 0);
	CU_ASSERT_EQUAL(buf[65535], 0x3c);
	CU_ASSERT_EQUAL(d->ops->pread(d, buf, 65536, d->size), -EINVAL);
	CU_ASSERT_EQUAL(d->ops->flush(d), 0);
	free(buf);
	hl_cache_layout_release(&l);
	hl_cache_dev_close(d);
	unlink(path);
}

static const struct hl_test tests[] = {
    {"layout of records and data", test_layout},
    {"warm restart after a clean close", test_warm_restart},
    {"claims of a sync in flight need barriers", test_claims_of_a_sync_in_flight},
    {"records dropped at load still claim until rewritten", test_dropped_records_still_claim},
    {"a write to a block whose dropped record still claims it syncs first", test_dropped_claim_then_write},
    {"a second fill of a newly taken slot waits for its barrier", test_second_fill_before_take_barrier},
    {"torn, foreign and missing superblocks", test_bad_superblock},
    {"crash (torn write) at every device write: nothing stale", test_torn_write_every_step},
    {"a big drop, then writes, refills, syncs: a crash at each write, nothing stale", test_big_drop_crash_every_write},
    {"stale claims not tracked (no memory): a crash at each write across the overflow and its "
     "recovery, nothing stale; writes direct again after", test_stale_overflow_crash_every_write},
    {"a big drop in chunks with I/O and syncs between them: never served, a crash at each write", test_chunked_drop},
    {"write after an eviction whose record is not rewritten yet", test_stale_claim_after_eviction},
    {"a second write to a sector whose unclaim is pending syncs too", test_second_write_before_barrier},
    {"format writes the superblocks and the summary, no record page", test_format_writes_no_records},
    {"records of an earlier format or junk are never restored", test_leftover_records_never_restored},
    {"a cache of format version 1 starts cold", test_version_1_starts_cold},
    {"the page summary follows the claims", test_summary_shrinks},
    {"O_DIRECT file device", test_file_device},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("cache_meta", tests);
}
