/*
 * cache_read.c - the read side of the policy core: hl_cache_core_read()
 * plans each cache block of a request (hit, partial, miss, fill range),
 * runs the admission call for misses (straight to the SSD while it has
 * free slots, else through the RAM window), promotes window victims to the
 * SSD, keeps the window's ghost and detects sequential streams (bypass).
 * No I/O: the caller carries out the ios it returns.
 */
#include <errno.h>
#include <string.h>

#include "cache/core/core_internal.h"
#include "hotlun/util.h"

#define INDEX_AHEAD 8 /* blocks between starting an index load and using it */

/* ---- ghost: keys the window dropped recently ---- */

/* The ghosts' key of a block: its region below CACHE_GHOST_REGION (core_internal.h). */
static inline uint64_t ghost_key(const struct hl_cache_core *c, uint64_t key)
{
	return cache_key(cache_key_lun(key), cache_key_block(key) >> c->ghost_shift);
}

/* A region is added once while the pair has it: the capacity counts regions, not blocks. */
static void ghost_add(const struct hl_cache_core *c, struct cache_bloom2 *b, uint64_t gkey)
{
	if (!c->ghost_shift || !cache_bloom2_test(b, gkey))
		cache_bloom2_add(b, gkey);
}

void cache_window_drop(struct hl_cache_core *c, uint32_t s)
{
	uint64_t key = cache_slot_key(c, s), gkey = ghost_key(c, key);

	if (!cache_valid_empty(c, s)) {
		ghost_add(c, &c->far_ghost, gkey);
		if (!(*cache_wflags(c, s) & CACHE_W_NOPROMOTE)) {
			ghost_add(c, &c->ghost, gkey);
			cache_split_dropped(c, key);
		}
	}
	cache_slot_release(c, s);
}

/* ---- the write budget (rule 10) ---- */

/*
 * A read found a block's bytes missing that an admit-all cache would have
 * written. Once those bytes pass CACHE_BUDGET_HORIZON cache sizes, the
 * device bytes written so far are taken in and both sums halve, so the
 * ratio follows the workload (for every policy: it is also a statistic).
 */
static void budget_missed(struct hl_cache_core *c)
{
	struct cache_budget *b = &c->budget;

	b->admit_all += (double)(1ull << c->block_shift);
	if (b->admit_all > CACHE_BUDGET_HORIZON * (double)(c->nslots << c->block_shift)) {
		b->written += (double)cache_budget_new_bytes(c);
		b->last = c->st.bytes_cache_write;
		b->written /= 2;
		b->admit_all /= 2;
	}
}

/* ---- request helpers ---- */

/* Sequential detection: true when this request continues a stream past the threshold. */
static bool seq_bypass(struct hl_cache_core *c, struct cache_lun *l, uint64_t off, uint64_t len)
{
	struct cache_seq_stream *st, *lru = &l->seq[0];

	if (!c->p.seq_bypass)
		return false;
	l->seq_clock++;
	for (int i = 0; i < CACHE_SEQ_STREAMS; i++) {
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

/* Bytes of [off, off+len) in block b. */
static uint64_t len_in_block(const struct hl_cache_core *c, uint64_t b, uint64_t off, uint64_t len)
{
	uint64_t s = HL_MAX(b << c->block_shift, off);
	uint64_t e = HL_MIN((b + 1) << c->block_shift, off + len);
	return e - s;
}

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

/* Bytes of the request served from valid sectors of block b (v: its valid bits). */
static uint64_t valid_bytes(const struct hl_cache_core *c, const uint8_t *v, uint64_t b,
                            uint32_t first, uint32_t n, uint64_t off, uint64_t len)
{
	uint64_t bytes = 0;
	uint32_t i = first;

	while (i < first + n) {
		if (!cache_vtest(v, i)) {
			i++;
			continue;
		}
		uint32_t j = i;
		while (j < first + n && cache_vtest(v, j))
			j++;
		bytes += sect_bytes(c, b, i, j - i, off, len);
		i = j;
	}
	return bytes;
}

/* ---- read ---- */

/* Free the partition's CLOCK victim s for a newcomer (counted as an eviction unless empty). */
static void evict_victim(struct hl_cache_core *c, struct cache_lun *l, struct cache_part *pt,
                         uint32_t s, bool empty)
{
	if (!empty)
		CACHE_STAT(c, c->luns[cache_key_lun(cache_slot_key(c, s))] ?: l, evictions, 1);
	cache_slot_release(c, s);
	cache_advance_hand(pt, s);
}

/*
 * Try to move window slot w to the SSD (W-TinyLFU style: the window's
 * victim competes with the SSD's CLOCK victim through the admission
 * policy). On success w leaves the index, becomes MOVING and pinned, the
 * key gets an SSD slot, and *io describes the copy. @return true if started.
 */
static bool window_promote(struct hl_cache_core *c, uint32_t w, struct hl_cache_io *io)
{
	uint64_t key = cache_slot_key(c, w);
	struct cache_lun *l = c->luns[cache_key_lun(key)];
	struct cache_part *pt;
	struct cache_busy_ent *e;
	uint8_t v[HL_CACHE_MAX_BLOCK / HL_CACHE_SECTOR / 8];
	uint32_t s, a, z;
	bool empty = false;

	if (!l || (*cache_wflags(c, w) & CACHE_W_NOPROMOTE))
		return false;
	/* Both slots get a pin: make w's entry first, so that nothing can fail after a change. */
	if (!cache_busy_get(c, w))
		return false;
	pt = &c->parts[l->part];
	s = cache_part_find_free(c, pt);
	if (s != HL_CACHE_NO_SLOT) {
		if (!hl_admit_should(c->admit, key, c->p.admit_free, 0))
			goto no;
	} else {
		s = cache_part_find_victim(c, pt, &empty);
		if (s == HL_CACHE_NO_SLOT)
			goto no;
		if ((*cache_wflags(c, w) & CACHE_W_RETURNED) && !empty) {
			/*
			 * Back from the ghost: ties with the victim go to the newcomer,
			 * except while rule 10 lets more blocks return (they must be
			 * more frequent than what they displace).
			 */
			if (cache_budget_is_open(c)
			        ? hl_admit_estimate(c->admit, key) <=
			              hl_admit_estimate(c->admit, cache_slot_key(c, s))
			        : !hl_admit_should_returning(c->admit, key, cache_slot_key(c, s)))
				goto no;
		} else if (!hl_admit_should(c->admit, key, empty && c->p.admit_free,
		                            cache_slot_key(c, s))) {
			goto no;
		}
	}
	/* s is idle (free, or an unpinned victim): its entry is new. */
	if (!cache_busy_get(c, s))
		goto no;
	if (cache_is_used(c, s))
		evict_victim(c, l, pt, s, empty);
	cache_valid_get(c, w, v);
	for (a = 0; !cache_vtest(v, a); a++)
		;
	for (z = c->spb - 1; !cache_vtest(v, z); z--)
		;
	/* The key moves to the SSD slot now, so writes and fills see one place. */
	cache_index_remove(&c->ix, key);
	c->lun_used[cache_key_lun(key)]--;
	c->meta[w] = (uint8_t)((c->meta[w] & ~CACHE_M_STATE) | CACHE_SLOT_MOVING);
	cache_busy_find(c, w)->pins++;
	cache_slot_take(c, pt, s, key);
	c->used--; /* w is no longer counted as holding a block */
	c->win_used--;
	e = cache_busy_find(c, s);
	e->pins++;
	cache_split_promoted(c, s);
	memset(io, 0, sizeof(*io));
	io->kind = HL_CACHE_IO_PROMOTE;
	io->block = cache_key_block(key);
	io->lun = cache_key_lun(key); /* maybe not the reading LUN: the window is shared */
	io->slot = s;
	io->src_slot = w;
	io->ticket = e->gen;
	io->fill_first = (uint16_t)a;
	io->fill_nsect = (uint16_t)(z - a + 1);
	io->pinned = 1;
	io->admitted = 1;
	io->meta_barrier = (c->meta[s] & CACHE_M_DISK_VALID) != 0;
	CACHE_STAT(c, l, admissions, 1);
	return true;
no:
	cache_busy_put(c, w);
	return false;
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
	uint8_t f = *cache_wflags(c, w);
	uint64_t key = cache_slot_key(c, w);

	if (c->inval && cache_inval_covers(c, cache_key_lun(key), cache_key_block(key)))
		return false; /* being invalidated: its copy would outlive the drop's chunk */
	if (c->p.admit != HL_ADMIT_FREQ)
		return true;
	if (!(f & CACHE_W_RETURNED))
		return false;
	/* A rule-10 return only while the budget is still open (else rules 5 and 6). */
	return !(f & CACHE_W_FAR) || cache_budget_is_open(c);
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
	s = cache_part_find_free(c, pt);
	for (int tries = 0; s == HL_CACHE_NO_SLOT && tries < HL_CACHE_PROMOTE_PER_MISS; tries++) {
		s = cache_part_find_victim(c, pt, &empty);
		if (s == HL_CACHE_NO_SLOT)
			return HL_CACHE_NO_SLOT;
		cache_advance_hand(pt, s);
		bool ok = !empty && *nextra < max_extra && window_may_promote(c, s) &&
		          window_promote(c, s, &extra[*nextra]);
		if (ok) {
			(*nextra)++;
			s = HL_CACHE_NO_SLOT; /* s is busy copying: look for another */
			continue;
		}
		cache_window_drop(c, s);
	}
	if (s == HL_CACHE_NO_SLOT)
		return HL_CACHE_NO_SLOT;
	cache_slot_take(c, pt, s, key);
	cache_split_took(c, s);
	return s;
}

/*
 * A miss of key in l's partition: while the SSD has free slots it is
 * admitted there directly (warm-up); otherwise it goes to the RAM window
 * and competes for the SSD when it leaves the window. Sequential streams
 * (bypass) only use the window and are never promoted from it unless
 * re-read there, or re-read after the window dropped them while the cache
 * is within its write budget (rule 10). @return slot or NO_SLOT.
 */
static uint32_t admit_miss(struct hl_cache_core *c, struct cache_lun *l, uint64_t key, bool bypass,
                           struct hl_cache_io *io, struct hl_cache_io *extra, uint32_t *nextra,
                           uint32_t max_extra)
{
	struct cache_part *pt = &c->parts[l->part];
	uint32_t s = HL_CACHE_NO_SLOT;
	bool empty = false, returning, far = false, freq = c->p.admit == HL_ADMIT_FREQ;
	uint64_t gkey;

	if (cache_key_block(key) > CACHE_KEY_MAX_BLOCK)
		return HL_CACHE_NO_SLOT; /* a slot's key cannot hold it (struct cache_keys) */
	if (c->shadow) {
		/* The owner's hot block: to the SSD, unless the victim is more frequent. */
		s = cache_part_find_free(c, pt);
		if (s == HL_CACHE_NO_SLOT) {
			s = cache_part_find_victim(c, pt, &empty);
			if (s == HL_CACHE_NO_SLOT ||
			    (!empty && hl_admit_estimate(c->admit, key) <
			                   hl_admit_estimate(c->admit, cache_slot_key(c, s))))
				return HL_CACHE_NO_SLOT;
			evict_victim(c, l, pt, s, empty);
		}
		cache_slot_take(c, pt, s, key);
		goto ssd;
	}
	if (!bypass)
		s = cache_part_find_free(c, pt);
	if (s != HL_CACHE_NO_SLOT && hl_admit_should(c->admit, key, c->p.admit_free, 0)) {
		cache_slot_take(c, pt, s, key);
		goto ssd;
	}
	gkey = ghost_key(c, key);
	returning = !bypass && c->win.n && cache_bloom2_test(&c->ghost, gkey);
	if (returning)
		cache_split_returned(c, key);
	else if (cache_budget_is_open(c) &&
	         (cache_bloom2_test(&c->far_ghost, gkey) ||
	          (bypass && cache_bloom2_test(&c->ghost, gkey)))) {
		/*
		 * Rule 10: within the write budget a block also returns from
		 * further back, and a sequential stream that re-reads what the
		 * window held is admitted like any returning block. Counted as
		 * a return for rule 9 (its promotions are counted there too).
		 */
		returning = far = true;
		bypass = false;
		cache_split_returned(c, key);
	}
	if (returning && !freq) {
		/* Back soon after the window dropped it: compete for the SSD right away. */
		s = cache_part_find_victim(c, pt, &empty);
		if (s != HL_CACHE_NO_SLOT &&
		    hl_admit_should_returning(c->admit, key, cache_slot_key(c, s))) {
			evict_victim(c, l, pt, s, empty);
			cache_slot_take(c, pt, s, key);
			goto ssd;
		}
	}
	if (!bypass && !c->win.n) {
		/* No window: compare with the SSD victim right away. */
		s = cache_part_find_victim(c, pt, &empty);
		if (s != HL_CACHE_NO_SLOT &&
		    hl_admit_should(c->admit, key, empty && c->p.admit_free,
		                    cache_slot_key(c, s))) {
			evict_victim(c, l, pt, s, empty);
			cache_slot_take(c, pt, s, key);
			goto ssd;
		}
	}
	if (!bypass)
		CACHE_STAT(c, l, rejections, 1);
	s = window_take(c, key, extra, nextra, max_extra);
	if (s != HL_CACHE_NO_SLOT) {
		if (bypass)
			*cache_wflags(c, s) |= CACHE_W_NOPROMOTE;
		else if (returning)
			*cache_wflags(c, s) |= CACHE_W_RETURNED;
		if (far)
			*cache_wflags(c, s) |= CACHE_W_FAR;
		io->ram = 1;
		io->admitted = 1;
		CACHE_STAT(c, l, window_fills, 1);
	}
	return s;
ssd:
	io->meta_barrier = (c->meta[s] & CACHE_M_DISK_VALID) != 0;
	io->admitted = 1;
	CACHE_STAT(c, l, admissions, 1);
	return s;
}

/*
 * A miss during a lazy restore (docs/cache-format.md, rule 5): only a FREE
 * SSD slot of a record page whose claims are known (restore_hold), never a
 * victim (the restore brings the warm blocks back) nor the RAM window,
 * nothing for sequential streams or a shadow's plan. @return slot or NO_SLOT.
 */
static uint32_t admit_restoring(struct hl_cache_core *c, struct cache_lun *l, uint64_t key,
                                bool bypass, struct hl_cache_io *io)
{
	struct cache_part *pt = &c->parts[l->part];
	uint32_t s;

	if (bypass || c->shadow || cache_key_block(key) > CACHE_KEY_MAX_BLOCK)
		return HL_CACHE_NO_SLOT;
	s = cache_restore_find_free(c, pt);
	if (s == HL_CACHE_NO_SLOT || !hl_admit_should(c->admit, key, c->p.admit_free, 0))
		return HL_CACHE_NO_SLOT;
	cache_slot_take(c, pt, s, key);
	io->meta_barrier = (c->meta[s] & CACHE_M_DISK_VALID) != 0;
	io->admitted = 1;
	CACHE_STAT(c, l, admissions, 1);
	return s;
}

int hl_cache_core_read(struct hl_cache_core *c, uint16_t lun, uint64_t off, uint64_t len,
                       struct hl_cache_io *ios, uint32_t max)
{
	struct cache_lun *l;
	uint32_t nb, nhit_blocks = 0, nextra = 0, max_extra;
	uint64_t hit_bytes = 0, ram_bytes = 0, b0;
	bool bypass;
	int64_t span = cache_req_start(c, lun, off, len, &l);

	if (span < 0)
		return (int)span;
	if (span > max)
		return -E2BIG;
	nb = (uint32_t)span;
	/*
	 * Promotions the read may plan: as many as max leaves room for (the
	 * hand looks at HL_CACHE_PROMOTE_PER_MISS victims a miss). always and
	 * nhit:N promote any victim the hand meets: for them more than max(nb,
	 * 2) a read lose hits and write more (docs/cache-policy.md).
	 */
	max_extra = max - nb;
	if (c->p.admit != HL_ADMIT_FREQ)
		max_extra = HL_MIN(max_extra, HL_MAX(nb, 2));
	c->call++;
	bypass = !c->shadow && seq_bypass(c, l, off, len);
	b0 = off >> c->block_shift;
	/*
	 * A large read over small blocks looks up hundreds of blocks whose index
	 * entries are scattered (a cache miss each: 90% of the lookup's time, at
	 * 4K blocks 5% of a 1 MiB hit's CPU): their loads are started
	 * INDEX_AHEAD blocks ahead, so they overlap instead of waiting in turn.
	 */
	for (uint32_t k = 0; k < nb && k < INDEX_AHEAD; k++)
		cache_index_prefetch(&c->ix, cache_key(lun, b0 + k));
	for (uint32_t k = 0; k < nb; k++) {
		struct hl_cache_io *io = &ios[k];
		uint64_t b = b0 + k, key = cache_key(lun, b);
		if (k + INDEX_AHEAD < nb)
			cache_index_prefetch(&c->ix, cache_key(lun, b + INDEX_AHEAD));
		uint32_t s = cache_index_find(&c->ix, key), first, n;

		cache_block_sectors(c, b, off, len, &first, &n);
		if (c->inval && cache_inval_covers(c, lun, b)) {
			/* Being invalidated (between two chunks): the origin, no fill. */
			cache_io_init(io, b, HL_CACHE_NO_SLOT, first, n);
			io->kind = HL_CACHE_IO_MISS;
			continue;
		}
		cache_io_init(io, b, s, first, n);
		hl_admit_access(c->admit, key, s == HL_CACHE_NO_SLOT);
		if (s != HL_CACHE_NO_SLOT) {
			uint8_t v[HL_CACHE_MAX_BLOCK / HL_CACHE_SECTOR / 8];
			uint32_t nv = cache_valid_count(c, s, first, n), clock = cache_clock(c, s);
			uint32_t cmax = s < c->nslots ? CACHE_CLOCK_MAX : CACHE_WIN_CLOCK_MAX;
			struct cache_busy_ent *e;

			if (nv && clock < cmax)
				cache_clock_set(c, s, clock + 1);
			if (nv && s >= c->nslots) {
				cache_split_window_hit(c, s);
				*cache_wflags(c, s) &= (uint8_t)~CACHE_W_NOPROMOTE;
			}
			io->ram = s >= c->nslots;
			e = cache_busy_get(c, s);
			if (!e || e->pins == UINT8_MAX) {
				/* Too many users (or no room to count one more): the origin serves
				 * it. */
				io->kind = HL_CACHE_IO_MISS;
				io->slot = HL_CACHE_NO_SLOT;
				io->ram = 0;
				continue;
			}
			e->pins++;
			io->ticket = e->gen;
			io->pinned = 1;
			if (nv == n) {
				/* (every sector valid: no per-sector walk) */
				hit_bytes += len_in_block(c, b, off, len);
				if (io->ram)
					ram_bytes += len_in_block(c, b, off, len);
				io->kind = HL_CACHE_IO_HIT;
				nhit_blocks++;
				continue;
			}
			cache_valid_get(c, s, v);
			uint64_t vb = valid_bytes(c, v, b, first, n, off, len);
			hit_bytes += vb;
			if (io->ram)
				ram_bytes += vb;
			if (!c->shadow)
				budget_missed(c);
			io->kind = nv ? HL_CACHE_IO_PARTIAL : HL_CACHE_IO_MISS;
			/* Fill the gap [first invalid, last invalid] unless a write is in flight.
			 */
			if (!e->writers) {
				uint32_t a = first, z = first + n - 1;
				while (cache_vtest(v, a))
					a++;
				while (cache_vtest(v, z))
					z--;
				io->fill_first = (uint16_t)a;
				io->fill_nsect = (uint16_t)(z - a + 1);
			}
			continue;
		}
		io->kind = HL_CACHE_IO_MISS;
		if (!c->shadow)
			budget_missed(c);
		if (cache_wip_find(c, key))
			continue; /* an origin write to it is in flight: do not fill */
		/* A lazy restore: only a slot whose record is known (rule 5). */
		s = c->rs.on ? admit_restoring(c, l, key, bypass, io)
		             : admit_miss(c, l, key, bypass, io, ios + nb, &nextra, max_extra);
		if (s == HL_CACHE_NO_SLOT)
			continue;
		struct cache_busy_ent *e = cache_busy_get(c, s);
		if (!e) {
			/* No room to pin it: give the empty slot back, the origin serves the block.
			 */
			cache_slot_maybe_release(c, s);
			io->ram = io->admitted = io->meta_barrier = 0;
			continue;
		}
		io->slot = s;
		io->ticket = e->gen;
		e->pins++;
		io->pinned = 1;
		if (c->p.fill_whole_block) {
			io->fill_first = 0;
			io->fill_nsect = (uint16_t)c->spb;
		} else {
			io->fill_first = (uint16_t)first;
			io->fill_nsect = (uint16_t)n;
		}
	}
	if (c->shadow)
		return (int)(nb + nextra); /* not a read of the workload: not counted */
	CACHE_STAT(c, l, read_reqs, 1);
	CACHE_STAT(c, l, bytes_read, len);
	CACHE_STAT(c, l, bytes_read_cache, hit_bytes);
	CACHE_STAT(c, l, bytes_read_ram, ram_bytes);
	CACHE_STAT(c, l, bytes_read_origin, len - hit_bytes);
	if (bypass) {
		CACHE_STAT(c, l, read_bypass, 1);
		CACHE_STAT(c, l, bytes_read_bypass, len);
	}
	if (nhit_blocks == nb)
		CACHE_STAT(c, l, read_hits, 1);
	else if (hit_bytes)
		CACHE_STAT(c, l, read_partial, 1);
	else
		CACHE_STAT(c, l, read_misses, 1);
	return (int)(nb + nextra);
}

int hl_cache_core_read_shadow(struct hl_cache_core *c, uint16_t lun, uint64_t off, uint64_t len,
                              struct hl_cache_io *ios, uint32_t max)
{
	int n;

	c->shadow = true;
	n = hl_cache_core_read(c, lun, off, len, ios, max);
	c->shadow = false;
	return n;
}

uint32_t hl_cache_core_hot_scan(const struct hl_cache_core *c, uint16_t lun, uint64_t *cursor,
                                uint64_t nslots, struct hl_cache_hot *out, uint32_t max)
{
	uint64_t s = *cursor, end = HL_MIN(c->nslots, s + nslots);
	uint32_t n = 0;

	for (; s < end && n < max; s++) {
		uint32_t slot = (uint32_t)s;
		uint64_t key = cache_slot_key(c, slot);

		if (!cache_is_used(c, slot) || cache_key_lun(key) != lun ||
		    cache_valid_empty(c, slot))
			continue;
		uint64_t f = (uint64_t)hl_admit_estimate(c->admit, key) * 4 + cache_clock(c, slot);
		out[n].block = cache_key_block(key);
		out[n].freq = f > UINT32_MAX ? UINT32_MAX : (uint32_t)f;
		n++;
	}
	*cursor = s;
	return n;
}
