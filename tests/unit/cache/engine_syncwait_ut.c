/*
 * engine_syncwait_ut.c - what waits on sync_lock while an attach's record
 * sync that was given up on keeps it (its device write does not return:
 * the lock stays taken until the stop). Another attach, a detach and a
 * disown see meta_stuck and do not wait; the stats take no sync_lock. The
 * metadata thread does wait, for ever, and with it the writes it had
 * taken for its turn before the seal landed: they are let go once the
 * map says "failed", as a kill lets them go. The fixture is engine_ut.c's
 * (engine_ut_lib.h).
 */

#include "engine_ut_lib.h"

#define BOUND_MS 400u
#define WAIT_MS  3000u

static void bg_attach(struct bg_call *b)
{
	b->rc = hl_cache_attach(b->c, b->disk, 0, b->inner, &b->out);
}

static void bg_stats(struct bg_call *b)
{
	struct hl_cache_engine_stats st;

	b->rc = hl_cache_get_stats(b->c, NULL, &st);
}

/*
 * disk0 has blocks 0-7 recorded; the device stops answering while disk1's
 * attach syncs the records (holding sync_lock); a write of disk0's block
 * 0 comes meanwhile and waits for a record sync, taken by the metadata
 * thread, which waits for sync_lock. The attach gives up (-ETIMEDOUT,
 * meta_stuck, the map sealed "failed"). Before, the write stayed out until
 * the stop (the seal set killed, but nothing let the waiters go); now it
 * completes once the map says "failed". Another attach, a detach and the
 * stats answer at once meanwhile.
 */
static void test_attach_sync_given_up(void)
{
	struct fake fa, fb, fc;
	struct hl_cache *c;
	struct hl_origin *o;
	struct bg_call cl = {0}, cl2 = {0}, sc = {0}, dc = {0};
	struct step st;
	uint8_t *buf = malloc(8 * BS), *w = malloc(BS);
	uint64_t ms, t0;
	int rc;

	o = fixture_up(&c, NULL, &fa, 61, "fake:sw-a");
	fake_init(&fb, LUN_SIZE, 62);
	fake_init(&fc, LUN_SIZE, 63);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, 8 * BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT(wait_synced(c));
	c->drain_ms = BOUND_MS;
	/*
	 * Then no tick for a minute, so that a fill stays unsynced (the
	 * attach's sync has records to write): engine_mapwait_ut's way.
	 */
	c->interval_ms = 60000;
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 10 * BS, BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	for (int i = 0; i < 1000 && atomic_load(&c->synced) < atomic_load(&c->changes); i++)
		usleep(1000);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 12 * BS, 4 * BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT(atomic_load(&c->changes) != atomic_load(&c->synced));

	dev_hold(c);
	cl.c = c;
	cl.inner = fake_origin(&fb, "fake:sw-b");
	cl.disk = "disk1";
	bg_start(&cl, bg_attach);
	for (int i = 0; i < (int)WAIT_MS && !__atomic_load_n(&g_dev_held, __ATOMIC_SEQ_CST); i++)
		usleep(1000);
	CU_ASSERT_FATAL(__atomic_load_n(&g_dev_held, __ATOMIC_SEQ_CST)); /* in its record sync */
	memset(w, 0x6b, BS);
	t0 = hl_now_ns();
	io_start(&st, o, HL_IO_WRITE, 0, BS, w);
	CU_ASSERT(bg_within(&cl, WAIT_MS, NULL));
	CU_ASSERT_EQUAL(cl.rc, -ETIMEDOUT);
	CU_ASSERT(atomic_load(&c->meta_stuck));
	rc = io_wait_within(&st, WAIT_MS);
	ms = (hl_now_ns() - t0) / 1000000u;
	fprintf(stderr, "a write waiting for a sync behind the given-up attach: %s in %llu ms\n",
	        rc == -ETIMEDOUT ? "still out" : "done", (unsigned long long)ms);
	CU_ASSERT_EQUAL(rc, 0);
	CU_ASSERT(map_holds("state failed"));
	if (rc == 0)
		CU_ASSERT(memcmp(fa.mem, w, BS) == 0);

	/* the others: none waits for sync_lock */
	cl2.c = c;
	cl2.inner = fake_origin(&fc, "fake:sw-c");
	cl2.disk = "disk2";
	bg_start(&cl2, bg_attach);
	CU_ASSERT(bg_within(&cl2, BOUND_MS / 2, &ms));
	fprintf(stderr, "another attach meanwhile: rc %d in %llu ms\n", cl2.rc,
	        (unsigned long long)ms);
	CU_ASSERT(cl2.rc != 0);
	sc.c = c;
	bg_start(&sc, bg_stats);
	CU_ASSERT(bg_within(&sc, BOUND_MS / 2, &ms));
	CU_ASSERT_EQUAL(sc.rc, 0);
	fprintf(stderr, "stats meanwhile: %llu ms\n", (unsigned long long)ms);

	__atomic_store_n(&g_dev_hold, 0, __ATOMIC_SEQ_CST); /* the device answers again */
	if (rc == -ETIMEDOUT)
		io_wait(&st); /* (the old code: out until the stop... or for ever) */
	CU_ASSERT(wait_inflight(c, 0));
	reactor_down();
	dc.o = o;
	bg_start(&dc, bg_origin_close);
	CU_ASSERT(bg_within(&dc, BOUND_MS / 2, &ms));
	fprintf(stderr, "detach meanwhile: %llu ms\n", (unsigned long long)ms);
	bg_join(&dc);
	bg_join(&cl);
	bg_join(&cl2);
	bg_join(&sc);
	hl_origin_close(cl.inner);
	hl_origin_close(cl2.inner);
	hl_cache_close(c); /* parked (the sync was given up on) */
	dev_remove();
	free(fa.mem);
	free(fb.mem);
	free(fc.mem);
	free(buf);
	free(w);
}

int main(void)
{
	static const struct hl_test tests[] = {
	    {"an attach's sync given up on: the writes behind sync_lock go on, the rest answer",
	     test_attach_sync_given_up},
	    {NULL, NULL},
	};
	hl_log_open(false, HL_LOG_WARN);
	return hl_test_run("cache_engine_syncwait", tests);
}
