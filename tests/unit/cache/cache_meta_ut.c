/*
 * cache_meta_ut.c - on-device metadata: layout, format/load round trip,
 * warm restart after a clean close, foreign or damaged superblocks, and
 * recovery after a crash that tears the Nth device write, for every N of a
 * workload of reads, fills, evictions, write-through updates (with
 * read-modify-write of partial sectors), invalidations and syncs: no
 * recovered sector may ever differ from the origin.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <stdlib.h>
#include <unistd.h>

#include "hotlun/cache_engine.h"
#include "hotlun/util.h"
#include "hl_test.h"

#define BS      16384u
#define SPB     (BS / HL_CACHE_SECTOR)
#define LUNSECT 1200u /* 4K sectors per test LUN */
#define NLUN    2

/* The origin: a version per 4K sector; sector content encodes (lun, sector, version). */
static uint32_t origin[NLUN][LUNSECT];
/* Blocks a write or an invalidation touched (even one that never reached the origin). */
#define LUNBLK (LUNSECT / SPB + 8)
static bool touched[NLUN][LUNBLK];

static void touch(uint16_t lun, uint64_t off, uint64_t len)
{
	for (uint64_t b = off / BS; b <= (off + len - 1) / BS && b < LUNBLK; b++)
		touched[lun][b] = true;
}

static void fill_sector(uint8_t *p, uint16_t lun, uint64_t sect, uint32_t ver)
{
	for (unsigned i = 0; i < HL_CACHE_SECTOR; i += 16) {
		memcpy(p + i, &lun, 2);
		memcpy(p + i + 2, &sect, 8);
		memcpy(p + i + 10, &ver, 4);
		p[i + 14] = 0xa5;
		p[i + 15] = (uint8_t)(i / 16);
	}
}

struct rig {
	/* a read whose origin data "arrives" after the next operation */
	struct hl_cache_io pend[16];
	int npend;
	uint16_t pend_lun;
	struct hl_cache_dev *d;
	struct hl_cache_layout l;
	struct hl_cache_core *c;
	bool crashed;
	uint64_t bad_hits; /* hits whose device data differed from the origin */
};

static struct hl_cache_core *new_core(const struct hl_cache_layout *l)
{
	struct hl_cache_params p;
	struct hl_cache_core *c;

	hl_cache_params_default(&p);
	p.block_size = BS;
	p.capacity = l->nslots * BS;
	p.window_bytes = 0;
	p.admit = HL_ADMIT_ALWAYS; /* maximum churn: every miss fills, every fill evicts */
	p.seq_bypass = 0;
	CU_ASSERT_FATAL(hl_cache_core_create(&p, &c) == 0);
	for (uint16_t i = 0; i < NLUN; i++)
		CU_ASSERT_FATAL(hl_cache_core_lun_add(c, i, 0) == 0);
	return c;
}

static int dev_io(struct rig *r, int rc)
{
	if (rc && getenv("HL_DEBUG_UT"))
		fprintf(stderr, "device op failed: %d\n", rc);
	if (rc)
		r->crashed = true;
	return rc;
}

/* Write the origin's current content of sectors [first, first+n) of block into slot. */
static int put_data(struct rig *r, uint16_t lun, uint32_t slot, uint64_t block, uint32_t first,
                    uint32_t n)
{
	uint8_t *buf = NULL;
	int rc;

	if (posix_memalign((void **)&buf, 4096, (size_t)n * HL_CACHE_SECTOR))
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t sect = block * SPB + first + i;
		fill_sector(buf + (size_t)i * HL_CACHE_SECTOR, lun, sect,
		            sect < LUNSECT ? origin[lun][sect] : 0);
	}
	rc = r->d->ops->pwrite(r->d, buf, (size_t)n * HL_CACHE_SECTOR,
	                       r->l.data_off + (uint64_t)slot * BS +
	                           (uint64_t)first * HL_CACHE_SECTOR);
	free(buf);
	return dev_io(r, rc);
}

/* Check sectors of a slot against the origin. @return sectors that differ. */
static unsigned check_data(struct rig *r, uint16_t lun, uint32_t slot, uint64_t block,
                           const uint8_t *valid)
{
	uint8_t *buf = NULL, *want;
	unsigned bad = 0;

	CU_ASSERT_FATAL(posix_memalign((void **)&buf, 4096, BS) == 0);
	want = malloc(HL_CACHE_SECTOR);
	CU_ASSERT_FATAL(r->d->ops->pread(r->d, buf, BS, r->l.data_off + (uint64_t)slot * BS) == 0);
	for (uint32_t i = 0; i < SPB; i++) {
		uint64_t sect = block * SPB + i;
		if (!(valid[i / 8] >> (i % 8) & 1))
			continue;
		fill_sector(want, lun, sect, sect < LUNSECT ? origin[lun][sect] : 0);
		if (memcmp(buf + (size_t)i * HL_CACHE_SECTOR, want, HL_CACHE_SECTOR))
			bad++;
	}
	free(want);
	free(buf);
	return bad;
}

/* Finish the ios of a read: check hits, barrier, write fills, io_end. */
static void finish_read(struct rig *r, uint16_t lun, struct hl_cache_io *ios, int n)
{
	for (int i = 0; i < n; i++) {
		struct hl_cache_io *io = &ios[i];
		bool ok = false;
		if (io->kind == HL_CACHE_IO_HIT && !r->crashed) {
			uint8_t v[32];
			memset(v, 0, sizeof(v));
			for (uint32_t s = io->first; s < (uint32_t)io->first + io->nsect; s++)
				v[s / 8] |= (uint8_t)(1u << (s % 8));
			r->bad_hits += check_data(r, lun, io->slot, io->block, v);
		}
		if (io->fill_nsect && !r->crashed) {
			if (io->meta_barrier)
				ok = dev_io(r, hl_cache_meta_barrier(r->d, &r->l, r->c,
				                                     io->slot)) == 0;
			else
				ok = true;
			/* As the engine: the core grants the slot's data first. */
			if (ok)
				ok = hl_cache_core_io_start(r->c, lun, io);
			if (ok)
				ok = put_data(r, lun, io->slot, io->block, io->fill_first,
				              io->fill_nsect) == 0;
		}
		hl_cache_core_io_end(r->c, lun, io, ok);
	}
}

static void finish_pending(struct rig *r)
{
	int n = r->npend;

	r->npend = 0;
	finish_read(r, r->pend_lun, r->pend, n);
}

/* The engine's read path; defer: the fill completes after the next operation. */
static void do_read(struct rig *r, uint16_t lun, uint64_t off, uint64_t len, bool defer)
{
	struct hl_cache_io ios[16];
	int n = hl_cache_core_read(r->c, lun, off, len, ios, 16);

	CU_ASSERT_FATAL(n > 0);
	if (defer && !r->npend) {
		memcpy(r->pend, ios, (size_t)n * sizeof(ios[0]));
		r->npend = n;
		r->pend_lun = lun;
		return;
	}
	finish_read(r, lun, ios, n);
}

/* The engine's write path: records first, then the origin, then the cache data. */
static void do_write(struct rig *r, uint16_t lun, uint64_t off, uint64_t len)
{
	struct hl_cache_io ios[16];
	bool sync = hl_cache_core_write_needs_sync(r->c, lun, off, len);
	int n = hl_cache_core_write_begin(r->c, lun, off, len, ios, 16);
	bool origin_ok;

	touch(lun, off, len);
	CU_ASSERT_FATAL(n >= 0);
	for (int i = 0; i < n; i++)
		sync |= ios[i].meta_barrier;
	origin_ok = !r->crashed && (!sync || dev_io(r, hl_cache_meta_sync(r->d, &r->l, r->c)) == 0);
	if (origin_ok) {
		for (uint64_t s = off / HL_CACHE_SECTOR; s <= (off + len - 1) / HL_CACHE_SECTOR;
		     s++)
			if (s < LUNSECT)
				origin[lun][s]++;
	}
	for (int i = 0; i < n; i++) {
		struct hl_cache_io *io = &ios[i];
		hl_cache_core_write_end(r->c, lun, io, origin_ok);
		if (!io->fill_nsect)
			continue;
		bool ok = !r->crashed && hl_cache_core_io_start(r->c, lun, io) &&
		          put_data(r, lun, io->slot, io->block, io->fill_first, io->fill_nsect) == 0;
		hl_cache_core_io_end(r->c, lun, io, ok);
	}
}

static void do_invalidate(struct rig *r, uint16_t lun, uint64_t off, uint64_t len)
{
	touch(lun, off, len);
	hl_cache_core_invalidate(r->c, lun, off, len);
	/* UNMAP completes only once the records no longer claim the range. */
	if (!r->crashed && !dev_io(r, hl_cache_meta_sync(r->d, &r->l, r->c))) {
		for (uint64_t s = off / HL_CACHE_SECTOR; s <= (off + len - 1) / HL_CACHE_SECTOR;
		     s++)
			if (s < LUNSECT)
				origin[lun][s] += 1000; /* the origin now reads differently */
	}
}

static uint64_t rs;
static uint64_t rnd(void)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return rs;
}

/* A deterministic workload; stops early once the device "crashed". */
static void workload(struct rig *r, unsigned ops)
{
	rs = 0x1234abcd5678ef01ull;
	for (unsigned i = 0; i < ops && !r->crashed; i++) {
		bool had_pending = r->npend != 0;
		uint16_t lun = (uint16_t)(rnd() % NLUN);
		uint64_t hot = rnd() % 4 ? rnd() % 80 : rnd() % (LUNSECT - 8); /* skewed */
		uint64_t off = hot * HL_CACHE_SECTOR, len;
		unsigned kind = (unsigned)(rnd() % 100);
		if (kind < 60) {
			len = (1 + rnd() % 4) * HL_CACHE_SECTOR;
			do_read(r, lun, off, len, rnd() % 3 == 0);
		} else if (kind < 92) {
			off += (rnd() % 3) * 512;
			len = 512 * (1 + rnd() % 20);
			do_write(r, lun, off, len);
		} else if (kind < 96) {
			do_invalidate(r, lun, off, (1 + rnd() % 6) * HL_CACHE_SECTOR);
		} else if (!r->crashed) {
			dev_io(r, hl_cache_meta_sync(r->d, &r->l, r->c));
		}
		if (had_pending)
			finish_pending(r);
	}
	if (r->npend)
		finish_pending(r);
}

static void rig_start(struct rig *r, uint64_t dev_size)
{
	memset(r, 0, sizeof(*r));
	memset(origin, 0, sizeof(origin));
	CU_ASSERT_FATAL(hl_cache_dev_open_mem(dev_size, &r->d) == 0);
	CU_ASSERT_FATAL(hl_cache_meta_format(r->d, BS, &r->l) == 0);
	r->c = new_core(&r->l);
	hl_cache_layout_release(&r->l);
	CU_ASSERT_FATAL(hl_cache_meta_load(r->d, r->c, &r->l) == 0);
}

/* After a crash: reboot the device, load, and check every recovered sector. */
static unsigned recover_and_check(struct rig *r, int *restored)
{
	struct hl_cache_core *c;
	unsigned bad = 0;

	hl_cache_core_destroy(r->c);
	r->c = NULL;
	hl_cache_dev_mem_reset(r->d);
	c = new_core(&r->l);
	hl_cache_layout_release(&r->l);
	*restored = hl_cache_meta_load(r->d, c, &r->l);
	CU_ASSERT(*restored >= 0);
	for (uint32_t s = 0; s < r->l.nslots; s++) {
		struct hl_cache_slot_rec rec;
		if (!hl_cache_core_slot_get(c, s, &rec))
			continue;
		bad += check_data(r, rec.lun, s, rec.block, rec.valid);
	}
	r->c = c;
	return bad;
}

/* A copy of device d (its contents; a fresh failure state). */
static struct hl_cache_dev *dev_clone(struct hl_cache_dev *d)
{
	struct hl_cache_dev *n;
	uint8_t *buf = malloc(d->size);

	CU_ASSERT_FATAL(buf != NULL);
	CU_ASSERT_FATAL(hl_cache_dev_open_mem(d->size, &n) == 0);
	CU_ASSERT_FATAL(d->ops->pread(d, buf, d->size, 0) == 0);
	CU_ASSERT_FATAL(n->ops->pwrite(n, buf, n->size, 0) == 0);
	free(buf);
	return n;
}

/* Load d into a fresh core; all_pages: as if every summary bit were set. @return the core. */
static struct hl_cache_core *load_copy(struct rig *r, bool all_pages, int *restored)
{
	struct hl_cache_dev *n = dev_clone(r->d);
	struct hl_cache_layout l;
	struct hl_cache_core *c = new_core(&r->l);

	if (all_pages) {
		uint8_t *ones = malloc(r->l.sum_len);
		memset(ones, 0xff, r->l.sum_len);
		CU_ASSERT_FATAL(n->ops->pwrite(n, ones, r->l.sum_len, r->l.sum_off) == 0);
		free(ones);
	}
	*restored = hl_cache_meta_load(n, c, &l);
	hl_cache_layout_release(&l);
	hl_cache_dev_close(n);
	return c;
}

/*
 * The summary's promise, checked on the device as it is now (after a crash
 * too): a load that reads every record page restores exactly what the load
 * that reads only the marked pages restores. @return true when it holds.
 */
static bool summary_covers_claims(struct rig *r)
{
	int n_all, n_sum;
	struct hl_cache_core *all = load_copy(r, true, &n_all);
	struct hl_cache_core *sum = load_copy(r, false, &n_sum);
	bool same = n_all == n_sum && n_all >= 0;

	for (uint32_t s = 0; same && s < r->l.nslots; s++) {
		struct hl_cache_slot_rec a, b;
		bool va = hl_cache_core_slot_get(all, s, &a), vb = hl_cache_core_slot_get(sum, s, &b);
		same = va == vb && (!va || (a.lun == b.lun && a.block == b.block &&
		                            !memcmp(a.valid, b.valid, sizeof(a.valid))));
	}
	if (!same)
		fprintf(stderr, "summary misses a page: %d restored from all pages, %d marked\n",
		        n_all, n_sum);
	hl_cache_core_destroy(all);
	hl_cache_core_destroy(sum);
	return same;
}

static void test_layout(void)
{
	struct hl_cache_layout l;

	CU_ASSERT_EQUAL(hl_cache_layout_compute(1ull << 30, 65536, &l), 0);
	CU_ASSERT_EQUAL(l.rec_size, 32);
	CU_ASSERT_EQUAL(l.sum_off, 8192);
	CU_ASSERT_EQUAL(l.sum_len, 4096); /* one bit per record page */
	CU_ASSERT_EQUAL(l.meta_off, 8192 + 4096);
	CU_ASSERT_EQUAL(l.npages, l.meta_len / 4096);
	CU_ASSERT(l.npages * 128 >= l.nslots);
	CU_ASSERT_EQUAL(l.data_off % 65536, 0);
	CU_ASSERT(l.data_off >= l.meta_off + l.meta_len);
	CU_ASSERT(l.data_off + l.nslots * 65536 <= (1ull << 30));
	CU_ASSERT(l.nslots >= 16370 && l.nslots < 16384);
	CU_ASSERT(l.meta_len * 4096 / 32 >= l.nslots * 4096);
	CU_ASSERT_EQUAL(hl_cache_layout_compute(1ull << 30, 1024 * 1024, &l), 0);
	CU_ASSERT_EQUAL(l.rec_size, 64); /* 256 valid bits need the larger record */
	CU_ASSERT_EQUAL(hl_cache_layout_compute(1ull << 30, 3000, &l), -EINVAL);
	CU_ASSERT_EQUAL(hl_cache_layout_compute(8192, 4096, &l), -ENOSPC);
	/* 4 TiB of 4 KiB blocks: 1 Gi slots minus what records take, a 1 MiB summary. */
	CU_ASSERT_EQUAL(hl_cache_layout_compute(4ull << 40, 4096, &l), 0);
	CU_ASSERT(l.nslots > (1ull << 30) - (1ull << 30) / 128 - 256 && l.nslots < 1ull << 30);
	CU_ASSERT_EQUAL(l.sum_len, HL_ALIGN_UP(HL_DIV_ROUND_UP(l.npages, 8), 4096));
	CU_ASSERT(l.data_off + l.nslots * 4096 <= 4ull << 40);
	CU_ASSERT(l.data_off + (l.nslots + 1) * 4096 + 32 > 4ull << 40); /* no room for one more */
	/*
	 * 12 TiB: more than 2^31 slots (up to 2^32 - 3 fit the slot numbers):
	 * record bytes, offsets and the count a load returns past 32 bits.
	 */
	CU_ASSERT_EQUAL(hl_cache_layout_compute(12ull << 40, 4096, &l), 0);
	CU_ASSERT(l.nslots > 1ull << 31 && l.nslots < UINT32_MAX - 1);
	CU_ASSERT(l.meta_len > 1ull << 32 && l.meta_len == l.npages * 4096);
	CU_ASSERT(l.npages * 128 >= l.nslots);
	CU_ASSERT(l.data_off + l.nslots * 4096 <= 12ull << 40);
	_Static_assert(sizeof(hl_cache_meta_load(NULL, NULL, NULL)) >= sizeof(int64_t),
	               "a load restores up to 2^32 - 3 slots: an int does not hold the count");
	/* 17 TiB: 2^32 - 2 slots and more do not fit the 32-bit slot numbers: refused. */
	CU_ASSERT_EQUAL(hl_cache_layout_compute(17ull << 40, 4096, &l), -EINVAL);
}

static void test_warm_restart(void)
{
	struct rig r;
	struct hl_cache_core_info info;
	int restored;

	rig_start(&r, 2u << 20);
	workload(&r, 3000);
	CU_ASSERT_FALSE(r.crashed);
	CU_ASSERT_EQUAL(r.bad_hits, 0);
	hl_cache_core_info(r.c, &info);
	CU_ASSERT(info.used_slots > r.l.nslots / 2);
	uint64_t used = info.used_slots;
	CU_ASSERT_EQUAL(hl_cache_meta_close(r.d, &r.l, r.c), 0);
	CU_ASSERT_EQUAL(recover_and_check(&r, &restored), 0);
	/* A clean stop keeps every block that held valid data. */
	CU_ASSERT_EQUAL((uint64_t)restored, used);
	/* And the warm cache serves hits right away, with the right data. */
	struct hl_cache_stats st;
	workload(&r, 300);
	hl_cache_core_stats(r.c, -1, &st);
	CU_ASSERT(st.read_hits > 0);
	CU_ASSERT_EQUAL(r.bad_hits, 0);
	hl_cache_core_destroy(r.c);
	hl_cache_layout_release(&r.l);
	hl_cache_dev_close(r.d);
}

static void test_bad_superblock(void)
{
	struct rig r;
	uint8_t *z = NULL;
	struct hl_cache_core *c;
	struct hl_cache_layout l;

	rig_start(&r, 1u << 20);
	workload(&r, 200);
	hl_cache_meta_close(r.d, &r.l, r.c);
	hl_cache_core_destroy(r.c);
	/* One copy torn: the other one still opens the cache. */
	CU_ASSERT_FATAL(posix_memalign((void **)&z, 4096, 8192) == 0);
	memset(z, 0x5a, 8192);
	CU_ASSERT_EQUAL(r.d->ops->pwrite(r.d, z + 100, 1000, 4096 + 100), 0);
	c = new_core(&r.l);
	CU_ASSERT(hl_cache_meta_load(r.d, c, &l) > 0);
	hl_cache_layout_release(&l);
	hl_cache_core_destroy(c);
	/* Both gone: no cache, the caller formats. */
	CU_ASSERT_EQUAL(r.d->ops->pwrite(r.d, z, 8192, 0), 0);
	c = new_core(&r.l);
	CU_ASSERT_EQUAL(hl_cache_meta_load(r.d, c, &l), -ENODATA);
	hl_cache_core_destroy(c);
	/* A different block size is a different cache. */
	CU_ASSERT_EQUAL(hl_cache_meta_format(r.d, 4096, &l), 0);
	hl_cache_layout_release(&l);
	c = new_core(&r.l);
	CU_ASSERT_EQUAL(hl_cache_meta_load(r.d, c, &l), -ENODATA);
	hl_cache_core_destroy(c);
	free(z);
	hl_cache_layout_release(&r.l);
	hl_cache_dev_close(r.d);
}

/*
 * The device dies at each write of a scenario in turn (torn one way or
 * another), on a fresh device of `dev` bytes each time; every crash is
 * recovered and checked (summary, restored sectors, hits), then `after`
 * runs on the recovered cache when given. Counts the scenario's device
 * writes first (more than min_writes). Returns the stale findings.
 */
static unsigned crash_each_write(uint64_t dev, void (*scenario)(struct rig *r),
                                 void (*after)(struct rig *r), uint64_t min_writes,
                                 uint64_t *total_out, uint64_t *recovered_out)
{
	static const size_t torn[] = {0, 512, 1000, 2048, 4095};
	uint64_t total, n, crashes = 0, recovered_slots = 0;
	unsigned bad = 0;
	struct rig r;
	int restored;

	rig_start(&r, dev);
	uint64_t base = hl_cache_dev_mem_writes(r.d);
	scenario(&r);
	CU_ASSERT_FALSE_FATAL(r.crashed);
	CU_ASSERT_EQUAL(r.bad_hits, 0);
	total = hl_cache_dev_mem_writes(r.d) - base;
	hl_cache_core_destroy(r.c);
	hl_cache_layout_release(&r.l);
	hl_cache_dev_close(r.d);
	CU_ASSERT(total > min_writes);

	for (n = 0; n <= total; n++) {
		rig_start(&r, dev);
		hl_cache_dev_mem_fail_at(r.d, hl_cache_dev_mem_writes(r.d) + n, torn[n % 5]);
		scenario(&r);
		crashes += r.crashed;
		if (!summary_covers_claims(&r))
			bad++;
		bad += recover_and_check(&r, &restored);
		recovered_slots += (uint64_t)(restored > 0 ? restored : 0);
		bad += (unsigned)r.bad_hits;
		if (after) {
			/* The recovered cache keeps working correctly. */
			r.crashed = false;
			r.bad_hits = 0;
			after(&r);
			bad += (unsigned)r.bad_hits;
		}
		hl_cache_core_destroy(r.c);
		hl_cache_layout_release(&r.l);
		hl_cache_dev_close(r.d);
		if (bad) {
			fprintf(stderr, "stale data after a crash at write %llu of %llu\n",
			        (unsigned long long)n, (unsigned long long)total);
			break;
		}
	}
	CU_ASSERT_EQUAL(crashes, total);
	/* Recovery is not trivially "drop everything". */
	CU_ASSERT(recovered_slots > total);
	*total_out = total;
	*recovered_out = recovered_slots;
	return bad;
}

static void workload_400(struct rig *r)
{
	workload(r, 400);
}

static void workload_100(struct rig *r)
{
	workload(r, 100);
}

static void test_torn_write_every_step(void)
{
	uint64_t total, recovered;

	CU_ASSERT_EQUAL(crash_each_write(1u << 20, workload_400, workload_100, 300, &total, &recovered),
	                0);
}

/* The big drops' start: LUN 0 cached whole, LUN 1 half, and synced. */
static void fill_both_synced(struct rig *r)
{
	const uint64_t nb = LUNSECT / SPB;

	for (uint64_t b = 0; b < nb && !r->crashed; b++)
		do_read(r, 0, b * BS, BS, false);
	for (uint64_t b = 0; b < nb / 2 && !r->crashed; b++)
		do_read(r, 1, b * BS, BS, false);
	if (!r->crashed)
		dev_io(r, hl_cache_meta_sync(r->d, &r->l, r->c));
}

/*
 * A big drop (issue 25): both LUNs cached whole and synced, LUN 0 dropped
 * at once without a sync (a detach, a cold attach: hundreds of stale
 * claims), then freed slots refilled with LUN 1's blocks (fills deferred,
 * some needing a barrier), writes to LUN 0's blocks (each must wait for a
 * sync while a record still claims its block), an UNMAP and syncs. The
 * device dies at each of its writes in turn: nothing stale is restored.
 */
static void big_drop_workload(struct rig *r)
{
	const uint64_t nb = LUNSECT / SPB;

	fill_both_synced(r);
	touch(0, 0, nb * BS);
	hl_cache_core_invalidate(r->c, 0, 0, nb * BS);
	for (uint64_t b = 0; b < nb && !r->crashed; b++) {
		if (b % 3 == 0)
			do_write(r, 0, b * BS + (b % 4) * 4096, 4096 + (b % 5) * 512);
		if (b % 2 == 0 && nb / 2 + b / 2 < nb)
			do_read(r, 1, (nb / 2 + b / 2) * BS, BS, b % 4 == 0);
		if (b % 7 == 0)
			do_read(r, 0, (b / 2) * BS, 2 * BS, b % 3 == 0);
		if (b == nb / 2)
			do_invalidate(r, 1, 0, 40 * BS);
		if (b % 50 == 49 && !r->crashed)
			dev_io(r, hl_cache_meta_sync(r->d, &r->l, r->c));
	}
	if (r->npend)
		finish_pending(r);
	if (!r->crashed)
		dev_io(r, hl_cache_meta_sync(r->d, &r->l, r->c));
}

static void test_big_drop_crash_every_write(void)
{
	uint64_t total, recovered;
	unsigned bad;

	memset(touched, 0, sizeof(touched));
	bad = crash_each_write(8u << 20, big_drop_workload, NULL, 400, &total, &recovered);
	CU_ASSERT_EQUAL(bad, 0);
	fprintf(stderr, "\n  big drop: %llu device writes, a crash at each: %u stale, %llu slots restored",
	        (unsigned long long)total, bad, (unsigned long long)recovered);
}

/*
 * The big drop when the stale-claim list cannot grow (its realloc fails):
 * past `stale_limit` entries (1: none at all) the claims are not tracked,
 * every write syncs until a sync snapshotted after the last of them has
 * made the dirty records durable, and then writes go straight to the
 * origin again (checked at the end). A crash at each device write, across
 * the overflow and its recovery: nothing stale.
 */
static uint64_t stale_limit;
static unsigned overflow_writes_synced, overflow_writes_direct;

static void big_drop_overflow_workload(struct rig *r)
{
	const uint64_t nb = LUNSECT / SPB;

	hl_cache_core_test_stale_limit(r->c, stale_limit);
	big_drop_workload(r);
	if (r->crashed)
		return;
	/*
	 * Recovered: no claim is left, tracked or not, so the next write does
	 * not sync (the ones after it may: its unclaim may not be tracked).
	 */
	overflow_writes_synced += hl_cache_core_write_needs_sync(r->c, 0, 0, 4096);
	overflow_writes_direct += !hl_cache_core_write_needs_sync(r->c, 0, 0, 4096);
	for (uint64_t b = 0; b < nb; b += 5)
		do_write(r, 0, b * BS, 4096);
	/* Drop again (untracked claims), refill and write: syncs again, then recovers. */
	touch(1, 0, nb * BS);
	hl_cache_core_invalidate(r->c, 1, 0, nb * BS);
	for (uint64_t b = 0; b < nb && !r->crashed; b += 2) {
		do_read(r, 0, b * BS, BS, b % 6 == 0);
		do_write(r, 1, b * BS + 8192, 4096);
	}
	if (r->npend)
		finish_pending(r);
	if (!r->crashed)
		dev_io(r, hl_cache_meta_sync(r->d, &r->l, r->c));
	if (!r->crashed) {
		overflow_writes_direct += !hl_cache_core_write_needs_sync(r->c, 1, 0, BS);
		overflow_writes_synced += hl_cache_core_write_needs_sync(r->c, 1, 0, BS);
	}
}

static void stale_overflow_crash(uint64_t limit)
{
	uint64_t total, recovered;
	unsigned bad;

	memset(touched, 0, sizeof(touched));
	stale_limit = limit;
	overflow_writes_synced = overflow_writes_direct = 0;
	bad = crash_each_write(8u << 20, big_drop_overflow_workload, NULL, 400, &total,
	                       &recovered);
	CU_ASSERT_EQUAL(bad, 0);
	/* Every run that got through its syncs found writes direct again, never syncing. */
	CU_ASSERT(overflow_writes_direct > 0);
	CU_ASSERT_EQUAL(overflow_writes_synced, 0);
	fprintf(stderr,
	        "\n  stale list of at most %llu: %llu device writes, a crash at each: %u stale, "
	        "%llu slots restored, %u checks after recovery found writes direct",
	        (unsigned long long)limit, (unsigned long long)total, bad,
	        (unsigned long long)recovered, overflow_writes_direct);
}

static void test_stale_overflow_crash_every_write(void)
{
	stale_overflow_crash(1);   /* no claim tracked at all */
	stale_overflow_crash(256); /* part tracked, the rest not */
}

/*
 * A big drop in chunks (hl_cache_core_invalidate_yield, a chunk of 16
 * slots here): between two chunks other I/O runs as the reactors would,
 * reads of the range and of LUN 1, writes to both, and syncs (the
 * metadata thread). proof_drop: the origin of LUN 0 changed before the
 * drop (as when an attach finds its proof stale): a block of the range
 * served from the cache between chunks reads stale (bad_hits). Otherwise
 * an UNMAP: the origin changes after the drop's sync, and the device dies
 * at each of its writes in turn: nothing stale is restored.
 */
static bool chunk_proof_drop;
static unsigned chunk_k, chunk_range_reads;

static void chunk_yield(void *arg)
{
	struct rig *r = arg;
	const uint64_t nb = LUNSECT / SPB;
	unsigned k = chunk_k++;

	if (r->crashed)
		return;
	for (unsigned i = 0; i < 4; i++) {
		do_read(r, 0, ((k * 4 + i) * 7 % nb) * BS, BS, false);
		chunk_range_reads++;
	}
	do_read(r, 1, (k * 5 % nb) * BS, BS, false);
	if (k % 2)
		do_write(r, 1, (k * 3 % nb) * BS + 4096, 4096);
	if (k % 3 == 0)
		do_write(r, 0, (k * 11 % nb) * BS + 8192, 4096);
	if (k % 4 == 0 && !r->crashed)
		dev_io(r, hl_cache_meta_sync(r->d, &r->l, r->c));
}

static void chunk_drop_workload(struct rig *r)
{
	const uint64_t nb = LUNSECT / SPB;

	fill_both_synced(r);
	if (r->crashed)
		return;
	touch(0, 0, nb * BS);
	if (chunk_proof_drop)
		for (uint64_t s = 0; s < LUNSECT; s++)
			origin[0][s] += 1000;
	hl_cache_core_test_inval_chunk(r->c, 16);
	chunk_k = 0;
	hl_cache_core_invalidate_yield(r->c, 0, 0, nb * BS, chunk_yield, r);
	if (!r->crashed && !dev_io(r, hl_cache_meta_sync(r->d, &r->l, r->c)) && !chunk_proof_drop)
		for (uint64_t s = 0; s < LUNSECT; s++)
			origin[0][s] += 1000; /* the UNMAP reaches the origin after the sync */
	/* Served again after it. */
	for (uint64_t b = 0; b < nb && !r->crashed; b += 3)
		do_read(r, 0, b * BS, BS, b % 2 == 0);
	if (r->npend)
		finish_pending(r);
	if (!r->crashed)
		dev_io(r, hl_cache_meta_sync(r->d, &r->l, r->c));
}

static void test_chunked_drop(void)
{
	struct rig r;
	uint64_t total, recovered;
	unsigned bad;

	/* The origin changed before the drop: nothing of the range is served between chunks. */
	memset(touched, 0, sizeof(touched));
	chunk_proof_drop = true;
	chunk_range_reads = 0;
	rig_start(&r, 8u << 20);
	chunk_drop_workload(&r);
	CU_ASSERT_FALSE(r.crashed);
	CU_ASSERT(chunk_k > 10); /* it did yield, many times */
	CU_ASSERT(chunk_range_reads > 40);
	CU_ASSERT_EQUAL(r.bad_hits, 0);
	hl_cache_core_destroy(r.c);
	hl_cache_layout_release(&r.l);
	hl_cache_dev_close(r.d);
	/* An UNMAP in chunks, a crash at each device write. */
	chunk_proof_drop = false;
	bad = crash_each_write(8u << 20, chunk_drop_workload, NULL, 100, &total, &recovered);
	CU_ASSERT_EQUAL(bad, 0);
	fprintf(stderr, "\n  drop in chunks: %llu device writes, a crash at each: %u stale, %llu slots restored",
	        (unsigned long long)total, bad, (unsigned long long)recovered);
}

/*
 * The race behind hl_cache_core_write_needs_sync(): a miss evicts block X
 * from a slot whose record still claims X; before that record is rewritten
 * (the fill's barrier is still pending) X is written at the origin; then
 * the device dies. The old record must not bring X's old data back.
 */
/*
 * The device dies at its next write (the pending fill's barrier or data):
 * the restart must restore only sectors that match the origin, and keep
 * some. Ends the rig.
 */
static void crash_at_pending_fill(struct rig *r)
{
	int restored;

	hl_cache_dev_mem_fail_at(r->d, hl_cache_dev_mem_writes(r->d), 0);
	finish_pending(r);
	CU_ASSERT_TRUE(r->crashed);
	CU_ASSERT_EQUAL(recover_and_check(r, &restored), 0);
	CU_ASSERT(restored > 0);
	hl_cache_core_destroy(r->c);
	hl_cache_layout_release(&r->l);
	hl_cache_dev_close(r->d);
}

static void test_stale_claim_after_eviction(void)
{
	struct rig r;
	uint64_t x = UINT64_MAX;

	rig_start(&r, 1u << 20);
	for (uint64_t b = 0; b < r.l.nslots; b++)
		do_read(&r, 0, b * 3 * BS, BS, false);
	CU_ASSERT_EQUAL_FATAL(hl_cache_meta_sync(r.d, &r.l, r.c), 0);
	do_read(&r, 1, 0, BS, true); /* evicts one block of LUN 0, fill pending */
	for (uint64_t b = 0; b < r.l.nslots; b++)
		if (hl_cache_core_peek(r.c, 0, b * 3, NULL) == HL_CACHE_NO_SLOT)
			x = b * 3;
	CU_ASSERT_FATAL(x != UINT64_MAX);
	CU_ASSERT_TRUE(hl_cache_core_write_needs_sync(r.c, 0, x * BS, 4096));
	do_write(&r, 0, x * BS, BS);
	CU_ASSERT_FALSE(hl_cache_core_write_needs_sync(r.c, 0, x * BS, 4096));
	/* The device dies at the next write (the pending fill's barrier). */
	crash_at_pending_fill(&r);
}

/*
 * A sync snapshots the records, then writes them without the lock. What
 * happens to a slot in between must treat the snapshot's claims as if they
 * were already on the device: here a fill reuses a slot whose block the
 * snapshot claims (it must take a barrier before its data lands), or a
 * write changes a sector the snapshot claims (it must sync before the
 * origin sees it). Then the gateway dies before the next sync. Found by
 * tests/functional/cache_verify.sh as misdirected data after kill -9.
 */
static struct rig *race_rig;
static int race_action; /* 0 idle, 1 evict by a fill, 2 overwrite a claimed sector */
static bool race_write_waits; /* action 2: the write waits for a sync before the origin */
static struct hl_cache_dev_ops race_ops;
static const struct hl_cache_dev_ops *race_orig;

static int race_pwrite(struct hl_cache_dev *d, const void *buf, size_t len, uint64_t off)
{
	struct rig *r = race_rig;
	int rc = race_orig->pwrite(d, buf, len, off);
	int action = race_action;

	if (rc || !action || off < r->l.meta_off || off >= r->l.data_off)
		return rc;
	race_action = 0;
	if (action == 1) {
		do_read(r, 1, 0, BS, true); /* evicts a LUN 0 block; its fill waits */
		return rc;
	}
	/* A write of sector 0 (cached, claimed by the snapshot) starts. */
	struct hl_cache_io ios[16];
	int n = hl_cache_core_write_begin(r->c, 0, 0, HL_CACHE_SECTOR, ios, 16);
	bool sync = hl_cache_core_write_needs_sync(r->c, 0, 0, HL_CACHE_SECTOR);

	for (int i = 0; i < n; i++)
		sync |= ios[i].meta_barrier;
	race_write_waits = sync;
	if (!sync)
		origin[0][0]++; /* no sync needed: the origin has it at once */
	return rc;
}

static void race_one(int action)
{
	struct rig r;
	int restored;

	rig_start(&r, 1u << 20);
	for (uint64_t b = 0; b < r.l.nslots; b++)
		do_read(&r, 0, b * BS, BS, false); /* every slot holds a LUN 0 block, unsynced */
	race_rig = &r;
	race_orig = r.d->ops;
	race_ops = *r.d->ops;
	race_ops.pwrite = race_pwrite;
	r.d->ops = &race_ops;
	race_action = action;
	CU_ASSERT_EQUAL_FATAL(hl_cache_meta_sync(r.d, &r.l, r.c), 0);
	CU_ASSERT_EQUAL(race_action, 0); /* the race happened */
	if (r.npend)
		finish_pending(&r); /* the fill: barrier (if it knows it needs one), data */
	if (action == 2 && race_write_waits) {
		/* The sync the write asked for, then the origin write. */
		CU_ASSERT_EQUAL(hl_cache_meta_sync(r.d, &r.l, r.c), 0);
		origin[0][0]++;
	}
	/* (action 2: the gateway dies before the update reaches the cache) */
	r.d->ops = race_orig;
	CU_ASSERT_FALSE(r.crashed);
	/* The gateway dies now: no further sync. */
	CU_ASSERT_EQUAL(recover_and_check(&r, &restored), 0);
	CU_ASSERT(restored > 0);
	hl_cache_core_destroy(r.c);
	hl_cache_layout_release(&r.l);
	hl_cache_dev_close(r.d);
}

static void test_claims_of_a_sync_in_flight(void)
{
	race_one(1);
	race_one(2);
}

/*
 * Two writes touch one cached sector that the record on the device claims.
 * The first clears it in RAM and waits for a sync (barrier) before its
 * origin write; the second, arriving meanwhile, finds the sector already
 * invalid in RAM. It must wait for a sync too: the record still claims the
 * sector's old data until a snapshot taken after the first write's
 * write_begin is on the device. If the second write went to the origin at
 * once and the gateway died before that sync, the old record would bring the
 * old data back over an acknowledged write. Here the second write covers
 * only part of the sector (misaligned I/O, a read-modify-write candidate),
 * as two initiators' (or one's non-overlapping 512-byte) writes do; the same
 * holds for a range invalidation (UNMAP) whose sync is still pending.
 */
static void second_write_one(bool first_is_unmap)
{
	struct rig r;
	struct hl_cache_io ios[16];
	int restored, n;
	bool sync;

	rig_start(&r, 1u << 20);
	do_read(&r, 0, 0, BS, false); /* block 0 cached, every sector valid */
	CU_ASSERT_EQUAL_FATAL(hl_cache_meta_sync(r.d, &r.l, r.c), 0); /* ... and claimed */
	if (first_is_unmap) {
		/* An UNMAP of sector 0: dropped in RAM, its sync not done yet. */
		CU_ASSERT_EQUAL(hl_cache_core_invalidate(r.c, 0, 0, HL_CACHE_SECTOR), 0);
	} else {
		/* Write 1 of bytes [0, 3584) of sector 0: it needs a sync first, still queued. */
		n = hl_cache_core_write_begin(r.c, 0, 0, 3584, ios, 16);
		CU_ASSERT_EQUAL_FATAL(n, 1);
		CU_ASSERT_TRUE(ios[0].meta_barrier);
	}
	/* Write 2 of bytes [3584, 4096): the sector is not valid in RAM any more. */
	sync = hl_cache_core_write_needs_sync(r.c, 0, 3584, 512);
	n = hl_cache_core_write_begin(r.c, 0, 3584, 512, ios, 16);
	CU_ASSERT_EQUAL_FATAL(n, 1);
	sync |= ios[0].meta_barrier != 0;
	CU_ASSERT_TRUE(sync);
	if (sync)
		CU_ASSERT_EQUAL_FATAL(hl_cache_meta_sync(r.d, &r.l, r.c), 0);
	origin[0][0]++; /* write 2 reached the origin and was acknowledged */
	/* The gateway dies now (write 1's origin write never happened). */
	CU_ASSERT_EQUAL(recover_and_check(&r, &restored), 0);
	CU_ASSERT(restored > 0); /* the block's other sectors are still claimed */
	hl_cache_core_destroy(r.c);
	hl_cache_layout_release(&r.l);
	hl_cache_dev_close(r.d);
}

static void test_second_write_before_barrier(void)
{
	second_write_one(false);
	second_write_one(true);
}

/*
 * Records the load drops (here: their LUN is not configured this time)
 * still claim data on the device. A slot they name that is reused must take
 * a barrier first, or a crash before the next sync brings the old claim
 * back over the new block's data.
 */
/* Every slot holds a LUN 1 block, synced; then a restart without LUN 1 drops every record. */
static void restart_without_lun1(struct rig *r)
{
	rig_start(r, 1u << 20);
	for (uint64_t b = 0; b < r->l.nslots; b++)
		do_read(r, 1, b * BS, BS, false);
	CU_ASSERT_EQUAL_FATAL(hl_cache_meta_sync(r->d, &r->l, r->c), 0);
	hl_cache_core_destroy(r->c);
	hl_cache_dev_mem_reset(r->d);
	r->c = new_core(&r->l);
	hl_cache_core_lun_remove(r->c, 1);
	hl_cache_layout_release(&r->l);
	CU_ASSERT_EQUAL(hl_cache_meta_load(r->d, r->c, &r->l), 0);
}

static void test_dropped_records_still_claim(void)
{
	struct rig r;
	int restored;

	restart_without_lun1(&r);
	/* LUN 0 fills the free slots (each fill takes its barrier if it knows). */
	for (uint64_t b = 0; b < r.l.nslots; b++)
		do_read(&r, 0, b * BS, BS, false);
	CU_ASSERT_FALSE(r.crashed);
	/* Crash before any sync; the next start has LUN 1 again. */
	CU_ASSERT_EQUAL(recover_and_check(&r, &restored), 0);
	hl_cache_core_destroy(r.c);
	hl_cache_layout_release(&r.l);
	hl_cache_dev_close(r.d);
}

/*
 * The same dropped records when their LUN comes back without a restart (a
 * disk attached later): the device still claims its blocks' old content,
 * so a write to one of them must sync first (the sync rewrites the dropped
 * records), or a crash right after it would restore the old data at the
 * next start.
 */
static void test_dropped_claim_then_write(void)
{
	struct rig r;
	int restored;

	restart_without_lun1(&r);
	CU_ASSERT_FATAL(hl_cache_core_lun_add(r.c, 1, 0) == 0);
	/* Nothing of LUN 1 is cached, but the device still claims block 2. */
	CU_ASSERT_EQUAL(hl_cache_core_peek(r.c, 1, 2, NULL), HL_CACHE_NO_SLOT);
	CU_ASSERT_TRUE(hl_cache_core_write_needs_sync(r.c, 1, 2 * BS, 4096));
	do_write(&r, 1, 2 * BS, 4096);
	CU_ASSERT_FALSE(hl_cache_core_write_needs_sync(r.c, 1, 2 * BS, 4096));
	/* Crash at the next device write: the restart must not serve the old sector. */
	hl_cache_dev_mem_fail_at(r.d, hl_cache_dev_mem_writes(r.d), 0);
	do_read(&r, 0, 0, BS, false);
	CU_ASSERT_EQUAL(recover_and_check(&r, &restored), 0);
	hl_cache_core_destroy(r.c);
	hl_cache_layout_release(&r.l);
	hl_cache_dev_close(r.d);
}

/*
 * A slot given to a new block while its record still claims the old one:
 * only the io that took it waits for the barrier. A second read of the new
 * block (another sector, found in the slot with nothing valid) planned
 * before that barrier must not write into the slot either, or a crash
 * before the barrier restores the old block with the new one's sector
 * (found by tests/functional/cache_verify.sh with kill -9: one 4 KiB
 * sector of another block at the same offset).
 */
static void test_second_fill_before_take_barrier(void)
{
	struct rig r;
	uint64_t fresh = 3 * LUNSECT / SPB / 4; /* a block no slot holds */

	rig_start(&r, 1u << 20);
	for (uint64_t b = 0; b < r.l.nslots; b++)
		do_read(&r, 0, b * BS, BS, false);
	CU_ASSERT_EQUAL_FATAL(hl_cache_meta_sync(r.d, &r.l, r.c), 0);
	/* Evicts a claimed block; the fill waits (deferred) for its barrier. */
	do_read(&r, 1, fresh * BS, HL_CACHE_SECTOR, true);
	CU_ASSERT_EQUAL_FATAL(r.npend, 1);
	CU_ASSERT_TRUE(r.pend[0].meta_barrier);
	/* Another sector of the same block, from the slot it now has. */
	do_read(&r, 1, fresh * BS + HL_CACHE_SECTOR, HL_CACHE_SECTOR, false);
	/* The device dies at the barrier: the old record stays. */
	crash_at_pending_fill(&r);
}

/* Bytes a format writes: the superblocks and the summary, no record page. */
static uint64_t bytes_written;
static const struct hl_cache_dev_ops *count_orig;

static int count_pwrite(struct hl_cache_dev *d, const void *buf, size_t len, uint64_t off)
{
	bytes_written += len;
	return count_orig->pwrite(d, buf, len, off);
}

static void test_format_writes_no_records(void)
{
	struct hl_cache_dev *d;
	struct hl_cache_dev_ops ops;
	struct hl_cache_layout l;

	CU_ASSERT_FATAL(hl_cache_dev_open_mem(64u << 20, &d) == 0);
	count_orig = d->ops;
	ops = *d->ops;
	ops.pwrite = count_pwrite;
	d->ops = &ops;
	bytes_written = 0;
	CU_ASSERT_EQUAL_FATAL(hl_cache_meta_format(d, 4096, &l), 0);
	CU_ASSERT(l.meta_len >= 16 * 4096); /* 16 Ki slots: 128 record pages it need not zero */
	CU_ASSERT_EQUAL(bytes_written, 2 * 4096 + l.sum_len + 4096);
	d->ops = count_orig;
	hl_cache_layout_release(&l);
	hl_cache_dev_close(d);
}

/*
 * Format does not zero the record pages: what an earlier format (or
 * anything else) left there must never be restored, even where the
 * summary marks the page (a crash between a summary write and the page
 * write leaves exactly that).
 */
static void test_leftover_records_never_restored(void)
{
	struct rig r;
	int restored;
	uint8_t *ones, *junk;
	struct hl_cache_core_info info;

	rig_start(&r, 2u << 20);
	workload(&r, 1000);
	hl_cache_core_info(r.c, &info);
	CU_ASSERT_FATAL(info.used_slots > 0);
	CU_ASSERT_EQUAL_FATAL(hl_cache_meta_close(r.d, &r.l, r.c), 0);
	/* A clean restart keeps them (the records are good). */
	CU_ASSERT_EQUAL(recover_and_check(&r, &restored), 0);
	CU_ASSERT_EQUAL((uint64_t)restored, info.used_slots);
	/* Format again (a new uuid), then mark every page as a crash could. */
	hl_cache_layout_release(&r.l);
	CU_ASSERT_EQUAL_FATAL(hl_cache_meta_format(r.d, BS, &r.l), 0);
	ones = malloc(r.l.sum_len);
	memset(ones, 0xff, r.l.sum_len);
	CU_ASSERT_FATAL(r.d->ops->pwrite(r.d, ones, r.l.sum_len, r.l.sum_off) == 0);
	CU_ASSERT_EQUAL(recover_and_check(&r, &restored), 0);
	CU_ASSERT_EQUAL(restored, 0);
	/* Random bytes in every record page: nothing either. */
	junk = malloc(r.l.meta_len);
	rs = 0x9e3779b97f4a7c15ull;
	for (uint64_t i = 0; i < r.l.meta_len; i += 8) {
		uint64_t v = rnd();
		memcpy(junk + i, &v, 8);
	}
	CU_ASSERT_FATAL(r.d->ops->pwrite(r.d, junk, r.l.meta_len, r.l.meta_off) == 0);
	CU_ASSERT_FATAL(r.d->ops->pwrite(r.d, ones, r.l.sum_len, r.l.sum_off) == 0);
	CU_ASSERT_EQUAL(recover_and_check(&r, &restored), 0);
	CU_ASSERT_EQUAL(restored, 0);
	free(junk);
	free(ones);
	hl_cache_core_destroy(r.c);
	hl_cache_layout_release(&r.l);
	hl_cache_dev_close(r.d);
}

/* Bitwise CRC-32C, as the superblock carries it. */
static uint32_t ut_crc32c(const uint8_t *p, size_t len)
{
	uint32_t c = ~0u;

	while (len--) {
		c ^= *p++;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
	}
	return ~c;
}

/* The version of the newest intact superblock copy, and *nranges (its list of written blocks). */
static uint32_t sb_current(struct rig *r, uint32_t *nranges)
{
	uint8_t sb[8192];
	uint64_t best = 0;
	uint32_t v = 0;

	CU_ASSERT_FATAL(r->d->ops->pread(r->d, sb, sizeof(sb), 0) == 0);
	*nranges = 0;
	for (int i = 0; i < 2; i++) {
		const uint8_t *b = sb + i * 4096;
		uint32_t crc, ver, n;
		uint64_t seq;
		memcpy(&crc, b + 4092, 4);
		if (memcmp(b, "HLCACHE", 8) || crc != ut_crc32c(b, 4092))
			continue;
		memcpy(&seq, b + 56, 8);
		memcpy(&ver, b + 8, 4);
		memcpy(&n, b + 104, 4);
		if (seq >= best) {
			best = seq;
			v = ver;
			*nranges = ver == 4 ? n : 0;
		}
	}
	return v;
}

/* A cache of format version 1 (before the page summary) starts cold, never misread. */
static void test_version_1_starts_cold(void)
{
	struct rig r;
	uint8_t *sb = NULL;
	struct hl_cache_core *c;
	struct hl_cache_layout l;
	uint32_t crc;

	rig_start(&r, 1u << 20);
	workload(&r, 200);
	CU_ASSERT_EQUAL_FATAL(hl_cache_meta_close(r.d, &r.l, r.c), 0);
	hl_cache_core_destroy(r.c);
	/* Both copies say version 1 (with a good CRC). */
	CU_ASSERT_FATAL(posix_memalign((void **)&sb, 4096, 8192) == 0);
	CU_ASSERT_FATAL(r.d->ops->pread(r.d, sb, 8192, 0) == 0);
	for (int i = 0; i < 2; i++) {
		uint8_t *b = sb + i * 4096;
		if (memcmp(b, "HLCACHE", 8))
			continue;
		b[8] = 1;
		crc = ut_crc32c(b, 4092);
		memcpy(b + 4092, &crc, 4);
	}
	CU_ASSERT_FATAL(r.d->ops->pwrite(r.d, sb, 8192, 0) == 0);
	c = new_core(&r.l);
	CU_ASSERT_EQUAL(hl_cache_meta_load(r.d, c, &l), -ENODATA);
	hl_cache_core_destroy(c);
	free(sb);
	hl_cache_layout_release(&r.l);
	hl_cache_dev_close(r.d);
}

/* The summary follows the claims: pages that stopped claiming are not read after a clean stop. */
static void test_summary_shrinks(void)
{
	struct rig r;
	int restored;
	uint8_t *sum;
	unsigned bits = 0;

	rig_start(&r, 2u << 20);
	workload(&r, 1000);
	CU_ASSERT_EQUAL_FATAL(hl_cache_meta_sync(r.d, &r.l, r.c), 0);
	CU_ASSERT_TRUE(summary_covers_claims(&r));
	for (uint16_t lun = 0; lun < NLUN; lun++)
		CU_ASSERT_EQUAL(hl_cache_core_invalidate(r.c, lun, 0, UINT64_MAX), 0);
	CU_ASSERT_EQUAL_FATAL(hl_cache_meta_close(r.d, &r.l, r.c), 0);
	sum = malloc(r.l.sum_len);
	CU_ASSERT_FATAL(r.d->ops->pread(r.d, sum, r.l.sum_len, r.l.sum_off) == 0);
	for (uint64_t i = 0; i < r.l.sum_len; i++)
		bits += (unsigned)__builtin_popcount(sum[i]);
	CU_ASSERT_EQUAL(bits, 0);
	CU_ASSERT_EQUAL(recover_and_check(&r, &restored), 0);
	CU_ASSERT_EQUAL(restored, 0);
	free(sum);
	hl_cache_core_destroy(r.c);
	hl_cache_layout_release(&r.l);
	hl_cache_dev_close(r.d);
}

static void test_file_device(void)
{
	char path[] = "/var/tmp/hl-cache-ut-XXXXXX";
	int fd = mkstemp(path);
	struct hl_cache_dev *d;
	struct hl_cache_layout l;
	uint8_t *buf = NULL;

	CU_ASSERT_FATAL(fd >= 0);
	close(fd);
	int rc = hl_cache_dev_open_file(path, 4u << 20, &d);
	if (rc == -EINVAL) {
		/* This file system has no O_DIRECT: nothing to test here. */
		unlink(path);
		return;
	}
	CU_ASSERT_FATAL(rc == 0);
	CU_ASSERT_EQUAL(d->size, 4u << 20);
	CU_ASSERT_EQUAL(hl_cache_meta_format(d, 65536, &l), 0);
	CU_ASSERT_FATAL(posix_memalign((void **)&buf, 4096, 65536) == 0);
	memset(buf, 0x3c, 65536);
	CU_ASSERT_EQUAL(d->ops->pwrite(d, buf, 65536, l.data_off), 0);
	memset(buf, 0, 65536);
	CU_ASSERT_EQUAL(d->ops->pread(d, buf, 65536, l.data_off), 0);
	CU_ASSERT_EQUAL(buf[65535], 0x3c);
	CU_ASSERT_EQUAL(d->ops->pread(d, buf, 65536, d->size), -EINVAL);
	CU_ASSERT_EQUAL(d->ops->flush(d), 0);
	free(buf);
	hl_cache_layout_release(&l);
	hl_cache_dev_close(d);
	unlink(path);
}


static uint64_t lazy_rs;
static uint64_t lazy_fills;
static void rs_seed_lazy(void)
{
	lazy_rs = 0x9e3779b97f4a7c15ull;
}

/* n random operations (reads only unless writes) on the blocks the warm-up used. */
static void lazy_ops(struct rig *r, bool writes, unsigned n)
{
	uint64_t save = rs;

	rs = lazy_rs;
	for (unsigned i = 0; i < n && !r->crashed; i++) {
		bool had_pending = r->npend != 0;
		uint16_t lun = (uint16_t)(rnd() % NLUN);
		uint64_t hot = rnd() % 4 ? rnd() % 80 : rnd() % (LUNSECT - 8);
		uint64_t off = hot * HL_CACHE_SECTOR;
		unsigned kind = (unsigned)(rnd() % 100);
		if (!writes || kind < 55) {
			do_read(r, lun, off, (1 + rnd() % 4) * HL_CACHE_SECTOR, rnd() % 3 == 0);
		} else if (kind < 90) {
			do_write(r, lun, off + (rnd() % 3) * 512, 512 * (1 + rnd() % 20));
		} else if (kind < 96) {
			do_invalidate(r, lun, off, (1 + rnd() % 6) * HL_CACHE_SECTOR);
		} else {
			dev_io(r, hl_cache_meta_sync(r->d, &r->l, r->c));
		}
		if (had_pending)
			finish_pending(r);
	}
	lazy_rs = rs;
	rs = save;
}

/* ---- lazy restore (docs/cache-format.md, "Lazy restore") ---- */

/* A warm device: 3000 ops of churn, then a clean close. The rig keeps the device. */
static void lazy_warm(struct rig *r)
{
	rig_start(r, 8u << 20); /* 4 record pages */
	workload(r, 3000);
	CU_ASSERT_FALSE_FATAL(r->crashed);
	CU_ASSERT_EQUAL_FATAL(hl_cache_meta_close(r->d, &r->l, r->c), 0);
	hl_cache_core_destroy(r->c);
	r->c = NULL;
	hl_cache_layout_release(&r->l);
	hl_cache_dev_mem_reset(r->d);
}

/* Begin a lazy load of the rig's device into a fresh core. */
static void lazy_begin(struct rig *r, struct hl_cache_restore *lrs)
{
	r->c = new_core(&r->l);
	CU_ASSERT_EQUAL_FATAL(hl_cache_meta_load_begin(r->d, r->c, &r->l, lrs), 0);
	CU_ASSERT_FATAL(lrs->pages >= 3);
}

/* The same when the device may fail at once. @return 0 or -errno (r->crashed). */
static int lazy_try_begin(struct rig *r, struct hl_cache_restore *lrs)
{
	int rc;

	r->c = new_core(&r->l);
	rc = dev_io(r, hl_cache_meta_load_begin(r->d, r->c, &r->l, lrs));
	if (!rc)
		CU_ASSERT_FATAL(lrs->pages >= 3);
	return rc;
}

/* Every slot r->c holds on the device matches the origin. @return sectors that differ. */
static unsigned check_all_slots(struct rig *r, struct hl_cache_core *c)
{
	unsigned bad = 0;

	for (uint32_t s = 0; s < r->l.nslots; s++) {
		struct hl_cache_slot_rec rec;
		if (hl_cache_core_slot_get(c, s, &rec))
			bad += check_data(r, rec.lun, s, rec.block, rec.valid);
	}
	return bad;
}

/* The last record the loader will reach (found on a copy loaded at once): its slot, *rec. */
static uint32_t lazy_last_record(struct rig *r, struct hl_cache_slot_rec *rec)
{
	uint32_t last = HL_CACHE_NO_SLOT;
	int n;
	struct hl_cache_core *all = load_copy(r, false, &n);

	CU_ASSERT_FATAL(n > 10);
	for (uint32_t s = 0; s < r->l.nslots; s++)
		if (hl_cache_core_slot_get(all, s, rec))
			last = s;
	CU_ASSERT_FATAL(last != HL_CACHE_NO_SLOT);
	CU_ASSERT_FATAL(hl_cache_core_slot_get(all, last, rec));
	hl_cache_core_destroy(all);
	return last;
}

/*
 * batch 0: the rest loaded without a lock, a page a step; else as the
 * loader thread does (engine_restore.c): under a lock, batch pages a hold,
 * real-time holds when allowed, whole read chunks a step.
 */
static void lazy_write_before_load(uint32_t batch)
{
	struct rig r;
	struct hl_cache_restore lrs;
	struct hl_cache_slot_rec rec;
	uint32_t last = HL_CACHE_NO_SLOT;
	pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER, sum_lock = PTHREAD_MUTEX_INITIALIZER;
	pthread_mutex_t *lk = batch ? &lock : NULL, *slk = batch ? &sum_lock : NULL;
	struct sched_param sp;
	int64_t left;

	lazy_warm(&r);
	lazy_begin(&r, &lrs);
	if (batch) {
		CU_ASSERT_EQUAL_FATAL(pthread_getschedparam(pthread_self(), &lrs.sched_policy, &sp), 0);
		lrs.sched_prio = sp.sched_priority;
		lrs.rt_hold = lrs.sched_policy != SCHED_FIFO && lrs.sched_policy != SCHED_RR;
	}
	last = lazy_last_record(&r, &rec);
	/* Half the pages restored, then the block of the last record is written. */
	left = hl_cache_meta_load_step(r.d, &r.l, r.c, &lrs, NULL, NULL, 1, 1);
	CU_ASSERT(left > 0);
	/* Until "pending" is durable every write syncs first. */
	CU_ASSERT(hl_cache_core_write_needs_sync(r.c, rec.lun, 0, 512));
	do_write(&r, rec.lun, rec.block * BS, BS);
	CU_ASSERT_FALSE_FATAL(r.crashed);
	/* The write made "pending" durable first (it synced), and then needs no more syncs. */
	CU_ASSERT_EQUAL(r.l.sb_state, 3u);
	CU_ASSERT_FALSE(hl_cache_core_write_needs_sync(r.c, rec.lun, rec.block * BS, 512));
	while ((left = hl_cache_meta_load_step(r.d, &r.l, r.c, &lrs, lk, slk, batch ? 0 : 1,
	                                       batch ? batch : 1)) > 0)
		;
	CU_ASSERT_EQUAL(left, 0);
	CU_ASSERT(lrs.filtered >= 1);
	CU_ASSERT(lrs.restored > 10);
	if (batch) /* (more than a page a hold, unless a hold passed 200 us) */
		CU_ASSERT(lrs.holds < lrs.pages);
	/* The record was dropped: nothing of the block is in the cache. */
	CU_ASSERT_FALSE(hl_cache_core_slot_get(r.c, last, &rec));
	CU_ASSERT_EQUAL(check_all_slots(&r, r.c), 0);
	do_read(&r, rec.lun, rec.block * BS, BS, false);
	CU_ASSERT_EQUAL(r.bad_hits, 0);
	/* Finish: the dropped record's page is rewritten, then the state is open again. */
	CU_ASSERT_EQUAL(hl_cache_meta_load_finish(r.d, &r.l, r.c, lk), 0);
	CU_ASSERT_EQUAL(r.l.sb_state, 2u);
	/* A crash now: the next load is warm and restores nothing stale. */
	int restored;
	CU_ASSERT_EQUAL(recover_and_check(&r, &restored), 0);
	CU_ASSERT(restored > 10);
	if (batch) { /* an ordinary thread again */
		int policy;
		CU_ASSERT_EQUAL(pthread_getschedparam(pthread_self(), &policy, &sp), 0);
		CU_ASSERT_EQUAL(policy, lrs.sched_policy);
	}
	hl_cache_core_destroy(r.c);
	hl_cache_layout_release(&r.l);
	hl_cache_restore_release(&lrs);
	hl_cache_dev_close(r.d);
}

static void test_lazy_write_before_load(void)
{
	lazy_write_before_load(0);
}

static void test_lazy_write_before_load_batched(void)
{
	lazy_write_before_load(4);
}

/*
 * The restore under a lock, as the loader thread runs it: it holds the
 * lock as a real-time thread and is an ordinary one again after each
 * batch (or, refused, says so), it gives way to a read that waits (here
 * one that never comes: 10 ms a batch, no more), it measures every hold,
 * and what it restores is the same.
 */
static void test_lazy_locked_holds(void)
{
	struct rig r;
	struct hl_cache_restore lrs;
	pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER, sum_lock = PTHREAD_MUTEX_INITIALIZER;
	atomic_uint waiting = 1;
	struct sched_param sp;
	int policy, prio;
	int64_t left;
	uint64_t steps = 0;
	struct timespec t0, t1;

	lazy_warm(&r);
	lazy_begin(&r, &lrs);
	CU_ASSERT_EQUAL_FATAL(pthread_getschedparam(pthread_self(), &policy, &sp), 0);
	prio = sp.sched_priority;
	lrs.sched_policy = policy;
	lrs.sched_prio = prio;
	lrs.rt_hold = policy != SCHED_FIFO && policy != SCHED_RR;
	lrs.waiters = &waiting;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	left = hl_cache_meta_load_step(r.d, &r.l, r.c, &lrs, &lock, &sum_lock, 2, 1);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	CU_ASSERT(left > 0);
	/* Each batch (one or two) followed by a wait for the read: 10 ms each, bounded. */
	CU_ASSERT(lrs.holds >= 1 && lrs.holds <= 2);
	CU_ASSERT_EQUAL(lrs.gave_way, lrs.holds);
	CU_ASSERT(lrs.gave_way_ns >= lrs.holds * 10000000ull);
	CU_ASSERT((uint64_t)(t1.tv_sec - t0.tv_sec) < 2);
	/* Back to what the thread was between holds (and the lock is free). */
	CU_ASSERT_EQUAL(pthread_getschedparam(pthread_self(), &policy, &sp), 0);
	CU_ASSERT_EQUAL(policy, lrs.sched_policy);
	CU_ASSERT_EQUAL(sp.sched_priority, prio);
	CU_ASSERT(lrs.rt_hold || lrs.rt_refused || lrs.sched_policy == SCHED_FIFO ||
	          lrs.sched_policy == SCHED_RR);
	CU_ASSERT_EQUAL(pthread_mutex_trylock(&lock), 0);
	pthread_mutex_unlock(&lock);
	/* The read has had the lock: no more waiting. */
	waiting = 0;
	while ((left = hl_cache_meta_load_step(r.d, &r.l, r.c, &lrs, &lock, &sum_lock, 0, 1)) > 0)
		steps++;
	CU_ASSERT_EQUAL(left, 0);
	CU_ASSERT(lrs.gave_way >= 1 && lrs.gave_way <= 2); /* (none since) */
	CU_ASSERT(lrs.holds > lrs.gave_way);
	CU_ASSERT_EQUAL(lrs.worst[0].wall_ns, lrs.max_hold_ns);
	for (unsigned i = 1; i < HL_CACHE_RS_WORST; i++)
		CU_ASSERT(lrs.worst[i].wall_ns <= lrs.worst[i - 1].wall_ns);
	CU_ASSERT(lrs.hold_ns >= lrs.max_hold_ns);
	CU_ASSERT_EQUAL(pthread_getschedparam(pthread_self(), &policy, &sp), 0);
	CU_ASSERT_EQUAL(policy, lrs.sched_policy);
	CU_ASSERT(lrs.restored > 10);
	CU_ASSERT_EQUAL(check_all_slots(&r, r.c), 0);
	CU_ASSERT_EQUAL(hl_cache_meta_load_finish(r.d, &r.l, r.c, &lock), 0);
	(void)steps;
	hl_cache_core_destroy(r.c);
	hl_cache_layout_release(&r.l);
	hl_cache_restore_release(&lrs);
	hl_cache_dev_close(r.d);
}

/*
 * The admission policy changed at run time (a config reload) while the
 * loader restores: the filter of blocks written meanwhile must survive it.
 * The memory a lost filter leaves behind is reused at once here (the
 * reactors allocate all the time), so a record written before it was
 * loaded would come back valid over the origin's newer data.
 */
static void test_lazy_admission_change(void)
{
	struct rig r;
	struct hl_cache_restore lrs;
	struct hl_cache_slot_rec rec;
	uint32_t last = HL_CACHE_NO_SLOT;
	uint8_t *reuse;
	int64_t left;

	lazy_warm(&r);
	lazy_begin(&r, &lrs);
	last = lazy_last_record(&r, &rec);
	left = hl_cache_meta_load_step(r.d, &r.l, r.c, &lrs, NULL, NULL, 1, 1);
	CU_ASSERT_FATAL(left > 0);
	do_write(&r, rec.lun, rec.block * BS, BS);
	CU_ASSERT_FALSE_FATAL(r.crashed);
	CU_ASSERT_EQUAL(hl_cache_core_set_admission(r.c, HL_ADMIT_ALWAYS, 0), 0);
	/* Whatever the filter's memory was, something else may own it now. */
	reuse = malloc(4096 * 24);
	CU_ASSERT_FATAL(reuse != NULL);
	memset(reuse, 0xa5, 4096 * 24);
	while ((left = hl_cache_meta_load_step(r.d, &r.l, r.c, &lrs, NULL, NULL, 1, 1)) > 0)
		;
	CU_ASSERT_EQUAL(left, 0);
	/* (fatal: a lost filter would also be freed twice by the finish) */
	CU_ASSERT_EQUAL_FATAL(check_all_slots(&r, r.c), 0);
	CU_ASSERT(lrs.filtered >= 1);
	CU_ASSERT_FALSE(hl_cache_core_slot_get(r.c, last, &rec));
	CU_ASSERT_EQUAL(hl_cache_meta_load_finish(r.d, &r.l, r.c, NULL), 0);
	free(reuse);
	hl_cache_core_destroy(r.c);
	hl_cache_layout_release(&r.l);
	hl_cache_restore_release(&lrs);
	hl_cache_dev_close(r.d);
}

/*
 * A lazy restore with I/O interleaved: after each page, writes (partial,
 * unaligned), reads (hits checked, misses not filled), invalidations and
 * syncs, then more I/O once the restore finished. writes: false for reads
 * only. @return true when the device died before the restore's finish
 * (from then on no slot was taken: every record of a block not touched is
 * still on the device).
 */
static bool lazy_scenario(struct rig *r, bool writes)
{
	struct hl_cache_restore lrs;
	int64_t left = 1;
	bool in_restore;

	if (lazy_try_begin(r, &lrs))
		return true;
	rs_seed_lazy();
	while (left > 0 && !r->crashed) {
		left = hl_cache_meta_load_step(r->d, &r->l, r->c, &lrs, NULL, NULL, 1, 1);
		if (left < 0) {
			r->crashed = true;
			break;
		}
		lazy_ops(r, writes, 12);
	}
	in_restore = r->crashed;
	struct hl_cache_stats st;
	if (!hl_cache_core_stats(r->c, -1, &st))
		lazy_fills += st.admissions; /* misses filled while restoring (rule 5) */
	if (!r->crashed && dev_io(r, hl_cache_meta_load_finish(r->d, &r->l, r->c, NULL)))
		hl_cache_core_restore_end(r->c);
	if (!r->crashed)
		lazy_ops(r, writes, 40);
	if (r->npend)
		finish_pending(r);
	hl_cache_restore_release(&lrs);
	return in_restore;
}

/* The (lun, block) of every record a load of the device restores, as a map. */
static void records_of(struct hl_cache_core *c, const struct hl_cache_layout *l,
                       bool held[NLUN][LUNBLK])
{
	memset(held, 0, sizeof(bool) * NLUN * LUNBLK);
	for (uint32_t s = 0; s < l->nslots; s++) {
		struct hl_cache_slot_rec rec;
		if (hl_cache_core_slot_get(c, s, &rec) && rec.lun < NLUN && rec.block < LUNBLK)
			held[rec.lun][rec.block] = true;
	}
}

struct crash_tally {
	uint64_t warm, cold, lost, ranged, runs;
	unsigned bad;
};

/*
 * Reboot after a crash: an eager load (a cold start when it is refused),
 * then check every restored sector against the origin and, when the crash
 * came during the restore, that every block of before (the records before
 * it) not touched since is restored.
 */
static void reboot_check(struct rig *r, bool in_restore, bool before[NLUN][LUNBLK],
                         struct crash_tally *t)
{
	struct hl_cache_core *c;
	int restored;
	uint32_t nr;

	hl_cache_layout_release(&r->l);
	hl_cache_dev_mem_reset(r->d);
	t->ranged += sb_current(r, &nr) == 4;
	t->runs++;
	c = new_core(&r->l);
	restored = hl_cache_meta_load(r->d, c, &r->l);
	if (restored == -ENODATA) {
		t->cold++;
		CU_ASSERT_FATAL(hl_cache_meta_format(r->d, BS, &r->l) == 0);
	} else {
		bool after[NLUN][LUNBLK];
		CU_ASSERT_FATAL(restored >= 0);
		t->warm += restored > 0;
		t->bad += check_all_slots(r, c);
		records_of(c, &r->l, after);
		for (uint16_t lun = 0; in_restore && lun < NLUN; lun++)
			for (uint64_t b = 0; b < LUNBLK; b++)
				t->lost += before[lun][b] && !touched[lun][b] && !after[lun][b];
	}
	hl_cache_core_destroy(c);
	hl_cache_layout_release(&r->l);
}

/* The rig's device as an image, with the origin and the touched blocks. */
struct lazy_img {
	uint8_t *dev;
	uint32_t org[NLUN][LUNSECT];
	bool tch[NLUN][LUNBLK];
};

static void img_save(struct rig *r, struct lazy_img *m)
{
	hl_cache_dev_mem_reset(r->d);
	m->dev = malloc(r->d->size);
	CU_ASSERT_FATAL(m->dev != NULL);
	CU_ASSERT_FATAL(r->d->ops->pread(r->d, m->dev, r->d->size, 0) == 0);
	memcpy(m->org, origin, sizeof(origin));
	memcpy(m->tch, touched, sizeof(touched));
}

/* Back to image m; the device dies at its n-th write from now (torn one way or another). */
static void img_restore(struct rig *r, const struct lazy_img *m, uint64_t n)
{
	static const size_t torn[] = {0, 512, 1000, 2048, 4095};

	hl_cache_dev_mem_reset(r->d);
	CU_ASSERT_FATAL(r->d->ops->pwrite(r->d, m->dev, r->d->size, 0) == 0);
	hl_cache_dev_mem_reset(r->d);
	memcpy(origin, m->org, sizeof(origin));
	memcpy(touched, m->tch, sizeof(touched));
	r->crashed = false;
	r->bad_hits = 0;
	r->npend = 0;
	if (n != UINT64_MAX)
		hl_cache_dev_mem_fail_at(r->d, hl_cache_dev_mem_writes(r->d) + n, torn[n % 5]);
}

/* Device writes of a scenario that does not crash, from image m (left as it ends). */
static uint64_t lazy_count_writes(struct rig *r, const struct lazy_img *m, bool writes)
{
	uint64_t base;

	img_restore(r, m, UINT64_MAX);
	base = hl_cache_dev_mem_writes(r->d);
	lazy_scenario(r, writes);
	CU_ASSERT_FALSE_FATAL(r->crashed);
	CU_ASSERT_EQUAL(r->bad_hits, 0);
	hl_cache_core_destroy(r->c);
	hl_cache_layout_release(&r->l);
	r->c = NULL;
	return hl_cache_dev_mem_writes(r->d) - base;
}

/* The records a load of the device restores (on a copy). */
static void records_on_device(struct rig *r, bool held[NLUN][LUNBLK])
{
	int n;
	struct hl_cache_core *c = load_copy(r, false, &n);

	CU_ASSERT_FATAL(n > 0);
	records_of(c, &r->l, held);
	hl_cache_core_destroy(c);
}

/*
 * After a crash during a restore that left the blocks written in the
 * superblock: a second restore from there, killed at every m-th device
 * write (step), each followed by a reboot and its checks.
 */
static void lazy_second_crashes(struct rig *r, bool before[NLUN][LUNBLK], uint64_t step,
                                struct crash_tally *t)
{
	struct lazy_img m2;
	uint64_t total;

	img_save(r, &m2);
	hl_cache_layout_release(&r->l); /* (its nslots stay: new_core's) */
	total = lazy_count_writes(r, &m2, true);
	for (uint64_t m = 0; m <= total; m += step) {
		bool in;
		img_restore(r, &m2, m);
		in = lazy_scenario(r, true);
		t->bad += (unsigned)r->bad_hits;
		hl_cache_core_destroy(r->c);
		r->c = NULL;
		reboot_check(r, in, before, t);
		if (t->bad || t->lost) {
			fprintf(stderr, "lazy restore: a second crash at write %llu: %u stale, %llu lost\n",
			        (unsigned long long)m, t->bad, (unsigned long long)t->lost);
			break;
		}
	}
	img_restore(r, &m2, UINT64_MAX);
	free(m2.dev);
}

static void test_lazy_crash_every_write(void)
{
	for (int writes = 1; writes >= 0; writes--) {
		struct rig r;
		struct lazy_img m;
		struct crash_tally t = {0}, t2 = {0};
		bool before[NLUN][LUNBLK];
		uint64_t total;

		lazy_warm(&r);
		memset(touched, 0, sizeof(touched));
		records_on_device(&r, before);
		img_save(&r, &m);
		lazy_fills = 0;
		total = lazy_count_writes(&r, &m, writes);
		fprintf(stderr, "\n  lazy writes=%d: %llu device writes, %llu misses filled while restoring",
		        writes, (unsigned long long)total, (unsigned long long)lazy_fills);
		CU_ASSERT(total > (writes ? 20u : 1u));

		for (uint64_t n = 0; n <= total; n++) {
			bool in;
			img_restore(&r, &m, n);
			in = lazy_scenario(&r, writes);
			t.bad += (unsigned)r.bad_hits;
			hl_cache_core_destroy(r.c);
			r.c = NULL;
			/* Every 4th crash during a restore with writes: a second restore, killed too. */
			if (writes && in && n % 4 == 2)
				lazy_second_crashes(&r, before, 3, &t2);
			reboot_check(&r, in, before, &t);
			if (t.bad || t.lost || t2.bad || t2.lost) {
				fprintf(stderr, "lazy restore: crash at write %llu: %u stale, %llu lost\n",
				        (unsigned long long)n, t.bad, (unsigned long long)t.lost);
				break;
			}
		}
		CU_ASSERT_EQUAL(t.bad, 0);
		CU_ASSERT_EQUAL(t2.bad, 0);
		/* Every crash keeps the cache warm, written while restoring or not ... */
		CU_ASSERT_EQUAL(t.cold, 0);
		CU_ASSERT_EQUAL(t.warm, total + 1);
		/* ... with every block not written: */
		CU_ASSERT_EQUAL(t.lost, 0);
		if (writes) {
			/* Crashes after a write left the blocks written in the superblock. */
			CU_ASSERT(t.ranged > 0);
			CU_ASSERT(t2.runs > 10);
			CU_ASSERT(t2.ranged > 0);
			CU_ASSERT_EQUAL(t2.cold, 0);
			CU_ASSERT_EQUAL(t2.lost, 0);
		} else {
			CU_ASSERT_EQUAL(t.ranged, 0);
		}
		if (getenv("HL_DEBUG_UT"))
			fprintf(stderr,
			        "lazy writes=%d: %llu device writes, %llu warm, %llu cold, %llu ranged; "
			        "second restores: %llu crashes, %llu warm, %llu cold, %llu ranged\n",
			        writes, (unsigned long long)total, (unsigned long long)t.warm,
			        (unsigned long long)t.cold, (unsigned long long)t.ranged,
			        (unsigned long long)t2.runs, (unsigned long long)t2.warm,
			        (unsigned long long)t2.cold, (unsigned long long)t2.ranged);
		free(m.dev);
		hl_cache_dev_close(r.d);
	}
}

/*
 * Fills while restoring (rule 5): a device warm with LUN 0's blocks
 * 0-149 (record pages 0 and 1 marked, 2 and 3 claiming nothing). Before
 * the loader reads a page, misses of LUN 1 fill the pages that claimed
 * nothing and misses of LUN 0's blocks 130-149 (records in page 1, not
 * read yet) fill them too: the loader later finds those records
 * duplicates and drops them as claimed. Between pages: more fills, hits,
 * writes to blocks filled or still claimed on the device, syncs.
 * @return 0, or -1 when the device died.
 */
static int lazy_fill_scenario(struct rig *r, uint64_t *fills, uint64_t *dups)
{
	struct hl_cache_restore lrs;
	struct hl_cache_stats st;
	int64_t left = 1;

	r->c = new_core(&r->l);
	if (dev_io(r, hl_cache_meta_load_begin(r->d, r->c, &r->l, &lrs)))
		return -1;
	for (uint64_t b = 0; b < 60 && !r->crashed; b++)
		do_read(r, 1, b * BS, BS, b % 3 == 0);
	for (uint64_t b = 130; b < 150 && !r->crashed; b++)
		do_read(r, 0, b * BS, BS, b % 4 == 0);
	for (uint64_t k = 0; left > 0 && !r->crashed; k++) {
		left = hl_cache_meta_load_step(r->d, &r->l, r->c, &lrs, NULL, NULL, 1, 1);
		if (left < 0) {
			r->crashed = true;
			break;
		}
		for (uint64_t b = 150 + k * 30; b < 180 + k * 30 && !r->crashed; b++)
			do_read(r, 0, b * BS, BS, b % 5 == 0);
		for (uint64_t b = 90 + k * 20; b < 110 + k * 20 && !r->crashed; b++)
			do_read(r, 0, b * BS, BS, false);
		do_write(r, 0, (135 + k * 3) * BS + 512, 3 * 512);
		do_write(r, 0, (100 + k * 7) * BS, BS);
		do_write(r, 1, k * 5 * BS, BS);
		if (k % 2 && !r->crashed)
			dev_io(r, hl_cache_meta_sync(r->d, &r->l, r->c));
	}
	if (!hl_cache_core_stats(r->c, -1, &st))
		*fills += st.admissions;
	*dups += lrs.dropped;
	if (!r->crashed && dev_io(r, hl_cache_meta_load_finish(r->d, &r->l, r->c, NULL)))
		hl_cache_core_restore_end(r->c);
	for (uint64_t b = 200; b < 240 && !r->crashed; b++)
		do_read(r, 1, b * BS, BS, b % 2 == 0);
	if (r->npend)
		finish_pending(r);
	if (!r->crashed)
		dev_io(r, hl_cache_meta_sync(r->d, &r->l, r->c));
	hl_cache_restore_release(&lrs);
	return r->crashed ? -1 : 0;
}

static void test_lazy_fill_crash_every_write(void)
{
	uint64_t total, base, fills = 0, dups = 0, crashes = 0, warm = 0;
	unsigned bad = 0;
	struct lazy_img m;
	struct rig r;
	int restored;

	rig_start(&r, 8u << 20);
	for (uint64_t b = 0; b < 150; b++)
		do_read(&r, 0, b * BS, BS, false);
	CU_ASSERT_FALSE_FATAL(r.crashed);
	CU_ASSERT_EQUAL_FATAL(hl_cache_meta_close(r.d, &r.l, r.c), 0);
	hl_cache_core_destroy(r.c);
	r.c = NULL;
	hl_cache_layout_release(&r.l);
	memset(touched, 0, sizeof(touched));
	img_save(&r, &m);

	img_restore(&r, &m, UINT64_MAX);
	base = hl_cache_dev_mem_writes(r.d);
	CU_ASSERT_EQUAL_FATAL(lazy_fill_scenario(&r, &fills, &dups), 0);
	total = hl_cache_dev_mem_writes(r.d) - base;
	CU_ASSERT_EQUAL(r.bad_hits, 0);
	/* Misses were filled while restoring, and duplicates of them dropped. */
	CU_ASSERT(fills > 100);
	CU_ASSERT(dups >= 10);
	CU_ASSERT(summary_covers_claims(&r));
	CU_ASSERT_EQUAL(recover_and_check(&r, &restored), 0);
	CU_ASSERT(restored > 150);
	hl_cache_core_destroy(r.c);
	r.c = NULL;
	hl_cache_layout_release(&r.l);
	fprintf(stderr, "\n  fills while restoring: %llu, duplicates dropped: %llu, %llu device writes",
	        (unsigned long long)fills, (unsigned long long)dups, (unsigned long long)total);

	for (uint64_t n = 0; n <= total; n++) {
		img_restore(&r, &m, n);
		lazy_fill_scenario(&r, &fills, &dups);
		crashes += r.crashed;
		bad += (unsigned)r.bad_hits;
		if (!summary_covers_claims(&r))
			bad++;
		bad += recover_and_check(&r, &restored);
		warm += restored > 0;
		hl_cache_core_destroy(r.c);
		r.c = NULL;
		hl_cache_layout_release(&r.l);
		if (bad) {
			fprintf(stderr, "fills while restoring: stale after a crash at write %llu\n",
			        (unsigned long long)n);
			break;
		}
	}
	CU_ASSERT_EQUAL(bad, 0);
	CU_ASSERT_EQUAL(crashes, total);
	CU_ASSERT_EQUAL(warm, total + 1);
	fprintf(stderr, "; a crash at each: %u stale, %llu warm", bad, (unsigned long long)warm);
	free(m.dev);
	hl_cache_dev_close(r.d);
}

/* A clean stop in the middle of a restore: warm, without the blocks written meanwhile. */
static void test_lazy_clean_stop(void)
{
	for (int writes = 0; writes < 2; writes++) {
		struct rig r;
		struct hl_cache_restore lrs;
		struct hl_cache_slot_rec rec;
		uint32_t last;
		int restored;

		lazy_warm(&r);
		lazy_begin(&r, &lrs);
		last = lazy_last_record(&r, &rec);
		CU_ASSERT(hl_cache_meta_load_step(r.d, &r.l, r.c, &lrs, NULL, NULL, 1, 1) > 0);
		if (writes)
			do_write(&r, rec.lun, rec.block * BS, BS);
		else
			do_read(&r, rec.lun, rec.block * BS, BS, false);
		CU_ASSERT_EQUAL(hl_cache_meta_close(r.d, &r.l, r.c), 0);
		hl_cache_core_destroy(r.c);
		hl_cache_layout_release(&r.l);
		r.c = new_core(&r.l);
		/* "pending" with ranges carries version 4: any hotlund before it refuses it. */
		uint8_t sb[8192];
		CU_ASSERT_FATAL(r.d->ops->pread(r.d, sb, sizeof(sb), 0) == 0);
		CU_ASSERT_EQUAL(sb[8] == 4 || sb[4096 + 8] == 4, writes == 1);
		restored = hl_cache_meta_load(r.d, r.c, &r.l);
		CU_ASSERT(restored > 10);
		CU_ASSERT_EQUAL(check_all_slots(&r, r.c), 0);
		/* The record of the block written is dropped, the rest kept. */
		CU_ASSERT_EQUAL(hl_cache_core_slot_get(r.c, last, &rec), writes == 0);
		hl_cache_layout_release(&r.l);
		hl_cache_core_destroy(r.c);
		hl_cache_restore_release(&lrs);
		hl_cache_dev_close(r.d);
	}
}

/* The filter merges neighbours past its bound and never forgets a block. */
static void test_lazy_filter_bound(void)
{
	struct hl_cache_core *c;
	struct hl_cache_layout l = {.nslots = 64};
	struct hl_cache_slot_rec rec = {0};

	c = new_core(&l);
	hl_cache_core_restore_begin(c);
	for (uint64_t b = 0; b < 20000; b++)
		hl_cache_core_invalidate(c, 1, (b * 7) * BS, BS);
	CU_ASSERT(hl_cache_core_restore_need_mark(c));
	for (uint64_t b = 0; b < 20000; b++) {
		rec.lun = 1;
		rec.block = b * 7;
		memset(rec.valid, 1, 1);
		CU_ASSERT_EQUAL(hl_cache_core_slot_restore(c, (uint32_t)(b % 64), &rec), -ESTALE);
	}
	/* Another LUN is untouched. */
	rec.lun = 0;
	rec.block = 7;
	CU_ASSERT_EQUAL(hl_cache_core_slot_restore(c, 3, &rec), 0);
	hl_cache_core_restore_end(c);
	hl_cache_core_destroy(c);
}

/*
 * More ranges written while restoring than a superblock holds: its copy
 * merges neighbours (a crash keeps the rest warm); more LUNs than it holds
 * (disks attached while restoring): it says "all" and a crash is cold.
 */
static void test_lazy_durable_bound(void)
{
	for (int luns = 0; luns < 2; luns++) {
		struct rig r;
		struct hl_cache_restore lrs;
		struct hl_cache_slot_rec rec;
		uint32_t last, nr, ver;
		int restored;

		lazy_warm(&r);
		lazy_begin(&r, &lrs);
		last = lazy_last_record(&r, &rec);
		CU_ASSERT_FATAL(hl_cache_meta_load_step(r.d, &r.l, r.c, &lrs, NULL, NULL, 1, 1) > 0);
		if (luns) {
			/* Disks attached and detached (the core holds fewer at once). */
			for (uint16_t id = 100; id < 400; id++) {
				CU_ASSERT_FATAL(hl_cache_core_lun_add(r.c, id, 0) == 0);
				CU_ASSERT_FATAL(hl_cache_core_lun_remove(r.c, id) == 0);
			}
		} else {
			/* 600 ranges of one LUN, past what the origin of the rig holds. */
			for (uint64_t k = 0; k < 600; k++)
				hl_cache_core_invalidate(r.c, 1, (1000 + 3 * k) * BS, BS);
		}
		CU_ASSERT(hl_cache_core_write_needs_sync(r.c, rec.lun, rec.block * BS, BS));
		do_write(&r, rec.lun, rec.block * BS, BS);
		CU_ASSERT_FALSE_FATAL(r.crashed);
		ver = sb_current(&r, &nr);
		if (luns) {
			CU_ASSERT_EQUAL(ver, 3);
			/* "All" is durable: no write needs to sync for the filter any more. */
			CU_ASSERT_FALSE(hl_cache_core_write_needs_sync(r.c, 0, 77 * BS, BS));
		} else {
			CU_ASSERT_EQUAL(ver, 4);
			CU_ASSERT(nr > 150 && nr <= 221);
			/* The coarse copy covers the gaps too: a write there needs no new copy. */
			CU_ASSERT_FALSE(hl_cache_core_write_needs_sync(r.c, 1, (1000 + 1) * BS, BS));
		}
		/* A crash now (no close). */
		hl_cache_core_destroy(r.c);
		hl_cache_layout_release(&r.l);
		hl_cache_dev_mem_reset(r.d);
		r.c = new_core(&r.l);
		restored = hl_cache_meta_load(r.d, r.c, &r.l);
		if (luns) {
			CU_ASSERT_EQUAL(restored, -ENODATA);
		} else {
			CU_ASSERT(restored > 10);
			CU_ASSERT_EQUAL(check_all_slots(&r, r.c), 0);
			CU_ASSERT_FALSE(hl_cache_core_slot_get(r.c, last, &rec));
			CU_ASSERT_EQUAL(sb_current(&r, &nr), 2);
			hl_cache_layout_release(&r.l);
		}
		hl_cache_core_destroy(r.c);
		hl_cache_restore_release(&lrs);
		hl_cache_dev_close(r.d);
	}
}

/* Superblock range lists that are damaged never restore anything. */
static void test_lazy_bad_ranges(void)
{
	for (int kind = 0; kind < 6; kind++) {
		struct rig r;
		struct hl_cache_restore lrs;
		uint8_t *sb = NULL;
		uint32_t nr, crc;

		lazy_warm(&r);
		lazy_begin(&r, &lrs);
		CU_ASSERT_FATAL(hl_cache_meta_load_step(r.d, &r.l, r.c, &lrs, NULL, NULL, 1, 1) > 0);
		do_write(&r, 0, 0, BS);
		do_write(&r, 0, 40 * BS, BS);
		CU_ASSERT_EQUAL_FATAL(sb_current(&r, &nr), 4);
		CU_ASSERT_EQUAL_FATAL(nr, 2);
		hl_cache_core_destroy(r.c);
		hl_cache_layout_release(&r.l);
		hl_cache_restore_release(&lrs);
		/*
		 * Both copies the same, then damaged: unsorted, lo > hi, a count past
		 * the room, overlapping ranges, a last block past 2^48 - 1 (the top
		 * of the address space), or no range at all.
		 */
		CU_ASSERT_FATAL(posix_memalign((void **)&sb, 4096, 8192) == 0);
		CU_ASSERT_FATAL(r.d->ops->pread(r.d, sb, 8192, 0) == 0);
		uint64_t s0, s1;
		memcpy(&s0, sb + 56, 8);
		memcpy(&s1, sb + 4096 + 56, 8);
		if (s0 < s1)
			memcpy(sb, sb + 4096, 4096);
		if (kind == 0) {
			uint8_t t[18];
			memcpy(t, sb + 112, 18);
			memcpy(sb + 112, sb + 130, 18);
			memcpy(sb + 130, t, 18);
		} else if (kind == 1) {
			uint64_t lo = 50;
			memcpy(sb + 112 + 2, &lo, 8); /* lo 50 > hi 0 */
		} else if (kind == 2) {
			nr = 300;
			memcpy(sb + 104, &nr, 4);
		} else if (kind == 3) {
			uint64_t lo = 0;
			memcpy(sb + 130 + 2, &lo, 8); /* [0, 40] over [0, 0] */
		} else if (kind == 4) {
			uint64_t hi = UINT64_MAX;
			memcpy(sb + 130 + 10, &hi, 8);
		} else {
			nr = 0;
			memcpy(sb + 104, &nr, 4);
		}
		crc = ut_crc32c(sb, 4092);
		memcpy(sb + 4092, &crc, 4);
		memcpy(sb + 4096, sb, 4096);
		CU_ASSERT_FATAL(r.d->ops->pwrite(r.d, sb, 8192, 0) == 0);
		free(sb);
		r.c = new_core(&r.l);
		CU_ASSERT_EQUAL(hl_cache_meta_load(r.d, r.c, &r.l), -ENODATA);
		hl_cache_core_destroy(r.c);
		hl_cache_layout_release(&r.l);
		hl_cache_dev_close(r.d);
	}
}

/*
 * The sync's persisted phase lets the reactors in every 64 record pages
 * (cache_meta_sync_locked: unlock, sched_yield, lock). Between two holds
 * the first 64 pages are persisted and the rest not yet. What a reactor
 * does then must see the snapshot's claims as on the device either way:
 * a write to a claimed sector of a page not persisted yet, and of one
 * persisted already, syncs first; an invalidated block of a page not
 * persisted yet stays a stale claim after the sync (its persisting has
 * the snapshot's epoch, older than the drop), and the fill that reuses
 * its slot takes a barrier. Then the gateway dies: nothing stale.
 * sched_yield is this program's own: in a sync with a lock it is only
 * called between two holds, where the hook acts as a reactor would.
 */
int cache_meta_sync_locked(struct hl_cache_dev *d, struct hl_cache_layout *l,
                           struct hl_cache_core *c, pthread_mutex_t *lock);

static void (*yield_hook)(void);
static unsigned yields;

int sched_yield(void)
{
	void (*f)(void) = yield_hook;

	yields++;
	yield_hook = NULL;
	if (f)
		f();
	return 0;
}

#define SPLIT_PAGES 66u
static struct rig *split_rig;
static pthread_mutex_t split_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t split_slot[3]; /* page 65: written, page 65: invalidated, page 10: written */
static uint64_t split_block[3];
static struct hl_cache_io split_wios[2][16];
static int split_wn[2];
static bool split_wsync[2], split_inv_sync, split_fill_barrier, split_hooked;

/* The block read into slot i (slots are taken in order while all are FREE). */
static uint64_t split_block_of(uint32_t i, uint32_t per)
{
	if (i == 10 * per + 5)
		return 1;
	if (i >= 65 * per)
		return 10 + (i - 65 * per); /* < 300: the origin model tracks them */
	return 300 + i;
}

static void split_write_begin(int k, uint64_t block)
{
	struct rig *r = split_rig;
	uint64_t off = block * BS + HL_CACHE_SECTOR;

	split_wsync[k] = hl_cache_core_write_needs_sync(r->c, 0, off, HL_CACHE_SECTOR);
	split_wn[k] = hl_cache_core_write_begin(r->c, 0, off, HL_CACHE_SECTOR, split_wios[k], 16);
	CU_ASSERT_FATAL(split_wn[k] >= 0);
	for (int i = 0; i < split_wn[k]; i++)
		split_wsync[k] |= split_wios[k][i].meta_barrier != 0;
	touch(0, off, HL_CACHE_SECTOR);
}

/* After the sync it waited for: the origin, then the cache (as do_write). */
static void split_write_end(int k, uint64_t block)
{
	struct rig *r = split_rig;
	uint64_t sect = (block * BS + HL_CACHE_SECTOR) / HL_CACHE_SECTOR;

	origin[0][sect]++;
	for (int i = 0; i < split_wn[k]; i++) {
		struct hl_cache_io *io = &split_wios[k][i];
		hl_cache_core_write_end(r->c, 0, io, true);
		if (!io->fill_nsect)
			continue;
		bool ok = hl_cache_core_io_start(r->c, 0, io) &&
		          put_data(r, 0, io->slot, io->block, io->fill_first, io->fill_nsect) == 0;
		hl_cache_core_io_end(r->c, 0, io, ok);
	}
}

static void split_between_holds(void)
{
	struct rig *r = split_rig;
	struct hl_cache_io ios[16];
	uint64_t inv = split_block[1];
	int n;

	pthread_mutex_lock(&split_lock); /* (a reactor: the sync does not hold it here) */
	split_hooked = true;
	split_write_begin(0, split_block[0]); /* page 65: claimed, not persisted yet */
	split_write_begin(1, split_block[2]); /* page 10: claimed, persisted */
	hl_cache_core_invalidate(r->c, 0, inv * BS, BS);
	touch(0, inv * BS, BS);
	split_inv_sync = hl_cache_core_write_needs_sync(r->c, 0, inv * BS, BS);
	/* Every slot is taken but the invalidated one: a new block's miss takes it. */
	n = hl_cache_core_read(r->c, 1, 0, BS, ios, 16);
	CU_ASSERT_FATAL(n == 1);
	CU_ASSERT_EQUAL(ios[0].slot, split_slot[1]);
	split_fill_barrier = ios[0].meta_barrier != 0;
	memcpy(r->pend, ios, sizeof(ios[0]));
	r->npend = 1;
	r->pend_lun = 1;
	pthread_mutex_unlock(&split_lock);
}

static void test_sync_split_holds(void)
{
	struct hl_cache_layout l;
	uint64_t dev = 0;
	uint32_t per = 0;
	struct rig r;
	int restored;

	memset(touched, 0, sizeof(touched));
	/* A device of 66 record pages, the last one holding 100 slots. */
	for (uint64_t mib = 64; mib < 512 && !dev; mib++) {
		for (uint64_t sz = mib << 20; sz < (mib + 1) << 20; sz += BS) {
			CU_ASSERT_FATAL(hl_cache_layout_compute(sz, BS, &l) == 0);
			per = 4096 / l.rec_size;
			bool fits = l.nslots == 65ull * per + 100;
			hl_cache_layout_release(&l);
			if (fits) {
				dev = sz;
				break;
			}
		}
	}
	CU_ASSERT_FATAL(dev != 0);
	rig_start(&r, dev);
	CU_ASSERT_EQUAL_FATAL(r.l.nslots, 65ull * per + 100);
	for (uint32_t i = 0; i < r.l.nslots; i++) {
		do_read(&r, 0, split_block_of(i, per) * BS, BS, false);
		CU_ASSERT_EQUAL_FATAL(hl_cache_core_peek(r.c, 0, split_block_of(i, per), NULL), i);
	}
	split_slot[0] = 65 * per + 3;
	split_slot[1] = 65 * per + 7;
	split_slot[2] = 10 * per + 5;
	for (int k = 0; k < 3; k++)
		split_block[k] = split_block_of(split_slot[k], per);
	CU_ASSERT_FALSE(r.crashed);

	/* One sync of all 66 pages: the hook runs before page 64 is persisted. */
	split_rig = &r;
	split_hooked = false;
	yield_hook = split_between_holds;
	yields = 0;
	CU_ASSERT_EQUAL_FATAL(cache_meta_sync_locked(r.d, &r.l, r.c, &split_lock), 0);
	yield_hook = NULL;
	CU_ASSERT_TRUE_FATAL(split_hooked);
	CU_ASSERT_EQUAL(yields, 1); /* 66 pages: one yield, after 64 */
	CU_ASSERT_TRUE(split_wsync[0]);
	CU_ASSERT_TRUE(split_wsync[1]);
	CU_ASSERT_TRUE(split_inv_sync);
	CU_ASSERT_TRUE(split_fill_barrier);
	/* The drop came after the snapshot: its claim outlives page 65's persisting. */
	CU_ASSERT_TRUE(hl_cache_core_write_needs_sync(r.c, 0, split_block[1] * BS, BS));

	/* The syncs the writes and the invalidation waited for, then the origin. */
	CU_ASSERT_EQUAL_FATAL(hl_cache_meta_sync(r.d, &r.l, r.c), 0);
	split_write_end(0, split_block[0]);
	split_write_end(1, split_block[2]);
	for (uint64_t s = split_block[1] * SPB; s < (split_block[1] + 1) * SPB; s++)
		origin[0][s] += 1000;
	CU_ASSERT_FALSE(hl_cache_core_write_needs_sync(r.c, 0, split_block[1] * BS, BS));
	/* The fill into the invalidated block's slot: barrier, data. */
	finish_pending(&r);
	CU_ASSERT_FALSE(r.crashed);
	CU_ASSERT_EQUAL(r.bad_hits, 0);
	/* The gateway dies now: no further sync. */
	CU_ASSERT_EQUAL(recover_and_check(&r, &restored), 0);
	CU_ASSERT(restored > (int)(60 * per));
	hl_cache_core_destroy(r.c);
	hl_cache_layout_release(&r.l);
	hl_cache_dev_close(r.d);
}

static const struct hl_test tests[] = {
    {"layout of records and data", test_layout},
    {"warm restart after a clean close", test_warm_restart},
    {"claims of a sync in flight need barriers", test_claims_of_a_sync_in_flight},
    {"a sync's persisting in holds of 64 pages: claims hold between the holds",
     test_sync_split_holds},
    {"records dropped at load still claim until rewritten", test_dropped_records_still_claim},
    {"a write to a block whose dropped record still claims it syncs first",
     test_dropped_claim_then_write},
    {"a second fill of a newly taken slot waits for its barrier",
     test_second_fill_before_take_barrier},
    {"torn, foreign and missing superblocks", test_bad_superblock},
    {"crash (torn write) at every device write: nothing stale", test_torn_write_every_step},
    {"a big drop, then writes, refills, syncs: a crash at each write, nothing stale",
     test_big_drop_crash_every_write},
    {"stale claims not tracked (no memory): a crash at each write across the overflow and its "
     "recovery, nothing stale; writes direct again after",
     test_stale_overflow_crash_every_write},
    {"a big drop in chunks with I/O and syncs between them: never served, a crash at each write",
     test_chunked_drop},
    {"write after an eviction whose record is not rewritten yet", test_stale_claim_after_eviction},
    {"a second write to a sector whose unclaim is pending syncs too",
     test_second_write_before_barrier},
    {"format writes the superblocks and the summary, no record page",
     test_format_writes_no_records},
    {"records of an earlier format or junk are never restored", test_leftover_records_never_restored},
    {"a cache of format version 1 starts cold", test_version_1_starts_cold},
    {"the page summary follows the claims", test_summary_shrinks},
    {"O_DIRECT file device", test_file_device},
    {"lazy restore: a write before its record is loaded drops the record",
     test_lazy_write_before_load},
    {"lazy restore: the same restored 4 pages a hold under a lock, real-time holds",
     test_lazy_write_before_load_batched},
    {"lazy restore: under a lock: real-time holds, gives way to a waiting read, measured",
     test_lazy_locked_holds},
    {"lazy restore: an admission change keeps the written blocks' filter",
     test_lazy_admission_change},
    {"lazy restore: crash at every device write, with and without writes", test_lazy_crash_every_write},
    {"lazy restore: a clean stop in the middle", test_lazy_clean_stop},
    {"lazy restore: misses filled while restoring, a crash at every write: nothing stale",
     test_lazy_fill_crash_every_write},
    {"lazy restore: the bounded filter never forgets a block", test_lazy_filter_bound},
    {"lazy restore: the superblock's copy of the filter: merged, or all (cold)",
     test_lazy_durable_bound},
    {"lazy restore: a damaged list of written blocks is never trusted", test_lazy_bad_ranges},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("cache_meta", tests);
}
