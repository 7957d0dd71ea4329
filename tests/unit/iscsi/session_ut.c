/*
 * session_ut.c - the real connection, login and full-feature code of
 * src/iscsi driven over a socketpair, with the scsi layer replaced by a fake
 * (hl_scsi_cmd_exec & co, in session_ut_lib.h): the login state machine
 * (stages, continuation, errors, CHAP), Data-In segmentation and
 * residuals, R2T generation, unsolicited data, the write buffer budget and
 * Data-Out errors. The CmdSN window, Reject, TMF, Logout, Text, NOP and the
 * rest: session_flow_ut.c.
 */
#include "session_ut_lib.h"

/* ------------------------------------------------------------------ */
/* Login                                                               */

static void test_login_operational_only(void)
{
	setup();
	login_ok(NULL);
	CU_ASSERT_EQUAL(conn->params.max_recv_dsl_initiator, 8192);
	CU_ASSERT_EQUAL(conn->params.max_burst_length, 16384);
	teardown();
	CU_ASSERT_EQUAL(nexus_gone, 1);
}

/* The SCSI target port a session uses follows the gateway id (ALUA, several gateways). */
static void test_login_port_ids_follow_gateway(void)
{
	struct hl_iscsi_server_config sc = {0};
	struct hl_iscsi_server *bad = NULL;

	/* the numbering itself is hl_scsi_port_ids' (alua_ut); here: that logins use it */
	sc.reactors = &reactor;
	sc.n_reactors = 1;
	sc.gateway = 256;
	CU_ASSERT_EQUAL(hl_iscsi_server_create(&sc, &bad), -EINVAL);
	CU_ASSERT_PTR_NULL(bad);

	/* a lone gateway: the portal group tag (1 here) */
	setup();
	login_ok(NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(conn->sess);
	CU_ASSERT_EQUAL(conn->sess->port.rel_port_id, 1);
	CU_ASSERT_EQUAL(conn->sess->port.tpg_id, 1);
	CU_ASSERT_PTR_EQUAL(conn->sess->nexus.port, &conn->sess->port);
	teardown();
	/* gateway 7: group 7, relative port 0x0701 */
	setup();
	srv->gateway = 7;
	login_ok(NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(conn->sess);
	CU_ASSERT_EQUAL(conn->sess->port.rel_port_id, 0x0701);
	CU_ASSERT_EQUAL(conn->sess->port.tpg_id, 7);
	teardown();
}

static void test_login_security_then_operational(void)
{
	char spec[512];

	setup();
	snprintf(spec, sizeof(spec), "InitiatorName=%s|TargetName=%s|AuthMethod=None", INI, TGT);
	login_pdu(ISCSI_LOGIN_TRANSIT | (0 << 2) | 1, spec);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(login_status(&got[0]), 0);
	CU_ASSERT_TRUE(has_kv(&got[0], "AuthMethod=None"));
	CU_ASSERT_TRUE(has_kv(&got[0], "TargetPortalGroupTag=1"));
	CU_ASSERT_EQUAL(got[0].bhs.b[1], ISCSI_LOGIN_TRANSIT | 1);
	CU_ASSERT_EQUAL(hl_get_be16(&got[0].bhs.b[14]), 0); /* TSIH only in the last response */
	ngot = 0;
	login_pdu(ISCSI_LOGIN_TRANSIT | (1 << 2) | 3, OPS_KEYS);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(login_status(&got[0]), 0);
	CU_ASSERT_FALSE(has_kv(&got[0], "TargetPortalGroupTag=1"));
	CU_ASSERT_PTR_NOT_NULL(get_kv(&got[0], "MaxRecvDataSegmentLength"));
	CU_ASSERT_NOT_EQUAL(hl_get_be16(&got[0].bhs.b[14]), 0);
	CU_ASSERT_EQUAL(conn->state, CONN_FFP);
	teardown();
}

static void expect_login_fail(const char *spec, uint8_t flags, uint16_t status)
{
	setup();
	login_pdu(flags, spec);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(login_status(&got[0]), status);
	CU_ASSERT_FALSE(conn_alive()); /* closed once the answer went out */
	teardown();
}

static void test_login_errors(void)
{
	uint8_t op = ISCSI_LOGIN_TRANSIT | (1 << 2) | 3;
	expect_login_fail("InitiatorName=" INI "|SessionType=Normal", op,
	                  ISCSI_LOGIN_MISSING_PARAMETER);
	expect_login_fail("TargetName=" TGT, op, ISCSI_LOGIN_MISSING_PARAMETER);
	expect_login_fail("InitiatorName=" INI "|TargetName=iqn.2026-11.io.hotlun:none", op,
	                  ISCSI_LOGIN_NOT_FOUND);
	expect_login_fail("InitiatorName=" INI "|TargetName=" TGT_ACL, op,
	                  ISCSI_LOGIN_NOT_AUTHORIZED);
	expect_login_fail("InitiatorName=" INI "|TargetName=" TGT_CHAP, op,
	                  ISCSI_LOGIN_AUTH_FAILED);
	expect_login_fail("InitiatorName=" INI "|TargetName=" TGT "|SessionType=Bogus", op,
	                  ISCSI_LOGIN_SESSION_TYPE_UNSUPPORTED);
	expect_login_fail("InitiatorName=" INI "|TargetName=" TGT "|AuthMethod=None",
	                  ISCSI_LOGIN_TRANSIT | (1 << 2) | 3, ISCSI_LOGIN_INITIATOR_ERROR);
	expect_login_fail("InitiatorName=" INI "|TargetName=" TGT,
	                  ISCSI_LOGIN_TRANSIT | (1 << 2) | 1,
	                  ISCSI_LOGIN_INITIATOR_ERROR); /* NSG <= CSG */
	expect_login_fail("no-equals-sign", op, ISCSI_LOGIN_INITIATOR_ERROR);
	expect_login_fail("InitiatorName=" INI "|TargetName=" TGT "|TargetName=" TGT, op,
	                  ISCSI_LOGIN_INITIATOR_ERROR); /* a key twice */
	expect_login_fail("InitiatorName=iqn.x:evil\n2026 fake log line|TargetName=" TGT, op,
	                  ISCSI_LOGIN_INITIATOR_ERROR); /* names are printable, without spaces */

	/* unsupported version */
	setup();
	{
		struct iscsi_bhs h;
		login_bhs(&h, op);
		h.b[2] = 2; /* Version-max */
		h.b[3] = 1; /* Version-min */
		send_login(&h, "InitiatorName=" INI "|TargetName=" TGT);
	}
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(login_status(&got[0]), ISCSI_LOGIN_UNSUPPORTED_VERSION);
	teardown();

	/* TSIH of a session that does not exist */
	setup();
	{
		struct iscsi_bhs h;
		login_bhs(&h, op);
		hl_put_be16(&h.b[14], 0x4242);
		send_login(&h, "InitiatorName=" INI "|TargetName=" TGT);
	}
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(login_status(&got[0]), ISCSI_LOGIN_SESSION_DOES_NOT_EXIST);
	teardown();

	/* a non-login PDU before login closes the connection */
	setup();
	{
		struct iscsi_bhs h;
		memset(&h, 0, sizeof(h));
		h.b[0] = ISCSI_OP_NOP_OUT | ISCSI_FLAG_IMMEDIATE;
		send_pdu(&h, NULL, 0);
	}
	pump();
	CU_ASSERT_EQUAL(ngot, 0);
	CU_ASSERT_FALSE(conn_alive());
	teardown();
}

static void test_login_discovery(void)
{
	setup();
	login_pdu(ISCSI_LOGIN_TRANSIT | (1 << 2) | 3, "InitiatorName=" INI "|SessionType=Discovery|"
	                                              "MaxRecvDataSegmentLength=8192");
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(login_status(&got[0]), 0);
	CU_ASSERT_EQUAL(conn->sess->type, ISCSI_SESSION_DISCOVERY);
	expstatsn = bhs_w24(&got[0].bhs) + 1;
	ngot = 0;
	/* SendTargets=All lists what the initiator may see (not the ACL'd target) */
	struct iscsi_bhs h;
	uint8_t data[64];
	size_t n = kv(data, "SendTargets=All");
	imm_req(&h, ISCSI_OP_TEXT_REQ, ISCSI_FLAG_FINAL, ++itt, ISCSI_RSVD_TAG);
	send_pdu(&h, data, (uint32_t)n);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_TEXT_RSP);
	CU_ASSERT_EQUAL(got[0].bhs.b[1], ISCSI_FLAG_FINAL);
	CU_ASSERT_TRUE(has_kv(&got[0], "TargetName=" TGT));
	CU_ASSERT_TRUE(has_kv(&got[0], "TargetName=" TGT_CHAP));
	CU_ASSERT_FALSE(has_kv(&got[0], "TargetName=" TGT_ACL));
	/* bad values and keys fail */
	ngot = 0;
	n = kv(data, "SendTargets=Alle");
	bhs_set_itt(&h, ++itt);
	send_pdu(&h, data, (uint32_t)n);
	n = kv(data, "sENDtARGETS=aLL");
	bhs_set_itt(&h, ++itt);
	send_pdu(&h, data, (uint32_t)n);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 2);
	CU_ASSERT_TRUE(has_kv(&got[0], "SendTargets=Reject"));
	CU_ASSERT_TRUE(has_kv(&got[1], "sENDtARGETS=NotUnderstood"));
	/* the same key twice in one request is refused */
	ngot = 0;
	n = kv(data, "SendTargets=All|SendTargets=All");
	bhs_set_itt(&h, ++itt);
	send_pdu(&h, data, (uint32_t)n);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_REJECT);
	/* SCSI commands are not allowed in a discovery session */
	ngot = 0;
	scsi_cmd(ISCSI_FLAG_FINAL, 0x00, 0, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_REJECT);
	teardown();
}

static void test_login_continuation(void)
{
	setup();
	/* request split over two PDUs with C */
	login_pdu(ISCSI_LOGIN_CONTINUE | (1 << 2), "InitiatorName=" INI "|TargetName=" TGT);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(login_status(&got[0]), 0);
	CU_ASSERT_EQUAL(got[0].dsl, 0);
	ngot = 0;
	/* a response that does not fit in 8192 bytes: many unknown keys */
	char spec[16000];
	size_t off = 0;
	for (int i = 0; i < 420; i++)
		off += (size_t)snprintf(spec + off, sizeof(spec) - off, "X-k%03d=v|", i);
	spec[off - 1] = 0;
	login_pdu(ISCSI_LOGIN_TRANSIT | (1 << 2) | 3, spec);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(got[0].bhs.b[1] & (ISCSI_LOGIN_CONTINUE | ISCSI_LOGIN_TRANSIT),
	                ISCSI_LOGIN_CONTINUE);
	CU_ASSERT_EQUAL(got[0].dsl, 8192);
	CU_ASSERT_TRUE(has_kv(&got[0], "X-k000=NotUnderstood"));
	ngot = 0;
	login_pdu(ISCSI_LOGIN_TRANSIT | (1 << 2) | 3, NULL);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(got[0].bhs.b[1], ISCSI_LOGIN_TRANSIT | (1 << 2) | 3);
	CU_ASSERT_NOT_EQUAL(hl_get_be16(&got[0].bhs.b[14]), 0);
	CU_ASSERT_EQUAL(conn->state, CONN_FFP);
	teardown();
}

static void chap_login(const char *secret, bool mutual, bool reflect, uint16_t want_status)
{
	char spec[1024];

	setup();
	snprintf(spec, sizeof(spec), "InitiatorName=%s|TargetName=%s|AuthMethod=CHAP,None", INI,
	         TGT_CHAP);
	login_pdu((0 << 2) | ISCSI_LOGIN_TRANSIT | 1, spec);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_TRUE(has_kv(&got[0], "AuthMethod=CHAP"));
	CU_ASSERT_EQUAL(got[0].bhs.b[1] & ISCSI_LOGIN_TRANSIT, 0);
	ngot = 0;
	login_pdu(0, "CHAP_A=7,5");
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_TRUE(has_kv(&got[0], "CHAP_A=7"));
	const char *id_s = get_kv(&got[0], "CHAP_I"), *c_s = get_kv(&got[0], "CHAP_C");
	CU_ASSERT_FATAL(id_s && c_s);
	uint8_t ch[64], rsp[64];
	char hex[200], spec2[1024];
	int clen = iscsi_chap_decode(c_s, ch, sizeof(ch));
	CU_ASSERT_FATAL(clen > 0);
	CU_ASSERT_EQUAL(iscsi_chap_compute(ISCSI_CHAP_SHA256, (uint8_t)atoi(id_s), secret, ch,
	                                   (size_t)clen, rsp),
	                0);
	iscsi_chap_encode_hex(rsp, 32, hex, sizeof(hex));
	if (mutual)
		snprintf(spec2, sizeof(spec2), "CHAP_N=alice|CHAP_R=%s|CHAP_I=9|CHAP_C=%s", hex,
		         reflect ? c_s : "0x0102030405060708090a0b0c0d0e0f10");
	else
		snprintf(spec2, sizeof(spec2), "CHAP_N=alice|CHAP_R=%s", hex);
	ngot = 0;
	login_pdu((0 << 2) | ISCSI_LOGIN_TRANSIT | 1, spec2);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(login_status(&got[0]), want_status);
	if (want_status == 0) {
		CU_ASSERT_EQUAL(got[0].bhs.b[1], ISCSI_LOGIN_TRANSIT | 1);
		if (mutual) {
			uint8_t want[32], tch[16];
			char whex[100];
			CU_ASSERT_EQUAL(
			    iscsi_chap_decode("0x0102030405060708090a0b0c0d0e0f10", tch, 16), 16);
			iscsi_chap_compute(ISCSI_CHAP_SHA256, 9, "targetsecret", tch, 16, want);
			iscsi_chap_encode_hex(want, 32, whex, sizeof(whex));
			CU_ASSERT_TRUE(has_kv(&got[0], "CHAP_N=tgt"));
			CU_ASSERT_STRING_EQUAL(get_kv(&got[0], "CHAP_R"), whex);
		}
	}
	teardown();
}

static void test_login_chap(void)
{
	chap_login("alicesecret1", false, false, 0);
	chap_login("wrong-secret", false, false, ISCSI_LOGIN_AUTH_FAILED);
	chap_login("alicesecret1", true, false, 0);
	chap_login("alicesecret1", true, true, ISCSI_LOGIN_AUTH_FAILED); /* reflected challenge */
}

/* ------------------------------------------------------------------ */
/* Full feature phase                                                  */

static void test_read_segmentation(void)
{
	setup();
	login_ok(NULL); /* MaxRecvDSL 8192, MaxBurstLength 16384 */
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_READ, 0x28, 20000, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 3);
	uint32_t want_len[3] = {8192, 8192, 3616};
	for (int i = 0; i < 3; i++) {
		CU_ASSERT_EQUAL(bhs_opcode(&got[i].bhs), ISCSI_OP_DATA_IN);
		CU_ASSERT_EQUAL(got[i].dsl, want_len[i]);
		CU_ASSERT_EQUAL(bhs_w36(&got[i].bhs), (uint32_t)i);        /* DataSN */
		CU_ASSERT_EQUAL(bhs_w40(&got[i].bhs), (uint32_t)i * 8192); /* offset */
		CU_ASSERT_EQUAL(bhs_itt(&got[i].bhs), itt);
		CU_ASSERT_EQUAL(got[i].data[5], (uint8_t)((i * 8192 + 5) * 7 + 1));
	}
	CU_ASSERT_EQUAL(got[0].bhs.b[1], 0);
	CU_ASSERT_EQUAL(got[1].bhs.b[1], ISCSI_FLAG_FINAL); /* end of a 16 KiB burst */
	CU_ASSERT_EQUAL(got[2].bhs.b[1], ISCSI_FLAG_FINAL | ISCSI_DATAIN_STATUS);
	CU_ASSERT_EQUAL(got[2].bhs.b[3], HL_SAM_GOOD);
	CU_ASSERT_EQUAL(bhs_w24(&got[2].bhs), expstatsn); /* StatSN */
	CU_ASSERT_EQUAL(bhs_w28(&got[2].bhs), cmdsn);     /* ExpCmdSN */
	teardown();
}

/* The fake scsi layer's pattern in data[lo, hi) (as fake_complete writes it). */
static void fake_pattern(struct hl_scsi_cmd *cmd, uint32_t lo, uint32_t hi)
{
	for (uint32_t i = lo; i < hi; i++)
		cmd->data[i] = (uint8_t)(i * 7 + 1);
}

/*
 * A READ whose data the scsi layer hands over in pieces (data_ready): whole
 * PDUs go at once, cut where the final response cuts them (MaxRecvDSL 8192,
 * bursts of 16384), never the last one; the rest, with the status, at done.
 */
static void test_read_streamed(void)
{
	setup();
	login_ok(NULL); /* MaxRecvDSL 8192, MaxBurstLength 16384 */
	defer_exec = true;
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_READ, 0x28, 40000, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(npending, 1);
	struct hl_scsi_cmd *cmd = pending[0];
	CU_ASSERT_PTR_NOT_NULL_FATAL(cmd->data_ready);
	fake_pattern(cmd, 0, 20000);
	cmd->data_ready(cmd, 20000);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 2); /* [16384, 24576) is not all there */
	fake_pattern(cmd, 20000, 40000);
	cmd->data_ready(cmd, 24576);
	cmd->data_ready(cmd, 24576); /* nothing new */
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 3);
	cmd->data_ready(cmd, 39999); /* [24576, 32768) ends a burst; the last PDU waits */
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 4);
	npending = 0;
	fake_complete(cmd);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 5);
	uint32_t want_len[5] = {8192, 8192, 8192, 8192, 7232};
	uint8_t want_flags[5] = {0, ISCSI_FLAG_FINAL, 0, ISCSI_FLAG_FINAL,
	                         ISCSI_FLAG_FINAL | ISCSI_DATAIN_STATUS};
	for (int i = 0; i < 5; i++) {
		CU_ASSERT_EQUAL(bhs_opcode(&got[i].bhs), ISCSI_OP_DATA_IN);
		CU_ASSERT_EQUAL(got[i].dsl, want_len[i]);
		CU_ASSERT_EQUAL(got[i].bhs.b[1], want_flags[i]);
		CU_ASSERT_EQUAL(bhs_w36(&got[i].bhs), (uint32_t)i);        /* DataSN */
		CU_ASSERT_EQUAL(bhs_w40(&got[i].bhs), (uint32_t)i * 8192); /* offset */
		CU_ASSERT_EQUAL(got[i].data[5], (uint8_t)((i * 8192 + 5) * 7 + 1));
	}
	CU_ASSERT_EQUAL(got[4].bhs.b[3], HL_SAM_GOOD);
	CU_ASSERT_EQUAL(bhs_w24(&got[4].bhs), expstatsn);

	/* an error after some data: the Data-In sent, then a SCSI Response with sense */
	ngot = 0;
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_READ, 0x28, 40000, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(npending, 1);
	cmd = pending[0];
	fake_pattern(cmd, 0, 16384);
	cmd->data_ready(cmd, 16384);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 2);
	npending = 0;
	cmd->xfer_len = 40000;
	cmd->data_in_len = 0;
	hl_scsi_set_sense(cmd, 0x03, 0x11, 0x00); /* MEDIUM ERROR, UNRECOVERED READ ERROR */
	cmd->done(cmd);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 3);
	CU_ASSERT_EQUAL(bhs_opcode(&got[2].bhs), ISCSI_OP_SCSI_RSP);
	CU_ASSERT_EQUAL(got[2].bhs.b[3], HL_SAM_CHECK_CONDITION);
	CU_ASSERT_EQUAL(bhs_w36(&got[2].bhs), 2); /* ExpDataSN: the two Data-In sent */
	CU_ASSERT_EQUAL(bhs_w44(&got[2].bhs), 0); /* no residual: xfer_len == EDTL */

	/* aborted: nothing more leaves, and the TMF answers once the command is done */
	ngot = 0;
	uint32_t victim = itt;
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_READ, 0x28, 40000, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(npending, 1);
	cmd = pending[0];
	struct iscsi_bhs h;
	tmf_req(&h, ISCSI_TMF_ABORT_TASK, victim);
	send_pdu(&h, NULL, 0);
	pump();
	fake_pattern(cmd, 0, 40000);
	cmd->data_ready(cmd, 32768);
	pump();
	CU_ASSERT_EQUAL(ngot, 0);
	npending = 0;
	fake_complete(cmd);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_TMF_RSP);
	teardown();
}

/*
 * Data buffers come back for reuse up to 64 MiB per connection: 32 reads of
 * 1 MiB in flight reuse the same 32 buffers (with a cache of 8, 24 of them
 * were fresh allocations each time); the kept buffers can be given back.
 */
static void test_data_buffer_reuse(void)
{
	enum { N = 32 };
	void *p[N], *q[N];
	uint32_t cap[N];
	struct iscsi_conn *c;

	setup();
	login_ok(NULL);
	c = P->p_conn;
	for (int i = 0; i < N; i++) {
		p[i] = iscsi_buf_get(c, 1u << 20, &cap[i]);
		CU_ASSERT_PTR_NOT_NULL_FATAL(p[i]);
		CU_ASSERT_EQUAL(cap[i], 1u << 20);
	}
	for (int i = 0; i < N; i++)
		iscsi_buf_put(c, p[i], cap[i]);
	CU_ASSERT_EQUAL(c->buf_cache_bytes, (uint64_t)N << 20);
	int reused = 0;
	for (int i = 0; i < N; i++) {
		q[i] = iscsi_buf_get(c, 1u << 20, &cap[i]);
		for (int j = 0; j < N; j++)
			reused += q[i] == p[j];
	}
	CU_ASSERT_EQUAL(reused, N);
	CU_ASSERT_EQUAL(c->buf_cache_bytes, 0);
	for (int i = 0; i < N; i++)
		iscsi_buf_put(c, q[i], cap[i]);
	iscsi_conn_buf_trim(c);
	CU_ASSERT_EQUAL(c->buf_cache_bytes, 0);
	teardown();
}

/*
 * 1 MiB buffers are the two halves of a 2 MiB-aligned huge-page chunk; the
 * chunk stays while either half is in use (its free half counted as kept)
 * and goes back once both are free and the connection trims or closes.
 */
static void test_data_buffer_huge_chunks(void)
{
	uint32_t cap0, cap1, cap2;
	struct iscsi_conn *c;
	uint8_t *a, *b, *d;

	setup();
	login_ok(NULL);
	c = P->p_conn;
	a = iscsi_buf_get(c, 1u << 20, &cap0);
	b = iscsi_buf_get(c, 1u << 20, &cap1);
	CU_ASSERT_PTR_NOT_NULL_FATAL(a);
	CU_ASSERT_PTR_NOT_NULL_FATAL(b);
	CU_ASSERT_EQUAL(cap0, 1u << 20);
	CU_ASSERT_EQUAL((uintptr_t)a % (2u << 20), 0);
	CU_ASSERT_PTR_EQUAL(b, a + (1u << 20));
	CU_ASSERT_EQUAL(c->nchunks, 1);
	CU_ASSERT_EQUAL(c->buf_cache_bytes, 0);
	/* a 2 MiB buffer is plain pages (not a chunk) */
	d = iscsi_buf_get(c, 2u << 20, &cap2);
	CU_ASSERT_PTR_NOT_NULL_FATAL(d);
	CU_ASSERT_EQUAL(cap2, 2u << 20);
	CU_ASSERT_EQUAL(c->nchunks, 1);
	iscsi_buf_put(c, d, cap2);
	iscsi_buf_put(c, a, cap0);
	iscsi_conn_buf_trim(c);
	/* b still in use: its chunk stays, a's half counted as kept */
	CU_ASSERT_EQUAL(c->nchunks, 1);
	CU_ASSERT_EQUAL(c->buf_cache_bytes, 1u << 20);
	memset(b, 0xa5, 1u << 20); /* still ours */
	CU_ASSERT_PTR_EQUAL(iscsi_buf_get(c, 1u << 20, &cap0), a); /* the free half first */
	iscsi_buf_put(c, a, cap0);
	iscsi_buf_put(c, b, cap1);
	CU_ASSERT_EQUAL(c->buf_cache_bytes, 2u << 20);
	iscsi_conn_buf_trim(c);
	CU_ASSERT_EQUAL(c->nchunks, 0);
	CU_ASSERT_EQUAL(c->buf_cache_bytes, 0);
	teardown();
}

static void test_read_residuals(void)
{
	setup();
	login_ok(NULL);
	fake_xfer_len = 1024; /* the CDB asks for more than EDTL */
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_READ, 0x28, 512, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(got[0].dsl, 512);
	CU_ASSERT_EQUAL(got[0].bhs.b[1],
	                ISCSI_FLAG_FINAL | ISCSI_DATAIN_STATUS | ISCSI_DATAIN_OVERFLOW);
	CU_ASSERT_EQUAL(bhs_w44(&got[0].bhs), 512);
	ngot = 0;
	itt++;
	fake_xfer_len = 512; /* EDTL larger than the CDB */
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_READ, 0x28, 4096, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(got[0].dsl, 512);
	CU_ASSERT_EQUAL(got[0].bhs.b[1],
	                ISCSI_FLAG_FINAL | ISCSI_DATAIN_STATUS | ISCSI_DATAIN_UNDERFLOW);
	CU_ASSERT_EQUAL(bhs_w44(&got[0].bhs), 4096 - 512);
	ngot = 0;
	itt++;
	/* a no-data command with EDTL: SCSI Response with underflow */
	fake_xfer_len = 0;
	scsi_cmd(ISCSI_FLAG_FINAL, 0x00, 0, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_SCSI_RSP);
	CU_ASSERT_EQUAL(got[0].bhs.b[1], ISCSI_FLAG_FINAL);
	teardown();
}

static void test_edtl_too_large(void)
{
	setup();
	login_ok(NULL);
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_READ, 0x28, HL_SCSI_MAX_XFER + 512, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_SCSI_RSP);
	CU_ASSERT_EQUAL(got[0].bhs.b[3], HL_SAM_CHECK_CONDITION);
	CU_ASSERT_EQUAL(got[0].dsl, 2 + 18);
	CU_ASSERT_EQUAL(got[0].data[2 + 2], HL_SK_ILLEGAL_REQUEST);
	CU_ASSERT_EQUAL(got[0].data[2 + 12], 0x24);
	/*
	 * a connection that already holds its share of buffers is refused: BUSY
	 * while it has no other command in the task set (SAM-5), else TASK SET FULL
	 */
	ngot = 0;
	itt++;
	conn->buf_bytes = ISCSI_CONN_BUF_MAX - 100;
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_READ, 0x28, 4096, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(got[0].bhs.b[3], HL_SAM_BUSY);
	conn->buf_bytes = 0;
	ngot = 0;
	itt++;
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_READ, 0x28, 4096, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(got[0].bhs.b[3], HL_SAM_GOOD);
	CU_ASSERT_EQUAL(conn->buf_bytes, 0);
	teardown();
}

/* got holds one PDU, a SCSI Response with status GOOD (kept for more checks). */
static void good_rsp_got(void)
{
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_SCSI_RSP);
	CU_ASSERT_EQUAL(got[0].bhs.b[3], HL_SAM_GOOD);
}

static void test_write_r2t(void)
{
	uint8_t buf[32768];

	for (unsigned i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i ^ (i >> 8));
	setup();
	login_ok(NULL); /* InitialR2T=Yes, MaxBurstLength 16384, MaxOutstandingR2T 2 */
	memset(last_write, 0, sizeof(last_write));
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_WRITE, 0x2a, 32768 + 8192, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 2);
	for (int i = 0; i < 2; i++) {
		CU_ASSERT_EQUAL(bhs_opcode(&got[i].bhs), ISCSI_OP_R2T);
		CU_ASSERT_EQUAL(bhs_w36(&got[i].bhs), (uint32_t)i);         /* R2TSN */
		CU_ASSERT_EQUAL(bhs_w40(&got[i].bhs), (uint32_t)i * 16384); /* offset */
		CU_ASSERT_EQUAL(bhs_w44(&got[i].bhs), 16384);               /* desired length */
	}
	uint32_t ttt0 = bhs_w20(&got[0].bhs), ttt1 = bhs_w20(&got[1].bhs);
	CU_ASSERT_NOT_EQUAL(ttt0, ttt1);
	ngot = 0;
	/* answer the second R2T first, in two PDUs of 8 KiB (MaxRecvDSL) */
	data_out(ttt1, 0, 16384, buf + 16384, 8192, false);
	data_out(ttt1, 1, 24576, buf + 24576, 8192, true);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1); /* the freed slot is used for the rest */
	CU_ASSERT_EQUAL(bhs_w36(&got[0].bhs), 2); /* R2TSN */
	uint32_t ttt2 = r2t_got(32768, 8192);
	data_out(ttt0, 0, 0, buf, 8192, false);
	data_out(ttt0, 1, 8192, buf + 8192, 8192, true);
	data_out(ttt2, 0, 32768, buf, 8192, true);
	pump();
	good_rsp_got();
	CU_ASSERT_EQUAL(last_write_len, 32768 + 8192);
	CU_ASSERT_EQUAL(memcmp(last_write, buf, 32768), 0);
	CU_ASSERT_EQUAL(memcmp(last_write + 32768, buf, 8192), 0);
	teardown();
}

static void test_write_immediate_unsolicited(void)
{
	uint8_t buf[16384];

	for (unsigned i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 13);
	setup();
	login_ok("MaxRecvDataSegmentLength=8192|InitialR2T=No|ImmediateData=Yes|"
	         "MaxBurstLength=16384|FirstBurstLength=8192|MaxOutstandingR2T=1");
	/* this target prefers InitialR2T=Yes (an OR key); force No to exercise unsolicited data */
	conn->params.initial_r2t = false;
	/* 4 KiB immediate + 4 KiB unsolicited (F=0 on the command), rest by R2T */
	scsi_cmd(ISCSI_CMD_WRITE, 0x2a, 16384, buf, 4096);
	pump();
	CU_ASSERT_EQUAL(ngot, 0);
	data_out(ISCSI_RSVD_TAG, 0, 4096, buf + 4096, 4096, true);
	pump();
	uint32_t ttt = r2t_got(8192, 8192);
	data_out(ttt, 0, 8192, buf + 8192, 8192, true);
	pump();
	good_rsp_got();
	CU_ASSERT_EQUAL(memcmp(last_write, buf, 16384), 0);
	teardown();
}

/* An immediate NOP-Out ping; @return the NOP-In's MaxCmdSN minus its ExpCmdSN, plus 1 (the window). */
static int32_t ping_window(void)
{
	struct iscsi_bhs h;

	imm_req(&h, ISCSI_OP_NOP_OUT, ISCSI_FLAG_FINAL, 0x7777, ISCSI_RSVD_TAG);
	bhs_put32(&h, 28, expstatsn);
	ngot = 0;
	send_pdu(&h, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_NOP_IN);
	int32_t w = (int32_t)(bhs_w32(&got[0].bhs) - bhs_w28(&got[0].bhs)) + 1;
	ngot = 0;
	return w;
}

/* Write budget taken by a WRITE of another host (10.0.0.n) than the test's connection. */
static enum iscsi_wb_verdict hog_admit(struct iscsi_wb_claim *cl, unsigned n, uint64_t need)
{
	struct iscsi_source k;

	memset(&k, 0, sizeof(k));
	k.b[0] = 2; /* AF_INET */
	k.b[1] = 10;
	k.b[4] = (uint8_t)n;
	return iscsi_wb_admit(&srv->wb, cl, &k, 0, need, 0, hl_now_ns(), NULL);
}

static void test_write_budget(void)
{
	uint8_t buf[32768];
	struct iscsi_wb_claim hog1 = {0}, hog2 = {0};
	struct hl_iscsi_write_stats ws;

	for (unsigned i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 7);
	setup();
	hl_iscsi_server_set_write_limit(srv, 32u << 20);
	login_ok(NULL); /* InitialR2T=Yes, ImmediateData=Yes, FirstBurstLength 8192 */
	/* other connections hold the whole budget */
	CU_ASSERT_EQUAL(hog_admit(&hog1, 1, 16u << 20), ISCSI_WB_GO);
	CU_ASSERT_EQUAL(hog_admit(&hog2, 2, 16u << 20), ISCSI_WB_GO);
	/* immediate data with no room for it: refused, no R2T (BUSY: no other command here) */
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_WRITE, 0x2a, 8192, buf, 4096);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_SCSI_RSP);
	CU_ASSERT_EQUAL(got[0].bhs.b[3], HL_SAM_BUSY);
	ngot = 0;
	itt++;
	/* a write whose data all comes by R2T waits for the budget: no R2T yet */
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_WRITE, 0x2a, 32768, NULL, 0);
	pump();
	CU_ASSERT_EQUAL(ngot, 0);
	CU_ASSERT_TRUE(hl_timer_pending(&conn->wb_timer));
	hl_iscsi_write_stats(srv, &ws);
	CU_ASSERT_EQUAL(ws.waiting, 1);
	CU_ASSERT_EQUAL(ws.r2t_deferred, 1);
	CU_ASSERT_EQUAL(ws.task_set_full, 1);
	CU_ASSERT_EQUAL(ws.held, 32u << 20);
	/* meanwhile the connection is advertised no new command slots */
	CU_ASSERT_EQUAL(ping_window(), 0);
	conn->wb_timer.fn(&conn->wb_timer); /* still no room */
	pump();
	CU_ASSERT_EQUAL(ngot, 0);
	/* budget comes back: the retry sends the R2Ts; the WRITE's deadline starts now */
	iscsi_wb_release(&srv->wb, &hog1);
	uint64_t granted = hl_now_ns();
	conn->wb_timer.fn(&conn->wb_timer);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 2);
	CU_ASSERT_PTR_NOT_NULL_FATAL(dout_task());
	CU_ASSERT(dout_task()->wb_since_ns >= granted);
	CU_ASSERT_EQUAL(dout_task()->wb_deadline_ns - dout_task()->wb_since_ns,
	                iscsi_wb_deadline_ns(32768));
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_R2T);
	CU_ASSERT_EQUAL(bhs_opcode(&got[1].bhs), ISCSI_OP_R2T);
	uint32_t ttt0 = bhs_w20(&got[0].bhs), ttt1 = bhs_w20(&got[1].bhs);
	ngot = 0;
	data_out(ttt0, 0, 0, buf, 8192, false);
	data_out(ttt0, 1, 8192, buf + 8192, 8192, true);
	data_out(ttt1, 0, 16384, buf + 16384, 8192, false);
	data_out(ttt1, 1, 24576, buf + 24576, 8192, true);
	pump();
	good_rsp_got();
	CU_ASSERT_EQUAL(memcmp(last_write, buf, 32768), 0);
	/* its response reopened the window; only hog2 is held */
	CU_ASSERT(ping_window() > 1);
	hl_iscsi_write_stats(srv, &ws);
	CU_ASSERT_EQUAL(ws.waiting, 0);
	CU_ASSERT_EQUAL(ws.held, 16u << 20);
	CU_ASSERT_EQUAL(conn->wb_promised, 0);
	iscsi_wb_release(&srv->wb, &hog2);
	teardown();
}

static void test_write_budget_unsolicited_waits(void)
{
	uint8_t buf[16384];
	struct iscsi_wb_claim hog = {0}, hog2 = {0};
	struct hl_iscsi_write_stats ws;

	for (unsigned i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 31 + 5);
	setup();
	hl_iscsi_server_set_write_limit(srv, 32u << 20);
	login_ok("MaxRecvDataSegmentLength=8192|InitialR2T=No|ImmediateData=Yes|"
	         "MaxBurstLength=16384|FirstBurstLength=8192|MaxOutstandingR2T=1");
	conn->params.initial_r2t = false;
	/* 8 KiB left: room for the 8 KiB that comes unasked, not for the 16 KiB write */
	CU_ASSERT_EQUAL(hog_admit(&hog, 1, 16u << 20), ISCSI_WB_GO);
	CU_ASSERT_EQUAL(hog_admit(&hog2, 2, (16u << 20) - 8192), ISCSI_WB_GO);
	scsi_cmd(ISCSI_CMD_WRITE, 0x2a, 16384, buf, 4096);
	data_out(ISCSI_RSVD_TAG, 0, 4096, buf + 4096, 4096, true);
	pump();
	CU_ASSERT_EQUAL(ngot, 0); /* its unsolicited data is taken, no R2T for the rest */
	hl_iscsi_write_stats(srv, &ws);
	CU_ASSERT_EQUAL(ws.waiting, 1);
	CU_ASSERT_EQUAL(ws.waiting_bytes, 8192);
	CU_ASSERT_TRUE(conn->buf_bytes < 16384); /* a buffer for what came, not the transfer */
	iscsi_wb_release(&srv->wb, &hog);
	conn->wb_timer.fn(&conn->wb_timer);
	pump();
	uint32_t ttt = r2t_got(8192, 8192);
	data_out(ttt, 0, 8192, buf + 8192, 8192, true);
	pump();
	good_rsp_got();
	CU_ASSERT_EQUAL(last_write_len, 16384);
	CU_ASSERT_EQUAL(memcmp(last_write, buf, 16384), 0); /* what came first was moved along */
	iscsi_wb_release(&srv->wb, &hog2);
	hl_iscsi_write_stats(srv, &ws);
	CU_ASSERT_EQUAL(ws.held, 0);
	teardown();
}

static void test_write_budget_conn_close(void)
{
	struct iscsi_wb_claim hog = {0};
	struct hl_iscsi_write_stats ws;

	setup();
	hl_iscsi_server_set_write_limit(srv, 32u << 20);
	login_ok(NULL);
	CU_ASSERT_EQUAL(hog_admit(&hog, 1, 16u << 20), ISCSI_WB_GO);
	/* one write granted (16 MiB, its data never comes), one waiting */
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_WRITE, 0x2a, 16u << 20, NULL, 0);
	itt++;
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_WRITE, 0x2a, 1u << 20, NULL, 0);
	pump();
	hl_iscsi_write_stats(srv, &ws);
	CU_ASSERT_EQUAL(ws.held, 32u << 20);
	CU_ASSERT_EQUAL(ws.waiting, 0); /* its connection is at its cap: TASK SET FULL */
	CU_ASSERT_EQUAL(ws.task_set_full, 1);
	iscsi_wb_release(&srv->wb, &hog);
	/* the connection goes: what it held comes back */
	iscsi_conn_close(conn, "test");
	hl_iscsi_write_stats(srv, &ws);
	CU_ASSERT_EQUAL(ws.held, 0);
	CU_ASSERT_EQUAL(ws.peak, 32u << 20);
	teardown();
}

static void test_data_out_errors(void)
{
	uint8_t buf[8192] = {0};

	setup();
	login_ok(NULL);
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_WRITE, 0x2a, 8192, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	uint32_t ttt = bhs_w20(&got[0].bhs);
	ngot = 0;
	data_out(ttt, 5, 0, buf, 4096, false); /* wrong DataSN */
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_REJECT);
	CU_ASSERT_EQUAL(got[0].bhs.b[2], ISCSI_REJECT_PROTOCOL_ERROR);
	CU_ASSERT_EQUAL(got[0].dsl, ISCSI_BHS_LEN);
	ngot = 0;
	/* the task is gone: more data for it is dropped silently */
	data_out(ttt, 1, 4096, buf, 4096, true);
	pump();
	CU_ASSERT_EQUAL(ngot, 0);
	CU_ASSERT_EQUAL(conn->nactive, 0);
	/* the session still works */
	itt++;
	scsi_cmd(ISCSI_FLAG_FINAL, 0x00, 0, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_SCSI_RSP);
	teardown();
}

static const struct hl_test tests[] = {
    {"login: operational stage straight to FFP", test_login_operational_only},
    {"login: the SCSI port ids follow the gateway id", test_login_port_ids_follow_gateway},
    {"login: security then operational stage", test_login_security_then_operational},
    {"login: error statuses", test_login_errors},
    {"login: discovery session and SendTargets", test_login_discovery},
    {"login: request and response continuation", test_login_continuation},
    {"login: CHAP one-way, mutual, wrong secret, reflection", test_login_chap},
    {"read: Data-In segmentation, bursts, status", test_read_segmentation},
    {"read: data handed over in pieces goes out in whole PDUs", test_read_streamed},
    {"data buffers: 32 x 1 MiB reused, trimmed", test_data_buffer_reuse},
    {"data buffers: 1 MiB halves of huge-page chunks", test_data_buffer_huge_chunks},
    {"read: residual overflow/underflow", test_read_residuals},
    {"EDTL above the transfer cap; buffer share exhausted", test_edtl_too_large},
    {"write: R2T generation", test_write_r2t},
    {"write: immediate + unsolicited + R2T", test_write_immediate_unsolicited},
    {"write: budget spent: TASK SET FULL, R2T deferred, window held", test_write_budget},
    {"write: budget: unsolicited data taken while R2Ts wait", test_write_budget_unsolicited_waits},
    {"write: budget given back when the connection closes", test_write_budget_conn_close},
    {"write: bad DataSN rejected, session survives", test_data_out_errors},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("iscsi_session", tests);
}
