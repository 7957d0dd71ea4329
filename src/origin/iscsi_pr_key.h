/*
 * iscsi_pr_key.h - the arithmetic of the gateways' reservation keys on a SAN
 * LUN (iscsi_pr.c), apart so that a unit test reaches it without a SAN.
 *
 * A key is "hlu" + a run + a beat + the gateway id:
 *
 *   0x686c75 RRRR BB GGGG
 *
 * RRRR: 16 random bits drawn at start (a run: each process its own; drawn
 * again while a key of that run of this gateway is still registered at the
 * SAN, an earlier process's: iscsi_pr.c, pr_run_fresh);
 * BB: the heartbeat counter, which the owner's PR session moves by one at
 * every renew (REGISTER old -> new on the nexus that holds the reservation;
 * the reservation follows its holder's new key, SPC-4 5.12.7); GGGG: the
 * gateway id. A process registers its key with BB = 0 everywhere (its data
 * sessions keep that); only the holder's key moves. Keys that differ only
 * in BB are one run of one gateway: one owner. Keys of older versions (a
 * 24-bit run, "hlun" + 0000 + id) read the same way: their BB is part of
 * what used to be the run, and never moves.
 *
 * Every heartbeat also moves the SAN's PRgeneration by one, and nothing
 * else moves BB, so between two looks at the reservation held by one run,
 * "PRgeneration moved by as much as BB did (mod 256)" means that the
 * heartbeats explain every move; anything else is a change of somebody's
 * registrations or reservation (a write marker, a request, a preempt).
 */
#ifndef HOTLUN_ORIGIN_ISCSI_PR_KEY_H
#define HOTLUN_ORIGIN_ISCSI_PR_KEY_H

#include <stdbool.h>
#include <stdint.h>

#define ISC_PR_KEY_PREFIX 0x686c750000000000ull /* "hlu": our keys */
#define ISC_PR_KEY_MASK   0xffffff0000000000ull
#define ISC_PR_RUN_MASK   0x000000ffff000000ull
#define ISC_PR_BEAT_SHIFT 16
#define ISC_PR_BEAT_MASK  0x0000000000ff0000ull

/* The gateway id in one of our keys, 0 for anything else (a key of another initiator). */
static inline uint16_t pr_key_gateway(uint64_t key)
{
	return (key & ISC_PR_KEY_MASK) == ISC_PR_KEY_PREFIX ? (uint16_t)key : 0;
}

/* The heartbeat counter of a key. */
static inline uint8_t pr_key_beat(uint64_t key)
{
	return (uint8_t)((key & ISC_PR_BEAT_MASK) >> ISC_PR_BEAT_SHIFT);
}

/* key with its heartbeat counter set to beat. */
static inline uint64_t pr_key_with_beat(uint64_t key, uint8_t beat)
{
	return (key & ~ISC_PR_BEAT_MASK) | (uint64_t)beat << ISC_PR_BEAT_SHIFT;
}

/* The next heartbeat's key (the counter wraps from 255 to 0). */
static inline uint64_t pr_key_next_beat(uint64_t key)
{
	return pr_key_with_beat(key, (uint8_t)(pr_key_beat(key) + 1));
}

/* a and b are one run of one gateway (one process), whatever their heartbeat. 0 is no key. */
static inline bool pr_key_same_run(uint64_t a, uint64_t b)
{
	return a && b && (a & ~ISC_PR_BEAT_MASK) == (b & ~ISC_PR_BEAT_MASK);
}

/*
 * The reservation was held by key0 at PRgeneration gen0 and is held by key1
 * at gen1 (both seen, key1 later): did only key0's run's heartbeats change
 * the PR state in between? True iff the run is the same and PRgeneration
 * moved exactly as much as the counter did. The counter is 8 bits: when
 * the heartbeats went round (256 or more), PRgeneration moved at least 256
 * while the counter says less, and the answer is no (cold, never wrong).
 */
static inline bool pr_gen_explained(uint64_t key0, uint32_t gen0, uint64_t key1, uint32_t gen1)
{
	if (!pr_key_same_run(key0, key1))
		return false;
	return gen1 - gen0 == (uint32_t)(uint8_t)(pr_key_beat(key1) - pr_key_beat(key0));
}

#endif
