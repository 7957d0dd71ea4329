/*
 * cache_admit.c - admission policies behind struct hl_admit_ops, indexed by
 * enum hl_admit_kind:
 *
 *  freq    TinyLFU-style: a count-min sketch of 4 rows of 3-bit counters
 *          (21 per 64-bit word) for blocks up to 8 KiB, 4-bit ones (16 per
 *          word) for larger blocks; a row has SKETCH_COUNTERS_PER_SLOT
 *          counters per slot: 3.05 or 4 bytes of RAM per slot), with
 *          conservative increments,
 *          a doorkeeper bloom filter (DOOR_BITS_PER_SLOT) that absorbs first
 *          accesses, and aging that halves every counter after 10 accesses
 *          per slot. Sizes follow the slot count exactly (positions by
 *          multiply-shift; a power-of-two size keeps the mask it had). A
 *          miss is admitted when its estimated frequency beats the eviction
 *          victim's, or freely while the cache has free slots; a block that
 *          returns soon after the RAM window dropped it needs only to tie
 *          the victim.
 *  always  admit every miss.
 *  nhit:N  admit on the Nth miss of a block (misses counted in the same
 *          kind of sketch, of 4-bit counters, so the count can only be
 *          over-estimated; its width is 2 x slots rounded up to a power of
 *          two, as before issue 25 item 4: sized exactly, its
 *          over-estimates moved its hit ratios and writes by several
 *          points, docs/cache-policy.md).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache/core/core_internal.h"
#include "hotlun/util.h"

#define SKETCH_ROWS 4
/*
 * Doorkeeper bits per slot. It is cleared at every aging (10 accesses per
 * slot), so it only needs to tell a first access from a second one
 * within a period. More bits buy nothing clear: over the grid's 30 default
 * cells without the RAM window, 1 / 2 / 4 / 8 bits sum to -0.55 / -0.85 /
 * -0.33 / +0.23 points against before item 4, each with a cell 0.85-1.26
 * points down (docs/cache-policy.md).
 */
#define DOOR_BITS_PER_SLOT 1
/*
 * freq's sketch: counters per slot in a row (at least 1024 a row). Hit
 * ratio grows with the width: the budget grid's default 4K 10% cell has
 * 8.00 / 8.79 / 9.06 % at 1 / 1.5 / 2 (docs/cache-policy.md, "RAM per
 * cache block"); at 2 the grid's hit ratio sum is above before item 4.
 */
#define SKETCH_COUNTERS_PER_SLOT 2
/*
 * freq's counters: 3 bits (0-7) for blocks of up to SKETCH_SMALL_BLOCK,
 * 4 bits above. With aging every 10 accesses per slot a small block's
 * counter rarely passes 7: over hotlun-sim's grid the 216 cells of 4K and
 * 8K blocks see the hit ratios of 4-bit counters (15 cells move, sum
 * +0.07 points, worst -0.01) for 3.05 bytes a slot instead of 4. Larger
 * blocks gather more accesses each, and 3 bits there lost up to 1.83
 * points in a cell (docs/cache-policy.md, "16 bytes again"). The
 * positions are the same at either width. nhit:N counts to 15: 4 bits.
 */
#define SKETCH_SMALL_BLOCK 8192

struct hl_admit {
	const struct hl_admit_ops *ops;
	uint32_t param;
	/* sketch */
	uint64_t *words;    /* SKETCH_ROWS rows of row_words words */
	uint64_t width;     /* counters per row, a multiple of 16 */
	uint64_t row_words; /* words a row: width / per_word rounded up */
	uint32_t cbits;     /* bits a counter: 3 (freq, blocks up to 8 KiB) or 4 */
	uint32_t per_word;  /* counters a 64-bit word: 64 / cbits */
	uint32_t cmax;      /* a counter's largest value */
	uint64_t age_mask;  /* the low cbits - 1 bits of every counter */
	uint64_t *door;     /* doorkeeper bloom filter, door_bits bits */
	uint64_t door_bits; /* a multiple of 64; 0: no doorkeeper */
	uint64_t additions; /* since the last aging */
	uint64_t sample;    /* age after this many additions */
	uint64_t agings;
};

/* Map a 64-bit hash onto [0, n) (Lemire's multiply-shift: any n, no division). */
static inline uint64_t range_of(uint64_t h, uint64_t n)
{
	return (uint64_t)(((unsigned __int128)h * n) >> 64);
}

static inline bool is_pow2(uint64_t n)
{
	return !(n & (n - 1));
}

static uint64_t pow2_at_least(uint64_t v)
{
	uint64_t p = 16;
	while (p < v)
		p <<= 1;
	return p;
}

/* A sketch of width counters a row of cbits bits; aging after 10 x nslots additions. */
static int sketch_init(struct hl_admit *a, uint64_t nslots, uint64_t width, uint32_t cbits,
                       bool doorkeeper)
{
	a->width = width;
	a->cbits = cbits;
	a->per_word = 64 / cbits;
	a->cmax = (1u << cbits) - 1;
	a->age_mask = 0;
	for (uint32_t i = 0; i < a->per_word; i++)
		a->age_mask |= (uint64_t)(a->cmax >> 1) << (i * cbits);
	a->row_words = (width + a->per_word - 1) / a->per_word;
	a->words = calloc(SKETCH_ROWS * a->row_words, sizeof(uint64_t));
	if (!a->words)
		return -ENOMEM;
	if (doorkeeper) {
		/* At least one 64-bit word: door[] is indexed by bit / 64. */
		a->door_bits = (HL_MAX(nslots * DOOR_BITS_PER_SLOT, 64) + 63) / 64 * 64;
		a->door = calloc(a->door_bits / 64, sizeof(uint64_t));
		if (!a->door) {
			free(a->words);
			a->words = NULL;
			return -ENOMEM;
		}
	}
	a->sample = 10 * (nslots ? nslots : 1);
	return 0;
}

static void sketch_fini(struct hl_admit *a)
{
	free(a->words);
	free(a->door);
	a->words = a->door = NULL;
}

/* Counter position of key in row r: word index and shift within the word. */
static inline void sketch_pos(const struct hl_admit *a, uint64_t h, int r, uint64_t *w,
                              unsigned *shift)
{
	/*
	 * Double hashing (Kirsch-Mitzenmacher): row r probes lo + r * hi. A
	 * power-of-two width keeps the mask (the positions of before issue 25
	 * item 4, so such sizes count the same), any other the multiply-shift.
	 */
	uint64_t hr = (h & 0xffffffffu) + (uint64_t)r * ((h >> 32) | 1), idx;
	if (is_pow2(a->width))
		idx = hr & (a->width - 1);
	else
		idx = range_of(h + (uint64_t)r * ((h >> 32 | h << 32) | 1), a->width);
	/* Constant divisors (a multiplication, not a division, per row). */
	uint64_t q = a->cbits == 3 ? idx / 21 : idx / 16;
	*w = (uint64_t)r * a->row_words + q;
	*shift = (unsigned)(idx - q * a->per_word) * a->cbits;
}

static uint32_t sketch_estimate(const struct hl_admit *a, uint64_t key)
{
	uint64_t h = cache_hash(key), w;
	unsigned shift, min = a->cmax;

	for (int r = 0; r < SKETCH_ROWS; r++) {
		sketch_pos(a, h, r, &w, &shift);
		unsigned v = (unsigned)(a->words[w] >> shift) & a->cmax;
		if (v < min)
			min = v;
	}
	return min;
}

static bool door_test_set(struct hl_admit *a, uint64_t key, bool set)
{
	uint64_t h = cache_hash(key ^ 0x5bd1e9955bd1e995ull);
	uint64_t b1 = h & (a->door_bits - 1), b2 = (h >> 32) & (a->door_bits - 1);
	if (!is_pow2(a->door_bits)) {
		b1 = range_of(h, a->door_bits);
		b2 = range_of(h >> 32 | h << 32, a->door_bits);
	}
	bool hit = (a->door[b1 / 64] >> (b1 % 64) & 1) && (a->door[b2 / 64] >> (b2 % 64) & 1);
	if (set) {
		a->door[b1 / 64] |= 1ull << (b1 % 64);
		a->door[b2 / 64] |= 1ull << (b2 % 64);
	}
	return hit;
}

/* Halve every counter (aging), clear the doorkeeper. */
static void sketch_age(struct hl_admit *a)
{
	uint64_t n = SKETCH_ROWS * a->row_words;
	for (uint64_t i = 0; i < n; i++)
		a->words[i] = (a->words[i] >> 1) & a->age_mask;
	if (a->door)
		memset(a->door, 0, a->door_bits / 8);
	a->additions = 0;
	a->agings++;
}

static void sketch_add(struct hl_admit *a, uint64_t key)
{
	uint64_t h = cache_hash(key), w[SKETCH_ROWS];
	unsigned shift[SKETCH_ROWS], min = a->cmax;

	if (a->door && !door_test_set(a, key, true))
		goto counted; /* first sighting since the last aging: doorkeeper only */
	for (int r = 0; r < SKETCH_ROWS; r++) {
		sketch_pos(a, h, r, &w[r], &shift[r]);
		unsigned v = (unsigned)(a->words[w[r]] >> shift[r]) & a->cmax;
		if (v < min)
			min = v;
	}
	if (min < a->cmax) {
		/* Conservative update: raise only the counters at the minimum. */
		for (int r = 0; r < SKETCH_ROWS; r++) {
			unsigned v = (unsigned)(a->words[w[r]] >> shift[r]) & a->cmax;
			if (v == min)
				a->words[w[r]] += 1ull << shift[r];
		}
	}
counted:
	if (++a->additions >= a->sample)
		sketch_age(a);
}

static uint32_t freq_estimate(const struct hl_admit *a, uint64_t key)
{
	uint32_t e = sketch_estimate(a, key);
	if (a->door && door_test_set((struct hl_admit *)a, key, false))
		e++;
	return e;
}

static size_t sketch_mem(const struct hl_admit *a)
{
	return SKETCH_ROWS * a->row_words * sizeof(uint64_t) + a->door_bits / 8;
}

/* ---- freq ---- */

static int freq_init(struct hl_admit *a, uint64_t nslots, uint32_t block_size, uint32_t param)
{
	/* At least 1024 counters a row: tiny caches still get usable estimates. */
	uint64_t width = (HL_MAX(nslots * SKETCH_COUNTERS_PER_SLOT, 1024) + 15) / 16 * 16;
	return sketch_init(a, nslots, width, block_size <= SKETCH_SMALL_BLOCK ? 3 : 4, true);
}

static void freq_access(struct hl_admit *a, uint64_t key, bool miss)
{
	sketch_add(a, key);
}

static bool freq_should(struct hl_admit *a, uint64_t key, bool have_free, uint64_t victim_key)
{
	if (have_free)
		return true;
	return freq_estimate(a, key) > freq_estimate(a, victim_key);
}

/* A block back from the window's ghost list: ties go to the newcomer. */
static bool freq_returning(struct hl_admit *a, uint64_t key, uint64_t victim_key)
{
	return freq_estimate(a, key) >= freq_estimate(a, victim_key);
}

/* ---- always ---- */

static int always_init(struct hl_admit *a, uint64_t nslots, uint32_t block_size, uint32_t param)
{
	return 0;
}

static void always_fini(struct hl_admit *a)
{
}

/* ---- nhit:N ---- */

static int nhit_init(struct hl_admit *a, uint64_t nslots, uint32_t block_size, uint32_t param)
{
	if (param < 1 || param > 15)
		return -EINVAL;
	/* Misses of blocks not cached: the sketch needs room for more than nslots keys. */
	return sketch_init(a, nslots * 2, pow2_at_least(HL_MAX(nslots * 2, 1024)), 4, false);
}

static void nhit_access(struct hl_admit *a, uint64_t key, bool miss)
{
	if (miss)
		sketch_add(a, key);
}

static bool nhit_should(struct hl_admit *a, uint64_t key, bool have_free, uint64_t victim_key)
{
	return sketch_estimate(a, key) >= a->param;
}

static const struct hl_admit_ops admit_ops[HL_ADMIT__COUNT] = {
    [HL_ADMIT_FREQ] =
        {
            .name = "freq",
            .init = freq_init,
            .fini = sketch_fini,
            .on_access = freq_access,
            .should_admit = freq_should,
            .admit_returning = freq_returning,
            .estimate = freq_estimate,
            .mem_bytes = sketch_mem,
        },
    [HL_ADMIT_ALWAYS] =
        {
            .name = "always",
            .init = always_init,
            .fini = always_fini,
        },
    [HL_ADMIT_NHIT] =
        {
            .name = "nhit",
            .init = nhit_init,
            .fini = sketch_fini,
            .on_access = nhit_access,
            .should_admit = nhit_should,
            .estimate = sketch_estimate,
            .mem_bytes = sketch_mem,
        },
};

const struct hl_admit_ops *hl_admit_ops_get(enum hl_admit_kind kind)
{
	if ((unsigned)kind >= HL_ADMIT__COUNT)
		return NULL;
	return &admit_ops[kind];
}

int hl_admit_parse(const char *s, enum hl_admit_kind *kind, uint32_t *param)
{
	uint64_t n;

	if (!strcmp(s, "freq") || !strcmp(s, "default") || !strcmp(s, "tinylfu")) {
		*kind = HL_ADMIT_FREQ;
		*param = 0;
		return 0;
	}
	if (!strcmp(s, "always")) {
		*kind = HL_ADMIT_ALWAYS;
		*param = 0;
		return 0;
	}
	if (!strncmp(s, "nhit:", 5)) {
		if (hl_parse_u64(s + 5, &n) || n < 1 || n > 15)
			return -EINVAL;
		*kind = HL_ADMIT_NHIT;
		*param = (uint32_t)n;
		return 0;
	}
	return -EINVAL;
}

int hl_admit_create(enum hl_admit_kind kind, uint64_t nslots, uint32_t block_size, uint32_t param,
                    struct hl_admit **out)
{
	const struct hl_admit_ops *ops = hl_admit_ops_get(kind);
	struct hl_admit *a;
	int rc;

	if (!ops)
		return -EINVAL;
	a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->ops = ops;
	a->param = param;
	rc = ops->init(a, nslots, block_size, param);
	if (rc) {
		free(a);
		return rc;
	}
	*out = a;
	return 0;
}

void hl_admit_destroy(struct hl_admit *a)
{
	if (!a)
		return;
	a->ops->fini(a);
	free(a);
}

void hl_admit_access(struct hl_admit *a, uint64_t key, bool miss)
{
	if (a->ops->on_access)
		a->ops->on_access(a, key, miss);
}

bool hl_admit_should(struct hl_admit *a, uint64_t key, bool have_free, uint64_t victim_key)
{
	if (!a->ops->should_admit)
		return true;
	return a->ops->should_admit(a, key, have_free, victim_key);
}

bool hl_admit_should_returning(struct hl_admit *a, uint64_t key, uint64_t victim_key)
{
	if (a->ops->admit_returning)
		return a->ops->admit_returning(a, key, victim_key);
	return hl_admit_should(a, key, false, victim_key);
}

uint32_t hl_admit_estimate(const struct hl_admit *a, uint64_t key)
{
	return a->ops->estimate ? a->ops->estimate(a, key) : 0;
}

size_t hl_admit_mem_bytes(const struct hl_admit *a)
{
	return a->ops->mem_bytes ? a->ops->mem_bytes(a) : 0;
}
