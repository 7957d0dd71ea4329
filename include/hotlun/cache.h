/*
 * cache.h - the read cache's core (src/cache/core): a cache shared by many
 * LUNs, keyed by (lun id, cache block), with frequency admission, CLOCK
 * eviction and per-4 KiB valid bits.
 *
 * The policy core (struct hl_cache_core): index, slots, admission,
 * eviction, write/invalidate rules, the RAM update buffer's bookkeeping and
 * stats as pure functions with no I/O and no threads. hotlun-sim drives it
 * directly, through this header only; the daemon drives it through the
 * cache engine (include/hotlun/cache_engine.h, src/cache/engine), which
 * also owns the cache device and its on-device metadata. Not thread-safe:
 * the caller serialises calls (the engine holds one mutex around every core
 * call; they are all O(1) amortised per cache block).
 *
 * Units: offsets and lengths are bytes on a LUN; the cache tracks 4 KiB
 * sectors (HL_CACHE_SECTOR). Nothing here knows SCSI or iSCSI.
 *
 * Data-path protocol (what the daemon does, and what the sim does with the
 * device I/O replaced by accounting):
 *
 *   read:  hl_cache_core_read() -> per cache block an hl_cache_io saying HIT
 *          (read the slot from the cache device), or MISS/PARTIAL (read the
 *          origin) and whether to FILL the slot with what the origin
 *          returned; PROMOTE ios copy a RAM window block to the SSD. Just
 *          before writing data into a slot: hl_cache_core_io_start() (may
 *          say "stale, skip"). After the device/origin I/O:
 *          hl_cache_core_io_end() for every io (installs a fill only if no
 *          write raced it).
 *   write: hl_cache_core_write_begin() before the origin write (cached
 *          sectors stop being served, in-flight fills become stale, blocks
 *          not cached cannot be admitted meanwhile);
 *          hl_cache_core_write_end() after it, for every io: says whether
 *          to write the new data into the slot (update mode); then
 *          io_start, the data write, hl_cache_core_io_end().
 *   records: see docs/cache-format.md for when the engine must persist
 *          slot records (meta_barrier, hl_cache_core_write_needs_sync).
 *   range invalidation (UNMAP, WRITE SAME, PREEMPT AND ABORT, LUN removal):
 *          hl_cache_core_invalidate().
 */
#ifndef HOTLUN_CACHE_H
#define HOTLUN_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HL_CACHE_SECTOR       4096u /* valid-bit granularity */
#define HL_CACHE_MIN_BLOCK    4096u
#define HL_CACHE_MAX_BLOCK    (1024u * 1024) /* 256 sectors per block */
#define HL_CACHE_MAX_LUNS     65536u         /* lun ids are 16 bits */
#define HL_CACHE_MAX_BLOCK_NR ((1ull << 48) - 1)
#define HL_CACHE_NO_SLOT      UINT32_MAX

/*
 * What one cache holds (a slot keeps its key in 5 bytes): disks at a time
 * (hl_cache_core_lun_add says -EMFILE past it), and the highest cache
 * block number it caches (16 TiB into a disk at 4 KiB blocks, 4 PiB at
 * 1 MiB); blocks above it are always read from the origin.
 */
#define HL_CACHE_MAX_DISKS     256u
#define HL_CACHE_MAX_CACHED_NR 0xffffffffull

/* ------------------------------------------------------------------ */
/* Admission policies                                                 */
/* ------------------------------------------------------------------ */

/** Admission policies, the index of the ops table. */
enum hl_admit_kind {
	HL_ADMIT_FREQ = 0, /* default: count-min sketch, candidate vs victim */
	HL_ADMIT_ALWAYS,   /* admit every miss (classic CLOCK) */
	HL_ADMIT_NHIT,     /* admit on the Nth miss of a block */
	HL_ADMIT__COUNT,
};

struct hl_admit;

/**
 * One admission policy. Every hook except name/init/fini is optional: a
 * missing on_access does nothing, a missing should_admit admits.
 */
struct hl_admit_ops {
	const char *name;
	/** Allocate state sized for nslots cache slots of block_size bytes; param is N for nhit. @return 0/-errno. */
	int (*init)(struct hl_admit *a, uint64_t nslots, uint32_t block_size, uint32_t param);
	void (*fini)(struct hl_admit *a);
	/** Every read access of a cache block (hit or miss) is reported once. */
	void (*on_access)(struct hl_admit *a, uint64_t key, bool miss);
	/**
	 * Admit key? have_free: a free slot exists (no eviction needed);
	 * otherwise victim_key is what would be evicted.
	 */
	bool (*should_admit)(struct hl_admit *a, uint64_t key, bool have_free, uint64_t victim_key);
	/**
	 * Admit key, a block that comes back soon after the RAM window dropped
	 * it, in place of victim_key? Optional: defaults to should_admit.
	 */
	bool (*admit_returning)(struct hl_admit *a, uint64_t key, uint64_t victim_key);
	/** Estimated access frequency (for tests and stats); optional. */
	uint32_t (*estimate)(const struct hl_admit *a, uint64_t key);
	/** RAM used by the policy's state. */
	size_t (*mem_bytes)(const struct hl_admit *a);
};

/** The ops of one policy. kind must be < HL_ADMIT__COUNT. */
const struct hl_admit_ops *hl_admit_ops_get(enum hl_admit_kind kind);

/**
 * Parse "freq" (alias "default", "tinylfu"), "always", "nhit:N" (N >= 1).
 * @return 0 or -EINVAL.
 */
int hl_admit_parse(const char *s, enum hl_admit_kind *kind, uint32_t *param);

/**
 * Opaque admission state; the core owns one. Exposed for unit tests only.
 * block_size: the cache's (freq's counters are 3 bits up to 8 KiB, 4 above).
 */
int hl_admit_create(enum hl_admit_kind kind, uint64_t nslots, uint32_t block_size, uint32_t param,
                    struct hl_admit **out);
void hl_admit_destroy(struct hl_admit *a);
void hl_admit_access(struct hl_admit *a, uint64_t key, bool miss);
bool hl_admit_should(struct hl_admit *a, uint64_t key, bool have_free, uint64_t victim_key);
bool hl_admit_should_returning(struct hl_admit *a, uint64_t key, uint64_t victim_key);
uint32_t hl_admit_estimate(const struct hl_admit *a, uint64_t key);
size_t hl_admit_mem_bytes(const struct hl_admit *a);

/* ------------------------------------------------------------------ */
/* Policy core                                                        */
/* ------------------------------------------------------------------ */

enum hl_cache_write_mode {
	HL_CACHE_WRITE_UPDATE = 0, /* default: write-through, cached sectors get the new data */
	HL_CACHE_WRITE_INVALIDATE, /* cached sectors are dropped on write */
};

/** Configuration of one cache. Fill with hl_cache_params_default() first. */
struct hl_cache_params {
	uint64_t capacity;        /* bytes of cache data (rounded down to blocks) */
	uint32_t block_size;      /* power of two, 4 KiB .. 1 MiB */
	enum hl_admit_kind admit; /* default HL_ADMIT_FREQ */
	uint32_t admit_param;     /* N for nhit */
	uint64_t seq_bypass;      /* sequential streams longer than this bypass; 0: off */
	enum hl_cache_write_mode write_mode;
	bool fill_whole_block; /* on admission fill the whole block, not only the request */
	bool admit_free;       /* admit freely while free slots remain (default true) */
	/*
	 * RAM probation window in front of the SSD: misses the admission policy
	 * refuses are kept in RAM (no SSD write), so a block re-read soon after
	 * its miss still hits. HL_CACHE_WINDOW_AUTO: 1% of capacity, at least
	 * 16 MiB and 256 blocks, at most 64 MiB. 0: off.
	 */
	uint64_t window_bytes;
	/*
	 * Write budget (docs/cache-policy.md, rule 10), in percent: while the
	 * cache device has written less than this share of what an admit-all
	 * cache would have written (a block per missed block), frequency
	 * admission also lets in blocks that come back from further away,
	 * re-read sequential streams among them. 0: never. Default 25.
	 */
	uint32_t write_budget_pct;
};

#define HL_CACHE_WINDOW_AUTO          UINT64_MAX
#define HL_CACHE_WRITE_BUDGET_DEFAULT 25

/*
 * RAM update buffer (docs/cache-policy.md, rule 8): updates of blocks cached
 * on the SSD stay in RAM and are written back oldest first once more than
 * this many bytes are pending. The default of the daemon and hotlun-sim.
 */
#define HL_CACHE_UPDATE_BUFFER_DEFAULT (16ull << 20)

/** Defaults: 64 KiB blocks, freq admission, 1 MiB sequential bypass, update mode. */
void hl_cache_params_default(struct hl_cache_params *p);

/** Per cache and per LUN counters. Bytes are bytes of LUN data. */
struct hl_cache_stats {
	uint64_t read_reqs;     /* read requests */
	uint64_t read_hits;     /* every 4K sector of the request was valid in cache */
	uint64_t read_partial;  /* some but not all */
	uint64_t read_misses;   /* none */
	uint64_t read_bypass;   /* requests of a sequential stream (no admission) */
	uint64_t admissions;    /* cache blocks given a slot on a miss */
	uint64_t rejections;    /* misses the admission policy refused */
	uint64_t evictions;     /* valid slots reused for another block */
	uint64_t fills_dropped; /* fills/updates not installed because a write raced them */
	uint64_t write_reqs;
	uint64_t write_updates;      /* cache blocks updated by a write-through */
	uint64_t invalidations;      /* cache blocks (partly) dropped by writes or ranges */
	uint64_t bytes_read;         /* bytes of read requests */
	uint64_t bytes_read_cache;   /* ... served from the cache device */
	uint64_t bytes_read_origin;  /* ... read from the origin */
	uint64_t bytes_written;      /* bytes of write requests */
	uint64_t bytes_cache_write;  /* bytes written to the cache device (fills + updates) */
	uint64_t bytes_cache_update; /* part of bytes_cache_write from write-through updates */
	uint64_t bytes_read_ram;     /* part of bytes_read_cache served by the RAM window */
	uint64_t window_fills;       /* misses kept in the RAM window instead of the SSD */
	uint64_t bytes_read_bypass;  /* bytes of the read_bypass requests */
};

/** What the caller does for one cache block of a request. */
enum hl_cache_io_kind {
	HL_CACHE_IO_HIT = 0, /* read [first, first+nsect) from slot; origin not needed */
	HL_CACHE_IO_PARTIAL, /* some sectors valid: read the origin; may fill the rest */
	HL_CACHE_IO_MISS,    /* read the origin; may fill */
	HL_CACHE_IO_UPDATE,  /* write request touching a cached block */
	HL_CACHE_IO_PROMOTE, /* copy sectors [fill_first, +fill_nsect) of RAM window slot
	                        src_slot into SSD slot `slot` (not part of the request; the
	                        block may be another LUN's: see hl_cache_io.lun) */
};

/**
 * One cache block's part of a request. Filled by the core, handed back to
 * hl_cache_core_write_end()/hl_cache_core_io_end(). Plain value; no
 * pointers into the core.
 */
struct hl_cache_io {
	uint64_t block;       /* cache block number on the LUN */
	uint32_t slot;        /* HL_CACHE_NO_SLOT when the block is not cached */
	uint32_t ticket;      /* slot generation when the io started */
	uint32_t src_slot;    /* PROMOTE: the window slot holding the data */
	uint16_t first;       /* first 4K sector of the block in the request */
	uint16_t nsect;       /* sectors of the block in the request */
	uint16_t fill_first;  /* sectors to write into the slot (fill/update) */
	uint16_t fill_nsect;  /* 0: nothing to write into the slot */
	uint16_t lun;         /* PROMOTE: the LUN of the block it copies. The RAM window is
	                         shared by the cache's LUNs, so a read of one LUN may promote
	                         another's block: io_start/io_end go by this, not their lun */
	uint8_t kind;         /* enum hl_cache_io_kind */
	uint8_t pinned;       /* the io holds a pin on slot (released by io_end) */
	uint8_t meta_barrier; /* the slot's on-device record must be made invalid first */
	uint8_t admitted;     /* the slot was newly given to this block */
	uint8_t ram;          /* slot is a RAM window slot (hl_cache_core_info().window_slots) */
	uint8_t rmw_head;     /* UPDATE: sector fill_first is only partly written: read its
	                         old content from the slot at write_begin time and merge */
	uint8_t rmw_tail;     /* UPDATE: same for sector fill_first + fill_nsect - 1 */
	uint8_t started;      /* core-private: io_start granted the slot's data to this io */
	uint8_t wip;          /* core-private: a write to an uncached block is tracked */
};

struct hl_cache_core;

/**
 * Create a core for p->capacity / p->block_size slots. Caller keeps p.
 * @return 0, -EINVAL (bad params) or -ENOMEM.
 */
int hl_cache_core_create(const struct hl_cache_params *p, struct hl_cache_core **out);
void hl_cache_core_destroy(struct hl_cache_core *c);

/**
 * Switch the admission policy of a running core (cached blocks stay; the new
 * policy starts with empty counts). @return 0, -EINVAL (bad kind/param), -ENOMEM.
 */
int hl_cache_core_set_admission(struct hl_cache_core *c, enum hl_admit_kind kind, uint32_t param);
/** Change the write budget (percent, 0..100; rule 10). @return 0 or -EINVAL. */
int hl_cache_core_set_write_budget(struct hl_cache_core *c, uint32_t pct);

/**
 * Switch what writes do to cached blocks from the next write_begin on
 * (writes already begun finish as they began). @return 0 or -EINVAL.
 */
int hl_cache_core_set_write_mode(struct hl_cache_core *c, enum hl_cache_write_mode mode);

/**
 * Register a LUN. quota_bytes 0: the LUN shares the pool; otherwise it gets
 * a private partition of that many bytes carved out of the pool (like a
 * per-disk reservation), evicting only its own blocks. @return 0, -EEXIST,
 * -ENOSPC (not enough unreserved pool), -EMFILE (HL_CACHE_MAX_DISKS LUNs
 * already, counting removed ones whose slots are still in use), -EINVAL.
 */
int hl_cache_core_lun_add(struct hl_cache_core *c, uint16_t lun, uint64_t quota_bytes);

/**
 * Drop every block of the LUN and forget it (its partition returns to the
 * pool once no slot is pinned). @return 0 or -ENOENT.
 */
int hl_cache_core_lun_remove(struct hl_cache_core *c, uint16_t lun);

/** Number of ios a request [off, off+len) needs (cache blocks it spans). */
uint32_t hl_cache_core_nblocks(const struct hl_cache_core *c, uint64_t off, uint64_t len);

/**
 * Window victims the RAM window's CLOCK hand looks at for one missed
 * block, each promoted to the SSD or dropped: a read of nb blocks plans
 * at most HL_CACHE_PROMOTE_PER_MISS * nb PROMOTE ios after its blocks.
 * With frequency admission (the default) every returning victim the hand
 * meets may go; always and nhit:N promote at most max(nb, 2) a read (every
 * victim competes there; more churn the SSD: docs/cache-policy.md,
 * "Promotions a read carries").
 */
#define HL_CACHE_PROMOTE_PER_MISS 4

/**
 * The max to pass to hl_cache_core_read() for a read of nb blocks that may
 * plan per_miss promotions a block: nb + per_miss x nb. hotlund passes
 * HL_CACHE_PROMOTE_PER_MISS (hl_cache_read_max_ios), hotlun-sim its
 * --promote-max.
 */
static inline uint32_t hl_cache_read_max_ios_per(uint32_t nb, uint32_t per_miss)
{
	return nb + per_miss * nb;
}

/** The max to pass to hl_cache_core_read() for a read of nb blocks (hotlund's array). */
static inline uint32_t hl_cache_read_max_ios(uint32_t nb)
{
	return hl_cache_read_max_ios_per(nb, HL_CACHE_PROMOTE_PER_MISS);
}

/**
 * Plan a read of [off, off+len) on lun: ios[0 .. nblocks-1] are the cache
 * blocks of the request in order; entries after them (if max leaves room)
 * are PROMOTE ios, window blocks the admission policy moves to the SSD.
 * Counts the request in the stats; records accesses for admission; pins
 * the slots it returns. Every returned io must be finished with
 * hl_cache_core_io_end(). Pass max > nblocks to allow promotions
 * (hl_cache_read_max_ios()); a window victim the read has no io left for
 * is dropped.
 * @return number of ios (>= 1), -ENOENT (unknown lun), -E2BIG (max <
 * nblocks), -EINVAL (len 0 or range past 2^48 blocks).
 */
int hl_cache_core_read(struct hl_cache_core *c, uint16_t lun, uint64_t off, uint64_t len,
                       struct hl_cache_io *ios, uint32_t max);

/**
 * Before writing [off, off+len) to the origin: cached sectors it touches
 * stop being valid, in-flight fills of those blocks become stale, and
 * blocks not cached cannot be admitted until the write ends (a fill
 * widened to the whole block could otherwise install pre-write data).
 * Returns one io per cache block of the range (slot HL_CACHE_NO_SLOT when
 * not cached); every one must go through hl_cache_core_write_end() once
 * the origin write finished. max >= hl_cache_core_nblocks().
 * @return number of ios, -ENOENT, -E2BIG, -EINVAL.
 */
int hl_cache_core_write_begin(struct hl_cache_core *c, uint16_t lun, uint64_t off, uint64_t len,
                              struct hl_cache_io *ios, uint32_t max);

/**
 * The origin write of io finished (origin_ok: it succeeded). On return
 * io->fill_nsect > 0 means "write the new data of sectors [fill_first,
 * +fill_nsect) into io->slot, then call hl_cache_core_io_end()"; otherwise
 * the io is finished already (do not call io_end).
 */
void hl_cache_core_write_end(struct hl_cache_core *c, uint16_t lun, struct hl_cache_io *io,
                             bool origin_ok);

/**
 * Just before writing fill, update or promotion data into io->slot (on the
 * device or in the RAM window): @return true when this io may write the
 * slot's sectors now; false when the io is already stale (a write or an
 * invalidation came after it) or another io is writing the slot: then do
 * not write, and finish with hl_cache_core_io_end(written = false). Two
 * data writes to one slot never overlap in time, and a stale one never
 * lands after a current one. Single-threaded callers (the simulator) may
 * skip it.
 */
bool hl_cache_core_io_start(struct hl_cache_core *c, uint16_t lun, struct hl_cache_io *io);

/**
 * Finish an io from hl_cache_core_read() or a write_end() that asked for
 * data: written says the fill/update data reached the cache device (false
 * on device error or when the caller skipped the fill). Installs the
 * sectors only if no write/invalidation touched the slot since the io
 * started; unpins. lun: the LUN of the request the io came from (a
 * PROMOTE goes by its own io->lun, here and in io_start).
 */
void hl_cache_core_io_end(struct hl_cache_core *c, uint16_t lun, struct hl_cache_io *io,
                          bool written);

/**
 * hl_cache_core_read() for a standby's pre-read of its owner's hot set (the
 * shadow, docs/gateways.md "Warm standby"): a missed block goes straight to
 * an SSD slot (a free one, or the CLOCK victim unless that is more
 * frequent), never to the RAM window; nothing is counted as a read (the
 * hit ratio stays the workload's), and the sequential detector and write
 * budget see nothing. Same contract for ios otherwise.
 */
int hl_cache_core_read_shadow(struct hl_cache_core *c, uint16_t lun, uint64_t off, uint64_t len,
                              struct hl_cache_io *ios, uint32_t max);

/** A cached block and how hot it is (hl_cache_core_hot_scan). */
struct hl_cache_hot {
	uint64_t block; /* cache block number on its LUN */
	uint32_t freq;  /* admission estimate x 4 + CLOCK counter: higher is hotter */
};

/**
 * Walk SSD slots [*cursor, *cursor + nslots) and append the blocks of lun
 * they hold (some sector valid) to out, at most max (the walk stops there).
 * *cursor moves past the last slot looked at; the walk is done once it
 * reaches hl_cache_core_info().nslots. Lets a caller list a LUN's resident
 * blocks a slice per lock hold; it orders them by freq itself. No side
 * effects. @return how many were appended.
 */
uint32_t hl_cache_core_hot_scan(const struct hl_cache_core *c, uint16_t lun, uint64_t *cursor,
                                uint64_t nslots, struct hl_cache_hot *out, uint32_t max);

/**
 * Drop [off, off+len) of lun from the cache (UNMAP, WRITE SAME, PREEMPT AND
 * ABORT, origin error). Fills in flight for those blocks become stale.
 * len UINT64_MAX - off or more: to the end of the LUN. @return 0 or -ENOENT.
 */
int hl_cache_core_invalidate(struct hl_cache_core *c, uint16_t lun, uint64_t off, uint64_t len);

/**
 * The same in chunks: every few thousand slots dropped (about 1 ms) it
 * calls yield(arg), which may release the lock that guards c and take it
 * again. Meanwhile the whole range is marked: a read of it is served by
 * the origin and never filled (nor a window block of it promoted) until
 * the call returns, so no block it has not dropped yet is served. The LUN
 * removed during a yield ends it. yield NULL: one hold.
 */
int hl_cache_core_invalidate_yield(struct hl_cache_core *c, uint16_t lun, uint64_t off,
                                   uint64_t len, void (*yield)(void *arg), void *arg);

/** Blocks of lun held in a slot now (SSD or RAM window). Walks every slot: for starts, not I/O. */
uint64_t hl_cache_core_lun_blocks(const struct hl_cache_core *c, uint16_t lun);

/** Counters of the whole cache, or of one LUN (lun >= 0). @return 0 or -ENOENT. */
int hl_cache_core_stats(const struct hl_cache_core *c, int lun, struct hl_cache_stats *out);

/** Geometry and RAM use. */
struct hl_cache_core_info {
	uint64_t nslots;       /* SSD slots: 0 .. nslots-1 */
	uint64_t window_slots; /* RAM window slots now: nslots .. nslots+window_slots-1 */
	uint64_t window_max_slots; /* allocated: the window may borrow up to this (rule 9) */
	uint64_t used_slots;   /* SSD slots holding a block (<= nslots) */
	uint64_t window_used_slots; /* RAM window slots holding a block */
	uint32_t block_size;
	size_t ram_bytes;       /* index + slot keys and states + their side tables (busy
	                           slots, partly valid slots) + bitmaps + the update buffer's
	                           map, excluding admission and the window's data buffers */
	size_t admit_ram_bytes; /* the admission policy's sketch and the window's ghosts */
	double ram_per_block;   /* ram_bytes / nslots */
	/*
	 * Rule 10's measure (recent, halved as it ages): cache-device bytes
	 * written, pending update-buffer bytes included, per byte an admit-all
	 * cache would have written (a block per missed block). 0 before any miss.
	 */
	double write_ratio;
	uint32_t write_budget_pct; /* the configured budget for that ratio (percent) */
	bool write_budget_open;    /* admission is relaxed now (frequency admission, a window) */
};
void hl_cache_core_info(const struct hl_cache_core *c, struct hl_cache_core_info *out);

/**
 * Look a block up without side effects (tests, the control socket). Fills
 * *valid (bit i = sector i, up to 256 bits, caller gives 32 bytes) when
 * non-NULL. @return slot or HL_CACHE_NO_SLOT.
 */
uint32_t hl_cache_core_peek(const struct hl_cache_core *c, uint16_t lun, uint64_t block,
                            uint8_t *valid);

/*
 * ---- RAM update buffer (write coalescing; docs/cache-policy.md rule 8) ----
 * The core keeps the books (which sectors of which slot are pending, and
 * which block to write back next); the caller keeps the sector copies: the
 * engine in RAM (src/cache/engine/engine_ub.c), hotlun-sim as accounting.
 */

/*
 * hl_cache_io.src_slot of an UPDATE io that involves the RAM update buffer:
 *  - io->ram == 1 (from write_begin): write the new data into the buffer's
 *    copy of (slot, sectors), not to the device; io_end(written) then makes
 *    the sectors valid and pending (served from the buffer).
 *  - io->ram == 0 (from hl_cache_core_ub_writeback): copy the buffer's data
 *    of (slot, fill range) to the device; io_end(written) makes them valid
 *    on the device, io_end(!written) leaves them invalid. Either way the
 *    buffer copy of those sectors may then be freed.
 */
#define HL_CACHE_IO_UB_SRC 0xfffffffeu

/**
 * Enable (bytes > 0) or disable the RAM update buffer: updates of blocks
 * cached on the device go to RAM and are written back, oldest first, when
 * more than bytes are pending. Off by default. @return 0, -EBUSY (updates
 * are pending), -ENOMEM.
 */
int hl_cache_core_set_update_buffer(struct hl_cache_core *c, uint64_t bytes);

/**
 * Stop (closed) or resume taking updates into the buffer: while closed,
 * write_begin sends the updates of cached blocks to the device, so that
 * hl_cache_core_ub_drain() can empty the buffer while writes go on (before
 * hl_cache_core_set_update_buffer() resizes it, which also reopens it).
 */
void hl_cache_core_ub_close(struct hl_cache_core *c, bool closed);

/**
 * Pending bytes of slot (sectors whose current data is only in the buffer);
 * bits (may be NULL, caller's, >= block_size / 32 KiB bytes) gets them.
 */
uint64_t hl_cache_core_ub_pending(const struct hl_cache_core *c, uint32_t slot, uint8_t *bits);

/** Slots the update buffer tracks (0: no slot has pending sectors, no lookup needed). */
uint64_t hl_cache_core_ub_slots(const struct hl_cache_core *c);

/**
 * Next write-back the buffer needs (it holds more than its limit): fills
 * *io (a pinned UPDATE, src_slot HL_CACHE_IO_UB_SRC, ram 0) and *lun, which
 * the caller completes with hl_cache_core_io_end(). Call until false after
 * every write_end. Sectors it dropped (slot busy) stay invalid.
 */
bool hl_cache_core_ub_writeback(struct hl_cache_core *c, uint16_t *lun, struct hl_cache_io *io);

/**
 * hl_cache_core_ub_writeback() regardless of the limit: the next write-back
 * while anything is pending (a clean stop empties the buffer). Same
 * contract for *io.
 */
bool hl_cache_core_ub_drain(struct hl_cache_core *c, uint16_t *lun, struct hl_cache_io *io);

/* ---- metadata view of slots, for persistence (the engine's cache_meta.c) ---- */

/** One slot as persisted. */
struct hl_cache_slot_rec {
	uint16_t lun;
	uint64_t block;
	uint32_t gen; /* slot_get: the slot's generation while ios use it, else 0 (traces only;
	                 not persisted, ignored by slot_restore) */
	uint8_t valid[HL_CACHE_MAX_BLOCK / HL_CACHE_SECTOR / 8];
};

/** Current state of slot: @return true and *rec when it holds valid sectors. */
bool hl_cache_core_slot_get(const struct hl_cache_core *c, uint32_t slot,
                            struct hl_cache_slot_rec *rec);

/**
 * Install a recovered slot (warm restart) before any I/O. The LUN must be
 * registered. @return 0, -EEXIST (block already cached), -EINVAL, -ESTALE
 * (a lazy restore noted the block written: hl_cache_core_restore_begin).
 */
int hl_cache_core_slot_restore(struct hl_cache_core *c, uint32_t slot,
                               const struct hl_cache_slot_rec *rec);

/**
 * Slots whose persisted record may be out of date: iterate with *cursor
 * starting at 0; @return next dirty SSD slot (and clears its dirty bit) or
 * HL_CACHE_NO_SLOT.
 */
uint32_t hl_cache_core_next_dirty(struct hl_cache_core *c, uint64_t *cursor);

/** Mark slot dirty again (its record write failed). */
void hl_cache_core_slot_set_dirty(struct hl_cache_core *c, uint32_t slot);

/**
 * A counter that advances whenever a slot whose on-device record may claim
 * data stops holding that data. Take it before snapshotting records.
 */
uint64_t hl_cache_core_meta_epoch(const struct hl_cache_core *c);

/**
 * A record of slot that claims valid sectors was just snapshotted and is
 * about to be written: from now on the device may claim them, so a slot
 * reused or a cached sector overwritten before that write is durable needs
 * a barrier like any persisted claim. Call under the lock that guards c,
 * in the same critical section as the snapshot.
 */
void hl_cache_core_slot_claim_pending(struct hl_cache_core *c, uint32_t slot);

/**
 * The load found rec at slot claiming data but did not restore it (unknown
 * LUN, a duplicate, outside the LUN's partition). The device still claims
 * those sectors until the slot's record is rewritten: the slot takes a
 * barrier before reuse, its page is written by the next sync, and until
 * then a write to rec's block (its LUN attached later, or the duplicate's
 * block) syncs first, as for any stale claim.
 */
void hl_cache_core_slot_drop_claimed(struct hl_cache_core *c, uint32_t slot,
                                     const struct hl_cache_slot_rec *rec);

/**
 * The record of slot, as snapshotted at epoch, is durable on the device
 * (written and flushed). claims_valid: the record claimed valid sectors.
 * Stale claims of the slot registered before epoch are forgotten.
 */
void hl_cache_core_slot_persisted(struct hl_cache_core *c, uint32_t slot, bool claims_valid,
                                  uint64_t epoch);

/**
 * Every record that was dirty when the sync snapshot of epoch was taken
 * (its hl_cache_core_meta_epoch() + 1, the walk of hl_cache_core_next_dirty
 * to its end in the same hold of the lock) is durable: written and flushed
 * without an error, and reported with hl_cache_core_slot_persisted. Ends
 * the "every write syncs" state of claims that could not be tracked (no
 * memory) when they all came before that snapshot (docs/cache-format.md).
 */
void hl_cache_core_records_durable(struct hl_cache_core *c, uint64_t epoch);

/**
 * Tests: the stale-claim list cannot grow past max entries, as when its
 * realloc fails (0: no limit).
 */
void hl_cache_core_test_stale_limit(struct hl_cache_core *c, uint64_t max);

/** Tests: hl_cache_core_invalidate_yield yields every n slots dropped (0: the default). */
void hl_cache_core_test_inval_chunk(struct hl_cache_core *c, uint32_t n);

/**
 * True when an on-device record may still claim data of [off, off+len) on
 * lun that RAM no longer holds (a block evicted or dropped whose slot
 * record was not rewritten yet). The engine must then persist the dirty
 * records (hl_cache_meta_sync) before it issues the origin write, so a
 * crash cannot bring the old data back.
 */
bool hl_cache_core_write_needs_sync(const struct hl_cache_core *c, uint16_t lun, uint64_t off,
                                    uint64_t len);

/*
 * A lazy warm restart (docs/cache-format.md, "Lazy restore"): between
 * restore_begin and restore_end the loader restores records while I/O is
 * served. Meanwhile no slot is taken but as restore_hold allows, every block
 * a write or an invalidation touches (or every block of a LUN added) is
 * noted in a bounded filter, and hl_cache_core_slot_restore refuses a
 * record of a noted block (-ESTALE: the caller drops it as a claimed
 * record). The superblock keeps a coarser copy of the filter (state
 * "restore pending" with its ranges): need_mark says a block was noted
 * that the durable copy does not cover, and until restore_marked makes a
 * copy taken after it durable, hl_cache_core_write_needs_sync says yes
 * for every write. Under the caller's lock like the rest of the core.
 */
struct hl_cache_rs_range {
	uint64_t lo, hi; /* blocks [lo, hi] */
	uint16_t lun;
};
void hl_cache_core_restore_begin(struct hl_cache_core *c);
void hl_cache_core_restore_end(struct hl_cache_core *c);
bool hl_cache_core_restoring(const struct hl_cache_core *c);
bool hl_cache_core_restore_need_mark(const struct hl_cache_core *c);
/*
 * Fills while restoring (rule 5): the record pages not known yet, marks
 * (npages bits, copied) of per records each (a multiple of 64), after
 * restore_begin. A miss may then take a FREE slot of a page not held: one
 * whose records the loader restored (their claims are known: a barrier
 * where a record claims) or that claimed nothing at the start (its summary
 * bit clear; the loader never reads it). restore_known(page) lets a page's
 * slots go, under the lock that restores it, for a page that claimed
 * nothing only once its summary bit is cleared (else a fill's record
 * could lose its bit). Without a hold no slot is taken.
 * @return 0, -EINVAL (per), -ENOMEM (no fills, the restore goes on).
 */
int hl_cache_core_restore_hold(struct hl_cache_core *c, const uint64_t *marks, uint64_t npages,
                               uint32_t per);
void hl_cache_core_restore_known(struct hl_cache_core *c, uint64_t page);
/*
 * Preload the filter with the n ranges a superblock kept (a crash during
 * the last restore) and take them as its durable copy. After
 * restore_begin. @return 0, or -EINVAL for ranges not sorted and disjoint.
 */
int hl_cache_core_restore_preload(struct hl_cache_core *c, const struct hl_cache_rs_range *r,
                                  uint32_t n);
/*
 * A copy of the filter for the superblock: *r (malloc'ed, *n ranges; NULL
 * with *all when every record is dropped, or no memory) and *gen, to hand
 * to restore_marked once a superset of it is durable.
 */
void hl_cache_core_restore_snapshot(const struct hl_cache_core *c, struct hl_cache_rs_range **r,
                                    uint32_t *n, bool *all, uint64_t *gen);
/*
 * Merge sorted disjoint ranges r[0..n) into at most max covering ranges,
 * closest neighbours of one LUN first (any thread, no core). @return the
 * new count, or UINT32_MAX when more LUNs than max (the copy says "all").
 */
uint32_t hl_cache_rs_coarsen(struct hl_cache_rs_range *r, uint32_t n, uint32_t max);
/*
 * The superblock holds r[0..n) (or "all") as the durable copy of the
 * filter snapshotted at gen: writes noted before it need no more sync.
 */
void hl_cache_core_restore_marked(struct hl_cache_core *c, const struct hl_cache_rs_range *r,
                                  uint32_t n, bool all, uint64_t gen);
/** Ranges noted while restoring, those preloaded at the start included. */
uint64_t hl_cache_core_restore_noted(const struct hl_cache_core *c);
/**
 * The filter drops every record still to come, or the superblock's copy
 * says "all": a stop now leaves a cold cache.
 */
bool hl_cache_core_restore_all(const struct hl_cache_core *c);
/*
 * Fault in, without changing them, the pages a restore of block (lun) or
 * of slots [first, first + n) will write: the loader calls them before it
 * takes the lock (a first touch of a big cache's RAM costs 10-40 us a
 * page). Any thread, no lock. prefault_on: worth it (a big index).
 */
bool hl_cache_core_restore_prefault_on(const struct hl_cache_core *c);
void hl_cache_core_restore_prefault(const struct hl_cache_core *c, uint16_t lun, uint64_t block);
void hl_cache_core_restore_prefault_slots(const struct hl_cache_core *c, uint32_t first, uint32_t n);
/** Records of lun the restore dropped because the block was noted (0: unknown LUN). */
uint64_t hl_cache_core_lun_restore_dropped(const struct hl_cache_core *c, uint16_t lun);

#endif
