/*
 * cache_write.c - the write side of the policy core: which cached sectors a
 * write stops serving and which it updates (hl_cache_core_write_begin/
 * write_end, read-modify-write of partial sectors), the writes in flight to
 * uncached blocks (kept from being admitted), and range invalidation.
 */
#include <errno.h>
#include <string.h>

#include "cache/core/core_internal.h"
#include "hotlun/util.h"

/*
 * ---- writes in flight to uncached blocks ----
 * Counted in a counting bloom filter (described with its lookup,
 * cache_wip_find, in core_internal.h).
 */

static void wip_add(struct hl_cache_core *c, uint64_t key)
{
	uint32_t a, b;

	cache_wip_pos(key, &a, &b);
	c->wip[a]++;
	c->wip[b]++;
	c->wip_n++;
}

static void wip_del(struct hl_cache_core *c, uint64_t key)
{
	uint32_t a, b;

	cache_wip_pos(key, &a, &b);
	c->wip[a]--;
	c->wip[b]--;
	c->wip_n--;
}

/* ---- write ---- */

int hl_cache_core_write_begin(struct hl_cache_core *c, uint16_t lun, uint64_t off, uint64_t len,
                              struct hl_cache_io *ios, uint32_t max)
{
	struct cache_lun *l;
	uint32_t nb, k = 0;
	uint64_t b0;
	int64_t span = cache_req_start(c, lun, off, len, &l);

	if (span < 0)
		return (int)span;
	nb = (uint32_t)span;
	b0 = off >> c->block_shift;
	/* A lazy restore drops the records of these blocks it has not loaded yet. */
	cache_restore_note(c, lun, b0, b0 + nb - 1);
	CACHE_STAT(c, l, write_reqs, 1);
	CACHE_STAT(c, l, bytes_written, len);
	for (uint32_t i = 0; i < nb; i++) {
		uint64_t b = b0 + i;
		uint32_t s = cache_index_find(&c->ix, cache_key(lun, b)), first, n;
		struct cache_busy_ent *e = NULL;
		struct hl_cache_io *io;

		if (k == max)
			goto too_big;
		io = &ios[k++];
		cache_block_sectors(c, b, off, len, &first, &n);
		cache_io_init(io, b, s, first, n);
		io->kind = HL_CACHE_IO_UPDATE;
		if (s != HL_CACHE_NO_SLOT)
			e = cache_busy_get(c, s);
		if (s == HL_CACHE_NO_SLOT || !e || e->writers == UINT8_MAX) {
			/*
			 * Not cached (or too many writers to count, or no room to
			 * count one): keep it from being filled.
			 */
			io->slot = HL_CACHE_NO_SLOT;
			if (s != HL_CACHE_NO_SLOT) {
				cache_slot_gen_bump(c, s);
				cache_busy_put(c, s); /* (an entry made just now, unused) */
				cache_ub_clear(c, s, first, n);
				if (cache_valid_count(c, s, first, n)) {
					cache_valid_clear(c, s, first, n);
					cache_mark_dirty(c, s);
					io->meta_barrier = cache_slot_unclaim(c, s);
				}
			}
			wip_add(c, cache_key(lun, b));
			io->wip = 1;
			continue;
		}
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
		bool rmw_head = false, rmw_tail = false;
		if (head_part) {
			if (cache_valid_test(c, s, first))
				rmw_head = true;
			else
				us = first + 1;
		}
		if (tail_part && last != (int32_t)first) {
			if (cache_valid_test(c, s, (uint32_t)last))
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
		cache_split_update(c, s, first, n);
		cache_ub_clear(c, s, first, n);
		if (cache_valid_count(c, s, first, n)) {
			cache_valid_clear(c, s, first, n);
			cache_mark_dirty(c, s);
			io->meta_barrier = cache_slot_unclaim(c, s);
		}
		e = cache_busy_find(c, s); /* (found again: the calls above may not move it, but) */
		e->gen++;
		io->ticket = e->gen;
		e->writers++;
		if (c->p.write_mode == HL_CACHE_WRITE_UPDATE && ue >= us) {
			io->fill_first = (uint16_t)us;
			io->fill_nsect = (uint16_t)(ue - us + 1);
			io->rmw_head = rmw_head;
			io->rmw_tail = rmw_tail;
			if (c->ub.cap && !c->ub.closed && s < c->nslots) {
				/* To the RAM update buffer (rmw reads the old sector from the
				 * slot). */
				io->src_slot = HL_CACHE_IO_UB_SRC;
				io->ram = 1;
			}
		}
		if (c->p.write_mode == HL_CACHE_WRITE_INVALIDATE)
			CACHE_STAT(c, l, invalidations, 1);
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
	struct cache_busy_ent *e;
	uint32_t s = io->slot;

	if (io->wip) {
		wip_del(c, cache_key(lun, io->block));
		io->wip = 0;
	}
	if (s == HL_CACHE_NO_SLOT || s >= c->ntotal) {
		io->fill_nsect = 0;
		return;
	}
	e = cache_is_busy(c, s) ? cache_busy_find(c, s) : NULL;
	if (e && e->writers)
		e->writers--;
	if (e && io->fill_nsect && origin_ok && e->gen == io->ticket && !e->writers &&
	    e->pins < UINT8_MAX && cache_slot_key(c, s) == cache_key(lun, io->block)) {
		e->pins++;
		io->pinned = 1;
		if (l)
			CACHE_STAT(c, l, write_updates, 1);
		return;
	}
	if (io->fill_nsect && l)
		CACHE_STAT(c, l, fills_dropped, 1);
	io->fill_nsect = 0;
	cache_busy_put_ent(c, e);
	cache_slot_maybe_release(c, s);
}

/* ---- range invalidation ---- */

static void invalidate_slot(struct hl_cache_core *c, struct cache_lun *l, uint32_t s,
                            uint32_t first, uint32_t n)
{
	cache_ub_clear(c, s, first, n);
	if (cache_valid_count(c, s, first, n)) {
		cache_valid_clear(c, s, first, n);
		cache_mark_dirty(c, s);
		cache_slot_unclaim(c, s);
		CACHE_STAT(c, l, invalidations, 1);
	}
	cache_slot_gen_bump(c, s);
	cache_slot_maybe_release(c, s);
}

/*
 * Slots a range invalidation drops between two calls of its yield, and
 * slots or blocks it looks at (about 1 ms and 0.3 ms under the lock).
 */
#define INVAL_CHUNK_DROPS 2048
#define INVAL_CHUNK_LOOKS 65536
#define INVAL_CHUNK_BYTES (2u << 20) /* of the claims' new tables made ready */

/* After a chunk: let others in. @return the LUN again (NULL: removed meanwhile: done). */
static struct cache_lun *inval_yield(struct hl_cache_core *c, uint16_t lun, uint64_t *drops,
                                     uint64_t *looks, void (*yield)(void *), void *arg)
{
	uint64_t most = c->inval_chunk ? c->inval_chunk : INVAL_CHUNK_DROPS;

	if (!yield || (*drops < most && *looks < most * (INVAL_CHUNK_LOOKS / INVAL_CHUNK_DROPS)))
		return c->luns[lun];
	*drops = *looks = 0;
	yield(arg);
	return c->luns[lun];
}

int hl_cache_core_invalidate_yield(struct hl_cache_core *c, uint16_t lun, uint64_t off,
                                   uint64_t len, void (*yield)(void *arg), void *arg)
{
	struct cache_lun *l = c->luns[lun];
	struct cache_inval me;
	uint64_t end, b0, b1, drops = 0, looks = 0;

	if (!l)
		return -ENOENT;
	if (!len)
		return 0;
	end = (len > UINT64_MAX - off) ? UINT64_MAX : off + len;
	b0 = off >> c->block_shift;
	b1 = (end - 1) >> c->block_shift;
	if (b1 > HL_CACHE_MAX_BLOCK_NR)
		b1 = HL_CACHE_MAX_BLOCK_NR;
	cache_restore_note(c, lun, b0, b1);
	/*
	 * Between chunks the blocks not dropped yet still hold data the caller
	 * says is old: the range is marked first, so that no read is served
	 * from or fills them, and no window copy of them is promoted, until
	 * the last chunk is done (docs/cache-engine.md). A fill in flight is
	 * dropped with its slot's generation, or installed and dropped later.
	 */
	me = (struct cache_inval){.next = c->inval, .b0 = b0, .b1 = b1, .lun = lun};
	if (yield) {
		struct cache_stale_room room;
		c->inval = &me;
		/*
		 * The tables of the claims it may note grow first, 2 MiB of them
		 * made ready between two yields: not a rehash of a million entries
		 * and the page faults of their first touches inside a chunk.
		 */
		uint64_t most = HL_MIN(c->lun_used[lun], b1 - b0 + 1);
		if (most >= (c->inval_chunk ? c->inval_chunk : INVAL_CHUNK_DROPS) &&
		    cache_stale_room_init(c, most, &room)) {
			while (!cache_stale_room_step(&room, INVAL_CHUNK_BYTES) && l) {
				yield(arg);
				l = c->luns[lun];
			}
			cache_stale_room_install(c, &room);
		}
	}
	if (b1 - b0 + 1 <= c->ix.count) {
		for (uint64_t b = b0; l && b <= b1; b++) {
			uint32_t s = cache_index_find(&c->ix, cache_key(lun, b)), first, n;
			looks++;
			if (s != HL_CACHE_NO_SLOT) {
				cache_block_sectors(c, b, off, end - off, &first, &n);
				invalidate_slot(c, l, s, first, n);
				drops++;
			}
			l = inval_yield(c, lun, &drops, &looks, yield, arg);
		}
		goto out;
	}
	/* A range larger than the cache: walk the slots in use instead of the blocks. */
	for (uint64_t s = 0; l && s < c->ntotal; s++) {
		uint64_t b, w = c->takenmap[s / 64] >> (s % 64);
		uint32_t first, n;

		looks++;
		if (!w) {
			s = (s / 64 + 1) * 64 - 1;
			looks += 63;
			l = inval_yield(c, lun, &drops, &looks, yield, arg);
			continue;
		}
		s += (uint64_t)__builtin_ctzll(w);
		if (s >= c->ntotal)
			break;
		if (cache_is_used(c, (uint32_t)s) && cache_key_lun(cache_slot_key(c, s)) == lun) {
			b = cache_key_block(cache_slot_key(c, s));
			if (b >= b0 && b <= b1) {
				cache_block_sectors(c, b, off, end - off, &first, &n);
				invalidate_slot(c, l, (uint32_t)s, first, n);
				drops++;
			}
		}
		l = inval_yield(c, lun, &drops, &looks, yield, arg);
	}
out:
	if (yield) {
		struct cache_inval **p = &c->inval;
		while (*p != &me)
			p = &(*p)->next;
		*p = me.next;
	}
	return 0;
}

int hl_cache_core_invalidate(struct hl_cache_core *c, uint16_t lun, uint64_t off, uint64_t len)
{
	return hl_cache_core_invalidate_yield(c, lun, off, len, NULL, NULL);
}
