/*
 * tx_pdus_ut.c - an initiator that sends commands and never reads their
 * responses. What a connection may have queued to send was counted in
 * bytes on the wire only (ISCSI_TX_HIGH, 32 MiB): a 48-byte SCSI Response
 * costs a 120-byte queue entry, and one with sense also keeps its task
 * (over 1 KiB) until it is sent, so about 470,000 CHECK CONDITIONs fit
 * under 32 MiB of wire bytes: some 600 MiB of hotlund's memory for one
 * connection, from 48-byte commands that each free their window slot at
 * once. Now the PDUs queued count too (ISCSI_TX_PDUS_HIGH): above it the
 * connection takes no further PDU until its initiator reads. And while it
 * takes none, the WRITE data it does not read is not late.
 */
#include "session_ut_lib.h"

static void fire_timer(struct hl_timer *t)
{
	t->heap_idx = (size_t)-1;
	t->fn(t);
}

static unsigned txq_len(struct iscsi_conn *c)
{
	struct iscsi_tx *tx;
	unsigned n = 0;

	hl_list_for_each_entry(tx, &c->txq, link) n++;
	return n;
}

/* A READ larger than hotlund buffers: answered CHECK CONDITION at once, by iSCSI itself. */
static void oversized_read(uint8_t *pdu)
{
	struct iscsi_bhs h;

	memset(&h, 0, sizeof(h));
	h.b[0] = ISCSI_OP_SCSI_CMD;
	h.b[1] = ISCSI_FLAG_FINAL | ISCSI_CMD_READ | HL_TASK_SIMPLE;
	bhs_set_itt(&h, ++itt);
	bhs_put32(&h, 20, HL_SCSI_MAX_XFER + 512);
	bhs_put32(&h, 24, cmdsn++);
	bhs_put32(&h, 28, expstatsn);
	h.b[32] = 0x28;
	memcpy(pdu, h.b, ISCSI_BHS_LEN);
}

static void test_unread_responses_are_bounded(void)
{
	enum { BATCH = 256, MAX_SENT = 600000 };
	static uint8_t buf[BATCH * ISCSI_BHS_LEN];
	static uint8_t sink[1 << 16];
	unsigned sent = 0;

	setup();
	login_ok(NULL);
	struct iscsi_conn *c = P->p_conn;
	/* the initiator writes while hotlund reads; it never reads itself */
	while (sent < MAX_SENT) {
		for (int i = 0; i < BATCH; i++)
			oversized_read(buf + i * ISCSI_BHS_LEN);
		ssize_t n = write(cfd, buf, sizeof(buf));
		if (n != (ssize_t)sizeof(buf))
			break; /* hotlund stopped reading: the socket is full */
		sent += BATCH;
		c->ev.fn(&c->ev, EPOLLIN | EPOLLOUT);
		if (hl_timer_pending(&c->rx_timer))
			fire_timer(&c->rx_timer);
	}
	CU_ASSERT_TRUE(sent < MAX_SENT);
	CU_ASSERT_TRUE(txq_len(c) <= ISCSI_TX_PDUS_HIGH + 1);
	CU_ASSERT_TRUE(c->ntasks <= ISCSI_TX_PDUS_HIGH + 1);
	CU_ASSERT_EQUAL(c->ev_mask & EPOLLIN, 0);
	CU_ASSERT_TRUE(conn_alive());

	/* the initiator reads: everything it sent is answered, and the queue empties */
	for (int turn = 0; turn < 100000 && (c->rbuf_off < c->rbuf_len || txq_len(c)); turn++) {
		while (read(cfd, sink, sizeof(sink)) > 0)
			;
		c->ev.fn(&c->ev, EPOLLIN | EPOLLOUT);
		if (hl_timer_pending(&c->rx_timer))
			fire_timer(&c->rx_timer);
	}
	while (read(cfd, sink, sizeof(sink)) > 0)
		;
	CU_ASSERT_EQUAL(txq_len(c), 0);
	CU_ASSERT_EQUAL(c->tx_bytes, 0);
	CU_ASSERT_EQUAL(c->nactive, 0);
	CU_ASSERT_TRUE(conn_alive());
	teardown();
}

/*
 * Logged in, a WRITE of 8 KiB owes all its data (its R2T in *ttt), and
 * three 16 MiB READs held in the LU have stopped our reading (over
 * ISCSI_TX_HIGH). @return the WRITE's task; its ITT in *w_itt.
 */
static struct iscsi_task *write_owing_reading_paused(uint32_t *w_itt, uint32_t *ttt)
{
	setup();
	login_ok(NULL);
	defer_exec = true;
	*w_itt = itt;
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_WRITE, 0x2a, 8192, NULL, 0);
	itt++;
	pump();
	*ttt = r2t_got(0, 8192);
	struct iscsi_task *w = dout_task();
	CU_ASSERT_PTR_NOT_NULL_FATAL(w);
	for (int i = 0; i < 3; i++) {
		scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_READ, 0x28, HL_SCSI_MAX_XFER, NULL, 0);
		itt++;
		pump();
	}
	CU_ASSERT_EQUAL_FATAL(npending, 3);
	CU_ASSERT_TRUE_FATAL(conn->rd_inflight > ISCSI_TX_HIGH);
	CU_ASSERT_TRUE_FATAL(conn->rx_paused_ns != 0); /* reading paused */
	return w;
}

/*
 * Reading paused for a full send queue must not time out a WRITE whose
 * Data-Out the initiator has sent: it waits in our socket, unread. Three
 * 16 MiB READs held in the LU put the connection over ISCSI_TX_HIGH, a
 * WRITE's Data-Out arrives meanwhile, and its silence passes
 * ISCSI_DATAOUT_TIMEOUT_S: before, c->dout_timer closed the connection
 * ("Data-Out timeout"). Now the timer does not judge while we do not
 * read, and the time paused does not count as the initiator's silence.
 */
static void test_paused_reading_stops_dout_timer(void)
{
	uint8_t data[8192];
	uint32_t w_itt, ttt;
	struct iscsi_task *w = write_owing_reading_paused(&w_itt, &ttt);

	/* the initiator sends the WRITE's data; we do not read it */
	uint32_t saved = itt;
	itt = w_itt;
	memset(data, 0x5a, sizeof(data));
	data_out(ttt, 0, 0, data, sizeof(data), true);
	itt = saved;
	pump();
	CU_ASSERT_EQUAL(w->received, 0);
	/* the pause has lasted past the silence limit */
	uint64_t age = (ISCSI_DATAOUT_TIMEOUT_S + 1) * 1000000000ull;
	w->dout_ns -= age;
	conn->rx_paused_ns -= age;
	CU_ASSERT_TRUE_FATAL(hl_timer_pending(&conn->dout_timer));
	fire_timer(&conn->dout_timer);
	/* (a closed connection stays listed while its READs are in the LU) */
	CU_ASSERT_EQUAL_FATAL(conn->state, CONN_FFP);
	CU_ASSERT_TRUE(hl_timer_pending(&conn->dout_timer)); /* it looks again later */

	/* the READs end (512 bytes each): reading resumes, the pause did not count */
	fake_xfer_len = 512;
	while (npending)
		fake_complete(pending[--npending]);
	CU_ASSERT_TRUE(w->dout_ns >= hl_now_ns() - 1000000000ull);
	if (hl_timer_pending(&conn->dout_timer))
		fire_timer(&conn->dout_timer);
	CU_ASSERT_EQUAL_FATAL(conn->state, CONN_FFP);
	pump();
	CU_ASSERT_EQUAL(npending, 1); /* the WRITE, its data in, reached the LU */
	CU_ASSERT_EQUAL(conn->state, CONN_FFP);
	teardown();
}

/*
 * ... but only up to ISCSI_PAUSE_CREDIT_MAX_NS in all: the initiator fills
 * the send queue itself (it stops reading our Data-In), so a pause that
 * never ends, or one it renews, must not keep a silent WRITE's budget for
 * ever. A pause past the credit and the silence limit: the connection is
 * closed for the silent WRITE (before, the whole pause was given back).
 */
static void test_paused_credit_is_bounded(void)
{
	uint32_t w_itt, ttt;
	struct iscsi_task *w = write_owing_reading_paused(&w_itt, &ttt);
	/* the initiator sends nothing for the WRITE; the pause outlasts the credit */
	uint64_t age = ISCSI_PAUSE_CREDIT_MAX_NS + (ISCSI_DATAOUT_TIMEOUT_S + 1) * 1000000000ull;
	w->dout_ns -= age;
	conn->rx_paused_ns -= age;
	fake_xfer_len = 512;
	while (npending)
		fake_complete(pending[--npending]);
	CU_ASSERT_EQUAL(w->paused_credit_ns, ISCSI_PAUSE_CREDIT_MAX_NS);
	if (hl_timer_pending(&conn->dout_timer))
		fire_timer(&conn->dout_timer);
	CU_ASSERT_NOT_EQUAL(conn->state, CONN_FFP); /* closed: the WRITE was silent too long */
	teardown();
}

static const struct hl_test tests[] = {
    {"the time given back for read pauses is bounded", test_paused_credit_is_bounded},
    {"reading paused for a full send queue stops the Data-Out timer",
     test_paused_reading_stops_dout_timer},
    {"responses an initiator does not read are bounded in number",
     test_unread_responses_are_bounded},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("iscsi_tx_pdus", tests);
}
