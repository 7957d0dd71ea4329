/*
 * cache_tables_ut.c - the policy core's side tables and budgets: LUN
 * indexes and per-LUN block counts, partly valid slots, the busy table,
 * the dirty walk, the RAM window's size, sequential bypass, the write
 * budget, the RAM update buffer, and the shadow's reads and hot scan.
 */
#include "core_ut_lib.h"

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
    {"a re-read stream earns the SSD within the write budget (rule 10)", test_write_budget},
    {"the write ratio counts an update once (buffered, then written back)", test_write_ratio_update_buffer},
    {"256 LUNs per cache; a LUN index is reused only once no slot carries it", test_key_lun_index},
    {"blocks per LUN counted as slots come and go", test_lun_blocks_counts},
    {"valid bits of partly valid slots, and no room for them", test_partial_valid_table},
    {"busy table full: the origin serves, nothing leaks", test_busy_table_full},
    {"the dirty walk skips clean groups, finds every mark", test_dirty_walk},
    {"automatic RAM window size, >= 256 blocks", test_window_auto_size},
    {"sequential streams bypass", test_seq_bypass},
    {"RAM update buffer: coalescing, write-back, drops", test_update_buffer},
    {"RAM update buffer: a block buffered again is never refused", test_update_buffer_fifo_duplicates},
    {"shadow read: straight to the SSD, not counted; hot scan", test_shadow_read_and_hot_scan},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("cache_tables", tests);
}
