/*
 * workers.c - the shared worker pool that turns blocking calls into async
 * ones: hl_work_submit() queues (work, done, arg) from a reactor thread, a
 * worker runs work(arg), and done(arg) is posted back to the submitting
 * reactor with hl_reactor_call().
 *
 * A mutex-guarded FIFO and a counting semaphore: one post per queued item,
 * plus one per worker when the pool stops. The pool starts on first use when
 * nobody called hl_workers_start(). hl_workers_stop() lets the workers finish
 * the queue first, so every accepted item still gets its done call (its
 * reactor must still be running then).
 *
 * Why not a condition variable: glibc before 2.41 (Debian 12 has 2.36) can
 * lose a pthread_cond_signal wake-up (sourceware bug 25847). Here that left
 * an item queued while every worker slept: caught as a 4 KiB page-cache read
 * that never completed (CI, once; a stress loop at queue depth 1, 7 times
 * in about 5,600 rounds of 20,000 I/Os, none after this change), and
 * at queue depth 1 nothing else would have come along to wake a worker. A
 * semaphore's count cannot lose a post.
 */
#include "config.h"

#include "hotlun/event.h"
#include "hotlun/log.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WORKERS_DEFAULT 4
#define WORKERS_MAX     256

struct work_item {
	struct work_item *next;
	hl_work_fn work;
	hl_call_fn done;
	void *arg;
	struct hl_reactor *reactor;
};

static pthread_mutex_t wq_lock = PTHREAD_MUTEX_INITIALIZER;
static sem_t wq_sem;                        /* posts: queued items + stop tokens */
static struct work_item *wq_head, *wq_tail; /* guarded by wq_lock */
static bool wq_stopping;                    /* guarded by wq_lock */
static pthread_t *wq_threads;               /* guarded by wq_lock */
static unsigned wq_nthreads;                /* guarded by wq_lock */
static atomic_bool wq_running;              /* written under wq_lock, read anywhere */
static atomic_uint wq_exited;               /* workers that returned since the last start */
static bool wq_abandoned;                   /* guarded by wq_lock: a bounded stop gave up */

static void deliver(struct work_item *it)
{
	struct hl_reactor *r = it->reactor;
	hl_call_fn done = it->done;
	void *arg = it->arg;

	free(it);
	/* done must run exactly once: wait out a transient allocation failure. */
	while (hl_reactor_call(r, done, arg) == -ENOMEM) {
		struct timespec ts = {0, 1000000};
		HL_WARN_RL("workers", "out of memory posting a completion; retrying");
		nanosleep(&ts, NULL);
	}
}

static void *worker_main(void *arg)
{
	sigset_t all;

	(void)arg;
	/* Signals belong to the main thread (signalfd or handlers there). */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	for (;;) {
		struct work_item *it;

		while (sem_wait(&wq_sem) != 0) /* EINTR only */
			;
		pthread_mutex_lock(&wq_lock);
		it = wq_head;
		if (!it) { /* a stop token, and the queue is drained */
			pthread_mutex_unlock(&wq_lock);
			atomic_fetch_add(&wq_exited, 1);
			break;
		}
		/* An item (or a stop token while items remain: the item's own post
		 * is left for a worker that then finds the queue empty and exits). */
		wq_head = it->next;
		if (!wq_head)
			wq_tail = NULL;
		pthread_mutex_unlock(&wq_lock);

		it->work(it->arg);
		deliver(it);
	}
	return NULL;
}

int hl_workers_start(unsigned nthreads)
{
	int rc = 0;

	if (nthreads == 0)
		nthreads = WORKERS_DEFAULT;
	if (nthreads > WORKERS_MAX)
		nthreads = WORKERS_MAX;
	pthread_mutex_lock(&wq_lock);
	if (atomic_load(&wq_running) || wq_stopping)
		goto out;
	wq_threads = calloc(nthreads, sizeof(*wq_threads));
	if (!wq_threads) {
		rc = -ENOMEM;
		goto out;
	}
	atomic_store(&wq_exited, 0);
	if (sem_init(&wq_sem, 0, 0)) { /* destroyed by the last stop, if any */
		rc = -errno;
		free(wq_threads);
		wq_threads = NULL;
		goto out;
	}
	for (wq_nthreads = 0; wq_nthreads < nthreads; wq_nthreads++) {
		char name[16];

		rc = -pthread_create(&wq_threads[wq_nthreads], NULL, worker_main, NULL);
		if (rc)
			break;
		snprintf(name, sizeof(name), "hl-work-%u", wq_nthreads);
		pthread_setname_np(wq_threads[wq_nthreads], name);
	}
	if (rc && wq_nthreads == 0) {
		free(wq_threads);
		wq_threads = NULL;
		HL_ERR("workers", "cannot start worker threads: %s", strerror(-rc));
		goto out;
	}
	if (rc)
		HL_WARN("workers", "started %u of %u worker threads: %s", wq_nthreads, nthreads,
		        strerror(-rc));
	rc = 0;
	atomic_store(&wq_running, true);
out:
	pthread_mutex_unlock(&wq_lock);
	return rc;
}

void hl_workers_stop(void)
{
	hl_workers_stop_within(0);
}

unsigned hl_workers_stop_within(unsigned bound_ms)
{
	uint64_t deadline = hl_now_ns() + (uint64_t)bound_ms * 1000000u;
	pthread_t *threads;
	unsigned n, done;

	pthread_mutex_lock(&wq_lock);
	if (wq_abandoned) {
		/* a stop that gave up before: its tokens are posted, wait again */
		wq_abandoned = false;
	} else if (!atomic_load(&wq_running) || wq_stopping) {
		pthread_mutex_unlock(&wq_lock);
		return 0;
	} else {
		wq_stopping = true;
		for (unsigned i = 0; i < wq_nthreads; i++)
			sem_post(&wq_sem); /* one stop token per worker */
	}
	threads = wq_threads;
	n = wq_nthreads;
	pthread_mutex_unlock(&wq_lock);

	/* polled, not a condition variable: see the top of the file */
	while (bound_ms && (done = atomic_load(&wq_exited)) < n) {
		struct timespec ts = {0, 1000000};

		if (hl_now_ns() >= deadline) {
			/*
			 * A call that does not return (a read of a dead device): its
			 * worker, the pool's semaphore and thread list, and whatever
			 * the call and its done use (its reactor's call queue) stay
			 * as they are: the caller frees none of it (hotlund exits).
			 */
			HL_WARN("workers",
			        "%u of %u worker thread(s) did not end within %u ms (a call not "
			        "returning: a device not answering?): abandoned",
			        n - done, n, bound_ms);
			pthread_mutex_lock(&wq_lock);
			wq_abandoned = true; /* a later stop may wait for them again */
			pthread_mutex_unlock(&wq_lock);
			return n - done;
		}
		nanosleep(&ts, NULL);
	}
	for (unsigned i = 0; i < n; i++)
		pthread_join(threads[i], NULL);

	pthread_mutex_lock(&wq_lock);
	sem_destroy(&wq_sem); /* every worker joined: nobody waits on it */
	free(wq_threads);
	wq_threads = NULL;
	wq_nthreads = 0;
	wq_stopping = false;
	atomic_store(&wq_running, false);
	pthread_mutex_unlock(&wq_lock);
	return 0;
}

int hl_work_submit(hl_work_fn work, hl_call_fn done, void *arg)
{
	struct hl_reactor *r = hl_reactor_current();
	struct work_item *it;
	int rc;

	if (!r || !work || !done)
		return -EINVAL;
	if (!atomic_load_explicit(&wq_running, memory_order_acquire)) {
		rc = hl_workers_start(0);
		if (rc)
			return rc;
	}
	it = malloc(sizeof(*it));
	if (!it)
		return -ENOMEM;
	*it = (struct work_item){.work = work, .done = done, .arg = arg, .reactor = r};

	pthread_mutex_lock(&wq_lock);
	if (wq_stopping || !atomic_load(&wq_running)) {
		pthread_mutex_unlock(&wq_lock);
		free(it);
		return -ESHUTDOWN;
	}
	if (wq_tail)
		wq_tail->next = it;
	else
		wq_head = it;
	wq_tail = it;
	pthread_mutex_unlock(&wq_lock);
	sem_post(&wq_sem);
	return 0;
}
