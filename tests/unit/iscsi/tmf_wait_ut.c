/*
 * tmf_wait_ut.c - a task management function is answered only once every
 * task it reaches has left the scsi layer, also a task an earlier TMF of
 * the session aborted already. Before, a task pointed at one waiting TMF
 * and a later one skipped it: a LUN RESET that followed an ABORT TASK
 * (Linux's error handler escalating when the abort takes long) answered
 * "function complete" at once while the aborted WRITE was still in the LU,
 * so the initiator could retry it, or write newer data there, and the old
 * WRITE reach the medium after. A task that arrived after the TMF does not
 * count for it, whoever aborts it.
 */
#include "session_ut_lib.h"

/* Send TMF fn (on the task ref for ABORT TASK): @return its ITT. */
static uint32_t tmf(uint8_t fn, uint32_t ref)
{
	struct iscsi_bhs h;

	tmf_req(&h, fn, ref);
	send_pdu(&h, NULL, 0);
	pump();
	return bhs_itt(&h);
}

static void tmf_answered(int i, uint32_t tag, uint8_t response)
{
	CU_ASSERT_EQUAL(bhs_opcode(&got[i].bhs), ISCSI_OP_TMF_RSP);
	CU_ASSERT_EQUAL(bhs_itt(&got[i].bhs), tag);
	CU_ASSERT_EQUAL(got[i].bhs.b[2], response);
}

static void test_lun_reset_after_abort_task(void)
{
	setup();
	login_ok(NULL);
	defer_exec = true;
	uint32_t w = held_write();
	uint32_t abort = tmf(ISCSI_TMF_ABORT_TASK, w);
	CU_ASSERT_EQUAL(ngot, 0); /* the WRITE is still in the LU */
	uint32_t reset = tmf(ISCSI_TMF_LUN_RESET, ISCSI_RSVD_TAG);
	CU_ASSERT_EQUAL(ngot, 0); /* ... so the reset waits too */
	CU_ASSERT_EQUAL(lu_resets, 0);
	held_complete(w);
	CU_ASSERT_EQUAL_FATAL(ngot, 2); /* both now, in order; no response for the WRITE */
	tmf_answered(0, abort, ISCSI_TMF_RSP_COMPLETE);
	tmf_answered(1, reset, ISCSI_TMF_RSP_COMPLETE);
	CU_ASSERT_EQUAL(lu_resets, 1);
	teardown();
}

static void test_abort_task_twice(void)
{
	setup();
	login_ok(NULL);
	defer_exec = true;
	uint32_t w = held_write();
	uint32_t first = tmf(ISCSI_TMF_ABORT_TASK, w);
	uint32_t second = tmf(ISCSI_TMF_ABORT_TASK, w);
	uint32_t set = tmf(ISCSI_TMF_ABORT_TASK_SET, ISCSI_RSVD_TAG);
	CU_ASSERT_EQUAL(ngot, 0);
	held_complete(w);
	CU_ASSERT_EQUAL_FATAL(ngot, 3);
	tmf_answered(0, first, ISCSI_TMF_RSP_COMPLETE);
	tmf_answered(1, second, ISCSI_TMF_RSP_COMPLETE);
	tmf_answered(2, set, ISCSI_TMF_RSP_COMPLETE);
	teardown();
}

static void test_later_task_does_not_count(void)
{
	setup();
	login_ok(NULL);
	defer_exec = true;
	uint32_t a = held_write();
	uint32_t reset = tmf(ISCSI_TMF_LUN_RESET, ISCSI_RSVD_TAG);
	CU_ASSERT_EQUAL(ngot, 0);
	/* a WRITE after the reset, aborted by its own ABORT TASK, leaves first */
	uint32_t b = held_write();
	uint32_t abort_b = tmf(ISCSI_TMF_ABORT_TASK, b);
	CU_ASSERT_EQUAL(ngot, 0);
	held_complete(b);
	CU_ASSERT_EQUAL_FATAL(ngot, 1); /* only its abort: the reset still waits for a */
	tmf_answered(0, abort_b, ISCSI_TMF_RSP_COMPLETE);
	ngot = 0;
	held_complete(a);
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	tmf_answered(0, reset, ISCSI_TMF_RSP_COMPLETE);
	teardown();
}

/*
 * Initiator A aborts its own WRITE (still in the LU); initiator B resets
 * the LUN: B's answer waits for A's WRITE too (the reset found it aborted
 * already and skipped it). The same scan serves PREEMPT AND ABORT.
 */
static void test_other_session_reset_after_abort_task(void)
{
	setup();
	defer_exec = true;
	login_second_initiator(&peers[1]);
	P = &peers[1];
	uint32_t w = held_write();
	uint32_t abort = tmf(ISCSI_TMF_ABORT_TASK, w);
	CU_ASSERT_EQUAL(ngot, 0);
	P = &peers[0];
	login_ok(NULL);
	uint32_t reset = tmf(ISCSI_TMF_LUN_RESET, ISCSI_RSVD_TAG);
	CU_ASSERT_EQUAL(ngot, 0); /* A's WRITE is still in the LU */
	CU_ASSERT_EQUAL(lu_resets, 0);
	P = &peers[1];
	held_complete(w);
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	tmf_answered(0, abort, ISCSI_TMF_RSP_COMPLETE);
	P = &peers[0];
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	tmf_answered(0, reset, ISCSI_TMF_RSP_COMPLETE);
	CU_ASSERT_EQUAL(lu_resets, 1);
	CU_ASSERT_EQUAL(srv->pending_calls, 0);
	teardown();
}

/* hl_iscsi_abort_nexuses' done(): how often it ran */
static int aborts_done;

static void abort_done(void *arg)
{
	aborts_done++;
}

/*
 * Two cross-session aborts wait for one task: initiator B resets the LUN
 * while A's WRITE is in the LU, then resets it again, and a PREEMPT AND
 * ABORT made through another gateway aborts A's nexus. Each answers only
 * once the WRITE is gone. Before, a task held one waiting reset: the
 * second reset and the preempt found it taken and answered at once.
 */
static void test_two_resets_wait_for_one_task(void)
{
	setup();
	defer_exec = true;
	aborts_done = 0;
	login_second_initiator(&peers[1]);
	P = &peers[1];
	uint32_t w = held_write();
	uint64_t a_nexus = conn->sess->nexus.id;
	P = &peers[0];
	login_ok(NULL);
	uint32_t first = tmf(ISCSI_TMF_LUN_RESET, ISCSI_RSVD_TAG);
	uint32_t second = tmf(ISCSI_TMF_LUN_RESET, ISCSI_RSVD_TAG);
	CU_ASSERT_EQUAL_FATAL(hl_iscsi_abort_nexuses(srv, fake_lu, &a_nexus, 1, abort_done, NULL),
	                      0);
	pump();
	CU_ASSERT_EQUAL(ngot, 0); /* A's WRITE is still in the LU: neither reset answers */
	CU_ASSERT_EQUAL(aborts_done, 0);
	P = &peers[1];
	held_complete(w);
	CU_ASSERT_EQUAL(ngot, 0); /* no response for the aborted WRITE */
	P = &peers[0];
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 2);
	tmf_answered(0, first, ISCSI_TMF_RSP_COMPLETE);
	tmf_answered(1, second, ISCSI_TMF_RSP_COMPLETE);
	CU_ASSERT_EQUAL(aborts_done, 1);
	CU_ASSERT_EQUAL(srv->pending_calls, 0);
	teardown();
}

/*
 * A's connection drops while its WRITE is in the LU; B's LUN RESET waits
 * for that WRITE too. Before, a reset only reached connections in the full
 * feature phase or logging out, and answered while the closed session's
 * WRITE could still reach the medium after it.
 */
static void test_reset_waits_for_closed_session(void)
{
	setup();
	defer_exec = true;
	login_second_initiator(&peers[1]);
	P = &peers[1];
	uint32_t w = held_write();
	iscsi_conn_close(conn, "test: connection lost");
	P = &peers[0];
	login_ok(NULL);
	uint32_t reset = tmf(ISCSI_TMF_LUN_RESET, ISCSI_RSVD_TAG);
	CU_ASSERT_EQUAL(ngot, 0); /* A's WRITE is still in the LU */
	held_complete(w);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	tmf_answered(0, reset, ISCSI_TMF_RSP_COMPLETE);
	CU_ASSERT_EQUAL(srv->pending_calls, 0);
	teardown();
}

static const struct hl_test tests[] = {
    {"a LUN RESET waits for a closed session's task", test_reset_waits_for_closed_session},
    {"two resets and a preempt from elsewhere all wait for one task",
     test_two_resets_wait_for_one_task},
    {"another session's LUN RESET waits for a task aborted already",
     test_other_session_reset_after_abort_task},
    {"a LUN RESET after an ABORT TASK waits for the task", test_lun_reset_after_abort_task},
    {"ABORT TASK twice, then ABORT TASK SET: all wait", test_abort_task_twice},
    {"a task that came after the TMF does not count for it", test_later_task_does_not_count},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("iscsi_tmf_wait", tests);
}
