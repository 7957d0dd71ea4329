/*
 * origin_file.h - what the three files of the file origin share: the origin
 * and its per-I/O state, and the calls between file.c (open/close, submit,
 * the worker-pool path), file_uring.c (the io_uring ring per thread, inline
 * memory-filesystem I/O) and file_proof.c (warm restart proofs). What other
 * files reach of this backend (test knobs, stamps) is in origin_internal.h.
 */
#ifndef HOTLUN_ORIGIN_FILE_H
#define HOTLUN_ORIGIN_FILE_H

#include "hotlun/event.h"
#include "hotlun/util.h"
#include "origin/origin_internal.h"

#include <linux/falloc.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/uio.h>

struct origin_lock;

struct file_origin {
	int fd;
	bool blkdev;
	bool memfs;                /* tmpfs/ramfs: reads and writes are done inline */
	bool direct;               /* O_DIRECT: reads are DMA, no copy on the submitting thread */
	bool eof_error;            /* a read short at EOF fails instead of reading zeroes */
	atomic_bool no_zero_range; /* fallocate(ZERO_RANGE) said EOPNOTSUPP once */
	atomic_bool no_punch_hole; /* fallocate(PUNCH_HOLE) said EOPNOTSUPP once */
	/*
	 * A regular file's identity at open, before this origin changed
	 * anything (opened: the first fstat; settled: after the open's own
	 * hole-punch probe, which moves ctime). Warm restart proofs.
	 */
	struct file_stamp opened, settled;
	struct origin_lock *lock; /* a regular file's single-gateway lock (not a cache device) */
	long fs_type;             /* statfs f_type of a regular file's filesystem */
	bool fs_stamps; /* ... one whose ctime proves changes (origin_file_stamp_trusted) */
	bool ident_weak_said; /* a block device known by its numbers only: logged once */
	/* a regular file's size, looked at once a second (file_watch.c) */
	struct hl_origin *self;
	struct hl_list watch_link;
	bool watched;
};

/** Watch o's (a regular file's) size from now on: a change is reported as HL_ORIGIN_RESIZED. */
void origin_file_watch_add(struct hl_origin *o, struct file_origin *fo);

/** Stop watching (before fo->fd closes); nothing when it is not watched. */
void origin_file_watch_del(struct file_origin *fo);

/* Per-I/O state in hl_origin_io.priv. */
struct file_io {
	struct hl_origin *o;
	uint64_t done;      /* bytes moved so far (READ/WRITE) */
	struct iovec *rest; /* heap copy of the iovecs still to move, after a short transfer */
	struct hl_origin_io *next; /* ring backlog link */
	int restcnt;
	int result; /* worker path */
	int zstep;  /* WRITE_ZEROES: 0 zero-range, 1 punch-hole */
};
_Static_assert(sizeof(struct file_io) <= sizeof(((struct hl_origin_io *)0)->priv),
               "file_io must fit in hl_origin_io.priv");

static inline struct file_io *fio_of(struct hl_origin_io *io)
{
	return (struct file_io *)io->priv;
}

static inline struct file_origin *fo_of(struct hl_origin *o)
{
	return hl_origin_priv(o);
}

/* The I/O is done: its callback, after what it kept on the heap went. */
static inline void fio_finish(struct hl_origin_io *io, int result)
{
	struct file_io *fio = fio_of(io);

	free(fio->rest);
	fio->rest = NULL;
	io->cb(io, result);
}

/* WRITE_ZEROES of a regular file: the fallocate mode of step 0 (ZERO_RANGE) or 1 (PUNCH_HOLE). */
static inline int zero_mode(const struct file_origin *fo, int step)
{
	if (step == 0 && !atomic_load_explicit(&fo->no_zero_range, memory_order_relaxed))
		return FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE;
	return FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
}

/* ---- file.c ---- */

/** Point fio->rest at the part of io->iov after fio->done bytes. @return 0 or -ENOMEM. */
int origin_file_rest_build(struct hl_origin_io *io, struct file_io *fio);

/** Zero the bytes of io->iov after the first `from` bytes (a read short at EOF). */
void origin_file_iov_zero_from(struct hl_origin_io *io, uint64_t from);

/**
 * Read or write what is left of io with blocking syscalls on fd (a worker
 * thread, or inline for a memory filesystem). @return 0 or -errno.
 */
int origin_file_blocking_rw(struct hl_origin_io *io, struct file_io *fio, int fd);

/** Hand io to the worker pool; its callback runs on this reactor. @return 0 or -errno. */
int origin_file_work_submit(struct hl_origin_io *io);

/* ---- file_uring.c ---- */

/**
 * Submit a checked io (fio set up) through this thread's ring, watched by
 * reactor r; the worker pool where there is no ring. @return 0 (the
 * callback runs once, later) or -errno (it never runs).
 */
int origin_file_ring_submit(struct hl_reactor *r, struct hl_origin_io *io);

/* ---- file_proof.c ---- */

/** The stamp of what fstat/stat returned. */
void origin_file_stamp_of(const struct stat *st, struct file_stamp *s);

/** Whether files on filesystem `type` (statfs f_type) can prove themselves unchanged. */
bool origin_file_stamp_trusted(long type);

/** See hl_origin_ops.data_id: "blk:MAJ:MIN" or "file:DEV:INO" of the open file (not lasting). */
int origin_file_data_id(struct hl_origin *o, char *buf, size_t len, bool *lasting);

/** See hl_origin_ops.proof_take / proof_check: origin_file_stamp_format's token. */
int origin_file_proof_take(struct hl_origin *o, const char *tag, bool final, char *proof,
                           size_t len);
int origin_file_proof_check(struct hl_origin *o, const char *tag, const char *proof,
                            hl_origin_changed_fn changed, void *arg, char *why, size_t whylen);

#endif
