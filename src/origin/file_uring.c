/*
 * file_uring.c - the file origin's io_uring path: one ring per reactor
 * thread, and the inline reads and writes of files on a memory filesystem.
 *
 * Each reactor thread owns one io_uring, made lazily on its first submit
 * and shared by every file origin used on that thread. The ring's completion
 * eventfd joins the submitting reactor's epoll set once and stays there,
 * idle or not, until that reactor is destroyed (a destroy call,
 * hl_reactor_on_destroy), the thread ends, or an idle ring is used by
 * another reactor of the same thread: an idle eventfd costs nothing, while
 * leaving and rejoining the set at every idle turn cost two epoll_ctl per
 * 4 KiB QD1 cache hit (docs/benchmarks.md). The eventfd is edge-triggered
 * and never read, and during the reactor's busy-poll window the reactor
 * peeks at the CQ itself (hl_uring_watch_peek): a CQE is reaped on the pass
 * it appears, not one epoll pass later, and without a read of the eventfd
 * (docs/bench-hit-device.md, "The QD1 hit's addition"). Completions are reaped in
 * the eventfd callback or that peek, never inside submit, even when the
 * kernel finished the I/O inline (page-cache hits usually do).
 *
 * SQEs prepared while a reactor turn runs are submitted once at its end
 * (a turn hook): the READs a burst of commands makes reach the kernel with
 * one io_uring_enter, and the block layer sees them as one batch (one
 * doorbell for the device instead of one per I/O).
 *
 * Buffers the iSCSI layer reads into again and again are announced as
 * memory regions of the thread (hotlun/mem_region.h). The ring registers
 * each with the kernel (a sparse table, one slot per region), and an
 * O_DIRECT read or write whose one buffer lies wholly inside a registered
 * region goes as READ_FIXED / WRITE_FIXED: the kernel pinned those pages
 * once, at registration, instead of pinning and unpinning them at every
 * O_DIRECT read (get_user_pages, 0.5-1.1 us of a loaded 4 KiB cache hit:
 * docs/bench-hit-device.md).
 * Any other buffer, or every one when registration fails (an old kernel,
 * ENOMEM) or is not tried (no CAP_IPC_LOCK and a finite RLIMIT_MEMLOCK:
 * may_pin_buffers), goes as READV / WRITEV as before.
 *
 * Where io_uring cannot be set up (seccomp, io_uring_disabled, old kernel) or
 * lacks the operation (BLKDISCARD, BLKZEROOUT), the I/O goes to file.c's
 * worker-pool path instead.
 *
 * A file on a memory filesystem (tmpfs, ramfs) is different: its reads and
 * writes are memory copies that never wait for a device, but tmpfs has no
 * non-blocking read path, so io_uring hands every one of them to a kernel
 * worker thread (a wake-up and a context switch per I/O; measured: a 4 KiB
 * random-read LUN on /dev/shm served 129k IOPS through io_uring, 166k from
 * the page cache of an ext4 file). Reads and writes of such files are done
 * inline on the reactor and their callbacks run from a zero-delay timer.
 */
#include "config.h"

#include "hotlun/event.h"
#include "hotlun/event_uring.h"
#include "hotlun/log.h"
#include "hotlun/mem_region.h"
#include "origin/origin_file.h"

#include <errno.h>
#include <liburing.h>
#include <linux/capability.h>
#include <linux/falloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define FILE_SQ_ENTRIES 256
#define FILE_CQ_ENTRIES 4096 /* also the cap on I/Os in the kernel per ring (no CQ overflow) */

/* Reads at least this large never run inline on the reactor (ring_prep). */
#define FILE_ASYNC_READ_MIN (1u << 20)

bool origin_file_force_workers;
bool origin_file_no_fixed;
bool origin_file_fixed_any_limit;
atomic_ulong origin_file_inline_ios;
atomic_ulong origin_file_fixed_ios;
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

/* One per reactor thread; touched only by that thread. */
struct file_ring {
	struct io_uring ring;
	int efd;
	struct hl_uring_watch watch; /* efd in a reactor's epoll set (event_uring.h) */
	struct hl_timer retry; /* resubmit after io_uring_submit failed */
	struct hl_turn_hook flush_hook; /* io_uring_submit at the end of the turn */
	struct hl_reactor *reactor; /* = watch.reactor, NULL while detached */
	unsigned inflight; /* SQEs prepared and not yet reaped */
	unsigned pending;  /* inflight + backlog */
	bool defer_taskrun;
	struct hl_origin_io *backlog_head, *backlog_tail; /* waiting for an SQE */
	struct hl_origin_io *done_head, *done_tail;       /* memfs I/O done inline */
	struct hl_timer done_timer;                       /* runs their callbacks */
	struct hl_mem_watch regions; /* the thread's memory regions, registered as buffers */
	bool fixed;                  /* a sparse buffer table of HL_MEM_REGIONS_MAX is registered */
	uint64_t fixed_ok[HL_MEM_REGIONS_MAX / 64]; /* slot s registered: bit s */
};

static __thread struct file_ring *tl_ring;
static __thread bool tl_ring_failed;
static pthread_key_t ring_key;
static pthread_once_t ring_key_once = PTHREAD_ONCE_INIT;
static atomic_bool uring_fail_logged;
static atomic_bool fixed_fail_logged;

/* ---- io_uring path ---- */

static void ring_event(struct hl_event *ev, uint32_t revents);
static void ring_retry(struct hl_timer *t);
static void ring_done_fire(struct hl_timer *t);
static void ring_flush_hook(struct hl_turn_hook *h);

/*
 * The ring leaves its reactor (destroyed, the thread ends, or an idle ring
 * moves to another reactor): nothing of it stays armed there.
 */
static void ring_detach(struct hl_uring_watch *w)
{
	struct file_ring *ring = w->arg;

	if (ring->pending)
		HL_WARN("origin", "io_uring leaves %s with %u file I/Os pending",
		        hl_reactor_name(ring->reactor), ring->pending);
	hl_turn_hook_cancel(&ring->flush_hook);
	hl_timer_stop(&ring->retry);
	hl_timer_stop(&ring->done_timer);
	ring->reactor = NULL;
}

static void ring_destroy(struct file_ring *ring)
{
	if (!ring)
		return;
	hl_uring_watch_detach(&ring->watch);
	hl_mem_watch_stop(&ring->regions);
	io_uring_queue_exit(&ring->ring);
	close(ring->efd);
	free(ring);
}

static void ring_key_destructor(void *p)
{
	/*
	 * Thread exit. A ring still attached has a live reactor (event_uring.h:
	 * a destroyed one detached it). Normally the ring is idle here; if not
	 * (a shutdown that did not drain), closing the ring
	 * cancels what is left.
	 */
	ring_destroy(p);
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
		ring_destroy(tl_ring);
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

static void fixed_failed(int rc)
{
	if (!atomic_exchange(&fixed_fail_logged, true))
		HL_NOTICE("origin",
		          "io_uring cannot register I/O buffers (%s): reads and writes into them "
		          "pin their pages each time (READV)",
		          strerror(-rc));
}

static bool fixed_slot_ok(const struct file_ring *ring, int slot)
{
	return ring->fixed_ok[slot / 64] & (1ull << (slot % 64));
}

/* A region of this thread: register it in its slot (pins its pages once). */
static void region_add(struct hl_mem_watch *w, int slot, void *base, size_t len)
{
	struct file_ring *ring = w->arg;
	struct iovec iov = {.iov_base = base, .iov_len = len};
	int rc = io_uring_register_buffers_update_tag(&ring->ring, (unsigned)slot, &iov, NULL, 1);

	if (rc == 1) {
		ring->fixed_ok[slot / 64] |= 1ull << (slot % 64);
		return;
	}
	fixed_failed(rc < 0 ? rc : -EIO); /* ENOMEM: RLIMIT_MEMLOCK; the slot stays unused */
}

/*
 * A region goes (its memory is about to be freed): empty its slot now, so no
 * later read lands in the pages pinned for it. Reads in flight keep the old
 * buffer alive in the kernel until they complete. Should the update fail,
 * the slot is still never used again until a new region takes it.
 */
static void region_del(struct hl_mem_watch *w, int slot)
{
	struct file_ring *ring = w->arg;
	struct iovec iov = {.iov_base = NULL, .iov_len = 0};

	if (!fixed_slot_ok(ring, slot))
		return;
	ring->fixed_ok[slot / 64] &= ~(1ull << (slot % 64));
	if (io_uring_register_buffers_update_tag(&ring->ring, (unsigned)slot, &iov, NULL, 1) != 1)
		HL_WARN_RL("origin", "io_uring: cannot empty registered buffer slot %d", slot);
}

/*
 * May this process pin buffers without starving its rings? Without
 * CAP_IPC_LOCK the kernel counts registered buffers, and the rings' own
 * memory, against RLIMIT_MEMLOCK for the whole user; under a finite limit
 * (8 MiB by default under systemd) the buffers would take what a ring made
 * later needs, and that thread would lose io_uring altogether.
 */
static bool may_pin_buffers(void)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
	struct __user_cap_data_struct d[2];
	struct rlimit rl;

	if (syscall(SYS_capget, &h, d) == 0 && (d[0].effective & (1u << CAP_IPC_LOCK)))
		return true;
	return getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur == RLIM_INFINITY;
}

/* A sparse table for the thread's regions, and watch them; without it, READV as before. */
static void ring_fixed_setup(struct file_ring *ring)
{
	const char *env = getenv("HOTLUN_FIXED_BUFS"); /* "0": off, for A/B runs */
	int rc;

	if (origin_file_no_fixed || (env && !strcmp(env, "0")))
		return;
	if (!origin_file_fixed_any_limit && !may_pin_buffers()) {
		if (!atomic_exchange(&fixed_fail_logged, true))
			HL_NOTICE("origin",
			          "no registered I/O buffers: RLIMIT_MEMLOCK is finite and "
			          "CAP_IPC_LOCK missing (reads pin their pages each time)");
		return;
	}
	rc = io_uring_register_buffers_sparse(&ring->ring, HL_MEM_REGIONS_MAX);
	if (rc) {
		fixed_failed(rc);
		return;
	}
	ring->fixed = true;
	hl_mem_watch_init(&ring->regions, region_add, region_del, ring);
	hl_mem_watch_start(&ring->regions);
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
	hl_uring_watch_init(&ring->watch, ring->efd, ring_event, ring_detach, ring);
	hl_uring_watch_edge(&ring->watch);
	hl_uring_watch_peek(&ring->watch, &ring->ring);
	hl_uring_watch_inflight(&ring->watch, &ring->inflight);
	hl_timer_init(&ring->retry, ring_retry, ring);
	hl_timer_init(&ring->done_timer, ring_done_fire, ring);
	hl_turn_hook_init(&ring->flush_hook, ring_flush_hook, ring);
	ring_fixed_setup(ring);
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

static void ring_flush_hook(struct hl_turn_hook *h)
{
	ring_flush(h->arg);
}

/*
 * The registered buffer slot that holds all of iov, or -1 (READV / WRITEV).
 * O_DIRECT only (the cache device): a buffered read or write copies and
 * pins nothing, so a fixed buffer saves it next to nothing, and it was not
 * measured better there (uncached 1 MiB reads, docs/bench-hit-device.md).
 */
static int ring_fixed_slot(const struct file_ring *ring, const struct file_origin *fo,
                           const struct iovec *iov, int cnt)
{
	int slot;

	if (!ring->fixed || !fo->direct || cnt != 1)
		return -1;
	slot = hl_mem_region_find(iov->iov_base, iov->iov_len);
	return slot >= 0 && fixed_slot_ok(ring, slot) ? slot : -1;
}

static void ring_prep(struct file_ring *ring, struct io_uring_sqe *sqe, struct hl_origin_io *io)
{
	struct file_io *fio = fio_of(io);
	struct file_origin *fo = fo_of(fio->o);
	const struct iovec *iov = fio->rest ? fio->rest : io->iov;
	int cnt = fio->rest ? fio->restcnt : io->iovcnt;
	off_t off = (off_t)(io->offset + fio->done);
	int slot;

	if (io->length == 0 && io->op != HL_IO_FLUSH) {
		/* Nothing to move; still complete through the ring, never inline. */
		io_uring_prep_nop(sqe);
		io_uring_sqe_set_data(sqe, io);
		return;
	}
	switch (io->op) {
	case HL_IO_READ:
		slot = ring_fixed_slot(ring, fo, iov, cnt);
		if (slot >= 0) {
			io_uring_prep_read_fixed(sqe, fo->fd, iov->iov_base, (unsigned)iov->iov_len,
			                         (uint64_t)off, slot);
			atomic_fetch_add_explicit(&origin_file_fixed_ios, 1, memory_order_relaxed);
		} else {
			io_uring_prep_readv(sqe, fo->fd, iov, (unsigned)cnt, (uint64_t)off);
		}
		/*
		 * A page-cache hit is copied inside io_uring_submit, on the reactor:
		 * 16 MiB took 20-150 ms there, stalling every connection of that
		 * reactor (issue 19, item 3: 4 KiB READs of another session waited
		 * that long behind one that queued 16 MiB READs; 3-7 ms with this).
		 * Large reads go to the kernel's io-wq workers instead. Not O_DIRECT
		 * ones (the cache device): no copy, and a worker's wake-up per read
		 * made a 1 MiB hit cost more CPU than sixteen 64 KiB ones.
		 */
		if (io->length >= FILE_ASYNC_READ_MIN && !fo->direct)
			io_uring_sqe_set_flags(sqe, IOSQE_ASYNC);
		break;
	case HL_IO_WRITE:
		slot = ring_fixed_slot(ring, fo, iov, cnt);
		if (slot >= 0) {
			io_uring_prep_write_fixed(sqe, fo->fd, iov->iov_base, (unsigned)iov->iov_len,
			                          (uint64_t)off, slot);
			atomic_fetch_add_explicit(&origin_file_fixed_ios, 1, memory_order_relaxed);
		} else {
			io_uring_prep_writev(sqe, fo->fd, iov, (unsigned)cnt, (uint64_t)off);
		}
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

/* The backlog and the done list: I/Os linked through file_io.next, oldest first. */
static void io_list_append(struct hl_origin_io **head, struct hl_origin_io **tail,
                           struct hl_origin_io *io)
{
	fio_of(io)->next = NULL;
	if (*tail)
		fio_of(*tail)->next = io;
	else
		*head = io;
	*tail = io;
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
		io_list_append(&ring->backlog_head, &ring->backlog_tail, io);
		if (!ring->inflight && !hl_timer_pending(&ring->retry))
			hl_timer_start(ring->reactor, &ring->retry, 1);
		return;
	}
	ring_prep(ring, sqe, io);
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
		ring_prep(ring, sqe, io);
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
	rc = origin_file_work_submit(io);
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
			/* EOF: the file is shorter than it was */
			origin_file_iov_zero_from(io, fio->done);
			break;
		}
		res = origin_file_rest_build(io, fio);
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

/* Nothing left to do: no timer or hook of the ring stays armed (the eventfd stays watched). */
static void ring_idle_check(struct file_ring *ring)
{
	if (ring->pending == 0) {
		hl_turn_hook_cancel(&ring->flush_hook);
		hl_timer_stop(&ring->retry);
		hl_timer_stop(&ring->done_timer);
	}
}

static void ring_cqe(void *ctx, void *data, int res)
{
	ring_complete(ctx, data, res);
}

static void ring_reap(struct file_ring *ring)
{
	hl_uring_reap(&ring->ring, ring->defer_taskrun, ring_cqe, ring);
	backlog_drain(ring);
	ring_flush(ring);
	ring_idle_check(ring);
}

static void ring_event(struct hl_event *ev, uint32_t revents)
{
	struct file_ring *ring = ev->arg;

	(void)revents;
	/*
	 * The eventfd is edge-triggered and never read: every CQE post signals
	 * it, and epoll reports it again when a CQE came after the last report,
	 * so a CQE this reap leaves (posted after its count) brings the next
	 * call (reactor_ut: "strands no CQE").
	 */
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

	fio->result = origin_file_blocking_rw(io, fio, fo_of(fio->o)->fd);
	atomic_fetch_add_explicit(&origin_file_inline_ios, 1, memory_order_relaxed);
	io_list_append(&ring->done_head, &ring->done_tail, io);
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
	if (ring->reactor == r)
		return ring;
	/*
	 * -EBUSY: another reactor on this thread still has I/O here (a caller
	 * bug); an idle ring follows the thread's new reactor.
	 */
	rc = hl_uring_watch_attach(&ring->watch, r, ring->pending != 0);
	if (rc) {
		*err = rc;
		return NULL;
	}
	ring->reactor = r;
	return ring;
}

int origin_file_ring_submit(struct hl_reactor *r, struct hl_origin_io *io)
{
	struct file_origin *fo = fo_of(fio_of(io)->o);
	struct file_ring *ring;
	int rc;

	ring = ring_get(r, &rc);
	if (!ring)
		return rc ? rc : origin_file_work_submit(io);
	ring->pending++;
	if (fo->memfs && (io->op == HL_IO_READ || io->op == HL_IO_WRITE)) {
		ring_inline(ring, io);
		return 0;
	}
	ring_queue(ring, io);
	/* Submitted with the turn's other SQEs; now when r is not running here. */
	if (hl_turn_hook_queue_early(r, &ring->flush_hook))
		ring_flush(ring);
	return 0;
}
