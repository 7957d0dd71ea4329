/*
 * engine_ut_lib.h - what the cache engine's unit tests share (engine_ut,
 * engine_proof_ut, engine_io_ut, engine_ub_ut, engine_stuck_ut): each is one
 * program that includes this once. The cache engine (src/cache/engine/engine*.c) driven through a real
 * reactor thread: an in-memory fake origin (reads snapshot their data at
 * submit, completions can be held back to build races, failures on demand)
 * in front of a real temp-file cache device opened with O_DIRECT.
 *
 * The .c files are included so tests can reach the cache's insides: swap
 * the data origin for a failing one (device failure) and stop a cache
 * without its clean shutdown (a crash). Every engine*.c of src/cache/engine,
 * so that none of them is also linked from libhotlun; but engine_shadow.c
 * (the warm standby), whose statics share names with this file's: it comes
 * from libhotlun and is driven through its API (hl_cache_shadow_*).
 */
#ifndef HOTLUN_TESTS_ENGINE_UT_LIB_H
#define HOTLUN_TESTS_ENGINE_UT_LIB_H
#include "../../../src/cache/engine/engine.c"
#include "../../../src/cache/engine/engine_map.c"
#include "../../../src/cache/engine/engine_proof.c"
#include "../../../src/cache/engine/engine_meta.c"
#include "../../../src/cache/engine/engine_origin.c"
#include "../../../src/cache/engine/engine_req.c"
#include "../../../src/cache/engine/engine_run.c"
#include "../../../src/cache/engine/engine_read.c"
#include "../../../src/cache/engine/engine_write.c"
#include "../../../src/cache/engine/engine_fill.c"
#include "../../../src/cache/engine/engine_ub.c"

#include "hl_test.h"

/* each program uses part of what is here */
#define HL_UT_UNUSED __attribute__((unused))

#include <dirent.h>
#include <semaphore.h>
#include <sys/stat.h>

#define K 1024ull
#define M (1024ull * 1024)

#define LUN_SIZE (4 * M)
#define BS       (64 * K)

/* ---- reactor thread ---- */

static HL_UT_UNUSED struct hl_reactor *R;

static HL_UT_UNUSED void reactor_up(void)
{
	CU_ASSERT_FATAL(hl_reactor_create(&R, "ut") == 0);
	CU_ASSERT_FATAL(hl_reactor_start(R) == 0);
}

static HL_UT_UNUSED void reactor_down(void)
{
	hl_reactor_stop(R);
	hl_reactor_join(R);
	hl_reactor_destroy(R);
	R = NULL;
}

/* ---- fake origin: memory, optional holds and failures ---- */

struct fake {
	uint8_t *mem;
	uint64_t size;
	int reads, writes;           /* submitted; reactor thread, read when idle */
	uint64_t read_bytes;         /* bytes of the reads submitted; likewise */
	int fail_reads, fail_writes; /* atomics: 1 = -EIO; fail_writes < 0: that -errno */
	/* atomics: failed writes say may_land (a copy still out), and how many are unfenced */
	int may_land, unfenced;
	int hold_reads, hold_writes; /* atomics: keep completions until fake_release() */
	struct hl_origin_io *held[64];
	int nheld;
	/*
	 * Warm restart proofs: "fake:GEN", GEN bumped by every write (ours at
	 * submit, or fake_external()). diff: proof_check reports the ranges
	 * written since, like rbd; else any write since makes it -ESTALE, like
	 * a file. no_proof: proof_take says -EOPNOTSUPP (a block device).
	 */
	uint64_t gen; /* atomic */
	bool diff, no_proof;
	struct {
		uint64_t gen, off, len;
	} wr[256];
	int nwr; /* atomic; writes past 256 make proof_check say -ESTALE */
	/* the owner's hot set a standby reads (fake_hot_ops), NULL: none yet */
	const struct hl_hot_set *hot;
	/* proof_check sets checking (atomic), then takes this long: a slow diff */
	int check_delay_ms, checking;
	/* atomics: proof_take sets taking, then waits while take_hold (a dead origin's call) */
	int take_hold, taking;
	int closes; /* atomic: fake_close calls */
};

static HL_UT_UNUSED void fake_wrote(struct fake *f, uint64_t off, uint64_t len)
{
	uint64_t g = __atomic_add_fetch(&f->gen, 1, __ATOMIC_SEQ_CST);
	int i = __atomic_load_n(&f->nwr, __ATOMIC_SEQ_CST);

	if (i < 256) {
		f->wr[i].gen = g;
		f->wr[i].off = off;
		f->wr[i].len = len;
	}
	__atomic_store_n(&f->nwr, i + 1, __ATOMIC_SEQ_CST);
}

/* Another client writes the origin (while the cache is detached). */
static HL_UT_UNUSED void fake_external(struct fake *f, uint64_t off, uint64_t len, uint8_t val)
{
	memset(f->mem + off, val, len);
	fake_wrote(f, off, len);
}

struct fake_io {
	struct hl_timer t;
	struct fake *f;
	int rc;
};

static HL_UT_UNUSED void fake_finish(struct hl_origin_io *io)
{
	struct fake_io *fio = (struct fake_io *)io->priv;
	struct fake *f = fio->f;
	int rc = fio->rc;

	/* Writes land when they complete; reads copied their data at submit. */
	if (!rc && io->op == HL_IO_WRITE)
		iov_to_buf(io->iov, io->iovcnt, 0, f->mem + io->offset, io->length);
	if (!rc && (io->op == HL_IO_DISCARD || io->op == HL_IO_WRITE_ZEROES))
		memset(f->mem + io->offset, 0, io->length);
	io->cb(io, rc);
}

static HL_UT_UNUSED void fake_fire(struct hl_timer *t)
{
	fake_finish(t->arg);
}

static HL_UT_UNUSED int fake_submit(struct hl_origin *o, struct hl_origin_io *io)
{
	struct fake *f = *(struct fake **)hl_origin_priv(o);
	struct fake_io *fio = (struct fake_io *)io->priv;

	if (io->op == HL_IO_COMPARE_AND_WRITE) {
		/* Compare the first half of the data, write the second half. */
		uint8_t *cmp = malloc(2 * io->length);
		iov_to_buf(io->iov, io->iovcnt, 0, cmp, 2 * io->length);
		fio->f = f;
		fio->rc = memcmp(cmp, f->mem + io->offset, io->length) ? -EILSEQ : 0;
		if (!fio->rc)
			memcpy(f->mem + io->offset, cmp + io->length, io->length);
		io->miscompare_offset = 0;
		free(cmp);
		f->writes++;
		fake_wrote(f, io->offset, io->length);
		hl_timer_init(&fio->t, fake_fire, io);
		hl_timer_start(hl_reactor_current(), &fio->t, 0);
		return 0;
	}
	if (io->op > HL_IO_WRITE_ZEROES)
		return -EINVAL;
	if (io->op != HL_IO_FLUSH && (io->offset > f->size || io->length > f->size - io->offset))
		return -EINVAL;
	fio->f = f;
	fio->rc = 0;
	if (io->op == HL_IO_READ) {
		f->reads++;
		f->read_bytes += io->length;
		if (__atomic_load_n(&f->fail_reads, __ATOMIC_RELAXED))
			fio->rc = -EIO;
		else
			buf_to_iov(io->iov, io->iovcnt, 0, f->mem + io->offset, io->length);
	} else if (io->op == HL_IO_WRITE || io->op == HL_IO_DISCARD ||
	           io->op == HL_IO_WRITE_ZEROES) {
		f->writes++;
		fake_wrote(f, io->offset, io->length);
		int fw = __atomic_load_n(&f->fail_writes, __ATOMIC_RELAXED);
		if (fw)
			fio->rc = fw < 0 ? fw : -EIO;
		io->may_land = fw && __atomic_load_n(&f->may_land, __ATOMIC_SEQ_CST);
	}
	if ((io->op == HL_IO_READ && __atomic_load_n(&f->hold_reads, __ATOMIC_RELAXED)) ||
	    (io->op == HL_IO_WRITE && __atomic_load_n(&f->hold_writes, __ATOMIC_RELAXED))) {
		f->held[f->nheld++] = io;
		return 0;
	}
	hl_timer_init(&fio->t, fake_fire, io);
	hl_timer_start(hl_reactor_current(), &fio->t, 0);
	return 0;
}

static HL_UT_UNUSED uint64_t fake_unfenced(struct hl_origin *o)
{
	struct fake *f = *(struct fake **)hl_origin_priv(o);

	return (uint64_t)__atomic_load_n(&f->unfenced, __ATOMIC_SEQ_CST);
}

static HL_UT_UNUSED void fake_close(struct hl_origin *o)
{
	struct fake *f = *(struct fake **)hl_origin_priv(o);

	/* the test owns struct fake; counted only */
	__atomic_add_fetch(&f->closes, 1, __ATOMIC_SEQ_CST);
}

static HL_UT_UNUSED int fake_open(struct hl_origin *o, const char *t, const struct hl_origin_opts *op)
{
	(void)o, (void)t, (void)op;
	return -EOPNOTSUPP;
}

static HL_UT_UNUSED int fake_proof_take(struct hl_origin *o, const char *tag, bool final, char *proof,
                           size_t len)
{
	struct fake *f = *(struct fake **)hl_origin_priv(o);

	(void)tag, (void)final;
	if (__atomic_load_n(&f->take_hold, __ATOMIC_SEQ_CST)) {
		__atomic_store_n(&f->taking, 1, __ATOMIC_SEQ_CST);
		while (__atomic_load_n(&f->take_hold, __ATOMIC_SEQ_CST))
			usleep(1000);
		/* back from the call, its origin's state again (ASan: freed under it?) */
		f = *(struct fake **)hl_origin_priv(o);
	}
	if (f->no_proof)
		return -EOPNOTSUPP;
	snprintf(proof, len, "fake:%llu",
	         (unsigned long long)__atomic_load_n(&f->gen, __ATOMIC_SEQ_CST));
	return 0;
}

static HL_UT_UNUSED int fake_proof_check(struct hl_origin *o, const char *tag, const char *proof,
                            hl_origin_changed_fn changed, void *arg, char *why, size_t whylen)
{
	struct fake *f = *(struct fake **)hl_origin_priv(o);
	unsigned long long g;

	(void)tag;
	if (f->check_delay_ms) {
		__atomic_store_n(&f->checking, 1, __ATOMIC_SEQ_CST);
		usleep((useconds_t)f->check_delay_ms * 1000);
	}
	if (sscanf(proof, "fake:%llu", &g) != 1) {
		snprintf(why, whylen, "not a fake proof");
		return -ESTALE;
	}
	if (g == f->gen) {
		snprintf(why, whylen, "fake unchanged");
		return 0;
	}
	if (!f->diff || f->nwr > 256) {
		snprintf(why, whylen, "fake changed");
		return -ESTALE;
	}
	for (int i = 0; i < f->nwr; i++)
		if (f->wr[i].gen > g)
			changed(arg, f->wr[i].off, f->wr[i].len);
	snprintf(why, whylen, "fake diff");
	return 0;
}

/* The ops every fake origin has (fake_ops; fake_hot_ops adds the owner's hot set). */
#define FAKE_OPS                                                                               \
	.name = "fake", .priv_size = sizeof(void *), .open = fake_open, .close = fake_close,      \
	.submit = fake_submit, .proof_take = fake_proof_take, .proof_check = fake_proof_check,  \
	.unfenced = fake_unfenced

static HL_UT_UNUSED const struct hl_origin_ops fake_ops = {FAKE_OPS};

/* The owner's side of a shared disk (rbd with gateways): its hot set, made by the test. */
static HL_UT_UNUSED int fake_hot_publish(struct hl_origin *o, uint32_t block_size, const struct hl_hot_ent *v,
                            uint32_t n)
{
	(void)o, (void)block_size, (void)v, (void)n;
	return -EAGAIN; /* never ours in these tests */
}

static HL_UT_UNUSED int fake_hot_fetch(struct hl_origin *o, struct hl_hot_set *out)
{
	struct fake *f = *(struct fake **)hl_origin_priv(o);
	const struct hl_hot_set *h = f->hot;

	if (!h)
		return -ENOENT;
	*out = *h;
	out->v = malloc((h->n ? h->n : 1) * sizeof(*out->v));
	out->chg = malloc((h->nchg ? h->nchg : 1) * sizeof(*out->chg));
	if (!out->v || !out->chg) {
		free(out->v);
		free(out->chg);
		return -ENOMEM;
	}
	if (h->n)
		memcpy(out->v, h->v, h->n * sizeof(*out->v));
	if (h->nchg) /* (h->chg may be NULL then: memcpy's source must not be) */
		memcpy(out->chg, h->chg, h->nchg * sizeof(*out->chg));
	return 0;
}

static HL_UT_UNUSED const struct hl_origin_ops fake_hot_ops = {
    FAKE_OPS,
    .hot_publish = fake_hot_publish,
    .hot_fetch = fake_hot_fetch,
};

/* [disk] exclusive = yes for the fake origins made from now on */
static HL_UT_UNUSED bool g_sole_writer;

static HL_UT_UNUSED struct hl_origin *fake_origin(struct fake *f, const char *uri)
{
	struct hl_origin *o = calloc(1, sizeof(*o) + sizeof(void *));

	o->ops = &fake_ops;
	o->uri = strdup(uri);
	o->size = f->size;
	o->can_discard = true;
	o->sole_writer = g_sole_writer;
	*(struct fake **)hl_origin_priv(o) = f;
	return o;
}

/* fake_origin() with an owner's hot set: f->hot (a shared disk's origin, like rbd). */
static HL_UT_UNUSED struct hl_origin *fake_hot_origin(struct fake *f, const char *uri)
{
	struct hl_origin *o = fake_origin(f, uri);

	o->ops = &fake_hot_ops;
	return o;
}

static HL_UT_UNUSED void fake_init(struct fake *f, uint64_t size, uint8_t seed)
{
	memset(f, 0, sizeof(*f));
	f->size = size;
	f->mem = malloc(size);
	for (uint64_t i = 0; i < size; i++)
		f->mem[i] = (uint8_t)((i * 131 + (i >> 12) * 7 + seed) | 1);
}

static HL_UT_UNUSED void fake_release_fn(void *arg)
{
	struct fake *f = arg;
	int n = f->nheld;

	f->nheld = 0;
	for (int i = 0; i < n; i++) {
		struct fake_io *fio = (struct fake_io *)f->held[i]->priv;
		hl_timer_init(&fio->t, fake_fire, f->held[i]);
		hl_timer_start(hl_reactor_current(), &fio->t, 0);
	}
}

/* ---- one I/O through an origin, from the test thread ---- */

struct step {
	struct hl_origin *o;
	struct hl_origin_io io;
	struct iovec iov[2];
	sem_t sem;
	int rc;
};

static HL_UT_UNUSED void step_cb(struct hl_origin_io *io, int result)
{
	struct step *st = io->arg;

	st->rc = result;
	sem_post(&st->sem);
}

static HL_UT_UNUSED void step_submit(void *arg)
{
	struct step *st = arg;
	int rc = hl_origin_submit(st->o, &st->io);

	if (rc) {
		st->rc = rc;
		sem_post(&st->sem);
	}
}

/* Start op on o; the buffer is split in two iovecs to exercise the copies. */
static HL_UT_UNUSED void io_start(struct step *st, struct hl_origin *o, enum hl_io_op op, uint64_t off,
                     uint64_t len, void *buf)
{
	memset(st, 0, sizeof(*st));
	sem_init(&st->sem, 0, 0);
	st->o = o;
	st->io.op = op;
	st->io.offset = off;
	st->io.length = len;
	if (buf && len) {
		size_t total = (size_t)len * (op == HL_IO_COMPARE_AND_WRITE ? 2 : 1);
		size_t h = total / 3;
		st->iov[0] = (struct iovec){buf, h};
		st->iov[1] = (struct iovec){(uint8_t *)buf + h, total - h};
		st->io.iov = st->iov;
		st->io.iovcnt = 2;
	}
	st->io.cb = step_cb;
	st->io.arg = st;
	st->rc = 12345;
	CU_ASSERT_FATAL(hl_reactor_call(R, step_submit, st) == 0);
}

/* Wait at most ms for st (io_start) to end: its result, or -ETIMEDOUT (st still out). */
static HL_UT_UNUSED int io_wait_within(struct step *st, unsigned ms)
{
	uint64_t end = hl_now_ns() + (uint64_t)ms * 1000000u;

	while (sem_trywait(&st->sem)) {
		if (hl_now_ns() >= end)
			return -ETIMEDOUT;
		usleep(1000);
	}
	sem_destroy(&st->sem);
	return st->rc;
}

static HL_UT_UNUSED int io_wait(struct step *st)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 10;
	if (sem_timedwait(&st->sem, &ts))
		return -ETIMEDOUT;
	sem_destroy(&st->sem);
	return st->rc;
}

static HL_UT_UNUSED int do_io(struct hl_origin *o, enum hl_io_op op, uint64_t off, uint64_t len, void *buf)
{
	struct step st;

	io_start(&st, o, op, off, len, buf);
	return io_wait(&st);
}

/* do_io for a READ that also says where its data came from (hl_origin_io.source). */
static HL_UT_UNUSED int do_read_src(struct hl_origin *o, uint64_t off, uint64_t len, void *buf, uint8_t *src)
{
	struct step st;
	int rc;

	io_start(&st, o, HL_IO_READ, off, len, buf);
	rc = io_wait(&st);
	*src = st.io.source;
	return rc;
}

/* Wait until the cache has no request left (fills done), or until `left` remain. */
static HL_UT_UNUSED bool wait_inflight(struct hl_cache *c, long left)
{
	for (int i = 0; i < 5000; i++) {
		if (atomic_load(&c->inflight) == left)
			return true;
		usleep(1000);
	}
	return false;
}

/*
 * Wait until a metadata flush took its snapshot after every change made so
 * far (the metadata thread stores `synced` after the flush it snapshotted
 * at that count). Waited for, never assumed after a fixed sleep: on a busy
 * machine the thread runs late.
 */
static HL_UT_UNUSED bool wait_synced(struct hl_cache *c)
{
	unsigned long changes = atomic_load(&c->changes);

	for (int i = 0; i < 3000; i++) {
		if (atomic_load(&c->synced) >= changes)
			return true;
		usleep(10 * 1000);
	}
	return false;
}

static HL_UT_UNUSED void release_held(struct fake *f)
{
	CU_ASSERT_FATAL(hl_reactor_call(R, fake_release_fn, f) == 0);
}

struct finish_call {
	struct hl_origin_io *io;
	sem_t sem;
};

static HL_UT_UNUSED void finish_held_fn(void *arg)
{
	struct finish_call *d = arg;

	fake_finish(d->io);
	sem_post(&d->sem);
}

/*
 * The fake ends one held io now, on the reactor (a write lands unless it
 * fails): held ios answered in the order the test picks. Back once done.
 */
static HL_UT_UNUSED void finish_held(struct hl_origin_io *io)
{
	struct finish_call d = {.io = io};

	sem_init(&d.sem, 0, 0);
	CU_ASSERT_FATAL(hl_reactor_call(R, finish_held_fn, &d) == 0);
	sem_wait(&d.sem);
	sem_destroy(&d.sem);
}

/* ---- fixture ---- */

static HL_UT_UNUSED char g_dev[64];
static HL_UT_UNUSED char g_map[80];

static HL_UT_UNUSED void dev_name(void)
{
	int fd;

	strcpy(g_dev, "/tmp/hl-engine-ut-XXXXXX");
	fd = mkstemp(g_dev);
	CU_ASSERT_FATAL(fd >= 0);
	close(fd);
	unlink(g_dev); /* hl_cache_open creates it */
	snprintf(g_map, sizeof(g_map), "%s.map", g_dev);
}

static HL_UT_UNUSED void dev_remove(void)
{
	unlink(g_dev);
	unlink(g_map);
}

/* update_buffer of the caches cache_open() opens (0: the default, 16 MiB). */
static HL_UT_UNUSED uint64_t g_ub;
/* cache_open() returns while the records are still being restored. */
static HL_UT_UNUSED bool g_lazy;

/* The fixture's cache on g_dev: every miss admitted, records flushed every 50 ms. */
static HL_UT_UNUSED struct hl_cache_config fixture_config(void)
{
	return (struct hl_cache_config){
	    .name = "ut",
	    .device = g_dev,
	    .size = 8 * M,
	    .block_size = BS,
	    .admission = "always",
	    .meta_interval_ms = 50,
	};
}

static HL_UT_UNUSED struct hl_cache *cache_open(const char *policy)
{
	struct hl_cache_config cfg = fixture_config();
	struct hl_cache *c = NULL;

	cfg.update_buffer = g_ub;
	cfg.write_policy = policy;
	CU_ASSERT_FATAL(hl_cache_open(&cfg, &c) == 0);
	if (!g_lazy)
		hl_cache_restore_wait(c); /* these tests attach once every record is back */
	return c;
}

static HL_UT_UNUSED struct hl_origin *attach(struct hl_cache *c, struct fake *f, const char *uri)
{
	struct hl_origin *o = NULL;

	CU_ASSERT_FATAL(hl_cache_attach(c, "disk0", 0, fake_origin(f, uri), &o) == 0);
	return o;
}

/* Start the reactor, open the cache on g_dev and attach f as disk0 (its origin URI uri). */
static HL_UT_UNUSED struct hl_origin *cache_up(struct hl_cache **c, const char *policy, struct fake *f,
                                  const char *uri)
{
	reactor_up();
	*c = cache_open(policy);
	return attach(*c, f, uri);
}

/* Stop the reactor, then close the disk and the cache cleanly. */
static HL_UT_UNUSED void cache_down(struct hl_cache *c, struct hl_origin *o)
{
	reactor_down();
	hl_origin_close(o);
	hl_cache_close(c);
}

/* A test's start: a new device name, f filled from seed (LUN_SIZE), then cache_up(). */
static HL_UT_UNUSED struct hl_origin *fixture_up(struct hl_cache **c, const char *policy, struct fake *f,
                                    uint8_t seed, const char *uri)
{
	dev_name();
	fake_init(f, LUN_SIZE, seed);
	return cache_up(c, policy, f, uri);
}

/*
 * fixture_up() of "fake:a" whose fills go to the cache device (no update
 * buffer: the caller restores g_ub) and whose device writes are held
 * delay_ms (HOTLUN_TEST_CACHE_DEV_WRITE_DELAY_MS, read at open).
 */
static HL_UT_UNUSED struct hl_origin *held_fixture_up(struct hl_cache **c, struct fake *f, uint8_t seed,
                                         const char *delay_ms)
{
	struct hl_origin *o;

	g_ub = HL_CACHE_UPDATE_BUFFER_OFF;
	setenv("HOTLUN_TEST_CACHE_DEV_WRITE_DELAY_MS", delay_ms, 1);
	o = fixture_up(c, NULL, f, seed, "fake:a");
	unsetenv("HOTLUN_TEST_CACHE_DEV_WRITE_DELAY_MS");
	return o;
}

/* A test's end: cache_down(), then the device, its map and f's memory go. */
static HL_UT_UNUSED void fixture_down(struct hl_cache *c, struct hl_origin *o, struct fake *f)
{
	cache_down(c, o);
	dev_remove();
	free(f->mem);
}

/*
 * Swap the cache's data origin for a fake d holding a copy of the device's
 * bytes (it counts and can hold the reads); returns the real one, which
 * dev_restore puts back.
 */
static HL_UT_UNUSED struct hl_origin *dev_copy_swap(struct hl_cache *c, struct fake *d)
{
	struct hl_origin *real = c->data;
	struct stat sb;
	int fd;

	CU_ASSERT_FATAL(stat(g_dev, &sb) == 0);
	fake_init(d, (uint64_t)sb.st_size, 0);
	fd = open(g_dev, O_RDONLY);
	CU_ASSERT_FATAL(fd >= 0);
	CU_ASSERT_FATAL(pread(fd, d->mem, d->size, 0) == (ssize_t)d->size);
	close(fd);
	c->data = fake_origin(d, "fake:dev-copy");
	return real;
}

/* Put the cache's real data origin back in place of the fake device d (closed, its memory freed). */
static HL_UT_UNUSED void dev_restore(struct hl_cache *c, struct hl_origin *real, struct fake *d)
{
	hl_origin_close(c->data);
	c->data = real;
	free(d->mem);
}

/* The end of a test that swapped in a device copy (dev_copy_swap): all of its fixture goes. */
static HL_UT_UNUSED void dev_copy_down(struct hl_cache *c, struct hl_origin *o, struct hl_origin *real,
                          struct fake *dev, struct fake *f)
{
	CU_ASSERT(wait_inflight(c, 0));
	reactor_down();
	hl_origin_close(o);
	dev_restore(c, real, dev);
	hl_cache_close(c);
	dev_remove();
	free(f->mem);
}

static HL_UT_UNUSED void stats(struct hl_cache *c, struct hl_cache_engine_stats *st)
{
	CU_ASSERT_FATAL(hl_cache_get_stats(c, "disk0", st) == 0);
}

/* A crash: the metadata thread stops, nothing is flushed or marked clean. */
static HL_UT_UNUSED void cache_crash(struct hl_cache *c)
{
	pthread_mutex_lock(&c->mlock);
	c->mstop = true;
	pthread_cond_signal(&c->mcond);
	pthread_mutex_unlock(&c->mlock);
	pthread_join(c->meta_thr, NULL);
	c->meta_started = false;
	cache_free(c);
}

/* ---- shared by more than one of the engine programs ---- */

/* Does the map file hold `needle`? */
static HL_UT_UNUSED bool map_holds(const char *needle)
{
	char text[8192] = "";
	FILE *m = fopen(g_map, "r");
	size_t n;

	CU_ASSERT_FATAL(m != NULL);
	n = fread(text, 1, sizeof(text) - 1, m);
	text[n] = '\0';
	fclose(m);
	return strstr(text, needle) != NULL;
}

/* Counters of disk0 that the stitching tests compare. */
struct snap {
	uint64_t cache, origin, partial, hits, retries;
	int reads;
	uint64_t read_bytes;
};

static HL_UT_UNUSED void snap(struct hl_cache *c, struct fake *f, struct snap *s)
{
	struct hl_cache_engine_stats st;

	stats(c, &st);
	s->cache = st.core.bytes_read_cache;
	s->origin = st.core.bytes_read_origin;
	s->partial = st.core.read_partial;
	s->hits = st.core.read_hits;
	s->retries = st.hit_retries;
	s->reads = f->reads;
	s->read_bytes = f->read_bytes;
}

/* Until disk i of c has a recorded proof (the metadata thread's, 50 ms ticks). */
static HL_UT_UNUSED bool wait_proof(struct hl_cache *c, size_t i)
{
	for (int n = 0; n < 300; n++) {
		pthread_mutex_lock(&c->sync_lock);
		bool ok = c->ents[i]->proof != NULL;
		pthread_mutex_unlock(&c->sync_lock);
		if (ok)
			return true;
		usleep(10 * 1000);
	}
	return false;
}

/* Warm blocks 0..7 through a fresh cache on f, stop cleanly. */
static HL_UT_UNUSED void proof_warm(struct fake *f, uint8_t seed, const char *uri)
{
	struct hl_cache *c;
	struct hl_origin *o;
	uint8_t *buf = malloc(8 * BS);

	o = fixture_up(&c, NULL, f, seed, uri);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, 8 * BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	cache_down(c, o);
	free(buf);
}

/* Start again on f, read blocks 0..7: they must equal f; returns the stats of disk0. */
static HL_UT_UNUSED void proof_restart(struct fake *f, const char *uri, struct hl_cache_engine_stats *st)
{
	struct hl_cache *c;
	struct hl_origin *o;
	uint8_t *buf = malloc(8 * BS);

	o = cache_up(&c, NULL, f, uri);
	memset(buf, 0, 8 * BS);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, 8 * BS, buf), 0);
	CU_ASSERT(memcmp(buf, f->mem, 8 * BS) == 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT_EQUAL(hl_cache_get_stats(c, "disk0", st), 0);
	cache_down(c, o);
	free(buf);
}

/*
 * Disks A and B of a new cache over fakes fa and fb (seeds seed and seed +
 * 1, with diffs; a hot set's origin where hot_a / hot_b), their first nread
 * blocks read and proven. @return the cache.
 */
static HL_UT_UNUSED struct hl_cache *two_proven(struct fake *fa, struct fake *fb, uint8_t seed, bool hot_a,
                                   bool hot_b, uint64_t nread, uint8_t *buf,
                                   struct hl_origin **oa, struct hl_origin **ob)
{
	struct hl_cache *c;

	dev_name();
	fake_init(fa, LUN_SIZE, seed);
	fake_init(fb, LUN_SIZE, (uint8_t)(seed + 1));
	fa->diff = fb->diff = true;
	reactor_up();
	c = cache_open(NULL);
	CU_ASSERT_FATAL(hl_cache_attach(c, "diskA", 0,
	                                hot_a ? fake_hot_origin(fa, "fake:a") : fake_origin(fa, "fake:a"),
	                                oa) == 0);
	CU_ASSERT_FATAL(hl_cache_attach(c, "diskB", 0,
	                                hot_b ? fake_hot_origin(fb, "fake:b") : fake_origin(fb, "fake:b"),
	                                ob) == 0);
	for (uint64_t b = 0; b < nread; b++) {
		CU_ASSERT_EQUAL(do_io(*oa, HL_IO_READ, b * BS, BS, buf), 0);
		CU_ASSERT_EQUAL(do_io(*ob, HL_IO_READ, b * BS, BS, buf), 0);
	}
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT_FATAL(wait_proof(c, 0) && wait_proof(c, 1));
	return c;
}

/*
 * A disk with no proof of its own (a block device) on a gateway that is its
 * sole writer (exclusive = yes: the size is the only proof), under uri, its
 * blocks 0..7 read and the proof recorded. @return the cached origin, *c the cache.
 */
static HL_UT_UNUSED struct hl_origin *proven_disk(struct hl_cache **c, struct fake *f, uint8_t seed,
                                                  const char *uri, uint8_t *buf)
{
	struct hl_origin *o;

	dev_name();
	fake_init(f, LUN_SIZE, seed);
	f->no_proof = true;
	g_sole_writer = true;
	o = cache_up(c, NULL, f, uri);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, 8 * BS, buf), 0);
	CU_ASSERT(wait_inflight(*c, 0));
	CU_ASSERT_FATAL(wait_proof(*c, 0));
	return o;
}

/*
 * A's owner (another gateway) writes 4 KiB at off, marks and publishes hs
 * with a prev that is not A's proof, so A diffs itself, its check taking
 * delay_ms. Returns once A's diff runs.
 */
static HL_UT_UNUSED void peer_publishes(struct hl_origin *oa, struct fake *fa, struct hl_hot_set *hs,
                                        uint64_t off, unsigned delay_ms)
{
	fake_external(fa, off, 4 * K, 0x5a);
	snprintf(hs->mark, sizeof(hs->mark), "fake:%llu",
	         (unsigned long long)__atomic_load_n(&fa->gen, __ATOMIC_SEQ_CST));
	snprintf(hs->prev, sizeof(hs->prev), "fake:999");
	fa->check_delay_ms = delay_ms;
	fa->hot = hs;
	CU_ASSERT_EQUAL_FATAL(hl_cache_shadow_config(oa, 64 * M), 0);
	for (int i = 0; i < 300 && !__atomic_load_n(&fa->checking, __ATOMIC_SEQ_CST); i++)
		usleep(10 * 1000);
	CU_ASSERT_FATAL(__atomic_load_n(&fa->checking, __ATOMIC_SEQ_CST));
}

/* The end of a test of two fake disks on one cache: everything it opened goes. */
static HL_UT_UNUSED void two_disks_close(struct hl_cache *c, struct hl_origin *oa, struct hl_origin *ob,
                            struct fake *fa, struct fake *fb)
{
	reactor_down();
	hl_origin_close(oa);
	hl_origin_close(ob);
	hl_cache_close(c);
	dev_remove();
	free(fa->mem);
	free(fb->mem);
}

static HL_UT_UNUSED void write_then_read(const char *policy, bool expect_cache)
{
	struct fake f;
	struct hl_cache *c;
	struct hl_origin *o;
	struct hl_cache_engine_stats st;
	uint8_t *buf = malloc(BS), *w = malloc(8 * K);

	o = fixture_up(&c, policy, &f, 3, "fake:c");

	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 5 * BS, BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	memset(w, 0xab, 8 * K);
	/* 4K-aligned 8K write into the cached block, and a 512-byte one (partial sectors). */
	CU_ASSERT_EQUAL(do_io(o, HL_IO_WRITE, 5 * BS + 12 * K, 8 * K, w), 0);
	CU_ASSERT(memcmp(f.mem + 5 * BS + 12 * K, w, 8 * K) == 0); /* at the origin */
	CU_ASSERT(wait_inflight(c, 0)); /* else the next write races this update (dropped) */
	memset(w, 0xcd, 512);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_WRITE, 5 * BS + 40 * K + 512, 512, w), 0);
	CU_ASSERT(wait_inflight(c, 0));
	if (expect_cache) {
		uint8_t v[32];
		hl_cache_core_peek(c->core, c->ents[0]->id, 5, v);
		CU_ASSERT_EQUAL(v[0], 0xff);
		CU_ASSERT_EQUAL(v[1], 0xff); /* sector 10 (40K..44K) partly written: merged */
	}
	int reads = f.reads;
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 5 * BS, BS, buf), 0);
	CU_ASSERT(memcmp(buf, f.mem + 5 * BS, BS) == 0);
	CU_ASSERT(buf[12 * K] == 0xab && buf[40 * K + 512] == 0xcd);
	stats(c, &st);
	if (expect_cache) {
		/*
		 * Every sector is valid, the partly written one by read-modify-
		 * write: the whole read comes from the cache device.
		 */
		CU_ASSERT(st.core.write_updates >= 2);
		CU_ASSERT_EQUAL(st.core.bytes_read_cache, BS);
		CU_ASSERT_EQUAL(f.reads, reads);

	} else {
		CU_ASSERT(f.reads > reads);
	}
	CU_ASSERT(wait_inflight(c, 0));

	fixture_down(c, o, &f);
	free(buf);
	free(w);
}

static HL_UT_UNUSED void test_write_update(void)
{
	write_then_read("update", true);
}

/*
 * Misaligned writes (sector-63 guests: 3584 bytes past a 4K boundary) keep
 * a cached block whole by read-modify-write, and the merged sectors hold
 * exactly what the origin holds.
 */
static HL_UT_UNUSED void test_rmw_misaligned(void)
{
	struct fake f;
	struct hl_cache *c;
	struct hl_origin *o;
	struct snap a, b;
	uint8_t *buf = malloc(BS), *w = malloc(16 * K), v[32];

	o = fixture_up(&c, NULL, &f, 12, "fake:rmw");
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 7 * BS, BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));

	for (int i = 0; i < 16 * (int)K; i++)
		w[i] = (uint8_t)(i * 7 + 3);
	/* 4K at 3584: partly sectors 0 and 1; 8K + 512 at 20K + 3584: 5 and 8 partly. */
	CU_ASSERT_EQUAL(do_io(o, HL_IO_WRITE, 7 * BS + 3584, 4 * K, w), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT_EQUAL(do_io(o, HL_IO_WRITE, 7 * BS + 20 * K + 3584, 8 * K + 512, w + 100), 0);
	CU_ASSERT(wait_inflight(c, 0));
	/* A 512-byte write inside one sector. */
	CU_ASSERT_EQUAL(do_io(o, HL_IO_WRITE, 7 * BS + 50 * K + 1024, 512, w + 7), 0);
	CU_ASSERT(wait_inflight(c, 0));
	hl_cache_core_peek(c->core, c->ents[0]->id, 7, v);
	CU_ASSERT(v[0] == 0xff && v[1] == 0xff);
	snap(c, &f, &a);
	memset(buf, 0, BS);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 7 * BS, BS, buf), 0);
	CU_ASSERT(memcmp(buf, f.mem + 7 * BS, BS) == 0);
	CU_ASSERT(memcmp(buf + 3584, w, 4 * K) == 0);
	snap(c, &f, &b);
	CU_ASSERT_EQUAL(b.reads, a.reads); /* served by the cache device */
	CU_ASSERT_EQUAL(b.hits - a.hits, 1);

	/* A misaligned write to a sector that is not valid leaves it invalid (no fill). */
	CU_ASSERT_EQUAL(do_io(o, HL_IO_WRITE, 9 * BS + 512, 512, w), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT_EQUAL(hl_cache_core_peek(c->core, c->ents[0]->id, 9, NULL), HL_CACHE_NO_SLOT);

	CU_ASSERT(wait_inflight(c, 0));
	fixture_down(c, o, &f);
	free(buf);
	free(w);
}

/*
 * Raced misaligned writes to one sector never leave a stale merge: two in
 * flight together (the earlier update is dropped, and the later one finds
 * the sector invalid), and many pairs that overlap in time with their
 * updates' device I/O. After each, a read returns what the origin holds.
 */
static HL_UT_UNUSED void test_rmw_race(void)
{
	struct fake f;
	struct hl_cache *c;
	struct hl_origin *o;
	struct step s1, s2, r;
	uint8_t *buf = malloc(BS), *w1 = malloc(4 * K), *w2 = malloc(4 * K);

	o = fixture_up(&c, NULL, &f, 13, "fake:race");
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 2 * BS, BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));

	memset(w1, 0x11, 4 * K);
	memset(w2, 0x22, 4 * K);
	__atomic_store_n(&f.hold_writes, 1, __ATOMIC_RELAXED);
	io_start(&s1, o, HL_IO_WRITE, 2 * BS + 3584, 1024, w1);
	io_start(&s2, o, HL_IO_WRITE, 2 * BS + 3072, 1024, w2);
	for (int i = 0; i < 1000 && __atomic_load_n(&f.nheld, __ATOMIC_ACQUIRE) < 2; i++)
		usleep(1000);
	__atomic_store_n(&f.hold_writes, 0, __ATOMIC_RELAXED);
	release_held(&f);
	CU_ASSERT_EQUAL(io_wait(&s1), 0);
	CU_ASSERT_EQUAL(io_wait(&s2), 0);
	CU_ASSERT(wait_inflight(c, 0));
	memset(buf, 0, BS);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 2 * BS, BS, buf), 0);
	CU_ASSERT(memcmp(buf, f.mem + 2 * BS, BS) == 0);
	CU_ASSERT(wait_inflight(c, 0));

	/* Pairs without holds, with a read in between: the updates' RMW races the next write. */
	for (int i = 0; i < 200; i++) {
		uint64_t at = 2 * BS + (uint64_t)(i % 16) * 4 * K + 512 * (uint64_t)(i % 7 + 1);
		memset(w1, (uint8_t)(2 * i + 1), 4 * K);
		memset(w2, (uint8_t)(2 * i + 2), 4 * K);
		io_start(&s1, o, HL_IO_WRITE, at, 4 * K - 512, w1);
		io_start(&r, o, HL_IO_READ, 2 * BS, BS, buf);
		io_start(&s2, o, HL_IO_WRITE, at + 1024, 4 * K, w2);
		CU_ASSERT_EQUAL(io_wait(&s1), 0);
		CU_ASSERT_EQUAL(io_wait(&r), 0);
		CU_ASSERT_EQUAL(io_wait(&s2), 0);
		if (i % 3 == 0)
			CU_ASSERT(wait_inflight(c, 0));
		CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 2 * BS, BS, buf), 0);
		if (memcmp(buf, f.mem + 2 * BS, BS)) {
			CU_FAIL("stale data after a raced pair");
			break;
		}
	}
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 2 * BS, BS, buf), 0);
	CU_ASSERT(memcmp(buf, f.mem + 2 * BS, BS) == 0);
	CU_ASSERT(wait_inflight(c, 0)); /* its fill too: nothing in flight at the close */

	fixture_down(c, o, &f);
	free(buf);
	free(w1);
	free(w2);
}

/* Whether someone keeps c->sync_lock 100 ms in a row (looked at for 3 s at most). */
static HL_UT_UNUSED bool sync_lock_kept(struct hl_cache *c)
{
	int held = 0;

	for (int i = 0; i < 3000 && held < 100; i++) {
		if (pthread_mutex_trylock(&c->sync_lock) == 0) {
			pthread_mutex_unlock(&c->sync_lock);
			held = 0;
		} else {
			held++;
		}
		usleep(1000);
	}
	return held >= 100;
}

/*
 * An engine call on a thread of its own, so that a test outlives a hang
 * and bounds it: bg_start runs fn(b) there, bg_within waits for its end.
 * The fields are fn's arguments and result, as each test uses them.
 */
struct bg_call {
	void (*fn)(struct bg_call *b);
	struct hl_cache *c;
	struct hl_origin *o, *inner, *out;
	const char *disk;
	int rc;
	int done; /* atomic */
	pthread_t t;
};

static void *bg_main(void *arg)
{
	struct bg_call *b = arg;

	b->fn(b);
	__atomic_store_n(&b->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

static HL_UT_UNUSED void bg_start(struct bg_call *b, void (*fn)(struct bg_call *b))
{
	b->fn = fn;
	__atomic_store_n(&b->done, 0, __ATOMIC_SEQ_CST);
	CU_ASSERT_FATAL(pthread_create(&b->t, NULL, bg_main, b) == 0);
}

/* Wait at most ms for b to end. @return whether it did; *ms_out: the ms waited. */
static HL_UT_UNUSED bool bg_within(struct bg_call *b, unsigned ms, uint64_t *ms_out)
{
	uint64_t t0 = hl_now_ns();

	while (!__atomic_load_n(&b->done, __ATOMIC_SEQ_CST) &&
	       hl_now_ns() - t0 < (uint64_t)ms * 1000000u)
		usleep(1000);
	if (ms_out)
		*ms_out = (hl_now_ns() - t0) / 1000000u;
	return __atomic_load_n(&b->done, __ATOMIC_SEQ_CST);
}

static HL_UT_UNUSED void bg_join(struct bg_call *b)
{
	pthread_join(b->t, NULL);
}

/* bg_start's common calls: closing the cache, closing the cached origin */
static HL_UT_UNUSED void bg_cache_close(struct bg_call *b)
{
	hl_cache_close(b->c);
}

static HL_UT_UNUSED void bg_origin_close(struct bg_call *b)
{
	hl_origin_close(b->o);
}


/* ---- fixtures of the tests with a hung map file system or cache device ---- */

/* The map's temporary file becomes a FIFO: the next map write blocks in its open. */
static HL_UT_UNUSED void map_hang(char *tmp, size_t len)
{
	int rc = -1;

	snprintf(tmp, len, "%s.tmp", g_map);
	for (int i = 0; i < 1000 && rc; i++) /* (EEXIST: a map write under way) */
		if ((rc = mkfifo(tmp, 0600)))
			usleep(1000);
	CU_ASSERT_FATAL(rc == 0);
}

/* Whether tmp is still the FIFO map_hang made (not the next write's own file). */
static HL_UT_UNUSED bool map_fifo(const char *tmp)
{
	struct stat st;

	return stat(tmp, &st) == 0 && S_ISFIFO(st.st_mode);
}

/*
 * The file system answers again: the blocked writer's open returns, its
 * fsync of a FIFO fails and it removes the FIFO. The reader stays open
 * until then (a write to a FIFO without a reader raises SIGPIPE). Only a
 * FIFO left is removed here: once the writer removed it, the path may be
 * the next map write's file already (a seal's, which failed when this
 * removed it).
 */
static HL_UT_UNUSED void map_unhang(const char *tmp)
{
	int fd = open(tmp, O_RDONLY | O_NONBLOCK);

	for (int i = 0; i < 3000 && fd >= 0 && map_fifo(tmp); i++)
		usleep(1000);
	if (fd >= 0)
		close(fd);
	if (map_fifo(tmp))
		unlink(tmp);
}

/*
 * A cache device whose writes do not return while g_dev_hold is set (a
 * dying SSD): the metadata's device ops are swapped for these.
 */
static HL_UT_UNUSED const struct hl_cache_dev_ops *g_dev_real;
static HL_UT_UNUSED int g_dev_hold, g_dev_held; /* atomics */

static HL_UT_UNUSED int held_pwrite(struct hl_cache_dev *d, const void *buf, size_t len, uint64_t off)
{
	if (__atomic_load_n(&g_dev_hold, __ATOMIC_SEQ_CST)) {
		__atomic_store_n(&g_dev_held, 1, __ATOMIC_SEQ_CST);
		while (__atomic_load_n(&g_dev_hold, __ATOMIC_SEQ_CST))
			usleep(1000);
	}
	return g_dev_real->pwrite(d, buf, len, off);
}

static HL_UT_UNUSED struct hl_cache_dev_ops g_held_ops;

static HL_UT_UNUSED void dev_hold(struct hl_cache *c)
{
	g_dev_real = c->dev->ops;
	g_held_ops = *g_dev_real;
	g_held_ops.pwrite = held_pwrite;
	__atomic_store_n(&g_dev_held, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&g_dev_hold, 1, __ATOMIC_SEQ_CST);
	c->dev->ops = &g_held_ops;
}

/* Copy file from to a new file to. @return 0 or -1. */
static HL_UT_UNUSED int file_copy(const char *from, const char *to)
{
	FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
	char chunk[65536];
	size_t n;
	int rc = a && b ? 0 : -1;

	while (!rc && (n = fread(chunk, 1, sizeof(chunk), a)) > 0)
		rc = fwrite(chunk, 1, n, b) == n ? 0 : -1;
	if (a)
		fclose(a);
	if (b && fclose(b))
		rc = -1;
	return rc;
}

/* disk0's proof in RAM, under sync_lock (the metadata thread replaces it). */
static HL_UT_UNUSED void proof_now(struct hl_cache *c, char *out, size_t len)
{
	pthread_mutex_lock(&c->sync_lock);
	snprintf(out, len, "%s", c->ents[0]->proof ? c->ents[0]->proof : "");
	pthread_mutex_unlock(&c->sync_lock);
}

/* hl_cache_open on a thread of its own (the fixture's configuration). */
struct bg_open {
	pthread_t t;
	struct hl_cache *c;
	int rc;
	atomic_bool done;
};

static HL_UT_UNUSED void *bg_open_main(void *arg)
{
	struct bg_open *b = arg;
	struct hl_cache_config cfg = fixture_config();

	b->rc = hl_cache_open(&cfg, &b->c);
	atomic_store(&b->done, true);
	return NULL;
}

/*
 * A disown tried while the map hangs (engine_disown_retry_ut,
 * engine_rev17_ut): disk0 attached and proven, and its origin opened again
 * as `other`, to be served without the cache once the disown goes through.
 */
struct disown_hung {
	struct fake f, g;             /* disk0's origin; other's (the same URI) */
	struct hl_cache *c;
	struct hl_origin *o, *other;  /* disk0 through the cache; the origin without it */
	uint8_t *buf;                 /* 8 blocks */
	char tmp[96];                 /* map_hang's FIFO */
	char p0[HL_ORIGIN_PROOF_MAX]; /* disk0's proof before the disown */
};

/*
 * disk0 (f filled from seed, origin uri) read and proven, its proof in p0;
 * disowns wait drain_ms at most; then the map hangs. other's fake is
 * filled from seed + 1.
 */
static HL_UT_UNUSED void disown_hung_up(struct disown_hung *d, uint8_t seed, const char *uri,
                                        unsigned drain_ms)
{
	d->buf = malloc(8 * BS);
	d->o = fixture_up(&d->c, NULL, &d->f, seed, uri);
	CU_ASSERT_EQUAL(do_io(d->o, HL_IO_READ, 0, 8 * BS, d->buf), 0);
	CU_ASSERT(wait_inflight(d->c, 0));
	CU_ASSERT_FATAL(wait_proof(d->c, 0));
	proof_now(d->c, d->p0, sizeof(d->p0));
	d->c->drain_ms = drain_ms;
	map_hang(d->tmp, sizeof(d->tmp));
	fake_init(&d->g, LUN_SIZE, seed + 1);
	d->other = fake_origin(&d->g, uri);
}

/*
 * disk0, still served through the cache, is written (block 9, filled with
 * val): its origin's proof moves on. @return whether disk0's recorded
 * proof moved on from p0 within ms; p1: the last one seen.
 */
static HL_UT_UNUSED bool disown_hung_write_moves(struct disown_hung *d, uint8_t val, unsigned ms,
                                                 char *p1, size_t len)
{
	bool moved = false;

	memset(d->buf, val, BS);
	CU_ASSERT_EQUAL(do_io(d->o, HL_IO_WRITE, 9 * BS, BS, d->buf), 0);
	CU_ASSERT(wait_inflight(d->c, 0));
	for (unsigned i = 0; i < ms && !moved; i++) {
		proof_now(d->c, p1, len);
		moved = strcmp(p1, d->p0) != 0;
		usleep(1000);
	}
	return moved;
}

/* The end of a disown_hung_up() test: all it opened goes. */
static HL_UT_UNUSED void disown_hung_down(struct disown_hung *d)
{
	reactor_down();
	hl_origin_close(d->other);
	hl_origin_close(d->o);
	hl_cache_close(d->c);
	dev_remove();
	free(d->f.mem);
	free(d->g.mem);
	free(d->buf);
}

#endif
