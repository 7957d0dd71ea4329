/*
 * engine_req.c - the request machinery the read, write and fill paths run
 * on: a request and its subs (the I/Os it makes to the cache device and
 * the origin), the phase hold that keeps a completion from running inside
 * submit, the sub completion (a trace, then the sub's own work), the reply
 * with the latency and error counters, and the request-size buckets.
 * Requests of up to REQ_POOL_BYTES (a read or write of a few blocks) come
 * from a free list per thread, not from malloc per command.
 *
 * Shared state and the ordering rules: engine_internal.h.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/engine/engine_internal.h"
#include "hotlun/event.h"
#include "hotlun/util.h"

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

/*
 * A read is sized for what its lookup planned (engine_read.c): nb ios and
 * 2 x nb + 1 subs when it plans no promotion (every hit), about 530 + 490
 * x nb bytes, so 8 KiB keeps such reads of up to 15 blocks off malloc; one
 * more io and sub a promotion (up to 5 x nb ios and 6 x nb + 1 subs,
 * hl_cache_read_max_ios: 530 + 1,550 x nb bytes, 4 blocks in 8 KiB).
 */
#define REQ_POOL_BYTES 8192u
#define REQ_POOL_MAX   256u /* kept per thread */

/* The free list of this thread; requests freed here go here (any thread's). */
struct req_free {
	struct req_free *next;
};
static __thread struct req_free *tl_free;
static __thread unsigned tl_nfree;
static __thread bool tl_key_set;
static pthread_key_t req_key;
static pthread_once_t req_key_once = PTHREAD_ONCE_INIT;
/* engine_ios_scratch's array of this thread */
static __thread struct hl_cache_io *tl_ios;
static __thread uint32_t tl_ios_cap;

static void req_pool_drain(void *unused)
{
	(void)unused;
	while (tl_free) {
		struct req_free *f = tl_free;
		tl_free = f->next;
		free(f);
	}
	tl_nfree = 0;
	free(tl_ios);
	tl_ios = NULL;
	tl_ios_cap = 0;
}

static void req_key_make(void)
{
	pthread_key_create(&req_key, req_pool_drain);
}

/* The thread's pool and scratch array are freed when it exits (the key's destructor). */
static void req_key_use(void)
{
	if (tl_key_set)
		return;
	pthread_once(&req_key_once, req_key_make);
	pthread_setspecific(req_key, (void *)1);
	tl_key_set = true;
}

struct hl_cache_io *engine_ios_scratch(uint32_t n)
{
	if (n > tl_ios_cap) {
		uint32_t cap = HL_MAX(n, 2 * tl_ios_cap);
		struct hl_cache_io *a = realloc(tl_ios, (size_t)cap * sizeof(*a));
		if (!a)
			return NULL;
		req_key_use();
		tl_ios = a;
		tl_ios_cap = cap;
	}
	return tl_ios;
}

static void *req_alloc(size_t sz, bool *pooled)
{
	struct req_free *f = tl_free;

	*pooled = sz <= REQ_POOL_BYTES;
	if (!*pooled)
		return malloc(sz);
	if (f) {
		tl_free = f->next;
		tl_nfree--;
		return f;
	}
	return malloc(REQ_POOL_BYTES);
}

static void req_release(void *p, bool pooled)
{
	struct req_free *f = p;

	if (!pooled || tl_nfree >= REQ_POOL_MAX) {
		free(p);
		return;
	}
	req_key_use();
	f->next = tl_free;
	tl_free = f;
	tl_nfree++;
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
	bool pooled;
	struct eng_req *req = req_alloc(sz, &pooled);

	if (!req)
		return NULL;
	memset(req, 0, sizeof(*req));
	req->pooled = pooled;
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
	req->gen = atomic_load(&co->ent->gen);
	hl_list_init(&req->wlink);
	atomic_fetch_add(&co->ent->inflight, 1);
	atomic_fetch_add(&co->c->inflight, 1);
	return req;
}

long engine_wait_zero(atomic_long *count, uint64_t t0_ns, uint64_t deadline_ns,
                      void (*note)(void *arg, long left), void *arg)
{
	uint64_t next_note = t0_ns + 5000000000ull;
	long left;

	while ((left = atomic_load(count)) > 0) {
		uint64_t now = hl_now_ns();
		struct timespec ts = {0, 1000000};

		if (now >= deadline_ns)
			return left;
		if (note && now >= next_note) {
			note(arg, left);
			next_note += 5000000000ull;
		}
		nanosleep(&ts, NULL);
	}
	return 0;
}

void engine_req_free(struct eng_req *req)
{
	struct hl_cache *c = req->c;
	struct map_ent *e = req->ent;

	for (uint32_t i = 0; i < req->nsub; i++)
		if (req->subs[i].own)
			free(req->subs[i].buf);
	if (req->subs_heap)
		free(req->subs);
	free(req->ov);
	free(req->ov_off);
	free(req->rmw_old[0]);
	free(req->rmw_old[1]);
	req_release(req, req->pooled);
	/* last: a detach or close that sees 0 may free the entry, then the cache */
	atomic_fetch_sub(&e->inflight, 1);
	atomic_fetch_sub(&c->inflight, 1);
}

struct eng_sub *engine_sub_new(struct eng_req *req, enum sub_kind kind, uint32_t k,
                               void (*done)(struct eng_sub *s, int result))
{
	struct eng_sub *s;

	if (req->nsub == req->maxsub)
		return NULL;
	s = &req->subs[req->nsub++];
	memset(s, 0, sizeof(*s));
	s->req = req;
	s->kind = (uint8_t)kind;
	s->k = k;
	s->done = done;
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
	else
		engine_sub_timed(s);
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

void engine_sub_timed(struct eng_sub *s)
{
	s->t0 = s->io.op == HL_IO_READ || s->io.op == HL_IO_WRITE ? hl_now_ns() : 0;
}

/*
 * An origin READ or WRITE of the cache finished: file its latency (the
 * SAN's speed) under its disk only; the whole cache's is their sum, taken
 * when stats are read (hl_cache_get_stats), so a write pays two atomic adds
 * here, not four.
 */
static void origin_timed(struct eng_sub *s)
{
	struct map_ent *e = s->req->ent;
	uint64_t ns = hl_now_ns() - s->t0;
	unsigned b = hl_origin_lat_bucket(ns);

	if (s->io.op == HL_IO_READ) {
		cnt_add(&e->st.origin_read_lat[b], 1);
		cnt_add(&e->st.origin_read_ns, ns);
	} else {
		cnt_add(&e->st.origin_write_lat[b], 1);
		cnt_add(&e->st.origin_write_ns, ns);
	}
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
		/*
		 * Where the data came from, for the disk's latency split: a hit
		 * that had to be re-read from the origin (hit_retry) is no longer
		 * one, so all_hit, not the plan, decides.
		 */
		uio->source = req->all_hit  ? HL_IO_SRC_HIT
		              : req->cached ? HL_IO_SRC_PARTIAL
		                            : HL_IO_SRC_MISS;
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

/*
 * The per-kind work is the sub's own (s->done, set by the file that made
 * it): this file calls none of the read, write and fill paths, they call it.
 */
void engine_sub_cb(struct hl_origin_io *io, int result)
{
	struct eng_sub *s = io->arg;
	struct eng_req *req = s->req;

	if (s->dev)
		sub_trace(s, CT_DONE, result);
	else if (s->t0)
		origin_timed(s);
	if (s->done)
		s->done(s, result);
	sub_done(req);
}
