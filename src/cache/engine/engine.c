/*
 * engine.c - the read cache in hotlund's data path (include/hotlun/cache_engine.h),
 * its management side: open (device, layout, policy core, RAM window),
 * attach and close of cached origins, quiesce, the runtime settings
 * (admission, write policy, write budget), and the engine stats (latency
 * and size histograms).
 *
 * The metadata thread and device failure -> pass-through are in
 * engine_meta.c, the disk-name -> LUN-id map file in engine_map.c, the
 * warm restart proofs (a disk's cached blocks are trusted at attach only
 * as far as its origin proves itself unchanged) in engine_proof.c, the data
 * path in engine_origin.c, engine_req.c, engine_read.c, engine_write.c,
 * engine_fill.c and engine_ub.c; shared state and the ordering rules:
 * engine_internal.h.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/engine/engine_internal.h"
#include "hotlun/cache_engine.h"
#include "hotlun/event.h"
#include "hotlun/log.h"
#include "hotlun/util.h"

/* ------------------------------------------------------------------ */
/* Open, attach, close                                                */
/* ------------------------------------------------------------------ */

static void cache_free(struct hl_cache *c)
{
	if (!c)
		return;
	/* (an open that fails after they started: the loader, then the metadata thread) */
	engine_restore_stop(c);
	if (!engine_meta_stop(c, true) || atomic_load(&c->meta_stuck))
		return; /* a thread stuck in a device call still uses it: never freed */
	if (atomic_load(&c->map_busy))
		return; /* a map write given up on (engine_map.c) still uses it: never freed */
	if (c->data)
		hl_origin_close(c->data);
	hl_cache_restore_release(&c->rs);
	if (c->dev)
		hl_cache_dev_close(c->dev);
	hl_cache_layout_release(&c->layout);
	engine_ub_fini(c);
	hl_cache_core_destroy(c->core);
	for (size_t i = 0; i < c->n_ents; i++)
		engine_ent_free(c->ents[i]);
	free(c->ents);
	for (size_t i = 0; i < c->n_orph; i++)
		engine_ent_free(c->orph[i]);
	free(c->orph);
	free(c->window);
	free(c->name);
	free(c->device);
	free(c->map_path);
	free(c->map_text);
	pthread_mutex_destroy(&c->lock);
	pthread_mutex_destroy(&c->sync_lock);
	pthread_mutex_destroy(&c->mlock);
	pthread_cond_destroy(&c->mcond);
	pthread_cond_destroy(&c->mexit);
	pthread_mutex_destroy(&c->map_mu);
	free(c->meta_hold);
	free(c->rs_hold);
	free(c);
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

/*
 * Test knobs on the cache device's data I/O (tests only, docs/cache-engine.md):
 * HOTLUN_TEST_CACHE_DEV_WRITE_DELAY_MS: every write to the data area
 * (fills, promotions, write-backs) waits that long on its reactor's timer
 * first, so a test can stop hotlund while the fills of reads that replied
 * are still out. Reads are not delayed: the initiators' commands end at
 * their usual speed.
 * HOTLUN_TEST_CACHE_DEV_READ_FAIL=N: the Nth read of the data area since
 * open (counted over all reactors) fails with -EIO 50 ms late, its buffer
 * overwritten with 0xEE bytes first: a hit whose bytes left before its
 * retry from the origin finished would show them (hit_stream.sh).
 * HOTLUN_TEST_CACHE_DEV_READ_HOLD=N:MS: the Nth read of the data area is
 * submitted MS late (so a later chunk of a big hit is still out when an
 * earlier one fails).
 * HOTLUN_TEST_CACHE_DEV_READ_STAGGER=MS: reads of the data area submitted
 * back to back on a reactor (within 1 ms of the one before: the chunks of a
 * streamed hit) go out 0, MS, 2 MS, ... late, so a big hit's chunks come
 * in one by one, in order, and every streamed hit hands data up early
 * (hit_stream_race.sh); a burst is cut at 64 (then 0 again).
 */
struct test_dev_knobs {
	uint32_t write_ms;
	uint32_t fail_nth;
	uint32_t hold_nth, hold_ms;
	uint32_t stagger_ms;
	atomic_uint reads;
};

#define TEST_STAGGER_GAP_NS 1000000u
#define TEST_STAGGER_MAX 64u

/* HOTLUN_TEST_CACHE_DEV_READ_STAGGER: this read's place in its burst on this thread. */
static uint32_t test_stagger_idx(void)
{
	static _Thread_local uint64_t last_ns;
	static _Thread_local uint32_t idx;
	uint64_t now = hl_now_ns();

	idx = now - last_ns < TEST_STAGGER_GAP_NS ? (idx + 1) % TEST_STAGGER_MAX : 0;
	last_ns = now;
	return idx;
}

struct test_delay_io {
	struct hl_timer timer;
	struct hl_origin *o;
};
_Static_assert(sizeof(struct test_delay_io) <= sizeof(((struct hl_origin_io *)0)->priv),
               "test_delay_io must fit in hl_origin_io.priv");

#define TEST_FAIL_LATE_MS 50

static void test_delay_fire(struct hl_timer *t)
{
	struct hl_origin_io *io = t->arg;
	struct test_delay_io *d = (struct test_delay_io *)io->priv;
	int rc;

	rc = hl_origin_submit(d->o->inner, io); /* priv is the inner origin's from here */
	if (rc)
		io->cb(io, rc); /* our submit returned 0: the error goes through the callback */
}

static void test_fail_fire(struct hl_timer *t)
{
	struct hl_origin_io *io = t->arg;

	for (int i = 0; i < io->iovcnt; i++)
		memset(io->iov[i].iov_base, 0xee, io->iov[i].iov_len);
	io->cb(io, -EIO);
}

static int test_delay_submit(struct hl_origin *o, struct hl_origin_io *io)
{
	struct test_delay_io *d = (struct test_delay_io *)io->priv;
	struct test_dev_knobs *k = hl_origin_priv(o);
	struct hl_reactor *r = hl_reactor_current();

	uint32_t ms = io->op == HL_IO_WRITE ? k->write_ms : 0;

	if (r && io->op == HL_IO_READ && k->stagger_ms)
		ms = test_stagger_idx() * k->stagger_ms;

	if (r && io->op == HL_IO_READ && (k->fail_nth || k->hold_nth)) {
		uint32_t nth = atomic_fetch_add(&k->reads, 1) + 1;
		if (nth == k->fail_nth) {
			HL_WARN("cache", "test knob: cache device read at %llu+%llu fails",
			        (unsigned long long)io->offset, (unsigned long long)io->length);
			hl_timer_init(&d->timer, test_fail_fire, io);
			hl_timer_start(r, &d->timer, TEST_FAIL_LATE_MS);
			return 0;
		}
		if (nth == k->hold_nth)
			ms = k->hold_ms;
	}
	if (!r || !ms)
		return hl_origin_submit(o->inner, io);
	d->o = o;
	hl_timer_init(&d->timer, test_delay_fire, io);
	hl_timer_start(r, &d->timer, ms);
	return 0;
}

static void test_delay_close(struct hl_origin *o)
{
	(void)o; /* the inner origin is closed after this (hl_origin_wrap) */
}

static const struct hl_origin_ops test_delay_ops = {
    .name = "test_delay",
    .priv_size = sizeof(struct test_dev_knobs),
    .close = test_delay_close,
    .submit = test_delay_submit,
};

static uint32_t test_knob(const char *name, unsigned long max)
{
	const char *v = getenv(name);
	unsigned long n = v && *v ? strtoul(v, NULL, 10) : 0;

	return n <= max ? (uint32_t)n : 0;
}

static int test_dev_delay(struct hl_cache *c)
{
	uint32_t ms = test_knob("HOTLUN_TEST_CACHE_DEV_WRITE_DELAY_MS", 60000);
	uint32_t nth = test_knob("HOTLUN_TEST_CACHE_DEV_READ_FAIL", 1000000000);
	uint32_t stagger = test_knob("HOTLUN_TEST_CACHE_DEV_READ_STAGGER", 1000);
	const char *hold = getenv("HOTLUN_TEST_CACHE_DEV_READ_HOLD");
	unsigned hold_nth = 0, hold_ms = 0;
	struct test_dev_knobs *k;
	struct hl_origin *w;
	int rc;

	if (!hold || sscanf(hold, "%u:%u", &hold_nth, &hold_ms) != 2 || hold_ms > 60000)
		hold_nth = hold_ms = 0;
	if (!ms && !nth && !hold_nth && !stagger)
		return 0;
	rc = hl_origin_wrap(c->data, &test_delay_ops, "test_delay", &w);
	if (rc)
		return rc;
	k = hl_origin_priv(w);
	k->write_ms = ms;
	k->fail_nth = nth;
	k->hold_nth = hold_nth;
	k->hold_ms = hold_ms;
	k->stagger_ms = stagger;
	atomic_init(&k->reads, 0);
	c->data = w;
	if (ms)
		HL_WARN("cache", "cache %s: test knob: cache device writes delayed by %u ms",
		        c->name, ms);
	if (nth)
		HL_WARN("cache", "cache %s: test knob: cache device read %u fails", c->name, nth);
	if (hold_nth)
		HL_WARN("cache", "cache %s: test knob: cache device read %u held %u ms", c->name,
		        hold_nth, hold_ms);
	if (stagger)
		HL_WARN("cache", "cache %s: test knob: cache device reads staggered by %u ms",
		        c->name, stagger);
	return 0;
}

unsigned hl_cache_drain_bound_ms(void)
{
	const char *v = getenv("HOTLUN_TEST_CACHE_DRAIN_MS");
	unsigned long ms = v && *v ? strtoul(v, NULL, 10) : 0;

	return ms && ms <= 600000 ? (unsigned)ms : HL_CACHE_DRAIN_MS;
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
	int rc;
	uint64_t t0 = engine_now_ms();

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
	pthread_cond_init(&c->mexit, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&c->map_mu, NULL);
	if (getenv("HOTLUN_TEST_CACHE_META_HOLD") && *getenv("HOTLUN_TEST_CACHE_META_HOLD")) {
		c->meta_hold = strdup(getenv("HOTLUN_TEST_CACHE_META_HOLD"));
		HL_WARN("cache", "cache %s: test knob: record syncs wait while %s exists",
		        cfg->name, getenv("HOTLUN_TEST_CACHE_META_HOLD"));
	}
	c->mw_tail = &c->mw_head;
	c->on_sealed = engine_meta_release;
	c->interval_ms = cfg->meta_interval_ms ? cfg->meta_interval_ms : 1000;
	c->drain_ms = hl_cache_drain_bound_ms();
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
	/* the map for the size check, bounded (a hung state file system); read again below */
	if (engine_map_read(c) == -ETIMEDOUT) {
		rc = -ETIMEDOUT;
		goto fail;
	}
	rc = engine_map_device_shrank(c);
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
	/*
	 * The map again, now that nothing else can change it: the read above
	 * (for the size check, before the open extends the file) came before
	 * the wait, and a hotlund still stopping may have sealed its map
	 * "failed" since (engine_rev17_ut). Bounded the same way.
	 */
	if (engine_map_read(c) == -ETIMEDOUT) {
		rc = -ETIMEDOUT;
		goto fail;
	}
	rc = test_dev_delay(c);
	if (rc)
		goto fail;
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

	usable = engine_map_load(c);
	if (usable) {
		uint8_t uuid[16];
		uint64_t seq;

		/*
		 * The map of this device, of this time (its device line): not one
		 * restored from a backup, nor one of another device. No intact
		 * superblock: the load below formats anyway.
		 */
		if (hl_cache_meta_ident(c->dev, uuid, &seq) == 0)
			usable = engine_map_device_ok(c, uuid, seq);
	}
	if (usable) {
		for (size_t i = 0; i < c->n_ents;) {
			rc = hl_cache_core_lun_add(c->core, c->ents[i]->id, c->ents[i]->quota);
			if (!rc) {
				i++;
				continue;
			}
			/*
			 * Not in the core (a map of an older hotlund with more disks
			 * than a cache now serves): forgotten, so that an attach of
			 * that disk makes it anew; its records name a LUN id the core
			 * does not know and are dropped by the load below.
			 */
			HL_WARN("cache", "cache %s: disk %s: %s: its cached blocks are dropped",
			        c->name, c->ents[i]->name, strerror(-rc));
			engine_ent_free(c->ents[i]);
			c->ents[i] = c->ents[--c->n_ents];
		}
		/*
		 * Superblocks and summary only: the records are restored in the
		 * background once the disks are served (engine_restore.c).
		 */
		rc = hl_cache_meta_load_begin(c->dev, c->core, &c->layout, &c->rs);
		if (rc && rc != -ENODATA)
			goto fail_dev;
		usable = rc == 0;
	}
	if (!usable) {
		rc = hl_cache_meta_format(c->dev, c->bs, &c->layout);
		if (rc)
			goto fail_dev;
	}
	rc = engine_map_write(c, "open");
	if (rc)
		goto fail;
	rc = engine_meta_start(c);
	if (rc)
		goto fail;
	HL_NOTICE("cache",
	          "cache %s: %s, %llu blocks of %u KiB (+%llu in RAM, up to %llu), admission %s, "
	          "%s, update buffer %llu KiB; %s",
	          c->name, cfg->device, (unsigned long long)c->nslots, c->bs / 1024,
	          (unsigned long long)info.window_slots, (unsigned long long)c->nwin, adm,
	          cfg->write_policy ? cfg->write_policy : "update",
	          (unsigned long long)(c->ub_cap >> 10), usable ? "warm restart" : "formatted");
	if (usable) {
		HL_NOTICE("cache",
		          "cache %s: restoring %llu record page(s) in the background; served "
		          "meanwhile (until it is done, misses fill only free slots of record pages already "
		          "known, and nothing is evicted)",
		          c->name, (unsigned long long)c->rs.pages);
		rc = engine_restore_start(c, t0);
		if (rc)
			goto fail;
	}
	*out = c;
	return 0;
fail_dev:
	HL_ERR("cache", "cache %s: %s: metadata: %s", c->name, cfg->device, strerror(-rc));
fail:
	cache_free(c);
	return rc;
}

/*
 * c->lock held, no disk room left in the core: forget the detached disk
 * with the fewest cached blocks (its blocks are dropped; the caller syncs
 * the records before any I/O and rewrites the map). The map remembers
 * detached disks for their warm restart; a cache serves at most
 * HL_CACHE_MAX_DISKS at a time, not in its whole life. @return whether
 * one was forgotten.
 */
static bool ent_forget_one(struct hl_cache *c)
{
	size_t best = SIZE_MAX;
	uint64_t fewest = UINT64_MAX;

	for (size_t i = 0; i < c->n_ents; i++) {
		uint64_t n;

		if (c->ents[i]->attached)
			continue;
		n = hl_cache_core_lun_blocks(c->core, c->ents[i]->id);
		if (n < fewest) {
			fewest = n;
			best = i;
		}
	}
	if (best == SIZE_MAX)
		return false;
	HL_NOTICE("cache",
	          "cache %s: forgets disk %s (not attached; %llu cached block(s) dropped): a "
	          "cache serves at most %u disks at a time",
	          c->name, c->ents[best]->name, (unsigned long long)fewest, HL_CACHE_MAX_DISKS);
	hl_cache_core_lun_remove(c->core, c->ents[best]->id);
	engine_ent_retire(c, c->ents[best]);
	c->ents[best] = c->ents[--c->n_ents];
	return true;
}

static int attach_sync_main(void *arg)
{
	struct hl_cache *c = *(struct hl_cache **)arg;

	return cache_meta_sync_locked(c->dev, &c->layout, c->core, &c->lock);
}

/*
 * The attach's record sync (sync_lock held, c->lock not), within
 * c->drain_ms: a device write that does not answer kept the control
 * reactor for ever. Past the bound the sync goes on, detached:
 * engine_meta_stuck (the records are not trusted at the next start, the
 * map sealed, the close parks the cache), and the caller keeps sync_lock
 * for it (no other sync may run beside it; the others' bounded waits see
 * meta_stuck). @return the sync's result, or -ETIMEDOUT.
 */
static int attach_sync(struct hl_cache *c, const char *disk)
{
	struct hl_cache **arg = malloc(sizeof(*arg));
	int rc;

	if (!arg)
		return -ENOMEM;
	*arg = c;
	if (engine_run_within(c->drain_ms, attach_sync_main, arg, &rc))
		return rc;
	engine_meta_stuck(c, disk, "the record sync before its attach did not end");
	return -ETIMEDOUT;
}

static int disown(struct hl_cache *c, struct hl_origin *origin, const char *keep);

int hl_cache_attach(struct hl_cache *c, const char *disk_name, uint64_t quota_bytes,
                    struct hl_origin *inner, struct hl_origin **out)
{
	char ident_buf[3800]; /* a map line (4096 bytes) must hold it */
	const char *ident;
	struct map_ent *e;
	struct hl_origin *o;
	struct co_priv *co;
	struct hl_range_list chg = {0};
	char why[HL_ORIGIN_WHY_MAX] = "", tag[64];
	char *proof = NULL;
	bool changed = false, sync = false, check = false, keep_sync = false;
	uint64_t replaced = 0;
	int rc = 0, prc = -ESTALE;

	if (!c || !disk_name || !*disk_name || !inner || !out || strpbrk(disk_name, " \t\n"))
		return -EINVAL;
	if (strlen(inner->uri) >= sizeof(ident_buf))
		return -ENAMETOOLONG;
	ident = engine_origin_ident(inner->uri, ident_buf, sizeof(ident_buf));
	if (strchr(ident, '\n'))
		return -EINVAL;
	/*
	 * The same origin under another name of this cache (a disk renamed):
	 * its blocks miss this disk's writes, and a proof that cannot see them
	 * (exclusive = yes) would bring them back at that name's next attach.
	 * The daemon's disown leaves a disk's own cache to this.
	 */
	rc = disown(c, inner, disk_name);
	if (rc)
		return rc;
	/*
	 * The disk's blocks from an earlier run are trusted only as far as the
	 * origin proves itself unchanged since (it may take a while: rbd diffs
	 * the image): ask it before the locks are taken, nothing is served yet.
	 * Entries change only on this (main) thread, so e is still e below.
	 */
	pthread_mutex_lock(&c->lock);
	e = engine_ent_find(c, disk_name);
	if (e && !e->attached && !strcmp(e->ident, ident) && e->size == inner->size &&
	    e->quota == quota_bytes) {
		check = true;
		proof = e->proof ? strdup(e->proof) : NULL; /* NULL: cold */
		engine_ent_tag(c, e->id, tag);
	}
	pthread_mutex_unlock(&c->lock);
	if (check)
		prc = engine_proof_changes(inner, tag, proof, false, &chg, why, sizeof(why));
	free(proof);
	/*
	 * No record sync of the meta thread meanwhile. Bounded: a holder stuck
	 * in a device call (meta_stuck, or found so now: the map is sealed)
	 * would keep the caller (the control reactor) for ever.
	 */
	if (!engine_sync_lock_within(c, disk_name)) {
		HL_ERR("cache",
		       "cache %s: disk %s: not attached: the cache's metadata writes do not "
		       "answer (its device is stuck); restart hotlund once the device answers",
		       c->name, disk_name);
		free(chg.v);
		return -EIO;
	}
	pthread_mutex_lock(&c->lock);
	e = engine_ent_find(c, disk_name);
	if (e && e->attached) {
		rc = -EEXIST;
		goto out;
	}
	if (e && check) {
		changed |= engine_drop_changes(c, e, prc, &chg, "", why);
		uint64_t after = e->warm_kept, before = after + e->warm_dropped;
		/* Before any I/O: the dropped blocks' records must stop claiming data. */
		sync = prc || chg.n;
		e->warm_lazy = hl_cache_core_restoring(c->core); /* counted at the restore's end */
		e->warm_cold = prc != 0; /* said at the restore's end (warm_counts), as below */
		if (e->warm_lazy)
			;
		else if (prc || before != after)
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
		engine_ent_retire(c, e); /* a late fill of its last attachment may still read it */
		e = NULL;
		sync = true;
	}
	if (!e) {
		uint16_t id;
		rc = engine_ent_id_alloc(c, &id);
		if (rc)
			goto out;
		e = engine_ent_new(id, quota_bytes, inner->size, disk_name, ident);
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
		while (rc == -EMFILE && ent_forget_one(c)) {
			sync = changed = true;
			rc = hl_cache_core_lun_add(c->core, id, quota_bytes);
		}
		if (!rc)
			rc = engine_ent_add(c, e);
		if (rc == -EMFILE)
			HL_ERR("cache", "cache %s: disk %s: a cache serves at most %u disks",
			       c->name, disk_name, HL_CACHE_MAX_DISKS);
		else if (rc)
			HL_ERR("cache", "cache %s: disk %s: %s", c->name, disk_name, strerror(-rc));
		if (rc) {
			engine_ent_free(e);
			goto out;
		}
		/*
		 * The id may have been another disk's (engine_ent_id_alloc): before
		 * the map names it for this one, every record of it still on the
		 * device must be rewritten (the loader dropped it only in RAM) or,
		 * while restoring, the superblock list the id's blocks (lun_add noted
		 * them all), so that a crash drops its records still on the device.
		 */
		sync = true;
		if (replaced) {
			e->warm_checked = true;
			e->warm_dropped = replaced;
			snprintf(e->warm_why, sizeof(e->warm_why), "origin, size or quota changed");
		}
		changed = true;
	}
	if (inner->size / c->bs > HL_CACHE_MAX_CACHED_NR + 1)
		HL_NOTICE("cache",
		          "cache %s: disk %s: only its first %llu GiB are cached (2^32 blocks of "
		          "%u bytes); the rest is read from the origin",
		          c->name, disk_name,
		          (unsigned long long)((HL_CACHE_MAX_CACHED_NR + 1) * c->bs >> 30),
		          (unsigned)c->bs);
	if (sync && !c->dead) {
		/*
		 * Before any I/O: the dropped blocks' records must stop claiming
		 * data. Without c->lock (the other disks and the stats go on; this
		 * one is not served yet, and entries change only on this thread)
		 * and bounded (attach_sync).
		 */
		pthread_mutex_unlock(&c->lock);
		rc = attach_sync(c, disk_name);
		pthread_mutex_lock(&c->lock);
		if (rc == -ETIMEDOUT) {
			keep_sync = true;
			HL_ERR("cache",
			       "cache %s: disk %s: not attached: the record sync before it did not "
			       "end within %u ms (the cache device is not answering?); restart "
			       "hotlund once the device answers",
			       c->name, disk_name, c->drain_ms);
			goto out;
		}
		if (rc) {
			HL_ERR("cache", "cache %s: metadata: %s", c->name, strerror(-rc));
			goto out;
		}
	}
	if (changed || atomic_load(&c->map_stale)) {
		/* sealed (-ECANCELED: the device failed): the next start formats, names no disk */
		rc = engine_map_write(c, "open");
		if (rc == -ETIMEDOUT)
			/*
			 * Not served through the cache: the map may never name it. (The
			 * write given up on may still land: it names the disk with no
			 * proof, and its records were synced first: cold, never stale.)
			 */
			HL_ERR("cache",
			       "cache %s: disk %s: not attached: its map %s does not answer within "
			       "%u ms (its file system is hung?); attach it again once it answers",
			       c->name, disk_name, c->map_path, c->drain_ms);
		if (rc && rc != -ECANCELED)
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
	e->disowned = false;          /* (its proof went with it: this attach was cold) */
	e->disown_undo = false;
	atomic_fetch_add(&e->gen, 1); /* requests of an earlier attachment install nothing */
	engine_ent_tag(c, e->id, e->tag);
	e->inner = inner; /* proofs from now on (sync_lock held) */
	hl_origin_listen(inner, engine_origin_event, o);
	*out = o;
	rc = 0;
	HL_NOTICE("cache", "cache %s: disk %s attached (lun id %u%s)", c->name, disk_name, e->id,
	          changed ? ", new" : ", warm");
out:
	pthread_mutex_unlock(&c->lock);
	if (!keep_sync)
		pthread_mutex_unlock(&c->sync_lock);
	free(chg.v);
	return rc;
}

/*
 * Does a map entry's origin (its ident) name the origin whose ident is
 * `ident` and alias key `key` ("" none)? The same text does, and so does
 * another spelling of it (hl_origin_alias_key: a LUN's URL with other
 * options or case, a file through a link), which a write through the
 * other spelling would leave stale just the same.
 */
static bool names_origin(const char *ent_ident, const char *ident, const char *key)
{
	char k[HL_ORIGIN_ID_MAX];

	if (!strcmp(ent_ident, ident))
		return true;
	return *key && hl_origin_alias_key(ent_ident, k, sizeof(k)) == 0 && !strcmp(k, key);
}

/* The entry hl_cache_attach attaches (keep: its name; NULL: none): it checks its own proof. */
static bool disown_keeps(const struct map_ent *e, const char *keep)
{
	return keep && !strcmp(e->name, keep);
}

/* hl_cache_disown, but for the entry named keep (NULL: none). */
static int disown(struct hl_cache *c, struct hl_origin *origin, const char *keep)
{
	char ident_buf[3800]; /* as hl_cache_attach's */
	char key[HL_ORIGIN_ID_MAX], excl[HL_ORIGIN_PROOF_MAX];
	const char *ident;
	bool changed = false, any = false, *hit, *fresh;
	char **old;
	int rc = 0;

	if (!c || !origin)
		return -EINVAL;
	if (strlen(origin->uri) >= sizeof(ident_buf))
		return 0; /* no map entry can name it (hl_cache_attach refuses it) */
	ident = engine_origin_ident(origin->uri, ident_buf, sizeof(ident_buf));
	if (hl_origin_alias_key(ident, key, sizeof(key)))
		key[0] = '\0';
	/* what exclusive proofs of this origin's data say, under whatever URL (a second portal) */
	if (hl_origin_excl_ident(origin, excl, sizeof(excl)))
		excl[0] = '\0';
	/*
	 * Entries change only on this thread, so they are read here without
	 * the lock (their proofs under it: the metadata thread replaces them):
	 * a key may stat a path, which must not stall the I/O path. Most disks
	 * are none of this cache's.
	 */
	hit = calloc(c->n_ents + 1, sizeof(*hit));
	if (!hit)
		return -ENOMEM;
	for (size_t i = 0; i < c->n_ents; i++)
		any |= hit[i] =
		    !disown_keeps(c->ents[i], keep) && names_origin(c->ents[i]->ident, ident, key);
	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < c->n_ents; i++)
		if (!disown_keeps(c->ents[i], keep))
			any |= hit[i] |= hl_origin_proof_names(c->ents[i]->proof, excl);
	pthread_mutex_unlock(&c->lock);
	if (!any) {
		free(hit);
		return 0;
	}
	/* A map sealed "failed" makes the next open format: nothing to forget then. */
	if (!engine_sync_lock_within(c, "(disown)")) {
		free(hit);
		return atomic_load(&c->killed) ? 0 : -EIO;
	}
	/* the proofs taken out, put back if the map does not say so (entries: this thread's) */
	old = calloc(c->n_ents ? c->n_ents : 1, sizeof(*old));
	fresh = calloc(c->n_ents + 1, sizeof(*fresh)); /* marked disowned by this call */
	if (!old || !fresh) {
		pthread_mutex_unlock(&c->sync_lock);
		free(old);
		free(fresh);
		free(hit);
		return -ENOMEM;
	}
	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < c->n_ents; i++) {
		struct map_ent *e = c->ents[i];
		if (!hit[i])
			continue;
		/*
		 * Attached: its LU is being replaced; its final proof must not vouch
		 * either. A mark a refused disown left (disown_undo) is this call's
		 * too: refused again, it must still go with the next map write.
		 */
		fresh[i] = e->attached && (!e->disowned || e->disown_undo);
		e->disowned |= e->attached;
		e->disown_undo = false;
		free(e->cand);
		e->cand = NULL;
		if (!e->proof)
			continue;
		if (keep)
			HL_NOTICE("cache",
			          "cache %s: disk %s: its origin is disk %s of this cache now: its "
			          "cached blocks will be dropped at its next attach",
			          c->name, e->name, keep);
		else
			HL_NOTICE("cache",
			          "cache %s: disk %s: its origin is served without this cache: "
			          "its cached blocks will be dropped at its next attach",
			          c->name, e->name);
		old[i] = e->proof;
		e->proof = NULL;
		changed = true;
	}
	pthread_mutex_unlock(&c->lock);
	if (changed)
		rc = engine_map_write(c, "open");
	/*
	 * Sealed: the next start formats, once "failed" landed (the seal's
	 * writer retries it until then; the superblocks' wipe stands for it
	 * after a kill, killed).
	 */
	if (rc == -ECANCELED && atomic_load(&c->killed))
		rc = 0;
	/*
	 * Not written (the map's file system failed or does not answer): the
	 * caller refuses to serve the origin without the cache, and the proofs
	 * stay, so that a retry writes the map again instead of finding nothing
	 * to forget while the map may still hold them. (A write given up on
	 * that lands later drops them from the map: cold, never stale.)
	 */
	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < c->n_ents; i++) {
		if (rc && old[i] && !c->ents[i]->proof)
			c->ents[i]->proof = old[i];
		else
			free(old[i]);
		/*
		 * Refused: the disk stays served through the cache, so its mark
		 * goes with the next map write that lands (engine_map_write), not
		 * only at its next attach: until then no proof was recorded for it
		 * (cold at the next start, not stale: the map's older proof was
		 * true when taken). Not at once: a write given up on may still land
		 * and drop the proof from the map; a later write puts it back.
		 */
		c->ents[i]->disown_undo |= rc && fresh[i];
	}
	pthread_mutex_unlock(&c->lock);
	free(fresh);
	free(old);
	pthread_mutex_unlock(&c->sync_lock);
	free(hit);
	return rc;
}

int hl_cache_disown(struct hl_cache *c, struct hl_origin *origin)
{
	return disown(c, origin, NULL);
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

static void drain_note(void *arg, long left)
{
	struct hl_cache *c = arg;

	HL_NOTICE("cache", "cache %s: waiting for %ld request(s) to finish", c->name, left);
}

long hl_cache_drain(struct hl_cache *c, unsigned timeout_ms)
{
	uint64_t t0 = hl_now_ns();
	uint64_t deadline = t0 + (uint64_t)timeout_ms * 1000000u;
	long left, first;
	bool held;

	if (!c)
		return 0;
	/* within the bound too: a shadow step stuck on a dead device or cluster */
	held = engine_shadow_hold(c, deadline);
	first = atomic_load(&c->inflight);
	/*
	 * What is left once the initiators are gone: the cache-device writes
	 * (fills, update-buffer write-backs) of requests that replied already,
	 * and the shadow's pre-reads. They finish on the reactors, which must
	 * still run: a ring closed with I/O in it never calls back, and its
	 * requests (and their buffers) would be lost.
	 */
	left = held ? engine_wait_zero(&c->inflight, t0, deadline, drain_note, c)
	            : atomic_load(&c->inflight);
	if (left > 0 || !held) {
		/*
		 * What is left is abandoned, never freed under its late
		 * completions: hl_cache_close writes no record that claims
		 * what they write, and keeps the cache's memory for them.
		 */
		atomic_store(&c->drain_late, true);
		HL_WARN("cache",
		        "cache %s: %ld request(s)%s did not finish within %u ms at the stop: "
		        "abandoned (what they write is not kept)",
		        c->name, left, held ? "" : " and a shadow step", timeout_ms);
		return left + !held;
	}
	atomic_store(&c->drain_late, false);
	if (first > 0)
		HL_INFO("cache",
		        "cache %s: %ld request(s) in flight at the stop finished in %llu us",
		        c->name, first, (unsigned long long)((hl_now_ns() - t0) / 1000));
	return 0;
}

void hl_cache_quiesce(struct hl_cache *c)
{
	if (!c)
		return;
	engine_restore_stop(c);
	engine_shadow_stop(c); /* its fills may still need the metadata thread */
	engine_meta_stop(c, true);
}

/*
 * Caches closed with requests still out (hl_cache_close): never freed, so a
 * late completion finds them; listed here so a leak checker sees them held.
 */
static struct hl_cache *parked;
static pthread_mutex_t parked_mu = PTHREAD_MUTEX_INITIALIZER;

/* The close's metadata save, run on a thread of its own so that the close can bound it. */
struct close_save {
	struct hl_cache *c;
	bool abandon; /* requests still out: no update-buffer drain */
};

static int close_save_main(void *arg)
{
	struct close_save *s = arg;
	struct hl_cache *c = s->c;
	int rc;

	/*
	 * Keep the update buffer's sectors warm: write them back first (the
	 * records below claim them only once the device flush in the close's
	 * sync made them durable). Not while I/O is still in flight.
	 */
	if (!s->abandon)
		engine_ub_drain(c);
	engine_meta_test_hold(c);
	pthread_mutex_lock(&c->lock);
	rc = hl_cache_meta_close(c->dev, &c->layout, c->core);
	pthread_mutex_unlock(&c->lock);
	if (rc)
		HL_ERR("cache", "cache %s: saving metadata: %s (the next start is cold)", c->name,
		       strerror(-rc));
	/*
	 * A map that does not answer (-ETIMEDOUT, logged) keeps what it said
	 * last, or what the write given up on says: either names each disk
	 * with a proof that was true when it was written, and no record the
	 * device keeps claims a disk it does not name (attach syncs first).
	 */
	engine_map_write(c, rc ? "failed" : "clean");
	return rc;
}

/*
 * Save the records at close, waiting at most c->drain_ms: a device that
 * does not answer leaves the save running (its thread and the cache are
 * never freed: @return false, the caller parks the cache), and the map is
 * sealed "failed" so the next start trusts none of it.
 */
static bool close_save(struct hl_cache *c, bool abandon)
{
	struct close_save *s = malloc(sizeof(*s));
	int rc;

	if (!s) {
		struct close_save inl = {.c = c, .abandon = abandon};

		close_save_main(&inl); /* no memory: in line, unbounded, as before */
		return true;
	}
	s->c = c;
	s->abandon = abandon;
	if (engine_run_within(c->drain_ms, close_save_main, s, &rc))
		return true;
	HL_WARN("cache",
	        "cache %s: saving the metadata at close did not end within %u ms (the device "
	        "is not answering?): abandoned; its records are not trusted at the next start",
	        c->name, c->drain_ms);
	engine_map_seal(c);
	return false;
}

void hl_cache_close(struct hl_cache *c)
{
	struct hl_cache_stats st;
	bool abandon, stuck;
	long left;

	if (!c)
		return;
	engine_restore_stop(c);
	engine_shadow_stop(c);
	stuck = !engine_meta_stop(c, false) || atomic_load(&c->meta_stuck);
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
	left = atomic_load(&c->inflight);
	abandon = left > 0 || atomic_load(&c->shadow_left) || stuck;
	if (abandon && !(left > 0 || atomic_load(&c->shadow_left))) {
		/* only the metadata thread: below */
	} else if (abandon) {
		/*
		 * Requests still out (on stopped reactors, or a device that stopped
		 * answering): from now on they install nothing (a new generation
		 * for every disk), the records below do not claim the slots they
		 * write (the core makes a fill's sectors valid only at its end),
		 * and nothing they touch is freed or closed: the cache is parked.
		 */
		pthread_mutex_lock(&c->lock);
		for (size_t i = 0; i < c->n_ents; i++)
			atomic_fetch_add(&c->ents[i]->gen, 1);
		for (size_t i = 0; i < c->n_orph; i++)
			atomic_fetch_add(&c->orph[i]->gen, 1);
		pthread_mutex_unlock(&c->lock);
		HL_WARN("cache",
		        "cache %s: %ld request(s) still in flight at close%s: abandoned; the "
		        "cache's memory and device stay allocated for their late completions",
		        c->name, left, atomic_load(&c->shadow_left) ? " (and the shadow)" : "");
	}
	if (stuck) {
		/*
		 * The metadata thread was abandoned in a device write: it holds
		 * sync_lock, the device does not answer. The map is sealed
		 * "failed" (engine_meta_stop): nothing is synced, nothing
		 * trusted at the next start; the cache stays for the thread.
		 */
		HL_WARN("cache",
		        "cache %s: closed without saving its metadata (the metadata thread "
		        "is stuck); the next start formats the device",
		        c->name);
	} else if (!c->dead && !atomic_load(&c->failed)) {
		if (!close_save(c, abandon))
			abandon = true; /* parked below: the save's thread still uses it */
	} else if (!c->dead) {
		engine_meta_kill(c);
	}
	/*
	 * A seal that has not landed yet is not left behind as an "open" map
	 * the next start would trust: the last try removes the map if it still
	 * cannot say "failed" (engine_map.c).
	 */
	engine_map_seal_last(c);
	if (atomic_load(&c->map_busy)) {
		HL_WARN("cache",
		        "cache %s: closed while a write of %s is still out (its file system is "
		        "not answering): the cache's memory stays allocated for it",
		        c->name, c->map_path);
		abandon = true;
	}
	if (abandon) {
		atomic_store(&c->failed, true); /* a late read-modify-write writes nothing */
		pthread_mutex_lock(&parked_mu);
		c->park_next = parked;
		parked = c;
		pthread_mutex_unlock(&parked_mu);
		return;
	}
	cache_free(c);
}

/* ------------------------------------------------------------------ */
/* Stats                                                              */
/* ------------------------------------------------------------------ */

static void origin_lat_add(const struct eng_counters *s, struct hl_cache_engine_stats *out);

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
	out->hit_streams = cnt_get(&s->hit_streams);
	out->passthrough_ios = cnt_get(&s->passthrough_ios);
	out->promotions = cnt_get(&s->promotions);
	out->ub_writebacks = cnt_get(&s->ub_writebacks);
	origin_lat_add(s, out);
}

/* Add the origin latency of s into out (a disk's, or each disk's for the whole cache). */
static void origin_lat_add(const struct eng_counters *s, struct hl_cache_engine_stats *out)
{
	for (unsigned i = 0; i < HL_ORIGIN_LAT_BUCKETS; i++) {
		out->origin_read_lat[i] += cnt_get(&s->origin_read_lat[i]);
		out->origin_write_lat[i] += cnt_get(&s->origin_write_lat[i]);
	}
	out->origin_read_ns += cnt_get(&s->origin_read_ns);
	out->origin_write_ns += cnt_get(&s->origin_write_ns);
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
		e = engine_ent_find(c, disk);
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
		/* the origin's latency is kept per disk (origin_timed): the cache's is their sum */
		for (size_t i = 0; i < c->n_ents; i++)
			origin_lat_add(&c->ents[i]->st, out);
	}
	hl_cache_core_info(c->core, &info);
	pthread_mutex_unlock(&c->lock);
	if (rc)
		return rc;
	counters_copy(e ? &e->st : &c->st, out);
	if (!e) {
		out->meta_syncs = cnt_get(&c->meta_syncs);
		out->orphan_drops = atomic_load(&c->orphan_drops);
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
		out->restore_phase = (uint32_t)atomic_load(&c->rs_phase);
		out->restore_pages = atomic_load(&c->rs_pages);
		out->restore_pages_left = atomic_load(&c->rs_pages_left);
		out->restore_restored = atomic_load(&c->rs_restored);
		out->restore_dropped = atomic_load(&c->rs_dropped);
		out->restore_written = atomic_load(&c->rs_filtered);
		out->restore_ms = atomic_load(&c->rs_ms);
		out->restore_max_lock_us = atomic_load(&c->rs_max_lock_us);
	}
	out->read_lock_wait_max_us = atomic_load(&c->read_wait_max_ns) / 1000;
	out->read_lock_waits_over_1ms = atomic_load(&c->read_waits_over_1ms);
	out->block_size = c->bs;
	out->recommended_block_size = recommend_block(out->read_size);
	out->passthrough = atomic_load(&c->failed);
	return 0;
}

const char *hl_cache_name(const struct hl_cache *c)
{
	return c->name;
}
