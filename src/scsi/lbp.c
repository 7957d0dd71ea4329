/*
 * lbp.c - logical block provisioning (SBC-3 4.7): WRITE SAME(10/16),
 * UNMAP and GET LBA STATUS, over the origin's DISCARD and WRITE_ZEROES.
 *
 * An LU is thin (LBPME = 1, VPD B2 listed, UNMAP and GET LBA STATUS
 * offered) when its origin can deallocate. WRITE SAME works on every LU:
 * a zero block becomes one WRITE_ZEROES request (or a DISCARD, when the
 * UNMAP bit asks for it and deallocated blocks read back as zeroes); any
 * other block is written out in chunks of a buffer filled with copies of it.
 * Every request holds its LBA range shared, like any write, so COMPARE AND
 * WRITE stays atomic against it.
 */
#include <stdlib.h>
#include <string.h>

#include "scsi/scsi_internal.h"

#define WS_CHUNK (1u << 20) /* bytes per pattern write of WRITE SAME */

bool scsi_lu_thin(const struct hl_lu *lu)
{
	return lu->thin;
}

bool scsi_lu_unmap_avail(const struct hl_lu *lu)
{
	/* a write-protected LU recognises UNMAP to refuse it with DATA PROTECT */
	return lu->thin || lu->cfg.read_only;
}

static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (p[i])
			return false;
	}
	return true;
}

static void lbp_done(struct hl_scsi_cmd *cmd, int result)
{
	if (result < 0)
		sbc_io_error(cmd, result, true);
	else
		scsi_set_good(cmd);
	scsi_cmd_complete(cmd);
}

/* ---- WRITE SAME ---- */

/*
 * priv: lba = next block, count = blocks left, aux = the origin op for a
 * single-request WRITE SAME (DISCARD or WRITE_ZEROES), or 0 for a pattern
 * written from bounce (WS_CHUNK bytes of copies of the data-out block).
 */
static void ws_step(struct hl_scsi_cmd *cmd, int result)
{
	struct scsi_cmd_priv *p = scsi_priv(cmd);
	uint32_t bs = cmd->lu->block_size;

	if (result < 0 || p->count == 0) {
		lbp_done(cmd, result);
		return;
	}
	uint32_t n = HL_MIN(p->count, WS_CHUNK / bs);
	uint64_t lba = p->lba;
	p->lba += n;
	p->count -= n;
	cmd->iov[0].iov_base = p->bounce;
	cmd->iov[0].iov_len = (size_t)n * bs;
	/* completions never run inside submit, so chaining here cannot recurse */
	int rc = scsi_block_io(cmd, HL_IO_WRITE, 0, lba, n, cmd->iov, 1, ws_step);
	if (rc < 0) {
		sbc_submit_failed(cmd, rc, true);
		scsi_cmd_complete(cmd);
	}
}

static void ws_start(struct hl_scsi_cmd *cmd)
{
	struct scsi_cmd_priv *p = scsi_priv(cmd);

	if (p->aux) {
		int rc = scsi_block_io(cmd, (enum hl_io_op)p->aux, 0, p->lba, p->count, NULL, 0,
		                       lbp_done);
		if (rc < 0) {
			sbc_submit_failed(cmd, rc, true);
			scsi_cmd_complete(cmd);
		}
		return;
	}
	ws_step(cmd, 0);
}

enum scsi_exec_result sbc_write_same(struct hl_scsi_cmd *cmd)
{
	struct hl_lu *lu = cmd->lu;
	struct scsi_cmd_priv *p = scsi_priv(cmd);
	bool ten = cmd->cdb[0] == 0x41;
	uint64_t lba = ten ? hl_get_be32(cmd->cdb + 2) : hl_get_be64(cmd->cdb + 2);
	uint32_t count = ten ? hl_get_be16(cmd->cdb + 7) : hl_get_be32(cmd->cdb + 10);
	uint16_t len_byte = ten ? 7 : 10;
	bool unmap = cmd->cdb[1] & 0x08;
	bool ndob = !ten && (cmd->cdb[1] & 0x01); /* SBC-4: no data-out, the block is zeroes */

	if (cmd->cdb[1] & 0xe0) { /* WRPROTECT: no protection information */
		scsi_sense_invalid_cdb(cmd, 1, 7);
		return SCSI_DONE;
	}
	/* WSNZ = 1: a zero count (the whole medium in SBC-3) is refused */
	if (count == 0 || count > SCSI_WS_MAX_BLOCKS(lu)) {
		scsi_sense_invalid_cdb(cmd, len_byte, -1);
		return SCSI_DONE;
	}
	if (!sbc_lba_range_ok(cmd, lba, count))
		return SCSI_DONE;
	cmd->xfer_len = ndob ? 0 : lu->block_size;
	if (scsi_write_protected(cmd))
		return SCSI_DONE;
	if (unmap && !lu->thin) {
		scsi_sense_invalid_cdb(cmd, 1, 3);
		return SCSI_DONE;
	}
	/* exactly one block of data-out (none with NDOB): anything else is malformed */
	if (scsi_dout_len(cmd) != cmd->xfer_len) {
		scsi_sense_invalid_cdb(cmd, len_byte, -1);
		return SCSI_DONE;
	}
	scsi_set_good(cmd);
	p->lba = lba;
	p->count = count;
	p->aux = 0;
	if (ndob || all_zero(cmd->data, lu->block_size)) {
		p->aux = (unmap && lu->lbprz) ? HL_IO_DISCARD : HL_IO_WRITE_ZEROES;
	} else {
		size_t chunk = HL_MIN((size_t)count * lu->block_size, WS_CHUNK);
		p->bounce = scsi_bounce_get(cmd, chunk, false);
		if (!p->bounce)
			return SCSI_DONE; /* BUSY */
		for (size_t off = 0; off < chunk; off += lu->block_size)
			memcpy(p->bounce + off, cmd->data, lu->block_size);
	}
	if (scsi_range_lock(cmd, lba, count, false, ws_start))
		ws_start(cmd);
	return SCSI_PENDING;
}

/* ---- UNMAP ---- */

#define UNMAP_HDR  8
#define UNMAP_DESC 16

/* priv: aux = index of the next descriptor, count = number of descriptors. */
static void unmap_step(struct hl_scsi_cmd *cmd, int result)
{
	struct scsi_cmd_priv *p = scsi_priv(cmd);

	if (result < 0) {
		lbp_done(cmd, result);
		return;
	}
	while (p->aux < p->count) {
		const uint8_t *d = cmd->data + UNMAP_HDR + (size_t)p->aux * UNMAP_DESC;
		uint64_t lba = hl_get_be64(d);
		uint32_t n = hl_get_be32(d + 8);
		p->aux++;
		if (n == 0)
			continue;
		int rc = scsi_block_io(cmd, HL_IO_DISCARD, 0, lba, n, NULL, 0, unmap_step);
		if (rc < 0) {
			sbc_submit_failed(cmd, rc, true);
			scsi_cmd_complete(cmd);
		}
		return;
	}
	lbp_done(cmd, 0);
}

static void unmap_start(struct hl_scsi_cmd *cmd)
{
	unmap_step(cmd, 0);
}

enum scsi_exec_result sbc_unmap(struct hl_scsi_cmd *cmd)
{
	struct scsi_cmd_priv *p = scsi_priv(cmd);
	uint32_t plen = hl_get_be16(cmd->cdb + 7);

	cmd->xfer_len = plen;
	if (plen == 0) {
		scsi_set_good(cmd); /* nothing to unmap */
		return SCSI_DONE;
	}
	if (plen < UNMAP_HDR) {
		hl_scsi_set_sense(cmd, HL_SK_ILLEGAL_REQUEST, SCSI_ASC_PARAM_LIST_LEN);
		return SCSI_DONE;
	}
	if (scsi_dout_len(cmd) < plen) {
		hl_scsi_set_sense(cmd, HL_SK_ILLEGAL_REQUEST, SCSI_ASC_INVALID_FIELD_IU);
		return SCSI_DONE;
	}
	if (scsi_write_protected(cmd))
		return SCSI_DONE;

	const uint8_t *h = cmd->data;
	uint32_t bd_len = hl_get_be16(h + 2);
	if (bd_len > plen - UNMAP_HDR)
		bd_len = plen - UNMAP_HDR; /* SBC-3: the list ends with the parameter data */
	uint32_t n_desc = bd_len / UNMAP_DESC;
	if (n_desc > SCSI_UNMAP_MAX_DESC) {
		scsi_sense_invalid_param(cmd, 2, -1);
		return SCSI_DONE;
	}
	uint64_t lo = UINT64_MAX, hi = 0, total = 0;
	for (uint32_t i = 0; i < n_desc; i++) {
		const uint8_t *d = h + UNMAP_HDR + (size_t)i * UNMAP_DESC;
		uint64_t lba = hl_get_be64(d);
		uint32_t n = hl_get_be32(d + 8);
		if (!sbc_lba_range_ok(cmd, lba, n))
			return SCSI_DONE;
		total += n;
		if (n > SCSI_UNMAP_MAX_BLOCKS || total > SCSI_UNMAP_MAX_BLOCKS) {
			scsi_sense_invalid_param(cmd, (uint16_t)(UNMAP_HDR + i * UNMAP_DESC + 8),
			                         -1);
			return SCSI_DONE;
		}
		if (n) {
			lo = HL_MIN(lo, lba);
			hi = HL_MAX(hi, lba + n);
		}
	}
	scsi_set_good(cmd);
	if (total == 0)
		return SCSI_DONE;
	p->aux = 0;
	p->count = n_desc;
	/* one shared lock over the hull of the descriptors: simple, and UNMAP lists are short */
	if (scsi_range_lock(cmd, lo, hi - lo, false, unmap_start))
		unmap_start(cmd);
	return SCSI_PENDING;
}

/* ---- GET LBA STATUS ---- */

enum scsi_exec_result sbc_get_lba_status(struct hl_scsi_cmd *cmd)
{
	struct hl_lu *lu = cmd->lu;
	uint64_t lba = hl_get_be64(cmd->cdb + 2);
	uint32_t alloc = hl_get_be32(cmd->cdb + 10);
	uint8_t buf[24];

	if (lba >= lu->num_blocks) {
		hl_scsi_set_sense(cmd, HL_SK_ILLEGAL_REQUEST, SCSI_ASC_LBA_OUT_OF_RANGE);
		return SCSI_DONE;
	}
	/*
	 * The origin interface does not say which blocks are allocated, so one
	 * descriptor covers the rest of the medium with status 0, "mapped or
	 * unknown", which SBC-4 allows.
	 */
	memset(buf, 0, sizeof(buf));
	hl_put_be32(buf, sizeof(buf) - 4);
	hl_put_be64(buf + 8, lba);
	uint64_t rest = lu->num_blocks - lba;
	hl_put_be32(buf + 16, rest > UINT32_MAX ? UINT32_MAX : (uint32_t)rest);
	buf[20] = 0x00;
	scsi_data_in(cmd, buf, sizeof(buf), alloc);
	return SCSI_DONE;
}
