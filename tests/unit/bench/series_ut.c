/*
 * series_ut.c - unit tests of the per-second CSV (write, read back, columns
 * by name, bad input) and of the SVG chart (structure, escaping, runs).
 */
#include "bench/bench_internal.h"
#include "hl_test.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char err[256];

static void tmpname(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "/tmp/series_ut.%d.%s", (int)getpid(), name);
}

static void test_csv_roundtrip(void)
{
	char path[256];
	struct bench_series se;
	struct bench_sample s1 = {.t = 1.0,
	                          .phase = 'w',
	                          .iops = 1234.5,
	                          .mbps = 5.056,
	                          .read_iops = 1000,
	                          .write_iops = 234.5,
	                          .p50_us = 812.3,
	                          .p99_us = 4000,
	                          .p999_us = 9000.5,
	                          .max_us = 12000,
	                          .errors = 2};
	struct bench_sample s2 = s1;

	s2.t = 2.0;
	s2.phase = 'm';
	s2.iops = 99999;
	tmpname(path, sizeof(path), "rt.csv");
	FILE *f = fopen(path, "w");
	CU_ASSERT_FATAL(f != NULL);
	CU_ASSERT(bench_csv_write_header(f, "cold cache", "url=x workload=uniform") == 0);
	CU_ASSERT(bench_csv_write_row(f, &s1) == 0);
	CU_ASSERT(bench_csv_write_row(f, &s2) == 0);
	fclose(f);

	CU_ASSERT_FATAL(bench_csv_read(path, &se, err, sizeof(err)) == 0);
	CU_ASSERT_STRING_EQUAL(se.label, "cold cache");
	CU_ASSERT_FATAL(se.n == 2);
	CU_ASSERT(se.s[0].phase == 'w' && se.s[1].phase == 'm');
	CU_ASSERT_DOUBLE_EQUAL(se.s[0].iops, 1234.5, 0.05);
	CU_ASSERT_DOUBLE_EQUAL(se.s[0].mbps, 5.056, 0.0005);
	CU_ASSERT_DOUBLE_EQUAL(se.s[0].p999_us, 9000.5, 0.05);
	CU_ASSERT_EQUAL(se.s[0].errors, 2);
	CU_ASSERT_DOUBLE_EQUAL(se.s[1].iops, 99999, 0.05);
	bench_series_free(&se);
	unlink(path);
}

static void test_csv_columns_by_name(void)
{
	char path[256];
	struct bench_series se;

	tmpname(path, sizeof(path), "run7.csv");
	FILE *f = fopen(path, "w");
	CU_ASSERT_FATAL(f != NULL);
	fprintf(f, "p99_us,extra,iops,t_s\n100,zz,5000,1\n200,zz,6000,2.5\n");
	fclose(f);
	CU_ASSERT_FATAL(bench_csv_read(path, &se, err, sizeof(err)) == 0);
	CU_ASSERT(strstr(se.label, "run7") != NULL && strstr(se.label, ".csv") == NULL);
	CU_ASSERT_FATAL(se.n == 2);
	CU_ASSERT_DOUBLE_EQUAL(se.s[1].t, 2.5, 1e-9);
	CU_ASSERT_DOUBLE_EQUAL(se.s[1].iops, 6000, 1e-9);
	CU_ASSERT_DOUBLE_EQUAL(se.s[1].p99_us, 200, 1e-9);
	CU_ASSERT(se.s[0].phase == 'm');
	bench_series_free(&se);
	unlink(path);
}

static void test_csv_bad_input(void)
{
	char path[256];
	struct bench_series se;

	tmpname(path, sizeof(path), "bad.csv");
	FILE *f = fopen(path, "w");
	CU_ASSERT_FATAL(f != NULL);
	fprintf(f, "t_s,iops\n1,100\n2,abc\n");
	fclose(f);
	CU_ASSERT(bench_csv_read(path, &se, err, sizeof(err)) == -EINVAL);
	CU_ASSERT(strstr(err, ":3:") != NULL);

	f = fopen(path, "w");
	fprintf(f, "a,b,c\n1,2,3\n");
	fclose(f);
	CU_ASSERT(bench_csv_read(path, &se, err, sizeof(err)) == -EINVAL);
	unlink(path);
	CU_ASSERT(bench_csv_read(path, &se, err, sizeof(err)) == -ENOENT);
}

static size_t count(const char *hay, const char *needle)
{
	size_t n = 0;
	for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
		n++;
	return n;
}

static void make_run(struct bench_series *se, const char *label, double scale, int warm)
{
	memset(se, 0, sizeof(*se));
	snprintf(se->label, sizeof(se->label), "%s", label);
	for (int i = 1; i <= 30; i++) {
		struct bench_sample s = {.t = i, .phase = i <= warm ? 'w' : 'm'};
		s.iops = scale * (200 + 300 * i);
		s.p50_us = 5000.0 / i;
		s.p99_us = 20000.0 / i;
		CU_ASSERT_FATAL(bench_series_append(se, &s) == 0);
	}
}

static void test_svg_two_runs(void)
{
	struct bench_series runs[2];
	char *buf = NULL;
	size_t len = 0;

	make_run(&runs[0], "hotlund <warm> & co", 1, 5);
	make_run(&runs[1], "tgt", 0.5, 0);
	FILE *f = open_memstream(&buf, &len);
	CU_ASSERT_FATAL(f != NULL);
	CU_ASSERT(bench_svg_write(f, runs, 2, "cache \"warming\"") == 0);
	fclose(f);
	CU_ASSERT(strncmp(buf, "<?xml", 5) == 0);
	CU_ASSERT(strstr(buf, "<svg xmlns=\"http://www.w3.org/2000/svg\"") != NULL);
	CU_ASSERT(strstr(buf, "</svg>\n") == buf + len - 7);
	CU_ASSERT(strstr(buf, "hotlund &lt;warm&gt; &amp; co") != NULL);
	CU_ASSERT(strstr(buf, "cache &quot;warming&quot;") != NULL);
	CU_ASSERT(strstr(buf, "<warm>") == NULL);
	/* IOPS, p50 and p99 for each run */
	CU_ASSERT_EQUAL(count(buf, "<polyline"), 6);
	CU_ASSERT(count(buf, "stroke-dasharray") == 2);
	CU_ASSERT(strstr(buf, "warm-up") != NULL);
	CU_ASSERT(strstr(buf, "#1f77b4") && strstr(buf, "#d62728"));
	/* no external references */
	CU_ASSERT(strstr(buf, "href") == NULL && strstr(buf, "<script") == NULL);
	/* every element that opens closes */
	CU_ASSERT_EQUAL(count(buf, "<text"), count(buf, "</text>"));
	free(buf);
	bench_series_free(&runs[0]);
	bench_series_free(&runs[1]);
}

static void test_svg_iops_log_scale_when_runs_differ_100x(void)
{
	struct bench_series runs[2];
	char *buf = NULL;
	size_t len = 0;

	make_run(&runs[0], "origin", 1, 0);
	make_run(&runs[1], "cache", 0.001, 0); /* 0.2 .. 9.2 IOPS against 500 .. 9200 */
	FILE *f = open_memstream(&buf, &len);
	CU_ASSERT_FATAL(f != NULL);
	CU_ASSERT(bench_svg_write(f, runs, 2, "t") == 0);
	fclose(f);
	CU_ASSERT(strstr(buf, "IOPS (log scale)") != NULL);
	CU_ASSERT(strstr(buf, ">10k<") != NULL && strstr(buf, ">0.1<") != NULL);
	free(buf);

	/* the two runs of test_svg_two_runs differ by 2x: linear */
	runs[1].s[0].iops = 1000;
	for (size_t i = 0; i < runs[1].n; i++)
		runs[1].s[i].iops = runs[0].s[i].iops / 2;
	f = open_memstream(&buf, &len);
	CU_ASSERT(bench_svg_write(f, runs, 2, "t") == 0);
	fclose(f);
	CU_ASSERT(strstr(buf, "IOPS (log scale)") == NULL);
	free(buf);
	bench_series_free(&runs[0]);
	bench_series_free(&runs[1]);
}

static void test_svg_empty_and_single_point(void)
{
	struct bench_series se = {.label = "one"};
	struct bench_sample s = {.t = 0.5, .phase = 'm', .iops = 10, .p50_us = 100, .p99_us = 200};
	char *buf = NULL;
	size_t len = 0;

	FILE *f = open_memstream(&buf, &len);
	CU_ASSERT(bench_svg_write(f, &se, 1, NULL) == 0); /* no samples: still a valid picture */
	fclose(f);
	CU_ASSERT(strstr(buf, "</svg>") != NULL);
	CU_ASSERT(strstr(buf, "nan") == NULL && strstr(buf, "inf") == NULL);
	free(buf);

	CU_ASSERT(bench_series_append(&se, &s) == 0);
	f = open_memstream(&buf, &len);
	CU_ASSERT(bench_svg_write(f, &se, 1, "x") == 0);
	fclose(f);
	CU_ASSERT(strstr(buf, "<circle") != NULL);
	CU_ASSERT(strstr(buf, "nan") == NULL);
	free(buf);
	bench_series_free(&se);
}

static void test_svg_file_is_atomic(void)
{
	char path[256];
	struct bench_series se;

	make_run(&se, "a", 1, 0);
	tmpname(path, sizeof(path), "out.svg");
	CU_ASSERT(bench_svg_write_file(path, &se, 1, "t") == 0);
	CU_ASSERT(access(path, R_OK) == 0);
	char tmp[300];
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	CU_ASSERT(access(tmp, F_OK) != 0);
	unlink(path);
	CU_ASSERT(bench_svg_write_file("/nonexistent/dir/x.svg", &se, 1, "t") == -ENOENT);
	bench_series_free(&se);
}

static const struct hl_test tests[] = {
    {"CSV written and read back", test_csv_roundtrip},
    {"CSV columns are found by name", test_csv_columns_by_name},
    {"bad CSV is refused with its line", test_csv_bad_input},
    {"SVG of two runs: structure and escaping", test_svg_two_runs},
    {"SVG IOPS axis goes logarithmic for 100x apart runs",
     test_svg_iops_log_scale_when_runs_differ_100x},
    {"SVG with no samples or one sample", test_svg_empty_and_single_point},
    {"SVG file written via rename", test_svg_file_is_atomic},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("bench_series", tests);
}
