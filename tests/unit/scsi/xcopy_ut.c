/*
 * xcopy_ut.c - EXTENDED COPY (src/scsi/xcopy.c): copies inside one LU and
 * between two LUs found by NAA, parameter list errors, RECEIVE COPY RESULTS,
 * the Third-party Copy VPD page and the 3PC bit.
 */
#include "scsi_ut_util.h"

static struct tcmd t;
static struct hl_lu *lu2;
static struct hl_origin *origin2;
static struct hl_scsi_nexus *xc_nexus = &nexus_a; /* who sends xcopy()'s command */

static const uint8_t naa2[16] = {0x61, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
                                 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f};

static void setup(void)
{
	struct hl_lu_config cfg = test_cfg();

	lu_setup();
	origin2 = fake_origin_new((uint64_t)NBLOCKS * BS, true);
	CU_ASSERT_PTR_NOT_NULL_FATAL(origin2);
	cfg.name = "d1";
	memcpy(cfg.naa, naa2, 16);
	CU_ASSERT_EQUAL_FATAL(hl_lu_create(&cfg, origin2, &lu2), 0);
}

static void teardown(void)
{
	hl_lu_destroy(lu2);
	lu2 = NULL;
	lu_teardown();
}

/* Target descriptor (E4h) naming the LU with this NAA. */
static void put_tgt(uint8_t *d, const uint8_t *naa)
{
	memset(d, 0, 32);
	d[0] = 0xe4;
	d[4] = 0x01; /* binary */
	d[5] = 0x03; /* LU association, NAA */
	d[7] = 16;
	memcpy(d + 8, naa, 16);
	hl_put_be24(d + 29, BS);
}

static void put_seg(uint8_t *d, uint16_t src, uint16_t dst, uint16_t n, uint64_t slba,
                    uint64_t dlba)
{
	memset(d, 0, 28);
	d[0] = 0x02;
	hl_put_be16(d + 2, 0x18);
	hl_put_be16(d + 4, src);
	hl_put_be16(d + 6, dst);
	hl_put_be16(d + 10, n);
	hl_put_be64(d + 12, slba);
	hl_put_be64(d + 20, dlba);
}

/*
 * Run EXTENDED COPY announcing a parameter list of len bytes, of which the
 * transport carried `carried`; drive both origins to the end.
 */
static void (*xcopy_prepare)(struct hl_scsi_cmd *cmd); /* NULL, or run just before exec */

static void xcopy_carried(uint8_t *par, uint32_t len, uint32_t carried)
{
	uint8_t cdb[16] = {0x83};

	hl_put_be32(cdb + 10, len);
	memset(&t, 0, sizeof(t));
	t.cmd.map = &map;
	t.cmd.lu = lu;
	t.cmd.nexus = xc_nexus;
	memcpy(t.cmd.cdb, cdb, 16);
	t.cmd.cdb_len = 16;
	t.cmd.data = par;
	t.cmd.data_len = carried;
	t.cmd.data_out = carried > 0;
	t.cmd.done = tcmd_done;
	if (xcopy_prepare)
		xcopy_prepare(&t.cmd);
	hl_scsi_cmd_exec(&t.cmd);
	while (fake_step(origin) + fake_step(origin2))
		;
	CU_ASSERT_EQUAL(t.done, 1);
}

/* Run EXTENDED COPY with a parameter list of len bytes, all carried. */
static void xcopy(uint8_t *par, uint32_t len)
{
	xcopy_carried(par, len, len);
}

static void hdr(uint8_t *p, uint8_t list_id, uint8_t usage, uint16_t tlen, uint32_t slen)
{
	memset(p, 0, 16);
	p[0] = list_id;
	p[1] = (uint8_t)(usage << 3);
	hl_put_be16(p + 2, tlen);
	hl_put_be32(p + 8, slen);
}

static void test_copy_within_and_across_lus(void)
{
	uint8_t par[16 + 64 + 56];

	setup();
	for (unsigned i = 0; i < 3000 * BS; i++)
		medium()[i] = (uint8_t)(i * 7 + 1);
	/* one LU: 3000 blocks (more than one 1 MiB chunk) from LBA 0 to LBA 4096 */
	hdr(par, 1, 0, 32, 28);
	put_tgt(par + 16, test_cfg().naa);
	put_seg(par + 48, 0, 0, 3000, 0, 4096);
	xcopy(par, 16 + 32 + 28);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(memcmp(medium() + 4096 * BS, medium(), 3000 * BS), 0);
	/* two LUs of the command's LUN map: descriptor 1 is LUN 1; two segments */
	map.lu[1] = lu2;
	hdr(par, 2, 0, 64, 56);
	put_tgt(par + 16, test_cfg().naa);
	put_tgt(par + 48, naa2);
	put_seg(par + 80, 0, 1, 10, 5, 100);
	put_seg(par + 108, 1, 0, 4, 100, 8000);
	xcopy(par, sizeof(par));
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(memcmp(fake_of(origin2)->mem + 100 * BS, medium() + 5 * BS, 10 * BS), 0);
	CU_ASSERT_EQUAL(memcmp(medium() + 8000 * BS, medium() + 5 * BS, 4 * BS), 0);
	map.lu[1] = NULL;
	/* COPY STATUS of list 2 for this nexus: done, 2 segments, 14 blocks in bytes */
	uint8_t cdb[16] = {0x84, 0x00, 2}, buf[64];
	hl_put_be32(cdb + 10, sizeof(buf));
	run(&t, cdb, 16, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(hl_get_be32(buf), 8);
	CU_ASSERT_EQUAL(buf[4], 0);
	CU_ASSERT_EQUAL(hl_get_be16(buf + 5), 2);
	CU_ASSERT_EQUAL(buf[7], 0);
	CU_ASSERT_EQUAL(hl_get_be32(buf + 8), 14 * BS);
	/* another nexus has no results for list 2 */
	run_full(&t, &nexus_b, 0, (uint8_t[6]){0}, 6, NULL, 0, false); /* its power-on UA */
	run_full(&t, &nexus_b, 0, cdb, 16, buf, sizeof(buf), false);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	/* results go with the nexus */
	hl_scsi_nexus_gone(&map, &nexus_a);
	run(&t, (uint8_t[6]){0}, 6, NULL, 0, false); /* a new session: power-on UA */
	run(&t, cdb, 16, buf, sizeof(buf), false);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	teardown();
}

static bool copy_aborted(uint8_t asc, uint8_t ascq)
{
	return sense_is(&t.cmd, 0x0a, asc, ascq);
}

static void test_copy_errors(void)
{
	uint8_t par[16 + 32 * 9 + 28 * 2];
	uint8_t other[16] = {0x60, 0xff};

	setup();
	/* an empty parameter list does nothing */
	xcopy(par, 0);
	ASSERT_GOOD(t);
	/* a list shorter than its header */
	xcopy(par, 15);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x1a, 0x00);
	/* less data than the CDB announced */
	xcopy_carried(par, 16 + 32 + 28, 16);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x0e, 0x03);
	/* header lengths beyond the parameter list */
	hdr(par, 1, 2, 32, 28);
	put_tgt(par + 16, test_cfg().naa);
	put_seg(par + 48, 0, 0, 1, 0, 1);
	xcopy(par, 16 + 32 + 28 - 1);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x1a, 0x00);
	/* an unknown NAA: the copy target is not reachable */
	put_tgt(par + 16, other);
	xcopy(par, 16 + 32 + 28);
	CU_ASSERT_TRUE(copy_aborted(0x0d, 0x02));
	put_tgt(par + 16, test_cfg().naa);
	/* a segment naming descriptor 1 of a one-descriptor list */
	put_seg(par + 48, 0, 1, 1, 0, 1);
	xcopy(par, 16 + 32 + 28);
	CU_ASSERT_TRUE(copy_aborted(0x08, 0x04));
	/* beyond the end of the destination */
	put_seg(par + 48, 0, 0, 2, 0, NBLOCKS - 1);
	xcopy(par, 16 + 32 + 28);
	CU_ASSERT_EQUAL(t.cmd.status, HL_SAM_CHECK_CONDITION);
	CU_ASSERT_EQUAL(t.cmd.sense[2] & 0x0f, 0x0a);
	/* unsupported descriptor types */
	par[16] = 0xe0;
	put_seg(par + 48, 0, 0, 1, 0, 1);
	xcopy(par, 16 + 32 + 28);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x26, 0x07);
	put_tgt(par + 16, test_cfg().naa);
	par[48] = 0x03;
	xcopy(par, 16 + 32 + 28);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x26, 0x09);
	/* too many target descriptors */
	hdr(par, 1, 2, 32 * 9, 28);
	for (int i = 0; i < 9; i++)
		put_tgt(par + 16 + 32 * i, test_cfg().naa);
	put_seg(par + 16 + 32 * 9, 0, 0, 1, 0, 1);
	xcopy(par, 16 + 32 * 9 + 28);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x26, 0x06);
	/* another LU reserved (exclusive access) through another nexus: RESERVATION CONFLICT */
	uint8_t reg[24] = {0}, rcdb[10] = {0x5f, 0, 0, 0, 0, 0, 0, 0, 24, 0};
	map.lu[1] = lu2;
	hl_put_be64(reg + 8, 0xb);
	run_full(&t, &nexus_b, 1, (uint8_t[6]){0}, 6, NULL, 0, false); /* power-on UA */
	run_full(&t, &nexus_b, 1, rcdb, 10, reg, 24, true);
	ASSERT_GOOD(t);
	hl_put_be64(reg, 0xb);
	hl_put_be64(reg + 8, 0);
	rcdb[1] = 1;
	rcdb[2] = 3; /* RESERVE, exclusive access */
	run_full(&t, &nexus_b, 1, rcdb, 10, reg, 24, true);
	ASSERT_GOOD(t);
	hdr(par, 1, 2, 64, 28);
	put_tgt(par + 16, test_cfg().naa);
	put_tgt(par + 48, naa2);
	put_seg(par + 80, 1, 0, 1, 0, 1); /* reading it */
	xcopy(par, 16 + 64 + 28);
	CU_ASSERT_EQUAL(t.cmd.status, HL_SAM_RESERVATION_CONFLICT);
	put_seg(par + 80, 0, 1, 1, 0, 1); /* writing it */
	xcopy(par, 16 + 64 + 28);
	CU_ASSERT_EQUAL(t.cmd.status, HL_SAM_RESERVATION_CONFLICT);
	hl_lu_reset(lu2, NULL);
	rcdb[1] = 3;                                                   /* CLEAR */
	run_full(&t, &nexus_b, 1, (uint8_t[6]){0}, 6, NULL, 0, false); /* reset UA */
	run_full(&t, &nexus_b, 1, rcdb, 10, reg, 24, true);
	ASSERT_GOOD(t);
	/* a read-only destination */
	lu2->cfg.read_only = true;
	hdr(par, 1, 2, 64, 28);
	put_tgt(par + 16, test_cfg().naa);
	put_tgt(par + 48, naa2);
	put_seg(par + 80, 0, 1, 1, 0, 1);
	xcopy(par, 16 + 64 + 28);
	ASSERT_SENSE(t, HL_SK_DATA_PROTECT, 0x27, 0x00);
	map.lu[1] = NULL;
	teardown();
}

/*
 * The LU registry is daemon-wide, but a copy target must be an LU the
 * nexus may address: its command's LU or one of its LUN map. Another
 * target's LU (not in this map) is neither read nor written, and the
 * answer is the one an unknown NAA gets (copy target not reachable).
 */
static void test_copy_target_outside_the_map(void)
{
	uint8_t par[16 + 64 + 28];

	setup();
	memset(fake_of(origin2)->mem, 0x5e, 8 * BS);
	memset(medium() + 16 * BS, 0xa1, 8 * BS);
	hdr(par, 3, 0, 64, 28);
	put_tgt(par + 16, test_cfg().naa);
	put_tgt(par + 48, naa2);
	/* reading it into this LU */
	put_seg(par + 80, 1, 0, 8, 0, 0);
	xcopy(par, sizeof(par));
	CU_ASSERT_TRUE(copy_aborted(0x0d, 0x02));
	CU_ASSERT_EQUAL(medium()[0], 0);
	CU_ASSERT_EQUAL(medium()[8 * BS - 1], 0);
	/* writing over it */
	put_seg(par + 80, 0, 1, 8, 16, 0);
	xcopy(par, sizeof(par));
	CU_ASSERT_TRUE(copy_aborted(0x0d, 0x02));
	CU_ASSERT_EQUAL(fake_of(origin2)->mem[0], 0x5e);
	CU_ASSERT_EQUAL(fake_of(origin2)->mem[8 * BS - 1], 0x5e);
	/* nothing started: no results held for the list */
	uint8_t cdb[16] = {0x84, 0x00, 3}, buf[64];
	hl_put_be32(cdb + 10, sizeof(buf));
	run(&t, cdb, 16, buf, sizeof(buf), false);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	/* a LUN map with it (under any LUN number) makes it a copy target */
	map.lu[7] = lu2;
	put_seg(par + 80, 1, 0, 8, 0, 0);
	xcopy(par, sizeof(par));
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(medium()[0], 0x5e);
	map.lu[7] = NULL;
	teardown();
}

/*
 * A copy target unmapped while the copy runs (a live LUN map change gives
 * the disk to another target): the chunks after the change are not
 * written, the copy ends COPY ABORTED, copy target not reachable. Else a
 * copy of up to 64 segments of 65535 blocks kept writing into a disk its
 * initiator no longer reaches.
 */
static void test_copy_target_unmapped_during_copy(void)
{
	uint8_t par[16 + 64 + 28];
	uint8_t cdb[16] = {0x83};

	setup();
	memset(fake_of(origin)->mem, 0x77, 4096 * BS);
	hdr(par, 4, 0, 64, 28);
	put_tgt(par + 16, test_cfg().naa);
	put_tgt(par + 48, naa2);
	put_seg(par + 80, 0, 1, 4096, 0, 0); /* 2 MiB: two chunks */
	map.lu[1] = lu2;
	hl_put_be32(cdb + 10, sizeof(par));
	memset(&t, 0, sizeof(t));
	t.cmd.map = &map;
	t.cmd.lu = lu;
	t.cmd.nexus = &nexus_a;
	memcpy(t.cmd.cdb, cdb, 16);
	t.cmd.cdb_len = 16;
	t.cmd.data = par;
	t.cmd.data_len = sizeof(par);
	t.cmd.data_out = true;
	t.cmd.done = tcmd_done;
	hl_scsi_cmd_exec(&t.cmd);
	/* until the first chunk is written */
	while (fake_of(origin2)->mem[0] != 0x77 && fake_step(origin) + fake_step(origin2))
		;
	CU_ASSERT_EQUAL(fake_of(origin2)->mem[0], 0x77);
	CU_ASSERT_EQUAL(t.done, 0);
	map.lu[1] = NULL;
	while (fake_step(origin) + fake_step(origin2))
		;
	CU_ASSERT_EQUAL(t.done, 1);
	CU_ASSERT_TRUE(copy_aborted(0x0d, 0x02));
	CU_ASSERT_EQUAL(fake_of(origin2)->mem[2048 * BS], 0);
	CU_ASSERT_EQUAL(fake_of(origin2)->mem[4096 * BS - 1], 0);
	hl_scsi_nexus_gone(&map, &nexus_a);
	teardown();
}

/* COPY STATUS of list_id for nexus n: GOOD (held) or not. */
static bool status_held(struct hl_scsi_nexus *n, uint8_t list_id)
{
	uint8_t cdb[16] = {0x84, 0x00, list_id}, buf[64];

	hl_put_be32(cdb + 10, sizeof(buf));
	run_full(&t, n, 0, cdb, 16, buf, sizeof(buf), false);
	return t.cmd.status == HL_SAM_GOOD;
}

/*
 * Held results are counted per nexus: one that runs many copies pushes
 * out its own oldest results, never those another nexus has yet to read.
 */
static void test_results_held_per_nexus(void)
{
	uint8_t par[16 + 32 + 28];

	setup();
	run_full(&t, &nexus_b, 0, (uint8_t[6]){0}, 6, NULL, 0, false); /* its power-on UA */
	hdr(par, 2, 0, 32, 28);
	put_tgt(par + 16, test_cfg().naa);
	put_seg(par + 48, 0, 0, 1, 0, 1);
	xcopy(par, sizeof(par));
	ASSERT_GOOD(t);
	xc_nexus = &nexus_b;
	for (uint8_t id = 10; id < 30; id++) {
		par[0] = id;
		xcopy(par, sizeof(par));
		ASSERT_GOOD(t);
	}
	xc_nexus = &nexus_a;
	CU_ASSERT_TRUE(status_held(&nexus_a, 2));
	CU_ASSERT_TRUE(status_held(&nexus_b, 29));
	CU_ASSERT_TRUE(status_held(&nexus_b, 14)); /* its newest 16 */
	CU_ASSERT_FALSE(status_held(&nexus_b, 13));
	hl_scsi_nexus_gone(&map, &nexus_a);
	hl_scsi_nexus_gone(&map, &nexus_b);
	teardown();
}

static void test_operating_parameters_vpd_and_3pc(void)
{
	uint8_t cdb[16] = {0x84, 0x03}, buf[256];

	setup();
	hl_put_be32(cdb + 10, sizeof(buf));
	run(&t, cdb, 16, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	CU_ASSERT_TRUE(hl_get_be32(buf) >= 40);
	CU_ASSERT_TRUE(hl_get_be16(buf + 8) >= 2);  /* target descriptors */
	CU_ASSERT_TRUE(hl_get_be16(buf + 10) >= 1); /* segment descriptors */
	CU_ASSERT_EQUAL(buf[43], 2);
	CU_ASSERT_EQUAL(buf[44], 0x02);
	CU_ASSERT_EQUAL(buf[45], 0xe4);
	uint8_t inq[6] = {0x12, 0, 0, 0, 96, 0};
	run(&t, inq, 6, buf, 96, false);
	CU_ASSERT_EQUAL(buf[5] & 0x08, 0x08); /* 3PC */
	uint8_t vpd[6] = {0x12, 1, 0x8f, 0, 255, 0};
	run(&t, vpd, 6, buf, 255, false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(buf[1], 0x8f);
	/* first descriptor: supported commands, EXTENDED COPY with service action 0 */
	CU_ASSERT_EQUAL(hl_get_be16(buf + 4), 0x0001);
	CU_ASSERT_EQUAL(hl_get_be16(buf + 6) % 4, 0);
	CU_ASSERT_EQUAL(buf[9], 0x83);
	CU_ASSERT_EQUAL(buf[10], 1);
	CU_ASSERT_EQUAL(buf[11], 0x00);
	CU_ASSERT_EQUAL(buf[12], 0x84);
	CU_ASSERT_EQUAL(t.cmd.data_in_len, 4u + hl_get_be16(buf + 2));
	teardown();
}

static unsigned ready_calls;

static void count_ready(struct hl_scsi_cmd *cmd, uint32_t bytes)
{
	ready_calls++;
}

/*
 * The transport reuses a command's memory (an iSCSI task from malloc, or the
 * last command's) and offers data_ready to every command; the scsi layer's
 * private stream flag is left as a previous READ or the allocator left it
 * (ASan fills malloc'd memory with 0xbe: UBSan saw "load of value 190" for
 * it in copy_next under xcopy_cross_target.sh).
 */
static void stale_read_state(struct hl_scsi_cmd *cmd)
{
	memset(&cmd->stream, 1, sizeof(cmd->stream)); /* as true: 0xbe may read as false */
	cmd->data_ready = count_ready;
}

static void test_copy_ignores_stale_read_state(void)
{
	uint8_t par[16 + 32 + 28];

	setup();
	ready_calls = 0;
	hdr(par, 3, 0, 32, 28);
	put_tgt(par + 16, test_cfg().naa);
	put_seg(par + 48, 0, 0, 8, 0, 4096);
	xcopy_prepare = stale_read_state;
	xcopy(par, sizeof(par));
	xcopy_prepare = NULL;
	ASSERT_GOOD(t);
	/* EXTENDED COPY has no Data-In: its reads must not hand data to the transport */
	CU_ASSERT_EQUAL(fake_of(origin)->n_ready_io, 0u);
	CU_ASSERT_EQUAL(ready_calls, 0u);
	teardown();
}

static const struct hl_test tests[] = {
    {"EXTENDED COPY within and across LUs, COPY STATUS", test_copy_within_and_across_lus},
    {"EXTENDED COPY errors", test_copy_errors},
    {"a copy target outside the LUN map is not reachable", test_copy_target_outside_the_map},
    {"a copy target unmapped during the copy", test_copy_target_unmapped_during_copy},
    {"held results are counted per nexus", test_results_held_per_nexus},
    {"OPERATING PARAMETERS, VPD 8F and 3PC", test_operating_parameters_vpd_and_3pc},
    {"EXTENDED COPY ignores a previous READ's state", test_copy_ignores_stale_read_state},
    {NULL, NULL},
};

int main(void)
{
	hl_log_level = HL_LOG_ERR - 1;
	return hl_test_run("scsi-xcopy", tests);
}
