/*
 * engine_read.c - READ and PRE-FETCH through the cache: plan under the
 * cache mutex, whole hits read from the cache device (straight into the
 * caller's buffer when it can; hits in adjacent slots with one device read), misses read from the origin in runs widened
 * to what their fills need, PARTIAL blocks stitched from valid sectors and
 * origin extents, a failed hit retried from the origin; the reply, then the
 * fills and promotions of what the read brought (engine_fill.c writes them).
 *
 * Shared state and the ordering rules: engine_internal.h.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache/engine/engine_internal.h"
#include "hotlun/log.h"
#include "hotlun/util.h"

static inline bool io_fills(const struct hl_cache_io *io)
{
	return io->slot != HL_CACHE_NO_SLOT && io->fill_nsect;
}

/*
 * True when an origin write in flight on e overlaps cache block b, or one
 * that failed and may still land (engine_unsettled). Under c->lock.
 */
static bool write_overlaps(const struct hl_cache *c, struct hl_origin *inner, struct map_ent *e,
                           uint64_t b)
{
	uint64_t s = blk_start(c, b), end = s + c->bs;
	struct eng_req *w;

	if (engine_unsettled(e, inner, s, c->bs))
		return true;

	hl_list_for_each_entry(w, &e->wlist, wlink)
	{
		if (w->off < end && s < w->off + w->len)
			return true;
	}
	return false;
}

/* After the reply: write what the origin returned (and promotions) into the slots. */
static void read_fill_phase(struct eng_req *req)
{
	struct hl_cache *c = req->c;
	uint32_t first_fill = req->nsub;
	bool barrier = false;

	for (uint32_t k = 0; k < req->nios; k++) {
		struct hl_cache_io *io = &req->ios[k];
		uint8_t *data;
		bool w;

		req->iof[k] = 0;
		if (!io_fills(io))
			continue;
		if (io->kind == HL_CACHE_IO_PROMOTE) {
			if (io->src_slot < c->nslots || io->src_slot - c->nslots >= c->nwin)
				continue;
			/* The window slot is pinned and MOVING: its data is stable. */
			data = c->window + (uint64_t)(io->src_slot - c->nslots) * c->bs +
			       (uint64_t)io->fill_first * SECT;
			cache_trace(CT_PROMOTE, 0, io->lun, io->slot, io->src_slot, io->block,
			            io->fill_first, io->fill_nsect);
		} else {
			if (req->run_of[k] < 0)
				continue;
			struct eng_sub *run = &req->subs[req->run_of[k]];
			uint64_t b0 = blk_start(c, io->block);
			uint64_t fs = b0 + (uint64_t)io->fill_first * SECT;
			uint64_t fe = fs + (uint64_t)io->fill_nsect * SECT;
			/* Only whole sectors the origin read returned (the LUN end may cut it). */
			fs = HL_MAX(fs, run->lo);
			fe = HL_MIN(fe, run->hi);
			if (fe <= fs)
				continue;
			fs = b0 + HL_DIV_ROUND_UP(fs - b0, (uint64_t)SECT) * SECT;
			fe = b0 + (fe - b0) / SECT * SECT;
			if (fe <= fs)
				continue;
			io->fill_first = (uint16_t)((fs - b0) / SECT);
			io->fill_nsect = (uint16_t)((fe - fs) / SECT);
			data = run->buf + (fs - run->lo);
		}
		if (engine_fill_prepare(req, io, k, data, false, &w)) {
			req->iof[k] = IOF_QUEUED;
			barrier |= io->meta_barrier != 0;
		} else if (w) {
			req->iof[k] = IOF_WRITTEN;
		}
	}
	engine_fills_start(req, first_fill, barrier);
}

#define LOOKUP_SPIN_NS 100000 /* a read spins this long for the lock before it sleeps */

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield");
#endif
}

/*
 * The cache lock for a read's lookup, and how long the read waited for it
 * (stats read_lock_wait_max_us: what a hit pays for the other holders; the
 * clock is read only when the lock is taken). The holders keep it tens of
 * microseconds (a restore batch: cache_meta.c), so a read spins a little
 * before it sleeps: woken from a sleep, it waits for a CPU as well, on a
 * loaded machine milliseconds. read_waiters tells the restore that a read
 * waits (it gives way: cache_meta.c, give_way).
 */
static void lookup_lock(struct hl_cache *c)
{
	uint64_t t0, w, max;

	if (!pthread_mutex_trylock(&c->lock))
		return;
	t0 = hl_now_ns();
	atomic_fetch_add(&c->read_waiters, 1);
	for (;;) {
		for (int i = 0; i < 64; i++)
			cpu_relax();
		if (!pthread_mutex_trylock(&c->lock))
			break;
		if (hl_now_ns() - t0 > LOOKUP_SPIN_NS) {
			pthread_mutex_lock(&c->lock);
			break;
		}
	}
	atomic_fetch_sub(&c->read_waiters, 1);
	w = hl_now_ns() - t0;
	if (w > 1000000)
		atomic_fetch_add(&c->read_waits_over_1ms, 1);
	max = atomic_load(&c->read_wait_max_ns);
	while (w > max && !atomic_compare_exchange_weak(&c->read_wait_max_ns, &max, w))
		;
}

static void read_done(struct eng_req *req)
{
	struct hl_cache *c = req->c;

	if (req->status) {
		pthread_mutex_lock(&c->lock);
		for (uint32_t k = 0; k < req->nios; k++)
			hl_cache_core_io_end(c->core, req->ent->id, &req->ios[k], false);
		if (req->status != -ENOMEM)
			hl_cache_core_invalidate(c->core, req->ent->id, req->off, req->len);
		pthread_mutex_unlock(&c->lock);
		atomic_fetch_add(&c->changes, 1);
		if (req->status != -ENOMEM)
			HL_ERR_RL("cache", "cache %s: disk %s: origin read at %llu+%llu: %s",
			          c->name, req->ent->name, (unsigned long long)req->off,
			          (unsigned long long)req->len, strerror(-req->status));
		/* A prefetch that failed warmed nothing; that is not an error. */
		engine_reply(req, req->op == HL_IO_READ ? req->status : 0);
		engine_req_free(req);
		return;
	}
	engine_reply(req, 0);
	read_fill_phase(req);
}

/* Copy the part of [lo, hi) (held in buf) that the caller asked for into its buffers. */
static void copy_out(struct eng_req *req, const uint8_t *buf, uint64_t lo, uint64_t hi)
{
	uint64_t s = HL_MAX(lo, req->off), e = HL_MIN(hi, req->off + req->len);

	if (e <= s || req->no_data)
		return;
	buf_to_iov(req->uio->iov, req->uio->iovcnt, s - req->off, buf + (s - lo), e - s);
}

/* A planned hit could not be read from the cache device: read its part from the origin. */
static void hit_retry(struct eng_req *req, struct eng_sub *s, int rc)
{
	struct hl_cache *c = req->c;
	uint64_t b0 = blk_start(c, req->ios[s->k].block);
	uint64_t bz = blk_start(c, req->ios[s->k + s->nk - 1].block);

	engine_dev_error(c, req->ent, rc);
	cnt_add(&c->st.hit_retries, 1);
	cnt_add(&req->ent->st.hit_retries, 1);
	req->all_hit = false;
	s->kind = SUB_RETRY;
	s->lo = HL_MAX(req->off, b0);
	s->hi = HL_MIN(req->off + req->len, bz + c->bs);
	/*
	 * s->buf holds the blocks' requested sectors, which cover [lo, hi); a
	 * direct hit's sectors are exactly [lo, hi), so buf is where they go.
	 */
	s->iov.iov_base = s->buf;
	rc = engine_sub_submit(s, req->co->inner, HL_IO_READ, s->lo, s->hi - s->lo);
	if (rc && !req->status)
		req->status = rc;
}

/* A stitched piece of valid sectors could not be read from the cache device: use the origin. */
static void piece_retry(struct eng_req *req, struct eng_sub *s, int rc)
{
	engine_dev_error(req->c, req->ent, rc);
	cnt_add(&req->c->st.hit_retries, 1);
	cnt_add(&req->ent->st.hit_retries, 1);
	s->kind = SUB_RETRY;
	s->hi = HL_MIN(s->hi, req->co->inner->size); /* a last sector cut by the LUN end */
	rc = engine_sub_submit(s, req->co->inner, HL_IO_READ, s->lo, s->hi - s->lo);
	if (rc && !req->status)
		req->status = rc;
}

/*
 * Streaming a big hit (docs/cache-engine.md, "Streaming a big hit"): a
 * READ whose every block is a HIT, for a caller that takes partial data
 * (uio->ready), is read in chunks of about hit_chunk() bytes, one device
 * read each, all started at once; as each completes its bytes are final
 * in the caller's buffer (a hit has no check at the end of the read: what
 * makes it right is decided at the plan, under the mutex, and the pin
 * keeps the slot's block until io_end, after the reply). The caller is told
 * how far the data is final from the start: up to the first chunk not yet
 * final (RAM-window hits between chunks were copied at submit). A chunk
 * whose device read fails is re-read from the origin (hit_retry, the same
 * sub): the bytes from it on wait until that read is in.
 */
#define HIT_CHUNK_DEFAULT (256u << 10)
/* Report only steps this long (a read over scattered slots has a sub per block). */
#define STREAM_MIN_STEP (64u << 10)

/* The chunk size: HOTLUN_HIT_CHUNK (bytes, 0: no streaming), read once. */
static uint64_t hit_chunk(void)
{
	static _Atomic int64_t v = -1;
	int64_t x = atomic_load_explicit(&v, memory_order_relaxed);

	if (x < 0) {
		const char *e = getenv("HOTLUN_HIT_CHUNK");
		x = e && *e ? (int64_t)strtoull(e, NULL, 10) : HIT_CHUNK_DEFAULT;
		if (x < 0 || x > (int64_t)HL_CACHE_MAX_BLOCK * 64)
			x = HIT_CHUNK_DEFAULT;
		atomic_store_explicit(&v, x, memory_order_relaxed);
	}
	return (uint64_t)x;
}

/* Blocks in a chunk of a streamed read: whole blocks, at least one. */
static uint32_t stream_blocks(const struct hl_cache *c)
{
	return HL_MAX(1u, (uint32_t)(hit_chunk() >> c->shift));
}

/* Stream this read? Under c->lock, right after the plan. */
static bool stream_wanted(const struct eng_req *req, const struct hl_origin_io *uio)
{
	uint64_t chunk = hit_chunk();

	if (!uio->ready || req->no_data || !chunk || req->len <= HL_MAX(chunk, req->c->bs) ||
	    req->nios < req->nb)
		return false;
	for (uint32_t k = 0; k < req->nb; k++)
		if (req->ios[k].kind != HL_CACHE_IO_HIT)
			return false;
	return true;
}

/* First LUN byte of a streamed read's sub (a HIT, or the RETRY it became). */
static uint64_t stream_sub_lo(const struct eng_req *req, const struct eng_sub *s)
{
	const struct hl_cache_io *io = &req->ios[s->k];

	if (s->kind == SUB_RETRY)
		return s->lo;
	return blk_start(req->c, io->block) + (uint64_t)io->first * SECT;
}

/* A sub of a streamed read is final: tell the caller how far the data is. */
static void stream_advance(struct eng_req *req)
{
	uint64_t ready;

	if (req->status || req->replied)
		return;
	while (req->rnext < req->nsub && req->subs[req->rnext].fin)
		req->rnext++;
	if (req->rnext == req->nsub)
		return; /* all of it: the reply follows */
	ready = stream_sub_lo(req, &req->subs[req->rnext]);
	ready = ready > req->off ? ready - req->off : 0;
	if (ready < req->rsent + STREAM_MIN_STEP || ready >= req->len)
		return;
	if (!req->rsent) {
		cnt_add(&req->c->st.hit_streams, 1);
		cnt_add(&req->ent->st.hit_streams, 1);
	}
	req->rsent = ready;
	req->uio->ready(req->uio, ready);
}

/* A HIT, RUN, RETRY or PHIT sub finished: copy its data out, or retry from the origin. */
static void read_sub_done(struct eng_sub *s, int result)
{
	struct eng_req *req = s->req;
	struct hl_cache *c = req->c;

	switch (s->kind) {
	case SUB_HIT:
		if (result) {
			hit_retry(req, s, result);
		} else {
			struct hl_cache_io *cio = &req->ios[s->k];
			uint64_t lo = blk_start(c, cio->block) + (uint64_t)cio->first * SECT;
			uint64_t hi = lo + s->io.length;
			/* Sectors whose current data is in the RAM update buffer. */
			engine_ub_overlay(req, s->buf, lo, hi);
			if (!s->direct)
				copy_out(req, s->buf, lo, hi);
			s->fin = true;
		}
		break;
	case SUB_RETRY:
	case SUB_RUN:
		if (result) {
			if (!req->status)
				req->status = result;
		} else {
			if (!s->direct)
				copy_out(req, s->buf, s->lo, s->hi);
			s->fin = true;
		}
		break;
	case SUB_PHIT:
		if (result) {
			piece_retry(req, s, result);
		} else {
			engine_ub_overlay(req, s->buf, s->lo, s->hi);
			copy_out(req, s->buf, s->lo, s->hi);
		}
		break;
	default:
		break;
	}
	if (req->stream)
		stream_advance(req);
}

/*
 * How many hits from ios[k] on are adjacent on the device as on the LUN
 * (slot + 1 for block + 1, each ending where the next begins), so one
 * device read covers them: runs of a fill stay adjacent because free slots
 * are taken lowest first (cache_part_find_free).
 */
static uint32_t hit_run(const struct eng_req *req, uint32_t k)
{
	const struct hl_cache *c = req->c;
	uint32_t spb = c->bs / SECT, n = 1;

	while (k + n < req->nb) {
		const struct hl_cache_io *a = &req->ios[k + n - 1], *b = &req->ios[k + n];
		if (b->kind != HL_CACHE_IO_HIT || b->ram || b->block != a->block + 1 ||
		    b->slot != a->slot + 1 || b->first != 0 || (uint32_t)a->first + a->nsect != spb)
			break;
		n++;
	}
	return n;
}

/* Hits ios[k..k+n-1] (adjacent, hit_run) with one cache-device read. */
static void start_hit(struct eng_req *req, uint32_t k, uint32_t n)
{
	struct hl_cache *c = req->c;
	struct hl_cache_io *io = &req->ios[k], *z = &req->ios[k + n - 1];
	uint64_t lo = blk_start(c, io->block) + (uint64_t)io->first * SECT;
	uint64_t bytes = blk_start(c, z->block) + (uint64_t)(z->first + z->nsect) * SECT - lo;
	struct eng_sub *s = engine_sub_new(req, SUB_HIT, k, read_sub_done);
	int rc = -EIO;

	if (!s) {
		req->status = -ENOMEM;
		return;
	}
	s->nk = n;
	/* Most hits are whole sectors of the request: read them straight into its buffer. */
	if (!req->no_data && lo >= req->off && lo + bytes <= req->off + req->len)
		s->buf = iov_span(req->uio->iov, req->uio->iovcnt, lo - req->off, bytes);
	s->direct = s->buf != NULL;
	if (!s->buf && !(s->buf = dio_alloc(bytes))) {
		req->status = -ENOMEM;
		return;
	}
	s->own = !s->direct;
	s->iov.iov_base = s->buf;
	if (!atomic_load(&c->failed))
		rc = engine_sub_submit(s, c->data, HL_IO_READ,
		                       c->layout.data_off + (uint64_t)io->slot * c->bs +
		                           (uint64_t)io->first * SECT,
		                       bytes);
	if (rc)
		hit_retry(req, s, rc);
}

/* Is sector p (LUN byte, sector-aligned) of the request valid in its PARTIAL block? */
static bool sect_cached(const struct eng_req *req, uint64_t p)
{
	uint64_t s0 = req->off / SECT, i;
	uint64_t k;

	if (p < s0 * SECT || p >= req->off + req->len)
		return false;
	k = (p >> req->c->shift) - req->ios[0].block;
	if (k >= req->nb || req->ios[k].kind != HL_CACHE_IO_PARTIAL)
		return false;
	i = p / SECT - s0;
	return (req->vmap[i / 8] >> (i % 8)) & 1;
}

/* Valid sectors [p, q) of one PARTIAL block, into buf: from the RAM window or the device. */
static void start_piece_hit(struct eng_req *req, uint8_t *buf, uint64_t p, uint64_t q)
{
	struct hl_cache *c = req->c;
	uint32_t k = (uint32_t)((p >> c->shift) - req->ios[0].block);
	struct hl_cache_io *io = &req->ios[k];
	uint64_t in_blk = p - blk_start(c, io->block);
	struct eng_sub *s = engine_sub_new(req, SUB_PHIT, k, read_sub_done);
	int rc = -EIO;

	if (!s) {
		req->status = -ENOMEM;
		return;
	}
	s->buf = buf;
	s->lo = p;
	s->hi = q;
	s->iov.iov_base = buf;
	if (io->ram) {
		/* Pinned RAM window slot: copy now. */
		if (io->slot >= c->nslots && io->slot - c->nslots < c->nwin) {
			memcpy(buf, c->window + (uint64_t)(io->slot - c->nslots) * c->bs + in_blk,
			       q - p);
			copy_out(req, buf, p, q);
			s->kind = SUB_SKIPPED;
			return;
		}
	} else if (!atomic_load(&c->failed)) {
		rc = engine_sub_submit(s, c->data, HL_IO_READ,
		                       c->layout.data_off + (uint64_t)io->slot * c->bs + in_blk,
		                       q - p);
	}
	if (rc)
		piece_retry(req, s, rc);
}

/*
 * A run [lo, hi) with PARTIAL blocks, stitched: the valid sectors of the
 * request come from the cache (one read per contiguous extent in a slot),
 * every other extent from the origin, all into one bounce buffer (a SUB_BUF
 * that the fills use like a RUN's). Valid sectors inside a fill's range are
 * written back with what the cache held: a write since the plan would have
 * made the fill stale.
 */
static void start_stitched(struct eng_req *req, uint32_t ka, uint32_t kb, uint64_t lo, uint64_t hi)
{
	struct hl_cache *c = req->c;
	struct eng_sub *b = engine_sub_new(req, SUB_BUF, ka, NULL);
	uint8_t *buf = dio_alloc(HL_ALIGN_UP(hi - lo, (uint64_t)SECT));

	if (!b || !buf) {
		free(buf);
		req->status = -ENOMEM;
		return;
	}
	b->buf = buf;
	b->own = true;
	b->lo = lo;
	b->hi = hi;
	for (uint32_t k = ka; k <= kb; k++)
		req->run_of[k] = (int32_t)(b - req->subs);
	for (uint64_t p = lo, q; p < hi && !req->status; p = q) {
		bool cached = sect_cached(req, p);

		for (q = p + SECT; q < hi && sect_cached(req, q) == cached; q += SECT)
			if (cached && (q >> c->shift) != (p >> c->shift))
				break; /* another slot */
		if (cached) {
			start_piece_hit(req, buf + (p - lo), p, q);
		} else {
			struct eng_sub *s = engine_sub_new(req, SUB_RUN, ka, read_sub_done);
			int rc;

			if (!s) {
				req->status = -ENOMEM;
				return;
			}
			q = HL_MIN(q, hi);
			s->buf = buf + (p - lo);
			s->lo = p;
			s->hi = q;
			s->iov.iov_base = s->buf;
			rc = engine_sub_submit(s, req->co->inner, HL_IO_READ, p, q - p);
			if (rc && !req->status)
				req->status = rc;
		}
	}
}

/*
 * The valid sectors of the request's PARTIAL blocks into req->vmap (under
 * the cache mutex, right after the plan). @return how many sectors the
 * PARTIAL blocks have in the request (0: nothing to stitch).
 */
static uint32_t vmap_fill(struct eng_req *req)
{
	struct hl_cache *c = req->c;
	uint64_t s0 = req->off / SECT;
	uint32_t spb = c->bs / SECT, total = 0;

	for (uint32_t k = 0; k < req->nb && k < req->nios; k++) {
		struct hl_cache_io *io = &req->ios[k];
		uint8_t v[32];

		if (io->kind != HL_CACHE_IO_PARTIAL)
			continue;
		if (hl_cache_core_peek(c->core, req->ent->id, io->block, v) != io->slot)
			memset(v, 0, sizeof(v)); /* cannot be: the slot is pinned */
		for (uint32_t i = io->first; i < (uint32_t)io->first + io->nsect; i++) {
			uint64_t x = io->block * spb + i - s0;
			if ((v[i / 8] >> (i % 8)) & 1)
				req->vmap[x / 8] |= (uint8_t)(1u << (x % 8));
			else
				req->vmap[x / 8] &= (uint8_t) ~(1u << (x % 8));
		}
		total += io->nsect;
	}
	return total;
}

/* One origin read for blocks ka..kb (none a hit), widened to the sectors their fills need. */
static void start_run(struct eng_req *req, uint32_t ka, uint32_t kb)
{
	struct hl_cache *c = req->c;
	struct hl_cache_io *a = &req->ios[ka], *z = &req->ios[kb];
	uint64_t lo = HL_MAX(req->off, blk_start(c, a->block));
	uint64_t hi = HL_MIN(req->off + req->len, blk_start(c, z->block + 1));
	struct eng_sub *s;
	int rc;

	if (io_fills(a))
		lo = HL_MIN(lo, blk_start(c, a->block) + (uint64_t)a->fill_first * SECT);
	if (io_fills(z))
		hi = HL_MAX(hi, blk_start(c, z->block) +
		                    (uint64_t)(z->fill_first + z->fill_nsect) * SECT);
	lo = lo / SECT * SECT;
	hi = HL_ALIGN_UP(hi, (uint64_t)SECT);
	hi = HL_MIN(hi, req->co->inner->size);
	for (uint32_t k = ka; k <= kb; k++) {
		if (req->ios[k].kind == HL_CACHE_IO_PARTIAL) {
			start_stitched(req, ka, kb, lo, hi);
			return;
		}
	}
	s = engine_sub_new(req, SUB_RUN, ka, read_sub_done);
	if (!s || !(s->buf = dio_alloc(hi - lo))) {
		req->status = -ENOMEM;
		return;
	}
	s->own = true;
	s->lo = lo;
	s->hi = hi;
	for (uint32_t k = ka; k <= kb; k++)
		req->run_of[k] = (int32_t)(s - req->subs);
	s->iov.iov_base = s->buf;
	rc = engine_sub_submit(s, req->co->inner, HL_IO_READ, lo, hi - lo);
	if (rc && !req->status)
		req->status = rc;
}

/* READ and PREFETCH (a read whose data nobody wants: it only warms the cache). */
static int read_start(struct hl_origin *o, struct hl_origin_io *uio, bool shadow)
{
	struct co_priv *co = co_of(o);
	struct hl_cache *c = co->c;
	uint32_t nb = hl_cache_core_nblocks(c->core, uio->offset, uio->length);
	uint32_t partial_sect = 0;
	bool partial = false;
	struct eng_req *req;
	int n;

	uint32_t maxios = hl_cache_read_max_ios(nb), extra = 0;
	/*
	 * The lookup plans into this thread's scratch array (room for every
	 * promotion the read may carry); the request is sized for a read that
	 * plans none (all hits), and made again with room for the promotions
	 * only when the lookup planned some. subs: a block's hit and fill or
	 * run at most, and a copy per promotion.
	 */
	struct hl_cache_io *ios = engine_ios_scratch(maxios);
	if (!ios)
		return -ENOMEM;
	req = engine_req_new(o, uio, nb, nb, 2 * nb + 1);
	if (!req)
		return -ENOMEM;
	lookup_lock(c);
	n = shadow
	        ? hl_cache_core_read_shadow(c->core, co->ent->id, uio->offset, uio->length, ios,
	                                    maxios)
	        : hl_cache_core_read(c->core, co->ent->id, uio->offset, uio->length, ios, maxios);
	if (n > (int)nb) {
		extra = (uint32_t)n - nb;
		struct eng_req *big = engine_req_new(o, uio, nb, (uint32_t)n, 2 * nb + extra + 1);
		if (big) {
			big->t0 = req->t0;
			engine_req_free(req);
			req = big;
		} else {
			for (int k = 0; k < n; k++)
				hl_cache_core_io_end(c->core, co->ent->id, &ios[k], false);
			n = -ENOMEM;
		}
	}
	if (n > 0)
		memcpy(req->ios, ios, (size_t)n * sizeof(*ios));
	req->no_data = uio->op != HL_IO_READ;
	for (int k = 0; k < n && k < (int)nb; k++) {
		struct hl_cache_io *io = &req->ios[k];
		if (io_fills(io) && write_overlaps(c, co->inner, co->ent, io->block))
			io->fill_nsect = 0; /* the origin may still return pre-write data */
		if (io->kind == HL_CACHE_IO_PARTIAL)
			partial = true;
		if (io->kind == HL_CACHE_IO_HIT || io->kind == HL_CACHE_IO_PARTIAL)
			req->cached = true;
	}
	req->nios = n > 0 ? (uint32_t)n : 0;
	if (partial)
		partial_sect = vmap_fill(req);
	req->stream = n > 0 && stream_wanted(req, uio);
	if (n > 0 && engine_ub_read_plan(req)) {
		/* No memory for the buffered sectors' copies: nothing was started. */
		for (int k = 0; k < n; k++)
			hl_cache_core_io_end(c->core, co->ent->id, &req->ios[k], false);
		n = -ENOMEM;
	}
	pthread_mutex_unlock(&c->lock);
	if (n < 0) {
		engine_req_free(req);
		return n == -ENOMEM ? -ENOMEM : -EINVAL;
	}
	if (partial_sect) {
		/* Stitched runs: one sub per extent besides the usual ones (see start_stitched). */
		uint32_t need = 3 * nb + extra + 1 + partial_sect;
		struct eng_sub *subs = need > req->maxsub ? calloc(need, sizeof(*subs)) : NULL;
		if (subs) {
			req->subs = subs;
			req->subs_heap = true;
			req->maxsub = need;
		}
	}
	req->pending = 1;
	req->inside_submit = true;
	req->all_hit = true;
	req->phase_done = read_done;
	for (uint32_t k = 0; k < nb; k++)
		req->run_of[k] = -1;
	for (uint32_t k = 0; k < nb && !req->status;) {
		struct hl_cache_io *io = &req->ios[k];
		if (io->kind == HL_CACHE_IO_HIT) {
			if (io->ram) {
				/* Pinned RAM window slot: copy now. */
				uint64_t lo = blk_start(c, io->block) + (uint64_t)io->first * SECT;
				copy_out(req,
				         c->window + (uint64_t)(io->slot - c->nslots) * c->bs +
				             (uint64_t)io->first * SECT,
				         lo, lo + (uint64_t)io->nsect * SECT);
				k++;
			} else {
				uint32_t run = hit_run(req, k);
				if (req->stream)
					run = HL_MIN(run, stream_blocks(c));
				start_hit(req, k, run);
				k += run;
			}
			continue;
		}
		req->all_hit = false;
		uint32_t kb = k;
		while (kb + 1 < nb && req->ios[kb + 1].kind != HL_CACHE_IO_HIT)
			kb++;
		start_run(req, k, kb);
		k = kb + 1;
	}
	engine_phase_end(req);
	req->inside_submit = false;
	return 0;
}

int engine_read(struct hl_origin *o, struct hl_origin_io *uio)
{
	return read_start(o, uio, false);
}

int engine_read_shadow(struct hl_origin *o, struct hl_origin_io *uio)
{
	return read_start(o, uio, true);
}
