/*
 * engine_stuck_ut.c - the cache engine when something does not answer: a
 * thread that cannot be made, a records' lock held by a stuck device call
 * at a close or a takeover, a device that fails while a record sync is
 * stuck or the map's file system hangs, and bounded waits across
 * wall-clock steps (fixture in engine_ut_lib.h). Links with
 * --wrap=pthread_create and --wrap=clock_gettime.
 */
#include "engine_ut_lib.h"

/*
 * Fault injection (engine_ut links with --wrap=pthread_create): the Nth
 * thread creation from now fails with EAGAIN. 0: none fails. The bounded
 * calls' runner threads (engine_run.c: map reads and writes) are neither
 * counted nor failed: whether a call needs a new one depends on timing, so
 * "the Nth" would name another thread from one run to the next.
 */
int __real_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg);
int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg);
static unsigned g_creates, g_create_fail_in;

int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg)
{
	if (fn == run_within_main)
		return __real_pthread_create(t, a, fn, arg);
	__atomic_add_fetch(&g_creates, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&g_create_fail_in, __ATOMIC_SEQ_CST) &&
	    __atomic_sub_fetch(&g_create_fail_in, 1, __ATOMIC_SEQ_CST) == 0)
		return EAGAIN;
	return __real_pthread_create(t, a, fn, arg);
}

/* The threads of this process now. */
static unsigned count_threads(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *de;
	unsigned n = 0;

	CU_ASSERT_FATAL(d != NULL);
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
}

/*
 * The threads of this process once short-lived ones are gone: the bounded
 * map reads and writes run on threads of their own that end on their own
 * time after the call that started them returned (counted or not, at
 * random, by a single look). The same count 20 ms apart, at most 2 s.
 */
static unsigned settled_threads(void)
{
	unsigned n = count_threads(), again;

	for (int i = 0; i < 100; i++) {
		usleep(20 * 1000);
		again = count_threads();
		if (again == n)
			break;
		n = again;
	}
	return n;
}

/*
 * A warm open whose background loader cannot be started fails cleanly: the
 * metadata thread it had started is stopped before the cache is freed (it
 * would otherwise wake on freed memory and write to a closed descriptor),
 * and the next open is still warm.
 */
static void test_open_fails_at_loader(void)
{
	struct hl_cache_config cfg = fixture_config();
	struct fake f;
	struct hl_cache *c;
	struct hl_origin *o;
	uint8_t *buf = malloc(BS);
	unsigned creates, threads;
	int rc;

	o = fixture_up(&c, NULL, &f, 33, "fake:rsfail");
	for (uint64_t b = 0; b < 16; b++)
		CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, b * BS, BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	cache_down(c, o);
	/* The threads a warm open starts (its loader last). */
	creates = __atomic_load_n(&g_creates, __ATOMIC_SEQ_CST);
	c = cache_open(NULL);
	creates = __atomic_load_n(&g_creates, __ATOMIC_SEQ_CST) - creates;
	CU_ASSERT_FATAL(creates >= 2);
	hl_cache_close(c);
	threads = settled_threads();
	__atomic_store_n(&g_create_fail_in, creates, __ATOMIC_SEQ_CST);
	c = NULL;
	rc = hl_cache_open(&cfg, &c);
	__atomic_store_n(&g_create_fail_in, 0, __ATOMIC_SEQ_CST);
	CU_ASSERT_EQUAL(rc, -EAGAIN);
	CU_ASSERT_PTR_NULL(c);
	/* (fatal: a metadata thread left behind runs on freed memory) */
	CU_ASSERT_EQUAL_FATAL(settled_threads(), threads);
	usleep(150 * 1000); /* three metadata intervals */
	c = cache_open(NULL);
	CU_ASSERT_EQUAL(atomic_load(&c->rs_restored), 16);
	hl_cache_close(c);
	dev_remove();
	free(f.mem);
	free(buf);
}

/*
 * A disk removed while the metadata thread holds sync_lock in a call that
 * does not return (here the origin's proof in engine_proofs_refresh, as a
 * dead origin's stat; a dead device's record write holds it the same way):
 * the close ends within the bound (it waited for ever on sync_lock), the
 * map is sealed "failed" (the next start formats), and the inner origin is
 * not closed under the call: when the call returns, the thread goes on with
 * that origin (under ASan, a use after free if it had been freed), and the
 * map stays "failed".
 */
static void test_close_sync_lock_stuck(void)
{
	struct fake f;
	struct hl_cache *c;
	struct hl_origin *o;
	uint8_t *buf = malloc(BS);
	uint64_t t0, ms;

	o = fixture_up(&c, NULL, &f, 41, "fake:stuck");
	for (uint64_t b = 0; b < 8; b++)
		CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, b * BS, BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT(wait_synced(c));
	c->drain_ms = 200;
	__atomic_store_n(&f.take_hold, 1, __ATOMIC_SEQ_CST);
	for (int i = 0; i < 3000 && !__atomic_load_n(&f.taking, __ATOMIC_SEQ_CST); i++)
		usleep(1000);
	CU_ASSERT_FATAL(__atomic_load_n(&f.taking, __ATOMIC_SEQ_CST));
	reactor_down();
	t0 = hl_now_ns();
	hl_origin_close(o); /* the disk's close (co_close), then its inner origin's */
	ms = (hl_now_ns() - t0) / 1000000;
	CU_ASSERT(ms < 1000);
	CU_ASSERT(atomic_load(&c->meta_stuck));
	CU_ASSERT(map_holds("state failed"));
	/* (fatal: the thread is about to use it) */
	CU_ASSERT_EQUAL_FATAL(__atomic_load_n(&f.closes, __ATOMIC_SEQ_CST), 0);
	__atomic_store_n(&f.take_hold, 0, __ATOMIC_SEQ_CST); /* the call returns */
	usleep(300 * 1000);                                  /* six metadata intervals */
	CU_ASSERT(map_holds("state failed"));
	hl_cache_close(c); /* parked: saves nothing */
	CU_ASSERT(map_holds("state failed"));
	dev_remove();
	free(f.mem);
	free(buf);
}

/* bg_start's call of the takeover's revalidation */
static void bg_revalidate(struct bg_call *b)
{
	b->rc = hl_cache_revalidate(b->o);
}

/*
 * hl_cache_revalidate(o) on a thread of its own, waited for 3 s at most
 * (fatal past that: the takeover still waits), the result in rv->rc and a
 * line "WHAT took N ms" on stderr. @return N.
 */
static uint64_t reval_timed(struct bg_call *rv, struct hl_origin *o, const char *what)
{
	uint64_t ms;

	rv->o = o;
	bg_start(rv, bg_revalidate);
	CU_ASSERT_FATAL(bg_within(rv, 3000, &ms));
	bg_join(rv);
	fprintf(stderr, "%s took %llu ms (bound 200)\n", what, (unsigned long long)ms);
	return ms;
}

/*
 * The metadata thread stuck in a record sync, holding sync_lock, as on a
 * cache device that does not answer: c->meta_hold (HOTLUN_TEST_CACHE_META_HOLD)
 * set to a file made here (path into hold), a miss of block blk of o makes
 * a change, and the thread's next sync waits while the file exists.
 * @return whether it does (sync_lock held 100 ms in a row).
 */
static bool meta_sync_stuck(struct hl_cache *c, struct hl_origin *o, uint64_t blk, char *hold,
                            size_t n)
{
	uint8_t *buf = malloc(BS);
	FILE *h;

	snprintf(hold, n, "%s.hold", g_dev);
	h = fopen(hold, "w");
	if (!h || !buf) {
		free(buf);
		return false;
	}
	fclose(h);
	c->meta_hold = strdup(hold);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, blk * BS, BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	free(buf);
	return sync_lock_kept(c);
}

/*
 * A takeover (hl_cache_revalidate) while the metadata thread holds sync_lock
 * in a call that does not return (its record sync held: a dead device's
 * write; a slow origin call is waited for): it returns within the
 * bound (it waited for ever), the cache passes through (map "failed"), no
 * block of the disk is left in memory, and every read afterwards comes from
 * the origin, the peer's write included. When the call returns, nothing
 * comes back (the map stays "failed").
 */
static void test_revalidate_sync_lock_stuck(void)
{
	struct bg_call rv = {0};
	char hold[96];
	struct fake f;
	struct hl_cache *c;
	struct hl_origin *o;
	struct hl_cache_engine_stats st;
	uint8_t *buf = malloc(BS);
	uint64_t ms, left;
	uint8_t src;

	o = fixture_up(&c, NULL, &f, 42, "fake:rstuck");
	f.diff = true;
	for (uint64_t b = 0; b < 8; b++)
		CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, b * BS, BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT(wait_synced(c));
	c->drain_ms = 200;
	CU_ASSERT_FATAL(meta_sync_stuck(c, o, 12, hold, sizeof(hold)));
	hl_cache_hold_proofs(o);             /* handed over */
	fake_external(&f, 3 * BS, BS, 0x3c); /* the peer writes block 3 */
	ms = reval_timed(&rv, o, "the takeover's revalidation");
	CU_ASSERT(ms < 1000);
	CU_ASSERT_EQUAL(rv.rc, 0); /* served */
	CU_ASSERT(atomic_load(&c->meta_stuck));
	CU_ASSERT(atomic_load(&c->failed));
	CU_ASSERT(map_holds("state failed"));
	pthread_mutex_lock(&c->lock);
	left = hl_cache_core_lun_blocks(c->core, c->ents[0]->id);
	pthread_mutex_unlock(&c->lock);
	CU_ASSERT_EQUAL(left, 0);
	CU_ASSERT_EQUAL(hl_cache_get_stats(c, "disk0", &st), 0);
	CU_ASSERT_EQUAL(st.warm_kept, 0);
	CU_ASSERT_EQUAL(st.warm_dropped, 9); /* (block 12: the miss that made the sync) */
	CU_ASSERT(strstr(st.warm_start, "pass-through") != NULL);
	for (uint64_t b = 0; b < 8; b++) {
		memset(buf, 0, BS);
		CU_ASSERT_EQUAL(do_read_src(o, b * BS, BS, buf, &src), 0);
		CU_ASSERT_EQUAL(src, HL_IO_SRC_UNCACHED); /* no hit */
		CU_ASSERT(memcmp(buf, f.mem + b * BS, BS) == 0);
	}
	/* writes pass too: the sealed map stands for the kill the stuck thread cannot do */
	memset(buf, 0x77, BS);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_WRITE, 5 * BS, BS, buf), 0);
	CU_ASSERT(memcmp(f.mem + 5 * BS, buf, BS) == 0);
	unlink(hold); /* the sync returns */
	usleep(300 * 1000);                                  /* six metadata intervals */
	CU_ASSERT(map_holds("state failed"));
	CU_ASSERT_EQUAL(do_read_src(o, 3 * BS, BS, buf, &src), 0);
	CU_ASSERT_EQUAL(src, HL_IO_SRC_UNCACHED);
	CU_ASSERT(memcmp(buf, f.mem + 3 * BS, BS) == 0);
	fixture_down(c, o, &f); /* parked: saves nothing */
	free(buf);
}

/*
 * A takeover while the disk's shadow step is stuck behind the cache device:
 * the metadata thread holds sync_lock in a call that does not return (disk
 * B's miss made a record sync that is held), and disk A's standby step, moving A's proof to the
 * owner's new mark, waits for sync_lock with A's shadow lock held. A's
 * revalidation waited for that lock for ever; now, past its bound, it finds
 * sync_lock not free within the bound either: A is served from the origin
 * within about two bounds.
 */
static void test_revalidate_shadow_stuck(void)
{
	struct bg_call rv = {0};
	char hold[96];
	struct fake fa, fb;
	struct hl_cache *c;
	struct hl_origin *oa, *ob;
	struct hl_hot_ent hot[1] = {{0, 9}};
	struct hl_hot_set hs = {.owner = 1, .seq = 1, .block_size = BS, .n = 1, .v = hot};
	uint8_t *buf = malloc(BS);
	uint64_t ms;
	uint8_t src;

	c = two_proven(&fa, &fb, 33, true, false, 4, buf, &oa, &ob);
	c->drain_ms = 200;
	hl_cache_hold_proofs(oa); /* A handed over: a standby */
	CU_ASSERT_FATAL(meta_sync_stuck(c, ob, 12, hold, sizeof(hold)));
	/* A's owner writes, marks and publishes; A's step diffs (1 ms), then waits for sync_lock */
	peer_publishes(oa, &fa, &hs, 2 * BS, 1);
	usleep(100 * 1000);
	CU_ASSERT_FATAL(pthread_mutex_trylock(&c->ents[0]->shadow_mu) == EBUSY); /* the step's */
	ms = reval_timed(&rv, oa, "the takeover behind the stuck shadow step");
	CU_ASSERT(ms < 1000);
	CU_ASSERT_EQUAL(rv.rc, 0); /* served */
	CU_ASSERT(atomic_load(&c->meta_stuck));
	CU_ASSERT(atomic_load(&c->failed));
	CU_ASSERT(map_holds("state failed"));
	for (uint64_t b = 0; b < 4; b++) {
		memset(buf, 0, BS);
		CU_ASSERT_EQUAL(do_read_src(oa, b * BS, BS, buf, &src), 0);
		CU_ASSERT_EQUAL(src, HL_IO_SRC_UNCACHED); /* no hit */
		CU_ASSERT(memcmp(buf, fa.mem + b * BS, BS) == 0);
	}
	unlink(hold); /* the sync returns, then the step */
	usleep(300 * 1000);
	CU_ASSERT(map_holds("state failed"));
	fa.check_delay_ms = 0;
	two_disks_close(c, oa, ob, &fa, &fb); /* parked: saves nothing */
	free(buf);
}


/*
 * A standby's shadow step moving its proof (a roll) waits for sync_lock
 * behind a stuck holder (the metadata thread's held record sync): the
 * takeover gives up on the step's shadow_mu (bounded, served from the
 * origin only), and then the disk's close (a stop, a removal) must not wait
 * for that step either: it gave up nothing but the step's lock, and hung
 * for ever in engine_shadow_detach (the stop ignored SIGTERM). The step is
 * left its state (it touches neither the cached nor the inner origin when
 * it gets the lock late), the map stays "failed", no read is a hit.
 */
static void test_revalidate_shadow_step_stuck(void)
{
	struct bg_call rv = {0}, cl = {0};
	char hold[96];
	struct fake f;
	struct hl_cache *c;
	struct hl_origin *o;
	struct hl_hot_ent hot[1] = {{0, 9}};
	struct hl_hot_set hs = {.owner = 1, .seq = 1, .block_size = BS, .n = 1, .v = hot};
	uint8_t *buf = malloc(BS);
	uint64_t ms;
	uint8_t src;

	dev_name();
	fake_init(&f, LUN_SIZE, 43);
	f.diff = true;
	reactor_up();
	c = cache_open(NULL);
	CU_ASSERT_FATAL(hl_cache_attach(c, "disk0", 0, fake_hot_origin(&f, "fake:sstuck"), &o) ==
	                0);
	for (uint64_t b = 0; b < 8; b++)
		CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, b * BS, BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT_FATAL(wait_proof(c, 0));
	c->drain_ms = 200;
	/* the metadata thread stuck with sync_lock (a dead device's record write holds it so) */
	CU_ASSERT_FATAL(meta_sync_stuck(c, o, 12, hold, sizeof(hold)));
	/* handed over: a standby; the owner writes block 8, marks and publishes */
	hl_cache_hold_proofs(o);
	fake_external(&f, 8 * BS, 4 * K, 0x5a);
	snprintf(hs.mark, sizeof(hs.mark), "fake:%llu",
	         (unsigned long long)__atomic_load_n(&f.gen, __ATOMIC_SEQ_CST));
	snprintf(hs.prev, sizeof(hs.prev), "fake:999"); /* not our proof: the step diffs */
	f.check_delay_ms = 1; /* (so that the diff says when it runs) */
	f.hot = &hs;
	CU_ASSERT_EQUAL_FATAL(hl_cache_shadow_config(o, 64 * M), 0);
	for (int i = 0; i < 3000 && !__atomic_load_n(&f.checking, __ATOMIC_SEQ_CST); i++)
		usleep(1000);
	CU_ASSERT_FATAL(__atomic_load_n(&f.checking, __ATOMIC_SEQ_CST));
	usleep(100 * 1000); /* the roll's diff is done: it waits for sync_lock */
	if (pthread_mutex_trylock(&c->ents[0]->shadow_mu) == 0) {
		pthread_mutex_unlock(&c->ents[0]->shadow_mu);
		CU_FAIL_FATAL("the shadow step does not hold its lock");
	}

	/* the takeover: two bounds at most, served from the origin only */
	ms = reval_timed(&rv, o, "the takeover's revalidation");
	CU_ASSERT(ms < 1000);
	CU_ASSERT_EQUAL(rv.rc, 0);
	CU_ASSERT(atomic_load(&c->failed));
	CU_ASSERT(map_holds("state failed"));
	for (uint64_t b = 0; b < 10; b++) {
		memset(buf, 0, BS);
		CU_ASSERT_EQUAL(do_read_src(o, b * BS, BS, buf, &src), 0);
		CU_ASSERT_EQUAL(src, HL_IO_SRC_UNCACHED);
		CU_ASSERT(memcmp(buf, f.mem + b * BS, BS) == 0);
	}

	/* the disk's close (a stop): bounded too, the step still stuck */
	reactor_down();
	cl.o = o;
	bg_start(&cl, bg_origin_close);
	/* (fatal: the close still waits for the step, 3 s after it began) */
	CU_ASSERT_FATAL(bg_within(&cl, 3000, &ms));
	bg_join(&cl);
	fprintf(stderr, "the disk's close took %llu ms (bound 200)\n", (unsigned long long)ms);
	CU_ASSERT(ms < 1000);
	CU_ASSERT_EQUAL(__atomic_load_n(&f.closes, __ATOMIC_SEQ_CST), 0); /* kept */

	/* the holder's call returns: the step gets the lock, changes nothing, lets go */
	unlink(hold);
	bool let_go = false;
	for (int i = 0; i < 3000 && !let_go; i++) {
		let_go = pthread_mutex_trylock(&c->ents[0]->shadow_mu) == 0;
		if (let_go)
			pthread_mutex_unlock(&c->ents[0]->shadow_mu);
		else
			usleep(1000);
	}
	CU_ASSERT(let_go);
	usleep(300 * 1000); /* six metadata intervals, fifteen shadow ticks */
	CU_ASSERT(map_holds("state failed"));
	hl_cache_close(c); /* parked */
	CU_ASSERT(map_holds("state failed"));
	dev_remove();
	free(f.mem);
	free(buf);
}

/*
 * The takeover gives up on its records step while that step is in its own
 * record sync (HOTLUN_TEST_CACHE_META_HOLD: a device write that does not
 * return), and the disk is later handed over again (hl_cache_hold_proofs).
 * When the sync returns, the abandoned step must not mark the disk's proofs
 * coherent any more (proofs_held false: a disk this gateway does not own
 * would look owned: its shadow would publish for it, its close would take a
 * final proof): the takeover that wanted it is over.
 */
static void test_revalidate_records_late(void)
{
	struct bg_call rv = {0};
	struct fake f;
	struct hl_cache *c;
	struct hl_origin *o;
	uint8_t *buf = malloc(BS);
	char hold[96];
	uint64_t ms;
	bool free_again = false;
	FILE *h;

	o = fixture_up(&c, NULL, &f, 44, "fake:late");
	f.diff = true;
	for (uint64_t b = 0; b < 8; b++)
		CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, b * BS, BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT(wait_synced(c));
	CU_ASSERT_FATAL(wait_proof(c, 0));
	c->drain_ms = 200;
	hl_cache_hold_proofs(o);             /* handed over */
	fake_external(&f, 3 * BS, BS, 0x3c); /* the peer writes block 3 */
	snprintf(hold, sizeof(hold), "%s.hold", g_dev);
	h = fopen(hold, "w");
	CU_ASSERT_FATAL(h != NULL);
	fclose(h);
	c->meta_hold = strdup(hold); /* the takeover's record sync does not return */
	ms = reval_timed(&rv, o, "the takeover's revalidation");
	CU_ASSERT(ms < 1000);
	CU_ASSERT_EQUAL(rv.rc, 0);
	CU_ASSERT(atomic_load(&c->failed));
	CU_ASSERT(map_holds("state failed"));
	/* handed over again while that sync is still out */
	hl_cache_hold_proofs(o);
	unlink(hold); /* the sync returns */
	for (int i = 0; i < 3000 && !free_again; i++) {
		free_again = pthread_mutex_trylock(&c->sync_lock) == 0;
		if (free_again)
			pthread_mutex_unlock(&c->sync_lock);
		else
			usleep(1000);
	}
	CU_ASSERT(free_again);
	usleep(100 * 1000);
	CU_ASSERT(atomic_load(&c->ents[0]->proofs_held)); /* not ours: still held */
	CU_ASSERT(map_holds("state failed"));
	fixture_down(c, o, &f); /* parked: saves nothing */
	free(buf);
}

/*
 * A takeover while sync_lock's holder is in a slow call on an origin (the
 * metadata thread's proof_take of disk B, 600 ms here; rbd's ops time out
 * after 30 s, the bound is 15 s): that is the origin's slowness, not a
 * cache device that does not answer. The takeover of disk A waits for it,
 * as it waits for its own diff, and the cache stays in service: A keeps
 * its unchanged blocks (hits), drops the peer's write, nothing is sealed.
 * It used to declare the cache stuck after the bound: the whole cache in
 * pass-through until a restart, which formats it (every disk cold).
 */
static void test_revalidate_sync_lock_origin_slow(void)
{
	struct bg_call rv = {0};
	struct fake fa, fb;
	struct hl_cache *c;
	struct hl_origin *oa, *ob;
	uint8_t *buf = malloc(BS);
	uint64_t ms;
	uint8_t src;
	int early;

	c = two_proven(&fa, &fb, 45, false, false, 4, buf, &oa, &ob);
	c->drain_ms = 200;
	hl_cache_hold_proofs(oa);              /* A handed over */
	fake_external(&fa, 2 * BS, BS, 0x5a); /* the peer writes A's block 2 */
	__atomic_store_n(&fb.take_hold, 1, __ATOMIC_SEQ_CST); /* B's proof_take: slow */
	for (int i = 0; i < 3000 && !__atomic_load_n(&fb.taking, __ATOMIC_SEQ_CST); i++)
		usleep(1000);
	CU_ASSERT_FATAL(__atomic_load_n(&fb.taking, __ATOMIC_SEQ_CST));
	rv.o = oa;
	bg_start(&rv, bg_revalidate);
	usleep(600 * 1000);
	early = __atomic_load_n(&rv.done, __ATOMIC_SEQ_CST);
	__atomic_store_n(&fb.take_hold, 0, __ATOMIC_SEQ_CST); /* the cluster answers */
	CU_ASSERT_FATAL(bg_within(&rv, 3000, &ms));
	ms += 600;
	bg_join(&rv);
	fprintf(stderr, "the takeover behind a 600 ms origin call took %llu ms (bound 200)%s\n",
	        (unsigned long long)ms, early ? ", returned before the call did" : "");
	CU_ASSERT_FALSE(early);
	CU_ASSERT_EQUAL(rv.rc, 0);
	CU_ASSERT_FALSE(atomic_load(&c->failed));
	CU_ASSERT_FALSE(atomic_load(&c->meta_stuck));
	CU_ASSERT_FALSE(map_holds("state failed"));
	for (uint64_t b = 0; b < 4; b++) {
		memset(buf, 0, BS);
		CU_ASSERT_EQUAL(do_read_src(oa, b * BS, BS, buf, &src), 0);
		CU_ASSERT_EQUAL(src, b == 2 ? HL_IO_SRC_MISS : HL_IO_SRC_HIT);
		CU_ASSERT(memcmp(buf, fa.mem + b * BS, BS) == 0);
		CU_ASSERT_EQUAL(do_read_src(ob, b * BS, BS, buf, &src), 0);
		CU_ASSERT_EQUAL(src, HL_IO_SRC_HIT); /* the other disk stays cached */
	}
	two_disks_close(c, oa, ob, &fa, &fb);
	free(buf);
}

/*
 * The cache device fails while a record sync is stuck holding sync_lock (a
 * device write that does not return). The kill (map "failed", superblocks
 * wiped) took sync_lock for its map write, so it waited for the stuck
 * holder, killed stayed false, and every write of every disk of the cache
 * waited for ever: the one the stuck sync had taken, one queued behind it,
 * and every write after the failure (hung, not failed, for the initiator).
 * Now they all reach the origin within a bound, the map says "failed", and
 * a restart formats: no block comes from the old records. First the
 * metadata thread is the stuck holder (HOTLUN_TEST_CACHE_META_HOLD), then
 * another thread (a takeover's or shadow's records step) while the
 * metadata thread is free.
 */
static void test_device_failure_sync_stuck(void)
{
	struct step st[4];
	char hold[96];
	struct fake fa, fb, bad;
	struct hl_cache *c;
	struct hl_origin *oa, *ob, *real;
	uint8_t *buf = malloc(4 * BS), *w = malloc(4 * BS);
	int rc[4], wa, wb;
	uint64_t t0;
	uint8_t src;
	FILE *h;

	c = two_proven(&fa, &fb, 51, false, false, 4, buf, &oa, &ob);
	CU_ASSERT(wait_synced(c));
	snprintf(hold, sizeof(hold), "%s.hold", g_dev);
	h = fopen(hold, "w");
	CU_ASSERT_FATAL(h != NULL);
	fclose(h);
	c->meta_hold = strdup(hold);
	for (int i = 0; i < 4; i++)
		memset(w + i * BS, 0x61 + i, BS);
	wa = fa.writes;
	wb = fb.writes;
	/* a write of a recorded block waits for a sync: the sync takes it and sticks */
	io_start(&st[0], oa, HL_IO_WRITE, 0, BS, w);
	CU_ASSERT_FATAL(sync_lock_kept(c));
	io_start(&st[1], ob, HL_IO_WRITE, BS, BS, w + BS); /* queued behind it */
	usleep(100 * 1000);
	CU_ASSERT_EQUAL(fa.writes, wa);
	CU_ASSERT_EQUAL(fb.writes, wb);

	/* the device fails: a hit's read errs (served from the origin), pass-through */
	real = c->data;
	fake_init(&bad, 8 * M, 0);
	bad.fail_reads = bad.fail_writes = 1;
	c->data = fake_origin(&bad, "fake:bad-ssd");
	CU_ASSERT_EQUAL(do_io(oa, HL_IO_READ, 2 * BS, BS, buf), 0);
	CU_ASSERT(memcmp(buf, fa.mem + 2 * BS, BS) == 0);
	CU_ASSERT(atomic_load(&c->failed));
	t0 = hl_now_ns();
	io_start(&st[2], oa, HL_IO_WRITE, 3 * BS, BS, w + 2 * BS); /* the same disk */
	io_start(&st[3], ob, HL_IO_WRITE, 2 * BS, BS, w + 3 * BS); /* another disk */
	for (int i = 0; i < 4; i++)
		rc[i] = io_wait_within(&st[i], 3000);
	fprintf(stderr, "writes after the failure, sync stuck: %llu ms (bound 3000)\n",
	        (unsigned long long)((hl_now_ns() - t0) / 1000000));
	for (int i = 0; i < 4; i++)
		CU_ASSERT_EQUAL(rc[i], 0);
	CU_ASSERT(atomic_load(&c->killed));
	CU_ASSERT(map_holds("state failed"));
	CU_ASSERT(memcmp(fa.mem, w, BS) == 0);
	CU_ASSERT(memcmp(fb.mem + BS, w + BS, BS) == 0);
	CU_ASSERT(memcmp(fa.mem + 3 * BS, w + 2 * BS, BS) == 0);
	CU_ASSERT(memcmp(fb.mem + 2 * BS, w + 3 * BS, BS) == 0);
	unlink(hold); /* the sync returns late: the map stays "failed" */
	for (int i = 0; i < 4; i++)
		if (rc[i] == -ETIMEDOUT)
			io_wait(&st[i]); /* (the old code: out until the sync returned) */
	CU_ASSERT(wait_inflight(c, 0));
	usleep(200 * 1000); /* four metadata intervals */
	CU_ASSERT(map_holds("state failed"));
	reactor_down();
	hl_origin_close(oa);
	hl_origin_close(ob);
	dev_restore(c, real, &bad);
	hl_cache_close(c);

	/* the restart formats: blocks 1 and 2 of A (never written) are not hits */
	reactor_up();
	c = cache_open(NULL);
	CU_ASSERT_FATAL(hl_cache_attach(c, "diskA", 0, fake_origin(&fa, "fake:a"), &oa) == 0);
	CU_ASSERT_FATAL(hl_cache_attach(c, "diskB", 0, fake_origin(&fb, "fake:b"), &ob) == 0);
	for (uint64_t b = 0; b < 4; b++) {
		memset(buf, 0, BS);
		CU_ASSERT_EQUAL(do_read_src(oa, b * BS, BS, buf, &src), 0);
		CU_ASSERT_EQUAL(src, HL_IO_SRC_MISS);
		CU_ASSERT(memcmp(buf, fa.mem + b * BS, BS) == 0);
		CU_ASSERT_EQUAL(do_read_src(ob, b * BS, BS, buf, &src), 0);
		CU_ASSERT_EQUAL(src, HL_IO_SRC_MISS);
		CU_ASSERT(memcmp(buf, fb.mem + b * BS, BS) == 0);
	}
	CU_ASSERT(wait_inflight(c, 0));
	two_disks_close(c, oa, ob, &fa, &fb);

	/* another thread holds sync_lock (a records step in a dead device's write) */
	c = two_proven(&fa, &fb, 53, false, false, 4, buf, &oa, &ob);
	CU_ASSERT(wait_synced(c));
	pthread_mutex_lock(&c->sync_lock);
	wa = fa.writes;
	wb = fb.writes;
	engine_dev_error(c, NULL, -EIO);
	io_start(&st[0], oa, HL_IO_WRITE, 0, BS, w);
	io_start(&st[1], ob, HL_IO_WRITE, 0, BS, w + BS);
	rc[0] = io_wait_within(&st[0], 3000);
	rc[1] = io_wait_within(&st[1], 3000);
	CU_ASSERT_EQUAL(rc[0], 0);
	CU_ASSERT_EQUAL(rc[1], 0);
	CU_ASSERT_EQUAL(fa.writes, wa + 1);
	CU_ASSERT_EQUAL(fb.writes, wb + 1);
	CU_ASSERT(map_holds("state failed"));
	pthread_mutex_unlock(&c->sync_lock);
	for (int i = 0; i < 2; i++)
		if (rc[i] == -ETIMEDOUT)
			io_wait(&st[i]);
	CU_ASSERT(wait_inflight(c, 0));
	two_disks_close(c, oa, ob, &fa, &fb);
	free(buf);
	free(w);
}

/* Does file path hold needle within ms? */
static bool file_holds_within(const char *path, const char *needle, unsigned ms)
{
	for (unsigned i = 0; i < ms; i++) {
		char text[8192] = "";
		FILE *m = fopen(path, "r");
		size_t n;

		if (m) {
			n = fread(text, 1, sizeof(text) - 1, m);
			text[n] = '\0';
			fclose(m);
			if (strstr(text, needle))
				return true;
		}
		usleep(1000);
	}
	return false;
}

/*
 * The device fails while the state file system does not answer: the kill's
 * map write hangs (here: the map's temporary file is a FIFO nobody reads,
 * so its open blocks). The kill waited for it for ever, so writes in
 * pass-through did too. Now the map write is given up on past the bound
 * (meta_stuck: the cache is parked at close), the superblocks are wiped,
 * killed is set and the write reaches the origin; a restart from then on
 * formats on the wiped superblocks alone (the map still says "open"). Once
 * the file system answers, the seal the hung write owes says "failed".
 */
static void test_device_failure_map_hung(void)
{
	char tmp[96], old_dev[64], old_map[80];
	struct step st;
	struct fake f;
	struct hl_cache *c;
	struct hl_origin *o;
	uint8_t *buf = malloc(BS), *w = malloc(BS);
	uint64_t t0;
	uint8_t src;
	int rc, fd;

	o = fixture_up(&c, NULL, &f, 71, "fake:hung");
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT(wait_synced(c));
	c->drain_ms = 200;
	snprintf(tmp, sizeof(tmp), "%s.tmp", g_map);
	rc = -1;
	for (int i = 0; i < 1000 && rc; i++) /* (EEXIST: a proof's map write under way) */
		if ((rc = mkfifo(tmp, 0600)))
			usleep(1000);
	CU_ASSERT_FATAL(rc == 0);
	engine_dev_error(c, NULL, -EIO);
	memset(w, 0x4d, BS);
	t0 = hl_now_ns();
	io_start(&st, o, HL_IO_WRITE, 0, BS, w);
	rc = io_wait_within(&st, 3000);
	fprintf(stderr, "a write after the failure, the map write hung: %llu ms (bound 3000)\n",
	        (unsigned long long)((hl_now_ns() - t0) / 1000000));
	CU_ASSERT_EQUAL(rc, 0);
	CU_ASSERT(atomic_load(&c->killed));
	CU_ASSERT(atomic_load(&c->meta_stuck));
	CU_ASSERT(memcmp(f.mem, w, BS) == 0);
	/*
	 * What a hotlund killed now leaves: a copy of the device and of its map,
	 * which still says "open" (nothing landed): the restart below formats on
	 * the wiped superblocks alone.
	 */
	snprintf(old_dev, sizeof(old_dev), "%s", g_dev);
	snprintf(old_map, sizeof(old_map), "%s", g_map);
	dev_name();
	CU_ASSERT_FATAL(file_copy(old_dev, g_dev) == 0);
	CU_ASSERT_FATAL(file_copy(old_map, g_map) == 0);
	CU_ASSERT(map_holds("state open"));
	/*
	 * The file system answers again: the hung write fails (a FIFO), and
	 * the seal it owes (engine_map_seal came while it was out) is written
	 * after it: the map says "failed".
	 */
	fd = open(tmp, O_RDONLY | O_NONBLOCK);
	CU_ASSERT(fd >= 0);
	for (int i = 0; i < 3000 && access(tmp, F_OK) == 0; i++)
		usleep(1000);
	CU_ASSERT(access(tmp, F_OK) != 0); /* (unlinked once its write failed) */
	if (fd >= 0)
		close(fd);
	unlink(tmp);
	if (rc == -ETIMEDOUT)
		io_wait(&st); /* (the old code: out until the map write returned) */
	CU_ASSERT(wait_inflight(c, 0));
	reactor_down();
	hl_origin_close(o);
	hl_cache_close(c); /* parked: it keeps the device (and its lock) */
	CU_ASSERT(file_holds_within(old_map, "state failed", 3000));
	CU_ASSERT(unlink(old_dev) == 0); /* (the parked cache keeps it open) */
	CU_ASSERT(unlink(old_map) == 0);

	/* a restart on the copies */
	CU_ASSERT(map_holds("state open"));
	reactor_up();
	c = cache_open(NULL);
	o = attach(c, &f, "fake:hung");
	CU_ASSERT_EQUAL(do_read_src(o, 0, BS, buf, &src), 0);
	CU_ASSERT_EQUAL(src, HL_IO_SRC_MISS); /* formatted: block 0 not restored */
	CU_ASSERT(memcmp(buf, w, BS) == 0);
	CU_ASSERT(wait_inflight(c, 0));
	fixture_down(c, o, &f);
	free(buf);
	free(w);
}

/*
 * Seconds added to what CLOCK_REALTIME answers this process (engine_ut
 * links with --wrap=clock_gettime): the kernel's timers do not see them, so
 * a wall-clock deadline taken meanwhile behaves as if the wall clock had
 * been stepped back (positive) or forward (negative) right after it.
 */
static long g_wall_step_s;

int __real_clock_gettime(clockid_t clk, struct timespec *ts);
int __wrap_clock_gettime(clockid_t clk, struct timespec *ts);

int __wrap_clock_gettime(clockid_t clk, struct timespec *ts)
{
	int rc = __real_clock_gettime(clk, ts);

	if (!rc && (clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE))
		ts->tv_sec += __atomic_load_n(&g_wall_step_s, __ATOMIC_SEQ_CST);
	return rc;
}

struct lock_call {
	struct hl_cache *c;
	bool patient;
	int done, got; /* atomics */
};

static void *lock_call_main(void *arg)
{
	struct lock_call *lc = arg;
	bool got = lc->patient ? engine_sync_lock_patient(lc->c, "disk0")
	                       : engine_sync_lock_within(lc->c, "disk0");

	if (got)
		pthread_mutex_unlock(&lc->c->sync_lock);
	__atomic_store_n(&lc->got, got, __ATOMIC_SEQ_CST);
	__atomic_store_n(&lc->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

/*
 * How long engine_sync_lock_within (patient: _patient) takes to give up on
 * a sync_lock held by this thread (bound 200 ms), with the wall clock
 * stepped by step_s: -1 when it has not within 3 s.
 */
static long lock_bound_ms(long step_s, bool patient)
{
	struct lock_call lc = {.patient = patient};
	uint64_t t0;
	long ms = -1;
	pthread_t t;

	dev_name();
	lc.c = cache_open(NULL);
	lc.c->drain_ms = 200;
	pthread_mutex_lock(&lc.c->sync_lock);
	__atomic_store_n(&g_wall_step_s, step_s, __ATOMIC_SEQ_CST);
	t0 = hl_now_ns();
	CU_ASSERT_FATAL(pthread_create(&t, NULL, lock_call_main, &lc) == 0);
	while (!__atomic_load_n(&lc.done, __ATOMIC_SEQ_CST) && hl_now_ns() - t0 < 3000000000ull)
		usleep(1000);
	if (__atomic_load_n(&lc.done, __ATOMIC_SEQ_CST))
		ms = (long)((hl_now_ns() - t0) / 1000000);
	__atomic_store_n(&g_wall_step_s, 0, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&lc.c->sync_lock); /* (the old code: still waiting) */
	pthread_join(t, NULL);
	CU_ASSERT_FALSE(__atomic_load_n(&lc.got, __ATOMIC_SEQ_CST) && ms >= 0);
	fprintf(stderr, "sync_lock%s, wall clock stepped %+lds: gave up after %ld ms (bound 200)\n",
	        patient ? " (patient)" : "", step_s, ms);
	hl_cache_close(lc.c); /* parked: sealed, meta_stuck */
	dev_remove();
	return ms;
}

/*
 * The bounded waits for sync_lock (a disk's close or attach, a takeover)
 * count on CLOCK_MONOTONIC: pthread_mutex_timedlock's wall-clock deadline
 * waited an hour when the wall clock was stepped back an hour (NTP, a
 * hypervisor's time sync after a pause: when a failover happens), and gave
 * up at once when it was stepped forward (sealing a healthy cache: its
 * next start cold).
 */
static void test_sync_lock_bound_wall_step(void)
{
	long ms;

	reactor_up();
	ms = lock_bound_ms(3600, false);
	CU_ASSERT(ms >= 150 && ms < 2000);
	ms = lock_bound_ms(-3600, false);
	CU_ASSERT(ms >= 150 && ms < 2000);
	ms = lock_bound_ms(3600, true);
	CU_ASSERT(ms >= 150 && ms < 2000);
	reactor_down();
}

int main(void)
{
	static const struct hl_test tests[] = {
	    {"a warm open whose loader cannot start stops its metadata thread", test_open_fails_at_loader},
	    {"a disk closed while sync_lock's holder is stuck: bounded, sealed, its origin kept", test_close_sync_lock_stuck},
	    {"a takeover while sync_lock's holder is stuck: bounded, served from the origin only", test_revalidate_sync_lock_stuck},
	    {"a takeover while its shadow step is stuck behind the device: bounded, no hit", test_revalidate_shadow_stuck},
	    {"a takeover past a shadow step stuck behind sync_lock: the disk's close is bounded too", test_revalidate_shadow_step_stuck},
	    {"a takeover's records step that returns after the disk was handed over again: held", test_revalidate_records_late},
	    {"a takeover behind a slow origin call under sync_lock waits; the cache stays in service", test_revalidate_sync_lock_origin_slow},
	    {"the device fails while a record sync is stuck: writes of every disk still complete", test_device_failure_sync_stuck},
	    {"the bounded waits for sync_lock hold across wall-clock steps", test_sync_lock_bound_wall_step},
	    {"the device fails while the map's file system hangs: writes still complete", test_device_failure_map_hung},
	    {NULL, NULL},
	};

	return hl_test_run("engine_stuck", tests);
}
