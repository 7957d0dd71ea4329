/*
 * engine_fill.c - what runs after a request's reply: the fills of the
 * blocks a read missed and the promotions of RAM window blocks it planned,
 * and the updates of a write (the RAM window at once, device slots from
 * bounce buffers, the RAM update buffer through engine_ub.c), with the
 * read-modify-write of sectors a write covers only partly. engine_read.c
 * and engine_write.c prepare them (engine_fill_prepare) and start them
 * (engine_fills_start); neither calls the other.
 *
 * Shared state and the ordering rules: engine_internal.h.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache/engine/engine_internal.h"
#include "hotlun/util.h"

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

void engine_fill_range(const struct eng_req *req, const struct hl_cache_io *io, uint64_t *fs,
                       uint64_t *fe)
{
	*fs = ((uint64_t)io->block << req->c->shift) + (uint64_t)io->fill_first * SECT;
	*fe = *fs + (uint64_t)io->fill_nsect * SECT;
}

int engine_rmw_sectors(const struct eng_req *req, const struct hl_cache_io *io, uint64_t out[2])
{
	uint64_t fs, fe, end = req->off + req->len;
	int n = 0;

	engine_fill_range(req, io, &fs, &fe);
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

	engine_fill_range(req, &req->ios[f->k], &fs, &fe);
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
	int n = engine_rmw_sectors(req, io, sect);

	if (!n)
		return false;
	s->rmw_wait = (uint8_t)(n + 1); /* + our hold while submitting */
	for (int i = 0; i < n; i++) {
		struct eng_sub *r;
		int rc = -ENOMEM;

		if (rmw_from_buffer(req, s, sect[i]))
			continue;
		r = engine_sub_new(req, SUB_RMW, s->k, engine_fill_sub_done);
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
		if (atomic_load(&c->failed) || engine_req_orphan(req) ||
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
		ok = !engine_req_orphan(req) && hl_cache_core_io_start(c->core, req->ent->id, io);
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
	s = engine_sub_new(req, SUB_FILL, k, engine_fill_sub_done);
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
		bool written = (req->iof[k] & IOF_WRITTEN) && !engine_req_orphan(req);
		if (written)
			atomic_fetch_add(&c->changes, 1);
		hl_cache_core_io_end(c->core, req->ent->id, io, written);
	}
	pthread_mutex_unlock(&c->lock);
	if (!any) {
		engine_req_free(req);
		return;
	}
	if (barrier && engine_meta_wait(req, fills_after_barrier))
		return;
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
		if (result)
			engine_dev_error(c, req->ent, result);
		else
			atomic_fetch_add(&c->changes, 1);
		pthread_mutex_lock(&c->lock);
		if (!result && engine_req_orphan(req)) {
			/*
			 * Its disk was detached (and its final proof taken) while this
			 * write was out: the slot's data is not claimed.
			 */
			atomic_fetch_add(&c->orphan_drops, 1);
			result = -ESTALE;
		}
		if (!result && req->ios[s->k].kind == HL_CACHE_IO_PROMOTE) {
			/* the promoted block's disk: the window is shared, it may not be req's */
			uint16_t lun = req->ios[s->k].lun;
			struct map_ent *pe = lun == req->ent->id ? req->ent : engine_ent_by_id(c, lun);
			cnt_add(&c->st.promotions, 1);
			cnt_add(&(pe ? pe : req->ent)->st.promotions, 1);
		}
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
