/*
 * range_ut.c - COMPARE AND WRITE and the LBA range locks behind its
 * atomicity (src/scsi/range.c, sbc.c): the fake origin completes I/O one
 * step at a time so the tests can interleave commands.
 */
#include "scsi_ut_util.h"

#include <unistd.h>

/* n_queued is written under the fake origin's lock (by reactor threads): read it there too. */
static unsigned queued(void)
{
	struct fake_origin *f = fake_of(origin);
	unsigned n;

	pthread_mutex_lock(&f->lock);
	n = f->n_queued;
	pthread_mutex_unlock(&f->lock);
	return n;
}

static void test_caw_writes_when_equal(void)
{
	struct tcmd t;
	uint8_t cdb[16];
	uint8_t buf[4 * BS];

	lu_setup();
	memset(medium() + 8 * BS, 'A', 2 * BS);
	memset(buf, 'A', 2 * BS);
	memset(buf + 2 * BS, 'B', 2 * BS);
	cdb_caw(cdb, 8, 2);
	cdb[1] = 0x08; /* FUA */
	run(&t, cdb, 16, buf, sizeof(buf), true);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(t.cmd.xfer_len, 4 * BS);
	CU_ASSERT_EQUAL(medium()[8 * BS], 'B');
	CU_ASSERT_EQUAL(medium()[10 * BS - 1], 'B');
	CU_ASSERT_EQUAL(medium()[10 * BS], 0);
	CU_ASSERT_EQUAL(fake_of(origin)->n_fua, 1);
	lu_teardown();
}

static void test_caw_miscompare_writes_nothing(void)
{
	struct tcmd t;
	uint8_t cdb[16];
	uint8_t buf[2 * BS];

	lu_setup();
	memset(medium() + 8 * BS, 'A', BS);
	memset(buf, 'A', BS);
	memset(buf + BS, 'B', BS);
	buf[BS - 27] = 'C';
	cdb_caw(cdb, 8, 1);
	run(&t, cdb, 16, buf, sizeof(buf), true);
	ASSERT_SENSE(t, HL_SK_MISCOMPARE, 0x1d, 0x00);
	CU_ASSERT_EQUAL(t.cmd.sense[0] & 0x80, 0x80);
	CU_ASSERT_EQUAL(hl_get_be32(t.cmd.sense + 3), BS - 27);
	CU_ASSERT_EQUAL(medium()[8 * BS], 'A');
	CU_ASSERT_EQUAL(fake_of(origin)->n_write, 0);
	lu_teardown();
}

static void test_caw_field_checks(void)
{
	struct tcmd t;
	uint8_t cdb[16];
	uint8_t buf[4 * BS] = {0};

	lu_setup();
	cdb_caw(cdb, 0, 0); /* no blocks: nothing happens */
	run(&t, cdb, 16, NULL, 0, true);
	ASSERT_GOOD(t);
	run(&t, cdb, 16, buf, 2 * BS, true); /* no blocks but data: a wrapped 256 */
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	cdb_caw(cdb, 0, 1); /* data-out of the wrong size, either way */
	run(&t, cdb, 16, buf, 4 * BS, true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	run(&t, cdb, 16, buf, BS, true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	cdb_caw(cdb, NBLOCKS - 1, 2);
	run(&t, cdb, 16, buf, 4 * BS, true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x21, 0x00);
	cdb_caw(cdb, 0, 1);
	cdb[1] = 0x20; /* WRPROTECT */
	run(&t, cdb, 16, buf, 2 * BS, true);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
	CU_ASSERT_EQUAL(fake_of(origin)->n_write + fake_of(origin)->n_read, 0);
	lu_teardown();
}

static void test_caw_waits_for_writes_and_blocks_later_ones(void)
{
	struct tcmd w1, caw, other, w2;
	uint8_t c1[10], c2[10], c3[10], ccaw[16];
	uint8_t x[2 * BS], y[2 * BS], o[BS], z[BS];

	lu_setup();
	memset(x, 'X', sizeof(x));
	memset(y, 'X', BS); /* compare: what w1 will have written */
	memset(y + BS, 'Y', BS);
	memset(o, 'O', sizeof(o));
	memset(z, 'Z', sizeof(z));

	cdb_rw10(c1, 0x2a, 10, 2); /* blocks 10-11 */
	start(&w1, c1, 10, x, sizeof(x), true);
	CU_ASSERT_EQUAL(queued(), 1);
	cdb_caw(ccaw, 11, 1); /* overlaps w1: must wait for it */
	start(&caw, ccaw, 16, y, sizeof(y), true);
	CU_ASSERT_EQUAL(queued(), 1);
	cdb_rw10(c2, 0x2a, 100, 1); /* elsewhere: not held up */
	start(&other, c2, 10, o, sizeof(o), true);
	CU_ASSERT_EQUAL(queued(), 2);
	cdb_rw10(c3, 0x2a, 11, 1); /* after the CAW, overlapping it: waits behind it */
	start(&w2, c3, 10, z, sizeof(z), true);
	CU_ASSERT_EQUAL(queued(), 2);

	fake_step(origin); /* w1 completes: the CAW's read goes out, w2 still waits */
	CU_ASSERT_EQUAL(w1.done, 1);
	CU_ASSERT_EQUAL(caw.done, 0);
	CU_ASSERT_EQUAL(w2.done, 0);
	CU_ASSERT_EQUAL(queued(), 2);
	fake_step(origin); /* other */
	CU_ASSERT_EQUAL(other.done, 1);
	fake_step(origin); /* CAW read -> CAW write */
	CU_ASSERT_EQUAL(caw.done, 0);
	CU_ASSERT_EQUAL(w2.done, 0);
	fake_step(origin); /* CAW write done: w2 is released */
	CU_ASSERT_EQUAL(caw.done, 1);
	CU_ASSERT_EQUAL(caw.cmd.status, HL_SAM_GOOD);
	CU_ASSERT_EQUAL(medium()[11 * BS], 'Y');
	fake_drain(origin);
	CU_ASSERT_EQUAL(w2.done, 1);
	CU_ASSERT_EQUAL(medium()[11 * BS], 'Z');
	CU_ASSERT_EQUAL(medium()[10 * BS], 'X');
	lu_teardown();
}

static void test_writes_do_not_wait_for_each_other(void)
{
	struct tcmd a, b;
	uint8_t c[10];
	uint8_t x[BS] = {1}, y[BS] = {2};

	lu_setup();
	cdb_rw10(c, 0x2a, 5, 1);
	start(&a, c, 10, x, BS, true);
	start(&b, c, 10, y, BS, true);
	CU_ASSERT_EQUAL(queued(), 2);
	fake_drain(origin);
	CU_ASSERT_EQUAL(a.done + b.done, 2);
	lu_teardown();
}

static void test_caw_failing_read_releases_the_range(void)
{
	struct tcmd t;
	uint8_t cdb[16], c[10];
	uint8_t buf[2 * BS] = {0};

	lu_setup();
	fake_of(origin)->fail_result = -EIO;
	cdb_caw(cdb, 3, 1);
	run(&t, cdb, 16, buf, sizeof(buf), true);
	ASSERT_SENSE(t, HL_SK_MEDIUM_ERROR, 0x11, 0x00);
	fake_of(origin)->fail_result = 0;
	cdb_rw10(c, 0x2a, 3, 1);
	run(&t, c, 10, buf, BS, true);
	ASSERT_GOOD(t);
	lu_teardown();
}

static void test_caw_forwarded_to_a_capable_origin(void)
{
	struct tcmd t, w;
	uint8_t cdb[16], c[10];
	uint8_t buf[2 * BS], x[BS];

	lu_setup();
	fake_of(origin)->caw_native = true;
	memset(medium() + 4 * BS, 'A', BS);
	memset(buf, 'A', BS);
	memset(buf + BS, 'B', BS);
	cdb_caw(cdb, 4, 1);
	run(&t, cdb, 16, buf, sizeof(buf), true);
	ASSERT_GOOD(t);
	CU_ASSERT_EQUAL(fake_of(origin)->n_caw, 1);
	CU_ASSERT_EQUAL(fake_of(origin)->n_read, 0); /* not emulated */
	CU_ASSERT_EQUAL(medium()[4 * BS], 'B');
	/* the origin's miscompare offset reaches the sense data */
	memset(buf, 'B', BS);
	buf[100] = 'Z';
	run(&t, cdb, 16, buf, sizeof(buf), true);
	ASSERT_SENSE(t, HL_SK_MISCOMPARE, 0x1d, 0x00);
	CU_ASSERT_EQUAL(hl_get_be32(t.cmd.sense + 3), 100);
	/* the range stays locked while the origin works */
	memset(buf, 'B', BS);
	start(&t, cdb, 16, buf, sizeof(buf), true);
	CU_ASSERT_EQUAL(queued(), 1);
	memset(x, 'X', BS);
	cdb_rw10(c, 0x2a, 4, 1);
	start(&w, c, 10, x, BS, true);
	CU_ASSERT_EQUAL(queued(), 1);
	fake_drain(origin);
	CU_ASSERT_EQUAL(t.done + w.done, 2);
	CU_ASSERT_EQUAL(medium()[4 * BS], 'X');
	lu_teardown();
}

/* ---- two reactors: a waiter resumes on the reactor it started on ---- */

struct mt_cmd {
	struct hl_scsi_cmd cmd;
	struct hl_reactor *started_on, *done_on;
	unsigned done;
};

static void mt_done(struct hl_scsi_cmd *cmd)
{
	struct mt_cmd *m = hl_container_of(cmd, struct mt_cmd, cmd);

	m->done_on = hl_reactor_current();
	__atomic_add_fetch(&m->done, 1, __ATOMIC_RELEASE);
}

static void mt_exec(void *arg)
{
	struct mt_cmd *m = arg;

	m->started_on = hl_reactor_current();
	hl_scsi_cmd_exec(&m->cmd);
}

static void mt_start(struct hl_reactor *r, struct mt_cmd *m, const uint8_t *cdb, uint8_t *buf,
                     uint32_t len)
{
	memset(m, 0, sizeof(*m));
	m->cmd.map = &map;
	m->cmd.lu = lu;
	m->cmd.nexus = &nexus_a;
	memcpy(m->cmd.cdb, cdb, 16);
	m->cmd.cdb_len = 16;
	m->cmd.data = buf;
	m->cmd.data_len = len;
	m->cmd.data_out = true;
	m->cmd.done = mt_done;
	CU_ASSERT_EQUAL_FATAL(hl_reactor_call(r, mt_exec, m), 0);
}

static void mt_complete(void *arg)
{
	fake_run_one(origin, arg);
}

/* Complete the oldest queued I/O on the reactor that submitted it; returns that reactor. */
static struct hl_reactor *mt_complete_next(void)
{
	struct hl_origin_io *io = fake_pop(origin);

	CU_ASSERT_PTR_NOT_NULL_FATAL(io);
	struct hl_reactor *r = (struct hl_reactor *)(uintptr_t)io->priv[0];
	CU_ASSERT_PTR_NOT_NULL_FATAL(r);
	CU_ASSERT_EQUAL(hl_reactor_call(r, mt_complete, io), 0);
	return r;
}

static bool wait_until(const unsigned *v, unsigned want)
{
	for (int i = 0; i < 2000; i++) {
		if (__atomic_load_n(v, __ATOMIC_ACQUIRE) == want)
			return true;
		usleep(1000);
	}
	return false;
}

static bool wait_queued(unsigned want)
{
	for (int i = 0; i < 2000; i++) {
		if (queued() == want)
			return true;
		usleep(1000);
	}
	return false;
}

static void test_waiter_resumes_on_its_own_reactor(void)
{
	struct hl_reactor *r1, *r2;
	struct mt_cmd w, caw;
	uint8_t cw[16] = {0}, cc[16];
	uint8_t x[2 * BS], y[2 * BS];

	lu_setup();
	CU_ASSERT_EQUAL_FATAL(hl_reactor_create(&r1, "r1"), 0);
	CU_ASSERT_EQUAL_FATAL(hl_reactor_create(&r2, "r2"), 0);
	CU_ASSERT_EQUAL_FATAL(hl_reactor_start(r1), 0);
	CU_ASSERT_EQUAL_FATAL(hl_reactor_start(r2), 0);
	memset(x, 'X', sizeof(x));
	memset(y, 'X', BS);
	memset(y + BS, 'Y', BS);

	cdb_rw16(cw, 0x8a, 10, 2);
	mt_start(r1, &w, cw, x, sizeof(x));
	CU_ASSERT_TRUE(wait_queued(1));
	cdb_caw(cc, 11, 1);
	mt_start(r2, &caw, cc, y, sizeof(y));
	usleep(20000);
	CU_ASSERT_EQUAL(queued(), 1); /* the CAW waits for the write */

	CU_ASSERT_PTR_EQUAL(mt_complete_next(), r1); /* the write, on r1 */
	CU_ASSERT_TRUE(wait_until(&w.done, 1));
	CU_ASSERT_PTR_EQUAL(w.done_on, r1);
	CU_ASSERT_TRUE(wait_queued(1));
	CU_ASSERT_PTR_EQUAL(mt_complete_next(), r2); /* the CAW's read went out from r2 */
	CU_ASSERT_TRUE(wait_queued(1));
	CU_ASSERT_PTR_EQUAL(mt_complete_next(), r2); /* and its write */
	CU_ASSERT_TRUE(wait_until(&caw.done, 1));
	CU_ASSERT_PTR_EQUAL(caw.done_on, r2);
	CU_ASSERT_EQUAL(caw.cmd.status, HL_SAM_GOOD);
	CU_ASSERT_EQUAL(medium()[11 * BS], 'Y');

	hl_reactor_stop(r1);
	hl_reactor_stop(r2);
	hl_reactor_destroy(r1);
	hl_reactor_destroy(r2);
	lu_teardown();
}

static const struct hl_test tests[] = {
    {"COMPARE AND WRITE writes when equal", test_caw_writes_when_equal},
    {"COMPARE AND WRITE miscompare writes nothing", test_caw_miscompare_writes_nothing},
    {"COMPARE AND WRITE field checks", test_caw_field_checks},
    {"CAW waits for writes, blocks later ones", test_caw_waits_for_writes_and_blocks_later_ones},
    {"writes do not wait for each other", test_writes_do_not_wait_for_each_other},
    {"a failed CAW releases its range", test_caw_failing_read_releases_the_range},
    {"CAW forwarded to a capable origin", test_caw_forwarded_to_a_capable_origin},
    {"a waiter resumes on its own reactor", test_waiter_resumes_on_its_own_reactor},
    {NULL, NULL},
};

int main(void)
{
	hl_log_level = HL_LOG_ERR - 1;
	return hl_test_run("scsi-range", tests);
}
