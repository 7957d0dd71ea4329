/*
 * crc32c.c - CRC32C (Castagnoli, reflected polynomial 0x82f63b78), the
 * checksum of iSCSI header and data digests (RFC 7143 section 11.1, test
 * vectors in RFC 3720 appendix B.4).
 *
 * Two implementations compute the same function: the SSE4.2 crc32
 * instruction, 8 bytes per step in three interleaved chains, when the CPU
 * has it; otherwise a portable slicing-by-8 table walk. The choice and the
 * tables are made once, on first use.
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

/*
 * The crc32 instruction takes 3 cycles but can start one per cycle, so a
 * single dependent chain leaves two thirds of it idle. A long buffer is cut
 * into three equal stretches CRCed in parallel, and the results joined. For
 * the raw (unconditioned) register, crc(r, A || B) = shift_|B|(crc(r, A)) ^
 * crc(0, B), where shift_n feeds n zero bytes. shift_n is linear, so it is
 * four table lookups, one per register byte: crc_shift_long/short[k][b] is
 * shift_n(b << 8k) for the stretch lengths used.
 */
#define CRC_STRETCH_LONG  8192
#define CRC_STRETCH_SHORT 256

static uint32_t crc_shift_long[4][256];
static uint32_t crc_shift_short[4][256];

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

/* Feed n zero bytes, one table step each: only for building tables. */
static uint32_t feed_zeros(uint32_t x, size_t n)
{
	while (n--)
		x = (x >> 8) ^ crc_table[0][x & 0xff];
	return x;
}

static void build_shift_table(uint32_t t[4][256], size_t n)
{
	uint32_t basis[32];

	/* Linearity: the image of any register is the XOR of its bits' images. */
	for (int i = 0; i < 32; i++)
		basis[i] = feed_zeros(1u << i, n);
	for (int k = 0; k < 4; k++) {
		for (uint32_t b = 0; b < 256; b++) {
			uint32_t v = 0;

			for (int i = 0; i < 8; i++) {
				if (b & (1u << i))
					v ^= basis[8 * k + i];
			}
			t[k][b] = v;
		}
	}
}

static inline uint32_t crc_shift(const uint32_t t[4][256], uint32_t x)
{
	return t[0][x & 0xff] ^ t[1][(x >> 8) & 0xff] ^ t[2][(x >> 16) & 0xff] ^ t[3][x >> 24];
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
/* Unaligned 8-byte load through memcpy: no alignment or aliasing UB. */
static inline uint64_t load_u64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/* CRC 3 * stretch bytes at p as three parallel chains (stretch % 8 == 0). */
__attribute__((target("sse4.2"))) static uint32_t
crc32c_sse42_3way(uint32_t crc, const uint8_t *p, size_t stretch, const uint32_t shift[4][256])
{
	uint64_t c0 = crc, c1 = 0, c2 = 0;

	for (size_t i = 0; i < stretch; i += 8) {
		c0 = _mm_crc32_u64(c0, load_u64(p + i));
		c1 = _mm_crc32_u64(c1, load_u64(p + stretch + i));
		c2 = _mm_crc32_u64(c2, load_u64(p + 2 * stretch + i));
	}
	crc = crc_shift(shift, (uint32_t)c0) ^ (uint32_t)c1;
	return crc_shift(shift, crc) ^ (uint32_t)c2;
}

__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(uint32_t crc, const uint8_t *p,
                                                               size_t len)
{
	uint64_t c;

	while (len >= 3 * CRC_STRETCH_LONG) {
		crc = crc32c_sse42_3way(crc, p, CRC_STRETCH_LONG, crc_shift_long);
		p += 3 * CRC_STRETCH_LONG;
		len -= 3 * CRC_STRETCH_LONG;
	}
	while (len >= 3 * CRC_STRETCH_SHORT) {
		crc = crc32c_sse42_3way(crc, p, CRC_STRETCH_SHORT, crc_shift_short);
		p += 3 * CRC_STRETCH_SHORT;
		len -= 3 * CRC_STRETCH_SHORT;
	}
	c = crc;
	while (len >= 8) {
		c = _mm_crc32_u64(c, load_u64(p));
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
	build_shift_table(crc_shift_long, CRC_STRETCH_LONG);
	build_shift_table(crc_shift_short, CRC_STRETCH_SHORT);
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
