/*
 * core_ram.c - the RAM of the cache's core per cached block, measured as
 * the process's RSS (not computed): a core of CACHE bytes at BS blocks
 * (default window), every SSD slot restored with a block (a warm
 * restart), then 2 x slots reads of blocks never seen, which fill the
 * RAM window, the admission sketch and both ghosts. Prints the RSS growth
 * per SSD slot after each step and the core's own accounting
 * (ram_per_block, admit_ram_bytes). tests/bench/core_ram.sh builds and
 * runs it.
 *
 *   core_ram CACHE_BYTES BS
 */
#include "config.h"

#include "cache/core/core_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double rss_bytes(void)
{
	char line[256];
	double kb = 0;
	FILE *f = fopen("/proc/self/status", "r");

	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmRSS:", 6))
			kb = strtod(line + 6, NULL);
	if (f)
		fclose(f);
	return kb * 1024;
}

int main(int argc, char **argv)
{
	struct hl_cache_params p;
	struct hl_cache_core *c = NULL;
	struct hl_cache_core_info info;
	struct hl_cache_slot_rec rec;
	static struct hl_cache_io ios[64];
	double r0, r1, r2, r3;

	if (argc != 3) {
		fprintf(stderr, "usage: core_ram CACHE_BYTES BS\n");
		return 2;
	}
	hl_cache_params_default(&p);
	p.capacity = strtoull(argv[1], NULL, 0);
	p.block_size = (uint32_t)strtoul(argv[2], NULL, 0);
	r0 = rss_bytes();
	if (hl_cache_core_create(&p, &c) || hl_cache_core_lun_add(c, 0, 0)) {
		fprintf(stderr, "core_ram: cannot create the core\n");
		return 1;
	}
	r1 = rss_bytes();
	hl_cache_core_info(c, &info);
	memset(&rec, 0, sizeof(rec));
	memset(rec.valid, 0xff, p.block_size / HL_CACHE_SECTOR / 8 ?: 1);
	for (uint64_t s = 0; s < info.nslots; s++) {
		/* Blocks spread like a real disk's: every third block of a 3x larger disk. */
		rec.block = s * 3;
		if (hl_cache_core_slot_restore(c, (uint32_t)s, &rec)) {
			fprintf(stderr, "core_ram: restore of slot %llu failed\n",
			        (unsigned long long)s);
			return 1;
		}
	}
	r2 = rss_bytes();
	for (uint64_t i = 0; i < 2 * info.nslots; i++) {
		uint64_t b = 3 * info.nslots + 7 * i; /* never seen: misses into the window */
		int n = hl_cache_core_read(c, 0, b * p.block_size, p.block_size, ios, 64);
		for (int k = 0; k < n; k++)
			hl_cache_core_io_end(c, 0, &ios[k], true);
	}
	r3 = rss_bytes();
	hl_cache_core_info(c, &info);
	printf("slots %llu block %u: ram_per_block %.2f admit_ram_per_block %.2f total %.2f | "
	       "RSS per slot: at create %.2f, all slots restored %.2f, after 2x slots misses %.2f "
	       "(stale claims then: %.2f bytes per slot, no record sync here)\n",
	       (unsigned long long)info.nslots, p.block_size, info.ram_per_block,
	       (double)info.admit_ram_bytes / (double)info.nslots,
	       info.ram_per_block + (double)info.admit_ram_bytes / (double)info.nslots,
	       (r1 - r0) / (double)info.nslots, (r2 - r0) / (double)info.nslots,
	       (r3 - r0) / (double)info.nslots,
	       (double)(c->stale_cap * sizeof(*c->stale)) / (double)info.nslots);
	hl_cache_core_destroy(c);
	return 0;
}
