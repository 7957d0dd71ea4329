/*
 * event.h - the reactor: epoll file events, a timer heap and cross-thread
 * calls. One reactor per thread; everything registered on a reactor is
 * touched only by that reactor's thread, except hl_reactor_call(),
 * hl_reactor_post() and hl_reactor_stop(), which any thread may use.
 *
 * Hazard handled here, not by callers: an event deleted (and possibly freed)
 * by a callback earlier in the same epoll batch is never delivered again
 * (the remaining batch entries that point at it are cleared).
 */
#ifndef HOTLUN_EVENT_H
#define HOTLUN_EVENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/epoll.h>

struct hl_reactor;
struct hl_event;
struct hl_timer;

/** Called on the reactor thread with the epoll revents (EPOLLIN, EPOLLOUT, EPOLLERR...). */
typedef void (*hl_event_fn)(struct hl_event *ev, uint32_t revents);
typedef void (*hl_timer_fn)(struct hl_timer *t);
typedef void (*hl_call_fn)(void *arg);

/** A file descriptor watched by a reactor. Embedded in its owner; caller keeps. */
struct hl_event {
	int fd;
	uint32_t events;            /* currently requested EPOLL* mask */
	hl_event_fn fn;
	void *arg;
	struct hl_reactor *reactor; /* NULL while not added */
};

/** A one-shot timer. Embedded in its owner; caller keeps. */
struct hl_timer {
	uint64_t deadline_ns;
	hl_timer_fn fn;
	void *arg;
	size_t heap_idx;            /* SIZE_MAX while not pending */
	struct hl_reactor *reactor;
};

/**
 * A call at the end of a reactor turn: after the turn's file events and
 * timers ran, before the loop waits again. What many events of one turn
 * produce is handed on once there (io_uring SQEs submitted with one
 * io_uring_submit, a connection's responses sent with one sendmsg).
 * Embedded in its owner; caller keeps; a queued hook must be cancelled
 * before its owner is freed.
 */
struct hl_turn_hook {
	void (*fn)(struct hl_turn_hook *h);
	void *arg;
	struct hl_turn_hook *next, **pprev; /* pprev: NULL while not queued */
	struct hl_reactor *reactor;
};

/**
 * A call when a reactor is destroyed (hl_reactor_on_destroy): what a thread
 * keeps registered on its reactor for the reactor's whole life (an io_uring's
 * completion eventfd) leaves it here, and is not added and deleted around
 * every burst of work. Embedded in its owner; caller keeps; a registered one
 * must be cancelled before its owner is freed.
 */
struct hl_reactor_fini {
	void (*fn)(struct hl_reactor_fini *f);
	void *arg;
	struct hl_reactor_fini *next, **pprev; /* pprev: NULL while not registered */
	struct hl_reactor *reactor;
};

/**
 * A completion queue the reactor looks at during its busy-poll window
 * (hl_reactor_set_poll_us), without a system call: after each epoll_wait
 * that found nothing, ready(p) is asked and, when true, run(p) is called
 * (one per pass) and the turn goes on to its timers and hooks. It spares
 * the wait for the queue's own wake-up (an eventfd or the ring's fd, which
 * epoll reports only on the next pass), which a 4 KiB QD1 cache hit pays
 * (docs/bench-hit-device.md, "The QD1 hit's addition"). ready must be cheap;
 * run must empty what made ready true. Embedded in its owner; caller keeps;
 * a registered one must be deleted before its owner is freed.
 */
struct hl_reactor_peek {
	bool (*ready)(struct hl_reactor_peek *p);
	void (*run)(struct hl_reactor_peek *p);
	void *arg;
	/*
	 * I/Os whose completions this queue will bring (NULL: not counted).
	 * While the reactor's peeks have 1 to HL_REACTOR_POLL_IO_MAX of them in
	 * flight, the busy-poll window stretches to HL_REACTOR_POLL_IO_MULT times
	 * its length: a lone device read (a QD1 cache hit) is reaped spinning,
	 * not after a sleep and a cross-CPU wake-up (docs/benchmarks.md, "The
	 * QD1 hit's addition"). More in flight: completions come often enough.
	 */
	const unsigned *inflight;
	struct hl_reactor_peek *next, **pprev; /* pprev: NULL while not registered */
	struct hl_reactor *reactor;
};

/** Monotonic clock in nanoseconds. */
uint64_t hl_now_ns(void);

/**
 * Create a reactor. Not yet running: call hl_reactor_run() on the thread
 * that will own it (or hl_reactor_start() to give it a thread of its own).
 * @return 0 or -errno.
 */
int hl_reactor_create(struct hl_reactor **out, const char *name);

/**
 * Busy-poll window: before sleeping in epoll_wait the loop keeps looking for
 * events, without sleeping, for up to `us` microseconds (never past its next
 * timer). 0 (the default): sleep at once. Any thread may call it.
 */
void hl_reactor_set_poll_us(struct hl_reactor *r, unsigned us);

/**
 * Destroy a stopped reactor. Its destroy calls (hl_reactor_on_destroy) run
 * first, each once, newest first, on the calling thread while r's epoll fd
 * is still open; they may delete events, stop timers and cancel hooks and
 * other destroy calls of r. After them, registered events and timers must
 * be gone.
 */
void hl_reactor_destroy(struct hl_reactor *r);

/** Fill a destroy call; not registered. */
static inline void hl_reactor_fini_init(struct hl_reactor_fini *f,
                                        void (*fn)(struct hl_reactor_fini *f), void *arg)
{
	f->fn = fn;
	f->arg = arg;
	f->next = NULL;
	f->pprev = NULL;
	f->reactor = NULL;
}

/**
 * Call f->fn(f) when r is destroyed (f is unregistered before the call).
 * On r's thread, or while r's loop does not run. @return 0, or -EBUSY when
 * f is registered already.
 */
int hl_reactor_on_destroy(struct hl_reactor *r, struct hl_reactor_fini *f);

/** Unregister; harmless when not registered. Same threads as hl_reactor_on_destroy. */
void hl_reactor_on_destroy_cancel(struct hl_reactor_fini *f);

static inline bool hl_reactor_fini_registered(const struct hl_reactor_fini *f)
{
	return f->pprev != NULL;
}

/** Fill a peek; not registered. */
static inline void hl_reactor_peek_init(struct hl_reactor_peek *p,
                                        bool (*ready)(struct hl_reactor_peek *p),
                                        void (*run)(struct hl_reactor_peek *p), void *arg)
{
	p->ready = ready;
	p->run = run;
	p->arg = arg;
	p->inflight = NULL;
	p->next = NULL;
	p->pprev = NULL;
	p->reactor = NULL;
}

#define HL_REACTOR_POLL_IO_MAX 2  /* at most this many in flight stretch the window */
#define HL_REACTOR_POLL_IO_MULT 4 /* the stretched window: this many times poll_us */

/**
 * Register p with r (r's thread, or while r's loop does not run); delete it
 * before r is destroyed (hl_uring_watch does, in its destroy call).
 * @return 0, or -EBUSY when p is registered already.
 */
int hl_reactor_peek_add(struct hl_reactor *r, struct hl_reactor_peek *p);

/** Unregister; harmless when not registered. Same threads as hl_reactor_peek_add. */
void hl_reactor_peek_del(struct hl_reactor_peek *p);

/** Run the loop on the calling thread until hl_reactor_stop(). @return 0 or -errno. */
int hl_reactor_run(struct hl_reactor *r);

/** Start a new thread that runs the reactor. @return 0 or -errno. */
int hl_reactor_start(struct hl_reactor *r);

/**
 * Start it as hl_reactor_start() does, on CPU @cpu only (the thread's
 * affinity, set before it runs; [global] cpus). @return 0, or -EINVAL
 * when the CPU is offline or not allowed to this process, or -errno.
 */
int hl_reactor_start_on(struct hl_reactor *r, unsigned cpu);

/** Ask the loop to return (any thread); joins its thread if hl_reactor_start() made one. */
void hl_reactor_stop(struct hl_reactor *r);
void hl_reactor_join(struct hl_reactor *r);

/**
 * How many times r's loop has gone round (any thread may read it). A
 * watchdog that sees it stand still while a call it posted (hl_reactor_call)
 * is pending knows the thread is stuck in a callback.
 */
uint64_t hl_reactor_heartbeat(const struct hl_reactor *r);

/** The reactor running on this thread, or NULL. */
struct hl_reactor *hl_reactor_current(void);

const char *hl_reactor_name(const struct hl_reactor *r);

/**
 * Run fn(arg) on r's thread, soon (any thread may call; FIFO per caller).
 * @return 0, or -ENOMEM (nothing queued: the caller retries or fails).
 */
int hl_reactor_call(struct hl_reactor *r, hl_call_fn fn, void *arg);

/**
 * A call posted to a reactor without allocating (hl_reactor_post), for
 * work that must not be lost when memory is short (a session kill): the
 * request is embedded in its owner, which keeps it while it is queued.
 * Its links belong to the reactor (guarded by the reactor's call lock).
 */
struct hl_reactor_post {
	hl_call_fn fn;
	void *arg;
	struct hl_reactor_post *next;
	struct hl_reactor *queued_on; /* NULL: not queued */
	uint64_t seq;                 /* its place among the reactor's calls */
};

/** Fill a post; not queued. */
static inline void hl_reactor_post_init(struct hl_reactor_post *p, hl_call_fn fn, void *arg)
{
	p->fn = fn;
	p->arg = arg;
	p->next = NULL;
	p->queued_on = NULL;
	p->seq = 0;
}

/**
 * Run p->fn(p->arg) on r's thread, soon (any thread may call). Never
 * allocates, so it cannot fail for want of memory. The post is taken off
 * the queue before fn runs, so fn may free it or post it again. Posts and
 * hl_reactor_call's calls run in one FIFO order. Caller keeps p until fn
 * has run or hl_reactor_post_cancel took it back (a reactor destroyed
 * with posts queued drops them, as it drops calls).
 * @return 0, or -EBUSY when p is queued already (it will run once).
 */
int hl_reactor_post(struct hl_reactor *r, struct hl_reactor_post *p);

/**
 * Take p back from r's queue (any thread). When the caller can rule out
 * that r's thread is running p->fn (its own thread, or p->fn runs under a
 * lock the caller holds), a false answer means p is not queued anywhere
 * and fn will not run from this post. O(posts queued on r).
 * @return true when p was queued on r and now will not run.
 */
bool hl_reactor_post_cancel(struct hl_reactor *r, struct hl_reactor_post *p);

/** Fill an event before adding it. */
void hl_event_init(struct hl_event *ev, int fd, hl_event_fn fn, void *arg);

/** Watch ev->fd for `events` (EPOLLIN|EPOLLOUT, level-triggered). @return 0 or -errno. */
int hl_event_add(struct hl_reactor *r, struct hl_event *ev, uint32_t events);

/** Change the watched mask. @return 0 or -errno. */
int hl_event_mod(struct hl_event *ev, uint32_t events);

/** Stop watching; safe inside any callback, including ev's own. Does not close fd. */
void hl_event_del(struct hl_event *ev);

void hl_timer_init(struct hl_timer *t, hl_timer_fn fn, void *arg);

/** (Re)arm t to fire once after delay_ms on r. */
void hl_timer_start(struct hl_reactor *r, struct hl_timer *t, uint64_t delay_ms);

/** Disarm; harmless when not pending. */
void hl_timer_stop(struct hl_timer *t);

static inline bool hl_timer_pending(const struct hl_timer *t)
{
	return t->heap_idx != (size_t)-1;
}

/** A hook that calls fn(h) (h->arg = arg) at the end of a turn it is queued for; not queued. */
static inline void hl_turn_hook_init(struct hl_turn_hook *h, void (*fn)(struct hl_turn_hook *h),
                                     void *arg)
{
	h->fn = fn;
	h->arg = arg;
	h->next = NULL;
	h->pprev = NULL;
	h->reactor = NULL;
}

/**
 * Queue h for the end of the current turn of r (no-op when queued already).
 * Hooks queued by a hook run in the same pass. @return 0, or -EAGAIN when
 * r is not the reactor running on the calling thread (nothing queued: do
 * the work now).
 */
int hl_turn_hook_queue(struct hl_reactor *r, struct hl_turn_hook *h);

/**
 * hl_turn_hook_queue, for a hook that runs before every hook queued with
 * hl_turn_hook_queue (early hooks newest first among themselves, then the
 * others; one queued by a hook in the same pass goes by the same order):
 * the submission of the turn's device reads (file_uring.c) goes before
 * the connections' sends, so that a long send (a MiB of Data-In takes
 * ~100-200 us to copy over loopback) does not keep the device waiting for
 * the reads of the commands received in the same turn.
 */
int hl_turn_hook_queue_early(struct hl_reactor *r, struct hl_turn_hook *h);

/** Unqueue; harmless when not queued. On the reactor's thread. */
void hl_turn_hook_cancel(struct hl_turn_hook *h);

static inline bool hl_turn_hook_queued(const struct hl_turn_hook *h)
{
	return h->pprev != NULL;
}

/*
 * Blocking work off the reactor: run work(arg) on a shared worker thread,
 * then done(arg) back on the reactor that submitted it. Used by backends
 * whose syscalls block (file origin fallback, fsync, fallocate).
 */
typedef void (*hl_work_fn)(void *arg);

/**
 * Start the shared worker pool with nthreads threads (0: 4). Idempotent;
 * hl_work_submit() also starts it on first use. @return 0 or -errno.
 */
int hl_workers_start(unsigned nthreads);

/**
 * Let the workers finish every queued item (each done is still posted to its
 * reactor), then join them. Not from a worker. A later submit restarts the pool.
 */
void hl_workers_stop(void);

/**
 * hl_workers_stop, waiting at most bound_ms (0: no bound) for the workers
 * to end. A worker whose call has not returned by then (a read of a device
 * that stopped answering) is abandoned: not joined, and the pool (its
 * threads, semaphore) stays as it is; the caller must then free nothing
 * that call or its done may still touch (the reactors, the origins) and
 * should exit. @return how many workers were abandoned (0: stopped).
 */
unsigned hl_workers_stop_within(unsigned bound_ms);

/**
 * Must be called on a reactor thread. work(arg) runs on a worker, then
 * done(arg) on the submitting reactor, never inside this call; that reactor
 * must outlive the item. arg is the caller's until done runs.
 * @return 0 (done runs exactly once) or -errno (neither runs): -EINVAL off a
 * reactor, -ENOMEM, -ESHUTDOWN while the pool stops.
 */
int hl_work_submit(hl_work_fn work, hl_call_fn done, void *arg);

#endif
