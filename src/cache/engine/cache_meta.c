/*
 * cache_meta.c - the on-device metadata of a cache (docs/cache-format.md):
 * two superblock copies, a summary of one bit per record page, then one
 * fixed-size record per slot packed in 4 KiB pages, then the slot data.
 * Every record carries a CRC-32C seeded with the slot number and the
 * cache's uuid, and the format's tag, so a torn, misplaced or leftover
 * record never validates; the summary says which pages may hold records
 * that claim data, so that formatting writes no record page and a load
 * reads only the pages that matter (a 4 TiB cache of 4 KiB blocks has
 * 32 GiB of records).
 *
 * Ordering rules that keep stale data from ever looking valid:
 *  - a record claims only sectors whose data write completed and was
 *    flushed (hl_cache_meta_sync flushes data before writing records);
 *  - before data of a slot whose record may claim something is
 *    overwritten, or before an origin write to a block some record may
 *    still claim, the record is rewritten from RAM and flushed
 *    (hl_cache_meta_barrier / hl_cache_meta_sync);
 *  - a page's summary bit is durable before the page claims anything, and
 *    is cleared only once a version of the page that claims nothing is.
 * All functions here block; the caller serialises them per device.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <time.h>

#include "cache/engine/cache_trace.h"
#include "cache/engine/engine_internal.h"
#include "hotlun/log.h"
#include "hotlun/util.h"

#define SB_SIZE     4096u
#define PAGE        4096u
#define SB_MAGIC    "HLCACHE"
#define SB_VERSION  2u
/*
 * The versions a superblock in state SB_PENDING carries: a hotlund before
 * the lazy restore reads the state as informational, but refuses any
 * version but 2 (cold start), so a downgrade never restores such a cache.
 * Version 3: no list of what was written (every record may be stale: a
 * cold start; what a hotlund before the durable filter wrote, and what
 * this one writes for a filter that says "all"). Version 4: the blocks
 * written while restoring, as SB_RANGES_MAX ranges at most; a hotlund
 * that knows version 3 only refuses 4 as well (any version but 2).
 */
#define SB_VERSION_PENDING 3u
#define SB_VERSION_RANGES  4u
#define SB_RANGES_OFF      112u
#define SB_RANGE_LEN       18u /* lun u16, lo u64, hi u64 */
#define SB_RANGES_MAX      ((SB_SIZE - 4 - SB_RANGES_OFF) / SB_RANGE_LEN) /* 221 */
#define SB_CLEAN    1u
#define SB_OPEN     2u
#define SB_PENDING  3u /* a lazy restore noted writes: unloaded records may be stale */
#define REC_MAGIC   0x4c48u
#define REC_F_VALID 0x01u
#define LOAD_CHUNK  (1024u * 1024)
#define SUM_BITS    (PAGE * 8u) /* record pages per summary block */

/*
 * ---- CRC-32C (Castagnoli) ----
 * SSE4.2's crc32 instruction where the CPU has it (a load checks the CRC
 * of every record it reads: bytewise it was 72% of a warm restart's CPU),
 * else slicing by 8.
 */

static uint32_t crc_table[8][256];
static bool crc_hw;
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
		crc_table[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++)
		for (int t = 1; t < 8; t++)
			crc_table[t][i] =
			    (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
#if defined(__x86_64__)
	__builtin_cpu_init();
	crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t c, const uint8_t *p,
                                                            size_t len)
{
	for (; len >= 8; p += 8, len -= 8) {
		uint64_t v;
		memcpy(&v, p, 8);
		c = (uint32_t)__builtin_ia32_crc32di(c, v);
	}
	while (len--)
		c = __builtin_ia32_crc32qi(c, *p++);
	return c;
}
#endif

static uint32_t crc_soft(uint32_t c, const uint8_t *p, size_t len)
{
	for (; len >= 8; p += 8, len -= 8) {
		uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
		                   (uint32_t)p[3] << 24);
		c = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
		    crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^ crc_table[3][p[4]] ^
		    crc_table[2][p[5]] ^ crc_table[1][p[6]] ^ crc_table[0][p[7]];
	}
	while (len--)
		c = crc_table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
	return c;
}

static uint32_t crc32c(uint32_t seed, const void *data, size_t len)
{
	pthread_once(&crc_once, crc_init);
#if defined(__x86_64__)
	if (crc_hw)
		return ~crc_sse42(~seed, data, len);
#endif
	return ~crc_soft(~seed, data, len);
}

/* ---- little-endian helpers ---- */

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)v);
	put16(p + 2, (uint16_t)(v >> 16));
}

static void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)get16(p) | (uint32_t)get16(p + 2) << 16;
}

static uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* ---- layout ---- */

static uint32_t vbytes_of(uint32_t bs)
{
	uint32_t spb = bs / HL_CACHE_SECTOR;
	return spb >= 8 ? spb / 8 : 1;
}

/* Does a device of dev_size hold n slots (records, summary and data)? Fills l's offsets. */
static bool layout_fits(uint64_t dev_size, uint64_t n, struct hl_cache_layout *l)
{
	uint64_t per_page = PAGE / l->rec_size;

	l->npages = HL_DIV_ROUND_UP(n, per_page);
	l->sum_len = HL_ALIGN_UP(HL_DIV_ROUND_UP(l->npages, 8), (uint64_t)PAGE);
	l->meta_off = l->sum_off + l->sum_len;
	l->meta_len = l->npages * PAGE;
	l->data_off = HL_ALIGN_UP(l->meta_off + l->meta_len, (uint64_t)l->block_size);
	return l->data_off <= dev_size && n <= (dev_size - l->data_off) / l->block_size;
}

int hl_cache_layout_compute(uint64_t dev_size, uint32_t bs, struct hl_cache_layout *l)
{
	uint64_t n;

	if (bs < HL_CACHE_MIN_BLOCK || bs > HL_CACHE_MAX_BLOCK || (bs & (bs - 1)))
		return -EINVAL;
	memset(l, 0, sizeof(*l));
	l->block_size = bs;
	l->rec_size = 24 + vbytes_of(bs) <= 32 ? 32 : 64;
	l->sum_off = 2 * SB_SIZE;
	if (dev_size < l->sum_off + 2 * PAGE + bs)
		return -ENOSPC;
	/* Each slot costs at least its block and its record: start there, step down. */
	n = (dev_size - l->sum_off) / (bs + l->rec_size) + 1;
	while (n && !layout_fits(dev_size, n, l))
		n--;
	if (!n)
		return -ENOSPC;
	if (n >= UINT32_MAX - 1)
		return -EINVAL;
	l->nslots = n;
	return 0;
}

void hl_cache_layout_release(struct hl_cache_layout *l)
{
	free(l->sum);
	free(l->sum_stale);
	l->sum = l->sum_stale = NULL;
}

/* The RAM mirror of an all-clear summary. @return 0 or -ENOMEM. */
static int sum_alloc(struct hl_cache_layout *l)
{
	l->sum = calloc(HL_DIV_ROUND_UP(l->npages, 64), sizeof(uint64_t));
	l->sum_stale = calloc(HL_DIV_ROUND_UP(l->sum_len / PAGE, 64), sizeof(uint64_t));
	if (l->sum && l->sum_stale)
		return 0;
	hl_cache_layout_release(l);
	return -ENOMEM;
}

/* ---- superblock ---- */

struct sb {
	uint32_t version, block_size, rec_size, state;
	uint64_t nslots, meta_off, meta_len, data_off, seq, dev_size, sum_off, sum_len;
	uint8_t uuid[16];
	uint32_t nranges; /* state SB_PENDING: ranges written while restoring (0: all) */
	struct hl_cache_rs_range ranges[SB_RANGES_MAX];
};

static void sb_encode(const struct sb *s, uint8_t *b)
{
	memset(b, 0, SB_SIZE);
	memcpy(b, SB_MAGIC, 8);
	put32(b + 8, s->state != SB_PENDING ? SB_VERSION
	             : s->nranges          ? SB_VERSION_RANGES
	                                   : SB_VERSION_PENDING);
	put32(b + 12, s->block_size);
	put64(b + 16, s->nslots);
	put32(b + 24, s->rec_size);
	put32(b + 28, s->state);
	put64(b + 32, s->meta_off);
	put64(b + 40, s->meta_len);
	put64(b + 48, s->data_off);
	put64(b + 56, s->seq);
	memcpy(b + 64, s->uuid, 16);
	put64(b + 80, s->dev_size);
	put64(b + 88, s->sum_off);
	put64(b + 96, s->sum_len);
	if (s->state == SB_PENDING) {
		put32(b + 104, s->nranges);
		for (uint32_t i = 0; i < s->nranges; i++) {
			uint8_t *p = b + SB_RANGES_OFF + i * SB_RANGE_LEN;
			put16(p, s->ranges[i].lun);
			put64(p + 2, s->ranges[i].lo);
			put64(p + 10, s->ranges[i].hi);
		}
	}
	put32(b + SB_SIZE - 4, crc32c(0, b, SB_SIZE - 4));
}

/* @return true for an intact superblock of any version (s->version says which). */
static bool sb_decode(const uint8_t *b, struct sb *s)
{
	if (memcmp(b, SB_MAGIC, 8) || get32(b + SB_SIZE - 4) != crc32c(0, b, SB_SIZE - 4))
		return false;
	memset(s, 0, sizeof(*s));
	s->version = get32(b + 8);
	s->block_size = get32(b + 12);
	s->nslots = get64(b + 16);
	s->rec_size = get32(b + 24);
	s->state = get32(b + 28);
	s->meta_off = get64(b + 32);
	s->meta_len = get64(b + 40);
	s->data_off = get64(b + 48);
	s->seq = get64(b + 56);
	memcpy(s->uuid, b + 64, 16);
	s->dev_size = get64(b + 80);
	s->sum_off = get64(b + 88);
	s->sum_len = get64(b + 96);
	if (s->version == SB_VERSION_RANGES) {
		s->nranges = get32(b + 104);
		if (s->nranges > SB_RANGES_MAX)
			s->nranges = 0; /* (refused: version 4 without ranges) */
		for (uint32_t i = 0; i < s->nranges; i++) {
			const uint8_t *p = b + SB_RANGES_OFF + i * SB_RANGE_LEN;
			s->ranges[i].lun = get16(p);
			s->ranges[i].lo = get64(p + 2);
			s->ranges[i].hi = get64(p + 10);
		}
	}
	return true;
}

/* The superblock fields of layout l (state and seq are the caller's). */
static void sb_of_layout(const struct hl_cache_layout *l, uint64_t dev_size, struct sb *s)
{
	memset(s, 0, sizeof(*s));
	s->version = SB_VERSION;
	s->block_size = l->block_size;
	s->rec_size = l->rec_size;
	s->nslots = l->nslots;
	s->meta_off = l->meta_off;
	s->meta_len = l->meta_len;
	s->data_off = l->data_off;
	s->sum_off = l->sum_off;
	s->sum_len = l->sum_len;
	s->dev_size = dev_size;
	s->seq = l->sb_seq;
	memcpy(s->uuid, l->uuid, 16);
}

static uint32_t seed_of(const uint8_t uuid[16])
{
	return crc32c(0x48ac11, uuid, 16);
}

/* The format tag: uuid bits that the seed does not depend on alone. */
static uint32_t tag_of(const uint8_t uuid[16])
{
	return get32(uuid) ^ get32(uuid + 12);
}

/* A zeroed, 4 KiB-aligned buffer for superblock and record pages (len: whole pages). */
static void *page_zalloc(size_t len)
{
	void *p = NULL;
	if (posix_memalign(&p, 4096, len))
		return NULL;
	memset(p, 0, len);
	return p;
}

/* Zero both superblock copies, then flush: the device holds none. */
static int sb_wipe(struct hl_cache_dev *d)
{
	uint8_t *z = page_zalloc(2 * SB_SIZE);
	int rc;

	if (!z)
		return -ENOMEM;
	rc = d->ops->pwrite(d, z, 2 * SB_SIZE, 0);
	if (!rc)
		rc = d->ops->flush(d);
	free(z);
	return rc;
}

int hl_cache_meta_kill(struct hl_cache_dev *d, struct hl_cache_layout *l)
{
	__atomic_store_n(&l->killed, true, __ATOMIC_SEQ_CST);
	return sb_wipe(d);
}

/*
 * Write the superblock of l to copy (seq & 1): the other copy survives a
 * torn write. The kill takes no lock a writer holds (the writer may be
 * stuck in a device call for ever): a write out while it wiped may land
 * after the wipe. So the writer looks once its write returned: killed
 * since, it wipes again (-ECANCELED). Either it sees the kill, or the
 * kill's wipe was issued after its write ended.
 */
static int sb_write(struct hl_cache_dev *d, struct hl_cache_layout *l, struct sb *s)
{
	uint8_t *b = page_zalloc(SB_SIZE);
	int rc;

	if (!b)
		return -ENOMEM;
	s->seq++;
	sb_encode(s, b);
	rc = d->ops->pwrite(d, b, SB_SIZE, (s->seq & 1) * SB_SIZE);
	if (!rc)
		rc = d->ops->flush(d);
	free(b);
	if (__atomic_load_n(&l->killed, __ATOMIC_SEQ_CST)) {
		sb_wipe(d);
		rc = -ECANCELED;
	}
	return rc;
}

/*
 * Write (and flush) the superblock of l in state (SB_PENDING: with the
 * ranges r[0..n), none for "all": cold); l->sb_state follows on success.
 */
static int sb_write_ranges(struct hl_cache_dev *d, struct hl_cache_layout *l, uint32_t state,
                           const struct hl_cache_rs_range *r, uint32_t n)
{
	struct sb s;
	int rc;

	sb_of_layout(l, d->size, &s);
	s.state = state;
	if (state == SB_PENDING && n <= SB_RANGES_MAX) {
		s.nranges = n;
		if (n)
			memcpy(s.ranges, r, n * sizeof(*r));
	}
	rc = sb_write(d, l, &s);
	l->sb_seq = s.seq;
	if (!rc)
		l->sb_state = state;
	return rc;
}

static int sb_write_state(struct hl_cache_dev *d, struct hl_cache_layout *l, uint32_t state)
{
	return sb_write_ranges(d, l, state, NULL, 0);
}

/* ---- page summary ---- */

static bool sum_test(const struct hl_cache_layout *l, uint64_t page)
{
	return l->sum[page / 64] >> (page % 64) & 1;
}

/* Write summary block blk from the RAM mirror (its cleared bits included). No flush. */
static int sum_write_block(struct hl_cache_dev *d, const struct hl_cache_layout *l, uint64_t blk)
{
	uint8_t *b = page_zalloc(PAGE);
	uint64_t w0 = blk * (SUM_BITS / 64), nw = HL_DIV_ROUND_UP(l->npages, 64);
	int rc;

	if (!b)
		return -ENOMEM;
	for (uint64_t i = 0; i < SUM_BITS / 64 && w0 + i < nw; i++)
		put64(b + i * 8, l->sum[w0 + i]);
	rc = d->ops->pwrite(d, b, PAGE, l->sum_off + blk * PAGE);
	if (!rc)
		l->sum_stale[blk / 64] &= ~(1ull << (blk % 64));
	free(b);
	return rc;
}

/*
 * Pages[0 .. n-1] (ascending) are about to be written; has_claims[i]: the
 * new version of pages[i] claims data. Set the summary bit of each such
 * page not marked yet and write the summary blocks that changed (the
 * caller's next flush makes them durable before the pages are written).
 * On failure the bits set here are taken back: they are not known to be
 * on the device.
 */
static int sum_mark(struct hl_cache_dev *d, const struct hl_cache_layout *l, const uint64_t *pages,
                    const bool *has_claims, uint64_t n)
{
	bool *fresh = n ? calloc(n, sizeof(*fresh)) : NULL;
	int rc = 0;

	if (n && !fresh)
		return -ENOMEM;
	for (uint64_t i = 0, j; i < n && !rc; i = j) {
		uint64_t blk = pages[i] / SUM_BITS;
		bool changed = false;
		for (j = i; j < n && pages[j] / SUM_BITS == blk; j++) {
			if (has_claims[j] && !sum_test(l, pages[j])) {
				l->sum[pages[j] / 64] |= 1ull << (pages[j] % 64);
				fresh[j] = changed = true;
			}
		}
		if (changed)
			rc = sum_write_block(d, l, blk);
	}
	for (uint64_t i = 0; rc && i < n; i++)
		if (fresh[i])
			l->sum[pages[i] / 64] &= ~(1ull << (pages[i] % 64));
	free(fresh);
	return rc;
}

/* A version of page p that claims nothing is durable: a load may skip it. */
static void sum_clear(const struct hl_cache_layout *l, uint64_t p)
{
	uint64_t blk = p / SUM_BITS;

	if (!sum_test(l, p))
		return;
	l->sum[p / 64] &= ~(1ull << (p % 64));
	l->sum_stale[blk / 64] |= 1ull << (blk % 64);
}

/* ---- records ---- */

static void rec_encode(const struct hl_cache_layout *l, uint32_t slot,
                       const struct hl_cache_slot_rec *r, bool valid, uint8_t *b)
{
	uint32_t vb = vbytes_of(l->block_size);

	memset(b, 0, l->rec_size);
	put16(b + 4, REC_MAGIC);
	b[6] = valid ? REC_F_VALID : 0;
	put16(b + 8, valid ? r->lun : 0);
	put32(b + 12, l->tag);
	put64(b + 16, valid ? r->block : 0);
	if (valid)
		memcpy(b + 24, r->valid, vb);
	put32(b, crc32c(l->seed ^ slot, b + 4, l->rec_size - 4));
}

/* @return true when the record is intact, of this format, and claims data. */
static bool rec_decode(const struct hl_cache_layout *l, uint32_t slot, const uint8_t *b,
                       struct hl_cache_slot_rec *r)
{
	uint32_t vb = vbytes_of(l->block_size);

	/* Cheap tests first: most records a load reads are empty or of this format. */
	if (get16(b + 4) != REC_MAGIC || !(b[6] & REC_F_VALID) || get32(b + 12) != l->tag ||
	    get32(b) != crc32c(l->seed ^ slot, b + 4, l->rec_size - 4))
		return false;
	memset(r, 0, sizeof(*r));
	r->lun = get16(b + 8);
	r->block = get64(b + 16);
	memcpy(r->valid, b + 24, vb);
	return r->block <= HL_CACHE_MAX_BLOCK_NR;
}

static void trace_rec(enum cache_trace_ev ev, uint32_t slot, uint32_t aux,
                      const struct hl_cache_slot_rec *r)
{
	uint64_t v;

	if (!cache_trace_on)
		return;
	memcpy(&v, r->valid, sizeof(v));
	cache_trace(ev, 0, r->lun, slot, aux, r->block, v, r->gen);
}

/*
 * Encode record page `page` from the RAM state of its slots. A slot whose
 * record claims data counts as claimed on the device from this snapshot on
 * (barriers needed before its data changes); the claim is reported
 * persisted only after the caller's flush. @return true when the page
 * claims anything.
 */
static bool page_encode(const struct hl_cache_layout *l, struct hl_cache_core *c, uint64_t page,
                        uint8_t *buf, uint8_t *claims)
{
	uint64_t per = PAGE / l->rec_size, first = page * per;
	bool any = false;

	memset(buf, 0, PAGE);
	for (uint64_t i = 0; i < per && first + i < l->nslots; i++) {
		struct hl_cache_slot_rec r;
		bool v = hl_cache_core_slot_get(c, (uint32_t)(first + i), &r);
		rec_encode(l, (uint32_t)(first + i), &r, v, buf + i * l->rec_size);
		claims[i] = v;
		any |= v;
		if (v) {
			trace_rec(CT_RECORD, (uint32_t)(first + i), (uint32_t)page, &r);
			hl_cache_core_slot_claim_pending(c, (uint32_t)(first + i));
		}
	}
	return any;
}

static void page_persisted(const struct hl_cache_layout *l, struct hl_cache_core *c, uint64_t page,
                           const uint8_t *claims, uint64_t epoch)
{
	uint64_t per = PAGE / l->rec_size, first = page * per;
	bool any = false;

	cache_trace(CT_PERSIST, 0, 0, (uint32_t)first, (uint32_t)page, 0, epoch, 0);
	for (uint64_t i = 0; i < per && first + i < l->nslots; i++) {
		hl_cache_core_slot_persisted(c, (uint32_t)(first + i), claims[i], epoch);
		any |= claims[i] != 0;
	}
	if (!any)
		sum_clear(l, page);
}

/* ---- public ---- */

/* A new uuid: records and summary bits of any earlier format must never match it. */
static void new_uuid(const struct hl_cache_dev *d, uint8_t uuid[16])
{
	if (getrandom(uuid, 16, 0) == 16)
		return;
	/* No entropy source: the clock, the address space and the device size. */
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t a = hl_hash64(&d, sizeof(d),
	                       (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30 ^ (uintptr_t)uuid);
	uint64_t b = hl_hash64(&a, sizeof(a), d->size ^ (uint64_t)rand());
	memcpy(uuid, &a, 8);
	memcpy(uuid + 8, &b, 8);
}

int hl_cache_meta_format(struct hl_cache_dev *d, uint32_t bs, struct hl_cache_layout *l)
{
	uint8_t *buf;
	int rc;

	rc = hl_cache_layout_compute(d->size, bs, l);
	if (rc)
		return rc;
	rc = sum_alloc(l);
	if (rc)
		return rc;
	buf = page_zalloc(LOAD_CHUNK);
	if (!buf) {
		hl_cache_layout_release(l);
		return -ENOMEM;
	}
	/*
	 * Kill both superblock copies first: a format torn anywhere leaves no
	 * cache. Then clear the summary: no record page is read until a page
	 * write of this format marks it, so the record pages need no zeroing
	 * (what they hold fails the new uuid's CRC and tag).
	 */
	rc = d->ops->pwrite(d, buf, 2 * SB_SIZE, 0);
	if (!rc)
		rc = d->ops->flush(d);
	for (uint64_t off = 0; !rc && off < l->sum_len; off += LOAD_CHUNK)
		rc = d->ops->pwrite(d, buf, (size_t)HL_MIN((uint64_t)LOAD_CHUNK, l->sum_len - off),
		                    l->sum_off + off);
	if (!rc)
		rc = d->ops->flush(d);
	free(buf);
	if (rc) {
		hl_cache_layout_release(l);
		return rc;
	}
	new_uuid(d, l->uuid);
	l->seed = seed_of(l->uuid);
	l->tag = tag_of(l->uuid);
	return sb_write_state(d, l, SB_CLEAN);
}

int hl_cache_meta_forge(struct hl_cache_dev *d, struct hl_cache_layout *l, uint16_t lun,
                        uint64_t nblocks)
{
	const uint64_t chunk = 8 * (LOAD_CHUNK / PAGE); /* record pages per write: 8 MiB */
	uint64_t per = PAGE / l->rec_size, npg = HL_DIV_ROUND_UP(nblocks, per);
	uint32_t spb = l->block_size / HL_CACHE_SECTOR;
	struct hl_cache_slot_rec r;
	uint64_t *pages;
	uint8_t *buf;
	bool *any;
	int rc = 0;

	if (!l->sum || nblocks > l->nslots || nblocks > HL_CACHE_MAX_BLOCK_NR)
		return -EINVAL;
	memset(&r, 0, sizeof(r));
	r.lun = lun;
	if (spb < 8)
		r.valid[0] = (uint8_t)((1u << spb) - 1);
	else
		memset(r.valid, 0xff, spb / 8);
	buf = page_zalloc(chunk * PAGE);
	pages = malloc(chunk * sizeof(*pages));
	any = malloc(chunk * sizeof(*any));
	if (!buf || !pages || !any)
		rc = -ENOMEM;
	for (uint64_t p0 = 0; !rc && p0 < npg; p0 += chunk) {
		uint64_t n = HL_MIN(chunk, npg - p0);
		for (uint64_t k = 0; k < n; k++) {
			uint64_t page = p0 + k;
			for (uint64_t i = 0; i < per; i++) {
				uint64_t slot = page * per + i;
				uint8_t *b = buf + k * PAGE + i * l->rec_size;
				if (slot >= l->nslots) {
					memset(b, 0, l->rec_size);
					continue;
				}
				r.block = slot;
				rec_encode(l, (uint32_t)slot, &r, slot < nblocks, b);
			}
			pages[k] = page;
			any[k] = true;
		}
		/* The summary bits before the pages (made durable by the flush below). */
		rc = sum_mark(d, l, pages, any, n);
		if (!rc)
			rc = d->ops->pwrite(d, buf, (size_t)(n * PAGE), l->meta_off + p0 * PAGE);
	}
	if (!rc)
		rc = d->ops->flush(d);
	free(buf);
	free(pages);
	free(any);
	return rc;
}

/*
 * Decode the records of pages [k0, k1) (in buf) into rs->recs, once and
 * without the lock (the CRC is most of a load's CPU). @return 0 or -ENOMEM.
 */
static int decode_pages(const struct hl_cache_layout *l, struct hl_cache_restore *rs, uint64_t k0,
                        uint64_t k1, const uint8_t *buf)
{
	uint64_t per = PAGE / l->rec_size, n = (k1 - k0) * per;

	if (n > rs->recs_cap) {
		struct hl_cache_slot_rec *nr = realloc(rs->recs, n * sizeof(*nr));
		if (!nr)
			return -ENOMEM;
		rs->recs = nr;
		bool *ok = realloc(rs->recs_ok, n * sizeof(*ok));
		if (!ok)
			return -ENOMEM;
		rs->recs_ok = ok;
		rs->recs_cap = n;
	}
	for (uint64_t j = 0; j < n; j++) {
		uint64_t slot = k0 * per + j;
		rs->recs_ok[j] = slot < l->nslots &&
		                 rec_decode(l, (uint32_t)slot, buf + j * l->rec_size, &rs->recs[j]);
	}
	return 0;
}

/*
 * Restore or drop every record of the page (decoded: rec[i], ok[i] for its
 * i-th slot). @return slots restored; *any: one claimed.
 */
static int load_page(const struct hl_cache_layout *l, struct hl_cache_core *c, uint64_t page,
                     const struct hl_cache_slot_rec *rec, const bool *ok, bool *any,
                     struct hl_cache_restore *rs)
{
	uint64_t per = PAGE / l->rec_size;
	int restored = 0;

	*any = false;
	for (uint64_t i = 0; i < per; i++) {
		uint64_t slot = page * per + i;
		if (slot >= l->nslots)
			break;
		if (!ok[i])
			continue;
		*any = true;
		/*
		 * Unknown LUNs, duplicates and out-of-partition slots are dropped,
		 * but their records still claim data on the device: the slot must
		 * take a barrier before it is reused, the next sync rewrites the
		 * record, and a write to the block syncs first (a stale claim), or
		 * a later crash could restore the old claim over another block's
		 * data or over the block's newer content.
		 */
		int rrc = hl_cache_core_slot_restore(c, (uint32_t)slot, &rec[i]);
		if (rrc == 0) {
			restored++;
			trace_rec(CT_RESTORE, (uint32_t)slot, 0, &rec[i]);
		} else {
			rs->dropped++;
			rs->filtered += rrc == -ESTALE;
			hl_cache_core_slot_drop_claimed(c, (uint32_t)slot, &rec[i]);
			trace_rec(CT_RESTORE, (uint32_t)slot, 1, &rec[i]);
		}
	}
	return restored;
}

/* Read the summary into l->sum (allocated). */
static int load_summary(struct hl_cache_dev *d, struct hl_cache_layout *l, uint8_t *buf)
{
	uint64_t nw = HL_DIV_ROUND_UP(l->npages, 64);
	int rc;

	for (uint64_t off = 0; off < l->sum_len; off += LOAD_CHUNK) {
		size_t len = (size_t)HL_MIN((uint64_t)LOAD_CHUNK, l->sum_len - off);
		rc = d->ops->pread(d, buf, len, l->sum_off + off);
		if (rc)
			return rc;
		for (uint64_t i = 0; i < len / 8 && off / 8 + i < nw; i++)
			l->sum[off / 8 + i] = get64(buf + i * 8);
	}
	/* Bits past the last page mean nothing. */
	if (l->npages % 64)
		l->sum[nw - 1] &= (1ull << (l->npages % 64)) - 1;
	return 0;
}

void hl_cache_restore_release(struct hl_cache_restore *r)
{
	free(r->marks);
	free(r->buf);
	free(r->recs);
	free(r->recs_ok);
	r->marks = NULL;
	r->buf = NULL;
	r->recs = NULL;
	r->recs_ok = NULL;
	r->recs_cap = 0;
}

/*
 * Fills while restoring (rule 5): the pages the loader will read are held
 * until it restored them. No memory: no fills, as before.
 */
static void hold_pages(const struct hl_cache_layout *l, struct hl_cache_core *c,
                       const struct hl_cache_restore *r)
{
	if (hl_cache_core_restore_hold(c, r->marks, l->npages, (uint32_t)(PAGE / l->rec_size)))
		HL_NOTICE("cache", "cache device: no fills until the restore ends");
}

int hl_cache_meta_ident(struct hl_cache_dev *d, uint8_t uuid[16], uint64_t *seq)
{
	uint8_t *buf = page_zalloc(2 * SB_SIZE);
	struct sb a, b, *s = NULL;
	bool va, vb;
	int rc;

	if (!buf)
		return -ENOMEM;
	rc = d->ops->pread(d, buf, 2 * SB_SIZE, 0);
	va = !rc && sb_decode(buf, &a);
	vb = !rc && sb_decode(buf + SB_SIZE, &b);
	free(buf);
	if (rc)
		return rc;
	/* (the copy hl_cache_meta_load_begin goes by) */
	if (va && vb)
		s = a.seq > b.seq ? &a : &b;
	else if (va || vb)
		s = va ? &a : &b;
	if (!s)
		return -ENODATA;
	memcpy(uuid, s->uuid, 16);
	*seq = s->seq;
	return 0;
}

int hl_cache_meta_load_begin(struct hl_cache_dev *d, struct hl_cache_core *c,
                             struct hl_cache_layout *l, struct hl_cache_restore *r)
{
	struct sb a, b, *s = NULL;
	bool va, vb, pending;
	int rc;
	struct hl_cache_core_info info;
	uint8_t *buf;

	memset(r, 0, sizeof(*r));
	memset(l, 0, sizeof(*l));
	buf = r->buf = page_zalloc(LOAD_CHUNK);
	if (!buf)
		return -ENOMEM;
	rc = d->ops->pread(d, buf, 2 * SB_SIZE, 0);
	if (rc)
		goto out;
	va = sb_decode(buf, &a);
	vb = sb_decode(buf + SB_SIZE, &b);
	if (va && vb)
		s = a.seq > b.seq ? &a : &b;
	else if (va || vb)
		s = va ? &a : &b;
	rc = -ENODATA;
	if (!s)
		goto out;
	if (s->version == SB_VERSION_PENDING && s->state == SB_PENDING) {
		/*
		 * The last run stopped during a lazy restore after a write or an
		 * invalidation reached the origin: records it never loaded may
		 * claim blocks written since. They cannot be told apart.
		 */
		HL_NOTICE("cache",
		          "cache device: the last run stopped while restoring its cache with "
		          "writes pending against records not loaded yet: its cached blocks are "
		          "dropped and the device is formatted");
		goto out;
	}
	pending = s->version == SB_VERSION_RANGES && s->state == SB_PENDING && s->nranges;
	if (s->version != SB_VERSION && !pending) {
		/* Never read records of another format as ours: the cache starts cold. */
		HL_NOTICE("cache",
		          "cache device: on-device format version %u (this hotlun writes version "
		          "%u): its cached blocks are dropped and the device is formatted",
		          s->version, SB_VERSION);
		goto out;
	}
	if (hl_cache_layout_compute(d->size, s->block_size, l) || l->nslots != s->nslots ||
	    l->rec_size != s->rec_size || l->data_off != s->data_off ||
	    l->meta_off != s->meta_off || l->meta_len != s->meta_len || l->sum_off != s->sum_off ||
	    l->sum_len != s->sum_len || s->dev_size != d->size)
		goto out;
	hl_cache_core_info(c, &info);
	if (info.block_size != s->block_size || info.nslots != s->nslots ||
	    (s->state == SB_PENDING && !pending))
		goto out; /* (state 3 under version 2: never written; refused all the same) */
	rc = sum_alloc(l);
	if (rc)
		goto out;
	memcpy(l->uuid, s->uuid, 16);
	l->seed = seed_of(s->uuid);
	l->tag = tag_of(s->uuid);
	l->sb_seq = s->seq;
	rc = load_summary(d, l, buf);
	if (rc)
		goto out;
	/* The loader's own copy: syncs change l->sum meanwhile. */
	r->marks = malloc(HL_DIV_ROUND_UP(l->npages, 64) * sizeof(uint64_t));
	rc = -ENOMEM;
	if (!r->marks)
		goto out;
	memcpy(r->marks, l->sum, HL_DIV_ROUND_UP(l->npages, 64) * sizeof(uint64_t));
	for (uint64_t w = 0; w < HL_DIV_ROUND_UP(l->npages, 64); w++)
		r->pages += (uint64_t)__builtin_popcountll(r->marks[w]);
	r->pages_left = r->pages;
	if (pending) {
		/*
		 * The last run stopped during a lazy restore after writes to the
		 * blocks of these ranges: their records are dropped as they come
		 * (the filter starts with them), and the state stays "pending"
		 * with them until the dropped records are rewritten
		 * (hl_cache_meta_load_finish).
		 */
		hl_cache_core_restore_begin(c);
		hold_pages(l, c, r);
		rc = hl_cache_core_restore_preload(c, s->ranges, s->nranges);
		if (!rc)
			rc = sb_write_ranges(d, l, SB_PENDING, s->ranges, s->nranges);
		if (rc) {
			hl_cache_core_restore_end(c);
			if (rc == -EINVAL) {
				HL_NOTICE("cache", "cache device: a pending restore with a damaged list of "
				                   "written blocks: the device is formatted");
				rc = -ENODATA;
			}
			goto out;
		}
		HL_NOTICE("cache",
		          "cache device: the last run stopped while restoring its cache: the "
		          "records of %u range(s) of blocks written meanwhile are dropped, the rest "
		          "is restored",
		          s->nranges);
		return 0;
	}
	/* Mark the cache open before anything can change on the device. */
	s->state = SB_OPEN;
	rc = sb_write(d, l, s);
	l->sb_seq = s->seq;
	if (rc)
		goto out;
	l->sb_state = SB_OPEN;
	hl_cache_core_restore_begin(c);
	hold_pages(l, c, r);
	return 0;
out:
	hl_cache_layout_release(l);
	hl_cache_restore_release(r);
	return rc;
}

/* Fault in the core's RAM that restoring the decoded pages [k0, k1) will touch, without a lock. */
static void prefault(const struct hl_cache_layout *l, const struct hl_cache_core *c, uint64_t k0,
                     uint64_t k1, const struct hl_cache_restore *rs)
{
	uint64_t per = PAGE / l->rec_size;

	hl_cache_core_restore_prefault_slots(c, (uint32_t)(k0 * per),
	                                     (uint32_t)HL_MIN((k1 - k0) * per, l->nslots - k0 * per));
	for (uint64_t j = 0; j < (k1 - k0) * per; j++)
		if (rs->recs_ok[j])
			hl_cache_core_restore_prefault(c, rs->recs[j].lun, rs->recs[j].block);
}

static uint64_t ts_ns(const struct timespec *t)
{
	return (uint64_t)t->tv_sec * 1000000000ull + (uint64_t)t->tv_nsec;
}

/*
 * What the loader thread did while it held the lock: its CPU time, page
 * faults and context switches (RUSAGE_THREAD). A hold much longer than its
 * CPU time was preempted or waited for a fault; the worst holds are logged
 * at the end of the restore.
 */
struct hold_probe {
	struct timespec wall, cpu; /* (rusage's CPU times move by ticks only: not them) */
	struct rusage ru;
};

static void hold_probe(struct hold_probe *p)
{
	clock_gettime(CLOCK_MONOTONIC, &p->wall);
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &p->cpu);
	getrusage(RUSAGE_THREAD, &p->ru);
}

/*
 * Measured (a full 256 GiB cache, 2 vCPUs under load): the holds of 50 ms
 * to 2.1 s had 40-180 us of CPU, no page fault, one involuntary context
 * switch: the loader was preempted with the lock held, and every hit
 * waited for it. As a real-time thread it is not preempted by ordinary
 * threads; it stays one only while it holds the lock (CPU work of about
 * 20 us a record page), so it takes no CPU away from anyone else.
 */
static void hold_rt(struct hl_cache_restore *r, bool on)
{
	struct sched_param sp = {.sched_priority = on ? 1 : r->sched_prio};
	int rc;

	if (!r->rt_hold)
		return;
	rc = pthread_setschedparam(pthread_self(), on ? SCHED_FIFO : r->sched_policy, &sp);
	if (rc) {
		/* (back: allowed to any thread at its own nice value; never seen refused) */
		r->rt_hold = false;
		r->rt_refused = rc;
	}
}

static void hold_note(struct hl_cache_restore *r, const struct hold_probe *a,
                      const struct hold_probe *b, uint64_t wait_ns, uint64_t page)
{
	struct hl_cache_rs_hold h = {
	    .wall_ns = ts_ns(&b->wall) - ts_ns(&a->wall),
	    .cpu_ns = ts_ns(&b->cpu) - ts_ns(&a->cpu),
	    .wait_ns = wait_ns,
	    .minflt = (uint32_t)(b->ru.ru_minflt - a->ru.ru_minflt),
	    .majflt = (uint32_t)(b->ru.ru_majflt - a->ru.ru_majflt),
	    .nvcsw = (uint32_t)(b->ru.ru_nvcsw - a->ru.ru_nvcsw),
	    .nivcsw = (uint32_t)(b->ru.ru_nivcsw - a->ru.ru_nivcsw),
	    .page = page,
	};
	unsigned i = HL_CACHE_RS_WORST;

	if (h.wall_ns > r->max_hold_ns)
		r->max_hold_ns = h.wall_ns;
	r->hold_ns += h.wall_ns;
	r->hold_cpu_ns += h.cpu_ns;
	r->holds++;
	r->holds_over_1ms += h.wall_ns > 1000000;
	while (i > 0 && r->worst[i - 1].wall_ns < h.wall_ns)
		i--;
	if (i == HL_CACHE_RS_WORST)
		return;
	memmove(&r->worst[i + 1], &r->worst[i], (HL_CACHE_RS_WORST - 1 - i) * sizeof(h));
	r->worst[i] = h;
}

/*
 * A read woken when the loader let the lock go may not get a CPU before
 * the loader, a few microseconds later, takes it again (a mutex is not
 * fair): it would sleep again, batch after batch (measured: reads waiting
 * 20-500 ms while no hold lasted as long). The loader waits until the
 * reads waiting for the lock have had it, 10 ms at most (a read that
 * spins takes it at once; one that sleeps needs a CPU first).
 */
static void give_way(struct hl_cache_restore *r)
{
	struct timespec a, b;

	if (!r->waiters || !atomic_load(r->waiters))
		return;
	clock_gettime(CLOCK_MONOTONIC, &a);
	b = a;
	while (atomic_load(r->waiters) && ts_ns(&b) - ts_ns(&a) < 10000000) {
		sched_yield();
		clock_gettime(CLOCK_MONOTONIC, &b);
	}
	r->gave_way++;
	r->gave_way_ns += ts_ns(&b) - ts_ns(&a);
}

#define HOLD_MAX_NS 200000ull /* a batch gives the lock up after a page past this */

static bool marks_test(const struct hl_cache_restore *r, uint64_t p)
{
	return r->marks[p / 64] >> (p % 64) & 1;
}

int64_t hl_cache_meta_load_step(struct hl_cache_dev *d, struct hl_cache_layout *l,
                                struct hl_cache_core *c, struct hl_cache_restore *r,
                                pthread_mutex_t *lock, pthread_mutex_t *sum_lock,
                                uint32_t max_pages, uint32_t batch)
{
	uint64_t p = r->next, q, empty[LOAD_CHUNK / PAGE];
	uint32_t nempty = 0;
	int rc;

	if (!max_pages || max_pages > LOAD_CHUNK / PAGE)
		max_pages = LOAD_CHUNK / PAGE;
	if (!batch)
		batch = max_pages;
	/* The next run of marked pages. */
	while (p < l->npages) {
		uint64_t w = r->marks[p / 64] >> (p % 64);
		if (w) {
			p += (uint64_t)__builtin_ctzll(w);
			break;
		}
		p = (p / 64 + 1) * 64;
	}
	if (p >= l->npages) {
		r->next = l->npages;
		r->pages_left = 0;
		return 0;
	}
	for (q = p + 1; q < l->npages && q - p < max_pages && marks_test(r, q); q++)
		;
	rc = d->ops->pread(d, r->buf, (size_t)((q - p) * PAGE), l->meta_off + p * PAGE);
	if (rc)
		return rc;
	/*
	 * Under the lock in batches: the reactors wait at most one batch, and
	 * a batch that has held it HOLD_MAX_NS ends early (the rest of its
	 * decoded pages in the next hold).
	 */
	for (uint64_t k0 = p; k0 < q; k0 += batch) {
		uint64_t k1 = HL_MIN(q, k0 + batch), per = PAGE / l->rec_size, k = k0;
		rc = decode_pages(l, r, k0, k1, r->buf + (k0 - p) * PAGE);
		if (rc)
			return rc;
		if (lock && hl_cache_core_restore_prefault_on(c))
			prefault(l, c, k0, k1, r);
		while (k < k1) {
			struct hold_probe h0, h1;
			struct timespec w0, now;
			uint64_t kh = k;
			clock_gettime(CLOCK_MONOTONIC, &w0);
			if (lock) {
				hold_rt(r, true);
				pthread_mutex_lock(lock);
			}
			hold_probe(&h0);
			for (;;) {
				bool any;
				r->restored += (uint64_t)load_page(l, c, k, r->recs + (k - k0) * per,
				                                   r->recs_ok + (k - k0) * per, &any, r);
				if (!any)
					empty[nempty++] = k;
				else
					hl_cache_core_restore_known(c, k); /* its claims are in RAM now */
				r->marks[k / 64] &= ~(1ull << (k % 64));
				r->pages_left--;
				if (++k == k1)
					break;
				if (!lock)
					continue;
				clock_gettime(CLOCK_MONOTONIC, &now);
				if (ts_ns(&now) - ts_ns(&h0.wall) >= HOLD_MAX_NS)
					break;
			}
			hold_probe(&h1);
			if (lock) {
				pthread_mutex_unlock(lock);
				hold_rt(r, false);
			}
			hold_note(r, &h0, &h1, ts_ns(&h0.wall) - ts_ns(&w0), kh);
			if (lock)
				give_way(r);
		}
	}
	/* Pages that claim nothing: a load may skip them (l->sum is the syncs'). */
	if (nempty && sum_lock)
		pthread_mutex_lock(sum_lock);
	for (uint32_t i = 0; i < nempty; i++)
		sum_clear(l, empty[i]);
	/*
	 * Only now may a fill take a slot of them: a sync that wrote a fill's
	 * record there before sum_clear would find the bit still set (the page
	 * was marked), not write it, and then lose it here.
	 */
	if (nempty && lock)
		pthread_mutex_lock(lock);
	for (uint32_t i = 0; i < nempty; i++)
		hl_cache_core_restore_known(c, empty[i]);
	if (nempty && lock)
		pthread_mutex_unlock(lock);
	if (nempty && sum_lock)
		pthread_mutex_unlock(sum_lock);
	r->next = q;
	return (int64_t)r->pages_left;
}

int hl_cache_meta_load_finish(struct hl_cache_dev *d, struct hl_cache_layout *l,
                              struct hl_cache_core *c, pthread_mutex_t *lock)
{
	int rc;

	if (lock)
		pthread_mutex_lock(lock);
	hl_cache_core_restore_end(c);
	if (lock)
		pthread_mutex_unlock(lock);
	if (l->sb_state != SB_PENDING)
		return 0;
	/*
	 * Every record is in RAM now, the dropped ones as stale claims: once
	 * their pages are rewritten no record on the device is older than the
	 * origin, and the state may go back to open.
	 */
	rc = cache_meta_sync_locked(d, l, c, lock);
	if (!rc)
		rc = sb_write_state(d, l, SB_OPEN);
	return rc;
}

int64_t hl_cache_meta_load(struct hl_cache_dev *d, struct hl_cache_core *c,
                           struct hl_cache_layout *l)
{
	struct hl_cache_restore r;
	int64_t left, ret;
	int rc = hl_cache_meta_load_begin(d, c, l, &r);

	if (rc)
		return rc;
	do
		left = hl_cache_meta_load_step(d, l, c, &r, NULL, NULL, 0, 0);
	while (left > 0);
	rc = left < 0 ? (int)left : hl_cache_meta_load_finish(d, l, c, NULL);
	if (rc) {
		hl_cache_core_restore_end(c);
		hl_cache_layout_release(l);
		ret = rc;
	} else {
		ret = (int64_t)r.restored; /* up to 2^32 - 3 slots: more than an int holds */
	}
	hl_cache_restore_release(&r);
	return ret;
}

/*
 * Write record page `page` from RAM and flush, its summary bit first when
 * it newly claims data. Data written before is flushed first: the page may
 * claim sectors of its other slots too.
 */
static int page_sync_one(struct hl_cache_dev *d, const struct hl_cache_layout *l,
                         struct hl_cache_core *c, uint64_t page)
{
	uint8_t *buf = page_zalloc(PAGE);
	uint8_t claims[PAGE / 32];
	uint64_t epoch = hl_cache_core_meta_epoch(c) + 1;
	bool any;
	int rc;

	if (!buf)
		return -ENOMEM;
	any = page_encode(l, c, page, buf, claims);
	rc = sum_mark(d, l, &page, &any, 1);
	if (!rc)
		rc = d->ops->flush(d);
	if (!rc)
		rc = d->ops->pwrite(d, buf, PAGE, l->meta_off + page * PAGE);
	if (!rc)
		rc = d->ops->flush(d);
	if (!rc)
		page_persisted(l, c, page, claims, epoch);
	free(buf);
	return rc;
}

int hl_cache_meta_barrier(struct hl_cache_dev *d, const struct hl_cache_layout *l,
                          struct hl_cache_core *c, uint32_t slot)
{
	if (slot >= l->nslots)
		return -EINVAL;
	return page_sync_one(d, l, c, slot / (PAGE / l->rec_size));
}

int hl_cache_meta_write_slot(struct hl_cache_dev *d, const struct hl_cache_layout *l,
                             struct hl_cache_core *c, uint32_t slot)
{
	/* (page_sync_one flushes the data first: a record never claims data not durable) */
	return hl_cache_meta_barrier(d, l, c, slot);
}

/*
 * A lazy restore noted blocks the superblock's copy of its filter does not
 * cover: before the origin sees such a write, the superblock says "restore
 * pending" with a copy taken now (at most SB_RANGES_MAX ranges, coarser
 * where needed; "all", a cold start, past that), so that a crash drops the
 * records of those blocks that were not loaded yet. First in a sync, so a
 * failure leaves nothing to undo.
 */
static int sync_mark(struct hl_cache_dev *d, struct hl_cache_layout *l, struct hl_cache_core *c,
                     pthread_mutex_t *lock)
{
	struct hl_cache_rs_range *r = NULL;
	uint32_t n = 0;
	uint64_t gen = 0;
	bool need, all = false;
	int rc;

	if (lock)
		pthread_mutex_lock(lock);
	need = hl_cache_core_restore_need_mark(c);
	if (need)
		hl_cache_core_restore_snapshot(c, &r, &n, &all, &gen);
	if (lock)
		pthread_mutex_unlock(lock);
	if (!need)
		return 0;
	if (!all) {
		n = hl_cache_rs_coarsen(r, n, SB_RANGES_MAX);
		all = n == UINT32_MAX || !n;
	}
	if (all)
		n = 0;
	rc = sb_write_ranges(d, l, SB_PENDING, r, n);
	if (!rc) {
		if (lock)
			pthread_mutex_lock(lock);
		hl_cache_core_restore_marked(c, r, n, all, gen);
		if (lock)
			pthread_mutex_unlock(lock);
	}
	free(r);
	return rc;
}

/*
 * Snapshot the dirty record pages under lock (when given), write them
 * without it, then report what became durable under lock again. The
 * caller serialises syncs per device (one snapshot must not overtake a
 * newer one).
 */
int cache_meta_sync_locked(struct hl_cache_dev *d, struct hl_cache_layout *l,
                           struct hl_cache_core *c, pthread_mutex_t *lock)
{
	uint64_t per = PAGE / l->rec_size;
	uint64_t cursor = 0, epoch, ndirty = 0, cap = 0;
	uint64_t *list = NULL;
	uint8_t *bufs = NULL, *claims = NULL;
	bool *any = NULL;
	uint32_t s;
	int rc = sync_mark(d, l, c, lock);

	if (rc)
		return rc;
	if (lock)
		pthread_mutex_lock(lock);
	epoch = hl_cache_core_meta_epoch(c) + 1;
	/* Dirty slots come in ascending order: so do their pages. */
	while ((s = hl_cache_core_next_dirty(c, &cursor)) != HL_CACHE_NO_SLOT) {
		uint64_t page = s / per;
		if (ndirty && list && list[ndirty - 1] == page)
			continue;
		if (ndirty == cap) {
			uint64_t *n = realloc(list, (cap = cap ? cap * 2 : 64) * sizeof(*list));
			if (!n) {
				/* No memory: keep this one dirty for the next attempt, and the
				 * rest. */
				hl_cache_core_slot_set_dirty(c, s);
				while ((s = hl_cache_core_next_dirty(c, &cursor)) !=
				       HL_CACHE_NO_SLOT)
					hl_cache_core_slot_set_dirty(c, s);
				rc = -ENOMEM;
				break;
			}
			list = n;
		}
		list[ndirty++] = page;
	}
	if (ndirty && !rc) {
		claims = calloc(ndirty, per);
		any = calloc(ndirty, sizeof(*any));
		if (posix_memalign((void **)&bufs, 4096, ndirty * PAGE))
			bufs = NULL;
	}
	for (uint64_t k = 0; k < ndirty; k++) {
		uint64_t p = list[k];
		if (rc || !claims || !bufs || !any) {
			/* No memory: keep them dirty for the next attempt. */
			for (uint64_t i = 0; i < per && p * per + i < l->nslots; i++)
				hl_cache_core_slot_set_dirty(c, (uint32_t)(p * per + i));
			rc = -ENOMEM;
			continue;
		}
		any[k] = page_encode(l, c, p, bufs + k * PAGE, claims + k * per);
	}
	/* Nothing dirty: every record of a snapshot before this one is durable already. */
	if (!rc && !ndirty)
		hl_cache_core_records_durable(c, epoch);
	if (lock)
		pthread_mutex_unlock(lock);
	if (rc || !ndirty)
		goto out;
	cache_trace(CT_SYNC, 0, 0, 0, 0, 0, ndirty, 0);
	/* Summary bits of pages that start to claim, then one flush for them and the data. */
	rc = sum_mark(d, l, list, any, ndirty);
	/* The data of every claimed sector is durable before its claim. */
	if (!rc)
		rc = d->ops->flush(d);
	for (uint64_t i = 0; !rc && i < ndirty; i++)
		rc = d->ops->pwrite(d, bufs + i * PAGE, PAGE, l->meta_off + list[i] * PAGE);
	if (!rc)
		rc = d->ops->flush(d);
	cache_trace(CT_SYNC, 1, 0, 0, (uint32_t)rc, 0, ndirty, 0);
	if (lock)
		pthread_mutex_lock(lock);
	for (uint64_t i = 0; i < ndirty; i++) {
		uint64_t p = list[i];
		/*
		 * A big sync (a whole LUN dropped: thousands of pages) lets the
		 * reactors in every 64 pages. Each page's persisting stands alone:
		 * until it runs, its slots still look claimed (a write to a block
		 * they claimed syncs, a fill takes a barrier), as during the writes
		 * above. The snapshot stays one hold.
		 */
		if (lock && i && i % 64 == 0) {
			pthread_mutex_unlock(lock);
			sched_yield();
			pthread_mutex_lock(lock);
		}
		if (rc) {
			for (uint64_t j = 0; j < per && p * per + j < l->nslots; j++)
				hl_cache_core_slot_set_dirty(c, (uint32_t)(p * per + j));
		} else {
			page_persisted(l, c, p, claims + i * per, epoch);
		}
	}
	if (!rc)
		hl_cache_core_records_durable(c, epoch);
	if (lock)
		pthread_mutex_unlock(lock);
out:
	free(list);
	free(claims);
	free(any);
	free(bufs);
	return rc;
}

int hl_cache_meta_sync(struct hl_cache_dev *d, struct hl_cache_layout *l,
                       struct hl_cache_core *c)
{
	return cache_meta_sync_locked(d, l, c, NULL);
}

int hl_cache_meta_close(struct hl_cache_dev *d, struct hl_cache_layout *l, struct hl_cache_core *c)
{
	uint64_t nblk = l->sum_len / PAGE;
	int rc = hl_cache_meta_sync(d, l, c);

	/* The summary bits cleared since they were written: the next load skips those pages. */
	for (uint64_t blk = 0; !rc && l->sum_stale && blk < nblk; blk++)
		if (l->sum_stale[blk / 64] >> (blk % 64) & 1)
			rc = sum_write_block(d, l, blk);
	if (!rc)
		rc = d->ops->flush(d);
	if (rc)
		return rc;
	/*
	 * Stopped during a lazy restore after writes: the state stays "pending"
	 * with the ranges written (the sync above wrote the last of them): the
	 * next start drops the records of those blocks and restores the rest
	 * (cold when the filter said "all").
	 */
	if (hl_cache_core_restoring(c) && l->sb_state == SB_PENDING)
		return 0;
	return sb_write_state(d, l, SB_CLEAN);
}
