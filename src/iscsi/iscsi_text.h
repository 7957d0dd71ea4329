/*
 * iscsi_text.h - pure helpers of the iSCSI layer that know nothing about
 * connections: text key=value parsing and encoding, operational parameter
 * negotiation (RFC 7143 section 13), CHAP (RFC 1994 / RFC 7143 11.1.4 with
 * MD5, SHA1, SHA-256, SHA3-256 per RFC 7143 + RFC 9819 algorithm numbers
 * 5/6/7/8), and CRC32C for digests. Each is unit-tested and fuzzed alone.
 */
#ifndef HL_ISCSI_TEXT_H
#define HL_ISCSI_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------ */
/* CRC32C (Castagnoli), as iSCSI digests use it.                       */

/**
 * Continue a CRC32C over buf. Start with crc = 0; the function handles the
 * ~ pre/post conditioning, so iscsi_crc32c(0, b, n) is the digest of b, and
 * iscsi_crc32c(iscsi_crc32c(0, a, n), b, m) equals the digest of a||b.
 * Uses the SSE4.2 crc32 instruction when the CPU has it.
 */
uint32_t iscsi_crc32c(uint32_t crc, const void *buf, size_t len);

/*
 * Wire placement of a digest (RFC 3720 B.4, RFC 7143 11.1): the 32-bit
 * CRC value goes on the wire LEAST significant byte first, unlike every
 * other iSCSI field. E.g. the CRC of 32 zero bytes is 0x8a9136aa and is
 * sent as aa 36 91 8a. Use these two helpers, never hl_put_be32().
 */

/** Store crc into the 4 digest bytes at out (little-endian). */
void iscsi_crc32c_put(uint8_t out[4], uint32_t crc);

/** Read a received 4-byte digest for comparison with iscsi_crc32c(). */
uint32_t iscsi_crc32c_get(const uint8_t in[4]);

/* ------------------------------------------------------------------ */
/* Text keys.                                                          */

#define ISCSI_KEY_MAX   63    /* RFC 7143 6.1: key names up to 63 bytes */
#define ISCSI_VALUE_MAX 8192  /* values up to 255 bytes except a few (CHAP_C/R, 8192) */

struct iscsi_kv {
	char *key;    /* points into the list's own copy of the data */
	char *value;
};

/** Parsed key=value pairs of one text/login data segment (in order). */
struct iscsi_kvlist {
	struct iscsi_kv *kv;
	size_t n, cap;
	char *storage;        /* owned copy of the data */
};

/**
 * Parse a data segment of NUL-separated key=value pairs. Every pair,
 * including the last, must end with its NUL (RFC 7143 6.1); a text or
 * login request continued over several PDUs (C bit) is concatenated by the
 * caller first. Empty strings between NULs (e.g. padding left in) are
 * skipped. @return 0, -EINVAL for malformed input (no '=', empty or
 * oversized key, bad characters in key, oversized value, last pair not
 * NUL-terminated), -ENOMEM. On error *list is left empty. Caller keeps
 * data; list owns a copy until iscsi_kvlist_free(). *list need not be
 * initialised before the call.
 */
int iscsi_kvlist_parse(struct iscsi_kvlist *list, const void *data, size_t len);

/** Free what parse allocated and leave *list empty (safe to call twice). */
void iscsi_kvlist_free(struct iscsi_kvlist *list);

/**
 * Value of the first pair whose key is exactly `key` (case-sensitive, as
 * keys are), or NULL. Points into list; valid until iscsi_kvlist_free().
 * Duplicate keys are the caller's concern (RFC 7143 6.2: a renegotiation
 * attempt fails the login); iterate list->kv to detect them.
 */
const char *iscsi_kvlist_find(const struct iscsi_kvlist *list, const char *key);

/**
 * Look for a key given more than once in list (RFC 7143 6.2: a key is not
 * negotiated twice; the target fails such a login with an initiator
 * error). O(n log n), so a segment of many tiny pairs cannot make it
 * quadratic. @return 0 when all keys are distinct, -EEXIST with *dup set to
 * the repeated key whose second occurrence comes first (points into list),
 * -ENOMEM.
 */
int iscsi_kvlist_find_duplicate(const struct iscsi_kvlist *list, const char **dup);

/** Growing output buffer for key=value\0 pairs. */
struct iscsi_textbuf {
	uint8_t *data;
	size_t len, cap;
};

/**
 * Append "key=value\0"; tb may start zeroed and grows as needed (caller
 * frees with iscsi_textbuf_free). @return 0 or -ENOMEM.
 */
int iscsi_textbuf_add(struct iscsi_textbuf *tb, const char *key, const char *value);
/** As iscsi_textbuf_add with a printf-formatted value. @return 0, -ENOMEM, -EINVAL (bad format). */
int iscsi_textbuf_addf(struct iscsi_textbuf *tb, const char *key, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void iscsi_textbuf_free(struct iscsi_textbuf *tb);

/* ------------------------------------------------------------------ */
/* Operational parameter negotiation.                                  */

enum iscsi_session_type {
	ISCSI_SESSION_NORMAL = 0,
	ISCSI_SESSION_DISCOVERY = 1,
};

/** Negotiated values; start from iscsi_params_init() (RFC 7143 defaults). */
struct iscsi_params {
	/* per connection */
	bool header_digest;                 /* CRC32C */
	bool data_digest;
	uint32_t max_recv_dsl_initiator;    /* what we may send (initiator's declared MaxRecvDataSegmentLength) */
	uint32_t max_recv_dsl_target;       /* what we declared and accept */
	/* per session */
	uint32_t max_connections;
	bool initial_r2t;
	bool immediate_data;
	uint32_t max_burst_length;
	uint32_t first_burst_length;
	uint32_t default_time2wait;
	uint32_t default_time2retain;
	uint32_t max_outstanding_r2t;
	bool data_pdu_in_order;
	bool data_sequence_in_order;
	uint32_t error_recovery_level;
	bool ifmarker, ofmarker;            /* always negotiated to No */
};

/** The target's own limits and preferences (what it offers / accepts). */
struct iscsi_params_limits {
	uint32_t max_recv_dsl;      /* our MaxRecvDataSegmentLength to declare (default 256 KiB) */
	uint32_t max_burst_length;  /* most we accept (default 1 MiB) */
	uint32_t first_burst_length;/* default 256 KiB */
	uint32_t max_outstanding_r2t;
	uint32_t max_connections;   /* 1 at ERL 0 without MC/S support */
};

void iscsi_params_init(struct iscsi_params *p);
void iscsi_params_limits_default(struct iscsi_params_limits *l);

/**
 * Cross-key checks once a login's operational negotiation is done (call
 * before the transition to full feature phase): FirstBurstLength is
 * clamped to MaxBurstLength (RFC 7143 13.14), whatever order the keys
 * came in. @return 0.
 */
int iscsi_params_finish(struct iscsi_params *p);

/** What the negotiator decided for one key. */
enum iscsi_neg_result {
	ISCSI_NEG_ANSWER = 0,       /* respond key=answer */
	ISCSI_NEG_NO_ANSWER,        /* declarative key or already-answered; send nothing */
	ISCSI_NEG_NOT_HANDLED,      /* not an operational key (security keys, TargetName...): the caller handles it */
	ISCSI_NEG_PROTOCOL_ERROR,   /* fail the login with initiator error 0x0200 (e.g. bad value syntax for a non-rejectable key) */
};

/**
 * Negotiate one operational key offered by the initiator, updating p.
 * `answer` receives the value to send back (a value, "Irrelevant",
 * "Reject" or "NotUnderstood"), answer_len >= 256. Unknown keys get
 * NotUnderstood, except X-* / X# private keys which get NotUnderstood too
 * (tolerated, not an error) and IFMarker/OFMarker which get "No"
 * (IFMarkInt/OFMarkInt: "Reject"). Keys that only make sense in a normal
 * session get "Irrelevant" in a discovery session.
 */
enum iscsi_neg_result iscsi_negotiate_key(struct iscsi_params *p,
					  const struct iscsi_params_limits *lim,
					  enum iscsi_session_type type, const char *key,
					  const char *value, char *answer, size_t answer_len);

/* Bits of the sent_mask of iscsi_params_add_target_declarations(). */
#define ISCSI_DECL_MAX_RECV_DSL (1u << 0) /* MaxRecvDataSegmentLength=<lim->max_recv_dsl> sent */

/**
 * Keys the target must offer itself when the initiator did not (e.g. our
 * MaxRecvDataSegmentLength is declarative and always sent once). Appends
 * them to tb. `sent_mask` tracks what was already sent on this connection:
 * start each connection at 0 and keep it across the login's PDUs; a key
 * whose ISCSI_DECL_* bit is set is not sent again. Once
 * ISCSI_DECL_MAX_RECV_DSL is set the caller should set
 * p->max_recv_dsl_target = lim->max_recv_dsl (the initiator may send us
 * that much from then on). @return 0 or -ENOMEM (mask unchanged for what
 * was not appended).
 */
int iscsi_params_add_target_declarations(struct iscsi_textbuf *tb, const struct iscsi_params_limits *lim,
					 unsigned *sent_mask);

/* ------------------------------------------------------------------ */
/* CHAP.                                                               */

enum iscsi_chap_alg {
	ISCSI_CHAP_MD5 = 5,
	ISCSI_CHAP_SHA1 = 6,
	ISCSI_CHAP_SHA256 = 7,
	ISCSI_CHAP_SHA3_256 = 8,
};

#define ISCSI_CHAP_DIGEST_MAX 64
#define ISCSI_CHAP_BIN_MAX    1024  /* largest decoded challenge/response we accept */

/** Digest length for alg, 0 if unknown. */
size_t iscsi_chap_digest_len(enum iscsi_chap_alg alg);

/**
 * Pick the first algorithm in the initiator's CHAP_A list ("7,6,5") that we
 * support. @return the alg, or -1 when none (answer CHAP_A=Reject, fail login).
 */
int iscsi_chap_select_alg(const char *chap_a_list);

/**
 * response = H(id || secret || challenge), iscsi_chap_digest_len(alg) bytes
 * written to out. Caller keeps all buffers; synchronous. @return 0,
 * -EINVAL (unknown alg, NULL secret), -ENOMEM, -EIO (OpenSSL refused, e.g.
 * MD5 under a FIPS provider).
 */
int iscsi_chap_compute(enum iscsi_chap_alg alg, uint8_t id, const char *secret,
		       const uint8_t *challenge, size_t challenge_len, uint8_t *out);

/**
 * Decode a CHAP binary value: "0x..." hex (case-insensitive, even or odd
 * digit count) or "0b..." base64 (RFC 7143 6.1 binary-value). @return
 * decoded length, or -EINVAL (bad syntax / empty) / -E2BIG (> cap).
 */
int iscsi_chap_decode(const char *s, uint8_t *out, size_t cap);

/** Encode as "0x" + lowercase hex into out (NUL-terminated). @return 0 or -E2BIG. */
int iscsi_chap_encode_hex(const uint8_t *bin, size_t len, char *out, size_t out_len);

/** Fill buf with cryptographically random bytes (OpenSSL RAND_bytes). @return 0 or -EIO. */
int iscsi_random_bytes(void *buf, size_t len);

#endif
