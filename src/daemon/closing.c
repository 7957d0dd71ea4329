/*
 * closing.c - the disks a change removed (a reload, a delete, a disk whose
 * origin or cache changed) are closed off the control reactor, all at once.
 *
 * Closing a cached disk waits, up to the drain bound (15 s), for the fills
 * of its reads that replied already (co_close, docs/cache-engine.md). Done
 * in line on the control reactor, a reload that removed N cached disks kept
 * the control socket dead for up to N x 15 s. So daemon_apply only takes
 * the disks out of every map and list (no initiator reaches them any more,
 * no control command sees them) and hands them here: one thread per disk
 * closes it (disk_free), so every detach's wait starts at once and all end
 * within about one bound; the change's reply is deferred until they are
 * all closed (hl_ctl_defer), and meanwhile the control reactor answers the
 * other clients. A second change while disks are closing is refused
 * (-EBUSY, daemon_closing_busy): the one under way has not answered yet,
 * and a name it removes cannot be attached again before its detach ends.
 *
 * Nothing is freed earlier than before: each disk is freed by the same
 * disk_free, after the same bounded wait; only the thread differs.
 */
#include "config.h"

#include "daemon/daemon_internal.h"
#include "daemon/service.h"

#include "hotlun/cache_engine.h"
#include "hotlun/ctl.h"
#include "hotlun/event.h"
#include "hotlun/log.h"

#include <errno.h>
#include <stdio.h>
#include <time.h>

struct close_job {
	struct daemon *d;
	struct hl_list disks; /* disk_rt being closed (link), freed by their threads */
	unsigned n;
	pthread_t thread;           /* the one that starts the disks' threads and joins them */
	struct hl_ctl_later *later; /* the change's reply, or NULL (SIGHUP, out of memory) */
	bool sighup;                /* a SIGHUP's: READY=1 to systemd when done */
	int rc;                     /* the change's result, sent once the disks are closed */
	char err[1024];
	uint64_t t0;
};

/* One disk's close thread: its name kept for the log, the disk itself freed. */
struct close_one {
	struct disk_rt *rt;
	pthread_t thread;
	bool threaded;
	char name[128];
};

void daemon_disk_close_later(struct daemon *d, struct disk_rt *rt)
{
	hl_list_add_tail(&d->closing, &rt->link);
}

int daemon_closing_busy(struct daemon *d, char *err, size_t errlen)
{
	bool busy, stopping;

	pthread_mutex_lock(&d->close_mu);
	busy = d->close_job != NULL;
	stopping = d->close_stopping;
	pthread_mutex_unlock(&d->close_mu);
	if (stopping)
		return daemon_fail(err, errlen, -EBUSY, "hotlund is stopping; nothing was changed");
	if (!busy)
		return 0;
	return daemon_fail(err, errlen, -EBUSY,
	                   "disks removed by an earlier change are still closing (their caches "
	                   "wait up to %u ms for requests in flight); nothing was changed: try "
	                   "again once that change has answered",
	                   hl_cache_drain_bound_ms());
}

static void *close_one_main(void *arg)
{
	struct close_one *one = arg;

	daemon_disk_free(one->rt);
	return NULL;
}

/* The disks' closes done: answer the change (control reactor). */
static void job_done(void *arg)
{
	struct close_job *job = arg;
	struct daemon *d = job->d;

	pthread_join(job->thread, NULL);
	/* first: the reply serves what its client sent meanwhile, a change too */
	pthread_mutex_lock(&d->close_mu);
	d->close_job = NULL;
	pthread_cond_broadcast(&d->close_cv);
	pthread_mutex_unlock(&d->close_mu);
	if (job->later)
		hl_ctl_reply_later(job->later, job->rc, NULL, job->err);
	else if (job->sighup)
		daemon_service_reloaded(d); /* systemd's reload ends now */
	free(job);
}

static void *job_main(void *arg)
{
	struct close_job *job = arg;
	struct close_one *ones = calloc(job->n, sizeof(*ones));
	struct disk_rt *rt, *tmp;
	unsigned i = 0, inline_n = 0;

	hl_list_for_each_entry_safe(rt, tmp, &job->disks, link) {
		hl_list_del(&rt->link);
		if (!ones) { /* out of memory: one after the other, as before */
			daemon_disk_free(rt);
			inline_n++;
			continue;
		}
		ones[i].rt = rt;
		hl_strlcpy(ones[i].name, rt->conf.name, sizeof(ones[i].name));
		ones[i].threaded =
		    pthread_create(&ones[i].thread, NULL, close_one_main, &ones[i]) == 0;
		if (!ones[i].threaded) {
			daemon_disk_free(rt);
			inline_n++;
		}
		i++;
	}
	for (unsigned k = 0; ones && k < i; k++) {
		if (ones[k].threaded)
			pthread_join(ones[k].thread, NULL);
		HL_NOTICE("daemon", "disk %s closed", ones[k].name);
	}
	free(ones);
	if (inline_n)
		HL_WARN("daemon", "%u disk(s) closed one after the other (no thread for them)",
		        inline_n);
	HL_NOTICE("daemon", "%u disk(s) closed in %llu ms", job->n,
	          (unsigned long long)((hl_now_ns() - job->t0) / 1000000));
	while (hl_reactor_call(job->d->ctl_reactor, job_done, job) < 0) {
		struct timespec ts = {0, 10000000}; /* out of memory: the reply waits */
		nanosleep(&ts, NULL);
	}
	return NULL;
}

int daemon_closes_start(struct daemon *d, struct hl_ctl_later *later, bool sighup, int rc,
                        const char *err)
{
	struct close_job *job;
	struct disk_rt *rt, *tmp;

	if (hl_list_empty(&d->closing))
		return 0;
	job = d->ctl_reactor ? calloc(1, sizeof(*job)) : NULL;
	if (job) {
		job->d = d;
		job->later = later;
		job->sighup = sighup;
		job->rc = rc;
		snprintf(job->err, sizeof(job->err), "%s", err ? err : "");
		job->t0 = hl_now_ns();
		hl_list_init(&job->disks);
		hl_list_for_each_entry_safe(rt, tmp, &d->closing, link) {
			hl_list_del(&rt->link);
			hl_list_add_tail(&job->disks, &rt->link);
			job->n++;
		}
		/*
		 * Registered or not under close_mu, against the stop's wait: a
		 * stop already waiting gets these closes in line, before the
		 * control reactor can stop (its join waits for this handler).
		 */
		pthread_mutex_lock(&d->close_mu);
		bool started = !d->close_stopping &&
		               pthread_create(&job->thread, NULL, job_main, job) == 0;
		if (started)
			d->close_job = job;
		pthread_mutex_unlock(&d->close_mu);
		if (started)
			return 1;
		hl_list_for_each_entry_safe(rt, tmp, &job->disks, link) {
			hl_list_del(&rt->link);
			hl_list_add_tail(&d->closing, &rt->link);
		}
		free(job);
	}
	/* no control reactor yet (start-up), a stop, or no memory or thread: in line, as before */
	hl_list_for_each_entry_safe(rt, tmp, &d->closing, link) {
		hl_list_del(&rt->link);
		HL_NOTICE("daemon", "disk %s closed", rt->conf.name);
		daemon_disk_free(rt);
	}
	return 0;
}

void daemon_closes_wait(struct daemon *d)
{
	pthread_mutex_lock(&d->close_mu);
	d->close_stopping = true; /* no change starts closes any more (daemon_closing_busy) */
	while (d->close_job)
		pthread_cond_wait(&d->close_cv, &d->close_mu);
	pthread_mutex_unlock(&d->close_mu);
}
