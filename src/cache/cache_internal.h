/*
 * cache_internal.h - what the files of src/cache share: the key packing,
 * the hash, the (lun, block) -> slot index and the packed slot record.
 * Nothing here is exported outside src/cache (and its unit tests).
 */
#ifndef HOTLUN_CACHE_INTERNAL_H
#define HOTLUN_CACHE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "hotlun/cache.h"

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

/* A strong 64-bit mixer (splitmix64 finaliser); keys are dense block numbers. */
static inline uint64_t cache_hash(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

/*
 * Slot record: 16 bytes in RAM, one per cache block of the device. The
 * per-4K valid bits live in a separate array (block_size / 32 KiB bytes,
 * at least one) so the record size does not depend on the block size.
 */
struct cache_slot {
	uint64_t key;    /* lun << 48 | block; meaningful when state != FREE */
	uint32_t gen;    /* bumped by every change of content: fills/updates check it */
	uint8_t state;   /* CACHE_SLOT_* | CACHE_SLOT_F_* */
	uint8_t clock;   /* CLOCK reference counter, 0..CACHE_CLOCK_MAX */
	uint8_t pins;    /* reads of the slot's data and fills in flight */
	uint8_t writers; /* origin writes in flight that touch the block */
};

_Static_assert(sizeof(struct cache_slot) == 16, "slot record must stay 16 bytes");

#define CACHE_SLOT_FREE         0x00
#define CACHE_SLOT_USED         0x01 /* in the index, owns key */
#define CACHE_SLOT_MOVING       0x02 /* window slot being copied to the SSD: not indexed */
#define CACHE_SLOT_STATE_MASK   0x07
/*
 * The on-device record (or a sync's snapshot in flight) may claim a block
 * other than the slot's current one (the slot was released or dropped at
 * load while claimed): no data may be written into the slot until a record
 * written after that is durable, or a crash restores the other block's
 * claim over this block's data (hl_cache_core_io_start refuses).
 */
#define CACHE_SLOT_F_CLAIMS_OTHER 0x08
#define CACHE_SLOT_F_DISK_VALID 0x10 /* the on-device record may claim valid data */
#define CACHE_SLOT_F_NOPROMOTE  0x20 /* window slot of a sequential stream: never promoted */
#define CACHE_SLOT_F_WRITING    0x40 /* an io is writing data into the slot (io_start..io_end) */
#define CACHE_SLOT_F_RETURNED   0x80 /* window slot of a block back from the ghost: may be promoted */
#define CACHE_CLOCK_MAX         3

/* ---- index: open addressing, linear probing, backward-shift deletion ---- */

#define CACHE_INDEX_EMPTY UINT32_MAX

struct cache_index {
	uint32_t *tab; /* tag << slot_bits | slot; CACHE_INDEX_EMPTY when unused */
	uint64_t cap;  /* entries; about 4/3 of the slot count (load <= 0.75) */
	uint64_t count;
	uint32_t slot_bits, slot_mask;  /* the spare high bits hold a hash tag */
	const struct cache_slot *slots; /* to read keys while probing */
};

int cache_index_init(struct cache_index *ix, uint64_t nslots, const struct cache_slot *slots);
void cache_index_fini(struct cache_index *ix);
/** @return slot or HL_CACHE_NO_SLOT. */
uint32_t cache_index_find(const struct cache_index *ix, uint64_t key);
/** slots[slot].key must already be set. @return 0 or -EEXIST/-ENOSPC. */
int cache_index_insert(struct cache_index *ix, uint32_t slot);
/** @return 0 or -ENOENT. */
int cache_index_remove(struct cache_index *ix, uint64_t key);
size_t cache_index_mem_bytes(const struct cache_index *ix);

/* ---- RAM update buffer (write coalescing; cache_core.c) ---- */

/*
 * io->src_slot of an UPDATE io that involves the RAM update buffer:
 *  - io->ram == 1 (from write_begin): write the new data into the buffer's
 *    copy of (slot, sectors), not to the device; io_end(written) then makes
 *    the sectors valid and pending (served from the buffer).
 *  - io->ram == 0 (from cache_core_ub_writeback): copy the buffer's data of
 *    (slot, fill range) to the device; io_end(written) makes them valid on
 *    the device, io_end(!written) leaves them invalid. Either way the buffer
 *    copy of those sectors may then be freed.
 */
#define CACHE_IO_UB_SRC 0xfffffffeu

/**
 * Enable (bytes > 0) or disable the RAM update buffer: updates of blocks
 * cached on the device go to RAM and are written back, oldest first, when
 * more than bytes are pending. Off by default. @return 0, -EBUSY (updates
 * are pending), -ENOMEM.
 */
int cache_core_set_update_buffer(struct hl_cache_core *c, uint64_t bytes);

/**
 * Pending bytes of slot (sectors whose current data is only in the buffer);
 * bits (may be NULL, caller's, >= block_size / 32 KiB bytes) gets them.
 */
uint64_t cache_core_ub_pending(const struct hl_cache_core *c, uint32_t slot, uint8_t *bits);

/**
 * Next write-back the buffer needs (it holds more than its limit): fills
 * *io (a pinned UPDATE, src_slot CACHE_IO_UB_SRC, ram 0) and *lun, which
 * the caller completes with hl_cache_core_io_end(). Call until false after
 * every write_end. Sectors it dropped (slot busy) stay invalid.
 */
bool cache_core_ub_writeback(struct hl_cache_core *c, uint16_t *lun, struct hl_cache_io *io);

/**
 * cache_core_ub_writeback() regardless of the limit: the next write-back
 * while anything is pending (a clean stop empties the buffer). Same
 * contract for *io.
 */
bool cache_core_ub_drain(struct hl_cache_core *c, uint16_t *lun, struct hl_cache_io *io);

/* ---- metadata (cache_meta.c) ---- */

#include <pthread.h>

/**
 * hl_cache_meta_sync() for the engine: core accesses happen under lock
 * (may be NULL), device I/O outside it. Callers serialise syncs.
 */
int cache_meta_sync_locked(struct hl_cache_dev *d, const struct hl_cache_layout *l,
                           struct hl_cache_core *c, pthread_mutex_t *lock);

#endif
