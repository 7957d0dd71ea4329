// fuzz-sources: src/cache/engine/engine_map.c src/cache/engine/engine_run.c src/event/reactor.c src/util/util.c src/log/log.c
// fuzz-libs: -pthread
// fuzz-args: -max_len=16384
/*
 * fuzz_cache_map.c - harness for engine_map_load (src/cache/engine/
 * engine_map.c), the reader of a cache's map file (state_dir/<cache>.map),
 * which hotlund reads back at every start to learn which disk owns which
 * LUN id of the cache: the input is the file (in a memfd), read against a
 * fixed geometry (4 KiB blocks, 1024 slots, 4 MiB), which the first few
 * seeds carry.
 *
 * Besides crashes, leaks and UB: a refused map leaves no entry and next id
 * 0 (the cache is formatted); an accepted one has names and proofs without
 * blanks, no two disks with one id or one name (a proof line names an id:
 * it vouched for both), and reads back the same after engine_map_write:
 * what hotlund writes it can read (the device line too, written from the
 * superblock identity the map named; a map of version 1 or 2 is written
 * as version 3). Its device check (engine_map_device_ok) keeps a map whose
 * superblock is the device's, or one write ahead, and refuses another
 * uuid or seq leaving no entry.
 */
#include "config.h"

#include "cache/engine/engine_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static struct hl_cache_dev dev = {.size = 4u << 20, .fd = -1};

static struct hl_cache *cache_new(const char *path)
{
	struct hl_cache *c = calloc(1, sizeof(*c));

	if (!c)
		abort();
	c->name = (char *)"fuzz";
	c->device = (char *)"fuzz-device";
	c->map_path = strdup(path);
	c->bs = 4096;
	c->nslots = 1024;
	c->dev = &dev;
	c->drain_ms = 10000; /* the map write's bound (a memfd always answers) */
	pthread_mutex_init(&c->map_mu, NULL);
	return c;
}

static void cache_free(struct hl_cache *c)
{
	for (size_t i = 0; i < c->n_ents; i++)
		engine_ent_free(c->ents[i]);
	free(c->ents);
	free(c->map_path);
	pthread_mutex_destroy(&c->map_mu);
	free(c);
}

static void check(const struct hl_cache *c)
{
	for (size_t i = 0; i < c->n_ents; i++) {
		const struct map_ent *e = c->ents[i];
		if (!e->name[0] || strpbrk(e->name, " \t\n") ||
		    (e->proof && strpbrk(e->proof, " \t\n")))
			abort();
		for (size_t j = 0; j < i; j++)
			if (c->ents[j]->id == e->id || !strcmp(c->ents[j]->name, e->name))
				abort();
	}
}

static bool same(const struct map_ent *a, const struct map_ent *b)
{
	return a->id == b->id && a->quota == b->quota && a->size == b->size &&
	       !strcmp(a->name, b->name) && !strcmp(a->ident, b->ident) && !a->proof == !b->proof &&
	       (!a->proof || !strcmp(a->proof, b->proof));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char path[64];
	static int fd = -1;

	if (fd < 0) {
		fd = memfd_create("fuzz-map", 0);
		if (fd < 0)
			abort();
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	}
	if (ftruncate(fd, 0) || pwrite(fd, data, size, 0) != (ssize_t)size)
		abort();

	struct hl_cache *c = cache_new(path);
	if (!engine_map_load(c)) {
		if (c->n_ents || c->next_id)
			abort();
		cache_free(c);
		return 0;
	}
	check(c);
	/* what a start checks (the device's superblock is the one the map names, or one ahead) */
	if (c->map_dev_known) {
		uint8_t other[16];
		struct hl_cache *c3 = cache_new(path);

		if (!engine_map_device_ok(c, c->map_dev_uuid, c->map_dev_seq) ||
		    (c->map_dev_seq < UINT64_MAX &&
		     !engine_map_device_ok(c, c->map_dev_uuid, c->map_dev_seq + 1)))
			abort();
		memcpy(other, c->map_dev_uuid, 16);
		other[size % 16] ^= 1;
		if (!engine_map_load(c3) || engine_map_device_ok(c3, other, c3->map_dev_seq) ||
		    c3->n_ents || c3->next_id)
			abort();
		cache_free(c3);
		memcpy(c->layout.uuid, c->map_dev_uuid, 16);
		c->layout.sb_seq = c->map_dev_seq;
	}
	/* written where a start reads it (engine_map_write renames PATH.tmp over it) */
	char *tmp = NULL;
	if (asprintf(&tmp, "/dev/shm/fuzz-cache-map.%d", (int)getpid()) < 0)
		abort();
	free(c->map_path);
	c->map_path = tmp;
	if (engine_map_write(c, "open") == 0) {
		struct hl_cache *c2 = cache_new(tmp);
		if (!engine_map_load(c2) || c2->n_ents != c->n_ents || c2->next_id != c->next_id ||
		    !c2->map_dev_known || memcmp(c2->map_dev_uuid, c->layout.uuid, 16) ||
		    c2->map_dev_seq != c->layout.sb_seq)
			abort();
		for (size_t i = 0; i < c->n_ents; i++)
			if (!same(c->ents[i], c2->ents[i]))
				abort();
		cache_free(c2);
	}
	unlink(tmp);
	cache_free(c);
	return 0;
}
