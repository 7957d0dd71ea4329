/*
 * pdu.h - iSCSI PDU wire format (RFC 7143 section 11): opcodes, flag bits,
 * the 48-byte Basic Header Segment as raw bytes with accessors, and the
 * receive state machine (BHS -> AHS -> header digest -> data -> padding ->
 * data digest) that turns a byte stream into PDUs. Knows nothing about
 * sockets, sessions or SCSI, so it can be unit-tested and fuzzed alone.
 */
#ifndef HL_ISCSI_PDU_H
#define HL_ISCSI_PDU_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hotlun/util.h"

#define ISCSI_BHS_LEN    48
#define ISCSI_DIGEST_LEN 4
#define ISCSI_AHS_MAX    (255 * 4) /* TotalAHSLength is in 4-byte words, one byte */
#define ISCSI_RSVD_TAG   0xffffffffu

/* Initiator opcodes */
enum {
	ISCSI_OP_NOP_OUT = 0x00,
	ISCSI_OP_SCSI_CMD = 0x01,
	ISCSI_OP_TMF_REQ = 0x02,
	ISCSI_OP_LOGIN_REQ = 0x03,
	ISCSI_OP_TEXT_REQ = 0x04,
	ISCSI_OP_DATA_OUT = 0x05,
	ISCSI_OP_LOGOUT_REQ = 0x06,
	ISCSI_OP_SNACK_REQ = 0x10,
};

/* Target opcodes */
enum {
	ISCSI_OP_NOP_IN = 0x20,
	ISCSI_OP_SCSI_RSP = 0x21,
	ISCSI_OP_TMF_RSP = 0x22,
	ISCSI_OP_LOGIN_RSP = 0x23,
	ISCSI_OP_TEXT_RSP = 0x24,
	ISCSI_OP_DATA_IN = 0x25,
	ISCSI_OP_LOGOUT_RSP = 0x26,
	ISCSI_OP_R2T = 0x31,
	ISCSI_OP_ASYNC_MSG = 0x32,
	ISCSI_OP_REJECT = 0x3f,
};

#define ISCSI_OPCODE_MASK    0x3f
#define ISCSI_FLAG_IMMEDIATE 0x40 /* byte 0 */
#define ISCSI_FLAG_FINAL     0x80 /* byte 1 */

/* SCSI Command byte 1 */
#define ISCSI_CMD_READ      0x40
#define ISCSI_CMD_WRITE     0x20
#define ISCSI_CMD_ATTR_MASK 0x07

/* Data-In byte 1 */
#define ISCSI_DATAIN_ACK       0x40
#define ISCSI_DATAIN_OVERFLOW  0x04
#define ISCSI_DATAIN_UNDERFLOW 0x02
#define ISCSI_DATAIN_STATUS    0x01

/* SCSI Response byte 1 */
#define ISCSI_RSP_OVERFLOW  0x04
#define ISCSI_RSP_UNDERFLOW 0x02

/* Login / Text byte 1 */
#define ISCSI_LOGIN_TRANSIT  0x80
#define ISCSI_LOGIN_CONTINUE 0x40
#define ISCSI_TEXT_CONTINUE  0x40

enum { ISCSI_STAGE_SECURITY = 0, ISCSI_STAGE_OPERATIONAL = 1, ISCSI_STAGE_FFP = 3 };

/* Login status class/detail, as one 16-bit value (class << 8 | detail) */
enum {
	ISCSI_LOGIN_OK = 0x0000,
	ISCSI_LOGIN_TARGET_MOVED_TEMP = 0x0101,
	ISCSI_LOGIN_INITIATOR_ERROR = 0x0200,
	ISCSI_LOGIN_AUTH_FAILED = 0x0201,
	ISCSI_LOGIN_NOT_AUTHORIZED = 0x0202,
	ISCSI_LOGIN_NOT_FOUND = 0x0203,
	ISCSI_LOGIN_TARGET_REMOVED = 0x0204,
	ISCSI_LOGIN_UNSUPPORTED_VERSION = 0x0205,
	ISCSI_LOGIN_TOO_MANY_CONNECTIONS = 0x0206,
	ISCSI_LOGIN_MISSING_PARAMETER = 0x0207,
	ISCSI_LOGIN_NO_SESSION_SPANNING = 0x0208,
	ISCSI_LOGIN_SESSION_TYPE_UNSUPPORTED = 0x0209,
	ISCSI_LOGIN_SESSION_DOES_NOT_EXIST = 0x020a,
	ISCSI_LOGIN_INVALID_DURING_LOGIN = 0x020b,
	ISCSI_LOGIN_TARGET_ERROR = 0x0300,
	ISCSI_LOGIN_SERVICE_UNAVAILABLE = 0x0301,
	ISCSI_LOGIN_OUT_OF_RESOURCES = 0x0302,
};

/* Reject reasons (RFC 7143 11.17.1) */
enum {
	ISCSI_REJECT_DATA_DIGEST = 0x02,
	ISCSI_REJECT_SNACK = 0x03,
	ISCSI_REJECT_PROTOCOL_ERROR = 0x04,
	ISCSI_REJECT_CMD_NOT_SUPPORTED = 0x05,
	ISCSI_REJECT_IMMEDIATE_CMD = 0x06,
	ISCSI_REJECT_TASK_IN_PROGRESS = 0x07,
	ISCSI_REJECT_INVALID_DATA_ACK = 0x08,
	ISCSI_REJECT_INVALID_PDU_FIELD = 0x09,
	ISCSI_REJECT_LONG_OP = 0x0a,
	ISCSI_REJECT_NEGOTIATION_RESET = 0x0b,
	ISCSI_REJECT_WAITING_FOR_LOGOUT = 0x0c,
};

/* Task management functions and responses */
enum {
	ISCSI_TMF_ABORT_TASK = 1,
	ISCSI_TMF_ABORT_TASK_SET = 2,
	ISCSI_TMF_CLEAR_ACA = 3,
	ISCSI_TMF_CLEAR_TASK_SET = 4,
	ISCSI_TMF_LUN_RESET = 5,
	ISCSI_TMF_TARGET_WARM_RESET = 6,
	ISCSI_TMF_TARGET_COLD_RESET = 7,
	ISCSI_TMF_TASK_REASSIGN = 8,
};
enum {
	ISCSI_TMF_RSP_COMPLETE = 0,
	ISCSI_TMF_RSP_NO_TASK = 1,
	ISCSI_TMF_RSP_NO_LUN = 2,
	ISCSI_TMF_RSP_ALLEGIANT = 3,
	ISCSI_TMF_RSP_REASSIGN_UNSUPPORTED = 4,
	ISCSI_TMF_RSP_NOT_SUPPORTED = 5,
	ISCSI_TMF_RSP_AUTH_FAILED = 6,
	ISCSI_TMF_RSP_REJECTED = 255,
};

/* Async Message events (RFC 7143 11.9.1) */
enum { ISCSI_ASYNC_SCSI_EVENT = 0, ISCSI_ASYNC_LOGOUT_REQUEST = 1 };

/* Logout reasons and responses */
enum { ISCSI_LOGOUT_CLOSE_SESSION = 0, ISCSI_LOGOUT_CLOSE_CONN = 1, ISCSI_LOGOUT_RECOVERY = 2 };
enum { ISCSI_LOGOUT_RSP_OK = 0, ISCSI_LOGOUT_RSP_NO_CID = 1, ISCSI_LOGOUT_RSP_NO_RECOVERY = 2 };

/** The Basic Header Segment: raw bytes, read and written through the accessors below. */
struct iscsi_bhs {
	uint8_t b[ISCSI_BHS_LEN];
};
static_assert(sizeof(struct iscsi_bhs) == ISCSI_BHS_LEN, "BHS must be 48 bytes");

/* ---- common field accessors (offsets from RFC 7143 11.2) ---- */

static inline uint8_t bhs_opcode(const struct iscsi_bhs *h)
{
	return h->b[0] & ISCSI_OPCODE_MASK;
}
static inline bool bhs_immediate(const struct iscsi_bhs *h)
{
	return (h->b[0] & ISCSI_FLAG_IMMEDIATE) != 0;
}
static inline uint8_t bhs_flags(const struct iscsi_bhs *h)
{
	return h->b[1];
}
static inline bool bhs_final(const struct iscsi_bhs *h)
{
	return (h->b[1] & ISCSI_FLAG_FINAL) != 0;
}
/** TotalAHSLength in bytes. */
static inline uint32_t bhs_ahs_len(const struct iscsi_bhs *h)
{
	return (uint32_t)h->b[4] * 4;
}
static inline uint32_t bhs_dsl(const struct iscsi_bhs *h)
{
	return hl_get_be24(&h->b[5]);
}
static inline void bhs_set_dsl(struct iscsi_bhs *h, uint32_t v)
{
	h->b[4] = 0;
	hl_put_be24(&h->b[5], v);
}
static inline uint64_t bhs_lun(const struct iscsi_bhs *h)
{
	return hl_get_be64(&h->b[8]);
}
static inline void bhs_set_lun(struct iscsi_bhs *h, uint64_t v)
{
	hl_put_be64(&h->b[8], v);
}
static inline uint32_t bhs_itt(const struct iscsi_bhs *h)
{
	return hl_get_be32(&h->b[16]);
}
static inline void bhs_set_itt(struct iscsi_bhs *h, uint32_t v)
{
	hl_put_be32(&h->b[16], v);
}
/** Word at offset 20: TTT, EDTL, RTT or CID depending on opcode. */
static inline uint32_t bhs_w20(const struct iscsi_bhs *h)
{
	return hl_get_be32(&h->b[20]);
}
static inline uint32_t bhs_w24(const struct iscsi_bhs *h)
{
	return hl_get_be32(&h->b[24]);
}
static inline uint32_t bhs_w28(const struct iscsi_bhs *h)
{
	return hl_get_be32(&h->b[28]);
}
static inline uint32_t bhs_w32(const struct iscsi_bhs *h)
{
	return hl_get_be32(&h->b[32]);
}
static inline uint32_t bhs_w36(const struct iscsi_bhs *h)
{
	return hl_get_be32(&h->b[36]);
}
static inline uint32_t bhs_w40(const struct iscsi_bhs *h)
{
	return hl_get_be32(&h->b[40]);
}
static inline uint32_t bhs_w44(const struct iscsi_bhs *h)
{
	return hl_get_be32(&h->b[44]);
}
static inline void bhs_put32(struct iscsi_bhs *h, unsigned off, uint32_t v)
{
	hl_put_be32(&h->b[off], v);
}

/* Named views of the same words, so call sites read like the RFC. */
#define bhs_ttt(h)        bhs_w20(h)
#define bhs_edtl(h)       bhs_w20(h)
#define bhs_cmdsn(h)      bhs_w24(h)
#define bhs_expstatsn(h)  bhs_w28(h)
#define bhs_datasn(h)     bhs_w36(h)
#define bhs_buf_offset(h) bhs_w40(h)

/** RFC 1982 serial number arithmetic on 32 bits: a < b. */
static inline bool sn_lt(uint32_t a, uint32_t b)
{
	return a != b && (int32_t)(a - b) < 0;
}
static inline bool sn_le(uint32_t a, uint32_t b)
{
	return a == b || sn_lt(a, b);
}

/** Pad a data segment length to 4 bytes. */
static inline uint32_t iscsi_pad4(uint32_t n)
{
	return (4 - (n & 3)) & 3;
}

/**
 * Decode the 8-byte LUN field (SAM-5 4.7): peripheral (00b) and flat (01b)
 * addressing of the first level. @return the LUN number, or UINT64_MAX for
 * an address method we do not support (the caller then answers with
 * LOGICAL UNIT NOT SUPPORTED through a NULL LU).
 */
uint64_t iscsi_lun_decode(uint64_t raw);

/** Encode a LUN number (< 16384) the way Linux and libiscsi do: peripheral < 256, flat above. */
uint64_t iscsi_lun_encode(uint64_t lun);

/** Name of an opcode for logs ("SCSI-Cmd"), "?" for unknown. */
const char *iscsi_opcode_name(uint8_t op);

/* ------------------------------------------------------------------ */
/* Receive state machine.                                              */

enum iscsi_rx_state {
	ISCSI_RX_BHS = 0,
	ISCSI_RX_AHS,
	ISCSI_RX_HDIGEST,
	ISCSI_RX_DATA,
	ISCSI_RX_PAD,
	ISCSI_RX_DDIGEST,
};

struct iscsi_rx;

/** Callbacks of the receive state machine; ctx is iscsi_rx.ctx. */
struct iscsi_rx_ops {
	/**
	 * The header (BHS, AHS, header digest) is complete and valid. Choose
	 * where the data segment goes: set rx->dst to a buffer of at least
	 * rx->dsl bytes, or leave it NULL to use the state machine's own
	 * buffer, or set rx->discard to drop the data. @return 0, or < 0 to
	 * stop (framing lost / connection must close).
	 */
	int (*header)(void *ctx, struct iscsi_rx *rx);
	/**
	 * The whole PDU is in: rx->bhs, rx->ahs, rx->data (== dst or the own
	 * buffer), rx->dsl, rx->ddigest_ok. @return 0 or < 0 to stop.
	 */
	int (*pdu)(void *ctx, struct iscsi_rx *rx);
};

struct iscsi_rx {
	enum iscsi_rx_state state;
	uint32_t got; /* bytes of the current element received */
	struct iscsi_bhs bhs;
	uint8_t ahs[ISCSI_AHS_MAX];
	uint32_t ahs_len;
	uint32_t dsl;
	uint8_t *data; /* where the data segment is being written */
	uint8_t *dst;  /* set by ops->header, cleared per PDU */
	bool discard;
	uint8_t digest[ISCSI_DIGEST_LEN];
	uint32_t crc; /* running data CRC */
	bool ddigest_ok;
	/* configuration */
	bool header_digest, data_digest;
	uint32_t max_dsl; /* larger data segments lose framing */
	/* own buffer for data segments that need no special destination */
	uint8_t *buf;
	uint32_t buf_cap;
	const struct iscsi_rx_ops *ops;
	void *ctx;
	int error;  /* first error, sticky */
	bool yield; /* set by ops->pdu through iscsi_rx_yield: stop after this PDU */
};

/** Initialise; caller keeps ops and ctx. */
void iscsi_rx_init(struct iscsi_rx *rx, const struct iscsi_rx_ops *ops, void *ctx,
                   uint32_t max_dsl);
void iscsi_rx_fini(struct iscsi_rx *rx);

/**
 * Feed bytes. Calls ops as PDUs complete (possibly several per call).
 * @return bytes consumed (== len unless stopped), or < 0 when stopped:
 * -EPROTO for a framing error (bad digest on the header, oversized data
 * segment), or what a callback returned. After an error the rx is dead.
 */
long iscsi_rx_feed(struct iscsi_rx *rx, const uint8_t *p, size_t len);

/**
 * From ops->pdu: stop feeding once this PDU is handled. iscsi_rx_feed then
 * returns the bytes consumed so far (less than len); the caller keeps the
 * rest and feeds it again later (back-pressure without losing framing).
 */
static inline void iscsi_rx_yield(struct iscsi_rx *rx)
{
	rx->yield = true;
}

#endif
