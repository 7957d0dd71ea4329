/*
 * scsi_ut_util.h - what the scsi unit tests share: an LU at LUN 0 over the
 * fake origin, two nexuses on one target port, and run(), which executes
 * one CDB through hl_scsi_cmd_exec, drains the origin and checks that done()
 * ran exactly once.
 */
#ifndef HL_SCSI_UT_UTIL_H
#define HL_SCSI_UT_UTIL_H

#include "hl_test.h"

#include "fake_origin.h"
#include "hotlun/log.h"
#include "hotlun/scsi.h"
#include "scsi/scsi_internal.h"

#define BS      512u
#define NBLOCKS 8192u /* 4 MiB */

static const struct hl_scsi_port port = {
    .name = "iqn.2026-11.io.hotlun:t0,t,0x0001",
    .rel_port_id = 1,
    .tpg_id = 1,
};
static struct hl_scsi_nexus nexus_a HL_UNUSED = {
    .id = 1, .initiator_port = "iqn.2026-11.test:a,i,0x000000000001", .port = &port};
static struct hl_scsi_nexus nexus_b HL_UNUSED = {
    .id = 2, .initiator_port = "iqn.2026-11.test:b,i,0x000000000002", .port = &port};

static struct hl_lu *lu;
static struct hl_origin *origin;
static struct hl_scsi_lun_map map;

struct tcmd {
	struct hl_scsi_cmd cmd;
	unsigned done;
};

static inline void tcmd_done(struct hl_scsi_cmd *cmd)
{
	hl_container_of(cmd, struct tcmd, cmd)->done++;
}

static inline struct hl_lu_config test_cfg(void)
{
	struct hl_lu_config cfg = {.name = "d0", .block_size = BS, .write_cache = true};
	for (int i = 0; i < 16; i++)
		cfg.naa[i] = (uint8_t)(0x60 + i);
	strcpy(cfg.serial, "HL0123456789");
	return cfg;
}

/* A fresh LU at LUN 0 whose first nexus-A unit attention has been consumed. */
static inline void lu_setup_cfg(struct hl_lu_config cfg, uint64_t size, uint32_t phys)
{
	memset(&map, 0, sizeof(map));
	origin = fake_origin_new(size, true);
	CU_ASSERT_PTR_NOT_NULL_FATAL(origin);
	origin->phys_block_size = phys;
	CU_ASSERT_EQUAL_FATAL(hl_lu_create(&cfg, origin, &lu), 0);
	map.lu[0] = lu;
}

static inline void lu_teardown(void)
{
	hl_lu_destroy(lu);
	lu = NULL;
	origin = NULL;
}

/* Run one CDB on LUN `lun` for `nexus`; buf is data-out (out=true) or data-in room. */
static inline void run_full(struct tcmd *t, const struct hl_scsi_nexus *nexus, uint64_t lun,
                            const uint8_t *cdb, unsigned cdb_len, uint8_t *buf, uint32_t len,
                            bool out)
{
	memset(t, 0, sizeof(*t));
	t->cmd.map = &map;
	t->cmd.lun = lun;
	t->cmd.lu = lun < HL_SCSI_MAX_LUNS ? map.lu[lun] : NULL;
	t->cmd.nexus = nexus;
	memcpy(t->cmd.cdb, cdb, cdb_len);
	t->cmd.cdb_len = 16 > cdb_len ? 16 : (uint8_t)cdb_len;
	t->cmd.data = buf;
	t->cmd.data_len = len;
	t->cmd.data_out = out && len;
	t->cmd.data_in = !out && len;
	t->cmd.done = tcmd_done;
	hl_scsi_cmd_exec(&t->cmd);
	if (origin)
		fake_drain(origin);
	CU_ASSERT_EQUAL(t->done, 1);
}

/* Start one CDB for nexus A on LUN 0 without completing any I/O. */
static inline void start(struct tcmd *t, const uint8_t *cdb, unsigned cdb_len, uint8_t *buf,
                         uint32_t len, bool out)
{
	memset(t, 0, sizeof(*t));
	t->cmd.map = &map;
	t->cmd.lun = 0;
	t->cmd.lu = map.lu[0];
	t->cmd.nexus = &nexus_a;
	memcpy(t->cmd.cdb, cdb, cdb_len);
	t->cmd.cdb_len = 16;
	t->cmd.data = buf;
	t->cmd.data_len = len;
	t->cmd.data_out = out && len;
	t->cmd.data_in = !out && len;
	t->cmd.done = tcmd_done;
	hl_scsi_cmd_exec(&t->cmd);
}

static inline void run(struct tcmd *t, const uint8_t *cdb, unsigned cdb_len, uint8_t *buf,
                       uint32_t len, bool out)
{
	run_full(t, &nexus_a, 0, cdb, cdb_len, buf, len, out);
}

static inline void lu_setup(void)
{
	struct tcmd t;
	uint8_t tur[6] = {0};

	lu_setup_cfg(test_cfg(), (uint64_t)NBLOCKS * BS, 0);
	run(&t, tur, 6, NULL, 0, false); /* consumes POWER ON for nexus A */
}

static inline bool sense_is(const struct hl_scsi_cmd *c, uint8_t key, uint8_t asc, uint8_t ascq)
{
	return c->status == HL_SAM_CHECK_CONDITION && c->sense_len >= 14 &&
	       (c->sense[2] & 0x0f) == key && c->sense[12] == asc && c->sense[13] == ascq;
}

#define ASSERT_GOOD(t)           CU_ASSERT_EQUAL((t).cmd.status, HL_SAM_GOOD)
#define ASSERT_SENSE(t, k, a, q) CU_ASSERT_TRUE(sense_is(&(t).cmd, k, a, q))

static inline void cdb_rw10(uint8_t *cdb, uint8_t op, uint32_t lba, uint16_t n)
{
	memset(cdb, 0, 10);
	cdb[0] = op;
	hl_put_be32(cdb + 2, lba);
	hl_put_be16(cdb + 7, n);
}

static inline void cdb_rw16(uint8_t *cdb, uint8_t op, uint64_t lba, uint32_t n)
{
	memset(cdb, 0, 16);
	cdb[0] = op;
	hl_put_be64(cdb + 2, lba);
	hl_put_be32(cdb + 10, n);
}

/* COMPARE AND WRITE of n blocks at lba */
static inline void cdb_caw(uint8_t *cdb, uint64_t lba, uint8_t n)
{
	memset(cdb, 0, 16);
	cdb[0] = 0x89;
	hl_put_be64(cdb + 2, lba);
	cdb[13] = n;
}

static inline uint8_t *medium(void)
{
	return fake_of(origin)->mem;
}

#endif
