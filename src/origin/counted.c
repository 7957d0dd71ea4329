/*
 * counted.c - per-disk command counters: the origin wrapper at the top of a
 * disk's stack, right under the LU, so it sees every block command the
 * SCSI layer issues for the disk (hits and misses alike, before any cache)
 * and times it (hl_origin_count_wrap). Reads are filed by where their data
 * came from, as the cache below tagged them (hl_origin_io.source).
 *
 * The wrapped request cannot carry our state: io->priv belongs to whatever
 * backend runs below. So each request gets a small shadow request from a
 * per-thread free list; the caller's io is completed from the shadow's
 * completion.
 *
 * Counters are per thread: each thread that completes I/O takes a shard of
 * its own the first time (a thread-local index), and only it writes there,
 * with plain relaxed loads and stores (no locked instruction, no cache line
 * shared between reactors). Readers sum the shards. Threads past the
 * shards share one more, updated with atomic adds.
 */
#include "config.h"

#include "hotlun/event.h"
#include "hotlun/util.h"
#include "origin/origin_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct shadow_io {
	struct hl_origin_io io;     /* what the inner origin sees */
	struct hl_origin_io *outer; /* the caller's request */
	struct hl_origin_stats *stats;
	uint64_t start_ns;
	struct shadow_io *next_free;
};

/* One thread's counters; hl_origin_counters without the derived sums. */
struct count_shard {
	uint64_t read_cmds, write_cmds, other_cmds;
	uint64_t read_bytes, write_bytes;
	uint64_t errors;
	uint64_t write_ns;
	uint64_t read_ns[HL_IO_SRC_N];
	uint64_t read_lat[HL_IO_SRC_N][HL_ORIGIN_LAT_BUCKETS];
	uint64_t write_lat[HL_ORIGIN_LAT_BUCKETS];
} __attribute__((aligned(64)));

/* Shards owned by one thread each; one more, shared, for any thread past them. */
#define COUNT_SHARDS 32

struct hl_origin_stats {
	bool timed; /* the clock runs and latency is recorded */
	struct count_shard shard[COUNT_SHARDS + 1];
};

struct counted_origin {
	struct hl_origin_stats *stats; /* owned */
};

/* Which shard this thread writes: 1 + index, 0 until its first count. */
static __thread unsigned my_shard;
static atomic_uint shards_taken;

static __thread struct shadow_io *free_shadows;
static __thread unsigned n_free_shadows;
/*
 * A free list lives as long as its thread: the key's destructor frees it when
 * a reactor thread exits (without it every shadow cached by a reactor leaks at
 * shutdown). The key's value is only a non-NULL flag that arms the destructor.
 */
static pthread_key_t shadows_key;
static pthread_once_t shadows_key_once = PTHREAD_ONCE_INIT;

static void shadows_free_all(void *unused)
{
	(void)unused;
	while (free_shadows) {
		struct shadow_io *s = free_shadows;
		free_shadows = s->next_free;
		free(s);
	}
	n_free_shadows = 0;
}

static void shadows_key_make(void)
{
	pthread_key_create(&shadows_key, shadows_free_all);
}

/* Put s on this thread's free list (or free it when the list is full). */
static void shadow_put(struct shadow_io *s)
{
	if (n_free_shadows >= 1024) {
		free(s);
		return;
	}
	if (!free_shadows) {
		pthread_once(&shadows_key_once, shadows_key_make);
		pthread_setspecific(shadows_key, &free_shadows);
	}
	s->next_free = free_shadows;
	free_shadows = s;
	n_free_shadows++;
}

static struct counted_origin *co_of(struct hl_origin *o)
{
	return hl_origin_priv(o);
}

static unsigned shard_of_thread(void)
{
	if (!my_shard) {
		unsigned n = atomic_fetch_add(&shards_taken, 1);
		my_shard = (n < COUNT_SHARDS ? n : COUNT_SHARDS) + 1;
	}
	return my_shard - 1;
}

/*
 * Add to a counter of this thread's shard: only this thread writes it, so a
 * relaxed load and store suffice (readers see either value, never a torn
 * one); the shared overflow shard needs a real atomic add.
 */
static inline void add(bool shared, uint64_t *c, uint64_t v)
{
	if (shared)
		__atomic_fetch_add(c, v, __ATOMIC_RELAXED);
	else
		__atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + v, __ATOMIC_RELAXED);
}

static void shadow_done(struct hl_origin_io *io, int result)
{
	struct shadow_io *s = hl_container_of(io, struct shadow_io, io);
	struct hl_origin_io *outer = s->outer;
	struct hl_origin_stats *st = s->stats;
	unsigned si = shard_of_thread();
	struct count_shard *c = &st->shard[si];
	bool shared = si == COUNT_SHARDS;
	uint64_t ns = st->timed ? hl_now_ns() - s->start_ns : 0;
	unsigned src = io->source < HL_IO_SRC_N ? io->source : HL_IO_SRC_UNCACHED;

	switch (io->op) {
	case HL_IO_READ:
		add(shared, &c->read_cmds, 1);
		if (st->timed) {
			add(shared, &c->read_lat[src][hl_origin_lat_bucket(ns)], 1);
			add(shared, &c->read_ns[src], ns);
		}
		if (result == 0)
			add(shared, &c->read_bytes, io->length);
		break;
	case HL_IO_WRITE:
		add(shared, &c->write_cmds, 1);
		if (st->timed) {
			add(shared, &c->write_lat[hl_origin_lat_bucket(ns)], 1);
			add(shared, &c->write_ns, ns);
		}
		if (result == 0)
			add(shared, &c->write_bytes, io->length);
		break;
	default:
		add(shared, &c->other_cmds, 1);
		break;
	}
	if (result < 0 && result != -EILSEQ) /* a miscompare is an answer, not an error */
		add(shared, &c->errors, 1);
	outer->miscompare_offset = io->miscompare_offset;
	outer->may_land = io->may_land;
	outer->source = io->source;

	shadow_put(s);
	outer->cb(outer, result);
}

/* The inner origin's "data ready up to here", passed up as it is (no count). */
static void shadow_ready(struct hl_origin_io *io, uint64_t bytes)
{
	struct shadow_io *s = hl_container_of(io, struct shadow_io, io);

	s->outer->ready(s->outer, bytes);
}

static int counted_submit(struct hl_origin *o, struct hl_origin_io *outer)
{
	struct counted_origin *co = co_of(o);
	struct shadow_io *s = free_shadows;
	int rc;

	if (s) {
		free_shadows = s->next_free;
		n_free_shadows--;
	} else {
		s = malloc(sizeof(*s));
		if (!s)
			return -ENOMEM;
	}
	hl_origin_io_forward(&s->io, outer, shadow_done, NULL);
	if (outer->ready)
		s->io.ready = shadow_ready;
	s->outer = outer;
	s->stats = co->stats;
	s->start_ns = co->stats->timed ? hl_now_ns() : 0;
	rc = hl_origin_submit(o->inner, &s->io);
	if (rc < 0)
		shadow_put(s);
	return rc;
}

static void counted_close(struct hl_origin *o)
{
	free(co_of(o)->stats);
}

static const struct hl_origin_ops counted_ops = {
    .name = "counted",
    .priv_size = sizeof(struct counted_origin),
    .close = counted_close,
    .submit = counted_submit,
};

int hl_origin_count_wrap(struct hl_origin *inner, struct hl_origin **out,
                         struct hl_origin_stats **stats)
{
	struct hl_origin_stats *st = aligned_alloc(64, sizeof(*st));
	const char *off = getenv("HOTLUN_COUNT_NO_LATENCY");
	struct hl_origin *o;
	int rc;

	if (!st)
		return -ENOMEM;
	memset(st, 0, sizeof(*st));
	st->timed = !(off && *off && strcmp(off, "0"));
	rc = hl_origin_wrap(inner, &counted_ops, NULL, &o);
	if (rc) {
		free(st);
		return rc;
	}
	co_of(o)->stats = st;
	*out = o;
	*stats = st;
	return 0;
}

static uint64_t get(const uint64_t *c)
{
	return __atomic_load_n(c, __ATOMIC_RELAXED);
}

void hl_origin_counters_read(const struct hl_origin_stats *s, struct hl_origin_counters *out)
{
	memset(out, 0, sizeof(*out));
	out->timed = s->timed;
	for (unsigned i = 0; i <= COUNT_SHARDS; i++) {
		const struct count_shard *c = &s->shard[i];

		out->read_cmds += get(&c->read_cmds);
		out->write_cmds += get(&c->write_cmds);
		out->other_cmds += get(&c->other_cmds);
		out->read_bytes += get(&c->read_bytes);
		out->write_bytes += get(&c->write_bytes);
		out->errors += get(&c->errors);
		out->write_ns += get(&c->write_ns);
		for (unsigned b = 0; b < HL_ORIGIN_LAT_BUCKETS; b++)
			out->write_lat[b] += get(&c->write_lat[b]);
		for (unsigned k = 0; k < HL_IO_SRC_N; k++) {
			out->read_src_ns[k] += get(&c->read_ns[k]);
			for (unsigned b = 0; b < HL_ORIGIN_LAT_BUCKETS; b++)
				out->read_src_lat[k][b] += get(&c->read_lat[k][b]);
		}
	}
	for (unsigned k = 0; k < HL_IO_SRC_N; k++) {
		out->read_ns += out->read_src_ns[k];
		for (unsigned b = 0; b < HL_ORIGIN_LAT_BUCKETS; b++)
			out->read_lat[b] += out->read_src_lat[k][b];
	}
}
