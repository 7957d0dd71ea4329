/*
 * params.c - operational parameter negotiation (RFC 7143 sections 6.2 and
 * 13, RFC 7144 2.1): the RFC defaults, the target's limits, and the
 * answer to each key an initiator offers during login.
 *
 * The target is always the responder here: it never proposes a negotiable
 * key, it only declares its own MaxRecvDataSegmentLength. Each known key
 * is one row of key_table[]; the row says how the key is negotiated and
 * where the result is kept, so adding a key is adding a row.
 */
#include "iscsi/iscsi_text.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define DSL_MIN 512u
#define DSL_MAX 16777215u /* 2^24 - 1 */

/* RFC 7143 6.1: simple values are at most 255 bytes unless a key says otherwise. */
#define SIMPLE_VALUE_MAX 255

/* Our side of keys that struct iscsi_params_limits does not carry. */
#define OUR_INITIAL_R2T         true /* we want an R2T before any unsolicited Data-Out */
#define OUR_IMMEDIATE_DATA      true
#define OUR_DATA_PDU_IN_ORDER   true
#define OUR_DATA_SEQ_IN_ORDER   true
#define OUR_DEFAULT_TIME2WAIT   2
#define OUR_DEFAULT_TIME2RETAIN 20
#define OUR_ERROR_RECOVERY      0 /* session recovery only */
#define OUR_PROTOCOL_LEVEL      1 /* RFC 7144 2.1: 1 = RFC 7143 */

enum key_kind {
	KIND_NOT_HANDLED, /* login/discovery/security key: the caller's business */
	KIND_DIGEST,      /* list: CRC32C, None */
	KIND_BOOL_OR,
	KIND_BOOL_AND,
	KIND_NUM_MIN,
	KIND_NUM_MAX,
	KIND_DECLARE_DSL, /* the initiator's MaxRecvDataSegmentLength */
	KIND_MARKER,      /* IFMarker/OFMarker: obsolete, always "No" */
	KIND_MARKINT,     /* IFMarkInt/OFMarkInt: obsolete, always "Reject" */
	KIND_TASK_REPORTING,
};

/* Where a key's result lives; also how to find our own preference. */
enum key_id {
	ID_NONE,
	ID_HEADER_DIGEST,
	ID_DATA_DIGEST,
	ID_MAX_CONNECTIONS,
	ID_INITIAL_R2T,
	ID_IMMEDIATE_DATA,
	ID_MAX_RECV_DSL,
	ID_MAX_BURST,
	ID_FIRST_BURST,
	ID_TIME2WAIT,
	ID_TIME2RETAIN,
	ID_MAX_R2T,
	ID_PDU_IN_ORDER,
	ID_SEQ_IN_ORDER,
	ID_ERL,
	ID_IFMARKER,
	ID_OFMARKER,
	ID_PROTOCOL_LEVEL,
	ID_RDMA_EXTENSIONS,
};

struct key_desc {
	const char *name;
	enum key_kind kind;
	enum key_id id;
	uint32_t min, max;         /* numerical keys: admissible range */
	bool discovery_irrelevant; /* RFC 7143 13: "Irrelevant when: SessionType=Discovery" */
};

/*
 * One row per key; `disc` is true when RFC 7143 marks the key "Irrelevant
 * when: SessionType=Discovery". (clang-format cannot lay out a table.)
 */
/* clang-format off */
#define KEY(n, k, i, disc) \
	{ .name = (n), .kind = (k), .id = (i), .discovery_irrelevant = (disc) }
#define NUM_KEY(n, k, i, lo, hi, disc) \
	{ .name = (n), .kind = (k), .id = (i), .min = (lo), .max = (hi), \
	  .discovery_irrelevant = (disc) }
#define LOGIN_KEY(n) { .name = (n), .kind = KIND_NOT_HANDLED, .id = ID_NONE }

static const struct key_desc key_table[] = {
	KEY("HeaderDigest", KIND_DIGEST, ID_HEADER_DIGEST, false),
	KEY("DataDigest", KIND_DIGEST, ID_DATA_DIGEST, false),
	NUM_KEY("MaxConnections", KIND_NUM_MIN, ID_MAX_CONNECTIONS, 1, 65535, true),
	KEY("InitialR2T", KIND_BOOL_OR, ID_INITIAL_R2T, true),
	KEY("ImmediateData", KIND_BOOL_AND, ID_IMMEDIATE_DATA, true),
	NUM_KEY("MaxRecvDataSegmentLength", KIND_DECLARE_DSL, ID_MAX_RECV_DSL,
		DSL_MIN, DSL_MAX, false),
	NUM_KEY("MaxBurstLength", KIND_NUM_MIN, ID_MAX_BURST, DSL_MIN, DSL_MAX, true),
	NUM_KEY("FirstBurstLength", KIND_NUM_MIN, ID_FIRST_BURST, DSL_MIN, DSL_MAX, true),
	NUM_KEY("DefaultTime2Wait", KIND_NUM_MAX, ID_TIME2WAIT, 0, 3600, false),
	NUM_KEY("DefaultTime2Retain", KIND_NUM_MIN, ID_TIME2RETAIN, 0, 3600, false),
	NUM_KEY("MaxOutstandingR2T", KIND_NUM_MIN, ID_MAX_R2T, 1, 65535, true),
	KEY("DataPDUInOrder", KIND_BOOL_OR, ID_PDU_IN_ORDER, true),
	KEY("DataSequenceInOrder", KIND_BOOL_OR, ID_SEQ_IN_ORDER, true),
	NUM_KEY("ErrorRecoveryLevel", KIND_NUM_MIN, ID_ERL, 0, 2, false),
	KEY("IFMarker", KIND_MARKER, ID_IFMARKER, false),
	KEY("OFMarker", KIND_MARKER, ID_OFMARKER, false),
	KEY("IFMarkInt", KIND_MARKINT, ID_NONE, false),
	KEY("OFMarkInt", KIND_MARKINT, ID_NONE, false),
	KEY("TaskReporting", KIND_TASK_REPORTING, ID_NONE, true),
	NUM_KEY("iSCSIProtocolLevel", KIND_NUM_MIN, ID_PROTOCOL_LEVEL, 0, 31, true),
	/* RFC 7145 (iSER): we are a TCP target, so the AND result is always No. */
	KEY("RDMAExtensions", KIND_BOOL_AND, ID_RDMA_EXTENSIONS, false),
	/* Keys the login state machine owns. */
	LOGIN_KEY("SendTargets"),
	LOGIN_KEY("TargetName"),
	LOGIN_KEY("InitiatorName"),
	LOGIN_KEY("TargetAlias"),
	LOGIN_KEY("InitiatorAlias"),
	LOGIN_KEY("TargetAddress"),
	LOGIN_KEY("TargetPortalGroupTag"),
	LOGIN_KEY("SessionType"),
	LOGIN_KEY("AuthMethod"),
	LOGIN_KEY("CHAP_A"),
	LOGIN_KEY("CHAP_I"),
	LOGIN_KEY("CHAP_C"),
	LOGIN_KEY("CHAP_N"),
	LOGIN_KEY("CHAP_R"),
};
/* clang-format on */

void iscsi_params_init(struct iscsi_params *p)
{
	/* RFC 7143 section 13 defaults: what holds when a key is never negotiated. */
	*p = (struct iscsi_params){
	    .header_digest = false,
	    .data_digest = false,
	    .max_recv_dsl_initiator = 8192,
	    .max_recv_dsl_target = 8192,
	    .max_connections = 1,
	    .initial_r2t = true,
	    .immediate_data = true,
	    .max_burst_length = 262144,
	    .first_burst_length = 65536,
	    .default_time2wait = 2,
	    .default_time2retain = 20,
	    .max_outstanding_r2t = 1,
	    .data_pdu_in_order = true,
	    .data_sequence_in_order = true,
	    .error_recovery_level = 0,
	    .ifmarker = false,
	    .ofmarker = false,
	};
}

void iscsi_params_limits_default(struct iscsi_params_limits *l)
{
	*l = (struct iscsi_params_limits){
	    .max_recv_dsl = 256 * 1024,
	    .max_burst_length = 1024 * 1024,
	    .first_burst_length = 256 * 1024,
	    /*
	     * The target issues the R2Ts, so this only bounds how many it
	     * may have outstanding per task; issuing fewer is always legal.
	     */
	    .max_outstanding_r2t = 16,
	    .max_connections = 1,
	};
}

int iscsi_params_finish(struct iscsi_params *p)
{
	if (p->first_burst_length > p->max_burst_length)
		p->first_burst_length = p->max_burst_length;
	return 0;
}

static const struct key_desc *find_key(const char *key)
{
	for (size_t i = 0; i < sizeof(key_table) / sizeof(key_table[0]); i++) {
		if (strcmp(key_table[i].name, key) == 0)
			return &key_table[i];
	}
	return NULL;
}

static uint32_t clamp_u32(uint32_t v, uint32_t lo, uint32_t hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

static uint32_t min_u32(uint32_t a, uint32_t b)
{
	return a < b ? a : b;
}

/*
 * RFC 7143 6.1 numerical-value: a decimal-constant or a "0x" hex-constant,
 * below 2^64. Leading zeros in a decimal are tolerated (read as decimal,
 * never octal). @return 0 or -EINVAL (syntax, overflow).
 */
static int parse_number(const char *s, uint64_t *out)
{
	uint64_t v = 0;
	unsigned base = 10;

	if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
		base = 16;
		s += 2;
	}
	if (*s == '\0')
		return -EINVAL;
	for (; *s; s++) {
		unsigned d;

		if (*s >= '0' && *s <= '9')
			d = (unsigned)(*s - '0');
		else if (base == 16 && *s >= 'a' && *s <= 'f')
			d = (unsigned)(*s - 'a' + 10);
		else if (base == 16 && *s >= 'A' && *s <= 'F')
			d = (unsigned)(*s - 'A' + 10);
		else
			return -EINVAL;
		if (v > (UINT64_MAX - d) / base)
			return -EINVAL;
		v = v * base + d;
	}
	*out = v;
	return 0;
}

static int parse_bool(const char *s, bool *out)
{
	if (strcmp(s, "Yes") == 0)
		*out = true;
	else if (strcmp(s, "No") == 0)
		*out = false;
	else
		return -EINVAL;
	return 0;
}

/* The first element of `list` that is one of ours[], or NULL. */
static const char *list_pick(const char *list, const char *const *ours, size_t n_ours)
{
	const char *p = list;

	for (;;) {
		const char *comma = strchr(p, ',');
		size_t n = comma ? (size_t)(comma - p) : strlen(p);

		for (size_t i = 0; i < n_ours; i++) {
			if (strlen(ours[i]) == n && memcmp(p, ours[i], n) == 0)
				return ours[i];
		}
		if (!comma)
			return NULL;
		p = comma + 1;
	}
}

static bool our_bool(enum key_id id)
{
	switch (id) {
	case ID_INITIAL_R2T:
		return OUR_INITIAL_R2T;
	case ID_IMMEDIATE_DATA:
		return OUR_IMMEDIATE_DATA;
	case ID_PDU_IN_ORDER:
		return OUR_DATA_PDU_IN_ORDER;
	case ID_SEQ_IN_ORDER:
		return OUR_DATA_SEQ_IN_ORDER;
	default:
		return false; /* RDMAExtensions */
	}
}

static void store_bool(struct iscsi_params *p, enum key_id id, bool v)
{
	switch (id) {
	case ID_HEADER_DIGEST:
		p->header_digest = v;
		break;
	case ID_DATA_DIGEST:
		p->data_digest = v;
		break;
	case ID_INITIAL_R2T:
		p->initial_r2t = v;
		break;
	case ID_IMMEDIATE_DATA:
		p->immediate_data = v;
		break;
	case ID_PDU_IN_ORDER:
		p->data_pdu_in_order = v;
		break;
	case ID_SEQ_IN_ORDER:
		p->data_sequence_in_order = v;
		break;
	case ID_IFMARKER:
		p->ifmarker = v;
		break;
	case ID_OFMARKER:
		p->ofmarker = v;
		break;
	default:
		break;
	}
}

static uint32_t our_number(const struct iscsi_params *p, const struct iscsi_params_limits *lim,
                           enum key_id id)
{
	switch (id) {
	case ID_MAX_CONNECTIONS:
		return lim->max_connections ? lim->max_connections : 1;
	case ID_MAX_BURST:
		return clamp_u32(lim->max_burst_length, DSL_MIN, DSL_MAX);
	case ID_FIRST_BURST:
		/*
		 * Never answer more than the MaxBurstLength in force or the
		 * most we would accept for it: FirstBurstLength must not
		 * exceed MaxBurstLength (RFC 7143 13.14). iscsi_params_finish()
		 * covers a MaxBurstLength negotiated after this key.
		 */
		return clamp_u32(min_u32(lim->first_burst_length,
		                         min_u32(lim->max_burst_length, p->max_burst_length)),
		                 DSL_MIN, DSL_MAX);
	case ID_TIME2WAIT:
		return OUR_DEFAULT_TIME2WAIT;
	case ID_TIME2RETAIN:
		return OUR_DEFAULT_TIME2RETAIN;
	case ID_MAX_R2T:
		return clamp_u32(lim->max_outstanding_r2t, 1, 65535);
	case ID_ERL:
		return OUR_ERROR_RECOVERY;
	case ID_PROTOCOL_LEVEL:
		return OUR_PROTOCOL_LEVEL;
	default:
		return 0;
	}
}

static void store_number(struct iscsi_params *p, enum key_id id, uint32_t v)
{
	switch (id) {
	case ID_MAX_CONNECTIONS:
		p->max_connections = v;
		break;
	case ID_MAX_RECV_DSL:
		p->max_recv_dsl_initiator = v;
		break;
	case ID_MAX_BURST:
		p->max_burst_length = v;
		break;
	case ID_FIRST_BURST:
		p->first_burst_length = v;
		break;
	case ID_TIME2WAIT:
		p->default_time2wait = v;
		break;
	case ID_TIME2RETAIN:
		p->default_time2retain = v;
		break;
	case ID_MAX_R2T:
		p->max_outstanding_r2t = v;
		break;
	case ID_ERL:
		p->error_recovery_level = v;
		break;
	default:
		break; /* iSCSIProtocolLevel: nothing depends on it yet */
	}
}

static enum iscsi_neg_result answer_str(char *answer, size_t answer_len, const char *s)
{
	if (answer_len == 0)
		return ISCSI_NEG_PROTOCOL_ERROR;
	snprintf(answer, answer_len, "%s", s);
	return ISCSI_NEG_ANSWER;
}

static enum iscsi_neg_result answer_u32(char *answer, size_t answer_len, uint32_t v)
{
	if (answer_len == 0)
		return ISCSI_NEG_PROTOCOL_ERROR;
	snprintf(answer, answer_len, "%u", v);
	return ISCSI_NEG_ANSWER;
}

/* RFC 7143 6.2: these constants MUST NOT be offered as values. */
static bool is_reserved_answer(const char *v)
{
	return strcmp(v, "Reject") == 0 || strcmp(v, "Irrelevant") == 0 ||
	       strcmp(v, "NotUnderstood") == 0;
}

enum iscsi_neg_result iscsi_negotiate_key(struct iscsi_params *p,
                                          const struct iscsi_params_limits *lim,
                                          enum iscsi_session_type type, const char *key,
                                          const char *value, char *answer, size_t answer_len)
{
	static const char *const digests[] = {"CRC32C", "None"};
	static const char *const task_reporting[] = {"RFC3720"};
	const struct key_desc *d = find_key(key);
	const char *pick;
	uint64_t num;
	bool b;

	if (!d) {
		/*
		 * Unknown keys, X- private and X# public extension keys
		 * included: RFC 7143 6.2 requires key=NotUnderstood.
		 */
		return answer_str(answer, answer_len, "NotUnderstood");
	}
	if (d->kind == KIND_NOT_HANDLED)
		return ISCSI_NEG_NOT_HANDLED;
	if (is_reserved_answer(value))
		return ISCSI_NEG_PROTOCOL_ERROR;
	if (d->kind == KIND_DECLARE_DSL) {
		/*
		 * A declaration gets no answer, so "Reject" is not available:
		 * a value we cannot honour fails the login (sending more than
		 * the initiator can take would fail later and worse).
		 */
		if (strlen(value) > SIMPLE_VALUE_MAX || parse_number(value, &num) < 0 ||
		    num < d->min || num > d->max)
			return ISCSI_NEG_PROTOCOL_ERROR;
		store_number(p, d->id, (uint32_t)num);
		return ISCSI_NEG_NO_ANSWER;
	}
	if (type == ISCSI_SESSION_DISCOVERY && d->discovery_irrelevant)
		return answer_str(answer, answer_len, "Irrelevant");
	if (strlen(value) > SIMPLE_VALUE_MAX)
		return answer_str(answer, answer_len, "Reject");

	switch (d->kind) {
	case KIND_DIGEST:
		pick = list_pick(value, digests, 2);
		if (!pick)
			return answer_str(answer, answer_len, "Reject");
		store_bool(p, d->id, strcmp(pick, "CRC32C") == 0);
		return answer_str(answer, answer_len, pick);

	case KIND_TASK_REPORTING:
		pick = list_pick(value, task_reporting, 1);
		return answer_str(answer, answer_len, pick ? pick : "Reject");

	case KIND_BOOL_OR:
	case KIND_BOOL_AND:
		if (parse_bool(value, &b) < 0)
			return answer_str(answer, answer_len, "Reject");
		if (d->kind == KIND_BOOL_OR)
			b = b || our_bool(d->id);
		else
			b = b && our_bool(d->id);
		store_bool(p, d->id, b);
		return answer_str(answer, answer_len, b ? "Yes" : "No");

	case KIND_NUM_MIN:
	case KIND_NUM_MAX: {
		uint32_t ours = our_number(p, lim, d->id), v;

		if (parse_number(value, &num) < 0 || num < d->min || num > d->max)
			return answer_str(answer, answer_len, "Reject");
		v = (uint32_t)num;
		if (d->kind == KIND_NUM_MIN)
			v = v < ours ? v : ours;
		else
			v = v > ours ? v : ours;
		store_number(p, d->id, v);
		return answer_u32(answer, answer_len, v);
	}

	case KIND_MARKER:
		/* Markers are obsolete in RFC 7143: answer No, never NotUnderstood. */
		if (parse_bool(value, &b) < 0)
			return answer_str(answer, answer_len, "Reject");
		store_bool(p, d->id, false);
		return answer_str(answer, answer_len, "No");

	case KIND_MARKINT:
		return answer_str(answer, answer_len, "Reject");

	default:
		return answer_str(answer, answer_len, "NotUnderstood");
	}
}

int iscsi_params_add_target_declarations(struct iscsi_textbuf *tb,
                                         const struct iscsi_params_limits *lim, unsigned *sent_mask)
{
	int rc;

	if (!(*sent_mask & ISCSI_DECL_MAX_RECV_DSL)) {
		rc = iscsi_textbuf_addf(tb, "MaxRecvDataSegmentLength", "%u",
		                        clamp_u32(lim->max_recv_dsl, DSL_MIN, DSL_MAX));
		if (rc < 0)
			return rc;
		*sent_mask |= ISCSI_DECL_MAX_RECV_DSL;
	}
	return 0;
}
