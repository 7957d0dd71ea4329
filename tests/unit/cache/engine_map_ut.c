/*
 * engine_map_ut.c - a cache's map file as a start reads it back
 * (engine_map_load, src/cache/engine/engine_map.c), without a device: a map
 * hotlund wrote is read; one with two disks of one LUN id or one name is
 * refused whole (the cache is then formatted), because a proof line names
 * an id and would vouch for both disks. A map of version 3 names the
 * device's superblock (uuid, seq) it was written against: a bad device
 * line is refused like any damage, and a start keeps the map only on that
 * device, at that seq or one write ahead (engine_map_device_ok).
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
	c->device = (char *)"ut-device";
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

#define HEAD3                                                                                      \
	"hotlun-cache-map 3\nstate clean\ngeometry 4096 1024 4194304\n"                            \
	"device 00112233445566778899aabbccddeeff 7\nnext 3\n"
#define DISKS "disk 1 0 4096 a file:///a\nproof 1 file:1:2:3:4.5\n"

static const uint8_t uuid7[16] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
                                  0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff};

static void test_device_line(void)
{
	static struct hl_cache c;

	CU_ASSERT_TRUE(load(HEAD3 DISKS, &c));
	CU_ASSERT_EQUAL(c.n_ents, 1);
	CU_ASSERT_TRUE(c.map_dev_known);
	CU_ASSERT_EQUAL(c.map_dev_seq, 7);
	CU_ASSERT(memcmp(c.map_dev_uuid, uuid7, 16) == 0);
	unload(&c);
	/* version 2: no device line, not checked */
	CU_ASSERT_TRUE(load(HEAD DISKS, &c));
	CU_ASSERT_FALSE(c.map_dev_known);
	CU_ASSERT_TRUE(engine_map_device_ok(&c, uuid7, 1000));
	CU_ASSERT_EQUAL(c.n_ents, 1);
	unload(&c);
}

static void test_device_line_bad(void)
{
	static const char *bad[] = {
	    /* missing (version 3 has it after the geometry) */
	    "hotlun-cache-map 3\nstate clean\ngeometry 4096 1024 4194304\nnext 3\n" DISKS,
	    /* uuid too short, upper case, not hex; no seq, a sign, a blank too many, overflow */
	    "hotlun-cache-map 3\nstate clean\ngeometry 4096 1024 4194304\n"
	    "device 00112233445566778899aabbccddee 7\nnext 3\n" DISKS,
	    "hotlun-cache-map 3\nstate clean\ngeometry 4096 1024 4194304\n"
	    "device 00112233445566778899AABBCCDDEEFF 7\nnext 3\n" DISKS,
	    "hotlun-cache-map 3\nstate clean\ngeometry 4096 1024 4194304\n"
	    "device 00112233445566778899aabbccddeegg 7\nnext 3\n" DISKS,
	    "hotlun-cache-map 3\nstate clean\ngeometry 4096 1024 4194304\n"
	    "device 00112233445566778899aabbccddeeff\nnext 3\n" DISKS,
	    "hotlun-cache-map 3\nstate clean\ngeometry 4096 1024 4194304\n"
	    "device 00112233445566778899aabbccddeeff -7\nnext 3\n" DISKS,
	    "hotlun-cache-map 3\nstate clean\ngeometry 4096 1024 4194304\n"
	    "device 00112233445566778899aabbccddeeff  7\nnext 3\n" DISKS,
	    "hotlun-cache-map 3\nstate clean\ngeometry 4096 1024 4194304\n"
	    "device 00112233445566778899aabbccddeeff 18446744073709551616\nnext 3\n" DISKS,
	    "hotlun-cache-map 3\nstate clean\ngeometry 4096 1024 4194304\n"
	    "device 00112233445566778899aabbccddeeff 7 x\nnext 3\n" DISKS,
	    /* a version this code does not know */
	    "hotlun-cache-map 4\nstate clean\ngeometry 4096 1024 4194304\n"
	    "device 00112233445566778899aabbccddeeff 7\nnext 3\n" DISKS,
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		static struct hl_cache c;

		CU_ASSERT_FALSE(load(bad[i], &c));
		CU_ASSERT_EQUAL(c.n_ents, 0);
		CU_ASSERT_EQUAL(c.next_id, 0);
		CU_ASSERT_FALSE(c.map_dev_known);
		unload(&c);
	}
}

/* The device at the map's seq, or one write ahead: kept; anything else formats. */
static void test_device_rule(void)
{
	static struct hl_cache c;
	uint8_t other[16];

	memcpy(other, uuid7, 16);
	other[15] ^= 1;
	for (uint64_t seq = 5; seq <= 10; seq++) {
		bool keep = seq == 7 || seq == 8;

		CU_ASSERT_TRUE_FATAL(load(HEAD3 DISKS, &c));
		CU_ASSERT_EQUAL(engine_map_device_ok(&c, uuid7, seq), keep);
		CU_ASSERT_EQUAL(c.n_ents, keep ? 1u : 0u);
		CU_ASSERT_EQUAL(c.next_id, keep ? 3u : 0u);
		unload(&c);
	}
	CU_ASSERT_TRUE_FATAL(load(HEAD3 DISKS, &c));
	CU_ASSERT_FALSE(engine_map_device_ok(&c, other, 7));
	CU_ASSERT_EQUAL(c.n_ents, 0);
	unload(&c);
}

static const struct hl_test tests[] = {
    {"a map as hotlund writes it is read", test_read},
    {"two disks with one id or one name: refused", test_twice_refused},
    {"version 3's device line is read; version 2 is not checked", test_device_line},
    {"a bad or missing device line: refused", test_device_line_bad},
    {"the device at the map's seq or one ahead: kept; else formatted", test_device_rule},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("cache_engine_map", tests);
}
