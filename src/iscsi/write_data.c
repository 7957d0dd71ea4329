/*
 * write_data.c - a WRITE's data in the full feature phase: the write
 * buffer budget's connection side (a WRITE admitted, made to wait or
 * refused; deferred ones granted in order), the R2Ts that ask for the data,
 * the Data-Out PDUs that bring it (header hook and handler), and the
 * deadlines that close a connection whose WRITE data is late. The task's
 * life and its response are session.c's; the budget's accounting is
 * wbudget.c's.
 */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "hotlun/log.h"
#include "iscsi/iscsi_internal.h"

/*
 * A task that waited got its budget: move what arrived into a buffer for the
 * whole transfer. Only while no PDU is being received into the old one.
 */
static int data_buf_grow(struct iscsi_task *t)
{
	struct iscsi_conn *c = t->conn;
	uint32_t cap;
	void *p;

	if (t->cmd.data && t->buf_len >= t->edtl)
		return 0;
	p = iscsi_buf_get(c, t->edtl, &cap);
	if (!p)
		return -ENOMEM;
	if (t->cmd.data) {
		memcpy(p, t->cmd.data, t->received);
		iscsi_buf_put(c, t->cmd.data, t->buf_len);
	}
	c->buf_bytes += cap - t->buf_len;
	t->cmd.data = p;
	t->buf_len = cap;
	return 0;
}

/* ---- write buffer budget (wbudget.c has the accounting) ---- */

void iscsi_task_wb_release(struct iscsi_task *t)
{
	struct iscsi_conn *c = t->conn;

	if (!t->wb.need)
		return;
	if (t->wb.waiting)
		c->wb_waiting--;
	iscsi_wb_release(&c->srv->wb, &t->wb);
	c->wb_promised -= t->wb.need;
	t->wb.need = 0;
}

/* t's data must be in by now + its deadline for `bytes` (iscsi_dout_tick checks). */
static void write_deadline_set(struct iscsi_task *t, uint64_t now, uint64_t bytes)
{
	t->wb_since_ns = now;
	t->wb_deadline_ns = now + iscsi_wb_deadline_ns(bytes);
}

enum iscsi_wb_verdict iscsi_write_admit(struct iscsi_conn *c, struct iscsi_task *t, bool final,
                                        uint32_t imm)
{
	uint64_t unasked = final ? imm : HL_MIN(c->params.first_burst_length, t->edtl);
	uint64_t now = hl_now_ns();
	struct iscsi_wb_admit_info info;
	struct iscsi_source src;
	enum iscsi_wb_verdict v;

	if (unasked < imm)
		unasked = imm;
	iscsi_source_of(&c->peer, false, &src);
	v = iscsi_wb_admit(&c->srv->wb, &t->wb, &src, c->wb_promised, t->edtl, unasked, now, &info);
	c->wb_conn_limit = info.conn_limit;
	if (v == ISCSI_WB_SHARE) {
		char a[64];
		HL_LOG_RL(HL_LOG_NOTICE, ISCSI_LOG,
		          "%s: WRITE itt 0x%x of %u bytes: %s has its share of the write buffer "
		          "budget (its WRITEs claim %llu of %llu bytes, %u sources want some), "
		          "TASK SET FULL",
		          c->peer_str, t->itt, t->edtl, iscsi_source_str(&src, a, sizeof(a)),
		          (unsigned long long)info.source_promised,
		          (unsigned long long)info.source_cap, info.sources);
		return ISCSI_WB_FULL;
	}
	if (v == ISCSI_WB_FULL) {
		HL_LOG_RL(HL_LOG_NOTICE, ISCSI_LOG,
		          "%s: WRITE itt 0x%x of %u bytes: write buffer budget spent (this "
		          "connection claims %llu of %llu bytes), TASK SET FULL",
		          c->peer_str, t->itt, t->edtl, (unsigned long long)c->wb_promised,
		          (unsigned long long)c->wb_conn_limit);
		return v;
	}
	/* what it owes now: the whole transfer, or while it waits what comes unasked */
	write_deadline_set(t, now, v == ISCSI_WB_GO ? t->edtl : unasked);
	c->wb_promised += t->wb.need;
	if (v == ISCSI_WB_WAIT) {
		c->wb_waiting++;
		if (c->reactor && !hl_timer_pending(&c->wb_timer)) {
			c->wb_retry_ms = ISCSI_WB_RETRY_MS;
			hl_timer_start(c->reactor, &c->wb_timer, c->wb_retry_ms);
		}
	}
	return v;
}

/*
 * A deferred task asks again, once its unsolicited data is in (its buffer
 * moves when granted). @return 1 when it may have its R2Ts, 0 when it waits
 * on, -ENOMEM when it was answered for want of memory (t is gone then).
 */
static int write_grant(struct iscsi_conn *c, struct iscsi_task *t)
{
	if (!t->wb.waiting)
		return 1;
	if (!t->unsol_done || t == c->rx_task || t == c->rx_dout)
		return 0;
	if (!iscsi_wb_grant(&c->srv->wb, &t->wb))
		return 0;
	c->wb_waiting--;
	/* its R2Ts go out now: the clock for the rest starts here, not at its arrival */
	write_deadline_set(t, hl_now_ns(), t->edtl - t->received);
	if (data_buf_grow(t) < 0) {
		iscsi_task_check_condition(c, t, HL_SK_ABORTED_COMMAND, 0x55, 0x03); /* no memory */
		return -ENOMEM;
	}
	return 1;
}

/*
 * Grant the connection's deferred tasks in their order, as far as the budget
 * goes. @return true when a task that is still waiting is the oldest waiter.
 */
bool iscsi_write_retry(struct iscsi_conn *c)
{
	struct iscsi_task *t, *tmp;

	hl_list_for_each_entry_safe(t, tmp, &c->tasks, link)
	{
		if (!c->wb_waiting)
			break;
		if (t->state != TASK_DATA_OUT || !t->wb.waiting)
			continue;
		if (t->aborted) {
			/* by another session's reset: its data will never come */
			iscsi_task_finish(t);
			continue;
		}
		/* it asks once its unsolicited data is in (iscsi_task_data_progress) */
		if (!t->unsol_done)
			continue;
		int rc = write_grant(c, t);
		if (rc < 0)
			continue;
		if (rc == 0)
			return iscsi_wb_is_head(&c->srv->wb, &t->wb);
		iscsi_task_data_progress(c, t);
	}
	return false;
}

void iscsi_wb_tick(struct hl_timer *tm)
{
	struct iscsi_conn *c = tm->arg;

	iscsi_conn_enter(c);
	if (c->state == CONN_FFP) {
		unsigned before = c->wb_waiting;
		bool head = iscsi_write_retry(c);
		if (head || c->wb_waiting < before)
			c->wb_retry_ms = ISCSI_WB_RETRY_MS;
		else if (c->wb_retry_ms < ISCSI_WB_RETRY_MAX_MS)
			c->wb_retry_ms *= 2;
		if (c->wb_waiting)
			hl_timer_start(c->reactor, &c->wb_timer, c->wb_retry_ms);
	}
	iscsi_conn_leave(c);
}

/*
 * A connection whose unfinished writes claim half its cap, or that holds any
 * while the budget is short, gets no new CmdSN slots: its MaxCmdSN stays
 * where it was until those writes finish (their responses reopen it), so a
 * well-behaved initiator stops sending WRITEs that would meet TASK SET FULL.
 */
bool iscsi_wb_window_closed(struct iscsi_conn *c)
{
	if (!c->wb_promised)
		return false;
	if (c->wb_waiting || 2 * c->wb_promised >= c->wb_conn_limit)
		return true;
	return iscsi_wb_pressure(&c->srv->wb);
}

/* ---- deadlines of the data a WRITE owes, and R2Ts ---- */

/* Data owed by the initiator: unsolicited data, or an R2T's (not a wait for our budget). */
static bool task_owes_data(const struct iscsi_task *t)
{
	return t->state == TASK_DATA_OUT && !t->aborted && !(t->unsol_done && !t->r2t_active);
}

/*
 * A task has just started to owe data: make sure c->dout_timer runs. Its
 * earliest due time is ISCSI_DATAOUT_TIMEOUT_S from now (its total deadline
 * has at least ISCSI_WRITE_GRACE_S in it), never earlier than the one the
 * timer is already set for, which is due by some older owing task.
 */
void iscsi_dout_arm(struct iscsi_conn *c)
{
	if (c->reactor && !hl_timer_pending(&c->dout_timer))
		hl_timer_start(c->reactor, &c->dout_timer,
		               HL_MIN(ISCSI_DATAOUT_TIMEOUT_S, ISCSI_WRITE_GRACE_S) * 1000ull);
}

void iscsi_dout_resume(struct iscsi_conn *c, uint64_t paused_ns)
{
	uint64_t now = hl_now_ns();
	struct iscsi_task *t;
	bool owed = false;

	if (!hl_timer_pending(&c->dout_timer))
		return; /* it runs while any task owes data: none does */
	hl_list_for_each_entry(t, &c->tasks, link)
	{
		if (!task_owes_data(t))
			continue;
		/*
		 * Not the whole pause for a task that began owing data within it
		 * (its silence is shorter), and not beyond the cap in all.
		 */
		uint64_t credit = HL_MIN(paused_ns, now > t->dout_ns ? now - t->dout_ns : 0);
		credit = HL_MIN(credit, ISCSI_PAUSE_CREDIT_MAX_NS - t->paused_credit_ns);
		t->paused_credit_ns += credit;
		/* not now: a connection that pauses often would never be silent long */
		t->dout_ns += credit;
		if (t->wb_deadline_ns)
			t->wb_deadline_ns += credit;
		owed = true;
	}
	/* a tick from the pause may be set far out: look again at the new due times */
	if (owed && c->reactor)
		hl_timer_start(c->reactor, &c->dout_timer, 0);
}

/*
 * c->dout_timer: a WRITE that holds write budget must make progress. No
 * data for ISCSI_DATAOUT_TIMEOUT_S, or not all of it by its deadline
 * (iscsi_wb_deadline_ns): at ERL 0 only closing the connection ends the
 * task and gives its budget back. Otherwise run again at the earliest due.
 */
void iscsi_dout_tick(struct hl_timer *tm)
{
	struct iscsi_conn *c = tm->arg;
	uint64_t now = hl_now_ns(), next = 0;
	uint64_t silent_ns = ISCSI_DATAOUT_TIMEOUT_S * 1000000000ull;
	struct iscsi_task *t, *late = NULL;
	bool slow = false;

	iscsi_conn_enter(c);
	if (c->state != CONN_FFP)
		goto out;
	if (c->rx_paused_ns) {
		/*
		 * We stopped reading (a full send queue): the data owed may be in
		 * our socket already. iscsi_dout_resume restarts the clocks.
		 */
		hl_timer_start(c->reactor, &c->dout_timer, silent_ns / 1000000ull);
		goto out;
	}
	hl_list_for_each_entry(t, &c->tasks, link)
	{
		if (!task_owes_data(t))
			continue;
		uint64_t due = t->dout_ns + silent_ns;
		if (now >= due) {
			late = t;
			break;
		}
		if (t->wb_deadline_ns && now >= t->wb_deadline_ns) {
			late = t;
			slow = true;
			break;
		}
		if (t->wb_deadline_ns && t->wb_deadline_ns < due)
			due = t->wb_deadline_ns;
		if (!next || due < next)
			next = due;
	}
	if (late && slow) {
		atomic_fetch_add(&c->srv->wb.closed_slow, 1);
		HL_NOTICE(ISCSI_LOG,
		          "%s: WRITE itt 0x%x: %u of %u bytes in %llu s since its data was asked "
		          "for, below %u KiB/s after a %u s grace: closing",
		          c->peer_str, late->itt, late->received, late->edtl,
		          (unsigned long long)((now - late->wb_since_ns) / 1000000000ull),
		          ISCSI_WRITE_FLOOR_BPS >> 10, ISCSI_WRITE_GRACE_S);
		iscsi_conn_close(c, "WRITE data too slow");
	} else if (late) {
		atomic_fetch_add(&c->srv->wb.closed_silent, 1);
		HL_NOTICE(ISCSI_LOG,
		          "%s: WRITE itt 0x%x: no data from the initiator for %us (%u of %u bytes "
		          "in), closing",
		          c->peer_str, late->itt, ISCSI_DATAOUT_TIMEOUT_S, late->received,
		          late->edtl);
		iscsi_conn_close(c, "Data-Out timeout");
	} else if (next) {
		hl_timer_start(c->reactor, &c->dout_timer, (next - now) / 1000000ull + 1);
	}
out:
	iscsi_conn_leave(c);
}

static void r2t_issue(struct iscsi_conn *c, struct iscsi_task *t)
{
	unsigned max = HL_MIN(c->params.max_outstanding_r2t ? c->params.max_outstanding_r2t : 1,
	                      (uint32_t)ISCSI_MAX_R2T);

	while (t->r2t_active < max && t->r2t_next_offset < t->edtl) {
		struct iscsi_r2t *r = NULL;
		for (unsigned i = 0; i < ISCSI_MAX_R2T; i++) {
			if (!t->r2t[i].active) {
				r = &t->r2t[i];
				break;
			}
		}
		if (!r)
			return;
		uint32_t len = HL_MIN(c->params.max_burst_length, t->edtl - t->r2t_next_offset);
		r->active = true;
		r->ttt = c->next_ttt++;
		if (r->ttt == ISCSI_RSVD_TAG)
			r->ttt = c->next_ttt++;
		r->r2tsn = t->r2tsn++;
		r->offset = t->r2t_next_offset;
		r->len = len;
		r->received = 0;
		r->next_datasn = 0;
		t->r2t_next_offset += len;
		t->r2t_active++;
		t->dout_ns = hl_now_ns();
		iscsi_dout_arm(c);

		struct iscsi_bhs h;
		memset(&h, 0, sizeof(h));
		h.b[0] = ISCSI_OP_R2T;
		h.b[1] = ISCSI_FLAG_FINAL;
		bhs_set_lun(&h, t->lun_raw);
		bhs_set_itt(&h, t->itt);
		bhs_put32(&h, 20, r->ttt);
		iscsi_conn_fill_sn(c, &h, false);
		bhs_put32(&h, 36, r->r2tsn);
		bhs_put32(&h, 40, r->offset);
		bhs_put32(&h, 44, r->len);
		iscsi_conn_queue(c, &h, NULL, 0, NULL, NULL, false);
	}
}

/* Data collection moved on: run the command or ask for more. */
void iscsi_task_data_progress(struct iscsi_conn *c, struct iscsi_task *t)
{
	if (t->aborted) {
		/* aborted by another session's reset while its data was arriving */
		iscsi_task_finish(t);
		return;
	}
	/* a task waiting for write budget has a buffer for its unsolicited data only */
	if (t->wb.waiting && (!t->unsol_done || write_grant(c, t) <= 0))
		return; /* its R2Ts wait (iscsi_write_retry asks again), or it was answered */
	if (t->received >= t->edtl) {
		iscsi_task_exec(t);
		return;
	}
	if (t->unsol_done) {
		if (t->r2t_next_offset < t->imm_len + t->unsol_received)
			t->r2t_next_offset = t->imm_len + t->unsol_received;
		r2t_issue(c, t);
	}
}

/* ---- Data-Out ---- */

/*
 * The header of a Data-Out PDU (iscsi_ffp_header): its data goes straight
 * into its task's buffer when it is the next the task expects (unsolicited,
 * or for one of its R2Ts); otherwise it is discarded, and handled (dropped,
 * or rejected) by iscsi_data_out_handle.
 */
int iscsi_data_out_header(struct iscsi_conn *c, struct iscsi_rx *rx)
{
	const struct iscsi_bhs *h = &rx->bhs;
	struct iscsi_task *t = iscsi_task_find(c, bhs_itt(h));
	uint32_t off = bhs_buf_offset(h), sn = bhs_datasn(h), ttt = bhs_ttt(h);
	uint32_t len = rx->dsl;

	rx->discard = true;
	if (!t || t->state != TASK_DATA_OUT || iscsi_session_is_discovery(c))
		return 0; /* unknown or finished task: drop silently */
	c->rx_dout = t;
	c->rx_dout_reject = ISCSI_REJECT_PROTOCOL_ERROR;
	t->dout_ns = hl_now_ns();
	if ((uint64_t)off + len > t->edtl)
		return 0;
	if (ttt == ISCSI_RSVD_TAG) {
		if (t->unsol_done || sn != t->unsol_next_datasn ||
		    off != t->imm_len + t->unsol_received ||
		    (uint64_t)off + len > (uint64_t)t->imm_len + t->unsol_len)
			return 0;
		c->rx_dout_r2t = -1;
	} else {
		struct iscsi_r2t *r = NULL;
		for (int i = 0; i < ISCSI_MAX_R2T; i++) {
			if (t->r2t[i].active && t->r2t[i].ttt == ttt) {
				r = &t->r2t[i];
				c->rx_dout_r2t = i;
				break;
			}
		}
		if (!r)
			return 0;
		if (sn != r->next_datasn || off != r->offset + r->received ||
		    (uint64_t)off + len > (uint64_t)r->offset + r->len)
			return 0;
	}
	c->rx_dout_reject = 0;
	rx->discard = false;
	rx->dst = t->cmd.data + off;
	return 0;
}

int iscsi_data_out_handle(struct iscsi_conn *c, struct iscsi_rx *rx)
{
	const struct iscsi_bhs *h = &rx->bhs;
	struct iscsi_task *t = c->rx_dout;

	c->exp_stat_sn = bhs_expstatsn(h);
	c->rx_dout = NULL;
	if (!t) {
		HL_DEBUG(ISCSI_LOG, "%s: Data-Out for unknown itt 0x%x dropped", c->peer_str,
		         bhs_itt(h));
		return 0;
	}
	uint8_t reason = c->rx_dout_reject;
	if (!reason && !rx->ddigest_ok)
		reason = ISCSI_REJECT_DATA_DIGEST;
	if (reason) {
		/* ERL 0: the task cannot recover; the initiator fails it on the Reject */
		HL_NOTICE(ISCSI_LOG, "%s: bad Data-Out for itt 0x%x (DataSN %u offset %u len %u)",
		          c->peer_str, t->itt, bhs_datasn(h), bhs_buf_offset(h), rx->dsl);
		iscsi_conn_send_reject(c, h, reason);
		iscsi_task_finish(t);
		return 0;
	}
	t->received += rx->dsl;
	if (c->rx_dout_r2t < 0) {
		t->unsol_received += rx->dsl;
		t->unsol_next_datasn++;
		if (bhs_final(h) || t->unsol_received >= t->unsol_len)
			t->unsol_done = true;
	} else {
		struct iscsi_r2t *r = &t->r2t[c->rx_dout_r2t];
		r->received += rx->dsl;
		r->next_datasn++;
		if (r->received >= r->len) {
			r->active = false;
			t->r2t_active--;
		}
	}
	iscsi_task_data_progress(c, t);
	return 0;
}
