/*
 * engine_ub_ut.c - the cache engine with the RAM update buffer, the write
 * policy changed live, stops and crashes with buffered updates, maps of
 * more than 256 disks and LUN ids handed out again (fixture in
 * engine_ut_lib.h).
 */
#include "engine_ut_lib.h"

/* ---- RAM update buffer ---- */

/* Run test with the update buffer off: the device-update paths. */
static void with_ub_off(void (*test)(void))
{
	g_ub = HL_CACHE_UPDATE_BUFFER_OFF;
	test();
	g_ub = 0;
}

static void test_write_update_ub_off(void)
{
	with_ub_off(test_write_update);
}

static void test_rmw_misaligned_ub_off(void)
{
	with_ub_off(test_rmw_misaligned);
}

static void test_rmw_race_ub_off(void)
{
	with_ub_off(test_rmw_race);
}

/*
 * Replace the cache's data origin by a fake device d (memory, holds on
 * demand) before any I/O: the tests see what reaches the device and when.
 * Returns the real one, which dev_restore() puts back before the close.
 */
static struct hl_origin *ub_dev_swap(struct hl_cache *c, struct fake *d)
{
	struct hl_origin *real = c->data;

	fake_init(d, 8 * M, 0);
	c->data = fake_origin(d, "fake:ssd");
	return real;
}

/* Pending (buffered) bytes of the block's slot. */
static uint64_t ub_pending(struct hl_cache *c, uint64_t block)
{
	uint32_t s;
	uint64_t n;

	pthread_mutex_lock(&c->lock);
	s = hl_cache_core_peek(c->core, c->ents[0]->id, block, NULL);
	n = s == HL_CACHE_NO_SLOT ? 0 : hl_cache_core_ub_pending(c->core, s, NULL);
	pthread_mutex_unlock(&c->lock);
	return n;
}

/* The device bytes of sector i of block's slot, in the fake device d. */
static const uint8_t *ub_dev_sector(struct hl_cache *c, struct fake *d, uint64_t block, uint32_t i)
{
	uint32_t s = hl_cache_core_peek(c->core, c->ents[0]->id, block, NULL);

	CU_ASSERT_FATAL(s < c->nslots);
	return d->mem + c->layout.data_off + (uint64_t)s * c->bs + (uint64_t)i * SECT;
}

/*
 * An update of a block cached on the device stays in RAM: no device write,
 * the device keeps the old sectors, and a read is a hit served from the
 * buffer. A misaligned write into a buffered sector merges with the
 * buffer's copy (no device read), and the result is served too.
 */
static void test_ub_read_from_buffer(void)
{
	struct fake f, d;
	struct hl_cache *c;
	struct hl_origin *o, *real;
	struct snap a, b;
	uint8_t *buf = malloc(BS), *w = malloc(8 * K), old[SECT];

	dev_name();
	fake_init(&f, LUN_SIZE, 21);
	reactor_up();
	c = cache_open(NULL);
	real = ub_dev_swap(c, &d);
	o = attach(c, &f, "fake:ub1");
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 5 * BS, BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT_EQUAL(d.writes, 1); /* the fill */
	memcpy(old, ub_dev_sector(c, &d, 5, 4), SECT);

	memset(w, 0x55, 8 * K);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_WRITE, 5 * BS + 16 * K, 8 * K, w), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT_EQUAL(d.writes, 1); /* no device write for the update */
	CU_ASSERT_EQUAL(ub_pending(c, 5), 8 * K);
	CU_ASSERT(memcmp(ub_dev_sector(c, &d, 5, 4), old, SECT) == 0); /* device: old data */

	snap(c, &f, &a);
	memset(buf, 0, BS);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 5 * BS, BS, buf), 0);
	CU_ASSERT(memcmp(buf, f.mem + 5 * BS, BS) == 0);
	CU_ASSERT(buf[16 * K] == 0x55 && buf[24 * K - 1] == 0x55);
	snap(c, &f, &b);
	CU_ASSERT_EQUAL(b.reads, a.reads); /* a hit: the origin was not read */
	CU_ASSERT_EQUAL(b.hits - a.hits, 1);
	/* A part of the request only: a bounce buffer and an unaligned start. */
	memset(buf, 0, BS);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 5 * BS + 15 * K + 512, 2 * K, buf), 0);
	CU_ASSERT(memcmp(buf, f.mem + 5 * BS + 15 * K + 512, 2 * K) == 0);

	/* 1K at 16K + 512: sector 4 partly, its old bytes from the buffer (no device read). */
	int dreads = d.reads;
	memset(w, 0x66, K);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_WRITE, 5 * BS + 16 * K + 512, K, w), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT_EQUAL(d.reads, dreads);
	CU_ASSERT_EQUAL(ub_pending(c, 5), 8 * K);
	/*
	 * 1K at 12K + 3584: sectors 3 (not buffered: its old bytes from the
	 * device) and 4 (buffered: from the buffer) partly.
	 */
	CU_ASSERT_EQUAL(do_io(o, HL_IO_WRITE, 5 * BS + 12 * K + 3584, K, w), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT_EQUAL(d.reads, dreads + 1);
	CU_ASSERT_EQUAL(ub_pending(c, 5), 12 * K);
	snap(c, &f, &a);
	memset(buf, 0, BS);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 5 * BS, BS, buf), 0);
	CU_ASSERT(memcmp(buf, f.mem + 5 * BS, BS) == 0);
	CU_ASSERT(buf[16 * K - 1] == 0x66 && buf[16 * K + 1535] == 0x66);
	CU_ASSERT(buf[16 * K + 1536] == 0x55 && buf[24 * K - 1] == 0x55);
	snap(c, &f, &b);
	CU_ASSERT_EQUAL(b.reads, a.reads);
	CU_ASSERT_EQUAL(b.hits - a.hits, 1);

	CU_ASSERT(wait_inflight(c, 0));
	reactor_down();
	hl_origin_close(o);
	dev_restore(c, real, &d);
	hl_cache_close(c);
	dev_remove();
	free(f.mem);
	free(buf);
	free(w);
}

/*
 * A write or an invalidation of a buffered sector drops it from the
 * buffer: a DISCARD of one buffered sector, then a write of another, then a
 * failed origin write (the range is dropped); every read returns what the
 * origin holds.
 */
static void test_ub_invalidate_pending(void)
{
	struct fake f;
	struct hl_cache *c;
	struct hl_origin *o;
	uint8_t *buf = malloc(BS), *w = malloc(8 * K);

	o = fixture_up(&c, NULL, &f, 22, "fake:ub2");
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 4 * BS, BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	memset(w, 0x33, 8 * K);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_WRITE, 4 * BS + 8 * K, 8 * K, w), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT_EQUAL(ub_pending(c, 4), 8 * K);

	/* Discard sector 2: no longer buffered, the origin's zeroes are read. */
	CU_ASSERT_EQUAL(do_io(o, HL_IO_DISCARD, 4 * BS + 8 * K, 4 * K, NULL), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT_EQUAL(ub_pending(c, 4), 4 * K);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 4 * BS, BS, buf), 0);
	CU_ASSERT(memcmp(buf, f.mem + 4 * BS, BS) == 0);
	CU_ASSERT(buf[8 * K] == 0 && buf[12 * K] == 0x33);
	CU_ASSERT(wait_inflight(c, 0));

	/* A write of sector 3 replaces its buffered copy. */
	memset(w, 0x44, 4 * K);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_WRITE, 4 * BS + 12 * K, 4 * K, w), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 4 * BS, BS, buf), 0);
	CU_ASSERT(memcmp(buf, f.mem + 4 * BS, BS) == 0);
	CU_ASSERT(buf[12 * K] == 0x44);
	CU_ASSERT(wait_inflight(c, 0));

	/* A failed origin write of a buffered sector drops it (the origin decides). */
	__atomic_store_n(&f.fail_writes, 1, __ATOMIC_RELAXED);
	memset(w, 0x99, 4 * K);
	CU_ASSERT(do_io(o, HL_IO_WRITE, 4 * BS + 12 * K, 4 * K, w) < 0);
	__atomic_store_n(&f.fail_writes, 0, __ATOMIC_RELAXED);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT_EQUAL(ub_pending(c, 4), 0);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 4 * BS, BS, buf), 0);
	CU_ASSERT(memcmp(buf, f.mem + 4 * BS, BS) == 0);
	CU_ASSERT(buf[12 * K] == 0x44);

	CU_ASSERT(wait_inflight(c, 0));
	fixture_down(c, o, &f);
	free(buf);
	free(w);
}

/*
 * A buffer of 4 KiB: an 8 KiB update is written back at once. A write of
 * those sectors while the write-back is held in flight: the write-back
 * lands after the write but is not installed (its sectors stay invalid),
 * and every read returns the newest data. Then a write-back that completes
 * is installed, counted as a cache-device write, and kept by a restart.
 */
static void test_ub_write_during_writeback(void)
{
	struct fake f, d;
	struct hl_cache *c;
	struct hl_origin *o, *real;
	struct hl_cache_engine_stats st;
	uint8_t *buf = malloc(BS), *w = malloc(8 * K), v[32];
	uint64_t cw;

	g_ub = 4 * K;
	dev_name();
	fake_init(&f, LUN_SIZE, 23);
	reactor_up();
	c = cache_open(NULL);
	real = ub_dev_swap(c, &d);
	o = attach(c, &f, "fake:ub3");
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 3 * BS, BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	stats(c, &st);
	cw = st.core.bytes_cache_write;

	/* The update goes to the buffer, which is over its limit: a write-back, held. */
	__atomic_store_n(&d.hold_writes, 1, __ATOMIC_RELAXED);
	memset(w, 0x11, 8 * K);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_WRITE, 3 * BS, 8 * K, w), 0);
	for (int i = 0; i < 1000 && __atomic_load_n(&d.nheld, __ATOMIC_ACQUIRE) < 1; i++)
		usleep(1000);
	CU_ASSERT_EQUAL(__atomic_load_n(&d.nheld, __ATOMIC_ACQUIRE), 1);
	CU_ASSERT_EQUAL(ub_pending(c, 3), 0); /* taken out for the write-back */
	CU_ASSERT(wait_inflight(c, 1));       /* only the write-back is left */

	/* A newer write of the same sectors while the write-back is in flight. */
	memset(w, 0x22, 8 * K);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_WRITE, 3 * BS, 8 * K, w), 0);
	CU_ASSERT(wait_inflight(c, 1));
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 3 * BS, BS, buf), 0);
	CU_ASSERT(memcmp(buf, f.mem + 3 * BS, BS) == 0);
	CU_ASSERT(buf[0] == 0x22);
	CU_ASSERT(wait_inflight(c, 1));
	__atomic_store_n(&d.hold_writes, 0, __ATOMIC_RELAXED);
	release_held(&d);
	CU_ASSERT(wait_inflight(c, 0));
	/* The old write-back reached the device but claims nothing. */
	CU_ASSERT(ub_dev_sector(c, &d, 3, 0)[0] == 0x11);
	hl_cache_core_peek(c->core, c->ents[0]->id, 3, v);
	CU_ASSERT_EQUAL(v[0] & 3, 0);
	memset(buf, 0, BS);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 3 * BS, BS, buf), 0);
	CU_ASSERT(memcmp(buf, f.mem + 3 * BS, BS) == 0);
	CU_ASSERT(buf[0] == 0x22 && buf[8 * K - 1] == 0x22);
	CU_ASSERT(wait_inflight(c, 0));

	/* A write-back that completes: installed and counted. */
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 6 * BS, BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	stats(c, &st);
	cw = st.core.bytes_cache_write;
	memset(w, 0x77, 8 * K);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_WRITE, 6 * BS + 4 * K, 8 * K, w), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT_EQUAL(ub_pending(c, 6), 0);
	hl_cache_core_peek(c->core, c->ents[0]->id, 6, v);
	CU_ASSERT_EQUAL(v[0], 0xff);
	CU_ASSERT(ub_dev_sector(c, &d, 6, 1)[0] == 0x77 && ub_dev_sector(c, &d, 6, 2)[0] == 0x77);
	stats(c, &st);
	CU_ASSERT_EQUAL(st.core.bytes_cache_write - cw, 8 * K);
	CU_ASSERT_EQUAL(hl_cache_get_stats(c, NULL, &st), 0);
	CU_ASSERT_EQUAL(st.ub_writebacks, 2); /* device writes done: the stale one too */
	int reads = f.reads;
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 6 * BS, BS, buf), 0);
	CU_ASSERT(memcmp(buf, f.mem + 6 * BS, BS) == 0);
	CU_ASSERT_EQUAL(f.reads, reads);

	CU_ASSERT(wait_inflight(c, 0));
	reactor_down();
	hl_origin_close(o);
	dev_restore(c, real, &d);
	hl_cache_close(c);
	g_ub = 0;
	dev_remove();
	free(f.mem);
	free(buf);
	free(w);
}

/*
 * A 64 KiB buffer under many updates: write-backs leave copies behind that
 * the store sweeps away from time to time; every buffered sector must keep
 * its copy (a sweep in the middle of an update's install once freed the
 * sectors installed just before it), so every read succeeds with the
 * origin's data.
 */
static void test_ub_sweeps(void)
{
	struct fake f;
	struct hl_cache *c;
	struct hl_origin *o;
	struct hl_cache_engine_stats st;
	uint8_t *buf = malloc(16 * BS), *w = malloc(16 * K);

	g_ub = 64 * K;
	o = fixture_up(&c, NULL, &f, 25, "fake:ub5");
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, 16 * BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	for (int i = 0; i < 600; i++) {
		uint64_t b = (uint64_t)(i * 7 % 16);
		uint64_t at = b * BS + (uint64_t)(i * 5 % 13) * 4 * K;
		int rc;
		memset(w, (uint8_t)(i + 1), 16 * K);
		CU_ASSERT_EQUAL(do_io(o, HL_IO_WRITE, at, 12 * K, w), 0);
		CU_ASSERT(wait_inflight(c, 0));
		rc = do_io(o, HL_IO_READ, b * BS, BS, buf);
		if (rc || memcmp(buf, f.mem + b * BS, BS)) {
			CU_FAIL("a read after an update failed or returned wrong data");
			break;
		}
	}
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, 16 * BS, buf), 0);
	CU_ASSERT(memcmp(buf, f.mem, 16 * BS) == 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT_EQUAL(hl_cache_get_stats(c, NULL, &st), 0);
	CU_ASSERT(st.ub_writebacks > 100);
	CU_ASSERT(st.ub_bytes <= 2 * (64 * K + 64 * SECT));
	fixture_down(c, o, &f);
	g_ub = 0;
	free(buf);
	free(w);
}

/*
 * Read block b (BS bytes) into buf through o and check it against the
 * origin. @return how many origin reads it took (0: served by the cache).
 */
static int read_block(struct hl_origin *o, struct fake *f, uint64_t b, uint8_t *buf)
{
	int reads = f->reads;

	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, b * BS, BS, buf), 0);
	CU_ASSERT(memcmp(buf, f->mem + b * BS, BS) == 0);
	return f->reads - reads;
}

/* Sector i of block's slot as the cache device file holds it. */
static void dev_sector(struct hl_cache *c, uint64_t block, uint32_t i, uint8_t *out)
{
	uint32_t s = hl_cache_core_peek(c->core, c->ents[0]->id, block, NULL);
	int fd = open(g_dev, O_RDONLY);

	CU_ASSERT_FATAL(s < c->nslots && fd >= 0);
	CU_ASSERT_EQUAL(pread(fd, out, SECT,
	                      (off_t)(c->layout.data_off + (uint64_t)s * c->bs + (uint64_t)i * SECT)),
	                SECT);
	close(fd);
}

/*
 * The update buffer resized while running: what it holds is written to the
 * device first (then served from there), an update already on its way into
 * the buffer when it is turned off is refused (its sectors come from the
 * origin), updates go to the device while it is off and to RAM again once
 * it is back.
 */
static void test_ub_resize(void)
{
	struct fake f;
	struct hl_cache *c;
	struct hl_origin *o;
	struct hl_cache_engine_stats st;
	struct step held;
	uint8_t *buf = malloc(2 * BS), *w = malloc(8 * K), sect[SECT];
	uint64_t wb;

	o = fixture_up(&c, NULL, &f, 26, "fake:ub6");
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 2 * BS, 2 * BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	memset(w, 0x5a, 8 * K);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_WRITE, 2 * BS + 4 * K, 8 * K, w), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT_EQUAL(ub_pending(c, 2), 8 * K);
	CU_ASSERT_EQUAL(hl_cache_get_stats(c, NULL, &st), 0);
	wb = st.ub_writebacks;

	/* An update of block 3 on its way into the buffer (its origin write held). */
	__atomic_store_n(&f.hold_writes, 1, __ATOMIC_RELAXED);
	memset(w, 0x6b, 8 * K);
	io_start(&held, o, HL_IO_WRITE, 3 * BS, 8 * K, w);
	for (int i = 0; i < 1000 && __atomic_load_n(&f.nheld, __ATOMIC_ACQUIRE) < 1; i++)
		usleep(1000);
	CU_ASSERT_EQUAL_FATAL(__atomic_load_n(&f.nheld, __ATOMIC_ACQUIRE), 1);

	CU_ASSERT_EQUAL(hl_cache_set_update_buffer(c, 5000), -EINVAL);
	CU_ASSERT_EQUAL(hl_cache_set_update_buffer(c, 0), 0);
	CU_ASSERT_EQUAL(ub_pending(c, 2), 0);
	CU_ASSERT_EQUAL(c->ub_cap, 0);
	dev_sector(c, 2, 1, sect); /* written back */
	CU_ASSERT(sect[0] == 0x5a && sect[SECT - 1] == 0x5a);
	CU_ASSERT_EQUAL(hl_cache_get_stats(c, NULL, &st), 0);
	CU_ASSERT_EQUAL(st.ub_writebacks, wb + 1);
	CU_ASSERT_EQUAL(read_block(o, &f, 2, buf), 0); /* a hit, from the device */

	__atomic_store_n(&f.hold_writes, 0, __ATOMIC_RELAXED);
	release_held(&f);
	CU_ASSERT_EQUAL(io_wait(&held), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT_EQUAL(ub_pending(c, 3), 0);
	CU_ASSERT_EQUAL(read_block(o, &f, 3, buf), 1); /* the refused sectors: from the origin */
	CU_ASSERT(buf[0] == 0x6b);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT_EQUAL(hl_cache_get_stats(c, NULL, &st), 0);
	CU_ASSERT_EQUAL(st.ub_bytes, 0); /* its copies did not stay behind */

	/* Off: an update is written to the device at once. */
	memset(w, 0x7c, 8 * K);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_WRITE, 2 * BS, 8 * K, w), 0);
	CU_ASSERT(wait_inflight(c, 0));
	dev_sector(c, 2, 0, sect);
	CU_ASSERT(sect[0] == 0x7c);

	/* On again: updates stay in RAM. */
	CU_ASSERT_EQUAL(hl_cache_set_update_buffer(c, 64 * K), 0);
	CU_ASSERT_EQUAL(hl_cache_set_update_buffer(c, 64 * K), 0); /* unchanged */
	memset(w, 0x8d, 8 * K);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_WRITE, 2 * BS, 8 * K, w), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT_EQUAL(ub_pending(c, 2), 8 * K);
	dev_sector(c, 2, 0, sect);
	CU_ASSERT(sect[0] == 0x7c);
	CU_ASSERT_EQUAL(read_block(o, &f, 2, buf), 0);

	/*
	 * While a resize drains the buffer, updates go to the device: one that
	 * writes part of a buffered sector merges with the buffer's copy (the
	 * device's is older).
	 */
	pthread_mutex_lock(&c->lock);
	hl_cache_core_ub_close(c->core, true);
	pthread_mutex_unlock(&c->lock);
	memset(w, 0x9e, K);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_WRITE, 2 * BS + 512, K, w), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT_EQUAL(ub_pending(c, 2), 4 * K); /* sector 1 still buffered */
	dev_sector(c, 2, 0, sect);
	CU_ASSERT(sect[0] == 0x8d && sect[512] == 0x9e && sect[1536] == 0x8d);
	pthread_mutex_lock(&c->lock);
	hl_cache_core_ub_close(c->core, false);
	pthread_mutex_unlock(&c->lock);
	CU_ASSERT_EQUAL(read_block(o, &f, 2, buf), 0);

	CU_ASSERT(wait_inflight(c, 0));
	fixture_down(c, o, &f);
	free(buf);
	free(w);
}

/*
 * write_policy changed while running: invalidate drops what a write
 * touches (the next read of it goes to the origin), update keeps it current.
 */
static void test_write_policy_live(void)
{
	struct fake f;
	struct hl_cache *c;
	struct hl_origin *o;
	uint8_t *buf = malloc(BS), *w = malloc(8 * K);

	o = fixture_up(&c, NULL, &f, 27, "fake:wp");
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 4 * BS, BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT_EQUAL(hl_cache_set_write_policy(c, "sometimes"), -EINVAL);
	CU_ASSERT_EQUAL(hl_cache_set_write_policy(c, "invalidate"), 0);
	memset(w, 0x21, 8 * K);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_WRITE, 4 * BS, 8 * K, w), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT_EQUAL(ub_pending(c, 4), 0);
	CU_ASSERT_EQUAL(read_block(o, &f, 4, buf), 1); /* the dropped sectors */
	CU_ASSERT(wait_inflight(c, 0));

	CU_ASSERT_EQUAL(hl_cache_set_write_policy(c, NULL), 0); /* update */
	memset(w, 0x32, 8 * K);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_WRITE, 4 * BS, 8 * K, w), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT_EQUAL(ub_pending(c, 4), 8 * K);
	CU_ASSERT_EQUAL(read_block(o, &f, 4, buf), 0);

	CU_ASSERT(wait_inflight(c, 0));
	fixture_down(c, o, &f);
	free(buf);
	free(w);
}

/*
 * A clean stop writes the buffered sectors back before the records that
 * claim them: after the restart they are served from the cache with the
 * new data. A crash loses them, never serving the older device copy: they
 * are read from the origin (new data) and the block's other sectors are
 * still cached (warm).
 */
static void test_ub_stop_and_crash(void)
{
	struct fake f;
	struct hl_cache *c;
	struct hl_origin *o;
	uint8_t *buf = malloc(BS), *w = malloc(8 * K), v[32];
	int reads;

	o = fixture_up(&c, NULL, &f, 24, "fake:ub4");
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 6 * BS, BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT(wait_synced(c)); /* periodic metadata flush: the record claims the block */
	CU_ASSERT(cnt_get(&c->meta_syncs) > 0);
	memset(w, 0x77, 8 * K);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_WRITE, 6 * BS, 8 * K, w), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT_EQUAL(ub_pending(c, 6), 8 * K);
	CU_ASSERT(wait_synced(c)); /* another flush while the sectors are buffered */

	/* Clean stop: written back, then claimed. */
	cache_down(c, o);
	o = cache_up(&c, NULL, &f, "fake:ub4");
	hl_cache_core_peek(c->core, c->ents[0]->id, 6, v);
	CU_ASSERT_EQUAL(v[0], 0xff);
	CU_ASSERT_EQUAL(v[1], 0xff);
	reads = f.reads;
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 6 * BS, BS, buf), 0);
	CU_ASSERT(memcmp(buf, f.mem + 6 * BS, BS) == 0);
	CU_ASSERT(buf[0] == 0x77 && buf[8 * K - 1] == 0x77);
	CU_ASSERT_EQUAL(f.reads, reads); /* from the cache device */
	CU_ASSERT(wait_inflight(c, 0));

	/* Crash: buffered again, a flush, then no clean shutdown. */
	memset(w, 0x88, 8 * K);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_WRITE, 6 * BS + 16 * K, 8 * K, w), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT_EQUAL(ub_pending(c, 6), 8 * K);
	CU_ASSERT(wait_synced(c)); /* the flush the crash must not undo */
	reactor_down();
	hl_origin_close(o);
	cache_crash(c);
	o = cache_up(&c, NULL, &f, "fake:ub4");
	hl_cache_core_peek(c->core, c->ents[0]->id, 6, v);
	CU_ASSERT_EQUAL(v[0], 0xcf); /* sectors 4-5 gone, the others still cached */
	CU_ASSERT_EQUAL(v[1], 0xff);
	reads = f.reads;
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 6 * BS, BS, buf), 0);
	CU_ASSERT(memcmp(buf, f.mem + 6 * BS, BS) == 0);
	CU_ASSERT(buf[16 * K] == 0x88 && buf[0] == 0x77);
	CU_ASSERT(f.reads > reads);

	CU_ASSERT(wait_inflight(c, 0));
	fixture_down(c, o, &f);
	free(buf);
	free(w);
}

/*
 * A map written by an older hotlund (no limit on disks per cache) with 256
 * other disks ahead of disk0: at open disk0 gets no room in the core. It
 * must then attach as a new disk (cold, or after forgetting a detached
 * one), not keep a map entry the core does not know: every I/O of it
 * failed with -EINVAL before.
 */
static void test_map_over_256_disks(void)
{
	struct fake f;
	struct hl_cache *c;
	struct hl_origin *o;
	uint8_t *buf = malloc(8 * BS);
	char cmd[1024];
	int rc;

	proof_warm(&f, 27, "fake:proof");
	snprintf(cmd, sizeof(cmd),
	         "awk '/^disk /&&!d{for(i=1000;i<1256;i++)print \"disk \" i \" 0 1048576 old\" i "
	         "\" fake:old\" i; d=1} {print}' %s > %s.n && mv %s.n %s && "
	         "sed -i 's/^next .*/next 2000/' %s && grep -c '^disk ' %s >/dev/null",
	         g_map, g_map, g_map, g_map, g_map, g_map);
	CU_ASSERT_FATAL(system(cmd) == 0);
	reactor_up();
	c = cache_open(NULL);
	o = attach(c, &f, "fake:proof");
	rc = do_io(o, HL_IO_READ, 0, 8 * BS, buf);
	CU_ASSERT_EQUAL(rc, 0);
	CU_ASSERT(memcmp(buf, f.mem, 8 * BS) == 0);
	rc = do_io(o, HL_IO_WRITE, 0, BS, buf);
	CU_ASSERT_EQUAL(rc, 0);
	CU_ASSERT(wait_inflight(c, 0));
	cache_down(c, o);
	dev_remove();
	free(f.mem);
	free(buf);
}

/*
 * 256 disks attached one after the other, each detached before the next:
 * the map remembers all of them (for their warm restart), but a cache
 * serves 256 at a time, not in its whole life: a 257th attaches (a
 * detached one is forgotten), also after a restart.
 */
static void test_257th_disk_ever(void)
{
	struct fake f;
	struct hl_cache *c;
	struct hl_origin *o = NULL, *in;
	char name[32], uri[32];

	dev_name();
	fake_init(&f, LUN_SIZE, 28);
	reactor_up();
	c = cache_open(NULL);
	for (int i = 0; i < 256; i++) {
		snprintf(name, sizeof(name), "vm%d", i);
		snprintf(uri, sizeof(uri), "fake:vm%d", i);
		CU_ASSERT_FATAL(hl_cache_attach(c, name, 0, fake_origin(&f, uri), &o) == 0);
		hl_origin_close(o); /* detached */
	}
	in = fake_origin(&f, "fake:new");
	CU_ASSERT_EQUAL_FATAL(hl_cache_attach(c, "new", 0, in, &o), 0);
	CU_ASSERT_EQUAL(c->n_ents, 256); /* one detached disk forgotten */
	hl_origin_close(o);
	reactor_down();
	hl_cache_close(c);
	reactor_up();
	c = cache_open(NULL);
	in = fake_origin(&f, "fake:new2");
	CU_ASSERT_EQUAL_FATAL(hl_cache_attach(c, "new2", 0, in, &o), 0);
	hl_origin_close(o);
	reactor_down();
	hl_cache_close(c);
	dev_remove();
	free(f.mem);
}


/*
 * A LUN id handed out again (engine_ent_id_alloc: the counter wraps after
 * 65,535) never brings back the records of the disk that had it before.
 * The device may still hold such records when the map no longer names the
 * id: an open that could not give a map's disk to the core forgets it
 * (engine.c) and rewrites the map at once, while its records are only
 * dropped in RAM by the loader and rewritten by a later sync. Built here by
 * hand: disk0's entry leaves the map, as after such an open, and "next" is
 * the counter's last id. Then a new disk takes that one, the counter wraps,
 * and the next new disk takes disk0's id and detaches (its final proof goes
 * into the map), with no sync of the metadata thread (stopped), and the
 * cache crashes: at the restart the new disk's proof holds, so any record
 * of that id still on the device would be served as its data. The attach
 * of a fresh id syncs first (without it: disk0's 8 blocks are served).
 */
static void test_lun_id_reuse_no_stale(void)
{
	struct fake f, g;
	struct hl_cache *c;
	struct hl_origin *o;
	struct hl_cache_engine_stats st;
	uint8_t *buf = malloc(8 * BS);
	char cmd[1024];

	proof_warm(&f, 31, "fake:old"); /* disk0, LUN id 0: blocks 0..7 on the device */
	CU_ASSERT_FATAL(map_holds("disk 0 "));
	snprintf(cmd, sizeof(cmd),
	         "sed -i -e '/^disk 0 /d' -e '/^proof 0 /d' -e 's/^next .*/next 65535/' %s", g_map);
	CU_ASSERT_FATAL(system(cmd) == 0);
	fake_init(&g, LUN_SIZE, 32); /* another disk's data */
	reactor_up();
	/*
	 * The loader drops disk0's records (a LUN id it does not know); the
	 * periodic sync that would rewrite them is kept out: the metadata
	 * thread stops before the (slowed) restore ends.
	 */
	setenv("HOTLUN_TEST_RESTORE_DELAY_MS", "100", 1);
	g_lazy = true;
	c = cache_open(NULL);
	g_lazy = false;
	unsetenv("HOTLUN_TEST_RESTORE_DELAY_MS");
	engine_meta_stop(c, false); /* from here on no sync but the attach's own */
	hl_cache_restore_wait(c);
	CU_ASSERT_EQUAL(c->rs.dropped, 8);
	/* the counter's last id, then it wraps: disk1 gets the id disk0 had */
	CU_ASSERT_FATAL(hl_cache_attach(c, "disk2", 0, fake_origin(&g, "fake:other"), &o) == 0);
	CU_ASSERT_EQUAL(engine_ent_find(c, "disk2")->id, 65535);
	hl_origin_close(o);
	CU_ASSERT_FATAL(hl_cache_attach(c, "disk1", 0, fake_origin(&g, "fake:new"), &o) == 0);
	CU_ASSERT_EQUAL(engine_ent_find(c, "disk1")->id, 0);
	reactor_down();
	hl_origin_close(o); /* detached: the map records its proof */
	CU_ASSERT(map_holds("proof 0 fake:0"));
	cache_free(c); /* a crash */

	reactor_up();
	c = cache_open(NULL);
	CU_ASSERT_FATAL(hl_cache_attach(c, "disk1", 0, fake_origin(&g, "fake:new"), &o) == 0);
	memset(buf, 0, 8 * BS);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, 8 * BS, buf), 0);
	CU_ASSERT(memcmp(buf, g.mem, 8 * BS) == 0); /* not disk0's blocks */
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT_EQUAL(hl_cache_get_stats(c, "disk1", &st), 0);
	CU_ASSERT_EQUAL(st.warm_kept, 0);
	cache_down(c, o);
	dev_remove();
	free(f.mem);
	free(g.mem);
	free(buf);
}

int main(void)
{
	static const struct hl_test tests[] = {
	    {"a map of more disks than a cache serves: the disk past them attaches anew", test_map_over_256_disks},
	    {"a 257th disk attaches when a detached one can be forgotten", test_257th_disk_ever},
	    {"a LUN id handed out again never serves the old disk's records", test_lun_id_reuse_no_stale},
	    {"update buffer off: write-through update", test_write_update_ub_off},
	    {"update buffer off: misaligned writes merge on the device", test_rmw_misaligned_ub_off},
	    {"update buffer off: raced misaligned writes", test_rmw_race_ub_off},
	    {"update buffer: a read is served from the buffer, not the device", test_ub_read_from_buffer},
	    {"update buffer: a write or invalidation of a buffered sector drops it", test_ub_invalidate_pending},
	    {"update buffer: a write while a write-back is in flight", test_ub_write_during_writeback},
	    {"update buffer: buffered sectors keep their copies across sweeps", test_ub_sweeps},
	    {"update buffer resized while running", test_ub_resize},
	    {"write_policy changed while running", test_write_policy_live},
	    {"update buffer: a clean stop writes it back; a crash loses it, serves the origin", test_ub_stop_and_crash},
	    {NULL, NULL},
	};

	return hl_test_run("engine_ub", tests);
}
