/*
 * engine_internal.h - what the files of the cache engine share (nothing
 * here leaves src/cache): the cache and its disks (struct hl_cache,
 * map_ent), a cached origin's private data, a request and its sub-I/Os,
 * the counters, small hot-path helpers, and the functions one engine file
 * calls in another.
 *
 * The engine's files (src/cache/engine), and which of them each calls:
 *  - engine.c: open, attach, close, quiesce, the runtime settings; stats
 *    export. Calls map, proof, meta, ub; hands origin's ops and event
 *    handler to hl_origin_wrap/listen, reads req's size buckets, bounds
 *    the close's save with run's engine_run_within.
 *  - engine_origin.c: the cached origin (ops table, submit checks and
 *    dispatch, origin events, close). Calls read, write, req, proof.
 *  - engine_read.c: READ and PRE-FETCH: hits, misses, stitched partial hits,
 *    and the fills a read plans. Calls fill, req, ub, meta.
 *  - engine_write.c: WRITE, discard, write-zeroes, COMPARE AND WRITE, and
 *    the updates a write plans. Calls fill, req, ub, meta.
 *  - engine_fill.c: what runs after a reply: fills, promotions, updates and
 *    the read-modify-writes of partly written sectors. Calls req, ub, meta.
 *  - engine_req.c: the request machinery (requests, subs, phases, the sub
 *    completion, the reply). Calls none: each sub brings its completion's
 *    work (eng_sub.done) from the file that made it.
 *  - engine_ub.c: the RAM update buffer's store of sector copies, its
 *    write-backs, and the copies reads and read-modify-writes take of it.
 *    Calls meta.
 *  - engine_proof.c: the warm restart proofs and the ownership
 *    revalidation. Calls map (it only compares an origin's ops with
 *    origin's table, to know a cached origin), meta's bounded waits and
 *    device failure, run's engine_run_within and shadow's lock.
 *  - engine_meta.c: the metadata thread (record flushes on request and
 *    periodic, proof ticks); device failure -> pass-through. Calls proof,
 *    map.
 *  - engine_map.c: the disk-name -> LUN-id map file and the disk entries.
 *    Calls run (every map write is bounded).
 *  - engine_run.c: engine_run_within, a call on a thread of its own waited
 *    for at most a bound. Calls none.
 *  - engine_shadow.c: the warm standby (publish the hot set as owner,
 *    pre-read the owner's as standby, move the proof onto its marks).
 *    Calls read (engine_read_shadow), proof, map; proof and origin call
 *    its lock and detach.
 * No two of them call each other, directly or round a longer circle
 * (engine.c -> origin -> read/write -> fill -> req/ub -> meta -> proof ->
 * map). Below them: cache_meta.c (the on-device metadata), cache_dev.c
 * (the device) and cache_trace.c, which call no engine file, and the core
 * (hotlun/cache.h, src/cache/core/core_internal.h), which knows nothing of
 * the engine.
 *
 * Ordering rules kept by these files (see docs/cache-engine.md for the reasoning):
 *  - a read replies as soon as its data is in the caller's buffers; fills
 *    run afterwards from bounce buffers the request owns;
 *  - a fill whose slot record may still claim old data (io->meta_barrier)
 *    waits for a metadata flush before its data write;
 *  - a write whose range some on-device record may still claim (a barrier
 *    io, or hl_cache_core_write_needs_sync) waits for a metadata flush
 *    before the origin write, so a crash cannot bring old data back;
 *  - every origin write/discard is listed on its disk (wlist) from before
 *    write_begin until write_end: a read planned meanwhile does not fill
 *    the blocks it overlaps. The core only tracks writers of blocks that
 *    are cached when the write begins; a block admitted by a read that
 *    starts while an origin write to it is in flight could otherwise be
 *    filled with the pre-write data. A write that begins while one
 *    listed overlaps it updates none of the blocks they share: the origin
 *    may run and answer the two in either order (overlap_no_update).
 *  - the metadata thread holds the cache mutex for a whole metadata flush,
 *    so no fill is installed between its data flush and its record writes.
 *  - RAM update buffer (engine_ub.c): an update of a device slot puts its
 *    sectors in the store and makes them valid and pending in the core in
 *    one hold of the cache mutex, after io_start granted the slot; the
 *    store's copy of a sector is current whenever the core lists it
 *    pending. A read copies the pending sectors it will serve while it
 *    plans (same mutex hold) and lays them over what the device returns. A
 *    write-back takes its sectors out of the core (no longer pending, not
 *    valid) and copies them out of the store in one hold, then writes the
 *    device like a fill (io_start .. io_end). No record ever claims a
 *    pending sector (hl_cache_core_slot_get masks them), so a crash loses
 *    them and the origin serves them; a clean stop writes them back
 *    (engine_ub_drain) before the records that claim them.
 */
#ifndef HOTLUN_CACHE_ENGINE_INTERNAL_H
#define HOTLUN_CACHE_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "cache/core/core_internal.h"
#include "cache/engine/cache_trace.h"
#include "hotlun/cache_engine.h"
#include "hotlun/event.h"
#include "hotlun/util.h"

#define SECT HL_CACHE_SECTOR

/* ------------------------------------------------------------------ */
/* State                                                              */
/* ------------------------------------------------------------------ */

/* Counters updated with relaxed atomics from every reactor. */
struct eng_counters {
	uint64_t hit_lat[HL_CACHE_LAT_BUCKETS];
	uint64_t miss_lat[HL_CACHE_LAT_BUCKETS];
	uint64_t rsize[HL_CACHE_SIZE_BUCKETS];
	uint64_t wsize[HL_CACHE_SIZE_BUCKETS];
	uint64_t dev_errors, origin_errors, hit_retries, passthrough_ios;
	uint64_t hit_streams; /* streamed reads that handed data up early (engine_read.c) */
	uint64_t promotions;    /* RAM window blocks copied to the SSD */
	uint64_t ub_writebacks; /* update buffer write-backs completed */
	/* the origin's latency as the cache sees it (engine_sub_cb): reads, writes; kept in
	 * map_ent.st only (hl_cache.st's stay 0: hl_cache_get_stats sums the disks') */
	uint64_t origin_read_lat[HL_ORIGIN_LAT_BUCKETS], origin_write_lat[HL_ORIGIN_LAT_BUCKETS];
	uint64_t origin_read_ns, origin_write_ns;
};

/* A disk the cache knows: attached now, or mapped by an earlier run. */
/* Failed origin write ranges a disk remembers before merging them (map_ent.unsettled). */
#define ENG_UNSETTLED_MAX 16

struct map_ent {
	uint16_t id; /* LUN id in the core */
	uint64_t quota;
	uint64_t size; /* origin identity: size ... */
	char *name;
	char *ident;          /* ... and URI without throttle wrappers */
	bool attached;        /* guarded by hl_cache.lock */
	/*
	 * Requests of this disk not yet freed (engine_req_new .. engine_req_free):
	 * co_close waits for them (bounded), and an entry is never freed while
	 * any is left (hl_cache.orph keeps it).
	 */
	atomic_long inflight;
	/*
	 * Bumped (under hl_cache.lock) at every attach and detach. A request
	 * remembers it (eng_req.gen): one from an earlier attachment, abandoned
	 * by a detach that stopped waiting, installs nothing (engine_req_orphan).
	 */
	_Atomic uint32_t gen;
	struct hl_list wlist; /* origin writes in flight (eng_req.wlink); hl_cache.lock */
	struct eng_counters st;
	/*
	 * Warm restart proof (docs/cache-engine.md, "Proving the origin
	 * unchanged"): the token the origin gave, stored in the map; NULL:
	 * none, the next start drops the disk's blocks. proof and inner are
	 * guarded by hl_cache.sync_lock (and written under lock too).
	 */
	char *proof;
	char *cand;               /* meta thread: taken at the last tick, not yet recorded */
	struct hl_origin *inner;  /* the origin below while attached (proofs are taken from it) */
	char tag[64];             /* names this cache's marks in the origin: uuid and LUN id */
	/* what the last attach found, for the stats (hl_cache.lock) */
	bool warm_checked;
	_Atomic bool proofs_held; /* hl_cache_hold_proofs: no proof until hl_cache_revalidate */
	/*
	 * hl_cache_disown found it attached (its LU about to be replaced by one
	 * without this cache): no proof until its next attach (sync_lock).
	 * disown_undo: marked by a disown whose map write did not land (it was
	 * refused: the disk stays served through the cache), so the next map
	 * write that lands takes the mark back and proofs are recorded again.
	 */
	bool disowned, disown_undo;
	uint64_t warm_kept, warm_dropped;
	char warm_why[HL_ORIGIN_WHY_MAX];
	/*
	 * Attached during a lazy restore: warm_kept and warm_dropped are
	 * counted (and the "warm start" line logged) when it ends.
	 */
	bool warm_lazy;
	bool warm_cold; /* ... and its proof was gone: the line says "cold: " */
	/* the warm standby (engine_shadow.c), NULL: not a shared disk; hl_cache.lock */
	struct shadow_ent *sh;
	/*
	 * Held for this disk's shadow step, its revalidation, and while its
	 * shadow is set up or detached (engine_shadow.c); one per disk, so a
	 * takeover's revalidation never waits for another disk's step (a
	 * cluster round trip, a diff). Before sync_lock and lock.
	 */
	pthread_mutex_t shadow_mu;
	/*
	 * Ranges of origin writes that failed (engine_write.c): the origin may
	 * still run such a write later (an iscsi:// command whose session
	 * dropped, or that outlived the URL's timeout, may be held by the SAN),
	 * so its old bytes read now may be replaced without a write of ours.
	 * No fill is installed there until a write of ours to that range
	 * succeeds that began after the failure: seq is wseq when the range
	 * was added (the latest failure's, once merged). A range with lands
	 * set (the origin said may_land: a copy of the write may still run
	 * there, after any later write) is settled by no write, only once
	 * hl_origin_unfenced() is 0. Byte ranges [off, end); hl_cache.lock.
	 */
	struct {
		uint64_t off, end, seq;
		bool lands;
	} unsettled[ENG_UNSETTLED_MAX];
	uint32_t nunsettled;
	/*
	 * Bumped by every write as it joins wlist (eng_req.wseq): a write whose
	 * wseq is above an unsettled range's seq began after that write failed,
	 * so the origin ran the failed one first or not at all. hl_cache.lock.
	 */
	uint64_t wseq;
};

struct meta_wait {
	struct meta_wait *next;
	struct hl_reactor *r;
	void (*done)(struct meta_wait *w);
	int rc;
};

struct hl_cache {
	char *name, *device, *map_path;
	uint32_t bs, shift;
	uint64_t nslots, nwin;
	struct hl_cache_layout layout;
	struct hl_cache_dev *dev; /* metadata I/O: meta thread, open and close only */
	struct hl_origin *data;   /* slot data: O_DIRECT file origin on the device */
	uint8_t *window;          /* RAM window data: nwin * bs, 4 KiB aligned */
	/*
	 * RAM update buffer (engine_ub.c): copies of pending sectors keyed by
	 * (slot, sector), chained in ub_tab. Entries the core no longer lists
	 * are freed by a sweep once ub_count passes ub_sweep_at.
	 */
	uint64_t ub_cap;        /* bytes; 0: off */
	struct ub_ent **ub_tab; /* lock */
	uint64_t ub_tab_mask;   /* buckets - 1 */
	uint64_t ub_count;      /* lock: entries (pending or stale) */
	uint64_t ub_sweep_at;   /* lock */

	pthread_mutex_t sync_lock; /* serialises record syncs (meta thread, attach); before lock */
	pthread_mutex_t lock;
	struct hl_cache_core *core; /* lock */
	struct map_ent **ents;      /* lock; the array grows only on the main thread */
	size_t n_ents;
	/*
	 * Entries taken out of ents (another origin under the name, a forgotten
	 * disk) while requests of a detach that stopped waiting still point at
	 * them: freed once those are gone (engine_orph_reap), or never. lock.
	 */
	struct map_ent **orph;
	size_t n_orph;
	/*
	 * How long a detach (co_close) waits for the disk's requests, and the
	 * stop's drain (hl_cache_drain_bound_ms); HOTLUN_TEST_CACHE_DRAIN_MS.
	 */
	unsigned drain_ms;
	atomic_ulong orphan_drops;  /* fills of abandoned requests dropped */
	atomic_bool drain_late;     /* hl_cache_drain gave up at its bound */
	atomic_bool shadow_left;    /* engine_shadow_stop gave up: the shadow reactor still runs */
	struct hl_cache *park_next; /* hl_cache_close kept it for late completions */
	uint16_t next_id; /* lock */

	atomic_bool failed;   /* pass-through: the device failed */
	/*
	 * engine_meta_kill's map "failed" is durable (or its superblock wipe
	 * was tried), or _map_seal's: a restart formats the device. Set before
	 * the kill takes the waiters it releases (mlock): engine_meta_wait.
	 */
	atomic_bool killed;
	atomic_long inflight; /* requests not yet freed */
	atomic_ulong changes; /* bumped when metadata may need a flush */
	atomic_ulong synced;  /* the value of changes the last record flush covered */
	struct eng_counters st;
	uint64_t meta_syncs, meta_waits; /* atomics */

	/* metadata thread */
	pthread_t meta_thr;
	bool meta_started;
	pthread_mutex_t mlock;
	pthread_cond_t mcond;
	struct meta_wait *mw_head, **mw_tail; /* mlock */
	/*
	 * mlock: the waiters the metadata thread took for its turn (a record
	 * sync that may not return), and those it found the device failed for
	 * before the kill was durable: the kill releases both (meta_release);
	 * whoever takes a list posts it.
	 */
	struct meta_wait *mw_busy, *mw_kill;
	bool mstop;                           /* mlock */
	atomic_bool mdrop;                    /* reactors are gone: the meta thread posts nothing */
	bool fail_pending;                    /* mlock: kill the on-device metadata */
	/*
	 * The kill's own thread runs (engine_dev_error starts it, so that a
	 * record sync stuck in the metadata thread cannot hold the kill up).
	 * Set under mlock while the metadata thread is not stopping, so that
	 * engine_meta_stop sees it and waits for it (bounded).
	 */
	atomic_bool kill_running;
	atomic_bool dead; /* engine_meta_kill began: no more metadata writes */
	bool meta_exited; /* mlock: meta_main returned (engine_meta_stop waits for it) */
	/*
	 * engine_meta_stop gave up on the metadata thread (a device write that
	 * does not return): it may still hold sync_lock and write the device,
	 * so the close takes neither sync_lock nor the device, the map says
	 * "failed" (map_sealed: no later map write) and the cache is parked.
	 */
	atomic_bool meta_stuck;
	/*
	 * sync_lock's holder is in a call on an origin (a proof: rbd's
	 * snapshot calls), not on the cache device: a takeover waits for it
	 * (engine_sync_lock_patient) as for its own diff. Changed by the
	 * holder only.
	 */
	atomic_int sync_origin;
	atomic_bool map_sealed; /* engine_map_seal: the map stays "failed" */
	/*
	 * engine_map.c: a map write is out (taken and given back under map_mu,
	 * held for the write's whole length by its thread); map_left: the one
	 * out was given up on (the next writers fail at once until it returns,
	 * and the close parks the cache for its thread); seal_owed (map_mu): a
	 * seal came while one was out, which writes "failed" when it returns.
	 */
	atomic_bool map_busy, map_left, seal_owed;
	/*
	 * map_failed: the seal is durable (the map says "failed", or the map
	 * is gone: either makes the next start format). A seal that did not
	 * land is retried by its writer until it does (it keeps map_busy:
	 * the cache is parked); seal_last: the stop's last resort, a writer
	 * that still cannot write "failed" removes the map. seal_rc: the
	 * result of the seal writer's first try (1: not tried yet), so that
	 * its caller need not wait for the retries.
	 */
	atomic_bool map_failed, seal_last;
	atomic_int seal_rc;
	/*
	 * Called once a seal's "failed" is durable (engine_meta_release: the
	 * writes waiting for a record sync go on, as after a kill). NULL: a
	 * harness with the map code alone.
	 */
	void (*on_sealed)(struct hl_cache *c);
	/* the map file as engine_map_read read it at open (bounded), until engine_map_load */
	char *map_text;
	size_t map_len;
	bool map_read;
	uint64_t map_gen; /* map_mu: bumped as each write takes map_busy */
	/*
	 * The last engine_map_write did not return 0: the file may lag what
	 * RAM says (a disk an attach added); the next attach or proof tick
	 * writes it even when nothing of theirs changed.
	 */
	atomic_bool map_stale;
	/*
	 * The superblock (uuid, seq) the map file was written against (version
	 * 3's device line, engine_map_load): map_dev_known false for a map of
	 * version 1 or 2 (no device line: not checked). map_seq: the seq the
	 * last map write that returned 0 named (sync_lock, like the writes), so
	 * that a superblock written since is followed by a map write
	 * (engine_map_lags).
	 */
	uint8_t map_dev_uuid[16];
	uint64_t map_dev_seq;
	bool map_dev_known;
	uint64_t map_seq;
	pthread_mutex_t map_mu; /* guards taking map_busy and setting seal_owed, never held in I/O */
	pthread_cond_t mexit;   /* mlock, CLOCK_MONOTONIC: meta_exited became true */
	char *meta_hold;        /* HOTLUN_TEST_CACHE_META_HOLD: a sync waits while it exists */
	uint32_t interval_ms;
	struct eng_shadow *shadow; /* engine_shadow.c: its reactor, NULL until a disk shadows */

	/* lazy restore (engine_restore.c): the loader thread and its progress */
	struct hl_cache_restore rs; /* the loader's (published in the atomics below) */
	pthread_t rs_thr;
	bool rs_started;
	atomic_bool rs_stop;
	atomic_bool rs_exited; /* restore_main returned (engine_restore_stop waits for it) */
	atomic_int rs_phase; /* enum hl_cache_restore_phase */
	uint64_t rs_t0;      /* engine_now_ms() at open */
	unsigned rs_delay_ms; /* HOTLUN_TEST_RESTORE_DELAY_MS (tests) */
	char *rs_hold;        /* HOTLUN_TEST_RESTORE_HOLD: the loader waits while it exists */
	atomic_ullong rs_pages, rs_pages_left, rs_restored, rs_dropped, rs_filtered, rs_ms;
	atomic_ullong rs_max_lock_us;
	atomic_ullong read_wait_max_ns, read_waits_over_1ms; /* engine_read.c: lookup_lock */
	atomic_uint read_waiters; /* reads blocked in lookup_lock now (the restore gives way) */
};

/* Behind each cached origin. */
struct co_priv {
	struct hl_cache *c;
	struct hl_origin *inner; /* the wrapper's o->inner, at hand (hl_origin_close closes it) */
	struct map_ent *ent;
};

/* The ops of the origin hl_cache_attach() returns (engine_origin.c). */
extern const struct hl_origin_ops cache_origin_ops;

static inline struct co_priv *co_of(struct hl_origin *o)
{
	return hl_origin_priv(o);
}

/* ------------------------------------------------------------------ */
/* Requests                                                           */
/* ------------------------------------------------------------------ */

/*
 * SUB_BUF: no I/O, owns the bounce buffer of a stitched run (RUN pieces and
 * PHIT pieces read into it). SUB_PHIT: valid sectors of a PARTIAL block,
 * read from the cache device. SUB_RMW: the old content of a partly written
 * sector, read from the slot before an update merges and writes it.
 */
enum sub_kind {
	SUB_HIT,
	SUB_RUN,
	SUB_RETRY,
	SUB_FILL,
	SUB_WRITE,
	SUB_SKIPPED,
	SUB_BUF,
	SUB_PHIT,
	SUB_RMW,
};

struct eng_req;

/* One I/O a request makes: to the cache device or to the origin. */
struct eng_sub {
	struct hl_origin_io io;
	struct eng_req *req;
	struct iovec iov;
	uint8_t *buf; /* owned when own */
	bool own;
	bool direct; /* HIT/RETRY: buf is the caller's buffer itself, no copy */
	bool dev;    /* the I/O goes to the cache device (traced) */
	bool fin;    /* streamed read: HIT/RETRY: its bytes are in the caller's buffer, final */
	uint64_t t0; /* an origin READ or WRITE: when it was submitted (its latency), else 0 */
	uint8_t kind;
	uint8_t rmw_wait; /* FILL: SUB_RMW reads still to merge before the write */
	bool rmw_failed;  /* FILL: one of them failed: the update is dropped */
	bool ub;          /* FILL: an update into the RAM update buffer, not the device */
	uint32_t k;       /* HIT/FILL/RETRY/PHIT/RMW: index in ios; RUN: first block */
	uint32_t nk;      /* HIT: ios k..k+nk-1, adjacent on the device, read as one */
	uint32_t peer;    /* RMW: the FILL sub it merges into */
	uint64_t lo, hi;  /* RUN/RETRY/BUF/PHIT: LUN bytes held by buf; RMW: the sector */
	/* The per-kind work of its completion, from the file that made it (NULL: none). */
	void (*done)(struct eng_sub *s, int result);
};

struct eng_req {
	struct hl_cache *c;
	struct co_priv *co;
	struct map_ent *ent;
	struct hl_origin_io *uio; /* the caller's; valid until replied */
	struct hl_reactor *r;
	struct hl_timer defer;
	struct meta_wait mw;
	struct hl_list wlink; /* ent->wlist while a write is in flight */
	void (*phase_done)(struct eng_req *req);
	uint64_t off, len, t0;
	enum hl_io_op op;
	int pending;
	int status;
	bool all_hit, in_wlist, replied, inside_submit, no_data;
	bool cached; /* READ: the plan found some of its bytes in the cache (hit or partial) */
	bool pooled; /* from the thread's free list (engine_req.c), REQ_POOL_BYTES long */
	/*
	 * READ streamed to uio->ready (engine_read.c, "Streaming a big hit"):
	 * every block a HIT, read in chunks; rnext: the first sub not yet fin,
	 * rsent: the bytes reported ready so far.
	 */
	bool stream;
	uint32_t rnext;
	uint64_t rsent;
	uint32_t gen; /* ent->gen when it was made */
	uint64_t wseq; /* a write: ent->wseq taken when it joined wlist */
	uint32_t nb, nios, nsub, maxsub;
	struct hl_cache_io *ios;
	int32_t *run_of; /* per block of a read: its RUN (or BUF) sub, or -1 */
	uint8_t *iof;    /* per io: IOF_* */
	uint8_t *vmap;   /* read: bit i = sector off/SECT + i valid in a PARTIAL block */
	/*
	 * Update buffer. Read: copies of the pending sectors it serves (ov_n
	 * sectors, LUN byte offsets in ov_off), laid over the device's data.
	 * Write: the old content of a partly written head/tail sector that was
	 * pending when the write began (rmw_off[i] == UINT64_MAX: none).
	 */
	uint8_t *ov;
	uint64_t *ov_off;
	uint32_t ov_n;
	uint8_t *rmw_old[2];
	uint64_t rmw_off[2];
	struct eng_sub *subs;
	bool subs_heap; /* subs was reallocated for a stitched read */
};

/* eng_req.iof */
#define IOF_QUEUED  0x1 /* a FILL sub calls io_end when its write completes */
#define IOF_WRITTEN 0x2 /* finished at once, data in place (RAM window) */
#define IOF_DONE    0x4 /* already finished by the core (write_end): no io_end */

/* ------------------------------------------------------------------ */
/* Small helpers                                                      */
/* ------------------------------------------------------------------ */

static inline void cnt_add(uint64_t *p, uint64_t v)
{
	__atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}

static inline uint64_t cnt_get(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

/*
 * req belongs to an earlier attachment of its disk (a detach stopped
 * waiting for it): it must not make anything valid. Read under c->lock,
 * where detach and attach bump the generation, so no fill installs after
 * the detach took the disk's final proof.
 */
static inline bool engine_req_orphan(const struct eng_req *req)
{
	return atomic_load_explicit(&req->ent->gen, memory_order_relaxed) != req->gen;
}

/* LUN byte offset of cache block b. */
static inline uint64_t blk_start(const struct hl_cache *c, uint64_t b)
{
	return b << c->shift;
}

/*
 * A buffer for O_DIRECT I/O on the cache device (slot data, the RAM
 * window): 4 KiB-aligned, its size rounded up to whole 4 KiB, not zeroed.
 * Free with free(). @return NULL without memory.
 */
static inline void *dio_alloc(size_t len)
{
	void *p = NULL;

	if (posix_memalign(&p, 4096, HL_ALIGN_UP(len ? len : 1, (size_t)4096)))
		return NULL;
	return p;
}

/* Copy len bytes at byte pos of the iovecs into dst. */
static inline void iov_to_buf(const struct iovec *iov, int cnt, uint64_t pos, void *dst,
                              uint64_t len)
{
	uint8_t *d = dst;

	for (int i = 0; i < cnt && len; i++) {
		if (pos >= iov[i].iov_len) {
			pos -= iov[i].iov_len;
			continue;
		}
		size_t n = HL_MIN(iov[i].iov_len - pos, len);
		memcpy(d, (const uint8_t *)iov[i].iov_base + pos, n);
		d += n;
		len -= n;
		pos = 0;
	}
}

/*
 * The caller's buffer for LUN bytes [lo, lo + len) of req if it is one
 * contiguous piece of one iovec that O_DIRECT can read into (4 KiB-aligned
 * address; lo and len are whole sectors already), else NULL.
 */
static inline uint8_t *iov_span(const struct iovec *iov, int cnt, uint64_t pos, uint64_t len)
{
	for (int i = 0; i < cnt; i++) {
		if (pos >= iov[i].iov_len) {
			pos -= iov[i].iov_len;
			continue;
		}
		if (iov[i].iov_len - pos < len)
			return NULL;
		uint8_t *p = (uint8_t *)iov[i].iov_base + pos;
		return ((uintptr_t)p & 4095) ? NULL : p;
	}
	return NULL;
}

/* Copy len bytes of src to byte pos of the iovecs. */
static inline void buf_to_iov(const struct iovec *iov, int cnt, uint64_t pos, const void *src,
                              uint64_t len)
{
	const uint8_t *s = src;

	for (int i = 0; i < cnt && len; i++) {
		if (pos >= iov[i].iov_len) {
			pos -= iov[i].iov_len;
			continue;
		}
		size_t n = HL_MIN(iov[i].iov_len - pos, len);
		memcpy((uint8_t *)iov[i].iov_base + pos, s, n);
		s += n;
		len -= n;
		pos = 0;
	}
}

/* ------------------------------------------------------------------ */
/* Shared between the engine's files                                  */
/* ------------------------------------------------------------------ */

/* engine_meta.c */

/**
 * Count a cache-device error (on disk e too, may be NULL) and, the first
 * time, switch the cache to pass-through: the metadata thread then makes
 * the on-device metadata untrustworthy. Any thread.
 */
void engine_dev_error(struct hl_cache *c, struct map_ent *e, int rc);

/**
 * The device file shrank under us (truncated): its holes read as zeroes,
 * and a write past the new end would hide that from the end-of-file check
 * of the data reads. Any thread. @return true when it did (the caller
 * reports the device error: pass-through).
 */
bool engine_device_check_size(struct hl_cache *c);

/**
 * Run done(w) on the request's reactor after a metadata flush that starts
 * from now on (w is req->mw; w->rc says how the flush went), or once the
 * device failure is durable (c->killed; rc 0). Returns at once. @return
 * false when nothing was queued because killed is set already: no flush
 * matters any more, the caller goes on in line as done() would.
 */
bool engine_meta_wait(struct eng_req *req, void (*done)(struct meta_wait *w));

/* engine_restore.c */

/** Start the loader thread of a lazy load begun into c->rs (open). @return 0 or -errno. */
int engine_restore_start(struct hl_cache *c, uint64_t t0_ms);

/** Stop the loader thread where it is (close); a no-op when it is not running. */
void engine_restore_stop(struct hl_cache *c);

/** CLOCK_MONOTONIC in milliseconds (the reactors' clock, hl_now_ns). */
static inline uint64_t engine_now_ms(void)
{
	return hl_now_ns() / 1000000u;
}

/** Start the metadata thread (open). @return 0 or -errno. */
int engine_meta_start(struct hl_cache *c);

/**
 * Stop the metadata thread once it has flushed what was asked of it (a
 * no-op when it is not running). drop: the reactors are going, so it
 * hands nothing back to them (quiesce). Main thread; waits at most
 * c->drain_ms: a thread still in a device write then is abandoned (never
 * joined, meta_stuck set, the map sealed "failed"). @return false when the
 * thread is (or was) abandoned.
 */
bool engine_meta_stop(struct hl_cache *c, bool drop);

/**
 * A disk's close (co_close) or attach: take sync_lock, waiting at most c->drain_ms.
 * @return true with it held; false (not held) when meta_stuck is set, or
 * when it was not free in time: then meta_stuck is set and the map sealed
 * "failed" (engine_meta_stop's treatment of a stuck metadata thread).
 */
bool engine_sync_lock_within(struct hl_cache *c, const char *disk);
/**
 * A takeover's engine_sync_lock_within: the bound counts only while the
 * holder is not in a call on an origin (c->sync_origin): a slow cluster is
 * waited for (the origin's problem, as the takeover's own diff), a holder
 * in a device call past the bound is stuck (meta_stuck, map sealed).
 */
bool engine_sync_lock_patient(struct hl_cache *c, const char *disk);
/**
 * A record write or a holder of sync_lock did not end within c->drain_ms
 * (`what`, logged for disk): meta_stuck set and the map sealed "failed",
 * once. What engine_sync_lock_within does past its bound.
 */
void engine_meta_stuck(struct hl_cache *c, const char *disk, const char *what);
/**
 * killed is set (the map says "failed", durably): every waiter for a
 * record sync goes on, including those a metadata thread stuck on
 * sync_lock took for its turn. Any thread; c->on_sealed.
 */
void engine_meta_release(struct hl_cache *c);

/**
 * The device failed: seal the map "failed" (engine_map_seal: killed once it
 * is durable, and the waiters go), then wipe both superblocks, so that a
 * restart formats the device instead of trusting it. Takes no sync_lock: a
 * holder stuck in a device call cannot hold it up. Once (c->dead): the
 * kill's thread, the metadata thread, or close after it stopped.
 */
void engine_meta_kill(struct hl_cache *c);
/*
 * The yield of hl_cache_core_invalidate_yield for a caller holding c->lock
 * (arg: c): lets the reactors take it between two chunks of a big drop.
 */
void engine_lock_yield(void *arg);

/* engine_map.c */

/**
 * Rewrite the map file atomically (tmp, fsync, rename) with state "open",
 * "clean" or "failed", every disk and every proof. Writers hold
 * c->sync_lock, or run alone (open, close). Bounded: waits at most
 * c->drain_ms for a write under way, and at most c->drain_ms for its own.
 * @return 0, -ECANCELED (sealed: the map stays "failed"), -ETIMEDOUT (the
 * map's file system does not answer: the write under way or this one was
 * given up on; this one may still land, with what was true when it
 * began) or another -errno (logged).
 */
int engine_map_write(struct hl_cache *c, const char *state);
/**
 * Read the map into c->ents and c->next_id. @return true when it is usable
 * for this device (same geometry, not "failed"); false: format (c->ents is
 * left empty).
 */
bool engine_map_load(struct hl_cache *c);
/**
 * After engine_map_load returned true: is the map the one written against
 * this device's superblock (uuid, seq: hl_cache_meta_ident)? Same uuid and
 * the device's seq equal to the map's, or one ahead (a crash between a
 * superblock write and the map write that follows it). Another uuid, a
 * device further ahead (a map restored from a backup) or behind (a device
 * restored from an image): false, logged, c->ents emptied (format). A map
 * without a device line (version 1 or 2) is not checked: true.
 */
bool engine_map_device_ok(struct hl_cache *c, const uint8_t uuid[16], uint64_t seq);
/**
 * A superblock was written since the last map write that landed (or that
 * one failed): the proof tick writes the map again (sync_lock held), so
 * that one superblock write at most separates the device from its map.
 */
bool engine_map_lags(struct hl_cache *c);
/**
 * Read the map file into c->map_text (NULL: none, or unreadable), within
 * c->drain_ms (0: in line): a state file system that stops answering hung
 * the start (or the reload) that opened the cache. engine_map_load and
 * engine_map_device_shrank parse it (each reads it first if not read yet);
 * hl_cache_open reads it again once it holds the device exclusively.
 * @return 0, -ETIMEDOUT (given up on: the open fails) or -errno (no map).
 */
int engine_map_read(struct hl_cache *c);
/**
 * Before the device is opened: a regular file shorter than the device its
 * map describes was truncated, and its records may claim data that is
 * gone. @return 0 or -EIO (logged: refuse the cache).
 */
int engine_map_device_shrank(struct hl_cache *c);
/** A disk entry (strings copied; not listed yet). @return NULL without memory. */
struct map_ent *engine_ent_new(uint16_t id, uint64_t quota, uint64_t size, const char *name,
                               const char *ident);
/** Free a disk entry and its strings (NULL is harmless). */
void engine_ent_free(struct map_ent *e);
/**
 * Under c->lock: e leaves c->ents (the caller took it out); freed now, or
 * kept in c->orph while requests still point at it (leaked without
 * memory for the list: never freed under them).
 */
void engine_ent_retire(struct hl_cache *c, struct map_ent *e);
/** Under c->lock: free the retired entries no request points at any more. */
void engine_orph_reap(struct hl_cache *c);
/** List e in c->ents (c takes it). @return 0 or -ENOMEM. */
int engine_ent_add(struct hl_cache *c, struct map_ent *e);
/** The entry of disk name, or NULL. */
struct map_ent *engine_ent_find(struct hl_cache *c, const char *name);
/** The entry whose core LUN id is id, or NULL. Under c->lock. */
struct map_ent *engine_ent_by_id(struct hl_cache *c, uint16_t id);
/** A LUN id never handed out by the map. @return 0 or -ENOSPC. */
int engine_ent_id_alloc(struct hl_cache *c, uint16_t *out);
/**
 * The identity of an origin URI as the map stores it (no throttle(...)
 * wrappers, no credentials), in buf (len bytes). @return buf or uri.
 */
const char *engine_origin_ident(const char *uri, char *buf, size_t len);

/* engine_proof.c */

/** The tag that names disk id's marks in its origin (the cache's uuid and the LUN id). */
void engine_ent_tag(const struct hl_cache *c, uint16_t id, char tag[64]);
/**
 * Ask inner what changed since `proof` (NULL: no proof) into chg (the
 * caller frees chg->v). nomem: the caller already ran out of memory.
 * @return 0 (chg lists the changes) or -ESTALE (drop everything); why set.
 */
int engine_proof_changes(struct hl_origin *inner, const char *tag, const char *proof, bool nomem,
                         struct hl_range_list *chg, char *why, size_t whylen);
/**
 * c->lock held: drop from e what engine_proof_changes found (everything when
 * prc), and a proof that proves nothing any more; record the outcome in
 * e's warm_* statistics. @return whether e's proof went (the map needs
 * rewriting).
 */
bool engine_drop_changes(struct hl_cache *c, struct map_ent *e, int prc,
                         const struct hl_range_list *chg, const char *prefix, const char *why);
/** Meta thread, periodic: record the proofs the disks' origins gave twice in a row. */
void engine_proofs_refresh(struct hl_cache *c);
/**
 * Disk e was detached (e->inner is NULL already) and its origin `inner`
 * has no I/O left: take the final proof from it and store it in the map,
 * then let the origin forget older marks. Main thread, before inner is
 * closed. Blocking (the origin may wait a few seconds for an exact proof).
 */
void engine_proof_final(struct hl_cache *c, struct map_ent *e, struct hl_origin *inner);

/* engine_req.c */

/**
 * A request for uio on cached origin o (on the current reactor), with room
 * for nb blocks, maxios core ios and maxsub subs. @return NULL (no memory).
 */
struct eng_req *engine_req_new(struct hl_origin *o, struct hl_origin_io *uio, uint32_t nb,
                               uint32_t maxios, uint32_t maxsub);
/**
 * HOTLUN_TEST_CACHE_META_HOLD (tests only): wait while its file exists, as
 * a metadata write to a device that does not answer (the meta thread's
 * syncs, the close's save, a takeover's record sync).
 */
void engine_meta_test_hold(struct hl_cache *c);

/**
 * Write "failed" into the map and let no later engine_map_write change it
 * (a stuck metadata thread that comes back): the next start formats. Once
 * that write is durable (file and directory), c->killed is set
 * (engine_meta_kill's promise). Reads nothing other threads change (a
 * "failed" map names no disk: a start never reads them), so any thread may
 * seal whoever holds sync_lock or c->lock. Bounded as engine_map_write.
 * A seal that does not land is never dropped: the writer retries it until
 * it does (map_failed), or the stop's last try (engine_map_seal_last)
 * removes the map.
 * @return 0 (durable), -ETIMEDOUT (a write still out: it writes "failed"
 * when it returns, or this one was given up on) or -errno (logged; being
 * retried).
 */
int engine_map_seal(struct hl_cache *c);
/**
 * The stop's word on a sealed map whose "failed" did not land: the writer
 * (one retrying, or one started now) removes the map if it still cannot
 * write it; waits at most c->drain_ms. @return whether the seal is durable.
 */
bool engine_map_seal_last(struct hl_cache *c);

/** Free req and the buffers its subs own. */
void engine_req_free(struct eng_req *req);
/**
 * Wait until *count (a cache's or a disk's requests in flight) is 0 or
 * less, looking every 1 ms, until hl_now_ns() reaches deadline_ns. Every
 * 5 s after t0_ns, note(arg, left) is called when not NULL (a notice of
 * what it waits for). The drains of a stop (hl_cache_drain) and of a
 * disk's detach (co_drain) both wait with it. @return what is left: 0
 * when it got there, else the count at the deadline.
 */
long engine_wait_zero(atomic_long *count, uint64_t t0_ns, uint64_t deadline_ns,
                      void (*note)(void *arg, long left), void *arg);

/* engine_run.c */

/**
 * Run fn(arg) on a thread of its own and wait at most ms for it to return
 * (a call that may write a device that stops answering). arg: malloc'd or
 * NULL, taken (freed once fn returned). No memory or thread: fn runs in
 * line, unbounded. @return true with *rc = fn's result; false: fn had not
 * returned by then and goes on, detached: whatever it uses besides arg
 * must stay valid for ever (its callers seal the map, or, for a map write,
 * set map_left, and the close then parks the cache: never freed).
 */
bool engine_run_within(unsigned ms, int (*fn)(void *arg), void *arg, int *rc);
/**
 * engine_run_within, whose bound starts again whenever more(arg) says so
 * (looked at every 1 ms while fn runs; arg is valid then).
 */
bool engine_run_within_more(unsigned ms, int (*fn)(void *arg), void *arg, int *rc,
                            bool (*more)(void *arg));
/**
 * engine_run_within, whose caller stops waiting as soon as done(arg) says
 * so (looked at every 1 ms while fn runs; arg is valid then): @return
 * false then, fn goes on as if given up on.
 */
bool engine_run_within_until(unsigned ms, int (*fn)(void *arg), void *arg, int *rc,
                             bool (*done)(void *arg));

/* engine_req.c, continued */

/**
 * This thread's array of at least n core ios, for a read's lookup before
 * its request is sized for what the lookup planned (valid until the
 * thread's next call; freed when the thread exits). @return NULL (no memory).
 */
struct hl_cache_io *engine_ios_scratch(uint32_t n);
/**
 * The next sub of req (zeroed; done is the work its completion does before
 * the phase hold ends, may be NULL), or NULL when all maxsub are used.
 */
struct eng_sub *engine_sub_new(struct eng_req *req, enum sub_kind kind, uint32_t k,
                               void (*done)(struct eng_sub *s, int result));
/**
 * Submit sub s to origin o at off: the buffer is s->iov. Completion goes
 * through engine_sub_cb and holds the current phase. @return 0 or -errno
 * (no callback).
 */
int engine_sub_submit(struct eng_sub *s, struct hl_origin *o, enum hl_io_op op, uint64_t off,
                      uint64_t len);
/**
 * Start timing sub s, an origin READ or WRITE about to be submitted outside
 * engine_sub_submit (which times its own): engine_sub_cb files its latency.
 */
void engine_sub_timed(struct eng_sub *s);
/** Completion of every sub's origin io: the sub's done(), then the phase hold ends. */
void engine_sub_cb(struct hl_origin_io *io, int result);
/** The submitter's hold on the current phase ends (never completes inside submit). */
void engine_phase_end(struct eng_req *req);
/** Complete the caller's io with status (once; counts latency and errors). */
void engine_reply(struct eng_req *req, int status);

/* engine_origin.c */

/** Forwarded by the inner origin (hl_origin_listen); arg is the cached origin. */
void engine_origin_event(void *arg, struct hl_origin *inner, enum hl_origin_event ev,
                         uint64_t old_size);

/* engine_read.c */

/** READ and PREFETCH of length > 0 on cached origin o. @return 0 or -errno (no callback). */
int engine_read(struct hl_origin *o, struct hl_origin_io *uio);
/** A standby's shadow pre-read (PREFETCH; hl_cache_core_read_shadow plans it). Same contract. */
int engine_read_shadow(struct hl_origin *o, struct hl_origin_io *uio);

/* engine_shadow.c */

/**
 * No new pre-read starts (hl_cache_drain); those out still complete on the
 * shadow reactor, which runs until engine_shadow_stop. Blocking until a
 * step under way ends, or until deadline_ns (hl_now_ns). @return false:
 * a step still runs at the deadline.
 */
bool engine_shadow_hold(struct hl_cache *c, uint64_t deadline_ns);
/**
 * Stop the shadow reactor (quiesce, close): no new pre-reads; waits for
 * those out, up to c->drain_ms; past it the reactor is left running
 * (c->shadow_left: the close keeps the cache).
 */
void engine_shadow_stop(struct hl_cache *c);
/**
 * co_close: e stops shadowing and publishing; waits for its pre-reads. A
 * step that keeps e's shadow_mu past c->drain_ms is waited for while it is
 * in a call on the origin; one stuck in its records step (sync_lock not
 * free within the bound either: meta_stuck, map sealed) is given up on: it
 * ends on its own, touching neither the cached nor the inner origin.
 */
void engine_shadow_detach(struct hl_cache *c, struct map_ent *e);
/**
 * hl_cache_revalidate: no shadow step (a proof move) runs until
 * engine_shadow_unlock. A step that keeps the lock past c->drain_ms is
 * waited for while sync_lock is free (it is in a call on the origin);
 * @return false (not held) when sync_lock is not free within the bound
 * either (engine_sync_lock_within: the holder is stuck, the map sealed).
 */
bool engine_shadow_lock(struct hl_cache *c, struct map_ent *e);
void engine_shadow_unlock(struct hl_cache *c, struct map_ent *e);

/* engine_write.c */

/** WRITE, DISCARD, WRITE ZEROES, COMPARE AND WRITE on cached origin o. @return 0 or -errno. */
int engine_write(struct hl_origin *o, struct hl_origin_io *uio);
/**
 * True when [off, off + len) overlaps a failed write's range of e
 * (unsettled). Forgets first the ranges whose writes the origin below,
 * inner, says can no longer land. Under lock.
 */
bool engine_unsettled(struct map_ent *e, struct hl_origin *inner, uint64_t off, uint64_t len);

/* engine_fill.c */

/** A FILL or RMW sub finished (its done(), through engine_sub_cb). */
void engine_fill_sub_done(struct eng_sub *s, int result);
/**
 * Prepare writing sectors [fill_first, +fill_nsect) of io's slot from data
 * (valid until the request is freed, or copied here; freed here when
 * data_owned). A RAM window slot is copied at once. @return true when a
 * FILL sub is queued (its completion calls io_end); otherwise *written
 * says how the caller ends io.
 */
bool engine_fill_prepare(struct eng_req *req, struct hl_cache_io *io, uint32_t k, uint8_t *data,
                         bool data_owned, bool *written);
/**
 * After the reply: end (under the lock) every io that no FILL sub will end
 * (req->iof says how), then start the fills from sub first_fill on, after a
 * metadata flush when barrier. Frees req when they are done.
 */
void engine_fills_start(struct eng_req *req, uint32_t first_fill, bool barrier);
/** LUN bytes [*fs, *fe) of the sectors an update (or fill) io writes into its slot. */
void engine_fill_range(const struct eng_req *req, const struct hl_cache_io *io, uint64_t *fs,
                       uint64_t *fe);
/**
 * The sectors of an update's fill range that write req covers only partly
 * (LUN bytes, at most two: head and tail). @return how many.
 */
int engine_rmw_sectors(const struct eng_req *req, const struct hl_cache_io *io, uint64_t out[2]);

/* cache_meta.c */

/**
 * hl_cache_meta_sync() for the engine: core accesses happen under lock
 * (may be NULL), device I/O outside it. Callers serialise syncs.
 */
int cache_meta_sync_locked(struct hl_cache_dev *d, struct hl_cache_layout *l,
                           struct hl_cache_core *c, pthread_mutex_t *lock);

/**
 * The device failed: zero both superblocks and flush, so that a start
 * finds none and formats. Takes no lock: a superblock write out meanwhile
 * (a record sync's mark during a lazy restore, the restore's end) wipes
 * them again when it returns (l->killed). @return 0 or -errno (the wipe).
 */
int hl_cache_meta_kill(struct hl_cache_dev *d, struct hl_cache_layout *l);

/* engine_ub.c */

/** Set up the update buffer of bytes (0: none) at open. @return 0 or -ENOMEM. */
int engine_ub_init(struct hl_cache *c, uint64_t bytes);
/** Free the store (close, crash). */
void engine_ub_fini(struct hl_cache *c);
/**
 * A clean stop: write every pending sector to the device (synchronous
 * device writes, no reactor needed), so that the records the close writes
 * next claim them. Main thread, nothing in flight. @return 0 or -errno
 * (sectors not written stay invalid: the origin serves them).
 */
int engine_ub_drain(struct hl_cache *c);
/** Bytes the store holds now (pending or not yet swept). Any thread. */
uint64_t engine_ub_bytes(struct hl_cache *c);
/**
 * Under c->lock, right after hl_cache_core_read(): copy the pending sectors
 * of the request's HIT and PARTIAL device blocks into req->ov. @return 0
 * or -ENOMEM (the caller fails the read).
 */
int engine_ub_read_plan(struct eng_req *req);
/** Lay the pending copies of req that fall in [lo, hi) over buf (which holds [lo, hi)). */
void engine_ub_overlay(const struct eng_req *req, uint8_t *buf, uint64_t lo, uint64_t hi);
/**
 * Under c->lock, before hl_cache_core_write_begin() of a WRITE: keep a
 * copy of the partly written head/tail sector if it is pending (its
 * device copy is older). @return 0 or -ENOMEM.
 */
int engine_ub_write_plan(struct eng_req *req);
/**
 * FILL sub s (s->ub; io_start granted, read-modify-write merged) holds the
 * new data of its update: put it in the store, end the io, and start the
 * write-backs the buffer needs. Any reactor; takes c->lock.
 */
void engine_ub_install(struct eng_req *req, struct eng_sub *s);

#endif
