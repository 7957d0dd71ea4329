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
	struct disown_hung d;
	char p1[HL_ORIGIN_PROOF_MAX], line[HL_ORIGIN_PROOF_MAX + 16];
	bool moved;
	int rc;

	disown_hung_up(&d, 77, "fake:dretry", BOUND_MS);
	rc = hl_cache_disown(d.c, d.other);
	CU_ASSERT(rc != 0);
	map_unhang(d.tmp);
	/* refused: disk0 stays served through the cache, and is written */
	moved = disown_hung_write_moves(&d, 0x2d, WAIT_MS, p1, sizeof(p1));
	fprintf(stderr, "a refused disown, then a write: the proof %s (%s -> %s)\n",
	        moved ? "moved on" : "stayed", d.p0, p1);
	CU_ASSERT(moved);
	snprintf(line, sizeof(line), "proof %u %s", d.c->ents[0]->id, p1);
	for (int i = 0; i < (int)WAIT_MS && !map_holds(line); i++)
		usleep(1000);
	CU_ASSERT(map_holds(line));
	disown_hung_down(&d);
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
