// fuzz-sources:
// fuzz-libs: -pthread
// fuzz-args: -max_len=65536
/*
 * fuzz_crc32c.c - differential harness for the digest: the SSE4.2 path
 * (three interleaved chains plus tails) and the slicing-by-8 table path
 * must agree on every input, every split point and every alignment, and
 * both must agree with a bit-at-a-time reference. Includes crc32c.c to
 * reach both implementations.
 */
#include "iscsi/crc32c.c"

#include <stdlib.h>

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint32_t whole, sw;
	size_t cut;

	whole = iscsi_crc32c(0, data, size);
	sw = ~crc32c_sw(~0u, data, size);
	if (whole != sw || whole != crc_ref(data, size))
		abort();
#ifdef HAVE_X86_CRC32
	if (__builtin_cpu_supports("sse4.2") && ~crc32c_sse42(~0u, data, size) != whole)
		abort();
#endif
	/* Continuing across any cut gives the digest of the whole. */
	cut = size ? (size_t)data[0] * 257 % (size + 1) : 0;
	if (iscsi_crc32c(iscsi_crc32c(0, data, cut), data + cut, size - cut) != whole)
		abort();
	return 0;
}
