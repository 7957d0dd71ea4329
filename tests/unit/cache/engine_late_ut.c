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
 * The block at off reads as later (the bytes of a write that succeeded) and
 * is not cached; then the origin runs the failed write (earlier) after it:
 * every read must say earlier. what names the stale case for the log.
 */
static void late_write_lands(struct hl_cache *c, struct fake *f, struct hl_origin *o, uint64_t off,
                             const uint8_t *later, const uint8_t *earlier, const char *what)
{
	uint8_t buf[BS];

	src_of(c, o, off, buf);
	CU_ASSERT(memcmp(buf, later, BS) == 0);
	CU_ASSERT(src_of(c, o, off, buf) != HL_IO_SRC_HIT);
	memcpy(f->mem + off, earlier, BS);
	src_of(c, o, off, buf);
	CU_ASSERT(memcmp(buf, earlier, BS) == 0);
	if (memcmp(buf, earlier, BS))
		fprintf(stderr, "stale: %s\n", what);
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
 * A failed write whose copy may still be out (may_land: an iscsi:// WRITE
 * on a lost session, failed after the timeout, not fenced yet) is settled
 * by no later write: W2 succeeds, then the SAN runs W1's copy. The cache
 * must not hold W2 (by the write's update or by a fill) over W1's bytes;
 * once the origin says nothing is unfenced, the range is cached again.
 */
static void test_may_land_outlives_later_write(void)
{
	struct hl_cache *c;
	struct fake f;
	struct hl_origin *o = fixture_up(&c, NULL, &f, 18, "fake:a");
	uint64_t off = 6 * BS;
	uint8_t *buf = malloc(BS), *w1 = malloc(BS), *w2 = malloc(BS);

	memset(w1, 0x71, BS);
	memset(w2, 0x72, BS);
	src_of(c, o, off, buf);
	CU_ASSERT(src_of(c, o, off, buf) == HL_IO_SRC_HIT);
	__atomic_store_n(&f.may_land, 1, __ATOMIC_SEQ_CST);
	__atomic_store_n(&f.unfenced, 1, __ATOMIC_SEQ_CST); /* the origin counts it first */
	failed_write(&f, o, off, BS, 0x71);
	__atomic_store_n(&f.may_land, 0, __ATOMIC_SEQ_CST);
	/* W2, begun after W1 failed, succeeds: it does not settle W1's range */
	CU_ASSERT(do_io(o, HL_IO_WRITE, off, BS, w2) == 0);
	CU_ASSERT(wait_inflight(c, 0));
	/* ... and when the SAN runs W1's copy now, every read says W1 */
	late_write_lands(c, &f, o, off, w2, w1, "the cache serves W2 over the late W1");
	/* the session was reinstated: no copy can land, the range is cached again */
	__atomic_store_n(&f.unfenced, 0, __ATOMIC_SEQ_CST);
	src_of(c, o, off, buf);
	CU_ASSERT(src_of(c, o, off, buf) == HL_IO_SRC_HIT);
	CU_ASSERT(memcmp(buf, w1, BS) == 0);
	fixture_down(c, o, &f);
	free(buf);
	free(w1);
	free(w2);
}

/* Wait until the fake holds n writes (hold_writes). */
static void wait_held(struct fake *f, int n)
{
	for (int i = 0; i < 3000 && __atomic_load_n(&f->nheld, __ATOMIC_ACQUIRE) < n; i++)
		usleep(1000);
	CU_ASSERT_FATAL(__atomic_load_n(&f->nheld, __ATOMIC_ACQUIRE) == n);
}

/*
 * Two writes in flight together (another session's beside ours): the one
 * of [off1, +len1) the origin fails with -EIO and may still run later, the
 * one of [off2, +len2) succeeds. fail_begins: which began first. The
 * failure is answered first, the success after it.
 */
static void race_failed_and_ok(struct hl_cache *c, struct fake *f, struct hl_origin *o,
                               bool fail_begins, uint64_t off1, uint64_t len1, uint8_t *w1,
                               uint64_t off2, uint64_t len2, uint8_t *w2)
{
	struct hl_origin_io *h1, *h2;
	struct step a, b;

	__atomic_store_n(&f->hold_writes, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < 2; i++) {
		bool fail = (i == 0) == fail_begins;

		__atomic_store_n(&f->fail_writes, fail, __ATOMIC_RELAXED);
		if (fail)
			io_start(&a, o, HL_IO_WRITE, off1, len1, w1);
		else
			io_start(&b, o, HL_IO_WRITE, off2, len2, w2);
		wait_held(f, i + 1);
	}
	__atomic_store_n(&f->fail_writes, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&f->hold_writes, 0, __ATOMIC_RELAXED);
	h1 = f->held[fail_begins ? 0 : 1];
	h2 = f->held[fail_begins ? 1 : 0];
	f->nheld = 0;
	finish_held(h1); /* the origin may still hold it */
	CU_ASSERT_EQUAL(io_wait(&a), -EIO);
	finish_held(h2);
	CU_ASSERT_EQUAL(io_wait(&b), 0);
	CU_ASSERT(wait_inflight(c, 0));
}

/*
 * A write that fails (W1, outcome unknown) and a write of the same block
 * that succeeds (W2, another session's) in flight together: W2 is answered
 * after W1 failed, but the origin may still run W1 after W2, so W2 settles
 * nothing. A read fills the block with W2's bytes, then W1 lands: every
 * read after that must return W1's bytes. Both orders of beginning. A
 * write that begins after W1 failed still settles the range. (Seen failing
 * before the fix: W2 cleared the range, the read after W1 landed was a hit
 * with W2's bytes.)
 */
static void test_concurrent_write_settles_nothing(void)
{
	struct hl_cache *c;
	struct fake f;
	struct hl_origin *o = fixture_up(&c, NULL, &f, 16, "fake:a");
	uint8_t *buf = malloc(BS), *w1 = malloc(BS), *w2 = malloc(BS), *w3 = malloc(BS);

	for (int w1_first = 1; w1_first >= 0; w1_first--) {
		uint64_t off = (uint64_t)(6 + 2 * w1_first) * BS;

		memset(w1, 0x5a + w1_first, BS);
		memset(w2, 0x6b + w1_first, BS);
		memset(w3, 0x7c + w1_first, BS);
		src_of(c, o, off, buf);
		CU_ASSERT(src_of(c, o, off, buf) == HL_IO_SRC_HIT);
		race_failed_and_ok(c, &f, o, w1_first, off, BS, w1, off, BS, w2);

		/* a read now returns W2's bytes without caching them; then the origin runs W1 */
		late_write_lands(c, &f, o, off, w2, w1,
		                 "the cache serves W2's bytes after W1 landed");

		/* a write begun after W1 failed settles the block */
		CU_ASSERT(do_io(o, HL_IO_WRITE, off, BS, w3) == 0);
		CU_ASSERT(wait_inflight(c, 0));
		src_of(c, o, off, buf);
		CU_ASSERT(src_of(c, o, off, buf) == HL_IO_SRC_HIT);
		CU_ASSERT(memcmp(buf, w3, BS) == 0);
	}
	fixture_down(c, o, &f);
	free(buf);
	free(w1);
	free(w2);
	free(w3);
}

/*
 * A range already unsettled (F1, two blocks) and a second failure inside
 * it (F2, the first block) while a write W covering both was in flight: W
 * began after F1 failed, not after F2, so it settles the second block
 * only. The first stays uncached, and F2 landing late is seen.
 */
static void test_failure_inside_unsettled_range(void)
{
	struct hl_cache *c;
	struct fake f;
	struct hl_origin *o = fixture_up(&c, NULL, &f, 17, "fake:a");
	uint64_t off = 12 * BS;
	uint8_t *buf = malloc(BS), *w1 = malloc(BS), *w2 = malloc(2 * BS);

	memset(w1, 0x44, BS);
	memset(w2, 0x55, 2 * BS);
	failed_write(&f, o, off, 2 * BS, 0x33);
	race_failed_and_ok(c, &f, o, false, off, BS, w1, off, 2 * BS, w2);
	src_of(c, o, off, buf);
	CU_ASSERT(memcmp(buf, w2, BS) == 0);
	CU_ASSERT(src_of(c, o, off, buf) != HL_IO_SRC_HIT);
	memcpy(f.mem + off, w1, BS); /* F2 lands */
	src_of(c, o, off, buf);
	CU_ASSERT(memcmp(buf, w1, BS) == 0);
	/* the second block: settled by W */
	src_of(c, o, off + BS, buf);
	CU_ASSERT(src_of(c, o, off + BS, buf) == HL_IO_SRC_HIT);
	CU_ASSERT(memcmp(buf, w2, BS) == 0);
	fixture_down(c, o, &f);
	free(buf);
	free(w1);
	free(w2);
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
	    {"late: a failed write that may still land outlives a later write",
	     test_may_land_outlives_later_write},
	    {"late: a write in flight beside a failed one settles nothing",
	     test_concurrent_write_settles_nothing},
	    {"late: a failure inside an unsettled range keeps it from older writes",
	     test_failure_inside_unsettled_range},
	    {"late: more failed writes than ranges kept", test_many_failed_writes},
	    {"late: a write the origin refused leaves nothing unsettled", test_refused_write_settled},
	    {"late: an origin changed beyond what it can bound drops the disk",
	     test_origin_changed_drops_all},
	    {NULL, NULL},
	};
	hl_log_open(false, HL_LOG_WARN);
	return hl_test_run("cache_engine_late", tests);
}
