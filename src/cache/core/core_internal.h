/*
 * core_internal.h - what the files of the cache's core (src/cache/core)
 * share: the key packing, the hash, the slots (a key and a state byte
 * each, side tables for what only some slots need), the (lun, block) ->
 * slot index, and the policy core's state and helpers (struct
 * hl_cache_core). Nothing here is exported outside src/cache: the engine
 * (src/cache/engine, the core's user) and the unit tests may include it;
 * it never includes anything of the engine.
 */
#ifndef HOTLUN_CACHE_CORE_INTERNAL_H
#define HOTLUN_CACHE_CORE_INTERNAL_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hotlun/cache.h"
#include "hotlun/util.h"

/* A key packs the 16-bit lun id above a 48-bit cache block number. */
static inline uint64_t cache_key(uint16_t lun, uint64_t block)
{
	return (uint64_t)lun << 48 | (block & HL_CACHE_MAX_BLOCK_NR);
}

static inline uint16_t cache_key_lun(uint64_t key)
{
	return (uint16_t)(key >> 48);
}

static inline uint64_t cache_key_block(uint64_t key)
{
	return key & HL_CACHE_MAX_BLOCK_NR;
}

/*
 * A slot stores its key in 5 bytes (struct cache_keys): the LUN as an
 * index into the cache's table of LUN ids (CACHE_KEY_LUNS per cache) and
 * the low 32 bits of the block number. Blocks above CACHE_KEY_MAX_BLOCK
 * (16 TiB into a disk at 4 KiB blocks, 4 PiB at 1 MiB) are never cached:
 * admission refuses them, so a stored key always decodes to the key it
 * was given.
 */
#define CACHE_KEY_LUNS      HL_CACHE_MAX_DISKS
#define CACHE_KEY_MAX_BLOCK HL_CACHE_MAX_CACHED_NR
_Static_assert(CACHE_KEY_LUNS == 256 && CACHE_KEY_MAX_BLOCK == UINT32_MAX,
               "struct cache_keys: a byte of LUN index and 32 bits of block");

/* The core's hash of a key (keys are dense block numbers: a strong mixer). */
static inline uint64_t cache_hash(uint64_t x)
{
	return hl_mix64(x);
}

/*
 * ---- slots ----
 * A slot costs 6 bytes of RAM: its key (c->keys, 5 bytes, meaningful when
 * the slot is not FREE) and a state byte (c->meta). What only some slots need lives
 * in side tables sized by how many slots need it: the pins, writers and
 * generation of slots that ios are using (struct cache_busy), the valid
 * bits of partly valid slots (struct cache_partial; a slot whose every
 * sector is valid says so with CACHE_M_FULL, an empty one with neither),
 * and the flags of RAM window slots (c->wflags).
 */
#define CACHE_M_STATE     0x03 /* CACHE_SLOT_* */
#define CACHE_SLOT_FREE   0x00
#define CACHE_SLOT_USED   0x01 /* in the index, owns its key */
#define CACHE_SLOT_MOVING 0x02 /* window slot being copied to the SSD: not indexed */
/*
 * The on-device record (or a sync's snapshot in flight) may claim a block
 * other than the slot's current one (the slot was released or dropped at
 * load while claimed): no data may be written into the slot until a record
 * written after that is durable, or a crash restores the other block's
 * claim over this block's data (hl_cache_core_io_start refuses).
 */
#define CACHE_M_CLAIMS_OTHER 0x04
#define CACHE_M_DISK_VALID   0x08 /* the on-device record may claim valid data */
#define CACHE_M_CLOCK        0x30 /* CLOCK reference counter, 0..CACHE_CLOCK_MAX */
#define CACHE_M_CLOCK_SHIFT  4
#define CACHE_M_BUSY         0x40 /* has a struct cache_busy entry (pinned or written) */
#define CACHE_M_FULL         0x80 /* every sector valid (no struct cache_partial entry) */
#define CACHE_CLOCK_MAX      3

/* RAM window slot flags, c->wflags[s - c->nslots] */
#define CACHE_W_NOPROMOTE 0x01 /* a sequential stream's block: never promoted */
#define CACHE_W_RETURNED  0x02 /* a block back from the ghost: may be promoted */
#define CACHE_W_FAR       0x04 /* a rule-10 return (from the far ghost) */

/*
 * The RAM window's CLOCK keeps a single reference bit (second chance): the
 * window only filters by recency (like W-TinyLFU's LRU window, or 2Q's
 * A1in FIFO); frequency is the sketch's job. With the SSD's 2-bit counter
 * a block re-read in a burst outstayed newer ones, and a Zipf-like trace
 * lost 0.7-1.4 points at some window sizes (24, 25, 32 MiB) that it gains
 * with one bit (docs/cache-policy.md, rule 4).
 */
#define CACHE_WIN_CLOCK_MAX 1

/*
 * A slot that ios use: reads of its data and fills in flight (pins), origin
 * writes in flight that touch its block (writers), and the generation that
 * every change of its content bumps. Tickets are compared only while the
 * io holding one keeps the slot busy (a pin or a writer), so a generation
 * need not outlive the entry: a new entry starts from a counter of the
 * table, never from an old ticket's value.
 */
struct cache_busy_ent {
	uint32_t slot; /* UINT32_MAX: unused */
	uint32_t gen;
	uint8_t pins, writers;
	uint8_t writing; /* an io is writing data into the slot (io_start..io_end) */
};

struct cache_busy {
	struct cache_busy_ent *tab; /* open addressing, linear probing; cap a power of two */
	uint32_t cap, n;
	uint32_t next_gen;
	uint32_t limit; /* tests: most entries it may hold (0: no limit) */
};

/* Valid bits of partly valid slots: slot -> c->vbytes bytes. */
struct cache_partial {
	uint32_t *slot; /* cap entries, UINT32_MAX: unused */
	uint8_t *bits;  /* cap * vbytes */
	uint32_t cap, n;
	uint32_t limit; /* tests: most entries it may hold (0: no limit) */
};

/*
 * ---- keys: 5 bytes a slot ----
 * lunix[s] is an index into lun[], the LUN ids; an index is given to a
 * LUN at hl_cache_core_lun_add and reused only once no slot other than a
 * FREE one carries it (hl_cache_core.lunix_refs), so a slot's key never
 * changes under it, also while a removed LUN's slots are still moving or
 * pinned.
 */
struct cache_keys {
	uint32_t *block;              /* ntotal: the block number (its low 32 bits) */
	uint8_t *lunix;               /* ntotal: index into lun[] */
	uint16_t lun[CACHE_KEY_LUNS]; /* LUN index -> LUN id */
};

static inline uint64_t cache_keys_get(const struct cache_keys *k, uint32_t s)
{
	return cache_key(k->lun[k->lunix[s]], k->block[s]);
}

/* ---- index: open addressing, linear probing, backward-shift deletion ---- */

#define CACHE_INDEX_EMPTY 0u /* an entry holds slot + 1: a zeroed table is empty */
/*
 * Entries: slots + slots / CACHE_INDEX_LOAD_DIV (+ 8), a load of at most
 * 7/8 when every slot holds a block: 4.57 bytes per slot (3: 3/4, 5.33).
 */
#ifndef CACHE_INDEX_LOAD_DIV
#define CACHE_INDEX_LOAD_DIV 7
#endif

struct cache_index {
	uint32_t *tab; /* tag << slot_bits | (slot + 1); CACHE_INDEX_EMPTY when unused */
	uint64_t cap;  /* entries; about 8/7 of the slot count (load <= 0.875) */
	uint64_t count;
	uint32_t slot_bits, slot_mask; /* the spare high bits hold a hash tag */
	const struct cache_keys *keys; /* the slots' keys, read while probing */
};

int cache_index_init(struct cache_index *ix, uint64_t nslots, const struct cache_keys *keys);
void cache_index_fini(struct cache_index *ix);
/** @return slot or HL_CACHE_NO_SLOT. */
uint32_t cache_index_find(const struct cache_index *ix, uint64_t key);
/** Where key's probe begins (the restore faults its page in ahead). */
const void *cache_index_home_addr(const struct cache_index *ix, uint64_t key);
/* Start loading the index entry where key's probe begins (a later find of it waits less). */
void cache_index_prefetch(const struct cache_index *ix, uint64_t key);
/** slot's key must already be set. @return 0 or -EEXIST/-ENOSPC. */
int cache_index_insert(struct cache_index *ix, uint32_t slot);
/** @return 0 or -ENOENT. */
int cache_index_remove(struct cache_index *ix, uint64_t key);
size_t cache_index_mem_bytes(const struct cache_index *ix);

/*
 * ---- the policy core (struct hl_cache_core) ----
 * Its state and the helpers its files share: cache_core.c (create/destroy,
 * slot life cycle, CLOCK partitions, LUNs, stats), cache_slot.c (the
 * slots' side tables and valid bits), cache_read.c (read
 * planning, admission, the RAM window), cache_io.c (io_start/io_end),
 * cache_write.c (writes, range invalidation), cache_claims.c (on-device
 * claim bookkeeping for cache_meta.c), cache_ub.c (RAM update buffer).
 */

#define CACHE_SEQ_STREAMS 8

struct cache_seq_stream {
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
	uint8_t kix;   /* its index in c->keys.lun[] */
	struct hl_cache_stats st;
	struct cache_seq_stream seq[CACHE_SEQ_STREAMS];
	uint64_t seq_clock;
	uint64_t rs_dropped; /* records a lazy restore dropped: written or invalidated first */
};

#define CACHE_MAX_PARTS   256
#define CACHE_WIP_BUCKETS 65536u

struct cache_stale {
	uint64_t key;
	uint64_t epoch; /* 0: a freed entry */
	uint32_t slot;
	uint32_t next; /* the slot's next (older) claim, or the next freed entry; or CACHE_STALE_NONE */
};

#define CACHE_STALE_NONE UINT32_MAX

/* A slot with stale claims: the newest one (struct hl_cache_core: sidx). */
struct cache_stale_slot {
	uint32_t slot;
	uint32_t head; /* index in stale[]; CACHE_STALE_NONE: an empty entry */
};

/*
 * A range invalidation that lets others take the lock between its chunks
 * (hl_cache_core_invalidate_yield; on its caller's stack): until it ends,
 * a read of its blocks is served by the origin, never by the cache and
 * never filled, and no window block of it is promoted.
 */
struct cache_inval {
	struct cache_inval *next;
	uint64_t b0, b1;
	uint16_t lun;
};

/*
 * RAM update buffer (write coalescing; off unless hl_cache_core_set_update_buffer()).
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
	bool closed;         /* no new updates come in (while a resize drains it) */
};

/*
 * The window's two ghosts (struct hl_cache_core) remember a key in
 * CACHE_GHOST_BITS_PER_KEY bits with CACHE_GHOST_HASHES hashes, sized by
 * the slot count exactly: 3.75 bytes per slot for both (the ghost 2 x
 * nslots / 2 keys, the far ghost 2 x nslots), about 0.8% false positives
 * per filter. Before issue 25 item 4: 10 bits and 3 hashes, rounded up
 * to a power of two (10-20 bits a key, 3.75-7.5 bytes per slot); 8 bits
 * and 5 hashes (3 bytes) lost hit ratio (docs/cache-policy.md).
 *
 * With frequency admission (the default), blocks smaller than
 * CACHE_GHOST_REGION are remembered by region (h29g): a 4 KiB block's
 * ghost key is its 8 KiB region, added once while either filter of a pair
 * has it, so a pair of capacity cap remembers about cap regions, two
 * blocks each where both halves were dropped. The capacities are the slot
 * count x 100 / CACHE_GHOST_REGION_DIV (the ghost, half of it a filter)
 * and x 100 / CACHE_GHOST_REGION_FAR_DIV (the far ghost) there: 1.96 bytes
 * per slot for both ghosts, 15.95 per 4 KiB block in all. Other policies
 * and larger blocks keep block keys at full size (docs/cache-policy.md,
 * "16 bytes again": the third search).
 */
#define CACHE_GHOST_BITS_PER_KEY   10
#define CACHE_GHOST_HASHES         7
#define CACHE_GHOST_REGION         8192
#define CACHE_GHOST_REGION_DIV     185
#define CACHE_GHOST_REGION_FAR_DIV 195

/* Two rotating bloom filters of cap keys each: about the last cap..2 cap keys added. */
struct cache_bloom2 {
	uint64_t *f[2];
	uint64_t bits, n, cap, salt;
	int cur;
	uint32_t k; /* 0: 3 hashes into a power-of-two size; else k hashes, any size */
};

/*
 * One RAM budget for the window and the update buffer (cache_split.c,
 * docs/cache-policy.md rule 9): the window may borrow up to 3/4 of the
 * buffer's bytes while that saves more cache-device writes; window bytes
 * borrowed + ub.cap == ub_bytes. w0 == 0: off (an explicit window size,
 * or no window).
 */
struct cache_split {
	uint32_t w0;         /* the window's own slots (its automatic size) */
	uint32_t wmax;       /* the most it may have now (w0 + what the buffer lends) */
	uint32_t walloc;     /* window slots allocated (nwin) */
	uint32_t step, band; /* slots moved at a time; the margin the estimates judge */
	uint64_t ub_bytes;   /* the update buffer's configured bytes */
	uint32_t *taken_at;  /* window slot -> the take count when it was filled */
	uint64_t takes, epoch_takes;
	uint64_t *promoted;          /* SSD slot bitmap: entered by a promotion */
	struct cache_bloom2 drops;   /* keys the window dropped lately */
	struct cache_bloom2 wbacks;  /* sectors written back lately */
	double win_grow, win_shrink; /* window events (decayed), worth `worth` bytes each */
	double buf_grow, buf_shrink; /* device bytes (decayed) */
	double returns, promotions, followon; /* since the start */
};

/*
 * The write budget's measure (rule 10): cache-device bytes written and the
 * bytes an admit-all cache would have written, a block per missed block;
 * both halve whenever the second passes CACHE_BUDGET_HORIZON times the
 * cache's size (at a miss, whatever the policy), so the ratio follows the
 * recent workload. The update buffer's pending bytes are added when the
 * ratio is read (they are not history: at most the buffer's size).
 */
struct cache_budget {
	double written, admit_all;
	uint64_t last; /* st.bytes_cache_write when written last took it in */
};

#define CACHE_BUDGET_HORIZON 8

/*
 * A lazy warm restart (cache_restore.c): the blocks written or invalidated
 * while the loader restores the slot records, as disjoint ranges sorted
 * by (lun, lo), at most CACHE_RS_MAX of them (neighbours merge past it),
 * and the coarser copy of them the superblock holds (d: the last one made
 * durable; every block noted since that it does not cover makes the
 * filter dirty, and a write waits for the sync that writes it).
 */
#define CACHE_RS_MAX 4096u
struct cache_restore {
	bool on;     /* restoring: new slots only of known pages (held), writes are noted */
	bool marked; /* the superblock says "restore pending" (durable), with d or all */
	bool all;    /* every record still to come is dropped (no memory, too many LUNs) */
	bool dirty;  /* a block noted that the durable copy does not cover */
	bool d_all;  /* the durable copy says "all": the next start is cold */
	uint32_t n;
	struct hl_cache_rs_range *r;
	uint32_t dn; /* the durable copy: dn ranges of d (sorted, disjoint) */
	struct hl_cache_rs_range *d;
	uint64_t gen;   /* bumped whenever dirty is set */
	uint64_t noted; /* ranges noted (and preloaded) */
	/*
	 * Record pages not known yet (hl_cache_core_restore_hold): a fill
	 * takes no slot of them. NULL: no slot is taken at all.
	 */
	uint64_t *held;
	uint64_t held_pages;
	uint32_t held_per;  /* records a page (a multiple of 64) */
	uint64_t fill_hint; /* where the next search for a FREE slot starts */
	/*
	 * The index pages the loader faulted in already (one bit per 4 KiB
	 * from the page of ix.tab; NULL: no prefault, or no memory for it):
	 * only the loader's thread reads and sets it, without the lock.
	 */
	uint64_t *faulted;
};

struct cache_stale_key {
	uint64_t key;
	uint64_t n; /* stale claims of key; 0: an empty entry */
};

struct hl_cache_core {
	struct hl_cache_params p;
	uint32_t spb;    /* 4K sectors per block */
	uint32_t vbytes; /* valid-bit bytes per slot */
	uint32_t block_shift;
	uint64_t nslots; /* SSD slots */
	uint64_t nwin;   /* RAM window slots, numbered after the SSD slots */
	uint64_t ntotal; /* nslots + nwin */
	uint64_t used;     /* slots holding a block, SSD and window */
	uint64_t win_used; /* of those, RAM window slots */
	/* ntotal keys, meaningful when the slot is not FREE (cache_slot_key) */
	struct cache_keys keys;
	/* per LUN index: 1 while a LUN has it + the slots not FREE that carry it */
	uint64_t lunix_refs[CACHE_KEY_LUNS];
	uint8_t *meta;   /* ntotal: CACHE_M_* */
	uint8_t *wflags; /* nwin: CACHE_W_* of the RAM window's slots */
	struct cache_busy busy;
	struct cache_partial partial;
	/*
	 * Bitmaps over slots (calloc'd, touched only where bits get set: a
	 * start touches no per-slot page).
	 */
	uint64_t *takenmap; /* bit set: slot not FREE */
	uint64_t *dirtymap; /* bit set: on-device record may be out of date */
	uint64_t *dirtygrp; /* bit set: a word of dirtymap in this group of 64 may be non-zero */
	uint64_t *lun_used; /* HL_CACHE_MAX_LUNS counters: USED slots per lun */
	struct cache_index ix;
	struct hl_admit *admit;
	struct cache_part win; /* the RAM window (n == 0: off) */
	/*
	 * Ghost of the window: keys it dropped without promotion, about the
	 * last 0.5-1x nslots drops. A miss found here has shown reuse beyond
	 * the window's reach.
	 */
	struct cache_bloom2 ghost;
	/*
	 * Rule 10 (cache_read.c): the far ghost remembers the window's drops
	 * further back (about the last 1-2x nslots), sequential streams' too;
	 * it counts only while the cache device is within its write budget.
	 */
	struct cache_bloom2 far_ghost;
	uint32_t ghost_shift; /* ghost keys: block numbers >> ghost_shift (regions) */
	struct cache_budget budget;
	struct cache_part parts[CACHE_MAX_PARTS];
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
	/*
	 * stale[0, stale_end): live claims and freed entries (epoch 0, chained
	 * from stale_free through next, reused first); nstale: the live ones.
	 * Entries never move, so the slot index below points into it.
	 */
	struct cache_stale *stale;
	uint64_t nstale, stale_end, stale_cap, meta_epoch;
	uint32_t stale_free;
	/*
	 * The keys of the stale claims, counted (open addressing, linear
	 * probing; skey_cap a power of two, at most half full): a write's check
	 * costs a probe per block, not a scan of the list (millions long after
	 * a big invalidation or a cold attach during a restore, until the next
	 * sync). skey_broken: no memory to grow it, the check scans the list.
	 */
	struct cache_stale_key *skey;
	uint64_t skey_cap, skey_used;
	bool skey_broken;
	/*
	 * The stale claims by slot (open addressing, linear probing, sidx_cap a
	 * power of two, at most half full; each slot's claims chained newest
	 * first through cache_stale.next): persisting a slot's record looks at
	 * its own claims, not the list (a sync after a whole LUN's 1M drops was
	 * 1M scans of it under the lock). sidx_broken: no memory to grow it,
	 * persisting scans the list until it is empty.
	 */
	struct cache_stale_slot *sidx;
	uint64_t sidx_cap, sidx_used;
	bool sidx_broken;
	/*
	 * A stale claim could not be tracked (no memory): every write syncs
	 * until a sync whose snapshot came after the last such claim (at
	 * overflow_epoch) made every dirty record durable
	 * (hl_cache_core_records_durable). stale_limit: tests, the list's
	 * most entries (0: no limit).
	 */
	bool stale_overflow;
	uint64_t overflow_epoch, stale_limit;
	struct cache_inval *inval; /* invalidations between chunks (cache_inval_covers) */
	uint32_t inval_chunk;      /* tests: slots a chunk drops (0: INVAL_CHUNK_DROPS) */
	struct hl_cache_stats st;
	uint64_t call; /* numbers read/write calls (for cache_part.exhausted) */
	struct cache_ub ub;
	struct cache_split split;
	/*
	 * hl_cache_core_read_shadow is planning: misses go straight to the SSD
	 * (a free slot or a CLOCK victim no more frequent), nothing is counted
	 * as a read, and the sequential detector and write budget are left
	 * alone (a standby's pre-read of its owner's hot set is not a workload).
	 */
	bool shadow;
	/* a lazy warm restart in progress (cache_restore.c) */
	struct cache_restore rs;
};

/* ---- bit helpers ---- */

static inline void cache_bit_set(uint64_t *m, uint64_t i)
{
	m[i / 64] |= 1ull << (i % 64);
}

static inline void cache_bit_clear(uint64_t *m, uint64_t i)
{
	m[i / 64] &= ~(1ull << (i % 64));
}

static inline bool cache_bit_test(const uint64_t *m, uint64_t i)
{
	return m[i / 64] >> (i % 64) & 1;
}

/* Bit vectors of sectors (valid bits, pending bits): bit i = sector i. */
static inline void cache_vset(uint8_t *v, uint32_t first, uint32_t n)
{
	for (uint32_t i = first; i < first + n; i++)
		v[i / 8] |= (uint8_t)(1u << (i % 8));
}

static inline void cache_vclear(uint8_t *v, uint32_t first, uint32_t n)
{
	for (uint32_t i = first; i < first + n; i++)
		v[i / 8] &= (uint8_t) ~(1u << (i % 8));
}

static inline bool cache_vtest(const uint8_t *v, uint32_t i)
{
	return v[i / 8] >> (i % 8) & 1;
}

static inline uint32_t cache_vcount(const uint8_t *v, uint32_t first, uint32_t n)
{
	uint32_t k = 0;
	for (uint32_t i = first; i < first + n; i++)
		k += cache_vtest(v, i);
	return k;
}

/* ---- slot keys ---- */

static inline uint64_t cache_slot_key(const struct hl_cache_core *c, uint32_t s)
{
	return cache_keys_get(&c->keys, s);
}

/*
 * Slot s gets key: its LUN must be registered and its block at most
 * CACHE_KEY_MAX_BLOCK (admit_miss and slot_restore check it).
 */
static inline void cache_slot_set_key(struct hl_cache_core *c, uint32_t s, uint64_t key)
{
	c->keys.lunix[s] = c->luns[cache_key_lun(key)]->kix;
	c->keys.block[s] = (uint32_t)cache_key_block(key);
}

/* ---- slot state ---- */

static inline uint8_t cache_state(const struct hl_cache_core *c, uint32_t s)
{
	return c->meta[s] & CACHE_M_STATE;
}

static inline bool cache_is_used(const struct hl_cache_core *c, uint32_t s)
{
	return cache_state(c, s) == CACHE_SLOT_USED;
}

static inline bool cache_is_busy(const struct hl_cache_core *c, uint32_t s)
{
	return c->meta[s] & CACHE_M_BUSY;
}

static inline uint32_t cache_clock(const struct hl_cache_core *c, uint32_t s)
{
	return (c->meta[s] & CACHE_M_CLOCK) >> CACHE_M_CLOCK_SHIFT;
}

static inline void cache_clock_set(struct hl_cache_core *c, uint32_t s, uint32_t v)
{
	c->meta[s] = (uint8_t)((c->meta[s] & ~CACHE_M_CLOCK) | v << CACHE_M_CLOCK_SHIFT);
}

static inline uint8_t *cache_wflags(const struct hl_cache_core *c, uint32_t s)
{
	return &c->wflags[s - c->nslots];
}

static inline void cache_mark_dirty(struct hl_cache_core *c, uint32_t s)
{
	cache_bit_set(c->dirtymap, s);
	cache_bit_set(c->dirtygrp, s / 4096);
}

/* ---- busy slots (cache_slot.c) ---- */

/* Home position of slot s in a side table of cap (a power of two) entries. */
static inline uint32_t cache_slot_home(uint32_t s, uint32_t cap)
{
	return (uint32_t)(((uint64_t)s * 0x9e3779b97f4a7c15ull) >> 32) & (cap - 1);
}

/** The entry of slot s, or NULL when no io uses it. */
static inline struct cache_busy_ent *cache_busy_find(const struct hl_cache_core *c, uint32_t s)
{
	const struct cache_busy *b = &c->busy;

	if (!b->n)
		return NULL;
	for (uint32_t i = cache_slot_home(s, b->cap);; i = (i + 1) & (b->cap - 1)) {
		if (b->tab[i].slot == s)
			return &b->tab[i];
		if (b->tab[i].slot == UINT32_MAX)
			return NULL;
	}
}

/** The entry of slot s, made if needed (s becomes BUSY). NULL: no memory. */
struct cache_busy_ent *cache_busy_get(struct hl_cache_core *c, uint32_t s);
/** Drop s's entry once nothing holds it (no pin, writer or data write). */
void cache_busy_put(struct hl_cache_core *c, uint32_t s);
/** The same with the entry at hand (NULL: nothing to do). */
void cache_busy_put_ent(struct hl_cache_core *c, struct cache_busy_ent *e);

/* Entries move when others come and go: look them up again after any get or put. */
static inline uint32_t cache_slot_gen(const struct hl_cache_core *c, uint32_t s)
{
	const struct cache_busy_ent *e = cache_is_busy(c, s) ? cache_busy_find(c, s) : NULL;
	return e ? e->gen : 0;
}

/* A change of content: tickets taken before it go stale (only busy slots have holders). */
static inline void cache_slot_gen_bump(struct hl_cache_core *c, uint32_t s)
{
	struct cache_busy_ent *e = cache_is_busy(c, s) ? cache_busy_find(c, s) : NULL;
	if (e)
		e->gen++;
}

static inline uint32_t cache_slot_pins(const struct hl_cache_core *c, uint32_t s)
{
	const struct cache_busy_ent *e = cache_is_busy(c, s) ? cache_busy_find(c, s) : NULL;
	return e ? e->pins : 0;
}

static inline uint32_t cache_slot_writers(const struct hl_cache_core *c, uint32_t s)
{
	const struct cache_busy_ent *e = cache_is_busy(c, s) ? cache_busy_find(c, s) : NULL;
	return e ? e->writers : 0;
}

/* ---- valid bits (cache_slot.c): bit i = sector i of the block ---- */

/** Slot s's valid bits into v (c->vbytes bytes). */
void cache_valid_get(const struct hl_cache_core *c, uint32_t s, uint8_t *v);
/** Sectors [first, first+n) of s become valid (nothing changes when RAM cannot say so). */
void cache_valid_set(struct hl_cache_core *c, uint32_t s, uint32_t first, uint32_t n);
/**
 * Sectors [first, first+n) of s stop being valid; with no memory to say
 * which others still are, none is (and the slot's claims are unclaimed).
 */
void cache_valid_clear(struct hl_cache_core *c, uint32_t s, uint32_t first, uint32_t n);
/** s holds nothing valid. */
void cache_valid_reset(struct hl_cache_core *c, uint32_t s);
/** Set s's valid bits to v (restore; as cache_valid_set when RAM cannot hold them). */
void cache_valid_put(struct hl_cache_core *c, uint32_t s, const uint8_t *v);
/** The bits of a partly valid slot, or NULL. */
const uint8_t *cache_partial_find(const struct hl_cache_core *c, uint32_t s);

static inline bool cache_valid_full(const struct hl_cache_core *c, uint32_t s)
{
	return c->meta[s] & CACHE_M_FULL;
}

static inline bool cache_valid_test(const struct hl_cache_core *c, uint32_t s, uint32_t i)
{
	const uint8_t *v;

	if (cache_valid_full(c, s))
		return true;
	v = cache_partial_find(c, s);
	return v && cache_vtest(v, i);
}

static inline uint32_t cache_valid_count(const struct hl_cache_core *c, uint32_t s, uint32_t first,
                                         uint32_t n)
{
	const uint8_t *v;

	if (cache_valid_full(c, s))
		return n;
	v = cache_partial_find(c, s);
	return v ? cache_vcount(v, first, n) : 0;
}

/* Nothing valid: neither full nor partly valid. */
static inline bool cache_valid_empty(const struct hl_cache_core *c, uint32_t s)
{
	return !cache_valid_full(c, s) && !cache_partial_find(c, s);
}

/* The pending-sector bits of RAM update buffer map entry i (cache_ub.c). */
static inline uint8_t *cache_ub_bits(const struct hl_cache_core *c, uint64_t i)
{
	return c->ub.map_bits + i * c->vbytes;
}

/* ---- request helpers ---- */

/* The sectors of block b that [off, off+len) touches: [*first, *first + *n). */
static inline void cache_block_sectors(const struct hl_cache_core *c, uint64_t b, uint64_t off,
                                       uint64_t len, uint32_t *first, uint32_t *n)
{
	uint64_t bstart = b << c->block_shift, bend = bstart + c->p.block_size;
	uint64_t s = HL_MAX(off, bstart), e = HL_MIN(off + len, bend);
	uint32_t f = (uint32_t)((s - bstart) / HL_CACHE_SECTOR);
	uint32_t l = (uint32_t)((e - bstart - 1) / HL_CACHE_SECTOR);
	*first = f;
	*n = l - f + 1;
}

static inline int cache_check_range(const struct hl_cache_core *c, uint64_t off, uint64_t len)
{
	if (!len || off + len < off || ((off + len - 1) >> c->block_shift) > HL_CACHE_MAX_BLOCK_NR)
		return -EINVAL;
	return 0;
}

/* A fresh io for block b (slot s, HL_CACHE_NO_SLOT if uncached), sectors [first, first+n). */
/* Block b of lun lies in a range invalidation in progress: not served, not filled. */
static inline bool cache_inval_covers(const struct hl_cache_core *c, uint16_t lun, uint64_t b)
{
	for (const struct cache_inval *v = c->inval; v; v = v->next)
		if (v->lun == lun && b >= v->b0 && b <= v->b1)
			return true;
	return false;
}

static inline void cache_io_init(struct hl_cache_io *io, uint64_t b, uint32_t s, uint32_t first,
                                 uint32_t n)
{
	memset(io, 0, sizeof(*io));
	io->block = b;
	io->slot = s;
	io->first = (uint16_t)first;
	io->nsect = (uint16_t)n;
}

/*
 * A read's or write's start: its LUN (into *l) and its range checked.
 * @return the cache blocks it spans, or -ENOENT (no such LUN) / -EINVAL.
 */
static inline int64_t cache_req_start(struct hl_cache_core *c, uint16_t lun, uint64_t off,
                                      uint64_t len, struct cache_lun **l)
{
	*l = c->luns[lun];
	if (!*l)
		return -ENOENT;
	if (cache_check_range(c, off, len))
		return -EINVAL;
	return hl_cache_core_nblocks(c, off, len);
}

static inline void cache_stats_add(struct cache_lun *l, struct hl_cache_stats *g, size_t field,
                                   uint64_t v)
{
	*(uint64_t *)((char *)&l->st + field) += v;
	*(uint64_t *)((char *)g + field) += v;
}

#define CACHE_STAT(c, l, f, v)                                                                     \
	cache_stats_add((l), &(c)->st, offsetof(struct hl_cache_stats, f), (v))

/* ---- write budget (rule 10) ---- */

/* Device bytes written since the budget last took them in. */
static inline uint64_t cache_budget_new_bytes(const struct hl_cache_core *c)
{
	return c->st.bytes_cache_write >= c->budget.last ? c->st.bytes_cache_write - c->budget.last
	                                                 : 0;
}

/* The recent device bytes written, the update buffer's pending bytes included. */
static inline double cache_budget_written(const struct hl_cache_core *c)
{
	return c->budget.written + (double)cache_budget_new_bytes(c) + (double)c->ub.bytes;
}

/* The recent device writes per admit-all byte (0: no miss yet). */
static inline double cache_budget_ratio(const struct hl_cache_core *c)
{
	return c->budget.admit_all > 0 ? cache_budget_written(c) / c->budget.admit_all : 0;
}

/* Does rule 10 relax admission now? Frequency admission with a window only. */
static inline bool cache_budget_is_open(const struct hl_cache_core *c)
{
	return c->p.write_budget_pct && c->p.admit == HL_ADMIT_FREQ && c->win.n &&
	       cache_budget_written(c) * 100 < (double)c->p.write_budget_pct * c->budget.admit_all;
}

/* ---- CLOCK ---- */

static inline void cache_advance_hand(struct cache_part *pt, uint32_t s)
{
	pt->hand = s + 1;
	if (pt->hand >= pt->first + pt->n)
		pt->hand = pt->first;
}

/*
 * ---- writes in flight to uncached blocks ----
 * A counting bloom filter: two 32-bit counters per key. A false positive
 * only skips one admission while some other write is in flight.
 */

static inline void cache_wip_pos(uint64_t key, uint32_t *a, uint32_t *b)
{
	uint64_t h = cache_hash(key ^ 0x3c6ef372fe94f82bull);
	*a = (uint32_t)(h & (CACHE_WIP_BUCKETS - 1));
	*b = (uint32_t)((h >> 32) & (CACHE_WIP_BUCKETS - 1));
}

static inline bool cache_wip_find(const struct hl_cache_core *c, uint64_t key)
{
	uint32_t a, b;

	if (!c->wip_n)
		return false;
	cache_wip_pos(key, &a, &b);
	return c->wip[a] && c->wip[b];
}

/* ---- functions the core's files share ---- */

/* cache_core.c: slot life cycle and CLOCK partitions */
/** Give slot s (FREE) of partition pt to key. */
void cache_slot_take(struct hl_cache_core *c, struct cache_part *pt, uint32_t s, uint64_t key);
/** Restoring: blocks [b0, b1] of lun were written or invalidated (the loader drops them). */
void cache_restore_note(struct hl_cache_core *c, uint16_t lun, uint64_t b0, uint64_t b1);
/* Does the superblock's durable copy of the filter cover blocks [b0, b1] of lun? */
bool cache_restore_durable(const struct hl_cache_core *c, uint16_t lun, uint64_t b0, uint64_t b1);
/** Restoring and block of lun is in the filter. */
bool cache_restore_covers(const struct hl_cache_core *c, uint16_t lun, uint64_t block);
/** A FREE slot of pt a fill may take while restoring, or HL_CACHE_NO_SLOT. */
uint32_t cache_restore_find_free(struct hl_cache_core *c, struct cache_part *pt);
/** cache_slot_take() after the caller put keys[s] into the index itself. */
void cache_slot_taken(struct hl_cache_core *c, struct cache_part *pt, uint32_t s);
/** Make a USED slot FREE (it must be unpinned and have no writers). */
void cache_slot_release(struct hl_cache_core *c, uint32_t s);
/** Release s if it no longer holds anything and nobody uses it. */
void cache_slot_maybe_release(struct hl_cache_core *c, uint32_t s);
/** A FREE slot in the partition, or HL_CACHE_NO_SLOT. */
uint32_t cache_part_find_free(struct hl_cache_core *c, struct cache_part *pt);
/** The partition's CLOCK victim (*empty: it holds no valid sector), or HL_CACHE_NO_SLOT. */
uint32_t cache_part_find_victim(struct hl_cache_core *c, struct cache_part *pt, bool *empty);

/* cache_claims.c: stale on-device claims */
/** A slot whose record may claim key stops holding it: remember the stale claim. */
void cache_stale_add(struct hl_cache_core *c, uint64_t key, uint32_t slot);
/*
 * Room for n more stale claims, for an invalidation in chunks about to drop
 * up to n claimed slots: no chunk rehashes a million entries or faults in
 * their tables. _init grows the list and allocates bigger hashes (false:
 * none needed, or no memory: they grow as the claims come); _step makes
 * about `bytes` of them ready (true: all); _install moves the claims in
 * use into them (or frees them when the ones in use outgrew them).
 */
struct cache_stale_room {
	struct cache_stale_key *skey;
	struct cache_stale_slot *sidx;
	uint64_t skey_cap, sidx_cap, at;
};
bool cache_stale_room_init(struct hl_cache_core *c, uint64_t n, struct cache_stale_room *r);
bool cache_stale_room_step(struct cache_stale_room *r, uint64_t bytes);
void cache_stale_room_install(struct hl_cache_core *c, struct cache_stale_room *r);

/* cache_ub.c: pending sectors of the RAM update buffer */
/** Map position of slot's entry, or UINT64_MAX. */
uint64_t cache_ub_find(const struct hl_cache_core *c, uint32_t slot);
/** Sectors [first, first+n) of slot s are no longer pending. */
void cache_ub_clear(struct hl_cache_core *c, uint32_t s, uint32_t first, uint32_t n);
/** Sectors [first, first+n) of slot s now live in the buffer; false: cannot track them. */
bool cache_ub_add(struct hl_cache_core *c, uint32_t s, uint32_t first, uint32_t n);

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
static inline bool cache_slot_unclaim(struct hl_cache_core *c, uint32_t s)
{
	if (!(c->meta[s] & CACHE_M_DISK_VALID))
		return false;
	cache_stale_add(c, cache_slot_key(c, s), s);
	return true;
}

/* ---- two rotating bloom filters (cache_core.c) ---- */

/** Room for cap keys per filter, hashed with salt. @return 0 or -ENOMEM (free with _fini). */
int cache_bloom2_init(struct cache_bloom2 *b, uint64_t cap, uint64_t salt);
/** The same with bits_per_key bits a key exactly (no power of two) and k hashes. */
int cache_bloom2_init_sized(struct cache_bloom2 *b, uint64_t cap, uint64_t salt,
                            uint32_t bits_per_key, uint32_t k);
void cache_bloom2_fini(struct cache_bloom2 *b);
/** Remember key; the older filter is cleared for reuse once the newer holds cap keys. */
void cache_bloom2_add(struct cache_bloom2 *b, uint64_t key);
/** Was key added among about the last cap..2 cap keys? (never for an unset b) */
bool cache_bloom2_test(const struct cache_bloom2 *b, uint64_t key);

/* ---- window / update buffer split (cache_split.c; no-ops when off) ---- */

/** Turn the split on: the window owns w0 slots of the walloc allocated. @return 0 or -ENOMEM. */
int cache_split_init(struct hl_cache_core *c, uint32_t w0, uint32_t walloc);
void cache_split_fini(struct hl_cache_core *c);
/** The update buffer is now bytes (0: off): what it lends, and ub.cap. */
void cache_split_set_buffer(struct hl_cache_core *c, uint64_t bytes);
/** Events: window slot s got a block; the window dropped key (to the ghost); */
void cache_split_took(struct hl_cache_core *c, uint32_t s);
void cache_split_dropped(struct hl_cache_core *c, uint64_t key);
/** key came back from the ghost; a window hit on slot s; */
void cache_split_returned(struct hl_cache_core *c, uint64_t key);
void cache_split_window_hit(struct hl_cache_core *c, uint32_t s);
/** SSD slot s got a promoted block; slot s was released; */
void cache_split_promoted(struct hl_cache_core *c, uint32_t s);
void cache_split_released(struct hl_cache_core *c, uint32_t s);
/** a write updates sectors of SSD slot s (before the buffer drops them); a write-back. */
void cache_split_update(struct hl_cache_core *c, uint32_t s, uint32_t first, uint32_t n);
void cache_split_written_back(struct hl_cache_core *c, uint32_t s, uint32_t first, uint32_t n);
/**
 * cache_read.c: window slot s (USED, idle) is dropped; its block is
 * remembered by the ghost (and the split) unless it held nothing or was a
 * sequential stream's.
 */
void cache_window_drop(struct hl_cache_core *c, uint32_t s);

#endif
