/*
 * cache_meta_ut_lib.h - what cache_meta_ut and cache_lazy_ut share (each one
 * program that includes this once): on-device metadata: layout, format/load round trip,
 * warm restart after a clean close, foreign or damaged superblocks, and
 * recovery after a crash that tears the Nth device write, for every N of a
 * workload of reads, fills, evictions, write-through updates (with
 * read-modify-write of partial sectors), invalidations and syncs: no
 * recovered sector may ever differ from the origin.
 */
#ifndef HOTLUN_TESTS_CACHE_META_UT_LIB_H
#define HOTLUN_TESTS_CACHE_META_UT_LIB_H

/* each program uses part of what is here */
#define HL_UT_UNUSED __attribute__((unused))

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
static HL_UT_UNUSED uint32_t origin[NLUN][LUNSECT];
/* Blocks a write or an invalidation touched (even one that never reached the origin). */
#define LUNBLK (LUNSECT / SPB + 8)
static HL_UT_UNUSED bool touched[NLUN][LUNBLK];

static HL_UT_UNUSED void touch(uint16_t lun, uint64_t off, uint64_t len)
{
	for (uint64_t b = off / BS; b <= (off + len - 1) / BS && b < LUNBLK; b++)
		touched[lun][b] = true;
}

static HL_UT_UNUSED void fill_sector(uint8_t *p, uint16_t lun, uint64_t sect, uint32_t ver)
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

static HL_UT_UNUSED struct hl_cache_core *new_core(const struct hl_cache_layout *l)
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

static HL_UT_UNUSED int dev_io(struct rig *r, int rc)
{
	if (rc && getenv("HL_DEBUG_UT"))
		fprintf(stderr, "device op failed: %d\n", rc);
	if (rc)
		r->crashed = true;
	return rc;
}

/* Write the origin's current content of sectors [first, first+n) of block into slot. */
static HL_UT_UNUSED int put_data(struct rig *r, uint16_t lun, uint32_t slot, uint64_t block, uint32_t first,
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
static HL_UT_UNUSED unsigned check_data(struct rig *r, uint16_t lun, uint32_t slot, uint64_t block,
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
static HL_UT_UNUSED void finish_read(struct rig *r, uint16_t lun, struct hl_cache_io *ios, int n)
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

static HL_UT_UNUSED void finish_pending(struct rig *r)
{
	int n = r->npend;

	r->npend = 0;
	finish_read(r, r->pend_lun, r->pend, n);
}

/* The engine's read path; defer: the fill completes after the next operation. */
static HL_UT_UNUSED void do_read(struct rig *r, uint16_t lun, uint64_t off, uint64_t len, bool defer)
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
static HL_UT_UNUSED void do_write(struct rig *r, uint16_t lun, uint64_t off, uint64_t len)
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

static HL_UT_UNUSED void do_invalidate(struct rig *r, uint16_t lun, uint64_t off, uint64_t len)
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

static HL_UT_UNUSED uint64_t rs;
static HL_UT_UNUSED uint64_t rnd(void)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return rs;
}

/* A deterministic workload; stops early once the device "crashed". */
static HL_UT_UNUSED void workload(struct rig *r, unsigned ops)
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

static HL_UT_UNUSED void rig_start(struct rig *r, uint64_t dev_size)
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
static HL_UT_UNUSED unsigned recover_and_check(struct rig *r, int *restored)
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
static HL_UT_UNUSED struct hl_cache_dev *dev_clone(struct hl_cache_dev *d)
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
static HL_UT_UNUSED struct hl_cache_core *load_copy(struct rig *r, bool all_pages, int *restored)
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
static HL_UT_UNUSED bool summary_covers_claims(struct rig *r)
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

/* Bitwise CRC-32C, as the superblock carries it. */
static HL_UT_UNUSED uint32_t ut_crc32c(const uint8_t *p, size_t len)
{
	uint32_t c = ~0u;

	while (len--) {
		c ^= *p++;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
	}
	return ~c;
}

#endif
