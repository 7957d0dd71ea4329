/*
 * event_uring.h - an io_uring served by a reactor: the ring's descriptor (its
 * own fd or a registered eventfd) joins one reactor's epoll set and stays
 * there, idle or not, until that reactor is destroyed, the owner detaches it,
 * or an idle ring moves to another reactor of the same thread; and the one
 * reap loop its completions go through. Used by the per-thread rings of the
 * file origin (src/origin/file_uring.c) and of the iSCSI sends
 * (src/iscsi/tx_uring.c). An idle descriptor costs nothing (it only becomes
 * readable when a CQE is posted); leaving and rejoining the set at every idle
 * turn cost two epoll_ctl per 4 KiB QD1 cache hit (docs/benchmarks.md).
 *
 * Touched only by the reactor's thread, except the destroy call, which runs
 * on the thread that destroys the reactor after its loop stopped.
 */
#ifndef HOTLUN_EVENT_URING_H
#define HOTLUN_EVENT_URING_H

#include "hotlun/event.h"

struct io_uring;
struct hl_uring_watch;

/** The owner's part of a detach (cancel its hooks and timers on the reactor). */
typedef void (*hl_uring_detach_fn)(struct hl_uring_watch *w);

/** Embedded in the ring's owner; caller keeps. */
struct hl_uring_watch {
	struct hl_event ev;          /* the descriptor, in `reactor`'s epoll set while attached */
	struct hl_reactor_fini fini; /* detaches when `reactor` is destroyed */
	struct hl_reactor *reactor;  /* NULL while detached */
	hl_uring_detach_fn detach;   /* may be NULL */
	void *arg;
	uint32_t events;             /* EPOLLIN, or EPOLLIN | EPOLLET (hl_uring_watch_edge) */
	struct io_uring *peek_ring;  /* peeked during the busy-poll window; NULL: not */
	struct hl_reactor_peek peek; /* registered with `reactor` while attached */
};

/** Fill w: fn(ev, revents) runs when fd is readable (ev->arg = arg); not attached. */
void hl_uring_watch_init(struct hl_uring_watch *w, int fd, hl_event_fn fn,
                         hl_uring_detach_fn detach, void *arg);

/**
 * Watch fd edge-triggered: epoll reports it once per signal, so an eventfd
 * need never be read (each CQE post signals it again). Before attaching.
 */
void hl_uring_watch_edge(struct hl_uring_watch *w);

/**
 * While attached, let the reactor peek at ring's CQ during its busy-poll
 * window and run fn(ev, EPOLLIN) as soon as a CQE is there (struct
 * hl_reactor_peek), not one epoll pass later. Before attaching.
 */
void hl_uring_watch_peek(struct hl_uring_watch *w, struct io_uring *ring);

/**
 * The ring's count of I/Os in flight (the owner's, read on the reactor's
 * thread): a lone one stretches the reactor's busy-poll window (struct
 * hl_reactor_peek's inflight). With hl_uring_watch_peek, before attaching.
 */
void hl_uring_watch_inflight(struct hl_uring_watch *w, const unsigned *inflight);

/**
 * Make r the reactor that watches w (no system call when it is already).
 * A ring attached to another reactor moves to r when !busy.
 * @return 0, -EBUSY (attached elsewhere and busy), or -errno of epoll_ctl.
 */
int hl_uring_watch_attach(struct hl_uring_watch *w, struct hl_reactor *r, bool busy);

/** Leave the reactor (the owner's detach fn runs first); harmless when detached. */
void hl_uring_watch_detach(struct hl_uring_watch *w);

/** What hl_uring_reap calls per CQE: its user data and result. */
typedef void (*hl_uring_cqe_fn)(void *ctx, void *data, int res);

/**
 * Call fn for each CQE there now, oldest first, and mark it seen; CQEs that
 * fn's own submissions post meanwhile wait for the next call (their eventfd
 * or ring fd signals again), so an I/O that completes inline cannot keep the
 * loop going. get_events: flush deferred task work first (DEFER_TASKRUN);
 * done anyway when the CQ overflowed. @return the CQEs handled.
 */
unsigned hl_uring_reap(struct io_uring *ring, bool get_events, hl_uring_cqe_fn fn, void *ctx);

#endif
