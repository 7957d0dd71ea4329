/*
 * reactor.c - one epoll loop per thread, a binary min-heap of timers, and a
 * mutex-protected call queue woken through an eventfd for cross-thread work.
 *
 * Hazards handled here:
 * - A callback may delete (and free) any event, including ones still waiting
 *   in the current epoll batch: hl_event_del() clears those batch entries.
 * - Calls posted from other threads run in FIFO order on the loop thread; a
 *   call posted while the loop drains the queue runs in the next pass, so a
 *   call that re-posts itself cannot starve file events.
 * - hl_reactor_call grows its ring with malloc and fails when that does;
 *   what must not be lost (a session kill) is posted with hl_reactor_post
 *   instead: the request is embedded in its owner and linked into a second
 *   queue, so nothing is allocated. Both queues are one FIFO (each entry
 *   carries a sequence number, the drain takes the older head): callers
 *   rely on a kill running before a call posted after it (tmf.c's fence).
 *
 * Turn hooks (hl_turn_hook_queue): work that many events of one turn
 * produce is handed on once at the end of the turn (one io_uring_submit
 * for all the turn's cache-device reads, one sendmsg for a connection's
 * responses): they run after the timers, before the loop waits.
 *
 * Destroy calls (hl_reactor_on_destroy): a per-thread service that keeps a
 * descriptor in a reactor's epoll set for the reactor's life (the io_uring
 * rings of file_uring.c and tx_uring.c) is told when the reactor goes, while
 * the epoll fd is still open, instead of leaving the set whenever it idles.
 *
 * Busy polling (hl_reactor_set_poll_us): a request at queue depth 1 is a
 * ping-pong between initiator and target, and each time the reactor sleeps
 * in epoll_wait its CPU may go idle; waking it costs more than serving a
 * page-cache read (most on a virtual machine, where the wake-up is an
 * interrupt to the hypervisor). So before sleeping the loop polls epoll
 * without blocking for a short window. An idle reactor sleeps after one
 * window; a busy one rarely sleeps. Measured in docs/benchmarks.md (4 KiB
 * reads at queue depth 1: about 2.3x the IOPS with a 50 us window).
 * Within the window the loop also asks its peeks (hl_reactor_peek: the
 * io_uring CQs of uring_watch.c) after each empty epoll_wait: the wait ran
 * the rings' task work on its way out, so a CQE may be there before epoll
 * reports its eventfd. While the peeks have a lone I/O in flight (struct
 * hl_reactor_peek's inflight: 1 to HL_REACTOR_POLL_IO_MAX), the window is
 * HL_REACTOR_POLL_IO_MULT times as long: a QD1 cache hit's device read
 * (40-70 us on the test VM) outlasted the 50 us window, counted from the
 * end of the submitting turn, in 2-22% of hits, and each such sleep cost
 * ~100-250 us (the completion IRQ on the other CPU wakes the sleeping one).
 */
#include "hotlun/event.h"
#include "hotlun/log.h"
#include "hotlun/util.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define REACTOR_BATCH 128

struct reactor_call {
	hl_call_fn fn;
	void *arg;
	uint64_t seq; /* order among calls and posts */
};

struct hl_reactor {
	char name[32];
	int epfd;
	struct hl_event wake_ev; /* eventfd for hl_reactor_call / stop */
	volatile int stopping;

	/* current epoll batch, so hl_event_del can cancel pending entries */
	struct epoll_event batch[REACTOR_BATCH];
	int batch_n, batch_i;

	/* timer min-heap ordered by deadline */
	struct hl_timer **heap;
	size_t heap_n, heap_cap;

	/* cross-thread calls; guarded by call_lock */
	pthread_mutex_t call_lock;
	struct reactor_call *calls;            /* ring buffer, guarded by call_lock */
	size_t calls_head, calls_n, calls_cap; /* guarded by call_lock */
	int wake_pending;                      /* guarded by call_lock: eventfd already written */
	struct hl_reactor_post *posts;         /* FIFO, guarded by call_lock */
	struct hl_reactor_post **posts_tail;   /* guarded by call_lock */
	uint64_t next_seq;                     /* guarded by call_lock */

	pthread_t thread;
	bool has_thread;
	_Atomic uint64_t poll_ns;          /* busy-poll window, 0: off */
	_Atomic uint64_t heartbeat;        /* loop passes; read by the watchdog (any thread) */
	struct hl_turn_hook *hooks;        /* queued for the end of this turn, newest first */
	struct hl_turn_hook *hooks_early;  /* ... run before those (hl_turn_hook_queue_early) */
	struct hl_reactor_fini *finis;     /* run by hl_reactor_destroy, newest first */
	struct hl_reactor_peek *peeks;     /* asked during the busy-poll window */
	struct hl_reactor_peek *peek_next; /* the next one peeks_run asks */
};

static __thread struct hl_reactor *current_reactor;

/*
 * The reactor's three lists (turn hooks, destroy calls, peeks) hold nodes
 * of one shape: next, pprev (NULL while the node is in no list) and the
 * reactor. NODE_PUSH puts node n at the head of the list at head (of
 * reactor r); NODE_UNLINK takes a linked node out.
 */
#define NODE_PUSH(head, n, r)                                                                      \
	do {                                                                                       \
		(n)->reactor = (r);                                                                \
		(n)->next = *(head);                                                               \
		if ((n)->next)                                                                     \
			(n)->next->pprev = &(n)->next;                                             \
		(n)->pprev = (head);                                                               \
		*(head) = (n);                                                                     \
	} while (0)
#define NODE_UNLINK(n)                                                                             \
	do {                                                                                       \
		*(n)->pprev = (n)->next;                                                           \
		if ((n)->next)                                                                     \
			(n)->next->pprev = (n)->pprev;                                             \
		(n)->next = NULL;                                                                  \
		(n)->pprev = NULL;                                                                 \
	} while (0)

uint64_t hl_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

struct hl_reactor *hl_reactor_current(void)
{
	return current_reactor;
}

const char *hl_reactor_name(const struct hl_reactor *r)
{
	return r->name;
}

static void wake_drain(struct hl_event *ev, uint32_t revents);

int hl_reactor_create(struct hl_reactor **out, const char *name)
{
	struct hl_reactor *r = calloc(1, sizeof(*r));
	int efd, rc;

	if (!r)
		return -ENOMEM;
	hl_strlcpy(r->name, name ? name : "reactor", sizeof(r->name));
	r->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (r->epfd < 0) {
		rc = -errno;
		free(r);
		return rc;
	}
	efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (efd < 0) {
		rc = -errno;
		close(r->epfd);
		free(r);
		return rc;
	}
	pthread_mutex_init(&r->call_lock, NULL);
	r->posts_tail = &r->posts;
	hl_event_init(&r->wake_ev, efd, wake_drain, r);
	rc = hl_event_add(r, &r->wake_ev, EPOLLIN);
	if (rc) {
		close(efd);
		close(r->epfd);
		pthread_mutex_destroy(&r->call_lock);
		free(r);
		return rc;
	}
	*out = r;
	return 0;
}

void hl_reactor_destroy(struct hl_reactor *r)
{
	if (!r)
		return;
	hl_reactor_join(r);
	/* Before the epoll fd closes: a destroy call may still delete its events. */
	while (r->finis) {
		struct hl_reactor_fini *f = r->finis;
		hl_reactor_on_destroy_cancel(f);
		f->fn(f);
	}
	hl_event_del(&r->wake_ev);
	close(r->wake_ev.fd);
	close(r->epfd);
	pthread_mutex_destroy(&r->call_lock);
	free(r->calls);
	free(r->heap);
	free(r);
}

int hl_reactor_on_destroy(struct hl_reactor *r, struct hl_reactor_fini *f)
{
	if (f->pprev)
		return -EBUSY;
	NODE_PUSH(&r->finis, f, r);
	return 0;
}

void hl_reactor_on_destroy_cancel(struct hl_reactor_fini *f)
{
	if (!f->pprev)
		return;
	NODE_UNLINK(f);
	f->reactor = NULL;
}

/* ---- peeks ---- */

int hl_reactor_peek_add(struct hl_reactor *r, struct hl_reactor_peek *p)
{
	if (p->pprev)
		return -EBUSY;
	NODE_PUSH(&r->peeks, p, r);
	return 0;
}

void hl_reactor_peek_del(struct hl_reactor_peek *p)
{
	struct hl_reactor *r = p->reactor;

	if (!p->pprev)
		return;
	if (r->peek_next == p)
		r->peek_next = p->next;
	NODE_UNLINK(p);
	p->reactor = NULL;
}

/*
 * Run the first ready peek, asking in turn from where the last pass stopped
 * (no queue starves another). @return true when one ran.
 */
static bool peeks_run(struct hl_reactor *r)
{
	struct hl_reactor_peek *p = r->peek_next ? r->peek_next : r->peeks;
	struct hl_reactor_peek *start = p;

	while (p) {
		struct hl_reactor_peek *next = p->next ? p->next : r->peeks;

		if (p->ready(p)) {
			r->peek_next = next;
			p->run(p);
			return true;
		}
		p = next;
		if (p == start)
			break;
	}
	return false;
}

/* A lone I/O in flight on the peeks: the busy-poll window stretches (file comment). */
static bool peeks_lone_io(struct hl_reactor *r)
{
	unsigned n = 0;

	for (struct hl_reactor_peek *p = r->peeks; p; p = p->next)
		if (p->inflight)
			n += *p->inflight;
	return n >= 1 && n <= HL_REACTOR_POLL_IO_MAX;
}

/* ---- file events ---- */

void hl_event_init(struct hl_event *ev, int fd, hl_event_fn fn, void *arg)
{
	ev->fd = fd;
	ev->events = 0;
	ev->fn = fn;
	ev->arg = arg;
	ev->reactor = NULL;
}

int hl_event_add(struct hl_reactor *r, struct hl_event *ev, uint32_t events)
{
	struct epoll_event ee = {.events = events, .data.ptr = ev};

	if (ev->reactor)
		return -EBUSY;
	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, ev->fd, &ee) < 0)
		return -errno;
	ev->reactor = r;
	ev->events = events;
	return 0;
}

int hl_event_mod(struct hl_event *ev, uint32_t events)
{
	struct epoll_event ee = {.events = events, .data.ptr = ev};

	if (!ev->reactor)
		return -EINVAL;
	if (ev->events == events)
		return 0;
	if (epoll_ctl(ev->reactor->epfd, EPOLL_CTL_MOD, ev->fd, &ee) < 0)
		return -errno;
	ev->events = events;
	return 0;
}

void hl_event_del(struct hl_event *ev)
{
	struct hl_reactor *r = ev->reactor;

	if (!r)
		return;
	epoll_ctl(r->epfd, EPOLL_CTL_DEL, ev->fd, NULL);
	/* Stale-event guard: the owner may free ev right after this returns. */
	for (int i = r->batch_i; i < r->batch_n; i++) {
		if (r->batch[i].data.ptr == ev)
			r->batch[i].data.ptr = NULL;
	}
	ev->reactor = NULL;
	ev->events = 0;
}

/* ---- timers: binary min-heap ---- */

void hl_timer_init(struct hl_timer *t, hl_timer_fn fn, void *arg)
{
	t->deadline_ns = 0;
	t->fn = fn;
	t->arg = arg;
	t->heap_idx = (size_t)-1;
	t->reactor = NULL;
}

static void heap_swap(struct hl_reactor *r, size_t a, size_t b)
{
	struct hl_timer *t = r->heap[a];
	r->heap[a] = r->heap[b];
	r->heap[b] = t;
	r->heap[a]->heap_idx = a;
	r->heap[b]->heap_idx = b;
}

static void heap_up(struct hl_reactor *r, size_t i)
{
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (r->heap[p]->deadline_ns <= r->heap[i]->deadline_ns)
			break;
		heap_swap(r, i, p);
		i = p;
	}
}

static void heap_down(struct hl_reactor *r, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, m = i;
		if (l < r->heap_n && r->heap[l]->deadline_ns < r->heap[m]->deadline_ns)
			m = l;
		if (l + 1 < r->heap_n && r->heap[l + 1]->deadline_ns < r->heap[m]->deadline_ns)
			m = l + 1;
		if (m == i)
			break;
		heap_swap(r, i, m);
		i = m;
	}
}

void hl_timer_stop(struct hl_timer *t)
{
	struct hl_reactor *r = t->reactor;
	size_t i = t->heap_idx;

	if (i == (size_t)-1 || !r)
		return;
	r->heap_n--;
	if (i != r->heap_n) {
		r->heap[i] = r->heap[r->heap_n];
		r->heap[i]->heap_idx = i;
		heap_down(r, i);
		heap_up(r, i);
	}
	t->heap_idx = (size_t)-1;
}

void hl_timer_start(struct hl_reactor *r, struct hl_timer *t, uint64_t delay_ms)
{
	hl_timer_stop(t);
	if (r->heap_n == r->heap_cap) {
		size_t cap = r->heap_cap ? r->heap_cap * 2 : 64;
		struct hl_timer **h = realloc(r->heap, cap * sizeof(*h));
		if (!h) {
			/* Never lose a timer: fire it on the next pass instead. */
			HL_ERR("event", "%s: timer heap allocation failed", r->name);
			abort();
		}
		r->heap = h;
		r->heap_cap = cap;
	}
	t->reactor = r;
	t->deadline_ns = hl_now_ns() + delay_ms * 1000000ull;
	t->heap_idx = r->heap_n;
	r->heap[r->heap_n++] = t;
	heap_up(r, t->heap_idx);
}

static void timers_run(struct hl_reactor *r)
{
	uint64_t now = hl_now_ns();

	while (r->heap_n && r->heap[0]->deadline_ns <= now) {
		struct hl_timer *t = r->heap[0];
		hl_timer_stop(t);
		t->fn(t);
	}
}

/* epoll_wait's timeout: until the first timer (0: one is due), -1: none. */
static int timers_timeout(struct hl_reactor *r)
{
	uint64_t now = hl_now_ns();

	if (!r->heap_n)
		return -1;
	if (r->heap[0]->deadline_ns <= now)
		return 0;
	uint64_t wait_ns = r->heap[0]->deadline_ns - now;
	/* round up so we never wake just before the deadline and spin */
	uint64_t ms = (wait_ns + 999999) / 1000000;
	return ms > 60000 ? 60000 : (int)ms;
}

/* ---- cross-thread calls ---- */

static void wake(struct hl_reactor *r)
{
	uint64_t one = 1;
	ssize_t n = write(r->wake_ev.fd, &one, sizeof(one));
	(void)n; /* EAGAIN means the counter is already non-zero: still awake */
}

int hl_reactor_call(struct hl_reactor *r, hl_call_fn fn, void *arg)
{
	bool need_wake;

	pthread_mutex_lock(&r->call_lock);
	if (r->calls_n == r->calls_cap) {
		size_t cap = r->calls_cap ? r->calls_cap * 2 : 256;
		struct reactor_call *c = malloc(cap * sizeof(*c));
		if (!c) {
			pthread_mutex_unlock(&r->call_lock);
			return -ENOMEM;
		}
		for (size_t i = 0; i < r->calls_n; i++)
			c[i] = r->calls[(r->calls_head + i) % r->calls_cap];
		free(r->calls);
		r->calls = c;
		r->calls_head = 0;
		r->calls_cap = cap;
	}
	r->calls[(r->calls_head + r->calls_n) % r->calls_cap] =
	    (struct reactor_call){fn, arg, r->next_seq++};
	r->calls_n++;
	need_wake = !r->wake_pending;
	r->wake_pending = 1;
	pthread_mutex_unlock(&r->call_lock);

	if (need_wake)
		wake(r);
	return 0;
}

int hl_reactor_post(struct hl_reactor *r, struct hl_reactor_post *p)
{
	bool need_wake;

	pthread_mutex_lock(&r->call_lock);
	if (p->queued_on) {
		pthread_mutex_unlock(&r->call_lock);
		return -EBUSY;
	}
	p->next = NULL;
	p->queued_on = r;
	p->seq = r->next_seq++;
	*r->posts_tail = p;
	r->posts_tail = &p->next;
	need_wake = !r->wake_pending;
	r->wake_pending = 1;
	pthread_mutex_unlock(&r->call_lock);

	if (need_wake)
		wake(r);
	return 0;
}

/* Unlink p, queued on r; call_lock held. */
static void post_unlink_locked(struct hl_reactor *r, struct hl_reactor_post *p)
{
	struct hl_reactor_post **pp = &r->posts;

	while (*pp != p)
		pp = &(*pp)->next;
	*pp = p->next;
	if (r->posts_tail == &p->next)
		r->posts_tail = pp;
	p->next = NULL;
	p->queued_on = NULL;
}

bool hl_reactor_post_cancel(struct hl_reactor *r, struct hl_reactor_post *p)
{
	bool was;

	if (!r)
		return false;
	pthread_mutex_lock(&r->call_lock);
	was = p->queued_on == r;
	if (was)
		post_unlink_locked(r, p);
	pthread_mutex_unlock(&r->call_lock);
	return was;
}

static void wake_drain(struct hl_event *ev, uint32_t revents)
{
	struct hl_reactor *r = ev->arg;
	uint64_t v, end;

	(void)revents;
	if (read(ev->fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		HL_WARN("event", "%s: eventfd read: %s", r->name, strerror(errno));

	pthread_mutex_lock(&r->call_lock);
	r->wake_pending = 0;
	end = r->next_seq;
	pthread_mutex_unlock(&r->call_lock);

	/* Run only what was queued before this pass (see file comment), oldest first. */
	for (;;) {
		struct reactor_call c = {NULL, NULL, 0};
		pthread_mutex_lock(&r->call_lock);
		bool call = r->calls_n && r->calls[r->calls_head].seq < end;
		bool post = r->posts && r->posts->seq < end;
		if (call && post)
			call = r->calls[r->calls_head].seq < r->posts->seq;
		if (call) {
			c = r->calls[r->calls_head];
			r->calls_head = (r->calls_head + 1) % r->calls_cap;
			r->calls_n--;
		} else if (post) {
			/* read under the lock: once off the queue its owner may free it */
			c = (struct reactor_call){r->posts->fn, r->posts->arg, r->posts->seq};
			post_unlink_locked(r, r->posts);
		}
		pthread_mutex_unlock(&r->call_lock);
		if (!c.fn)
			break;
		c.fn(c.arg);
	}
}

/* ---- turn hooks ---- */

int hl_turn_hook_queue(struct hl_reactor *r, struct hl_turn_hook *h)
{
	if (!r || r != current_reactor)
		return -EAGAIN;
	if (h->pprev)
		return 0;
	NODE_PUSH(&r->hooks, h, r);
	return 0;
}

/* HOTLUN_HOOKS_EARLY=0: early hooks queue as the others (A/B of the order). */
static bool hooks_early_on(void)
{
	static _Atomic int v = -1;
	int x = atomic_load_explicit(&v, memory_order_relaxed);

	if (x < 0) {
		const char *e = getenv("HOTLUN_HOOKS_EARLY");
		x = !(e && e[0] == '0');
		atomic_store_explicit(&v, x, memory_order_relaxed);
	}
	return x;
}

int hl_turn_hook_queue_early(struct hl_reactor *r, struct hl_turn_hook *h)
{
	if (!r || r != current_reactor)
		return -EAGAIN;
	if (h->pprev)
		return 0;
	if (hooks_early_on())
		NODE_PUSH(&r->hooks_early, h, r);
	else
		NODE_PUSH(&r->hooks, h, r);
	return 0;
}

void hl_turn_hook_cancel(struct hl_turn_hook *h)
{
	if (!h->pprev)
		return;
	NODE_UNLINK(h);
}

static void turn_hooks_run(struct hl_reactor *r)
{
	struct hl_turn_hook *h;

	while ((h = r->hooks_early) != NULL || (h = r->hooks) != NULL) {
		hl_turn_hook_cancel(h);
		h->fn(h);
	}
}

/* ---- the loop ---- */

uint64_t hl_reactor_heartbeat(const struct hl_reactor *r)
{
	return atomic_load_explicit(&r->heartbeat, memory_order_relaxed);
}

void hl_reactor_set_poll_us(struct hl_reactor *r, unsigned us)
{
	atomic_store_explicit(&r->poll_ns, (uint64_t)us * 1000, memory_order_relaxed);
}

/* epoll_wait, after polling for up to the busy-poll window (see file comment). */
static int reactor_wait(struct hl_reactor *r, int timeout_ms)
{
	uint64_t poll_ns = atomic_load_explicit(&r->poll_ns, memory_order_relaxed);

	if (poll_ns && timeout_ms != 0) {
		uint64_t io_ns = poll_ns * HL_REACTOR_POLL_IO_MULT, spent;
		if (timeout_ms > 0 && io_ns > (uint64_t)timeout_ms * 1000000)
			io_ns = (uint64_t)timeout_ms * 1000000;
		if (poll_ns > io_ns)
			poll_ns = io_ns;
		uint64_t start = hl_now_ns();
		do {
			int n = epoll_wait(r->epfd, r->batch, REACTOR_BATCH, 0);
			if (n != 0)
				return n;
			/* The wait ran the rings' task work: their CQEs may be there now. */
			if (r->peeks && peeks_run(r))
				return 0;
			spent = hl_now_ns() - start;
		} while (!r->stopping &&
		         (spent < poll_ns || (spent < io_ns && r->peeks && peeks_lone_io(r))));
	}
	return epoll_wait(r->epfd, r->batch, REACTOR_BATCH, timeout_ms);
}

int hl_reactor_run(struct hl_reactor *r)
{
	struct hl_reactor *prev = current_reactor;

	current_reactor = r;
	while (!r->stopping) {
		atomic_fetch_add_explicit(&r->heartbeat, 1, memory_order_relaxed);
		timers_run(r);
		/*
		 * A hook may arm a timer: the wait is computed after the hooks, but
		 * a zero-delay timer they armed runs after the next epoll pass, as
		 * any other (a connection's rx resume yields to the others' events).
		 */
		turn_hooks_run(r);
		if (r->stopping)
			break;
		int timeout = timers_timeout(r);
		int n = reactor_wait(r, timeout);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			int rc = -errno;
			HL_ERR("event", "%s: epoll_wait: %s", r->name, strerror(errno));
			current_reactor = prev;
			return rc;
		}
		r->batch_n = n;
		for (r->batch_i = 0; r->batch_i < r->batch_n;) {
			struct epoll_event *ee = &r->batch[r->batch_i++];
			struct hl_event *ev = ee->data.ptr;
			if (ev)
				ev->fn(ev, ee->events);
		}
		r->batch_n = r->batch_i = 0;
	}
	turn_hooks_run(r);
	current_reactor = prev;
	return 0;
}

static void *reactor_thread(void *arg)
{
	struct hl_reactor *r = arg;
	hl_reactor_run(r);
	return NULL;
}

/* A new thread for r, on cpu only unless cpu < 0. */
static int reactor_spawn(struct hl_reactor *r, int cpu)
{
	char comm[16]; /* what Linux keeps of a thread's name */
	pthread_attr_t attr;
	cpu_set_t set;
	int rc;

	if (cpu >= CPU_SETSIZE)
		return -EINVAL;
	rc = pthread_attr_init(&attr);
	if (rc)
		return -rc;
	if (cpu >= 0) {
		CPU_ZERO(&set);
		CPU_SET(cpu, &set);
		rc = pthread_attr_setaffinity_np(&attr, sizeof(set), &set);
	}
	if (!rc)
		rc = pthread_create(&r->thread, &attr, reactor_thread, r);
	pthread_attr_destroy(&attr);
	if (rc)
		return -rc;
	r->has_thread = true;
	/* top -H and /proc tell the per-disk service threads apart (iscsi-ua, rbd-watch) */
	hl_strlcpy(comm, r->name, sizeof(comm));
	pthread_setname_np(r->thread, comm);
	return 0;
}

int hl_reactor_start(struct hl_reactor *r)
{
	return reactor_spawn(r, -1);
}

int hl_reactor_start_on(struct hl_reactor *r, unsigned cpu)
{
	return reactor_spawn(r, cpu > INT_MAX ? CPU_SETSIZE : (int)cpu);
}

static void stop_cb(void *arg)
{
	struct hl_reactor *r = arg;
	r->stopping = 1;
}

void hl_reactor_stop(struct hl_reactor *r)
{
	if (hl_reactor_current() == r) {
		r->stopping = 1;
		return;
	}
	if (hl_reactor_call(r, stop_cb, r) < 0) {
		/* Out of memory: set the flag and kick the eventfd directly. */
		uint64_t one = 1;
		r->stopping = 1;
		ssize_t n = write(r->wake_ev.fd, &one, sizeof(one));
		(void)n;
	}
}

void hl_reactor_join(struct hl_reactor *r)
{
	if (r->has_thread) {
		pthread_join(r->thread, NULL);
		r->has_thread = false;
	}
}
