/*
 * cache_core.c - the policy core: slots, CLOCK eviction per partition, the
 * admission call, per-4K valid bits, sequential bypass, the write and
 * invalidation rules, the fill-race rule and the stats. Pure functions over
 * RAM state: no I/O, no locks, no clock. hotlun-sim and the daemon's engine
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

#include "cache/cache_internal.h"
#include "hotlun/util.h"

#define SEQ_STREAMS 8

struct seq_stream {
	uint64_t next_off; /* where the stream continues */
	uint64_t len;      /* bytes seen so far */
	uint64_t last;     /* request counter at last use (LRU replacement) */
};

/* A contiguous range of slots with its own CLOCK hand. */
struct cache_part {
	uint32_t first, n;
	uint32_t hand;      /* absolute slot number */
	uint32_t nfree;     /* FREE slots in the range */
	uint32_t free_hint; /* absolute slot where the search for a FREE slot starts */
	uint64_t exhausted; /* call number in which every slot was found busy */
	int owner;          /* lun id of a quota partition, -1 shared pool, -2 unowned */
};

struct cache_lun {
	uint16_t id;
	uint16_t part; /* index into c->parts */
	struct hl_cache_stats st;
	struct seq_stream seq[SEQ_STREAMS];
	uint64_t seq_clock;
};

#define MAX_PARTS         256
#define CACHE_WIP_BUCKETS 65536u

struct cache_stale {
	uint64_t key;
	uint64_t epoch;
	uint32_t slot;
};

/*
 * RAM update buffer (write coalescing; off unless cache_core_set_update_buffer()).
 * An update of a block cached on the SSD goes to RAM instead of the device;
 * the oldest buffered blocks are written back when the buffer holds more
 * than cap bytes, so repeated writes between write-backs cost one device
 * write, and updates of blocks evicted meanwhile cost none. A map from SSD
 * slot to its pending (in RAM, not on the device) sectors, and a FIFO of
 * slots in buffering order. A FIFO position is live only while it is the
 * one its slot's map entry names: a slot dropped and buffered again gets
 * a new position, and its old ones are stale (skipped when popped, dropped
 * when the ring is compacted), so the ring never fills with duplicates.
 */
struct cache_ub {
	uint64_t cap, bytes; /* byte limit; pending bytes now */
	uint32_t *map_slot;  /* map_size entries, UINT32_MAX: empty */
	uint8_t *map_bits;   /* map_size * vbytes pending bits */
	uint64_t *map_seq;   /* the entry's FIFO position (older positions of its slot are stale) */
	uint64_t map_size;   /* power of two, >= 2 * (cap / 4K + 2) */
	uint64_t n;          /* entries in the map */
	uint32_t *fifo;      /* ring of slots, fifo_cap entries */
	uint64_t fifo_head, fifo_tail, fifo_cap;
};

struct hl_cache_core {
	struct hl_cache_params p;
	uint32_t spb;    /* 4K sectors per block */
	uint32_t vbytes; /* valid-bit bytes per slot */
	uint32_t block_shift;
	uint64_t nslots; /* SSD slots */
	uint64_t nwin;   /* RAM window slots, numbered after the SSD slots */
	uint64_t ntotal; /* nslots + nwin */
	uint64_t used;
	struct cache_slot *slots;
	uint8_t *valid;     /* nslots * vbytes */
	uint64_t *freemap;  /* bit set: slot FREE */
	uint64_t *dirtymap; /* bit set: on-device record may be out of date */
	struct cache_index ix;
	struct hl_admit *admit;
	struct cache_part win; /* the RAM window (n == 0: off) */
	/*
	 * Ghost of the window: keys it dropped without promotion, in two
	 * rotating bloom filters of ghost_cap keys each (about the last 0.5-1x
	 * nslots drops). A miss found here competes for the SSD at once.
	 */
	uint64_t *ghost[2];
	uint64_t ghost_bits, ghost_n, ghost_cap;
	int ghost_cur;
	struct cache_part parts[MAX_PARTS];
	uint32_t nparts;
	struct cache_lun **luns; /* indexed by lun id, HL_CACHE_MAX_LUNS entries */
	/*
	 * Origin writes in flight to blocks that were not cached when they
	 * began: such a block must not be admitted meanwhile, or a fill
	 * widened to the whole block could install pre-write data.
	 */
	uint32_t *wip;  /* CACHE_WIP_BUCKETS counters */
	uint64_t wip_n; /* writes counted in it */
	/* stale on-device claims: slots released while their record claimed data */
	struct cache_stale *stale;
	uint64_t nstale, stale_cap, meta_epoch;
	uint64_t stale_bloom[64];
	bool stale_overflow;
	struct hl_cache_stats st;
	uint64_t call; /* numbers read/write calls (for cache_part.exhausted) */
	struct cache_ub ub;
};

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
}

/* ---- bit helpers ---- */

static inline void bit_set(uint64_t *m, uint64_t i)
{
	m[i / 64] |= 1ull << (i % 64);
}

static inline void bit_clear(uint64_t *m, uint64_t i)
{
	m[i / 64] &= ~(1ull << (i % 64));
}

static inline bool bit_test(const uint64_t *m, uint64_t i)
{
	return m[i / 64] >> (i % 64) & 1;
}

static inline uint8_t *slot_valid(const struct hl_cache_core *c, uint32_t s)
{
	return c->valid + (uint64_t)s * c->vbytes;
}

static void vset(uint8_t *v, uint32_t first, uint32_t n)
{
	for (uint32_t i = first; i < first + n; i++)
		v[i / 8] |= (uint8_t)(1u << (i % 8));
}

static void vclear(uint8_t *v, uint32_t first, uint32_t n)
{
	for (uint32_t i = first; i < first + n; i++)
		v[i / 8] &= (uint8_t) ~(1u << (i % 8));
}

static inline bool vtest(const uint8_t *v, uint32_t i)
{
	return v[i / 8] >> (i % 8) & 1;
}

static uint32_t vcount(const uint8_t *v, uint32_t first, uint32_t n)
{
	uint32_t k = 0;
	for (uint32_t i = first; i < first + n; i++)
		k += vtest(v, i);
	return k;
}

static bool vempty(const struct hl_cache_core *c, const uint8_t *v)
{
	for (uint32_t i = 0; i < c->vbytes; i++)
		if (v[i])
			return false;
	return true;
}

static inline void mark_dirty(struct hl_cache_core *c, uint32_t s)
{
	bit_set(c->dirtymap, s);
}

/* ---- RAM update buffer ---- */

static inline uint64_t ub_home(const struct cache_ub *u, uint32_t slot)
{
	return cache_hash(slot) & (u->map_size - 1);
}

/* Map position of slot's entry, or UINT64_MAX. */
static uint64_t ub_find(const struct hl_cache_core *c, uint32_t slot)
{
	const struct cache_ub *u = &c->ub;
	uint64_t i;

	if (!u->cap)
		return UINT64_MAX;
	for (i = ub_home(u, slot); u->map_slot[i] != UINT32_MAX; i = (i + 1) & (u->map_size - 1))
		if (u->map_slot[i] == slot)
			return i;
	return UINT64_MAX;
}

static inline uint8_t *ub_bits(const struct hl_cache_core *c, uint64_t i)
{
	return c->ub.map_bits + i * c->vbytes;
}

/* Remove entry i (its pending bytes must already be uncounted): backward shift. */
static void ub_remove(struct hl_cache_core *c, uint64_t i)
{
	struct cache_ub *u = &c->ub;
	uint64_t hole = i, j = i, m = u->map_size - 1;

	for (;;) {
		j = (j + 1) & m;
		if (u->map_slot[j] == UINT32_MAX)
			break;
		uint64_t home = ub_home(u, u->map_slot[j]);
		if (((j - home) & m) >= ((j - hole) & m)) {
			u->map_slot[hole] = u->map_slot[j];
			u->map_seq[hole] = u->map_seq[j];
			memcpy(ub_bits(c, hole), ub_bits(c, j), c->vbytes);
			hole = j;
		}
	}
	u->map_slot[hole] = UINT32_MAX;
	memset(ub_bits(c, hole), 0, c->vbytes);
	u->n--;
}

static uint32_t vcount(const uint8_t *v, uint32_t first, uint32_t n);
static void vset(uint8_t *v, uint32_t first, uint32_t n);
static void vclear(uint8_t *v, uint32_t first, uint32_t n);

/* Sectors [first, first+n) of slot s are no longer pending (overwritten or dropped). */
static void ub_clear(struct hl_cache_core *c, uint32_t s, uint32_t first, uint32_t n)
{
	uint64_t i = ub_find(c, s);
	uint8_t *b;

	if (i == UINT64_MAX)
		return;
	b = ub_bits(c, i);
	c->ub.bytes -= (uint64_t)vcount(b, first, n) * HL_CACHE_SECTOR;
	vclear(b, first, n);
	if (!vcount(b, 0, c->spb))
		ub_remove(c, i);
}

/*
 * Sectors [first, first+n) of slot s now live in the buffer. @return false
 * when the buffer cannot track another block (the caller then leaves the
 * sectors invalid: the data is only in RAM and would otherwise be lost).
 */
static bool ub_add(struct hl_cache_core *c, uint32_t s, uint32_t first, uint32_t n)
{
	struct cache_ub *u = &c->ub;
	uint64_t i = ub_find(c, s);
	uint8_t *b;

	if (i == UINT64_MAX) {
		if (u->n * 2 >= u->map_size)
			return false;
		if (u->fifo_tail - u->fifo_head == u->fifo_cap) {
			/* Ring full: keep only the live positions, in order (k <= j). */
			uint64_t k = u->fifo_head;
			for (uint64_t j = u->fifo_head; j != u->fifo_tail; j++) {
				uint32_t x = u->fifo[j % u->fifo_cap];
				uint64_t xi = ub_find(c, x);
				if (xi == UINT64_MAX || u->map_seq[xi] != j)
					continue;
				u->map_seq[xi] = k;
				u->fifo[k++ % u->fifo_cap] = x;
			}
			u->fifo_tail = k;
			if (u->fifo_tail - u->fifo_head == u->fifo_cap)
				return false; /* cannot be: at most map_size / 2 live */
		}
		for (i = ub_home(u, s); u->map_slot[i] != UINT32_MAX;
		     i = (i + 1) & (u->map_size - 1))
			;
		u->map_slot[i] = s;
		u->map_seq[i] = u->fifo_tail;
		u->n++;
		u->fifo[u->fifo_tail++ % u->fifo_cap] = s;
	}
	b = ub_bits(c, i);
	u->bytes -= (uint64_t)vcount(b, 0, c->spb) * HL_CACHE_SECTOR;
	vset(b, first, n);
	u->bytes += (uint64_t)vcount(b, 0, c->spb) * HL_CACHE_SECTOR;
	return true;
}

/* ---- ghost: keys the window dropped recently (two rotating bloom filters) ---- */

static void ghost_add(struct hl_cache_core *c, uint64_t key)
{
	uint64_t h = cache_hash(key ^ 0x7f4a7c159e3779b9ull);
	if (!c->ghost_bits)
		return;
	if (c->ghost_n >= c->ghost_cap) {
		c->ghost_cur ^= 1;
		memset(c->ghost[c->ghost_cur], 0, c->ghost_bits / 8);
		c->ghost_n = 0;
	}
	for (int i = 0; i < 3; i++) {
		uint64_t b = (h >> (i * 21)) & (c->ghost_bits - 1);
		bit_set(c->ghost[c->ghost_cur], b);
	}
	c->ghost_n++;
}

static bool ghost_test(const struct hl_cache_core *c, uint64_t key)
{
	uint64_t h = cache_hash(key ^ 0x7f4a7c159e3779b9ull);
	if (!c->ghost_bits)
		return false;
	for (int g = 0; g < 2; g++) {
		bool in = true;
		for (int i = 0; i < 3 && in; i++)
			in = bit_test(c->ghost[g], (h >> (i * 21)) & (c->ghost_bits - 1));
		if (in)
			return true;
	}
	return false;
}

/* ---- create / destroy ---- */

int hl_cache_core_create(const struct hl_cache_params *p, struct hl_cache_core **out)
{
	struct hl_cache_core *c;
	uint64_t nslots;

	if (p->block_size < HL_CACHE_MIN_BLOCK || p->block_size > HL_CACHE_MAX_BLOCK ||
	    (p->block_size & (p->block_size - 1)))
		return -EINVAL;
	nslots = p->capacity / p->block_size;
	if (nslots < 1 || nslots >= UINT32_MAX - 1)
		return -EINVAL;
	if ((unsigned)p->admit >= HL_ADMIT__COUNT || p->write_mode > HL_CACHE_WRITE_INVALIDATE)
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->p = *p;
	c->nslots = nslots;
	c->call = 1; /* partitions start with exhausted == 0 */
	if (p->window_bytes == HL_CACHE_WINDOW_AUTO) {
		/* 1% of the cache, at least 16 MiB, at most 64 MiB of RAM. */
		uint64_t w = nslots / 100;
		w = HL_MAX(w, (16ull << 20) / p->block_size);
		w = HL_MIN(w, (64ull << 20) / p->block_size);
		c->nwin = w;
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
	c->slots = calloc(c->ntotal, sizeof(*c->slots));
	c->valid = calloc(c->ntotal, c->vbytes);
	c->freemap = calloc(HL_DIV_ROUND_UP(c->ntotal, 64), sizeof(uint64_t));
	c->dirtymap = calloc(HL_DIV_ROUND_UP(c->ntotal, 64), sizeof(uint64_t));
	c->luns = calloc(HL_CACHE_MAX_LUNS, sizeof(*c->luns));
	c->wip = calloc(CACHE_WIP_BUCKETS, sizeof(*c->wip));
	if (!c->slots || !c->valid || !c->freemap || !c->dirtymap || !c->luns || !c->wip)
		goto nomem;
	if (cache_index_init(&c->ix, c->ntotal, c->slots))
		goto nomem;
	if (hl_admit_create(p->admit, nslots, p->admit_param, &c->admit)) {
		cache_index_fini(&c->ix);
		free(c->slots);
		free(c->valid);
		free(c->freemap);
		free(c->dirtymap);
		free(c->luns);
		free(c->wip);
		free(c);
		return -EINVAL;
	}
	for (uint64_t i = 0; i < c->ntotal; i++)
		bit_set(c->freemap, i);
	c->win = (struct cache_part){
	    .first = (uint32_t)nslots,
	    .n = (uint32_t)c->nwin,
	    .hand = (uint32_t)nslots,
	    .nfree = (uint32_t)c->nwin,
	    .free_hint = (uint32_t)nslots,
	    .owner = -3,
	};
	c->ghost_cap = nslots / 2 + 8;
	c->ghost_bits = 64;
	while (c->ghost_bits < c->ghost_cap * 10)
		c->ghost_bits <<= 1;
	c->ghost[0] = calloc(c->ghost_bits / 64, 8);
	c->ghost[1] = calloc(c->ghost_bits / 64, 8);
	if (!c->ghost[0] || !c->ghost[1]) {
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
nomem:
	free(c->slots);
	free(c->valid);
	free(c->freemap);
	free(c->dirtymap);
	free(c->luns);
	free(c->wip);
	free(c);
	return -ENOMEM;
}

int hl_cache_core_set_admission(struct hl_cache_core *c, enum hl_admit_kind kind, uint32_t param)
{
	struct hl_admit *a;
	int rc;

	if (kind >= HL_ADMIT__COUNT)
		return -EINVAL;
	/* A fresh policy: the old sketch's counts mean nothing to another policy. */
	rc = hl_admit_create(kind, c->nslots, param, &a);
	if (rc)
		return rc;
	hl_admit_destroy(c->admit);
	c->admit = a;
	c->p.admit = kind;
	c->p.admit_param = param;
	return 0;
}

void hl_cache_core_destroy(struct hl_cache_core *c)
{
	if (!c)
		return;
	for (uint32_t i = 0; i < HL_CACHE_MAX_LUNS; i++)
		free(c->luns[i]);
	free(c->luns);
	hl_admit_destroy(c->admit);
	free(c->ghost[0]);
	free(c->ghost[1]);
	free(c->ub.map_slot);
	free(c->ub.map_bits);
	free(c->ub.map_seq);
	free(c->ub.fifo);
	free(c->stale);
	free(c->wip);
	cache_index_fini(&c->ix);
	free(c->slots);
	free(c->valid);
	free(c->freemap);
	free(c->dirtymap);
	free(c);
}

/* ---- slot life cycle ---- */

static void stale_add(struct hl_cache_core *c, uint64_t key, uint32_t slot);
static bool wip_find(const struct hl_cache_core *c, uint64_t key);

/* Give slot s (FREE) to key. */
static void slot_take(struct hl_cache_core *c, struct cache_part *pt, uint32_t s, uint64_t key)
{
	struct cache_slot *sl = &c->slots[s];

	bit_clear(c->freemap, s);
	pt->nfree--;
	sl->key = key;
	sl->state = (uint8_t)((sl->state & (CACHE_SLOT_F_DISK_VALID | CACHE_SLOT_F_CLAIMS_OTHER)) |
	                      CACHE_SLOT_USED);
	sl->clock = 0;
	sl->gen++;
	memset(slot_valid(c, s), 0, c->vbytes);
	cache_index_insert(&c->ix, s); /* cannot fail: index has room for every slot */
	c->used++;
}

/* Make a USED slot FREE (it must be unpinned and have no writers). */
static void slot_release(struct hl_cache_core *c, uint32_t s)
{
	struct cache_slot *sl = &c->slots[s];
	struct cache_part *pt = NULL;

	if ((sl->state & CACHE_SLOT_STATE_MASK) == CACHE_SLOT_USED)
		cache_index_remove(&c->ix, sl->key);
	if (sl->state & CACHE_SLOT_F_DISK_VALID) {
		stale_add(c, sl->key, s);
		sl->state |= CACHE_SLOT_F_CLAIMS_OTHER; /* for whoever takes the slot next */
	}
	ub_clear(c, s, 0, c->spb); /* buffered updates of an evicted block are never written */
	sl->state = (uint8_t)(sl->state & (CACHE_SLOT_F_DISK_VALID | CACHE_SLOT_F_CLAIMS_OTHER));
	sl->gen++;
	sl->clock = 0;
	memset(slot_valid(c, s), 0, c->vbytes);
	bit_set(c->freemap, s);
	mark_dirty(c, s);
	c->used--;
	if (s >= c->nslots)
		pt = &c->win;
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

/*
 * Valid sectors of slot s were just cleared in RAM while s keeps its block.
 * If s's record may claim them (on the device, or in a sync's snapshot in
 * flight), it does so until a snapshot taken from now on is durable: until
 * then any write to the block must sync first, also one that finds the
 * sectors already invalid in RAM (a second write, or a write after an
 * UNMAP, while the first one's sync is pending). The stale-claim list says
 * so to hl_cache_core_write_needs_sync(). @return true when s may claim
 * them (the caller's io needs a barrier).
 */
static bool slot_unclaim(struct hl_cache_core *c, uint32_t s)
{
	if (!(c->slots[s].state & CACHE_SLOT_F_DISK_VALID))
		return false;
	stale_add(c, c->slots[s].key, s);
	return true;
}

/* Release s if it no longer holds anything and nobody uses it. */
static void slot_maybe_release(struct hl_cache_core *c, uint32_t s)
{
	struct cache_slot *sl = &c->slots[s];

	if ((sl->state & CACHE_SLOT_STATE_MASK) == CACHE_SLOT_USED && !sl->pins && !sl->writers &&
	    vempty(c, slot_valid(c, s)))
		slot_release(c, s);
}

/* Find a FREE slot in the partition, or HL_CACHE_NO_SLOT. */
static uint32_t part_find_free(struct hl_cache_core *c, struct cache_part *pt)
{
	uint64_t end = (uint64_t)pt->first + pt->n;
	uint64_t i = pt->free_hint < pt->first ? pt->first : pt->free_hint;

	if (!pt->nfree)
		return HL_CACHE_NO_SLOT;
	for (int pass = 0; pass < 2; pass++) {
		while (i < end) {
			uint64_t w = c->freemap[i / 64] >> (i % 64);
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
static uint32_t part_find_victim(struct hl_cache_core *c, struct cache_part *pt, bool *empty)
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
		struct cache_slot *sl = &c->slots[s];
		if ((sl->state & CACHE_SLOT_STATE_MASK) == CACHE_SLOT_USED && !sl->pins &&
		    !sl->writers) {
			if (vempty(c, slot_valid(c, s))) {
				*empty = true;
				return s;
			}
			if (!sl->clock)
				return s;
			sl->clock--;
		}
		if (++pt->hand == end)
			pt->hand = pt->first;
	}
	pt->exhausted = c->call;
	return HL_CACHE_NO_SLOT;
}

static void advance_hand(struct cache_part *pt, uint32_t s)
{
	pt->hand = s + 1;
	if (pt->hand >= pt->first + pt->n)
		pt->hand = pt->first;
}

/* ---- LUNs and partitions ---- */

int hl_cache_core_lun_add(struct hl_cache_core *c, uint16_t lun, uint64_t quota_bytes)
{
	struct cache_lun *l;
	uint64_t want;

	if (c->luns[lun])
		return -EEXIST;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->id = lun;
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
			if (c->nparts == MAX_PARTS || want >= pool->n) {
				free(l);
				return -ENOSPC;
			}
			/* Carve the top of the shared pool; its blocks there must be idle. */
			uint32_t first = pool->first + pool->n - (uint32_t)want;
			for (uint32_t s = first; s < pool->first + pool->n; s++) {
				struct cache_slot *sl = &c->slots[s];
				if ((sl->state & CACHE_SLOT_STATE_MASK) == CACHE_SLOT_USED &&
				    (sl->pins || sl->writers)) {
					free(l);
					return -EBUSY;
				}
			}
			for (uint32_t s = first; s < pool->first + pool->n; s++) {
				if ((c->slots[s].state & CACHE_SLOT_STATE_MASK) ==
				    CACHE_SLOT_USED) {
					c->st.evictions++;
					slot_release(c, s);
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

/* The sectors of block b that [off, off+len) touches: [*first, *first + *n). */
static void block_sectors(const struct hl_cache_core *c, uint64_t b, uint64_t off, uint64_t len,
                          uint32_t *first, uint32_t *n)
{
	uint64_t bstart = b << c->block_shift, bend = bstart + c->p.block_size;
	uint64_t s = HL_MAX(off, bstart), e = HL_MIN(off + len, bend);
	uint32_t f = (uint32_t)((s - bstart) / HL_CACHE_SECTOR);
	uint32_t l = (uint32_t)((e - bstart - 1) / HL_CACHE_SECTOR);
	*first = f;
	*n = l - f + 1;
}

static int check_range(const struct hl_cache_core *c, uint64_t off, uint64_t len)
{
	if (!len || off + len < off || ((off + len - 1) >> c->block_shift) > HL_CACHE_MAX_BLOCK_NR)
		return -EINVAL;
	return 0;
}

/* Sequential detection: true when this request continues a stream past the threshold. */
static bool seq_bypass(struct hl_cache_core *c, struct cache_lun *l, uint64_t off, uint64_t len)
{
	struct seq_stream *st, *lru = &l->seq[0];

	if (!c->p.seq_bypass)
		return false;
	l->seq_clock++;
	for (int i = 0; i < SEQ_STREAMS; i++) {
		st = &l->seq[i];
		if (st->len && st->next_off == off) {
			st->len += len;
			st->next_off = off + len;
			st->last = l->seq_clock;
			return st->len > c->p.seq_bypass;
		}
		if (st->last < lru->last)
			lru = st;
	}
	lru->next_off = off + len;
	lru->len = len;
	lru->last = l->seq_clock;
	return len > c->p.seq_bypass;
}

static void stats_add(struct cache_lun *l, struct hl_cache_stats *g, size_t field, uint64_t v)
{
	*(uint64_t *)((char *)&l->st + field) += v;
	*(uint64_t *)((char *)g + field) += v;
}

#define STAT(c, l, f, v) stats_add((l), &(c)->st, offsetof(struct hl_cache_stats, f), (v))

/* Bytes of [off, off+len) that fall in sectors [first, first+n) of block b. */
static uint64_t sect_bytes(const struct hl_cache_core *c, uint64_t b, uint32_t first, uint32_t n,
                           uint64_t off, uint64_t len)
{
	uint64_t s = (b << c->block_shift) + (uint64_t)first * HL_CACHE_SECTOR;
	uint64_t e = s + (uint64_t)n * HL_CACHE_SECTOR;
	s = HL_MAX(s, off);
	e = HL_MIN(e, off + len);
	return e > s ? e - s : 0;
}

/* Bytes of the request served from valid sectors of block b. */
static uint64_t valid_bytes(const struct hl_cache_core *c, const uint8_t *v, uint64_t b,
                            uint32_t first, uint32_t n, uint64_t off, uint64_t len)
{
	uint64_t bytes = 0;
	uint32_t i = first;

	while (i < first + n) {
		if (!vtest(v, i)) {
			i++;
			continue;
		}
		uint32_t j = i;
		while (j < first + n && vtest(v, j))
			j++;
		bytes += sect_bytes(c, b, i, j - i, off, len);
		i = j;
	}
	return bytes;
}

/* ---- read ---- */

/*
 * Try to move window slot w to the SSD (W-TinyLFU style: the window's
 * victim competes with the SSD's CLOCK victim through the admission
 * policy). On success w leaves the index, becomes MOVING and pinned, the
 * key gets an SSD slot, and *io describes the copy. @return true if started.
 */
static bool window_promote(struct hl_cache_core *c, uint32_t w, struct hl_cache_io *io)
{
	struct cache_slot *ws = &c->slots[w];
	uint64_t key = ws->key;
	struct cache_lun *l = c->luns[cache_key_lun(key)];
	struct cache_part *pt;
	const uint8_t *v = slot_valid(c, w);
	uint32_t s, a, z;
	bool empty = false;

	if (!l || (ws->state & CACHE_SLOT_F_NOPROMOTE))
		return false;
	pt = &c->parts[l->part];
	s = part_find_free(c, pt);
	if (s != HL_CACHE_NO_SLOT) {
		if (!hl_admit_should(c->admit, key, c->p.admit_free, 0))
			return false;
	} else {
		s = part_find_victim(c, pt, &empty);
		if (s == HL_CACHE_NO_SLOT)
			return false;
		if ((ws->state & CACHE_SLOT_F_RETURNED) && !empty) {
			/* Back from the ghost: ties with the victim go to the newcomer. */
			if (!hl_admit_should_returning(c->admit, key, c->slots[s].key))
				return false;
		} else if (!hl_admit_should(c->admit, key, empty && c->p.admit_free,
		                            c->slots[s].key)) {
			return false;
		}
		if (!empty)
			STAT(c, c->luns[cache_key_lun(c->slots[s].key)] ?: l, evictions, 1);
		slot_release(c, s);
		advance_hand(pt, s);
	}
	for (a = 0; !vtest(v, a); a++)
		;
	for (z = c->spb - 1; !vtest(v, z); z--)
		;
	/* The key moves to the SSD slot now, so writes and fills see one place. */
	cache_index_remove(&c->ix, key);
	ws->state = (uint8_t)((ws->state & CACHE_SLOT_F_DISK_VALID) | CACHE_SLOT_MOVING);
	ws->pins++;
	slot_take(c, pt, s, key);
	c->used--; /* w is no longer counted as holding a block */
	c->slots[s].pins++;
	memset(io, 0, sizeof(*io));
	io->kind = HL_CACHE_IO_PROMOTE;
	io->block = cache_key_block(key);
	io->slot = s;
	io->src_slot = w;
	io->ticket = c->slots[s].gen;
	io->fill_first = (uint16_t)a;
	io->fill_nsect = (uint16_t)(z - a + 1);
	io->pinned = 1;
	io->admitted = 1;
	io->meta_barrier = (c->slots[s].state & CACHE_SLOT_F_DISK_VALID) != 0;
	STAT(c, l, admissions, 1);
	return true;
}

/*
 * May window slot w compete for the SSD as it leaves the window? With
 * frequency admission only a block that came back after the window had
 * dropped it (a ghost hit): re-reads while a block sits in the window are
 * correlated references of one burst (2Q's A1in rule), and what the
 * window already served does not earn an SSD write. A block proves reuse
 * beyond the window's reach by returning. always and nhit:N promote as
 * before (they count every access).
 */
static bool window_may_promote(const struct hl_cache_core *c, uint32_t w)
{
	return c->p.admit != HL_ADMIT_FREQ || (c->slots[w].state & CACHE_SLOT_F_RETURNED);
}

/*
 * Give key a RAM window slot. The window's CLOCK victim is either promoted
 * to the SSD (if *nextra < max_extra) or dropped. @return slot or NO_SLOT.
 */
static uint32_t window_take(struct hl_cache_core *c, uint64_t key, struct hl_cache_io *extra,
                            uint32_t *nextra, uint32_t max_extra)
{
	struct cache_part *pt = &c->win;
	uint32_t s;
	bool empty;

	if (!pt->n)
		return HL_CACHE_NO_SLOT;
	s = part_find_free(c, pt);
	for (int tries = 0; s == HL_CACHE_NO_SLOT && tries < 4; tries++) {
		s = part_find_victim(c, pt, &empty);
		if (s == HL_CACHE_NO_SLOT)
			return HL_CACHE_NO_SLOT;
		advance_hand(pt, s);
		bool ok = !empty && *nextra < max_extra && window_may_promote(c, s) &&
		          window_promote(c, s, &extra[*nextra]);
		if (ok) {
			(*nextra)++;
			s = HL_CACHE_NO_SLOT; /* s is busy copying: look for another */
			continue;
		}
		if (!empty && !(c->slots[s].state & CACHE_SLOT_F_NOPROMOTE))
			ghost_add(c, c->slots[s].key);
		slot_release(c, s);
	}
	if (s == HL_CACHE_NO_SLOT)
		return HL_CACHE_NO_SLOT;
	slot_take(c, pt, s, key);
	return s;
}

/*
 * A miss of key in l's partition: while the SSD has free slots it is
 * admitted there directly (warm-up); otherwise it goes to the RAM window
 * and competes for the SSD when it leaves the window. Sequential streams
 * (bypass) only use the window and are never promoted from it unless
 * re-read there. @return slot or NO_SLOT (nothing cached).
 */
static uint32_t admit_miss(struct hl_cache_core *c, struct cache_lun *l, uint64_t key, bool bypass,
                           struct hl_cache_io *io, struct hl_cache_io *extra, uint32_t *nextra,
                           uint32_t max_extra)
{
	struct cache_part *pt = &c->parts[l->part];
	uint32_t s = HL_CACHE_NO_SLOT;
	bool empty = false, returning, freq = c->p.admit == HL_ADMIT_FREQ;

	if (!bypass)
		s = part_find_free(c, pt);
	if (s != HL_CACHE_NO_SLOT && hl_admit_should(c->admit, key, c->p.admit_free, 0)) {
		slot_take(c, pt, s, key);
		goto ssd;
	}
	returning = !bypass && c->win.n && ghost_test(c, key);
	if (returning && !freq) {
		/* Back soon after the window dropped it: compete for the SSD right away. */
		s = part_find_victim(c, pt, &empty);
		if (s != HL_CACHE_NO_SLOT &&
		    hl_admit_should_returning(c->admit, key, c->slots[s].key)) {
			if (!empty)
				STAT(c, c->luns[cache_key_lun(c->slots[s].key)] ?: l, evictions, 1);
			slot_release(c, s);
			slot_take(c, pt, s, key);
			advance_hand(pt, s);
			goto ssd;
		}
	}
	if (!bypass && !c->win.n) {
		/* No window: compare with the SSD victim right away. */
		s = part_find_victim(c, pt, &empty);
		if (s != HL_CACHE_NO_SLOT &&
		    hl_admit_should(c->admit, key, empty && c->p.admit_free, c->slots[s].key)) {
			if (!empty)
				STAT(c, c->luns[cache_key_lun(c->slots[s].key)] ?: l, evictions, 1);
			slot_release(c, s);
			slot_take(c, pt, s, key);
			advance_hand(pt, s);
			goto ssd;
		}
	}
	if (!bypass)
		STAT(c, l, rejections, 1);
	s = window_take(c, key, extra, nextra, max_extra);
	if (s != HL_CACHE_NO_SLOT) {
		if (bypass)
			c->slots[s].state |= CACHE_SLOT_F_NOPROMOTE;
		else if (returning)
			c->slots[s].state |= CACHE_SLOT_F_RETURNED;
		io->ram = 1;
		io->admitted = 1;
		STAT(c, l, window_fills, 1);
	}
	return s;
ssd:
	io->meta_barrier = (c->slots[s].state & CACHE_SLOT_F_DISK_VALID) != 0;
	io->admitted = 1;
	STAT(c, l, admissions, 1);
	return s;
}

int hl_cache_core_read(struct hl_cache_core *c, uint16_t lun, uint64_t off, uint64_t len,
                       struct hl_cache_io *ios, uint32_t max)
{
	struct cache_lun *l = c->luns[lun];
	uint32_t nb, nhit_blocks = 0, nextra = 0;
	uint64_t hit_bytes = 0, ram_bytes = 0, b0;
	bool bypass;

	if (!l)
		return -ENOENT;
	if (check_range(c, off, len))
		return -EINVAL;
	nb = hl_cache_core_nblocks(c, off, len);
	if (nb > max)
		return -E2BIG;
	c->call++;
	bypass = seq_bypass(c, l, off, len);
	b0 = off >> c->block_shift;
	for (uint32_t k = 0; k < nb; k++) {
		struct hl_cache_io *io = &ios[k];
		uint64_t b = b0 + k, key = cache_key(lun, b);
		uint32_t s = cache_index_find(&c->ix, key), first, n;

		block_sectors(c, b, off, len, &first, &n);
		memset(io, 0, sizeof(*io));
		io->block = b;
		io->slot = s;
		io->first = (uint16_t)first;
		io->nsect = (uint16_t)n;
		hl_admit_access(c->admit, key, s == HL_CACHE_NO_SLOT);
		if (s != HL_CACHE_NO_SLOT) {
			struct cache_slot *sl = &c->slots[s];
			const uint8_t *v = slot_valid(c, s);
			uint32_t nv = vcount(v, first, n);

			if (sl->clock < CACHE_CLOCK_MAX && nv)
				sl->clock++;
			if (nv)
				sl->state &= (uint8_t)~CACHE_SLOT_F_NOPROMOTE;
			io->ticket = sl->gen;
			io->ram = s >= c->nslots;
			if (sl->pins == UINT8_MAX) {
				/* Too many users: serve this block from the origin, untouched. */
				io->kind = HL_CACHE_IO_MISS;
				io->slot = HL_CACHE_NO_SLOT;
				io->ram = 0;
				continue;
			}
			uint64_t vb = valid_bytes(c, v, b, first, n, off, len);
			hit_bytes += vb;
			if (io->ram)
				ram_bytes += vb;
			if (nv == n) {
				io->kind = HL_CACHE_IO_HIT;
				nhit_blocks++;
			} else {
				io->kind = nv ? HL_CACHE_IO_PARTIAL : HL_CACHE_IO_MISS;
				/* Fill the gap [first invalid, last invalid] unless a write is in
				 * flight. */
				if (!sl->writers) {
					uint32_t a = first, z = first + n - 1;
					while (vtest(v, a))
						a++;
					while (vtest(v, z))
						z--;
					io->fill_first = (uint16_t)a;
					io->fill_nsect = (uint16_t)(z - a + 1);
				}
			}
			sl->pins++;
			io->pinned = 1;
			continue;
		}
		io->kind = HL_CACHE_IO_MISS;
		if (wip_find(c, key))
			continue; /* an origin write to it is in flight: do not fill */
		s = admit_miss(c, l, key, bypass, io, ios + nb, &nextra, max - nb);
		if (s == HL_CACHE_NO_SLOT)
			continue;
		io->slot = s;
		io->ticket = c->slots[s].gen;
		c->slots[s].pins++;
		io->pinned = 1;
		if (c->p.fill_whole_block) {
			io->fill_first = 0;
			io->fill_nsect = (uint16_t)c->spb;
		} else {
			io->fill_first = (uint16_t)first;
			io->fill_nsect = (uint16_t)n;
		}
	}
	STAT(c, l, read_reqs, 1);
	STAT(c, l, bytes_read, len);
	STAT(c, l, bytes_read_cache, hit_bytes);
	STAT(c, l, bytes_read_ram, ram_bytes);
	STAT(c, l, bytes_read_origin, len - hit_bytes);
	if (bypass)
		STAT(c, l, read_bypass, 1);
	if (nhit_blocks == nb)
		STAT(c, l, read_hits, 1);
	else if (hit_bytes)
		STAT(c, l, read_partial, 1);
	else
		STAT(c, l, read_misses, 1);
	return (int)(nb + nextra);
}

/*
 * A PROMOTE copies the window's sectors fill_first..+fill_nsect in one
 * write, holes (sectors not valid in the window) included: their bytes are
 * whatever the window slot held, an older version of the block (an update
 * that was dropped) or another block's. A fill of the SSD slot that began
 * after the promotion holds the same ticket (fills do not bump the
 * generation) and may already have made such a sector valid with the
 * origin's data: the copy would put the window's old bytes under it. True
 * when the SSD slot has a valid sector in a hole of the copy.
 */
static bool promote_hides_fill(const struct hl_cache_core *c, const struct hl_cache_io *io)
{
	const uint8_t *sv = slot_valid(c, io->slot), *wv = slot_valid(c, io->src_slot);
	uint32_t e = (uint32_t)io->fill_first + io->fill_nsect;

	for (uint32_t i = io->fill_first; i < e && i < c->spb; i++)
		if (vtest(sv, i) && !vtest(wv, i))
			return true;
	return false;
}

bool hl_cache_core_io_start(struct hl_cache_core *c, uint16_t lun, struct hl_cache_io *io)
{
	struct cache_lun *l = c->luns[lun];
	struct cache_slot *sl;

	if (io->slot >= c->ntotal || !io->fill_nsect || io->started)
		return false;
	sl = &c->slots[io->slot];
	if ((sl->state & CACHE_SLOT_STATE_MASK) != CACHE_SLOT_USED ||
	    sl->key != cache_key(lun, io->block) || sl->gen != io->ticket || sl->writers ||
	    (sl->state & CACHE_SLOT_F_WRITING)) {
		/* Raced by a write, an invalidation or another fill: dropped. */
		if (l)
			STAT(c, l, fills_dropped, 1);
		return false;
	}
	if (io->kind == HL_CACHE_IO_PROMOTE && io->src_slot < c->ntotal &&
	    promote_hides_fill(c, io)) {
		if (l)
			STAT(c, l, fills_dropped, 1);
		return false;
	}
	/*
	 * The slot's record may still claim the block it held before: only the
	 * io that took the slot waits for the barrier that ends this (its
	 * meta_barrier); any other fill or update of the new block that gets
	 * here first would put the new block's data under the old claim.
	 */
	if (sl->state & CACHE_SLOT_F_CLAIMS_OTHER) {
		if (l)
			STAT(c, l, fills_dropped, 1);
		return false;
	}
	sl->state |= CACHE_SLOT_F_WRITING;
	io->started = 1;
	return true;
}

void hl_cache_core_io_end(struct hl_cache_core *c, uint16_t lun, struct hl_cache_io *io,
                          bool written)
{
	struct cache_lun *l = c->luns[lun];
	struct cache_slot *sl;
	uint32_t s = io->slot;

	if (s == HL_CACHE_NO_SLOT || s >= c->ntotal)
		return;
	sl = &c->slots[s];
	bool started = io->started;
	if (io->started) {
		sl->state &= (uint8_t)~CACHE_SLOT_F_WRITING;
		io->started = 0;
	}
	if (io->kind == HL_CACHE_IO_PROMOTE && io->src_slot < c->ntotal) {
		struct cache_slot *ws = &c->slots[io->src_slot];
		const uint8_t *wv = slot_valid(c, io->src_slot);

		if (io->fill_nsect && started && sl->key == cache_key(lun, io->block)) {
			/*
			 * The copy wrote the window's holes too: none of them may stay
			 * valid in the slot (io_start saw none, and none can have been
			 * filled since; this only keeps it so).
			 */
			uint32_t e = (uint32_t)io->fill_first + io->fill_nsect;
			for (uint32_t i = io->fill_first; i < e && i < c->spb; i++) {
				if (!vtest(wv, i) && vtest(slot_valid(c, s), i)) {
					vclear(slot_valid(c, s), i, 1);
					mark_dirty(c, s);
					slot_unclaim(c, s);
				}
			}
		}
		if (io->fill_nsect) {
			bool same = (sl->state & CACHE_SLOT_STATE_MASK) == CACHE_SLOT_USED &&
			            sl->key == cache_key(lun, io->block) && sl->gen == io->ticket &&
			            !sl->writers;
			if (written && l && s < c->nslots)
				STAT(c, l, bytes_cache_write,
				     (uint64_t)io->fill_nsect * HL_CACHE_SECTOR);
			if (written && same) {
				/* Only what was valid in the window (the copy may span holes). */
				uint32_t e = (uint32_t)io->fill_first + io->fill_nsect;
				for (uint32_t i = io->fill_first; i < e; i++)
					if (vtest(wv, i))
						vset(slot_valid(c, s), i, 1);
				mark_dirty(c, s);
			} else if (written && l) {
				STAT(c, l, fills_dropped, 1);
			}
			io->fill_nsect = 0;
		}
		if (ws->pins)
			ws->pins--;
		if ((ws->state & CACHE_SLOT_STATE_MASK) == CACHE_SLOT_MOVING && !ws->pins) {
			c->used++; /* slot_release counts it out again */
			slot_release(c, io->src_slot);
		}
	}
	if (io->fill_nsect) {
		bool same = (sl->state & CACHE_SLOT_STATE_MASK) == CACHE_SLOT_USED &&
		            sl->key == cache_key(lun, io->block) && sl->gen == io->ticket &&
		            !sl->writers;
		/* An update into the RAM update buffer writes nothing to the device. */
		bool to_ub = io->kind == HL_CACHE_IO_UPDATE && io->src_slot == CACHE_IO_UB_SRC &&
		             io->ram && s < c->nslots;
		if (written && l && s < c->nslots && !to_ub) {
			STAT(c, l, bytes_cache_write, (uint64_t)io->fill_nsect * HL_CACHE_SECTOR);
			if (io->kind == HL_CACHE_IO_UPDATE)
				STAT(c, l, bytes_cache_update,
				     (uint64_t)io->fill_nsect * HL_CACHE_SECTOR);
		}
		if (written && same && to_ub) {
			if (ub_add(c, s, io->fill_first, io->fill_nsect))
				vset(slot_valid(c, s), io->fill_first, io->fill_nsect);
		} else if (written && same) {
			vset(slot_valid(c, s), io->fill_first, io->fill_nsect);
			mark_dirty(c, s);
		} else if (written && l) {
			STAT(c, l, fills_dropped, 1);
		}
		io->fill_nsect = 0;
	}
	if (io->pinned) {
		io->pinned = 0;
		if (sl->pins)
			sl->pins--;
		slot_maybe_release(c, s);
	}
}

/*
 * ---- writes in flight to uncached blocks ----
 * A counting bloom filter: two 32-bit counters per key. A false positive
 * only skips one admission while some other write is in flight.
 */

static inline void wip_pos(uint64_t key, uint32_t *a, uint32_t *b)
{
	uint64_t h = cache_hash(key ^ 0x3c6ef372fe94f82bull);
	*a = (uint32_t)(h & (CACHE_WIP_BUCKETS - 1));
	*b = (uint32_t)((h >> 32) & (CACHE_WIP_BUCKETS - 1));
}

static bool wip_find(const struct hl_cache_core *c, uint64_t key)
{
	uint32_t a, b;

	if (!c->wip_n)
		return false;
	wip_pos(key, &a, &b);
	return c->wip[a] && c->wip[b];
}

static void wip_add(struct hl_cache_core *c, uint64_t key)
{
	uint32_t a, b;

	wip_pos(key, &a, &b);
	c->wip[a]++;
	c->wip[b]++;
	c->wip_n++;
}

static void wip_del(struct hl_cache_core *c, uint64_t key)
{
	uint32_t a, b;

	wip_pos(key, &a, &b);
	c->wip[a]--;
	c->wip[b]--;
	c->wip_n--;
}

/* ---- write ---- */

int hl_cache_core_write_begin(struct hl_cache_core *c, uint16_t lun, uint64_t off, uint64_t len,
                              struct hl_cache_io *ios, uint32_t max)
{
	struct cache_lun *l = c->luns[lun];
	uint32_t nb, k = 0;
	uint64_t b0;

	if (!l)
		return -ENOENT;
	if (check_range(c, off, len))
		return -EINVAL;
	nb = hl_cache_core_nblocks(c, off, len);
	b0 = off >> c->block_shift;
	STAT(c, l, write_reqs, 1);
	STAT(c, l, bytes_written, len);
	for (uint32_t i = 0; i < nb; i++) {
		uint64_t b = b0 + i;
		uint32_t s = cache_index_find(&c->ix, cache_key(lun, b)), first, n;
		struct cache_slot *sl;
		struct hl_cache_io *io;

		if (k == max)
			goto too_big;
		io = &ios[k++];
		block_sectors(c, b, off, len, &first, &n);
		memset(io, 0, sizeof(*io));
		io->block = b;
		io->slot = s;
		io->first = (uint16_t)first;
		io->nsect = (uint16_t)n;
		io->kind = HL_CACHE_IO_UPDATE;
		if (s == HL_CACHE_NO_SLOT || c->slots[s].writers == UINT8_MAX) {
			/* Not cached (or too many writers to count): keep it from being filled. */
			io->slot = HL_CACHE_NO_SLOT;
			if (s != HL_CACHE_NO_SLOT) {
				c->slots[s].gen++;
				ub_clear(c, s, first, n);
				if (vcount(slot_valid(c, s), first, n)) {
					vclear(slot_valid(c, s), first, n);
					mark_dirty(c, s);
					io->meta_barrier = slot_unclaim(c, s);
				}
			}
			wip_add(c, cache_key(lun, b));
			io->wip = 1;
			continue;
		}
		sl = &c->slots[s];
		io->ram = s >= c->nslots;
		/*
		 * Update range: fully covered sectors, plus a partly covered head
		 * or tail sector that was valid (read-modify-write: the engine
		 * merges the new bytes into the old sector, which stays intact on
		 * the device because nothing else writes the slot while a writer
		 * is in flight).
		 */
		uint64_t bstart = b << c->block_shift;
		uint64_t ws = HL_MAX(off, bstart), we = HL_MIN(off + len, bstart + c->p.block_size);
		int32_t last = (int32_t)(first + n - 1), us = (int32_t)first, ue = last;
		bool head_part =
		    (ws % HL_CACHE_SECTOR) != 0 || (n == 1 && (we % HL_CACHE_SECTOR) != 0);
		bool tail_part = (we % HL_CACHE_SECTOR) != 0;
		const uint8_t *v = slot_valid(c, s);
		bool rmw_head = false, rmw_tail = false;
		if (head_part) {
			if (vtest(v, first))
				rmw_head = true;
			else
				us = first + 1;
		}
		if (tail_part && last != (int32_t)first) {
			if (vtest(v, last))
				rmw_tail = true;
			else
				ue = last - 1;
		} else if (tail_part && !rmw_head) {
			ue = (int32_t)first - 1; /* single partial sector, not valid: nothing */
		}
		/*
		 * Every touched sector stops being served; racing fills go stale.
		 * If the on-device record still claims them, it must be rewritten
		 * (meta barrier) before the write is acknowledged.
		 */
		ub_clear(c, s, first, n);
		if (vcount(slot_valid(c, s), first, n)) {
			vclear(slot_valid(c, s), first, n);
			mark_dirty(c, s);
			io->meta_barrier = slot_unclaim(c, s);
		}
		sl->gen++;
		io->ticket = sl->gen;
		sl->writers++;
		if (c->p.write_mode == HL_CACHE_WRITE_UPDATE && ue >= us) {
			io->fill_first = (uint16_t)us;
			io->fill_nsect = (uint16_t)(ue - us + 1);
			io->rmw_head = rmw_head;
			io->rmw_tail = rmw_tail;
			if (c->ub.cap && s < c->nslots) {
				/* To the RAM update buffer (rmw reads the old sector from the
				 * slot). */
				io->src_slot = CACHE_IO_UB_SRC;
				io->ram = 1;
			}
		}
		if (c->p.write_mode == HL_CACHE_WRITE_INVALIDATE)
			STAT(c, l, invalidations, 1);
	}
	return (int)k;
too_big:
	/* Undo: the caller will not call write_end for these. */
	for (uint32_t i = 0; i < k; i++)
		hl_cache_core_write_end(c, lun, &ios[i], false);
	return -E2BIG;
}

void hl_cache_core_write_end(struct hl_cache_core *c, uint16_t lun, struct hl_cache_io *io,
                             bool origin_ok)
{
	struct cache_lun *l = c->luns[lun];
	struct cache_slot *sl;
	uint32_t s = io->slot;

	if (io->wip) {
		wip_del(c, cache_key(lun, io->block));
		io->wip = 0;
	}
	if (s == HL_CACHE_NO_SLOT || s >= c->ntotal) {
		io->fill_nsect = 0;
		return;
	}
	sl = &c->slots[s];
	if (sl->writers)
		sl->writers--;
	if (io->fill_nsect && origin_ok && sl->gen == io->ticket && !sl->writers &&
	    sl->pins < UINT8_MAX && sl->key == cache_key(lun, io->block)) {
		sl->pins++;
		io->pinned = 1;
		if (l)
			STAT(c, l, write_updates, 1);
		return;
	}
	if (io->fill_nsect && l)
		STAT(c, l, fills_dropped, 1);
	io->fill_nsect = 0;
	slot_maybe_release(c, s);
}

/* ---- range invalidation ---- */

static void invalidate_slot(struct hl_cache_core *c, struct cache_lun *l, uint32_t s,
                            uint32_t first, uint32_t n)
{
	struct cache_slot *sl = &c->slots[s];

	ub_clear(c, s, first, n);
	if (vcount(slot_valid(c, s), first, n)) {
		vclear(slot_valid(c, s), first, n);
		mark_dirty(c, s);
		slot_unclaim(c, s);
		STAT(c, l, invalidations, 1);
	}
	sl->gen++;
	slot_maybe_release(c, s);
}

int hl_cache_core_invalidate(struct hl_cache_core *c, uint16_t lun, uint64_t off, uint64_t len)
{
	struct cache_lun *l = c->luns[lun];
	uint64_t end, b0, b1;

	if (!l)
		return -ENOENT;
	if (!len)
		return 0;
	end = (len > UINT64_MAX - off) ? UINT64_MAX : off + len;
	b0 = off >> c->block_shift;
	b1 = (end - 1) >> c->block_shift;
	if (b1 > HL_CACHE_MAX_BLOCK_NR)
		b1 = HL_CACHE_MAX_BLOCK_NR;
	if (b1 - b0 + 1 <= c->ix.count) {
		for (uint64_t b = b0; b <= b1; b++) {
			uint32_t s = cache_index_find(&c->ix, cache_key(lun, b)), first, n;
			if (s == HL_CACHE_NO_SLOT)
				continue;
			block_sectors(c, b, off, end - off, &first, &n);
			invalidate_slot(c, l, s, first, n);
		}
		return 0;
	}
	/* A range larger than the cache: walk the slots instead of the blocks. */
	for (uint64_t s = 0; s < c->ntotal; s++) {
		struct cache_slot *sl = &c->slots[s];
		uint64_t b;
		uint32_t first, n;

		if ((sl->state & CACHE_SLOT_STATE_MASK) != CACHE_SLOT_USED ||
		    cache_key_lun(sl->key) != lun)
			continue;
		b = cache_key_block(sl->key);
		if (b < b0 || b > b1)
			continue;
		block_sectors(c, b, off, end - off, &first, &n);
		invalidate_slot(c, l, (uint32_t)s, first, n);
	}
	return 0;
}

/* ---- stats and introspection ---- */

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
	size_t bitmaps = 2 * HL_DIV_ROUND_UP(c->ntotal, 64) * sizeof(uint64_t);

	out->nslots = c->nslots;
	out->window_slots = c->nwin;
	out->used_slots = c->used;
	out->block_size = c->p.block_size;
	out->ram_bytes = c->ntotal * sizeof(struct cache_slot) + c->ntotal * c->vbytes + bitmaps +
	                 cache_index_mem_bytes(&c->ix) +
	                 c->ub.map_size * (sizeof(uint32_t) * 2 + sizeof(uint64_t) + c->vbytes);
	out->admit_ram_bytes = hl_admit_mem_bytes(c->admit) + 2 * c->ghost_bits / 8;
	out->ram_per_block = (double)out->ram_bytes / (double)c->nslots;
}

uint32_t hl_cache_core_peek(const struct hl_cache_core *c, uint16_t lun, uint64_t block,
                            uint8_t *valid)
{
	uint32_t s = cache_index_find(&c->ix, cache_key(lun, block));

	if (valid) {
		memset(valid, 0, HL_CACHE_MAX_BLOCK / HL_CACHE_SECTOR / 8);
		if (s != HL_CACHE_NO_SLOT)
			memcpy(valid, slot_valid(c, s), c->vbytes);
	}
	return s;
}

bool hl_cache_core_slot_get(const struct hl_cache_core *c, uint32_t slot,
                            struct hl_cache_slot_rec *rec)
{
	const struct cache_slot *sl;

	memset(rec, 0, sizeof(*rec));
	if (slot >= c->nslots)
		return false;
	sl = &c->slots[slot];
	rec->gen = sl->gen;
	if ((sl->state & CACHE_SLOT_STATE_MASK) != CACHE_SLOT_USED ||
	    vempty(c, slot_valid(c, slot)))
		return false;
	rec->lun = cache_key_lun(sl->key);
	rec->block = cache_key_block(sl->key);
	memcpy(rec->valid, slot_valid(c, slot), c->vbytes);
	uint64_t ui = ub_find(c, slot);
	if (ui != UINT64_MAX) {
		/* Sectors whose current data is only in the RAM update buffer. */
		bool any = false;
		for (uint32_t i = 0; i < c->vbytes; i++) {
			rec->valid[i] &= (uint8_t)~ub_bits(c, ui)[i];
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

	if (slot >= c->nslots || rec->block > HL_CACHE_MAX_BLOCK_NR)
		return -EINVAL;
	l = c->luns[rec->lun];
	if (!l)
		return -ENOENT;
	pt = &c->parts[l->part];
	if (slot < pt->first || slot >= pt->first + pt->n || !bit_test(c->freemap, slot))
		return -EINVAL;
	key = cache_key(rec->lun, rec->block);
	if (cache_index_find(&c->ix, key) != HL_CACHE_NO_SLOT)
		return -EEXIST;
	c->slots[slot].gen = rec->gen;
	slot_take(c, pt, slot, key);
	c->slots[slot].gen = rec->gen;
	memcpy(slot_valid(c, slot), rec->valid, c->vbytes);
	/* Bits past the block's sectors are meaningless: clear them. */
	if (c->spb < 8)
		slot_valid(c, slot)[0] &= (uint8_t)((1u << c->spb) - 1);
	c->slots[slot].state |= CACHE_SLOT_F_DISK_VALID;
	if (vempty(c, slot_valid(c, slot))) {
		slot_release(c, slot);
		return -EINVAL;
	}
	return 0;
}

uint32_t hl_cache_core_next_dirty(struct hl_cache_core *c, uint64_t *cursor)
{
	uint64_t i = *cursor;

	while (i < c->nslots) {
		uint64_t w = c->dirtymap[i / 64] >> (i % 64);
		if (w) {
			i += (uint64_t)__builtin_ctzll(w);
			if (i >= c->nslots)
				break;
			bit_clear(c->dirtymap, i);
			*cursor = i + 1;
			return (uint32_t)i;
		}
		i = (i / 64 + 1) * 64;
	}
	*cursor = c->nslots;
	return HL_CACHE_NO_SLOT;
}

void hl_cache_core_slot_set_dirty(struct hl_cache_core *c, uint32_t slot)
{
	if (slot < c->nslots)
		mark_dirty(c, slot);
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
		c->slots[slot].state |= CACHE_SLOT_F_DISK_VALID;
}

void hl_cache_core_slot_drop_claimed(struct hl_cache_core *c, uint32_t slot,
                                     const struct hl_cache_slot_rec *rec)
{
	if (slot >= c->nslots)
		return;
	c->slots[slot].state |= CACHE_SLOT_F_DISK_VALID | CACHE_SLOT_F_CLAIMS_OTHER;
	mark_dirty(c, slot);
	if (rec->block <= HL_CACHE_MAX_BLOCK_NR)
		stale_add(c, cache_key(rec->lun, rec->block), slot);
}

void hl_cache_core_slot_persisted(struct hl_cache_core *c, uint32_t slot, bool claims_valid,
                                  uint64_t epoch)
{
	if (slot >= c->nslots)
		return;
	bool other = false;

	if (claims_valid)
		c->slots[slot].state |= CACHE_SLOT_F_DISK_VALID;
	else
		c->slots[slot].state &= (uint8_t)~CACHE_SLOT_F_DISK_VALID;
	for (uint64_t i = 0; i < c->nstale;) {
		if (c->stale[i].slot == slot && c->stale[i].epoch < epoch) {
			c->stale[i] = c->stale[--c->nstale];
			continue;
		}
		if (c->stale[i].slot == slot)
			other = true; /* released (or dropped) after the snapshot */
		i++;
	}
	/*
	 * A record that claims nothing claims no other block. One that claims
	 * the snapshot's block claims the current one unless the slot changed
	 * hands since the snapshot, which left a newer stale claim. Without
	 * stale tracking (no memory for it) nothing is cleared.
	 */
	if (!claims_valid || (!other && !c->stale_overflow))
		c->slots[slot].state &= (uint8_t)~CACHE_SLOT_F_CLAIMS_OTHER;
	if (!c->nstale)
		memset(c->stale_bloom, 0, sizeof(c->stale_bloom));
}

static inline uint64_t stale_bit(uint64_t key)
{
	return cache_hash(key ^ 0x2545f4914f6cdd1dull) % (64 * 64);
}

/* A slot whose record may claim key stops holding it: remember the stale claim. */
static void stale_add(struct hl_cache_core *c, uint64_t key, uint32_t slot)
{
	if (c->nstale == c->stale_cap) {
		uint64_t cap = c->stale_cap ? c->stale_cap * 2 : 256;
		struct cache_stale *n = realloc(c->stale, cap * sizeof(*n));
		if (!n) {
			/* Cannot track it: make every write sync until the records are rewritten.
			 */
			c->stale_overflow = true;
			return;
		}
		c->stale = n;
		c->stale_cap = cap;
	}
	c->meta_epoch++;
	c->stale[c->nstale++] =
	    (struct cache_stale){.key = key, .slot = slot, .epoch = c->meta_epoch};
	uint64_t b = stale_bit(key);
	c->stale_bloom[b / 64] |= 1ull << (b % 64);
}

bool hl_cache_core_write_needs_sync(const struct hl_cache_core *c, uint16_t lun, uint64_t off,
                                    uint64_t len)
{
	uint64_t b0, b1;

	if (!c->nstale && !c->stale_overflow)
		return false;
	if (c->stale_overflow || !len)
		return c->stale_overflow;
	b0 = off >> c->block_shift;
	b1 = (off + len - 1) >> c->block_shift;
	for (uint64_t b = b0; b <= b1 && b - b0 < 4096; b++) {
		uint64_t key = cache_key(lun, b), bit = stale_bit(key);
		if (!(c->stale_bloom[bit / 64] >> (bit % 64) & 1))
			continue;
		for (uint64_t i = 0; i < c->nstale; i++)
			if (c->stale[i].key == key)
				return true;
	}
	return b1 - b0 >= 4096; /* huge ranges: be safe */
}

/* ---- RAM update buffer: configuration and write-back ---- */

int cache_core_set_update_buffer(struct hl_cache_core *c, uint64_t bytes)
{
	struct cache_ub *u = &c->ub, n = {0};

	if (u->n)
		return -EBUSY;
	if (bytes) {
		uint64_t want = 2 * (bytes / HL_CACHE_SECTOR + 2);
		n.cap = bytes;
		n.map_size = 16;
		while (n.map_size < want)
			n.map_size <<= 1;
		n.fifo_cap = n.map_size;
		n.map_slot = malloc(n.map_size * sizeof(*n.map_slot));
		n.map_bits = calloc(n.map_size, c->vbytes);
		n.map_seq = calloc(n.map_size, sizeof(*n.map_seq));
		n.fifo = malloc(n.fifo_cap * sizeof(*n.fifo));
		if (!n.map_slot || !n.map_bits || !n.map_seq || !n.fifo) {
			free(n.map_slot);
			free(n.map_bits);
			free(n.map_seq);
			free(n.fifo);
			return -ENOMEM;
		}
		memset(n.map_slot, 0xff, n.map_size * sizeof(*n.map_slot));
	}
	free(u->map_slot);
	free(u->map_bits);
	free(u->map_seq);
	free(u->fifo);
	*u = n;
	return 0;
}

uint64_t cache_core_ub_pending(const struct hl_cache_core *c, uint32_t slot, uint8_t *bits)
{
	uint64_t i = ub_find(c, slot);

	if (bits)
		memset(bits, 0, c->vbytes);
	if (i == UINT64_MAX)
		return 0;
	if (bits)
		memcpy(bits, ub_bits(c, i), c->vbytes);
	return (uint64_t)vcount(ub_bits(c, i), 0, c->spb) * HL_CACHE_SECTOR;
}

/* The next write-back while more than limit bytes are pending (see cache_core_ub_writeback). */
static bool ub_writeback(struct hl_cache_core *c, uint64_t limit, uint16_t *lun,
                         struct hl_cache_io *io)
{
	struct cache_ub *u = &c->ub;

	while (u->bytes > limit && u->fifo_head != u->fifo_tail) {
		uint32_t s = u->fifo[u->fifo_head % u->fifo_cap], a, z;
		uint64_t i = ub_find(c, s);
		struct cache_slot *sl = &c->slots[s];
		uint8_t *b;

		if (i == UINT64_MAX || u->map_seq[i] != u->fifo_head) {
			u->fifo_head++; /* stale: dropped (and maybe buffered again) since */
			continue;
		}
		b = ub_bits(c, i);
		for (a = 0; !vtest(b, a); a++)
			;
		for (z = a; z + 1 < c->spb && vtest(b, z + 1); z++)
			;
		/* Not served while it is copied; valid again when the copy completes. */
		vclear(slot_valid(c, s), a, z - a + 1);
		ub_clear(c, s, a, z - a + 1);
		if (ub_find(c, s) == UINT64_MAX)
			u->fifo_head++;
		if (sl->pins == UINT8_MAX || sl->writers) {
			/* Busy: drop these sectors instead (they stay invalid). */
			mark_dirty(c, s);
			slot_maybe_release(c, s);
			continue;
		}
		memset(io, 0, sizeof(*io));
		io->kind = HL_CACHE_IO_UPDATE;
		io->block = cache_key_block(sl->key);
		io->slot = s;
		io->src_slot = CACHE_IO_UB_SRC;
		io->ticket = sl->gen;
		io->first = (uint16_t)a;
		io->nsect = (uint16_t)(z - a + 1);
		io->fill_first = (uint16_t)a;
		io->fill_nsect = (uint16_t)(z - a + 1);
		sl->pins++;
		io->pinned = 1;
		*lun = cache_key_lun(sl->key);
		return true;
	}
	return false;
}

bool cache_core_ub_writeback(struct hl_cache_core *c, uint16_t *lun, struct hl_cache_io *io)
{
	return ub_writeback(c, c->ub.cap, lun, io);
}

bool cache_core_ub_drain(struct hl_cache_core *c, uint16_t *lun, struct hl_cache_io *io)
{
	return ub_writeback(c, 0, lun, io);
}
