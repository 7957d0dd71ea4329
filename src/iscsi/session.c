/*
 * session.c - the full feature phase of a connection: its tasks, SCSI
 * commands with immediate data, Data-In segmentation and SCSI Response with
 * residuals and sense, the CmdSN window, the dispatch of received PDUs and
 * Reject. A WRITE's unsolicited and solicited (R2T) data, its write budget
 * and deadlines are write_data.c's; NOP-Out, Text and Logout are
 * nop_text_logout.c's; task management requests are handed to tmf.c.
 * Tasks are the unit of ownership: a task holds its data buffer and is
 * freed when the scsi layer is done with it and the last PDU pointing into
 * its buffer has been sent.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hotlun/log.h"
#include "iscsi/iscsi_internal.h"

static inline unsigned itt_bucket(uint32_t itt)
{
	return (itt ^ (itt >> 8)) & (ISCSI_ITT_HASH - 1);
}

struct iscsi_task *iscsi_task_find(struct iscsi_conn *c, uint32_t itt)
{
	struct iscsi_task *t;

	hl_list_for_each_entry(t, &c->itt_hash[itt_bucket(itt)], hash_link)
	{
		if (t->itt == itt)
			return t;
	}
	return NULL;
}

static struct iscsi_task *task_alloc(struct iscsi_conn *c, const struct iscsi_bhs *req)
{
	struct iscsi_task *t;

	if (!hl_list_empty(&c->task_free)) {
		t = hl_list_first(&c->task_free, struct iscsi_task, link);
		hl_list_del(&t->link);
		c->task_nfree--;
	} else {
		t = malloc(sizeof(*t));
		if (!t)
			return NULL;
	}
	/* only the transport's part and our bookkeeping need clearing */
	memset(&t->cmd, 0, offsetof(struct hl_scsi_cmd, io));
	memset(&t->cmd.io, 0, sizeof(t->cmd.io));
	t->cmd.state = 0;
	t->conn = c;
	t->refs = 1;
	t->state = TASK_DATA_OUT;
	t->req = *req;
	t->itt = bhs_itt(req);
	t->cmd_sn = bhs_cmdsn(req);
	t->edtl = bhs_edtl(req);
	t->lun_raw = bhs_lun(req);
	t->aborted = false;
	t->seq = ++c->task_seq;
	t->xreset = NULL;
	t->xreset_more = NULL;
	t->imm_len = 0;
	t->received = 0;
	t->unsol_len = 0;
	t->unsol_received = 0;
	t->unsol_next_datasn = 0;
	t->unsol_done = true;
	t->dout_ns = hl_now_ns();
	t->paused_credit_ns = 0;
	t->wb_since_ns = 0;
	t->wb_deadline_ns = 0;
	t->r2t_next_offset = 0;
	t->r2tsn = 0;
	t->r2t_active = 0;
	memset(t->r2t, 0, sizeof(t->r2t));
	t->datasn = 0;
	t->din_off = 0;
	t->din_burst = 0;
	t->cmd.data_ready = NULL;
	t->rd_charge = 0;
	t->buf_len = 0;
	t->wb.need = 0;
	t->wb.charged = 0;
	t->wb.waiting = false;
	hl_list_add_tail(&c->tasks, &t->link);
	hl_list_add_tail(&c->itt_hash[itt_bucket(t->itt)], &t->hash_link);
	c->ntasks++;
	t->in_window = false; /* counted once its CmdSN is accepted (handle_scsi_cmd) */
	t->immediate = false;
	return t;
}

/* The task leaves the active set: its CmdSN slot opens before its response is built. */
void iscsi_task_deactivate(struct iscsi_task *t)
{
	/* likewise its write budget, so the response can reopen a window the budget closed */
	iscsi_task_wb_release(t);
	if (t->state != TASK_DONE) {
		t->state = TASK_DONE;
		hl_list_del(&t->hash_link);
	}
	if (t->in_window) {
		t->in_window = false;
		t->conn->nactive--;
	}
	if (t->immediate) {
		t->immediate = false;
		t->conn->nimmediate--;
	}
}

/* Response queued, or dropped: leave the active set and drop the active reference. */
void iscsi_task_finish(struct iscsi_task *t)
{
	iscsi_task_deactivate(t);
	iscsi_task_put(t);
}

/*
 * The buffer a task needs now: its whole transfer, or while it waits for
 * write budget only what the initiator sends unasked (data_buf_grow in
 * write_data.c adds the rest once the budget is granted).
 */
static uint32_t data_buf_need(const struct iscsi_task *t)
{
	return t->wb.waiting ? (uint32_t)HL_MIN(t->wb.charged, (uint64_t)t->edtl) : t->edtl;
}

/* @return 0, -ENOMEM, or -EBUSY when the connection already holds its share of buffers. */
static int data_buf_alloc(struct iscsi_task *t)
{
	struct iscsi_conn *c = t->conn;
	uint32_t len = data_buf_need(t);
	void *p = NULL;

	if (len == 0)
		return 0;
	if (c->buf_bytes + len > ISCSI_CONN_BUF_MAX)
		return -EBUSY;
	p = iscsi_buf_get(c, len, &t->buf_len);
	if (!p)
		return -ENOMEM;
	t->cmd.data = p;
	c->buf_bytes += t->buf_len;
	return 0;
}

/* ---- CmdSN window ---- */

/*
 * @return true when the PDU is to be processed (and ExpCmdSN advanced for non-immediate).
 * RFC 7143 4.2.2.1: a non-immediate command outside [ExpCmdSN, MaxCmdSN] or a duplicate is
 * silently ignored. The window is only ever closed by accepted commands (a command takes its
 * slot after this check, see handle_scsi_cmd), so an initiator that respects the MaxCmdSN it
 * was given never lands here; and a CmdSN up to the highest MaxCmdSN ever advertised is
 * honoured even if the free slots say otherwise (the initiator ignores a lower MaxCmdSN:
 * dropping it would leave a gap every later command queues behind forever).
 */
bool iscsi_cmdsn_accept(struct iscsi_conn *c, const struct iscsi_bhs *h)
{
	struct iscsi_session *s = c->sess;
	uint32_t sn = bhs_cmdsn(h);
	uint32_t max = iscsi_conn_window_end(c);
	const char *why;

	c->exp_stat_sn = bhs_expstatsn(h);
	if (bhs_immediate(h))
		return true;
	if (sn == s->exp_cmd_sn && sn_le(sn, max)) {
		if (sn_lt(iscsi_conn_max_cmd_sn(c), sn))
			HL_INFO_RL(
			    ISCSI_LOG,
			    "%s: CmdSN %u beyond the free slots (MaxCmdSN now %u) but within "
			    "the advertised %u: accepted",
			    c->peer_str, sn, iscsi_conn_max_cmd_sn(c), max);
		s->exp_cmd_sn++;
		return true;
	}
	if (sn_lt(sn, s->exp_cmd_sn))
		why = "duplicate or stale";
	else if (sn_lt(max, sn))
		why = "beyond MaxCmdSN";
	else
		why = "ahead of ExpCmdSN (gap)";
	HL_NOTICE_RL(ISCSI_LOG,
	           "%s: %s itt 0x%x CmdSN %u outside the window (ExpCmdSN %u, MaxCmdSN %u, %u "
	           "active): %s, dropped",
	           c->peer_str, iscsi_opcode_name(bhs_opcode(h)), bhs_itt(h), sn, s->exp_cmd_sn,
	           max, c->nactive, why);
	return false;
}

/* ---- responses ---- */

static void scsi_rsp_residual(struct iscsi_task *t, uint8_t *flags, uint32_t *residual)
{
	uint32_t spdtl = t->cmd.xfer_len;

	if (spdtl == 0 && t->cmd.data_in)
		spdtl = t->cmd.data_in_len;
	*flags = 0;
	*residual = 0;
	if (spdtl > t->edtl) {
		*flags = ISCSI_RSP_OVERFLOW;
		*residual = spdtl - t->edtl;
	} else if (spdtl < t->edtl) {
		*flags = ISCSI_RSP_UNDERFLOW;
		*residual = t->edtl - spdtl;
	}
}

static void send_scsi_rsp(struct iscsi_conn *c, struct iscsi_task *t)
{
	struct iscsi_bhs h;
	uint8_t rflags;
	uint32_t residual;
	uint32_t dlen = 0;

	scsi_rsp_residual(t, &rflags, &residual);
	memset(&h, 0, sizeof(h));
	h.b[0] = ISCSI_OP_SCSI_RSP;
	h.b[1] = ISCSI_FLAG_FINAL | rflags;
	h.b[2] = 0; /* command completed at target */
	h.b[3] = t->cmd.status;
	bhs_set_itt(&h, t->itt);
	iscsi_conn_fill_sn(c, &h, true);
	bhs_put32(&h, 36, t->datasn); /* ExpDataSN: Data-In PDUs sent */
	bhs_put32(&h, 44, residual);
	if (t->cmd.sense_len) {
		uint32_t sl = HL_MIN((uint32_t)t->cmd.sense_len, (uint32_t)HL_SENSE_MAX);
		hl_put_be16(t->sense_buf, (uint16_t)sl);
		memcpy(t->sense_buf + 2, t->cmd.sense, sl);
		dlen = sl + 2;
	}
	iscsi_conn_queue(c, &h, dlen ? t->sense_buf : NULL, dlen, dlen ? t : NULL, NULL, false);
}

/*
 * Data-In PDUs of a read from t->din_off on (in offset order, DataSN in
 * order: DataPDUInOrder and DataSequenceInOrder are Yes), each at most
 * MaxRecvDataSegmentLength, a sequence (F bit) at most MaxBurstLength.
 * Final: up to len, the last PDU with the status when with_status. Not
 * final (task_data_ready): only whole PDUs that end at or before upto and
 * before len, so the PDUs are cut where the final call would cut them and
 * the last one is always left for it.
 */
static void data_in_pdus(struct iscsi_conn *c, struct iscsi_task *t, uint32_t len, uint32_t upto,
                         bool final, bool with_status)
{
	uint32_t max_seg =
	    c->params.max_recv_dsl_initiator ? c->params.max_recv_dsl_initiator : 8192;
	uint32_t burst = c->params.max_burst_length ? c->params.max_burst_length : len;

	while (t->din_off < len) {
		struct iscsi_bhs h;
		uint32_t off = t->din_off, in_burst = t->din_burst;
		uint32_t seg = HL_MIN(max_seg, len - off);
		seg = HL_MIN(seg, burst - in_burst);
		bool last = off + seg == len;
		bool end_of_seq = last || in_burst + seg == burst;

		if (!final && (last || off + seg > upto))
			break;
		memset(&h, 0, sizeof(h));
		h.b[0] = ISCSI_OP_DATA_IN;
		if (end_of_seq)
			h.b[1] |= ISCSI_FLAG_FINAL;
		bhs_set_lun(&h, t->lun_raw);
		bhs_set_itt(&h, t->itt);
		bhs_put32(&h, 20, ISCSI_RSVD_TAG);
		if (last && with_status) {
			uint8_t rflags;
			uint32_t residual;
			scsi_rsp_residual(t, &rflags, &residual);
			h.b[1] |= ISCSI_DATAIN_STATUS | rflags; /* O/U sit at the same bits */
			h.b[3] = t->cmd.status;
			iscsi_conn_fill_sn(c, &h, true);
			bhs_put32(&h, 44, residual);
		} else {
			iscsi_conn_fill_sn(c, &h, false);
			bhs_put32(&h, 24, 0); /* StatSN reserved without S */
		}
		bhs_put32(&h, 36, t->datasn++);
		bhs_put32(&h, 40, off);
		iscsi_conn_queue(c, &h, t->cmd.data + off, seg, t, NULL, false);
		t->din_off = off + seg;
		t->din_burst = end_of_seq ? 0 : in_burst + seg;
	}
}

/* Data-In PDUs for a read; the last one carries the status when there is no sense. */
static void send_data_in(struct iscsi_conn *c, struct iscsi_task *t, uint32_t len, bool with_status)
{
	data_in_pdus(c, t, len, len, true, with_status);
}

void iscsi_task_respond(struct iscsi_conn *c, struct iscsi_task *t)
{
	uint32_t len = 0;

	if (t->cmd.data_in && t->cmd.data)
		len = HL_MIN(t->cmd.data_in_len, t->edtl);
	/* din_off < len: early pieces never hold the last PDU (else the status goes alone) */
	if (len && t->cmd.status == HL_SAM_GOOD && t->cmd.sense_len == 0 && t->din_off < len) {
		send_data_in(c, t, len, true);
	} else {
		if (len)
			send_data_in(c, t, len, false);
		send_scsi_rsp(c, t);
	}
}

/* Answer a command ourselves (no scsi layer involved) with CHECK CONDITION. */
void iscsi_task_check_condition(struct iscsi_conn *c, struct iscsi_task *t, uint8_t key,
                                uint8_t asc, uint8_t ascq)
{
	t->cmd.data_in = false;
	t->cmd.xfer_len = 0;
	hl_scsi_set_sense(&t->cmd, key, asc, ascq);
	iscsi_task_deactivate(t);
	send_scsi_rsp(c, t);
	iscsi_task_finish(t);
}

/*
 * TASK SET FULL: no buffer for it now (the connection's or the server's
 * write budget, or the connection's buffers); the initiator retries once
 * earlier commands are done. Data-Out that follows finds no task and is dropped.
 */
static void task_set_full(struct iscsi_conn *c, struct iscsi_task *t)
{
	t->cmd.data_in = false;
	/*
	 * SAM-5: TASK SET FULL when this nexus has other commands in the task
	 * set (an initiator may lower its queue depth), BUSY when it has none
	 * (the target is busy for everyone: retry later, queue depth kept).
	 */
	unsigned others = c->nactive + c->nimmediate - (t->in_window || t->immediate ? 1u : 0u);
	t->cmd.status = others ? HL_SAM_TASK_SET_FULL : HL_SAM_BUSY;
	iscsi_task_deactivate(t);
	send_scsi_rsp(c, t);
	iscsi_task_put(t);
}

/* ---- SCSI command completion ---- */

static void task_done(struct hl_scsi_cmd *cmd)
{
	struct iscsi_task *t = hl_container_of(cmd, struct iscsi_task, cmd);
	struct iscsi_conn *c = t->conn;

	iscsi_conn_enter(c);
	c->nexec--;
	c->rd_inflight -= t->rd_charge;
	t->rd_charge = 0;
	if (t->aborted || c->state == CONN_CLOSED) {
		iscsi_task_finish_aborted(c, t);
	} else if (t->cmd.status == HL_SAM_GOOD && (t->cmd.n_abort_nexus || t->cmd.abort_others) &&
	           iscsi_preempt_abort_start(c, t)) {
		/* PREEMPT AND ABORT: answered once the preempted tasks are gone (xreset_done) */
		c->n_deferred++;
	} else {
		iscsi_task_deactivate(t);
		iscsi_task_respond(c, t);
		iscsi_task_finish(t);
	}
	if (c->wb_waiting && c->state == CONN_FFP)
		/* its budget came back: this connection's deferred R2Ts first */
		iscsi_write_retry(c);
	iscsi_logout_maybe_respond(c);
	iscsi_conn_leave(c);
}

/*
 * hl_scsi_cmd.data_ready: a READ's first bytes are final: send the whole
 * Data-In PDUs they fill now (not the last: it waits for the status). The
 * PDUs hold the task (and its buffer) until they are sent, like those of
 * the response; an aborted task or a closed connection sends nothing more.
 */
static void task_data_ready(struct hl_scsi_cmd *cmd, uint32_t bytes)
{
	struct iscsi_task *t = hl_container_of(cmd, struct iscsi_task, cmd);
	struct iscsi_conn *c = t->conn;

	if (t->aborted || c->state == CONN_CLOSED || !t->cmd.data)
		return;
	iscsi_conn_enter(c);
	data_in_pdus(c, t, HL_MIN(t->edtl, t->cmd.data_len), HL_MIN(bytes, t->edtl), false, false);
	iscsi_conn_leave(c);
}

void iscsi_task_exec(struct iscsi_task *t)
{
	struct iscsi_conn *c = t->conn;

	t->state = TASK_EXEC;
	t->din_off = 0;
	t->din_burst = 0;
	t->cmd.data_ready = t->cmd.data_in && t->cmd.data ? task_data_ready : NULL;
	c->nexec++;
	/* READ data on its way out: the connection stops taking PDUs above ISCSI_TX_HIGH */
	t->rd_charge = bhs_flags(&t->req) & ISCSI_CMD_READ ? t->edtl : 0;
	c->rd_inflight += t->rd_charge;
	c->rd_started += t->rd_charge;
	c->sess->nexus_used = true;
	t->cmd.done = task_done;
	t->cmd.arg = t;
	hl_scsi_cmd_exec(&t->cmd);
}

/* ---- receive-side header hooks ---- */

bool iscsi_session_is_discovery(const struct iscsi_conn *c)
{
	return c->sess->type == ISCSI_SESSION_DISCOVERY;
}

int iscsi_ffp_header(struct iscsi_conn *c, struct iscsi_rx *rx)
{
	const struct iscsi_bhs *h = &rx->bhs;
	uint8_t op = bhs_opcode(h);

	c->rx_task = NULL;
	c->rx_dout = NULL;
	c->rx_dout_reject = 0;
	c->rx_wb_full = false;
	if (rx->dsl == 0)
		return 0;
	if (op == ISCSI_OP_SCSI_CMD) {
		/* immediate data goes straight into the command's buffer */
		uint32_t edtl = bhs_edtl(h);
		if (iscsi_session_is_discovery(c) || !(bhs_flags(h) & ISCSI_CMD_WRITE) ||
		    rx->dsl > edtl || edtl > HL_SCSI_MAX_XFER || iscsi_task_find(c, bhs_itt(h)))
			return 0; /* the handler rejects or answers it; data lands in rx's buffer */
		if (c->buf_bytes + edtl > ISCSI_CONN_BUF_MAX)
			return 0; /* the handler answers TASK SET FULL */
		struct iscsi_task *t = task_alloc(c, h);
		if (!t)
			return -ENOMEM;
		if (iscsi_write_admit(c, t, bhs_flags(h) & ISCSI_FLAG_FINAL, rx->dsl) ==
		    ISCSI_WB_FULL) {
			iscsi_task_finish(t);
			c->rx_wb_full = true; /* the handler answers TASK SET FULL */
			return 0;
		}
		if (data_buf_alloc(t) < 0) {
			iscsi_task_finish(t);
			return -ENOMEM;
		}
		c->rx_task = t;
		rx->dst = t->cmd.data;
		return 0;
	}
	if (op == ISCSI_OP_DATA_OUT)
		return iscsi_data_out_header(c, rx);
	return 0;
}

/* ---- PDU handlers ---- */

static int parse_cdb(struct iscsi_conn *c, struct iscsi_rx *rx, struct iscsi_task *t)
{
	const struct iscsi_bhs *h = &rx->bhs;
	uint32_t off = 0;

	memcpy(t->cmd.cdb, &h->b[32], 16);
	t->cmd.cdb_len = 16;
	while (off + 4 <= rx->ahs_len) {
		uint16_t alen = hl_get_be16(&rx->ahs[off]);
		uint8_t type = rx->ahs[off + 2];
		uint32_t total = 3 + (uint32_t)alen;
		total = (total + 3) & ~3u;
		if (off + total > rx->ahs_len || alen == 0)
			return -EINVAL;
		if (type == 1) { /* extended CDB: AHSLength = extra CDB bytes + 1 reserved */
			uint32_t extra = (uint32_t)alen - 1;
			if (16 + extra > HL_CDB_MAX)
				return -EINVAL;
			memcpy(&t->cmd.cdb[16], &rx->ahs[off + 4], extra);
			t->cmd.cdb_len = (uint8_t)(16 + extra);
		} else if (type == 2) {
			return -EOPNOTSUPP; /* bidirectional */
		}
		off += total;
	}
	return 0;
}

static int handle_scsi_cmd(struct iscsi_conn *c, struct iscsi_rx *rx)
{
	const struct iscsi_bhs *h = &rx->bhs;
	struct iscsi_task *t = c->rx_task;
	uint8_t flags = bhs_flags(h);
	bool w = flags & ISCSI_CMD_WRITE, r = flags & ISCSI_CMD_READ, f = flags & ISCSI_FLAG_FINAL;
	uint32_t edtl = bhs_edtl(h);
	uint8_t reason = 0;

	c->rx_task = NULL;
	if (!iscsi_cmdsn_accept(c, h)) {
		if (t)
			iscsi_task_finish(t);
		return 0;
	}
	if (iscsi_session_is_discovery(c))
		reason = ISCSI_REJECT_PROTOCOL_ERROR;
	else if (!t && iscsi_task_find(c, bhs_itt(h)))
		reason = ISCSI_REJECT_TASK_IN_PROGRESS;
	else if (rx->dsl && (!w || !c->params.immediate_data || rx->dsl > edtl ||
	                     rx->dsl > c->params.first_burst_length))
		reason = ISCSI_REJECT_PROTOCOL_ERROR;
	else if (!f && (!w || c->params.initial_r2t))
		reason = ISCSI_REJECT_PROTOCOL_ERROR;
	if (reason) {
		if (t)
			iscsi_task_finish(t);
		iscsi_conn_send_reject(c, h, reason);
		return 0;
	}
	if (!t) {
		t = task_alloc(c, h);
		if (!t)
			return -ENOMEM;
	}
	/*
	 * A queued command takes a window slot. MaxCmdSN = ExpCmdSN + free slots - 1
	 * then never decreases: each accepted command moves both by one.
	 * Immediate commands do not consume CmdSN and take no slot: they are
	 * bounded by themselves (ISCSI_IMMEDIATE_MAX), or nothing would bound them.
	 */
	if (!bhs_immediate(h)) {
		t->in_window = true;
		c->nactive++;
	} else if (c->nimmediate >= ISCSI_IMMEDIATE_MAX) {
		HL_NOTICE_RL(ISCSI_LOG,
		             "%s: immediate SCSI command itt 0x%x while %u immediate commands "
		             "run: TASK SET FULL",
		             c->peer_str, t->itt, c->nimmediate);
		task_set_full(c, t);
		return 0;
	} else {
		t->immediate = true;
		c->nimmediate++;
	}
	const struct hl_scsi_lun_map *map = c->sess->target->luns;
	uint64_t lun = iscsi_lun_decode(t->lun_raw);
	t->cmd.map = map;
	t->cmd.lun = lun;
	t->cmd.lu = (map && lun < HL_SCSI_MAX_LUNS) ? map->lu[lun] : NULL;
	t->cmd.nexus = &c->sess->nexus;
	t->cmd.task_attr = flags & ISCSI_CMD_ATTR_MASK;
	t->cmd.tag = t->itt;
	t->cmd.data_out = w;
	t->cmd.data_in = r;
	t->cmd.data_len = (w || r) ? edtl : 0;

	int rc = parse_cdb(c, rx, t);
	if (rc == -EOPNOTSUPP) {
		iscsi_task_check_condition(c, t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
		return 0;
	}
	if (rc < 0) {
		iscsi_task_finish(t);
		iscsi_conn_send_reject(c, h, ISCSI_REJECT_INVALID_PDU_FIELD);
		return 0;
	}
	if ((w || r) && edtl > HL_SCSI_MAX_XFER) {
		/* too large to buffer: refuse without allocating; stray Data-Out is dropped */
		iscsi_task_check_condition(c, t, HL_SK_ILLEGAL_REQUEST, 0x24, 0x00);
		return 0;
	}
	if (!(w || r))
		t->edtl = 0;
	if (w && t->edtl && !t->wb.need &&
	    (c->rx_wb_full || iscsi_write_admit(c, t, f, rx->dsl) == ISCSI_WB_FULL)) {
		task_set_full(c, t);
		return 0;
	}
	if (!t->cmd.data && data_buf_need(t)) {
		rc = data_buf_alloc(t);
		if (rc == -EBUSY) {
			task_set_full(c, t);
			return 0;
		}
		if (rc < 0) {
			iscsi_task_check_condition(c, t, HL_SK_ABORTED_COMMAND, 0x55,
			                     0x03); /* insufficient resources */
			return 0;
		}
		if (w && rx->dsl) /* immediate data that arrived before its buffer */
			memcpy(t->cmd.data, rx->data, rx->dsl);
	}
	if (!w) {
		iscsi_task_exec(t);
		return 0;
	}
	t->imm_len = rx->dsl;
	t->received = rx->dsl;
	if (!f) {
		uint32_t burst = HL_MIN(c->params.first_burst_length, t->edtl);
		t->unsol_len = burst > t->imm_len ? burst - t->imm_len : 0;
	}
	t->unsol_done = t->unsol_len == 0;
	t->r2t_next_offset = t->imm_len + t->unsol_len;
	if (!t->unsol_done)
		iscsi_dout_arm(c);
	iscsi_task_data_progress(c, t);
	return 0;
}

/*
 * A discarded PDU that carried the expected CmdSN leaves a hole in the command sequence: every
 * later command would wait behind it. Only a retry with the same CmdSN fills it, and at ERL 0
 * initiators fail the task on the Reject instead (libiscsi does), so the connection is closed
 * and the initiator's session recovery re-issues what was outstanding.
 */
static bool digest_leaves_gap(struct iscsi_conn *c, const struct iscsi_bhs *h)
{
	uint32_t sn = bhs_cmdsn(h);

	switch (bhs_opcode(h)) {
	case ISCSI_OP_SCSI_CMD:
	case ISCSI_OP_NOP_OUT:
	case ISCSI_OP_TEXT_REQ:
	case ISCSI_OP_LOGOUT_REQ:
	case ISCSI_OP_TMF_REQ:
		break;
	default:
		return false;
	}
	return c->params.error_recovery_level == 0 && !bhs_immediate(h) &&
	       sn == c->sess->exp_cmd_sn && sn_le(sn, iscsi_conn_window_end(c));
}

int iscsi_ffp_handle(struct iscsi_conn *c, struct iscsi_rx *rx)
{
	const struct iscsi_bhs *h = &rx->bhs;

	if (!rx->ddigest_ok && bhs_opcode(h) != ISCSI_OP_DATA_OUT) {
		/* RFC 7143 7.8: discard the PDU, answer Reject; it consumed no CmdSN */
		if (c->rx_task) {
			iscsi_task_finish(c->rx_task);
			c->rx_task = NULL;
		}
		bool gap = digest_leaves_gap(c, h);
		iscsi_conn_send_reject_close(c, h, ISCSI_REJECT_DATA_DIGEST, gap);
		if (gap) {
			HL_NOTICE(
			    ISCSI_LOG,
			    "%s: data digest error on %s CmdSN %u at ERL 0: the CmdSN cannot be "
			    "retried in this connection, closing after the Reject",
			    c->peer_str, iscsi_opcode_name(bhs_opcode(h)), bhs_cmdsn(h));
			c->state = CONN_LOGOUT; /* read nothing more */
		}
		return 0;
	}
	switch (bhs_opcode(h)) {
	case ISCSI_OP_SCSI_CMD:
		return handle_scsi_cmd(c, rx);
	case ISCSI_OP_DATA_OUT:
		return iscsi_data_out_handle(c, rx);
	case ISCSI_OP_NOP_OUT:
		return iscsi_nop_out_handle(c, rx);
	case ISCSI_OP_TEXT_REQ:
		return iscsi_text_handle(c, rx);
	case ISCSI_OP_LOGOUT_REQ:
		return iscsi_logout_handle(c, rx);
	case ISCSI_OP_TMF_REQ:
		return iscsi_tmf_handle(c, rx);
	case ISCSI_OP_LOGIN_REQ:
		iscsi_conn_send_reject(c, h, ISCSI_REJECT_PROTOCOL_ERROR);
		return 0;
	default:
		/* SNACK at ERL 0, unknown or target-only opcodes */
		iscsi_conn_send_reject(c, h, ISCSI_REJECT_CMD_NOT_SUPPORTED);
		return 0;
	}
}

/*
 * Drop the tasks still collecting data and the TMFs; the tasks inside the scsi
 * layer are marked aborted (no response) when abort_executing, else they keep
 * running and answer (a logout waits for them).
 */
static void ffp_drop_tasks(struct iscsi_conn *c, bool abort_executing)
{
	struct iscsi_task *t, *tmp;

	if (c->rx_task) {
		iscsi_task_finish(c->rx_task);
		c->rx_task = NULL;
	}
	c->rx_dout = NULL;
	hl_list_for_each_entry_safe(t, tmp, &c->tasks, link)
	{
		if (t->state == TASK_DATA_OUT) {
			iscsi_task_finish(t);
		} else if (t->state == TASK_EXEC) {
			if (abort_executing)
				t->aborted = true;
			/* the TMFs below are dropped unanswered: none waits for it now */
		}
	}
	while (!hl_list_empty(&c->tmfs)) {
		struct iscsi_tmf *tmf = hl_list_first(&c->tmfs, struct iscsi_tmf, link);
		hl_list_del(&tmf->link);
		free(tmf);
	}
}

void iscsi_ffp_abort_all(struct iscsi_conn *c)
{
	ffp_drop_tasks(c, true);
}

void iscsi_ffp_drop_unfinished(struct iscsi_conn *c)
{
	ffp_drop_tasks(c, false);
}

void iscsi_session_free(struct iscsi_session *s)
{
	if (s->conn)
		iscsi_session_forget(s->conn->srv, s);
	if (s->type == ISCSI_SESSION_NORMAL && s->target && s->target->luns)
		hl_scsi_nexus_gone(s->target->luns, &s->nexus);
	free(s);
}
