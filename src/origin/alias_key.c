/*
 * alias_key.c - what an origin URI names, from its text alone
 * (hl_origin_alias_key): the config-time half of the daemon's alias check,
 * which refuses two disks on one origin when one is cached and a write
 * through the other would leave that cache stale (ARCHITECTURE invariant
 * 1). Each backend's URL syntax stays with the backend (iscsi_url.c,
 * file_proof.c; rbd's "POOL/IMAGE[@SNAP]" is plain enough to read here, so
 * that a build without librbd keys it too); this file only dispatches on
 * the scheme. What the text cannot show (a LUN behind two portals, a host
 * under two names) the origins' data_id catches when the disk opens.
 * Parses untrusted config text: tests/fuzz/fuzz_origin_url.c.
 */
#include "config.h"

#include "origin/origin_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Length of uri's RFC 3986 scheme with its ':' ("file:" 5), 0 when it has none. */
static size_t scheme_of(const char *uri)
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

int hl_origin_alias_key(const char *uri, char *buf, size_t len)
{
	size_t slen = scheme_of(uri);
	const char *rest = uri + slen;
	int rc;

	if (slen == 0 || is_scheme(uri, slen, "file:"))
		return origin_file_alias_key(rest, buf, len);
	if (is_scheme(uri, slen, "iscsi:")) {
		rc = origin_iscsi_url_key(rest, buf, len);
		/* open refuses what the parser refuses: its text is key enough */
		return rc == -EINVAL ? text_key("uri:", uri, buf, len) : rc;
	}
	if (is_scheme(uri, slen, "rbd:"))
		return text_key("rbd:", rest, buf, len); /* pool, image, snapshot: case-sensitive */
	return text_key("uri:", uri, buf, len);
}
