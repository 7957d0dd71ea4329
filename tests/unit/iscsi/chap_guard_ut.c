/*
 * chap_guard_ut.c - the CHAP guessing throttle: free failures, doubling
 * back-off up to its cap, one budget per secret whatever the initiator
 * names and addresses, known hosts with a budget of their own, no new free
 * tries from a right answer, expiry, responses checked at the same time,
 * bounded tables, and what gets logged one by one or summarized.
 */
#include "iscsi/chap_guard.h"

#include "hl_test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S  (1000000000ull)
#define MS (1000000ull)

static struct chap_guard *g;

static struct sockaddr_storage v4(const char *a)
{
	struct sockaddr_storage ss;
	struct sockaddr_in *in = (struct sockaddr_in *)&ss;

	memset(&ss, 0, sizeof(ss));
	in->sin_family = AF_INET;
	inet_pton(AF_INET, a, &in->sin_addr);
	return ss;
}

static struct sockaddr_storage v6(const char *a)
{
	struct sockaddr_storage ss;
	struct sockaddr_in6 *in = (struct sockaddr_in6 *)&ss;

	memset(&ss, 0, sizeof(ss));
	in->sin6_family = AF_INET6;
	inet_pton(AF_INET6, a, &in->sin6_addr);
	return ss;
}

/* the i-th of many source addresses */
static struct sockaddr_storage nth(int i)
{
	char a[32];

	snprintf(a, sizeof(a), "10.%d.%d.%d", (i >> 16) & 255, (i >> 8) & 255, i & 255);
	return v4(a);
}

static void setup(void)
{
	g = malloc(sizeof(*g)); /* ~250 KiB: not on the stack */
	chap_guard_init(g);
}

static void teardown(void)
{
	chap_guard_fini(g);
	free(g);
}

/* allow, then (if allowed) a wrong answer: @return whether it was checked */
static bool guess(const char *scope, const char *name, const struct sockaddr_storage *a,
                  uint64_t now, struct chap_guard_verdict *v)
{
	if (!chap_guard_allow(g, scope, name, a, now, v))
		return false;
	chap_guard_failed(g, scope, name, a, now, v);
	return true;
}

/* Three wrong responses are free; then 1 s, 2 s, 4 s ... capped at 30 s. */
static void test_backoff_doubles_to_cap(void)
{
	struct sockaddr_storage a = v4("10.0.0.1");
	struct chap_guard_verdict v;
	uint64_t now = 1000 * S, f, t;

	setup();
	for (int i = 0; i < 2; i++) {
		CU_ASSERT_TRUE(guess("iqn.t", "iqn.x", &a, now, &v));
		CU_ASSERT_EQUAL(v.wait_ms, 0);
	}
	CU_ASSERT_TRUE(guess("iqn.t", "iqn.x", &a, now, &v));
	CU_ASSERT_EQUAL(v.failures, 3);
	CU_ASSERT_FALSE(v.known);
	CU_ASSERT_EQUAL(v.wait_ms, 1000);
	/* refused unchecked during the back-off, which does not grow meanwhile */
	CU_ASSERT_FALSE(chap_guard_allow(g, "iqn.t", "iqn.x", &a, now + 500 * MS, &v));
	CU_ASSERT_EQUAL(v.wait_ms, 500);
	CU_ASSERT_FALSE(chap_guard_allow(g, "iqn.t", "iqn.x", &a, now + 999 * MS, &v));
	now += 1000 * MS;
	uint64_t want[] = {2000, 4000, 8000, 16000, 30000, 30000, 30000};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		CU_ASSERT_TRUE(guess("iqn.t", "iqn.x", &a, now, &v));
		CU_ASSERT_EQUAL(v.wait_ms, want[i]);
		now += v.wait_ms * MS;
	}
	chap_guard_counters(g, &f, &t);
	CU_ASSERT_EQUAL(f, 10);
	CU_ASSERT_EQUAL(t, 2);
	teardown();
}

/*
 * The budget is the secret's: a new initiator name and a new address for
 * every guess (any number of them) change nothing. A flood of guesses from
 * 4,096 addresses, each under a new name, over two minutes: 8 checked in
 * the first minute, then one per 30 s.
 */
static void test_secret_budget_whatever_spread(void)
{
	struct chap_guard_verdict v;
	char name[48];
	uint64_t t0 = 50 * S, now;
	unsigned checked = 0, first_minute = 0;

	setup();
	for (int i = 0; i < 3; i++) {
		struct sockaddr_storage a = nth(i);
		snprintf(name, sizeof(name), "iqn.rot-%d", i);
		CU_ASSERT_TRUE(guess("iqn.t", name, &a, t0, &v));
	}
	struct sockaddr_storage fresh = nth(999);
	CU_ASSERT_FALSE(chap_guard_allow(g, "iqn.t", "iqn.never-seen", &fresh, t0, &v));
	teardown();

	setup();
	for (int i = 0; i < 120000; i++) { /* 1,000 a second for two minutes */
		struct sockaddr_storage a = nth(i % 4096);
		now = t0 + (uint64_t)i * MS;
		snprintf(name, sizeof(name), "iqn.flood-%d", i);
		if (guess("iqn.t", name, &a, now, &v)) {
			checked++;
			first_minute += now - t0 < 60 * S;
		}
	}
	/* 3 free at once, then at 1, 3, 7, 15, 31 s (8 in the first minute), 61, 91 s */
	CU_ASSERT_EQUAL(first_minute, 8);
	CU_ASSERT_EQUAL(checked, 10);
	teardown();
}

/*
 * A host that passed (same name, same address) has a budget of its own:
 * guessing under its name from elsewhere, however much, does not lock it
 * out, and its own mistakes do not touch the others' budget. Another name
 * from its address, or its name from another address (IPv6: even in the
 * same /64), is not that host.
 */
static void test_known_host_own_budget(void)
{
	struct sockaddr_storage host = v4("192.0.2.10"), other = v4("192.0.2.11");
	struct chap_guard_verdict v;
	uint64_t now = 70 * S;

	setup();
	CU_ASSERT_TRUE(chap_guard_allow(g, "iqn.t", "iqn.victim", &host, now, &v));
	CU_ASSERT_FALSE(v.known);
	chap_guard_passed(g, "iqn.t", "iqn.victim", &host, now);
	/* it mistypes once */
	CU_ASSERT_TRUE(guess("iqn.t", "iqn.victim", &host, now, &v));
	CU_ASSERT_TRUE(v.known);
	CU_ASSERT_EQUAL(v.failures, 1);
	/* guessing under its name from 1,000 fresh addresses: the secret's budget is spent */
	for (int i = 0; i < 1000; i++) {
		struct sockaddr_storage a = nth(i);
		guess("iqn.t", "iqn.victim", &a, now + (uint64_t)i * MS, &v);
	}
	now += S; /* the third failure (at +2 ms) opened 1 s of back-off */
	CU_ASSERT_FALSE(chap_guard_allow(g, "iqn.t", "iqn.victim", &other, now, &v));
	CU_ASSERT_FALSE(chap_guard_allow(g, "iqn.t", "iqn.someone", &host, now, &v));
	/* ... but the known host is checked, and its right answer lets it in */
	CU_ASSERT_TRUE(chap_guard_allow(g, "iqn.t", "iqn.victim", &host, now, &v));
	CU_ASSERT_TRUE(v.known);
	chap_guard_passed(g, "iqn.t", "iqn.victim", &host, now);
	/* its own failures: its own back-off, nobody else's */
	for (int i = 0; i < 3; i++)
		CU_ASSERT_TRUE(guess("iqn.t", "iqn.victim", &host, now, &v));
	CU_ASSERT_TRUE(v.known);
	CU_ASSERT_EQUAL(v.wait_ms, 1000);
	CU_ASSERT_FALSE(chap_guard_allow(g, "iqn.t", "iqn.victim", &host, now, &v));
	teardown();

	/* the known host's failures leave the budget of the others alone */
	setup();
	now = 80 * S;
	chap_guard_passed(g, "iqn.t", "iqn.victim", &host, now);
	for (int i = 0; i < 5; i++)
		guess("iqn.t", "iqn.victim", &host, now, &v);
	CU_ASSERT_TRUE(chap_guard_allow(g, "iqn.t", "iqn.new-host", &other, now, &v));
	CU_ASSERT_EQUAL(v.failures, 0);
	teardown();

	/* IPv6: known by the whole address, not its /64 */
	setup();
	struct sockaddr_storage h6 = v6("2001:db8:1:2::10"), n6 = v6("2001:db8:1:2::11");
	chap_guard_passed(g, "iqn.t", "iqn.v6", &h6, now);
	for (int i = 0; i < 3; i++)
		guess("iqn.t", "iqn.x", &n6, now, &v);
	CU_ASSERT_FALSE(chap_guard_allow(g, "iqn.t", "iqn.v6", &n6, now, &v));
	CU_ASSERT_TRUE(chap_guard_allow(g, "iqn.t", "iqn.v6", &h6, now, &v));
	CU_ASSERT_TRUE(v.known);
	/* an IPv4-mapped address is the same host as its IPv4 form */
	struct sockaddr_storage m = v6("::ffff:192.0.2.10");
	chap_guard_passed(g, "iqn.t", "iqn.v4", &host, now);
	CU_ASSERT_TRUE(chap_guard_allow(g, "iqn.t", "iqn.v4", &m, now, &v));
	CU_ASSERT_TRUE(v.known);
	teardown();
}

/* Per secret; a right answer never resets the others' budget; budgets expire. */
static void test_reset_and_expiry(void)
{
	struct sockaddr_storage a = v4("10.0.0.1"), b = v4("10.0.0.2");
	struct chap_guard_verdict v;
	uint64_t now = 7 * S;

	setup();
	for (int i = 0; i < 3; i++)
		guess("iqn.t", "iqn.x", &a, now, &v);
	CU_ASSERT_FALSE(chap_guard_allow(g, "iqn.t", "iqn.y", &b, now, &v));
	/* another target's secret is not throttled */
	CU_ASSERT_TRUE(chap_guard_allow(g, "iqn.other", "iqn.x", &a, now, &v));
	chap_guard_passed(g, "iqn.other", "iqn.x", &a, now);
	CU_ASSERT_FALSE(chap_guard_allow(g, "iqn.t", "iqn.x", &a, now, &v));
	/* a host passing this secret (after the back-off) does not reset the others' budget */
	now += 1 * S;
	CU_ASSERT_TRUE(chap_guard_allow(g, "iqn.t", "iqn.good", &b, now, &v));
	chap_guard_passed(g, "iqn.t", "iqn.good", &b, now);
	CU_ASSERT_TRUE(guess("iqn.t", "iqn.x", &a, now, &v));
	CU_ASSERT_EQUAL(v.failures, 4);
	CU_ASSERT_EQUAL(v.wait_ms, 2000);
	/* long after the last failure the budget starts afresh */
	now += (uint64_t)CHAP_GUARD_FORGET_S * S + S;
	CU_ASSERT_TRUE(chap_guard_allow(g, "iqn.t", "iqn.x", &a, now, &v));
	CU_ASSERT_EQUAL(v.failures, 0);
	teardown();
}

/*
 * Two responses checked at once (two reactors) must not both slip into the
 * back-off the first one opens; while failures are free they may.
 */
static void test_checked_at_once(void)
{
	struct sockaddr_storage a = v4("10.0.0.1"), b = v4("10.0.0.2");
	struct chap_guard_verdict v;
	uint64_t now = 9 * S;

	setup();
	CU_ASSERT_TRUE(chap_guard_allow(g, "iqn.t", "iqn.a", &a, now, &v));
	CU_ASSERT_TRUE(chap_guard_allow(g, "iqn.t", "iqn.b", &b, now, &v));
	chap_guard_failed(g, "iqn.t", "iqn.a", &a, now, &v);
	chap_guard_failed(g, "iqn.t", "iqn.b", &b, now, &v);
	/* the third may open a back-off: a fourth waits while it is checked */
	CU_ASSERT_TRUE(chap_guard_allow(g, "iqn.t", "iqn.a", &a, now, &v));
	CU_ASSERT_FALSE(chap_guard_allow(g, "iqn.t", "iqn.b", &b, now + MS, &v));
	CU_ASSERT_TRUE(v.wait_ms > 0);
	chap_guard_failed(g, "iqn.t", "iqn.a", &a, now + 2 * MS, &v);
	CU_ASSERT_FALSE(chap_guard_allow(g, "iqn.t", "iqn.b", &b, now + 3 * MS, &v));
	/* a check that never reports back holds the others for a second at most */
	now += 2 * S;
	CU_ASSERT_TRUE(chap_guard_allow(g, "iqn.t", "iqn.a", &a, now, &v));
	CU_ASSERT_TRUE(chap_guard_allow(g, "iqn.t", "iqn.b", &b,
	                                now + CHAP_GUARD_CHECKING_MS * MS, &v));
	teardown();
}

/*
 * Memory is fixed. Known hosts: the least recent goes, and guessers cannot
 * push one out (only a right answer adds one). Secrets: a slot is never
 * taken from a live budget; a secret that finds none is refused.
 */
static void test_tables_bounded(void)
{
	struct chap_guard_verdict v;
	char name[48];
	uint64_t now = 11 * S;

	setup();
	struct sockaddr_storage host = v4("192.0.2.1");
	chap_guard_passed(g, "iqn.t", "iqn.first", &host, now);
	for (int i = 0; i < 100000; i++) { /* guessers' failures do not touch the known hosts */
		struct sockaddr_storage a = nth(i);
		snprintf(name, sizeof(name), "iqn.flood-%d", i);
		chap_guard_failed(g, "iqn.t", name, &a, now, &v);
	}
	CU_ASSERT_TRUE(chap_guard_allow(g, "iqn.t", "iqn.first", &host, now, &v));
	CU_ASSERT_TRUE(v.known);
	for (int i = 0; i < 2 * CHAP_GUARD_KNOWN; i++) {
		struct sockaddr_storage a = nth(i);
		snprintf(name, sizeof(name), "iqn.host-%d", i);
		chap_guard_passed(g, "iqn.t", name, &a, now + 1 + (uint64_t)i);
	}
	struct sockaddr_storage last = nth(2 * CHAP_GUARD_KNOWN - 1);
	snprintf(name, sizeof(name), "iqn.host-%d", 2 * CHAP_GUARD_KNOWN - 1);
	chap_guard_allow(g, "iqn.t", name, &last, now, &v);
	CU_ASSERT_TRUE(v.known);
	chap_guard_allow(g, "iqn.t", "iqn.first", &host, now, &v);
	CU_ASSERT_FALSE(v.known);
	teardown();

	setup();
	struct sockaddr_storage a = v4("10.0.0.1");
	for (int i = 0; i < CHAP_GUARD_SECRETS; i++) {
		snprintf(name, sizeof(name), "iqn.target-%d", i);
		chap_guard_failed(g, name, "iqn.x", &a, now, &v);
		CU_ASSERT_EQUAL(v.failures, 1);
	}
	CU_ASSERT_FALSE(chap_guard_allow(g, "iqn.one-too-many", "iqn.x", &a, now, &v));
	CU_ASSERT_TRUE(chap_guard_allow(g, "iqn.target-7", "iqn.x", &a, now, &v));
	CU_ASSERT_EQUAL(v.failures, 1);
	/* once forgotten, a slot serves another secret */
	now += (uint64_t)CHAP_GUARD_FORGET_S * S + S;
	CU_ASSERT_TRUE(guess("iqn.one-too-many", "iqn.x", &a, now, &v));
	CU_ASSERT_EQUAL(v.failures, 1);
	teardown();
}

/*
 * The first few events of an episode are logged one by one, then one
 * summary per period (10 s, then 20 s ...), and a line when it ends; an
 * episode short enough to be logged whole needs no summary.
 */
static void test_log_summaries(void)
{
	struct sockaddr_storage a = v4("10.0.0.1");
	struct chap_guard_verdict v;
	struct chap_guard_summary s;
	uint64_t now = 100 * S;
	int logged = 0;

	setup();
	for (int i = 0; i < 2; i++)
		guess("iqn.t", "iqn.x", &a, now, &v);
	CU_ASSERT_TRUE(v.log);
	CU_ASSERT_FALSE(chap_guard_log_due(g, now + 5 * S, &s));
	CU_ASSERT_FALSE(chap_guard_log_due(g, now + 11 * S, &s)); /* ended, all logged */
	CU_ASSERT_FALSE(chap_guard_log_due(g, now + 12 * S, &s));
	teardown();

	setup();
	for (int i = 0; i < 1000; i++) { /* 100 a second for 10 s */
		struct sockaddr_storage x = nth(i);
		uint64_t t = now + (uint64_t)i * 10 * MS;
		if (!chap_guard_allow(g, "iqn.t", "iqn.x", &x, t, &v)) {
			logged += v.log;
			continue;
		}
		chap_guard_failed(g, "iqn.t", "iqn.x", &x, t, &v);
		logged += v.log;
		CU_ASSERT_FALSE(chap_guard_log_due(g, t, &s));
	}
	CU_ASSERT_EQUAL(logged, CHAP_GUARD_LOG_DETAIL);
	CU_ASSERT_TRUE(chap_guard_log_due(g, now + 10 * S, &s));
	CU_ASSERT_FALSE(s.ended);
	CU_ASSERT_EQUAL(s.failed + s.throttled, 1000 - CHAP_GUARD_LOG_DETAIL);
	CU_ASSERT_EQUAL(s.period_s, 10);
	CU_ASSERT_STRING_EQUAL(s.initiator, "iqn.x");
	CU_ASSERT_STRING_EQUAL(s.scope, "iqn.t");
	/* the next period is 20 s */
	struct sockaddr_storage y = v4("10.9.9.9");
	/* (checked at 0, 1.02, 3.02 and 7.02 s: the back-off ends at 15.02 s) */
	CU_ASSERT_TRUE(guess("iqn.t", "iqn.y", &y, now + 16 * S, &v));
	CU_ASSERT_FALSE(v.log);
	CU_ASSERT_FALSE(chap_guard_log_due(g, now + 20 * S, &s));
	CU_ASSERT_FALSE(chap_guard_log_due(g, now + 25 * S, &s));
	/* quiet for 10 s after its last event: it ends, with its totals */
	CU_ASSERT_TRUE(chap_guard_log_due(g, now + 26 * S, &s));
	CU_ASSERT_TRUE(s.ended);
	CU_ASSERT_EQUAL(s.ep_failed + s.ep_thr, 1001);
	CU_ASSERT_EQUAL(s.ep_s, 16);
	CU_ASSERT_FALSE(chap_guard_log_due(g, now + 40 * S, &s));
	/* the next episode is logged one by one again */
	CU_ASSERT_TRUE(guess("iqn.t", "iqn.x", &a, now + 41 * S, &v));
	CU_ASSERT_TRUE(v.log);
	teardown();
}

/*
 * Reactors read the clock before they take the guard's lock, so a call may
 * come with a time earlier than one another reactor already stored. That
 * must not wrap a difference: forget a budget, ignore a check in flight, or
 * end an episode in the middle of a flood (seen in CI: "episode over after
 * 4 s" while 12,562 guesses went on, and a log line per guess after it).
 */
static void test_time_read_before_the_lock(void)
{
	struct sockaddr_storage a = v4("10.0.0.1"), b = v4("10.0.0.2");
	struct chap_guard_verdict v;
	struct chap_guard_summary s;
	uint64_t t = 200 * S;

	setup();
	for (int i = 0; i < 3; i++) /* the third opens 1 s of back-off at t + 1 ms */
		guess("iqn.t", "iqn.x", &a, t + MS, &v);
	CU_ASSERT_EQUAL(v.wait_ms, 1000);
	/* a call that read the clock at t, just before: still in the back-off */
	CU_ASSERT_FALSE(chap_guard_allow(g, "iqn.t", "iqn.y", &b, t, &v));
	CU_ASSERT_EQUAL(v.failures, 3);
	CU_ASSERT_FALSE(chap_guard_log_due(g, t, &s)); /* the episode goes on */
	for (int i = 0; i < 10; i++)
		chap_guard_allow(g, "iqn.t", "iqn.y", &b, t + 2 * MS, &v);
	CU_ASSERT_FALSE(v.log);
	CU_ASSERT_FALSE(chap_guard_log_due(g, t + MS, &s));
	CU_ASSERT_TRUE(chap_guard_log_due(g, t + 11 * S, &s));
	CU_ASSERT_TRUE(s.ended);
	teardown();

	/* a check in flight since t + 1 ms holds a response whose time is t */
	setup();
	for (int i = 0; i < 2; i++)
		guess("iqn.t", "iqn.x", &a, t, &v);
	CU_ASSERT_TRUE(chap_guard_allow(g, "iqn.t", "iqn.x", &a, t + MS, &v));
	CU_ASSERT_FALSE(chap_guard_allow(g, "iqn.t", "iqn.y", &b, t, &v));
	CU_ASSERT_TRUE(v.wait_ms > 0);
	teardown();
}

static const struct hl_test tests[] = {
	{"three free failures, then 1 s doubling up to 30 s", test_backoff_doubles_to_cap},
	{"the secret's budget holds whatever the names and addresses",
	 test_secret_budget_whatever_spread},
	{"a host that passed keeps a budget of its own", test_known_host_own_budget},
	{"per secret; a right answer resets no one else; expiry", test_reset_and_expiry},
	{"responses checked at once do not slip into a back-off", test_checked_at_once},
	{"the tables stay bounded", test_tables_bounded},
	{"the first events one by one, then summaries", test_log_summaries},
	{"a time read before the lock never wraps a difference", test_time_read_before_the_lock},
	{NULL, NULL},
};

int main(void)
{
	return hl_test_run("chap_guard", tests);
}
