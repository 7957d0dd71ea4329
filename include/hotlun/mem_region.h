/*
 * mem_region.h - regions of memory that I/O will target, per thread.
 *
 * The owner of some memory (the iSCSI data buffers, src/iscsi/buf.c)
 * announces a region when it will read or write into it again and again,
 * and withdraws it before the memory is freed. An I/O engine that can do
 * better with memory it knows in advance (an io_uring with registered
 * buffers, src/origin/file_uring.c) watches the regions of its thread and
 * looks an I/O's buffer up on the hot path; a buffer in no region is simply
 * done the ordinary way. The two sides never know each other.
 *
 * Everything here is per thread: a region is announced, looked up and
 * withdrawn on one thread (the reactor thread that owns the memory and
 * submits its I/O), and a watch sees only its own thread's regions. A
 * region must be withdrawn on the thread that announced it, and before its
 * memory is freed: a watcher may have pinned the pages behind it, and an
 * I/O into a freed and reused address would land in those old pages.
 */
#ifndef HOTLUN_MEM_REGION_H
#define HOTLUN_MEM_REGION_H

#include <stdbool.h>
#include <stddef.h>

/* Regions per thread at most (also the size of a watcher's table). */
#define HL_MEM_REGIONS_MAX 4096

struct hl_mem_watch;

/** Told of a region: its slot (0 .. HL_MEM_REGIONS_MAX-1, stable while it lives). */
typedef void (*hl_mem_region_add_fn)(struct hl_mem_watch *w, int slot, void *base, size_t len);
/** Told that a region goes: done with it before this returns. */
typedef void (*hl_mem_region_del_fn)(struct hl_mem_watch *w, int slot);

/** A watcher of this thread's regions. Embedded in its owner; caller keeps. */
struct hl_mem_watch {
	hl_mem_region_add_fn add;
	hl_mem_region_del_fn del;
	void *arg;
	struct hl_mem_watch *next; /* this thread's watchers */
	bool on;                   /* in the list */
};

/**
 * Announce [base, base + len) on this thread; every watcher's add runs.
 * @return the region's slot (>= 0), -EEXIST (a region starts at base
 * already), -ENOSPC (HL_MEM_REGIONS_MAX), -EINVAL (len 0, or it overlaps
 * another region), -ENOMEM.
 */
int hl_mem_region_add(void *base, size_t len);

/**
 * Withdraw the region that starts at base (every watcher's del runs first).
 * @return 0, or -ENOENT (none on this thread: harmless).
 */
int hl_mem_region_del(void *base);

/** The slot of the region that holds all of [p, p + len), or -1. O(log n). */
int hl_mem_region_find(const void *p, size_t len);

/** Regions of this thread. */
unsigned hl_mem_region_count(void);

/** Fill w (not watching yet). */
void hl_mem_watch_init(struct hl_mem_watch *w, hl_mem_region_add_fn add, hl_mem_region_del_fn del,
                       void *arg);

/** Watch this thread's regions: add runs now for each that exists. */
void hl_mem_watch_start(struct hl_mem_watch *w);

/** Stop watching (no del runs); harmless when not watching. Same thread. */
void hl_mem_watch_stop(struct hl_mem_watch *w);

#endif
