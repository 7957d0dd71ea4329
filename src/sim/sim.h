/*
 * sim.h - what the files of hotlun-sim share: the in-memory trace, the
 * trace readers, a small u64 -> u32 hash map, and the reference policies
 * (LRU, ARC, S3-FIFO, Belady with bypass) that exist only in the simulator.
 * hotlun's own policy is not here: the simulator drives src/cache itself.
 */
#ifndef HOTLUN_SIM_H
#define HOTLUN_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum sim_format { SIM_FMT_AUTO, SIM_FMT_VSCSI, SIM_FMT_MSR, SIM_FMT_BLOCKS };

/* One request of a trace. For the blocks format off/len are in cache blocks. */
struct sim_req {
	uint64_t off;
	uint32_t len;
	uint16_t lun;
	uint8_t write;
	uint8_t in_blocks;
};

struct sim_trace {
	struct sim_req *reqs;
	size_t n, cap;
	uint64_t nreads, nwrites;
	enum sim_format fmt;
};

/** Read a whole trace file. @return 0 or -errno (message printed to stderr). */
int sim_trace_load(const char *path, enum sim_format fmt, struct sim_trace *t);
void sim_trace_free(struct sim_trace *t);
const char *sim_format_name(enum sim_format f);

/* ---- u64 -> u32 open-addressing map (linear probing, backward-shift delete) ---- */

struct sim_map {
	uint64_t *keys;
	uint32_t *vals;
	uint8_t *used;
	uint64_t cap, mask, count;
};

int sim_map_init(struct sim_map *m, uint64_t expected);
void sim_map_fini(struct sim_map *m);
/** @return pointer to the value, or NULL. */
uint32_t *sim_map_get(const struct sim_map *m, uint64_t key);
/** Insert or overwrite. @return 0 or -ENOMEM. */
int sim_map_put(struct sim_map *m, uint64_t key, uint32_t val);
bool sim_map_del(struct sim_map *m, uint64_t key);

/* ---- reference policies: whole-block caches of `cap` blocks ---- */

struct sim_ref;

struct sim_ref_ops {
	const char *name;
	/** next_use: per read-block access, the index of the next read of that block (Belady). */
	int (*create)(uint64_t cap, struct sim_ref **out);
	void (*destroy)(struct sim_ref *r);
	/**
	 * Read access of key (the idx-th read block access overall, next is its
	 * next-use index, UINT64_MAX for never). @return true on a hit;
	 * *admitted is set when a miss was given a place.
	 */
	bool (*access)(struct sim_ref *r, uint64_t key, uint64_t idx, uint64_t next,
	               bool *admitted);
	bool (*contains)(struct sim_ref *r, uint64_t key);
	void (*remove)(struct sim_ref *r, uint64_t key);
};

extern const struct sim_ref_ops sim_ref_lru, sim_ref_arc, sim_ref_s3fifo, sim_ref_belady;

#endif
