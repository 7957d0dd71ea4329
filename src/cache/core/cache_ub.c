/*
 * cache_ub.c - the RAM update buffer (write coalescing): the map of slots
 * to their pending sectors and its FIFO, turning it on or off, and the
 * write-backs (oldest first) when it holds more than its limit or at a
 * clean stop. The updates into it come from cache_write.c/cache_io.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache/core/core_internal.h"

/* ---- RAM update buffer ---- */

static inline uint64_t ub_home(const struct cache_ub *u, uint32_t slot)
{
	return cache_hash(slot) & (u->map_size - 1);
}

/* Map position of slot's entry, or UINT64_MAX. */
uint64_t cache_ub_find(const struct hl_cache_core *c, uint32_t slot)
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
			memcpy(cache_ub_bits(c, hole), cache_ub_bits(c, j), c->vbytes);
			hole = j;
		}
	}
	u->map_slot[hole] = UINT32_MAX;
	memset(cache_ub_bits(c, hole), 0, c->vbytes);
	u->n--;
}

/* Sectors [first, first+n) of slot s are no longer pending (overwritten or dropped). */
void cache_ub_clear(struct hl_cache_core *c, uint32_t s, uint32_t first, uint32_t n)
{
	uint64_t i = cache_ub_find(c, s);
	uint8_t *b;

	if (i == UINT64_MAX)
		return;
	b = cache_ub_bits(c, i);
	c->ub.bytes -= (uint64_t)cache_vcount(b, first, n) * HL_CACHE_SECTOR;
	cache_vclear(b, first, n);
	if (!cache_vcount(b, 0, c->spb))
		ub_remove(c, i);
}

/*
 * Sectors [first, first+n) of slot s now live in the buffer. @return false
 * when the buffer cannot track another block (the caller then leaves the
 * sectors invalid: the data is only in RAM and would otherwise be lost).
 */
bool cache_ub_add(struct hl_cache_core *c, uint32_t s, uint32_t first, uint32_t n)
{
	struct cache_ub *u = &c->ub;
	uint64_t i = cache_ub_find(c, s);
	uint8_t *b;

	if (i == UINT64_MAX) {
		if (u->n * 2 >= u->map_size)
			return false;
		if (u->fifo_tail - u->fifo_head == u->fifo_cap) {
			/* Ring full: keep only the live positions, in order (k <= j). */
			uint64_t k = u->fifo_head;
			for (uint64_t j = u->fifo_head; j != u->fifo_tail; j++) {
				uint32_t x = u->fifo[j % u->fifo_cap];
				uint64_t xi = cache_ub_find(c, x);
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
	b = cache_ub_bits(c, i);
	u->bytes -= (uint64_t)cache_vcount(b, 0, c->spb) * HL_CACHE_SECTOR;
	cache_vset(b, first, n);
	u->bytes += (uint64_t)cache_vcount(b, 0, c->spb) * HL_CACHE_SECTOR;
	return true;
}

/* ---- RAM update buffer: configuration and write-back ---- */

int hl_cache_core_set_update_buffer(struct hl_cache_core *c, uint64_t bytes)
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
	if (c->split.w0)
		cache_split_set_buffer(c, bytes); /* what the window may borrow of it */
	return 0;
}

void hl_cache_core_ub_close(struct hl_cache_core *c, bool closed)
{
	c->ub.closed = closed;
}

uint64_t hl_cache_core_ub_slots(const struct hl_cache_core *c)
{
	return c->ub.n;
}

uint64_t hl_cache_core_ub_pending(const struct hl_cache_core *c, uint32_t slot, uint8_t *bits)
{
	uint64_t i = cache_ub_find(c, slot);

	if (bits)
		memset(bits, 0, c->vbytes);
	if (i == UINT64_MAX)
		return 0;
	if (bits)
		memcpy(bits, cache_ub_bits(c, i), c->vbytes);
	return (uint64_t)cache_vcount(cache_ub_bits(c, i), 0, c->spb) * HL_CACHE_SECTOR;
}

/* The next write-back while more than limit bytes are pending (see hl_cache_core_ub_writeback). */
static bool ub_writeback(struct hl_cache_core *c, uint64_t limit, uint16_t *lun,
                         struct hl_cache_io *io)
{
	struct cache_ub *u = &c->ub;

	while (u->bytes > limit && u->fifo_head != u->fifo_tail) {
		uint32_t s = u->fifo[u->fifo_head % u->fifo_cap], a, z;
		uint64_t i = cache_ub_find(c, s);
		struct cache_busy_ent *e;
		uint8_t *b;

		if (i == UINT64_MAX || u->map_seq[i] != u->fifo_head) {
			u->fifo_head++; /* stale: dropped (and maybe buffered again) since */
			continue;
		}
		b = cache_ub_bits(c, i);
		for (a = 0; !cache_vtest(b, a); a++)
			;
		for (z = a; z + 1 < c->spb && cache_vtest(b, z + 1); z++)
			;
		/* Not served while it is copied; valid again when the copy completes. */
		cache_valid_clear(c, s, a, z - a + 1);
		cache_ub_clear(c, s, a, z - a + 1);
		if (cache_ub_find(c, s) == UINT64_MAX)
			u->fifo_head++;
		e = cache_busy_get(c, s);
		if (!e || e->pins == UINT8_MAX || e->writers) {
			/* Busy (or no room to pin it): drop these sectors instead (they stay
			 * invalid). */
			cache_busy_put(c, s);
			cache_mark_dirty(c, s);
			cache_slot_maybe_release(c, s);
			continue;
		}
		cache_split_written_back(c, s, a, z - a + 1);
		memset(io, 0, sizeof(*io));
		io->kind = HL_CACHE_IO_UPDATE;
		io->block = cache_key_block(cache_slot_key(c, s));
		io->slot = s;
		io->src_slot = HL_CACHE_IO_UB_SRC;
		io->ticket = e->gen;
		io->first = (uint16_t)a;
		io->nsect = (uint16_t)(z - a + 1);
		io->fill_first = (uint16_t)a;
		io->fill_nsect = (uint16_t)(z - a + 1);
		e->pins++;
		io->pinned = 1;
		*lun = cache_key_lun(cache_slot_key(c, s));
		return true;
	}
	return false;
}

bool hl_cache_core_ub_writeback(struct hl_cache_core *c, uint16_t *lun, struct hl_cache_io *io)
{
	return ub_writeback(c, c->ub.cap, lun, io);
}

bool hl_cache_core_ub_drain(struct hl_cache_core *c, uint16_t *lun, struct hl_cache_io *io)
{
	return ub_writeback(c, 0, lun, io);
}
