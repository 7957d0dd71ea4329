/*
 * cache_ghost_ut.c - the RAM window's ghost (cache_ghost.c): sizes, the
 * packed buckets, generation numbers mod 4 and the sweep against a plain
 * model (absolute generations, no sweep), false positives, expiry a
 * generation at a time (near, then far, then not), a key dropped again, a
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

	/* The default: 2 bytes per slot, 16 entries of 12 bits a bucket, 3 generations fill 90%. */
	CU_ASSERT_EQUAL_FATAL(cache_ghost_init(&g, 3 << 19, SALT), 0);
	CU_ASSERT_EQUAL(g.ways, 16);
	CU_ASSERT_EQUAL(cache_ghost_mem_bytes(&g), 2ull * (3 << 19));
	CU_ASSERT_EQUAL(g.nbuckets * g.ways * 3, 4ull * (3 << 19)); /* 4/3 entries a slot */
	CU_ASSERT_EQUAL(g.gen_len, g.nbuckets * g.ways * 90 / 300);
	CU_ASSERT_EQUAL(g.sweep_per, 1);
	cache_ghost_fini(&g);
	/* Never more than the bits per slot asked (rounded down), at least one bucket. */
	CU_ASSERT_EQUAL_FATAL(cache_ghost_init(&g, 1000, SALT), 0);
	CU_ASSERT_EQUAL(g.nbuckets, 83);
	CU_ASSERT(cache_ghost_mem_bytes(&g) <= 2000);
	cache_ghost_fini(&g);
	CU_ASSERT_EQUAL_FATAL(cache_ghost_init(&g, 1, SALT), 0);
	CU_ASSERT_EQUAL(g.nbuckets, 1);
	CU_ASSERT_EQUAL(g.gen_len, 4);
	CU_ASSERT_EQUAL(cache_ghost_test(&g, 1), CACHE_GHOST_NONE);
	cache_ghost_fini(&g);
	/* Other shapes; bad ones refused. */
	CU_ASSERT_EQUAL_FATAL(cache_ghost_init_sized(&g, 1 << 20, SALT, 11, 3, 80, 20), 0);
	CU_ASSERT_EQUAL(g.ways, 17);
	cache_ghost_fini(&g);
	CU_ASSERT_EQUAL(cache_ghost_init_sized(&g, 1 << 20, SALT, 4, 3, 90, 16), -EINVAL);
	CU_ASSERT_EQUAL(cache_ghost_init_sized(&g, 1 << 20, SALT, 12, 0, 90, 16), -EINVAL);
	CU_ASSERT_EQUAL(cache_ghost_init_sized(&g, 1 << 20, SALT, 12, 9, 90, 16), -EINVAL);
	CU_ASSERT_EQUAL(cache_ghost_init_sized(&g, 1 << 20, SALT, 12, 3, 90, 0), -EINVAL);
	CU_ASSERT_EQUAL(cache_ghost_init_sized(&g, 1 << 20, SALT, 12, 3, 101, 16), -EINVAL);
	/* An unset ghost (zeroed) answers no and takes nothing. */
	struct cache_ghost z = {0};
	cache_ghost_add(&z, 5, true);
	CU_ASSERT_EQUAL(cache_ghost_test(&z, 5), CACHE_GHOST_NONE);
	CU_ASSERT_FALSE(cache_ghost_remove(&z, 5));
}

/*
 * The packed buckets against a plain model: per bucket an array of
 * entries (fingerprint, absolute generation, near), the same bucket and
 * fingerprint of a key; live: of the current generation or the 2 before.
 * No sweep and no numbers mod 4 in the model: the table's must give the
 * same answers. Shapes whose entries cross a 64-bit word (12 bits in 3
 * words: entry 5 is bits 60-71) or do not fill the last one (11 bits: 17
 * entries, 187 of 192 bits); loads that overflow buckets (evictions).
 */
#define MODEL_BUCKETS 16
struct model_ent {
	uint32_t fp;
	uint64_t gen;
	bool near, used;
};

static enum cache_ghost_hit model_hit(const struct model_ent *e, uint64_t gen)
{
	if (!e->used || e->gen + 3 <= gen)
		return CACHE_GHOST_NONE;
	return e->near && e->gen + 2 > gen ? CACHE_GHOST_NEAR : CACHE_GHOST_FAR;
}

static void model_run(uint32_t ebits, uint32_t words, uint32_t load, uint32_t nkeys)
{
	struct cache_ghost g;
	static struct model_ent m[MODEL_BUCKETS][64];
	uint64_t seed = 12345, gen = 0, in_gen = 0, evictions = 0;

	CU_ASSERT_EQUAL_FATAL(cache_ghost_init_sized(&g, MODEL_BUCKETS * words * 64 / 16, SALT, ebits,
	                                             words, load, 16),
	                      0);
	CU_ASSERT_EQUAL_FATAL(g.nbuckets, MODEL_BUCKETS);
	memset(m, 0, sizeof(m));
	for (int op = 0; op < 300000; op++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		uint64_t key = (seed >> 33) % nkeys; /* keys come back */
		uint64_t h = cache_hash(key ^ SALT);
		uint32_t b = (uint32_t)(((unsigned __int128)h * MODEL_BUCKETS) >> 64);
		uint32_t fp = (uint32_t)h & (g.emask >> 3), p;
		fp = fp ? fp : 1;
		for (p = 0; p < g.ways && !(model_hit(&m[b][p], gen) && m[b][p].fp == fp); p++)
			;
		enum cache_ghost_hit want = p < g.ways ? model_hit(&m[b][p], gen) : CACHE_GHOST_NONE;
		int what = (int)(seed >> 20) % 8;
		if (what < 4) {
			bool nr = what < 3;
			CU_ASSERT_EQUAL_FATAL(cache_ghost_test(&g, key), want);
			cache_ghost_add(&g, key, nr);
			if (in_gen == g.gen_len) {
				gen++;
				in_gen = 0;
				/* the add is of the new generation: what it finds, too */
				for (p = 0; p < g.ways && !(model_hit(&m[b][p], gen) && m[b][p].fp == fp);
				     p++)
					;
				want = p < g.ways ? model_hit(&m[b][p], gen) : CACHE_GHOST_NONE;
			}
			in_gen++;
			if (p < g.ways) {
				nr = nr || want == CACHE_GHOST_NEAR;
			} else {
				uint32_t fr = g.ways, old = 0;
				for (p = 0; p < g.ways; p++) {
					if (model_hit(&m[b][p], gen) == CACHE_GHOST_NONE) {
						if (fr == g.ways)
							fr = p;
					} else if (gen - m[b][p].gen > gen - m[b][old].gen ||
					           model_hit(&m[b][old], gen) == CACHE_GHOST_NONE) {
						old = p;
					}
				}
				evictions += fr == g.ways;
				p = fr < g.ways ? fr : old;
			}
			m[b][p] = (struct model_ent){.fp = fp, .gen = gen, .near = nr, .used = true};
		} else if (what < 5) {
			CU_ASSERT_EQUAL_FATAL(cache_ghost_remove(&g, key), want != CACHE_GHOST_NONE);
			if (want != CACHE_GHOST_NONE)
				m[b][p].used = false;
		} else {
			CU_ASSERT_EQUAL_FATAL(cache_ghost_test(&g, key), want);
		}
	}
	CU_ASSERT_EQUAL(evictions, g.evicted);
	CU_ASSERT(g.gens > 100);
	cache_ghost_fini(&g);
}

static void test_model(void)
{
	model_run(12, 3, 90, 1000);
	model_run(12, 3, 100, 3000); /* buckets overflow */
	model_run(11, 3, 80, 1000);
	model_run(10, 1, 90, 200);
	model_run(16, 4, 60, 500);
	model_run(13, 8, 90, 3000);
}

/*
 * False positives, with 3 generations live (9 x gen_len added, all
 * near): a key never added is reported by the far test at about 16 x 0.9
 * / 2^9 = 2.8% (the bloom pairs: 0.8-1.6%), by the near test at about 2/3
 * of that. Bounds with room for the sample.
 */
static void test_false_positives(void)
{
	struct cache_ghost g;
	const uint64_t nslots = 1 << 18, probes = 1 << 20;
	uint64_t far = 0, near = 0;

	CU_ASSERT_EQUAL_FATAL(cache_ghost_init(&g, nslots, SALT), 0);
	for (uint64_t k = 0; k < 9 * g.gen_len; k++)
		cache_ghost_add(&g, k, true);
	for (uint64_t i = 0; i < probes; i++) {
		enum cache_ghost_hit h = cache_ghost_test(&g, other_key(i));
		far += h != CACHE_GHOST_NONE;
		near += h == CACHE_GHOST_NEAR;
	}
	double pf = 100.0 * (double)far / (double)probes, pn = 100.0 * (double)near / (double)probes;
	fprintf(stderr, "\n  false positives: far %.3f%%, near %.3f%%, live entries given up %.3f%%",
	        pf, pn, 100.0 * (double)g.evicted / (double)g.adds);
	CU_ASSERT(pf > 2.0 && pf < 3.2);
	CU_ASSERT(pn > 1.3 && pn < 2.2);
	cache_ghost_fini(&g);
	fprintf(stderr, "\n");
}

/*
 * Expiry a generation at a time: keys of the current generation and the
 * one before are near, of the 2 before that far, older ones forgotten
 * (but for false positives and the few a full bucket gave up).
 */
static void test_expiry(void)
{
	struct cache_ghost g;

	CU_ASSERT_EQUAL_FATAL(cache_ghost_init(&g, 1 << 16, SALT), 0);
	const uint64_t L = g.gen_len, n = 6 * L + L / 2; /* half of generation 6 */
	for (uint64_t k = 0; k < n; k++)
		cache_ghost_add(&g, k, true);
	CU_ASSERT_EQUAL(g.gens, 6);
	uint64_t cnt[7][3] = {{0}};
	for (uint64_t k = 0; k < n; k++)
		cnt[k / L][cache_ghost_test(&g, k)]++;
	for (int i = 0; i < 7; i++) {
		uint64_t m = i == 6 ? L / 2 : L;
		fprintf(stderr, "\n  generation %d: near %.2f%%, far %.2f%%", i,
		        100.0 * (double)cnt[i][CACHE_GHOST_NEAR] / (double)m,
		        100.0 * (double)cnt[i][CACHE_GHOST_FAR] / (double)m);
		if (i >= 5) {
			CU_ASSERT(cnt[i][CACHE_GHOST_NEAR] >= m - m / 100);
		} else if (i == 4) {
			/* the oldest live generation: what full buckets gave up is lost */
			CU_ASSERT(cnt[i][CACHE_GHOST_FAR] >= m - m / 10);
		} else {
			CU_ASSERT(cnt[i][CACHE_GHOST_NONE] >= m - m / 25);
		}
	}
	cache_ghost_fini(&g);
	fprintf(stderr, "\n");
}

/* A sequential stream's drop is far only; dropped again near, it is near; older, far again. */
static void test_near_flag(void)
{
	struct cache_ghost g;
	uint64_t moved = 0, far_only = 0, was_near = 0;

	CU_ASSERT_EQUAL_FATAL(cache_ghost_init(&g, 1 << 14, SALT), 0);
	for (uint64_t k = 0; k < 1000; k++) {
		/* (near already if its fingerprint matches a near key's of its bucket) */
		was_near += cache_ghost_test(&g, k) == CACHE_GHOST_NEAR;
		cache_ghost_add(&g, k, false);
		CU_ASSERT_EQUAL(cache_ghost_test(&g, k), was_near ? CACHE_GHOST_NEAR : CACHE_GHOST_FAR);
		was_near = 0;
		cache_ghost_add(&g, k, true);
		CU_ASSERT_EQUAL(cache_ghost_test(&g, k), CACHE_GHOST_NEAR);
		/* A stream's drop of a key still near keeps it near. */
		cache_ghost_add(&g, k, false);
		CU_ASSERT_EQUAL(cache_ghost_test(&g, k), CACHE_GHOST_NEAR);
	}
	/* Two generations later keys 0-999 are far, then dropped as a stream's: far. */
	while (g.gens < 2)
		cache_ghost_add(&g, 1000 + g.adds, true);
	for (uint64_t k = 0; k < 1000; k++) {
		if (cache_ghost_test(&g, k) != CACHE_GHOST_FAR)
			continue;
		moved++;
		cache_ghost_add(&g, k, false);
		far_only += cache_ghost_test(&g, k) == CACHE_GHOST_FAR;
	}
	CU_ASSERT(moved > 950);
	CU_ASSERT_EQUAL(far_only, moved);
	cache_ghost_fini(&g);
}

/* Removal: a removed key is not found (but for a false positive), the keys kept are. */
static void test_remove(void)
{
	struct cache_ghost g;
	uint64_t found = 0, kept = 0, gone = 0;

	CU_ASSERT_EQUAL_FATAL(cache_ghost_init(&g, 1 << 16, SALT), 0);
	const uint64_t n = g.gen_len;
	for (uint64_t k = 0; k < n; k++)
		cache_ghost_add(&g, k, true);
	/* (a key whose entry went with another's of the same fingerprint is gone already) */
	for (uint64_t k = 0; k < n; k += 2)
		gone += !cache_ghost_remove(&g, k);
	CU_ASSERT(gone <= n / 500);
	for (uint64_t k = 0; k < n; k++) {
		enum cache_ghost_hit h = cache_ghost_test(&g, k);
		if (k % 2)
			kept += h == CACHE_GHOST_NEAR;
		else
			found += h != CACHE_GHOST_NONE;
	}
	fprintf(stderr, "\n  %llu keys: %llu removed still found, %llu kept lost\n",
	        (unsigned long long)n, (unsigned long long)found,
	        (unsigned long long)(n / 2 - kept));
	CU_ASSERT(found <= n / 50);
	CU_ASSERT(kept >= n / 2 - n / 100);
	/* Removing what is not there says so. */
	CU_ASSERT_FALSE(cache_ghost_remove(&g, other_key(1)) && cache_ghost_remove(&g, other_key(1)));
	cache_ghost_fini(&g);
}

static const struct hl_test tests[] = {
    {"sizes: 2 bytes per slot, at least one bucket, bad shapes refused", test_sizes},
    {"packed buckets, generations mod 4 and the sweep behave as the plain model", test_model},
    {"false positives 2-3.2% (far), 1.3-2.2% (near) with 3 generations live",
     test_false_positives},
    {"expiry a generation at a time: near, far, forgotten", test_expiry},
    {"a stream's drop is far only; near again only by a near drop", test_near_flag},
    {"removal: the key is gone, the others stay", test_remove},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("cache_ghost", tests);
}
