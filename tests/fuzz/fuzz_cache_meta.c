// clang-format off
// fuzz-sources: src/cache/core/cache_index.c src/cache/core/cache_admit.c src/cache/core/cache_core.c src/cache/core/cache_slot.c src/cache/core/cache_read.c src/cache/core/cache_io.c src/cache/core/cache_write.c src/cache/core/cache_claims.c src/cache/core/cache_restore.c src/cache/core/cache_ub.c src/cache/core/cache_split.c src/cache/engine/cache_dev.c src/cache/engine/cache_trace.c src/log/log.c src/util/util.c
// fuzz-libs: -pthread
// fuzz-args: -max_len=8300
// clang-format on
/*
 * fuzz_cache_meta.c - libFuzzer harness for the cache device's metadata
 * as a start reads it (src/cache/engine/cache_meta.c, the restore filter
 * of src/cache/core/cache_restore.c): superblocks, summary, record pages.
 *
 * Two real cache images are made once on memory devices by the real
 * encoders (format, then record pages written the way a sync writes them):
 * geometry 0 (4 KiB blocks, 32-byte records) and 1 (64 KiB blocks, 64-byte
 * records), each as a clean superblock (version 2) or as a "restore
 * pending" one (version 4 with ranges of blocks written meanwhile). The
 * input patches one of them:
 *
 *   byte 0  flags: bit 0 geometry; bit 1 the pending image; bit 2 compute
 *           the patched superblock's CRC; bit 3 compute the tag and CRC of
 *           every record of the patched page (uuid of the patched
 *           superblock), so the decoder behind the CRC is reached; bit 4
 *           patch superblock copy B (else A); bit 5 zero the other copy
 *   byte 1  which record page to patch
 *   2..3    L (little endian, at most 4096): superblock bytes that follow
 *   L bytes overwrite the superblock copy from its start
 *   8 bytes XOR the summary's first word
 *   the rest overwrites the record page from its start (4096 at most)
 *
 * hl_cache_meta_load then runs on a fresh core (LUNs 0 and 1). It must
 * refuse (and restore nothing) or restore only what a record proves: every
 * slot valid afterwards has its page's bit in the summary, an intact
 * record of the chosen superblock's uuid for that slot that names the same
 * LUN and block and claims every sector the slot holds, a block outside
 * every range of a pending superblock, and the count returned matches.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hotlun/log.h"

/* The loader's own decoders (static) are what is fuzzed: one unit with it. */
#include "cache/engine/cache_meta.c"

#define NGEO 2

struct geo {
	uint32_t bs;
	uint64_t dev_size;
	struct hl_cache_dev *d;
	struct hl_cache_layout l;
	uint8_t *base[2];           /* the metadata region [0, data_off): clean, pending */
	uint8_t *img;               /* the patched region as the load found it */
	struct hl_cache_core *core; /* the next load's (NULL: make one) */
	struct hl_cache_rs_range ranges[3];
	uint32_t nranges;
};

static struct geo geos[NGEO] = {
    {.bs = 4096, .dev_size = 2u << 20},
    {.bs = 65536, .dev_size = 8u << 20},
};

static struct hl_cache_core *new_core(const struct geo *g)
{
	struct hl_cache_params p;
	struct hl_cache_core *c;

	hl_cache_params_default(&p);
	p.block_size = g->bs;
	p.capacity = g->l.nslots * g->bs;
	p.window_bytes = 0;
	if (hl_cache_core_create(&p, &c))
		abort();
	for (uint16_t i = 0; i < 2; i++)
		if (hl_cache_core_lun_add(c, i, 0))
			abort();
	return c;
}

/* Write record page `page` holding recs for the slots given, as a sync does. */
static void put_page(struct geo *g, uint64_t page, uint32_t every, uint64_t salt)
{
	struct hl_cache_layout *l = &g->l;
	uint64_t per = PAGE / l->rec_size;
	uint8_t *buf = page_zalloc(PAGE);
	bool claims = true;

	if (!buf)
		abort();
	for (uint64_t i = 0; i < per && page * per + i < l->nslots; i++) {
		uint32_t slot = (uint32_t)(page * per + i);
		struct hl_cache_slot_rec r;
		bool v = slot % every != 0;
		memset(&r, 0, sizeof(r));
		r.lun = (uint16_t)(slot % 3); /* LUN 2 is unknown at load: dropped */
		r.block = (slot * 7 + salt) % 997;
		memset(r.valid, 0xff, vbytes_of(l->block_size));
		if (slot % 5 == 0)
			r.valid[0] = 0x0f; /* a partly valid block */
		rec_encode(l, slot, &r, v, buf + i * l->rec_size);
	}
	if (sum_mark(g->d, l, &page, &claims, 1) ||
	    g->d->ops->pwrite(g->d, buf, PAGE, l->meta_off + page * PAGE) || g->d->ops->flush(g->d))
		abort();
	free(buf);
}

static void make_images(struct geo *g)
{
	struct hl_cache_layout *l = &g->l;

	if (hl_cache_dev_open_mem(g->dev_size, &g->d) || hl_cache_meta_format(g->d, g->bs, l))
		abort();
	for (uint64_t p = 0; p < l->npages; p++)
		if (p != 1) /* one page that claims nothing: its summary bit stays clear */
			put_page(g, p, 3 + (uint32_t)p, p * 31);
	if (sb_write_state(g->d, l, SB_CLEAN))
		abort();
	for (int k = 0; k < 2; k++) {
		if (k == 1) {
			/* The same records, after a run that stopped while restoring. */
			g->ranges[0] = (struct hl_cache_rs_range){.lun = 0, .lo = 0, .hi = 40};
			g->ranges[1] = (struct hl_cache_rs_range){.lun = 0, .lo = 300, .hi = 310};
			g->ranges[2] = (struct hl_cache_rs_range){.lun = 1, .lo = 100, .hi = 500};
			g->nranges = 3;
			if (sb_write_ranges(g->d, l, SB_PENDING, g->ranges, g->nranges))
				abort();
		}
		g->base[k] = malloc(l->data_off);
		if (!g->base[k] || g->d->ops->pread(g->d, g->base[k], l->data_off, 0))
			abort();
	}
	g->img = malloc(l->data_off);
	if (!g->img)
		abort();
}

static void init(void)
{
	static bool done;

	if (done)
		return;
	done = true;
	hl_log_level = HL_LOG_ERR - 1; /* a refused device is a notice */
	for (int i = 0; i < NGEO; i++)
		make_images(&geos[i]);
	/* hl_cache_meta_format and the loads leave layouts behind: keep only the geometry. */
	for (int i = 0; i < NGEO; i++)
		hl_cache_layout_release(&geos[i].l);
}

/*
 * The oracle reads the image itself (docs/cache-format.md), not through
 * the loader's decoders: a decoder that lets a bad record through must
 * not be checked by the same code.
 */
struct ref_sb {
	uint64_t seq;
	uint32_t version, nranges;
	uint8_t uuid[16];
	struct hl_cache_rs_range ranges[SB_RANGES_MAX];
};

static bool ref_sb_read(const uint8_t *b, struct ref_sb *s)
{
	if (memcmp(b, "HLCACHE", 8) || get32(b + 4092) != crc32c(0, b, 4092))
		return false;
	s->version = get32(b + 8);
	s->seq = get64(b + 56);
	memcpy(s->uuid, b + 64, 16);
	s->nranges = s->version == 4 ? get32(b + 104) : 0;
	if (s->nranges > SB_RANGES_MAX)
		s->nranges = 0;
	for (uint32_t i = 0; i < s->nranges; i++) {
		s->ranges[i].lun = get16(b + 112 + i * 18);
		s->ranges[i].lo = get64(b + 112 + i * 18 + 2);
		s->ranges[i].hi = get64(b + 112 + i * 18 + 10);
	}
	return true;
}

/* The superblock a load must go by (the newer intact copy), or NULL. */
static const struct ref_sb *ref_chosen(const uint8_t *img, struct ref_sb *a, struct ref_sb *b)
{
	bool va = ref_sb_read(img, a), vb = ref_sb_read(img + 4096, b);

	if (va && vb)
		return a->seq > b->seq ? a : b;
	return va ? a : vb ? b : NULL;
}

/* Does the record at rb prove data for slot under uuid? Fills lun, block, valid bytes. */
static bool ref_record(const uint8_t *rb, uint32_t rec_size, uint32_t slot, const uint8_t uuid[16],
                       uint16_t *lun, uint64_t *block, const uint8_t **valid)
{
	uint32_t seed = crc32c(0x48ac11, uuid, 16) ^ slot;
	uint32_t tag = get32(uuid) ^ get32(uuid + 12);

	if (get16(rb + 4) != 0x4c48 || !(rb[6] & 1) || get32(rb + 12) != tag ||
	    get32(rb) != crc32c(seed, rb + 4, rec_size - 4))
		return false;
	*lun = get16(rb + 8);
	*block = get64(rb + 16);
	*valid = rb + 24;
	return *block <= HL_CACHE_MAX_BLOCK_NR;
}

/* Check the core after a load that returned rc. @return true when the load may have changed it. */
static bool check(const struct geo *g, struct hl_cache_core *c, int rc)
{
	const struct hl_cache_layout *gl = &g->l;
	static struct ref_sb a, b;
	const struct ref_sb *s = ref_chosen(g->img, &a, &b);
	uint64_t per = PAGE / gl->rec_size;
	uint32_t vb = vbytes_of(gl->block_size);
	int valid = 0;

	for (uint32_t slot = 0; slot < gl->nslots; slot++) {
		struct hl_cache_slot_rec r;
		const uint8_t *dv;
		uint16_t dlun;
		uint64_t dblock;
		if (!hl_cache_core_slot_get(c, slot, &r))
			continue;
		valid++;
		if (rc < 0 || !s) {
			fprintf(stderr, "slot %u valid after a refused load (%d)\n", slot, rc);
			abort();
		}
		uint64_t page = slot / per;
		if (!(get64(g->img + gl->sum_off + page / 64 * 8) >> (page % 64) & 1)) {
			fprintf(stderr,
			        "slot %u restored from page %" PRIu64 " the summary skips\n", slot,
			        page);
			abort();
		}
		if (!ref_record(g->img + gl->meta_off + (uint64_t)slot * gl->rec_size, gl->rec_size,
		                slot, s->uuid, &dlun, &dblock, &dv)) {
			fprintf(stderr, "slot %u restored without an intact record\n", slot);
			abort();
		}
		if (dlun != r.lun || dblock != r.block) {
			fprintf(stderr, "slot %u: record says %u/%" PRIu64 ", RAM %u/%" PRIu64 "\n",
			        slot, dlun, dblock, r.lun, r.block);
			abort();
		}
		for (uint32_t i = 0; i < vb; i++)
			if (r.valid[i] & ~dv[i]) {
				fprintf(stderr,
				        "slot %u: sectors valid that the record does not claim\n",
				        slot);
				abort();
			}
		for (uint32_t i = 0; i < s->nranges; i++)
			if (s->ranges[i].lun == r.lun && s->ranges[i].lo <= r.block &&
			    r.block <= s->ranges[i].hi) {
				fprintf(stderr,
				        "slot %u: block %u/%" PRIu64 " written while restoring, "
				        "restored all the same\n",
				        slot, r.lun, r.block);
				abort();
			}
	}
	if (rc >= 0 && rc != valid) {
		fprintf(stderr, "load said %d slots restored, %d are valid\n", rc, valid);
		abort();
	}
	return rc >= 0 || (s && s->version == SB_VERSION_RANGES);
}

/*
 * The seed corpus (tests/fuzz/corpus/fuzz_cache_meta/) is made from the
 * real images: HL_FUZZ_WRITE_SEEDS=DIR ./fuzz_cache_meta -runs=0 writes it.
 */
static void write_seed(const char *dir, const char *name, uint8_t flags, uint8_t pg, size_t sb_len,
                       const uint8_t *sbb, const uint8_t *sum, size_t page_len, const uint8_t *pgb)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	if (!f)
		abort();
	fputc(flags, f);
	fputc(pg, f);
	fputc((int)(sb_len & 0xff), f);
	fputc((int)(sb_len >> 8), f);
	fwrite(sbb, 1, sb_len, f);
	if (sum)
		fwrite(sum, 1, 8, f);
	if (page_len)
		fwrite(pgb, 1, page_len, f);
	fclose(f);
}

static void write_seeds(const char *dir)
{
	static const uint8_t zero[8];
	uint8_t page[PAGE];

	for (int gi = 0; gi < NGEO; gi++) {
		const struct geo *g = &geos[gi];
		const uint8_t *clean = g->base[0], *pend = g->base[1];
		const uint8_t *p0 = clean + g->l.meta_off;
		char name[64];

		/* The images as they are. */
		snprintf(name, sizeof(name), "g%d_clean", gi);
		write_seed(dir, name, (uint8_t)gi, 0, 0, NULL, NULL, 0, NULL);
		snprintf(name, sizeof(name), "g%d_pending", gi);
		write_seed(dir, name, (uint8_t)(gi | 2), 0, 0, NULL, NULL, 0, NULL);
		/* Their superblocks and first record page spelled out (the newer copy patched). */
		uint64_t sa = get64(clean + 56), sb2 = get64(clean + SB_SIZE + 56);
		snprintf(name, sizeof(name), "g%d_clean_full", gi);
		write_seed(dir, name, (uint8_t)(gi | (sb2 > sa ? 0x10 : 0)), 0, SB_SIZE,
		           clean + (sb2 > sa ? SB_SIZE : 0), zero, PAGE, p0);
		sa = get64(pend + 56);
		sb2 = get64(pend + SB_SIZE + 56);
		snprintf(name, sizeof(name), "g%d_pending_full", gi);
		write_seed(dir, name, (uint8_t)(gi | 2 | (sb2 > sa ? 0x10 : 0)), 0, SB_SIZE,
		           pend + (sb2 > sa ? SB_SIZE : 0), zero, PAGE, p0);
		/*
		 * Record page 0 with every record moved to LUN 0 block 5 (inside a
		 * pending range, and duplicates), CRCs recomputed by the harness.
		 */
		memcpy(page, p0, PAGE);
		for (uint32_t i = 0; i < PAGE / g->l.rec_size; i++) {
			put16(page + i * g->l.rec_size + 8, 0);
			put64(page + i * g->l.rec_size + 16, 5);
		}
		snprintf(name, sizeof(name), "g%d_pending_dup", gi);
		write_seed(dir, name, (uint8_t)(gi | 2 | 0x08), 0, 0, NULL, zero, PAGE, page);
		/* Every summary bit set: pages that never held records are read too. */
		static const uint8_t ones[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
		snprintf(name, sizeof(name), "g%d_summary_all", gi);
		write_seed(dir, name, (uint8_t)gi, 0, 0, NULL, ones, 0, NULL);
	}
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *dir = getenv("HL_FUZZ_WRITE_SEEDS");

	(void)argc;
	(void)argv;
	init();
	if (dir && *dir)
		write_seeds(dir);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct hl_cache_layout l;
	struct hl_cache_core *c;
	struct geo *g;
	uint8_t flags, *sb, *page;
	size_t n;
	int rc;

	init();
	if (size < 4)
		return 0;
	flags = data[0];
	g = &geos[flags & 1];
	memcpy(g->img, g->base[flags >> 1 & 1], g->l.data_off);
	sb = g->img + (flags & 0x10 ? SB_SIZE : 0);
	page = g->img + g->l.meta_off + (uint64_t)(data[1] % g->l.npages) * PAGE;
	n = HL_MIN((size_t)(data[2] | data[3] << 8), (size_t)SB_SIZE);
	data += 4;
	size -= 4;
	n = HL_MIN(n, size);
	memcpy(sb, data, n);
	data += n;
	size -= n;
	for (size_t i = 0; i < 8 && i < size; i++)
		g->img[g->l.sum_off + i] ^= data[i];
	data += HL_MIN(size, (size_t)8);
	size -= HL_MIN(size, (size_t)8);
	memcpy(page, data, HL_MIN(size, (size_t)PAGE));
	if (flags & 0x20)
		memset(g->img + (flags & 0x10 ? 0 : SB_SIZE), 0, SB_SIZE);
	if (flags & 0x04)
		put32(sb + SB_SIZE - 4, crc32c(0, sb, SB_SIZE - 4));
	if (flags & 0x08) {
		uint32_t seed = seed_of(sb + 64), tag = tag_of(sb + 64);
		uint64_t first = (uint64_t)(page - (g->img + g->l.meta_off)) / g->l.rec_size;
		for (uint32_t i = 0; i < PAGE / g->l.rec_size; i++) {
			uint8_t *rb = page + i * g->l.rec_size;
			put32(rb + 12, tag);
			put32(rb, crc32c(seed ^ (uint32_t)(first + i), rb + 4, g->l.rec_size - 4));
		}
	}
	if (g->d->ops->pwrite(g->d, g->img, g->l.data_off, 0))
		abort();

	if (!g->core)
		g->core = new_core(g);
	c = g->core;
	rc = hl_cache_meta_load(g->d, c, &l);
	if (check(g, c, rc)) {
		/*
		 * A load that restored or began restoring changed the core: the
		 * next one gets a fresh core. One refused before (no superblock of
		 * this geometry and version) never touched it: it is kept, since
		 * a core's destroy frees a table of every LUN id (most of the
		 * time of a run under ASan).
		 */
		hl_cache_core_destroy(c);
		g->core = NULL;
	}
	if (rc >= 0)
		hl_cache_layout_release(&l);
	return 0;
}
