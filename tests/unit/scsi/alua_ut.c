/*
 * alua_ut.c - asymmetric logical unit access with an access provider
 * (hl_lu_set_access): REPORT TARGET PORT GROUPS from the provider's groups,
 * the commands each state of the asking port's group refuses and with
 * which sense, ASYMMETRIC ACCESS STATE CHANGED, SET TARGET PORT GROUPS
 * reaching the provider, hl_lu_busy, and an LU without provider unchanged.
 * The provider is a fake whose states the tests set.
 */
#include "scsi_ut_util.h"

#include <stdatomic.h>
#include <unistd.h>

#include "hotlun/event.h"

/* ---- the fake provider: gateways 1 and 2 ---- */

struct fake_access {
	struct hl_alua_group g[HL_ALUA_GROUPS_MAX];
	unsigned n;
	int set_rc; /* what set() returns */
	unsigned n_set;
	struct {
		uint16_t via, tpg;
		enum hl_alua_state state;
	} set[8];
	unsigned n_state_calls;
	bool not_serving; /* serving(): the lease ran out */
	uint8_t tt;       /* transition_time(): what it says now */
	void *tt_arg;     /* the arg it was last called with */
};

static struct fake_access fa;

static unsigned fa_groups(void *arg, struct hl_alua_group *g, unsigned max)
{
	struct fake_access *f = arg;
	unsigned n = HL_MIN(f->n, max);

	memcpy(g, f->g, n * sizeof(*g));
	return n;
}

static enum hl_alua_state fa_state(void *arg, uint16_t tpg)
{
	struct fake_access *f = arg;

	f->n_state_calls++;
	for (unsigned i = 0; i < f->n; i++) {
		if (f->g[i].id == tpg)
			return f->g[i].state;
	}
	return HL_ALUA_UNAVAILABLE;
}

static int fa_set(void *arg, uint16_t via, uint16_t tpg, enum hl_alua_state state)
{
	struct fake_access *f = arg;

	if (f->n_set < HL_ARRAY_SIZE(f->set)) {
		f->set[f->n_set].via = via;
		f->set[f->n_set].tpg = tpg;
		f->set[f->n_set].state = state;
	}
	f->n_set++;
	return f->set_rc;
}

static bool fa_serving(void *arg)
{
	return !((struct fake_access *)arg)->not_serving;
}

static const struct hl_lu_access fa_ops = {
    .groups = fa_groups,
    .state = fa_state,
    .set = fa_set,
    .serving = fa_serving,
    .transition_time_s = 5,
};

/* this gateway (1) through portal groups 1 and 2, as iscsi names them: (1 << 8) | TPGT */
static const struct hl_scsi_port gw1_t1 = {
    .name = "iqn.2026-11.io.hotlun:t0,t,0x0001", .rel_port_id = 0x0101, .tpg_id = 1};
static const struct hl_scsi_port gw1_t2 = {
    .name = "iqn.2026-11.io.hotlun:t0,t,0x0002", .rel_port_id = 0x0102, .tpg_id = 1};
static struct hl_scsi_nexus nx1 = {
    .id = 11, .initiator_port = "iqn.2026-11.test:h,i,0x000000000011", .port = &gw1_t1};
static struct hl_scsi_nexus nx2 = {
    .id = 12, .initiator_port = "iqn.2026-11.test:h,i,0x000000000012", .port = &gw1_t2};

/* An LU with the fake provider: group 1 (ours) `mine`, group 2 `other`; nx1 past POWER ON */
static void alua_setup(enum hl_alua_state mine, enum hl_alua_state other)
{
	struct tcmd t;
	uint8_t inq[6] = {0x12, 0, 0, 0, 36, 0}, buf[36];
	uint8_t rs[6] = {0x03, 0, 0, 0, 18, 0};

	memset(&fa, 0, sizeof(fa));
	fa.n = 2;
	fa.g[0] = (struct hl_alua_group){.id = 1, .state = mine, .pref = true, .status = 2};
	fa.g[1] = (struct hl_alua_group){.id = 2, .state = other, .pref = false, .status = 0};
	lu_setup_cfg(test_cfg(), (uint64_t)NBLOCKS * BS, 0);
	hl_lu_set_access(lu, &fa_ops, &fa);
	/* REQUEST SENSE runs in every state and reports the POWER ON unit attention */
	run_full(&t, &nx1, 0, inq, 6, buf, 36, false);
	run_full(&t, &nx1, 0, rs, 6, buf, 18, false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(buf[12], 0x29);
}

static void set_mine(enum hl_alua_state st)
{
	fa.g[0].state = st;
}

static void rtpg_cdb(uint8_t *cdb, bool extended, uint32_t alloc)
{
	memset(cdb, 0, 12);
	cdb[0] = 0xa3;
	cdb[1] = extended ? 0x2a : 0x0a;
	hl_put_be32(cdb + 6, alloc);
}

static void stpg_cdb(uint8_t *cdb, uint32_t plen)
{
	memset(cdb, 0, 12);
	cdb[0] = 0xa4;
	cdb[1] = 0x0a;
	hl_put_be32(cdb + 6, plen);
}

/* Run one command on LUN 0 for nx1 and expect GOOD. */
static void expect_good(const uint8_t *cdb, unsigned len, uint8_t *buf, uint32_t buf_len)
{
	struct tcmd t;

	run_full(&t, &nx1, 0, cdb, len, buf, buf_len, false);
	ASSERT_GOOD(t);
}

static void expect_not_ready(const uint8_t *cdb, unsigned len, uint8_t *buf, uint32_t buf_len,
                             uint8_t ascq)
{
	struct tcmd t;

	run_full(&t, &nx1, 0, cdb, len, buf, buf_len, false);
	ASSERT_SENSE(t, HL_SK_NOT_READY, 0x04, ascq);
}

/* ---- no provider: today's behaviour ---- */

static void test_no_provider_unchanged(void)
{
	struct tcmd t;
	uint8_t inq[6] = {0x12, 0, 0, 0, 96, 0};
	uint8_t rtpg[12], stpg[12], rsoc[12] = {0xa3, 0x0c, 0x02, 0xa4, 0, 0x0a, 0, 0, 1, 0};
	uint8_t buf[256], par[8] = {0, 0, 0, 0, 0x00, 0, 0, 2};

	lu_setup();
	run(&t, inq, 6, buf, 96, false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(buf[5] & 0x30, 0x10); /* TPGS 01b */
	rtpg_cdb(rtpg, true, sizeof(buf));
	run(&t, rtpg, 12, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(hl_get_be32(buf), 4 + 12);
	CU_ASSERT_EQUAL(buf[5], 0);    /* no transition time */
	CU_ASSERT_EQUAL(buf[8], 0x00); /* active/optimized, no PREF */
	CU_ASSERT_EQUAL(buf[9], 0x01); /* AO_SUP only */
	CU_ASSERT_EQUAL(hl_get_be16(buf + 10), 1);
	CU_ASSERT_EQUAL(buf[15], 1);
	CU_ASSERT_EQUAL(hl_get_be16(buf + 18), 1);
	/* SET TARGET PORT GROUPS is not offered */
	stpg_cdb(stpg, sizeof(par));
	run(&t, stpg, 12, par, sizeof(par), true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x20, 0x00);
	run(&t, rsoc, 12, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(buf[1] & 7, 1); /* not supported */
	lu_teardown();
}

/* ---- REPORT TARGET PORT GROUPS, INQUIRY ---- */

/* The numbering iscsi names its sessions' ports with and RTPG names peers' ports with. */
static void test_port_ids(void)
{
	uint16_t rel, tpg;

	hl_scsi_port_ids(0, 3, &rel, &tpg); /* a lone gateway: the TPGT */
	CU_ASSERT_EQUAL(rel, 3);
	CU_ASSERT_EQUAL(tpg, 3);
	hl_scsi_port_ids(0, 0, &rel, &tpg); /* 0 is reserved for both */
	CU_ASSERT_EQUAL(rel, 1);
	CU_ASSERT_EQUAL(tpg, 1);
	hl_scsi_port_ids(2, 3, &rel, &tpg);
	CU_ASSERT_EQUAL(rel, 0x0203);
	CU_ASSERT_EQUAL(tpg, 2);
	hl_scsi_port_ids(255, 0x1ff, &rel, &tpg); /* only the TPGT's low byte */
	CU_ASSERT_EQUAL(rel, 0xffff);
	CU_ASSERT_EQUAL(tpg, 255);
	/* the ports of the fake nexuses below are numbered so */
	hl_scsi_port_ids(1, 2, &rel, &tpg);
	CU_ASSERT_EQUAL(rel, gw1_t2.rel_port_id);
	CU_ASSERT_EQUAL(tpg, gw1_t2.tpg_id);
}

static uint8_t fa_transition_time(void *arg)
{
	((struct fake_access *)arg)->tt_arg = arg;
	return ((struct fake_access *)arg)->tt;
}

/* A provider whose transition time changes (owner.c: a peer's longer lease). */
static const struct hl_lu_access fa_tt_ops = {
    .groups = fa_groups,
    .state = fa_state,
    .set = fa_set,
    .serving = fa_serving,
    .transition_time = fa_transition_time,
    .transition_time_s = 5, /* not used: the op wins */
};

/* RTPG's extended header reads the provider's transition time at each call. */
static void test_rtpg_transition_time_changes(void)
{
	struct tcmd t;
	uint8_t cdb[12], buf[256];

	alua_setup(HL_ALUA_STANDBY, HL_ALUA_AO);
	hl_lu_set_access(lu, &fa_tt_ops, &fa);
	fa.tt = 8;
	rtpg_cdb(cdb, true, sizeof(buf));
	run_full(&t, &nx1, 0, cdb, 12, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(buf[4], 0x10);
	CU_ASSERT_EQUAL(buf[5], 8);
	CU_ASSERT_PTR_EQUAL(fa.tt_arg, &fa);
	fa.tt = 12; /* the provider saw a peer with a longer lease */
	run_full(&t, &nx1, 0, cdb, 12, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(buf[5], 12);
	lu_teardown();
}

static void test_rtpg_two_groups(void)
{
	struct tcmd t;
	uint8_t cdb[12], tur[6] = {0};
	uint8_t buf[256];

	alua_setup(HL_ALUA_AO, HL_ALUA_STANDBY);
	/* a second nexus of this gateway, through portal group 2 */
	run_full(&t, &nx2, 0, tur, 6, NULL, 0, false);
	rtpg_cdb(cdb, true, sizeof(buf));
	memset(buf, 0xee, sizeof(buf));
	run_full(&t, &nx1, 0, cdb, 12, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	/* extended header, group 1 with two ports, group 2 with one */
	CU_ASSERT_EQUAL(hl_get_be32(buf), 4 + (8 + 2 * 4) + (8 + 4));
	CU_ASSERT_EQUAL(t.cmd.data_in_len, 8 + 16 + 12);
	CU_ASSERT_EQUAL(buf[4], 0x10); /* format type 001b */
	CU_ASSERT_EQUAL(buf[5], 5);    /* implicit transition time */
	uint8_t *g = buf + 8;
	CU_ASSERT_EQUAL(g[0], 0x80 | HL_ALUA_AO); /* PREF */
	CU_ASSERT_EQUAL(g[1], 0x8f);              /* T_SUP U_SUP S_SUP AN_SUP AO_SUP */
	CU_ASSERT_EQUAL(hl_get_be16(g + 2), 1);
	CU_ASSERT_EQUAL(g[5], 2); /* status: implicit */
	CU_ASSERT_EQUAL(g[7], 2);
	CU_ASSERT_EQUAL(hl_get_be16(g + 10), 0x0101);
	CU_ASSERT_EQUAL(hl_get_be16(g + 14), 0x0102);
	g += 16;
	CU_ASSERT_EQUAL(g[0], HL_ALUA_STANDBY);
	CU_ASSERT_EQUAL(g[1], 0x8f);
	CU_ASSERT_EQUAL(hl_get_be16(g + 2), 2);
	CU_ASSERT_EQUAL(g[5], 0);
	CU_ASSERT_EQUAL(g[7], 1);
	/* the other gateway's twin of the asking port: (2 << 8) | TPGT 1 */
	CU_ASSERT_EQUAL(hl_get_be16(g + 10), 0x0201);
	/* asked through portal group 2: the twin follows the asking port */
	run_full(&t, &nx2, 0, cdb, 12, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(hl_get_be16(buf + 8 + 16 + 10), 0x0202);
	/* the states are read at each call: a change shows at once */
	set_mine(HL_ALUA_TRANSITIONING);
	fa.g[1].state = HL_ALUA_AO;
	rtpg_cdb(cdb, false, sizeof(buf));
	run_full(&t, &nx1, 0, cdb, 12, buf, sizeof(buf), false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(hl_get_be32(buf), 16 + 12);
	CU_ASSERT_EQUAL(buf[4] & 0x0f, HL_ALUA_TRANSITIONING);
	CU_ASSERT_EQUAL(buf[4 + 16] & 0x0f, HL_ALUA_AO);
	lu_teardown();
}

static void test_inquiry_with_provider(void)
{
	uint8_t inq[6] = {0x12, 0, 0, 0, 96, 0}, vpd[6] = {0x12, 1, 0x83, 0, 255, 0};
	uint8_t buf[256];

	alua_setup(HL_ALUA_STANDBY, HL_ALUA_AO);
	expect_good(inq, 6, buf, 96);
	CU_ASSERT_EQUAL(buf[5] & 0x30, 0x30); /* TPGS 11b: implicit and explicit */
	CU_ASSERT_EQUAL(buf[0], 0x00);
	/* VPD 83: relative port and group designators name this gateway's port */
	expect_good(vpd, 6, buf, sizeof(buf));
	CU_ASSERT_EQUAL(buf[0], 0x00);
	CU_ASSERT_EQUAL(buf[4 + 20 + 1] & 0x0f, 0x4);
	CU_ASSERT_EQUAL(hl_get_be16(buf + 4 + 20 + 6), 0x0101);
	CU_ASSERT_EQUAL(buf[4 + 28 + 1] & 0x0f, 0x5);
	CU_ASSERT_EQUAL(hl_get_be16(buf + 4 + 28 + 6), 1);
	/* unavailable: peripheral qualifier 001b (SPC-4 5.15.2.4.5) */
	set_mine(HL_ALUA_UNAVAILABLE);
	expect_good(inq, 6, buf, 96);
	CU_ASSERT_EQUAL(buf[0], 0x20);
	expect_good(vpd, 6, buf, sizeof(buf));
	CU_ASSERT_EQUAL(buf[0], 0x20);
	lu_teardown();
}

/* ---- gating by state ---- */

static uint8_t cdb_tur[6] = {0};
static uint8_t cdb_inq[6] = {0x12, 0, 0, 0, 96, 0};
static uint8_t cdb_rs[6] = {0x03, 0, 0, 0, 18, 0};
static uint8_t cdb_rl[12] = {0xa0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0};
static uint8_t cdb_rtpg[12] = {0xa3, 0x0a, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0};
static uint8_t cdb_rsoc[12] = {0xa3, 0x0c, 0x01, 0x28, 0, 0, 0, 0, 1, 0, 0, 0};
static uint8_t cdb_ms6[6] = {0x1a, 0, 0x3f, 0, 255, 0};
static uint8_t cdb_rc10[10] = {0x25};
static uint8_t cdb_prin[10] = {0x5e, 0x00, 0, 0, 0, 0, 0, 1, 0, 0};

/* What every non-active state still runs. */
static void expect_info_commands_run(void)
{
	uint8_t buf[256];

	expect_good(cdb_inq, 6, buf, 96);
	expect_good(cdb_rs, 6, buf, 18);
	CU_ASSERT_EQUAL(buf[2] & 0x0f, HL_SK_NO_SENSE);
	expect_good(cdb_rl, 12, buf, sizeof(buf));
	expect_good(cdb_rtpg, 12, buf, sizeof(buf));
	expect_good(cdb_rsoc, 12, buf, sizeof(buf));
}

static void test_active_states_run_everything(void)
{
	uint8_t cdb[10], buf[BS];

	alua_setup(HL_ALUA_AO, HL_ALUA_STANDBY);
	cdb_rw10(cdb, 0x2a, 0, 1);
	memset(buf, 0x5a, BS);
	struct tcmd t;
	run_full(&t, &nx1, 0, cdb, 10, buf, BS, true);
	ASSERT_GOOD(t);
	set_mine(HL_ALUA_ANO);
	cdb_rw10(cdb, 0x28, 0, 1);
	memset(buf, 0, BS);
	expect_good(cdb, 10, buf, BS);
	CU_ASSERT_EQUAL(buf[0], 0x5a);
	expect_good(cdb_tur, 6, NULL, 0);
	CU_ASSERT_EQUAL(hl_lu_busy(lu), 0);
	lu_teardown();
}

static void test_standby_refuses_media(void)
{
	struct tcmd t;
	uint8_t cdb[10], buf[BS];
	unsigned reads;

	alua_setup(HL_ALUA_STANDBY, HL_ALUA_AO);
	reads = fake_of(origin)->n_read;
	cdb_rw10(cdb, 0x28, 0, 1);
	expect_not_ready(cdb, 10, buf, BS, 0x0b);
	CU_ASSERT_EQUAL(fake_of(origin)->n_read, reads); /* never reached the origin */
	expect_not_ready(cdb_tur, 6, NULL, 0, 0x0b);
	cdb_rw10(cdb, 0x2a, 0, 1);
	run_full(&t, &nx1, 0, cdb, 10, buf, BS, true);
	ASSERT_SENSE(t, HL_SK_NOT_READY, 0x04, 0x0b);
	CU_ASSERT_EQUAL(fake_of(origin)->n_write, 0);
	uint8_t sync[10] = {0x35};
	expect_not_ready(sync, 10, NULL, 0, 0x0b);
	/* still answered: SPC-4's list, READ CAPACITY and RSOC */
	expect_info_commands_run();
	expect_good(cdb_ms6, 6, buf, 255);
	expect_good(cdb_rc10, 10, buf, 8);
	CU_ASSERT_EQUAL(hl_get_be32(buf), NBLOCKS - 1);
	expect_good(cdb_prin, 10, buf, 256);
	CU_ASSERT_EQUAL(hl_lu_busy(lu), 0);
	/* back to active: the same READ runs */
	set_mine(HL_ALUA_AO);
	cdb_rw10(cdb, 0x28, 0, 1);
	expect_good(cdb, 10, buf, BS);
	lu_teardown();
}

static void test_unavailable_refuses_more(void)
{
	uint8_t cdb[10], buf[BS];

	alua_setup(HL_ALUA_UNAVAILABLE, HL_ALUA_AO);
	cdb_rw10(cdb, 0x28, 0, 1);
	expect_not_ready(cdb, 10, buf, BS, 0x0c);
	expect_not_ready(cdb_tur, 6, NULL, 0, 0x0c);
	expect_not_ready(cdb_ms6, 6, buf, 255, 0x0c);
	expect_not_ready(cdb_rc10, 10, buf, 8, 0x0c);
	expect_not_ready(cdb_prin, 10, buf, 256, 0x0c);
	expect_info_commands_run();
	/* a group the provider does not know is unavailable too */
	fa.n = 0;
	expect_not_ready(cdb, 10, buf, BS, 0x0c);
	lu_teardown();
}

static void test_transitioning_refuses_all_but_info(void)
{
	struct tcmd t;
	uint8_t cdb[10], buf[BS], stpg[12], par[8] = {0, 0, 0, 0, HL_ALUA_AO, 0, 0, 1};

	alua_setup(HL_ALUA_TRANSITIONING, HL_ALUA_STANDBY);
	cdb_rw10(cdb, 0x28, 0, 1);
	expect_not_ready(cdb, 10, buf, BS, 0x0a);
	/* TEST UNIT READY as in standby: a path checker keeps the path (a ghost), not failed */
	expect_not_ready(cdb_tur, 6, NULL, 0, 0x0b);
	expect_not_ready(cdb_ms6, 6, buf, 255, 0x0a);
	expect_not_ready(cdb_rc10, 10, buf, 8, 0x0a);
	expect_not_ready(cdb_prin, 10, buf, 256, 0x0a);
	stpg_cdb(stpg, sizeof(par));
	run_full(&t, &nx1, 0, stpg, 12, par, sizeof(par), true);
	ASSERT_SENSE(t, HL_SK_NOT_READY, 0x04, 0x0a);
	CU_ASSERT_EQUAL(fa.n_set, 0);
	expect_info_commands_run();
	lu_teardown();
}

static void test_ua_before_access_check(void)
{
	struct tcmd t;
	uint8_t cdb[10], buf[BS];

	alua_setup(HL_ALUA_STANDBY, HL_ALUA_AO);
	cdb_rw10(cdb, 0x28, 0, 1);
	/* nx2 is new to the LU: POWER ON first, then the standby refusal */
	run_full(&t, &nx2, 0, cdb, 10, buf, BS, false);
	ASSERT_SENSE(t, HL_SK_UNIT_ATTENTION, 0x29, 0x00);
	run_full(&t, &nx2, 0, cdb, 10, buf, BS, false);
	ASSERT_SENSE(t, HL_SK_NOT_READY, 0x04, 0x0b);
	lu_teardown();
}

/* ---- ASYMMETRIC ACCESS STATE CHANGED ---- */

static void test_access_changed_ua_once_per_nexus(void)
{
	struct tcmd t;

	alua_setup(HL_ALUA_AO, HL_ALUA_STANDBY);
	run_full(&t, &nx2, 0, cdb_tur, 6, NULL, 0, false);
	ASSERT_SENSE(t, HL_SK_UNIT_ATTENTION, 0x29, 0x00);
	/* two changes before anyone looked: heard once */
	hl_lu_access_changed(lu);
	hl_lu_access_changed(lu);
	run_full(&t, &nx1, 0, cdb_tur, 6, NULL, 0, false);
	ASSERT_SENSE(t, HL_SK_UNIT_ATTENTION, 0x2a, 0x06);
	run_full(&t, &nx1, 0, cdb_tur, 6, NULL, 0, false);
	ASSERT_GOOD(t);
	run_full(&t, &nx2, 0, cdb_tur, 6, NULL, 0, false);
	ASSERT_SENSE(t, HL_SK_UNIT_ATTENTION, 0x2a, 0x06);
	run_full(&t, &nx2, 0, cdb_tur, 6, NULL, 0, false);
	ASSERT_GOOD(t);
	/* reported in the new state, before its refusal */
	set_mine(HL_ALUA_STANDBY);
	hl_lu_access_changed(lu);
	run_full(&t, &nx1, 0, cdb_tur, 6, NULL, 0, false);
	ASSERT_SENSE(t, HL_SK_UNIT_ATTENTION, 0x2a, 0x06);
	run_full(&t, &nx1, 0, cdb_tur, 6, NULL, 0, false);
	ASSERT_SENSE(t, HL_SK_NOT_READY, 0x04, 0x0b);
	lu_teardown();
}

/* ---- SET TARGET PORT GROUPS ---- */

static void test_stpg_reaches_provider(void)
{
	struct tcmd t;
	uint8_t cdb[12];
	/* the reserved header (all ones here) is ignored */
	uint8_t par[12] = {0xff, 0xff, 0xff, 0xff, HL_ALUA_AO, 0, 0, 2, HL_ALUA_STANDBY, 0, 0, 1};

	alua_setup(HL_ALUA_STANDBY, HL_ALUA_AO);
	/* in standby: allowed, the way an initiator activates a standby path */
	stpg_cdb(cdb, sizeof(par));
	run_full(&t, &nx1, 0, cdb, 12, par, sizeof(par), true);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(t.cmd.xfer_len, sizeof(par));
	CU_ASSERT_EQUAL_FATAL(fa.n_set, 2);
	CU_ASSERT_EQUAL(fa.set[0].via, 1);
	CU_ASSERT_EQUAL(fa.set[0].tpg, 2);
	CU_ASSERT_EQUAL(fa.set[0].state, HL_ALUA_AO);
	CU_ASSERT_EQUAL(fa.set[1].via, 1);
	CU_ASSERT_EQUAL(fa.set[1].tpg, 1);
	CU_ASSERT_EQUAL(fa.set[1].state, HL_ALUA_STANDBY);
	/* parameter list length 0: nothing to do */
	fa.n_set = 0;
	stpg_cdb(cdb, 0);
	run_full(&t, &nx1, 0, cdb, 12, NULL, 0, false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(fa.n_set, 0);
	/* unavailable ports take it too */
	set_mine(HL_ALUA_UNAVAILABLE);
	stpg_cdb(cdb, 8);
	run_full(&t, &nx1, 0, cdb, 12, par, 8, true);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(fa.n_set, 1);
	lu_teardown();
}

static void test_stpg_provider_errors(void)
{
	struct tcmd t;
	uint8_t cdb[12];
	uint8_t par[12] = {0, 0, 0, 0, HL_ALUA_ANO, 0, 0, 2, HL_ALUA_AO, 0, 0, 1};

	alua_setup(HL_ALUA_AO, HL_ALUA_STANDBY);
	stpg_cdb(cdb, sizeof(par));
	/* -EBUSY: refused now: HARDWARE ERROR, SET TARGET PORT GROUPS COMMAND FAILED */
	fa.set_rc = -EBUSY;
	run_full(&t, &nx1, 0, cdb, 12, par, sizeof(par), true);
	ASSERT_SENSE(t, HL_SK_HARDWARE_ERROR, 0x67, 0x0a);
	CU_ASSERT_EQUAL(fa.n_set, 1); /* stopped at the first refusal */
	/* -EINVAL: INVALID FIELD IN PARAMETER LIST at the descriptor's state */
	fa.set_rc = -EINVAL;
	fa.n_set = 0;
	run_full(&t, &nx1, 0, cdb, 12, par, sizeof(par), true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x26, 0x00);
	CU_ASSERT_EQUAL(t.cmd.sense[15], 0x80 | 0x08 | 3); /* SKSV, parameter, BPV, bit 3 */
	CU_ASSERT_EQUAL(hl_get_be16(t.cmd.sense + 16), 4);
	lu_teardown();
}

/* ---- SET TARGET PORT GROUPS held by the provider (hl_lu_access.settle) ---- */

static struct {
	void (*done)(void *cookie);
	void *cookie;
	uint16_t tpg;
	int rc; /* what settle() returns */
	atomic_int calls;
} held;

static int fa_settle(void *arg, uint16_t tpg, void (*done)(void *cookie), void *cookie)
{
	(void)arg;
	atomic_fetch_add(&held.calls, 1);
	if (held.rc)
		return held.rc;
	held.tpg = tpg;
	held.done = done;
	held.cookie = cookie;
	return 0;
}

static const struct hl_lu_access fa_settle_ops = {
    .groups = fa_groups,
    .state = fa_state,
    .set = fa_set,
    .serving = fa_serving,
    .settle = fa_settle,
    .transition_time_s = 5,
};

struct on_reactor {
	struct tcmd t;
	uint8_t cdb[12], par[8];
	atomic_int done;
	atomic_bool on_reactor; /* the completion ran on the command's reactor */
	struct hl_reactor *r;
};

static void held_cmd_done(struct hl_scsi_cmd *cmd)
{
	struct on_reactor *x = hl_container_of(cmd, struct on_reactor, t.cmd);

	atomic_store(&x->on_reactor, hl_reactor_current() == x->r);
	atomic_fetch_add(&x->done, 1);
}

static void held_start(void *arg)
{
	struct on_reactor *x = arg;

	memset(&x->t, 0, sizeof(x->t));
	x->t.cmd.map = &map;
	x->t.cmd.lu = map.lu[0];
	x->t.cmd.nexus = &nx1;
	memcpy(x->t.cmd.cdb, x->cdb, 12);
	x->t.cmd.cdb_len = 16;
	x->t.cmd.data = x->par;
	x->t.cmd.data_len = sizeof(x->par);
	x->t.cmd.data_out = true;
	x->t.cmd.done = held_cmd_done;
	hl_scsi_cmd_exec(&x->t.cmd);
}

static bool wait_done(struct on_reactor *x, int ms)
{
	for (int i = 0; i < ms && !atomic_load(&x->done); i++)
		usleep(1000);
	return atomic_load(&x->done) != 0;
}

/* An STPG with parameter list par sent on x's reactor, answered GOOD within 2 s. */
static void stpg_answered(struct on_reactor *x, const uint8_t par[8])
{
	atomic_store(&x->done, 0);
	memcpy(x->par, par, 8);
	CU_ASSERT_EQUAL(hl_reactor_call(x->r, held_start, x), 0);
	CU_ASSERT_TRUE(wait_done(x, 2000));
	ASSERT_GOOD(x->t);
}

/*
 * An STPG for the asking port's own group, on a reactor, is held until the
 * provider says the group serves (its done runs on another thread), then
 * answered GOOD on the command's reactor; an STPG for another group, or one
 * the provider does not hold, is answered at once.
 */
static void test_stpg_held_until_active(void)
{
	struct on_reactor x;
	uint8_t mine[8] = {0, 0, 0, 0, HL_ALUA_AO, 0, 0, 1};
	uint8_t peer[8] = {0, 0, 0, 0, HL_ALUA_AO, 0, 0, 2};

	memset(&x, 0, sizeof(x));
	memset(&held, 0, sizeof(held));
	alua_setup(HL_ALUA_STANDBY, HL_ALUA_AO);
	hl_lu_set_access(lu, &fa_settle_ops, &fa);
	CU_ASSERT_EQUAL_FATAL(hl_reactor_create(&x.r, "ut"), 0);
	CU_ASSERT_EQUAL_FATAL(hl_reactor_start(x.r), 0);
	stpg_cdb(x.cdb, sizeof(x.par));
	memcpy(x.par, mine, sizeof(mine));
	CU_ASSERT_EQUAL(hl_reactor_call(x.r, held_start, &x), 0);
	usleep(100 * 1000);
	CU_ASSERT_EQUAL(atomic_load(&held.calls), 1);
	CU_ASSERT_EQUAL(held.tpg, 1);
	CU_ASSERT_EQUAL(atomic_load(&x.done), 0); /* held */
	CU_ASSERT_EQUAL(fa.n_set, 1);             /* the provider was asked first */
	set_mine(HL_ALUA_AO);
	CU_ASSERT_PTR_NOT_NULL_FATAL(held.done);
	held.done(held.cookie); /* from this thread, as the ownership thread does */
	CU_ASSERT_TRUE(wait_done(&x, 2000));
	CU_ASSERT_TRUE(atomic_load(&x.on_reactor));
	ASSERT_GOOD(x.t);
	/* another group's STPG through our port: not held */
	stpg_answered(&x, peer);
	CU_ASSERT_EQUAL(atomic_load(&held.calls), 1);
	/* the provider has nothing to wait for: answered at once */
	held.rc = -EALREADY;
	stpg_answered(&x, mine);
	CU_ASSERT_EQUAL(atomic_load(&held.calls), 2);
	hl_reactor_stop(x.r);
	hl_reactor_destroy(x.r);
	lu_teardown();
}

static void test_stpg_bad_lists(void)
{
	struct tcmd t;
	uint8_t cdb[12];
	uint8_t par[12];

	alua_setup(HL_ALUA_AO, HL_ALUA_STANDBY);
	/* transitioning, offline and reserved values cannot be asked for */
	static const uint8_t bad_states[] = {HL_ALUA_TRANSITIONING, HL_ALUA_OFFLINE, 0x4, 0x7};
	for (unsigned i = 0; i < sizeof(bad_states); i++) {
		uint8_t p[8] = {0, 0, 0, 0, bad_states[i], 0, 0, 2};
		stpg_cdb(cdb, sizeof(p));
		run_full(&t, &nx1, 0, cdb, 12, p, sizeof(p), true);
		ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x26, 0x00);
		CU_ASSERT_EQUAL(hl_get_be16(t.cmd.sense + 16), 4);
	}
	/* reserved bits of a descriptor */
	uint8_t rsv[8] = {0, 0, 0, 0, 0x10 | HL_ALUA_AO, 0, 0, 2};
	stpg_cdb(cdb, sizeof(rsv));
	run_full(&t, &nx1, 0, cdb, 12, rsv, sizeof(rsv), true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x26, 0x00);
	/* the second descriptor is bad: the first does not reach the provider either */
	memcpy(par, (uint8_t[]){0, 0, 0, 0, HL_ALUA_AO, 0, 0, 2, 0x5, 0, 0, 1}, 12);
	stpg_cdb(cdb, sizeof(par));
	run_full(&t, &nx1, 0, cdb, 12, par, sizeof(par), true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x26, 0x00);
	CU_ASSERT_EQUAL(hl_get_be16(t.cmd.sense + 16), 8);
	/* one group twice */
	memcpy(par, (uint8_t[]){0, 0, 0, 0, HL_ALUA_AO, 0, 0, 2, HL_ALUA_STANDBY, 0, 0, 2}, 12);
	run_full(&t, &nx1, 0, cdb, 12, par, sizeof(par), true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x26, 0x00);
	CU_ASSERT_EQUAL(hl_get_be16(t.cmd.sense + 16), 10);
	/* shorter than the header, and not a header plus whole descriptors */
	stpg_cdb(cdb, 2);
	run_full(&t, &nx1, 0, cdb, 12, par, 2, true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x1a, 0x00);
	stpg_cdb(cdb, 6);
	run_full(&t, &nx1, 0, cdb, 12, par, 6, true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x1a, 0x00);
	/* less data than the CDB announced */
	stpg_cdb(cdb, 12);
	run_full(&t, &nx1, 0, cdb, 12, par, 8, true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x0e, 0x03);
	CU_ASSERT_EQUAL(fa.n_set, 0);
	lu_teardown();
}

static void test_rsoc_lists_stpg_with_provider(void)
{
	static const uint8_t usage[12] = {0xa4, 0x0a, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0};
	uint8_t rsoc[12] = {0xa3, 0x0c, 0x02, 0xa4, 0, 0x0a, 0, 0, 1, 0, 0, 0};
	uint8_t buf[256];

	alua_setup(HL_ALUA_AO, HL_ALUA_STANDBY);
	expect_good(rsoc, 12, buf, sizeof(buf));
	CU_ASSERT_EQUAL(buf[1] & 7, 3);
	CU_ASSERT_EQUAL(hl_get_be16(buf + 2), 12);
	CU_ASSERT_EQUAL(memcmp(buf + 4, usage, 12), 0);
	/* the mask is enforced: a bit outside it is an invalid field */
	uint8_t cdb[12];
	struct tcmd t;
	stpg_cdb(cdb, 0);
	cdb[2] = 0x01;
	run_full(&t, &nx1, 0, cdb, 12, NULL, 0, false);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	CU_ASSERT_EQUAL(hl_get_be16(t.cmd.sense + 16), 2);
	/* an unknown MAINTENANCE OUT service action: invalid field, not opcode */
	cdb[1] = 0x0b;
	cdb[2] = 0;
	run_full(&t, &nx1, 0, cdb, 12, NULL, 0, false);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	lu_teardown();
}

/* ---- hl_lu_busy ---- */

/* start() for nx1: the command runs up to its origin I/O, which the test completes */
static void start_nx1(struct tcmd *t, const uint8_t *cdb, unsigned len, uint8_t *buf,
                      uint32_t buf_len, bool out)
{
	memset(t, 0, sizeof(*t));
	t->cmd.map = &map;
	t->cmd.lu = map.lu[0];
	t->cmd.nexus = &nx1;
	memcpy(t->cmd.cdb, cdb, len);
	t->cmd.cdb_len = 16;
	t->cmd.data = buf;
	t->cmd.data_len = buf_len;
	t->cmd.data_out = out && buf_len;
	t->cmd.data_in = !out && buf_len;
	t->cmd.done = tcmd_done;
	hl_scsi_cmd_exec(&t->cmd);
}

static void test_busy_counts_media_commands(void)
{
	struct tcmd r, w, i, s;
	uint8_t rd[10], wr[10], rbuf[BS], wbuf[BS], ibuf[96];

	alua_setup(HL_ALUA_AO, HL_ALUA_STANDBY);
	CU_ASSERT_EQUAL(hl_lu_busy(lu), 0);
	cdb_rw10(rd, 0x28, 0, 1);
	cdb_rw10(wr, 0x2a, 8, 1);
	start_nx1(&r, rd, 10, rbuf, BS, false);
	CU_ASSERT_EQUAL(hl_lu_busy(lu), 1);
	start_nx1(&w, wr, 10, wbuf, BS, true);
	CU_ASSERT_EQUAL(hl_lu_busy(lu), 2);
	/* INQUIRY is not a media command */
	start_nx1(&i, cdb_inq, 6, ibuf, 96, false);
	CU_ASSERT_EQUAL(i.done, 1);
	CU_ASSERT_EQUAL(hl_lu_busy(lu), 2);
	/* a planned handover: TRANSITIONING refuses new media commands, uncounted */
	set_mine(HL_ALUA_TRANSITIONING);
	start_nx1(&s, rd, 10, rbuf, BS, false);
	CU_ASSERT_EQUAL(s.done, 1);
	CU_ASSERT_TRUE(sense_is(&s.cmd, HL_SK_NOT_READY, 0x04, 0x0a));
	CU_ASSERT_EQUAL(hl_lu_busy(lu), 2);
	CU_ASSERT_TRUE(fake_step(origin));
	CU_ASSERT_EQUAL(r.done, 1);
	CU_ASSERT_EQUAL(hl_lu_busy(lu), 1);
	CU_ASSERT_TRUE(fake_step(origin));
	CU_ASSERT_EQUAL(w.done, 1);
	CU_ASSERT_EQUAL(hl_lu_busy(lu), 0);
	CU_ASSERT_EQUAL(r.cmd.status, HL_SAM_GOOD);
	CU_ASSERT_EQUAL(w.cmd.status, HL_SAM_GOOD);
	lu_teardown();
}

/*
 * A READ that passed the check while this gateway owned the LU completes
 * after its lease ran out (it was frozen meanwhile): its data is not sent,
 * NOT READY 04h/0Ah instead. A write that completes then keeps its status
 * (the origin's cluster fenced what mattered), and so does a read during a
 * planned release (serving() still true).
 */
static void test_read_completing_after_lease_refused(void)
{
	struct tcmd r, w, r2;
	uint8_t rd[10], wr[10], rbuf[BS], wbuf[BS], rbuf2[BS];

	alua_setup(HL_ALUA_AO, HL_ALUA_STANDBY);
	cdb_rw10(rd, 0x28, 0, 1);
	cdb_rw10(wr, 0x2a, 8, 1);
	start_nx1(&r, rd, 10, rbuf, BS, false);
	start_nx1(&w, wr, 10, wbuf, BS, true);
	set_mine(HL_ALUA_TRANSITIONING);
	fa.not_serving = true;
	CU_ASSERT_TRUE(fake_step(origin));
	CU_ASSERT_EQUAL(r.done, 1);
	CU_ASSERT_TRUE(sense_is(&r.cmd, HL_SK_NOT_READY, 0x04, 0x0a));
	CU_ASSERT_EQUAL(r.cmd.data_in_len, 0);
	CU_ASSERT_TRUE(fake_step(origin));
	CU_ASSERT_EQUAL(w.done, 1);
	CU_ASSERT_EQUAL(w.cmd.status, HL_SAM_GOOD);
	CU_ASSERT_EQUAL(hl_lu_busy(lu), 0);
	/* a planned release drains: the read started before it completes with data */
	set_mine(HL_ALUA_AO);
	fa.not_serving = false;
	start_nx1(&r2, rd, 10, rbuf2, BS, false);
	set_mine(HL_ALUA_TRANSITIONING);
	CU_ASSERT_TRUE(fake_step(origin));
	CU_ASSERT_EQUAL(r2.done, 1);
	CU_ASSERT_EQUAL(r2.cmd.status, HL_SAM_GOOD);
	CU_ASSERT_EQUAL(r2.cmd.data_in_len, BS);
	lu_teardown();
}

static void test_busy_uncounted_on_errors(void)
{
	struct tcmd t;
	uint8_t cdb[10], buf[BS];

	alua_setup(HL_ALUA_AO, HL_ALUA_STANDBY);
	/* the origin fails the I/O */
	fake_of(origin)->fail_result = -EIO;
	cdb_rw10(cdb, 0x28, 0, 1);
	run_full(&t, &nx1, 0, cdb, 10, buf, BS, false);
	CU_ASSERT_EQUAL(t.cmd.status, HL_SAM_CHECK_CONDITION);
	CU_ASSERT_EQUAL(hl_lu_busy(lu), 0);
	/* the submit fails */
	fake_of(origin)->fail_result = 0;
	fake_of(origin)->submit_rc = -EIO;
	run_full(&t, &nx1, 0, cdb, 10, buf, BS, false);
	CU_ASSERT_EQUAL(t.cmd.status, HL_SAM_CHECK_CONDITION);
	CU_ASSERT_EQUAL(hl_lu_busy(lu), 0);
	fake_of(origin)->submit_rc = 0;
	/* refused by the handler's own checks after the access check */
	cdb_rw10(cdb, 0x28, NBLOCKS, 1);
	run_full(&t, &nx1, 0, cdb, 10, buf, BS, false);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x21, 0x00);
	CU_ASSERT_EQUAL(hl_lu_busy(lu), 0);
	/* refused by the access check */
	set_mine(HL_ALUA_STANDBY);
	cdb_rw10(cdb, 0x28, 0, 1);
	run_full(&t, &nx1, 0, cdb, 10, buf, BS, false);
	ASSERT_SENSE(t, HL_SK_NOT_READY, 0x04, 0x0b);
	CU_ASSERT_EQUAL(hl_lu_busy(lu), 0);
	lu_teardown();
}

static void test_provider_removed(void)
{
	struct tcmd t;
	uint8_t cdb[10], buf[BS];

	alua_setup(HL_ALUA_STANDBY, HL_ALUA_AO);
	cdb_rw10(cdb, 0x28, 0, 1);
	expect_not_ready(cdb, 10, buf, BS, 0x0b);
	hl_lu_set_access(lu, NULL, NULL);
	unsigned calls = fa.n_state_calls;
	run_full(&t, &nx1, 0, cdb, 10, buf, BS, false);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(fa.n_state_calls, calls); /* no provider asked */
	CU_ASSERT_EQUAL(hl_lu_busy(lu), 0);
	lu_teardown();
}

static const struct hl_test tests[] = {
    {"no provider: TPGS 01b, RTPG all active/optimized, no STPG", test_no_provider_unchanged},
    {"port ids: group = gateway, relative port = gateway << 8 | TPGT", test_port_ids},
    {"RTPG: the provider's groups, states, ports, transition time", test_rtpg_two_groups},
    {"RTPG: a provider's transition time is read at each call", test_rtpg_transition_time_changes},
    {"STPG for our group held until the provider says active", test_stpg_held_until_active},
    {"INQUIRY with a provider: TPGS 11b, PQ 001b when unavailable", test_inquiry_with_provider},
    {"active/optimized and non-optimized run everything", test_active_states_run_everything},
    {"standby refuses media access with 04/0B", test_standby_refuses_media},
    {"unavailable refuses all but the basics with 04/0C", test_unavailable_refuses_more},
    {"transitioning refuses all but the basics with 04/0A",
     test_transitioning_refuses_all_but_info},
    {"a unit attention is reported before the access check", test_ua_before_access_check},
    {"ASYMMETRIC ACCESS STATE CHANGED once per nexus", test_access_changed_ua_once_per_nexus},
    {"STPG: descriptors reach the provider", test_stpg_reaches_provider},
    {"STPG: -EBUSY and -EINVAL from the provider", test_stpg_provider_errors},
    {"STPG: malformed parameter lists change nothing", test_stpg_bad_lists},
    {"RSOC lists STPG with its usage mask when offered", test_rsoc_lists_stpg_with_provider},
    {"hl_lu_busy counts running media commands", test_busy_counts_media_commands},
    {"hl_lu_busy: every error path uncounts", test_busy_uncounted_on_errors},
    {"a read completing after the lease ran out sends no data",
     test_read_completing_after_lease_refused},
    {"removing the provider: back to all active/optimized", test_provider_removed},
    {NULL, NULL},
};

int main(void)
{
	hl_log_level = HL_LOG_ERR - 1;
	return hl_test_run("alua", tests);
}
