/* conf_ut.c - the INI parser: the issue's example, errors with file:line, round trip. */
#include "hl_test.h"
#include "hotlun/conf.h"
#include "hotlun/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* c as hl_conf_write writes it (free it; *len its length when len is not NULL). */
static char *conf_text(const struct hl_conf *c, size_t *len)
{
	char *text = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&text, &n);

	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	CU_ASSERT_EQUAL(hl_conf_write(c, f), 0);
	fclose(f);
	if (len)
		*len = n;
	return text;
}

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
	parse_err("[global]\ncpus = 0-\n", "t.conf:2:", "cpus: '0-' is not a CPU list");
	parse_err("[global]\ncpus = 1,1\n", "t.conf:2:", "each CPU once");
	parse_err("[target iqn.2026-11.io.hotlun:t]\nallow_target_reset = maybe\n", "t.conf:2:",
		  "allow_target_reset");
	parse_err("[global]\nwrite_buffer_limit = 16M\n", "t.conf:2:", "at least 32M");
	parse_err("[global]\nwrite_buffer_limit = lots\n", "t.conf:2:", "write_buffer_limit");
	parse_err("[global]\nscratch_buffer_limit = 8M\n", "t.conf:2:", "at least 16M");
	parse_err("[global]\n\nscratch_buffer_limit = lots\n", "t.conf:3:", "scratch_buffer_limit");
}

static void test_chap_rules(void)
{
	parse_err("[target iqn.2026-11.io.hotlun:t]\nchap_user = u\n", "t.conf:1:", "go together");
	parse_err("\n[global]\ndiscovery_chap_user = d\n", "t.conf:2:", "go together");
	parse_err("[target iqn.2026-11.io.hotlun:t]\nchap_user=u\nchap_secret=s3cretsecret\n"
		  "mutual_user=t\nmutual_secret=s3cretsecret\n",
		  "t.conf:1:", "must differ");
	/* CHAP reflection across targets: a's mutual secret answers b's challenges */
	parse_err("[target iqn.2026-11.io.hotlun:a]\nchap_user=u\nchap_secret=secret-of-a\n"
		  "mutual_user=m\nmutual_secret=secret-of-b\n"
		  "[target iqn.2026-11.io.hotlun:b]\nchap_user=u\nchap_secret=secret-of-b\n",
		  "t.conf:1:", "must differ");
	/* ... and the discovery secret's */
	parse_err("[global]\ndiscovery_chap_user=d\ndiscovery_chap_secret=secret-of-d\n"
		  "[target iqn.2026-11.io.hotlun:a]\nchap_user=u\nchap_secret=secret-of-a\n"
		  "mutual_user=m\nmutual_secret=secret-of-d\n",
		  "t.conf:4:", "must differ");
	/* two targets may share a mutual secret: neither checks initiators with it */
	struct hl_conf *m = parse_ok("[target iqn.2026-11.io.hotlun:a]\nchap_user=u\n"
				     "chap_secret=secret-of-a\nmutual_user=m\nmutual_secret=mut\n"
				     "[target iqn.2026-11.io.hotlun:b]\nchap_user=u\n"
				     "chap_secret=secret-of-b\nmutual_user=m\nmutual_secret=mut\n");
	if (m)
		hl_conf_free(m);
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
			   "write_buffer_limit = 96M\nscratch_buffer_limit = 48M\ncpus = 1,0-0\n"
			   "[cache ssd0]\ndevice = /tmp/c\nsize = 2G\nblock_size = 64K\n"
			   "admission = nhit:2\nupdate_buffer = 32M\nwrite_budget = 40%\n"
			   "[cache ssd1]\ndevice = /tmp/d\nsize = 1G\nupdate_buffer = off\n"
			   "write_budget = off\n"
			   "[disk a]\norigin = file:/tmp/a\nblock_size = 4096\ncache = ssd0\n"
			   "origin_iops = 200\n"
			   "[target iqn.2026-11.io.hotlun:t]\nlun.3 = a\nalias = \"x ; \\\"q\\\" \\\\ y\"\n"
			   "chap_user = u\nchap_secret = 0123456789ab\nallow_target_reset = yes\n";
	struct hl_conf *c = parse_ok(text);
	char *buf = NULL;
	if (!c)
		return;
	buf = conf_text(c, NULL);
	struct hl_conf *c2 = parse_ok(buf);
	if (c2) {
		char *buf2 = NULL;
		buf2 = conf_text(c2, NULL);
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
		CU_ASSERT_STRING_EQUAL(c2->cpus, "1,0-0"); /* as written */
		CU_ASSERT_TRUE(c2->targets[0].allow_target_reset);
		CU_ASSERT_EQUAL(c2->write_buffer_limit, 96ull << 20);
		CU_ASSERT_EQUAL(c2->scratch_buffer_limit, 48ull << 20);
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
	CU_ASSERT_PTR_NULL(c->cpus);     /* unset: reactors unpinned */
	CU_ASSERT_EQUAL(c->write_buffer_limit, 0); /* unset: the default from physical memory */
	CU_ASSERT_EQUAL(c->scratch_buffer_limit, 0); /* unset: HL_SCSI_SCRATCH_DEFAULT */
	CU_ASSERT_EQUAL(c->logout_timeout, -1);    /* unset: HL_CONF_LOGOUT_TIMEOUT_DEFAULT */
	hl_conf_free(c);
}

/* [global] logout_timeout: 0..600, written back as set, 0 kept (not "unset") */
static void test_logout_timeout(void)
{
	struct hl_conf *c = parse_ok("[global]\nlogout_timeout = 0\n");
	char *text = NULL;

	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	CU_ASSERT_EQUAL(c->logout_timeout, 0);
	text = conf_text(c, NULL);
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "logout_timeout = 0\n"));
	free(text);
	hl_conf_free(c);
	parse_err("[global]\nlogout_timeout = 601\n", "t.conf:2:", "logout_timeout");
	parse_err("[global]\nlogout_timeout = soon\n", "t.conf:2:", "logout_timeout");
}

/* [global] control_idle_timeout: 0..86400 s, unset by default (60), written back as set */
static void test_control_idle_timeout(void)
{
	struct hl_conf *c = parse_ok("");
	char *text = NULL;

	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	CU_ASSERT_EQUAL(c->control_idle_timeout, -1);
	hl_conf_free(c);
	c = parse_ok("[global]\ncontrol_idle_timeout = 0\n");
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	CU_ASSERT_EQUAL(c->control_idle_timeout, 0);
	text = conf_text(c, NULL);
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "control_idle_timeout = 0\n"));
	free(text);
	hl_conf_free(c);
	parse_err("[global]\ncontrol_idle_timeout = 86401\n", "t.conf:2:", "control_idle_timeout");
	parse_err("[global]\ncontrol_idle_timeout = -1\n", "t.conf:2:", "control_idle_timeout");
}

/* [global] send_uring: yes|no, unset by default, written back as set (no kept) */
static void test_send_uring(void)
{
	struct hl_conf *c = parse_ok("");
	char *text = NULL;

	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	CU_ASSERT_EQUAL(c->send_uring, -1); /* unset: off */
	hl_conf_free(c);
	c = parse_ok("[global]\nsend_uring = yes\n");
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	CU_ASSERT_EQUAL(c->send_uring, 1);
	text = conf_text(c, NULL);
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "send_uring = yes\n"));
	free(text);
	hl_conf_free(c);
	c = parse_ok("[global]\nsend_uring = no\n");
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	CU_ASSERT_EQUAL(c->send_uring, 0);
	text = conf_text(c, NULL);
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "send_uring = no\n"));
	free(text);
	hl_conf_free(c);
	parse_err("[global]\nsend_uring = maybe\n", "t.conf:2:", "send_uring: expected yes or no");
}

/* [global] gateway / gateways: several gateways on one disk (docs/gateways.md) */
static void test_gateways(void)
{
	struct hl_conf *c = parse_ok("[global]\ngateway = 2\ngateways = 3, 2,1\n");
	char *text = NULL;

	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	CU_ASSERT_EQUAL(c->gateway, 2);
	CU_ASSERT_EQUAL(c->n_gateways, 3);
	CU_ASSERT_EQUAL(c->gateways[0], 1); /* sorted */
	CU_ASSERT_EQUAL(c->gateways[2], 3);
	text = conf_text(c, NULL);
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "gateway = 2\ngateways = 1,2,3\n"));
	free(text);
	hl_conf_free(c);
	parse_err("[global]\ngateway = 0\n", "t.conf:2:", "gateway");
	parse_err("[global]\ngateway = 256\ngateways = 1\n", "t.conf:2:", "gateway");
	parse_err("[global]\ngateway = 1\ngateways = 1,x\n", "t.conf:3:", "gateways");
	parse_err("[global]\ngateway = 1\ngateways = 1,1\n", "t.conf:3:", "twice");
	parse_err("[global]\ngateways = 1,2\n", "t.conf:1:", "set gateway");
	parse_err("[global]\ngateway = 3\ngateways = 1,2\n", "t.conf:1:", "not in gateways");
}

/* [global] gateway_lease_ms / gateway_dead_ms and their safety rule */
static void test_gateway_timers(void)
{
	struct hl_conf *c = parse_ok("[global]\ngateway = 1\ngateways = 1,2\n"
	                             "gateway_lease_ms = 1000\ngateway_dead_ms = 2000\n");
	char *text = NULL;

	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	CU_ASSERT_EQUAL(c->gateway_lease_ms, 1000);
	CU_ASSERT_EQUAL(c->gateway_dead_ms, 2000);
	text = conf_text(c, NULL);
	CU_ASSERT_PTR_NOT_NULL(strstr(text, "gateway_lease_ms = 1000\ngateway_dead_ms = 2000\n"));
	free(text);
	hl_conf_free(c);
	/* unset: the defaults, nothing written */
	c = parse_ok("[global]\ngateway = 1\ngateways = 1,2\n");
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	CU_ASSERT_EQUAL(c->gateway_lease_ms, 0);
	hl_conf_free(c);
	/* exactly the margin is allowed; a millisecond less is refused at the line that breaks it */
	c = parse_ok("[global]\ngateway_lease_ms = 1500\ngateway_dead_ms = 2000\n");
	CU_ASSERT_PTR_NOT_NULL(c);
	hl_conf_free(c);
	parse_err("[global]\ngateway_lease_ms = 1500\ngateway_dead_ms = 1999\n", "t.conf:3:",
	          "gateway_dead_ms (1999) must be at least gateway_lease_ms (1500) + 500");
	/* a lease longer than the default dead time: the lease's line, the default named */
	parse_err("[global]\ngateway = 1\ngateways = 1,2\n\ngateway_lease_ms = 3600\n",
	          "t.conf:5:", "gateway_dead_ms (4000, the default)");
	parse_err("[global]\ngateway_dead_ms = 2400\n", "t.conf:2:",
	          "gateway_lease_ms (2000, the default) + 500");
	parse_err("[global]\ngateway_lease_ms = 100\n", "t.conf:2:", "200 to 60000");
	parse_err("[global]\ngateway_dead_ms = 60001\n", "t.conf:2:", "gateway_dead_ms");
	parse_err("[global]\ngateway_dead_ms = soon\n", "t.conf:2:", "gateway_dead_ms");
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

static const char ochap_base[] = "[global]\n"
				  "[disk d]\n"
				  "origin = iscsi://10.0.0.1/iqn.2026-11.io.san:t/0\n";

/* Parse ochap_base plus `extra` lines. */
static struct hl_conf *ochap_parse(const char *extra, char *err, size_t errlen, int *rc)
{
	char text[2048];
	struct hl_conf *c = NULL;

	snprintf(text, sizeof(text), "%s%s", ochap_base, extra);
	*rc = hl_conf_parse(text, strlen(text), "t.conf", &c, err, errlen);
	return c;
}

/* A secret file with `mode`; path in path (size 64). */
static void secret_file(char *path, const char *content, mode_t mode)
{
	strcpy(path, "/tmp/hl-conf-ut-XXXXXX");
	int fd = mkstemp(path);
	CU_ASSERT_FATAL(fd >= 0);
	CU_ASSERT_FATAL(write(fd, content, strlen(content)) == (ssize_t)strlen(content));
	CU_ASSERT_FATAL(fchmod(fd, mode) == 0);
	close(fd);
}

/* The origin's CHAP credentials as [disk] keys, from a root-only file, and their errors. */
static void test_origin_chap_keys(void)
{
	char err[512], path[64], extra[512];
	struct hl_conf *c, *d;
	int rc;

	c = ochap_parse("origin_chap_user = hl\norigin_chap_secret = Sxx-0123456789\n"
			"origin_mutual_user = san\norigin_mutual_secret = Myy-0123456789\n",
			err, sizeof(err), &rc);
	CU_ASSERT_EQUAL_FATAL(rc, 0);
	CU_ASSERT_STRING_EQUAL(c->disks[0].ochap.user, "hl");
	CU_ASSERT_STRING_EQUAL(hl_conf_origin_secret(&c->disks[0].ochap), "Sxx-0123456789");
	CU_ASSERT_STRING_EQUAL(c->disks[0].ochap.mutual_secret, "Myy-0123456789");
	/* the control plane's "********" (what get shows) leaves the secret as it is */
	CU_ASSERT_EQUAL(hl_conf_set(c, HL_CONF_DISK, "d", "origin_chap_secret", HL_CONF_SECRET_MASK,
				    err, sizeof(err)), 0);
	CU_ASSERT_STRING_EQUAL(c->disks[0].ochap.secret, "Sxx-0123456789");
	hl_conf_free(c);
	{
		const char t[] = "[global]\ndiscovery_chap_user = d\ndiscovery_chap_secret = Dxx-0123456789\n"
				 "[target iqn.2026-11.io.hotlun:t]\nchap_user = u\nchap_secret = Txx-0123456789\n"
				 "mutual_user = m\nmutual_secret = Mxx-0123456789\n";
		c = parse_ok(t);
		CU_ASSERT_PTR_NOT_NULL_FATAL(c);
		CU_ASSERT_EQUAL(hl_conf_set(c, HL_CONF_TARGET, "iqn.2026-11.io.hotlun:t", "chap_secret",
					    HL_CONF_SECRET_MASK, err, sizeof(err)), 0);
		CU_ASSERT_EQUAL(hl_conf_set(c, HL_CONF_TARGET, "iqn.2026-11.io.hotlun:t", "mutual_secret",
					    HL_CONF_SECRET_MASK, err, sizeof(err)), 0);
		CU_ASSERT_EQUAL(hl_conf_set(c, HL_CONF_GLOBAL, NULL, "discovery_chap_secret",
					    HL_CONF_SECRET_MASK, err, sizeof(err)), 0);
		CU_ASSERT_STRING_EQUAL(c->targets[0].chap_secret, "Txx-0123456789");
		CU_ASSERT_STRING_EQUAL(c->targets[0].mutual_secret, "Mxx-0123456789");
		CU_ASSERT_STRING_EQUAL(c->discovery_chap_secret, "Dxx-0123456789");
		hl_conf_free(c);
	}

	/* a file readable by root only: read; the config keeps the path, not the secret */
	secret_file(path, "Fzz-0123456789\n", 0600);
	snprintf(extra, sizeof(extra), "origin_chap_user = hl\norigin_chap_secret_file = %s\n", path);
	c = ochap_parse(extra, err, sizeof(err), &rc);
	CU_ASSERT_EQUAL_FATAL(rc, 0);
	CU_ASSERT_STRING_EQUAL(hl_conf_origin_secret(&c->disks[0].ochap), "Fzz-0123456789");
	char *text = NULL;
	text = conf_text(c, NULL);
	CU_ASSERT_PTR_NULL(strstr(text, "Fzz"));
	CU_ASSERT_PTR_NOT_NULL(strstr(text, path));
	free(text);
	/* a copy keeps the secret read, even once the file is gone */
	unlink(path);
	CU_ASSERT_EQUAL_FATAL(hl_conf_dup(c, &d), 0);
	CU_ASSERT_STRING_EQUAL(hl_conf_origin_secret(&d->disks[0].ochap), "Fzz-0123456789");
	hl_conf_free(d);
	hl_conf_free(c);

	/* group- or world-readable: refused with FILE:LINE */
	secret_file(path, "Fzz-0123456789\n", 0640);
	snprintf(extra, sizeof(extra), "origin_chap_user = hl\norigin_chap_secret_file = %s\n", path);
	c = ochap_parse(extra, err, sizeof(err), &rc);
	CU_ASSERT_EQUAL(rc, -EINVAL);
	CU_ASSERT_PTR_NULL(c);
	CU_ASSERT_EQUAL(strncmp(err, "t.conf:5: origin_chap_secret_file", 33), 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "chmod 600"));
	chmod(path, 0604);
	c = ochap_parse(extra, err, sizeof(err), &rc);
	CU_ASSERT_EQUAL(rc, -EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "t.conf:5:"));
	unlink(path);
	c = ochap_parse(extra, err, sizeof(err), &rc);
	CU_ASSERT_EQUAL(rc, -EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "No such file"));

	/* combinations */
	c = ochap_parse("origin_chap_user = hl\n", err, sizeof(err), &rc);
	CU_ASSERT_EQUAL(rc, -EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "go together"));
	c = ochap_parse("origin_mutual_user = s\norigin_mutual_secret = Myy-0123456789\n", err,
			sizeof(err), &rc);
	CU_ASSERT_EQUAL(rc, -EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "needs origin_chap_user"));
	{
		const char both[] = "[global]\n[disk d]\n"
				    "origin = iscsi://u%Sxx-0123456789@10.0.0.1/iqn.2026-11.io.san:t/0\n"
				    "origin_chap_user = hl\norigin_chap_secret = Sxx-0123456789\n";
		CU_ASSERT_EQUAL(hl_conf_parse(both, strlen(both), "t.conf", &c, err, sizeof(err)),
				-EINVAL);
		CU_ASSERT_PTR_NOT_NULL(strstr(err, "use one of them"));
		CU_ASSERT_PTR_NULL(strstr(err, "Sxx")); /* an error never shows the secret */
	}
	{
		const char file_origin[] = "[global]\n[disk d]\norigin = file:/x\n"
					   "origin_chap_user = hl\norigin_chap_secret = s\n";
		CU_ASSERT_EQUAL(hl_conf_parse(file_origin, strlen(file_origin), "t.conf", &c, err,
					      sizeof(err)), -EINVAL);
		CU_ASSERT_PTR_NOT_NULL(strstr(err, "iscsi: origins"));
	}
}

/* get shows an origin URL's secret as ***; set takes that back unchanged, and nothing else with ***. */
static void test_masked_origin_round_trip(void)
{
	const char text[] = "[global]\n[disk d]\n"
			    "origin = iscsi://u%Sxx-0123456789@10.0.0.1/iqn.2026-11.io.san:t/0\n";
	struct hl_conf *c = parse_ok(text);
	char err[512];

	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	CU_ASSERT_EQUAL(hl_conf_set(c, HL_CONF_DISK, "d", "origin",
				    "iscsi://u%***@10.0.0.1/iqn.2026-11.io.san:t/0", err, sizeof(err)),
			0);
	CU_ASSERT_STRING_EQUAL(c->disks[0].origin,
			       "iscsi://u%Sxx-0123456789@10.0.0.1/iqn.2026-11.io.san:t/0");
	CU_ASSERT_EQUAL(hl_conf_set(c, HL_CONF_DISK, "d", "origin",
				    "iscsi://u%***@10.0.0.2/iqn.2026-11.io.san:t/0", err, sizeof(err)),
			-EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "not shown"));
	CU_ASSERT_STRING_EQUAL(c->disks[0].origin,
			       "iscsi://u%Sxx-0123456789@10.0.0.1/iqn.2026-11.io.san:t/0");
	hl_conf_free(c);
}

/* issue 19 item 4: a value may not carry a control character, whichever way it comes */
static void test_control_chars_refused(void)
{
	struct hl_conf *c = parse_ok("[disk a]\norigin = /a\n[target iqn.2026-11.io.hotlun:t]\n"
				     "lun.0 = a\n");
	static const char *const bad[] = {"x\nallow = ALL", "x\rchap_user = u", "x\001y",
					  "x\ty", "x\177", "\n"};
	const char *t = "iqn.2026-11.io.hotlun:t";
	char err[256];

	if (!c)
		return;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		CU_ASSERT_EQUAL(hl_conf_set(c, HL_CONF_TARGET, t, "alias", bad[i], err, sizeof(err)),
				-EINVAL);
		CU_ASSERT_PTR_NOT_NULL(strstr(err, "alias: control character"));
		CU_ASSERT_PTR_NULL(c->targets[0].alias);
	}
	/* every kind of string value goes through the same gate */
	CU_ASSERT_EQUAL(hl_conf_set(c, HL_CONF_DISK, "a", "origin", "/a\n[disk b]", err,
				    sizeof(err)), -EINVAL);
	CU_ASSERT_STRING_EQUAL(c->disks[0].origin, "/a");
	CU_ASSERT_EQUAL(hl_conf_set(c, HL_CONF_TARGET, t, "chap_user", "u\nallow = ALL", err,
				    sizeof(err)), -EINVAL);
	CU_ASSERT_EQUAL(hl_conf_set(c, HL_CONF_TARGET, t, "lun.1", "a\n", err, sizeof(err)),
			-EINVAL);
	CU_ASSERT_EQUAL(hl_conf_set(c, HL_CONF_GLOBAL, NULL, "state_dir", "/s\n", err, sizeof(err)),
			-EINVAL);
	CU_ASSERT_EQUAL(hl_conf_set(c, HL_CONF_GLOBAL, NULL, "discovery_chap_user", "d\x1b", err,
				    sizeof(err)), -EINVAL);
	CU_ASSERT_FALSE(c->targets[0].allow_all);
	CU_ASSERT_EQUAL(c->targets[0].n_luns, 1);
	/* printable oddities stay allowed and are quoted by the writer */
	CU_ASSERT_EQUAL(hl_conf_set(c, HL_CONF_TARGET, t, "alias", " a ; b # \"c\" \\ ", err,
				    sizeof(err)), 0);
	hl_conf_free(c);

	/* in a file: FILE:LINE of the value (a CR before the newline is still fine) */
	parse_err("[global]\nstate_dir = /a\033b\n", "t.conf:2:", "state_dir: control character 0x1b");
	parse_err("[global]\r\nstate_dir = \"/a\rb\"\r\n", "t.conf:2:", "0x0d");
	c = parse_ok("[global]\r\nstate_dir = /a\r\n");
	if (c)
		CU_ASSERT_STRING_EQUAL(c->state_dir, "/a");
	hl_conf_free(c);
}

/* What saveconfig relies on: a configuration the writer cannot keep reads back as another one. */
static void test_same_after_write(void)
{
	struct hl_conf *c = parse_ok("[disk a]\norigin = /a\n[target iqn.2026-11.io.hotlun:t]\n"
				     "lun.0 = a\nalias = \" x ; y \"\n");
	struct hl_conf *back = NULL;
	char *text = NULL, err[256];
	size_t len = 0;

	if (!c)
		return;
	text = conf_text(c, &len);
	CU_ASSERT_EQUAL(hl_conf_parse(text, len, "w.conf", &back, err, sizeof(err)), 0);
	CU_ASSERT_TRUE(back && hl_conf_same(c, back));
	hl_conf_free(back);
	back = NULL;
	free(text);
	text = NULL;

	/* a newline that got past the gates (as it once did through `set alias`) */
	free(c->targets[0].alias);
	c->targets[0].alias = strdup("x\nallow = ALL");
	text = conf_text(c, &len);
	int rc = hl_conf_parse(text, len, "w.conf", &back, err, sizeof(err));
	CU_ASSERT_TRUE(rc != 0 || !hl_conf_same(c, back));
	if (rc == 0)
		CU_ASSERT_TRUE(back->targets[0].allow_all); /* the injection the check catches */
	hl_conf_free(back);
	free(text);
	hl_conf_free(c);
}

/*
 * [global] max_pending_logins{,_per_addr}, max_sessions{,_per_addr}: 1..1000000, kept by the
 * writer, unset to 0 (default).
 */
static void test_pending_login_keys(void)
{
	char err[256];
	struct hl_conf *d = NULL;

	parse_err("[global]\nmax_pending_logins = 0\n", "t.conf:2:", "at least 1");
	parse_err("[global]\nmax_pending_logins_per_addr = 1000001\n", "t.conf:2:",
		  "max_pending_logins_per_addr: expected a whole number");
	parse_err("[global]\nmax_pending_logins = many\n", "t.conf:2:", "max_pending_logins");
	struct hl_conf *c = parse_ok("[global]\nmax_pending_logins = 8\nmax_pending_logins_per_addr = 4\n");
	if (!c)
		return;
	CU_ASSERT_EQUAL(c->max_pending_logins, 8);
	CU_ASSERT_EQUAL(c->max_pending_logins_per_addr, 4);
	CU_ASSERT_EQUAL(hl_conf_dup(c, &d), 0); /* through the writer and the parser */
	if (d) {
		CU_ASSERT_EQUAL(d->max_pending_logins, 8);
		CU_ASSERT_EQUAL(d->max_pending_logins_per_addr, 4);
		hl_conf_free(d);
	}
	CU_ASSERT_EQUAL(hl_conf_set(c, HL_CONF_GLOBAL, NULL, "max_pending_logins_per_addr", "6", err,
				    sizeof(err)), 0);
	CU_ASSERT_EQUAL(c->max_pending_logins_per_addr, 6);
	CU_ASSERT_EQUAL(c->max_pending_logins, 8);
	CU_ASSERT_EQUAL(hl_conf_unset(c, HL_CONF_GLOBAL, NULL, "max_pending_logins", NULL, err,
				      sizeof(err)), 0);
	CU_ASSERT_EQUAL(c->max_pending_logins, 0);
	hl_conf_free(c);

	/* issue 24: the session caps follow the same rules */
	parse_err("[global]\nmax_sessions = 0\n", "t.conf:2:", "at least 1");
	c = parse_ok("[global]\nmax_sessions = 300\nmax_sessions_per_addr = 20\n");
	if (!c)
		return;
	CU_ASSERT_EQUAL(hl_conf_dup(c, &d), 0);
	if (d) {
		CU_ASSERT_EQUAL(d->max_sessions, 300);
		CU_ASSERT_EQUAL(d->max_sessions_per_addr, 20);
		hl_conf_free(d);
	}
	CU_ASSERT_EQUAL(hl_conf_unset(c, HL_CONF_GLOBAL, NULL, "max_sessions_per_addr", NULL, err,
				      sizeof(err)), 0);
	CU_ASSERT_EQUAL(c->max_sessions_per_addr, 0);
	hl_conf_free(c);
}

/* issue 28: [global] metrics_listen: ADDRESS:PORT or off; through the writer; live edits */
static void test_metrics_listen(void)
{
	char err[256];
	struct hl_conf *d = NULL;

	parse_err("[global]\nmetrics_listen = localhost:9520\n",
	          "t.conf:2:", "metrics_listen: 'localhost:9520' is not ADDRESS:PORT");
	parse_err("[global]\nmetrics_listen = 127.0.0.1\n", "t.conf:2:", "metrics_listen");
	parse_err("[global]\nmetrics_listen = 127.0.0.1:99999\n", "t.conf:2:", "metrics_listen");
	struct hl_conf *c = parse_ok("[global]\nmetrics_listen = [::1]:9520\n");
	if (!c)
		return;
	CU_ASSERT_STRING_EQUAL(c->metrics_listen, "[::1]:9520");
	CU_ASSERT_EQUAL(hl_conf_dup(c, &d), 0);
	if (d) {
		CU_ASSERT_STRING_EQUAL(d->metrics_listen, "[::1]:9520");
		hl_conf_free(d);
	}
	CU_ASSERT_EQUAL(
	    hl_conf_set(c, HL_CONF_GLOBAL, NULL, "metrics_listen", "off", err, sizeof(err)), 0);
	CU_ASSERT_PTR_NULL(c->metrics_listen);
	CU_ASSERT_EQUAL(hl_conf_set(c, HL_CONF_GLOBAL, NULL, "metrics_listen", "127.0.0.1:9521",
	                            err, sizeof(err)),
	                0);
	CU_ASSERT_STRING_EQUAL(c->metrics_listen, "127.0.0.1:9521");
	CU_ASSERT_EQUAL(
	    hl_conf_unset(c, HL_CONF_GLOBAL, NULL, "metrics_listen", NULL, err, sizeof(err)), 0);
	CU_ASSERT_PTR_NULL(c->metrics_listen);
	hl_conf_free(c);
	c = parse_ok("[global]\nmetrics_listen = off\n");
	if (c) {
		CU_ASSERT_PTR_NULL(c->metrics_listen);
		hl_conf_free(c);
	}
}

/* issue 17: [disk] exclusive (warm restarts of origins that cannot prove themselves unchanged) */
static void test_disk_exclusive(void)
{
	struct hl_conf *c;
	char *buf = NULL;

	parse_err("[disk d]\norigin = /x\nexclusive = maybe\n", "t.conf:3:",
	          "exclusive: expected yes or no");
	c = parse_ok("[disk d]\norigin = /dev/sdz\nexclusive = yes\n[disk e]\norigin = /y\n");
	if (!c)
		return;
	CU_ASSERT(c->disks[0].exclusive);
	CU_ASSERT_FALSE(c->disks[1].exclusive);
	buf = conf_text(c, NULL);
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
	buf = conf_text(c, NULL);
	CU_ASSERT_PTR_NOT_NULL(strstr(buf, "serial = GW-LUN-0001\n"));
	CU_ASSERT_PTR_NOT_NULL(strstr(buf, "naa = naa.6001405abcdef0123456789abcdef001\n"));
	free(buf);
	hl_conf_free(c);
}

static const struct hl_test tests[] = {
    {"control characters refused", test_control_chars_refused},
    {"same after write", test_same_after_write},
    {"[global] max_pending_logins keys", test_pending_login_keys},
    {"[global] metrics_listen", test_metrics_listen},
    {"runtime edits", test_runtime_edits},
    {"issue example parses", test_issue_example_parses},
    {"errors name file:line", test_errors_name_file_and_line},
    {"CHAP rules", test_chap_rules},
    {"write round trip", test_write_round_trip},
    {"defaults", test_defaults},
    {"logout_timeout", test_logout_timeout},
    {"control_idle_timeout", test_control_idle_timeout},
    {"send_uring", test_send_uring},
    {"gateway and gateways", test_gateways},
    {"[global] gateway_lease_ms / gateway_dead_ms and the safety rule", test_gateway_timers},
    {"NUL and long lines", test_nul_and_long_lines_rejected},
    {"origin CHAP keys and secret file", test_origin_chap_keys},
    {"masked origin round trip", test_masked_origin_round_trip},
    {"[disk] exclusive", test_disk_exclusive},
    {"[disk] serial and naa", test_disk_identity_keys},
    {NULL, NULL},
};

int main(void)
{
	hl_log_open(false, HL_LOG_ERR);
	return hl_test_run("conf", tests);
}
