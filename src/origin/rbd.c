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
 * from librbd; `rbd lock break` fences this gateway (the lock and the fence:
 * rbd_own.c).
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
 * module decides through the own_* ops (rbd_own.c), which take the exclusive
 * lock (breaking a silent owner's lock blocklists that owner's client),
 * publish a heartbeat record every gateway can read, and hand the image
 * over on request. Until it is ours, only reads pass (a standby's proofs);
 * anything else fails at once with -ESHUTDOWN. A blocklisted gateway is
 * not fenced for good: it reconnects (a new client, a new address) the next
 * time it peeks, as a standby. HL_ORIGIN_FENCED is not reported then: the
 * ownership module learns it from own_renew.
 *
 * Warm restart proofs (mark snapshots, diffs) and the image's identity are
 * in rbd_proof.c; the initiators' persistent reservations that the gateways
 * share, in rbd_pr.c.
 */
#include "config.h"

#include "origin/origin_rbd.h"

#include "hotlun/event.h"
#include "hotlun/log.h"
#include "hotlun/util.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <rados/librados.h>
#include <rbd/librbd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/*
 * How often the service thread asks the cluster whether this client is
 * still welcome. A blocklisted client learns it only from a reply of the
 * cluster, and a disk served wholly from the cache sends nothing: without
 * the probe its stale hits could go on for as long as the blocklist lasts.
 */
#define RBD_PROBE_MS      1000
#define RBD_LOCK_WAIT_S   60 /* at open: longest wait for a crashed client's lock */
#define RBD_WRITE_RETRIES 3  /* a write refused for the lock: resubmitted after it is ours */

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

void origin_rbd_disconnect(rados_t cluster, rados_ioctx_t ioctx, rbd_image_t image)
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
	origin_rbd_own_close(r);
	if (r->svc) {
		hl_reactor_stop(r->svc); /* joined: its timer heap is ours to touch now */
		hl_timer_stop(&r->probe);
		hl_reactor_destroy(r->svc);
		r->svc = NULL;
	}
	free(r->snap_ids);
	r->snap_ids = NULL;
	origin_rbd_own_disconnect(r, r->cluster, r->ioctx, r->image); /* and own_notify's */
	r->image = NULL;
	r->ioctx = NULL;
	r->cluster = NULL;
	free(r->conf);
	free(r->id);
	r->conf = r->id = NULL;
	free(r->shadow_chg); /* rbd_hotset.c's */
	r->shadow_chg = NULL;
	if (r->handles_init)
		pthread_rwlock_destroy(&r->handles);
	r->handles_init = false;
	if (r->own_wake_init)
		pthread_mutex_destroy(&r->own_wake_lock);
	r->own_wake_init = false;
	if (r->mark_lock_init)
		pthread_mutex_destroy(&r->mark_lock);
	r->mark_lock_init = false;
}

/* ---- the service thread: the fence probe (rbd_own.c) on a timer, size checks ---- */

static void rbd_probe_fire(struct hl_timer *t)
{
	struct hl_origin *o = t->arg;
	struct rbd_origin *r = ro_of(o);

	/* several gateways: a fenced client reconnects, the probe goes on */
	if (!origin_rbd_fence_probe(o) || r->gateway)
		hl_timer_start(r->svc, &r->probe, RBD_PROBE_MS);
}

/* On the service thread: a probe right now (an I/O saw the lock missing). */
static void rbd_probe_now(void *arg)
{
	origin_rbd_fence_probe(arg);
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

	origin_rbd_fence_probe(rio->origin);
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

/*
 * How many snapshots were made or removed between the last check's ids
 * and ids (both sorted; n < 0: unknown, then none is counted).
 */
static unsigned snaps_changed(const struct rbd_origin *r, const uint64_t *ids, int n)
{
	unsigned d = 0;
	int i = 0, j = 0;

	if (r->nsnap_ids < 0 || n < 0)
		return 0;
	while (i < r->nsnap_ids || j < n) {
		if (j == n || (i < r->nsnap_ids && r->snap_ids[i] < ids[j])) {
			d++, i++;
		} else if (i == r->nsnap_ids || ids[j] < r->snap_ids[i]) {
			d++, j++;
		} else {
			i++, j++;
		}
	}
	return d;
}

/*
 * On the service thread: the header changed (or the watch failed); maybe
 * the size did. librbd gives only the size of the moment: a shrink and a
 * grow that both happened before the look (coalesced changes, or a
 * service thread that ran late) show as one resize, or none, and the
 * blocks past the shrink point, zeroes in the image now, would stay
 * cached. So every header change (notes) must be explained by a change
 * seen here: the size, a snapshot made or removed (a change of the set, or
 * one of our marks, which may be made and removed between two looks).
 * librbd calls the watch twice for a change the lock owner (this gateway
 * while it serves) makes, once itself and once for the cluster's notify,
 * so a change explains two; one explained but not yet come is carried to
 * the next look. More notes than that: the cache drops the disk
 * (HL_ORIGIN_CHANGED). A shrink and a grow back are two changes, four
 * notes on the owner (two elsewhere), none of them seen: never explained.
 * An explanation missed (a foreign snapshot made and removed between two
 * looks) costs a needless drop, never a stale block.
 */
static void rbd_size_check(void *arg)
{
	struct hl_origin *o = arg;
	struct rbd_origin *r = ro_of(o);
	uint64_t size, *ids = NULL;
	unsigned gen, notes, own, n, seen, allowed;
	int rc, nids;

	atomic_store(&r->check_queued, false); /* a change from now on queues another check */
	if (r->test_check_delay_ms)
		usleep(r->test_check_delay_ms * 1000u);
	if (origin_rbd_fence_probe(o))
		return;
	notes = atomic_load(&r->notes); /* before what explains them is read */
	own = atomic_load(&r->own_snap_ops);
	handles_read(r);
	gen = atomic_load(&r->gen);
	rc = rbd_get_size(r->image, &size);
	nids = rc < 0 ? rc : origin_rbd_snap_ids(r->image, &ids);
	handles_done(r);
	if (rc == -ESHUTDOWN) {
		origin_rbd_fence(o, rc, gen);
		return;
	}
	if (rc < 0) {
		HL_WARN(RBD_LOG, "%s: cannot read the image size after a header change: %s", o->uri,
		        strerror(-rc));
		return; /* its notes stay for the next look */
	}
	uint64_t old = __atomic_load_n(&o->size, __ATOMIC_ACQUIRE);
	n = notes - r->notes_seen;
	seen = (size != old) + HL_MAX(snaps_changed(r, ids, nids), own - r->own_seen);
	allowed = 2 * seen + r->carry;
	r->carry = n < allowed ? 1 : 0;
	r->notes_seen = notes;
	r->own_seen = own;
	free(r->snap_ids);
	r->snap_ids = ids;
	r->nsnap_ids = nids < 0 ? -1 : nids;
	if (size != old) {
		HL_NOTICE(RBD_LOG, "%s: image resized: %llu -> %llu bytes", o->uri,
		          (unsigned long long)old, (unsigned long long)size);
		hl_origin_notify(o, HL_ORIGIN_RESIZED, size);
	}
	HL_DEBUG(RBD_LOG, "%s: %u header change(s), %u seen (size, snapshots)", o->uri, n, seen);
	if (n > allowed && !o->immutable) { /* a snapshot (@SNAP) never changes */
		HL_NOTICE(RBD_LOG,
		          "%s: %u header change(s), %u seen (size, snapshots): a shrink and a grow "
		          "may hide in them; the cache drops the disk",
		          o->uri, n, seen);
		hl_origin_notify(o, HL_ORIGIN_CHANGED, size);
	}
}

/* On a librbd thread: only queue the check (never call librbd back from here). */
void origin_rbd_watch_cb(void *arg)
{
	struct hl_origin *o = arg;
	struct rbd_origin *r = ro_of(o);

	atomic_fetch_add(&r->notes, 1); /* before the check that explains it is queued */
	if (atomic_exchange(&r->check_queued, true))
		return;
	if (hl_reactor_call(r->svc, rbd_size_check, o) < 0) {
		atomic_store(&r->check_queued, false);
		HL_ERR_RL(RBD_LOG, "%s: out of memory: an image header change is not checked",
		          o->uri);
	}
}

/* HOTLUN_TEST_RBD_CHECK_DELAY_MS (tests only): each header check waits this long first. */
static uint32_t test_delay_ms(void)
{
	const char *v = getenv("HOTLUN_TEST_RBD_CHECK_DELAY_MS");
	unsigned long ms = v ? strtoul(v, NULL, 10) : 0;

	return ms > 60000 ? 60000 : (uint32_t)ms;
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
	rc = rbd_update_watch(r->image, &r->watch_handle, origin_rbd_watch_cb, o);
	if (rc < 0)
		return rc;
	r->watching = true;
	/* what the first check compares with (a change before it: one needless drop) */
	r->nsnap_ids = origin_rbd_snap_ids(r->image, &r->snap_ids);
	if (r->nsnap_ids < 0)
		r->nsnap_ids = -1;
	r->test_check_delay_ms = test_delay_ms();
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
 * The rbd_cache an opened image really runs with. rbd_cache is set false
 * for the client, but a pool's or the image's own config (`rbd config
 * pool|image set ... rbd_cache true`, common in pools that QEMU uses) wins
 * over that: librbd would then acknowledge writes from its write-back
 * cache, before they are on the OSDs, and a gateway that dies loses them
 * although the initiator was told they were written. A writable image
 * with it on is refused, with the remedy. So is one whose config cannot
 * be read (fails closed). The list starts small and grows as librbd asks
 * (-ERANGE: it says how many), so every open runs the growth path.
 * @return 0, -EINVAL (on) or the error that kept it from being read.
 */
static int rbd_cache_check(rbd_image_t img, const char *target, const char *pool, const char *name)
{
	rbd_config_option_t *opts;
	int max = 16, n, rc = 0;
	static const char *const src[] = {"client config", "pool config", "image config"};

	for (;;) {
		opts = calloc((size_t)max, sizeof(*opts));
		if (!opts) {
			rc = -ENOMEM;
			break;
		}
		n = max;
		rc = rbd_config_image_list(img, opts, &n);
		if (rc != -ERANGE)
			break;
		free(opts);
		opts = NULL;
		max = n > max ? n : max * 2; /* librbd says how many; grow anyway */
	}
	if (rc < 0) {
		HL_ERR(RBD_LOG,
		       "rbd:%s: cannot read the image's config to check that rbd_cache is off "
		       "(%s): a writable open is refused, since librbd could acknowledge writes "
		       "from its cache; give the cephx user read access to the pool's and the "
		       "image's config (profile rbd), or serve the image read_only",
		       target, strerror(-rc));
		free(opts);
		return rc;
	}
	for (int i = 0; i < n; i++) {
		if (strcmp(opts[i].name, "rbd_cache") || strcmp(opts[i].value, "true"))
			continue;
		HL_ERR(RBD_LOG,
		       "rbd:%s: rbd_cache is on for this image (%s): librbd would acknowledge "
		       "writes from its cache before they reach the OSDs; turn it off for it: "
		       "rbd config image set %s/%s rbd_cache false",
		       target, (unsigned)opts[i].source < 3 ? src[opts[i].source] : "config", pool,
		       name);
		rc = -EINVAL;
	}
	rbd_config_image_list_cleanup(opts, n);
	free(opts);
	return rc;
}

/*
 * A client of our own (r->conf, r->id) and the image opened through it:
 * the three handles, or nothing on failure. `target` names the disk in errors.
 */
int origin_rbd_connect(struct rbd_origin *r, const char *target, bool read_only, rados_t *cluster,
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
	if (!r->snap[0] && !read_only) {
		rc = rbd_cache_check(img, target, r->pool, r->name);
		if (rc < 0)
			goto fail;
	}
	*cluster = c;
	*ioctx = io;
	*image = img;
	return 0;
fail:
	origin_rbd_disconnect(c, io, img);
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
	if (opts->gateway && opts->read_only && !r->snap[0]) {
		/*
		 * Shared by gateways, yet read-only here: a read-only client takes
		 * no lock, so another client may write the image behind every
		 * gateway's cache, and it cannot take part in ownership either.
		 * Only a snapshot, which nobody can write, is served by all.
		 */
		HL_ERR(RBD_LOG,
		       "rbd:%s: a read-only image shared by gateways must be a snapshot "
		       "(rbd:POOL/IMAGE@SNAP: every gateway serves it); without read_only the "
		       "gateways own the image in turn",
		       target);
		return -EINVAL;
	}
	r->gateway = opts->gateway;
	r->lease_ms = opts->gateway_lease_ms;
	rc = -pthread_mutex_init(&r->mark_lock, NULL);
	if (rc)
		return rc;
	r->mark_lock_init = true;
	if (r->gateway) {
		rc = -pthread_rwlock_init(&r->handles, NULL);
		if (rc)
			return rc;
		r->handles_init = true;
		pthread_mutex_init(&r->own_wake_lock, NULL);
		r->own_wake_init = true;
	}
	r->conf = strdup(conf);
	r->id = opts->rbd_id && opts->rbd_id[0] ? strdup(opts->rbd_id) : NULL;
	if (!r->conf || (opts->rbd_id && opts->rbd_id[0] && !r->id)) {
		rc = -ENOMEM;
		goto fail;
	}
	rc = origin_rbd_connect(r, target, opts->read_only, &r->cluster, &r->ioctx, &r->image);
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
		rc = origin_rbd_lock_take(r, RBD_LOCK_WAIT_S, false, target);
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
	 * hotlund is stopped are found through the proofs (rbd_proof.c).
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
	o->immutable = r->snap[0] != '\0'; /* snapshots never change while they exist */
	o->can_discard = !o->read_only;
	o->zeroes_after_discard = true; /* a discard is a write of zeroes (origin_rbd_submit) */
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
	origin_rbd_pr_fini(o); /* its thread and watch use the connection */
	origin_rbd_close_fence(o);
	rbd_close_all(ro_of(o));
}

/* Ops that change the image. */
static bool rbd_op_writes(enum hl_io_op op)
{
	return op == HL_IO_WRITE || op == HL_IO_DISCARD || op == HL_IO_WRITE_ZEROES ||
	       op == HL_IO_COMPARE_AND_WRITE;
}

/* A write's result that does not say "not written" (timed out, an I/O error): it may still land. */
static bool rbd_write_unsure(ssize_t result)
{
	return result < 0 && result != -EILSEQ && result != -EROFS && result != -ESHUTDOWN &&
	       result != -EINVAL;
}

/*
 * A write finished. One whose outcome is unknown may still reach an OSD
 * later: counted, so that a release does not let the next owner write
 * before it is fenced (rbd_own.c, origin_rbd_own_release), nor a close the
 * image's next client (origin_rbd_close_fence).
 */
static void rbd_write_done(struct rbd_origin *r, int result)
{
	/*
	 * unsure_writes before writes_out: a release reads writes_out first,
	 * so it counts this write once or twice, never not at all.
	 */
	if (rbd_write_unsure(result))
		atomic_fetch_add(&r->unsure_writes, 1);
	atomic_fetch_sub(&r->writes_out, 1);
}

/*
 * A write is about to go to librbd: counted in the era it goes out in
 * (origin_rbd_mark_create). Read again after counting: a mark that moved
 * the era meanwhile has not waited for this write, which goes out after
 * that mark's snapshot and so carries its snapshot context.
 */
static void rbd_era_enter(struct rbd_origin *r, struct rbd_io *rio)
{
	for (;;) {
		unsigned e = atomic_load(&r->mark_era);

		atomic_fetch_add(&r->era_out[e & 1], 1);
		if (atomic_load(&r->mark_era) == e) {
			rio->era = (uint8_t)(e & 1);
			rio->in_era = true;
			return;
		}
		atomic_fetch_sub(&r->era_out[e & 1], 1);
	}
}

/* librbd is done with the write (or never took it): unsure_total before era_out. */
static void rbd_era_leave(struct rbd_origin *r, struct rbd_io *rio, ssize_t result)
{
	if (!rio->in_era)
		return;
	rio->in_era = false;
	if (rbd_write_unsure(result))
		atomic_fetch_add(&r->unsure_total, 1);
	atomic_fetch_sub(&r->era_out[rio->era], 1);
}

/* On the submitting reactor. */
static void rbd_finish(void *arg)
{
	struct hl_origin_io *io = arg;
	struct rbd_io *rio = rio_of(io);
	ssize_t res = rio->result;
	int result = res < 0 ? (int)res : 0;

	if (rbd_op_writes(io->op))
		rbd_write_done(ro_of(rio->origin), result);

	if (result == -ESHUTDOWN) {
		origin_rbd_fence(rio->origin, result, rio->gen);
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
			origin_rbd_fence(rio->origin, result, 0);
		} else if (hl_reactor_call(ro_of(rio->origin)->svc, rbd_probe_now, rio->origin) <
		           0) {
			origin_rbd_fence(rio->origin, result, 0);
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
	rbd_era_leave(ro_of(rio->origin), rio, rio->result); /* here: a mark waits for it */
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
	if (rbd_op_writes(io->op))
		rbd_era_enter(r, rio);
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
			/*
			 * Not rbd_aio_discard: it skips the parts of a range
			 * that do not fill rbd_discard_granularity_bytes (64
			 * KiB by default, and a pool or image may set it),
			 * and still succeeds, while this LUN reports LBPRZ
			 * (zeroes_after_discard): a small UNMAP would leave
			 * old data where the initiator reads zeroes. Write
			 * zeroes deallocates whole objects all the same and
			 * zeroes the rest exactly.
			 */
		case HL_IO_WRITE_ZEROES:
			rc = rbd_aio_write_zeroes(r->image, io->offset, io->length, rio->completion,
			                          0, 0);
			break;
		default:
			rc = -EOPNOTSUPP;
		}
	/* its completion runs on this reactor, after this returns */
	if (rc >= 0 && rbd_op_writes(io->op))
		atomic_fetch_add(&r->writes_out, 1);
	handles_done(r);
	if (rc < 0) {
		rbd_era_leave(r, rio, 0); /* never sent */
		rbd_aio_release(rio->completion);
		free(rio->bounce);
		rio->bounce = NULL;
		return rc;
	}
	return 0;
}

const struct hl_origin_ops origin_rbd_ops = {
    .name = "rbd",
    .scheme = "rbd:",
    .priv_size = sizeof(struct rbd_origin),
    .open = origin_rbd_open,
    .close = origin_rbd_close,
    .submit = origin_rbd_submit,
    .proof_take = origin_rbd_proof_take,
    .proof_check = origin_rbd_proof_check,
    .proof_release = origin_rbd_proof_release,
    .identity = origin_rbd_identity,
    .own_acquire = origin_rbd_own_acquire,
    .own_renew = origin_rbd_own_renew,
    .own_release = origin_rbd_own_release,
    .own_peek = origin_rbd_own_peek,
    .own_request = origin_rbd_own_request,
    .own_watch = origin_rbd_own_watch,
    .pr_open = origin_rbd_pr_open,
    .pr_start = origin_rbd_pr_start,
    .pr_load = origin_rbd_pr_load,
    .pr_commit = origin_rbd_pr_commit,
    .pr_applied = origin_rbd_pr_applied,
    .pr_current = origin_rbd_pr_current,
    .pr_close = origin_rbd_pr_close,
    .hot_publish = origin_rbd_hot_publish,
    .hot_fetch = origin_rbd_hot_fetch,
};
