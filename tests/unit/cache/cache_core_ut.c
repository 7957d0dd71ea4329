/*
 * cache_core_ut.c - the policy core: hit/partial/miss, per-4K valid bits,
 * write-through update and invalidate, the fill races (a fill that raced a
 * write is dropped; overlapping writes), range invalidation, per-LUN
 * quotas, the RAM window and its promotion, scan resistance, and the RAM
 * bytes per cache block. The stale claims and the lazy restore's filter:
 * cache_claims_ut.c; the side tables, budgets and update buffer:
 * cache_tables_ut.c.
 */
#include "core_ut_lib.h"

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
    {"two returning blocks at the window's hand: what one read promotes", test_window_two_returning},
    {"window and update buffer share their RAM (rule 9)", test_window_buffer_split},
    {"freq's ghosts by 8 KiB region below 8 KiB blocks: a neighbour's drop is a ghost hit", test_ghost_regions},
    {"RAM per cache block with sketch and ghosts <= 16.0 bytes at 4K, 18.7 at 64K and 1M", test_ram_per_block},
    {"blocks above 2^32 - 1 are never cached (5-byte keys)", test_key_block_limit},
    {"lazy restore: what a stop leaves, \"all\" or the ranges preloaded", test_lazy_stop_state},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("cache_core", tests);
}
