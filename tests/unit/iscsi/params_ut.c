/*
 * params_ut.c - operational key negotiation (RFC 7143 6.2, 13; RFC 7144):
 * one test per key rule, plus value syntax, reserved values, discovery
 * sessions and the target's own declarations.
 */
#include "iscsi/iscsi_text.h"

#include "hl_test.h"

#include <string.h>

struct neg {
	struct iscsi_params p;
	struct iscsi_params_limits lim;
	enum iscsi_session_type type;
	char answer[256];
};

static void neg_init(struct neg *n, enum iscsi_session_type type)
{
	iscsi_params_init(&n->p);
	iscsi_params_limits_default(&n->lim);
	n->type = type;
	memset(n->answer, 0, sizeof(n->answer));
}

static enum iscsi_neg_result neg(struct neg *n, const char *key, const char *value)
{
	strcpy(n->answer, "(untouched)");
	return iscsi_negotiate_key(&n->p, &n->lim, n->type, key, value, n->answer,
	                           sizeof(n->answer));
}

/* Offer key=value, expect an answer; @return whether it was `want`. */
#define ASSERT_ANSWER(n, key, value, want)                                                         \
	do {                                                                                       \
		CU_ASSERT_EQUAL(neg((n), (key), (value)), ISCSI_NEG_ANSWER);                       \
		CU_ASSERT_STRING_EQUAL((n)->answer, (want));                                       \
	} while (0)

static void test_rfc_defaults(void)
{
	struct iscsi_params p;

	memset(&p, 0xa5, sizeof(p));
	iscsi_params_init(&p);
	CU_ASSERT_FALSE(p.header_digest);
	CU_ASSERT_FALSE(p.data_digest);
	CU_ASSERT_EQUAL(p.max_recv_dsl_initiator, 8192);
	CU_ASSERT_EQUAL(p.max_recv_dsl_target, 8192);
	CU_ASSERT_EQUAL(p.max_connections, 1);
	CU_ASSERT_TRUE(p.initial_r2t);
	CU_ASSERT_TRUE(p.immediate_data);
	CU_ASSERT_EQUAL(p.max_burst_length, 262144);
	CU_ASSERT_EQUAL(p.first_burst_length, 65536);
	CU_ASSERT_EQUAL(p.default_time2wait, 2);
	CU_ASSERT_EQUAL(p.default_time2retain, 20);
	CU_ASSERT_EQUAL(p.max_outstanding_r2t, 1);
	CU_ASSERT_TRUE(p.data_pdu_in_order);
	CU_ASSERT_TRUE(p.data_sequence_in_order);
	CU_ASSERT_EQUAL(p.error_recovery_level, 0);
	CU_ASSERT_FALSE(p.ifmarker);
	CU_ASSERT_FALSE(p.ofmarker);
}

static void test_limit_defaults(void)
{
	struct iscsi_params_limits l;

	iscsi_params_limits_default(&l);
	CU_ASSERT_EQUAL(l.max_recv_dsl, 256 * 1024);
	CU_ASSERT_EQUAL(l.max_burst_length, 1024 * 1024);
	CU_ASSERT_EQUAL(l.first_burst_length, 256 * 1024);
	CU_ASSERT_EQUAL(l.max_connections, 1);
	CU_ASSERT(l.max_outstanding_r2t >= 1);
	CU_ASSERT(l.first_burst_length <= l.max_burst_length);
}

static void test_digest_takes_initiator_order(void)
{
	struct neg n;

	neg_init(&n, ISCSI_SESSION_NORMAL);
	ASSERT_ANSWER(&n, "HeaderDigest", "CRC32C,None", "CRC32C");
	CU_ASSERT_TRUE(n.p.header_digest);
	ASSERT_ANSWER(&n, "DataDigest", "None,CRC32C", "None");
	CU_ASSERT_FALSE(n.p.data_digest);
}

static void test_digest_skips_unknown(void)
{
	struct neg n;

	neg_init(&n, ISCSI_SESSION_NORMAL);
	ASSERT_ANSWER(&n, "DataDigest", "MD5,crc32c,CRC32C", "CRC32C");
	CU_ASSERT_TRUE(n.p.data_digest);
	ASSERT_ANSWER(&n, "HeaderDigest", "MD5", "Reject");
	CU_ASSERT_FALSE(n.p.header_digest);
}

static void test_max_connections_min(void)
{
	struct neg n;

	neg_init(&n, ISCSI_SESSION_NORMAL);
	ASSERT_ANSWER(&n, "MaxConnections", "8", "1");
	CU_ASSERT_EQUAL(n.p.max_connections, 1);
	n.lim.max_connections = 4;
	ASSERT_ANSWER(&n, "MaxConnections", "2", "2");
	CU_ASSERT_EQUAL(n.p.max_connections, 2);
	ASSERT_ANSWER(&n, "MaxConnections", "0", "Reject");
}

static void test_initial_r2t_or(void)
{
	struct neg n;

	neg_init(&n, ISCSI_SESSION_NORMAL);
	ASSERT_ANSWER(&n, "InitialR2T", "No", "Yes");
	CU_ASSERT_TRUE(n.p.initial_r2t);
	ASSERT_ANSWER(&n, "InitialR2T", "Yes", "Yes");
}

static void test_immediate_data_and(void)
{
	struct neg n;

	neg_init(&n, ISCSI_SESSION_NORMAL);
	ASSERT_ANSWER(&n, "ImmediateData", "No", "No");
	CU_ASSERT_FALSE(n.p.immediate_data);
	ASSERT_ANSWER(&n, "ImmediateData", "Yes", "Yes");
	CU_ASSERT_TRUE(n.p.immediate_data);
}

static void test_max_recv_dsl_is_declarative(void)
{
	struct neg n;

	neg_init(&n, ISCSI_SESSION_NORMAL);
	CU_ASSERT_EQUAL(neg(&n, "MaxRecvDataSegmentLength", "262144"), ISCSI_NEG_NO_ANSWER);
	CU_ASSERT_EQUAL(n.p.max_recv_dsl_initiator, 262144);
	CU_ASSERT_EQUAL(n.p.max_recv_dsl_target, 8192); /* ours is declared separately */
	CU_ASSERT_EQUAL(neg(&n, "MaxRecvDataSegmentLength", "512"), ISCSI_NEG_NO_ANSWER);
	CU_ASSERT_EQUAL(neg(&n, "MaxRecvDataSegmentLength", "16777215"), ISCSI_NEG_NO_ANSWER);
	CU_ASSERT_EQUAL(n.p.max_recv_dsl_initiator, 16777215);
}

static void test_max_recv_dsl_out_of_range_fails(void)
{
	struct neg n;

	neg_init(&n, ISCSI_SESSION_NORMAL);
	CU_ASSERT_EQUAL(neg(&n, "MaxRecvDataSegmentLength", "511"), ISCSI_NEG_PROTOCOL_ERROR);
	CU_ASSERT_EQUAL(neg(&n, "MaxRecvDataSegmentLength", "16777216"), ISCSI_NEG_PROTOCOL_ERROR);
	CU_ASSERT_EQUAL(neg(&n, "MaxRecvDataSegmentLength", "lots"), ISCSI_NEG_PROTOCOL_ERROR);
	CU_ASSERT_EQUAL(n.p.max_recv_dsl_initiator, 8192);
}

static void test_max_burst_min(void)
{
	struct neg n;

	neg_init(&n, ISCSI_SESSION_NORMAL);
	ASSERT_ANSWER(&n, "MaxBurstLength", "16776192", "1048576");
	CU_ASSERT_EQUAL(n.p.max_burst_length, 1048576);
	ASSERT_ANSWER(&n, "MaxBurstLength", "65536", "65536");
	CU_ASSERT_EQUAL(n.p.max_burst_length, 65536);
}

static void test_max_burst_out_of_range_rejected(void)
{
	struct neg n;

	neg_init(&n, ISCSI_SESSION_NORMAL);
	ASSERT_ANSWER(&n, "MaxBurstLength", "511", "Reject");
	ASSERT_ANSWER(&n, "MaxBurstLength", "16777216", "Reject");
	CU_ASSERT_EQUAL(n.p.max_burst_length, 262144);
}

static void test_first_burst_bounded_by_max_burst(void)
{
	struct neg n;

	neg_init(&n, ISCSI_SESSION_NORMAL);
	ASSERT_ANSWER(&n, "FirstBurstLength", "16776192", "262144");
	ASSERT_ANSWER(&n, "MaxBurstLength", "131072", "131072");
	ASSERT_ANSWER(&n, "FirstBurstLength", "262144", "131072");
	CU_ASSERT_EQUAL(n.p.first_burst_length, 131072);
}

static void test_finish_clamps_first_burst(void)
{
	struct neg n;

	neg_init(&n, ISCSI_SESSION_NORMAL);
	/* FirstBurstLength first, then a smaller MaxBurstLength in the same PDU. */
	ASSERT_ANSWER(&n, "FirstBurstLength", "262144", "262144");
	ASSERT_ANSWER(&n, "MaxBurstLength", "65536", "65536");
	CU_ASSERT_EQUAL(iscsi_params_finish(&n.p), 0);
	CU_ASSERT_EQUAL(n.p.first_burst_length, 65536);
	CU_ASSERT_EQUAL(n.p.max_burst_length, 65536);

	/* Consistent values are left alone. */
	n.p.first_burst_length = 4096;
	CU_ASSERT_EQUAL(iscsi_params_finish(&n.p), 0);
	CU_ASSERT_EQUAL(n.p.first_burst_length, 4096);
}

static void test_time2wait_max(void)
{
	struct neg n;

	neg_init(&n, ISCSI_SESSION_NORMAL);
	ASSERT_ANSWER(&n, "DefaultTime2Wait", "0", "2");
	CU_ASSERT_EQUAL(n.p.default_time2wait, 2);
	ASSERT_ANSWER(&n, "DefaultTime2Wait", "3600", "3600");
	CU_ASSERT_EQUAL(n.p.default_time2wait, 3600);
	ASSERT_ANSWER(&n, "DefaultTime2Wait", "3601", "Reject");
}

static void test_time2retain_min(void)
{
	struct neg n;

	neg_init(&n, ISCSI_SESSION_NORMAL);
	ASSERT_ANSWER(&n, "DefaultTime2Retain", "60", "20");
	ASSERT_ANSWER(&n, "DefaultTime2Retain", "0", "0");
	CU_ASSERT_EQUAL(n.p.default_time2retain, 0);
}

static void test_max_outstanding_r2t_min(void)
{
	struct neg n;

	neg_init(&n, ISCSI_SESSION_NORMAL);
	n.lim.max_outstanding_r2t = 4;
	ASSERT_ANSWER(&n, "MaxOutstandingR2T", "65535", "4");
	CU_ASSERT_EQUAL(n.p.max_outstanding_r2t, 4);
	ASSERT_ANSWER(&n, "MaxOutstandingR2T", "1", "1");
	ASSERT_ANSWER(&n, "MaxOutstandingR2T", "0", "Reject");
	CU_ASSERT_EQUAL(n.p.max_outstanding_r2t, 1);
}

static void test_in_order_keys_or(void)
{
	struct neg n;

	neg_init(&n, ISCSI_SESSION_NORMAL);
	ASSERT_ANSWER(&n, "DataPDUInOrder", "No", "Yes");
	ASSERT_ANSWER(&n, "DataSequenceInOrder", "No", "Yes");
	CU_ASSERT_TRUE(n.p.data_pdu_in_order);
	CU_ASSERT_TRUE(n.p.data_sequence_in_order);
}

static void test_error_recovery_level_min(void)
{
	struct neg n;

	neg_init(&n, ISCSI_SESSION_NORMAL);
	ASSERT_ANSWER(&n, "ErrorRecoveryLevel", "2", "0");
	CU_ASSERT_EQUAL(n.p.error_recovery_level, 0);
	ASSERT_ANSWER(&n, "ErrorRecoveryLevel", "3", "Reject");
}

static void test_markers_answered_no(void)
{
	struct neg n;

	neg_init(&n, ISCSI_SESSION_NORMAL);
	ASSERT_ANSWER(&n, "IFMarker", "Yes", "No");
	ASSERT_ANSWER(&n, "OFMarker", "No", "No");
	CU_ASSERT_FALSE(n.p.ifmarker);
	CU_ASSERT_FALSE(n.p.ofmarker);
	ASSERT_ANSWER(&n, "IFMarkInt", "2048~8192", "Reject");
	ASSERT_ANSWER(&n, "OFMarkInt", "2048", "Reject");
}

static void test_task_reporting(void)
{
	struct neg n;

	neg_init(&n, ISCSI_SESSION_NORMAL);
	ASSERT_ANSWER(&n, "TaskReporting", "FastAbort,ResponseFence,RFC3720", "RFC3720");
	ASSERT_ANSWER(&n, "TaskReporting", "FastAbort", "Reject");
}

static void test_protocol_level_min(void)
{
	struct neg n;

	neg_init(&n, ISCSI_SESSION_NORMAL);
	ASSERT_ANSWER(&n, "iSCSIProtocolLevel", "2", "1");
	ASSERT_ANSWER(&n, "iSCSIProtocolLevel", "0", "0");
	ASSERT_ANSWER(&n, "iSCSIProtocolLevel", "32", "Reject");
}

static void test_rdma_extensions_no(void)
{
	struct neg n;

	neg_init(&n, ISCSI_SESSION_NORMAL);
	ASSERT_ANSWER(&n, "RDMAExtensions", "Yes", "No");
}

static void test_unknown_and_extension_keys(void)
{
	struct neg n;

	neg_init(&n, ISCSI_SESSION_NORMAL);
	ASSERT_ANSWER(&n, "X-com.example.Frob", "Yes", "NotUnderstood");
	ASSERT_ANSWER(&n, "X#Frob", "1", "NotUnderstood");
	ASSERT_ANSWER(&n, "FrobLength", "1", "NotUnderstood");
	ASSERT_ANSWER(&n, "headerdigest", "None", "NotUnderstood"); /* keys are case-sensitive */
	/* Even a reserved constant as value is only "not understood" for an unknown key. */
	ASSERT_ANSWER(&n, "X-foo", "Reject", "NotUnderstood");
}

static void test_login_keys_not_handled(void)
{
	static const char *const keys[] = {
	    "SendTargets",
	    "TargetName",
	    "InitiatorName",
	    "TargetAlias",
	    "InitiatorAlias",
	    "TargetAddress",
	    "TargetPortalGroupTag",
	    "SessionType",
	    "AuthMethod",
	    "CHAP_A",
	    "CHAP_I",
	    "CHAP_C",
	    "CHAP_N",
	    "CHAP_R",
	};
	struct neg n;

	neg_init(&n, ISCSI_SESSION_NORMAL);
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		CU_ASSERT_EQUAL(neg(&n, keys[i], "x"), ISCSI_NEG_NOT_HANDLED);
		CU_ASSERT_STRING_EQUAL(n.answer, "(untouched)");
	}
}

static void test_hex_numbers(void)
{
	struct neg n;

	neg_init(&n, ISCSI_SESSION_NORMAL);
	ASSERT_ANSWER(&n, "MaxBurstLength", "0x10000", "65536");
	ASSERT_ANSWER(&n, "MaxBurstLength", "0X0000000000008000", "32768");
	/* Leading zeros stay decimal, never octal. */
	ASSERT_ANSWER(&n, "DefaultTime2Retain", "010", "10");
}

static void test_bad_number_syntax_rejected(void)
{
	static const char *const bad[] = {
	    "",
	    "12a",
	    "-1",
	    "+5",
	    " 5",
	    "5 ",
	    "0x",
	    "0xg",
	    "1.5",
	    "18446744073709551616",
	    "0x10000000000000000",
	    "Yes",
	};
	struct neg n;

	neg_init(&n, ISCSI_SESSION_NORMAL);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ASSERT_ANSWER(&n, "MaxBurstLength", bad[i], "Reject");
	CU_ASSERT_EQUAL(n.p.max_burst_length, 262144);
	/* Big but syntactically fine: out of range, still Reject. */
	ASSERT_ANSWER(&n, "MaxBurstLength", "18446744073709551615", "Reject");
}

static void test_bad_bool_syntax_rejected(void)
{
	struct neg n;

	neg_init(&n, ISCSI_SESSION_NORMAL);
	ASSERT_ANSWER(&n, "ImmediateData", "yes", "Reject");
	ASSERT_ANSWER(&n, "ImmediateData", "", "Reject");
	ASSERT_ANSWER(&n, "IFMarker", "Maybe", "Reject");
	CU_ASSERT_TRUE(n.p.immediate_data);
}

static void test_reserved_values_are_protocol_errors(void)
{
	static const char *const reserved[] = {"Reject", "Irrelevant", "NotUnderstood"};
	struct neg n;

	neg_init(&n, ISCSI_SESSION_NORMAL);
	for (size_t i = 0; i < 3; i++) {
		CU_ASSERT_EQUAL(neg(&n, "HeaderDigest", reserved[i]), ISCSI_NEG_PROTOCOL_ERROR);
		CU_ASSERT_EQUAL(neg(&n, "InitialR2T", reserved[i]), ISCSI_NEG_PROTOCOL_ERROR);
		CU_ASSERT_EQUAL(neg(&n, "MaxBurstLength", reserved[i]), ISCSI_NEG_PROTOCOL_ERROR);
	}
}

static void test_overlong_value_rejected(void)
{
	char v[300];
	struct neg n;

	neg_init(&n, ISCSI_SESSION_NORMAL);
	memset(v, '0', sizeof(v) - 2);
	v[sizeof(v) - 2] = '1';
	v[sizeof(v) - 1] = '\0';
	ASSERT_ANSWER(&n, "DefaultTime2Wait", v, "Reject");
	CU_ASSERT_EQUAL(neg(&n, "MaxRecvDataSegmentLength", v), ISCSI_NEG_PROTOCOL_ERROR);
}

static void test_discovery_irrelevant_keys(void)
{
	static const char *const irrelevant[][2] = {
	    {"MaxConnections", "1"},       {"InitialR2T", "Yes"},
	    {"ImmediateData", "Yes"},      {"MaxBurstLength", "262144"},
	    {"FirstBurstLength", "65536"}, {"MaxOutstandingR2T", "1"},
	    {"DataPDUInOrder", "Yes"},     {"DataSequenceInOrder", "Yes"},
	    {"TaskReporting", "RFC3720"},  {"iSCSIProtocolLevel", "1"},
	};
	struct neg n;
	struct iscsi_params before;

	neg_init(&n, ISCSI_SESSION_DISCOVERY);
	before = n.p;
	for (size_t i = 0; i < sizeof(irrelevant) / sizeof(irrelevant[0]); i++)
		ASSERT_ANSWER(&n, irrelevant[i][0], irrelevant[i][1], "Irrelevant");
	CU_ASSERT_EQUAL(memcmp(&before, &n.p, sizeof(before)), 0);
}

static void test_discovery_relevant_keys(void)
{
	struct neg n;

	neg_init(&n, ISCSI_SESSION_DISCOVERY);
	ASSERT_ANSWER(&n, "HeaderDigest", "CRC32C,None", "CRC32C");
	ASSERT_ANSWER(&n, "DataDigest", "None", "None");
	ASSERT_ANSWER(&n, "DefaultTime2Wait", "0", "2");
	ASSERT_ANSWER(&n, "DefaultTime2Retain", "0", "0");
	ASSERT_ANSWER(&n, "ErrorRecoveryLevel", "0", "0");
	ASSERT_ANSWER(&n, "IFMarker", "No", "No");
	CU_ASSERT_EQUAL(neg(&n, "MaxRecvDataSegmentLength", "32768"), ISCSI_NEG_NO_ANSWER);
	CU_ASSERT_EQUAL(n.p.max_recv_dsl_initiator, 32768);
	CU_ASSERT_EQUAL(neg(&n, "SendTargets", "All"), ISCSI_NEG_NOT_HANDLED);
}

static void test_target_declares_max_recv_dsl_once(void)
{
	struct iscsi_textbuf tb = {0};
	struct iscsi_params_limits lim;
	struct iscsi_kvlist l;
	unsigned mask = 0;

	iscsi_params_limits_default(&lim);
	CU_ASSERT_EQUAL_FATAL(iscsi_params_add_target_declarations(&tb, &lim, &mask), 0);
	CU_ASSERT_EQUAL(mask, ISCSI_DECL_MAX_RECV_DSL);
	CU_ASSERT_EQUAL_FATAL(iscsi_params_add_target_declarations(&tb, &lim, &mask), 0);
	CU_ASSERT_EQUAL_FATAL(iscsi_kvlist_parse(&l, tb.data, tb.len), 0);
	CU_ASSERT_EQUAL(l.n, 1);
	CU_ASSERT_STRING_EQUAL(iscsi_kvlist_find(&l, "MaxRecvDataSegmentLength"), "262144");
	iscsi_kvlist_free(&l);
	iscsi_textbuf_free(&tb);
}

static void test_target_declaration_clamped_to_range(void)
{
	struct iscsi_textbuf tb = {0};
	struct iscsi_params_limits lim;
	unsigned mask = 0;
	static const char want[] = "MaxRecvDataSegmentLength=16777215";

	iscsi_params_limits_default(&lim);
	lim.max_recv_dsl = 64u << 20;
	CU_ASSERT_EQUAL_FATAL(iscsi_params_add_target_declarations(&tb, &lim, &mask), 0);
	CU_ASSERT_EQUAL_FATAL(tb.len, sizeof(want));
	CU_ASSERT_EQUAL(memcmp(tb.data, want, sizeof(want)), 0);
	iscsi_textbuf_free(&tb);
}

/*
 * A whole operational-stage request as open-iscsi sends it, parsed,
 * negotiated key by key and answered, as the login code does it.
 */
static void test_open_iscsi_login_round_trip(void)
{
	static const char req[] = "HeaderDigest=CRC32C,None\0DataDigest=None\0"
	                          "DefaultTime2Wait=2\0DefaultTime2Retain=0\0IFMarker=No\0"
	                          "OFMarker=No\0ErrorRecoveryLevel=0\0InitialR2T=No\0"
	                          "ImmediateData=Yes\0MaxBurstLength=16776192\0"
	                          "FirstBurstLength=262144\0MaxOutstandingR2T=1\0"
	                          "MaxConnections=1\0DataPDUInOrder=Yes\0DataSequenceInOrder=Yes\0"
	                          "MaxRecvDataSegmentLength=262144\0X-com.example.Tuning=1";
	static const char want[] = "HeaderDigest=CRC32C\0DataDigest=None\0"
	                           "DefaultTime2Wait=2\0DefaultTime2Retain=0\0IFMarker=No\0"
	                           "OFMarker=No\0ErrorRecoveryLevel=0\0InitialR2T=Yes\0"
	                           "ImmediateData=Yes\0MaxBurstLength=1048576\0"
	                           "FirstBurstLength=262144\0MaxOutstandingR2T=1\0"
	                           "MaxConnections=1\0DataPDUInOrder=Yes\0DataSequenceInOrder=Yes\0"
	                           "X-com.example.Tuning=NotUnderstood\0"
	                           "MaxRecvDataSegmentLength=262144";
	struct iscsi_kvlist l;
	struct iscsi_textbuf rsp = {0};
	struct neg n;
	unsigned mask = 0;

	neg_init(&n, ISCSI_SESSION_NORMAL);
	CU_ASSERT_EQUAL_FATAL(iscsi_kvlist_parse(&l, req, sizeof(req)), 0);
	for (size_t i = 0; i < l.n; i++) {
		enum iscsi_neg_result r = neg(&n, l.kv[i].key, l.kv[i].value);

		CU_ASSERT(r == ISCSI_NEG_ANSWER || r == ISCSI_NEG_NO_ANSWER);
		if (r == ISCSI_NEG_ANSWER)
			CU_ASSERT_EQUAL_FATAL(iscsi_textbuf_add(&rsp, l.kv[i].key, n.answer), 0);
	}
	CU_ASSERT_EQUAL_FATAL(iscsi_params_add_target_declarations(&rsp, &n.lim, &mask), 0);
	CU_ASSERT_EQUAL(iscsi_params_finish(&n.p), 0);
	CU_ASSERT_EQUAL_FATAL(rsp.len, sizeof(want));
	CU_ASSERT_EQUAL(memcmp(rsp.data, want, sizeof(want)), 0);
	CU_ASSERT_TRUE(n.p.header_digest);
	CU_ASSERT_FALSE(n.p.data_digest);
	CU_ASSERT_EQUAL(n.p.max_recv_dsl_initiator, 262144);
	CU_ASSERT_EQUAL(n.p.max_burst_length, 1048576);
	CU_ASSERT_EQUAL(n.p.first_burst_length, 262144);
	iscsi_kvlist_free(&l);
	iscsi_textbuf_free(&rsp);
}

static const struct hl_test tests[] = {
    {"init gives the RFC 7143 defaults", test_rfc_defaults},
    {"limit defaults", test_limit_defaults},
    {"digest: first of the initiator's list", test_digest_takes_initiator_order},
    {"digest: unknown values skipped, none -> Reject", test_digest_skips_unknown},
    {"MaxConnections: minimum", test_max_connections_min},
    {"InitialR2T: OR", test_initial_r2t_or},
    {"ImmediateData: AND", test_immediate_data_and},
    {"MaxRecvDataSegmentLength: declarative, recorded", test_max_recv_dsl_is_declarative},
    {"MaxRecvDataSegmentLength: bad value fails login", test_max_recv_dsl_out_of_range_fails},
    {"MaxBurstLength: minimum with our limit", test_max_burst_min},
    {"MaxBurstLength: out of range -> Reject", test_max_burst_out_of_range_rejected},
    {"FirstBurstLength: never above MaxBurstLength", test_first_burst_bounded_by_max_burst},
    {"finish clamps FirstBurstLength", test_finish_clamps_first_burst},
    {"DefaultTime2Wait: maximum", test_time2wait_max},
    {"DefaultTime2Retain: minimum", test_time2retain_min},
    {"MaxOutstandingR2T: minimum", test_max_outstanding_r2t_min},
    {"DataPDUInOrder/DataSequenceInOrder: OR", test_in_order_keys_or},
    {"ErrorRecoveryLevel: minimum with 0", test_error_recovery_level_min},
    {"markers: No, mark intervals: Reject", test_markers_answered_no},
    {"TaskReporting: RFC3720 from the list", test_task_reporting},
    {"iSCSIProtocolLevel: minimum with 1", test_protocol_level_min},
    {"RDMAExtensions: No", test_rdma_extensions_no},
    {"unknown and X- / X# keys: NotUnderstood", test_unknown_and_extension_keys},
    {"login keys left to the caller", test_login_keys_not_handled},
    {"hex and zero-padded numbers", test_hex_numbers},
    {"bad number syntax -> Reject", test_bad_number_syntax_rejected},
    {"bad boolean syntax -> Reject", test_bad_bool_syntax_rejected},
    {"reserved constants offered -> protocol error", test_reserved_values_are_protocol_errors},
    {"value over 255 bytes -> Reject", test_overlong_value_rejected},
    {"discovery: normal-session keys Irrelevant", test_discovery_irrelevant_keys},
    {"discovery: connection keys negotiated", test_discovery_relevant_keys},
    {"target declares MaxRecvDataSegmentLength once", test_target_declares_max_recv_dsl_once},
    {"target declaration clamped to 2^24-1", test_target_declaration_clamped_to_range},
    {"open-iscsi operational request answered in full", test_open_iscsi_login_round_trip},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("iscsi_params", tests);
}
