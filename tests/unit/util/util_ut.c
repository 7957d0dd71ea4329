/*
 * util_ut.c - size/number/bool/portal parsing, the list helpers, secret
 * files, the log's rate limit.
 */
#include "hl_test.h"
#include "hotlun/log.h"
#include "hotlun/util.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void test_parse_size_suffixes(void)
{
	uint64_t v;
	CU_ASSERT_EQUAL(hl_parse_size("4096", &v), 0);
	CU_ASSERT_EQUAL(v, 4096);
	CU_ASSERT_EQUAL(hl_parse_size("64K", &v), 0);
	CU_ASSERT_EQUAL(v, 65536);
	CU_ASSERT_EQUAL(hl_parse_size("2G", &v), 0);
	CU_ASSERT_EQUAL(v, 2ull << 30);
	CU_ASSERT_EQUAL(hl_parse_size("1TiB", &v), 0);
	CU_ASSERT_EQUAL(v, 1ull << 40);
	CU_ASSERT_EQUAL(hl_parse_size("512m", &v), 0);
	CU_ASSERT_EQUAL(v, 512ull << 20);
}

static void test_parse_size_rejects_junk(void)
{
	uint64_t v;
	CU_ASSERT_EQUAL(hl_parse_size("", &v), -EINVAL);
	CU_ASSERT_EQUAL(hl_parse_size("K", &v), -EINVAL);
	CU_ASSERT_EQUAL(hl_parse_size("12Q", &v), -EINVAL);
	CU_ASSERT_EQUAL(hl_parse_size("12KX", &v), -EINVAL);
	CU_ASSERT_EQUAL(hl_parse_size("-1", &v), -EINVAL);
	CU_ASSERT_EQUAL(hl_parse_size("99999999999999999999", &v), -ERANGE);
	CU_ASSERT_EQUAL(hl_parse_size("17179869184T", &v), -ERANGE);
}

static void test_parse_u64_and_bool(void)
{
	uint64_t v;
	bool b;
	CU_ASSERT_EQUAL(hl_parse_u64("18446744073709551615", &v), 0);
	CU_ASSERT_EQUAL(v, UINT64_MAX);
	CU_ASSERT_EQUAL(hl_parse_u64("18446744073709551616", &v), -ERANGE);
	CU_ASSERT_EQUAL(hl_parse_u64("1 ", &v), -EINVAL);
	CU_ASSERT_EQUAL(hl_parse_bool("Yes", &b), 0);
	CU_ASSERT_TRUE(b);
	CU_ASSERT_EQUAL(hl_parse_bool("off", &b), 0);
	CU_ASSERT_FALSE(b);
	CU_ASSERT_EQUAL(hl_parse_bool("maybe", &b), -EINVAL);
}

static void test_parse_cpu_list(void)
{
	unsigned c[8];

	CU_ASSERT_EQUAL(hl_parse_cpu_list("1", c, 8), 1);
	CU_ASSERT_EQUAL(c[0], 1);
	CU_ASSERT_EQUAL(hl_parse_cpu_list("3,0-1,8-9", c, 8), 5);
	CU_ASSERT(c[0] == 3 && c[1] == 0 && c[2] == 1 && c[3] == 8 && c[4] == 9);
	CU_ASSERT_EQUAL(hl_parse_cpu_list("1023", c, 8), 1);
	CU_ASSERT_EQUAL(hl_parse_cpu_list("1024", c, 8), -EINVAL);
	CU_ASSERT_EQUAL(hl_parse_cpu_list("0-8", c, 8), -EINVAL); /* nine CPUs */
	CU_ASSERT_EQUAL(hl_parse_cpu_list("2-1", c, 8), -EINVAL);
	CU_ASSERT_EQUAL(hl_parse_cpu_list("0,1,0", c, 8), -EINVAL);
	CU_ASSERT_EQUAL(hl_parse_cpu_list("0-2,1", c, 8), -EINVAL);
	CU_ASSERT_EQUAL(hl_parse_cpu_list("", c, 8), -EINVAL);
	CU_ASSERT_EQUAL(hl_parse_cpu_list("0,", c, 8), -EINVAL);
	CU_ASSERT_EQUAL(hl_parse_cpu_list(",0", c, 8), -EINVAL);
	CU_ASSERT_EQUAL(hl_parse_cpu_list("0 1", c, 8), -EINVAL);
	CU_ASSERT_EQUAL(hl_parse_cpu_list("-1", c, 8), -EINVAL);
	CU_ASSERT_EQUAL(hl_parse_cpu_list("1-", c, 8), -EINVAL);
	CU_ASSERT_EQUAL(hl_parse_cpu_list("99999999999999999999", c, 8), -EINVAL);
	CU_ASSERT_EQUAL(hl_parse_cpu_list(NULL, c, 8), -EINVAL);
}

static void test_parse_percent(void)
{
	uint32_t p = 7;

	CU_ASSERT_EQUAL(hl_parse_percent("25%", &p), 0);
	CU_ASSERT_EQUAL(p, 25);
	CU_ASSERT_EQUAL(hl_parse_percent("0", &p), 0);
	CU_ASSERT_EQUAL(p, 0);
	CU_ASSERT_EQUAL(hl_parse_percent("100", &p), 0);
	CU_ASSERT_EQUAL(p, 100);
	CU_ASSERT_EQUAL(hl_parse_percent("101%", &p), -ERANGE);
	CU_ASSERT_EQUAL(hl_parse_percent("%", &p), -EINVAL);
	CU_ASSERT_EQUAL(hl_parse_percent("", &p), -EINVAL);
	CU_ASSERT_EQUAL(hl_parse_percent("25x", &p), -EINVAL);
	CU_ASSERT_EQUAL(hl_parse_percent("-5", &p), -EINVAL);
	CU_ASSERT_EQUAL(hl_parse_percent("25%%", &p), -EINVAL);
	CU_ASSERT_EQUAL(hl_parse_percent("00000000001", &p), -EINVAL); /* too long */
	CU_ASSERT_EQUAL(p, 100);
}

static void test_portal_parse_and_format(void)
{
	struct sockaddr_storage ss;
	unsigned len;
	char buf[64];

	CU_ASSERT_EQUAL(hl_parse_portal("127.0.0.1:3260", 3260, &ss, &len), 0);
	CU_ASSERT_STRING_EQUAL(hl_format_sockaddr(&ss, buf, sizeof(buf)), "127.0.0.1:3260");
	CU_ASSERT_EQUAL(hl_parse_portal("10.1.2.3", 3260, &ss, &len), 0);
	CU_ASSERT_STRING_EQUAL(hl_format_sockaddr(&ss, buf, sizeof(buf)), "10.1.2.3:3260");
	CU_ASSERT_EQUAL(hl_parse_portal("[::1]:3261", 3260, &ss, &len), 0);
	CU_ASSERT_EQUAL(ss.ss_family, AF_INET6);
	CU_ASSERT_STRING_EQUAL(hl_format_sockaddr(&ss, buf, sizeof(buf)), "[::1]:3261");
	CU_ASSERT_EQUAL(hl_parse_portal("::1", 3260, &ss, &len), -EINVAL);
	CU_ASSERT_EQUAL(hl_parse_portal("[::1", 3260, &ss, &len), -EINVAL);
	CU_ASSERT_EQUAL(hl_parse_portal("host.example:3260", 3260, &ss, &len), -EINVAL);
	CU_ASSERT_EQUAL(hl_parse_portal("1.2.3.4:70000", 3260, &ss, &len), -EINVAL);
	CU_ASSERT_EQUAL(hl_parse_portal("1.2.3.4:", 3260, &ss, &len), -EINVAL);
}

static void test_be_accessors(void)
{
	uint8_t b[8];
	hl_put_be64(b, 0x0102030405060708ull);
	CU_ASSERT_EQUAL(b[0], 1);
	CU_ASSERT_EQUAL(b[7], 8);
	CU_ASSERT_EQUAL(hl_get_be64(b), 0x0102030405060708ull);
	hl_put_be24(b, 0xabcdef);
	CU_ASSERT_EQUAL(hl_get_be24(b), 0xabcdef);
	hl_put_be16(b, 0xbeef);
	CU_ASSERT_EQUAL(hl_get_be16(b), 0xbeef);
}

struct item {
	int v;
	struct hl_list link;
};

static void test_list_order_and_safe_delete(void)
{
	struct hl_list head = HL_LIST_INIT(head);
	struct item items[4];
	struct item *it, *tmp;
	int sum = 0, order[4], n = 0;

	for (int i = 0; i < 4; i++) {
		items[i].v = i;
		hl_list_add_tail(&head, &items[i].link);
	}
	hl_list_for_each_entry_safe(it, tmp, &head, link) {
		order[n++] = it->v;
		if (it->v % 2)
			hl_list_del(&it->link);
	}
	CU_ASSERT_EQUAL(n, 4);
	CU_ASSERT_EQUAL(order[0], 0);
	CU_ASSERT_EQUAL(order[3], 3);
	hl_list_for_each_entry(it, &head, link)
		sum += it->v;
	CU_ASSERT_EQUAL(sum, 2);
	CU_ASSERT_FALSE(hl_list_empty(&head));
}

static void test_format_size(void)
{
	char buf[32];
	CU_ASSERT_STRING_EQUAL(hl_format_size(65536, buf, sizeof(buf)), "64K");
	CU_ASSERT_STRING_EQUAL(hl_format_size(1536ull << 20, buf, sizeof(buf)), "1.5G");
	CU_ASSERT_STRING_EQUAL(hl_format_size(100, buf, sizeof(buf)), "100");
}

static void test_uri_redact(void)
{
	char buf[256], small[16];

	CU_ASSERT_STRING_EQUAL(hl_uri_redact("iscsi://bob%S3cr3t-xyz@10.0.0.1:3260/iqn.x:t/0", false,
	                                     buf, sizeof(buf)),
	                       "iscsi://bob%***@10.0.0.1:3260/iqn.x:t/0");
	CU_ASSERT_STRING_EQUAL(hl_uri_redact("iscsi://bob%S3cr3t-xyz@10.0.0.1:3260/iqn.x:t/0", true,
	                                     buf, sizeof(buf)),
	                       "iscsi://10.0.0.1:3260/iqn.x:t/0");
	/* user:secret, a secret with '%' and ':' in it, no separator at all */
	CU_ASSERT_STRING_EQUAL(hl_uri_redact("x://u:p%a:ss@h/p", false, buf, sizeof(buf)),
	                       "x://u:***@h/p");
	CU_ASSERT_STRING_EQUAL(hl_uri_redact("x://onlysecret@h/p", false, buf, sizeof(buf)),
	                       "x://***@h/p");
	/* the last '@' before the path ends the userinfo (as the iscsi parser reads it) */
	CU_ASSERT_STRING_EQUAL(hl_uri_redact("iscsi://u%a@b@h/t/0", false, buf, sizeof(buf)),
	                       "iscsi://u%***@h/t/0");
	/* '@' in the path is not userinfo; nested wrappers are all redacted */
	CU_ASSERT_STRING_EQUAL(hl_uri_redact("iscsi://h/t@x/0", false, buf, sizeof(buf)),
	                       "iscsi://h/t@x/0");
	CU_ASSERT_STRING_EQUAL(hl_uri_redact("cache(c):throttle(1,2,3):iscsi://u%zz@h/t/0", false,
	                                     buf, sizeof(buf)),
	                       "cache(c):throttle(1,2,3):iscsi://u%***@h/t/0");
	CU_ASSERT_STRING_EQUAL(hl_uri_redact("file:/var/x%y@z", false, buf, sizeof(buf)),
	                       "file:/var/x%y@z");
	CU_ASSERT_STRING_EQUAL(hl_uri_redact("iscsi://u%zzzzzzzzzzzzzzzz@h/t/0", false, small,
	                                     sizeof(small)),
	                       "iscsi://u%***@h");
	CU_ASSERT_STRING_EQUAL(hl_uri_redact("iscsi://u%secret", false, buf, sizeof(buf)),
	                       "iscsi://u%***"); /* the '@' forgotten: still hidden */
}

/* path holds content with mode (created anew). */
static void put_file(const char *path, const char *content, mode_t mode)
{
	unlink(path);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	CU_ASSERT_TRUE_FATAL(fd >= 0);
	CU_ASSERT_EQUAL(write(fd, content, strlen(content)), (ssize_t)strlen(content));
	CU_ASSERT_EQUAL(fchmod(fd, mode), 0);
	close(fd);
}

/* issue 24 item 5: hotlunctl's KEY=@FILE and the config's *_secret_file share these rules */
static void test_secret_file(void)
{
	char path[64], buf[HL_SECRET_MAX + 1], err[256], big[600];

	snprintf(path, sizeof(path), "/tmp/hl-util-ut-%d.secret", (int)getpid());
	put_file(path, "Sec-0123456789\nsecond line\n", 0600);
	CU_ASSERT_EQUAL(hl_secret_file_read(path, buf, sizeof(buf), err, sizeof(err)), 0);
	CU_ASSERT_STRING_EQUAL(buf, "Sec-0123456789");
	put_file(path, "Sec-0123456789\r\n", 0400);
	CU_ASSERT_EQUAL(hl_secret_file_read(path, buf, sizeof(buf), err, sizeof(err)), 0);
	CU_ASSERT_STRING_EQUAL(buf, "Sec-0123456789");

	put_file(path, "Sec-0123456789\n", 0640);
	CU_ASSERT_EQUAL(hl_secret_file_read(path, buf, sizeof(buf), err, sizeof(err)), -EPERM);
	CU_ASSERT_PTR_NOT_NULL(
	    strstr(err, "accessible to its group or others (mode 0640): chmod 600"));
	put_file(path, "Sec-0123456789\n", 0604);
	CU_ASSERT_EQUAL(hl_secret_file_read(path, buf, sizeof(buf), err, sizeof(err)), -EPERM);

	put_file(path, "\nSec\n", 0600);
	CU_ASSERT_EQUAL(hl_secret_file_read(path, buf, sizeof(buf), err, sizeof(err)), -EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "1..255 bytes"));
	put_file(path, "Sec\t0123\n", 0600);
	CU_ASSERT_EQUAL(hl_secret_file_read(path, buf, sizeof(buf), err, sizeof(err)), -EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "control character"));
	memset(big, 'a', 256);
	big[256] = '\0';
	put_file(path, big, 0600);
	CU_ASSERT_EQUAL(hl_secret_file_read(path, buf, sizeof(buf), err, sizeof(err)), -EINVAL);
	big[255] = '\0';
	put_file(path, big, 0600);
	CU_ASSERT_EQUAL(hl_secret_file_read(path, buf, sizeof(buf), err, sizeof(err)), 0);
	CU_ASSERT_EQUAL(strlen(buf), 255);
	CU_ASSERT_EQUAL(hl_secret_file_read(path, buf, 100, err, sizeof(err)), -EINVAL);

	unlink(path);
	CU_ASSERT_EQUAL(hl_secret_file_read(path, buf, sizeof(buf), err, sizeof(err)), -ENOENT);
	CU_ASSERT_EQUAL(hl_secret_file_read("/tmp", buf, sizeof(buf), err, sizeof(err)), -EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "not a regular file"));
	hl_secret_free(NULL);
	hl_secret_wipe_stack();
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * HL_LOG_RL's call sites are shared by every reactor, and each reads the
 * clock before it looks at the window: another may have started one a
 * moment later meanwhile. That is not a new window (the unsigned age
 * wrapped, and every such moment let 5 more lines through).
 */
static void test_log_rate_limit(void)
{
	struct hl_log_rl rl = {0};

	for (int i = 0; i < 5; i++)
		CU_ASSERT_TRUE(hl_log_rl_allow(&rl, HL_LOG_DEBUG));
	CU_ASSERT_FALSE(hl_log_rl_allow(&rl, HL_LOG_DEBUG));
	CU_ASSERT_EQUAL(rl.suppressed, 1);
	/* a window another thread started after this call read the clock */
	rl.window_start_ns = mono_ns() + 500000000ull;
	CU_ASSERT_FALSE(hl_log_rl_allow(&rl, HL_LOG_DEBUG));
	CU_ASSERT_EQUAL(rl.suppressed, 2);
	/* a second later: a new window, and the count held back is told */
	rl.window_start_ns = mono_ns() - 1000000000ull;
	CU_ASSERT_TRUE(hl_log_rl_allow(&rl, HL_LOG_DEBUG));
	CU_ASSERT_EQUAL(rl.printed, 1);
	CU_ASSERT_EQUAL(rl.suppressed, 0);
}

static const struct hl_test tests[] = {
	{"secret file", test_secret_file},
	{"uri redact", test_uri_redact},
	{"size suffixes", test_parse_size_suffixes},
	{"size junk rejected", test_parse_size_rejects_junk},
	{"u64 and bool", test_parse_u64_and_bool},
	{"percent", test_parse_percent},
	{"cpu list", test_parse_cpu_list},
	{"portal parse/format", test_portal_parse_and_format},
	{"big-endian accessors", test_be_accessors},
	{"list order, safe delete", test_list_order_and_safe_delete},
	{"format size", test_format_size},
	{"log rate limit: a window started by another thread holds", test_log_rate_limit},
	{NULL, NULL},
};

int main(void)
{
	return hl_test_run("util", tests);
}
