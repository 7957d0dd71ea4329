/*
 * cache_split.c - one RAM budget for the RAM window and the update buffer
 * (docs/cache-policy.md, rule 9). The window starts at its automatic size
 * and may borrow up to 3/4 of the update buffer's bytes, a step at a time,
 * while a step of window is estimated to save more cache-device bytes than
 * the same step of buffer; it gives them back when the buffer's estimate
 * wins. Their sum never changes. Both estimates are in device bytes saved,
 * counted from recent events:
 *
 *  - window, grow: a block comes back from the ghost that the window
 *    dropped within its last band of drops (a bigger window would still
 *    hold it: no return, no promotion). Each such return is worth the
 *    measured promotions per return times (a block + the write-backs a
 *    promoted block has cost on average).
 *  - window, shrink: a window hit on a block within a band of leaving
 *    (a smaller window would have dropped it), at the same worth.
 *  - buffer, grow: a rewrite of a sector written back within the last band
 *    of write-backs (a bigger buffer would have coalesced it).
 *  - buffer, shrink: a rewrite of a sector pending in the buffer's oldest
 *    band (a smaller buffer would have written it back already).
 *
 * The sums decay by 1/10 at each decision (every quarter window of window
 * fills). Only with the automatic window and an update buffer; state in
 * struct cache_split (core_internal.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache/core/core_internal.h"

#define SPLIT_STEP   (2ull << 20) /* bytes moved at a time */
#define SPLIT_BAND   (4ull << 20) /* the margin the estimates look at */
#define SPLIT_DECAY  0.9
#define SPLIT_EPS    (4.0 * HL_CACHE_SECTOR) /* smaller gains are noise */
#define SPLIT_SALT   0x51ed27a3b1f4c9d1ull

/* ---- set-up ---- */

int cache_split_init(struct hl_cache_core *c, uint32_t w0, uint32_t wmax_alloc)
{
	struct cache_split *x = &c->split;
	uint32_t bs = c->p.block_size;

	x->w0 = w0;
	x->wmax = w0; /* until the buffer says how much it lends */
	x->walloc = wmax_alloc;
	x->step = (uint32_t)HL_MAX(SPLIT_STEP / bs, 1);
	x->band = (uint32_t)HL_MAX(SPLIT_BAND / bs, 2);
	x->taken_at = calloc(wmax_alloc, sizeof(*x->taken_at));
	x->promoted = calloc(HL_DIV_ROUND_UP(c->nslots, 64), sizeof(uint64_t));
	if (!x->taken_at || !x->promoted || cache_bloom2_init(&x->drops, x->band / 2 + 1, SPLIT_SALT) ||
	    cache_bloom2_init(&x->wbacks, SPLIT_BAND / HL_CACHE_SECTOR / 2, SPLIT_SALT))
		return -ENOMEM;
	return 0;
}

void cache_split_fini(struct hl_cache_core *c)
{
	struct cache_split *x = &c->split;

	free(x->taken_at);
	free(x->promoted);
	cache_bloom2_fini(&x->drops);
	cache_bloom2_fini(&x->wbacks);
	memset(x, 0, sizeof(*x));
}

/* Give back one step of window slots (false: one of them is busy). */
static bool window_shrink(struct hl_cache_core *c)
{
	struct cache_split *x = &c->split;
	struct cache_part *pt = &c->win;
	uint32_t nn = pt->n - x->step;

	for (uint32_t s = pt->first + nn; s < pt->first + pt->n; s++) {
		uint8_t st = cache_state(c, s);
		if (st != CACHE_SLOT_FREE && (st != CACHE_SLOT_USED || cache_is_busy(c, s)))
			return false;
	}
	for (uint32_t s = pt->first + nn; s < pt->first + pt->n; s++)
		if (cache_is_used(c, s))
			cache_window_drop(c, s);
	/* The slots are FREE now and outside the window's range. */
	pt->nfree -= x->step;
	pt->n = nn;
	if (pt->hand >= pt->first + pt->n)
		pt->hand = pt->first;
	if (pt->free_hint >= pt->first + pt->n)
		pt->free_hint = pt->first;
	return true;
}

/* Bytes the window has borrowed from the buffer. */
static uint64_t borrowed(const struct hl_cache_core *c)
{
	return (uint64_t)(c->win.n - c->split.w0) * c->p.block_size;
}

/* The buffer's limit: what it has not lent to the window. */
static void buffer_keeps_rest(struct hl_cache_core *c)
{
	uint64_t lent = borrowed(c);

	c->ub.cap = c->split.ub_bytes > lent ? c->split.ub_bytes - lent : 0;
}

void cache_split_set_buffer(struct hl_cache_core *c, uint64_t bytes)
{
	struct cache_split *x = &c->split;
	uint64_t lend = bytes / 4 * 3 / c->p.block_size / x->step * x->step;

	x->ub_bytes = bytes;
	x->wmax = (uint32_t)HL_MIN((uint64_t)x->walloc, x->w0 + lend);
	while (c->win.n > x->wmax && window_shrink(c))
		;
	/* A busy slot may keep the window above wmax until a later decision. */
	buffer_keeps_rest(c);
}

/* ---- events ---- */

void cache_split_took(struct hl_cache_core *c, uint32_t s)
{
	struct cache_split *x = &c->split;
	double per_return, worth, win_up, buf_up;
	uint64_t step_bytes;

	if (!x->w0)
		return;
	x->taken_at[s - c->nslots] = (uint32_t)++x->takes;
	if (++x->epoch_takes * 4 < c->win.n)
		return;
	x->epoch_takes = 0;
	/* Device bytes one window event is worth: promotions per return x what one costs. */
	per_return = x->returns > 0 ? x->promotions / x->returns : 0;
	worth = per_return * ((double)c->p.block_size +
	                      (x->promotions > 0 ? x->followon / x->promotions : 0));
	win_up = x->win_grow * worth - x->buf_shrink;
	buf_up = x->buf_grow - x->win_shrink * worth;
	step_bytes = (uint64_t)x->step * c->p.block_size;
	if (c->win.n > x->wmax) {
		window_shrink(c); /* still above a lowered limit */
	} else if (win_up > SPLIT_EPS && win_up >= buf_up && c->win.n + x->step <= x->wmax &&
	           borrowed(c) + step_bytes < x->ub_bytes) {
		c->win.n += x->step; /* those slots are FREE */
		c->win.nfree += x->step;
	} else if (buf_up > SPLIT_EPS && c->win.n >= x->w0 + x->step) {
		window_shrink(c);
	}
	buffer_keeps_rest(c);
	x->win_grow *= SPLIT_DECAY;
	x->win_shrink *= SPLIT_DECAY;
	x->buf_grow *= SPLIT_DECAY;
	x->buf_shrink *= SPLIT_DECAY;
}

void cache_split_dropped(struct hl_cache_core *c, uint64_t key)
{
	if (c->split.w0)
		cache_bloom2_add(&c->split.drops, key);
}

void cache_split_returned(struct hl_cache_core *c, uint64_t key)
{
	struct cache_split *x = &c->split;

	if (!x->w0)
		return;
	x->returns += 1;
	if (cache_bloom2_test(&x->drops, key))
		x->win_grow += 1;
}

void cache_split_window_hit(struct hl_cache_core *c, uint32_t s)
{
	struct cache_split *x = &c->split;

	if (x->w0 && x->wmax > x->w0 &&
	    (uint32_t)x->takes - x->taken_at[s - c->nslots] + x->band > c->win.n)
		x->win_shrink += 1;
}

void cache_split_promoted(struct hl_cache_core *c, uint32_t s)
{
	if (!c->split.w0)
		return;
	c->split.promotions += 1;
	cache_bit_set(c->split.promoted, s);
}

void cache_split_released(struct hl_cache_core *c, uint32_t s)
{
	if (c->split.w0 && s < c->nslots)
		cache_bit_clear(c->split.promoted, s);
}

/* 4 KiB sector i of SSD slot s as a bloom key. */
static uint64_t sector_key(uint32_t s, uint32_t i)
{
	return (uint64_t)s << 12 | i;
}

void cache_split_update(struct hl_cache_core *c, uint32_t s, uint32_t first, uint32_t n)
{
	struct cache_split *x = &c->split;
	const struct cache_ub *u = &c->ub;
	const uint8_t *pending = NULL;
	bool oldest = false;
	uint64_t i;

	if (!x->w0 || x->wmax == x->w0 || s >= c->nslots || !u->cap)
		return;
	i = cache_ub_find(c, s);
	if (i != UINT64_MAX) {
		uint64_t len = u->fifo_tail - u->fifo_head;
		pending = cache_ub_bits(c, i);
		oldest = len && (double)(u->map_seq[i] - u->fifo_head) / (double)len <
		                    (double)x->band * c->p.block_size / (double)u->cap;
	}
	for (uint32_t j = first; j < first + n; j++) {
		if (pending && cache_vtest(pending, j)) {
			if (oldest)
				x->buf_shrink += HL_CACHE_SECTOR;
		} else if (cache_bloom2_test(&x->wbacks, sector_key(s, j))) {
			x->buf_grow += HL_CACHE_SECTOR;
		}
	}
}

void cache_split_written_back(struct hl_cache_core *c, uint32_t s, uint32_t first, uint32_t n)
{
	struct cache_split *x = &c->split;

	if (!x->w0 || x->wmax == x->w0)
		return;
	for (uint32_t j = first; j < first + n; j++)
		cache_bloom2_add(&x->wbacks, sector_key(s, j));
	if (cache_bit_test(x->promoted, s))
		x->followon += (double)n * HL_CACHE_SECTOR;
}
