/*
 * cache_engine.h - the read cache in the data path (src/cache/engine): one
 * struct hl_cache per [cache NAME] section (a cache device shared by
 * several disks) and, per disk, a "cached origin" that presents the same
 * struct hl_origin interface as the origin it wraps, so the SCSI layer does
 * not change when a disk gains a cache (docs/cache-engine.md). At its end,
 * the device side the engine runs on: the cache device (O_DIRECT, and an
 * in-memory device with fault injection for tests) and the on-device
 * metadata (docs/cache-format.md).
 *
 * The policy (hit, miss, admission, eviction, fill races) is the core's
 * (hotlun/cache.h); this layer does the I/O around it:
 *
 *  - slot data goes through an O_DIRECT file origin on the cache device
 *    (io_uring on the submitting reactor), never blocking a reactor;
 *  - metadata (slot records, barriers) is written by one thread per cache,
 *    periodically and whenever a slot whose record claims data is reused or
 *    written; I/Os that need it wait without blocking their reactor;
 *  - a failing cache device switches the cache to pass-through (never an
 *    error to the initiator); a failing origin returns its error and drops
 *    the affected blocks.
 *
 * Threading: hl_cache_open/attach/close run on the main thread before the
 * reactors start or after they stopped. The wrapper origin's submit runs on
 * any reactor thread (several at once), completions on the submitting one.
 * hl_cache_get_stats may run on any thread.
 */
#ifndef HOTLUN_CACHE_ENGINE_H
#define HOTLUN_CACHE_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "hotlun/cache.h"
#include "hotlun/origin.h"

struct hl_cache;

/** One [cache NAME] section. Strings are the caller's; copied by hl_cache_open. */
struct hl_cache_config {
	const char *name;         /* for logs and stats */
	const char *device;       /* file or block device path */
	uint64_t size;            /* bytes; 0: the device's current size */
	uint32_t block_size;      /* cache block, power of two 4 KiB..1 MiB; 0: 64 KiB */
	const char *admission;    /* "frequency" (default), "always", "nhit:N"; NULL: default */
	const char *write_policy; /* "update" (default) or "invalidate"; NULL: default */
	/*
	 * Where the disk-name -> LUN-id map lives (a small text file, rewritten
	 * atomically). NULL: "<device>.map", which suits a file cache device;
	 * for a block device the daemon puts it in its state_dir.
	 */
	const char *map_path;
	uint32_t meta_interval_ms; /* periodic metadata flush; 0: 1000 */
	/*
	 * RAM update buffer bytes (write coalescing, docs/cache-policy.md rule
	 * 8): 0: HL_CACHE_UPDATE_BUFFER_DEFAULT; HL_CACHE_UPDATE_BUFFER_OFF: off
	 * (every update of a cached block is written to the device at once).
	 */
	uint64_t update_buffer;
	/*
	 * Write budget in percent (docs/cache-policy.md rule 10): 0:
	 * HL_CACHE_WRITE_BUDGET_DEFAULT; HL_CACHE_WRITE_BUDGET_OFF: 0% (never
	 * relax admission).
	 */
	uint32_t write_budget;
};

/** hl_cache_config.update_buffer: no RAM update buffer. */
#define HL_CACHE_UPDATE_BUFFER_OFF UINT64_MAX
/** hl_cache_config.write_budget: 0%. */
#define HL_CACHE_WRITE_BUDGET_OFF UINT32_MAX

/**
 * Open (creating or extending a regular file to cfg->size) the cache
 * device, compute its layout, and load the metadata of a clean or unclean
 * earlier run (warm restart) or format it. Blocking; main thread.
 * *out is the caller's; free with hl_cache_close(). @return 0 or -errno
 * (-EINVAL for a bad admission/write_policy/block_size, -ENOSPC for a device
 * too small for one block).
 */
int hl_cache_open(const struct hl_cache_config *cfg, struct hl_cache **out);

/**
 * Give disk `disk_name` a place in the cache and wrap `inner` in a cached
 * origin. The disk keeps its LUN id (and its cached blocks) across restarts
 * as long as its origin identity (inner's URI without throttle wrappers and
 * credentials, and size) and quota are unchanged; otherwise its old blocks
 * are dropped. The map file never holds credentials. Another disk of
 * this cache whose origin is inner's (a disk renamed) loses its proof
 * first, as hl_cache_disown: its blocks miss this disk's writes (an
 * error writing the map is the attach's).
 * quota_bytes 0: share the pool. Blocking; main thread, before I/O starts.
 * On success the wrapper owns inner (hl_origin_close on the wrapper waits,
 * up to hl_cache_drain_bound_ms, for the disk's fills still in flight,
 * abandons the rest (they install nothing), detaches the disk and closes
 * inner; not on a reactor thread); on error the caller keeps inner.
 * @return 0, -EEXIST (disk already attached), -ENOSPC (quota), -errno.
 */
int hl_cache_attach(struct hl_cache *c, const char *disk_name, uint64_t quota_bytes,
                    struct hl_origin *inner, struct hl_origin **out);

/**
 * The origin `origin` is served writable without this cache (a disk opened
 * uncached or on another cache): writes through it never reach the blocks
 * this cache keeps of it for a disk not attached now, and a proof that
 * cannot see them (exclusive = yes: the size alone) would bring those
 * blocks back at the disk's next attach. Every detached disk of this cache
 * whose origin identity (as hl_cache_attach computes it) is origin's, or
 * another spelling of it (hl_origin_alias_key), or whose exclusive proof
 * names origin's data (hl_origin_proof_names: the same LUN under another
 * portal), loses its proof, the map written before this returns: the next attach is cold.
 * Call before the origin serves I/O. Blocking; main thread.
 * @return 0 or -errno (the map write failed: do not serve the origin).
 */
int hl_cache_disown(struct hl_cache *c, struct hl_origin *origin);

/**
 * This gateway became the owner of a shared disk (hotlun/owner.h): before
 * anything cached is served, ask the origin what changed since the disk's
 * last proof (other gateways wrote it meanwhile) and drop exactly that, or
 * every block of the disk when it cannot tell. `cached` is the wrapper
 * hl_cache_attach returned; no I/O of the disk is in flight. The result
 * shows in the disk's warm_* statistics. Blocking; not a reactor. The
 * origin's calls (rbd diffs the image; a proof the metadata thread takes
 * under the records' lock) are not bounded here: an origin that does not
 * answer cannot serve the disk either. Every wait on the cache
 * device is, by hl_cache_drain_bound_ms (the disk's shadow step holding
 * its lock; the records' lock, the drop's record sync and the map write,
 * as one step): when the records cannot be written (an error, or no
 * answer within the bound: the map is then sealed "failed"), the whole
 * cache goes pass-through, as after a device error, and every block of
 * the disk is dropped from memory: the disk is served from the origin
 * only, never from blocks that were not revalidated, and the next start
 * formats the device. @return 0 (serve the disk), -EINVAL (not a cached
 * origin) or -ENOMEM.
 */
int hl_cache_revalidate(struct hl_origin *cached);

/**
 * A shared disk is not this gateway's (any more): other gateways write its
 * origin, so the cache may not match it until the next hl_cache_revalidate.
 * Take no proof of the disk meanwhile (not even at close): the last proof
 * stays the mark that revalidation diffs against. Any thread; not blocking.
 */
void hl_cache_hold_proofs(struct hl_origin *cached);

/**
 * A shared disk is about to be handed to another gateway: no I/O is in
 * flight and every write completed; record a proof of the origin now (the
 * mark the next hl_cache_revalidate diffs against). Blocking; not a reactor.
 */
void hl_cache_proof_now(struct hl_origin *cached);

/*
 * The warm standby (docs/gateways.md, "Warm standby"): a shared disk's
 * owner publishes its hot set through the origin; a standby pre-reads it
 * into its own cache at a bounded rate and keeps what it read proven by
 * the owner's marks, so a takeover (hl_cache_revalidate) finds it warm.
 */

/**
 * Make cached (a shared disk: [global] gateway set) take part: publish as
 * owner, shadow at rate bytes/s as standby (0: publish only). Again with
 * another rate: the new rate. An origin without hot sets (a SAN LUN) stays
 * cold as standby and says so in the stats. Main thread. @return 0 or -errno.
 */
int hl_cache_shadow_config(struct hl_origin *cached, uint64_t rate);

/** What a disk's shadow does (hl_cache_shadow_stats). */
struct hl_cache_shadow_stats {
	bool supported;        /* the origin has hot sets (rbd); false: the standby stays cold */
	bool standby;          /* shadowing now (the disk is not ours); false: publishing */
	uint64_t rate;         /* bytes/s, 0: off */
	uint64_t hot_blocks;   /* standby: blocks in the owner's hot set last read, the
	                          hottest up to what fits (the disk's quota, else the cache);
	                          owner: blocks in the hot set it last published */
	uint64_t shadowed;     /* standby: of hot_blocks, held in this cache */
	uint64_t behind;       /* standby: hot_blocks - shadowed */
	uint64_t origin_reads, origin_bytes; /* pre-reads sent to the origin, since start */
	uint64_t dropped;      /* blocks dropped when the proof moved to a newer mark */
	uint64_t marks;        /* proof moves onto the owner's marks */
	uint64_t publishes;    /* owner: hot sets written */
	char state[128];       /* one line: what it does now, or why not */
};

/** The shadow of a shared disk. Any thread. @return 0, -ENOENT (not configured), -EINVAL. */
int hl_cache_shadow_stats(struct hl_origin *cached, struct hl_cache_shadow_stats *out);

/**
 * Change the admission policy while running ("frequency", "always", "nhit:N";
 * NULL = default). Cached blocks stay. Any thread. @return 0 or -EINVAL/-ENOMEM.
 */
int hl_cache_set_admission(struct hl_cache *c, const char *admission);

/**
 * Change what writes do to cached blocks while running ("update" or
 * "invalidate"; NULL = update), from the next write on; cached blocks
 * stay. Any thread. @return 0 or -EINVAL.
 */
int hl_cache_set_write_policy(struct hl_cache *c, const char *write_policy);

/** Change the write budget while running (percent 0..100). Any thread. @return 0 or -EINVAL. */
int hl_cache_set_write_budget(struct hl_cache *c, uint32_t pct);

/**
 * Resize the RAM update buffer while running (bytes, a multiple of 4 KiB;
 * 0 = off). What it holds is written to the cache device first; updates
 * go straight to the device meanwhile, and reads and writes go on (each
 * write-back runs outside the cache mutex). Blocking (the write-backs are
 * synchronous); not a reactor thread. @return 0, -EINVAL, -ENOMEM (the old
 * size stays, emptied).
 */
int hl_cache_set_update_buffer(struct hl_cache *c, uint64_t bytes);

/** How long a stop's drain and a disk's detach wait for cache requests by default (ms). */
#define HL_CACHE_DRAIN_MS 15000u

/**
 * The bound of a stop's hl_cache_drain and of a disk's detach (the close of
 * its cached origin waits for the disk's requests): HL_CACHE_DRAIN_MS, or
 * the test knob HOTLUN_TEST_CACHE_DRAIN_MS (1 .. 600000). Any thread.
 */
unsigned hl_cache_drain_bound_ms(void);

/**
 * A clean stop, once no initiator is left (the iSCSI server is destroyed)
 * and while the reactors, the workers and the metadata thread still run:
 * no new shadow pre-read starts, and the requests still in flight (fills
 * and update-buffer write-backs of reads and writes that replied already,
 * pre-reads) finish and are freed, every completion called. Waits up to
 * timeout_ms in all, a shadow step under way included. Blocking; not a
 * reactor thread; NULL is harmless.
 * @return 0, or the number of requests still in flight at the timeout (+1
 * for a shadow step still running): abandoned, logged; hl_cache_close then
 * writes no record claiming what they write and frees nothing they touch.
 */
long hl_cache_drain(struct hl_cache *c, unsigned timeout_ms);

/**
 * The reactors are stopping: stop the metadata thread without handing
 * anything back to them (I/Os still waiting for a record flush are
 * abandoned: none after a hl_cache_drain that returned 0). Call after the
 * reactors stopped and before they are destroyed; hl_cache_close()
 * follows. Blocking; NULL is harmless.
 */
void hl_cache_quiesce(struct hl_cache *c);

/**
 * Persist the metadata (a clean shutdown keeps the warm cache) and free c.
 * Every wrapper from hl_cache_attach must be closed first. Requests still
 * in flight (a drain that timed out) are abandoned: they install nothing,
 * no record claims what they write, and c is kept, never freed, so their
 * late completions find it (logged). Blocking; NULL is harmless.
 */
void hl_cache_close(struct hl_cache *c);

/** Latency histogram buckets: bucket i counts [2^i, 2^(i+1)) microseconds, 0 also in 0. */
#define HL_CACHE_LAT_BUCKETS 26
/** Request-size buckets, vscsiStats ioLength style (upper bounds in hl_cache_size_bounds). */
#define HL_CACHE_SIZE_BUCKETS 18

/** Upper bound in bytes of each size bucket (the last one is "more than 524288": UINT32_MAX). */
extern const uint32_t hl_cache_size_bounds[HL_CACHE_SIZE_BUCKETS];

/** Bucket of a request of len bytes. */
unsigned hl_cache_size_bucket(uint64_t len);

/** What hl_cache_get_stats reports (for the whole cache or one disk). */
struct hl_cache_engine_stats {
	struct hl_cache_stats core;                   /* the policy core's counters */
	uint64_t read_hit_lat[HL_CACHE_LAT_BUCKETS];  /* reads served wholly by the cache */
	uint64_t read_miss_lat[HL_CACHE_LAT_BUCKETS]; /* reads that needed the origin */
	uint64_t read_size[HL_CACHE_SIZE_BUCKETS];
	uint64_t write_size[HL_CACHE_SIZE_BUCKETS];
	uint64_t dev_errors; /* cache device I/O errors (the first one switches to pass-through) */
	uint64_t origin_errors;   /* origin read/write errors returned to the initiator */
	uint64_t hit_retries;     /* planned hits re-read from the origin after a device error */
	uint64_t hit_streams;     /* big hits whose leading data went up before the rest was read */
	uint64_t passthrough_ios; /* I/Os forwarded untouched while in pass-through */
	uint64_t promotions;      /* RAM window blocks copied to the SSD */
	uint64_t ub_writebacks;   /* RAM update buffer write-backs to the device (whole cache) */
	/*
	 * The origin as the cache sees it: latency of its reads (misses, fills'
	 * widening, retries) and write-throughs, in hl_origin_lat_bucket's
	 * buckets, and their summed time in nanoseconds.
	 */
	uint64_t origin_read_lat[HL_ORIGIN_LAT_BUCKETS], origin_write_lat[HL_ORIGIN_LAT_BUCKETS];
	uint64_t origin_read_ns, origin_write_ns;
	uint64_t ub_bytes;        /* bytes held by the update buffer now (whole cache) */
	uint64_t meta_syncs;      /* metadata flushes done (whole cache only) */
	/*
	 * Fills and update-buffer installs dropped because their request was
	 * made in an earlier attachment of its disk (a detach abandoned it,
	 * engine_req_orphan): they installed nothing (whole cache only).
	 */
	uint64_t orphan_drops;
	uint64_t meta_waits;      /* I/Os that waited for a metadata flush (whole cache only) */
	uint64_t nslots, used_slots, window_slots; /* geometry (whole cache only) */
	uint64_t window_used_slots; /* RAM window slots holding a block (whole cache) */
	uint64_t inflight; /* requests not finished (fills after the reply included; whole cache) */
	bool meta_dirty;   /* slot records changed since the last record flush (whole cache) */
	/*
	 * Recent cache-device writes per byte an admit-all cache would have
	 * written (whole cache; rule 10's measure), and the budget for it.
	 */
	double write_ratio;
	uint32_t write_budget_pct;
	bool write_budget_open; /* admission relaxed now (rule 10) */
	uint32_t block_size;
	/*
	 * Suggested cache block size from the read sizes seen: the most common
	 * read size bucket, rounded up to a power of two, within 4 KiB..1 MiB
	 * (0 before any read). See docs/cache-engine.md.
	 */
	uint32_t recommended_block_size;
	bool passthrough; /* the cache device failed */
	/*
	 * One disk only: what its last attach kept of the blocks cached before
	 * (the origin proved them unchanged) and dropped, and why, as text:
	 * "kept N, dropped M (file changed: ctime)", or "new disk".
	 */
	uint64_t warm_kept, warm_dropped;
	char warm_start[HL_ORIGIN_WHY_MAX + 64];
	/*
	 * Whole cache: the lazy restore of the slot records after a warm start
	 * (docs/cache-format.md, "Lazy restore"): its phase, the record pages
	 * the summary marked and those not read yet, the blocks restored, the
	 * records dropped (of those, written while restoring), and how long it
	 * took once done.
	 */
	uint32_t restore_phase; /* enum hl_cache_restore_phase */
	uint64_t restore_pages, restore_pages_left, restore_restored, restore_dropped;
	uint64_t restore_written, restore_ms;
	uint64_t restore_max_lock_us; /* the longest hold of the cache lock by one batch */
	/*
	 * What a read's lookup waited for the cache lock (held by another
	 * reactor, the metadata thread or the restore): the longest wait since
	 * the start, and how many waited longer than 1 ms.
	 */
	uint64_t read_lock_wait_max_us, read_lock_waits_over_1ms;
};

enum hl_cache_restore_phase {
	HL_CACHE_RESTORE_NONE = 0, /* formatted, or nothing to restore */
	HL_CACHE_RESTORE_RUNNING,
	HL_CACHE_RESTORE_DONE,
	HL_CACHE_RESTORE_STOPPED, /* stopped by close or a device error */
};

/**
 * Wait until the background restore of the slot records that a warm start
 * begins is over (done or stopped; at once when none runs). Blocking; for
 * tests and tools that want the old "everything loaded at open".
 */
void hl_cache_restore_wait(struct hl_cache *c);

/**
 * Counters of the whole cache (disk NULL) or of one attached or mapped disk.
 * Any thread. @return 0 or -ENOENT (unknown disk).
 */
int hl_cache_get_stats(struct hl_cache *c, const char *disk, struct hl_cache_engine_stats *out);

/** The cache's name, as configured. */
const char *hl_cache_name(const struct hl_cache *c);

/* ------------------------------------------------------------------ */
/* Cache device and on-device metadata                                */
/* ------------------------------------------------------------------ */

struct hl_cache_dev;

/**
 * Device operations. Synchronous; the engine runs them on worker threads
 * (hl_work_submit) or through io_uring, never on a reactor. Buffers must be
 * aligned to 4 KiB for O_DIRECT devices.
 */
struct hl_cache_dev_ops {
	const char *name;
	int (*pread)(struct hl_cache_dev *d, void *buf, size_t len, uint64_t off);
	int (*pwrite)(struct hl_cache_dev *d, const void *buf, size_t len, uint64_t off);
	int (*flush)(struct hl_cache_dev *d);
	void (*close)(struct hl_cache_dev *d);
};

struct hl_cache_dev {
	const struct hl_cache_dev_ops *ops;
	uint64_t size; /* bytes */
	int fd;        /* -1 for memory devices */
	void *priv;
};

/**
 * Open (and for a regular file create/extend to size) a cache device with
 * O_DIRECT. size 0: use the existing size. A regular file
 * hl_cache_dev_file_foreign() is -EPERM (others could plant hits); one
 * others may read is opened with a warning. @return 0 or -errno.
 */
int hl_cache_dev_open_file(const char *path, uint64_t size, struct hl_cache_dev **out);

struct stat;
/**
 * Whether a cache file's owner and mode let someone else write it: owned
 * by neither root nor us, writable by others, or by a group other than
 * root's (root:root 0660 is root's alone). Such a file is refused.
 */
bool hl_cache_dev_file_foreign(const struct stat *st);

/**
 * An in-memory device for tests. After fail_after successful writes, the
 * next write is torn (only its first torn_bytes land) and every later
 * write/flush fails with -EIO (a crash). fail_after UINT64_MAX: never.
 */
int hl_cache_dev_open_mem(uint64_t size, struct hl_cache_dev **out);
void hl_cache_dev_mem_fail_at(struct hl_cache_dev *d, uint64_t fail_after, size_t torn_bytes);
/** Writes that reached the memory device so far. */
uint64_t hl_cache_dev_mem_writes(const struct hl_cache_dev *d);
/** Clear the failure state (the "reboot" after a simulated crash); keeps the contents. */
void hl_cache_dev_mem_reset(struct hl_cache_dev *d);

void hl_cache_dev_close(struct hl_cache_dev *d);

/** Geometry of a formatted cache device (see docs/cache-format.md). */
struct hl_cache_layout {
	uint32_t block_size;
	uint32_t rec_size; /* bytes per slot record */
	uint64_t nslots;
	uint64_t sum_off;  /* the record page summary: one bit per record page */
	uint64_t sum_len;  /* bytes of it (whole 4 KiB blocks) */
	uint64_t npages;   /* record pages */
	uint64_t meta_off; /* first record page */
	uint64_t meta_len; /* bytes of record pages */
	uint64_t data_off; /* slot i's data is at data_off + i * block_size */
	/* filled by format/load: the device's identity */
	uint8_t uuid[16];
	uint32_t seed;   /* record CRC seed derived from uuid */
	uint32_t tag;    /* format tag every record of this format carries (from uuid) */
	uint64_t sb_seq; /* sequence number of the last superblock written */
	uint32_t sb_state; /* state of the last superblock written (1 clean, 2 open, 3 pending) */
	/*
	 * hl_cache_meta_kill ran (__atomic builtins): a superblock written
	 * since is wiped again by its writer, however late its write returns.
	 */
	bool killed;
	/*
	 * RAM mirror of the summary (npages bits; a set bit: the page may hold
	 * records that claim data, so a load reads it) and the summary blocks
	 * whose cleared bits are not on the device yet. Allocated by format
	 * and load, freed by hl_cache_layout_release(); guarded like the
	 * device's metadata (the caller serialises the hl_cache_meta_* calls).
	 */
	uint64_t *sum;
	uint64_t *sum_stale;
};

/**
 * Compute the layout for a device of dev_size bytes and block_size (the
 * RAM mirror of the summary is not allocated). @return 0/-EINVAL/-ENOSPC.
 */
int hl_cache_layout_compute(uint64_t dev_size, uint32_t block_size, struct hl_cache_layout *l);

/** Free what format/load allocated in l (safe on a computed-only or released layout). */
void hl_cache_layout_release(struct hl_cache_layout *l);

/**
 * Write a fresh superblock (empty cache, no valid slots) with a new uuid.
 * Only the superblocks and the page summary are written (the summary all
 * clear): record pages are read only where the summary says so, and a
 * record of an earlier format fails its CRC and format tag. l is
 * overwritten (release it first if format or load filled it before).
 * Blocking. @return 0 or -errno.
 */
int hl_cache_meta_format(struct hl_cache_dev *d, uint32_t block_size, struct hl_cache_layout *l);

/**
 * Bench only (tests/bench/cache_fill.c, a full warm cache without warming
 * it through iSCSI): write the records of slots 0 .. nblocks-1, slot i
 * claiming block i of lun whole, and those slots' summary bits, with the
 * same encoder as a sync, then flush. The caller writes no data: it is
 * for a cache device and an origin that both read as zeroes (sparse
 * files), so the forged blocks are not stale. l comes from a load (the
 * device's uuid; the superblock "open"), and the caller closes it
 * (hl_cache_meta_close) with a core that caches nothing. Blocking.
 * @return 0 or -errno (-EINVAL: more blocks than slots).
 */
int hl_cache_meta_forge(struct hl_cache_dev *d, struct hl_cache_layout *l, uint16_t lun,
                        uint64_t nblocks);

/**
 * Read the superblock, the page summary and the record pages it marks,
 * restoring valid slots into c (whose LUNs are registered by the caller
 * first; records of unknown LUNs are dropped). Marks the superblock
 * "open" (persisted) before returning, so that the caller may write to
 * the device. l is overwritten as by format. Blocking.
 * @return number of slots restored, -ENODATA (no/foreign superblock, an
 * older format version, or geometry differs: format instead), -errno.
 */
int64_t hl_cache_meta_load(struct hl_cache_dev *d, struct hl_cache_core *c,
                           struct hl_cache_layout *l);

/**
 * The device's identity as its newest intact superblock copy says (any
 * format version): its uuid and its sequence number, bumped by every
 * superblock write (format, a load marking it open, a lazy restore's
 * pending notes and their end, the close). Reads only. Blocking.
 * @return 0, -ENODATA (no intact superblock) or -errno.
 */
int hl_cache_meta_ident(struct hl_cache_dev *d, uint8_t uuid[16], uint64_t *seq);

/*
 * A lazy load (docs/cache-format.md, "Lazy restore"), what
 * hl_cache_meta_load does in three steps so that I/O may be served
 * between them: load_begin reads the superblocks and the summary, marks
 * the superblock open and starts the core's restore
 * (hl_cache_core_restore_begin); load_step restores the next marked
 * pages; load_finish ends the core's restore and, when the superblock
 * says "restore pending", syncs (every dropped record's page durable) and
 * clears that state. A superblock found "restore pending" with the ranges
 * written during the last restore makes load_begin preload the core's
 * filter with them and keep the state (their records are dropped); one
 * without ranges (version 3: "all", or a hotlund before the durable
 * filter) makes it return -ENODATA (the cache starts cold) with a notice.
 */
/* One hold of the cache lock by the restore (the worst are kept, to tell what made them long). */
struct hl_cache_rs_hold {
	uint64_t wall_ns;        /* under the lock, wall-clock time */
	uint64_t cpu_ns;         /* of it, the loader thread's own CPU time */
	uint64_t wait_ns;        /* waited for the lock before it */
	uint32_t minflt, majflt; /* page faults of the thread during it */
	uint32_t nvcsw, nivcsw;  /* its context switches during it: voluntary, preempted */
	uint64_t page;           /* the first record page of the batch */
};

#define HL_CACHE_RS_WORST 8

struct hl_cache_restore {
	uint64_t *marks;      /* the summary as loaded: pages still to read */
	uint64_t next;        /* first page not looked at yet */
	uint64_t pages;       /* marked pages at begin */
	uint64_t pages_left;  /* of those, not restored yet */
	uint64_t restored;    /* records restored */
	uint64_t dropped;     /* records that claim data dropped (filter, LUN, duplicate) */
	uint64_t filtered;    /* of those, dropped because written while restoring */
	uint64_t max_hold_ns; /* the longest batch restored under the lock */
	uint64_t hold_ns, holds; /* all batches: time under the lock, and how many */
	uint64_t holds_over_1ms; /* batches that held the lock longer than 1 ms */
	uint64_t hold_cpu_ns;    /* all batches: the loader's CPU time under the lock */
	struct hl_cache_rs_hold worst[HL_CACHE_RS_WORST]; /* the longest holds, longest first */
	/*
	 * Hold the lock as a real-time thread (SCHED_FIFO, priority 1), then
	 * go back to sched_policy / sched_prio (the caller sets them; load_step
	 * clears rt_hold and keeps the error in rt_refused when the system
	 * refuses it).
	 */
	bool rt_hold;
	int rt_refused;
	int sched_policy, sched_prio;
	/*
	 * Reads waiting for the lock (NULL: none counted): after a batch the
	 * loader lets them take it before it takes it again.
	 */
	atomic_uint *waiters;
	uint64_t gave_way, gave_way_ns; /* batches after which it waited for them, and how long */
	uint8_t *buf;         /* LOAD_CHUNK bytes of record pages */
	struct hl_cache_slot_rec *recs; /* the records of one batch, decoded without the lock */
	bool *recs_ok;        /* recs[i] is a record of this format that claims data */
	uint64_t recs_cap;
};

/** @return 0, -ENODATA (format instead), -errno. r is filled (release it). */
int hl_cache_meta_load_begin(struct hl_cache_dev *d, struct hl_cache_core *c,
                             struct hl_cache_layout *l, struct hl_cache_restore *r);

/**
 * Read up to max_pages of the next marked record pages (1 MiB at most)
 * without any lock, then restore them under lock (may be NULL) in batches
 * of at most batch pages; the summary bits of pages found claiming nothing
 * are cleared under sum_lock (the lock syncs hold; may be NULL).
 * @return marked pages left (0: all restored) or -errno.
 */
int64_t hl_cache_meta_load_step(struct hl_cache_dev *d, struct hl_cache_layout *l,
                                struct hl_cache_core *c, struct hl_cache_restore *r,
                                pthread_mutex_t *lock, pthread_mutex_t *sum_lock,
                                uint32_t max_pages, uint32_t batch);

/**
 * Every page restored: end the core's restore (under lock, may be NULL),
 * then, if the superblock is "restore pending", sync and clear it.
 * The caller serialises it with syncs. @return 0 or -errno.
 */
int hl_cache_meta_load_finish(struct hl_cache_dev *d, struct hl_cache_layout *l,
                              struct hl_cache_core *c, pthread_mutex_t *lock);

void hl_cache_restore_release(struct hl_cache_restore *r);

/**
 * Persist the records of slot and every other dirty slot on the same
 * record page (one page write). Blocking. @return 0 or -errno.
 */
int hl_cache_meta_write_slot(struct hl_cache_dev *d, const struct hl_cache_layout *l,
                             struct hl_cache_core *c, uint32_t slot);

/**
 * Invalidate slot's on-device record (the meta barrier before its data is
 * overwritten): write the page with the slot marked empty, then flush.
 * Blocking. @return 0 or -errno.
 */
int hl_cache_meta_barrier(struct hl_cache_dev *d, const struct hl_cache_layout *l,
                          struct hl_cache_core *c, uint32_t slot);

/**
 * Write every dirty record page, flush. During a lazy restore whose core
 * noted a block the superblock's copy of its filter does not cover, first
 * make the superblock state "restore pending" with a new copy durable.
 * Blocking. @return 0 or -errno.
 */
int hl_cache_meta_sync(struct hl_cache_dev *d, struct hl_cache_layout *l,
                       struct hl_cache_core *c);

/** Clean shutdown: sync, then mark the superblock closed. Blocking. @return 0 or -errno. */
int hl_cache_meta_close(struct hl_cache_dev *d, struct hl_cache_layout *l, struct hl_cache_core *c);

#endif
