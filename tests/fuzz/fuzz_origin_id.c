// fuzz-sources: src/origin/alias_key.c src/origin/iscsi_url.c src/util/util.c src/log/log.c
// fuzz-libs: -pthread
// fuzz-args: -max_len=4096
/*
 * fuzz_origin_id.c - harness for what names an origin's data: the alias
 * key of an origin URI (hl_origin_alias_key, origin_iscsi_url_key: config
 * text, untrusted) and the logical unit designator of a VPD page 83h
 * (origin_iscsi_lu_designator: bytes a SAN sent). The first byte picks the
 * function and the output size. Properties: no read or write out of
 * bounds, the output always terminated; a key is a function of the origin
 * (the same input keys alike twice), and the secret of an iscsi:// URL
 * ("user%SECRET@") never reaches its key.
 */
#include "origin/origin_internal.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MARK "Zq9-S3CR3T-zz"

/* uri's key twice, len bytes of room; mark: the secret must not reach it */
static void check_key(const char *uri, size_t len, bool mark)
{
	char *a = malloc(len), *b = malloc(len);
	int ra, rb;

	if (!a || !b)
		abort();
	memset(a, 0x55, len);
	ra = hl_origin_alias_key(uri, a, len);
	rb = hl_origin_alias_key(uri, b, len);
	if (ra != rb || (ra == 0 && (strnlen(a, len) == len || strcmp(a, b))))
		abort(); /* unterminated, or not one key per origin */
	if (ra == 0 && mark && strstr(a, MARK))
		abort(); /* a secret reached a key */
	free(a);
	free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t len;
	char *s, out[HL_ORIGIN_ID_MAX];

	if (size < 1)
		return 0;
	len = 1 + (size_t)(data[0] & 0x7f) * 4; /* 1 .. 509 */
	data++, size--;
	if (data[-1] & 0x80) {
		/* the SAN's bytes, exactly as many as came (ASan sees a read past them) */
		uint8_t *page = malloc(size ? size : 1);
		if (!page)
			abort();
		memcpy(page, data, size);
		memset(out, 0x55, sizeof(out));
		if (origin_iscsi_lu_designator(page, size, out, len) == 0 &&
		    (strnlen(out, len) == len || strncmp(out, "scsi-lu:", 8)))
			abort();
		free(page);
		return 0;
	}
	s = malloc(size + 1);
	if (!s)
		abort();
	memcpy(s, data, size);
	s[size] = '\0';
	check_key(s, len, false);
	/* the same text as the path of a URL with a secret (unless the text has the mark itself) */
	char *u = malloc(size + sizeof("iscsi://user%" MARK "@h/"));
	if (!u)
		abort();
	snprintf(u, size + sizeof("iscsi://user%" MARK "@h/"), "iscsi://user%%" MARK "@h/%s", s);
	check_key(u, sizeof(out), !strstr(s, MARK));
	free(u);
	free(s);
	return 0;
}
