/*
 * counted.c - per-disk command counters: the origin wrapper at the top of a
 * disk's stack, right under the LU, so it sees every block command the
 * SCSI layer issues for the disk (hits and misses alike, before any cache)
 * and times it (hl_origin_count_wrap).
 *
 * The wrapped request cannot carry our state: io->priv belongs to whatever
 * backend runs below. So each request gets a small shadow request from a
 * per-thread free list; the caller's io is completed from the shadow's
 * completion. Counters are atomics shared by every reactor.
 */
#include "config.h"

#include "hotlun/event.h"
#include "hotlun/util.h"
#include "origin/origin_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct shadow_io {
	struct hl_origin_io io;     /* what the inner origin sees */
	struct hl_origin_io *outer; /* the caller's request */
	struct hl_origin_counters *counters;
	uint64_t start_ns;
	struct shadow_io *next_free;
};

struct counted_origin {
	struct hl_origin_counters *counters; /* owned */
};

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

static unsigned log2_bucket(uint64_t us)
{
	unsigned b = 0;
	while (us && b < HL_ORIGIN_LAT_BUCKETS - 1) {
		us >>= 1;
		b++;
	}
	return b;
}

static void add(uint64_t *c, uint64_t v)
{
	__atomic_fetch_add(c, v, __ATOMIC_RELAXED);
}

static void shadow_done(struct hl_origin_io *io, int result)
{
	struct shadow_io *s = hl_container_of(io, struct shadow_io, io);
	struct hl_origin_io *outer = s->outer;
	struct hl_origin_counters *c = s->counters;
	uint64_t us = (hl_now_ns() - s->start_ns) / 1000;

	switch (io->op) {
	case HL_IO_READ:
		add(&c->read_cmds, 1);
		add(&c->read_lat[log2_bucket(us)], 1);
		if (result == 0)
			add(&c->read_bytes, io->length);
		break;
	case HL_IO_WRITE:
		add(&c->write_cmds, 1);
		add(&c->write_lat[log2_bucket(us)], 1);
		if (result == 0)
			add(&c->write_bytes, io->length);
		break;
	default:
		add(&c->other_cmds, 1);
		break;
	}
	if (result < 0 && result != -EILSEQ) /* a miscompare is an answer, not an error */
		add(&c->errors, 1);
	outer->miscompare_offset = io->miscompare_offset;

	shadow_put(s);
	outer->cb(outer, result);
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
	s->outer = outer;
	s->counters = co->counters;
	s->start_ns = hl_now_ns();
	rc = hl_origin_submit(o->inner, &s->io);
	if (rc < 0)
		shadow_put(s);
	return rc;
}

static void counted_close(struct hl_origin *o)
{
	free(co_of(o)->counters);
}

static const struct hl_origin_ops counted_ops = {
    .name = "counted",
    .priv_size = sizeof(struct counted_origin),
    .close = counted_close,
    .submit = counted_submit,
};

int hl_origin_count_wrap(struct hl_origin *inner, struct hl_origin **out,
                         struct hl_origin_counters **counters)
{
	struct hl_origin_counters *c = calloc(1, sizeof(*c));
	struct hl_origin *o;
	int rc;

	if (!c)
		return -ENOMEM;
	rc = hl_origin_wrap(inner, &counted_ops, NULL, &o);
	if (rc) {
		free(c);
		return rc;
	}
	co_of(o)->counters = c;
	*out = o;
	*counters = c;
	return 0;
}

void hl_origin_counters_read(const struct hl_origin_counters *c, struct hl_origin_counters *out)
{
	const uint64_t *src = (const uint64_t *)c;
	uint64_t *dst = (uint64_t *)out;

	for (size_t i = 0; i < sizeof(*c) / sizeof(uint64_t); i++)
		dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
}
