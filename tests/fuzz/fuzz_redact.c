// fuzz-sources: src/util/util.c src/log/log.c
// fuzz-libs: -pthread
// fuzz-args: -max_len=4096
/*
 * fuzz_redact.c - harness for hl_uri_redact, the one function every origin
 * URI goes through before it leaves the process (control replies, SNMP,
 * logs, the cache map). Any bytes, any output size: no read or write out of
 * bounds, always terminated. And the property that matters: a secret in a
 * "SCHEME://user%SECRET@" part never reaches the output, whatever text
 * surrounds it (the surrounding bytes are the fuzzer's, with the URI
 * delimiters '@' '/' ':' '%' taken out so they cannot end the secret early).
 * And redacting the result again changes nothing (the cache map stores a
 * stripped origin and strips it again when it reads it back).
 */
#include "hotlun/util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MARK "Zq9-S3CR3T-zz"

static char *cstr(const uint8_t *d, size_t n, bool filter)
{
	char *s = malloc(n + 1);
	size_t o = 0;

	if (!s)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		char c = (char)d[i];
		if (!c || (filter && strchr("@/:%", c)))
			continue;
		s[o++] = c;
	}
	s[o] = '\0';
	return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char out[8192];

	if (size < 2)
		return 0;
	size_t len = 1 + data[0] * 16; /* 1..4081: truncation at every size */
	if (len > sizeof(out))
		len = sizeof(out);
	bool strip = data[1] & 1;
	data += 2;
	size -= 2;

	/* 1. raw input: bounds and termination */
	char *raw = cstr(data, size, false);
	if (!raw)
		return 0;
	memset(out, 'x', sizeof(out));
	hl_uri_redact(raw, strip, out, len);
	if (memchr(out, '\0', len) == NULL)
		abort();
	/* ... and a second pass finds nothing more, stripped (the cache map strips what it
	 * reads back) or not (a log line redacted twice) */
	if (strlen(raw) < sizeof(out) / 2) {
		char twice[sizeof(out)];
		hl_uri_redact(raw, strip, out, sizeof(out));
		hl_uri_redact(out, strip, twice, sizeof(twice));
		if (strcmp(out, twice) != 0)
			abort();
	}
	free(raw);

	/* 2. a secret between the fuzzer's prefix and suffix never shows */
	size_t cut = size / 2;
	char *pre = cstr(data, cut, true), *post = cstr(data + cut, size - cut, true);
	if (pre && post && !strstr(pre, MARK) && !strstr(post, MARK)) {
		size_t n = strlen(pre) + strlen(post) + sizeof("iscsi://u%" MARK "@h/t/0") + 8;
		char *uri = malloc(n), *big = malloc(2 * n + 16);
		if (uri && big) {
			snprintf(uri, n, "%siscsi://u%%" MARK "@h/%s", pre, post);
			hl_uri_redact(uri, strip, big, 2 * n + 16);
			if (strstr(big, MARK))
				abort();
		}
		free(uri);
		free(big);
	}
	free(pre);
	free(post);
	return 0;
}
