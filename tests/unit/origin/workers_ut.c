/*
 * workers_ut.c - the shared worker pool (src/event/workers.c): work runs on a
 * worker thread, done runs once on the submitting reactor, on every reactor.
 */
#include "config.h"

#include "hl_test.h"
#include "hotlun/event.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

struct item {
	pthread_t work_thread;
	pthread_t done_thread;
	struct hl_reactor *done_reactor;
	int work_calls;
	int done_calls;
	unsigned sleep_ms;
};

static struct hl_reactor *ut_r;
static int done_count, done_target;

static void work_fn(void *arg)
{
	struct item *it = arg;

	it->work_thread = pthread_self();
	it->work_calls++;
	if (it->sleep_ms) {
		struct timespec ts = {0, (long)it->sleep_ms * 1000000};
		nanosleep(&ts, NULL);
	}
}

static void done_fn(void *arg)
{
	struct item *it = arg;

	it->done_thread = pthread_self();
	it->done_reactor = hl_reactor_current();
	it->done_calls++;
	if (++done_count >= done_target)
		hl_reactor_stop(hl_reactor_current());
}

static void timeout_fn(struct hl_timer *t)
{
	(void)t;
	hl_reactor_stop(hl_reactor_current());
}

struct batch {
	struct item *items;
	int n;
	int submit_errors;
};

static void submit_batch(void *arg)
{
	struct batch *b = arg;

	for (int i = 0; i < b->n; i++)
		if (hl_work_submit(work_fn, done_fn, &b->items[i]))
			b->submit_errors++;
	/* never inline */
	CU_ASSERT_EQUAL(done_count, 0);
}

/* Run b on the test thread's reactor until every done ran or timeout_ms. */
static void run_batch(struct batch *b, uint64_t timeout_ms)
{
	struct hl_timer to;

	CU_ASSERT_EQUAL_FATAL(hl_reactor_create(&ut_r, "ut"),
	                      0); /* one per run: a stopped reactor stays stopped */
	done_count = 0;
	done_target = b->n;
	hl_timer_init(&to, timeout_fn, NULL);
	hl_timer_start(ut_r, &to, timeout_ms);
	CU_ASSERT_EQUAL_FATAL(hl_reactor_call(ut_r, submit_batch, b), 0);
	hl_reactor_run(ut_r);
	hl_timer_stop(&to);
	hl_reactor_destroy(ut_r);
}

static void test_not_on_reactor(void)
{
	struct item it = {0};

	CU_ASSERT_EQUAL(hl_work_submit(work_fn, done_fn, &it), -EINVAL);
	CU_ASSERT_EQUAL(it.work_calls, 0);
}

static void test_threads_and_once(void)
{
	enum { N = 2000 };
	struct batch b = {calloc(N, sizeof(struct item)), N, 0};

	CU_ASSERT_EQUAL(hl_workers_start(3), 0);
	CU_ASSERT_EQUAL(hl_workers_start(3), 0); /* idempotent */
	run_batch(&b, 10000);
	CU_ASSERT_EQUAL(b.submit_errors, 0);
	CU_ASSERT_EQUAL(done_count, N);
	for (int i = 0; i < N; i++) {
		CU_ASSERT_EQUAL(b.items[i].work_calls, 1);
		CU_ASSERT_EQUAL(b.items[i].done_calls, 1);
		CU_ASSERT_FALSE(pthread_equal(b.items[i].work_thread, pthread_self()));
		CU_ASSERT_TRUE(pthread_equal(b.items[i].done_thread, pthread_self()));
		CU_ASSERT_PTR_NOT_NULL(b.items[i].done_reactor);
	}
	free(b.items);
}

static void test_parallel(void)
{
	struct item items[4] = {
	    {.sleep_ms = 200}, {.sleep_ms = 200}, {.sleep_ms = 200}, {.sleep_ms = 200}};
	struct batch b = {items, 4, 0};
	uint64_t t0;

	hl_workers_stop();
	CU_ASSERT_EQUAL(hl_workers_start(4), 0);
	t0 = hl_now_ns();
	run_batch(&b, 5000);
	CU_ASSERT_EQUAL(done_count, 4);
	/* four workers: about 200 ms, not 800 */
	CU_ASSERT_TRUE(hl_now_ns() - t0 < 600000000ull);
}

static void test_stop_drains_and_restart(void)
{
	struct item items[8] = {{0}};
	struct batch b = {items, 8, 0};

	hl_workers_stop();
	hl_workers_stop(); /* harmless twice */
	/* submit starts the pool again on demand */
	run_batch(&b, 5000);
	CU_ASSERT_EQUAL(b.submit_errors, 0);
	CU_ASSERT_EQUAL(done_count, 8);
	for (int i = 0; i < 8; i++)
		CU_ASSERT_EQUAL(items[i].done_calls, 1);
}

/* Two reactors on their own threads: each done comes back to its submitter. */
struct rthread {
	struct hl_reactor *r;
	struct item items[200];
	int done;
	int errors;
};

static void rt_done(void *arg)
{
	struct item *it = arg;

	it->done_reactor = hl_reactor_current();
	it->done_thread = pthread_self();
	/* read by the test thread while reactors run: atomic, like that read */
	__atomic_fetch_add(&it->done_calls, 1, __ATOMIC_RELEASE);
}

static void rt_submit(void *arg)
{
	struct rthread *t = arg;

	for (int i = 0; i < 200; i++)
		if (hl_work_submit(work_fn, rt_done, &t->items[i]))
			t->errors++;
}

static void test_two_reactors(void)
{
	struct rthread *t = calloc(2, sizeof(*t));

	for (int k = 0; k < 2; k++) {
		CU_ASSERT_EQUAL_FATAL(hl_reactor_create(&t[k].r, k ? "r1" : "r0"), 0);
		CU_ASSERT_EQUAL_FATAL(hl_reactor_start(t[k].r), 0);
		CU_ASSERT_EQUAL(hl_reactor_call(t[k].r, rt_submit, &t[k]), 0);
	}
	for (int spin = 0; spin < 500; spin++) {
		int all = 0;
		usleep(10000);
		for (int k = 0; k < 2; k++)
			for (int i = 0; i < 200; i++)
				all += __atomic_load_n(&t[k].items[i].done_calls, __ATOMIC_ACQUIRE);
		if (all == 400)
			break;
	}
	for (int k = 0; k < 2; k++) {
		hl_reactor_stop(t[k].r);
		hl_reactor_join(t[k].r);
	}
	for (int k = 0; k < 2; k++) {
		CU_ASSERT_EQUAL(t[k].errors, 0);
		for (int i = 0; i < 200; i++) {
			CU_ASSERT_EQUAL(t[k].items[i].done_calls, 1);
			CU_ASSERT_PTR_EQUAL(t[k].items[i].done_reactor, t[k].r);
		}
		hl_reactor_destroy(t[k].r);
	}
	free(t);
}

static void submit_one(void *arg)
{
	CU_ASSERT_EQUAL(hl_work_submit(work_fn, done_fn, arg), 0);
}

/*
 * A call that does not return in time (a read of a dead device): a bounded
 * stop gives up on its worker and says so, a later unbounded stop waits for
 * it and joins, and its done is still posted (to its reactor, kept alive).
 */
static void test_bounded_stop_abandons(void)
{
	struct item it = {.sleep_ms = 900};
	struct timespec ts = {0, 50000000};
	uint64_t t0;

	hl_workers_stop();
	CU_ASSERT_EQUAL(hl_workers_start(2), 0);
	CU_ASSERT_EQUAL_FATAL(hl_reactor_create(&ut_r, "ut"), 0);
	done_count = 0;
	done_target = 1; /* its done stops the reactor */
	CU_ASSERT_EQUAL_FATAL(hl_reactor_start(ut_r), 0);
	CU_ASSERT_EQUAL_FATAL(hl_reactor_call(ut_r, submit_one, &it), 0);
	nanosleep(&ts, NULL); /* submitted, the call under way */
	t0 = hl_now_ns();
	CU_ASSERT_EQUAL(hl_workers_stop_within(200), 1);
	CU_ASSERT_TRUE(hl_now_ns() - t0 < 600000000ull); /* the bound, not the call's 900 ms */
	hl_workers_stop(); /* unbounded: waits for the call this time, and joins */
	CU_ASSERT_TRUE(hl_now_ns() - t0 >= 600000000ull);
	hl_reactor_join(ut_r); /* its done was posted after all, and stopped it */
	CU_ASSERT_EQUAL(it.work_calls, 1);
	CU_ASSERT_EQUAL(it.done_calls, 1);
	hl_reactor_destroy(ut_r);
	CU_ASSERT_EQUAL(hl_workers_stop_within(200), 0); /* stopped: nothing to do */
}

static const struct hl_test tests[] = {
    {"submit off a reactor is -EINVAL", test_not_on_reactor},
    {"work on workers, done once on the reactor", test_threads_and_once},
    {"workers run in parallel", test_parallel},
    {"stop drains, submit restarts", test_stop_drains_and_restart},
    {"done returns to the submitting reactor", test_two_reactors},
    {"a bounded stop abandons a worker whose call does not return", test_bounded_stop_abandons},
    {NULL, NULL},
};

int main(void)
{
	int rc = hl_test_run("workers", tests);

	hl_workers_stop();
	return rc;
}
