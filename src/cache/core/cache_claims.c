/*
 * cache_claims.c - the policy core's side of the on-device slot records:
 * what a slot's record says (slot_get, masking update buffer sectors),
 * restoring slots at load, the dirty map and metadata epoch, the
 * DISK_VALID / CLAIMS_OTHER flags, and the stale claims that make a write
 * wait for a record flush (hl_cache_core_write_needs_sync). Used by
 * cache_meta.c; the format is in docs/cache-format.md.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache/core/core_internal.h"

bool hl_cache_core_slot_get(const struct hl_cache_core *c, uint32_t slot,
                            struct hl_cache_slot_rec *rec)
{
	memset(rec, 0, sizeof(*rec));
	if (slot >= c->nslots)
		return false;
	rec->gen = cache_slot_gen(c, slot);
	if (!cache_is_used(c, slot) || cache_valid_empty(c, slot))
		return false;
	rec->lun = cache_key_lun(cache_slot_key(c, slot));
	rec->block = cache_key_block(cache_slot_key(c, slot));
	cache_valid_get(c, slot, rec->valid);
	uint64_t ui = cache_ub_find(c, slot);
	if (ui != UINT64_MAX) {
		/* Sectors whose current data is only in the RAM update buffer. */
		bool any = false;
		for (uint32_t i = 0; i < c->vbytes; i++) {
			rec->valid[i] &= (uint8_t)~cache_ub_bits(c, ui)[i];
			any |= rec->valid[i] != 0;
		}
		return any;
	}
	return true;
}

int hl_cache_core_slot_restore(struct hl_cache_core *c, uint32_t slot,
                               const struct hl_cache_slot_rec *rec)
{
	struct cache_lun *l;
	struct cache_part *pt;
	uint64_t key;

	if (slot >= c->nslots || rec->block > CACHE_KEY_MAX_BLOCK)
		return -EINVAL;
	l = c->luns[rec->lun];
	if (!l)
		return -ENOENT;
	pt = &c->parts[l->part];
	if (slot < pt->first || slot >= pt->first + pt->n || cache_bit_test(c->takenmap, slot))
		return -EINVAL;
	/* Written or invalidated since a lazy restore began: the record may be stale. */
	if (cache_restore_covers(c, rec->lun, rec->block)) {
		l->rs_dropped++;
		return -ESTALE;
	}
	key = cache_key(rec->lun, rec->block);
	/* One probe: the insert finds a duplicate (keys[] of a FREE slot means nothing). */
	cache_slot_set_key(c, slot, key);
	if (cache_index_insert(&c->ix, slot))
		return -EEXIST;
	cache_slot_taken(c, pt, slot);
	cache_valid_put(c, slot, rec->valid);
	c->meta[slot] |= CACHE_M_DISK_VALID;
	if (cache_valid_empty(c, slot)) {
		cache_slot_release(c, slot);
		return -EINVAL;
	}
	return 0;
}

uint32_t hl_cache_core_next_dirty(struct hl_cache_core *c, uint64_t *cursor)
{
	uint64_t i = *cursor;

	/*
	 * Groups of 4096 slots (64 words) that saw no mark since their last
	 * walk are skipped whole: a periodic sync of a big idle cache does not
	 * read its whole dirty map.
	 */
	while (i < c->nslots) {
		uint64_t g = i / 4096, gw = c->dirtygrp[g / 64] >> (g % 64);
		if (!gw) {
			i = (g / 64 + 1) * 64 * 4096;
			continue;
		}
		if (!(gw & 1)) {
			i = (g + (uint64_t)__builtin_ctzll(gw)) * 4096;
			continue;
		}
		uint64_t gend = HL_MIN((g + 1) * 4096, c->nslots);
		while (i < gend) {
			uint64_t w = c->dirtymap[i / 64] >> (i % 64);
			if (w) {
				i += (uint64_t)__builtin_ctzll(w);
				if (i >= gend)
					break;
				cache_bit_clear(c->dirtymap, i);
				*cursor = i + 1;
				return (uint32_t)i;
			}
			i = (i / 64 + 1) * 64;
		}
		/* Nothing left in the group (marks behind the cursor get it set again). */
		bool clean = true;
		for (uint64_t w = g * 64; w < HL_DIV_ROUND_UP(gend, 64) && clean; w++)
			clean = !c->dirtymap[w];
		if (clean)
			cache_bit_clear(c->dirtygrp, g);
		i = gend;
	}
	*cursor = c->nslots;
	return HL_CACHE_NO_SLOT;
}

void hl_cache_core_slot_set_dirty(struct hl_cache_core *c, uint32_t slot)
{
	if (slot < c->nslots)
		cache_mark_dirty(c, slot);
}

uint64_t hl_cache_core_meta_epoch(const struct hl_cache_core *c)
{
	return c->meta_epoch;
}

void hl_cache_core_slot_claim_pending(struct hl_cache_core *c, uint32_t slot)
{
	/*
	 * Setting the flag at the snapshot, not when the write completes, closes
	 * a window: a snapshot of (block Y, sector k valid) in flight while Y's
	 * slot went to block X would otherwise see no claim, skip the barrier,
	 * and let X's data land under a record that is about to claim Y.
	 */
	if (slot < c->nslots)
		c->meta[slot] |= CACHE_M_DISK_VALID;
}

/* ---- the stale claims' keys, counted (struct hl_cache_core: skey) ---- */

static inline uint64_t skey_home(const struct hl_cache_core *c, uint64_t key)
{
	return cache_hash(key ^ 0x2545f4914f6cdd1dull) & (c->skey_cap - 1);
}

/* @return the entry of key, or UINT64_MAX. */
static uint64_t skey_find(const struct hl_cache_core *c, uint64_t key)
{
	if (!c->skey_used)
		return UINT64_MAX;
	for (uint64_t i = skey_home(c, key);; i = (i + 1) & (c->skey_cap - 1)) {
		if (!c->skey[i].n)
			return UINT64_MAX;
		if (c->skey[i].key == key)
			return i;
	}
}

/* Twice the entries (1,024 at first). @return false: no memory. */
static bool skey_grow(struct hl_cache_core *c)
{
	uint64_t cap = c->skey_cap ? c->skey_cap * 2 : 1024, ocap = c->skey_cap;
	struct cache_stale_key *t = calloc(cap, sizeof(*t)), *old = c->skey;

	if (!t)
		return false;
	c->skey = t;
	c->skey_cap = cap;
	for (uint64_t j = 0; j < ocap; j++) {
		if (!old[j].n)
			continue;
		uint64_t i = skey_home(c, old[j].key);
		while (t[i].n)
			i = (i + 1) & (cap - 1);
		t[i] = old[j];
	}
	free(old);
	return true;
}

static void skey_inc(struct hl_cache_core *c, uint64_t key)
{
	uint64_t i;

	if (c->skey_broken)
		return;
	if ((c->skey_used + 1) * 2 > c->skey_cap && !skey_grow(c)) {
		c->skey_broken = true; /* the check scans the list until it is empty */
		return;
	}
	for (i = skey_home(c, key); c->skey[i].n; i = (i + 1) & (c->skey_cap - 1))
		if (c->skey[i].key == key) {
			c->skey[i].n++;
			return;
		}
	c->skey[i] = (struct cache_stale_key){.key = key, .n = 1};
	c->skey_used++;
}

static void skey_dec(struct hl_cache_core *c, uint64_t key)
{
	uint64_t i, j, mask = c->skey_cap - 1;

	if (c->skey_broken)
		return;
	i = skey_find(c, key);
	if (i == UINT64_MAX || --c->skey[i].n)
		return;
	/* Empty now: shift back the entries of the run after it that may move. */
	for (j = (i + 1) & mask; c->skey[j].n; j = (j + 1) & mask) {
		uint64_t h = skey_home(c, c->skey[j].key);
		/* Entry j stays when its home lies cyclically in (i, j]. */
		if (i <= j ? (i < h && h <= j) : (i < h || h <= j))
			continue;
		c->skey[i] = c->skey[j];
		i = j;
	}
	c->skey[i].n = 0;
	c->skey_used--;
}

void hl_cache_core_slot_drop_claimed(struct hl_cache_core *c, uint32_t slot,
                                     const struct hl_cache_slot_rec *rec)
{
	if (slot >= c->nslots)
		return;
	c->meta[slot] |= CACHE_M_DISK_VALID | CACHE_M_CLAIMS_OTHER;
	cache_mark_dirty(c, slot);
	if (rec->block <= HL_CACHE_MAX_BLOCK_NR)
		cache_stale_add(c, cache_key(rec->lun, rec->block), slot);
}

/* ---- the stale claims by slot (struct hl_cache_core: sidx) ---- */

static inline uint64_t sidx_home(const struct hl_cache_core *c, uint32_t slot)
{
	return cache_hash((uint64_t)slot ^ 0x9e3779b97f4a7c15ull) & (c->sidx_cap - 1);
}

/* @return the entry of slot, or UINT64_MAX. */
static uint64_t sidx_find(const struct hl_cache_core *c, uint32_t slot)
{
	if (!c->sidx_used)
		return UINT64_MAX;
	for (uint64_t i = sidx_home(c, slot);; i = (i + 1) & (c->sidx_cap - 1)) {
		if (c->sidx[i].head == CACHE_STALE_NONE)
			return UINT64_MAX;
		if (c->sidx[i].slot == slot)
			return i;
	}
}

/* Twice the entries (1,024 at first). @return false: no memory. */
static bool sidx_grow(struct hl_cache_core *c)
{
	uint64_t cap = c->sidx_cap ? c->sidx_cap * 2 : 1024, ocap = c->sidx_cap;
	struct cache_stale_slot *t = malloc(cap * sizeof(*t)), *old = c->sidx;

	if (!t)
		return false;
	for (uint64_t i = 0; i < cap; i++)
		t[i].head = CACHE_STALE_NONE;
	c->sidx = t;
	c->sidx_cap = cap;
	for (uint64_t j = 0; j < ocap; j++) {
		if (old[j].head == CACHE_STALE_NONE)
			continue;
		uint64_t i = sidx_home(c, old[j].slot);
		while (t[i].head != CACHE_STALE_NONE)
			i = (i + 1) & (cap - 1);
		t[i] = old[j];
	}
	free(old);
	return true;
}

/* Entry i holds no claim any more: shift back the entries of the run after it that may move. */
static void sidx_del(struct hl_cache_core *c, uint64_t i)
{
	uint64_t j, mask = c->sidx_cap - 1;

	for (j = (i + 1) & mask; c->sidx[j].head != CACHE_STALE_NONE; j = (j + 1) & mask) {
		uint64_t h = sidx_home(c, c->sidx[j].slot);
		if (i <= j ? (i < h && h <= j) : (i < h || h <= j))
			continue;
		c->sidx[i] = c->sidx[j];
		i = j;
	}
	c->sidx[i].head = CACHE_STALE_NONE;
	c->sidx_used--;
}

/* Chain stale[e] first among its slot's claims (no memory: drop the index, scan until empty). */
static void sidx_link(struct hl_cache_core *c, uint32_t e)
{
	uint32_t slot = c->stale[e].slot;
	uint64_t i;

	if (c->sidx_broken)
		return;
	if ((c->sidx_used + 1) * 2 > c->sidx_cap && !sidx_grow(c)) {
		free(c->sidx);
		c->sidx = NULL;
		c->sidx_cap = c->sidx_used = 0;
		c->sidx_broken = true;
		return;
	}
	for (i = sidx_home(c, slot); c->sidx[i].head != CACHE_STALE_NONE;
	     i = (i + 1) & (c->sidx_cap - 1))
		if (c->sidx[i].slot == slot) {
			c->stale[e].next = c->sidx[i].head;
			c->sidx[i].head = e;
			return;
		}
	c->sidx[i] = (struct cache_stale_slot){.slot = slot, .head = e};
	c->sidx_used++;
}

/* Free stale[e] (unlinked from its slot's chain by the caller). */
static void stale_put(struct hl_cache_core *c, uint32_t e)
{
	skey_dec(c, c->stale[e].key);
	c->stale[e].epoch = 0;
	c->stale[e].next = c->stale_free;
	c->stale_free = e;
	c->nstale--;
}

void hl_cache_core_slot_persisted(struct hl_cache_core *c, uint32_t slot, bool claims_valid,
                                  uint64_t epoch)
{
	if (slot >= c->nslots)
		return;
	bool other = false;

	if (claims_valid)
		c->meta[slot] |= CACHE_M_DISK_VALID;
	else
		c->meta[slot] &= (uint8_t)~CACHE_M_DISK_VALID;
	/*
	 * The snapshot (taken at epoch) made every claim of the slot noted
	 * before it void: the record written claims nothing or the slot's
	 * block of then. Claims noted after it stay.
	 */
	if (!c->sidx_broken) {
		uint64_t h = sidx_find(c, slot);
		if (h != UINT64_MAX) {
			/* (no entry of sidx moves until sidx_del: link stays valid) */
			uint32_t *link = &c->sidx[h].head;
			while (*link != CACHE_STALE_NONE) {
				uint32_t e = *link;
				if (c->stale[e].epoch >= epoch) {
					other = true; /* released (or dropped) after the snapshot */
					link = &c->stale[e].next;
					continue;
				}
				*link = c->stale[e].next;
				stale_put(c, e);
			}
			if (c->sidx[h].head == CACHE_STALE_NONE)
				sidx_del(c, h);
		}
	} else {
		for (uint64_t i = 0; i < c->stale_end; i++) {
			if (!c->stale[i].epoch || c->stale[i].slot != slot)
				continue;
			if (c->stale[i].epoch < epoch)
				stale_put(c, (uint32_t)i);
			else
				other = true;
		}
	}
	/*
	 * A record that claims nothing claims no other block. One that claims
	 * the snapshot's block claims the current one unless the slot changed
	 * hands since the snapshot, which left a newer stale claim: tracked
	 * (other), or not (no memory: overflow_epoch at or after the snapshot).
	 */
	if (!claims_valid || (!other && (!c->stale_overflow || c->overflow_epoch < epoch)))
		c->meta[slot] &= (uint8_t)~CACHE_M_CLAIMS_OTHER;
	if (!c->nstale) {
		/* (every count is 0 now: tables that could not grow start over) */
		c->stale_end = 0;
		c->stale_free = CACHE_STALE_NONE;
		c->sidx_broken = false;
		if (c->skey_broken) {
			free(c->skey);
			c->skey = NULL;
			c->skey_cap = c->skey_used = 0;
			c->skey_broken = false;
		}
	}
}

bool cache_stale_room_init(struct hl_cache_core *c, uint64_t n, struct cache_stale_room *r)
{
	uint64_t cap = c->stale_cap ? c->stale_cap : 256;

	memset(r, 0, sizeof(*r));
	/* The list: realloc moves its pages (no copy of a big one); new ones fault in as used. */
	while (cap < c->stale_end + n && cap * 2 <= CACHE_STALE_NONE)
		cap *= 2;
	if (cap > c->stale_cap && (!c->stale_limit || cap <= c->stale_limit)) {
		struct cache_stale *t = realloc(c->stale, cap * sizeof(*t));
		if (t) {
			c->stale = t;
			c->stale_cap = cap;
		}
	}
	/* The hashes: new tables, made ready between chunks, installed at the end. */
	for (cap = c->skey_cap ? c->skey_cap : 1024; cap < (c->skey_used + n) * 2;)
		cap *= 2;
	if (!c->skey_broken && cap > c->skey_cap) {
		r->skey = calloc(cap, sizeof(*r->skey));
		r->skey_cap = r->skey ? cap : 0;
	}
	for (cap = c->sidx_cap ? c->sidx_cap : 1024; cap < (c->sidx_used + n) * 2;)
		cap *= 2;
	if (!c->sidx_broken && cap > c->sidx_cap) {
		r->sidx = malloc(cap * sizeof(*r->sidx));
		r->sidx_cap = r->sidx ? cap : 0;
	}
	return r->skey || r->sidx;
}

bool cache_stale_room_step(struct cache_stale_room *r, uint64_t bytes)
{
	uint64_t kb = r->skey_cap * sizeof(*r->skey), sb = r->sidx_cap * sizeof(*r->sidx);

	/* skey: calloc's pages, faulted in (written) a page at a time. */
	for (; bytes && r->at < kb; r->at += 4096, bytes -= HL_MIN(bytes, 4096))
		((volatile uint8_t *)r->skey)[r->at] = 0;
	/* sidx: every entry empty. */
	for (; bytes && r->at < kb + sb; r->at += sizeof(*r->sidx), bytes -= HL_MIN(bytes, 8))
		r->sidx[(r->at - kb) / sizeof(*r->sidx)].head = CACHE_STALE_NONE;
	return r->at >= kb + sb;
}

void cache_stale_room_install(struct hl_cache_core *c, struct cache_stale_room *r)
{
	/*
	 * Claims noted between the chunks went to the tables in use (which may
	 * have grown): they move over now, when the new ones are still bigger.
	 */
	if (r->skey && !c->skey_broken && r->skey_cap > c->skey_cap &&
	    c->skey_used * 2 <= r->skey_cap) {
		struct cache_stale_key *old = c->skey;
		uint64_t ocap = c->skey_cap;
		c->skey = r->skey;
		c->skey_cap = r->skey_cap;
		r->skey = NULL;
		for (uint64_t j = 0; j < ocap; j++) {
			if (!old[j].n)
				continue;
			uint64_t i = skey_home(c, old[j].key);
			while (c->skey[i].n)
				i = (i + 1) & (c->skey_cap - 1);
			c->skey[i] = old[j];
		}
		free(old);
	}
	if (r->sidx && !c->sidx_broken && r->sidx_cap > c->sidx_cap &&
	    c->sidx_used * 2 <= r->sidx_cap) {
		struct cache_stale_slot *old = c->sidx;
		uint64_t ocap = c->sidx_cap;
		c->sidx = r->sidx;
		c->sidx_cap = r->sidx_cap;
		r->sidx = NULL;
		for (uint64_t j = 0; j < ocap; j++) {
			if (old[j].head == CACHE_STALE_NONE)
				continue;
			uint64_t i = sidx_home(c, old[j].slot);
			while (c->sidx[i].head != CACHE_STALE_NONE)
				i = (i + 1) & (c->sidx_cap - 1);
			c->sidx[i] = old[j];
		}
		free(old);
	}
	free(r->skey);
	free(r->sidx);
	memset(r, 0, sizeof(*r));
}

/* A slot whose record may claim key stops holding it: remember the stale claim. */
void cache_stale_add(struct hl_cache_core *c, uint64_t key, uint32_t slot)
{
	uint32_t e = c->stale_free;

	if (e != CACHE_STALE_NONE) {
		c->stale_free = c->stale[e].next;
	} else {
		if (c->stale_end == c->stale_cap) {
			uint64_t cap = c->stale_cap ? c->stale_cap * 2 : 256;
			struct cache_stale *n = NULL;
			/* (indices are 32 bits, CACHE_STALE_NONE excluded) */
			if (cap <= CACHE_STALE_NONE && (!c->stale_limit || cap <= c->stale_limit))
				n = realloc(c->stale, cap * sizeof(*n));
			if (!n) {
				/*
				 * Cannot track it: every write syncs until a sync
				 * snapshotted after this claim made the dirty records
				 * durable, this slot's among them (marked here too, so
				 * that does not rest on the caller).
				 */
				c->stale_overflow = true;
				c->overflow_epoch = ++c->meta_epoch;
				if (slot < c->nslots)
					cache_mark_dirty(c, slot);
				return;
			}
			c->stale = n;
			c->stale_cap = cap;
		}
		e = (uint32_t)c->stale_end++;
	}
	c->meta_epoch++;
	c->stale[e] = (struct cache_stale){
	    .key = key, .slot = slot, .epoch = c->meta_epoch, .next = CACHE_STALE_NONE};
	c->nstale++;
	skey_inc(c, key);
	sidx_link(c, e);
}

void hl_cache_core_records_durable(struct hl_cache_core *c, uint64_t epoch)
{
	/*
	 * Every untracked claim came before the snapshot: its slot was dirty
	 * then (cache_stale_add marks it), so its record was rewritten from
	 * RAM without the claim and is durable now (docs/cache-format.md).
	 */
	if (c->stale_overflow && c->overflow_epoch < epoch)
		c->stale_overflow = false;
}

void hl_cache_core_test_stale_limit(struct hl_cache_core *c, uint64_t max)
{
	c->stale_limit = max;
}

void hl_cache_core_test_inval_chunk(struct hl_cache_core *c, uint32_t n)
{
	c->inval_chunk = n;
}

bool hl_cache_core_write_needs_sync(const struct hl_cache_core *c, uint16_t lun, uint64_t off,
                                    uint64_t len)
{
	uint64_t b0, b1;

	/*
	 * A lazy restore: a write to blocks the superblock's copy of the filter
	 * does not cover yet (asked before or after its write_begin noted them)
	 * waits for the sync that writes the filter (cache_restore.c).
	 */
	if (c->rs.on) {
		uint64_t last = len > UINT64_MAX - off ? UINT64_MAX : off + len - 1;
		if (len ? !cache_restore_durable(c, lun, off >> c->block_shift,
		                                 last >> c->block_shift)
		        : c->rs.dirty)
			return true;
	}
	if (!c->nstale && !c->stale_overflow)
		return false;
	if (c->stale_overflow || !len)
		return c->stale_overflow;
	b0 = off >> c->block_shift;
	b1 = (off + len - 1) >> c->block_shift;
	for (uint64_t b = b0; b <= b1 && b - b0 < 4096; b++) {
		uint64_t key = cache_key(lun, b);
		if (!c->skey_broken) {
			if (skey_find(c, key) != UINT64_MAX)
				return true;
			continue;
		}
		for (uint64_t i = 0; i < c->stale_end; i++)
			if (c->stale[i].epoch && c->stale[i].key == key)
				return true;
	}
	return b1 - b0 >= 4096; /* huge ranges: be safe */
}
