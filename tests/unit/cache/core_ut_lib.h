/*
 * core_ut_lib.h - what the policy core's unit tests share (cache_core_ut,
 * cache_claims_ut, cache_tables_ut): a core of one LUN, and a read or a
 * write whose device and origin I/O all succeed at once.
 */
#ifndef HOTLUN_TESTS_CORE_UT_LIB_H
#define HOTLUN_TESTS_CORE_UT_LIB_H

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache/core/core_internal.h"
#include "hl_test.h"

#define K 1024ull
#define M (1024ull * 1024)

static inline struct hl_cache_core *mk(uint64_t cap, uint32_t bs, uint64_t window)
{
	struct hl_cache_params p;
	struct hl_cache_core *c = NULL;

	hl_cache_params_default(&p);
	p.capacity = cap;
	p.block_size = bs;
	p.window_bytes = window;
	CU_ASSERT_FATAL(hl_cache_core_create(&p, &c) == 0);
	CU_ASSERT_FATAL(hl_cache_core_lun_add(c, 0, 0) == 0);
	return c;
}

enum { R_HIT, R_PARTIAL, R_MISS };

/* A read with every device/origin I/O succeeding at once. @return R_*. */
static inline int rd(struct hl_cache_core *c, uint16_t lun, uint64_t off, uint64_t len)
{
	struct hl_cache_io ios[600];
	struct hl_cache_stats a, b;
	int n;

	hl_cache_core_stats(c, -1, &a);
	n = hl_cache_core_read(c, lun, off, len, ios, 600);
	CU_ASSERT_FATAL(n > 0);
	for (int i = 0; i < n; i++)
		hl_cache_core_io_end(c, lun, &ios[i], true);
	hl_cache_core_stats(c, -1, &b);
	if (b.read_hits > a.read_hits)
		return R_HIT;
	return b.read_partial > a.read_partial ? R_PARTIAL : R_MISS;
}

static inline void wr(struct hl_cache_core *c, uint16_t lun, uint64_t off, uint64_t len)
{
	struct hl_cache_io ios[600];
	int n = hl_cache_core_write_begin(c, lun, off, len, ios, 600);

	CU_ASSERT_FATAL(n >= 0);
	for (int i = 0; i < n; i++) {
		hl_cache_core_write_end(c, lun, &ios[i], true);
		if (ios[i].fill_nsect)
			hl_cache_core_io_end(c, lun, &ios[i], true);
	}
}

#endif
