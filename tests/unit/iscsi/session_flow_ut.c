/*
 * session_flow_ut.c - the full-feature phase of src/iscsi over a
 * socketpair with the fake scsi layer of session_ut_lib.h: the CmdSN
 * window, Reject and digests, TMF, Logout, Text continuation and
 * SendTargets, NOP pings, discovery CHAP, session reinstatement, resets,
 * LUN changes, a slow reader, Data-Out timeouts and deadlines.
 */
#include "session_ut_lib.h"

static void test_cmdsn_window(void)
{
	setup();
	login_ok(NULL);
	uint32_t exp = cmdsn;
	cmdsn = exp + 5; /* ahead of ExpCmdSN: dropped */
	scsi_cmd(ISCSI_FLAG_FINAL, 0x00, 0, NULL, 0);
	cmdsn = exp - 1; /* behind: dropped */
	itt++;
	scsi_cmd(ISCSI_FLAG_FINAL, 0x00, 0, NULL, 0);
	pump();
	CU_ASSERT_EQUAL(ngot, 0);
	cmdsn = exp;
	itt++;
	scsi_cmd(ISCSI_FLAG_FINAL, 0x00, 0, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_w28(&got[0].bhs), exp + 1);                         /* ExpCmdSN */
	CU_ASSERT_EQUAL(bhs_w32(&got[0].bhs), exp + 1 + ISCSI_QUEUE_DEPTH - 1); /* MaxCmdSN */
	/* commands held by the scsi layer narrow the window */
	ngot = 0;
	defer_exec = true;
	itt++;
	scsi_cmd(ISCSI_FLAG_FINAL, 0x00, 0, NULL, 0);
	/* an immediate NOP-Out does not consume a CmdSN and is answered while I/O is stalled */
	struct iscsi_bhs h;
	imm_req(&h, ISCSI_OP_NOP_OUT, ISCSI_FLAG_FINAL, ++itt, ISCSI_RSVD_TAG);
	send_pdu(&h, "ping", 4);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_NOP_IN);
	CU_ASSERT_EQUAL(bhs_itt(&got[0].bhs), itt);
	CU_ASSERT_EQUAL(got[0].dsl, 4);
	CU_ASSERT_EQUAL(memcmp(got[0].data, "ping", 4), 0);
	CU_ASSERT_EQUAL(bhs_w28(&got[0].bhs), exp + 2);
	CU_ASSERT_EQUAL(bhs_w32(&got[0].bhs), exp + 2 + ISCSI_QUEUE_DEPTH - 2);
	CU_ASSERT_EQUAL(npending, 1);
	ngot = 0;
	fake_complete(pending[--npending]);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_SCSI_RSP);
	teardown();
}

static void test_cmdsn_window_full(void)
{
	setup();
	login_ok(NULL);
	defer_exec = true;
	for (int i = 0; i < ISCSI_QUEUE_DEPTH - 1; i++) {
		scsi_cmd(ISCSI_FLAG_FINAL, 0x00, 0, NULL, 0);
		itt++;
	}
	/* the last slot taken by a write with immediate data (counted once, not twice) */
	static const uint8_t blk[512];
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_WRITE, 0x2a, 512, blk, 512);
	itt++;
	pump();
	CU_ASSERT_EQUAL(npending, ISCSI_QUEUE_DEPTH);
	/* the window is closed: MaxCmdSN = ExpCmdSN - 1, one more command is dropped */
	scsi_cmd(ISCSI_FLAG_FINAL, 0x00, 0, NULL, 0);
	itt++;
	struct iscsi_bhs h;
	imm_req(&h, ISCSI_OP_NOP_OUT, ISCSI_FLAG_FINAL, itt, ISCSI_RSVD_TAG);
	send_pdu(&h, NULL, 0);
	pump();
	CU_ASSERT_EQUAL(npending, ISCSI_QUEUE_DEPTH);
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_NOP_IN);
	uint32_t exp = bhs_w28(&got[0].bhs);
	CU_ASSERT_EQUAL(exp, cmdsn - 1); /* the dropped command did not count */
	CU_ASSERT_EQUAL(bhs_w32(&got[0].bhs), exp - 1);
	/* one completion reopens the window by one */
	ngot = 0;
	fake_complete(pending[0]);
	memmove(pending, pending + 1, (size_t)(--npending) * sizeof(pending[0]));
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_w32(&got[0].bhs), exp);
	teardown();
}

/*
 * An initiator that behaves like libiscsi 1.19 (Write10.Async): it keeps the highest
 * MaxCmdSN it has seen (RFC 7143 4.2.2.1: a lower one is ignored), sends every command
 * whose CmdSN is within it and queues the rest. 600 commands, mostly 4 KiB writes with
 * all their data immediate, against an LU that completes them late and out of order.
 * No command may be dropped: each is answered, MaxCmdSN never goes back and ExpCmdSN ends
 * one past the last CmdSN. Before the fix a write with immediate data that arrived in the
 * last free slot was counted before its CmdSN was checked, fell outside its own window,
 * was dropped, and every later command queued behind the gap forever.
 */
static void test_cmdsn_window_initiator_model(void)
{
	static uint8_t blk[4096];
	const int total = 600;
	int sent = 0, done = 0, stalls = 0, max_pending = 0;
	unsigned seed = 12345;

	setup();
	login_ok(NULL);
	uint32_t maxsn = bhs_w32(&got[0].bhs); /* the Login Response's MaxCmdSN */
	uint32_t first = cmdsn;
	defer_exec = true;
	while (done < total) {
		int progress = 0;
		/* send what the window allows, a few at a time so the socketpair never fills */
		for (int burst = 0; burst < 16 && sent < total && sn_le(cmdsn, maxsn); burst++) {
			if (sent % 5 == 4)
				scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_READ, 0x28, 4096, NULL, 0);
			else if (sent % 7 == 6)
				scsi_cmd(ISCSI_FLAG_FINAL, 0x00, 0, NULL, 0);
			else
				scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_WRITE, 0x2a, 4096, blk, 4096);
			itt++;
			sent++;
			progress++;
		}
		pump();
		max_pending = HL_MAX(max_pending, npending);
		/* the slow LU completes a few commands, not in arrival order */
		seed = seed * 1103515245u + 12345u;
		int n = npending ? (int)(seed >> 16) % 6 + (sent == total ? 8 : 1) : 0;
		for (int i = 0; i < n && npending; i++) {
			seed = seed * 1103515245u + 12345u;
			int k = (int)((seed >> 16) % (unsigned)npending);
			struct hl_scsi_cmd *cmd = pending[k];
			memmove(pending + k, pending + k + 1,
			        (size_t)(npending - k - 1) * sizeof(pending[0]));
			npending--;
			fake_complete(cmd);
			progress++;
		}
		pump();
		for (int i = 0; i < ngot; i++) {
			const struct iscsi_bhs *b = &got[i].bhs;
			uint32_t m = bhs_w32(b);
			uint8_t op = bhs_opcode(b);
			CU_ASSERT_TRUE(sn_le(maxsn, m)); /* MaxCmdSN never decreases */
			if (sn_lt(maxsn, m))
				maxsn = m;
			if (op == ISCSI_OP_SCSI_RSP ||
			    (op == ISCSI_OP_DATA_IN && (b->b[1] & ISCSI_DATAIN_STATUS)))
				done++;
			else if (op != ISCSI_OP_DATA_IN)
				CU_FAIL("unexpected PDU");
		}
		ngot = 0;
		if (!progress && ++stalls > 3) {
			CU_FAIL("initiator stalled: a command in the window was dropped");
			break;
		}
	}
	CU_ASSERT_EQUAL(done, total);
	CU_ASSERT_EQUAL(npending, 0);
	CU_ASSERT_EQUAL(max_pending, ISCSI_QUEUE_DEPTH); /* the window was really filled */
	CU_ASSERT_EQUAL(conn->sess->exp_cmd_sn, first + (uint32_t)total);
	CU_ASSERT_EQUAL(conn->nactive, 0);
	teardown();
}

/*
 * MaxCmdSN is a promise: once advertised, a command up to it is accepted even if the free
 * slots were to say otherwise (the initiator ignores a lower MaxCmdSN). White-box: slots are
 * taken behind the window's back, as an accounting slip would.
 */
static void test_cmdsn_window_promise(void)
{
	setup();
	login_ok(NULL);
	scsi_cmd(ISCSI_FLAG_FINAL, 0x00, 0, NULL, 0);
	itt++;
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	uint32_t max = bhs_w32(&got[0].bhs);
	CU_ASSERT_EQUAL(max, cmdsn + ISCSI_QUEUE_DEPTH - 1);
	ngot = 0;
	conn->nactive += 10;
	CU_ASSERT_TRUE(sn_lt(iscsi_conn_max_cmd_sn(conn), max));
	CU_ASSERT_EQUAL(iscsi_conn_window_end(conn), max);
	defer_exec = true;
	while (sn_le(cmdsn, max)) {
		for (int i = 0; i < 16 && sn_le(cmdsn, max); i++) {
			scsi_cmd(ISCSI_FLAG_FINAL, 0x00, 0, NULL, 0);
			itt++;
		}
		pump();
	}
	CU_ASSERT_EQUAL(npending, ISCSI_QUEUE_DEPTH);
	CU_ASSERT_EQUAL(conn->sess->exp_cmd_sn, max + 1);
	/* one past the promise is still dropped */
	scsi_cmd(ISCSI_FLAG_FINAL, 0x00, 0, NULL, 0);
	itt++;
	pump();
	CU_ASSERT_EQUAL(npending, ISCSI_QUEUE_DEPTH);
	CU_ASSERT_EQUAL(conn->sess->exp_cmd_sn, max + 1);
	conn->nactive -= 10;
	while (npending) {
		for (int i = 0; i < 32 && npending; i++)
			fake_complete(pending[--npending]);
		pump();
		ngot = 0;
	}
	CU_ASSERT_EQUAL(conn->nactive, 0);
	teardown();
}

static void test_reject_and_digests(void)
{
	setup();
	login_ok("MaxRecvDataSegmentLength=8192|HeaderDigest=CRC32C|DataDigest=CRC32C");
	CU_ASSERT_TRUE(conn->params.header_digest && conn->params.data_digest);
	rx_hd = rx_dd = true;
	rcv.header_digest = rcv.data_digest = true;
	struct iscsi_bhs h;
	memset(&h, 0, sizeof(h));
	h.b[0] = 0x1c; /* not an initiator opcode */
	h.b[1] = ISCSI_FLAG_FINAL;
	bhs_set_itt(&h, itt);
	send_pdu(&h, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_REJECT);
	CU_ASSERT_EQUAL(got[0].bhs.b[2], ISCSI_REJECT_CMD_NOT_SUPPORTED);
	CU_ASSERT_EQUAL(got[0].data[0], 0x1c);
	/* a read works with both digests */
	ngot = 0;
	itt++;
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_READ, 0x28, 1000, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(got[0].dsl, 1000);
	/* a corrupt header digest loses framing: the connection goes */
	ngot = 0;
	rx_hd = false;
	memset(&h, 0, sizeof(h));
	h.b[0] = ISCSI_OP_NOP_OUT | ISCSI_FLAG_IMMEDIATE;
	send_pdu(&h, NULL, 0);
	send_raw("\x01\x02\x03\x04", 4);
	pump();
	CU_ASSERT_FALSE(conn_alive());
	teardown();
}

/*
 * A data digest error discards the PDU (Reject 0x02). An immediate PDU takes no CmdSN and the
 * connection stays; a command at ExpCmdSN would leave a CmdSN hole every later command waits
 * behind, so at ERL 0 the connection closes after the Reject (and the write is not executed).
 */
static void test_digest_error_cmdsn_gap(void)
{
	static const uint8_t blk[512] = {0x5a};
	struct iscsi_bhs h;

	setup();
	login_ok("MaxRecvDataSegmentLength=8192|HeaderDigest=CRC32C|DataDigest=CRC32C");
	rx_hd = rx_dd = true;
	rcv.header_digest = rcv.data_digest = true;
	imm_req(&h, ISCSI_OP_NOP_OUT, ISCSI_FLAG_FINAL, itt, ISCSI_RSVD_TAG);
	rx_dd = false;
	send_pdu(&h, "ping", 4);
	send_raw("\x01\x02\x03\x04", 4); /* wrong data digest */
	rx_dd = true;
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_REJECT);
	CU_ASSERT_EQUAL(got[0].bhs.b[2], ISCSI_REJECT_DATA_DIGEST);
	CU_ASSERT_TRUE_FATAL(conn_alive());
	CU_ASSERT_EQUAL(conn->sess->exp_cmd_sn, cmdsn);
	ngot = 0;
	itt++;
	last_write_len = 0;
	rx_dd = false;
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_WRITE, 0x2a, 512, blk, 512);
	send_raw("\x01\x02\x03\x04", 4);
	rx_dd = true;
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_REJECT);
	CU_ASSERT_EQUAL(got[0].bhs.b[2], ISCSI_REJECT_DATA_DIGEST);
	CU_ASSERT_EQUAL(last_write_len, 0);
	CU_ASSERT_FALSE(conn_alive());
	teardown();
}

static void test_tmf_abort_waits(void)
{
	setup();
	login_ok(NULL);
	defer_exec = true;
	uint32_t victim = itt;
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_READ, 0x28, 4096, NULL, 0);
	pump();
	CU_ASSERT_EQUAL(npending, 1);
	struct iscsi_bhs h;
	tmf_req(&h, ISCSI_TMF_ABORT_TASK, victim);
	send_pdu(&h, NULL, 0);
	pump();
	CU_ASSERT_EQUAL(ngot, 0); /* the task is still in the scsi layer */
	fake_complete(pending[--npending]);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1); /* only the TMF response: the read's data is discarded */
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_TMF_RSP);
	CU_ASSERT_EQUAL(got[0].bhs.b[2], ISCSI_TMF_RSP_COMPLETE);
	/* an unknown task */
	ngot = 0;
	bhs_set_itt(&h, ++itt);
	bhs_put32(&h, 20, 0xabcdef);
	send_pdu(&h, NULL, 0);
	/* LUN reset with nothing running completes at once and resets the LU */
	h.b[1] = ISCSI_FLAG_FINAL | ISCSI_TMF_LUN_RESET;
	bhs_set_itt(&h, ++itt);
	send_pdu(&h, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 2);
	CU_ASSERT_EQUAL(got[0].bhs.b[2], ISCSI_TMF_RSP_NO_TASK);
	CU_ASSERT_EQUAL(got[1].bhs.b[2], ISCSI_TMF_RSP_COMPLETE);
	CU_ASSERT_EQUAL(lu_resets, 1);
	teardown();
}

static void test_logout(void)
{
	setup();
	login_ok(NULL);
	struct iscsi_bhs h;
	imm_req(&h, ISCSI_OP_LOGOUT_REQ, ISCSI_FLAG_FINAL | ISCSI_LOGOUT_CLOSE_SESSION, itt, 0);
	send_pdu(&h, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_LOGOUT_RSP);
	CU_ASSERT_EQUAL(got[0].bhs.b[2], ISCSI_LOGOUT_RSP_OK);
	CU_ASSERT_FALSE(conn_alive());
	teardown();
}

/*
 * A closing Logout with a command still in the scsi layer: the Logout
 * Response waits for that command's status, which comes first, with the
 * StatSN before the logout's; then the connection closes.
 */
static void test_logout_waits_for_commands(void)
{
	setup();
	login_ok(NULL);
	defer_exec = true;
	scsi_cmd(ISCSI_FLAG_FINAL, 0x00, 0, NULL, 0); /* TEST UNIT READY, held by the fake */
	pump();
	CU_ASSERT_EQUAL_FATAL(npending, 1);
	CU_ASSERT_EQUAL(ngot, 0);
	itt++;
	cmdsn++;
	struct iscsi_bhs h;
	imm_req(&h, ISCSI_OP_LOGOUT_REQ, ISCSI_FLAG_FINAL | ISCSI_LOGOUT_CLOSE_SESSION, itt, 0);
	send_pdu(&h, NULL, 0);
	pump();
	CU_ASSERT_EQUAL(ngot, 0); /* no Logout Response while the command runs */
	CU_ASSERT_TRUE(conn_alive());
	fake_complete(pending[--npending]);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 2);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_SCSI_RSP);
	CU_ASSERT_EQUAL(bhs_opcode(&got[1].bhs), ISCSI_OP_LOGOUT_RSP);
	CU_ASSERT_EQUAL(got[1].bhs.b[2], ISCSI_LOGOUT_RSP_OK);
	CU_ASSERT_EQUAL(bhs_w24(&got[1].bhs), bhs_w24(&got[0].bhs) + 1); /* StatSN order */
	CU_ASSERT_FALSE(conn_alive());
	teardown();
}

/* The Async Message asking for a logout: event 1, Parameter3, the next StatSN. */
static void test_request_logout(void)
{
	setup();
	login_ok(NULL);
	CU_ASSERT_EQUAL(iscsi_conn_request_logout(conn, 7), 0);
	iscsi_conn_flush(conn);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_ASYNC_MSG);
	CU_ASSERT_EQUAL(got[0].bhs.b[36], ISCSI_ASYNC_LOGOUT_REQUEST);
	CU_ASSERT_EQUAL(hl_get_be16(&got[0].bhs.b[42]), 7);
	CU_ASSERT_EQUAL(bhs_itt(&got[0].bhs), 0xffffffffu);
	CU_ASSERT_TRUE(conn_alive());
	teardown();
}

static void test_text_continuation(void)
{
	struct iscsi_portal fake[30];

	setup();
	/* portals put straight into the list (no listening socket needed) */
	memset(fake, 0, sizeof(fake));
	for (int i = 0; i < 30; i++) {
		struct sockaddr_in *sin = (struct sockaddr_in *)&fake[i].addr;
		sin->sin_family = AF_INET;
		sin->sin_port = htons(3260);
		sin->sin_addr.s_addr = htonl(0x0a000001 + (uint32_t)i);
		fake[i].tpgt = 1;
		hl_list_add_tail(&srv->portals, &fake[i].link);
	}
	/* a small MaxRecvDataSegmentLength makes the SendTargets answer span PDUs */
	login_ok("MaxRecvDataSegmentLength=512");
	struct iscsi_bhs h;
	uint8_t data[64];
	size_t n = kv(data, "SendTargets=All");
	memset(&h, 0, sizeof(h));
	h.b[0] = ISCSI_OP_TEXT_REQ | ISCSI_FLAG_IMMEDIATE;
	h.b[1] = ISCSI_FLAG_FINAL;
	bhs_set_itt(&h, itt);
	bhs_put32(&h, 20, ISCSI_RSVD_TAG);
	send_pdu(&h, data, (uint32_t)n);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(got[0].bhs.b[1], ISCSI_TEXT_CONTINUE);
	CU_ASSERT_EQUAL(got[0].dsl, 512);
	uint32_t ttt = bhs_w20(&got[0].bhs);
	CU_ASSERT_NOT_EQUAL(ttt, ISCSI_RSVD_TAG);
	/* a normal session only sees its own target */
	CU_ASSERT_TRUE(has_kv(&got[0], "TargetName=" TGT));
	CU_ASSERT_FALSE(has_kv(&got[0], "TargetName=" TGT_CHAP));
	CU_ASSERT_TRUE(has_kv(&got[0], "TargetAddress=10.0.0.1:3260,1"));
	ngot = 0;
	bhs_put32(&h, 20, ttt);
	send_pdu(&h, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(got[0].bhs.b[1], ISCSI_FLAG_FINAL);
	CU_ASSERT_EQUAL(bhs_w20(&got[0].bhs), ISCSI_RSVD_TAG);
	CU_ASSERT_TRUE(got[0].dsl > 0 && got[0].dsl < 512);
	hl_list_init(&srv->portals);
	/* keys in FFP: MaxRecvDataSegmentLength may be redeclared; others are refused */
	ngot = 0;
	n = kv(data, "MaxRecvDataSegmentLength=4096|InitialR2T=No|X-foo=1");
	bhs_set_itt(&h, ++itt);
	bhs_put32(&h, 20, ISCSI_RSVD_TAG);
	send_pdu(&h, data, (uint32_t)n);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(conn->params.max_recv_dsl_initiator, 4096);
	CU_ASSERT_TRUE(has_kv(&got[0], "InitialR2T=Reject"));
	CU_ASSERT_TRUE(has_kv(&got[0], "X-foo=NotUnderstood"));
	teardown();
}

static void test_nop_ping(void)
{
	setup();
	srv->nop_interval_s = 5;
	srv->nop_timeout_s = 10;
	login_ok(NULL);
	CU_ASSERT_TRUE(hl_timer_pending(&conn->nop_timer));
	/* idle long enough: the target pings */
	conn->last_rx_ns = hl_now_ns() - 6000000000ull;
	conn->nop_timer.fn(&conn->nop_timer);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_NOP_IN);
	CU_ASSERT_EQUAL(bhs_itt(&got[0].bhs), ISCSI_RSVD_TAG);
	uint32_t ttt = bhs_w20(&got[0].bhs);
	CU_ASSERT_NOT_EQUAL(ttt, ISCSI_RSVD_TAG);
	CU_ASSERT_EQUAL(bhs_w24(&got[0].bhs), expstatsn); /* StatSN not advanced by a ping */
	CU_ASSERT_TRUE(conn->nop_outstanding);
	/* the initiator answers: NOP-Out with ITT ffffffff and the ping's TTT, no reply to it */
	struct iscsi_bhs h;
	imm_req(&h, ISCSI_OP_NOP_OUT, ISCSI_FLAG_FINAL, ISCSI_RSVD_TAG, ttt);
	ngot = 0;
	send_pdu(&h, NULL, 0);
	pump();
	CU_ASSERT_EQUAL(ngot, 0);
	CU_ASSERT_FALSE(conn->nop_outstanding);
	/* a ping that stays unanswered past the timeout drops the connection */
	conn->last_rx_ns = hl_now_ns() - 6000000000ull;
	conn->nop_timer.fn(&conn->nop_timer);
	pump();
	CU_ASSERT_TRUE(conn->nop_outstanding);
	conn->nop_sent_ns = hl_now_ns() - 11000000000ull;
	conn->nop_timer.fn(&conn->nop_timer);
	CU_ASSERT_FALSE(conn_alive());
	teardown();
}

/*
 * The rest of a discovery login that chose CHAP, as user "disc" with secret
 * "discsecret12": CHAP_A, then the answer to the target's challenge.
 * @return the final Login Response's status.
 */
static int discovery_chap_answer(void)
{
	uint8_t ch[64], rsp[16];
	char hex[64], spec[256];

	ngot = 0;
	login_pdu(0, "CHAP_A=5");
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	const char *id_s = get_kv(&got[0], "CHAP_I"), *c_s = get_kv(&got[0], "CHAP_C");
	CU_ASSERT_FATAL(id_s && c_s);
	int clen = iscsi_chap_decode(c_s, ch, sizeof(ch));
	iscsi_chap_compute(ISCSI_CHAP_MD5, (uint8_t)atoi(id_s), "discsecret12", ch, (size_t)clen,
	                   rsp);
	iscsi_chap_encode_hex(rsp, 16, hex, sizeof(hex));
	snprintf(spec, sizeof(spec), "CHAP_N=disc|CHAP_R=%s", hex);
	ngot = 0;
	login_pdu(ISCSI_LOGIN_TRANSIT | (0 << 2) | 3, spec);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	return login_status(&got[0]);
}

static void test_discovery_chap(void)
{
	setup();
	hl_strlcpy(srv->discovery_chap.user, "disc", sizeof(srv->discovery_chap.user));
	hl_strlcpy(srv->discovery_chap.secret, "discsecret12", sizeof(srv->discovery_chap.secret));
	login_pdu(ISCSI_LOGIN_TRANSIT | (0 << 2) | 1,
	          "InitiatorName=" INI "|SessionType=Discovery|AuthMethod=None");
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(login_status(&got[0]), ISCSI_LOGIN_AUTH_FAILED);
	teardown();

	setup();
	hl_strlcpy(srv->discovery_chap.user, "disc", sizeof(srv->discovery_chap.user));
	hl_strlcpy(srv->discovery_chap.secret, "discsecret12", sizeof(srv->discovery_chap.secret));
	login_pdu(ISCSI_LOGIN_TRANSIT | (0 << 2) | 1,
	          "InitiatorName=" INI "|SessionType=Discovery|AuthMethod=CHAP");
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_TRUE(has_kv(&got[0], "AuthMethod=CHAP"));
	CU_ASSERT_EQUAL(discovery_chap_answer(), 0);
	CU_ASSERT_EQUAL(conn->state, CONN_FFP);
	CU_ASSERT_EQUAL(conn->sess->type, ISCSI_SESSION_DISCOVERY);
	teardown();
}

/*
 * Discovery CHAP changed while the server runs: a login under way keeps the
 * credentials it started with, a login that starts afterwards gets the new.
 */
static void test_discovery_chap_change(void)
{
	struct hl_iscsi_chap on = {0}, off = {0};

	hl_strlcpy(on.user, "disc", sizeof(on.user));
	hl_strlcpy(on.secret, "discsecret12", sizeof(on.secret));
	setup();
	hl_iscsi_server_set_discovery_chap(srv, &on);
	login_pdu(ISCSI_LOGIN_TRANSIT | (0 << 2) | 1,
	          "InitiatorName=" INI "|SessionType=Discovery|AuthMethod=CHAP,None");
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_TRUE(has_kv(&got[0], "AuthMethod=CHAP"));
	/* CHAP turned off in the middle: this login still completes CHAP with the old secret */
	hl_iscsi_server_set_discovery_chap(srv, &off);
	CU_ASSERT_EQUAL_FATAL(discovery_chap_answer(), 0);
	CU_ASSERT_EQUAL(conn->sess->type, ISCSI_SESSION_DISCOVERY);
	/* A new discovery login needs no authentication now... */
	P = &peers[1];
	peer_open(P);
	ngot = 0;
	login_pdu(ISCSI_LOGIN_TRANSIT | (0 << 2) | 3,
	          "InitiatorName=" INI "|SessionType=Discovery|AuthMethod=None");
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(login_status(&got[0]), 0);
	teardown();

	/* ...and when CHAP is turned on, one without it is refused. */
	setup();
	hl_iscsi_server_set_discovery_chap(srv, &on);
	login_pdu(ISCSI_LOGIN_TRANSIT | (0 << 2) | 3,
	          "InitiatorName=" INI "|SessionType=Discovery|AuthMethod=None");
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(login_status(&got[0]), ISCSI_LOGIN_AUTH_FAILED);
	teardown();
}

static void test_session_reinstatement(void)
{
	setup();
	login_ok(NULL);
	uint16_t tsih = conn->sess->tsih;
	/* a second login with the same ISID and initiator name replaces the session */
	P = &peers[1];
	peer_open(P);
	login_ok(NULL);
	CU_ASSERT_NOT_EQUAL(conn->sess->tsih, tsih);
	CU_ASSERT_TRUE(peer_alive(&peers[1]));
	CU_ASSERT_FALSE(peer_alive(&peers[0]));
	CU_ASSERT_EQUAL(nexus_gone, 1);
	/* a login naming the live session's TSIH (same CID) takes it over, keeping the TSIH */
	tsih = conn->sess->tsih;
	P = &peers[0];
	close(cfd);
	iscsi_rx_fini(&rcv);
	peer_open(P);
	{
		struct iscsi_bhs h;
		login_bhs(&h, ISCSI_LOGIN_TRANSIT | (1 << 2) | 3);
		hl_put_be16(&h.b[14], tsih);
		send_login(&h, "InitiatorName=" INI "|TargetName=" TGT "|" OPS_KEYS);
	}
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(login_status(&got[0]), 0);
	CU_ASSERT_EQUAL(hl_get_be16(&got[0].bhs.b[14]), tsih);
	CU_ASSERT_TRUE(peer_alive(&peers[0]));
	CU_ASSERT_FALSE(peer_alive(&peers[1]));
	teardown();
}

static void test_lun_reset_other_session(void)
{
	setup();
	defer_exec = true;
	/* session A (peer 1, another initiator) has a read in the scsi layer */
	login_second_initiator(&peers[1]);
	P = &peers[1];
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_READ, 0x28, 4096, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(npending, 1);
	/* session B (peer 0) resets the LUN: the answer waits for A's read */
	P = &peers[0];
	login_ok(NULL);
	struct iscsi_bhs h;
	tmf_req(&h, ISCSI_TMF_LUN_RESET, ISCSI_RSVD_TAG);
	send_pdu(&h, NULL, 0);
	pump();
	CU_ASSERT_EQUAL(ngot, 0);
	CU_ASSERT_EQUAL(peers[1].p_ngot, 0);
	fake_complete(pending[--npending]);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_TMF_RSP);
	CU_ASSERT_EQUAL(got[0].bhs.b[2], ISCSI_TMF_RSP_COMPLETE);
	CU_ASSERT_EQUAL(lu_resets, 1);
	CU_ASSERT_EQUAL(peers[1].p_ngot, 0); /* A's read was aborted: no response (TAS=0) */
	CU_ASSERT_TRUE(peer_alive(&peers[1]));
	CU_ASSERT_EQUAL(srv->pending_calls, 0);
	teardown();
}

static void send_target_reset(uint8_t fn)
{
	struct iscsi_bhs h;

	imm_req(&h, ISCSI_OP_TMF_REQ, ISCSI_FLAG_FINAL | fn, itt++, ISCSI_RSVD_TAG);
	bhs_put32(&h, 28, expstatsn);
	send_pdu(&h, NULL, 0);
}

/*
 * TARGET WARM/COLD RESET reach every initiator of the target: refused with
 * "function authorization failed" (6) unless the target allows them; then a
 * cold reset closes the other initiator's session too.
 */
static void test_target_reset_authorization(void)
{
	setup();
	login_second_initiator(&peers[1]);
	P = &peers[0];
	login_ok(NULL);
	send_target_reset(ISCSI_TMF_TARGET_COLD_RESET);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_TMF_RSP);
	CU_ASSERT_EQUAL(got[0].bhs.b[2], ISCSI_TMF_RSP_AUTH_FAILED);
	ngot = 0;
	send_target_reset(ISCSI_TMF_TARGET_WARM_RESET);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(got[0].bhs.b[2], ISCSI_TMF_RSP_AUTH_FAILED);
	CU_ASSERT_EQUAL(lu_resets, 0);
	CU_ASSERT_TRUE(peer_alive(&peers[0]));
	CU_ASSERT_TRUE(peer_alive(&peers[1]));
	CU_ASSERT_EQUAL(peers[1].p_ngot, 0);

	/* allowed (read when the request comes, so it applies to this session) */
	struct iscsi_target *t = iscsi_target_find(srv, TGT);
	CU_ASSERT_PTR_NOT_NULL_FATAL(t);
	t->allow_target_reset = true;
	ngot = 0;
	send_target_reset(ISCSI_TMF_TARGET_WARM_RESET);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(got[0].bhs.b[2], ISCSI_TMF_RSP_COMPLETE);
	CU_ASSERT_EQUAL(lu_resets, 1);
	CU_ASSERT_TRUE(peer_alive(&peers[1]));
	ngot = 0;
	send_target_reset(ISCSI_TMF_TARGET_COLD_RESET);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(got[0].bhs.b[2], ISCSI_TMF_RSP_COMPLETE);
	CU_ASSERT_FALSE(peer_alive(&peers[1]));
	CU_ASSERT_FALSE(peer_alive(&peers[0]));
	teardown();
}

/* A LUN map change reaches every session of that target, and only those. */
static void test_luns_changed_sessions(void)
{
	setup();
	login_second_initiator(&peers[1]);
	P = &peers[0];
	login_ok(NULL);
	CU_ASSERT_EQUAL(hl_iscsi_target_luns_changed(srv, TGT_CHAP), 0);
	CU_ASSERT_EQUAL(n_luns_changed, 0);
	CU_ASSERT_EQUAL(hl_iscsi_target_luns_changed(srv, TGT), 2);
	CU_ASSERT_EQUAL_FATAL(n_luns_changed, 2);
	CU_ASSERT_PTR_EQUAL(luns_changed_map, &map);
	uint64_t a = peers[0].p_conn->sess->nexus.id, b = peers[1].p_conn->sess->nexus.id;
	CU_ASSERT_TRUE((luns_changed_nexus[0] == a && luns_changed_nexus[1] == b) ||
	               (luns_changed_nexus[0] == b && luns_changed_nexus[1] == a));
	/* a session that logged out is not told */
	iscsi_conn_close(peers[1].p_conn, "test");
	run_calls();
	n_luns_changed = 0;
	CU_ASSERT_EQUAL(hl_iscsi_target_luns_changed(srv, TGT), 1);
	CU_ASSERT_EQUAL(luns_changed_nexus[0], a);
	teardown();
}

/* What the reactor does for a due timer. */
static void fire_timer(struct hl_timer *t)
{
	t->heap_idx = (size_t)-1;
	t->fn(t);
}

/*
 * An initiator that sends READs and does not read its socket: the connection
 * starts one 16 MiB READ per turn (ISCSI_RX_READ_PER_TURN) and none while
 * more than ISCSI_TX_HIGH of READ data is on its way out; the commands it
 * has received wait, in order, and start once the initiator reads.
 */
static void test_slow_reader_parks(void)
{
	enum { N = 10 };
	const uint32_t len = 16u << 20;
	static uint8_t sink[1 << 16];

	setup();
	login_ok(NULL);
	struct iscsi_conn *c = P->p_conn;
	defer_exec = true;
	for (int i = 0; i < N; i++) {
		scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_READ, 0x28, len, NULL, 0);
		itt++;
	}
	c->ev.fn(&c->ev, EPOLLIN);
	CU_ASSERT_EQUAL(nexec_total, 1); /* one turn, one large READ */
	CU_ASSERT_TRUE(c->rbuf_off < c->rbuf_len);
	CU_ASSERT_TRUE_FATAL(hl_timer_pending(&c->rx_timer));
	CU_ASSERT_EQUAL(c->ev_mask & EPOLLIN, 0); /* received bytes wait: no more reading */
	fire_timer(&c->rx_timer);
	CU_ASSERT_EQUAL(nexec_total, 2);
	CU_ASSERT_TRUE_FATAL(hl_timer_pending(&c->rx_timer));
	fire_timer(&c->rx_timer);
	CU_ASSERT_EQUAL(nexec_total, 3); /* 48 MiB on its way out: over ISCSI_TX_HIGH */
	CU_ASSERT_FALSE(hl_timer_pending(&c->rx_timer));
	/* the READs complete; the initiator still reads nothing: nothing else starts */
	while (npending)
		fake_complete(pending[--npending]);
	CU_ASSERT_TRUE(c->tx_bytes > ISCSI_TX_HIGH / 2);
	c->ev.fn(&c->ev, EPOLLIN | EPOLLOUT);
	CU_ASSERT_EQUAL(nexec_total, 3);
	CU_ASSERT_FALSE(hl_timer_pending(&c->rx_timer));
	/* the initiator reads: the rest start, a bounded number per turn */
	for (int turn = 0; turn < 100000 && (nexec_total < N || npending || c->tx_bytes); turn++) {
		int before = nexec_total;
		while (read(cfd, sink, sizeof(sink)) > 0)
			;
		c->ev.fn(&c->ev, EPOLLOUT);
		if (hl_timer_pending(&c->rx_timer))
			fire_timer(&c->rx_timer);
		CU_ASSERT_TRUE(nexec_total - before <= 2);
		while (npending)
			fake_complete(pending[--npending]);
	}
	CU_ASSERT_EQUAL(nexec_total, N);
	CU_ASSERT_EQUAL(c->tx_bytes, 0);
	CU_ASSERT_EQUAL(c->rd_inflight, 0);
	CU_ASSERT_TRUE(conn_alive());
	teardown();
}

/*
 * A 16 KiB WRITE sent (InitialR2T=Yes, MaxBurstLength 16384) and its one R2T
 * received: @return its task, still collecting data; *ttt (when not NULL)
 * the R2T's Target Transfer Tag.
 */
static struct iscsi_task *write_r2t_sent(uint32_t *ttt)
{
	struct iscsi_task *w;
	uint32_t tag;

	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_WRITE, 0x2a, 16384, NULL, 0);
	pump();
	tag = r2t_got(0, 16384);
	if (ttt)
		*ttt = tag;
	w = dout_task();
	CU_ASSERT_PTR_NOT_NULL_FATAL(w);
	return w;
}

/*
 * The dout timer, due, closes the connection: counted as silent (no data for
 * ISCSI_DATAOUT_TIMEOUT_S) or slow (past its deadline), no budget left held.
 */
static void dout_closes(uint64_t silent, uint64_t slow)
{
	struct hl_iscsi_write_stats ws;

	fire_timer(&conn->dout_timer);
	run_calls();
	CU_ASSERT_FALSE(conn_alive());
	hl_iscsi_write_stats(srv, &ws);
	CU_ASSERT_EQUAL(ws.closed_silent, silent);
	CU_ASSERT_EQUAL(ws.closed_slow, slow);
	CU_ASSERT_EQUAL(ws.held, 0);
}

/*
 * A WRITE whose R2T went unanswered for ISCSI_DATAOUT_TIMEOUT_S closes its
 * connection (on its dout timer, armed by the R2T): an initiator cannot
 * hold write budget by never sending the data it was asked for. A recent
 * R2T keeps it open.
 */
static void test_dataout_timeout(void)
{
	struct iscsi_task *w;

	setup();
	login_ok(NULL); /* InitialR2T=Yes */
	CU_ASSERT_FALSE(hl_timer_pending(&conn->dout_timer));
	w = write_r2t_sent(NULL);
	CU_ASSERT_TRUE_FATAL(hl_timer_pending(&conn->dout_timer));
	fire_timer(&conn->dout_timer); /* the R2T is fresh: nothing happens, it runs again */
	CU_ASSERT_TRUE(conn_alive());
	CU_ASSERT_TRUE(hl_timer_pending(&conn->dout_timer));
	w->dout_ns = hl_now_ns() - (ISCSI_DATAOUT_TIMEOUT_S + 1) * 1000000000ull;
	dout_closes(1, 0);
	teardown();
}

/*
 * Issue 24: 512 bytes now and then keep the "no data" close away, but not
 * the deadline: 30 s + the transfer at 256 KiB/s after its R2Ts went out.
 */
static void test_dataout_deadline(void)
{
	uint8_t buf[512] = {0};
	struct iscsi_task *w;
	uint32_t ttt;
	uint64_t before = hl_now_ns();

	setup();
	login_ok(NULL); /* MaxBurstLength 16384: one R2T */
	w = write_r2t_sent(&ttt);
	CU_ASSERT(w->wb_since_ns >= before);
	CU_ASSERT_EQUAL(w->wb_deadline_ns - w->wb_since_ns, iscsi_wb_deadline_ns(16384));
	data_out(ttt, 0, 0, buf, sizeof(buf), false); /* a trickle */
	pump();
	CU_ASSERT_EQUAL(w->received, 512);
	fire_timer(&conn->dout_timer);
	CU_ASSERT_TRUE(conn_alive());
	/* its data has come, a little: only the deadline is past */
	w->wb_deadline_ns = hl_now_ns() - 1;
	dout_closes(0, 1);
	teardown();
}

/*
 * A login refused at a session cap stores its time under the server's lock
 * (any reactor); server_tick reads the clock before it takes that lock. A
 * tick whose time is earlier than the last refusal must not wrap its age
 * and end the episode in the middle of the refusals (after which the next
 * one logs its start again: two lines per tick under a flood).
 */
static void test_episode_time_read_before_the_lock(void)
{
	uint64_t t = hl_now_ns();

	setup();
	pthread_mutex_lock(&srv->lock);
	CU_ASSERT_TRUE(iscsi_episode_hit(&srv->sess_refusing, t - 1000000ull));
	/* refused on another reactor, at t + 1 ms */
	CU_ASSERT_FALSE(iscsi_episode_hit(&srv->sess_refusing, t + 1000000ull));
	pthread_mutex_unlock(&srv->lock);
	iscsi_limits_tick(srv, t); /* read at t, before the refusal took the lock */
	CU_ASSERT_TRUE(srv->sess_refusing.on);
	iscsi_limits_tick(srv, t + 1000000ull + ISCSI_EPISODE_QUIET_S * 1000000000ull - 1);
	CU_ASSERT_TRUE(srv->sess_refusing.on);
	iscsi_limits_tick(srv, t + 1000000ull + ISCSI_EPISODE_QUIET_S * 1000000000ull);
	CU_ASSERT_FALSE(srv->sess_refusing.on);
	CU_ASSERT_EQUAL(srv->sess_refusing.count, 2);
	teardown();
}

/*
 * The server's destroy waits a bounded time for its calls and connections
 * (wait_idle) on srv->cond: on the monotonic clock, so that a step of the
 * wall clock (NTP, a VM's time sync after a pause) neither ends that wait
 * at once nor stretches it. A monotonic deadline 200 ms ahead is waited.
 */
static void test_destroy_wait_is_monotonic(void)
{
	struct timespec ts;
	uint64_t t0;

	setup();
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_nsec += 200000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	t0 = hl_now_ns();
	pthread_mutex_lock(&srv->lock);
	CU_ASSERT_EQUAL(pthread_cond_timedwait(&srv->cond, &srv->lock, &ts), ETIMEDOUT);
	pthread_mutex_unlock(&srv->lock);
	CU_ASSERT_TRUE(hl_now_ns() - t0 >= 150000000ull);
	teardown();
}

static const struct hl_test tests[] = {
    {"a WRITE whose data never comes closes its connection", test_dataout_timeout},
    {"a WRITE whose data trickles closes its connection at its deadline", test_dataout_deadline},
    {"a connection that cannot send stops taking READs", test_slow_reader_parks},
    {"CmdSN window, NOP-Out during stalled I/O", test_cmdsn_window},
    {"CmdSN window closes when the queue is full", test_cmdsn_window_full},
    {"CmdSN window: libiscsi-like initiator, writes with immediate data, slow LU", test_cmdsn_window_initiator_model},
    {"CmdSN window: an advertised MaxCmdSN is honoured", test_cmdsn_window_promise},
    {"Reject, digests, framing loss", test_reject_and_digests},
    {"data digest error: Reject; a CmdSN hole closes the connection", test_digest_error_cmdsn_gap},
    {"TMF: abort waits for the task; LUN reset", test_tmf_abort_waits},
    {"logout closes", test_logout},
    {"logout waits for the commands still executing", test_logout_waits_for_commands},
    {"a target-requested logout: Async Message event 1", test_request_logout},
    {"text: SendTargets continuation in a normal session", test_text_continuation},
    {"NOP-In ping on idle, answer, timeout", test_nop_ping},
    {"discovery CHAP", test_discovery_chap},
    {"discovery CHAP changed while running", test_discovery_chap_change},
    {"session and connection reinstatement", test_session_reinstatement},
    {"LUN reset reaches other sessions and waits for them", test_lun_reset_other_session},
    {"TARGET WARM/COLD RESET: function authorization failed unless allowed", test_target_reset_authorization},
    {"LUN map changed: every session of the target is told", test_luns_changed_sessions},
    {"a limit episode never ends on a time read before the lock", test_episode_time_read_before_the_lock},
    {"the server's destroy waits on the monotonic clock", test_destroy_wait_is_monotonic},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("iscsi_session_flow", tests);
}
