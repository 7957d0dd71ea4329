/*
 * scsi_ut.c - the SCSI layer through its public entry point
 * (hl_scsi_cmd_exec) against an in-memory origin whose completions the
 * test drains: one test per behaviour of each command, the sense data,
 * residual fields, unit attentions, and RSOC against the command table.
 */
#include "scsi_ut_util.h"

/* ---- dispatch, sense ---- */

static void test_unknown_opcode(void)
{
	struct tcmd t;
	uint8_t cdb[16] = {0xc7};

	lu_setup();
	run(&t, cdb, 16, NULL, 0, false);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x20, 0x00);
	CU_ASSERT_EQUAL(t.cmd.sense[0], 0x70);
	CU_ASSERT_EQUAL(t.cmd.sense_len, 18);
	lu_teardown();
}

static void test_reserved_bit_rejected_with_field_pointer(void)
{
	struct tcmd t;
	uint8_t cdb[10];
	uint8_t buf[BS];

	lu_setup();
	cdb_rw10(cdb, 0x28, 0, 1);
	cdb[1] = 0x01; /* reserved bit 0 of byte 1 */
	run(&t, cdb, 10, buf, BS, false);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	CU_ASSERT_EQUAL(t.cmd.sense[15], 0x80 | 0x40 | 0x08 | 0); /* SKSV, C/D, BPV, bit 0 */
	CU_ASSERT_EQUAL(hl_get_be16(t.cmd.sense + 16), 1);
	lu_teardown();
}

static void test_no_lu_commands(void)
{
	struct tcmd t;
	uint8_t inq[6] = {0x12, 0, 0, 0, 96, 0};
	uint8_t tur[6] = {0};
	uint8_t rs[6] = {0x03, 0, 0, 0, 18, 0};
	uint8_t rl[12] = {0xa0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0};
	uint8_t buf[256];

	lu_setup();
	run_full(&t, &nexus_a, 5, inq, 6, buf, 96, false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(buf[0], 0x7f);
	run_full(&t, &nexus_a, 5, tur, 6, NULL, 0, false);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x25, 0x00);
	run_full(&t, &nexus_a, 5, rs, 6, buf, 18, false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(t.cmd.data_in_len, 18);
	CU_ASSERT_EQUAL(buf[2] & 0x0f, HL_SK_ILLEGAL_REQUEST);
	CU_ASSERT_EQUAL(buf[12], 0x25);
	run_full(&t, &nexus_a, 5, rl, 12, buf, 256, false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(hl_get_be32(buf), 8);
	lu_teardown();
}

/* ---- INQUIRY ---- */

static void test_inquiry_standard(void)
{
	struct tcmd t;
	uint8_t cdb[6] = {0x12, 0, 0, 0, 255, 0};
	uint8_t buf[255];

	lu_setup();
	memset(buf, 0xee, sizeof(buf));
	run(&t, cdb, 6, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(t.cmd.data_in_len, 96);
	CU_ASSERT_EQUAL(t.cmd.xfer_len, 96);
	CU_ASSERT_EQUAL(buf[0], 0x00);
	CU_ASSERT_EQUAL(buf[2], 0x06);
	CU_ASSERT_EQUAL(buf[3], 0x12);
	CU_ASSERT_EQUAL(buf[4], 91);
	CU_ASSERT_EQUAL(buf[5] & 0x30, 0x10); /* TPGS: implicit ALUA */
	CU_ASSERT_EQUAL(buf[7] & 0x02, 0x02);
	CU_ASSERT_EQUAL(memcmp(buf + 8, "HOTLUN  hotlun disk     ", 24), 0);
	CU_ASSERT_EQUAL(hl_get_be16(buf + 60), 0x0460);
	CU_ASSERT_EQUAL(hl_get_be16(buf + 62), 0x04c0);
	lu_teardown();
}

static void test_inquiry_alloc_length(void)
{
	struct tcmd t;
	uint8_t cdb[6] = {0x12, 0, 0, 0, 5, 0};
	uint8_t buf[255];

	lu_setup();
	run(&t, cdb, 6, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(t.cmd.data_in_len, 5);
	CU_ASSERT_EQUAL(t.cmd.xfer_len, 5);
	CU_ASSERT_EQUAL(buf[4], 91); /* cut, not changed */
	/* transport buffer smaller than the allocation length */
	cdb[4] = 200;
	run(&t, cdb, 6, buf, 40, false);
	CU_ASSERT_EQUAL(t.cmd.data_in_len, 40);
	CU_ASSERT_EQUAL(t.cmd.xfer_len, 96);
	lu_teardown();
}

static void test_inquiry_bad_fields(void)
{
	struct tcmd t;
	uint8_t cdb[6] = {0x12, 0, 0x80, 0, 255, 0};
	uint8_t buf[255];

	lu_setup();
	run(&t, cdb, 6, buf, sizeof(buf), false); /* page code without EVPD */
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	CU_ASSERT_EQUAL(hl_get_be16(t.cmd.sense + 16), 2);
	cdb[1] = 0x02; /* CMDDT */
	cdb[2] = 0;
	run(&t, cdb, 6, buf, sizeof(buf), false);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	cdb[1] = 0x01;
	cdb[2] = 0xb2; /* not implemented: not listed, refused */
	run(&t, cdb, 6, buf, sizeof(buf), false);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	lu_teardown();
}

static void test_vpd_supported_pages_all_answer(void)
{
	struct tcmd t;
	uint8_t cdb[6] = {0x12, 1, 0x00, 0, 255, 0};
	uint8_t list[255], buf[255];

	lu_setup();
	run(&t, cdb, 6, list, sizeof(list), false);
	ASSERT_GOOD(t);
	unsigned n = hl_get_be16(list + 2);
	CU_ASSERT_TRUE(n >= 4);
	CU_ASSERT_EQUAL(t.cmd.data_in_len, 4 + n);
	for (unsigned i = 0; i < n; i++) {
		if (i)
			CU_ASSERT_TRUE(list[4 + i] > list[3 + i]);
		cdb[2] = list[4 + i];
		run(&t, cdb, 6, buf, sizeof(buf), false);
		ASSERT_GOOD(t);
		CU_ASSERT_EQUAL(buf[1], list[4 + i]);
		CU_ASSERT_EQUAL(t.cmd.data_in_len, 4u + hl_get_be16(buf + 2));
	}
	lu_teardown();
}

static void test_vpd_serial(void)
{
	struct tcmd t;
	uint8_t cdb[6] = {0x12, 1, 0x80, 0, 255, 0};
	uint8_t buf[255];

	lu_setup();
	run(&t, cdb, 6, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(hl_get_be16(buf + 2), 12);
	CU_ASSERT_EQUAL(memcmp(buf + 4, "HL0123456789", 12), 0);
	lu_teardown();
}

static void test_vpd83_layout(void)
{
	struct tcmd t;
	uint8_t cdb[6] = {0x12, 1, 0x83, 0, 255, 0};
	uint8_t buf[255];

	lu_setup();
	run(&t, cdb, 6, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(buf[1], 0x83);
	unsigned len = hl_get_be16(buf + 2);
	CU_ASSERT_EQUAL(t.cmd.data_in_len, 4 + len);
	/* NAA: binary, LU association, type 3, 16 bytes */
	const uint8_t *d = buf + 4;
	CU_ASSERT_EQUAL(d[0] & 0x0f, 1);
	CU_ASSERT_EQUAL(d[1], 0x03);
	CU_ASSERT_EQUAL(d[3], 16);
	CU_ASSERT_EQUAL(d[4], 0x60);
	CU_ASSERT_EQUAL(d[4] >> 4, 6);
	d += 4 + d[3];
	/* relative target port */
	CU_ASSERT_EQUAL(d[1], 0x14);
	CU_ASSERT_EQUAL(d[3], 4);
	CU_ASSERT_EQUAL(hl_get_be16(d + 6), 1);
	d += 4 + d[3];
	/* target port group */
	CU_ASSERT_EQUAL(d[1], 0x15);
	CU_ASSERT_EQUAL(hl_get_be16(d + 6), 1);
	d += 4 + d[3];
	/* SCSI name string: UTF-8, target port association, NUL-terminated, multiple of 4 */
	CU_ASSERT_EQUAL(d[0] & 0x0f, 3);
	CU_ASSERT_EQUAL(d[1], 0x18);
	CU_ASSERT_EQUAL(d[3] % 4, 0);
	CU_ASSERT_TRUE(d[3] > strlen(port.name));
	CU_ASSERT_EQUAL(memcmp(d + 4, port.name, strlen(port.name)), 0);
	CU_ASSERT_EQUAL(d[4 + strlen(port.name)], 0);
	d += 4 + d[3];
	CU_ASSERT_EQUAL((unsigned)(d - buf), 4 + len);
	lu_teardown();
}

static void test_vpd_block_limits(void)
{
	struct tcmd t;
	uint8_t cdb[6] = {0x12, 1, 0xb0, 0, 255, 0};
	uint8_t buf[255];

	lu_setup();
	run(&t, cdb, 6, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(hl_get_be16(buf + 2), 0x3c);
	CU_ASSERT_EQUAL(t.cmd.data_in_len, 64);
	CU_ASSERT_EQUAL(hl_get_be32(buf + 8), HL_SCSI_MAX_XFER / BS);
	CU_ASSERT_EQUAL(hl_get_be32(buf + 20), 0); /* no UNMAP yet */
	lu_teardown();
}

/* ---- REPORT LUNS ---- */

static void test_report_luns(void)
{
	struct tcmd t;
	uint8_t cdb[12] = {0xa0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0};
	uint8_t buf[256];

	lu_setup();
	map.lu[7] = lu; /* a second LUN mapping */
	run(&t, cdb, 12, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(hl_get_be32(buf), 16);
	CU_ASSERT_EQUAL(t.cmd.data_in_len, 24);
	CU_ASSERT_EQUAL(buf[9], 0);
	CU_ASSERT_EQUAL(buf[17], 7);
	cdb[2] = 1; /* well known LUs only */
	run(&t, cdb, 12, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(hl_get_be32(buf), 0);
	cdb[2] = 3;
	run(&t, cdb, 12, buf, sizeof(buf), false);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	cdb[2] = 0;
	hl_put_be32(cdb + 6, 15);
	run(&t, cdb, 12, buf, sizeof(buf), false);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	map.lu[7] = NULL;
	lu_teardown();
}

/* ---- READ CAPACITY ---- */

static void test_read_capacity10(void)
{
	struct tcmd t;
	uint8_t cdb[10] = {0x25};
	uint8_t buf[8];

	lu_setup();
	run(&t, cdb, 10, buf, 8, false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(hl_get_be32(buf), NBLOCKS - 1);
	CU_ASSERT_EQUAL(hl_get_be32(buf + 4), BS);
	cdb[5] = 1; /* LBA without PMI */
	run(&t, cdb, 10, buf, 8, false);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	lu_teardown();
}

static void test_read_capacity10_too_big(void)
{
	struct tcmd t;
	uint8_t cdb[10] = {0x25};
	uint8_t buf[8];
	struct hl_lu_config cfg = test_cfg();

	memset(&map, 0, sizeof(map));
	origin = fake_origin_new(4ull << 40, false); /* 4 TiB, no backing store */
	CU_ASSERT_EQUAL_FATAL(hl_lu_create(&cfg, origin, &lu), 0);
	map.lu[0] = lu;
	run(&t, cdb, 10, buf, 8, false); /* POWER ON */
	run(&t, cdb, 10, buf, 8, false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(hl_get_be32(buf), 0xffffffffu);
	lu_teardown();
}

static void test_read_capacity16(void)
{
	struct tcmd t;
	uint8_t cdb[16] = {0x9e, 0x10};
	uint8_t buf[32];
	struct tcmd tur;
	uint8_t turcdb[6] = {0};

	lu_setup_cfg(test_cfg(), (uint64_t)NBLOCKS * BS, 4096);
	run(&tur, turcdb, 6, NULL, 0, false);
	hl_put_be32(cdb + 10, 32);
	memset(buf, 0xee, sizeof(buf));
	run(&t, cdb, 16, buf, 32, false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(hl_get_be64(buf), NBLOCKS - 1);
	CU_ASSERT_EQUAL(hl_get_be32(buf + 8), BS);
	CU_ASSERT_EQUAL(buf[12], 0);
	CU_ASSERT_EQUAL(buf[13], 3); /* 8 logical blocks per physical block */
	CU_ASSERT_EQUAL(buf[14], 0); /* LBPME 0 */
	/* allocation length 0 transfers nothing and is not an error */
	hl_put_be32(cdb + 10, 0);
	run(&t, cdb, 16, buf, 32, false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(t.cmd.data_in_len, 0);
	/* unknown service action of SERVICE ACTION IN(16) */
	cdb[1] = 0x11;
	run(&t, cdb, 16, buf, 32, false);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	lu_teardown();
}

/* ---- READ / WRITE ---- */

static void test_write_read_roundtrip_all_sizes(void)
{
	static const struct {
		uint8_t wr, rd, len;
	} ops[] = {{0x0a, 0x08, 6}, {0x2a, 0x28, 10}, {0xaa, 0xa8, 12}, {0x8a, 0x88, 16}};
	uint8_t out[4 * BS], in[4 * BS];
	struct tcmd t;

	lu_setup();
	for (unsigned k = 0; k < HL_ARRAY_SIZE(ops); k++) {
		uint8_t cdb[16] = {0};
		uint32_t lba = 100 + 10 * k;
		memset(out, 'a' + k, sizeof(out));
		cdb[0] = ops[k].wr;
		switch (ops[k].len) {
		case 6:
			hl_put_be24(cdb + 1, lba);
			cdb[4] = 4;
			break;
		case 10:
			hl_put_be32(cdb + 2, lba);
			hl_put_be16(cdb + 7, 4);
			break;
		case 12:
			hl_put_be32(cdb + 2, lba);
			hl_put_be32(cdb + 6, 4);
			break;
		case 16:
			hl_put_be64(cdb + 2, lba);
			hl_put_be32(cdb + 10, 4);
			break;
		}
		run(&t, cdb, ops[k].len, out, sizeof(out), true);
		ASSERT_GOOD(t);
		CU_ASSERT_EQUAL(t.cmd.xfer_len, 4 * BS);
		CU_ASSERT_EQUAL(memcmp(medium() + (size_t)lba * BS, out, sizeof(out)), 0);
		cdb[0] = ops[k].rd;
		memset(in, 0, sizeof(in));
		run(&t, cdb, ops[k].len, in, sizeof(in), false);
		ASSERT_GOOD(t);
		CU_ASSERT_EQUAL(t.cmd.data_in_len, 4 * BS);
		CU_ASSERT_EQUAL(memcmp(in, out, sizeof(out)), 0);
	}
	lu_teardown();
}

static void test_read6_zero_means_256(void)
{
	struct tcmd t;
	uint8_t cdb[6] = {0x08, 0, 0, 0, 0, 0};
	static uint8_t buf[256 * BS];

	lu_setup();
	run(&t, cdb, 6, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(t.cmd.xfer_len, 256 * BS);
	CU_ASSERT_EQUAL(t.cmd.data_in_len, 256 * BS);
	lu_teardown();
}

static void test_write_fua_reaches_origin(void)
{
	struct tcmd t;
	uint8_t cdb[10];
	uint8_t buf[BS] = {1};

	lu_setup();
	cdb_rw10(cdb, 0x2a, 0, 1);
	run(&t, cdb, 10, buf, BS, true);
	CU_ASSERT_EQUAL(fake_of(origin)->n_fua, 0);
	cdb[1] = 0x18; /* DPO + FUA */
	run(&t, cdb, 10, buf, BS, true);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(fake_of(origin)->n_fua, 1);
	lu_teardown();
}

static void test_protect_field_rejected(void)
{
	struct tcmd t;
	uint8_t cdb[16];
	uint8_t buf[BS];

	lu_setup();
	for (uint8_t p = 1; p < 8; p++) {
		cdb_rw16(cdb, 0x88, 0, 1);
		cdb[1] = (uint8_t)(p << 5);
		run(&t, cdb, 16, buf, BS, false);
		ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
		cdb[0] = 0x8a;
		run(&t, cdb, 16, buf, BS, true);
		ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	}
	CU_ASSERT_EQUAL(fake_of(origin)->n_write, 0);
	lu_teardown();
}

static void test_lba_out_of_range(void)
{
	struct tcmd t;
	uint8_t cdb[16];
	uint8_t buf[2 * BS];

	lu_setup();
	cdb_rw10(cdb, 0x28, NBLOCKS - 1, 2);
	run(&t, cdb, 10, buf, sizeof(buf), false);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x21, 0x00);
	cdb_rw16(cdb, 0x88, UINT64_MAX, 1); /* lba + count wraps */
	run(&t, cdb, 16, buf, sizeof(buf), false);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x21, 0x00);
	cdb_rw10(cdb, 0x28, NBLOCKS + 1, 0); /* zero blocks beyond the end */
	run(&t, cdb, 10, buf, sizeof(buf), false);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x21, 0x00);
	cdb_rw10(cdb, 0x2a, NBLOCKS, 1);
	run(&t, cdb, 10, buf, BS, true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x21, 0x00);
	CU_ASSERT_EQUAL(fake_of(origin)->n_write + fake_of(origin)->n_read, 0);
	lu_teardown();
}

static void test_zero_blocks_no_io(void)
{
	struct tcmd t;
	uint8_t cdb[10];

	lu_setup();
	cdb_rw10(cdb, 0x28, NBLOCKS, 0);
	run(&t, cdb, 10, NULL, 0, false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(t.cmd.xfer_len, 0);
	cdb_rw10(cdb, 0x2a, 5, 0);
	run(&t, cdb, 10, NULL, 0, true);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(fake_of(origin)->n_write + fake_of(origin)->n_read, 0);
	lu_teardown();
}

static void test_max_transfer_length(void)
{
	struct tcmd t;
	uint8_t cdb[16];

	lu_setup_cfg(test_cfg(), 64ull << 20, 0); /* 64 MiB, room for a too-long transfer */
	run(&t, (uint8_t[6]){0}, 6, NULL, 0, false);
	cdb_rw16(cdb, 0x88, 0, HL_SCSI_MAX_XFER / BS + 1);
	run(&t, cdb, 16, NULL, 0, false);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	CU_ASSERT_EQUAL(hl_get_be16(t.cmd.sense + 16), 10);
	lu_teardown();
}

static void test_read_residuals(void)
{
	struct tcmd t;
	uint8_t cdb[10];
	uint8_t buf[10000];

	lu_setup();
	for (unsigned i = 0; i < 2 * BS; i++)
		medium()[i] = (uint8_t)(i * 7);
	/* EDTL 0: nothing moves, the CDB still calls for one block */
	cdb_rw10(cdb, 0x28, 0, 1);
	run(&t, cdb, 10, NULL, 0, false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(t.cmd.data_in_len, 0);
	CU_ASSERT_EQUAL(t.cmd.xfer_len, BS);
	/* EDTL 200: a partial block through the bounce buffer */
	memset(buf, 0, sizeof(buf));
	run(&t, cdb, 10, buf, 200, false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(t.cmd.data_in_len, 200);
	CU_ASSERT_EQUAL(memcmp(buf, medium(), 200), 0);
	CU_ASSERT_EQUAL(buf[200], 0);
	/* EDTL 10000 > one block */
	run(&t, cdb, 10, buf, 10000, false);
	CU_ASSERT_EQUAL(t.cmd.data_in_len, BS);
	CU_ASSERT_EQUAL(t.cmd.xfer_len, BS);
	/* two blocks asked, room for one and a half */
	cdb_rw10(cdb, 0x28, 0, 2);
	memset(buf, 0, sizeof(buf));
	run(&t, cdb, 10, buf, BS + BS / 2, false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(t.cmd.data_in_len, BS + BS / 2);
	CU_ASSERT_EQUAL(t.cmd.xfer_len, 2 * BS);
	CU_ASSERT_EQUAL(memcmp(buf, medium(), BS + BS / 2), 0);
	lu_teardown();
}

static void test_write_residuals(void)
{
	struct tcmd t;
	uint8_t cdb[10];
	uint8_t buf[10000];

	lu_setup();
	memset(medium(), 'a', 4 * BS);
	memset(buf, 'b', sizeof(buf));
	/* EDTL larger than the CDB: only the CDB's block is written */
	cdb_rw10(cdb, 0x2a, 0, 1);
	run(&t, cdb, 10, buf, 10000, true);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(t.cmd.xfer_len, BS);
	CU_ASSERT_EQUAL(medium()[BS - 1], 'b');
	CU_ASSERT_EQUAL(medium()[BS], 'a');
	/* EDTL one block, CDB two: the block received is written, no more */
	memset(medium(), 'a', 4 * BS);
	cdb_rw10(cdb, 0x2a, 0, 2);
	run(&t, cdb, 10, buf, BS, true);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(t.cmd.xfer_len, 2 * BS);
	CU_ASSERT_EQUAL(medium()[BS - 1], 'b');
	CU_ASSERT_EQUAL(medium()[BS], 'a');
	/* EDTL 200: a partial block is refused and nothing is written */
	memset(medium(), 'a', 4 * BS);
	cdb_rw10(cdb, 0x2a, 0, 1);
	run(&t, cdb, 10, buf, 200, true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x0e, 0x03);
	CU_ASSERT_EQUAL(medium()[0], 'a');
	/* EDTL 0 */
	run(&t, cdb, 10, NULL, 0, true);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(medium()[0], 'a');
	lu_teardown();
}

static void test_read_only_lu(void)
{
	struct tcmd t;
	uint8_t cdb[10];
	uint8_t buf[BS];
	struct hl_lu_config cfg = test_cfg();
	uint8_t ms[6] = {0x1a, 0, 0x3f, 0, 255, 0};
	uint8_t msbuf[255];

	cfg.read_only = true;
	lu_setup_cfg(cfg, (uint64_t)NBLOCKS * BS, 0);
	run(&t, (uint8_t[6]){0}, 6, NULL, 0, false);
	cdb_rw10(cdb, 0x2a, 0, 1);
	run(&t, cdb, 10, buf, BS, true);
	ASSERT_SENSE(t, HL_SK_DATA_PROTECT, 0x27, 0x00);
	cdb_rw10(cdb, 0x2e, 0, 1);
	run(&t, cdb, 10, buf, BS, true);
	ASSERT_SENSE(t, HL_SK_DATA_PROTECT, 0x27, 0x00);
	cdb_rw10(cdb, 0x28, 0, 1);
	run(&t, cdb, 10, buf, BS, false);
	ASSERT_GOOD(t);
	run(&t, ms, 6, msbuf, sizeof(msbuf), false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(msbuf[2] & 0x80, 0x80);
	/* CDB errors come before the medium's write protection */
	cdb_rw10(cdb, 0x2a, NBLOCKS, 1);
	run(&t, cdb, 10, buf, BS, true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x21, 0x00);
	cdb_rw10(cdb, 0x2a, 0, 1);
	cdb[1] = 0x20;
	run(&t, cdb, 10, buf, BS, true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	/* every command the table marks as writing is refused (one block at LBA 0) */
	for (unsigned o = 0; o < 256; o++) {
		const struct scsi_cmd_desc *d = scsi_disk_ops[o].cmd;
		if (!d || !(d->flags & SCSI_F_WRITE) || !scsi_cmd_avail(d, lu))
			continue;
		uint8_t c[16] = {(uint8_t)o};
		if (o == 0x89)
			c[13] = 1; /* COMPARE AND WRITE: NUMBER OF LOGICAL BLOCKS */
		else if (o == 0x42)
			c[8] = 24; /* UNMAP: PARAMETER LIST LENGTH */
		else if (d->cdb_len == 6)
			c[4] = 1;
		else if (d->cdb_len == 10)
			c[8] = 1;
		else if (d->cdb_len == 12)
			c[9] = 1;
		else
			c[13] = 1;
		run(&t, c, d->cdb_len, buf, BS, true);
		ASSERT_SENSE(t, HL_SK_DATA_PROTECT, 0x27, 0x00);
	}
	uint8_t ws[16] = {0x93, 0x08}; /* WRITE SAME(16) with UNMAP: protected beats unsupported */
	ws[13] = 1;
	run(&t, ws, 16, buf, BS, true);
	ASSERT_SENSE(t, HL_SK_DATA_PROTECT, 0x27, 0x00);
	CU_ASSERT_EQUAL(fake_of(origin)->n_write, 0);
	lu_teardown();
}

static void test_origin_errors_map_to_medium_error(void)
{
	struct tcmd t;
	uint8_t cdb[10];
	uint8_t buf[BS];

	lu_setup();
	fake_of(origin)->fail_result = -EIO;
	cdb_rw10(cdb, 0x28, 0, 1);
	run(&t, cdb, 10, buf, BS, false);
	ASSERT_SENSE(t, HL_SK_MEDIUM_ERROR, 0x11, 0x00);
	CU_ASSERT_EQUAL(t.cmd.data_in_len, 0);
	cdb_rw10(cdb, 0x2a, 0, 1);
	run(&t, cdb, 10, buf, BS, true);
	ASSERT_SENSE(t, HL_SK_MEDIUM_ERROR, 0x0c, 0x00);
	lu_teardown();
}

static void test_submit_enomem_is_busy(void)
{
	struct tcmd t;
	uint8_t cdb[10];
	uint8_t buf[BS];

	lu_setup();
	fake_of(origin)->submit_rc = -ENOMEM;
	cdb_rw10(cdb, 0x28, 0, 1);
	run(&t, cdb, 10, buf, BS, false);
	CU_ASSERT_EQUAL(t.cmd.status, HL_SAM_BUSY);
	fake_of(origin)->submit_rc = -EAGAIN;
	cdb_rw10(cdb, 0x2a, 0, 1);
	run(&t, cdb, 10, buf, BS, true);
	CU_ASSERT_EQUAL(t.cmd.status, HL_SAM_BUSY);
	lu_teardown();
}

/* ---- VERIFY / WRITE AND VERIFY / SYNCHRONIZE CACHE ---- */

static void test_verify_bytchk0_reads_whole_range(void)
{
	struct tcmd t;
	uint8_t cdb[16];

	lu_setup();
	cdb_rw16(cdb, 0x8f, 0, NBLOCKS); /* 4 MiB: several chunks */
	run(&t, cdb, 16, NULL, 0, false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(fake_of(origin)->n_read, (NBLOCKS * BS) >> 20);
	CU_ASSERT_EQUAL(t.cmd.xfer_len, 0);
	fake_of(origin)->fail_result = -EIO;
	cdb_rw16(cdb, 0x8f, 0, 1);
	run(&t, cdb, 16, NULL, 0, false);
	ASSERT_SENSE(t, HL_SK_MEDIUM_ERROR, 0x11, 0x00);
	lu_teardown();
}

static void test_verify_bytchk1_compares(void)
{
	struct tcmd t;
	uint8_t cdb[10];
	uint8_t buf[2 * BS];

	lu_setup();
	for (unsigned i = 0; i < 2 * BS; i++)
		medium()[10 * BS + i] = (uint8_t)i;
	memcpy(buf, medium() + 10 * BS, sizeof(buf));
	cdb_rw10(cdb, 0x2f, 10, 2);
	cdb[1] = 0x02; /* BYTCHK 01b */
	run(&t, cdb, 10, buf, sizeof(buf), true);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(t.cmd.xfer_len, 2 * BS);
	buf[700] ^= 0x55;
	run(&t, cdb, 10, buf, sizeof(buf), true);
	ASSERT_SENSE(t, HL_SK_MISCOMPARE, 0x1d, 0x00);
	CU_ASSERT_EQUAL(t.cmd.sense[0], 0xf0); /* VALID */
	CU_ASSERT_EQUAL(hl_get_be32(t.cmd.sense + 3), 700);
	cdb[1] = 0x04; /* BYTCHK 10b reserved */
	run(&t, cdb, 10, buf, sizeof(buf), true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	lu_teardown();
}

static void test_verify_bytchk3_one_block_pattern(void)
{
	struct tcmd t;
	uint8_t cdb[16];
	uint8_t buf[BS];

	lu_setup();
	memset(buf, 0x5a, sizeof(buf));
	memset(medium() + 20 * BS, 0x5a, 3 * BS);
	cdb_rw16(cdb, 0x8f, 20, 3);
	cdb[1] = 0x06;
	run(&t, cdb, 16, buf, BS, true);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(t.cmd.xfer_len, BS);
	medium()[22 * BS + 3] = 0;
	run(&t, cdb, 16, buf, BS, true);
	ASSERT_SENSE(t, HL_SK_MISCOMPARE, 0x1d, 0x00);
	lu_teardown();
}

static void test_write_and_verify(void)
{
	struct tcmd t;
	uint8_t cdb[16];
	uint8_t buf[3 * BS];

	lu_setup();
	memset(buf, 0x77, sizeof(buf));
	cdb_rw16(cdb, 0x8e, 30, 3);
	cdb[1] = 0x02;
	run(&t, cdb, 16, buf, sizeof(buf), true);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(memcmp(medium() + 30 * BS, buf, sizeof(buf)), 0);
	CU_ASSERT_EQUAL(fake_of(origin)->n_write, 1);
	CU_ASSERT_EQUAL(fake_of(origin)->n_read, 1);
	lu_teardown();
}

static void test_sync_cache(void)
{
	struct tcmd t;
	uint8_t cdb[16];

	lu_setup();
	cdb_rw10(cdb, 0x35, 0, 0);
	run(&t, cdb, 10, NULL, 0, false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(fake_of(origin)->n_flush, 1);
	cdb_rw16(cdb, 0x91, NBLOCKS - 1, 2);
	run(&t, cdb, 16, NULL, 0, false);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x21, 0x00);
	CU_ASSERT_EQUAL(fake_of(origin)->n_flush, 1);
	fake_of(origin)->fail_result = -EIO;
	cdb_rw16(cdb, 0x91, 0, 1);
	run(&t, cdb, 16, NULL, 0, false);
	ASSERT_SENSE(t, HL_SK_MEDIUM_ERROR, 0x0c, 0x00);
	lu_teardown();
}

static void test_prefetch(void)
{
	struct tcmd t;
	uint8_t cdb[16];

	lu_setup();
	cdb_rw10(cdb, 0x34, 100, 8); /* no cache below: GOOD, nothing happens */
	run(&t, cdb, 10, NULL, 0, false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(fake_of(origin)->n_prefetch, 0);
	fake_of(origin)->prefetch_ok = true;
	run(&t, cdb, 10, NULL, 0, false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(fake_of(origin)->n_prefetch, 1);
	CU_ASSERT_EQUAL(fake_of(origin)->last_offset, 100 * BS);
	CU_ASSERT_EQUAL(fake_of(origin)->last_length, 8 * BS);
	cdb_rw16(cdb, 0x90, 10, 0); /* length 0: to the end of the medium */
	cdb[1] = 0x02;              /* IMMED */
	run(&t, cdb, 16, NULL, 0, false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(fake_of(origin)->last_length, (uint64_t)(NBLOCKS - 10) * BS);
	cdb_rw16(cdb, 0x90, NBLOCKS - 1, 2);
	run(&t, cdb, 16, NULL, 0, false);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x21, 0x00);
	fake_of(origin)->fail_result = -EIO;
	cdb_rw16(cdb, 0x90, 0, 1);
	run(&t, cdb, 16, NULL, 0, false);
	ASSERT_SENSE(t, HL_SK_MEDIUM_ERROR, 0x11, 0x00);
	lu_teardown();
}

static void test_start_stop_unit(void)
{
	struct tcmd t;
	uint8_t cdb[6] = {0x1b, 0, 0, 0, 0x01, 0};

	lu_setup();
	run(&t, cdb, 6, NULL, 0, false);
	ASSERT_GOOD(t);
	cdb[4] = 0x02; /* LOEJ, stop */
	run(&t, cdb, 6, NULL, 0, false);
	ASSERT_GOOD(t);
	lu_teardown();
}

/* ---- MODE SENSE ---- */

static void test_mode_sense6_all_pages(void)
{
	struct tcmd t;
	uint8_t cdb[6] = {0x1a, 0, 0x3f, 0, 255, 0};
	uint8_t buf[255];

	lu_setup();
	run(&t, cdb, 6, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	unsigned total = buf[0] + 1u;
	CU_ASSERT_EQUAL(t.cmd.data_in_len, total);
	CU_ASSERT_EQUAL(buf[3], 8);
	CU_ASSERT_EQUAL(hl_get_be32(buf + 4), NBLOCKS);
	CU_ASSERT_EQUAL(hl_get_be24(buf + 9), BS);
	CU_ASSERT_EQUAL(buf[2] & 0x10, 0x10); /* DPOFUA */
	/* walk the pages: each length is coherent and they fill the data exactly */
	unsigned off = 4 + 8, n = 0;
	bool caching = false, control = false;
	while (off < total) {
		CU_ASSERT_TRUE(off + 2 <= total);
		if (buf[off] == 0x08) {
			caching = true;
			CU_ASSERT_EQUAL(buf[off + 1], 0x12);
			CU_ASSERT_EQUAL(buf[off + 2] & 0x04, 0x04); /* WCE from cfg */
		}
		if (buf[off] == 0x0a) {
			control = true;
			CU_ASSERT_EQUAL(buf[off + 1], 0x0a);
		}
		off += 2u + buf[off + 1];
		n++;
	}
	CU_ASSERT_EQUAL(off, total);
	CU_ASSERT_TRUE(caching && control);
	CU_ASSERT_EQUAL(n, 3);
	lu_teardown();
}

static void test_mode_sense6_dbd_and_single_page(void)
{
	struct tcmd t;
	uint8_t cdb[6] = {0x1a, 0x08, 0x08, 0, 255, 0};
	uint8_t buf[255];

	lu_setup();
	run(&t, cdb, 6, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(buf[3], 0);
	CU_ASSERT_EQUAL(buf[0], 3 + 20);
	CU_ASSERT_EQUAL(buf[4], 0x08);
	/* allocation length 4: header only, cut */
	cdb[2] = 0x3f;
	cdb[4] = 4;
	run(&t, cdb, 6, buf, 4, false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(t.cmd.data_in_len, 4);
	CU_ASSERT_EQUAL(t.cmd.xfer_len, 4);
	lu_teardown();
}

static void test_mode_sense_page_control(void)
{
	struct tcmd t;
	uint8_t cdb[6] = {0x1a, 0x08, 0x48, 0, 255, 0}; /* changeable caching page */
	uint8_t buf[255];

	lu_setup();
	run(&t, cdb, 6, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(buf[4], 0x08);
	CU_ASSERT_EQUAL(buf[6], 0); /* nothing changeable */
	cdb[2] = 0x88;              /* default */
	run(&t, cdb, 6, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(buf[6] & 0x04, 0x04);
	cdb[2] = 0xc8; /* saved */
	run(&t, cdb, 6, buf, sizeof(buf), false);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x39, 0x00);
	cdb[2] = 0x05; /* unknown page */
	run(&t, cdb, 6, buf, sizeof(buf), false);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	cdb[2] = 0x0a;
	cdb[3] = 0x01; /* unknown subpage */
	run(&t, cdb, 6, buf, sizeof(buf), false);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	cdb[3] = 0xff; /* page and all its subpages */
	run(&t, cdb, 6, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(buf[4], 0x0a);
	lu_teardown();
}

static void test_mode_sense10_long_lba(void)
{
	struct tcmd t;
	uint8_t cdb[10] = {0x5a, 0x10, 0x0a, 0, 0, 0, 0, 0, 255, 0};
	uint8_t buf[255];

	lu_setup();
	run(&t, cdb, 10, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(hl_get_be16(buf) + 2u, t.cmd.data_in_len);
	CU_ASSERT_EQUAL(buf[4] & 1, 1);
	CU_ASSERT_EQUAL(hl_get_be16(buf + 6), 16);
	CU_ASSERT_EQUAL(hl_get_be64(buf + 8), NBLOCKS);
	CU_ASSERT_EQUAL(hl_get_be32(buf + 20), BS);
	CU_ASSERT_EQUAL(buf[24], 0x0a);
	CU_ASSERT_EQUAL(t.cmd.data_in_len, 8 + 16 + 12);
	lu_teardown();
}

/* ---- REPORT SUPPORTED OPERATION CODES ---- */

static void rsoc_cdb(uint8_t *cdb, uint8_t opts, uint8_t op, uint16_t sa)
{
	memset(cdb, 0, 12);
	cdb[0] = 0xa3;
	cdb[1] = 0x0c;
	cdb[2] = opts;
	cdb[3] = op;
	hl_put_be16(cdb + 4, sa);
	hl_put_be32(cdb + 6, 4096);
}

static void test_rsoc_matches_table(void)
{
	struct tcmd t, one;
	uint8_t cdb[12];
	static uint8_t buf[4096], obuf[256];
	unsigned expected = 0;

	lu_setup();
	for (unsigned o = 0; o < 256; o++) {
		const struct scsi_opcode *e = &scsi_disk_ops[o];
		expected += scsi_cmd_avail(e->cmd, lu) ? 1u : 0u;
		for (unsigned k = 0; k < e->n_sa; k++)
			expected += scsi_cmd_avail(&e->sa[k], lu) ? 1u : 0u;
	}
	rsoc_cdb(cdb, 0, 0, 0);
	run(&t, cdb, 12, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	unsigned len = hl_get_be32(buf);
	CU_ASSERT_EQUAL(len, expected * 8);
	for (unsigned off = 4; off < 4 + len; off += 8) {
		uint8_t op = buf[off];
		bool servactv = buf[off + 5] & 1;
		uint16_t sa = hl_get_be16(buf + off + 2);
		const struct scsi_cmd_desc *d = scsi_cmd_lookup(lu, op, sa);
		CU_ASSERT_PTR_NOT_NULL_FATAL(d);
		CU_ASSERT_EQUAL(hl_get_be16(buf + off + 6), d->cdb_len);
		CU_ASSERT_EQUAL(servactv, scsi_disk_ops[op].n_sa != 0);
		/* the one-command form gives exactly the table's usage mask */
		rsoc_cdb(cdb, servactv ? 2 : 1, op, sa);
		run(&one, cdb, 12, obuf, sizeof(obuf), false);
		ASSERT_GOOD(one);
		CU_ASSERT_EQUAL(obuf[1] & 7, 3);
		CU_ASSERT_EQUAL(hl_get_be16(obuf + 2), d->cdb_len);
		CU_ASSERT_EQUAL(memcmp(obuf + 4, d->usage, d->cdb_len), 0);
		CU_ASSERT_EQUAL(obuf[4], op);
		/* the wrong option for this kind of opcode is an error */
		rsoc_cdb(cdb, servactv ? 1 : 2, op, sa);
		run(&one, cdb, 12, obuf, sizeof(obuf), false);
		ASSERT_SENSE(one, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	}
	lu_teardown();
}

static void test_rsoc_usage_mask_is_enforced(void)
{
	/* every bit outside a command's usage mask is refused by dispatch */
	struct tcmd t;
	uint8_t cdb[16];

	lu_setup();
	for (unsigned o = 0; o < 256; o++) {
		const struct scsi_opcode *e = &scsi_disk_ops[o];
		for (unsigned k = 0; k < (e->cmd ? 1u : e->n_sa); k++) {
			const struct scsi_cmd_desc *d = e->cmd ? e->cmd : &e->sa[k];
			if (!scsi_cmd_avail(d, lu))
				continue; /* refused as unsupported, whatever the bits */
			for (unsigned byte = 1; byte + 1 < d->cdb_len; byte++) {
				for (int bit = 0; bit < 8; bit++) {
					if (d->usage[byte] & (1u << bit))
						continue;
					/* flipping a service action bit selects another command */
					if (e->n_sa && byte == 1 && bit < 5)
						continue;
					memset(cdb, 0, sizeof(cdb));
					memcpy(cdb, d->usage, 2); /* opcode and service action */
					if (!e->n_sa)
						cdb[1] = 0;
					cdb[byte] |= (uint8_t)(1u << bit);
					run(&t, cdb, d->cdb_len, NULL, 0, false);
					CU_ASSERT_TRUE(
					    sense_is(&t.cmd, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00));
				}
			}
		}
	}
	lu_teardown();
}

static void test_rsoc_rctd_and_unsupported(void)
{
	struct tcmd t;
	uint8_t cdb[12];
	static uint8_t buf[8192];

	lu_setup();
	rsoc_cdb(cdb, 0x80, 0, 0);
	hl_put_be32(cdb + 6, sizeof(buf));
	run(&t, cdb, 12, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	unsigned len = hl_get_be32(buf);
	CU_ASSERT_EQUAL(len % 20, 0);
	for (unsigned off = 4; off < 4 + len; off += 20) {
		CU_ASSERT_EQUAL(buf[off + 5] & 0x02, 0x02); /* CTDP */
		CU_ASSERT_EQUAL(hl_get_be16(buf + off + 8), 0x0a);
	}
	rsoc_cdb(cdb, 0x81, 0x28, 0);
	run(&t, cdb, 12, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(buf[1], 0x83);
	CU_ASSERT_EQUAL(t.cmd.data_in_len, 4 + 10 + 12);
	rsoc_cdb(cdb, 1, 0xc7, 0); /* unsupported opcode: reported as not supported */
	run(&t, cdb, 12, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(buf[1] & 7, 1);
	rsoc_cdb(cdb, 3, 0x9e, 0x10);
	run(&t, cdb, 12, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(buf[1] & 7, 3);
	rsoc_cdb(cdb, 4, 0, 0);
	run(&t, cdb, 12, buf, sizeof(buf), false);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	lu_teardown();
}

/* ---- unit attentions, REQUEST SENSE ---- */

static void test_ua_sequence(void)
{
	struct tcmd t;
	uint8_t tur[6] = {0};
	uint8_t inq[6] = {0x12, 0, 0, 0, 36, 0};
	uint8_t buf[96];

	lu_setup_cfg(test_cfg(), (uint64_t)NBLOCKS * BS, 0);
	/* INQUIRY is not blocked and does not clear the UA */
	run_full(&t, &nexus_a, 0, inq, 6, buf, 36, false);
	ASSERT_GOOD(t);
	run_full(&t, &nexus_a, 0, tur, 6, NULL, 0, false);
	ASSERT_SENSE(t, HL_SK_UNIT_ATTENTION, 0x29, 0x00);
	run_full(&t, &nexus_a, 0, tur, 6, NULL, 0, false);
	ASSERT_GOOD(t);
	run_full(&t, &nexus_b, 0, tur, 6, NULL, 0, false);
	ASSERT_SENSE(t, HL_SK_UNIT_ATTENTION, 0x29, 0x00);
	/* LUN reset by A: every nexus sees 29/03, A included (SAM-5) */
	hl_lu_reset(lu, &nexus_a);
	run_full(&t, &nexus_a, 0, tur, 6, NULL, 0, false);
	ASSERT_SENSE(t, HL_SK_UNIT_ATTENTION, 0x29, 0x03);
	run_full(&t, &nexus_a, 0, tur, 6, NULL, 0, false);
	ASSERT_GOOD(t);
	run_full(&t, &nexus_b, 0, tur, 6, NULL, 0, false);
	ASSERT_SENSE(t, HL_SK_UNIT_ATTENTION, 0x29, 0x03);
	run_full(&t, &nexus_b, 0, tur, 6, NULL, 0, false);
	ASSERT_GOOD(t);
	/* the nexus ends: a later one with the same id starts over */
	hl_scsi_nexus_gone(&map, &nexus_b);
	run_full(&t, &nexus_b, 0, tur, 6, NULL, 0, false);
	ASSERT_SENSE(t, HL_SK_UNIT_ATTENTION, 0x29, 0x00);
	lu_teardown();
}

/*
 * Many nexuses on one LU (the LU finds each command's by id: a hash index,
 * not a list walk): 3,000 nexuses each hear POWER ON once; half of them end
 * (removal shifts the index) and start over; the rest keep their state.
 */
static void test_ua_many_nexuses(void)
{
	enum { N = 3000 };
	static struct hl_scsi_nexus nx[N];
	struct tcmd t;
	uint8_t tur[6] = {0};

	lu_setup_cfg(test_cfg(), (uint64_t)NBLOCKS * BS, 0);
	for (unsigned i = 0; i < N; i++) {
		nx[i] = nexus_a;
		nx[i].id = 1000 + (uint64_t)i * 7919; /* spread, not dense */
	}
	for (unsigned i = 0; i < N; i++) {
		run_full(&t, &nx[i], 0, tur, 6, NULL, 0, false);
		ASSERT_SENSE(t, HL_SK_UNIT_ATTENTION, 0x29, 0x00);
	}
	for (unsigned i = 0; i < N; i += 2)
		hl_scsi_nexus_gone(&map, &nx[i]);
	for (unsigned i = 0; i < N; i++) {
		run_full(&t, &nx[i], 0, tur, 6, NULL, 0, false);
		if (i % 2) {
			ASSERT_GOOD(t);
		} else {
			ASSERT_SENSE(t, HL_SK_UNIT_ATTENTION, 0x29, 0x00);
		}
	}
	lu_teardown();
}

/*
 * A LUN added to or removed from the target: every nexus hears REPORTED LUNS
 * DATA HAS CHANGED on its next command to any LU of the target, once (it is
 * cleared on the other LUs when reported, or by REPORT LUNS).
 */
static void test_luns_changed_ua(void)
{
	struct tcmd t;
	uint8_t tur[6] = {0};
	uint8_t rl[12] = {0xa0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0};
	uint8_t buf[256];
	struct hl_lu_config cfg = test_cfg();
	struct hl_lu *lu2;

	lu_setup(); /* nexus A has used LUN 0; nexus B nothing yet */
	cfg.name = "d1";
	cfg.naa[15] ^= 0xff;
	struct hl_origin *o2 = fake_origin_new((uint64_t)NBLOCKS * BS, true);
	CU_ASSERT_PTR_NOT_NULL_FATAL(o2);
	CU_ASSERT_EQUAL_FATAL(hl_lu_create(&cfg, o2, &lu2), 0);

	/* LUN 1 added */
	map.lu[1] = lu2;
	CU_ASSERT_EQUAL(hl_scsi_luns_changed(&map, &nexus_a), 2);
	CU_ASSERT_EQUAL(hl_scsi_luns_changed(&map, &nexus_b), 2);
	run_full(&t, &nexus_a, 0, tur, 6, NULL, 0, false);
	ASSERT_SENSE(t, HL_SK_UNIT_ATTENTION, 0x3f, 0x0e);
	run_full(&t, &nexus_a, 0, tur, 6, NULL, 0, false);
	ASSERT_GOOD(t);
	/* new to A: POWER ON there, and 3F/0E already heard on LUN 0 */
	run_full(&t, &nexus_a, 1, tur, 6, NULL, 0, false);
	ASSERT_SENSE(t, HL_SK_UNIT_ATTENTION, 0x29, 0x00);
	run_full(&t, &nexus_a, 1, tur, 6, NULL, 0, false);
	ASSERT_GOOD(t);
	/* B: POWER ON first, then REPORT LUNS shows both and clears 3F/0E everywhere */
	run_full(&t, &nexus_b, 0, tur, 6, NULL, 0, false);
	ASSERT_SENSE(t, HL_SK_UNIT_ATTENTION, 0x29, 0x00);
	run_full(&t, &nexus_b, 0, rl, 12, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(hl_get_be32(buf), 16);
	CU_ASSERT_EQUAL(buf[8 + 1], 0);
	CU_ASSERT_EQUAL(buf[16 + 1], 1);
	run_full(&t, &nexus_b, 0, tur, 6, NULL, 0, false);
	ASSERT_GOOD(t);
	run_full(&t, &nexus_b, 1, tur, 6, NULL, 0, false);
	ASSERT_SENSE(t, HL_SK_UNIT_ATTENTION, 0x29, 0x00);
	run_full(&t, &nexus_b, 1, tur, 6, NULL, 0, false);
	ASSERT_GOOD(t);

	/* LUN 1 removed: LUN 1 is gone, LUN 0 carries the news */
	map.lu[1] = NULL;
	CU_ASSERT_EQUAL(hl_scsi_luns_changed(&map, &nexus_a), 1);
	run_full(&t, &nexus_a, 1, tur, 6, NULL, 0, false);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x25, 0x00);
	run_full(&t, &nexus_a, 0, tur, 6, NULL, 0, false);
	ASSERT_SENSE(t, HL_SK_UNIT_ATTENTION, 0x3f, 0x0e);
	run_full(&t, &nexus_a, 0, tur, 6, NULL, 0, false);
	ASSERT_GOOD(t);
	/* nobody left to hold it */
	map.lu[0] = NULL;
	CU_ASSERT_EQUAL(hl_scsi_luns_changed(&map, &nexus_a), 0);
	map.lu[0] = lu;
	hl_lu_destroy(lu2);
	lu_teardown();
}

static void test_request_sense_reports_and_clears_ua(void)
{
	struct tcmd t;
	uint8_t rs[6] = {0x03, 0, 0, 0, 252, 0};
	uint8_t tur[6] = {0};
	uint8_t buf[252];

	lu_setup_cfg(test_cfg(), (uint64_t)NBLOCKS * BS, 0);
	run(&t, rs, 6, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(t.cmd.data_in_len, 18);
	CU_ASSERT_EQUAL(buf[0], 0x70);
	CU_ASSERT_EQUAL(buf[2], HL_SK_UNIT_ATTENTION);
	CU_ASSERT_EQUAL(buf[12], 0x29);
	run(&t, tur, 6, NULL, 0, false);
	ASSERT_GOOD(t);
	rs[1] = 1; /* descriptor format, nothing pending */
	run(&t, rs, 6, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(buf[0], 0x72);
	CU_ASSERT_EQUAL(buf[1], HL_SK_NO_SENSE);
	CU_ASSERT_EQUAL(t.cmd.data_in_len, 8);
	lu_teardown();
}

static void test_report_target_port_groups(void)
{
	static const struct hl_scsi_port port2 = {
	    .name = "iqn.2026-11.io.hotlun:t0,t,0x0002", .rel_port_id = 2, .tpg_id = 2};
	struct hl_scsi_nexus nexus_c = {
	    .id = 3, .initiator_port = "iqn.2026-11.test:c,i,0x000000000003", .port = &port2};
	struct tcmd t;
	uint8_t cdb[12] = {0xa3, 0x0a, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0};
	uint8_t tur[6] = {0}, buf[256];

	lu_setup();
	/* one port seen: one group, active/optimized, holding relative port 1 */
	run(&t, cdb, 12, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(hl_get_be32(buf), 12);
	CU_ASSERT_EQUAL(t.cmd.data_in_len, 16);
	CU_ASSERT_EQUAL(buf[4] & 0x0f, 0); /* active/optimized */
	CU_ASSERT_EQUAL(buf[5] & 0x01, 1); /* AO_SUP */
	CU_ASSERT_EQUAL(hl_get_be16(buf + 6), port.tpg_id);
	CU_ASSERT_EQUAL(buf[11], 1);
	CU_ASSERT_EQUAL(hl_get_be16(buf + 14), port.rel_port_id);
	/* a nexus through a second portal group adds its group */
	run_full(&t, &nexus_c, 0, tur, 6, NULL, 0, false);
	cdb[1] = 0x2a; /* extended header */
	run(&t, cdb, 12, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(hl_get_be32(buf), 4 + 2 * 12);
	CU_ASSERT_EQUAL(buf[4], 0x10);
	CU_ASSERT_EQUAL(hl_get_be16(buf + 8 + 2), 1);
	CU_ASSERT_EQUAL(hl_get_be16(buf + 8 + 8 + 2), 1);
	CU_ASSERT_EQUAL(hl_get_be16(buf + 20 + 2), 2);
	CU_ASSERT_EQUAL(hl_get_be16(buf + 20 + 8 + 2), 2);
	/* short allocation length: cut, length field intact */
	cdb[1] = 0x0a;
	cdb[8] = 0;
	cdb[9] = 4;
	run(&t, cdb, 12, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(t.cmd.data_in_len, 4);
	CU_ASSERT_EQUAL(hl_get_be32(buf), 24);
	/* parameter data format 010b is reserved */
	cdb[1] = 0x4a;
	run(&t, cdb, 12, buf, sizeof(buf), false);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	lu_teardown();
}

static void test_mode_select_accepts_current_rejects_changes(void)
{
	struct tcmd t;
	uint8_t ms6[6] = {0x1a, 0, 0x3f, 0, 255, 0};
	uint8_t sel6[6] = {0x15, 0x10, 0, 0, 0, 0};
	uint8_t buf[255], par[255];

	lu_setup();
	run(&t, ms6, 6, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	uint32_t n = t.cmd.data_in_len;
	CU_ASSERT_TRUE(n > 12);
	/* writing back what MODE SENSE said (mode data length reserved: 0) is GOOD */
	memcpy(par, buf, n);
	par[0] = 0;
	sel6[4] = (uint8_t)n;
	run(&t, sel6, 6, par, n, true);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(t.cmd.xfer_len, n);
	/* no parameter data: nothing to do */
	sel6[4] = 0;
	run(&t, sel6, 6, NULL, 0, true);
	ASSERT_GOOD(t);
	/* a list shorter than its header */
	sel6[4] = 3;
	run(&t, sel6, 6, par, 3, true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x1a, 0x00);
	/* clearing WCE (caching page byte 2) is not changeable */
	uint32_t caching = 4 + 8; /* header + block descriptor; the caching page comes first */
	CU_ASSERT_EQUAL(par[caching], 0x08);
	par[caching + 2] ^= 0x04;
	sel6[4] = (uint8_t)n;
	run(&t, sel6, 6, par, n, true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x26, 0x00);
	CU_ASSERT_EQUAL(hl_get_be16(t.cmd.sense + 16), caching + 2);
	par[caching + 2] ^= 0x04;
	/* another block length */
	par[4 + 6] ^= 0x01;
	run(&t, sel6, 6, par, n, true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x26, 0x00);
	par[4 + 6] ^= 0x01;
	/* an unknown page */
	par[caching] = 0x19;
	run(&t, sel6, 6, par, n, true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x26, 0x00);
	par[caching] = 0x08;
	/* SP: saving is not supported */
	sel6[1] = 0x11;
	run(&t, sel6, 6, par, n, true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	/* MODE SELECT(10): one control page, no block descriptor */
	uint8_t ms10[10] = {0x5a, 0x08, 0x0a, 0, 0, 0, 0, 0, 255, 0};
	run(&t, ms10, 10, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	n = t.cmd.data_in_len;
	CU_ASSERT_EQUAL(n, 8 + 12);
	memcpy(par, buf, n);
	par[0] = par[1] = 0;
	uint8_t sel10[10] = {0x55, 0x10, 0, 0, 0, 0, 0, 0, (uint8_t)n, 0};
	run(&t, sel10, 10, par, n, true);
	ASSERT_GOOD(t);
	par[8 + 3] = 0x00; /* queue algorithm modifier */
	run(&t, sel10, 10, par, n, true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x26, 0x00);
	/* fewer bytes than the parameter list length */
	run(&t, sel10, 10, par, 4, true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x0e, 0x03);
	/* a page cut short by the parameter list length */
	memcpy(par, buf, n);
	par[0] = par[1] = 0;
	sel10[8] = (uint8_t)(n - 2);
	run(&t, sel10, 10, par, n - 2, true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x1a, 0x00);
	lu_teardown();
}

static void test_orwrite(void)
{
	struct tcmd t;
	uint8_t cdb[16], buf[2 * BS];

	lu_setup();
	memset(medium() + 10 * BS, 0x0f, 2 * BS);
	memset(buf, 0x30, sizeof(buf));
	cdb_rw16(cdb, 0x8b, 10, 2);
	run(&t, cdb, 16, buf, sizeof(buf), true);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(medium()[10 * BS], 0x3f);
	CU_ASSERT_EQUAL(medium()[12 * BS - 1], 0x3f);
	CU_ASSERT_EQUAL(medium()[12 * BS], 0x00);
	/* ORPROTECT: no protection information */
	cdb[1] = 0x20;
	run(&t, cdb, 16, buf, sizeof(buf), true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	/* beyond the end */
	cdb_rw16(cdb, 0x8b, NBLOCKS - 1, 2);
	run(&t, cdb, 16, buf, sizeof(buf), true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x21, 0x00);
	/* zero blocks: nothing happens */
	cdb_rw16(cdb, 0x8b, 0, 0);
	run(&t, cdb, 16, NULL, 0, true);
	ASSERT_GOOD(t);
	lu_teardown();
}

static void test_lu_create_rejects_bad_geometry(void)
{
	struct hl_lu_config cfg = test_cfg();
	struct hl_lu *l = NULL;
	struct hl_origin *o = fake_origin_new(1000, false);

	CU_ASSERT_EQUAL(hl_lu_create(&cfg, o, &l), -EINVAL);
	cfg.block_size = 1024;
	o->size = 4096;
	CU_ASSERT_EQUAL(hl_lu_create(&cfg, o, &l), -EINVAL);
	hl_origin_close(o);
}

static const struct hl_test tests[] = {
    {"unknown opcode is INVALID COMMAND OPERATION CODE", test_unknown_opcode},
    {"reserved CDB bit gets field pointer", test_reserved_bit_rejected_with_field_pointer},
    {"LUN without LU: INQUIRY/REQUEST SENSE/REPORT LUNS only", test_no_lu_commands},
    {"INQUIRY standard data", test_inquiry_standard},
    {"INQUIRY allocation length honoured", test_inquiry_alloc_length},
    {"INQUIRY invalid fields", test_inquiry_bad_fields},
    {"REPORT TARGET PORT GROUPS", test_report_target_port_groups},
    {"ORWRITE(16)", test_orwrite},
    {"MODE SELECT accepts the current values only",
     test_mode_select_accepts_current_rejects_changes},
    {"VPD 00 lists only pages that answer", test_vpd_supported_pages_all_answer},
    {"VPD 80 serial", test_vpd_serial},
    {"VPD 83 designators", test_vpd83_layout},
    {"VPD B0 block limits", test_vpd_block_limits},
    {"REPORT LUNS", test_report_luns},
    {"READ CAPACITY(10)", test_read_capacity10},
    {"READ CAPACITY(10) of a huge LU", test_read_capacity10_too_big},
    {"READ CAPACITY(16)", test_read_capacity16},
    {"WRITE/READ 6/10/12/16 round trip", test_write_read_roundtrip_all_sizes},
    {"READ(6) length 0 means 256", test_read6_zero_means_256},
    {"FUA reaches the origin", test_write_fua_reaches_origin},
    {"RDPROTECT/WRPROTECT refused", test_protect_field_rejected},
    {"LBA out of range", test_lba_out_of_range},
    {"zero blocks: GOOD, no I/O", test_zero_blocks_no_io},
    {"maximum transfer length", test_max_transfer_length},
    {"read residuals", test_read_residuals},
    {"write residuals", test_write_residuals},
    {"read-only LU", test_read_only_lu},
    {"origin errors give MEDIUM ERROR", test_origin_errors_map_to_medium_error},
    {"submit -ENOMEM/-EAGAIN gives BUSY", test_submit_enomem_is_busy},
    {"VERIFY BYTCHK 0 reads the range", test_verify_bytchk0_reads_whole_range},
    {"VERIFY BYTCHK 1 compares", test_verify_bytchk1_compares},
    {"VERIFY BYTCHK 3 one-block pattern", test_verify_bytchk3_one_block_pattern},
    {"WRITE AND VERIFY", test_write_and_verify},
    {"SYNCHRONIZE CACHE", test_sync_cache},
    {"PRE-FETCH", test_prefetch},
    {"START STOP UNIT", test_start_stop_unit},
    {"MODE SENSE(6) all pages", test_mode_sense6_all_pages},
    {"MODE SENSE(6) DBD, one page, short allocation", test_mode_sense6_dbd_and_single_page},
    {"MODE SENSE page control and subpages", test_mode_sense_page_control},
    {"MODE SENSE(10) long LBA", test_mode_sense10_long_lba},
    {"RSOC matches the command table", test_rsoc_matches_table},
    {"usage mask is enforced", test_rsoc_usage_mask_is_enforced},
    {"RSOC timeouts and unsupported commands", test_rsoc_rctd_and_unsupported},
    {"unit attention sequence", test_ua_sequence},
    {"unit attentions of 3,000 nexuses on one LU", test_ua_many_nexuses},
    {"LUN inventory change: REPORTED LUNS DATA HAS CHANGED once per nexus", test_luns_changed_ua},
    {"REQUEST SENSE reports and clears UA", test_request_sense_reports_and_clears_ua},
    {"LU geometry checks", test_lu_create_rejects_bad_geometry},
    {NULL, NULL},
};

int main(void)
{
	hl_log_level = HL_LOG_ERR - 1;
	return hl_test_run("scsi", tests);
}
