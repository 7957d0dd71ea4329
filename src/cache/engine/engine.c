/*
 * engine.c - the read cache in hotlund's data path (include/hotlun/cache_engine.h),
 * its management side: open (device, layout, policy core, RAM window),
 * attach and close of cached origins, quiesce, the admission switch; device
 * failure -> pass-through; the metadata thread (periodic and requested
 * record flushes, killing the on-device metadata of a failed device); the
 * disk-name -> LUN-id map file; the warm restart proofs (a disk's cached
 * blocks are trusted at attach only as far as its origin proves itself
 * unchanged); and the engine stats (latency and size histograms).
 *
 * The data path is in engine_origin.c, engine_read.c and engine_write.c;
 * shared state and the ordering rules: engine_internal.h.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <sys/stat.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache/engine/engine_internal.h"
#include "hotlun/cache_engine.h"
#include "hotlun/event.h"
#include "hotlun/log.h"
#include "hotlun/util.h"

/* Version 2 adds the proof lines; a version 1 map is read, its disks have no proof. */
#define MAP_MAGIC   "hotlun-cache-map "
#define MAP_VERSION 2
#define SB_KILL_LEN 8192u /* both superblock copies (docs/cache-format.md) */

/* ------------------------------------------------------------------ */
/* Device failure -> pass-through                                     */
/* ------------------------------------------------------------------ */

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

/* Run done(w) on the request's reactor after a metadata flush that starts from now on. */
void engine_meta_wait(struct eng_req *req, void (*done)(struct meta_wait *w))
{
	struct hl_cache *c = req->c;
	struct meta_wait *w = &req->mw;

	cnt_add(&c->meta_waits, 1);
	w->next = NULL;
	w->r = req->r;
	w->done = done;
	w->rc = 0;
	pthread_mutex_lock(&c->mlock);
	*c->mw_tail = w;
	c->mw_tail = &w->next;
	pthread_cond_signal(&c->mcond);
	pthread_mutex_unlock(&c->mlock);
}

static int map_write(struct hl_cache *c, const char *state);
static void proofs_refresh(struct hl_cache *c);

/* The device failed: make sure a restart cannot trust its metadata. Meta thread. */
static void meta_kill(struct hl_cache *c)
{
	uint8_t *z;

	if (c->dead)
		return;
	c->dead = true;
	/* The map says "failed" (a restart formats), and both superblocks are wiped. */
	pthread_mutex_lock(&c->sync_lock); /* map writers hold it */
	map_write(c, "failed");
	pthread_mutex_unlock(&c->sync_lock);
	z = dio_alloc(SB_KILL_LEN);
	if (z) {
		memset(z, 0, SB_KILL_LEN);
		if (c->dev->ops->pwrite(c->dev, z, SB_KILL_LEN, 0) == 0)
			c->dev->ops->flush(c->dev);
		free(z);
	}
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

static void *meta_main(void *arg)
{
	struct hl_cache *c = arg;
	unsigned long synced_changes = atomic_load(&c->changes);

	atomic_store(&c->synced, synced_changes);
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
		stop = c->mstop;
		fail = c->fail_pending;
		c->fail_pending = false;
		pthread_mutex_unlock(&c->mlock);

		if (periodic && !atomic_load(&c->failed) && engine_device_check_size(c)) {
			engine_dev_error(c, NULL, -EIO);
			fail = true; /* meta_kill is idempotent: dev_error's flag is harmless */
		}
		if (fail)
			meta_kill(c);
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
			rc = cache_meta_sync_locked(c->dev, &c->layout, c->core, &c->lock);
			pthread_mutex_unlock(&c->sync_lock);
			cnt_add(&c->meta_syncs, 1);
			synced_changes = ch;
			if (!rc)
				atomic_store(&c->synced, ch);
			if (rc) {
				engine_dev_error(c, NULL, rc);
				meta_kill(c);
			}
		}
		if (periodic && !c->dead && !atomic_load(&c->failed))
			proofs_refresh(c);
		if (periodic) {
			clock_gettime(CLOCK_MONOTONIC, &next);
			next.tv_sec += c->interval_ms / 1000;
			next.tv_nsec += (long)(c->interval_ms % 1000) * 1000000L;
			if (next.tv_nsec >= 1000000000L) {
				next.tv_sec++;
				next.tv_nsec -= 1000000000L;
			}
		}
		while (list) {
			struct meta_wait *w = list;
			list = w->next;
			w->rc = rc;
			meta_post(c, w);
		}
		pthread_mutex_lock(&c->mlock);
		if (stop && !c->mw_head)
			break;
	}
	pthread_mutex_unlock(&c->mlock);
	return NULL;
}

/* ------------------------------------------------------------------ */
/* The disk map file                                                  */
/* ------------------------------------------------------------------ */

/*
 * Text, rewritten atomically (tmp + fsync + rename):
 *   hotlun-cache-map 2
 *   state open|clean|failed
 *   geometry BLOCK_SIZE NSLOTS DEVICE_SIZE
 *   next ID
 *   disk ID QUOTA SIZE NAME IDENT...
 *   proof ID TOKEN            (version 2; absent: no proof)
 * A missing or unreadable map, a "failed" state or another geometry make
 * hl_cache_open format the device: LUN ids are only meaningful with it.
 * Writers hold sync_lock (or run alone: open, close).
 */
static int map_write(struct hl_cache *c, const char *state)
{
	char *tmp = NULL, *dir = NULL;
	FILE *f;
	int rc = 0, fd;

	if (asprintf(&tmp, "%s.tmp", c->map_path) < 0)
		return -ENOMEM;
	f = fopen(tmp, "w");
	if (!f) {
		rc = -errno;
		goto out;
	}
	fprintf(f, "%s%d\nstate %s\ngeometry %u %llu %llu\nnext %u\n", MAP_MAGIC, MAP_VERSION,
	        state, c->bs, (unsigned long long)c->nslots, (unsigned long long)c->dev->size,
	        c->next_id);
	for (size_t i = 0; i < c->n_ents; i++) {
		struct map_ent *e = c->ents[i];
		fprintf(f, "disk %u %llu %llu %s %s\n", e->id, (unsigned long long)e->quota,
		        (unsigned long long)e->size, e->name, e->ident);
	}
	for (size_t i = 0; i < c->n_ents; i++)
		if (c->ents[i]->proof)
			fprintf(f, "proof %u %s\n", c->ents[i]->id, c->ents[i]->proof);
	if (fflush(f) || fsync(fileno(f)))
		rc = -errno;
	if (fclose(f) && !rc)
		rc = -errno;
	if (!rc && rename(tmp, c->map_path))
		rc = -errno;
	if (!rc) {
		dir = strdup(c->map_path);
		if (dir) {
			fd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			if (fd >= 0) {
				fsync(fd);
				close(fd);
			}
		}
	}
out:
	if (rc) {
		HL_ERR("cache", "cache %s: cannot write %s: %s", c->name, c->map_path,
		       strerror(-rc));
		unlink(tmp);
	}
	free(dir);
	free(tmp);
	return rc;
}

static void ent_free(struct map_ent *e)
{
	if (!e)
		return;
	free(e->name);
	free(e->ident);
	free(e->proof);
	free(e->cand);
	free(e);
}

static struct map_ent *ent_new(uint16_t id, uint64_t quota, uint64_t size, const char *name,
                               const char *ident)
{
	struct map_ent *e = calloc(1, sizeof(*e));

	if (!e)
		return NULL;
	e->id = id;
	e->quota = quota;
	e->size = size;
	e->name = strdup(name);
	e->ident = strdup(ident);
	hl_list_init(&e->wlist);
	if (!e->name || !e->ident) {
		ent_free(e);
		return NULL;
	}
	return e;
}

static int ents_push(struct hl_cache *c, struct map_ent *e)
{
	struct map_ent **n = realloc(c->ents, (c->n_ents + 1) * sizeof(*n));

	if (!n)
		return -ENOMEM;
	c->ents = n;
	c->ents[c->n_ents++] = e;
	return 0;
}

/*
 * The origin's identity: its URI without throttle(...) wrappers (lab knobs,
 * not identity) and without credentials ("user%secret@": not identity
 * either, and the map must never hold a secret). Maps written before
 * credentials were dropped from it are read through this same function, so
 * their disks still match; the map is rewritten at open without them.
 */
static const char *origin_ident(const char *uri, char *buf, size_t len)
{
	while (!strncmp(uri, "throttle(", 9)) {
		const char *p = strstr(uri, "):");
		if (!p)
			break;
		uri = p + 2;
	}
	return hl_uri_redact(uri, true, buf, len);
}

/* "hotlun-cache-map N": a version this code reads (1 or 2). */
static bool map_version(const char *line, int *version)
{
	int n = 0;

	if (strncmp(line, MAP_MAGIC, strlen(MAP_MAGIC)) ||
	    sscanf(line + strlen(MAP_MAGIC), "%d", &n) != 1 || n < 1 || n > MAP_VERSION)
		return false;
	*version = n;
	return true;
}

/* @return true when the map is usable for this device (else: format). */
static bool map_load(struct hl_cache *c)
{
	FILE *f = fopen(c->map_path, "r");
	char line[4096], state[32] = "", name[256], ident[4096];
	unsigned bs = 0, next = 0, id;
	unsigned long long nslots = 0, devsize = 0, quota, size;
	bool ok = false;
	int pos, version;

	if (!f)
		return false;
	if (!fgets(line, sizeof(line), f) || !map_version(line, &version))
		goto out;
	if (!fgets(line, sizeof(line), f) || sscanf(line, "state %31s", state) != 1 ||
	    !strcmp(state, "failed"))
		goto out;
	if (!fgets(line, sizeof(line), f) ||
	    sscanf(line, "geometry %u %llu %llu", &bs, &nslots, &devsize) != 3 || bs != c->bs ||
	    nslots != c->nslots || devsize != c->dev->size)
		goto out;
	if (!fgets(line, sizeof(line), f) || sscanf(line, "next %u", &next) != 1 || next > 0xffff)
		goto out;
	c->next_id = (uint16_t)next;
	while (fgets(line, sizeof(line), f)) {
		struct map_ent *e;
		line[strcspn(line, "\n")] = 0;
		if (version >= 2 && !strncmp(line, "proof ", 6)) {
			if (sscanf(line, "proof %u %n", &id, &pos) != 1 || !line[pos] ||
			    strlen(line + pos) >= HL_ORIGIN_PROOF_MAX || strpbrk(line + pos, " \t"))
				goto out;
			for (size_t i = 0; i < c->n_ents; i++) {
				if (c->ents[i]->id != id)
					continue;
				free(c->ents[i]->proof);
				c->ents[i]->proof = strdup(line + pos); /* NULL: no proof, cold */
			}
			continue;
		}
		if (sscanf(line, "disk %u %llu %llu %255s %n", &id, &quota, &size, name, &pos) !=
		        4 ||
		    id > 0xffff)
			goto out;
		e = ent_new((uint16_t)id, quota, size, name,
		            origin_ident(line + pos, ident, sizeof(ident)));
		if (!e || ents_push(c, e)) {
			ent_free(e);
			goto out;
		}
	}
	ok = true;
out:
	fclose(f);
	if (!ok) {
		for (size_t i = 0; i < c->n_ents; i++)
			ent_free(c->ents[i]);
		c->n_ents = 0;
		c->next_id = 0;
	}
	return ok;
}

static struct map_ent *ent_find(struct hl_cache *c, const char *name)
{
	for (size_t i = 0; i < c->n_ents; i++)
		if (!strcmp(c->ents[i]->name, name))
			return c->ents[i];
	return NULL;
}

static bool id_used(struct hl_cache *c, uint16_t id)
{
	for (size_t i = 0; i < c->n_ents; i++)
		if (c->ents[i]->id == id)
			return true;
	return false;
}

/* A LUN id never handed out by this map (ids only grow, wrapping after 65535). */
static int id_alloc(struct hl_cache *c, uint16_t *out)
{
	for (uint32_t tries = 0; tries < HL_CACHE_MAX_LUNS; tries++) {
		uint16_t id = c->next_id++;
		if (!id_used(c, id)) {
			*out = id;
			return 0;
		}
	}
	return -ENOSPC;
}

/* ------------------------------------------------------------------ */
/* Warm restart proofs                                                */
/* ------------------------------------------------------------------ */

/*
 * A disk's cached blocks match its origin as long as only this gateway
 * writes it (the ordering rules of docs/cache-format.md). Across a stop,
 * somebody else may have written it; the origin proves what did not
 * change (hl_origin_ops.proof_take/check), and attach drops the rest.
 * The proof may be older than the records: it only has to show that
 * nobody wrote the origin after it was taken, and any write after it
 * (ours included) makes the check fail or report the range.
 */

/* The tag that names this disk's marks in its origin: the cache's uuid and the LUN id. */
static void ent_tag(const struct hl_cache *c, uint16_t id, char tag[64])
{
	const uint8_t *u = c->layout.uuid;

	snprintf(tag, 64, "%02x%02x%02x%02x%02x%02x%02x%02x-%u", u[0], u[1], u[2], u[3], u[4],
	         u[5], u[6], u[7], id);
}

/* Byte ranges an origin reports changed since a proof. */
struct changed_list {
	struct {
		uint64_t off, len;
	} *v;
	size_t n, cap;
	bool nomem;
};

static void changed_add(void *arg, uint64_t off, uint64_t len)
{
	struct changed_list *l = arg;

	if (l->nomem || !len)
		return;
	if (l->n && l->v[l->n - 1].off + l->v[l->n - 1].len == off) {
		l->v[l->n - 1].len += len; /* adjacent: merge */
		return;
	}
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 64;
		void *v = realloc(l->v, cap * sizeof(*l->v));
		if (!v) {
			l->nomem = true;
			return;
		}
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n].off = off;
	l->v[l->n].len = len;
	l->n++;
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
static void proofs_refresh(struct hl_cache *c)
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
	if (write && map_write(c, "open") == 0) {
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
	pthread_mutex_lock(&c->sync_lock); /* one proof at a time (the meta thread's too) */
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
	} else if (!c->dead && !atomic_load(&c->failed) &&
	           (!e->proof || strcmp(e->proof, proof))) {
		pthread_mutex_lock(&c->lock);
		bool ok = str_set(&e->proof, proof);
		pthread_mutex_unlock(&c->lock);
		if (ok && map_write(c, "open") == 0)
			hl_origin_proof_release(inner, e->tag, proof);
	}
	pthread_mutex_unlock(&c->sync_lock);
}

/*
 * Ask inner what changed since `proof` (NULL: no proof) into chg. A failed
 * allocation anywhere, or no proof at all, counts as "cannot tell".
 * @return 0 (chg lists the changes) or -ESTALE (drop everything); why set.
 */
static int proof_changes(struct hl_origin *inner, const char *tag, const char *proof,
                         bool nomem, struct changed_list *chg, char *why, size_t whylen)
{
	int prc = hl_origin_proof_check(inner, tag, proof, changed_add, chg, why, whylen);

	if (!prc && (chg->nomem || nomem)) {
		prc = -ESTALE;
		snprintf(why, whylen, "out of memory for the changed ranges");
	}
	if (!proof && !prc)
		prc = -ESTALE; /* a backend must never vouch for no proof */
	return prc;
}

/*
 * c->lock held: drop from e what proof_changes found (everything when prc),
 * a proof that proves nothing any more included, and record the outcome in
 * e's warm_* statistics ("PREFIX" + why). @return whether e's proof went.
 */
static bool drop_changes(struct hl_cache *c, struct map_ent *e, int prc,
                         const struct changed_list *chg, const char *prefix, const char *why)
{
	uint64_t before = hl_cache_core_lun_blocks(c->core, e->id), after;
	bool proof_gone = prc && e->proof;

	if (prc)
		hl_cache_core_invalidate(c->core, e->id, 0, UINT64_MAX);
	for (size_t i = 0; !prc && i < chg->n; i++)
		hl_cache_core_invalidate(c->core, e->id, chg->v[i].off, chg->v[i].len);
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
	struct changed_list chg = {0};
	char why[HL_ORIGIN_WHY_MAX] = "", tag[64];
	char *proof = NULL;
	bool nomem = false, proof_gone;
	int prc, rc = 0;

	if (!o || o->ops != &cache_origin_ops)
		return -EINVAL;
	co = co_of(o);
	c = co->c;
	e = co->ent;
	pthread_mutex_lock(&c->lock);
	if (e->proof && !(proof = strdup(e->proof)))
		nomem = true;
	ent_tag(c, e->id, tag);
	pthread_mutex_unlock(&c->lock);
	prc = proof_changes(co->inner, tag, proof, nomem, &chg, why, sizeof(why));
	free(proof);
	pthread_mutex_lock(&c->sync_lock);
	pthread_mutex_lock(&c->lock);
	proof_gone = drop_changes(c, e, prc, &chg, "ownership: ", why);
	uint64_t after = e->warm_kept, dropped = e->warm_dropped;
	pthread_mutex_unlock(&c->lock);
	/* the proofs_held flag stays set until the dropped blocks' records are written */
	/* Before the disk is served: the dropped blocks' records must stop claiming data. */
	if (dropped && !c->dead)
		rc = hl_cache_meta_sync(c->dev, &c->layout, c->core);
	if (!rc && proof_gone)
		rc = map_write(c, "open");
	if (!rc)
		atomic_store(&e->proofs_held, false); /* coherent: proofs from now on */
	pthread_mutex_unlock(&c->sync_lock);
	free(chg.v);
	HL_NOTICE("cache", "cache %s: disk %s: ownership gained: kept %llu block(s), dropped %llu (%s%s)",
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

/* ------------------------------------------------------------------ */
/* Open, attach, close                                                */
/* ------------------------------------------------------------------ */

static void cache_free(struct hl_cache *c)
{
	if (!c)
		return;
	if (c->data)
		hl_origin_close(c->data);
	if (c->dev)
		hl_cache_dev_close(c->dev);
	engine_ub_fini(c);
	hl_cache_core_destroy(c->core);
	for (size_t i = 0; i < c->n_ents; i++)
		ent_free(c->ents[i]);
	free(c->ents);
	free(c->window);
	free(c->name);
	free(c->device);
	free(c->map_path);
	pthread_mutex_destroy(&c->lock);
	pthread_mutex_destroy(&c->sync_lock);
	pthread_mutex_destroy(&c->mlock);
	pthread_cond_destroy(&c->mcond);
	free(c);
}

/*
 * Before the device is opened (which extends a regular file to its size):
 * a file shorter than the device its map describes was truncated, and its
 * records may claim slots whose data is gone (a hole reads as zeroes).
 * Refuse it rather than extend it and serve the holes as data. A map that
 * says "failed", or none, formats the device anyway. @return 0 or -EIO.
 */
static int device_shrank(struct hl_cache *c)
{
	char line[256], state[32] = "";
	unsigned long long devsize = 0;
	unsigned bs;
	unsigned long long nslots;
	struct stat st;
	bool claims = false;
	int version;
	FILE *f;

	if (stat(c->device, &st) || !S_ISREG(st.st_mode))
		return 0;
	f = fopen(c->map_path, "r");
	if (!f)
		return 0;
	if (fgets(line, sizeof(line), f) && map_version(line, &version) &&
	    fgets(line, sizeof(line), f) && sscanf(line, "state %31s", state) == 1 &&
	    strcmp(state, "failed") && fgets(line, sizeof(line), f) &&
	    sscanf(line, "geometry %u %llu %llu", &bs, &nslots, &devsize) == 3)
		claims = true;
	fclose(f);
	if (!claims || (uint64_t)st.st_size >= devsize)
		return 0;
	HL_ERR("cache",
	       "cache %s: %s is %llu bytes, smaller than the %llu bytes its map %s describes "
	       "(truncated?): refusing the cache; delete the map to format the device",
	       c->name, c->device, (unsigned long long)st.st_size, devsize, c->map_path);
	return -EIO;
}

static int write_mode_parse(const char *s, enum hl_cache_write_mode *out)
{
	if (!s || !strcmp(s, "update"))
		*out = HL_CACHE_WRITE_UPDATE;
	else if (!strcmp(s, "invalidate"))
		*out = HL_CACHE_WRITE_INVALIDATE;
	else
		return -EINVAL;
	return 0;
}

int hl_cache_open(const struct hl_cache_config *cfg, struct hl_cache **out)
{
	struct hl_cache_params p;
	struct hl_cache_core_info info;
	struct hl_cache *c;
	pthread_condattr_t ca;
	const char *adm;
	char *uri = NULL;
	uint64_t ub;
	bool usable;
	int rc, restored = 0;

	if (!cfg || !cfg->name || !cfg->device || !out)
		return -EINVAL;
	hl_cache_params_default(&p);
	p.block_size = cfg->block_size ? cfg->block_size : p.block_size;
	if (p.block_size < HL_CACHE_MIN_BLOCK || p.block_size > HL_CACHE_MAX_BLOCK ||
	    (p.block_size & (p.block_size - 1))) {
		HL_ERR("cache", "cache %s: block_size %u is not a power of two in 4K..1M",
		       cfg->name, p.block_size);
		return -EINVAL;
	}
	adm = cfg->admission;
	if (!adm || !strcmp(adm, "frequency"))
		adm = "freq";
	if (hl_admit_parse(adm, &p.admit, &p.admit_param)) {
		HL_ERR("cache", "cache %s: unknown admission \"%s\"", cfg->name, cfg->admission);
		return -EINVAL;
	}
	if (cfg->write_budget == HL_CACHE_WRITE_BUDGET_OFF)
		p.write_budget_pct = 0;
	else if (cfg->write_budget > 100) {
		HL_ERR("cache", "cache %s: write_budget %u%% is over 100%%", cfg->name,
		       cfg->write_budget);
		return -EINVAL;
	} else if (cfg->write_budget)
		p.write_budget_pct = cfg->write_budget;
	if (write_mode_parse(cfg->write_policy, &p.write_mode)) {
		HL_ERR("cache", "cache %s: unknown write_policy \"%s\"", cfg->name,
		       cfg->write_policy);
		return -EINVAL;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->sync_lock, NULL);
	pthread_mutex_init(&c->mlock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->mcond, &ca);
	pthread_condattr_destroy(&ca);
	c->mw_tail = &c->mw_head;
	c->interval_ms = cfg->meta_interval_ms ? cfg->meta_interval_ms : 1000;
	c->bs = p.block_size;
	c->shift = (uint32_t)__builtin_ctz(p.block_size);
	c->name = strdup(cfg->name);
	c->device = strdup(cfg->device);
	if (cfg->map_path)
		c->map_path = strdup(cfg->map_path);
	else if (asprintf(&c->map_path, "%s.map", cfg->device) < 0)
		c->map_path = NULL;
	rc = -ENOMEM;
	if (!c->name || !c->device || !c->map_path)
		goto fail;

	cache_trace_init();
	cache_trace(CT_START, 0, 0, 0, 0, c->bs, 0, 0);
	rc = device_shrank(c);
	if (rc)
		goto fail;
	rc = hl_cache_dev_open_file(cfg->device, cfg->size, &c->dev);
	if (rc) {
		HL_ERR("cache", "cache %s: cannot open %s: %s", c->name, cfg->device,
		       strerror(-rc));
		goto fail;
	}
	/*
	 * The data side first, exclusively (O_EXCL on a block device, a lock on
	 * a file): it waits until a hotlund killed a moment ago has no I/O left
	 * in flight on the device, so the metadata is read only once nothing
	 * else can change it, and a second hotlund on the same device fails
	 * instead of corrupting it. A read past the end of a device that shrank
	 * must fail, never return zeroes.
	 */
	rc = -ENOMEM;
	if (asprintf(&uri, "file:%s", cfg->device) < 0)
		goto fail;
	rc = hl_origin_open(uri,
	                    &(struct hl_origin_opts){.direct = true, .eof_error = true,
	                                             .exclusive = true},
	                    &c->data);
	free(uri);
	if (rc) {
		HL_ERR("cache", "cache %s: cannot open %s for data I/O: %s", c->name, cfg->device,
		       strerror(-rc));
		goto fail;
	}
	rc = hl_cache_layout_compute(c->dev->size, c->bs, &c->layout);
	if (rc) {
		HL_ERR("cache", "cache %s: %s: too small for one %u-byte block", c->name,
		       cfg->device, c->bs);
		goto fail;
	}
	c->nslots = c->layout.nslots;
	p.capacity = c->nslots * c->bs;
	rc = hl_cache_core_create(&p, &c->core);
	if (rc)
		goto fail;
	ub = cfg->update_buffer ? cfg->update_buffer : HL_CACHE_UPDATE_BUFFER_DEFAULT;
	rc = engine_ub_init(c, ub == HL_CACHE_UPDATE_BUFFER_OFF ? 0 : ub);
	if (rc)
		goto fail;
	hl_cache_core_info(c->core, &info);
	c->nwin = info.window_max_slots; /* the window may grow to it (rule 9) */
	if (c->nwin) {
		c->window = dio_alloc(c->nwin * c->bs);
		rc = -ENOMEM;
		if (!c->window)
			goto fail;
	}

	usable = map_load(c);
	if (usable) {
		for (size_t i = 0; i < c->n_ents; i++) {
			rc = hl_cache_core_lun_add(c->core, c->ents[i]->id, c->ents[i]->quota);
			if (rc)
				HL_WARN("cache",
				        "cache %s: disk %s: %s: its cached blocks are dropped",
				        c->name, c->ents[i]->name, strerror(-rc));
		}
		rc = hl_cache_meta_load(c->dev, c->core, &c->layout);
		if (rc >= 0)
			restored = rc;
		else if (rc != -ENODATA)
			goto fail_dev;
		usable = rc >= 0;
	}
	if (!usable) {
		rc = hl_cache_meta_format(c->dev, c->bs, &c->layout);
		if (rc)
			goto fail_dev;
	}
	rc = map_write(c, "open");
	if (rc)
		goto fail;
	rc = -pthread_create(&c->meta_thr, NULL, meta_main, c);
	if (rc)
		goto fail;
	c->meta_started = true;
	HL_NOTICE("cache",
	          "cache %s: %s, %llu blocks of %u KiB (+%llu in RAM, up to %llu), admission %s, "
	          "%s, update buffer %llu KiB; %s",
	          c->name, cfg->device, (unsigned long long)c->nslots, c->bs / 1024,
	          (unsigned long long)info.window_slots, (unsigned long long)c->nwin, adm,
	          cfg->write_policy ? cfg->write_policy : "update",
	          (unsigned long long)(c->ub_cap >> 10), usable ? "warm restart" : "formatted");
	if (usable)
		HL_NOTICE("cache", "cache %s: %d block(s) restored", c->name, restored);
	*out = c;
	return 0;
fail_dev:
	HL_ERR("cache", "cache %s: %s: metadata: %s", c->name, cfg->device, strerror(-rc));
fail:
	cache_free(c);
	return rc;
}

int hl_cache_attach(struct hl_cache *c, const char *disk_name, uint64_t quota_bytes,
                    struct hl_origin *inner, struct hl_origin **out)
{
	char ident_buf[3800]; /* a map line (4096 bytes) must hold it */
	const char *ident;
	struct map_ent *e;
	struct hl_origin *o;
	struct co_priv *co;
	struct changed_list chg = {0};
	char why[HL_ORIGIN_WHY_MAX] = "", tag[64];
	char *proof = NULL;
	bool changed = false, sync = false, check = false;
	uint64_t replaced = 0;
	int rc = 0, prc = -ESTALE;

	if (!c || !disk_name || !*disk_name || !inner || !out || strpbrk(disk_name, " \t\n"))
		return -EINVAL;
	if (strlen(inner->uri) >= sizeof(ident_buf))
		return -ENAMETOOLONG;
	ident = origin_ident(inner->uri, ident_buf, sizeof(ident_buf));
	if (strchr(ident, '\n'))
		return -EINVAL;
	/*
	 * The disk's blocks from an earlier run are trusted only as far as the
	 * origin proves itself unchanged since (it may take a while: rbd diffs
	 * the image): ask it before the locks are taken, nothing is served yet.
	 * Entries change only on this (main) thread, so e is still e below.
	 */
	pthread_mutex_lock(&c->lock);
	e = ent_find(c, disk_name);
	if (e && !e->attached && !strcmp(e->ident, ident) && e->size == inner->size &&
	    e->quota == quota_bytes) {
		check = true;
		proof = e->proof ? strdup(e->proof) : NULL; /* NULL: cold */
		ent_tag(c, e->id, tag);
	}
	pthread_mutex_unlock(&c->lock);
	if (check)
		prc = proof_changes(inner, tag, proof, false, &chg, why, sizeof(why));
	free(proof);
	pthread_mutex_lock(&c->sync_lock); /* no record sync of the meta thread meanwhile */
	pthread_mutex_lock(&c->lock);
	e = ent_find(c, disk_name);
	if (e && e->attached) {
		rc = -EEXIST;
		goto out;
	}
	if (e && check) {
		changed |= drop_changes(c, e, prc, &chg, "", why);
		uint64_t after = e->warm_kept, before = after + e->warm_dropped;
		/* Before any I/O: the dropped blocks' records must stop claiming data. */
		sync = prc || chg.n;
		if (prc || before != after)
			HL_NOTICE("cache",
			          "cache %s: disk %s: warm start: kept %llu block(s), dropped %llu "
			          "(%s%s)",
			          c->name, disk_name, (unsigned long long)after,
			          (unsigned long long)(before - after), prc ? "cold: " : "", why);
		else
			HL_INFO("cache", "cache %s: disk %s: warm start: kept %llu block(s) (%s)",
			        c->name, disk_name, (unsigned long long)after, why);
	}
	if (e && (strcmp(e->ident, ident) || e->size != inner->size || e->quota != quota_bytes)) {
		/* Another origin (or quota) under the old name: its blocks must never be served. */
		HL_NOTICE("cache",
		          "cache %s: disk %s: origin or quota changed (%s, %llu bytes): "
		          "dropping its cached blocks",
		          c->name, disk_name, ident, (unsigned long long)inner->size);
		replaced = hl_cache_core_lun_blocks(c->core, e->id);
		hl_cache_core_lun_remove(c->core, e->id);
		for (size_t i = 0; i < c->n_ents; i++) {
			if (c->ents[i] == e) {
				c->ents[i] = c->ents[--c->n_ents];
				break;
			}
		}
		ent_free(e);
		e = NULL;
		sync = true;
	}
	if (!e) {
		uint16_t id;
		rc = id_alloc(c, &id);
		if (rc)
			goto out;
		e = ent_new(id, quota_bytes, inner->size, disk_name, ident);
		rc = -ENOMEM;
		if (!e)
			goto out;
		rc = hl_cache_core_lun_add(c->core, id, quota_bytes);
		if (rc == -EEXIST) {
			/* A LUN id the core knows but the map forgot: start it empty. */
			hl_cache_core_lun_remove(c->core, id);
			rc = hl_cache_core_lun_add(c->core, id, quota_bytes);
			sync = true;
		}
		if (!rc)
			rc = ents_push(c, e);
		if (rc) {
			HL_ERR("cache", "cache %s: disk %s: %s", c->name, disk_name, strerror(-rc));
			ent_free(e);
			goto out;
		}
		if (replaced) {
			e->warm_checked = true;
			e->warm_dropped = replaced;
			snprintf(e->warm_why, sizeof(e->warm_why), "origin, size or quota changed");
		}
		changed = true;
	}
	if (sync && !c->dead) {
		/* Before any I/O: the dropped blocks' records must stop claiming data. */
		rc = hl_cache_meta_sync(c->dev, &c->layout, c->core);
		if (rc) {
			HL_ERR("cache", "cache %s: metadata: %s", c->name, strerror(-rc));
			goto out;
		}
	}
	if (changed) {
		rc = map_write(c, "open");
		if (rc)
			goto out;
	}
	char *label;
	rc = -ENOMEM;
	if (asprintf(&label, "cache(%s)", c->name) < 0)
		goto out;
	rc = hl_origin_wrap(inner, &cache_origin_ops, label, &o);
	free(label);
	if (rc)
		goto out;
	co = co_of(o);
	co->c = c;
	co->inner = inner; /* o->inner, at hand for the data path */
	co->ent = e;
	e->attached = true;
	ent_tag(c, e->id, e->tag);
	e->inner = inner; /* proofs from now on (sync_lock held) */
	hl_origin_listen(inner, engine_origin_event, o);
	*out = o;
	rc = 0;
	HL_NOTICE("cache", "cache %s: disk %s attached (lun id %u%s)", c->name, disk_name, e->id,
	          changed ? ", new" : ", warm");
out:
	pthread_mutex_unlock(&c->lock);
	pthread_mutex_unlock(&c->sync_lock);
	free(chg.v);
	return rc;
}

int hl_cache_set_admission(struct hl_cache *c, const char *admission)
{
	const char *adm = !admission || !strcmp(admission, "frequency") ? "freq" : admission;
	enum hl_admit_kind kind;
	uint32_t param;
	int rc;

	if (hl_admit_parse(adm, &kind, &param))
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	rc = hl_cache_core_set_admission(c->core, kind, param);
	pthread_mutex_unlock(&c->lock);
	if (rc == 0)
		HL_NOTICE("cache", "cache %s: admission now %s", c->name, adm);
	return rc;
}

int hl_cache_set_write_policy(struct hl_cache *c, const char *write_policy)
{
	enum hl_cache_write_mode mode;
	int rc;

	if (write_mode_parse(write_policy, &mode))
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	rc = hl_cache_core_set_write_mode(c->core, mode);
	pthread_mutex_unlock(&c->lock);
	if (rc == 0)
		HL_NOTICE("cache", "cache %s: write_policy now %s", c->name,
		          write_policy ? write_policy : "update");
	return rc;
}

int hl_cache_set_write_budget(struct hl_cache *c, uint32_t pct)
{
	int rc;

	pthread_mutex_lock(&c->lock);
	rc = hl_cache_core_set_write_budget(c->core, pct);
	pthread_mutex_unlock(&c->lock);
	if (rc == 0)
		HL_NOTICE("cache", "cache %s: write_budget now %u%%", c->name, pct);
	return rc;
}

void hl_cache_quiesce(struct hl_cache *c)
{
	if (!c || !c->meta_started)
		return;
	pthread_mutex_lock(&c->mlock);
	c->mstop = true;
	atomic_store(&c->mdrop, true);
	pthread_cond_signal(&c->mcond);
	pthread_mutex_unlock(&c->mlock);
	pthread_join(c->meta_thr, NULL);
	c->meta_started = false;
}

void hl_cache_close(struct hl_cache *c)
{
	struct hl_cache_stats st;
	int rc;

	if (!c)
		return;
	if (c->meta_started) {
		pthread_mutex_lock(&c->mlock);
		c->mstop = true;
		pthread_cond_signal(&c->mcond);
		pthread_mutex_unlock(&c->mlock);
		pthread_join(c->meta_thr, NULL);
		c->meta_started = false;
	}
	for (size_t i = 0; i < c->n_ents; i++)
		if (c->ents[i]->attached)
			HL_WARN("cache", "cache %s: disk %s still attached at close", c->name,
			        c->ents[i]->name);
	hl_cache_core_stats(c->core, -1, &st);
	HL_NOTICE("cache",
	          "cache %s: %llu reads (%llu hits, %llu partial, %llu misses), "
	          "%llu MiB from cache, %llu MiB from origin, %llu writes",
	          c->name, (unsigned long long)st.read_reqs, (unsigned long long)st.read_hits,
	          (unsigned long long)st.read_partial, (unsigned long long)st.read_misses,
	          (unsigned long long)(st.bytes_read_cache >> 20),
	          (unsigned long long)(st.bytes_read_origin >> 20),
	          (unsigned long long)st.write_reqs);
	if (atomic_load(&c->inflight)) {
		/* Fills still queued on stopped reactors: leave the data origin alone. */
		HL_WARN("cache", "cache %s: %ld request(s) still in flight at close", c->name,
		        (long)atomic_load(&c->inflight));
		c->data = NULL;
	}
	if (!c->dead && !atomic_load(&c->failed)) {
		/*
		 * Keep the update buffer's sectors warm: write them back first (the
		 * records below claim them only once the device flush in the close's
		 * sync made them durable). Not while I/O is still in flight.
		 */
		if (c->data)
			engine_ub_drain(c);
		pthread_mutex_lock(&c->lock);
		rc = hl_cache_meta_close(c->dev, &c->layout, c->core);
		pthread_mutex_unlock(&c->lock);
		if (rc)
			HL_ERR("cache", "cache %s: saving metadata: %s (the next start is cold)",
			       c->name, strerror(-rc));
		map_write(c, rc ? "failed" : "clean");
	} else if (!c->dead) {
		meta_kill(c);
	}
	cache_free(c);
}

/* ------------------------------------------------------------------ */
/* Stats                                                              */
/* ------------------------------------------------------------------ */

static void counters_copy(const struct eng_counters *s, struct hl_cache_engine_stats *out)
{
	for (unsigned i = 0; i < HL_CACHE_LAT_BUCKETS; i++) {
		out->read_hit_lat[i] = cnt_get(&s->hit_lat[i]);
		out->read_miss_lat[i] = cnt_get(&s->miss_lat[i]);
	}
	for (unsigned i = 0; i < HL_CACHE_SIZE_BUCKETS; i++) {
		out->read_size[i] = cnt_get(&s->rsize[i]);
		out->write_size[i] = cnt_get(&s->wsize[i]);
	}
	out->dev_errors = cnt_get(&s->dev_errors);
	out->origin_errors = cnt_get(&s->origin_errors);
	out->hit_retries = cnt_get(&s->hit_retries);
	out->passthrough_ios = cnt_get(&s->passthrough_ios);
	out->promotions = cnt_get(&s->promotions);
	out->ub_writebacks = cnt_get(&s->ub_writebacks);
}

/* The most common read-size bucket, rounded up to a power of two, clamped to 4K..1M. */
static uint32_t recommend_block(const uint64_t *rsize)
{
	unsigned best = 0;
	uint64_t n = 0;
	uint32_t v, p = HL_CACHE_MIN_BLOCK;

	for (unsigned i = 0; i < HL_CACHE_SIZE_BUCKETS; i++) {
		if (rsize[i] >= n && rsize[i]) {
			n = rsize[i];
			best = i;
		}
	}
	if (!n)
		return 0;
	v = hl_cache_size_bounds[best];
	if (v > HL_CACHE_MAX_BLOCK)
		return HL_CACHE_MAX_BLOCK;
	while (p < v)
		p <<= 1;
	return p;
}

int hl_cache_get_stats(struct hl_cache *c, const char *disk, struct hl_cache_engine_stats *out)
{
	struct hl_cache_core_info info;
	struct map_ent *e = NULL;
	int rc = 0;

	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&c->lock);
	if (disk) {
		e = ent_find(c, disk);
		rc = e ? hl_cache_core_stats(c->core, e->id, &out->core) : -ENOENT;
		if (e && e->warm_checked) {
			out->warm_kept = e->warm_kept;
			out->warm_dropped = e->warm_dropped;
			snprintf(out->warm_start, sizeof(out->warm_start),
			         "kept %llu, dropped %llu (%s)", (unsigned long long)e->warm_kept,
			         (unsigned long long)e->warm_dropped, e->warm_why);
		} else if (e) {
			snprintf(out->warm_start, sizeof(out->warm_start), "new disk");
		}
	} else {
		rc = hl_cache_core_stats(c->core, -1, &out->core);
	}
	hl_cache_core_info(c->core, &info);
	pthread_mutex_unlock(&c->lock);
	if (rc)
		return rc;
	counters_copy(e ? &e->st : &c->st, out);
	if (!e) {
		out->meta_syncs = cnt_get(&c->meta_syncs);
		out->ub_bytes = engine_ub_bytes(c);
		out->meta_waits = cnt_get(&c->meta_waits);
		out->nslots = info.nslots;
		out->used_slots = info.used_slots;
		out->window_slots = info.window_slots;
		out->window_used_slots = info.window_used_slots;
		out->inflight = (uint64_t)atomic_load(&c->inflight);
		out->meta_dirty = atomic_load(&c->changes) != atomic_load(&c->synced);
		out->write_ratio = info.write_ratio;
		out->write_budget_pct = info.write_budget_pct;
		out->write_budget_open = info.write_budget_open;
	}
	out->block_size = c->bs;
	out->recommended_block_size = recommend_block(out->read_size);
	out->passthrough = atomic_load(&c->failed);
	return 0;
}

const char *hl_cache_name(const struct hl_cache *c)
{
	return c->name;
}
