/*
 * trace_ut.c - unit tests of the trace readers: vscsi v1 and v2 records,
 * MSR Cambridge CSV, block lists, format detection, bad input, and (when the
 * shared copy is present) the real CloudPhysics trace.
 */
#include "bench/bench_internal.h"
#include "hl_test.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char err[256];

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void v1_rec(uint8_t *r, uint16_t op, uint32_t len, uint64_t lba)
{
	memset(r, 0, 32);
	put32(r + 0, 1);
	put32(r + 4, len);
	put32(r + 8, 1);
	put16(r + 12, op);
	put16(r + 14, 0x0100);
	put64(r + 16, lba);
	put64(r + 24, 123456);
}

static void v2_rec(uint8_t *r, uint16_t op, uint32_t len, uint64_t lba)
{
	memset(r, 0, 40);
	put16(r + 0, op);
	put16(r + 2, 0x0200);
	put32(r + 4, 1);
	put32(r + 8, len);
	put32(r + 12, 1);
	put64(r + 16, lba);
	put64(r + 24, 123456);
	put64(r + 32, 99);
}

static void test_vscsi_v1(void)
{
	uint8_t buf[32 * 4];
	struct bench_trace t = {0};

	v1_rec(buf, 0x28, 4096, 100);
	v1_rec(buf + 32, 0x2a, 65536, 8);
	v1_rec(buf + 64, 0x12, 36, 0); /* INQUIRY: skipped */
	v1_rec(buf + 96, 0x88, 512, 1ULL << 33);
	CU_ASSERT_EQUAL(bench_trace_detect(buf, sizeof(buf)), BENCH_TRACE_VSCSI);
	CU_ASSERT_FATAL(
	    bench_trace_parse(buf, sizeof(buf), BENCH_TRACE_AUTO, 0, &t, err, sizeof(err)) == 0);
	CU_ASSERT_EQUAL(t.n, 3);
	CU_ASSERT_EQUAL(t.skipped, 1);
	CU_ASSERT(t.recs[0].offset == 100 * 512 && t.recs[0].len == 4096 && !t.recs[0].write);
	CU_ASSERT(t.recs[1].offset == 8 * 512 && t.recs[1].len == 65536 && t.recs[1].write);
	CU_ASSERT(t.recs[2].offset == (1ULL << 33) * 512);
	CU_ASSERT_EQUAL(t.reads, 2);
	CU_ASSERT_EQUAL(t.writes, 1);
	bench_trace_free(&t);
}

static void test_vscsi_v2(void)
{
	uint8_t buf[40 * 3 + 7]; /* and a torn tail */
	struct bench_trace t = {0};

	memset(buf, 0, sizeof(buf));
	v2_rec(buf, 0x2a, 8192, 16);
	v2_rec(buf + 40, 0x28, 4096, 32);
	v2_rec(buf + 80, 0x8a, 4096, 48);
	CU_ASSERT_EQUAL(bench_trace_detect(buf, sizeof(buf)), BENCH_TRACE_VSCSI);
	CU_ASSERT_FATAL(
	    bench_trace_parse(buf, sizeof(buf), BENCH_TRACE_VSCSI, 0, &t, err, sizeof(err)) == 0);
	CU_ASSERT_EQUAL(t.n, 3);
	CU_ASSERT(t.recs[0].write && t.recs[0].offset == 16 * 512 && t.recs[0].len == 8192);
	CU_ASSERT(!t.recs[1].write && t.recs[1].offset == 32 * 512);
	CU_ASSERT(t.recs[2].write);
	CU_ASSERT_EQUAL(t.skipped, 1);
	bench_trace_free(&t);
}

static void test_vscsi_bad_version_midway(void)
{
	uint8_t buf[32 * 6];
	struct bench_trace t = {0};

	for (int i = 0; i < 6; i++)
		v1_rec(buf + 32 * i, 0x28, 512, (uint64_t)i);
	put16(buf + 32 * 5 + 14, 0x0700);
	CU_ASSERT(bench_trace_parse(buf, sizeof(buf), BENCH_TRACE_VSCSI, 0, &t, err, sizeof(err)) ==
	          -EINVAL);
	CU_ASSERT(strstr(err, "record 5") != NULL);
	bench_trace_free(&t);
}

static void test_msr(void)
{
	const char *csv = "Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n"
	                  "128166372003061629,hm,1,Read,3154152448,4096,1119\r\n"
	                  "128166372016382155,hm,1,Write,3154152448,8192,62796\n"
	                  "\n"
	                  "128166372026382245,hm,1,read,0,0,1\n";
	struct bench_trace t = {0};

	CU_ASSERT_EQUAL(bench_trace_detect(csv, strlen(csv)), BENCH_TRACE_MSR);
	CU_ASSERT_FATAL(
	    bench_trace_parse(csv, strlen(csv), BENCH_TRACE_AUTO, 0, &t, err, sizeof(err)) == 0);
	CU_ASSERT_EQUAL(t.n, 2);
	CU_ASSERT_EQUAL(t.skipped, 1); /* size 0 */
	CU_ASSERT(t.recs[0].offset == 3154152448ULL && t.recs[0].len == 4096 && !t.recs[0].write);
	CU_ASSERT(t.recs[1].len == 8192 && t.recs[1].write);
	bench_trace_free(&t);
}

static void test_msr_errors_name_the_line(void)
{
	const char *csv = "128166372003061629,hm,1,Read,3154152448,4096,1119\n"
	                  "128166372003061630,hm,1,Trim,3154152448,4096,1119\n";
	const char *csv2 = "128166372003061629,hm,1,Read,31x,4096,1119\n";
	const char *csv3 = "1,hm,1,Read\n";
	struct bench_trace t = {0};

	CU_ASSERT(bench_trace_parse(csv, strlen(csv), BENCH_TRACE_MSR, 0, &t, err, sizeof(err)) ==
	          -EINVAL);
	CU_ASSERT(strstr(err, "line 2") != NULL);
	bench_trace_free(&t);
	CU_ASSERT(bench_trace_parse(csv2, strlen(csv2), BENCH_TRACE_MSR, 0, &t, err, sizeof(err)) ==
	          -EINVAL);
	CU_ASSERT(strstr(err, "offset") != NULL);
	bench_trace_free(&t);
	CU_ASSERT(bench_trace_parse(csv3, strlen(csv3), BENCH_TRACE_MSR, 0, &t, err, sizeof(err)) ==
	          -EINVAL);
	bench_trace_free(&t);
}

static void test_blocks(void)
{
	const char *txt = "# hot blocks\n12\n  7 \n\n0\n";
	struct bench_trace t = {0};

	CU_ASSERT_EQUAL(bench_trace_detect(txt, strlen(txt)), BENCH_TRACE_BLOCKS);
	CU_ASSERT_FATAL(
	    bench_trace_parse(txt, strlen(txt), BENCH_TRACE_AUTO, 4096, &t, err, sizeof(err)) == 0);
	CU_ASSERT_EQUAL(t.n, 3);
	CU_ASSERT(t.recs[0].offset == 12 * 4096 && t.recs[0].len == 4096);
	CU_ASSERT(t.recs[1].offset == 7 * 4096 && t.recs[2].offset == 0);
	CU_ASSERT_EQUAL(t.max_end, 13 * 4096);
	bench_trace_free(&t);

	const char *bad = "12\n13x\n";
	CU_ASSERT(bench_trace_parse(bad, strlen(bad), BENCH_TRACE_BLOCKS, 4096, &t, err,
	                            sizeof(err)) == -EINVAL);
	CU_ASSERT(strstr(err, "line 2") != NULL);
	bench_trace_free(&t);
}

static void test_unknown_format(void)
{
	const char *junk = "hello world\n";
	struct bench_trace t = {0};

	CU_ASSERT_EQUAL(bench_trace_detect(junk, strlen(junk)), BENCH_TRACE_AUTO);
	CU_ASSERT(bench_trace_parse(junk, strlen(junk), BENCH_TRACE_AUTO, 512, &t, err,
	                            sizeof(err)) == -EINVAL);
	bench_trace_free(&t);
	enum bench_trace_fmt f;
	CU_ASSERT(bench_trace_fmt_parse("msr", &f) == 0 && f == BENCH_TRACE_MSR);
	CU_ASSERT(bench_trace_fmt_parse("xyz", &f) == -EINVAL);
}

static void test_load_missing_file(void)
{
	struct bench_trace t = {0};

	CU_ASSERT(bench_trace_load("/nonexistent/trace", BENCH_TRACE_AUTO, 512, &t, err,
	                           sizeof(err)) == -ENOENT);
	CU_ASSERT(strstr(err, "/nonexistent/trace") != NULL);
	bench_trace_free(&t);
}

static void test_real_cloudphysics_trace(void)
{
	const char *path = "/work/shared/traces/cloudPhysicsIO.vscsi";
	struct bench_trace t = {0};

	if (access(path, R_OK) != 0) {
		fprintf(stderr, "(%s not present: skipped)\n", path);
		return;
	}
	CU_ASSERT_FATAL(bench_trace_load(path, BENCH_TRACE_AUTO, 512, &t, err, sizeof(err)) == 0);
	CU_ASSERT_EQUAL(t.fmt, BENCH_TRACE_VSCSI);
	/* counts published with the trace */
	CU_ASSERT_EQUAL(t.reads, 46974);
	CU_ASSERT_EQUAL(t.writes, 66898);
	CU_ASSERT(t.max_end < 40ULL << 30);
	bench_trace_free(&t);
}

static const struct hl_test tests[] = {
    {"vscsi v1 records", test_vscsi_v1},
    {"vscsi v2 records and a torn tail", test_vscsi_v2},
    {"vscsi bad version is refused with its record", test_vscsi_bad_version_midway},
    {"MSR CSV with header and CRLF", test_msr},
    {"MSR errors name the line", test_msr_errors_name_the_line},
    {"block list with comments", test_blocks},
    {"unknown format is refused", test_unknown_format},
    {"missing file names the path", test_load_missing_file},
    {"the CloudPhysics trace has its published counts", test_real_cloudphysics_trace},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("bench_trace", tests);
}
