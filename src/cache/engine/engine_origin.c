/*
 * engine_origin.c - the cached origin: the wrapper hl_cache_attach() puts
 * around a disk's real origin (ops table, submit checks and the request
 * size histograms, dispatch to the read and write paths, pass-through once
 * the device failed, the inner origin's resize/fence events, and the close
 * that takes the disk's final proof).
 *
 * Shared state and the ordering rules: engine_internal.h.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/engine/engine_internal.h"
#include "hotlun/event.h"
#include "hotlun/log.h"
#include "hotlun/util.h"

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

static void kill_done(struct meta_wait *w)
{
	struct eng_req *req = hl_container_of(w, struct eng_req, mw);
	struct hl_origin_io *io = req->uio;
	int rc = hl_origin_submit(req->co->inner, io);

	engine_req_free(req);
	if (rc)
		io->cb(io, rc);
}

/*
 * A write while the device has just failed: the records on it may still
 * claim the blocks it changes, and until the kill has made the map say
 * "failed" durably (engine_meta_kill, on its own thread: a record sync
 * stuck on the dead device does not hold it up), a crash would restart
 * warm on them: stale. So it waits for that, as a write to a claimed block
 * waits for a sync; reads go through at once.
 */
static int passthrough_after_kill(struct hl_origin *o, struct hl_origin_io *io)
{
	struct eng_req *req = engine_req_new(o, io, 0, 0, 0);

	if (!req)
		return -ENOMEM;
	if (engine_meta_wait(req, kill_done))
		return 0;
	engine_req_free(req); /* killed meanwhile */
	return hl_origin_submit(co_of(o)->inner, io);
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
		if (io->op != HL_IO_READ && !atomic_load(&c->killed))
			return passthrough_after_kill(o, io);
		return hl_origin_submit(co->inner, io);
	}
	if (io->op == HL_IO_PREFETCH && !io->length)
		return prefetch_noop(io);
	if (io->op == HL_IO_READ || io->op == HL_IO_PREFETCH)
		return io->length ? engine_read(o, io) : hl_origin_submit(co->inner, io);
	/* COMPARE AND WRITE changes the range like a write (the cache drops it). */
	if (io->op == HL_IO_WRITE || io->op == HL_IO_DISCARD || io->op == HL_IO_WRITE_ZEROES ||
	    io->op == HL_IO_COMPARE_AND_WRITE)
		return engine_write(o, io);
	return hl_origin_submit(co->inner, io);
}

/*
 * The origin's events (origin.h; its own thread). A resize drops the blocks
 * between the old and the new end (after a shrink they lie past the end; a
 * grow must read back what the origin has there now, not what was cached
 * before an earlier shrink). Fenced: other clients may write the origin now,
 * so nothing cached can be trusted; changed: the origin says it may differ
 * anywhere. Then the event goes up to the LU.
 */
void engine_origin_event(void *arg, struct hl_origin *inner, enum hl_origin_event ev,
                         uint64_t old_size)
{
	struct hl_origin *o = arg;
	struct co_priv *co = co_of(o);
	uint64_t size = __atomic_load_n(&inner->size, __ATOMIC_ACQUIRE);
	bool all = ev == HL_ORIGIN_FENCED || ev == HL_ORIGIN_CHANGED;
	uint64_t lo = all ? 0 : HL_MIN(size, old_size);
	uint64_t hi = all ? UINT64_MAX : HL_MAX(size, old_size);

	pthread_mutex_lock(&co->c->lock);
	hl_cache_core_invalidate_yield(co->c->core, co->ent->id, lo, hi - lo, engine_lock_yield,
	                               co->c);
	pthread_mutex_unlock(&co->c->lock);
	atomic_fetch_add(&co->c->changes, 1); /* the records follow within meta_interval_ms */
	hl_origin_notify(o, ev, size);
}

/*
 * Before a disk detaches: wait (bounded, c->drain_ms) for its requests: the
 * fills and update-buffer installs of commands that replied already. They
 * run on the reactors, which still run. @return how many are left.
 */
static long co_drain(struct hl_cache *c, struct map_ent *e)
{
	uint64_t t0 = hl_now_ns();
	long first = atomic_load(&e->inflight), left;

	if (!first || atomic_load(&c->mdrop))
		return first; /* none, or the reactors are gone (a stop's drain gave up) */
	HL_NOTICE("cache", "cache %s: disk %s: waiting up to %u ms for %ld request(s) in flight",
	          c->name, e->name, c->drain_ms, first);
	left =
	    engine_wait_zero(&e->inflight, t0, t0 + (uint64_t)c->drain_ms * 1000000u, NULL, NULL);
	if (left > 0)
		return left;
	HL_NOTICE("cache", "cache %s: disk %s: %ld request(s) in flight finished in %llu us",
	          c->name, e->name, first, (unsigned long long)((hl_now_ns() - t0) / 1000));
	return 0;
}

/* Inner origins a close kept for a stuck holder of sync_lock (co_close): never closed. */
struct kept_origin {
	struct hl_origin *o;
	struct kept_origin *next;
};
static struct kept_origin *kept;
static pthread_mutex_t kept_mu = PTHREAD_MUTEX_INITIALIZER;

static void co_close(struct hl_origin *o)
{
	struct co_priv *co = co_of(o);
	struct hl_cache *c = co->c;
	struct map_ent *e = co->ent;
	/*
	 * A stop gave up on the metadata thread (engine_meta_stop), or this
	 * close found sync_lock held past the bound (engine_sync_lock_within:
	 * a removal while the device does not answer): the holder may keep it
	 * for ever. The map is sealed "failed", so no proof matters any more:
	 * detach under lock only, take no final proof.
	 */
	bool stuck;
	long left;

	engine_shadow_detach(c, e); /* its pre-reads use o and the inner origin */
	/*
	 * No command is running (the LU is going): what may be left are the
	 * fills of reads that replied. Those that land while the disk is still
	 * attached are covered by the final proof below; those that do not land
	 * within the bound are abandoned: they keep the entry (never freed
	 * under them, engine_ent_retire) and install nothing (the generation
	 * moves on, engine_req_orphan). They touch neither o nor the inner
	 * origin, and their buffers are their own.
	 */
	left = co_drain(c, e);
	stuck = !engine_sync_lock_within(c, e->name);
	pthread_mutex_lock(&c->lock);
	e->attached = false; /* its blocks stay: a restart finds them */
	e->inner = NULL;     /* the meta thread takes no more proofs from it */
	atomic_fetch_add(&e->gen, 1);
	pthread_mutex_unlock(&c->lock);
	if (!stuck)
		pthread_mutex_unlock(&c->sync_lock);
	if (left > 0 && atomic_load(&c->mdrop))
		HL_WARN("cache",
		        "cache %s: disk %s: %ld request(s) left by the stop's drain: abandoned "
		        "(detached without them; what they write is not kept)",
		        c->name, e->name, left);
	else if (left > 0)
		HL_WARN("cache",
		        "cache %s: disk %s: %ld request(s) did not finish within %u ms: "
		        "abandoned (detached without them; what they write is not kept)",
		        c->name, e->name, left, c->drain_ms);
	/*
	 * No origin I/O is in flight (every command was answered): what the
	 * origin holds now is what the blocks match.
	 */
	if (!stuck) {
		engine_proof_final(c, e, co->inner);
		return; /* hl_origin_close() closes the inner origin next */
	}
	/*
	 * sync_lock's holder may be inside a call on the inner origin
	 * (engine_proofs_refresh's proof_take, which read e->inner before it
	 * was cleared above) and use it again when that call returns: the
	 * inner origin is kept, never closed (listed, so a leak checker sees
	 * it held), like the cache of a stuck metadata thread.
	 */
	struct kept_origin *k = malloc(sizeof(*k));
	if (k) {
		k->o = co->inner;
		pthread_mutex_lock(&kept_mu);
		k->next = kept;
		kept = k;
		pthread_mutex_unlock(&kept_mu);
	}
	o->inner = NULL; /* hl_origin_close() leaves it open (unlisted without memory: leaked) */
	co->inner = NULL;
	HL_WARN("cache", "cache %s: disk %s: its origin stays open for the stuck thread",
	        c->name, e->name);
}

/* Made only by hl_cache_attach() (hl_origin_wrap); proofs and identity are the inner origin's. */
const struct hl_origin_ops cache_origin_ops = {
    .name = "cache",
    .priv_size = sizeof(struct co_priv),
    .close = co_close,
    .submit = co_submit,
};
