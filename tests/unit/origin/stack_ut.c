/*
 * stack_ut.c - stacking origins (hl_origin_wrap): what a wrapper carries
 * over from the origin it wraps, events up through two layers, the close
 * order of a stack, proofs and identity passed down to the first layer that
 * has them, and the counting wrapper's counters.
 */
#include "config.h"

#include "hl_test.h"
#include "origin/origin_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* ---- a fake backend that answers at once and logs what happens to it ---- */

static char trail[256]; /* "close:NAME " per close, in order */

struct fake {
	const char *name;
	int result;     /* what every I/O completes with */
	uint8_t source; /* what it tags reads with, as a cache would (hl_io_source) */
};

static int fake_submit(struct hl_origin *o, struct hl_origin_io *io)
{
	struct fake *f = hl_origin_priv(o);

	if (io->op == HL_IO_READ)
		io->source = f->source;
	io->cb(io, f->result); /* inline: enough for counting; real backends defer */
	return 0;
}

static void fake_close(struct hl_origin *o)
{
	struct fake *f = hl_origin_priv(o);

	strncat(trail, "close:", sizeof(trail) - strlen(trail) - 1);
	strncat(trail, f->name, sizeof(trail) - strlen(trail) - 1);
	strncat(trail, " ", sizeof(trail) - strlen(trail) - 1);
}

static int fake_proof_take(struct hl_origin *o, const char *tag, bool final, char *proof,
                           size_t len)
{
	(void)tag, (void) final;
	snprintf(proof, len, "proof-of-%s", ((struct fake *)hl_origin_priv(o))->name);
	return 0;
}

static int fake_identity(struct hl_origin *o, char *buf, size_t len)
{
	snprintf(buf, len, "id-%s", ((struct fake *)hl_origin_priv(o))->name);
	return 0;
}

static const struct hl_origin_ops backend_ops = {
    .name = "fake",
    .scheme = "fake:",
    .priv_size = sizeof(struct fake),
    .close = fake_close,
    .submit = fake_submit,
    .proof_take = fake_proof_take,
    .identity = fake_identity,
};

/* A wrapper that passes I/O down and defines nothing else. */
static int pass_submit(struct hl_origin *o, struct hl_origin_io *io)
{
	return hl_origin_submit(o->inner, io);
}

static const struct hl_origin_ops pass_ops = {
    .name = "pass",
    .priv_size = sizeof(struct fake),
    .close = fake_close,
    .submit = pass_submit,
};

/* A wrapper with a proof of its own. */
static const struct hl_origin_ops prover_ops = {
    .name = "prover",
    .priv_size = sizeof(struct fake),
    .close = fake_close,
    .submit = pass_submit,
    .proof_take = fake_proof_take,
};

static struct hl_origin *backend(const char *name)
{
	struct hl_origin *o = NULL;

	CU_ASSERT_EQUAL_FATAL(origin_alloc(&backend_ops, "fake:x", &o), 0);
	((struct fake *)hl_origin_priv(o))->name = name;
	o->size = 1 << 20;
	o->phys_block_size = 4096;
	o->read_only = true;
	o->can_discard = true;
	o->zeroes_after_discard = true;
	o->sole_writer = true;
	return o;
}

static struct hl_origin *wrap(struct hl_origin *inner, const struct hl_origin_ops *ops,
                              const char *label, const char *name)
{
	struct hl_origin *o = NULL;

	CU_ASSERT_EQUAL_FATAL(hl_origin_wrap(inner, ops, label, &o), 0);
	((struct fake *)hl_origin_priv(o))->name = name;
	return o;
}

static void test_wrap_carries_geometry_and_flags(void)
{
	struct hl_origin *b = backend("b");
	struct hl_origin *w = wrap(b, &pass_ops, "pass(1)", "w");

	CU_ASSERT_EQUAL(w->size, 1 << 20);
	CU_ASSERT_EQUAL(w->phys_block_size, 4096);
	CU_ASSERT_TRUE(w->read_only);
	CU_ASSERT_TRUE(w->can_discard);
	CU_ASSERT_TRUE(w->zeroes_after_discard);
	CU_ASSERT_TRUE(w->sole_writer);
	CU_ASSERT_PTR_EQUAL(w->inner, b);
	CU_ASSERT_PTR_EQUAL(hl_origin_base(w), b);
	CU_ASSERT_PTR_EQUAL(hl_origin_base(b), b);
	CU_ASSERT_STRING_EQUAL(w->uri, "pass(1):fake:x");
	trail[0] = 0;
	hl_origin_close(w);
	CU_ASSERT_STRING_EQUAL(trail,
	                       "close:w close:b "); /* the wrapper first, then what it wraps */
}

static void test_wrap_refuses_bad_arguments(void)
{
	struct hl_origin *b = backend("b"), *o = NULL;
	static const struct hl_origin_ops no_submit = {.name = "x", .close = fake_close};

	CU_ASSERT_EQUAL(hl_origin_wrap(NULL, &pass_ops, NULL, &o), -EINVAL);
	CU_ASSERT_EQUAL(hl_origin_wrap(b, &no_submit, NULL, &o), -EINVAL);
	CU_ASSERT_PTR_NULL(o);
	CU_ASSERT_PTR_NULL(b->inner);
	trail[0] = 0;
	hl_origin_close(b); /* the caller kept it */
	CU_ASSERT_STRING_EQUAL(trail, "close:b ");
}

static int events;
static uint64_t event_old, event_size;

static void top_listener(void *arg, struct hl_origin *o, enum hl_origin_event ev, uint64_t old)
{
	(void)arg, (void)ev;
	events++;
	event_old = old;
	event_size = o->size;
}

static void test_events_reach_the_top(void)
{
	struct hl_origin *b = backend("b");
	struct hl_origin *w1 = wrap(b, &pass_ops, NULL, "w1");
	struct hl_origin *w2 = wrap(w1, &pass_ops, NULL, "w2");

	events = 0;
	hl_origin_listen(w2, top_listener, NULL);
	hl_origin_notify(b, HL_ORIGIN_RESIZED, 2 << 20);
	CU_ASSERT_EQUAL(events, 1);
	CU_ASSERT_EQUAL(event_old, 1 << 20);
	CU_ASSERT_EQUAL(event_size, 2 << 20);
	CU_ASSERT_EQUAL(w1->size, 2 << 20);
	hl_origin_notify(b, HL_ORIGIN_FENCED, 0);
	CU_ASSERT_EQUAL(events, 2);
	CU_ASSERT_STRING_EQUAL(w2->uri, "fake:x");
	trail[0] = 0;
	hl_origin_close(w2);
	CU_ASSERT_STRING_EQUAL(trail, "close:w2 close:w1 close:b ");
}

static void test_proofs_pass_down_to_the_first_that_has_them(void)
{
	struct hl_origin *b = backend("b");
	struct hl_origin *w1 = wrap(b, &pass_ops, NULL, "w1");
	struct hl_origin *w2 = wrap(w1, &prover_ops, NULL, "w2");
	struct hl_origin *w3 = wrap(w2, &pass_ops, NULL, "w3");
	char buf[64];

	CU_ASSERT_EQUAL(hl_origin_proof_take(w1, "t", false, buf, sizeof(buf)), 0);
	CU_ASSERT_STRING_EQUAL(buf, "proof-of-b");
	CU_ASSERT_EQUAL(hl_origin_proof_take(w3, "t", false, buf, sizeof(buf)), 0);
	CU_ASSERT_STRING_EQUAL(buf, "proof-of-w2");
	CU_ASSERT_EQUAL(hl_origin_identity(w3, buf, sizeof(buf)), 0);
	CU_ASSERT_STRING_EQUAL(buf, "id-b");
	/* nobody in the stack checks proofs: cannot tell, named after the backend */
	CU_ASSERT_EQUAL(hl_origin_proof_check(w3, "t", "proof-of-b", NULL, NULL, buf, sizeof(buf)),
	                -ESTALE);
	CU_ASSERT_STRING_EQUAL(buf, "fake origin cannot prove it unchanged");
	hl_origin_close(w3);
}

static int completions, last_result;

static void io_done(struct hl_origin_io *io, int result)
{
	(void)io;
	completions++;
	last_result = result;
}

static void one(struct hl_origin *o, enum hl_io_op op, uint64_t len)
{
	static uint8_t buf[8192];
	struct iovec iov = {.iov_base = buf, .iov_len = len};
	struct hl_origin_io io = {.op = op, .offset = 0, .length = len, .cb = io_done};

	if (op == HL_IO_READ || op == HL_IO_WRITE) {
		io.iov = &iov;
		io.iovcnt = 1;
	}
	CU_ASSERT_EQUAL(hl_origin_submit(o, &io), 0);
}

static void test_counted_counts(void)
{
	struct hl_origin *b = backend("b"), *o = NULL;
	struct hl_origin_stats *c = NULL;
	struct hl_origin_counters snap;
	uint64_t read_lat = 0;

	b->read_only = false;
	CU_ASSERT_EQUAL_FATAL(hl_origin_count_wrap(b, &o, &c), 0);
	CU_ASSERT_FALSE(o->read_only);
	completions = 0;
	one(o, HL_IO_READ, 4096);
	one(o, HL_IO_READ, 8192);
	one(o, HL_IO_WRITE, 4096);
	one(o, HL_IO_FLUSH, 0);
	((struct fake *)hl_origin_priv(b))->result = -EIO;
	one(o, HL_IO_READ, 4096);
	((struct fake *)hl_origin_priv(b))->result = -EILSEQ; /* a miscompare: not an error */
	one(o, HL_IO_WRITE, 4096);
	CU_ASSERT_EQUAL(completions, 6);
	hl_origin_counters_read(c, &snap);
	CU_ASSERT_EQUAL(snap.read_cmds, 3);
	CU_ASSERT_EQUAL(snap.write_cmds, 2);
	CU_ASSERT_EQUAL(snap.other_cmds, 1);
	CU_ASSERT_EQUAL(snap.read_bytes, 12288); /* the failed read moved nothing */
	CU_ASSERT_EQUAL(snap.write_bytes, 4096);
	CU_ASSERT_EQUAL(snap.errors, 1);
	for (int i = 0; i < HL_ORIGIN_LAT_BUCKETS; i++)
		read_lat += snap.read_lat[i];
	CU_ASSERT_EQUAL(read_lat, 3);
	CU_ASSERT(snap.timed);
	trail[0] = 0;
	hl_origin_close(o);
	CU_ASSERT_STRING_EQUAL(trail, "close:b ");
}

/* Reads are filed under the source the layer below tagged; the split sums to the whole. */
static void test_counted_files_reads_by_source(void)
{
	struct hl_origin *b = backend("b"), *o = NULL;
	struct hl_origin_stats *c = NULL;
	struct hl_origin_counters snap;
	struct fake *f = hl_origin_priv(b);
	uint64_t n[HL_IO_SRC_N] = {0}, all = 0;

	CU_ASSERT_EQUAL_FATAL(hl_origin_count_wrap(b, &o, &c), 0);
	f->source = HL_IO_SRC_HIT;
	one(o, HL_IO_READ, 4096);
	one(o, HL_IO_READ, 4096);
	f->source = HL_IO_SRC_MISS;
	one(o, HL_IO_READ, 4096);
	f->source = HL_IO_SRC_PARTIAL;
	one(o, HL_IO_READ, 4096);
	f->source = HL_IO_SRC_N + 3; /* nonsense: filed as uncached, never out of bounds */
	one(o, HL_IO_READ, 4096);
	one(o, HL_IO_WRITE, 4096);
	hl_origin_counters_read(c, &snap);
	for (int k = 0; k < HL_IO_SRC_N; k++)
		for (int i = 0; i < HL_ORIGIN_LAT_BUCKETS; i++)
			n[k] += snap.read_src_lat[k][i];
	for (int i = 0; i < HL_ORIGIN_LAT_BUCKETS; i++)
		all += snap.read_lat[i];
	CU_ASSERT_EQUAL(n[HL_IO_SRC_HIT], 2);
	CU_ASSERT_EQUAL(n[HL_IO_SRC_MISS], 1);
	CU_ASSERT_EQUAL(n[HL_IO_SRC_PARTIAL], 1);
	CU_ASSERT_EQUAL(n[HL_IO_SRC_UNCACHED], 1);
	CU_ASSERT_EQUAL(all, snap.read_cmds);
	CU_ASSERT_EQUAL(snap.read_ns, snap.read_src_ns[0] + snap.read_src_ns[1] +
	                                  snap.read_src_ns[2] + snap.read_src_ns[3]);
	CU_ASSERT_EQUAL(snap.write_cmds, 1);
	hl_origin_close(o);
}

/* The bucket bounds the exporters print: bucket i holds latency under 2^i microseconds. */
static void test_lat_bucket_bounds(void)
{
	CU_ASSERT_EQUAL(hl_origin_lat_bucket(0), 0);
	CU_ASSERT_EQUAL(hl_origin_lat_bucket(999), 0);
	CU_ASSERT_EQUAL(hl_origin_lat_bucket(1000), 1);
	CU_ASSERT_EQUAL(hl_origin_lat_bucket(1999), 1);
	CU_ASSERT_EQUAL(hl_origin_lat_bucket(2000), 2);
	CU_ASSERT_EQUAL(hl_origin_lat_bucket(255999), 8);
	CU_ASSERT_EQUAL(hl_origin_lat_bucket(256000), 9);
	CU_ASSERT_EQUAL(hl_origin_lat_bucket(UINT64_MAX), HL_ORIGIN_LAT_BUCKETS - 1);
}

static void test_range_list_merges_and_caps(void)
{
	struct hl_range_list l = {0}, capped = {.max = 64};

	hl_range_list_add(&l, 4096, 512);
	hl_range_list_add(&l, 4608, 3584); /* starts where the last ends: one range */
	hl_range_list_add(&l, 0, 0);       /* empty: nothing */
	hl_range_list_add(&l, 0, 4096);    /* before it: a range of its own */
	CU_ASSERT_EQUAL_FATAL(l.n, 2);
	CU_ASSERT_EQUAL(l.v[0].off, 4096);
	CU_ASSERT_EQUAL(l.v[0].len, 4096);
	CU_ASSERT_EQUAL(l.v[1].off, 0);
	CU_ASSERT_EQUAL(l.v[1].len, 4096);
	CU_ASSERT_FALSE(l.over);
	for (uint64_t i = 0; i < 1000; i++) /* grows past its first allocation */
		hl_range_list_add(&l, 1000000 + 2 * i, 1);
	CU_ASSERT_EQUAL(l.n, 1002);
	CU_ASSERT_FALSE(l.over);
	free(l.v);

	for (uint64_t i = 0; i < 64; i++)
		hl_range_list_add(&capped, 2 * i, 1);
	CU_ASSERT_EQUAL(capped.n, 64);
	CU_ASSERT_FALSE(capped.over);
	hl_range_list_add(&capped, 127, 1); /* adjacent to the last: still fits */
	CU_ASSERT_FALSE(capped.over);
	hl_range_list_add(&capped, 1000, 1); /* a 65th range: over, and stays over */
	CU_ASSERT_TRUE(capped.over);
	hl_range_list_add(&capped, 1001, 1);
	CU_ASSERT_EQUAL(capped.n, 64);
	CU_ASSERT_EQUAL(capped.v[63].len, 2);
	free(capped.v);

	/* any max, not only the list's own growth steps: 10 and 100 entries */
	for (unsigned m = 10; m <= 100; m *= 10) {
		struct hl_range_list odd = {.max = m};

		for (uint64_t i = 0; i < m; i++)
			hl_range_list_add(&odd, 2 * i, 1);
		CU_ASSERT_EQUAL(odd.n, m);
		CU_ASSERT_FALSE(odd.over);
		hl_range_list_add(&odd, 10000, 1);
		CU_ASSERT_TRUE(odd.over);
		CU_ASSERT_EQUAL(odd.n, m);
		free(odd.v);
	}
}

static const struct hl_test tests[] = {
    {"a wrapper carries geometry and flags, closes before its inner",
     test_wrap_carries_geometry_and_flags},
    {"bad arguments leave inner with the caller", test_wrap_refuses_bad_arguments},
    {"events reach the top of a stack", test_events_reach_the_top},
    {"proofs and identity pass down to the first layer that has them",
     test_proofs_pass_down_to_the_first_that_has_them},
    {"the counting wrapper counts commands, bytes, errors, latency", test_counted_counts},
    {"the counting wrapper files reads by where their data came from",
     test_counted_files_reads_by_source},
    {"latency bucket i holds what took under 2^i microseconds", test_lat_bucket_bounds},
    {"a changed-range list merges adjacent ranges and says when it overflows",
     test_range_list_merges_and_caps},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("origin_stack", tests);
}
