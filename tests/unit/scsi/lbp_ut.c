/*
 * lbp_ut.c - logical block provisioning (src/scsi/lbp.c): WRITE SAME,
 * UNMAP, GET LBA STATUS, and what VPD B0/B2 and READ CAPACITY(16) say
 * about them, on thin and fully provisioned LUs.
 */
#include "scsi_ut_util.h"

/* A fresh LU whose origin can deallocate (thin) or not, power-on UA consumed. */
static void setup(bool thin)
{
	struct tcmd t;
	uint8_t tur[6] = {0};
	struct hl_lu_config cfg = test_cfg();

	memset(&map, 0, sizeof(map));
	origin = fake_origin_new((uint64_t)NBLOCKS * BS, true);
	CU_ASSERT_PTR_NOT_NULL_FATAL(origin);
	origin->can_discard = thin;
	origin->zeroes_after_discard = thin;
	CU_ASSERT_EQUAL_FATAL(hl_lu_create(&cfg, origin, &lu), 0);
	map.lu[0] = lu;
	run(&t, tur, 6, NULL, 0, false);
}

static void inquiry_vpd(struct tcmd *t, uint8_t page, uint8_t *buf)
{
	uint8_t cdb[6] = {0x12, 1, page, 0, 255, 0};

	memset(buf, 0, 255);
	run(t, cdb, 6, buf, 255, false);
}

static void cdb_ws(uint8_t *cdb, bool sixteen, uint64_t lba, uint32_t n, bool unmap)
{
	if (sixteen) {
		cdb_rw16(cdb, 0x93, lba, n);
	} else {
		cdb_rw10(cdb, 0x41, (uint32_t)lba, (uint16_t)n);
	}
	if (unmap)
		cdb[1] |= 0x08;
}

/* UNMAP with n descriptors (lba[i], count[i]). */
static void do_unmap(struct tcmd *t, unsigned n, const uint64_t *lba, const uint32_t *count)
{
	static uint8_t param[8 + 16 * 300];
	uint8_t cdb[10] = {0x42};
	uint32_t len = 8 + 16 * n;

	memset(param, 0, sizeof(param));
	hl_put_be16(param, (uint16_t)(len - 2));
	hl_put_be16(param + 2, (uint16_t)(16 * n));
	for (unsigned i = 0; i < n; i++) {
		hl_put_be64(param + 8 + 16 * i, lba[i]);
		hl_put_be32(param + 16 + 16 * i, count[i]);
	}
	hl_put_be16(cdb + 7, (uint16_t)len);
	run(t, cdb, 10, param, len, true);
}

static void test_fully_provisioned_lu_offers_no_unmap(void)
{
	struct tcmd t;
	uint8_t buf[255], cdb[16];
	uint64_t lba = 0;
	uint32_t n = 1;

	setup(false);
	inquiry_vpd(&t, 0x00, buf);
	CU_ASSERT_PTR_NULL(memchr(buf + 4, 0xb2, hl_get_be16(buf + 2)));
	inquiry_vpd(&t, 0xb2, buf);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	inquiry_vpd(&t, 0xb0, buf);
	CU_ASSERT_EQUAL(hl_get_be32(buf + 20), 0); /* maximum unmap LBA count */
	CU_ASSERT_EQUAL(hl_get_be32(buf + 24), 0);
	CU_ASSERT_EQUAL(buf[4] & 1, 1); /* WSNZ */
	uint8_t rc[16] = {0x9e, 0x10};
	hl_put_be32(rc + 10, 32);
	run(&t, rc, 16, buf, 32, false);
	CU_ASSERT_EQUAL(buf[14] & 0xc0, 0);
	do_unmap(&t, 1, &lba, &n);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x20, 0x00);
	memset(cdb, 0, sizeof(cdb));
	cdb[0] = 0x9e;
	cdb[1] = 0x12; /* GET LBA STATUS */
	hl_put_be32(cdb + 10, 24);
	run(&t, cdb, 16, buf, 24, false);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	uint8_t zero[BS] = {0};
	cdb_ws(cdb, false, 0, 1, true); /* WRITE SAME with UNMAP */
	run(&t, cdb, 10, zero, BS, true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	/* RSOC leaves UNMAP out */
	uint8_t rs[12] = {0xa3, 0x0c, 0x01, 0x42};
	hl_put_be32(rs + 6, 255);
	run(&t, rs, 12, buf, 255, false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(buf[1] & 7, 1);
	lu_teardown();
}

static void test_thin_lu_reports_provisioning(void)
{
	struct tcmd t;
	uint8_t buf[255];

	setup(true);
	inquiry_vpd(&t, 0x00, buf);
	CU_ASSERT_PTR_NOT_NULL(memchr(buf + 4, 0xb2, hl_get_be16(buf + 2)));
	inquiry_vpd(&t, 0xb2, buf);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(t.cmd.data_in_len, 8);
	CU_ASSERT_EQUAL(buf[5] & 0xe4, 0xe4); /* LBPU LBPWS LBPWS10 LBPRZ */
	CU_ASSERT_EQUAL(buf[6] & 7, 2);
	inquiry_vpd(&t, 0xb0, buf);
	CU_ASSERT_EQUAL(hl_get_be32(buf + 20), SCSI_UNMAP_MAX_BLOCKS);
	CU_ASSERT_EQUAL(hl_get_be32(buf + 24), SCSI_UNMAP_MAX_DESC);
	CU_ASSERT_EQUAL(hl_get_be64(buf + 36), SCSI_WS_MAX_BLOCKS(lu));
	uint8_t rc[16] = {0x9e, 0x10};
	hl_put_be32(rc + 10, 32);
	run(&t, rc, 16, buf, 32, false);
	CU_ASSERT_EQUAL(buf[14] & 0xc0, 0xc0); /* LBPME, LBPRZ */
	lu_teardown();
}

static void test_write_same_pattern_in_chunks(void)
{
	struct tcmd t;
	uint8_t cdb[16], blk[BS];
	const uint32_t n = 5000; /* about 2.4 MiB: three chunks */

	setup(false);
	for (unsigned i = 0; i < BS; i++)
		blk[i] = (uint8_t)(i + 1);
	cdb_ws(cdb, true, 100, n, false);
	run(&t, cdb, 16, blk, BS, true);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(t.cmd.xfer_len, BS);
	CU_ASSERT_EQUAL(fake_of(origin)->n_write, 3);
	bool same = true;
	for (uint32_t b = 0; b < n; b++)
		same = same && memcmp(medium() + (size_t)(100 + b) * BS, blk, BS) == 0;
	CU_ASSERT_TRUE(same);
	CU_ASSERT_EQUAL(medium()[(size_t)(100 + n) * BS], 0);
	CU_ASSERT_EQUAL(medium()[100 * BS - 1], 0);
	lu_teardown();
}

static void test_write_same_zeroes_and_unmap(void)
{
	struct tcmd t;
	uint8_t cdb[16], zero[BS] = {0};

	setup(true);
	memset(medium(), 0xff, 64 * BS);
	cdb_ws(cdb, false, 0, 16, false);
	run(&t, cdb, 10, zero, BS, true);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(fake_of(origin)->n_zeroes, 1);
	CU_ASSERT_EQUAL(fake_of(origin)->last_length, 16 * BS);
	CU_ASSERT_EQUAL(medium()[16 * BS - 1], 0);
	CU_ASSERT_EQUAL(medium()[16 * BS], 0xff);
	cdb_ws(cdb, true, 16, 16, true);
	run(&t, cdb, 16, zero, BS, true);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(fake_of(origin)->n_discard, 1);
	CU_ASSERT_EQUAL(medium()[32 * BS - 1], 0);
	CU_ASSERT_EQUAL(medium()[32 * BS], 0xff);
	/* NDOB: no data-out, zeroes */
	memset(medium() + 50 * BS, 0xff, 2 * BS);
	cdb_ws(cdb, true, 50, 2, true);
	cdb[1] |= 0x01;
	run(&t, cdb, 16, NULL, 0, true);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(t.cmd.xfer_len, 0);
	CU_ASSERT_EQUAL(fake_of(origin)->n_discard, 2);
	CU_ASSERT_EQUAL(medium()[51 * BS], 0);
	run(&t, cdb, 16, zero, BS, true); /* NDOB with data */
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	/* UNMAP with a non-zero block: written, not deallocated */
	uint8_t ones[BS];
	memset(ones, 1, BS);
	cdb_ws(cdb, true, 40, 2, true);
	run(&t, cdb, 16, ones, BS, true);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(fake_of(origin)->n_discard, 2);
	CU_ASSERT_EQUAL(medium()[41 * BS], 1);
	lu_teardown();
}

static void test_write_same_checks(void)
{
	struct tcmd t;
	uint8_t cdb[16], blk[2 * BS] = {0};

	setup(true);
	cdb_ws(cdb, false, 0, 0, false); /* WSNZ */
	run(&t, cdb, 10, blk, BS, true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	cdb_ws(cdb, false, 0, 1, false);
	run(&t, cdb, 10, blk, 2 * BS, true); /* two blocks of data-out */
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	run(&t, cdb, 10, blk, BS / 2, true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	cdb[1] = 0x10; /* ANCHOR */
	run(&t, cdb, 10, blk, BS, true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	cdb[1] = 0x20; /* WRPROTECT */
	run(&t, cdb, 10, blk, BS, true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	cdb_ws(cdb, true, NBLOCKS - 1, 2, false);
	run(&t, cdb, 16, blk, BS, true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x21, 0x00);
	cdb_ws(cdb, true, 0, SCSI_WS_MAX_BLOCKS(lu) + 1, false);
	run(&t, cdb, 16, blk, BS, true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	CU_ASSERT_EQUAL(fake_of(origin)->n_write + fake_of(origin)->n_zeroes, 0);
	lu_teardown();
}

static void test_unmap(void)
{
	struct tcmd t;
	uint64_t lba[3] = {10, 200, 50};
	uint32_t cnt[3] = {5, 7, 0};

	setup(true);
	memset(medium(), 0xee, 300 * BS);
	do_unmap(&t, 3, lba, cnt);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(fake_of(origin)->n_discard, 2); /* the empty descriptor is skipped */
	CU_ASSERT_EQUAL(medium()[10 * BS], 0);
	CU_ASSERT_EQUAL(medium()[15 * BS - 1], 0);
	CU_ASSERT_EQUAL(medium()[15 * BS], 0xee);
	CU_ASSERT_EQUAL(medium()[206 * BS], 0);
	CU_ASSERT_EQUAL(medium()[207 * BS], 0xee);
	/* one bad descriptor: nothing at all is unmapped */
	memset(medium(), 0xee, 300 * BS);
	lba[1] = NBLOCKS - 3;
	do_unmap(&t, 2, lba, cnt);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x21, 0x00);
	CU_ASSERT_EQUAL(medium()[10 * BS], 0xee);
	/* parameter list shorter than its header */
	uint8_t cdb[10] = {0x42}, p[8] = {0};
	hl_put_be16(cdb + 7, 4);
	run(&t, cdb, 10, p, 4, true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x1a, 0x00);
	hl_put_be16(cdb + 7, 0);
	run(&t, cdb, 10, NULL, 0, true);
	ASSERT_GOOD(t);
	/* too many descriptors */
	static uint64_t many_lba[SCSI_UNMAP_MAX_DESC + 1];
	static uint32_t many_cnt[SCSI_UNMAP_MAX_DESC + 1];
	do_unmap(&t, SCSI_UNMAP_MAX_DESC + 1, many_lba, many_cnt);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x26, 0x00);
	lu_teardown();
}

static void test_get_lba_status(void)
{
	struct tcmd t;
	uint8_t cdb[16] = {0x9e, 0x12}, buf[64];

	setup(true);
	hl_put_be64(cdb + 2, 100);
	hl_put_be32(cdb + 10, 64);
	run(&t, cdb, 16, buf, 64, false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(t.cmd.data_in_len, 24);
	CU_ASSERT_EQUAL(hl_get_be32(buf), 20);
	CU_ASSERT_EQUAL(hl_get_be64(buf + 8), 100);
	CU_ASSERT_EQUAL(hl_get_be32(buf + 16), NBLOCKS - 100);
	CU_ASSERT_EQUAL(buf[20] & 0x0f, 0);
	hl_put_be64(cdb + 2, NBLOCKS);
	run(&t, cdb, 16, buf, 64, false);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x21, 0x00);
	lu_teardown();
}

static void test_write_same_waits_for_compare_and_write(void)
{
	struct tcmd caw, ws;
	uint8_t ccaw[16] = {0x89}, cws[16];
	uint8_t cbuf[2 * BS] = {0}, blk[BS];

	setup(true);
	memset(cbuf + BS, 'C', BS);
	memset(blk, 'W', BS);
	hl_put_be64(ccaw + 2, 7);
	ccaw[13] = 1;
	start(&caw, ccaw, 16, cbuf, sizeof(cbuf), true);
	CU_ASSERT_EQUAL(fake_of(origin)->n_queued, 1); /* the CAW's read */
	cdb_ws(cws, true, 0, 16, false);
	start(&ws, cws, 16, blk, BS, true);
	CU_ASSERT_EQUAL(fake_of(origin)->n_queued, 1); /* held back */
	fake_drain(origin);
	CU_ASSERT_EQUAL(caw.done + ws.done, 2);
	CU_ASSERT_EQUAL(caw.cmd.status, HL_SAM_GOOD);
	CU_ASSERT_EQUAL(medium()[7 * BS], 'W'); /* WRITE SAME came after */
	lu_teardown();
}

static const struct hl_test tests[] = {
    {"fully provisioned LU offers no UNMAP", test_fully_provisioned_lu_offers_no_unmap},
    {"thin LU reports provisioning", test_thin_lu_reports_provisioning},
    {"WRITE SAME writes a pattern in chunks", test_write_same_pattern_in_chunks},
    {"WRITE SAME of zeroes, with and without UNMAP", test_write_same_zeroes_and_unmap},
    {"WRITE SAME field checks", test_write_same_checks},
    {"UNMAP", test_unmap},
    {"GET LBA STATUS", test_get_lba_status},
    {"WRITE SAME waits for COMPARE AND WRITE", test_write_same_waits_for_compare_and_write},
    {NULL, NULL},
};

int main(void)
{
	hl_log_level = HL_LOG_ERR - 1;
	return hl_test_run("scsi-lbp", tests);
}
