/*
 * workload_ut.c - unit tests of the hotlun-bench workload generators and
 * their argument parsers: placement, alignment, skew, mixes, determinism.
 */
#include "bench/bench_internal.h"
#include "hl_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static char err[256];

static struct bench_workload_spec spec_of(const char *wl, const char *bs, double read)
{
	struct bench_workload_spec s;
	memset(&s, 0, sizeof(s));
	CU_ASSERT_FATAL(bench_workload_parse(wl, &s, err, sizeof(err)) == 0);
	CU_ASSERT_FATAL(bench_bs_parse(bs, &s, err, sizeof(err)) == 0);
	s.read_pct = read;
	return s;
}

static void test_parse_sizes(void)
{
	uint64_t v;
	CU_ASSERT(hl_parse_size("4K", &v) == 0 && v == 4096);
	CU_ASSERT(hl_parse_size("64KiB", &v) == 0 && v == 65536);
	CU_ASSERT(hl_parse_size("1g", &v) == 0 && v == 1ULL << 30);
	CU_ASSERT(hl_parse_size("512", &v) == 0 && v == 512);
	CU_ASSERT(hl_parse_size("", &v) != 0);
	CU_ASSERT(hl_parse_size("4X", &v) != 0);
	CU_ASSERT(hl_parse_size("K", &v) != 0);
	CU_ASSERT(hl_parse_size("99999999999999999999", &v) != 0);
	char b[32];
	CU_ASSERT_STRING_EQUAL(bench_format_size(65536, b, sizeof(b)), "64K");
	CU_ASSERT_STRING_EQUAL(bench_format_size(1536, b, sizeof(b)), "1536");
}

static void test_parse_bs(void)
{
	struct bench_workload_spec s;
	char b[64];

	memset(&s, 0, sizeof(s));
	CU_ASSERT(bench_bs_parse("4K", &s, err, sizeof(err)) == 0);
	CU_ASSERT(s.n_bs == 1 && s.bs[0].size == 4096);
	CU_ASSERT(bench_bs_parse("4K,64K", &s, err, sizeof(err)) == 0);
	CU_ASSERT(s.n_bs == 2 && s.bs[1].size == 65536 && s.bs[0].weight == s.bs[1].weight);
	CU_ASSERT(bench_bs_parse("4K:70,64K:30", &s, err, sizeof(err)) == 0);
	CU_ASSERT(s.bs[0].weight == 70 && s.bs[1].weight == 30);
	CU_ASSERT_STRING_EQUAL(bench_bs_format(&s, b, sizeof(b)), "4K:70,64K:30");
	CU_ASSERT(bench_bs_parse("4K:70,64K", &s, err, sizeof(err)) != 0);
	CU_ASSERT(bench_bs_parse("1000", &s, err, sizeof(err)) != 0);
	CU_ASSERT(bench_bs_parse("0", &s, err, sizeof(err)) != 0);
	CU_ASSERT(bench_bs_parse("", &s, err, sizeof(err)) != 0);
	CU_ASSERT(bench_bs_parse("4K:0", &s, err, sizeof(err)) != 0);
	CU_ASSERT(bench_bs_parse("32M", &s, err, sizeof(err)) != 0);
	CU_ASSERT(bench_bs_parse("4K,4K,4K,4K,4K,4K,4K,4K,4K", &s, err, sizeof(err)) != 0);
}

static void test_parse_workload(void)
{
	struct bench_workload_spec s;
	char b[64];

	memset(&s, 0, sizeof(s));
	CU_ASSERT(bench_workload_parse("zipf:0.9", &s, err, sizeof(err)) == 0);
	CU_ASSERT(s.kind == BENCH_WL_ZIPF && fabs(s.theta - 0.9) < 1e-12);
	CU_ASSERT_STRING_EQUAL(bench_workload_name(&s, b, sizeof(b)), "zipf:0.9");
	CU_ASSERT(bench_workload_parse("hotset:90/10", &s, err, sizeof(err)) == 0);
	CU_ASSERT(s.kind == BENCH_WL_HOTSET && s.hot_io_pct == 90 && s.hot_space_pct == 10);
	CU_ASSERT(bench_workload_parse("seq", &s, err, sizeof(err)) == 0 && s.kind == BENCH_WL_SEQ);
	CU_ASSERT(bench_workload_parse("uniform", &s, err, sizeof(err)) == 0);
	CU_ASSERT(bench_workload_parse("trace:msr:/x/y.csv", &s, err, sizeof(err)) == 0);
	CU_ASSERT(s.trace_fmt == BENCH_TRACE_MSR && strcmp(s.trace_path, "/x/y.csv") == 0);
	CU_ASSERT(bench_workload_parse("trace:/x/c:d.vscsi", &s, err, sizeof(err)) == 0);
	CU_ASSERT(s.trace_fmt == BENCH_TRACE_AUTO && strcmp(s.trace_path, "/x/c:d.vscsi") == 0);
	CU_ASSERT_STRING_EQUAL(bench_workload_name(&s, b, sizeof(b)), "trace:c:d.vscsi");

	const char *bad[] = {
	    "zipf:",         "zipf:-1",     "zipf:x", "hotset:90",  "hotset:90/100",
	    "hotset:101/10", "hotset:90/0", "trace:", "random-ish", ""};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CU_ASSERT(bench_workload_parse(bad[i], &s, err, sizeof(err)) == -EINVAL);
}

/* P(k) of zipf over 1..n is k^-s / H(n, s). */
static void check_zipf(uint64_t n, double s)
{
	struct bench_zipf z;
	struct bench_rng r;
	const int draws = 400000;
	uint64_t cnt[11] = {0};
	double norm = 0;

	CU_ASSERT_FATAL(bench_zipf_init(&z, n, s) == 0);
	bench_rng_seed(&r, 42);
	for (int i = 0; i < draws; i++) {
		uint64_t k = bench_zipf_next(&z, &r);
		CU_ASSERT_FATAL(k >= 1 && k <= n);
		cnt[k]++;
	}
	for (uint64_t k = 1; k <= n; k++)
		norm += pow((double)k, -s);
	for (uint64_t k = 1; k <= n; k++) {
		double want = pow((double)k, -s) / norm * draws;
		double tol = 5 * sqrt(want) + 0.01 * want;
		CU_ASSERT(fabs((double)cnt[k] - want) < tol);
		if (!(fabs((double)cnt[k] - want) < tol))
			fprintf(stderr, "zipf n=%llu s=%g k=%llu got %llu want %.0f\n",
			        (unsigned long long)n, s, (unsigned long long)k,
			        (unsigned long long)cnt[k], want);
	}
}

static void test_zipf_distribution(void)
{
	check_zipf(10, 0.9);
	check_zipf(10, 1.0);
	check_zipf(10, 1.5);
	check_zipf(10, 0.2);
	check_zipf(1, 0.9);
	struct bench_zipf z;
	CU_ASSERT(bench_zipf_init(&z, 10, 0) == -EINVAL);
	CU_ASSERT(bench_zipf_init(&z, 0, 1) == -EINVAL);
}

static void test_uniform_in_range_and_aligned(void)
{
	struct bench_workload_spec s = spec_of("uniform", "8K", 100);
	struct bench_workload wl;
	struct bench_rng r;
	struct bench_io io;
	uint8_t hit[64] = {0};

	CU_ASSERT_FATAL(
	    bench_workload_init(&wl, &s, 512, 1 << 20, 64 * 8192, NULL, err, sizeof(err)) == 0);
	bench_rng_seed(&r, 1);
	for (int i = 0; i < 5000; i++) {
		bench_workload_next(&wl, &r, &io);
		CU_ASSERT_FATAL(io.offset >= (1 << 20) &&
		                io.offset + io.len <= (1 << 20) + 64 * 8192);
		CU_ASSERT_FATAL(io.len == 8192 && io.offset % 8192 == 0 && !io.write);
		hit[(io.offset - (1 << 20)) / 8192] = 1;
	}
	for (int i = 0; i < 64; i++)
		CU_ASSERT(hit[i]);
}

static void test_scatter_is_a_bijection(void)
{
	struct bench_workload_spec s = spec_of("hotset:90/10", "4K", 100);
	struct bench_workload wl;
	const uint64_t n = 1000;
	uint8_t seen[1000] = {0};

	CU_ASSERT_FATAL(bench_workload_init(&wl, &s, 512, 0, n * 4096, NULL, err, sizeof(err)) ==
	                0);
	CU_ASSERT_EQUAL(wl.nunits, n);
	for (uint64_t rank = 0; rank < n; rank++) {
		uint64_t u = (rank * wl.perm_mul + wl.perm_add) % n;
		CU_ASSERT_FATAL(!seen[u]);
		seen[u] = 1;
	}
}

static int cmp_desc(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? 1 : x > y ? -1 : 0;
}

static void test_hotset_share(void)
{
	struct bench_workload_spec s = spec_of("hotset:90/10", "4K", 100);
	struct bench_workload wl;
	struct bench_rng r;
	struct bench_io io;
	static uint32_t cnt[1000];
	const int draws = 200000;

	memset(cnt, 0, sizeof(cnt));
	CU_ASSERT_FATAL(
	    bench_workload_init(&wl, &s, 4096, 0, 1000 * 4096, NULL, err, sizeof(err)) == 0);
	bench_rng_seed(&r, 5);
	for (int i = 0; i < draws; i++) {
		bench_workload_next(&wl, &r, &io);
		cnt[io.offset / 4096]++;
	}
	qsort(cnt, 1000, sizeof(cnt[0]), cmp_desc);
	uint64_t top = 0;
	for (int i = 0; i < 100; i++)
		top += cnt[i];
	double share = (double)top / draws;
	CU_ASSERT(share > 0.89 && share < 0.91);
	/* and the hot blocks are not simply the first 10 % of the LUN */
	CU_ASSERT(wl.perm_mul != 1);
}

static void test_zipf_skew_in_workload(void)
{
	struct bench_workload_spec s = spec_of("zipf:1.2", "4K", 100);
	struct bench_workload wl;
	struct bench_rng r;
	struct bench_io io;
	static uint32_t cnt[4096];

	memset(cnt, 0, sizeof(cnt));
	CU_ASSERT_FATAL(bench_workload_init(&wl, &s, 512, 0, 4096 * 4096, NULL, err, sizeof(err)) ==
	                0);
	bench_rng_seed(&r, 5);
	for (int i = 0; i < 100000; i++) {
		bench_workload_next(&wl, &r, &io);
		CU_ASSERT_FATAL(io.offset % 4096 == 0 && io.offset < 4096 * 4096);
		cnt[io.offset / 4096]++;
	}
	qsort(cnt, 4096, sizeof(cnt[0]), cmp_desc);
	/* rank 1 of zipf(1.2) over 4096 items gets about 1/H = 22 % of draws */
	double norm = 0;
	for (int k = 1; k <= 4096; k++)
		norm += pow(k, -1.2);
	CU_ASSERT(fabs(cnt[0] / 100000.0 - 1 / norm) < 0.01);
}

static void test_seq_and_wrap(void)
{
	struct bench_workload_spec s = spec_of("seq", "4K", 100);
	struct bench_workload wl;
	struct bench_rng r;
	struct bench_io io;

	CU_ASSERT_FATAL(
	    bench_workload_init(&wl, &s, 512, 8192, 3 * 4096 + 512, NULL, err, sizeof(err)) == 0);
	bench_rng_seed(&r, 1);
	uint64_t want[] = {8192, 8192 + 4096, 8192 + 8192, 8192, 8192 + 4096};
	for (int i = 0; i < 5; i++) {
		bench_workload_next(&wl, &r, &io);
		CU_ASSERT_EQUAL(io.offset, want[i]);
		CU_ASSERT_EQUAL(io.len, 4096);
	}
}

static void test_mixed_sizes_and_reads(void)
{
	struct bench_workload_spec s = spec_of("uniform", "4K:70,64K:30", 70);
	struct bench_workload wl;
	struct bench_rng r;
	struct bench_io io;
	int small = 0, reads = 0;
	const int draws = 100000;

	CU_ASSERT_FATAL(bench_workload_init(&wl, &s, 512, 0, 1 << 30, NULL, err, sizeof(err)) == 0);
	CU_ASSERT_EQUAL(wl.unit, 4096);
	CU_ASSERT_EQUAL(wl.max_len, 65536);
	bench_rng_seed(&r, 11);
	for (int i = 0; i < draws; i++) {
		bench_workload_next(&wl, &r, &io);
		CU_ASSERT_FATAL(io.offset % io.len == 0);
		small += io.len == 4096;
		reads += !io.write;
	}
	CU_ASSERT(fabs(small / (double)draws - 0.7) < 0.01);
	CU_ASSERT(fabs(reads / (double)draws - 0.7) < 0.01);
}

static void test_bad_geometry(void)
{
	struct bench_workload_spec s = spec_of("uniform", "4K", 100);
	struct bench_workload wl;

	CU_ASSERT(bench_workload_init(&wl, &s, 4096, 0, 2048, NULL, err, sizeof(err)) != 0);
	s = spec_of("uniform", "6K", 100);
	CU_ASSERT(bench_workload_init(&wl, &s, 4096, 0, 1 << 20, NULL, err, sizeof(err)) != 0);
	CU_ASSERT(strstr(err, "multiple") != NULL);
	s = spec_of("trace:/nonexistent", "4K", 100);
	CU_ASSERT(bench_workload_init(&wl, &s, 512, 0, 1 << 20, NULL, err, sizeof(err)) != 0);
}

static void test_trace_mapping(void)
{
	struct bench_workload_spec s = spec_of("trace:x", "4K", 100);
	struct bench_trace t = {0};
	struct bench_trace_rec recs[] = {
	    {.offset = 512, .len = 4096, .write = 0},
	    {.offset = (1 << 20) + 4096, .len = 1000, .write = 1}, /* wraps, rounds up */
	    {.offset = (1 << 20) - 512, .len = 8192, .write = 0},  /* pulled inside */
	};
	struct bench_workload wl;
	struct bench_rng r;
	struct bench_io io;

	t.recs = recs;
	t.n = 3;
	CU_ASSERT_FATAL(bench_workload_init(&wl, &s, 4096, 0, 1 << 20, &t, err, sizeof(err)) == 0);
	bench_rng_seed(&r, 1);
	bench_workload_next(&wl, &r, &io);
	CU_ASSERT(io.offset == 0 && io.len == 4096 && !io.write);
	bench_workload_next(&wl, &r, &io);
	CU_ASSERT(io.offset == 4096 && io.len == 4096 && io.write);
	bench_workload_next(&wl, &r, &io);
	CU_ASSERT(io.offset == (1 << 20) - 8192 && io.len == 8192);
	bench_workload_next(&wl, &r, &io); /* second pass */
	CU_ASSERT(io.offset == 0 && wl.trace_passes == 1);
}

static void test_same_seed_same_sequence(void)
{
	struct bench_workload_spec s = spec_of("zipf:0.9", "4K,16K", 50);
	struct bench_workload a, b;
	struct bench_rng ra, rb;
	struct bench_io x, y;

	CU_ASSERT_FATAL(bench_workload_init(&a, &s, 512, 0, 1 << 28, NULL, err, sizeof(err)) == 0);
	CU_ASSERT_FATAL(bench_workload_init(&b, &s, 512, 0, 1 << 28, NULL, err, sizeof(err)) == 0);
	bench_rng_seed(&ra, 99);
	bench_rng_seed(&rb, 99);
	for (int i = 0; i < 1000; i++) {
		bench_workload_next(&a, &ra, &x);
		bench_workload_next(&b, &rb, &y);
		CU_ASSERT_FATAL(x.offset == y.offset && x.len == y.len && x.write == y.write);
	}
}

static void test_rng_below_unbiased_range(void)
{
	struct bench_rng r;
	int cnt[3] = {0};

	bench_rng_seed(&r, 0);
	for (int i = 0; i < 30000; i++)
		cnt[bench_rng_below(&r, 3)]++;
	for (int i = 0; i < 3; i++)
		CU_ASSERT(abs(cnt[i] - 10000) < 400);
	CU_ASSERT_EQUAL(bench_rng_below(&r, 0), 0);
	double d = bench_rng_double(&r);
	CU_ASSERT(d >= 0 && d < 1);
}

static const struct hl_test tests[] = {
    {"sizes parse and format", test_parse_sizes},
    {"--bs lists parse, bad ones are refused", test_parse_bs},
    {"--workload specs parse, bad ones are refused", test_parse_workload},
    {"zipf sampler matches k^-s", test_zipf_distribution},
    {"uniform stays in range, aligned, covers it", test_uniform_in_range_and_aligned},
    {"rank scatter is a bijection", test_scatter_is_a_bijection},
    {"hotset:90/10 sends 90% to 10% of blocks", test_hotset_share},
    {"zipf:1.2 top block share", test_zipf_skew_in_workload},
    {"seq advances and wraps", test_seq_and_wrap},
    {"mixed sizes and read ratio", test_mixed_sizes_and_reads},
    {"impossible geometry is refused", test_bad_geometry},
    {"trace records map into the range", test_trace_mapping},
    {"same seed, same I/O sequence", test_same_seed_same_sequence},
    {"rng_below is unbiased", test_rng_below_unbiased_range},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("bench_workload", tests);
}
