/*
 * engine_disown_ut.c - a cache's blocks of an origin that is written
 * without them. The daemon asks every other cache to forget an origin a
 * disk serves (hl_cache_disown) and leaves the disk's own cache to
 * hl_cache_attach; these tests cover what that attach must forget: the
 * same origin under another disk name of the same cache. The fixture is
 * engine_ut.c's (engine_ut_lib.h).
 */

#include "engine_ut_lib.h"

/*
 * disk0 caches an exclusive LUN and stops (its map keeps the proof, the
 * admin's word: exclusive = yes). The next run serves the LUN as disk1 of
 * the same cache (the disk renamed in the config) and writes block 2.
 * The run after serves it as disk0 again: its attach trusted the proof,
 * which no write moves, and served block 2 stale. Now disk1's attach
 * forgets disk0's proof, and disk0's next attach is cold.
 */
static void test_renamed_disk_forgets_old_name(void)
{
	struct hl_cache_engine_stats st;
	struct hl_origin *o, *o1 = NULL;
	struct hl_cache *c;
	struct fake f;
	uint8_t *buf = malloc(8 * BS), *w = malloc(BS);

	o = proven_disk(&c, &f, 51, "fake:lun", buf);
	cache_down(c, o);

	reactor_up();
	c = cache_open(NULL);
	CU_ASSERT_FATAL(hl_cache_attach(c, "disk1", 0, fake_origin(&f, "fake:lun"), &o1) == 0);
	memset(w, 0x3c, BS);
	CU_ASSERT_EQUAL(do_io(o1, HL_IO_WRITE, 2 * BS, BS, w), 0);
	CU_ASSERT(wait_inflight(c, 0));
	cache_down(c, o1);

	proof_restart(&f, "fake:lun", &st); /* (fails on stale data itself) */
	CU_ASSERT_EQUAL(st.warm_kept, 0);
	g_sole_writer = false;
	dev_remove();
	free(f.mem);
	free(buf);
	free(w);
}

int main(void)
{
	static const struct hl_test tests[] = {
	    {"a disk renamed: its old name's proof is forgotten",
	     test_renamed_disk_forgets_old_name},
	    {NULL, NULL},
	};
	hl_log_open(false, HL_LOG_WARN);
	return hl_test_run("cache_engine_disown", tests);
}
