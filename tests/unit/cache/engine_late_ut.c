/*
 * engine_late_ut.c - an origin write that failed may still land later: an
 * iscsi:// WRITE whose session dropped or that outlived the URL's timeout is
 * reported -EIO to the initiator, yet the SAN may hold it and run it after
 * the cache filled the block again from the origin's older bytes. The
 * engine must not keep such a fill (docs/cache-engine.md, "Failed origin
 * writes"). The fixture is engine_ut.c's (engine_ut_lib.h); the fake
 * origin's failed writes change nothing, the test lands them by hand.
 * Also the other change an origin reports late: HL_ORIGIN_CHANGED.
 */

#include "engine_ut_lib.h"

static uint8_t src_of(struct hl_cache *c, struct hl_origin *o, uint64_t off, uint8_t *buf)
{
	uint8_t src = 0;

	CU_ASSERT(do_read_src(o, off, BS, buf, &src) == 0);
	CU_ASSERT(wait_inflight(c, 0));
	return src;
}

/* A write of len bytes of val at off that the origin fails with -EIO. */
static void failed_write(struct fake *f, struct hl_origin *o, uint64_t off, uint64_t len,
                         uint8_t val)
{
	uint8_t *w = malloc(len);

	memset(w, val, len);
	__atomic_store_n(&f->fail_writes, 1, __ATOMIC_RELAXED);
	CU_ASSERT(do_io(o, HL_IO_WRITE, off, len, w) == -EIO);
	__atomic_store_n(&f->fail_writes, 0, __ATOMIC_RELAXED);
	free(w);
}

/*
 * The block was cached; the write fails; a read fills it from the origin
 * (the SAN has not run the write yet); then the SAN runs it. Every read
 * after that must return the new bytes, not the fill's.
 */
static void test_failed_write_lands_after_fill(void)
{
	struct hl_cache *c;
	struct fake f;
	struct hl_origin *o = fixture_up(&c, NULL, &f, 11, "fake:a");
	uint64_t off = 5 * BS;
	uint8_t *buf = malloc(BS), *old = malloc(BS), *neu = malloc(BS);

	memcpy(old, f.mem + off, BS);
	memset(neu, 0x5a, BS);
	src_of(c, o, off, buf);
	CU_ASSERT(src_of(c, o, off, buf) == HL_IO_SRC_HIT);

	failed_write(&f, o, off, BS, 0x5a);
	/* read back at once: the SAN still holds the write, the origin has the old bytes */
	src_of(c, o, off, buf);
	CU_ASSERT(memcmp(buf, old, BS) == 0);
	/* the SAN runs the write now */
	memcpy(f.mem + off, neu, BS);
	src_of(c, o, off, buf);
	CU_ASSERT(memcmp(buf, neu, BS) == 0);
	if (memcmp(buf, neu, BS))
		fprintf(stderr, "stale: the cache serves the bytes before the late write\n");
	fixture_down(c, o, &f);
	free(buf);
	free(old);
	free(neu);
}

/*
 * A later write of ours that succeeds settles the range: what it wrote is
 * the last completed write, and reads are served from the cache again.
 * A write covering only part of the range settles that part.
 */
static void test_successful_write_settles(void)
{
	struct hl_cache *c;
	struct fake f;
	struct hl_origin *o = fixture_up(&c, NULL, &f, 12, "fake:a");
	uint64_t off = 8 * BS;
	uint8_t *buf = malloc(2 * BS), *w = malloc(2 * BS);

	failed_write(&f, o, off, 2 * BS, 0x11);
	src_of(c, o, off, buf);
	CU_ASSERT(src_of(c, o, off, buf) != HL_IO_SRC_HIT);
	CU_ASSERT(src_of(c, o, off + BS, buf) != HL_IO_SRC_HIT);
	/* the first block written again, and it succeeds */
	memset(w, 0x22, BS);
	CU_ASSERT(do_io(o, HL_IO_WRITE, off, BS, w) == 0);
	CU_ASSERT(wait_inflight(c, 0));
	src_of(c, o, off, buf);
	CU_ASSERT(src_of(c, o, off, buf) == HL_IO_SRC_HIT);
	CU_ASSERT(memcmp(buf, w, BS) == 0);
	/* the second block is still unsettled */
	CU_ASSERT(src_of(c, o, off + BS, buf) != HL_IO_SRC_HIT);
	/* blocks outside the failed write were never affected */
	src_of(c, o, off + 4 * BS, buf);
	CU_ASSERT(src_of(c, o, off + 4 * BS, buf) == HL_IO_SRC_HIT);
	fixture_down(c, o, &f);
	free(buf);
	free(w);
}

/*
 * More failed writes than the disk keeps ranges for: none of their blocks
 * is cached again, whichever was failed first.
 */
static void test_many_failed_writes(void)
{
	struct hl_cache *c;
	struct fake f;
	struct hl_origin *o = fixture_up(&c, NULL, &f, 13, "fake:a");
	uint8_t *buf = malloc(BS);
	uint64_t nb = LUN_SIZE / BS;

	for (uint64_t b = 0; b < nb; b += 2)
		failed_write(&f, o, b * BS, 4096, (uint8_t)b);
	for (uint64_t b = 0; b < nb; b += 2) {
		src_of(c, o, b * BS, buf);
		CU_ASSERT(src_of(c, o, b * BS, buf) != HL_IO_SRC_HIT);
	}
	fixture_down(c, o, &f);
	free(buf);
}

/*
 * HL_ORIGIN_CHANGED (rbd: header changes it cannot explain, a shrink and a
 * grow back among them): the cache drops every block of the disk, the size
 * stays, and the blocks are cached again by the next reads.
 */
static void test_origin_changed_drops_all(void)
{
	struct hl_cache *c;
	struct fake f;
	struct hl_origin *o = fixture_up(&c, NULL, &f, 14, "fake:a");
	struct hl_origin *inner = co_of(o)->inner;
	uint8_t *buf = malloc(BS);

	for (uint64_t b = 0; b < 8; b++)
		src_of(c, o, b * BS, buf);
	CU_ASSERT_EQUAL(hl_cache_core_lun_blocks(c->core, c->ents[0]->id), 8);
	/* what the origin now holds there (zeroes after a shrink and a grow) */
	memset(f.mem + 6 * BS, 0, 2 * BS);
	hl_origin_notify(inner, HL_ORIGIN_CHANGED, inner->size);
	CU_ASSERT_EQUAL(hl_cache_core_lun_blocks(c->core, c->ents[0]->id), 0);
	CU_ASSERT_EQUAL(o->size, LUN_SIZE);
	CU_ASSERT(src_of(c, o, 7 * BS, buf) == HL_IO_SRC_MISS);
	CU_ASSERT(buf[0] == 0 && !memcmp(buf, buf + 1, BS - 1));
	CU_ASSERT(src_of(c, o, 7 * BS, buf) == HL_IO_SRC_HIT);
	fixture_down(c, o, &f);
	free(buf);
}

/*
 * A write the origin refused (an unsupported command, write protection: it
 * answered, nothing was written) leaves nothing unsettled: the range is
 * cached again by the next read.
 */
static void test_refused_write_settled(void)
{
	struct hl_cache *c;
	struct fake f;
	struct hl_origin *o = fixture_up(&c, NULL, &f, 15, "fake:a");
	uint8_t *buf = malloc(BS), *w = malloc(BS);

	memset(w, 0x33, BS);
	__atomic_store_n(&f.fail_writes, -EROFS, __ATOMIC_RELAXED);
	CU_ASSERT(do_io(o, HL_IO_WRITE, 2 * BS, BS, w) == -EROFS);
	__atomic_store_n(&f.fail_writes, 0, __ATOMIC_RELAXED);
	src_of(c, o, 2 * BS, buf);
	CU_ASSERT(src_of(c, o, 2 * BS, buf) == HL_IO_SRC_HIT);
	CU_ASSERT(memcmp(buf, f.mem + 2 * BS, BS) == 0);
	fixture_down(c, o, &f);
	free(buf);
	free(w);
}

int main(void)
{
	static const struct hl_test tests[] = {
	    {"late: a failed write that lands after a fill is not hidden by the cache",
	     test_failed_write_lands_after_fill},
	    {"late: a successful write settles what it covers", test_successful_write_settles},
	    {"late: more failed writes than ranges kept", test_many_failed_writes},
	    {"late: a write the origin refused leaves nothing unsettled", test_refused_write_settled},
	    {"late: an origin changed beyond what it can bound drops the disk",
	     test_origin_changed_drops_all},
	    {NULL, NULL},
	};
	hl_log_open(false, HL_LOG_WARN);
	return hl_test_run("cache_engine_late", tests);
}
