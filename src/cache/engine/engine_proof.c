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
		if (!e->inner || atomic_load(&e->proofs_held) ||
		    hl_origin_proof_take(e->inner, e->tag, false, proof, sizeof(proof)))
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
	if (write && engine_map_write(c, "open") == 0) {
		for (size_t i = 0; i < c->n_ents; i++)
			if (c->ents[i]->inner && c->ents[i]->proof)
				hl_origin_proof_release(c->ents[i]->inner, c->ents[i]->tag,
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
	/*
	 * One proof at a time (the meta thread's too). Bounded: a holder stuck
	 * in a device call (the metadata thread took the lock as soon as the
	 * close's detach let it go) leaves no proof to take: the map is sealed.
	 * (Such a holder never has inner: e->inner was cleared under the lock.)
	 */
	if (!engine_sync_lock_within(c, e->name))
		return;
	rc = hl_origin_proof_take(inner, e->tag, true, proof, sizeof(proof));
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
		if (ok && engine_map_write(c, "open") == 0)
			hl_origin_proof_release(inner, e->tag, proof);
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

int hl_cache_revalidate(struct hl_origin *o)
{
	struct co_priv *co;
	struct hl_cache *c;
	struct map_ent *e;
	struct hl_range_list chg = {0};
	char why[HL_ORIGIN_WHY_MAX] = "", tag[64];
	char *proof = NULL;
	bool nomem = false, proof_gone;
	int prc, rc = 0;

	if (!o || o->ops != &cache_origin_ops)
		return -EINVAL;
	co = co_of(o);
	c = co->c;
	e = co->ent;
	engine_shadow_lock(c, e); /* no proof move of the shadow meanwhile */
	pthread_mutex_lock(&c->lock);
	if (e->proof && !(proof = strdup(e->proof)))
		nomem = true;
	engine_ent_tag(c, e->id, tag);
	pthread_mutex_unlock(&c->lock);
	prc = engine_proof_changes(co->inner, tag, proof, nomem, &chg, why, sizeof(why));
	free(proof);
	pthread_mutex_lock(&c->sync_lock);
	pthread_mutex_lock(&c->lock);
	proof_gone = engine_drop_changes(c, e, prc, &chg, "ownership: ", why);
	uint64_t after = e->warm_kept, dropped = e->warm_dropped;
	pthread_mutex_unlock(&c->lock);
	/* the proofs_held flag stays set until the dropped blocks' records are written */
	/*
	 * Before the disk is served: the records of what was dropped must stop
	 * claiming it, after any invalidation, not only when blocks went (as at
	 * attach): a write inside a block clears sectors and keeps the slot, and
	 * nothing else syncs for it; a crash after the metadata thread recorded a
	 * newer proof would bring them back valid under a proof that never lists
	 * that write again.
	 */
	if ((prc || chg.n) && !c->dead) /* the other disks serve meanwhile: under c->lock */
		rc = cache_meta_sync_locked(c->dev, &c->layout, c->core, &c->lock);
	if (!rc && proof_gone)
		rc = engine_map_write(c, "open");
	if (!rc)
		atomic_store(&e->proofs_held, false); /* coherent: proofs from now on */
	pthread_mutex_unlock(&c->sync_lock);
	engine_shadow_unlock(c, e);
	free(chg.v);
	HL_NOTICE("cache",
	          "cache %s: disk %s: ownership gained: kept %llu block(s), dropped %llu (%s%s)",
	          c->name, e->name, (unsigned long long)after, (unsigned long long)dropped,
	          prc ? "cold: " : "", why);
	if (rc)
		HL_ERR("cache", "cache %s: disk %s: cannot record the dropped blocks: %s", c->name,
		       e->name, strerror(-rc));
	return rc;
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
