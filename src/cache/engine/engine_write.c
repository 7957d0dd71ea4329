/*
 * engine_write.c - WRITE, DISCARD, WRITE ZEROES and COMPARE AND WRITE
 * through the cache (write_begin, a metadata flush first when a record may
 * still claim the range, the origin write, write_end, the reply), and the
 * updates of the cached blocks it wrote: a RAM window slot at once, the
 * others prepared here and written after the reply by engine_fill.c.
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

/*
 * Update RAM window slot of io with the written bytes [wlo, whi) (the
 * slot's other bytes, partly written sectors included, stay). @return true
 * when written (end io with written = true).
 */
static bool ram_update(struct eng_req *req, struct hl_cache_io *io, uint64_t wlo, uint64_t whi)
{
	struct hl_cache *c = req->c;
	bool ok;

	if (io->slot < c->nslots || io->slot - c->nslots >= c->nwin)
		return false;
	pthread_mutex_lock(&c->lock);
	ok = hl_cache_core_io_start(c->core, req->ent->id, io);
	pthread_mutex_unlock(&c->lock);
	if (!ok)
		return false;
	cache_trace(CT_RAM, 1, req->ent->id, io->slot, 0, io->block, wlo, whi - wlo);
	iov_to_buf(req->uio->iov, req->uio->iovcnt, wlo - req->off,
	           c->window + (uint64_t)(io->slot - c->nslots) * c->bs +
	               (wlo - blk_start(c, io->block)),
	           whi - wlo);
	return true;
}

/*
 * Queue the update of device slot io into the RAM update buffer: a FILL sub
 * (s->ub) holding the fill range with the written bytes [wlo, whi); its
 * partly written sectors are merged when it starts (rmw_start), and
 * fill_write puts it in the store instead of on the device. @return true
 * when queued.
 */
static bool ub_prepare(struct eng_req *req, struct hl_cache_io *io, uint32_t k, uint64_t wlo,
                       uint64_t whi)
{
	struct hl_cache *c = req->c;
	uint64_t fs, fe;
	struct eng_sub *s;

	if (io->slot >= c->nslots || atomic_load(&c->failed))
		return false;
	engine_fill_range(req, io, &fs, &fe);
	s = engine_sub_new(req, SUB_FILL, k, engine_fill_sub_done);
	if (!s)
		return false;
	s->buf = dio_alloc(fe - fs);
	if (!s->buf) {
		req->nsub--;
		return false;
	}
	s->own = true;
	s->ub = true;
	s->iov.iov_base = s->buf;
	iov_to_buf(req->uio->iov, req->uio->iovcnt, wlo - req->off, s->buf + (wlo - fs), whi - wlo);
	return true;
}

/*
 * A write of [off, off + len) failed: remember the range as unsettled
 * (map_ent.unsettled), with the wseq of the last write begun so far: only
 * a write that begins later settles it; with lands (the origin said
 * may_land), no write does, only hl_origin_unfenced() at 0. A range kept
 * that holds the new one is enough only when no write began since it was
 * added and it is kept as long (lands too, or the new one has not); else
 * the new one is kept beside it (the writes in flight now settle the older
 * range, not the new one). When the list is full, the new range and every
 * range kept become one that covers them all, with the new seq, landing if
 * any was: more blocks go uncached, none is forgotten. Under lock.
 */
static void unsettled_add(const struct hl_cache *c, struct map_ent *e, uint64_t off,
                          uint64_t len, bool lands)
{
	uint64_t end = off + len;

	for (uint32_t i = 0; i < e->nunsettled; i++) {
		if (e->unsettled[i].off <= off && end <= e->unsettled[i].end &&
		    e->unsettled[i].seq == e->wseq && (e->unsettled[i].lands || !lands))
			return;
	}
	if (e->nunsettled == ENG_UNSETTLED_MAX) {
		for (uint32_t i = 0; i < e->nunsettled; i++) {
			off = HL_MIN(off, e->unsettled[i].off);
			end = HL_MAX(end, e->unsettled[i].end);
			lands |= e->unsettled[i].lands;
		}
		e->nunsettled = 0;
		HL_WARN_RL("cache",
		           "cache %s: disk %s: more than %d failed origin writes: bytes %llu-%llu "
		           "are read from the origin, uncached, until writes cover them or a restart",
		           c->name, e->name, ENG_UNSETTLED_MAX, (unsigned long long)off,
		           (unsigned long long)end);
	}
	e->unsettled[e->nunsettled].off = off;
	e->unsettled[e->nunsettled].end = end;
	e->unsettled[e->nunsettled].seq = e->wseq;
	e->unsettled[e->nunsettled].lands = lands;
	e->nunsettled++;
}

/*
 * A write of ours to [off, off + len) succeeded, and began with wseq: the
 * ranges of writes that failed before it began are settled where it
 * wrote, for it is the last completed write there: the origin answered
 * the failed one before this one was sent, and when it did not (lands:
 * a copy of it may still be out, e.g. on an iscsi:// session that was
 * lost and not reinstated yet) the range is not this write's to settle.
 * A failed write that was in flight beside it may still be run after it:
 * its range (seq >= wseq) stays. Of the others, the ranges it covers are
 * settled; one it covers an end of is cut; one it lies inside of stays
 * whole (more uncached blocks, never a wrong one). Under lock.
 */
static void unsettled_clear(struct map_ent *e, uint64_t off, uint64_t len, uint64_t wseq)
{
	uint64_t end = off + len;

	for (uint32_t i = 0; i < e->nunsettled;) {
		uint64_t *lo = &e->unsettled[i].off, *hi = &e->unsettled[i].end;

		if (e->unsettled[i].seq >= wseq || e->unsettled[i].lands) {
			i++;
			continue;
		}
		if (off <= *lo && *hi <= end) {
			e->unsettled[i] = e->unsettled[--e->nunsettled];
			continue;
		}
		if (off <= *lo && *lo < end)
			*lo = end;
		else if (off < *hi && *hi <= end)
			*hi = off;
		i++;
	}
}

/*
 * Whether a write that failed with result may still be run by the origin:
 * not when the origin said it refused it (a miscompare, an unsupported or
 * invalid command, a write-protected or missing LU: nothing was written).
 * Any other error may be a command the origin still holds (an iscsi://
 * session lost or timed out, a librados op timeout).
 */
static bool outcome_unknown(int result)
{
	return result && result != -EILSEQ && result != -EOPNOTSUPP && result != -EINVAL &&
	       result != -EROFS && result != -ENXIO;
}

/*
 * Forget the ranges kept for failed writes that may still land once the
 * origin says none can (hl_origin_unfenced() is 0): each was counted there
 * before its completion reached us, so a 0 read after the range was added
 * covers its write. Under lock.
 */
static void unsettled_landed(struct map_ent *e, struct hl_origin *inner)
{
	bool any = false;

	for (uint32_t i = 0; i < e->nunsettled && !any; i++)
		any = e->unsettled[i].lands;
	if (!any || hl_origin_unfenced(inner))
		return;
	for (uint32_t i = 0; i < e->nunsettled;) {
		if (e->unsettled[i].lands)
			e->unsettled[i] = e->unsettled[--e->nunsettled];
		else
			i++;
	}
}

bool engine_unsettled(struct map_ent *e, struct hl_origin *inner, uint64_t off, uint64_t len)
{
	unsettled_landed(e, inner);
	for (uint32_t i = 0; i < e->nunsettled; i++) {
		if (e->unsettled[i].off < off + len && off < e->unsettled[i].end)
			return true;
	}
	return false;
}

/*
 * Another write in flight on the disk overlaps this one: the origin may run
 * the two in either order and answer them in either order (an io_uring
 * file, a SAN's SIMPLE tasks), so which bytes it keeps is not known here.
 * The blocks they share get no update from this write (the earlier write
 * loses its own to the generation this write_begin moved on): they are
 * read from the origin next. Under lock, before req joins the list.
 */
static void overlap_no_update(struct eng_req *req, struct map_ent *e, uint32_t nios)
{
	const struct hl_cache *c = req->c;
	struct eng_req *w;

	hl_list_for_each_entry(w, &e->wlist, wlink)
	{
		uint64_t lo = HL_MAX(w->off, req->off);
		uint64_t hi = HL_MIN(w->off + w->len, req->off + req->len);

		for (uint32_t k = 0; lo < hi && k < nios; k++) {
			uint64_t b = blk_start(c, req->ios[k].block);
			if (b < hi && lo < b + c->bs)
				req->ios[k].fill_nsect = 0;
		}
	}
}

/* The origin write finished (req->status): end the core's ios, update slots, reply. */
static void write_done(struct eng_req *req)
{
	struct hl_cache *c = req->c;
	uint16_t lun = req->ent->id;
	int result = req->status;
	uint32_t first_fill = req->nsub;

	pthread_mutex_lock(&c->lock);
	if (req->in_wlist) {
		hl_list_del(&req->wlink);
		req->in_wlist = false;
	}
	/*
	 * A failed write whose outcome is unknown may still be run by the
	 * origin later: its range gets no fills until a write of ours that
	 * began after this failure succeeds there (engine_unsettled,
	 * read_start), or, when the origin says a copy of it may still be
	 * out (may_land), until the origin says none can run any more. One
	 * in flight beside it settles nothing: the origin may run the failed
	 * one after it.
	 */
	if (outcome_unknown(result) || req->subs[0].io.may_land)
		unsettled_add(c, req->ent, req->off, req->len, req->subs[0].io.may_land);
	else if (!result)
		unsettled_clear(req->ent, req->off, req->len, req->wseq);
	for (uint32_t k = 0; k < req->nios; k++) {
		struct hl_cache_io *io = &req->ios[k];

		if (req->op != HL_IO_WRITE)
			io->fill_nsect = 0; /* discard, zeroes, CAW: the range is dropped */
		/* a failed write that may still land here, after this one: no update */
		if (io->fill_nsect && engine_unsettled(req->ent, req->co->inner,
		                                       blk_start(c, io->block), c->bs))
			io->fill_nsect = 0;
		hl_cache_core_write_end(c->core, lun, io, result == 0);
	}
	if (result)
		hl_cache_core_invalidate(c->core, lun, req->off, req->len);
	pthread_mutex_unlock(&c->lock);
	atomic_fetch_add(&c->changes, 1);
	if (req->op == HL_IO_COMPARE_AND_WRITE)
		req->uio->miscompare_offset = req->subs[0].io.miscompare_offset;
	req->uio->may_land = req->subs[0].io.may_land;
	if (result && !(req->op == HL_IO_COMPARE_AND_WRITE && result == -EILSEQ))
		HL_ERR_RL("cache", "cache %s: disk %s: origin %s at %llu+%llu: %s", c->name,
		          req->ent->name, req->op == HL_IO_WRITE ? "write" : "discard/zeroes",
		          (unsigned long long)req->off, (unsigned long long)req->len,
		          strerror(-result));

	/*
	 * Update mode: copy the new data of the cached blocks while the caller's
	 * buffer is ours. A sector the write covers only partly is in the fill
	 * range only if it was valid when the write began (rmw_head/rmw_tail):
	 * its old bytes are merged in after the reply (rmw_start), or at once
	 * in a RAM window slot, whose old bytes stay where they are.
	 */
	for (uint32_t k = 0; k < req->nios; k++) {
		struct hl_cache_io *io = &req->ios[k];
		uint64_t fs, fe, wlo, whi, sect[2];
		uint8_t *tmp;
		int nrmw;
		bool w;

		req->iof[k] = 0;
		if (!io->fill_nsect) {
			req->iof[k] = IOF_DONE; /* write_end finished it */
			continue;
		}
		engine_fill_range(req, io, &fs, &fe);
		nrmw = engine_rmw_sectors(req, io, sect);
		if (nrmw > (int)io->rmw_head + (int)io->rmw_tail)
			continue; /* a partly written sector the core did not know valid: never */
		wlo = HL_MAX(fs, req->off);
		whi = HL_MIN(fe, req->off + req->len);
		if (io->src_slot == HL_CACHE_IO_UB_SRC) {
			/* RAM update buffer: the new sectors go to the store after the reply. */
			if (ub_prepare(req, io, k, wlo, whi))
				req->iof[k] = IOF_QUEUED;
			continue;
		}
		if (io->ram) {
			if (ram_update(req, io, wlo, whi))
				req->iof[k] = IOF_WRITTEN;
			continue;
		}
		if (atomic_load(&c->failed) || !(tmp = dio_alloc(fe - fs)))
			continue;
		iov_to_buf(req->uio->iov, req->uio->iovcnt, wlo - req->off, tmp + (wlo - fs),
		           whi - wlo);
		if (engine_fill_prepare(req, io, k, tmp, true, &w))
			req->iof[k] = IOF_QUEUED;
		else if (w)
			req->iof[k] = IOF_WRITTEN;
	}
	engine_reply(req, result);
	/* The barrier of these slots was taken before the origin write. */
	engine_fills_start(req, first_fill, false);
}

/* The origin write finished: its result is the request's. */
static void write_sub_done(struct eng_sub *s, int result)
{
	s->req->status = result;
}

/* Issue the origin write. @return 0 or -errno (only when nothing was started). */
static int write_issue(struct eng_req *req)
{
	struct eng_sub *s = &req->subs[0];
	struct hl_origin_io *uio = req->uio;
	int rc;

	req->nsub = 1;
	memset(s, 0, sizeof(*s));
	s->req = req;
	s->kind = SUB_WRITE;
	s->done = write_sub_done;
	hl_origin_io_forward(&s->io, uio, engine_sub_cb, s);
	req->pending = 1;
	req->phase_done = write_done;
	engine_sub_timed(s);
	rc = hl_origin_submit(req->co->inner, &s->io);
	if (rc)
		req->pending = 0;
	return rc;
}

static void write_after_sync(struct meta_wait *w)
{
	struct eng_req *req = hl_container_of(w, struct eng_req, mw);
	int rc;

	if (w->rc && !atomic_load(&req->c->failed))
		engine_dev_error(req->c, req->ent, w->rc);
	rc = write_issue(req);
	if (rc) {
		req->status = rc;
		write_done(req);
	}
}

int engine_write(struct hl_origin *o, struct hl_origin_io *uio)
{
	struct co_priv *co = co_of(o);
	struct hl_cache *c = co->c;
	uint32_t nb = hl_cache_core_nblocks(c->core, uio->offset, uio->length);
	bool huge = uio->op != HL_IO_WRITE && nb > 16384;
	struct eng_req *req;
	bool sync = false;
	int n = 0, rc;

	if (!uio->length)
		return hl_origin_submit(co->inner, uio);
	/* subs: the origin write, one FILL per block, two SUB_RMW (head and tail sector). */
	req = engine_req_new(o, uio, 0, huge ? 0 : nb, huge ? 1 : nb + 3);
	if (!req)
		return -ENOMEM;
	pthread_mutex_lock(&c->lock);
	if (huge) {
		/* Too many blocks to list: drop the range, always flush the records first. */
		hl_cache_core_invalidate_yield(c->core, co->ent->id, uio->offset, uio->length,
		                               engine_lock_yield, c);
		sync = true;
	} else {
		/* The old bytes of a pending partly written sector: before write_begin drops it. */
		rc = engine_ub_write_plan(req);
		n = rc ? rc
		       : hl_cache_core_write_begin(c->core, co->ent->id, uio->offset, uio->length,
		                                   req->ios, nb);
		if (n == -ENOMEM) {
			pthread_mutex_unlock(&c->lock);
			engine_req_free(req);
			return -ENOMEM;
		}
		if (n < 0) {
			pthread_mutex_unlock(&c->lock);
			engine_req_free(req);
			return -EINVAL;
		}
		sync =
		    hl_cache_core_write_needs_sync(c->core, co->ent->id, uio->offset, uio->length);
		for (int k = 0; k < n; k++)
			sync |= req->ios[k].meta_barrier != 0;
		overlap_no_update(req, co->ent, (uint32_t)n);
	}
	req->nios = (uint32_t)n;
	req->wseq = ++co->ent->wseq;
	hl_list_add_tail(&co->ent->wlist, &req->wlink);
	req->in_wlist = true;
	pthread_mutex_unlock(&c->lock);
	if (n)
		atomic_fetch_add(&c->changes, 1);
	/*
	 * Once the device failed no sync comes, but the metadata thread's kill
	 * (map "failed", superblocks wiped) must be durable before the origin
	 * changes what the records may still claim: it runs before the wait ends.
	 */
	if (sync && !atomic_load(&c->killed) && engine_meta_wait(req, write_after_sync))
		return 0;
	rc = write_issue(req);
	if (rc) {
		/* Nothing started: undo and let the caller see the error (no callback). */
		pthread_mutex_lock(&c->lock);
		hl_list_del(&req->wlink);
		for (int k = 0; k < n; k++) {
			req->ios[k].fill_nsect = 0;
			hl_cache_core_write_end(c->core, co->ent->id, &req->ios[k], false);
		}
		pthread_mutex_unlock(&c->lock);
		req->replied = true;
		engine_req_free(req);
	}
	return rc;
}
