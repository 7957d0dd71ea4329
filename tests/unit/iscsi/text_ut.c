/*
 * text_ut.c - the key=value text format: parsing (RFC 7143 6.1 syntax
 * and limits, never reading past the segment) and building.
 */
#include "iscsi/iscsi_text.h"

#include "hl_test.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Parse a C string literal including its implicit final NUL. */
#define PARSE(list, lit) iscsi_kvlist_parse((list), (lit), sizeof(lit))

static void test_parses_pairs_in_order(void)
{
	struct iscsi_kvlist l;

	CU_ASSERT_EQUAL_FATAL(
	    PARSE(&l, "InitiatorName=iqn.1994-05.com.redhat:x\0SessionType=Normal"), 0);
	CU_ASSERT_EQUAL_FATAL(l.n, 2);
	CU_ASSERT_STRING_EQUAL(l.kv[0].key, "InitiatorName");
	CU_ASSERT_STRING_EQUAL(l.kv[0].value, "iqn.1994-05.com.redhat:x");
	CU_ASSERT_STRING_EQUAL(l.kv[1].key, "SessionType");
	CU_ASSERT_STRING_EQUAL(l.kv[1].value, "Normal");
	iscsi_kvlist_free(&l);
}

static void test_value_keeps_later_equals(void)
{
	struct iscsi_kvlist l;

	CU_ASSERT_EQUAL_FATAL(PARSE(&l, "CHAP_C=0bAAE="), 0);
	CU_ASSERT_EQUAL_FATAL(l.n, 1);
	CU_ASSERT_STRING_EQUAL(l.kv[0].key, "CHAP_C");
	CU_ASSERT_STRING_EQUAL(l.kv[0].value, "0bAAE=");
	iscsi_kvlist_free(&l);
}

static void test_empty_value_allowed(void)
{
	struct iscsi_kvlist l;

	CU_ASSERT_EQUAL_FATAL(PARSE(&l, "TargetAlias="), 0);
	CU_ASSERT_EQUAL_FATAL(l.n, 1);
	CU_ASSERT_STRING_EQUAL(l.kv[0].value, "");
	iscsi_kvlist_free(&l);
}

static void test_empty_segment(void)
{
	struct iscsi_kvlist l;

	CU_ASSERT_EQUAL(iscsi_kvlist_parse(&l, NULL, 0), 0);
	CU_ASSERT_EQUAL(l.n, 0);
	iscsi_kvlist_free(&l);
}

static void test_skips_empty_strings(void)
{
	struct iscsi_kvlist l;

	/* Stray NULs (padding left in by a sender) are not pairs. */
	CU_ASSERT_EQUAL_FATAL(PARSE(&l, "\0a=1\0\0\0b=2\0\0"), 0);
	CU_ASSERT_EQUAL_FATAL(l.n, 2);
	CU_ASSERT_STRING_EQUAL(l.kv[0].key, "a");
	CU_ASSERT_STRING_EQUAL(l.kv[1].key, "b");
	iscsi_kvlist_free(&l);
}

static void test_rejects_missing_final_nul(void)
{
	struct iscsi_kvlist l;
	static const char seg[] = "a=1\0b=2";

	CU_ASSERT_EQUAL(iscsi_kvlist_parse(&l, seg, sizeof(seg) - 1), -EINVAL);
	CU_ASSERT_EQUAL(l.n, 0);
}

static void test_rejects_missing_equals(void)
{
	struct iscsi_kvlist l;

	CU_ASSERT_EQUAL(PARSE(&l, "a=1\0HeaderDigest"), -EINVAL);
}

static void test_rejects_empty_key(void)
{
	struct iscsi_kvlist l;

	CU_ASSERT_EQUAL(PARSE(&l, "=None"), -EINVAL);
}

static void test_key_length_limit(void)
{
	struct iscsi_kvlist l;
	char seg[80];

	memset(seg, 'K', 63);
	memcpy(seg + 63, "=v", 3);
	CU_ASSERT_EQUAL_FATAL(iscsi_kvlist_parse(&l, seg, 66), 0);
	CU_ASSERT_EQUAL(strlen(l.kv[0].key), 63);
	iscsi_kvlist_free(&l);

	memset(seg, 'K', 64);
	memcpy(seg + 64, "=v", 3);
	CU_ASSERT_EQUAL(iscsi_kvlist_parse(&l, seg, 67), -EINVAL);
}

static void test_key_charset(void)
{
	struct iscsi_kvlist l;

	CU_ASSERT_EQUAL_FATAL(PARSE(&l, "X-com.example+a@b_c.d-e=1"), 0);
	iscsi_kvlist_free(&l);
	CU_ASSERT_EQUAL_FATAL(PARSE(&l, "X#PublicExtension=1"), 0); /* RFC 7143 public extension */
	iscsi_kvlist_free(&l);
	CU_ASSERT_EQUAL(PARSE(&l, "Header Digest=None"), -EINVAL);
	CU_ASSERT_EQUAL(PARSE(&l, "a#b=1"), -EINVAL); /* '#' only in the X# prefix */
	CU_ASSERT_EQUAL(PARSE(&l, "X##=1"), -EINVAL);
	CU_ASSERT_EQUAL(PARSE(&l, "a/b=1"), -EINVAL);
	CU_ASSERT_EQUAL(PARSE(&l, "k\xc3\xa9=1"), -EINVAL);
}

static void test_value_length_limit(void)
{
	struct iscsi_kvlist l;
	size_t n = 2 + ISCSI_VALUE_MAX + 2;
	char *seg = malloc(n);

	CU_ASSERT_PTR_NOT_NULL_FATAL(seg);
	memcpy(seg, "v=", 2);
	memset(seg + 2, 'x', ISCSI_VALUE_MAX);
	seg[2 + ISCSI_VALUE_MAX] = '\0';
	CU_ASSERT_EQUAL_FATAL(iscsi_kvlist_parse(&l, seg, 2 + ISCSI_VALUE_MAX + 1), 0);
	CU_ASSERT_EQUAL(strlen(l.kv[0].value), ISCSI_VALUE_MAX);
	iscsi_kvlist_free(&l);

	seg[2 + ISCSI_VALUE_MAX] = 'x';
	seg[2 + ISCSI_VALUE_MAX + 1] = '\0';
	CU_ASSERT_EQUAL(iscsi_kvlist_parse(&l, seg, n), -EINVAL);
	free(seg);
}

static void test_error_leaves_list_empty(void)
{
	struct iscsi_kvlist l;

	CU_ASSERT_EQUAL(PARSE(&l, "a=1\0b=2\0bad"), -EINVAL);
	CU_ASSERT_EQUAL(l.n, 0);
	CU_ASSERT_PTR_NULL(l.kv);
	CU_ASSERT_PTR_NULL(l.storage);
	iscsi_kvlist_free(&l); /* harmless */
}

/*
 * Put the segment flush against an unmapped page: reading one byte past
 * len faults. Both the terminated and the unterminated case must stay in.
 */
static void test_never_reads_past_len(void)
{
	long page = sysconf(_SC_PAGESIZE);
	uint8_t *map = mmap(NULL, (size_t)page * 2, PROT_READ | PROT_WRITE,
	                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct iscsi_kvlist l;
	static const char ok[] = "a=1\0b=2";           /* sizeof includes the final NUL */
	static const char unterminated[] = "a=1\0b=2"; /* passed without it */

	CU_ASSERT_FATAL(map != MAP_FAILED);
	CU_ASSERT_EQUAL_FATAL(mprotect(map + page, (size_t)page, PROT_NONE), 0);

	uint8_t *end = map + page;
	memcpy(end - sizeof(ok), ok, sizeof(ok));
	CU_ASSERT_EQUAL(iscsi_kvlist_parse(&l, end - sizeof(ok), sizeof(ok)), 0);
	CU_ASSERT_EQUAL(l.n, 2);
	iscsi_kvlist_free(&l);

	memcpy(end - (sizeof(unterminated) - 1), unterminated, sizeof(unterminated) - 1);
	CU_ASSERT_EQUAL(
	    iscsi_kvlist_parse(&l, end - (sizeof(unterminated) - 1), sizeof(unterminated) - 1),
	    -EINVAL);
	memset(end - 5, 'k', 5); /* a key running into the guard page */
	CU_ASSERT_EQUAL(iscsi_kvlist_parse(&l, end - 5, 5), -EINVAL);
	munmap(map, (size_t)page * 2);
}

static void test_owns_a_copy(void)
{
	struct iscsi_kvlist l;
	char seg[] = "a=1";

	CU_ASSERT_EQUAL_FATAL(iscsi_kvlist_parse(&l, seg, sizeof(seg)), 0);
	memset(seg, 'z', sizeof(seg));
	CU_ASSERT_STRING_EQUAL(l.kv[0].key, "a");
	CU_ASSERT_STRING_EQUAL(l.kv[0].value, "1");
	iscsi_kvlist_free(&l);
}

static void test_many_pairs(void)
{
	struct iscsi_textbuf tb = {0};
	struct iscsi_kvlist l;
	char key[16];

	for (int i = 0; i < 1000; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		CU_ASSERT_EQUAL_FATAL(iscsi_textbuf_addf(&tb, key, "%d", i * 3), 0);
	}
	CU_ASSERT_EQUAL_FATAL(iscsi_kvlist_parse(&l, tb.data, tb.len), 0);
	CU_ASSERT_EQUAL_FATAL(l.n, 1000);
	CU_ASSERT_STRING_EQUAL(l.kv[999].key, "k999");
	CU_ASSERT_STRING_EQUAL(l.kv[999].value, "2997");
	iscsi_kvlist_free(&l);
	iscsi_textbuf_free(&tb);
}

static void test_find(void)
{
	struct iscsi_kvlist l;

	CU_ASSERT_EQUAL_FATAL(PARSE(&l, "a=1\0b=2\0a=3"), 0);
	CU_ASSERT_STRING_EQUAL(iscsi_kvlist_find(&l, "a"), "1");
	CU_ASSERT_STRING_EQUAL(iscsi_kvlist_find(&l, "b"), "2");
	CU_ASSERT_PTR_NULL(iscsi_kvlist_find(&l, "A")); /* keys are case-sensitive */
	CU_ASSERT_PTR_NULL(iscsi_kvlist_find(&l, "c"));
	iscsi_kvlist_free(&l);
}

static void test_find_duplicate(void)
{
	struct iscsi_kvlist l;
	const char *dup = "(untouched)";

	CU_ASSERT_EQUAL_FATAL(PARSE(&l, "a=1\0b=2\0c=3"), 0);
	CU_ASSERT_EQUAL(iscsi_kvlist_find_duplicate(&l, &dup), 0);
	CU_ASSERT_PTR_NULL(dup);
	iscsi_kvlist_free(&l);

	/* b repeats at index 3, a only at index 4: b is reported. */
	CU_ASSERT_EQUAL_FATAL(PARSE(&l, "a=1\0b=2\0c=3\0b=4\0a=5\0a=6"), 0);
	CU_ASSERT_EQUAL(iscsi_kvlist_find_duplicate(&l, &dup), -EEXIST);
	CU_ASSERT_PTR_EQUAL(dup, l.kv[3].key);
	iscsi_kvlist_free(&l);

	CU_ASSERT_EQUAL_FATAL(PARSE(&l, "HeaderDigest=None\0headerdigest=None"), 0);
	CU_ASSERT_EQUAL(iscsi_kvlist_find_duplicate(&l, &dup), 0); /* case-sensitive */
	iscsi_kvlist_free(&l);

	CU_ASSERT_EQUAL(iscsi_kvlist_parse(&l, NULL, 0), 0);
	CU_ASSERT_EQUAL(iscsi_kvlist_find_duplicate(&l, &dup), 0);
}

/* 40000 distinct tiny keys then one repeat: sorted, not pairwise (fast). */
static void test_find_duplicate_many(void)
{
	struct iscsi_textbuf tb = {0};
	struct iscsi_kvlist l;
	const char *dup;
	char key[16];

	for (int i = 0; i < 40000; i++) {
		snprintf(key, sizeof(key), "k%x", i);
		CU_ASSERT_EQUAL_FATAL(iscsi_textbuf_add(&tb, key, ""), 0);
	}
	CU_ASSERT_EQUAL_FATAL(iscsi_textbuf_add(&tb, "k9c3f", "again"), 0);
	CU_ASSERT_EQUAL_FATAL(iscsi_kvlist_parse(&l, tb.data, tb.len), 0);
	CU_ASSERT_EQUAL(iscsi_kvlist_find_duplicate(&l, &dup), -EEXIST);
	CU_ASSERT_STRING_EQUAL(dup, "k9c3f");
	iscsi_kvlist_free(&l);
	iscsi_textbuf_free(&tb);
}

static void test_textbuf_add(void)
{
	struct iscsi_textbuf tb = {0};
	static const char want[] = "HeaderDigest=None\0TargetAlias=";

	CU_ASSERT_EQUAL_FATAL(iscsi_textbuf_add(&tb, "HeaderDigest", "None"), 0);
	CU_ASSERT_EQUAL_FATAL(iscsi_textbuf_add(&tb, "TargetAlias", ""), 0);
	CU_ASSERT_EQUAL_FATAL(tb.len, sizeof(want));
	CU_ASSERT_EQUAL(memcmp(tb.data, want, sizeof(want)), 0);
	iscsi_textbuf_free(&tb);
	CU_ASSERT_PTR_NULL(tb.data);
	CU_ASSERT_EQUAL(tb.len, 0);
}

static void test_textbuf_addf_long_value(void)
{
	struct iscsi_textbuf tb = {0};
	char big[300];
	struct iscsi_kvlist l;

	memset(big, 'q', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	CU_ASSERT_EQUAL_FATAL(iscsi_textbuf_addf(&tb, "MaxBurstLength", "%u", 262144u), 0);
	CU_ASSERT_EQUAL_FATAL(iscsi_textbuf_addf(&tb, "X-big", "<%s>", big), 0);
	CU_ASSERT_EQUAL_FATAL(iscsi_kvlist_parse(&l, tb.data, tb.len), 0);
	CU_ASSERT_STRING_EQUAL(iscsi_kvlist_find(&l, "MaxBurstLength"), "262144");
	CU_ASSERT_EQUAL(strlen(iscsi_kvlist_find(&l, "X-big")), sizeof(big) + 1);
	iscsi_kvlist_free(&l);
	iscsi_textbuf_free(&tb);
}

static const struct hl_test tests[] = {
    {"parses pairs in order", test_parses_pairs_in_order},
    {"value keeps '=' after the first", test_value_keeps_later_equals},
    {"empty value is allowed", test_empty_value_allowed},
    {"empty segment gives no pairs", test_empty_segment},
    {"stray NULs are skipped", test_skips_empty_strings},
    {"rejects a last pair without NUL", test_rejects_missing_final_nul},
    {"rejects a pair without '='", test_rejects_missing_equals},
    {"rejects an empty key", test_rejects_empty_key},
    {"key of 63 bytes ok, 64 rejected", test_key_length_limit},
    {"key characters per RFC 7143 6.1", test_key_charset},
    {"value of 8192 bytes ok, 8193 rejected", test_value_length_limit},
    {"error leaves the list empty", test_error_leaves_list_empty},
    {"never reads past len", test_never_reads_past_len},
    {"list owns a copy of the data", test_owns_a_copy},
    {"1000 pairs round-trip", test_many_pairs},
    {"find returns the first exact match", test_find},
    {"find_duplicate reports the earliest repeat", test_find_duplicate},
    {"find_duplicate on 40000 pairs", test_find_duplicate_many},
    {"textbuf_add writes key=value NUL", test_textbuf_add},
    {"textbuf_addf formats long values", test_textbuf_addf_long_value},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("iscsi_text", tests);
}
