/*
 * cache_core_ut.c - the policy core: hit/partial/miss, per-4K valid bits,
 * write-through update and invalidate, the fill races (a fill that raced a
 * write is dropped; overlapping writes), range invalidation, per-LUN
 * quotas, the RAM window and its promotion, scan resistance, and the RAM
 * bytes per cache block.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache/core/core_internal.h"
#include "hl_test.h"

#define K 1024ull
#define M (1024ull * 1024)

static struct hl_cache_core *mk(uint64_t cap, uint32_t bs, uint64_t window)
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
static int rd(struct hl_cache_core *c, uint16_t lun, uint64_t off, uint64_t len)
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

static void wr(struct hl_cache_core *c, uint16_t lun, uint64_t off, uint64_t len)
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

static void test_create_params(void)
{
	struct hl_cache_params p;
	struct hl_cache_core *c;

	hl_cache_params_default(&p);
	p.capacity = 10 * M;
	p.block_size = 3000;
	CU_ASSERT_EQUAL(hl_cache_core_create(&p, &c), -EINVAL);
	p.block_size = 2 * M;
	CU_ASSERT_EQUAL(hl_cache_core_create(&p, &c), -EINVAL);
	p.block_size = 64 * K;
	p.capacity = 32 * K;
	CU_ASSERT_EQUAL(hl_cache_core_create(&p, &c), -EINVAL);
	p.capacity = 10 * M;
	p.admit = HL_ADMIT_NHIT;
	p.admit_param = 0;
	CU_ASSERT_EQUAL(hl_cache_core_create(&p, &c), -EINVAL);
}

/* The admission policy can change while running; blocks stay, the new rule applies at once. */
static void test_set_admission_at_run_time(void)
{
	struct hl_cache_params p;
	struct hl_cache_core *c = NULL;
	struct hl_cache_stats a, b;
	uint8_t v[32];

	hl_cache_params_default(&p);
	p.capacity = 4 * M;
	p.block_size = 64 * K;
	p.window_bytes = 0;
	p.admit = HL_ADMIT_ALWAYS;
	CU_ASSERT_FATAL(hl_cache_core_create(&p, &c) == 0);
	CU_ASSERT_FATAL(hl_cache_core_lun_add(c, 0, 0) == 0);
	for (uint64_t blk = 0; blk < 64; blk++) /* fill every slot */
		rd(c, 0, blk * 64 * K, 4 * K);
	CU_ASSERT_EQUAL(hl_cache_core_set_admission(c, HL_ADMIT_NHIT, 0), -EINVAL);
	CU_ASSERT_EQUAL(hl_cache_core_set_admission(c, HL_ADMIT__COUNT, 1), -EINVAL);
	CU_ASSERT_EQUAL(hl_cache_core_set_admission(c, HL_ADMIT_NHIT, 2), 0);
	CU_ASSERT_NOT_EQUAL(hl_cache_core_peek(c, 0, 3, v), HL_CACHE_NO_SLOT); /* blocks stay */
	hl_cache_core_stats(c, -1, &a);
	CU_ASSERT_EQUAL(rd(c, 0, 100 * 64 * K, 4 * K), R_MISS); /* first miss: refused */
	CU_ASSERT_EQUAL(hl_cache_core_peek(c, 0, 100, NULL), HL_CACHE_NO_SLOT);
	hl_cache_core_stats(c, -1, &b);
	CU_ASSERT_EQUAL(b.rejections, a.rejections + 1);
	CU_ASSERT_EQUAL(rd(c, 0, 100 * 64 * K, 4 * K), R_MISS); /* second miss: admitted */
	CU_ASSERT_NOT_EQUAL(hl_cache_core_peek(c, 0, 100, NULL), HL_CACHE_NO_SLOT);
	hl_cache_core_destroy(c);
}

static void test_hit_miss_partial(void)
{
	struct hl_cache_core *c = mk(4 * M, 64 * K, 0);
	struct hl_cache_stats st;
	uint8_t v[32];

	CU_ASSERT_EQUAL(rd(c, 0, 0, 8 * K), R_MISS);
	/* Warm-up admits the whole block on the miss. */
	CU_ASSERT_NOT_EQUAL(hl_cache_core_peek(c, 0, 0, v), HL_CACHE_NO_SLOT);
	CU_ASSERT_EQUAL(v[0], 0xff);
	CU_ASSERT_EQUAL(v[1], 0xff);
	CU_ASSERT_EQUAL(rd(c, 0, 60 * K, 4 * K), R_HIT);
	/* Spans blocks 0 (cached) and 1 (not yet): partial. */
	CU_ASSERT_EQUAL(rd(c, 0, 60 * K, 8 * K), R_PARTIAL);
	CU_ASSERT_EQUAL(rd(c, 0, 60 * K, 8 * K), R_HIT);
	/* Unaligned small reads count as the 4K sectors they touch. */
	CU_ASSERT_EQUAL(rd(c, 0, 5 * K + 100, 512), R_HIT);
	/* Unknown LUN, empty and too-large requests. */
	struct hl_cache_io ios[4];
	CU_ASSERT_EQUAL(hl_cache_core_read(c, 9, 0, 4 * K, ios, 4), -ENOENT);
	CU_ASSERT_EQUAL(hl_cache_core_read(c, 0, 0, 0, ios, 4), -EINVAL);
	CU_ASSERT_EQUAL(hl_cache_core_read(c, 0, 0, 1 * M, ios, 4), -E2BIG);
	CU_ASSERT_EQUAL(hl_cache_core_read(c, 0, UINT64_MAX - 10, 100, ios, 4), -EINVAL);
	hl_cache_core_stats(c, -1, &st);
	CU_ASSERT_EQUAL(st.read_reqs, 5);
	CU_ASSERT_EQUAL(st.read_hits, 3);
	CU_ASSERT_EQUAL(st.read_partial, 1);
	CU_ASSERT_EQUAL(st.read_misses, 1);
	CU_ASSERT_EQUAL(st.admissions, 2);
	CU_ASSERT_EQUAL(st.bytes_cache_write, 128 * K);
	CU_ASSERT_EQUAL(st.bytes_read, 8 * K + 4 * K + 8 * K + 8 * K + 512);
	CU_ASSERT_EQUAL(st.bytes_read_cache, 4 * K + 4 * K + 8 * K + 512);
	hl_cache_core_destroy(c);
}

static void test_valid_bits_and_writes(void)
{
	struct hl_cache_core *c = mk(4 * M, 64 * K, 0);
	struct hl_cache_io w[2];
	uint8_t v[32];
	struct hl_cache_stats st;

	rd(c, 0, 0, 64 * K);
	/* A 512-byte write into a valid sector: read-modify-write keeps it valid. */
	CU_ASSERT_EQUAL(hl_cache_core_write_begin(c, 0, 8 * K + 512, 512, w, 2), 1);
	CU_ASSERT_EQUAL(w[0].fill_first, 2);
	CU_ASSERT_EQUAL(w[0].fill_nsect, 1);
	CU_ASSERT_EQUAL(w[0].rmw_head, 1);
	hl_cache_core_peek(c, 0, 0, v);
	CU_ASSERT_EQUAL(v[0], 0xfb); /* not served while the write is in flight */
	hl_cache_core_write_end(c, 0, &w[0], true);
	CU_ASSERT_EQUAL(w[0].fill_nsect, 1);
	hl_cache_core_io_end(c, 0, &w[0], true);
	hl_cache_core_peek(c, 0, 0, v);
	CU_ASSERT_EQUAL(v[0], 0xff);
	CU_ASSERT_EQUAL(rd(c, 0, 8 * K, 4 * K), R_HIT);
	/* Into a sector that is not valid, a partial write leaves it invalid ... */
	hl_cache_core_invalidate(c, 0, 8 * K, 4 * K);
	wr(c, 0, 8 * K + 512, 512);
	hl_cache_core_peek(c, 0, 0, v);
	CU_ASSERT_EQUAL(v[0], 0xfb);
	CU_ASSERT_EQUAL(rd(c, 0, 8 * K, 4 * K), R_MISS);
	/* ... and the read that missed it fills just that sector back. */
	CU_ASSERT_EQUAL(rd(c, 0, 8 * K, 4 * K), R_HIT);
	/* A full-sector write updates the cached data (write-through update). */
	wr(c, 0, 16 * K, 8 * K);
	hl_cache_core_peek(c, 0, 0, v);
	CU_ASSERT_EQUAL(v[0], 0xff);
	CU_ASSERT_EQUAL(rd(c, 0, 16 * K, 8 * K), R_HIT);
	hl_cache_core_stats(c, -1, &st);
	CU_ASSERT_EQUAL(st.write_updates, 2);
	CU_ASSERT_EQUAL(st.bytes_cache_write, 64 * K + 4 * K + 4 * K + 8 * K);
	CU_ASSERT_EQUAL(st.bytes_cache_update, 4 * K + 8 * K);
	/* A write to a block that is not cached does not allocate. */
	wr(c, 0, 1 * M, 64 * K);
	CU_ASSERT_EQUAL(hl_cache_core_peek(c, 0, 16, NULL), HL_CACHE_NO_SLOT);
	/* A write straddling sectors 7 (partly) and 8 (fully): both updated. */
	CU_ASSERT_EQUAL(hl_cache_core_write_begin(c, 0, 30 * K, 6 * K, w, 2), 1);
	CU_ASSERT_EQUAL(w[0].fill_first, 7);
	CU_ASSERT_EQUAL(w[0].fill_nsect, 2);
	CU_ASSERT_EQUAL(w[0].rmw_head, 1);
	CU_ASSERT_EQUAL(w[0].rmw_tail, 0);
	hl_cache_core_write_end(c, 0, &w[0], true);
	hl_cache_core_io_end(c, 0, &w[0], true);
	hl_cache_core_peek(c, 0, 0, v);
	CU_ASSERT_EQUAL(v[0], 0xff);
	CU_ASSERT_EQUAL(v[1], 0xff);
	/* Head invalid, tail valid and partial: the update skips the head only. */
	hl_cache_core_invalidate(c, 0, 40 * K, 4 * K); /* sector 10 */
	CU_ASSERT_EQUAL(hl_cache_core_write_begin(c, 0, 40 * K + 100, 8 * K, w, 2), 1);
	CU_ASSERT_EQUAL(w[0].fill_first, 11);
	CU_ASSERT_EQUAL(w[0].fill_nsect, 2);
	CU_ASSERT_EQUAL(w[0].rmw_tail, 1);
	hl_cache_core_write_end(c, 0, &w[0], true);
	hl_cache_core_io_end(c, 0, &w[0], true);
	hl_cache_core_destroy(c);
}

static void test_invalidate_mode(void)
{
	struct hl_cache_params p;
	struct hl_cache_core *c;
	uint8_t v[32];

	hl_cache_params_default(&p);
	p.capacity = 4 * M;
	p.window_bytes = 0;
	p.write_mode = HL_CACHE_WRITE_INVALIDATE;
	CU_ASSERT_FATAL(hl_cache_core_create(&p, &c) == 0);
	hl_cache_core_lun_add(c, 0, 0);
	rd(c, 0, 0, 64 * K);
	wr(c, 0, 0, 8 * K);
	hl_cache_core_peek(c, 0, 0, v);
	CU_ASSERT_EQUAL(v[0], 0xfc);
	/* Dropping every sector frees the slot. */
	wr(c, 0, 0, 64 * K);
	CU_ASSERT_EQUAL(hl_cache_core_peek(c, 0, 0, NULL), HL_CACHE_NO_SLOT);
	struct hl_cache_core_info info;
	hl_cache_core_info(c, &info);
	CU_ASSERT_EQUAL(info.used_slots, 0);
	hl_cache_core_destroy(c);
}

static void test_fill_races_write(void)
{
	struct hl_cache_core *c = mk(4 * M, 64 * K, 0);
	struct hl_cache_io r[4], w[4];
	struct hl_cache_stats st;
	int nr, nw;

	/* Miss -> (origin read in flight) -> write to the block -> fill arrives: dropped. */
	nr = hl_cache_core_read(c, 0, 0, 64 * K, r, 4);
	CU_ASSERT_EQUAL(nr, 1);
	CU_ASSERT_EQUAL(r[0].kind, HL_CACHE_IO_MISS);
	CU_ASSERT_NOT_EQUAL(r[0].slot, HL_CACHE_NO_SLOT);
	CU_ASSERT(r[0].fill_nsect == 16);
	nw = hl_cache_core_write_begin(c, 0, 4 * K, 4 * K, w, 4);
	CU_ASSERT_EQUAL(nw, 1);
	hl_cache_core_io_end(c, 0, &r[0], true);
	hl_cache_core_write_end(c, 0, &w[0], true);
	if (w[0].fill_nsect)
		hl_cache_core_io_end(c, 0, &w[0], true);
	/* Nothing from the stale fill became valid; only the write's own data may be. */
	uint8_t v[32];
	hl_cache_core_peek(c, 0, 0, v);
	CU_ASSERT_EQUAL(v[0] & ~0x02, 0);
	CU_ASSERT_EQUAL(v[1], 0);
	hl_cache_core_stats(c, -1, &st);
	CU_ASSERT_EQUAL(st.fills_dropped, 1);

	/* A fill that arrives while the write is still in flight is dropped too. */
	nr = hl_cache_core_read(c, 0, 64 * K, 4 * K, r, 4);
	CU_ASSERT_EQUAL(nr, 1);
	nw = hl_cache_core_write_begin(c, 0, 64 * K, 4 * K, w, 4);
	CU_ASSERT_EQUAL(nw, 1);
	hl_cache_core_io_end(c, 0, &r[0], true);
	hl_cache_core_peek(c, 0, 1, v);
	CU_ASSERT_EQUAL(v[0], 0);
	hl_cache_core_write_end(c, 0, &w[0], true);
	hl_cache_core_io_end(c, 0, &w[0], true);
	hl_cache_core_peek(c, 0, 1, v);
	CU_ASSERT_EQUAL(v[0], 0x01); /* the write's data, installed after the origin ack */

	/* A read during a write in flight does not even try to fill. */
	nw = hl_cache_core_write_begin(c, 0, 64 * K, 4 * K, w, 4);
	nr = hl_cache_core_read(c, 0, 64 * K, 4 * K, r, 4);
	CU_ASSERT_EQUAL(r[0].kind, HL_CACHE_IO_MISS);
	CU_ASSERT_EQUAL(r[0].fill_nsect, 0);
	hl_cache_core_io_end(c, 0, &r[0], true);
	/* The origin write failed: the sectors stay invalid. */
	hl_cache_core_write_end(c, 0, &w[0], false);
	CU_ASSERT_EQUAL(w[0].fill_nsect, 0);
	CU_ASSERT_EQUAL(hl_cache_core_peek(c, 0, 1, v), HL_CACHE_NO_SLOT);
	hl_cache_core_destroy(c);
}

static void test_io_start(void)
{
	struct hl_cache_core *c = mk(4 * M, 64 * K, 0);
	struct hl_cache_io r1[2], r2[2], w[2];
	uint8_t v[32];

	/* A fill that became stale before its data write must not write at all. */
	CU_ASSERT_EQUAL(hl_cache_core_read(c, 0, 0, 64 * K, r1, 2), 1);
	CU_ASSERT_EQUAL(hl_cache_core_write_begin(c, 0, 0, 4 * K, w, 2), 1);
	hl_cache_core_write_end(c, 0, &w[0], true);
	CU_ASSERT_TRUE(hl_cache_core_io_start(c, 0, &w[0]));   /* the update may write */
	CU_ASSERT_FALSE(hl_cache_core_io_start(c, 0, &r1[0])); /* the stale fill may not */
	hl_cache_core_io_end(c, 0, &r1[0], false);
	hl_cache_core_io_end(c, 0, &w[0], true);
	hl_cache_core_peek(c, 0, 0, v);
	CU_ASSERT_EQUAL(v[0], 0x01);
	/* Two current ios on one slot: the second waits its turn (refused, dropped). */
	CU_ASSERT_EQUAL(hl_cache_core_read(c, 0, 8 * K, 4 * K, r1, 2), 1);
	CU_ASSERT_EQUAL(hl_cache_core_read(c, 0, 16 * K, 4 * K, r2, 2), 1);
	CU_ASSERT_TRUE(hl_cache_core_io_start(c, 0, &r1[0]));
	CU_ASSERT_FALSE(hl_cache_core_io_start(c, 0, &r2[0]));
	hl_cache_core_io_end(c, 0, &r2[0], false);
	hl_cache_core_io_end(c, 0, &r1[0], true);
	hl_cache_core_peek(c, 0, 0, v);
	CU_ASSERT_EQUAL(v[0], 0x05);
	/* Once the first finished, the slot is free for the next one. */
	CU_ASSERT_EQUAL(hl_cache_core_read(c, 0, 16 * K, 4 * K, r2, 2), 1);
	CU_ASSERT_TRUE(hl_cache_core_io_start(c, 0, &r2[0]));
	hl_cache_core_io_end(c, 0, &r2[0], true);
	hl_cache_core_peek(c, 0, 0, v);
	CU_ASSERT_EQUAL(v[0], 0x15);
	hl_cache_core_destroy(c);
}

static void test_write_to_uncached_block(void)
{
	struct hl_cache_core *c = mk(4 * M, 64 * K, 0);
	struct hl_cache_io w[2], r[4];

	/* An origin write in flight to a block that is not cached ... */
	CU_ASSERT_EQUAL(hl_cache_core_write_begin(c, 0, 4 * K, 4 * K, w, 2), 1);
	CU_ASSERT_EQUAL(w[0].slot, HL_CACHE_NO_SLOT);
	/* ... keeps a read of another part of it from filling the whole block. */
	CU_ASSERT_EQUAL(hl_cache_core_read(c, 0, 32 * K, 4 * K, r, 4), 1);
	CU_ASSERT_EQUAL(r[0].kind, HL_CACHE_IO_MISS);
	CU_ASSERT_EQUAL(r[0].fill_nsect, 0);
	hl_cache_core_io_end(c, 0, &r[0], true);
	CU_ASSERT_EQUAL(hl_cache_core_peek(c, 0, 0, NULL), HL_CACHE_NO_SLOT);
	/* Other blocks are not affected, and after the write the block is admitted. */
	CU_ASSERT_EQUAL(rd(c, 0, 64 * K, 4 * K), R_MISS);
	CU_ASSERT_NOT_EQUAL(hl_cache_core_peek(c, 0, 1, NULL), HL_CACHE_NO_SLOT);
	hl_cache_core_write_end(c, 0, &w[0], true);
	CU_ASSERT_EQUAL(rd(c, 0, 32 * K, 4 * K), R_MISS);
	CU_ASSERT_NOT_EQUAL(hl_cache_core_peek(c, 0, 0, NULL), HL_CACHE_NO_SLOT);
	/* Two writes in flight: still blocked after the first ends. */
	hl_cache_core_invalidate(c, 0, 0, 64 * K);
	struct hl_cache_io w2[2];
	CU_ASSERT_EQUAL(hl_cache_core_write_begin(c, 0, 0, 4 * K, w, 2), 1);
	CU_ASSERT_EQUAL(hl_cache_core_write_begin(c, 0, 8 * K, 4 * K, w2, 2), 1);
	hl_cache_core_write_end(c, 0, &w[0], true);
	CU_ASSERT_EQUAL(hl_cache_core_read(c, 0, 32 * K, 4 * K, r, 4), 1);
	CU_ASSERT_EQUAL(r[0].fill_nsect, 0);
	hl_cache_core_io_end(c, 0, &r[0], true);
	hl_cache_core_write_end(c, 0, &w2[0], true);
	CU_ASSERT_EQUAL(rd(c, 0, 32 * K, 4 * K), R_MISS);
	CU_ASSERT_NOT_EQUAL(hl_cache_core_peek(c, 0, 0, NULL), HL_CACHE_NO_SLOT);
	hl_cache_core_destroy(c);
}

static void test_overlapping_writes(void)
{
	struct hl_cache_core *c = mk(4 * M, 64 * K, 0);
	struct hl_cache_io w1[2], w2[2];
	uint8_t v[32];

	rd(c, 0, 0, 64 * K);
	/* Two writes to the same sectors in flight: the origin may apply them in any order. */
	CU_ASSERT_EQUAL(hl_cache_core_write_begin(c, 0, 0, 4 * K, w1, 2), 1);
	CU_ASSERT_EQUAL(hl_cache_core_write_begin(c, 0, 0, 4 * K, w2, 2), 1);
	hl_cache_core_write_end(c, 0, &w2[0], true);
	CU_ASSERT_EQUAL(w2[0].fill_nsect, 0);
	hl_cache_core_write_end(c, 0, &w1[0], true);
	CU_ASSERT_EQUAL(w1[0].fill_nsect, 0);
	hl_cache_core_peek(c, 0, 0, v);
	CU_ASSERT_EQUAL(v[0], 0xfe); /* neither installed: sector 0 is read from the origin */
	hl_cache_core_destroy(c);
}

static void test_range_invalidate(void)
{
	struct hl_cache_core *c = mk(4 * M, 64 * K, 0);
	struct hl_cache_io r[2];
	uint8_t v[32];

	for (int b = 0; b < 8; b++)
		CU_ASSERT_EQUAL(rd(c, 0, (uint64_t)b * 64 * K, 64 * K), R_MISS);
	CU_ASSERT_EQUAL(hl_cache_core_invalidate(c, 0, 64 * K + 4 * K, 128 * K), 0);
	hl_cache_core_peek(c, 0, 1, v); /* sectors 1..15 of block 1 dropped */
	CU_ASSERT_EQUAL(v[0], 0x01);
	CU_ASSERT_EQUAL(v[1], 0x00);
	CU_ASSERT_EQUAL(hl_cache_core_peek(c, 0, 2, NULL), HL_CACHE_NO_SLOT);
	hl_cache_core_peek(c, 0, 3, v); /* sector 0 of block 3 dropped */
	CU_ASSERT_EQUAL(v[0], 0xfe);
	CU_ASSERT_EQUAL(v[1], 0xff);
	CU_ASSERT_NOT_EQUAL(hl_cache_core_peek(c, 0, 0, NULL), HL_CACHE_NO_SLOT);
	/* A fill in flight when its range is invalidated is dropped. */
	CU_ASSERT_EQUAL(hl_cache_core_read(c, 0, 2 * 64 * K, 4 * K, r, 2), 1);
	hl_cache_core_invalidate(c, 0, 0, UINT64_MAX); /* whole LUN, slot walk */
	hl_cache_core_io_end(c, 0, &r[0], true);
	for (int b = 0; b < 8; b++)
		CU_ASSERT_EQUAL(hl_cache_core_peek(c, 0, (uint64_t)b, NULL), HL_CACHE_NO_SLOT);
	CU_ASSERT_EQUAL(hl_cache_core_invalidate(c, 5, 0, 1), -ENOENT);
	hl_cache_core_destroy(c);
}

static void test_clock_eviction(void)
{
	struct hl_cache_params p;
	struct hl_cache_core *c;
	struct hl_cache_stats st;
	struct hl_cache_io ios[4];

	hl_cache_params_default(&p);
	p.capacity = 4 * 64 * K; /* 4 slots */
	p.admit = HL_ADMIT_ALWAYS;
	p.window_bytes = 0;
	CU_ASSERT_FATAL(hl_cache_core_create(&p, &c) == 0);
	hl_cache_core_lun_add(c, 0, 0);
	/* Blocks 10, 20, 30, 40 fill the slots; 10 and 30 are read again. */
	for (uint64_t b = 10; b <= 40; b += 10)
		rd(c, 0, b * 64 * K, 64 * K);
	CU_ASSERT_EQUAL(rd(c, 0, 10 * 64 * K, 64 * K), R_HIT);
	CU_ASSERT_EQUAL(rd(c, 0, 30 * 64 * K, 64 * K), R_HIT);
	/* The hand passes 10 (referenced: second chance) and evicts 20. */
	rd(c, 0, 50 * 64 * K, 64 * K);
	CU_ASSERT_EQUAL(hl_cache_core_peek(c, 0, 20, NULL), HL_CACHE_NO_SLOT);
	CU_ASSERT_NOT_EQUAL(hl_cache_core_peek(c, 0, 10, NULL), HL_CACHE_NO_SLOT);
	/* Next it passes 30 (referenced) and evicts 40. */
	rd(c, 0, 60 * 64 * K, 64 * K);
	CU_ASSERT_EQUAL(hl_cache_core_peek(c, 0, 40, NULL), HL_CACHE_NO_SLOT);
	CU_ASSERT_NOT_EQUAL(hl_cache_core_peek(c, 0, 30, NULL), HL_CACHE_NO_SLOT);
	/* A pinned block (read in flight) is never the victim. */
	CU_ASSERT_EQUAL(hl_cache_core_read(c, 0, 50 * 64 * K, 64 * K, ios, 4), 1);
	CU_ASSERT_EQUAL(ios[0].kind, HL_CACHE_IO_HIT);
	for (uint64_t b = 70; b < 90; b++)
		rd(c, 0, b * 3 * 64 * K, 64 * K);
	CU_ASSERT_NOT_EQUAL(hl_cache_core_peek(c, 0, 50, NULL), HL_CACHE_NO_SLOT);
	hl_cache_core_io_end(c, 0, &ios[0], false);
	hl_cache_core_stats(c, -1, &st);
	CU_ASSERT_EQUAL(st.evictions, 2 + 20);
	hl_cache_core_destroy(c);
}

static void test_luns_and_quota(void)
{
	struct hl_cache_core *c = mk(64 * 64 * K, 64 * K, 0); /* 64 slots */
	struct hl_cache_stats st;

	CU_ASSERT_EQUAL(hl_cache_core_lun_add(c, 0, 0), -EEXIST);
	CU_ASSERT_EQUAL(hl_cache_core_lun_add(c, 1, 16 * 64 * K), 0); /* private 16 slots */
	CU_ASSERT_EQUAL(hl_cache_core_lun_add(c, 2, 64 * 64 * K), -ENOSPC);
	CU_ASSERT_EQUAL(hl_cache_core_lun_add(c, 3, 100), -EINVAL);
	/* Same block number on two LUNs are different blocks. */
	rd(c, 0, 0, 64 * K);
	CU_ASSERT_EQUAL(rd(c, 1, 0, 64 * K), R_MISS);
	CU_ASSERT_EQUAL(rd(c, 0, 0, 64 * K), R_HIT);
	CU_ASSERT_EQUAL(rd(c, 1, 0, 64 * K), R_HIT);
	/* LUN 1 flooding its quota never evicts LUN 0's blocks. */
	for (int i = 0; i < 500; i++)
		rd(c, 1, (uint64_t)(i % 40) * 64 * K * 3, 64 * K);
	CU_ASSERT_EQUAL(rd(c, 0, 0, 64 * K), R_HIT);
	struct hl_cache_core_info info;
	hl_cache_core_info(c, &info);
	CU_ASSERT(info.used_slots <= 1 + 16);
	CU_ASSERT_EQUAL(hl_cache_core_stats(c, 1, &st), 0);
	CU_ASSERT_EQUAL(st.read_reqs, 502);
	CU_ASSERT_EQUAL(hl_cache_core_stats(c, 7, &st), -ENOENT);
	/* Removing the LUN drops its blocks and returns its partition to the pool. */
	CU_ASSERT_EQUAL(hl_cache_core_lun_remove(c, 1), 0);
	CU_ASSERT_EQUAL(hl_cache_core_lun_remove(c, 1), -ENOENT);
	hl_cache_core_info(c, &info);
	CU_ASSERT_EQUAL(info.used_slots, 1);
	for (int i = 0; i < 63; i++)
		rd(c, 0, (uint64_t)(i + 1) * 3 * 64 * K, 64 * K); /* not a sequential stream */
	hl_cache_core_info(c, &info);
	CU_ASSERT_EQUAL(info.used_slots, 64);
	hl_cache_core_destroy(c);
}

/* xorshift for the scan order */
static uint64_t rs = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return rs;
}

/*
 * A hot set that fits in the cache, then a single pass over ten times the
 * cache size (random order, so only admission protects the hot set; then
 * sequential, where the stream bypass does) with the hot set still being
 * read: the hot set's hit ratio stays >= 90%.
 */
static void scan_case(uint32_t bs, bool sequential, uint64_t window)
{
	const uint64_t nslots = 1024, hot = 512, scan = 10 * nslots;
	struct hl_cache_core *c = mk(nslots * bs, bs, window);
	uint64_t hits = 0, reads = 0;
	uint64_t *order = malloc(scan * sizeof(*order));

	CU_ASSERT_FATAL(order != NULL);
	for (int round = 0; round < 4; round++)
		for (uint64_t b = 0; b < hot; b++)
			rd(c, 0, b * 7 * bs, bs); /* not sequential: every 7th block */
	for (uint64_t i = 0; i < scan; i++)
		order[i] = 1000000 + i;
	if (!sequential)
		for (uint64_t i = scan - 1; i > 0; i--) {
			uint64_t j = rnd() % (i + 1), t = order[i];
			order[i] = order[j];
			order[j] = t;
		}
	for (uint64_t i = 0; i < scan; i++) {
		rd(c, 0, order[i] * bs, bs);
		if (i % 4 == 0) {
			uint64_t b = (i / 4) % hot;
			hits += rd(c, 0, b * 7 * bs, bs) == R_HIT;
			reads++;
		}
	}
	for (uint64_t b = 0; b < hot; b++) {
		hits += rd(c, 0, b * 7 * bs, bs) == R_HIT;
		reads++;
	}
	CU_ASSERT((double)hits / (double)reads >= 0.90);
	if ((double)hits / (double)reads < 0.90)
		fprintf(stderr, "scan bs=%u seq=%d: hot hit ratio %.3f\n", bs, sequential,
		        (double)hits / (double)reads);
	free(order);
	hl_cache_core_destroy(c);
}

static void test_scan_resistance(void)
{
	scan_case(4096, false, HL_CACHE_WINDOW_AUTO);
	scan_case(65536, false, HL_CACHE_WINDOW_AUTO);
	scan_case(65536, true, HL_CACHE_WINDOW_AUTO);
	scan_case(65536, false, 0);
}

static void test_scan_always_fails(void)
{
	/* The same scan with admit-all really does flush the hot set (the test can fail). */
	struct hl_cache_params p;
	struct hl_cache_core *c;
	uint64_t hits = 0;

	hl_cache_params_default(&p);
	p.capacity = 1024 * 64 * K;
	p.admit = HL_ADMIT_ALWAYS;
	p.seq_bypass = 0;
	CU_ASSERT_FATAL(hl_cache_core_create(&p, &c) == 0);
	hl_cache_core_lun_add(c, 0, 0);
	for (int round = 0; round < 4; round++)
		for (uint64_t b = 0; b < 512; b++)
			rd(c, 0, b * 7 * 64 * K, 64 * K);
	for (uint64_t i = 0; i < 10240; i++)
		rd(c, 0, (1000000 + i) * 64 * K, 64 * K);
	for (uint64_t b = 0; b < 512; b++)
		hits += rd(c, 0, b * 7 * 64 * K, 64 * K) == R_HIT;
	CU_ASSERT(hits < 512 / 2);
	hl_cache_core_destroy(c);
}

/*
 * Blocks below 8 KiB are remembered by the ghosts by 8 KiB region (h29g):
 * at 4 KiB blocks a block whose other half was dropped from the window
 * comes back as a ghost hit (flagged returning in the window); at 8 KiB
 * blocks each block is its own key, a neighbour's drop means nothing.
 * Only with frequency admission (the default): nhit:N keeps block keys.
 */
static void test_ghost_regions(void)
{
	static const uint32_t bs[] = {4 * K, 8 * K};

	for (size_t i = 0; i < HL_ARRAY_SIZE(bs); i++) {
		/* 16 SSD slots, 4 window slots. */
		struct hl_cache_core *c = mk(16 * bs[i], bs[i], 4 * bs[i]);
		uint32_t s;

		CU_ASSERT_EQUAL(c->ghost_shift, i ? 0 : 1);
		for (int b = 0; b < 16; b++)
			rd(c, 0, (uint64_t)b * 4 * bs[i], bs[i]); /* warm-up fills the SSD */
		CU_ASSERT_EQUAL(rd(c, 0, 1000 * (uint64_t)bs[i], bs[i]), R_MISS); /* to the window */
		CU_ASSERT(hl_cache_core_peek(c, 0, 1000, NULL) >= 16);
		for (int b = 0; b < 8; b++) /* pushes 1000 out */
			rd(c, 0, (uint64_t)(5000 + 4 * b) * bs[i], bs[i]);
		CU_ASSERT_EQUAL(hl_cache_core_peek(c, 0, 1000, NULL), HL_CACHE_NO_SLOT);
		CU_ASSERT(c->ghost.n > 0);
		/* Its neighbour (the other half of its 8 KiB at 4 KiB blocks) misses. */
		CU_ASSERT_EQUAL(rd(c, 0, 1001 * (uint64_t)bs[i], bs[i]), R_MISS);
		s = hl_cache_core_peek(c, 0, 1001, NULL);
		CU_ASSERT_FATAL(s >= 16 && s != HL_CACHE_NO_SLOT);
		CU_ASSERT_EQUAL(!!(*cache_wflags(c, s) & CACHE_W_RETURNED), !i);
		/* A block nothing of whose region was dropped is no ghost hit at either size. */
		CU_ASSERT_EQUAL(rd(c, 0, 3001 * (uint64_t)bs[i], bs[i]), R_MISS);
		s = hl_cache_core_peek(c, 0, 3001, NULL);
		CU_ASSERT_FATAL(s >= 16 && s != HL_CACHE_NO_SLOT);
		CU_ASSERT_FALSE(*cache_wflags(c, s) & CACHE_W_RETURNED);
		/* What the ghost holds: 1000's region (500) at 4 KiB, 1000 at 8 KiB. */
		CU_ASSERT(cache_bloom2_test(&c->ghost, cache_key(0, i ? 1000 : 500)));
		/*
		 * Other policies remember blocks: new ghosts (empty) when the
		 * shape changes, the same ones when it does not.
		 */
		uint64_t cap = c->ghost.cap;
		CU_ASSERT_EQUAL(hl_cache_core_set_admission(c, HL_ADMIT_NHIT, 2), 0);
		CU_ASSERT_EQUAL(c->ghost_shift, 0);
		CU_ASSERT_EQUAL(c->ghost.cap > cap, !i);
		CU_ASSERT_EQUAL(cache_bloom2_test(&c->ghost, cache_key(0, i ? 1000 : 500)), !!i);
		CU_ASSERT_EQUAL(hl_cache_core_set_admission(c, HL_ADMIT_FREQ, 0), 0);
		CU_ASSERT_EQUAL(c->ghost_shift, i ? 0 : 1);
		CU_ASSERT_EQUAL(c->ghost.cap, cap);
		hl_cache_core_destroy(c);
	}
}

static void test_window_promotion(void)
{
	/* 16 SSD slots, 4 window slots. */
	struct hl_cache_core *c = mk(16 * 64 * K, 64 * K, 4 * 64 * K);
	struct hl_cache_core_info info;
	struct hl_cache_stats st;
	struct hl_cache_io ios[8];
	int n;

	hl_cache_core_info(c, &info);
	CU_ASSERT_EQUAL(info.nslots, 16);
	CU_ASSERT_EQUAL(info.window_slots, 4);
	for (int b = 0; b < 16; b++)
		rd(c, 0, (uint64_t)b * 64 * K, 64 * K); /* warm-up fills the SSD */
	/* A new block goes to the RAM window: a hit there costs no SSD write. */
	hl_cache_core_stats(c, -1, &st);
	uint64_t w0 = st.bytes_cache_write;
	CU_ASSERT_EQUAL(rd(c, 0, 100 * 64 * K, 64 * K), R_MISS);
	CU_ASSERT_EQUAL(rd(c, 0, 100 * 64 * K, 64 * K), R_HIT);
	hl_cache_core_stats(c, -1, &st);
	CU_ASSERT_EQUAL(st.bytes_cache_write, w0);
	CU_ASSERT_EQUAL(st.bytes_read_ram, 64 * K);
	CU_ASSERT(hl_cache_core_peek(c, 0, 100, NULL) >= 16);
	/*
	 * Re-reads while in the window are one burst: pushed out of the window,
	 * block 100 is dropped (into the ghost), not promoted.
	 */
	for (int i = 0; i < 6; i++)
		rd(c, 0, 100 * 64 * K, 64 * K);
	for (int b = 150; b < 170; b++) {
		n = hl_cache_core_read(c, 0, (uint64_t)b * 3 * 64 * K, 64 * K, ios, 8);
		CU_ASSERT_EQUAL(n, 1);
		for (int i = 0; i < n; i++)
			hl_cache_core_io_end(c, 0, &ios[i], true);
	}
	CU_ASSERT_EQUAL(hl_cache_core_peek(c, 0, 100, NULL), HL_CACHE_NO_SLOT);
	/* It comes back (a ghost hit), is read again, then leaves the window: promoted. */
	CU_ASSERT_EQUAL(rd(c, 0, 100 * 64 * K, 64 * K), R_MISS);
	for (int i = 0; i < 6; i++)
		rd(c, 0, 100 * 64 * K, 64 * K);
	bool promoted = false;
	for (int b = 200; b < 260 && !promoted; b++) {
		n = hl_cache_core_read(c, 0, (uint64_t)b * 3 * 64 * K, 64 * K, ios, 8);
		CU_ASSERT_FATAL(n >= 1);
		for (int i = 1; i < n; i++) {
			CU_ASSERT_EQUAL(ios[i].kind, HL_CACHE_IO_PROMOTE);
			CU_ASSERT(ios[i].slot < 16);
			CU_ASSERT(ios[i].src_slot >= 16);
			CU_ASSERT_EQUAL(ios[i].fill_nsect, 16);
			if (ios[i].block != 100)
				continue;
			promoted = true;
			/* While the copy is in flight the block is not served from a half copy. */
			CU_ASSERT_EQUAL(rd(c, 0, 100 * 64 * K, 4 * K), R_MISS);
		}
		for (int i = 0; i < n; i++)
			hl_cache_core_io_end(c, 0, &ios[i], true);
	}
	CU_ASSERT_TRUE(promoted);
	CU_ASSERT(hl_cache_core_peek(c, 0, 100, NULL) < 16);
	CU_ASSERT_EQUAL(rd(c, 0, 100 * 64 * K, 64 * K), R_HIT);
	/* A promotion raced by a write is dropped. */
	rd(c, 0, 300 * 64 * K, 64 * K);
	for (int b = 350; b < 370; b++)
		rd(c, 0, (uint64_t)b * 3 * 64 * K, 64 * K);
	for (int i = 0; i < 8; i++)
		rd(c, 0, 300 * 64 * K, 64 * K);
	promoted = false;
	for (int b = 400; b < 460 && !promoted; b++) {
		struct hl_cache_io w[2];
		n = hl_cache_core_read(c, 0, (uint64_t)b * 3 * 64 * K, 64 * K, ios, 8);
		for (int i = 1; i < n; i++) {
			if (ios[i].block != 300)
				continue;
			promoted = true;
			CU_ASSERT_EQUAL(hl_cache_core_write_begin(c, 0, 300 * 64 * K, 4 * K, w, 2),
			                1);
			hl_cache_core_write_end(c, 0, &w[0], true);
			if (w[0].fill_nsect)
				hl_cache_core_io_end(c, 0, &w[0], true);
		}
		for (int i = 0; i < n; i++)
			hl_cache_core_io_end(c, 0, &ios[i], true);
	}
	CU_ASSERT_TRUE(promoted);
	uint8_t v[32];
	hl_cache_core_peek(c, 0, 300, v);
	CU_ASSERT_EQUAL(v[0] & 0xfe, 0); /* at most the write's own sector */
	hl_cache_core_info(c, &info);
	CU_ASSERT(info.used_slots <= 20);
	hl_cache_core_destroy(c);
}

/*
 * Bring block blk of LUN 1 into the RAM window as a returning block (read,
 * pushed out by new blocks of LUN 0 into the ghost, read again), then push
 * the window with reads of LUN 0 until one of them plans blk's promotion.
 * Every other io is ended at once, under LUN 0 as the engine and hotlun-sim
 * end a request's ios (the reading LUN's id). *next: LUN 0's next new block.
 * @return true with the promotion io (not started, not ended) in *out.
 */
static bool promote_lun1_block(struct hl_cache_core *c, uint64_t blk, uint64_t *next,
                               struct hl_cache_io *out)
{
	struct hl_cache_io ios[8];
	bool found = false;
	int n;

	CU_ASSERT_EQUAL(rd(c, 1, blk * 64 * K, 64 * K), R_MISS);
	for (int i = 0; i < 20; i++)
		rd(c, 0, (*next)++ * 64 * K, 64 * K);
	CU_ASSERT_EQUAL(hl_cache_core_peek(c, 1, blk, NULL), HL_CACHE_NO_SLOT);
	CU_ASSERT_EQUAL(rd(c, 1, blk * 64 * K, 64 * K), R_MISS); /* back from the ghost */
	CU_ASSERT(hl_cache_core_peek(c, 1, blk, NULL) >= 16);
	for (int tries = 0; tries < 60 && !found; tries++) {
		n = hl_cache_core_read(c, 0, (*next)++ * 64 * K, 64 * K, ios, 8);
		CU_ASSERT_FATAL(n >= 1);
		for (int i = 0; i < n; i++) {
			if (i >= 1 && ios[i].kind == HL_CACHE_IO_PROMOTE && ios[i].block == blk) {
				*out = ios[i];
				found = true;
				continue;
			}
			hl_cache_core_io_end(c, 0, &ios[i], true);
		}
	}
	return found;
}

/*
 * The RAM window is shared by the cache's LUNs: a read of LUN 0 may promote
 * a window block of LUN 1. The promotion is ended under the reading LUN's
 * id, as a request's ios are; it must still install LUN 1's block (it was
 * dropped: the core looked the block up under LUN 0), and LUN 1 then hits.
 */
static void test_window_promotion_other_lun(void)
{
	struct hl_cache_core *c = mk(16 * 64 * K, 64 * K, 4 * 64 * K);
	struct hl_cache_stats s0, s1, t0, t1;
	struct hl_cache_io io;
	uint64_t next = 1000;
	uint8_t v[32];

	CU_ASSERT_FATAL(hl_cache_core_lun_add(c, 1, 0) == 0);
	for (int b = 0; b < 16; b++)
		rd(c, 0, (uint64_t)b * 64 * K, 64 * K); /* warm-up fills the SSD with LUN 0 */
	CU_ASSERT_FATAL(promote_lun1_block(c, 100, &next, &io));
	CU_ASSERT(io.slot < 16);
	CU_ASSERT(io.src_slot >= 16);
	hl_cache_core_stats(c, 0, &s0);
	hl_cache_core_stats(c, 1, &s1);
	CU_ASSERT_TRUE(hl_cache_core_io_start(c, 0, &io));
	hl_cache_core_io_end(c, 0, &io, true);
	hl_cache_core_stats(c, 0, &t0);
	hl_cache_core_stats(c, 1, &t1);
	/* the device write and any drop are LUN 1's, the block's */
	CU_ASSERT_EQUAL(t1.bytes_cache_write - s1.bytes_cache_write, 64 * K);
	CU_ASSERT_EQUAL(t0.bytes_cache_write, s0.bytes_cache_write);
	CU_ASSERT_EQUAL(t0.fills_dropped + t1.fills_dropped, s0.fills_dropped + s1.fills_dropped);
	memset(v, 0, sizeof(v));
	CU_ASSERT(hl_cache_core_peek(c, 1, 100, v) < 16);
	CU_ASSERT_EQUAL(v[0], 0xff);
	CU_ASSERT_EQUAL(v[1], 0xff);
	CU_ASSERT_EQUAL(hl_cache_core_peek(c, 0, 100, NULL), HL_CACHE_NO_SLOT);
	CU_ASSERT_EQUAL(rd(c, 1, 100 * 64 * K, 64 * K), R_HIT);
	hl_cache_core_destroy(c);
}

/*
 * The same cross-LUN promotion raced by a write to LUN 1's block still
 * loses (never stale): a write that begins before the copy starts makes
 * io_start refuse it; one that begins while the copy is written makes
 * io_end drop it (and the write's own update waits its turn: refused).
 * Either way no sector of the old copy is valid afterwards, and a read of
 * LUN 1 is not served from the cache.
 */
static void test_window_promotion_other_lun_raced(void)
{
	struct hl_cache_core *c = mk(16 * 64 * K, 64 * K, 4 * 64 * K);
	struct hl_cache_io io, w[2];
	uint64_t next = 1000;
	uint8_t v[32];

	CU_ASSERT_FATAL(hl_cache_core_lun_add(c, 1, 0) == 0);
	for (int b = 0; b < 16; b++)
		rd(c, 0, (uint64_t)b * 64 * K, 64 * K);
	/* the write comes first: the copy may not start */
	CU_ASSERT_FATAL(promote_lun1_block(c, 300, &next, &io));
	CU_ASSERT_EQUAL(hl_cache_core_write_begin(c, 1, 300 * 64 * K, 4 * K, w, 2), 1);
	hl_cache_core_write_end(c, 1, &w[0], true);
	if (w[0].fill_nsect)
		hl_cache_core_io_end(c, 1, &w[0], true);
	CU_ASSERT_FALSE(hl_cache_core_io_start(c, 0, &io));
	hl_cache_core_io_end(c, 0, &io, false);
	memset(v, 0, sizeof(v));
	hl_cache_core_peek(c, 1, 300, v);
	CU_ASSERT_EQUAL(v[0] & 0xfe, 0); /* at most the write's own sector */
	CU_ASSERT_EQUAL(v[1], 0);
	CU_ASSERT_NOT_EQUAL(rd(c, 1, 300 * 64 * K, 64 * K), R_HIT);
	/* the copy is being written when the write begins: it is dropped at its end */
	CU_ASSERT_FATAL(promote_lun1_block(c, 400, &next, &io));
	CU_ASSERT_TRUE(hl_cache_core_io_start(c, 0, &io));
	CU_ASSERT_EQUAL(hl_cache_core_write_begin(c, 1, 400 * 64 * K, 4 * K, w, 2), 1);
	hl_cache_core_write_end(c, 1, &w[0], true);
	if (w[0].fill_nsect) {
		CU_ASSERT_FALSE(hl_cache_core_io_start(c, 1, &w[0])); /* the copy holds the slot */
		hl_cache_core_io_end(c, 1, &w[0], false);
	}
	hl_cache_core_io_end(c, 0, &io, true);
	memset(v, 0, sizeof(v));
	hl_cache_core_peek(c, 1, 400, v);
	CU_ASSERT_EQUAL(v[0], 0);
	CU_ASSERT_EQUAL(v[1], 0);
	CU_ASSERT_NOT_EQUAL(rd(c, 1, 400 * 64 * K, 64 * K), R_HIT);
	hl_cache_core_destroy(c);
}

/*
 * The window's CLOCK keeps one reference bit: a block read four times in a
 * burst outstays one that was read once by one pass of the hand, not three.
 */
static void test_window_clock_one_bit(void)
{
	/* 16 SSD slots, 4 window slots. */
	struct hl_cache_core *c = mk(16 * 64 * K, 64 * K, 4 * 64 * K);
	struct hl_cache_core_info info;
	int b = 200;

	for (int i = 0; i < 16; i++)
		rd(c, 0, (uint64_t)i * 64 * K, 64 * K); /* warm-up fills the SSD */
	CU_ASSERT_EQUAL(rd(c, 0, 100 * 64 * K, 64 * K), R_MISS);
	for (int i = 0; i < 3; i++)
		CU_ASSERT_EQUAL(rd(c, 0, 100 * 64 * K, 64 * K), R_HIT);
	CU_ASSERT(hl_cache_core_peek(c, 0, 100, NULL) >= 16);
	hl_cache_core_info(c, &info); /* the SSD's and the window's blocks counted apart */
	CU_ASSERT_EQUAL(info.used_slots, 16);
	CU_ASSERT_EQUAL(info.window_used_slots, 1);
	/* Three new blocks take the free window slots, three more pass the hand once. */
	for (; b < 200 + 6 * 3; b += 3)
		CU_ASSERT_EQUAL(rd(c, 0, (uint64_t)b * 64 * K, 64 * K), R_MISS);
	CU_ASSERT(hl_cache_core_peek(c, 0, 100, NULL) >= 16); /* its second chance */
	for (; b < 200 + 8 * 3; b += 3)
		rd(c, 0, (uint64_t)b * 64 * K, 64 * K);
	CU_ASSERT_EQUAL(hl_cache_core_peek(c, 0, 100, NULL), HL_CACHE_NO_SLOT);
	hl_cache_core_info(c, &info);
	CU_ASSERT_EQUAL(info.used_slots, 16);
	CU_ASSERT_EQUAL(info.window_used_slots, 4);
	hl_cache_core_destroy(c);
}

/*
 * Two returning blocks (ghost hits) side by side at the window's CLOCK hand
 * when a one-block read needs a window slot: the read can carry max - nb
 * extra ios. Plans one read of a new block with max ios; @return the
 * number of PROMOTE ios it planned (ended at once, successfully).
 */
static int read_one_promotes(struct hl_cache_core *c, uint64_t blk, uint32_t max)
{
	struct hl_cache_io ios[8];
	int n, p = 0;

	n = hl_cache_core_read(c, 0, blk * 64 * K, 64 * K, ios, max);
	CU_ASSERT_FATAL(n >= 1);
	for (int i = 0; i < n; i++) {
		if (ios[i].kind == HL_CACHE_IO_PROMOTE)
			p++;
		hl_cache_core_io_end(c, 0, &ios[i], true);
	}
	return p;
}

/* Blocks 100 and 101 return to the window one after the other (rule 5's ghost hit). */
static struct hl_cache_core *two_returning(void)
{
	struct hl_cache_core *c = mk(16 * 64 * K, 64 * K, 4 * 64 * K);

	for (int b = 0; b < 16; b++)
		rd(c, 0, (uint64_t)b * 64 * K, 64 * K); /* warm-up fills the SSD */
	for (int i = 0; i < 4; i++) {
		rd(c, 0, 100 * 64 * K, 64 * K);
		rd(c, 0, 101 * 64 * K, 64 * K);
	}
	for (uint64_t b = 500; b < 520; b++)
		rd(c, 0, b * 64 * K, 64 * K);
	CU_ASSERT_EQUAL(hl_cache_core_peek(c, 0, 100, NULL), HL_CACHE_NO_SLOT);
	CU_ASSERT_EQUAL(hl_cache_core_peek(c, 0, 101, NULL), HL_CACHE_NO_SLOT);
	CU_ASSERT_EQUAL(rd(c, 0, 100 * 64 * K, 64 * K), R_MISS); /* back from the ghost */
	CU_ASSERT_EQUAL(rd(c, 0, 101 * 64 * K, 64 * K), R_MISS);
	CU_ASSERT(hl_cache_core_peek(c, 0, 100, NULL) >= 16);
	CU_ASSERT(hl_cache_core_peek(c, 0, 101, NULL) >= 16);
	return c;
}

/*
 * Two returning blocks (100 and 101, both more frequent than the SSD's
 * victims) in a row at the window's hand when a one-block read needs a
 * window slot. hotlund's array (hl_cache_read_max_ios(1)) has room for
 * HL_CACHE_PROMOTE_PER_MISS promotions: the read promotes both. With
 * room for one (hotlund's bound before: 2 ios a block) it promoted 100 and
 * dropped 101 into the ghost (it came back by rule 5 on its next read):
 * docs/cache-policy.md, "Promotions a read carries", measured both.
 */
static void test_window_two_returning(void)
{
	struct hl_cache_core *c = two_returning();
	uint32_t max = hl_cache_read_max_ios(1);
	uint64_t b = 600;
	int p = 0;

	CU_ASSERT_EQUAL(max, 1 + HL_CACHE_PROMOTE_PER_MISS);
	CU_ASSERT_FATAL(max <= 8); /* read_one_promotes' array */
	for (int i = 0; i < 8 && !p; i++)
		p = read_one_promotes(c, b++, max);
	CU_ASSERT_EQUAL(p, 2);
	CU_ASSERT(hl_cache_core_peek(c, 0, 100, NULL) < 16);
	CU_ASSERT(hl_cache_core_peek(c, 0, 101, NULL) < 16);
	CU_ASSERT_EQUAL(rd(c, 0, 101 * 64 * K, 64 * K), R_HIT);
	hl_cache_core_destroy(c);

	c = two_returning();
	b = 600;
	p = 0;
	for (int i = 0; i < 8 && !p; i++)
		p = read_one_promotes(c, b++, 2);
	CU_ASSERT_EQUAL(p, 1);
	CU_ASSERT(hl_cache_core_peek(c, 0, 100, NULL) < 16);
	CU_ASSERT_EQUAL(hl_cache_core_peek(c, 0, 101, NULL), HL_CACHE_NO_SLOT); /* dropped */
	CU_ASSERT_EQUAL(rd(c, 0, 101 * 64 * K, 64 * K), R_MISS); /* and back: a ghost hit */
	CU_ASSERT(hl_cache_core_peek(c, 0, 101, NULL) >= 16);
	hl_cache_core_destroy(c);
}

/* The window's slots now, the buffer's limit now, and that they add up. */
static uint32_t split_window(struct hl_cache_core *c, uint64_t ub)
{
	struct hl_cache_core_info info;

	hl_cache_core_info(c, &info);
	CU_ASSERT_EQUAL(c->ub.cap + (info.window_slots - c->split.w0) * c->p.block_size, ub);
	CU_ASSERT(info.window_slots <= info.window_max_slots);
	return (uint32_t)info.window_slots;
}

/*
 * Rule 9: the automatic window borrows from the update buffer, a step at
 * a time, while blocks come back soon after it dropped them (a bigger
 * window would have kept them: fewer promotions), at most 3/4 of the
 * buffer, the sum unchanged; it gives the RAM back when rewrites of
 * written-back sectors say the buffer saves more, and at once when the
 * buffer is resized.
 */
static void test_window_buffer_split(void)
{
	/* 1024 SSD slots of 64K; the window is 256 slots (16 MiB), 32 per step. */
	struct hl_cache_core *c = mk(1024 * 64 * K, 64 * K, HL_CACHE_WINDOW_AUTO);
	uint64_t ub = 16 * M;
	uint32_t w0, w;
	int hits = 0;

	CU_ASSERT_FATAL(hl_cache_core_set_update_buffer(c, ub) == 0);
	w0 = split_window(c, ub);
	CU_ASSERT_EQUAL(w0, 256);
	CU_ASSERT_EQUAL(c->split.wmax, 256 + 192);
	/*
	 * 1314 scattered blocks (never a sequential stream) read in turn: the
	 * SSD takes 1024, the window cycles the other 290, each dropped 34
	 * drops before it comes back. The window grows until they fit.
	 */
	for (int round = 0; round < 8; round++) {
		hits = 0;
		for (int i = 0; i < 1314; i++)
			hits += rd(c, 0, (uint64_t)(1000 + i * 7) * 64 * K, 64 * K) == R_HIT;
	}
	w = split_window(c, ub);
	CU_ASSERT(w >= 256 + 32);
	CU_ASSERT(w <= 256 + 192);
	CU_ASSERT_EQUAL(hits, 1314);

	/* The buffer's case wins: the window gives a step back at its next decision. */
	c->split.buf_grow = 1e12;
	for (int i = 0; i < 100; i++)
		rd(c, 0, (uint64_t)(50000 + i * 7) * 64 * K, 64 * K);
	CU_ASSERT_EQUAL(split_window(c, ub), w - 32);
	c->split.buf_grow = 0;

	/* A smaller buffer lends less: the window shrinks to what it may borrow (3 MiB). */
	CU_ASSERT_FATAL(hl_cache_core_set_update_buffer(c, 4 * M) == 0);
	CU_ASSERT_EQUAL(split_window(c, 4 * M), w0 + 32);
	CU_ASSERT_FATAL(hl_cache_core_set_update_buffer(c, 0) == 0);
	CU_ASSERT_EQUAL(split_window(c, 0), w0);
	CU_ASSERT_EQUAL(c->ub.cap, 0);
	hl_cache_core_destroy(c);

	/* An explicit window size: no split. */
	c = mk(1024 * 64 * K, 64 * K, 256 * 64 * K);
	CU_ASSERT_FATAL(hl_cache_core_set_update_buffer(c, ub) == 0);
	CU_ASSERT_EQUAL(c->split.w0, 0);
	CU_ASSERT_EQUAL(c->ub.cap, ub);
	hl_cache_core_destroy(c);
}

static void test_ram_per_block(void)
{
	static const uint32_t bs[] = {4 * K, 64 * K, 1024 * K};
	/* 1 Mi slots, and a count that is no power of two (sizes follow it exactly) */
	static const uint64_t nslots[] = {1 << 20, 3 << 19};
	struct hl_cache_core_info info;

	for (size_t i = 0; i < HL_ARRAY_SIZE(bs); i++) {
		for (size_t j = 0; j < HL_ARRAY_SIZE(nslots); j++) {
			struct hl_cache_core *c = mk(nslots[j] * bs[i], bs[i], 0);
			hl_cache_core_info(c, &info);
			CU_ASSERT_EQUAL(info.nslots, nslots[j]);
			double admit = (double)info.admit_ram_bytes / (double)info.nslots;
			fprintf(stderr,
			        "\n  RAM per %uK block, %llu slots: %.2f bytes + sketch and ghosts "
			        "%.2f = %.2f",
			        bs[i] / 1024, (unsigned long long)nslots[j], info.ram_per_block,
			        admit, info.ram_per_block + admit);
			/*
			 * key 5 + state 1 + index 4.57 + bitmaps 0.25, whatever the
			 * block size; sketch 3.05 (3-bit counters, blocks up to 8
			 * KiB) or 4 + doorkeeper 0.125 + ghosts 3.75, or 1.96 at 4
			 * KiB blocks (8 KiB regions, 1 / 1.85 and 1 / 1.95 of the
			 * keys). 1 counter per slot or fewer ghost bits lost hit
			 * ratio (docs/cache-policy.md, "RAM per cache block").
			 */
			CU_ASSERT(info.ram_per_block <= 10.9);
			/* and not less: the sizes that keep the hit ratio */
			if (bs[i] <= 4 * K) {
				CU_ASSERT(admit >= 5.1 && admit <= 5.15);
				CU_ASSERT(info.ram_per_block + admit <= 16.0);
			} else {
				CU_ASSERT(admit >= 7.85 && admit <= 7.9);
				CU_ASSERT(info.ram_per_block + admit <= 18.7);
			}
			hl_cache_core_destroy(c);
		}
	}
	/*
	 * The RAM window's slots are a fixed cost (at most 64 MiB of blocks +
	 * what the update buffer lends), not one per block: at 16 Mi slots
	 * they add 0.01 bytes per block.
	 */
	struct hl_cache_core *c = mk((16ull << 20) * 4 * K, 4 * K, HL_CACHE_WINDOW_AUTO);
	hl_cache_core_info(c, &info);
	double total = info.ram_per_block + (double)info.admit_ram_bytes / (double)info.nslots;
	fprintf(stderr, "\n  RAM per 4K block, 16 Mi slots and the window: %.2f", total);
	CU_ASSERT(total <= 16.0);
	hl_cache_core_destroy(c);
	fprintf(stderr, "\n");
}

/*
 * A slot stores its key in 5 bytes: block numbers up to 2^32 - 1 are
 * cached, higher ones never (served from the origin, every time).
 */
static void test_key_block_limit(void)
{
	struct hl_cache_core *c = mk(4 * M, 4 * K, 0);
	uint64_t top = CACHE_KEY_MAX_BLOCK * 4 * K;

	CU_ASSERT_EQUAL(rd(c, 0, top, 4 * K), R_MISS);
	CU_ASSERT_EQUAL(rd(c, 0, top, 4 * K), R_HIT);
	CU_ASSERT_NOT_EQUAL(hl_cache_core_peek(c, 0, CACHE_KEY_MAX_BLOCK, NULL), HL_CACHE_NO_SLOT);
	/* The next block (and one far beyond) would not fit the stored key. */
	for (int i = 0; i < 3; i++) {
		CU_ASSERT_EQUAL(rd(c, 0, top + 4 * K, 4 * K), R_MISS);
		CU_ASSERT_EQUAL(rd(c, 0, (1ull << 44) * 4 * K, 4 * K), R_MISS);
	}
	CU_ASSERT_EQUAL(hl_cache_core_peek(c, 0, CACHE_KEY_MAX_BLOCK + 1, NULL), HL_CACHE_NO_SLOT);
	/* Block 0 is not block 2^32 (no truncation anywhere). */
	CU_ASSERT_EQUAL(hl_cache_core_peek(c, 0, 0, NULL), HL_CACHE_NO_SLOT);
	/* A read across the limit: the first block cached, the second not. */
	CU_ASSERT_EQUAL(rd(c, 0, top, 8 * K), R_PARTIAL);
	wr(c, 0, top, 8 * K);
	CU_ASSERT_EQUAL(hl_cache_core_lun_blocks(c, 0), 1);
	/* A restored record beyond the limit is refused. */
	struct hl_cache_slot_rec rec = {.lun = 0, .block = CACHE_KEY_MAX_BLOCK + 1};
	rec.valid[0] = 1;
	CU_ASSERT_EQUAL(hl_cache_core_slot_restore(c, 100, &rec), -EINVAL);
	hl_cache_core_destroy(c);
}


/*
 * What a stop during a restore leaves (the log line of engine_restore_stop):
 * a superblock that says "all" (more LUNs than its ranges hold, or no
 * memory for the copy) makes the next start cold even when the RAM filter
 * is not "all"; ranges preloaded from the last run's superblock are
 * dropped again at the next start even when nothing was written since.
 */
static void test_lazy_stop_state(void)
{
	struct hl_cache_core *c = mk(4 * M, 4096, 0);
	struct hl_cache_rs_range *r, one = {.lun = 0, .lo = 10, .hi = 20};
	uint32_t n;
	bool all;
	uint64_t gen;

	hl_cache_core_restore_begin(c);
	CU_ASSERT(!hl_cache_core_restore_all(c));
	CU_ASSERT_EQUAL(hl_cache_core_restore_noted(c), 0);
	CU_ASSERT_EQUAL(hl_cache_core_invalidate(c, 0, 5 * 4096, 4096), 0);
	CU_ASSERT(hl_cache_core_restore_need_mark(c));
	hl_cache_core_restore_snapshot(c, &r, &n, &all, &gen);
	CU_ASSERT(!all);
	/* the copy could not say it in ranges: the superblock says "all" */
	hl_cache_core_restore_marked(c, NULL, 0, true, gen);
	free(r);
	CU_ASSERT(!hl_cache_core_restore_need_mark(c));
	CU_ASSERT(hl_cache_core_restore_all(c));
	hl_cache_core_restore_end(c);

	hl_cache_core_restore_begin(c);
	CU_ASSERT_EQUAL(hl_cache_core_restore_preload(c, &one, 1), 0);
	CU_ASSERT(hl_cache_core_restore_noted(c) > 0);
	CU_ASSERT(!hl_cache_core_restore_all(c));
	hl_cache_core_restore_end(c);
	hl_cache_core_destroy(c);
}

/* ---- a lazy restore's filter and its durable copy, against a model ---- */

#define RSM_DOM  4096u /* model blocks: [0, RSM_DOM) and the RSM_DOM below the top */
#define RSM_LUNS 3u

static uint64_t rsm_block(uint32_t i)
{
	return i < RSM_DOM ? i : HL_CACHE_MAX_BLOCK_NR - (2 * RSM_DOM - 1 - i);
}

static bool rsm_in(const struct hl_cache_rs_range *r, uint32_t n, bool all, uint16_t lun,
                   uint64_t b)
{
	if (all)
		return true;
	for (uint32_t i = 0; i < n; i++)
		if (r[i].lun == lun && r[i].lo <= b && b <= r[i].hi)
			return true;
	return false;
}

/*
 * Random notes (writes, invalidations up to the top block, a LUN added),
 * syncs whose copy is coarsened to a few ranges, and notes between a
 * snapshot and its mark. Checked against a model of the superblock: every
 * copy covers the one before (a torn write leaves either), a write that
 * needs no sync lies in the last durable copy, and the RAM filter holds
 * every block noted.
 */
static void test_lazy_durable_model(void)
{
	static uint8_t noted[RSM_LUNS][2 * RSM_DOM];
	for (unsigned seed = 1; seed <= 12; seed++) {
		struct hl_cache_core *c = mk(4 * M, 4096, 0);
		struct hl_cache_rs_range *d = NULL, *pr = NULL;
		uint32_t dn = 0, pn = 0, maxr = 3 + 5 * (seed % 5);
		bool d_all = false, p_all = false, pending = false;
		uint64_t pgen = 0;
		unsigned x = seed * 2654435761u, bad_cover = 0, bad_pass = 0, bad_grow = 0;
		/* writes waiting for a sync (the engine's meta_wait), and those the sync took */
		struct {
			uint16_t lun;
			uint32_t i0, n;
		} wait[4000], took[4000];
		unsigned nwait = 0, ntook = 0, released = 0;

		for (uint16_t l = 1; l < RSM_LUNS; l++)
			CU_ASSERT_FATAL(hl_cache_core_lun_add(c, l, 0) == 0);
		memset(noted, 0, sizeof(noted));
		hl_cache_core_restore_begin(c);
		for (int step = 0; step < 4000; step++) {
			x = x * 1103515245u + 12345u;
			unsigned op = (x >> 16) % 100;
			uint16_t lun = (uint16_t)((x >> 8) % RSM_LUNS);
			x = x * 1103515245u + 12345u;
			uint32_t i0 = (x >> 8) % ((x >> 28) ? RSM_DOM : 2 * RSM_DOM), n = 1 + (x >> 4) % 6;
			if (i0 + n > 2 * RSM_DOM || (i0 < RSM_DOM && i0 + n > RSM_DOM))
				n = 1;
			uint64_t b0 = rsm_block(i0);
			if (op < 60) {
				/* a write or an invalidation: noted, then asked */
				int irc = op < 30 ? hl_cache_core_invalidate(c, lun, b0 * 4096, n * 4096ull)
				                  : hl_cache_core_invalidate(c, lun, b0 * 4096 + 512,
				                                             n * 4096ull - 1024);
				CU_ASSERT_EQUAL(irc, 0);
				for (uint32_t i = i0; i < i0 + n; i++)
					noted[lun][i] = 1;
				if (!hl_cache_core_write_needs_sync(c, lun, b0 * 4096, n * 4096ull))
					for (uint32_t i = i0; i < i0 + n; i++)
						bad_pass += !rsm_in(d, dn, d_all, lun, rsm_block(i));
				else
					wait[nwait].lun = lun, wait[nwait].i0 = i0, wait[nwait++].n = n;
			} else if (op < 70) {
				/* a write asked before it is noted */
				if (!hl_cache_core_write_needs_sync(c, lun, b0 * 4096, n * 4096ull))
					for (uint32_t i = i0; i < i0 + n; i++)
						bad_pass += !rsm_in(d, dn, d_all, lun, rsm_block(i));
			} else if (op < 80 && !pending) {
				/* a sync takes the writes waiting; its mark comes later, maybe after more notes */
				memcpy(took, wait, nwait * sizeof(wait[0]));
				ntook = nwait;
				nwait = 0;
				if (!hl_cache_core_restore_need_mark(c)) {
					/* nothing to mark: its writes go on to the origin now */
					for (unsigned w = 0; w < ntook; w++, released++)
						for (uint32_t i = took[w].i0; i < took[w].i0 + took[w].n; i++)
							bad_pass += !rsm_in(d, dn, d_all, took[w].lun, rsm_block(i));
					ntook = 0;
					continue;
				}
				hl_cache_core_restore_snapshot(c, &pr, &pn, &p_all, &pgen);
				for (uint16_t l = 0; l < RSM_LUNS; l++)
					for (uint32_t i = 0; i < 2 * RSM_DOM; i++)
						if (noted[l][i] && !rsm_in(pr, pn, p_all, l, rsm_block(i)))
							bad_cover++;
				if (!p_all) {
					pn = hl_cache_rs_coarsen(pr, pn, maxr);
					p_all = pn == UINT32_MAX || !pn;
				}
				if (p_all)
					pn = 0;
				/* the copy about to be written covers the one on the device */
				for (uint16_t l = 0; l < RSM_LUNS; l++)
					for (uint32_t i = 0; i < 2 * RSM_DOM; i++)
						if (rsm_in(d, dn, d_all, l, rsm_block(i)) &&
						    !rsm_in(pr, pn, p_all, l, rsm_block(i)))
							bad_grow++;
				pending = true;
			} else if (op < 90 && pending) {
				/* the superblock write is durable */
				hl_cache_core_restore_marked(c, pr, pn, p_all, pgen);
				free(d);
				d = pr;
				dn = pn;
				d_all = p_all;
				pr = NULL;
				pending = false;
				/* the sync's writes go on to the origin */
				for (unsigned w = 0; w < ntook; w++, released++)
					for (uint32_t i = took[w].i0; i < took[w].i0 + took[w].n; i++)
						bad_pass += !rsm_in(d, dn, d_all, took[w].lun, rsm_block(i));
				ntook = 0;
			} else if (op == 99 && lun && seed % 2) {
				/* a LUN added while restoring: all its blocks */
				hl_cache_core_lun_remove(c, lun);
				CU_ASSERT(hl_cache_core_lun_add(c, lun, 0) == 0);
				for (uint32_t i = 0; i < 2 * RSM_DOM; i++)
					noted[lun][i] = 1;
			}
			/* The filter drops every record of a block noted. */
			for (uint16_t l = 0; l < RSM_LUNS && step % 50 == 0; l++)
				for (uint32_t i = 0; i < 2 * RSM_DOM; i++)
					if (noted[l][i] && !cache_restore_covers(c, l, rsm_block(i)))
						bad_cover++;
		}
		CU_ASSERT(released > 20);
		CU_ASSERT_EQUAL(bad_cover, 0);
		CU_ASSERT_EQUAL(bad_pass, 0);
		CU_ASSERT_EQUAL(bad_grow, 0);
		if (bad_cover || bad_pass || bad_grow)
			printf("\nseed %u max %u: %u not covered, %u passed unsynced, %u copies shrank\n",
			       seed, maxr, bad_cover, bad_pass, bad_grow);
		free(d);
		free(pr);
		hl_cache_core_restore_end(c);
		hl_cache_core_destroy(c);
	}
}

/*
 * Thousands of stale claims (a whole LUN dropped: its records still claim
 * the blocks until rewritten): a write's check finds each one by its key
 * (a counting hash, grown several times here), and loses each as its
 * record is persisted, in any order, the others still found.
 */
static void test_stale_claims_many(void)
{
	struct hl_cache_core *c = mk(64 * M, 4 * K, 0);
	const uint32_t n = 6000;
	uint64_t epoch;

	for (uint32_t s = 0; s < n; s++) {
		struct hl_cache_slot_rec rec = {.lun = 0, .block = 3ull * s + 1};
		rec.valid[0] = 1;
		CU_ASSERT_EQUAL_FATAL(hl_cache_core_slot_restore(c, s, &rec), 0);
	}
	CU_ASSERT_FALSE(hl_cache_core_write_needs_sync(c, 0, 4 * K, 4 * K));
	CU_ASSERT_EQUAL(hl_cache_core_invalidate(c, 0, 0, UINT64_MAX), 0);
	for (uint32_t s = 0; s < n; s++) {
		CU_ASSERT_TRUE(hl_cache_core_write_needs_sync(c, 0, (3ull * s + 1) * 4 * K, 4 * K));
		CU_ASSERT_FALSE(hl_cache_core_write_needs_sync(c, 0, (3ull * s + 2) * 4 * K, 4 * K));
	}
	/* Two thirds persisted (claiming nothing now), scattered. */
	epoch = hl_cache_core_meta_epoch(c) + 1;
	for (uint32_t k = 0; k < n; k++) {
		uint32_t s = (uint32_t)((uint64_t)k * 7919 % n);
		if (s % 3)
			hl_cache_core_slot_persisted(c, s, false, epoch);
	}
	for (uint32_t s = 0; s < n; s++)
		CU_ASSERT_EQUAL(hl_cache_core_write_needs_sync(c, 0, (3ull * s + 1) * 4 * K, 4 * K),
		                s % 3 == 0);
	for (uint32_t s = 0; s < n; s += 3)
		hl_cache_core_slot_persisted(c, s, false, epoch);
	for (uint32_t s = 0; s < n; s++)
		CU_ASSERT_FALSE(hl_cache_core_write_needs_sync(c, 0, (3ull * s + 1) * 4 * K, 4 * K));
	hl_cache_core_destroy(c);
}

/*
 * The stale claims by slot (issue 25): a record persisted at a snapshot's
 * epoch voids exactly its slot's claims noted before the snapshot, and no
 * others. A model of the list beside the core, through random drops
 * (several per slot, freed entries reused), snapshots and out-of-order
 * persists: after every step each key needs a sync exactly when a live
 * claim has it, the count matches, and CLAIMS_OTHER stays on a slot
 * exactly when a claim newer than the snapshot is left. Fails on a
 * removal of the wrong slot's claim, of a newer one, or on one missed.
 */
static void stale_claims_by_slot(bool broken)
{
	struct hl_cache_core *c = mk(64 * M, 4 * K, 0);
	enum { NSLOT = 3000, NBLK = 700, MAXM = 20000 };
	static struct {
		uint32_t slot;
		uint64_t block, epoch;
	} m[MAXM];
	uint64_t nm = 0, snaps[8] = {0}, x = 0x9e3779b97f4a7c15ull;
	unsigned bad = 0, others = 0;

	for (unsigned step = 0; step < 60000 && !bad; step++) {
		if (broken && step == 10000) {
			/* As when the slot index cannot grow: it is dropped, persists scan the list. */
			free(c->sidx);
			c->sidx = NULL;
			c->sidx_cap = c->sidx_used = 0;
			c->sidx_broken = true;
		}
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		unsigned op = (unsigned)(x % 100);
		uint32_t slot = (uint32_t)((x >> 8) % (step < 20000 ? NSLOT : 40));
		if (op < 55 && nm < MAXM) {
			struct hl_cache_slot_rec rec = {.lun = 0, .block = (x >> 24) % NBLK};
			hl_cache_core_slot_drop_claimed(c, slot, &rec);
			m[nm].slot = slot;
			m[nm].block = rec.block;
			m[nm++].epoch = hl_cache_core_meta_epoch(c);
		} else if (op < 60) {
			snaps[(x >> 40) % 8] = hl_cache_core_meta_epoch(c) + 1;
		} else {
			/* A page written at some earlier snapshot (or now) reaches the device. */
			uint64_t epoch = op < 95 ? snaps[(x >> 40) % 8] : hl_cache_core_meta_epoch(c) + 1;
			bool left = false;
			for (uint64_t i = 0; i < nm;) {
				if (m[i].slot == slot && m[i].epoch < epoch) {
					m[i] = m[--nm];
					continue;
				}
				left |= m[i].slot == slot;
				i++;
			}
			hl_cache_core_slot_persisted(c, slot, true, epoch);
			bad += !(c->meta[slot] & CACHE_M_CLAIMS_OTHER) != !left;
			others += left;
		}
		bad += c->nstale != nm;
		if (step % 500 == 0 || bad) {
			static bool want[NBLK];
			memset(want, 0, sizeof(want));
			for (uint64_t i = 0; i < nm; i++)
				want[m[i].block] = true;
			for (uint64_t b = 0; b < NBLK; b++)
				bad += hl_cache_core_write_needs_sync(c, 0, b * 4 * K, 4 * K) != want[b];
		}
	}
	CU_ASSERT_EQUAL(bad, 0);
	CU_ASSERT(others > 100); /* newer claims were kept, not only old ones dropped */
	/* Everything persisted now: nothing left, the list starts over. */
	for (uint32_t s = 0; s < NSLOT; s++)
		hl_cache_core_slot_persisted(c, s, false, hl_cache_core_meta_epoch(c) + 1);
	CU_ASSERT_EQUAL(c->nstale, 0);
	CU_ASSERT_EQUAL(c->stale_end, 0);
	CU_ASSERT_EQUAL(c->sidx_used, 0);
	CU_ASSERT_FALSE(c->sidx_broken); /* empty: the index starts over */
	for (uint64_t b = 0; b < NBLK; b++)
		CU_ASSERT_FALSE(hl_cache_core_write_needs_sync(c, 0, b * 4 * K, 4 * K));
	/* ... and works again. */
	struct hl_cache_slot_rec rec = {.lun = 0, .block = 3};
	hl_cache_core_slot_drop_claimed(c, 9, &rec);
	CU_ASSERT_EQUAL(c->sidx_used, 1);
	CU_ASSERT_TRUE(hl_cache_core_write_needs_sync(c, 0, 3 * 4 * K, 4 * K));
	hl_cache_core_slot_persisted(c, 9, false, hl_cache_core_meta_epoch(c) + 1);
	CU_ASSERT_FALSE(hl_cache_core_write_needs_sync(c, 0, 3 * 4 * K, 4 * K));
	hl_cache_core_destroy(c);
}

/* A sync as cache_meta.c runs it, every page written: @return the slots it persisted. */
static uint32_t sync_all(struct hl_cache_core *c, uint64_t *epoch, uint32_t *slots, uint32_t max)
{
	uint64_t cursor = 0;
	uint32_t n = 0, s;

	*epoch = hl_cache_core_meta_epoch(c) + 1;
	while ((s = hl_cache_core_next_dirty(c, &cursor)) != HL_CACHE_NO_SLOT)
		if (n < max)
			slots[n++] = s;
	return n;
}

/*
 * Stale claims that could not be tracked (the list's realloc failed) make
 * every write sync, but only until a sync snapshotted after the last of
 * them made every dirty record durable (issue 25 follow-up). An untracked
 * claim noted while a sync's writes are in flight keeps the state (and the
 * slot's CLAIMS_OTHER) until the next sync. Fails when the state is never
 * cleared, or cleared by a sync that may not have rewritten the record.
 */
static void test_stale_overflow_recovers(void)
{
	struct hl_cache_core *c = mk(64 * M, 4 * K, 0);
	static uint32_t slots[4096];
	uint64_t e1, e2;
	uint32_t n;

	hl_cache_core_test_stale_limit(c, 256); /* the list cannot grow past 256 entries */
	for (uint32_t s = 0; s < 300; s++) {
		struct hl_cache_slot_rec rec = {.lun = 0, .block = 1000 + s};
		hl_cache_core_slot_drop_claimed(c, s, &rec);
	}
	CU_ASSERT_EQUAL(c->nstale, 256);
	CU_ASSERT_TRUE(c->stale_overflow);
	/* An untracked claim may be of any block: every write syncs. */
	CU_ASSERT_TRUE(hl_cache_core_write_needs_sync(c, 0, 5 * 4 * K, 4 * K));
	CU_ASSERT_TRUE(hl_cache_core_write_needs_sync(c, 0, 1299 * 4 * K, 4 * K));

	/* Sync 1 snapshots; before its records are durable another claim cannot be tracked. */
	n = sync_all(c, &e1, slots, 4096);
	CU_ASSERT_EQUAL(n, 300);
	struct hl_cache_slot_rec late = {.lun = 0, .block = 2000};
	hl_cache_core_slot_drop_claimed(c, 400, &late);
	CU_ASSERT_EQUAL(c->nstale, 256);
	for (uint32_t i = 0; i < n; i++)
		hl_cache_core_slot_persisted(c, slots[i], slots[i] == 0, e1);
	hl_cache_core_records_durable(c, e1);
	CU_ASSERT_EQUAL(c->nstale, 0);
	/* Slot 400's claim (of block 2000, or of anything) is not rewritten yet. */
	CU_ASSERT_TRUE(c->stale_overflow);
	CU_ASSERT_TRUE(hl_cache_core_write_needs_sync(c, 0, 5 * 4 * K, 4 * K));
	CU_ASSERT_TRUE(hl_cache_core_write_needs_sync(c, 0, 2000 * 4 * K, 4 * K));
	CU_ASSERT_TRUE(c->meta[0] & CACHE_M_CLAIMS_OTHER); /* may have changed hands after e1 */

	/* Sync 2, snapshotted after every untracked claim: writes stop syncing. */
	n = sync_all(c, &e2, slots, 4096);
	CU_ASSERT_EQUAL(n, 1);
	CU_ASSERT_EQUAL(slots[0], 400);
	hl_cache_core_slot_persisted(c, 400, false, e2);
	hl_cache_core_slot_persisted(c, 0, true, e2);
	CU_ASSERT_FALSE(c->meta[0] & CACHE_M_CLAIMS_OTHER);
	hl_cache_core_records_durable(c, e1); /* an older snapshot's: no */
	CU_ASSERT_TRUE(c->stale_overflow);
	hl_cache_core_records_durable(c, e2);
	CU_ASSERT_FALSE(c->stale_overflow);
	for (uint64_t b = 0; b < 2100; b += 7)
		CU_ASSERT_FALSE(hl_cache_core_write_needs_sync(c, 0, b * 4 * K, 4 * K));
	CU_ASSERT_FALSE(hl_cache_core_write_needs_sync(c, 0, 2000 * 4 * K, 4 * K));

	/* Tracked again once there is room. */
	struct hl_cache_slot_rec again = {.lun = 0, .block = 7};
	hl_cache_core_slot_drop_claimed(c, 9, &again);
	CU_ASSERT_FALSE(c->stale_overflow);
	CU_ASSERT_TRUE(hl_cache_core_write_needs_sync(c, 0, 7 * 4 * K, 4 * K));
	CU_ASSERT_FALSE(hl_cache_core_write_needs_sync(c, 0, 8 * 4 * K, 4 * K));
	hl_cache_core_destroy(c);
}

/* The yield of an invalidation in chunks: reads the range and around it meanwhile. */
struct inval_probe {
	struct hl_cache_core *c;
	uint64_t b0, b1, nblocks; /* the range being invalidated; blocks cached before */
	uint64_t wblock;          /* written at the first yield */
	unsigned yields, served, filled, outside_hits, outside_reads;
};

static void inval_probe_yield(void *arg)
{
	struct inval_probe *p = arg;
	struct hl_cache_io ios[4];

	p->yields++;
	if (p->yields == 1) {
		/* A claim noted while the claims' tables are made ready: it must survive their swap. */
		wr(p->c, 0, p->wblock * 4 * K, 4 * K);
		CU_ASSERT_TRUE(hl_cache_core_write_needs_sync(p->c, 0, p->wblock * 4 * K, 4 * K));
	}
	for (uint64_t b = p->yields % 37; b < p->nblocks; b += 37) {
		int n = hl_cache_core_read(p->c, 0, b * 4 * K, 4 * K, ios, 4);
		CU_ASSERT_FATAL(n > 0);
		bool in = b >= p->b0 && b <= p->b1;
		for (int i = 0; i < n; i++) {
			if (ios[i].block != b)
				continue;
			if (in) {
				p->served += ios[i].kind != HL_CACHE_IO_MISS ||
				             ios[i].slot != HL_CACHE_NO_SLOT;
				p->filled += ios[i].fill_nsect != 0;
			} else {
				p->outside_reads++;
				p->outside_hits += ios[i].kind == HL_CACHE_IO_HIT;
			}
		}
		for (int i = 0; i < n; i++)
			hl_cache_core_io_end(p->c, 0, &ios[i], true);
	}
}

/*
 * A big invalidation in chunks (issue 25 follow-up): the lock may be let
 * go every few thousand slots, and meanwhile no block of the range is
 * served from the cache or filled, dropped already or not (the range is
 * marked first); blocks outside it still hit. The whole LUN (a walk of the
 * slots) and a range (a walk of the blocks). Fails when the invalidation
 * is one hold (no yield) or when the range is not marked.
 */
static void test_invalidate_in_chunks(void)
{
	const uint64_t nb = 70000; /* the claims' tables: 6 MiB, made ready in 3 steps */

	for (int whole = 0; whole < 2; whole++) {
		struct hl_cache_params prm;
		struct hl_cache_core *c = NULL;

		hl_cache_params_default(&prm);
		prm.capacity = 512 * M;
		prm.block_size = 4 * K;
		prm.window_bytes = 0;
		prm.admit = HL_ADMIT_ALWAYS;
		prm.seq_bypass = 0;
		CU_ASSERT_FATAL(hl_cache_core_create(&prm, &c) == 0);
		CU_ASSERT_FATAL(hl_cache_core_lun_add(c, 0, 0) == 0);
		struct inval_probe p = {.c = c, .nblocks = nb};

		for (uint64_t b = 0; b < nb; b++)
			rd(c, 0, b * 4 * K, 4 * K);
		CU_ASSERT_EQUAL(rd(c, 0, 5 * 4 * K, 4 * K), R_HIT);
		CU_ASSERT_EQUAL(hl_cache_core_lun_blocks(c, 0), nb);
		/* Every record claims its block (as after a sync): each drop is a stale claim. */
		for (uint32_t s = 0; s < c->nslots; s++)
			hl_cache_core_slot_claim_pending(c, s);
		p.b0 = whole ? 0 : 1000;
		p.b1 = whole ? UINT64_MAX : 59999;
		p.wblock = whole ? nb - 1 : 100;
		CU_ASSERT_EQUAL(hl_cache_core_invalidate_yield(c, 0, p.b0 * 4 * K,
		                                               whole ? UINT64_MAX
		                                                     : (p.b1 - p.b0 + 1) * 4 * K,
		                                               inval_probe_yield, &p),
		                0);
		CU_ASSERT(p.yields >= (whole ? nb : 59000) / 2048);
		CU_ASSERT_EQUAL(p.served, 0);
		CU_ASSERT_EQUAL(p.filled, 0);
		CU_ASSERT_PTR_NULL(c->inval);
		CU_ASSERT_EQUAL(hl_cache_core_lun_blocks(c, 0), whole ? 0 : nb - 59000);
		/* Every dropped block's claim is found, and the write's (noted before the swap). */
		CU_ASSERT(c->nstale >= (whole ? nb : 59000) + !whole);
		/* (the tables were made ready before the walk: it did not grow them) */
		CU_ASSERT_EQUAL(c->skey_cap, whole ? 262144 : 131072);
		CU_ASSERT(!c->skey_broken && !c->sidx_broken);
		unsigned lost = 0;
		for (uint64_t b = 0; b < nb; b++)
			lost += hl_cache_core_write_needs_sync(c, 0, b * 4 * K, 4 * K) !=
			        (whole || (b >= 1000 && b <= 59999) || b == p.wblock);
		CU_ASSERT_EQUAL(lost, 0);
		if (!whole) {
			CU_ASSERT(p.outside_reads > 100);
			CU_ASSERT_EQUAL(p.outside_hits, p.outside_reads);
		}
		/* Over: the range fills and hits again. */
		CU_ASSERT_EQUAL(rd(c, 0, 5000 * 4 * K, 4 * K), R_MISS);
		CU_ASSERT_EQUAL(rd(c, 0, 5000 * 4 * K, 4 * K), R_HIT);
		hl_cache_core_destroy(c);
	}
}

/* The yield of test_inval_chunks_no_promotion: misses of LUN 1 push window blocks out. */
struct inval_promo {
	struct hl_cache_core *c;
	uint64_t next; /* LUN 1's next block to read */
	unsigned yields, promoted0;
};

static void inval_promo_yield(void *arg)
{
	struct inval_promo *p = arg;
	struct hl_cache_io ios[16];

	p->yields++;
	for (int k = 0; k < 4; k++) {
		int n = hl_cache_core_read(p->c, 1, p->next++ * 4 * K, 4 * K, ios, 16);
		CU_ASSERT_FATAL(n > 0);
		for (int i = 0; i < n; i++) {
			p->promoted0 += ios[i].kind == HL_CACHE_IO_PROMOTE && ios[i].lun == 0;
			hl_cache_core_io_end(p->c, 1, &ios[i], true); /* the copy lands */
		}
	}
}

/*
 * A whole LUN dropped in chunks walks the slots in order, the RAM window's
 * last. Between chunks a miss of another LUN pushes a window block of the
 * LUN out: promoted, it would take an SSD slot the walk may have passed
 * already and outlive the drop (served stale after it). The range is
 * marked, so it is not promoted (window_may_promote). Fails without that
 * check: blocks of the LUN are still cached, and hit, after the drop.
 */
static void test_inval_chunks_no_promotion(void)
{
	struct hl_cache_params prm;
	struct hl_cache_core *c = NULL;
	struct inval_promo p = {.next = 0};
	unsigned hits = 0, win0 = 0;

	hl_cache_params_default(&prm);
	prm.capacity = 4 * M;
	prm.block_size = 4 * K;
	prm.window_bytes = 256 * K;
	prm.admit = HL_ADMIT_ALWAYS;
	prm.seq_bypass = 0;
	CU_ASSERT_FATAL(hl_cache_core_create(&prm, &c) == 0);
	CU_ASSERT_FATAL(hl_cache_core_lun_add(c, 0, 0) == 0);
	/* LUN 1 in a partition of its own, full: its misses go to the shared window. */
	CU_ASSERT_FATAL(hl_cache_core_lun_add(c, 1, 256 * K) == 0);
	p.c = c;
	for (; p.next < 200; p.next++)
		rd(c, 1, p.next * 4 * K, 4 * K);
	/* LUN 0 fills the rest of the SSD and the window. */
	for (uint64_t b = 0; b < 3000; b++)
		rd(c, 0, b * 4 * K, 4 * K);
	for (uint32_t s = (uint32_t)c->nslots; s < c->ntotal; s++)
		win0 += cache_is_used(c, s) && cache_key_lun(cache_slot_key(c, s)) == 0 &&
		        !cache_valid_empty(c, s);
	CU_ASSERT_FATAL(win0 > 32);
	hl_cache_core_test_inval_chunk(c, 8);
	CU_ASSERT_EQUAL(hl_cache_core_invalidate_yield(c, 0, 0, UINT64_MAX, inval_promo_yield, &p),
	                0);
	CU_ASSERT(p.yields > 100);
	CU_ASSERT_EQUAL(p.promoted0, 0);
	CU_ASSERT_EQUAL(hl_cache_core_lun_blocks(c, 0), 0);
	for (uint64_t b = 0; b < 3000; b++) {
		uint8_t v[32] = {0};
		hits += hl_cache_core_peek(c, 0, b, v) != HL_CACHE_NO_SLOT && v[0];
	}
	CU_ASSERT_EQUAL(hits, 0); /* (none would be served: the origin changed) */
	hl_cache_core_destroy(c);
}

static void test_stale_claims_by_slot(void)
{
	stale_claims_by_slot(false);
}

/* The same when the slot index could not grow (no memory) part way: the scan, then a new index. */
static void test_stale_claims_by_slot_broken(void)
{
	stale_claims_by_slot(true);
}

/*
 * Fills during a lazy restore (rule 5): without restore_hold no slot is
 * taken; with it a miss takes only a FREE slot of a page not held, never
 * evicts; a page let go by restore_known is used too; a record the loader
 * finds later for a block filled meanwhile is a duplicate (-EEXIST).
 */
static void test_restore_fills(void)
{
	struct hl_cache_core *c = mk(64 * M, 4 * K, 0);
	const uint64_t npages = 16384 / 128;
	uint64_t marks[2];
	struct hl_cache_slot_rec rec = {.lun = 0, .block = 100000};
	uint32_t s;

	CU_ASSERT_EQUAL_FATAL(hl_cache_core_set_admission(c, HL_ADMIT_ALWAYS, 0), 0);
	hl_cache_core_restore_begin(c);
	CU_ASSERT_EQUAL(rd(c, 0, 0, 4 * K), R_MISS);
	CU_ASSERT_EQUAL(rd(c, 0, 0, 4 * K), R_MISS); /* no hold: nothing filled */
	CU_ASSERT_EQUAL(hl_cache_core_peek(c, 0, 0, NULL), HL_CACHE_NO_SLOT);
	marks[0] = marks[1] = ~0ull;
	marks[100 / 64] &= ~(1ull << (100 % 64)); /* page 100 claimed nothing at the start */
	CU_ASSERT_EQUAL(hl_cache_core_restore_hold(c, marks, npages, 100), -EINVAL);
	CU_ASSERT_EQUAL_FATAL(hl_cache_core_restore_hold(c, marks, npages, 128), 0);
	for (uint64_t b = 0; b < 50; b++) {
		CU_ASSERT_EQUAL(rd(c, 0, b * 4 * K, 4 * K), R_MISS);
		s = hl_cache_core_peek(c, 0, b, NULL);
		CU_ASSERT_FATAL(s != HL_CACHE_NO_SLOT);
		CU_ASSERT_EQUAL(s / 128, 100);
		CU_ASSERT_EQUAL(rd(c, 0, b * 4 * K, 4 * K), R_HIT);
	}
	/* The loader restores page 0: a record of a block filled meanwhile is a duplicate. */
	rec.valid[0] = 1;
	CU_ASSERT_EQUAL(hl_cache_core_slot_restore(c, 5, &rec), 0);
	rec.block = 7;
	CU_ASSERT_EQUAL(hl_cache_core_slot_restore(c, 6, &rec), -EEXIST);
	hl_cache_core_restore_known(c, 0);
	/* Pages 0 and 100 fill up (255 free slots), then misses are not filled: no eviction. */
	for (uint64_t b = 50; b < 50 + 78 + 127; b++) {
		CU_ASSERT_EQUAL(rd(c, 0, b * 4 * K, 4 * K), R_MISS);
		s = hl_cache_core_peek(c, 0, b, NULL);
		CU_ASSERT_FATAL(s != HL_CACHE_NO_SLOT);
		CU_ASSERT(s / 128 == 0 || s / 128 == 100);
	}
	CU_ASSERT_EQUAL(rd(c, 0, 5000 * 4 * K, 4 * K), R_MISS);
	CU_ASSERT_EQUAL(rd(c, 0, 5000 * 4 * K, 4 * K), R_MISS);
	CU_ASSERT_EQUAL(hl_cache_core_peek(c, 0, 5000, NULL), HL_CACHE_NO_SLOT);
	CU_ASSERT_EQUAL(rd(c, 0, 100000 * 4 * K, 4 * K), R_HIT); /* the restored block */
	/* A sequential stream is not filled while restoring. */
	hl_cache_core_restore_known(c, 1);
	CU_ASSERT_EQUAL(rd(c, 0, 8000 * 4 * K, 2 * M), R_MISS);
	CU_ASSERT_EQUAL(hl_cache_core_peek(c, 0, 8000, NULL), HL_CACHE_NO_SLOT);
	CU_ASSERT_EQUAL(rd(c, 0, 9000 * 4 * K, 4 * K), R_MISS);
	CU_ASSERT_EQUAL(hl_cache_core_peek(c, 0, 9000, NULL) / 128, 1);
	hl_cache_core_restore_end(c);
	CU_ASSERT_EQUAL(rd(c, 0, 5000 * 4 * K, 4 * K), R_MISS);
	CU_ASSERT_NOT_EQUAL(hl_cache_core_peek(c, 0, 5000, NULL), HL_CACHE_NO_SLOT);
	hl_cache_core_destroy(c);
}

/*
 * 256 LUNs per cache (the stored key's LUN index); a removed LUN's index
 * is not given to another while a slot still carries it, so a pinned
 * slot's key keeps its LUN.
 */
static void test_key_lun_index(void)
{
	struct hl_cache_core *c = mk(4 * M, 4 * K, 0);
	struct hl_cache_io ios[4];
	uint8_t kix;
	uint32_t s;
	int n;

	for (uint32_t lun = 1; lun < CACHE_KEY_LUNS; lun++)
		CU_ASSERT_EQUAL_FATAL(hl_cache_core_lun_add(c, (uint16_t)(lun * 200), 0), 0);
	CU_ASSERT_EQUAL(hl_cache_core_lun_add(c, 7, 0), -EMFILE);
	CU_ASSERT_EQUAL(hl_cache_core_lun_remove(c, 400), 0);
	/* A fill in flight on LUN 600 keeps its slot pinned through the LUN's removal. */
	n = hl_cache_core_read(c, 600, 5 * 4 * K, 4 * K, ios, 4);
	CU_ASSERT_FATAL(n == 1 && ios[0].slot != HL_CACHE_NO_SLOT);
	s = ios[0].slot;
	kix = c->luns[600]->kix;
	CU_ASSERT_EQUAL(hl_cache_core_lun_remove(c, 600), 0);
	CU_ASSERT_EQUAL(cache_slot_key(c, s), cache_key(600, 5));
	CU_ASSERT_EQUAL(hl_cache_core_lun_add(c, 7, 0), 0);       /* 400's index */
	CU_ASSERT_EQUAL(hl_cache_core_lun_add(c, 8, 0), -EMFILE); /* 600's is still carried */
	CU_ASSERT_NOT_EQUAL(c->luns[7]->kix, kix);
	CU_ASSERT_EQUAL(cache_slot_key(c, s), cache_key(600, 5));
	CU_ASSERT_EQUAL(hl_cache_core_peek(c, 7, 5, NULL), HL_CACHE_NO_SLOT);
	hl_cache_core_io_end(c, 600, &ios[0], true);
	if (cache_state(c, s) == CACHE_SLOT_FREE) {
		CU_ASSERT_EQUAL(hl_cache_core_lun_add(c, 8, 0), 0);
		CU_ASSERT_EQUAL(c->luns[8]->kix, kix);
	}
	hl_cache_core_destroy(c);
}

/* Blocks of each LUN, counted as slots come and go, against a walk of every slot. */
static void test_lun_blocks_counts(void)
{
	struct hl_cache_core *c = mk(4 * M, 4 * K, 256 * 4 * K);
	uint64_t seed = 12345, walk[3] = {0};

	CU_ASSERT_FATAL(hl_cache_core_lun_add(c, 1, 0) == 0);
	CU_ASSERT_FATAL(hl_cache_core_lun_add(c, 2, 1 * M) == 0);
	for (int i = 0; i < 20000; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		uint16_t lun = (uint16_t)((seed >> 33) % 3);
		uint64_t blk = (seed >> 40) % 3000;
		switch ((seed >> 20) % 8) {
		case 0:
			wr(c, lun, blk * 4 * K, 4 * K);
			break;
		case 1:
			hl_cache_core_invalidate(c, lun, blk * 4 * K, 64 * K);
			break;
		default:
			rd(c, lun, blk * 4 * K, (1 + (seed >> 50) % 4) * 4 * K);
		}
	}
	for (uint64_t s = 0; s < c->ntotal; s++)
		if (cache_is_used(c, (uint32_t)s))
			walk[cache_key_lun(cache_slot_key(c, (uint32_t)s))]++;
	for (uint16_t lun = 0; lun < 3; lun++) {
		CU_ASSERT_EQUAL(hl_cache_core_lun_blocks(c, lun), walk[lun]);
		CU_ASSERT(walk[lun] > 0);
	}
	/* Nothing is left busy or partly valid once every io ended (4K blocks: never partial). */
	CU_ASSERT_EQUAL(c->busy.n, 0);
	CU_ASSERT_EQUAL(c->partial.n, 0);
	hl_cache_core_destroy(c);
}

/*
 * Partly valid slots keep their bits in the side table, full and empty ones
 * none; with no room for an entry, a slot that would become partly valid
 * holds nothing instead, and its claim is treated as stale.
 */
static void test_partial_valid_table(void)
{
	struct hl_cache_core *c = mk(4 * M, 64 * K, 0);
	struct hl_cache_io ios[4];
	uint8_t v[32];
	uint32_t s;
	int n;

	CU_ASSERT_FATAL(hl_cache_core_set_write_mode(c, HL_CACHE_WRITE_INVALIDATE) == 0);
	rd(c, 0, 0, 64 * K);
	rd(c, 0, 64 * K, 64 * K);
	s = hl_cache_core_peek(c, 0, 0, v);
	CU_ASSERT_FATAL(s != HL_CACHE_NO_SLOT);
	CU_ASSERT_TRUE(cache_valid_full(c, s));
	CU_ASSERT_EQUAL(c->partial.n, 0);
	wr(c, 0, 8 * K, 4 * K); /* sector 2 of block 0 */
	hl_cache_core_peek(c, 0, 0, v);
	CU_ASSERT_EQUAL(v[0], 0xfb);
	CU_ASSERT_EQUAL(v[1], 0xff);
	CU_ASSERT_EQUAL(c->partial.n, 1);
	CU_ASSERT_FALSE(cache_valid_full(c, s));
	CU_ASSERT_EQUAL(rd(c, 0, 0, 64 * K), R_PARTIAL);
	CU_ASSERT_EQUAL(c->partial.n, 0); /* filled again: full */
	CU_ASSERT_TRUE(cache_valid_full(c, s));

	/* No room for another partly valid slot: block 1 keeps nothing, its claim goes stale. */
	wr(c, 0, 0, 4 * K);
	CU_ASSERT_EQUAL(c->partial.n, 1);
	c->partial.limit = 1;
	s = hl_cache_core_peek(c, 0, 1, NULL);
	hl_cache_core_slot_claim_pending(c, s); /* as if a sync had written its record */
	CU_ASSERT_FALSE(hl_cache_core_write_needs_sync(c, 0, 64 * K + 16 * K, 4 * K));
	n = hl_cache_core_write_begin(c, 0, 64 * K, 4 * K, ios, 4);
	CU_ASSERT_EQUAL_FATAL(n, 1);
	CU_ASSERT_TRUE(ios[0].meta_barrier);
	hl_cache_core_write_end(c, 0, &ios[0], true);
	CU_ASSERT_EQUAL(hl_cache_core_peek(c, 0, 1, v), HL_CACHE_NO_SLOT); /* emptied, released */
	CU_ASSERT_EQUAL(v[0] | v[1], 0);
	/* Its other sectors were claimed on the device: a write to them syncs first. */
	CU_ASSERT_TRUE(hl_cache_core_write_needs_sync(c, 0, 64 * K + 16 * K, 4 * K));
	c->partial.limit = 0;
	hl_cache_core_destroy(c);
}

/* With no room to count one more busy slot, the origin serves the block; nothing leaks. */
static void test_busy_table_full(void)
{
	struct hl_cache_core *c = mk(4 * M, 4 * K, 0);
	struct hl_cache_io ios[64];
	struct hl_cache_core_info info;
	int n, pinned = 0;

	for (uint64_t b = 0; b < 32; b++)
		rd(c, 0, b * 4 * K, 4 * K);
	CU_ASSERT_EQUAL(c->busy.n, 0);
	c->busy.limit = 5;
	n = hl_cache_core_read(c, 0, 0, 64 * 4 * K, ios, 64);
	CU_ASSERT_EQUAL_FATAL(n, 64);
	for (int i = 0; i < n; i++)
		pinned += ios[i].pinned;
	CU_ASSERT_EQUAL(pinned, 5);
	CU_ASSERT_EQUAL(c->busy.n, 5);
	for (int i = 0; i < n; i++) {
		if (ios[i].slot == HL_CACHE_NO_SLOT)
			CU_ASSERT_EQUAL(ios[i].kind, HL_CACHE_IO_MISS);
		hl_cache_core_io_end(c, 0, &ios[i], true);
	}
	CU_ASSERT_EQUAL(c->busy.n, 0);
	/* A write it cannot count as a writer still stops the block being served. */
	n = hl_cache_core_read(c, 0, 0, 5 * 4 * K, ios, 64);
	CU_ASSERT_EQUAL_FATAL(n, 5);
	struct hl_cache_io w[1];
	CU_ASSERT_EQUAL(hl_cache_core_write_begin(c, 0, 10 * 4 * K, 4 * K, w, 1), 1);
	CU_ASSERT_EQUAL(w[0].slot, HL_CACHE_NO_SLOT);
	uint8_t v[32];
	hl_cache_core_peek(c, 0, 10, v);
	CU_ASSERT_EQUAL(v[0], 0); /* (the empty slot goes at its next CLOCK visit) */
	hl_cache_core_write_end(c, 0, &w[0], true);
	for (int i = 0; i < n; i++)
		hl_cache_core_io_end(c, 0, &ios[i], true);
	c->busy.limit = 0;
	CU_ASSERT_EQUAL(rd(c, 0, 0, 4 * K), R_HIT);
	CU_ASSERT_EQUAL(rd(c, 0, 10 * 4 * K, 4 * K), R_MISS);
	CU_ASSERT_EQUAL(c->busy.n, 0);
	hl_cache_core_info(c, &info);
	CU_ASSERT_EQUAL(info.used_slots, 32);
	hl_cache_core_destroy(c);
}

/* The dirty walk finds every marked slot once, across groups it skips whole. */
static void test_dirty_walk(void)
{
	struct hl_cache_core *c = mk(256 * M, 4 * K, 0); /* 64 Ki slots: 16 groups */
	uint64_t cursor = 0, seed = 99, marked = 0, found = 0;
	uint8_t *want = calloc(c->nslots, 1);
	uint32_t s;

	CU_ASSERT_FATAL(want != NULL);
	while ((s = hl_cache_core_next_dirty(c, &cursor)) != HL_CACHE_NO_SLOT)
		; /* nothing yet */
	for (int i = 0; i < 300; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		s = (uint32_t)((seed >> 33) % (i < 200 ? 4096 * 3 : c->nslots));
		marked += !want[s];
		want[s] = 1;
		hl_cache_core_slot_set_dirty(c, s);
	}
	hl_cache_core_slot_set_dirty(c, (uint32_t)c->nslots - 1);
	marked += !want[c->nslots - 1];
	want[c->nslots - 1] = 1;
	cursor = 0;
	while ((s = hl_cache_core_next_dirty(c, &cursor)) != HL_CACHE_NO_SLOT) {
		CU_ASSERT_TRUE(want[s]);
		want[s] = 0;
		found++;
	}
	CU_ASSERT_EQUAL(found, marked);
	/* A group whose last mark ended a walk is found clean by the next one. */
	cursor = 0;
	CU_ASSERT_EQUAL(hl_cache_core_next_dirty(c, &cursor), HL_CACHE_NO_SLOT);
	for (uint64_t g = 0; g < HL_DIV_ROUND_UP(c->nslots, 4096); g++) {
		if (cache_bit_test(c->dirtygrp, g))
			fprintf(stderr, "group %llu still marked\n", (unsigned long long)g);
		CU_ASSERT_FALSE(cache_bit_test(c->dirtygrp, g)); /* walked clean */
	}
	free(want);
	hl_cache_core_destroy(c);
}

/* The automatic window's size: 1% of the cache within [16 MiB, 64 MiB], and >= 256 blocks. */
static void test_window_auto_size(void)
{
	static const struct {
		uint64_t cap;
		uint32_t bs;
		uint64_t want; /* window slots */
	} t[] = {
	    {1ull << 30, 4 * K, 4096},           /* 16 MiB floor: 4096 blocks of 4K */
	    {1ull << 30, 64 * K, 256},           /* 16 MiB = 256 blocks of 64K */
	    {1ull << 30, 256 * K, 256},          /* 256 blocks = 64 MiB, not 64 */
	    {1ull << 30, 1024 * K, 64},          /* 256 blocks capped at 64 MiB */
	    {16ull << 30, 64 * K, 1024},         /* 1% of 16 GiB capped at 64 MiB */
	    {(uint64_t)3200 * M, 4 * K, 8192},   /* 1% = 32 MiB between the bounds */
	};
	struct hl_cache_core_info info;

	for (size_t i = 0; i < HL_ARRAY_SIZE(t); i++) {
		struct hl_cache_core *c = mk(t[i].cap, t[i].bs, HL_CACHE_WINDOW_AUTO);
		hl_cache_core_info(c, &info);
		CU_ASSERT_EQUAL(info.window_slots, t[i].want);
		hl_cache_core_destroy(c);
	}
}

static void test_seq_bypass(void)
{
	struct hl_cache_core *c = mk(64 * M, 64 * K, 0);
	struct hl_cache_stats st;

	/* 2 MiB stream in 64K requests: the part after 1 MiB is not admitted. */
	for (int i = 0; i < 32; i++)
		rd(c, 0, (uint64_t)i * 64 * K, 64 * K);
	hl_cache_core_stats(c, -1, &st);
	CU_ASSERT_EQUAL(st.read_bypass, 16);
	CU_ASSERT_EQUAL(st.admissions, 16);
	CU_ASSERT_NOT_EQUAL(hl_cache_core_peek(c, 0, 15, NULL), HL_CACHE_NO_SLOT);
	CU_ASSERT_EQUAL(hl_cache_core_peek(c, 0, 16, NULL), HL_CACHE_NO_SLOT);
	hl_cache_core_destroy(c);
}

/*
 * Rule 10's scenario: a full 16-slot SSD, then a sequential stream of 40
 * blocks (the part past 1 MiB bypasses: the window holds it, never the
 * SSD), pushed out of the window, and read again. @return how many of the
 * bypassed blocks the SSD holds after the second read (promoted from the
 * window on their way out). *ratio: the info's write_ratio before it.
 */
static int budget_run(uint32_t pct, enum hl_admit_kind kind, uint32_t param, uint32_t misses,
                      double *ratio, struct hl_cache_stats *st, bool close_then, int *tail)
{
	struct hl_cache_core *c = mk(16 * 64 * K, 64 * K, 4 * 64 * K);
	struct hl_cache_core_info info;
	int in_ssd = 0;

	CU_ASSERT_EQUAL(hl_cache_core_set_admission(c, kind, param), 0);
	CU_ASSERT_EQUAL(hl_cache_core_set_write_budget(c, pct), 0);
	for (int b = 0; b < 16; b++)
		rd(c, 0, (uint64_t)b * 3 * 64 * K, 64 * K); /* warm-up: 16 blocks written */
	for (uint32_t i = 0; i < misses; i++) /* misses the window serves: nothing written */
		rd(c, 0, (uint64_t)(5000 + 3 * i) * 64 * K, 64 * K);
	for (int b = 1000; b < 1040; b++)
		rd(c, 0, (uint64_t)b * 64 * K, 64 * K);
	for (int b = 3000; b < 3030; b += 3) /* out of the window */
		rd(c, 0, (uint64_t)b * 64 * K, 64 * K);
	hl_cache_core_info(c, &info);
	*ratio = info.write_ratio;
	for (int b = 1000; b < 1040; b++)
		rd(c, 0, (uint64_t)b * 64 * K, 64 * K);
	if (close_then) /* the last four stream blocks are in the window now */
		CU_ASSERT_EQUAL(hl_cache_core_set_write_budget(c, 0), 0);
	for (int b = 4000; b < 4030; b += 3)
		rd(c, 0, (uint64_t)b * 64 * K, 64 * K);
	for (int b = 1016; b < 1040; b++)
		in_ssd += hl_cache_core_peek(c, 0, (uint64_t)b, NULL) < 16;
	*tail = 0;
	for (int b = 1036; b < 1040; b++)
		*tail += hl_cache_core_peek(c, 0, (uint64_t)b, NULL) < 16;
	hl_cache_core_stats(c, -1, st);
	/* 16 x 64 KiB, 8 x over: the admit-all sum has halved, and stays below 8 cache sizes */
	CU_ASSERT(c->budget.admit_all <= 8.0 * 16 * 64 * K + 64 * K);
	hl_cache_core_destroy(c);
	return in_ssd;
}

static int budget_case(uint32_t pct, uint32_t misses, double *ratio)
{
	struct hl_cache_stats st;
	int tail;

	return budget_run(pct, HL_ADMIT_FREQ, 0, misses, ratio, &st, false, &tail);
}

/*
 * Rule 10: while the cache device has written less than its budget's share
 * of what an admit-all cache would have, a re-read sequential stream earns
 * the SSD like a block back from the ghost; over the budget, or with the
 * budget 0, it never does (the stream stays bypassed).
 */
static void test_write_budget(void)
{
	struct hl_cache_core *c = mk(16 * 64 * K, 64 * K, 4 * 64 * K);
	double ratio;

	CU_ASSERT_EQUAL(hl_cache_core_set_write_budget(c, 101), -EINVAL);
	hl_cache_core_destroy(c);
	/*
	 * 16 blocks written for 16 + 90 + 40 + 10 blocks missed, the sums
	 * halved once (at 129 missed): 8 / 91.5 = 0.087, every read a miss.
	 * (Before issue 25 item 4 resized the ghosts this run gave 0.09-0.11.)
	 */
	CU_ASSERT(budget_case(25, 90, &ratio) > 0);
	CU_ASSERT(ratio > 0.086 && ratio < 0.089);
	CU_ASSERT_EQUAL(budget_case(0, 90, &ratio), 0);
	CU_ASSERT_EQUAL(budget_case(5, 90, &ratio), 0); /* over a 5% budget */
	/* 16 written for 16 + 40 + 10 missed: 0.24 */
	CU_ASSERT(budget_case(50, 0, &ratio) > 0);
	CU_ASSERT(ratio > 0.23 && ratio < 0.25);
	/*
	 * 266 blocks missed, 16 written at the start: the sums halved three
	 * times (at 129, 193 and 257 missed), so the warm-up's writes weigh
	 * less: 2 / 73.1 blocks, not the lifetime 16 / 266. Also at budget 0.
	 */
	CU_ASSERT_EQUAL(budget_case(0, 200, &ratio), 0);
	CU_ASSERT(ratio > 0.026 && ratio < 0.029);
	/* Rule 10 is frequency admission's: always and nhit:N do the same at any budget. */
	for (int k = 0; k < 2; k++) {
		struct hl_cache_stats a, b;
		enum hl_admit_kind kind = k ? HL_ADMIT_NHIT : HL_ADMIT_ALWAYS;

		int tail;

		budget_run(0, kind, 3, 90, &ratio, &a, false, &tail);
		budget_run(100, kind, 3, 90, &ratio, &b, false, &tail);
		CU_ASSERT_EQUAL(a.admissions, b.admissions);
		CU_ASSERT_EQUAL(a.read_hits, b.read_hits);
		CU_ASSERT_EQUAL(a.bytes_cache_write, b.bytes_cache_write);
	}
	/*
	 * A stream block let in while the budget was open is promoted only if
	 * it still is when the block leaves the window: the last four, in the
	 * window when the budget drops to 0, stay out of the SSD.
	 */
	{
		struct hl_cache_stats st;
		int open_tail, closed_tail;

		/* (at 50% and no extra misses the budget stays open to the end) */
		CU_ASSERT(budget_run(50, HL_ADMIT_FREQ, 0, 0, &ratio, &st, false, &open_tail) > 0);
		CU_ASSERT(open_tail > 0);
		budget_run(50, HL_ADMIT_FREQ, 0, 0, &ratio, &st, true, &closed_tail);
		CU_ASSERT_EQUAL(closed_tail, 0);
	}
}

/* A write and the update buffer's write-backs it makes due. @return write-backs done. */
static int wr_ub(struct hl_cache_core *c, uint64_t off, uint64_t len, bool wb_ok)
{
	struct hl_cache_io io;
	uint16_t lun;
	int k = 0;

	wr(c, 0, off, len);
	while (hl_cache_core_ub_writeback(c, &lun, &io)) {
		CU_ASSERT_EQUAL(io.kind, HL_CACHE_IO_UPDATE);
		CU_ASSERT_EQUAL(io.src_slot, HL_CACHE_IO_UB_SRC);
		CU_ASSERT_EQUAL(io.ram, 0);
		hl_cache_core_io_end(c, lun, &io, wb_ok);
		k++;
	}
	return k;
}

/*
 * Rule 10's ratio counts an update once: pending in the update buffer, then
 * written back to the device (a planned write-back is not counted twice or
 * lost before it completes).
 */
static void test_write_ratio_update_buffer(void)
{
	struct hl_cache_core *c = mk(16 * 64 * K, 64 * K, 0);
	struct hl_cache_core_info info;

	CU_ASSERT_EQUAL(rd(c, 0, 0, 64 * K), R_MISS); /* filled: 64K written for 64K missed */
	CU_ASSERT_EQUAL(hl_cache_core_set_update_buffer(c, 8 * K), 0);
	hl_cache_core_info(c, &info);
	CU_ASSERT_DOUBLE_EQUAL(info.write_ratio, 1.0, 1e-9);
	CU_ASSERT_EQUAL(wr_ub(c, 0, 8 * K, true), 0); /* pending, not over the limit */
	hl_cache_core_info(c, &info);
	CU_ASSERT_DOUBLE_EQUAL(info.write_ratio, 72.0 / 64, 1e-9);
	CU_ASSERT(wr_ub(c, 16 * K, 4 * K, true) > 0); /* over it: a run written back */
	CU_ASSERT(c->ub.bytes < 12 * K);
	hl_cache_core_info(c, &info);
	CU_ASSERT_DOUBLE_EQUAL(info.write_ratio, 76.0 / 64, 1e-9); /* 12K: written + pending */
	hl_cache_core_destroy(c);
}

static void test_update_buffer(void)
{
	struct hl_cache_core *c = mk(16 * 64 * K, 64 * K, 0);
	struct hl_cache_stats st;
	struct hl_cache_slot_rec rec;
	struct hl_cache_io ios[4];
	uint32_t s;
	uint64_t w0;
	int n;

	CU_ASSERT_EQUAL(rd(c, 0, 0, 64 * K), R_MISS); /* free space: filled on the SSD */
	s = hl_cache_core_peek(c, 0, 0, NULL);
	CU_ASSERT_FATAL(s != HL_CACHE_NO_SLOT);
	CU_ASSERT_EQUAL(hl_cache_core_set_update_buffer(c, 8 * K), 0);
	hl_cache_core_stats(c, -1, &st);
	w0 = st.bytes_cache_write;

	/* An update of a cached block goes to RAM: no device write, still served. */
	n = hl_cache_core_write_begin(c, 0, 0, 4 * K, ios, 4);
	CU_ASSERT_EQUAL_FATAL(n, 1);
	CU_ASSERT_EQUAL(ios[0].src_slot, HL_CACHE_IO_UB_SRC);
	CU_ASSERT_EQUAL(ios[0].ram, 1);
	hl_cache_core_write_end(c, 0, &ios[0], true);
	hl_cache_core_io_end(c, 0, &ios[0], true);
	CU_ASSERT_EQUAL(hl_cache_core_ub_pending(c, s, NULL), 4 * K);
	CU_ASSERT_EQUAL(rd(c, 0, 0, 8 * K), R_HIT);
	/* The on-device record never claims a sector whose data is only in RAM. */
	CU_ASSERT_TRUE(hl_cache_core_slot_get(c, s, &rec));
	CU_ASSERT_EQUAL(rec.valid[0] & 1, 0);
	CU_ASSERT_EQUAL(rec.valid[0] & 2, 2);

	/* Repeated writes of the same sector coalesce. */
	CU_ASSERT_EQUAL(wr_ub(c, 0, 4 * K, true), 0);
	CU_ASSERT_EQUAL(wr_ub(c, 0, 4 * K, true), 0);
	CU_ASSERT_EQUAL(hl_cache_core_ub_pending(c, s, NULL), 4 * K);
	hl_cache_core_stats(c, -1, &st);
	CU_ASSERT_EQUAL(st.bytes_cache_write, w0);

	/* Over the limit: the oldest block is written back once, as one run. */
	CU_ASSERT_EQUAL(wr_ub(c, 4 * K, 8 * K, true), 1);
	CU_ASSERT_EQUAL(hl_cache_core_ub_pending(c, s, NULL), 0);
	hl_cache_core_stats(c, -1, &st);
	CU_ASSERT_EQUAL(st.bytes_cache_write, w0 + 12 * K);
	CU_ASSERT_TRUE(hl_cache_core_slot_get(c, s, &rec));
	CU_ASSERT_EQUAL(rec.valid[0] & 7, 7);
	CU_ASSERT_EQUAL(rd(c, 0, 0, 64 * K), R_HIT);

	/* A write-back that fails leaves its sectors invalid (never stale). */
	CU_ASSERT_EQUAL(wr_ub(c, 20 * K, 4 * K, false), 0);
	CU_ASSERT_EQUAL(wr_ub(c, 28 * K, 8 * K, false), 1);
	CU_ASSERT_EQUAL(rd(c, 0, 20 * K, 4 * K), R_MISS);
	CU_ASSERT_EQUAL(rd(c, 0, 28 * K, 8 * K), R_HIT);

	/* Invalidated or evicted: the buffered update is dropped, not written. */
	CU_ASSERT_EQUAL(hl_cache_core_ub_pending(c, s, NULL), 8 * K);
	CU_ASSERT_EQUAL(hl_cache_core_invalidate(c, 0, 28 * K, 4 * K), 0);
	CU_ASSERT_EQUAL(hl_cache_core_ub_pending(c, s, NULL), 4 * K);
	CU_ASSERT_EQUAL(hl_cache_core_invalidate(c, 0, 0, 64 * K), 0);
	CU_ASSERT_EQUAL(hl_cache_core_ub_pending(c, s, NULL), 0);
	hl_cache_core_stats(c, -1, &st);
	w0 = st.bytes_cache_write;
	for (int i = 0; i < 8; i++)
		wr_ub(c, 0, 4 * K, true);
	hl_cache_core_stats(c, -1, &st);
	CU_ASSERT_EQUAL(st.bytes_cache_write, w0); /* block 0 is no longer cached */
	CU_ASSERT_EQUAL(hl_cache_core_set_update_buffer(c, 0), 0);
	hl_cache_core_destroy(c);
}

/*
 * A block buffered, dropped by a write and buffered again, many times: its
 * old FIFO positions are stale. They once counted as live while the block
 * was buffered, so a ring full of them was compacted to itself and the
 * next block's update was refused (left invalid: a miss), after a scan of
 * the whole ring per update (hotlun-sim at 4K 25% with a 20M window and a
 * 12M buffer: 25.64% -> 7.49% hits, 1.3 M -> 0.07 M requests/s). A 64K
 * buffer has a 64-entry ring: 63 positions of block 0, then block 1 fills
 * it, and block 2's update needs a compaction.
 */
static void test_update_buffer_fifo_duplicates(void)
{
	struct hl_cache_core *c = mk(16 * 64 * K, 64 * K, 0);
	struct hl_cache_stats st;
	uint32_t s0, s2;
	uint64_t w0;

	for (int b = 0; b < 3; b++)
		CU_ASSERT_EQUAL(rd(c, 0, (uint64_t)b * 64 * K, 64 * K), R_MISS);
	s0 = hl_cache_core_peek(c, 0, 0, NULL);
	s2 = hl_cache_core_peek(c, 0, 2, NULL);
	CU_ASSERT_FATAL(s0 != HL_CACHE_NO_SLOT && s2 != HL_CACHE_NO_SLOT);
	CU_ASSERT_EQUAL(hl_cache_core_set_update_buffer(c, 64 * K), 0);
	hl_cache_core_stats(c, -1, &st);
	w0 = st.bytes_cache_write;
	/* Each write drops block 0's pending sector (write_begin) and buffers it again. */
	for (int i = 0; i < 63; i++)
		CU_ASSERT_EQUAL(wr_ub(c, 0, 4 * K, true), 0);
	CU_ASSERT_EQUAL(hl_cache_core_ub_pending(c, s0, NULL), 4 * K);
	CU_ASSERT_EQUAL(wr_ub(c, 64 * K, 4 * K, true), 0);
	CU_ASSERT_EQUAL(wr_ub(c, 128 * K, 4 * K, true), 0);
	CU_ASSERT_EQUAL(hl_cache_core_ub_pending(c, s2, NULL), 4 * K);
	CU_ASSERT_EQUAL(rd(c, 0, 128 * K, 4 * K), R_HIT);
	hl_cache_core_stats(c, -1, &st);
	CU_ASSERT_EQUAL(st.bytes_cache_write, w0); /* all coalesced: nothing written */
	/* The order survives the compaction: over the limit, block 0 is written back first. */
	CU_ASSERT_EQUAL(wr_ub(c, 132 * K, 52 * K, true), 0);
	CU_ASSERT_EQUAL(wr_ub(c, 184 * K, 4 * K, true), 1);
	CU_ASSERT_EQUAL(hl_cache_core_ub_pending(c, s0, NULL), 0);
	CU_ASSERT_EQUAL(hl_cache_core_ub_pending(c, s2, NULL), 60 * K);
	/* A clean stop drains everything, under the limit or not. */
	{
		struct hl_cache_io io;
		uint16_t lun;
		int n = 0;
		while (hl_cache_core_ub_drain(c, &lun, &io)) {
			hl_cache_core_io_end(c, lun, &io, true);
			n++;
		}
		CU_ASSERT(n >= 2);
		CU_ASSERT_EQUAL(hl_cache_core_ub_pending(c, s2, NULL), 0);
		CU_ASSERT_EQUAL(rd(c, 0, 128 * K, 64 * K), R_HIT);
	}
	hl_cache_core_destroy(c);
}

/*
 * A standby's shadow read: a missed block goes to the SSD even with a RAM
 * window and a full cache (replacing a colder victim), and nothing counts
 * as a read; the hot scan lists the LUN's blocks, hottest scoring highest.
 */
static void test_shadow_read_and_hot_scan(void)
{
	struct hl_cache_core *c = mk(4 * M, 64 * K, 1 * M); /* 64 SSD slots, a window */
	struct hl_cache_io ios[8];
	struct hl_cache_stats a, b;
	struct hl_cache_hot hot[128];
	uint64_t cur = 0;
	uint32_t n = 0, got;
	int k;

	for (uint64_t blk = 0; blk < 64; blk++) /* fill the SSD (warm-up admits directly) */
		rd(c, 0, blk * 64 * K, 4 * K);
	for (int i = 0; i < 5; i++)
		rd(c, 0, 3 * 64 * K, 4 * K); /* block 3: the hottest */
	hl_cache_core_stats(c, -1, &a);
	/* block 100: not cached; a plain read would go to the window */
	k = hl_cache_core_read_shadow(c, 0, 100 * 64 * K, 64 * K, ios, 8);
	CU_ASSERT_FATAL(k == 1);
	CU_ASSERT_EQUAL(ios[0].kind, HL_CACHE_IO_MISS);
	CU_ASSERT_NOT_EQUAL(ios[0].slot, HL_CACHE_NO_SLOT);
	CU_ASSERT_EQUAL(ios[0].ram, 0);
	CU_ASSERT(ios[0].slot < 64);
	hl_cache_core_io_end(c, 0, &ios[0], true);
	hl_cache_core_stats(c, -1, &b);
	CU_ASSERT_EQUAL(b.read_reqs, a.read_reqs);
	CU_ASSERT_EQUAL(b.bytes_read, a.bytes_read);
	CU_ASSERT_EQUAL(b.read_misses, a.read_misses);
	CU_ASSERT_NOT_EQUAL(hl_cache_core_peek(c, 0, 100, NULL), HL_CACHE_NO_SLOT);
	/* a plain read afterwards is a hit, counted */
	CU_ASSERT_EQUAL(rd(c, 0, 100 * 64 * K, 4 * K), R_HIT);
	/* the scan, a few slots per call, finds all 64 resident blocks once */
	do {
		got = hl_cache_core_hot_scan(c, 0, &cur, 5, hot + n, 128 - n);
		n += got;
	} while (cur < 64);
	CU_ASSERT_EQUAL(n, 64);
	uint32_t f3 = 0, fmax = 0;
	bool seen100 = false;
	for (uint32_t i = 0; i < n; i++) {
		if (hot[i].block == 3)
			f3 = hot[i].freq;
		if (hot[i].block == 100)
			seen100 = true;
		if (hot[i].freq > fmax)
			fmax = hot[i].freq;
	}
	CU_ASSERT(seen100);
	CU_ASSERT_EQUAL(f3, fmax);
	cur = 0;
	CU_ASSERT_EQUAL(hl_cache_core_hot_scan(c, 1, &cur, 1000, hot, 128), 0); /* other LUN */
	hl_cache_core_destroy(c);
}

static const struct hl_test tests[] = {
    {"parameter checks", test_create_params},
    {"set admission at run time", test_set_admission_at_run_time},
    {"hit, miss, partial hit and byte accounting", test_hit_miss_partial},
    {"valid bits, sub-sector writes, write-through update", test_valid_bits_and_writes},
    {"invalidate write mode", test_invalidate_mode},
    {"a fill that raced a write is dropped", test_fill_races_write},
    {"overlapping writes install nothing", test_overlapping_writes},
    {"io_start: no stale or overlapping slot data writes", test_io_start},
    {"a write in flight to an uncached block blocks its fills", test_write_to_uncached_block},
    {"range invalidation and in-flight fills", test_range_invalidate},
    {"CLOCK eviction: second chance, pinned blocks stay", test_clock_eviction},
    {"LUNs, quotas, LUN removal", test_luns_and_quota},
    {"scan resistance: hot set keeps >= 90% hits", test_scan_resistance},
    {"scan with admit-all flushes the hot set", test_scan_always_fails},
    {"RAM window and promotion to the SSD", test_window_promotion},
    {"a read of one LUN promotes another LUN's window block", test_window_promotion_other_lun},
    {"a write still beats another LUN's promotion", test_window_promotion_other_lun_raced},
    {"the RAM window's CLOCK keeps one reference bit", test_window_clock_one_bit},
    {"two returning blocks at the window's hand: what one read promotes",
     test_window_two_returning},
    {"window and update buffer share their RAM (rule 9)", test_window_buffer_split},
    {"a re-read stream earns the SSD within the write budget (rule 10)", test_write_budget},
    {"the write ratio counts an update once (buffered, then written back)",
     test_write_ratio_update_buffer},
    {"freq's ghosts by 8 KiB region below 8 KiB blocks: a neighbour's drop is a ghost hit",
     test_ghost_regions},
    {"RAM per cache block with sketch and ghosts <= 16.0 bytes at 4K, 18.7 at 64K and 1M",
     test_ram_per_block},
    {"blocks above 2^32 - 1 are never cached (5-byte keys)", test_key_block_limit},
    {"256 LUNs per cache; a LUN index is reused only once no slot carries it", test_key_lun_index},
    {"blocks per LUN counted as slots come and go", test_lun_blocks_counts},
    {"valid bits of partly valid slots, and no room for them", test_partial_valid_table},
    {"busy table full: the origin serves, nothing leaks", test_busy_table_full},
    {"the dirty walk skips clean groups, finds every mark", test_dirty_walk},
    {"automatic RAM window size, >= 256 blocks", test_window_auto_size},
    {"sequential streams bypass", test_seq_bypass},
    {"RAM update buffer: coalescing, write-back, drops", test_update_buffer},
    {"RAM update buffer: a block buffered again is never refused",
     test_update_buffer_fifo_duplicates},
    {"shadow read: straight to the SSD, not counted; hot scan", test_shadow_read_and_hot_scan},
    {"thousands of stale claims: each found by key, each lost once persisted",
     test_stale_claims_many},
    {"lazy restore: the durable copies only grow and cover every write passed (model)",
     test_lazy_durable_model},
    {"lazy restore: what a stop leaves, \"all\" or the ranges preloaded", test_lazy_stop_state},
    {"stale claims by slot: a persist voids exactly its slot's older claims (model)",
     test_stale_claims_by_slot},
    {"stale claims by slot: the same after the index could not grow", test_stale_claims_by_slot_broken},
    {"stale claims not tracked (no memory): every write syncs until a later snapshot is durable",
     test_stale_overflow_recovers},
    {"a big invalidation in chunks: the range is never served or filled between them",
     test_invalidate_in_chunks},
    {"a LUN dropped in chunks: none of its window blocks is promoted between them",
     test_inval_chunks_no_promotion},
    {"lazy restore: misses fill FREE slots of known pages only", test_restore_fills},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("cache_core", tests);
}
