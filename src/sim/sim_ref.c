/*
 * sim_ref.c - reference policies that live only in the simulator, each a
 * whole-block cache of `cap` blocks that admits every miss unless stated:
 *
 *   lru     least recently used.
 *   arc     Adaptive Replacement Cache (Megiddo & Modha, FAST 2003): T1/T2
 *           resident lists, B1/B2 ghost lists, adaptive target p.
 *   s3fifo  S3-FIFO (Yang et al., SOSP 2023): a small FIFO (10%), a main
 *           FIFO with reinsertion, a ghost FIFO of keys; 2-bit frequencies.
 *   belady  the offline optimum with bypass: a miss is admitted only when
 *           its next use comes before the furthest next use in the cache.
 *
 * The lists share one node pool and a key -> node map.
 */
#include <errno.h>
#include <stdlib.h>

#include "sim/sim.h"

#define NIL UINT32_MAX

struct node {
	uint64_t key;
	uint32_t prev, next; /* towards head / towards tail */
	uint8_t list;
	uint8_t freq;
};

struct list {
	uint32_t head, tail; /* head: most recent */
	uint64_t size;
};

struct pool {
	struct node *n;
	uint32_t *free;
	uint32_t nfree;
	struct sim_map map;
};

static int pool_init(struct pool *p, uint64_t nodes)
{
	p->n = calloc(nodes, sizeof(*p->n));
	p->free = malloc(nodes * sizeof(*p->free));
	if (!p->n || !p->free || sim_map_init(&p->map, nodes)) {
		free(p->n);
		free(p->free);
		return -ENOMEM;
	}
	for (uint64_t i = 0; i < nodes; i++)
		p->free[i] = (uint32_t)(nodes - 1 - i);
	p->nfree = (uint32_t)nodes;
	return 0;
}

static void pool_fini(struct pool *p)
{
	free(p->n);
	free(p->free);
	sim_map_fini(&p->map);
}

static uint32_t pool_new(struct pool *p, uint64_t key)
{
	uint32_t i = p->free[--p->nfree];
	p->n[i].key = key;
	p->n[i].freq = 0;
	sim_map_put(&p->map, key, i);
	return i;
}

static void pool_put(struct pool *p, uint32_t i)
{
	sim_map_del(&p->map, p->n[i].key);
	p->free[p->nfree++] = i;
}

static uint32_t pool_find(struct pool *p, uint64_t key)
{
	uint32_t *v = sim_map_get(&p->map, key);
	return v ? *v : NIL;
}

static void list_push_head(struct pool *p, struct list *l, uint8_t id, uint32_t i)
{
	struct node *n = &p->n[i];
	n->list = id;
	n->prev = NIL;
	n->next = l->head;
	if (l->head != NIL)
		p->n[l->head].prev = i;
	l->head = i;
	if (l->tail == NIL)
		l->tail = i;
	l->size++;
}

static void list_unlink(struct pool *p, struct list *l, uint32_t i)
{
	struct node *n = &p->n[i];
	if (n->prev != NIL)
		p->n[n->prev].next = n->next;
	else
		l->head = n->next;
	if (n->next != NIL)
		p->n[n->next].prev = n->prev;
	else
		l->tail = n->prev;
	l->size--;
}

static void list_init(struct list *l)
{
	l->head = l->tail = NIL;
	l->size = 0;
}

/* ---------------- LRU ---------------- */

struct sim_ref {
	uint64_t cap;
	struct pool p;
	struct list l[4];
	uint64_t target; /* ARC: p; S3-FIFO: small queue size */
	/* Belady */
	struct sim_map next_of; /* key -> index into heap-free next array */
	uint64_t *heap_next;
	uint64_t *heap_key;
	uint64_t heap_n, heap_cap;
	uint64_t *cur_next; /* per pool node: its current next use */
};

static int lru_create(uint64_t cap, struct sim_ref **out)
{
	struct sim_ref *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->cap = cap;
	if (pool_init(&r->p, cap + 1)) {
		free(r);
		return -ENOMEM;
	}
	for (int i = 0; i < 4; i++)
		list_init(&r->l[i]);
	*out = r;
	return 0;
}

static void ref_destroy(struct sim_ref *r)
{
	pool_fini(&r->p);
	sim_map_fini(&r->next_of);
	free(r->heap_next);
	free(r->heap_key);
	free(r->cur_next);
	free(r);
}

static bool lru_access(struct sim_ref *r, uint64_t key, uint64_t idx, uint64_t next, bool *admitted)
{
	uint32_t i = pool_find(&r->p, key);
	*admitted = false;
	if (i != NIL) {
		list_unlink(&r->p, &r->l[0], i);
		list_push_head(&r->p, &r->l[0], 0, i);
		return true;
	}
	if (r->l[0].size == r->cap) {
		uint32_t v = r->l[0].tail;
		list_unlink(&r->p, &r->l[0], v);
		pool_put(&r->p, v);
	}
	i = pool_new(&r->p, key);
	list_push_head(&r->p, &r->l[0], 0, i);
	*admitted = true;
	return false;
}

static bool any_contains(struct sim_ref *r, uint64_t key)
{
	uint32_t i = pool_find(&r->p, key);
	/* Lists 0 and 1 are resident for every policy here; 2 and 3 are ghosts. */
	return i != NIL && r->p.n[i].list < 2;
}

static void any_remove(struct sim_ref *r, uint64_t key)
{
	uint32_t i = pool_find(&r->p, key);
	if (i == NIL || r->p.n[i].list >= 2)
		return;
	list_unlink(&r->p, &r->l[r->p.n[i].list], i);
	pool_put(&r->p, i);
}

const struct sim_ref_ops sim_ref_lru = {
    .name = "lru",
    .create = lru_create,
    .destroy = ref_destroy,
    .access = lru_access,
    .contains = any_contains,
    .remove = any_remove,
};

/* ---------------- ARC ---------------- */

enum { T1 = 0, T2 = 1, B1 = 2, B2 = 3 };

static int arc_create(uint64_t cap, struct sim_ref **out)
{
	struct sim_ref *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->cap = cap;
	if (pool_init(&r->p, 2 * cap + 2)) {
		free(r);
		return -ENOMEM;
	}
	for (int i = 0; i < 4; i++)
		list_init(&r->l[i]);
	*out = r;
	return 0;
}

static void arc_move(struct sim_ref *r, uint32_t i, int to)
{
	list_unlink(&r->p, &r->l[r->p.n[i].list], i);
	list_push_head(&r->p, &r->l[to], (uint8_t)to, i);
}

/* REPLACE(x, p): demote the LRU of T1 or T2 to its ghost list. */
static void arc_replace(struct sim_ref *r, bool in_b2)
{
	uint64_t t1 = r->l[T1].size;
	if (t1 > 0 && (t1 > r->target || (in_b2 && t1 == r->target)))
		arc_move(r, r->l[T1].tail, B1);
	else if (r->l[T2].size > 0)
		arc_move(r, r->l[T2].tail, B2);
	else if (t1 > 0)
		arc_move(r, r->l[T1].tail, B1);
}

static void arc_drop_tail(struct sim_ref *r, int l)
{
	uint32_t v = r->l[l].tail;
	list_unlink(&r->p, &r->l[l], v);
	pool_put(&r->p, v);
}

static bool arc_access(struct sim_ref *r, uint64_t key, uint64_t idx, uint64_t next, bool *admitted)
{
	uint32_t i = pool_find(&r->p, key);
	uint64_t c = r->cap;

	*admitted = false;
	if (i != NIL && r->p.n[i].list <= T2) {
		arc_move(r, i, T2);
		return true;
	}
	*admitted = true;
	if (i != NIL && r->p.n[i].list == B1) {
		uint64_t d = r->l[B1].size >= r->l[B2].size ? 1 : r->l[B2].size / r->l[B1].size;
		r->target = r->target + d > c ? c : r->target + d;
		arc_replace(r, false);
		arc_move(r, i, T2);
		return false;
	}
	if (i != NIL && r->p.n[i].list == B2) {
		uint64_t d = r->l[B2].size >= r->l[B1].size ? 1 : r->l[B1].size / r->l[B2].size;
		r->target = r->target > d ? r->target - d : 0;
		arc_replace(r, true);
		arc_move(r, i, T2);
		return false;
	}
	/* Not in any list. */
	uint64_t l1 = r->l[T1].size + r->l[B1].size;
	uint64_t all = l1 + r->l[T2].size + r->l[B2].size;
	if (l1 == c) {
		if (r->l[T1].size < c) {
			arc_drop_tail(r, B1);
			arc_replace(r, false);
		} else {
			arc_drop_tail(r, T1);
		}
	} else if (all >= c) {
		if (all == 2 * c)
			arc_drop_tail(r, B2);
		arc_replace(r, false);
	}
	i = pool_new(&r->p, key);
	list_push_head(&r->p, &r->l[T1], T1, i);
	return false;
}

const struct sim_ref_ops sim_ref_arc = {
    .name = "arc",
    .create = arc_create,
    .destroy = ref_destroy,
    .access = arc_access,
    .contains = any_contains,
    .remove = any_remove,
};

/* ---------------- S3-FIFO ---------------- */

enum { SQ = 0, MQ = 1, GQ = 2 };

static int s3_create(uint64_t cap, struct sim_ref **out)
{
	struct sim_ref *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->cap = cap;
	r->target = cap / 10 ? cap / 10 : 1; /* small queue: 10% */
	if (pool_init(&r->p, 2 * cap + 4)) {
		free(r);
		return -ENOMEM;
	}
	for (int i = 0; i < 4; i++)
		list_init(&r->l[i]);
	*out = r;
	return 0;
}

static void s3_ghost_add(struct sim_ref *r, uint32_t i)
{
	uint64_t gcap = r->cap - r->target ? r->cap - r->target : 1;
	list_push_head(&r->p, &r->l[GQ], GQ, i);
	while (r->l[GQ].size > gcap)
		arc_drop_tail(r, GQ);
}

static void s3_evict_main(struct sim_ref *r)
{
	while (r->l[MQ].size) {
		uint32_t t = r->l[MQ].tail;
		list_unlink(&r->p, &r->l[MQ], t);
		if (r->p.n[t].freq > 0) {
			r->p.n[t].freq--;
			list_push_head(&r->p, &r->l[MQ], MQ, t);
		} else {
			pool_put(&r->p, t);
			return;
		}
	}
}

static void s3_evict_small(struct sim_ref *r)
{
	while (r->l[SQ].size) {
		uint32_t t = r->l[SQ].tail;
		list_unlink(&r->p, &r->l[SQ], t);
		if (r->p.n[t].freq > 1) {
			r->p.n[t].freq = 0;
			list_push_head(&r->p, &r->l[MQ], MQ, t);
			if (r->l[MQ].size > r->cap - r->l[SQ].size)
				s3_evict_main(r);
		} else {
			s3_ghost_add(r, t);
			return;
		}
	}
}

static void s3_evict(struct sim_ref *r)
{
	if (r->l[SQ].size >= r->target || !r->l[MQ].size)
		s3_evict_small(r);
	else
		s3_evict_main(r);
}

static bool s3_access(struct sim_ref *r, uint64_t key, uint64_t idx, uint64_t next, bool *admitted)
{
	uint32_t i = pool_find(&r->p, key);

	*admitted = false;
	if (i != NIL && r->p.n[i].list != GQ) {
		if (r->p.n[i].freq < 3)
			r->p.n[i].freq++;
		return true;
	}
	*admitted = true;
	while (r->l[SQ].size + r->l[MQ].size >= r->cap)
		s3_evict(r);
	/* Eviction may have pushed key itself out of the ghost queue. */
	i = pool_find(&r->p, key);
	if (i != NIL) {
		/* A ghost hit goes straight to the main queue. */
		list_unlink(&r->p, &r->l[GQ], i);
		r->p.n[i].freq = 0;
		list_push_head(&r->p, &r->l[MQ], MQ, i);
		return false;
	}
	i = pool_new(&r->p, key);
	list_push_head(&r->p, &r->l[SQ], SQ, i);
	return false;
}

const struct sim_ref_ops sim_ref_s3fifo = {
    .name = "s3fifo",
    .create = s3_create,
    .destroy = ref_destroy,
    .access = s3_access,
    .contains = any_contains,
    .remove = any_remove,
};

/* ---------------- Belady with bypass ---------------- */

/*
 * A max-heap of (next use, key) with lazy deletion: an entry is current
 * only while the key is cached and its recorded next use equals the
 * entry's. Stale entries are skipped when they reach the top.
 */
static int bel_create(uint64_t cap, struct sim_ref **out)
{
	struct sim_ref *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->cap = cap;
	r->heap_cap = 4 * cap + 64;
	r->heap_next = malloc(r->heap_cap * sizeof(uint64_t));
	r->heap_key = malloc(r->heap_cap * sizeof(uint64_t));
	r->cur_next = malloc((cap + 1) * sizeof(uint64_t));
	if (!r->heap_next || !r->heap_key || !r->cur_next || pool_init(&r->p, cap + 1)) {
		free(r->heap_next);
		free(r->heap_key);
		free(r->cur_next);
		free(r);
		return -ENOMEM;
	}
	list_init(&r->l[0]);
	*out = r;
	return 0;
}

static void heap_swap(struct sim_ref *r, uint64_t a, uint64_t b)
{
	uint64_t n = r->heap_next[a], k = r->heap_key[a];
	r->heap_next[a] = r->heap_next[b];
	r->heap_key[a] = r->heap_key[b];
	r->heap_next[b] = n;
	r->heap_key[b] = k;
}

static void heap_pop(struct sim_ref *r)
{
	uint64_t i = 0;
	r->heap_n--;
	r->heap_next[0] = r->heap_next[r->heap_n];
	r->heap_key[0] = r->heap_key[r->heap_n];
	for (;;) {
		uint64_t l = 2 * i + 1, m = i;
		if (l < r->heap_n && r->heap_next[l] > r->heap_next[m])
			m = l;
		if (l + 1 < r->heap_n && r->heap_next[l + 1] > r->heap_next[m])
			m = l + 1;
		if (m == i)
			break;
		heap_swap(r, i, m);
		i = m;
	}
}

static bool heap_current(struct sim_ref *r, uint64_t pos)
{
	uint32_t i = pool_find(&r->p, r->heap_key[pos]);
	return i != NIL && r->cur_next[i] == r->heap_next[pos];
}

/* Drop stale entries; rebuild when the heap would overflow. */
static void heap_push(struct sim_ref *r, uint64_t next, uint64_t key)
{
	if (r->heap_n == r->heap_cap) {
		uint64_t w = 0;
		for (uint64_t k = 0; k < r->heap_n; k++)
			if (heap_current(r, k)) {
				r->heap_next[w] = r->heap_next[k];
				r->heap_key[w] = r->heap_key[k];
				w++;
			}
		r->heap_n = 0;
		uint64_t n = w;
		for (uint64_t k = 0; k < n; k++) {
			uint64_t nx = r->heap_next[k], ky = r->heap_key[k];
			/* Re-insert in place: sift up within the rebuilt prefix. */
			uint64_t i = r->heap_n++;
			r->heap_next[i] = nx;
			r->heap_key[i] = ky;
			while (i && r->heap_next[(i - 1) / 2] < r->heap_next[i]) {
				heap_swap(r, i, (i - 1) / 2);
				i = (i - 1) / 2;
			}
		}
	}
	uint64_t i = r->heap_n++;
	r->heap_next[i] = next;
	r->heap_key[i] = key;
	while (i && r->heap_next[(i - 1) / 2] < r->heap_next[i]) {
		heap_swap(r, i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
}

static bool bel_access(struct sim_ref *r, uint64_t key, uint64_t idx, uint64_t next, bool *admitted)
{
	uint32_t i = pool_find(&r->p, key);

	*admitted = false;
	if (i != NIL) {
		r->cur_next[i] = next;
		heap_push(r, next, key);
		return true;
	}
	if (next == UINT64_MAX)
		return false; /* never read again: bypass */
	if (r->l[0].size == r->cap) {
		while (r->heap_n && !heap_current(r, 0))
			heap_pop(r);
		if (!r->heap_n || r->heap_next[0] <= next)
			return false; /* everything cached is needed sooner: bypass */
		uint32_t v = pool_find(&r->p, r->heap_key[0]);
		heap_pop(r);
		list_unlink(&r->p, &r->l[0], v);
		pool_put(&r->p, v);
	}
	i = pool_new(&r->p, key);
	list_push_head(&r->p, &r->l[0], 0, i);
	r->cur_next[i] = next;
	heap_push(r, next, key);
	*admitted = true;
	return false;
}

const struct sim_ref_ops sim_ref_belady = {
    .name = "belady",
    .create = bel_create,
    .destroy = ref_destroy,
    .access = bel_access,
    .contains = any_contains,
    .remove = any_remove,
};
