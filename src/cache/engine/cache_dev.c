/*
 * cache_dev.c - cache devices: a file or block device opened with O_DIRECT
 * (synchronous pread/pwrite/fdatasync; the engine runs them off the
 * reactors), and an in-memory device for tests that can tear the Nth write
 * and then fail everything, which is how the metadata tests simulate a
 * crash at every step.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hotlun/cache_engine.h"
#include "hotlun/log.h"
#include "hotlun/util.h"

/* ---- file / block device ---- */

/* All of len bytes at off, or -errno (-EIO: the device ended early). */
static int file_rw(struct hl_cache_dev *d, char *buf, size_t len, uint64_t off, bool write)
{
	size_t done = 0;

	if (off > d->size || len > d->size - off)
		return -EINVAL;
	while (done < len) {
		ssize_t n = write ? pwrite(d->fd, buf + done, len - done, (off_t)(off + done))
		                  : pread(d->fd, buf + done, len - done, (off_t)(off + done));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO;
		done += (size_t)n;
	}
	return 0;
}

static int file_pread(struct hl_cache_dev *d, void *buf, size_t len, uint64_t off)
{
	return file_rw(d, buf, len, off, false);
}

static int file_pwrite(struct hl_cache_dev *d, const void *buf, size_t len, uint64_t off)
{
	return file_rw(d, (char *)buf, len, off, true); /* pwrite only reads it */
}

static int file_flush(struct hl_cache_dev *d)
{
	return fdatasync(d->fd) ? -errno : 0;
}

static void file_close(struct hl_cache_dev *d)
{
	close(d->fd);
}

static const struct hl_cache_dev_ops file_ops = {
    .name = "file",
    .pread = file_pread,
    .pwrite = file_pwrite,
    .flush = file_flush,
    .close = file_close,
};

/*
 * A cache file is hotlund's: whoever else owns it or may write it can put
 * blocks in it that hotlund then serves as hits for any disk (the records
 * are on the device too), and whoever may read it reads the disks' data.
 * The first is refused, the second warned about (a block device is
 * root:disk 0660 by design: not checked here).
 */
bool hl_cache_dev_file_foreign(const struct stat *st)
{
	return (st->st_uid != 0 && st->st_uid != geteuid()) || (st->st_mode & S_IWOTH) ||
	       ((st->st_mode & S_IWGRP) && st->st_gid != 0);
}

static int file_owner_check(const char *path, const struct stat *st)
{
	if (hl_cache_dev_file_foreign(st)) {
		HL_ERR("cache",
		       "%s: owned by uid %u gid %u, mode %04o: another user could write blocks "
		       "that hotlund serves as cache hits; chown it to root and chmod 600",
		       path, (unsigned)st->st_uid, (unsigned)st->st_gid,
		       (unsigned)(st->st_mode & 07777));
		return -EPERM;
	}
	if (st->st_mode & (S_IRGRP | S_IROTH))
		HL_WARN("cache", "%s: mode %04o: other users can read the cached data; chmod 600 it",
		        path, (unsigned)(st->st_mode & 07777));
	return 0;
}

int hl_cache_dev_open_file(const char *path, uint64_t size, struct hl_cache_dev **out)
{
	struct hl_cache_dev *d;
	struct stat st;
	int fd, rc;

	fd = open(path, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st)) {
		rc = -errno;
		goto fail;
	}
	if (S_ISBLK(st.st_mode)) {
		uint64_t bytes;
		if (ioctl(fd, BLKGETSIZE64, &bytes)) {
			rc = -errno;
			goto fail;
		}
		if (size && size > bytes) {
			rc = -ENOSPC;
			goto fail;
		}
		size = size ? size : bytes;
	} else if (S_ISREG(st.st_mode)) {
		rc = file_owner_check(path, &st);
		if (rc)
			goto fail;
		if (!size)
			size = (uint64_t)st.st_size;
		else if ((uint64_t)st.st_size < size && ftruncate(fd, (off_t)size)) {
			rc = -errno;
			goto fail;
		}
	} else {
		rc = -EINVAL;
		goto fail;
	}
	size &= ~(uint64_t)4095;
	if (!size) {
		rc = -EINVAL;
		goto fail;
	}
	d = calloc(1, sizeof(*d));
	if (!d) {
		rc = -ENOMEM;
		goto fail;
	}
	d->ops = &file_ops;
	d->fd = fd;
	d->size = size;
	*out = d;
	return 0;
fail:
	close(fd);
	return rc;
}

/* ---- memory device with fault injection ---- */

struct mem_dev {
	uint8_t *data;
	uint64_t writes;     /* completed writes */
	uint64_t fail_after; /* writes allowed before the torn one */
	size_t torn_bytes;
	bool crashed;
};

static int mem_pread(struct hl_cache_dev *d, void *buf, size_t len, uint64_t off)
{
	struct mem_dev *m = d->priv;

	if (off > d->size || len > d->size - off)
		return -EINVAL;
	memcpy(buf, m->data + off, len);
	return 0;
}

static int mem_pwrite(struct hl_cache_dev *d, const void *buf, size_t len, uint64_t off)
{
	struct mem_dev *m = d->priv;

	if (off > d->size || len > d->size - off)
		return -EINVAL;
	if (m->crashed)
		return -EIO;
	if (m->writes == m->fail_after) {
		/* The crash: only a prefix of this write lands, nothing after it. */
		memcpy(m->data + off, buf, HL_MIN(len, m->torn_bytes));
		m->crashed = true;
		return -EIO;
	}
	memcpy(m->data + off, buf, len);
	m->writes++;
	return 0;
}

static int mem_flush(struct hl_cache_dev *d)
{
	struct mem_dev *m = d->priv;
	return m->crashed ? -EIO : 0;
}

static void mem_close(struct hl_cache_dev *d)
{
	struct mem_dev *m = d->priv;
	free(m->data);
	free(m);
}

static const struct hl_cache_dev_ops mem_ops = {
    .name = "mem",
    .pread = mem_pread,
    .pwrite = mem_pwrite,
    .flush = mem_flush,
    .close = mem_close,
};

int hl_cache_dev_open_mem(uint64_t size, struct hl_cache_dev **out)
{
	struct hl_cache_dev *d = calloc(1, sizeof(*d));
	struct mem_dev *m = calloc(1, sizeof(*m));

	if (!d || !m || !(m->data = calloc(1, size))) {
		free(d);
		if (m)
			free(m->data);
		free(m);
		return -ENOMEM;
	}
	m->fail_after = UINT64_MAX;
	d->ops = &mem_ops;
	d->fd = -1;
	d->size = size;
	d->priv = m;
	*out = d;
	return 0;
}

void hl_cache_dev_mem_fail_at(struct hl_cache_dev *d, uint64_t fail_after, size_t torn_bytes)
{
	struct mem_dev *m = d->priv;
	m->fail_after = fail_after;
	m->torn_bytes = torn_bytes;
}

uint64_t hl_cache_dev_mem_writes(const struct hl_cache_dev *d)
{
	const struct mem_dev *m = d->priv;
	return m->writes;
}

void hl_cache_dev_mem_reset(struct hl_cache_dev *d)
{
	struct mem_dev *m = d->priv;
	m->crashed = false;
	m->writes = 0;
	m->fail_after = UINT64_MAX;
}

void hl_cache_dev_close(struct hl_cache_dev *d)
{
	if (!d)
		return;
	d->ops->close(d);
	free(d);
}
