/*
 * source_ut.c - what counts as one source of connections: an IPv4 address,
 * an IPv4-mapped IPv6 address as its IPv4 form, an IPv6 /64 (or the whole
 * address when asked), and how it is written in log lines.
 */
#include "iscsi/source.h"

#include "hl_test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

static struct iscsi_source of(const char *a, bool whole)
{
	struct sockaddr_storage ss;
	struct iscsi_source s;

	memset(&ss, 0, sizeof(ss));
	if (strchr(a, ':')) {
		struct sockaddr_in6 *in = (struct sockaddr_in6 *)&ss;
		in->sin6_family = AF_INET6;
		in->sin6_port = htons(1234);
		inet_pton(AF_INET6, a, &in->sin6_addr);
	} else {
		struct sockaddr_in *in = (struct sockaddr_in *)&ss;
		in->sin_family = AF_INET;
		in->sin_port = htons(4321);
		inet_pton(AF_INET, a, &in->sin_addr);
	}
	iscsi_source_of(&ss, whole, &s);
	return s;
}

static bool same(const char *a, const char *b, bool whole)
{
	struct iscsi_source x = of(a, whole), y = of(b, whole);

	return iscsi_source_eq(&x, &y);
}

static void test_ipv4(void)
{
	CU_ASSERT_TRUE(same("192.0.2.1", "192.0.2.1", false));
	CU_ASSERT_FALSE(same("192.0.2.1", "192.0.2.2", false));
	CU_ASSERT_FALSE(same("127.0.0.1", "127.0.0.2", false));
	/* the IPv4-mapped form is the same host */
	CU_ASSERT_TRUE(same("::ffff:192.0.2.1", "192.0.2.1", false));
	CU_ASSERT_TRUE(same("::ffff:192.0.2.1", "192.0.2.1", true));
}

/* One host can take any address of its /64: the per-address caps count the /64. */
static void test_ipv6_prefix(void)
{
	CU_ASSERT_TRUE(same("2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:fffe", false));
	CU_ASSERT_FALSE(same("2001:db8:1:2::1", "2001:db8:1:3::1", false));
	CU_ASSERT_FALSE(same("2001:db8:1:2::1", "2001:db8:1:2::2", true));
	CU_ASSERT_TRUE(same("2001:db8:1:2::1", "2001:db8:1:2::1", true));
	/* a /64 never equals a whole address */
	struct iscsi_source p = of("2001:db8:1:2::", false), w = of("2001:db8:1:2::", true);
	CU_ASSERT_FALSE(iscsi_source_eq(&p, &w));
}

static void test_str(void)
{
	char buf[64];
	struct iscsi_source s = of("192.0.2.7", false);

	CU_ASSERT_STRING_EQUAL(iscsi_source_str(&s, buf, sizeof(buf)), "192.0.2.7");
	s = of("2001:db8:1:2:3:4:5:6", false);
	CU_ASSERT_STRING_EQUAL(iscsi_source_str(&s, buf, sizeof(buf)), "2001:db8:1:2::/64");
	s = of("2001:db8:1:2:3:4:5:6", true);
	CU_ASSERT_STRING_EQUAL(iscsi_source_str(&s, buf, sizeof(buf)), "2001:db8:1:2:3:4:5:6");
}

static const struct hl_test tests[] = {
	{"IPv4, and IPv4-mapped as IPv4", test_ipv4},
	{"IPv6 by /64, or whole when asked", test_ipv6_prefix},
	{"written for the log", test_str},
	{NULL, NULL},
};

int main(void)
{
	return hl_test_run("source", tests);
}
