/*
 * alias_key.c - what an origin URI names, from its text alone
 * (hl_origin_alias_key): the config-time half of the daemon's alias check,
 * which refuses two disks on one origin when one is cached and a write
 * through the other would leave that cache stale (ARCHITECTURE invariant
 * 1). The iscsi:// URL syntax stays with its backend (iscsi_url.c); a
 * file's key is what the path is (stat), and rbd's "POOL/IMAGE[@SNAP]" is
 * plain enough to take as it is written here, so that a build without
 * librbd keys it too. What the text cannot show (a LUN behind two portals, a host
 * under two names) the origins' data_id catches when the disk opens.
 * Parses untrusted config text: tests/fuzz/fuzz_origin_url.c.
 */
#include "config.h"

#include "hotlun/util.h"
#include "origin/origin_internal.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

size_t origin_scheme_len(const char *uri)
{
	size_t i = 0;

	if (!isalpha((unsigned char)uri[0]))
		return 0;
	while (isalnum((unsigned char)uri[i]) || uri[i] == '+' || uri[i] == '-' || uri[i] == '.')
		i++;
	return uri[i] == ':' ? i + 1 : 0;
}

static bool is_scheme(const char *uri, size_t slen, const char *scheme)
{
	return slen == strlen(scheme) && !strncasecmp(uri, scheme, slen);
}

static int text_key(const char *kind, const char *text, char *buf, size_t len)
{
	int n = snprintf(buf, len, "%s%s", kind, text);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int origin_file_stat_key(const struct stat *st, char *buf, size_t len)
{
	int n = S_ISBLK(st->st_mode)
	            ? snprintf(buf, len, "blk:%u:%u", major(st->st_rdev), minor(st->st_rdev))
	            : snprintf(buf, len, "file:%" PRIu64 ":%" PRIu64, (uint64_t)st->st_dev,
	                       (uint64_t)st->st_ino);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/*
 * A URI the backends cannot parse, by its text without credentials (a key
 * never holds a secret, and the credentials do not change the origin).
 * Truncation would make two URIs one key: refused instead.
 */
static int uri_key(const char *uri, char *buf, size_t len)
{
	size_t n = strlen(uri);

	if (len < 5 || n >= len - 4)
		return -ENAMETOOLONG; /* (the text without credentials is never longer) */
	memcpy(buf, "uri:", 4);
	hl_uri_redact(uri, true, buf + 4, len - 4);
	return 0;
}

/* A file: origin (or a bare path) by what the path is; by its text while it does not exist. */
static int file_key(const char *path, char *buf, size_t len)
{
	struct stat st;

	if (stat(path, &st) == 0)
		return origin_file_stat_key(&st, buf, len);
	/* not there (yet): open refuses it, or creates it under that name */
	return text_key("path:", path, buf, len);
}

int hl_origin_alias_key(const char *uri, char *buf, size_t len)
{
	size_t slen = origin_scheme_len(uri);
	const char *rest = uri + slen;
	int rc;

	if (slen == 0 || is_scheme(uri, slen, "file:"))
		return file_key(rest, buf, len);
	if (is_scheme(uri, slen, "iscsi:")) {
		rc = origin_iscsi_url_key(rest, buf, len);
		/* open refuses what the parser refuses: its text is key enough */
		return rc == -EINVAL ? uri_key(uri, buf, len) : rc;
	}
	if (is_scheme(uri, slen, "rbd:"))
		return text_key("rbd:", rest, buf, len); /* pool, image, snapshot: case-sensitive */
	return uri_key(uri, buf, len);
}
