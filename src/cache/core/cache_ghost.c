/*
 * cache_ghost.c - the RAM window's ghost (struct cache_ghost): which keys
 * the window dropped lately, and of those which were dropped "near" (the
 * ghost of rule 8) or only further back (the far ghost of rule 10), in one
 * table of fingerprints instead of two pairs of rotating bloom filters.
 *
 * The table is nbuckets buckets of `ways` entries; a key hashes to one
 * bucket and is an entry there: `ebits` - 1 bits of fingerprint (never 0,
 * 0 is an empty entry) and one bit saying it was dropped as a block the
 * window could have promoted (not a sequential stream's). A bucket keeps
 * its entries newest first: an add shifts the bucket by one entry and the
 * oldest one falls out (or, for a key whose fingerprint is in the bucket
 * already, moves that entry to the front). So the age of an entry is its
 * position, and no generation tag, sweep or bulk clear is needed:
 *
 *  - far ghost: the key's fingerprint is anywhere in its bucket, about the
 *    last nbuckets x ways different keys dropped;
 *  - ghost: it is among the bucket's newest near_ways entries and has the
 *    bit, about the last nbuckets x near_ways.
 *
 * A bucket sees keys at the same rate as any other, so its last `ways`
 * keys span about the same time as the table's window (a gamma spread,
 * about 1 / sqrt(ways) around it; the bloom pairs' window jumped between
 * 1x and 2x their capacity). A key not added is reported by a bucket whose
 * entries hold its fingerprint: at most ways / 2^(ebits - 1) (0.78% at
 * 16 ways of 11 bits, the far ghost's test; the ghost tests 8 ways: 0.39%).
 * The bloom pairs: about 0.8% each filter, 0.8-1.6% a pair.
 *
 * The window never removes a key from its ghosts (a bloom filter cannot);
 * cache_ghost_remove() can, for the unit tests and any later rule.
 * RAM only: nothing of it is persisted, a restart starts it empty.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache/core/core_internal.h"

#ifdef HL_GHOST_TUNE
#include <stdio.h>
#endif

/* Entry i (0: newest) of bucket w: ebits bits at bit i x ebits, which may cross a word. */
static inline uint32_t ent_get(const struct cache_ghost *g, const uint64_t *w, uint32_t i)
{
	uint32_t bit = i * g->ebits, q = bit / 64, r = bit % 64;
	uint64_t v = w[q] >> r;

	if (r + g->ebits > 64)
		v |= w[q + 1] << (64 - r);
	return (uint32_t)v & g->emask;
}

static inline void ent_put(const struct cache_ghost *g, uint64_t *w, uint32_t i, uint32_t e)
{
	uint32_t bit = i * g->ebits, q = bit / 64, r = bit % 64;

	w[q] = (w[q] & ~((uint64_t)g->emask << r)) | (uint64_t)e << r;
	if (r + g->ebits > 64) {
		uint32_t lo = 64 - r;
		w[q + 1] = (w[q + 1] & ~((uint64_t)g->emask >> lo)) | (uint64_t)e >> lo;
	}
}

int cache_ghost_init(struct cache_ghost *g, uint64_t nslots, uint64_t salt)
{
	uint32_t ebits = CACHE_GHOST_ENTRY_BITS, words = CACHE_GHOST_BUCKET_WORDS;
	uint32_t near = 0, bps = CACHE_GHOST_BITS_PER_SLOT;

#ifdef HL_GHOST_TUNE
	/* A throwaway variant build (docs/cache-policy.md, "16 bytes again"). */
	const char *s;
	if ((s = getenv("HL_GHOST_EBITS")))
		ebits = (uint32_t)atoi(s);
	if ((s = getenv("HL_GHOST_WORDS")))
		words = (uint32_t)atoi(s);
	if ((s = getenv("HL_GHOST_NEAR")))
		near = (uint32_t)atoi(s);
	if ((s = getenv("HL_GHOST_BPS")))
		bps = (uint32_t)atoi(s);
#endif
	return cache_ghost_init_sized(g, nslots, salt, ebits, words, near, bps);
}

int cache_ghost_init_sized(struct cache_ghost *g, uint64_t nslots, uint64_t salt, uint32_t ebits,
                           uint32_t words, uint32_t near_ways, uint32_t bits_per_slot)
{
	memset(g, 0, sizeof(*g));
	if (ebits < 4 || ebits > 24 || !words || words > CACHE_GHOST_MAX_WORDS || !bits_per_slot)
		return -EINVAL;
	g->ebits = ebits;
	g->emask = (1u << ebits) - 1;
	g->words = words;
	g->ways = words * 64 / ebits;
	g->near_ways = near_ways ? HL_MIN(near_ways, g->ways) : g->ways / 2;
	g->salt = salt;
	/* Down to the bits a slot may have; at least 64 buckets (a tiny cache's few keys). */
	g->nbuckets = HL_MAX(nslots * bits_per_slot / (64ull * words), 64);
	g->b = calloc(g->nbuckets * words, sizeof(uint64_t));
	return g->b ? 0 : -ENOMEM;
}

void cache_ghost_fini(struct cache_ghost *g)
{
	free(g->b);
	memset(g, 0, sizeof(*g));
}

/* The key's bucket and its fingerprint (bits 1.., never 0). */
static inline uint64_t *ghost_where(const struct cache_ghost *g, uint64_t key, uint32_t *fp)
{
	uint64_t h = cache_hash(key ^ g->salt);
	uint64_t i = (uint64_t)(((unsigned __int128)h * g->nbuckets) >> 64);
	uint32_t f = (uint32_t)h & (g->emask >> 1);

	*fp = (f ? f : 1) << 1;
	return g->b + i * g->words;
}

/* The position of fp in bucket w, or ways. */
static inline uint32_t ghost_find(const struct cache_ghost *g, const uint64_t *w, uint32_t fp)
{
	for (uint32_t i = 0; i < g->ways; i++)
		if ((ent_get(g, w, i) & ~1u) == fp)
			return i;
	return g->ways;
}

void cache_ghost_add(struct cache_ghost *g, uint64_t key, bool near)
{
	uint32_t fp, p, e;
	uint64_t *w;

	if (!g->b)
		return;
	w = ghost_where(g, key, &fp);
	p = ghost_find(g, w, fp);
	if (p < g->ways) {
		/* Dropped again: to the front, still near if it was. */
		e = ent_get(g, w, p);
		near = near || ((e & 1) && p < g->near_ways);
	} else {
		/* New: the whole bucket moves up one entry, the oldest falls out. */
		uint32_t top = g->ways * g->ebits - 64 * (g->words - 1); /* bits used of the last word */
		for (uint32_t i = g->words - 1; i > 0; i--)
			w[i] = w[i] << g->ebits | w[i - 1] >> (64 - g->ebits);
		w[0] <<= g->ebits;
		if (top < 64)
			w[g->words - 1] &= (1ull << top) - 1;
		p = 0;
	}
	for (; p > 0; p--)
		ent_put(g, w, p, ent_get(g, w, p - 1));
	ent_put(g, w, 0, fp | near);
	g->adds++;
}

enum cache_ghost_hit cache_ghost_test(const struct cache_ghost *g, uint64_t key)
{
	uint32_t fp, p;
	const uint64_t *w;

	if (!g->b)
		return CACHE_GHOST_NONE;
	w = ghost_where(g, key, &fp);
	p = ghost_find(g, w, fp);
	if (p == g->ways)
		return CACHE_GHOST_NONE;
	return p < g->near_ways && (ent_get(g, w, p) & 1) ? CACHE_GHOST_NEAR : CACHE_GHOST_FAR;
}

bool cache_ghost_remove(struct cache_ghost *g, uint64_t key)
{
	uint32_t fp, p;
	uint64_t *w;

	if (!g->b)
		return false;
	w = ghost_where(g, key, &fp);
	p = ghost_find(g, w, fp);
	if (p == g->ways)
		return false;
	/* The older entries move up one: their ages (positions) shrink by one, as if never added. */
	for (; p + 1 < g->ways; p++)
		ent_put(g, w, p, ent_get(g, w, p + 1));
	ent_put(g, w, g->ways - 1, 0);
	return true;
}

size_t cache_ghost_mem_bytes(const struct cache_ghost *g)
{
	return (size_t)g->nbuckets * g->words * sizeof(uint64_t);
}
