/*
 * capacity_ut.c - an origin that changes size under a running LU (origin.h
 * events, lu.c): READ CAPACITY and the LBA range checks follow the new size,
 * every I_T nexus gets CAPACITY DATA HAS CHANGED once, and the event reaches
 * the LU through a wrapper origin (throttle) that forwards it.
 */
#include "scsi_ut_util.h"

#define HALF (NBLOCKS / 2)

static void tur(struct tcmd *t, const struct hl_scsi_nexus *n)
{
	uint8_t cdb[6] = {0};

	run_full(t, n, 0, cdb, 6, NULL, 0, false);
}

/* READ CAPACITY(16): the number of blocks, or 0 when the command failed. */
static uint64_t rc16_blocks(void)
{
	struct tcmd t;
	uint8_t cdb[16] = {0x9e, 0x10};
	uint8_t buf[32];

	cdb[13] = sizeof(buf);
	run(&t, cdb, 16, buf, sizeof(buf), false);
	if (t.cmd.status != HL_SAM_GOOD)
		return 0;
	return hl_get_be64(buf) + 1;
}

static void read16(struct tcmd *t, uint64_t lba)
{
	uint8_t cdb[16];
	static uint8_t buf[BS];

	cdb_rw16(cdb, 0x88, lba, 1);
	run(t, cdb, 16, buf, BS, false);
}

static void test_shrink_and_grow(void)
{
	struct tcmd t;

	lu_setup();
	hl_origin_notify(origin, HL_ORIGIN_RESIZED, (uint64_t)HALF * BS);
	CU_ASSERT_EQUAL(hl_lu_num_blocks(lu), HALF);
	tur(&t, &nexus_a);
	ASSERT_SENSE(t, HL_SK_UNIT_ATTENTION, 0x2a, 0x09);
	tur(&t, &nexus_a);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(rc16_blocks(), HALF);
	read16(&t, HALF - 1);
	ASSERT_GOOD(t);
	read16(&t, HALF);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x21, 0x00);

	hl_origin_notify(origin, HL_ORIGIN_RESIZED, (uint64_t)NBLOCKS * BS);
	read16(&t, HALF); /* the unit attention comes first, the command does not run */
	ASSERT_SENSE(t, HL_SK_UNIT_ATTENTION, 0x2a, 0x09);
	CU_ASSERT_EQUAL(rc16_blocks(), NBLOCKS);
	read16(&t, NBLOCKS - 1);
	ASSERT_GOOD(t);
	lu_teardown();
}

static void test_every_nexus_told_once(void)
{
	struct tcmd t;

	lu_setup();
	tur(&t, &nexus_b); /* B's power-on attention */
	ASSERT_SENSE(t, HL_SK_UNIT_ATTENTION, 0x29, 0x00);
	hl_origin_notify(origin, HL_ORIGIN_RESIZED, (uint64_t)HALF * BS);
	hl_origin_notify(origin, HL_ORIGIN_RESIZED, (uint64_t)NBLOCKS * BS);
	tur(&t, &nexus_a);
	ASSERT_SENSE(t, HL_SK_UNIT_ATTENTION, 0x2a, 0x09);
	tur(&t, &nexus_a); /* two changes, one condition */
	ASSERT_GOOD(t);
	tur(&t, &nexus_b);
	ASSERT_SENSE(t, HL_SK_UNIT_ATTENTION, 0x2a, 0x09);
	tur(&t, &nexus_b);
	ASSERT_GOOD(t);
	lu_teardown();
}

static void test_same_size_or_fence_is_no_attention(void)
{
	struct tcmd t;

	lu_setup();
	hl_origin_notify(origin, HL_ORIGIN_RESIZED, (uint64_t)NBLOCKS * BS);
	hl_origin_notify(origin, HL_ORIGIN_FENCED, 0);
	tur(&t, &nexus_a);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(hl_lu_num_blocks(lu), NBLOCKS);
	CU_ASSERT_EQUAL(origin->size, (uint64_t)NBLOCKS * BS);
	lu_teardown();
}

static void test_partial_block_not_exported(void)
{
	lu_setup();
	hl_origin_notify(origin, HL_ORIGIN_RESIZED, (uint64_t)HALF * BS + 100);
	CU_ASSERT_EQUAL(hl_lu_num_blocks(lu), HALF);
	CU_ASSERT_EQUAL(rc16_blocks(), 0); /* the unit attention first */
	CU_ASSERT_EQUAL(rc16_blocks(), HALF);
	lu_teardown();
}

static int seen_ev, seen_calls;
static uint64_t seen_old;

static void listener(void *arg, struct hl_origin *o, enum hl_origin_event ev, uint64_t old_size)
{
	(void)arg;
	(void)o;
	seen_ev = ev;
	seen_old = old_size;
	seen_calls++;
}

static void test_forwarded_through_a_wrapper(void)
{
	struct hl_lu_config cfg = test_cfg();
	struct hl_origin *thr;
	struct tcmd t;

	memset(&map, 0, sizeof(map));
	origin = fake_origin_new((uint64_t)NBLOCKS * BS, true);
	CU_ASSERT_PTR_NOT_NULL_FATAL(origin);
	CU_ASSERT_EQUAL_FATAL(hl_origin_throttle_wrap(origin, 0, 0, 0, &thr), 0);
	CU_ASSERT_EQUAL_FATAL(hl_lu_create(&cfg, thr, &lu), 0);
	map.lu[0] = lu;
	tur(&t, &nexus_a); /* power on */
	hl_origin_notify(origin, HL_ORIGIN_RESIZED, (uint64_t)HALF * BS);
	CU_ASSERT_EQUAL(thr->size, (uint64_t)HALF * BS);
	CU_ASSERT_EQUAL(hl_lu_num_blocks(lu), HALF);
	tur(&t, &nexus_a);
	ASSERT_SENSE(t, HL_SK_UNIT_ATTENTION, 0x2a, 0x09);

	/* a listener of the wrapper sees the wrapper's old size, and a fence */
	seen_calls = 0;
	hl_origin_listen(thr, listener, NULL);
	hl_origin_notify(origin, HL_ORIGIN_RESIZED, (uint64_t)NBLOCKS * BS);
	CU_ASSERT_EQUAL(seen_calls, 1);
	CU_ASSERT_EQUAL(seen_ev, HL_ORIGIN_RESIZED);
	CU_ASSERT_EQUAL(seen_old, (uint64_t)HALF * BS);
	hl_origin_notify(origin, HL_ORIGIN_FENCED, 0);
	CU_ASSERT_EQUAL(seen_calls, 2);
	CU_ASSERT_EQUAL(seen_ev, HL_ORIGIN_FENCED);
	hl_origin_listen(thr, NULL, NULL);
	hl_origin_notify(origin, HL_ORIGIN_RESIZED, (uint64_t)HALF * BS);
	CU_ASSERT_EQUAL(seen_calls, 2);
	lu_teardown();
}

static const struct hl_test tests[] = {
    {"shrink and grow: READ CAPACITY, LBA OUT OF RANGE, unit attention", test_shrink_and_grow},
    {"every known nexus gets CAPACITY DATA HAS CHANGED once", test_every_nexus_told_once},
    {"same size or a fence: no unit attention", test_same_size_or_fence_is_no_attention},
    {"a partial last block is not exported", test_partial_block_not_exported},
    {"the event crosses a wrapper origin", test_forwarded_through_a_wrapper},
    {NULL, NULL},
};

int main(void)
{
	hl_log_level = HL_LOG_ERR - 1;
	return hl_test_run("capacity", tests);
}
