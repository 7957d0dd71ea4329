/*
 * throttle.c - an origin that wraps another one with an IOPS, bandwidth and
 * latency budget, to reproduce a slow SAN in the lab (issue #4:
 * origin_iops, origin_mbps, origin_latency_ms in [disk]).
 *
 * Model: a device that serves `iops` operations and `mbps` MB/s in FIFO order
 * and adds a fixed latency to each. Every I/O reserves its place on two
 * global token buckets (ops and bytes, shared by all reactors under one
 * mutex) as it arrives; the reservation says when the device would start it.
 * The I/O then waits on a timer of the submitting reactor until that time
 * plus the latency, and goes to the inner origin, whose completion is the
 * caller's. With 64 in flight and iops=200, I/Os start (and so complete)
 * 5 ms apart, i.e. ~200/s, whatever the number of reactors.
 *
 * Buckets hold one operation's worth of credit (no bursts beyond that): an
 * idle device starts the next I/O at once, a busy one paces them exactly.
 * Because release times come from the reservation, not from when timers
 * fired, timer jitter (1 ms granularity) never accumulates into rate error.
 */
#include "config.h"

#include "hotlun/event.h"
#include "hotlun/log.h"
#include "hotlun/util.h"
#include "origin/origin_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct throttle {
	struct hl_origin *inner; /* owned */
	uint64_t op_ns;          /* ns per operation, 0 = no IOPS limit */
	uint64_t bytes_per_s;    /* 0 = no bandwidth limit */
	uint64_t latency_ns;
	pthread_mutex_t lock;
	uint64_t op_vt;   /* guarded by lock: ops bucket is empty at this time */
	uint64_t byte_vt; /* guarded by lock: bytes bucket is empty at this time */
};

/* Per-I/O state in hl_origin_io.priv while the I/O waits; the inner origin reuses priv after. */
struct throttle_io {
	struct hl_timer timer;
	struct hl_origin *o;
};
_Static_assert(sizeof(struct throttle_io) <= sizeof(((struct hl_origin_io *)0)->priv),
               "throttle_io must fit in hl_origin_io.priv");

static inline struct throttle *tr_of(struct hl_origin *o)
{
	return hl_origin_priv(o);
}

/*
 * Take `cost` ns of credit from a bucket that refills at 1 ns per ns and holds
 * at most `cost`: returns when the I/O may start.
 */
static uint64_t bucket_take(uint64_t *vt, uint64_t now, uint64_t cost)
{
	uint64_t start = *vt;

	if (start + cost < now)
		start = now - cost; /* credit is capped at one I/O's worth */
	*vt = start + cost;
	return *vt > now ? *vt : now;
}

static uint64_t throttle_reserve(struct throttle *t, const struct hl_origin_io *io, uint64_t now)
{
	uint64_t release = now;
	uint64_t bytes = (io->op == HL_IO_READ || io->op == HL_IO_WRITE) ? io->length : 0;

	if (!t->op_ns && !(t->bytes_per_s && bytes))
		return now;
	pthread_mutex_lock(&t->lock);
	if (t->op_ns)
		release = bucket_take(&t->op_vt, now, t->op_ns);
	if (t->bytes_per_s && bytes) {
		uint64_t cost = (uint64_t)((unsigned __int128)bytes * 1000000000u / t->bytes_per_s);
		uint64_t b = bucket_take(&t->byte_vt, now, cost ? cost : 1);
		if (b > release)
			release = b;
	}
	pthread_mutex_unlock(&t->lock);
	return release;
}

static void throttle_fire(struct hl_timer *timer)
{
	struct hl_origin_io *io = timer->arg;
	struct throttle_io *tio = (struct throttle_io *)io->priv;
	struct throttle *t = tr_of(tio->o);
	int rc;

	/* From here on priv belongs to the inner origin. */
	rc = hl_origin_submit(t->inner, io);
	if (rc)
		io->cb(io, rc); /* our submit already returned 0: report through the callback */
}

static int throttle_submit(struct hl_origin *o, struct hl_origin_io *io)
{
	struct throttle *t = tr_of(o);
	struct throttle_io *tio = (struct throttle_io *)io->priv;
	struct hl_reactor *r = hl_reactor_current();
	uint64_t now, release;
	int rc;

	if (!r)
		return -EINVAL;
	rc = origin_io_check(o, io);
	if (rc)
		return rc;
	now = hl_now_ns();
	release = throttle_reserve(t, io, now) + t->latency_ns;
	if (release <= now)
		return hl_origin_submit(t->inner, io); /* the inner origin defers completion */
	tio->o = o;
	hl_timer_init(&tio->timer, throttle_fire, io);
	hl_timer_start(r, &tio->timer, (release - now + 999999) / 1000000);
	return 0;
}

static void throttle_close(struct hl_origin *o)
{
	struct throttle *t = tr_of(o);

	hl_origin_close(t->inner);
	t->inner = NULL;
	pthread_mutex_destroy(&t->lock);
}

static int throttle_open(struct hl_origin *o, const char *target, const struct hl_origin_opts *opts)
{
	(void)o;
	(void)target;
	(void)opts;
	return -EOPNOTSUPP; /* only made by hl_origin_throttle_wrap() */
}

/* Proofs are the wrapped origin's: a throttle changes timing, never content. */
static int throttle_proof_take(struct hl_origin *o, const char *tag, bool final, char *proof,
                               size_t len)
{
	return hl_origin_proof_take(tr_of(o)->inner, tag, final, proof, len);
}

static int throttle_proof_check(struct hl_origin *o, const char *tag, const char *proof,
                                hl_origin_changed_fn changed, void *arg, char *why, size_t whylen)
{
	return hl_origin_proof_check(tr_of(o)->inner, tag, proof, changed, arg, why, whylen);
}

static void throttle_proof_release(struct hl_origin *o, const char *tag, const char *proof)
{
	hl_origin_proof_release(tr_of(o)->inner, tag, proof);
}

const struct hl_origin_ops origin_throttle_ops = {
    .name = "throttle",
    .scheme = NULL,
    .priv_size = sizeof(struct throttle),
    .open = throttle_open,
    .close = throttle_close,
    .submit = throttle_submit,
    .proof_take = throttle_proof_take,
    .proof_check = throttle_proof_check,
    .proof_release = throttle_proof_release,
};

int hl_origin_throttle_wrap(struct hl_origin *inner, uint32_t iops, uint32_t mbps,
                            uint32_t latency_ms, struct hl_origin **out)
{
	struct hl_origin *o;
	struct throttle *t;
	char *uri;
	int rc;

	if (!inner || !out)
		return -EINVAL;
	if (asprintf(&uri, "throttle(iops=%u,mbps=%u,latency_ms=%u):%s", iops, mbps, latency_ms,
	             inner->uri) < 0)
		return -ENOMEM;
	rc = origin_alloc(&origin_throttle_ops, uri, &o);
	free(uri);
	if (rc)
		return rc;
	t = tr_of(o);
	rc = -pthread_mutex_init(&t->lock, NULL);
	if (rc) {
		origin_free(o);
		return rc;
	}
	t->inner = inner;
	t->op_ns = iops ? 1000000000ull / iops : 0;
	t->bytes_per_s = (uint64_t)mbps * 1000000ull;
	t->latency_ns = (uint64_t)latency_ms * 1000000ull;
	o->size = inner->size;
	o->phys_block_size = inner->phys_block_size;
	o->read_only = inner->read_only;
	o->can_discard = inner->can_discard;
	o->zeroes_after_discard = inner->zeroes_after_discard;
	o->sole_writer = inner->sole_writer;
	hl_origin_forward_events(inner, o); /* a resize or fence reaches the layer above */
	HL_INFO("origin", "%s: throttled to %u IOPS, %u MB/s, +%u ms", inner->uri, iops, mbps,
	        latency_ms);
	*out = o;
	return 0;
}
