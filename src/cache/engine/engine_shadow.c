/*
 * engine_shadow.c - the warm standby (docs/gateways.md, "Warm standby"):
 * while a gateway owns a shared disk it publishes the disk's hot set (its
 * resident cache blocks, hottest first, no data) through the origin
 * (hl_origin_hot_publish); while it is a standby it reads the owner's hot
 * set and pre-reads those blocks from the origin into its own cache at a
 * bounded rate (the shadow), so that a takeover finds the cache warm.
 *
 * Never stale (ARCHITECTURE invariant 1): what the shadow reads is proven
 * by the machinery failback uses (engine_proof.c). The owner makes marks
 * (rbd: snapshots) and names the newest in its hot set. Before the standby
 * reads anything newer than its disk's proof, it moves the proof onto the
 * owner's newest mark ("a roll"): it drops from its cache what the origin
 * says changed since its current proof (everything when it cannot tell),
 * makes the dropped blocks' records durable, and only then records the new
 * mark as the disk's proof. Every block it holds after that was read after
 * the new mark was made, or survived a diff that covers every change up to
 * after it; so a takeover's hl_cache_revalidate, which diffs from that
 * proof, drops exactly what changed since. A read still in flight when a
 * roll or a revalidation drops its block is stale in the core
 * (hl_cache_core_invalidate) and never installed.
 *
 * One reactor per cache ("shadow") runs every shadow: a tick every
 * SHADOW_TICK_MS publishes (owner, every SHADOW_PUBLISH_MS) or fetches,
 * rolls and submits pre-reads (standby) within the disk's rate; the
 * blocking calls (the cluster round trips, the diff) run on it too, never
 * on a reactor that serves connections. A disk's own shadow_mu
 * (map_ent) is held for its step and by its revalidation, set-up and
 * detach (order: shadow_mu, sync_lock, lock): a takeover waits for no other
 * disk's step.
 *
 * Shared state: engine_internal.h.
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/engine/engine_internal.h"
#include "hotlun/log.h"
#include "hotlun/util.h"

#define SHADOW_TICK_MS    20
#define SHADOW_PUBLISH_MS 3000  /* the owner rewrites its hot set this often */
#define SHADOW_FETCH_MS   2000  /* a standby rereads it this often once it has caught up */
#define SHADOW_REFETCH_MS 10000 /* ... and at least this often (a new mark to move to) */
#define SHADOW_INFLIGHT   16    /* pre-reads out at once per disk */
#define SHADOW_PEEKS      4096  /* cached blocks looked at per tick and disk */
#define SHADOW_SCAN_SLOTS 65536 /* slots the hot scan walks per hold of the cache lock */
#define SHADOW_HOT_MAX    131072u

/* One disk's shadow (map_ent.sh). Counters: relaxed atomics, read by the stats. */
struct shadow_ent {
	struct hl_origin *cached; /* the disk's cached origin (engine_read's o) */
	uint64_t rate;            /* bytes/s, 0: off (atomic) */
	bool supported;           /* the origin has hot sets (rbd with gateways) */
	/* the shadow reactor's own (under the disk's shadow_mu) */
	struct hl_hot_set hs; /* the owner's hot set last read */
	uint32_t idx;         /* next entry of hs to look at */
	uint64_t fetched_ns, published_ns, tick_ns;
	double tokens;                  /* bytes the rate allows now */
	char mark[HL_ORIGIN_PROOF_MAX]; /* the mark the disk's proof was moved to, "" none */
	bool owner_last;                /* the last step was the owner's */
	/* counters and state for the stats */
	uint64_t hot_n, shadowed, origin_reads, origin_bytes, dropped, rolls, publishes;
	uint64_t published_n;
	unsigned inflight; /* atomic */
	/*
	 * atomic: 1 while roll's records step runs (from before it waits for
	 * sync_lock until it let it go), else 0; -1: a detach gave up on it
	 * (engine_shadow_detach): the step then ends without touching the
	 * disk's origins, and se is never freed (shadow_left_list).
	 */
	int records;
	struct shadow_ent *left_next;
	pthread_mutex_t state_lock;
	char state[128];
};

struct shadow_io {
	struct hl_origin_io io;
	struct hl_cache *c;
	struct shadow_ent *se;
};

struct eng_shadow {
	struct hl_reactor *r;
	struct hl_timer tick;
	atomic_bool stopping; /* no more steps (checked under each disk's shadow_mu) */
};

static uint64_t ms_since(uint64_t t0, uint64_t now)
{
	return t0 && now > t0 ? (now - t0) / 1000000 : UINT64_MAX;
}

static void set_state(struct shadow_ent *se, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void set_state(struct shadow_ent *se, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&se->state_lock);
	va_start(ap, fmt);
	vsnprintf(se->state, sizeof(se->state), fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&se->state_lock);
}

/* ---- the owner: publish ---- */

static int hot_cmp(const void *a, const void *b)
{
	const struct hl_cache_hot *x = a, *y = b;

	if (x->freq != y->freq)
		return x->freq < y->freq ? 1 : -1;
	return x->block < y->block ? -1 : x->block > y->block;
}

static void owner_step(struct hl_cache *c, struct map_ent *e, struct shadow_ent *se, uint64_t now)
{
	struct hl_cache_core_info info;
	struct hl_cache_hot *hot;
	struct hl_hot_ent *v;
	uint64_t cur = 0, cap;
	uint32_t n = 0;
	int rc;

	if (!se->owner_last) {
		/* ours now: the next stint as a standby moves its proof again */
		se->mark[0] = '\0';
		free(se->hs.v);
		free(se->hs.chg);
		memset(&se->hs, 0, sizeof(se->hs));
		se->owner_last = true;
	}
	if (!se->supported) {
		/* an origin that cannot prove what changed (a SAN) has nothing to publish for */
		set_state(se, "cold: the origin cannot prove what changed (no shadow)");
		return;
	}
	if (ms_since(se->published_ns, now) < SHADOW_PUBLISH_MS)
		return;
	se->published_ns = now;
	pthread_mutex_lock(&c->lock);
	cap = hl_cache_core_lun_blocks(c->core, e->id) + 64;
	hl_cache_core_info(c->core, &info);
	pthread_mutex_unlock(&c->lock);
	hot = malloc(cap * sizeof(*hot));
	if (!hot)
		return;
	while (cur < info.nslots && n < cap) {
		pthread_mutex_lock(&c->lock);
		n += hl_cache_core_hot_scan(c->core, e->id, &cur, SHADOW_SCAN_SLOTS, hot + n,
		                            (uint32_t)HL_MIN(cap - n, UINT32_MAX));
		pthread_mutex_unlock(&c->lock);
	}
	qsort(hot, n, sizeof(*hot), hot_cmp);
	if (n > SHADOW_HOT_MAX)
		n = SHADOW_HOT_MAX;
	v = malloc((n ? n : 1) * sizeof(*v));
	if (!v) {
		free(hot);
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		v[i].block = hot[i].block;
		v[i].freq = hot[i].freq;
	}
	free(hot);
	rc = hl_origin_hot_publish(e->inner, c->bs, v, n);
	free(v);
	if (rc == 0) {
		__atomic_store_n(&se->published_n, n, __ATOMIC_RELAXED);
		cnt_add(&se->publishes, 1);
		set_state(se, "owner: publishing %u hot block(s)", n);
	} else if (rc == -EAGAIN) {
		set_state(se, "owner: not ours yet");
	} else {
		set_state(se, "owner: cannot publish the hot set: %s", strerror(-rc));
		HL_WARN_RL("cache", "cache %s: disk %s: cannot publish the hot set: %s", c->name,
		           e->name, strerror(-rc));
	}
}

/* ---- the standby: fetch, roll, pre-read ---- */

/* c->lock held: are the sectors of [off, off+len) all cached? */
static bool range_cached(struct hl_cache *c, uint16_t id, uint64_t off, uint64_t len)
{
	uint8_t v[HL_CACHE_MAX_BLOCK / HL_CACHE_SECTOR / 8];

	for (uint64_t p = off; p < off + len;) {
		uint64_t b = p >> c->shift, bs = b << c->shift, end = HL_MIN(bs + c->bs, off + len);

		if (hl_cache_core_peek(c->core, id, b, v) == HL_CACHE_NO_SLOT)
			return false;
		for (uint64_t s = (p - bs) / SECT; s < (end - bs + SECT - 1) / SECT; s++)
			if (!(v[s / 8] >> (s % 8) & 1))
				return false;
		p = end;
	}
	return true;
}

/* The byte range of hot set entry i on a disk of size bytes; false when past the end. */
static bool ent_range(const struct hl_hot_set *hs, uint32_t i, uint64_t size, uint64_t *off,
                      uint64_t *len)
{
	uint64_t o = hs->v[i].block * (uint64_t)hs->block_size;

	if (o >= size || hs->v[i].block > UINT64_MAX / hs->block_size)
		return false;
	*off = o;
	*len = HL_MIN((uint64_t)hs->block_size, size - o);
	return true;
}

/*
 * Move the disk's proof onto the owner's mark: drop what changed since the
 * current proof (all of the disk without one), make that durable, record
 * the mark. What changed: the owner's own diff when the current proof is
 * the mark it diffed from (exact), else this gateway's (a standby may see
 * only whole objects). @return 0 or -errno (the proof stays the old one).
 */
static int roll(struct hl_cache *c, struct map_ent *e, struct shadow_ent *se,
                const struct hl_hot_set *hs)
{
	struct hl_range_list chg = {0};
	char why[HL_ORIGIN_WHY_MAX] = "";
	char *proof = NULL, *next;
	bool nomem = false, theirs;
	uint64_t before, after;
	int prc, rc = 0;

	next = strdup(hs->mark);
	if (!next)
		return -ENOMEM;
	pthread_mutex_lock(&c->lock);
	if (e->proof && !(proof = strdup(e->proof)))
		nomem = true;
	pthread_mutex_unlock(&c->lock);
	theirs = proof && hs->prev[0] && !strcmp(proof, hs->prev);
	if (theirs) {
		prc = 0;
		snprintf(why, sizeof(why), "the owner's diff since its previous mark: %u extent(s)",
		         hs->nchg);
	} else {
		prc = engine_proof_changes(e->inner, e->tag, proof, nomem, &chg, why, sizeof(why));
	}
	free(proof);
	/* (read now: once it waits for sync_lock, a detach may give up on it and clear inner) */
	uint64_t size = __atomic_load_n(&e->inner->size, __ATOMIC_ACQUIRE);
	__atomic_store_n(&se->records, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_lock(&c->sync_lock);
	pthread_mutex_lock(&c->lock);
	before = hl_cache_core_lun_blocks(c->core, e->id);
	if (prc)
		hl_cache_core_invalidate_yield(c->core, e->id, 0, UINT64_MAX, engine_lock_yield, c);
	if (theirs) {
		/*
		 * The owner's ranges come from the cluster: clamped to the disk, and
		 * more than the disk in all is the whole disk at once (one walk, not
		 * one per range).
		 */
		uint64_t total = 0;
		for (uint32_t i = 0; i < hs->nchg && total <= size; i++)
			if (hs->chg[i].off < size)
				total += HL_MIN(hs->chg[i].len, size - hs->chg[i].off);
		for (uint32_t i = 0; total <= size && i < hs->nchg; i++)
			if (hs->chg[i].off < size && hs->chg[i].len)
				hl_cache_core_invalidate_yield(
				    c->core, e->id, hs->chg[i].off,
				    HL_MIN(hs->chg[i].len, size - hs->chg[i].off), engine_lock_yield, c);
		if (total > size)
			hl_cache_core_invalidate_yield(c->core, e->id, 0, UINT64_MAX,
			                               engine_lock_yield, c);
	}
	for (size_t i = 0; !theirs && !prc && i < chg.n; i++)
		hl_cache_core_invalidate_yield(c->core, e->id, chg.v[i].off, chg.v[i].len,
		                               engine_lock_yield, c);
	after = hl_cache_core_lun_blocks(c->core, e->id);
	pthread_mutex_unlock(&c->lock);
	/*
	 * The records of what was dropped must stop claiming it before a newer
	 * proof vouches for the rest: after any invalidation, not only when
	 * blocks went (a write inside a block clears its sectors and keeps the
	 * slot; a crash before the next sync would bring them back valid under
	 * the new proof, which never lists that write again).
	 */
	bool dropped_any = prc || (theirs ? hs->nchg > 0 : chg.n > 0);
	if (dropped_any && !c->dead && !atomic_load(&c->failed))
		rc = cache_meta_sync_locked(c->dev, &c->layout, c->core, &c->lock);
	if (!rc && e->disowned) {
		rc = -ECANCELED; /* written without this cache from now on (hl_cache_disown) */
	} else if (!rc && !c->dead && !atomic_load(&c->failed)) {
		pthread_mutex_lock(&c->lock);
		free(e->proof);
		e->proof = next;
		next = NULL;
		pthread_mutex_unlock(&c->lock);
		rc = engine_map_write(c, "open");
	} else if (!rc) {
		rc = -EIO;
	}
	pthread_mutex_unlock(&c->sync_lock);
	if (__atomic_exchange_n(&se->records, 0, __ATOMIC_SEQ_CST) < 0)
		rc = -ECANCELED; /* the disk's detach gave up on this step: its origins may be gone */
	free(next);
	free(chg.v);
	cnt_add(&se->dropped, before - after);
	if (rc) {
		HL_WARN_RL("cache",
		           "cache %s: disk %s: shadow: cannot move to the owner's mark: %s",
		           c->name, e->name, strerror(-rc));
		return rc;
	}
	cnt_add(&se->rolls, 1);
	snprintf(se->mark, sizeof(se->mark), "%s", hs->mark);
	HL_INFO("cache", "cache %s: disk %s: shadow: proof moved to %s: dropped %llu (%s%s)",
	        c->name, e->name, hs->mark, (unsigned long long)(before - after),
	        prc ? "cold: " : "", why);
	return 0;
}

static void shadow_read_done(struct hl_origin_io *io, int result)
{
	struct shadow_io *sio = (struct shadow_io *)io;

	if (result == 0)
		cnt_add(&sio->se->shadowed, 1);
	__atomic_fetch_sub(&sio->se->inflight, 1, __ATOMIC_RELEASE);
	free(sio);
}

/* Count the entries of se->hs that are cached now (after a fetch). */
static uint64_t count_cached(struct hl_cache *c, struct map_ent *e, struct shadow_ent *se,
                             uint64_t size)
{
	uint64_t n = 0, off, len;

	for (uint32_t i = 0; i < se->hs.n; i++) {
		if (!(i % 4096)) {
			if (i)
				pthread_mutex_unlock(&c->lock);
			pthread_mutex_lock(&c->lock);
		}
		if (ent_range(&se->hs, i, size, &off, &len) && range_cached(c, e->id, off, len))
			n++;
	}
	if (se->hs.n)
		pthread_mutex_unlock(&c->lock);
	return n;
}

static void standby_step(struct hl_cache *c, struct map_ent *e, struct shadow_ent *se, uint64_t now)
{
	uint64_t rate = __atomic_load_n(&se->rate, __ATOMIC_RELAXED);
	uint64_t size = __atomic_load_n(&e->inner->size, __ATOMIC_ACQUIRE);
	unsigned peeks = 0;

	se->owner_last = false;
	if (!se->supported) {
		set_state(se, "cold: the origin cannot prove what changed (no shadow)");
		return;
	}
	if (!rate) {
		set_state(se, "off (shadow_rate = 0)");
		return;
	}
	if (atomic_load(&c->failed)) {
		set_state(se, "off: the cache device failed");
		return;
	}
	if (!se->hs.n ? ms_since(se->fetched_ns, now) >= SHADOW_FETCH_MS
	              : (se->idx >= se->hs.n && ms_since(se->fetched_ns, now) >= SHADOW_FETCH_MS) ||
	                    ms_since(se->fetched_ns, now) >= SHADOW_REFETCH_MS) {
		struct hl_hot_set nh;
		int rc = hl_origin_hot_fetch(e->inner, &nh);

		se->fetched_ns = now;
		if (rc) {
			set_state(se, "waiting for the owner's hot set (%s)",
			          rc == -ENOENT ? "none yet" : strerror(-rc));
			return;
		}
		free(se->hs.v);
		free(se->hs.chg);
		se->hs = nh;
		se->idx = 0;
		/*
		 * The hottest blocks that fit: the disk's quota, else the cache's
		 * slots (a hot set larger than that would only evict itself,
		 * spending origin reads on blocks that cannot stay). An entry
		 * takes at least one of our slots, whatever the owner's block size.
		 */
		uint64_t room = e->quota ? HL_MIN(e->quota, c->nslots * c->bs) : c->nslots * c->bs;
		uint64_t per = HL_MAX((uint64_t)nh.block_size, (uint64_t)c->bs);
		if (nh.n > room / per)
			se->hs.n = (uint32_t)(room / per);
		__atomic_store_n(&se->hot_n, (uint64_t)se->hs.n, __ATOMIC_RELAXED);
		if (!nh.mark[0]) {
			set_state(se, "waiting for the owner's first mark");
			se->hs.n = 0;
			return;
		}
		if (strcmp(se->mark, nh.mark) && roll(c, e, se, &se->hs)) {
			set_state(se, "cannot move the proof to the owner's mark");
			se->hs.n = 0;
			return;
		}
		__atomic_store_n(&se->shadowed, count_cached(c, e, se, size), __ATOMIC_RELAXED);
	}
	if (!se->hs.n || !se->mark[0])
		return;
	/* the rate: tokens accrue per tick, one second's worth at most */
	if (se->tick_ns && now > se->tick_ns)
		se->tokens += (double)rate * (double)(now - se->tick_ns) / 1e9;
	/* ... or one block's worth when a block is more than that (a 1 MiB block at 512 KiB/s) */
	double most = HL_MAX((double)rate, (double)se->hs.block_size);
	if (se->tokens > most)
		se->tokens = most;
	se->tick_ns = now;
	while (se->idx < se->hs.n && peeks < SHADOW_PEEKS &&
	       __atomic_load_n(&se->inflight, __ATOMIC_ACQUIRE) < SHADOW_INFLIGHT) {
		uint64_t off, len;
		bool cached;

		if (!ent_range(&se->hs, se->idx, size, &off, &len)) {
			se->idx++;
			continue;
		}
		pthread_mutex_lock(&c->lock);
		cached = range_cached(c, e->id, off, len);
		pthread_mutex_unlock(&c->lock);
		peeks++;
		if (cached) {
			se->idx++;
			continue;
		}
		if (se->tokens < (double)len)
			break;
		struct shadow_io *sio = calloc(1, sizeof(*sio));
		if (!sio)
			break;
		sio->c = c;
		sio->se = se;
		sio->io.op = HL_IO_PREFETCH;
		sio->io.offset = off;
		sio->io.length = len;
		sio->io.cb = shadow_read_done;
		__atomic_fetch_add(&se->inflight, 1, __ATOMIC_ACQUIRE);
		if (engine_read_shadow(se->cached, &sio->io)) {
			__atomic_fetch_sub(&se->inflight, 1, __ATOMIC_RELEASE);
			free(sio);
			se->idx++;
			continue;
		}
		se->tokens -= (double)len;
		cnt_add(&se->origin_reads, 1);
		cnt_add(&se->origin_bytes, len);
		se->idx++;
	}
	set_state(se, "standby: shadowing the hot set of gateway %u", se->hs.owner);
}

/* ---- the reactor ---- */

static void shadow_tick(struct hl_timer *t)
{
	struct hl_cache *c = t->arg;
	struct eng_shadow *sh = c->shadow;
	uint64_t now = hl_now_ns();

	for (size_t i = 0;; i++) {
		struct map_ent *e;
		bool ready;

		if (atomic_load(&sh->stopping))
			return;
		/*
		 * The disk's lock is taken while c->lock still shows it attached:
		 * then its detach (which needs that lock) cannot run, and its
		 * entry cannot be replaced and freed by an attach, until the step
		 * is over. Only tried (the order is shadow_mu before lock): a
		 * disk being revalidated or detached is stepped at a later tick.
		 */
		pthread_mutex_lock(&c->lock);
		e = i < c->n_ents ? c->ents[i] : NULL;
		ready = e && e->sh && e->attached && e->inner &&
		        pthread_mutex_trylock(&e->shadow_mu) == 0;
		pthread_mutex_unlock(&c->lock);
		if (!e)
			break;
		if (!ready)
			continue;
		if (!atomic_load(&sh->stopping)) {
			if (atomic_load(&e->proofs_held))
				standby_step(c, e, e->sh, now);
			else
				owner_step(c, e, e->sh, now);
		}
		pthread_mutex_unlock(&e->shadow_mu);
	}
	hl_timer_start(sh->r, &sh->tick, SHADOW_TICK_MS);
}

static void shadow_first_tick(void *arg)
{
	struct hl_cache *c = arg;

	hl_timer_start(c->shadow->r, &c->shadow->tick, SHADOW_TICK_MS);
}

static int shadow_start(struct hl_cache *c)
{
	struct eng_shadow *sh;
	int rc;

	if (c->shadow)
		return 0;
	sh = calloc(1, sizeof(*sh));
	if (!sh)
		return -ENOMEM;
	hl_timer_init(&sh->tick, shadow_tick, c);
	rc = hl_reactor_create(&sh->r, "shadow");
	if (rc) {
		free(sh);
		return rc;
	}
	rc = hl_reactor_start(sh->r);
	if (rc) {
		hl_reactor_destroy(sh->r);
		free(sh);
		return rc;
	}
	c->shadow = sh;
	rc = hl_reactor_call(sh->r, shadow_first_tick, c);
	return rc;
}

/*
 * Wait for a disk's pre-reads to come back, however long the cluster takes
 * (its own op timeouts bound it), or until deadline_ns (hl_now_ns; 0: no
 * deadline): their completions run on the shadow reactor and point at se,
 * the cache and the origin below it, which the caller frees next. A notice
 * every 5 s says what it waits for. @return true when none is left.
 */
static bool wait_inflight(struct hl_cache *c, struct shadow_ent *se, uint64_t deadline_ns)
{
	for (unsigned i = 1; __atomic_load_n(&se->inflight, __ATOMIC_ACQUIRE); i++) {
		struct timespec ts = {0, 5000000};
		if (deadline_ns && hl_now_ns() >= deadline_ns)
			return false;
		nanosleep(&ts, NULL);
		if (i % 1000 == 0)
			HL_NOTICE("cache", "cache %s: waiting for %u shadow pre-read(s) to come back",
			          c->name, __atomic_load_n(&se->inflight, __ATOMIC_ACQUIRE));
	}
	return true;
}

/* Take e's shadow_mu, trying every 1 ms until hl_now_ns() reaches deadline_ns. */
static bool shadow_mu_until(struct map_ent *e, uint64_t deadline_ns)
{
	while (pthread_mutex_trylock(&e->shadow_mu)) {
		struct timespec ts = {0, 1000000};
		if (hl_now_ns() >= deadline_ns)
			return false;
		nanosleep(&ts, NULL);
	}
	return true;
}

bool engine_shadow_hold(struct hl_cache *c, uint64_t deadline_ns)
{
	struct eng_shadow *sh = c->shadow;

	if (!sh)
		return true;
	atomic_store(&sh->stopping, true);
	/*
	 * A step under way ends (its pre-reads are out, in c->inflight); none
	 * starts after. Only tried until the deadline: a step stuck on a device
	 * or a cluster that stopped answering must not stretch a bounded stop.
	 */
	for (size_t i = 0; i < c->n_ents; i++) {
		if (!shadow_mu_until(c->ents[i], deadline_ns))
			return false;
		pthread_mutex_unlock(&c->ents[i]->shadow_mu);
	}
	return true;
}

void engine_shadow_stop(struct hl_cache *c)
{
	struct eng_shadow *sh = c->shadow;
	/* after a stop's drain that gave up, no second wait: only what is done now */
	uint64_t deadline =
	    hl_now_ns() + (atomic_load(&c->drain_late) ? 0 : (uint64_t)c->drain_ms * 1000000u);
	bool ok;

	if (!sh || atomic_load(&c->shadow_left))
		return;
	/* every step under way ends before its pre-reads are waited for; none starts after */
	ok = engine_shadow_hold(c, deadline);
	for (size_t i = 0; ok && i < c->n_ents; i++)
		if (c->ents[i]->sh)
			ok = wait_inflight(c, c->ents[i]->sh, deadline);
	if (!ok) {
		/*
		 * Left running, with everything it touches (hl_cache_close keeps
		 * the cache): joining its reactor would wait for the stuck step.
		 */
		HL_WARN("cache",
		        "cache %s: a shadow step or pre-read did not finish within %u ms: "
		        "abandoned (its reactor is left running)",
		        c->name, c->drain_ms);
		atomic_store(&c->shadow_left, true);
		return;
	}
	hl_reactor_stop(sh->r);
	hl_reactor_join(sh->r);
	hl_reactor_destroy(sh->r);
	free(sh);
	c->shadow = NULL;
}

/* Shadows a detach gave up on (their step stuck): never freed, listed for a leak checker. */
static struct shadow_ent *shadow_left_list;
static pthread_mutex_t shadow_left_mu = PTHREAD_MUTEX_INITIALIZER;

/*
 * Past the bound on e's shadow_mu: is its step stuck in roll's records step
 * (waiting for or holding sync_lock, which is not free within the bound
 * either: engine_sync_lock_within, meta_stuck and the map sealed)? Then it
 * is given up on (records -1). @return whether it was.
 */
static bool shadow_give_up(struct hl_cache *c, struct map_ent *e)
{
	struct shadow_ent *se;
	int one = 1;

	pthread_mutex_lock(&c->lock);
	se = e->sh;
	pthread_mutex_unlock(&c->lock);
	if (!se || __atomic_load_n(&se->records, __ATOMIC_SEQ_CST) != 1)
		return false; /* in a call on the origin (or the revalidation's): wait on */
	if (engine_sync_lock_within(c, e->name)) {
		pthread_mutex_unlock(&c->sync_lock);
		return false;
	}
	return __atomic_compare_exchange_n(&se->records, &one, -1, false, __ATOMIC_SEQ_CST,
	                                   __ATOMIC_SEQ_CST);
}

void engine_shadow_detach(struct hl_cache *c, struct map_ent *e)
{
	struct shadow_ent *se;
	bool left = false;

	/*
	 * A step keeps shadow_mu past the bound: in a call on the origin (a
	 * diff, a cluster round trip: the origin's problem), wait on, as a
	 * takeover does (engine_shadow_lock). Stuck behind the cache device
	 * (its roll waits for or holds sync_lock, and the lock is not free
	 * within the bound either): the step is given up on, or a stop or a
	 * removal would wait for ever (a takeover gives up on that step too,
	 * and serves the disk). The step keeps se (never freed) and e (the
	 * cache is parked: meta_stuck); when it comes back it sees records -1
	 * and ends without touching o or the inner origin, which go next.
	 */
	while (!shadow_mu_until(e, hl_now_ns() + (uint64_t)c->drain_ms * 1000000u))
		if ((left = shadow_give_up(c, e)))
			break;
	pthread_mutex_lock(&c->lock);
	se = e->sh;
	e->sh = NULL; /* (no later tick steps it; none other reads it while the step holds the lock) */
	pthread_mutex_unlock(&c->lock);
	if (!left)
		pthread_mutex_unlock(&e->shadow_mu);
	if (!se)
		return;
	wait_inflight(c, se, 0);
	if (left) {
		HL_WARN("cache",
		        "cache %s: disk %s: its shadow step waits for the cache's records past "
		        "%u ms: detached without it (it ends on its own)",
		        c->name, e->name, c->drain_ms);
		pthread_mutex_lock(&shadow_left_mu);
		se->left_next = shadow_left_list;
		shadow_left_list = se;
		pthread_mutex_unlock(&shadow_left_mu);
		return;
	}
	free(se->hs.v);
	free(se->hs.chg);
	pthread_mutex_destroy(&se->state_lock);
	free(se);
}

bool engine_shadow_lock(struct hl_cache *c, struct map_ent *e)
{
	while (!shadow_mu_until(e, hl_now_ns() + (uint64_t)c->drain_ms * 1000000u)) {
		/*
		 * The disk's step keeps it past the bound. In a call on the origin
		 * (a diff, a cluster round trip: the origin's problem, as the
		 * revalidation's own diff is), sync_lock is free: wait on. Stuck
		 * behind the cache device (its roll's record sync, or waiting for
		 * sync_lock behind a stuck metadata thread), it is not free within
		 * the bound either: the holder is stuck (meta_stuck, map sealed).
		 */
		if (!engine_sync_lock_patient(c, e->name))
			return false;
		pthread_mutex_unlock(&c->sync_lock);
	}
	return true;
}

void engine_shadow_unlock(struct hl_cache *c, struct map_ent *e)
{
	if (e->sh) {
		e->sh->mark[0] =
		    '\0'; /* revalidated: a later stint as standby moves its proof again */
		e->sh->owner_last = true;
	}
	(void)c;
	pthread_mutex_unlock(&e->shadow_mu);
}

/* ---- API ---- */

int hl_cache_shadow_config(struct hl_origin *o, uint64_t rate)
{
	struct co_priv *co;
	struct hl_cache *c;
	struct shadow_ent *se;
	int rc;

	if (!o || o->ops != &cache_origin_ops)
		return -EINVAL;
	co = co_of(o);
	c = co->c;
	if (co->ent->sh) {
		__atomic_store_n(&co->ent->sh->rate, rate, __ATOMIC_RELAXED);
		return 0;
	}
	se = calloc(1, sizeof(*se));
	if (!se)
		return -ENOMEM;
	pthread_mutex_init(&se->state_lock, NULL);
	se->cached = o;
	se->rate = rate;
	se->supported = hl_origin_has_hot_set(co->inner);
	snprintf(se->state, sizeof(se->state), "%s",
	         se->supported ? "starting" : "cold: the origin cannot prove what changed");
	rc = shadow_start(c);
	if (rc) {
		pthread_mutex_destroy(&se->state_lock);
		free(se);
		return rc;
	}
	pthread_mutex_lock(&co->ent->shadow_mu);
	pthread_mutex_lock(&c->lock);
	co->ent->sh = se;
	pthread_mutex_unlock(&c->lock);
	pthread_mutex_unlock(&co->ent->shadow_mu);
	return 0;
}

int hl_cache_shadow_stats(struct hl_origin *o, struct hl_cache_shadow_stats *out)
{
	struct co_priv *co;
	struct shadow_ent *se;
	struct hl_cache *c;

	memset(out, 0, sizeof(*out));
	if (!o || o->ops != &cache_origin_ops)
		return -EINVAL;
	co = co_of(o);
	c = co->c;
	pthread_mutex_lock(&c->lock);
	se = co->ent->sh;
	if (!se) {
		pthread_mutex_unlock(&c->lock);
		return -ENOENT;
	}
	out->supported = se->supported;
	out->rate = __atomic_load_n(&se->rate, __ATOMIC_RELAXED);
	out->standby = atomic_load(&co->ent->proofs_held);
	out->hot_blocks = out->standby ? cnt_get(&se->hot_n) : cnt_get(&se->published_n);
	out->shadowed = out->standby ? HL_MIN(cnt_get(&se->shadowed), out->hot_blocks) : 0;
	out->behind = out->standby ? out->hot_blocks - out->shadowed : 0;
	out->origin_reads = cnt_get(&se->origin_reads);
	out->origin_bytes = cnt_get(&se->origin_bytes);
	out->dropped = cnt_get(&se->dropped);
	out->marks = cnt_get(&se->rolls);
	out->publishes = cnt_get(&se->publishes);
	pthread_mutex_lock(&se->state_lock);
	snprintf(out->state, sizeof(out->state), "%s", se->state);
	pthread_mutex_unlock(&se->state_lock);
	pthread_mutex_unlock(&c->lock);
	return 0;
}
