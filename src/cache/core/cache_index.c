/*
 * cache_index.c - the (lun, block) -> slot index: one flat array of 32-bit
 * slot numbers, open addressing with linear probing at a load of at most
 * 7/8 (CACHE_INDEX_LOAD_DIV), and backward-shift deletion (no tombstones,
 * so lookups never slow down as blocks come and go). Keys are not stored
 * here: a probe reads the key from the slots' keys (struct cache_keys),
 * which keeps the index at ~4.6 bytes per slot. The bits of an entry that
 * the slot number does not need carry a few hash bits of the key, so most
 * probes of a miss never touch the keys. An entry holds slot + 1, so that
 * a zeroed table is an empty one: the table comes from calloc and a start
 * touches none of its pages.
 */
#include <errno.h>
#include <stdlib.h>

#include "cache/core/core_internal.h"

/* Map a hash onto [0, cap) without a division or a power-of-two table. */
static inline uint64_t home_of_hash(const struct cache_index *ix, uint64_t h)
{
	return (uint64_t)(((unsigned __int128)h * ix->cap) >> 64);
}

/*
 * The index hash is one multiplication (Fibonacci hashing): the home comes
 * from the high bits of the product, which depend on every key bit.
 */
static inline uint64_t ix_hash(uint64_t key)
{
	return key * 0x9e3779b97f4a7c15ull;
}

static inline uint64_t home_of(const struct cache_index *ix, uint64_t key)
{
	return home_of_hash(ix, ix_hash(key));
}

/* Tag bits come from the middle of the product; the home from its high end. */
static inline uint32_t tag_of(const struct cache_index *ix, uint64_t h)
{
	if (ix->slot_bits >= 32)
		return 0; /* no spare bits (2^31 slots and more) */
	return (uint32_t)((h >> 24) & (UINT32_MAX >> ix->slot_bits)) << ix->slot_bits;
}

static inline uint32_t entry_slot(const struct cache_index *ix, uint32_t e)
{
	return (e & ix->slot_mask) - 1;
}

int cache_index_init(struct cache_index *ix, uint64_t nslots, const struct cache_keys *keys)
{
	if (nslots >= UINT32_MAX - 1)
		return -EINVAL;
	ix->cap = nslots + nslots / CACHE_INDEX_LOAD_DIV + 8;
	ix->count = 0;
	/* slot + 1 (1 .. nslots) needs slot_bits. */
	ix->slot_bits = 1;
	while (ix->slot_bits < 32 && ((1ull << ix->slot_bits) - 1) <= nslots)
		ix->slot_bits++;
	ix->slot_mask = ix->slot_bits == 32 ? UINT32_MAX : (uint32_t)((1ull << ix->slot_bits) - 1);
	ix->keys = keys;
	ix->tab = calloc(ix->cap, sizeof(*ix->tab));
	return ix->tab ? 0 : -ENOMEM;
}

void cache_index_fini(struct cache_index *ix)
{
	free(ix->tab);
	ix->tab = NULL;
	ix->cap = ix->count = 0;
}

uint32_t cache_index_find(const struct cache_index *ix, uint64_t key)
{
	uint64_t h = ix_hash(key), i = home_of_hash(ix, h);
	uint32_t tag = tag_of(ix, h);

	for (;;) {
		uint32_t e = ix->tab[i];
		if (e == CACHE_INDEX_EMPTY)
			return HL_CACHE_NO_SLOT;
		if ((e & ~ix->slot_mask) == tag &&
		    cache_keys_get(ix->keys, entry_slot(ix, e)) == key)
			return entry_slot(ix, e);
		if (++i == ix->cap)
			i = 0;
	}
}

const void *cache_index_home_addr(const struct cache_index *ix, uint64_t key)
{
	return &ix->tab[home_of(ix, key)];
}

void cache_index_prefetch(const struct cache_index *ix, uint64_t key)
{
	__builtin_prefetch(&ix->tab[home_of(ix, key)]);
}

int cache_index_insert(struct cache_index *ix, uint32_t slot)
{
	uint64_t key = cache_keys_get(ix->keys, slot);
	uint64_t h = ix_hash(key), i;
	uint32_t tag = tag_of(ix, h);

	/* One slot less than cap stays empty so probes always terminate. */
	if (ix->count + 1 >= ix->cap)
		return -ENOSPC;
	if (slot >= ix->slot_mask)
		return -EINVAL; /* slot + 1 would not fit */
	i = home_of_hash(ix, h);
	for (;;) {
		uint32_t e = ix->tab[i];
		if (e == CACHE_INDEX_EMPTY)
			break;
		if ((e & ~ix->slot_mask) == tag &&
		    cache_keys_get(ix->keys, entry_slot(ix, e)) == key)
			return -EEXIST;
		if (++i == ix->cap)
			i = 0;
	}
	ix->tab[i] = tag | (slot + 1);
	ix->count++;
	return 0;
}

static inline uint64_t dist(const struct cache_index *ix, uint64_t from, uint64_t to)
{
	return to >= from ? to - from : to + ix->cap - from;
}

int cache_index_remove(struct cache_index *ix, uint64_t key)
{
	uint64_t h = ix_hash(key), i = home_of_hash(ix, h);
	uint32_t tag = tag_of(ix, h);

	for (;;) {
		uint32_t e = ix->tab[i];
		if (e == CACHE_INDEX_EMPTY)
			return -ENOENT;
		if ((e & ~ix->slot_mask) == tag &&
		    cache_keys_get(ix->keys, entry_slot(ix, e)) == key)
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
		uint32_t e = ix->tab[j];
		if (e == CACHE_INDEX_EMPTY)
			break;
		uint64_t home = home_of(ix, cache_keys_get(ix->keys, entry_slot(ix, e)));
		if (dist(ix, home, j) >= dist(ix, hole, j)) {
			ix->tab[hole] = e;
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
