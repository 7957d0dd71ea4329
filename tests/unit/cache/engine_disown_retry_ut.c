/*
 * engine_disown_retry_ut.c - a disown refused because the map did not
 * answer leaves the attached disk as it was. hl_cache_disown marks an
 * attached disk "disowned" (its LU is being replaced: no proof from it any
 * more) before it writes the map; a write that fails refuses the disown,
 * and the disk stays served through the cache, but the mark stayed: no
 * proof was recorded for it until its next attach (cold, not stale: the
 * map keeps an older proof, true when taken). Now the mark goes with the
 * next map write that lands. The map's file system hangs as in
 * engine_mapwait_ut (its temporary file a FIFO nobody reads). The fixture
 * is engine_ut.c's (engine_ut_lib.h).
 */

#include "engine_ut_lib.h"

#include <sys/stat.h>

#define BOUND_MS 400u
#define WAIT_MS  3000u

/*
 * disk0 attached and proven; a disown of its origin while the map hangs
 * is refused (-ETIMEDOUT); the map answers again; disk0 is written (its
 * origin's proof moves on). Before, its proof stayed the one from before
 * the disown until its next attach; now the metadata thread records the
 * new one (in RAM and in the map).
 */
static void test_disown_refused_proofs_again(void)
{
	struct fake f, g;
	struct hl_cache *c;
	struct hl_origin *o, *other;
	uint8_t *buf = malloc(8 * BS);
	char tmp[96], p0[HL_ORIGIN_PROOF_MAX], p1[HL_ORIGIN_PROOF_MAX],
	    line[HL_ORIGIN_PROOF_MAX + 16];
	bool moved = false;
	int rc;

	o = fixture_up(&c, NULL, &f, 77, "fake:dretry");
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, 8 * BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT_FATAL(wait_proof(c, 0));
	proof_now(c, p0, sizeof(p0));
	c->drain_ms = BOUND_MS;
	map_hang(tmp, sizeof(tmp));
	fake_init(&g, LUN_SIZE, 78);
	other =
	    fake_origin(&g, "fake:dretry"); /* the same origin, to be served without the cache */
	rc = hl_cache_disown(c, other);
	CU_ASSERT(rc != 0);
	map_unhang(tmp);
	/* refused: disk0 stays served through the cache, and is written */
	memset(buf, 0x2d, BS);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_WRITE, 9 * BS, BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	for (int i = 0; i < (int)WAIT_MS && !moved; i++) {
		proof_now(c, p1, sizeof(p1));
		moved = strcmp(p1, p0) != 0;
		usleep(1000);
	}
	fprintf(stderr, "a refused disown, then a write: the proof %s (%s -> %s)\n",
	        moved ? "moved on" : "stayed", p0, p1);
	CU_ASSERT(moved);
	snprintf(line, sizeof(line), "proof %u %s", c->ents[0]->id, p1);
	for (int i = 0; i < (int)WAIT_MS && !map_holds(line); i++)
		usleep(1000);
	CU_ASSERT(map_holds(line));
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
	    {"a disown refused by a hung map: the disk records proofs again",
	     test_disown_refused_proofs_again},
	    {NULL, NULL},
	};
	hl_log_open(false, HL_LOG_WARN);
	return hl_test_run("cache_engine_disown_retry", tests);
}
