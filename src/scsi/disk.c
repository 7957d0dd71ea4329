/*
 * disk.c - the direct-access block device (SBC-3) command table, indexed by
 * opcode. Each entry carries its handler, its flags and its CDB usage mask;
 * dispatch (cmd.c) enforces the mask and REPORT SUPPORTED OPERATION CODES
 * (spc.c) reports it, so the two cannot disagree.
 *
 * Usage masks: byte 0 is the opcode; for service-action commands byte 1
 * holds the service action; every other bit is 1 when the command uses it.
 * The control byte is 0: NACA and LINK are not supported.
 *
 * Reservation classes (SPC-4 table 63, SBC-3 table 13): INFO commands are
 * never blocked by a persistent reservation, RD ones are allowed under the
 * Write Exclusive types, everything else conflicts for non-holders.
 *
 * ALUA (SPC-4 5.15.2.4, only when the LU has an access provider): the
 * SCSI_F_ALUA_* flags say which commands a port in standby, unavailable or
 * transitioning state still runs; SPC-4's lists, of the commands we have,
 * plus REPORT SUPPORTED OPERATION CODES everywhere and READ CAPACITY in
 * standby (SPC-4 allows more; it touches no medium, and a host that scans
 * a standby path must learn the same capacity on it as on the active one,
 * or its multipath layer refuses the path).
 */
#include "scsi/scsi_internal.h"

/* allowed in every ALUA state; in standby and unavailable; in standby only */
#define ALUA_ALL (SCSI_F_ALUA_SB | SCSI_F_ALUA_UN | SCSI_F_ALUA_TR)
#define ALUA_SU  (SCSI_F_ALUA_SB | SCSI_F_ALUA_UN)
#define ALUA_S   SCSI_F_ALUA_SB
/* INQUIRY, REPORT LUNS, REQUEST SENSE: no LU needed, never blocked */
#define NOLU (SCSI_F_NO_LU | SCSI_F_UA_PASS | SCSI_F_PR_ALLOW | SCSI_F_RSV2_ALLOW | ALUA_ALL)
/* answered from LU state that no persistent reservation hides */
#define INFO SCSI_F_PR_ALLOW
#define RD   (SCSI_F_MEDIA | SCSI_F_PR_READ)
#define WR   (SCSI_F_MEDIA | SCSI_F_DATA_OUT | SCSI_F_WRITE)

/* byte 1 of READ/WRITE(10/12/16): RDPROTECT/WRPROTECT, DPO, FUA, FUA_NV */
#define RW_FLAGS 0xfa
/* byte 1 of VERIFY: VRPROTECT, DPO, BYTCHK (2 bits) */
#define VFY_FLAGS 0xf6
/* byte 1 of WRITE AND VERIFY: WRPROTECT, DPO, BYTCHK */
#define WAV_FLAGS 0xf2

// clang-format off
#define CMD(var, name, fn, flags, len, ...) \
	static const struct scsi_cmd_desc var = {name, fn, flags, 0, len, {__VA_ARGS__}}

CMD(test_unit_ready, "TEST UNIT READY", spc_test_unit_ready, INFO | SCSI_F_ALUA_TR_SB, 6,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00);
CMD(request_sense, "REQUEST SENSE", spc_request_sense, NOLU, 6,
    0x03, 0x01, 0x00, 0x00, 0xff, 0x00);
CMD(read6, "READ(6)", sbc_read, RD, 6,
    0x08, 0x1f, 0xff, 0xff, 0xff, 0x00);
CMD(write6, "WRITE(6)", sbc_write, WR, 6,
    0x0a, 0x1f, 0xff, 0xff, 0xff, 0x00);
CMD(inquiry, "INQUIRY", spc_inquiry, NOLU, 6,
    0x12, 0x01, 0xff, 0xff, 0xff, 0x00);
/* reservation commands: not offered by an LU whose gateways cannot share them (pr_shared.c) */
#define RSV_CMD(var, name, fn, flags, len, ...) \
	static const struct scsi_cmd_desc var = {name, fn, flags, 0, len, {__VA_ARGS__}, scsi_lu_pr_avail}
RSV_CMD(reserve6, "RESERVE(6)", spc_reserve, INFO, 6,
    0x16, 0x00, 0x00, 0x00, 0x00, 0x00);
RSV_CMD(release6, "RELEASE(6)", spc_release, INFO | SCSI_F_RSV2_ALLOW, 6,
    0x17, 0x00, 0x00, 0x00, 0x00, 0x00);
/* MODE SELECT: PF, SP; conflicts under reservations like any state change */
CMD(mode_select6, "MODE SELECT(6)", spc_mode_select, SCSI_F_DATA_OUT | ALUA_S, 6,
    0x15, 0x11, 0x00, 0x00, 0xff, 0x00);
CMD(mode_select10, "MODE SELECT(10)", spc_mode_select, SCSI_F_DATA_OUT | ALUA_S, 10,
    0x55, 0x11, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00);
CMD(mode_sense6, "MODE SENSE(6)", spc_mode_sense, SCSI_F_PR_READ | ALUA_S, 6,
    0x1a, 0x08, 0xff, 0xff, 0xff, 0x00);
CMD(start_stop_unit, "START STOP UNIT", sbc_start_stop, 0, 6,
    0x1b, 0x01, 0x00, 0x0f, 0xf7, 0x00);
CMD(read_capacity10, "READ CAPACITY(10)", sbc_read_capacity10, INFO | ALUA_S, 10,
    0x25, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x01, 0x00);
CMD(read10, "READ(10)", sbc_read, RD, 10,
    0x28, RW_FLAGS, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, 0x00);
CMD(write10, "WRITE(10)", sbc_write, WR, 10,
    0x2a, RW_FLAGS, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, 0x00);
CMD(write_verify10, "WRITE AND VERIFY(10)", sbc_write_verify, WR, 10,
    0x2e, WAV_FLAGS, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, 0x00);
CMD(verify10, "VERIFY(10)", sbc_verify, RD, 10,
    0x2f, VFY_FLAGS, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, 0x00);
CMD(sync_cache10, "SYNCHRONIZE CACHE(10)", sbc_sync_cache, SCSI_F_MEDIA, 10,
    0x35, 0x06, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, 0x00);
CMD(prefetch10, "PRE-FETCH(10)", sbc_prefetch, RD, 10,
    0x34, 0x02, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, 0x00);
RSV_CMD(reserve10, "RESERVE(10)", spc_reserve, INFO, 10,
    0x56, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00);
RSV_CMD(release10, "RELEASE(10)", spc_release, INFO | SCSI_F_RSV2_ALLOW, 10,
    0x57, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00);
CMD(mode_sense10, "MODE SENSE(10)", spc_mode_sense, SCSI_F_PR_READ | ALUA_S, 10,
    0x5a, 0x18, 0xff, 0xff, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00);
CMD(read16, "READ(16)", sbc_read, RD, 16,
    0x88, RW_FLAGS, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, 0x00);
CMD(compare_and_write, "COMPARE AND WRITE", sbc_compare_and_write, WR, 16,
    0x89, RW_FLAGS, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0xff, 0x1f, 0x00);
/* ORWRITE(16): ORPROTECT (refused), DPO, FUA; read-OR-write under an exclusive range lock */
CMD(orwrite16, "ORWRITE(16)", sbc_orwrite, WR, 16,
    0x8b, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, 0x00);
CMD(write16, "WRITE(16)", sbc_write, WR, 16,
    0x8a, RW_FLAGS, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, 0x00);
CMD(write_verify16, "WRITE AND VERIFY(16)", sbc_write_verify, WR, 16,
    0x8e, WAV_FLAGS, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, 0x00);
CMD(verify16, "VERIFY(16)", sbc_verify, RD, 16,
    0x8f, VFY_FLAGS, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, 0x00);
CMD(prefetch16, "PRE-FETCH(16)", sbc_prefetch, RD, 16,
    0x90, 0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, 0x00);
CMD(sync_cache16, "SYNCHRONIZE CACHE(16)", sbc_sync_cache, SCSI_F_MEDIA, 16,
    0x91, 0x06, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, 0x00);
CMD(write_same10, "WRITE SAME(10)", sbc_write_same, WR, 10,
    0x41, 0xe8, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, 0x00);
/* WRITE SAME(16) byte 1 bit 0: NDOB, no data-out buffer (a block of zeroes) */
CMD(write_same16, "WRITE SAME(16)", sbc_write_same, WR, 16,
    0x93, 0xe9, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, 0x00);
/* offered by thin and by write-protected LUs (scsi_lu_unmap_avail) */
static const struct scsi_cmd_desc unmap = {
	.name = "UNMAP", .exec = sbc_unmap, .flags = WR, .cdb_len = 10,
	.usage = {0x42, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1f, 0xff, 0xff, 0x00},
	.avail = scsi_lu_unmap_avail,
};
CMD(report_luns, "REPORT LUNS", spc_report_luns, NOLU, 12,
    0xa0, 0x00, 0xff, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00);
CMD(read12, "READ(12)", sbc_read, RD, 12,
    0xa8, RW_FLAGS, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, 0x00);
CMD(write12, "WRITE(12)", sbc_write, WR, 12,
    0xaa, RW_FLAGS, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, 0x00);
CMD(write_verify12, "WRITE AND VERIFY(12)", sbc_write_verify, WR, 12,
    0xae, WAV_FLAGS, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, 0x00);
CMD(verify12, "VERIFY(12)", sbc_verify, RD, 12,
    0xaf, VFY_FLAGS, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, 0x00);

/* Service-action commands: the service action is bits 4:0 of byte 1. */
#define SA_CMD(sa, name, fn, flags, len, ...) {name, fn, flags, sa, len, {__VA_ARGS__}}
#define RSV_SA(sa, name, fn, flags, len, ...) \
	{name, fn, flags, sa, len, {__VA_ARGS__}, scsi_lu_pr_avail}

static const struct scsi_cmd_desc persistent_reserve_in[] = {
	RSV_SA(0x00, "PERSISTENT RESERVE IN: READ KEYS", spc_pr_in, INFO | ALUA_S, 10,
	       0x5e, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00),
	RSV_SA(0x01, "PERSISTENT RESERVE IN: READ RESERVATION", spc_pr_in, INFO | ALUA_S, 10,
	       0x5e, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00),
	RSV_SA(0x02, "PERSISTENT RESERVE IN: REPORT CAPABILITIES", spc_pr_in, INFO | ALUA_S, 10,
	       0x5e, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00),
	RSV_SA(0x03, "PERSISTENT RESERVE IN: READ FULL STATUS", spc_pr_in, INFO | ALUA_S, 10,
	       0x5e, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00),
};

/* PERSISTENT RESERVE OUT applies its own access rules (pr.c), never a class conflict. */
#define PROUT (INFO | SCSI_F_DATA_OUT | ALUA_S)
static const struct scsi_cmd_desc persistent_reserve_out[] = {
	RSV_SA(0x00, "PERSISTENT RESERVE OUT: REGISTER", spc_pr_out, PROUT, 10,
	       0x5f, 0x00, 0xff, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00),
	RSV_SA(0x01, "PERSISTENT RESERVE OUT: RESERVE", spc_pr_out, PROUT, 10,
	       0x5f, 0x01, 0xff, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00),
	RSV_SA(0x02, "PERSISTENT RESERVE OUT: RELEASE", spc_pr_out, PROUT, 10,
	       0x5f, 0x02, 0xff, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00),
	RSV_SA(0x03, "PERSISTENT RESERVE OUT: CLEAR", spc_pr_out, PROUT, 10,
	       0x5f, 0x03, 0xff, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00),
	RSV_SA(0x04, "PERSISTENT RESERVE OUT: PREEMPT", spc_pr_out, PROUT, 10,
	       0x5f, 0x04, 0xff, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00),
	RSV_SA(0x05, "PERSISTENT RESERVE OUT: PREEMPT AND ABORT", spc_pr_out, PROUT, 10,
	       0x5f, 0x05, 0xff, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00),
	RSV_SA(0x06, "PERSISTENT RESERVE OUT: REGISTER AND IGNORE EXISTING KEY", spc_pr_out, PROUT,
	       10, 0x5f, 0x06, 0xff, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00),
	RSV_SA(0x07, "PERSISTENT RESERVE OUT: REGISTER AND MOVE", spc_pr_out, PROUT, 10,
	       0x5f, 0x07, 0xff, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00),
};

/* EXTENDED COPY (LID1) and RECEIVE COPY RESULTS (xcopy.c) */
static const struct scsi_cmd_desc extended_copy[] = {
	SA_CMD(0x00, "EXTENDED COPY(LID1)", spc_extended_copy, WR, 16,
	       0x83, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff,
	       0x00, 0x00),
};
static const struct scsi_cmd_desc receive_copy_results[] = {
	SA_CMD(0x00, "RECEIVE COPY RESULTS: COPY STATUS", spc_receive_copy_results, INFO, 16,
	       0x84, 0x00, 0xff, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff,
	       0x00, 0x00),
	SA_CMD(0x03, "RECEIVE COPY RESULTS: OPERATING PARAMETERS", spc_receive_copy_results, INFO,
	       16, 0x84, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff,
	       0xff, 0x00, 0x00),
};

static const struct scsi_cmd_desc service_action_in16[] = {
	SA_CMD(0x10, "READ CAPACITY(16)", sbc_read_capacity16, INFO | ALUA_S, 16,
	       0x9e, 0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
	       0x01, 0x00),
	{.name = "GET LBA STATUS", .exec = sbc_get_lba_status, .flags = RD, .sa = 0x12,
	 .cdb_len = 16,
	 .usage = {0x9e, 0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
		   0xff, 0x00, 0x00},
	 .avail = scsi_lu_thin},
};

static const struct scsi_cmd_desc maintenance_in[] = {
	SA_CMD(0x0a, "REPORT TARGET PORT GROUPS", spc_report_tpgs,
	       INFO | SCSI_F_RSV2_ALLOW | ALUA_ALL, 12,
	       0xa3, 0x2a, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00),
	SA_CMD(0x0c, "REPORT SUPPORTED OPERATION CODES", spc_report_opcodes,
	       INFO | SCSI_F_RSV2_ALLOW | ALUA_ALL, 12,
	       0xa3, 0x0c, 0x87, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00),
};

/*
 * SET TARGET PORT GROUPS: only LUs with an access provider offer it (the
 * others answer INVALID COMMAND OPERATION CODE, as before it existed). It
 * changes LU state like MODE SELECT, so it conflicts with reservations the
 * same way; a transitioning port refuses it (SPC-4 5.15.2.5).
 */
static const struct scsi_cmd_desc maintenance_out[] = {
	{.name = "SET TARGET PORT GROUPS", .exec = spc_set_tpgs,
	 .flags = SCSI_F_DATA_OUT | ALUA_SU, .sa = 0x0a, .cdb_len = 12,
	 .usage = {0xa4, 0x0a, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00},
	 .avail = scsi_lu_has_access},
};

#define ONE(desc) {.cmd = &(desc)}
#define SA(list)  {.sa = (list), .n_sa = HL_ARRAY_SIZE(list)}

const struct scsi_opcode scsi_disk_ops[256] = {
	[0x00] = ONE(test_unit_ready),
	[0x03] = ONE(request_sense),
	[0x08] = ONE(read6),
	[0x0a] = ONE(write6),
	[0x12] = ONE(inquiry),
	[0x15] = ONE(mode_select6),
	[0x16] = ONE(reserve6),
	[0x17] = ONE(release6),
	[0x1a] = ONE(mode_sense6),
	[0x1b] = ONE(start_stop_unit),
	[0x25] = ONE(read_capacity10),
	[0x28] = ONE(read10),
	[0x2a] = ONE(write10),
	[0x2e] = ONE(write_verify10),
	[0x2f] = ONE(verify10),
	[0x34] = ONE(prefetch10),
	[0x35] = ONE(sync_cache10),
	[0x41] = ONE(write_same10),
	[0x42] = ONE(unmap),
	[0x55] = ONE(mode_select10),
	[0x56] = ONE(reserve10),
	[0x57] = ONE(release10),
	[0x5a] = ONE(mode_sense10),
	[0x5e] = SA(persistent_reserve_in),
	[0x5f] = SA(persistent_reserve_out),
	[0x83] = SA(extended_copy),
	[0x84] = SA(receive_copy_results),
	[0x88] = ONE(read16),
	[0x89] = ONE(compare_and_write),
	[0x8a] = ONE(write16),
	[0x8b] = ONE(orwrite16),
	[0x8e] = ONE(write_verify16),
	[0x8f] = ONE(verify16),
	[0x90] = ONE(prefetch16),
	[0x91] = ONE(sync_cache16),
	[0x93] = ONE(write_same16),
	[0x9e] = SA(service_action_in16),
	[0xa0] = ONE(report_luns),
	[0xa3] = SA(maintenance_in),
	[0xa4] = SA(maintenance_out),
	[0xa8] = ONE(read12),
	[0xaa] = ONE(write12),
	[0xae] = ONE(write_verify12),
	[0xaf] = ONE(verify12),
};
// clang-format on
