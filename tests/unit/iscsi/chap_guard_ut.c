/*
 * chap_guard_ut.c - the CHAP guessing throttle: free failures, doubling
 * back-off up to its cap, names and addresses counted apart (IPv6 by /64)
 * and per secret, reset by a right response, expiry, and a table that
 * stays bounded.
 */
#include "iscsi/chap_guard.h"

#include "hl_test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#define S (1000000000ull)
#define MS (1000000ull)

static struct chap_guard g;

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

static void setup(void)
{
	chap_guard_init(&g);
}

static void teardown(void)
{
	chap_guard_fini(&g);
}

/* Three wrong responses are free; then 1 s, 2 s, 4 s ... capped at 30 s. */
static void test_backoff_doubles_to_cap(void)
{
	struct sockaddr_storage a = v4("10.0.0.1");
	struct chap_guard_verdict v;
	uint64_t now = 1000 * S, f, t;

	setup();
	for (int i = 0; i < 2; i++) {
		CU_ASSERT_TRUE(chap_guard_allow(&g, "iqn.t", "iqn.x", &a, now, &v));
		chap_guard_failed(&g, "iqn.t", "iqn.x", &a, now, &v);
		CU_ASSERT_EQUAL(v.wait_ms, 0);
	}
	CU_ASSERT_TRUE(chap_guard_allow(&g, "iqn.t", "iqn.x", &a, now, &v));
	chap_guard_failed(&g, "iqn.t", "iqn.x", &a, now, &v);
	CU_ASSERT_EQUAL(v.name_failures, 3);
	CU_ASSERT_EQUAL(v.wait_ms, 1000);
	/* refused unchecked during the back-off, which does not grow meanwhile */
	CU_ASSERT_FALSE(chap_guard_allow(&g, "iqn.t", "iqn.x", &a, now + 500 * MS, &v));
	CU_ASSERT_EQUAL(v.wait_ms, 500);
	CU_ASSERT_FALSE(chap_guard_allow(&g, "iqn.t", "iqn.x", &a, now + 999 * MS, &v));
	now += 1000 * MS;
	uint64_t want[] = {2000, 4000, 8000, 16000, 30000, 30000, 30000};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		CU_ASSERT_TRUE(chap_guard_allow(&g, "iqn.t", "iqn.x", &a, now, &v));
		chap_guard_failed(&g, "iqn.t", "iqn.x", &a, now, &v);
		CU_ASSERT_EQUAL(v.wait_ms, want[i]);
		now += v.wait_ms * MS;
	}
	chap_guard_counters(&g, &f, &t);
	CU_ASSERT_EQUAL(f, 10);
	CU_ASSERT_EQUAL(t, 2);
	teardown();
}

/*
 * Another name from the same address: still throttled. The same name from
 * elsewhere: throttled only where that address failed too (a name is no
 * secret: guessing under a host's name must not lock the host out).
 */
static void test_names_and_addresses_apart(void)
{
	struct sockaddr_storage a = v4("10.0.0.1"), b = v4("10.0.0.2");
	struct chap_guard_verdict v;
	char name[32];
	uint64_t now = 5 * S;

	setup();
	for (int i = 0; i < 3; i++) { /* one address, a new name each time */
		snprintf(name, sizeof(name), "iqn.rot-%d", i);
		chap_guard_failed(&g, "iqn.t", name, &a, now, &v);
	}
	CU_ASSERT_EQUAL(v.addr_failures, 3);
	CU_ASSERT_FALSE(chap_guard_allow(&g, "iqn.t", "iqn.rot-new", &a, now, &v));
	CU_ASSERT_TRUE(chap_guard_allow(&g, "iqn.t", "iqn.rot-new", &b, now, &v));
	teardown();

	setup();
	for (int i = 0; i < 3; i++) { /* one name, a new address each time */
		char addr[32];
		snprintf(addr, sizeof(addr), "10.1.0.%d", i + 1);
		struct sockaddr_storage x = v4(addr);
		chap_guard_failed(&g, "iqn.t", "iqn.one", &x, now, &v);
	}
	/* b never failed: the victim's own host is still checked */
	CU_ASSERT_TRUE(chap_guard_allow(&g, "iqn.t", "iqn.one", &b, now, &v));
	CU_ASSERT_TRUE(chap_guard_allow(&g, "iqn.t", "iqn.other", &b, now, &v));
	/* one wrong answer from b: now the name's back-off holds b too */
	chap_guard_failed(&g, "iqn.t", "iqn.one", &b, now, &v);
	CU_ASSERT_FALSE(chap_guard_allow(&g, "iqn.t", "iqn.one", &b, now, &v));
	CU_ASSERT_TRUE(chap_guard_allow(&g, "iqn.t", "iqn.other", &b, now, &v));
	teardown();

	/* IPv6: the addresses of one /64 are one source; another /64 is not */
	setup();
	struct sockaddr_storage p1 = v6("2001:db8:1:2::1"), p2 = v6("2001:db8:1:2::ffff:7"),
	                        q = v6("2001:db8:1:3::1");
	for (int i = 0; i < 3; i++) {
		snprintf(name, sizeof(name), "iqn.v6-%d", i);
		chap_guard_failed(&g, "iqn.t", name, i % 2 ? &p1 : &p2, now, &v);
	}
	CU_ASSERT_FALSE(chap_guard_allow(&g, "iqn.t", "iqn.v6-new", &p2, now, &v));
	CU_ASSERT_TRUE(chap_guard_allow(&g, "iqn.t", "iqn.v6-new", &q, now, &v));
	teardown();
}

/* Counts are per secret; a right response clears that name and address; entries expire. */
static void test_reset_and_expiry(void)
{
	struct sockaddr_storage a = v4("10.0.0.1");
	struct chap_guard_verdict v;
	uint64_t now = 7 * S;

	setup();
	for (int i = 0; i < 3; i++)
		chap_guard_failed(&g, "iqn.t", "iqn.x", &a, now, &v);
	/* a right answer for another target's secret clears nothing here */
	chap_guard_passed(&g, "iqn.other", "iqn.x", &a);
	CU_ASSERT_FALSE(chap_guard_allow(&g, "iqn.t", "iqn.x", &a, now, &v));
	CU_ASSERT_EQUAL(v.name_failures, 3);
	CU_ASSERT_FALSE(chap_guard_allow(&g, "iqn.t", "iqn.y", &a, now, &v));
	/* counts are per secret: the other target is not throttled */
	CU_ASSERT_TRUE(chap_guard_allow(&g, "iqn.other", "iqn.x", &a, now, &v));
	/* a right answer for this secret clears the name and the address */
	chap_guard_passed(&g, "iqn.t", "iqn.x", &a);
	CU_ASSERT_TRUE(chap_guard_allow(&g, "iqn.t", "iqn.x", &a, now, &v));
	CU_ASSERT_EQUAL(v.name_failures, 0);
	CU_ASSERT_EQUAL(v.addr_failures, 0);
	/* long after the last failure everything is forgotten */
	for (int i = 0; i < 3; i++)
		chap_guard_failed(&g, "iqn.t", "iqn.x", &a, now, &v);
	CU_ASSERT_FALSE(chap_guard_allow(&g, "iqn.t", "iqn.x", &a, now, &v));
	now += (uint64_t)CHAP_GUARD_FORGET_S * S + S;
	CU_ASSERT_TRUE(chap_guard_allow(&g, "iqn.t", "iqn.x", &a, now, &v));
	CU_ASSERT_EQUAL(v.addr_failures, 0);
	teardown();
}

/* Many more sources than slots: memory is fixed; the newest failures are kept. */
static void test_table_bounded(void)
{
	struct chap_guard_verdict v;
	char name[32], addr[32];
	uint64_t now = 9 * S;

	setup();
	for (int i = 0; i < 3 * CHAP_GUARD_SLOTS; i++) {
		snprintf(name, sizeof(name), "iqn.flood-%d", i);
		snprintf(addr, sizeof(addr), "10.%d.%d.%d", (i >> 16) & 255, (i >> 8) & 255, i & 255);
		struct sockaddr_storage x = v4(addr);
		chap_guard_failed(&g, "iqn.t", name, &x, now + (uint64_t)i, &v);
	}
	/* a guesser that keeps failing is still caught */
	struct sockaddr_storage a = v4("192.168.1.1");
	for (int i = 0; i < 3; i++)
		chap_guard_failed(&g, "iqn.t", "iqn.guess", &a, now + 10 * S, &v);
	CU_ASSERT_FALSE(chap_guard_allow(&g, "iqn.t", "iqn.guess", &a, now + 10 * S, &v));
	teardown();
}

static const struct hl_test tests[] = {
	{"three free failures, then 1 s doubling up to 30 s", test_backoff_doubles_to_cap},
	{"names and addresses are counted apart (IPv6 by /64)", test_names_and_addresses_apart},
	{"per secret; a right response resets name and address; expiry", test_reset_and_expiry},
	{"the tables stay bounded", test_table_bounded},
	{NULL, NULL},
};

int main(void)
{
	return hl_test_run("chap_guard", tests);
}
