/*
 * sbc.c - the block commands (SBC-3): READ CAPACITY, READ, WRITE, VERIFY,
 * WRITE AND VERIFY, SYNCHRONIZE CACHE, START STOP UNIT, and
 * scsi_block_io_on(), the one function through which every block request
 * reaches the storage below (the origin today, the cache later).
 *
 * Transfer sizes: the CDB says how much the command transfers (xfer_len);
 * the transport says how much it carried (data_len). Reads return what fits
 * in the transport's buffer (a partial last block goes through a bounce
 * buffer). Writes with less data-out than the CDB asks for write the whole
 * blocks received (FCP-4 and iSCSI: data beyond the expected length is
 * neither requested nor transferred); a partial block cannot be written and
 * gets INVALID FIELD IN COMMAND INFORMATION UNIT with nothing written.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hotlun/log.h"
#include "scsi/scsi_internal.h"

#define VERIFY_CHUNK (1u << 20) /* bytes read per step of a BYTCHK=0 verify */

/* ---- block I/O ---- */

static void block_io_cb(struct hl_origin_io *io, int result)
{
	struct hl_scsi_cmd *cmd = io->arg;

	scsi_priv(cmd)->io_done(cmd, result);
}

/*
 * A streamed READ (sbc_read): the origin has the first bytes final in the
 * command's buffer. Only the whole blocks read in place (p->count; a
 * partial last block is copied at the end) and only while this gateway may
 * serve the LU (the completion's check, made for each piece).
 */
static void block_io_ready(struct hl_origin_io *io, uint64_t bytes)
{
	struct hl_scsi_cmd *cmd = io->arg;
	uint32_t n = (uint32_t)HL_MIN(bytes, (uint64_t)scsi_priv(cmd)->count);

	if (n && scsi_access_ok(cmd))
		cmd->data_ready(cmd, n);
}

int scsi_block_io_on(struct hl_scsi_cmd *cmd, struct hl_lu *lu, enum hl_io_op op, unsigned flags,
                     uint64_t lba, uint32_t nblocks, struct iovec *iov, int iovcnt,
                     scsi_io_done_fn done)
{
	struct hl_origin_io *io = &cmd->io;

	memset(io, 0, sizeof(*io));
	io->op = op;
	io->flags = flags;
	io->offset = lba * lu->block_size;
	io->length = (uint64_t)nblocks * lu->block_size;
	io->iov = iov;
	io->iovcnt = iovcnt;
	io->cb = block_io_cb;
	io->arg = cmd;
	if (op == HL_IO_READ && cmd->stream && cmd->data_ready)
		io->ready = block_io_ready;
	scsi_priv(cmd)->io_done = done;
	return hl_origin_submit(lu->origin, io);
}

/*
 * -ESHUTDOWN: the origin fenced this gateway (origin.h HL_ORIGIN_FENCED: a
 * Ceph blocklist or a lost exclusive lock). Not a medium defect at this LBA
 * and not transient: NOT READY, LOGICAL UNIT NOT READY, MANUAL INTERVENTION
 * REQUIRED (SPC-4): an administrator must act (hotlund does not reopen a
 * fenced image), so retrying with BUSY would spin for ever.
 */
static bool origin_fenced(struct hl_scsi_cmd *cmd, int rc)
{
	if (rc != -ESHUTDOWN)
		return false;
	hl_scsi_set_sense(cmd, HL_SK_NOT_READY, 0x04, 0x03);
	return true;
}

/* Who sent cmd, for log lines an admin reads: initiator name and target port. */
static const char *nexus_initiator(const struct hl_scsi_cmd *cmd)
{
	return cmd->nexus && cmd->nexus->initiator_name ? cmd->nexus->initiator_name : "-";
}

static const char *nexus_target(const struct hl_scsi_cmd *cmd)
{
	return cmd->nexus && cmd->nexus->port && cmd->nexus->port->name ? cmd->nexus->port->name
									 : "-";
}

/* An origin that cannot take the request now is a transient condition, not a failure. */
void sbc_submit_failed(struct hl_scsi_cmd *cmd, int rc, bool write)
{
	if (origin_fenced(cmd, rc))
		return;
	if (rc == -ENOMEM || rc == -EAGAIN || rc == -EBUSY) {
		cmd->status = HL_SAM_BUSY;
		cmd->sense_len = 0;
		return;
	}
	HL_WARN_RL(SCSI_COMPONENT, "disk %s: submit failed: %s (initiator %s, target %s)",
	           cmd->lu->name, strerror(-rc), nexus_initiator(cmd), nexus_target(cmd));
	if (write)
		hl_scsi_set_sense(cmd, HL_SK_MEDIUM_ERROR, SCSI_ASC_WRITE_ERROR);
	else
		hl_scsi_set_sense(cmd, HL_SK_MEDIUM_ERROR, SCSI_ASC_READ_ERROR);
}

void sbc_io_error(struct hl_scsi_cmd *cmd, int result, bool write)
{
	HL_WARN_RL(SCSI_COMPONENT, "disk %s: origin %s error: %s (initiator %s, target %s)",
	           cmd->lu->name, write ? "write" : "read", strerror(-result), nexus_initiator(cmd),
	           nexus_target(cmd));
	if (origin_fenced(cmd, result))
		return;
	if (write && result == -ENOSPC)
		hl_scsi_set_sense(cmd, HL_SK_DATA_PROTECT, 0x27,
		                  0x07); /* space allocation failed */
	else if (write)
		hl_scsi_set_sense(cmd, HL_SK_MEDIUM_ERROR, SCSI_ASC_WRITE_ERROR);
	else
		hl_scsi_set_sense(cmd, HL_SK_MEDIUM_ERROR, SCSI_ASC_READ_ERROR);
}

/* ---- CDB decoding ---- */

struct rw_args {
	uint64_t lba;
	uint32_t count;   /* blocks */
	uint8_t len_byte; /* where the transfer length field starts, for field pointers */
	uint8_t flags;    /* byte 1 (0 for 6-byte CDBs) */
};

static void rw_decode(const uint8_t *cdb, struct rw_args *a)
{
	switch (cdb[0] >> 5) {
	case 0: /* 6-byte */
		a->lba = hl_get_be24(cdb + 1) & 0x1fffff;
		a->count = cdb[4] ? cdb[4] : 256;
		a->len_byte = 4;
		a->flags = 0;
		break;
	case 1: /* 10-byte */
	case 2:
		a->lba = hl_get_be32(cdb + 2);
		a->count = hl_get_be16(cdb + 7);
		a->len_byte = 7;
		a->flags = cdb[1];
		break;
	case 5: /* 12-byte */
		a->lba = hl_get_be32(cdb + 2);
		a->count = hl_get_be32(cdb + 6);
		a->len_byte = 6;
		a->flags = cdb[1];
		break;
	default: /* 4: 16-byte */
		a->lba = hl_get_be64(cdb + 2);
		a->count = hl_get_be32(cdb + 10);
		a->len_byte = 10;
		a->flags = cdb[1];
		break;
	}
}

bool sbc_lba_range_ok(struct hl_scsi_cmd *cmd, uint64_t lba, uint64_t count)
{
	uint64_t nb = cmd->lu->num_blocks;

	if (lba > nb || count > nb - lba) {
		hl_scsi_set_sense(cmd, HL_SK_ILLEGAL_REQUEST, SCSI_ASC_LBA_OUT_OF_RANGE);
		return false;
	}
	return true;
}

/* Common checks of READ/WRITE/VERIFY: protection field, range, maximum transfer length. */
static bool rw_check(struct hl_scsi_cmd *cmd, const struct rw_args *a, bool limit_len)
{
	if (a->flags & 0xe0) { /* RDPROTECT/WRPROTECT/VRPROTECT: no protection information */
		scsi_sense_invalid_cdb(cmd, 1, 7);
		return false;
	}
	if (!sbc_lba_range_ok(cmd, a->lba, a->count))
		return false;
	if (limit_len && a->count > HL_SCSI_MAX_XFER / cmd->lu->block_size) {
		scsi_sense_invalid_cdb(cmd, a->len_byte, -1);
		return false;
	}
	return true;
}

/* ---- READ CAPACITY ---- */

enum scsi_exec_result sbc_read_capacity10(struct hl_scsi_cmd *cmd)
{
	uint8_t buf[8];
	uint64_t last = cmd->lu->num_blocks - 1;

	/* PMI 0 with a nonzero LOGICAL BLOCK ADDRESS is invalid (SBC-3 5.15) */
	if (!(cmd->cdb[8] & 0x01) && hl_get_be32(cmd->cdb + 2)) {
		scsi_sense_invalid_cdb(cmd, 2, -1);
		return SCSI_DONE;
	}
	hl_put_be32(buf, last > UINT32_MAX ? UINT32_MAX : (uint32_t)last);
	hl_put_be32(buf + 4, cmd->lu->block_size);
	scsi_data_in(cmd, buf, sizeof(buf), sizeof(buf));
	return SCSI_DONE;
}

enum scsi_exec_result sbc_read_capacity16(struct hl_scsi_cmd *cmd)
{
	uint8_t buf[32];

	if (!(cmd->cdb[14] & 0x01) && hl_get_be64(cmd->cdb + 2)) {
		scsi_sense_invalid_cdb(cmd, 2, -1);
		return SCSI_DONE;
	}
	memset(buf, 0, sizeof(buf));
	hl_put_be64(buf, cmd->lu->num_blocks - 1);
	hl_put_be32(buf + 8, cmd->lu->block_size);
	/* byte 12: no protection; byte 13: LBPPBE; byte 14: LBPME, LBPRZ; lowest aligned LBA 0 */
	buf[13] = cmd->lu->lbppbe & 0x0f;
	buf[14] = (uint8_t)((cmd->lu->thin ? 0x80 : 0) | (cmd->lu->lbprz ? 0x40 : 0));
	scsi_data_in(cmd, buf, sizeof(buf), hl_get_be32(cmd->cdb + 10));
	return SCSI_DONE;
}

/* ---- READ ---- */

static void read_done(struct hl_scsi_cmd *cmd, int result)
{
	struct scsi_cmd_priv *p = scsi_priv(cmd);

	if (result < 0) {
		sbc_io_error(cmd, result, false);
	} else {
		/* count = whole-block bytes read in place, aux = bytes of the partial last block */
		if (p->aux)
			memcpy(cmd->data + p->count, p->bounce, p->aux);
		cmd->data_in_len = p->count + p->aux;
		scsi_set_good(cmd);
	}
	scsi_cmd_complete(cmd);
}

enum scsi_exec_result sbc_read(struct hl_scsi_cmd *cmd)
{
	struct hl_lu *lu = cmd->lu;
	struct scsi_cmd_priv *p = scsi_priv(cmd);
	struct rw_args a;

	rw_decode(cmd->cdb, &a);
	if (!rw_check(cmd, &a, true))
		return SCSI_DONE;
	uint32_t need = a.count * lu->block_size;
	uint32_t nbytes = HL_MIN(need, scsi_din_cap(cmd));
	uint32_t full = nbytes - nbytes % lu->block_size;
	uint32_t blocks = full / lu->block_size;
	int iovcnt = 0;

	cmd->xfer_len = need;
	scsi_set_good(cmd);
	if (nbytes == 0)
		return SCSI_DONE;
	p->count = full;
	if (full) {
		cmd->iov[iovcnt].iov_base = cmd->data;
		cmd->iov[iovcnt].iov_len = full;
		iovcnt++;
	}
	if (nbytes > full) {
		/* the transport has room for part of the last block: read it whole aside */
		p->bounce = scsi_bounce_get(cmd, lu->block_size, false);
		if (!p->bounce)
			return SCSI_DONE; /* BUSY */
		p->aux = nbytes - full;
		cmd->iov[iovcnt].iov_base = p->bounce;
		cmd->iov[iovcnt].iov_len = lu->block_size;
		iovcnt++;
		blocks++;
	}
	cmd->stream = true; /* the data goes to cmd->data in place: it may leave in pieces */
	int rc = scsi_block_io(cmd, HL_IO_READ, 0, a.lba, blocks, cmd->iov, iovcnt, read_done);
	cmd->stream = false;
	if (rc < 0) {
		sbc_submit_failed(cmd, rc, false);
		return SCSI_DONE;
	}
	return SCSI_PENDING;
}

/* ---- WRITE ---- */

static void write_done(struct hl_scsi_cmd *cmd, int result)
{
	if (result < 0)
		sbc_io_error(cmd, result, true);
	else
		scsi_set_good(cmd);
	scsi_cmd_complete(cmd);
}

/*
 * How many bytes of data-out a write-type command may use: the CDB's
 * transfer length cut to what the transport delivered. false (sense set)
 * when that leaves a partial block.
 */
static bool dout_bytes(struct hl_scsi_cmd *cmd, uint32_t need, uint32_t *nbytes)
{
	uint32_t n = HL_MIN(need, scsi_dout_len(cmd));

	if (n % cmd->lu->block_size) {
		hl_scsi_set_sense(cmd, HL_SK_ILLEGAL_REQUEST, SCSI_ASC_INVALID_FIELD_IU);
		return false;
	}
	*nbytes = n;
	return true;
}

/* Submit the write described by priv (lba, count blocks, aux = origin flags) once locked. */
static void write_start(struct hl_scsi_cmd *cmd)
{
	struct scsi_cmd_priv *p = scsi_priv(cmd);

	cmd->iov[0].iov_base = cmd->data;
	cmd->iov[0].iov_len = (size_t)p->count * cmd->lu->block_size;
	int rc = scsi_block_io(cmd, HL_IO_WRITE, p->aux, p->lba, p->count, cmd->iov, 1, write_done);
	if (rc < 0) {
		sbc_submit_failed(cmd, rc, true);
		scsi_cmd_complete(cmd);
	}
}

/*
 * What WRITE and ORWRITE check before they touch the medium: CDB fields and
 * range, write protection, the Data-Out actually received. Fills p->lba,
 * p->count (whole blocks received) and p->aux (FUA). @return false when the
 * command is finished already (status set: an error, or nothing to write).
 */
static bool write_setup(struct hl_scsi_cmd *cmd, struct rw_args *a)
{
	struct hl_lu *lu = cmd->lu;
	struct scsi_cmd_priv *p = scsi_priv(cmd);
	uint32_t nbytes;

	rw_decode(cmd->cdb, a);
	if (!rw_check(cmd, a, true))
		return false;
	cmd->xfer_len = a->count * lu->block_size;
	if (scsi_write_protected(cmd))
		return false;
	if (!dout_bytes(cmd, cmd->xfer_len, &nbytes))
		return false;
	scsi_set_good(cmd);
	if (nbytes == 0)
		return false;
	p->lba = a->lba;
	p->count = nbytes / lu->block_size;
	p->aux = (a->flags & 0x08) ? HL_IO_FUA : 0;
	return true;
}

enum scsi_exec_result sbc_write(struct hl_scsi_cmd *cmd)
{
	struct scsi_cmd_priv *p = scsi_priv(cmd);
	struct rw_args a;

	if (!write_setup(cmd, &a))
		return SCSI_DONE;
	/* shared: waits only for a COMPARE AND WRITE on an overlapping range */
	if (scsi_range_lock(cmd, p->lba, p->count, false, write_start))
		write_start(cmd);
	return SCSI_PENDING;
}

/* ---- VERIFY / WRITE AND VERIFY ---- */

/* Compare what was read (bounce) with the data-out; aux = bytes to compare. */
static void compare_done(struct hl_scsi_cmd *cmd, int result)
{
	struct scsi_cmd_priv *p = scsi_priv(cmd);

	if (result < 0) {
		sbc_io_error(cmd, result, false);
		scsi_cmd_complete(cmd);
		return;
	}
	scsi_set_good(cmd);
	for (uint32_t i = 0; i < p->aux; i++) {
		if (p->bounce[i] != cmd->data[i]) {
			/* INFORMATION: offset of the first miscompared byte in the data-out */
			scsi_sense_info(cmd, HL_SK_MISCOMPARE, SCSI_ASC_MISCOMPARE, i);
			break;
		}
	}
	scsi_cmd_complete(cmd);
}

/* Read p->aux bytes at lba into p->bounce (the caller took it), then compare_done. */
static enum scsi_exec_result read_and_compare(struct hl_scsi_cmd *cmd, uint64_t lba)
{
	struct scsi_cmd_priv *p = scsi_priv(cmd);

	cmd->iov[0].iov_base = p->bounce;
	cmd->iov[0].iov_len = p->aux;
	int rc = scsi_block_io(cmd, HL_IO_READ, 0, lba, p->aux / cmd->lu->block_size, cmd->iov, 1,
	                       compare_done);
	if (rc < 0) {
		sbc_submit_failed(cmd, rc, false);
		return SCSI_DONE;
	}
	return SCSI_PENDING;
}

/*
 * VERIFY's next piece: GOOD when no block is left, else the next at most
 * VERIFY_CHUNK bytes of the range read into bounce, `step` called with it.
 * priv: lba = next LBA, count = blocks left.
 */
static void verify_next(struct hl_scsi_cmd *cmd, scsi_io_done_fn step)
{
	struct scsi_cmd_priv *p = scsi_priv(cmd);
	uint32_t bs = cmd->lu->block_size;

	if (p->count == 0) {
		scsi_set_good(cmd);
		scsi_cmd_complete(cmd);
		return;
	}
	uint32_t n = HL_MIN(p->count, VERIFY_CHUNK / bs);
	cmd->iov[0].iov_base = p->bounce;
	cmd->iov[0].iov_len = (size_t)n * bs;
	uint64_t lba = p->lba;
	p->lba += n;
	p->count -= n;
	/* completions never run inside submit, so this cannot recurse */
	int rc = scsi_block_io(cmd, HL_IO_READ, 0, lba, n, cmd->iov, 1, step);
	if (rc < 0) {
		sbc_submit_failed(cmd, rc, false);
		scsi_cmd_complete(cmd);
	}
}

/* BYTCHK=0: read the range in chunks to check the medium; the data is discarded. */
static void verify_step(struct hl_scsi_cmd *cmd, int result)
{
	if (result < 0) {
		sbc_io_error(cmd, result, false);
		scsi_cmd_complete(cmd);
		return;
	}
	verify_next(cmd, verify_step);
}

/*
 * BYTCHK=3: the one block of data-out against every block of the range,
 * read in VERIFY_CHUNK pieces like BYTCHK=0. A buffer for the whole range
 * let a command with 512 bytes of data-out hold HL_SCSI_MAX_XFER (16 MiB)
 * while it ran, outside what bounds a connection's READs (ISCSI_TX_HIGH).
 * priv: lba = next LBA, count = blocks left, aux = bytes compared before
 * the piece in bounce (cmd->iov[0].iov_len bytes, 0 at the start).
 */
static void verify_pattern_step(struct hl_scsi_cmd *cmd, int result)
{
	struct scsi_cmd_priv *p = scsi_priv(cmd);
	uint32_t bs = cmd->lu->block_size;
	size_t got = cmd->iov[0].iov_len;

	if (result < 0) {
		sbc_io_error(cmd, result, false);
		scsi_cmd_complete(cmd);
		return;
	}
	for (size_t i = 0; i < got; i++) {
		if (p->bounce[i] != cmd->data[i % bs]) {
			/* INFORMATION: offset of the first miscompared byte in the range */
			scsi_sense_info(cmd, HL_SK_MISCOMPARE, SCSI_ASC_MISCOMPARE, p->aux + i);
			scsi_cmd_complete(cmd);
			return;
		}
	}
	p->aux += (uint32_t)got;
	verify_next(cmd, verify_pattern_step);
}

/* Start reading a's range in VERIFY_CHUNK pieces into a bounce buffer, `step` per piece. */
static enum scsi_exec_result verify_range(struct hl_scsi_cmd *cmd, const struct rw_args *a,
                                          scsi_io_done_fn step)
{
	struct scsi_cmd_priv *p = scsi_priv(cmd);

	p->bounce = scsi_bounce_get(
	    cmd, HL_MIN((uint64_t)a->count * cmd->lu->block_size, VERIFY_CHUNK), false);
	if (!p->bounce)
		return SCSI_DONE; /* BUSY */
	p->lba = a->lba;
	p->count = a->count;
	p->aux = 0;
	cmd->iov[0].iov_len = 0; /* nothing read yet */
	step(cmd, 0);
	return SCSI_PENDING;
}

enum scsi_exec_result sbc_verify(struct hl_scsi_cmd *cmd)
{
	struct hl_lu *lu = cmd->lu;
	struct scsi_cmd_priv *p = scsi_priv(cmd);
	struct rw_args a;
	uint8_t bytchk = (cmd->cdb[1] >> 1) & 0x03;
	uint32_t nbytes;

	rw_decode(cmd->cdb, &a);
	if (bytchk == 2) {
		scsi_sense_invalid_cdb(cmd, 1, 2);
		return SCSI_DONE;
	}
	if (!rw_check(cmd, &a, bytchk != 0))
		return SCSI_DONE;
	scsi_set_good(cmd);
	if (a.count == 0)
		return SCSI_DONE;
	if (bytchk == 0) {
		return verify_range(cmd, &a, verify_step);
	}
	if (bytchk == 3) {
		/* one block of data-out compared against every block of the range */
		cmd->xfer_len = lu->block_size;
		if (!dout_bytes(cmd, lu->block_size, &nbytes))
			return SCSI_DONE;
		if (nbytes < lu->block_size) {
			hl_scsi_set_sense(cmd, HL_SK_ILLEGAL_REQUEST, SCSI_ASC_INVALID_FIELD_IU);
			return SCSI_DONE;
		}
		return verify_range(cmd, &a, verify_pattern_step);
	}
	cmd->xfer_len = a.count * lu->block_size;
	if (!dout_bytes(cmd, cmd->xfer_len, &nbytes))
		return SCSI_DONE;
	if (nbytes == 0)
		return SCSI_DONE;
	p->aux = nbytes;
	p->bounce = scsi_bounce_get(cmd, nbytes, false);
	if (!p->bounce)
		return SCSI_DONE; /* BUSY */
	return read_and_compare(cmd, a.lba);
}

static void write_verify_written(struct hl_scsi_cmd *cmd, int result)
{
	struct scsi_cmd_priv *p = scsi_priv(cmd);

	if (result < 0) {
		sbc_io_error(cmd, result, true);
		scsi_cmd_complete(cmd);
		return;
	}
	/* verify: read back what was written and compare it with the data-out */
	if (read_and_compare(cmd, p->lba) == SCSI_DONE)
		scsi_cmd_complete(cmd);
}

/* Write priv's range (aux bytes at lba), then read it back and compare. */
static void write_verify_start(struct hl_scsi_cmd *cmd)
{
	struct scsi_cmd_priv *p = scsi_priv(cmd);

	cmd->iov[0].iov_base = cmd->data;
	cmd->iov[0].iov_len = p->aux;
	int rc = scsi_block_io(cmd, HL_IO_WRITE, 0, p->lba, p->aux / cmd->lu->block_size, cmd->iov,
	                       1, write_verify_written);
	if (rc < 0) {
		sbc_submit_failed(cmd, rc, true);
		scsi_cmd_complete(cmd);
	}
}

enum scsi_exec_result sbc_write_verify(struct hl_scsi_cmd *cmd)
{
	struct hl_lu *lu = cmd->lu;
	struct scsi_cmd_priv *p = scsi_priv(cmd);
	struct rw_args a;
	uint32_t nbytes;

	rw_decode(cmd->cdb, &a);
	if (!rw_check(cmd, &a, true))
		return SCSI_DONE;
	cmd->xfer_len = a.count * lu->block_size;
	if (scsi_write_protected(cmd))
		return SCSI_DONE;
	if (!dout_bytes(cmd, cmd->xfer_len, &nbytes))
		return SCSI_DONE;
	scsi_set_good(cmd);
	if (nbytes == 0)
		return SCSI_DONE;
	p->lba = a.lba;
	p->aux = nbytes;
	/*
	 * The read-back's buffer before the write: BUSY (scratch budget spent)
	 * must mean nothing ran, not a medium already changed
	 */
	p->bounce = scsi_bounce_get(cmd, nbytes, false);
	if (!p->bounce)
		return SCSI_DONE;
	/* the range stays locked through the read-back, so the comparison sees our write */
	if (scsi_range_lock(cmd, a.lba, nbytes / lu->block_size, false, write_verify_start))
		write_verify_start(cmd);
	return SCSI_PENDING;
}

/* ---- ORWRITE(16) ---- */

/*
 * priv: lba, count = blocks, aux = origin flags of the write. Like COMPARE
 * AND WRITE's emulation: the range is held exclusively from the read
 * through the write, so the OR is atomic against every other write.
 */
static void orwrite_read(struct hl_scsi_cmd *cmd, int result)
{
	struct scsi_cmd_priv *p = scsi_priv(cmd);
	size_t n = (size_t)p->count * cmd->lu->block_size;

	if (result < 0) {
		sbc_io_error(cmd, result, false);
		scsi_cmd_complete(cmd);
		return;
	}
	for (size_t i = 0; i < n; i++)
		p->bounce[i] |= cmd->data[i];
	cmd->iov[0].iov_base = p->bounce;
	cmd->iov[0].iov_len = n;
	int rc = scsi_block_io(cmd, HL_IO_WRITE, p->aux, p->lba, p->count, cmd->iov, 1, write_done);
	if (rc < 0) {
		sbc_submit_failed(cmd, rc, true);
		scsi_cmd_complete(cmd);
	}
}

static void orwrite_start(struct hl_scsi_cmd *cmd)
{
	struct scsi_cmd_priv *p = scsi_priv(cmd);
	size_t n = (size_t)p->count * cmd->lu->block_size;

	p->bounce = scsi_bounce_get(cmd, n, false);
	if (!p->bounce) {
		scsi_cmd_complete(cmd); /* BUSY */
		return;
	}
	cmd->iov[0].iov_base = p->bounce;
	cmd->iov[0].iov_len = n;
	int rc = scsi_block_io(cmd, HL_IO_READ, 0, p->lba, p->count, cmd->iov, 1, orwrite_read);
	if (rc < 0) {
		sbc_submit_failed(cmd, rc, false);
		scsi_cmd_complete(cmd);
	}
}

enum scsi_exec_result sbc_orwrite(struct hl_scsi_cmd *cmd)
{
	struct scsi_cmd_priv *p = scsi_priv(cmd);
	struct rw_args a;

	if (!write_setup(cmd, &a))
		return SCSI_DONE;
	if (scsi_range_lock(cmd, a.lba, p->count, true, orwrite_start))
		orwrite_start(cmd);
	return SCSI_PENDING;
}

/* ---- COMPARE AND WRITE ---- */

/*
 * priv: lba, aux = bytes in each half of the data-out, count = origin flags
 * of the write. The range is held exclusively from before the read until
 * the write completes, so no other write to it can come in between.
 */
static void caw_compared(struct hl_scsi_cmd *cmd, int result)
{
	struct scsi_cmd_priv *p = scsi_priv(cmd);

	if (result < 0) {
		sbc_io_error(cmd, result, false);
		scsi_cmd_complete(cmd);
		return;
	}
	for (uint32_t i = 0; i < p->aux; i++) {
		if (p->bounce[i] != cmd->data[i]) {
			/* INFORMATION: offset of the first differing byte in the verify data */
			scsi_sense_info(cmd, HL_SK_MISCOMPARE, SCSI_ASC_MISCOMPARE, i);
			scsi_cmd_complete(cmd);
			return;
		}
	}
	cmd->iov[0].iov_base = cmd->data + p->aux;
	cmd->iov[0].iov_len = p->aux;
	int rc = scsi_block_io(cmd, HL_IO_WRITE, p->count, p->lba, p->aux / cmd->lu->block_size,
	                       cmd->iov, 1, write_done);
	if (rc < 0) {
		sbc_submit_failed(cmd, rc, true);
		scsi_cmd_complete(cmd);
	}
}

/* Emulation: read the range, compare in memory, write on a match (all under the range lock). */
static void caw_emulate(struct hl_scsi_cmd *cmd)
{
	struct scsi_cmd_priv *p = scsi_priv(cmd);

	p->bounce = scsi_bounce_get(cmd, p->aux, false);
	if (!p->bounce) {
		scsi_cmd_complete(cmd); /* BUSY */
		return;
	}
	cmd->iov[0].iov_base = p->bounce;
	cmd->iov[0].iov_len = p->aux;
	int rc = scsi_block_io(cmd, HL_IO_READ, 0, p->lba, p->aux / cmd->lu->block_size, cmd->iov,
	                       1, caw_compared);
	if (rc < 0) {
		sbc_submit_failed(cmd, rc, false);
		scsi_cmd_complete(cmd);
	}
}

/* An origin without an optional op (COMPARE AND WRITE, PRE-FETCH) refuses it like this. */
static bool origin_refuses_op(int rc)
{
	return rc == -EOPNOTSUPP || rc == -EINVAL;
}

static void caw_forwarded(struct hl_scsi_cmd *cmd, int result)
{
	if (result == -EILSEQ) {
		/* INFORMATION: offset of the first differing byte in the verify data */
		scsi_sense_info(cmd, HL_SK_MISCOMPARE, SCSI_ASC_MISCOMPARE,
		                cmd->io.miscompare_offset);
	} else if (result == -EOPNOTSUPP) {
		caw_emulate(cmd);
		return;
	} else if (result < 0) {
		sbc_io_error(cmd, result, true);
	} else {
		scsi_set_good(cmd);
	}
	scsi_cmd_complete(cmd);
}

/*
 * First offer the whole operation to the origin (a SAN that does COMPARE AND
 * WRITE itself is atomic against writers that do not go through hotlun);
 * an origin that cannot gets the emulation. The exclusive range lock is held
 * either way, so writes through this LU cannot slip in between.
 */
static void caw_start(struct hl_scsi_cmd *cmd)
{
	struct scsi_cmd_priv *p = scsi_priv(cmd);

	cmd->iov[0].iov_base = cmd->data;
	cmd->iov[0].iov_len = 2 * (size_t)p->aux;
	int rc = scsi_block_io(cmd, HL_IO_COMPARE_AND_WRITE, p->count, p->lba,
	                       p->aux / cmd->lu->block_size, cmd->iov, 1, caw_forwarded);
	if (rc == 0)
		return;
	if (origin_refuses_op(rc)) {
		caw_emulate(cmd);
		return;
	}
	sbc_submit_failed(cmd, rc, true);
	scsi_cmd_complete(cmd);
}

enum scsi_exec_result sbc_compare_and_write(struct hl_scsi_cmd *cmd)
{
	struct hl_lu *lu = cmd->lu;
	struct scsi_cmd_priv *p = scsi_priv(cmd);
	struct rw_args a = {
	    .lba = hl_get_be64(cmd->cdb + 2),
	    .count = cmd->cdb[13],
	    .len_byte = 13,
	    .flags = cmd->cdb[1],
	};

	if (!rw_check(cmd, &a, false))
		return SCSI_DONE;
	if (a.count > SCSI_CAW_MAX_BLOCKS) {
		scsi_sense_invalid_cdb(cmd, 13, -1);
		return SCSI_DONE;
	}
	uint32_t half = a.count * lu->block_size;
	cmd->xfer_len = 2 * half;
	if (scsi_write_protected(cmd))
		return SCSI_DONE;
	/*
	 * Both halves are needed whole: less or more data-out than the CDB says
	 * is an error, also for a zero count that comes with data (a 256-block
	 * request wrapped into the 8-bit field).
	 */
	if (scsi_dout_len(cmd) != 2 * half) {
		scsi_sense_invalid_cdb(cmd, 13, -1);
		return SCSI_DONE;
	}
	scsi_set_good(cmd);
	if (a.count == 0)
		return SCSI_DONE;
	p->lba = a.lba;
	p->aux = half;
	p->count = (a.flags & 0x08) ? HL_IO_FUA : 0;
	if (scsi_range_lock(cmd, a.lba, a.count, true, caw_start))
		caw_start(cmd);
	return SCSI_PENDING;
}

/* ---- PRE-FETCH ---- */

/*
 * PRE-FETCH and SYNCHRONIZE CACHE share one CDB layout: the 10-byte form
 * (34h/35h) has a 4-byte LBA at 2 and a 2-byte count
 * at 7, the 16-byte form (90h/91h) an 8-byte LBA at 2 and a 4-byte count at 10.
 */
static void lba_count_10_16(const uint8_t *cdb, uint64_t *lba, uint32_t *count)
{
	if (cdb[0] < 0x80) {
		*lba = hl_get_be32(cdb + 2);
		*count = hl_get_be16(cdb + 7);
	} else {
		*lba = hl_get_be64(cdb + 2);
		*count = hl_get_be32(cdb + 10);
	}
}

static void prefetch_done(struct hl_scsi_cmd *cmd, int result)
{
	if (result < 0 && !origin_refuses_op(result))
		sbc_io_error(cmd, result, false);
	else
		scsi_set_good(cmd);
	scsi_cmd_complete(cmd);
}

/*
 * Asks the storage below to warm its cache with the range. Without a cache
 * it refuses (-EINVAL) and the command is GOOD: SBC-3 reports GOOD when the
 * blocks could not all be cached. CONDITION MET is never returned, since
 * initiators (libiscsi's tests among them) treat it as a failure; IMMED is
 * accepted and answered after the warming.
 */
enum scsi_exec_result sbc_prefetch(struct hl_scsi_cmd *cmd)
{
	uint64_t lba;
	uint64_t count;
	uint32_t n;

	lba_count_10_16(cmd->cdb, &lba, &n);
	count = n;
	if (!sbc_lba_range_ok(cmd, lba, count))
		return SCSI_DONE;
	scsi_set_good(cmd);
	if (count == 0)
		count = cmd->lu->num_blocks - lba; /* to the end of the medium */
	if (count == 0)
		return SCSI_DONE;
	count = HL_MIN(count, (uint64_t)UINT32_MAX);
	int rc =
	    scsi_block_io(cmd, HL_IO_PREFETCH, 0, lba, (uint32_t)count, NULL, 0, prefetch_done);
	if (rc < 0) {
		if (rc == -EINVAL || rc == -EOPNOTSUPP)
			return SCSI_DONE; /* nothing to warm */
		sbc_submit_failed(cmd, rc, false);
		return SCSI_DONE;
	}
	return SCSI_PENDING;
}

/* ---- SYNCHRONIZE CACHE, START STOP UNIT ---- */

static void sync_done(struct hl_scsi_cmd *cmd, int result)
{
	if (result < 0)
		sbc_io_error(cmd, result, true);
	else
		scsi_set_good(cmd);
	scsi_cmd_complete(cmd);
}

enum scsi_exec_result sbc_sync_cache(struct hl_scsi_cmd *cmd)
{
	uint64_t lba;
	uint32_t count;

	lba_count_10_16(cmd->cdb, &lba, &count);
	if (!sbc_lba_range_ok(cmd, lba, count))
		return SCSI_DONE;
	/* the origin flushes everything: the range only had to be valid. IMMED is honoured by
	 * answering after the flush, which is allowed. */
	int rc = scsi_block_io(cmd, HL_IO_FLUSH, 0, 0, 0, NULL, 0, sync_done);
	if (rc < 0) {
		sbc_submit_failed(cmd, rc, true);
		return SCSI_DONE;
	}
	return SCSI_PENDING;
}

enum scsi_exec_result sbc_start_stop(struct hl_scsi_cmd *cmd)
{
	/* The medium is not removable and always spinning: every power condition is accepted. */
	scsi_set_good(cmd);
	return SCSI_DONE;
}
