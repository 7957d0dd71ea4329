/*
 * wbudget_ut.c - the write buffer budget's accounting (src/iscsi/wbudget.c):
 * what is charged when a WRITE arrives, who waits, who gets TASK SET FULL,
 * that waiters are served oldest first and can never fill the budget so
 * that nothing granted can finish, what one source may take (half, or its
 * share while others want some), the WRITE deadline, and the counters.
 */
#include <string.h>

#include "hl_test.h"
#include "iscsi/iscsi_internal.h"

#define MiB (1ull << 20)
#define KiB (1ull << 10)

static struct iscsi_wbudget b;
static uint64_t now_ns = 1000ull * 1000000000ull; /* the budget's clock, moved by the tests */

/* Source number i: 10.x.y.z. */
static struct iscsi_source source(unsigned i)
{
	struct iscsi_source k;

	memset(&k, 0, sizeof(k));
	k.b[0] = 2; /* AF_INET */
	k.b[1] = 10;
	k.b[2] = (uint8_t)(i >> 16);
	k.b[3] = (uint8_t)(i >> 8);
	k.b[4] = (uint8_t)i;
	return k;
}

/* A WRITE from source src (see iscsi_wb_admit). */
static enum iscsi_wb_verdict admit(struct iscsi_wb_claim *cl, unsigned src, uint64_t conn_promised,
                                   uint64_t need, uint64_t unasked)
{
	struct iscsi_source k = source(src);

	return iscsi_wb_admit(&b, cl, &k, conn_promised, need, unasked, now_ns, NULL);
}

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
	struct iscsi_source k = source(1);
	struct iscsi_wb_admit_info info;
	CU_ASSERT_EQUAL(iscsi_wb_admit(&b, &a, &k, 0, 1000, 0, now_ns, &info), ISCSI_WB_GO);
	cl = info.conn_limit;
	CU_ASSERT_EQUAL(info.source_cap, 32 * MiB); /* alone: half the budget */
	CU_ASSERT_EQUAL(stats().sources, 1);
	CU_ASSERT_EQUAL(a.need, 4096); /* rounded to 4 KiB */
	CU_ASSERT_EQUAL(a.charged, 4096);
	CU_ASSERT_EQUAL(cl, 16 * MiB); /* limit / 4 */
	CU_ASSERT_EQUAL(stats().held, 4096);
	iscsi_wb_release(&b, &a);
	iscsi_wb_release(&b, &a); /* idempotent */
	CU_ASSERT_EQUAL(stats().held, 0);
	CU_ASSERT_EQUAL(stats().peak, 4096);
	CU_ASSERT_EQUAL(stats().sources, 0);
	iscsi_wb_fini(&b);
}

static void test_conn_cap_is_task_set_full(void)
{
	struct iscsi_wb_claim a = {0};

	setup(64 * MiB);
	/* this connection already claims 12 MiB of its 16 MiB */
	CU_ASSERT_EQUAL(admit(&a, 1, 12 * MiB, 8 * MiB, 0), ISCSI_WB_FULL);
	CU_ASSERT_EQUAL(a.need, 0);
	CU_ASSERT_EQUAL(stats().held, 0);
	CU_ASSERT_EQUAL(stats().task_set_full, 1);
	CU_ASSERT_EQUAL(admit(&a, 1, 12 * MiB, 4 * MiB, 0), ISCSI_WB_GO);
	iscsi_wb_release(&b, &a);
	iscsi_wb_fini(&b);
}

/* Fill the budget with granted 16 MiB writes (as connections from n hosts would: 100, 101...). */
static void fill(struct iscsi_wb_claim *g, int n)
{
	for (int i = 0; i < n; i++) {
		memset(&g[i], 0, sizeof(g[i]));
		CU_ASSERT_EQUAL_FATAL(admit(&g[i], 100 + (unsigned)i, 0, 16 * MiB, 256 * KiB),
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
	CU_ASSERT_EQUAL(admit(&w, 1, 0, 1 * MiB, 64 * KiB), ISCSI_WB_FULL);
	/* (no room even for its immediate data while the budget is spent) */
	iscsi_wb_release(&b, &g[3]);
	struct iscsi_wb_claim g3 = {0};
	CU_ASSERT_EQUAL(admit(&g3, 103, 0, 15 * MiB, 0), ISCSI_WB_GO);
	/* 1 MiB left: a 4 MiB write with 64 KiB immediate data waits for its R2Ts */
	CU_ASSERT_EQUAL(admit(&w, 1, 0, 4 * MiB, 64 * KiB), ISCSI_WB_WAIT);
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
	CU_ASSERT_EQUAL(admit(&big, 103, 0, 16 * MiB - 64 * KiB, 0), ISCSI_WB_GO);
	/* 64 KiB left; a 256 KiB write sent wholly unsolicited has no R2T to hold back */
	CU_ASSERT_EQUAL(admit(&w, 1, 0, 256 * KiB, 256 * KiB), ISCSI_WB_FULL);
	CU_ASSERT_EQUAL(stats().task_set_full, 1);
	CU_ASSERT_EQUAL(stats().waiting, 0);
	iscsi_wb_release(&b, &big);
	for (int i = 0; i < 3; i++)
		iscsi_wb_release(&b, &g[i]);
	iscsi_wb_fini(&b);
}

static void test_waiters_take_at_most_a_quarter(void)
{
	static struct iscsi_wb_claim g[4], head, small, w[200];
	int waiting = 0, full = 0;

	setup(64 * MiB);
	fill(g, 4);
	CU_ASSERT_EQUAL(admit(&head, 1, 0, 16 * MiB, 0), ISCSI_WB_WAIT);
	/* 32 MiB free, 16 of them kept for the oldest waiter; a small write takes 4 KiB */
	iscsi_wb_release(&b, &g[0]);
	iscsi_wb_release(&b, &g[1]);
	CU_ASSERT_EQUAL(admit(&small, 2, 0, 4 * KiB, 4 * KiB), ISCSI_WB_GO);
	/* so no 16 MiB write fits, and the waiters' unsolicited data could take 16 MiB - 4 KiB */
	for (int i = 0; i < 200; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		enum iscsi_wb_verdict v = admit(&w[i], 1000 + (unsigned)i, 0, 16 * MiB, 256 * KiB);
		CU_ASSERT_NOT_EQUAL(v, ISCSI_WB_GO);
		waiting += v == ISCSI_WB_WAIT;
		full += v == ISCSI_WB_FULL;
	}
	CU_ASSERT_EQUAL(waiting, 64); /* 64 x 256 KiB = 16 MiB = limit / 4 */
	CU_ASSERT_EQUAL(full, 136);
	CU_ASSERT_EQUAL(stats().waiting_bytes, 16 * MiB);
	CU_ASSERT_EQUAL(stats().source_capped, 0); /* each host asked for one transfer */
	/* once the granted writes are done, the waiters are served one after the other */
	iscsi_wb_release(&b, &g[2]);
	iscsi_wb_release(&b, &g[3]);
	iscsi_wb_release(&b, &small);
	CU_ASSERT_TRUE(iscsi_wb_grant(&b, &head));
	iscsi_wb_release(&b, &head);
	for (int i = 0; i < 200; i++) {
		if (!w[i].waiting)
			continue;
		CU_ASSERT_TRUE_FATAL(iscsi_wb_grant(&b, &w[i]));
		CU_ASSERT_EQUAL(w[i].charged, 16 * MiB);
		iscsi_wb_release(&b, &w[i]);
	}
	CU_ASSERT_EQUAL(stats().held, 0);
	CU_ASSERT_EQUAL(stats().waiting, 0);
	CU_ASSERT_EQUAL(stats().waiting_bytes, 0);
	CU_ASSERT_EQUAL(stats().sources, 0);
	iscsi_wb_fini(&b);
}

static void test_no_deadlock_at_the_minimum(void)
{
	struct iscsi_wb_claim g[2], w[40];
	int waiting = 0;

	setup(HL_ISCSI_WRITE_LIMIT_MIN); /* 32 MiB: two largest transfers */
	fill(g, 1);
	struct iscsi_wb_claim part = {0};
	CU_ASSERT_EQUAL(admit(&part, 101, 0, 12 * MiB, 0), ISCSI_WB_GO);
	/* 4 MiB free; every further 16 MiB write waits with its 256 KiB unsolicited */
	for (int i = 0; i < 40; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		waiting +=
		    admit(&w[i], 1000 + (unsigned)i, 0, 16 * MiB, 256 * KiB) == ISCSI_WB_WAIT;
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
	CU_ASSERT_EQUAL(admit(&old, 1, 0, 16 * MiB, 0), ISCSI_WB_WAIT);
	CU_ASSERT_EQUAL(admit(&young, 2, 0, 1 * MiB, 0), ISCSI_WB_WAIT);
	CU_ASSERT_TRUE(iscsi_wb_is_head(&b, &old));
	CU_ASSERT_FALSE(iscsi_wb_is_head(&b, &young));
	CU_ASSERT_FALSE(iscsi_wb_is_head(&b, &g[0]));
	iscsi_wb_release(&b, &g[0]); /* 16 MiB free: exactly what the oldest needs */
	CU_ASSERT_FALSE(iscsi_wb_grant(&b, &young));
	CU_ASSERT_EQUAL(admit(&newcomer, 3, 0, 1 * MiB, 0), ISCSI_WB_WAIT);
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
	CU_ASSERT_EQUAL(admit(&w, 1, 0, 16 * MiB, 0), ISCSI_WB_WAIT);
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
	CU_ASSERT_EQUAL(admit(&w, 1, 0, 4096, 4096), ISCSI_WB_FULL);
	for (int i = 0; i < 4; i++)
		iscsi_wb_release(&b, &g[i]);
	CU_ASSERT_EQUAL(admit(&w, 1, 0, 4096, 4096), ISCSI_WB_GO);
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
	CU_ASSERT_EQUAL(admit(&w[n++], 1000, 0, 16 * MiB, 0), ISCSI_WB_WAIT);
	waiting++;
	/* as granted writes finish, waiters with 256 KiB of unsolicited data pile up */
	for (int k = 0; k < 4; k++) {
		iscsi_wb_release(&b, &g[k]);
		for (;;) {
			CU_ASSERT_FATAL(n < 400);
			memset(&w[n], 0, sizeof(w[n]));
			enum iscsi_wb_verdict v =
			    admit(&w[n], 1000 + (unsigned)n, 0, 16 * MiB, 256 * KiB);
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

/* Is every source entry gone (no claims, no refusal remembered)? */
static bool no_sources(void)
{
	for (unsigned i = 0; i < ISCSI_WB_SOURCE_BUCKETS; i++)
		if (!hl_list_empty(&b.sources[i]))
			return false;
	return hl_list_empty(&b.refused) && b.n_refused == 0 && b.n_refused_idle == 0 &&
	       b.n_active == 0 && b.n_wait_src == 0;
}

/*
 * The trickle attack of issue 24: one host's sessions ask for the whole
 * budget. It gets half; another host's 4 KiB and 64 KiB WRITEs go at once.
 */
static void test_one_source_holds_half(void)
{
	struct iscsi_wb_claim a[4], small = {0}, mid = {0};

	setup(64 * MiB);
	for (int i = 0; i < 4; i++)
		memset(&a[i], 0, sizeof(a[i]));
	CU_ASSERT_EQUAL(admit(&a[0], 1, 0, 16 * MiB, 0), ISCSI_WB_GO);
	CU_ASSERT_EQUAL(admit(&a[1], 1, 0, 16 * MiB, 0), ISCSI_WB_GO);
	/* half the budget: its further WRITEs are refused, whatever connection they come on */
	CU_ASSERT_EQUAL(admit(&a[2], 1, 0, 16 * MiB, 0), ISCSI_WB_SHARE);
	CU_ASSERT_EQUAL(admit(&a[3], 1, 0, 4 * KiB, 4 * KiB), ISCSI_WB_SHARE);
	CU_ASSERT_EQUAL(a[2].need, 0);
	CU_ASSERT_EQUAL(stats().source_capped, 2);
	CU_ASSERT_EQUAL(stats().task_set_full, 2);
	CU_ASSERT_EQUAL(stats().held, 32 * MiB);
	CU_ASSERT_EQUAL(stats().source_limit, 32 * MiB);
	CU_ASSERT_EQUAL(admit(&small, 2, 0, 4 * KiB, 4 * KiB), ISCSI_WB_GO);
	CU_ASSERT_EQUAL(admit(&mid, 2, 0, 64 * KiB, 0), ISCSI_WB_GO);
	CU_ASSERT_EQUAL(stats().sources, 2);
	/* as its WRITEs finish it may take its share again */
	iscsi_wb_release(&b, &a[0]);
	CU_ASSERT_EQUAL(admit(&a[2], 1, 0, 16 * MiB, 0), ISCSI_WB_GO);
	iscsi_wb_release(&b, &a[1]);
	iscsi_wb_release(&b, &a[2]);
	iscsi_wb_release(&b, &a[3]); /* refused: nothing to give back */
	iscsi_wb_release(&b, &small);
	iscsi_wb_release(&b, &mid);
	CU_ASSERT_EQUAL(stats().held, 0);
	CU_ASSERT_TRUE(no_sources());
	iscsi_wb_fini(&b);
}

/*
 * Two hosts fill the budget; a third one's 4 KiB WRITE finds it spent and
 * gets BUSY. From then on (ISCSI_WB_CONTEND_MS) each may promise 1/3: what
 * the first gives back is not taken again by it, the third gets in.
 */
static void test_share_while_another_is_refused(void)
{
	struct iscsi_wb_claim a[4], c[4], z = {0}, again = {0};

	setup(128 * MiB);
	for (int i = 0; i < 4; i++) {
		memset(&a[i], 0, sizeof(a[i]));
		memset(&c[i], 0, sizeof(c[i]));
		CU_ASSERT_EQUAL(admit(&a[i], 1, 0, 16 * MiB, 0), ISCSI_WB_GO);
		CU_ASSERT_EQUAL(admit(&c[i], 2, 0, 16 * MiB, 0), ISCSI_WB_GO);
	}
	CU_ASSERT_EQUAL(admit(&z, 3, 0, 4 * KiB, 4 * KiB), ISCSI_WB_FULL);
	CU_ASSERT_EQUAL(stats().source_capped, 0); /* that one is the budget's, not its share */
	iscsi_wb_release(&b, &a[3]);               /* 16 MiB free; host 1 still promises 48 */
	CU_ASSERT_EQUAL(admit(&again, 1, 0, 4 * KiB, 4 * KiB), ISCSI_WB_SHARE);
	CU_ASSERT_EQUAL(admit(&z, 3, 0, 4 * KiB, 4 * KiB), ISCSI_WB_GO);
	iscsi_wb_release(&b, &z);
	/* the refusal is forgotten after ISCSI_WB_CONTEND_MS: host 1 may have half again */
	now_ns += ISCSI_WB_CONTEND_MS * 1000000ull;
	CU_ASSERT_EQUAL(admit(&again, 1, 0, 4 * KiB, 4 * KiB), ISCSI_WB_GO);
	iscsi_wb_release(&b, &again);
	for (int i = 0; i < 4; i++) {
		iscsi_wb_release(&b, &a[i]);
		iscsi_wb_release(&b, &c[i]);
	}
	CU_ASSERT_EQUAL(stats().held, 0);
	CU_ASSERT_TRUE(no_sources());
	iscsi_wb_fini(&b);
}

/* A host that waits for R2T budget also holds the others to their share. */
static void test_share_while_another_waits(void)
{
	struct iscsi_wb_claim a[2], c[2], w = {0}, more = {0};

	setup(64 * MiB);
	for (int i = 0; i < 2; i++) {
		memset(&a[i], 0, sizeof(a[i]));
		memset(&c[i], 0, sizeof(c[i]));
		CU_ASSERT_EQUAL(admit(&a[i], 1, 0, 16 * MiB, 0), ISCSI_WB_GO);
		CU_ASSERT_EQUAL(admit(&c[i], 2, 0, 16 * MiB, 0), ISCSI_WB_GO);
	}
	CU_ASSERT_EQUAL(admit(&w, 3, 0, 1 * MiB, 0), ISCSI_WB_WAIT);
	iscsi_wb_release(&b, &a[1]);
	/* three hosts want budget: 64 / 3 = 21.3 MiB each; host 1 promises 16 */
	CU_ASSERT_EQUAL(admit(&more, 1, 0, 16 * MiB, 0), ISCSI_WB_SHARE);
	/* within it, and beside what the waiter needs: granted */
	CU_ASSERT_EQUAL(admit(&more, 1, 0, 4 * MiB, 0), ISCSI_WB_GO);
	CU_ASSERT_TRUE(iscsi_wb_is_head(&b, &w));
	CU_ASSERT_TRUE(iscsi_wb_grant(&b, &w));
	iscsi_wb_release(&b, &more);
	iscsi_wb_release(&b, &w);
	iscsi_wb_release(&b, &a[0]);
	iscsi_wb_release(&b, &c[0]);
	iscsi_wb_release(&b, &c[1]);
	CU_ASSERT_EQUAL(stats().held, 0);
	CU_ASSERT_TRUE(no_sources());
	iscsi_wb_fini(&b);
}

static void test_share_and_deadline_numbers(void)
{
	/* alone: half; N hosts wanting budget: 1/N; never under the largest transfer */
	CU_ASSERT_EQUAL(iscsi_wb_source_cap(3ull << 30, 1), 1536 * MiB);
	CU_ASSERT_EQUAL(iscsi_wb_source_cap(3ull << 30, 2), 1536 * MiB);
	CU_ASSERT_EQUAL(iscsi_wb_source_cap(3ull << 30, 12), 256 * MiB);
	CU_ASSERT_EQUAL(iscsi_wb_source_cap(64 * MiB, 3), 64 * MiB / 3);
	CU_ASSERT_EQUAL(iscsi_wb_source_cap(64 * MiB, 100), HL_SCSI_MAX_XFER);
	CU_ASSERT_EQUAL(iscsi_wb_source_cap(HL_ISCSI_WRITE_LIMIT_MIN, 1), HL_SCSI_MAX_XFER);
	/* 30 s, plus the size at 256 KiB/s */
	CU_ASSERT_EQUAL(iscsi_wb_deadline_ns(0), 30 * 1000000000ull);
	CU_ASSERT_EQUAL(iscsi_wb_deadline_ns(1 * MiB), 34 * 1000000000ull);
	CU_ASSERT_EQUAL(iscsi_wb_deadline_ns(HL_SCSI_MAX_XFER), 94 * 1000000000ull);
	CU_ASSERT_EQUAL(iscsi_wb_deadline_ns(64 * KiB), 30250000000ull);
}

/* Refused sources are remembered for a while, then forgotten (no entry left behind). */
static void test_refusals_expire(void)
{
	static struct iscsi_wb_claim g[4], r[50];

	setup(64 * MiB);
	fill(g, 4);
	for (int i = 0; i < 50; i++) {
		memset(&r[i], 0, sizeof(r[i]));
		CU_ASSERT_EQUAL(admit(&r[i], 500 + (unsigned)i, 0, 4 * KiB, 4 * KiB),
		                ISCSI_WB_FULL);
		now_ns += 100000000ull; /* one every 100 ms */
	}
	CU_ASSERT_EQUAL(b.n_refused, 50);
	CU_ASSERT_EQUAL(b.n_refused_idle, 50);
	/* 5 s after the first: the older ones go when the next WRITE arrives */
	now_ns += ISCSI_WB_CONTEND_MS * 1000000ull - 50 * 100000000ull + 1;
	CU_ASSERT_EQUAL(admit(&r[0], 500, 0, 4 * KiB, 4 * KiB), ISCSI_WB_FULL);
	CU_ASSERT_EQUAL(b.n_refused, 50); /* the first again, and 49 younger than 5 s */
	now_ns += ISCSI_WB_CONTEND_MS * 1000000ull;
	for (int i = 0; i < 4; i++)
		iscsi_wb_release(&b, &g[i]);
	CU_ASSERT_EQUAL(admit(&r[0], 500, 0, 4 * KiB, 4 * KiB), ISCSI_WB_GO);
	CU_ASSERT_EQUAL(b.n_refused, 0);
	iscsi_wb_release(&b, &r[0]);
	CU_ASSERT_TRUE(no_sources());
	iscsi_wb_fini(&b);
}

/*
 * Reactors read the clock before they take the budget's lock, so a WRITE
 * may come with a time earlier than the refusal another reactor stored
 * just before. That must not wrap the refusal's age and forget it: host 1
 * would take back half the budget while host 3 is still kept out.
 */
static void test_time_read_before_the_lock(void)
{
	struct iscsi_wb_claim a[4], c[4], z = {0}, again = {0};
	struct iscsi_source k = source(1);

	setup(128 * MiB);
	for (int i = 0; i < 4; i++) {
		memset(&a[i], 0, sizeof(a[i]));
		memset(&c[i], 0, sizeof(c[i]));
		CU_ASSERT_EQUAL(admit(&a[i], 1, 0, 16 * MiB, 0), ISCSI_WB_GO);
		CU_ASSERT_EQUAL(admit(&c[i], 2, 0, 16 * MiB, 0), ISCSI_WB_GO);
	}
	now_ns += 1000000ull; /* host 3 refused on one reactor at t + 1 ms ... */
	CU_ASSERT_EQUAL(admit(&z, 3, 0, 4 * KiB, 4 * KiB), ISCSI_WB_FULL);
	iscsi_wb_release(&b, &a[3]);
	/* ... host 1's WRITE on another read the clock at t, before it */
	CU_ASSERT_EQUAL(
	    iscsi_wb_admit(&b, &again, &k, 0, 4 * KiB, 4 * KiB, now_ns - 1000000ull, NULL),
	    ISCSI_WB_SHARE);
	CU_ASSERT_EQUAL(b.n_refused, 1);
	CU_ASSERT_EQUAL(admit(&z, 3, 0, 4 * KiB, 4 * KiB), ISCSI_WB_GO);
	iscsi_wb_release(&b, &z);
	for (int i = 0; i < 4; i++) {
		iscsi_wb_release(&b, &a[i]);
		iscsi_wb_release(&b, &c[i]);
	}
	CU_ASSERT_EQUAL(stats().held, 0);
	now_ns += ISCSI_WB_CONTEND_MS * 1000000ull;
	CU_ASSERT_EQUAL(admit(&again, 1, 0, 4 * KiB, 4 * KiB), ISCSI_WB_GO);
	iscsi_wb_release(&b, &again);
	CU_ASSERT_TRUE(no_sources());
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
    {"one source holds at most half; another host's WRITEs go", test_one_source_holds_half},
    {"a host refused for want of budget: the others get 1/N", test_share_while_another_is_refused},
    {"a host waiting for R2T budget: the others get 1/N", test_share_while_another_waits},
    {"share and deadline numbers", test_share_and_deadline_numbers},
    {"refused sources are forgotten after a while", test_refusals_expire},
    {"a time read before the lock never forgets a refusal", test_time_read_before_the_lock},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("wbudget", tests);
}
