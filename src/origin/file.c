/*
 * file.c - the "file:" origin: a regular file or a block device.
 *
 * I/O is asynchronous and never blocks a reactor. Each reactor thread owns one
 * io_uring, made lazily on its first submit and shared by every file origin
 * used on that thread. The ring's completion eventfd is watched by the
 * submitting reactor only while the ring has I/O outstanding, so a reactor
 * can be destroyed (and another made on the same thread) whenever it is idle.
 * Completions are reaped in the eventfd callback, never inside submit, even
 * when the kernel finished the I/O inline (page-cache hits usually do).
 *
 * Where io_uring cannot be set up (seccomp, io_uring_disabled, old kernel) or
 * lacks the operation (BLKDISCARD, BLKZEROOUT), the blocking syscall runs on
 * the shared worker pool (hl_work_submit) and completes on the same reactor.
 *
 * A file on a memory filesystem (tmpfs, ramfs) is different: its reads and
 * writes are memory copies that never wait for a device, but tmpfs has no
 * non-blocking read path, so io_uring hands every one of them to a kernel
 * worker thread (a wake-up and a context switch per I/O; measured: a 4 KiB
 * random-read LUN on /dev/shm served 129k IOPS through io_uring, 166k from
 * the page cache of an ext4 file). Reads and writes of such files are done
 * inline on the reactor and their callbacks run from a zero-delay timer.
 *
 * Short transfers are resubmitted for the remainder; a read that hits EOF of
 * a regular file (the file shrank) fills the rest with zeroes, or fails with
 * -EIO when the opener asked for it (hl_origin_opts.eof_error: a cache
 * device, whose holes must never be served as data).
 */
#include "config.h"

#include "hotlun/event.h"
#include "hotlun/log.h"
#include "hotlun/util.h"
#include "origin/origin_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <time.h>
#include <limits.h>
#include <liburing.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <linux/magic.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#define FILE_SQ_ENTRIES 256
#define FILE_CQ_ENTRIES 4096 /* also the cap on I/Os in the kernel per ring (no CQ overflow) */

/* Reads at least this large never run inline on the reactor (ring_prep). */
#define FILE_ASYNC_READ_MIN (1u << 20)

bool origin_file_force_workers;
int origin_file_excl_wait_ms = 10000;
atomic_ulong origin_file_inline_ios;
/*
 * SINGLE_ISSUER and COOP_TASKRUN are safe because only the owning thread
 * touches a ring; SUBMIT_ALL keeps one bad SQE from stalling the rest.
 * Measured (file_ut bench, kernel 6.18, ext4, 2 vCPUs, 4 KiB page-cache
 * reads through this file): plain, COOP+SINGLE and SINGLE+DEFER_TASKRUN are
 * within noise of each other (~200-350k IOPS at qd 1, 3-5 us per I/O end to
 * end; DEFER was never ahead), so the flags are kept for what they promise
 * (no IPIs) rather than for a measured gain. Cached buffered reads complete
 * inside io_uring_submit (the CQE is there on return; we still defer the
 * callback to the eventfd); ext4 buffered writes and cold reads do not.
 * Reads of FILE_ASYNC_READ_MIN or more are sent to io-wq (IOSQE_ASYNC), so
 * their copy never runs on the reactor (see ring_prep).
 */
unsigned origin_file_ring_flags =
    IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_SINGLE_ISSUER;

struct file_origin {
	int fd;
	bool blkdev;
	bool memfs;                /* tmpfs/ramfs: reads and writes are done inline */
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
	long fs_type;     /* statfs f_type of a regular file's filesystem */
	bool fs_stamps;   /* ... one whose ctime proves changes (stamp_fs_trusted) */
};

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

/* One per reactor thread; touched only by that thread. */
struct file_ring {
	struct io_uring ring;
	int efd;
	struct hl_event ev;    /* efd, added to `reactor` while pending > 0 */
	struct hl_timer retry; /* resubmit after io_uring_submit failed */
	struct hl_reactor *reactor;
	unsigned inflight; /* SQEs prepared and not yet reaped */
	unsigned pending;  /* inflight + backlog */
	bool defer_taskrun;
	struct hl_origin_io *backlog_head, *backlog_tail; /* waiting for an SQE */
	struct hl_origin_io *done_head, *done_tail;       /* memfs I/O done inline */
	struct hl_timer done_timer;                       /* runs their callbacks */
};

static __thread struct file_ring *tl_ring;
static __thread bool tl_ring_failed;
static pthread_key_t ring_key;
static pthread_once_t ring_key_once = PTHREAD_ONCE_INIT;
static atomic_bool uring_fail_logged;

static inline struct file_io *fio_of(struct hl_origin_io *io)
{
	return (struct file_io *)io->priv;
}

static inline struct file_origin *fo_of(struct hl_origin *o)
{
	return hl_origin_priv(o);
}

/* ---- helpers shared by both paths ---- */

/* Point fio->rest at the part of io->iov after fio->done bytes. */
static int rest_build(struct hl_origin_io *io, struct file_io *fio)
{
	uint64_t skip = fio->done;
	int i = 0, n = 0;

	if (!fio->rest) {
		fio->rest = malloc(sizeof(struct iovec) * (size_t)io->iovcnt);
		if (!fio->rest)
			return -ENOMEM;
	}
	while (i < io->iovcnt && skip >= io->iov[i].iov_len)
		skip -= io->iov[i++].iov_len;
	for (; i < io->iovcnt; i++, n++) {
		fio->rest[n].iov_base = (char *)io->iov[i].iov_base + skip;
		fio->rest[n].iov_len = io->iov[i].iov_len - skip;
		skip = 0;
	}
	fio->restcnt = n;
	return 0;
}

/* Zero the bytes of io->iov after the first `from` bytes. */
static void iov_zero_from(struct hl_origin_io *io, uint64_t from)
{
	for (int i = 0; i < io->iovcnt; i++) {
		size_t len = io->iov[i].iov_len;
		if (from >= len) {
			from -= len;
			continue;
		}
		memset((char *)io->iov[i].iov_base + from, 0, len - from);
		from = 0;
	}
}

static void fio_finish(struct hl_origin_io *io, int result)
{
	struct file_io *fio = fio_of(io);

	free(fio->rest);
	fio->rest = NULL;
	io->cb(io, result);
}

static int zero_mode(const struct file_origin *fo, int step)
{
	if (step == 0 && !atomic_load_explicit(&fo->no_zero_range, memory_order_relaxed))
		return FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE;
	return FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
}

/* ---- worker-pool path: blocking syscalls on a worker thread ---- */

static int blocking_rw(struct hl_origin_io *io, struct file_io *fio, int fd)
{
	while (fio->done < io->length) {
		const struct iovec *iov = fio->rest ? fio->rest : io->iov;
		int cnt = fio->rest ? fio->restcnt : io->iovcnt;
		ssize_t n;

		if (io->op == HL_IO_READ)
			n = preadv(fd, iov, cnt, (off_t)(io->offset + fio->done));
		else
			n = pwritev2(fd, iov, cnt, (off_t)(io->offset + fio->done),
			             (io->flags & HL_IO_FUA) ? RWF_DSYNC : 0);
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -errno;
		}
		if (n == 0) {
			if (io->op == HL_IO_WRITE || fo_of(fio->o)->eof_error)
				return -EIO;
			iov_zero_from(io, fio->done);
			return 0;
		}
		fio->done += (uint64_t)n;
		if (fio->done < io->length) {
			int rc = rest_build(io, fio);
			if (rc)
				return rc;
		}
	}
	return 0;
}

static int write_zero_buffer(int fd, uint64_t off, uint64_t len)
{
	static const char zeroes[65536];

	while (len) {
		size_t n = len < sizeof(zeroes) ? (size_t)len : sizeof(zeroes);
		ssize_t w = pwrite(fd, zeroes, n, (off_t)off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (w == 0)
			return -EIO;
		off += (uint64_t)w;
		len -= (uint64_t)w;
	}
	return 0;
}

static int blocking_zeroes(struct hl_origin_io *io, struct file_origin *fo)
{
	if (fo->blkdev) {
		uint64_t range[2] = {io->offset, io->length};
		if (fallocate(fo->fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, (off_t)io->offset,
		              (off_t)io->length) == 0)
			return 0;
		return ioctl(fo->fd, BLKZEROOUT, range) ? -errno : 0;
	}
	for (int step = 0; step < 2; step++) {
		int mode = zero_mode(fo, step);
		if (fallocate(fo->fd, mode, (off_t)io->offset, (off_t)io->length) == 0)
			return 0;
		if (errno != EOPNOTSUPP)
			return -errno;
		if (mode & FALLOC_FL_ZERO_RANGE)
			atomic_store(&fo->no_zero_range, true);
		else
			atomic_store(&fo->no_punch_hole, true);
	}
	return write_zero_buffer(fo->fd, io->offset, io->length);
}

static void file_work(void *arg)
{
	struct hl_origin_io *io = arg;
	struct file_io *fio = fio_of(io);
	struct file_origin *fo = fo_of(fio->o);
	int rc = 0;

	switch (io->op) {
	case HL_IO_READ:
	case HL_IO_WRITE:
		rc = blocking_rw(io, fio, fo->fd);
		break;
	case HL_IO_FLUSH:
		rc = fdatasync(fo->fd) ? -errno : 0;
		break;
	case HL_IO_DISCARD:
		if (io->length == 0)
			break;
		if (fo->blkdev) {
			uint64_t range[2] = {io->offset, io->length};
			rc = ioctl(fo->fd, BLKDISCARD, range) ? -errno : 0;
		} else {
			rc = fallocate(fo->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			               (off_t)io->offset, (off_t)io->length)
			         ? -errno
			         : 0;
		}
		break;
	case HL_IO_WRITE_ZEROES:
		if (io->length)
			rc = blocking_zeroes(io, fo);
		break;
	}
	fio->result = rc;
}

static void file_work_done(void *arg)
{
	struct hl_origin_io *io = arg;

	fio_finish(io, fio_of(io)->result);
}

static int work_submit(struct hl_origin_io *io)
{
	return hl_work_submit(file_work, file_work_done, io);
}

/* ---- io_uring path ---- */

static void ring_event(struct hl_event *ev, uint32_t revents);
static void ring_retry(struct hl_timer *t);
static void ring_done_fire(struct hl_timer *t);

/* detach: unregister from the reactor first (false when the reactor may be gone). */
static void ring_destroy(struct file_ring *ring, bool detach)
{
	if (!ring)
		return;
	if (detach) {
		hl_timer_stop(&ring->retry);
		hl_timer_stop(&ring->done_timer);
		hl_event_del(&ring->ev);
	}
	io_uring_queue_exit(&ring->ring);
	close(ring->efd);
	free(ring);
}

static void ring_key_destructor(void *p)
{
	/*
	 * Thread exit: the reactor may already be freed, so do not touch it.
	 * Normally the ring is idle here; if not (a shutdown that did not drain),
	 * closing the ring cancels what is left.
	 */
	ring_destroy(p, false);
	tl_ring = NULL;
}

static void ring_key_make(void)
{
	pthread_key_create(&ring_key, ring_key_destructor);
}

void origin_file_thread_fini(void)
{
	if (tl_ring) {
		pthread_setspecific(ring_key, NULL);
		ring_destroy(tl_ring, true);
		tl_ring = NULL;
	}
	tl_ring_failed = false;
}

static void uring_failed(int rc)
{
	tl_ring_failed = true;
	if (!atomic_exchange(&uring_fail_logged, true))
		HL_NOTICE("origin", "io_uring unavailable (%s): file origins use the worker pool",
		          strerror(-rc));
}

static struct file_ring *ring_create(void)
{
	struct io_uring_params p;
	struct file_ring *ring;
	unsigned flags = origin_file_ring_flags;
	int rc;

	if (origin_file_force_workers)
		return NULL;
	ring = calloc(1, sizeof(*ring));
	if (!ring) {
		HL_ERR_RL("origin", "out of memory for an io_uring");
		return NULL;
	}
	for (;;) {
		memset(&p, 0, sizeof(p));
		p.flags = IORING_SETUP_CQSIZE | flags;
		p.cq_entries = FILE_CQ_ENTRIES;
		rc = io_uring_queue_init_params(FILE_SQ_ENTRIES, &ring->ring, &p);
		if (rc != -EINVAL || !flags)
			break;
		/* An older kernel that lacks one of the optional flags: drop them. */
		flags = 0;
	}
	if (rc) {
		free(ring);
		uring_failed(rc);
		return NULL;
	}
	ring->defer_taskrun = flags & IORING_SETUP_DEFER_TASKRUN;
	ring->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (ring->efd < 0) {
		rc = -errno;
		io_uring_queue_exit(&ring->ring);
		free(ring);
		uring_failed(rc);
		return NULL;
	}
	rc = io_uring_register_eventfd(&ring->ring, ring->efd);
	if (rc) {
		close(ring->efd);
		io_uring_queue_exit(&ring->ring);
		free(ring);
		uring_failed(rc);
		return NULL;
	}
	hl_event_init(&ring->ev, ring->efd, ring_event, ring);
	hl_timer_init(&ring->retry, ring_retry, ring);
	hl_timer_init(&ring->done_timer, ring_done_fire, ring);
	pthread_once(&ring_key_once, ring_key_make);
	pthread_setspecific(ring_key, ring);
	tl_ring = ring;
	return ring;
}

static void ring_flush(struct file_ring *ring)
{
	int rc;

	if (!io_uring_sq_ready(&ring->ring))
		return;
	rc = io_uring_submit(&ring->ring);
	if (rc >= 0 && !io_uring_sq_ready(&ring->ring))
		return;
	/*
	 * What the kernel did not take stays queued in the SQ ring (EAGAIN/EBUSY:
	 * short of memory); no completion may come to push it, so retry shortly.
	 */
	if (rc < 0)
		HL_WARN_RL("origin", "io_uring_submit: %s; retrying", strerror(-rc));
	if (!hl_timer_pending(&ring->retry))
		hl_timer_start(ring->reactor, &ring->retry, 1);
}

static void ring_prep(struct io_uring_sqe *sqe, struct hl_origin_io *io)
{
	struct file_io *fio = fio_of(io);
	struct file_origin *fo = fo_of(fio->o);
	const struct iovec *iov = fio->rest ? fio->rest : io->iov;
	int cnt = fio->rest ? fio->restcnt : io->iovcnt;
	off_t off = (off_t)(io->offset + fio->done);

	if (io->length == 0 && io->op != HL_IO_FLUSH) {
		/* Nothing to move; still complete through the ring, never inline. */
		io_uring_prep_nop(sqe);
		io_uring_sqe_set_data(sqe, io);
		return;
	}
	switch (io->op) {
	case HL_IO_READ:
		io_uring_prep_readv(sqe, fo->fd, iov, (unsigned)cnt, (uint64_t)off);
		/*
		 * A page-cache hit is copied inside io_uring_submit, on the reactor:
		 * 16 MiB took 20-150 ms there, stalling every connection of that
		 * reactor (issue 19, item 3: 4 KiB READs of another session waited
		 * that long behind one that queued 16 MiB READs; 3-7 ms with this).
		 * Large reads go to the kernel's io-wq workers instead.
		 */
		if (io->length >= FILE_ASYNC_READ_MIN)
			io_uring_sqe_set_flags(sqe, IOSQE_ASYNC);
		break;
	case HL_IO_WRITE:
		io_uring_prep_writev(sqe, fo->fd, iov, (unsigned)cnt, (uint64_t)off);
		if (io->flags & HL_IO_FUA)
			sqe->rw_flags = RWF_DSYNC;
		break;
	case HL_IO_FLUSH:
		io_uring_prep_fsync(sqe, fo->fd, IORING_FSYNC_DATASYNC);
		break;
	case HL_IO_DISCARD: /* regular files only; block devices use the worker pool */
		io_uring_prep_fallocate(sqe, fo->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		                        io->offset, io->length);
		break;
	case HL_IO_WRITE_ZEROES:
		io_uring_prep_fallocate(sqe, fo->fd,
		                        fo->blkdev ? FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE
		                                   : zero_mode(fo, fio->zstep),
		                        io->offset, io->length);
		break;
	}
	io_uring_sqe_set_data(sqe, io);
}

/* Give io an SQE now, or park it on the backlog until one frees up. */
static void ring_queue(struct file_ring *ring, struct hl_origin_io *io)
{
	struct io_uring_sqe *sqe = NULL;

	if (ring->inflight < FILE_CQ_ENTRIES && !ring->backlog_head) {
		sqe = io_uring_get_sqe(&ring->ring);
		if (!sqe) {
			ring_flush(ring);
			sqe = io_uring_get_sqe(&ring->ring);
		}
	}
	if (!sqe) {
		fio_of(io)->next = NULL;
		if (ring->backlog_tail)
			fio_of(ring->backlog_tail)->next = io;
		else
			ring->backlog_head = io;
		ring->backlog_tail = io;
		if (!ring->inflight && !hl_timer_pending(&ring->retry))
			hl_timer_start(ring->reactor, &ring->retry, 1);
		return;
	}
	ring_prep(sqe, io);
	ring->inflight++;
}

static void backlog_drain(struct file_ring *ring)
{
	while (ring->backlog_head && ring->inflight < FILE_CQ_ENTRIES) {
		struct hl_origin_io *io = ring->backlog_head;
		struct io_uring_sqe *sqe = io_uring_get_sqe(&ring->ring);
		if (!sqe) {
			ring_flush(ring);
			sqe = io_uring_get_sqe(&ring->ring);
			if (!sqe)
				break;
		}
		ring->backlog_head = fio_of(io)->next;
		if (!ring->backlog_head)
			ring->backlog_tail = NULL;
		ring_prep(sqe, io);
		ring->inflight++;
	}
}

/* The I/O leaves the ring (finished, or handed to the worker pool). */
static void ring_release(struct file_ring *ring)
{
	ring->pending--;
}

static void ring_hand_to_workers(struct file_ring *ring, struct hl_origin_io *io)
{
	int rc;

	ring_release(ring);
	rc = work_submit(io);
	if (rc)
		fio_finish(io, rc);
}

static void ring_complete(struct file_ring *ring, struct hl_origin_io *io, int res)
{
	struct file_io *fio = fio_of(io);
	struct file_origin *fo = fo_of(fio->o);

	ring->inflight--;
	switch (io->op) {
	case HL_IO_READ:
	case HL_IO_WRITE:
		if (res == -EAGAIN || res == -EINTR) {
			ring_queue(ring, io);
			return;
		}
		if (res < 0)
			break;
		fio->done += (uint64_t)res;
		if (fio->done >= io->length) {
			res = 0;
			break;
		}
		if (res == 0) {
			if (io->op == HL_IO_WRITE || fo->eof_error) {
				res = -EIO;
				break;
			}
			iov_zero_from(io, fio->done); /* EOF: the file is shorter than it was */
			break;
		}
		res = rest_build(io, fio);
		if (res)
			break;
		ring_queue(ring, io);
		return;
	case HL_IO_WRITE_ZEROES:
		if (res != -EOPNOTSUPP)
			break;
		if (fo->blkdev) {
			ring_hand_to_workers(ring, io); /* BLKZEROOUT */
			return;
		}
		if (zero_mode(fo, fio->zstep) & FALLOC_FL_ZERO_RANGE) {
			atomic_store(&fo->no_zero_range, true);
			fio->zstep = 1;
			ring_queue(ring, io);
		} else {
			atomic_store(&fo->no_punch_hole, true);
			ring_hand_to_workers(ring, io); /* writes zeroes */
		}
		return;
	default:
		break;
	}
	ring_release(ring);
	fio_finish(io, res);
}

static void ring_idle_check(struct file_ring *ring)
{
	if (ring->pending == 0) {
		hl_timer_stop(&ring->retry);
		hl_timer_stop(&ring->done_timer);
		hl_event_del(&ring->ev);
		ring->reactor = NULL;
	}
}

static void ring_reap(struct file_ring *ring)
{
	unsigned n;

	if (ring->defer_taskrun || io_uring_cq_has_overflow(&ring->ring))
		io_uring_get_events(&ring->ring);
	/*
	 * Only what is there now: a callback that submits an I/O which completes
	 * inline must not keep this loop going forever. Its CQE signals the
	 * eventfd again, so the reactor comes back after other events ran.
	 */
	n = io_uring_cq_ready(&ring->ring);
	while (n--) {
		struct io_uring_cqe *cqe;
		struct hl_origin_io *io;
		int res;

		if (io_uring_peek_cqe(&ring->ring, &cqe))
			break;
		io = io_uring_cqe_get_data(cqe);
		res = cqe->res;
		io_uring_cqe_seen(&ring->ring, cqe);
		ring_complete(ring, io, res);
	}
	backlog_drain(ring);
	ring_flush(ring);
	ring_idle_check(ring);
}

static void ring_event(struct hl_event *ev, uint32_t revents)
{
	struct file_ring *ring = ev->arg;
	uint64_t v;

	(void)revents;
	/* Drain before reaping: a CQE posted after this read re-arms the eventfd. */
	if (read(ring->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		HL_WARN_RL("origin", "io_uring eventfd read: %s", strerror(errno));
	ring_reap(ring);
}

static void ring_retry(struct hl_timer *t)
{
	struct file_ring *ring = t->arg;

	backlog_drain(ring);
	ring_flush(ring);
	if (ring->backlog_head && !ring->inflight && !hl_timer_pending(&ring->retry))
		hl_timer_start(ring->reactor, &ring->retry, 1);
	ring_idle_check(ring);
}

/* Run the callbacks of the memfs I/Os done inline, oldest first (only those there now). */
static void ring_done_fire(struct hl_timer *t)
{
	struct file_ring *ring = t->arg;
	struct hl_origin_io *io = ring->done_head;

	ring->done_head = ring->done_tail = NULL;
	while (io) {
		struct hl_origin_io *next = fio_of(io)->next;

		ring_release(ring);
		fio_finish(io, fio_of(io)->result);
		io = next;
	}
	ring_idle_check(ring);
}

/* A read or write of a memfs file: do it now, call back from the ring's done timer. */
static void ring_inline(struct file_ring *ring, struct hl_origin_io *io)
{
	struct file_io *fio = fio_of(io);

	fio->result = blocking_rw(io, fio, fo_of(fio->o)->fd);
	atomic_fetch_add_explicit(&origin_file_inline_ios, 1, memory_order_relaxed);
	fio->next = NULL;
	if (ring->done_tail)
		fio_of(ring->done_tail)->next = io;
	else
		ring->done_head = io;
	ring->done_tail = io;
	if (!hl_timer_pending(&ring->done_timer))
		hl_timer_start(ring->reactor, &ring->done_timer, 0);
}

/* The ring of this thread, watched by reactor r; NULL: use the worker pool. */
static struct file_ring *ring_get(struct hl_reactor *r, int *err)
{
	struct file_ring *ring = tl_ring;
	int rc;

	*err = 0;
	if (!ring) {
		if (tl_ring_failed || origin_file_force_workers)
			return NULL;
		ring = ring_create();
		if (!ring)
			return NULL;
	}
	if (!ring->reactor) {
		rc = hl_event_add(r, &ring->ev, EPOLLIN);
		if (rc) {
			*err = rc;
			return NULL;
		}
		ring->reactor = r;
	} else if (ring->reactor != r) {
		/* Another reactor on this thread still has I/O here: a caller bug. */
		*err = -EBUSY;
		return NULL;
	}
	return ring;
}

/* ---- ops ---- */

static int file_submit(struct hl_origin *o, struct hl_origin_io *io)
{
	struct file_origin *fo = fo_of(o);
	struct file_io *fio = fio_of(io);
	struct hl_reactor *r = hl_reactor_current();
	struct file_ring *ring;
	int rc;

	if (!r)
		return -EINVAL;
	rc = origin_io_check(o, io);
	if (rc)
		return rc;
	if (io->op == HL_IO_DISCARD && !o->can_discard)
		return -EOPNOTSUPP;
	memset(fio, 0, sizeof(*fio));
	fio->o = o;

	if (io->op == HL_IO_DISCARD && fo->blkdev && io->length)
		return work_submit(io); /* BLKDISCARD has no io_uring op in liburing 2.3 */
	if (io->op == HL_IO_WRITE_ZEROES && !fo->blkdev &&
	    atomic_load_explicit(&fo->no_zero_range, memory_order_relaxed) &&
	    atomic_load_explicit(&fo->no_punch_hole, memory_order_relaxed))
		return work_submit(io); /* the filesystem can only take written zeroes */
	ring = ring_get(r, &rc);
	if (!ring)
		return rc ? rc : work_submit(io);
	ring->pending++;
	if (fo->memfs && (io->op == HL_IO_READ || io->op == HL_IO_WRITE)) {
		ring_inline(ring, io);
		return 0;
	}
	ring_queue(ring, io);
	ring_flush(ring);
	return 0;
}

/* Read a number from /sys/dev/block/MAJ:MIN/{queue/,../queue/}name (partitions use the parent's).
 */
static int sysfs_queue_u64(dev_t dev, const char *name, uint64_t *out)
{
	static const char *const dirs[] = {"queue", "../queue"};
	char path[128];

	for (size_t i = 0; i < HL_ARRAY_SIZE(dirs); i++) {
		unsigned long long v;
		FILE *f;
		int ok;

		snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/%s/%s", major(dev), minor(dev),
		         dirs[i], name);
		f = fopen(path, "re");
		if (!f)
			continue;
		ok = fscanf(f, "%llu", &v) == 1;
		fclose(f);
		if (ok) {
			*out = v;
			return 0;
		}
	}
	return -ENOENT;
}

/*
 * One step of waiting for a device or file another process holds (a
 * hotlund killed a moment ago keeps it until its in-flight io_uring
 * requests complete): the first step says so, each sleeps 100 ms.
 * @return false once origin_file_excl_wait_ms have passed.
 */
static bool excl_wait_step(int *waited, const char *target, const char *what)
{
	if (*waited >= origin_file_excl_wait_ms)
		return false;
	if (*waited == 0)
		HL_NOTICE("origin", "%s: %s; waiting up to %d ms for it", target, what,
		          origin_file_excl_wait_ms);
	usleep(100 * 1000);
	*waited += 100;
	return true;
}

/*
 * A regular file as an origin has no cluster lock to decide who owns it, so
 * it is served by one hotlund at a time (issue 17: a file origin stays
 * single-gateway): two gateways on one file would each cache blocks the
 * other overwrites. A writable origin takes an exclusive flock, a read-only
 * one a shared flock, on a descriptor of its own; a second hotlund on the
 * file is refused at start with a message that says why. Within one process
 * the same file may be opened twice (a disk replaced while running opens the
 * new origin before the old one closes), so the lock is per file per
 * process: counted, and released with the last origin on the file.
 */
struct origin_lock {
	struct origin_lock *next;
	dev_t dev;
	ino_t ino;
	int fd;       /* holds the flock */
	bool excl;    /* LOCK_EX (some opener writes) or LOCK_SH */
	unsigned refs;
};

static pthread_mutex_t origin_locks_mu = PTHREAD_MUTEX_INITIALIZER;
static struct origin_lock *origin_locks; /* origin_locks_mu */

/* flock(fd, how|LOCK_NB), waiting as for a busy block device (a killed hotlund's I/O). */
static int origin_flock(int fd, int how, const char *target, const char *what)
{
	int waited = 0;

	while (flock(fd, how | LOCK_NB) != 0) {
		if (errno != EWOULDBLOCK && errno != EINTR)
			return -errno;
		if (!excl_wait_step(&waited, target, what))
			return -EBUSY;
	}
	return 0;
}

static int origin_lock_take(const char *target, const struct stat *st, bool excl,
                            struct origin_lock **out)
{
	struct origin_lock *l;
	int rc = 0;

	pthread_mutex_lock(&origin_locks_mu);
	for (l = origin_locks; l; l = l->next)
		if (l->dev == st->st_dev && l->ino == st->st_ino)
			break;
	if (l) {
		if (excl && !l->excl) {
			rc = origin_flock(l->fd, LOCK_EX, target, "file origin used by another process");
			l->excl = rc == 0;
		}
		if (rc == 0)
			l->refs++;
	} else if (!(l = calloc(1, sizeof(*l)))) {
		rc = -ENOMEM;
	} else if ((l->fd = open(target, O_RDONLY | O_CLOEXEC)) < 0) {
		rc = -errno;
		free(l);
	} else if ((rc = origin_flock(l->fd, excl ? LOCK_EX : LOCK_SH, target,
	                              "file origin used by another process")) != 0) {
		close(l->fd);
		free(l);
	} else {
		l->dev = st->st_dev;
		l->ino = st->st_ino;
		l->excl = excl;
		l->refs = 1;
		l->next = origin_locks;
		origin_locks = l;
	}
	pthread_mutex_unlock(&origin_locks_mu);
	if (rc == -EBUSY)
		HL_ERR("origin",
		       "%s: the file is %s by another process (another hotlund?); a file origin has "
		       "no cluster lock, so it is served by one gateway at a time",
		       target, excl ? "in use" : "being written");
	*out = rc ? NULL : l;
	return rc;
}

static void origin_lock_put(struct origin_lock *l)
{
	if (!l)
		return;
	pthread_mutex_lock(&origin_locks_mu);
	if (--l->refs == 0) {
		for (struct origin_lock **pp = &origin_locks; *pp; pp = &(*pp)->next) {
			if (*pp == l) {
				*pp = l->next;
				break;
			}
		}
		close(l->fd); /* the flock goes with it */
		free(l);
	}
	pthread_mutex_unlock(&origin_locks_mu);
}

/*
 * Lock a regular file for this process alone (opts.exclusive: a cache
 * device). The lock belongs to the open file, so it lasts while anything
 * holds it, like the exclusive claim of a block device. @return 0 or -EBUSY.
 */
static int file_lock_exclusive(int fd, const char *target)
{
	int rc = origin_flock(fd, LOCK_EX, target, "file locked by another process");

	if (rc == -EBUSY)
		HL_ERR("origin", "%s: in use by another process (another hotlund?)", target);
	return rc;
}

/*
 * Local filesystems whose ctime the kernel itself stamps on every change
 * (overlayfs reports the ctime of the real upper or lower inode, which the
 * kernel stamps too; a copy-up changes the inode number: cold). Elsewhere
 * (NFS: the server's clock and attribute caching; FUSE: whatever the daemon
 * reports) a file cannot prove itself unchanged: cold unless exclusive = yes.
 */
static bool stamp_fs_trusted(long type)
{
	switch ((unsigned long)type) {
	case EXT4_SUPER_MAGIC: /* also ext2 and ext3 */
	case XFS_SUPER_MAGIC:
	case BTRFS_SUPER_MAGIC:
	case F2FS_SUPER_MAGIC:
	case TMPFS_MAGIC:
	case OVERLAYFS_SUPER_MAGIC:
		return true;
	default:
		return false;
	}
}

static void stamp_of(const struct stat *st, struct file_stamp *s)
{
	s->dev = (uint64_t)st->st_dev;
	s->ino = (uint64_t)st->st_ino;
	s->size = (uint64_t)st->st_size;
	s->ctime_s = (int64_t)st->st_ctim.tv_sec;
	s->ctime_ns = st->st_ctim.tv_nsec;
}

/*
 * An unnamed temporary file beside the file target names (O_TMPFILE, gone
 * at close; symlinks resolved) on the filesystem dev (the origin's), or -1.
 */
static int probe_fd(const char *target, dev_t dev)
{
	char path[PATH_MAX], dir[PATH_MAX];

	if (!realpath(target, path))
		return -1;
	const char *slash = strrchr(path, '/');
	size_t n = slash ? (size_t)(slash - path) : 0;

	if (!slash)
		return -1;
	if (n == 0)
		snprintf(dir, sizeof(dir), "/");
	else if (n < sizeof(dir))
		snprintf(dir, sizeof(dir), "%.*s", (int)n, path);
	else
		return -1;
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	struct stat st;

	/* Another filesystem after all (a bind-mounted file): probe the origin. */
	if (fd >= 0 && (fstat(fd, &st) || st.st_dev != dev)) {
		close(fd);
		fd = -1;
	}
	return fd;
}

static int file_open(struct hl_origin *o, const char *target, const struct hl_origin_opts *opts)
{
	struct file_origin *fo = fo_of(o);
	int flags = O_CLOEXEC | (o->read_only ? O_RDONLY : O_RDWR);
	struct stat st;
	int rc;

	/* "file:///path" and "file://localhost/path" name the same file as "file:/path". */
	if (!strncmp(target, "//localhost/", 12))
		target += 11;
	else if (!strncmp(target, "///", 3))
		target += 2;
	if (opts->direct)
		flags |= O_DIRECT;
	fo->eof_error = opts->eof_error;
	/*
	 * A writable block device is opened exclusively (O_EXCL on a block
	 * device): EBUSY when it is mounted, in an md/LVM stack or served by
	 * another target, instead of two writers corrupting each other.
	 */
	if (!o->read_only && stat(target, &st) == 0 && S_ISBLK(st.st_mode))
		flags |= O_EXCL;
	/* A busy exclusive device may be a killed hotlund's, still draining: wait. */
	int waited = 0;
	while ((fo->fd = open(target, flags)) < 0 && errno == EBUSY && (flags & O_EXCL) &&
	       excl_wait_step(&waited, target, "block device busy"))
		;
	if (fo->fd < 0) {
		rc = -errno;
		if (rc == -EBUSY)
			HL_ERR("origin",
			       "%s: block device in use (mounted or held by another user)", target);
		return rc;
	}
	if (fstat(fo->fd, &st)) {
		rc = -errno;
		goto fail;
	}
	if (S_ISBLK(st.st_mode)) {
		uint64_t size = 0, max_discard = 0;
		unsigned pbs = 0;

		fo->blkdev = true;
		if (ioctl(fo->fd, BLKGETSIZE64, &size)) {
			rc = -errno;
			goto fail;
		}
		o->size = size;
		if (ioctl(fo->fd, BLKPBSZGET, &pbs) == 0)
			o->phys_block_size = pbs;
		o->can_discard =
		    !o->read_only &&
		    sysfs_queue_u64(st.st_rdev, "discard_max_bytes", &max_discard) == 0 &&
		    max_discard > 0;
		/* BLKDISCARD promises nothing about what reads return afterwards. */
		o->zeroes_after_discard = false;
	} else if (S_ISREG(st.st_mode)) {
		struct statfs sfs;

		stamp_of(&st, &fo->opened);

		if (opts->exclusive) {
			rc = file_lock_exclusive(fo->fd, target);
			if (rc)
				goto fail;
		} else {
			rc = origin_lock_take(target, &st, !o->read_only, &fo->lock);
			if (rc)
				goto fail;
		}

		o->size = (uint64_t)st.st_size;
		fo->memfs = fstatfs(fo->fd, &sfs) == 0 &&
		            (sfs.f_type == TMPFS_MAGIC || sfs.f_type == RAMFS_MAGIC);
		if (fstatfs(fo->fd, &sfs) == 0) {
			fo->fs_type = (long)sfs.f_type;
			fo->fs_stamps = stamp_fs_trusted(sfs.f_type);
		}
		/*
		 * A file has no physical sector: st_blksize is the filesystem's
		 * preferred I/O size, not a unit writes are atomic in. Reporting it
		 * as the LU's physical block (LBPPBE) would tell initiators to
		 * align to something that does not exist, so leave it unknown
		 * (the LU then reports one logical block per physical block).
		 */
		o->phys_block_size = 0;
		if (!o->read_only) {
			/*
			 * Probe hole punching where it cannot hurt: past EOF with
			 * KEEP_SIZE changes no data, but an unsupported filesystem
			 * says EOPNOTSUPP. It does move the file's ctime (ext4), which
			 * is what proves the file unchanged across a restart: probe an
			 * unnamed temporary file of the same folder (same filesystem)
			 * instead, and the origin itself only where that fails.
			 */
			off_t probe = (off_t)HL_ALIGN_UP(o->size, 1u << 20) + (1 << 20);
			int pfd = probe_fd(target, st.st_dev);
			int pmode = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
			off_t poff = pfd >= 0 ? 0 : probe;
			if (fallocate(pfd >= 0 ? pfd : fo->fd, pmode, poff, 4096) == 0) {
				o->can_discard = true;
				o->zeroes_after_discard = true;
			} else {
				atomic_store(&fo->no_punch_hole, true);
			}
			if (pfd >= 0)
				close(pfd);
		}
	} else {
		rc = -EINVAL; /* a directory, socket, fifo... */
		goto fail;
	}
	if (!fo->blkdev) {
		if (fstat(fo->fd, &st)) {
			rc = -errno;
			goto fail;
		}
		stamp_of(&st, &fo->settled);
	}
	HL_INFO("origin", "%s: %s, %llu bytes%s%s%s", o->uri,
	        fo->blkdev ? "block device" : "file", (unsigned long long)o->size,
	        opts->direct ? ", O_DIRECT" : "", o->can_discard ? ", discard" : "",
	        fo->memfs ? ", in memory (I/O done inline)" : "");
	return 0;
fail:
	origin_lock_put(fo->lock);
	fo->lock = NULL;
	close(fo->fd);
	fo->fd = -1;
	return rc;
}

static void file_close(struct hl_origin *o)
{
	struct file_origin *fo = fo_of(o);

	origin_lock_put(fo->lock);
	fo->lock = NULL;

	if (fo->fd >= 0)
		close(fo->fd);
	fo->fd = -1;
}

/* ---- warm restart proofs ---- */

/*
 * A regular file proves itself unchanged by what the kernel records in its
 * inode: device, inode number, size and change time (ctime). Every write,
 * truncate, fallocate or chmod moves ctime to the current time, and no
 * system call sets it (utimes sets atime and mtime only). Two limits:
 *
 *  - ctime is the time of the change truncated to the filesystem's
 *    granularity (ns on ext4 with large inodes, xfs, btrfs, tmpfs; 1 s on
 *    ext4 with 128-byte inodes; 10 ms on FAT), and the kernel stamps it
 *    from a coarse clock (a timer tick, 1-10 ms). A change in the same
 *    granule as the one recorded would leave ctime as it was. So a proof
 *    is given only once the coarse clock has left the recorded granule
 *    ("settled"): any later change stamps a later time. The granule is
 *    guessed from the recorded nanoseconds (their trailing decimal zeros:
 *    .120000000 -> 10 ms, .000000000 -> 1 s), which errs towards waiting.
 *  - The clock is assumed not to step backwards by more than that across
 *    the downtime (NTP slews; an admin setting the clock back past the
 *    recorded ctime while another client writes is not covered), and the
 *    filesystem is assumed local (an NFS file's ctime is the server's).
 *
 * Writes by another process while hotlund runs are out of scope here (one
 * writer per LUN, ARCHITECTURE invariant 7); such a writer's changes after
 * the proof still move ctime, except stores through a shared mapping into
 * pages it dirtied before (the kernel stamps the first fault only).
 */

#define FILE_PROOF_WAIT_MS 3000 /* a final proof waits at most this long to settle */

/* 10^(trailing decimal zeros of ns), 1 s for a whole second: the granule ctime may be cut to. */
static long stamp_granule_ns(long ns)
{
	long g = 1;

	if (!ns)
		return 1000000000L;
	while (ns % (g * 10) == 0)
		g *= 10;
	return g;
}

/* True when a change from now on can no longer get ctime s's value. */
static bool stamp_settled(const struct file_stamp *s)
{
	struct timespec now;
	int64_t end_s = s->ctime_s;
	long end_ns = s->ctime_ns + stamp_granule_ns(s->ctime_ns);

	if (end_ns >= 1000000000L) {
		end_s += end_ns / 1000000000L;
		end_ns %= 1000000000L;
	}
	if (clock_gettime(CLOCK_REALTIME_COARSE, &now))
		return false;
	return (int64_t)now.tv_sec > end_s ||
	       ((int64_t)now.tv_sec == end_s && now.tv_nsec > end_ns);
}

static bool stamp_eq(const struct file_stamp *a, const struct file_stamp *b)
{
	return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
	       a->ctime_s == b->ctime_s && a->ctime_ns == b->ctime_ns;
}

int origin_file_stamp_format(const struct file_stamp *s, char *buf, size_t len)
{
	int n = snprintf(buf, len, "file:%" PRIu64 ":%" PRIu64 ":%" PRIu64 ":%" PRId64 ".%09ld",
	                 s->dev, s->ino, s->size, s->ctime_s, s->ctime_ns);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int origin_file_stamp_parse(const char *text, struct file_stamp *s)
{
	int n = -1;

	if (sscanf(text, "file:%" SCNu64 ":%" SCNu64 ":%" SCNu64 ":%" SCNd64 ".%9ld%n", &s->dev,
	           &s->ino, &s->size, &s->ctime_s, &s->ctime_ns, &n) != 5 ||
	    n < 0 || text[n] || s->ctime_ns < 0 || s->ctime_ns > 999999999L)
		return -EINVAL;
	return 0;
}

const char *origin_file_stamp_diff(const struct file_stamp *was, const struct file_stamp *now)
{
	if (was->dev != now->dev || was->ino != now->ino)
		return "file replaced (inode)";
	if (was->size != now->size)
		return "file changed: size";
	if (was->ctime_s != now->ctime_s || was->ctime_ns != now->ctime_ns)
		return "file changed: ctime";
	return NULL;
}

static int file_proof_take(struct hl_origin *o, const char *tag, bool final, char *proof,
                           size_t len)
{
	struct file_origin *fo = fo_of(o);
	struct file_stamp s, again;
	struct stat st;
	int waited = 0;

	(void)tag;
	if (fo->blkdev || !fo->fs_stamps)
		return -EOPNOTSUPP; /* no change time (a block device), or untrusted */
	/* Last: our writes reach the disk with the inode that stamps them (power loss). */
	if (final && !o->read_only && fsync(fo->fd))
		return -EAGAIN;
	if (fstat(fo->fd, &st))
		return -EAGAIN;
	stamp_of(&st, &s);
	while (!stamp_settled(&s)) {
		if (!final || waited >= FILE_PROOF_WAIT_MS)
			return -EAGAIN;
		usleep(1000);
		waited++;
		if (fstat(fo->fd, &st))
			return -EAGAIN;
		stamp_of(&st, &again);
		if (!stamp_eq(&s, &again))
			s = again; /* changed meanwhile (not by us: no I/O in flight) */
	}
	return origin_file_stamp_format(&s, proof, len) ? -EOPNOTSUPP : 0;
}

static int file_proof_check(struct hl_origin *o, const char *tag, const char *proof,
                            hl_origin_changed_fn changed, void *arg, char *why, size_t whylen)
{
	struct file_origin *fo = fo_of(o);
	struct file_stamp was, now;
	const char *d;
	struct stat st;

	(void)tag;
	(void)changed;
	(void)arg;
	if (fo->blkdev) {
		snprintf(why, whylen, "block device cannot prove it unchanged (exclusive = yes?)");
		return -ESTALE;
	}
	if (!fo->fs_stamps) {
		snprintf(why, whylen, "filesystem 0x%lx cannot prove it unchanged", fo->fs_type);
		return -ESTALE;
	}
	if (origin_file_stamp_parse(proof, &was)) {
		snprintf(why, whylen, "not a file proof");
		return -ESTALE;
	}
	/* As found at open, before this origin's own probe moved ctime ... */
	d = origin_file_stamp_diff(&was, &fo->opened);
	if (d) {
		snprintf(why, whylen, "%s", d);
		return -ESTALE;
	}
	/* ... and nobody changed it since. */
	if (fstat(fo->fd, &st)) {
		snprintf(why, whylen, "fstat: %s", strerror(errno));
		return -ESTALE;
	}
	stamp_of(&st, &now);
	d = origin_file_stamp_diff(&fo->settled, &now);
	if (d) {
		snprintf(why, whylen, "%s since open", d);
		return -ESTALE;
	}
	snprintf(why, whylen, "file unchanged");
	return 0;
}

const struct hl_origin_ops origin_file_ops = {
    .name = "file",
    .scheme = "file:",
    .priv_size = sizeof(struct file_origin),
    .open = file_open,
    .close = file_close,
    .submit = file_submit,
    .proof_take = file_proof_take,
    .proof_check = file_proof_check,
};
