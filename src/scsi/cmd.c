/*
 * cmd.c - command dispatch: table lookup and the checks every command
 * shares, in the order SAM-5/SPC-4 give them:
 *   1. no LU at this LUN: only INQUIRY, REPORT LUNS, REQUEST SENSE run;
 *      everything else gets LOGICAL UNIT NOT SUPPORTED;
 *   2. unsupported opcode / service action: INVALID COMMAND OPERATION CODE;
 *   3. a pending unit attention for this nexus (except for the commands
 *      SPC-4 exempts);
 *   4. CDB shorter than the command, or a bit set that the command's usage
 *      mask does not have: INVALID FIELD IN CDB with a field pointer;
 *   5. with an ALUA access provider: the asking port's target port group
 *      is not active and the command is not one its state allows: NOT
 *      READY (access_allowed);
 *   6. a reservation held through another nexus: RESERVATION CONFLICT;
 * then the handler. A write to a write-protected LU gets DATA PROTECT from
 * scsi_write_protected(), which handlers call after their own CDB checks
 * (SBC-3: an invalid field or LBA is reported before the medium's state).
 */
#include <stdlib.h>
#include <string.h>

#include "hotlun/event.h"
#include "hotlun/log.h"
#include "scsi/scsi_internal.h"

const struct scsi_cmd_desc *scsi_cmd_lookup(const struct hl_lu *lu, uint8_t opcode, uint16_t sa)
{
	const struct scsi_opcode *op = &scsi_disk_ops[opcode];
	const struct scsi_cmd_desc *d = op->cmd;

	for (unsigned i = 0; !d && i < op->n_sa; i++) {
		if (op->sa[i].sa == sa)
			d = &op->sa[i];
	}
	return scsi_cmd_avail(d, lu) ? d : NULL;
}

void scsi_data_in(struct hl_scsi_cmd *cmd, const void *buf, uint32_t len, uint32_t alloc_len)
{
	uint32_t n = HL_MIN(len, alloc_len);

	cmd->xfer_len = n;
	n = HL_MIN(n, scsi_din_cap(cmd));
	if (n)
		memcpy(cmd->data, buf, n);
	cmd->data_in_len = n;
	scsi_set_good(cmd);
}

bool scsi_param_list_start(struct hl_scsi_cmd *cmd, uint32_t plen, uint32_t min_len)
{
	if (plen == 0) {
		scsi_set_good(cmd);
		return false;
	}
	/* the transport carried less than the CDB announced: the list cannot be read */
	if (scsi_dout_len(cmd) < plen) {
		hl_scsi_set_sense(cmd, HL_SK_ILLEGAL_REQUEST, SCSI_ASC_INVALID_FIELD_IU);
		return false;
	}
	if (plen < min_len) {
		hl_scsi_set_sense(cmd, HL_SK_ILLEGAL_REQUEST, SCSI_ASC_PARAM_LIST_LEN);
		return false;
	}
	return true;
}

bool scsi_write_protected(struct hl_scsi_cmd *cmd)
{
	if (!cmd->lu->cfg.read_only)
		return false;
	hl_scsi_set_sense(cmd, HL_SK_DATA_PROTECT, SCSI_ASC_WRITE_PROTECTED);
	return true;
}

/*
 * A media command that read data passed the access check when it started;
 * if its group is not active any more when it completes (this gateway was
 * frozen in between, and its lease ran out: another gateway may have
 * written the blocks since), its data is not sent: NOT READY, ASYMMETRIC
 * ACCESS STATE TRANSITION, and the initiator reads again on another path.
 * Checked last before the transport sends anything (docs/gateways.md, the
 * bound on a split brain).
 */
static bool access_serving(const struct hl_scsi_cmd *cmd)
{
	const struct hl_lu_access *acc = scsi_lu_access(cmd->lu);
	const struct hl_scsi_port *port = cmd->nexus ? cmd->nexus->port : NULL;

	if (!acc)
		return true;
	void *arg = __atomic_load_n(&cmd->lu->access_arg, __ATOMIC_RELAXED);
	if (acc->serving)
		return acc->serving(arg);
	enum hl_alua_state st = acc->state(arg, port ? port->tpg_id : 0);
	return st == HL_ALUA_AO || st == HL_ALUA_ANO;
}

/*
 * The same check for data a READ hands the transport before it completes
 * (hl_scsi_cmd.data_ready): each piece passes it when it leaves, after it
 * was read, as the whole data does at completion.
 */
bool scsi_access_ok(const struct hl_scsi_cmd *cmd)
{
	return !(cmd->state & SCSI_CMD_BUSY) || access_serving(cmd);
}

static void access_recheck(struct hl_scsi_cmd *cmd)
{
	if (access_serving(cmd))
		return;
	cmd->data_in_len = 0;
	hl_scsi_set_sense(cmd, HL_SK_NOT_READY, SCSI_ASC_ALUA_TRANSITION);
}

void scsi_cmd_complete(struct hl_scsi_cmd *cmd)
{
	struct scsi_cmd_priv *p = scsi_priv(cmd);

	scsi_bounce_put(p->bounce); /* and its charge to the scratch budget */
	p->bounce = NULL;
	scsi_range_unlock(cmd);
	/* every command completes here exactly once: the one place it is uncounted */
	if (cmd->state & SCSI_CMD_BUSY) {
		if (cmd->data_in_len && cmd->status == HL_SAM_GOOD)
			access_recheck(cmd);
		cmd->state &= ~SCSI_CMD_BUSY;
		__atomic_sub_fetch(&cmd->lu->busy, 1, __ATOMIC_RELEASE);
	}
	cmd->done(cmd);
}

/*
 * ALUA (SPC-4 5.15.2.4): run d only if the state of the asking port's
 * target port group allows it. A media command is counted in lu->busy
 * before the state is read, with a full barrier: the ownership module
 * moves its group to TRANSITIONING and then waits for hl_lu_busy() == 0,
 * so either this command sees TRANSITIONING and is refused, or the
 * handover sees it counted and waits for it (scsi_cmd_complete uncounts).
 * A command refused here is uncounted by its completion like any other.
 */
static bool access_allowed(struct hl_scsi_cmd *cmd, const struct scsi_cmd_desc *d,
                           const struct hl_lu_access *acc)
{
	struct hl_lu *lu = cmd->lu;
	const struct hl_scsi_port *port = cmd->nexus ? cmd->nexus->port : NULL;

	if (d->flags & SCSI_F_MEDIA) {
		__atomic_add_fetch(&lu->busy, 1, __ATOMIC_SEQ_CST);
		cmd->state |= SCSI_CMD_BUSY;
	}
	void *arg = __atomic_load_n(&lu->access_arg, __ATOMIC_RELAXED);
	switch (acc->state(arg, port ? port->tpg_id : 0)) {
	case HL_ALUA_AO:
	case HL_ALUA_ANO:
		return true;
	case HL_ALUA_STANDBY:
		if (d->flags & SCSI_F_ALUA_SB)
			return true;
		hl_scsi_set_sense(cmd, HL_SK_NOT_READY, SCSI_ASC_ALUA_STANDBY);
		return false;
	case HL_ALUA_TRANSITIONING:
		if (d->flags & SCSI_F_ALUA_TR)
			return true;
		if (d->flags & SCSI_F_ALUA_TR_SB)
			hl_scsi_set_sense(cmd, HL_SK_NOT_READY, SCSI_ASC_ALUA_STANDBY);
		else
			hl_scsi_set_sense(cmd, HL_SK_NOT_READY, SCSI_ASC_ALUA_TRANSITION);
		return false;
	default:
		/* unavailable; offline (a port that should not even get commands) and
		 * unknown values are treated the same */
		if (d->flags & SCSI_F_ALUA_UN)
			return true;
		hl_scsi_set_sense(cmd, HL_SK_NOT_READY, SCSI_ASC_ALUA_UNAVAILABLE);
		return false;
	}
}

/* Does lu offer any service action of op? An opcode with none is unsupported as a whole. */
static bool any_sa_avail(const struct scsi_opcode *op, const struct hl_lu *lu)
{
	for (unsigned i = 0; i < op->n_sa; i++) {
		if (scsi_cmd_avail(&op->sa[i], lu))
			return true;
	}
	return false;
}

/* Bits set in the CDB that the command does not use; the control byte's vendor bits are free. */
static bool cdb_fields_ok(struct hl_scsi_cmd *cmd, const struct scsi_cmd_desc *d)
{
	for (unsigned i = 1; i < d->cdb_len; i++) {
		uint8_t allowed = d->usage[i];
		if (i == d->cdb_len - 1u)
			allowed |= 0xc0;
		uint8_t bad = cmd->cdb[i] & (uint8_t)~allowed;
		if (bad) {
			int bit = 7;
			while (!(bad & (1u << bit)))
				bit--;
			scsi_sense_invalid_cdb(cmd, (uint16_t)i, bit);
			return false;
		}
	}
	return true;
}

/* Service actions of opcodes whose SA field is bits 4:0 of byte 1 are part of the mask check. */
static enum scsi_exec_result dispatch(struct hl_scsi_cmd *cmd)
{
	uint8_t opcode = cmd->cdb[0];
	const struct scsi_opcode *op = &scsi_disk_ops[opcode];
	const struct scsi_cmd_desc *d;

	if (cmd->cdb_len == 0 || cmd->cdb_len > HL_CDB_MAX) {
		hl_scsi_set_sense(cmd, HL_SK_ILLEGAL_REQUEST, SCSI_ASC_INVALID_OPCODE);
		return SCSI_DONE;
	}
	d = scsi_cmd_lookup(cmd->lu, opcode, scsi_cdb_sa(cmd->cdb));

	if (!cmd->lu && !(d && (d->flags & SCSI_F_NO_LU))) {
		hl_scsi_set_sense(cmd, HL_SK_ILLEGAL_REQUEST, SCSI_ASC_LU_NOT_SUPPORTED);
		return SCSI_DONE;
	}
	if (!d) {
		if (any_sa_avail(op, cmd->lu))
			scsi_sense_invalid_cdb(cmd, 1, 4);
		else
			hl_scsi_set_sense(cmd, HL_SK_ILLEGAL_REQUEST, SCSI_ASC_INVALID_OPCODE);
		return SCSI_DONE;
	}
	if (cmd->lu && !(d->flags & SCSI_F_UA_PASS)) {
		uint8_t asc, ascq;
		if (scsi_ua_report(cmd, &asc, &ascq)) {
			hl_scsi_set_sense(cmd, HL_SK_UNIT_ATTENTION, asc, ascq);
			return SCSI_DONE;
		}
	}
	if (cmd->cdb_len < d->cdb_len) {
		/* the transport padded nothing: the command is cut short */
		scsi_sense_invalid_cdb(cmd, cmd->cdb_len, -1);
		return SCSI_DONE;
	}
	if (!cdb_fields_ok(cmd, d))
		return SCSI_DONE;
	if (cmd->lu) {
		const struct hl_lu_access *acc = scsi_lu_access(cmd->lu);
		if (acc && !access_allowed(cmd, d, acc))
			return SCSI_DONE;
	}
	if (cmd->lu && scsi_rsv_conflict(cmd, d))
		return SCSI_DONE;
	return d->exec(cmd);
}

void hl_scsi_cmd_exec(struct hl_scsi_cmd *cmd)
{
	struct scsi_cmd_priv *p = scsi_priv(cmd);

	memset(p, 0, sizeof(*p));
	cmd->data_in_len = 0;
	cmd->xfer_len = 0;
	cmd->status = HL_SAM_GOOD;
	cmd->sense_len = 0;
	cmd->n_abort_nexus = 0;
	cmd->abort_others = false;
	cmd->rl_mode = 0;
	cmd->state = 0;
	/* only a READ sets it, around its submit: others (EXTENDED COPY's reads) find it false */
	cmd->stream = false;
	cmd->reactor = hl_reactor_current();
	if (!cmd->data)
		cmd->data_len = 0; /* a transport bug must not become a wild write */
	if (cmd->lu && cmd->map && cmd->lun < HL_SCSI_MAX_LUNS && cmd->map->lu[cmd->lun] != cmd->lu)
		HL_WARN_RL(SCSI_COMPONENT, "LUN %llu: cmd->lu does not match the LUN map",
		           (unsigned long long)cmd->lun);

	if (dispatch(cmd) == SCSI_DONE)
		scsi_cmd_complete(cmd);
}
