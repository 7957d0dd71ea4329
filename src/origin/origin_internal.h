/*
 * origin_internal.h - what the files of src/origin share: the backend ops
 * tables listed in origin.c, the allocator every backend's origin goes
 * through, and test hooks of the file backend.
 */
#ifndef HOTLUN_ORIGIN_INTERNAL_H
#define HOTLUN_ORIGIN_INTERNAL_H

#include "hotlun/origin.h"

extern const struct hl_origin_ops origin_file_ops;
extern const struct hl_origin_ops origin_throttle_ops;

/**
 * Allocate a zeroed origin with ops->priv_size bytes of private state and a
 * copy of `uri`. Does not call ops->open. @return 0 or -ENOMEM.
 */
int origin_alloc(const struct hl_origin_ops *ops, const char *uri, struct hl_origin **out);

/** Free what origin_alloc() made (does not call ops->close). */
void origin_free(struct hl_origin *o);

/**
 * Check an I/O against the origin before it is queued: known op, iovecs
 * present and summing to length for READ/WRITE, range inside o->size, no
 * writes to a read-only origin. @return 0, -EINVAL or -EROFS.
 */
int origin_io_check(const struct hl_origin *o, const struct hl_origin_io *io);

/*
 * File backend knobs, for unit tests and benchmarks (set them before the
 * first I/O of a thread; a thread keeps the ring it made).
 */

/** Force the worker-pool path (as if io_uring setup had failed). */
extern bool origin_file_force_workers;

/** Extra IORING_SETUP_* flags for new rings (default chosen by measurement, see file.c). */
extern unsigned origin_file_ring_flags;

/** Tear down this thread's ring now (no I/O may be in flight on it). For tests. */
void origin_file_thread_fini(void);

#endif
