/*
 * engine.c - the read cache in hotlund's data path (include/hotlun/cache_engine.h):
 * a cache (device, layout, policy core, metadata thread, disk map) and the
 * "cached origin" wrapper that runs every block I/O of a disk through it.
 *
 * Owns: the request state machine around the policy core (plan under the
 * cache mutex, device and origin I/O outside it, io_end under it again),
 * bounce buffers, the RAM window's data, the metadata thread, the disk-name
 * -> LUN-id map file, pass-through on device failure, and the engine stats
 * (latency and size histograms).
 *
 * Ordering rules kept here (see docs/cache-engine.md for the reasoning):
 *  - a read replies as soon as its data is in the caller's buffers; fills
 *    run afterwards from bounce buffers the request owns;
 *  - a fill whose slot record may still claim old data (io->meta_barrier)
 *    waits for a metadata flush before its data write;
 *  - a write whose range some on-device record may still claim (a barrier
 *    io, or hl_cache_core_write_needs_sync) waits for a metadata flush
 *    before the origin write, so a crash cannot bring old data back;
 *  - every origin write/discard is listed on its disk (wlist) from before
 *    write_begin until write_end: a read planned meanwhile does not fill
 *    the blocks it overlaps. The core only tracks writers of blocks that
 *    are cached when the write begins; a block admitted by a read that
 *    starts while an origin write to it is in flight could otherwise be
 *    filled with the pre-write data.
 *  - the metadata thread holds the cache mutex for a whole metadata flush,
 *    so no fill is installed between its data flush and its record writes.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <sys/stat.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache/cache_internal.h"
#include "hotlun/cache_engine.h"
#include "hotlun/event.h"
#include "hotlun/log.h"
#include "hotlun/util.h"

#define SECT        HL_CACHE_SECTOR
#define MAP_MAGIC   "hotlun-cache-map 1"
#define SB_KILL_LEN 8192u /* both superblock copies (docs/cache-format.md) */

/* ------------------------------------------------------------------ */
/* State                                                              */
/* ------------------------------------------------------------------ */

/* Counters updated with relaxed atomics from every reactor. */
struct eng_counters {
	uint64_t hit_lat[HL_CACHE_LAT_BUCKETS];
	uint64_t miss_lat[HL_CACHE_LAT_BUCKETS];
	uint64_t rsize[HL_CACHE_SIZE_BUCKETS];
	uint64_t wsize[HL_CACHE_SIZE_BUCKETS];
	uint64_t dev_errors, origin_errors, hit_retries, passthrough_ios;
	uint64_t promotions; /* RAM window blocks copied to the SSD */
};

/* A disk the cache knows: attached now, or mapped by an earlier run. */
struct map_ent {
	uint16_t id; /* LUN id in the core */
	uint64_t quota;
	uint64_t size; /* origin identity: size ... */
	char *name;
	char *ident;          /* ... and URI without throttle wrappers */
	bool attached;        /* guarded by hl_cache.lock */
	struct hl_list wlist; /* origin writes in flight (eng_req.wlink); hl_cache.lock */
	struct eng_counters st;
};

struct meta_wait {
	struct meta_wait *next;
	struct hl_reactor *r;
	void (*done)(struct meta_wait *w);
	int rc;
};

struct hl_cache {
	char *name, *device, *map_path;
	uint32_t bs, shift;
	uint64_t nslots, nwin;
	struct hl_cache_layout layout;
	struct hl_cache_dev *dev; /* metadata I/O: meta thread, open and close only */
	struct hl_origin *data;   /* slot data: O_DIRECT file origin on the device */
	uint8_t *window;          /* RAM window data: nwin * bs, 4 KiB aligned */

	pthread_mutex_t sync_lock; /* serialises record syncs (meta thread, attach); before lock */
	pthread_mutex_t lock;
	struct hl_cache_core *core; /* lock */
	struct map_ent **ents;      /* lock; the array grows only on the main thread */
	size_t n_ents;
	uint16_t next_id; /* lock */

	atomic_bool failed;   /* pass-through: the device failed */
	atomic_long inflight; /* requests not yet freed */
	atomic_ulong changes; /* bumped when metadata may need a flush */
	atomic_ulong synced;  /* the value of changes the last record flush covered */
	struct eng_counters st;
	uint64_t meta_syncs, meta_waits; /* atomics */

	/* metadata thread */
	pthread_t meta_thr;
	bool meta_started;
	pthread_mutex_t mlock;
	pthread_cond_t mcond;
	struct meta_wait *mw_head, **mw_tail; /* mlock */
	bool mstop;                           /* mlock */
	atomic_bool mdrop;                    /* reactors are gone: the meta thread posts nothing */
	bool fail_pending;                    /* mlock: kill the on-device metadata */
	bool dead; /* meta thread (then close): no more metadata writes */
	uint32_t interval_ms;
};

/* Behind each cached origin. */
struct co_priv {
	struct hl_cache *c;
	struct hl_origin *inner;
	struct map_ent *ent;
};

static const struct hl_origin_ops cache_origin_ops;

static struct co_priv *co_of(struct hl_origin *o)
{
	return hl_origin_priv(o);
}

/* ------------------------------------------------------------------ */
/* Small helpers                                                      */
/* ------------------------------------------------------------------ */

static inline void cnt_add(uint64_t *p, uint64_t v)
{
	__atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}

static inline uint64_t cnt_get(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

/* LUN byte offset of cache block b. */
static inline uint64_t blk_start(const struct hl_cache *c, uint64_t b)
{
	return b << c->shift;
}

static void *abuf(size_t len)
{
	void *p = NULL;

	if (posix_memalign(&p, 4096, HL_ALIGN_UP(len ? len : 1, (size_t)4096)))
		return NULL;
	return p;
}

/* Copy len bytes at byte pos of the iovecs into dst. */
static void iov_to_buf(const struct iovec *iov, int cnt, uint64_t pos, void *dst, uint64_t len)
{
	uint8_t *d = dst;

	for (int i = 0; i < cnt && len; i++) {
		if (pos >= iov[i].iov_len) {
			pos -= iov[i].iov_len;
			continue;
		}
		size_t n = HL_MIN(iov[i].iov_len - pos, len);
		memcpy(d, (const uint8_t *)iov[i].iov_base + pos, n);
		d += n;
		len -= n;
		pos = 0;
	}
}

/*
 * The caller's buffer for LUN bytes [lo, lo + len) of req if it is one
 * contiguous piece of one iovec that O_DIRECT can read into (4 KiB-aligned
 * address; lo and len are whole sectors already), else NULL.
 */
static uint8_t *iov_span(const struct iovec *iov, int cnt, uint64_t pos, uint64_t len)
{
	for (int i = 0; i < cnt; i++) {
		if (pos >= iov[i].iov_len) {
			pos -= iov[i].iov_len;
			continue;
		}
		if (iov[i].iov_len - pos < len)
			return NULL;
		uint8_t *p = (uint8_t *)iov[i].iov_base + pos;
		return ((uintptr_t)p & 4095) ? NULL : p;
	}
	return NULL;
}

/* Copy len bytes of src to byte pos of the iovecs. */
static void buf_to_iov(const struct iovec *iov, int cnt, uint64_t pos, const void *src,
                       uint64_t len)
{
	const uint8_t *s = src;

	for (int i = 0; i < cnt && len; i++) {
		if (pos >= iov[i].iov_len) {
			pos -= iov[i].iov_len;
			continue;
		}
		size_t n = HL_MIN(iov[i].iov_len - pos, len);
		memcpy((uint8_t *)iov[i].iov_base + pos, s, n);
		s += n;
		len -= n;
		pos = 0;
	}
}

const uint32_t hl_cache_size_bounds[HL_CACHE_SIZE_BUCKETS] = {
    512,   1024,  2048,  4095,  4096,  8191,   8192,   16383,  16384,
    32768, 49152, 65535, 65536, 81920, 131072, 262144, 524288, UINT32_MAX,
};

unsigned hl_cache_size_bucket(uint64_t len)
{
	for (unsigned i = 0; i < HL_CACHE_SIZE_BUCKETS - 1; i++)
		if (len <= hl_cache_size_bounds[i])
			return i;
	return HL_CACHE_SIZE_BUCKETS - 1;
}

static unsigned lat_bucket(uint64_t ns)
{
	uint64_t us = ns / 1000;
	unsigned b = 0;

	while (us > 1 && b < HL_CACHE_LAT_BUCKETS - 1) {
		us >>= 1;
		b++;
	}
	return b;
}

/* ------------------------------------------------------------------ */
/* Device failure -> pass-through                                     */
/* ------------------------------------------------------------------ */

static void dev_error(struct hl_cache *c, struct map_ent *e, int rc)
{
	cnt_add(&c->st.dev_errors, 1);
	if (e)
		cnt_add(&e->st.dev_errors, 1);
	if (atomic_exchange(&c->failed, true))
		return;
	HL_ERR("cache", "cache %s: device %s: I/O error (%s): switching to pass-through", c->name,
	       c->device, strerror(-rc));
	pthread_mutex_lock(&c->mlock);
	c->fail_pending = true;
	pthread_cond_signal(&c->mcond);
	pthread_mutex_unlock(&c->mlock);
}

/*
 * The device file shrank under us (truncated): its holes read as zeroes,
 * and a write past the new end would hide that from the end-of-file check
 * of the data reads. Any thread. @return true when it did (the caller
 * reports the device error: pass-through).
 */
static bool device_check_size(struct hl_cache *c)
{
	struct stat st;

	if (c->dev->fd < 0 || fstat(c->dev->fd, &st) || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size >= c->dev->size)
		return false;
	if (!atomic_load(&c->failed))
		HL_ERR("cache", "cache %s: %s shrank to %llu bytes (expected %llu)", c->name,
		       c->device, (unsigned long long)st.st_size, (unsigned long long)c->dev->size);
	return true;
}

/* ------------------------------------------------------------------ */
/* Requests                                                           */
/* ------------------------------------------------------------------ */

/*
 * SUB_BUF: no I/O, owns the bounce buffer of a stitched run (RUN pieces and
 * PHIT pieces read into it). SUB_PHIT: valid sectors of a PARTIAL block,
 * read from the cache device. SUB_RMW: the old content of a partly written
 * sector, read from the slot before an update merges and writes it.
 */
enum sub_kind {
	SUB_HIT,
	SUB_RUN,
	SUB_RETRY,
	SUB_FILL,
	SUB_WRITE,
	SUB_SKIPPED,
	SUB_BUF,
	SUB_PHIT,
	SUB_RMW,
};

struct eng_req;

/* One I/O a request makes: to the cache device or to the origin. */
struct eng_sub {
	struct hl_origin_io io;
	struct eng_req *req;
	struct iovec iov;
	uint8_t *buf; /* owned when own */
	bool own;
	bool direct; /* HIT/RETRY: buf is the caller's buffer itself, no copy */
	uint8_t kind;
	uint8_t rmw_wait; /* FILL: SUB_RMW reads still to merge before the write */
	bool rmw_failed;  /* FILL: one of them failed: the update is dropped */
	uint32_t k;       /* HIT/FILL/RETRY/PHIT/RMW: index in ios; RUN: first block */
	uint32_t peer;    /* RMW: the FILL sub it merges into */
	uint64_t lo, hi;  /* RUN/RETRY/BUF/PHIT: LUN bytes held by buf; RMW: the sector */
};

struct eng_req {
	struct hl_cache *c;
	struct co_priv *co;
	struct map_ent *ent;
	struct hl_origin_io *uio; /* the caller's; valid until replied */
	struct hl_reactor *r;
	struct hl_timer defer;
	struct meta_wait mw;
	struct hl_list wlink; /* ent->wlist while a write is in flight */
	void (*phase_done)(struct eng_req *req);
	uint64_t off, len, t0;
	enum hl_io_op op;
	int pending;
	int status;
	bool all_hit, in_wlist, replied, inside_submit, no_data;
	uint32_t nb, nios, nsub, maxsub;
	struct hl_cache_io *ios;
	int32_t *run_of; /* per block of a read: its RUN (or BUF) sub, or -1 */
	uint8_t *iof;    /* per io: IOF_* */
	uint8_t *vmap;   /* read: bit i = sector off/SECT + i valid in a PARTIAL block */
	struct eng_sub *subs;
	bool subs_heap; /* subs was reallocated for a stitched read */
};

/* eng_req.iof */
#define IOF_QUEUED  0x1 /* a FILL sub calls io_end when its write completes */
#define IOF_WRITTEN 0x2 /* finished at once, data in place (RAM window) */
#define IOF_DONE    0x4 /* already finished by the core (write_end): no io_end */

static void sub_cb(struct hl_origin_io *io, int result);

static struct eng_req *req_new(struct hl_origin *o, struct hl_origin_io *uio, uint32_t nb,
                               uint32_t maxios, uint32_t maxsub)
{
	struct co_priv *co = co_of(o);
	size_t vbytes = nb ? (size_t)((HL_ALIGN_UP(uio->offset + uio->length, (uint64_t)SECT) -
	                               uio->offset / SECT * SECT) /
	                                  SECT / 8 +
	                              1)
	                   : 0;
	size_t sz = sizeof(struct eng_req) + (size_t)maxsub * sizeof(struct eng_sub) +
	            (size_t)maxios * sizeof(struct hl_cache_io) + (size_t)nb * sizeof(int32_t) +
	            maxios + vbytes;
	struct eng_req *req = malloc(sz);

	if (!req)
		return NULL;
	memset(req, 0, sizeof(*req));
	req->subs = (struct eng_sub *)(req + 1);
	req->ios = (struct hl_cache_io *)(req->subs + maxsub);
	req->run_of = (int32_t *)(req->ios + maxios);
	req->iof = (uint8_t *)(req->run_of + nb);
	req->vmap = req->iof + maxios; /* written before read, only for PARTIAL blocks */
	req->maxsub = maxsub;
	req->c = co->c;
	req->co = co;
	req->ent = co->ent;
	req->uio = uio;
	req->r = hl_reactor_current();
	req->off = uio->offset;
	req->len = uio->length;
	req->op = uio->op;
	req->t0 = hl_now_ns();
	req->nb = nb;
	hl_list_init(&req->wlink);
	atomic_fetch_add(&co->c->inflight, 1);
	return req;
}

static void req_free(struct eng_req *req)
{
	struct hl_cache *c = req->c;

	for (uint32_t i = 0; i < req->nsub; i++)
		if (req->subs[i].own)
			free(req->subs[i].buf);
	if (req->subs_heap)
		free(req->subs);
	free(req);
	atomic_fetch_sub(&c->inflight, 1);
}

static struct eng_sub *sub_new(struct eng_req *req, enum sub_kind kind, uint32_t k)
{
	struct eng_sub *s;

	if (req->nsub == req->maxsub)
		return NULL;
	s = &req->subs[req->nsub++];
	memset(s, 0, sizeof(*s));
	s->req = req;
	s->kind = (uint8_t)kind;
	s->k = k;
	return s;
}

/* Submit sub to origin o at off: the buffer is sub->iov. @return 0 or -errno (no callback). */
static int sub_submit(struct eng_sub *s, struct hl_origin *o, enum hl_io_op op, uint64_t off,
                      uint64_t len)
{
	int rc;

	s->io.op = op;
	s->io.flags = 0;
	s->io.offset = off;
	s->io.length = len;
	s->io.iov = &s->iov;
	s->io.iovcnt = 1;
	s->iov.iov_len = len;
	s->io.cb = sub_cb;
	s->io.arg = s;
	s->req->pending++;
	rc = hl_origin_submit(o, &s->io);
	if (rc)
		s->req->pending--;
	return rc;
}

static void defer_fire(struct hl_timer *t)
{
	struct eng_req *req = t->arg;

	req->phase_done(req);
}

/*
 * The submitter's hold on the current phase ends. Inside the wrapper's
 * submit the completion must not run (the origin contract), so a phase
 * that finished already is continued from a zero-delay timer.
 */
static void phase_end(struct eng_req *req)
{
	if (--req->pending)
		return;
	if (req->inside_submit) {
		hl_timer_init(&req->defer, defer_fire, req);
		hl_timer_start(req->r, &req->defer, 0);
		return;
	}
	req->phase_done(req);
}

static void sub_done(struct eng_req *req)
{
	if (--req->pending == 0)
		req->phase_done(req);
}

static void reply(struct eng_req *req, int status)
{
	struct hl_cache *c = req->c;
	struct map_ent *e = req->ent;
	struct hl_origin_io *uio = req->uio;

	if (req->replied)
		return;
	req->replied = true;
	if (req->op == HL_IO_READ) {
		unsigned b = lat_bucket(hl_now_ns() - req->t0);
		if (req->all_hit) {
			cnt_add(&c->st.hit_lat[b], 1);
			cnt_add(&e->st.hit_lat[b], 1);
		} else {
			cnt_add(&c->st.miss_lat[b], 1);
			cnt_add(&e->st.miss_lat[b], 1);
		}
	}
	if (status && status != -ENOMEM && status != -EILSEQ) {
		cnt_add(&c->st.origin_errors, 1);
		cnt_add(&e->st.origin_errors, 1);
	}
	req->uio = NULL;
	uio->cb(uio, status);
}

/* ---- metadata waits ---- */

static void meta_wait_post(void *arg)
{
	struct meta_wait *w = arg;

	w->done(w);
}

/* Run done(w) on the request's reactor after a metadata flush that starts from now on. */
static void meta_wait(struct eng_req *req, void (*done)(struct meta_wait *w))
{
	struct hl_cache *c = req->c;
	struct meta_wait *w = &req->mw;

	cnt_add(&c->meta_waits, 1);
	w->next = NULL;
	w->r = req->r;
	w->done = done;
	w->rc = 0;
	pthread_mutex_lock(&c->mlock);
	*c->mw_tail = w;
	c->mw_tail = &w->next;
	pthread_cond_signal(&c->mcond);
	pthread_mutex_unlock(&c->mlock);
}

/* ------------------------------------------------------------------ */
/* Fills and updates (after the reply)                                */
/* ------------------------------------------------------------------ */

static void fills_done(struct eng_req *req)
{
	req_free(req);
}

/* Write FILL sub s's data into its slot (io_start granted it); its completion ends the io. */
static void fill_write(struct eng_req *req, struct eng_sub *s)
{
	struct hl_cache *c = req->c;
	struct hl_cache_io *io = &req->ios[s->k];
	int rc;

	rc = sub_submit(s, c->data, HL_IO_WRITE,
	                c->layout.data_off + (uint64_t)io->slot * c->bs +
	                    (uint64_t)io->fill_first * SECT,
	                (uint64_t)io->fill_nsect * SECT);
	if (rc) {
		dev_error(c, req->ent, rc);
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
		struct eng_sub *r = sub_new(req, SUB_RMW, s->k);
		int rc = -ENOMEM;

		if (r && (r->buf = abuf(SECT))) {
			r->own = true;
			r->lo = sect[i];
			r->peer = (uint32_t)(s - req->subs);
			r->iov.iov_base = r->buf;
			rc = atomic_load(&c->failed)
			         ? -EIO
			         : sub_submit(r, c->data, HL_IO_READ,
			                      c->layout.data_off + (uint64_t)io->slot * c->bs +
			                          (sect[i] - blk_start(c, io->block)),
			                      SECT);
		}
		if (rc) {
			if (rc != -ENOMEM && !atomic_load(&c->failed))
				dev_error(c, req->ent, rc);
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
	phase_end(req);
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
		dev_error(req->c, req->ent, w->rc);
	fills_submit(req, first_fill_sub(req));
}

/*
 * Prepare writing sectors [fill_first, +fill_nsect) of io's slot from data
 * (valid until the request is freed, or copied here). A RAM window slot is
 * copied at once. @return true when a FILL sub is queued (its completion
 * calls io_end); otherwise *written says how the caller ends io.
 */
static bool fill_prepare(struct eng_req *req, struct hl_cache_io *io, uint32_t k, uint8_t *data,
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
		*written = true;
		goto drop;
	}
	if (atomic_load(&c->failed))
		goto drop;
	s = sub_new(req, SUB_FILL, k);
	if (!s)
		goto drop;
	if (((uintptr_t)data & 4095) == 0) {
		s->buf = data;
		s->own = data_owned;
	} else {
		s->buf = abuf((size_t)io->fill_nsect * SECT);
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
static void fills_start(struct eng_req *req, uint32_t first_fill, bool barrier)
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
		req_free(req);
		return;
	}
	if (barrier) {
		meta_wait(req, fills_after_barrier);
		return;
	}
	fills_submit(req, first_fill);
}

/* ------------------------------------------------------------------ */
/* Reads                                                              */
/* ------------------------------------------------------------------ */

static inline bool io_fills(const struct hl_cache_io *io)
{
	return io->slot != HL_CACHE_NO_SLOT && io->fill_nsect;
}

/* True when an origin write in flight on e overlaps cache block b. Under c->lock. */
static bool write_overlaps(const struct hl_cache *c, struct map_ent *e, uint64_t b)
{
	uint64_t s = blk_start(c, b), end = s + c->bs;
	struct eng_req *w;

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
		if (fill_prepare(req, io, k, data, false, &w)) {
			req->iof[k] = IOF_QUEUED;
			barrier |= io->meta_barrier != 0;
		} else if (w) {
			req->iof[k] = IOF_WRITTEN;
		}
	}
	fills_start(req, first_fill, barrier);
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
		reply(req, req->op == HL_IO_READ ? req->status : 0);
		req_free(req);
		return;
	}
	reply(req, 0);
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
	struct hl_cache_io *io = &req->ios[s->k];
	uint64_t b0 = blk_start(c, io->block);

	dev_error(c, req->ent, rc);
	cnt_add(&c->st.hit_retries, 1);
	cnt_add(&req->ent->st.hit_retries, 1);
	req->all_hit = false;
	s->kind = SUB_RETRY;
	s->lo = HL_MAX(req->off, b0);
	s->hi = HL_MIN(req->off + req->len, b0 + c->bs);
	/*
	 * s->buf holds the block's requested sectors, which cover [lo, hi); a
	 * direct hit's sectors are exactly [lo, hi), so buf is where they go.
	 */
	s->iov.iov_base = s->buf;
	rc = sub_submit(s, req->co->inner, HL_IO_READ, s->lo, s->hi - s->lo);
	if (rc && !req->status)
		req->status = rc;
}

/* A stitched piece of valid sectors could not be read from the cache device: use the origin. */
static void piece_retry(struct eng_req *req, struct eng_sub *s, int rc)
{
	dev_error(req->c, req->ent, rc);
	cnt_add(&req->c->st.hit_retries, 1);
	cnt_add(&req->ent->st.hit_retries, 1);
	s->kind = SUB_RETRY;
	s->hi = HL_MIN(s->hi, req->co->inner->size); /* a last sector cut by the LUN end */
	rc = sub_submit(s, req->co->inner, HL_IO_READ, s->lo, s->hi - s->lo);
	if (rc && !req->status)
		req->status = rc;
}

static void sub_cb(struct hl_origin_io *io, int result)
{
	struct eng_sub *s = io->arg;
	struct eng_req *req = s->req;
	struct hl_cache *c = req->c;

	switch (s->kind) {
	case SUB_HIT:
		if (result) {
			hit_retry(req, s, result);
		} else if (!s->direct) {
			struct hl_cache_io *cio = &req->ios[s->k];
			uint64_t lo = blk_start(c, cio->block) + (uint64_t)cio->first * SECT;
			copy_out(req, s->buf, lo, lo + (uint64_t)cio->nsect * SECT);
		}
		break;
	case SUB_RETRY:
	case SUB_RUN:
		if (result) {
			if (!req->status)
				req->status = result;
		} else if (!s->direct) {
			copy_out(req, s->buf, s->lo, s->hi);
		}
		break;
	case SUB_FILL:
		/* A write past the end of a truncated file would extend it: look. */
		if (!result && device_check_size(c))
			result = -EIO;
		if (result) {
			dev_error(c, req->ent, result);
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
	case SUB_PHIT:
		if (result)
			piece_retry(req, s, result);
		else
			copy_out(req, s->buf, s->lo, s->hi);
		break;
	case SUB_RMW: {
		struct eng_sub *f = &req->subs[s->peer];
		if (result) {
			dev_error(c, req->ent, result);
			f->rmw_failed = true;
		} else {
			rmw_merge(req, f, s);
		}
		rmw_piece_done(req, f);
		break;
	}
	case SUB_WRITE:
		req->status = result;
		break;
	case SUB_SKIPPED:
	case SUB_BUF:
		break;
	}
	sub_done(req);
}

static void start_hit(struct eng_req *req, uint32_t k)
{
	struct hl_cache *c = req->c;
	struct hl_cache_io *io = &req->ios[k];
	uint64_t bytes = (uint64_t)io->nsect * SECT;
	uint64_t lo = blk_start(c, io->block) + (uint64_t)io->first * SECT;
	struct eng_sub *s = sub_new(req, SUB_HIT, k);
	int rc = -EIO;

	if (!s) {
		req->status = -ENOMEM;
		return;
	}
	/* Most hits are whole sectors of the request: read them straight into its buffer. */
	if (!req->no_data && lo >= req->off && lo + bytes <= req->off + req->len)
		s->buf = iov_span(req->uio->iov, req->uio->iovcnt, lo - req->off, bytes);
	s->direct = s->buf != NULL;
	if (!s->buf && !(s->buf = abuf(bytes))) {
		req->status = -ENOMEM;
		return;
	}
	s->own = !s->direct;
	s->iov.iov_base = s->buf;
	if (!atomic_load(&c->failed))
		rc = sub_submit(s, c->data, HL_IO_READ,
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
	struct eng_sub *s = sub_new(req, SUB_PHIT, k);
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
		rc = sub_submit(s, c->data, HL_IO_READ,
		                c->layout.data_off + (uint64_t)io->slot * c->bs + in_blk, q - p);
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
	struct eng_sub *b = sub_new(req, SUB_BUF, ka);
	uint8_t *buf = abuf(HL_ALIGN_UP(hi - lo, (uint64_t)SECT));

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
			struct eng_sub *s = sub_new(req, SUB_RUN, ka);
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
			rc = sub_submit(s, req->co->inner, HL_IO_READ, p, q - p);
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
	s = sub_new(req, SUB_RUN, ka);
	if (!s || !(s->buf = abuf(hi - lo))) {
		req->status = -ENOMEM;
		return;
	}
	s->own = true;
	s->lo = lo;
	s->hi = hi;
	for (uint32_t k = ka; k <= kb; k++)
		req->run_of[k] = (int32_t)(s - req->subs);
	s->iov.iov_base = s->buf;
	rc = sub_submit(s, req->co->inner, HL_IO_READ, lo, hi - lo);
	if (rc && !req->status)
		req->status = rc;
}

/* READ and PREFETCH (a read whose data nobody wants: it only warms the cache). */
static int co_read(struct hl_origin *o, struct hl_origin_io *uio)
{
	struct co_priv *co = co_of(o);
	struct hl_cache *c = co->c;
	uint32_t nb = hl_cache_core_nblocks(c->core, uio->offset, uio->length);
	uint32_t partial_sect = 0;
	bool partial = false;
	struct eng_req *req;
	int n;

	req = req_new(o, uio, nb, 2 * nb, 3 * nb + 1);
	if (!req)
		return -ENOMEM;
	req->no_data = uio->op != HL_IO_READ;
	pthread_mutex_lock(&c->lock);
	n = hl_cache_core_read(c->core, co->ent->id, uio->offset, uio->length, req->ios, 2 * nb);
	for (int k = 0; k < n && k < (int)nb; k++) {
		struct hl_cache_io *io = &req->ios[k];
		if (io_fills(io) && write_overlaps(c, co->ent, io->block))
			io->fill_nsect = 0; /* the origin may still return pre-write data */
		if (io->kind == HL_CACHE_IO_PARTIAL)
			partial = true;
	}
	req->nios = n > 0 ? (uint32_t)n : 0;
	if (partial)
		partial_sect = vmap_fill(req);
	pthread_mutex_unlock(&c->lock);
	if (n < 0) {
		req_free(req);
		return n == -ENOMEM ? -ENOMEM : -EINVAL;
	}
	if (partial_sect) {
		/* Stitched runs: one sub per extent besides the usual ones (see start_stitched). */
		uint32_t need = 4 * nb + 1 + partial_sect;
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
			} else {
				start_hit(req, k);
			}
			k++;
			continue;
		}
		req->all_hit = false;
		uint32_t kb = k;
		while (kb + 1 < nb && req->ios[kb + 1].kind != HL_CACHE_IO_HIT)
			kb++;
		start_run(req, k, kb);
		k = kb + 1;
	}
	phase_end(req);
	req->inside_submit = false;
	return 0;
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
	iov_to_buf(req->uio->iov, req->uio->iovcnt, wlo - req->off,
	           c->window + (uint64_t)(io->slot - c->nslots) * c->bs +
	               (wlo - blk_start(c, io->block)),
	           whi - wlo);
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
		if (io->ram) {
			if (ram_update(req, io, wlo, whi))
				req->iof[k] = IOF_WRITTEN;
			continue;
		}
		if (atomic_load(&c->failed) || !(tmp = abuf(fe - fs)))
			continue;
		iov_to_buf(req->uio->iov, req->uio->iovcnt, wlo - req->off, tmp + (wlo - fs),
		           whi - wlo);
		if (fill_prepare(req, io, k, tmp, true, &w))
			req->iof[k] = IOF_QUEUED;
		else if (w)
			req->iof[k] = IOF_WRITTEN;
	}
	reply(req, result);
	/* The barrier of these slots was taken before the origin write. */
	fills_start(req, first_fill, false);
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
	s->io.op = uio->op;
	s->io.flags = uio->flags;
	s->io.offset = uio->offset;
	s->io.length = uio->length;
	s->io.iov = uio->iov;
	s->io.iovcnt = uio->iovcnt;
	s->io.cb = sub_cb;
	s->io.arg = s;
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
		dev_error(req->c, req->ent, w->rc);
	rc = write_issue(req);
	if (rc) {
		req->status = rc;
		write_done(req);
	}
}

static int co_write(struct hl_origin *o, struct hl_origin_io *uio)
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
	req = req_new(o, uio, 0, huge ? 0 : nb, huge ? 1 : nb + 3);
	if (!req)
		return -ENOMEM;
	pthread_mutex_lock(&c->lock);
	if (huge) {
		/* Too many blocks to list: drop the range, always flush the records first. */
		hl_cache_core_invalidate(c->core, co->ent->id, uio->offset, uio->length);
		sync = true;
	} else {
		n = hl_cache_core_write_begin(c->core, co->ent->id, uio->offset, uio->length,
		                              req->ios, nb);
		if (n < 0) {
			pthread_mutex_unlock(&c->lock);
			req_free(req);
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
		meta_wait(req, write_after_sync);
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
		req_free(req);
	}
	return rc;
}

/* ------------------------------------------------------------------ */
/* The cached origin                                                  */
/* ------------------------------------------------------------------ */

static int co_check(const struct hl_origin *o, const struct hl_origin_io *io)
{
	uint64_t sum = 0;

	if (!io->cb)
		return -EINVAL;
	if (io->offset > o->size || io->length > o->size - io->offset)
		return -EINVAL;
	if (io->op == HL_IO_READ || io->op == HL_IO_WRITE) {
		if (io->iovcnt < 0 || (io->iovcnt && !io->iov))
			return -EINVAL;
		for (int i = 0; i < io->iovcnt; i++)
			sum += io->iov[i].iov_len;
		if (sum != io->length)
			return -EINVAL;
	}
	if (io->op != HL_IO_READ && io->op != HL_IO_PREFETCH && o->read_only)
		return -EROFS;
	return 0;
}

static void prefetch_noop_fire(struct hl_timer *t)
{
	struct hl_origin_io *io = t->arg;

	io->cb(io, 0);
}

/* Nothing to warm: complete from a timer (never inside submit). */
static int prefetch_noop(struct hl_origin_io *io)
{
	struct hl_timer *t = (struct hl_timer *)io->priv;

	_Static_assert(sizeof(struct hl_timer) <= sizeof(io->priv), "priv too small");
	hl_timer_init(t, prefetch_noop_fire, io);
	hl_timer_start(hl_reactor_current(), t, 0);
	return 0;
}

static int co_submit(struct hl_origin *o, struct hl_origin_io *io)
{
	struct co_priv *co = co_of(o);
	struct hl_cache *c = co->c;
	struct map_ent *e = co->ent;
	int rc;

	if (io->op == HL_IO_FLUSH)
		return hl_origin_submit(co->inner, io);
	rc = co_check(o, io);
	if (rc)
		return rc;
	if (io->op == HL_IO_READ || io->op == HL_IO_WRITE) {
		unsigned b = hl_cache_size_bucket(io->length);
		uint64_t *h = io->op == HL_IO_READ ? c->st.rsize : c->st.wsize;
		uint64_t *he = io->op == HL_IO_READ ? e->st.rsize : e->st.wsize;
		cnt_add(&h[b], 1);
		cnt_add(&he[b], 1);
	}
	if (!hl_reactor_current())
		return -EINVAL;
	if (atomic_load(&c->failed)) {
		cnt_add(&c->st.passthrough_ios, 1);
		cnt_add(&e->st.passthrough_ios, 1);
		if (io->op == HL_IO_PREFETCH)
			return prefetch_noop(io);
		return hl_origin_submit(co->inner, io);
	}
	if (io->op == HL_IO_PREFETCH && !io->length)
		return prefetch_noop(io);
	if (io->op == HL_IO_READ || io->op == HL_IO_PREFETCH)
		return io->length ? co_read(o, io) : hl_origin_submit(co->inner, io);
	/* COMPARE AND WRITE changes the range like a write (the cache drops it). */
	if (io->op == HL_IO_WRITE || io->op == HL_IO_DISCARD || io->op == HL_IO_WRITE_ZEROES ||
	    io->op == HL_IO_COMPARE_AND_WRITE)
		return co_write(o, io);
	return hl_origin_submit(co->inner, io);
}

/*
 * The origin's events (origin.h; its own thread). A resize drops the blocks
 * between the old and the new end (after a shrink they lie past the end; a
 * grow must read back what the origin has there now, not what was cached
 * before an earlier shrink). Fenced: other clients may write the origin now,
 * so nothing cached can be trusted. Then the event goes up to the LU.
 */
static void co_origin_event(void *arg, struct hl_origin *inner, enum hl_origin_event ev,
                            uint64_t old_size)
{
	struct hl_origin *o = arg;
	struct co_priv *co = co_of(o);
	uint64_t size = __atomic_load_n(&inner->size, __ATOMIC_ACQUIRE);
	uint64_t lo = ev == HL_ORIGIN_FENCED ? 0 : HL_MIN(size, old_size);
	uint64_t hi = ev == HL_ORIGIN_FENCED ? UINT64_MAX : HL_MAX(size, old_size);

	pthread_mutex_lock(&co->c->lock);
	hl_cache_core_invalidate(co->c->core, co->ent->id, lo, hi - lo);
	pthread_mutex_unlock(&co->c->lock);
	atomic_fetch_add(&co->c->changes, 1); /* the records follow within meta_interval_ms */
	hl_origin_notify(o, ev, size);
}

static int co_open(struct hl_origin *o, const char *target, const struct hl_origin_opts *opts)
{
	(void)o;
	(void)target;
	(void)opts;
	return -EOPNOTSUPP; /* only made by hl_cache_attach() */
}

static void co_close(struct hl_origin *o)
{
	struct co_priv *co = co_of(o);

	pthread_mutex_lock(&co->c->lock);
	co->ent->attached = false; /* its blocks stay: a restart finds them */
	pthread_mutex_unlock(&co->c->lock);
	hl_origin_close(co->inner);
	co->inner = NULL;
}

static const struct hl_origin_ops cache_origin_ops = {
    .name = "cache",
    .scheme = NULL,
    .priv_size = sizeof(struct co_priv),
    .open = co_open,
    .close = co_close,
    .submit = co_submit,
};

/* ------------------------------------------------------------------ */
/* Metadata thread                                                    */
/* ------------------------------------------------------------------ */

static int map_write(struct hl_cache *c, const char *state);

/* The device failed: make sure a restart cannot trust its metadata. Meta thread. */
static void meta_kill(struct hl_cache *c)
{
	uint8_t *z;

	if (c->dead)
		return;
	c->dead = true;
	/* The map says "failed" (a restart formats), and both superblocks are wiped. */
	map_write(c, "failed");
	z = abuf(SB_KILL_LEN);
	if (z) {
		memset(z, 0, SB_KILL_LEN);
		if (c->dev->ops->pwrite(c->dev, z, SB_KILL_LEN, 0) == 0)
			c->dev->ops->flush(c->dev);
		free(z);
	}
}

static void meta_post(struct hl_cache *c, struct meta_wait *w)
{
	/* The reactor's call queue may be momentarily full: retry, this is not a reactor. */
	for (int i = 0; !atomic_load(&c->mdrop); i++) {
		if (hl_reactor_call(w->r, meta_wait_post, w) != -ENOMEM)
			return;
		if (i == 5000) {
			HL_ERR("cache", "cache %s: a reactor takes no calls; an I/O is lost",
			       c->name);
			return;
		}
		usleep(1000);
	}
}

static void *meta_main(void *arg)
{
	struct hl_cache *c = arg;
	unsigned long synced_changes = atomic_load(&c->changes);

	atomic_store(&c->synced, synced_changes);
	struct timespec next;

	clock_gettime(CLOCK_MONOTONIC, &next);
	pthread_mutex_lock(&c->mlock);
	for (;;) {
		struct meta_wait *list;
		bool stop, fail, periodic = false;
		int rc = 0;

		while (!c->mw_head && !c->mstop && !c->fail_pending) {
			struct timespec now;
			clock_gettime(CLOCK_MONOTONIC, &now);
			if (now.tv_sec > next.tv_sec ||
			    (now.tv_sec == next.tv_sec && now.tv_nsec >= next.tv_nsec)) {
				periodic = true;
				break;
			}
			pthread_cond_timedwait(&c->mcond, &c->mlock, &next);
		}
		list = c->mw_head;
		c->mw_head = NULL;
		c->mw_tail = &c->mw_head;
		stop = c->mstop;
		fail = c->fail_pending;
		c->fail_pending = false;
		pthread_mutex_unlock(&c->mlock);

		if (periodic && !atomic_load(&c->failed) && device_check_size(c)) {
			dev_error(c, NULL, -EIO);
			fail = true; /* meta_kill is idempotent: dev_error's flag is harmless */
		}
		if (fail)
			meta_kill(c);
		unsigned long ch = atomic_load(&c->changes);
		if (!c->dead && !atomic_load(&c->failed) &&
		    (list || (periodic && ch != synced_changes))) {
			/*
			 * Records are snapshotted under the cache mutex, the device I/O
			 * (data flush, record pages, flush) runs without it: reactors
			 * never wait for the device. A record only claims sectors whose
			 * fill completed before the snapshot, and the data flush comes
			 * after it.
			 */
			pthread_mutex_lock(&c->sync_lock);
			rc = cache_meta_sync_locked(c->dev, &c->layout, c->core, &c->lock);
			pthread_mutex_unlock(&c->sync_lock);
			cnt_add(&c->meta_syncs, 1);
			synced_changes = ch;
			if (!rc)
				atomic_store(&c->synced, ch);
			if (rc) {
				dev_error(c, NULL, rc);
				meta_kill(c);
			}
		}
		if (periodic) {
			clock_gettime(CLOCK_MONOTONIC, &next);
			next.tv_sec += c->interval_ms / 1000;
			next.tv_nsec += (long)(c->interval_ms % 1000) * 1000000L;
			if (next.tv_nsec >= 1000000000L) {
				next.tv_sec++;
				next.tv_nsec -= 1000000000L;
			}
		}
		while (list) {
			struct meta_wait *w = list;
			list = w->next;
			w->rc = rc;
			meta_post(c, w);
		}
		pthread_mutex_lock(&c->mlock);
		if (stop && !c->mw_head)
			break;
	}
	pthread_mutex_unlock(&c->mlock);
	return NULL;
}

/* ------------------------------------------------------------------ */
/* The disk map file                                                  */
/* ------------------------------------------------------------------ */

/*
 * Text, rewritten atomically (tmp + fsync + rename):
 *   hotlun-cache-map 1
 *   state open|clean|failed
 *   geometry BLOCK_SIZE NSLOTS DEVICE_SIZE
 *   next ID
 *   disk ID QUOTA SIZE NAME IDENT...
 * A missing or unreadable map, a "failed" state or another geometry make
 * hl_cache_open format the device: LUN ids are only meaningful with it.
 */
static int map_write(struct hl_cache *c, const char *state)
{
	char *tmp = NULL, *dir = NULL;
	FILE *f;
	int rc = 0, fd;

	if (asprintf(&tmp, "%s.tmp", c->map_path) < 0)
		return -ENOMEM;
	f = fopen(tmp, "w");
	if (!f) {
		rc = -errno;
		goto out;
	}
	fprintf(f, "%s\nstate %s\ngeometry %u %llu %llu\nnext %u\n", MAP_MAGIC, state, c->bs,
	        (unsigned long long)c->nslots, (unsigned long long)c->dev->size, c->next_id);
	for (size_t i = 0; i < c->n_ents; i++) {
		struct map_ent *e = c->ents[i];
		fprintf(f, "disk %u %llu %llu %s %s\n", e->id, (unsigned long long)e->quota,
		        (unsigned long long)e->size, e->name, e->ident);
	}
	if (fflush(f) || fsync(fileno(f)))
		rc = -errno;
	if (fclose(f) && !rc)
		rc = -errno;
	if (!rc && rename(tmp, c->map_path))
		rc = -errno;
	if (!rc) {
		dir = strdup(c->map_path);
		if (dir) {
			fd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			if (fd >= 0) {
				fsync(fd);
				close(fd);
			}
		}
	}
out:
	if (rc) {
		HL_ERR("cache", "cache %s: cannot write %s: %s", c->name, c->map_path,
		       strerror(-rc));
		unlink(tmp);
	}
	free(dir);
	free(tmp);
	return rc;
}

static void ent_free(struct map_ent *e)
{
	if (!e)
		return;
	free(e->name);
	free(e->ident);
	free(e);
}

static struct map_ent *ent_new(uint16_t id, uint64_t quota, uint64_t size, const char *name,
                               const char *ident)
{
	struct map_ent *e = calloc(1, sizeof(*e));

	if (!e)
		return NULL;
	e->id = id;
	e->quota = quota;
	e->size = size;
	e->name = strdup(name);
	e->ident = strdup(ident);
	hl_list_init(&e->wlist);
	if (!e->name || !e->ident) {
		ent_free(e);
		return NULL;
	}
	return e;
}

static int ents_push(struct hl_cache *c, struct map_ent *e)
{
	struct map_ent **n = realloc(c->ents, (c->n_ents + 1) * sizeof(*n));

	if (!n)
		return -ENOMEM;
	c->ents = n;
	c->ents[c->n_ents++] = e;
	return 0;
}

/* @return true when the map is usable for this device (else: format). */
static bool map_load(struct hl_cache *c)
{
	FILE *f = fopen(c->map_path, "r");
	char line[4096], state[32] = "", name[256];
	unsigned bs = 0, next = 0, id;
	unsigned long long nslots = 0, devsize = 0, quota, size;
	bool ok = false;
	int pos;

	if (!f)
		return false;
	if (!fgets(line, sizeof(line), f) || strncmp(line, MAP_MAGIC, strlen(MAP_MAGIC)))
		goto out;
	if (!fgets(line, sizeof(line), f) || sscanf(line, "state %31s", state) != 1 ||
	    !strcmp(state, "failed"))
		goto out;
	if (!fgets(line, sizeof(line), f) ||
	    sscanf(line, "geometry %u %llu %llu", &bs, &nslots, &devsize) != 3 || bs != c->bs ||
	    nslots != c->nslots || devsize != c->dev->size)
		goto out;
	if (!fgets(line, sizeof(line), f) || sscanf(line, "next %u", &next) != 1 || next > 0xffff)
		goto out;
	c->next_id = (uint16_t)next;
	while (fgets(line, sizeof(line), f)) {
		struct map_ent *e;
		line[strcspn(line, "\n")] = 0;
		if (sscanf(line, "disk %u %llu %llu %255s %n", &id, &quota, &size, name, &pos) !=
		        4 ||
		    id > 0xffff)
			goto out;
		e = ent_new((uint16_t)id, quota, size, name, line + pos);
		if (!e || ents_push(c, e)) {
			ent_free(e);
			goto out;
		}
	}
	ok = true;
out:
	fclose(f);
	if (!ok) {
		for (size_t i = 0; i < c->n_ents; i++)
			ent_free(c->ents[i]);
		c->n_ents = 0;
		c->next_id = 0;
	}
	return ok;
}

static struct map_ent *ent_find(struct hl_cache *c, const char *name)
{
	for (size_t i = 0; i < c->n_ents; i++)
		if (!strcmp(c->ents[i]->name, name))
			return c->ents[i];
	return NULL;
}

static bool id_used(struct hl_cache *c, uint16_t id)
{
	for (size_t i = 0; i < c->n_ents; i++)
		if (c->ents[i]->id == id)
			return true;
	return false;
}

/* A LUN id never handed out by this map (ids only grow, wrapping after 65535). */
static int id_alloc(struct hl_cache *c, uint16_t *out)
{
	for (uint32_t tries = 0; tries < HL_CACHE_MAX_LUNS; tries++) {
		uint16_t id = c->next_id++;
		if (!id_used(c, id)) {
			*out = id;
			return 0;
		}
	}
	return -ENOSPC;
}

/* The origin's identity: its URI without throttle(...) wrappers (lab knobs, not identity). */
static const char *origin_ident(const char *uri)
{
	while (!strncmp(uri, "throttle(", 9)) {
		const char *p = strstr(uri, "):");
		if (!p)
			break;
		uri = p + 2;
	}
	return uri;
}

/* ------------------------------------------------------------------ */
/* Open, attach, close                                                */
/* ------------------------------------------------------------------ */

static void cache_free(struct hl_cache *c)
{
	if (!c)
		return;
	if (c->data)
		hl_origin_close(c->data);
	if (c->dev)
		hl_cache_dev_close(c->dev);
	hl_cache_core_destroy(c->core);
	for (size_t i = 0; i < c->n_ents; i++)
		ent_free(c->ents[i]);
	free(c->ents);
	free(c->window);
	free(c->name);
	free(c->device);
	free(c->map_path);
	pthread_mutex_destroy(&c->lock);
	pthread_mutex_destroy(&c->sync_lock);
	pthread_mutex_destroy(&c->mlock);
	pthread_cond_destroy(&c->mcond);
	free(c);
}

/*
 * Before the device is opened (which extends a regular file to its size):
 * a file shorter than the device its map describes was truncated, and its
 * records may claim slots whose data is gone (a hole reads as zeroes).
 * Refuse it rather than extend it and serve the holes as data. A map that
 * says "failed", or none, formats the device anyway. @return 0 or -EIO.
 */
static int device_shrank(struct hl_cache *c)
{
	char line[256], state[32] = "";
	unsigned long long devsize = 0;
	unsigned bs;
	unsigned long long nslots;
	struct stat st;
	bool claims = false;
	FILE *f;

	if (stat(c->device, &st) || !S_ISREG(st.st_mode))
		return 0;
	f = fopen(c->map_path, "r");
	if (!f)
		return 0;
	if (fgets(line, sizeof(line), f) && !strncmp(line, MAP_MAGIC, strlen(MAP_MAGIC)) &&
	    fgets(line, sizeof(line), f) && sscanf(line, "state %31s", state) == 1 &&
	    strcmp(state, "failed") && fgets(line, sizeof(line), f) &&
	    sscanf(line, "geometry %u %llu %llu", &bs, &nslots, &devsize) == 3)
		claims = true;
	fclose(f);
	if (!claims || (uint64_t)st.st_size >= devsize)
		return 0;
	HL_ERR("cache",
	       "cache %s: %s is %llu bytes, smaller than the %llu bytes its map %s describes "
	       "(truncated?): refusing the cache; delete the map to format the device",
	       c->name, c->device, (unsigned long long)st.st_size, devsize, c->map_path);
	return -EIO;
}

int hl_cache_open(const struct hl_cache_config *cfg, struct hl_cache **out)
{
	struct hl_cache_params p;
	struct hl_cache_core_info info;
	struct hl_cache *c;
	pthread_condattr_t ca;
	const char *adm;
	char *uri = NULL;
	bool usable;
	int rc, restored = 0;

	if (!cfg || !cfg->name || !cfg->device || !out)
		return -EINVAL;
	hl_cache_params_default(&p);
	p.block_size = cfg->block_size ? cfg->block_size : p.block_size;
	if (p.block_size < HL_CACHE_MIN_BLOCK || p.block_size > HL_CACHE_MAX_BLOCK ||
	    (p.block_size & (p.block_size - 1))) {
		HL_ERR("cache", "cache %s: block_size %u is not a power of two in 4K..1M",
		       cfg->name, p.block_size);
		return -EINVAL;
	}
	adm = cfg->admission;
	if (!adm || !strcmp(adm, "frequency"))
		adm = "freq";
	if (hl_admit_parse(adm, &p.admit, &p.admit_param)) {
		HL_ERR("cache", "cache %s: unknown admission \"%s\"", cfg->name, cfg->admission);
		return -EINVAL;
	}
	if (!cfg->write_policy || !strcmp(cfg->write_policy, "update")) {
		p.write_mode = HL_CACHE_WRITE_UPDATE;
	} else if (!strcmp(cfg->write_policy, "invalidate")) {
		p.write_mode = HL_CACHE_WRITE_INVALIDATE;
	} else {
		HL_ERR("cache", "cache %s: unknown write_policy \"%s\"", cfg->name,
		       cfg->write_policy);
		return -EINVAL;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->sync_lock, NULL);
	pthread_mutex_init(&c->mlock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->mcond, &ca);
	pthread_condattr_destroy(&ca);
	c->mw_tail = &c->mw_head;
	c->interval_ms = cfg->meta_interval_ms ? cfg->meta_interval_ms : 1000;
	c->bs = p.block_size;
	c->shift = (uint32_t)__builtin_ctz(p.block_size);
	c->name = strdup(cfg->name);
	c->device = strdup(cfg->device);
	if (cfg->map_path)
		c->map_path = strdup(cfg->map_path);
	else if (asprintf(&c->map_path, "%s.map", cfg->device) < 0)
		c->map_path = NULL;
	rc = -ENOMEM;
	if (!c->name || !c->device || !c->map_path)
		goto fail;

	rc = device_shrank(c);
	if (rc)
		goto fail;
	rc = hl_cache_dev_open_file(cfg->device, cfg->size, &c->dev);
	if (rc) {
		HL_ERR("cache", "cache %s: cannot open %s: %s", c->name, cfg->device,
		       strerror(-rc));
		goto fail;
	}
	rc = hl_cache_layout_compute(c->dev->size, c->bs, &c->layout);
	if (rc) {
		HL_ERR("cache", "cache %s: %s: too small for one %u-byte block", c->name,
		       cfg->device, c->bs);
		goto fail;
	}
	c->nslots = c->layout.nslots;
	p.capacity = c->nslots * c->bs;
	rc = hl_cache_core_create(&p, &c->core);
	if (rc)
		goto fail;
	hl_cache_core_info(c->core, &info);
	c->nwin = info.window_slots;
	if (c->nwin) {
		c->window = abuf(c->nwin * c->bs);
		rc = -ENOMEM;
		if (!c->window)
			goto fail;
	}

	usable = map_load(c);
	if (usable) {
		for (size_t i = 0; i < c->n_ents; i++) {
			rc = hl_cache_core_lun_add(c->core, c->ents[i]->id, c->ents[i]->quota);
			if (rc)
				HL_WARN("cache",
				        "cache %s: disk %s: %s: its cached blocks are dropped",
				        c->name, c->ents[i]->name, strerror(-rc));
		}
		rc = hl_cache_meta_load(c->dev, c->core, &c->layout);
		if (rc >= 0)
			restored = rc;
		else if (rc != -ENODATA)
			goto fail_dev;
		usable = rc >= 0;
	}
	if (!usable) {
		rc = hl_cache_meta_format(c->dev, c->bs, &c->layout);
		if (rc)
			goto fail_dev;
	}
	rc = map_write(c, "open");
	if (rc)
		goto fail;
	rc = -ENOMEM;
	if (asprintf(&uri, "file:%s", cfg->device) < 0)
		goto fail;
	/* A read past the end of a device that shrank must fail, never return zeroes. */
	rc = hl_origin_open(uri, &(struct hl_origin_opts){.direct = true, .eof_error = true},
	                    &c->data);
	free(uri);
	if (rc) {
		HL_ERR("cache", "cache %s: cannot open %s for data I/O: %s", c->name, cfg->device,
		       strerror(-rc));
		goto fail;
	}
	rc = -pthread_create(&c->meta_thr, NULL, meta_main, c);
	if (rc)
		goto fail;
	c->meta_started = true;
	HL_NOTICE("cache",
	          "cache %s: %s, %llu blocks of %u KiB (+%llu in RAM), admission %s, "
	          "%s; %s",
	          c->name, cfg->device, (unsigned long long)c->nslots, c->bs / 1024,
	          (unsigned long long)c->nwin, adm,
	          cfg->write_policy ? cfg->write_policy : "update",
	          usable ? "warm restart" : "formatted");
	if (usable)
		HL_NOTICE("cache", "cache %s: %d block(s) restored", c->name, restored);
	*out = c;
	return 0;
fail_dev:
	HL_ERR("cache", "cache %s: %s: metadata: %s", c->name, cfg->device, strerror(-rc));
fail:
	cache_free(c);
	return rc;
}

int hl_cache_attach(struct hl_cache *c, const char *disk_name, uint64_t quota_bytes,
                    struct hl_origin *inner, struct hl_origin **out)
{
	const char *ident;
	struct map_ent *e;
	struct hl_origin *o;
	struct co_priv *co;
	bool changed = false, sync = false;
	int rc = 0;

	if (!c || !disk_name || !*disk_name || !inner || !out || strpbrk(disk_name, " \t\n"))
		return -EINVAL;
	ident = origin_ident(inner->uri);
	if (strchr(ident, '\n'))
		return -EINVAL;
	pthread_mutex_lock(&c->sync_lock); /* no record sync of the meta thread meanwhile */
	pthread_mutex_lock(&c->lock);
	e = ent_find(c, disk_name);
	if (e && e->attached) {
		rc = -EEXIST;
		goto out;
	}
	if (e && (strcmp(e->ident, ident) || e->size != inner->size || e->quota != quota_bytes)) {
		/* Another origin (or quota) under the old name: its blocks must never be served. */
		HL_NOTICE("cache",
		          "cache %s: disk %s: origin or quota changed (%s, %llu bytes): "
		          "dropping its cached blocks",
		          c->name, disk_name, ident, (unsigned long long)inner->size);
		hl_cache_core_lun_remove(c->core, e->id);
		for (size_t i = 0; i < c->n_ents; i++) {
			if (c->ents[i] == e) {
				c->ents[i] = c->ents[--c->n_ents];
				break;
			}
		}
		ent_free(e);
		e = NULL;
		sync = true;
	}
	if (!e) {
		uint16_t id;
		rc = id_alloc(c, &id);
		if (rc)
			goto out;
		e = ent_new(id, quota_bytes, inner->size, disk_name, ident);
		rc = -ENOMEM;
		if (!e)
			goto out;
		rc = hl_cache_core_lun_add(c->core, id, quota_bytes);
		if (rc == -EEXIST) {
			/* A LUN id the core knows but the map forgot: start it empty. */
			hl_cache_core_lun_remove(c->core, id);
			rc = hl_cache_core_lun_add(c->core, id, quota_bytes);
			sync = true;
		}
		if (!rc)
			rc = ents_push(c, e);
		if (rc) {
			HL_ERR("cache", "cache %s: disk %s: %s", c->name, disk_name, strerror(-rc));
			ent_free(e);
			goto out;
		}
		changed = true;
	}
	if (sync && !c->dead) {
		/* Before any I/O: the dropped blocks' records must stop claiming data. */
		rc = hl_cache_meta_sync(c->dev, &c->layout, c->core);
		if (rc) {
			HL_ERR("cache", "cache %s: metadata: %s", c->name, strerror(-rc));
			goto out;
		}
	}
	if (changed) {
		rc = map_write(c, "open");
		if (rc)
			goto out;
	}
	rc = -ENOMEM;
	o = calloc(1, sizeof(*o) + sizeof(struct co_priv));
	if (!o)
		goto out;
	if (asprintf(&o->uri, "cache(%s):%s", c->name, inner->uri) < 0) {
		free(o);
		goto out;
	}
	o->ops = &cache_origin_ops;
	o->size = inner->size;
	o->phys_block_size = inner->phys_block_size;
	o->read_only = inner->read_only;
	o->can_discard = inner->can_discard;
	o->zeroes_after_discard = inner->zeroes_after_discard;
	co = co_of(o);
	co->c = c;
	co->inner = inner;
	co->ent = e;
	e->attached = true;
	hl_origin_listen(inner, co_origin_event, o);
	*out = o;
	rc = 0;
	HL_NOTICE("cache", "cache %s: disk %s attached (lun id %u%s)", c->name, disk_name, e->id,
	          changed ? ", new" : ", warm");
out:
	pthread_mutex_unlock(&c->lock);
	pthread_mutex_unlock(&c->sync_lock);
	return rc;
}

int hl_cache_set_admission(struct hl_cache *c, const char *admission)
{
	const char *adm = !admission || !strcmp(admission, "frequency") ? "freq" : admission;
	enum hl_admit_kind kind;
	uint32_t param;
	int rc;

	if (hl_admit_parse(adm, &kind, &param))
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	rc = hl_cache_core_set_admission(c->core, kind, param);
	pthread_mutex_unlock(&c->lock);
	if (rc == 0)
		HL_NOTICE("cache", "cache %s: admission now %s", c->name, adm);
	return rc;
}

void hl_cache_quiesce(struct hl_cache *c)
{
	if (!c || !c->meta_started)
		return;
	pthread_mutex_lock(&c->mlock);
	c->mstop = true;
	atomic_store(&c->mdrop, true);
	pthread_cond_signal(&c->mcond);
	pthread_mutex_unlock(&c->mlock);
	pthread_join(c->meta_thr, NULL);
	c->meta_started = false;
}

void hl_cache_close(struct hl_cache *c)
{
	struct hl_cache_stats st;
	int rc;

	if (!c)
		return;
	if (c->meta_started) {
		pthread_mutex_lock(&c->mlock);
		c->mstop = true;
		pthread_cond_signal(&c->mcond);
		pthread_mutex_unlock(&c->mlock);
		pthread_join(c->meta_thr, NULL);
		c->meta_started = false;
	}
	for (size_t i = 0; i < c->n_ents; i++)
		if (c->ents[i]->attached)
			HL_WARN("cache", "cache %s: disk %s still attached at close", c->name,
			        c->ents[i]->name);
	hl_cache_core_stats(c->core, -1, &st);
	HL_NOTICE("cache",
	          "cache %s: %llu reads (%llu hits, %llu partial, %llu misses), "
	          "%llu MiB from cache, %llu MiB from origin, %llu writes",
	          c->name, (unsigned long long)st.read_reqs, (unsigned long long)st.read_hits,
	          (unsigned long long)st.read_partial, (unsigned long long)st.read_misses,
	          (unsigned long long)(st.bytes_read_cache >> 20),
	          (unsigned long long)(st.bytes_read_origin >> 20),
	          (unsigned long long)st.write_reqs);
	if (atomic_load(&c->inflight)) {
		/* Fills still queued on stopped reactors: leave the data origin alone. */
		HL_WARN("cache", "cache %s: %ld request(s) still in flight at close", c->name,
		        (long)atomic_load(&c->inflight));
		c->data = NULL;
	}
	if (!c->dead && !atomic_load(&c->failed)) {
		pthread_mutex_lock(&c->lock);
		rc = hl_cache_meta_close(c->dev, &c->layout, c->core);
		pthread_mutex_unlock(&c->lock);
		if (rc)
			HL_ERR("cache", "cache %s: saving metadata: %s (the next start is cold)",
			       c->name, strerror(-rc));
		map_write(c, rc ? "failed" : "clean");
	} else if (!c->dead) {
		meta_kill(c);
	}
	cache_free(c);
}

/* ------------------------------------------------------------------ */
/* Stats                                                              */
/* ------------------------------------------------------------------ */

static void counters_copy(const struct eng_counters *s, struct hl_cache_engine_stats *out)
{
	for (unsigned i = 0; i < HL_CACHE_LAT_BUCKETS; i++) {
		out->read_hit_lat[i] = cnt_get(&s->hit_lat[i]);
		out->read_miss_lat[i] = cnt_get(&s->miss_lat[i]);
	}
	for (unsigned i = 0; i < HL_CACHE_SIZE_BUCKETS; i++) {
		out->read_size[i] = cnt_get(&s->rsize[i]);
		out->write_size[i] = cnt_get(&s->wsize[i]);
	}
	out->dev_errors = cnt_get(&s->dev_errors);
	out->origin_errors = cnt_get(&s->origin_errors);
	out->hit_retries = cnt_get(&s->hit_retries);
	out->passthrough_ios = cnt_get(&s->passthrough_ios);
	out->promotions = cnt_get(&s->promotions);
}

/* The most common read-size bucket, rounded up to a power of two, clamped to 4K..1M. */
static uint32_t recommend_block(const uint64_t *rsize)
{
	unsigned best = 0;
	uint64_t n = 0;
	uint32_t v, p = HL_CACHE_MIN_BLOCK;

	for (unsigned i = 0; i < HL_CACHE_SIZE_BUCKETS; i++) {
		if (rsize[i] >= n && rsize[i]) {
			n = rsize[i];
			best = i;
		}
	}
	if (!n)
		return 0;
	v = hl_cache_size_bounds[best];
	if (v > HL_CACHE_MAX_BLOCK)
		return HL_CACHE_MAX_BLOCK;
	while (p < v)
		p <<= 1;
	return p;
}

int hl_cache_get_stats(struct hl_cache *c, const char *disk, struct hl_cache_engine_stats *out)
{
	struct hl_cache_core_info info;
	struct map_ent *e = NULL;
	int rc = 0;

	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&c->lock);
	if (disk) {
		e = ent_find(c, disk);
		rc = e ? hl_cache_core_stats(c->core, e->id, &out->core) : -ENOENT;
	} else {
		rc = hl_cache_core_stats(c->core, -1, &out->core);
	}
	hl_cache_core_info(c->core, &info);
	pthread_mutex_unlock(&c->lock);
	if (rc)
		return rc;
	counters_copy(e ? &e->st : &c->st, out);
	if (!e) {
		out->meta_syncs = cnt_get(&c->meta_syncs);
		out->meta_waits = cnt_get(&c->meta_waits);
		out->nslots = info.nslots;
		out->used_slots = info.used_slots;
		out->window_slots = info.window_slots;
		out->inflight = (uint64_t)atomic_load(&c->inflight);
		out->meta_dirty = atomic_load(&c->changes) != atomic_load(&c->synced);
	}
	out->block_size = c->bs;
	out->recommended_block_size = recommend_block(out->read_size);
	out->passthrough = atomic_load(&c->failed);
	return 0;
}

const char *hl_cache_name(const struct hl_cache *c)
{
	return c->name;
}
