/*
 * cache_index.c - the (lun, block) -> slot index: one flat array of 32-bit
 * slot numbers, open addressing with linear probing at a load of at most
 * 3/4, and backward-shift deletion (no tombstones, so lookups never slow
 * down as blocks come and go). Keys are not stored here: a probe reads the
 * key from the slot record, which keeps the index at ~5.3 bytes per slot.
 */
#include <errno.h>
#include <stdlib.h>

#include "cache/cache_internal.h"

/* Map a hash onto [0, cap) without a division or a power-of-two table. */
static inline uint64_t home_of(const struct cache_index *ix, uint64_t key)
{
	return (uint64_t)(((unsigned __int128)cache_hash(key) * ix->cap) >> 64);
}

int cache_index_init(struct cache_index *ix, uint64_t nslots, const struct cache_slot *slots)
{
	if (nslots >= CACHE_INDEX_EMPTY)
		return -EINVAL;
	ix->cap = nslots + nslots / 3 + 8;
	ix->count = 0;
	ix->slots = slots;
	ix->tab = malloc(ix->cap * sizeof(*ix->tab));
	if (!ix->tab)
		return -ENOMEM;
	for (uint64_t i = 0; i < ix->cap; i++)
		ix->tab[i] = CACHE_INDEX_EMPTY;
	return 0;
}

void cache_index_fini(struct cache_index *ix)
{
	free(ix->tab);
	ix->tab = NULL;
	ix->cap = ix->count = 0;
}

uint32_t cache_index_find(const struct cache_index *ix, uint64_t key)
{
	uint64_t i = home_of(ix, key);

	for (;;) {
		uint32_t s = ix->tab[i];
		if (s == CACHE_INDEX_EMPTY)
			return HL_CACHE_NO_SLOT;
		if (ix->slots[s].key == key)
			return s;
		if (++i == ix->cap)
			i = 0;
	}
}

int cache_index_insert(struct cache_index *ix, uint32_t slot)
{
	uint64_t key = ix->slots[slot].key;
	uint64_t i;

	/* One slot less than cap stays empty so probes always terminate. */
	if (ix->count + 1 >= ix->cap)
		return -ENOSPC;
	i = home_of(ix, key);
	for (;;) {
		uint32_t s = ix->tab[i];
		if (s == CACHE_INDEX_EMPTY)
			break;
		if (ix->slots[s].key == key)
			return -EEXIST;
		if (++i == ix->cap)
			i = 0;
	}
	ix->tab[i] = slot;
	ix->count++;
	return 0;
}

static inline uint64_t dist(const struct cache_index *ix, uint64_t from, uint64_t to)
{
	return to >= from ? to - from : to + ix->cap - from;
}

int cache_index_remove(struct cache_index *ix, uint64_t key)
{
	uint64_t i = home_of(ix, key);

	for (;;) {
		uint32_t s = ix->tab[i];
		if (s == CACHE_INDEX_EMPTY)
			return -ENOENT;
		if (ix->slots[s].key == key)
			break;
		if (++i == ix->cap)
			i = 0;
	}
	/*
	 * Backward shift: pull later members of the probe run into the hole
	 * when the hole lies between their home and where they sit now.
	 */
	uint64_t hole = i, j = i;
	for (;;) {
		if (++j == ix->cap)
			j = 0;
		uint32_t s = ix->tab[j];
		if (s == CACHE_INDEX_EMPTY)
			break;
		uint64_t home = home_of(ix, ix->slots[s].key);
		if (dist(ix, home, j) >= dist(ix, hole, j)) {
			ix->tab[hole] = s;
			hole = j;
		}
	}
	ix->tab[hole] = CACHE_INDEX_EMPTY;
	ix->count--;
	return 0;
}

size_t cache_index_mem_bytes(const struct cache_index *ix)
{
	return ix->cap * sizeof(*ix->tab);
}
