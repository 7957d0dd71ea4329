/*
 * preflight.c - what `hotlund --check-config` and start-up check about the
 * files a configuration names, before anything is opened for use: each
 * origin that is a local path exists, is a regular file or a block device
 * and is not empty; each cache device is a regular file or a block device
 * (or can be created) and has room for its size. Nothing is taken: block
 * devices are opened read-only, without O_EXCL, only to ask their size.
 * Each error names FILE:LINE of the key (the section's line when the key
 * came from elsewhere).
 */
#include "daemon/daemon_internal.h"

#include "hotlun/cache_engine.h"
#include "hotlun/log.h"
#include "hotlun/util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <linux/fs.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

static int at_line(char *err, size_t errlen, const struct hl_conf *c, int line, const char *fmt,
                   ...) __attribute__((format(printf, 5, 6)));

static int at_line(char *err, size_t errlen, const struct hl_conf *c, int line, const char *fmt,
                   ...)
{
	char msg[768];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	snprintf(err, errlen, "%s:%d: %s", c->path, line, msg);
	return -EINVAL;
}

/* The local path an origin URI names (bare path or file:), NULL for other backends. */
static const char *origin_path(const char *uri)
{
	size_t i = 0;

	if (strncasecmp(uri, "file:", 5) == 0) {
		uri += 5;
		if (strncmp(uri, "//localhost/", 12) == 0)
			return uri + 11;
		if (strncmp(uri, "///", 3) == 0)
			return uri + 2;
		return uri;
	}
	/* any other scheme (iscsi:, rbd:...) is not a local file */
	if (isalpha((unsigned char)uri[0])) {
		while (isalnum((unsigned char)uri[i]) || uri[i] == '+' || uri[i] == '-' ||
		       uri[i] == '.')
			i++;
		if (uri[i] == ':')
			return NULL;
	}
	return uri;
}

static const char *kind_of(mode_t m)
{
	if (S_ISDIR(m))
		return "a directory";
	if (S_ISCHR(m))
		return "a character device (not a block device)";
	if (S_ISFIFO(m))
		return "a FIFO";
	if (S_ISSOCK(m))
		return "a socket";
	return "not a regular file";
}

/* A block device's size in bytes, opened read-only and shared. @return 0 or -errno. */
static int blockdev_size(const char *path, uint64_t *bytes)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	int rc = 0;

	if (fd < 0)
		return -errno;
	if (ioctl(fd, BLKGETSIZE64, bytes) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

static const char *human(uint64_t v, char *buf, size_t len)
{
	return hl_format_size(v, buf, len);
}

static int check_origin(const struct hl_conf *c, const struct hl_conf_disk *d, char *err,
                        size_t errlen)
{
	const char *path = origin_path(d->origin);
	int line = d->origin_line ? d->origin_line : d->line;
	struct stat st;
	uint64_t bytes;

	if (!path)
		return 0;
	if (stat(path, &st) < 0)
		return at_line(err, errlen, c, line, "[disk %s] origin %s: %s", d->name, path,
		               strerror(errno));
	if (S_ISREG(st.st_mode)) {
		bytes = (uint64_t)st.st_size;
	} else if (S_ISBLK(st.st_mode)) {
		/* not readable here (permissions, a device cgroup): start-up will say */
		if (blockdev_size(path, &bytes))
			return 0;
	} else {
		return at_line(err, errlen, c, line,
		               "[disk %s] origin %s is %s; an origin is a "
		               "regular file or a block device",
		               d->name, path, kind_of(st.st_mode));
	}
	if (bytes < d->block_size)
		return at_line(err, errlen, c, line,
		               "[disk %s] origin %s is %s (%" PRIu64 " bytes): "
		               "smaller than one %u-byte block",
		               d->name, path, bytes ? "too small" : "empty", bytes, d->block_size);
	return 0;
}

static int check_cache(const struct hl_conf *c, const struct hl_conf_cache *k, char *err,
                       size_t errlen)
{
	int dline = k->device_line ? k->device_line : k->line;
	int sline = k->size_line ? k->size_line : k->line;
	char dir[4096], a[32], b[32];
	uint64_t have = 0, bytes;
	bool full_size = false; /* a file an earlier run made at its size */
	struct statvfs vfs;
	struct stat st;

	if (stat(k->device, &st) == 0) {
		if (S_ISBLK(st.st_mode)) {
			if (blockdev_size(k->device, &bytes))
				return 0; /* as for an origin: start-up will say */
			if (bytes < k->size)
				return at_line(err, errlen, c, sline,
				               "[cache %s] size %s is larger "
				               "than device %s (%s)",
				               k->name, human(k->size, a, sizeof(a)), k->device,
				               human(bytes, b, sizeof(b)));
			return 0;
		}
		if (!S_ISREG(st.st_mode))
			return at_line(err, errlen, c, dline,
			               "[cache %s] device %s is %s; a cache "
			               "device is a regular file or a block device",
			               k->name, k->device, kind_of(st.st_mode));
		/* as the cache's open refuses it (cache_dev.c): others could plant hits */
		if (hl_cache_dev_file_foreign(&st))
			return at_line(
			    err, errlen, c, dline,
			    "[cache %s] device %s is owned by uid %u gid %u, mode %04o: "
			    "another user could write blocks that hotlund serves as cache "
			    "hits; chown it to root and chmod 600",
			    k->name, k->device, (unsigned)st.st_uid, (unsigned)st.st_gid,
			    (unsigned)(st.st_mode & 07777));
		have = (uint64_t)st.st_blocks * 512; /* what it already holds on disk */
		full_size = (uint64_t)st.st_size >= k->size;
		hl_strlcpy(dir, k->device, sizeof(dir));
	} else if (errno == ENOENT) {
		/* created at start: its folder must be there */
		char copy[4096];
		hl_strlcpy(copy, k->device, sizeof(copy));
		hl_strlcpy(dir, dirname(copy), sizeof(dir));
		if (stat(dir, &st) < 0)
			return at_line(err, errlen, c, dline, "[cache %s] device %s: folder %s: %s",
			               k->name, k->device, dir, strerror(errno));
		if (!S_ISDIR(st.st_mode))
			return at_line(err, errlen, c, dline,
			               "[cache %s] device %s: %s is not a "
			               "folder",
			               k->name, k->device, dir);
	} else {
		return at_line(err, errlen, c, dline, "[cache %s] device %s: %s", k->name,
		               k->device, strerror(errno));
	}
	/* A cache file is sparse at first and fills up to its size: that room must exist. */
	if (statvfs(dir, &vfs) < 0)
		return at_line(err, errlen, c, dline, "[cache %s] device %s: %s", k->name,
		               k->device, strerror(errno));
	uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	if (k->size <= have || k->size - have <= avail)
		return 0;
	/*
	 * A file an earlier run made at its full size starts as it is (its
	 * cached blocks are kept); a full file system then makes the cache
	 * pass reads through when it fills, which is worth a warning, not a
	 * target that does not start.
	 */
	if (!full_size)
		return at_line(err, errlen, c, sline,
		               "[cache %s] size %s does not fit: the file "
		               "system of %s has %s free (a cache file grows to its size)",
		               k->name, human(k->size, a, sizeof(a)), k->device,
		               human(avail, b, sizeof(b)));
	HL_WARN("daemon",
	        "%s:%d: [cache %s] the file system of %s has %s free for the %s the "
	        "cache file does not hold yet: cache writes will fail (reads pass through) once it "
	        "is full",
	        c->path, sline, k->name, dir, human(avail, b, sizeof(b)),
	        human(k->size - have, a, sizeof(a)));
	return 0;
}

/*
 * state_dir and the control socket's folder, when they exist already (start
 * makes a missing state_dir and checks it then): writable by hotlund's user
 * only, so that --check-config (ExecStartPre) says what start would refuse.
 */
static int check_dir(const struct hl_conf *c, const char *what, const char *dir, char *err,
                     size_t errlen)
{
	char why[PATH_MAX + 128];
	struct stat st;

	if (!dir || stat(dir, &st) < 0 || daemon_dir_check(dir, why, sizeof(why)) == 0)
		return 0;
	snprintf(err, errlen, "%s: %s %s: %s: another user could make hotlund write through its "
	                      "links; chown and chmod go-w it",
	         c->path, what, dir, why);
	return -EPERM;
}

/*
 * The alias checks start-up makes on the URIs' text (caches.c), here too:
 * --check-config (ExecStartPre) would otherwise pass a configuration that
 * start refuses, and only a FILE:LINE here says where.
 */
static int check_aliases(const struct hl_conf *c, char *err, size_t errlen)
{
	char msg[768];
	int line = 0;
	int rc = daemon_caches_check(c, &line, msg, sizeof(msg));

	return rc ? at_line(err, errlen, c, line, "%s", msg) : 0;
}

int daemon_preflight(const struct hl_conf *c, char *err, size_t errlen)
{
	int rc;

	if ((rc = check_dir(c, "state_dir", c->state_dir, err, errlen)))
		return rc;
	if (c->control_socket) {
		char dir[PATH_MAX];
		hl_strlcpy(dir, c->control_socket, sizeof(dir));
		char *slash = strrchr(dir, '/');
		if (slash) {
			*(slash == dir ? slash + 1 : slash) = '\0';
			if ((rc = check_dir(c, "control socket folder", dir, err, errlen)))
				return rc;
		}
	}

	for (size_t i = 0; i < c->n_disks; i++) {
		rc = check_origin(c, &c->disks[i], err, errlen);
		if (rc)
			return rc;
	}
	for (size_t i = 0; i < c->n_caches; i++) {
		rc = check_cache(c, &c->caches[i], err, errlen);
		if (rc)
			return rc;
	}
	return check_aliases(c, err, errlen);
}
