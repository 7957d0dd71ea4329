/*
 * engine_mapread_ut.c - the map read at open is bounded like its writes:
 * a state file system that stops answering hung the start (or the reload)
 * that opened the cache. The map's file system hangs here without FUSE:
 * the map itself is a FIFO nobody writes, so the reader's open blocks
 * until the test opens the other end. The fixture is engine_ut.c's
 * (engine_ut_lib.h).
 */

#include "engine_ut_lib.h"

#include <sys/stat.h>

#define BOUND_MS 400u
#define WAIT_MS  3000u

/*
 * The map does not answer at open: the open fails within the bound with
 * -ETIMEDOUT (the daemon reports the cache as not opened); it waited for
 * ever before. Once the file system answers, an open works again.
 */
static void test_open_map_hung(void)
{
	struct bg_open b = {0};
	uint64_t t0, ms;
	int fd;

	dev_name();
	CU_ASSERT_FATAL(mkfifo(g_map, 0600) == 0);
	setenv("HOTLUN_TEST_CACHE_DRAIN_MS", "400", 1);
	t0 = hl_now_ns();
	CU_ASSERT_FATAL(pthread_create(&b.t, NULL, bg_open_main, &b) == 0);
	for (unsigned i = 0; i < WAIT_MS && !atomic_load(&b.done); i++)
		usleep(1000);
	ms = (hl_now_ns() - t0) / 1000000u;
	fprintf(stderr, "an open whose map does not answer: %s in %llu ms (bound %u)\n",
	        atomic_load(&b.done) ? "returned" : "still out", (unsigned long long)ms, BOUND_MS);
	CU_ASSERT(atomic_load(&b.done));
	/* the file system answers: the reader's open returns (EOF), the old code's open goes on */
	fd = open(g_map, O_WRONLY);
	if (fd >= 0)
		close(fd);
	pthread_join(b.t, NULL);
	unsetenv("HOTLUN_TEST_CACHE_DRAIN_MS");
	CU_ASSERT_EQUAL(b.rc, -ETIMEDOUT);
	if (b.rc == 0)
		hl_cache_close(b.c);
	unlink(g_map);
	/* a map file again: the open works (formats: no map) */
	reactor_up();
	b.c = cache_open(NULL);
	reactor_down();
	hl_cache_close(b.c);
	dev_remove();
}

/*
 * A map read at open is the one the start goes by: a warm restart still
 * finds its disks and restores them (the read's text, not the file, is
 * parsed).
 */
static void test_open_map_read_warm(void)
{
	struct hl_cache *c;
	struct hl_origin *o;
	struct fake f;
	uint8_t *buf = malloc(8 * BS);
	uint8_t src;

	o = fixture_up(&c, NULL, &f, 91, "fake:read");
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, 8 * BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	cache_down(c, o);
	o = cache_up(&c, NULL, &f, "fake:read");
	CU_ASSERT_EQUAL(do_read_src(o, 0, BS, buf, &src), 0);
	CU_ASSERT_EQUAL(src, HL_IO_SRC_HIT);
	CU_ASSERT(memcmp(buf, f.mem, BS) == 0);
	CU_ASSERT(c->map_text == NULL); /* (parsed once, then freed) */
	CU_ASSERT(wait_inflight(c, 0));
	fixture_down(c, o, &f);
	free(buf);
}

int main(void)
{
	static const struct hl_test tests[] = {
	    {"map hung at open: the open fails within its bound", test_open_map_hung},
	    {"the map read at open: a warm restart as before", test_open_map_read_warm},
	    {NULL, NULL},
	};
	hl_log_open(false, HL_LOG_WARN);
	return hl_test_run("cache_engine_mapread", tests);
}
