/*
 * state.c - the daemon's state folder and the identities derived from it.
 *
 * NAA-6 designators carry a 24-bit IEEE company identifier. hotlun has none
 * registered; HL_NAA_COMPANY_ID is a placeholder (documented in
 * docs/compliance.md) that packagers with an OUI/CID should replace.
 */
#include "daemon/daemon_internal.h"
#include "hotlun/log.h"
#include "hotlun/util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define HL_NAA_COMPANY_ID 0x0A484Cu /* placeholder, see the file comment */

static int mkdir_p(const char *path)
{
	char buf[PATH_MAX];

	if (hl_strlcpy(buf, path, sizeof(buf)) >= sizeof(buf))
		return -ENAMETOOLONG;
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, 0755) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/*
 * One step of a folder's path: owned by root or by us, and, if a folder,
 * writable by nobody else unless it is sticky and not the folder itself
 * (/tmp above it: others cannot rename or remove what we made there). A
 * link on the way must be ours or root's: its target is checked after.
 */
static int path_step_ok(const char *path, const struct stat *st, bool leaf, char *err,
                        size_t errlen)
{
	uid_t me = geteuid();

	if (st->st_uid != 0 && st->st_uid != me) {
		snprintf(err, errlen, "%s is owned by uid %u, not by root or by hotlund's user (uid %u)",
		         path, (unsigned)st->st_uid, (unsigned)me);
		return -EPERM;
	}
	if (S_ISDIR(st->st_mode) && (st->st_mode & (S_IWGRP | S_IWOTH)) &&
	    (leaf || !(st->st_mode & S_ISVTX))) {
		snprintf(err, errlen, "%s is writable by %s (mode %04o)", path,
		         st->st_mode & S_IWOTH ? "others" : "its group",
		         (unsigned)(st->st_mode & 07777));
		return -EPERM;
	}
	return 0;
}

/* Every step of path, as written (lstat: links) or resolved (stat). */
static int path_steps_ok(const char *path, bool follow, char *err, size_t errlen)
{
	char buf[PATH_MAX];
	struct stat st;
	bool leaf = true;
	int rc;

	if (hl_strlcpy(buf, path, sizeof(buf)) >= sizeof(buf))
		return -ENAMETOOLONG;
	for (;;) {
		if ((follow ? stat(buf, &st) : lstat(buf, &st)) < 0) {
			rc = -errno;
			snprintf(err, errlen, "%s: %s", buf, strerror(-rc));
			return rc;
		}
		if ((rc = path_step_ok(buf, &st, leaf, err, errlen)))
			return rc;
		leaf = false;
		/* up one step; a relative path's first name ends it (realpath checks the rest) */
		char *slash = strrchr(buf, '/');
		if (!slash)
			return 0;
		if (slash == buf) {
			if (!buf[1])
				return 0; /* "/" was the last */
			buf[1] = '\0';
		} else {
			*slash = '\0';
		}
	}
}

int daemon_dir_check(const char *dir, char *err, size_t errlen)
{
	char real[PATH_MAX];

	int rc = path_steps_ok(dir, false, err, errlen);
	if (rc)
		return rc;
	if (!realpath(dir, real)) {
		snprintf(err, errlen, "%s: %s", dir, strerror(errno));
		return -errno;
	}
	return path_steps_ok(real, true, err, errlen);
}

int daemon_state_dir_init(const char *state_dir, uint64_t *install_id)
{
	char path[PATH_MAX], text[32], why[PATH_MAX + 128];
	int rc, fd;
	ssize_t n;

	rc = mkdir_p(state_dir);
	if (rc) {
		HL_ERR("daemon", "state_dir %s: %s", state_dir, strerror(-rc));
		return rc;
	}
	/* hotlund writes files here by name: nobody else may place links or files */
	rc = daemon_dir_check(state_dir, why, sizeof(why));
	if (rc) {
		HL_ERR("daemon", "state_dir %s: %s: another user could make hotlund write through "
		                 "its links; chown and chmod go-w it",
		       state_dir, why);
		return rc;
	}
	snprintf(path, sizeof(path), "%s/install-id", state_dir);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, text, sizeof(text) - 1);
		close(fd);
		if (n > 0) {
			text[n] = '\0';
			char *end;
			errno = 0;
			*install_id = strtoull(text, &end, 16);
			if (!errno && end != text && (*end == '\n' || *end == '\0'))
				return 0;
		}
		HL_ERR("daemon", "%s is corrupt; remove it only if no initiator depends on the "
				 "current LU identities", path);
		return -EINVAL;
	}
	if (errno != ENOENT) {
		rc = -errno;
		HL_ERR("daemon", "%s: %s", path, strerror(errno));
		return rc;
	}
	if (getrandom(install_id, sizeof(*install_id), 0) != sizeof(*install_id))
		return -EIO;

	/* Write a temporary file and rename it, so a crash never leaves half an id. */
	char tmp[PATH_MAX + 8];
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = -errno;
		HL_ERR("daemon", "%s: %s", tmp, strerror(errno));
		return rc;
	}
	int len = snprintf(text, sizeof(text), "%016" PRIx64 "\n", *install_id);
	if (write(fd, text, (size_t)len) != len || fsync(fd) < 0) {
		rc = -errno;
		close(fd);
		unlink(tmp);
		HL_ERR("daemon", "%s: %s", tmp, strerror(-rc));
		return rc;
	}
	close(fd);
	if (rename(tmp, path) < 0) {
		rc = -errno;
		unlink(tmp);
		return rc;
	}
	HL_NOTICE("daemon", "new install id %016" PRIx64 " in %s", *install_id, path);
	return 0;
}

/* Identity seed of origin-derived identities: any gateway computes the same. */
#define HL_ORIGIN_ID_SEED 0x686f746c756e4c55ull

void daemon_disk_identity(uint64_t install_id, const char *disk_name, const char *origin_ident,
			  const char *conf_serial, const char *conf_naa, uint8_t naa[16],
			  char serial[33])
{
	const char *key = origin_ident ? origin_ident : disk_name;
	uint64_t seed = origin_ident ? HL_ORIGIN_ID_SEED : install_id;
	uint64_t a = hl_hash64(key, strlen(key), seed);
	uint64_t b = hl_hash64(key, strlen(key), ~seed ^ 0x5bd1e995u);

	/* NAA 6 | company id (24) | vendor specific id (36) | extension (64) */
	naa[0] = (uint8_t)(0x60 | (HL_NAA_COMPANY_ID >> 20));
	naa[1] = (uint8_t)(HL_NAA_COMPANY_ID >> 12);
	naa[2] = (uint8_t)(HL_NAA_COMPANY_ID >> 4);
	naa[3] = (uint8_t)((HL_NAA_COMPANY_ID & 0xf) << 4 | ((a >> 32) & 0xf));
	hl_put_be32(naa + 4, (uint32_t)a);
	hl_put_be64(naa + 8, b);
	snprintf(serial, 33, "%016" PRIx64, a ^ b);
	if (conf_naa && hl_parse_naa(conf_naa, naa))
		HL_ERR("daemon", "disk %s: naa %s: invalid (derived instead)", disk_name, conf_naa);
	if (conf_serial && hl_serial_valid(conf_serial))
		snprintf(serial, 33, "%s", conf_serial);
}

int daemon_wrap_origin(const struct hl_conf_disk *disk, struct hl_origin **origin)
{
	struct hl_origin *wrapped;
	int rc;

	if (!disk->origin_iops && !disk->origin_mbps && !disk->origin_latency_ms)
		return 0;
	rc = hl_origin_throttle_wrap(*origin, disk->origin_iops, disk->origin_mbps,
				     disk->origin_latency_ms, &wrapped);
	if (rc)
		return rc;
	*origin = wrapped;
	HL_NOTICE("daemon", "disk %s: origin throttled to %u IOPS, %u MB/s, +%u ms", disk->name,
		  disk->origin_iops, disk->origin_mbps, disk->origin_latency_ms);
	return 0;
}
