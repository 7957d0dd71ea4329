/*
 * cache_trace.h - an optional binary trace of what the cache does to its
 * device: every data I/O (submitted and completed, with slot, block and
 * ticket), every record a metadata sync snapshots, every record restored at
 * load, the syncs themselves, and the RAM window's fills, updates and
 * promotions. Off unless the environment variable HOTLUN_CACHE_TRACE names
 * a directory; then each process appends fixed-size records to
 * DIR/cache-trace.PID, a file mapped shared, so the records of a process
 * killed with SIGKILL are all there. contrib/cache-trace.py prints the
 * history of a slot or a block across the processes of a run.
 *
 * Made to find crash-ordering bugs: a kill -9 test that fails once in ten
 * runs names a block whose data came back wrong; the trace says which
 * process wrote what into its slot, and which record claimed it when.
 *
 * File: a 64-byte header (magic "HLCTRACE", u32 version 1, u32 record size,
 * u64 records used, u64 capacity), then records (struct cache_trace_rec,
 * little-endian). A record is complete once its ns field is non-zero.
 * Cost when off: one predictable branch per event.
 */
#ifndef HOTLUN_CACHE_TRACE_H
#define HOTLUN_CACHE_TRACE_H

#include <stdint.h>

enum cache_trace_ev {
	CT_START = 1,   /* a cache opened: block = block size */
	CT_SUB = 2,     /* data I/O submitted: kind = sub kind | 0x80 write, aux = ticket */
	CT_DONE = 3,    /* data I/O completed: aux = result (-errno or 0) */
	CT_RESTORE = 4, /* record found at load: a = valid bits 0..63, b = generation, aux = 0 restored */
	CT_RECORD = 5,  /* record snapshotted by a sync, claiming data: a = valid bits, aux = page */
	CT_SYNC = 6,    /* sync: kind 0 begin (a = dirty pages), 1 end (aux = result) */
	CT_PERSIST = 7, /* a record page is durable: slot = first slot, aux = page, a = epoch */
	CT_PROMOTE = 8, /* RAM window -> SSD copy planned: aux = window slot, a = first, b = sectors */
	CT_RAM = 9,     /* RAM window: kind 0 fill, 1 update; a = byte offset or first, b = length */
};

struct cache_trace_rec {
	uint64_t ns; /* CLOCK_MONOTONIC; written last */
	uint32_t pid;
	uint8_t ev;
	uint8_t kind;
	uint16_t lun;
	uint32_t slot;
	uint32_t aux;
	uint64_t block;
	uint64_t a;
	uint64_t b;
};

_Static_assert(sizeof(struct cache_trace_rec) == 48, "trace record is 48 bytes");

/* Non-NULL while tracing (set once, by the first cache_trace_init()). */
extern struct cache_trace_file *cache_trace_on;

/**
 * Start tracing if HOTLUN_CACHE_TRACE names a directory and this process
 * is not tracing yet (any thread, any number of times). Failures are
 * logged once and leave tracing off.
 */
void cache_trace_init(void);

/** Start tracing into dir (tests). @return 0 or -errno. */
int cache_trace_open(const char *dir);

/** Stop tracing (tests; the daemon keeps the file mapped until exit). */
void cache_trace_close(void);

void cache_trace_put(enum cache_trace_ev ev, unsigned kind, unsigned lun, uint32_t slot,
                     uint32_t aux, uint64_t block, uint64_t a, uint64_t b);

static inline void cache_trace(enum cache_trace_ev ev, unsigned kind, unsigned lun,
                               uint32_t slot, uint32_t aux, uint64_t block, uint64_t a,
                               uint64_t b)
{
	if (__builtin_expect(cache_trace_on != 0, 0))
		cache_trace_put(ev, kind, lun, slot, aux, block, a, b);
}

#endif
