/*
 * iscsi_own_ut.c - ownership among gateways on the iscsi: origin (SCSI-3
 * persistent reservations on the SAN LUN). Two origins with gateway ids 1
 * and 2 (each its own sessions, hence its own I_T nexuses) and a lone one
 * (gateway 0) drive an in-process SAN: hotlun's own iSCSI server over a
 * file LUN, whose PR code (pr.c) enforces the reservation, with a state
 * directory so APTPL is accepted. The test thread plays the ownership
 * thread (the own_* ops block); I/O goes through a client reactor.
 *
 * HL_OWN_SAN_URL=iscsi://host:port/iqn/lun runs the same tests against
 * another SAN instead (a hotlund or tgtd that tests/functional/
 * origin_iscsi_own.sh starts; a fresh, zeroed LUN without reservations);
 * the test that restarts the SAN is then skipped.
 */
#include "config.h"

#include "hl_test.h"
#include "hotlun/event.h"
#include "hotlun/iscsi.h"
#include "hotlun/origin.h"
#include "hotlun/scsi.h"
#include "hotlun/util.h"
#include "origin/iscsi_pr_key.h"
#include "origin/origin_iscsi.h"
#include "origin/origin_internal.h"

#include <dirent.h>
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
#include <errno.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define IQN      "iqn.2026-11.io.hotlun:ut-own-san"
#define SAN_SIZE (8u << 20)
#define BLK      4096

/*
 * LUN 1 of the in-process SAN is slow for one write: a WRITE whose data
 * starts with SLOW_BYTE waits SLOW_MS inside the SAN before it reaches the
 * file (a command queued in the array). Everything else passes at once.
 */
#define SLOW_BYTE 0xc3
#define SLOW_MS   1500

struct slow_io {
	struct hl_timer timer;
	struct hl_origin *o;
};

static void slow_fire(struct hl_timer *t)
{
	struct hl_origin_io *io = t->arg;
	struct slow_io *sio = (struct slow_io *)io->priv;
	struct hl_origin *o = sio->o;
	int rc = hl_origin_submit(o->inner, io);

	if (rc)
		io->cb(io, rc);
}

static int slow_submit(struct hl_origin *o, struct hl_origin_io *io)
{
	struct slow_io *sio = (struct slow_io *)io->priv;
	struct hl_reactor *r = hl_reactor_current();

	if (!r || io->op != HL_IO_WRITE || !io->iovcnt || !io->iov[0].iov_len ||
	    ((uint8_t *)io->iov[0].iov_base)[0] != SLOW_BYTE)
		return hl_origin_submit(o->inner, io);
	sio->o = o;
	hl_timer_init(&sio->timer, slow_fire, io);
	hl_timer_start(r, &sio->timer, SLOW_MS);
	return 0;
}

static void slow_close(struct hl_origin *o)
{
	(void)o;
}

static const struct hl_origin_ops slow_ops = {
	.name = "slow-write",
	.close = slow_close,
	.submit = slow_submit,
};

static struct {
	struct hl_reactor *r;
	char path[64];
	char path1[64];
	struct hl_origin *origin1;
	struct hl_lu *lu1;
	char state_dir[64];
	struct hl_origin *origin;
	struct hl_lu *lu;
	struct hl_scsi_lun_map map;
	struct hl_iscsi_server *srv;
	uint16_t port;
	bool ok;
	const char *ext_url; /* HL_OWN_SAN_URL: an external SAN instead */
} san;

static struct hl_reactor *cli_r, *cli_r2;

/* The iSCSI server of the SAN on san.port (0: a free one, then kept); the LU stays. */
static int san_listen(void)
{
	struct hl_iscsi_server_config sc = {0};
	struct hl_iscsi_target_config tc = {0};
	char portal[64], bound[64];

	sc.reactors = &san.r;
	sc.n_reactors = 1;
	if (hl_iscsi_server_create(&sc, &san.srv))
		return -1;
	tc.name = IQN;
	tc.luns = &san.map;
	tc.allow_all = true;
	snprintf(portal, sizeof(portal), "127.0.0.1:%u", san.port);
	if (hl_iscsi_target_add(san.srv, &tc) ||
	    hl_iscsi_portal_add(san.srv, portal, 1, bound, sizeof(bound)))
		return -1;
	san.port = (uint16_t)atoi(strrchr(bound, ':') + 1);
	return 0;
}

static void san_stop(void)
{
	hl_iscsi_server_destroy(san.srv);
	san.srv = NULL;
}

static void san_setup(void)
{
	struct hl_lu_config lc = {0};
	int fd;

	san.ext_url = getenv("HL_OWN_SAN_URL");
	if (san.ext_url && *san.ext_url) {
		san.ok = true;
		return;
	}
	san.ext_url = NULL;

	strcpy(san.path, "/tmp/hl-own-ut-XXXXXX");
	strcpy(san.state_dir, "/tmp/hl-own-ut-state-XXXXXX");
	fd = mkstemp(san.path);
	if (fd < 0 || ftruncate(fd, SAN_SIZE) || !mkdtemp(san.state_dir))
		return;
	close(fd);
	if (hl_origin_open(san.path, NULL, &san.origin))
		return;
	lc.name = "san";
	lc.block_size = 512;
	lc.naa[0] = 0x60;
	lc.naa[15] = 0x42;
	strcpy(lc.serial, "UTOWN0001");
	lc.write_cache = true;
	lc.state_dir = san.state_dir;
	if (hl_lu_create(&lc, san.origin, &san.lu))
		return;
	san.map.lu[0] = san.lu;
	/* LUN 1: the slow one (its own file, state and identity) */
	strcpy(san.path1, "/tmp/hl-own-ut1-XXXXXX");
	fd = mkstemp(san.path1);
	if (fd < 0 || ftruncate(fd, SAN_SIZE))
		return;
	close(fd);
	struct hl_origin *file1;
	if (hl_origin_open(san.path1, NULL, &file1))
		return;
	if (hl_origin_wrap(file1, &slow_ops, "slow", &san.origin1)) {
		hl_origin_close(file1);
		return;
	}
	lc.name = "san1";
	lc.naa[15] = 0x43;
	strcpy(lc.serial, "UTOWN0002");
	if (hl_lu_create(&lc, san.origin1, &san.lu1))
		return;
	san.map.lu[1] = san.lu1;
	if (hl_reactor_create(&san.r, "san") || hl_reactor_start(san.r))
		return;
	san.ok = san_listen() == 0;
}

static void san_teardown(void)
{
	DIR *d;

	if (san.ext_url)
		return;
	if (san.srv)
		san_stop();
	if (san.r) {
		hl_reactor_stop(san.r);
		hl_reactor_join(san.r);
		hl_reactor_destroy(san.r);
	}
	hl_lu_destroy(san.lu); /* closes the origin */
	hl_lu_destroy(san.lu1);
	unlink(san.path);
	if (san.path1[0])
		unlink(san.path1);
	d = opendir(san.state_dir); /* the SAN's APTPL file */
	for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
		char p[512];

		if (e->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "%s/%s", san.state_dir, e->d_name);
		unlink(p);
	}
	if (d)
		closedir(d);
	rmdir(san.state_dir);
}

/* ---------------------------------------------------------------- client side */

struct call {
	struct hl_origin *o;
	struct hl_origin_io io;
	struct iovec iov;
	sem_t done;
	int result;
};

static void call_cb(struct hl_origin_io *io, int result)
{
	struct call *c = io->arg;

	c->result = result;
	sem_post(&c->done);
}

static void call_submit(void *arg)
{
	struct call *c = arg;
	int rc = hl_origin_submit(c->o, &c->io);

	if (rc) {
		c->result = rc;
		sem_post(&c->done);
	}
}

/* One I/O of BLK bytes at block `blk` on reactor r; its result. */
static int run_io_on(struct hl_reactor *r, struct hl_origin *o, enum hl_io_op op, uint64_t blk,
                     void *buf)
{
	struct call c;

	memset(&c, 0, sizeof(c));
	sem_init(&c.done, 0, 0);
	c.o = o;
	c.iov.iov_base = buf;
	c.iov.iov_len = BLK;
	c.io.op = op;
	c.io.offset = blk * BLK;
	c.io.length = op == HL_IO_FLUSH ? 0 : BLK;
	c.io.iov = buf ? &c.iov : NULL;
	c.io.iovcnt = buf ? 1 : 0;
	c.io.cb = call_cb;
	c.io.arg = &c;
	if (hl_reactor_call(r, call_submit, &c))
		return -999;
	sem_wait(&c.done);
	sem_destroy(&c.done);
	return c.result;
}

static int run_io(struct hl_origin *o, enum hl_io_op op, uint64_t blk, void *buf)
{
	return run_io_on(cli_r, o, op, blk, buf);
}

static int write_block(struct hl_origin *o, uint64_t blk, uint8_t fill)
{
	uint8_t buf[BLK];

	memset(buf, fill, sizeof(buf));
	return run_io(o, HL_IO_WRITE, blk, buf);
}

/* 0 when block blk reads back as fill through o. */
static int check_block(struct hl_origin *o, uint64_t blk, uint8_t fill)
{
	uint8_t buf[BLK];
	int rc = run_io(o, HL_IO_READ, blk, buf);

	if (rc)
		return rc;
	for (size_t i = 0; i < sizeof(buf); i++) {
		if (buf[i] != fill)
			return -EILSEQ;
	}
	return 0;
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

/* Close on the client reactor, for an origin whose I/O sessions all live there. */
static void close_on_cli(struct hl_origin *o)
{
	struct closer cl = {.o = o};

	sem_init(&cl.done, 0, 0);
	CU_ASSERT_FATAL(hl_reactor_call(cli_r, close_fn, &cl) == 0);
	sem_wait(&cl.done);
	sem_destroy(&cl.done);
}

static void stop_clients(void)
{
	struct hl_reactor **rs[] = {&cli_r, &cli_r2};

	for (unsigned i = 0; i < 2; i++) {
		if (!*rs[i])
			continue;
		hl_reactor_stop(*rs[i]);
		hl_reactor_join(*rs[i]);
		hl_reactor_destroy(*rs[i]);
		*rs[i] = NULL;
	}
}

static struct hl_origin *open_gw_lun(uint16_t gw, unsigned lun)
{
	struct hl_origin_opts opts = {.gateway = gw};
	struct hl_origin *o = NULL;
	char uri[256];

	if (san.ext_url)
		snprintf(uri, sizeof(uri), "%s?timeout=5", san.ext_url);
	else
		snprintf(uri, sizeof(uri), "iscsi://127.0.0.1:%u/%s/%u?timeout=5", san.port, IQN,
		         lun);
	CU_ASSERT_EQUAL(hl_origin_open(uri, &opts, &o), 0);
	return o;
}

static struct hl_origin *open_gw(uint16_t gw)
{
	return open_gw_lun(gw, 0);
}

static int acquire(struct hl_origin *o, uint16_t gw, bool force)
{
	char why[HL_ORIGIN_WHY_MAX] = "";
	int rc = o->ops->own_acquire(o, gw, 1, force, why, sizeof(why));

	if (rc)
		fprintf(stderr, "    (gateway %u acquire%s: %d, %s)\n", gw, force ? " forced" : "",
		        rc, why);
	return rc;
}

/* ---------------------------------------------------------------- tests */

static struct hl_origin *g1, *g2, *lone;

static void test_ops_present(void)
{
	CU_ASSERT_FATAL(san.ok);
	g1 = open_gw(1);
	g2 = open_gw(2);
	lone = open_gw(0);
	CU_ASSERT_FATAL(g1 && g2 && lone);
	CU_ASSERT_PTR_NOT_NULL(g1->ops->own_acquire);
	CU_ASSERT_PTR_NOT_NULL(g1->ops->own_renew);
	CU_ASSERT_PTR_NOT_NULL(g1->ops->own_release);
	CU_ASSERT_PTR_NOT_NULL(g1->ops->own_peek);
	CU_ASSERT_PTR_NOT_NULL(g1->ops->own_request);
}

static void test_free_disk(void)
{
	struct hl_own_info info;

	CU_ASSERT_FATAL(g1 && g2 && lone);
	CU_ASSERT_EQUAL(g2->ops->own_peek(g2, &info), 0);
	CU_ASSERT_EQUAL(info.owner, 0);
	CU_ASSERT_TRUE(info.released);
	CU_ASSERT_FALSE(info.has_beat);
	/* a lone gateway is untouched by all this: it writes a free disk */
	CU_ASSERT_EQUAL(write_block(lone, 0, 0x10), 0);
	CU_ASSERT_EQUAL(lone->ops->own_peek(lone, &info), -EINVAL);
	/* a gateway that does not own the disk does not write it */
	CU_ASSERT_EQUAL(write_block(g1, 1, 0x11), -ESHUTDOWN);
	CU_ASSERT_EQUAL(check_block(g1, 0, 0x10), 0); /* reads are fine */
	/* the wrong gateway id for this origin */
	CU_ASSERT_EQUAL(g1->ops->own_request(g1, 2), -EINVAL);
}

static void test_acquire_busy(void)
{
	struct hl_own_info info;

	CU_ASSERT_FATAL(g1 && g2 && lone);
	CU_ASSERT_EQUAL_FATAL(acquire(g1, 1, false), 0);
	CU_ASSERT_EQUAL(write_block(g1, 1, 0x21), 0);
	CU_ASSERT_EQUAL(check_block(g1, 1, 0x21), 0);
	CU_ASSERT_EQUAL(run_io(g1, HL_IO_FLUSH, 0, NULL), 0);
	CU_ASSERT_EQUAL(acquire(g2, 2, false), -EBUSY);
	CU_ASSERT_EQUAL(g2->ops->own_peek(g2, &info), 0);
	CU_ASSERT_EQUAL(info.owner, 1);
	CU_ASSERT_FALSE(info.released);
	/* the SAN itself refuses every other initiator's writes; reads pass */
	CU_ASSERT_EQUAL(write_block(lone, 2, 0x22), -EBADE);
	CU_ASSERT_EQUAL(check_block(lone, 1, 0x21), 0);
	CU_ASSERT_EQUAL(write_block(g2, 2, 0x22), -ESHUTDOWN);
	/* the owner renews, nobody asks */
	memset(&info, 0xff, sizeof(info));
	CU_ASSERT_EQUAL(g1->ops->own_renew(g1, 1, 1, &info), 0);
	CU_ASSERT_EQUAL(info.owner, 1);
	CU_ASSERT_EQUAL(info.requester, 0);
	CU_ASSERT_FALSE(info.has_beat);
	CU_ASSERT_FALSE(info.released);
	CU_ASSERT_NOT_EQUAL(info.epoch, 0);
}

static void test_request_release(void)
{
	struct hl_own_info info;

	CU_ASSERT_FATAL(g1 && g2 && lone);
	CU_ASSERT_EQUAL(g2->ops->own_request(g2, 2), 0);
	CU_ASSERT_EQUAL(g1->ops->own_renew(g1, 1, 1, &info), 0);
	CU_ASSERT_EQUAL(info.owner, 1);
	CU_ASSERT_EQUAL(info.requester, 2);
	/* asking gives the requester no write on the disk it does not own */
	CU_ASSERT_EQUAL(write_block(lone, 3, 0x33), -EBADE);
	CU_ASSERT_EQUAL(g1->ops->own_release(g1, 1, 1), 0);
	CU_ASSERT_EQUAL(write_block(g1, 3, 0x34), -ESHUTDOWN); /* released: not ours */
	CU_ASSERT_EQUAL(g2->ops->own_peek(g2, &info), 0);
	CU_ASSERT_EQUAL(info.owner, 0);
	CU_ASSERT_TRUE(info.released);
	CU_ASSERT_EQUAL_FATAL(acquire(g2, 2, false), 0);
	CU_ASSERT_EQUAL(write_block(g2, 3, 0x35), 0);
	CU_ASSERT_EQUAL(check_block(g1, 3, 0x35), 0);
	CU_ASSERT_EQUAL(g1->ops->own_renew(g1, 1, 1, &info), -ESHUTDOWN);
	CU_ASSERT_EQUAL(g2->ops->own_renew(g2, 2, 1, &info), 0);
	CU_ASSERT_EQUAL(info.owner, 2);
	CU_ASSERT_EQUAL(info.requester, 0); /* g1's old registrations were preempted */
	/* the old owner's I/O sessions, registered while it owned the disk, are refused */
	CU_ASSERT_EQUAL(write_block(lone, 4, 0x36), -EBADE);
}

static void test_forced_takeover(void)
{
	struct hl_own_info info;

	CU_ASSERT_FATAL(g1 && g2 && lone);
	CU_ASSERT_EQUAL(write_block(g2, 5, 0x41), 0); /* g2 owns and writes */
	CU_ASSERT_EQUAL(acquire(g1, 1, false), -EBUSY);
	CU_ASSERT_EQUAL_FATAL(acquire(g1, 1, true), 0);
	CU_ASSERT_EQUAL(g1->ops->own_peek(g1, &info), 0);
	CU_ASSERT_EQUAL(info.owner, 1);
	/* g2 still thinks it owns the disk: the SAN refuses its write (the fence) */
	CU_ASSERT_EQUAL(write_block(g2, 5, 0x42), -ESHUTDOWN);
	CU_ASSERT_EQUAL(g2->ops->own_renew(g2, 2, 1, &info), -ESHUTDOWN);
	CU_ASSERT_EQUAL(write_block(g2, 6, 0x43), -ESHUTDOWN);
	CU_ASSERT_EQUAL(check_block(g1, 5, 0x41), 0); /* the refused write left nothing */
	CU_ASSERT_EQUAL(write_block(g1, 5, 0x44), 0);
	CU_ASSERT_EQUAL(check_block(g2, 5, 0x44), 0);
	CU_ASSERT_EQUAL(g1->ops->own_renew(g1, 1, 1, &info), 0);
	CU_ASSERT_EQUAL(info.owner, 1);
	/* and back by a plain handover: g2 acquires again and writes */
	CU_ASSERT_EQUAL(g1->ops->own_release(g1, 1, 1), 0);
	CU_ASSERT_EQUAL_FATAL(acquire(g2, 2, false), 0);
	CU_ASSERT_EQUAL(write_block(g2, 6, 0x45), 0);
	CU_ASSERT_EQUAL(write_block(g1, 6, 0x46), -ESHUTDOWN);
	CU_ASSERT_EQUAL(check_block(g1, 6, 0x45), 0);
}

static void test_reacquire_after_restart(void)
{
	struct hl_own_info info;

	CU_ASSERT_FATAL(g1 && g2 && lone);
	/* g2 restarts while owning: a new process, new ISIDs, the reservation still its key */
	close_on_cli(g2); /* g2 only ever used cli_r */
	g2 = open_gw(2);
	CU_ASSERT_FATAL(g2 != NULL);
	CU_ASSERT_EQUAL(g1->ops->own_peek(g1, &info), 0);
	CU_ASSERT_EQUAL(info.owner, 2);
	CU_ASSERT_EQUAL(acquire(g1, 1, false), -EBUSY);
	CU_ASSERT_EQUAL(g2->ops->own_peek(g2, &info), 0);
	CU_ASSERT_EQUAL(info.owner, 2);
	CU_ASSERT_FALSE(info.this_run); /* its earlier run's key: taken by force (owner.c) */
	CU_ASSERT_EQUAL_FATAL(acquire(g2, 2, true), 0);
	CU_ASSERT_EQUAL(write_block(g2, 7, 0x51), 0);
	CU_ASSERT_EQUAL(check_block(lone, 7, 0x51), 0);
	CU_ASSERT_EQUAL(g2->ops->own_release(g2, 2, 1), 0);
}

/*
 * Two processes with one gateway id (a restarted gateway whose old process is
 * alive but cut off, or a misconfiguration): the one that takes the
 * reservation by force fences the other, whose renew must say so and whose
 * writes the SAN refuses, although both present "gateway 1".
 */
static void test_same_id_two_processes(void)
{
	struct hl_own_info info;
	struct hl_origin *g1b;

	CU_ASSERT_FATAL(g1 && g2 && lone);
	CU_ASSERT_EQUAL_FATAL(acquire(g1, 1, false), 0);
	CU_ASSERT_EQUAL(write_block(g1, 11, 0x91), 0);
	g1b = open_gw(1); /* the second process */
	CU_ASSERT_FATAL(g1b != NULL);
	CU_ASSERT_EQUAL(g1b->ops->own_peek(g1b, &info), 0);
	CU_ASSERT_EQUAL(info.owner, 1);
	CU_ASSERT_FALSE(info.this_run); /* gateway 1, but not this process */
	CU_ASSERT_EQUAL(g1->ops->own_peek(g1, &info), 0);
	CU_ASSERT_TRUE(info.this_run);
	CU_ASSERT_EQUAL(acquire(g1b, 1, false), -EBUSY); /* not without force */
	CU_ASSERT_EQUAL_FATAL(acquire(g1b, 1, true), 0);
	/* the first process is fenced: its renew and its writes fail */
	CU_ASSERT_EQUAL(g1->ops->own_renew(g1, 1, 1, &info), -ESHUTDOWN);
	CU_ASSERT_EQUAL(write_block(g1, 11, 0x92), -ESHUTDOWN);
	CU_ASSERT_EQUAL(write_block(g1b, 11, 0x93), 0);
	CU_ASSERT_EQUAL(check_block(g1, 11, 0x93), 0);
	CU_ASSERT_EQUAL(g1b->ops->own_renew(g1b, 1, 1, &info), 0);
	CU_ASSERT_TRUE(info.this_run);
	CU_ASSERT_EQUAL(info.requester, 0);
	/* the fenced one asks (its own id): the holder sees a request of its own id */
	CU_ASSERT_EQUAL(g1->ops->own_request(g1, 1), 0);
	CU_ASSERT_EQUAL(g1b->ops->own_renew(g1b, 1, 1, &info), 0);
	CU_ASSERT_EQUAL(info.requester, 1);
	CU_ASSERT_EQUAL(g1b->ops->own_release(g1b, 1, 1), 0);
	close_on_cli(g1b);
}

/* The owner's sessions reconnect with their ISIDs: same I_T nexuses, registrations, reservation. */
static void test_owner_reconnects(void)
{
	struct hl_own_info info;

	CU_ASSERT_FATAL(g1 && g2 && lone);
	CU_ASSERT_EQUAL_FATAL(acquire(g1, 1, false), 0);
	CU_ASSERT_EQUAL(write_block(g1, 8, 0x61), 0);
	if (san.ext_url) {
		fprintf(stderr, "    (external SAN: not restarted)\n");
		return;
	}
	san_stop();
	usleep(300 * 1000);
	CU_ASSERT_FATAL(san_listen() == 0);
	CU_ASSERT_EQUAL(write_block(g1, 8, 0x62), 0); /* waits for the reconnect, then passes */
	CU_ASSERT_EQUAL(g1->ops->own_renew(g1, 1, 1, &info), 0); /* its PR session too */
	CU_ASSERT_EQUAL(info.owner, 1);
	CU_ASSERT_EQUAL(write_block(lone, 8, 0x63), -EBADE); /* still fenced off */
	CU_ASSERT_EQUAL(check_block(g2, 8, 0x62), 0);
}

/*
 * A preempted owner that has not noticed yet opens a new I/O session (its
 * first submit on another reactor): the session's registration finds the
 * reservation held by another key, takes itself back out and refuses the
 * write; nothing of it stays registered.
 */
static void test_fenced_new_session(void)
{
	struct hl_own_info info;
	uint8_t buf[BLK];

	CU_ASSERT_FATAL(g1 && g2 && lone);
	CU_ASSERT_EQUAL_FATAL(acquire(g2, 2, true), 0); /* g1 owned it since the last test */
	memset(buf, 0x71, sizeof(buf));
	CU_ASSERT_EQUAL(run_io_on(cli_r2, g1, HL_IO_WRITE, 9, buf), -ESHUTDOWN);
	CU_ASSERT_EQUAL(check_block(g2, 9, 0x00), 0);
	CU_ASSERT_EQUAL(g2->ops->own_renew(g2, 2, 1, &info), 0);
	CU_ASSERT_EQUAL(info.requester, 0); /* g1's new session is not left registered */
	CU_ASSERT_EQUAL(g1->ops->own_renew(g1, 1, 1, &info), -ESHUTDOWN);
	CU_ASSERT_EQUAL(g2->ops->own_release(g2, 2, 1), 0);
}

/* A write sent on reactor r and not waited for: run_async_wait() collects it. */
struct async_io {
	struct call c;
	uint8_t buf[BLK];
};

static void run_async(struct hl_reactor *r, struct async_io *a, struct hl_origin *o, uint64_t blk,
                      uint8_t fill)
{
	memset(a, 0, sizeof(*a));
	sem_init(&a->c.done, 0, 0);
	memset(a->buf, fill, sizeof(a->buf));
	a->c.o = o;
	a->c.iov.iov_base = a->buf;
	a->c.iov.iov_len = BLK;
	a->c.io.op = HL_IO_WRITE;
	a->c.io.offset = blk * BLK;
	a->c.io.length = BLK;
	a->c.io.iov = &a->c.iov;
	a->c.io.iovcnt = 1;
	a->c.io.cb = call_cb;
	a->c.io.arg = &a->c;
	if (hl_reactor_call(r, call_submit, &a->c)) {
		a->c.result = -999;
		sem_post(&a->c.done);
	}
}

static int run_async_wait(struct async_io *a)
{
	sem_wait(&a->c.done);
	sem_destroy(&a->c.done);
	return a->c.result;
}

/*
 * A planned handover while a write of the old owner is still queued in the
 * SAN (it timed out on the gateway's side, or the drain gave up on it): the
 * new owner's acquire must abort it (PREEMPT AND ABORT of the old key), so
 * that it cannot land after the new owner's own write of the same block.
 * The in-process SAN answers PREEMPT AND ABORT only once the aborted write
 * has left it.
 */
static void test_release_aborts_queued_write(void)
{
	struct hl_origin *s1, *s2;
	struct async_io a;
	int rc;

	if (san.ext_url) {
		fprintf(stderr, "    (external SAN: no slow LUN)\n");
		return;
	}
	/* after "close": client reactors of its own */
	CU_ASSERT_FATAL(hl_reactor_create(&cli_r, "cli") == 0 && hl_reactor_start(cli_r) == 0);
	CU_ASSERT_FATAL(hl_reactor_create(&cli_r2, "cli2") == 0 && hl_reactor_start(cli_r2) == 0);
	s1 = open_gw_lun(1, 1);
	s2 = open_gw_lun(2, 1);
	CU_ASSERT_FATAL(s1 && s2);
	CU_ASSERT_EQUAL_FATAL(acquire(s1, 1, false), 0);
	CU_ASSERT_EQUAL(write_block(s1, 0, 0x11), 0);
	run_async(cli_r2, &a, s1, 0, SLOW_BYTE); /* queued in the SAN for SLOW_MS */
	usleep(300 * 1000);
	CU_ASSERT_EQUAL(s1->ops->own_release(s1, 1, 1), 0);
	CU_ASSERT_EQUAL_FATAL(acquire(s2, 2, false), 0);
	CU_ASSERT_EQUAL(write_block(s2, 0, 0x22), 0);
	rc = run_async_wait(&a);
	fprintf(stderr, "    (the old owner's queued write: %d)\n", rc);
	usleep(200 * 1000);
	CU_ASSERT_EQUAL(check_block(s2, 0, 0x22), 0); /* not overwritten by the old write */
	CU_ASSERT_EQUAL(s2->ops->own_release(s2, 2, 1), 0);
	stop_clients(); /* s1 has sessions on both client reactors: close them after */
	hl_origin_close(s1);
	hl_origin_close(s2);
}

static int check_proof(struct hl_origin *o, const char *proof)
{
	char why[HL_ORIGIN_WHY_MAX];
	int rc = hl_origin_proof_check(o, "ut", proof, NULL, NULL, why, sizeof(why));

	fprintf(stderr, "    (proof check: %d, %s)\n", rc, why);
	return rc;
}

/*
 * Warm restart proofs: our reservation and its PRgeneration. A quiet owner
 * proves the same token twice; its own write after a proof, a peer's
 * request, a takeover all make the check fail; a restart of the owner
 * (reservation kept, APTPL) keeps it.
 */
static void test_proofs(void)
{
	char p1[HL_ORIGIN_PROOF_MAX], p2[HL_ORIGIN_PROOF_MAX], p3[HL_ORIGIN_PROOF_MAX];

	CU_ASSERT_FATAL(g1 && g2 && lone);
	CU_ASSERT_EQUAL(hl_origin_proof_take(lone, "ut", false, p1, sizeof(p1)), -EOPNOTSUPP);
	CU_ASSERT_EQUAL(hl_origin_proof_take(g2, "ut", false, p1, sizeof(p1)),
	                -EAGAIN); /* not ours */
	CU_ASSERT_EQUAL_FATAL(acquire(g2, 2, false), 0);
	CU_ASSERT_EQUAL(write_block(g2, 10, 0x81), 0);
	CU_ASSERT_EQUAL_FATAL(hl_origin_proof_take(g2, "ut", false, p1, sizeof(p1)), 0);
	CU_ASSERT_EQUAL(strncmp(p1, "iscsi-pr:686c75", 15), 0); /* "hlu", a run, gateway 2 */
	CU_ASSERT_EQUAL(strncmp(p1 + 21, "0002:", 5), 0);
	CU_ASSERT_PTR_NULL(strchr(p1, ' '));
	CU_ASSERT_EQUAL(check_block(g2, 10, 0x81), 0); /* reads do not move it */
	CU_ASSERT_EQUAL_FATAL(hl_origin_proof_take(g2, "ut", false, p2, sizeof(p2)), 0);
	CU_ASSERT_STRING_EQUAL(p1, p2);
	CU_ASSERT_EQUAL(check_proof(g2, p1), 0);
	/* our own write after the proof */
	CU_ASSERT_EQUAL(write_block(g2, 10, 0x82), 0);
	CU_ASSERT_EQUAL(check_proof(g2, p1), -ESTALE);
	CU_ASSERT_EQUAL_FATAL(hl_origin_proof_take(g2, "ut", false, p2, sizeof(p2)), 0);
	CU_ASSERT_STRING_NOT_EQUAL(p1, p2);
	/* a peer's request moves PRgeneration too (cold rather than wrong) */
	CU_ASSERT_EQUAL(g1->ops->own_request(g1, 1), 0);
	CU_ASSERT_EQUAL(check_proof(g2, p2), -ESTALE);
	/* the final proof, then g2 stops without releasing (a crash) and starts again */
	CU_ASSERT_EQUAL_FATAL(hl_origin_proof_take(g2, "ut", true, p3, sizeof(p3)), 0);
	close_on_cli(g2);
	g2 = open_gw(2);
	CU_ASSERT_FATAL(g2 != NULL);
	CU_ASSERT_EQUAL(check_proof(g2, p3), 0);
	CU_ASSERT_EQUAL(check_proof(g1, p3), -ESTALE); /* another gateway's key */
	CU_ASSERT_EQUAL(check_proof(lone, p3), -ESTALE);
	/* a takeover while it was down */
	CU_ASSERT_EQUAL_FATAL(acquire(g1, 1, true), 0);
	CU_ASSERT_EQUAL(check_proof(g2, p3), -ESTALE);
	CU_ASSERT_EQUAL(g1->ops->own_release(g1, 1, 1), 0);
}

/*
 * A restart after a crash keeps its proof through its own acquisition: the
 * new run takes its earlier run's reservation by force (owner.c does so),
 * which moves PRgeneration; the proof still holds when nobody but that
 * acquisition changed the PR state since it was taken. Anything else in
 * between (a peer's request) or after (our own write) makes it cold.
 */
static void test_restart_acquire_keeps_proof(void)
{
	char p[HL_ORIGIN_PROOF_MAX];

	CU_ASSERT_FATAL(g1 && g2 && lone);
	CU_ASSERT_EQUAL_FATAL(acquire(g2, 2, false), 0);
	CU_ASSERT_EQUAL(write_block(g2, 12, 0xa1), 0);
	CU_ASSERT_EQUAL_FATAL(hl_origin_proof_take(g2, "ut", false, p, sizeof(p)), 0);
	/* a crash, a new process */
	close_on_cli(g2);
	g2 = open_gw(2);
	CU_ASSERT_FATAL(g2 != NULL);
	CU_ASSERT_EQUAL(check_proof(g2, p), 0); /* at start: the earlier run's key holds it */
	CU_ASSERT_EQUAL_FATAL(acquire(g2, 2, true), 0);
	CU_ASSERT_EQUAL(check_proof(g2, p), 0); /* after taking it: still warm */
	CU_ASSERT_EQUAL(check_proof(g1, p), -ESTALE);
	/* its own write after the acquisition: a proof from before it cannot vouch */
	CU_ASSERT_EQUAL(write_block(g2, 12, 0xa2), 0);
	CU_ASSERT_EQUAL(check_proof(g2, p), -ESTALE);
	/* again, with a peer's request between the crash and the acquisition: cold */
	CU_ASSERT_EQUAL_FATAL(hl_origin_proof_take(g2, "ut", false, p, sizeof(p)), 0);
	close_on_cli(g2);
	g2 = open_gw(2);
	CU_ASSERT_FATAL(g2 != NULL);
	CU_ASSERT_EQUAL(g1->ops->own_request(g1, 1), 0);
	CU_ASSERT_EQUAL_FATAL(acquire(g2, 2, true), 0);
	CU_ASSERT_EQUAL(check_proof(g2, p), -ESTALE);
	/* and a planned release: the LUN is not reserved meanwhile, cold */
	CU_ASSERT_EQUAL(write_block(g2, 12, 0xa3), 0);
	CU_ASSERT_EQUAL_FATAL(hl_origin_proof_take(g2, "ut", true, p, sizeof(p)), 0);
	CU_ASSERT_EQUAL(g2->ops->own_release(g2, 2, 1), 0);
	CU_ASSERT_EQUAL_FATAL(acquire(g2, 2, false), 0);
	CU_ASSERT_EQUAL(check_proof(g2, p), -ESTALE);
	CU_ASSERT_EQUAL(g2->ops->own_release(g2, 2, 1), 0);
}

/*
 * The owner refuses a request (its hold): the asker's registration goes, its
 * peek says refused (owner.c then does not preempt), the owner's renew sees
 * no request any more; asking again is a new request.
 */
static void test_refuse(void)
{
	struct hl_own_info info;

	CU_ASSERT_FATAL(g1 && g2 && lone);
	CU_ASSERT_EQUAL_FATAL(acquire(g1, 1, false), 0);
	CU_ASSERT_EQUAL(g2->ops->own_request(g2, 2), 0);
	CU_ASSERT_EQUAL(g2->ops->own_peek(g2, &info), 0);
	CU_ASSERT_FALSE(info.refused);
	CU_ASSERT_EQUAL(g1->ops->own_renew(g1, 1, 1, &info), 0);
	CU_ASSERT_EQUAL(info.requester, 2);
	CU_ASSERT_EQUAL(g1->ops->own_refuse(g1, 1, 2), 0);
	CU_ASSERT_EQUAL(g1->ops->own_renew(g1, 1, 1, &info), 0);
	CU_ASSERT_EQUAL(info.requester, 0);
	CU_ASSERT_EQUAL(g2->ops->own_peek(g2, &info), 0);
	CU_ASSERT_TRUE(info.refused);
	CU_ASSERT_EQUAL(g2->ops->own_refuse(g2, 2, 1), -ESHUTDOWN); /* not its to refuse */
	CU_ASSERT_EQUAL(write_block(g1, 13, 0xb1), 0); /* the owner goes on */
	CU_ASSERT_EQUAL(g2->ops->own_request(g2, 2), 0);
	CU_ASSERT_EQUAL(g2->ops->own_peek(g2, &info), 0);
	CU_ASSERT_FALSE(info.refused);
	CU_ASSERT_EQUAL(g1->ops->own_release(g1, 1, 1), 0);
}

/*
 * The owner's heartbeat on the SAN: each renew moves the holder's key (one
 * run, the counter in it), a standby's peek says has_beat only once it saw
 * that key move, and a preempted owner's renew does not register its key
 * back. A warm restart proof survives the heartbeats (each moved
 * PRgeneration by one, the counter by one), through a crash and the new
 * run's acquisition and heartbeats, but not one write or request.
 */
static void test_heartbeat(void)
{
	struct hl_own_info info, seen;
	char p[HL_ORIGIN_PROOF_MAX], p2[HL_ORIGIN_PROOF_MAX];

	CU_ASSERT_FATAL(g1 && g2 && lone);
	struct hl_origin *g3 = open_gw(3); /* a standby that never looked before */

	CU_ASSERT_FATAL(g3 != NULL);
	CU_ASSERT_EQUAL_FATAL(acquire(g1, 1, false), 0);
	CU_ASSERT_EQUAL(g3->ops->own_peek(g3, &seen), 0);
	CU_ASSERT_EQUAL(seen.owner, 1);
	CU_ASSERT_FALSE(seen.has_beat); /* not seen moving yet: could be an older owner */
	CU_ASSERT_EQUAL(g3->ops->own_peek(g3, &info), 0);
	CU_ASSERT_FALSE(info.has_beat);
	CU_ASSERT_EQUAL(info.beat, seen.beat); /* nothing moved */
	CU_ASSERT_EQUAL(g1->ops->own_renew(g1, 1, 1, &info), 0);
	CU_ASSERT_EQUAL(info.requester, 0); /* its own data sessions' keys are not a request */
	CU_ASSERT_TRUE(info.this_run);
	CU_ASSERT_EQUAL(g3->ops->own_peek(g3, &info), 0);
	CU_ASSERT_EQUAL(info.owner, 1);
	CU_ASSERT_TRUE(info.has_beat);
	CU_ASSERT_NOT_EQUAL(info.beat, seen.beat);
	CU_ASSERT_EQUAL(info.beat >> 24, seen.beat >> 24); /* the same run */
	CU_ASSERT_EQUAL(info.epoch, seen.epoch); /* PRgeneration less the counter: no move */
	seen = info;
	CU_ASSERT_EQUAL(g3->ops->own_peek(g3, &info), 0);
	CU_ASSERT_TRUE(info.has_beat); /* standing still now, but known to beat */
	CU_ASSERT_EQUAL(info.beat, seen.beat);
	close_on_cli(g3);
	/* the owner writes under its moved key (its sessions keep heartbeat 0) */
	CU_ASSERT_EQUAL(write_block(g1, 14, 0xc1), 0);
	CU_ASSERT_EQUAL(write_block(lone, 14, 0xc2), -EBADE);
	/* a proof survives heartbeats, not a write */
	CU_ASSERT_EQUAL_FATAL(hl_origin_proof_take(g1, "ut", false, p, sizeof(p)), 0);
	for (int i = 0; i < 3; i++)
		CU_ASSERT_EQUAL(g1->ops->own_renew(g1, 1, 1, &info), 0);
	CU_ASSERT_EQUAL(check_proof(g1, p), 0);
	/* a quiet disk gives the same proof again (the cache records one it got twice) */
	CU_ASSERT_EQUAL_FATAL(hl_origin_proof_take(g1, "ut", false, p2, sizeof(p2)), 0);
	CU_ASSERT_STRING_EQUAL(p, p2);
	CU_ASSERT_EQUAL(write_block(g1, 14, 0xc3), 0);
	CU_ASSERT_EQUAL(g1->ops->own_renew(g1, 1, 1, &info), 0);
	CU_ASSERT_EQUAL(check_proof(g1, p), -ESTALE);
	/* a refusal and a release from a moved key */
	CU_ASSERT_EQUAL(g2->ops->own_request(g2, 2), 0);
	CU_ASSERT_EQUAL(g1->ops->own_renew(g1, 1, 1, &info), 0);
	CU_ASSERT_EQUAL(info.requester, 2);
	CU_ASSERT_EQUAL(g1->ops->own_refuse(g1, 1, 2), 0);
	CU_ASSERT_EQUAL(g2->ops->own_peek(g2, &info), 0);
	CU_ASSERT_TRUE(info.refused);
	CU_ASSERT_EQUAL(g1->ops->own_renew(g1, 1, 1, &info), 0);
	CU_ASSERT_EQUAL(info.requester, 0);
	CU_ASSERT_EQUAL(g1->ops->own_release(g1, 1, 1), 0);
	CU_ASSERT_EQUAL(g2->ops->own_peek(g2, &info), 0);
	CU_ASSERT_TRUE(info.released);
	CU_ASSERT_FALSE(info.has_beat);
	/* g2 owns and beats; g1 takes it by force; g2's renew must not register it back */
	CU_ASSERT_EQUAL_FATAL(acquire(g2, 2, false), 0);
	CU_ASSERT_EQUAL(g2->ops->own_renew(g2, 2, 1, &info), 0);
	CU_ASSERT_EQUAL_FATAL(acquire(g1, 1, true), 0);
	CU_ASSERT_EQUAL(g2->ops->own_renew(g2, 2, 1, &info), -ESHUTDOWN);
	CU_ASSERT_EQUAL(g2->ops->own_renew(g2, 2, 1, &info), -ESHUTDOWN);
	CU_ASSERT_EQUAL(g1->ops->own_renew(g1, 1, 1, &info), 0);
	CU_ASSERT_EQUAL(info.requester, 0);
	CU_ASSERT_EQUAL(write_block(g2, 14, 0xc4), -ESHUTDOWN);
	CU_ASSERT_EQUAL(g1->ops->own_release(g1, 1, 1), 0);
	/* a crash after heartbeats: the restart's proof check and acquisition stay warm */
	CU_ASSERT_EQUAL_FATAL(acquire(g2, 2, false), 0);
	CU_ASSERT_EQUAL(write_block(g2, 15, 0xd1), 0);
	CU_ASSERT_EQUAL(g2->ops->own_renew(g2, 2, 1, &info), 0);
	CU_ASSERT_EQUAL_FATAL(hl_origin_proof_take(g2, "ut", true, p, sizeof(p)), 0);
	CU_ASSERT_EQUAL(g2->ops->own_renew(g2, 2, 1, &info), 0);
	CU_ASSERT_EQUAL(g2->ops->own_renew(g2, 2, 1, &info), 0);
	close_on_cli(g2);
	g2 = open_gw(2);
	CU_ASSERT_FATAL(g2 != NULL);
	CU_ASSERT_EQUAL(check_proof(g2, p), 0);
	CU_ASSERT_EQUAL_FATAL(acquire(g2, 2, true), 0);
	CU_ASSERT_EQUAL(check_proof(g2, p), 0);
	CU_ASSERT_EQUAL(g2->ops->own_renew(g2, 2, 1, &info), 0); /* the new run's heartbeats */
	CU_ASSERT_EQUAL(g2->ops->own_renew(g2, 2, 1, &info), 0);
	CU_ASSERT_EQUAL(check_proof(g2, p), 0);
	CU_ASSERT_EQUAL(write_block(g2, 15, 0xd2), 0);
	CU_ASSERT_EQUAL(check_proof(g2, p), -ESTALE);
	CU_ASSERT_EQUAL(g2->ops->own_release(g2, 2, 1), 0);
}

/* The PRgeneration in a proof token. */
static unsigned proof_gen_of(const char *p)
{
	unsigned long long k = 0;
	unsigned g = 0;

	sscanf(p, "iscsi-pr:%16llx:%u:", &k, &g);
	return g;
}

/* Release, a peer owns and writes, this same process takes it back. */
static void failback_beats(unsigned beats, char *proof, size_t len)
{
	struct hl_own_info info;

	CU_ASSERT_EQUAL(write_block(g1, 16, 0xe1), 0);
	for (unsigned i = 0; i < beats; i++)
		CU_ASSERT_EQUAL(g1->ops->own_renew(g1, 1, 1, &info), 0);
	CU_ASSERT_EQUAL_FATAL(hl_origin_proof_take(g1, "ut", true, proof, len), 0);
	CU_ASSERT_EQUAL(g1->ops->own_release(g1, 1, 1), 0);
	CU_ASSERT_EQUAL_FATAL(acquire(g2, 2, false), 0);
	CU_ASSERT_EQUAL(write_block(g2, 16, 0xe2), 0); /* the peer writes the block */
	CU_ASSERT_EQUAL(g2->ops->own_release(g2, 2, 1), 0);
	CU_ASSERT_EQUAL_FATAL(acquire(g1, 1, false), 0);
}

/*
 * A failback to the same process must be cold (docs/gateways.md
 * "a gateway that gets the LUN back after a peer owned it starts cold").
 * Each acquisition registers heartbeat 0 again: from counter b to 0 reads
 * as 256 - b heartbeats, so when the failback moved PRgeneration by exactly
 * 256 - b, the proof taken before the release passes.
 */
static void test_failback_counter_reset(void)
{
	char p[HL_ORIGIN_PROOF_MAX], q[HL_ORIGIN_PROOF_MAX];
	unsigned n;

	CU_ASSERT_FATAL(g1 && g2 && lone);
	CU_ASSERT_EQUAL_FATAL(acquire(g1, 1, false), 0);
	/* 1: measure the moves of one failback (proof at counter 1: not 0 = the data key) */
	failback_beats(1, p, sizeof(p));
	CU_ASSERT_EQUAL(check_proof(g1, p), -ESTALE);
	CU_ASSERT_EQUAL_FATAL(hl_origin_proof_take(g1, "ut", true, q, sizeof(q)), 0);
	n = proof_gen_of(q) - proof_gen_of(p);
	fprintf(stderr, "    (a failback moved PRgeneration by %u; p %s q %s)\n", n, p, q);
	CU_ASSERT_FATAL(n > 1 && n < 256);
	/* 2: the same failback with the proof taken at counter 256 - n (- 0..3: first one differs) */
	for (unsigned d = 0; d < 4; d++) {
		failback_beats(256 - n - d, p, sizeof(p));
		CU_ASSERT_EQUAL(check_block(g1, 16, 0xe2), 0); /* the SAN has the peer's data */
		fprintf(stderr, "    (proof %s, now cold expected)\n", p);
		int rc = check_proof(g1, p);
		CU_ASSERT_EQUAL(rc, -ESTALE); /* fails: 0, warm over the peer's write */
		if (rc == 0)
			break;
	}
	CU_ASSERT_EQUAL(g1->ops->own_release(g1, 1, 1), 0);
}

/* The cache's drops (HL_ORIGIN_CHANGED) one origin reported. */
static void count_changed(void *arg, struct hl_origin *o, enum hl_origin_event ev,
                          uint64_t old_size)
{
	(void)o;
	(void)old_size;
	if (ev == HL_ORIGIN_CHANGED)
		__atomic_add_fetch((unsigned *)arg, 1, __ATOMIC_SEQ_CST);
}

/* Until *n reached want (5 s at most: the check runs on the origin's service thread). */
static bool wait_count(const unsigned *n, unsigned want)
{
	for (int i = 0; i < 500 && __atomic_load_n(n, __ATOMIC_SEQ_CST) < want; i++)
		usleep(10000);
	return __atomic_load_n(n, __ATOMIC_SEQ_CST) >= want;
}

/*
 * The reservation's unit attentions, made by the SAN itself (pr.c): a
 * RELEASE gives the releasing gateway's registered data nexuses 2A/04
 * RESERVATIONS RELEASED, a takeover gives the old owner's 2A/05
 * REGISTRATIONS PREEMPTED. Each is met by the next command of that data
 * session (the poll nexus is not a registrant and hears neither), and
 * drops the gateway's disk (iscsi_ua.c): after either, another initiator
 * may have written. A lone gateway registers nothing and hears none.
 */
static void test_pr_unit_attentions(void)
{
	static unsigned ch1, ch2, chl;
	unsigned c1, c2, cl;

	CU_ASSERT_FATAL(g1 && g2 && lone);
	hl_origin_listen(g1, count_changed, &ch1);
	hl_origin_listen(g2, count_changed, &ch2);
	hl_origin_listen(lone, count_changed, &chl);
	CU_ASSERT_EQUAL_FATAL(acquire(g1, 1, false), 0);
	CU_ASSERT_EQUAL(write_block(g1, 24, 0xa1), 0); /* its data session registers */
	usleep(1500000); /* a poll or more: nothing to drop so far */
	c1 = __atomic_load_n(&ch1, __ATOMIC_SEQ_CST);
	c2 = __atomic_load_n(&ch2, __ATOMIC_SEQ_CST);
	cl = __atomic_load_n(&chl, __ATOMIC_SEQ_CST);
	/* 2A/04: our own RELEASE, met by g1's data session */
	CU_ASSERT_EQUAL(g1->ops->own_release(g1, 1, 1), 0);
	CU_ASSERT_EQUAL(check_block(g1, 24, 0xa1), 0);
	CU_ASSERT_TRUE(wait_count(&ch1, c1 + 1));
	/* 2A/05: g2 takes over by force; g1's data session is preempted */
	CU_ASSERT_EQUAL_FATAL(acquire(g1, 1, false), 0);
	CU_ASSERT_EQUAL(write_block(g1, 24, 0xa2), 0);
	c1 = __atomic_load_n(&ch1, __ATOMIC_SEQ_CST);
	CU_ASSERT_EQUAL_FATAL(acquire(g2, 2, true), 0);
	CU_ASSERT_EQUAL(check_block(g1, 24, 0xa2), 0); /* reads pass; this one meets 2A/05 */
	CU_ASSERT_TRUE(wait_count(&ch1, c1 + 1));
	/* the new owner and the lone gateway heard nothing to drop for */
	CU_ASSERT_EQUAL(write_block(g2, 24, 0xa3), 0);
	CU_ASSERT_EQUAL(check_block(lone, 24, 0xa3), 0);
	usleep(1500000);
	CU_ASSERT_EQUAL(__atomic_load_n(&ch2, __ATOMIC_SEQ_CST), c2);
	CU_ASSERT_EQUAL(__atomic_load_n(&chl, __ATOMIC_SEQ_CST), cl);
	CU_ASSERT_EQUAL(g2->ops->own_release(g2, 2, 1), 0);
	hl_origin_listen(g1, NULL, NULL);
	hl_origin_listen(g2, NULL, NULL);
	hl_origin_listen(lone, NULL, NULL);
}

/*
 * Somebody else clears the LUN's PR state (PR OUT CLEAR: every registration
 * and the reservation go, as when a SAN restarts without APTPL): an
 * initiator of its own registers a key and clears with it.
 */
static int san_clear(void)
{
	struct scsi_persistent_reserve_out_basic p = {
	    .reservation_key = 0x5ca1ab1eull, .service_action_reservation_key = 0x5ca1ab1eull};
	struct iscsi_context *ctx = iscsi_create_context("iqn.2026-11.io.hotlun:ut-clearer");
	char portal[64];
	int rc = -1;

	if (!ctx)
		return -1;
	snprintf(portal, sizeof(portal), "127.0.0.1:%u", san.port);
	iscsi_set_targetname(ctx, IQN);
	iscsi_set_session_type(ctx, ISCSI_SESSION_NORMAL);
	iscsi_set_header_digest(ctx, ISCSI_HEADER_DIGEST_NONE);
	if (iscsi_full_connect_sync(ctx, portal, 0) == 0) {
		for (int sa = SCSI_PERSISTENT_RESERVE_REGISTER_AND_IGNORE_EXISTING_KEY, i = 0;
		     i < 2; i++, sa = SCSI_PERSISTENT_RESERVE_CLEAR) {
			struct scsi_task *t = NULL;

			/* the first command may meet a unit attention: once more */
			for (int try = 0; try < 3 && (!t || t->status != SCSI_STATUS_GOOD); try++) {
				scsi_free_scsi_task(t);
				p.aptpl = 0;
				t = iscsi_persistent_reserve_out_sync(
				    ctx, 0, sa, SCSI_PERSISTENT_RESERVE_SCOPE_LU, 0, &p);
			}
			rc = t && t->status == SCSI_STATUS_GOOD ? 0 : -1;
			scsi_free_scsi_task(t);
			if (rc)
				break;
		}
		iscsi_logout_sync(ctx);
	}
	iscsi_destroy_context(ctx);
	return rc;
}

/*
 * A reservation that vanishes without a release (PR OUT CLEAR, or a SAN
 * that lost its PR state) reads as released, but the old owner does not
 * know and may still serve from its cache: the standby must take it by
 * force (info.fence: fence, then the lease wait). A planned release keeps
 * the releaser's registrations, and is taken as before.
 */
static void test_vanished_reservation(void)
{
	struct hl_own_info info;
	struct hl_origin *g3;

	CU_ASSERT_FATAL(g1 && g2 && lone);
	if (san.ext_url)
		return; /* clears through the in-process SAN's portal */
	/* planned: g1 releases, its registrations stay */
	CU_ASSERT_EQUAL_FATAL(acquire(g1, 1, false), 0);
	CU_ASSERT_EQUAL(write_block(g1, 26, 0xb1), 0);
	CU_ASSERT_EQUAL(g2->ops->own_peek(g2, &info), 0);
	CU_ASSERT_EQUAL(info.owner, 1);
	CU_ASSERT_EQUAL(g1->ops->own_release(g1, 1, 1), 0);
	CU_ASSERT_EQUAL(g2->ops->own_peek(g2, &info), 0);
	CU_ASSERT_TRUE(info.released);
	CU_ASSERT_FALSE(info.fence);
	/* cleared under a live owner: released in appearance, forced in fact */
	CU_ASSERT_EQUAL_FATAL(acquire(g1, 1, false), 0);
	CU_ASSERT_EQUAL(write_block(g1, 26, 0xb2), 0);
	CU_ASSERT_EQUAL(g2->ops->own_peek(g2, &info), 0);
	CU_ASSERT_EQUAL(info.owner, 1);
	CU_ASSERT_FALSE(info.fence);
	CU_ASSERT_EQUAL_FATAL(san_clear(), 0);
	CU_ASSERT_EQUAL(g2->ops->own_peek(g2, &info), 0);
	CU_ASSERT_EQUAL(info.owner, 0);
	CU_ASSERT_TRUE(info.released);
	CU_ASSERT_TRUE(info.fence);
	/* a process that never saw a holder cannot tell either: forced */
	g3 = open_gw(3);
	CU_ASSERT_FATAL(g3 != NULL);
	CU_ASSERT_EQUAL(g3->ops->own_peek(g3, &info), 0);
	CU_ASSERT_TRUE(info.released);
	CU_ASSERT_TRUE(info.fence);
	close_on_cli(g3);
	/* the old owner hears it at its renew; the forced taker gets the disk */
	CU_ASSERT_EQUAL(g1->ops->own_renew(g1, 1, 1, &info), -ESHUTDOWN);
	CU_ASSERT_EQUAL_FATAL(acquire(g2, 2, true), 0);
	CU_ASSERT_EQUAL(write_block(g2, 26, 0xb3), 0);
	CU_ASSERT_EQUAL(write_block(g1, 26, 0xb4), -ESHUTDOWN);
	CU_ASSERT_EQUAL(check_block(g1, 26, 0xb3), 0);
	CU_ASSERT_EQUAL(g2->ops->own_release(g2, 2, 1), 0);
}

/*
 * An owner preempted while frozen (its renew has not run since) takes a
 * proof: no proof, and no epoch bump either, else its data sessions would
 * REGISTER AND IGNORE EXISTING KEY before their next write, under the new
 * owner's reservation (a request to it, and a move of PRgeneration that
 * makes the new owner's proof stale).
 */
static void test_proof_after_preempt(void)
{
	char p[HL_ORIGIN_PROOF_MAX], q[HL_ORIGIN_PROOF_MAX];
	struct hl_own_info info;

	CU_ASSERT_FATAL(g1 && g2 && lone);
	CU_ASSERT_EQUAL_FATAL(acquire(g1, 1, false), 0);
	CU_ASSERT_EQUAL(write_block(g1, 27, 0xc1), 0); /* its data session registers */
	CU_ASSERT_EQUAL_FATAL(acquire(g2, 2, true), 0);
	CU_ASSERT_EQUAL_FATAL(hl_origin_proof_take(g2, "ut", false, p, sizeof(p)), 0);
	/* g1 thaws: it still believes it owns the disk */
	CU_ASSERT_EQUAL(hl_origin_proof_take(g1, "ut", false, q, sizeof(q)), -EAGAIN);
	CU_ASSERT_EQUAL(write_block(g1, 27, 0xc2), -ESHUTDOWN);
	CU_ASSERT_EQUAL(g2->ops->own_renew(g2, 2, 1, &info), 0);
	CU_ASSERT_EQUAL(info.requester, 0);
	CU_ASSERT_EQUAL(check_proof(g2, p), 0); /* nothing but g2 moved PRgeneration */
	CU_ASSERT_EQUAL(check_block(g1, 27, 0xc1), 0);
	CU_ASSERT_EQUAL(g1->ops->own_renew(g1, 1, 1, &info), -ESHUTDOWN);
	CU_ASSERT_EQUAL(g2->ops->own_release(g2, 2, 1), 0);
}

/* The random source of reservation keys, forced: `forced_run` first, then the real one. */
static uint32_t (*real_draw)(void);
static uint32_t forced_run;
static unsigned forced_draws;

static uint32_t forced_draw(void)
{
	return forced_draws++ ? real_draw() : forced_run;
}

/* Open gateway gw as a new process whose first draw of a run is `run` (forced_draw set). */
static struct hl_origin *open_gw_run(uint16_t gw, uint32_t run)
{
	forced_run = run;
	forced_draws = 0;
	return open_gw(gw);
}

static uint32_t run_of(uint64_t key)
{
	return (uint32_t)((key & ISC_PR_RUN_MASK) >> 24);
}

/*
 * A restarted gateway that draws the run of its previous process (one start
 * in 65535) must not use it while that process's keys are registered: it
 * would take their registrations and reservation for its own (this_run, an
 * acquisition without force, a request that reads as the old holder's).
 * First a leftover registration (the old process asked for the disk and
 * died), then a leftover reservation (it owned the disk and died).
 */
static void test_run_not_reused(void)
{
	struct hl_own_info info;
	struct hl_origin *old, *neu;
	uint64_t old_key;

	CU_ASSERT_FATAL(san.ok);
	real_draw = origin_iscsi_run_draw;
	origin_iscsi_run_draw = forced_draw;
	/* a registration: the old process's request */
	old = open_gw_run(5, 0x5eed);
	CU_ASSERT_FATAL(old != NULL);
	CU_ASSERT_EQUAL(old->ops->own_request(old, 5), 0);
	old_key = io_of(old)->pr_key;
	close_on_cli(old); /* gone without a word: its key stays registered */
	neu = open_gw_run(5, run_of(old_key));
	CU_ASSERT_FATAL(neu != NULL);
	CU_ASSERT_EQUAL(neu->ops->own_request(neu, 5), 0);
	CU_ASSERT_FALSE(pr_key_same_run(io_of(neu)->pr_key, old_key)); /* drawn again */
	CU_ASSERT_EQUAL(pr_key_gateway(io_of(neu)->pr_key), 5);
	close_on_cli(neu);

	/* a reservation: the old process owned the disk and wrote it */
	old = open_gw_run(5, 0x5eee);
	CU_ASSERT_FATAL(old != NULL);
	CU_ASSERT_EQUAL_FATAL(acquire(old, 5, true), 0); /* the leftovers above: force */
	CU_ASSERT_EQUAL(write_block(old, 28, 0xd1), 0);
	old_key = io_of(old)->pr_key;
	close_on_cli(old); /* crashed while owning: reservation and registrations stay */
	neu = open_gw_run(5, run_of(old_key));
	CU_ASSERT_FATAL(neu != NULL);
	CU_ASSERT_EQUAL(neu->ops->own_peek(neu, &info), 0);
	CU_ASSERT_EQUAL(info.owner, 5);
	CU_ASSERT_FALSE(pr_key_same_run(io_of(neu)->pr_key, old_key));
	CU_ASSERT_FALSE(info.this_run); /* the earlier run's: taken by force (owner.c) */
	CU_ASSERT_EQUAL(acquire(neu, 5, false), -EBUSY); /* not without force */
	CU_ASSERT_EQUAL_FATAL(acquire(neu, 5, true), 0);
	CU_ASSERT_EQUAL(write_block(neu, 28, 0xd2), 0);
	CU_ASSERT_EQUAL(check_block(neu, 28, 0xd2), 0);
	CU_ASSERT_EQUAL(neu->ops->own_renew(neu, 5, 1, &info), 0);
	CU_ASSERT_TRUE(info.this_run);
	CU_ASSERT_EQUAL(neu->ops->own_release(neu, 5, 1), 0);
	close_on_cli(neu);
	origin_iscsi_run_draw = real_draw;
}

/* g1 has sessions on two reactors: close after they stopped, as the backend asks. */
static void test_close(void)
{
	stop_clients();
	hl_origin_close(g1);
	hl_origin_close(g2);
	hl_origin_close(lone);
	g1 = g2 = lone = NULL;
}

static const struct hl_test tests[] = {
    {"gateway origins have the ownership ops", test_ops_present},
    {"a free disk: released, lone gateway writes, others do not", test_free_disk},
    {"acquire; a second acquire without force is -EBUSY; the SAN fences others", test_acquire_busy},
    {"a request is seen at renew; release; the requester acquires", test_request_release},
    {"forced takeover: the old owner's writes and renew get -ESHUTDOWN", test_forced_takeover},
    {"a restarted owner takes its own reservation back", test_reacquire_after_restart},
    {"two processes with one gateway id: the forced one fences the other", test_same_id_two_processes},
    {"the owner's sessions reconnect and keep writing", test_owner_reconnects},
    {"a preempted owner's new session does not register itself back in", test_fenced_new_session},
    {"warm restart proofs: reservation and PRgeneration", test_proofs},
    {"a restart's own acquisition keeps its proof, nothing else does", test_restart_acquire_keeps_proof},
    {"the owner refuses a request: the asker sees it", test_refuse},
    {"the owner's heartbeat: its key moves, standbys see it, proofs survive it", test_heartbeat},
    {"a failback to the same process is cold, whatever its heartbeat counter", test_failback_counter_reset},
    {"2A/04 and 2A/05 on a gateway's data session drop its disk", test_pr_unit_attentions},
    {"a vanished reservation (CLEAR) is taken by force, a release is not", test_vanished_reservation},
    {"a preempted owner's proof_take does not re-register its sessions", test_proof_after_preempt},
    {"a new run never reuses a run whose keys are still registered", test_run_not_reused},
    {"close", test_close},
    {"a release, then the new owner aborts the old owner's queued write", test_release_aborts_queued_write},
    {NULL, NULL},
};

int main(void)
{
	int rc;

	san_setup();
	if (hl_reactor_create(&cli_r, "cli") || hl_reactor_start(cli_r) ||
	    hl_reactor_create(&cli_r2, "cli2") || hl_reactor_start(cli_r2)) {
		fprintf(stderr, "cannot start the client reactor\n");
		return 99;
	}
	rc = hl_test_run("origin_iscsi_own", tests);
	stop_clients();
	san_teardown();
	return rc;
}
