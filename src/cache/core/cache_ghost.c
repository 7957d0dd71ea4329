/*
 * cache_ghost.c - the RAM window's ghost (struct cache_ghost): which keys
 * the window dropped lately, and of those which were dropped "near" (the
 * ghost of rule 8) or only further back (the far ghost of rule 10), in one
 * table of fingerprints with generation tags instead of two pairs of
 * rotating bloom filters.
 *
 * Adds are counted in generations of gen_len adds, numbered mod 4. The
 * table is nbuckets buckets of `ways` entries; a key hashes to one bucket
 * and is an entry there: a fingerprint of ebits - 3 bits (never 0: an
 * entry of 0 is empty), the 2-bit number of the generation that added it
 * last, and a bit saying it was dropped as a block the window could have
 * promoted (not a sequential stream's). An entry of the current
 * generation or the 2 before is live; an older one is dead (free for an
 * add). Dead entries are zeroed by an incremental sweep (a bucket an add)
 * before their generation number comes round again. A key is
 *
 *  - in the far ghost while its entry is live: it was dropped within the
 *    last 2..3 x gen_len adds, whichever bucket it is in;
 *  - in the ghost while its entry is of the current generation or the one
 *    before (1..2 x gen_len adds) and has the bit.
 *
 * Keys dropped together are forgotten together (a generation at a time),
 * as with the bloom pairs (1..2 x their capacity): a multi-block request
 * re-read comes back whole or not at all. A FIFO per bucket without tags
 * (position = age) forgot each block at its own time: same RAM, 7 points
 * less hit ratio where requests span many blocks (docs/cache-policy.md,
 * "16 bytes again").
 *
 * A full bucket gives an add the entry of its oldest generation, so a
 * bucket that gets more than its share forgets its oldest keys early;
 * gen_len is set so that live entries fill the table to about 90%. A key
 * never added matches a live entry's fingerprint at most at ways x
 * 2^-(ebits - 3) (16 ways of 9 bits, ~90% live: 2.8%; the ghost tests only
 * its two generations).
 *
 * The window never removes a key from its ghosts (a bloom filter cannot);
 * cache_ghost_remove() can, for the unit tests and any later rule.
 * RAM only: nothing of it is persisted, a restart starts it empty.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache/core/core_internal.h"

#define GEN_LIVE 3 /* generations live: the current one and the 2 before */
#define GEN_NEAR 2 /* of them, the ghost's: the current one and the one before */

/* Entry i of bucket w: ebits bits at bit i x ebits, which may cross a word. */
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

/* An entry: fingerprint << 3 | generation << 1 | near. */
static inline uint32_t ent_gen(uint32_t e)
{
	return e >> 1 & 3;
}

/* Generations since the entry's (0: the current one); GEN_LIVE or more: dead. */
static inline uint32_t ent_age(const struct cache_ghost *g, uint32_t e)
{
	return e ? (g->cur - ent_gen(e)) & 3 : GEN_LIVE;
}

int cache_ghost_init(struct cache_ghost *g, uint64_t nslots, uint64_t salt)
{
	uint32_t ebits = CACHE_GHOST_ENTRY_BITS, words = CACHE_GHOST_BUCKET_WORDS;
	uint32_t load = CACHE_GHOST_LOAD_PCT, bps = CACHE_GHOST_BITS_PER_SLOT;

#ifdef HL_GHOST_TUNE
	/* A throwaway variant build (docs/cache-policy.md, "16 bytes again"). */
	const char *s;
	if ((s = getenv("HL_GHOST_EBITS")))
		ebits = (uint32_t)atoi(s);
	if ((s = getenv("HL_GHOST_WORDS")))
		words = (uint32_t)atoi(s);
	if ((s = getenv("HL_GHOST_LOAD")))
		load = (uint32_t)atoi(s);
	if ((s = getenv("HL_GHOST_BPS")))
		bps = (uint32_t)atoi(s);
#endif
	return cache_ghost_init_sized(g, nslots, salt, ebits, words, load, bps);
}

int cache_ghost_init_sized(struct cache_ghost *g, uint64_t nslots, uint64_t salt, uint32_t ebits,
                           uint32_t words, uint32_t load_pct, uint32_t bits_per_slot)
{
	memset(g, 0, sizeof(*g));
	if (ebits < 5 || ebits > 24 || !words || words > CACHE_GHOST_MAX_WORDS || !bits_per_slot ||
	    !load_pct || load_pct > 100)
		return -EINVAL;
	g->ebits = ebits;
	g->emask = (1u << ebits) - 1;
	g->words = words;
	g->ways = words * 64 / ebits;
	g->salt = salt;
	/* Down to the bits a slot may have, at least one bucket. */
	g->nbuckets = HL_MAX(nslots * bits_per_slot / (64ull * words), 1);
	/* Live entries (3 generations) fill load_pct of the table. */
	g->gen_len = HL_MAX(g->nbuckets * g->ways * load_pct / (100 * GEN_LIVE), 1);
	/* Buckets swept an add: the sweep ends within a generation. */
	g->sweep_per = (g->nbuckets + g->gen_len - 1) / g->gen_len;
	g->sweep = g->nbuckets; /* nothing to sweep in the first generation */
	g->b = calloc(g->nbuckets * words, sizeof(uint64_t));
	return g->b ? 0 : -ENOMEM;
}

void cache_ghost_fini(struct cache_ghost *g)
{
	free(g->b);
	memset(g, 0, sizeof(*g));
}

/* The key's bucket and its fingerprint (already shifted to bits 3..). */
static inline uint64_t *ghost_where(const struct cache_ghost *g, uint64_t key, uint32_t *fp)
{
	uint64_t h = cache_hash(key ^ g->salt);
	uint64_t i = (uint64_t)(((unsigned __int128)h * g->nbuckets) >> 64);
	uint32_t f = (uint32_t)h & (g->emask >> 3);

	*fp = (f ? f : 1) << 3;
	return g->b + i * g->words;
}

/* The position of a live entry of fp in bucket w, or ways. */
static inline uint32_t ghost_find(const struct cache_ghost *g, const uint64_t *w, uint32_t fp)
{
	for (uint32_t i = 0; i < g->ways; i++) {
		uint32_t e = ent_get(g, w, i);
		if ((e & ~7u) == fp && ent_age(g, e) < GEN_LIVE)
			return i;
	}
	return g->ways;
}

/*
 * Zero the entries of the generation that comes next (dead since the
 * current one began), a few buckets an add, so that none is left when its
 * number is reused.
 */
static void ghost_sweep(struct cache_ghost *g)
{
	uint32_t next = (g->cur + 1) & 3;

	for (uint32_t k = 0; k < g->sweep_per && g->sweep < g->nbuckets; k++, g->sweep++) {
		uint64_t *w = g->b + g->sweep * g->words;
		for (uint32_t i = 0; i < g->ways; i++) {
			uint32_t e = ent_get(g, w, i);
			if (e && ent_gen(e) == next)
				ent_put(g, w, i, 0);
		}
	}
}

void cache_ghost_add(struct cache_ghost *g, uint64_t key, bool near)
{
	uint32_t fp, p, e, free = UINT32_MAX, oldest = 0, oldest_age = 0;
	uint64_t *w;

	if (!g->b)
		return;
	if (g->in_gen >= g->gen_len) {
		while (g->sweep < g->nbuckets) /* (done already unless sweep_per was short) */
			ghost_sweep(g);
		g->cur = (g->cur + 1) & 3;
		g->in_gen = 0;
		g->sweep = 0;
		g->gens++;
	}
	ghost_sweep(g);
	g->in_gen++;
	g->adds++;
	w = ghost_where(g, key, &fp);
	for (p = 0; p < g->ways; p++) {
		e = ent_get(g, w, p);
		uint32_t age = ent_age(g, e);
		if (age >= GEN_LIVE) {
			if (free == UINT32_MAX)
				free = p;
		} else if ((e & ~7u) == fp) {
			/* Dropped again: of this generation, still near if it was. */
			near = near || ((e & 1) && age < GEN_NEAR);
			break;
		} else if (age > oldest_age || (age == oldest_age && !p)) {
			oldest = p;
			oldest_age = age;
		}
	}
	if (p == g->ways) {
		p = free != UINT32_MAX ? free : oldest;
		if (free == UINT32_MAX)
			g->evicted++;
	}
	ent_put(g, w, p, fp | g->cur << 1 | near);
}

enum cache_ghost_hit cache_ghost_test(const struct cache_ghost *g, uint64_t key)
{
	uint32_t fp, p, e;
	const uint64_t *w;

	if (!g->b)
		return CACHE_GHOST_NONE;
	w = ghost_where(g, key, &fp);
	p = ghost_find(g, w, fp);
	if (p == g->ways)
		return CACHE_GHOST_NONE;
	e = ent_get(g, w, p);
	return (e & 1) && ent_age(g, e) < GEN_NEAR ? CACHE_GHOST_NEAR : CACHE_GHOST_FAR;
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
	ent_put(g, w, p, 0);
	return true;
}

size_t cache_ghost_mem_bytes(const struct cache_ghost *g)
{
	return (size_t)g->nbuckets * g->words * sizeof(uint64_t);
}
