/*
 * pdu_ut.c - the BHS accessors, LUN coding and the receive state machine
 * (fed whole, in odd chunks and byte by byte; with and without digests;
 * AHS; bad header digest; oversized segment; data digest mismatch).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hl_test.h"
#include "iscsi/iscsi_text.h"
#include "iscsi/pdu.h"

struct seen {
	int n;
	uint8_t op[16];
	uint32_t dsl[16];
	uint8_t data[16][64];
	bool ddok[16];
	uint32_t ahs_len[16];
	uint8_t *dst; /* when set, header() routes data there */
	bool discard;
	int fail_at;  /* header() fails for this PDU index (-1 never) */
	int yield_at; /* pdu() yields after this PDU index (0: never; 1 = the first) */
};

static int hdr_cb(void *ctx, struct iscsi_rx *rx)
{
	struct seen *s = ctx;
	if (s->fail_at == s->n)
		return -EIO;
	if (s->dst)
		rx->dst = s->dst;
	rx->discard = s->discard;
	return 0;
}

static int pdu_cb(void *ctx, struct iscsi_rx *rx)
{
	struct seen *s = ctx;
	int i = s->n++;
	s->op[i] = bhs_opcode(&rx->bhs);
	s->dsl[i] = rx->dsl;
	s->ddok[i] = rx->ddigest_ok;
	s->ahs_len[i] = rx->ahs_len;
	if (rx->data && rx->dsl <= 64)
		memcpy(s->data[i], rx->data, rx->dsl);
	if (s->yield_at == s->n)
		iscsi_rx_yield(rx);
	return 0;
}

static const struct iscsi_rx_ops ops = {.header = hdr_cb, .pdu = pdu_cb};

static void put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

/* Build one PDU into out; returns its length. */
static size_t build(uint8_t *out, uint8_t op, const void *ahs, uint32_t ahs_len, const void *data,
                    uint32_t dsl, bool hd, bool dd)
{
	size_t n = 0;
	memset(out, 0, ISCSI_BHS_LEN);
	out[0] = op;
	out[1] = 0x80;
	out[4] = (uint8_t)(ahs_len / 4);
	hl_put_be24(&out[5], dsl);
	hl_put_be32(&out[16], 0x1234);
	n = ISCSI_BHS_LEN;
	if (ahs_len) /* ahs may be NULL; memcpy(p, NULL, 0) is still UB */
		memcpy(out + n, ahs, ahs_len);
	n += ahs_len;
	if (hd) {
		put_le32(out + n, iscsi_crc32c(0, out, n));
		n += 4;
	}
	size_t dstart = n;
	if (dsl)
		memcpy(out + n, data, dsl);
	n += dsl;
	while (n & 3)
		out[n++] = 0;
	if (dd && dsl) {
		put_le32(out + n, iscsi_crc32c(0, out + dstart, n - dstart));
		n += 4;
	}
	return n;
}

static void test_bhs_accessors(void)
{
	struct iscsi_bhs h;
	memset(&h, 0, sizeof(h));
	h.b[0] = 0x41;
	h.b[1] = 0x80 | ISCSI_CMD_WRITE;
	bhs_set_dsl(&h, 0x123456);
	bhs_set_itt(&h, 0xdeadbeef);
	bhs_put32(&h, 20, 4096);
	CU_ASSERT_EQUAL(bhs_opcode(&h), ISCSI_OP_SCSI_CMD);
	CU_ASSERT_TRUE(bhs_immediate(&h));
	CU_ASSERT_TRUE(bhs_final(&h));
	CU_ASSERT_EQUAL(bhs_dsl(&h), 0x123456);
	CU_ASSERT_EQUAL(h.b[5], 0x12);
	CU_ASSERT_EQUAL(bhs_itt(&h), 0xdeadbeef);
	CU_ASSERT_EQUAL(bhs_edtl(&h), 4096);
	CU_ASSERT_EQUAL(iscsi_pad4(5), 3);
	CU_ASSERT_EQUAL(iscsi_pad4(8), 0);
}

static void test_sn_arith(void)
{
	CU_ASSERT_TRUE(sn_lt(1, 2));
	CU_ASSERT_TRUE(sn_lt(0xffffffff, 0));
	CU_ASSERT_FALSE(sn_lt(5, 5));
	CU_ASSERT_TRUE(sn_le(5, 5));
	CU_ASSERT_FALSE(sn_lt(0, 0xffffffff));
}

static void test_lun_coding(void)
{
	CU_ASSERT_EQUAL(iscsi_lun_decode(0), 0);
	CU_ASSERT_EQUAL(iscsi_lun_decode(0x0005000000000000ull), 5);
	CU_ASSERT_EQUAL(iscsi_lun_decode(0x4123000000000000ull), 0x123);
	CU_ASSERT_EQUAL(iscsi_lun_decode(0x0105000000000000ull), UINT64_MAX); /* bus 1 */
	CU_ASSERT_EQUAL(iscsi_lun_decode(0x8000000000000000ull), UINT64_MAX); /* LUN addressing */
	for (uint64_t l = 0; l < 1000; l += 37)
		CU_ASSERT_EQUAL(iscsi_lun_decode(iscsi_lun_encode(l)), l);
}

static void feed_in_chunks(struct iscsi_rx *rx, const uint8_t *buf, size_t len, size_t chunk)
{
	for (size_t off = 0; off < len; off += chunk) {
		size_t n = HL_MIN(chunk, len - off);
		CU_ASSERT_EQUAL(iscsi_rx_feed(rx, buf + off, n), (long)n);
	}
}

static void run_stream(bool hd, bool dd, size_t chunk)
{
	uint8_t buf[1024];
	size_t n = 0;
	uint8_t ahs[8] = {0x00, 0x05, 0x01, 0x00, 1, 2, 3, 4};
	struct seen s = {.fail_at = -1};
	struct iscsi_rx rx;

	n += build(buf + n, ISCSI_OP_NOP_OUT, NULL, 0, NULL, 0, hd, dd);
	n += build(buf + n, ISCSI_OP_TEXT_REQ, NULL, 0, "SendTargets=All", 16, hd, dd);
	n += build(buf + n, ISCSI_OP_SCSI_CMD, ahs, 8, "abcde", 5, hd, dd);
	iscsi_rx_init(&rx, &ops, &s, 8192);
	rx.header_digest = hd;
	rx.data_digest = dd;
	feed_in_chunks(&rx, buf, n, chunk);
	CU_ASSERT_EQUAL(s.n, 3);
	CU_ASSERT_EQUAL(s.op[0], ISCSI_OP_NOP_OUT);
	CU_ASSERT_EQUAL(s.dsl[0], 0);
	CU_ASSERT_EQUAL(s.op[1], ISCSI_OP_TEXT_REQ);
	CU_ASSERT_EQUAL(s.dsl[1], 16);
	CU_ASSERT_STRING_EQUAL((char *)s.data[1], "SendTargets=All");
	CU_ASSERT_EQUAL(s.op[2], ISCSI_OP_SCSI_CMD);
	CU_ASSERT_EQUAL(s.ahs_len[2], 8);
	CU_ASSERT_EQUAL(memcmp(s.data[2], "abcde", 5), 0);
	CU_ASSERT_TRUE(s.ddok[1] && s.ddok[2]);
	CU_ASSERT_EQUAL(rx.state, ISCSI_RX_BHS);
	iscsi_rx_fini(&rx);
}

static void test_rx_whole(void)
{
	run_stream(false, false, 4096);
}

static void test_rx_byte_by_byte(void)
{
	run_stream(false, false, 1);
	run_stream(true, true, 1);
}

static void test_rx_odd_chunks(void)
{
	for (size_t c = 2; c < 60; c += 7) {
		run_stream(true, false, c);
		run_stream(false, true, c);
	}
}

static void test_rx_bad_header_digest(void)
{
	uint8_t buf[256];
	struct seen s = {.fail_at = -1};
	struct iscsi_rx rx;
	size_t n = build(buf, ISCSI_OP_NOP_OUT, NULL, 0, NULL, 0, true, false);

	buf[ISCSI_BHS_LEN] ^= 1;
	iscsi_rx_init(&rx, &ops, &s, 8192);
	rx.header_digest = true;
	CU_ASSERT_EQUAL(iscsi_rx_feed(&rx, buf, n), -EBADMSG);
	CU_ASSERT_EQUAL(s.n, 0);
	/* dead after an error */
	CU_ASSERT_EQUAL(iscsi_rx_feed(&rx, buf, n), -EBADMSG);
	iscsi_rx_fini(&rx);
}

static void test_rx_bad_data_digest(void)
{
	uint8_t buf[256];
	struct seen s = {.fail_at = -1};
	struct iscsi_rx rx;
	size_t n = build(buf, ISCSI_OP_TEXT_REQ, NULL, 0, "abc", 3, false, true);

	buf[n - 1] ^= 0x40;
	iscsi_rx_init(&rx, &ops, &s, 8192);
	rx.data_digest = true;
	CU_ASSERT_EQUAL(iscsi_rx_feed(&rx, buf, n), (long)n);
	CU_ASSERT_EQUAL(s.n, 1);
	CU_ASSERT_FALSE(s.ddok[0]); /* framing kept: the connection layer answers with Reject */
	iscsi_rx_fini(&rx);
}

static void test_rx_oversized(void)
{
	uint8_t buf[ISCSI_BHS_LEN];
	struct seen s = {.fail_at = -1};
	struct iscsi_rx rx;

	memset(buf, 0, sizeof(buf));
	hl_put_be24(&buf[5], 9000);
	iscsi_rx_init(&rx, &ops, &s, 8192);
	CU_ASSERT_EQUAL(iscsi_rx_feed(&rx, buf, sizeof(buf)), -EPROTO);
	iscsi_rx_fini(&rx);
}

static void test_rx_dst_and_discard(void)
{
	uint8_t buf[256], target[16] = {0};
	struct seen s = {.fail_at = -1, .dst = target};
	struct iscsi_rx rx;
	size_t n = build(buf, ISCSI_OP_DATA_OUT, NULL, 0, "hello", 5, false, false);

	iscsi_rx_init(&rx, &ops, &s, 8192);
	CU_ASSERT_EQUAL(iscsi_rx_feed(&rx, buf, n), (long)n);
	CU_ASSERT_EQUAL(memcmp(target, "hello", 5), 0);
	s.dst = NULL;
	s.discard = true;
	memset(target, 0, sizeof(target));
	CU_ASSERT_EQUAL(iscsi_rx_feed(&rx, buf, n), (long)n);
	CU_ASSERT_EQUAL(s.n, 2);
	CU_ASSERT_EQUAL(target[0], 0);
	iscsi_rx_fini(&rx);
}

static void test_rx_callback_error(void)
{
	uint8_t buf[256];
	struct seen s = {.fail_at = 1};
	struct iscsi_rx rx;
	size_t n = build(buf, ISCSI_OP_NOP_OUT, NULL, 0, NULL, 0, false, false);

	memcpy(buf + n, buf, n);
	iscsi_rx_init(&rx, &ops, &s, 8192);
	CU_ASSERT_EQUAL(iscsi_rx_feed(&rx, buf, 2 * n), -EIO);
	CU_ASSERT_EQUAL(s.n, 1);
	iscsi_rx_fini(&rx);
}

/* A callback that yields stops the feed after its PDU; the rest is fed again later. */
static void test_rx_yield(void)
{
	uint8_t buf[512];
	struct seen s = {.fail_at = -1, .yield_at = 1};
	struct iscsi_rx rx;
	uint8_t data[5] = {1, 2, 3, 4, 5};
	size_t n1 = build(buf, ISCSI_OP_NOP_OUT, NULL, 0, data, sizeof(data), false, false);
	size_t n2 = build(buf + n1, ISCSI_OP_SCSI_CMD, NULL, 0, NULL, 0, false, false);

	iscsi_rx_init(&rx, &ops, &s, 8192);
	CU_ASSERT_EQUAL(iscsi_rx_feed(&rx, buf, n1 + n2), (long)n1);
	CU_ASSERT_EQUAL(s.n, 1);
	CU_ASSERT_EQUAL(s.op[0], ISCSI_OP_NOP_OUT);
	/* the next feed starts a new call: no yield pending, the rest goes through */
	CU_ASSERT_EQUAL(iscsi_rx_feed(&rx, buf + n1, n2), (long)n2);
	CU_ASSERT_EQUAL(s.n, 2);
	CU_ASSERT_EQUAL(s.op[1], ISCSI_OP_SCSI_CMD);
	iscsi_rx_fini(&rx);
}

static const struct hl_test tests[] = {
    {"BHS accessors", test_bhs_accessors},
    {"serial number arithmetic", test_sn_arith},
    {"LUN decode/encode", test_lun_coding},
    {"rx: PDUs in one buffer", test_rx_whole},
    {"rx: byte by byte, with and without digests", test_rx_byte_by_byte},
    {"rx: odd chunk sizes", test_rx_odd_chunks},
    {"rx: bad header digest loses framing", test_rx_bad_header_digest},
    {"rx: bad data digest is reported", test_rx_bad_data_digest},
    {"rx: oversized data segment", test_rx_oversized},
    {"rx: data to caller's buffer or discarded", test_rx_dst_and_discard},
    {"rx: callback error stops", test_rx_callback_error},
    {"rx: a yield stops after the PDU, the rest feeds later", test_rx_yield},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("iscsi_pdu", tests);
}
