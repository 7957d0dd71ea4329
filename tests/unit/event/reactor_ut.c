/*
 * reactor_ut.c - file events, the stale-event guard, timers, cross-thread calls,
 * busy polling, turn hooks, destroy calls, io_uring watches (event_uring.h)
 * and posts (hl_reactor_post: calls that cannot fail for want of memory).
 */
#include "hl_test.h"
#include "hotlun/event.h"
#include "hotlun/event_uring.h"

#include "fail_malloc.h" /* linked with -Wl,--wrap=malloc */

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

struct pipe_ctx {
	struct hl_event ev;
	int fds[2];
	int fired;
	struct pipe_ctx *victim; /* deleted by this one's callback */
};

static void pipe_cb(struct hl_event *ev, uint32_t revents)
{
	struct pipe_ctx *c = ev->arg;
	char b[16];

	CU_ASSERT_TRUE(revents & EPOLLIN);
	if (read(c->fds[0], b, sizeof(b)) < 0)
		CU_FAIL("read");
	c->fired++;
	if (c->victim)
		hl_event_del(&c->victim->ev);
	hl_reactor_stop(hl_reactor_current());
}

static void test_event_fires_and_del_guards_batch(void)
{
	struct hl_reactor *r;
	struct pipe_ctx a = {0}, b = {0};

	CU_ASSERT_EQUAL_FATAL(hl_reactor_create(&r, "t"), 0);
	CU_ASSERT_EQUAL_FATAL(pipe(a.fds), 0);
	CU_ASSERT_EQUAL_FATAL(pipe(b.fds), 0);
	hl_event_init(&a.ev, a.fds[0], pipe_cb, &a);
	hl_event_init(&b.ev, b.fds[0], pipe_cb, &b);
	CU_ASSERT_EQUAL(hl_event_add(r, &a.ev, EPOLLIN), 0);
	CU_ASSERT_EQUAL(hl_event_add(r, &b.ev, EPOLLIN), 0);
	CU_ASSERT_EQUAL(hl_event_add(r, &b.ev, EPOLLIN), -EBUSY);
	/* Both readable in one batch; whichever runs first deletes the other. */
	a.victim = &b;
	b.victim = &a;
	CU_ASSERT_EQUAL(write(a.fds[1], "x", 1), 1);
	CU_ASSERT_EQUAL(write(b.fds[1], "x", 1), 1);
	CU_ASSERT_EQUAL(hl_reactor_run(r), 0);
	CU_ASSERT_EQUAL(a.fired + b.fired, 1);
	hl_event_del(&a.ev);
	hl_event_del(&b.ev);
	close(a.fds[0]), close(a.fds[1]), close(b.fds[0]), close(b.fds[1]);
	hl_reactor_destroy(r);
}

struct timer_ctx {
	struct hl_timer t;
	int id;
	int *log;
	int *n;
	int stop_after;
};

static void timer_cb(struct hl_timer *t)
{
	struct timer_ctx *c = t->arg;
	c->log[(*c->n)++] = c->id;
	if (*c->n == c->stop_after)
		hl_reactor_stop(hl_reactor_current());
}

static void test_timers_fire_in_deadline_order(void)
{
	struct hl_reactor *r;
	struct timer_ctx c[4];
	int log[4] = {0}, n = 0;
	const int delays[4] = {30, 10, 20, 5};

	CU_ASSERT_EQUAL_FATAL(hl_reactor_create(&r, "t"), 0);
	for (int i = 0; i < 4; i++) {
		c[i] = (struct timer_ctx){.id = i, .log = log, .n = &n, .stop_after = 3};
		hl_timer_init(&c[i].t, timer_cb, &c[i]);
		hl_timer_start(r, &c[i].t, (uint64_t)delays[i]);
	}
	hl_timer_stop(&c[0].t); /* the 30 ms one never fires */
	CU_ASSERT_FALSE(hl_timer_pending(&c[0].t));
	uint64_t t0 = hl_now_ns();
	CU_ASSERT_EQUAL(hl_reactor_run(r), 0);
	uint64_t elapsed_ms = (hl_now_ns() - t0) / 1000000;
	CU_ASSERT_EQUAL(n, 3);
	CU_ASSERT_EQUAL(log[0], 3);
	CU_ASSERT_EQUAL(log[1], 1);
	CU_ASSERT_EQUAL(log[2], 2);
	CU_ASSERT_TRUE(elapsed_ms >= 20);
	hl_reactor_destroy(r);
}

struct call_ctx {
	struct hl_reactor *r;
	int count;
	int expected;
	pthread_t on;
};

static void call_cb(void *arg)
{
	struct call_ctx *c = arg;
	c->count++;
	c->on = pthread_self();
	if (c->count == c->expected)
		hl_reactor_stop(c->r);
}

static void *poster(void *arg)
{
	struct call_ctx *c = arg;
	for (int i = 0; i < c->expected; i++)
		CU_ASSERT_EQUAL(hl_reactor_call(c->r, call_cb, c), 0);
	return NULL;
}

static void test_cross_thread_calls_run_on_loop_thread(void)
{
	struct call_ctx c = {.count = 0, .expected = 10000};
	pthread_t th;

	CU_ASSERT_EQUAL_FATAL(hl_reactor_create(&c.r, "t"), 0);
	CU_ASSERT_EQUAL_FATAL(hl_reactor_start(c.r), 0);
	CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, poster, &c), 0);
	pthread_join(th, NULL);
	hl_reactor_join(c.r);
	CU_ASSERT_EQUAL(c.count, c.expected);
	CU_ASSERT_FALSE(pthread_equal(c.on, pthread_self()));
	hl_reactor_destroy(c.r);
}

static void test_current_reactor_is_set_inside_loop(void)
{
	struct hl_reactor *r;
	CU_ASSERT_PTR_NULL(hl_reactor_current());
	CU_ASSERT_EQUAL_FATAL(hl_reactor_create(&r, "named"), 0);
	CU_ASSERT_STRING_EQUAL(hl_reactor_name(r), "named");
	hl_reactor_stop(r); /* from outside: queued, loop returns at once */
	CU_ASSERT_EQUAL(hl_reactor_run(r), 0);
	CU_ASSERT_PTR_NULL(hl_reactor_current());
	hl_reactor_destroy(r);
}

/* ---- busy polling ---- */

struct echo_ctx {
	struct hl_event ev;
	int in[2], out[2];
	int n, werr; /* counted on the loop thread, checked after join */
	struct hl_reactor *r;
	struct hl_timer t[2];
};

static void echo_cb(struct hl_event *ev, uint32_t revents)
{
	struct echo_ctx *c = ev->arg;
	char b;

	(void)revents;
	while (read(c->in[0], &b, 1) == 1) {
		c->n++;
		if (write(c->out[1], &b, 1) != 1)
			c->werr++;
	}
}

static void echo_timer_cb(struct hl_timer *t)
{
	struct echo_ctx *c = t->arg;
	char b = t == &c->t[0] ? 'a' : 'b';

	if (write(c->out[1], &b, 1) != 1)
		c->werr++;
}

static void echo_start_timers(void *arg)
{
	struct echo_ctx *c = arg;

	hl_timer_start(c->r, &c->t[0], 20);
	hl_timer_start(c->r, &c->t[1], 1);
}

static double cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/*
 * With a busy-poll window the loop still delivers every event, timer and
 * call, and an idle reactor goes to sleep after one window instead of
 * spinning: the process uses well under 10% of a CPU while it idles.
 */
/* Turn hooks: many queues in one turn run once, after the turn's timers; a hook may queue another. */
struct hook_ctx {
	struct hl_turn_hook h, h2, gone;
	struct hl_timer t[3];
	struct hl_reactor *r;
	int runs, runs2, gone_runs, timers_at_run, timers;
};

static void hook_second(struct hl_turn_hook *h)
{
	struct hook_ctx *x = h->arg;
	x->runs2++;
	hl_reactor_stop(x->r);
}

static void hook_first(struct hl_turn_hook *h)
{
	struct hook_ctx *x = h->arg;
	x->runs++;
	x->timers_at_run = x->timers;
	CU_ASSERT_FALSE(hl_turn_hook_queued(h));
	CU_ASSERT_EQUAL(hl_turn_hook_queue(x->r, &x->h2), 0);
}

static void hook_gone(struct hl_turn_hook *h)
{
	struct hook_ctx *x = h->arg;
	x->gone_runs++;
}

static void hook_timer(struct hl_timer *t)
{
	struct hook_ctx *x = t->arg;
	x->timers++;
	CU_ASSERT_EQUAL(hl_turn_hook_queue(x->r, &x->h), 0);
	CU_ASSERT_TRUE(hl_turn_hook_queued(&x->h));
	if (x->timers == 1) {
		CU_ASSERT_EQUAL(hl_turn_hook_queue(x->r, &x->gone), 0);
	} else if (x->timers == 3) {
		hl_turn_hook_cancel(&x->gone);
		hl_turn_hook_cancel(&x->gone); /* twice: harmless */
	}
}

static void test_turn_hooks(void)
{
	struct hook_ctx x = {0};

	CU_ASSERT_EQUAL_FATAL(hl_reactor_create(&x.r, "t"), 0);
	hl_turn_hook_init(&x.h, hook_first, &x);
	hl_turn_hook_init(&x.h2, hook_second, &x);
	hl_turn_hook_init(&x.gone, hook_gone, &x);
	/* Not on a running reactor: the caller must do the work itself. */
	CU_ASSERT_EQUAL(hl_turn_hook_queue(x.r, &x.h), -EAGAIN);
	CU_ASSERT_FALSE(hl_turn_hook_queued(&x.h));
	for (int i = 0; i < 3; i++) {
		hl_timer_init(&x.t[i], hook_timer, &x);
		hl_timer_start(x.r, &x.t[i], 0);
	}
	CU_ASSERT_EQUAL(hl_reactor_run(x.r), 0);
	CU_ASSERT_EQUAL(x.timers, 3);
	CU_ASSERT_EQUAL(x.runs, 1);
	CU_ASSERT_EQUAL(x.timers_at_run, 3);
	CU_ASSERT_EQUAL(x.runs2, 1);
	CU_ASSERT_EQUAL(x.gone_runs, 0);
	hl_reactor_destroy(x.r);
}

/*
 * Early hooks (the device reads' submission) run before the others (the
 * sends) whichever was queued first, also one an ordinary hook queues.
 */
struct order_ctx {
	struct hl_turn_hook send, dev, dev2;
	struct hl_timer t;
	struct hl_reactor *r;
	char seq[8];
	int n;
};

static void order_send(struct hl_turn_hook *h)
{
	struct order_ctx *x = h->arg;
	if (x->n < 7)
		x->seq[x->n++] = 's';
	/* a hook's early hook still runs in this pass, before the stop */
	CU_ASSERT_EQUAL(hl_turn_hook_queue_early(x->r, &x->dev2), 0);
}

static void order_dev(struct hl_turn_hook *h)
{
	struct order_ctx *x = h->arg;
	if (x->n < 7)
		x->seq[x->n++] = h == &x->dev ? 'd' : 'e';
	if (h == &x->dev2)
		hl_reactor_stop(x->r);
}

static void order_timer(struct hl_timer *t)
{
	struct order_ctx *x = t->arg;
	/* the device hook first: in one list, newest first, the send would run first */
	CU_ASSERT_EQUAL(hl_turn_hook_queue_early(x->r, &x->dev), 0);
	CU_ASSERT_EQUAL(hl_turn_hook_queue(x->r, &x->send), 0);
	CU_ASSERT_EQUAL(hl_turn_hook_queue_early(x->r, &x->dev), 0); /* queued already */
	CU_ASSERT_TRUE(hl_turn_hook_queued(&x->dev));
}

static void test_turn_hooks_early(void)
{
	struct order_ctx x = {0};

	CU_ASSERT_EQUAL_FATAL(hl_reactor_create(&x.r, "t"), 0);
	hl_turn_hook_init(&x.send, order_send, &x);
	hl_turn_hook_init(&x.dev, order_dev, &x);
	hl_turn_hook_init(&x.dev2, order_dev, &x);
	CU_ASSERT_EQUAL(hl_turn_hook_queue_early(x.r, &x.dev), -EAGAIN);
	hl_timer_init(&x.t, order_timer, &x);
	hl_timer_start(x.r, &x.t, 0);
	CU_ASSERT_EQUAL(hl_reactor_run(x.r), 0);
	CU_ASSERT_STRING_EQUAL(x.seq, "dse");
	hl_reactor_destroy(x.r);
}

static void test_busy_poll(void)
{
	struct echo_ctx e = {0};
	struct timespec idle = {.tv_sec = 0, .tv_nsec = 300 * 1000000};
	char b;

	CU_ASSERT_EQUAL_FATAL(hl_reactor_create(&e.r, "poll"), 0);
	hl_reactor_set_poll_us(e.r, 1000); /* 1 ms: longer than the 1 ms timer's wait */
	CU_ASSERT_EQUAL_FATAL(pipe2(e.in, O_NONBLOCK), 0);
	CU_ASSERT_EQUAL_FATAL(pipe(e.out), 0);
	hl_event_init(&e.ev, e.in[0], echo_cb, &e);
	CU_ASSERT_EQUAL_FATAL(hl_event_add(e.r, &e.ev, EPOLLIN), 0);
	hl_timer_init(&e.t[0], echo_timer_cb, &e);
	hl_timer_init(&e.t[1], echo_timer_cb, &e);
	CU_ASSERT_EQUAL_FATAL(hl_reactor_start(e.r), 0);

	/* Ping-pong: each byte comes back before the next one is sent. */
	for (int i = 0; i < 2000; i++) {
		b = (char)i;
		CU_ASSERT_EQUAL_FATAL(write(e.in[1], &b, 1), 1);
		CU_ASSERT_EQUAL_FATAL(read(e.out[0], &b, 1), 1);
		CU_ASSERT_EQUAL(b, (char)i);
	}

	/* Timers fire in deadline order, the 1 ms one inside a poll window. */
	CU_ASSERT_EQUAL(hl_reactor_call(e.r, echo_start_timers, &e), 0);
	CU_ASSERT_EQUAL(read(e.out[0], &b, 1), 1);
	CU_ASSERT_EQUAL(b, 'b');
	CU_ASSERT_EQUAL(read(e.out[0], &b, 1), 1);
	CU_ASSERT_EQUAL(b, 'a');

	/* Idle: asleep, not spinning (a spinning loop would use ~0.3 s). */
	double c0 = cpu_s();
	nanosleep(&idle, NULL);
	double used = cpu_s() - c0;
	CU_ASSERT(used < 0.03);
	if (used >= 0.03)
		fprintf(stderr, "\n  idle reactor used %.3f s of CPU in 0.3 s\n", used);

	/* The window can be turned off while the loop runs; it still serves. */
	hl_reactor_set_poll_us(e.r, 0);
	b = 'z';
	CU_ASSERT_EQUAL(write(e.in[1], &b, 1), 1);
	CU_ASSERT_EQUAL(read(e.out[0], &b, 1), 1);
	CU_ASSERT_EQUAL(b, 'z');

	hl_reactor_stop(e.r);
	hl_reactor_join(e.r);
	CU_ASSERT_EQUAL(e.n, 2001);
	CU_ASSERT_EQUAL(e.werr, 0);
	hl_event_del(&e.ev);
	close(e.in[0]), close(e.in[1]), close(e.out[0]), close(e.out[1]);
	hl_reactor_destroy(e.r);
}

struct fini_ctx {
	struct hl_reactor_fini f[3];
	struct hl_event ev;
	int fds[2];
	int runs[3];
	int mod_rc;    /* hl_event_mod inside the call: the epoll fd is still open */
	int order[3], n_order;
};

static void fini_cb(struct hl_reactor_fini *f)
{
	struct fini_ctx *x = f->arg;
	int i = (int)(f - x->f);

	x->runs[i]++;
	x->order[x->n_order++] = i;
	CU_ASSERT_FALSE(hl_reactor_fini_registered(f));
	if (i == 2) {
		/* the service's own event leaves here, on a live epoll set */
		x->mod_rc = hl_event_mod(&x->ev, EPOLLIN | EPOLLOUT);
		hl_event_del(&x->ev);
		/* a destroy call may cancel another one still registered */
		hl_reactor_on_destroy_cancel(&x->f[1]);
	}
}

static void test_destroy_calls(void)
{
	struct hl_reactor *r;
	struct fini_ctx x = {.mod_rc = 1};

	CU_ASSERT_EQUAL_FATAL(hl_reactor_create(&r, "fini"), 0);
	CU_ASSERT_EQUAL_FATAL(pipe(x.fds), 0);
	hl_event_init(&x.ev, x.fds[0], pipe_cb, NULL);
	CU_ASSERT_EQUAL_FATAL(hl_event_add(r, &x.ev, EPOLLIN), 0);
	for (int i = 0; i < 3; i++) {
		hl_reactor_fini_init(&x.f[i], fini_cb, &x);
		CU_ASSERT_FALSE(hl_reactor_fini_registered(&x.f[i]));
		CU_ASSERT_EQUAL(hl_reactor_on_destroy(r, &x.f[i]), 0);
		CU_ASSERT_TRUE(hl_reactor_fini_registered(&x.f[i]));
	}
	CU_ASSERT_EQUAL(hl_reactor_on_destroy(r, &x.f[0]), -EBUSY);
	/* unregister, register again: still runs once */
	hl_reactor_on_destroy_cancel(&x.f[0]);
	hl_reactor_on_destroy_cancel(&x.f[0]); /* twice: harmless */
	CU_ASSERT_FALSE(hl_reactor_fini_registered(&x.f[0]));
	CU_ASSERT_EQUAL(hl_reactor_on_destroy(r, &x.f[0]), 0);
	/* a reactor with a thread of its own: the calls run on the destroying thread */
	CU_ASSERT_EQUAL_FATAL(hl_reactor_start(r), 0);
	hl_reactor_stop(r);
	hl_reactor_destroy(r); /* joins, then the calls, then closes */
	CU_ASSERT_EQUAL(x.runs[0], 1);
	CU_ASSERT_EQUAL(x.runs[1], 0); /* cancelled by f[2]'s call */
	CU_ASSERT_EQUAL(x.runs[2], 1);
	CU_ASSERT_EQUAL(x.n_order, 2);
	CU_ASSERT_EQUAL(x.order[0], 0); /* newest first: f[0] was registered last */
	CU_ASSERT_EQUAL(x.order[1], 2);
	CU_ASSERT_EQUAL(x.mod_rc, 0);
	CU_ASSERT_PTR_NULL(x.ev.reactor);
	close(x.fds[0]), close(x.fds[1]);

	/* a cancelled call never runs */
	CU_ASSERT_EQUAL_FATAL(hl_reactor_create(&r, "fini2"), 0);
	memset(x.runs, 0, sizeof(x.runs));
	hl_reactor_fini_init(&x.f[0], fini_cb, &x);
	CU_ASSERT_EQUAL(hl_reactor_on_destroy(r, &x.f[0]), 0);
	hl_reactor_on_destroy_cancel(&x.f[0]);
	hl_reactor_destroy(r);
	CU_ASSERT_EQUAL(x.runs[0], 0);
}

struct watch_ctx {
	struct io_uring ring;
	struct hl_uring_watch w;
	int detaches, cqes, events;
	uint64_t data_sum;
};

static void watch_detach(struct hl_uring_watch *w)
{
	struct watch_ctx *x = w->arg;

	CU_ASSERT_PTR_NOT_NULL(w->reactor); /* still attached while the owner cleans up */
	x->detaches++;
}

static void watch_cqe(void *ctx, void *data, int res)
{
	struct watch_ctx *x = ctx;

	CU_ASSERT_EQUAL(res, 0);
	x->cqes++;
	x->data_sum += (uintptr_t)data;
}

static void watch_event(struct hl_event *ev, uint32_t revents)
{
	struct watch_ctx *x = ev->arg;

	(void)revents;
	x->events++;
	hl_uring_reap(&x->ring, false, watch_cqe, x);
	hl_reactor_stop(hl_reactor_current());
}

static void watch_submit_nops(struct watch_ctx *x, unsigned n)
{
	for (unsigned i = 1; i <= n; i++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&x->ring);
		io_uring_prep_nop(sqe);
		io_uring_sqe_set_data(sqe, (void *)(uintptr_t)i);
	}
	CU_ASSERT_EQUAL(io_uring_submit(&x->ring), (int)n);
}

static void test_uring_watch(void)
{
	struct hl_reactor *r1, *r2;
	struct watch_ctx x = {0};

	if (io_uring_queue_init(8, &x.ring, 0)) {
		fprintf(stderr, " (no io_uring here: skipped) ");
		return;
	}
	CU_ASSERT_EQUAL_FATAL(hl_reactor_create(&r1, "w1"), 0);
	CU_ASSERT_EQUAL_FATAL(hl_reactor_create(&r2, "w2"), 0);
	hl_uring_watch_init(&x.w, x.ring.ring_fd, watch_event, watch_detach, &x);
	CU_ASSERT_EQUAL(hl_uring_watch_attach(&x.w, r1, false), 0);
	CU_ASSERT_EQUAL(hl_uring_watch_attach(&x.w, r1, true), 0); /* already: no-op */
	CU_ASSERT_PTR_EQUAL(x.w.reactor, r1);
	/* busy on r1: r2 cannot take it */
	CU_ASSERT_EQUAL(hl_uring_watch_attach(&x.w, r2, true), -EBUSY);
	CU_ASSERT_PTR_EQUAL(x.w.reactor, r1);

	/* CQEs wake the reactor through the ring's fd; the reap sees all three */
	watch_submit_nops(&x, 3);
	CU_ASSERT_EQUAL(hl_reactor_run(r1), 0);
	CU_ASSERT_EQUAL(x.events, 1);
	CU_ASSERT_EQUAL(x.cqes, 3);
	CU_ASSERT_EQUAL(x.data_sum, 6);
	CU_ASSERT_EQUAL(io_uring_cq_ready(&x.ring), 0);

	/* idle: it moves to r2 (r1 sees the owner's detach) */
	CU_ASSERT_EQUAL(hl_uring_watch_attach(&x.w, r2, false), 0);
	CU_ASSERT_EQUAL(x.detaches, 1);
	CU_ASSERT_PTR_EQUAL(x.w.reactor, r2);
	hl_reactor_destroy(r1); /* no longer registered there: nothing runs */
	CU_ASSERT_EQUAL(x.detaches, 1);
	watch_submit_nops(&x, 1);
	CU_ASSERT_EQUAL(hl_reactor_run(r2), 0);
	CU_ASSERT_EQUAL(x.cqes, 4);

	/* r2 destroyed while attached: detached once, before its epoll fd closes */
	hl_reactor_destroy(r2);
	CU_ASSERT_EQUAL(x.detaches, 2);
	CU_ASSERT_PTR_NULL(x.w.reactor);
	CU_ASSERT_PTR_NULL(x.w.ev.reactor);
	CU_ASSERT_FALSE(hl_reactor_fini_registered(&x.w.fini));
	hl_uring_watch_detach(&x.w); /* harmless when detached */
	CU_ASSERT_EQUAL(x.detaches, 2);
	io_uring_queue_exit(&x.ring);
}

/* ---- peeks and an edge-triggered, never-read completion eventfd ---- */

struct peek_ctx {
	struct hl_reactor_peek p[2];
	int ready[2], runs[2];
	bool del_other; /* p[0]'s run deletes p[1] */
};

static bool peek_ready(struct hl_reactor_peek *p)
{
	struct peek_ctx *x = p->arg;
	return x->ready[p == &x->p[1]] > 0;
}

static void peek_run(struct hl_reactor_peek *p)
{
	struct peek_ctx *x = p->arg;
	int i = p == &x->p[1];

	x->ready[i]--;
	x->runs[i]++;
	if (i == 0 && x->del_other) {
		/* the next one asked (the list's head): would run next pass if still there */
		hl_reactor_peek_del(&x->p[1]);
		x->ready[1] = 1;
	}
	if (!x->ready[0] && !x->ready[1])
		hl_reactor_stop(hl_reactor_current());
}

static void guard_stop(struct hl_timer *t)
{
	int *fired = t->arg;
	(*fired)++;
	hl_reactor_stop(hl_reactor_current());
}

/* One run of a fresh reactor (a stopped one does not run again) with both peeks; @return the guard's firings. */
static int peek_phase(struct peek_ctx *x, unsigned poll_us, uint64_t guard_ms)
{
	struct hl_reactor *r;
	struct hl_timer guard;
	int guard_fired = 0;

	CU_ASSERT_EQUAL_FATAL(hl_reactor_create(&r, "peek"), 0);
	hl_timer_init(&guard, guard_stop, &guard_fired);
	hl_reactor_set_poll_us(r, poll_us);
	CU_ASSERT_EQUAL(hl_reactor_peek_add(r, &x->p[0]), 0);
	CU_ASSERT_EQUAL(hl_reactor_peek_add(r, &x->p[0]), -EBUSY);
	CU_ASSERT_EQUAL(hl_reactor_peek_add(r, &x->p[1]), 0);
	CU_ASSERT_PTR_EQUAL(x->p[1].reactor, r);
	hl_timer_start(r, &guard, guard_ms);
	CU_ASSERT_EQUAL(hl_reactor_run(r), 0);
	hl_timer_stop(&guard);
	hl_reactor_peek_del(&x->p[0]);
	hl_reactor_peek_del(&x->p[0]); /* twice: harmless */
	hl_reactor_peek_del(&x->p[1]);
	CU_ASSERT_PTR_NULL(x->p[0].reactor);
	hl_reactor_destroy(r);
	return guard_fired;
}

static void test_peeks(void)
{
	struct peek_ctx x = {0};

	hl_reactor_peek_init(&x.p[0], peek_ready, peek_run, &x);
	hl_reactor_peek_init(&x.p[1], peek_ready, peek_run, &x);

	/* no busy-poll window: never asked (the guard ends the run) */
	x.ready[0] = 1;
	CU_ASSERT_EQUAL(peek_phase(&x, 0, 50), 1);
	CU_ASSERT_EQUAL(x.runs[0], 0);

	/* in the window: both run, in turn, one per pass, long before the guard */
	x.ready[0] = 3;
	x.ready[1] = 3;
	CU_ASSERT_EQUAL(peek_phase(&x, 200000, 2000), 0);
	CU_ASSERT_EQUAL(x.runs[0], 3);
	CU_ASSERT_EQUAL(x.runs[1], 3);

	/* a run that deletes the next one to ask: it is not asked again */
	x.runs[0] = x.runs[1] = 0;
	x.del_other = true;
	x.ready[0] = 2;
	x.ready[1] = 0;
	CU_ASSERT_EQUAL(peek_phase(&x, 200000, 100), 1);
	CU_ASSERT_EQUAL(x.runs[0], 2);
	CU_ASSERT_EQUAL(x.runs[1], 0);
}

/*
 * The file origin's ring (file_uring.c): a registered eventfd watched
 * edge-triggered and never read, reaped "only what is there now", peeked in
 * the busy-poll window. Each CQE's fn submits another NOP, which completes
 * inside the submit, i.e. after the reap took its count: the reap leaves it,
 * and only the eventfd's next edge (or a peek) can bring it in. A watch that
 * strands it never stops (the guard fails the test); one that is not
 * edge-triggered reports the unread eventfd on every pass (counted below).
 */
struct edge_ctx {
	struct io_uring ring;
	struct hl_uring_watch w;
	int efd;
	int events, cqes, resubmit, target;
};

static void edge_cqe(void *ctx, void *data, int res)
{
	struct edge_ctx *x = ctx;

	(void)data;
	CU_ASSERT_EQUAL(res, 0);
	x->cqes++;
	if (x->resubmit > 0) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&x->ring);

		x->resubmit--;
		io_uring_prep_nop(sqe);
		CU_ASSERT_EQUAL(io_uring_submit(&x->ring), 1);
	}
}

static void edge_event(struct hl_event *ev, uint32_t revents)
{
	struct edge_ctx *x = ev->arg;

	CU_ASSERT_TRUE(revents & EPOLLIN);
	x->events++;
	hl_uring_reap(&x->ring, false, edge_cqe, x);
	if (x->target && x->cqes == x->target)
		hl_reactor_stop(hl_reactor_current());
}

static void edge_run(bool peek)
{
	struct hl_reactor *r;
	struct edge_ctx x = {0};
	struct hl_timer guard;
	int guard_fired = 0;
	struct io_uring_params p = {.flags = IORING_SETUP_COOP_TASKRUN | IORING_SETUP_SINGLE_ISSUER};

	if (io_uring_queue_init_params(8, &x.ring, &p) &&
	    io_uring_queue_init(8, &x.ring, 0)) {
		fprintf(stderr, " (no io_uring here: skipped) ");
		return;
	}
	x.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	CU_ASSERT_FATAL(x.efd >= 0);
	CU_ASSERT_EQUAL_FATAL(io_uring_register_eventfd(&x.ring, x.efd), 0);
	CU_ASSERT_EQUAL_FATAL(hl_reactor_create(&r, "edge"), 0);
	if (peek)
		hl_reactor_set_poll_us(r, 200000);
	hl_timer_init(&guard, guard_stop, &guard_fired);
	hl_uring_watch_init(&x.w, x.efd, edge_event, NULL, &x);
	hl_uring_watch_edge(&x.w);
	if (peek)
		hl_uring_watch_peek(&x.w, &x.ring);
	CU_ASSERT_EQUAL_FATAL(hl_uring_watch_attach(&x.w, r, false), 0);
	CU_ASSERT_EQUAL(x.w.peek.reactor, peek ? r : NULL);

	/* 2 NOPs, each CQE submits another, 10 times: 12 CQEs, 10 of them stranded by a wrong rule */
	x.resubmit = 10;
	x.target = 12;
	for (int i = 0; i < 2; i++)
		io_uring_prep_nop(io_uring_get_sqe(&x.ring));
	CU_ASSERT_EQUAL(io_uring_submit(&x.ring), 2);
	hl_timer_start(r, &guard, 2000);
	CU_ASSERT_EQUAL(hl_reactor_run(r), 0);
	CU_ASSERT_EQUAL(guard_fired, 0);
	CU_ASSERT_EQUAL(x.cqes, 12);
	CU_ASSERT_EQUAL(io_uring_cq_ready(&x.ring), 0);
	/* each reap took what was there (more than one pass: the rule held) */
	CU_ASSERT_TRUE(x.events >= 2);

	/* nothing new: the never-read eventfd is not reported again (edge, not level) */
	hl_timer_stop(&guard);
	hl_reactor_destroy(r); /* a stopped reactor does not run again: a fresh one */
	CU_ASSERT_EQUAL_FATAL(hl_reactor_create(&r, "edge2"), 0);
	CU_ASSERT_EQUAL_FATAL(hl_uring_watch_attach(&x.w, r, false), 0);
	x.events = 0;
	x.target = 0;
	hl_timer_start(r, &guard, 50);
	CU_ASSERT_EQUAL(hl_reactor_run(r), 0);
	CU_ASSERT_EQUAL(guard_fired, 1);
	CU_ASSERT_TRUE(x.events <= 1); /* at most the edge a peek already served */
	CU_ASSERT_EQUAL(x.cqes, 12);

	hl_reactor_destroy(r); /* detaches: the peek leaves with the watch */
	CU_ASSERT_PTR_NULL(x.w.reactor);
	CU_ASSERT_PTR_NULL(x.w.peek.reactor);
	io_uring_queue_exit(&x.ring);
	close(x.efd);
}

static void test_uring_edge_never_read(void)
{
	edge_run(false);
}

static void test_uring_edge_peeked(void)
{
	edge_run(true);
}

/*
 * A lone I/O in flight on the peeks stretches the busy-poll window to
 * HL_REACTOR_POLL_IO_MULT times its length; none, or more than
 * HL_REACTOR_POLL_IO_MAX, do not. Measured by when the peek is last asked
 * (wall clock: the window is wall-clock time, also on a loaded machine).
 */
struct stretch_ctx {
	struct hl_reactor_peek p;
	unsigned inflight;
	uint64_t start_ns, last_ns;
};

static bool stretch_ready(struct hl_reactor_peek *p)
{
	struct stretch_ctx *x = p->arg;
	x->last_ns = hl_now_ns();
	return false;
}

static void stretch_run(struct hl_reactor_peek *p)
{
	(void)p;
}

static void stretch_stop(struct hl_timer *t)
{
	(void)t;
	hl_reactor_stop(hl_reactor_current());
}

/* @return ms from the reactor's start to the peek's last ask (window 20 ms, run 300 ms). */
static double stretch_phase(unsigned inflight, bool counted)
{
	struct stretch_ctx x = {0};
	struct hl_reactor *r;
	struct hl_timer stop;

	CU_ASSERT_EQUAL_FATAL(hl_reactor_create(&r, "stretch"), 0);
	hl_reactor_peek_init(&x.p, stretch_ready, stretch_run, &x);
	if (counted)
		x.p.inflight = &x.inflight;
	x.inflight = inflight;
	hl_reactor_set_poll_us(r, 20000);
	CU_ASSERT_EQUAL(hl_reactor_peek_add(r, &x.p), 0);
	hl_timer_init(&stop, stretch_stop, NULL);
	hl_timer_start(r, &stop, 300);
	x.start_ns = hl_now_ns();
	CU_ASSERT_EQUAL(hl_reactor_run(r), 0);
	hl_timer_stop(&stop);
	hl_reactor_peek_del(&x.p);
	hl_reactor_destroy(r);
	return (double)(x.last_ns - x.start_ns) / 1e6;
}

static void test_poll_stretch(void)
{
	double none = stretch_phase(0, true), lone = stretch_phase(1, true),
	       two = stretch_phase(HL_REACTOR_POLL_IO_MAX, true),
	       many = stretch_phase(HL_REACTOR_POLL_IO_MAX + 1, true), uncounted = stretch_phase(1, false);

	/*
	 * 20 ms window; 80 ms stretched. The last ask comes a pass before the
	 * end, or earlier by a preemption: 50 ms splits the two with margin.
	 */
	CU_ASSERT(none < 50);
	CU_ASSERT(lone >= 50 && lone < 200);
	CU_ASSERT(two >= 50 && two < 200);
	CU_ASSERT(many < 50);
	CU_ASSERT(uncounted < 50);
	if (none >= 50 || lone < 50 || two < 50 || many >= 50 || uncounted >= 50)
		fprintf(stderr, "\n  last ask after %.1f / %.1f / %.1f / %.1f / %.1f ms\n", none, lone, two,
		        many, uncounted);
}

/* The reactor's thread, as top -H and /proc/PID/task/TID/comm show it. */
static char seen_name[32];
static int name_done;

static void name_cb(void *arg)
{
	(void)arg;
	if (pthread_getname_np(pthread_self(), seen_name, sizeof(seen_name)))
		seen_name[0] = '\0';
	__atomic_store_n(&name_done, 1, __ATOMIC_RELEASE);
}

/*
 * A started reactor's thread carries its name (cut to the 15 bytes Linux
 * keeps): per-disk service threads (iscsi-ua, rbd-watch) could not be
 * told from the process's other threads, all "hotlund".
 */
static void test_thread_name(void)
{
	const char *names[] = {"iscsi-ua", "a-name-longer-than-15-bytes"};
	const char *want[] = {"iscsi-ua", "a-name-longer-t"};

	for (unsigned i = 0; i < 2; i++) {
		struct hl_reactor *r;

		CU_ASSERT_EQUAL_FATAL(hl_reactor_create(&r, names[i]), 0);
		CU_ASSERT_EQUAL_FATAL(hl_reactor_start(r), 0);
		__atomic_store_n(&name_done, 0, __ATOMIC_RELEASE);
		CU_ASSERT_EQUAL(hl_reactor_call(r, name_cb, NULL), 0);
		for (int t = 0; t < 500 && !__atomic_load_n(&name_done, __ATOMIC_ACQUIRE); t++)
			usleep(10000);
		CU_ASSERT_STRING_EQUAL(seen_name, want[i]);
		hl_reactor_stop(r);
		hl_reactor_join(r);
		hl_reactor_destroy(r);
	}
}

/* ---- posts ---- */

static struct hl_reactor *post_r;
static struct hl_reactor_post posts[6];
static char post_order[16];
static int post_n;

static void post_mark(void *arg)
{
	int i = (int)(intptr_t)arg;

	if (post_n < (int)sizeof(post_order) - 1)
		post_order[post_n++] = (char)('a' + i);
	if (i == 0 && post_n == 1) {
		/* e is queued behind: taken back, it does not run */
		CU_ASSERT_TRUE(hl_reactor_post_cancel(post_r, &posts[4]));
		/* posted again while the queue drains: next pass, not this one */
		CU_ASSERT_EQUAL(hl_reactor_post(post_r, &posts[0]), 0);
	}
	if (i == 5)
		hl_reactor_stop(post_r);
}

static void call_mark(void *arg)
{
	(void)arg;
	post_order[post_n++] = 'X';
}

/*
 * Posts allocate nothing: with malloc failing a call cannot be queued on a
 * fresh reactor, a post can. Posts and calls run in one FIFO order; a
 * post queued twice runs once; cancel takes one back from anywhere in the
 * queue (also its tail, also while the queue drains).
 */
static void test_posts(void)
{
	CU_ASSERT_EQUAL_FATAL(hl_reactor_create(&post_r, "posts"), 0);
	for (int i = 0; i < 6; i++)
		hl_reactor_post_init(&posts[i], post_mark, (void *)(intptr_t)i);
	post_n = 0;
	memset(post_order, 0, sizeof(post_order));

	failed_mallocs = 0;
	fail_malloc_set(1);
	CU_ASSERT_EQUAL(hl_reactor_call(post_r, call_mark, NULL), -ENOMEM);
	CU_ASSERT_EQUAL(hl_reactor_post(post_r, &posts[0]), 0);
	CU_ASSERT_EQUAL(hl_reactor_post(post_r, &posts[1]), 0);
	CU_ASSERT_EQUAL(hl_reactor_post(post_r, &posts[2]), 0);
	CU_ASSERT_EQUAL(hl_reactor_post(post_r, &posts[0]), -EBUSY);
	CU_ASSERT_TRUE(hl_reactor_post_cancel(post_r, &posts[1]));
	CU_ASSERT_FALSE(hl_reactor_post_cancel(post_r, &posts[1]));
	CU_ASSERT_TRUE(hl_reactor_post_cancel(post_r, &posts[2])); /* the tail */
	CU_ASSERT_EQUAL(hl_reactor_post(post_r, &posts[3]), 0);
	CU_ASSERT_EQUAL(hl_reactor_post(post_r, &posts[4]), 0);
	fail_malloc_set(0);
	CU_ASSERT_TRUE(failed_mallocs >= 1);
	CU_ASSERT_EQUAL(hl_reactor_call(post_r, call_mark, NULL), 0);
	CU_ASSERT_EQUAL(hl_reactor_post(post_r, &posts[5]), 0);

	CU_ASSERT_EQUAL(hl_reactor_run(post_r), 0);
	CU_ASSERT_STRING_EQUAL(post_order, "adXf");
	CU_ASSERT_TRUE(hl_reactor_post_cancel(post_r, &posts[0])); /* a's second post, never run */
	CU_ASSERT_FALSE(hl_reactor_post_cancel(NULL, &posts[0]));
	hl_reactor_destroy(post_r);
}

#define XPOSTS 2000
static struct hl_reactor_post xposts[XPOSTS];
static int xpost_count;
static pthread_t xpost_on;

static void xpost_cb(void *arg)
{
	struct hl_reactor *r = arg;

	xpost_on = pthread_self();
	if (++xpost_count == XPOSTS)
		hl_reactor_stop(r);
}

static void *xposter(void *arg)
{
	struct hl_reactor *r = arg;

	for (int i = 0; i < XPOSTS; i++)
		CU_ASSERT_EQUAL(hl_reactor_post(r, &xposts[i]), 0);
	return NULL;
}

/* Posts from another thread, to a running loop, each run once on the loop's thread. */
static void test_posts_cross_thread(void)
{
	struct hl_reactor *r;
	pthread_t th;

	CU_ASSERT_EQUAL_FATAL(hl_reactor_create(&r, "xposts"), 0);
	for (int i = 0; i < XPOSTS; i++)
		hl_reactor_post_init(&xposts[i], xpost_cb, r);
	xpost_count = 0;
	CU_ASSERT_EQUAL_FATAL(hl_reactor_start(r), 0);
	CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, xposter, r), 0);
	pthread_join(th, NULL);
	hl_reactor_join(r);
	CU_ASSERT_EQUAL(xpost_count, XPOSTS);
	CU_ASSERT_FALSE(pthread_equal(xpost_on, pthread_self()));
	for (int i = 0; i < XPOSTS; i++)
		CU_ASSERT_PTR_NULL(xposts[i].queued_on);
	hl_reactor_destroy(r);
}

static const struct hl_test tests[] = {
	{"event fires; del guards the batch", test_event_fires_and_del_guards_batch},
	{"timers in deadline order", test_timers_fire_in_deadline_order},
	{"cross-thread calls", test_cross_thread_calls_run_on_loop_thread},
	{"current reactor", test_current_reactor_is_set_inside_loop},
	{"busy polling: events, timers, calls; idle sleeps", test_busy_poll},
	{"turn hooks: once per turn, after timers; cancel", test_turn_hooks},
	{"turn hooks: early ones before the others", test_turn_hooks_early},
	{"destroy calls: once, before the epoll fd closes; cancel", test_destroy_calls},
	{"uring watch: attach, move when idle, reap, detach on destroy", test_uring_watch},
	{"peeks: only in the busy-poll window, in turn; del", test_peeks},
	{"peeks: a lone I/O in flight stretches the busy-poll window", test_poll_stretch},
	{"uring watch: edge-triggered never-read eventfd strands no CQE", test_uring_edge_never_read},
	{"uring watch: same, peeked in the busy-poll window", test_uring_edge_peeked},
	{"a started reactor's thread carries its name", test_thread_name},
	{"posts: no malloc, one FIFO with calls, once, cancel", test_posts},
	{"posts from another thread run on the loop's", test_posts_cross_thread},
	{NULL, NULL},
};

int main(void)
{
	return hl_test_run("event", tests);
}
