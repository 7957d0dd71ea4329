/*
 * verify_pattern_ut.c - VERIFY with BYTCHK=3 (src/scsi/sbc.c): one block
 * of data-out compared against every block of the range. It read the
 * whole range into one buffer, so a command that brought 512 bytes made
 * hotlund hold up to HL_SCSI_MAX_XFER (16 MiB) for it while it ran, 128
 * such commands a session (the CmdSN window): memory no READ of the
 * connection could take (ISCSI_TX_HIGH bounds those). Now the range is
 * read in VERIFY_CHUNK pieces, like BYTCHK=0.
 */
#include "scsi_ut_util.h"

#define CHUNK (1u << 20) /* VERIFY_CHUNK in sbc.c */

static void verify16_bytchk3(uint8_t *cdb, uint64_t lba, uint32_t n)
{
	cdb_rw16(cdb, 0x8f, lba, n);
	cdb[1] = 0x06; /* BYTCHK 11b */
}

/* The whole 4 MiB LU against one block: read in 1 MiB pieces, never all at once. */
static void test_read_in_pieces(void)
{
	struct tcmd t;
	uint8_t cdb[16];
	uint8_t blk[BS];

	lu_setup();
	memset(blk, 0x5a, sizeof(blk));
	memset(medium(), 0x5a, (size_t)NBLOCKS * BS);
	unsigned reads = fake_of(origin)->n_read;
	verify16_bytchk3(cdb, 0, NBLOCKS);
	start(&t, cdb, 16, blk, BS, true);
	/* one read in flight at a time, none larger than a piece */
	unsigned pieces = 0;
	while (fake_of(origin)->n_queued) {
		struct hl_origin_io *io = fake_of(origin)->queue[0];
		CU_ASSERT_TRUE(io->length <= CHUNK);
		CU_ASSERT_EQUAL(fake_of(origin)->n_queued, 1);
		fake_step(origin);
		pieces++;
	}
	CU_ASSERT_EQUAL(t.done, 1);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(t.cmd.xfer_len, BS);
	CU_ASSERT_EQUAL(pieces, (NBLOCKS * BS) / CHUNK);
	CU_ASSERT_EQUAL(fake_of(origin)->n_read - reads, (NBLOCKS * BS) / CHUNK);
	lu_teardown();
}

/* A difference in a later piece: MISCOMPARE, INFORMATION its offset in the range. */
static void test_miscompare_in_a_later_piece(void)
{
	struct tcmd t;
	uint8_t cdb[16];
	uint8_t blk[BS];
	uint32_t at = 3 * CHUNK + 5 * BS + 7;

	lu_setup();
	for (uint32_t i = 0; i < BS; i++)
		blk[i] = (uint8_t)(i * 3 + 1);
	for (uint32_t b = 0; b < NBLOCKS; b++)
		memcpy(medium() + (size_t)b * BS, blk, BS);
	verify16_bytchk3(cdb, 0, NBLOCKS);
	run(&t, cdb, 16, blk, BS, true);
	ASSERT_GOOD(t);
	medium()[at] ^= 0xff;
	run(&t, cdb, 16, blk, BS, true);
	ASSERT_SENSE(t, HL_SK_MISCOMPARE, 0x1d, 0x00);
	CU_ASSERT_EQUAL(hl_get_be32(t.cmd.sense + 3), at);
	/* a range that starts past the difference compares equal */
	verify16_bytchk3(cdb, at / BS + 1, 16);
	run(&t, cdb, 16, blk, BS, true);
	ASSERT_GOOD(t);
	/* a short range, one piece smaller than a chunk, with the difference in it */
	verify16_bytchk3(cdb, at / BS - 1, 3);
	run(&t, cdb, 16, blk, BS, true);
	ASSERT_SENSE(t, HL_SK_MISCOMPARE, 0x1d, 0x00);
	CU_ASSERT_EQUAL(hl_get_be32(t.cmd.sense + 3), BS + at % BS);
	lu_teardown();
}

/* A read error in a later piece ends the command with its sense, nothing left queued. */
static void test_read_error_midway(void)
{
	struct tcmd t;
	uint8_t cdb[16];
	uint8_t blk[BS];

	lu_setup();
	memset(blk, 0, sizeof(blk));
	verify16_bytchk3(cdb, 0, NBLOCKS);
	start(&t, cdb, 16, blk, BS, true);
	fake_step(origin);
	CU_ASSERT_EQUAL(t.done, 0);
	fake_of(origin)->fail_result = -EIO;
	fake_drain(origin);
	fake_of(origin)->fail_result = 0;
	CU_ASSERT_EQUAL(t.done, 1);
	CU_ASSERT_EQUAL(t.cmd.status, HL_SAM_CHECK_CONDITION);
	CU_ASSERT_EQUAL(fake_of(origin)->n_queued, 0);
	lu_teardown();
}

static const struct hl_test tests[] = {
    {"VERIFY BYTCHK 3 reads its range in pieces", test_read_in_pieces},
    {"VERIFY BYTCHK 3 miscompare in a later piece", test_miscompare_in_a_later_piece},
    {"VERIFY BYTCHK 3 read error midway", test_read_error_midway},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("scsi_verify_pattern", tests);
}
