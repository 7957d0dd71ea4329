/*
 * pdu.c - the iSCSI receive state machine and small wire helpers (LUN
 * decoding, opcode names). The state machine never allocates on the hot
 * path: its own buffer grows once to the largest data segment seen.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "iscsi/iscsi_text.h"
#include "iscsi/pdu.h"

uint64_t iscsi_lun_decode(uint64_t raw)
{
	uint8_t b0 = (uint8_t)(raw >> 56);
	uint8_t b1 = (uint8_t)(raw >> 48);

	switch (b0 >> 6) {
	case 0: /* peripheral device addressing: bus 0 only */
		if (b0 & 0x3f)
			return UINT64_MAX;
		return b1;
	case 1: /* flat space addressing */
		return ((uint64_t)(b0 & 0x3f) << 8) | b1;
	default:
		return UINT64_MAX;
	}
}

uint64_t iscsi_lun_encode(uint64_t lun)
{
	if (lun < 256)
		return lun << 48;
	return ((0x40 | ((lun >> 8) & 0x3f)) << 56) | ((lun & 0xff) << 48);
}

const char *iscsi_opcode_name(uint8_t op)
{
	switch (op) {
	case ISCSI_OP_NOP_OUT:
		return "NOP-Out";
	case ISCSI_OP_SCSI_CMD:
		return "SCSI-Cmd";
	case ISCSI_OP_TMF_REQ:
		return "TMF-Req";
	case ISCSI_OP_LOGIN_REQ:
		return "Login-Req";
	case ISCSI_OP_TEXT_REQ:
		return "Text-Req";
	case ISCSI_OP_DATA_OUT:
		return "Data-Out";
	case ISCSI_OP_LOGOUT_REQ:
		return "Logout-Req";
	case ISCSI_OP_SNACK_REQ:
		return "SNACK";
	case ISCSI_OP_NOP_IN:
		return "NOP-In";
	case ISCSI_OP_SCSI_RSP:
		return "SCSI-Rsp";
	case ISCSI_OP_TMF_RSP:
		return "TMF-Rsp";
	case ISCSI_OP_LOGIN_RSP:
		return "Login-Rsp";
	case ISCSI_OP_TEXT_RSP:
		return "Text-Rsp";
	case ISCSI_OP_DATA_IN:
		return "Data-In";
	case ISCSI_OP_LOGOUT_RSP:
		return "Logout-Rsp";
	case ISCSI_OP_R2T:
		return "R2T";
	case ISCSI_OP_ASYNC_MSG:
		return "Async";
	case ISCSI_OP_REJECT:
		return "Reject";
	default:
		return "?";
	}
}

void iscsi_rx_init(struct iscsi_rx *rx, const struct iscsi_rx_ops *ops, void *ctx, uint32_t max_dsl)
{
	memset(rx, 0, sizeof(*rx));
	rx->ops = ops;
	rx->ctx = ctx;
	rx->max_dsl = max_dsl;
	rx->state = ISCSI_RX_BHS;
}

void iscsi_rx_fini(struct iscsi_rx *rx)
{
	free(rx->buf);
	rx->buf = NULL;
	rx->buf_cap = 0;
}

static int rx_fail(struct iscsi_rx *rx, int err)
{
	if (!rx->error)
		rx->error = err;
	return rx->error;
}

/* The header is complete: validate it and decide where the data goes. */
static int rx_header_done(struct iscsi_rx *rx)
{
	rx->dsl = bhs_dsl(&rx->bhs);
	if (rx->dsl > rx->max_dsl)
		return rx_fail(rx, -EPROTO);
	rx->dst = NULL;
	rx->discard = false;
	rx->data = NULL;
	int rc = rx->ops->header(rx->ctx, rx);
	if (rc < 0)
		return rx_fail(rx, rc);
	if (rx->dsl == 0)
		return 0;
	if (rx->dst) {
		rx->data = rx->dst;
	} else if (!rx->discard) {
		if (rx->buf_cap < rx->dsl) {
			uint32_t cap = HL_MAX(rx->dsl, 8192u);
			uint8_t *nb = realloc(rx->buf, cap);
			if (!nb)
				return rx_fail(rx, -ENOMEM);
			rx->buf = nb;
			rx->buf_cap = cap;
		}
		rx->data = rx->buf;
	}
	rx->crc = 0;
	return 0;
}

static int rx_pdu_done(struct iscsi_rx *rx)
{
	int rc = rx->ops->pdu(rx->ctx, rx);
	rx->state = ISCSI_RX_BHS;
	rx->got = 0;
	if (rc < 0)
		return rx_fail(rx, rc);
	return 0;
}

/* After the header digest (or AHS when no digest): data or done. */
static int rx_after_header(struct iscsi_rx *rx)
{
	int rc = rx_header_done(rx);
	if (rc < 0)
		return rc;
	rx->got = 0;
	rx->ddigest_ok = true;
	if (rx->dsl == 0)
		return rx_pdu_done(rx);
	rx->state = ISCSI_RX_DATA;
	return 0;
}

/*
 * Copy what part of a fixed-size field (want bytes: BHS, AHS, a digest) is
 * in p[*off..*off+avail) to dst after what came before. @return true when
 * the field is complete (rx->got back to 0 for the next one).
 */
static bool rx_field(struct iscsi_rx *rx, uint8_t *dst, uint32_t want, const uint8_t *p,
                     size_t avail, size_t *off)
{
	size_t n = HL_MIN(avail, (size_t)(want - rx->got));

	memcpy(dst + rx->got, p + *off, n);
	rx->got += (uint32_t)n;
	*off += n;
	if (rx->got < want)
		return false;
	rx->got = 0;
	return true;
}

/* A digest as it came: the CRC register, in little-endian byte order. */
static uint32_t rx_digest(const struct iscsi_rx *rx)
{
	const uint8_t *d = rx->digest;

	return (uint32_t)d[0] | (uint32_t)d[1] << 8 | (uint32_t)d[2] << 16 | (uint32_t)d[3] << 24;
}

long iscsi_rx_feed(struct iscsi_rx *rx, const uint8_t *p, size_t len)
{
	size_t off = 0;
	int rc;

	if (rx->error)
		return rx->error;
	rx->yield = false;
	while (off < len && !rx->yield) {
		size_t avail = len - off;
		size_t n;

		switch (rx->state) {
		case ISCSI_RX_BHS:
			if (!rx_field(rx, rx->bhs.b, ISCSI_BHS_LEN, p, avail, &off))
				break;
			rx->ahs_len = bhs_ahs_len(&rx->bhs);
			if (rx->ahs_len) {
				rx->state = ISCSI_RX_AHS;
			} else if (rx->header_digest) {
				rx->state = ISCSI_RX_HDIGEST;
			} else if ((rc = rx_after_header(rx)) < 0) {
				return rc;
			}
			break;
		case ISCSI_RX_AHS:
			if (!rx_field(rx, rx->ahs, rx->ahs_len, p, avail, &off))
				break;
			if (rx->header_digest)
				rx->state = ISCSI_RX_HDIGEST;
			else if ((rc = rx_after_header(rx)) < 0)
				return rc;
			break;
		case ISCSI_RX_HDIGEST:
			if (!rx_field(rx, rx->digest, ISCSI_DIGEST_LEN, p, avail, &off))
				break;
			{
				uint32_t crc = iscsi_crc32c(0, rx->bhs.b, ISCSI_BHS_LEN);

				if (rx->ahs_len)
					crc = iscsi_crc32c(crc, rx->ahs, rx->ahs_len);
				if (crc != rx_digest(rx))
					return rx_fail(rx, -EBADMSG);
			}
			if ((rc = rx_after_header(rx)) < 0)
				return rc;
			break;
		case ISCSI_RX_DATA:
			n = HL_MIN(avail, (size_t)(rx->dsl - rx->got));
			if (rx->data)
				memcpy(rx->data + rx->got, p + off, n);
			if (rx->data_digest)
				rx->crc = iscsi_crc32c(rx->crc, p + off, n);
			rx->got += (uint32_t)n;
			off += n;
			if (rx->got < rx->dsl)
				break;
			rx->got = 0;
			if (iscsi_pad4(rx->dsl))
				rx->state = ISCSI_RX_PAD;
			else if (rx->data_digest)
				rx->state = ISCSI_RX_DDIGEST;
			else if ((rc = rx_pdu_done(rx)) < 0)
				return rc;
			break;
		case ISCSI_RX_PAD:
			n = HL_MIN(avail, (size_t)(iscsi_pad4(rx->dsl) - rx->got));
			if (rx->data_digest)
				rx->crc = iscsi_crc32c(rx->crc, p + off, n);
			rx->got += (uint32_t)n;
			off += n;
			if (rx->got < iscsi_pad4(rx->dsl))
				break;
			rx->got = 0;
			if (rx->data_digest)
				rx->state = ISCSI_RX_DDIGEST;
			else if ((rc = rx_pdu_done(rx)) < 0)
				return rc;
			break;
		case ISCSI_RX_DDIGEST:
			if (!rx_field(rx, rx->digest, ISCSI_DIGEST_LEN, p, avail, &off))
				break;
			rx->ddigest_ok = rx_digest(rx) == rx->crc;
			if ((rc = rx_pdu_done(rx)) < 0)
				return rc;
			break;
		}
	}
	return (long)off;
}
