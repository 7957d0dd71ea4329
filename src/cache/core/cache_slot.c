/*
 * cache_slot.c - the side tables of the slots (core_internal.h, "slots"):
 * the busy table (pins, writers and generation of the slots ios use) and
 * the valid bits of partly valid slots, with the valid-bit functions the
 * core's files use. A slot itself is only its key and its state byte, so
 * per-slot RAM does not grow with the block size or with what a few slots
 * need: both tables hold entries only for the slots that need one, open
 * addressing with linear probing at a load of at most 1/2, backward-shift
 * deletion, doubling when full.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache/core/core_internal.h"

#define TAB_MIN 64u
#define NONE    UINT32_MAX

/* Distance from home h to position i in a table of cap entries. */
static inline uint32_t dist(uint32_t h, uint32_t i, uint32_t cap)
{
	return (i - h) & (cap - 1);
}

/* ---- busy slots ---- */

static int busy_grow(struct cache_busy *b)
{
	uint32_t ncap = b->cap ? b->cap * 2 : TAB_MIN;
	struct cache_busy_ent *t;

	if (ncap < b->cap)
		return -ENOMEM;
	t = malloc((size_t)ncap * sizeof(*t));
	if (!t)
		return -ENOMEM;
	for (uint32_t i = 0; i < ncap; i++)
		t[i].slot = NONE;
	for (uint32_t j = 0; j < b->cap; j++) {
		if (b->tab[j].slot == NONE)
			continue;
		uint32_t i = cache_slot_home(b->tab[j].slot, ncap);
		while (t[i].slot != NONE)
			i = (i + 1) & (ncap - 1);
		t[i] = b->tab[j];
	}
	free(b->tab);
	b->tab = t;
	b->cap = ncap;
	return 0;
}

struct cache_busy_ent *cache_busy_get(struct hl_cache_core *c, uint32_t s)
{
	struct cache_busy *b = &c->busy;
	struct cache_busy_ent *e = cache_is_busy(c, s) ? cache_busy_find(c, s) : NULL;
	uint32_t i;

	if (e)
		return e;
	if (b->limit && b->n >= b->limit)
		return NULL;
	if ((b->n + 1) * 2 > b->cap && busy_grow(b))
		return NULL;
	for (i = cache_slot_home(s, b->cap); b->tab[i].slot != NONE; i = (i + 1) & (b->cap - 1))
		;
	b->tab[i] = (struct cache_busy_ent){.slot = s, .gen = b->next_gen++};
	b->n++;
	c->meta[s] |= CACHE_M_BUSY;
	return &b->tab[i];
}

void cache_busy_put(struct hl_cache_core *c, uint32_t s)
{
	cache_busy_put_ent(c, cache_is_busy(c, s) ? cache_busy_find(c, s) : NULL);
}

void cache_busy_put_ent(struct hl_cache_core *c, struct cache_busy_ent *e)
{
	struct cache_busy *b = &c->busy;
	uint32_t hole, j, m = b->cap - 1, s;

	if (!e || e->pins || e->writers || e->writing)
		return;
	s = e->slot;
	hole = j = (uint32_t)(e - b->tab);
	for (;;) {
		j = (j + 1) & m;
		if (b->tab[j].slot == NONE)
			break;
		uint32_t h = cache_slot_home(b->tab[j].slot, b->cap);
		if (dist(h, j, b->cap) >= dist(hole, j, b->cap)) {
			b->tab[hole] = b->tab[j];
			hole = j;
		}
	}
	b->tab[hole].slot = NONE;
	b->n--;
	c->meta[s] &= (uint8_t)~CACHE_M_BUSY;
}

/* ---- valid bits of partly valid slots ---- */

static int64_t partial_pos(const struct hl_cache_core *c, uint32_t s)
{
	const struct cache_partial *p = &c->partial;

	if (!p->n)
		return -1;
	for (uint32_t i = cache_slot_home(s, p->cap);; i = (i + 1) & (p->cap - 1)) {
		if (p->slot[i] == s)
			return i;
		if (p->slot[i] == NONE)
			return -1;
	}
}

const uint8_t *cache_partial_find(const struct hl_cache_core *c, uint32_t s)
{
	int64_t i = partial_pos(c, s);

	return i < 0 ? NULL : c->partial.bits + (uint64_t)i * c->vbytes;
}

static int partial_grow(struct hl_cache_core *c)
{
	struct cache_partial *p = &c->partial;
	uint32_t ncap = p->cap ? p->cap * 2 : TAB_MIN;
	uint32_t *ns;
	uint8_t *nb;

	if (ncap < p->cap)
		return -ENOMEM;
	ns = malloc((size_t)ncap * sizeof(*ns));
	nb = malloc((size_t)ncap * c->vbytes);
	if (!ns || !nb) {
		free(ns);
		free(nb);
		return -ENOMEM;
	}
	memset(ns, 0xff, (size_t)ncap * sizeof(*ns));
	for (uint32_t j = 0; j < p->cap; j++) {
		if (p->slot[j] == NONE)
			continue;
		uint32_t i = cache_slot_home(p->slot[j], ncap);
		while (ns[i] != NONE)
			i = (i + 1) & (ncap - 1);
		ns[i] = p->slot[j];
		memcpy(nb + (uint64_t)i * c->vbytes, p->bits + (uint64_t)j * c->vbytes, c->vbytes);
	}
	free(p->slot);
	free(p->bits);
	p->slot = ns;
	p->bits = nb;
	p->cap = ncap;
	return 0;
}

/* Slot s's bits, a new (zeroed) entry if it has none. NULL: no memory. */
static uint8_t *partial_get(struct hl_cache_core *c, uint32_t s)
{
	struct cache_partial *p = &c->partial;
	int64_t pos = partial_pos(c, s);
	uint32_t i;

	if (pos >= 0)
		return p->bits + (uint64_t)pos * c->vbytes;
	if (p->limit && p->n >= p->limit)
		return NULL;
	if ((p->n + 1) * 2 > p->cap && partial_grow(c))
		return NULL;
	for (i = cache_slot_home(s, p->cap); p->slot[i] != NONE; i = (i + 1) & (p->cap - 1))
		;
	p->slot[i] = s;
	memset(p->bits + (uint64_t)i * c->vbytes, 0, c->vbytes);
	p->n++;
	return p->bits + (uint64_t)i * c->vbytes;
}

static void partial_del(struct hl_cache_core *c, uint32_t s)
{
	struct cache_partial *p = &c->partial;
	int64_t pos = partial_pos(c, s);
	uint32_t hole, j, m = p->cap - 1;

	if (pos < 0)
		return;
	hole = j = (uint32_t)pos;
	for (;;) {
		j = (j + 1) & m;
		if (p->slot[j] == NONE)
			break;
		uint32_t h = cache_slot_home(p->slot[j], p->cap);
		if (dist(h, j, p->cap) >= dist(hole, j, p->cap)) {
			p->slot[hole] = p->slot[j];
			memcpy(p->bits + (uint64_t)hole * c->vbytes,
			       p->bits + (uint64_t)j * c->vbytes, c->vbytes);
			hole = j;
		}
	}
	p->slot[hole] = NONE;
	p->n--;
}

/* ---- valid bits ---- */

void cache_valid_get(const struct hl_cache_core *c, uint32_t s, uint8_t *v)
{
	const uint8_t *p;

	memset(v, 0, c->vbytes);
	if (cache_valid_full(c, s))
		cache_vset(v, 0, c->spb);
	else if ((p = cache_partial_find(c, s)))
		memcpy(v, p, c->vbytes);
}

/*
 * Store v as s's valid bits: full, empty, or an entry of the partial
 * table. shrinking: v has fewer bits than s had; if RAM cannot hold the
 * entry then, s holds nothing valid instead, and whatever its record may
 * claim is unclaimed (a write to the block must then sync first, as for
 * any sector cleared in RAM). Growing without room leaves s as it was
 * (empty: a slot with an entry never needs a new one).
 */
static void valid_store(struct hl_cache_core *c, uint32_t s, const uint8_t *v, bool shrinking)
{
	uint32_t k = cache_vcount(v, 0, c->spb);
	uint8_t *p;

	if (k == c->spb) {
		partial_del(c, s);
		c->meta[s] |= CACHE_M_FULL;
		return;
	}
	c->meta[s] &= (uint8_t)~CACHE_M_FULL;
	if (!k) {
		partial_del(c, s);
		return;
	}
	p = partial_get(c, s);
	if (p) {
		memcpy(p, v, c->vbytes);
		return;
	}
	if (shrinking) {
		cache_mark_dirty(c, s);
		cache_slot_unclaim(c, s);
	}
}

void cache_valid_set(struct hl_cache_core *c, uint32_t s, uint32_t first, uint32_t n)
{
	uint8_t v[HL_CACHE_MAX_BLOCK / HL_CACHE_SECTOR / 8];

	if (cache_valid_full(c, s) || !n)
		return;
	if (n == c->spb) {
		/* The whole block (every 4K block's set): no bits to merge. */
		if (c->partial.n)
			partial_del(c, s);
		c->meta[s] |= CACHE_M_FULL;
		return;
	}
	cache_valid_get(c, s, v);
	cache_vset(v, first, n);
	valid_store(c, s, v, false);
}

void cache_valid_clear(struct hl_cache_core *c, uint32_t s, uint32_t first, uint32_t n)
{
	uint8_t v[HL_CACHE_MAX_BLOCK / HL_CACHE_SECTOR / 8];

	if (!n || cache_valid_empty(c, s))
		return;
	if (n == c->spb) {
		cache_valid_reset(c, s);
		return;
	}
	cache_valid_get(c, s, v);
	cache_vclear(v, first, n);
	valid_store(c, s, v, true);
}

void cache_valid_reset(struct hl_cache_core *c, uint32_t s)
{
	c->meta[s] &= (uint8_t)~CACHE_M_FULL;
	if (c->partial.n)
		partial_del(c, s);
}

void cache_valid_put(struct hl_cache_core *c, uint32_t s, const uint8_t *v)
{
	uint8_t w[HL_CACHE_MAX_BLOCK / HL_CACHE_SECTOR / 8];

	memcpy(w, v, c->vbytes);
	/* Bits past the block's sectors are meaningless: clear them. */
	if (c->spb < 8)
		w[0] &= (uint8_t)((1u << c->spb) - 1);
	cache_valid_reset(c, s);
	valid_store(c, s, w, false);
}
