/*
 * reinstate_fence_ut.c - a login that reinstates a session (same
 * initiator, ISID and target) is answered only once every command of the
 * session it replaces has left the scsi layer, also when that session's
 * connection had closed already; past ISCSI_FENCE_TIMEOUT_S it fails with
 * 0x0301 instead. Before, the old session was closed and the new login
 * answered at once while the old WRITEs were still on their way to the
 * origin: hotlun's own front (src/origin/iscsi_isid.c) counts on a SAN
 * that answers the reinstating login only after them to fence a dead
 * run's writes.
 */
#include "session_ut_lib.h"

#include "fail_malloc.h" /* linked with -Wl,--wrap=malloc */

/* Peer p logs in with the same initiator name and ISID as peers[0] (login_ok). */
static void reinstate_start(struct peer *p)
{
	char spec[2048];
	struct peer *saved = P;

	P = p;
	peer_open(P);
	snprintf(spec, sizeof(spec), "InitiatorName=%s|TargetName=%s|SessionType=Normal|%s", INI,
	         TGT, OPS_KEYS);
	login_pdu(ISCSI_LOGIN_TRANSIT | (1 << 2) | 3, spec);
	pump();
	P = saved;
}

static void test_reinstating_login_waits(void)
{
	setup();
	login_ok(NULL);
	defer_exec = true;
	uint32_t w1 = held_write();
	uint32_t w2 = held_write();
	reinstate_start(&peers[1]);
	/* the old session is closed (kept while its WRITEs are in the LU) ... */
	CU_ASSERT_EQUAL(peers[0].p_conn->state, CONN_CLOSED);
	P = &peers[1];
	CU_ASSERT_EQUAL(ngot, 0); /* ... but its WRITEs are still in the LU */
	CU_ASSERT_EQUAL(conn->state, CONN_LOGIN);
	held_complete(w1);
	CU_ASSERT_EQUAL(ngot, 0);
	held_complete(w2);
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_LOGIN_RSP);
	CU_ASSERT_EQUAL(login_status(&got[0]), 0);
	CU_ASSERT_EQUAL(conn->state, CONN_FFP);
	CU_ASSERT_EQUAL(srv->pending_calls, 0);
	teardown();
}

/* The old connection dropped before the new login: its commands still count. */
static void test_closed_session_fenced(void)
{
	setup();
	login_ok(NULL);
	defer_exec = true;
	uint32_t w = held_write();
	iscsi_conn_close(conn, "test: connection lost");
	CU_ASSERT_TRUE(peer_alive(&peers[0])); /* kept while its WRITE is in the LU */
	reinstate_start(&peers[1]);
	P = &peers[1];
	CU_ASSERT_EQUAL(ngot, 0);
	held_complete(w);
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(login_status(&got[0]), 0);
	teardown();
}

/* The LU never answers: the login fails with 0x0301 after the bound, not in silence. */
static void test_fence_timeout(void)
{
	setup();
	login_ok(NULL);
	defer_exec = true;
	held_write();
	reinstate_start(&peers[1]);
	P = &peers[1];
	CU_ASSERT_EQUAL_FATAL(ngot, 0);
	CU_ASSERT_TRUE(hl_timer_pending(&conn->fence_timer));
	conn->fence_timer.fn(&conn->fence_timer); /* ISCSI_FENCE_TIMEOUT_S later */
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_LOGIN_RSP);
	CU_ASSERT_EQUAL(login_status(&got[0]), ISCSI_LOGIN_SERVICE_UNAVAILABLE);
	CU_ASSERT_FALSE(peer_alive(&peers[1]));
	teardown(); /* the WRITE completes: the fence goes without its login */
}

/* A login of another ISID waits for nothing. */
static void test_other_nexus_not_fenced(void)
{
	static const uint8_t isid2[6] = {0x80, 0x99, 0x99, 0x99, 0x00, 0x02};
	struct iscsi_bhs h;

	setup();
	login_ok(NULL);
	defer_exec = true;
	held_write();
	P = &peers[1];
	peer_open(P);
	login_bhs(&h, ISCSI_LOGIN_TRANSIT | (1 << 2) | 3);
	memcpy(&h.b[8], isid2, 6);
	send_login(&h, "InitiatorName=" INI "|TargetName=" TGT "|" OPS_KEYS);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(login_status(&got[0]), 0);
	CU_ASSERT_TRUE(peer_alive(&peers[0]));
	teardown();
}

/* Peer p's connection takes one turn: what it reads is handled, no queued call runs. */
static void one_turn(struct peer *p)
{
	p->p_conn->ev.fn(&p->p_conn->ev, EPOLLIN | EPOLLOUT);
}

/*
 * With no other session of its I_T nexus, registered or with commands
 * left, a login has nothing to wait for: it enters FFP in the turn that
 * read it, with no fence round through the reactors (a login storm of
 * 4,096 sessions spent 11% of hotlund's CPU in fence scans that found
 * nothing).
 */
static void test_fresh_nexus_no_fence(void)
{
	char spec[2048];

	setup();
	snprintf(spec, sizeof(spec), "InitiatorName=%s|TargetName=%s|SessionType=Normal|%s", INI,
	         TGT, OPS_KEYS);
	login_pdu(ISCSI_LOGIN_TRANSIT | (1 << 2) | 3, spec);
	one_turn(P);
	CU_ASSERT_PTR_NULL(conn->fence);
	CU_ASSERT_FALSE(hl_timer_pending(&conn->fence_timer));
	CU_ASSERT_EQUAL(conn->state, CONN_FFP);
	CU_ASSERT_EQUAL(srv->pending_calls, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(login_status(&got[0]), 0);
	teardown();
}

/* ... nor once the old session's last command has ended and its connection is gone. */
static void test_ended_session_no_fence(void)
{
	char spec[2048];

	setup();
	login_ok(NULL);
	defer_exec = true;
	uint32_t w = held_write();
	iscsi_conn_close(conn, "test: connection lost");
	held_complete(w);
	CU_ASSERT_FALSE(peer_alive(&peers[0]));
	P = &peers[1];
	peer_open(P);
	snprintf(spec, sizeof(spec), "InitiatorName=%s|TargetName=%s|SessionType=Normal|%s", INI,
	         TGT, OPS_KEYS);
	login_pdu(ISCSI_LOGIN_TRANSIT | (1 << 2) | 3, spec);
	one_turn(P);
	CU_ASSERT_PTR_NULL(conn->fence);
	CU_ASSERT_EQUAL(conn->state, CONN_FFP);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(login_status(&got[0]), 0);
	teardown();
}

/*
 * The kill of a replaced session cannot be lost to a shortage: before, it
 * was a malloc'd request handed to hl_reactor_call, and when either failed
 * the old connection stayed in full feature phase although its session was
 * replaced. Here no reactor call can be queued (the ring cannot grow): the
 * old connection is closed all the same, and the fence, whose own calls
 * fail, does not pass as clean: the login fails at its timer (0x0301).
 */
static void test_reinstate_kill_needs_no_queue_memory(void)
{
	setup();
	login_ok(NULL);
	fake_call_enomem = true;
	reinstate_start(&peers[1]);
	fake_call_enomem = false;
	CU_ASSERT_FALSE(peer_alive(&peers[0])); /* closed and gone, no longer in FFP */
	P = &peers[1];
	CU_ASSERT_EQUAL_FATAL(ngot, 0);
	CU_ASSERT_TRUE_FATAL(hl_timer_pending(&conn->fence_timer));
	conn->fence_timer.fn(&conn->fence_timer);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(login_status(&got[0]), ISCSI_LOGIN_SERVICE_UNAVAILABLE);
	teardown();
}

/* ... nor to a failed malloc: the administrator removes the target (force). */
static void test_admin_kill_needs_no_malloc(void)
{
	setup();
	login_ok(NULL);
	CU_ASSERT_EQUAL(conn->state, CONN_FFP);
	fail_malloc_set(1);
	int rc = hl_iscsi_target_remove(srv, TGT, true);
	fail_malloc_set(0);
	CU_ASSERT_EQUAL(rc, 0);
	run_calls();
	CU_ASSERT_FALSE(peer_alive(&peers[0]));
	CU_ASSERT_EQUAL(srv->pending_calls, 0);
	teardown();
}

/* A kill still queued when its connection goes first is taken back, not run on freed memory. */
static void test_kill_cancelled_by_free(void)
{
	setup();
	login_ok(NULL);
	CU_ASSERT_EQUAL(hl_iscsi_target_remove(srv, TGT, true), 0);
	CU_ASSERT_EQUAL(srv->pending_calls, 1);
	CU_ASSERT_EQUAL(ncalls, 1);
	iscsi_conn_close(conn, "test: peer gone before the kill ran");
	CU_ASSERT_FALSE(peer_alive(&peers[0]));
	CU_ASSERT_EQUAL(ncalls, 0);
	CU_ASSERT_EQUAL(srv->pending_calls, 0);
	teardown();
}

static const struct hl_test tests[] = {
    {"a reinstating login waits for the old session's commands", test_reinstating_login_waits},
    {"... also those of a connection that closed already", test_closed_session_fenced},
    {"... and fails with 0x0301 when they do not end in time", test_fence_timeout},
    {"a login of another ISID does not wait", test_other_nexus_not_fenced},
    {"a login with no other session of its nexus needs no fence", test_fresh_nexus_no_fence},
    {"... nor once the old session's commands and connection are gone",
     test_ended_session_no_fence},
    {"a reinstatement's kill needs no room in the reactor's queue",
     test_reinstate_kill_needs_no_queue_memory},
    {"an administrator's kill needs no malloc", test_admin_kill_needs_no_malloc},
    {"a kill still queued goes with its session", test_kill_cancelled_by_free},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("iscsi_reinstate_fence", tests);
}
