/*
 * engine_map_ut.c - a cache's map file as a start reads it back
 * (engine_map_load, src/cache/engine/engine_map.c), without a device: a map
 * hotlund wrote is read; one with two disks of one LUN id or one name is
 * refused whole (the cache is then formatted), because a proof line names
 * an id and would vouch for both disks.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/engine/engine_internal.h"
#include "hl_test.h"

static struct hl_cache_dev dev = {.size = 4u << 20, .fd = -1};
static char path[64];

/* A cache of 1024 x 4 KiB whose map file holds text; engine_map_load's answer. */
static bool load(const char *text, struct hl_cache *c)
{
	FILE *f;

	snprintf(path, sizeof(path), "/tmp/engine_map_ut.%d", (int)getpid());
	f = fopen(path, "w");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	fputs(text, f);
	fclose(f);
	memset(c, 0, sizeof(*c));
	c->name = (char *)"ut";
	c->map_path = path;
	c->bs = 4096;
	c->nslots = 1024;
	c->dev = &dev;
	bool ok = engine_map_load(c);
	unlink(path);
	return ok;
}

static void unload(struct hl_cache *c)
{
	for (size_t i = 0; i < c->n_ents; i++)
		engine_ent_free(c->ents[i]);
	free(c->ents);
	c->ents = NULL;
	c->n_ents = 0;
}

#define HEAD "hotlun-cache-map 2\nstate clean\ngeometry 4096 1024 4194304\nnext 3\n"

static void test_read(void)
{
	static struct hl_cache c;

	CU_ASSERT_TRUE(load(HEAD "disk 1 0 4096 a file:///a\ndisk 2 0 8192 b file:///b\n"
	                         "proof 1 file:1:2:3:4.5\n",
	                    &c));
	CU_ASSERT_EQUAL(c.n_ents, 2);
	CU_ASSERT_EQUAL(c.next_id, 3);
	CU_ASSERT_PTR_NOT_NULL(engine_ent_by_id(&c, 1)->proof);
	CU_ASSERT_PTR_NULL(engine_ent_by_id(&c, 2)->proof);
	unload(&c);
}

static void test_twice_refused(void)
{
	static struct hl_cache c;

	/* one id twice: the proof line would vouch for b, whose blocks it never proved */
	CU_ASSERT_FALSE(load(HEAD "disk 1 0 4096 a file:///a\nproof 1 file:1:2:3:4.5\n"
	                          "disk 1 0 4096 b file:///b\n",
	                     &c));
	CU_ASSERT_EQUAL(c.n_ents, 0);
	CU_ASSERT_EQUAL(c.next_id, 0);
	unload(&c);
	/* one name twice: which of the two is the disk's? */
	CU_ASSERT_FALSE(
	    load(HEAD "disk 1 0 4096 a file:///a\ndisk 2 0 4096 a file:///other\n", &c));
	CU_ASSERT_EQUAL(c.n_ents, 0);
	unload(&c);
}

static const struct hl_test tests[] = {
    {"a map as hotlund writes it is read", test_read},
    {"two disks with one id or one name: refused", test_twice_refused},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("cache_engine_map", tests);
}
