/*
 * engine_run.c - a call run on a thread of its own, waited for at most a
 * bound (engine_run_within): what a device or a file system that stops
 * answering must not hang (the close's save, the map's writes, a
 * takeover's records step). Apart from the request code so that the map's
 * fuzz harness links it alone.
 *
 * Shared state: engine_internal.h.
 */
#include "config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#include "cache/engine/engine_internal.h"
#include "hotlun/event.h"

/* engine_run_within's call: the caller and the thread share it; the last to let go frees it. */
struct run_within {
	int (*fn)(void *arg);
	void *arg;
	int rc;
	atomic_long busy; /* 1: fn runs; 0: it returned (rc set); -1: the caller gave up */
};

static void *run_within_main(void *p)
{
	struct run_within *r = p;

	r->rc = r->fn(r->arg);
	if (atomic_exchange(&r->busy, 0) < 0) {
		free(r->arg);
		free(r);
	}
	return NULL;
}

static bool run_bounded(unsigned ms, int (*fn)(void *arg), void *arg, int *rc,
                        bool (*more)(void *arg), bool (*done)(void *arg));

bool engine_run_within(unsigned ms, int (*fn)(void *arg), void *arg, int *rc)
{
	return engine_run_within_more(ms, fn, arg, rc, NULL);
}

bool engine_run_within_more(unsigned ms, int (*fn)(void *arg), void *arg, int *rc,
                            bool (*more)(void *arg))
{
	return run_bounded(ms, fn, arg, rc, more, NULL);
}

bool engine_run_within_until(unsigned ms, int (*fn)(void *arg), void *arg, int *rc,
                             bool (*done)(void *arg))
{
	return run_bounded(ms, fn, arg, rc, NULL, done);
}

/* more: the bound starts again; done: the caller stops waiting (fn goes on). */
static bool run_bounded(unsigned ms, int (*fn)(void *arg), void *arg, int *rc,
                        bool (*more)(void *arg), bool (*done)(void *arg))
{
	uint64_t deadline = hl_now_ns() + (uint64_t)ms * 1000000u;
	struct run_within *r = calloc(1, sizeof(*r));
	pthread_t t;

	if (r) {
		r->fn = fn;
		r->arg = arg;
		atomic_store(&r->busy, 1);
	}
	if (!r || pthread_create(&t, NULL, run_within_main, r)) {
		free(r); /* no memory or thread: in line, unbounded */
		*rc = fn(arg);
		free(arg);
		return true;
	}
	while (atomic_load(&r->busy) > 0) {
		struct timespec ts = {0, 1000000};
		uint64_t now = hl_now_ns();

		if (done && done(arg))
			break;
		if (more && more(arg))
			deadline = now + (uint64_t)ms * 1000000u;
		else if (now >= deadline)
			break;
		nanosleep(&ts, NULL);
	}
	if (atomic_load(&r->busy) > 0 && atomic_exchange(&r->busy, -1) > 0) {
		pthread_detach(t); /* r and arg are the thread's now */
		return false;
	}
	pthread_join(t, NULL);
	*rc = r->rc;
	free(r->arg);
	free(r);
	return true;
}
