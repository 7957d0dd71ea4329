/*
 * crc32c.c - CRC32C (Castagnoli, reflected polynomial 0x82f63b78), the
 * checksum of iSCSI header and data digests (RFC 7143 section 11.1, test
 * vectors in RFC 3720 appendix B.4).
 *
 * Two implementations compute the same function: the SSE4.2 crc32
 * instruction, 8 bytes per step, when the CPU has it; otherwise a portable
 * slicing-by-8 table walk. The choice is made once, on first use.
 */
#include "iscsi/iscsi_text.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_X86_CRC32 1
#include <nmmintrin.h>
#endif

#define CRC32C_POLY_REFLECTED 0x82f63b78u

/* crc_table[k][b]: the CRC of byte b followed by k zero bytes. */
static uint32_t crc_table[8][256];

typedef uint32_t (*crc32c_fn)(uint32_t crc, const uint8_t *p, size_t len);

static crc32c_fn crc32c_impl;
static pthread_once_t crc32c_once = PTHREAD_ONCE_INIT;

static inline uint32_t load_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void build_tables(void)
{
	for (uint32_t b = 0; b < 256; b++) {
		uint32_t c = b;

		for (int i = 0; i < 8; i++)
			c = (c >> 1) ^ (CRC32C_POLY_REFLECTED & (0u - (c & 1)));
		crc_table[0][b] = c;
	}
	for (uint32_t b = 0; b < 256; b++) {
		for (int k = 1; k < 8; k++) {
			uint32_t prev = crc_table[k - 1][b];

			crc_table[k][b] = (prev >> 8) ^ crc_table[0][prev & 0xff];
		}
	}
}

/* Slicing-by-8 on the raw (unconditioned) register value. */
static uint32_t crc32c_sw(uint32_t crc, const uint8_t *p, size_t len)
{
	while (len >= 8) {
		uint32_t lo = load_le32(p) ^ crc;
		uint32_t hi = load_le32(p + 4);

		crc = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
		      crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^
		      crc_table[3][hi & 0xff] ^ crc_table[2][(hi >> 8) & 0xff] ^
		      crc_table[1][(hi >> 16) & 0xff] ^ crc_table[0][hi >> 24];
		p += 8;
		len -= 8;
	}
	while (len--)
		crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xff];
	return crc;
}

#ifdef HAVE_X86_CRC32
__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(uint32_t crc, const uint8_t *p,
                                                               size_t len)
{
	uint64_t c = crc;

	/* Unaligned 8-byte loads through memcpy: no alignment or aliasing UB. */
	while (len >= 8) {
		uint64_t v;

		memcpy(&v, p, sizeof(v));
		c = _mm_crc32_u64(c, v);
		p += 8;
		len -= 8;
	}
	crc = (uint32_t)c;
	while (len--)
		crc = _mm_crc32_u8(crc, *p++);
	return crc;
}
#endif

static void crc32c_select(void)
{
	build_tables();
	crc32c_impl = crc32c_sw;
#ifdef HAVE_X86_CRC32
	if (__builtin_cpu_supports("sse4.2"))
		crc32c_impl = crc32c_sse42;
#endif
}

uint32_t iscsi_crc32c(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&crc32c_once, crc32c_select);
	if (len == 0)
		return crc;
	return ~crc32c_impl(~crc, buf, len);
}

void iscsi_crc32c_put(uint8_t out[4], uint32_t crc)
{
	out[0] = (uint8_t)crc;
	out[1] = (uint8_t)(crc >> 8);
	out[2] = (uint8_t)(crc >> 16);
	out[3] = (uint8_t)(crc >> 24);
}

uint32_t iscsi_crc32c_get(const uint8_t in[4])
{
	return load_le32(in);
}
