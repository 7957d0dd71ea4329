/*
 * cache_restore.c - the policy core during a lazy warm restart
 * (docs/cache-format.md, "Lazy restore"): while the loader restores the
 * slot records in the background, no new slot is taken (a miss is served
 * from the origin and not filled), and every block a write or an
 * invalidation touches goes into the "written while restoring" filter
 * before the origin can see the change. The loader drops every record of
 * a block in the filter (hl_cache_core_slot_restore: -ESTALE), and the
 * engine makes the superblock state "restore with invalidations pending"
 * durable before the first such write reaches the origin
 * (hl_cache_core_write_needs_sync asks for a sync until then).
 *
 * The filter is a sorted array of disjoint block ranges per LUN, bounded:
 * past CACHE_RS_MAX ranges the two closest neighbours of one LUN merge
 * into one wider range (dropping more records is always safe).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cache/core/core_internal.h"

static int rs_cmp(const struct cache_rs_range *a, uint16_t lun, uint64_t lo)
{
	if (a->lun != lun)
		return a->lun < lun ? -1 : 1;
	return a->lo < lo ? -1 : a->lo > lo;
}

/* Index of the first range not before (lun, lo). */
static uint32_t rs_lower(const struct cache_restore *rs, uint16_t lun, uint64_t lo)
{
	uint32_t a = 0, b = rs->n;

	while (a < b) {
		uint32_t m = a + (b - a) / 2;
		if (rs_cmp(&rs->r[m], lun, lo) < 0)
			a = m + 1;
		else
			b = m;
	}
	return a;
}

/*
 * Merge the two neighbouring ranges of one LUN with the smallest gap. With
 * one range per LUN everywhere (more LUNs noted than CACHE_RS_MAX: attach
 * and detach cycles during one restore) every record still to come is
 * dropped instead.
 */
static void rs_shrink(struct cache_restore *rs)
{
	uint32_t best = UINT32_MAX;
	uint64_t gap = UINT64_MAX;

	for (uint32_t i = 0; i + 1 < rs->n; i++) {
		if (rs->r[i].lun != rs->r[i + 1].lun)
			continue;
		if (rs->r[i + 1].lo - rs->r[i].hi < gap) {
			gap = rs->r[i + 1].lo - rs->r[i].hi;
			best = i;
		}
	}
	if (best == UINT32_MAX) {
		rs->all = true;
		return;
	}
	rs->r[best].hi = rs->r[best + 1].hi;
	memmove(&rs->r[best + 1], &rs->r[best + 2], (rs->n - best - 2) * sizeof(rs->r[0]));
	rs->n--;
}

void cache_restore_note(struct hl_cache_core *c, uint16_t lun, uint64_t b0, uint64_t b1)
{
	struct cache_restore *rs = &c->rs;
	uint32_t i, j;

	if (!rs->on)
		return;
	if (b1 > HL_CACHE_MAX_BLOCK_NR)
		b1 = HL_CACHE_MAX_BLOCK_NR;
	if (b0 > b1)
		return; /* past every block a record can hold: nothing to drop */
	rs->noted++; /* (the stop's log line says "cold" by it: only what sets the mark) */
	if (rs->all)
		return; /* every record still to come is dropped anyway */
	/* The first range that may touch [b0, b1]: the one before the insert point too. */
	i = rs_lower(rs, lun, b0);
	if (i > 0 && rs->r[i - 1].lun == lun && rs->r[i - 1].hi + 1 >= b0)
		i--;
	for (j = i; j < rs->n && rs->r[j].lun == lun && rs->r[j].lo <= b1 + 1; j++)
		;
	if (j > i) {
		/* Ranges i..j-1 overlap or touch: one range replaces them. */
		uint64_t lo = HL_MIN(b0, rs->r[i].lo), hi = HL_MAX(b1, rs->r[j - 1].hi);
		rs->r[i] = (struct cache_rs_range){.lun = lun, .lo = lo, .hi = hi};
		memmove(&rs->r[i + 1], &rs->r[j], (rs->n - j) * sizeof(rs->r[0]));
		rs->n -= j - i - 1;
		return;
	}
	if (rs->n == CACHE_RS_MAX) {
		rs_shrink(rs);
		cache_restore_note(c, lun, b0, b1); /* (room now, or all) */
		rs->noted--;
		return;
	}
	if (!rs->r) {
		rs->r = calloc(CACHE_RS_MAX, sizeof(rs->r[0]));
		if (!rs->r) {
			/* No memory for the filter: drop every record still to come. */
			rs->all = true;
			return;
		}
	}
	memmove(&rs->r[i + 1], &rs->r[i], (rs->n - i) * sizeof(rs->r[0]));
	rs->r[i] = (struct cache_rs_range){.lun = lun, .lo = b0, .hi = b1};
	rs->n++;
}

bool cache_restore_covers(const struct hl_cache_core *c, uint16_t lun, uint64_t block)
{
	const struct cache_restore *rs = &c->rs;
	uint32_t i;

	if (!rs->on)
		return false;
	if (rs->all)
		return true;
	i = rs_lower(rs, lun, block);
	if (i < rs->n && rs->r[i].lun == lun && rs->r[i].lo == block)
		return true;
	return i > 0 && rs->r[i - 1].lun == lun && rs->r[i - 1].lo <= block &&
	       block <= rs->r[i - 1].hi;
}

void hl_cache_core_restore_begin(struct hl_cache_core *c)
{
	free(c->rs.r);
	memset(&c->rs, 0, sizeof(c->rs));
	c->rs.on = true;
}

void hl_cache_core_restore_end(struct hl_cache_core *c)
{
	free(c->rs.r);
	memset(&c->rs, 0, sizeof(c->rs));
}

bool hl_cache_core_restoring(const struct hl_cache_core *c)
{
	return c->rs.on;
}

bool hl_cache_core_restore_need_mark(const struct hl_cache_core *c)
{
	return c->rs.on && (c->rs.n || c->rs.all) && !c->rs.marked;
}

void hl_cache_core_restore_marked(struct hl_cache_core *c)
{
	if (c->rs.on)
		c->rs.marked = true;
}

uint64_t hl_cache_core_restore_noted(const struct hl_cache_core *c)
{
	return c->rs.noted;
}

uint64_t hl_cache_core_lun_restore_dropped(const struct hl_cache_core *c, uint16_t lun)
{
	return c->luns[lun] ? c->luns[lun]->rs_dropped : 0;
}

/*
 * ---- faulting memory in ahead of a batch ----
 * The RAM of a big cache comes from calloc and is touched for the first
 * time by the restore: at 4 TiB each restored block lands on a random page
 * of a 5.7 GB index, and a first touch costs 10-40 us (page fault, zeroing,
 * memcg accounting). Under the cache lock that made one batch of 1,024
 * records hold it for 30-40 ms. The loader faults the pages in first,
 * without the lock: MADV_POPULATE_WRITE maps them without changing a byte,
 * so it is safe while the reactors use the same pages.
 */
#define RS_PREFAULT_MIN (64ull << 20) /* index bytes below which it is not worth it */

static void populate(const void *p, size_t len)
{
#ifdef MADV_POPULATE_WRITE
	uintptr_t a = (uintptr_t)p & ~(uintptr_t)4095;
	uintptr_t e = ((uintptr_t)p + len + 4095) & ~(uintptr_t)4095;
	(void)madvise((void *)a, e - a, MADV_POPULATE_WRITE); /* best effort */
#else
	(void)p;
	(void)len;
#endif
}

bool hl_cache_core_restore_prefault_on(const struct hl_cache_core *c)
{
	return c->ix.cap * sizeof(*c->ix.tab) >= RS_PREFAULT_MIN;
}

void hl_cache_core_restore_prefault(const struct hl_cache_core *c, uint16_t lun, uint64_t block)
{
	populate(cache_index_home_addr(&c->ix, cache_key(lun, block)), sizeof(*c->ix.tab));
}

void hl_cache_core_restore_prefault_slots(const struct hl_cache_core *c, uint32_t first, uint32_t n)
{
	if (!n || first >= c->nslots)
		return;
	if (n > c->nslots - first)
		n = (uint32_t)(c->nslots - first);
	populate(&c->keys.block[first], (size_t)n * sizeof(*c->keys.block));
	populate(&c->keys.lunix[first], (size_t)n * sizeof(*c->keys.lunix));
	populate(&c->meta[first], n);
}
