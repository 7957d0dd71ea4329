/*
 * engine_seal_ut.c - the map's seal ("failed": the next start formats)
 * is never lost. A seal that cannot be written at once (the map's file
 * system fails: here its temporary file is a directory, so every map write
 * fails) is retried until it lands, and the stop removes a map it still
 * could not seal. Before, a failed seal was dropped: the map said "open"
 * for good, and a restart trusted records that writes in pass-through had
 * made stale. The fixture is engine_ut.c's (engine_ut_lib.h).
 */

#include "engine_ut_lib.h"

#include <sys/stat.h>

#define BOUND_MS 400u
#define WAIT_MS  3000u

/* Until the map file holds needle, at most ms. */
static bool map_holds_within(const char *needle, unsigned ms)
{
	for (unsigned i = 0; i < ms; i++) {
		if (access(g_map, F_OK) == 0 && map_holds(needle))
			return true;
		usleep(1000);
	}
	return false;
}

/* A cache device that reads but fails every write (an SSD gone read-only at its end of life). */
static int ro_pwrite(struct hl_cache_dev *d, const void *buf, size_t len, uint64_t off)
{
	(void)d, (void)buf, (void)len, (void)off;
	return -EIO;
}

static struct hl_cache_dev_ops g_ro_ops;

static void dev_read_only(struct hl_cache *c)
{
	g_ro_ops = *c->dev->ops;
	g_ro_ops.pwrite = ro_pwrite;
	c->dev->ops = &g_ro_ops;
}

/*
 * disk0 (exclusive = yes: its proof vouches for every block the cache
 * saw written) with blocks 0-7 cached and proven in the map; then the
 * device fails for writes and the map's file system fails its writes too.
 * The kill's seal fails, its superblock wipe fails, the kill goes on
 * (killed: writes to the origin without their records) and block 0 is
 * written to the origin only. @return the cache, its disk in *o, the
 * map's temporary file (a directory) in tmp.
 */
static struct hl_cache *seal_fails(struct fake *f, uint8_t seed, struct hl_origin **o, uint8_t *w,
                                   char *tmp, size_t len)
{
	struct hl_cache *c;
	uint8_t *buf = malloc(8 * BS);
	struct step st;
	int rc;

	g_sole_writer = true;
	dev_name();
	fake_init(f, LUN_SIZE, seed);
	f->no_proof = true;
	*o = cache_up(&c, NULL, f, "fake:seal");
	CU_ASSERT_EQUAL(do_io(*o, HL_IO_READ, 0, 8 * BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT(wait_synced(c));
	CU_ASSERT_FATAL(wait_proof(c, 0));
	CU_ASSERT_FATAL(map_holds_within("proof ", WAIT_MS));
	c->drain_ms = BOUND_MS;
	snprintf(tmp, len, "%s.tmp", g_map);
	rc = -1;
	for (int i = 0; i < 1000 && rc; i++) /* (EEXIST: a proof's map write under way) */
		if ((rc = mkdir(tmp, 0700)))
			usleep(1000);
	CU_ASSERT_FATAL(rc == 0);
	dev_read_only(c);
	engine_dev_error(c, NULL, -EIO);
	memset(w, 0x5e, BS);
	io_start(&st, *o, HL_IO_WRITE, 0, BS, w);
	rc = io_wait_within(&st, WAIT_MS);
	CU_ASSERT_EQUAL_FATAL(rc, 0);
	CU_ASSERT(memcmp(f->mem, w, BS) == 0);
	CU_ASSERT(map_holds("state open")); /* (nothing could be written yet) */
	free(buf);
	return c;
}

/*
 * The restart on copies of the device and map (the parked cache keeps the
 * device): block 0 must be the origin's, read from it (formatted).
 */
static void restart_on_copy(struct fake *f, const uint8_t *w)
{
	char old_dev[64], old_map[80];
	struct hl_cache *c;
	struct hl_origin *o;
	uint8_t *buf = malloc(BS);
	uint8_t src;
	bool map = access(g_map, F_OK) == 0;

	snprintf(old_dev, sizeof(old_dev), "%s", g_dev);
	snprintf(old_map, sizeof(old_map), "%s", g_map);
	dev_name();
	CU_ASSERT_FATAL(file_copy(old_dev, g_dev) == 0);
	if (map)
		CU_ASSERT_FATAL(file_copy(old_map, g_map) == 0);
	unlink(old_dev);
	unlink(old_map);
	reactor_up();
	c = cache_open(NULL);
	o = attach(c, f, "fake:seal");
	CU_ASSERT_EQUAL(do_read_src(o, 0, BS, buf, &src), 0);
	fprintf(stderr, "the restart: block 0 %s, %s\n",
	        memcmp(buf, w, BS) ? "STALE" : "the origin's",
	        src == HL_IO_SRC_MISS ? "a miss (formatted)" : "a hit");
	CU_ASSERT_EQUAL(src, HL_IO_SRC_MISS);
	CU_ASSERT(memcmp(buf, w, BS) == 0);
	CU_ASSERT(wait_inflight(c, 0));
	fixture_down(c, o, f);
	g_sole_writer = false;
	free(buf);
}

/*
 * The map's file system fails for a while (full, or an error), then
 * answers again: the seal that failed is written then ("failed"). Before,
 * it was dropped: the map said "open" with the proof, and the restart
 * served block 0 from the cache (stale: the origin has w).
 */
static void test_seal_retried(void)
{
	struct hl_cache *c;
	struct hl_origin *o;
	struct fake f;
	uint8_t *w = malloc(BS);
	char tmp[96];
	bool failed;

	c = seal_fails(&f, 81, &o, w, tmp, sizeof(tmp));
	CU_ASSERT(rmdir(tmp) == 0); /* the file system answers again */
	failed = map_holds_within("state failed", WAIT_MS);
	fprintf(stderr, "a seal that failed, the file system back: the map %s\n",
	        failed ? "says failed" : "still says open");
	CU_ASSERT(failed);
	reactor_down();
	hl_origin_close(o);
	hl_cache_close(c);
	restart_on_copy(&f, w);
	free(w);
}

/*
 * The map's file system still fails its writes at the stop: the stop
 * removes the map (a start without one formats) rather than leave it
 * "open". Before, the map said "open" and the restart served block 0
 * stale.
 */
static void test_seal_at_stop(void)
{
	struct hl_cache *c;
	struct hl_origin *o;
	struct fake f;
	uint8_t *w = malloc(BS);
	char tmp[96];
	bool gone;

	c = seal_fails(&f, 82, &o, w, tmp, sizeof(tmp));
	reactor_down();
	hl_origin_close(o);
	hl_cache_close(c);
	gone = access(g_map, F_OK) != 0 || map_holds("state failed");
	fprintf(stderr, "a seal still failing at the stop: the map %s\n",
	        gone ? "is gone or says failed" : "still says open");
	CU_ASSERT(gone);
	rmdir(tmp);
	restart_on_copy(&f, w);
	free(w);
}

int main(void)
{
	static const struct hl_test tests[] = {
	    {"a seal that failed is written once the map's file system answers", test_seal_retried},
	    {"a seal still failing at the stop: the map is removed, the restart formats",
	     test_seal_at_stop},
	    {NULL, NULL},
	};
	hl_log_open(false, HL_LOG_WARN);
	return hl_test_run("cache_engine_seal", tests);
}
