/*
 * iscsi_ut.c - the iscsi: origin. Pure parts (URL parsing, sense data,
 * SCSI status -> errno) and the backend itself against an in-process SAN:
 * hotlun's own iSCSI server with a file LUN, on its own reactor thread, on a
 * kernel-chosen loopback port. The client side runs on a second reactor
 * thread; the test thread submits through hl_reactor_call and waits.
 */
#include "config.h"

#include "hl_test.h"
#include "hotlun/event.h"
#include "hotlun/iscsi.h"
#include "hotlun/origin.h"
#include "hotlun/scsi.h"
#include "hotlun/util.h"
#include "origin/origin_internal.h"
#include "origin/origin_iscsi.h"

#include <errno.h>
#include <fcntl.h>
#include <iscsi/iscsi.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define IQN      "iqn.2026-11.io.hotlun:ut-san"
#define IQN_CHAP "iqn.2026-11.io.hotlun:ut-san-chap"
#define SAN_SIZE (32u << 20)

/* ---------------------------------------------------------------- URL */

static void test_url_basic(void)
{
	struct origin_iscsi_url u;

	CU_ASSERT_EQUAL(origin_iscsi_url_parse("//san.example.com/iqn.2001-05.com.x:disk1/3", &u),
	                0);
	CU_ASSERT_STRING_EQUAL(u.host, "san.example.com");
	CU_ASSERT_FALSE(u.ipv6);
	CU_ASSERT_EQUAL(u.port, 3260);
	CU_ASSERT_STRING_EQUAL(u.target, "iqn.2001-05.com.x:disk1");
	CU_ASSERT_EQUAL(u.lun, 3);
	CU_ASSERT_STRING_EQUAL(u.user, "");
	CU_ASSERT_STRING_EQUAL(u.secret, "");
	CU_ASSERT_STRING_EQUAL(u.initiator, "");
	CU_ASSERT_EQUAL(u.timeout_s, ORIGIN_ISCSI_DEFAULT_TIMEOUT_S);
	CU_ASSERT_EQUAL(u.qd, ORIGIN_ISCSI_DEFAULT_QD);
}

static void test_url_port_chap(void)
{
	struct origin_iscsi_url u;

	CU_ASSERT_EQUAL(origin_iscsi_url_parse("//alice%s3cr%et@10.0.0.7:3261/iqn.a:b/0", &u), 0);
	CU_ASSERT_STRING_EQUAL(u.user, "alice");
	CU_ASSERT_STRING_EQUAL(u.secret, "s3cr%et"); /* the first '%' splits */
	CU_ASSERT_STRING_EQUAL(u.host, "10.0.0.7");
	CU_ASSERT_EQUAL(u.port, 3261);
	CU_ASSERT_EQUAL(u.lun, 0);
	/* a secret with '@': the last '@' of the authority ends the userinfo */
	CU_ASSERT_EQUAL(origin_iscsi_url_parse("//bob%p@ss@host/iqn.a:b/1", &u), 0);
	CU_ASSERT_STRING_EQUAL(u.secret, "p@ss");
	CU_ASSERT_STRING_EQUAL(u.host, "host");
}

static void test_url_ipv6(void)
{
	struct origin_iscsi_url u;

	CU_ASSERT_EQUAL(origin_iscsi_url_parse("//[::1]:3262/iqn.a:b/2", &u), 0);
	CU_ASSERT_STRING_EQUAL(u.host, "::1");
	CU_ASSERT_TRUE(u.ipv6);
	CU_ASSERT_EQUAL(u.port, 3262);
	CU_ASSERT_EQUAL(u.lun, 2);
	CU_ASSERT_EQUAL(origin_iscsi_url_parse("//u%s@[fe80::1:2]/iqn.a:b/0", &u), 0);
	CU_ASSERT_STRING_EQUAL(u.host, "fe80::1:2");
	CU_ASSERT_EQUAL(u.port, 3260);
	CU_ASSERT_STRING_EQUAL(u.user, "u");
}

static void test_url_query(void)
{
	struct origin_iscsi_url u;

	CU_ASSERT_EQUAL(
	    origin_iscsi_url_parse("//h/iqn.a:b/5?initiator=iqn.2026-11.x:y&timeout=7&qd=16", &u),
	    0);
	CU_ASSERT_STRING_EQUAL(u.initiator, "iqn.2026-11.x:y");
	CU_ASSERT_EQUAL(u.timeout_s, 7);
	CU_ASSERT_EQUAL(u.qd, 16);
	CU_ASSERT_EQUAL(u.lun, 5);
}

static void test_url_bad(void)
{
	static const char *const bad[] = {
	    "",
	    "/h/iqn.a:b/0",               /* one slash */
	    "//h",                        /* no path */
	    "//h/iqn.a:b",                /* no LUN */
	    "//h/iqn.a:b/",               /* empty LUN */
	    "//h/iqn.a:b/x",              /* LUN not a number */
	    "//h/iqn.a:b/16384",          /* LUN beyond flat addressing */
	    "//h/iqn.a:b/0/extra",        /* trailing path */
	    "//h//0",                     /* empty target */
	    "///iqn.a:b/0",               /* empty host */
	    "//h:/iqn.a:b/0",             /* empty port */
	    "//h:0/iqn.a:b/0",            /* port 0 */
	    "//h:65536/iqn.a:b/0",        /* port too big */
	    "//h:32a/iqn.a:b/0",          /* port not a number */
	    "//::1/iqn.a:b/0",            /* IPv6 without brackets */
	    "//[::1/iqn.a:b/0",           /* unclosed bracket */
	    "//[]/iqn.a:b/0",             /* empty brackets */
	    "//[::1]x/iqn.a:b/0",         /* junk after the bracket */
	    "//[fe80::1%eth0]/iqn.a:b/0", /* zone ids are not supported */
	    "//user@h/iqn.a:b/0",         /* user without a secret */
	    "//%secret@h/iqn.a:b/0",      /* empty user */
	    "//user%@h/iqn.a:b/0",        /* empty secret */
	    "//h/iqn a:b/0",              /* space in the target */
	    "//h/iqn.a:b/0?",             /* empty query key */
	    "//h/iqn.a:b/0?colour=red",   /* unknown key */
	    "//h/iqn.a:b/0?timeout=0",
	    "//h/iqn.a:b/0?timeout=99999",
	    "//h/iqn.a:b/0?qd=0",
	    "//h/iqn.a:b/0?qd=5000",
	    "//h/iqn.a:b/0?initiator=",
	    "//h/iqn.a:b/0?timeout",
	    "//h/iqn.a:b/0?qd=1&",
	    "//h/iqn.a:b/00000000000000000000009",
	};
	struct origin_iscsi_url u;
	char longhost[400];

	for (size_t i = 0; i < HL_ARRAY_SIZE(bad); i++) {
		int rc = origin_iscsi_url_parse(bad[i], &u);
		if (rc != -EINVAL)
			fprintf(stderr, "accepted: \"%s\"\n", bad[i]);
		CU_ASSERT_EQUAL(rc, -EINVAL);
	}
	CU_ASSERT_EQUAL(origin_iscsi_url_parse(NULL, &u), -EINVAL);
	memset(longhost, 'a', sizeof(longhost));
	memcpy(longhost, "//", 2);
	strcpy(longhost + 300, "/iqn.a:b/0");
	CU_ASSERT_EQUAL(origin_iscsi_url_parse(longhost, &u), -EINVAL);
}

static void test_url_via_open(void)
{
	struct hl_origin *o = NULL;

	/* the scheme is dispatched to this backend, which refuses the syntax before any I/O */
	CU_ASSERT_EQUAL(hl_origin_open("iscsi://h", NULL, &o), -EINVAL);
	CU_ASSERT_EQUAL(hl_origin_open("ISCSI://h:0/iqn.a:b/0", NULL, &o), -EINVAL);
	CU_ASSERT_PTR_NULL(o);
}

static void test_default_initiator(void)
{
	char buf[ORIGIN_ISCSI_NAME_MAX];

	origin_iscsi_default_initiator(buf, sizeof(buf));
	CU_ASSERT_EQUAL(strncmp(buf, "iqn.2026-11.io.hotlun:origin:", 29), 0);
	CU_ASSERT(strlen(buf) > 29);
	for (const char *c = buf; *c; c++)
		CU_ASSERT(!(*c >= 'A' && *c <= 'Z') && *c != ' ');
}

/* ---------------------------------------------------------------- sense and status */

static void test_sense_fixed(void)
{
	/* fixed format, VALID, MISCOMPARE, INFORMATION = 0x1234, ASC 1D/00 */
	uint8_t s[18] = {0xf0, 0, 0x0e, 0, 0, 0x12, 0x34, 10, 0, 0, 0, 0, 0x1d, 0x00};
	struct origin_iscsi_sense d;

	CU_ASSERT_EQUAL(origin_iscsi_sense_parse(s, sizeof(s), &d), 0);
	CU_ASSERT_EQUAL(d.key, 0x0e);
	CU_ASSERT_EQUAL(d.asc, 0x1d);
	CU_ASSERT_EQUAL(d.ascq, 0x00);
	CU_ASSERT_TRUE(d.info_valid);
	CU_ASSERT_EQUAL(d.info, 0x1234);
	s[0] = 0x70; /* INFORMATION not valid */
	CU_ASSERT_EQUAL(origin_iscsi_sense_parse(s, sizeof(s), &d), 0);
	CU_ASSERT_FALSE(d.info_valid);
	/* truncated: the key only */
	CU_ASSERT_EQUAL(origin_iscsi_sense_parse(s, 3, &d), 0);
	CU_ASSERT_EQUAL(d.key, 0x0e);
	CU_ASSERT_EQUAL(d.asc, 0);
}

static void test_sense_descriptor(void)
{
	/* descriptor format, MEDIUM ERROR 11/00, information descriptor 0x0102030405 */
	uint8_t s[20] = {0x72, 0x03, 0x11, 0x00, 0, 0,    0,    12,   0x00, 0x0a,
	                 0x80, 0,    0,    0,    0, 0x01, 0x02, 0x03, 0x04, 0x05};
	struct origin_iscsi_sense d;

	CU_ASSERT_EQUAL(origin_iscsi_sense_parse(s, sizeof(s), &d), 0);
	CU_ASSERT_EQUAL(d.key, 3);
	CU_ASSERT_EQUAL(d.asc, 0x11);
	CU_ASSERT_TRUE(d.info_valid);
	CU_ASSERT_EQUAL(d.info, 0x0102030405ull);
	/* a descriptor that claims more than there is is ignored, not read */
	s[9] = 0x40;
	CU_ASSERT_EQUAL(origin_iscsi_sense_parse(s, sizeof(s), &d), 0);
	CU_ASSERT_FALSE(d.info_valid);
}

static void test_sense_bad(void)
{
	uint8_t s[4] = {0x00, 0, 0, 0};
	struct origin_iscsi_sense d;

	CU_ASSERT_EQUAL(origin_iscsi_sense_parse(s, sizeof(s), &d), -EINVAL); /* response code 0 */
	CU_ASSERT_EQUAL(origin_iscsi_sense_parse(NULL, 0, &d), -EINVAL);
	s[0] = 0x70;
	CU_ASSERT_EQUAL(origin_iscsi_sense_parse(s, 1, &d), -EINVAL);
}

static void test_sense_errno(void)
{
	CU_ASSERT_EQUAL(origin_iscsi_sense_errno(0x1, 0x17, 0x01), 0);       /* recovered */
	CU_ASSERT_EQUAL(origin_iscsi_sense_errno(0x2, 0x04, 0x01), -EAGAIN); /* becoming ready */
	CU_ASSERT_EQUAL(origin_iscsi_sense_errno(0x2, 0x04, 0x0a), -EAGAIN); /* ALUA transition */
	CU_ASSERT_EQUAL(origin_iscsi_sense_errno(0x2, 0x3a, 0x00), -ENOMEDIUM);
	CU_ASSERT_EQUAL(origin_iscsi_sense_errno(0x2, 0x04, 0x03), -EIO); /* manual intervention */
	CU_ASSERT_EQUAL(origin_iscsi_sense_errno(0x3, 0x11, 0x00), -EIO);
	CU_ASSERT_EQUAL(origin_iscsi_sense_errno(0x4, 0x44, 0x00), -EIO);
	CU_ASSERT_EQUAL(origin_iscsi_sense_errno(0x5, 0x20, 0x00), -EOPNOTSUPP);
	CU_ASSERT_EQUAL(origin_iscsi_sense_errno(0x5, 0x21, 0x00), -EINVAL);
	CU_ASSERT_EQUAL(origin_iscsi_sense_errno(0x5, 0x24, 0x00), -EINVAL);
	CU_ASSERT_EQUAL(origin_iscsi_sense_errno(0x5, 0x25, 0x00), -ENXIO);
	CU_ASSERT_EQUAL(origin_iscsi_sense_errno(0x6, 0x29, 0x00), -EAGAIN); /* power on */
	CU_ASSERT_EQUAL(origin_iscsi_sense_errno(0x6, 0x2a, 0x09), -EAGAIN); /* capacity changed */
	CU_ASSERT_EQUAL(origin_iscsi_sense_errno(0x7, 0x27, 0x00), -EROFS);
	CU_ASSERT_EQUAL(origin_iscsi_sense_errno(0x7, 0x27, 0x07), -ENOSPC); /* thin pool full */
	CU_ASSERT_EQUAL(origin_iscsi_sense_errno(0x7, 0x20, 0x02), -EACCES);
	CU_ASSERT_EQUAL(origin_iscsi_sense_errno(0xb, 0x47, 0x00), -EAGAIN); /* aborted */
	CU_ASSERT_EQUAL(origin_iscsi_sense_errno(0xd, 0x00, 0x00), -ENOSPC);
	CU_ASSERT_EQUAL(origin_iscsi_sense_errno(0xe, 0x1d, 0x00), -EILSEQ);
	CU_ASSERT_EQUAL(origin_iscsi_sense_errno(0x9, 0x00, 0x00), -EIO); /* vendor */
}

static void test_status_errno(void)
{
	CU_ASSERT_EQUAL(origin_iscsi_status_errno(SCSI_STATUS_GOOD), 0);
	CU_ASSERT_EQUAL(origin_iscsi_status_errno(SCSI_STATUS_CONDITION_MET), 0);
	CU_ASSERT_EQUAL(origin_iscsi_status_errno(SCSI_STATUS_BUSY), -EAGAIN);
	CU_ASSERT_EQUAL(origin_iscsi_status_errno(SCSI_STATUS_TASK_SET_FULL), -EAGAIN);
	CU_ASSERT_EQUAL(origin_iscsi_status_errno(SCSI_STATUS_TASK_ABORTED), -EAGAIN);
	CU_ASSERT_EQUAL(origin_iscsi_status_errno(SCSI_STATUS_RESERVATION_CONFLICT), -EBADE);
	CU_ASSERT_EQUAL(origin_iscsi_status_errno(SCSI_STATUS_CANCELLED), -ENOTCONN);
	CU_ASSERT_EQUAL(origin_iscsi_status_errno(SCSI_STATUS_TIMEOUT), -ENOTCONN);
	CU_ASSERT_EQUAL(origin_iscsi_status_errno(SCSI_STATUS_ERROR), -ENOTCONN);
	CU_ASSERT_EQUAL(origin_iscsi_status_errno(0x77), -EIO);
}

/* ---------------------------------------------------------------- an in-process SAN */

static struct {
	struct hl_reactor *r;
	char path[64];
	struct hl_origin *origin;
	struct hl_lu *lu;
	struct hl_scsi_lun_map map;
	struct hl_iscsi_server *srv;
	uint16_t port;
	bool ok;
} san;

static int san_listen(void)
{
	struct hl_iscsi_server_config sc = {0};
	struct hl_iscsi_target_config tc = {0};
	char portal[64], bound[64];
	const char *colon;

	sc.reactors = &san.r;
	sc.n_reactors = 1;
	if (hl_iscsi_server_create(&sc, &san.srv))
		return -1;
	tc.name = IQN;
	tc.luns = &san.map;
	tc.allow_all = true;
	if (hl_iscsi_target_add(san.srv, &tc))
		return -1;
	tc.name = IQN_CHAP;
	hl_strlcpy(tc.chap.user, "utuser", sizeof(tc.chap.user));
	hl_strlcpy(tc.chap.secret, "ut-secret-1234", sizeof(tc.chap.secret));
	if (hl_iscsi_target_add(san.srv, &tc))
		return -1;
	snprintf(portal, sizeof(portal), "127.0.0.1:%u", san.port);
	if (hl_iscsi_portal_add(san.srv, portal, 1, bound, sizeof(bound)))
		return -1;
	colon = strrchr(bound, ':');
	san.port = (uint16_t)atoi(colon + 1);
	return 0;
}

static void san_stop(void)
{
	hl_iscsi_server_destroy(san.srv);
	san.srv = NULL;
}

static void san_setup(void)
{
	struct hl_lu_config lc;
	int fd;

	strcpy(san.path, "/tmp/hl-iscsi-ut-XXXXXX");
	fd = mkstemp(san.path);
	if (fd < 0 || ftruncate(fd, SAN_SIZE))
		return;
	close(fd);
	if (hl_origin_open(san.path, NULL, &san.origin))
		return;
	memset(&lc, 0, sizeof(lc));
	lc.name = "san";
	lc.block_size = 512;
	lc.naa[0] = 0x60;
	strcpy(lc.serial, "UTSAN0001");
	lc.write_cache = true;
	if (hl_lu_create(&lc, san.origin, &san.lu))
		return;
	san.map.lu[0] = san.lu;
	if (hl_reactor_create(&san.r, "san") || hl_reactor_start(san.r))
		return;
	san.ok = san_listen() == 0;
}

static void san_teardown(void)
{
	if (san.srv)
		san_stop();
	if (san.r) {
		hl_reactor_stop(san.r);
		hl_reactor_join(san.r);
		hl_reactor_destroy(san.r);
	}
	hl_lu_destroy(san.lu); /* closes the origin */
	unlink(san.path);
}

/* ---------------------------------------------------------------- client side */

static struct hl_reactor *cli_r;

struct call {
	struct hl_origin *o;
	struct hl_origin_io io;
	sem_t done;
	int submit_rc;
	int result;
	bool in_submit;
	bool cb_in_submit;
	struct hl_reactor *cb_reactor;
	struct hl_reactor *sub_reactor;
};

static void call_cb(struct hl_origin_io *io, int result)
{
	struct call *c = io->arg;

	c->result = result;
	c->cb_in_submit = c->in_submit;
	c->cb_reactor = hl_reactor_current();
	sem_post(&c->done);
}

static void call_submit(void *arg)
{
	struct call *c = arg;

	c->sub_reactor = hl_reactor_current();
	c->in_submit = true;
	c->submit_rc = hl_origin_submit(c->o, &c->io);
	c->in_submit = false;
	if (c->submit_rc) {
		c->result = c->submit_rc;
		sem_post(&c->done);
	}
}

/* Submit on reactor r and wait for the result (submit's error or the completion's). */
static int run_io_on(struct hl_reactor *r, struct hl_origin *o, enum hl_io_op op, unsigned flags,
                     uint64_t off, uint64_t len, void *buf, size_t buflen, struct call *c)
{
	struct iovec iov = {buf, buflen};

	memset(c, 0, sizeof(*c));
	sem_init(&c->done, 0, 0);
	c->o = o;
	c->io.op = op;
	c->io.flags = flags;
	c->io.offset = off;
	c->io.length = len;
	c->io.iov = buf ? &iov : NULL;
	c->io.iovcnt = buf ? 1 : 0;
	c->io.cb = call_cb;
	c->io.arg = c;
	if (hl_reactor_call(r, call_submit, c))
		return -999;
	sem_wait(&c->done);
	sem_destroy(&c->done);
	CU_ASSERT_FALSE(c->cb_in_submit);
	if (!c->submit_rc)
		CU_ASSERT_PTR_EQUAL(c->cb_reactor, r);
	return c->result;
}

static int run_io(struct hl_origin *o, enum hl_io_op op, unsigned flags, uint64_t off, uint64_t len,
                  void *buf)
{
	struct call c;
	size_t buflen = op == HL_IO_COMPARE_AND_WRITE ? 2 * len : len;

	return run_io_on(cli_r, o, op, flags, off, len, buf, buf ? buflen : 0, &c);
}

struct closer {
	struct hl_origin *o;
	sem_t done;
};

static void close_fn(void *arg)
{
	struct closer *cl = arg;

	hl_origin_close(cl->o);
	sem_post(&cl->done);
}

/* Close on the client reactor (where the sessions live), as the backend asks. */
static void close_on(struct hl_reactor *r, struct hl_origin *o)
{
	struct closer cl = {.o = o};

	sem_init(&cl.done, 0, 0);
	CU_ASSERT_FATAL(hl_reactor_call(r, close_fn, &cl) == 0);
	sem_wait(&cl.done);
	sem_destroy(&cl.done);
}

static struct hl_origin *open_san(const char *query)
{
	char uri[256];
	struct hl_origin *o = NULL;

	snprintf(uri, sizeof(uri), "iscsi://127.0.0.1:%u/%s/0%s", san.port, IQN,
	         query ? query : "");
	CU_ASSERT_EQUAL(hl_origin_open(uri, NULL, &o), 0);
	return o;
}

static bool pattern_ok(const uint8_t *b, size_t len, uint8_t seed)
{
	for (size_t i = 0; i < len; i++) {
		if (b[i] != (uint8_t)(i * 7 + seed))
			return false;
	}
	return true;
}

static void pattern_fill(uint8_t *b, size_t len, uint8_t seed)
{
	for (size_t i = 0; i < len; i++)
		b[i] = (uint8_t)(i * 7 + seed);
}

static bool file_range(uint64_t off, size_t len, uint8_t *out)
{
	int fd = open(san.path, O_RDONLY);
	bool ok = fd >= 0 && pread(fd, out, len, (off_t)off) == (ssize_t)len;

	if (fd >= 0)
		close(fd);
	return ok;
}

static void test_open_probe(void)
{
	struct hl_origin *o;

	CU_ASSERT_FATAL(san.ok);
	o = open_san(NULL);
	CU_ASSERT_FATAL(o != NULL);
	CU_ASSERT_EQUAL(o->size, SAN_SIZE);
	CU_ASSERT_FALSE(o->read_only);
	CU_ASSERT_TRUE(o->phys_block_size >= 512);
	/* hotlun over a file with hole punching reports LBPME+LBPU and LBPRZ */
	CU_ASSERT_TRUE(o->can_discard);
	CU_ASSERT_TRUE(o->zeroes_after_discard);
	/* the LUN's own name (VPD 83h): hotlun's SAN gives an NAA designator */
	char id[HL_ORIGIN_ID_MAX];
	bool lasting = false;
	CU_ASSERT_EQUAL(hl_origin_data_id(o, id, sizeof(id), &lasting), 0);
	CU_ASSERT_EQUAL(strncmp(id, "scsi-lu:naa:", 12), 0);
	CU_ASSERT_TRUE(lasting);
	close_on(cli_r, o);
}

static void test_open_refused(void)
{
	struct hl_origin *o = NULL;
	char uri[128];

	/* a target name the SAN does not have is refused at login; so is a LUN it lacks */
	snprintf(uri, sizeof(uri), "iscsi://127.0.0.1:%u/iqn.2026-11.io.hotlun:nobody/0", san.port);
	CU_ASSERT_EQUAL(hl_origin_open(uri, NULL, &o), -ECONNREFUSED);
	snprintf(uri, sizeof(uri), "iscsi://127.0.0.1:%u/%s/7", san.port, IQN); /* no LUN 7 */
	CU_ASSERT(hl_origin_open(uri, NULL, &o) < 0);
	CU_ASSERT_PTR_NULL(o);
}

static void test_read_write(void)
{
	struct hl_origin *o = open_san(NULL);
	size_t len = 256 * 1024;
	uint8_t *w = malloc(len), *r = malloc(len), *f = malloc(len);

	CU_ASSERT_FATAL(o && w && r && f);
	pattern_fill(w, len, 3);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_WRITE, 0, 1 << 20, len, w), 0);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_WRITE, HL_IO_FUA, 8 << 20, 4096, w), 0);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_FLUSH, 0, 0, 0, NULL), 0);
	memset(r, 0, len);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_READ, 0, 1 << 20, len, r), 0);
	CU_ASSERT_TRUE(pattern_ok(r, len, 3));
	/* the SAN's file has it too */
	CU_ASSERT_TRUE(file_range(1 << 20, len, f));
	CU_ASSERT_EQUAL(memcmp(f, w, len), 0);
	CU_ASSERT_TRUE(file_range(8 << 20, 4096, f));
	CU_ASSERT_EQUAL(memcmp(f, w, 4096), 0);
	/* zero length completes (asynchronously) */
	CU_ASSERT_EQUAL(run_io(o, HL_IO_READ, 0, 0, 0, NULL), 0);
	close_on(cli_r, o);
	free(w);
	free(r);
	free(f);
}

/* A transfer larger than the SAN's MAXIMUM TRANSFER LENGTH (16 MiB for hotlun) is split. */
static void test_split_transfer(void)
{
	struct hl_origin *o = open_san(NULL);
	size_t len = 20u << 20;
	uint8_t *w = malloc(len), *r = malloc(len);

	CU_ASSERT_FATAL(o && w && r);
	pattern_fill(w, len, 9);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_WRITE, 0, 4u << 20, len, w), 0);
	memset(r, 0, len);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_READ, 0, 4u << 20, len, r), 0);
	CU_ASSERT_EQUAL(memcmp(r, w, len), 0);
	close_on(cli_r, o);
	free(w);
	free(r);
}

static void test_checks(void)
{
	struct hl_origin *o = open_san(NULL);
	uint8_t buf[1024];
	struct call c;

	CU_ASSERT_FATAL(o != NULL);
	/* beyond the end, misaligned to the SAN's 512-byte blocks: refused at submit */
	CU_ASSERT_EQUAL(run_io(o, HL_IO_READ, 0, SAN_SIZE, 512, buf), -EINVAL);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_READ, 0, 100, 512, buf), -EINVAL);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_READ, 0, 0, 1000, buf), -EINVAL);
	/* COMPARE AND WRITE iovecs must carry twice the length */
	CU_ASSERT_EQUAL(run_io_on(cli_r, o, HL_IO_COMPARE_AND_WRITE, 0, 0, 1024, buf, 1024, &c),
	                -EINVAL);
	CU_ASSERT_EQUAL(run_io_on(cli_r, o, HL_IO_WRITE, 0, 0, 1024, buf, 512, &c), -EINVAL);
	close_on(cli_r, o);
}

static void test_discard_zeroes(void)
{
	struct hl_origin *o = open_san(NULL);
	size_t len = 64 * 1024;
	uint8_t *w = malloc(len), *r = malloc(len), *z = calloc(1, len);

	CU_ASSERT_FATAL(o && w && r && z);
	pattern_fill(w, len, 5);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_WRITE, 0, 2 << 20, len, w), 0);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_WRITE, 0, 3 << 20, len, w), 0);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_DISCARD, 0, 2 << 20, len, NULL), 0);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_WRITE_ZEROES, 0, 3 << 20, len, NULL), 0);
	memset(r, 0xaa, len);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_READ, 0, 2 << 20, len, r), 0);
	CU_ASSERT_EQUAL(memcmp(r, z, len), 0);
	memset(r, 0xaa, len);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_READ, 0, 3 << 20, len, r), 0);
	CU_ASSERT_EQUAL(memcmp(r, z, len), 0);
	close_on(cli_r, o);
	free(w);
	free(r);
	free(z);
}

static void test_compare_and_write(void)
{
	struct hl_origin *o = open_san(NULL);
	uint8_t cur[1024], buf[2048], r[1024];
	struct call c;

	CU_ASSERT_FATAL(o != NULL);
	pattern_fill(cur, sizeof(cur), 11);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_WRITE, 0, 5 << 20, sizeof(cur), cur), 0);
	/* match: the new data is written */
	memcpy(buf, cur, 1024);
	pattern_fill(buf + 1024, 1024, 12);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_COMPARE_AND_WRITE, 0, 5 << 20, 1024, buf), 0);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_READ, 0, 5 << 20, 1024, r), 0);
	CU_ASSERT_TRUE(pattern_ok(r, 1024, 12));
	/* miscompare at byte 700: -EILSEQ, offset reported, nothing written */
	memcpy(buf, r, 1024);
	buf[700] ^= 0xff;
	pattern_fill(buf + 1024, 1024, 13);
	CU_ASSERT_EQUAL(
	    run_io_on(cli_r, o, HL_IO_COMPARE_AND_WRITE, 0, 5 << 20, 1024, buf, sizeof(buf), &c),
	    -EILSEQ);
	CU_ASSERT_EQUAL(c.io.miscompare_offset, 700);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_READ, 0, 5 << 20, 1024, r), 0);
	CU_ASSERT_TRUE(pattern_ok(r, 1024, 12));
	close_on(cli_r, o);
}

/* Each reactor gets a session of its own; completions come back on the submitter. */
static void test_two_reactors(void)
{
	struct hl_origin *o = open_san(NULL);
	struct hl_reactor *r2 = NULL;
	uint8_t w[4096], r[4096];
	struct call c;

	CU_ASSERT_FATAL(o != NULL);
	CU_ASSERT_FATAL(hl_reactor_create(&r2, "cli2") == 0 && hl_reactor_start(r2) == 0);
	pattern_fill(w, sizeof(w), 21);
	CU_ASSERT_EQUAL(run_io_on(cli_r, o, HL_IO_WRITE, 0, 6 << 20, 4096, w, 4096, &c), 0);
	CU_ASSERT_EQUAL(run_io_on(r2, o, HL_IO_READ, 0, 6 << 20, 4096, r, 4096, &c), 0);
	CU_ASSERT_PTR_EQUAL(c.cb_reactor, r2);
	CU_ASSERT_TRUE(pattern_ok(r, 4096, 21));
	CU_ASSERT_EQUAL(origin_iscsi_sessions_up(o), 2);
	CU_ASSERT_EQUAL(hl_iscsi_target_sessions(san.srv, IQN), 3); /* and the poll's */
	/*
	 * close on cli_r's thread once r2 is gone: its destroy call detached
	 * its session (close may not run between a reactor's stop and destroy)
	 */
	hl_reactor_stop(r2);
	hl_reactor_join(r2);
	hl_reactor_destroy(r2);
	close_on(cli_r, o);
}

static void wait_sessions_up(struct hl_origin *o, unsigned n, int ms)
{
	for (int i = 0; i < ms / 10 && origin_iscsi_sessions_up(o) < n; i++)
		usleep(10000);
}

/* The SAN goes away and comes back within the limit: the I/O waits and succeeds. */
static void test_reconnect(void)
{
	struct hl_origin *o = open_san("?timeout=10");
	uint8_t w[4096], r[4096];
	struct call c;
	struct iovec iov = {r, sizeof(r)};
	uint64_t t0;

	CU_ASSERT_FATAL(o != NULL);
	pattern_fill(w, sizeof(w), 31);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_WRITE, 0, 7 << 20, 4096, w), 0);
	san_stop();
	/* a read submitted while the SAN is gone waits for it */
	memset(&c, 0, sizeof(c));
	sem_init(&c.done, 0, 0);
	c.o = o;
	c.io.op = HL_IO_READ;
	c.io.offset = 7 << 20;
	c.io.length = sizeof(r);
	c.io.iov = &iov;
	c.io.iovcnt = 1;
	c.io.cb = call_cb;
	c.io.arg = &c;
	t0 = hl_now_ns();
	CU_ASSERT_FATAL(hl_reactor_call(cli_r, call_submit, &c) == 0);
	usleep(700 * 1000);
	CU_ASSERT_EQUAL(sem_trywait(&c.done), -1); /* still waiting */
	CU_ASSERT_FATAL(san_listen() == 0);
	sem_wait(&c.done);
	sem_destroy(&c.done);
	CU_ASSERT_EQUAL(c.result, 0);
	CU_ASSERT_TRUE(pattern_ok(r, sizeof(r), 31));
	CU_ASSERT(hl_now_ns() - t0 < 8000000000ull);
	close_on(cli_r, o);
}

/* The SAN stays away past the limit: waiting I/O fails with -EIO, new I/O fails at once, and
 * everything works again once it is back. */
static void test_outage_limit(void)
{
	struct hl_origin *o = open_san("?timeout=1");
	uint8_t r[4096];
	uint64_t t0, dt;

	CU_ASSERT_FATAL(o != NULL);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_READ, 0, 0, 4096, r), 0);
	san_stop();
	t0 = hl_now_ns();
	CU_ASSERT_EQUAL(run_io(o, HL_IO_READ, 0, 0, 4096, r), -EIO);
	dt = hl_now_ns() - t0;
	CU_ASSERT(dt >= 900000000ull && dt < 4000000000ull);
	usleep(300 * 1000);
	t0 = hl_now_ns();
	CU_ASSERT_EQUAL(run_io(o, HL_IO_WRITE, 0, 0, 4096, r), -EIO);
	CU_ASSERT(hl_now_ns() - t0 < 200000000ull); /* at once */
	CU_ASSERT_FATAL(san_listen() == 0);
	wait_sessions_up(o, 1, 8000); /* back-off is at most 5 s */
	CU_ASSERT_EQUAL(origin_iscsi_sessions_up(o), 1);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_READ, 0, 0, 4096, r), 0);
	close_on(cli_r, o);
}

static void san_sleep(void *arg)
{
	usleep((useconds_t)(uintptr_t)arg);
}

/* The SAN stops answering (its reactor is blocked, TCP stays up): the NOP-Out probe finds out,
 * the I/O fails by its limit instead of hanging, and the session comes back afterwards. */
static void test_hung_san(void)
{
	struct hl_origin *o = open_san("?timeout=1");
	uint8_t r[4096];
	uint64_t t0, dt;

	CU_ASSERT_FATAL(o != NULL);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_READ, 0, 0, 4096, r), 0);
	CU_ASSERT_FATAL(hl_reactor_call(san.r, san_sleep, (void *)(uintptr_t)3000000) == 0);
	t0 = hl_now_ns();
	CU_ASSERT_EQUAL(run_io(o, HL_IO_READ, 0, 0, 4096, r), -EIO);
	dt = hl_now_ns() - t0;
	CU_ASSERT(dt < 2500000000ull); /* before the SAN wakes up (3 s) */
	usleep(2500000);               /* the SAN is back */
	wait_sessions_up(o, 1, 8000);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_READ, 0, 0, 4096, r), 0);
	close_on(cli_r, o);
}

/* Submit c->io again as the last completion left it (may_land included), and wait. */
static int resubmit(struct hl_reactor *r, struct call *c, struct iovec *iov)
{
	c->io.iov = iov;
	c->io.iovcnt = 1;
	c->submit_rc = 0;
	sem_init(&c->done, 0, 0);
	if (hl_reactor_call(r, call_submit, c))
		return -999;
	sem_wait(&c->done);
	sem_destroy(&c->done);
	return c->result;
}

/*
 * may_land (hl_origin_io, hl_origin_unfenced): (a) a write out on a session
 * that is lost (the SAN stops answering, TCP stays up) and fails by its
 * limit before a login reinstates the session may still be run by the SAN:
 * may_land, counted; (b) the session's next login ends what the lost
 * connection left at the SAN: the count goes back to 0; (c) a write that
 * fails without having been sent does not set it: one that waited in the
 * queue while the SAN was gone, and one refused at submit (the session down
 * past the limit), whose io still carried may_land from (a).
 */
static void test_may_land(void)
{
	struct hl_origin *o = open_san("?timeout=1");
	static uint8_t w[4096];
	struct iovec iov = {w, sizeof(w)};
	struct call c;

	CU_ASSERT_FATAL(o != NULL);
	pattern_fill(w, sizeof(w), 41);
	CU_ASSERT_EQUAL(run_io_on(cli_r, o, HL_IO_WRITE, 0, 3 << 20, 4096, w, 4096, &c), 0);
	CU_ASSERT_FALSE(c.io.may_land);
	CU_ASSERT_EQUAL(hl_origin_unfenced(o), 0);
	/* (a) sent, then the SAN falls silent for 3 s: lost with the write out */
	CU_ASSERT_FATAL(hl_reactor_call(san.r, san_sleep, (void *)(uintptr_t)3000000) == 0);
	CU_ASSERT_EQUAL(run_io_on(cli_r, o, HL_IO_WRITE, 0, 3 << 20, 4096, w, 4096, &c), -EIO);
	CU_ASSERT_TRUE(c.io.may_land);
	CU_ASSERT_EQUAL(hl_origin_unfenced(o), 1);
	/* (b) the SAN answers again: the session logs in again, nothing of it can land */
	wait_sessions_up(o, 1, 8000);
	CU_ASSERT_EQUAL(origin_iscsi_sessions_up(o), 1);
	CU_ASSERT_EQUAL(hl_origin_unfenced(o), 0);
	CU_ASSERT_EQUAL(run_io_on(cli_r, o, HL_IO_WRITE, 0, 3 << 20, 4096, w, 4096, &c), 0);
	CU_ASSERT_FALSE(c.io.may_land);
	/* (c) the SAN is gone: a write waits in the queue, never sent, and fails by its limit */
	san_stop();
	for (int i = 0; i < 300 && origin_iscsi_sessions_up(o); i++)
		usleep(10000);
	CU_ASSERT_EQUAL_FATAL(origin_iscsi_sessions_up(o), 0);
	CU_ASSERT_EQUAL(run_io_on(cli_r, o, HL_IO_WRITE, 0, 3 << 20, 4096, w, 4096, &c), -EIO);
	CU_ASSERT_FALSE(c.io.may_land);
	CU_ASSERT_EQUAL(hl_origin_unfenced(o), 0);
	/* refused at submit (down past the limit): an io reused from (a) says nothing may land */
	c.io.may_land = true;
	CU_ASSERT_EQUAL(resubmit(cli_r, &c, &iov), -EIO);
	CU_ASSERT_EQUAL(c.submit_rc, -EIO);
	CU_ASSERT_FALSE(c.io.may_land);
	CU_ASSERT_EQUAL(hl_origin_unfenced(o), 0);
	CU_ASSERT_FATAL(san_listen() == 0);
	wait_sessions_up(o, 1, 8000);
	CU_ASSERT_EQUAL(run_io_on(cli_r, o, HL_IO_WRITE, 0, 3 << 20, 4096, w, 4096, &c), 0);
	CU_ASSERT_EQUAL(hl_origin_unfenced(o), 0);
	close_on(cli_r, o);
}

/*
 * close() from a thread that is no reactor (a reload's close thread) while
 * a read is in flight on cli_r: the session is torn down on cli_r, the
 * read ends with exactly one callback, -EIO, on cli_r, before close
 * returns, and nothing more comes once the SAN answers again. The old
 * close freed the session here with its timers armed on cli_r.
 */
static atomic_int inflight_cbs;

static void inflight_cb(struct hl_origin_io *io, int result)
{
	struct call *c = io->arg;

	c->result = result;
	c->cb_reactor = hl_reactor_current();
	atomic_fetch_add(&inflight_cbs, 1);
}

static void test_close_in_flight(void)
{
	struct hl_origin *o = open_san("?timeout=10");
	static uint8_t r[4096];
	struct iovec iov = {r, sizeof(r)};
	struct call c;

	CU_ASSERT_FATAL(o != NULL);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_READ, 0, 0, 4096, r), 0);
	CU_ASSERT_FATAL(hl_reactor_call(san.r, san_sleep, (void *)(uintptr_t)1500000) == 0);
	memset(&c, 0, sizeof(c));
	sem_init(&c.done, 0, 0);
	c.o = o;
	c.io.op = HL_IO_READ;
	c.io.length = 4096;
	c.io.iov = &iov;
	c.io.iovcnt = 1;
	c.io.cb = inflight_cb;
	c.io.arg = &c;
	atomic_store(&inflight_cbs, 0);
	CU_ASSERT_FATAL(hl_reactor_call(cli_r, call_submit, &c) == 0);
	usleep(200000); /* sent; the SAN sleeps */
	CU_ASSERT_EQUAL(c.submit_rc, 0);
	CU_ASSERT_EQUAL(atomic_load(&inflight_cbs), 0);
	hl_origin_close(o); /* this thread is no reactor */
	CU_ASSERT_EQUAL(atomic_load(&inflight_cbs), 1);
	CU_ASSERT_EQUAL(c.result, -EIO);
	CU_ASSERT_PTR_EQUAL(c.cb_reactor, cli_r);
	usleep(1800000); /* the SAN is back: no late completion, no crash */
	CU_ASSERT_EQUAL(atomic_load(&inflight_cbs), 1);
	sem_destroy(&c.done);
}

/* Many I/Os in flight at once on one session, more than its queue depth. */
struct burst {
	struct hl_origin *o;
	struct hl_origin_io io[200];
	struct iovec iov[200];
	uint8_t *buf;
	int done, bad;
	sem_t sem;
	unsigned max_inflight, inflight;
};

static void burst_cb(struct hl_origin_io *io, int result)
{
	struct burst *b = io->arg;

	b->inflight--;
	if (result || !pattern_ok(io->iov[0].iov_base, 4096, (uint8_t)(io->offset >> 12)))
		b->bad++;
	if (++b->done == 200)
		sem_post(&b->sem);
}

static void burst_submit(void *arg)
{
	struct burst *b = arg;

	for (int i = 0; i < 200; i++) {
		b->iov[i].iov_base = b->buf + (size_t)i * 4096;
		b->iov[i].iov_len = 4096;
		memset(&b->io[i], 0, sizeof(b->io[i]));
		b->io[i].op = HL_IO_READ;
		b->io[i].offset = (uint64_t)(10 << 20) + (uint64_t)i * 4096;
		b->io[i].length = 4096;
		b->io[i].iov = &b->iov[i];
		b->io[i].iovcnt = 1;
		b->io[i].cb = burst_cb;
		b->io[i].arg = b;
		if (hl_origin_submit(b->o, &b->io[i])) {
			b->bad++;
			b->done++;
		} else {
			b->inflight++;
		}
		if (b->inflight > b->max_inflight)
			b->max_inflight = b->inflight;
	}
	if (b->done == 200)
		sem_post(&b->sem);
}

static void test_queue_depth(void)
{
	struct hl_origin *o = open_san("?qd=8");
	struct burst *b = calloc(1, sizeof(*b));
	uint8_t w[4096];

	CU_ASSERT_FATAL(o && b);
	for (int i = 0; i < 200; i++) {
		uint64_t off = (uint64_t)(10 << 20) + (uint64_t)i * 4096;
		pattern_fill(w, sizeof(w), (uint8_t)(off >> 12));
		CU_ASSERT_EQUAL(run_io(o, HL_IO_WRITE, 0, off, 4096, w), 0);
	}
	b->o = o;
	b->buf = malloc(200 * 4096);
	sem_init(&b->sem, 0, 0);
	CU_ASSERT_FATAL(hl_reactor_call(cli_r, burst_submit, b) == 0);
	sem_wait(&b->sem);
	CU_ASSERT_EQUAL(b->bad, 0);
	CU_ASSERT_EQUAL(b->max_inflight, 200); /* all accepted, none completed inside submit */
	sem_destroy(&b->sem);
	close_on(cli_r, o);
	free(b->buf);
	free(b);
}

static void test_read_only_refused(void)
{
	char uri[256];
	struct hl_origin *o = NULL;
	struct hl_origin_opts opts = {.read_only = true};
	uint8_t buf[512] = {0};

	snprintf(uri, sizeof(uri), "iscsi://127.0.0.1:%u/%s/0", san.port, IQN);
	CU_ASSERT_FATAL(hl_origin_open(uri, &opts, &o) == 0);
	CU_ASSERT_TRUE(o->read_only);
	CU_ASSERT_FALSE(o->can_discard);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_WRITE, 0, 0, 512, buf), -EROFS);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_DISCARD, 0, 0, 512, NULL), -EROFS);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_READ, 0, 0, 512, buf), 0);
	close_on(cli_r, o);
}

static void test_chap(void)
{
	char uri[256];
	struct hl_origin *o = NULL;
	uint8_t buf[512];

	snprintf(uri, sizeof(uri), "iscsi://utuser%%ut-secret-1234@127.0.0.1:%u/%s/0", san.port,
	         IQN_CHAP);
	CU_ASSERT_FATAL(hl_origin_open(uri, NULL, &o) == 0);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_READ, 0, 0, 512, buf), 0); /* the I/O session logs in too */
	close_on(cli_r, o);
	o = NULL;
	snprintf(uri, sizeof(uri), "iscsi://utuser%%wrong-secret-99@127.0.0.1:%u/%s/0", san.port,
	         IQN_CHAP);
	CU_ASSERT_EQUAL(hl_origin_open(uri, NULL, &o), -EACCES);
	snprintf(uri, sizeof(uri), "iscsi://127.0.0.1:%u/%s/0", san.port, IQN_CHAP);
	CU_ASSERT_EQUAL(hl_origin_open(uri, NULL, &o), -EACCES);
	CU_ASSERT_PTR_NULL(o);
}

static void test_block_size_opt(void)
{
	char uri[256];
	struct hl_origin *o = NULL;
	struct hl_origin_opts opts = {.block_size = 4096};

	snprintf(uri, sizeof(uri), "iscsi://127.0.0.1:%u/%s/0", san.port, IQN);
	CU_ASSERT_FATAL(hl_origin_open(uri, &opts, &o) == 0); /* 4096 on 512-byte SAN blocks */
	close_on(cli_r, o);
	o = NULL;
	opts.block_size = 520; /* not a multiple of 512 */
	CU_ASSERT_EQUAL(hl_origin_open(uri, &opts, &o), -EINVAL);
	CU_ASSERT_PTR_NULL(o);
}

/* ---------------------------------------------------------------- unit attentions */

static void test_ua_class(void)
{
	CU_ASSERT_EQUAL(origin_iscsi_ua_class(0x2a, 0x09), ISC_UA_CAPACITY);
	CU_ASSERT_EQUAL(origin_iscsi_ua_class(0x29, 0x00), ISC_UA_RESET);
	CU_ASSERT_EQUAL(origin_iscsi_ua_class(0x29, 0x07), ISC_UA_RESET); /* I_T nexus loss */
	CU_ASSERT_EQUAL(origin_iscsi_ua_class(0x2a, 0x03), ISC_UA_PR);
	CU_ASSERT_EQUAL(origin_iscsi_ua_class(0x2a, 0x04), ISC_UA_PR);
	CU_ASSERT_EQUAL(origin_iscsi_ua_class(0x2a, 0x05), ISC_UA_PR);
	CU_ASSERT_EQUAL(origin_iscsi_ua_class(0x3f, 0x03), ISC_UA_IDENTITY);
	CU_ASSERT_EQUAL(origin_iscsi_ua_class(0x3f, 0x0e), ISC_UA_IDENTITY);
	CU_ASSERT_EQUAL(origin_iscsi_ua_class(0x2a, 0x01), 0); /* mode parameters */
	CU_ASSERT_EQUAL(origin_iscsi_ua_class(0x2a, 0x06), 0); /* ALUA state */
	CU_ASSERT_EQUAL(origin_iscsi_ua_class(0x3f, 0x01), 0); /* microcode */
}

/*
 * scsi_internal.h's; that header cannot come in with libiscsi's (both
 * define enum scsi_opcode): the SAN's LU queues a unit attention to every
 * nexus, as a SAN does on its own changes.
 */
void scsi_ua_queue_all(struct hl_lu *lu, uint64_t except_id, uint8_t asc, uint8_t ascq);

/* What the origin told its listener (the cache engine, the LU). */
static struct {
	atomic_uint resized, changed;
} evs;

static void ev_count(void *arg, struct hl_origin *o, enum hl_origin_event ev, uint64_t old_size)
{
	(void)arg;
	(void)o;
	(void)old_size;
	if (ev == HL_ORIGIN_RESIZED)
		atomic_fetch_add(&evs.resized, 1);
	else if (ev == HL_ORIGIN_CHANGED)
		atomic_fetch_add(&evs.changed, 1);
}

static struct hl_origin *open_listened(void)
{
	struct hl_origin *o = open_san(NULL);

	atomic_store(&evs.resized, 0);
	atomic_store(&evs.changed, 0);
	if (o)
		hl_origin_listen(o, ev_count, NULL);
	return o;
}

/* Until `changed` drops were reported (5 s at most). */
static bool wait_changed(unsigned changed)
{
	for (int i = 0; i < 500 && atomic_load(&evs.changed) < changed; i++)
		usleep(10000);
	return atomic_load(&evs.changed) >= changed;
}

/* The SAN's LUN takes a new size: its file, then its LU (which queues 2A/09 to every nexus). */
static void san_resize(uint64_t size)
{
	CU_ASSERT_EQUAL(truncate(san.path, (off_t)size), 0);
	hl_origin_notify(san.origin, HL_ORIGIN_RESIZED, size);
}

/* A grow: the next command meets 2A/09; the origin grows and the cache drops the disk. */
static void test_ua_capacity_grow(void)
{
	struct hl_origin *o = open_listened();
	uint8_t buf[4096];

	CU_ASSERT_FATAL(o != NULL);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_READ, 0, SAN_SIZE - 4096, 4096, buf), 0);
	san_resize(SAN_SIZE + (1u << 20));
	CU_ASSERT_EQUAL(run_io(o, HL_IO_READ, 0, 0, 4096, buf), 0); /* meets it, repeated */
	CU_ASSERT_TRUE(wait_changed(1));
	CU_ASSERT_EQUAL(atomic_load(&evs.resized), 1);
	CU_ASSERT_EQUAL(o->size, SAN_SIZE + (1u << 20));
	memset(buf, 0xee, sizeof(buf));
	CU_ASSERT_EQUAL(run_io(o, HL_IO_READ, 0, SAN_SIZE, 4096, buf), 0); /* the new tail */
	CU_ASSERT_EQUAL(buf[0], 0);
	close_on(cli_r, o);
	san_resize(SAN_SIZE);
}

/*
 * A shrink and a grow back before the next command: one 2A/09, the same
 * size: no resize, but the tail is zeroes now: the cache must drop.
 */
static void test_ua_capacity_same(void)
{
	struct hl_origin *o = open_listened();
	uint8_t buf[4096];

	CU_ASSERT_FATAL(o != NULL);
	pattern_fill(buf, sizeof(buf), 5);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_WRITE, 0, SAN_SIZE - 4096, 4096, buf), 0);
	san_resize(SAN_SIZE - (1u << 20));
	san_resize(SAN_SIZE);
	CU_ASSERT_TRUE(wait_changed(1)); /* no command of ours: the poll met it */
	CU_ASSERT_EQUAL(run_io(o, HL_IO_READ, 0, SAN_SIZE - 4096, 4096, buf), 0);
	CU_ASSERT_EQUAL(buf[0], 0);
	CU_ASSERT_EQUAL(atomic_load(&evs.resized), 0);
	CU_ASSERT_EQUAL(o->size, SAN_SIZE);
	close_on(cli_r, o);
}

/*
 * 3F/0E (another LUN may answer now): a drop (one per nexus that hears
 * it: the data session's and the poll's). 2A/01 (mode parameters), 29/00
 * (a reset, same size) and, without gateways, 2A/03 (reservations): the
 * command is repeated, nothing dropped.
 */
static void test_ua_others(void)
{
	struct hl_origin *o = open_listened();
	uint8_t buf[512];
	unsigned changed;

	CU_ASSERT_FATAL(o != NULL);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_READ, 0, 0, 512, buf), 0); /* the SAN knows the nexus */
	scsi_ua_queue_all(san.lu, 0, 0x3f, 0x0e);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_READ, 0, 0, 512, buf), 0);
	CU_ASSERT_TRUE(wait_changed(1));
	usleep(2500000); /* the poll's copy too (a second drop), then nothing more */
	changed = atomic_load(&evs.changed);
	CU_ASSERT_EQUAL(atomic_load(&evs.resized), 0);
	scsi_ua_queue_all(san.lu, 0, 0x2a, 0x01);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_READ, 0, 0, 512, buf), 0);
	scsi_ua_queue_all(san.lu, 0, 0x29, 0x00);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_READ, 0, 0, 512, buf), 0);
	scsi_ua_queue_all(san.lu, 0, 0x2a, 0x03);
	CU_ASSERT_EQUAL(run_io(o, HL_IO_READ, 0, 0, 512, buf), 0);
	usleep(2500000); /* two polls */
	CU_ASSERT_EQUAL(atomic_load(&evs.changed), changed);
	scsi_ua_queue_all(san.lu, 0, 0x2a, 0x09);
	CU_ASSERT_TRUE(wait_changed(changed + 1));
	CU_ASSERT_EQUAL(atomic_load(&evs.resized), 0);
	close_on(cli_r, o);
}

static const struct hl_test tests[] = {
    {"URL: host, default port, target, LUN", test_url_basic},
    {"URL: user%secret and port", test_url_port_chap},
    {"URL: IPv6 host in brackets", test_url_ipv6},
    {"URL: query keys", test_url_query},
    {"URL: malformed URLs are refused", test_url_bad},
    {"URL: hl_origin_open dispatches iscsi: and refuses bad syntax", test_url_via_open},
    {"default initiator name", test_default_initiator},
    {"sense: fixed format", test_sense_fixed},
    {"sense: descriptor format", test_sense_descriptor},
    {"sense: malformed", test_sense_bad},
    {"sense key/ASC -> errno", test_sense_errno},
    {"status -> errno", test_status_errno},
    {"open: capacity, provisioning, the LUN's designator", test_open_probe},
    {"open: unknown target or LUN is refused", test_open_refused},
    {"read, write, FUA, flush", test_read_write},
    {"transfers beyond the SAN's maximum are split", test_split_transfer},
    {"range, alignment and iovec checks", test_checks},
    {"discard and write zeroes read back zeroes", test_discard_zeroes},
    {"compare and write: match and miscompare offset", test_compare_and_write},
    {"one session per reactor", test_two_reactors},
    {"more I/O than the queue depth", test_queue_depth},
    {"read-only origin", test_read_only_refused},
    {"CHAP: right secret logs in, wrong or missing is -EACCES", test_chap},
    {"the disk's block size must be a multiple of the SAN's", test_block_size_opt},
    {"reconnect: I/O waits for the SAN and succeeds", test_reconnect},
    {"outage past the limit: -EIO, fast failure, recovery", test_outage_limit},
    {"a SAN that stops answering: -EIO by the limit, then recovery", test_hung_san},
    {"close from another thread with a read in flight: one -EIO on its reactor", test_close_in_flight},
    {"may_land: a write lost while out, counted until the next login; none unsent", test_may_land},
    {"unit attentions: what each asks for", test_ua_class},
    {"2A/09 after a grow: the new size, and the cache drops the disk", test_ua_capacity_grow},
    {"2A/09 after a shrink and a grow back: same size, the cache drops the disk",
     test_ua_capacity_same},
    {"3F/0E drops; 2A/01, 29/00 and 2A/03 without gateways do not", test_ua_others},
    {NULL, NULL},
};

int main(void)
{
	int rc;

	san_setup();
	if (hl_reactor_create(&cli_r, "cli") || hl_reactor_start(cli_r)) {
		fprintf(stderr, "cannot start the client reactor\n");
		return 99;
	}
	rc = hl_test_run("origin_iscsi", tests);
	hl_reactor_stop(cli_r);
	hl_reactor_join(cli_r);
	hl_reactor_destroy(cli_r);
	san_teardown();
	return rc;
}
