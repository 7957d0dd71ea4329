/*
 * cache_io.c - the data ios of the policy core: hl_cache_core_io_start()
 * (may data be written into the slot now?) and hl_cache_core_io_end()
 * (install a fill, update or promotion copy, or drop it, by the fill-race
 * rule in cache_core.c), for ios from reads, writes and update buffer
 * write-backs alike.
 */
#include "cache/core/core_internal.h"

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
	uint8_t sv[HL_CACHE_MAX_BLOCK / HL_CACHE_SECTOR / 8], wv[sizeof(sv)];
	uint32_t e = (uint32_t)io->fill_first + io->fill_nsect;

	cache_valid_get(c, io->slot, sv);
	cache_valid_get(c, io->src_slot, wv);
	for (uint32_t i = io->fill_first; i < e && i < c->spb; i++)
		if (cache_vtest(sv, i) && !cache_vtest(wv, i))
			return true;
	return false;
}

/*
 * The LUN whose block io writes: a PROMOTE carries its own (the RAM window
 * is shared by the cache's LUNs, so the read that planned it, whose LUN the
 * caller passes, may be another LUN's); every other io is the caller's.
 */
static uint16_t io_lun(const struct hl_cache_io *io, uint16_t lun)
{
	return io->kind == HL_CACHE_IO_PROMOTE ? io->lun : lun;
}

/* Does slot s still hold the io's block, unchanged since its ticket, with no write in flight? */
static bool same_content(const struct hl_cache_core *c, uint32_t s, uint64_t key, uint32_t ticket)
{
	const struct cache_busy_ent *e = cache_busy_find(c, s);

	return cache_is_used(c, s) && cache_slot_key(c, s) == key && e && e->gen == ticket && !e->writers;
}

bool hl_cache_core_io_start(struct hl_cache_core *c, uint16_t lun, struct hl_cache_io *io)
{
	struct cache_lun *l;
	struct cache_busy_ent *e;

	lun = io_lun(io, lun);
	l = c->luns[lun];
	if (io->slot >= c->ntotal || !io->fill_nsect || io->started)
		return false;
	e = cache_is_busy(c, io->slot) ? cache_busy_find(c, io->slot) : NULL;
	if (!same_content(c, io->slot, cache_key(lun, io->block), io->ticket) || e->writing) {
		/* Raced by a write, an invalidation or another fill: dropped. */
		if (l)
			CACHE_STAT(c, l, fills_dropped, 1);
		return false;
	}
	if (io->kind == HL_CACHE_IO_PROMOTE && io->src_slot < c->ntotal &&
	    promote_hides_fill(c, io)) {
		if (l)
			CACHE_STAT(c, l, fills_dropped, 1);
		return false;
	}
	/*
	 * The slot's record may still claim the block it held before: only the
	 * io that took the slot waits for the barrier that ends this (its
	 * meta_barrier); any other fill or update of the new block that gets
	 * here first would put the new block's data under the old claim.
	 */
	if (c->meta[io->slot] & CACHE_M_CLAIMS_OTHER) {
		if (l)
			CACHE_STAT(c, l, fills_dropped, 1);
		return false;
	}
	e->writing = 1;
	io->started = 1;
	return true;
}

/* A PROMOTE io ends: install what the window held, unpin the window slot. */
static void promote_end(struct hl_cache_core *c, struct cache_lun *l, uint16_t lun,
                        struct hl_cache_io *io, bool written, bool started)
{
	uint32_t s = io->slot, w = io->src_slot;
	uint64_t key = cache_key(lun, io->block);
	uint8_t wv[HL_CACHE_MAX_BLOCK / HL_CACHE_SECTOR / 8];
	struct cache_busy_ent *we;

	cache_valid_get(c, w, wv);
	if (io->fill_nsect && started && cache_slot_key(c, s) == key) {
		/*
		 * The copy wrote the window's holes too: none of them may stay
		 * valid in the slot (io_start saw none, and none can have been
		 * filled since; this only keeps it so).
		 */
		uint32_t e = (uint32_t)io->fill_first + io->fill_nsect;
		for (uint32_t i = io->fill_first; i < e && i < c->spb; i++) {
			if (!cache_vtest(wv, i) && cache_valid_test(c, s, i)) {
				cache_valid_clear(c, s, i, 1);
				cache_mark_dirty(c, s);
				cache_slot_unclaim(c, s);
			}
		}
	}
	if (io->fill_nsect) {
		bool same = same_content(c, s, key, io->ticket);
		if (written && l && s < c->nslots)
			CACHE_STAT(c, l, bytes_cache_write,
			           (uint64_t)io->fill_nsect * HL_CACHE_SECTOR);
		if (written && same) {
			/* Only what was valid in the window (the copy may span holes). */
			uint32_t e = (uint32_t)io->fill_first + io->fill_nsect;
			for (uint32_t i = io->fill_first; i < e; i++)
				if (cache_vtest(wv, i))
					cache_valid_set(c, s, i, 1);
			cache_mark_dirty(c, s);
		} else if (written && l) {
			CACHE_STAT(c, l, fills_dropped, 1);
		}
		io->fill_nsect = 0;
	}
	we = cache_is_busy(c, w) ? cache_busy_find(c, w) : NULL;
	if (we && we->pins)
		we->pins--;
	cache_busy_put_ent(c, we);
	if (cache_state(c, w) == CACHE_SLOT_MOVING && !cache_slot_pins(c, w)) {
		c->used++; /* cache_slot_release counts it out again */
		c->win_used++;
		cache_slot_release(c, w);
	}
}

void hl_cache_core_io_end(struct hl_cache_core *c, uint16_t lun, struct hl_cache_io *io,
                          bool written)
{
	struct cache_lun *l;
	struct cache_busy_ent *e;
	uint32_t s = io->slot;
	bool started = io->started;

	lun = io_lun(io, lun);
	l = c->luns[lun];

	if (s == HL_CACHE_NO_SLOT || s >= c->ntotal)
		return;
	if (io->started) {
		e = cache_busy_find(c, s);
		if (e)
			e->writing = 0;
		io->started = 0;
	}
	if (io->kind == HL_CACHE_IO_PROMOTE && io->src_slot < c->ntotal)
		promote_end(c, l, lun, io, written, started);
	if (io->fill_nsect) {
		bool same = same_content(c, s, cache_key(lun, io->block), io->ticket);
		/* An update into the RAM update buffer writes nothing to the device. */
		bool to_ub = io->kind == HL_CACHE_IO_UPDATE && io->src_slot == HL_CACHE_IO_UB_SRC &&
		             io->ram && s < c->nslots;
		if (written && l && s < c->nslots && !to_ub) {
			CACHE_STAT(c, l, bytes_cache_write,
			           (uint64_t)io->fill_nsect * HL_CACHE_SECTOR);
			if (io->kind == HL_CACHE_IO_UPDATE)
				CACHE_STAT(c, l, bytes_cache_update,
				           (uint64_t)io->fill_nsect * HL_CACHE_SECTOR);
		}
		if (written && same && to_ub) {
			if (cache_ub_add(c, s, io->fill_first, io->fill_nsect))
				cache_valid_set(c, s, io->fill_first, io->fill_nsect);
		} else if (written && same) {
			cache_valid_set(c, s, io->fill_first, io->fill_nsect);
			cache_mark_dirty(c, s);
		} else if (written && l) {
			CACHE_STAT(c, l, fills_dropped, 1);
		}
		io->fill_nsect = 0;
	}
	if (io->pinned) {
		io->pinned = 0;
		e = cache_is_busy(c, s) ? cache_busy_find(c, s) : NULL;
		if (e && e->pins)
			e->pins--;
		cache_busy_put_ent(c, e);
		cache_slot_maybe_release(c, s);
	}
}
