/*
 * chap.c - the CHAP primitives of iSCSI authentication (RFC 1994, RFC 7143
 * 12.1.3): algorithm choice, response computation with OpenSSL's EVP
 * digests, and the binary-value encodings of CHAP_C / CHAP_R
 * (RFC 7143 6.1: "0x" hex or "0b" base64). The login state machine that
 * sequences CHAP_A/I/C/N/R lives with the connection code.
 */
#include "iscsi/iscsi_text.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/rand.h>

static const EVP_MD *chap_md(enum iscsi_chap_alg alg)
{
	switch (alg) {
	case ISCSI_CHAP_MD5:
		return EVP_md5();
	case ISCSI_CHAP_SHA1:
		return EVP_sha1();
	case ISCSI_CHAP_SHA256:
		return EVP_sha256();
	case ISCSI_CHAP_SHA3_256:
		return EVP_sha3_256();
	}
	return NULL;
}

size_t iscsi_chap_digest_len(enum iscsi_chap_alg alg)
{
	switch (alg) {
	case ISCSI_CHAP_MD5:
		return 16;
	case ISCSI_CHAP_SHA1:
		return 20;
	case ISCSI_CHAP_SHA256:
	case ISCSI_CHAP_SHA3_256:
		return 32;
	}
	return 0;
}

/*
 * CHAP_A=<list of algorithm numbers>, the initiator's preference first.
 * Elements that are not plain decimal numbers are skipped like unknown
 * algorithms (RFC 7143 6.2.1: the responder picks the first it supports).
 */
int iscsi_chap_select_alg(const char *chap_a_list)
{
	const char *p = chap_a_list;

	if (!p)
		return -1;
	for (;;) {
		unsigned long v = 0;
		size_t n = 0;

		while (p[n] >= '0' && p[n] <= '9') {
			if (v < 1000)
				v = v * 10 + (unsigned long)(p[n] - '0');
			n++;
		}
		if (n > 0 && (p[n] == ',' || p[n] == '\0') &&
		    iscsi_chap_digest_len((enum iscsi_chap_alg)v) != 0)
			return (int)v;
		p = strchr(p, ',');
		if (!p)
			return -1;
		p++;
	}
}

int iscsi_chap_compute(enum iscsi_chap_alg alg, uint8_t id, const char *secret,
                       const uint8_t *challenge, size_t challenge_len, uint8_t *out)
{
	const EVP_MD *md = chap_md(alg);
	EVP_MD_CTX *ctx;
	unsigned int out_len = 0;
	int ok;

	if (!md || !secret || (!challenge && challenge_len))
		return -EINVAL;
	ctx = EVP_MD_CTX_new();
	if (!ctx)
		return -ENOMEM;
	ok = EVP_DigestInit_ex(ctx, md, NULL) && EVP_DigestUpdate(ctx, &id, 1) &&
	     EVP_DigestUpdate(ctx, secret, strlen(secret)) &&
	     EVP_DigestUpdate(ctx, challenge, challenge_len) &&
	     EVP_DigestFinal_ex(ctx, out, &out_len);
	EVP_MD_CTX_free(ctx);
	/* A provider may refuse MD5 (FIPS mode): that is -EIO, not a crash. */
	if (!ok || out_len != iscsi_chap_digest_len(alg))
		return -EIO;
	return 0;
}

static int hex_val(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static int decode_hex(const char *s, size_t n, uint8_t *out, size_t cap)
{
	size_t bytes = n / 2 + n % 2, o = 0;

	if (bytes > cap)
		return -E2BIG;
	for (size_t i = 0; i < n; i++) {
		if (hex_val(s[i]) < 0)
			return -EINVAL;
	}
	/* An odd digit count has an implied leading zero: "0xabc" is 0a bc. */
	if (n % 2) {
		out[o++] = (uint8_t)hex_val(*s++);
		n--;
	}
	for (; n; n -= 2, s += 2)
		out[o++] = (uint8_t)(hex_val(s[0]) << 4 | hex_val(s[1]));
	return (int)o;
}

static bool b64_char_ok(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       c == '+' || c == '/';
}

/*
 * RFC 4648 base64 with padding, as RFC 7143 6.1 requires. EVP_DecodeBlock
 * decodes whole quanta and counts the '=' padding as zero bytes, so the
 * last quantum goes through a small buffer and only its real bytes are
 * copied: out never receives more than the decoded length.
 */
static int decode_base64(const char *s, size_t n, uint8_t *out, size_t cap)
{
	size_t pad = 0, len, head;
	uint8_t last[3];

	if (n == 0 || n % 4 != 0 || n > INT_MAX)
		return -EINVAL;
	if (s[n - 1] == '=')
		pad = s[n - 2] == '=' ? 2 : 1;
	for (size_t i = 0; i < n - pad; i++) {
		if (!b64_char_ok(s[i]))
			return -EINVAL;
	}
	len = n / 4 * 3 - pad;
	if (len > cap)
		return -E2BIG;
	head = n - 4;
	if (head &&
	    EVP_DecodeBlock(out, (const unsigned char *)s, (int)head) != (int)(head / 4 * 3))
		return -EINVAL;
	if (EVP_DecodeBlock(last, (const unsigned char *)s + head, 4) != 3)
		return -EINVAL;
	memcpy(out + head / 4 * 3, last, 3 - pad);
	return (int)len;
}

int iscsi_chap_decode(const char *s, uint8_t *out, size_t cap)
{
	size_t n;

	/* The return value is an int: never promise more than it can count. */
	if (cap > INT_MAX)
		cap = INT_MAX;
	if (!s || s[0] != '0' || s[1] == '\0')
		return -EINVAL;
	n = strlen(s + 2);
	switch (s[1]) {
	case 'x':
	case 'X':
		if (n == 0)
			return -EINVAL;
		return decode_hex(s + 2, n, out, cap);
	case 'b':
	case 'B':
		return decode_base64(s + 2, n, out, cap);
	default:
		return -EINVAL;
	}
}

int iscsi_chap_encode_hex(const uint8_t *bin, size_t len, char *out, size_t out_len)
{
	static const char digits[] = "0123456789abcdef";

	if (len > (SIZE_MAX - 3) / 2 || out_len < 2 * len + 3)
		return -E2BIG;
	*out++ = '0';
	*out++ = 'x';
	for (size_t i = 0; i < len; i++) {
		*out++ = digits[bin[i] >> 4];
		*out++ = digits[bin[i] & 0xf];
	}
	*out = '\0';
	return 0;
}

int iscsi_random_bytes(void *buf, size_t len)
{
	unsigned char *p = buf;

	while (len) {
		int chunk = len > INT_MAX ? INT_MAX : (int)len;

		if (RAND_bytes(p, chunk) != 1)
			return -EIO;
		p += chunk;
		len -= (size_t)chunk;
	}
	return 0;
}
