/*
 * scratch_ut.c - the daemon-wide budget for per-command scratch buffers
 * (src/scsi/scratch.c): exact accounting, never past the limit, also from
 * several threads at once; and the commands that take such buffers
 * (VERIFY, COMPARE AND WRITE) answered BUSY while it is spent, GOOD again
 * once it frees. Before, nothing bounded them: each VERIFY with BYTCHK=0
 * took its 1 MiB whatever the others held.
 */
#include <pthread.h>

#include "scsi_ut_util.h"

#define MIB (1u << 20)

static struct hl_scsi_scratch_stats stats(void)
{
	struct hl_scsi_scratch_stats s;

	hl_scsi_scratch_stats(&s);
	return s;
}

/* Charges up to the limit exactly, refusals counted one each, gives back to zero. */
static void test_accounting(void)
{
	struct hl_scsi_scratch_stats s0 = stats();

	CU_ASSERT_EQUAL_FATAL(s0.used, 0);
	hl_scsi_scratch_set_limit(1000);
	CU_ASSERT_EQUAL(stats().limit, 1000);
	CU_ASSERT_TRUE(scsi_scratch_take(600));
	CU_ASSERT_FALSE(scsi_scratch_take(401));
	CU_ASSERT_TRUE(scsi_scratch_take(400)); /* exactly the limit */
	CU_ASSERT_FALSE(scsi_scratch_take(1));
	CU_ASSERT_FALSE(scsi_scratch_take(UINT64_MAX)); /* no wrap-around */
	struct hl_scsi_scratch_stats s = stats();
	CU_ASSERT_EQUAL(s.used, 1000);
	CU_ASSERT_EQUAL(s.refused - s0.refused, 3);
	CU_ASSERT_TRUE(s.peak >= 1000);
	scsi_scratch_give(600);
	CU_ASSERT_EQUAL(stats().used, 400);
	/* a lower limit refuses until the use drains below it; what is held stays */
	hl_scsi_scratch_set_limit(300);
	CU_ASSERT_FALSE(scsi_scratch_take(1));
	scsi_scratch_give(400);
	CU_ASSERT_TRUE(scsi_scratch_take(300));
	scsi_scratch_give(300);
	CU_ASSERT_EQUAL(stats().used, 0);
	CU_ASSERT_EQUAL(stats().refused - s0.refused, 4);
	hl_scsi_scratch_set_limit(0);
	CU_ASSERT_EQUAL(stats().limit, HL_SCSI_SCRATCH_DEFAULT);
}

#define RACERS 4
#define ROUNDS 100000
#define PIECE  7

static unsigned racer_ok[RACERS], racer_no[RACERS], racer_over;

static void *racer(void *arg)
{
	unsigned i = (unsigned)(uintptr_t)arg;

	for (int n = 0; n < ROUNDS; n++) {
		if (!scsi_scratch_take(PIECE)) {
			racer_no[i]++;
			continue;
		}
		racer_ok[i]++;
		if (stats().used > 3 * PIECE)
			__atomic_fetch_add(&racer_over, 1, __ATOMIC_RELAXED);
		scsi_scratch_give(PIECE);
	}
	return NULL;
}

/* Four threads for a budget of three pieces: never more held, every refusal counted. */
static void test_threads(void)
{
	pthread_t th[RACERS];
	struct hl_scsi_scratch_stats s0 = stats();
	unsigned ok = 0, no = 0;

	hl_scsi_scratch_set_limit(3 * PIECE);
	for (unsigned i = 0; i < RACERS; i++)
		CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, racer, (void *)(uintptr_t)i), 0);
	for (unsigned i = 0; i < RACERS; i++) {
		pthread_join(th[i], NULL);
		ok += racer_ok[i];
		no += racer_no[i];
	}
	struct hl_scsi_scratch_stats s = stats();
	CU_ASSERT_EQUAL(racer_over, 0);
	CU_ASSERT_EQUAL(ok + no, RACERS * ROUNDS);
	CU_ASSERT_EQUAL(s.refused - s0.refused, no);
	CU_ASSERT_EQUAL(s.used, 0);
	hl_scsi_scratch_set_limit(0);
}

static void verify16(uint8_t *cdb, uint64_t lba, uint32_t n)
{
	cdb_rw16(cdb, 0x8f, lba, n); /* BYTCHK 0: the range is read into a bounce buffer */
}

/*
 * A budget of 3 MiB: three VERIFYs of 1 MiB each hold it; a fourth VERIFY
 * and a COMPARE AND WRITE (emulated: its read goes to a bounce buffer) are
 * answered BUSY at once, with no sense and nothing sent to the origin.
 * Once the three end, both run and end GOOD, and the budget is back at 0.
 */
static void test_busy_then_good(void)
{
	struct tcmd v[4], c;
	uint8_t cdb[16], ccdb[16];
	uint8_t cawdata[2 * 8 * BS];
	struct hl_scsi_scratch_stats s0 = stats();

	lu_setup();
	hl_scsi_scratch_set_limit(3 * MIB);
	for (int i = 0; i < 3; i++) {
		verify16(cdb, (uint64_t)i * (MIB / BS), MIB / BS);
		start(&v[i], cdb, 16, NULL, 0, false);
		CU_ASSERT_EQUAL(v[i].done, 0);
	}
	CU_ASSERT_EQUAL(stats().used, 3 * MIB);
	unsigned queued = fake_of(origin)->n_queued;

	verify16(cdb, 3 * (MIB / BS), MIB / BS);
	start(&v[3], cdb, 16, NULL, 0, false);
	CU_ASSERT_EQUAL_FATAL(v[3].done, 1);
	CU_ASSERT_EQUAL(v[3].cmd.status, HL_SAM_BUSY);
	CU_ASSERT_EQUAL(v[3].cmd.sense_len, 0);

	memset(cawdata, 0, sizeof(cawdata)); /* compare zeroes with the zeroed medium */
	memset(cawdata + 8 * BS, 0xab, 8 * BS);
	cdb_caw(ccdb, 7000, 8);
	start(&c, ccdb, 16, cawdata, sizeof(cawdata), true);
	CU_ASSERT_EQUAL_FATAL(c.done, 1);
	CU_ASSERT_EQUAL(c.cmd.status, HL_SAM_BUSY);
	CU_ASSERT_EQUAL(c.cmd.sense_len, 0);
	CU_ASSERT_EQUAL(fake_of(origin)->n_queued, queued); /* nothing reached the origin */
	CU_ASSERT_EQUAL(stats().refused - s0.refused, 2);
	CU_ASSERT_EQUAL(medium()[7000 * BS], 0);

	fake_drain(origin);
	for (int i = 0; i < 3; i++) {
		CU_ASSERT_EQUAL(v[i].done, 1);
		ASSERT_GOOD(v[i]);
	}
	CU_ASSERT_EQUAL(stats().used, 0);

	/* the initiator retries: now they fit */
	verify16(cdb, 3 * (MIB / BS), MIB / BS);
	run(&v[3], cdb, 16, NULL, 0, false);
	ASSERT_GOOD(v[3]);
	run(&c, ccdb, 16, cawdata, sizeof(cawdata), true);
	ASSERT_GOOD(c);
	CU_ASSERT_EQUAL(medium()[7000 * BS], 0xab);
	CU_ASSERT_EQUAL(stats().used, 0);
	CU_ASSERT_EQUAL(stats().refused - s0.refused, 2);
	CU_ASSERT_TRUE(stats().peak >= 3 * MIB);
	hl_scsi_scratch_set_limit(0);
	lu_teardown();
}

/*
 * WRITE AND VERIFY reads back what it wrote into a bounce buffer. With the
 * budget spent it is answered BUSY before its write: the medium is
 * unchanged, as BUSY tells the initiator. Before, the buffer was taken
 * after the write, so BUSY came with the data written (and a retry loop
 * rewrote the range every time).
 */
static void test_write_verify_busy_before_write(void)
{
	struct tcmd v, w;
	uint8_t cdb[16], wcdb[16];
	uint8_t data[8 * BS];

	lu_setup();
	hl_scsi_scratch_set_limit(MIB);
	verify16(cdb, 0, MIB / BS);
	start(&v, cdb, 16, NULL, 0, false);
	CU_ASSERT_EQUAL(v.done, 0);
	CU_ASSERT_EQUAL(stats().used, MIB);
	unsigned queued = fake_of(origin)->n_queued;

	memset(data, 0xcd, sizeof(data));
	cdb_rw16(wcdb, 0x8e, 5000, 8); /* WRITE AND VERIFY(16), BYTCHK 0 */
	start(&w, wcdb, 16, data, sizeof(data), true);
	CU_ASSERT_EQUAL_FATAL(w.done, 1);
	CU_ASSERT_EQUAL(w.cmd.status, HL_SAM_BUSY);
	CU_ASSERT_EQUAL(fake_of(origin)->n_queued, queued); /* nothing reached the origin */
	fake_drain(origin);
	CU_ASSERT_EQUAL(medium()[5000 * BS], 0); /* ... and nothing was written */
	ASSERT_GOOD(v);

	/* the retry fits: written and verified */
	run(&w, wcdb, 16, data, sizeof(data), true);
	ASSERT_GOOD(w);
	CU_ASSERT_EQUAL(medium()[5000 * BS], 0xcd);
	CU_ASSERT_EQUAL(stats().used, 0);
	hl_scsi_scratch_set_limit(0);
	lu_teardown();
}

static const struct hl_test tests[] = {
    {"scratch budget: exact accounting up to the limit", test_accounting},
    {"scratch budget: never past the limit from four threads", test_threads},
    {"VERIFY and COMPARE AND WRITE: BUSY while spent, GOOD once freed", test_busy_then_good},
    {"WRITE AND VERIFY: BUSY before its write, never after", test_write_verify_busy_before_write},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("scsi_scratch", tests);
}
