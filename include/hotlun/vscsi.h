/*
 * vscsi.h - the records of a vscsi (vscsiStats-style) block trace, versions
 * 1 and 2, as hotlun-bench and hotlun-sim both read them. Each reader keeps
 * its own policy (how it tells the versions apart, what it skips, how it
 * reports a bad record); what a record's bytes mean is written once, here.
 */
#ifndef HOTLUN_VSCSI_H
#define HOTLUN_VSCSI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HL_VSCSI1_REC 32 /* bytes of a version 1 record */
#define HL_VSCSI2_REC 40 /* bytes of a version 2 record */

/* The fields of one record that a replay needs. */
struct hl_vscsi_rec {
	uint16_t op;      /* the opcode field: the SCSI opcode in its low byte */
	uint16_t version; /* the record's version field: the version in its high byte */
	uint32_t nbytes;
	uint64_t lba; /* in 512-byte sectors */
};

/** Bytes of one record of version ver (1 or 2). */
size_t hl_vscsi_rec_size(int ver);

/**
 * Decode one record of version ver (1 or 2). rec holds hl_vscsi_rec_size(ver)
 * bytes (caller keeps it); the version field is decoded, not checked.
 */
void hl_vscsi_decode(const uint8_t *rec, int ver, struct hl_vscsi_rec *out);

/** Whether the version field of the record at rec says ver. */
bool hl_vscsi_is_version(const uint8_t *rec, int ver);

enum hl_trace_dir { HL_TRACE_OTHER, HL_TRACE_READ, HL_TRACE_WRITE };

/** READ or WRITE (6, 10, 12, 16) by opcode; anything else is HL_TRACE_OTHER. */
enum hl_trace_dir hl_trace_scsi_dir(unsigned op);

#endif
