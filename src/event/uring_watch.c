/*
 * uring_watch.c - an io_uring's descriptor kept in one reactor's epoll set
 * for the reactor's life, and the reap loop of every ring (event_uring.h).
 *
 * Hazard handled here: a reactor destroyed while a ring is attached. Its
 * destroy call (hl_reactor_on_destroy) detaches the ring while the epoll fd
 * is still open, so a thread that ends later (its ring's pthread key
 * destructor) finds the ring detached and never touches the freed reactor;
 * a ring still attached at thread exit has a live reactor (hl_reactor_destroy
 * joins the reactor's own thread before its destroy calls).
 */
#include "hotlun/event_uring.h"

#include <errno.h>
#include <liburing.h>

static void watch_reactor_gone(struct hl_reactor_fini *f)
{
	hl_uring_watch_detach(f->arg);
}

static bool watch_peek_ready(struct hl_reactor_peek *p)
{
	struct hl_uring_watch *w = p->arg;

	return io_uring_cq_ready(w->peek_ring) || io_uring_cq_has_overflow(w->peek_ring);
}

static void watch_peek_run(struct hl_reactor_peek *p)
{
	struct hl_uring_watch *w = p->arg;

	w->ev.fn(&w->ev, EPOLLIN);
}

void hl_uring_watch_init(struct hl_uring_watch *w, int fd, hl_event_fn fn,
                         hl_uring_detach_fn detach, void *arg)
{
	hl_event_init(&w->ev, fd, fn, arg);
	hl_reactor_fini_init(&w->fini, watch_reactor_gone, w);
	w->reactor = NULL;
	w->detach = detach;
	w->arg = arg;
	w->events = EPOLLIN;
	w->peek_ring = NULL;
	hl_reactor_peek_init(&w->peek, watch_peek_ready, watch_peek_run, w);
}

void hl_uring_watch_edge(struct hl_uring_watch *w)
{
	w->events = EPOLLIN | EPOLLET;
}

void hl_uring_watch_peek(struct hl_uring_watch *w, struct io_uring *ring)
{
	w->peek_ring = ring;
}

void hl_uring_watch_inflight(struct hl_uring_watch *w, const unsigned *inflight)
{
	w->peek.inflight = inflight;
}

int hl_uring_watch_attach(struct hl_uring_watch *w, struct hl_reactor *r, bool busy)
{
	int rc;

	if (w->reactor == r)
		return 0;
	if (w->reactor) {
		if (busy)
			return -EBUSY;
		hl_uring_watch_detach(w);
	}
	rc = hl_event_add(r, &w->ev, w->events);
	if (rc)
		return rc;
	hl_reactor_on_destroy(r, &w->fini);
	if (w->peek_ring)
		hl_reactor_peek_add(r, &w->peek);
	w->reactor = r;
	return 0;
}

void hl_uring_watch_detach(struct hl_uring_watch *w)
{
	if (!w->reactor)
		return;
	if (w->detach)
		w->detach(w);
	hl_reactor_peek_del(&w->peek);
	hl_event_del(&w->ev);
	hl_reactor_on_destroy_cancel(&w->fini);
	w->reactor = NULL;
}

unsigned hl_uring_reap(struct io_uring *ring, bool get_events, hl_uring_cqe_fn fn, void *ctx)
{
	unsigned n, done = 0;

	if (get_events || io_uring_cq_has_overflow(ring))
		io_uring_get_events(ring);
	n = io_uring_cq_ready(ring);
	while (n--) {
		struct io_uring_cqe *cqe;
		void *data;
		int res;

		if (io_uring_peek_cqe(ring, &cqe))
			break;
		data = io_uring_cqe_get_data(cqe);
		res = cqe->res;
		io_uring_cqe_seen(ring, cqe);
		fn(ctx, data, res);
		done++;
	}
	return done;
}
