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

/*
 * What follows a hidden userinfo is read as an authority again: a second
 * pass over the result finds nothing more to hide. The cache map stores
 * the stripped origin and strips it again when read back at start; a
 * result that changed there lost the disk's warm cache at every restart
 * (fuzz_cache_map found it: a "x@u%s/y@" behind one userinfo).
 */
static void test_twice_same(void)
{
	static const char *uris[] = {
	    "iscsi://a b@u%sec/ret@h/t/0",
	    "iscsi://x@u%s/y@h://z",
	    "iscsi://u%a/b@v%c/d@h/t/0",
	    "lun0!/ielf://va3 x fil@et%wr/l:q@z lun://q",
	};

	for (size_t i = 0; i < sizeof(uris) / sizeof(uris[0]); i++) {
		for (int strip = 0; strip < 2; strip++) {
			char once[256], twice[256];

			hl_uri_redact(uris[i], strip, once, sizeof(once));
			hl_uri_redact(once, strip, twice, sizeof(twice));
			if (strcmp(once, twice) != 0)
				fprintf(stderr, "\n  %s -> %s -> %s\n", uris[i], once, twice);
			CU_ASSERT_STRING_EQUAL(once, twice);
		}
	}
	expect("iscsi://a b@u%sec/ret@h/t/0", true, "iscsi://h/t/0");
	/* "user:" as well as "user%"; stripped, a lost '@' drops the secret too (rev19) */
	expect("iscsi://user:se/cret@host/iqn", false, "iscsi://user:***@host/iqn");
	expect("iscsi://user:se/cret@host/iqn", true, "iscsi://host/iqn");
	expect("iscsi://user%secret/iqn.x/0", true, "iscsi:///iqn.x/0");
	expect("iscsi://10.0.0.1:3260/iqn.x:t/0", true, "iscsi://10.0.0.1:3260/iqn.x:t/0");
	expect("iscsi://10.0.0.1:3260/iqn.x:t/0", false, "iscsi://10.0.0.1:3260/iqn.x:t/0");
	expect("iscsi://a b@u%sec/ret@h/t/0", false, "iscsi://***@h/t/0");
}

/*
 * Unstripped, "***" may stand for fewer bytes than it hides, and a text can
 * be built so that every pass hides one byte more (fuzz_redact: hundreds of
 * "://" before an '@'). Such a text is shown as its scheme, "://" and "***";
 * stripped, passes only shorten and run to the end (the map's identity).
 */
static void test_long_chain(void)
{
	static char uri[3 * 2000 + 8], once[sizeof(uri)], twice[sizeof(uri)];

	for (size_t reps = 1; reps <= 2000; reps = reps < 100 ? reps + 1 : reps * 2) {
		size_t o = 0;
		for (size_t i = 0; i < reps; i++) {
			memcpy(uri + o, "://", 3);
			o += 3;
		}
		memcpy(uri + o, "@h", 3);
		for (int strip = 0; strip < 2; strip++) {
			hl_uri_redact(uri, strip, once, sizeof(once));
			hl_uri_redact(once, strip, twice, sizeof(twice));
			if (strcmp(once, twice) != 0)
				fprintf(stderr, "\n  %zu: %.40s -> %.40s\n", reps, once, twice);
			CU_ASSERT_STRING_EQUAL(once, twice);
		}
	}
	expect("://://://@h", false, "://:***@h");
	expect("iscsi://u%secret@h/t/0", false, "iscsi://u%***@h/t/0");
}

static const struct hl_test tests[] = {
    {"redacted twice is redacted once", test_twice_same},
    {"hundreds of passes' worth of '://' end in a fixed point", test_long_chain},
    {"a secret with '/' is hidden whole", test_secret_with_slash},
    {"other URLs as before", test_others_unchanged},
    {"no piece of it at any output size", test_every_size},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("redact_slash", tests);
}
