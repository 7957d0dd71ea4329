/*
 * conf_file.c - who may write and read the configuration file hotlund
 * runs from. The file decides what root's hotlund serves (an origin can
 * be any file or block device of the host) and holds CHAP secrets, so a
 * file another user owns or may write is refused, at start, by
 * --check-config and on a reload; one that holds a secret and that others
 * may read is started with a warning (refusing it would stop a running
 * site at its next restart for a mode it always had). The file checked is
 * the file parsed (the descriptor's fstat), and the folders that hold it
 * are checked too: whoever may write one of them may replace the file.
 */
#include "daemon/daemon_internal.h"

#include "hotlun/log.h"
#include "hotlun/util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The first key of conf that holds a secret in the file itself, or NULL. */
static const char *secret_key(const struct hl_conf *conf)
{
	char shown[2200];

	if (conf->discovery_chap_secret)
		return "discovery_chap_secret";
	for (size_t i = 0; i < conf->n_targets; i++) {
		if (conf->targets[i].chap_secret)
			return "chap_secret";
		if (conf->targets[i].mutual_secret)
			return "mutual_secret";
	}
	for (size_t i = 0; i < conf->n_disks; i++) {
		const struct hl_conf_disk *d = &conf->disks[i];
		if (d->ochap.secret)
			return "origin_chap_secret";
		if (d->ochap.mutual_secret)
			return "origin_mutual_secret";
		/* a secret in the URL (user%secret@) is what the redaction hides */
		if (d->origin && strcmp(hl_uri_redact(d->origin, false, shown, sizeof(shown)),
		                        d->origin) != 0)
			return "origin";
	}
	return NULL;
}

/*
 * Who may change the file itself: root or hotlund's user owns it, and no
 * other user may write it (a group may, with a warning). st is the file
 * that is read (fstat of the descriptor parsed), never a second look by
 * path: a file swapped in between the check and the read would pass.
 */
static int file_check(const char *path, const struct stat *st, char *err, size_t errlen)
{
	if (st->st_uid != 0 && st->st_uid != geteuid()) {
		snprintf(err, errlen,
		         "%s is owned by uid %u, neither root nor hotlund's user: that user "
		         "decides what hotlund serves; chown it",
		         path, (unsigned)st->st_uid);
		return -EPERM;
	}
	if (st->st_mode & S_IWOTH) {
		snprintf(err, errlen,
		         "%s may be written by any user (mode %04o): any user could decide what "
		         "hotlund serves; chmod o-w it",
		         path, (unsigned)(st->st_mode & 07777));
		return -EPERM;
	}
	if (!S_ISREG(st->st_mode)) {
		snprintf(err, errlen, "%s is not a regular file", path);
		return -EPERM;
	}
	if ((st->st_mode & S_IWGRP) && st->st_gid != 0)
		HL_WARN("daemon", "%s may be written by group %u (mode %04o): its members decide "
		                  "what hotlund serves",
		        path, (unsigned)st->st_gid, (unsigned)(st->st_mode & 07777));
	return 0;
}

/*
 * Who may replace the file: whoever may write a folder on the way to it
 * (rename another file over it, or a folder over its own). As sshd and
 * sudo reason: every folder from the file's up to / is owned by root or
 * hotlund's user, and others may not write it unless it is sticky (as
 * /tmp: there only the owner of a file may rename or remove it, and the
 * file's owner was checked). A folder its group may write (not root's
 * group) is a warning, as for the file. `dir` is resolved (realpath).
 */
static int folders_check(const char *path, char *dir, char *err, size_t errlen)
{
	for (;;) {
		struct stat st;

		if (stat(dir, &st) < 0) {
			snprintf(err, errlen, "%s: folder %s: %s", path, dir, strerror(errno));
			return -errno;
		}
		if (st.st_uid != 0 && st.st_uid != geteuid()) {
			snprintf(err, errlen,
			         "%s: its folder %s is owned by uid %u, neither root nor hotlund's "
			         "user: that user could replace the file; chown the folder",
			         path, dir, (unsigned)st.st_uid);
			return -EPERM;
		}
		bool sticky = st.st_mode & S_ISVTX;
		if ((st.st_mode & S_IWOTH) && !sticky) {
			snprintf(err, errlen,
			         "%s: its folder %s may be written by any user (mode %04o): any user "
			         "could replace the file; chmod o-w the folder (or move the file)",
			         path, dir, (unsigned)(st.st_mode & 07777));
			return -EPERM;
		}
		if ((st.st_mode & S_IWGRP) && !sticky && st.st_gid != 0)
			HL_WARN("daemon", "%s: its folder %s may be written by group %u (mode %04o): "
			                  "its members could replace the file",
			        path, dir, (unsigned)st.st_gid, (unsigned)(st.st_mode & 07777));
		if (strcmp(dir, "/") == 0)
			return 0;
		char *slash = strrchr(dir, '/');
		if (slash == dir)
			slash[1] = '\0';
		else
			*slash = '\0';
	}
}

/*
 * The folders of path as named (a symbolic link's) and of the file it
 * resolves to: whoever may write either could point hotlund elsewhere.
 */
static int path_folders_check(const char *path, char *err, size_t errlen)
{
	char buf[PATH_MAX], dir[PATH_MAX];
	int rc;

	/* the file's own folder, through every link */
	if (!realpath(path, dir)) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -errno;
	}
	*strrchr(dir, '/') = '\0';
	if (!dir[0])
		strcpy(dir, "/");
	rc = folders_check(path, dir, err, errlen);
	if (rc)
		return rc;
	/* the folder that holds the name given, when that name is a link */
	hl_strlcpy(buf, path, sizeof(buf));
	char *slash = strrchr(buf, '/');
	const char *named = !slash ? "." : slash == buf ? "/" : (*slash = '\0', buf);
	if (!realpath(named, dir)) {
		snprintf(err, errlen, "%s: %s: %s", path, named, strerror(errno));
		return -errno;
	}
	return folders_check(path, dir, err, errlen);
}

int daemon_conf_file_load(const char *path, struct hl_conf **out, char *err, size_t errlen)
{
	struct stat st;
	int fd, rc;

	*out = NULL;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return rc;
	}
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
	} else if ((rc = file_check(path, &st, err, errlen)) == 0 &&
	           (rc = path_folders_check(path, err, errlen)) == 0) {
		rc = hl_conf_read_fd(fd, path, out, err, errlen);
	}
	close(fd);
	if (rc)
		return rc;
	const char *key = secret_key(*out);
	if (key && (st.st_mode & S_IROTH))
		HL_WARN("daemon", "%s holds a secret (%s) and any user may read it (mode %04o): "
		                  "chmod o-r it (saveconfig writes it 0600, or 0640 for its group)",
		        path, key, (unsigned)(st.st_mode & 07777));
	return 0;
}
