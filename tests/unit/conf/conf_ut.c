/* conf_ut.c - the INI parser: the issue's example, errors with file:line, round trip. */
#include "hl_test.h"
#include "hotlun/conf.h"
#include "hotlun/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static struct hl_conf *parse_ok(const char *text)
{
	struct hl_conf *c = NULL;
	char err[512];
	int rc = hl_conf_parse(text, strlen(text), "t.conf", &c, err, sizeof(err));
	if (rc)
		fprintf(stderr, "unexpected error: %s\n", err);
	CU_ASSERT_EQUAL(rc, 0);
	return c;
}

/* Parse text expected to fail; the message must start with want_prefix. */
static void parse_err(const char *text, const char *want_prefix, const char *want_sub)
{
	struct hl_conf *c = NULL;
	char err[512];
	int rc = hl_conf_parse(text, strlen(text), "t.conf", &c, err, sizeof(err));
	CU_ASSERT_EQUAL(rc, -EINVAL);
	CU_ASSERT_PTR_NULL(c);
	CU_ASSERT_EQUAL(strncmp(err, want_prefix, strlen(want_prefix)), 0);
	if (want_sub)
		CU_ASSERT_PTR_NOT_NULL(strstr(err, want_sub));
	if (strncmp(err, want_prefix, strlen(want_prefix)) || (want_sub && !strstr(err, want_sub)))
		fprintf(stderr, "got error: %s\n", err);
}

static const char issue_example[] =
	"[global]\n"
	"portal = 127.0.0.1:3260          ; repeatable; IPv6 as [::1]:3260\n"
	"state_dir = /var/lib/hotlun       ; persistent ids, later the cache metadata\n"
	"\n"
	"[disk vm-store]\n"
	"origin = file:/srv/vm-store.img  ; a regular file or a block device\n"
	"# block_size = 512               ; logical block size (512 or 4096)\n"
	"\n"
	"[target iqn.2026-11.io.hotlun:demo]\n"
	"lun.0 = vm-store\n"
	"allow = ALL                      ; or a list of initiator IQNs\n"
	"# chap_user = ... / chap_secret = ...            one-way CHAP\n"
	"# mutual_user = ... / mutual_secret = ...        mutual CHAP\n";

static void test_issue_example_parses(void)
{
	struct hl_conf *c = parse_ok(issue_example);
	if (!c)
		return;
	CU_ASSERT_EQUAL(c->n_portals, 1);
	CU_ASSERT_STRING_EQUAL(c->portals[0], "127.0.0.1:3260");
	CU_ASSERT_STRING_EQUAL(c->state_dir, "/var/lib/hotlun");
	CU_ASSERT_EQUAL(c->n_disks, 1);
	CU_ASSERT_STRING_EQUAL(c->disks[0].name, "vm-store");
	CU_ASSERT_STRING_EQUAL(c->disks[0].origin, "file:/srv/vm-store.img");
	CU_ASSERT_EQUAL(c->disks[0].block_size, 512);
	CU_ASSERT_EQUAL(c->n_targets, 1);
	CU_ASSERT_STRING_EQUAL(c->targets[0].name, "iqn.2026-11.io.hotlun:demo");
	CU_ASSERT_EQUAL(c->targets[0].n_luns, 1);
	CU_ASSERT_EQUAL(c->targets[0].luns[0].lun, 0);
	CU_ASSERT_STRING_EQUAL(c->targets[0].luns[0].disk, "vm-store");
	CU_ASSERT_TRUE(c->targets[0].allow_all);
	CU_ASSERT_STRING_EQUAL(c->control_socket, "/var/lib/hotlun/hotlund.sock");
	hl_conf_free(c);
}

static void test_errors_name_file_and_line(void)
{
	parse_err("[global]\nportal = 1.2.3.4\nbogus = 1\n", "t.conf:3:", "unknown key 'bogus'");
	parse_err("[global]\n[nope x]\n", "t.conf:2:", "unknown section");
	parse_err("portal = 1.2.3.4\n", "t.conf:1:", "outside any section");
	parse_err("[global]\nportal = ::1\n", "t.conf:2:", "portal");
	parse_err("[disk d]\norigin = /x\nblock_size = 1024\n", "t.conf:3:", "512 or 4096");
	parse_err("[disk d]\n", "t.conf:1:", "no origin");
	parse_err("[target iqn.2026-11.io.hotlun:t]\nlun.0 = missing\n", "t.conf:2:",
		  "no [disk] section");
	parse_err("[target iqn.2026-11.io.hotlun:t]\nlun.256 = d\n", "t.conf:2:", "lun.255");
	parse_err("[target Not-An-IQN]\n", "t.conf:1:", "iSCSI name");
	parse_err("[disk d]\norigin = /x\n[disk d]\norigin = /y\n", "t.conf:3:", "twice");
	parse_err("[global]\nstate_dir = \"unterminated\n", "t.conf:2:", "unterminated");
	parse_err("[disk d]\norigin=/x\ncache = c\n", "t.conf:1:", "no [cache] section");
	parse_err("[cache c]\ndevice=/x\nsize=1G\nblock_size=3K\n", "t.conf:4:", "power of two");
	parse_err("[cache c]\ndevice=/x\nsize=1G\nadmission = lfu\n", "t.conf:4:", "nhit:N");
	parse_err("[cache c]\ndevice=/x\nsize=1G\nadmission = nhit:16\n", "t.conf:4:", "1..15");
	parse_err("[cache c]\ndevice=/x\nupdate_buffer = 16Q\n", "t.conf:3:", "update_buffer");
	parse_err("[cache c]\ndevice=/x\nupdate_buffer = 5000\n", "t.conf:3:", "multiple of 4K");
	parse_err("[cache c]\ndevice=/x\nupdate_buffer = 8G\n", "t.conf:3:", "up to 4G");
	parse_err("[cache c]\ndevice=/x\nupdate_buffer = -1\n", "t.conf:3:", "update_buffer");
	parse_err("[cache c]\ndevice=/x\nwrite_budget = 101%\n", "t.conf:3:", "0..100");
	parse_err("[cache c]\ndevice=/x\nwrite_budget = %\n", "t.conf:3:", "write_budget");
	parse_err("[cache c]\ndevice=/x\nwrite_budget = 25x\n", "t.conf:3:", "write_budget");
	parse_err("[cache c]\ndevice=/x\nwrite_budget = -5\n", "t.conf:3:", "write_budget");
	parse_err("[global]\npoll_us = 1001\n", "t.conf:2:", "poll_us: expected a whole number from 0 to 1000");
	parse_err("[global]\npoll_us = -5\n", "t.conf:2:", "poll_us");
}

static void test_chap_rules(void)
{
	parse_err("[target iqn.2026-11.io.hotlun:t]\nchap_user = u\n", "t.conf:1:", "go together");
	parse_err("\n[global]\ndiscovery_chap_user = d\n", "t.conf:2:", "go together");
	parse_err("[target iqn.2026-11.io.hotlun:t]\nchap_user=u\nchap_secret=s3cretsecret\n"
		  "mutual_user=t\nmutual_secret=s3cretsecret\n",
		  "t.conf:1:", "must differ");
	struct hl_conf *c = parse_ok("[target iqn.2026-11.io.hotlun:t]\nchap_user = u\n"
				     "chap_secret = \"a;b #c\"\nallow = iqn.1994-05.com.redhat:x, "
				     "iqn.2026-01.org.example:y\n");
	if (!c)
		return;
	CU_ASSERT_STRING_EQUAL(c->targets[0].chap_secret, "a;b #c");
	CU_ASSERT_EQUAL(c->targets[0].n_allow, 2);
	CU_ASSERT_FALSE(c->targets[0].allow_all);
	hl_conf_free(c);
}

static void test_write_round_trip(void)
{
	const char *text = "[global]\nportal = 127.0.0.1:3261\nportal = [::1]:3262\n"
			   "state_dir = /tmp/x\nlog_level = debug\npoll_us = 0\n"
			   "[cache ssd0]\ndevice = /tmp/c\nsize = 2G\nblock_size = 64K\n"
			   "admission = nhit:2\nupdate_buffer = 32M\nwrite_budget = 40%\n"
			   "[cache ssd1]\ndevice = /tmp/d\nsize = 1G\nupdate_buffer = off\n"
			   "write_budget = off\n"
			   "[disk a]\norigin = file:/tmp/a\nblock_size = 4096\ncache = ssd0\n"
			   "origin_iops = 200\n"
			   "[target iqn.2026-11.io.hotlun:t]\nlun.3 = a\nalias = \"x ; \\\"q\\\" \\\\ y\"\n"
			   "chap_user = u\nchap_secret = 0123456789ab\n";
	struct hl_conf *c = parse_ok(text);
	char *buf = NULL;
	size_t len = 0;
	if (!c)
		return;
	FILE *f = open_memstream(&buf, &len);
	CU_ASSERT_EQUAL(hl_conf_write(c, f), 0);
	fclose(f);
	struct hl_conf *c2 = parse_ok(buf);
	if (c2) {
		char *buf2 = NULL;
		size_t len2 = 0;
		f = open_memstream(&buf2, &len2);
		CU_ASSERT_EQUAL(hl_conf_write(c2, f), 0);
		fclose(f);
		CU_ASSERT_STRING_EQUAL(buf, buf2);
		CU_ASSERT_EQUAL(c2->n_portals, 2);
		CU_ASSERT_STRING_EQUAL(c2->targets[0].alias, "x ; \"q\" \\ y");
		CU_ASSERT_EQUAL(c2->disks[0].origin_iops, 200);
		CU_ASSERT_EQUAL(c2->caches[0].block_size, 65536);
		CU_ASSERT(c2->caches[0].update_buffer_set);
		CU_ASSERT_EQUAL(c2->caches[0].update_buffer, 32 * 1024 * 1024);
		CU_ASSERT(c2->caches[1].update_buffer_set);
		CU_ASSERT_EQUAL(c2->caches[1].update_buffer, 0);
		CU_ASSERT(c2->caches[0].write_budget_set);
		CU_ASSERT_EQUAL(c2->caches[0].write_budget, 40);
		CU_ASSERT(c2->caches[1].write_budget_set); /* off: 0%, kept */
		CU_ASSERT_EQUAL(c2->caches[1].write_budget, 0);
		CU_ASSERT_EQUAL(c2->log_level, HL_LOG_DEBUG);
		CU_ASSERT_EQUAL(c2->poll_us, 0); /* 0 (off) is kept, not taken for unset */
		free(buf2);
		hl_conf_free(c2);
	}
	free(buf);
	hl_conf_free(c);
}

static void test_defaults(void)
{
	struct hl_conf *c = parse_ok("");
	if (!c)
		return;
	CU_ASSERT_EQUAL(c->n_portals, 1);
	CU_ASSERT_STRING_EQUAL(c->portals[0], "0.0.0.0:3260");
	CU_ASSERT_PTR_NOT_NULL(c->state_dir);
	CU_ASSERT_EQUAL(c->poll_us, -1); /* unset: the daemon uses HL_CONF_POLL_US_DEFAULT */
	hl_conf_free(c);
}

static void test_nul_and_long_lines_rejected(void)
{
	struct hl_conf *c = NULL;
	char err[256];
	const char nul[] = "[global]\nstate_dir = a\0b\n";
	CU_ASSERT_EQUAL(hl_conf_parse(nul, sizeof(nul) - 1, "n.conf", &c, err, sizeof(err)),
			-EINVAL);
	CU_ASSERT_EQUAL(strncmp(err, "n.conf:2:", 9), 0);
	char *big = malloc(10000);
	memset(big, 'a', 9999);
	big[9999] = '\0';
	CU_ASSERT_EQUAL(hl_conf_parse(big, 9999, "n.conf", &c, err, sizeof(err)), -EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "longer"));
	free(big);
}

static void test_runtime_edits(void)
{
	struct hl_conf *c = parse_ok("[disk a]\norigin = /a\n[target iqn.2026-11.io.hotlun:t]\n"
				     "lun.0 = a\nallow = ALL\n");
	struct hl_conf *d = NULL;
	char err[256];
	if (!c)
		return;
	CU_ASSERT_EQUAL(hl_conf_section_add(c, HL_CONF_DISK, "b", err, sizeof(err)), 0);
	CU_ASSERT_EQUAL(hl_conf_section_add(c, HL_CONF_DISK, "b", err, sizeof(err)), -EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "twice"));
	CU_ASSERT_EQUAL(hl_conf_section_add(c, HL_CONF_DISK, "bad name", err, sizeof(err)), -EINVAL);
	CU_ASSERT_EQUAL(hl_conf_check(c, err, sizeof(err)), -EINVAL); /* b has no origin */
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "no origin"));
	CU_ASSERT_EQUAL(hl_conf_set(c, HL_CONF_DISK, "b", "origin", "file:/b", err, sizeof(err)), 0);
	CU_ASSERT_EQUAL(hl_conf_set(c, HL_CONF_DISK, "b", "block_size", "1000", err, sizeof(err)),
			-EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "512 or 4096"));
	CU_ASSERT_EQUAL(hl_conf_set(c, HL_CONF_DISK, "b", "colour", "red", err, sizeof(err)), -EINVAL);
	CU_ASSERT_EQUAL(hl_conf_set(c, HL_CONF_DISK, "zz", "origin", "/z", err, sizeof(err)), -ENOENT);
	CU_ASSERT_EQUAL(hl_conf_set(c, HL_CONF_TARGET, "iqn.2026-11.io.hotlun:t", "lun.1", "b", err,
				    sizeof(err)), 0);
	CU_ASSERT_EQUAL(hl_conf_check(c, err, sizeof(err)), 0);
	/* a disk in use cannot go; after its LUN is removed it can */
	CU_ASSERT_EQUAL(hl_conf_section_remove(c, HL_CONF_DISK, "b", err, sizeof(err)), -EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "lun.1"));
	CU_ASSERT_EQUAL(hl_conf_unset(c, HL_CONF_TARGET, "iqn.2026-11.io.hotlun:t", "lun.1", NULL, err,
				      sizeof(err)), 0);
	CU_ASSERT_EQUAL(hl_conf_section_remove(c, HL_CONF_DISK, "b", err, sizeof(err)), 0);
	CU_ASSERT_EQUAL(c->n_disks, 1);
	CU_ASSERT_EQUAL(hl_conf_unset(c, HL_CONF_TARGET, "iqn.2026-11.io.hotlun:t", "allow", "ALL",
				      err, sizeof(err)), 0);
	CU_ASSERT_FALSE(c->targets[0].allow_all);
	CU_ASSERT_EQUAL(hl_conf_set(c, HL_CONF_GLOBAL, NULL, "poll_us", "20", err, sizeof(err)), 0);
	CU_ASSERT_EQUAL(c->poll_us, 20);
	CU_ASSERT_EQUAL(hl_conf_unset(c, HL_CONF_GLOBAL, NULL, "poll_us", NULL, err, sizeof(err)), 0);
	CU_ASSERT_EQUAL(c->poll_us, -1);
	CU_ASSERT_EQUAL(hl_conf_set(c, HL_CONF_GLOBAL, NULL, "poll_us", "200", err, sizeof(err)), 0);
	CU_ASSERT_EQUAL(hl_conf_dup(c, &d), 0);
	if (d) {
		CU_ASSERT_EQUAL(d->n_disks, 1);
		CU_ASSERT_EQUAL(d->targets[0].n_luns, 1);
		CU_ASSERT_EQUAL(d->poll_us, 200);
		hl_conf_free(d);
	}
	hl_conf_free(c);
}

/* issue 17: [disk] exclusive (warm restarts of origins that cannot prove themselves unchanged) */
static void test_disk_exclusive(void)
{
	struct hl_conf *c;
	char *buf = NULL;
	size_t len = 0;
	FILE *f;

	parse_err("[disk d]\norigin = /x\nexclusive = maybe\n", "t.conf:3:",
	          "exclusive: expected yes or no");
	c = parse_ok("[disk d]\norigin = /dev/sdz\nexclusive = yes\n[disk e]\norigin = /y\n");
	if (!c)
		return;
	CU_ASSERT(c->disks[0].exclusive);
	CU_ASSERT_FALSE(c->disks[1].exclusive);
	f = open_memstream(&buf, &len);
	CU_ASSERT_EQUAL(hl_conf_write(c, f), 0);
	fclose(f);
	CU_ASSERT_PTR_NOT_NULL(strstr(buf, "exclusive = yes\n"));
	CU_ASSERT_PTR_NULL(strstr(strstr(buf, "[disk e]"), "exclusive"));
	free(buf);
	hl_conf_free(c);
}

/* issue 17: [disk] serial and naa (one LU identity on several gateways) */
static void test_disk_identity_keys(void)
{
	struct hl_conf *c;
	char *buf = NULL;
	size_t len = 0;
	FILE *f;

	parse_err("[disk d]\norigin = /x\nserial = a b\n", "t.conf:3:", "serial: expected 1 to 32");
	parse_err("[disk d]\norigin = /x\nserial = 0123456789abcdef0123456789abcdef0\n", "t.conf:3:",
	          "serial");
	parse_err("[disk d]\norigin = /x\nnaa = 5001405abcdef0123456789abcdef001\n", "t.conf:3:",
	          "naa: expected 32 hex digits starting with 6");
	parse_err("[disk d]\norigin = /x\nnaa = 6001405abcdef0123456789abcdef0\n", "t.conf:3:", "naa");
	c = parse_ok("[disk d]\norigin = /x\nserial = GW-LUN-0001\n"
	             "naa = naa.6001405abcdef0123456789abcdef001\n");
	if (!c)
		return;
	CU_ASSERT_STRING_EQUAL(c->disks[0].serial, "GW-LUN-0001");
	CU_ASSERT_STRING_EQUAL(c->disks[0].naa, "naa.6001405abcdef0123456789abcdef001");
	f = open_memstream(&buf, &len);
	CU_ASSERT_EQUAL(hl_conf_write(c, f), 0);
	fclose(f);
	CU_ASSERT_PTR_NOT_NULL(strstr(buf, "serial = GW-LUN-0001\n"));
	CU_ASSERT_PTR_NOT_NULL(strstr(buf, "naa = naa.6001405abcdef0123456789abcdef001\n"));
	free(buf);
	hl_conf_free(c);
}

static const struct hl_test tests[] = {
	{"runtime edits", test_runtime_edits},
	{"issue example parses", test_issue_example_parses},
	{"errors name file:line", test_errors_name_file_and_line},
	{"CHAP rules", test_chap_rules},
	{"write round trip", test_write_round_trip},
	{"defaults", test_defaults},
	{"NUL and long lines", test_nul_and_long_lines_rejected},
	{"[disk] exclusive", test_disk_exclusive},
	{"[disk] serial and naa", test_disk_identity_keys},
	{NULL, NULL},
};

int main(void)
{
	hl_log_open(false, HL_LOG_ERR);
	return hl_test_run("conf", tests);
}
