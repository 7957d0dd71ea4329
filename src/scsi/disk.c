/*
 * disk.c - the direct-access block device (SBC-3) command table, indexed by
 * opcode. Each entry carries its handler, its flags and its CDB usage mask;
 * dispatch (cmd.c) enforces the mask and REPORT SUPPORTED OPERATION CODES
 * (spc.c) reports it, so the two cannot disagree.
 *
 * Usage masks: byte 0 is the opcode; for service-action commands byte 1
 * holds the service action; every other bit is 1 when the command uses it.
 * The control byte is 0: NACA and LINK are not supported.
 */
#include "scsi/scsi_internal.h"

#define NOLU (SCSI_F_NO_LU | SCSI_F_UA_PASS)
#define RD   SCSI_F_MEDIA
#define WR   (SCSI_F_MEDIA | SCSI_F_DATA_OUT | SCSI_F_WRITE)

/* byte 1 of READ/WRITE(10/12/16): RDPROTECT/WRPROTECT, DPO, FUA, FUA_NV */
#define RW_FLAGS 0xfa
/* byte 1 of VERIFY: VRPROTECT, DPO, BYTCHK (2 bits) */
#define VFY_FLAGS 0xf6
/* byte 1 of WRITE AND VERIFY: WRPROTECT, DPO, BYTCHK */
#define WAV_FLAGS 0xf2

static const struct scsi_cmd_desc test_unit_ready = {
    "TEST UNIT READY", spc_test_unit_ready, 0, 0, 6, {0x00, 0x00, 0x00, 0x00, 0x00, 0x00},
};
static const struct scsi_cmd_desc request_sense = {
    "REQUEST SENSE", spc_request_sense, NOLU, 0, 6, {0x03, 0x01, 0x00, 0x00, 0xff, 0x00},
};
static const struct scsi_cmd_desc read6 = {
    "READ(6)", sbc_read, RD, 0, 6, {0x08, 0x1f, 0xff, 0xff, 0xff, 0x00},
};
static const struct scsi_cmd_desc write6 = {
    "WRITE(6)", sbc_write, WR, 0, 6, {0x0a, 0x1f, 0xff, 0xff, 0xff, 0x00},
};
static const struct scsi_cmd_desc inquiry = {
    "INQUIRY", spc_inquiry, NOLU, 0, 6, {0x12, 0x01, 0xff, 0xff, 0xff, 0x00},
};
static const struct scsi_cmd_desc mode_sense6 = {
    "MODE SENSE(6)", spc_mode_sense, 0, 0, 6, {0x1a, 0x08, 0xff, 0xff, 0xff, 0x00},
};
static const struct scsi_cmd_desc start_stop_unit = {
    "START STOP UNIT", sbc_start_stop, 0, 0, 6, {0x1b, 0x01, 0x00, 0x0f, 0xf7, 0x00},
};
static const struct scsi_cmd_desc read_capacity10 = {
    "READ CAPACITY(10)",
    sbc_read_capacity10,
    0,
    0,
    10,
    {0x25, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x01, 0x00},
};
static const struct scsi_cmd_desc read10 = {
    "READ(10)", sbc_read, RD,
    0,          10,       {0x28, RW_FLAGS, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, 0x00},
};
static const struct scsi_cmd_desc write10 = {
    "WRITE(10)", sbc_write, WR,
    0,           10,        {0x2a, RW_FLAGS, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, 0x00},
};
static const struct scsi_cmd_desc write_verify10 = {
    "WRITE AND VERIFY(10)",
    sbc_write_verify,
    WR,
    0,
    10,
    {0x2e, WAV_FLAGS, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, 0x00},
};
static const struct scsi_cmd_desc verify10 = {
    "VERIFY(10)", sbc_verify,
    RD,           0,
    10,           {0x2f, VFY_FLAGS, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, 0x00},
};
static const struct scsi_cmd_desc sync_cache10 = {
    "SYNCHRONIZE CACHE(10)",
    sbc_sync_cache,
    SCSI_F_MEDIA,
    0,
    10,
    {0x35, 0x06, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, 0x00},
};
static const struct scsi_cmd_desc mode_sense10 = {
    "MODE SENSE(10)",
    spc_mode_sense,
    0,
    0,
    10,
    {0x5a, 0x18, 0xff, 0xff, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00},
};
static const struct scsi_cmd_desc read16 = {
    "READ(16)",
    sbc_read,
    RD,
    0,
    16,
    {0x88, RW_FLAGS, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f,
     0x00},
};
static const struct scsi_cmd_desc write16 = {
    "WRITE(16)",
    sbc_write,
    WR,
    0,
    16,
    {0x8a, RW_FLAGS, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f,
     0x00},
};
static const struct scsi_cmd_desc write_verify16 = {
    "WRITE AND VERIFY(16)",
    sbc_write_verify,
    WR,
    0,
    16,
    {0x8e, WAV_FLAGS, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f,
     0x00},
};
static const struct scsi_cmd_desc verify16 = {
    "VERIFY(16)",
    sbc_verify,
    RD,
    0,
    16,
    {0x8f, VFY_FLAGS, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f,
     0x00},
};
static const struct scsi_cmd_desc sync_cache16 = {
    "SYNCHRONIZE CACHE(16)",
    sbc_sync_cache,
    SCSI_F_MEDIA,
    0,
    16,
    {0x91, 0x06, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f,
     0x00},
};
static const struct scsi_cmd_desc service_action_in16[] = {
    {"READ CAPACITY(16)",
     sbc_read_capacity16,
     0,
     0x10,
     16,
     {0x9e, 0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
      0x00}},
};
static const struct scsi_cmd_desc report_luns = {
    "REPORT LUNS",
    spc_report_luns,
    NOLU,
    0,
    12,
    {0xa0, 0x00, 0xff, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00},
};
static const struct scsi_cmd_desc maintenance_in[] = {
    {"REPORT SUPPORTED OPERATION CODES",
     spc_report_opcodes,
     0,
     0x0c,
     12,
     {0xa3, 0x0c, 0x87, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}},
};
static const struct scsi_cmd_desc read12 = {
    "READ(12)", sbc_read,
    RD,         0,
    12,         {0xa8, RW_FLAGS, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, 0x00},
};
static const struct scsi_cmd_desc write12 = {
    "WRITE(12)", sbc_write,
    WR,          0,
    12,          {0xaa, RW_FLAGS, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, 0x00},
};
static const struct scsi_cmd_desc write_verify12 = {
    "WRITE AND VERIFY(12)",
    sbc_write_verify,
    WR,
    0,
    12,
    {0xae, WAV_FLAGS, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, 0x00},
};
static const struct scsi_cmd_desc verify12 = {
    "VERIFY(12)", sbc_verify,
    RD,           0,
    12,           {0xaf, VFY_FLAGS, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, 0x00},
};

#define ONE(desc)                                                                                  \
	{                                                                                          \
		.cmd = &(desc)                                                                     \
	}
#define SA(list)                                                                                   \
	{                                                                                          \
		.sa = (list), .n_sa = HL_ARRAY_SIZE(list)                                          \
	}

const struct scsi_opcode scsi_disk_ops[256] = {
    [0x00] = ONE(test_unit_ready), [0x03] = ONE(request_sense),
    [0x08] = ONE(read6),           [0x0a] = ONE(write6),
    [0x12] = ONE(inquiry),         [0x1a] = ONE(mode_sense6),
    [0x1b] = ONE(start_stop_unit), [0x25] = ONE(read_capacity10),
    [0x28] = ONE(read10),          [0x2a] = ONE(write10),
    [0x2e] = ONE(write_verify10),  [0x2f] = ONE(verify10),
    [0x35] = ONE(sync_cache10),    [0x5a] = ONE(mode_sense10),
    [0x88] = ONE(read16),          [0x8a] = ONE(write16),
    [0x8e] = ONE(write_verify16),  [0x8f] = ONE(verify16),
    [0x91] = ONE(sync_cache16),    [0x9e] = SA(service_action_in16),
    [0xa0] = ONE(report_luns),     [0xa3] = SA(maintenance_in),
    [0xa8] = ONE(read12),          [0xaa] = ONE(write12),
    [0xae] = ONE(write_verify12),  [0xaf] = ONE(verify12),
};
