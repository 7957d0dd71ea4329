/*
 * engine_rev17_ut.c - the review of the map changes of h32b (the seal
 * retried, the bounded map read, the release at the seal, the refused
 * disown's mark taken back): what it found. A disown refused twice kept
 * its mark for good; an open went by a map read before it held the device
 * (another hotlund's seal meanwhile ignored). The fixture is engine_ut.c's
 * (engine_ut_lib.h); the map's file system hangs as in engine_mapwait_ut
 * (its temporary file a FIFO nobody reads).
 */

#include "engine_ut_lib.h"

#include <dirent.h>
#include <sys/file.h>
#include <sys/stat.h>

#define BOUND_MS 400u
#define WAIT_MS  3000u

/*
 * A disown refused, then retried (the caller refuses to serve the origin
 * without the cache, and tries again: disown's own comment) and refused
 * again, both while the map hangs. The retry found disk0 marked already,
 * so it did not count the mark as its own (fresh) and cleared the first
 * refusal's disown_undo: the mark stayed for good, no proof was recorded
 * for disk0 until its next attach (cold). Now the mark still goes with
 * the next map write that lands.
 */
static void test_disown_refused_twice(void)
{
	struct disown_hung d;
	char p1[HL_ORIGIN_PROOF_MAX];
	bool moved;

	disown_hung_up(&d, 91, "fake:r17d", BOUND_MS);
	CU_ASSERT(hl_cache_disown(d.c, d.other) != 0);
	CU_ASSERT(hl_cache_disown(d.c, d.other) != 0); /* the retry: the write still out, refused */
	map_unhang(d.tmp);
	moved = disown_hung_write_moves(&d, 0x3c, WAIT_MS, p1, sizeof(p1));
	fprintf(stderr, "a disown refused twice, then a write: the proof %s (%s -> %s)\n",
	        moved ? "moved on" : "stayed", d.p0, p1);
	CU_ASSERT(moved);
	disown_hung_down(&d);
}

/* How many descriptors of this process are open on path. */
static int fds_on(const char *path)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	char link[PATH_MAX], target[PATH_MAX];
	int n = 0;

	while (d && (de = readdir(d))) {
		ssize_t len;

		snprintf(link, sizeof(link), "/proc/self/fd/%s", de->d_name);
		len = readlink(link, target, sizeof(target) - 1);
		if (len > 0) {
			target[len] = '\0';
			n += strcmp(target, path) == 0;
		}
	}
	if (d)
		closedir(d);
	return n;
}

/* Rewrite the map's state line (what another hotlund's stop writes: its seal). */
static void map_state_set(const char *from, const char *to)
{
	char text[8192], out[8300], tmp[96], *p;
	size_t n;
	FILE *f = fopen(g_map, "r");

	CU_ASSERT_FATAL(f != NULL);
	n = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[n] = '\0';
	p = strstr(text, from);
	CU_ASSERT_FATAL(p != NULL);
	*p = '\0';
	snprintf(out, sizeof(out), "%s%s%s", text, to, p + strlen(from));
	snprintf(tmp, sizeof(tmp), "%s.r17", g_map);
	f = fopen(tmp, "w");
	CU_ASSERT_FATAL(f != NULL);
	fputs(out, f);
	fclose(f);
	CU_ASSERT_FATAL(rename(tmp, g_map) == 0);
}

/*
 * The map is read once nothing else can change it: after the device's
 * exclusive lock, as before a842a96. A hotlund still stopping on the
 * device (here: a lock on it held by the test) may seal its map "failed"
 * (its device failed, its writes went to the origin in pass-through
 * while the records still claim their blocks) before it lets the device
 * go. The open read the map before it waited for the lock and went by
 * that older "clean": warm, block 0 a stale hit. Now it reads the map
 * again once it holds the device: "failed", formatted, block 0 a miss.
 */
static void test_map_read_after_lock(void)
{
	struct bg_open b = {0};
	struct hl_cache *c;
	struct hl_origin *o;
	struct fake f;
	uint8_t *buf = malloc(8 * BS), src = 0;
	bool waiting = false;
	int fd;

	o = fixture_up(&c, NULL, &f, 93, "fake:r17m");
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, 8 * BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	cache_down(c, o);
	CU_ASSERT_FATAL(map_holds("state clean"));
	/* the other hotlund: it holds the device, its proof still vouches for block 0 */
	fd = open(g_dev, O_RDONLY | O_CLOEXEC);
	CU_ASSERT_FATAL(fd >= 0 && flock(fd, LOCK_EX) == 0);
	CU_ASSERT_FATAL(pthread_create(&b.t, NULL, bg_open_main, &b) == 0);
	/* the open opened the device (its map read before that): it waits for the lock now */
	for (unsigned i = 0; i < WAIT_MS && !waiting; i++) {
		waiting = fds_on(g_dev) >= 2 && !atomic_load(&b.done);
		usleep(1000);
	}
	CU_ASSERT(waiting);
	/* its stop: block 0 written in pass-through, the map sealed, the device let go */
	memset(f.mem, 0x6b, BS);
	map_state_set("state clean\n", "state failed\n");
	CU_ASSERT(map_holds("state failed"));
	close(fd);
	pthread_join(b.t, NULL);
	CU_ASSERT_EQUAL_FATAL(b.rc, 0);
	c = b.c;
	hl_cache_restore_wait(c);
	reactor_up();
	o = attach(c, &f, "fake:r17m");
	CU_ASSERT_EQUAL(do_read_src(o, 0, BS, buf, &src), 0);
	fprintf(stderr, "a map sealed while the open waited for the device: block 0 %s, %s\n",
	        memcmp(buf, f.mem, BS) ? "STALE" : "the origin's",
	        src == HL_IO_SRC_MISS ? "a miss (formatted)" : "a hit");
	CU_ASSERT_EQUAL(src, HL_IO_SRC_MISS);
	CU_ASSERT(memcmp(buf, f.mem, BS) == 0);
	CU_ASSERT(wait_inflight(c, 0));
	fixture_down(c, o, &f);
	free(buf);
}

int main(void)
{
	static const struct hl_test tests[] = {
	    {"a disown refused twice: the disk records proofs again", test_disown_refused_twice},
	    {"a map sealed while the open waits for the device: the open formats",
	     test_map_read_after_lock},
	    {NULL, NULL},
	};
	hl_log_open(false, HL_LOG_WARN);
	return hl_test_run("cache_engine_rev17", tests);
}
