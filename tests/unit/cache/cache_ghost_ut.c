/*
 * cache_ghost_ut.c - the RAM window's ghost (cache_ghost.c): sizes, the
 * packed buckets against a plain model, false positives, how long a key
 * is remembered (near, then far, then not), a key dropped again, a
 * sequential stream's drop (far only), removal.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "cache/core/core_internal.h"
#include "hl_test.h"

#define SALT 0x7f4a7c159e3779b9ull

/* A key never added by the tests below (they add keys below 1 << 40). */
static uint64_t other_key(uint64_t i)
{
	return (1ull << 40) + i;
}

static void test_sizes(void)
{
	struct cache_ghost g;

	/* The default: 2 bytes per slot, 16 entries of 12 bits a bucket, the ghost the newest 8. */
	CU_ASSERT_EQUAL_FATAL(cache_ghost_init(&g, 3 << 19, SALT), 0);
	CU_ASSERT_EQUAL(g.ways, 16);
	CU_ASSERT_EQUAL(g.near_ways, 8);
	CU_ASSERT_EQUAL(cache_ghost_mem_bytes(&g), 2ull * (3 << 19));
	CU_ASSERT_EQUAL(g.nbuckets * g.ways * 3, 4ull * (3 << 19)); /* 4/3 entries a slot */
	cache_ghost_fini(&g);
	/* Never more than the bits per slot asked (rounded down), at least 64 buckets. */
	CU_ASSERT_EQUAL_FATAL(cache_ghost_init(&g, 1000, SALT), 0);
	CU_ASSERT_EQUAL(g.nbuckets, 83);
	CU_ASSERT(cache_ghost_mem_bytes(&g) <= 2000);
	cache_ghost_fini(&g);
	CU_ASSERT_EQUAL_FATAL(cache_ghost_init(&g, 1, SALT), 0);
	CU_ASSERT_EQUAL(g.nbuckets, 64);
	CU_ASSERT_EQUAL(cache_ghost_test(&g, 1), CACHE_GHOST_NONE);
	cache_ghost_fini(&g);
	/* Other shapes; bad ones refused. */
	CU_ASSERT_EQUAL_FATAL(cache_ghost_init_sized(&g, 1 << 20, SALT, 11, 3, 10, 20), 0);
	CU_ASSERT_EQUAL(g.ways, 17);
	CU_ASSERT_EQUAL(g.near_ways, 10);
	cache_ghost_fini(&g);
	CU_ASSERT_EQUAL(cache_ghost_init_sized(&g, 1 << 20, SALT, 3, 3, 0, 16), -EINVAL);
	CU_ASSERT_EQUAL(cache_ghost_init_sized(&g, 1 << 20, SALT, 12, 0, 0, 16), -EINVAL);
	CU_ASSERT_EQUAL(cache_ghost_init_sized(&g, 1 << 20, SALT, 12, 9, 0, 16), -EINVAL);
	CU_ASSERT_EQUAL(cache_ghost_init_sized(&g, 1 << 20, SALT, 12, 3, 0, 0), -EINVAL);
	/* An unset ghost (zeroed) answers no and takes nothing. */
	struct cache_ghost z = {0};
	cache_ghost_add(&z, 5, true);
	CU_ASSERT_EQUAL(cache_ghost_test(&z, 5), CACHE_GHOST_NONE);
	CU_ASSERT_FALSE(cache_ghost_remove(&z, 5));
}

/*
 * The packed buckets against a plain model: per bucket an array of
 * entries newest first, the same bucket and fingerprint of a key. Shapes
 * whose entries cross a 64-bit word (12 bits in 3 words: entry 5 is bits
 * 60-71) or do not fill the last one (11 bits: 17 entries, 187 of 192).
 */
#define MODEL_BUCKETS 64
static void model_run(uint32_t ebits, uint32_t words, uint32_t near)
{
	struct cache_ghost g;
	static uint32_t m[MODEL_BUCKETS][64];
	uint64_t seed = 12345;

	CU_ASSERT_EQUAL_FATAL(cache_ghost_init_sized(&g, 1, SALT, ebits, words, near, 1), 0);
	CU_ASSERT_EQUAL_FATAL(g.nbuckets, MODEL_BUCKETS);
	memset(m, 0, sizeof(m));
	for (int op = 0; op < 200000; op++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		uint64_t key = (seed >> 33) % 3000; /* keys come back: moves to the front */
		uint64_t h = cache_hash(key ^ SALT);
		uint32_t b = (uint32_t)(((unsigned __int128)h * MODEL_BUCKETS) >> 64);
		uint32_t fp = (uint32_t)h & (g.emask >> 1), p;
		fp = (fp ? fp : 1) << 1;
		for (p = 0; p < g.ways && (m[b][p] & ~1u) != fp; p++)
			;
		int what = (int)(seed >> 20) % 8;
		if (what < 4) {
			bool nr = what < 3;
			enum cache_ghost_hit want = CACHE_GHOST_NONE;
			if (p < g.ways)
				want = p < g.near_ways && (m[b][p] & 1) ? CACHE_GHOST_NEAR
				                                         : CACHE_GHOST_FAR;
			CU_ASSERT_EQUAL_FATAL(cache_ghost_test(&g, key), want);
			cache_ghost_add(&g, key, nr);
			if (p < g.ways)
				nr = nr || ((m[b][p] & 1) && p < g.near_ways);
			else
				p = g.ways - 1;
			for (; p > 0; p--)
				m[b][p] = m[b][p - 1];
			m[b][0] = fp | nr;
		} else if (what < 5) {
			CU_ASSERT_EQUAL_FATAL(cache_ghost_remove(&g, key), p < g.ways);
			if (p < g.ways) {
				for (; p + 1 < g.ways; p++)
					m[b][p] = m[b][p + 1];
				m[b][g.ways - 1] = 0;
			}
		} else {
			enum cache_ghost_hit want = CACHE_GHOST_NONE;
			if (p < g.ways)
				want = p < g.near_ways && (m[b][p] & 1) ? CACHE_GHOST_NEAR
				                                         : CACHE_GHOST_FAR;
			CU_ASSERT_EQUAL_FATAL(cache_ghost_test(&g, key), want);
		}
	}
	cache_ghost_fini(&g);
}

static void test_model(void)
{
	model_run(12, 3, 0);
	model_run(11, 3, 10);
	model_run(10, 1, 3);
	model_run(16, 4, 5);
	model_run(13, 8, 0);
}

/*
 * False positives, with every entry taken (3 x the table's entries
 * added, all near): a key never added is reported by the far test at
 * about 16 / 2^11 = 0.78%, by the near test at about half that (the bloom
 * pairs it replaces: 0.8-1.6%). Bounds with room for the sample.
 */
static void test_false_positives(void)
{
	struct cache_ghost g;
	const uint64_t nslots = 1 << 18, probes = 1 << 20;
	uint64_t far = 0, near = 0;

	CU_ASSERT_EQUAL_FATAL(cache_ghost_init(&g, nslots, SALT), 0);
	for (uint64_t k = 0; k < 3 * g.nbuckets * g.ways; k++)
		cache_ghost_add(&g, k, true);
	for (uint64_t i = 0; i < probes; i++) {
		enum cache_ghost_hit h = cache_ghost_test(&g, other_key(i));
		far += h != CACHE_GHOST_NONE;
		near += h == CACHE_GHOST_NEAR;
	}
	double pf = 100.0 * (double)far / (double)probes, pn = 100.0 * (double)near / (double)probes;
	fprintf(stderr, "\n  false positives: far %.3f%%, near %.3f%%", pf, pn);
	CU_ASSERT(pf > 0.6 && pf < 0.9);
	CU_ASSERT(pn > 0.3 && pn < 0.45);
	cache_ghost_fini(&g);
	fprintf(stderr, "\n");
}

/*
 * How long a key is remembered, in keys added after it (C = the table's
 * entries, 4/3 x nslots): its bucket gets about age / nbuckets of them
 * (Poisson), so it is near while fewer than 8 came (C / 8 after it: >=
 * 99%), far while fewer than 16 (C / 2: >= 95%, and no longer near for
 * most), and forgotten at 2 x C but for false positives.
 */
static void test_expiry(void)
{
	struct cache_ghost g;
	const uint64_t nslots = 1 << 16;

	CU_ASSERT_EQUAL_FATAL(cache_ghost_init(&g, nslots, SALT), 0);
	const uint64_t cap = g.nbuckets * g.ways, n = 3 * cap;
	for (uint64_t k = 0; k < n; k++)
		cache_ghost_add(&g, k, true);
	struct {
		uint64_t age_lo, age_hi;
		double near_min, near_max, any_min, any_max;
	} band[] = {
	    {0, cap / 8, 99, 100, 99, 100},
	    {cap / 2, cap / 2 + cap / 16, 20, 70, 95, 100},
	    {2 * cap, 2 * cap + cap / 4, 0, 0.6, 0, 1.2}, /* false positives */
	};
	for (size_t i = 0; i < HL_ARRAY_SIZE(band); i++) {
		uint64_t near = 0, any = 0, m = band[i].age_hi - band[i].age_lo;
		for (uint64_t a = band[i].age_lo; a < band[i].age_hi; a++) {
			enum cache_ghost_hit h = cache_ghost_test(&g, n - 1 - a);
			near += h == CACHE_GHOST_NEAR;
			any += h != CACHE_GHOST_NONE;
		}
		double pn = 100.0 * (double)near / (double)m, pa = 100.0 * (double)any / (double)m;
		fprintf(stderr, "\n  age %.2f-%.2f x entries: near %.2f%%, near or far %.2f%%",
		        (double)band[i].age_lo / (double)cap, (double)band[i].age_hi / (double)cap, pn,
		        pa);
		CU_ASSERT(pn >= band[i].near_min && pn <= band[i].near_max);
		CU_ASSERT(pa >= band[i].any_min && pa <= band[i].any_max);
	}
	cache_ghost_fini(&g);
	fprintf(stderr, "\n");
}

/* A sequential stream's drop is far only; dropped again near, it is near; older, far again. */
static void test_near_flag(void)
{
	struct cache_ghost g;
	uint64_t moved = 0, far_only = 0;

	CU_ASSERT_EQUAL_FATAL(cache_ghost_init(&g, 1 << 14, SALT), 0);
	const uint64_t cap = g.nbuckets * g.ways;
	for (uint64_t k = 0; k < 1000; k++) {
		cache_ghost_add(&g, k, false);
		CU_ASSERT_EQUAL(cache_ghost_test(&g, k), CACHE_GHOST_FAR);
		cache_ghost_add(&g, k, true);
		CU_ASSERT_EQUAL(cache_ghost_test(&g, k), CACHE_GHOST_NEAR);
		/* A stream's drop of a key still near keeps it near. */
		cache_ghost_add(&g, k, false);
		CU_ASSERT_EQUAL(cache_ghost_test(&g, k), CACHE_GHOST_NEAR);
	}
	/* Push keys 0-999 out of the near entries (not out of the table), then drop them as a stream's. */
	for (uint64_t k = 0; k < cap * 3 / 4; k++)
		cache_ghost_add(&g, 1000 + k, true);
	for (uint64_t k = 0; k < 1000; k++) {
		if (cache_ghost_test(&g, k) != CACHE_GHOST_FAR)
			continue; /* still near, or gone: not the case tested */
		moved++;
		cache_ghost_add(&g, k, false);
		far_only += cache_ghost_test(&g, k) == CACHE_GHOST_FAR;
	}
	CU_ASSERT(moved > 500);
	CU_ASSERT_EQUAL(far_only, moved);
	cache_ghost_fini(&g);
}

/*
 * Removal: a removed key is not found (but for a false positive), the
 * keys kept are, and keys older than it in its bucket are kept longer
 * (the entry it frees).
 */
static void test_remove(void)
{
	struct cache_ghost g;
	uint64_t found = 0, kept = 0;

	CU_ASSERT_EQUAL_FATAL(cache_ghost_init(&g, 1 << 16, SALT), 0);
	const uint64_t n = g.nbuckets * g.ways / 8;
	for (uint64_t k = 0; k < n; k++)
		cache_ghost_add(&g, k, true);
	uint64_t gone = 0; /* its entry went with another key's of the same fingerprint */
	for (uint64_t k = 0; k < n; k += 2)
		gone += !cache_ghost_remove(&g, k);
	CU_ASSERT(gone <= n / 1000);
	for (uint64_t k = 0; k < n; k++) {
		enum cache_ghost_hit h = cache_ghost_test(&g, k);
		if (k % 2)
			kept += h == CACHE_GHOST_NEAR;
		else
			found += h != CACHE_GHOST_NONE;
	}
	/*
	 * Two keys of a bucket may share a fingerprint (1 in 2^11 a pair; one
	 * entry for both): removing one forgets the other, or leaves it found.
	 */
	fprintf(stderr, "\n  %llu keys: %llu removed still found, %llu kept lost\n",
	        (unsigned long long)n, (unsigned long long)found,
	        (unsigned long long)(n / 2 - kept));
	CU_ASSERT(found <= n / 1000);
	CU_ASSERT(kept >= n / 2 - n / 1000);
	/* Removing what is not there says so and changes nothing. */
	CU_ASSERT_FALSE(cache_ghost_remove(&g, other_key(1)));
	CU_ASSERT_EQUAL(cache_ghost_test(&g, 1), CACHE_GHOST_NEAR);
	cache_ghost_fini(&g);
}

static const struct hl_test tests[] = {
    {"sizes: 2 bytes per slot, at least 64 buckets, bad shapes refused", test_sizes},
    {"packed buckets behave as the plain model (add, test, remove)", test_model},
    {"false positives <= 0.9% (far), <= 0.45% (near) with every entry taken",
     test_false_positives},
    {"a key is near, then far, then forgotten as keys are added after it", test_expiry},
    {"a stream's drop is far only; near again only by a near drop", test_near_flag},
    {"removal: the key is gone, the others stay", test_remove},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("cache_ghost", tests);
}
