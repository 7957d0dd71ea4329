/*
 * bench_hist.c - the log-linear latency histogram behind every percentile
 * hotlun-bench prints or plots. Fixed size, no allocation, O(1) insert;
 * percentiles walk the buckets (a few thousand adds), so they are computed
 * once per second, never per I/O.
 */
#include "bench/bench_internal.h"

#include <string.h>

void bench_hist_reset(struct bench_hist *h)
{
	memset(h, 0, sizeof(*h));
	h->min = UINT64_MAX;
}

unsigned bench_hist_index(uint64_t v)
{
	if (v < BENCH_HIST_SUB)
		return (unsigned)v;
	unsigned msb = 63u - (unsigned)__builtin_clzll(v);
	unsigned shift = msb - (BENCH_HIST_SUB_BITS - 1);

	return (shift + 1) * BENCH_HIST_HALF + (unsigned)(v >> shift) - BENCH_HIST_HALF;
}

uint64_t bench_hist_bucket_low(unsigned idx)
{
	if (idx < BENCH_HIST_SUB)
		return idx;
	unsigned shift = idx / BENCH_HIST_HALF - 1;
	uint64_t sub = idx % BENCH_HIST_HALF + BENCH_HIST_HALF;

	return sub << shift;
}

uint64_t bench_hist_bucket_high(unsigned idx)
{
	if (idx < BENCH_HIST_SUB)
		return idx;
	unsigned shift = idx / BENCH_HIST_HALF - 1;

	return bench_hist_bucket_low(idx) + ((1ULL << shift) - 1);
}

void bench_hist_add(struct bench_hist *h, uint64_t v)
{
	h->buckets[bench_hist_index(v)]++;
	h->count++;
	h->sum += v;
	if (v < h->min)
		h->min = v;
	if (v > h->max)
		h->max = v;
}

void bench_hist_merge(struct bench_hist *dst, const struct bench_hist *src)
{
	if (!src->count)
		return;
	for (unsigned i = 0; i < BENCH_HIST_NBUCKETS; i++)
		dst->buckets[i] += src->buckets[i];
	dst->count += src->count;
	dst->sum += src->sum;
	if (src->min < dst->min)
		dst->min = src->min;
	if (src->max > dst->max)
		dst->max = src->max;
}

uint64_t bench_hist_percentile(const struct bench_hist *h, double p)
{
	if (!h->count)
		return 0;
	if (p <= 0)
		return h->min;
	if (p >= 100)
		return h->max;

	/* The rank-th smallest value, rank counted from 1. */
	double want = p / 100.0 * (double)h->count;
	uint64_t rank = (uint64_t)want;
	if ((double)rank < want)
		rank++;
	if (rank == 0)
		rank = 1;

	uint64_t seen = 0;
	for (unsigned i = 0; i < BENCH_HIST_NBUCKETS; i++) {
		seen += h->buckets[i];
		if (seen >= rank) {
			uint64_t lo = bench_hist_bucket_low(i), hi = bench_hist_bucket_high(i);
			uint64_t mid = lo + (hi - lo) / 2;
			if (mid < h->min)
				mid = h->min;
			if (mid > h->max)
				mid = h->max;
			return mid;
		}
	}
	return h->max;
}

double bench_hist_mean(const struct bench_hist *h)
{
	return h->count ? (double)h->sum / (double)h->count : 0.0;
}
