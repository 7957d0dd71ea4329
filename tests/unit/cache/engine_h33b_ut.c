/*
 * engine_h33b_ut.c - the never-stale review (h33b): every command that
 * changes origin blocks, raced with reads and the fills they leave behind,
 * on two reactors, against an origin whose completions come late and in any
 * order and whose failed writes may have written part of their range.
 *
 * The oracle is the origin itself: once every command of a batch has
 * completed, no write is in flight, so a read of any range must return
 * exactly what the origin holds, whatever fills are still landing. The
 * fixture is engine_ut.c's (engine_ut_lib.h) with a "chaos" origin of its
 * own in front of the fake's memory.
 */

#include "engine_ut_lib.h"

/* ---- the chaos origin: late completions, reads copied early or late, torn failures ---- */

struct chaos {
	struct fake *f;
	int fail_pct; /* atomic: this percentage of writes fails, after writing a prefix */
	int ops;      /* atomic: submitted (a test that proves nothing is seen) */
};

struct chaos_io {
	struct hl_timer t;
	struct chaos *ch;
	uint8_t copied; /* READ: data copied at submit already */
};
_Static_assert(sizeof(struct chaos_io) <= sizeof(((struct hl_origin_io *)0)->priv),
               "chaos_io must fit in hl_origin_io.priv");

static _Thread_local unsigned chaos_seed = 1;

static unsigned chaos_rand(void)
{
	return (unsigned)rand_r(&chaos_seed);
}

/* A failed write or zeroing: a prefix of whole 512-byte blocks landed (none to all). */
static uint64_t torn_len(uint64_t len)
{
	return (uint64_t)(chaos_rand() % (unsigned)(len / 512 + 1)) * 512;
}

static void chaos_fire(struct hl_timer *t)
{
	struct hl_origin_io *io = t->arg;
	struct chaos_io *cio = (struct chaos_io *)io->priv;
	struct chaos *ch = cio->ch;
	uint8_t *mem = ch->f->mem + io->offset;
	bool fail = io->op != HL_IO_READ && io->op != HL_IO_FLUSH &&
	            (int)(chaos_rand() % 100) < __atomic_load_n(&ch->fail_pct, __ATOMIC_RELAXED);
	uint64_t len = fail ? torn_len(io->length) : io->length;
	int rc = fail ? -EIO : 0;

	switch ((int)io->op) {
	case HL_IO_READ:
		if (!cio->copied)
			buf_to_iov(io->iov, io->iovcnt, 0, mem, io->length);
		break;
	case HL_IO_WRITE:
		iov_to_buf(io->iov, io->iovcnt, 0, mem, len);
		break;
	case HL_IO_DISCARD:
	case HL_IO_WRITE_ZEROES:
		memset(mem, 0, len);
		break;
	case HL_IO_COMPARE_AND_WRITE: {
		uint8_t *d = malloc(2 * io->length);
		iov_to_buf(io->iov, io->iovcnt, 0, d, 2 * io->length);
		if (fail) {
			memcpy(mem, d + io->length, len);
		} else if (memcmp(d, mem, io->length)) {
			rc = -EILSEQ;
			io->miscompare_offset = 0;
		} else {
			memcpy(mem, d + io->length, io->length);
		}
		free(d);
		break;
	}
	default:
		break;
	}
	io->cb(io, rc);
}

/* priv: the fake (first, as fake_proof_take/check read it), then the chaos. */
static struct chaos *chaos_of(struct hl_origin *o)
{
	return ((struct chaos **)hl_origin_priv(o))[1];
}

static int chaos_submit(struct hl_origin *o, struct hl_origin_io *io)
{
	struct chaos *ch = chaos_of(o);
	struct chaos_io *cio = (struct chaos_io *)io->priv;

	if (io->op != HL_IO_FLUSH &&
	    (io->offset > ch->f->size || io->length > ch->f->size - io->offset))
		return -EINVAL;
	__atomic_add_fetch(&ch->ops, 1, __ATOMIC_RELAXED);
	cio->ch = ch;
	cio->copied = 0;
	if (io->op == HL_IO_READ && chaos_rand() % 2) {
		buf_to_iov(io->iov, io->iovcnt, 0, ch->f->mem + io->offset, io->length);
		cio->copied = 1;
	}
	hl_timer_init(&cio->t, chaos_fire, io);
	hl_timer_start(hl_reactor_current(), &cio->t, chaos_rand() % 3);
	return 0;
}

static void chaos_close(struct hl_origin *o)
{
	(void)o; /* the test owns struct chaos */
}

static const struct hl_origin_ops chaos_ops = {
    .name = "chaos",
    .priv_size = 2 * sizeof(void *),
    .open = fake_open,
    .close = chaos_close,
    .submit = chaos_submit,
    .proof_take = fake_proof_take, /* its writes move no proof: only the restart's check */
    .proof_check = fake_proof_check,
};

static struct hl_origin *chaos_origin(struct chaos *ch, const char *uri)
{
	struct hl_origin *o = calloc(1, sizeof(*o) + 2 * sizeof(void *));

	o->ops = &chaos_ops;
	o->uri = strdup(uri);
	o->size = ch->f->size;
	o->can_discard = true;
	((struct fake **)hl_origin_priv(o))[0] = ch->f;
	((struct chaos **)hl_origin_priv(o))[1] = ch;
	return o;
}

/* ---- commands on either reactor ---- */

static struct hl_reactor *R2;

/* io_start() (engine_ut_lib.h) on reactor r. */
static void io_start_on(struct hl_reactor *r, struct step *st, struct hl_origin *o,
                        enum hl_io_op op, uint64_t off, uint64_t len, void *buf)
{
	struct hl_reactor *keep = R;

	R = r;
	io_start(st, o, op, off, len, buf);
	R = keep;
}

#define REGION  (16 * BS) /* where every command lands: they collide often */
#define MAX_OPS 5
#define MAX_LEN (3 * BS)
#define CAW_MAX (8 * K)

struct op {
	struct step st;
	enum hl_io_op op;
	uint64_t off, len;
	uint8_t *buf;
	int rc;
};

static const char *op_name(enum hl_io_op op)
{
	switch ((int)op) {
	case HL_IO_READ:
		return "read";
	case HL_IO_WRITE:
		return "write";
	case HL_IO_DISCARD:
		return "discard";
	case HL_IO_WRITE_ZEROES:
		return "zeroes";
	case HL_IO_COMPARE_AND_WRITE:
		return "caw";
	default:
		return "?";
	}
}

/* A random command: 512-byte aligned, often not on a sector or block boundary. */
static void op_pick(struct op *p, unsigned *seed, const struct fake *f, uint8_t val)
{
	unsigned k = (unsigned)rand_r(seed) % 100;
	uint64_t max;

	p->op = k < 35   ? HL_IO_READ
	        : k < 70 ? HL_IO_WRITE
	        : k < 78 ? HL_IO_DISCARD
	        : k < 86 ? HL_IO_WRITE_ZEROES
	                 : HL_IO_COMPARE_AND_WRITE;
	max = p->op == HL_IO_COMPARE_AND_WRITE ? CAW_MAX : MAX_LEN;
	p->off = (uint64_t)((unsigned)rand_r(seed) % (unsigned)(REGION / 512)) * 512;
	p->len = (uint64_t)((unsigned)rand_r(seed) % (unsigned)(max / 512) + 1) * 512;
	if (p->off + p->len > REGION)
		p->len = REGION - p->off;
	p->buf = NULL;
	if (p->op == HL_IO_READ || p->op == HL_IO_WRITE) {
		p->buf = malloc(p->len);
		memset(p->buf, val, p->len);
	} else if (p->op == HL_IO_COMPARE_AND_WRITE) {
		/* Mostly what the origin holds now (a success), else a miscompare. */
		p->buf = malloc(2 * p->len);
		memcpy(p->buf, f->mem + p->off, p->len);
		if (rand_r(seed) % 4 == 0)
			p->buf[rand_r(seed) % p->len] ^= 0x80;
		memset(p->buf + p->len, val, p->len);
	}
}

/* A read of [off, off + len) now returns what the origin holds; else a report. */
static bool read_matches(struct hl_origin *o, struct hl_reactor *r, const struct fake *f,
                         uint64_t off, uint64_t len, const char *when)
{
	uint8_t *buf = malloc(len);
	struct step st;
	bool ok;
	int rc;

	io_start_on(r, &st, o, HL_IO_READ, off, len, buf);
	rc = io_wait(&st);
	ok = rc == 0;
	if (!ok)
		fprintf(stderr, "FAILED READ %s: %llu+%llu: %d\n", when, (unsigned long long)off,
		        (unsigned long long)len, rc);
	for (uint64_t i = 0; ok && i < len; i++) {
		if (buf[i] != f->mem[off + i]) {
			fprintf(stderr,
			        "STALE %s: byte %llu (block %llu, sector %llu) read %02x, origin "
			        "%02x\n",
			        when, (unsigned long long)(off + i),
			        (unsigned long long)((off + i) / BS),
			        (unsigned long long)((off + i) % BS / HL_CACHE_SECTOR), buf[i],
			        f->mem[off + i]);
			ok = false;
		}
	}
	free(buf);
	return ok;
}

/*
 * Batches of up to MAX_OPS commands in flight together on two reactors:
 * reads, writes, discards, zeroes, compare-and-writes, over one 1 MiB region.
 * After each batch (fills of its reads maybe still landing) a random range
 * and, now and then, the whole region must read back as the origin holds it.
 */
/* stress() turns the update buffer on and off between the starts and the ends of batches */
static bool g_toggle_ub;

/*
 * lazy: the region is cached and the cache closed cleanly first; the
 * batches then start while the warm start restores its records (one
 * record page every 20 ms).
 */
static void stress(const char *policy, uint64_t ub, int fail_pct, unsigned seed0, int batches,
                   bool lazy)
{
	struct fake f;
	struct chaos ch = {.f = &f, .fail_pct = fail_pct};
	struct hl_cache *c;
	struct hl_origin *o = NULL;
	struct op ops[MAX_OPS];
	struct hl_cache_engine_stats st;
	unsigned seed;
	bool ok = true;
	int b;

	/* a hunt: HL_H33B_SEED and HL_H33B_BATCHES change the run */
	if (getenv("HL_H33B_SEED"))
		seed0 += (unsigned)atoi(getenv("HL_H33B_SEED"));
	if (getenv("HL_H33B_BATCHES"))
		batches = atoi(getenv("HL_H33B_BATCHES"));
	seed = seed0;

	g_ub = ub;
	dev_name();
	fake_init(&f, LUN_SIZE, (uint8_t)seed0);
	if (lazy) {
		reactor_up();
		c = cache_open(policy);
		CU_ASSERT_FATAL(hl_cache_attach(c, "disk0", 0, chaos_origin(&ch, "chaos:a"), &o) ==
		                0);
		CU_ASSERT(read_matches(o, R, &f, 0, REGION, "warm-up"));
		CU_ASSERT(wait_inflight(c, 0));
		cache_down(c, o);
		setenv("HOTLUN_TEST_RESTORE_DELAY_MS", "20", 1);
		g_lazy = true;
	}
	reactor_up();
	CU_ASSERT_FATAL(hl_reactor_create(&R2, "ut2") == 0);
	CU_ASSERT_FATAL(hl_reactor_start(R2) == 0);
	c = cache_open(policy);
	CU_ASSERT_FATAL(hl_cache_attach(c, "disk0", 0, chaos_origin(&ch, "chaos:a"), &o) == 0);
	if (lazy) {
		g_lazy = false;
		unsetenv("HOTLUN_TEST_RESTORE_DELAY_MS");
		CU_ASSERT(hl_cache_core_restoring(c->core));
	} else {
		/* everything cached first: the commands below change cached blocks */
		CU_ASSERT(read_matches(o, R, &f, 0, REGION, "warm-up"));
		CU_ASSERT(wait_inflight(c, 0));
	}

	for (b = 0; b < batches && ok; b++) {
		int n = (int)((unsigned)rand_r(&seed) % MAX_OPS) + 1;

		for (int i = 0; i < n; i++) {
			op_pick(&ops[i], &seed, &f, (uint8_t)(b * MAX_OPS + i + 1));
			io_start_on(rand_r(&seed) % 2 ? R : R2, &ops[i].st, o, ops[i].op,
			            ops[i].off, ops[i].len, ops[i].buf);
		}
		/* the buffer resized under the batch (an admin's live change), on and off */
		if (g_toggle_ub && b % 8 == 0)
			CU_ASSERT(hl_cache_set_update_buffer(c, b % 16 ? 0 : 16 * M) == 0);
		for (int i = 0; i < n; i++) {
			ops[i].rc = io_wait(&ops[i].st);
			CU_ASSERT(ops[i].rc != -ETIMEDOUT);
		}
		if (rand_r(&seed) % 4 == 0)
			CU_ASSERT(wait_inflight(c, 0));
		uint64_t off = (uint64_t)((unsigned)rand_r(&seed) % (REGION / 512)) * 512;
		uint64_t len = HL_MIN(REGION - off, (uint64_t)(rand_r(&seed) % 4 + 1) * BS);
		ok = read_matches(o, rand_r(&seed) % 2 ? R : R2, &f, off, len, "after a batch");
		if (ok && b % 64 == 63) {
			CU_ASSERT(wait_inflight(c, 0));
			ok = read_matches(o, R, &f, 0, REGION, "the region, settled");
		}
		if (!ok) {
			fprintf(stderr, "policy %s, ub %llu, fail %d%%, seed %u, batch %d:\n",
			        policy ? policy : "default", (unsigned long long)ub, fail_pct,
			        seed0, b);
			for (int i = 0; i < n; i++)
				fprintf(stderr, "  %s %llu+%llu (blocks %llu-%llu): %d\n",
				        op_name(ops[i].op), (unsigned long long)ops[i].off,
				        (unsigned long long)ops[i].len,
				        (unsigned long long)(ops[i].off / BS),
				        (unsigned long long)((ops[i].off + ops[i].len - 1) / BS),
				        ops[i].rc);
		}
		for (int i = 0; i < n; i++)
			free(ops[i].buf);
	}
	CU_ASSERT(ok);
	CU_ASSERT(__atomic_load_n(&ch.ops, __ATOMIC_RELAXED) > batches);
	CU_ASSERT(wait_inflight(c, 0));
	stats(c, &st);
	fprintf(
	    stderr,
	    "%d batches: %llu hits, %llu bytes from the cache, %llu updates, %llu fills "
	    "dropped\n",
	    b, (unsigned long long)st.core.read_hits, (unsigned long long)st.core.bytes_read_cache,
	    (unsigned long long)st.core.write_updates, (unsigned long long)st.core.fills_dropped);
	if (lazy) {
		CU_ASSERT_FATAL(hl_cache_get_stats(c, NULL, &st) ==
		                0); /* the restore's, cache-wide */
		fprintf(stderr, "the restore: %llu block(s) restored, %llu written meanwhile\n",
		        (unsigned long long)st.restore_restored,
		        (unsigned long long)st.restore_written);
		CU_ASSERT(st.restore_restored > 0 && st.restore_written > 0);
	}
	/* the races happened: blocks were served from the cache and fills lost to writes */
	CU_ASSERT(st.core.bytes_read_cache > 0);
	CU_ASSERT(st.core.fills_dropped > 0);
	hl_reactor_stop(R2);
	hl_reactor_join(R2);
	hl_reactor_destroy(R2);
	R2 = NULL;
	cache_down(c, o);
	dev_remove();
	free(f.mem);
	g_ub = 0;
}

/* ---- two overlapping writes the origin ran in one order and answered in the other ---- */

struct done_call {
	struct hl_origin_io *io;
	sem_t sem;
};

/* On the reactor: the origin answers io (its data landed already, by land()). */
static void answer_fn(void *arg)
{
	struct done_call *d = arg;

	d->io->cb(d->io, 0);
	sem_post(&d->sem);
}

/* The origin answers held io, on the reactor; back once it did. */
static void answer(struct hl_origin_io *io)
{
	struct done_call d = {.io = io};

	sem_init(&d.sem, 0, 0);
	CU_ASSERT_FATAL(hl_reactor_call(R, answer_fn, &d) == 0);
	sem_wait(&d.sem);
	sem_destroy(&d.sem);
}

/* The origin runs held write io: its bytes land in the fake's memory (no answer yet). */
static void land(struct fake *f, struct hl_origin_io *io)
{
	iov_to_buf(io->iov, io->iovcnt, 0, f->mem + io->offset, io->length);
}

/*
 * Two WRITEs of one cached range in flight together (SBC lets writes
 * overlap: they share the range lock). The origin may run them in either
 * order and answer them in either order: an io_uring file origin, a SAN
 * with SIMPLE tasks. Here it ran the second one first, so the first one's
 * bytes are what it holds, and answered the first one first. The engine
 * gave the second write (the last to begin and to end) the update of the
 * cached block: every read afterwards returned the second write's bytes
 * while the origin held the first's, until the block was evicted (seen
 * failing before the fix: the read returned 0x22, the origin 0x11).
 */
static void test_overlapping_writes_answered_out_of_order(void)
{
	struct fake f;
	struct hl_cache *c;
	struct hl_origin *o;
	struct step a, b;
	uint64_t off = 3 * BS + 8 * K;
	uint8_t *buf = malloc(BS), *wa = malloc(16 * K), *wb = malloc(16 * K);
	bool ok = true;

	g_ub = HL_CACHE_UPDATE_BUFFER_OFF;
	o = fixture_up(&c, NULL, &f, 33, "fake:ovl");
	for (int ub = 0; ub < 2; ub++) {
		CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 3 * BS, BS, buf), 0);
		CU_ASSERT(wait_inflight(c, 0));
		memset(wa, 0x11 + ub, 16 * K);
		memset(wb, 0x22 + ub, 16 * K);
		__atomic_store_n(&f.hold_writes, 1, __ATOMIC_RELAXED);
		io_start(&a, o, HL_IO_WRITE, off, 16 * K, wa);
		for (int i = 0; i < 3000 && __atomic_load_n(&f.nheld, __ATOMIC_ACQUIRE) < 1; i++)
			usleep(1000);
		io_start(&b, o, HL_IO_WRITE, off, 16 * K, wb);
		for (int i = 0; i < 3000 && __atomic_load_n(&f.nheld, __ATOMIC_ACQUIRE) < 2; i++)
			usleep(1000);
		CU_ASSERT_FATAL(f.nheld == 2);
		__atomic_store_n(&f.hold_writes, 0, __ATOMIC_RELAXED);
		f.nheld = 0;
		land(&f, f.held[1]); /* the second write runs first */
		land(&f, f.held[0]); /* the first one last: its bytes stay */
		answer(f.held[0]);   /* and is answered first */
		answer(f.held[1]);
		CU_ASSERT_EQUAL(io_wait(&a), 0);
		CU_ASSERT_EQUAL(io_wait(&b), 0);
		CU_ASSERT(wait_inflight(c, 0));
		CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 3 * BS, BS, buf), 0);
		fprintf(stderr, "%s: the origin holds %02x, a read returned %02x\n",
		        ub ? "update buffer" : "updates to the device", f.mem[off], buf[8 * K]);
		ok &= memcmp(buf, f.mem + 3 * BS, BS) == 0;
		CU_ASSERT(wait_inflight(c, 0));
		if (!ub) { /* again with the RAM update buffer */
			CU_ASSERT(hl_cache_set_update_buffer(c, 16 * M) == 0);
		}
	}
	CU_ASSERT(ok);
	fixture_down(c, o, &f);
	g_ub = 0;
	free(buf);
	free(wa);
	free(wb);
}

#define BATCHES 1500

static void test_update_ub(void)
{
	stress(NULL, 0, 0, 1, BATCHES, false);
}

static void test_update_no_ub(void)
{
	stress(NULL, HL_CACHE_UPDATE_BUFFER_OFF, 0, 2, BATCHES, false);
}

static void test_invalidate(void)
{
	stress("invalidate", 0, 0, 3, BATCHES, false);
}

static void test_update_ub_failures(void)
{
	stress(NULL, 0, 10, 4, BATCHES, false);
}

static void test_update_no_ub_failures(void)
{
	stress(NULL, HL_CACHE_UPDATE_BUFFER_OFF, 10, 5, BATCHES, false);
}

static void test_update_buffer_resized(void)
{
	g_toggle_ub = true;
	stress(NULL, 0, 10, 7, BATCHES, false);
	g_toggle_ub = false;
}

static void test_lazy_restore(void)
{
	stress(NULL, 0, 10, 6, 300, true);
}

int main(void)
{
	static const struct hl_test tests[] = {
	    {"overlapping writes answered out of order: never stale",
	     test_overlapping_writes_answered_out_of_order},
	    {"raced commands, update buffer: never stale", test_update_ub},
	    {"raced commands, updates to the device: never stale", test_update_no_ub},
	    {"raced commands, write_policy invalidate: never stale", test_invalidate},
	    {"raced commands, torn failures, update buffer: never stale", test_update_ub_failures},
	    {"raced commands, torn failures, to the device: never stale",
	     test_update_no_ub_failures},
	    {"raced commands, the update buffer resized meanwhile: never stale",
	     test_update_buffer_resized},
	    {"raced commands while a warm start restores its records: never stale",
	     test_lazy_restore},
	    {NULL, NULL},
	};
	hl_log_open(false, HL_LOG_WARN);
	return hl_test_run("cache_engine_h33b", tests);
}
