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
	const uint8_t *sv = cache_slot_valid(c, io->slot), *wv = cache_slot_valid(c, io->src_slot);
	uint32_t e = (uint32_t)io->fill_first + io->fill_nsect;

	for (uint32_t i = io->fill_first; i < e && i < c->spb; i++)
		if (cache_vtest(sv, i) && !cache_vtest(wv, i))
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
	if (sl->state & CACHE_SLOT_F_CLAIMS_OTHER) {
		if (l)
			CACHE_STAT(c, l, fills_dropped, 1);
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
		const uint8_t *wv = cache_slot_valid(c, io->src_slot);

		if (io->fill_nsect && started && sl->key == cache_key(lun, io->block)) {
			/*
			 * The copy wrote the window's holes too: none of them may stay
			 * valid in the slot (io_start saw none, and none can have been
			 * filled since; this only keeps it so).
			 */
			uint32_t e = (uint32_t)io->fill_first + io->fill_nsect;
			for (uint32_t i = io->fill_first; i < e && i < c->spb; i++) {
				if (!cache_vtest(wv, i) && cache_vtest(cache_slot_valid(c, s), i)) {
					cache_vclear(cache_slot_valid(c, s), i, 1);
					cache_mark_dirty(c, s);
					cache_slot_unclaim(c, s);
				}
			}
		}
		if (io->fill_nsect) {
			bool same = (sl->state & CACHE_SLOT_STATE_MASK) == CACHE_SLOT_USED &&
			            sl->key == cache_key(lun, io->block) && sl->gen == io->ticket &&
			            !sl->writers;
			if (written && l && s < c->nslots)
				CACHE_STAT(c, l, bytes_cache_write,
				           (uint64_t)io->fill_nsect * HL_CACHE_SECTOR);
			if (written && same) {
				/* Only what was valid in the window (the copy may span holes). */
				uint32_t e = (uint32_t)io->fill_first + io->fill_nsect;
				for (uint32_t i = io->fill_first; i < e; i++)
					if (cache_vtest(wv, i))
						cache_vset(cache_slot_valid(c, s), i, 1);
				cache_mark_dirty(c, s);
			} else if (written && l) {
				CACHE_STAT(c, l, fills_dropped, 1);
			}
			io->fill_nsect = 0;
		}
		if (ws->pins)
			ws->pins--;
		if ((ws->state & CACHE_SLOT_STATE_MASK) == CACHE_SLOT_MOVING && !ws->pins) {
			c->used++; /* cache_slot_release counts it out again */
			c->win_used++;
			cache_slot_release(c, io->src_slot);
		}
	}
	if (io->fill_nsect) {
		bool same = (sl->state & CACHE_SLOT_STATE_MASK) == CACHE_SLOT_USED &&
		            sl->key == cache_key(lun, io->block) && sl->gen == io->ticket &&
		            !sl->writers;
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
				cache_vset(cache_slot_valid(c, s), io->fill_first, io->fill_nsect);
		} else if (written && same) {
			cache_vset(cache_slot_valid(c, s), io->fill_first, io->fill_nsect);
			cache_mark_dirty(c, s);
		} else if (written && l) {
			CACHE_STAT(c, l, fills_dropped, 1);
		}
		io->fill_nsect = 0;
	}
	if (io->pinned) {
		io->pinned = 0;
		if (sl->pins)
			sl->pins--;
		cache_slot_maybe_release(c, s);
	}
}
