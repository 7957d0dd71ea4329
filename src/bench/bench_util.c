/*
 * bench_util.c - the small helpers of hotlun-bench: size formatting, the
 * random number generator every workload draws from, and the clock. Sizes
 * are parsed by hl_parse_size() (src/util/util.c, which bench compiles in:
 * it needs nothing but libc).
 */
#include "bench/bench_internal.h"

#include <inttypes.h>
#include <time.h>

const char *bench_format_size(uint64_t v, char *buf, size_t len)
{
	static const char suffix[] = "KMGT";
	int i = -1;

	while (v && (v & 1023) == 0 && i < 3) {
		v >>= 10;
		i++;
	}
	if (i < 0)
		snprintf(buf, len, "%" PRIu64, v);
	else
		snprintf(buf, len, "%" PRIu64 "%c", v, suffix[i]);
	return buf;
}

void bench_rng_seed(struct bench_rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++) {
		seed += 0x9e3779b97f4a7c15ULL;
		r->s[i] = bench_mix64(seed);
	}
	if (!(r->s[0] | r->s[1] | r->s[2] | r->s[3]))
		r->s[0] = 1;
}

static inline uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

uint64_t bench_rng_next(struct bench_rng *r)
{
	uint64_t *s = r->s;
	uint64_t result = rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return result;
}

double bench_rng_double(struct bench_rng *r)
{
	return (double)(bench_rng_next(r) >> 11) * 0x1.0p-53;
}

uint64_t bench_rng_below(struct bench_rng *r, uint64_t n)
{
	if (n == 0)
		return 0;
	/* Reject the top partial copy of [0, n) so every value is equally likely. */
	uint64_t limit = UINT64_MAX - UINT64_MAX % n;
	uint64_t x;

	do {
		x = bench_rng_next(r);
	} while (x >= limit);
	return x % n;
}

uint64_t bench_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}
