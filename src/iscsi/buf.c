/*
 * buf.c - a connection's data buffers (READ data sent as Data-In, WRITE
 * data received): 4 KiB-aligned, in power-of-two size classes, kept per
 * connection for reuse (no page faults per command) up to
 * ISCSI_BUF_CACHE_MAX, given back when the connection idles or closes.
 *
 * Buffers from ISCSI_BUF_HUGE_MIN up to 1 MiB live in transparent huge
 * pages: a 1 MiB hit is read by O_DIRECT into its buffer, which pins every
 * page of it, and sent from it by a copy that walks every page; with 4 KiB
 * pages that was 256 page pins and TLB misses per MiB (gup_fast_fallback
 * alone 5-7% of a 1 MiB hit's CPU), with a huge page it is one (A/B in
 * docs/benchmarks.md: 21-32% less CPU per 1 MiB hit). They are carved from
 * 2 MiB chunks (madvise(MADV_HUGEPAGE); two 1 MiB buffers each), which the
 * connection keeps while any piece is in use or kept, at most
 * ISCSI_BUF_CHUNKS. Larger buffers stay in plain pages: most are not kept
 * (ISCSI_BUF_CACHE_MAX), and allocating and freeing huge pages for every
 * 16 MiB READ stalled another session on the reactor to 101-205 ms in
 * net_slow_reader.sh run beside another test (6 ms with plain pages).
 *
 * Memory that is reused (each 2 MiB chunk, each buffer kept for reuse) is
 * announced as a region I/O will target (hotlun/mem_region.h), on the
 * connection's reactor thread, and withdrawn there before it is freed: the
 * cache device's io_uring registers it once and reads hits into it without
 * pinning its pages per read (docs/bench-hit-device.md). Memory used once
 * is not announced: registering it would cost what it saves.
 */
#include <stdlib.h>
#include <sys/mman.h>

#include "hotlun/event.h"
#include "hotlun/log.h"
#include "hotlun/mem_region.h"
#include "iscsi/iscsi_internal.h"

#define HUGE_SIZE (2u << 20)

/* Regions are per thread: only the connection's own reactor thread announces or withdraws. */
static bool on_conn_thread(const struct iscsi_conn *c)
{
	return c->reactor && hl_reactor_current() == c->reactor;
}

/* Announce reused memory (no-op when it is already, or off the connection's thread). */
static void region_keep(struct iscsi_conn *c, void *p, size_t len)
{
	/* -ENOSPC, -ENOMEM: its I/O pins pages as before */
	if (on_conn_thread(c) && hl_mem_region_add(p, len) >= 0)
		c->buf_regions++;
}

/*
 * Withdraw p's region, if any, before p is freed. @return whether p may be
 * freed: not off the connection's thread while any of its memory is
 * announced, since p may be one whose ring still holds its pages pinned,
 * and a read into a reused address would land in those (the initiator
 * would get what the new memory held). No path frees there today; should
 * one, a leak is safe where a free is not.
 */
static bool region_drop(struct iscsi_conn *c, void *p)
{
	if (on_conn_thread(c)) {
		if (hl_mem_region_del(p) == 0)
			c->buf_regions--;
		return true;
	}
	if (!c->buf_regions)
		return true;
	HL_ERR_RL("iscsi",
	          "a data buffer freed off its connection's thread while %u are "
	          "registered for I/O: kept (leaked), not freed",
	          c->buf_regions);
	return false;
}

static unsigned buf_class(uint32_t len)
{
	unsigned k = 0;

	while (k < ISCSI_BUF_CLASSES - 1 && (4096u << k) < len)
		k++;
	return k;
}

/* May a freed buffer of cap bytes be kept (not given back to the allocator)? */
static bool may_keep(const struct iscsi_conn *c, uint32_t cap)
{
	const struct iscsi_wbudget *wb = &c->srv->wb;

	/* kept buffers are resident memory too: all connections together keep at most
	 * half the write buffer budget (an idle connection cannot park 64 MiB each) */
	return c->state != CONN_CLOSED && c->buf_cache_bytes + cap <= ISCSI_BUF_CACHE_MAX &&
	       atomic_load(&wb->buf_cache_total) + cap <= atomic_load(&wb->buf_cache_max);
}

static void kept_add(struct iscsi_conn *c, uint32_t n)
{
	c->buf_cache_bytes += n;
	atomic_fetch_add(&c->srv->wb.buf_cache_total, n);
}

static void kept_sub(struct iscsi_conn *c, uint32_t n)
{
	c->buf_cache_bytes -= n;
	atomic_fetch_sub(&c->srv->wb.buf_cache_total, n);
}

/* A fresh 2 MiB-aligned chunk of size bytes (a multiple of 2 MiB) in huge pages. */
static void *huge_alloc(size_t size)
{
	void *p;

	if (posix_memalign(&p, HUGE_SIZE, size) != 0)
		return NULL;
	madvise(p, size, MADV_HUGEPAGE); /* advice: without THP it is plain memory */
	return p;
}

/*
 * A piece of class k (below 2 MiB) from a chunk: a free piece of a chunk of
 * that class, a wholly free chunk of another class, or a new chunk. The free
 * pieces of the connection's chunks count as kept buffers. NULL: no chunk
 * slot left (the caller allocates plainly).
 */
static void *chunk_get(struct iscsi_conn *c, unsigned k)
{
	uint32_t size = 4096u << k, pieces = HUGE_SIZE / size, all = (uint32_t)((1ull << pieces) - 1);
	struct iscsi_buf_chunk *ch = NULL;

	for (unsigned i = 0; i < c->nchunks && !ch; i++)
		if (c->chunks[i].k == k && c->chunks[i].free)
			ch = &c->chunks[i];
	for (unsigned i = 0; i < c->nchunks && !ch; i++) {
		struct iscsi_buf_chunk *x = &c->chunks[i];
		if (x->free == (uint32_t)((1ull << (HUGE_SIZE / (4096u << x->k))) - 1)) {
			x->k = (uint8_t)k; /* wholly free: the same 2 MiB, cut anew */
			x->free = all;
			ch = x;
		}
	}
	if (!ch) {
		if (c->nchunks == ISCSI_BUF_CHUNKS)
			return NULL;
		uint8_t *base = huge_alloc(HUGE_SIZE);
		if (!base)
			return NULL;
		ch = &c->chunks[c->nchunks++];
		ch->base = base;
		ch->k = (uint8_t)k;
		ch->free = all;
		kept_add(c, HUGE_SIZE);
		region_keep(c, base, HUGE_SIZE);
	}
	unsigned i = (unsigned)__builtin_ctz(ch->free);
	ch->free &= ~(1u << i);
	kept_sub(c, size);
	return ch->base + (size_t)i * size;
}

/* Give a piece back to its chunk. @return false: p is not from a chunk. */
static bool chunk_put(struct iscsi_conn *c, void *p)
{
	for (unsigned i = 0; i < c->nchunks; i++) {
		struct iscsi_buf_chunk *ch = &c->chunks[i];
		uint32_t size = 4096u << ch->k;
		if ((uint8_t *)p < ch->base || (uint8_t *)p >= ch->base + HUGE_SIZE)
			continue;
		ch->free |= 1u << (((uint8_t *)p - ch->base) / size);
		kept_add(c, size);
		if (ch->free == (uint32_t)((1ull << (HUGE_SIZE / size)) - 1) &&
		    (c->state == CONN_CLOSED || c->buf_cache_bytes > ISCSI_BUF_CACHE_MAX ||
		     atomic_load(&c->srv->wb.buf_cache_total) >
		         atomic_load(&c->srv->wb.buf_cache_max))) {
			if (region_drop(c, ch->base))
				free(ch->base);
			kept_sub(c, HUGE_SIZE);
			*ch = c->chunks[--c->nchunks];
		}
		return true;
	}
	return false;
}

void *iscsi_buf_get(struct iscsi_conn *c, uint32_t len, uint32_t *cap)
{
	unsigned k = buf_class(len);
	uint32_t size = 4096u << k;
	void *p = NULL;

	if (size < len)
		return NULL;
	if (size >= ISCSI_BUF_HUGE_MIN && size < HUGE_SIZE)
		p = chunk_get(c, k);
	if (p) {
		/* from a chunk */
	} else if (c->buf_cached[k]) {
		p = c->buf_cache[k][--c->buf_cached[k]];
		kept_sub(c, size);
	} else if (posix_memalign(&p, 4096, size) != 0) {
		p = NULL;
	}
	if (!p)
		return NULL;
	*cap = size;
	return p;
}

void iscsi_buf_put(struct iscsi_conn *c, void *p, uint32_t cap)
{
	unsigned k = buf_class(cap);

	if (cap >= ISCSI_BUF_HUGE_MIN && cap < HUGE_SIZE && chunk_put(c, p))
		return;
	if ((4096u << k) == cap && c->buf_cached[k] < ISCSI_BUF_CACHE_DEPTH && may_keep(c, cap)) {
		kept_add(c, cap);
		c->buf_cache[k][c->buf_cached[k]++] = p;
		region_keep(c, p, cap);
		return;
	}
	if (region_drop(c, p))
		free(p);
}

void iscsi_conn_buf_trim(struct iscsi_conn *c)
{
	for (unsigned k = 0; k < ISCSI_BUF_CLASSES; k++) {
		while (c->buf_cached[k]) {
			void *p = c->buf_cache[k][--c->buf_cached[k]];
			if (region_drop(c, p))
				free(p);
			kept_sub(c, 4096u << k);
		}
	}
	/* chunks with a piece still in use stay (their free pieces stay counted) */
	for (unsigned i = 0; i < c->nchunks;) {
		struct iscsi_buf_chunk *ch = &c->chunks[i];
		if (ch->free == (uint32_t)((1ull << (HUGE_SIZE / (4096u << ch->k))) - 1)) {
			if (region_drop(c, ch->base))
				free(ch->base);
			kept_sub(c, HUGE_SIZE);
			*ch = c->chunks[--c->nchunks];
		} else {
			i++;
		}
	}
}
