/*
 * runtime.c - the running state of hotlund and the one way it changes:
 * daemon_apply(next configuration). Start-up applies the file to an empty
 * state; SIGHUP applies the file again; every control-socket change edits a
 * copy of the running configuration and applies it. So there is a single
 * path from configuration to running objects, and `saveconfig` can write
 * exactly what runs.
 *
 * Order inside daemon_apply: first everything that can fail and is not yet
 * visible to initiators (open new disks, check what is busy, open new
 * portals), then the visible changes, which cannot fail except for lack of
 * memory (LUN maps, targets, portals closed, disks released).
 */
#include "daemon/daemon_internal.h"

#include "hotlun/cache_engine.h"
#include "hotlun/ctl.h"
#include "hotlun/event.h"
#include "hotlun/iscsi.h"
#include "hotlun/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int daemon_fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return rc;
}

/* ---- disks ---- */

struct disk_rt *daemon_disk_find(struct daemon *d, const char *name)
{
	struct disk_rt *rt;

	hl_list_for_each_entry(rt, &d->disks, link) {
		if (strcmp(rt->conf.name, name) == 0)
			return rt;
	}
	return NULL;
}

static void free_secret(char *s)
{
	if (s) {
		explicit_bzero(s, strlen(s));
		free(s);
	}
}

static void disk_conf_free(struct hl_conf_disk *c)
{
	free(c->name);
	free(c->origin);
	free(c->cache);
	free(c->rbd_conf);
	free(c->rbd_id);
	free(c->ochap.user);
	free(c->ochap.secret_file);
	free(c->ochap.mutual_user);
	free_secret(c->ochap.secret);
	free_secret(c->ochap.file_secret);
	free_secret(c->ochap.mutual_secret);
	free(c->serial);
	free(c->naa);
}

static bool dup_opt(char **dst, const char *src)
{
	*dst = src ? strdup(src) : NULL;
	return !src || *dst;
}

static int disk_conf_copy(struct hl_conf_disk *dst, const struct hl_conf_disk *src)
{
	*dst = *src;
	dst->name = strdup(src->name);
	dst->origin = strdup(src->origin);
	bool ok = dup_opt(&dst->cache, src->cache) & dup_opt(&dst->rbd_conf, src->rbd_conf) &
		  dup_opt(&dst->rbd_id, src->rbd_id) &
		  dup_opt(&dst->ochap.user, src->ochap.user) &
		  dup_opt(&dst->ochap.secret, src->ochap.secret) &
		  dup_opt(&dst->ochap.secret_file, src->ochap.secret_file) &
		  dup_opt(&dst->ochap.file_secret, src->ochap.file_secret) &
		  dup_opt(&dst->ochap.mutual_user, src->ochap.mutual_user) &
		  dup_opt(&dst->ochap.mutual_secret, src->ochap.mutual_secret) &
		  dup_opt(&dst->serial, src->serial) & dup_opt(&dst->naa, src->naa);
	if (!dst->name || !dst->origin || !ok) {
		disk_conf_free(dst);
		return -ENOMEM;
	}
	return 0;
}

/*
 * What needs the disk to be reopened (the LU's identity stays unless serial
 * or naa change: it derives from the name, or from the origin).
 */
static bool disk_changed(const struct hl_conf_disk *a, const struct hl_conf_disk *b)
{
	return !daemon_str_eq(a->origin, b->origin) || a->block_size != b->block_size ||
	       a->read_only != b->read_only || a->origin_iops != b->origin_iops ||
	       a->origin_mbps != b->origin_mbps || a->origin_latency_ms != b->origin_latency_ms ||
	       !daemon_str_eq(a->cache, b->cache) || a->cache_quota != b->cache_quota ||
	       !daemon_str_eq(a->rbd_conf, b->rbd_conf) || !daemon_str_eq(a->rbd_id, b->rbd_id) ||
	       !daemon_str_eq(a->ochap.user, b->ochap.user) ||
	       !daemon_str_eq(hl_conf_origin_secret(&a->ochap), hl_conf_origin_secret(&b->ochap)) ||
	       !daemon_str_eq(a->ochap.mutual_user, b->ochap.mutual_user) ||
	       !daemon_str_eq(a->ochap.mutual_secret, b->ochap.mutual_secret) ||
	       a->exclusive != b->exclusive || !daemon_str_eq(a->serial, b->serial) ||
	       !daemon_str_eq(a->naa, b->naa);
}

void daemon_disk_free(struct disk_rt *rt)
{
	hl_owner_destroy(rt->owner); /* before the LU: its hooks use the LU's origins */
	if (rt->pr_backend) /* no notice reaches the LU after this */
		rt->pr_backend->ops->pr_close(rt->pr_backend);
	if (rt->lu)
		hl_lu_destroy(rt->lu);
	disk_conf_free(&rt->conf);
	free(rt);
}

/* The ownership object's hooks: the cache is made coherent before this gateway serves. */
static int disk_gained(void *arg)
{
	struct disk_rt *rt = arg;

	return rt->cached ? hl_cache_revalidate(rt->cached) : 0;
}

static void disk_releasing(void *arg)
{
	struct disk_rt *rt = arg;

	if (rt->cached)
		hl_cache_proof_now(rt->cached);
}

static void disk_lost(void *arg)
{
	struct disk_rt *rt = arg;

	if (rt->cached)
		hl_cache_hold_proofs(rt->cached);
}

/* The warm standby of a shared disk (docs/gateways.md): publish as owner, shadow as standby. */
static void disk_shadow(struct disk_rt *rt, const struct hl_conf_disk *cd)
{
	uint64_t rate = cd->shadow_rate_set ? cd->shadow_rate : HL_CONF_SHADOW_RATE_DEFAULT;
	int rc;

	if (!rt->cached || !rt->owner)
		return;
	rc = hl_cache_shadow_config(rt->cached, rate);
	if (rc)
		HL_WARN("daemon", "disk %s: no warm standby: %s", cd->name, strerror(-rc));
}

/*
 * One of several gateways: the disk is served only while the origin's
 * cluster says it is ours (hotlun/owner.h). An origin that cannot share
 * ownership (a file) stays with the one gateway that holds it open.
 */
static int disk_owner_start(struct daemon *d, struct disk_rt *rt, struct hl_origin *backend,
			    char *err, size_t errlen)
{
	struct hl_owner_config oc = {
		.disk = rt->conf.name,
		.gateway = (uint16_t)d->conf->gateway,
		.gateways = d->conf->gateways,
		.n_gateways = (unsigned)d->conf->n_gateways,
		.lease_ms = d->conf->gateway_lease_ms,
		.dead_ms = d->conf->gateway_dead_ms,
	};
	struct hl_owner_hooks hooks = {disk_gained, disk_releasing, disk_lost, rt};
	int rc;

	if (backend->immutable) {
		/* nobody can change it (an rbd snapshot): every path may serve it (all active) */
		HL_NOTICE("daemon", "disk %s: its origin cannot change: every gateway serves it",
			  rt->conf.name);
		return 0;
	}
	/*
	 * read_only says that this gateway does not write the disk, not that
	 * nobody does: its cache is trusted only while it owns the disk, as for
	 * a writable one (docs/gateways.md, "Read-only disks").
	 */
	rc = hl_owner_create(&oc, backend, rt->lu, &hooks, &rt->owner);

	if (rc == -EOPNOTSUPP) {
		HL_NOTICE("daemon",
			  "disk %s: a %s origin cannot be shared between gateways: this gateway "
			  "serves it alone (a second one is refused)",
			  rt->conf.name, backend->ops->name);
		return 0;
	}
	if (rc == 0)
		rc = hl_owner_start(rt->owner);
	if (rc)
		return daemon_fail(err, errlen, rc, "disk %s: ownership: %s", rt->conf.name,
		                   strerror(-rc));
	return 0;
}

/* ---- persistent reservations the gateways share (hotlun/scsi.h, origin.h pr_*) ---- */

static int pr_store_load(void *arg, char **text, size_t *len)
{
	struct hl_origin *b = arg;

	return b->ops->pr_load(b, text, len);
}

static int pr_store_commit(void *arg, uint64_t old_seq, uint64_t new_seq, const char *text,
			   size_t len)
{
	struct hl_origin *b = arg;

	return b->ops->pr_commit(b, old_seq, new_seq, text, len);
}

static void pr_store_applied(void *arg, uint64_t cookie, uint64_t seq)
{
	struct hl_origin *b = arg;

	b->ops->pr_applied(b, cookie, seq);
}

static bool pr_store_current(void *arg, uint64_t seq)
{
	struct hl_origin *b = arg;

	return b->ops->pr_current(b, seq);
}

/* The LU's store: the backend's shared record (arg: the backend). */
static const struct hl_lu_pr_store origin_pr_store = {
	.load = pr_store_load,
	.commit = pr_store_commit,
	.applied = pr_store_applied,
	.current = pr_store_current,
};

static void pr_changed(void *arg, uint64_t cookie)
{
	hl_lu_pr_changed(arg, cookie);
}

/*
 * A disk that several gateways serve (an owner decides, or every gateway
 * serves it read-only): its initiators' persistent reservations are kept
 * where every gateway sees them (an origin with a shared record: rbd), or
 * not offered at all (a SAN, whose own reservations decide which gateway
 * writes; docs/gateways.md), never kept per gateway, where a failover
 * would lose them and a fenced initiator could write through the other
 * path. A disk only one gateway serves keeps them itself, as always.
 */
static void disk_pr_share(struct daemon *d, struct disk_rt *rt, struct hl_origin *backend)
{
	const struct hl_origin_ops *ops = backend->ops;
	int rc;

	if (!rt->owner && !backend->read_only && !rt->conf.read_only)
		return;
	if (!ops->pr_open) {
		hl_lu_pr_unshared(rt->lu);
		return;
	}
	rc = ops->pr_open(backend, (uint16_t)d->conf->gateway, d->conf->gateways,
			  (unsigned)d->conf->n_gateways);
	if (rc == 0) {
		rc = hl_lu_set_pr_store(rt->lu, &origin_pr_store, backend);
		if (rc == 0) {
			rt->pr_backend = backend;
			rc = ops->pr_start(backend, pr_changed, rt->lu);
		}
	}
	if (rc) {
		HL_ERR("daemon",
		       "disk %s: the gateways cannot share its persistent reservations (%s): "
		       "reservation commands are not offered",
		       rt->conf.name, strerror(-rc));
		hl_lu_set_pr_store(rt->lu, NULL, NULL);
		ops->pr_close(backend);
		rt->pr_backend = NULL;
		hl_lu_pr_unshared(rt->lu);
	}
}

static void *handover_main(void *arg)
{
	struct disk_rt *rt = arg;

	hl_owner_handover(rt->owner, rt->handover_wait_ms);
	return NULL;
}

/*
 * All disks at once, each waiting for its commands and its peer on a thread
 * of its own. Nothing is allocated here: a stop never skips a handover for
 * want of memory (a thread that cannot be made hands its disk over in line).
 */
unsigned daemon_owners_handover(struct daemon *d, unsigned wait_ms)
{
	struct disk_rt *rt;
	unsigned owned = 0, inline_n = 0;

	hl_list_for_each_entry(rt, &d->disks, link) {
		struct hl_owner_status st;
		if (!rt->owner)
			continue;
		hl_owner_status(rt->owner, &st);
		owned += !strcmp(st.state, "owner");
		rt->handover_wait_ms = wait_ms;
		rt->handover_threaded =
		    pthread_create(&rt->handover_thread, NULL, handover_main, rt) == 0;
		if (!rt->handover_threaded) {
			inline_n++;
			hl_owner_handover(rt->owner, wait_ms);
		}
	}
	hl_list_for_each_entry(rt, &d->disks, link) {
		if (rt->owner && rt->handover_threaded)
			pthread_join(rt->handover_thread, NULL);
		rt->handover_threaded = false;
	}
	if (inline_n)
		HL_WARN("daemon", "%u disk(s) handed over one after the other (no thread for them)",
			inline_n);
	return owned;
}

struct plan;
static int disk_alias_check(struct daemon *d, const struct plan *p, const struct hl_conf_disk *cd,
			    const char *data_id, char *err, size_t errlen);

static int disk_open(struct daemon *d, const struct plan *p, const struct hl_conf_disk *cd,
		     struct disk_rt **out, char *err, size_t errlen)
{
	struct hl_origin_opts opts = {
		.read_only = cd->read_only,
		.block_size = cd->block_size,
		.rbd_conf = cd->rbd_conf,
		.rbd_id = cd->rbd_id,
		.chap_user = cd->ochap.user,
		.chap_secret = hl_conf_origin_secret(&cd->ochap),
		.mutual_user = cd->ochap.mutual_user,
		.mutual_secret = cd->ochap.mutual_secret,
		.sole_writer = cd->exclusive,
		.disk = cd->name,
		.state_dir = d->conf->state_dir,
		.gateway = (uint16_t)d->conf->gateway,
		.gateway_lease_ms =
		    d->conf->gateway_lease_ms ? d->conf->gateway_lease_ms : HL_CONF_GATEWAY_LEASE_MS,
	};
	char shown[2200]; /* the origin as logs may show it (hl_uri_redact) */
	struct hl_origin *origin, *backend, *counted;
	struct hl_lu_config lc;
	struct disk_rt *rt;
	char ident[HL_ORIGIN_PROOF_MAX];
	bool shared_ident;
	int rc;

	rt = calloc(1, sizeof(*rt));
	if (!rt)
		return -ENOMEM;
	rc = disk_conf_copy(&rt->conf, cd);
	if (rc) {
		free(rt);
		return rc;
	}
	hl_uri_redact(cd->origin, false, shown, sizeof(shown));
	rc = hl_origin_open(cd->origin, &opts, &origin);
	if (rc) {
		daemon_disk_free(rt);
		return daemon_fail(err, errlen, rc, "disk %s: cannot open origin %s: %s", cd->name,
		                   shown, strerror(-rc));
	}
	backend = origin; /* the one with the ownership ops (several gateways) */
	/* Before any cache sees it: another disk's origin under another URL (cache-engine.md) */
	if (hl_origin_data_id(origin, rt->data_id, sizeof(rt->data_id), NULL))
		rt->data_id[0] = '\0';
	rc = disk_alias_check(d, p, cd, rt->data_id, err, errlen);
	if (rc) {
		hl_origin_close(origin);
		daemon_disk_free(rt);
		return rc;
	}
	/* Before any wrapper: what names the origin's data for every gateway (rbd: the image). */
	shared_ident = hl_origin_identity(origin, ident, sizeof(ident)) == 0;
	rc = daemon_wrap_origin(cd, &origin);
	if (rc) {
		hl_origin_close(origin);
		daemon_disk_free(rt);
		return daemon_fail(err, errlen, rc, "disk %s: throttle: %s", cd->name,
		                   strerror(-rc));
	}
	/* Before any I/O: other caches' blocks of this origin would miss its writes. */
	rc = daemon_caches_disown(cd, origin, err, errlen);
	if (rc) {
		hl_origin_close(origin);
		daemon_disk_free(rt);
		return rc;
	}
	if (cd->cache) {
		rc = daemon_attach_cache(cd, &origin, err, errlen);
		if (rc) {
			hl_origin_close(origin);
			daemon_disk_free(rt);
			return rc;
		}
		rt->cached = origin;
	}
	/* topmost, so it counts every command the LU issues, cached or not */
	rc = hl_origin_count_wrap(origin, &counted, &rt->counters);
	if (rc) {
		hl_origin_close(origin);
		daemon_disk_free(rt);
		return daemon_fail(err, errlen, rc, "disk %s: out of memory", cd->name);
	}
	origin = counted;
	memset(&lc, 0, sizeof(lc));
	lc.name = cd->name;
	lc.block_size = cd->block_size;
	lc.read_only = cd->read_only || origin->read_only;
	lc.write_cache = true; /* buffered origins: SYNCHRONIZE CACHE and FUA matter */
	daemon_disk_identity(d->install_id, cd->name, shared_ident ? ident : NULL, cd->serial,
			     cd->naa, lc.naa, lc.serial);
	lc.state_dir = d->conf->state_dir; /* APTPL persistent reservations (scsi) */
	rc = hl_lu_create(&lc, origin, &rt->lu);
	if (rc) {
		uint64_t size = origin->size;
		hl_origin_close(origin);
		daemon_disk_free(rt);
		return daemon_fail(
		    err, errlen, rc,
		    "disk %s: %s (origin size %llu is not a whole number of %u-byte blocks?)",
		    cd->name, strerror(-rc), (unsigned long long)size, cd->block_size);
	}
	if (d->conf->gateway) {
		rc = disk_owner_start(d, rt, backend, err, errlen);
		if (rc) {
			daemon_disk_free(rt);
			return rc;
		}
		disk_pr_share(d, rt, backend);
		disk_shadow(rt, cd);
	}
	HL_NOTICE("daemon", "disk %s: %s, %llu blocks of %u bytes%s", cd->name, shown,
		  (unsigned long long)hl_lu_num_blocks(rt->lu), cd->block_size,
		  lc.read_only ? ", read-only" : "");
	*out = rt;
	return 0;
}

/* ---- targets ---- */

static struct target_rt *target_find(struct daemon *d, const char *name)
{
	struct target_rt *t;

	hl_list_for_each_entry(t, &d->targets, link) {
		if (strcmp(t->name, name) == 0)
			return t;
	}
	return NULL;
}

static void fill_chap(struct hl_iscsi_chap *c, const char *user, const char *secret)
{
	memset(c, 0, sizeof(*c));
	if (user && secret) {
		hl_strlcpy(c->user, user, sizeof(c->user));
		hl_strlcpy(c->secret, secret, sizeof(c->secret));
	}
}

static void target_config(const struct hl_conf_target *t, const struct hl_scsi_lun_map *map,
			  struct hl_iscsi_target_config *tc)
{
	memset(tc, 0, sizeof(*tc));
	tc->name = t->name;
	tc->alias = t->alias;
	tc->luns = map;
	tc->allow_all = t->allow_all;
	tc->allow = (const char *const *)t->allow;
	tc->n_allow = t->n_allow;
	fill_chap(&tc->chap, t->chap_user, t->chap_secret);
	fill_chap(&tc->mutual, t->mutual_user, t->mutual_secret);
	tc->allow_target_reset = t->allow_target_reset;
}

static bool target_settings_changed(const struct hl_conf_target *a, const struct hl_conf_target *b)
{
	if (!daemon_str_eq(a->alias, b->alias) || a->allow_all != b->allow_all ||
	    a->n_allow != b->n_allow || !daemon_str_eq(a->chap_user, b->chap_user) ||
	    !daemon_str_eq(a->chap_secret, b->chap_secret) ||
	    !daemon_str_eq(a->mutual_user, b->mutual_user) ||
	    !daemon_str_eq(a->mutual_secret, b->mutual_secret) ||
	    a->allow_target_reset != b->allow_target_reset)
		return true;
	for (size_t i = 0; i < a->n_allow; i++) {
		if (strcmp(a->allow[i], b->allow[i]) != 0)
			return true;
	}
	return false;
}

/* The disk name of LUN n in t, or NULL. */
static const char *lun_disk(const struct hl_conf_target *t, uint32_t n)
{
	for (size_t i = 0; i < t->n_luns; i++) {
		if (t->luns[i].lun == n)
			return t->luns[i].disk;
	}
	return NULL;
}

/* ---- apply ---- */

struct pending_disk {
	struct disk_rt *rt;
	struct disk_rt *replaces; /* or NULL */
};

struct plan {
	struct pending_disk *disks;
	size_t n_disks;
	char **portals_added;
	size_t n_portals_added;
};

/*
 * cd's origin, opened, names data_id: refused when a disk that is open, or
 * opened earlier in this change, names it too and one of them is cached
 * while the other writes (daemon_alias_check). A disk of the same name is
 * the one cd replaces.
 */
static int disk_alias_check(struct daemon *d, const struct plan *p, const struct hl_conf_disk *cd,
			    const char *data_id, char *err, size_t errlen)
{
	struct disk_rt *rt;
	int rc;

	hl_list_for_each_entry(rt, &d->disks, link) {
		if (strcmp(rt->conf.name, cd->name) &&
		    (rc = daemon_alias_check(cd, data_id, &rt->conf, rt->data_id, err, errlen)))
			return rc;
	}
	for (size_t i = 0; i < p->n_disks; i++) {
		rt = p->disks[i].rt;
		if ((rc = daemon_alias_check(cd, data_id, &rt->conf, rt->data_id, err, errlen)))
			return rc;
	}
	return 0;
}

static void plan_rollback(struct daemon *d, struct plan *p)
{
	for (size_t i = 0; i < p->n_disks; i++)
		daemon_disk_free(p->disks[i].rt);
	for (size_t i = 0; i < p->n_portals_added; i++)
		hl_iscsi_portal_remove(d->server, p->portals_added[i]);
	free(p->disks);
	free(p->portals_added);
	memset(p, 0, sizeof(*p));
}

static bool in_list(char **v, size_t n, const char *s)
{
	for (size_t i = 0; i < n; i++) {
		if (strcmp(v[i], s) == 0)
			return true;
	}
	return false;
}

/* Does any running target with sessions map disk `name`? Sets *who. */
static unsigned disk_sessions(struct daemon *d, const char *name, const char **who)
{
	const struct hl_conf *cur = d->conf;

	for (size_t i = 0; i < cur->n_targets; i++) {
		const struct hl_conf_target *t = &cur->targets[i];
		for (size_t j = 0; j < t->n_luns; j++) {
			if (strcmp(t->luns[j].disk, name) != 0)
				continue;
			unsigned n = hl_iscsi_target_sessions(d->server, t->name);
			if (n) {
				*who = t->name;
				return n;
			}
		}
	}
	return 0;
}

static int restart_only(const struct hl_conf *cur, const struct hl_conf *next, char *err,
			size_t errlen)
{
	if (!daemon_str_eq(cur->state_dir, next->state_dir))
		return daemon_fail(err, errlen, -EINVAL,
		                   "state_dir cannot change while running; restart hotlund");
	if (!daemon_str_eq(cur->control_socket, next->control_socket))
		return daemon_fail(err, errlen, -EINVAL,
		                   "control_socket cannot change while running; restart hotlund");
	if (cur->threads != next->threads)
		return daemon_fail(err, errlen, -EINVAL,
		                   "threads cannot change while running; restart hotlund");
	if (!daemon_str_eq(cur->cpus, next->cpus))
		return daemon_fail(err, errlen, -EINVAL,
		                   "cpus cannot change while running; restart hotlund");
	if (cur->gateway != next->gateway || cur->n_gateways != next->n_gateways ||
	    memcmp(cur->gateways, next->gateways, cur->n_gateways * sizeof(cur->gateways[0])))
		return daemon_fail(
		    err, errlen, -EINVAL,
		    "gateway and gateways cannot change while running; restart hotlund "
		    "(its disks are handed to a peer first)");
	if (cur->gateway_lease_ms != next->gateway_lease_ms ||
	    cur->gateway_dead_ms != next->gateway_dead_ms)
		return daemon_fail(err, errlen, -EINVAL,
		                   "gateway_lease_ms and gateway_dead_ms cannot change while running "
		                   "(every gateway must use the same values); restart hotlund");
	return 0;
}

static int prepare(struct daemon *d, const struct hl_conf *next, bool force, struct plan *p,
		   char *err, size_t errlen)
{
	const struct hl_conf *cur = d->conf;
	const char *who = NULL;
	int rc;

	rc = restart_only(cur, next, err, errlen);
	if (rc)
		return rc;

	/* targets that go away, or lose/change LUNs, while initiators use them */
	for (size_t i = 0; i < cur->n_targets && !force; i++) {
		const struct hl_conf_target *t = &cur->targets[i];
		const struct hl_conf_target *nt = hl_conf_find_target(next, t->name);
		unsigned n = hl_iscsi_target_sessions(d->server, t->name);
		if (!n)
			continue;
		if (!nt)
			return daemon_fail(
			    err, errlen, -EBUSY,
			    "target %s has %u session(s); log them out first or force", t->name, n);
		for (size_t j = 0; j < t->n_luns; j++) {
			const char *nd = lun_disk(nt, t->luns[j].lun);
			if (!daemon_str_eq(nd, t->luns[j].disk))
				return daemon_fail(
				    err, errlen, -EBUSY,
				    "LUN %u of target %s is in use (%u session(s)); with force it "
				    "goes "
				    "and the sessions are told (REPORTED LUNS DATA HAS CHANGED)",
				    t->luns[j].lun, t->name, n);
		}
	}

	rc = daemon_caches_open(next, err, errlen);
	if (rc)
		return rc;
	p->disks = calloc(next->n_disks + 1, sizeof(*p->disks));
	p->portals_added = calloc(next->n_portals + 1, sizeof(char *));
	if (!p->disks || !p->portals_added)
		return -ENOMEM;

	for (size_t i = 0; i < next->n_disks; i++) {
		const struct hl_conf_disk *nd = &next->disks[i];
		struct disk_rt *old = daemon_disk_find(d, nd->name);
		if (old && !disk_changed(&old->conf, nd)) {
			old->conf.shadow_rate = nd->shadow_rate; /* applied at once */
			old->conf.shadow_rate_set = nd->shadow_rate_set;
			disk_shadow(old, nd);
			continue;
		}
		if (old && !force && disk_sessions(d, nd->name, &who))
			return daemon_fail(
			    err, errlen, -EBUSY,
			    "disk %s is in use by target %s; its origin, block size or cache "
			    "can change only without sessions (or force)",
			    nd->name, who);
		struct pending_disk *pd = &p->disks[p->n_disks];
		rc = disk_open(d, p, nd, &pd->rt, err, errlen);
		if (rc)
			return rc;
		pd->replaces = old;
		p->n_disks++;
	}

	for (size_t i = 0; i < next->n_portals; i++) {
		char bound[128];
		if (in_list(cur->portals, cur->n_portals, next->portals[i]))
			continue;
		rc = hl_iscsi_portal_add(d->server, next->portals[i], 1, bound, sizeof(bound));
		if (rc)
			return daemon_fail(err, errlen, rc, "portal %s: %s", next->portals[i],
			                   strerror(-rc));
		p->portals_added[p->n_portals_added++] = next->portals[i];
		HL_NOTICE("daemon", "listening on %s", bound);
	}
	return 0;
}

/* A disk that initiators may still have commands on is kept until exit. */
static void disk_drop(struct daemon *d, struct disk_rt *rt, bool maybe_busy)
{
	hl_list_del(&rt->link);
	if (maybe_busy) {
		/* kept for its sessions, but a shared disk is handed to a peer now */
		if (rt->owner)
			hl_owner_handover(rt->owner, 0);
		hl_list_add_tail(&d->retired_disks, &rt->link);
		return;
	}
	daemon_disk_close_later(d, rt); /* closing.c: off the control reactor, all at once */
}

static struct hl_lu *lu_of(struct daemon *d, const char *disk)
{
	struct disk_rt *rt = disk ? daemon_disk_find(d, disk) : NULL;
	return rt ? rt->lu : NULL;
}

/*
 * Target nt's LUN map now shows its new inventory (changed[n]: slot n got
 * another LU or none): every session of the target hears REPORTED LUNS DATA
 * HAS CHANGED on its next command. Sessions stay logged in; a removed LUN
 * answers LOGICAL UNIT NOT SUPPORTED from now on, and commands already
 * running on it finish (its LU stays open while the disk is configured, or
 * until exit when the disk went too: disk_drop).
 */
static void luns_changed(struct daemon *d, const struct hl_conf_target *ot,
			 const struct hl_conf_target *nt, const bool *changed)
{
	unsigned n_sess = hl_iscsi_target_luns_changed(d->server, nt->name);
	const char *by = d->change_by[0] ? d->change_by : "start-up";

	for (uint32_t n = 0; n < HL_SCSI_MAX_LUNS; n++) {
		if (!changed[n])
			continue;
		const char *was = ot ? lun_disk(ot, n) : NULL, *now = lun_disk(nt, n);
		if (!now)
			HL_NOTICE("daemon",
				  "target %s: LUN %u (disk %s) removed by %s; %u session(s) stay "
				  "logged in: LUN %u answers LOGICAL UNIT NOT SUPPORTED, the other "
				  "LUNs report REPORTED LUNS DATA HAS CHANGED",
				  nt->name, n, was ? was : "?", by, n_sess, n);
		else if (!was)
			HL_NOTICE("daemon",
				  "target %s: LUN %u (disk %s) added by %s; %u session(s) told "
				  "REPORTED LUNS DATA HAS CHANGED",
				  nt->name, n, now, by, n_sess);
		else
			HL_NOTICE("daemon",
				  "target %s: LUN %u is now disk %s (was %s%s) by %s; %u session(s) "
				  "told REPORTED LUNS DATA HAS CHANGED",
				  nt->name, n, now, was, strcmp(was, now) ? "" : ", reopened", by,
				  n_sess);
	}
}

static int commit(struct daemon *d, const struct hl_conf *next, struct plan *p, bool force,
		  char *err, size_t errlen)
{
	const struct hl_conf *cur = d->conf;
	int rc = 0;

	/* 1. disks: the new ones become findable; replaced ones step aside */
	for (size_t i = 0; i < p->n_disks; i++) {
		struct pending_disk *pd = &p->disks[i];
		if (pd->replaces) {
			/* maps still point at the old LU until step 2; step 5 closes it */
			hl_list_del(&pd->replaces->link);
			hl_list_add_tail(&d->retired_disks, &pd->replaces->link);
			/*
			 * A shared disk: the old one hands the disk over (its commands
			 * drain, it stays a standby for its sessions), so the new one,
			 * which started as a standby, takes it at its next look.
			 */
			if (pd->replaces->owner)
				hl_owner_handover(pd->replaces->owner, 0);
		}
		hl_list_add_tail(&d->disks, &pd->rt->link);
		pd->rt = NULL;
	}

	/* 2. targets: removed, changed, added */
	struct target_rt *t, *tmp;
	hl_list_for_each_entry_safe(t, tmp, &d->targets, link) {
		if (hl_conf_find_target(next, t->name))
			continue;
		int r = hl_iscsi_target_remove(d->server, t->name, true);
		if (r && r != -ENOENT)
			HL_WARN("daemon", "target %s: %s", t->name, strerror(-r));
		hl_list_del(&t->link);
		hl_list_add_tail(&d->retired_targets, &t->link);
		HL_NOTICE("daemon", "target %s removed", t->name);
	}
	for (size_t i = 0; i < next->n_targets; i++) {
		const struct hl_conf_target *nt = &next->targets[i];
		const struct hl_conf_target *ot = hl_conf_find_target(cur, nt->name);
		struct hl_iscsi_target_config tc;

		t = target_find(d, nt->name);
		if (!t) {
			t = calloc(1, sizeof(*t));
			if (!t || !(t->name = strdup(nt->name)) ||
			    !(t->map = calloc(1, sizeof(*t->map)))) {
				if (t)
					free(t->name);
				free(t);
				rc = daemon_fail(err, errlen, -ENOMEM,
				                 "out of memory adding target %s", nt->name);
				continue;
			}
			for (size_t j = 0; j < nt->n_luns; j++)
				t->map->lu[nt->luns[j].lun] = lu_of(d, nt->luns[j].disk);
			target_config(nt, t->map, &tc);
			int r = hl_iscsi_target_add(d->server, &tc);
			explicit_bzero(&tc,
			               sizeof(tc)); /* its CHAP secrets: the server has its copy */
			if (r) {
				rc = daemon_fail(err, errlen, r, "target %s: %s", nt->name,
				                 strerror(-r));
				free(t->map);
				free(t->name);
				free(t);
				continue;
			}
			hl_list_add_tail(&d->targets, &t->link);
			HL_NOTICE("daemon", "target %s: %zu LUN(s)%s%s%s", nt->name, nt->n_luns,
				  nt->chap_user ? ", CHAP" : "", nt->mutual_user ? " (mutual)" : "",
				  nt->allow_all || nt->n_allow ? ""
							       : "; no initiator allowed yet (allow)");
			continue;
		}
		/* LUN map edited in place: each slot is one pointer, stored atomically */
		bool changed[HL_SCSI_MAX_LUNS] = {false};
		bool any = false;
		for (uint32_t n = 0; n < HL_SCSI_MAX_LUNS; n++) {
			struct hl_lu *lu = lu_of(d, lun_disk(nt, n));
			if (__atomic_load_n(&t->map->lu[n], __ATOMIC_RELAXED) != lu) {
				__atomic_store_n(&t->map->lu[n], lu, __ATOMIC_RELEASE);
				changed[n] = any = true;
			}
		}
		if (any)
			luns_changed(d, ot, nt, changed);
		if (ot && target_settings_changed(ot, nt)) {
			target_config(nt, t->map, &tc);
			int r = hl_iscsi_target_update(d->server, &tc);
			explicit_bzero(&tc, sizeof(tc));
			if (r)
				rc = daemon_fail(err, errlen, r, "target %s: %s", nt->name,
				                 strerror(-r));
			else
				HL_NOTICE("daemon", "target %s: settings changed", nt->name);
		}
	}

	/* 3. portals that went away */
	for (size_t i = 0; i < cur->n_portals; i++) {
		if (in_list(next->portals, next->n_portals, cur->portals[i]))
			continue;
		int r = hl_iscsi_portal_remove(d->server, cur->portals[i]);
		if (r)
			HL_WARN("daemon", "portal %s: %s", cur->portals[i], strerror(-r));
	}

	/* 4. disks no longer configured */
	struct disk_rt *rt, *rtmp;
	hl_list_for_each_entry_safe(rt, rtmp, &d->disks, link) {
		if (hl_conf_find_disk(next, rt->conf.name))
			continue;
		const char *who;
		disk_drop(d, rt, force && disk_sessions(d, rt->conf.name, &who) > 0);
	}
	/* 5. replaced disks nobody could have used are closed now */
	hl_list_for_each_entry_safe(rt, rtmp, &d->retired_disks, link) {
		const char *who;
		if (!daemon_disk_find(d, rt->conf.name) || disk_sessions(d, rt->conf.name, &who))
			continue;
		hl_list_del(&rt->link);
		HL_NOTICE("daemon", "disk %s: previous origin closing", rt->conf.name);
		daemon_disk_close_later(d, rt);
	}

	if (next->log_level != cur->log_level)
		hl_log_level = next->log_level;
	if (!daemon_str_eq(cur->discovery_chap_user, next->discovery_chap_user) ||
	    !daemon_str_eq(cur->discovery_chap_secret, next->discovery_chap_secret)) {
		struct hl_iscsi_chap chap;
		daemon_discovery_chap(next, &chap);
		hl_iscsi_server_set_discovery_chap(d->server, &chap);
		explicit_bzero(&chap, sizeof(chap));
		HL_NOTICE("daemon", "discovery CHAP %s for new discovery logins",
		          next->discovery_chap_user ? "required" : "no longer required");
	}
	if (next->write_buffer_limit != cur->write_buffer_limit) {
		struct hl_iscsi_write_stats ws;
		hl_iscsi_server_set_write_limit(d->server, next->write_buffer_limit);
		hl_iscsi_write_stats(d->server, &ws);
		HL_NOTICE("daemon", "write buffer limit %llu bytes (%llu per connection)%s",
		          (unsigned long long)ws.limit, (unsigned long long)ws.conn_limit,
		          next->write_buffer_limit ? "" : ", the default from physical memory");
	}
	if (next->scratch_buffer_limit != cur->scratch_buffer_limit) {
		/* buffers already held keep their charge; new ones see the new limit */
		hl_scsi_scratch_set_limit(next->scratch_buffer_limit);
		HL_NOTICE("daemon", "scratch buffer limit %llu bytes%s",
		          (unsigned long long)daemon_scratch_limit(next),
		          next->scratch_buffer_limit ? "" : " (the default)");
	}
	atomic_store(&d->logout_timeout_s, daemon_logout_timeout(next));
	if (d->ctl) /* on the control reactor: changes come from it */
		hl_ctl_server_set_idle_timeout(d->ctl, daemon_control_idle_ms(next));
	if (daemon_send_uring(next) != daemon_send_uring(cur))
		hl_iscsi_server_set_send_uring(d->server, daemon_send_uring(next));
	if (daemon_poll_us(next) != daemon_poll_us(cur))
		for (unsigned i = 0; i < d->n_reactors; i++)
			hl_reactor_set_poll_us(d->reactors[i], daemon_poll_us(next));
	struct hl_iscsi_login_limits nl, cl;
	daemon_login_limits(next, &nl);
	daemon_login_limits(cur, &cl);
	if (memcmp(&nl, &cl, sizeof(nl)) != 0)
		hl_iscsi_server_set_login_limits(d->server, &nl);
	daemon_exporter_apply(d, cur, next);
	/* 6. cache settings that change while running (write-backs: blocking) */
	int r = daemon_caches_apply(next, err, errlen);
	if (r)
		rc = r;
	return rc;
}

int daemon_apply(struct daemon *d, struct hl_conf *next, bool force, char *err, size_t errlen)
{
	struct plan p = {0};
	int rc;

	err[0] = '\0';
	rc = daemon_closing_busy(d, err, errlen);
	if (rc) {
		d->change_by[0] = '\0';
		hl_conf_free(next);
		return rc;
	}
	rc = prepare(d, next, force, &p, err, errlen);
	if (rc) {
		d->change_by[0] = '\0';
		if (!err[0])
			snprintf(err, errlen, "%s", strerror(-rc));
		plan_rollback(d, &p);
		hl_conf_free(next);
		return rc;
	}
	rc = commit(d, next, &p, force, err, errlen);
	d->change_by[0] = '\0';
	free(p.disks);
	free(p.portals_added);
	hl_conf_free(d->conf);
	d->conf = next; /* even after a partial failure: it names what was attempted */
	return rc;
}

void daemon_discovery_chap(const struct hl_conf *c, struct hl_iscsi_chap *out)
{
	memset(out, 0, sizeof(*out));
	if (c->discovery_chap_user && c->discovery_chap_secret) {
		hl_strlcpy(out->user, c->discovery_chap_user, sizeof(out->user));
		hl_strlcpy(out->secret, c->discovery_chap_secret, sizeof(out->secret));
	}
}

struct hl_conf *daemon_conf_skeleton(const struct hl_conf *conf)
{
	struct hl_conf *c;
	char err[256];

	if (hl_conf_dup(conf, &c))
		return NULL;
	while (c->n_targets)
		hl_conf_section_remove(c, HL_CONF_TARGET, c->targets[0].name, err, sizeof(err));
	while (c->n_disks)
		hl_conf_section_remove(c, HL_CONF_DISK, c->disks[0].name, err, sizeof(err));
	while (c->n_caches)
		hl_conf_section_remove(c, HL_CONF_CACHE, c->caches[0].name, err, sizeof(err));
	while (c->n_portals)
		hl_conf_unset(c, HL_CONF_GLOBAL, NULL, "portal", c->portals[0], err, sizeof(err));
	return c;
}

void daemon_release(struct daemon *d)
{
	struct disk_rt *rt, *rtmp;
	struct target_rt *t, *tmp;

	hl_list_for_each_entry_safe(rt, rtmp, &d->disks, link) {
		hl_list_del(&rt->link);
		daemon_disk_free(rt);
	}
	hl_list_for_each_entry_safe(rt, rtmp, &d->retired_disks, link) {
		hl_list_del(&rt->link);
		daemon_disk_free(rt);
	}
	hl_list_for_each_entry_safe(t, tmp, &d->targets, link) {
		hl_list_del(&t->link);
		free(t->map);
		free(t->name);
		free(t);
	}
	hl_list_for_each_entry_safe(t, tmp, &d->retired_targets, link) {
		hl_list_del(&t->link);
		free(t->map);
		free(t->name);
		free(t);
	}
}
