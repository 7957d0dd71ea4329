/*
 * file_watch.c - a regular file's size, looked at once a second.
 *
 * A file origin's size was read once, at open, so a file resized under a
 * running hotlund (truncate, a VM image grown in place) kept its old size:
 * a grow stayed invisible to initiators, and a shrink was noticed by no
 * one. One thread for the process looks at every open regular file
 * (fstat) each origin_file_watch_ms and reports a new size (HL_ORIGIN_RESIZED):
 * the LU takes it and queues CAPACITY DATA HAS CHANGED (2Ah/09h) to its
 * nexuses, a cache above drops the blocks between the old and the new end.
 * A shrink and a grow back within one look are not seen (a file keeps no
 * record of them). Block devices are not watched: their size changes with
 * the device's own events (not handled here).
 *
 * The thread starts with the first watched file and ends when none is
 * left. It reports while holding watch_mu, so a close (which unlinks its
 * origin under watch_mu) never frees one under it; hl_origin_close takes
 * the listener away first, so the close does not wait for the listener.
 */
#include "config.h"

#include "hotlun/log.h"
#include "hotlun/util.h"
#include "origin/origin_file.h"
#include "origin/origin_internal.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

unsigned origin_file_watch_ms = 1000;

static pthread_mutex_t watch_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t watch_cv;
static struct hl_list watched = {&watched, &watched}; /* file_origin.watch_link, watch_mu */
static bool watch_running;                            /* watch_mu */

static void watch_look(void)
{
	for (struct hl_list *l = watched.next; l != &watched; l = l->next) {
		struct file_origin *fo =
		    (struct file_origin *)((char *)l - offsetof(struct file_origin, watch_link));
		struct hl_origin *o = fo->self;
		uint64_t old = __atomic_load_n(&o->size, __ATOMIC_ACQUIRE);
		struct stat st;

		if (fstat(fo->fd, &st) || !S_ISREG(st.st_mode) || (uint64_t)st.st_size == old)
			continue;
		HL_NOTICE("origin", "%s: the file was resized: %llu -> %llu bytes", o->uri,
		          (unsigned long long)old, (unsigned long long)st.st_size);
		hl_origin_notify(o, HL_ORIGIN_RESIZED, (uint64_t)st.st_size);
	}
}

static void *watch_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&watch_mu);
	while (!hl_list_empty(&watched)) {
		struct timespec ts;

		unsigned ms = HL_MAX(origin_file_watch_ms, 1u);

		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += (long)(ms % 1000) * 1000000L;
		ts.tv_sec += ms / 1000 + ts.tv_nsec / 1000000000L;
		ts.tv_nsec %= 1000000000L;
		pthread_cond_timedwait(&watch_cv, &watch_mu, &ts);
		watch_look();
	}
	watch_running = false;
	pthread_mutex_unlock(&watch_mu);
	return NULL;
}

static void watch_cv_init(void)
{
	pthread_condattr_t a;

	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&watch_cv, &a);
	pthread_condattr_destroy(&a);
}

void origin_file_watch_add(struct hl_origin *o, struct file_origin *fo)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_attr_t attr;
	pthread_t t;
	int rc = 0;

	if (!origin_file_watch_ms)
		return; /* (a test that shrinks a file behind its origin's back) */
	pthread_once(&once, watch_cv_init);
	fo->self = o;
	pthread_mutex_lock(&watch_mu);
	hl_list_add_tail(&watched, &fo->watch_link);
	fo->watched = true;
	if (!watch_running) {
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		rc = pthread_create(&t, &attr, watch_main, NULL);
		pthread_attr_destroy(&attr);
		watch_running = rc == 0;
	}
	pthread_mutex_unlock(&watch_mu);
	if (rc)
		HL_WARN("origin", "%s: no thread to watch the file's size: %s", o->uri,
		        strerror(rc));
}

void origin_file_watch_del(struct file_origin *fo)
{
	if (!fo->watched)
		return;
	pthread_mutex_lock(&watch_mu);
	hl_list_del(&fo->watch_link);
	fo->watched = false;
	pthread_cond_signal(&watch_cv); /* the last one gone: the thread ends */
	pthread_mutex_unlock(&watch_mu);
}
