/*
 * nop_text_logout.c - the full feature phase's requests that are not SCSI
 * commands or task management: NOP-Out (answered with NOP-In), Text
 * (SendTargets, and the keys FFP may renegotiate) with continuation both
 * ways, and Logout, whose response waits for the commands still in the
 * scsi layer. The dispatch is session.c's (iscsi_ffp_handle).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hotlun/log.h"
#include "iscsi/iscsi_internal.h"

int iscsi_nop_out_handle(struct iscsi_conn *c, struct iscsi_rx *rx)
{
	const struct iscsi_bhs *h = &rx->bhs;

	if (!iscsi_cmdsn_accept(c, h))
		return 0;
	if (bhs_itt(h) == ISCSI_RSVD_TAG)
		return 0; /* an answer to our ping, or a ping that wants no answer */
	struct iscsi_bhs rsp;
	uint8_t *copy = NULL;
	if (rx->dsl) {
		copy = malloc(rx->dsl);
		if (!copy)
			return -ENOMEM;
		memcpy(copy, rx->data, rx->dsl);
	}
	memset(&rsp, 0, sizeof(rsp));
	rsp.b[0] = ISCSI_OP_NOP_IN;
	rsp.b[1] = ISCSI_FLAG_FINAL;
	bhs_set_lun(&rsp, bhs_lun(h));
	bhs_set_itt(&rsp, bhs_itt(h));
	bhs_put32(&rsp, 20, ISCSI_RSVD_TAG);
	iscsi_conn_fill_sn(c, &rsp, true);
	return iscsi_conn_queue(c, &rsp, copy, rx->dsl, NULL, copy, false);
}

static void text_send_piece(struct iscsi_conn *c)
{
	struct iscsi_text_state *ts = &c->text;
	uint32_t max = c->params.max_recv_dsl_initiator ? c->params.max_recv_dsl_initiator : 8192;
	size_t left = ts->rsp_len - ts->rsp_off;
	size_t n = HL_MIN(left, (size_t)max);
	bool last = n == left;
	struct iscsi_bhs h;
	uint8_t *piece = NULL;

	if (n) {
		piece = malloc(n);
		if (!piece) {
			iscsi_conn_close(c, "no memory");
			return;
		}
		memcpy(piece, ts->rsp + ts->rsp_off, n);
	}
	ts->rsp_off += n;
	memset(&h, 0, sizeof(h));
	h.b[0] = ISCSI_OP_TEXT_RSP;
	h.b[1] = last ? ISCSI_FLAG_FINAL : ISCSI_TEXT_CONTINUE;
	bhs_set_lun(&h, 0);
	bhs_set_itt(&h, ts->itt);
	if (last) {
		ts->ttt = ISCSI_RSVD_TAG;
		free(ts->rsp);
		ts->rsp = NULL;
		ts->rsp_len = ts->rsp_off = 0;
	} else if (ts->ttt == ISCSI_RSVD_TAG) {
		ts->ttt = c->next_ttt++;
	}
	bhs_put32(&h, 20, ts->ttt);
	iscsi_conn_fill_sn(c, &h, true);
	iscsi_conn_queue(c, &h, piece, (uint32_t)n, NULL, piece, false);
}

int iscsi_text_handle(struct iscsi_conn *c, struct iscsi_rx *rx)
{
	const struct iscsi_bhs *h = &rx->bhs;
	struct iscsi_text_state *ts = &c->text;
	uint32_t ttt = bhs_ttt(h);

	if (!iscsi_cmdsn_accept(c, h))
		return 0;
	if (ttt != ISCSI_RSVD_TAG) {
		/* the initiator asks for the next piece of a long answer */
		if (ttt != ts->ttt || bhs_itt(h) != ts->itt || !ts->rsp || rx->dsl) {
			iscsi_conn_send_reject(c, h, ISCSI_REJECT_PROTOCOL_ERROR);
			return 0;
		}
		text_send_piece(c);
		return 0;
	}
	/* a new request ends any answer in progress */
	free(ts->rsp);
	ts->rsp = NULL;
	ts->rsp_len = ts->rsp_off = 0;
	ts->ttt = ISCSI_RSVD_TAG;
	if (bhs_itt(h) != ts->itt) {
		free(ts->req);
		ts->req = NULL;
		ts->req_len = 0;
	}
	ts->itt = bhs_itt(h);
	if (rx->dsl) {
		if (ts->req_len + rx->dsl > 64 * 1024) {
			iscsi_conn_send_reject(c, h, ISCSI_REJECT_PROTOCOL_ERROR);
			return 0;
		}
		uint8_t *nr = realloc(ts->req, ts->req_len + rx->dsl);
		if (!nr)
			return -ENOMEM;
		memcpy(nr + ts->req_len, rx->data, rx->dsl);
		ts->req = nr;
		ts->req_len += rx->dsl;
	}
	if (bhs_flags(h) & ISCSI_TEXT_CONTINUE) {
		/* more request text follows: acknowledge with an empty response */
		struct iscsi_bhs rsp;
		memset(&rsp, 0, sizeof(rsp));
		rsp.b[0] = ISCSI_OP_TEXT_RSP;
		bhs_set_itt(&rsp, ts->itt);
		bhs_put32(&rsp, 20, ISCSI_RSVD_TAG);
		iscsi_conn_fill_sn(c, &rsp, true);
		return iscsi_conn_queue(c, &rsp, NULL, 0, NULL, NULL, false);
	}

	struct iscsi_kvlist kv = {0};
	struct iscsi_textbuf tb = {0};
	int rc = ts->req_len ? iscsi_kvlist_parse(&kv, ts->req, ts->req_len) : 0;
	free(ts->req);
	ts->req = NULL;
	ts->req_len = 0;
	const char *dup = NULL;
	if (rc == 0 && iscsi_kvlist_find_duplicate(&kv, &dup) < 0)
		rc =
		    -EINVAL; /* a key twice (e.g. many SendTargets): refuse, do not multiply work */
	if (rc < 0) {
		iscsi_kvlist_free(&kv);
		iscsi_conn_send_reject(c, h, ISCSI_REJECT_PROTOCOL_ERROR);
		return 0;
	}
	for (size_t i = 0; i < kv.n && rc >= 0; i++) {
		const char *key = kv.kv[i].key, *value = kv.kv[i].value;
		if (strcmp(key, "SendTargets") == 0) {
			rc = iscsi_sendtargets(c, value, &tb);
			if (rc == -EINVAL)
				rc = iscsi_textbuf_add(&tb, key, "Reject");
		} else if (strcmp(key, "MaxRecvDataSegmentLength") == 0) {
			/* declarative and allowed in FFP: the initiator changes what it accepts */
			char answer[256] = "";
			struct iscsi_params p = c->params;
			enum iscsi_neg_result nr = iscsi_negotiate_key(
			    &p, &c->lim, c->sess->type, key, value, answer, sizeof(answer));
			if (nr == ISCSI_NEG_PROTOCOL_ERROR || nr == ISCSI_NEG_NOT_HANDLED)
				rc = iscsi_textbuf_add(&tb, key, "Reject");
			else
				c->params.max_recv_dsl_initiator = p.max_recv_dsl_initiator;
		} else {
			/* other known keys are not renegotiated in FFP by this target */
			char answer[256] = "";
			struct iscsi_params p = c->params;
			enum iscsi_neg_result nr = iscsi_negotiate_key(
			    &p, &c->lim, c->sess->type, key, value, answer, sizeof(answer));
			bool known =
			    nr != ISCSI_NEG_NOT_HANDLED && strcmp(answer, "NotUnderstood") != 0;
			rc = iscsi_textbuf_add(&tb, key, known ? "Reject" : "NotUnderstood");
		}
	}
	iscsi_kvlist_free(&kv);
	if (rc < 0) {
		iscsi_textbuf_free(&tb);
		return -ENOMEM;
	}
	ts->rsp = tb.data;
	ts->rsp_len = tb.len;
	ts->rsp_off = 0;
	text_send_piece(c);
	return 0;
}

/*
 * The Logout Response of a connection that closes: StatSN is filled when it is
 * queued, after the responses of the commands that were still executing.
 * While the server drains for a restart, Time2Wait says how long to wait
 * before logging in again (RFC 7143 11.15.2: below ErrorRecoveryLevel 2 the
 * initiator may ignore it; it is a hint, nothing depends on it).
 */
static int logout_respond(struct iscsi_conn *c)
{
	struct iscsi_bhs rsp;

	c->logout_pending = false;
	memset(&rsp, 0, sizeof(rsp));
	rsp.b[0] = ISCSI_OP_LOGOUT_RSP;
	rsp.b[1] = ISCSI_FLAG_FINAL;
	rsp.b[2] = c->logout_response;
	bhs_set_itt(&rsp, c->logout_itt);
	iscsi_conn_fill_sn(c, &rsp, true);
	/* Time2Retain stays 0: nothing to recover at ERL 0 */
	hl_put_be16(&rsp.b[40], iscsi_server_time2wait(c->srv));
	return iscsi_conn_queue(c, &rsp, NULL, 0, NULL, NULL,
	                        c->logout_response == ISCSI_LOGOUT_RSP_OK);
}

/* A deferred Logout Response goes once no command of c is left to answer. */
void iscsi_logout_maybe_respond(struct iscsi_conn *c)
{
	if (c->logout_pending && c->nexec == 0 && c->n_deferred == 0 && c->state == CONN_LOGOUT)
		logout_respond(c);
}

/*
 * A closing logout drops the tasks still collecting data (no more PDUs are
 * read, so they could never complete), but lets the commands inside the scsi
 * layer finish and answer first: the initiator that logs out because the
 * target asked it to (a restart) then gets a status for every command it
 * sent, instead of having to retry them after the next login.
 */
int iscsi_logout_handle(struct iscsi_conn *c, struct iscsi_rx *rx)
{
	const struct iscsi_bhs *h = &rx->bhs;
	uint8_t reason = bhs_flags(h) & 0x7f;
	uint8_t response = ISCSI_LOGOUT_RSP_OK;

	if (!iscsi_cmdsn_accept(c, h))
		return 0;
	if (reason == ISCSI_LOGOUT_RECOVERY)
		response = ISCSI_LOGOUT_RSP_NO_RECOVERY;
	else if (reason == ISCSI_LOGOUT_CLOSE_CONN && hl_get_be16(&h->b[20]) != c->cid)
		response = ISCSI_LOGOUT_RSP_NO_CID;
	else if (reason > ISCSI_LOGOUT_RECOVERY) {
		iscsi_conn_send_reject(c, h, ISCSI_REJECT_INVALID_PDU_FIELD);
		return 0;
	}
	c->logout_itt = bhs_itt(h);
	c->logout_response = response;
	HL_INFO(ISCSI_LOG, "%s: logout (reason %u)", c->peer_str, reason);
	if (response != ISCSI_LOGOUT_RSP_OK)
		return logout_respond(c);
	c->state = CONN_LOGOUT;
	iscsi_ffp_drop_unfinished(c);
	if (c->nexec || c->n_deferred) {
		c->logout_pending = true; /* task_done / xreset_done answer once the last is done */
		return 0;
	}
	return logout_respond(c);
}
