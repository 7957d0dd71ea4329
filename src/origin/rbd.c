/*
 * rbd.c - the `rbd:POOL/IMAGE[@SNAP]` origin: a Ceph RBD image through
 * librbd's asynchronous API.
 *
 * librbd runs its completions on its own threads. The completion callback
 * only records the result and hands the request back to the reactor that
 * submitted it (hl_reactor_call), so callers see their callback on their own
 * reactor as the origin contract requires, and no reactor ever waits on the
 * cluster. The image is opened with librbd's client cache off, so a write
 * that completes is on the OSDs: FUA needs nothing more, FLUSH is still
 * forwarded. COMPARE AND WRITE is forwarded to rbd_aio_compare_and_write,
 * so it is atomic at the cluster, not only in this gateway.
 *
 * Snapshots (`@SNAP`) open read-only; writes to them fail with -EROFS.
 *
 * A writable image is opened with its exclusive lock held in exclusive mode
 * (rbd_lock_acquire): no other client can write it while hotlund has it open,
 * so nothing changes behind the cache. Another client that tries gets EROFS
 * from librbd; `rbd lock break` fences this gateway (below).
 *
 * Events (origin.h). Each image has a service thread of its own (an hl
 * reactor named rbd-watch) that never serves connections. librbd calls the
 * update watch (rbd_update_watch) on one of its threads when the image
 * header changes; that callback only queues a size check on the service
 * thread, which asks librbd for the size (rbd_get_size may wait for a header
 * refresh from the cluster, so it must not run on an I/O reactor) and
 * reports HL_ORIGIN_RESIZED. When the cluster shuts this client out
 * (-ESHUTDOWN, i.e. Ceph's EBLOCKLISTED: `ceph osd blocklist add`, or an
 * exclusive lock broken by another client) or refuses a write to a
 * writable image with -EROFS (the exclusive lock is held elsewhere), the
 * origin becomes fenced: HL_ORIGIN_FENCED is reported once from the service
 * thread, and every later I/O fails at once with -ESHUTDOWN, because
 * another client may own the image now. It stays fenced until the disk is
 * opened again (a restart, or a configuration change that reopens it);
 * docs/hotlun.conf.5 says what initiators see.
 *
 * Several gateways on one image (hl_origin_opts.gateway, docs/gateways.md):
 * open takes no lock and never takes it back by itself; the ownership
 * module decides through the own_* ops (below), which take the exclusive
 * lock (breaking a silent owner's lock blocklists that owner's client),
 * publish a heartbeat record every gateway can read, and hand the image
 * over on request. Until it is ours, only reads pass (a standby's proofs);
 * anything else fails at once with -ESHUTDOWN. A blocklisted gateway is
 * not fenced for good: it reconnects (a new client, a new address) the next
 * time it peeks, as a standby. HL_ORIGIN_FENCED is not reported then: the
 * ownership module learns it from own_renew.
 */
#include "config.h"

#include "origin/origin_internal.h"

#include "hotlun/event.h"
#include "hotlun/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <rados/librados.h>
#include <rbd/librbd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RBD_LOG "origin"

struct rbd_origin {
	rados_t cluster;
	rados_ioctx_t ioctx;
	rbd_image_t image;
	char pool[128];
	char name[256];
	char snap[256];
	struct hl_reactor *svc; /* service thread: size checks, event delivery */
	uint64_t watch_handle;
	bool watching;
	atomic_bool check_queued; /* a size check is queued on svc */
	atomic_bool fenced;       /* the cluster shut us out: I/O fails with -ESHUTDOWN */
	bool locked;              /* we hold the exclusive lock in exclusive mode */
	struct hl_timer probe;    /* svc: the periodic fence probe */
	char image_id[128];       /* rbd_get_id; "" when unknown */
	/* the proof of the mark this run made (proofs are taken on one thread at a time) */
	char mark_proof[HL_ORIGIN_PROOF_MAX];
	/* for the reconnect (owned strings) */
	char *conf;
	char *id;
	/*
	 * Several gateways (gateway != 0). The reconnect after a blocklist
	 * replaces cluster, ioctx and image: everything else that uses them
	 * holds `handles` for reading meanwhile (a reactor only around an
	 * rbd_aio_* call), the reconnect holds it for writing only to swap
	 * them. gen counts the connections: a late result of an old one (its
	 * I/O completing as it closes) fences nothing.
	 */
	uint16_t gateway;
	pthread_rwlock_t handles;
	bool handles_init;
	atomic_uint gen;   /* written under handles (write) */
	atomic_bool owned; /* own_acquire succeeded; no release or fence since */
	/* the ownership thread's own (the own_* ops run on one thread) */
	uint64_t beat;     /* the last heartbeat we wrote */
	uint64_t done_seq; /* the last hand-over request (hotlun_request) dealt with */
	uint16_t own_gw;
	uint64_t own_epoch;
	char own_addr[128]; /* our lock owner address, as the cluster reports it */
};

/*
 * How often the service thread asks the cluster whether this client is
 * still welcome. A blocklisted client learns it only from a reply of the
 * cluster, and a disk served wholly from the cache sends nothing: without
 * the probe its stale hits could go on for as long as the blocklist lasts.
 */
#define RBD_PROBE_MS      1000
#define RBD_LOCK_WAIT_S   60 /* at open: longest wait for a crashed client's lock */
#define RBD_RELOCK_WAIT_S 15 /* lost without a blocklist: how long to try to take it again */
#define RBD_WRITE_RETRIES 3  /* a write refused for the lock: resubmitted after it is ours */

/* Per-request state, kept in io->priv (this backend is always the bottom of its stack). */
struct rbd_io {
	struct hl_origin *origin;
	struct hl_reactor *reactor;
	rbd_completion_t completion;
	void *bounce; /* compare-and-write: flat copy of compare + write data */
	ssize_t result;
	unsigned retries; /* times refused for the exclusive lock and resubmitted */
	unsigned gen;     /* rbd_origin.gen at submit */
};

_Static_assert(sizeof(struct rbd_io) <= sizeof(((struct hl_origin_io *)0)->priv),
               "rbd_io must fit in hl_origin_io.priv");

static struct rbd_origin *ro_of(struct hl_origin *o)
{
	return hl_origin_priv(o);
}

static struct rbd_io *rio_of(struct hl_origin_io *io)
{
	return (struct rbd_io *)io->priv;
}

/* Several gateways: keep the connection from being replaced (a lone gateway never replaces it). */
static void handles_read(struct rbd_origin *r)
{
	if (r->gateway)
		pthread_rwlock_rdlock(&r->handles);
}

static void handles_done(struct rbd_origin *r)
{
	if (r->gateway)
		pthread_rwlock_unlock(&r->handles);
}

/* Parse "POOL/IMAGE[@SNAP]". */
int origin_rbd_parse(const char *target, char *pool, size_t pool_len, char *image, size_t image_len,
                     char *snap, size_t snap_len)
{
	const char *slash = strchr(target, '/');
	const char *at;

	if (!slash || slash == target || !slash[1] || strchr(slash + 1, '/'))
		return -EINVAL;
	if ((size_t)(slash - target) >= pool_len)
		return -ENAMETOOLONG;
	memcpy(pool, target, (size_t)(slash - target));
	pool[slash - target] = '\0';
	at = strchr(slash + 1, '@');
	size_t ilen = at ? (size_t)(at - slash - 1) : strlen(slash + 1);
	if (ilen == 0 || (at && !at[1]))
		return -EINVAL;
	if (ilen >= image_len || (at && strlen(at + 1) >= snap_len))
		return -ENAMETOOLONG;
	memcpy(image, slash + 1, ilen);
	image[ilen] = '\0';
	if (at)
		strcpy(snap, at + 1);
	else
		snap[0] = '\0';
	return 0;
}

static void rbd_disconnect(rados_t cluster, rados_ioctx_t ioctx, rbd_image_t image)
{
	if (image)
		rbd_close(image);
	if (ioctx)
		rados_ioctx_destroy(ioctx);
	if (cluster)
		rados_shutdown(cluster);
}

static void rbd_close_all(struct rbd_origin *r)
{
	/* no new watch callback, then no queued check or event runs any more */
	if (r->watching)
		rbd_update_unwatch(r->image, r->watch_handle);
	r->watching = false;
	if (r->svc) {
		hl_reactor_stop(r->svc); /* joined: its timer heap is ours to touch now */
		hl_timer_stop(&r->probe);
		hl_reactor_destroy(r->svc);
		r->svc = NULL;
	}
	rbd_disconnect(r->cluster, r->ioctx, r->image);
	r->image = NULL;
	r->ioctx = NULL;
	r->cluster = NULL;
	free(r->conf);
	free(r->id);
	r->conf = r->id = NULL;
	if (r->handles_init)
		pthread_rwlock_destroy(&r->handles);
	r->handles_init = false;
}

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
static void rbd_fence(struct hl_origin *o, int why, unsigned gen)
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
static int rbd_lock_take(struct rbd_origin *r, int wait_s, bool retry_errors,
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
static bool rbd_fence_probe(struct hl_origin *o)
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
		 * Only `rbd lock break` (which blocklists us too) takes it from us in
		 * exclusive mode. Not owning it without being blocklisted happens
		 * after a restart that followed a crash: the dead gateway's lock is
		 * broken when its watch times out, and ours with it. Nobody else
		 * can have written the image then (they would have had to blocklist
		 * us), so taking the lock again is safe; failing that, we are fenced.
		 */
		if (rbd_is_exclusive_lock_owner(r->image, &owner) == 0 && !owner) {
			/*
			 * The lock moves in steps (the dead client's watch expires,
			 * its lock is broken, ours goes with it): keep asking for a
			 * while, as open does, before calling it lost. Only a
			 * blocklist (-ESHUTDOWN) ends this at once.
			 */
			int lrc = rbd_lock_take(r, RBD_RELOCK_WAIT_S, true, NULL);
			if (lrc == 0) {
				HL_WARN(RBD_LOG,
				        "%s: exclusive lock lost without a blocklist (a crashed "
				        "gateway's lock was broken); taken again",
				        o->uri);
				return false;
			}
			rbd_fence(o, lrc == -ESHUTDOWN ? lrc : -EROFS, 0);
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
		rbd_fence(o, rc, gen);
		return true;
	}
	return false;
}

static void rbd_probe_fire(struct hl_timer *t)
{
	struct hl_origin *o = t->arg;
	struct rbd_origin *r = ro_of(o);

	/* several gateways: a fenced client reconnects, the probe goes on */
	if (!rbd_fence_probe(o) || r->gateway)
		hl_timer_start(r->svc, &r->probe, RBD_PROBE_MS);
}

/* On the service thread: a probe right now (an I/O saw the lock missing). */
static void rbd_probe_now(void *arg)
{
	rbd_fence_probe(arg);
}

static int origin_rbd_submit(struct hl_origin *o, struct hl_origin_io *io);

/* On the submitting reactor: the write again, the lock being ours (or fenced: it fails). */
static void rbd_resubmit(void *arg)
{
	struct hl_origin_io *io = arg;
	struct rbd_io *rio = rio_of(io);
	unsigned retries = rio->retries;
	int rc = origin_rbd_submit(rio->origin, io);

	if (rc)
		io->cb(io, rc == -ESHUTDOWN ? rc : -EIO);
	else
		rio_of(io)->retries = retries;
}

/*
 * On the service thread: a write was refused because we did not own the
 * exclusive lock. Probe (which takes the lock again unless we are fenced),
 * then send the write back to its reactor to go out again: it never reached
 * the image, and the initiator should not see a lock hand-over that ends
 * with the lock ours.
 */
static void rbd_probe_and_resubmit(void *arg)
{
	struct hl_origin_io *io = arg;
	struct rbd_io *rio = rio_of(io);

	rbd_fence_probe(rio->origin);
	while (hl_reactor_call(rio->reactor, rbd_resubmit, io) < 0) {
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
}

static void rbd_probe_start(void *arg)
{
	struct hl_origin *o = arg;
	struct rbd_origin *r = ro_of(o);

	hl_timer_init(&r->probe, rbd_probe_fire, o);
	hl_timer_start(r->svc, &r->probe, RBD_PROBE_MS);
}

/* On the service thread: the header changed (or the watch failed); maybe the size did. */
static void rbd_size_check(void *arg)
{
	struct hl_origin *o = arg;
	struct rbd_origin *r = ro_of(o);
	uint64_t size;
	unsigned gen;
	int rc;

	atomic_store(&r->check_queued, false); /* a change from now on queues another check */
	if (rbd_fence_probe(o))
		return;
	handles_read(r);
	gen = atomic_load(&r->gen);
	rc = rbd_get_size(r->image, &size);
	handles_done(r);
	if (rc == -ESHUTDOWN) {
		rbd_fence(o, rc, gen);
		return;
	}
	if (rc < 0) {
		HL_WARN(RBD_LOG, "%s: cannot read the image size after a header change: %s", o->uri,
		        strerror(-rc));
		return;
	}
	uint64_t old = __atomic_load_n(&o->size, __ATOMIC_ACQUIRE);
	if (size != old) {
		HL_NOTICE(RBD_LOG, "%s: image resized: %llu -> %llu bytes", o->uri,
		          (unsigned long long)old, (unsigned long long)size);
		hl_origin_notify(o, HL_ORIGIN_RESIZED, size);
	}
}

/* On a librbd thread: only queue the check (never call librbd back from here). */
static void rbd_watch_cb(void *arg)
{
	struct hl_origin *o = arg;
	struct rbd_origin *r = ro_of(o);

	if (atomic_exchange(&r->check_queued, true))
		return;
	if (hl_reactor_call(r->svc, rbd_size_check, o) < 0) {
		atomic_store(&r->check_queued, false);
		HL_ERR_RL(RBD_LOG, "%s: out of memory: an image header change is not checked",
		          o->uri);
	}
}

static int rbd_watch_start(struct hl_origin *o, struct rbd_origin *r)
{
	int rc = hl_reactor_create(&r->svc, "rbd-watch");

	if (rc)
		return rc;
	rc = hl_reactor_start(r->svc);
	if (rc) {
		hl_reactor_destroy(r->svc);
		r->svc = NULL;
		return rc;
	}
	rc = rbd_update_watch(r->image, &r->watch_handle, rbd_watch_cb, o);
	if (rc < 0)
		return rc;
	r->watching = true;
	return hl_reactor_call(r->svc, rbd_probe_start, o);
}

/*
 * librados waits for ever by default when the cluster does not answer; a
 * gateway must answer its initiators (and be able to stop). Unless ceph.conf
 * says otherwise, ops fail with -ETIMEDOUT after RBD_OP_TIMEOUT, as on a
 * ceph-iscsi gateway and like the iscsi origin's timeout.
 */
#define RBD_OP_TIMEOUT "30"

static void conf_default(rados_t cluster, const char *key, const char *value)
{
	char cur[64];

	if (rados_conf_get(cluster, key, cur, sizeof(cur)) == 0 && strtod(cur, NULL) == 0)
		rados_conf_set(cluster, key, value);
}

/*
 * A client of our own (r->conf, r->id) and the image opened through it:
 * the three handles, or nothing on failure. `target` names the disk in errors.
 */
static int rbd_connect(struct rbd_origin *r, const char *target, bool read_only, rados_t *cluster,
                       rados_ioctx_t *ioctx, rbd_image_t *image)
{
	rados_t c = NULL;
	rados_ioctx_t io = NULL;
	rbd_image_t img = NULL;
	int rc;

	rc = rados_create(&c, r->id);
	if (rc < 0) {
		c = NULL;
		goto fail;
	}
	rc = rados_conf_read_file(c, r->conf);
	if (rc < 0) {
		HL_ERR(RBD_LOG, "rbd:%s: cannot read %s: %s", target, r->conf, strerror(-rc));
		goto fail;
	}
	/* Writes must be on the OSDs when they complete: no client-side write-back cache. */
	rados_conf_set(c, "rbd_cache", "false");
	conf_default(c, "rados_osd_op_timeout", RBD_OP_TIMEOUT);
	conf_default(c, "rados_mon_op_timeout", RBD_OP_TIMEOUT);
	/* several gateways: a takeover fences the old owner (librbd's default, made sure) */
	if (r->gateway)
		rados_conf_set(c, "rbd_blocklist_on_break_lock", "true");
	rc = rados_connect(c);
	if (rc < 0) {
		HL_ERR(RBD_LOG, "rbd:%s: cannot connect to the cluster (%s): %s", target, r->conf,
		       strerror(-rc));
		goto fail;
	}
	rc = rados_ioctx_create(c, r->pool, &io);
	if (rc < 0) {
		HL_ERR(RBD_LOG, "rbd:%s: pool %s: %s", target, r->pool, strerror(-rc));
		io = NULL;
		goto fail;
	}
	if (r->snap[0] || read_only)
		rc = rbd_open_read_only(io, r->name, &img, r->snap[0] ? r->snap : NULL);
	else
		rc = rbd_open(io, r->name, &img, NULL);
	if (rc < 0) {
		HL_ERR(RBD_LOG, "rbd:%s: image %s%s%s: %s", target, r->name, r->snap[0] ? "@" : "",
		       r->snap, strerror(-rc));
		img = NULL;
		goto fail;
	}
	*cluster = c;
	*ioctx = io;
	*image = img;
	return 0;
fail:
	rbd_disconnect(c, io, img);
	return rc < 0 ? rc : -EIO;
}

static int origin_rbd_open(struct hl_origin *o, const char *target,
                           const struct hl_origin_opts *opts)
{
	struct rbd_origin *r = ro_of(o);
	const char *conf =
	    opts->rbd_conf && opts->rbd_conf[0] ? opts->rbd_conf : "/etc/ceph/ceph.conf";
	uint64_t size;
	int rc;

	rc = origin_rbd_parse(target, r->pool, sizeof(r->pool), r->name, sizeof(r->name), r->snap,
	                      sizeof(r->snap));
	if (rc) {
		HL_ERR(RBD_LOG, "rbd:%s: expected rbd:POOL/IMAGE[@SNAP]", target);
		return rc;
	}
	r->gateway = opts->gateway;
	if (r->gateway) {
		rc = -pthread_rwlock_init(&r->handles, NULL);
		if (rc)
			return rc;
		r->handles_init = true;
	}
	r->conf = strdup(conf);
	r->id = opts->rbd_id && opts->rbd_id[0] ? strdup(opts->rbd_id) : NULL;
	if (!r->conf || (opts->rbd_id && opts->rbd_id[0] && !r->id)) {
		rc = -ENOMEM;
		goto fail;
	}
	rc = rbd_connect(r, target, opts->read_only, &r->cluster, &r->ioctx, &r->image);
	if (rc < 0)
		goto fail;
	rc = rbd_get_size(r->image, &size);
	if (rc < 0)
		goto fail;
	if (!r->snap[0] && !opts->read_only && !r->gateway) {
		/*
		 * Hold the image's exclusive lock for as long as it is open, with
		 * lock transitions off: librbd would otherwise hand the lock to any
		 * other client that asks, and that client's writes would never reach
		 * the cache, which would then serve old blocks. Others can still
		 * read, snapshot and resize it (librbd forwards those to the owner).
		 * After a crash the dead gateway may still hold it until its watch
		 * times out (30 s by default): serving before the lock is ours would
		 * fail writes with EROFS, so wait (at most RBD_LOCK_WAIT_S).
		 */
		rc = rbd_lock_take(r, RBD_LOCK_WAIT_S, false, target);
		if (rc == 0) {
			r->locked = true;
		} else if (rc == -EINVAL || rc == -EOPNOTSUPP) {
			HL_WARN(
			    RBD_LOG,
			    "rbd:%s: the image has no exclusive-lock feature: other clients may "
			    "write it behind this gateway (and its cache)",
			    target);
		} else {
			HL_ERR(RBD_LOG, "rbd:%s: cannot take the image's exclusive lock: %s%s",
			       target, strerror(-rc),
			       rc == -EROFS
			           ? " (another client holds it: a writable rbd disk needs "
			             "the image to itself)"
			           : "");
			goto fail;
		}
	}
	/*
	 * The URI names the image by its id too. A cache keeps a disk's blocks
	 * across restarts only while its origin's URI and size are unchanged, so
	 * an image deleted and made again (rbd import) is a new origin and its old
	 * blocks are dropped. Writes by other clients into the same image while
	 * hotlund is stopped are found through the proofs below.
	 */
	char *uri;
	if (rbd_get_id(r->image, r->image_id, sizeof(r->image_id)) != 0)
		r->image_id[0] = '\0';
	if (r->image_id[0] && asprintf(&uri, "rbd:%s/%s%s%s#id=%s", r->pool, r->name,
	                               r->snap[0] ? "@" : "", r->snap, r->image_id) >= 0) {
		free(o->uri);
		o->uri = uri;
	}
	o->size = size;
	o->read_only = r->snap[0] || opts->read_only;
	o->can_discard = !o->read_only;
	o->zeroes_after_discard = true; /* librbd discards read back as zeroes */
	o->phys_block_size = 4096;
	rc = rbd_watch_start(o, r);
	if (rc < 0) {
		HL_ERR(RBD_LOG, "rbd:%s: cannot watch the image for resizes: %s", target,
		       strerror(-rc));
		goto fail;
	}
	return 0;
fail:
	rbd_close_all(r);
	return rc < 0 ? rc : -EIO;
}

static void origin_rbd_close(struct hl_origin *o)
{
	rbd_close_all(ro_of(o));
}

/* On the submitting reactor. */
static void rbd_finish(void *arg)
{
	struct hl_origin_io *io = arg;
	struct rbd_io *rio = rio_of(io);
	ssize_t res = rio->result;
	int result = res < 0 ? (int)res : 0;

	if (result == -ESHUTDOWN) {
		rbd_fence(rio->origin, result, rio->gen);
	} else if (result == -EROFS && !rio->origin->read_only && ro_of(rio->origin)->gateway) {
		/*
		 * Several gateways: the lock is not ours (any more). Never taken
		 * back from here (the ownership module decides, and learns it at
		 * its next renew); the write did not reach the image.
		 */
		result = -ESHUTDOWN;
	} else if (result == -EROFS && !rio->origin->read_only) {
		/*
		 * A writable image refused a write: we do not own its exclusive lock
		 * right now. The probe decides, on the service thread: taken again
		 * (a crashed gateway's lock was broken) or fenced. The write did not
		 * reach the image: a plain write, discard or write-zeroes goes out
		 * again once the probe is done (a few times at most); anything else
		 * fails (the cache drops the range).
		 */
		bool again = (io->op == HL_IO_WRITE || io->op == HL_IO_DISCARD ||
		              io->op == HL_IO_WRITE_ZEROES) &&
		             rio->retries < RBD_WRITE_RETRIES;
		if (again) {
			rio->retries++;
			free(rio->bounce);
			rio->bounce = NULL;
			if (hl_reactor_call(ro_of(rio->origin)->svc, rbd_probe_and_resubmit, io) ==
			    0)
				return;
			rbd_fence(rio->origin, result, 0);
		} else if (hl_reactor_call(ro_of(rio->origin)->svc, rbd_probe_now, rio->origin) <
		           0) {
			rbd_fence(rio->origin, result, 0);
		}
		result = -EIO;
	}
	/*
	 * librbd clips I/O at the image's end: a read that an image shrink
	 * overtook returns fewer bytes (the rest of the buffer was never
	 * filled), never GOOD with garbage. (A clipped write reports success:
	 * what it dropped lies past the new end, as if the shrink came after.)
	 */
	if (result == 0 && io->op == HL_IO_READ && res != (ssize_t)io->length) {
		HL_WARN_RL(RBD_LOG, "%s: read at %llu: %zd of %llu bytes (image shrunk meanwhile)",
		           rio->origin->uri, (unsigned long long)io->offset, res,
		           (unsigned long long)io->length);
		result = -EIO;
	}

	/* a miscompare arrives as -EILSEQ, with io->miscompare_offset set by librbd */
	free(rio->bounce);
	rio->bounce = NULL;
	io->cb(io, result);
}

/* On a librbd thread: record, release, hand back. */
static void rbd_complete(rbd_completion_t c, void *arg)
{
	struct hl_origin_io *io = arg;
	struct rbd_io *rio = rio_of(io);

	rio->result = rbd_aio_get_return_value(c);
	rbd_aio_release(c);
	/* The call queue can only fail for lack of memory: keep trying, never lose a completion. */
	while (hl_reactor_call(rio->reactor, rbd_finish, io) < 0) {
		HL_ERR_RL(RBD_LOG, "out of memory handing back an RBD completion; retrying");
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
}

/* COMPARE AND WRITE: iov holds length bytes to compare, then length to write; librbd wants flat
 * buffers. */
static int rbd_submit_caw(struct hl_origin *o, struct rbd_origin *r, struct hl_origin_io *io,
                          struct rbd_io *rio)
{
	size_t total = 0, off = 0;

	for (int i = 0; i < io->iovcnt; i++)
		total += io->iov[i].iov_len;
	if (total != 2 * io->length || io->offset > o->size || io->length > o->size - io->offset)
		return -EINVAL;
	rio->bounce = malloc(total);
	if (!rio->bounce)
		return -ENOMEM;
	for (int i = 0; i < io->iovcnt; i++) {
		memcpy((char *)rio->bounce + off, io->iov[i].iov_base, io->iov[i].iov_len);
		off += io->iov[i].iov_len;
	}
	return (int)rbd_aio_compare_and_write(r->image, io->offset, io->length, rio->bounce,
	                                      (char *)rio->bounce + io->length, rio->completion,
	                                      &io->miscompare_offset, 0);
}

static int origin_rbd_submit(struct hl_origin *o, struct hl_origin_io *io)
{
	struct rbd_origin *r = ro_of(o);
	struct rbd_io *rio = rio_of(io);
	int rc;

	if (io->op != HL_IO_COMPARE_AND_WRITE) {
		rc = origin_io_check(o, io);
		if (rc)
			return rc;
	} else if (o->read_only) {
		return -EROFS;
	}
	if (atomic_load(&r->fenced))
		return -ESHUTDOWN;
	memset(rio, 0, sizeof(*rio));
	rio->origin = o;
	rio->reactor = hl_reactor_current();
	if (!rio->reactor)
		return -EINVAL;
	rc = rbd_aio_create_completion(io, rbd_complete, &rio->completion);
	if (rc < 0)
		return rc;

	handles_read(r);
	rio->gen = atomic_load(&r->gen);
	if (r->gateway &&
	    (atomic_load(&r->fenced) || (io->op != HL_IO_READ && !atomic_load(&r->owned))))
		rc = -ESHUTDOWN;                    /* not ours: only a standby's reads pass */
	else if (io->op == HL_IO_COMPARE_AND_WRITE) /* outside the enum: see origin.h */
		rc = rbd_submit_caw(o, r, io, rio);
	else
		switch (io->op) {
		case HL_IO_READ:
			rc = rbd_aio_readv(r->image, io->iov, io->iovcnt, io->offset,
			                   rio->completion);
			break;
		case HL_IO_WRITE:
			rc = rbd_aio_writev(r->image, io->iov, io->iovcnt, io->offset,
			                    rio->completion);
			break;
		case HL_IO_FLUSH:
			rc = rbd_aio_flush(r->image, rio->completion);
			break;
		case HL_IO_DISCARD:
			rc = rbd_aio_discard(r->image, io->offset, io->length, rio->completion);
			break;
		case HL_IO_WRITE_ZEROES:
			rc = rbd_aio_write_zeroes(r->image, io->offset, io->length, rio->completion,
			                          0, 0);
			break;
		default:
			rc = -EOPNOTSUPP;
		}
	handles_done(r);
	if (rc < 0) {
		rbd_aio_release(rio->completion);
		free(rio->bounce);
		rio->bounce = NULL;
		return rc;
	}
	return 0;
}

/* ---- warm restart proofs ---- */

/*
 * An image proves what changed since a moment by a snapshot taken then (a
 * "mark"): rbd_diff_iterate2 from the mark to the image's head lists every
 * extent written since, by anyone (this gateway included), fast with the
 * object-map and fast-diff features. A cache keeps the blocks outside those
 * extents. Marks are named hotlun-TAG-NS (TAG: the cache and disk, NS: the
 * time it was taken), made at most once per run while running (the first
 * proof after attach, so that a crash later on is warm for what did not
 * change) and at every clean detach; a mark is removed only once the cache
 * recorded a newer one durably (proof_release). A mark costs copy-on-write
 * of each object on its first write after it. Proof: rbd:IMAGEID:SNAPID:NAME.
 *
 * An image opened at a snapshot (@SNAP) never changes while that snapshot
 * exists: its proof names the snapshot's id (rbdsnap:IMAGEID:SNAPID).
 */

#define MARK_PREFIX "hotlun-"

/* The id of snapshot `name`, or -ENOENT. */
static int snap_id_of(rbd_image_t image, const char *name, uint64_t *id)
{
	rbd_snap_info_t *snaps = NULL;
	int max = 16, n, rc = -ENOENT;

	for (;;) {
		snaps = calloc((size_t)max, sizeof(*snaps));
		if (!snaps)
			return -ENOMEM;
		n = rbd_snap_list(image, snaps, &max);
		if (n != -ERANGE)
			break;
		free(snaps);
	}
	if (n < 0) {
		free(snaps);
		return n;
	}
	for (int i = 0; i < n; i++) {
		if (!strcmp(snaps[i].name, name)) {
			*id = snaps[i].id;
			rc = 0;
		}
	}
	rbd_snap_list_end(snaps);
	free(snaps);
	return rc;
}

static int proof_take(struct hl_origin *o, const char *tag, bool final, char *proof, size_t len)
{
	struct rbd_origin *r = ro_of(o);
	char name[160];
	struct timespec now;
	uint64_t id;
	int rc, n;

	if (!r->image_id[0])
		return -EOPNOTSUPP;
	if (r->snap[0]) {
		if (snap_id_of(r->image, r->snap, &id))
			return -EAGAIN;
		n = snprintf(proof, len, "rbdsnap:%s:%llu", r->image_id, (unsigned long long)id);
		return n >= 0 && (size_t)n < len ? 0 : -EOPNOTSUPP;
	}
	if (o->read_only)
		return -EOPNOTSUPP; /* cannot make marks */
	if (atomic_load(&r->fenced))
		return -EAGAIN; /* someone else may own the image now */
	if (!final && r->mark_proof[0]) {
		snprintf(proof, len, "%s", r->mark_proof);
		return 0;
	}
	clock_gettime(CLOCK_REALTIME, &now);
	snprintf(name, sizeof(name), MARK_PREFIX "%s-%lld%09ld", tag, (long long)now.tv_sec,
	         now.tv_nsec);
	rc = rbd_snap_create(r->image, name);
	if (rc < 0) {
		HL_WARN(RBD_LOG, "%s: cannot make the mark snapshot %s: %s", o->uri, name,
		        strerror(-rc));
		return -EAGAIN;
	}
	if (snap_id_of(r->image, name, &id))
		return -EAGAIN;
	if (snprintf(r->mark_proof, sizeof(r->mark_proof), "rbd:%s:%llu:%s", r->image_id,
	             (unsigned long long)id, name) >= (int)sizeof(r->mark_proof) ||
	    (size_t)snprintf(proof, len, "%s", r->mark_proof) >= len) {
		r->mark_proof[0] = '\0';
		rbd_snap_remove(r->image, name);
		return -EOPNOTSUPP;
	}
	HL_DEBUG(RBD_LOG, "%s: mark snapshot %s", o->uri, name);
	return 0;
}

struct diff_arg {
	hl_origin_changed_fn changed;
	void *arg;
	uint64_t extents, bytes;
};

static int diff_cb(uint64_t off, size_t len, int exists, void *arg)
{
	struct diff_arg *d = arg;

	(void)exists; /* written or discarded since the mark: changed either way */
	d->changed(d->arg, off, len);
	d->extents++;
	d->bytes += len;
	return 0;
}

/* Whole objects changed since a mark (the fast pass), to be narrowed down. */
struct obj_list {
	struct {
		uint64_t off, len;
	} *v;
	size_t n, cap;
	bool nomem;
};

static int obj_cb(uint64_t off, size_t len, int exists, void *arg)
{
	struct obj_list *l = arg;

	(void)exists;
	if (l->nomem)
		return 0;
	if (l->n && l->v[l->n - 1].off + l->v[l->n - 1].len == off) {
		l->v[l->n - 1].len += len;
		return 0;
	}
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 64;
		void *v = realloc(l->v, cap * sizeof(*l->v));
		if (!v) {
			l->nomem = true;
			return 0;
		}
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n].off = off;
	l->v[l->n].len = len;
	l->n++;
	return 0;
}

/*
 * At most this many bytes of changed objects are narrowed down to the exact
 * extents written (one listing per object at the OSD); beyond it the rest is
 * reported as whole objects. A failback after 1% of an image was rewritten
 * in small writes touches about half of its 4 MiB objects: whole objects
 * would drop half the cache, exact extents drop the 1%.
 */
#define RBD_EXACT_DIFF_MAX (64ull << 30)

/*
 * What changed since mark `name`: first whole objects (fast with the
 * object-map and fast-diff features), then, object by object, the exact
 * extents inside them.
 */
static int diff_since(rbd_image_t image, const char *name, uint64_t size, struct diff_arg *d)
{
	struct obj_list objs = {0};
	uint64_t exact = 0;
	int rc = rbd_diff_iterate2(image, name, 0, size, 1, 1, obj_cb, &objs);

	if (rc >= 0 && objs.nomem)
		rc = rbd_diff_iterate2(image, name, 0, size, 1, 1, diff_cb, d); /* whole, unsorted */
	else if (rc >= 0) {
		for (size_t i = 0; i < objs.n; i++) {
			struct diff_arg one = *d;
			int erc = -ERANGE;

			one.extents = one.bytes = 0;
			if (exact + objs.v[i].len <= RBD_EXACT_DIFF_MAX)
				erc = rbd_diff_iterate2(image, name, objs.v[i].off, objs.v[i].len, 1, 0,
				                        diff_cb, &one);
			exact += objs.v[i].len;
			if (erc < 0) {
				/* not narrowed down (or failed half way): the whole objects */
				diff_cb(objs.v[i].off, objs.v[i].len, 1, d);
				continue;
			}
			d->extents += one.extents;
			d->bytes += one.bytes;
		}
	}
	free(objs.v);
	return rc;
}

static int proof_check(struct hl_origin *o, const char *tag, const char *proof,
                       hl_origin_changed_fn changed, void *arg, char *why, size_t whylen)
{
	struct rbd_origin *r = ro_of(o);
	char img[128], name[160];
	unsigned long long want;
	uint64_t id, size;
	int n = -1, rc;

	(void)tag;
	if (r->snap[0]) {
		if (sscanf(proof, "rbdsnap:%127[^:]:%llu%n", img, &want, &n) != 2 || proof[n]) {
			snprintf(why, whylen, "not an rbd snapshot proof");
			return -ESTALE;
		}
		if (strcmp(img, r->image_id)) {
			snprintf(why, whylen, "rbd image replaced");
			return -ESTALE;
		}
		if (snap_id_of(r->image, r->snap, &id) || id != want) {
			snprintf(why, whylen, "rbd snapshot replaced");
			return -ESTALE;
		}
		snprintf(why, whylen, "rbd snapshot unchanged");
		return 0;
	}
	if (sscanf(proof, "rbd:%127[^:]:%llu:%159s%n", img, &want, name, &n) != 3 || proof[n] ||
	    strncmp(name, MARK_PREFIX, strlen(MARK_PREFIX))) {
		snprintf(why, whylen, "not an rbd proof");
		return -ESTALE;
	}
	if (strcmp(img, r->image_id)) {
		snprintf(why, whylen, "rbd image replaced");
		return -ESTALE;
	}
	rc = snap_id_of(r->image, name, &id);
	if (rc || id != want) {
		snprintf(why, whylen, "rbd mark snapshot %s", rc == -ENOENT ? "gone" : "replaced");
		return -ESTALE;
	}
	rc = rbd_get_size(r->image, &size);
	if (rc >= 0) {
		struct diff_arg d = {.changed = changed, .arg = arg};
		rc = diff_since(r->image, name, size, &d);
		if (rc >= 0) {
			snprintf(why, whylen, "rbd diff since the mark: %llu extent(s), %llu MiB",
			         (unsigned long long)d.extents,
			         (unsigned long long)(d.bytes >> 20));
			return 0;
		}
	}
	snprintf(why, whylen, "rbd diff failed: %s", strerror(-rc));
	return -ESTALE;
}

static void proof_release(struct hl_origin *o, const char *tag, const char *proof)
{
	struct rbd_origin *r = ro_of(o);
	char prefix[128], keep[160] = "";
	rbd_snap_info_t *snaps = NULL;
	unsigned long long id;
	char img[128];
	int max = 16, n;

	if (r->snap[0] || o->read_only)
		return;
	if (sscanf(proof, "rbd:%127[^:]:%llu:%159s", img, &id, keep) != 3)
		return;
	snprintf(prefix, sizeof(prefix), MARK_PREFIX "%s-", tag);
	for (;;) {
		snaps = calloc((size_t)max, sizeof(*snaps));
		if (!snaps)
			return;
		n = rbd_snap_list(r->image, snaps, &max);
		if (n != -ERANGE)
			break;
		free(snaps);
	}
	for (int i = 0; i < n; i++) {
		if (strncmp(snaps[i].name, prefix, strlen(prefix)) || !strcmp(snaps[i].name, keep))
			continue;
		int rc = rbd_snap_remove(r->image, snaps[i].name);
		if (rc < 0)
			HL_WARN(RBD_LOG, "%s: cannot remove the old mark snapshot %s: %s", o->uri,
			        snaps[i].name, strerror(-rc));
	}
	if (n >= 0)
		rbd_snap_list_end(snaps);
	free(snaps);
}

/*
 * Several gateways: the proofs use the connection of the moment. A mark
 * is a snapshot, which needs the lock: only the owner takes one, and only
 * the owner removes old ones (a standby's librbd would ask the owner to).
 * Checking a proof only reads, so a standby can (before it serves).
 */
static int rbd_proof_take(struct hl_origin *o, const char *tag, bool final, char *proof, size_t len)
{
	struct rbd_origin *r = ro_of(o);
	int rc;

	if (r->gateway && !r->snap[0] && !o->read_only && !atomic_load(&r->owned))
		return -EAGAIN;
	handles_read(r);
	rc = proof_take(o, tag, final, proof, len);
	handles_done(r);
	return rc;
}

static int rbd_proof_check(struct hl_origin *o, const char *tag, const char *proof,
                           hl_origin_changed_fn changed, void *arg, char *why, size_t whylen)
{
	struct rbd_origin *r = ro_of(o);
	int rc;

	handles_read(r);
	rc = proof_check(o, tag, proof, changed, arg, why, whylen);
	handles_done(r);
	return rc;
}

static void rbd_proof_release(struct hl_origin *o, const char *tag, const char *proof)
{
	struct rbd_origin *r = ro_of(o);

	if (r->gateway && !atomic_load(&r->owned))
		return; /* the next release as owner removes them */
	handles_read(r);
	proof_release(o, tag, proof);
	handles_done(r);
}

/* ---- identity ---- */

/*
 * The cluster's fsid, the pool's id and the image's id (and the snapshot):
 * what every gateway of this image reads alike, and what a new image of the
 * same name (rbd rm + create) does not share.
 */
static int rbd_identity(struct hl_origin *o, char *buf, size_t len)
{
	struct rbd_origin *r = ro_of(o);
	char fsid[64];
	int n;

	handles_read(r);
	if (!r->image_id[0] || rados_cluster_fsid(r->cluster, fsid, sizeof(fsid)) < 0) {
		handles_done(r);
		return -EOPNOTSUPP;
	}
	n = snprintf(buf, len, "rbd:%s:%lld:%s%s%s", fsid, (long long)rados_ioctx_get_id(r->ioctx),
	             r->image_id, r->snap[0] ? "@" : "", r->snap);
	handles_done(r);
	return n < 0 || (size_t)n >= len ? -EOPNOTSUPP : 0;
}

/* ---- ownership among gateways (origin.h, hotlun/owner.h) ---- */

/*
 * The cluster decides who owns the image: the exclusive lock. Around it,
 * a record every gateway can read, object hotlun_owner.IMAGEID in the
 * image's pool, one line
 *
 *   owner=G epoch=E beat=N state=owned|released done=S addr=A
 *
 * written only by the lock's holder (at acquire, at every renew, at
 * release): G its gateway id, E its epoch, N a heartbeat that goes on
 * counting across owners, S the last hand-over request it dealt with, A
 * its client's address as the lock shows it. A blocklisted client's write
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

struct own_record {
	uint16_t owner;
	uint64_t epoch, beat, done;
	bool released;
	char addr[128];
};

static void own_oid(const struct rbd_origin *r, const char *prefix, char *oid, size_t len)
{
	snprintf(oid, len, "%s%s", prefix, r->image_id);
}

/* Under handles. A missing record reads as "nobody, ever". @return 0 or -errno. */
static int record_read(struct rbd_origin *r, struct own_record *rec)
{
	char oid[160], buf[384], state[16];
	unsigned owner;
	unsigned long long epoch, beat, done;
	int rc;

	memset(rec, 0, sizeof(*rec));
	own_oid(r, OWN_RECORD, oid, sizeof(oid));
	rc = rados_read(r->ioctx, oid, buf, sizeof(buf) - 1, 0);
	if (rc == -ENOENT)
		return 0;
	if (rc < 0)
		return rc;
	buf[rc] = '\0';
	if (sscanf(buf, "owner=%u epoch=%llu beat=%llu state=%15s done=%llu addr=%127s", &owner,
	           &epoch, &beat, state, &done, rec->addr) != 6 ||
	    owner > UINT16_MAX || (strcmp(state, "owned") && strcmp(state, "released")))
		return -EBADMSG;
	rec->owner = (uint16_t)owner;
	rec->epoch = epoch;
	rec->beat = beat;
	rec->done = done;
	rec->released = !strcmp(state, "released");
	return 0;
}

/* Under handles, holding the lock. */
static int record_write(struct rbd_origin *r, const struct own_record *rec)
{
	char oid[160], buf[384];
	int n;

	own_oid(r, OWN_RECORD, oid, sizeof(oid));
	n = snprintf(buf, sizeof(buf), "owner=%u epoch=%llu beat=%llu state=%s done=%llu addr=%s\n",
	             rec->owner, (unsigned long long)rec->epoch, (unsigned long long)rec->beat,
	             rec->released ? "released" : "owned", (unsigned long long)rec->done,
	             rec->addr[0] ? rec->addr : "-");
	return rados_write_full(r->ioctx, oid, buf, (size_t)n);
}

/* Under handles: the newest hand-over request (seq 0: none ever). */
static int request_read(struct rbd_origin *r, uint16_t *gw, uint64_t *seq)
{
	char oid[160], buf[128];
	unsigned g;
	unsigned long long n;
	int rc;

	*gw = 0;
	*seq = 0;
	own_oid(r, OWN_REQUEST, oid, sizeof(oid));
	rc = rados_read(r->ioctx, oid, buf, sizeof(buf) - 1, 0);
	if (rc == -ENOENT)
		return 0;
	if (rc < 0)
		return rc;
	buf[rc] = '\0';
	if (sscanf(buf, "gw=%u seq=%llu", &g, &n) != 2 || g > UINT16_MAX)
		return -EBADMSG;
	*gw = (uint16_t)g;
	*seq = n;
	return 0;
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

	rc = rbd_connect(r, r->name, false, &c, &io, &img);
	if (rc < 0)
		return rc;
	rc = rbd_update_watch(img, &wh, rbd_watch_cb, o);
	if (rc < 0) {
		rbd_disconnect(c, io, img);
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
	rbd_disconnect(old_c, old_io, old_img);
	HL_NOTICE(RBD_LOG, "%s: reconnected to the cluster with a new client, as a standby",
	          o->uri);
	rbd_watch_cb(o); /* the size may have changed while the old client could not ask */
	return 0;
}

static int reconnect_if_fenced(struct hl_origin *o)
{
	struct rbd_origin *r = ro_of(o);

	return atomic_load(&r->fenced) ? rbd_reconnect(o) : 0;
}

/*
 * Under handles. The lock is held by `holder`, and no force: a planned
 * release writes the record (state=released, addr=holder) before it
 * releases the lock, so wait a moment for that. @return 0: free now, or
 * -EBUSY.
 */
static int wait_released(struct rbd_origin *r, char *holder, size_t len)
{
	struct own_record rec;
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

/* Under handles: see rbd_own_acquire. */
static int own_acquire(struct hl_origin *o, uint16_t gw, uint64_t epoch, bool force, char *why,
                       size_t whylen)
{
	struct rbd_origin *r = ro_of(o);
	struct own_record rec;
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
		HL_NOTICE(RBD_LOG, "%s: broke the exclusive lock of %s (blocklisted)", o->uri,
		          holder);
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
	rec =
	    (struct own_record){.owner = gw, .epoch = epoch, .beat = r->beat, .done = r->done_seq};
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
static int rbd_own_acquire(struct hl_origin *o, uint16_t gw, uint64_t epoch, bool force, char *why,
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
	rc = own_acquire(o, gw, epoch, force, why, whylen);
	handles_done(r);
	if (rc == -ESHUTDOWN)
		rbd_fence(o, rc, gen);
	return rc;
}

static int rbd_own_renew(struct hl_origin *o, uint16_t gw, uint64_t epoch, struct hl_own_info *info)
{
	struct rbd_origin *r = ro_of(o);
	struct own_record rec = {.owner = gw, .epoch = epoch};
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
	rc = rbd_is_exclusive_lock_owner(r->image, &is_owner);
	if (rc == 0 && !is_owner)
		rc = -ESHUTDOWN; /* lost it: only a break takes it in exclusive mode */
	if (rc == 0) {
		rec.beat = r->beat + 1;
		rec.done = r->done_seq;
		snprintf(rec.addr, sizeof(rec.addr), "%s", r->own_addr);
		rc = record_write(r, &rec);
		if (rc == 0)
			r->beat = rec.beat;
	}
	if (rc == 0 && request_read(r, &rgw, &rseq) == 0 && rseq > r->done_seq && rgw != gw)
		info->requester = rgw;
	handles_done(r);
	if (rc == -ESHUTDOWN)
		rbd_fence(o, rc, gen);
	if (rc)
		return rc;
	info->owner = gw;
	info->epoch = epoch;
	info->beat = r->beat;
	info->has_beat = true;
	return 0;
}

static int rbd_own_release(struct hl_origin *o, uint16_t gw, uint64_t epoch)
{
	struct rbd_origin *r = ro_of(o);
	struct own_record rec = {.owner = gw, .epoch = epoch, .released = true};
	int rc = own_check(o), wrc, lrc;
	uint16_t rgw;
	uint64_t rseq;
	unsigned gen;

	if (rc)
		return rc;
	if (atomic_load(&r->fenced))
		return -ESHUTDOWN;
	if (!atomic_exchange(&r->owned, false))
		return 0; /* not ours: nothing to give */
	handles_read(r);
	gen = atomic_load(&r->gen);
	rc = rbd_flush(r->image);
	/* every request made so far is answered by this release */
	if (request_read(r, &rgw, &rseq) == 0 && rseq > r->done_seq)
		r->done_seq = rseq;
	rec.beat = ++r->beat;
	rec.done = r->done_seq;
	snprintf(rec.addr, sizeof(rec.addr), "%s", r->own_addr);
	/* the record first: a standby that reads "released" finds the lock free a moment later */
	wrc = record_write(r, &rec);
	lrc = rbd_lock_release(r->image);
	handles_done(r);
	rc = rc < 0 ? rc : wrc < 0 ? wrc : lrc;
	if (rc == -ESHUTDOWN)
		rbd_fence(o, rc, gen);
	if (rc < 0)
		HL_WARN(RBD_LOG, "%s: release: %s", o->uri, strerror(-rc));
	return rc < 0 ? rc : 0;
}

static int rbd_own_peek(struct hl_origin *o, struct hl_own_info *info)
{
	struct rbd_origin *r = ro_of(o);
	struct own_record rec;
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
		rc = record_read(r, &rec);
		handles_done(r);
		if (rc != -ESHUTDOWN || tries)
			break;
		rbd_fence(o, rc, gen); /* blocklisted: a new client, once */
	}
	if (rc)
		return rc;
	info->owner = rec.owner;
	info->epoch = rec.epoch;
	info->beat = rec.beat;
	info->has_beat = true;
	info->released = rec.released;
	return 0;
}

static int rbd_own_request(struct hl_origin *o, uint16_t gw)
{
	struct rbd_origin *r = ro_of(o);
	char oid[160], buf[64];
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
	if (rc == -EBADMSG)
		rc = 0;
	if (rc == 0) {
		own_oid(r, OWN_REQUEST, oid, sizeof(oid));
		n = snprintf(buf, sizeof(buf), "gw=%u seq=%llu\n", gw,
		             (unsigned long long)(rseq + 1));
		rc = rados_write_full(r->ioctx, oid, buf, (size_t)n);
	}
	handles_done(r);
	if (rc == -ESHUTDOWN)
		rbd_fence(o, rc, gen);
	return rc;
}

const struct hl_origin_ops origin_rbd_ops = {
    .name = "rbd",
    .scheme = "rbd:",
    .priv_size = sizeof(struct rbd_origin),
    .open = origin_rbd_open,
    .close = origin_rbd_close,
    .submit = origin_rbd_submit,
    .proof_take = rbd_proof_take,
    .proof_check = rbd_proof_check,
    .proof_release = rbd_proof_release,
    .identity = rbd_identity,
    .own_acquire = rbd_own_acquire,
    .own_renew = rbd_own_renew,
    .own_release = rbd_own_release,
    .own_peek = rbd_own_peek,
    .own_request = rbd_own_request,
};
