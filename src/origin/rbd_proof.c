/*
 * rbd_proof.c - what a cache may trust of an rbd image across a restart or
 * an ownership change: warm restart proofs (mark snapshots, and
 * rbd_diff_iterate2 from a mark to the head for what changed since), and the
 * image's identity, which every gateway of the image reads alike. Who may
 * write the image is rbd_own.c's; the I/O path is rbd.c's.
 */
#include "config.h"

#include "origin/origin_rbd.h"

#include "hotlun/log.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

int origin_rbd_snaps_list(rbd_image_t image, rbd_snap_info_t **out)
{
	rbd_snap_info_t *snaps;
	int max = 16, n;

	*out = NULL;
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
	*out = snaps;
	return n;
}

void origin_rbd_snaps_free(rbd_snap_info_t *snaps)
{
	rbd_snap_list_end(snaps);
	free(snaps);
}

static int id_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int origin_rbd_snap_ids(rbd_image_t image, uint64_t **ids)
{
	rbd_snap_info_t *snaps;
	int n = origin_rbd_snaps_list(image, &snaps);

	*ids = NULL;
	if (n < 0)
		return n;
	*ids = malloc(((size_t)n + 1) * sizeof(**ids));
	if (!*ids) {
		origin_rbd_snaps_free(snaps);
		return -ENOMEM;
	}
	for (int i = 0; i < n; i++)
		(*ids)[i] = snaps[i].id;
	origin_rbd_snaps_free(snaps);
	qsort(*ids, (size_t)n, sizeof(**ids), id_cmp);
	return n;
}

/* The id of snapshot `name`, or -ENOENT. */
static int snap_id_of(rbd_image_t image, const char *name, uint64_t *id)
{
	rbd_snap_info_t *snaps;
	int n, rc = -ENOENT;

	n = origin_rbd_snaps_list(image, &snaps);
	if (n < 0)
		return n;
	for (int i = 0; i < n; i++) {
		if (!strcmp(snaps[i].name, name)) {
			*id = snaps[i].id;
			rc = 0;
		}
	}
	origin_rbd_snaps_free(snaps);
	return rc;
}

/* Has a write of this ownership (this run, for a lone gateway) an unknown outcome? */
static bool writes_unsure(struct rbd_origin *r)
{
	return atomic_load(&r->unsure_total) != atomic_load(&r->unsure_base);
}

/* Wait (up to RBD_MARK_DRAIN_MS) until no write of era e is out. @return true once none is. */
#define RBD_MARK_DRAIN_MS 10000 /* the log says "10 s" */
static bool era_drained(struct rbd_origin *r, unsigned e)
{
	for (int ms = 0; atomic_load(&r->era_out[e]); ms++) {
		struct timespec ts = {0, 1000000};

		if (ms >= RBD_MARK_DRAIN_MS)
			return false;
		nanosleep(&ts, NULL);
	}
	return true;
}

/*
 * A write that timed out (librados gave up on it, the OSD may still hold
 * it) reaches the image whenever its OSD gets to it, with the snapshot
 * context it was sent with. Landing after a mark, it finds no clone to
 * make (the context predates the mark): the head changes, and the mark
 * reads the same new bytes, so no diff from the mark lists that write,
 * and a cache proven by the mark keeps the old block. So a mark is made
 * only while every write of this ownership finished with a known
 * outcome, and kept only if the writes that were out as it was made
 * (librbd lets them finish first; they are counted by era) finish so too.
 * Until the client that sent such a write is fenced (a release, a close:
 * rbd_own.c), no new mark: the last one stays the proof.
 */
int origin_rbd_mark_create(struct hl_origin *o, const char *name, const char *what, uint64_t *id)
{
	struct rbd_origin *r = ro_of(o);
	bool drained;
	int rc;

	pthread_mutex_lock(&r->mark_lock);
	if (writes_unsure(r)) {
		HL_WARN_RL(RBD_LOG,
		           "%s: no new %s: a write of unknown outcome (timed out) may still reach "
		           "the image, and a mark made before it lands would not show it; the last "
		           "one stays until this client is fenced (a hand-over, a close)",
		           o->uri, what);
		rc = -EAGAIN;
		goto out;
	}
	rc = rbd_snap_create(r->image, name);
	if (rc < 0) {
		HL_WARN(RBD_LOG, "%s: cannot make the %s snapshot %s: %s", o->uri, what, name,
		        strerror(-rc));
		goto out;
	}
	own_snap_op(r);
	/* writes sent from now on carry the new snapshot context */
	drained = era_drained(r, atomic_fetch_add(&r->mark_era, 1) & 1);
	if (!drained || writes_unsure(r)) {
		HL_WARN(RBD_LOG,
		        "%s: %s %s dropped: a write sent before it %s, and may reach the image "
		        "after the mark without showing in its diff",
		        o->uri, what, name, drained ? "timed out" : "is still out after 10 s");
		rc = rbd_snap_remove(r->image, name);
		if (rc == 0)
			own_snap_op(r);
		else
			HL_WARN(RBD_LOG, "%s: cannot remove the dropped %s %s: %s", o->uri, what,
			        name, strerror(-rc));
		rc = -EAGAIN;
		goto out;
	}
	rc = snap_id_of(r->image, name, id);
out:
	pthread_mutex_unlock(&r->mark_lock);
	return rc;
}

static int proof_take(struct hl_origin *o, const char *tag, bool final, char *proof, size_t len)
{
	struct rbd_origin *r = ro_of(o);
	char name[160];
	struct timespec now;
	uint64_t id;
	int n;

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
	if (origin_rbd_mark_create(o, name, "mark", &id))
		return -EAGAIN;
	if (snprintf(r->mark_proof, sizeof(r->mark_proof), "rbd:%s:%llu:%s", r->image_id,
	             (unsigned long long)id, name) >= (int)sizeof(r->mark_proof) ||
	    (size_t)snprintf(proof, len, "%s", r->mark_proof) >= len) {
		r->mark_proof[0] = '\0';
		if (rbd_snap_remove(r->image, name) == 0)
			own_snap_op(r);
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
			if (erc < 0 && erc != -ERANGE)
				HL_INFO_RL(RBD_LOG, "rbd diff since %s: exact extents of %llu+%llu: %s "
				                    "(whole objects instead)",
				           name, (unsigned long long)objs.v[i].off,
				           (unsigned long long)objs.v[i].len, strerror(-erc));
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

int origin_rbd_diff_since(rbd_image_t image, const char *name, uint64_t size,
                          hl_origin_changed_fn changed, void *arg)
{
	struct diff_arg d = {.changed = changed, .arg = arg};

	return diff_since(image, name, size, &d);
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
	rbd_snap_info_t *snaps;
	unsigned long long id;
	char img[128];
	int n;

	if (r->snap[0] || o->read_only)
		return;
	if (sscanf(proof, "rbd:%127[^:]:%llu:%159s", img, &id, keep) != 3)
		return;
	snprintf(prefix, sizeof(prefix), MARK_PREFIX "%s-", tag);
	n = origin_rbd_snaps_list(r->image, &snaps);
	if (n < 0)
		return;
	for (int i = 0; i < n; i++) {
		if (strncmp(snaps[i].name, prefix, strlen(prefix)) || !strcmp(snaps[i].name, keep))
			continue;
		int rc = rbd_snap_remove(r->image, snaps[i].name);
		if (rc < 0)
			HL_WARN(RBD_LOG, "%s: cannot remove the old mark snapshot %s: %s", o->uri,
			        snaps[i].name, strerror(-rc));
		else
			own_snap_op(r);
	}
	origin_rbd_snaps_free(snaps);
}

/*
 * Several gateways: the proofs use the connection of the moment. A mark
 * is a snapshot, which needs the lock: only the owner takes one, and only
 * the owner removes old ones (a standby's librbd would ask the owner to).
 * Checking a proof only reads, so a standby can (before it serves).
 */
int origin_rbd_proof_take(struct hl_origin *o, const char *tag, bool final, char *proof, size_t len)
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

int origin_rbd_proof_check(struct hl_origin *o, const char *tag, const char *proof,
                           hl_origin_changed_fn changed, void *arg, char *why, size_t whylen)
{
	struct rbd_origin *r = ro_of(o);
	int rc;

	handles_read(r);
	rc = proof_check(o, tag, proof, changed, arg, why, whylen);
	handles_done(r);
	return rc;
}

void origin_rbd_proof_release(struct hl_origin *o, const char *tag, const char *proof)
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
int origin_rbd_identity(struct hl_origin *o, char *buf, size_t len)
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
