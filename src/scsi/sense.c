/*
 * sense.c - building sense data (SPC-4 4.5): fixed format by default,
 * descriptor format for REQUEST SENSE with DESC=1, INFORMATION and the
 * sense-key-specific field pointer for INVALID FIELD errors.
 */
#include <string.h>

#include "scsi/scsi_internal.h"

#define FIXED_SENSE_LEN 18

void scsi_sense_build(uint8_t *sense, uint8_t *sense_len, bool desc, uint8_t key, uint8_t asc,
                      uint8_t ascq, bool info_valid, uint64_t info)
{
	if (desc) {
		memset(sense, 0, 8);
		sense[0] = 0x72; /* current, descriptor format */
		sense[1] = key & 0x0f;
		sense[2] = asc;
		sense[3] = ascq;
		*sense_len = 8;
		if (info_valid) {
			uint8_t *d = sense + 8;
			memset(d, 0, 12);
			d[0] = 0x00; /* information descriptor */
			d[1] = 0x0a;
			d[2] = 0x80; /* VALID */
			hl_put_be64(d + 4, info);
			sense[7] = 12;
			*sense_len = 20;
		}
		return;
	}
	memset(sense, 0, FIXED_SENSE_LEN);
	sense[0] = 0x70; /* current, fixed format */
	sense[2] = key & 0x0f;
	sense[7] = FIXED_SENSE_LEN - 8;
	sense[12] = asc;
	sense[13] = ascq;
	if (info_valid) {
		sense[0] |= 0x80;
		/* fixed format carries 32 bits; larger values cannot be reported here */
		hl_put_be32(sense + 3, info > UINT32_MAX ? UINT32_MAX : (uint32_t)info);
	}
	*sense_len = FIXED_SENSE_LEN;
}

void hl_scsi_set_sense(struct hl_scsi_cmd *cmd, uint8_t key, uint8_t asc, uint8_t ascq)
{
	cmd->status = HL_SAM_CHECK_CONDITION;
	scsi_sense_build(cmd->sense, &cmd->sense_len, false, key, asc, ascq, false, 0);
}

void scsi_sense_info(struct hl_scsi_cmd *cmd, uint8_t key, uint8_t asc, uint8_t ascq, uint64_t info)
{
	cmd->status = HL_SAM_CHECK_CONDITION;
	scsi_sense_build(cmd->sense, &cmd->sense_len, false, key, asc, ascq, true, info);
}

static void invalid_field(struct hl_scsi_cmd *cmd, bool in_cdb, uint16_t byte, int bit)
{
	if (in_cdb)
		hl_scsi_set_sense(cmd, HL_SK_ILLEGAL_REQUEST, SCSI_ASC_INVALID_FIELD_CDB);
	else
		hl_scsi_set_sense(cmd, HL_SK_ILLEGAL_REQUEST, SCSI_ASC_INVALID_FIELD_PARAM);
	/* sense key specific: SKSV, C/D, BPV + bit pointer, field pointer */
	cmd->sense[15] = 0x80 | (in_cdb ? 0x40 : 0);
	if (bit >= 0 && bit <= 7)
		cmd->sense[15] |= 0x08 | (uint8_t)bit;
	hl_put_be16(cmd->sense + 16, byte);
}

void scsi_sense_invalid_cdb(struct hl_scsi_cmd *cmd, uint16_t byte, int bit)
{
	invalid_field(cmd, true, byte, bit);
}

void scsi_sense_invalid_param(struct hl_scsi_cmd *cmd, uint16_t byte, int bit)
{
	invalid_field(cmd, false, byte, bit);
}
