/*
 * cache_lazy_ut.c - the lazy restore of the cache's records
 * (docs/cache-format.md, "Lazy restore"): writes before a record is
 * loaded, the lock holds, admission changes, a crash after every write
 * during a restore, clean stops, the filter's and durable copy's bounds,
 * bad ranges, and a sync's split holds. Fixture: cache_meta_ut_lib.h.
 */
#include "cache_meta_ut_lib.h"

/* The version of the newest intact superblock copy, and *nranges (its list of written blocks). */
static uint32_t sb_current(struct rig *r, uint32_t *nranges)
{
	uint8_t sb[8192];
	uint64_t best = 0;
	uint32_t v = 0;

	CU_ASSERT_FATAL(r->d->ops->pread(r->d, sb, sizeof(sb), 0) == 0);
	*nranges = 0;
	for (int i = 0; i < 2; i++) {
		const uint8_t *b = sb + i * 4096;
		uint32_t crc, ver, n;
		uint64_t seq;
		memcpy(&crc, b + 4092, 4);
		if (memcmp(b, "HLCACHE", 8) || crc != ut_crc32c(b, 4092))
			continue;
		memcpy(&seq, b + 56, 8);
		memcpy(&ver, b + 8, 4);
		memcpy(&n, b + 104, 4);
		if (seq >= best) {
			best = seq;
			v = ver;
			*nranges = ver == 4 ? n : 0;
		}
	}
	return v;
}

static uint64_t lazy_rs;
static uint64_t lazy_fills;
static void rs_seed_lazy(void)
{
	lazy_rs = 0x9e3779b97f4a7c15ull;
}

/* n random operations (reads only unless writes) on the blocks the warm-up used. */
static void lazy_ops(struct rig *r, bool writes, unsigned n)
{
	uint64_t save = rs;

	rs = lazy_rs;
	for (unsigned i = 0; i < n && !r->crashed; i++) {
		bool had_pending = r->npend != 0;
		uint16_t lun = (uint16_t)(rnd() % NLUN);
		uint64_t hot = rnd() % 4 ? rnd() % 80 : rnd() % (LUNSECT - 8);
		uint64_t off = hot * HL_CACHE_SECTOR;
		unsigned kind = (unsigned)(rnd() % 100);
		if (!writes || kind < 55) {
			do_read(r, lun, off, (1 + rnd() % 4) * HL_CACHE_SECTOR, rnd() % 3 == 0);
		} else if (kind < 90) {
			do_write(r, lun, off + (rnd() % 3) * 512, 512 * (1 + rnd() % 20));
		} else if (kind < 96) {
			do_invalidate(r, lun, off, (1 + rnd() % 6) * HL_CACHE_SECTOR);
		} else {
			dev_io(r, hl_cache_meta_sync(r->d, &r->l, r->c));
		}
		if (had_pending)
			finish_pending(r);
	}
	lazy_rs = rs;
	rs = save;
}

/* ---- lazy restore (docs/cache-format.md, "Lazy restore") ---- */

/* A warm device: 3000 ops of churn, then a clean close. The rig keeps the device. */
static void lazy_warm(struct rig *r)
{
	rig_start(r, 8u << 20); /* 4 record pages */
	workload(r, 3000);
	CU_ASSERT_FALSE_FATAL(r->crashed);
	CU_ASSERT_EQUAL_FATAL(hl_cache_meta_close(r->d, &r->l, r->c), 0);
	hl_cache_core_destroy(r->c);
	r->c = NULL;
	hl_cache_layout_release(&r->l);
	hl_cache_dev_mem_reset(r->d);
}

/* Begin a lazy load of the rig's device into a fresh core. */
static void lazy_begin(struct rig *r, struct hl_cache_restore *lrs)
{
	r->c = new_core(&r->l);
	CU_ASSERT_EQUAL_FATAL(hl_cache_meta_load_begin(r->d, r->c, &r->l, lrs), 0);
	CU_ASSERT_FATAL(lrs->pages >= 3);
}

/* The same when the device may fail at once. @return 0 or -errno (r->crashed). */
static int lazy_try_begin(struct rig *r, struct hl_cache_restore *lrs)
{
	int rc;

	r->c = new_core(&r->l);
	rc = dev_io(r, hl_cache_meta_load_begin(r->d, r->c, &r->l, lrs));
	if (!rc)
		CU_ASSERT_FATAL(lrs->pages >= 3);
	return rc;
}

/* Every slot r->c holds on the device matches the origin. @return sectors that differ. */
static unsigned check_all_slots(struct rig *r, struct hl_cache_core *c)
{
	unsigned bad = 0;

	for (uint32_t s = 0; s < r->l.nslots; s++) {
		struct hl_cache_slot_rec rec;
		if (hl_cache_core_slot_get(c, s, &rec))
			bad += check_data(r, rec.lun, s, rec.block, rec.valid);
	}
	return bad;
}

/* The last record the loader will reach (found on a copy loaded at once): its slot, *rec. */
static uint32_t lazy_last_record(struct rig *r, struct hl_cache_slot_rec *rec)
{
	uint32_t last = HL_CACHE_NO_SLOT;
	int n;
	struct hl_cache_core *all = load_copy(r, false, &n);

	CU_ASSERT_FATAL(n > 10);
	for (uint32_t s = 0; s < r->l.nslots; s++)
		if (hl_cache_core_slot_get(all, s, rec))
			last = s;
	CU_ASSERT_FATAL(last != HL_CACHE_NO_SLOT);
	CU_ASSERT_FATAL(hl_cache_core_slot_get(all, last, rec));
	hl_cache_core_destroy(all);
	return last;
}

/*
 * batch 0: the rest loaded without a lock, a page a step; else as the
 * loader thread does (engine_restore.c): under a lock, batch pages a hold,
 * real-time holds when allowed, whole read chunks a step.
 */
static void lazy_write_before_load(uint32_t batch)
{
	struct rig r;
	struct hl_cache_restore lrs;
	struct hl_cache_slot_rec rec;
	uint32_t last = HL_CACHE_NO_SLOT;
	pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER, sum_lock = PTHREAD_MUTEX_INITIALIZER;
	pthread_mutex_t *lk = batch ? &lock : NULL, *slk = batch ? &sum_lock : NULL;
	struct sched_param sp;
	int64_t left;

	lazy_warm(&r);
	lazy_begin(&r, &lrs);
	if (batch) {
		CU_ASSERT_EQUAL_FATAL(pthread_getschedparam(pthread_self(), &lrs.sched_policy, &sp), 0);
		lrs.sched_prio = sp.sched_priority;
		lrs.rt_hold = lrs.sched_policy != SCHED_FIFO && lrs.sched_policy != SCHED_RR;
	}
	last = lazy_last_record(&r, &rec);
	/* Half the pages restored, then the block of the last record is written. */
	left = hl_cache_meta_load_step(r.d, &r.l, r.c, &lrs, NULL, NULL, 1, 1);
	CU_ASSERT(left > 0);
	/* Until "pending" is durable every write syncs first. */
	CU_ASSERT(hl_cache_core_write_needs_sync(r.c, rec.lun, 0, 512));
	do_write(&r, rec.lun, rec.block * BS, BS);
	CU_ASSERT_FALSE_FATAL(r.crashed);
	/* The write made "pending" durable first (it synced), and then needs no more syncs. */
	CU_ASSERT_EQUAL(r.l.sb_state, 3u);
	CU_ASSERT_FALSE(hl_cache_core_write_needs_sync(r.c, rec.lun, rec.block * BS, 512));
	while ((left = hl_cache_meta_load_step(r.d, &r.l, r.c, &lrs, lk, slk, batch ? 0 : 1,
	                                       batch ? batch : 1)) > 0)
		;
	CU_ASSERT_EQUAL(left, 0);
	CU_ASSERT(lrs.filtered >= 1);
	CU_ASSERT(lrs.restored > 10);
	if (batch) /* (more than a page a hold, unless a hold passed 200 us) */
		CU_ASSERT(lrs.holds < lrs.pages);
	/* The record was dropped: nothing of the block is in the cache. */
	CU_ASSERT_FALSE(hl_cache_core_slot_get(r.c, last, &rec));
	CU_ASSERT_EQUAL(check_all_slots(&r, r.c), 0);
	do_read(&r, rec.lun, rec.block * BS, BS, false);
	CU_ASSERT_EQUAL(r.bad_hits, 0);
	/* Finish: the dropped record's page is rewritten, then the state is open again. */
	CU_ASSERT_EQUAL(hl_cache_meta_load_finish(r.d, &r.l, r.c, lk), 0);
	CU_ASSERT_EQUAL(r.l.sb_state, 2u);
	/* A crash now: the next load is warm and restores nothing stale. */
	int restored;
	CU_ASSERT_EQUAL(recover_and_check(&r, &restored), 0);
	CU_ASSERT(restored > 10);
	if (batch) { /* an ordinary thread again */
		int policy;
		CU_ASSERT_EQUAL(pthread_getschedparam(pthread_self(), &policy, &sp), 0);
		CU_ASSERT_EQUAL(policy, lrs.sched_policy);
	}
	hl_cache_core_destroy(r.c);
	hl_cache_layout_release(&r.l);
	hl_cache_restore_release(&lrs);
	hl_cache_dev_close(r.d);
}

static void test_lazy_write_before_load(void)
{
	lazy_write_before_load(0);
}

static void test_lazy_write_before_load_batched(void)
{
	lazy_write_before_load(4);
}

/*
 * The restore under a lock, as the loader thread runs it: it holds the
 * lock as a real-time thread and is an ordinary one again after each
 * batch (or, refused, says so), it gives way to a read that waits (here
 * one that never comes: 10 ms a batch, no more), it measures every hold,
 * and what it restores is the same.
 */
static void test_lazy_locked_holds(void)
{
	struct rig r;
	struct hl_cache_restore lrs;
	pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER, sum_lock = PTHREAD_MUTEX_INITIALIZER;
	atomic_uint waiting = 1;
	struct sched_param sp;
	int policy, prio;
	int64_t left;
	uint64_t steps = 0;
	struct timespec t0, t1;

	lazy_warm(&r);
	lazy_begin(&r, &lrs);
	CU_ASSERT_EQUAL_FATAL(pthread_getschedparam(pthread_self(), &policy, &sp), 0);
	prio = sp.sched_priority;
	lrs.sched_policy = policy;
	lrs.sched_prio = prio;
	lrs.rt_hold = policy != SCHED_FIFO && policy != SCHED_RR;
	lrs.waiters = &waiting;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	left = hl_cache_meta_load_step(r.d, &r.l, r.c, &lrs, &lock, &sum_lock, 2, 1);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	CU_ASSERT(left > 0);
	/* Each batch (one or two) followed by a wait for the read: 10 ms each, bounded. */
	CU_ASSERT(lrs.holds >= 1 && lrs.holds <= 2);
	CU_ASSERT_EQUAL(lrs.gave_way, lrs.holds);
	CU_ASSERT(lrs.gave_way_ns >= lrs.holds * 10000000ull);
	CU_ASSERT((uint64_t)(t1.tv_sec - t0.tv_sec) < 2);
	/* Back to what the thread was between holds (and the lock is free). */
	CU_ASSERT_EQUAL(pthread_getschedparam(pthread_self(), &policy, &sp), 0);
	CU_ASSERT_EQUAL(policy, lrs.sched_policy);
	CU_ASSERT_EQUAL(sp.sched_priority, prio);
	CU_ASSERT(lrs.rt_hold || lrs.rt_refused || lrs.sched_policy == SCHED_FIFO ||
	          lrs.sched_policy == SCHED_RR);
	CU_ASSERT_EQUAL(pthread_mutex_trylock(&lock), 0);
	pthread_mutex_unlock(&lock);
	/* The read has had the lock: no more waiting. */
	waiting = 0;
	while ((left = hl_cache_meta_load_step(r.d, &r.l, r.c, &lrs, &lock, &sum_lock, 0, 1)) > 0)
		steps++;
	CU_ASSERT_EQUAL(left, 0);
	CU_ASSERT(lrs.gave_way >= 1 && lrs.gave_way <= 2); /* (none since) */
	CU_ASSERT(lrs.holds > lrs.gave_way);
	CU_ASSERT_EQUAL(lrs.worst[0].wall_ns, lrs.max_hold_ns);
	for (unsigned i = 1; i < HL_CACHE_RS_WORST; i++)
		CU_ASSERT(lrs.worst[i].wall_ns <= lrs.worst[i - 1].wall_ns);
	CU_ASSERT(lrs.hold_ns >= lrs.max_hold_ns);
	CU_ASSERT_EQUAL(pthread_getschedparam(pthread_self(), &policy, &sp), 0);
	CU_ASSERT_EQUAL(policy, lrs.sched_policy);
	CU_ASSERT(lrs.restored > 10);
	CU_ASSERT_EQUAL(check_all_slots(&r, r.c), 0);
	CU_ASSERT_EQUAL(hl_cache_meta_load_finish(r.d, &r.l, r.c, &lock), 0);
	(void)steps;
	hl_cache_core_destroy(r.c);
	hl_cache_layout_release(&r.l);
	hl_cache_restore_release(&lrs);
	hl_cache_dev_close(r.d);
}

/*
 * The admission policy changed at run time (a config reload) while the
 * loader restores: the filter of blocks written meanwhile must survive it.
 * The memory a lost filter leaves behind is reused at once here (the
 * reactors allocate all the time), so a record written before it was
 * loaded would come back valid over the origin's newer data.
 */
static void test_lazy_admission_change(void)
{
	struct rig r;
	struct hl_cache_restore lrs;
	struct hl_cache_slot_rec rec;
	uint32_t last = HL_CACHE_NO_SLOT;
	uint8_t *reuse;
	int64_t left;

	lazy_warm(&r);
	lazy_begin(&r, &lrs);
	last = lazy_last_record(&r, &rec);
	left = hl_cache_meta_load_step(r.d, &r.l, r.c, &lrs, NULL, NULL, 1, 1);
	CU_ASSERT_FATAL(left > 0);
	do_write(&r, rec.lun, rec.block * BS, BS);
	CU_ASSERT_FALSE_FATAL(r.crashed);
	CU_ASSERT_EQUAL(hl_cache_core_set_admission(r.c, HL_ADMIT_ALWAYS, 0), 0);
	/* Whatever the filter's memory was, something else may own it now. */
	reuse = malloc(4096 * 24);
	CU_ASSERT_FATAL(reuse != NULL);
	memset(reuse, 0xa5, 4096 * 24);
	while ((left = hl_cache_meta_load_step(r.d, &r.l, r.c, &lrs, NULL, NULL, 1, 1)) > 0)
		;
	CU_ASSERT_EQUAL(left, 0);
	/* (fatal: a lost filter would also be freed twice by the finish) */
	CU_ASSERT_EQUAL_FATAL(check_all_slots(&r, r.c), 0);
	CU_ASSERT(lrs.filtered >= 1);
	CU_ASSERT_FALSE(hl_cache_core_slot_get(r.c, last, &rec));
	CU_ASSERT_EQUAL(hl_cache_meta_load_finish(r.d, &r.l, r.c, NULL), 0);
	free(reuse);
	hl_cache_core_destroy(r.c);
	hl_cache_layout_release(&r.l);
	hl_cache_restore_release(&lrs);
	hl_cache_dev_close(r.d);
}

/*
 * A lazy restore with I/O interleaved: after each page, writes (partial,
 * unaligned), reads (hits checked, misses not filled), invalidations and
 * syncs, then more I/O once the restore finished. writes: false for reads
 * only. @return true when the device died before the restore's finish
 * (from then on no slot was taken: every record of a block not touched is
 * still on the device).
 */
static bool lazy_scenario(struct rig *r, bool writes)
{
	struct hl_cache_restore lrs;
	int64_t left = 1;
	bool in_restore;

	if (lazy_try_begin(r, &lrs))
		return true;
	rs_seed_lazy();
	while (left > 0 && !r->crashed) {
		left = hl_cache_meta_load_step(r->d, &r->l, r->c, &lrs, NULL, NULL, 1, 1);
		if (left < 0) {
			r->crashed = true;
			break;
		}
		lazy_ops(r, writes, 12);
	}
	in_restore = r->crashed;
	struct hl_cache_stats st;
	if (!hl_cache_core_stats(r->c, -1, &st))
		lazy_fills += st.admissions; /* misses filled while restoring (rule 5) */
	if (!r->crashed && dev_io(r, hl_cache_meta_load_finish(r->d, &r->l, r->c, NULL)))
		hl_cache_core_restore_end(r->c);
	if (!r->crashed)
		lazy_ops(r, writes, 40);
	if (r->npend)
		finish_pending(r);
	hl_cache_restore_release(&lrs);
	return in_restore;
}

/* The (lun, block) of every record a load of the device restores, as a map. */
static void records_of(struct hl_cache_core *c, const struct hl_cache_layout *l,
                       bool held[NLUN][LUNBLK])
{
	memset(held, 0, sizeof(bool) * NLUN * LUNBLK);
	for (uint32_t s = 0; s < l->nslots; s++) {
		struct hl_cache_slot_rec rec;
		if (hl_cache_core_slot_get(c, s, &rec) && rec.lun < NLUN && rec.block < LUNBLK)
			held[rec.lun][rec.block] = true;
	}
}

struct crash_tally {
	uint64_t warm, cold, lost, ranged, runs;
	unsigned bad;
};

/*
 * Reboot after a crash: an eager load (a cold start when it is refused),
 * then check every restored sector against the origin and, when the crash
 * came during the restore, that every block of before (the records before
 * it) not touched since is restored.
 */
static void reboot_check(struct rig *r, bool in_restore, bool before[NLUN][LUNBLK],
                         struct crash_tally *t)
{
	struct hl_cache_core *c;
	int restored;
	uint32_t nr;

	hl_cache_layout_release(&r->l);
	hl_cache_dev_mem_reset(r->d);
	t->ranged += sb_current(r, &nr) == 4;
	t->runs++;
	c = new_core(&r->l);
	restored = hl_cache_meta_load(r->d, c, &r->l);
	if (restored == -ENODATA) {
		t->cold++;
		CU_ASSERT_FATAL(hl_cache_meta_format(r->d, BS, &r->l) == 0);
	} else {
		bool after[NLUN][LUNBLK];
		CU_ASSERT_FATAL(restored >= 0);
		t->warm += restored > 0;
		t->bad += check_all_slots(r, c);
		records_of(c, &r->l, after);
		for (uint16_t lun = 0; in_restore && lun < NLUN; lun++)
			for (uint64_t b = 0; b < LUNBLK; b++)
				t->lost += before[lun][b] && !touched[lun][b] && !after[lun][b];
	}
	hl_cache_core_destroy(c);
	hl_cache_layout_release(&r->l);
}

/* The rig's device as an image, with the origin and the touched blocks. */
struct lazy_img {
	uint8_t *dev;
	uint32_t org[NLUN][LUNSECT];
	bool tch[NLUN][LUNBLK];
};

static void img_save(struct rig *r, struct lazy_img *m)
{
	hl_cache_dev_mem_reset(r->d);
	m->dev = malloc(r->d->size);
	CU_ASSERT_FATAL(m->dev != NULL);
	CU_ASSERT_FATAL(r->d->ops->pread(r->d, m->dev, r->d->size, 0) == 0);
	memcpy(m->org, origin, sizeof(origin));
	memcpy(m->tch, touched, sizeof(touched));
}

/* Back to image m; the device dies at its n-th write from now (torn one way or another). */
static void img_restore(struct rig *r, const struct lazy_img *m, uint64_t n)
{
	static const size_t torn[] = {0, 512, 1000, 2048, 4095};

	hl_cache_dev_mem_reset(r->d);
	CU_ASSERT_FATAL(r->d->ops->pwrite(r->d, m->dev, r->d->size, 0) == 0);
	hl_cache_dev_mem_reset(r->d);
	memcpy(origin, m->org, sizeof(origin));
	memcpy(touched, m->tch, sizeof(touched));
	r->crashed = false;
	r->bad_hits = 0;
	r->npend = 0;
	if (n != UINT64_MAX)
		hl_cache_dev_mem_fail_at(r->d, hl_cache_dev_mem_writes(r->d) + n, torn[n % 5]);
}

/* Device writes of a scenario that does not crash, from image m (left as it ends). */
static uint64_t lazy_count_writes(struct rig *r, const struct lazy_img *m, bool writes)
{
	uint64_t base;

	img_restore(r, m, UINT64_MAX);
	base = hl_cache_dev_mem_writes(r->d);
	lazy_scenario(r, writes);
	CU_ASSERT_FALSE_FATAL(r->crashed);
	CU_ASSERT_EQUAL(r->bad_hits, 0);
	hl_cache_core_destroy(r->c);
	hl_cache_layout_release(&r->l);
	r->c = NULL;
	return hl_cache_dev_mem_writes(r->d) - base;
}

/* The records a load of the device restores (on a copy). */
static void records_on_device(struct rig *r, bool held[NLUN][LUNBLK])
{
	int n;
	struct hl_cache_core *c = load_copy(r, false, &n);

	CU_ASSERT_FATAL(n > 0);
	records_of(c, &r->l, held);
	hl_cache_core_destroy(c);
}

/*
 * After a crash during a restore that left the blocks written in the
 * superblock: a second restore from there, killed at every m-th device
 * write (step), each followed by a reboot and its checks.
 */
static void lazy_second_crashes(struct rig *r, bool before[NLUN][LUNBLK], uint64_t step,
                                struct crash_tally *t)
{
	struct lazy_img m2;
	uint64_t total;

	img_save(r, &m2);
	hl_cache_layout_release(&r->l); /* (its nslots stay: new_core's) */
	total = lazy_count_writes(r, &m2, true);
	for (uint64_t m = 0; m <= total; m += step) {
		bool in;
		img_restore(r, &m2, m);
		in = lazy_scenario(r, true);
		t->bad += (unsigned)r->bad_hits;
		hl_cache_core_destroy(r->c);
		r->c = NULL;
		reboot_check(r, in, before, t);
		if (t->bad || t->lost) {
			fprintf(stderr, "lazy restore: a second crash at write %llu: %u stale, %llu lost\n",
			        (unsigned long long)m, t->bad, (unsigned long long)t->lost);
			break;
		}
	}
	img_restore(r, &m2, UINT64_MAX);
	free(m2.dev);
}

static void test_lazy_crash_every_write(void)
{
	for (int writes = 1; writes >= 0; writes--) {
		struct rig r;
		struct lazy_img m;
		struct crash_tally t = {0}, t2 = {0};
		bool before[NLUN][LUNBLK];
		uint64_t total;

		lazy_warm(&r);
		memset(touched, 0, sizeof(touched));
		records_on_device(&r, before);
		img_save(&r, &m);
		lazy_fills = 0;
		total = lazy_count_writes(&r, &m, writes);
		fprintf(stderr, "\n  lazy writes=%d: %llu device writes, %llu misses filled while restoring",
		        writes, (unsigned long long)total, (unsigned long long)lazy_fills);
		CU_ASSERT(total > (writes ? 20u : 1u));

		for (uint64_t n = 0; n <= total; n++) {
			bool in;
			img_restore(&r, &m, n);
			in = lazy_scenario(&r, writes);
			t.bad += (unsigned)r.bad_hits;
			hl_cache_core_destroy(r.c);
			r.c = NULL;
			/* Every 4th crash during a restore with writes: a second restore, killed too. */
			if (writes && in && n % 4 == 2)
				lazy_second_crashes(&r, before, 3, &t2);
			reboot_check(&r, in, before, &t);
			if (t.bad || t.lost || t2.bad || t2.lost) {
				fprintf(stderr, "lazy restore: crash at write %llu: %u stale, %llu lost\n",
				        (unsigned long long)n, t.bad, (unsigned long long)t.lost);
				break;
			}
		}
		CU_ASSERT_EQUAL(t.bad, 0);
		CU_ASSERT_EQUAL(t2.bad, 0);
		/* Every crash keeps the cache warm, written while restoring or not ... */
		CU_ASSERT_EQUAL(t.cold, 0);
		CU_ASSERT_EQUAL(t.warm, total + 1);
		/* ... with every block not written: */
		CU_ASSERT_EQUAL(t.lost, 0);
		if (writes) {
			/* Crashes after a write left the blocks written in the superblock. */
			CU_ASSERT(t.ranged > 0);
			CU_ASSERT(t2.runs > 10);
			CU_ASSERT(t2.ranged > 0);
			CU_ASSERT_EQUAL(t2.cold, 0);
			CU_ASSERT_EQUAL(t2.lost, 0);
		} else {
			CU_ASSERT_EQUAL(t.ranged, 0);
		}
		if (getenv("HL_DEBUG_UT"))
			fprintf(stderr,
			        "lazy writes=%d: %llu device writes, %llu warm, %llu cold, %llu ranged; "
			        "second restores: %llu crashes, %llu warm, %llu cold, %llu ranged\n",
			        writes, (unsigned long long)total, (unsigned long long)t.warm,
			        (unsigned long long)t.cold, (unsigned long long)t.ranged,
			        (unsigned long long)t2.runs, (unsigned long long)t2.warm,
			        (unsigned long long)t2.cold, (unsigned long long)t2.ranged);
		free(m.dev);
		hl_cache_dev_close(r.d);
	}
}

/*
 * Fills while restoring (rule 5): a device warm with LUN 0's blocks
 * 0-149 (record pages 0 and 1 marked, 2 and 3 claiming nothing). Before
 * the loader reads a page, misses of LUN 1 fill the pages that claimed
 * nothing and misses of LUN 0's blocks 130-149 (records in page 1, not
 * read yet) fill them too: the loader later finds those records
 * duplicates and drops them as claimed. Between pages: more fills, hits,
 * writes to blocks filled or still claimed on the device, syncs.
 * @return 0, or -1 when the device died.
 */
static int lazy_fill_scenario(struct rig *r, uint64_t *fills, uint64_t *dups)
{
	struct hl_cache_restore lrs;
	struct hl_cache_stats st;
	int64_t left = 1;

	r->c = new_core(&r->l);
	if (dev_io(r, hl_cache_meta_load_begin(r->d, r->c, &r->l, &lrs)))
		return -1;
	for (uint64_t b = 0; b < 60 && !r->crashed; b++)
		do_read(r, 1, b * BS, BS, b % 3 == 0);
	for (uint64_t b = 130; b < 150 && !r->crashed; b++)
		do_read(r, 0, b * BS, BS, b % 4 == 0);
	for (uint64_t k = 0; left > 0 && !r->crashed; k++) {
		left = hl_cache_meta_load_step(r->d, &r->l, r->c, &lrs, NULL, NULL, 1, 1);
		if (left < 0) {
			r->crashed = true;
			break;
		}
		for (uint64_t b = 150 + k * 30; b < 180 + k * 30 && !r->crashed; b++)
			do_read(r, 0, b * BS, BS, b % 5 == 0);
		for (uint64_t b = 90 + k * 20; b < 110 + k * 20 && !r->crashed; b++)
			do_read(r, 0, b * BS, BS, false);
		do_write(r, 0, (135 + k * 3) * BS + 512, 3 * 512);
		do_write(r, 0, (100 + k * 7) * BS, BS);
		do_write(r, 1, k * 5 * BS, BS);
		if (k % 2 && !r->crashed)
			dev_io(r, hl_cache_meta_sync(r->d, &r->l, r->c));
	}
	if (!hl_cache_core_stats(r->c, -1, &st))
		*fills += st.admissions;
	*dups += lrs.dropped;
	if (!r->crashed && dev_io(r, hl_cache_meta_load_finish(r->d, &r->l, r->c, NULL)))
		hl_cache_core_restore_end(r->c);
	for (uint64_t b = 200; b < 240 && !r->crashed; b++)
		do_read(r, 1, b * BS, BS, b % 2 == 0);
	if (r->npend)
		finish_pending(r);
	if (!r->crashed)
		dev_io(r, hl_cache_meta_sync(r->d, &r->l, r->c));
	hl_cache_restore_release(&lrs);
	return r->crashed ? -1 : 0;
}

static void test_lazy_fill_crash_every_write(void)
{
	uint64_t total, base, fills = 0, dups = 0, crashes = 0, warm = 0;
	unsigned bad = 0;
	struct lazy_img m;
	struct rig r;
	int restored;

	rig_start(&r, 8u << 20);
	for (uint64_t b = 0; b < 150; b++)
		do_read(&r, 0, b * BS, BS, false);
	CU_ASSERT_FALSE_FATAL(r.crashed);
	CU_ASSERT_EQUAL_FATAL(hl_cache_meta_close(r.d, &r.l, r.c), 0);
	hl_cache_core_destroy(r.c);
	r.c = NULL;
	hl_cache_layout_release(&r.l);
	memset(touched, 0, sizeof(touched));
	img_save(&r, &m);

	img_restore(&r, &m, UINT64_MAX);
	base = hl_cache_dev_mem_writes(r.d);
	CU_ASSERT_EQUAL_FATAL(lazy_fill_scenario(&r, &fills, &dups), 0);
	total = hl_cache_dev_mem_writes(r.d) - base;
	CU_ASSERT_EQUAL(r.bad_hits, 0);
	/* Misses were filled while restoring, and duplicates of them dropped. */
	CU_ASSERT(fills > 100);
	CU_ASSERT(dups >= 10);
	CU_ASSERT(summary_covers_claims(&r));
	CU_ASSERT_EQUAL(recover_and_check(&r, &restored), 0);
	CU_ASSERT(restored > 150);
	hl_cache_core_destroy(r.c);
	r.c = NULL;
	hl_cache_layout_release(&r.l);
	fprintf(stderr, "\n  fills while restoring: %llu, duplicates dropped: %llu, %llu device writes",
	        (unsigned long long)fills, (unsigned long long)dups, (unsigned long long)total);

	for (uint64_t n = 0; n <= total; n++) {
		img_restore(&r, &m, n);
		lazy_fill_scenario(&r, &fills, &dups);
		crashes += r.crashed;
		bad += (unsigned)r.bad_hits;
		if (!summary_covers_claims(&r))
			bad++;
		bad += recover_and_check(&r, &restored);
		warm += restored > 0;
		hl_cache_core_destroy(r.c);
		r.c = NULL;
		hl_cache_layout_release(&r.l);
		if (bad) {
			fprintf(stderr, "fills while restoring: stale after a crash at write %llu\n",
			        (unsigned long long)n);
			break;
		}
	}
	CU_ASSERT_EQUAL(bad, 0);
	CU_ASSERT_EQUAL(crashes, total);
	CU_ASSERT_EQUAL(warm, total + 1);
	fprintf(stderr, "; a crash at each: %u stale, %llu warm", bad, (unsigned long long)warm);
	free(m.dev);
	hl_cache_dev_close(r.d);
}

/* A clean stop in the middle of a restore: warm, without the blocks written meanwhile. */
static void test_lazy_clean_stop(void)
{
	for (int writes = 0; writes < 2; writes++) {
		struct rig r;
		struct hl_cache_restore lrs;
		struct hl_cache_slot_rec rec;
		uint32_t last;
		int restored;

		lazy_warm(&r);
		lazy_begin(&r, &lrs);
		last = lazy_last_record(&r, &rec);
		CU_ASSERT(hl_cache_meta_load_step(r.d, &r.l, r.c, &lrs, NULL, NULL, 1, 1) > 0);
		if (writes)
			do_write(&r, rec.lun, rec.block * BS, BS);
		else
			do_read(&r, rec.lun, rec.block * BS, BS, false);
		CU_ASSERT_EQUAL(hl_cache_meta_close(r.d, &r.l, r.c), 0);
		hl_cache_core_destroy(r.c);
		hl_cache_layout_release(&r.l);
		r.c = new_core(&r.l);
		/* "pending" with ranges carries version 4: any hotlund before it refuses it. */
		uint8_t sb[8192];
		CU_ASSERT_FATAL(r.d->ops->pread(r.d, sb, sizeof(sb), 0) == 0);
		CU_ASSERT_EQUAL(sb[8] == 4 || sb[4096 + 8] == 4, writes == 1);
		restored = hl_cache_meta_load(r.d, r.c, &r.l);
		CU_ASSERT(restored > 10);
		CU_ASSERT_EQUAL(check_all_slots(&r, r.c), 0);
		/* The record of the block written is dropped, the rest kept. */
		CU_ASSERT_EQUAL(hl_cache_core_slot_get(r.c, last, &rec), writes == 0);
		hl_cache_layout_release(&r.l);
		hl_cache_core_destroy(r.c);
		hl_cache_restore_release(&lrs);
		hl_cache_dev_close(r.d);
	}
}

/* The filter merges neighbours past its bound and never forgets a block. */
static void test_lazy_filter_bound(void)
{
	struct hl_cache_core *c;
	struct hl_cache_layout l = {.nslots = 64};
	struct hl_cache_slot_rec rec = {0};

	c = new_core(&l);
	hl_cache_core_restore_begin(c);
	for (uint64_t b = 0; b < 20000; b++)
		hl_cache_core_invalidate(c, 1, (b * 7) * BS, BS);
	CU_ASSERT(hl_cache_core_restore_need_mark(c));
	for (uint64_t b = 0; b < 20000; b++) {
		rec.lun = 1;
		rec.block = b * 7;
		memset(rec.valid, 1, 1);
		CU_ASSERT_EQUAL(hl_cache_core_slot_restore(c, (uint32_t)(b % 64), &rec), -ESTALE);
	}
	/* Another LUN is untouched. */
	rec.lun = 0;
	rec.block = 7;
	CU_ASSERT_EQUAL(hl_cache_core_slot_restore(c, 3, &rec), 0);
	hl_cache_core_restore_end(c);
	hl_cache_core_destroy(c);
}

/*
 * More ranges written while restoring than a superblock holds: its copy
 * merges neighbours (a crash keeps the rest warm); more LUNs than it holds
 * (disks attached while restoring): it says "all" and a crash is cold.
 */
static void test_lazy_durable_bound(void)
{
	for (int luns = 0; luns < 2; luns++) {
		struct rig r;
		struct hl_cache_restore lrs;
		struct hl_cache_slot_rec rec;
		uint32_t last, nr, ver;
		int restored;

		lazy_warm(&r);
		lazy_begin(&r, &lrs);
		last = lazy_last_record(&r, &rec);
		CU_ASSERT_FATAL(hl_cache_meta_load_step(r.d, &r.l, r.c, &lrs, NULL, NULL, 1, 1) > 0);
		if (luns) {
			/* Disks attached and detached (the core holds fewer at once). */
			for (uint16_t id = 100; id < 400; id++) {
				CU_ASSERT_FATAL(hl_cache_core_lun_add(r.c, id, 0) == 0);
				CU_ASSERT_FATAL(hl_cache_core_lun_remove(r.c, id) == 0);
			}
		} else {
			/* 600 ranges of one LUN, past what the origin of the rig holds. */
			for (uint64_t k = 0; k < 600; k++)
				hl_cache_core_invalidate(r.c, 1, (1000 + 3 * k) * BS, BS);
		}
		CU_ASSERT(hl_cache_core_write_needs_sync(r.c, rec.lun, rec.block * BS, BS));
		do_write(&r, rec.lun, rec.block * BS, BS);
		CU_ASSERT_FALSE_FATAL(r.crashed);
		ver = sb_current(&r, &nr);
		if (luns) {
			CU_ASSERT_EQUAL(ver, 3);
			/* "All" is durable: no write needs to sync for the filter any more. */
			CU_ASSERT_FALSE(hl_cache_core_write_needs_sync(r.c, 0, 77 * BS, BS));
		} else {
			CU_ASSERT_EQUAL(ver, 4);
			CU_ASSERT(nr > 150 && nr <= 221);
			/* The coarse copy covers the gaps too: a write there needs no new copy. */
			CU_ASSERT_FALSE(hl_cache_core_write_needs_sync(r.c, 1, (1000 + 1) * BS, BS));
		}
		/* A crash now (no close). */
		hl_cache_core_destroy(r.c);
		hl_cache_layout_release(&r.l);
		hl_cache_dev_mem_reset(r.d);
		r.c = new_core(&r.l);
		restored = hl_cache_meta_load(r.d, r.c, &r.l);
		if (luns) {
			CU_ASSERT_EQUAL(restored, -ENODATA);
		} else {
			CU_ASSERT(restored > 10);
			CU_ASSERT_EQUAL(check_all_slots(&r, r.c), 0);
			CU_ASSERT_FALSE(hl_cache_core_slot_get(r.c, last, &rec));
			CU_ASSERT_EQUAL(sb_current(&r, &nr), 2);
			hl_cache_layout_release(&r.l);
		}
		hl_cache_core_destroy(r.c);
		hl_cache_restore_release(&lrs);
		hl_cache_dev_close(r.d);
	}
}

/* Superblock range lists that are damaged never restore anything. */
static void test_lazy_bad_ranges(void)
{
	for (int kind = 0; kind < 6; kind++) {
		struct rig r;
		struct hl_cache_restore lrs;
		uint8_t *sb = NULL;
		uint32_t nr, crc;

		lazy_warm(&r);
		lazy_begin(&r, &lrs);
		CU_ASSERT_FATAL(hl_cache_meta_load_step(r.d, &r.l, r.c, &lrs, NULL, NULL, 1, 1) > 0);
		do_write(&r, 0, 0, BS);
		do_write(&r, 0, 40 * BS, BS);
		CU_ASSERT_EQUAL_FATAL(sb_current(&r, &nr), 4);
		CU_ASSERT_EQUAL_FATAL(nr, 2);
		hl_cache_core_destroy(r.c);
		hl_cache_layout_release(&r.l);
		hl_cache_restore_release(&lrs);
		/*
		 * Both copies the same, then damaged: unsorted, lo > hi, a count past
		 * the room, overlapping ranges, a last block past 2^48 - 1 (the top
		 * of the address space), or no range at all.
		 */
		CU_ASSERT_FATAL(posix_memalign((void **)&sb, 4096, 8192) == 0);
		CU_ASSERT_FATAL(r.d->ops->pread(r.d, sb, 8192, 0) == 0);
		uint64_t s0, s1;
		memcpy(&s0, sb + 56, 8);
		memcpy(&s1, sb + 4096 + 56, 8);
		if (s0 < s1)
			memcpy(sb, sb + 4096, 4096);
		if (kind == 0) {
			uint8_t t[18];
			memcpy(t, sb + 112, 18);
			memcpy(sb + 112, sb + 130, 18);
			memcpy(sb + 130, t, 18);
		} else if (kind == 1) {
			uint64_t lo = 50;
			memcpy(sb + 112 + 2, &lo, 8); /* lo 50 > hi 0 */
		} else if (kind == 2) {
			nr = 300;
			memcpy(sb + 104, &nr, 4);
		} else if (kind == 3) {
			uint64_t lo = 0;
			memcpy(sb + 130 + 2, &lo, 8); /* [0, 40] over [0, 0] */
		} else if (kind == 4) {
			uint64_t hi = UINT64_MAX;
			memcpy(sb + 130 + 10, &hi, 8);
		} else {
			nr = 0;
			memcpy(sb + 104, &nr, 4);
		}
		crc = ut_crc32c(sb, 4092);
		memcpy(sb + 4092, &crc, 4);
		memcpy(sb + 4096, sb, 4096);
		CU_ASSERT_FATAL(r.d->ops->pwrite(r.d, sb, 8192, 0) == 0);
		free(sb);
		r.c = new_core(&r.l);
		CU_ASSERT_EQUAL(hl_cache_meta_load(r.d, r.c, &r.l), -ENODATA);
		hl_cache_core_destroy(r.c);
		hl_cache_layout_release(&r.l);
		hl_cache_dev_close(r.d);
	}
}

/*
 * The sync's persisted phase lets the reactors in every 64 record pages
 * (cache_meta_sync_locked: unlock, sched_yield, lock). Between two holds
 * the first 64 pages are persisted and the rest not yet. What a reactor
 * does then must see the snapshot's claims as on the device either way:
 * a write to a claimed sector of a page not persisted yet, and of one
 * persisted already, syncs first; an invalidated block of a page not
 * persisted yet stays a stale claim after the sync (its persisting has
 * the snapshot's epoch, older than the drop), and the fill that reuses
 * its slot takes a barrier. Then the gateway dies: nothing stale.
 * sched_yield is this program's own: in a sync with a lock it is only
 * called between two holds, where the hook acts as a reactor would.
 */
int cache_meta_sync_locked(struct hl_cache_dev *d, struct hl_cache_layout *l,
                           struct hl_cache_core *c, pthread_mutex_t *lock);

static void (*yield_hook)(void);
static unsigned yields;

int sched_yield(void)
{
	void (*f)(void) = yield_hook;

	yields++;
	yield_hook = NULL;
	if (f)
		f();
	return 0;
}

#define SPLIT_PAGES 66u
static struct rig *split_rig;
static pthread_mutex_t split_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t split_slot[3]; /* page 65: written, page 65: invalidated, page 10: written */
static uint64_t split_block[3];
static struct hl_cache_io split_wios[2][16];
static int split_wn[2];
static bool split_wsync[2], split_inv_sync, split_fill_barrier, split_hooked;

/* The block read into slot i (slots are taken in order while all are FREE). */
static uint64_t split_block_of(uint32_t i, uint32_t per)
{
	if (i == 10 * per + 5)
		return 1;
	if (i >= 65 * per)
		return 10 + (i - 65 * per); /* < 300: the origin model tracks them */
	return 300 + i;
}

static void split_write_begin(int k, uint64_t block)
{
	struct rig *r = split_rig;
	uint64_t off = block * BS + HL_CACHE_SECTOR;

	split_wsync[k] = hl_cache_core_write_needs_sync(r->c, 0, off, HL_CACHE_SECTOR);
	split_wn[k] = hl_cache_core_write_begin(r->c, 0, off, HL_CACHE_SECTOR, split_wios[k], 16);
	CU_ASSERT_FATAL(split_wn[k] >= 0);
	for (int i = 0; i < split_wn[k]; i++)
		split_wsync[k] |= split_wios[k][i].meta_barrier != 0;
	touch(0, off, HL_CACHE_SECTOR);
}

/* After the sync it waited for: the origin, then the cache (as do_write). */
static void split_write_end(int k, uint64_t block)
{
	struct rig *r = split_rig;
	uint64_t sect = (block * BS + HL_CACHE_SECTOR) / HL_CACHE_SECTOR;

	origin[0][sect]++;
	for (int i = 0; i < split_wn[k]; i++) {
		struct hl_cache_io *io = &split_wios[k][i];
		hl_cache_core_write_end(r->c, 0, io, true);
		if (!io->fill_nsect)
			continue;
		bool ok = hl_cache_core_io_start(r->c, 0, io) &&
		          put_data(r, 0, io->slot, io->block, io->fill_first, io->fill_nsect) == 0;
		hl_cache_core_io_end(r->c, 0, io, ok);
	}
}

static void split_between_holds(void)
{
	struct rig *r = split_rig;
	struct hl_cache_io ios[16];
	uint64_t inv = split_block[1];
	int n;

	pthread_mutex_lock(&split_lock); /* (a reactor: the sync does not hold it here) */
	split_hooked = true;
	split_write_begin(0, split_block[0]); /* page 65: claimed, not persisted yet */
	split_write_begin(1, split_block[2]); /* page 10: claimed, persisted */
	hl_cache_core_invalidate(r->c, 0, inv * BS, BS);
	touch(0, inv * BS, BS);
	split_inv_sync = hl_cache_core_write_needs_sync(r->c, 0, inv * BS, BS);
	/* Every slot is taken but the invalidated one: a new block's miss takes it. */
	n = hl_cache_core_read(r->c, 1, 0, BS, ios, 16);
	CU_ASSERT_FATAL(n == 1);
	CU_ASSERT_EQUAL(ios[0].slot, split_slot[1]);
	split_fill_barrier = ios[0].meta_barrier != 0;
	memcpy(r->pend, ios, sizeof(ios[0]));
	r->npend = 1;
	r->pend_lun = 1;
	pthread_mutex_unlock(&split_lock);
}

static void test_sync_split_holds(void)
{
	struct hl_cache_layout l;
	uint64_t dev = 0;
	uint32_t per = 0;
	struct rig r;
	int restored;

	memset(touched, 0, sizeof(touched));
	/* A device of 66 record pages, the last one holding 100 slots. */
	for (uint64_t mib = 64; mib < 512 && !dev; mib++) {
		for (uint64_t sz = mib << 20; sz < (mib + 1) << 20; sz += BS) {
			CU_ASSERT_FATAL(hl_cache_layout_compute(sz, BS, &l) == 0);
			per = 4096 / l.rec_size;
			bool fits = l.nslots == 65ull * per + 100;
			hl_cache_layout_release(&l);
			if (fits) {
				dev = sz;
				break;
			}
		}
	}
	CU_ASSERT_FATAL(dev != 0);
	rig_start(&r, dev);
	CU_ASSERT_EQUAL_FATAL(r.l.nslots, 65ull * per + 100);
	for (uint32_t i = 0; i < r.l.nslots; i++) {
		do_read(&r, 0, split_block_of(i, per) * BS, BS, false);
		CU_ASSERT_EQUAL_FATAL(hl_cache_core_peek(r.c, 0, split_block_of(i, per), NULL), i);
	}
	split_slot[0] = 65 * per + 3;
	split_slot[1] = 65 * per + 7;
	split_slot[2] = 10 * per + 5;
	for (int k = 0; k < 3; k++)
		split_block[k] = split_block_of(split_slot[k], per);
	CU_ASSERT_FALSE(r.crashed);

	/* One sync of all 66 pages: the hook runs before page 64 is persisted. */
	split_rig = &r;
	split_hooked = false;
	yield_hook = split_between_holds;
	yields = 0;
	CU_ASSERT_EQUAL_FATAL(cache_meta_sync_locked(r.d, &r.l, r.c, &split_lock), 0);
	yield_hook = NULL;
	CU_ASSERT_TRUE_FATAL(split_hooked);
	CU_ASSERT_EQUAL(yields, 1); /* 66 pages: one yield, after 64 */
	CU_ASSERT_TRUE(split_wsync[0]);
	CU_ASSERT_TRUE(split_wsync[1]);
	CU_ASSERT_TRUE(split_inv_sync);
	CU_ASSERT_TRUE(split_fill_barrier);
	/* The drop came after the snapshot: its claim outlives page 65's persisting. */
	CU_ASSERT_TRUE(hl_cache_core_write_needs_sync(r.c, 0, split_block[1] * BS, BS));

	/* The syncs the writes and the invalidation waited for, then the origin. */
	CU_ASSERT_EQUAL_FATAL(hl_cache_meta_sync(r.d, &r.l, r.c), 0);
	split_write_end(0, split_block[0]);
	split_write_end(1, split_block[2]);
	for (uint64_t s = split_block[1] * SPB; s < (split_block[1] + 1) * SPB; s++)
		origin[0][s] += 1000;
	CU_ASSERT_FALSE(hl_cache_core_write_needs_sync(r.c, 0, split_block[1] * BS, BS));
	/* The fill into the invalidated block's slot: barrier, data. */
	finish_pending(&r);
	CU_ASSERT_FALSE(r.crashed);
	CU_ASSERT_EQUAL(r.bad_hits, 0);
	/* The gateway dies now: no further sync. */
	CU_ASSERT_EQUAL(recover_and_check(&r, &restored), 0);
	CU_ASSERT(restored > (int)(60 * per));
	hl_cache_core_destroy(r.c);
	hl_cache_layout_release(&r.l);
	hl_cache_dev_close(r.d);
}

static const struct hl_test tests[] = {
    {"a sync's persisting in holds of 64 pages: claims hold between the holds", test_sync_split_holds},
    {"lazy restore: a write before its record is loaded drops the record", test_lazy_write_before_load},
    {"lazy restore: the same restored 4 pages a hold under a lock, real-time holds", test_lazy_write_before_load_batched},
    {"lazy restore: under a lock: real-time holds, gives way to a waiting read, measured", test_lazy_locked_holds},
    {"lazy restore: an admission change keeps the written blocks' filter", test_lazy_admission_change},
    {"lazy restore: crash at every device write, with and without writes", test_lazy_crash_every_write},
    {"lazy restore: a clean stop in the middle", test_lazy_clean_stop},
    {"lazy restore: misses filled while restoring, a crash at every write: nothing stale", test_lazy_fill_crash_every_write},
    {"lazy restore: the bounded filter never forgets a block", test_lazy_filter_bound},
    {"lazy restore: the superblock's copy of the filter: merged, or all (cold)", test_lazy_durable_bound},
    {"lazy restore: a damaged list of written blocks is never trusted", test_lazy_bad_ranges},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("cache_meta_lazy", tests);
}
