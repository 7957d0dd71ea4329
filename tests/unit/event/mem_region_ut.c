/*
 * mem_region_ut.c - this thread's regions of memory that I/O will target
 * (mem_region.h): lookup, no region for memory never announced or withdrawn,
 * watchers told of adds and dels (and of the regions before they started),
 * and that another thread sees none of them.
 */
#include "hl_test.h"
#include "hotlun/mem_region.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

static char mem[16][4096] __attribute__((aligned(4096)));

struct seen {
	struct hl_mem_watch w;
	int added[HL_MEM_REGIONS_MAX]; /* per slot: adds minus dels */
	size_t len[HL_MEM_REGIONS_MAX];
	void *base[HL_MEM_REGIONS_MAX];
	unsigned adds, dels;
};

static void seen_add(struct hl_mem_watch *w, int slot, void *base, size_t len)
{
	struct seen *s = w->arg;

	s->base[slot] = base;
	s->added[slot]++;
	s->len[slot] = len;
	s->adds++;
}

static void seen_del(struct hl_mem_watch *w, int slot)
{
	struct seen *s = w->arg;

	/* Told while the region is still there: the owner has not freed it yet. */
	CU_ASSERT_EQUAL(hl_mem_region_find(s->base[slot], 1), slot);
	s->added[slot]--;
	s->dels++;
}

static void test_lookup(void)
{
	int a = hl_mem_region_add(mem[2], 2 * 4096);
	int b = hl_mem_region_add(mem[8], 4096);

	CU_ASSERT_TRUE(a >= 0);
	CU_ASSERT_TRUE(b >= 0);
	CU_ASSERT_NOT_EQUAL(a, b);
	CU_ASSERT_EQUAL(hl_mem_region_count(), 2);
	/* inside, at either end, the whole */
	CU_ASSERT_EQUAL(hl_mem_region_find(mem[2], 4096), a);
	CU_ASSERT_EQUAL(hl_mem_region_find(mem[3], 4096), a);
	CU_ASSERT_EQUAL(hl_mem_region_find(mem[2], 2 * 4096), a);
	CU_ASSERT_EQUAL(hl_mem_region_find(mem[2] + 512, 512), a);
	CU_ASSERT_EQUAL(hl_mem_region_find(mem[8], 4096), b);
	/* not wholly inside one region: the caller goes the ordinary way */
	CU_ASSERT_EQUAL(hl_mem_region_find(mem[3], 2 * 4096), -1);
	CU_ASSERT_EQUAL(hl_mem_region_find(mem[2] + 1, 2 * 4096), -1);
	CU_ASSERT_EQUAL(hl_mem_region_find(mem[1], 4096), -1);
	CU_ASSERT_EQUAL(hl_mem_region_find(mem[1] + 4095, 2), -1);
	CU_ASSERT_EQUAL(hl_mem_region_find(mem[4], 4096), -1);
	CU_ASSERT_EQUAL(hl_mem_region_find(mem[9], 4096), -1);
	CU_ASSERT_EQUAL(hl_mem_region_find(mem[7], 2 * 4096), -1);
	/* twice, overlapping, empty */
	CU_ASSERT_EQUAL(hl_mem_region_add(mem[2], 4096), -EEXIST);
	CU_ASSERT_EQUAL(hl_mem_region_add(mem[3], 4096), -EINVAL);
	CU_ASSERT_EQUAL(hl_mem_region_add(mem[1], 2 * 4096), -EINVAL);
	CU_ASSERT_EQUAL(hl_mem_region_add(mem[5], 0), -EINVAL);
	CU_ASSERT_EQUAL(hl_mem_region_count(), 2);
	CU_ASSERT_EQUAL(hl_mem_region_del(mem[2]), 0);
	CU_ASSERT_EQUAL(hl_mem_region_del(mem[8]), 0);
	CU_ASSERT_EQUAL(hl_mem_region_count(), 0);
}

static void test_removal(void)
{
	int a = hl_mem_region_add(mem[0], 4096);
	int b = hl_mem_region_add(mem[1], 4096);
	int c = hl_mem_region_add(mem[2], 4096);

	CU_ASSERT_EQUAL(hl_mem_region_del(mem[1]), 0);
	CU_ASSERT_EQUAL(hl_mem_region_find(mem[1], 4096), -1);
	CU_ASSERT_EQUAL(hl_mem_region_find(mem[0], 4096), a);
	CU_ASSERT_EQUAL(hl_mem_region_find(mem[2], 4096), c);
	CU_ASSERT_EQUAL(hl_mem_region_del(mem[1]), -ENOENT);
	CU_ASSERT_EQUAL(hl_mem_region_del(mem[0] + 4096 / 2), -ENOENT);
	/* a freed slot is used again */
	CU_ASSERT_EQUAL(hl_mem_region_add(mem[5], 4096), b);
	CU_ASSERT_EQUAL(hl_mem_region_del(mem[0]), 0);
	CU_ASSERT_EQUAL(hl_mem_region_del(mem[2]), 0);
	CU_ASSERT_EQUAL(hl_mem_region_del(mem[5]), 0);
	CU_ASSERT_EQUAL(hl_mem_region_find(mem[0], 4096), -1);
	CU_ASSERT_EQUAL(hl_mem_region_del(mem[0]), -ENOENT);
}

static void test_watchers(void)
{
	static struct seen s1, s2;
	int a, b;

	memset(&s1, 0, sizeof(s1));
	memset(&s2, 0, sizeof(s2));
	a = hl_mem_region_add(mem[0], 4096);
	hl_mem_watch_init(&s1.w, seen_add, seen_del, &s1);
	hl_mem_watch_start(&s1.w); /* told of the region there before it */
	CU_ASSERT_EQUAL(s1.adds, 1);
	CU_ASSERT_EQUAL(s1.added[a], 1);
	hl_mem_watch_init(&s2.w, seen_add, seen_del, &s2);
	hl_mem_watch_start(&s2.w);
	hl_mem_watch_start(&s2.w); /* twice: once */
	b = hl_mem_region_add(mem[1], 3 * 4096);
	CU_ASSERT_EQUAL(s1.added[b], 1);
	CU_ASSERT_EQUAL(s2.added[b], 1);
	CU_ASSERT_EQUAL(s2.len[b], 3 * 4096);
	CU_ASSERT_EQUAL(hl_mem_region_add(mem[1], 4096), -EEXIST);
	CU_ASSERT_EQUAL(s1.adds, 2); /* a refused add tells nobody */
	CU_ASSERT_EQUAL(hl_mem_region_del(mem[0]), 0);
	CU_ASSERT_EQUAL(s1.added[a], 0);
	CU_ASSERT_EQUAL(s2.added[a], 0);
	hl_mem_watch_stop(&s1.w);
	hl_mem_watch_stop(&s1.w); /* twice: harmless */
	CU_ASSERT_EQUAL(hl_mem_region_del(mem[1]), 0);
	CU_ASSERT_EQUAL(s1.added[b], 1); /* stopped: not told */
	CU_ASSERT_EQUAL(s2.added[b], 0);
	CU_ASSERT_EQUAL(s2.dels, 2);
	hl_mem_watch_stop(&s2.w);
	CU_ASSERT_EQUAL(hl_mem_region_count(), 0);
}

static void *other_thread(void *arg)
{
	int *found = arg;

	*found = hl_mem_region_find(mem[0], 4096);
	found[1] = hl_mem_region_del(mem[0]);
	return NULL;
}

static void test_per_thread(void)
{
	pthread_t t;
	int found[2] = {0, 0};
	int a = hl_mem_region_add(mem[0], 4096);

	CU_ASSERT_TRUE(a >= 0);
	CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, other_thread, found), 0);
	pthread_join(t, NULL);
	CU_ASSERT_EQUAL(found[0], -1);
	CU_ASSERT_EQUAL(found[1], -ENOENT);
	CU_ASSERT_EQUAL(hl_mem_region_find(mem[0], 4096), a);
	CU_ASSERT_EQUAL(hl_mem_region_del(mem[0]), 0);
}

static void test_full(void)
{
	static char *many;
	unsigned n = 0;
	int rc = 0;

	many = calloc(HL_MEM_REGIONS_MAX + 1, 64);
	CU_ASSERT_PTR_NOT_NULL_FATAL(many);
	while (n <= HL_MEM_REGIONS_MAX && (rc = hl_mem_region_add(many + 64 * n, 64)) >= 0)
		n++;
	CU_ASSERT_EQUAL(n, HL_MEM_REGIONS_MAX);
	CU_ASSERT_EQUAL(rc, -ENOSPC);
	/* every one found in the sorted table, each its own slot */
	for (unsigned i = 0; i < n; i += 97)
		CU_ASSERT_TRUE(hl_mem_region_find(many + 64 * i + 8, 8) >= 0);
	CU_ASSERT_EQUAL(hl_mem_region_find(many + 64 * n, 8), -1);
	for (unsigned i = 0; i < n; i++)
		CU_ASSERT_EQUAL(hl_mem_region_del(many + 64 * i), 0);
	CU_ASSERT_EQUAL(hl_mem_region_count(), 0);
	free(many);
}

static const struct hl_test tests[] = {
    {"lookup: inside one region only", test_lookup},
    {"removal: gone from lookups, slot reused", test_removal},
    {"watchers: replay, add, del, stop", test_watchers},
    {"regions are per thread", test_per_thread},
    {"full: -ENOSPC, lookups still right", test_full},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("mem_region", tests);
}
