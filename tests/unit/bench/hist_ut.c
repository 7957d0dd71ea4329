/*
 * hist_ut.c - unit tests of the hotlun-bench latency histogram: bucket
 * layout (contiguous, 2 significant digits), percentiles, merge.
 */
#include "bench/bench_internal.h"
#include "hl_test.h"

#include <stdlib.h>

static void test_buckets_contiguous(void)
{
	CU_ASSERT_EQUAL(bench_hist_bucket_low(0), 0);
	for (unsigned i = 0; i + 1 < BENCH_HIST_NBUCKETS; i++) {
		CU_ASSERT_FATAL(bench_hist_bucket_high(i) >= bench_hist_bucket_low(i));
		CU_ASSERT_FATAL(bench_hist_bucket_high(i) + 1 == bench_hist_bucket_low(i + 1));
	}
	CU_ASSERT_EQUAL(bench_hist_bucket_high(BENCH_HIST_NBUCKETS - 1), UINT64_MAX);
	CU_ASSERT_EQUAL(bench_hist_index(UINT64_MAX), BENCH_HIST_NBUCKETS - 1);
}

static void test_index_brackets_value(void)
{
	struct bench_rng r;
	bench_rng_seed(&r, 7);
	for (int i = 0; i < 200000; i++) {
		uint64_t v = i < 100000 ? (uint64_t)i : bench_rng_next(&r) >> (i % 64);
		unsigned idx = bench_hist_index(v);
		CU_ASSERT_FATAL(idx < BENCH_HIST_NBUCKETS);
		CU_ASSERT_FATAL(bench_hist_bucket_low(idx) <= v);
		CU_ASSERT_FATAL(bench_hist_bucket_high(idx) >= v);
	}
}

static void test_two_significant_digits(void)
{
	for (unsigned i = BENCH_HIST_SUB; i < BENCH_HIST_NBUCKETS; i++) {
		uint64_t lo = bench_hist_bucket_low(i), hi = bench_hist_bucket_high(i);
		/* width / value <= 1/64 */
		CU_ASSERT_FATAL((hi - lo + 1) * 64 <= lo);
	}
}

static void test_small_values_exact(void)
{
	struct bench_hist h;
	bench_hist_reset(&h);
	for (uint64_t v = 1; v <= 100; v++)
		bench_hist_add(&h, v);
	CU_ASSERT_EQUAL(bench_hist_percentile(&h, 50), 50);
	CU_ASSERT_EQUAL(bench_hist_percentile(&h, 99), 99);
	CU_ASSERT_EQUAL(bench_hist_percentile(&h, 100), 100);
	CU_ASSERT_EQUAL(bench_hist_percentile(&h, 1), 1);
	CU_ASSERT_EQUAL(h.min, 1);
	CU_ASSERT_EQUAL(h.max, 100);
	CU_ASSERT_DOUBLE_EQUAL(bench_hist_mean(&h), 50.5, 1e-9);
}

static void near(uint64_t got, double want, double rel)
{
	CU_ASSERT(got >= want * (1 - rel) && got <= want * (1 + rel));
	if (!(got >= want * (1 - rel) && got <= want * (1 + rel)))
		fprintf(stderr, "got %llu want %.0f\n", (unsigned long long)got, want);
}

static void test_percentiles_of_shuffled_range(void)
{
	static struct bench_hist h;
	struct bench_rng r;
	const uint64_t n = 100000;
	uint64_t *v = malloc(n * sizeof(*v));

	CU_ASSERT_FATAL(v != NULL);
	for (uint64_t i = 0; i < n; i++)
		v[i] = (i + 1) * 1000; /* 1 us .. 100 ms in ns */
	bench_rng_seed(&r, 1);
	for (uint64_t i = n - 1; i > 0; i--) {
		uint64_t j = bench_rng_below(&r, i + 1), t = v[i];
		v[i] = v[j];
		v[j] = t;
	}
	bench_hist_reset(&h);
	for (uint64_t i = 0; i < n; i++)
		bench_hist_add(&h, v[i]);
	free(v);
	near(bench_hist_percentile(&h, 50), 50000 * 1000.0, 0.016);
	near(bench_hist_percentile(&h, 99), 99000 * 1000.0, 0.016);
	near(bench_hist_percentile(&h, 99.9), 99900 * 1000.0, 0.016);
	CU_ASSERT_EQUAL(bench_hist_percentile(&h, 100), n * 1000);
	CU_ASSERT_EQUAL(bench_hist_percentile(&h, 0), 1000);
	CU_ASSERT_EQUAL(h.count, n);
}

static void test_single_value_clamped(void)
{
	struct bench_hist h;
	bench_hist_reset(&h);
	bench_hist_add(&h, 123456789);
	CU_ASSERT_EQUAL(bench_hist_percentile(&h, 50), 123456789);
	CU_ASSERT_EQUAL(bench_hist_percentile(&h, 99.9), 123456789);
}

static void test_empty(void)
{
	struct bench_hist h;
	bench_hist_reset(&h);
	CU_ASSERT_EQUAL(bench_hist_percentile(&h, 50), 0);
	CU_ASSERT_EQUAL(bench_hist_mean(&h), 0);
}

static void test_merge_equals_adding(void)
{
	static struct bench_hist a, b, all;
	struct bench_rng r;

	bench_hist_reset(&a);
	bench_hist_reset(&b);
	bench_hist_reset(&all);
	bench_rng_seed(&r, 3);
	for (int i = 0; i < 10000; i++) {
		uint64_t v = bench_rng_below(&r, 50000000);
		bench_hist_add(i % 3 ? &a : &b, v);
		bench_hist_add(&all, v);
	}
	bench_hist_merge(&a, &b);
	CU_ASSERT_EQUAL(a.count, all.count);
	CU_ASSERT_EQUAL(a.sum, all.sum);
	CU_ASSERT_EQUAL(a.min, all.min);
	CU_ASSERT_EQUAL(a.max, all.max);
	CU_ASSERT_EQUAL(bench_hist_percentile(&a, 99), bench_hist_percentile(&all, 99));
	CU_ASSERT(memcmp(a.buckets, all.buckets, sizeof(a.buckets)) == 0);
}

static const struct hl_test tests[] = {
    {"buckets are contiguous and cover 64 bits", test_buckets_contiguous},
    {"a value lies inside its bucket", test_index_brackets_value},
    {"buckets are at most 1/64 of their value wide", test_two_significant_digits},
    {"values below 128 are exact", test_small_values_exact},
    {"percentiles of 1..100000 us", test_percentiles_of_shuffled_range},
    {"a single value is every percentile", test_single_value_clamped},
    {"empty histogram reports 0", test_empty},
    {"merge equals adding everything to one", test_merge_equals_adding},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("bench_hist", tests);
}
