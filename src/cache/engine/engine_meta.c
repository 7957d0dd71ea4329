/*
 * engine_meta.c - a cache's metadata thread and device failure: the
 * record flushes the data path waits for (engine_meta_wait) and the
 * periodic ones, the disks' proof ticks (engine_proof.c), and, once the
 * cache device failed (engine_dev_error: pass-through from then on), the
 * kill of its on-device metadata so that a restart formats it. The record
 * format and the flush itself are cache_meta.c's.
 *
 * Shared state and the ordering rules: engine_internal.h.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache/engine/engine_internal.h"
#include "hotlun/event.h"
#include "hotlun/log.h"
#include "hotlun/util.h"

/* ------------------------------------------------------------------ */
/* Device failure -> pass-through                                     */
/* ------------------------------------------------------------------ */

static void *kill_main(void *arg)
{
	struct hl_cache *c = arg;

	engine_meta_kill(c);
	atomic_store(&c->kill_running, false);
	return NULL;
}

/*
 * The kill runs on a thread of its own: the metadata thread may be stuck in
 * a record sync on the device that just failed, and writes of every disk
 * wait for the kill. Under mlock, only while the metadata thread is not
 * stopping (engine_meta_stop then waits for this thread). Without a thread
 * the metadata thread kills (fail_pending), as long as it is not stuck.
 */
static void kill_start(struct hl_cache *c)
{
	pthread_attr_t a;
	pthread_t t;

	if (c->mstop || c->meta_exited || atomic_load(&c->dead) || pthread_attr_init(&a))
		return;
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	atomic_store(&c->kill_running, true);
	if (pthread_create(&t, &a, kill_main, c))
		atomic_store(&c->kill_running, false);
	pthread_attr_destroy(&a);
}

void engine_dev_error(struct hl_cache *c, struct map_ent *e, int rc)
{
	cnt_add(&c->st.dev_errors, 1);
	if (e)
		cnt_add(&e->st.dev_errors, 1);
	if (atomic_exchange(&c->failed, true))
		return;
	HL_ERR("cache", "cache %s: device %s: I/O error (%s): switching to pass-through", c->name,
	       c->device, strerror(-rc));
	pthread_mutex_lock(&c->mlock);
	c->fail_pending = true;
	pthread_cond_signal(&c->mcond);
	kill_start(c);
	pthread_mutex_unlock(&c->mlock);
}

/*
 * The device file shrank under us (truncated): its holes read as zeroes,
 * and a write past the new end would hide that from the end-of-file check
 * of the data reads. Any thread. @return true when it did (the caller
 * reports the device error: pass-through).
 */
bool engine_device_check_size(struct hl_cache *c)
{
	struct stat st;

	if (c->dev->fd < 0 || fstat(c->dev->fd, &st) || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size >= c->dev->size)
		return false;
	if (!atomic_load(&c->failed))
		HL_ERR("cache", "cache %s: %s shrank to %llu bytes (expected %llu)", c->name,
		       c->device, (unsigned long long)st.st_size, (unsigned long long)c->dev->size);
	return true;
}

/* ------------------------------------------------------------------ */
/* Metadata thread                                                    */
/* ------------------------------------------------------------------ */

static void meta_wait_post(void *arg)
{
	struct meta_wait *w = arg;

	w->done(w);
}

bool engine_meta_wait(struct eng_req *req, void (*done)(struct meta_wait *w))
{
	struct hl_cache *c = req->c;
	struct meta_wait *w = &req->mw;

	w->next = NULL;
	w->r = req->r;
	w->done = done;
	w->rc = 0;
	pthread_mutex_lock(&c->mlock);
	/*
	 * killed is set before the kill takes the lists (under mlock): a waiter
	 * queued after that would wait for a metadata thread that may be stuck
	 * in a device call for ever.
	 */
	if (atomic_load(&c->killed)) {
		pthread_mutex_unlock(&c->mlock);
		return false;
	}
	cnt_add(&c->meta_waits, 1);
	*c->mw_tail = w;
	c->mw_tail = &w->next;
	pthread_cond_signal(&c->mcond);
	pthread_mutex_unlock(&c->mlock);
	return true;
}

void engine_lock_yield(void *arg)
{
	struct hl_cache *c = arg;

	pthread_mutex_unlock(&c->lock);
	sched_yield();
	pthread_mutex_lock(&c->lock);
}

static void meta_post(struct hl_cache *c, struct meta_wait *w)
{
	/* The reactor's call queue may be momentarily full: retry, this is not a reactor. */
	for (int i = 0; !atomic_load(&c->mdrop); i++) {
		if (hl_reactor_call(w->r, meta_wait_post, w) != -ENOMEM)
			return;
		if (i == 5000) {
			HL_ERR("cache", "cache %s: a reactor takes no calls; an I/O is lost",
			       c->name);
			return;
		}
		usleep(1000);
	}
}

static void meta_post_all(struct hl_cache *c, struct meta_wait *list, int rc)
{
	while (list) {
		struct meta_wait *w = list;
		list = w->next;
		w->rc = rc;
		meta_post(c, w);
	}
}

/* Append list to *to (both NULL-terminated). */
static void mw_append(struct meta_wait **to, struct meta_wait *list)
{
	while (*to)
		to = &(*to)->next;
	*to = list;
}

/*
 * killed is set: every waiter goes on, whoever queued it, including those
 * a metadata thread stuck in its record sync took for its turn (mw_busy).
 */
static void meta_release(struct hl_cache *c)
{
	struct meta_wait *list;

	pthread_mutex_lock(&c->mlock);
	list = c->mw_head;
	c->mw_head = NULL;
	c->mw_tail = &c->mw_head;
	mw_append(&list, c->mw_busy);
	mw_append(&list, c->mw_kill);
	c->mw_busy = c->mw_kill = NULL;
	pthread_mutex_unlock(&c->mlock);
	meta_post_all(c, list, 0);
}

void engine_meta_release(struct hl_cache *c)
{
	meta_release(c);
}

/*
 * The device failed: make sure a restart cannot trust its metadata. The
 * map first, sealed "failed" (bounded: a state file system that does not
 * answer leaves it owed by the write still out, and the wiped superblocks
 * stand for it meanwhile; that write uses c: meta_stuck, the cache is
 * parked at close), without sync_lock, whose holder
 * may be stuck in a write to the dead device (the metadata thread's record
 * sync, a takeover's or a shadow's records step), and nothing any of them
 * writes when it comes back changes the map again. Once that is durable,
 * killed is set and the waiters go to the origin; then both superblocks
 * are wiped (a dead device may keep this thread there: it holds nothing a
 * write waits for).
 */
void engine_meta_kill(struct hl_cache *c)
{
	if (atomic_exchange(&c->dead, true))
		return;
	if (engine_map_seal(c) == -ETIMEDOUT) {
		/* (the close parks the cache: the write still out uses it) */
		atomic_store(&c->meta_stuck, true);
		HL_WARN("cache",
		        "cache %s: %s does not say \"failed\" yet (its file system is not "
		        "answering?): the wiped superblocks stand for it",
		        c->name, c->map_path);
	} else if (atomic_load(&c->killed)) {
		meta_release(c);
	}
	/* (a sync still out when it wipes wipes again at its end: hl_cache_meta_kill) */
	hl_cache_meta_kill(c->dev, &c->layout);
	/*
	 * The map could not be written (its file system failed, logged, or
	 * does not answer): the wiped superblocks alone make the restart format
	 * (the start finds none and formats, whatever the map says). (A wipe
	 * that failed too is not waited for either: the writes would hang for
	 * ever.)
	 */
	atomic_store(&c->killed, true);
	meta_release(c);
}

/*
 * HOTLUN_TEST_CACHE_META_HOLD=PATH (tests only, docs/cache-engine.md): a
 * record sync, holding sync_lock like a device write that does not return,
 * waits while PATH exists.
 */
void engine_meta_test_hold(struct hl_cache *c)
{
	struct timespec ts = {0, 10000000};

	if (!c->meta_hold || access(c->meta_hold, F_OK))
		return;
	/* what a functional test waits for (cache_dead_fail.sh) */
	HL_WARN("cache", "cache %s: test knob: a metadata write is held while %s exists", c->name,
	        c->meta_hold);
	while (access(c->meta_hold, F_OK) == 0)
		nanosleep(&ts, NULL);
}

/* The time ms milliseconds from now on clock clk (a deadline for a timed wait). */
static struct timespec clock_after_ms(clockid_t clk, unsigned ms)
{
	struct timespec t;

	clock_gettime(clk, &t);
	t.tv_sec += ms / 1000;
	t.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (t.tv_nsec >= 1000000000L) {
		t.tv_sec++;
		t.tv_nsec -= 1000000000L;
	}
	return t;
}

/*
 * Take m, waiting at most ms on CLOCK_MONOTONIC. A bounded wait on the wall
 * clock (pthread_mutex_timedlock's) is neither: a step back by an hour (NTP,
 * a hypervisor's time sync after a pause: when a failover happens) made it
 * wait an hour, a step forward gave up at once (a healthy cache sealed: its
 * next start cold). @return 0 or ETIMEDOUT.
 */
static int lock_within_ms(pthread_mutex_t *m, unsigned ms)
{
	int rc;
#ifdef HAVE_PTHREAD_MUTEX_CLOCKLOCK
	struct timespec dl = clock_after_ms(CLOCK_MONOTONIC, ms);

	do
		rc = pthread_mutex_clocklock(m, CLOCK_MONOTONIC, &dl);
	while (rc == EINTR);
#else
	/* (a C library before glibc 2.30: the same bound, looked at every 1 ms) */
	uint64_t end = hl_now_ns() + (uint64_t)ms * 1000000u;
	struct timespec ts = {0, 1000000};

	while ((rc = pthread_mutex_trylock(m)) == EBUSY && hl_now_ns() < end)
		nanosleep(&ts, NULL);
	if (rc == EBUSY)
		rc = ETIMEDOUT;
#endif
	return rc;
}

static void *meta_main(void *arg)
{
	struct hl_cache *c = arg;
	unsigned long synced_changes = atomic_load(&c->synced); /* engine_meta_start */
	struct timespec next;

	clock_gettime(CLOCK_MONOTONIC, &next);
	pthread_mutex_lock(&c->mlock);
	for (;;) {
		struct meta_wait *list;
		bool stop, fail, periodic = false;
		int rc = 0;

		while (!c->mw_head && !c->mstop && !c->fail_pending) {
			struct timespec now;
			clock_gettime(CLOCK_MONOTONIC, &now);
			if (now.tv_sec > next.tv_sec ||
			    (now.tv_sec == next.tv_sec && now.tv_nsec >= next.tv_nsec)) {
				periodic = true;
				break;
			}
			pthread_cond_timedwait(&c->mcond, &c->mlock, &next);
		}
		list = c->mw_head;
		c->mw_head = NULL;
		c->mw_tail = &c->mw_head;
		c->mw_busy = list; /* a kill may release them while this turn is stuck */
		stop = c->mstop;
		fail = c->fail_pending;
		c->fail_pending = false;
		pthread_mutex_unlock(&c->mlock);

		if (periodic && !atomic_load(&c->failed) && engine_device_check_size(c)) {
			engine_dev_error(c, NULL, -EIO);
			/* engine_meta_kill is idempotent: dev_error's flag is harmless */
			fail = true;
		}
		if (fail)
			engine_meta_kill(c);
		unsigned long ch = atomic_load(&c->changes);
		if (!c->dead && !atomic_load(&c->failed) &&
		    (list || (periodic && ch != synced_changes))) {
			/*
			 * Records are snapshotted under the cache mutex, the device I/O
			 * (data flush, record pages, flush) runs without it: reactors
			 * never wait for the device. A record only claims sectors whose
			 * fill completed before the snapshot, and the data flush comes
			 * after it.
			 */
			pthread_mutex_lock(&c->sync_lock);
			engine_meta_test_hold(c);
			rc = cache_meta_sync_locked(c->dev, &c->layout, c->core, &c->lock);
			pthread_mutex_unlock(&c->sync_lock);
			cnt_add(&c->meta_syncs, 1);
			synced_changes = ch;
			if (!rc)
				atomic_store(&c->synced, ch);
			if (rc) {
				engine_dev_error(c, NULL, rc);
				engine_meta_kill(c);
			}
		}
		if (periodic && !c->dead && !atomic_load(&c->failed))
			engine_proofs_refresh(c);
		if (periodic) {
			next = clock_after_ms(CLOCK_MONOTONIC, c->interval_ms);
		}
		/*
		 * A waiter goes on to the origin: if the device failed (this turn,
		 * or while the waiter queued, before fail_pending was set, or during
		 * the sync's skip), the kill must be durable first, whatever this
		 * turn saw of fail_pending (engine_meta_kill runs once; when it runs
		 * on its own thread, the waiters wait in mw_kill for its release).
		 */
		if (list && atomic_load(&c->failed))
			engine_meta_kill(c);
		pthread_mutex_lock(&c->mlock);
		list = c->mw_busy; /* NULL: a kill released them */
		c->mw_busy = NULL;
		if (list && atomic_load(&c->failed) && !atomic_load(&c->killed)) {
			mw_append(&c->mw_kill, list);
			list = NULL;
		}
		pthread_mutex_unlock(&c->mlock);
		meta_post_all(c, list, rc);
		pthread_mutex_lock(&c->mlock);
		if (stop && !c->mw_head)
			break;
	}
	c->meta_exited = true;
	pthread_cond_broadcast(&c->mexit);
	pthread_mutex_unlock(&c->mlock);
	return NULL;
}

int engine_meta_start(struct hl_cache *c)
{
	int rc;

	/*
	 * What open loaded is on the device: synced. Counted here, not by the
	 * thread once it runs: a fill that completes before a slow thread's
	 * first look would be counted as synced and never flushed by a tick.
	 */
	atomic_store(&c->synced, atomic_load(&c->changes));
	rc = -pthread_create(&c->meta_thr, NULL, meta_main, c);

	if (!rc)
		c->meta_started = true;
	return rc;
}

bool engine_sync_lock_within(struct hl_cache *c, const char *disk)
{
	if (atomic_load(&c->meta_stuck))
		return false;
	if (lock_within_ms(&c->sync_lock, c->drain_ms) == 0)
		return true;
	/*
	 * Whoever holds sync_lock (the metadata thread's record sync, a
	 * restore step) is in a device call that does not return: treated like
	 * a metadata thread a stop abandoned. The records it could not sync are
	 * not trusted at the next start (the map sealed "failed"); a close
	 * goes on without the lock (it detaches under c->lock only and takes
	 * no final proof), an attach is refused.
	 */
	engine_meta_stuck(c, disk, "the records' lock was not free");
	return false;
}

bool engine_sync_lock_patient(struct hl_cache *c, const char *disk)
{
	uint64_t deadline = hl_now_ns() + (uint64_t)c->drain_ms * 1000000u;

	for (;;) {
		if (lock_within_ms(&c->sync_lock, 10) == 0)
			return true;
		if (atomic_load(&c->meta_stuck))
			return false;
		if (atomic_load(&c->sync_origin) > 0)
			deadline = hl_now_ns() + (uint64_t)c->drain_ms * 1000000u; /* the origin's */
		else if (hl_now_ns() >= deadline)
			break;
	}
	engine_meta_stuck(c, disk, "the records' lock was not free");
	return false;
}

void engine_meta_stuck(struct hl_cache *c, const char *disk, const char *what)
{
	if (atomic_exchange(&c->meta_stuck, true))
		return; /* sealed already */
	HL_WARN("cache",
	        "cache %s: disk %s: %s within %u ms (a metadata write not answering?): the "
	        "cache's records are not trusted at the next start",
	        c->name, disk, what, c->drain_ms);
	engine_map_seal(c);
}

/*
 * The kill's thread ends by deadline (hl_now_ns), or is abandoned like a
 * stuck metadata thread (in the superblock wipe on the dead device, its
 * map write done or given up on): meta_stuck, the cache parked. Not sealed
 * again: the kill's seal was written, or is owed. No new kill thread starts once
 * mstop is set. @return whether it ended.
 */
static bool kill_wait(struct hl_cache *c, uint64_t deadline)
{
	struct timespec ts = {0, 1000000};

	while (atomic_load(&c->kill_running) && hl_now_ns() < deadline)
		nanosleep(&ts, NULL);
	if (!atomic_load(&c->kill_running))
		return true;
	atomic_store(&c->meta_stuck, true);
	HL_WARN("cache",
	        "cache %s: the kill of the failed device's metadata did not end within %u ms: "
	        "abandoned (%s)",
	        c->name, c->drain_ms,
	        atomic_load(&c->killed) ? "the map says failed"
	                                : "the next start may find the map not failed");
	return false;
}

bool engine_meta_stop(struct hl_cache *c, bool drop)
{
	uint64_t deadline = hl_now_ns() + (uint64_t)c->drain_ms * 1000000u;
	struct timespec dl;
	bool ended;

	if (!c->meta_started) {
		pthread_mutex_lock(&c->mlock);
		c->mstop = true; /* (no kill thread from now on) */
		pthread_mutex_unlock(&c->mlock);
		return kill_wait(c, deadline) && !atomic_load(&c->meta_stuck);
	}
	dl = clock_after_ms(CLOCK_MONOTONIC, c->drain_ms);
	pthread_mutex_lock(&c->mlock);
	c->mstop = true;
	if (drop)
		atomic_store(&c->mdrop, true);
	pthread_cond_signal(&c->mcond);
	while (!c->meta_exited)
		if (pthread_cond_timedwait(&c->mexit, &c->mlock, &dl) == ETIMEDOUT)
			break;
	ended = c->meta_exited;
	pthread_mutex_unlock(&c->mlock);
	c->meta_started = false;
	if (ended) {
		pthread_join(c->meta_thr, NULL);
		return kill_wait(c, deadline);
	}
	/*
	 * A device write that does not return (a dead SSD): the thread keeps
	 * sync_lock and may write the device and the map whenever it comes
	 * back. It is left running (never joined; the cache it uses is never
	 * freed: hl_cache_close parks it), and the records it could not sync
	 * must not be trusted: the map says "failed" from now on, so the
	 * next start formats the device (cold, never stale).
	 */
	atomic_store(&c->meta_stuck, true);
	pthread_detach(c->meta_thr);
	HL_WARN("cache",
	        "cache %s: the metadata thread did not end within %u ms (a device write not "
	        "answering?): abandoned; its records are not trusted at the next start",
	        c->name, c->drain_ms);
	engine_map_seal(c);
	return false;
}
