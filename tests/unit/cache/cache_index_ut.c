/*
 * cache_index_ut.c - the (lun, block) -> slot index: insert/find/remove
 * against a reference model, backward-shift deletion keeping every probe
 * run reachable, duplicate and full-table errors, bytes per slot.
 */
#include <errno.h>
#include <stdlib.h>

#include "cache/core/core_internal.h"
#include "hl_test.h"

static uint64_t rng_state = 88172645463325252ull;

static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static void test_insert_find_remove(void)
{
	enum { N = 5000 };
	uint64_t *keys = calloc(N, sizeof(*keys));
	bool *in = calloc(N, sizeof(*in));
	struct cache_index ix;

	CU_ASSERT_FATAL(keys && in);
	CU_ASSERT_FATAL(cache_index_init(&ix, N, keys) == 0);
	for (uint32_t i = 0; i < N; i++)
		keys[i] = cache_key((uint16_t)(i % 7), rnd() & 0xffffffffffull);
	for (int round = 0; round < 200000; round++) {
		uint32_t s = (uint32_t)(rnd() % N);
		if (in[s]) {
			CU_ASSERT_EQUAL(cache_index_find(&ix, keys[s]), s);
			CU_ASSERT_EQUAL(cache_index_remove(&ix, keys[s]), 0);
			CU_ASSERT_EQUAL(cache_index_find(&ix, keys[s]), HL_CACHE_NO_SLOT);
			CU_ASSERT_EQUAL(cache_index_remove(&ix, keys[s]), -ENOENT);
			in[s] = false;
			/* New content for the slot next time. */
			keys[s] = cache_key((uint16_t)(rnd() % 7), rnd() & 0xffffffffffull);
		} else {
			CU_ASSERT_EQUAL(cache_index_insert(&ix, s), 0);
			in[s] = true;
		}
	}
	/* Every member is still reachable after all the backward shifts. */
	uint64_t members = 0;
	for (uint32_t s = 0; s < N; s++) {
		if (in[s]) {
			members++;
			CU_ASSERT_EQUAL(cache_index_find(&ix, keys[s]), s);
		}
	}
	CU_ASSERT_EQUAL(ix.count, members);
	cache_index_fini(&ix);
	free(keys);
	free(in);
}

static void test_duplicate_and_full(void)
{
	enum { N = 64 };
	uint64_t keys[N + 40];
	struct cache_index ix;
	int rc = 0;
	uint32_t i;

	memset(keys, 0, sizeof(keys));
	CU_ASSERT_FATAL(cache_index_init(&ix, N, keys) == 0);
	for (i = 0; i < N + 40; i++)
		keys[i] = cache_key(1, i);
	CU_ASSERT_EQUAL(cache_index_insert(&ix, 0), 0);
	keys[1] = keys[0];
	CU_ASSERT_EQUAL(cache_index_insert(&ix, 1), -EEXIST);
	keys[1] = cache_key(1, 1);
	for (i = 1; i < N + 40 && rc == 0; i++)
		rc = cache_index_insert(&ix, i);
	/* The index always keeps one empty entry so probes terminate. */
	CU_ASSERT_EQUAL(rc, -ENOSPC);
	CU_ASSERT_EQUAL(ix.count, ix.cap - 1);
	CU_ASSERT_EQUAL(cache_index_find(&ix, cache_key(2, 5)), HL_CACHE_NO_SLOT);
	cache_index_fini(&ix);
}

static void test_lun_in_key(void)
{
	uint64_t keys[4] = {cache_key(1, 42), cache_key(2, 42)};
	struct cache_index ix;

	CU_ASSERT_FATAL(cache_index_init(&ix, 4, keys) == 0);
	CU_ASSERT_EQUAL(cache_index_insert(&ix, 0), 0);
	CU_ASSERT_EQUAL(cache_index_insert(&ix, 1), 0);
	CU_ASSERT_EQUAL(cache_index_find(&ix, cache_key(1, 42)), 0);
	CU_ASSERT_EQUAL(cache_index_find(&ix, cache_key(2, 42)), 1);
	CU_ASSERT_EQUAL(cache_index_find(&ix, cache_key(3, 42)), HL_CACHE_NO_SLOT);
	CU_ASSERT_EQUAL(cache_key_lun(cache_key(65535, HL_CACHE_MAX_BLOCK_NR)), 65535);
	CU_ASSERT_EQUAL(cache_key_block(cache_key(65535, HL_CACHE_MAX_BLOCK_NR)),
	                HL_CACHE_MAX_BLOCK_NR);
	cache_index_fini(&ix);
}

static void test_bytes_per_slot(void)
{
	struct cache_index ix;
	uint64_t *keys = calloc(1 << 20, sizeof(*keys));

	CU_ASSERT_FATAL(keys != NULL);
	CU_ASSERT_FATAL(cache_index_init(&ix, 1 << 20, keys) == 0);
	double per = (double)cache_index_mem_bytes(&ix) / (double)(1 << 20);
	CU_ASSERT(per <= 5.4);
	cache_index_fini(&ix);
	free(keys);
}

static const struct hl_test tests[] = {
    {"insert/find/remove against a model", test_insert_find_remove},
    {"duplicate key and full table", test_duplicate_and_full},
    {"lun is part of the key", test_lun_in_key},
    {"index bytes per slot", test_bytes_per_slot},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("cache_index", tests);
}
