/*
 * cache_core.c - the policy core's object: create/destroy, the slot life
 * cycle, CLOCK eviction per partition, LUNs and their partitions, the stats
 * and introspection. The rest of the core: cache_read.c (read planning,
 * admission, the RAM window), cache_io.c (io_start/io_end), cache_write.c
 * (the write and invalidation rules), cache_claims.c (on-device claim
 * bookkeeping) and cache_ub.c (the RAM update buffer); the state and
 * helpers they share are in core_internal.h. Pure functions over RAM
 * state: no I/O, no locks, no clock. hotlun-sim and the daemon's engine
 * run exactly this code.
 *
 * Fill-race rule: every change of a slot's content (reuse, write, range
 * invalidation) bumps slot->gen. An io carries the gen it saw as its
 * ticket; a fill or update is installed only when the ticket still matches
 * and no origin write to the block is in flight, otherwise it is dropped.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache/core/core_internal.h"
#include "hotlun/util.h"

void hl_cache_params_default(struct hl_cache_params *p)
{
	memset(p, 0, sizeof(*p));
	p->block_size = 64 * 1024;
	p->admit = HL_ADMIT_FREQ;
	p->seq_bypass = 1024 * 1024;
	p->write_mode = HL_CACHE_WRITE_UPDATE;
	p->fill_whole_block = true;
	p->admit_free = true;
	p->window_bytes = HL_CACHE_WINDOW_AUTO;
	p->write_budget_pct = HL_CACHE_WRITE_BUDGET_DEFAULT;
}

/* ---- create / destroy ---- */

/*
 * The ghosts' key shift: frequency admission (the default) at blocks below
 * CACHE_GHOST_REGION remembers regions (core_internal.h); other policies,
 * and larger blocks, remember blocks. nhit:2 lost up to 0.4 points at 4
 * KiB blocks with regions (docs/cache-policy.md, "16 bytes again"); like
 * its sketch, its ghosts are not in the default's RAM figure.
 */
static uint32_t ghost_shift_of(uint32_t block_size, enum hl_admit_kind kind)
{
	uint32_t shift = 0;

	while (kind == HL_ADMIT_FREQ && (block_size << shift) < CACHE_GHOST_REGION)
		shift++;
	return shift;
}

/* The two ghosts for policy kind, empty. @return 0 or -ENOMEM (nothing left allocated). */
static int ghosts_make(const struct hl_cache_core *c, enum hl_admit_kind kind,
                       struct cache_bloom2 *ghost, struct cache_bloom2 *far, uint32_t *shift)
{
	uint64_t gcap = c->nslots, fcap = c->nslots;

	*shift = ghost_shift_of(c->p.block_size, kind);
	if (*shift) {
		gcap = c->nslots * 100 / CACHE_GHOST_REGION_DIV;
		fcap = c->nslots * 100 / CACHE_GHOST_REGION_FAR_DIV;
	}
	memset(ghost, 0, sizeof(*ghost));
	memset(far, 0, sizeof(*far));
	if (cache_bloom2_init_sized(ghost, gcap / 2 + 8, 0x7f4a7c159e3779b9ull,
	                            CACHE_GHOST_BITS_PER_KEY, CACHE_GHOST_HASHES) ||
	    cache_bloom2_init_sized(far, fcap + 8, 0x2545f4914f6cdd1dull, CACHE_GHOST_BITS_PER_KEY,
	                            CACHE_GHOST_HASHES)) {
		cache_bloom2_fini(ghost);
		cache_bloom2_fini(far);
		return -ENOMEM;
	}
	return 0;
}

int hl_cache_core_create(const struct hl_cache_params *p, struct hl_cache_core **out)
{
	struct hl_cache_core *c;
	uint64_t nslots;
	uint32_t w0 = 0;

	if (p->block_size < HL_CACHE_MIN_BLOCK || p->block_size > HL_CACHE_MAX_BLOCK ||
	    (p->block_size & (p->block_size - 1)))
		return -EINVAL;
	nslots = p->capacity / p->block_size;
	if (nslots < 1 || nslots >= UINT32_MAX - 1)
		return -EINVAL;
	if ((unsigned)p->admit >= HL_ADMIT__COUNT || p->write_mode > HL_CACHE_WRITE_INVALIDATE ||
	    p->write_budget_pct > 100)
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->p = *p;
	c->nslots = nslots;
	c->call = 1; /* partitions start with exhausted == 0 */
	c->stale_free = CACHE_STALE_NONE;
	if (p->window_bytes == HL_CACHE_WINDOW_AUTO) {
		/*
		 * 1% of the cache, at least 16 MiB and at least 256 blocks, at
		 * most 64 MiB of RAM. The window sees reuse per block: 16 MiB is
		 * 256 blocks of 64 KiB but only 16 of 1 MiB, too few to hold a
		 * block until its next read (docs/cache-policy.md, rule 4).
		 */
		uint64_t w = nslots / 100;
		w = HL_MAX(w, (16ull << 20) / p->block_size);
		w = HL_MAX(w, 256);
		w = HL_MIN(w, (64ull << 20) / p->block_size);
		/* Room to borrow up to 3/4 of a default update buffer (rule 9). */
		c->nwin = w + (HL_CACHE_UPDATE_BUFFER_DEFAULT / 4 * 3) / p->block_size;
		w0 = (uint32_t)w;
	} else {
		c->nwin = p->window_bytes / p->block_size;
	}
	c->ntotal = nslots + c->nwin;
	if (c->ntotal >= UINT32_MAX - 1) {
		free(c);
		return -EINVAL;
	}
	c->spb = p->block_size / HL_CACHE_SECTOR;
	c->vbytes = c->spb >= 8 ? c->spb / 8 : 1;
	c->block_shift = (uint32_t)__builtin_ctz(p->block_size);
	/*
	 * Everything per slot comes zeroed from calloc and means "free, empty,
	 * clean": a start writes none of it, so its pages cost RAM only once
	 * slots are used.
	 */
	c->keys.block = calloc(c->ntotal, sizeof(*c->keys.block));
	c->keys.lunix = calloc(c->ntotal, sizeof(*c->keys.lunix));
	c->meta = calloc(c->ntotal, sizeof(*c->meta));
	c->wflags = calloc(c->nwin + 1, sizeof(*c->wflags));
	c->takenmap = calloc(HL_DIV_ROUND_UP(c->ntotal, 64), sizeof(uint64_t));
	c->dirtymap = calloc(HL_DIV_ROUND_UP(c->ntotal, 64), sizeof(uint64_t));
	c->dirtygrp =
	    calloc(HL_DIV_ROUND_UP(HL_DIV_ROUND_UP(c->ntotal, 4096), 64), sizeof(uint64_t));
	c->lun_used = calloc(HL_CACHE_MAX_LUNS, sizeof(*c->lun_used));
	c->luns = calloc(HL_CACHE_MAX_LUNS, sizeof(*c->luns));
	c->wip = calloc(CACHE_WIP_BUCKETS, sizeof(*c->wip));
	if (!c->keys.block || !c->keys.lunix || !c->meta || !c->wflags || !c->takenmap ||
	    !c->dirtymap || !c->dirtygrp || !c->lun_used || !c->luns || !c->wip ||
	    cache_index_init(&c->ix, c->ntotal, &c->keys)) {
		hl_cache_core_destroy(c);
		return -ENOMEM;
	}
	if (hl_admit_create(p->admit, nslots, p->block_size, p->admit_param, &c->admit)) {
		hl_cache_core_destroy(c);
		return -EINVAL;
	}
	c->win = (struct cache_part){
	    .first = (uint32_t)nslots,
	    .n = w0 ? w0 : (uint32_t)c->nwin,
	    .hand = (uint32_t)nslots,
	    .nfree = w0 ? w0 : (uint32_t)c->nwin,
	    .free_hint = (uint32_t)nslots,
	    .owner = -3,
	};
	if (ghosts_make(c, p->admit, &c->ghost, &c->far_ghost, &c->ghost_shift) ||
	    (w0 && cache_split_init(c, w0, (uint32_t)c->nwin))) {
		hl_cache_core_destroy(c);
		return -ENOMEM;
	}
	c->parts[0] = (struct cache_part){
	    .first = 0,
	    .n = (uint32_t)nslots,
	    .hand = 0,
	    .nfree = (uint32_t)nslots,
	    .free_hint = 0,
	    .owner = -1,
	};
	c->nparts = 1;
	*out = c;
	return 0;
}

int hl_cache_core_set_admission(struct hl_cache_core *c, enum hl_admit_kind kind, uint32_t param)
{
	struct cache_bloom2 ghost, far;
	struct hl_admit *a;
	uint32_t shift;
	int rc;

	if (kind >= HL_ADMIT__COUNT)
		return -EINVAL;
	/* A fresh policy: the old sketch's counts mean nothing to another policy. */
	rc = hl_admit_create(kind, c->nslots, c->p.block_size, param, &a);
	if (rc)
		return rc;
	if (ghost_shift_of(c->p.block_size, kind) != c->ghost_shift) {
		/* Ghosts of another shape (regions or blocks): new, empty ones. */
		if (ghosts_make(c, kind, &ghost, &far, &shift)) {
			hl_admit_destroy(a);
			return -ENOMEM;
		}
		cache_bloom2_fini(&c->ghost);
		cache_bloom2_fini(&c->far_ghost);
		c->ghost = ghost;
		c->far_ghost = far;
		c->ghost_shift = shift;
	}
	hl_admit_destroy(c->admit);
	c->admit = a;
	c->p.admit = kind;
	c->p.admit_param = param;
	return 0;
}

int hl_cache_core_set_write_budget(struct hl_cache_core *c, uint32_t pct)
{
	if (pct > 100)
		return -EINVAL;
	c->p.write_budget_pct = pct;
	return 0;
}

int hl_cache_core_set_write_mode(struct hl_cache_core *c, enum hl_cache_write_mode mode)
{
	if (mode > HL_CACHE_WRITE_INVALIDATE)
		return -EINVAL;
	c->p.write_mode = mode;
	return 0;
}

void hl_cache_core_destroy(struct hl_cache_core *c)
{
	if (!c)
		return;
	/* (not free(NULL) 65536 times: under ASan each one records a stack) */
	for (uint32_t i = 0; c->luns && i < HL_CACHE_MAX_LUNS; i++)
		if (c->luns[i])
			free(c->luns[i]);
	free(c->luns);
	hl_admit_destroy(c->admit);
	cache_bloom2_fini(&c->ghost);
	cache_bloom2_fini(&c->far_ghost);
	cache_split_fini(c);
	free(c->ub.map_slot);
	free(c->ub.map_bits);
	free(c->ub.map_seq);
	free(c->ub.fifo);
	free(c->stale);
	free(c->skey);
	free(c->sidx);
	free(c->rs.r); /* destroyed during a lazy restore (a stop, a failed open) */
	free(c->rs.d);
	free(c->rs.held);
	free(c->rs.faulted);
	free(c->wip);
	cache_index_fini(&c->ix);
	free(c->busy.tab);
	free(c->partial.slot);
	free(c->partial.bits);
	free(c->keys.block);
	free(c->keys.lunix);
	free(c->meta);
	free(c->wflags);
	free(c->takenmap);
	free(c->dirtymap);
	free(c->dirtygrp);
	free(c->lun_used);
	free(c);
}

/* ---- slot life cycle ---- */

/* Give slot s (FREE) to key. */
void cache_slot_take(struct hl_cache_core *c, struct cache_part *pt, uint32_t s, uint64_t key)
{
	cache_slot_set_key(c, s, key);
	cache_index_insert(&c->ix, s); /* cannot fail: index has room for every slot */
	cache_slot_taken(c, pt, s);
}

/* The rest of cache_slot_take, once keys[s] is in the index. */
void cache_slot_taken(struct hl_cache_core *c, struct cache_part *pt, uint32_t s)
{
	uint64_t key = cache_slot_key(c, s);

	cache_bit_set(c->takenmap, s);
	pt->nfree--;
	/* Clock 0, nothing valid; the claim flags stay with the slot. */
	c->meta[s] =
	    (uint8_t)((c->meta[s] & (CACHE_M_DISK_VALID | CACHE_M_CLAIMS_OTHER | CACHE_M_BUSY)) |
	              CACHE_SLOT_USED);
	cache_slot_gen_bump(c, s);
	cache_valid_reset(c, s);
	c->lunix_refs[c->keys.lunix[s]]++;
	c->lun_used[cache_key_lun(key)]++;
	c->used++;
	c->win_used += s >= c->nslots;
}

/* Make a USED slot FREE (it must be unpinned and have no writers). */
void cache_slot_release(struct hl_cache_core *c, uint32_t s)
{
	struct cache_part *pt = NULL;
	uint64_t key = cache_slot_key(c, s);

	if (cache_is_used(c, s)) {
		cache_index_remove(&c->ix, key);
		c->lun_used[cache_key_lun(key)]--;
	}
	if (c->meta[s] & CACHE_M_DISK_VALID) {
		cache_stale_add(c, key, s);
		c->meta[s] |= CACHE_M_CLAIMS_OTHER; /* for whoever takes the slot next */
	}
	if (cache_state(c, s) != CACHE_SLOT_FREE)
		c->lunix_refs[c->keys.lunix[s]]--; /* its LUN index may be reused once 0 */
	cache_split_released(c, s);
	/* Buffered updates of an evicted block are never written. */
	cache_ub_clear(c, s, 0, c->spb);
	c->meta[s] &= CACHE_M_DISK_VALID | CACHE_M_CLAIMS_OTHER | CACHE_M_BUSY;
	cache_slot_gen_bump(c, s);
	cache_valid_reset(c, s);
	cache_bit_clear(c->takenmap, s);
	cache_mark_dirty(c, s);
	c->used--;
	c->win_used -= s >= c->nslots;
	if (s >= c->nslots) {
		*cache_wflags(c, s) = 0;
		pt = &c->win;
	}
	for (uint32_t i = 0; !pt && i < c->nparts; i++) {
		if (s >= c->parts[i].first && s < c->parts[i].first + c->parts[i].n) {
			pt = &c->parts[i];
			break;
		}
	}
	if (pt) {
		pt->nfree++;
		if (s < pt->free_hint)
			pt->free_hint = s;
	}
}

/* Release s if it no longer holds anything and nobody uses it. */
void cache_slot_maybe_release(struct hl_cache_core *c, uint32_t s)
{
	if (cache_is_used(c, s) && !cache_is_busy(c, s) && cache_valid_empty(c, s))
		cache_slot_release(c, s);
}

/* Find a FREE slot in the partition, or HL_CACHE_NO_SLOT. */
uint32_t cache_part_find_free(struct hl_cache_core *c, struct cache_part *pt)
{
	uint64_t end = (uint64_t)pt->first + pt->n;
	uint64_t i = pt->free_hint < pt->first ? pt->first : pt->free_hint;

	if (!pt->nfree)
		return HL_CACHE_NO_SLOT;
	for (int pass = 0; pass < 2; pass++) {
		while (i < end) {
			uint64_t w = ~c->takenmap[i / 64] >> (i % 64);
			if (w) {
				i += (uint64_t)__builtin_ctzll(w);
				if (i >= end)
					break;
				pt->free_hint = (uint32_t)i + 1;
				return (uint32_t)i;
			}
			i = (i / 64 + 1) * 64;
		}
		i = pt->first;
	}
	return HL_CACHE_NO_SLOT;
}

/*
 * CLOCK: from the hand, skip busy slots, age referenced ones, and stop at
 * the first unreferenced one (the victim; the hand stays on it so a
 * rejected admission compares against the same victim next time). A used
 * slot with no valid sector is taken at once.
 */
uint32_t cache_part_find_victim(struct hl_cache_core *c, struct cache_part *pt, bool *empty)
{
	uint64_t limit = (uint64_t)pt->n * (CACHE_CLOCK_MAX + 1) + 1;
	uint32_t end = pt->first + pt->n;

	*empty = false;
	/*
	 * Pins are only dropped by io_end, never inside one read call: once a
	 * sweep found every slot busy, later blocks of the same call (a huge
	 * request pinning the whole partition) need not sweep again.
	 */
	if (pt->exhausted == c->call)
		return HL_CACHE_NO_SLOT;
	if (pt->hand < pt->first || pt->hand >= end)
		pt->hand = pt->first;
	for (uint64_t k = 0; k < limit; k++) {
		uint32_t s = pt->hand;
		if (cache_is_used(c, s) && !cache_is_busy(c, s)) {
			uint32_t clock = cache_clock(c, s);
			if (cache_valid_empty(c, s)) {
				*empty = true;
				return s;
			}
			if (!clock)
				return s;
			cache_clock_set(c, s, clock - 1);
		}
		if (++pt->hand == end)
			pt->hand = pt->first;
	}
	pt->exhausted = c->call;
	return HL_CACHE_NO_SLOT;
}

/* ---- two rotating bloom filters ---- */

int cache_bloom2_init(struct cache_bloom2 *b, uint64_t cap, uint64_t salt)
{
	b->cap = cap;
	b->salt = salt;
	for (b->bits = 64; b->bits < cap * 10; b->bits <<= 1)
		;
	b->f[0] = calloc(b->bits / 64, sizeof(uint64_t));
	b->f[1] = calloc(b->bits / 64, sizeof(uint64_t));
	return b->f[0] && b->f[1] ? 0 : -ENOMEM;
}

int cache_bloom2_init_sized(struct cache_bloom2 *b, uint64_t cap, uint64_t salt,
                            uint32_t bits_per_key, uint32_t k)
{
	b->cap = cap;
	b->salt = salt;
	b->k = k;
	/* At least 4,096 bits: a tiny cache's few keys get few false positives. */
	b->bits = (HL_MAX(cap * bits_per_key, 4096) + 63) / 64 * 64;
	b->f[0] = calloc(b->bits / 64, sizeof(uint64_t));
	b->f[1] = calloc(b->bits / 64, sizeof(uint64_t));
	return b->f[0] && b->f[1] ? 0 : -ENOMEM;
}

/* Bit i of a key whose hash is h: three 21-bit fields (power-of-two size), or double hashing. */
static inline uint64_t bloom_bit(const struct cache_bloom2 *b, uint64_t h, uint32_t i)
{
	if (!b->k)
		return (h >> (i * 21)) & (b->bits - 1);
	uint64_t x = h + i * ((h >> 32 | h << 32) | 1);
	return (uint64_t)(((unsigned __int128)x * b->bits) >> 64);
}

void cache_bloom2_fini(struct cache_bloom2 *b)
{
	free(b->f[0]);
	free(b->f[1]);
	memset(b, 0, sizeof(*b));
}

void cache_bloom2_add(struct cache_bloom2 *b, uint64_t key)
{
	uint64_t h = cache_hash(key ^ b->salt);

	if (!b->bits)
		return;
	if (b->n >= b->cap) {
		b->cur ^= 1;
		memset(b->f[b->cur], 0, b->bits / 8);
		b->n = 0;
	}
	for (uint32_t i = 0; i < (b->k ? b->k : 3); i++)
		cache_bit_set(b->f[b->cur], bloom_bit(b, h, i));
	b->n++;
}

/* Both filters in one pass over the key's bits (the same answer as one filter after the other). */
bool cache_bloom2_test(const struct cache_bloom2 *b, uint64_t key)
{
	uint64_t h = cache_hash(key ^ b->salt);
	bool in0 = true, in1 = true;

	if (!b->bits)
		return false;
	for (uint32_t i = 0; i < (b->k ? b->k : 3) && (in0 || in1); i++) {
		uint64_t bit = bloom_bit(b, h, i);
		in0 = in0 && cache_bit_test(b->f[0], bit);
		in1 = in1 && cache_bit_test(b->f[1], bit);
	}
	return in0 || in1;
}

/* ---- LUNs and partitions ---- */

int hl_cache_core_lun_add(struct hl_cache_core *c, uint16_t lun, uint64_t quota_bytes)
{
	struct cache_lun *l;
	uint64_t want;
	uint32_t kix;

	if (c->luns[lun])
		return -EEXIST;
	/* A LUN index no LUN has and no slot still carries (struct cache_keys). */
	for (kix = 0; kix < CACHE_KEY_LUNS && c->lunix_refs[kix]; kix++)
		;
	if (kix == CACHE_KEY_LUNS)
		return -EMFILE;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->id = lun;
	l->kix = (uint8_t)kix;
	l->part = 0;
	if (quota_bytes) {
		struct cache_part *pool = &c->parts[0], *pt = NULL;
		uint32_t pi;

		want = quota_bytes / c->p.block_size;
		if (!want) {
			free(l);
			return -EINVAL;
		}
		/* Reuse an unowned partition that is big enough (taken whole). */
		for (pi = 1; pi < c->nparts; pi++) {
			if (c->parts[pi].owner == -2 && c->parts[pi].n >= want) {
				pt = &c->parts[pi];
				break;
			}
		}
		if (!pt) {
			if (c->nparts == CACHE_MAX_PARTS || want >= pool->n) {
				free(l);
				return -ENOSPC;
			}
			/* Carve the top of the shared pool; its blocks there must be idle. */
			uint32_t first = pool->first + pool->n - (uint32_t)want;
			for (uint32_t s = first; s < pool->first + pool->n; s++) {
				if (cache_is_used(c, s) && cache_is_busy(c, s)) {
					free(l);
					return -EBUSY;
				}
			}
			for (uint32_t s = first; s < pool->first + pool->n; s++) {
				if (cache_is_used(c, s)) {
					c->st.evictions++;
					cache_slot_release(c, s);
				}
			}
			pool->n -= (uint32_t)want;
			pool->nfree -= (uint32_t)want;
			if (pool->hand >= pool->first + pool->n)
				pool->hand = pool->first;
			pi = c->nparts++;
			pt = &c->parts[pi];
			*pt = (struct cache_part){.first = first,
			                          .n = (uint32_t)want,
			                          .hand = first,
			                          .nfree = (uint32_t)want,
			                          .free_hint = first};
		}
		pt->owner = lun;
		l->part = (uint16_t)pi;
	}
	c->luns[lun] = l;
	c->keys.lun[kix] = lun;
	c->lunix_refs[kix]++;
	/*
	 * A LUN added during a lazy restore: records of its id not loaded yet
	 * belong to a disk forgotten before, never to this one.
	 */
	cache_restore_note(c, lun, 0, HL_CACHE_MAX_BLOCK_NR);
	return 0;
}

int hl_cache_core_lun_remove(struct hl_cache_core *c, uint16_t lun)
{
	struct cache_lun *l = c->luns[lun];
	int rc;

	if (!l)
		return -ENOENT;
	rc = hl_cache_core_invalidate(c, lun, 0, UINT64_MAX);
	if (rc)
		return rc;
	if (l->part) {
		struct cache_part *pt = &c->parts[l->part];
		pt->owner = -2;
		/* Merge back into the pool when it sits right above it and is idle. */
		if (l->part == c->nparts - 1 && pt->nfree == pt->n &&
		    pt->first == c->parts[0].first + c->parts[0].n) {
			c->parts[0].n += pt->n;
			c->parts[0].nfree += pt->n;
			c->nparts--;
		}
	}
	c->lunix_refs[l->kix]--;
	free(l);
	c->luns[lun] = NULL;
	return 0;
}

/* ---- request helpers ---- */

uint32_t hl_cache_core_nblocks(const struct hl_cache_core *c, uint64_t off, uint64_t len)
{
	if (!len)
		return 0;
	return (uint32_t)(((off + len - 1) >> c->block_shift) - (off >> c->block_shift) + 1);
}

/* ---- stats and introspection ---- */

uint64_t hl_cache_core_lun_blocks(const struct hl_cache_core *c, uint16_t lun)
{
	return c->lun_used[lun];
}

int hl_cache_core_stats(const struct hl_cache_core *c, int lun, struct hl_cache_stats *out)
{
	if (lun < 0) {
		*out = c->st;
		return 0;
	}
	if (lun >= (int)HL_CACHE_MAX_LUNS || !c->luns[lun])
		return -ENOENT;
	*out = c->luns[lun]->st;
	return 0;
}

void hl_cache_core_info(const struct hl_cache_core *c, struct hl_cache_core_info *out)
{
	size_t bitmaps = 2 * HL_DIV_ROUND_UP(c->ntotal, 64) * sizeof(uint64_t) +
	                 HL_DIV_ROUND_UP(HL_DIV_ROUND_UP(c->ntotal, 4096), 64) * sizeof(uint64_t);

	out->nslots = c->nslots;
	out->window_slots = c->win.n;
	out->window_max_slots = c->nwin;
	out->used_slots = c->used - c->win_used;
	out->window_used_slots = c->win_used;
	out->block_size = c->p.block_size;
	out->ram_bytes =
	    c->ntotal * (sizeof(*c->keys.block) + sizeof(*c->keys.lunix) + sizeof(*c->meta)) +
	    c->nwin + bitmaps + cache_index_mem_bytes(&c->ix) +
	    (size_t)c->busy.cap * sizeof(struct cache_busy_ent) +
	    (size_t)c->partial.cap * (sizeof(uint32_t) + c->vbytes) +
	    c->ub.map_size * (sizeof(uint32_t) * 2 + sizeof(uint64_t) + c->vbytes);
	out->admit_ram_bytes =
	    hl_admit_mem_bytes(c->admit) + 2 * (c->ghost.bits + c->far_ghost.bits) / 8;
	out->ram_per_block = (double)out->ram_bytes / (double)c->nslots;
	out->write_ratio = cache_budget_ratio(c);
	out->write_budget_pct = c->p.write_budget_pct;
	out->write_budget_open = cache_budget_is_open(c);
}

uint32_t hl_cache_core_peek(const struct hl_cache_core *c, uint16_t lun, uint64_t block,
                            uint8_t *valid)
{
	uint32_t s = cache_index_find(&c->ix, cache_key(lun, block));

	if (valid) {
		memset(valid, 0, HL_CACHE_MAX_BLOCK / HL_CACHE_SECTOR / 8);
		if (s != HL_CACHE_NO_SLOT)
			cache_valid_get(c, s, valid);
	}
	return s;
}
