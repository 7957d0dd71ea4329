/*
 * sim_map.c - a u64 -> u32 hash map for the simulator's reference policies
 * and footprint counting: power-of-two open addressing, linear probing,
 * grows at 1/2 load, backward-shift deletion.
 */
#include <errno.h>
#include <stdlib.h>

#include "hotlun/util.h"
#include "sim/sim.h"

static int alloc_tab(struct sim_map *m, uint64_t cap)
{
	m->keys = malloc(cap * sizeof(*m->keys));
	m->vals = malloc(cap * sizeof(*m->vals));
	m->used = calloc(cap, 1);
	if (!m->keys || !m->vals || !m->used) {
		free(m->keys);
		free(m->vals);
		free(m->used);
		return -ENOMEM;
	}
	m->cap = cap;
	m->mask = cap - 1;
	m->count = 0;
	return 0;
}

int sim_map_init(struct sim_map *m, uint64_t expected)
{
	uint64_t cap = 64;
	while (cap < expected * 2)
		cap <<= 1;
	return alloc_tab(m, cap);
}

void sim_map_fini(struct sim_map *m)
{
	free(m->keys);
	free(m->vals);
	free(m->used);
	m->keys = NULL;
	m->vals = NULL;
	m->used = NULL;
}

uint32_t *sim_map_get(const struct sim_map *m, uint64_t key)
{
	uint64_t i = hl_mix64(key) & m->mask;
	while (m->used[i]) {
		if (m->keys[i] == key)
			return &m->vals[i];
		i = (i + 1) & m->mask;
	}
	return NULL;
}

static int grow(struct sim_map *m)
{
	struct sim_map old = *m;
	if (alloc_tab(m, old.cap * 2)) {
		*m = old;
		return -ENOMEM;
	}
	for (uint64_t i = 0; i < old.cap; i++)
		if (old.used[i])
			sim_map_put(m, old.keys[i], old.vals[i]);
	sim_map_fini(&old);
	return 0;
}

int sim_map_put(struct sim_map *m, uint64_t key, uint32_t val)
{
	uint64_t i;

	if ((m->count + 1) * 2 > m->cap && grow(m))
		return -ENOMEM;
	i = hl_mix64(key) & m->mask;
	while (m->used[i]) {
		if (m->keys[i] == key) {
			m->vals[i] = val;
			return 0;
		}
		i = (i + 1) & m->mask;
	}
	m->used[i] = 1;
	m->keys[i] = key;
	m->vals[i] = val;
	m->count++;
	return 0;
}

bool sim_map_del(struct sim_map *m, uint64_t key)
{
	uint64_t i = hl_mix64(key) & m->mask, hole, j;

	while (m->used[i] && m->keys[i] != key)
		i = (i + 1) & m->mask;
	if (!m->used[i])
		return false;
	hole = i;
	j = i;
	for (;;) {
		j = (j + 1) & m->mask;
		if (!m->used[j])
			break;
		uint64_t home = hl_mix64(m->keys[j]) & m->mask;
		if (((j - home) & m->mask) >= ((j - hole) & m->mask)) {
			m->keys[hole] = m->keys[j];
			m->vals[hole] = m->vals[j];
			hole = j;
		}
	}
	m->used[hole] = 0;
	m->count--;
	return true;
}
