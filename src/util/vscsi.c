/*
 * vscsi.c - decoding vscsi trace records (versions 1 and 2) for the trace
 * readers of hotlun-bench and hotlun-sim. Nothing but byte offsets: no I/O,
 * no allocation, so bench can compile it in without libhotlun.
 */
#include "hotlun/vscsi.h"

static uint16_t le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p)
{
	return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

size_t hl_vscsi_rec_size(int ver)
{
	return ver == 1 ? HL_VSCSI1_REC : HL_VSCSI2_REC;
}

void hl_vscsi_decode(const uint8_t *rec, int ver, struct hl_vscsi_rec *out)
{
	if (ver == 1) {
		out->nbytes = le32(rec + 4);
		out->op = le16(rec + 12);
		out->version = le16(rec + 14);
	} else {
		out->op = le16(rec + 0);
		out->version = le16(rec + 2);
		out->nbytes = le32(rec + 8);
	}
	out->lba = le64(rec + 16);
}

bool hl_vscsi_is_version(const uint8_t *rec, int ver)
{
	return le16(rec + (ver == 1 ? 14 : 2)) >> 8 == ver;
}

enum hl_trace_dir hl_trace_scsi_dir(unsigned op)
{
	switch (op) {
	case 0x08:
	case 0x28:
	case 0xa8:
	case 0x88:
		return HL_TRACE_READ;
	case 0x0a:
	case 0x2a:
	case 0xaa:
	case 0x8a:
		return HL_TRACE_WRITE;
	default:
		return HL_TRACE_OTHER;
	}
}
