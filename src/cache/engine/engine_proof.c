/*
 * engine_proof.c - the warm restart proofs of a cache's disks: the proof
 * the meta thread records while a disk is quiet (engine_proofs_refresh),
 * the final proof at detach, the check of what changed since a proof
 * (engine_proof_changes) and the drop of it from the cache
 * (engine_drop_changes) that attach and the ownership revalidation share,
 * and hl_cache_revalidate / hold_proofs / proof_now for the owner module.
 *
 * A disk's cached blocks match its origin as long as only this gateway
 * writes it (the ordering rules of docs/cache-format.md). Across a stop,
 * somebody else may have written it; the origin proves what did not
 * change (hl_origin_ops.proof_take/check), and attach drops the rest.
 * The proof may be older than the records: it only has to show that
 * nobody wrote the origin after it was taken, and any write after it
 * (ours included) makes the check fail or report the range.
 *
 * Shared state: engine_internal.h.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/engine/engine_internal.h"
#include "hotlun/log.h"
#include "hotlun/util.h"

/* The tag that names this disk's marks in its origin: the cache's uuid and the LUN id. */
void engine_ent_tag(const struct hl_cache *c, uint16_t id, char tag[64])
{
	const uint8_t *u = c->layout.uuid;

	snprintf(tag, 64, "%02x%02x%02x%02x%02x%02x%02x%02x-%u", u[0], u[1], u[2], u[3], u[4], u[5],
	         u[6], u[7], id);
}

/* Replace *dst with a copy of src. @return false without memory (*dst unchanged). */
static bool str_set(char **dst, const char *src)
{
	char *n = strdup(src);

	if (!n)
		return false;
	free(*dst);
	*dst = n;
	return true;
}

/*
 * A proof's call on the origin while sync_lock is held: marked, so that a
 * takeover waiting for the lock tells a slow cluster from a stuck device.
 */
static int proof_take_locked(struct hl_cache *c, struct hl_origin *inner, const char *tag,
                             bool final, char *proof, size_t len)
{
	int rc;

	atomic_fetch_add(&c->sync_origin, 1);
	rc = hl_origin_proof_take(inner, tag, final, proof, len);
	atomic_fetch_sub(&c->sync_origin, 1);
	return rc;
}

static void proof_release_locked(struct hl_cache *c, struct hl_origin *inner, const char *tag,
                                 const char *proof)
{
	atomic_fetch_add(&c->sync_origin, 1);
	hl_origin_proof_release(inner, tag, proof);
	atomic_fetch_sub(&c->sync_origin, 1);
}

/*
 * Periodic, meta thread: a proof that the origin gave twice in a row (it was
 * quiet for one interval) is recorded, so that a crash after writes stopped
 * restarts warm. Holding sync_lock keeps the disk attached meanwhile.
 */
void engine_proofs_refresh(struct hl_cache *c)
{
	char proof[HL_ORIGIN_PROOF_MAX];
	bool write = false;

	pthread_mutex_lock(&c->sync_lock);
	for (size_t i = 0; i < c->n_ents; i++) {
		struct map_ent *e = c->ents[i];
		if (!e->inner || atomic_load(&e->proofs_held) || e->disowned ||
		    proof_take_locked(c, e->inner, e->tag, false, proof, sizeof(proof)))
			continue;
		if (e->proof && !strcmp(e->proof, proof)) {
			free(e->cand);
			e->cand = NULL;
			continue;
		}
		if (!e->cand || strcmp(e->cand, proof)) {
			str_set(&e->cand, proof);
			continue;
		}
		pthread_mutex_lock(&c->lock);
		free(e->proof);
		e->proof = e->cand;
		pthread_mutex_unlock(&c->lock);
		e->cand = NULL;
		write = true;
	}
	/*
	 * (a map that lags, its last write failed or a superblock was written
	 * since, is written again: a tick repairs it)
	 */
	if ((write || engine_map_lags(c)) && engine_map_write(c, "open") == 0) {
		for (size_t i = 0; i < c->n_ents; i++)
			if (c->ents[i]->inner && c->ents[i]->proof)
				proof_release_locked(c, c->ents[i]->inner, c->ents[i]->tag,
				                     c->ents[i]->proof);
	}
	pthread_mutex_unlock(&c->sync_lock);
}

void engine_proof_final(struct hl_cache *c, struct map_ent *e, struct hl_origin *inner)
{
	char proof[HL_ORIGIN_PROOF_MAX];
	int rc;

	if (atomic_load(&e->proofs_held))
		return; /* not ours: the cache may not match; the last proof stays */
	if (e->disowned)
		return; /* written without this cache from now on (hl_cache_disown) */
	/*
	 * One proof at a time (the meta thread's too). Bounded: a holder stuck
	 * in a device call (the metadata thread took the lock as soon as the
	 * close's detach let it go) leaves no proof to take: the map is sealed.
	 * (Such a holder never has inner: e->inner was cleared under the lock.)
	 */
	if (!engine_sync_lock_within(c, e->name))
		return;
	rc = proof_take_locked(c, inner, e->tag, true, proof, sizeof(proof));
	free(e->cand);
	e->cand = NULL;
	if (rc) {
		if (!e->proof)
			HL_NOTICE("cache",
			          "cache %s: disk %s: %s: its cached blocks will be dropped at "
			          "the next start",
			          c->name, e->name,
			          rc == -EOPNOTSUPP ? "the origin cannot prove itself unchanged "
			                              "(exclusive = yes declares it)"
			                            : "no proof of the origin");
	} else if (!c->dead && !atomic_load(&c->failed) && (!e->proof || strcmp(e->proof, proof))) {
		pthread_mutex_lock(&c->lock);
		bool ok = str_set(&e->proof, proof);
		pthread_mutex_unlock(&c->lock);
		rc = ok ? engine_map_write(c, "open") : -ENOMEM;
		if (rc == 0)
			proof_release_locked(c, inner, e->tag, proof);
		else if (rc == -ETIMEDOUT)
			/* nothing released: the map says the older proof, or this one */
			HL_WARN("cache",
			        "cache %s: disk %s: its final proof may not be in the map (it does "
			        "not answer): a start trusts only the proof the map holds",
			        c->name, e->name);
	}
	pthread_mutex_unlock(&c->sync_lock);
}

/*
 * Ask inner what changed since `proof` (NULL: no proof) into chg. A failed
 * allocation anywhere, or no proof at all, counts as "cannot tell".
 * @return 0 (chg lists the changes) or -ESTALE (drop everything); why set.
 */
int engine_proof_changes(struct hl_origin *inner, const char *tag, const char *proof, bool nomem,
                         struct hl_range_list *chg, char *why, size_t whylen)
{
	int prc = hl_origin_proof_check(inner, tag, proof, hl_range_list_add, chg, why, whylen);

	if (!prc && (chg->over || nomem)) {
		prc = -ESTALE;
		snprintf(why, whylen, "out of memory for the changed ranges");
	}
	if (!proof && !prc)
		prc = -ESTALE; /* a backend must never vouch for no proof */
	return prc;
}

/*
 * c->lock held: drop from e what engine_proof_changes found (everything when prc),
 * a proof that proves nothing any more included, and record the outcome in
 * e's warm_* statistics ("PREFIX" + why). @return whether e's proof went.
 */
bool engine_drop_changes(struct hl_cache *c, struct map_ent *e, int prc,
                         const struct hl_range_list *chg, const char *prefix, const char *why)
{
	uint64_t before = hl_cache_core_lun_blocks(c->core, e->id), after;
	bool proof_gone = prc && e->proof;

	/* (in chunks: the other disks' reactors take the lock between them) */
	if (prc)
		hl_cache_core_invalidate_yield(c->core, e->id, 0, UINT64_MAX, engine_lock_yield, c);
	for (size_t i = 0; !prc && i < chg->n; i++)
		hl_cache_core_invalidate_yield(c->core, e->id, chg->v[i].off, chg->v[i].len,
		                               engine_lock_yield, c);
	after = hl_cache_core_lun_blocks(c->core, e->id);
	if (proof_gone) {
		free(e->proof);
		e->proof = NULL;
	}
	e->warm_checked = true;
	e->warm_kept = after;
	e->warm_dropped = before - after;
	snprintf(e->warm_why, sizeof(e->warm_why), "%s%s", prefix, why);
	return proof_gone;
}

/* hl_cache_revalidate's records step (engine_run_within): what the diff found, for the drop. */
struct reval {
	struct hl_cache *c;
	struct map_ent *e;
	int prc;
	struct hl_range_list chg;
	char why[HL_ORIGIN_WHY_MAX];
	atomic_bool locked; /* the step has sync_lock */
};

/* engine_run_within_more: still waiting for a holder of sync_lock in a call on an origin? */
static bool reval_waits_origin(void *arg)
{
	struct reval *r = arg;

	return !atomic_load(&r->locked) && atomic_load(&r->c->sync_origin) > 0;
}

static int reval_records(void *arg)
{
	struct reval *r = arg;
	struct hl_cache *c = r->c;
	struct map_ent *e = r->e;
	bool proof_gone;
	int rc = 0;

	pthread_mutex_lock(&c->sync_lock);
	atomic_store(&r->locked, true);
	if (atomic_load(&c->meta_stuck)) {
		/* the takeover gave up on this step (or the lock's holder was found stuck) */
		pthread_mutex_unlock(&c->sync_lock);
		free(r->chg.v);
		return -ETIMEDOUT;
	}
	pthread_mutex_lock(&c->lock);
	proof_gone = engine_drop_changes(c, e, r->prc, &r->chg, "ownership: ", r->why);
	pthread_mutex_unlock(&c->lock);
	free(r->chg.v);
	/* the proofs_held flag stays set until the dropped blocks' records are written */
	/*
	 * Before the disk is served: the records of what was dropped must stop
	 * claiming it, after any invalidation, not only when blocks went (as at
	 * attach): a write inside a block clears sectors and keeps the slot, and
	 * nothing else syncs for it; a crash after the metadata thread recorded a
	 * newer proof would bring them back valid under a proof that never lists
	 * that write again.
	 */
	if ((r->prc || r->chg.n) && !c->dead) { /* the other disks serve meanwhile: under c->lock */
		engine_meta_test_hold(c);
		rc = cache_meta_sync_locked(c->dev, &c->layout, c->core, &c->lock);
	}
	if (!rc && proof_gone)
		rc = engine_map_write(c, "open");
	/*
	 * A step that returns after the takeover gave up on it (meta_stuck,
	 * set before hl_cache_revalidate returned, so before any later
	 * hand-over's hold_proofs) changes nothing: the disk may be another
	 * gateway's again by now, and its proofs stay held.
	 */
	if (!rc && atomic_load(&c->meta_stuck))
		rc = -ETIMEDOUT;
	if (!rc)
		atomic_store(&e->proofs_held, false); /* coherent: proofs from now on */
	pthread_mutex_unlock(&c->sync_lock);
	return rc;
}

/*
 * The records could not be made to agree with the drop (rc; stuck: not
 * within the bound): the cache serves nothing any more (pass-through, as
 * after a device error) and every block of e goes from memory (an install
 * in flight is stale in the core). e->proof stays: a stuck holder of
 * sync_lock may read it (a map write); the map says "failed" anyway once
 * the metadata thread killed it or the stuck holder sealed it.
 */
static void reval_dead(struct hl_cache *c, struct map_ent *e, uint64_t before, int rc, bool stuck)
{
	if (stuck)
		engine_meta_stuck(c, e->name, "the takeover's record update did not end");
	engine_dev_error(c, e, rc);
	pthread_mutex_lock(&c->lock);
	/* (the step may have dropped some or all of them already) */
	before = HL_MAX(before, hl_cache_core_lun_blocks(c->core, e->id));
	hl_cache_core_invalidate_yield(c->core, e->id, 0, UINT64_MAX, engine_lock_yield, c);
	e->warm_checked = true;
	e->warm_kept = 0;
	e->warm_dropped = before;
	snprintf(e->warm_why, sizeof(e->warm_why),
	         "ownership: the cache's records cannot be written (%s): pass-through",
	         strerror(-rc));
	pthread_mutex_unlock(&c->lock);
	HL_WARN("cache",
	        "cache %s: disk %s: ownership gained: dropped its %llu block(s); served from the "
	        "origin (the cache's records cannot be written: %s)",
	        c->name, e->name, (unsigned long long)before, strerror(-rc));
}

int hl_cache_revalidate(struct hl_origin *o)
{
	struct co_priv *co;
	struct hl_cache *c;
	struct map_ent *e;
	struct reval *r;
	char why[HL_ORIGIN_WHY_MAX], tag[64];
	char *proof = NULL;
	bool nomem = false, shadow, done = false;
	uint64_t before;
	int prc, rc = -ETIMEDOUT;

	if (!o || o->ops != &cache_origin_ops)
		return -EINVAL;
	co = co_of(o);
	c = co->c;
	e = co->ent;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->c = c;
	r->e = e;
	shadow = engine_shadow_lock(c, e); /* no proof move of the shadow meanwhile; bounded */
	pthread_mutex_lock(&c->lock);
	before = hl_cache_core_lun_blocks(c->core, e->id);
	if (shadow && e->proof && !(proof = strdup(e->proof)))
		nomem = true;
	engine_ent_tag(c, e->id, tag);
	pthread_mutex_unlock(&c->lock);
	/* the origin's call: one that hangs is the origin's problem, not bounded here */
	if (shadow)
		r->prc = engine_proof_changes(co->inner, tag, proof, nomem, &r->chg, r->why,
		                              sizeof(r->why));
	free(proof);
	prc = r->prc;
	snprintf(why, sizeof(why), "%s", r->why);
	/*
	 * sync_lock, the drop, the record sync and the map write, bounded as
	 * one: a holder of sync_lock or a device write that does not answer
	 * leaves the step to itself (it touches c and e, which a stuck cache
	 * never frees, and takes r).
	 */
	if (shadow && !atomic_load(&c->meta_stuck)) {
		/* (the bound counts while sync_lock's holder is not in a call on an origin) */
		done = engine_run_within_more(c->drain_ms, reval_records, r, &rc, reval_waits_origin);
		r = NULL;
	}
	if (r) {
		free(r->chg.v);
		free(r);
	}
	if (!done || rc)
		reval_dead(c, e, before, done ? rc : -ETIMEDOUT, !done || rc == -ETIMEDOUT);
	if (shadow)
		engine_shadow_unlock(c, e);
	if (!done || rc)
		return 0; /* served from the origin */
	pthread_mutex_lock(&c->lock);
	uint64_t after = e->warm_kept, dropped = e->warm_dropped;
	pthread_mutex_unlock(&c->lock);
	HL_NOTICE("cache",
	          "cache %s: disk %s: ownership gained: kept %llu block(s), dropped %llu (%s%s)",
	          c->name, e->name, (unsigned long long)after, (unsigned long long)dropped,
	          prc ? "cold: " : "", why);
	return 0;
}

void hl_cache_hold_proofs(struct hl_origin *o)
{
	if (o && o->ops == &cache_origin_ops)
		atomic_store(&co_of(o)->ent->proofs_held, true);
}

void hl_cache_proof_now(struct hl_origin *o)
{
	if (!o || o->ops != &cache_origin_ops)
		return;
	engine_proof_final(co_of(o)->c, co_of(o)->ent, co_of(o)->inner);
}
