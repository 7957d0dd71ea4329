/*
 * conf_file.c - who may write and read the configuration file hotlund
 * runs from. The file decides what root's hotlund serves (an origin can
 * be any file or block device of the host) and holds CHAP secrets, so a
 * file another user owns or may write is refused, at start, by
 * --check-config and on a reload; one that holds a secret and that others
 * may read is started with a warning (refusing it would stop a running
 * site at its next restart for a mode it always had).
 */
#include "daemon/daemon_internal.h"

#include "hotlun/log.h"
#include "hotlun/util.h"

#include <errno.h>
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

int daemon_conf_file_check(const char *path, const struct hl_conf *conf, char *err,
                           size_t errlen)
{
	struct stat st;

	if (stat(path, &st) < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -errno;
	}
	if (st.st_uid != 0 && st.st_uid != geteuid()) {
		snprintf(err, errlen,
		         "%s is owned by uid %u, neither root nor hotlund's user: that user "
		         "decides what hotlund serves; chown it",
		         path, (unsigned)st.st_uid);
		return -EPERM;
	}
	if (st.st_mode & S_IWOTH) {
		snprintf(err, errlen,
		         "%s may be written by any user (mode %04o): any user could decide what "
		         "hotlund serves; chmod o-w it",
		         path, (unsigned)(st.st_mode & 07777));
		return -EPERM;
	}
	if ((st.st_mode & S_IWGRP) && st.st_gid != 0)
		HL_WARN("daemon", "%s may be written by group %u (mode %04o): its members decide "
		                  "what hotlund serves",
		        path, (unsigned)st.st_gid, (unsigned)(st.st_mode & 07777));
	const char *key = secret_key(conf);
	if (key && (st.st_mode & S_IROTH))
		HL_WARN("daemon", "%s holds a secret (%s) and any user may read it (mode %04o): "
		                  "chmod o-r it (saveconfig writes it 0600, or 0640 for its group)",
		        path, key, (unsigned)(st.st_mode & 07777));
	return 0;
}
