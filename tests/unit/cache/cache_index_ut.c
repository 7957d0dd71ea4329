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

/* Slots' keys as the core stores them; LUN index i is LUN id i + 1000. */
struct ut_keys {
	struct cache_keys k;
	uint64_t *full; /* what each slot was given */
};

static struct ut_keys *keys_new(uint32_t n)
{
	struct ut_keys *u = calloc(1, sizeof(*u));

	CU_ASSERT_FATAL(u != NULL);
	u->k.block = calloc(n, sizeof(*u->k.block));
	u->k.lunix = calloc(n, sizeof(*u->k.lunix));
	u->full = calloc(n, sizeof(*u->full));
	CU_ASSERT_FATAL(u->k.block && u->k.lunix && u->full);
	for (uint32_t i = 0; i < CACHE_KEY_LUNS; i++)
		u->k.lun[i] = (uint16_t)(i + 1000);
	return u;
}

/* Slot s gets (LUN id 1000 + lunix, block); @return the key. */
static uint64_t keys_set(struct ut_keys *u, uint32_t s, uint8_t lunix, uint32_t block)
{
	u->k.lunix[s] = lunix;
	u->k.block[s] = block;
	u->full[s] = cache_key((uint16_t)(lunix + 1000), block);
	CU_ASSERT_EQUAL(cache_keys_get(&u->k, s), u->full[s]);
	return u->full[s];
}

static void keys_free(struct ut_keys *u)
{
	free(u->k.block);
	free(u->k.lunix);
	free(u->full);
	free(u);
}

static void test_insert_find_remove(void)
{
	enum { N = 5000 };
	struct ut_keys *u = keys_new(N);
	uint64_t *keys = u->full;
	bool *in = calloc(N, sizeof(*in));
	struct cache_index ix;

	CU_ASSERT_FATAL(in != NULL);
	CU_ASSERT_FATAL(cache_index_init(&ix, N, &u->k) == 0);
	for (uint32_t i = 0; i < N; i++)
		keys_set(u, i, (uint8_t)(i % 7), (uint32_t)rnd());
	for (int round = 0; round < 200000; round++) {
		uint32_t s = (uint32_t)(rnd() % N);
		if (in[s]) {
			CU_ASSERT_EQUAL(cache_index_find(&ix, keys[s]), s);
			CU_ASSERT_EQUAL(cache_index_remove(&ix, keys[s]), 0);
			CU_ASSERT_EQUAL(cache_index_find(&ix, keys[s]), HL_CACHE_NO_SLOT);
			CU_ASSERT_EQUAL(cache_index_remove(&ix, keys[s]), -ENOENT);
			in[s] = false;
			/* New content for the slot next time. */
			keys_set(u, s, (uint8_t)(rnd() % 7), (uint32_t)rnd());
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
	keys_free(u);
	free(in);
}

static void test_duplicate_and_full(void)
{
	enum { N = 64 };
	struct ut_keys *u = keys_new(N + 40);
	struct cache_index ix;
	int rc = 0;
	uint32_t i;

	CU_ASSERT_FATAL(cache_index_init(&ix, N, &u->k) == 0);
	for (i = 0; i < N + 40; i++)
		keys_set(u, i, 1, i);
	CU_ASSERT_EQUAL(cache_index_insert(&ix, 0), 0);
	keys_set(u, 1, 1, 0);
	CU_ASSERT_EQUAL(cache_index_insert(&ix, 1), -EEXIST);
	keys_set(u, 1, 1, 1);
	for (i = 1; i < N + 40 && rc == 0; i++)
		rc = cache_index_insert(&ix, i);
	/* The index always keeps one empty entry so probes terminate. */
	CU_ASSERT_EQUAL(rc, -ENOSPC);
	CU_ASSERT_EQUAL(ix.count, ix.cap - 1);
	CU_ASSERT_EQUAL(cache_index_find(&ix, cache_key(1002, 5)), HL_CACHE_NO_SLOT);
	cache_index_fini(&ix);
	keys_free(u);
}

static void test_lun_in_key(void)
{
	struct ut_keys *u = keys_new(4);
	struct cache_index ix;

	CU_ASSERT_FATAL(cache_index_init(&ix, 4, &u->k) == 0);
	keys_set(u, 0, 1, 42);
	keys_set(u, 1, 2, 42);
	keys_set(u, 2, 255, 0xffffffffu);
	CU_ASSERT_EQUAL(cache_index_insert(&ix, 0), 0);
	CU_ASSERT_EQUAL(cache_index_insert(&ix, 1), 0);
	CU_ASSERT_EQUAL(cache_index_insert(&ix, 2), 0);
	CU_ASSERT_EQUAL(cache_index_find(&ix, cache_key(1001, 42)), 0);
	CU_ASSERT_EQUAL(cache_index_find(&ix, cache_key(1002, 42)), 1);
	CU_ASSERT_EQUAL(cache_index_find(&ix, cache_key(1003, 42)), HL_CACHE_NO_SLOT);
	/* The whole 32-bit block and the last LUN index survive the 5-byte store. */
	CU_ASSERT_EQUAL(cache_index_find(&ix, cache_key(1255, 0xffffffffu)), 2);
	CU_ASSERT_EQUAL(cache_index_find(&ix, cache_key(1255, 0x1ffffffffull)), HL_CACHE_NO_SLOT);
	CU_ASSERT_EQUAL(cache_key_lun(cache_key(65535, HL_CACHE_MAX_BLOCK_NR)), 65535);
	CU_ASSERT_EQUAL(cache_key_block(cache_key(65535, HL_CACHE_MAX_BLOCK_NR)),
	                HL_CACHE_MAX_BLOCK_NR);
	cache_index_fini(&ix);
	keys_free(u);
}

static void test_bytes_per_slot(void)
{
	struct cache_index ix;
	struct cache_keys keys = {0};

	CU_ASSERT_FATAL(cache_index_init(&ix, 1 << 20, &keys) == 0);
	double per = (double)cache_index_mem_bytes(&ix) / (double)(1 << 20);
	CU_ASSERT(per <= 4.6); /* load <= 7/8 */
	cache_index_fini(&ix);
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
