/*
 * file.c - the "file:" origin: a regular file or a block device: open and
 * close, the single-gateway lock of a regular file, the checks of each I/O
 * and the worker-pool path.
 *
 * I/O is asynchronous and never blocks a reactor. Each reactor thread owns one
 * io_uring (file_uring.c), which also does the reads and writes of a file on
 * a memory filesystem inline. Where io_uring cannot be set up (seccomp,
 * io_uring_disabled, old kernel) or lacks the operation (BLKDISCARD,
 * BLKZEROOUT), the blocking syscall runs on the shared worker pool
 * (hl_work_submit) and completes on the same reactor.
 *
 * Short transfers are resubmitted for the remainder; a read that hits EOF of
 * a regular file (the file shrank) fills the rest with zeroes, or fails with
 * -EIO when the opener asked for it (hl_origin_opts.eof_error: a cache
 * device, whose holes must never be served as data).
 *
 * Warm restart proofs (the inode's change time) are in file_proof.c.
 */
#include "config.h"

#include "hotlun/event.h"
#include "hotlun/log.h"
#include "hotlun/util.h"
#include "origin/origin_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <linux/magic.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

int origin_file_excl_wait_ms = 10000;

/* ---- helpers shared by both paths ---- */

/* Point fio->rest at the part of io->iov after fio->done bytes. */
int origin_file_rest_build(struct hl_origin_io *io, struct file_io *fio)
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
void origin_file_iov_zero_from(struct hl_origin_io *io, uint64_t from)
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

/* ---- worker-pool path: blocking syscalls on a worker thread ---- */

int origin_file_blocking_rw(struct hl_origin_io *io, struct file_io *fio, int fd)
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
			origin_file_iov_zero_from(io, fio->done);
			return 0;
		}
		fio->done += (uint64_t)n;
		if (fio->done < io->length) {
			int rc = origin_file_rest_build(io, fio);
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
		rc = origin_file_blocking_rw(io, fio, fo->fd);
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

int origin_file_work_submit(struct hl_origin_io *io)
{
	return hl_work_submit(file_work, file_work_done, io);
}

/* ---- ops ---- */

static int file_submit(struct hl_origin *o, struct hl_origin_io *io)
{
	struct file_origin *fo = fo_of(o);
	struct file_io *fio = fio_of(io);
	struct hl_reactor *r = hl_reactor_current();
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

	/* BLKDISCARD has no io_uring op in liburing 2.3 */
	if (io->op == HL_IO_DISCARD && fo->blkdev && io->length)
		return origin_file_work_submit(io);
	/* the filesystem can only take written zeroes */
	if (io->op == HL_IO_WRITE_ZEROES && !fo->blkdev &&
	    atomic_load_explicit(&fo->no_zero_range, memory_order_relaxed) &&
	    atomic_load_explicit(&fo->no_punch_hole, memory_order_relaxed))
		return origin_file_work_submit(io);
	return origin_file_ring_submit(r, io);
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
	fo->direct = opts->direct;
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

		origin_file_stamp_of(&st, &fo->opened);

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
			fo->fs_stamps = origin_file_stamp_trusted(sfs.f_type);
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
		origin_file_stamp_of(&st, &fo->settled);
	}
	if (!fo->blkdev)
		origin_file_watch_add(o, fo);
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

	origin_file_watch_del(fo);
	origin_lock_put(fo->lock);
	fo->lock = NULL;

	if (fo->fd >= 0)
		close(fo->fd);
	fo->fd = -1;
}

const struct hl_origin_ops origin_file_ops = {
    .name = "file",
    .scheme = "file:",
    .priv_size = sizeof(struct file_origin),
    .open = file_open,
    .close = file_close,
    .submit = file_submit,
    .proof_take = origin_file_proof_take,
    .data_id = origin_file_data_id,
    .proof_check = origin_file_proof_check,
};
