/*
 * tests/unit/iscsi/fake_reactor.h - a reactor for programs that link the
 * iSCSI layer without src/event/reactor.c (session_ut, session_flow_ut,
 * fuzz_pdu): events and timers are only recorded, and a call handed to a
 * reactor queues up until the program runs run_calls(). Include once, in
 * the .c file (or in the one header a program includes once). Several
 * reactors: any other pointer names one; run_calls() runs each call as if
 * on the reactor it was handed to (hl_reactor_current), in one FIFO, and
 * fake_current says which reactor code run by the test itself is on.
 * Posts (hl_reactor_post) join the same FIFO and never fail; a switch makes
 * hl_reactor_call fail as the real one does when its ring cannot grow.
 */
#ifndef HL_FAKE_REACTOR_H
#define HL_FAKE_REACTOR_H

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hotlun/event.h"

#define FAKE_REACTOR_CALLS 1024

static int fake_reactor_mem;
static struct hl_reactor *reactor __attribute__((unused)) =
    (struct hl_reactor *)&fake_reactor_mem;
static struct {
	hl_call_fn fn;
	void *arg;
	struct hl_reactor *r;
	struct hl_reactor_post *post; /* or NULL: an hl_reactor_call */
} calls[FAKE_REACTOR_CALLS];
static int ncalls;
static bool fake_call_enomem;           /* hl_reactor_call fails (its ring could not grow) */
static struct hl_reactor *fake_current; /* NULL: `reactor` */

uint64_t hl_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

struct hl_reactor *hl_reactor_current(void)
{
	return fake_current ? fake_current : reactor;
}

int hl_reactor_call(struct hl_reactor *r, hl_call_fn fn, void *arg)
{
	if (ncalls >= FAKE_REACTOR_CALLS || fake_call_enomem)
		return -ENOMEM;
	calls[ncalls].fn = fn;
	calls[ncalls].arg = arg;
	calls[ncalls].r = r;
	calls[ncalls].post = NULL;
	ncalls++;
	return 0;
}

int hl_reactor_post(struct hl_reactor *r, struct hl_reactor_post *p)
{
	if (p->queued_on)
		return -EBUSY;
	if (ncalls >= FAKE_REACTOR_CALLS)
		abort(); /* the real one cannot fail: a test that needs more is wrong */
	p->queued_on = r;
	calls[ncalls].fn = p->fn;
	calls[ncalls].arg = p->arg;
	calls[ncalls].r = r;
	calls[ncalls].post = p;
	ncalls++;
	return 0;
}

bool hl_reactor_post_cancel(struct hl_reactor *r, struct hl_reactor_post *p)
{
	if (!r || p->queued_on != r)
		return false;
	for (int i = 0; i < ncalls; i++) {
		if (calls[i].post == p) {
			memmove(calls + i, calls + i + 1,
			        (size_t)(ncalls - i - 1) * sizeof(calls[0]));
			ncalls--;
			break;
		}
	}
	p->queued_on = NULL;
	return true;
}

/* Run the queued calls, and those they queue, in order. */
static __attribute__((unused)) void run_calls(void)
{
	struct hl_reactor *was = fake_current;

	while (ncalls) {
		hl_call_fn fn = calls[0].fn;
		void *arg = calls[0].arg;

		fake_current = calls[0].r;
		if (calls[0].post)
			calls[0].post->queued_on = NULL;
		memmove(calls, calls + 1, (size_t)(--ncalls) * sizeof(calls[0]));
		fn(arg);
	}
	fake_current = was;
}

void hl_event_init(struct hl_event *ev, int fd, hl_event_fn fn, void *arg)
{
	ev->fd = fd;
	ev->fn = fn;
	ev->arg = arg;
	ev->events = 0;
	ev->reactor = NULL;
}

int hl_event_add(struct hl_reactor *r, struct hl_event *ev, uint32_t events)
{
	ev->reactor = r;
	ev->events = events;
	return 0;
}

int hl_event_mod(struct hl_event *ev, uint32_t events)
{
	ev->events = events;
	return 0;
}

void hl_event_del(struct hl_event *ev)
{
	ev->reactor = NULL;
}

void hl_timer_init(struct hl_timer *t, hl_timer_fn fn, void *arg)
{
	t->fn = fn;
	t->arg = arg;
	t->heap_idx = (size_t)-1;
	t->reactor = NULL;
}

void hl_timer_start(struct hl_reactor *r, struct hl_timer *t, uint64_t delay_ms)
{
	t->reactor = r;
	t->deadline_ns = hl_now_ns() + delay_ms * 1000000ull;
	t->heap_idx = 0;
}

void hl_timer_stop(struct hl_timer *t)
{
	t->heap_idx = (size_t)-1;
}

#endif
