/*
 * pr_ut.c - reservations (src/scsi/pr.c): RESERVE/RELEASE(6/10) and
 * persistent reservations, driven through hl_scsi_cmd_exec by two nexuses.
 */
#include <unistd.h>

#include "scsi_ut_util.h"

enum { WE = 1, EA = 3, WE_RO = 5, EA_RO = 6, WE_AR = 7, EA_AR = 8 };
enum { REG = 0, RESV = 1, REL = 2, CLEAR = 3, PREEMPT = 4, PREEMPT_ABORT = 5, REG_IGNORE = 6 };

static struct tcmd t;

static void pr_out_full(const struct hl_scsi_nexus *n, uint8_t sa, uint8_t scope_type, uint64_t key,
                        uint64_t sa_key, uint8_t byte20, uint32_t plen)
{
	uint8_t cdb[10] = {0x5f, sa, scope_type};
	uint8_t param[24] = {0};

	hl_put_be32(cdb + 5, plen);
	hl_put_be64(param, key);
	hl_put_be64(param + 8, sa_key);
	param[20] = byte20;
	run_full(&t, n, 0, cdb, 10, param, sizeof(param), true);
}

static uint8_t pr_out(const struct hl_scsi_nexus *n, uint8_t sa, uint8_t type, uint64_t key,
                      uint64_t sa_key)
{
	pr_out_full(n, sa, type, key, sa_key, 0, 24);
	return t.cmd.status;
}

static void pr_in(const struct hl_scsi_nexus *n, uint8_t sa, uint8_t *buf, uint16_t alloc)
{
	uint8_t cdb[10] = {0x5e, sa};

	hl_put_be16(cdb + 7, alloc);
	memset(buf, 0, alloc);
	run_full(&t, n, 0, cdb, 10, buf, alloc, false);
	CU_ASSERT_EQUAL(t.cmd.status, HL_SAM_GOOD);
}

static uint8_t simple(const struct hl_scsi_nexus *n, uint8_t op)
{
	uint8_t cdb[16] = {op};

	run_full(&t, n, 0, cdb, 16, NULL, 0, false);
	return t.cmd.status;
}

static uint8_t do_read(const struct hl_scsi_nexus *n)
{
	uint8_t cdb[10], buf[BS];

	cdb_rw10(cdb, 0x28, 0, 1);
	run_full(&t, n, 0, cdb, 10, buf, BS, false);
	return t.cmd.status;
}

static uint8_t do_write(const struct hl_scsi_nexus *n)
{
	uint8_t cdb[10], buf[BS] = {0};

	cdb_rw10(cdb, 0x2a, 0, 1);
	run_full(&t, n, 0, cdb, 10, buf, BS, true);
	return t.cmd.status;
}

/* A fresh LU with the power-on UA consumed by both nexuses. */
static void setup2(void)
{
	lu_setup();
	simple(&nexus_b, 0x00);
}

static bool ua_is(const struct hl_scsi_nexus *n, uint8_t asc, uint8_t ascq)
{
	simple(n, 0x00);
	return sense_is(&t.cmd, HL_SK_UNIT_ATTENTION, asc, ascq);
}

#define CONFLICT HL_SAM_RESERVATION_CONFLICT
#define GOOD     HL_SAM_GOOD

static void test_reserve6_conflicts_for_other_nexus(void)
{
	setup2();
	CU_ASSERT_EQUAL(simple(&nexus_a, 0x16), GOOD);
	CU_ASSERT_EQUAL(simple(&nexus_a, 0x16), GOOD); /* again: still ours */
	CU_ASSERT_EQUAL(simple(&nexus_b, 0x16), CONFLICT);
	CU_ASSERT_EQUAL(do_read(&nexus_b), CONFLICT);
	CU_ASSERT_EQUAL(simple(&nexus_b, 0x00), CONFLICT);
	uint8_t ms[6] = {0x1a, 0, 0x3f, 0, 255, 0}, buf[255];
	run_full(&t, &nexus_b, 0, ms, 6, buf, 255, false);
	CU_ASSERT_EQUAL(t.cmd.status, CONFLICT);
	uint8_t inq[6] = {0x12, 0, 0, 0, 96, 0};
	run_full(&t, &nexus_b, 0, inq, 6, buf, 96, false);
	CU_ASSERT_EQUAL(t.cmd.status, GOOD);
	CU_ASSERT_EQUAL(simple(&nexus_b, 0x17), GOOD); /* not its reservation: no effect */
	CU_ASSERT_EQUAL(do_write(&nexus_b), CONFLICT);
	CU_ASSERT_EQUAL(do_write(&nexus_a), GOOD);
	CU_ASSERT_EQUAL(simple(&nexus_a, 0x57), GOOD); /* RELEASE(10) */
	CU_ASSERT_EQUAL(simple(&nexus_b, 0x56), GOOD); /* RESERVE(10) */
	CU_ASSERT_EQUAL(do_read(&nexus_a), CONFLICT);
	lu_teardown();
}

static void test_reserve6_ends_with_reset_and_nexus_loss(void)
{
	setup2();
	CU_ASSERT_EQUAL(simple(&nexus_a, 0x16), GOOD);
	hl_lu_reset(lu, &nexus_a);
	CU_ASSERT_TRUE(ua_is(&nexus_a, 0x29, 0x03));
	CU_ASSERT_TRUE(ua_is(&nexus_b, 0x29, 0x03));
	CU_ASSERT_EQUAL(simple(&nexus_b, 0x16), GOOD);
	hl_scsi_nexus_gone(&map, &nexus_b);
	CU_ASSERT_EQUAL(simple(&nexus_a, 0x16), GOOD);
	lu_teardown();
}

static void test_register_and_read_keys(void)
{
	uint8_t buf[64];

	setup2();
	pr_in(&nexus_a, 0, buf, sizeof(buf));
	uint32_t gen0 = hl_get_be32(buf);
	CU_ASSERT_EQUAL(hl_get_be32(buf + 4), 0);
	CU_ASSERT_EQUAL(pr_out(&nexus_a, REG, 0, 0, 0x1111), GOOD);
	CU_ASSERT_EQUAL(pr_out(&nexus_b, REG, 0, 0, 0x2222), GOOD);
	pr_in(&nexus_a, 0, buf, sizeof(buf));
	CU_ASSERT_EQUAL(hl_get_be32(buf), gen0 + 2);
	CU_ASSERT_EQUAL(hl_get_be32(buf + 4), 16);
	CU_ASSERT_EQUAL(hl_get_be64(buf + 8), 0x1111);
	CU_ASSERT_EQUAL(hl_get_be64(buf + 16), 0x2222);
	/* REGISTER with the wrong current key conflicts; IGNORE EXISTING does not */
	CU_ASSERT_EQUAL(pr_out(&nexus_a, REG, 0, 0x9999, 0x3333), CONFLICT);
	CU_ASSERT_EQUAL(pr_out(&nexus_a, REG_IGNORE, 0, 0, 0x3333), GOOD);
	CU_ASSERT_EQUAL(pr_out(&nexus_a, REG, 0, 0x3333, 0), GOOD); /* unregister */
	pr_in(&nexus_a, 0, buf, sizeof(buf));
	CU_ASSERT_EQUAL(hl_get_be32(buf), gen0 + 4);
	CU_ASSERT_EQUAL(hl_get_be32(buf + 4), 8);
	CU_ASSERT_EQUAL(hl_get_be64(buf + 8), 0x2222);
	/* an unregistered nexus naming a key conflicts */
	CU_ASSERT_EQUAL(pr_out(&nexus_a, REG, 0, 0x2222, 0x4444), CONFLICT);
	/* allocation length 8: the list is cut, ADDITIONAL LENGTH is not */
	pr_in(&nexus_a, 0, buf, 8);
	CU_ASSERT_EQUAL(t.cmd.data_in_len, 8);
	CU_ASSERT_EQUAL(hl_get_be32(buf + 4), 8);
	lu_teardown();
}

static void test_registration_outlives_the_session(void)
{
	uint8_t buf[64];
	struct hl_scsi_nexus again = nexus_a;

	setup2();
	CU_ASSERT_EQUAL(pr_out(&nexus_a, REG, 0, 0, 0xabc), GOOD);
	CU_ASSERT_EQUAL(pr_out(&nexus_a, RESV, EA, 0xabc, 0), GOOD);
	hl_scsi_nexus_gone(&map, &nexus_a);
	again.id = 77; /* a new session of the same initiator port */
	simple(&again, 0x00);
	CU_ASSERT_EQUAL(do_write(&again), GOOD); /* still the holder */
	CU_ASSERT_EQUAL(do_write(&nexus_b), CONFLICT);
	pr_in(&again, 1, buf, sizeof(buf));
	CU_ASSERT_EQUAL(hl_get_be64(buf + 8), 0xabc);
	CU_ASSERT_EQUAL(buf[21], EA);
	lu_teardown();
}

/* Access of nexus B to a reservation of `type` held through A (SPC-4 table 64). */
static void check_access(uint8_t type, bool reg_read, bool reg_write, bool unreg_read,
                         bool unreg_write)
{
	setup2();
	CU_ASSERT_EQUAL(pr_out(&nexus_a, REG, 0, 0, 0xa), GOOD);
	CU_ASSERT_EQUAL(pr_out(&nexus_b, REG, 0, 0, 0xb), GOOD);
	CU_ASSERT_EQUAL(pr_out(&nexus_a, RESV, type, 0xa, 0), GOOD);
	CU_ASSERT_EQUAL(do_read(&nexus_a), GOOD);
	CU_ASSERT_EQUAL(do_write(&nexus_a), GOOD);
	CU_ASSERT_EQUAL(do_read(&nexus_b), reg_read ? GOOD : CONFLICT);
	CU_ASSERT_EQUAL(do_write(&nexus_b), reg_write ? GOOD : CONFLICT);
	CU_ASSERT_EQUAL(pr_out(&nexus_b, REG, 0, 0xb, 0), GOOD);
	CU_ASSERT_EQUAL(do_read(&nexus_b), unreg_read ? GOOD : CONFLICT);
	CU_ASSERT_EQUAL(do_write(&nexus_b), unreg_write ? GOOD : CONFLICT);
	/* what no reservation blocks */
	CU_ASSERT_EQUAL(simple(&nexus_b, 0x00), GOOD);
	uint8_t rc[10] = {0x25}, buf[8];
	run_full(&t, &nexus_b, 0, rc, 10, buf, 8, false);
	CU_ASSERT_EQUAL(t.cmd.status, GOOD);
	lu_teardown();
}

static void test_access_by_type(void)
{
	check_access(WE, true, false, true, false);
	check_access(EA, false, false, false, false);
	check_access(WE_RO, true, true, true, false);
	check_access(EA_RO, true, true, false, false);
	check_access(WE_AR, true, true, true, false);
	check_access(EA_AR, true, true, false, false);
}

static void test_reserve_rules(void)
{
	setup2();
	CU_ASSERT_EQUAL(pr_out(&nexus_a, RESV, WE, 0, 0), CONFLICT); /* not registered */
	CU_ASSERT_EQUAL(pr_out(&nexus_a, REG, 0, 0, 0xa), GOOD);
	CU_ASSERT_EQUAL(pr_out(&nexus_b, REG, 0, 0, 0xb), GOOD);
	CU_ASSERT_EQUAL(pr_out(&nexus_a, RESV, WE, 0xb, 0), CONFLICT); /* wrong key */
	CU_ASSERT_EQUAL(pr_out(&nexus_a, RESV, WE, 0xa, 0), GOOD);
	CU_ASSERT_EQUAL(pr_out(&nexus_a, RESV, WE, 0xa, 0), GOOD);     /* same again */
	CU_ASSERT_EQUAL(pr_out(&nexus_a, RESV, EA, 0xa, 0), CONFLICT); /* another type */
	CU_ASSERT_EQUAL(pr_out(&nexus_b, RESV, WE, 0xb, 0), CONFLICT); /* not the holder */
	CU_ASSERT_EQUAL(pr_out(&nexus_b, REL, WE, 0xb, 0), GOOD);      /* not the holder: no-op */
	CU_ASSERT_EQUAL(do_write(&nexus_b), CONFLICT);
	pr_out(&nexus_a, REL, EA, 0xa, 0);
	CU_ASSERT_TRUE(sense_is(&t.cmd, HL_SK_ILLEGAL_REQUEST, 0x26, 0x04));
	CU_ASSERT_EQUAL(pr_out(&nexus_a, REL, WE, 0xa, 0), GOOD);
	CU_ASSERT_EQUAL(do_write(&nexus_b), GOOD);
	/* SPC-2 RESERVE conflicts while registrations exist; RELEASE is a no-op */
	CU_ASSERT_EQUAL(simple(&nexus_a, 0x16), CONFLICT);
	CU_ASSERT_EQUAL(simple(&nexus_a, 0x17), GOOD);
	lu_teardown();
}

static void test_release_of_ro_tells_registrants(void)
{
	setup2();
	pr_out(&nexus_a, REG, 0, 0, 0xa);
	pr_out(&nexus_b, REG, 0, 0, 0xb);
	CU_ASSERT_EQUAL(pr_out(&nexus_a, RESV, WE_RO, 0xa, 0), GOOD);
	CU_ASSERT_EQUAL(pr_out(&nexus_a, REL, WE_RO, 0xa, 0), GOOD);
	CU_ASSERT_TRUE(ua_is(&nexus_b, 0x2a, 0x04));
	CU_ASSERT_EQUAL(simple(&nexus_a, 0x00), GOOD);
	lu_teardown();
}

static void test_holder_unregistering(void)
{
	uint8_t buf[64];

	setup2();
	/* a holder of a plain type that unregisters releases the reservation */
	pr_out(&nexus_a, REG, 0, 0, 0xa);
	pr_out(&nexus_b, REG, 0, 0, 0xb);
	pr_out(&nexus_a, RESV, EA, 0xa, 0);
	CU_ASSERT_EQUAL(pr_out(&nexus_a, REG, 0, 0xa, 0), GOOD);
	pr_in(&nexus_b, 1, buf, sizeof(buf));
	CU_ASSERT_EQUAL(hl_get_be32(buf + 4), 0);
	/* all registrants: the reservation stays while any registrant is left */
	pr_out(&nexus_a, REG, 0, 0, 0xa);
	CU_ASSERT_EQUAL(pr_out(&nexus_a, RESV, EA_AR, 0xa, 0), GOOD);
	pr_in(&nexus_b, 1, buf, sizeof(buf));
	CU_ASSERT_EQUAL(hl_get_be32(buf + 4), 16);
	CU_ASSERT_EQUAL(hl_get_be64(buf + 8), 0); /* all registrants: key 0 */
	pr_out(&nexus_a, REG, 0, 0xa, 0);
	pr_in(&nexus_b, 1, buf, sizeof(buf));
	CU_ASSERT_EQUAL(buf[21], EA_AR);
	CU_ASSERT_EQUAL(pr_out(&nexus_b, REL, EA_AR, 0xb, 0), GOOD);
	pr_in(&nexus_b, 1, buf, sizeof(buf));
	CU_ASSERT_EQUAL(hl_get_be32(buf + 4), 0);
	lu_teardown();
}

static void test_clear(void)
{
	uint8_t buf[64];

	setup2();
	pr_out(&nexus_a, REG, 0, 0, 0xa);
	pr_out(&nexus_b, REG, 0, 0, 0xb);
	pr_out(&nexus_a, RESV, EA, 0xa, 0);
	pr_in(&nexus_a, 0, buf, sizeof(buf));
	uint32_t gen = hl_get_be32(buf);
	CU_ASSERT_EQUAL(pr_out(&nexus_b, CLEAR, 0, 0xa, 0), CONFLICT); /* wrong key */
	CU_ASSERT_EQUAL(pr_out(&nexus_b, CLEAR, 0, 0xb, 0), GOOD);
	CU_ASSERT_TRUE(ua_is(&nexus_a, 0x2a, 0x03));
	pr_in(&nexus_a, 0, buf, sizeof(buf));
	CU_ASSERT_EQUAL(hl_get_be32(buf), gen + 1);
	CU_ASSERT_EQUAL(hl_get_be32(buf + 4), 0);
	CU_ASSERT_EQUAL(do_write(&nexus_a), GOOD);
	lu_teardown();
}

static void test_preempt(void)
{
	uint8_t buf[64];

	setup2();
	pr_out(&nexus_a, REG, 0, 0, 0xa);
	pr_out(&nexus_b, REG, 0, 0, 0xb);
	/* no reservation: preempting removes the registration */
	CU_ASSERT_EQUAL(pr_out(&nexus_b, PREEMPT, EA, 0xb, 0x77), CONFLICT); /* no such key */
	pr_out(&nexus_b, PREEMPT, EA, 0xb, 0);
	CU_ASSERT_TRUE(sense_is(&t.cmd, HL_SK_ILLEGAL_REQUEST, 0x26, 0x00));
	CU_ASSERT_EQUAL(pr_out(&nexus_b, PREEMPT, EA, 0xb, 0xa), GOOD);
	CU_ASSERT_TRUE(ua_is(&nexus_a, 0x2a, 0x05));
	pr_in(&nexus_a, 0, buf, sizeof(buf));
	CU_ASSERT_EQUAL(hl_get_be32(buf + 4), 8);
	CU_ASSERT_EQUAL(hl_get_be64(buf + 8), 0xb);
	pr_in(&nexus_a, 1, buf, sizeof(buf));
	CU_ASSERT_EQUAL(hl_get_be32(buf + 4), 0); /* no reservation was made */
	/* preempting the holder takes its reservation, with the new type */
	pr_out(&nexus_a, REG, 0, 0, 0xa);
	pr_out(&nexus_a, RESV, EA, 0xa, 0);
	CU_ASSERT_EQUAL(pr_out(&nexus_b, PREEMPT, WE, 0xb, 0xa), GOOD);
	CU_ASSERT_TRUE(ua_is(&nexus_a, 0x2a, 0x05));
	pr_in(&nexus_a, 1, buf, sizeof(buf));
	CU_ASSERT_EQUAL(hl_get_be64(buf + 8), 0xb);
	CU_ASSERT_EQUAL(buf[21], WE);
	CU_ASSERT_EQUAL(do_write(&nexus_b), GOOD);
	CU_ASSERT_EQUAL(do_write(&nexus_a), CONFLICT);
	lu_teardown();
}

/*
 * PREEMPT AND ABORT names the preempted nexuses for the transport to abort
 * their tasks (hl_scsi_cmd.abort_nexus); PREEMPT and a failed one do not.
 */
static void test_preempt_and_abort_lists_nexuses(void)
{
	setup2();
	pr_out(&nexus_a, REG, 0, 0, 0xa);
	pr_out(&nexus_b, REG, 0, 0, 0xb);
	pr_out(&nexus_a, RESV, WE, 0xa, 0);
	CU_ASSERT_EQUAL(pr_out(&nexus_b, PREEMPT_ABORT, EA, 0xb, 0x77), CONFLICT);
	CU_ASSERT_EQUAL(t.cmd.n_abort_nexus, 0);
	CU_ASSERT_EQUAL(pr_out(&nexus_b, PREEMPT_ABORT, EA, 0xb, 0xa), GOOD);
	CU_ASSERT_EQUAL(t.cmd.n_abort_nexus, 1);
	CU_ASSERT_EQUAL(t.cmd.abort_nexus[0], nexus_a.id);
	CU_ASSERT_FALSE(t.cmd.abort_others);
	CU_ASSERT_TRUE(ua_is(&nexus_a, 0x2a, 0x05));
	/* a plain PREEMPT aborts nothing */
	pr_out(&nexus_a, REG, 0, 0, 0xa);
	CU_ASSERT_EQUAL(pr_out(&nexus_b, PREEMPT, EA, 0xb, 0xa), GOOD);
	CU_ASSERT_EQUAL(t.cmd.n_abort_nexus, 0);
	CU_ASSERT_TRUE(ua_is(&nexus_a, 0x2a, 0x05));
	/* an all-registrants reservation: everyone else is preempted */
	CU_ASSERT_EQUAL(pr_out(&nexus_a, REG, 0, 0, 0xa), GOOD);
	pr_out(&nexus_b, REL, EA, 0xb, 0);
	pr_out(&nexus_b, RESV, WE_AR, 0xb, 0);
	CU_ASSERT_EQUAL(pr_out(&nexus_b, PREEMPT_ABORT, EA, 0xb, 0), GOOD);
	CU_ASSERT_EQUAL(t.cmd.n_abort_nexus, 1);
	CU_ASSERT_EQUAL(t.cmd.abort_nexus[0], nexus_a.id);
	lu_teardown();
}

static void test_preempt_all_registrants(void)
{
	uint8_t buf[64];

	setup2();
	pr_out(&nexus_a, REG, 0, 0, 0xa);
	pr_out(&nexus_b, REG, 0, 0, 0xb);
	pr_out(&nexus_a, RESV, WE_AR, 0xa, 0);
	CU_ASSERT_EQUAL(pr_out(&nexus_b, PREEMPT, EA, 0xb, 0), GOOD);
	pr_in(&nexus_b, 0, buf, sizeof(buf));
	CU_ASSERT_EQUAL(hl_get_be32(buf + 4), 8);
	pr_in(&nexus_b, 1, buf, sizeof(buf));
	CU_ASSERT_EQUAL(hl_get_be64(buf + 8), 0xb);
	CU_ASSERT_EQUAL(buf[21], EA);
	lu_teardown();
}

static void test_pr_out_bad_parameters(void)
{
	setup2();
	pr_out_full(&nexus_a, REG, 0, 0, 0xa, 0, 20);
	CU_ASSERT_TRUE(sense_is(&t.cmd, HL_SK_ILLEGAL_REQUEST, 0x1a, 0x00));
	pr_out_full(&nexus_a, REG, 0, 0, 0xa, 0x01, 24); /* APTPL */
	CU_ASSERT_TRUE(sense_is(&t.cmd, HL_SK_ILLEGAL_REQUEST, 0x26, 0x00));
	pr_out_full(&nexus_a, REG, 0, 0, 0xa, 0x08, 24); /* SPEC_I_PT without its list */
	CU_ASSERT_TRUE(sense_is(&t.cmd, HL_SK_ILLEGAL_REQUEST, 0x1a, 0x00));
	pr_out_full(&nexus_a, REG_IGNORE, 0, 0, 0xa, 0x08, 24); /* SPEC_I_PT: REGISTER only */
	CU_ASSERT_TRUE(sense_is(&t.cmd, HL_SK_ILLEGAL_REQUEST, 0x26, 0x00));
	CU_ASSERT_EQUAL(pr_out(&nexus_a, REG, 0, 0, 0xa), GOOD);
	pr_out(&nexus_a, RESV, 2, 0xa, 0); /* type 2 is obsolete */
	CU_ASSERT_TRUE(sense_is(&t.cmd, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00));
	pr_out(&nexus_a, RESV, 0x10 | WE, 0xa, 0); /* scope 1 */
	CU_ASSERT_TRUE(sense_is(&t.cmd, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00));
	pr_out(&nexus_a, 7, WE, 0xa, 0); /* REGISTER AND MOVE without its TransportID */
	CU_ASSERT_TRUE(sense_is(&t.cmd, HL_SK_ILLEGAL_REQUEST, 0x1a, 0x00));
	pr_out(&nexus_a, 8, WE, 0xa, 0); /* REPLACE LOST RESERVATION */
	CU_ASSERT_TRUE(sense_is(&t.cmd, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00));
	/* fewer data-out bytes than the parameter list */
	uint8_t cdb[10] = {0x5f, REG};
	uint8_t param[24] = {0};
	hl_put_be32(cdb + 5, 24);
	run_full(&t, &nexus_a, 0, cdb, 10, param, 16, true);
	CU_ASSERT_TRUE(sense_is(&t.cmd, HL_SK_ILLEGAL_REQUEST, 0x0e, 0x03));
	lu_teardown();
}

static void test_pr_in_capabilities_and_full_status(void)
{
	uint8_t buf[512];

	setup2();
	pr_in(&nexus_a, 2, buf, sizeof(buf));
	CU_ASSERT_EQUAL(hl_get_be16(buf), 8);
	CU_ASSERT_EQUAL(t.cmd.data_in_len, 8);
	CU_ASSERT_EQUAL(buf[2] & 0x01, 0);    /* PTPL_C */
	CU_ASSERT_EQUAL(buf[2] & 0x1c, 0x1c); /* CRH, SIP_C, ATP_C */
	CU_ASSERT_EQUAL(buf[3] & 0x80, 0x80);
	CU_ASSERT_EQUAL(buf[4], 0xea);
	CU_ASSERT_EQUAL(buf[5], 0x01);
	pr_out(&nexus_a, REG, 0, 0, 0xa);
	pr_out(&nexus_b, REG, 0, 0, 0xb);
	pr_out(&nexus_a, RESV, WE, 0xa, 0);
	pr_in(&nexus_a, 3, buf, sizeof(buf));
	uint32_t len = hl_get_be32(buf + 4);
	CU_ASSERT_EQUAL(t.cmd.data_in_len, 8 + len);
	const uint8_t *d = buf + 8;
	CU_ASSERT_EQUAL(hl_get_be64(d), 0xa);
	CU_ASSERT_EQUAL(d[12] & 1, 1); /* R_HOLDER */
	CU_ASSERT_EQUAL(d[13], WE);
	CU_ASSERT_EQUAL(hl_get_be16(d + 18), 1);
	uint32_t tid = hl_get_be32(d + 20);
	CU_ASSERT_EQUAL(tid % 4, 0);
	CU_ASSERT_EQUAL(d[24], 0x45);
	CU_ASSERT_EQUAL(strcmp((const char *)d + 28, nexus_a.initiator_port), 0);
	d += 24 + tid;
	CU_ASSERT_EQUAL(hl_get_be64(d), 0xb);
	CU_ASSERT_EQUAL(d[12] & 1, 0);
	CU_ASSERT_EQUAL((unsigned)(d + 24 + hl_get_be32(d + 20) - buf), 8 + len);
	/* unknown service action */
	uint8_t cdb[10] = {0x5e, 4, 0, 0, 0, 0, 0, 0, 64, 0};
	run_full(&t, &nexus_a, 0, cdb, 10, buf, 64, false);
	CU_ASSERT_TRUE(sense_is(&t.cmd, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00));
	lu_teardown();
}

/* REGISTER AND MOVE from n to the initiator port `to` on relative port rel. */
static void register_move(const struct hl_scsi_nexus *n, uint64_t key, uint64_t sa_key,
                          const char *to, uint16_t rel, bool unreg)
{
	uint8_t cdb[10] = {0x5f, 7, WE};
	uint8_t param[24 + 4 + 64] = {0};
	size_t len = strlen(to);
	uint32_t tid = (uint32_t)HL_ALIGN_UP(len + 1, 4);

	hl_put_be64(param, key);
	hl_put_be64(param + 8, sa_key);
	param[17] = unreg ? 0x02 : 0;
	hl_put_be16(param + 18, rel);
	hl_put_be32(param + 20, 4 + tid);
	param[24] = 0x45;
	hl_put_be16(param + 26, (uint16_t)tid);
	memcpy(param + 28, to, len);
	hl_put_be32(cdb + 5, 24 + 4 + tid);
	run_full(&t, n, 0, cdb, 10, param, 24 + 4 + tid, true);
}

static void test_register_and_move(void)
{
	uint8_t buf[64];

	setup2();
	CU_ASSERT_EQUAL(pr_out(&nexus_a, REG, 0, 0, 0xa), GOOD);
	/* no reservation: nothing to move */
	register_move(&nexus_a, 0xa, 0xb, nexus_b.initiator_port, 1, false);
	CU_ASSERT_EQUAL(t.cmd.status, CONFLICT);
	CU_ASSERT_EQUAL(pr_out(&nexus_a, RESV, EA, 0xa, 0), GOOD);
	CU_ASSERT_EQUAL(do_read(&nexus_b), CONFLICT);
	/* a wrong key, a zero service action key, moving to itself */
	register_move(&nexus_a, 0xc, 0xb, nexus_b.initiator_port, 1, false);
	CU_ASSERT_EQUAL(t.cmd.status, CONFLICT);
	register_move(&nexus_a, 0xa, 0, nexus_b.initiator_port, 1, false);
	CU_ASSERT_TRUE(sense_is(&t.cmd, HL_SK_ILLEGAL_REQUEST, 0x26, 0x00));
	register_move(&nexus_a, 0xa, 0xb, nexus_a.initiator_port, 1, false);
	CU_ASSERT_TRUE(sense_is(&t.cmd, HL_SK_ILLEGAL_REQUEST, 0x26, 0x00));
	/* B, not registered yet, gets key 0xb and the reservation; A stays registered */
	pr_in(&nexus_a, 0, buf, sizeof(buf));
	uint32_t gen = hl_get_be32(buf);
	register_move(&nexus_a, 0xa, 0xb, nexus_b.initiator_port, 1, false);
	CU_ASSERT_EQUAL(t.cmd.status, GOOD);
	pr_in(&nexus_a, 1, buf, sizeof(buf));
	CU_ASSERT_EQUAL(hl_get_be32(buf), gen + 1);
	CU_ASSERT_EQUAL(hl_get_be64(buf + 8), 0xb);
	CU_ASSERT_EQUAL(buf[21], EA);
	CU_ASSERT_EQUAL(do_read(&nexus_b), GOOD);
	CU_ASSERT_EQUAL(do_read(&nexus_a), CONFLICT);
	pr_in(&nexus_b, 0, buf, sizeof(buf));
	CU_ASSERT_EQUAL(hl_get_be32(buf + 4), 16);
	/* A is no longer the holder */
	register_move(&nexus_a, 0xa, 0xa, nexus_b.initiator_port, 1, false);
	CU_ASSERT_EQUAL(t.cmd.status, CONFLICT);
	/* back to A with UNREG: B's registration goes */
	register_move(&nexus_b, 0xb, 0xa2, nexus_a.initiator_port, 1, true);
	CU_ASSERT_EQUAL(t.cmd.status, GOOD);
	pr_in(&nexus_a, 0, buf, sizeof(buf));
	CU_ASSERT_EQUAL(hl_get_be32(buf + 4), 8);
	CU_ASSERT_EQUAL(hl_get_be64(buf + 8), 0xa2);
	CU_ASSERT_EQUAL(do_read(&nexus_a), GOOD);
	CU_ASSERT_EQUAL(do_read(&nexus_b), CONFLICT);
	lu_teardown();
}

/* REGISTER from n with SPEC_I_PT naming the initiator ports ports[0..n_ports) (format 01b). */
static void register_spec(const struct hl_scsi_nexus *n, uint64_t sa_key, const char *const *ports,
                          unsigned n_ports, bool all_tg_pt)
{
	uint8_t cdb[10] = {0x5f, REG};
	uint8_t param[28 + 4 * 68] = {0};
	uint32_t off = 28;

	hl_put_be64(param + 8, sa_key);
	param[20] = (uint8_t)(0x08 | (all_tg_pt ? 0x04 : 0));
	for (unsigned i = 0; i < n_ports; i++) {
		size_t len = strlen(ports[i]);
		uint32_t tid = (uint32_t)HL_ALIGN_UP(len + 1, 4);
		param[off] = 0x45;
		hl_put_be16(param + off + 2, (uint16_t)tid);
		memcpy(param + off + 4, ports[i], len);
		off += 4 + tid;
	}
	hl_put_be32(param + 24, off - 28);
	hl_put_be32(cdb + 5, off);
	run_full(&t, n, 0, cdb, 10, param, off, true);
}

static void test_register_spec_i_pt(void)
{
	static const struct hl_scsi_port port2 = {.name = "t,0x2", .rel_port_id = 2, .tpg_id = 2};
	struct hl_scsi_nexus b2 = nexus_b;
	const char *b[] = {nexus_b.initiator_port};
	const char *twice[] = {"iqn.2026-11.test:c,i,0x000000000003",
	                       "iqn.2026-11.test:c,i,0x000000000003"};
	uint8_t buf[512];

	setup2();
	b2.id = 3;
	b2.port = &port2;
	simple(&b2, 0x00);
	/* A registers itself and B (through A's port) with one command */
	register_spec(&nexus_a, 0xab, b, 1, false);
	CU_ASSERT_EQUAL(t.cmd.status, GOOD);
	pr_in(&nexus_a, 0, buf, sizeof(buf));
	CU_ASSERT_EQUAL(hl_get_be32(buf + 4), 16);
	CU_ASSERT_EQUAL(hl_get_be64(buf + 16), 0xab);
	CU_ASSERT_EQUAL(pr_out(&nexus_b, RESV, WE_RO, 0xab, 0), GOOD); /* B is a registrant */
	CU_ASSERT_EQUAL(do_write(&b2), CONFLICT); /* through another port B is not */
	CU_ASSERT_EQUAL(do_write(&nexus_b), GOOD);
	/* a registered nexus may not name others; a list may not name a registered nexus (here the
	 * issuer itself, B through port 2) */
	register_spec(&nexus_a, 0xac, b, 1, false);
	CU_ASSERT_TRUE(sense_is(&t.cmd, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00));
	register_spec(&b2, 0xb2, b, 1, false);
	CU_ASSERT_TRUE(sense_is(&t.cmd, HL_SK_ILLEGAL_REQUEST, 0x26, 0x00));
	/* all or nothing: a port named twice registers nobody, the issuer neither */
	register_spec(&b2, 0xb2, twice, 2, false);
	CU_ASSERT_TRUE(sense_is(&t.cmd, HL_SK_ILLEGAL_REQUEST, 0x26, 0x00));
	pr_in(&nexus_a, 0, buf, sizeof(buf));
	CU_ASSERT_EQUAL(hl_get_be32(buf + 4), 16);
	/* with ALL_TG_PT the named port is registered on every target port */
	register_spec(&b2, 0xc2, twice, 1, true);
	CU_ASSERT_EQUAL(t.cmd.status, GOOD);
	pr_in(&nexus_a, 3, buf, sizeof(buf));
	const uint8_t *d = buf + 8;
	for (int i = 0; i < 3; i++)
		d += 24 + hl_get_be32(d + 20);
	CU_ASSERT_EQUAL(hl_get_be64(d), 0xc2);
	CU_ASSERT_EQUAL(d[12] & 0x02, 0x02); /* ALL_TG_PT */
	CU_ASSERT_EQUAL(strcmp((const char *)d + 28, twice[0]), 0);
	/* a TransportID that is not iSCSI's */
	uint8_t cdb[10] = {0x5f, REG}, param[52] = {0};
	hl_put_be64(param + 8, 0x77);
	param[20] = 0x08;
	hl_put_be32(param + 24, 24);
	param[28] = 0x41; /* protocol 1 */
	hl_put_be16(param + 30, 20);
	hl_put_be32(cdb + 5, sizeof(param));
	run_full(&t, &nexus_a, 0, cdb, 10, param, sizeof(param), true);
	CU_ASSERT_TRUE(sense_is(&t.cmd, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00)); /* A: registered */
	struct hl_scsi_nexus c = nexus_b;
	c.id = 9;
	strcpy(c.initiator_port, "iqn.2026-11.test:d,i,0x000000000009");
	simple(&c, 0x00);
	run_full(&t, &c, 0, cdb, 10, param, sizeof(param), true);
	CU_ASSERT_TRUE(sense_is(&t.cmd, HL_SK_ILLEGAL_REQUEST, 0x26, 0x00));
	/* the list's length must match the parameter list length */
	hl_put_be32(param + 24, 20);
	run_full(&t, &c, 0, cdb, 10, param, sizeof(param), true);
	CU_ASSERT_TRUE(sense_is(&t.cmd, HL_SK_ILLEGAL_REQUEST, 0x26, 0x00));
	lu_teardown();
}

/* A fresh LU (same identity as test_cfg) keeping its PR state in dir. */
static void setup_state(const char *dir)
{
	struct hl_lu_config cfg = test_cfg();

	cfg.state_dir = dir;
	lu_setup_cfg(cfg, (uint64_t)NBLOCKS * BS, 0);
	simple(&nexus_a, 0x00);
	simple(&nexus_b, 0x00);
}

static void test_aptpl_survives_restart(void)
{
	char dir[] = "/tmp/hl_pr_ut.XXXXXX", path[128];
	uint8_t buf[512];

	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
	setup_state(dir);
	pr_in(&nexus_a, 2, buf, 8);
	CU_ASSERT_EQUAL(buf[2] & 0x01, 0x01); /* PTPL_C */
	CU_ASSERT_EQUAL(buf[3] & 0x01, 0);    /* PTPL_A */
	pr_out_full(&nexus_a, REG, 0, 0, 0xa, 0x01, 24);
	CU_ASSERT_EQUAL(t.cmd.status, GOOD);
	pr_out_full(&nexus_b, REG_IGNORE, 0, 0, 0xb, 0x01, 24);
	CU_ASSERT_EQUAL(t.cmd.status, GOOD);
	CU_ASSERT_EQUAL(pr_out(&nexus_a, RESV, WE_RO, 0xa, 0), GOOD);
	CU_ASSERT_EQUAL(do_write(&nexus_b), GOOD); /* registrants only: B may write */
	pr_in(&nexus_a, 2, buf, 8);
	CU_ASSERT_EQUAL(buf[3] & 0x01, 0x01); /* PTPL_A */
	pr_in(&nexus_a, 0, buf, sizeof(buf));
	uint32_t gen = hl_get_be32(buf);
	snprintf(path, sizeof(path), "%s/pr-606162636465666768696a6b6c6d6e6f", dir);
	CU_ASSERT_EQUAL(access(path, R_OK), 0);
	lu_teardown();

	/* "restart": a new LU with the same identity and state_dir */
	setup_state(dir);
	pr_in(&nexus_a, 0, buf, sizeof(buf));
	CU_ASSERT_EQUAL(hl_get_be32(buf), gen);
	CU_ASSERT_EQUAL(hl_get_be32(buf + 4), 16);
	CU_ASSERT_EQUAL(hl_get_be64(buf + 8), 0xa);
	CU_ASSERT_EQUAL(hl_get_be64(buf + 16), 0xb);
	pr_in(&nexus_b, 1, buf, sizeof(buf));
	CU_ASSERT_EQUAL(hl_get_be32(buf + 4), 16);
	CU_ASSERT_EQUAL(hl_get_be64(buf + 8), 0xa);
	CU_ASSERT_EQUAL(buf[21], WE_RO);
	CU_ASSERT_EQUAL(do_write(&nexus_a), GOOD);
	pr_out(&nexus_b, REG, 0, 0xb, 0); /* B unregisters (APTPL 0): now a stranger */
	CU_ASSERT_EQUAL(t.cmd.status, GOOD);
	CU_ASSERT_EQUAL(do_write(&nexus_b), CONFLICT);
	/* the last APTPL was 0: the state file is gone, nothing survives the next restart */
	CU_ASSERT_NOT_EQUAL(access(path, F_OK), 0);
	lu_teardown();
	setup_state(dir);
	pr_in(&nexus_a, 0, buf, sizeof(buf));
	CU_ASSERT_EQUAL(hl_get_be32(buf + 4), 0);
	CU_ASSERT_EQUAL(do_write(&nexus_b), GOOD);
	lu_teardown();

	/* a damaged file is ignored, not fatal */
	FILE *f = fopen(path, "w");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	fputs("hotlun-pr 1\ngeneration 3\ntype 1 7\nreg zz\n", f);
	fclose(f);
	setup_state(dir);
	pr_in(&nexus_a, 1, buf, sizeof(buf));
	CU_ASSERT_EQUAL(hl_get_be32(buf + 4), 0);
	CU_ASSERT_EQUAL(do_write(&nexus_b), GOOD);
	lu_teardown();
	unlink(path);
	rmdir(dir);
}

static const struct hl_test tests[] = {
    {"RESERVE(6/10) conflicts for another nexus", test_reserve6_conflicts_for_other_nexus},
    {"RESERVE ends with LUN reset and nexus loss", test_reserve6_ends_with_reset_and_nexus_loss},
    {"REGISTER and READ KEYS", test_register_and_read_keys},
    {"registration outlives the session", test_registration_outlives_the_session},
    {"access by reservation type", test_access_by_type},
    {"RESERVE/RELEASE rules", test_reserve_rules},
    {"releasing an RO reservation sets a UA", test_release_of_ro_tells_registrants},
    {"holder unregistering", test_holder_unregistering},
    {"CLEAR", test_clear},
    {"PREEMPT", test_preempt},
    {"PREEMPT of an all-registrants reservation", test_preempt_all_registrants},
    {"PREEMPT AND ABORT lists the preempted nexuses", test_preempt_and_abort_lists_nexuses},
    {"PR OUT parameter errors", test_pr_out_bad_parameters},
    {"PR IN capabilities and full status", test_pr_in_capabilities_and_full_status},
    {"APTPL: the PR state survives a restart", test_aptpl_survives_restart},
    {"REGISTER AND MOVE", test_register_and_move},
    {"REGISTER with SPEC_I_PT", test_register_spec_i_pt},
    {NULL, NULL},
};

int main(void)
{
	hl_log_level = HL_LOG_ERR - 1;
	return hl_test_run("scsi-pr", tests);
}
