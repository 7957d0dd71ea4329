/*
 * path_ut.c - unit tests of hotlun-bench's multipath decisions: the MRU
 * choice, parking I/O while no path is usable (backoff rounds, the failover
 * timeout), transitioning paths retried in place, when and where SET TARGET
 * PORT GROUPS goes, and the parsing of the ALUA bits of the target's answers.
 */
#include "bench/bench_internal.h"
#include "hl_test.h"

#include <string.h>

#define MS 1000000ULL
#define S  1000000000ULL

static void test_choose_stays_on_usable_path(void)
{
	struct bench_path_view v[3] = {
	    {.state = BENCH_PATH_AO}, {.state = BENCH_PATH_ANO}, {.state = BENCH_PATH_AO}};

	/* most recently used: a usable path is kept even when another is better */
	CU_ASSERT_EQUAL(bench_path_choose(v, 3, 1), 1);
	CU_ASSERT_EQUAL(bench_path_choose(v, 3, 0), 0);
}

static void test_choose_moves_to_best_next_first(void)
{
	struct bench_path_view v[3] = {
	    {.state = BENCH_PATH_AO}, {.state = BENCH_PATH_DOWN}, {.state = BENCH_PATH_AO}};

	CU_ASSERT_EQUAL(bench_path_choose(v, 3, 1), 2); /* tie: the next one first */
	v[2].state = BENCH_PATH_STANDBY;
	CU_ASSERT_EQUAL(bench_path_choose(v, 3, 1), 0);
	/* nothing usable: transitioning beats standby beats down */
	v[0].state = BENCH_PATH_TRANSITIONING;
	CU_ASSERT_EQUAL(bench_path_choose(v, 3, 1), 0);
	v[0].state = BENCH_PATH_DOWN;
	CU_ASSERT_EQUAL(bench_path_choose(v, 3, 1), 2);
	v[2].state = BENCH_PATH_DOWN;
	CU_ASSERT_EQUAL(v[bench_path_choose(v, 3, 1)].state, BENCH_PATH_DOWN);
}

static void test_usable_path_sends_at_once(void)
{
	struct bench_failover f = {0};
	struct bench_path_view ao = {.state = BENCH_PATH_AO};
	struct bench_path_view unk = {.state = BENCH_PATH_UNKNOWN};

	bench_failover_note(&f, true, 1 * S);
	CU_ASSERT_EQUAL(bench_path_decide(&f, &ao, 0, 1 * S, 60 * S), BENCH_PATH_SEND);
	CU_ASSERT_EQUAL(bench_path_decide(&f, &unk, 0, 1 * S, 60 * S), BENCH_PATH_SEND);
	CU_ASSERT_EQUAL(f.since, 0);
}

static void test_parked_io_waits_for_the_next_round(void)
{
	struct bench_failover f = {0};
	struct bench_path_view tr = {.state = BENCH_PATH_TRANSITIONING, .reported = true};
	uint64_t t = 10 * S;

	bench_failover_note(&f, false, t);
	uint64_t parked = f.round;
	/* parked: not sent again in the same round, however often asked */
	CU_ASSERT_EQUAL(bench_path_decide(&f, &tr, parked, t, 60 * S), BENCH_PATH_WAIT);
	CU_ASSERT_FALSE(bench_failover_round(&f, t + 49 * MS));
	CU_ASSERT_EQUAL(bench_path_decide(&f, &tr, parked, t + 49 * MS, 60 * S), BENCH_PATH_WAIT);
	CU_ASSERT_TRUE(bench_failover_round(&f, t + 50 * MS));
	/* transitioning: the same path is tried again after the backoff */
	CU_ASSERT_EQUAL(bench_path_decide(&f, &tr, parked, t + 50 * MS, 60 * S), BENCH_PATH_SEND);
	/* answered transitioning again: parked in this round, waits for the next */
	CU_ASSERT_EQUAL(bench_path_decide(&f, &tr, f.round, t + 51 * MS, 60 * S), BENCH_PATH_WAIT);
}

static void test_backoff_grows_to_its_cap(void)
{
	struct bench_failover f = {0};
	uint64_t t = 1 * S, expect[] = {50, 100, 200, 400, 500, 500, 500};

	bench_failover_note(&f, false, t);
	for (unsigned i = 0; i < sizeof(expect) / sizeof(expect[0]); i++) {
		uint64_t due = f.round_ns;
		CU_ASSERT_EQUAL(due - t, expect[i] * MS);
		CU_ASSERT_FALSE(bench_failover_round(&f, due - 1));
		CU_ASSERT_TRUE(bench_failover_round(&f, due));
		CU_ASSERT_EQUAL(f.round, i + 1);
		t = due;
	}
	/* a usable path ends the stretch; the next one starts with the shortest wait */
	bench_failover_note(&f, true, t);
	CU_ASSERT_FALSE(bench_failover_round(&f, t + 10 * S));
	bench_failover_note(&f, false, t + 20 * S);
	CU_ASSERT_EQUAL(f.round_ns - (t + 20 * S), 50 * MS);
}

static void test_standby_waits_for_its_report(void)
{
	struct bench_failover f = {0};
	struct bench_path_view sb = {.state = BENCH_PATH_STANDBY, .reported = true};
	struct bench_path_view down = {.state = BENCH_PATH_DOWN};

	bench_failover_note(&f, false, 0);
	CU_ASSERT_TRUE(bench_failover_round(&f, 50 * MS));
	/* its own report says standby: I/O would be refused; wait for a new report */
	CU_ASSERT_EQUAL(bench_path_decide(&f, &sb, 0, 50 * MS, 60 * S), BENCH_PATH_WAIT);
	CU_ASSERT_EQUAL(bench_path_decide(&f, &down, 0, 50 * MS, 60 * S), BENCH_PATH_WAIT);
	/* standby said only by sense (no report for it): the I/O is the probe */
	sb.reported = false;
	CU_ASSERT_EQUAL(bench_path_decide(&f, &sb, 0, 50 * MS, 60 * S), BENCH_PATH_SEND);
	/* and a report that turns it active/optimized sends at once, round or not */
	sb.state = BENCH_PATH_AO;
	CU_ASSERT_EQUAL(bench_path_decide(&f, &sb, f.round, 50 * MS, 60 * S), BENCH_PATH_SEND);
}

static void test_fails_only_after_the_timeout(void)
{
	struct bench_failover f = {0};
	struct bench_path_view sb = {.state = BENCH_PATH_STANDBY, .reported = true};
	uint64_t t0 = 5 * S, t = t0;

	bench_failover_note(&f, false, t0);
	/* many rounds, no count limit: only the time without a usable path matters */
	while (t < t0 + 59 * S) {
		t = f.round_ns;
		CU_ASSERT_TRUE(bench_failover_round(&f, t));
		CU_ASSERT_EQUAL(bench_path_decide(&f, &sb, f.round - 1, t, 60 * S),
		                BENCH_PATH_WAIT);
	}
	CU_ASSERT(f.round > 100);
	t = t0 + 60 * S;
	CU_ASSERT_EQUAL(bench_path_decide(&f, &sb, f.round - 1, t, 60 * S), BENCH_PATH_FAIL);
	/* parked in this round: fails at the next one, not at once (no spin) */
	CU_ASSERT_EQUAL(bench_path_decide(&f, &sb, f.round, t, 60 * S), BENCH_PATH_WAIT);
	/* timeout 0: waits for ever */
	CU_ASSERT_EQUAL(bench_path_decide(&f, &sb, f.round - 1, t + 3600 * S, 0), BENCH_PATH_WAIT);
	CU_ASSERT_EQUAL(bench_failover_longest(&f, t), 60 * S);
}

static void test_longest_stretch(void)
{
	struct bench_failover f = {0};

	CU_ASSERT_EQUAL(bench_failover_longest(&f, 9 * S), 0);
	bench_failover_note(&f, false, 1 * S);
	bench_failover_note(&f, false, 2 * S); /* still the same stretch */
	bench_failover_note(&f, true, 4 * S);
	bench_failover_note(&f, false, 10 * S);
	CU_ASSERT_EQUAL(bench_failover_longest(&f, 11 * S), 3 * S);
	CU_ASSERT_EQUAL(bench_failover_longest(&f, 15 * S), 5 * S); /* the current one counts */
	bench_failover_note(&f, true, 12 * S);
	CU_ASSERT_EQUAL(bench_failover_longest(&f, 20 * S), 3 * S);
}

static void test_stpg_only_without_ao(void)
{
	struct bench_path_view v[2] = {{.state = BENCH_PATH_AO, .explicit_alua = true},
	                               {.state = BENCH_PATH_STANDBY, .explicit_alua = true}};

	CU_ASSERT_EQUAL(bench_path_stpg_pick(v, 2, 0, 10 * S), -1);
	v[0].state = BENCH_PATH_DOWN; /* the owner died */
	CU_ASSERT_EQUAL(bench_path_stpg_pick(v, 2, 1, 10 * S), 1);
	/* a move under way ends by itself: nobody is asked */
	v[0].state = BENCH_PATH_TRANSITIONING;
	CU_ASSERT_EQUAL(bench_path_stpg_pick(v, 2, 1, 10 * S), -1);
	/* implicit ALUA only: never asked */
	v[0].state = BENCH_PATH_DOWN;
	v[1].explicit_alua = false;
	CU_ASSERT_EQUAL(bench_path_stpg_pick(v, 2, 1, 10 * S), -1);
	/* unavailable is not asked either */
	v[1].explicit_alua = true;
	v[1].state = BENCH_PATH_UNAVAILABLE;
	CU_ASSERT_EQUAL(bench_path_stpg_pick(v, 2, 1, 10 * S), -1);
}

static void test_stpg_once_a_second_one_path(void)
{
	struct bench_path_view v[3] = {{.state = BENCH_PATH_DOWN},
	                               {.state = BENCH_PATH_STANDBY, .explicit_alua = true},
	                               {.state = BENCH_PATH_STANDBY, .explicit_alua = true}};

	CU_ASSERT_EQUAL(bench_path_stpg_pick(v, 3, 0, 10 * S), 1); /* next after active first */
	v[1].stpg_busy = true;
	CU_ASSERT_EQUAL(bench_path_stpg_pick(v, 3, 0, 10 * S), -1);
	v[1].stpg_busy = false;
	v[1].stpg_ns = 10 * S;
	/* refused: asked again a second later, and the other gateway is not asked meanwhile */
	CU_ASSERT_EQUAL(bench_path_stpg_pick(v, 3, 0, 10 * S + 999 * MS), -1);
	CU_ASSERT_EQUAL(bench_path_stpg_pick(v, 3, 0, 11 * S), 1);
	/* active/non-optimized is asked before standby */
	v[2].state = BENCH_PATH_ANO;
	CU_ASSERT_EQUAL(bench_path_stpg_pick(v, 3, 0, 11 * S), 2);
	/* the asked one went down: the other is asked */
	v[2].state = BENCH_PATH_DOWN;
	CU_ASSERT_EQUAL(bench_path_stpg_pick(v, 3, 0, 11 * S), 1);
}

static void test_inquiry_tpgs(void)
{
	uint8_t d[36] = {0};

	d[5] = 0x18;
	CU_ASSERT_EQUAL(bench_inquiry_tpgs(d, sizeof(d)), 1); /* implicit */
	d[5] = 0x38;
	CU_ASSERT_EQUAL(bench_inquiry_tpgs(d, sizeof(d)), 3); /* implicit and explicit */
	CU_ASSERT_EQUAL(bench_inquiry_tpgs(d, 5), 0);         /* too short */
}

static void test_vpd83_tpg(void)
{
	/* header, a NAA designator (LU), a relative port, a target port group */
	uint8_t d[] = {0x00, 0x83, 0x00, 0x1c,                                    /* header */
	               0x01, 0x03, 0x00, 0x08, 1,    2,    3,    4,   5, 6, 7, 8, /* NAA */
	               0x61, 0x94, 0x00, 0x04, 0x00, 0x00, 0,    2,               /* rel port */
	               0x61, 0x95, 0x00, 0x04, 0x00, 0x00, 0x01, 0x02};           /* TPG 258 */

	CU_ASSERT_EQUAL(bench_vpd83_tpg(d, sizeof(d)), 258);
	CU_ASSERT_EQUAL(bench_vpd83_tpg(d, sizeof(d) - 1), -1); /* truncated designator */
	d[3] = 0x14;                                            /* the header leaves it out */
	CU_ASSERT_EQUAL(bench_vpd83_tpg(d, sizeof(d)), -1);
	CU_ASSERT_EQUAL(bench_vpd83_tpg(d, 3), -1);
}

static void test_rtpg_state(void)
{
	/* two groups: 1 standby with one port, 2 active/optimized with two */
	uint8_t d[] = {0,    0,    0, 28,                         /* length of what follows */
	               0x02, 0x80, 0, 1,  0, 0, 0, 1, 0, 0, 0, 1, /* group 1 */
	               0x80, 0x80, 0, 2,  0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 3}; /* group 2, PREF */
	enum bench_path_state st;

	CU_ASSERT_TRUE(bench_rtpg_state(d, sizeof(d), 1, &st));
	CU_ASSERT_EQUAL(st, BENCH_PATH_STANDBY);
	CU_ASSERT_TRUE(bench_rtpg_state(d, sizeof(d), 2, &st));
	CU_ASSERT_EQUAL(st, BENCH_PATH_AO);
	CU_ASSERT_FALSE(bench_rtpg_state(d, sizeof(d), 3, &st));
	CU_ASSERT_FALSE(bench_rtpg_state(d, sizeof(d), -1, &st));
	CU_ASSERT_FALSE(bench_rtpg_state(d, 20, 2, &st)); /* group 2 cut off */
	d[4] = 0x0f;
	CU_ASSERT_TRUE(bench_rtpg_state(d, sizeof(d), 1, &st));
	CU_ASSERT_EQUAL(st, BENCH_PATH_TRANSITIONING);
	d[4] = 0x0e; /* offline: nothing I/O can use */
	CU_ASSERT_TRUE(bench_rtpg_state(d, sizeof(d), 1, &st));
	CU_ASSERT_EQUAL(st, BENCH_PATH_UNAVAILABLE);
}

static void test_stpg_build(void)
{
	uint8_t cdb[12], param[BENCH_STPG_PARAM_LEN];
	const uint8_t want_cdb[12] = {0xa4, 0x0a, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0};
	const uint8_t want_param[8] = {0, 0, 0, 0, 0x00, 0, 0x01, 0x02};

	memset(cdb, 0xff, sizeof(cdb));
	memset(param, 0xff, sizeof(param));
	bench_stpg_build(cdb, param, 258);
	CU_ASSERT_EQUAL(memcmp(cdb, want_cdb, sizeof(cdb)), 0);
	CU_ASSERT_EQUAL(memcmp(param, want_param, sizeof(param)), 0);
}

static const struct hl_test tests[] = {
    {"MRU: a usable path is kept", test_choose_stays_on_usable_path},
    {"MRU: moves to the best path, next first", test_choose_moves_to_best_next_first},
    {"a usable path sends at once", test_usable_path_sends_at_once},
    {"parked I/O waits for the next round", test_parked_io_waits_for_the_next_round},
    {"the backoff doubles to 500 ms", test_backoff_grows_to_its_cap},
    {"a reported standby path waits for its report", test_standby_waits_for_its_report},
    {"I/O fails only after the failover timeout", test_fails_only_after_the_timeout},
    {"the longest stretch without a usable path", test_longest_stretch},
    {"STPG only without an active/optimized path", test_stpg_only_without_ao},
    {"STPG once a second, on one path", test_stpg_once_a_second_one_path},
    {"INQUIRY TPGS", test_inquiry_tpgs},
    {"VPD 83h target port group", test_vpd83_tpg},
    {"REPORT TARGET PORT GROUPS states", test_rtpg_state},
    {"SET TARGET PORT GROUPS CDB and parameters", test_stpg_build},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("bench_path", tests);
}
