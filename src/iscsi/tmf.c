/*
 * tmf.c - task management: the Task Management Function Request (ABORT
 * TASK, ABORT TASK SET, CLEAR TASK SET, LOGICAL UNIT RESET, TARGET WARM and
 * COLD RESET; CLEAR ACA and TASK REASSIGN refused), its response once the
 * aborted tasks have left the scsi layer, and the cross-session aborts that
 * reach other initiators' tasks on every reactor (the resets that share a
 * task set, and PERSISTENT RESERVE OUT's PREEMPT AND ABORT, made here or,
 * with several gateways, through another one: hl_iscsi_abort_nexuses). The tasks
 * themselves stay session.c's: this file only marks, drops and waits for them.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "hotlun/log.h"
#include "iscsi/iscsi_internal.h"

static void tmf_maybe_complete(struct iscsi_conn *c, struct iscsi_tmf *tmf);
static void xreset_put(struct iscsi_xreset *xr);

/* One more cross-session abort waiting for a task than its xreset field holds. */
struct iscsi_xwait {
	struct iscsi_xwait *next;
	struct iscsi_xreset *xr;
};

/* Is t one of the tasks tmf aborted, or found aborted already, and waits for? */
static bool tmf_scope(const struct iscsi_tmf *tmf, const struct iscsi_task *t)
{
	if (t->seq >= tmf->task_seq)
		return false; /* came after it */
	switch (tmf->function) {
	case ISCSI_TMF_ABORT_TASK:
		return t->itt == bhs_w20(&tmf->req);
	case ISCSI_TMF_ABORT_TASK_SET:
	case ISCSI_TMF_CLEAR_TASK_SET:
	case ISCSI_TMF_LUN_RESET:
		return iscsi_lun_decode(t->lun_raw) == tmf->lun && t->itt != bhs_itt(&tmf->req);
	case ISCSI_TMF_TARGET_WARM_RESET:
	case ISCSI_TMF_TARGET_COLD_RESET:
		return true;
	default:
		return false;
	}
}

/*
 * An aborted task leaves: no response; every TMF of its session waiting for
 * it, and the other session's reset waiting for it, hear of it.
 */
void iscsi_task_finish_aborted(struct iscsi_conn *c, struct iscsi_task *t)
{
	struct iscsi_xreset *xr = t->xreset;
	struct iscsi_xwait *more = t->xreset_more;
	struct iscsi_tmf *tmf, *tmp;
	bool done = false;

	hl_list_for_each_entry(tmf, &c->tmfs, link)
	{
		if (tmf->waiting && tmf_scope(tmf, t) && --tmf->waiting == 0)
			done = true;
	}
	t->xreset = NULL;
	t->xreset_more = NULL;
	iscsi_task_finish(t);
	/* answered once the task is gone, in the order they came */
	hl_list_for_each_entry_safe(tmf, tmp, &c->tmfs, link)
	{
		if (done && !tmf->waiting)
			tmf_maybe_complete(c, tmf);
	}
	if (xr)
		xreset_put(xr);
	while (more) {
		struct iscsi_xwait *next = more->next;
		xreset_put(more->xr);
		free(more);
		more = next;
	}
}

static void tmf_send(struct iscsi_conn *c, const struct iscsi_bhs *req, uint8_t response,
                     bool close_after)
{
	struct iscsi_bhs rsp;

	memset(&rsp, 0, sizeof(rsp));
	rsp.b[0] = ISCSI_OP_TMF_RSP;
	rsp.b[1] = ISCSI_FLAG_FINAL;
	rsp.b[2] = response;
	bhs_set_itt(&rsp, bhs_itt(req));
	iscsi_conn_fill_sn(c, &rsp, true);
	HL_INFO(ISCSI_LOG, "%s: TMF function %u -> response %u", c->peer_str, bhs_flags(req) & 0x7f,
	        response);
	iscsi_conn_queue(c, &rsp, NULL, 0, NULL, NULL, close_after);
}

static const char *tmf_name(uint8_t fn)
{
	switch (fn) {
	case ISCSI_TMF_ABORT_TASK:
		return "ABORT TASK";
	case ISCSI_TMF_ABORT_TASK_SET:
		return "ABORT TASK SET";
	case ISCSI_TMF_CLEAR_ACA:
		return "CLEAR ACA";
	case ISCSI_TMF_CLEAR_TASK_SET:
		return "CLEAR TASK SET";
	case ISCSI_TMF_LUN_RESET:
		return "LOGICAL UNIT RESET";
	case ISCSI_TMF_TARGET_WARM_RESET:
		return "TARGET WARM RESET";
	case ISCSI_TMF_TARGET_COLD_RESET:
		return "TARGET COLD RESET";
	case ISCSI_TMF_TASK_REASSIGN:
		return "TASK REASSIGN";
	default:
		return "unknown function";
	}
}

/*
 * Who reset what, for the functions that reach other initiators' tasks or
 * sessions (LUN RESET, CLEAR TASK SET, TARGET WARM/COLD RESET): an
 * administrator must be able to tell which initiator disturbed the others.
 * ABORT TASK SET only aborts the requesting session's own tasks here.
 */
static void tmf_log(struct iscsi_conn *c, const struct iscsi_tmf *tmf, unsigned others_closed)
{
	const char *what;

	switch (tmf->function) {
	case ISCSI_TMF_CLEAR_TASK_SET:
	case ISCSI_TMF_LUN_RESET:
	case ISCSI_TMF_TARGET_WARM_RESET:
	case ISCSI_TMF_TARGET_COLD_RESET:
		break;
	default:
		return;
	}
	switch (tmf->response) {
	case ISCSI_TMF_RSP_COMPLETE:
		what = "done";
		break;
	case ISCSI_TMF_RSP_AUTH_FAILED:
		what = "refused (function authorization failed: the target's allow_target_reset "
		       "is off)";
		break;
	case ISCSI_TMF_RSP_NO_LUN:
		what = "refused (no such LUN)";
		break;
	default:
		what = "not done";
		break;
	}
	/* the address alone: peer_str names initiator and target too once logged in */
	char addr[64];
	hl_format_sockaddr(&c->peer, addr, sizeof(addr));
	if (tmf->function == ISCSI_TMF_LUN_RESET || tmf->function == ISCSI_TMF_CLEAR_TASK_SET)
		HL_NOTICE(ISCSI_LOG, "%s of LUN %llu from initiator %s at %s on target %s: %s",
		          tmf_name(tmf->function), (unsigned long long)tmf->lun,
		          c->sess->initiator_name, addr, c->sess->target->name, what);
	else if (tmf->cold && tmf->response == ISCSI_TMF_RSP_COMPLETE)
		HL_NOTICE(ISCSI_LOG,
		          "%s from initiator %s at %s on target %s: done, closing %u other "
		          "session(s) and this one",
		          tmf_name(tmf->function), c->sess->initiator_name, addr,
		          c->sess->target->name, others_closed);
	else
		HL_NOTICE(ISCSI_LOG, "%s from initiator %s at %s on target %s: %s",
		          tmf_name(tmf->function), c->sess->initiator_name, addr,
		          c->sess->target->name, what);
}

/* TARGET WARM/COLD RESET: allowed by the target's current settings (not the login's)? */
static bool target_reset_allowed(struct iscsi_conn *c)
{
	const struct iscsi_target *now = iscsi_target_find(c->srv, c->sess->target->name);

	return now ? now->allow_target_reset : c->sess->target->allow_target_reset;
}

static void tmf_maybe_complete(struct iscsi_conn *c, struct iscsi_tmf *tmf)
{
	unsigned closed = 0;

	if (tmf->waiting)
		return;
	hl_list_del(&tmf->link);
	if (c->state == CONN_FFP) {
		if (tmf->reset_lu)
			hl_lu_reset(tmf->reset_lu, &c->sess->nexus);
		if (tmf->reset_target && c->sess->target && c->sess->target->luns) {
			for (unsigned i = 0; i < HL_SCSI_MAX_LUNS; i++)
				if (c->sess->target->luns->lu[i])
					hl_lu_reset(c->sess->target->luns->lu[i], &c->sess->nexus);
		}
		tmf_send(c, &tmf->req, tmf->response, tmf->cold);
		if (tmf->cold) {
			/* a cold reset ends every session of the target, this one after its answer
			 */
			struct hl_iscsi_server *srv = c->srv;
			struct iscsi_session *o, *tmp;
			pthread_mutex_lock(&srv->lock);
			hl_list_for_each_entry_safe(o, tmp, &srv->sessions, link)
			{
				if (o != c->sess && o->type == ISCSI_SESSION_NORMAL && o->target &&
				    strcasecmp(o->target->name, c->sess->target->name) == 0) {
					iscsi_session_kill_locked(srv, o, "target cold reset");
					closed++;
				}
			}
			pthread_mutex_unlock(&srv->lock);
			c->state = CONN_LOGOUT;
		}
		tmf_log(c, tmf, closed);
	}
	free(tmf);
}

/*
 * Abort one task for a TMF: drop it now, or wait for the scsi layer, also
 * when an earlier TMF aborted it already: answered before it is gone, a
 * LUN RESET that followed an ABORT TASK let the initiator retry a WRITE
 * while the old one could still reach the medium after it.
 */
static void tmf_abort_task(struct iscsi_tmf *tmf, struct iscsi_task *t)
{
	if (t->state == TASK_DATA_OUT) {
		iscsi_task_finish(t);
	} else if (t->state == TASK_EXEC) {
		t->aborted = true;
		tmf->waiting++; /* iscsi_task_finish_aborted finds it by tmf_scope */
	}
}

/* ---- cross-session aborts ---- */

/*
 * Resets that reach other sessions (LUN RESET, CLEAR TASK SET, TARGET WARM
 * RESET): every reactor aborts the affected tasks of its other sessions
 * (their responses are discarded: TAS=0) and the TMF answers only once the
 * last of them has left the scsi layer. `remaining` counts reactor scans and
 * remote tasks still running; the last one hands the result back to the
 * TMF's reactor, which checks that the TMF still exists before using it.
 */
struct iscsi_xreset {
	struct hl_iscsi_server *srv;
	struct hl_lu *lu;                  /* NULL: every LU of map */
	const struct hl_scsi_lun_map *map; /* the target of the resetting session */
	uint64_t origin_nexus;
	struct hl_reactor *origin_reactor;
	struct iscsi_tmf *tmf; /* dereferenced on origin_reactor only, after a check */
	/*
	 * PREEMPT AND ABORT instead of a TMF: the PERSISTENT RESERVE OUT task to
	 * answer when done (it keeps its connection alive until then), and the
	 * preempted nexuses whose tasks go (all others when all_others).
	 */
	struct iscsi_task *task;
	uint64_t nexus[HL_SCSI_ABORT_NEXUS_MAX];
	unsigned n_nexus;
	bool all_others;
	/*
	 * Or the aborts of a PREEMPT AND ABORT made through another gateway
	 * (hl_iscsi_abort_nexuses): done(done_arg) once the listed nexuses'
	 * tasks are gone.
	 */
	void (*done)(void *done_arg);
	void *done_arg;
	/*
	 * Or the fence of a login (iscsi_login_fence_start): the tasks of every
	 * other session of this I_T nexus, closed ones too, then the login's
	 * final response. login: dereferenced on origin_reactor only, NULL once
	 * the login stopped waiting.
	 */
	bool fence;
	struct iscsi_conn *login;
	char initiator[HL_ISCSI_NAME_MAX + 1];
	uint8_t isid[6];
	char target[HL_ISCSI_NAME_MAX + 1];
	atomic_bool missed; /* a task could not be waited for (no memory) */
	atomic_uint remaining;
};

/*
 * xr waits for t too (t's reactor): any number of them may, since two
 * resets or PREEMPT AND ABORTs from different sessions can reach one task
 * at once, and each must answer only once it is gone. @return false
 * without memory (xr does not wait for t).
 */
static bool xreset_tie(struct iscsi_task *t, struct iscsi_xreset *xr)
{
	if (t->xreset) {
		struct iscsi_xwait *w = malloc(sizeof(*w));
		if (!w)
			return false;
		w->xr = xr;
		w->next = t->xreset_more;
		t->xreset_more = w;
	} else {
		t->xreset = xr;
	}
	atomic_fetch_add(&xr->remaining, 1);
	return true;
}

/* Is session nexus id one whose tasks xr aborts? (A reset: every other session.) */
static bool xreset_targets(const struct iscsi_xreset *xr, uint64_t id)
{
	if ((!xr->task && !xr->done) || xr->all_others)
		return true;
	for (unsigned i = 0; i < xr->n_nexus; i++)
		if (xr->nexus[i] == id)
			return true;
	return false;
}

/*
 * Does xr reach connection c's tasks (c on the calling reactor)? Closed
 * connections too: a session whose connection dropped keeps its commands
 * in the LU until they end, and they land as late as any other.
 */
static bool xreset_reaches(const struct iscsi_xreset *xr, const struct iscsi_conn *c)
{
	if (c->state == CONN_LOGIN || !c->sess || c->sess->type != ISCSI_SESSION_NORMAL ||
	    c->sess->nexus.id == xr->origin_nexus)
		return false;
	if (xr->fence)
		return iscsi_same_it_name(c->sess, xr->initiator, xr->isid, xr->target);
	return xreset_targets(xr, c->sess->nexus.id);
}

static bool xreset_affects(const struct iscsi_xreset *xr, const struct hl_lu *lu)
{
	if (xr->fence)
		return true; /* every task of the replaced session, whatever its LU */
	if (!lu)
		return false;
	if (xr->lu)
		return lu == xr->lu;
	for (unsigned i = 0; i < HL_SCSI_MAX_LUNS; i++)
		if (xr->map->lu[i] == lu)
			return true;
	return false;
}

static void xreset_done(void *arg)
{
	struct iscsi_xreset *xr = arg;
	struct hl_iscsi_server *srv = xr->srv;
	struct hl_reactor *me = hl_reactor_current();
	struct iscsi_conn *c, *origin = NULL;

	if (xr->done) {
		xr->done(xr->done_arg);
		iscsi_call_done(srv);
		free(xr);
		return;
	}
	if (xr->fence) {
		c = xr->login;
		if (c) {
			c->fence = NULL;
			iscsi_conn_enter(c);
			iscsi_login_fenced(c, atomic_load(&xr->missed));
			iscsi_conn_leave(c);
		}
		iscsi_call_done(srv);
		free(xr);
		return;
	}
	if (xr->task) {
		/* the preempted tasks left the scsi layer: answer the PREEMPT AND ABORT */
		struct iscsi_task *t = xr->task;
		c = t->conn;
		iscsi_conn_enter(c);
		if (!t->aborted && c->state != CONN_CLOSED) {
			iscsi_task_deactivate(t);
			iscsi_task_respond(c, t);
			iscsi_task_finish(t);
		} else {
			/* aborted meanwhile: a TMF, a reset, the connection */
			iscsi_task_finish_aborted(c, t);
		}
		c->n_deferred--;
		iscsi_logout_maybe_respond(c);
		iscsi_conn_leave(c);
		iscsi_call_done(srv);
		free(xr);
		return;
	}
	pthread_mutex_lock(&srv->lock);
	hl_list_for_each_entry(c, &srv->conns, srv_link)
	{
		/* only our own connections' fields are read past the reactor check */
		if (c->reactor == me && c->state == CONN_FFP && c->sess &&
		    c->sess->nexus.id == xr->origin_nexus) {
			origin = c;
			break;
		}
	}
	pthread_mutex_unlock(&srv->lock);
	if (origin) {
		struct iscsi_tmf *tmf;
		hl_list_for_each_entry(tmf, &origin->tmfs, link)
		{
			if (tmf != xr->tmf)
				continue;
			iscsi_conn_enter(origin);
			if (--tmf->waiting == 0)
				tmf_maybe_complete(origin, tmf);
			iscsi_conn_leave(origin);
			break;
		}
	}
	iscsi_call_done(srv);
	free(xr);
}

static void xreset_put(struct iscsi_xreset *xr)
{
	struct hl_iscsi_server *srv = xr->srv;

	if (atomic_fetch_sub(&xr->remaining, 1) != 1)
		return;
	pthread_mutex_lock(&srv->lock);
	srv->pending_calls++;
	pthread_mutex_unlock(&srv->lock);
	if (hl_reactor_call(xr->origin_reactor, xreset_done, xr) < 0) {
		/*
		 * out of memory: the TMF stays unanswered and the initiator
		 * escalates; a fenced login fails at its timer, which still
		 * writes xr->login, so a fence is left allocated
		 */
		HL_ERR(ISCSI_LOG, "cannot finish a reset: no memory");
		iscsi_call_done(srv);
		if (!xr->fence)
			free(xr);
	}
}

static void xreset_scan(void *arg)
{
	struct iscsi_xreset *xr = arg;
	struct hl_iscsi_server *srv = xr->srv;
	struct hl_reactor *me = hl_reactor_current();
	struct iscsi_conn **mine = NULL, *c;
	size_t n = 0, cap = 0;

	pthread_mutex_lock(&srv->lock);
	hl_list_for_each_entry(c, &srv->conns, srv_link)
	{
		if (c->reactor != me || !xreset_reaches(xr, c))
			continue;
		if (n == cap) {
			size_t nc = cap ? 2 * cap : 16;
			struct iscsi_conn **nm = realloc(mine, nc * sizeof(*nm));
			if (!nm) {
				/* the rest are not waited for: a fence must not pass as clean */
				atomic_store(&xr->missed, true);
				break;
			}
			mine = nm;
			cap = nc;
		}
		mine[n++] = c;
	}
	pthread_mutex_unlock(&srv->lock);
	for (size_t i = 0; i < n; i++) {
		struct iscsi_task *t, *tmp;
		c = mine[i];
		iscsi_conn_enter(c);
		hl_list_for_each_entry_safe(t, tmp, &c->tasks, link)
		{
			if (t->state == TASK_DONE || !xreset_affects(xr, t->cmd.lu))
				continue;
			/*
			 * Aborted already (its session's TMF, another reset) but still
			 * in the scsi layer: wait for it too, or the reset (or PREEMPT
			 * AND ABORT) is answered before the task's WRITE reaches the
			 * medium.
			 */
			if (t->aborted && t->state != TASK_EXEC)
				continue;
			/* a DATA_OUT task may be receiving right now: drop it when its data is in
			 */
			t->aborted = true;
			if (t->state == TASK_EXEC && !xreset_tie(t, xr)) {
				atomic_store(&xr->missed, true);
				HL_ERR(
				    ISCSI_LOG,
				    "%s: no memory to wait for itt 0x%x: a reset may answer before "
				    "it is gone",
				    c->peer_str, t->itt);
			}
		}
		iscsi_conn_leave(c);
	}
	free(mine);
	iscsi_call_done(srv);
	xreset_put(xr);
}

/* A cross-session abort from connection c on lu (NULL: every LU of its target). */
static struct iscsi_xreset *xreset_new(struct iscsi_conn *c, struct hl_lu *lu)
{
	struct iscsi_xreset *xr = calloc(1, sizeof(*xr));

	if (!xr)
		return NULL;
	xr->srv = c->srv;
	xr->lu = lu;
	xr->map = c->sess->target->luns;
	xr->origin_nexus = c->sess->nexus.id;
	xr->origin_reactor = c->reactor;
	atomic_init(&xr->remaining, c->srv->n_reactors + 1); /* +1: ours, while dispatching */
	return xr;
}

/* Send xr to every reactor's scan; the last one to finish runs xreset_done. */
static void xreset_dispatch(struct iscsi_xreset *xr)
{
	struct hl_iscsi_server *srv = xr->srv;

	for (unsigned i = 0; i < srv->n_reactors; i++) {
		pthread_mutex_lock(&srv->lock);
		srv->pending_calls++;
		pthread_mutex_unlock(&srv->lock);
		if (hl_reactor_call(srv->reactors[i], xreset_scan, xr) < 0) {
			/* its tasks are not waited for: a fence must not pass as clean */
			atomic_store(&xr->missed, true);
			iscsi_call_done(srv);
			xreset_put(xr);
		}
	}
	xreset_put(xr);
}

/* Reach the other sessions; the TMF waits for them (best effort without memory). */
static void xreset_start(struct iscsi_conn *c, struct iscsi_tmf *tmf, struct hl_lu *lu)
{
	struct iscsi_xreset *xr = xreset_new(c, lu);

	if (!xr)
		return;
	xr->tmf = tmf;
	tmf->waiting++;
	xreset_dispatch(xr);
}

/*
 * PREEMPT AND ABORT (SPC-4 5.12.11.2.4): the preempted nexuses' tasks on
 * the LU are aborted in every session (no response for them: TAS=0), and
 * the command is answered only once the last of them has left the scsi
 * layer, so a preempted initiator's write still in flight reaches the
 * origin before the new holder hears it owns the LU, never after. Sessions
 * whose nexus the scsi layer did not list keep their tasks. @return false
 * without memory (the command is answered at once: tasks not aborted).
 */
bool iscsi_preempt_abort_start(struct iscsi_conn *c, struct iscsi_task *t)
{
	struct iscsi_xreset *xr = xreset_new(c, t->cmd.lu);

	if (!xr) {
		HL_ERR(ISCSI_LOG, "%s: PREEMPT AND ABORT: no memory to abort the preempted tasks",
		       c->peer_str);
		return false;
	}
	xr->task = t;
	xr->n_nexus = t->cmd.n_abort_nexus;
	memcpy(xr->nexus, t->cmd.abort_nexus, xr->n_nexus * sizeof(xr->nexus[0]));
	xr->all_others = t->cmd.abort_others;
	HL_INFO(ISCSI_LOG, "%s: PREEMPT AND ABORT: aborting the tasks of %u preempted nexus(es)%s",
	        c->peer_str, xr->n_nexus, xr->all_others ? " (and every other one)" : "");
	xreset_dispatch(xr);
	return true;
}

int hl_iscsi_abort_nexuses(void *server, struct hl_lu *lu, const uint64_t *ids, unsigned n,
                           void (*done)(void *done_arg), void *done_arg)
{
	struct hl_iscsi_server *srv = server;
	struct iscsi_xreset *xr;

	pthread_mutex_lock(&srv->lock);
	bool stopping = srv->stopping || !srv->n_reactors;
	pthread_mutex_unlock(&srv->lock);
	if (stopping)
		return -ESHUTDOWN;
	xr = calloc(1, sizeof(*xr));
	if (!xr)
		return -ENOMEM;
	xr->srv = srv;
	xr->lu = lu;
	xr->origin_reactor = srv->reactors[0]; /* any: only done() runs there */
	xr->done = done;
	xr->done_arg = done_arg;
	/* more than the list holds: every session's tasks on lu (none is the issuer's here) */
	xr->all_others = n > HL_SCSI_ABORT_NEXUS_MAX;
	xr->n_nexus = xr->all_others ? 0 : n;
	memcpy(xr->nexus, ids, xr->n_nexus * sizeof(xr->nexus[0]));
	atomic_init(&xr->remaining, srv->n_reactors + 1);
	HL_INFO(ISCSI_LOG,
	        "PREEMPT AND ABORT through another gateway: aborting the tasks of %u preempted "
	        "nexus(es)",
	        n);
	xreset_dispatch(xr);
	return 0;
}

/*
 * Session reinstatement (RFC 7143 6.3.5): the login that replaces a
 * session is answered only once that session's commands are over, so an
 * initiator (hotlun's own iscsi origin among them, iscsi_isid.c) that
 * logs in again with a dead run's ISID knows none of that run's WRITEs
 * can land after. The replaced session is closed first (its kill was
 * queued to its reactor before this scan, and a reactor runs calls in
 * order), so the scan finds its connection closed with the commands
 * still in the LU. Connection reinstatement at ERL 0 ends a session the
 * same way.
 */
int iscsi_login_fence_start(struct iscsi_conn *c)
{
	struct iscsi_session *s = c->sess;
	struct iscsi_xreset *xr = calloc(1, sizeof(*xr));

	if (!xr)
		return -ENOMEM;
	xr->srv = c->srv;
	xr->origin_nexus = s->nexus.id;
	xr->origin_reactor = c->reactor;
	xr->fence = true;
	xr->login = c;
	hl_strlcpy(xr->initiator, s->initiator_name, sizeof(xr->initiator));
	memcpy(xr->isid, s->isid, sizeof(xr->isid));
	hl_strlcpy(xr->target, s->target->name, sizeof(xr->target));
	atomic_init(&xr->missed, false);
	atomic_init(&xr->remaining, c->srv->n_reactors + 1);
	c->fence = xr;
	xreset_dispatch(xr);
	return 0;
}

void iscsi_login_fence_cancel(struct iscsi_conn *c)
{
	hl_timer_stop(&c->fence_timer);
	if (c->fence) {
		c->fence->login = NULL; /* it finishes on its own, as the tasks leave */
		c->fence = NULL;
	}
}

int iscsi_tmf_handle(struct iscsi_conn *c, struct iscsi_rx *rx)
{
	const struct iscsi_bhs *h = &rx->bhs;
	uint8_t fn = bhs_flags(h) & 0x7f;
	struct iscsi_task *t, *tmp;

	if (!iscsi_cmdsn_accept(c, h))
		return 0;
	if (iscsi_session_is_discovery(c)) {
		iscsi_conn_send_reject(c, h, ISCSI_REJECT_PROTOCOL_ERROR);
		return 0;
	}
	struct iscsi_tmf *tmf = calloc(1, sizeof(*tmf));
	if (!tmf)
		return -ENOMEM;
	tmf->req = *h;
	tmf->task_seq = c->task_seq + 1; /* every task there is now */
	tmf->function = fn;
	tmf->response = ISCSI_TMF_RSP_COMPLETE;
	hl_list_add_tail(&c->tmfs, &tmf->link);

	const struct hl_scsi_lun_map *map = c->sess->target->luns;
	uint64_t lun = iscsi_lun_decode(bhs_lun(h));
	tmf->lun = lun;
	struct hl_lu *lu = (map && lun < HL_SCSI_MAX_LUNS) ? map->lu[lun] : NULL;

	switch (fn) {
	case ISCSI_TMF_ABORT_TASK: {
		uint32_t rtt = bhs_w20(h);
		t = iscsi_task_find(c, rtt);
		if (!t || t->state == TASK_DONE)
			tmf->response = ISCSI_TMF_RSP_NO_TASK;
		else
			tmf_abort_task(tmf, t);
		break;
	}
	case ISCSI_TMF_ABORT_TASK_SET:
	case ISCSI_TMF_CLEAR_TASK_SET:
	case ISCSI_TMF_LUN_RESET:
		if (!lu) {
			tmf->response = ISCSI_TMF_RSP_NO_LUN;
			break;
		}
		hl_list_for_each_entry_safe(t, tmp, &c->tasks, link)
		{
			if (t->state != TASK_DONE && iscsi_lun_decode(t->lun_raw) == lun &&
			    t->itt != bhs_itt(h))
				tmf_abort_task(tmf, t);
		}
		if (fn == ISCSI_TMF_LUN_RESET)
			tmf->reset_lu = lu;
		if (fn != ISCSI_TMF_ABORT_TASK_SET)
			xreset_start(c, tmf, lu); /* the task set is shared by every initiator */
		break;
	case ISCSI_TMF_TARGET_WARM_RESET:
	case ISCSI_TMF_TARGET_COLD_RESET:
		/*
		 * Both reach every initiator of the target (their tasks aborted, a
		 * cold reset closes their sessions): only when the administrator
		 * allows it, as LIO does (RFC 7143 11.6.1: response 6).
		 */
		if (!target_reset_allowed(c)) {
			tmf->response = ISCSI_TMF_RSP_AUTH_FAILED;
			break;
		}
		hl_list_for_each_entry_safe(t, tmp, &c->tasks, link)
		{
			if (t->state != TASK_DONE)
				tmf_abort_task(tmf, t);
		}
		tmf->reset_target = true;
		tmf->cold = fn == ISCSI_TMF_TARGET_COLD_RESET;
		if (!tmf->cold) /* a cold reset ends the other sessions instead */
			xreset_start(c, tmf, NULL);
		break;
	case ISCSI_TMF_CLEAR_ACA:
		tmf->response = ISCSI_TMF_RSP_NOT_SUPPORTED;
		break;
	case ISCSI_TMF_TASK_REASSIGN:
		tmf->response = ISCSI_TMF_RSP_REASSIGN_UNSUPPORTED;
		break;
	default:
		tmf->response = ISCSI_TMF_RSP_REJECTED;
		break;
	}
	tmf_maybe_complete(c, tmf);
	return 0;
}
