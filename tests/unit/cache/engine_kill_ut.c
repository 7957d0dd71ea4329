/*
 * engine_kill_ut.c - the kill of a failed cache device's metadata
 * (engine_meta_kill, on its own thread since the device may fail while a
 * record sync is stuck) against the threads that write the device's
 * superblock: what a restart finds after it. The fixture is engine_ut.c's
 * (engine_ut_lib.h).
 */

#include "engine_ut_lib.h"

#include <sys/stat.h>

/* Until nobody holds c->sync_lock (3 s at most). */
static bool sync_lock_free(struct hl_cache *c)
{
	for (int i = 0; i < 3000; i++) {
		if (pthread_mutex_trylock(&c->sync_lock) == 0) {
			pthread_mutex_unlock(&c->sync_lock);
			return true;
		}
		usleep(1000);
	}
	return false;
}

/*
 * The device fails while the metadata thread's record sync is stuck (a
 * device write that does not return) and while the map cannot be written
 * (its file system fails: here the map's temporary file is a directory).
 * The kill no longer waits for sync_lock: it wipes both superblocks while
 * the sync is out, and "the wiped superblocks stand for" the map. But that
 * sync, back late, writes the superblock again (a record sync during a
 * lazy restore marks what changed since: sync_mark, SB_PENDING; the
 * restore's end writes SB_OPEN): the restart found a valid superblock and
 * a map saying "open", and restored the records of a device that failed.
 * A write made in pass-through after the kill is then served stale from
 * them when the origin's proof cannot see writes (exclusive = yes: an
 * iscsi:// or block device origin's proof is its size, its identity).
 */
static void test_kill_late_sync_rewrites_superblock(void)
{
	struct fake f;
	struct hl_cache *c;
	struct hl_origin *o;
	struct step st;
	char hold[96], tmp[96], rs_hold[96], keep[112];
	uint8_t *buf = malloc(8 * BS), *w = malloc(BS);
	uint64_t gen;
	unsigned long syncs;
	uint8_t src;
	int rc;

	/* blocks 0..7 on the device, a clean stop with their proof */
	o = fixture_up(&c, NULL, &f, 83, "fake:late");
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, 8 * BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	cache_down(c, o);

	/* a lazy restart: the loader waits before its first page while rs_hold exists */
	snprintf(rs_hold, sizeof(rs_hold), "%s.rs-hold", g_dev);
	CU_ASSERT_FATAL(mkdir(rs_hold, 0700) == 0);
	setenv("HOTLUN_TEST_RESTORE_HOLD", rs_hold, 1);
	g_lazy = true;
	o = cache_up(&c, NULL, &f, "fake:late");
	g_lazy = false;
	unsetenv("HOTLUN_TEST_RESTORE_HOLD");
	gen = __atomic_load_n(&f.gen, __ATOMIC_SEQ_CST); /* what the map's proof says */
	c->drain_ms = 200;
	snprintf(hold, sizeof(hold), "%s.hold", g_dev);
	CU_ASSERT_FATAL(mkdir(hold, 0700) == 0); /* (a directory: access() sees it) */
	c->meta_hold = strdup(hold);
	snprintf(tmp, sizeof(tmp), "%s.tmp", g_map);
	rc = -1;
	for (int i = 0; i < 1000 && rc; i++) /* (EEXIST: a map write under way) */
		if ((rc = mkdir(tmp, 0700)))
			usleep(1000);
	CU_ASSERT_FATAL(rc == 0);

	/* a write during the restore: the next record sync marks it, and sticks */
	memset(w, 0x71, BS);
	io_start(&st, o, HL_IO_WRITE, 0, BS, w);
	CU_ASSERT_FATAL(sync_lock_kept(c));
	syncs = atomic_load(&c->meta_syncs);

	/* the device fails: the kill runs, the map cannot say so */
	engine_dev_error(c, NULL, -EIO);
	CU_ASSERT_EQUAL(io_wait_within(&st, 3000), 0);
	CU_ASSERT(atomic_load(&c->killed));
	CU_ASSERT(map_holds("state open"));
	/* a write in pass-through: the origin changes, the records do not know */
	memset(w, 0x72, BS);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_WRITE, BS, BS, w), 0);
	CU_ASSERT(memcmp(f.mem + BS, w, BS) == 0);

	/* the stuck sync returns */
	rmdir(hold);
	for (int i = 0; i < 3000 && atomic_load(&c->meta_syncs) == syncs; i++)
		usleep(1000);
	CU_ASSERT(atomic_load(&c->meta_syncs) > syncs);
	CU_ASSERT(sync_lock_free(c));
	CU_ASSERT(wait_inflight(c, 0));
	reactor_down();
	hl_origin_close(o);
	/*
	 * The close removes a map it cannot seal (engine_map_seal_last); the
	 * restart below goes by the map as it was before (a file system that
	 * could not remove it either), "open": the wiped superblocks alone.
	 */
	snprintf(keep, sizeof(keep), "%s.keep", g_map);
	CU_ASSERT_FATAL(link(g_map, keep) == 0);
	/*
	 * The close's last seal waits drain_ms for the retrying writer to
	 * remove the map: 200 ms was too short on a loaded machine (its try
	 * landed 32 ms late, the cache was parked with its device held and the
	 * reopen below found the device busy). Nothing is stuck by now.
	 */
	c->drain_ms = 3000;
	hl_cache_close(c);
	rmdir(rs_hold);
	rmdir(tmp); /* the map's file system answers again */
	CU_ASSERT(access(g_map, F_OK) != 0);
	CU_ASSERT_FATAL(rename(keep, g_map) == 0);
	CU_ASSERT(map_holds("state open"));

	/* an exclusive origin's proof does not see the writes: it still matches */
	__atomic_store_n(&f.gen, gen, __ATOMIC_SEQ_CST);
	__atomic_store_n(&f.nwr, 0, __ATOMIC_SEQ_CST);
	o = cache_up(&c, NULL, &f, "fake:late");
	for (uint64_t b = 0; b < 8; b++) {
		memset(buf, 0, BS);
		CU_ASSERT_EQUAL(do_read_src(o, b * BS, BS, buf, &src), 0);
		CU_ASSERT_EQUAL(src, HL_IO_SRC_MISS); /* formatted: no record trusted */
		CU_ASSERT(memcmp(buf, f.mem + b * BS, BS) == 0);
	}
	CU_ASSERT(wait_inflight(c, 0));
	fixture_down(c, o, &f);
	free(buf);
	free(w);
}

/*
 * The device fails while the metadata thread's record sync is stuck and the
 * map's file system does not answer (the map's temporary file a FIFO nobody
 * reads: its open blocks). The kill gives up on its map write past the
 * bound (meta_stuck), the write left running holding map_mu. Then the
 * close: the metadata thread does not end within the bound either, and its
 * stop sealed the map again, waiting for map_mu for ever: the close (a
 * reload's, a stop's) hung. Now a seal already given up on is not waited
 * for: the close parks the cache within its bounds.
 */
static void test_kill_map_hung_close_returns(void)
{
	struct fake f;
	struct hl_cache *c;
	struct hl_origin *o;
	struct step st;
	struct bg_call cc = {0};
	char hold[96], tmp[96];
	uint8_t *buf = malloc(8 * BS), *w = malloc(BS);
	uint64_t ms;
	bool ended;
	int rc, fd;

	o = fixture_up(&c, NULL, &f, 85, "fake:hung-close");
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, 8 * BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT(wait_synced(c));
	c->drain_ms = 200;
	snprintf(hold, sizeof(hold), "%s.hold", g_dev);
	CU_ASSERT_FATAL(mkdir(hold, 0700) == 0);
	c->meta_hold = strdup(hold);
	/* a write of a recorded block waits for a sync: the sync takes it and sticks */
	memset(w, 0x73, BS);
	io_start(&st, o, HL_IO_WRITE, 0, BS, w);
	CU_ASSERT_FATAL(sync_lock_kept(c));
	snprintf(tmp, sizeof(tmp), "%s.tmp", g_map);
	rc = -1;
	for (int i = 0; i < 1000 && rc; i++) /* (EEXIST: a map write under way) */
		if ((rc = mkfifo(tmp, 0600)))
			usleep(1000);
	CU_ASSERT_FATAL(rc == 0);
	engine_dev_error(c, NULL, -EIO);
	CU_ASSERT_EQUAL(io_wait_within(&st, 3000), 0);
	CU_ASSERT(atomic_load(&c->meta_stuck));
	CU_ASSERT(wait_inflight(c, 0));
	reactor_down();
	hl_origin_close(o);

	cc.c = c;
	bg_start(&cc, bg_cache_close);
	ended = bg_within(&cc, 3000, &ms);
	fprintf(stderr, "close, the map's file system hung, the sync stuck: %s after %llu ms\n",
	        ended ? "returned" : "still out", (unsigned long long)ms);
	CU_ASSERT(ended);
	/* the file system answers again (the old code's close returns then) */
	fd = open(tmp, O_RDONLY | O_NONBLOCK);
	CU_ASSERT(fd >= 0);
	bg_join(&cc);
	rmdir(hold); /* the parked cache's metadata thread ends its sync */
	if (fd >= 0)
		close(fd);
	unlink(tmp);
	dev_remove();
	free(f.mem);
	free(buf);
	free(w);
}

int main(void)
{
	static const struct hl_test tests[] = {
	    {"kill: a record sync back after the superblocks' wipe leaves none valid",
	     test_kill_late_sync_rewrites_superblock},
	    {"kill: the map's file system hung, the sync stuck: the close still returns",
	     test_kill_map_hung_close_returns},
	    {NULL, NULL},
	};
	hl_log_open(false, HL_LOG_WARN);
	return hl_test_run("cache_engine_kill", tests);
}
