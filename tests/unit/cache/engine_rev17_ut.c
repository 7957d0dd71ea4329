/*
 * engine_rev17_ut.c - the review of the map changes of h32b (the seal
 * retried, the bounded map read, the release at the seal, the refused
 * disown's mark taken back): what it found. The fixture is engine_ut.c's
 * (engine_ut_lib.h); the map's file system hangs as in engine_mapwait_ut
 * (its temporary file a FIFO nobody reads).
 */

#include "engine_ut_lib.h"

#include <sys/stat.h>

#define BOUND_MS 400u
#define WAIT_MS  3000u

/* disk0's proof in RAM, under sync_lock (the metadata thread replaces it). */
static void proof_now(struct hl_cache *c, char *out, size_t len)
{
	pthread_mutex_lock(&c->sync_lock);
	snprintf(out, len, "%s", c->ents[0]->proof ? c->ents[0]->proof : "");
	pthread_mutex_unlock(&c->sync_lock);
}

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
	struct fake f, g;
	struct hl_cache *c;
	struct hl_origin *o, *other;
	uint8_t *buf = malloc(8 * BS);
	char tmp[96], p0[HL_ORIGIN_PROOF_MAX], p1[HL_ORIGIN_PROOF_MAX];
	bool moved = false;

	o = fixture_up(&c, NULL, &f, 91, "fake:r17d");
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, 8 * BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT_FATAL(wait_proof(c, 0));
	proof_now(c, p0, sizeof(p0));
	c->drain_ms = BOUND_MS;
	map_hang(tmp, sizeof(tmp));
	fake_init(&g, LUN_SIZE, 92);
	other = fake_origin(&g, "fake:r17d"); /* the same origin, to be served without the cache */
	CU_ASSERT(hl_cache_disown(c, other) != 0);
	CU_ASSERT(hl_cache_disown(c, other) != 0); /* the retry: the write still out, refused */
	map_unhang(tmp);
	memset(buf, 0x3c, BS);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_WRITE, 9 * BS, BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	for (int i = 0; i < (int)WAIT_MS && !moved; i++) {
		proof_now(c, p1, sizeof(p1));
		moved = strcmp(p1, p0) != 0;
		usleep(1000);
	}
	fprintf(stderr, "a disown refused twice, then a write: the proof %s (%s -> %s)\n",
	        moved ? "moved on" : "stayed", p0, p1);
	CU_ASSERT(moved);
	reactor_down();
	hl_origin_close(other);
	hl_origin_close(o);
	hl_cache_close(c);
	dev_remove();
	free(f.mem);
	free(g.mem);
	free(buf);
}

int main(void)
{
	static const struct hl_test tests[] = {
	    {"a disown refused twice: the disk records proofs again", test_disown_refused_twice},
	    {NULL, NULL},
	};
	hl_log_open(false, HL_LOG_WARN);
	return hl_test_run("cache_engine_rev17", tests);
}
