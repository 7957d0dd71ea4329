/*
 * bench_pattern.c - the data pattern of --verify. Every 512-byte sector that
 * hotlun-bench writes says where it belongs and which write put it there:
 *
 *   word 0  magic "HLBENCH1"
 *   word 1  sector number (LUN byte offset / 512)
 *   word 2  generation (run stamp << 32 | write counter)
 *   word 3.. 63  a hash of (sector, generation, word index)
 *
 * so a read can tell a good block from a zeroed one, from one that landed
 * at the wrong place, from an older write, and from damaged payload, even in
 * a later run that does not know which generation to expect.
 */
#include "bench/bench_internal.h"

#include <string.h>

#define WORDS (BENCH_PATTERN_SECTOR / 8)

static inline uint64_t sector_seed(uint64_t sector, uint64_t gen)
{
	return bench_mix64(sector ^ (gen << 29 | gen >> 35) ^ 0x5bd1e9955bd1e995ULL);
}

static inline uint64_t payload_word(uint64_t seed, unsigned j)
{
	return bench_mix64(seed + j);
}

void bench_pattern_fill(void *buf, size_t len, uint64_t offset, uint64_t gen)
{
	uint8_t *p = buf;
	uint64_t sector = offset / BENCH_PATTERN_SECTOR;

	for (size_t done = 0; done + BENCH_PATTERN_SECTOR <= len;
	     done += BENCH_PATTERN_SECTOR, sector++) {
		uint64_t w[WORDS];
		uint64_t seed = sector_seed(sector, gen);

		w[0] = BENCH_PATTERN_MAGIC;
		w[1] = sector;
		w[2] = gen;
		for (unsigned j = 3; j < WORDS; j++)
			w[j] = payload_word(seed, j);
		memcpy(p + done, w, sizeof(w));
	}
}

static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

enum bench_pattern_status bench_pattern_check(const void *buf, size_t len, uint64_t offset,
                                              uint64_t expect_gen, bool allow_foreign,
                                              struct bench_pattern_result *res)
{
	const uint8_t *p = buf;
	uint64_t sector = offset / BENCH_PATTERN_SECTOR;

	memset(res, 0, sizeof(*res));
	for (size_t done = 0; done + BENCH_PATTERN_SECTOR <= len;
	     done += BENCH_PATTERN_SECTOR, sector++) {
		uint64_t w[WORDS];
		enum bench_pattern_status st = BENCH_PAT_OK;

		memcpy(w, p + done, sizeof(w));
		res->sector = sector;
		res->found_sector = w[1];
		res->found_gen = w[2];
		if (w[0] != BENCH_PATTERN_MAGIC) {
			/* not ours at all: fine only where nobody knows what it holds */
			if (allow_foreign)
				continue;
			st = all_zero(p + done, BENCH_PATTERN_SECTOR) ? BENCH_PAT_ZERO
			                                              : BENCH_PAT_GARBAGE;
		} else if (w[1] != sector) {
			st = BENCH_PAT_WRONG_LBA;
		} else if (expect_gen && w[2] != expect_gen) {
			st = BENCH_PAT_STALE;
		} else {
			uint64_t seed = sector_seed(sector, w[2]);
			for (unsigned j = 3; j < WORDS; j++) {
				if (w[j] != payload_word(seed, j)) {
					st = BENCH_PAT_CORRUPT;
					res->bad_word = j;
					break;
				}
			}
		}
		if (st != BENCH_PAT_OK) {
			res->status = st;
			return st;
		}
	}
	memset(res, 0, sizeof(*res));
	return BENCH_PAT_OK;
}

const char *bench_pattern_status_str(enum bench_pattern_status st)
{
	switch (st) {
	case BENCH_PAT_OK:
		return "ok";
	case BENCH_PAT_ZERO:
		return "zeroes (never written)";
	case BENCH_PAT_GARBAGE:
		return "no verify pattern (garbage)";
	case BENCH_PAT_WRONG_LBA:
		return "data of another LBA (misdirected)";
	case BENCH_PAT_STALE:
		return "stale data (older write)";
	case BENCH_PAT_CORRUPT:
		return "damaged payload";
	}
	return "?";
}

/* A fixed table, searched only when a read finds an older generation (rare). */
void bench_lost_add(struct bench_lost_set *ls, uint64_t first, uint64_t n, uint32_t gen)
{
	for (uint64_t u = first; u < first + n && gen; u++) {
		unsigned i;
		if (ls->used < BENCH_LOST_MAX) {
			for (i = 0; ls->v[i].gen; i++)
				;
			ls->used++;
		} else {
			i = ls->next;
			ls->next = (ls->next + 1) % BENCH_LOST_MAX;
		}
		ls->v[i].unit = u;
		ls->v[i].gen = gen;
	}
}

bool bench_lost_take(struct bench_lost_set *ls, uint64_t unit, uint32_t gen)
{
	if (!gen)
		return false;
	for (unsigned i = 0; i < BENCH_LOST_MAX; i++) {
		if (ls->v[i].gen == gen && ls->v[i].unit == unit) {
			ls->v[i].gen = 0;
			ls->used--;
			return true;
		}
	}
	return false;
}
