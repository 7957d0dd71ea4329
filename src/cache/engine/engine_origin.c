/*
 * engine_origin.c - the cached origin: the wrapper hl_cache_attach() puts
 * around a disk's real origin (ops table, submit checks, dispatch to the
 * read and write paths, pass-through once the device failed, the inner
 * origin's resize/fence events), and the request machinery both paths run
 * on: a request and its subs, the phase hold that keeps a completion from
 * running inside submit, the sub completion dispatcher, and the reply
 * (with the latency and error counters).
 *
 * Shared state and the ordering rules: engine_internal.h.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache/engine/engine_internal.h"
#include "hotlun/event.h"
#include "hotlun/util.h"

/* ------------------------------------------------------------------ */
/* Requests                                                           */
/* ------------------------------------------------------------------ */

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

struct eng_req *engine_req_new(struct hl_origin *o, struct hl_origin_io *uio, uint32_t nb,
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

void engine_req_free(struct eng_req *req)
{
	struct hl_cache *c = req->c;

	for (uint32_t i = 0; i < req->nsub; i++)
		if (req->subs[i].own)
			free(req->subs[i].buf);
	if (req->subs_heap)
		free(req->subs);
	free(req->ov);
	free(req->ov_off);
	free(req->rmw_old[0]);
	free(req->rmw_old[1]);
	free(req);
	atomic_fetch_sub(&c->inflight, 1);
}

struct eng_sub *engine_sub_new(struct eng_req *req, enum sub_kind kind, uint32_t k)
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

/* The block a cache-device sub reads or writes, or UINT64_MAX (subs with no io). */
static uint64_t sub_block(const struct eng_sub *s)
{
	switch (s->kind) {
	case SUB_HIT:
	case SUB_FILL:
	case SUB_PHIT:
	case SUB_RMW:
		return s->req->ios[s->k].block;
	default:
		return UINT64_MAX;
	}
}

/*
 * Trace a cache-device sub (cache_trace.h): slot and byte offset in it come
 * from the offset; aux is the io's ticket at submission, the result at
 * completion. Nothing is computed when tracing is off (the hot path).
 */
static void sub_trace(const struct eng_sub *s, enum cache_trace_ev ev, int result)
{
	const struct hl_cache *c = s->req->c;
	uint64_t rel, block;
	uint32_t aux;

	if (!cache_trace_on)
		return;
	rel = s->io.offset - c->layout.data_off;
	block = sub_block(s);
	if (ev != CT_SUB)
		aux = (uint32_t)result;
	else
		aux = block == UINT64_MAX ? 0 : s->req->ios[s->k].ticket;
	cache_trace(ev, s->kind | (s->io.op == HL_IO_WRITE ? 0x80u : 0), s->req->ent->id,
	            (uint32_t)(rel >> c->shift), aux, block, rel & (c->bs - 1), s->io.length);
}

/* Submit sub to origin o at off: the buffer is sub->iov. @return 0 or -errno (no callback). */
int engine_sub_submit(struct eng_sub *s, struct hl_origin *o, enum hl_io_op op, uint64_t off,
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
	s->io.cb = engine_sub_cb;
	s->io.arg = s;
	s->dev = o == s->req->c->data;
	if (s->dev)
		sub_trace(s, CT_SUB, 0);
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
void engine_phase_end(struct eng_req *req)
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

void engine_reply(struct eng_req *req, int status)
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

void engine_sub_cb(struct hl_origin_io *io, int result)
{
	struct eng_sub *s = io->arg;
	struct eng_req *req = s->req;

	if (s->dev)
		sub_trace(s, CT_DONE, result);
	switch (s->kind) {
	case SUB_HIT:
	case SUB_RETRY:
	case SUB_RUN:
	case SUB_PHIT:
		engine_read_sub_done(s, result);
		break;
	case SUB_FILL:
	case SUB_RMW:
		engine_fill_sub_done(s, result);
		break;
	case SUB_WRITE:
		req->status = result;
		break;
	case SUB_SKIPPED:
	case SUB_BUF:
		break;
	}
	sub_done(req);
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
 * so nothing cached can be trusted. Then the event goes up to the LU.
 */
void engine_origin_event(void *arg, struct hl_origin *inner, enum hl_origin_event ev,
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

static void co_close(struct hl_origin *o)
{
	struct co_priv *co = co_of(o);

	pthread_mutex_lock(&co->c->sync_lock);
	pthread_mutex_lock(&co->c->lock);
	co->ent->attached = false; /* its blocks stay: a restart finds them */
	co->ent->inner = NULL;     /* the meta thread takes no more proofs from it */
	pthread_mutex_unlock(&co->c->lock);
	pthread_mutex_unlock(&co->c->sync_lock);
	/* No I/O is in flight: what the origin holds now is what the blocks match. */
	engine_proof_final(co->c, co->ent, co->inner);
	/* hl_origin_close() closes the inner origin next */
}

/* Made only by hl_cache_attach() (hl_origin_wrap); proofs and identity are the inner origin's. */
const struct hl_origin_ops cache_origin_ops = {
    .name = "cache",
    .priv_size = sizeof(struct co_priv),
    .close = co_close,
    .submit = co_submit,
};
