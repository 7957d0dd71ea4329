// fuzz-sources: src/iscsi/text.c src/iscsi/params.c src/iscsi/chap.c src/iscsi/crc32c.c
// fuzz-libs: -lcrypto -pthread
/*
 * fuzz_login_keys.c - libFuzzer harness for the login/text key path: any
 * bytes go through iscsi_kvlist_parse(), every pair through
 * iscsi_negotiate_key() (normal or discovery session, chosen by the first
 * byte) and every value through the CHAP decoders. Besides crashes and
 * UB, it aborts when an invariant the login code relies on breaks:
 * answers are short C strings, negotiated values stay in their RFC 7143
 * ranges, parse/build round-trips, decoded lengths respect the buffer.
 */
#include "iscsi/iscsi_text.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond))                                                                       \
			abort();                                                                   \
	} while (0)

static void check_params(const struct iscsi_params *p, const struct iscsi_params_limits *lim)
{
	CHECK(p->max_recv_dsl_initiator >= 512 && p->max_recv_dsl_initiator <= 16777215);
	CHECK(p->max_burst_length >= 512 && p->max_burst_length <= 16777215);
	CHECK(p->max_burst_length <= 262144 || p->max_burst_length <= lim->max_burst_length);
	CHECK(p->first_burst_length >= 512 && p->first_burst_length <= p->max_burst_length);
	CHECK(p->max_connections >= 1 && p->max_connections <= lim->max_connections);
	CHECK(p->max_outstanding_r2t >= 1 && p->max_outstanding_r2t <= 65535);
	CHECK(p->default_time2wait <= 3600 && p->default_time2retain <= 3600);
	CHECK(p->error_recovery_level == 0);
	CHECK(!p->ifmarker && !p->ofmarker);
	CHECK(p->data_pdu_in_order && p->data_sequence_in_order);
}

static void fuzz_chap_value(const char *key, const char *value)
{
	uint8_t bin[ISCSI_CHAP_BIN_MAX], again[ISCSI_CHAP_BIN_MAX];
	char hex[2 * ISCSI_CHAP_BIN_MAX + 3];
	int n = iscsi_chap_decode(value, bin, sizeof(bin));

	CHECK((n >= 0 && n <= (int)sizeof(bin)) || n == -EINVAL || n == -E2BIG);
	if (n > 0) {
		/* What we decode, we re-encode and decode to the same bytes. */
		CHECK(iscsi_chap_encode_hex(bin, (size_t)n, hex, sizeof(hex)) == 0);
		CHECK(iscsi_chap_decode(hex, again, sizeof(again)) == n);
		CHECK(memcmp(bin, again, (size_t)n) == 0);
		/* A small buffer is refused whole, never overrun (ASan watches). */
		uint8_t *tight = malloc((size_t)n);
		if (tight) {
			CHECK(iscsi_chap_decode(value, tight, (size_t)n - 1) == -E2BIG);
			free(tight);
		}
	}
	if (strcmp(key, "CHAP_A") == 0) {
		int alg = iscsi_chap_select_alg(value);

		CHECK(alg == -1 || iscsi_chap_digest_len((enum iscsi_chap_alg)alg) != 0);
		if (alg > 0 && n > 0) {
			uint8_t out[ISCSI_CHAP_DIGEST_MAX];

			CHECK(iscsi_chap_compute((enum iscsi_chap_alg)alg, bin[0], value, bin,
			                         (size_t)n, out) == 0);
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct iscsi_kvlist list, again;
	struct iscsi_textbuf tb = {0};
	struct iscsi_params p;
	struct iscsi_params_limits lim;
	enum iscsi_session_type type;
	uint8_t mode;

	if (size < 1)
		return 0;
	mode = data[0];
	data++;
	size--;
	type = (mode & 1) ? ISCSI_SESSION_DISCOVERY : ISCSI_SESSION_NORMAL;

	iscsi_params_init(&p);
	iscsi_params_limits_default(&lim);
	if (mode & 2) {
		/* Odd limits too: tiny and huge, to exercise the clamps. */
		lim.max_burst_length = (mode & 4) ? 512 : 0xffffffffu;
		lim.first_burst_length = (mode & 8) ? 0 : 0xffffffffu;
		lim.max_outstanding_r2t = (mode & 16) ? 0 : 100000;
		lim.max_connections = (mode & 32) ? 0 : 8;
		lim.max_recv_dsl = (mode & 64) ? 1 : 0xffffffffu;
	}
	if (lim.max_connections == 0)
		lim.max_connections = 1; /* documented as at least 1 */

	/* The digest of the segment: chaining at an arbitrary cut agrees. */
	size_t cut = size ? mode % (size + 1) : 0;
	CHECK(iscsi_crc32c(iscsi_crc32c(0, data, cut), data + cut, size - cut) ==
	      iscsi_crc32c(0, data, size));

	if (iscsi_kvlist_parse(&list, data, size) != 0) {
		CHECK(list.n == 0 && list.kv == NULL && list.storage == NULL);
		return 0;
	}

	/* The O(n log n) duplicate finder agrees with the obvious O(n^2) one. */
	const char *dup = NULL;
	int drc = iscsi_kvlist_find_duplicate(&list, &dup);
	size_t brute = SIZE_MAX;
	for (size_t j = 1; j < list.n && brute == SIZE_MAX; j++) {
		for (size_t i = 0; i < j; i++) {
			if (strcmp(list.kv[i].key, list.kv[j].key) == 0) {
				brute = j;
				break;
			}
		}
	}
	if (drc != -ENOMEM) {
		CHECK(brute == SIZE_MAX ? (drc == 0 && !dup)
		                        : (drc == -EEXIST && dup == list.kv[brute].key));
	}

	for (size_t i = 0; i < list.n; i++) {
		const char *key = list.kv[i].key, *value = list.kv[i].value;
		char answer[256];
		enum iscsi_neg_result r;

		CHECK(strlen(key) >= 1 && strlen(key) <= ISCSI_KEY_MAX);
		CHECK(strlen(value) <= ISCSI_VALUE_MAX);
		CHECK(iscsi_kvlist_find(&list, key) != NULL);

		memset(answer, 0x5a, sizeof(answer));
		r = iscsi_negotiate_key(&p, &lim, type, key, value, answer, sizeof(answer));
		CHECK(r >= ISCSI_NEG_ANSWER && r <= ISCSI_NEG_PROTOCOL_ERROR);
		if (r == ISCSI_NEG_ANSWER) {
			size_t alen = strnlen(answer, sizeof(answer));

			CHECK(alen > 0 && alen < sizeof(answer));
			CHECK(iscsi_textbuf_add(&tb, key, answer) == 0);
		}
		fuzz_chap_value(key, value);
	}
	CHECK(iscsi_params_finish(&p) == 0);
	check_params(&p, &lim);

	/* Our answers must themselves parse. */
	unsigned mask = 0;
	CHECK(iscsi_params_add_target_declarations(&tb, &lim, &mask) == 0);
	CHECK(iscsi_kvlist_parse(&again, tb.data, tb.len) == 0);
	CHECK(iscsi_kvlist_find(&again, "MaxRecvDataSegmentLength") != NULL);
	iscsi_kvlist_free(&again);
	iscsi_textbuf_free(&tb);

	/* Rebuilding the received pairs gives back the same list. */
	for (size_t i = 0; i < list.n; i++)
		CHECK(iscsi_textbuf_add(&tb, list.kv[i].key, list.kv[i].value) == 0);
	CHECK(iscsi_kvlist_parse(&again, tb.data, tb.len) == 0);
	CHECK(again.n == list.n);
	for (size_t i = 0; i < list.n; i++) {
		CHECK(strcmp(again.kv[i].key, list.kv[i].key) == 0);
		CHECK(strcmp(again.kv[i].value, list.kv[i].value) == 0);
	}
	iscsi_kvlist_free(&again);
	iscsi_textbuf_free(&tb);
	iscsi_kvlist_free(&list);
	return 0;
}
