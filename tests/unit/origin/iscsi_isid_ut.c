/*
 * iscsi_isid_ut.c - the iscsi origin's stable ISIDs (src/origin/iscsi_isid.c):
 * derived the same at every start (a fixed value: a change here is a
 * restart that fences nothing after an upgrade), distinct per session, per
 * gateway, per disk and per slot; and the slot files that keep two live
 * instances off one ISID and tell an open what a dead one left to sweep.
 */
#include "config.h"

#include "hl_test.h"
#include "origin/iscsi_isid.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>

#define TGT "iqn.2026-11.io.hotlun:san"
/* what this version derives for ("db", TGT, LUN 0, gateway 1) */
#define ISID_UT_IDENT 0xf79ed921137b983full
#define ISID_UT_BASE0 0x1bcf38u

static void test_stable(void)
{
	uint64_t id = origin_iscsi_isid_ident("db", TGT, 0, 1);

	CU_ASSERT_EQUAL(id, origin_iscsi_isid_ident("db", TGT, 0, 1));
	/* IQNs compare without case at the SAN: one target, one identity */
	CU_ASSERT_EQUAL(id, origin_iscsi_isid_ident("db", "IQN.2026-11.io.HOTLUN:san", 0, 1));
	CU_ASSERT_EQUAL(origin_iscsi_isid_base(id, 0), origin_iscsi_isid_base(id, 0));
	/* fixed across builds and versions: the next run must find the same ISIDs */
	CU_ASSERT_EQUAL(id, ISID_UT_IDENT);
	CU_ASSERT_EQUAL(origin_iscsi_isid_base(id, 0), ISID_UT_BASE0);
	CU_ASSERT(origin_iscsi_isid_base(id, 0) <= 0xffffff);
}

static void test_sessions(void)
{
	uint8_t a[6], b[6];
	uint32_t base = origin_iscsi_isid_base(origin_iscsi_isid_ident("db", TGT, 0, 1), 0);

	origin_iscsi_isid_bytes(base, ISC_QUAL_CTL, a);
	CU_ASSERT_EQUAL(a[0], 0x80); /* type 10b: random */
	CU_ASSERT_EQUAL(((unsigned)a[1] << 16 | (unsigned)a[2] << 8 | a[3]), base);
	/* the ownership session, data sessions 1..N and the poll: one nexus each */
	for (unsigned q = 0; q <= 256; q++) {
		origin_iscsi_isid_bytes(base, (uint16_t)q, a);
		origin_iscsi_isid_bytes(base, ISC_QUAL_UA, b);
		CU_ASSERT_NOT_EQUAL(memcmp(a, b, 6), 0);
		origin_iscsi_isid_bytes(base, (uint16_t)(q + 1), b);
		CU_ASSERT_NOT_EQUAL(memcmp(a, b, 6), 0);
	}
}

static void test_distinct(void)
{
	uint64_t id = origin_iscsi_isid_ident("db", TGT, 0, 1);
	uint64_t other[] = {
	    origin_iscsi_isid_ident("db", TGT, 0, 2),  /* the other gateway of the pair */
	    origin_iscsi_isid_ident("db", TGT, 0, 0),  /* a lone gateway */
	    origin_iscsi_isid_ident("db2", TGT, 0, 1), /* another disk, same LUN */
	    origin_iscsi_isid_ident("db", TGT, 1, 1),  /* another LUN */
	    origin_iscsi_isid_ident("db", TGT "2", 0, 1),
	    origin_iscsi_isid_ident("d", "b" TGT, 0, 1), /* fields do not run into each other */
	};
	uint32_t bases[ISC_ISID_SLOTS];

	for (unsigned i = 0; i < sizeof(other) / sizeof(other[0]); i++) {
		CU_ASSERT_NOT_EQUAL(other[i], id);
		CU_ASSERT_NOT_EQUAL(origin_iscsi_isid_base(other[i], 0),
		                    origin_iscsi_isid_base(id, 0));
	}
	for (unsigned k = 0; k < ISC_ISID_SLOTS; k++) {
		bases[k] = origin_iscsi_isid_base(id, k);
		for (unsigned j = 0; j < k; j++)
			CU_ASSERT_NOT_EQUAL(bases[j], bases[k]);
	}
}

static char dir[64];

/* iscsi_isid.c's ISC_ISID_AHEAD: records are written this many data qualifiers ahead */
#define AHEAD 8u

static unsigned record(uint64_t id, unsigned k)
{
	char path[256], buf[16] = "";
	FILE *f;

	snprintf(path, sizeof(path), "%s/iscsi-isid-%016llx.%u", dir, (unsigned long long)id, k);
	f = fopen(path, "r");
	if (!f)
		return 999;
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = '\0';
	fclose(f);
	return (unsigned)strtoul(buf, NULL, 10);
}

static void release_all(struct isc_isid *st)
{
	for (unsigned k = 0; k < ISC_ISID_SLOTS; k++)
		origin_iscsi_isid_release(st, k, false);
}

static void test_slots(void)
{
	uint64_t id = origin_iscsi_isid_ident("db", TGT, 0, 1);
	struct isc_isid a, b, c, more[ISC_ISID_SLOTS];

	snprintf(dir, sizeof(dir), "/tmp/isid_ut.XXXXXX");
	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));

	/* the first instance takes slot 0, nothing to sweep, "in use" recorded, ahead */
	CU_ASSERT_EQUAL_FATAL(origin_iscsi_isid_claim(&a, dir, id), 0);
	CU_ASSERT_EQUAL(a.slot, 0);
	for (unsigned k = 0; k < ISC_ISID_SLOTS; k++)
		CU_ASSERT_EQUAL(a.used[k], 0);
	CU_ASSERT_EQUAL(record(id, 0), 1 + AHEAD);
	for (unsigned k = 1; k < ISC_ISID_SLOTS; k++)
		origin_iscsi_isid_swept(&a, k); /* what open does with free, clean slots */
	/* the first AHEAD data sessions write nothing (no fdatasync on their reactor) */
	struct stat st0, st1;
	char rec0[300];
	snprintf(rec0, sizeof(rec0), "%s/iscsi-isid-%016llx.0", dir, (unsigned long long)id);
	CU_ASSERT_EQUAL(stat(rec0, &st0), 0);
	origin_iscsi_isid_note(&a, 1);
	origin_iscsi_isid_note(&a, 3);
	origin_iscsi_isid_note(&a, 2);
	origin_iscsi_isid_note(&a, AHEAD);
	CU_ASSERT_EQUAL(stat(rec0, &st1), 0);
	CU_ASSERT_EQUAL(record(id, 0), 1 + AHEAD);
	CU_ASSERT(st1.st_mtim.tv_sec == st0.st_mtim.tv_sec &&
	          st1.st_mtim.tv_nsec == st0.st_mtim.tv_nsec);
	/* one past them: AHEAD more at once */
	origin_iscsi_isid_note(&a, AHEAD + 1);
	CU_ASSERT_EQUAL(record(id, 0), 2 + 2 * AHEAD);
	origin_iscsi_isid_note(&a, AHEAD + 2);
	CU_ASSERT_EQUAL(record(id, 0), 2 + 2 * AHEAD);
	origin_iscsi_isid_note(&a, 3); /* 1 + the highest data qualifier, at least */

	/* a second live instance (a reload's new origin): never slot 0, nor sweeps it */
	CU_ASSERT_EQUAL_FATAL(origin_iscsi_isid_claim(&b, dir, id), 0);
	CU_ASSERT_EQUAL(b.slot, 1);
	CU_ASSERT_EQUAL(b.fd[0], -1);
	CU_ASSERT_EQUAL(record(id, 0), 2 + 2 * AHEAD);
	release_all(&b);

	/* a dies (no clean close): the next instance gets slot 0 and its record to sweep */
	release_all(&a);
	CU_ASSERT_EQUAL_FATAL(origin_iscsi_isid_claim(&c, dir, id), 0);
	CU_ASSERT_EQUAL(c.slot, 0);
	CU_ASSERT_EQUAL(c.used[0], 2 + 2 * AHEAD);
	CU_ASSERT_EQUAL(record(id, 0), 2 + 2 * AHEAD); /* kept until swept */
	origin_iscsi_isid_swept(&c, 0);
	CU_ASSERT_EQUAL(record(id, 0), 1 + AHEAD);
	CU_ASSERT_EQUAL(c.slot, 0);
	/* a clean close: nothing to sweep next time */
	origin_iscsi_isid_release(&c, 0, true);
	CU_ASSERT_EQUAL(record(id, 0), 0);
	release_all(&c);

	/* every slot held live: refused, and nothing is left locked */
	for (unsigned k = 0; k < ISC_ISID_SLOTS; k++) {
		CU_ASSERT_EQUAL_FATAL(origin_iscsi_isid_claim(&more[k], dir, id), 0);
		CU_ASSERT_EQUAL(more[k].slot, (int)k);
		for (unsigned j = k + 1; j < ISC_ISID_SLOTS; j++)
			origin_iscsi_isid_swept(&more[k], j); /* the end of its open's sweep */
	}
	CU_ASSERT_EQUAL(origin_iscsi_isid_claim(&a, dir, id), -EBUSY);
	CU_ASSERT_EQUAL(a.slot, -1);
	for (unsigned k = 0; k < ISC_ISID_SLOTS; k++) {
		CU_ASSERT_EQUAL(a.fd[k], -1);
		release_all(&more[k]);
	}
	/* another gateway's identity has slots of its own */
	CU_ASSERT_EQUAL_FATAL(
	    origin_iscsi_isid_claim(&b, dir, origin_iscsi_isid_ident("db", TGT, 0, 2)), 0);
	CU_ASSERT_EQUAL(b.slot, 0);
	release_all(&b);
	/* no state_dir to write in: an error, not a crash */
	CU_ASSERT(origin_iscsi_isid_claim(&a, "/nonexistent/dir", id) < 0);

	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CU_ASSERT_EQUAL(system(cmd), 0);
}

/* Put `text` (len bytes) in slot k's record file, as a crash may leave it. */
static void record_put(uint64_t id, unsigned k, const char *text, size_t len)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/iscsi-isid-%016llx.%u", dir, (unsigned long long)id, k);
	f = fopen(path, "w");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	CU_ASSERT_EQUAL(fwrite(text, 1, len, f), len);
	fclose(f);
}

/*
 * A record cut short or garbled (a crash or a full disk in the middle of
 * its write) must not read as "closed cleanly": the next open sweeps every
 * qualifier a run can use. The old writer truncated first and read a cut
 * record as 0: nothing swept, the dead run's commands left unfenced.
 * A file never written (its holder died before any login) is clean.
 */
static void test_torn_record(void)
{
	uint64_t id = origin_iscsi_isid_ident("torn", TGT, 0, 1);
	struct isc_isid a;

	snprintf(dir, sizeof(dir), "/tmp/isid_ut.XXXXXX");
	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
	static const struct {
		const char *text;
		unsigned used;
	} cases[] = {
	    {"00000000", ISC_ISID_USED_MAX},     /* cut before its last digits */
	    {"0000000004", ISC_ISID_USED_MAX},   /* no newline: cut */
	    {"00000x0004\n", ISC_ISID_USED_MAX}, /* garbled */
	    {"", 0},                             /* never written */
	    {"0000000004\n", 4},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		record_put(id, 0, cases[i].text, strlen(cases[i].text));
		CU_ASSERT_EQUAL_FATAL(origin_iscsi_isid_claim(&a, dir, id), 0);
		CU_ASSERT_EQUAL(a.slot, 0);
		if (a.used[0] != cases[i].used)
			fprintf(stderr, "record \"%s\": read as %u, want %u\n", cases[i].text,
			        a.used[0], cases[i].used);
		CU_ASSERT_EQUAL(a.used[0], cases[i].used);
		/* kept (in use) until swept, whatever it read as */
		CU_ASSERT_EQUAL(record(id, 0), cases[i].used > 1 + AHEAD ? cases[i].used : 1 + AHEAD);
		release_all(&a);
	}

	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CU_ASSERT_EQUAL(system(cmd), 0);
}

/*
 * A sweep that failed at open is retried while the run's data sessions
 * already exist (they wait to log in): a retry that succeeds records what
 * this run noted, not "fresh". Before, it wrote 1, and those sessions,
 * logged in after it, were not fenced by the next open after a crash.
 */
static void test_swept_late_keeps_own_record(void)
{
	uint64_t id = origin_iscsi_isid_ident("late", TGT, 0, 1);
	struct isc_isid a, c;

	snprintf(dir, sizeof(dir), "/tmp/isid_ut.XXXXXX");
	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
	CU_ASSERT_EQUAL_FATAL(origin_iscsi_isid_claim(&a, dir, id), 0);
	origin_iscsi_isid_note(&a, 2 * AHEAD);
	release_all(&a); /* dies with 1 + 3 * AHEAD recorded */

	CU_ASSERT_EQUAL_FATAL(origin_iscsi_isid_claim(&c, dir, id), 0);
	CU_ASSERT_EQUAL(c.used[0], 1 + 3 * AHEAD);
	/* the sweep failed; sessions of this run were made meanwhile, up to 1 + AHEAD */
	origin_iscsi_isid_note(&c, 1);
	origin_iscsi_isid_note(&c, AHEAD + 1);
	CU_ASSERT_EQUAL(record(id, 0), 1 + 3 * AHEAD);
	origin_iscsi_isid_swept(&c, 0); /* the retry fenced the dead run's */
	CU_ASSERT_EQUAL(record(id, 0), AHEAD + 2);
	origin_iscsi_isid_note(&c, AHEAD + 2); /* one more after it: recorded as before */
	CU_ASSERT_EQUAL(record(id, 0), AHEAD + 3 + AHEAD);
	release_all(&c);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CU_ASSERT_EQUAL(system(cmd), 0);
}

static const struct hl_test tests[] = {
    {"the same ISIDs at every start", test_stable},
    {"one ISID per session", test_sessions},
    {"distinct per gateway, disk, LUN, target and slot", test_distinct},
    {"slots: live instances apart, a dead one's record swept", test_slots},
    {"a torn slot record sweeps every qualifier", test_torn_record},
    {"a late sweep keeps this run's own record", test_swept_late_keeps_own_record},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("origin_iscsi_isid", tests);
}
