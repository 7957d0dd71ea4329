/*
 * index_probe.c - the cost of the (lun, block) -> slot index's load
 * (cache_index.c, CACHE_INDEX_LOAD_DIV): a full index of N slots (every
 * slot holds a block, the index's highest load), then lookups of cached
 * keys, of keys not cached (a miss probes to the end of its run), and
 * churn (a remove and an insert, as an eviction does). Built against
 * cache_index.c itself, so the load is a compile-time choice:
 *
 *   cc -O2 -D_GNU_SOURCE -DCACHE_INDEX_LOAD_DIV=15 -I build -I include -I src \
 *      tests/bench/index_probe.c -o index_probe && ./index_probe 4194304
 *
 * Keys are random (even block numbers cached, odd ones looked up as
 * misses). Prints ns per operation and the mean entries probed per miss.
 */
#include "config.h"

#include "cache/core/cache_index.c"

#include <stdio.h>
#include <time.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

int main(int argc, char **argv)
{
	uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 0) : 4u << 20, seed = 88172645463325252ull;
	uint64_t ops = 8u << 20, found = 0, probes = 0;
	struct cache_keys k = {0};
	struct cache_index ix;
	double t;

	k.block = calloc(n, sizeof(*k.block));
	k.lunix = calloc(n, 1);
	if (!k.block || !k.lunix || cache_index_init(&ix, n, &k))
		return 1;
	/* random even block numbers cached (odd ones never) */
	for (uint64_t s = 0; s < n; s++) {
		do
			k.block[s] = (uint32_t)rnd(&seed) & ~1u;
		while (cache_index_insert(&ix, (uint32_t)s) == -EEXIST);
	}
	t = now();
	for (uint64_t i = 0; i < ops; i++)
		found += cache_index_find(&ix, cache_keys_get(&k, (uint32_t)(rnd(&seed) % n))) !=
		         HL_CACHE_NO_SLOT;
	printf("load %.4f (1/%d spare): hit  %.1f ns\n", (double)n / ix.cap, CACHE_INDEX_LOAD_DIV,
	       (now() - t) * 1e9 / ops);
	t = now();
	for (uint64_t i = 0; i < ops; i++)
		found += cache_index_find(&ix, cache_key(0, (uint32_t)rnd(&seed) | 1)) != HL_CACHE_NO_SLOT;
	printf("load %.4f (1/%d spare): miss %.1f ns\n", (double)n / ix.cap, CACHE_INDEX_LOAD_DIV,
	       (now() - t) * 1e9 / ops);
	/* entries a miss probes: to the first empty entry from its home */
	for (uint64_t i = 0; i < (1u << 20); i++) {
		uint64_t j = home_of(&ix, cache_key(0, (uint32_t)rnd(&seed) | 1));
		while (ix.tab[j] != CACHE_INDEX_EMPTY) {
			probes++;
			j = j + 1 == ix.cap ? 0 : j + 1;
		}
		probes++;
	}
	printf("load %.4f (1/%d spare): miss probes %.1f entries\n", (double)n / ix.cap,
	       CACHE_INDEX_LOAD_DIV, (double)probes / (1u << 20));
	t = now();
	for (uint64_t i = 0; i < ops / 4; i++) {
		uint32_t s = (uint32_t)(rnd(&seed) % n);
		if (cache_index_remove(&ix, cache_keys_get(&k, s)))
			return 1;
		do
			k.block[s] = (uint32_t)rnd(&seed) & ~1u;
		while (cache_index_insert(&ix, s) == -EEXIST);
	}
	printf("load %.4f (1/%d spare): remove + insert %.1f ns  (%llu)\n", (double)n / ix.cap,
	       CACHE_INDEX_LOAD_DIV, (now() - t) * 1e9 / (ops / 4), (unsigned long long)found);
	cache_index_fini(&ix);
	return 0;
}
