/*
 * pattern_ut.c - unit tests of the --verify data pattern: a good block
 * passes, and zeroes, garbage, misdirected, stale and damaged blocks are each
 * told apart and located.
 */
#include "bench/bench_internal.h"
#include "hl_test.h"

#include <string.h>

static uint8_t buf[8192];

static void test_roundtrip(void)
{
	struct bench_pattern_result res;

	bench_pattern_fill(buf, sizeof(buf), 4096 * 10, 0x1234500000007ULL);
	CU_ASSERT_EQUAL(
	    bench_pattern_check(buf, sizeof(buf), 4096 * 10, 0x1234500000007ULL, false, &res),
	    BENCH_PAT_OK);
	CU_ASSERT_EQUAL(bench_pattern_check(buf, sizeof(buf), 4096 * 10, 0, false, &res),
	                BENCH_PAT_OK);
	/* a sub-range read of a bigger write checks too */
	CU_ASSERT_EQUAL(bench_pattern_check(buf + 1024, 2048, 4096 * 10 + 1024, 0, false, &res),
	                BENCH_PAT_OK);
}

static void test_zero(void)
{
	struct bench_pattern_result res;

	memset(buf, 0, sizeof(buf));
	CU_ASSERT_EQUAL(bench_pattern_check(buf, sizeof(buf), 0, 0, false, &res), BENCH_PAT_ZERO);
	CU_ASSERT_EQUAL(res.sector, 0);
	CU_ASSERT_EQUAL(bench_pattern_check(buf, sizeof(buf), 0, 0, true, &res), BENCH_PAT_OK);
}

static void test_foreign_data_allowed_only_when_asked(void)
{
	struct bench_pattern_result res;

	memset(buf, 0xa5, sizeof(buf));
	CU_ASSERT_EQUAL(bench_pattern_check(buf, sizeof(buf), 0, 0, false, &res),
	                BENCH_PAT_GARBAGE);
	CU_ASSERT_EQUAL(bench_pattern_check(buf, sizeof(buf), 0, 0, true, &res), BENCH_PAT_OK);
	/* but a sector that claims to be ours is checked even then */
	bench_pattern_fill(buf + 512, 512, 512, 9);
	buf[512 + 100] ^= 1;
	CU_ASSERT_EQUAL(bench_pattern_check(buf, sizeof(buf), 0, 0, true, &res), BENCH_PAT_CORRUPT);
	CU_ASSERT_EQUAL(res.sector, 1);
}

static void test_garbage(void)
{
	struct bench_pattern_result res;
	struct bench_rng r;

	bench_pattern_fill(buf, sizeof(buf), 0, 5);
	bench_rng_seed(&r, 9);
	for (size_t i = 512 * 5; i < 512 * 6; i += 8) {
		uint64_t x = bench_rng_next(&r);
		memcpy(buf + i, &x, 8);
	}
	CU_ASSERT_EQUAL(bench_pattern_check(buf, sizeof(buf), 0, 5, false, &res),
	                BENCH_PAT_GARBAGE);
	CU_ASSERT_EQUAL(res.sector, 5);
}

static void test_misdirected(void)
{
	struct bench_pattern_result res;

	/* the data written for byte offset 1 MiB, read back at 2 MiB */
	bench_pattern_fill(buf, sizeof(buf), 1 << 20, 77);
	CU_ASSERT_EQUAL(bench_pattern_check(buf, sizeof(buf), 2 << 20, 0, true, &res),
	                BENCH_PAT_WRONG_LBA);
	CU_ASSERT_EQUAL(res.sector, (2 << 20) / 512);
	CU_ASSERT_EQUAL(res.found_sector, (1 << 20) / 512);
}

static void test_stale(void)
{
	struct bench_pattern_result res;

	bench_pattern_fill(buf, sizeof(buf), 0, 41);
	CU_ASSERT_EQUAL(bench_pattern_check(buf, sizeof(buf), 0, 42, false, &res), BENCH_PAT_STALE);
	CU_ASSERT_EQUAL(res.found_gen, 41);
	CU_ASSERT_EQUAL(bench_pattern_check(buf, sizeof(buf), 0, 0, false, &res), BENCH_PAT_OK);
}

static void test_one_flipped_bit(void)
{
	struct bench_pattern_result res;

	bench_pattern_fill(buf, sizeof(buf), 8192, 3);
	buf[512 * 3 + 200] ^= 0x10;
	CU_ASSERT_EQUAL(bench_pattern_check(buf, sizeof(buf), 8192, 3, false, &res),
	                BENCH_PAT_CORRUPT);
	CU_ASSERT_EQUAL(res.sector, 8192 / 512 + 3);
	CU_ASSERT_EQUAL(res.bad_word, 200 / 8);
}

static void test_forged_header_is_caught(void)
{
	struct bench_pattern_result res;

	/* right header, payload of another generation: still damaged */
	bench_pattern_fill(buf, 512, 0, 10);
	uint64_t gen = 11;
	memcpy(buf + 16, &gen, 8);
	CU_ASSERT_EQUAL(bench_pattern_check(buf, 512, 0, 0, false, &res), BENCH_PAT_CORRUPT);
}

static void test_generations_differ(void)
{
	static uint8_t a[512], b[512];

	bench_pattern_fill(a, 512, 0, 1);
	bench_pattern_fill(b, 512, 0, 2);
	CU_ASSERT(memcmp(a + 24, b + 24, 512 - 24) != 0);
	CU_ASSERT_STRING_EQUAL(bench_pattern_status_str(BENCH_PAT_WRONG_LBA),
	                       "data of another LBA (misdirected)");
}

/* Writes of a lost path: each unit's record is found once, only for its generation. */
static void test_lost_writes(void)
{
	static struct bench_lost_set ls;

	memset(&ls, 0, sizeof(ls));
	bench_lost_add(&ls, 10, 3, 7);
	bench_lost_add(&ls, 40, 1, 0); /* no generation: nothing to find */
	CU_ASSERT_EQUAL(ls.used, 3);
	CU_ASSERT_FALSE(bench_lost_take(&ls, 11, 8)); /* another write */
	CU_ASSERT_FALSE(bench_lost_take(&ls, 13, 7)); /* past its blocks */
	CU_ASSERT_FALSE(bench_lost_take(&ls, 40, 0));
	CU_ASSERT_TRUE(bench_lost_take(&ls, 11, 7));
	CU_ASSERT_FALSE(bench_lost_take(&ls, 11, 7)); /* a write lands once */
	CU_ASSERT_TRUE(bench_lost_take(&ls, 10, 7));
	CU_ASSERT_TRUE(bench_lost_take(&ls, 12, 7));
	CU_ASSERT_EQUAL(ls.used, 0);

	/* full: the oldest records go first, the newest stay */
	for (uint64_t u = 0; u < BENCH_LOST_MAX + 5; u++)
		bench_lost_add(&ls, u, 1, (uint32_t)(u + 100));
	CU_ASSERT_EQUAL(ls.used, BENCH_LOST_MAX);
	for (uint64_t u = 0; u < 5; u++)
		CU_ASSERT_FALSE(bench_lost_take(&ls, u, (uint32_t)(u + 100)));
	CU_ASSERT_TRUE(bench_lost_take(&ls, 5, 105));
	CU_ASSERT_TRUE(bench_lost_take(&ls, BENCH_LOST_MAX + 4, BENCH_LOST_MAX + 104));
	/* a freed record is used again */
	bench_lost_add(&ls, 99999, 1, 3);
	CU_ASSERT_EQUAL(ls.used, BENCH_LOST_MAX - 1);
	CU_ASSERT_TRUE(bench_lost_take(&ls, 99999, 3));
}
static const struct hl_test tests[] = {
    {"a written block verifies", test_roundtrip},
    {"zeroes are 'never written' unless allowed", test_zero},
    {"garbage is found and located", test_garbage},
    {"foreign data passes only where allowed", test_foreign_data_allowed_only_when_asked},
    {"a block of another LBA is misdirected", test_misdirected},
    {"an older generation is stale", test_stale},
    {"one flipped bit is found with its word", test_one_flipped_bit},
    {"a forged generation does not pass", test_forged_header_is_caught},
    {"two generations differ in payload", test_generations_differ},
    {"a lost path's writes are found once each", test_lost_writes},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("bench_pattern", tests);
}
