/*
 * engine_write.c - WRITE, DISCARD, WRITE ZEROES and COMPARE AND WRITE
 * through the cache (write_begin, a metadata flush first when a record may
 * still claim the range, the origin write, write_end, the reply), and what
 * runs after a reply: the fills of a read, the updates of a write (the RAM
 * window at once, device slots from bounce buffers), and the
 * read-modify-write of sectors a write covers only partly.
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

/* ------------------------------------------------------------------ */
/* Fills and updates (after the reply)                                */
/* ------------------------------------------------------------------ */

static void fills_done(struct eng_req *req)
{
	engine_req_free(req);
}

/* Write FILL sub s's data into its slot (io_start granted it); its completion ends the io. */
static void fill_write(struct eng_req *req, struct eng_sub *s)
{
	struct hl_cache *c = req->c;
	struct hl_cache_io *io = &req->ios[s->k];
	int rc;

	if (s->ub) {
		engine_ub_install(req, s); /* RAM only: no device write now */
		return;
	}
	rc = engine_sub_submit(s, c->data, HL_IO_WRITE,
	                       c->layout.data_off + (uint64_t)io->slot * c->bs +
	                           (uint64_t)io->fill_first * SECT,
	                       (uint64_t)io->fill_nsect * SECT);
	if (rc) {
		engine_dev_error(c, req->ent, rc);
		pthread_mutex_lock(&c->lock);
		hl_cache_core_io_end(c->core, req->ent->id, io, false);
		pthread_mutex_unlock(&c->lock);
	}
}

/* LUN bytes of the first and last sector of an update's fill range. */
static void fill_range(const struct eng_req *req, const struct hl_cache_io *io, uint64_t *fs,
                       uint64_t *fe)
{
	*fs = ((uint64_t)io->block << req->c->shift) + (uint64_t)io->fill_first * SECT;
	*fe = *fs + (uint64_t)io->fill_nsect * SECT;
}

/*
 * The sectors of an update's fill range the write covers only partly
 * (LUN bytes, at most two: head and tail). @return how many.
 */
static int rmw_sectors(const struct eng_req *req, const struct hl_cache_io *io, uint64_t out[2])
{
	uint64_t fs, fe, end = req->off + req->len;
	int n = 0;

	fill_range(req, io, &fs, &fe);
	if (fs < req->off || fs + SECT > end)
		out[n++] = fs;
	if (io->fill_nsect > 1 && fe > end)
		out[n++] = fe - SECT;
	return n;
}

/* One SUB_RMW read of FILL sub f finished (or never started): write f once all are merged. */
static void rmw_piece_done(struct eng_req *req, struct eng_sub *f)
{
	struct hl_cache *c = req->c;

	if (--f->rmw_wait)
		return;
	if (!f->rmw_failed && !atomic_load(&c->failed)) {
		fill_write(req, f);
		return;
	}
	pthread_mutex_lock(&c->lock);
	hl_cache_core_io_end(c->core, req->ent->id, &req->ios[f->k], false);
	pthread_mutex_unlock(&c->lock);
}

/* Merge the old bytes of sector r->lo (read into r->buf) that the write left alone into f. */
static void rmw_merge(struct eng_req *req, struct eng_sub *f, const struct eng_sub *r)
{
	uint64_t fs, fe, sp = r->lo, se = sp + SECT, end = req->off + req->len;
	uint8_t *dst;

	fill_range(req, &req->ios[f->k], &fs, &fe);
	dst = f->buf + (sp - fs);
	if (req->off > sp)
		memcpy(dst, r->buf, HL_MIN(req->off, se) - sp);
	if (end < se) {
		uint64_t a = HL_MAX(end, sp);
		memcpy(dst + (a - sp), r->buf + (a - sp), se - a);
	}
}

/*
 * An update whose partly written sector p was pending in the RAM update
 * buffer when the write began: its old bytes are the copy the write took
 * then (the device's are older). Merge them now. The update usually goes
 * into the buffer too; while a resize drains the buffer it goes to the
 * device. @return false when p was not pending (its device copy is the
 * current one: read it).
 */
static bool rmw_from_buffer(struct eng_req *req, struct eng_sub *f, uint64_t p)
{
	for (int i = 0; i < 2; i++) {
		if (req->rmw_old[i] && req->rmw_off[i] == p) {
			struct eng_sub old = {.lo = p, .buf = req->rmw_old[i]};
			rmw_merge(req, f, &old);
			f->rmw_wait--;
			return true;
		}
	}
	return false;
}

/*
 * Read-modify-write (docs/cache-policy.md, point 7): io_start already gave
 * FILL sub s the slot, so nothing else writes it until io_end, and the
 * partly written sectors were valid when the write began (the core's
 * rmw_head/rmw_tail): their old bytes on the device are the ones to keep.
 * A write that began since then bumped the slot's generation: io_end drops
 * the update whatever the device now holds. @return false when s has no
 * partly written sector (write it now).
 */
static bool rmw_start(struct eng_req *req, struct eng_sub *s)
{
	struct hl_cache *c = req->c;
	struct hl_cache_io *io = &req->ios[s->k];
	uint64_t sect[2];
	int n = rmw_sectors(req, io, sect);

	if (!n)
		return false;
	s->rmw_wait = (uint8_t)(n + 1); /* + our hold while submitting */
	for (int i = 0; i < n; i++) {
		struct eng_sub *r;
		int rc = -ENOMEM;

		if (rmw_from_buffer(req, s, sect[i]))
			continue;
		r = engine_sub_new(req, SUB_RMW, s->k);
		if (r && (r->buf = dio_alloc(SECT))) {
			r->own = true;
			r->lo = sect[i];
			r->peer = (uint32_t)(s - req->subs);
			r->iov.iov_base = r->buf;
			rc = atomic_load(&c->failed)
			         ? -EIO
			         : engine_sub_submit(r, c->data, HL_IO_READ,
			                             c->layout.data_off +
			                                 (uint64_t)io->slot * c->bs +
			                                 (sect[i] - blk_start(c, io->block)),
			                             SECT);
		}
		if (rc) {
			if (rc != -ENOMEM && !atomic_load(&c->failed))
				engine_dev_error(c, req->ent, rc);
			s->rmw_failed = true;
			rmw_piece_done(req, s);
		}
	}
	rmw_piece_done(req, s);
	return true;
}

/* Submit the FILL subs from index first on; the request is freed when they are done. */
static void fills_submit(struct eng_req *req, uint32_t first)
{
	struct hl_cache *c = req->c;
	uint16_t lun = req->ent->id;

	req->inside_submit = false;
	req->pending = 1;
	req->phase_done = fills_done;
	/* Claim the slots' data first: a stale io must not land after a current one. */
	pthread_mutex_lock(&c->lock);
	for (uint32_t i = first; i < req->nsub; i++) {
		struct eng_sub *s = &req->subs[i];
		if (s->kind != SUB_FILL)
			continue;
		if (atomic_load(&c->failed) ||
		    !hl_cache_core_io_start(c->core, lun, &req->ios[s->k])) {
			hl_cache_core_io_end(c->core, lun, &req->ios[s->k], false);
			s->kind = SUB_SKIPPED;
		}
	}
	pthread_mutex_unlock(&c->lock);
	for (uint32_t i = first, n = req->nsub; i < n; i++) {
		struct eng_sub *s = &req->subs[i];

		if (s->kind != SUB_FILL)
			continue;
		/* An update with partly written sectors first reads their old content. */
		if (req->op == HL_IO_WRITE && rmw_start(req, s))
			continue;
		fill_write(req, s);
	}
	engine_phase_end(req);
}

static uint32_t first_fill_sub(const struct eng_req *req)
{
	for (uint32_t i = 0; i < req->nsub; i++)
		if (req->subs[i].kind == SUB_FILL)
			return i;
	return req->nsub;
}

static void fills_after_barrier(struct meta_wait *w)
{
	struct eng_req *req = hl_container_of(w, struct eng_req, mw);

	if (w->rc && !atomic_load(&req->c->failed))
		engine_dev_error(req->c, req->ent, w->rc);
	fills_submit(req, first_fill_sub(req));
}

/*
 * Prepare writing sectors [fill_first, +fill_nsect) of io's slot from data
 * (valid until the request is freed, or copied here). A RAM window slot is
 * copied at once. @return true when a FILL sub is queued (its completion
 * calls io_end); otherwise *written says how the caller ends io.
 */
bool engine_fill_prepare(struct eng_req *req, struct hl_cache_io *io, uint32_t k, uint8_t *data,
                         bool data_owned, bool *written)
{
	struct hl_cache *c = req->c;
	struct eng_sub *s;

	*written = false;
	if (io->ram) {
		bool ok;
		if (io->slot < c->nslots || io->slot - c->nslots >= c->nwin)
			goto drop;
		pthread_mutex_lock(&c->lock);
		ok = hl_cache_core_io_start(c->core, req->ent->id, io);
		pthread_mutex_unlock(&c->lock);
		if (!ok) /* stale, or another io is writing the slot */
			goto drop;
		memcpy(c->window + (uint64_t)(io->slot - c->nslots) * c->bs +
		           (uint64_t)io->fill_first * SECT,
		       data, (size_t)io->fill_nsect * SECT);
		cache_trace(CT_RAM, 0, req->ent->id, io->slot, 0, io->block, io->fill_first,
		            io->fill_nsect);
		*written = true;
		goto drop;
	}
	if (atomic_load(&c->failed))
		goto drop;
	s = engine_sub_new(req, SUB_FILL, k);
	if (!s)
		goto drop;
	if (((uintptr_t)data & 4095) == 0) {
		s->buf = data;
		s->own = data_owned;
	} else {
		s->buf = dio_alloc((size_t)io->fill_nsect * SECT);
		if (!s->buf) {
			req->nsub--;
			goto drop;
		}
		s->own = true;
		memcpy(s->buf, data, (size_t)io->fill_nsect * SECT);
		if (data_owned)
			free(data);
	}
	s->iov.iov_base = s->buf;
	return true;
drop:
	if (data_owned)
		free(data);
	return false;
}

/* End (under the lock) every io that no FILL sub will end, then start the fills. */
void engine_fills_start(struct eng_req *req, uint32_t first_fill, bool barrier)
{
	struct hl_cache *c = req->c;
	bool any = false;

	pthread_mutex_lock(&c->lock);
	for (uint32_t k = 0; k < req->nios; k++) {
		struct hl_cache_io *io = &req->ios[k];
		if (req->iof[k] & IOF_QUEUED) {
			any = true;
			continue;
		}
		if (req->iof[k] & IOF_DONE)
			continue;
		if (req->iof[k] & IOF_WRITTEN)
			atomic_fetch_add(&c->changes, 1);
		hl_cache_core_io_end(c->core, req->ent->id, io, (req->iof[k] & IOF_WRITTEN) != 0);
	}
	pthread_mutex_unlock(&c->lock);
	if (!any) {
		engine_req_free(req);
		return;
	}
	if (barrier) {
		engine_meta_wait(req, fills_after_barrier);
		return;
	}
	fills_submit(req, first_fill);
}

/* A FILL or RMW sub finished: end the fill's io, or merge the old sector into its fill. */
void engine_fill_sub_done(struct eng_sub *s, int result)
{
	struct eng_req *req = s->req;
	struct hl_cache *c = req->c;

	switch (s->kind) {
	case SUB_FILL:
		/* A write past the end of a truncated file would extend it: look. */
		if (!result && engine_device_check_size(c))
			result = -EIO;
		if (result) {
			engine_dev_error(c, req->ent, result);
		} else {
			atomic_fetch_add(&c->changes, 1);
			if (req->ios[s->k].kind == HL_CACHE_IO_PROMOTE) {
				cnt_add(&c->st.promotions, 1);
				cnt_add(&req->ent->st.promotions, 1);
			}
		}
		pthread_mutex_lock(&c->lock);
		hl_cache_core_io_end(c->core, req->ent->id, &req->ios[s->k], result == 0);
		pthread_mutex_unlock(&c->lock);
		break;
	case SUB_RMW: {
		struct eng_sub *f = &req->subs[s->peer];
		if (result) {
			engine_dev_error(c, req->ent, result);
			f->rmw_failed = true;
		} else {
			rmw_merge(req, f, s);
		}
		rmw_piece_done(req, f);
		break;
	}
	default:
		break;
	}
}

/* ------------------------------------------------------------------ */
/* Writes, discards, write-zeroes                                     */
/* ------------------------------------------------------------------ */

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
	fill_range(req, io, &fs, &fe);
	s = engine_sub_new(req, SUB_FILL, k);
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
	for (uint32_t k = 0; k < req->nios; k++) {
		if (req->op != HL_IO_WRITE)
			req->ios[k].fill_nsect = 0; /* discard, zeroes, CAW: the range is dropped */
		hl_cache_core_write_end(c->core, lun, &req->ios[k], result == 0);
	}
	if (result)
		hl_cache_core_invalidate(c->core, lun, req->off, req->len);
	pthread_mutex_unlock(&c->lock);
	atomic_fetch_add(&c->changes, 1);
	if (req->op == HL_IO_COMPARE_AND_WRITE)
		req->uio->miscompare_offset = req->subs[0].io.miscompare_offset;
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
		fill_range(req, io, &fs, &fe);
		nrmw = rmw_sectors(req, io, sect);
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
	hl_origin_io_forward(&s->io, uio, engine_sub_cb, s);
	req->pending = 1;
	req->phase_done = write_done;
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
		hl_cache_core_invalidate(c->core, co->ent->id, uio->offset, uio->length);
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
	}
	req->nios = (uint32_t)n;
	hl_list_add_tail(&co->ent->wlist, &req->wlink);
	req->in_wlist = true;
	pthread_mutex_unlock(&c->lock);
	if (n)
		atomic_fetch_add(&c->changes, 1);
	if (sync && !atomic_load(&c->failed)) {
		engine_meta_wait(req, write_after_sync);
		return 0;
	}
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
