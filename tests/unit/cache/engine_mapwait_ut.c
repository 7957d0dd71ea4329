/*
 * engine_mapwait_ut.c - the cache engine when the file system of its map
 * stops answering (a hung NFS, a dying disk under /var/lib/hotlun): every
 * map write is bounded (an attach, the detach's final proof, the close's
 * save and seal, the metadata thread's proofs), and what a write given up
 * on leaves is safe. The map's file system hangs here without FUSE: its
 * temporary file is a FIFO nobody reads, so the writer's open blocks until
 * the test opens the other end. The fixture is engine_ut.c's
 * (engine_ut_lib.h).
 */

#include "engine_ut_lib.h"

#include <sys/stat.h>

#define BOUND_MS 400u
/* how long a test waits for a call the bound should end (the old code never returned) */
#define WAIT_MS 3000u

/* bg_start's calls: an attach (disk NULL: disk0), a stop (the disk's close, the cache's) */
static void bg_attach(struct bg_call *b)
{
	b->rc = hl_cache_attach(b->c, b->disk ? b->disk : "disk0", 0, b->inner, &b->out);
}

static void bg_close(struct bg_call *b)
{
	if (b->o)
		hl_origin_close(b->o);
	hl_cache_close(b->c);
}

/*
 * An attach of a new disk writes the map on the control reactor: a map
 * file system that does not answer hung the attach (and with it the
 * control socket, hotlunctl, reloads) for ever. Now it fails within the
 * bound with -ETIMEDOUT; the disk is not served through the cache.
 */
static void test_attach_map_hung(void)
{
	struct fake f;
	struct hl_cache *c;
	struct bg_call cl = {0};
	char tmp[96];
	uint64_t ms;
	bool ended;

	dev_name();
	fake_init(&f, LUN_SIZE, 91);
	reactor_up();
	c = cache_open(NULL);
	c->drain_ms = BOUND_MS;
	map_hang(tmp, sizeof(tmp));
	cl.c = c;
	cl.inner = fake_origin(&f, "fake:attach-hung");
	bg_start(&cl, bg_attach);
	ended = bg_within(&cl, WAIT_MS, &ms);
	fprintf(stderr, "attach, the map's file system hung: %s after %llu ms (rc %d)\n",
	        ended ? "returned" : "still out", (unsigned long long)ms, cl.rc);
	CU_ASSERT(ended);
	CU_ASSERT(ms < WAIT_MS);
	CU_ASSERT_EQUAL(cl.rc, -ETIMEDOUT);
	map_unhang(tmp);
	bg_join(&cl);
	/* the file system answers again: the next attach writes the map */
	if (cl.rc != 0) {
		for (int i = 0; i < (int)WAIT_MS && atomic_load(&c->map_busy); i++)
			usleep(1000);
		CU_ASSERT_EQUAL(hl_cache_attach(c, "disk0", 0, cl.inner, &cl.out), 0);
		CU_ASSERT(map_holds("disk0 fake:attach-hung"));
	}
	reactor_down();
	hl_origin_close(cl.out);
	hl_cache_close(c);
	dev_remove();
	free(f.mem);
}

/*
 * The stop: the disk's detach writes its final proof into the map, the
 * close its save ("clean") and, past the save's bound, its seal. A map
 * file system that does not answer hung the first of them for ever (the
 * seal waited for the map's lock that the hung write keeps): systemd's
 * stop timeout then killed hotlund without a word. Now the close returns
 * within its bounds.
 */
static void test_close_map_hung(void)
{
	struct fake f;
	struct hl_cache *c;
	struct hl_origin *o;
	struct bg_call cl = {0};
	uint8_t *buf = malloc(8 * BS);
	char tmp[96];
	uint64_t ms;
	bool ended;

	o = fixture_up(&c, NULL, &f, 92, "fake:close-hung");
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, 8 * BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT(wait_synced(c));
	c->drain_ms = BOUND_MS;
	reactor_down();
	/* a write of the origin since the last proof: the detach's final proof is new */
	fake_external(&f, 9 * BS, BS, 0x5a);
	map_hang(tmp, sizeof(tmp));
	cl.c = c;
	cl.o = o;
	bg_start(&cl, bg_close);
	ended = bg_within(&cl, WAIT_MS, &ms);
	fprintf(stderr, "detach and close, the map's file system hung: %s after %llu ms\n",
	        ended ? "returned" : "still out", (unsigned long long)ms);
	CU_ASSERT(ended);
	map_unhang(tmp);
	bg_join(&cl);
	dev_remove();
	free(f.mem);
	free(buf);
}

/*
 * The metadata thread records a new proof (the origin was quiet for a
 * tick) into the map, holding sync_lock: a map file system that does not
 * answer kept it there for ever, and with it every write that waits for a
 * record sync (a write of a cached block). Now the proof's write is given
 * up on within the bound and the writes go on; the proof the map may not
 * hold is not released from the origin, and the close still returns.
 */
static void test_proof_write_map_hung(void)
{
	struct fake f;
	struct hl_cache *c;
	struct hl_origin *o;
	struct step st;
	struct bg_call cl = {0};
	uint8_t *buf = malloc(8 * BS), *w = malloc(BS);
	char tmp[96];
	uint64_t ms;
	uint64_t t0;
	bool ended;
	int rc;

	o = fixture_up(&c, NULL, &f, 93, "fake:proof-hung");
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, 8 * BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT(wait_proof(c, 0));
	c->drain_ms = BOUND_MS;
	map_hang(tmp, sizeof(tmp));
	/* the origin changes: two ticks later the metadata thread writes the new proof */
	fake_external(&f, 12 * BS, BS, 0x33);
	CU_ASSERT_FATAL(sync_lock_kept(c)); /* in the proof's map write */

	/* a write of a cached block waits for a record sync */
	memset(w, 0x44, BS);
	t0 = hl_now_ns();
	io_start(&st, o, HL_IO_WRITE, 0, BS, w);
	rc = -ETIMEDOUT;
	for (unsigned i = 0; i < WAIT_MS; i++) {
		if (sem_trywait(&st.sem) == 0) {
			rc = st.rc;
			sem_destroy(&st.sem);
			break;
		}
		usleep(1000);
	}
	ms = (hl_now_ns() - t0) / 1000000u;
	fprintf(stderr, "a write during the proof's hung map write: %s after %llu ms\n",
	        rc == -ETIMEDOUT ? "still out" : "done", (unsigned long long)ms);
	CU_ASSERT_EQUAL(rc, 0);
	CU_ASSERT(wait_inflight(c, 0));
	reactor_down();

	cl.c = c;
	cl.o = o;
	bg_start(&cl, bg_close);
	ended = bg_within(&cl, WAIT_MS, &ms);
	fprintf(stderr, "close after it: %s after %llu ms\n", ended ? "returned" : "still out",
	        (unsigned long long)ms);
	CU_ASSERT(ended);
	map_unhang(tmp);
	if (rc == -ETIMEDOUT)
		CU_ASSERT_EQUAL(io_wait(&st), 0); /* the old code: done once the map answered */
	bg_join(&cl);
	dev_remove();
	free(f.mem);
	free(buf);
	free(w);
}

static void bg_stats(struct bg_call *b)
{
	struct hl_cache_engine_stats st;

	b->rc = hl_cache_get_stats(b->c, NULL, &st);
}

/*
 * An attach of a new disk syncs the records first, on the control reactor
 * and under the cache's mutex: a cache device whose writes do not return
 * hung the attach (the control socket, reloads) for ever, and with the
 * mutex every disk of the cache and hotlunctl's stats. Now the sync runs
 * without the mutex and within the bound: the attach fails with
 * -ETIMEDOUT, the cache's records are not trusted at the next start
 * (meta_stuck, the map sealed), the stats answer meanwhile.
 */
static void test_attach_device_hung(void)
{
	struct fake fa, fb;
	struct hl_cache *c;
	struct hl_origin *o;
	struct bg_call cl = {0};
	struct bg_call sc = {0};
	uint8_t *buf = malloc(8 * BS);
	uint64_t ms;
	bool ended;

	o = fixture_up(&c, NULL, &fa, 94, "fake:dev-hung-a");
	fake_init(&fb, LUN_SIZE, 95);
	c->drain_ms = BOUND_MS;
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT(wait_synced(c));
	/*
	 * Then no tick for a minute, so that the fills below stay unsynced. The
	 * thread reads the interval as it ends a tick: either a tick came
	 * between the store and block 10's fill (the thread waits a minute
	 * already; the fill stays unsynced) or the next one syncs it and then
	 * waits a minute. (Set before block 0's read, a tick in between left
	 * block 0 unsynced, and its wait_synced failed about one run in four.)
	 */
	c->interval_ms = 60000;
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 10 * BS, BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	for (int i = 0; i < 1000 && atomic_load(&c->synced) < atomic_load(&c->changes); i++)
		usleep(1000);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 2 * BS, 6 * BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT(atomic_load(&c->changes) != atomic_load(&c->synced));

	dev_hold(c);
	cl.c = c;
	cl.inner = fake_origin(&fb, "fake:dev-hung-b");
	cl.disk = "disk1";
	bg_start(&cl, bg_attach);
	for (int i = 0; i < (int)WAIT_MS && !__atomic_load_n(&g_dev_held, __ATOMIC_SEQ_CST); i++)
		usleep(1000);
	CU_ASSERT(__atomic_load_n(&g_dev_held, __ATOMIC_SEQ_CST)); /* in its record sync */
	sc.c = c;
	bg_start(&sc, bg_stats);
	ended = bg_within(&cl, WAIT_MS, &ms);
	fprintf(stderr, "attach, the cache device hung: %s after %llu ms (rc %d)\n",
	        ended ? "returned" : "still out", (unsigned long long)ms, cl.rc);
	CU_ASSERT(ended);
	CU_ASSERT_EQUAL(cl.rc, -ETIMEDOUT);
	for (int i = 0; i < (int)WAIT_MS && !__atomic_load_n(&sc.done, __ATOMIC_SEQ_CST); i++)
		usleep(1000);
	fprintf(stderr, "stats meanwhile: %s\n",
	        __atomic_load_n(&sc.done, __ATOMIC_SEQ_CST) ? "answered" : "still out");
	CU_ASSERT(__atomic_load_n(&sc.done, __ATOMIC_SEQ_CST));
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, BS, buf), 0); /* disk0 still served */
	CU_ASSERT(atomic_load(&c->meta_stuck));

	__atomic_store_n(&g_dev_hold, 0, __ATOMIC_SEQ_CST); /* the device answers again */
	bg_join(&cl);
	bg_join(&sc);
	CU_ASSERT(wait_inflight(c, 0));
	reactor_down();
	if (cl.rc == 0)
		hl_origin_close(cl.out);
	else
		hl_origin_close(cl.inner);
	hl_origin_close(o);
	hl_cache_close(c); /* parked (the sync was given up on) */
	dev_remove();
	free(fa.mem);
	free(fb.mem);
	free(buf);
}

/*
 * A reload serves an origin without this cache (hl_cache_disown): the
 * disk's proof leaves RAM, then the map. A map write that does not answer
 * refuses the reload (the origin is not served without the cache), but the
 * proof was gone from RAM already: the next reload's disown found nothing
 * to forget and let the origin be written without the cache while the map
 * may still hold the proof (an exclusive origin's vouches for everything:
 * a restart stale). Now a refused disown keeps the proof in RAM, and a
 * retry is refused the same way while the map does not answer.
 */
static void test_disown_map_hung(void)
{
	struct fake f, g;
	struct hl_cache *c;
	struct hl_origin *o, *other;
	uint8_t *buf = malloc(8 * BS);
	char tmp[96];
	int rc1, rc2;

	o = fixture_up(&c, NULL, &f, 96, "fake:disown");
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, 8 * BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT(wait_proof(c, 0));
	c->drain_ms = BOUND_MS;
	reactor_down();
	hl_origin_close(o); /* detached: the map remembers it with its proof */
	CU_ASSERT(map_holds("proof "));
	map_hang(tmp, sizeof(tmp));
	fake_init(&g, LUN_SIZE, 97);
	other = fake_origin(&g, "fake:disown"); /* the same origin, served without the cache */
	rc1 = hl_cache_disown(c, other);
	rc2 = hl_cache_disown(c, other); /* the reload tried again */
	fprintf(stderr, "disown, the map hung: %d, again: %d\n", rc1, rc2);
	CU_ASSERT(rc1 != 0);
	CU_ASSERT(rc2 != 0);
	pthread_mutex_lock(&c->lock);
	CU_ASSERT(c->n_ents == 1 && c->ents[0]->proof != NULL);
	pthread_mutex_unlock(&c->lock);
	map_unhang(tmp);
	CU_ASSERT(map_holds("proof ")); /* (the write given up on failed: a FIFO) */
	hl_origin_close(other);
	hl_cache_close(c);
	dev_remove();
	free(f.mem);
	free(g.mem);
	free(buf);
}

struct unhang_later {
	char tmp[96];
	unsigned ms;
};

static void *unhang_main(void *arg)
{
	struct unhang_later *u = arg;

	usleep(u->ms * 1000);
	map_unhang(u->tmp);
	return NULL;
}

/*
 * The file system answers again after a write was given up on: a seal
 * that comes while a (slow, not hung) write is under way waits for it as
 * usual and writes "failed" itself. (The flag that said "given up on"
 * stayed set for ever: such a seal gave up at once, -ETIMEDOUT, and a
 * kill then took the cache for stuck.) Here an attach's map write is
 * given up on and returns; then another attach's write blocks for 100 ms
 * while the seal comes.
 */
static void test_map_back_seal_waits(void)
{
	struct fake f, g;
	struct hl_cache *c;
	struct bg_call cl = {0}, cl2 = {0};
	struct unhang_later u = {.ms = 100};
	char tmp[96];
	uint64_t ms;
	pthread_t tu;
	int rc;

	dev_name();
	fake_init(&f, LUN_SIZE, 98);
	fake_init(&g, LUN_SIZE, 99);
	reactor_up();
	c = cache_open(NULL);
	c->drain_ms = BOUND_MS;
	/* a write given up on, then the file system answers */
	map_hang(tmp, sizeof(tmp));
	cl.c = c;
	cl.inner = fake_origin(&f, "fake:back-a");
	bg_attach(&cl);
	CU_ASSERT_EQUAL(cl.rc, -ETIMEDOUT);
	map_unhang(tmp);
	for (int i = 0; i < (int)WAIT_MS && atomic_load(&c->map_busy); i++)
		usleep(1000);
	CU_ASSERT(!atomic_load(&c->map_busy));

	/* a slow write (100 ms) under way when the seal comes */
	map_hang(u.tmp, sizeof(u.tmp));
	cl2.c = c;
	cl2.disk = "disk1";
	cl2.inner = fake_origin(&g, "fake:back-b");
	bg_start(&cl2, bg_attach);
	for (int i = 0; i < (int)WAIT_MS && !atomic_load(&c->map_busy); i++)
		usleep(1000);
	CU_ASSERT(atomic_load(&c->map_busy));
	CU_ASSERT_FATAL(pthread_create(&tu, NULL, unhang_main, &u) == 0);
	ms = hl_now_ns() / 1000000u;
	rc = engine_map_seal(c);
	ms = hl_now_ns() / 1000000u - ms;
	fprintf(stderr, "a seal behind a slow map write, after one given up on: %d in %llu ms\n",
	        rc, (unsigned long long)ms);
	CU_ASSERT_EQUAL(rc, 0);
	bg_join(&cl2);
	pthread_join(tu, NULL);
	for (int i = 0; i < (int)WAIT_MS && atomic_load(&c->map_busy); i++)
		usleep(1000);
	CU_ASSERT(map_holds("state failed"));
	reactor_down();
	if (cl2.rc == 0)
		hl_origin_close(cl2.out);
	else
		hl_origin_close(cl2.inner);
	hl_origin_close(cl.inner);
	hl_cache_close(c);
	dev_remove();
	free(f.mem);
	free(g.mem);
}

int main(void)
{
	static const struct hl_test tests[] = {
	    {"map hung: an attach fails within its bound", test_attach_map_hung},
	    {"map hung: the detach's proof and the close return", test_close_map_hung},
	    {"map hung: the proof's write does not hold the writes up", test_proof_write_map_hung},
	    {"map back: a seal after one given up on waits as usual", test_map_back_seal_waits},
	    {"map hung: a refused disown keeps the proof, a retry is refused too",
	     test_disown_map_hung},
	    {"device hung: an attach's record sync is bounded, stats answer",
	     test_attach_device_hung},
	    {NULL, NULL},
	};
	hl_log_open(false, HL_LOG_WARN);
	return hl_test_run("cache_engine_mapwait", tests);
}
