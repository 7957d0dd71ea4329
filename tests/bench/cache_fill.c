/*
 * cache_fill.c - a full warm cache without warming it through iSCSI (issue
 * 25 item 5; tests/bench/cache_scale.sh FULL=1). Warming a 4 TiB cache of
 * 4K blocks through iSCSI would take days; this writes the records of the
 * first N slots, slot i claiming block i of one LUN, through the engine's
 * own code (hl_cache_meta_load_begin for the device's identity,
 * hl_cache_meta_forge with the record encoder of a sync, and
 * hl_cache_meta_close), never a copy of the on-device format.
 *
 *   cache_fill DEVICE BLOCK_SIZE LUN_ID N
 *
 * DEVICE is a cache hotlund formatted and stopped cleanly, caching
 * nothing yet (its map names the LUN id: "disk X attached (lun id N)" in
 * hotlund's log). No data is written: the bench's cache device and origin
 * are sparse files of zeroes, so every forged block holds what the origin
 * holds. Prints "forged N records in S s (R records/s)". Exit status 0 on
 * success; 1 when the device is not a clean empty cache or a write fails.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hotlun/cache.h"
#include "hotlun/cache_engine.h"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	struct hl_cache_dev *d = NULL;
	struct hl_cache_core *core = NULL;
	struct hl_cache_layout l;
	struct hl_cache_restore r;
	struct hl_cache_params p;
	uint64_t n;
	uint32_t bs, lun;
	double t0;
	int rc;

	if (argc != 5) {
		fprintf(stderr, "usage: cache_fill DEVICE BLOCK_SIZE LUN_ID N\n");
		return 2;
	}
	bs = (uint32_t)strtoul(argv[2], NULL, 0);
	lun = (uint32_t)strtoul(argv[3], NULL, 0);
	n = strtoull(argv[4], NULL, 0);
	rc = hl_cache_dev_open_file(argv[1], 0, &d);
	if (rc) {
		fprintf(stderr, "cache_fill: %s: %s\n", argv[1], strerror(-rc));
		return 1;
	}
	rc = hl_cache_layout_compute(d->size, bs, &l);
	if (rc) {
		fprintf(stderr, "cache_fill: layout: %s\n", strerror(-rc));
		return 1;
	}
	if (n > l.nslots) {
		fprintf(stderr,
		        "cache_fill: %" PRIu64 " blocks, the device has %" PRIu64 " slots\n", n,
		        l.nslots);
		return 1;
	}
	/* A core of the device's geometry: calloc'd, untouched (the load below restores nothing).
	 */
	hl_cache_params_default(&p);
	p.block_size = bs;
	p.capacity = l.nslots * bs;
	p.window_bytes = 0;
	rc = hl_cache_core_create(&p, &core);
	if (!rc)
		rc = hl_cache_core_lun_add(core, (uint16_t)lun, 0);
	if (rc) {
		fprintf(stderr, "cache_fill: core: %s\n", strerror(-rc));
		return 1;
	}
	rc = hl_cache_meta_load_begin(d, core, &l, &r);
	if (rc) {
		fprintf(stderr, "cache_fill: %s: no cache of %u-byte blocks here (%s)\n", argv[1],
		        bs, strerror(-rc));
		return 1;
	}
	if (r.pages) {
		fprintf(stderr,
		        "cache_fill: %s: %" PRIu64 " record pages in use: format it first\n",
		        argv[1], r.pages);
		return 1;
	}
	rc = hl_cache_meta_load_finish(d, &l, core, NULL);
	hl_cache_restore_release(&r);
	t0 = now_s();
	if (!rc)
		rc = hl_cache_meta_forge(d, &l, (uint16_t)lun, n);
	if (!rc)
		rc = hl_cache_meta_close(d, &l, core);
	if (rc) {
		fprintf(stderr, "cache_fill: %s: %s\n", argv[1], strerror(-rc));
		return 1;
	}
	t0 = now_s() - t0;
	printf("forged %" PRIu64 " records in %.1f s (%.0f records/s)\n", n, t0,
	       (double)n / (t0 > 0 ? t0 : 1e-9));
	hl_cache_layout_release(&l);
	hl_cache_core_destroy(core);
	hl_cache_dev_close(d);
	return 0;
}
