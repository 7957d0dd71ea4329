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
	uint64_t op_ns;       /* ns per operation, 0 = no IOPS limit */
	uint64_t bytes_per_s; /* 0 = no bandwidth limit */
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
	int rc;

	/* From here on priv belongs to the inner origin. */
	rc = hl_origin_submit(tio->o->inner, io);
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
		return hl_origin_submit(o->inner, io); /* the inner origin defers completion */
	tio->o = o;
	hl_timer_init(&tio->timer, throttle_fire, io);
	hl_timer_start(r, &tio->timer, (release - now + 999999) / 1000000);
	return 0;
}

static void throttle_close(struct hl_origin *o)
{
	pthread_mutex_destroy(&tr_of(o)->lock);
}

/* Proofs and identity are the wrapped origin's (hl_origin_wrap): a throttle changes timing, never
 * content. */
static const struct hl_origin_ops origin_throttle_ops = {
    .name = "throttle",
    .priv_size = sizeof(struct throttle),
    .close = throttle_close,
    .submit = throttle_submit,
};

int hl_origin_throttle_wrap(struct hl_origin *inner, uint32_t iops, uint32_t mbps,
                            uint32_t latency_ms, struct hl_origin **out)
{
	struct hl_origin *o;
	struct throttle *t;
	char label[80];
	int rc;

	if (!inner || !out)
		return -EINVAL;
	snprintf(label, sizeof(label), "throttle(iops=%u,mbps=%u,latency_ms=%u)", iops, mbps,
	         latency_ms);
	rc = hl_origin_wrap(inner, &origin_throttle_ops, label, &o);
	if (rc)
		return rc;
	t = tr_of(o);
	t->lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER; /* cannot fail, unlike _init */
	t->op_ns = iops ? 1000000000ull / iops : 0;
	t->bytes_per_s = (uint64_t)mbps * 1000000ull;
	t->latency_ns = (uint64_t)latency_ms * 1000000ull;
	HL_INFO("origin", "%s: throttled to %u IOPS, %u MB/s, +%u ms", inner->uri, iops, mbps,
	        latency_ms);
	*out = o;
	return 0;
}
