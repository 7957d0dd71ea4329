/*
 * wbudget_ut.c - the write buffer budget's accounting (src/iscsi/wbudget.c):
 * what is charged when a WRITE arrives, who waits, who gets TASK SET FULL,
 * that waiters are served oldest first and can never fill the budget so
 * that nothing granted can finish, and the counters.
 */
#include <string.h>

#include "hl_test.h"
#include "iscsi/iscsi_internal.h"

#define MiB (1ull << 20)
#define KiB (1ull << 10)

static struct iscsi_wbudget b;

static void setup(uint64_t limit)
{
	iscsi_wb_init(&b, limit);
}

static struct hl_iscsi_write_stats stats(void)
{
	struct hl_iscsi_write_stats s;
	iscsi_wb_stats(&b, &s);
	return s;
}

static void test_go_charges_whole_transfer(void)
{
	struct iscsi_wb_claim a = {0};
	uint64_t cl = 0;

	setup(64 * MiB);
	CU_ASSERT_EQUAL(iscsi_wb_admit(&b, &a, 0, 1000, 0, &cl), ISCSI_WB_GO);
	CU_ASSERT_EQUAL(a.need, 4096); /* rounded to 4 KiB */
	CU_ASSERT_EQUAL(a.charged, 4096);
	CU_ASSERT_EQUAL(cl, 16 * MiB); /* limit / 4 */
	CU_ASSERT_EQUAL(stats().held, 4096);
	iscsi_wb_release(&b, &a);
	iscsi_wb_release(&b, &a); /* idempotent */
	CU_ASSERT_EQUAL(stats().held, 0);
	CU_ASSERT_EQUAL(stats().peak, 4096);
	iscsi_wb_fini(&b);
}

static void test_conn_cap_is_task_set_full(void)
{
	struct iscsi_wb_claim a = {0};

	setup(64 * MiB);
	/* this connection already claims 12 MiB of its 16 MiB */
	CU_ASSERT_EQUAL(iscsi_wb_admit(&b, &a, 12 * MiB, 8 * MiB, 0, NULL), ISCSI_WB_FULL);
	CU_ASSERT_EQUAL(a.need, 0);
	CU_ASSERT_EQUAL(stats().held, 0);
	CU_ASSERT_EQUAL(stats().task_set_full, 1);
	CU_ASSERT_EQUAL(iscsi_wb_admit(&b, &a, 12 * MiB, 4 * MiB, 0, NULL), ISCSI_WB_GO);
	iscsi_wb_release(&b, &a);
	iscsi_wb_fini(&b);
}

/* Fill the budget with granted 16 MiB writes (as four connections would). */
static void fill(struct iscsi_wb_claim *g, int n)
{
	for (int i = 0; i < n; i++) {
		memset(&g[i], 0, sizeof(g[i]));
		CU_ASSERT_EQUAL_FATAL(iscsi_wb_admit(&b, &g[i], 0, 16 * MiB, 256 * KiB, NULL),
		                      ISCSI_WB_GO);
	}
}

static void test_r2t_waits_until_budget_frees(void)
{
	struct iscsi_wb_claim g[4], w = {0};

	setup(64 * MiB);
	fill(g, 4);
	CU_ASSERT_EQUAL(stats().held, 64 * MiB);
	/* all solicited but the 64 KiB of immediate data: it may wait, charging only that */
	CU_ASSERT_EQUAL(iscsi_wb_admit(&b, &w, 0, 1 * MiB, 64 * KiB, NULL), ISCSI_WB_FULL);
	/* (no room even for its immediate data while the budget is spent) */
	iscsi_wb_release(&b, &g[3]);
	struct iscsi_wb_claim g3 = {0};
	CU_ASSERT_EQUAL(iscsi_wb_admit(&b, &g3, 0, 15 * MiB, 0, NULL), ISCSI_WB_GO);
	/* 1 MiB left: a 4 MiB write with 64 KiB immediate data waits for its R2Ts */
	CU_ASSERT_EQUAL(iscsi_wb_admit(&b, &w, 0, 4 * MiB, 64 * KiB, NULL), ISCSI_WB_WAIT);
	CU_ASSERT_TRUE(w.waiting);
	CU_ASSERT_EQUAL(w.charged, 64 * KiB);
	CU_ASSERT_EQUAL(stats().waiting, 1);
	CU_ASSERT_EQUAL(stats().waiting_bytes, 64 * KiB);
	CU_ASSERT_EQUAL(stats().r2t_deferred, 1);
	CU_ASSERT_TRUE(iscsi_wb_pressure(&b));
	CU_ASSERT_FALSE(iscsi_wb_grant(&b, &w));
	iscsi_wb_release(&b, &g3);
	CU_ASSERT_TRUE(iscsi_wb_grant(&b, &w));
	CU_ASSERT_FALSE(w.waiting);
	CU_ASSERT_EQUAL(w.charged, 4 * MiB);
	CU_ASSERT_EQUAL(stats().waiting, 0);
	CU_ASSERT_EQUAL(stats().held, 48 * MiB + 4 * MiB);
	iscsi_wb_release(&b, &w);
	for (int i = 0; i < 3; i++)
		iscsi_wb_release(&b, &g[i]);
	CU_ASSERT_EQUAL(stats().held, 0);
	CU_ASSERT_FALSE(iscsi_wb_pressure(&b));
	iscsi_wb_fini(&b);
}

static void test_unsolicited_only_cannot_wait(void)
{
	struct iscsi_wb_claim g[4], w = {0};

	setup(64 * MiB);
	fill(g, 4);
	iscsi_wb_release(&b, &g[3]);
	struct iscsi_wb_claim big = {0};
	CU_ASSERT_EQUAL(iscsi_wb_admit(&b, &big, 0, 16 * MiB - 64 * KiB, 0, NULL), ISCSI_WB_GO);
	/* 64 KiB left; a 256 KiB write sent wholly unsolicited has no R2T to hold back */
	CU_ASSERT_EQUAL(iscsi_wb_admit(&b, &w, 0, 256 * KiB, 256 * KiB, NULL), ISCSI_WB_FULL);
	CU_ASSERT_EQUAL(stats().task_set_full, 1);
	CU_ASSERT_EQUAL(stats().waiting, 0);
	iscsi_wb_release(&b, &big);
	for (int i = 0; i < 3; i++)
		iscsi_wb_release(&b, &g[i]);
	iscsi_wb_fini(&b);
}

static void test_waiters_take_at_most_a_quarter(void)
{
	static struct iscsi_wb_claim g[8], head, w[200];
	int waiting = 0, full = 0;

	setup(128 * MiB);
	fill(g, 8);
	CU_ASSERT_EQUAL(iscsi_wb_admit(&b, &head, 0, 32 * MiB, 0, NULL), ISCSI_WB_WAIT);
	/* 48 MiB free, but the oldest waiter's 32 MiB is kept */
	for (int i = 0; i < 3; i++)
		iscsi_wb_release(&b, &g[i]);
	for (int i = 0; i < 200; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		enum iscsi_wb_verdict v = iscsi_wb_admit(&b, &w[i], 0, 32 * MiB, 256 * KiB, NULL);
		CU_ASSERT_NOT_EQUAL(v, ISCSI_WB_GO);
		waiting += v == ISCSI_WB_WAIT;
		full += v == ISCSI_WB_FULL;
	}
	CU_ASSERT_EQUAL(waiting, 128); /* 128 x 256 KiB = 32 MiB = limit / 4 */
	CU_ASSERT_EQUAL(full, 72);
	CU_ASSERT_EQUAL(stats().waiting_bytes, 32 * MiB);
	/* once the granted writes are done, the waiters are served one after the other */
	for (int i = 3; i < 8; i++)
		iscsi_wb_release(&b, &g[i]);
	CU_ASSERT_TRUE(iscsi_wb_grant(&b, &head));
	iscsi_wb_release(&b, &head);
	for (int i = 0; i < 200; i++) {
		if (!w[i].waiting)
			continue;
		CU_ASSERT_TRUE_FATAL(iscsi_wb_grant(&b, &w[i]));
		CU_ASSERT_EQUAL(w[i].charged, 32 * MiB);
		iscsi_wb_release(&b, &w[i]);
	}
	CU_ASSERT_EQUAL(stats().held, 0);
	CU_ASSERT_EQUAL(stats().waiting, 0);
	CU_ASSERT_EQUAL(stats().waiting_bytes, 0);
	iscsi_wb_fini(&b);
}

static void test_no_deadlock_at_the_minimum(void)
{
	struct iscsi_wb_claim g[2], w[40];
	int waiting = 0;

	setup(HL_ISCSI_WRITE_LIMIT_MIN); /* 32 MiB: two largest transfers */
	fill(g, 1);
	struct iscsi_wb_claim part = {0};
	CU_ASSERT_EQUAL(iscsi_wb_admit(&b, &part, 0, 12 * MiB, 0, NULL), ISCSI_WB_GO);
	/* 4 MiB free; every further 16 MiB write waits with its 256 KiB unsolicited */
	for (int i = 0; i < 40; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		waiting += iscsi_wb_admit(&b, &w[i], 0, 16 * MiB, 256 * KiB, NULL) == ISCSI_WB_WAIT;
	}
	CU_ASSERT_EQUAL(waiting, 16); /* the 4 MiB left */
	CU_ASSERT_EQUAL(stats().held, 32 * MiB);
	iscsi_wb_release(&b, &g[0]);
	iscsi_wb_release(&b, &part);
	/* only the waiters' 4 MiB is held: the oldest fits, finishes, then the next... */
	for (int i = 0; i < 40; i++) {
		if (!w[i].waiting)
			continue;
		CU_ASSERT_TRUE_FATAL(iscsi_wb_grant(&b, &w[i]));
		iscsi_wb_release(&b, &w[i]);
	}
	CU_ASSERT_EQUAL(stats().held, 0);
	(void)g[1];
	iscsi_wb_fini(&b);
}

static void test_oldest_waiter_first(void)
{
	struct iscsi_wb_claim g[4], old = {0}, young = {0}, newcomer = {0};

	setup(64 * MiB);
	fill(g, 4);
	CU_ASSERT_EQUAL(iscsi_wb_admit(&b, &old, 0, 16 * MiB, 0, NULL), ISCSI_WB_WAIT);
	CU_ASSERT_EQUAL(iscsi_wb_admit(&b, &young, 0, 1 * MiB, 0, NULL), ISCSI_WB_WAIT);
	CU_ASSERT_TRUE(iscsi_wb_is_head(&b, &old));
	CU_ASSERT_FALSE(iscsi_wb_is_head(&b, &young));
	CU_ASSERT_FALSE(iscsi_wb_is_head(&b, &g[0]));
	iscsi_wb_release(&b, &g[0]); /* 16 MiB free: exactly what the oldest needs */
	CU_ASSERT_FALSE(iscsi_wb_grant(&b, &young));
	CU_ASSERT_EQUAL(iscsi_wb_admit(&b, &newcomer, 0, 1 * MiB, 0, NULL), ISCSI_WB_WAIT);
	CU_ASSERT_TRUE(iscsi_wb_grant(&b, &old));
	CU_ASSERT_TRUE(iscsi_wb_is_head(&b, &young)); /* next in line */
	iscsi_wb_release(&b, &g[1]);
	CU_ASSERT_TRUE(iscsi_wb_grant(&b, &young));
	CU_ASSERT_TRUE(iscsi_wb_grant(&b, &newcomer));
	iscsi_wb_release(&b, &old);
	iscsi_wb_release(&b, &young);
	iscsi_wb_release(&b, &newcomer);
	iscsi_wb_release(&b, &g[2]);
	iscsi_wb_release(&b, &g[3]);
	CU_ASSERT_EQUAL(stats().held, 0);
	CU_ASSERT_EQUAL(stats().peak, 64 * MiB);
	iscsi_wb_fini(&b);
}

static void test_release_while_waiting(void)
{
	struct iscsi_wb_claim g[4], w = {0};

	setup(64 * MiB);
	fill(g, 4);
	CU_ASSERT_EQUAL(iscsi_wb_admit(&b, &w, 0, 16 * MiB, 0, NULL), ISCSI_WB_WAIT);
	iscsi_wb_release(&b, &w); /* aborted, or its connection closed */
	CU_ASSERT_EQUAL(stats().waiting, 0);
	CU_ASSERT_FALSE(iscsi_wb_pressure(&b) && stats().held < 56 * MiB);
	for (int i = 0; i < 4; i++)
		iscsi_wb_release(&b, &g[i]);
	CU_ASSERT_EQUAL(stats().held, 0);
	iscsi_wb_fini(&b);
}

static void test_limits(void)
{
	CU_ASSERT_EQUAL(iscsi_wb_default_limit(24ull << 30), 3ull << 30);
	CU_ASSERT_EQUAL(iscsi_wb_default_limit(1ull << 30), HL_ISCSI_WRITE_LIMIT_DEFAULT_MIN);
	CU_ASSERT_EQUAL(iscsi_wb_default_limit(1ull << 40), HL_ISCSI_WRITE_LIMIT_DEFAULT_MAX);
	CU_ASSERT_EQUAL(iscsi_wb_conn_limit_for(32 * MiB), HL_SCSI_MAX_XFER);
	CU_ASSERT_EQUAL(iscsi_wb_conn_limit_for(512 * MiB), 128 * MiB);
	CU_ASSERT_EQUAL(iscsi_wb_conn_limit_for(8ull << 30), ISCSI_CONN_BUF_MAX);
	setup(1 * MiB);
	CU_ASSERT_EQUAL(stats().limit, HL_ISCSI_WRITE_LIMIT_MIN);
	iscsi_wb_set_limit(&b, 0);
	CU_ASSERT_TRUE(stats().limit >= HL_ISCSI_WRITE_LIMIT_DEFAULT_MIN);
	iscsi_wb_set_limit(&b, 128 * MiB);
	CU_ASSERT_EQUAL(stats().limit, 128 * MiB);
	CU_ASSERT_EQUAL(stats().conn_limit, 32 * MiB);
	CU_ASSERT_EQUAL(iscsi_wb_conn_limit(&b), 32 * MiB);
	iscsi_wb_fini(&b);
}

static void test_lower_limit_keeps_charges(void)
{
	struct iscsi_wb_claim g[4], w = {0};

	setup(64 * MiB);
	fill(g, 4);
	iscsi_wb_set_limit(&b, 32 * MiB);
	CU_ASSERT_EQUAL(stats().held, 64 * MiB);
	CU_ASSERT_EQUAL(iscsi_wb_admit(&b, &w, 0, 4096, 4096, NULL), ISCSI_WB_FULL);
	for (int i = 0; i < 4; i++)
		iscsi_wb_release(&b, &g[i]);
	CU_ASSERT_EQUAL(iscsi_wb_admit(&b, &w, 0, 4096, 4096, NULL), ISCSI_WB_GO);
	iscsi_wb_release(&b, &w);
	iscsi_wb_fini(&b);
}

static void test_waiters_above_a_lowered_limit_drain(void)
{
	static struct iscsi_wb_claim g[16], w[400];
	int waiting = 0, n = 0;

	setup(256 * MiB);
	fill(g, 16);
	/* the oldest waiter sends nothing unasked; the budget keeps 16 MiB for it */
	memset(&w[n], 0, sizeof(w[n]));
	CU_ASSERT_EQUAL(iscsi_wb_admit(&b, &w[n++], 0, 16 * MiB, 0, NULL), ISCSI_WB_WAIT);
	waiting++;
	/* as granted writes finish, waiters with 256 KiB of unsolicited data pile up */
	for (int k = 0; k < 4; k++) {
		iscsi_wb_release(&b, &g[k]);
		for (;;) {
			CU_ASSERT_FATAL(n < 400);
			memset(&w[n], 0, sizeof(w[n]));
			enum iscsi_wb_verdict v =
			    iscsi_wb_admit(&b, &w[n], 0, 16 * MiB, 256 * KiB, NULL);
			CU_ASSERT_NOT_EQUAL(v, ISCSI_WB_GO);
			n++;
			if (v != ISCSI_WB_WAIT)
				break;
			waiting++;
		}
	}
	CU_ASSERT_EQUAL(stats().waiting_bytes, 64 * MiB); /* the quarter */
	/* the limit drops below what the waiters hold; the granted finish */
	iscsi_wb_set_limit(&b, 32 * MiB);
	for (int i = 4; i < 16; i++)
		iscsi_wb_release(&b, &g[i]);
	/* the queue still drains, oldest first */
	int granted = 0;
	for (int i = 0; i < n; i++) {
		if (!w[i].waiting)
			continue;
		CU_ASSERT_TRUE_FATAL(iscsi_wb_grant(&b, &w[i]));
		granted++;
		iscsi_wb_release(&b, &w[i]);
	}
	CU_ASSERT_EQUAL(granted, waiting);
	CU_ASSERT_EQUAL(stats().held, 0);
	CU_ASSERT_EQUAL(stats().waiting, 0);
	iscsi_wb_fini(&b);
}

static const struct hl_test tests[] = {
    {"a granted WRITE charges its whole transfer", test_go_charges_whole_transfer},
    {"the per-connection cap answers TASK SET FULL", test_conn_cap_is_task_set_full},
    {"R2Ts wait until the budget frees", test_r2t_waits_until_budget_frees},
    {"a wholly unsolicited WRITE cannot wait", test_unsolicited_only_cannot_wait},
    {"waiters take at most a quarter; all finish", test_waiters_take_at_most_a_quarter},
    {"no deadlock at the smallest budget", test_no_deadlock_at_the_minimum},
    {"the oldest waiter goes first", test_oldest_waiter_first},
    {"a waiter released leaves the queue", test_release_while_waiting},
    {"limits: default, minimum, per connection", test_limits},
    {"a lower limit keeps what is charged", test_lower_limit_keeps_charges},
    {"waiters above a lowered limit still drain", test_waiters_above_a_lowered_limit_drain},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("wbudget", tests);
}
