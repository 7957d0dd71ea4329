/*
 * mem_region.c - this thread's regions of memory that I/O will target, and
 * the watchers told of them (mem_region.h).
 *
 * The regions are kept sorted by address in one array, so the hot-path
 * lookup (one per read or write a watcher submits) is a binary search over
 * a few hundred entries that stay in the cache; adding and withdrawing
 * move the array's tail, which is fine because the owners do it when they
 * keep or give back a buffer, not per I/O. Slots are small numbers that
 * stay with a region for its life (a watcher's table index).
 */
#include "hotlun/mem_region.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct region {
	uintptr_t base;
	size_t len;
	int slot;
};

struct region_set {
	struct region *v; /* sorted by base, no overlaps */
	unsigned n, cap;
	uint64_t used[HL_MEM_REGIONS_MAX / 64]; /* slots taken */
	struct hl_mem_watch *watchers;
};

static __thread struct region_set *tl_set;
static pthread_key_t set_key;
static pthread_once_t set_key_once = PTHREAD_ONCE_INIT;

/* Thread exit with regions left (their owners ended with the thread): free the set. */
static void set_key_destructor(void *p)
{
	struct region_set *s = p;

	if (s == tl_set)
		tl_set = NULL;
	free(s->v);
	free(s);
}

static void set_key_make(void)
{
	pthread_key_create(&set_key, set_key_destructor);
}

/* The index of the first region whose base is above p (0 .. n). */
static unsigned upper(const struct region_set *s, uintptr_t p)
{
	unsigned lo = 0, hi = s->n;

	while (lo < hi) {
		unsigned mid = (lo + hi) / 2;
		if (s->v[mid].base <= p)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int slot_take(struct region_set *s)
{
	for (unsigned i = 0; i < HL_MEM_REGIONS_MAX / 64; i++) {
		if (s->used[i] != UINT64_MAX) {
			unsigned b = (unsigned)__builtin_ctzll(~s->used[i]);
			s->used[i] |= 1ull << b;
			return (int)(i * 64 + b);
		}
	}
	return -ENOSPC;
}

static void slot_give(struct region_set *s, int slot)
{
	s->used[slot / 64] &= ~(1ull << (slot % 64));
}

/* The set goes when nothing is left in it (no leak at thread exit). */
static void set_maybe_free(void)
{
	if (tl_set && !tl_set->n && !tl_set->watchers) {
		pthread_setspecific(set_key, NULL);
		free(tl_set->v);
		free(tl_set);
		tl_set = NULL;
	}
}

static struct region_set *set_get(void)
{
	if (!tl_set) {
		pthread_once(&set_key_once, set_key_make);
		tl_set = calloc(1, sizeof(*tl_set));
		if (tl_set)
			pthread_setspecific(set_key, tl_set);
	}
	return tl_set;
}

int hl_mem_region_add(void *base, size_t len)
{
	uintptr_t b = (uintptr_t)base;
	struct region_set *s;
	unsigned i;
	int slot;

	if (!len || b + len < b)
		return -EINVAL;
	s = set_get();
	if (!s)
		return -ENOMEM;
	i = upper(s, b);
	if (i > 0 && s->v[i - 1].base == b)
		return -EEXIST;
	if ((i > 0 && s->v[i - 1].base + s->v[i - 1].len > b) ||
	    (i < s->n && s->v[i].base < b + len)) {
		set_maybe_free();
		return -EINVAL;
	}
	if (s->n == s->cap) {
		unsigned cap = s->cap ? s->cap * 2 : 64;
		struct region *v = realloc(s->v, cap * sizeof(*v));
		if (!v) {
			set_maybe_free();
			return -ENOMEM;
		}
		s->v = v;
		s->cap = cap;
	}
	slot = slot_take(s);
	if (slot < 0) {
		set_maybe_free();
		return slot;
	}
	memmove(&s->v[i + 1], &s->v[i], (s->n - i) * sizeof(*s->v));
	s->v[i] = (struct region){.base = b, .len = len, .slot = slot};
	s->n++;
	for (struct hl_mem_watch *w = s->watchers; w; w = w->next)
		w->add(w, slot, base, len);
	return slot;
}

int hl_mem_region_del(void *base)
{
	struct region_set *s = tl_set;
	uintptr_t b = (uintptr_t)base;
	unsigned i;
	int slot;

	if (!s)
		return -ENOENT;
	i = upper(s, b);
	if (i == 0 || s->v[i - 1].base != b)
		return -ENOENT;
	slot = s->v[i - 1].slot;
	/* The watchers let go of it before the owner may free the memory. */
	for (struct hl_mem_watch *w = s->watchers; w; w = w->next)
		w->del(w, slot);
	memmove(&s->v[i - 1], &s->v[i], (s->n - i) * sizeof(*s->v));
	s->n--;
	slot_give(s, slot);
	set_maybe_free();
	return 0;
}

int hl_mem_region_find(const void *p, size_t len)
{
	const struct region_set *s = tl_set;
	uintptr_t a = (uintptr_t)p;
	const struct region *r;
	unsigned i;

	if (!s || !s->n)
		return -1;
	i = upper(s, a);
	if (i == 0)
		return -1;
	r = &s->v[i - 1];
	if (a - r->base > r->len || len > r->len - (a - r->base))
		return -1;
	return r->slot;
}

unsigned hl_mem_region_count(void)
{
	return tl_set ? tl_set->n : 0;
}

void hl_mem_watch_init(struct hl_mem_watch *w, hl_mem_region_add_fn add, hl_mem_region_del_fn del,
                       void *arg)
{
	memset(w, 0, sizeof(*w));
	w->add = add;
	w->del = del;
	w->arg = arg;
}

void hl_mem_watch_start(struct hl_mem_watch *w)
{
	struct region_set *s;

	if (w->on)
		return;
	s = set_get();
	if (!s)
		return; /* out of memory: it sees no region, so its I/O goes the ordinary way */
	w->next = s->watchers;
	s->watchers = w;
	w->on = true;
	for (unsigned i = 0; i < s->n; i++)
		w->add(w, s->v[i].slot, (void *)s->v[i].base, s->v[i].len);
}

void hl_mem_watch_stop(struct hl_mem_watch *w)
{
	struct region_set *s = tl_set;

	if (!w->on || !s)
		return;
	for (struct hl_mem_watch **pp = &s->watchers; *pp; pp = &(*pp)->next) {
		if (*pp == w) {
			*pp = w->next;
			break;
		}
	}
	w->on = false;
	w->next = NULL;
	set_maybe_free();
}
