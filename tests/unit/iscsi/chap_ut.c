/*
 * chap_ut.c - CHAP primitives: algorithm selection, responses for each
 * digest (expected values computed with `openssl dgst` over the same
 * id || secret || challenge bytes), and the hex / base64 binary values.
 */
#include "iscsi/iscsi_text.h"

#include "hl_test.h"

#include <errno.h>
#include <string.h>

/* id 0x2a, secret "hotlun-secret-12", challenge 00 11 22 .. ff. */
static const char secret[] = "hotlun-secret-12";

static void challenge16(uint8_t c[16])
{
	for (int i = 0; i < 16; i++)
		c[i] = (uint8_t)(i * 0x11);
}

/*
 * Expected values, from:
 *   printf '\x2ahotlun-secret-12\x00\x11\x22\x33\x44\x55\x66\x77\x88\x99\xaa\xbb\xcc\xdd\xee\xff' |
 *       openssl dgst -md5   (and -sha1, -sha256, -sha3-256)
 */
static void check_response(enum iscsi_chap_alg alg, const char *want_hex)
{
	uint8_t ch[16], out[ISCSI_CHAP_DIGEST_MAX];
	char hex[2 * ISCSI_CHAP_DIGEST_MAX + 3];
	size_t len = iscsi_chap_digest_len(alg);

	challenge16(ch);
	memset(out, 0xee, sizeof(out));
	CU_ASSERT_EQUAL_FATAL(iscsi_chap_compute(alg, 0x2a, secret, ch, sizeof(ch), out), 0);
	CU_ASSERT_EQUAL_FATAL(iscsi_chap_encode_hex(out, len, hex, sizeof(hex)), 0);
	CU_ASSERT_STRING_EQUAL(hex + 2, want_hex);
	CU_ASSERT_EQUAL(out[len], 0xee); /* nothing written past the digest */
}

static void test_md5_response(void)
{
	check_response(ISCSI_CHAP_MD5, "9e599eda29e4dd718ebddf057beddf71");
}

static void test_sha1_response(void)
{
	check_response(ISCSI_CHAP_SHA1, "b295099aac2f26a3d3e187de03b6b203dd80700c");
}

static void test_sha256_response(void)
{
	check_response(ISCSI_CHAP_SHA256,
	               "ff631a0060c1d1eca99ca77a40b25179fd372f215a5069583893426067d72507");
}

static void test_sha3_256_response(void)
{
	check_response(ISCSI_CHAP_SHA3_256,
	               "bc261c4f1aff1e0094b70e16fd80181a689fa88ac17b3d5b7cdaf48c378e72f6");
}

/* The id byte alone (empty secret and challenge): `printf '\x00' | openssl dgst -sha256`. */
static void test_response_hashes_id_first(void)
{
	uint8_t out[ISCSI_CHAP_DIGEST_MAX], hex_in[32];
	static const char want[] =
	    "0x6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d";

	CU_ASSERT_EQUAL_FATAL(iscsi_chap_compute(ISCSI_CHAP_SHA256, 0, "", NULL, 0, out), 0);
	CU_ASSERT_EQUAL_FATAL(iscsi_chap_decode(want, hex_in, sizeof(hex_in)), 32);
	CU_ASSERT_EQUAL(memcmp(out, hex_in, 32), 0);
}

static void test_response_depends_on_each_input(void)
{
	uint8_t ch[16], a[32], b[32];

	challenge16(ch);
	CU_ASSERT_EQUAL_FATAL(iscsi_chap_compute(ISCSI_CHAP_SHA256, 1, secret, ch, 16, a), 0);
	CU_ASSERT_EQUAL_FATAL(iscsi_chap_compute(ISCSI_CHAP_SHA256, 2, secret, ch, 16, b), 0);
	CU_ASSERT_NOT_EQUAL(memcmp(a, b, 32), 0);
	CU_ASSERT_EQUAL_FATAL(iscsi_chap_compute(ISCSI_CHAP_SHA256, 1, "other-secret", ch, 16, b),
	                      0);
	CU_ASSERT_NOT_EQUAL(memcmp(a, b, 32), 0);
	ch[15] ^= 1;
	CU_ASSERT_EQUAL_FATAL(iscsi_chap_compute(ISCSI_CHAP_SHA256, 1, secret, ch, 16, b), 0);
	CU_ASSERT_NOT_EQUAL(memcmp(a, b, 32), 0);
}

static void test_compute_rejects_bad_args(void)
{
	uint8_t ch[4] = {0}, out[ISCSI_CHAP_DIGEST_MAX];

	CU_ASSERT_EQUAL(iscsi_chap_compute((enum iscsi_chap_alg)4, 1, secret, ch, 4, out), -EINVAL);
	CU_ASSERT_EQUAL(iscsi_chap_compute(ISCSI_CHAP_MD5, 1, NULL, ch, 4, out), -EINVAL);
	CU_ASSERT_EQUAL(iscsi_chap_compute(ISCSI_CHAP_MD5, 1, secret, NULL, 4, out), -EINVAL);
}

static void test_digest_len(void)
{
	CU_ASSERT_EQUAL(iscsi_chap_digest_len(ISCSI_CHAP_MD5), 16);
	CU_ASSERT_EQUAL(iscsi_chap_digest_len(ISCSI_CHAP_SHA1), 20);
	CU_ASSERT_EQUAL(iscsi_chap_digest_len(ISCSI_CHAP_SHA256), 32);
	CU_ASSERT_EQUAL(iscsi_chap_digest_len(ISCSI_CHAP_SHA3_256), 32);
	CU_ASSERT_EQUAL(iscsi_chap_digest_len((enum iscsi_chap_alg)0), 0);
	CU_ASSERT_EQUAL(iscsi_chap_digest_len((enum iscsi_chap_alg)9), 0);
}

static void test_select_alg_initiator_order(void)
{
	CU_ASSERT_EQUAL(iscsi_chap_select_alg("7,6,5"), ISCSI_CHAP_SHA256);
	CU_ASSERT_EQUAL(iscsi_chap_select_alg("5,7"), ISCSI_CHAP_MD5);
	CU_ASSERT_EQUAL(iscsi_chap_select_alg("8"), ISCSI_CHAP_SHA3_256);
	CU_ASSERT_EQUAL(iscsi_chap_select_alg("6"), ISCSI_CHAP_SHA1);
}

static void test_select_alg_skips_unknown(void)
{
	CU_ASSERT_EQUAL(iscsi_chap_select_alg("9,128,6"), ISCSI_CHAP_SHA1);
	CU_ASSERT_EQUAL(iscsi_chap_select_alg("junk,,5x, 5,99999999999999999999997,7"),
	                ISCSI_CHAP_SHA256);
}

static void test_select_alg_none(void)
{
	/* 2^64 + 7 must not wrap around to 7. */
	CU_ASSERT_EQUAL(iscsi_chap_select_alg("18446744073709551623"), -1);
	CU_ASSERT_EQUAL(iscsi_chap_select_alg("1,2,3"), -1);
	CU_ASSERT_EQUAL(iscsi_chap_select_alg(""), -1);
	CU_ASSERT_EQUAL(iscsi_chap_select_alg(","), -1);
	CU_ASSERT_EQUAL(iscsi_chap_select_alg("-5"), -1);
	CU_ASSERT_EQUAL(iscsi_chap_select_alg(NULL), -1);
}

static void test_decode_hex(void)
{
	uint8_t out[8];
	const uint8_t want[4] = {0xde, 0xad, 0xbe, 0xef};

	CU_ASSERT_EQUAL_FATAL(iscsi_chap_decode("0xdeadbeef", out, sizeof(out)), 4);
	CU_ASSERT_EQUAL(memcmp(out, want, 4), 0);
	CU_ASSERT_EQUAL_FATAL(iscsi_chap_decode("0XDeAdBEEF", out, sizeof(out)), 4);
	CU_ASSERT_EQUAL(memcmp(out, want, 4), 0);
}

static void test_decode_hex_odd_digits(void)
{
	uint8_t out[4];

	CU_ASSERT_EQUAL_FATAL(iscsi_chap_decode("0xabc", out, sizeof(out)), 2);
	CU_ASSERT_EQUAL(out[0], 0x0a);
	CU_ASSERT_EQUAL(out[1], 0xbc);
	CU_ASSERT_EQUAL_FATAL(iscsi_chap_decode("0x7", out, sizeof(out)), 1);
	CU_ASSERT_EQUAL(out[0], 0x07);
}

static void test_decode_hex_bad(void)
{
	uint8_t out[8];

	CU_ASSERT_EQUAL(iscsi_chap_decode("0x", out, sizeof(out)), -EINVAL);
	CU_ASSERT_EQUAL(iscsi_chap_decode("0x12g4", out, sizeof(out)), -EINVAL);
	CU_ASSERT_EQUAL(iscsi_chap_decode("0x12 34", out, sizeof(out)), -EINVAL);
	CU_ASSERT_EQUAL(iscsi_chap_decode("0x0x12", out, sizeof(out)), -EINVAL);
}

static void test_decode_hex_capacity(void)
{
	uint8_t out[4] = {0};

	CU_ASSERT_EQUAL(iscsi_chap_decode("0x01020304", out, 4), 4);
	CU_ASSERT_EQUAL(iscsi_chap_decode("0x0102030405", out, 4), -E2BIG);
	CU_ASSERT_EQUAL(iscsi_chap_decode("0x102030405", out, 4), -E2BIG); /* odd: 5 bytes */
}

static void test_decode_base64(void)
{
	uint8_t out[8];

	CU_ASSERT_EQUAL_FATAL(iscsi_chap_decode("0bAQID", out, sizeof(out)), 3);
	CU_ASSERT(out[0] == 1 && out[1] == 2 && out[2] == 3);
	CU_ASSERT_EQUAL_FATAL(iscsi_chap_decode("0BAQIDBA==", out, sizeof(out)), 4);
	CU_ASSERT(out[0] == 1 && out[3] == 4);
	CU_ASSERT_EQUAL_FATAL(iscsi_chap_decode("0b/+8=", out, sizeof(out)), 2);
	CU_ASSERT(out[0] == 0xff && out[1] == 0xef);
}

/* Padding is not data: "AQ==" is one byte, and nothing is written after it. */
static void test_decode_base64_padding_not_written(void)
{
	uint8_t buf[4];

	memset(buf, 0xcc, sizeof(buf));
	CU_ASSERT_EQUAL_FATAL(iscsi_chap_decode("0bAQ==", buf, 1), 1);
	CU_ASSERT_EQUAL(buf[0], 1);
	CU_ASSERT_EQUAL(buf[1], 0xcc);

	memset(buf, 0xcc, sizeof(buf));
	CU_ASSERT_EQUAL_FATAL(iscsi_chap_decode("0bAQIDBAU=", buf, 4), -E2BIG); /* 5 bytes */
	CU_ASSERT_EQUAL(buf[0], 0xcc);
	CU_ASSERT_EQUAL_FATAL(iscsi_chap_decode("0bAQIDBA==", buf, 4), 4);
	CU_ASSERT(buf[0] == 1 && buf[1] == 2 && buf[2] == 3 && buf[3] == 4);
}

static void test_decode_base64_bad(void)
{
	static const char *const bad[] = {
	    "0b",     "0bAQI",  "0bA===", "0b====",   "0bA=QI",
	    "0bAQ=I", "0bAQ*D", "0bAQ D", "0bAQID\n", "0b=AQI",
	};
	uint8_t out[16];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CU_ASSERT_EQUAL(iscsi_chap_decode(bad[i], out, sizeof(out)), -EINVAL);
}

static void test_decode_needs_prefix(void)
{
	uint8_t out[8];

	CU_ASSERT_EQUAL(iscsi_chap_decode("", out, sizeof(out)), -EINVAL);
	CU_ASSERT_EQUAL(iscsi_chap_decode("0", out, sizeof(out)), -EINVAL);
	CU_ASSERT_EQUAL(iscsi_chap_decode("1234", out, sizeof(out)), -EINVAL);
	CU_ASSERT_EQUAL(iscsi_chap_decode("0z12", out, sizeof(out)), -EINVAL);
	CU_ASSERT_EQUAL(iscsi_chap_decode("x1234", out, sizeof(out)), -EINVAL);
	CU_ASSERT_EQUAL(iscsi_chap_decode(NULL, out, sizeof(out)), -EINVAL);
}

static void test_encode_hex(void)
{
	const uint8_t bin[3] = {0x00, 0xab, 0xff};
	char out[9];

	CU_ASSERT_EQUAL_FATAL(iscsi_chap_encode_hex(bin, 3, out, sizeof(out)), 0);
	CU_ASSERT_STRING_EQUAL(out, "0x00abff");
	CU_ASSERT_EQUAL(iscsi_chap_encode_hex(bin, 3, out, sizeof(out) - 1), -E2BIG);
	CU_ASSERT_EQUAL_FATAL(iscsi_chap_encode_hex(bin, 0, out, 3), 0);
	CU_ASSERT_STRING_EQUAL(out, "0x");
}

static void test_hex_round_trip(void)
{
	uint8_t bin[ISCSI_CHAP_BIN_MAX], back[ISCSI_CHAP_BIN_MAX];
	char hex[2 * ISCSI_CHAP_BIN_MAX + 3];

	for (size_t i = 0; i < sizeof(bin); i++)
		bin[i] = (uint8_t)(i * 7 + 3);
	CU_ASSERT_EQUAL_FATAL(iscsi_chap_encode_hex(bin, sizeof(bin), hex, sizeof(hex)), 0);
	CU_ASSERT_EQUAL_FATAL(iscsi_chap_decode(hex, back, sizeof(back)), (int)sizeof(bin));
	CU_ASSERT_EQUAL(memcmp(bin, back, sizeof(bin)), 0);
}

static void test_random_bytes(void)
{
	uint8_t a[32], b[32];

	memset(a, 0, sizeof(a));
	memset(b, 0, sizeof(b));
	CU_ASSERT_EQUAL_FATAL(iscsi_random_bytes(a, sizeof(a)), 0);
	CU_ASSERT_EQUAL_FATAL(iscsi_random_bytes(b, sizeof(b)), 0);
	CU_ASSERT_NOT_EQUAL(memcmp(a, b, sizeof(a)), 0); /* 2^-256 chance of a false failure */
	CU_ASSERT_EQUAL(iscsi_random_bytes(a, 0), 0);
}

static const struct hl_test tests[] = {
    {"MD5 response matches openssl dgst", test_md5_response},
    {"SHA1 response matches openssl dgst", test_sha1_response},
    {"SHA-256 response matches openssl dgst", test_sha256_response},
    {"SHA3-256 response matches openssl dgst", test_sha3_256_response},
    {"response hashes the id byte first", test_response_hashes_id_first},
    {"response depends on id, secret and challenge", test_response_depends_on_each_input},
    {"compute rejects bad arguments", test_compute_rejects_bad_args},
    {"digest lengths", test_digest_len},
    {"CHAP_A: first supported in the initiator's order", test_select_alg_initiator_order},
    {"CHAP_A: unknown and malformed entries skipped", test_select_alg_skips_unknown},
    {"CHAP_A: none supported -> -1", test_select_alg_none},
    {"decode hex, either case", test_decode_hex},
    {"decode hex with odd digit count", test_decode_hex_odd_digits},
    {"decode hex rejects bad digits", test_decode_hex_bad},
    {"decode hex respects capacity", test_decode_hex_capacity},
    {"decode base64", test_decode_base64},
    {"decode base64: padding is not data", test_decode_base64_padding_not_written},
    {"decode base64 rejects bad syntax", test_decode_base64_bad},
    {"decode needs a 0x or 0b prefix", test_decode_needs_prefix},
    {"encode hex", test_encode_hex},
    {"hex round trip at ISCSI_CHAP_BIN_MAX", test_hex_round_trip},
    {"random bytes", test_random_bytes},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("iscsi_chap", tests);
}
