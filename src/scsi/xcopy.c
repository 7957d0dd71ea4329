/*
 * xcopy.c - EXTENDED COPY (LID1, SPC-4 6.4), RECEIVE COPY RESULTS (COPY
 * STATUS, OPERATING PARAMETERS) and the Third-party Copy VPD page (8Fh):
 * the copy offload hypervisors use to clone and move virtual disks.
 *
 * Copy targets are identification descriptors (E4h) naming an LU by its
 * NAA designator (VPD 83), found through the LU registry (lu.c) with a
 * hold that keeps it alive until the copy ends; only an LU of the
 * command's LUN map counts (lu_reachable), else the copy target is not
 * reachable. Segments are
 * block-to-block (02h). The copy runs inside the command: each chunk (at
 * most XCOPY_CHUNK bytes) is read from the source LU and written to the
 * destination, both through scsi_block_io_on() like any block request, the
 * write under a shared range lock of the destination LU, so COMPARE
 * AND WRITE stays atomic against copies as against any write, and the
 * origin stack below each LU (cache included) keeps its blocks coherent.
 *
 * Results (list identifier usage 00b/01b) are held per I_T nexus in the LU
 * the command was sent to, under lu->lock, until the nexus goes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hotlun/log.h"
#include "scsi/scsi_internal.h"

#define XCOPY_HDR_LEN      16
#define XCOPY_TGT_DESC_LEN 32
#define XCOPY_SEG_B2B_LEN  28
#define XCOPY_MAX_TGT_DESC 8
#define XCOPY_MAX_SEG_DESC 64
#define XCOPY_MAX_LIST_LEN                                                                         \
	(XCOPY_MAX_TGT_DESC * XCOPY_TGT_DESC_LEN + XCOPY_MAX_SEG_DESC * XCOPY_SEG_B2B_LEN)
#define XCOPY_CHUNK       (1u << 20)
#define XCOPY_MAX_HELD    16  /* held results per nexus and LU; its oldest goes first */
#define XCOPY_MAX_HELD_LU 256 /* per LU, all nexuses: the top holder's oldest goes */

#define SK_COPY_ABORTED 0x0a

#define DESC_SEG_B2B 0x02
#define DESC_TGT_ID  0xe4

/* ASC/ASCQ of EXTENDED COPY errors (SPC-4 annex) */
#define ASC_TOO_MANY_TGT  0x26, 0x06
#define ASC_UNSUPP_TGT    0x26, 0x07
#define ASC_TOO_MANY_SEG  0x26, 0x08
#define ASC_UNSUPP_SEG    0x26, 0x09
#define ASC_UNREACHABLE   0x08, 0x04
#define ASC_NOT_REACHABLE 0x0d, 0x02

/** Results of one finished copy, held for RECEIVE COPY RESULTS. */
struct scsi_xcopy_result {
	struct hl_list link; /* in hl_lu.xcopy_results */
	uint64_t nexus_id;
	uint8_t list_id;
	uint8_t status;    /* copy manager status: 0 ok, 1 failed */
	uint16_t segments; /* segments processed */
	uint64_t bytes;    /* bytes copied */
};

struct xcopy_seg {
	uint16_t src, dst; /* target descriptor indexes */
	uint32_t nblocks;
	uint64_t src_lba, dst_lba;
};

struct xcopy_job {
	struct hl_lu *tgt[XCOPY_MAX_TGT_DESC]; /* held (scsi_lu_find_by_naa) */
	unsigned n_tgt;
	struct xcopy_seg seg[XCOPY_MAX_SEG_DESC];
	unsigned n_seg;
	unsigned cur;   /* segment being copied */
	uint32_t done;  /* blocks of it already copied */
	uint32_t chunk; /* blocks in the chunk in flight */
	uint32_t total; /* blocks copied over all segments */
	uint8_t list_id;
	bool hold;          /* keep the results */
	struct hl_lu *home; /* the LU the command was sent to (cmd->lu outside the write phase) */
	uint8_t data[];     /* XCOPY_CHUNK bytes */
};

static struct xcopy_job *job_of(struct hl_scsi_cmd *cmd)
{
	return (struct xcopy_job *)(void *)scsi_priv(cmd)->bounce;
}

/* ---- held results ---- */

/* Results lu holds for nexus_id. Under lu->lock. */
static unsigned results_held(struct hl_lu *lu, uint64_t nexus_id)
{
	struct scsi_xcopy_result *r;
	unsigned n = 0;

	hl_list_for_each_entry(r, &lu->xcopy_results, link)
	{
		n += r->nexus_id == nexus_id;
	}
	return n;
}

/*
 * Room for one more result of nexus_id. Under lu->lock. Each nexus pays
 * for its own copies: one that runs many never pushes out the results
 * another nexus has yet to read, unless the LU is full, and then the
 * nexus holding the most loses its oldest.
 */
static void results_make_room(struct hl_lu *lu, uint64_t nexus_id)
{
	struct scsi_xcopy_result *r, *old = NULL;
	unsigned n = 0, most = 0;

	hl_list_for_each_entry(r, &lu->xcopy_results, link)
	{
		if (r->nexus_id == nexus_id && !old)
			old = r;
		n++;
	}
	if (results_held(lu, nexus_id) < XCOPY_MAX_HELD) {
		if (n < XCOPY_MAX_HELD_LU)
			return;
		old = NULL;
		hl_list_for_each_entry(r, &lu->xcopy_results, link)
		{
			unsigned held = results_held(lu, r->nexus_id);
			if (held > most) { /* list order: the first seen is the oldest */
				most = held;
				old = r;
			}
		}
	}
	if (old) {
		hl_list_del(&old->link);
		free(old);
	}
}

static void result_store(struct hl_lu *lu, uint64_t nexus_id, const struct xcopy_job *j,
                         uint8_t status)
{
	struct scsi_xcopy_result *r, *tmp;

	pthread_mutex_lock(&lu->lock);
	hl_list_for_each_entry_safe(r, tmp, &lu->xcopy_results, link)
	{
		if (r->nexus_id == nexus_id && r->list_id == j->list_id) {
			hl_list_del(&r->link);
			free(r);
		}
	}
	results_make_room(lu, nexus_id);
	r = calloc(1, sizeof(*r));
	if (r) {
		r->nexus_id = nexus_id;
		r->list_id = j->list_id;
		r->status = status;
		r->segments = (uint16_t)j->cur;
		r->bytes = (uint64_t)j->total * lu->block_size;
		hl_list_add_tail(&lu->xcopy_results, &r->link);
	}
	pthread_mutex_unlock(&lu->lock);
}

void scsi_xcopy_nexus_gone(struct hl_lu *lu, uint64_t nexus_id)
{
	struct scsi_xcopy_result *r, *tmp;

	pthread_mutex_lock(&lu->lock);
	hl_list_for_each_entry_safe(r, tmp, &lu->xcopy_results, link)
	{
		if (r->nexus_id == nexus_id) {
			hl_list_del(&r->link);
			free(r);
		}
	}
	pthread_mutex_unlock(&lu->lock);
}

void scsi_xcopy_fini(struct hl_lu *lu)
{
	struct scsi_xcopy_result *r, *tmp;

	hl_list_for_each_entry_safe(r, tmp, &lu->xcopy_results, link)
	{
		hl_list_del(&r->link);
		free(r);
	}
}

/* ---- the copy ---- */

static uint64_t nexus_id(const struct hl_scsi_cmd *cmd)
{
	return cmd->nexus ? cmd->nexus->id : 0;
}

/* End the command: release the LUs, keep the results, complete. */
static void job_finish(struct hl_scsi_cmd *cmd, bool ok)
{
	struct xcopy_job *j = job_of(cmd);

	cmd->lu = j->home;
	if (j->hold)
		result_store(j->home, nexus_id(cmd), j, ok ? 0 : 1);
	for (unsigned i = 0; i < j->n_tgt; i++) {
		if (j->tgt[i])
			scsi_lu_release(j->tgt[i]);
		j->tgt[i] = NULL;
	}
	j->n_tgt = 0;
	if (ok)
		scsi_set_good(cmd);
	scsi_cmd_complete(cmd); /* frees the job (it is the bounce buffer) */
}

/* COPY ABORTED with an ASC; the copy stops. */
static void job_abort(struct hl_scsi_cmd *cmd, uint8_t asc, uint8_t ascq)
{
	struct xcopy_job *j = job_of(cmd);

	cmd->lu = j->home;
	hl_scsi_set_sense(cmd, SK_COPY_ABORTED, asc, ascq);
	job_finish(cmd, false);
}

static void copy_next(struct hl_scsi_cmd *cmd);

/*
 * Before each chunk is read and before it is written: are both LUs of the
 * segment still in the command's LUN map? A live map change may give a
 * disk to another target while a copy (up to 64 segments of 65535 blocks)
 * runs; its initiator no longer reaches it, so the copy stops there (an
 * I/O already issued ends, as any command in flight would). The reload
 * stores each slot atomically.
 */
static bool job_reachable(const struct hl_scsi_cmd *cmd, const struct xcopy_seg *s)
{
	const struct xcopy_job *j = job_of((struct hl_scsi_cmd *)cmd);
	bool src = !cmd->map, dst = !cmd->map;

	for (unsigned i = 0; cmd->map && i < HL_SCSI_MAX_LUNS; i++) {
		const struct hl_lu *lu = __atomic_load_n(&cmd->map->lu[i], __ATOMIC_ACQUIRE);
		src |= lu == j->tgt[s->src];
		dst |= lu == j->tgt[s->dst];
	}
	return src && dst;
}

static void write_done(struct hl_scsi_cmd *cmd, int result)
{
	struct xcopy_job *j = job_of(cmd);

	scsi_range_unlock(cmd); /* cmd->lu is the destination while it holds the lock */
	cmd->lu = j->home;
	if (result < 0) {
		HL_WARN_RL(SCSI_COMPONENT, "%s: EXTENDED COPY write error %d",
		           j->tgt[j->seg[j->cur].dst]->name, result);
		job_abort(cmd, SCSI_ASC_WRITE_ERROR);
		return;
	}
	j->done += j->chunk;
	j->total += j->chunk;
	copy_next(cmd);
}

/* The destination range is locked (cmd->lu = destination): write the chunk. */
static void write_locked(struct hl_scsi_cmd *cmd)
{
	struct xcopy_job *j = job_of(cmd);
	const struct xcopy_seg *s = &j->seg[j->cur];
	struct hl_lu *dst = j->tgt[s->dst];

	cmd->iov[0].iov_base = j->data;
	cmd->iov[0].iov_len = (size_t)j->chunk * dst->block_size;
	int rc = scsi_block_io_on(cmd, dst, HL_IO_WRITE, 0, s->dst_lba + j->done, j->chunk,
	                          cmd->iov, 1, write_done);
	if (rc < 0)
		write_done(cmd, rc);
}

static void read_done(struct hl_scsi_cmd *cmd, int result)
{
	struct xcopy_job *j = job_of(cmd);
	const struct xcopy_seg *s = &j->seg[j->cur];

	if (result < 0) {
		HL_WARN_RL(SCSI_COMPONENT, "%s: EXTENDED COPY read error %d", j->tgt[s->src]->name,
		           result);
		job_abort(cmd, SCSI_ASC_READ_ERROR);
		return;
	}
	if (!job_reachable(cmd, s)) { /* unmapped while the chunk was read */
		job_abort(cmd, ASC_NOT_REACHABLE);
		return;
	}
	/* writes share the destination range; COMPARE AND WRITE excludes it */
	cmd->lu = j->tgt[s->dst];
	if (scsi_range_lock(cmd, s->dst_lba + j->done, j->chunk, false, write_locked))
		write_locked(cmd);
}

static void copy_next(struct hl_scsi_cmd *cmd)
{
	struct xcopy_job *j = job_of(cmd);

	while (j->cur < j->n_seg && j->done >= j->seg[j->cur].nblocks) {
		j->cur++;
		j->done = 0;
	}
	if (j->cur >= j->n_seg) {
		job_finish(cmd, true);
		return;
	}
	const struct xcopy_seg *s = &j->seg[j->cur];
	struct hl_lu *src = j->tgt[s->src];
	if (!job_reachable(cmd, s)) {
		job_abort(cmd, ASC_NOT_REACHABLE);
		return;
	}
	j->chunk = HL_MIN(s->nblocks - j->done, XCOPY_CHUNK / src->block_size);
	/* cmd->lu stays home while reading: the source LU only names the blocks */
	cmd->iov[0].iov_base = j->data;
	cmd->iov[0].iov_len = (size_t)j->chunk * src->block_size;
	int rc = scsi_block_io_on(cmd, src, HL_IO_READ, 0, s->src_lba + j->done, j->chunk, cmd->iov,
	                          1, read_done);
	if (rc < 0)
		read_done(cmd, rc);
}

/* ---- EXTENDED COPY: parameter list ---- */

static void sense_param(struct hl_scsi_cmd *cmd, uint8_t asc, uint8_t ascq)
{
	hl_scsi_set_sense(cmd, HL_SK_ILLEGAL_REQUEST, asc, ascq);
}

/*
 * May this nexus address lu with a normal command? The registry behind
 * scsi_lu_find_by_naa is daemon-wide: without this an initiator allowed
 * on one target could name another target's LU (another initiator's disk,
 * behind its own `allow` list and CHAP secret) and copy it into its own
 * LU or over it (LIO's CVE-2020-28374). The transport checked the
 * initiator against the target's `allow` list at login, and a command
 * reaches only the LUs of its session's map: a copy target must be the
 * command's own LU or one of that map.
 */
static bool lu_reachable(const struct hl_scsi_cmd *cmd, const struct hl_lu *lu)
{
	if (lu == cmd->lu)
		return true;
	if (!cmd->map)
		return false;
	for (unsigned i = 0; i < HL_SCSI_MAX_LUNS; i++)
		if (__atomic_load_n(&cmd->map->lu[i], __ATOMIC_ACQUIRE) == lu)
			return true;
	return false;
}

/* Parse target descriptor t (32 bytes at d); false with sense set on error. */
static bool parse_target(struct hl_scsi_cmd *cmd, struct xcopy_job *j, const uint8_t *d,
                         uint16_t off)
{
	if (d[0] != DESC_TGT_ID) {
		sense_param(cmd, ASC_UNSUPP_TGT);
		return false;
	}
	/* LU ID TYPE is ignored (SPC-4); NUL is obsolete; only block devices */
	if ((d[1] & 0x1f) != 0) {
		scsi_sense_invalid_param(cmd, (uint16_t)(off + 1), 4);
		return false;
	}
	const uint8_t *des = d + 4;
	bool naa = (des[0] & 0x0f) == 0x1 && (des[1] & 0x30) == 0 && (des[1] & 0x0f) == 0x3 &&
	           des[3] == 16;
	struct hl_lu *lu = naa ? scsi_lu_find_by_naa(des + 4) : NULL;
	if (lu && !lu_reachable(cmd, lu)) {
		/* the same answer as an unknown NAA: nothing tells the LU exists */
		scsi_lu_release(lu);
		lu = NULL;
	}
	if (!lu) {
		hl_scsi_set_sense(cmd, SK_COPY_ABORTED, ASC_NOT_REACHABLE);
		return false;
	}
	/*
	 * With several gateways only the LU the command came to passed the
	 * access check (and is drained by a handover); another LU may be a
	 * standby here whose cached blocks a peer has rewritten: not a copy
	 * target then. Initiators copy through reads and writes instead.
	 */
	if (lu != cmd->lu && (scsi_lu_access(lu) || scsi_lu_access(cmd->lu))) {
		scsi_lu_release(lu);
		hl_scsi_set_sense(cmd, SK_COPY_ABORTED, ASC_NOT_REACHABLE);
		return false;
	}
	j->tgt[j->n_tgt++] = lu;
	uint32_t bs = (uint32_t)d[29] << 16 | (uint32_t)d[30] << 8 | d[31];
	if (bs != lu->block_size) {
		scsi_sense_invalid_param(cmd, (uint16_t)(off + 29), -1);
		return false;
	}
	return true;
}

/* Would `opcode` on lu conflict with a reservation for cmd's nexus? (status set if so) */
static bool lu_conflict(struct hl_scsi_cmd *cmd, struct hl_lu *lu, uint8_t opcode)
{
	const struct scsi_cmd_desc *d = scsi_cmd_lookup(lu, opcode, 0);
	struct hl_lu *home = cmd->lu;
	bool conflict;

	cmd->lu = lu;
	conflict = d && scsi_rsv_conflict(cmd, d);
	cmd->lu = home;
	return conflict;
}

static bool parse_segment(struct hl_scsi_cmd *cmd, struct xcopy_job *j, const uint8_t *d,
                          uint16_t off)
{
	struct xcopy_seg *s = &j->seg[j->n_seg];

	if (d[0] != DESC_SEG_B2B) {
		sense_param(cmd, ASC_UNSUPP_SEG);
		return false;
	}
	if (hl_get_be16(d + 2) != XCOPY_SEG_B2B_LEN - 4) {
		scsi_sense_invalid_param(cmd, (uint16_t)(off + 2), -1);
		return false;
	}
	s->src = hl_get_be16(d + 4);
	s->dst = hl_get_be16(d + 6);
	s->nblocks = hl_get_be16(d + 10);
	s->src_lba = hl_get_be64(d + 12);
	s->dst_lba = hl_get_be64(d + 20);
	if (s->src >= j->n_tgt || s->dst >= j->n_tgt) {
		hl_scsi_set_sense(cmd, SK_COPY_ABORTED, ASC_UNREACHABLE);
		return false;
	}
	struct hl_lu *src = j->tgt[s->src], *dst = j->tgt[s->dst];
	if (src->block_size != dst->block_size) {
		/* DC and byte counts across block sizes are not supported */
		scsi_sense_invalid_param(cmd, (uint16_t)(off + 6), -1);
		return false;
	}
	if (s->src_lba > src->num_blocks || s->nblocks > src->num_blocks - s->src_lba ||
	    s->dst_lba > dst->num_blocks || s->nblocks > dst->num_blocks - s->dst_lba) {
		hl_scsi_set_sense(cmd, SK_COPY_ABORTED, SCSI_ASC_NO_ADDITIONAL);
		return false;
	}
	if (dst->cfg.read_only) {
		hl_scsi_set_sense(cmd, HL_SK_DATA_PROTECT, SCSI_ASC_WRITE_PROTECTED);
		return false;
	}
	/*
	 * The command's own LU passed dispatch's reservation check as a write;
	 * another LU must let this nexus read (source) or write (destination)
	 * as READ(16) / WRITE(16) would.
	 */
	if ((src != j->home && lu_conflict(cmd, src, 0x88)) ||
	    (dst != j->home && lu_conflict(cmd, dst, 0x8a)))
		return false;
	j->n_seg++;
	return true;
}

enum scsi_exec_result spc_extended_copy(struct hl_scsi_cmd *cmd)
{
	uint32_t plen = hl_get_be32(cmd->cdb + 10);
	const uint8_t *d = cmd->data;

	cmd->xfer_len = plen;
	if (!scsi_param_list_start(cmd, plen, XCOPY_HDR_LEN))
		return SCSI_DONE;
	uint8_t usage = (d[1] >> 3) & 0x03;
	uint32_t tlen = hl_get_be16(d + 2);
	uint32_t slen = hl_get_be32(d + 8);
	uint32_t inline_len = hl_get_be32(d + 12);
	if (usage == 0x01) { /* reserved */
		scsi_sense_invalid_param(cmd, 1, 4);
		return SCSI_DONE;
	}
	if (usage == 0x03 && d[0] != 0) { /* no list identifier: the field must be 0 */
		scsi_sense_invalid_param(cmd, 0, -1);
		return SCSI_DONE;
	}
	if ((uint64_t)XCOPY_HDR_LEN + tlen + slen + inline_len > plen ||
	    (uint64_t)tlen + slen > XCOPY_MAX_LIST_LEN) {
		hl_scsi_set_sense(cmd, HL_SK_ILLEGAL_REQUEST, SCSI_ASC_PARAM_LIST_LEN);
		return SCSI_DONE;
	}
	if (inline_len) { /* no inline data: MAXIMUM INLINE DATA LENGTH is 0 */
		scsi_sense_invalid_param(cmd, 12, -1);
		return SCSI_DONE;
	}
	if (tlen % XCOPY_TGT_DESC_LEN) {
		scsi_sense_invalid_param(cmd, 2, -1);
		return SCSI_DONE;
	}
	if (tlen / XCOPY_TGT_DESC_LEN > XCOPY_MAX_TGT_DESC) {
		sense_param(cmd, ASC_TOO_MANY_TGT);
		return SCSI_DONE;
	}
	/* segment descriptors are counted by their own length fields */
	unsigned n_seg = 0;
	for (uint32_t off = 0; off + 4 <= slen; n_seg++) {
		off += 4u + hl_get_be16(d + XCOPY_HDR_LEN + tlen + off + 2);
	}
	if (n_seg > XCOPY_MAX_SEG_DESC) {
		sense_param(cmd, ASC_TOO_MANY_SEG);
		return SCSI_DONE;
	}

	struct xcopy_job *j =
	    (struct xcopy_job *)(void *)scsi_bounce_get(cmd, sizeof(*j) + XCOPY_CHUNK, true);
	/* NULL: BUSY set (the scratch budget is spent, or memory) */
	if (!j)
		return SCSI_DONE;
	scsi_priv(cmd)->bounce = (uint8_t *)j; /* freed by scsi_cmd_complete */
	j->home = cmd->lu;
	j->list_id = d[0];
	j->hold = usage == 0x00;

	bool ok = true;
	for (uint32_t off = 0; ok && off < tlen; off += XCOPY_TGT_DESC_LEN)
		ok = parse_target(cmd, j, d + XCOPY_HDR_LEN + off, (uint16_t)(XCOPY_HDR_LEN + off));
	for (uint32_t off = 0; ok && off < slen;) {
		const uint8_t *sd = d + XCOPY_HDR_LEN + tlen + off;
		if (slen - off < 4 || slen - off < 4u + hl_get_be16(sd + 2)) {
			hl_scsi_set_sense(cmd, HL_SK_ILLEGAL_REQUEST, SCSI_ASC_PARAM_LIST_LEN);
			ok = false;
			break;
		}
		if (sd[0] == DESC_SEG_B2B && slen - off < XCOPY_SEG_B2B_LEN) {
			hl_scsi_set_sense(cmd, HL_SK_ILLEGAL_REQUEST, SCSI_ASC_PARAM_LIST_LEN);
			ok = false;
			break;
		}
		ok = parse_segment(cmd, j, sd, (uint16_t)(XCOPY_HDR_LEN + tlen + off));
		off += 4u + hl_get_be16(sd + 2);
	}
	if (!ok) {
		j->hold = false; /* nothing started: no results to keep */
		job_finish(cmd, false);
		return SCSI_PENDING;
	}
	copy_next(cmd);
	return SCSI_PENDING;
}

/* ---- RECEIVE COPY RESULTS ---- */

enum scsi_exec_result spc_receive_copy_results(struct hl_scsi_cmd *cmd)
{
	struct hl_lu *lu = cmd->lu;
	uint8_t sa = cmd->cdb[1] & 0x1f;
	uint8_t list_id = cmd->cdb[2];
	uint32_t alloc = hl_get_be32(cmd->cdb + 10);
	uint8_t buf[64];

	memset(buf, 0, sizeof(buf));
	if (sa == 0x03) {      /* OPERATING PARAMETERS */
		buf[4] = 0x01; /* SNLID: list identifier usage 11b supported */
		hl_put_be16(buf + 8, XCOPY_MAX_TGT_DESC);
		hl_put_be16(buf + 10, XCOPY_MAX_SEG_DESC);
		hl_put_be32(buf + 12, XCOPY_MAX_LIST_LEN);
		hl_put_be32(buf + 16, 0xffffu * lu->block_size); /* maximum segment length */
		hl_put_be16(buf + 34, 1);                        /* total concurrent copies */
		buf[36] = 1;                                     /* maximum concurrent copies */
		buf[43] = 2;                                     /* implemented descriptors */
		buf[44] = DESC_SEG_B2B;
		buf[45] = DESC_TGT_ID;
		hl_put_be32(buf, 46 - 4);
		scsi_data_in(cmd, buf, 46, alloc);
		return SCSI_DONE;
	}
	/* COPY STATUS: the results held for this nexus and list identifier */
	struct scsi_xcopy_result *r;
	bool found = false;
	pthread_mutex_lock(&lu->lock);
	hl_list_for_each_entry(r, &lu->xcopy_results, link)
	{
		if (r->nexus_id == nexus_id(cmd) && r->list_id == list_id) {
			buf[4] = r->status;
			hl_put_be16(buf + 5, r->segments);
			/* TRANSFER COUNT UNITS: bytes, or KiB, MiB... when it would not fit */
			uint8_t unit = 0;
			while ((r->bytes >> (10 * unit)) > UINT32_MAX)
				unit++;
			buf[7] = unit;
			hl_put_be32(buf + 8, (uint32_t)(r->bytes >> (10 * unit)));
			found = true;
			break;
		}
	}
	pthread_mutex_unlock(&lu->lock);
	if (!found) {
		scsi_sense_invalid_cdb(cmd, 2, -1);
		return SCSI_DONE;
	}
	hl_put_be32(buf, 8);
	scsi_data_in(cmd, buf, 12, alloc);
	return SCSI_DONE;
}

/* ---- VPD 8F: Third-party Copy ---- */

uint32_t scsi_vpd_third_party_copy(uint8_t *b)
{
	uint32_t off = 4;

	/* Supported Commands (0001h): EXTENDED COPY (LID1), RECEIVE COPY RESULTS */
	uint8_t *d = b + off;
	hl_put_be16(d, 0x0001);
	d[4] = 2 + 1 + 2 + 2; /* command list length */
	d[5] = 0x83;
	d[6] = 1;
	d[7] = 0x00;
	d[8] = 0x84;
	d[9] = 2;
	d[10] = 0x00;
	d[11] = 0x03;
	hl_put_be16(d + 2, 8); /* 1 + 7 bytes, padded to a multiple of 4 */
	off += 4 + 8;

	/* Supported Descriptors (0008h) */
	d = b + off;
	hl_put_be16(d, 0x0008);
	d[4] = 2;
	d[5] = DESC_SEG_B2B;
	d[6] = DESC_TGT_ID;
	hl_put_be16(d + 2, 4);
	off += 4 + 4;

	/* Supported CSCD IDs (000Ch): none besides the identification descriptor */
	d = b + off;
	hl_put_be16(d, 0x000c);
	hl_put_be16(d + 2, 4);
	off += 4 + 4;

	hl_put_be16(b + 2, (uint16_t)(off - 4));
	return off;
}
