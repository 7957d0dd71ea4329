/*
 * redact_slash_ut.c - hl_uri_redact with a secret that holds '/' (base64
 * secrets do: openssl rand -base64 12). The iscsi parser ends the
 * authority at the first '/', so such a URL is refused as a bad URL, and
 * the refusal (log, hotlunctl's error) showed the secret's tail:
 * "iscsi://u%***\/RET@127.0.0.1:1/iqn.x/0". Fuzz_redact takes '/' out of
 * its secrets, so it could not see this.
 */
#include "hl_test.h"
#include "hotlun/util.h"

#include <stdio.h>
#include <string.h>

static void expect(const char *uri, bool strip, const char *want)
{
	char buf[256];

	hl_uri_redact(uri, strip, buf, sizeof(buf));
	if (strcmp(buf, want) != 0)
		fprintf(stderr, "\n  %s -> %s (want %s)\n", uri, buf, want);
	CU_ASSERT_STRING_EQUAL(buf, want);
}

static void test_secret_with_slash(void)
{
	expect("iscsi://u%SEK/RET@127.0.0.1:1/iqn.x/0", false, "iscsi://u%***@127.0.0.1:1/iqn.x/0");
	expect("iscsi://u%a/b/c@h/t/0", false, "iscsi://u%***@h/t/0");
	expect("iscsi://u%SEK/RET@127.0.0.1:1/iqn.x/0", true, "iscsi://127.0.0.1:1/iqn.x/0");
	/* in a log line: up to the blank, not into the next URL */
	expect("open iscsi://u%A/B@h/t/0 failed, iscsi://v%C@h2/t/1 next", false,
	       "open iscsi://u%***@h/t/0 failed, iscsi://v%***@h2/t/1 next");
	/* no '@' at all: where the secret ends is unknown; up to the first '/' as before */
	expect("iscsi://u%A/Bx iscsi://v%C/D@h2/t/1", false, "iscsi://u%***/Bx iscsi://v%***@h2/t/1");
}

/* Unchanged: '@' in a path without a '%' in the authority, and the old cases. */
static void test_others_unchanged(void)
{
	expect("iscsi://h/t@x/0", false, "iscsi://h/t@x/0");
	expect("iscsi://u%secret", false, "iscsi://u%***");
	expect("iscsi://u%a@b@h/t/0", false, "iscsi://u%***@h/t/0");
	expect("file:/var/x%y@z", false, "file:/var/x%y@z");
}

/* At every output size, no byte of the secret's tail ("RETxyz") is shown. */
static void test_every_size(void)
{
	const char *uri = "iscsi://u%SEK/RETxyz@127.0.0.1:1/iqn.x/0";
	char buf[128];

	for (size_t len = 1; len <= sizeof(buf); len++) {
		hl_uri_redact(uri, false, buf, len);
		CU_ASSERT_PTR_NULL(strstr(buf, "RET"));
		CU_ASSERT_PTR_NULL(strstr(buf, "SEK"));
	}
}

static const struct hl_test tests[] = {
    {"a secret with '/' is hidden whole", test_secret_with_slash},
    {"other URLs as before", test_others_unchanged},
    {"no piece of it at any output size", test_every_size},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("redact_slash", tests);
}
