/*
 * rbd_own.c - who may write an rbd image: the exclusive lock a lone gateway
 * holds from open to close, the fence (a blocklist, or the lock found
 * elsewhere) and the service thread's probe that finds it, and, with several
 * gateways, the ownership ops (own_*): the lock taken and handed over, the
 * heartbeat record every gateway reads, hand-over requests, and the
 * reconnect of a blocklisted client as a standby. The I/O path and the
 * service thread are in rbd.c.
 */
#include "config.h"

#include "origin/origin_rbd.h"
#include "origin/rbd_codec.h"

#include "hotlun/event.h"
#include "hotlun/log.h"
#include "hotlun/util.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RBD_RELOCK_WAIT_S 15 /* lost without a blocklist: how long to try to take it again */

/* ---- the exclusive lock and the fence ---- */

/* On the service thread. */
static void rbd_fenced_event(void *arg)
{
	hl_origin_notify(arg, HL_ORIGIN_FENCED, 0);
}

/*
 * On a reactor (a completion), the service thread or the ownership thread,
 * without `handles`: fence once, report from the service thread. gen: the
 * connection that saw it (several gateways: an old one's news is stale).
 */
void origin_rbd_fence(struct hl_origin *o, int why, unsigned gen)
{
	struct rbd_origin *r = ro_of(o);

	if (r->gateway) {
		bool first = false;

		handles_read(r);
		if (gen == atomic_load(&r->gen)) {
			atomic_store(&r->owned, false);
			first = !atomic_exchange(&r->fenced, true);
		}
		handles_done(r);
		if (first)
			HL_WARN(RBD_LOG,
			        "%s: the cluster shut this gateway's client out (%s): the image "
			        "is not ours; I/O fails until the client reconnects as a standby",
			        o->uri,
			        why == -EROFS ? "exclusive lock held by another client"
			                      : "blocklisted");
		return;
	}
	if (atomic_exchange(&r->fenced, true))
		return;
	HL_ERR(RBD_LOG,
	       "%s: the cluster shut this gateway out (%s); every I/O to the image now fails "
	       "until the disk is reopened",
	       o->uri,
	       why == -EROFS ? "write refused: exclusive lock held by another client"
	                     : "blocklisted");
	while (hl_reactor_call(r->svc, rbd_fenced_event, o) < 0) {
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
}

/*
 * Take the image's exclusive lock and wait until librbd says it is ours:
 * after a crash the dead gateway keeps it until its watch times out, and
 * acquire can return 0 before that. Asks every 250 ms for up to wait_s. An
 * acquire error ends it at once unless retry_errors (a blocklist,
 * -ESHUTDOWN, always does); waiting_for names the disk in a notice when it
 * has to wait. @return 0 once ours, else the last error (-EROFS: not ours).
 */
int origin_rbd_lock_take(struct rbd_origin *r, int wait_s, bool retry_errors,
                         const char *waiting_for)
{
	int rc = -EROFS;

	for (int i = 0; i < wait_s * 4; i++) {
		int owner = 0;

		if (i) {
			struct timespec ts = {0, 250000000};
			nanosleep(&ts, NULL);
		}
		rc = rbd_lock_acquire(r->image, RBD_LOCK_MODE_EXCLUSIVE);
		if (rc == 0 && rbd_is_exclusive_lock_owner(r->image, &owner) == 0 && owner)
			return 0;
		if (rc == -ESHUTDOWN || (rc && !retry_errors))
			return rc;
		if (i == 0 && waiting_for)
			HL_NOTICE(
			    RBD_LOG,
			    "rbd:%s: waiting for the exclusive lock (held by a client that may "
			    "have crashed)",
			    waiting_for);
	}
	return rc ? rc : -EROFS;
}

/*
 * On the service thread: one read-only round trip to the OSD that holds the
 * image header (its watcher list). Ceph answers a blocklisted client's ops
 * with -EBLOCKLISTED (-ESHUTDOWN), whatever the op. @return true when fenced.
 */
bool origin_rbd_fence_probe(struct hl_origin *o)
{
	struct rbd_origin *r = ro_of(o);
	rbd_image_watcher_t w[8];
	size_t n = 8;
	unsigned gen;
	int rc;

	if (atomic_load(&r->fenced))
		return true;
	if (r->locked) {
		int owner = 1;
		/*
		 * Only `rbd lock break` (which blocklists us too) should take it
		 * from us in exclusive mode. Not owning it without being
		 * blocklisted means someone took it without fencing us (a breaker
		 * with rbd_blocklist_on_break_lock off, or a crashed gateway's
		 * lock broken with ours after a restart) and may have written
		 * the image behind the cache: the cache drops the disk at once,
		 * whether the lock comes back or not.
		 */
		if (rbd_is_exclusive_lock_owner(r->image, &owner) == 0 && !owner) {
			HL_WARN(RBD_LOG,
			        "%s: exclusive lock lost without a blocklist: another client may "
			        "have written the image, the cache drops the disk; taking the lock "
			        "again",
			        o->uri);
			hl_origin_notify(o, HL_ORIGIN_CHANGED, o->size);
			/*
			 * The lock moves in steps (the dead client's watch expires,
			 * its lock is broken, ours goes with it): keep asking for a
			 * while, as open does, before calling it lost. Only a
			 * blocklist (-ESHUTDOWN) ends this at once.
			 */
			int lrc = origin_rbd_lock_take(r, RBD_RELOCK_WAIT_S, true, NULL);
			if (lrc == 0) {
				/* what was read meanwhile may predate the other's last write */
				HL_NOTICE(
				    RBD_LOG,
				    "%s: exclusive lock taken again; the cache drops the disk "
				    "once more",
				    o->uri);
				hl_origin_notify(o, HL_ORIGIN_CHANGED, o->size);
				return false;
			}
			origin_rbd_fence(o, lrc == -ESHUTDOWN ? lrc : -EROFS, 0);
			return true;
		}
	}
	handles_read(r);
	gen = atomic_load(&r->gen);
	rc = rbd_watchers_list(r->image, w, &n);
	handles_done(r);
	if (rc == 0)
		rbd_watchers_list_cleanup(w, n);
	if (rc == -ESHUTDOWN) {
		origin_rbd_fence(o, rc, gen);
		return true;
	}
	return false;
}

/* ---- ownership among gateways (origin.h, hotlun/owner.h) ---- */

/*
 * The cluster decides who owns the image: the exclusive lock. Around it,
 * a record every gateway can read, object hotlun_owner.IMAGEID in the
 * image's pool, one line
 *
 *   owner=G epoch=E beat=N state=owned|released|released-fence done=S addr=A
 *
 * written only by the lock's holder (at acquire, at every renew, at
 * release): G its gateway id, E its epoch, N a heartbeat that goes on
 * counting across owners, S the last hand-over request it dealt with, A
 * its client's address as the lock shows it. released-fence: handed over
 * with writes whose outcome is unknown (timed out, or still out: a librados
 * op timeout cancels the op here, not at the OSD, which may still apply it
 * later); the owner then keeps the lock and blocklists its own client, and
 * the taker breaks the lock (blocklisting that client, and waiting for the
 * OSD map that says so) before it writes anything. A blocklisted client's write
 * fails (-EBLOCKLISTED, i.e. -ESHUTDOWN): a renew's write that succeeds is
 * its round trip proving the image still ours.
 *
 * Hand-over requests go to a second object, hotlun_request.IMAGEID,
 * "gw=R seq=N", written only by the gateways that ask, so the owner's
 * heartbeat never overwrites one. A request is pending while N > S.
 */
#define OWN_RECORD          "hotlun_owner."
#define OWN_REQUEST         "hotlun_request."
#define OWN_RELEASE_WAIT_MS 2000 /* the record says released: the lock follows at once */

static void own_oid(const struct rbd_origin *r, const char *prefix, char *oid, size_t len)
{
	snprintf(oid, len, "%s%s", prefix, r->image_id);
}

/* Under handles: object PREFIX.IMAGEID as a string. @return 0, -ENOENT (never written), -errno. */
static int own_obj_read(struct rbd_origin *r, const char *prefix, char *buf, size_t len)
{
	char oid[160];
	int rc;

	own_oid(r, prefix, oid, sizeof(oid));
	rc = rados_read(r->ioctx, oid, buf, len - 1, 0);
	if (rc < 0)
		return rc;
	buf[rc] = '\0';
	return 0;
}

/* Under handles: object PREFIX.IMAGEID := buf (n bytes), whole. */
static int own_obj_write(struct rbd_origin *r, const char *prefix, const char *buf, int n)
{
	char oid[160];

	own_oid(r, prefix, oid, sizeof(oid));
	return rados_write_full(r->ioctx, oid, buf, (size_t)n);
}

/* Under handles. A missing record reads as "nobody, ever". @return 0 or -errno. */
static int record_read(struct rbd_origin *r, struct rbd_own_record *rec)
{
	char buf[RBD_OWN_RECORD_MAX];
	int rc;

	memset(rec, 0, sizeof(*rec));
	rc = own_obj_read(r, OWN_RECORD, buf, sizeof(buf));
	if (rc == -ENOENT)
		return 0;
	if (rc < 0)
		return rc;
	return rbd_own_record_decode(buf, rec); /* empty: never written, "nobody" too */
}

/* Under handles, holding the lock. */
static int record_write(struct rbd_origin *r, const struct rbd_own_record *rec)
{
	char buf[RBD_OWN_RECORD_MAX];
	int n;

	n = snprintf(buf, sizeof(buf),
	             "owner=%u epoch=%llu beat=%llu state=%s done=%llu addr=%s lease=%u\n",
	             rec->owner, (unsigned long long)rec->epoch, (unsigned long long)rec->beat,
	             rec->fence      ? "released-fence"
	             : rec->released ? "released"
	                             : "owned",
	             (unsigned long long)rec->done, rec->addr[0] ? rec->addr : "-",
	             r->lease_ms);
	return own_obj_write(r, OWN_RECORD, buf, n);
}

/* Under handles: the newest hand-over request (seq 0: none ever). */
static int request_read(struct rbd_origin *r, uint16_t *gw, uint64_t *seq)
{
	char buf[128];
	int rc;

	*gw = 0;
	*seq = 0;
	rc = own_obj_read(r, OWN_REQUEST, buf, sizeof(buf));
	if (rc == -ENOENT)
		return 0;
	if (rc < 0)
		return rc;
	return rbd_own_request_decode(buf, gw, seq);
}

/*
 * ---- the watch on the ownership record: a move is told at once ----
 *
 * Every gateway watches hotlun_owner.IMAGEID; whoever changes who owns the
 * image or asks for it (release, acquire, request) notifies it, so that a
 * standby learns a release, and an owner a request, within a round trip
 * instead of at its next look (250 ms, lease/4). The notifier waits for
 * nobody (a dead watcher must not stall a release); a lost notice only
 * costs the time until the next look.
 */
#define OWN_NOTIFY_TIMEOUT_MS 1000

static int own_check(struct hl_origin *o);

/*
 * A librados thread: wake the ownership thread, and queue the notice for
 * it to answer (never calls into librados here: the handles may be
 * changing under the ownership thread). Unanswered, every notify would
 * wait out its timeout at the OSD (OWN_NOTIFY_TIMEOUT_MS) with each
 * watcher listed as timed out; answered, it completes in a round trip.
 */
static void own_watch_cb(void *arg, uint64_t notify_id, uint64_t handle, uint64_t notifier_id,
                         void *data, size_t len)
{
	struct rbd_origin *r = arg;

	(void)notifier_id;
	(void)data;
	(void)len;
	pthread_mutex_lock(&r->own_wake_lock);
	if (notify_id && r->own_nacks < HL_ARRAY_SIZE(r->own_acks))
		r->own_acks[r->own_nacks++] = (struct own_ack){notify_id, handle};
	if (r->own_wake)
		r->own_wake(r->own_wake_arg);
	pthread_mutex_unlock(&r->own_wake_lock);
}

/*
 * Under handles, on the ownership thread (its woken look): answer the
 * notices the watch received, those of the current watch (one of an older
 * connection went with it: its notifier times out on it, as before).
 */
static void own_ack(struct rbd_origin *r, const char *oid)
{
	struct own_ack acks[HL_ARRAY_SIZE(r->own_acks)];
	unsigned n;

	pthread_mutex_lock(&r->own_wake_lock);
	n = r->own_nacks;
	memcpy(acks, r->own_acks, n * sizeof(acks[0]));
	r->own_nacks = 0;
	pthread_mutex_unlock(&r->own_wake_lock);
	for (unsigned i = 0; i < n; i++) {
		if (r->own_watching && r->own_watch_gen == atomic_load(&r->gen) &&
		    acks[i].handle == r->own_watch_handle)
			rados_notify_ack(r->ioctx, oid, acks[i].notify_id, acks[i].handle, NULL, 0);
	}
}

static void own_watch_err(void *arg, uint64_t cookie, int err)
{
	struct rbd_origin *r = arg;

	(void)cookie;
	(void)err;
	atomic_store(&r->own_watch_lost, true);
	own_watch_cb(arg, 0, 0, 0, NULL, 0); /* its next look registers it again */
}

/*
 * Under handles, on the ownership thread: watch the record on the current
 * connection, once asked to (own_watch), again after a reconnect or a
 * watch error. The record is created empty when missing (a watch needs an
 * object; content is written only by the lock's holder).
 */
static void own_rewatch(struct rbd_origin *r)
{
	unsigned gen = atomic_load(&r->gen);
	char oid[160];
	uint64_t h;
	bool want;
	int rc;

	pthread_mutex_lock(&r->own_wake_lock);
	want = r->own_wake != NULL;
	pthread_mutex_unlock(&r->own_wake_lock);
	own_oid(r, OWN_RECORD, oid, sizeof(oid));
	own_ack(r, oid);
	if (!want || (r->own_watching && r->own_watch_gen == gen && !atomic_load(&r->own_watch_lost)))
		return;
	if (r->own_watching && r->own_watch_gen == gen)
		rados_unwatch2(r->ioctx, r->own_watch_handle);
	r->own_watching = false;
	atomic_store(&r->own_watch_lost, false);
	rados_write_op_t op = rados_create_write_op();
	if (!op)
		return;
	rados_write_op_create(op, LIBRADOS_CREATE_IDEMPOTENT, NULL);
	rc = rados_write_op_operate(op, r->ioctx, oid, NULL, 0);
	rados_release_write_op(op);
	if (rc == 0)
		rc = rados_watch2(r->ioctx, oid, &h, own_watch_cb, own_watch_err, r);
	if (rc) {
		HL_DEBUG(RBD_LOG, "rbd:%s: cannot watch %s: %s", r->name, oid, strerror(-rc));
		return;
	}
	r->own_watching = true;
	r->own_watch_gen = gen;
	r->own_watch_handle = h;
}

/*
 * A notify still out. Its completion is never called when the client is
 * blocklisted or shut down before the notify ends, so each one is kept on
 * the origin (own_notices, under own_wake_lock) with the connection it went
 * out on, and freed by whichever comes first: its completion, or
 * origin_rbd_own_disconnect once that connection is shut down (no callback
 * runs after rados_shutdown).
 */
struct own_notice {
	struct own_notice *next;
	struct rbd_origin *r;
	rados_t cluster;
	rados_completion_t c;
	char *reply;
	size_t len;
};

static void own_notice_free(struct own_notice *n)
{
	if (n->reply)
		rados_buffer_free(n->reply);
	rados_aio_release(n->c);
	free(n);
}

/* Under own_wake_lock: take n off the origin's list. */
static void own_notice_unlink(struct rbd_origin *r, struct own_notice *n)
{
	for (struct own_notice **p = &r->own_notices; *p; p = &(*p)->next) {
		if (*p == n) {
			*p = n->next;
			return;
		}
	}
}

/* A librados thread: the notify ended (every watcher answered, or its timeout). */
static void own_notified(rados_completion_t c, void *arg)
{
	struct own_notice *n = arg;
	struct rbd_origin *r = n->r;

	(void)c;
	pthread_mutex_lock(&r->own_wake_lock);
	own_notice_unlink(r, n);
	pthread_mutex_unlock(&r->own_wake_lock);
	own_notice_free(n);
}

/* Under handles: tell every gateway watching the record that it changed (what: for the log). */
static void own_notify(struct rbd_origin *r, const char *what)
{
	struct own_notice *n = calloc(1, sizeof(*n));
	char oid[160];

	if (!n)
		return;
	n->r = r;
	n->cluster = r->cluster;
	if (rados_aio_create_completion2(n, own_notified, &n->c) < 0) {
		free(n);
		return;
	}
	pthread_mutex_lock(&r->own_wake_lock);
	n->next = r->own_notices;
	r->own_notices = n;
	pthread_mutex_unlock(&r->own_wake_lock);
	own_oid(r, OWN_RECORD, oid, sizeof(oid));
	if (rados_aio_notify(r->ioctx, oid, n->c, what, (int)strlen(what), OWN_NOTIFY_TIMEOUT_MS,
	                     &n->reply, &n->len) < 0) {
		pthread_mutex_lock(&r->own_wake_lock);
		own_notice_unlink(r, n);
		pthread_mutex_unlock(&r->own_wake_lock);
		own_notice_free(n);
	}
}

/* Under own_wake_lock: a notify of connection `cluster` is still out. */
static bool own_notice_out(struct rbd_origin *r, rados_t cluster)
{
	for (struct own_notice *n = r->own_notices; n; n = n->next) {
		if (n->cluster == cluster)
			return true;
	}
	return false;
}

void origin_rbd_own_disconnect(struct rbd_origin *r, rados_t cluster, rados_ioctx_t ioctx,
                               rbd_image_t image)
{
	struct own_notice *dead = NULL, *n, **p;
	bool out = r->own_wake_init && cluster;

	/*
	 * A notify sent a moment ago ends within a round trip (every watcher
	 * answers at once) or at its timeout at the OSD: give it that long, so
	 * that librados frees its own part of it too (a shut down client drops
	 * what it still waits for, and only ours is freed below).
	 */
	for (int ms = 0; out && ms < OWN_NOTIFY_TIMEOUT_MS + 500; ms += 10) {
		pthread_mutex_lock(&r->own_wake_lock);
		out = own_notice_out(r, cluster);
		pthread_mutex_unlock(&r->own_wake_lock);
		if (out) {
			struct timespec ts = {0, 10000000};
			nanosleep(&ts, NULL);
		}
	}
	origin_rbd_disconnect(cluster, ioctx, image);
	if (!r->own_wake_init || !cluster)
		return;
	pthread_mutex_lock(&r->own_wake_lock);
	for (p = &r->own_notices; (n = *p);) {
		if (n->cluster == cluster) {
			*p = n->next;
			n->next = dead;
			dead = n;
		} else {
			p = &n->next;
		}
	}
	pthread_mutex_unlock(&r->own_wake_lock);
	while ((n = dead)) {
		dead = n->next;
		own_notice_free(n); /* its connection is gone: its completion never runs now */
	}
}

int origin_rbd_own_watch(struct hl_origin *o, void (*wake)(void *arg), void *arg)
{
	struct rbd_origin *r = ro_of(o);
	int rc = own_check(o);

	if (rc)
		return rc;
	pthread_mutex_lock(&r->own_wake_lock);
	r->own_wake = wake;
	r->own_wake_arg = arg;
	pthread_mutex_unlock(&r->own_wake_lock);
	return 0; /* registered by the ownership thread's next look (own_rewatch) */
}

void origin_rbd_own_close(struct rbd_origin *r)
{
	if (!r->own_wake_init)
		return;
	pthread_mutex_lock(&r->own_wake_lock);
	r->own_wake = NULL;
	pthread_mutex_unlock(&r->own_wake_lock);
	if (r->own_watching && r->own_watch_gen == atomic_load(&r->gen) && r->ioctx) {
		rados_unwatch2(r->ioctx, r->own_watch_handle);
		rados_watch_flush(r->cluster); /* no callback of ours runs after this */
	}
	r->own_watching = false;
}

/* Under handles: the client holding the lock (one round trip). @return 1 (addr set), 0: free. */
static int lock_holder(struct rbd_origin *r, char *addr, size_t len)
{
	rbd_lock_mode_t mode;
	char *owners[4];
	size_t n = 4;
	int rc = rbd_lock_get_owners(r->image, &mode, owners, &n);

	if (rc == -ENOENT || (rc == 0 && n == 0))
		return 0;
	if (rc < 0)
		return rc;
	snprintf(addr, len, "%s", owners[0]);
	rbd_lock_get_owners_cleanup(owners, n);
	return 1;
}

static int own_check(struct hl_origin *o)
{
	struct rbd_origin *r = ro_of(o);

	if (!r->gateway || r->snap[0] || o->read_only || !r->image_id[0])
		return -EOPNOTSUPP;
	return 0;
}

/*
 * The ownership thread: this gateway's client was blocklisted (another
 * gateway broke our lock). That client is of no use any more; a new one
 * (a new address, not blocklisted) makes this gateway a standby that can
 * peek and take the image again. Submissions fail meanwhile (fenced); I/O
 * still in flight on the old client fails as it closes (its completions
 * belong to an old generation: they fence nothing). The old client read
 * through no cache of librbd's (rbd_cache off), so nothing it had read
 * survives it.
 */
static int rbd_reconnect(struct hl_origin *o)
{
	struct rbd_origin *r = ro_of(o);
	rados_t c;
	rados_ioctx_t io;
	rbd_image_t img;
	uint64_t wh;
	bool watching;
	int rc;

	rc = origin_rbd_connect(r, r->name, false, &c, &io, &img);
	if (rc < 0)
		return rc;
	rc = rbd_update_watch(img, &wh, origin_rbd_watch_cb, o);
	if (rc < 0) {
		origin_rbd_disconnect(c, io, img);
		return rc;
	}
	pthread_rwlock_wrlock(&r->handles);
	rados_t old_c = r->cluster;
	rados_ioctx_t old_io = r->ioctx;
	rbd_image_t old_img = r->image;
	uint64_t old_wh = r->watch_handle;
	watching = r->watching;
	r->cluster = c;
	r->ioctx = io;
	r->image = img;
	r->watch_handle = wh;
	r->watching = true;
	atomic_fetch_add(&r->gen, 1);
	atomic_store(&r->owned, false);
	atomic_store(&r->fenced, false);
	pthread_rwlock_unlock(&r->handles);

	if (watching)
		rbd_update_unwatch(old_img, old_wh);
	origin_rbd_own_disconnect(r, old_c, old_io, old_img);
	HL_NOTICE(RBD_LOG, "%s: reconnected to the cluster with a new client, as a standby",
	          o->uri);
	origin_rbd_watch_cb(o); /* the size may have changed while the old client could not ask */
	return 0;
}

static int reconnect_if_fenced(struct hl_origin *o)
{
	struct rbd_origin *r = ro_of(o);

	return atomic_load(&r->fenced) ? rbd_reconnect(o) : 0;
}

/*
 * Shut client `addr` out, and wait until this client has the OSD map that
 * says so. The wait is what orders writes: an OSD answers an op only once it
 * has the map its sender had, so every op this client (or whoever it hands
 * the image to) sends from now on reaches an OSD that refuses addr's late
 * writes; the blocklist alone is only committed at the monitors, and an OSD
 * that has not heard of it yet still applies them. @return 0 or -errno.
 */
static int blocklist_and_wait(struct rbd_origin *r, char *addr)
{
	int rc = rados_blocklist_add(r->cluster, addr, 0);

	return rc < 0 ? rc : rados_wait_for_latest_osdmap(r->cluster);
}

/*
 * Under handles. The lock is held by `holder`, and no force: a planned
 * release writes the record (state=released, addr=holder) before it
 * releases the lock, so wait a moment for that. @return 0: free now, or
 * -EBUSY.
 */
static int wait_released(struct rbd_origin *r, char *holder, size_t len)
{
	struct rbd_own_record rec;
	int rc;

	for (int i = 0; i < OWN_RELEASE_WAIT_MS / 100; i++) {
		if (record_read(r, &rec) || !rec.released || strcmp(rec.addr, holder))
			return -EBUSY;
		struct timespec ts = {0, 100000000};
		nanosleep(&ts, NULL);
		rc = lock_holder(r, holder, len);
		if (rc == 0)
			return 0;
		if (rc < 0)
			return rc;
	}
	return -EBUSY;
}

/*
 * The lock is free, yet the record says its last holder let go of it with
 * writes of unknown outcome (released-fence, its own blocklist failed: the
 * lock went with its image's close) or never released it: those writes may
 * still land, and no lock break blocklists that client now. Blocklist it
 * here, and wait until the OSDs know, before taking the lock. broke: after
 * a lock break that said 0, which librbd also says when the lock went
 * between its two looks, blocklisting nothing: only a released-fence
 * record is fenced again then. @return 0, or an error with why (the disk
 * is not taken: never served unfenced).
 */
static int fence_last_holder(struct hl_origin *o, bool broke, char *why, size_t whylen)
{
	struct rbd_origin *r = ro_of(o);
	struct rbd_own_record rec;
	int rc = record_read(r, &rec);

	if (rc == -ESHUTDOWN)
		return rc;
	if (rc == -EBADMSG) {
		/* not a record a gateway wrote: no address to fence (a break fenced the holder) */
		HL_WARN(RBD_LOG,
		        "%s: the ownership record is not one a gateway wrote: the last owner's "
		        "client is unknown, and only a lock break fences it",
		        o->uri);
		return 0;
	}
	if (rc < 0) {
		/* it may say released-fence: never taken unfenced */
		snprintf(why, whylen,
		         "cannot read the ownership record: %s (it may name a client to fence)",
		         strerror(-rc));
		return rc;
	}
	if (!rec.addr[0] || (rec.released && !rec.fence) || (broke && !rec.fence))
		return 0; /* nobody, or a release with every write answered */
	rc = blocklist_and_wait(r, rec.addr);
	if (rc < 0) {
		snprintf(
		    why, whylen,
		    "cannot blocklist the last owner's client %s, whose writes may still land: %s",
		    rec.addr, strerror(-rc));
		return rc;
	}
	HL_NOTICE(RBD_LOG,
	          "%s: %s gateway %u's client %s %s: blocklisted it before taking the lock", o->uri,
	          broke ? "after the lock break," : "the lock was free but", rec.owner, rec.addr,
	          rec.released ? "left writes of unknown outcome" : "never released it");
	return 0;
}

/* Under handles: see origin_rbd_own_acquire. */
static int own_acquire(struct hl_origin *o, uint16_t gw, uint64_t epoch, bool force, char *why,
                       size_t whylen)
{
	struct rbd_origin *r = ro_of(o);
	struct rbd_own_record rec;
	char holder[128];
	int is_owner = 0, rc;
	uint16_t rgw;
	uint64_t rseq;

	rc = lock_holder(r, holder, sizeof(holder));
	if (rc < 0) {
		snprintf(why, whylen, "cannot read the lock's owner: %s", strerror(-rc));
		return rc;
	}
	if (rc == 1 && rbd_is_exclusive_lock_owner(r->image, &is_owner) == 0 && is_owner) {
		/* ours already: only the record to write */
	} else if (rc == 1 && !force) {
		rc = wait_released(r, holder, sizeof(holder));
		if (rc) {
			snprintf(why, whylen, "exclusive lock held by %s", holder);
			return rc;
		}
		/*
		 * Free now: a plain release let it go, or a close did after a
		 * released-fence whose self-blocklist failed (the lock went with
		 * the image): fenced as a free lock is.
		 */
		rc = fence_last_holder(o, false, why, whylen);
		if (rc)
			return rc;
	} else if (rc == 1) {
		/*
		 * Takes the lock from a live-looking client: librbd blocklists it
		 * first (rbd_blocklist_on_break_lock, set at connect), so whatever
		 * it still sends is refused by the OSDs.
		 */
		rc = rbd_lock_break(r->image, RBD_LOCK_MODE_EXCLUSIVE, holder);
		if (rc < 0 && rc != -ENOENT) {
			snprintf(why, whylen, "cannot break the lock of %s: %s", holder,
			         strerror(-rc));
			return rc;
		}
		if (rc == 0)
			HL_NOTICE(RBD_LOG, "%s: broke the exclusive lock of %s (blocklisted)",
			          o->uri, holder);
		/*
		 * librbd blocklists nothing when the lock is gone by the time it
		 * looks (-ENOENT, or 0 if it went between its two looks), as when
		 * the old owner's close let it go: fenced as a free lock is.
		 */
		rc = fence_last_holder(o, rc == 0, why, whylen);
		if (rc)
			return rc;
	} else {
		rc = fence_last_holder(o, false, why, whylen);
		if (rc)
			return rc;
	}
	if (!is_owner) {
		/*
		 * Against a live owner (a race with another gateway) librbd asks
		 * it, it refuses (transitions are off in exclusive mode) and this
		 * fails with -EROFS within a round trip or two.
		 */
		rc = rbd_lock_acquire(r->image, RBD_LOCK_MODE_EXCLUSIVE);
		if (rc == 0 && (rbd_is_exclusive_lock_owner(r->image, &is_owner) < 0 || !is_owner))
			rc = -EROFS;
		if (rc < 0) {
			snprintf(why, whylen, "cannot take the exclusive lock: %s", strerror(-rc));
			return rc == -EROFS ? -EBUSY : rc;
		}
	}
	/* ours: the heartbeat goes on from the last owner's, the requests it dealt with stay so */
	rc = record_read(r, &rec);
	if (rc == -ESHUTDOWN)
		return rc;
	if (rc)
		HL_WARN(RBD_LOG, "%s: ownership record unreadable (%s): written anew", o->uri,
		        strerror(-rc));
	r->beat = rec.beat + 1;
	r->done_seq = rec.done;
	/* our own request (made as a standby) is served by this */
	if (request_read(r, &rgw, &rseq) == 0 && rgw == gw && rseq > r->done_seq)
		r->done_seq = rseq;
	if (lock_holder(r, r->own_addr, sizeof(r->own_addr)) != 1)
		r->own_addr[0] = '\0';
	r->own_gw = gw;
	r->own_epoch = epoch;
	atomic_store(&r->unsure_writes, 0); /* an earlier ownership's: fenced or released since */
	atomic_store(&r->unsure_base, atomic_load(&r->unsure_total)); /* marks: the same */
	rec = (struct rbd_own_record){
	    .owner = gw, .epoch = epoch, .beat = r->beat, .done = r->done_seq};
	snprintf(rec.addr, sizeof(rec.addr), "%s", r->own_addr);
	rc = record_write(r, &rec);
	if (rc < 0) {
		snprintf(why, whylen, "cannot write the ownership record: %s", strerror(-rc));
		if (rc != -ESHUTDOWN)
			rbd_lock_release(r->image); /* not serving: nobody should wait for us */
		return rc;
	}
	atomic_store(&r->owned, true);
	return 0;
}

/*
 * See hl_origin_ops.own_acquire. Without force, -EBUSY at once while a
 * live client holds the lock (a planned release is waited for, up to
 * OWN_RELEASE_WAIT_MS). A fenced client reconnects first.
 */
int origin_rbd_own_acquire(struct hl_origin *o, uint16_t gw, uint64_t epoch, bool force, char *why,
                           size_t whylen)
{
	struct rbd_origin *r = ro_of(o);
	unsigned gen;
	int rc = own_check(o);

	if (whylen)
		why[0] = '\0';
	if (rc) {
		snprintf(why, whylen, "not an rbd image shared by gateways");
		return rc;
	}
	rc = reconnect_if_fenced(o);
	if (rc) {
		snprintf(why, whylen, "cannot reconnect to the cluster: %s", strerror(-rc));
		return rc;
	}
	handles_read(r);
	gen = atomic_load(&r->gen);
	own_rewatch(r);
	rc = own_acquire(o, gw, epoch, force, why, whylen);
	if (rc == 0)
		own_notify(r, "acquired");
	handles_done(r);
	if (rc == -ESHUTDOWN)
		origin_rbd_fence(o, rc, gen);
	return rc;
}

/*
 * Under handles: librbd says the exclusive lock is not ours. That alone
 * proves no fence: librbd drops its lock state for a moment while it
 * re-registers the header watch (a watch error, an OSD that moved, the
 * notifications that follow a forced takeover) and takes it back. Proof is
 * a blocklist (-ESHUTDOWN from any op) or the lock held by another client,
 * seen again after our own attempt to take it. @return 0 (ours again),
 * -ESHUTDOWN (proof: fenced), or -EAGAIN (unsure: the caller retries
 * within its lease, and the heartbeat stands still meanwhile).
 */
static int relock(struct hl_origin *o)
{
	struct rbd_origin *r = ro_of(o);
	char holder[128];
	int is_owner = 0, rc, lrc;

	rc = lock_holder(r, holder, sizeof(holder));
	if (rc == -ESHUTDOWN)
		return rc;
	if (rc == 1 && r->own_addr[0] && strcmp(holder, r->own_addr))
		return -ESHUTDOWN; /* another client holds it: only a break gets it there */
	if (rc < 0)
		return -EAGAIN;
	/* free, or held by our own client while librbd's state catches up */
	lrc = rbd_lock_acquire(r->image, RBD_LOCK_MODE_EXCLUSIVE);
	if (lrc == -ESHUTDOWN)
		return lrc;
	if (lrc == 0 && rbd_is_exclusive_lock_owner(r->image, &is_owner) == 0 && is_owner) {
		HL_WARN(RBD_LOG,
		        "%s: librbd said the exclusive lock was not ours, yet nobody else held it "
		        "and this client is not blocklisted: taken again",
		        o->uri);
		return 0;
	}
	rc = lock_holder(r, holder, sizeof(holder));
	if (rc == -ESHUTDOWN || (rc == 1 && r->own_addr[0] && strcmp(holder, r->own_addr)))
		return -ESHUTDOWN;
	HL_NOTICE(RBD_LOG, "%s: the exclusive lock is not ours right now (%s), but nothing "
	          "proves a fence: trying again at the next renew", o->uri,
	          lrc ? strerror(-lrc) : "librbd still says not the owner");
	return -EAGAIN;
}

int origin_rbd_own_renew(struct hl_origin *o, uint16_t gw, uint64_t epoch, struct hl_own_info *info)
{
	struct rbd_origin *r = ro_of(o);
	struct rbd_own_record rec = {.owner = gw, .epoch = epoch};
	int is_owner = 0, rc = own_check(o);
	uint16_t rgw;
	uint64_t rseq;
	unsigned gen;

	if (rc)
		return rc;
	memset(info, 0, sizeof(*info));
	if (atomic_load(&r->fenced) || !atomic_load(&r->owned))
		return -ESHUTDOWN;
	handles_read(r);
	gen = atomic_load(&r->gen);
	own_rewatch(r);
	rc = rbd_is_exclusive_lock_owner(r->image, &is_owner);
	if (rc == 0 && !is_owner)
		rc = relock(o); /* fenced only with proof; else again within the lease */
	if (rc == 0) {
		rec.beat = r->beat + 1;
		rec.done = r->done_seq;
		snprintf(rec.addr, sizeof(rec.addr), "%s", r->own_addr);
		rc = record_write(r, &rec);
		if (rc == 0)
			r->beat = rec.beat;
	}
	/* a request of our own id was made by another process with our id (ours is done) */
	if (rc == 0 && request_read(r, &rgw, &rseq) == 0 && rseq > r->done_seq)
		info->requester = rgw;
	handles_done(r);
	if (rc == -ESHUTDOWN)
		origin_rbd_fence(o, rc, gen);
	if (rc)
		return rc;
	info->owner = gw;
	info->epoch = epoch;
	info->beat = r->beat;
	info->has_beat = true;
	info->lease_ms = r->lease_ms;
	info->this_run = true;
	return 0;
}

/*
 * Under handles: writes of ours whose outcome is unknown may still land:
 * shut our own client out (blocklist) before anyone else writes, and wait
 * for the OSD map that says so. The lock stays with the blocklisted client;
 * the taker breaks it (a break blocklists and waits too). Without the wait
 * this client's close, at the reconnect that follows, could still release
 * the lock at an OSD that had not heard of the blocklist, and a taker that
 * then found it free and nothing to break would write at an older map than
 * the blocklist's. @return 0 when blocklisted (the caller fences the origin:
 * a new client at the next peek).
 */
static int fence_self(struct hl_origin *o, unsigned unsure)
{
	struct rbd_origin *r = ro_of(o);
	int rc = r->own_addr[0] ? blocklist_and_wait(r, r->own_addr) : -ENOENT;

	if (rc == 0)
		HL_NOTICE(RBD_LOG,
		          "%s: handed over with %u write(s) of unknown outcome: this client (%s) "
		          "blocklisted itself, so none of them lands after the next owner's",
		          o->uri, unsure, r->own_addr);
	else
		HL_WARN(RBD_LOG,
		        "%s: handed over with %u write(s) of unknown outcome, and cannot blocklist "
		        "this client (%s): %s; the next owner blocklists it before it writes (it "
		        "breaks the lock, or, if a close let the lock go, reads this client's "
		        "address in the record)",
		        o->uri, unsure, r->own_addr[0] ? r->own_addr : "address unknown",
		        strerror(-rc));
	return rc;
}

void origin_rbd_close_fence(struct hl_origin *o)
{
	struct rbd_origin *r = ro_of(o);
	char addr[128];
	int is_owner = 0, rc;
	unsigned unsure;

	if (!r->image || o->read_only || r->snap[0] || atomic_load(&r->fenced))
		return;
	unsure = atomic_load(&r->writes_out); /* before unsure_writes: rbd_write_done */
	unsure += atomic_load(&r->unsure_writes);
	if (!unsure)
		return;
	/* the lock's owner string is this client's address while we hold it */
	rc = rbd_is_exclusive_lock_owner(r->image, &is_owner);
	if (rc == 0 && !is_owner)
		rc = -ENOLCK;
	if (rc == 0 && lock_holder(r, addr, sizeof(addr)) != 1)
		rc = -ENOENT;
	if (rc == 0)
		rc = blocklist_and_wait(r, addr);
	if (rc == 0)
		HL_NOTICE(
		    RBD_LOG,
		    "%s: closing with %u write(s) of unknown outcome: this client (%s) "
		    "blocklisted itself, so none of them lands after the image's next client's",
		    o->uri, unsure, addr);
	else
		HL_WARN(
		    RBD_LOG,
		    "%s: closing with %u write(s) of unknown outcome, and cannot blocklist this "
		    "client: %s; one may still land after the image's next writes",
		    o->uri, unsure, strerror(-rc));
}

int origin_rbd_own_release(struct hl_origin *o, uint16_t gw, uint64_t epoch)
{
	struct rbd_origin *r = ro_of(o);
	struct rbd_own_record rec = {.owner = gw, .epoch = epoch, .released = true};
	int rc = own_check(o), wrc, lrc;
	uint16_t rgw;
	uint64_t rseq;
	unsigned gen, unsure;
	bool self_fenced = false;

	if (rc)
		return rc;
	if (atomic_load(&r->fenced))
		return -ESHUTDOWN;
	if (!atomic_exchange(&r->owned, false))
		return 0; /* not ours: nothing to give */
	handles_read(r);
	gen = atomic_load(&r->gen);
	rc = rbd_flush(r->image);
	/* after the flush: what is still out, or failed without "not written", may land later */
	unsure = atomic_load(&r->writes_out); /* before unsure_writes: rbd_write_done */
	unsure += atomic_load(&r->unsure_writes);
	/* every request made so far is answered by this release */
	if (request_read(r, &rgw, &rseq) == 0 && rseq > r->done_seq)
		r->done_seq = rseq;
	rec.beat = ++r->beat;
	rec.done = r->done_seq;
	rec.fence = unsure > 0;
	snprintf(rec.addr, sizeof(rec.addr), "%s", r->own_addr);
	/* the record first: a standby that reads "released" finds the lock free a moment later */
	wrc = record_write(r, &rec);
	if (unsure) {
		lrc = 0; /* the lock stays: the taker breaks it */
		self_fenced = wrc == 0 && fence_self(o, unsure) == 0;
	} else {
		lrc = rbd_lock_release(r->image);
	}
	if (wrc == 0)
		own_notify(r, "released"); /* a standby takes it now, not at its next look */
	handles_done(r);
	rc = rc < 0 ? rc : wrc < 0 ? wrc : lrc;
	if (rc == -ESHUTDOWN || self_fenced)
		origin_rbd_fence(o, -ESHUTDOWN, gen);
	if (rc < 0)
		HL_WARN(RBD_LOG, "%s: release: %s", o->uri, strerror(-rc));
	return rc < 0 ? rc : 0;
}

int origin_rbd_own_peek(struct hl_origin *o, struct hl_own_info *info)
{
	struct rbd_origin *r = ro_of(o);
	struct rbd_own_record rec;
	int rc = own_check(o);
	unsigned gen;

	if (rc)
		return rc;
	memset(info, 0, sizeof(*info));
	for (int tries = 0;; tries++) {
		rc = reconnect_if_fenced(o);
		if (rc)
			return rc;
		handles_read(r);
		gen = atomic_load(&r->gen);
		own_rewatch(r);
		rc = record_read(r, &rec);
		handles_done(r);
		if (rc != -ESHUTDOWN || tries)
			break;
		origin_rbd_fence(o, rc, gen); /* blocklisted: a new client, once */
	}
	if (rc)
		return rc;
	info->owner = rec.owner;
	info->epoch = rec.epoch;
	info->beat = rec.beat;
	info->has_beat = true;
	info->lease_ms = rec.lease_ms;
	info->released = rec.released;
	info->fence = rec.fence;
	/* our id in the record, written by this process (its client's lock address) or not */
	info->this_run = rec.owner == r->gateway && r->own_addr[0] && !strcmp(rec.addr, r->own_addr);
	return 0;
}

int origin_rbd_own_request(struct hl_origin *o, uint16_t gw)
{
	struct rbd_origin *r = ro_of(o);
	char buf[64];
	uint16_t rgw;
	uint64_t rseq;
	unsigned gen;
	int rc = own_check(o), n;

	if (rc)
		return rc;
	rc = reconnect_if_fenced(o);
	if (rc)
		return rc;
	handles_read(r);
	gen = atomic_load(&r->gen);
	rc = request_read(r, &rgw, &rseq);
	if (rc == -EBADMSG) {
		/*
		 * Damaged: count on from the last request the owner dealt with,
		 * or ours (seq 1) would look dealt with and wait forever.
		 */
		struct rbd_own_record rec;
		rc = record_read(r, &rec);
		rseq = rc == 0 ? rec.done : 0;
		if (rc == -EBADMSG)
			rc = 0;
	}
	if (rc == 0) {
		n = snprintf(buf, sizeof(buf), "gw=%u seq=%llu\n", gw,
		             (unsigned long long)(rseq + 1));
		rc = own_obj_write(r, OWN_REQUEST, buf, n);
	}
	if (rc == 0)
		own_notify(r, "requested"); /* the owner sees it now, not at its next renew */
	handles_done(r);
	if (rc == -ESHUTDOWN)
		origin_rbd_fence(o, rc, gen);
	return rc;
}
