/*
 * engine_ub.c - the RAM update buffer in the daemon (docs/cache-policy.md,
 * rule 8 and "Engine contract"): the store of sector copies whose current
 * data is only in RAM, the install of an update into it, the write-backs
 * the core asks for, the copies that reads (served sectors) and
 * read-modify-writes (old head/tail sector) take of it, and the write-back
 * of everything at a clean stop.
 *
 * The core decides which sectors are pending; this file keeps their bytes.
 * Every store access is under c->lock, and so is every change of the core,
 * so "the store's copy is current whenever the core lists the sector
 * pending" holds at every lock release (engine_internal.h, ordering rules).
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache/engine/engine_internal.h"
#include "hotlun/log.h"
#include "hotlun/util.h"

/* One 4 KiB sector copy; key = slot << 16 | sector. */
struct ub_ent {
	struct ub_ent *next;
	uint64_t key;
	uint8_t data[SECT];
};

/* A write-back: pending sectors copied out of the store, on their way to the device. */
struct ub_wb {
	struct hl_origin_io oio;
	struct iovec iov;
	struct hl_cache *c;
	struct hl_cache_io io;
	uint16_t lun;
	uint8_t *buf;
};

#define WB_BATCH 8

static inline uint64_t ub_key(uint32_t slot, uint32_t sect)
{
	return (uint64_t)slot << 16 | sect;
}

static inline struct ub_ent **ub_bucket(struct hl_cache *c, uint64_t key)
{
	return &c->ub_tab[cache_hash(key) & c->ub_tab_mask];
}

static struct ub_ent *ub_ent_find(struct hl_cache *c, uint64_t key)
{
	for (struct ub_ent *e = *ub_bucket(c, key); e; e = e->next)
		if (e->key == key)
			return e;
	return NULL;
}

static bool ub_ent_pending(struct hl_cache *c, uint64_t key)
{
	uint8_t bits[HL_CACHE_MAX_BLOCK / SECT / 8];
	uint32_t i = (uint32_t)(key & 0xffff);

	if (!hl_cache_core_ub_pending(c->core, (uint32_t)(key >> 16), bits))
		return false;
	return (bits[i / 8] >> (i % 8)) & 1;
}

/* Free every entry the core no longer lists as pending. Under c->lock. */
static void ub_sweep(struct hl_cache *c)
{
	for (uint64_t b = 0; b <= c->ub_tab_mask; b++) {
		struct ub_ent **pp = &c->ub_tab[b];
		while (*pp) {
			struct ub_ent *e = *pp;
			if (ub_ent_pending(c, e->key)) {
				pp = &e->next;
				continue;
			}
			*pp = e->next;
			free(e);
			c->ub_count--;
		}
	}
	/* Sweep again once a quarter of the limit went stale: at most 1.25x the limit in RAM. */
	c->ub_sweep_at = c->ub_count + c->ub_cap / SECT / 4 + 64;
}

/*
 * Copy src (one sector) into the store as (slot, sect). Under c->lock.
 * Never sweeps: the sectors of an install are not pending until its
 * io_end, so a sweep between its puts would free them (engine_ub_install
 * sweeps first). @return 0 or -ENOMEM.
 */
static int ub_ent_put(struct hl_cache *c, uint32_t slot, uint32_t sect, const uint8_t *src)
{
	uint64_t key = ub_key(slot, sect);
	struct ub_ent *e = ub_ent_find(c, key);

	if (!e) {
		e = malloc(sizeof(*e));
		if (!e)
			return -ENOMEM;
		e->key = key;
		e->next = *ub_bucket(c, key);
		*ub_bucket(c, key) = e;
		c->ub_count++;
	}
	memcpy(e->data, src, SECT);
	return 0;
}

/* Buckets of the store's table for a buffer of bytes: a power of two, about a sector each. */
static uint64_t ub_tab_buckets(uint64_t bytes)
{
	uint64_t n = 64;

	while (n < bytes / SECT)
		n <<= 1;
	return n;
}

int engine_ub_init(struct hl_cache *c, uint64_t bytes)
{
	uint64_t n = ub_tab_buckets(bytes);
	int rc;

	if (!bytes)
		return 0;
	c->ub_tab = calloc(n, sizeof(*c->ub_tab));
	if (!c->ub_tab)
		return -ENOMEM;
	rc = hl_cache_core_set_update_buffer(c->core, bytes);
	if (rc) {
		free(c->ub_tab);
		c->ub_tab = NULL;
		return rc;
	}
	c->ub_tab_mask = n - 1;
	c->ub_cap = bytes;
	c->ub_sweep_at = bytes / SECT + bytes / SECT / 4 + 64;
	return 0;
}

void engine_ub_fini(struct hl_cache *c)
{
	if (!c->ub_tab)
		return;
	for (uint64_t b = 0; b <= c->ub_tab_mask; b++) {
		struct ub_ent *e = c->ub_tab[b];
		while (e) {
			struct ub_ent *n = e->next;
			free(e);
			e = n;
		}
	}
	free(c->ub_tab);
	c->ub_tab = NULL;
	c->ub_count = 0;
}

uint64_t engine_ub_bytes(struct hl_cache *c)
{
	uint64_t n;

	pthread_mutex_lock(&c->lock);
	n = c->ub_count * SECT;
	pthread_mutex_unlock(&c->lock);
	return n;
}

/* ---- reads and read-modify-writes ---- */

int engine_ub_read_plan(struct eng_req *req)
{
	struct hl_cache *c = req->c;
	uint8_t bits[HL_CACHE_MAX_BLOCK / SECT / 8];
	uint32_t cap = 0;

	/* Nothing buffered (the common case for a read-mostly disk): no lookup per block. */
	if (!c->ub_cap || !hl_cache_core_ub_slots(c->core))
		return 0;
	for (uint32_t k = 0; k < req->nb && k < req->nios; k++) {
		struct hl_cache_io *io = &req->ios[k];

		if ((io->kind != HL_CACHE_IO_HIT && io->kind != HL_CACHE_IO_PARTIAL) ||
		    io->slot >= c->nslots || !hl_cache_core_ub_pending(c->core, io->slot, bits))
			continue;
		for (uint32_t i = io->first; i < (uint32_t)io->first + io->nsect; i++) {
			struct ub_ent *e;

			if (!((bits[i / 8] >> (i % 8)) & 1))
				continue;
			e = ub_ent_find(c, ub_key(io->slot, i));
			if (!e) { /* cannot be: pending sectors have a copy */
				HL_ERR_RL("cache",
				          "cache %s: update buffer: no copy of slot %u sector %u",
				          c->name, io->slot, i);
				return -EIO;
			}
			if (req->ov_n == cap) {
				uint32_t ncap = cap ? 2 * cap : 16;
				uint8_t *ov = realloc(req->ov, (size_t)ncap * SECT);
				if (!ov)
					return -ENOMEM;
				req->ov = ov;
				uint64_t *off = realloc(req->ov_off, (size_t)ncap * sizeof(*off));
				if (!off)
					return -ENOMEM;
				req->ov_off = off;
				cap = ncap;
			}
			memcpy(req->ov + (size_t)req->ov_n * SECT, e->data, SECT);
			req->ov_off[req->ov_n++] = blk_start(c, io->block) + (uint64_t)i * SECT;
		}
	}
	return 0;
}

void engine_ub_overlay(const struct eng_req *req, uint8_t *buf, uint64_t lo, uint64_t hi)
{
	for (uint32_t j = 0; j < req->ov_n; j++) {
		uint64_t p = req->ov_off[j];
		if (p < lo || p >= hi)
			continue;
		memcpy(buf + (p - lo), req->ov + (size_t)j * SECT, HL_MIN((uint64_t)SECT, hi - p));
	}
}

/* Copy LUN sector p (byte offset) into *out if it is pending. Under c->lock. */
static int keep_if_pending(struct eng_req *req, uint64_t p, int i)
{
	struct hl_cache *c = req->c;
	uint64_t b = p >> c->shift;
	uint32_t slot = hl_cache_core_peek(c->core, req->ent->id, b, NULL);
	uint32_t sect = (uint32_t)((p - blk_start(c, b)) / SECT);
	struct ub_ent *e;

	if (slot >= c->nslots || !ub_ent_pending(c, ub_key(slot, sect)))
		return 0;
	e = ub_ent_find(c, ub_key(slot, sect));
	if (!e)
		return -EIO;
	req->rmw_old[i] = malloc(SECT);
	if (!req->rmw_old[i])
		return -ENOMEM;
	memcpy(req->rmw_old[i], e->data, SECT);
	req->rmw_off[i] = p;
	return 0;
}

int engine_ub_write_plan(struct eng_req *req)
{
	struct hl_cache *c = req->c;
	uint64_t end = req->off + req->len;
	int rc = 0;

	req->rmw_off[0] = req->rmw_off[1] = UINT64_MAX;
	if (!c->ub_cap || req->op != HL_IO_WRITE)
		return 0;
	if (req->off % SECT)
		rc = keep_if_pending(req, req->off / SECT * SECT, 0);
	if (!rc && end % SECT && end / SECT * SECT != req->rmw_off[0] &&
	    (end / SECT != req->off / SECT || !(req->off % SECT)))
		rc = keep_if_pending(req, end / SECT * SECT, 1);
	return rc;
}

/* ---- install and write-back ---- */

static void wb_free(struct ub_wb *wb)
{
	struct hl_cache *c = wb->c;

	free(wb->buf);
	free(wb);
	atomic_fetch_sub(&c->inflight, 1);
}

static void wb_done(struct hl_origin_io *oio, int result)
{
	struct ub_wb *wb = oio->arg;
	struct hl_cache *c = wb->c;

	/* A write past the end of a truncated file would extend it: look. */
	if (!result && engine_device_check_size(c))
		result = -EIO;
	if (result) {
		engine_dev_error(c, NULL, result);
	} else {
		atomic_fetch_add(&c->changes, 1);
		cnt_add(&c->st.ub_writebacks, 1);
	}
	pthread_mutex_lock(&c->lock);
	hl_cache_core_io_end(c->core, wb->lun, &wb->io, result == 0);
	pthread_mutex_unlock(&c->lock);
	wb_free(wb);
}

/*
 * Under c->lock: the next write-back the core asks for, its sectors copied
 * out of the store and the slot granted (io_start). @return NULL when the
 * buffer is within its limit; *more says whether to ask again.
 */
static struct ub_wb *wb_next(struct hl_cache *c, bool *more)
{
	struct hl_cache_io io;
	uint16_t lun;
	struct ub_wb *wb;

	*more = hl_cache_core_ub_writeback(c->core, &lun, &io);
	if (!*more)
		return NULL;
	wb = calloc(1, sizeof(*wb));
	if (wb)
		wb->buf = dio_alloc((size_t)io.fill_nsect * SECT);
	for (uint32_t i = 0; wb && wb->buf && i < io.fill_nsect; i++) {
		struct ub_ent *e = ub_ent_find(c, ub_key(io.slot, (uint32_t)io.fill_first + i));
		if (!e) { /* cannot be: the core listed these sectors pending */
			free(wb->buf);
			wb->buf = NULL;
			break;
		}
		memcpy(wb->buf + (size_t)i * SECT, e->data, SECT);
	}
	if (!wb || !wb->buf || atomic_load(&c->failed) ||
	    !hl_cache_core_io_start(c->core, lun, &io)) {
		/* The sectors stay invalid: the origin has their data. */
		hl_cache_core_io_end(c->core, lun, &io, false);
		if (wb)
			free(wb->buf);
		free(wb);
		return NULL;
	}
	wb->c = c;
	wb->io = io;
	wb->lun = lun;
	atomic_fetch_add(&c->inflight, 1);
	return wb;
}

static void wb_submit(struct ub_wb *wb)
{
	struct hl_cache *c = wb->c;
	uint64_t len = (uint64_t)wb->io.fill_nsect * SECT;
	int rc;

	wb->iov.iov_base = wb->buf;
	wb->iov.iov_len = len;
	wb->oio.op = HL_IO_WRITE;
	wb->oio.offset =
	    c->layout.data_off + (uint64_t)wb->io.slot * c->bs + (uint64_t)wb->io.fill_first * SECT;
	wb->oio.length = len;
	wb->oio.iov = &wb->iov;
	wb->oio.iovcnt = 1;
	wb->oio.cb = wb_done;
	wb->oio.arg = wb;
	rc = hl_origin_submit(c->data, &wb->oio);
	if (rc) {
		engine_dev_error(c, NULL, rc);
		pthread_mutex_lock(&c->lock);
		hl_cache_core_io_end(c->core, wb->lun, &wb->io, false);
		pthread_mutex_unlock(&c->lock);
		wb_free(wb);
	}
}

/*
 * Write every pending sector to the device, synchronously; c->lock held on
 * entry and on return. live (the reactors run): the lock is dropped around
 * each device write, whose run is pinned and not served until its io_end,
 * like any write-back, so I/O goes on meanwhile; a device error then turns
 * the cache into pass-through. At a stop (!live) nothing else runs.
 * @return 0 or the first device error; *done gets the bytes written.
 */
static int ub_drain_locked(struct hl_cache *c, uint8_t *buf, bool live, uint64_t *done)
{
	struct hl_cache_io io;
	uint16_t lun;
	int rc = buf ? 0 : -ENOMEM;

	while (hl_cache_core_ub_drain(c->core, &lun, &io)) {
		bool ok = !rc && !atomic_load(&c->failed);

		for (uint32_t i = 0; ok && i < io.fill_nsect; i++) {
			struct ub_ent *e =
			    ub_ent_find(c, ub_key(io.slot, (uint32_t)io.fill_first + i));
			ok = e != NULL;
			if (ok)
				memcpy(buf + (size_t)i * SECT, e->data, SECT);
		}
		ok = ok && hl_cache_core_io_start(c->core, lun, &io);
		if (ok) {
			if (live)
				pthread_mutex_unlock(&c->lock);
			/* Not through a reactor: an O_DIRECT write, like the records'. */
			rc = c->dev->ops->pwrite(c->dev, buf, (size_t)io.fill_nsect * SECT,
			                         c->layout.data_off + (uint64_t)io.slot * c->bs +
			                             (uint64_t)io.fill_first * SECT);
			if (live && rc)
				engine_dev_error(c, NULL, rc);
			if (live && !rc) {
				atomic_fetch_add(&c->changes, 1);
				cnt_add(&c->st.ub_writebacks, 1);
			}
			if (live)
				pthread_mutex_lock(&c->lock);
			ok = !rc;
			*done += ok ? (uint64_t)io.fill_nsect * SECT : 0;
		}
		/* Installed: the records written next claim them. Otherwise they stay invalid. */
		hl_cache_core_io_end(c->core, lun, &io, ok);
	}
	return rc;
}

int engine_ub_drain(struct hl_cache *c)
{
	uint8_t *buf;
	uint64_t done = 0;
	int rc;

	if (!c->ub_cap)
		return 0;
	buf = dio_alloc(c->bs);
	pthread_mutex_lock(&c->lock);
	rc = ub_drain_locked(c, buf, false, &done);
	pthread_mutex_unlock(&c->lock);
	free(buf);
	if (rc)
		HL_ERR("cache",
		       "cache %s: writing the update buffer back at the stop: %s "
		       "(its sectors are read from the origin after the restart)",
		       c->name, strerror(-rc));
	else if (done)
		HL_INFO("cache", "cache %s: %llu KiB of the update buffer written back", c->name,
		        (unsigned long long)(done >> 10));
	return rc;
}

/* Rehash the store into a table sized for bytes (kept as it is without memory). Under c->lock. */
static void ub_tab_resize(struct hl_cache *c, struct ub_ent **tab, uint64_t mask)
{
	struct ub_ent **old = c->ub_tab;
	uint64_t old_mask = c->ub_tab_mask;

	c->ub_tab = tab;
	c->ub_tab_mask = mask;
	for (uint64_t b = 0; old && b <= old_mask; b++) {
		struct ub_ent *e = old[b];
		while (e) {
			struct ub_ent *n = e->next;
			e->next = *ub_bucket(c, e->key);
			*ub_bucket(c, e->key) = e;
			e = n;
		}
	}
	free(old);
}

int hl_cache_set_update_buffer(struct hl_cache *c, uint64_t bytes)
{
	struct ub_ent **tab = NULL;
	uint64_t n = ub_tab_buckets(bytes), done = 0;
	uint8_t *buf;
	int rc = 0, wrc;

	if (bytes % SECT)
		return -EINVAL;
	buf = dio_alloc(c->bs);
	if (!buf || (bytes && !(tab = calloc(n, sizeof(*tab))))) {
		free(buf);
		return -ENOMEM;
	}
	pthread_mutex_lock(&c->lock);
	if (bytes == c->ub_cap) {
		pthread_mutex_unlock(&c->lock);
		free(tab);
		free(buf);
		return 0;
	}
	/*
	 * Updates go to the device from now on; write back what is pending
	 * (updates already on their way into the buffer land in it and are
	 * drained too: the loop ends with the buffer empty, under the lock).
	 */
	hl_cache_core_ub_close(c->core, true);
	wrc = ub_drain_locked(c, buf, true, &done);
	rc = hl_cache_core_set_update_buffer(c->core, bytes);
	if (rc) {
		hl_cache_core_ub_close(c->core, false); /* the old size, empty */
		free(tab);
	} else {
		/*
		 * Turned off, the store stays (an update begun before may still
		 * install into it; its sectors are refused by the core and swept).
		 */
		if (tab)
			ub_tab_resize(c, tab, n - 1);
		c->ub_cap = bytes;
		ub_sweep(c);
	}
	pthread_mutex_unlock(&c->lock);
	free(buf);
	if (wrc)
		HL_ERR("cache", "cache %s: writing the update buffer back: %s", c->name,
		       strerror(-wrc));
	if (!rc)
		HL_NOTICE("cache", "cache %s: update buffer now %llu KiB (%llu KiB written back)",
		          c->name, (unsigned long long)(bytes >> 10),
		          (unsigned long long)(done >> 10));
	return rc;
}

void engine_ub_install(struct eng_req *req, struct eng_sub *s)
{
	struct hl_cache *c = req->c;
	struct hl_cache_io *io = &req->ios[s->k];
	struct ub_wb *wbs[WB_BATCH];
	bool ok = !atomic_load(&c->failed), more = true;
	int n;

	pthread_mutex_lock(&c->lock);
	if (ok && engine_req_orphan(req)) { /* its disk was detached meanwhile */
		atomic_fetch_add(&c->orphan_drops, 1);
		ok = false;
	}
	if (c->ub_count + io->fill_nsect >= c->ub_sweep_at)
		ub_sweep(c);
	for (uint32_t i = 0; ok && i < io->fill_nsect; i++)
		ok = ub_ent_put(c, io->slot, (uint32_t)io->fill_first + i,
		                s->buf + (size_t)i * SECT) == 0;
	/* Valid and pending only now, with the store's copies in place (or dropped). */
	hl_cache_core_io_end(c->core, req->ent->id, io, ok);
	if (!c->ub_cap)
		ub_sweep(c); /* begun before the buffer was turned off: refused, not kept */
	while (more) {
		n = 0;
		while (n < WB_BATCH && more) {
			struct ub_wb *wb = wb_next(c, &more);
			if (wb)
				wbs[n++] = wb;
		}
		pthread_mutex_unlock(&c->lock);
		for (int i = 0; i < n; i++)
			wb_submit(wbs[i]);
		pthread_mutex_lock(&c->lock);
	}
	pthread_mutex_unlock(&c->lock);
}
