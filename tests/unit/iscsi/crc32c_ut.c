/*
 * crc32c_ut.c - CRC32C against the RFC 3720 appendix B.4 vectors, with the
 * table-driven and SSE4.2 implementations checked separately (this file
 * includes crc32c.c to reach both).
 */
#include "iscsi/crc32c.c"

#include "hl_test.h"

#include <stdlib.h>

/* Bit-at-a-time reference: slow, obviously right. */
static uint32_t crc_ref(const uint8_t *p, size_t len)
{
	uint32_t c = 0xffffffffu;

	while (len--) {
		c ^= *p++;
		for (int i = 0; i < 8; i++)
			c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
	}
	return ~c;
}

/* The RFC 3720 B.4 "iSCSI Read (10) command PDU" example. */
static const uint8_t read_pdu[48] = {
    0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18,
    0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
};

/* Apply one implementation (as iscsi_crc32c conditions it). */
static uint32_t run_impl(crc32c_fn fn, const void *buf, size_t len)
{
	return ~fn(~0u, buf, len);
}

/* Every implementation this CPU can run, so each one meets each vector. */
static size_t impls(crc32c_fn out[2])
{
	size_t n = 0;

	iscsi_crc32c(0, NULL, 0); /* builds the tables */
	out[n++] = crc32c_sw;
#ifdef HAVE_X86_CRC32
	if (__builtin_cpu_supports("sse4.2"))
		out[n++] = crc32c_sse42;
#endif
	return n;
}

static void check_vector(const uint8_t *buf, size_t len, uint32_t want)
{
	crc32c_fn fn[2];
	size_t n = impls(fn);

	CU_ASSERT_EQUAL(iscsi_crc32c(0, buf, len), want);
	for (size_t i = 0; i < n; i++)
		CU_ASSERT_EQUAL(run_impl(fn[i], buf, len), want);
}

static void test_zeros(void)
{
	uint8_t b[32] = {0};

	check_vector(b, sizeof(b), 0x8a9136aa);
}

static void test_ones(void)
{
	uint8_t b[32];

	memset(b, 0xff, sizeof(b));
	check_vector(b, sizeof(b), 0x62a8ab43);
}

static void test_incrementing(void)
{
	uint8_t b[32];

	for (int i = 0; i < 32; i++)
		b[i] = (uint8_t)i;
	check_vector(b, sizeof(b), 0x46dd794e);
}

static void test_decrementing(void)
{
	uint8_t b[32];

	for (int i = 0; i < 32; i++)
		b[i] = (uint8_t)(31 - i);
	check_vector(b, sizeof(b), 0x113fdb5c);
}

static void test_read_pdu(void)
{
	check_vector(read_pdu, sizeof(read_pdu), 0xd9963a56);
}

static void test_empty(void)
{
	CU_ASSERT_EQUAL(iscsi_crc32c(0, "", 0), 0);
	CU_ASSERT_EQUAL(iscsi_crc32c(0x12345678, NULL, 0), 0x12345678);
}

static void test_chaining(void)
{
	uint32_t whole = iscsi_crc32c(0, read_pdu, sizeof(read_pdu));

	for (size_t cut = 0; cut <= sizeof(read_pdu); cut++) {
		uint32_t c = iscsi_crc32c(0, read_pdu, cut);

		c = iscsi_crc32c(c, read_pdu + cut, sizeof(read_pdu) - cut);
		CU_ASSERT_EQUAL_FATAL(c, whole);
	}
}

/* Every length 0..300 at every alignment 0..7, against the bitwise reference. */
static void test_lengths_and_alignments(void)
{
	uint8_t buf[320];
	crc32c_fn fn[2];
	size_t n = impls(fn);

	srand(7);
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)rand();
	for (size_t align = 0; align < 8; align++) {
		for (size_t len = 0; len <= 300; len++) {
			uint32_t want = crc_ref(buf + align, len);

			CU_ASSERT_EQUAL_FATAL(iscsi_crc32c(0, buf + align, len), want);
			for (size_t i = 0; i < n; i++)
				CU_ASSERT_EQUAL_FATAL(run_impl(fn[i], buf + align, len), want);
		}
	}
}

/*
 * Lengths around the 3 x 256 and 3 x 8192 byte interleaved blocks of the
 * SSE4.2 path (and far past them), at odd offsets.
 */
static void test_interleaved_block_edges(void)
{
	static const size_t lens[] = {
	    767,       768,    769,    775,   776,   1535,
	    1536,      1537,   24575,  24576, 24577, 24576 + 768 + 7,
	    49152 + 1, 100003, 262144,
	};
	size_t max = 262144 + 8;
	uint8_t *buf = malloc(max);
	crc32c_fn fn[2];
	size_t n = impls(fn);

	CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
	srand(11);
	for (size_t i = 0; i < max; i++)
		buf[i] = (uint8_t)rand();
	for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
		for (size_t off = 0; off < 8; off += 3) {
			uint32_t want = crc_ref(buf + off, lens[l]);

			CU_ASSERT_EQUAL(iscsi_crc32c(0, buf + off, lens[l]), want);
			for (size_t i = 0; i < n; i++)
				CU_ASSERT_EQUAL(run_impl(fn[i], buf + off, lens[l]), want);
		}
	}
	free(buf);
}

/* The join tables feed exactly `stretch` zero bytes: crc(r, A||B) = shift(crc(r, A)) ^ crc(0, B).
 */
static void test_shift_tables(void)
{
	uint8_t a[64], b[CRC_STRETCH_LONG];

	iscsi_crc32c(0, NULL, 0);
	for (size_t i = 0; i < sizeof(a); i++)
		a[i] = (uint8_t)(i * 13 + 1);
	for (size_t i = 0; i < sizeof(b); i++)
		b[i] = (uint8_t)(i * 7 + 5);

	uint32_t ra = crc32c_sw(0x12345678, a, sizeof(a));
	CU_ASSERT_EQUAL(crc_shift(crc_shift_short, ra) ^ crc32c_sw(0, b, CRC_STRETCH_SHORT),
	                crc32c_sw(ra, b, CRC_STRETCH_SHORT));
	CU_ASSERT_EQUAL(crc_shift(crc_shift_long, ra) ^ crc32c_sw(0, b, CRC_STRETCH_LONG),
	                crc32c_sw(ra, b, CRC_STRETCH_LONG));
}

static void test_uses_sse42_when_available(void)
{
	iscsi_crc32c(0, NULL, 0);
#ifdef HAVE_X86_CRC32
	CU_ASSERT(crc32c_impl == (__builtin_cpu_supports("sse4.2") ? crc32c_sse42 : crc32c_sw));
#else
	CU_ASSERT(crc32c_impl == crc32c_sw);
#endif
}

/* RFC 3720 B.4 lists the CRC of 32 zero bytes as the wire bytes aa 36 91 8a. */
static void test_wire_order(void)
{
	uint8_t out[4];
	const uint8_t want[4] = {0xaa, 0x36, 0x91, 0x8a};

	iscsi_crc32c_put(out, 0x8a9136aa);
	CU_ASSERT_EQUAL(memcmp(out, want, 4), 0);
	CU_ASSERT_EQUAL(iscsi_crc32c_get(want), 0x8a9136aa);
}

static const struct hl_test tests[] = {
    {"RFC 3720 B.4: 32 zero bytes", test_zeros},
    {"RFC 3720 B.4: 32 0xff bytes", test_ones},
    {"RFC 3720 B.4: incrementing bytes", test_incrementing},
    {"RFC 3720 B.4: decrementing bytes", test_decrementing},
    {"RFC 3720 B.4: iSCSI read command PDU", test_read_pdu},
    {"empty input leaves the crc unchanged", test_empty},
    {"crc of a||b continues crc of a", test_chaining},
    {"all lengths and alignments match the bitwise reference", test_lengths_and_alignments},
    {"interleaved block edges match the bitwise reference", test_interleaved_block_edges},
    {"join tables shift by the stretch length", test_shift_tables},
    {"SSE4.2 path selected when the CPU has it", test_uses_sse42_when_available},
    {"digest goes on the wire little-endian", test_wire_order},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("iscsi_crc32c", tests);
}
