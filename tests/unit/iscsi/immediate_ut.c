/*
 * immediate_ut.c - SCSI commands sent as immediate (I bit) in the full
 * feature phase. They take no CmdSN and so no slot of the window
 * (ISCSI_QUEUE_DEPTH), and nothing else counted them: an initiator could
 * keep as many in the scsi layer as it liked, each with a task and
 * whatever its command holds while it runs (a VERIFY or WRITE SAME's 1 MiB
 * buffer, an UNMAP's descriptors), 48 bytes of PDU apiece. Now a
 * connection runs at most ISCSI_QUEUE_DEPTH of them besides its window;
 * one more is answered TASK SET FULL and reaches nothing.
 */
#include "session_ut_lib.h"

/* An immediate SCSI command without data (TEST UNIT READY), with the next ITT. */
static void send_immediate_tur(void)
{
	struct iscsi_bhs h;

	memset(&h, 0, sizeof(h));
	h.b[0] = ISCSI_OP_SCSI_CMD | ISCSI_FLAG_IMMEDIATE;
	h.b[1] = ISCSI_FLAG_FINAL | HL_TASK_SIMPLE;
	bhs_set_itt(&h, ++itt);
	bhs_put32(&h, 24, cmdsn); /* immediate: the current CmdSN, not consumed */
	bhs_put32(&h, 28, expstatsn);
	send_pdu(&h, NULL, 0);
}

/* Count the SCSI Responses in got with status st, and empty got. */
static unsigned take_responses(uint8_t st)
{
	unsigned n = 0;

	for (int i = 0; i < ngot; i++)
		if (bhs_opcode(&got[i].bhs) == ISCSI_OP_SCSI_RSP && got[i].bhs.b[3] == st)
			n++;
	ngot = 0;
	return n;
}

static void test_immediate_commands_are_bounded(void)
{
	const unsigned sent = 2 * ISCSI_QUEUE_DEPTH + 40;
	unsigned full = 0;

	setup();
	login_ok(NULL);
	defer_exec = true; /* the LU holds every command until the test completes it */
	for (unsigned i = 0; i < sent; i += 32) {
		for (unsigned k = 0; k < 32 && i + k < sent; k++)
			send_immediate_tur();
		pump();
		full += take_responses(HL_SAM_TASK_SET_FULL);
	}
	CU_ASSERT_EQUAL(npending, ISCSI_QUEUE_DEPTH);
	CU_ASSERT_EQUAL(nexec_total, ISCSI_QUEUE_DEPTH);
	CU_ASSERT_EQUAL(full, sent - ISCSI_QUEUE_DEPTH);
	CU_ASSERT_TRUE(conn_alive());

	/* the window is the window's still: a queued command gets its slot */
	scsi_cmd(ISCSI_FLAG_FINAL, 0x00, 0, NULL, 0);
	pump();
	CU_ASSERT_EQUAL(npending, ISCSI_QUEUE_DEPTH + 1);
	CU_ASSERT_EQUAL(ngot, 0);

	/* one immediate command done (the first; the last is the queued one): room for one more */
	struct hl_scsi_cmd *first = pending[0];
	pending[0] = pending[--npending];
	fake_complete(first);
	pump();
	CU_ASSERT_EQUAL(take_responses(HL_SAM_GOOD), 1);
	send_immediate_tur();
	send_immediate_tur();
	pump();
	CU_ASSERT_EQUAL(npending, ISCSI_QUEUE_DEPTH + 1);
	CU_ASSERT_EQUAL(take_responses(HL_SAM_TASK_SET_FULL), 1);

	/* all done: every one answered once */
	unsigned good = 0;
	while (npending) {
		for (unsigned k = 0; k < 32 && npending; k++)
			fake_complete(pending[--npending]);
		pump();
		good += take_responses(HL_SAM_GOOD);
	}
	CU_ASSERT_EQUAL(good, ISCSI_QUEUE_DEPTH + 1);
	CU_ASSERT_EQUAL(conn->nactive, 0);
	teardown();
}

/* An immediate WRITE with immediate data over the bound: refused, its buffer given back. */
static void test_immediate_write_over_the_bound(void)
{
	uint8_t data[4096];
	struct iscsi_bhs h;

	setup();
	login_ok(NULL);
	defer_exec = true;
	for (unsigned i = 0; i < ISCSI_QUEUE_DEPTH; i += 32) {
		for (unsigned k = 0; k < 32; k++)
			send_immediate_tur();
		pump();
		ngot = 0;
	}
	CU_ASSERT_EQUAL(npending, ISCSI_QUEUE_DEPTH);
	uint64_t bufs = conn->buf_bytes;
	memset(data, 0xab, sizeof(data));
	memset(&h, 0, sizeof(h));
	h.b[0] = ISCSI_OP_SCSI_CMD | ISCSI_FLAG_IMMEDIATE;
	h.b[1] = ISCSI_FLAG_FINAL | ISCSI_CMD_WRITE | HL_TASK_SIMPLE;
	bhs_set_itt(&h, ++itt);
	bhs_put32(&h, 20, sizeof(data));
	bhs_put32(&h, 24, cmdsn);
	bhs_put32(&h, 28, expstatsn);
	h.b[32] = 0x2a;
	send_pdu(&h, data, sizeof(data));
	pump();
	CU_ASSERT_EQUAL(take_responses(HL_SAM_TASK_SET_FULL), 1);
	CU_ASSERT_EQUAL(npending, ISCSI_QUEUE_DEPTH);
	CU_ASSERT_EQUAL(conn->buf_bytes, bufs);
	CU_ASSERT_EQUAL(conn->wb_promised, 0);
	CU_ASSERT_TRUE(conn_alive());
	teardown();
}

static const struct hl_test tests[] = {
    {"immediate SCSI commands: at most a window's worth run", test_immediate_commands_are_bounded},
    {"an immediate WRITE over the bound gives its buffer back",
     test_immediate_write_over_the_bound},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("iscsi_immediate", tests);
}
