/*
 * cache_meta.c - the on-device metadata of a cache (docs/cache-format.md):
 * two superblock copies, then one fixed-size record per slot packed in
 * 4 KiB pages, then the slot data. Every record carries a CRC-32C seeded
 * with the slot number and the cache's uuid, so a torn, misplaced or
 * leftover record never validates.
 *
 * Ordering rules that keep stale data from ever looking valid:
 *  - a record claims only sectors whose data write completed and was
 *    flushed (hl_cache_meta_sync flushes data before writing records);
 *  - before data of a slot whose record may claim something is
 *    overwritten, or before an origin write to a block some record may
 *    still claim, the record is rewritten from RAM and flushed
 *    (hl_cache_meta_barrier / hl_cache_meta_sync).
 * All functions here block; the caller serialises them per device.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cache/engine/cache_trace.h"
#include "cache/engine/engine_internal.h"
#include "hotlun/util.h"

#define SB_SIZE     4096u
#define PAGE        4096u
#define SB_MAGIC    "HLCACHE"
#define SB_VERSION  1u
#define SB_CLEAN    1u
#define SB_OPEN     2u
#define REC_MAGIC   0x4c48u
#define REC_F_VALID 0x01u
#define LOAD_CHUNK  (1024u * 1024)

/* ---- CRC-32C (Castagnoli), bitwise table built once ---- */

static uint32_t crc_table[256];

static void crc_init(void)
{
	if (crc_table[1])
		return;
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
		crc_table[i] = c;
	}
}

static uint32_t crc32c(uint32_t seed, const void *data, size_t len)
{
	const uint8_t *p = data;
	uint32_t c = ~seed;

	crc_init();
	while (len--)
		c = crc_table[(c ^ *p++) & 0xff] ^ (c >> 8);
	return ~c;
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

int hl_cache_layout_compute(uint64_t dev_size, uint32_t bs, struct hl_cache_layout *l)
{
	uint64_t n, per_page, pages, data_off;

	if (bs < HL_CACHE_MIN_BLOCK || bs > HL_CACHE_MAX_BLOCK || (bs & (bs - 1)))
		return -EINVAL;
	memset(l, 0, sizeof(*l));
	l->block_size = bs;
	l->rec_size = 24 + vbytes_of(bs) <= 32 ? 32 : 64;
	per_page = PAGE / l->rec_size;
	l->meta_off = 2 * SB_SIZE;
	if (dev_size < l->meta_off + PAGE + bs)
		return -ENOSPC;
	n = (dev_size - l->meta_off) / bs;
	for (;;) {
		pages = HL_DIV_ROUND_UP(n, per_page);
		data_off = HL_ALIGN_UP(l->meta_off + pages * PAGE, (uint64_t)bs);
		if (data_off + n * bs <= dev_size)
			break;
		n--;
		if (!n)
			return -ENOSPC;
	}
	if (n >= UINT32_MAX - 1)
		return -EINVAL;
	l->nslots = n;
	l->meta_len = pages * PAGE;
	l->data_off = data_off;
	return 0;
}

/* ---- superblock ---- */

struct sb {
	uint32_t block_size, rec_size, state;
	uint64_t nslots, meta_off, meta_len, data_off, seq, dev_size;
	uint8_t uuid[16];
};

static void sb_encode(const struct sb *s, uint8_t *b)
{
	memset(b, 0, SB_SIZE);
	memcpy(b, SB_MAGIC, 8);
	put32(b + 8, SB_VERSION);
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
	put32(b + SB_SIZE - 4, crc32c(0, b, SB_SIZE - 4));
}

static bool sb_decode(const uint8_t *b, struct sb *s)
{
	if (memcmp(b, SB_MAGIC, 8) || get32(b + 8) != SB_VERSION ||
	    get32(b + SB_SIZE - 4) != crc32c(0, b, SB_SIZE - 4))
		return false;
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
	return true;
}

static uint32_t seed_of(const uint8_t uuid[16])
{
	return crc32c(0x48ac11, uuid, 16);
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

/* Write the superblock to copy (seq & 1): the other copy survives a torn write. */
static int sb_write(struct hl_cache_dev *d, struct sb *s)
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
	return rc;
}

/* ---- records ---- */

static void rec_encode(const struct hl_cache_layout *l, uint32_t seed, uint32_t slot,
                       const struct hl_cache_slot_rec *r, bool valid, uint8_t *b)
{
	uint32_t vb = vbytes_of(l->block_size);

	memset(b, 0, l->rec_size);
	put16(b + 4, REC_MAGIC);
	b[6] = valid ? REC_F_VALID : 0;
	put16(b + 8, valid ? r->lun : 0);
	put32(b + 12, r->gen);
	put64(b + 16, valid ? r->block : 0);
	if (valid)
		memcpy(b + 24, r->valid, vb);
	put32(b, crc32c(seed ^ slot, b + 4, l->rec_size - 4));
}

/* @return true when the record is intact and claims data. */
static bool rec_decode(const struct hl_cache_layout *l, uint32_t seed, uint32_t slot,
                       const uint8_t *b, struct hl_cache_slot_rec *r)
{
	uint32_t vb = vbytes_of(l->block_size);

	if (get32(b) != crc32c(seed ^ slot, b + 4, l->rec_size - 4) || get16(b + 4) != REC_MAGIC ||
	    !(b[6] & REC_F_VALID))
		return false;
	memset(r, 0, sizeof(*r));
	r->lun = get16(b + 8);
	r->gen = get32(b + 12);
	r->block = get64(b + 16);
	memcpy(r->valid, b + 24, vb);
	return r->block <= HL_CACHE_MAX_BLOCK_NR;
}

/*
 * Write record page `page` from the RAM state of its slots. A slot whose
 * record claims data counts as claimed on the device from this snapshot on
 * (barriers needed before its data changes); the claim is reported
 * persisted only after the caller's flush.
 */
static void trace_rec(enum cache_trace_ev ev, uint32_t slot, uint32_t aux,
                      const struct hl_cache_slot_rec *r)
{
	uint64_t v;

	if (!cache_trace_on)
		return;
	memcpy(&v, r->valid, sizeof(v));
	cache_trace(ev, 0, r->lun, slot, aux, r->block, v, r->gen);
}

static void page_encode(const struct hl_cache_layout *l, struct hl_cache_core *c, uint64_t page,
                        uint8_t *buf, uint8_t *claims)
{
	uint64_t per = PAGE / l->rec_size, first = page * per;

	memset(buf, 0, PAGE);
	for (uint64_t i = 0; i < per && first + i < l->nslots; i++) {
		struct hl_cache_slot_rec r;
		bool v = hl_cache_core_slot_get(c, (uint32_t)(first + i), &r);
		rec_encode(l, l->seed, (uint32_t)(first + i), &r, v, buf + i * l->rec_size);
		claims[i] = v;
		if (v)
			trace_rec(CT_RECORD, (uint32_t)(first + i), (uint32_t)page, &r);
		if (v)
			hl_cache_core_slot_claim_pending(c, (uint32_t)(first + i));
	}
}

static int page_write(struct hl_cache_dev *d, const struct hl_cache_layout *l,
                      struct hl_cache_core *c, uint64_t page, uint8_t *buf, uint8_t *claims)
{
	page_encode(l, c, page, buf, claims);
	return d->ops->pwrite(d, buf, PAGE, l->meta_off + page * PAGE);
}

static void page_persisted(const struct hl_cache_layout *l, struct hl_cache_core *c, uint64_t page,
                           const uint8_t *claims, uint64_t epoch)
{
	uint64_t per = PAGE / l->rec_size, first = page * per;

	cache_trace(CT_PERSIST, 0, 0, (uint32_t)first, (uint32_t)page, 0, epoch, 0);
	for (uint64_t i = 0; i < per && first + i < l->nslots; i++)
		hl_cache_core_slot_persisted(c, (uint32_t)(first + i), claims[i], epoch);
}

/* ---- public ---- */

int hl_cache_meta_format(struct hl_cache_dev *d, uint32_t bs, struct hl_cache_layout *l)
{
	uint8_t *buf;
	struct sb s;
	int rc;

	rc = hl_cache_layout_compute(d->size, bs, l);
	if (rc)
		return rc;
	buf = page_zalloc(LOAD_CHUNK);
	if (!buf)
		return -ENOMEM;
	/* Kill both superblock copies first: a format torn anywhere leaves no cache. */
	rc = d->ops->pwrite(d, buf, 2 * SB_SIZE, 0);
	if (!rc)
		rc = d->ops->flush(d);
	for (uint64_t off = 0; !rc && off < l->meta_len; off += LOAD_CHUNK)
		rc = d->ops->pwrite(d, buf, (size_t)HL_MIN((uint64_t)LOAD_CHUNK, l->meta_len - off),
		                    l->meta_off + off);
	if (!rc)
		rc = d->ops->flush(d);
	free(buf);
	if (rc)
		return rc;
	memset(&s, 0, sizeof(s));
	s.block_size = bs;
	s.rec_size = l->rec_size;
	s.nslots = l->nslots;
	s.meta_off = l->meta_off;
	s.meta_len = l->meta_len;
	s.data_off = l->data_off;
	s.dev_size = d->size;
	s.state = SB_CLEAN;
	/* A fresh uuid makes records of any earlier format fail their CRC. */
	uint64_t a = hl_hash64(&l, sizeof(l), (uint64_t)(uintptr_t)d ^ (uint64_t)rand());
	uint64_t b = hl_hash64(&a, sizeof(a), d->size ^ 0x1234567);
	memcpy(s.uuid, &a, 8);
	memcpy(s.uuid + 8, &b, 8);
	memcpy(l->uuid, s.uuid, 16);
	l->seed = seed_of(s.uuid);
	rc = sb_write(d, &s);
	l->sb_seq = s.seq;
	return rc;
}

int hl_cache_meta_load(struct hl_cache_dev *d, struct hl_cache_core *c, struct hl_cache_layout *l)
{
	uint8_t *buf = page_zalloc(LOAD_CHUNK);
	struct sb a, b, *s = NULL;
	bool va, vb;
	int rc, restored = 0;
	struct hl_cache_core_info info;

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
	if (hl_cache_layout_compute(d->size, s->block_size, l) || l->nslots != s->nslots ||
	    l->rec_size != s->rec_size || l->data_off != s->data_off ||
	    l->meta_off != s->meta_off || s->dev_size != d->size)
		goto out;
	hl_cache_core_info(c, &info);
	if (info.block_size != s->block_size || info.nslots != s->nslots)
		goto out;
	memcpy(l->uuid, s->uuid, 16);
	l->seed = seed_of(s->uuid);
	/* Mark the cache open before anything can change on the device. */
	s->state = SB_OPEN;
	rc = sb_write(d, s);
	l->sb_seq = s->seq;
	if (rc)
		goto out;
	uint64_t per = PAGE / l->rec_size;
	for (uint64_t off = 0; off < l->meta_len; off += LOAD_CHUNK) {
		size_t len = (size_t)HL_MIN((uint64_t)LOAD_CHUNK, l->meta_len - off);
		rc = d->ops->pread(d, buf, len, l->meta_off + off);
		if (rc)
			goto out;
		for (uint64_t i = 0; i < len / l->rec_size; i++) {
			uint64_t slot = (off / PAGE) * per + i;
			struct hl_cache_slot_rec r;
			if (slot >= l->nslots)
				break;
			if (!rec_decode(l, l->seed, (uint32_t)slot, buf + i * l->rec_size, &r))
				continue;
			/*
			 * Unknown LUNs, duplicates and out-of-partition slots are dropped,
			 * but their records still claim data on the device: the slot must
			 * take a barrier before it is reused, the next sync rewrites the
			 * record, and a write to the block syncs first (a stale claim), or
			 * a later crash could restore the old claim over another block's
			 * data or over the block's newer content.
			 */
			if (hl_cache_core_slot_restore(c, (uint32_t)slot, &r) == 0) {
				restored++;
				trace_rec(CT_RESTORE, (uint32_t)slot, 0, &r);
			} else {
				hl_cache_core_slot_drop_claimed(c, (uint32_t)slot, &r);
				trace_rec(CT_RESTORE, (uint32_t)slot, 1, &r);
			}
		}
	}
	rc = restored;
out:
	free(buf);
	return rc;
}

int hl_cache_meta_barrier(struct hl_cache_dev *d, const struct hl_cache_layout *l,
                          struct hl_cache_core *c, uint32_t slot)
{
	uint8_t *buf = page_zalloc(PAGE);
	uint8_t claims[PAGE / 32];
	uint64_t page = slot / (PAGE / l->rec_size);
	uint64_t epoch = hl_cache_core_meta_epoch(c) + 1;
	int rc;

	if (!buf)
		return -ENOMEM;
	if (slot >= l->nslots) {
		free(buf);
		return -EINVAL;
	}
	rc = page_write(d, l, c, page, buf, claims);
	if (!rc)
		rc = d->ops->flush(d);
	if (!rc)
		page_persisted(l, c, page, claims, epoch);
	free(buf);
	return rc;
}

int hl_cache_meta_write_slot(struct hl_cache_dev *d, const struct hl_cache_layout *l,
                             struct hl_cache_core *c, uint32_t slot)
{
	/* Data first: a record must never claim sectors whose write may not be durable. */
	int rc = d->ops->flush(d);
	return rc ? rc : hl_cache_meta_barrier(d, l, c, slot);
}

/*
 * Snapshot the dirty record pages under lock (when given), write them
 * without it, then report what became durable under lock again. The
 * caller serialises syncs per device (one snapshot must not overtake a
 * newer one).
 */
int cache_meta_sync_locked(struct hl_cache_dev *d, const struct hl_cache_layout *l,
                           struct hl_cache_core *c, pthread_mutex_t *lock)
{
	uint64_t per = PAGE / l->rec_size, npages = HL_DIV_ROUND_UP(l->nslots, per);
	uint64_t cursor = 0, epoch, ndirty = 0, k;
	uint64_t *list = NULL;
	uint8_t *bufs = NULL, *claims = NULL, *pages = NULL;
	uint32_t s;
	int rc = 0;

	pages = calloc(HL_DIV_ROUND_UP(npages, 8), 1);
	if (!pages)
		return -ENOMEM;
	if (lock)
		pthread_mutex_lock(lock);
	epoch = hl_cache_core_meta_epoch(c) + 1;
	while ((s = hl_cache_core_next_dirty(c, &cursor)) != HL_CACHE_NO_SLOT) {
		uint64_t page = s / per;
		if (!(pages[page / 8] >> (page % 8) & 1))
			ndirty++;
		pages[page / 8] |= (uint8_t)(1u << (page % 8));
	}
	if (ndirty) {
		list = malloc(ndirty * sizeof(*list));
		claims = calloc(ndirty, per);
		if (posix_memalign((void **)&bufs, 4096, ndirty * PAGE))
			bufs = NULL;
	}
	k = 0;
	for (uint64_t p = 0; p < npages && ndirty; p++) {
		if (!(pages[p / 8] >> (p % 8) & 1))
			continue;
		if (!list || !claims || !bufs) {
			/* No memory: keep them dirty for the next attempt. */
			for (uint64_t i = 0; i < per && p * per + i < l->nslots; i++)
				hl_cache_core_slot_set_dirty(c, (uint32_t)(p * per + i));
			rc = -ENOMEM;
			continue;
		}
		list[k] = p;
		page_encode(l, c, p, bufs + k * PAGE, claims + k * per);
		k++;
	}
	if (lock)
		pthread_mutex_unlock(lock);
	if (rc || !ndirty)
		goto out;
	cache_trace(CT_SYNC, 0, 0, 0, 0, 0, ndirty, 0);
	rc = d->ops->flush(d); /* data of every claimed sector is durable before its claim */
	for (uint64_t i = 0; !rc && i < ndirty; i++)
		rc = d->ops->pwrite(d, bufs + i * PAGE, PAGE, l->meta_off + list[i] * PAGE);
	if (!rc)
		rc = d->ops->flush(d);
	cache_trace(CT_SYNC, 1, 0, 0, (uint32_t)rc, 0, ndirty, 0);
	if (lock)
		pthread_mutex_lock(lock);
	for (uint64_t i = 0; i < ndirty; i++) {
		uint64_t p = list[i];
		if (rc) {
			for (uint64_t j = 0; j < per && p * per + j < l->nslots; j++)
				hl_cache_core_slot_set_dirty(c, (uint32_t)(p * per + j));
		} else {
			page_persisted(l, c, p, claims + i * per, epoch);
		}
	}
	if (lock)
		pthread_mutex_unlock(lock);
out:
	free(list);
	free(claims);
	free(bufs);
	free(pages);
	return rc;
}

int hl_cache_meta_sync(struct hl_cache_dev *d, const struct hl_cache_layout *l,
                       struct hl_cache_core *c)
{
	return cache_meta_sync_locked(d, l, c, NULL);
}

int hl_cache_meta_close(struct hl_cache_dev *d, struct hl_cache_layout *l, struct hl_cache_core *c)
{
	struct sb s;
	int rc = hl_cache_meta_sync(d, l, c);

	if (rc)
		return rc;
	memset(&s, 0, sizeof(s));
	s.block_size = l->block_size;
	s.rec_size = l->rec_size;
	s.nslots = l->nslots;
	s.meta_off = l->meta_off;
	s.meta_len = l->meta_len;
	s.data_off = l->data_off;
	s.dev_size = d->size;
	s.seq = l->sb_seq;
	memcpy(s.uuid, l->uuid, 16);
	s.state = SB_CLEAN;
	rc = sb_write(d, &s);
	l->sb_seq = s.seq;
	return rc;
}
