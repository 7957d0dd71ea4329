/*
 * rbd_own_ut.c - the rbd origin's ownership ops (several gateways on one
 * image, origin.h "Ownership among gateways") against a real single-node
 * Ceph that this test starts and stops itself (tests/functional/mini_ceph.sh;
 * exit 77, skipped, where Ceph is not installed). One image opened twice,
 * as gateways 1 and 2: each hl_origin_open makes a client of its own, so
 * the cluster can blocklist one without the other, as it would two hosts.
 *
 * The tests run in order and hand the ownership on from one to the next
 * (each says in what state it leaves the image). The times of an acquire
 * refused by a live owner, a planned hand-over and a forced takeover are
 * printed (MEASURE lines).
 */
#include "config.h"

#include "ceph_ut_util.h"
#include "origin_ut_util.h"

#include "origin/origin_rbd.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

#define IMG_SIZE (64u << 20)
#define BLK      4096u
#define FAR      (8u << 20) /* another rbd object than block 0's (diffs are per object) */

static struct hl_origin *g1, *g2;
static uint64_t epoch1, epoch2;

static int write_fill(struct hl_origin *o, uint64_t off, uint8_t v)
{
	uint8_t buf[BLK];

	memset(buf, v, sizeof(buf));
	return ut_io(o, HL_IO_WRITE, off, buf, sizeof(buf));
}

/* the block at off reads back as all v, through o */
static bool reads_fill(struct hl_origin *o, uint64_t off, uint8_t v)
{
	uint8_t buf[BLK];

	memset(buf, 0xee, sizeof(buf));
	return ut_io(o, HL_IO_READ, off, buf, sizeof(buf)) == 0 && ut_all(buf, sizeof(buf), v);
}

static double ms_since(uint64_t t0)
{
	return (double)(hl_now_ns() - t0) / 1e6;
}

static int acquire(struct hl_origin *o, uint16_t gw, uint64_t epoch, bool force, double *ms)
{
	char why[HL_ORIGIN_WHY_MAX];
	uint64_t t0 = hl_now_ns();
	int rc = o->ops->own_acquire(o, gw, epoch, force, why, sizeof(why));

	if (ms)
		*ms = ms_since(t0);
	if (rc)
		printf("\n    gateway %u acquire%s: %s (%s)", gw, force ? " (force)" : "",
		       strerror(-rc), why);
	return rc;
}

static struct hl_own_info peek(struct hl_origin *o)
{
	struct hl_own_info info;

	CU_ASSERT_EQUAL(o->ops->own_peek(o, &info), 0);
	return info;
}

static struct hl_origin *open_gw(uint16_t gw)
{
	/* each gateway its own lease: the record says the owner's (hl_own_info.lease_ms) */
	struct hl_origin_opts opts = {
	    .rbd_conf = conf, .gateway = gw, .gateway_lease_ms = 1000u + gw};
	struct hl_origin *o = NULL;

	CU_ASSERT_EQUAL_FATAL(hl_origin_open("rbd:rbd/origin", &opts, &o), 0);
	return o;
}

/* ---- the tests (in order) ---- */

/* leaves: both open, nobody owns the image */
static void test_open_takes_nothing(void)
{
	struct hl_own_info info;

	g1 = open_gw(1);
	g2 = open_gw(2);
	CU_ASSERT_PTR_NOT_NULL_FATAL(g1->ops->own_acquire);
	info = peek(g2);
	CU_ASSERT_EQUAL(info.owner, 0);
	CU_ASSERT_TRUE(info.has_beat);
	/* not ours: writes refused at once, reads pass */
	CU_ASSERT_EQUAL(write_fill(g1, 0, 0x11), -ESHUTDOWN);
	CU_ASSERT_EQUAL(ut_io(g1, HL_IO_DISCARD, 0, NULL, BLK), -ESHUTDOWN);
	CU_ASSERT_TRUE(reads_fill(g1, 0, 0));
	CU_ASSERT_TRUE(reads_fill(g2, 0, 0));
	/* a mark snapshot needs the lock */
	char proof[HL_ORIGIN_PROOF_MAX];
	CU_ASSERT_EQUAL(g1->ops->proof_take(g1, "t", false, proof, sizeof(proof)), -EAGAIN);
}

/* leaves: 1 owns (epoch 1) */
static void test_acquire_and_refuse(void)
{
	double ms;

	epoch1 = 1;
	CU_ASSERT_EQUAL(acquire(g1, 1, epoch1, false, &ms), 0);
	printf("\n    MEASURE acquire of a free image: %.1f ms", ms);
	CU_ASSERT_EQUAL(acquire(g2, 2, 1, false, &ms), -EBUSY);
	printf("\n    MEASURE acquire refused (live owner): %.1f ms", ms);
	CU_ASSERT(ms < 3000);
	CU_ASSERT_EQUAL(write_fill(g1, 0, 0x11), 0);
	CU_ASSERT_TRUE(reads_fill(g1, 0, 0x11));
	CU_ASSERT_TRUE(reads_fill(g2, 0, 0x11)); /* a standby reads what the owner wrote */
	CU_ASSERT_EQUAL(write_fill(g2, BLK, 0x22), -ESHUTDOWN);
	/* acquiring what is ours already is harmless */
	CU_ASSERT_EQUAL(acquire(g1, 1, epoch1, false, NULL), 0);
}

/* leaves: 1 owns */
static void test_peek_sees_heartbeat(void)
{
	struct hl_own_info a, b, r;

	a = peek(g2);
	CU_ASSERT_EQUAL(a.owner, 1);
	CU_ASSERT_EQUAL(a.epoch, epoch1);
	CU_ASSERT_FALSE(a.released);
	CU_ASSERT_TRUE(a.has_beat);
	CU_ASSERT_EQUAL(a.lease_ms, 1001); /* gateway 1's, as its record says */
	CU_ASSERT_EQUAL(g1->ops->own_renew(g1, 1, epoch1, &r), 0);
	CU_ASSERT_EQUAL(r.owner, 1);
	CU_ASSERT_EQUAL(r.lease_ms, 1001);
	CU_ASSERT_EQUAL(r.requester, 0);
	b = peek(g2);
	CU_ASSERT_EQUAL(b.owner, 1);
	CU_ASSERT(b.beat > a.beat);
	CU_ASSERT_EQUAL(b.beat, r.beat);
	/* without renews the beat stands still */
	CU_ASSERT_EQUAL(peek(g2).beat, b.beat);
}

/*
 * leaves: 1 owns. librbd saying "not the lock owner" is no proof of a fence
 * (it drops its lock state for a moment when it re-registers its watch):
 * the renew takes the lock again and the owner stays the owner; only a
 * blocklist or another client holding the lock fences it (forced takeover).
 */
static void test_lock_dropped_is_no_fence(void)
{
	struct hl_own_info a, r;
	int owner = 1;

	a = peek(g2);
	CU_ASSERT_EQUAL(rbd_lock_release(ro_of(g1)->image), 0);
	CU_ASSERT_EQUAL(rbd_is_exclusive_lock_owner(ro_of(g1)->image, &owner), 0);
	CU_ASSERT_EQUAL(owner, 0);
	CU_ASSERT_EQUAL(g1->ops->own_renew(g1, 1, epoch1, &r), 0);
	CU_ASSERT_EQUAL(r.owner, 1);
	CU_ASSERT_FALSE(atomic_load(&ro_of(g1)->fenced));
	CU_ASSERT_EQUAL(rbd_is_exclusive_lock_owner(ro_of(g1)->image, &owner), 0);
	CU_ASSERT_EQUAL(owner, 1);
	CU_ASSERT(peek(g2).beat > a.beat); /* the heartbeat goes on */
	CU_ASSERT_EQUAL(write_fill(g1, 0, 0x11), 0);
	CU_ASSERT_TRUE(reads_fill(g2, 0, 0x11));
	CU_ASSERT_EQUAL(acquire(g2, 2, 1, false, NULL), -EBUSY); /* still 1's */
}

/* leaves: 1 owns, 2 asked for it */
static void test_request_reaches_owner(void)
{
	struct hl_own_info r;

	CU_ASSERT_EQUAL(g2->ops->own_request(g2, 2), 0);
	CU_ASSERT_EQUAL(g1->ops->own_renew(g1, 1, epoch1, &r), 0);
	CU_ASSERT_EQUAL(r.requester, 2);
	/* the request stands until the owner lets go */
	CU_ASSERT_EQUAL(g1->ops->own_renew(g1, 1, epoch1, &r), 0);
	CU_ASSERT_EQUAL(r.requester, 2);
}

/* leaves: 2 owns (epoch 2) */
static void test_release_then_acquire(void)
{
	struct hl_own_info info, r;
	double ms;
	uint64_t t0 = hl_now_ns();

	CU_ASSERT_EQUAL(g1->ops->own_release(g1, 1, epoch1), 0);
	info = peek(g2);
	CU_ASSERT_TRUE(info.released);
	CU_ASSERT_EQUAL(info.owner, 1);
	epoch2 = 2;
	CU_ASSERT_EQUAL(acquire(g2, 2, epoch2, false, &ms), 0);
	printf("\n    MEASURE planned hand-over: acquire %.1f ms, release+peek+acquire %.1f ms", ms,
	       ms_since(t0));
	info = peek(g1);
	CU_ASSERT_EQUAL(info.owner, 2);
	CU_ASSERT_EQUAL(info.epoch, epoch2);
	CU_ASSERT_FALSE(info.released);
	/* the old owner knows it is not the owner, and writes nothing */
	CU_ASSERT_EQUAL(g1->ops->own_renew(g1, 1, epoch1, &r), -ESHUTDOWN);
	CU_ASSERT_EQUAL(write_fill(g1, 0, 0x33), -ESHUTDOWN);
	CU_ASSERT_EQUAL(write_fill(g2, 0, 0x44), 0);
	CU_ASSERT_TRUE(reads_fill(g1, 0, 0x44));
	/* the request was answered: nobody is asking any more */
	CU_ASSERT_EQUAL(g2->ops->own_renew(g2, 2, epoch2, &r), 0);
	CU_ASSERT_EQUAL(r.requester, 0);
}

static int blocklist_entries(void)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "ceph --conf %s osd blocklist ls 2>/dev/null | grep -c :", conf);
	FILE *f = popen(cmd, "r");
	int n = -1;

	if (!f)
		return -1;
	if (fscanf(f, "%d", &n) != 1)
		n = -1;
	pclose(f);
	return n;
}

/* leaves: 2 owns (epoch 3, by force), 1 fenced */
static void test_forced_takeover(void)
{
	struct hl_own_info r;
	double ms;

	CU_ASSERT_EQUAL(g2->ops->own_release(g2, 2, epoch2), 0);
	epoch1 = 3;
	CU_ASSERT_EQUAL(acquire(g1, 1, epoch1, false, &ms), 0);
	printf("\n    MEASURE acquire after a release: %.1f ms", ms);
	CU_ASSERT_EQUAL(write_fill(g1, 0, 0x55), 0);
	CU_ASSERT_EQUAL(g1->ops->own_renew(g1, 1, epoch1, &r), 0);

	/* 1 "hangs": 2 breaks its lock */
	int before = blocklist_entries();
	epoch2 = 4;
	CU_ASSERT_EQUAL(acquire(g2, 2, epoch2, true, &ms), 0);
	printf("\n    MEASURE forced takeover (break + blocklist + acquire + record): %.1f ms", ms);
	CU_ASSERT(blocklist_entries() > before);
	/* 1 still thinks it owns the image: the cluster refuses its write all the same */
	CU_ASSERT_EQUAL(write_fill(g1, 0, 0x66), -ESHUTDOWN);
	CU_ASSERT_EQUAL(g1->ops->own_renew(g1, 1, epoch1, &r), -ESHUTDOWN);
	CU_ASSERT_EQUAL(write_fill(g1, 0, 0x66), -ESHUTDOWN);
	CU_ASSERT_EQUAL(g1->ops->own_release(g1, 1, epoch1), -ESHUTDOWN);
	CU_ASSERT_EQUAL(write_fill(g2, 0, 0x77), 0);
	CU_ASSERT_TRUE(reads_fill(g2, 0, 0x77));
	CU_ASSERT_EQUAL(g2->ops->own_renew(g2, 2, epoch2, &r), 0);
	CU_ASSERT_EQUAL(r.owner, 2);
}

/* leaves: nobody owns; 1 reconnected */
static void test_fenced_comes_back(void)
{
	struct hl_own_info info, r;
	char proof[HL_ORIGIN_PROOF_MAX];
	uint64_t t0 = hl_now_ns();

	/* the peek reconnects 1 with a new client: a standby again */
	info = peek(g1);
	printf("\n    MEASURE reconnect + peek of a fenced gateway: %.1f ms", ms_since(t0));
	CU_ASSERT_EQUAL(info.owner, 2);
	CU_ASSERT_EQUAL(info.epoch, epoch2);
	CU_ASSERT_TRUE(reads_fill(g1, 0, 0x77));
	CU_ASSERT_EQUAL(write_fill(g1, 0, 0x88), -ESHUTDOWN);
	CU_ASSERT_EQUAL(acquire(g1, 1, 5, false, NULL), -EBUSY);

	/* 2 takes a mark, writes, and hands over */
	CU_ASSERT_EQUAL(g2->ops->proof_take(g2, "own", true, proof, sizeof(proof)), 0);
	CU_ASSERT_EQUAL(write_fill(g2, 8 * BLK, 0x99), 0);
	CU_ASSERT_EQUAL(g2->ops->own_release(g2, 2, epoch2), 0);
	CU_ASSERT_TRUE(peek(g1).released);
	epoch1 = 5;
	CU_ASSERT_EQUAL(acquire(g1, 1, epoch1, false, NULL), 0);
	CU_ASSERT_EQUAL(write_fill(g1, 0, 0xaa), 0);
	CU_ASSERT_TRUE(reads_fill(g2, 0, 0xaa));
	CU_ASSERT_EQUAL(g1->ops->own_renew(g1, 1, epoch1, &r), 0);
	CU_ASSERT_TRUE(peek(g2).beat == r.beat);
	CU_ASSERT_EQUAL(g1->ops->own_release(g1, 1, epoch1), 0);
	info = peek(g2);
	CU_ASSERT_TRUE(info.released);
	CU_ASSERT_EQUAL(info.owner, 1);
}

/* the extents a proof check lists */
struct changed {
	uint64_t extents;
	bool has_0, has_far;
};

static void changed_cb(void *arg, uint64_t off, uint64_t len)
{
	struct changed *c = arg;

	c->extents++;
	if (off <= 0 && off + len >= BLK)
		c->has_0 = true;
	if (off <= FAR && off + len >= FAR + BLK)
		c->has_far = true;
}

/* leaves: nobody owns */
static void test_standby_checks_proof(void)
{
	char proof[HL_ORIGIN_PROOF_MAX], why[HL_ORIGIN_WHY_MAX];
	struct changed c = {0};

	CU_ASSERT_EQUAL(acquire(g1, 1, 6, false, NULL), 0);
	CU_ASSERT_EQUAL(g1->ops->proof_take(g1, "own", true, proof, sizeof(proof)), 0);
	CU_ASSERT_EQUAL(write_fill(g1, FAR, 0xbb), 0);
	CU_ASSERT_EQUAL(g1->ops->own_release(g1, 1, 6), 0);
	/* 2 is a standby: it reads the diff without the lock */
	CU_ASSERT_EQUAL(g2->ops->proof_check(g2, "own", proof, changed_cb, &c, why, sizeof(why)),
	                0);
	printf("\n    proof check on a standby: %s", why);
	CU_ASSERT_TRUE(c.has_far);
	CU_ASSERT_FALSE(c.has_0);
	CU_ASSERT_EQUAL(g2->ops->proof_take(g2, "own", true, proof, sizeof(proof)), -EAGAIN);
}

/*
 * Two processes with gateway id 1 (a restarted gateway whose old process
 * lives on, or a misconfiguration): each is its own client; the record
 * names gateway 1 either way, and only this_run tells them apart. A request
 * made with our own id reaches the owner (owner.c calls it a duplicate).
 * leaves: nobody owns
 */
static void test_same_id_two_processes(void)
{
	struct hl_origin *g1b = open_gw(1);
	struct hl_own_info info, r;

	CU_ASSERT_EQUAL_FATAL(acquire(g1, 1, 7, false, NULL), 0);
	info = peek(g1b);
	CU_ASSERT_EQUAL(info.owner, 1);
	CU_ASSERT_FALSE(info.this_run);
	CU_ASSERT_TRUE(peek(g1).this_run);
	CU_ASSERT_EQUAL(g1->ops->own_renew(g1, 1, 7, &r), 0);
	CU_ASSERT_TRUE(r.this_run);
	CU_ASSERT_EQUAL(r.requester, 0);
	CU_ASSERT_EQUAL(acquire(g1b, 1, 8, false, NULL), -EBUSY);
	CU_ASSERT_EQUAL(g1b->ops->own_request(g1b, 1), 0);
	CU_ASSERT_EQUAL(g1->ops->own_renew(g1, 1, 7, &r), 0);
	CU_ASSERT_EQUAL(r.requester, 1);
	CU_ASSERT_EQUAL(g1->ops->own_release(g1, 1, 7), 0);
	hl_origin_close(g1b);
}

static atomic_int wakes1, wakes2;

static void wake_cb(void *arg)
{
	atomic_fetch_add((atomic_int *)arg, 1);
}

/* Wait up to 3 s for *n to exceed before. @return ms waited, -1: never. */
static double woken(atomic_int *n, int before)
{
	uint64_t t0 = hl_now_ns();

	for (int t = 0; t < 3000; t++) {
		if (atomic_load(n) > before)
			return ms_since(t0);
		usleep(1000);
	}
	return -1;
}

/*
 * The watch on the ownership record (own_watch): an acquire, a request and
 * a release wake the other gateway within a round trip, so a standby need
 * not poll for a release. After own_watch(NULL) no wake runs.
 * leaves: nobody owns
 */
static void test_watch_tells_moves(void)
{
	struct hl_own_info r;
	double ms;
	int b;

	CU_ASSERT_EQUAL(g1->ops->own_watch(g1, wake_cb, &wakes1), 0);
	CU_ASSERT_EQUAL(g2->ops->own_watch(g2, wake_cb, &wakes2), 0);
	(void)peek(g1); /* registers the watches (the ownership thread's next look) */
	(void)peek(g2);
	b = atomic_load(&wakes2);
	CU_ASSERT_EQUAL_FATAL(acquire(g1, 1, 9, false, NULL), 0);
	ms = woken(&wakes2, b);
	printf("\n    MEASURE acquire told to the standby: %.1f ms", ms);
	CU_ASSERT(ms >= 0);
	b = atomic_load(&wakes1);
	CU_ASSERT_EQUAL(g2->ops->own_request(g2, 2), 0);
	ms = woken(&wakes1, b);
	printf("\n    MEASURE request told to the owner: %.1f ms", ms);
	CU_ASSERT(ms >= 0);
	CU_ASSERT_EQUAL(g1->ops->own_renew(g1, 1, 9, &r), 0);
	CU_ASSERT_EQUAL(r.requester, 2);
	b = atomic_load(&wakes2);
	CU_ASSERT_EQUAL(g1->ops->own_release(g1, 1, 9), 0);
	ms = woken(&wakes2, b);
	printf("\n    MEASURE release told to the standby: %.1f ms", ms);
	CU_ASSERT(ms >= 0 && ms < 1000);
	CU_ASSERT_TRUE(peek(g2).released);
	/* unregistered: nothing runs any more */
	CU_ASSERT_EQUAL(g1->ops->own_watch(g1, NULL, NULL), 0);
	CU_ASSERT_EQUAL(g2->ops->own_watch(g2, NULL, NULL), 0);
	b = atomic_load(&wakes1) + atomic_load(&wakes2);
	CU_ASSERT_EQUAL(acquire(g2, 2, 10, false, NULL), 0);
	CU_ASSERT_EQUAL(g2->ops->own_release(g2, 2, 10), 0);
	usleep(500 * 1000);
	CU_ASSERT_EQUAL(atomic_load(&wakes1) + atomic_load(&wakes2), b);
}

/* A little-endian u32 of a notify reply at *off, advancing it; 0 past the end. */
static uint32_t reply_u32(const char *b, size_t len, size_t *off)
{
	uint32_t v = 0;

	if (*off + 4 <= len)
		for (int i = 3; i >= 0; i--)
			v = v << 8 | (uint8_t)b[*off + (size_t)i];
	*off += 4;
	return v;
}

/*
 * Every watcher of the ownership record answers a notice (rados_notify_ack,
 * at the look the notice wakes): a notify completes in a round trip with
 * each watcher's answer, instead of lingering at the OSD for its whole
 * timeout with every watcher listed as timed out (-ETIMEDOUT).
 * leaves: nobody owns
 */
static void test_watch_acks(void)
{
	struct rbd_origin *r1 = ro_of(g1);
	char oid[160], *reply = NULL;
	size_t len = 0, off = 0;
	rados_completion_t c;
	uint32_t acks, timeouts;
	uint64_t t0;
	double ms;
	int b1, b2, rc;

	CU_ASSERT_EQUAL(g1->ops->own_watch(g1, wake_cb, &wakes1), 0);
	CU_ASSERT_EQUAL(g2->ops->own_watch(g2, wake_cb, &wakes2), 0);
	(void)peek(g1); /* registers the watches */
	(void)peek(g2);
	snprintf(oid, sizeof(oid), "hotlun_owner.%s", r1->image_id);
	b1 = atomic_load(&wakes1);
	b2 = atomic_load(&wakes2);
	t0 = hl_now_ns();
	CU_ASSERT_EQUAL_FATAL(rados_aio_create_completion2(NULL, NULL, &c), 0);
	CU_ASSERT_EQUAL_FATAL(rados_aio_notify(r1->ioctx, oid, c, "ut", 2, 3000, &reply, &len), 0);
	CU_ASSERT(woken(&wakes1, b1) >= 0);
	CU_ASSERT(woken(&wakes2, b2) >= 0);
	(void)peek(g1); /* the woken looks of the two ownership threads */
	(void)peek(g2);
	rados_aio_wait_for_complete(c);
	rc = rados_aio_get_return_value(c);
	ms = ms_since(t0);
	/* the reply: acks (gid, cookie, payload), then timeouts (gid, cookie) */
	acks = reply_u32(reply, len, &off);
	for (uint32_t i = 0; i < acks && off < len; i++) {
		off += 16;
		off += reply_u32(reply, len, &off);
	}
	timeouts = reply_u32(reply, len, &off);
	printf("\n    MEASURE a notify on the record: %.1f ms, %u answer(s), %u timed out (rc %d)",
	       ms, acks, timeouts, rc);
	CU_ASSERT_EQUAL(rc, 0);
	CU_ASSERT_EQUAL(acks, 2);
	CU_ASSERT_EQUAL(timeouts, 0);
	CU_ASSERT(ms < 1500);
	rados_aio_release(c);
	if (reply)
		rados_buffer_free(reply);
	CU_ASSERT_EQUAL(g1->ops->own_watch(g1, NULL, NULL), 0);
	CU_ASSERT_EQUAL(g2->ops->own_watch(g2, NULL, NULL), 0);
}

/* the OSD's pid (mini_ceph.sh writes run/osd.0.pid), 0: unknown */
static pid_t osd_pid(void)
{
	char path[160];
	FILE *f;
	int pid = 0;

	snprintf(path, sizeof(path), "%s/run/osd.0.pid", cluster);
	f = fopen(path, "r");
	if (!f)
		return 0;
	if (fscanf(f, "%d", &pid) != 1)
		pid = 0;
	fclose(f);
	return (pid_t)pid;
}

/*
 * Stop the OSD and wait until every one of its threads is stopped: kill()
 * returns before a multi-threaded process has taken the stop, and a thread
 * still running may ack the write that must time out (CI saw "the write
 * while the OSD stood still: Success" once on a loaded machine).
 */
static void osd_stop(pid_t pid)
{
	char path[64];

	kill(pid, SIGSTOP);
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	for (int tries = 0; tries < 400; tries++) {
		DIR *d = opendir(path);
		struct dirent *e;
		bool all = d != NULL;

		while (d && (e = readdir(d))) {
			char stat[400], buf[512], *close_paren;
			FILE *f;

			if (e->d_name[0] == '.')
				continue;
			snprintf(stat, sizeof(stat), "%s/%s/stat", path, e->d_name);
			f = fopen(stat, "r");
			if (!f)
				continue; /* the thread ended */
			if (!fgets(buf, sizeof(buf), f))
				buf[0] = '\0';
			fclose(f);
			close_paren = strrchr(buf, ')');
			if (!close_paren || close_paren[1] != ' ' || close_paren[2] != 'T')
				all = false;
		}
		if (d)
			closedir(d);
		if (all)
			return;
		usleep(5000);
	}
	fprintf(stderr, "\n    (the OSD's threads did not all stop within 2 s)");
}

/*
 * A copy of the cluster's ceph.conf at dir/name whose ops time out after
 * 3 s (rados_osd_op_timeout), after running setup (a shell command, or
 * NULL) first.
 */
static void short_conf(char *path, size_t len, const char *name, const char *setup)
{
	char cmd[1024];

	snprintf(path, len, "%s/%s", dir, name);
	snprintf(cmd, sizeof(cmd),
	         "%s%scp %s %s && printf '[client]\\nrados_osd_op_timeout = 3\\n' >>%s",
	         setup ? setup : "", setup ? " && " : "", conf, path, path);
	CU_ASSERT_FATAL(system(cmd) == 0);
}

/* A write of v at off sent while the OSD stands still: it times out. @return its result. */
static int write_while_osd_stopped(struct hl_origin *o, uint64_t off, uint8_t v)
{
	pid_t pid = osd_pid();
	int rc;

	CU_ASSERT_FATAL(pid > 0);
	osd_stop(pid);
	rc = write_fill(o, off, v);
	kill(pid, SIGCONT);
	printf("\n    the write while the OSD stood still: %s", strerror(-rc));
	return rc;
}

/*
 * A write of the owner times out (the OSD stopped: librados cancels the op
 * here, the OSD may still apply it later), then the owner hands the image
 * over. The release must not let the next owner write while that write may
 * still land: the old client is blocklisted, the record says so
 * (released-fence), and the taker gets the image only by force (a lock
 * break, which waits for the OSD map with the blocklist).
 * leaves: nobody owns
 */
static void test_release_unsure_write_fences(void)
{
	char conf_short[160];
	struct hl_origin_opts opts = {.rbd_conf = conf_short};
	struct hl_origin *a = NULL, *b = NULL;
	struct hl_own_info info;
	int before;

	short_conf(conf_short, sizeof(conf_short), "ceph-short.conf", NULL);
	opts.gateway = 1;
	CU_ASSERT_EQUAL_FATAL(hl_origin_open("rbd:rbd/origin", &opts, &a), 0);
	opts.gateway = 2;
	CU_ASSERT_EQUAL_FATAL(hl_origin_open("rbd:rbd/origin", &opts, &b), 0);
	CU_ASSERT_EQUAL_FATAL(acquire(a, 1, 11, false, NULL), 0);
	CU_ASSERT_EQUAL(write_fill(a, 2 * FAR, 0x11), 0);
	CU_ASSERT(write_while_osd_stopped(a, 2 * FAR, 0xc3) < 0);
	before = blocklist_entries();
	CU_ASSERT_EQUAL(a->ops->own_release(a, 1, 11), 0);
	info = peek(b);
	CU_ASSERT_TRUE(info.released);
	CU_ASSERT_TRUE(info.fence);
	CU_ASSERT(blocklist_entries() > before); /* the old owner's client shut out already */
	CU_ASSERT_EQUAL(write_fill(a, 2 * FAR, 0x44), -ESHUTDOWN);
	CU_ASSERT_EQUAL(acquire(b, 2, 12, false, NULL), -EBUSY); /* the lock stays: force */
	CU_ASSERT_EQUAL_FATAL(acquire(b, 2, 12, true, NULL), 0);
	CU_ASSERT_EQUAL(write_fill(b, 2 * FAR, 0x22), 0);
	CU_ASSERT_TRUE(reads_fill(b, 2 * FAR, 0x22));
	CU_ASSERT_FALSE(peek(a).fence); /* a's peek reconnects it: a standby again */
	CU_ASSERT_EQUAL(b->ops->own_release(b, 2, 12), 0);
	info = peek(a);
	CU_ASSERT_TRUE(info.released);
	CU_ASSERT_FALSE(info.fence); /* b's writes all completed */
	hl_origin_close(a);
	hl_origin_close(b);
	unlink(conf_short);
}

/*
 * Gateway 1 (user nobl: mon 'allow r', it cannot blocklist anybody) owns
 * the image at epoch, its write at off times out (the OSD stopped), and it
 * releases: the record says released-fence, yet nothing is blocklisted and
 * the lock stays with its client. *before: the blocklist's entries then.
 */
static void release_unfenced(const char *conf_short, struct hl_origin **a, struct hl_origin **b,
                             uint64_t epoch, uint64_t off, int *before)
{
	struct hl_origin_opts opts = {.rbd_conf = conf_short};
	struct hl_own_info info;

	opts.gateway = 1;
	opts.rbd_id = "nobl";
	CU_ASSERT_EQUAL_FATAL(hl_origin_open("rbd:rbd/origin", &opts, a), 0);
	opts.gateway = 2;
	opts.rbd_id = NULL;
	CU_ASSERT_EQUAL_FATAL(hl_origin_open("rbd:rbd/origin", &opts, b), 0);
	CU_ASSERT_EQUAL_FATAL(acquire(*a, 1, epoch, false, NULL), 0);
	CU_ASSERT_EQUAL(write_fill(*a, off, 0x11), 0);
	CU_ASSERT(write_while_osd_stopped(*a, off, 0xc3) < 0);
	*before = blocklist_entries();
	CU_ASSERT_EQUAL((*a)->ops->own_release(*a, 1, epoch), 0);
	CU_ASSERT_EQUAL(blocklist_entries(), *before); /* it could not shut itself out */
	info = peek(*b);
	CU_ASSERT_TRUE(info.released);
	CU_ASSERT_TRUE(info.fence);
}

/* the cephx user nobl and a short-timeout ceph.conf for it at conf_short */
static void nobl_conf(char *conf_short, size_t len)
{
	char user[512];

	snprintf(user, sizeof(user),
	         "ceph --conf %s auth get-or-create client.nobl mon 'allow r' "
	         "osd 'allow rwx pool=rbd' >>%s/keyring 2>/dev/null",
	         conf, cluster);
	short_conf(conf_short, len, "ceph-nobl.conf", user);
}

/*
 * The end of a takeover from an owner that could not fence itself: the
 * taker (gateway 2, epoch) blocklisted the old client first (more entries
 * than before), writes and reads at off, hands over and closes.
 */
static void taker_fenced_first(struct hl_origin *b, int before, uint64_t off, uint64_t epoch,
                               const char *conf_short)
{
	CU_ASSERT(blocklist_entries() > before);
	CU_ASSERT_EQUAL(write_fill(b, off, 0x22), 0);
	CU_ASSERT_TRUE(reads_fill(b, off, 0x22));
	CU_ASSERT_EQUAL(b->ops->own_release(b, 2, epoch), 0);
	hl_origin_close(b);
	unlink(conf_short);
}

/*
 * rev22 F3b: the owner releases with a write of unknown outcome but cannot
 * blocklist itself (its cephx user may not: mon 'allow r'), then closes the
 * image, which lets the lock go. The record still says released-fence with
 * its address: the taker finds the lock free and must blocklist that
 * client itself before it takes the disk (on the old code it just took the
 * free lock and nothing was blocklisted).
 */
static void test_release_unfenced_then_close(void)
{
	char conf_short[160];
	struct hl_origin *a = NULL, *b = NULL;
	int before;

	nobl_conf(conf_short, sizeof(conf_short));
	release_unfenced(conf_short, &a, &b, 21, 3 * FAR, &before);
	hl_origin_close(a); /* the close lets the lock go */
	a = NULL;
	CU_ASSERT_EQUAL_FATAL(acquire(b, 2, 22, true, NULL), 0);
	taker_fenced_first(b, before, 3 * FAR, 22, conf_short);
}

struct acquire_job {
	struct hl_origin *o;
	uint64_t epoch;
	int rc;
};

static void *acquire_gw2(void *arg)
{
	struct acquire_job *j = arg;

	j->rc = acquire(j->o, 2, j->epoch, false, NULL);
	return NULL;
}

/*
 * h37a: as above, but the taker asks without force while the lock is still
 * held, and the old owner's close lets it go during the taker's wait for a
 * planned release (wait_released): the record says released-fence, so the
 * taker must blocklist the old client (and wait for that OSD map) before it
 * takes the lock. The old code took the lock the moment it was free, with
 * nothing blocklisted and at whatever OSD map it had: a late write of the
 * old client could land after the new owner's.
 */
static void test_release_unfenced_close_while_waited(void)
{
	char conf_short[160];
	struct hl_origin *a = NULL, *b = NULL;
	struct acquire_job job = {.epoch = 32, .rc = -1};
	pthread_t t;
	int before;

	nobl_conf(conf_short, sizeof(conf_short));
	release_unfenced(conf_short, &a, &b, 31, 5 * FAR, &before);
	job.o = b;
	CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, acquire_gw2, &job), 0);
	usleep(300000);     /* the taker waits for the lock (up to 2 s) */
	hl_origin_close(a); /* the close lets the lock go */
	pthread_join(t, NULL);
	CU_ASSERT_EQUAL_FATAL(job.rc, 0);
	taker_fenced_first(b, before, 5 * FAR, 32, conf_short);
}

/*
 * A taker that cannot read the ownership record (its cephx user may write
 * hotlun_owner.* but not read it; a read that fails for a moment does the
 * same) cannot tell whether the last owner left writes of unknown outcome
 * (released-fence, with the client to fence): it does not take the disk.
 * The old code read that as "nobody" and took it.
 * leaves: nobody owns
 */
static void test_record_unreadable_not_taken(void)
{
	char user[1024], conf_norec[160], why[HL_ORIGIN_WHY_MAX];
	struct hl_origin_opts opts = {.rbd_conf = conf_norec, .rbd_id = "norec", .gateway = 2};
	struct hl_origin *b = NULL;
	int rc;

	snprintf(user, sizeof(user),
	         "ceph --conf %s auth get-or-create client.norec mon 'allow r' osd 'allow rwx "
	         "pool=rbd object_prefix rbd_, allow rwx pool=rbd object_prefix hotlun_request, "
	         "allow w pool=rbd object_prefix hotlun_owner' >>%s/keyring 2>/dev/null",
	         conf, cluster);
	short_conf(conf_norec, sizeof(conf_norec), "ceph-norec.conf", user);
	CU_ASSERT_EQUAL_FATAL(hl_origin_open("rbd:rbd/origin", &opts, &b), 0);
	rc = b->ops->own_acquire(b, 2, 41, false, why, sizeof(why));
	printf("\n    acquire without read access to the record: %s (%s)", strerror(-rc), why);
	CU_ASSERT(rc < 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(why, "cannot read the ownership record"));
	if (rc == 0)
		b->ops->own_release(b, 2, 41);
	hl_origin_close(b);
	unlink(conf_norec);
}

/*
 * A lone gateway (no ownership: it holds the lock while open) on uri, whose
 * ops time out after 3 s (its conf at conf_short), with 0x11 written at off.
 */
static struct hl_origin *open_lone_short(char *conf_short, size_t len, const char *uri,
                                         uint64_t off)
{
	struct hl_origin_opts opts = {.rbd_conf = conf_short};
	struct hl_origin *o = NULL;

	short_conf(conf_short, len, "ceph-short.conf", NULL);
	CU_ASSERT_EQUAL_FATAL(hl_origin_open(uri, &opts, &o), 0);
	CU_ASSERT_EQUAL(write_fill(o, off, 0x11), 0);
	return o;
}

/*
 * rev22 F3a: a lone gateway (no ownership: it holds the lock while open)
 * closes an image after a write of unknown outcome: a reload's or a
 * restart's next client of the image is not ordered after that write, so
 * the closing client blocklists itself first (the old code closed, and the
 * lock went, with nothing blocklisted).
 */
static void test_lone_close_unsure_write_fences(void)
{
	char conf_short[160];
	struct hl_origin_opts opts = {.rbd_conf = conf_short};
	struct hl_origin *a = NULL;
	int before;

	a = open_lone_short(conf_short, sizeof(conf_short), "rbd:rbd/origin", 4 * FAR);
	before = blocklist_entries();
	CU_ASSERT(write_while_osd_stopped(a, 4 * FAR, 0xc3) < 0);
	hl_origin_close(a);
	CU_ASSERT(blocklist_entries() > before); /* it shut itself out as it closed */
	/* a clean close after writes that all completed blocklists nothing */
	CU_ASSERT_EQUAL_FATAL(hl_origin_open("rbd:rbd/origin", &opts, &a), 0);
	CU_ASSERT_EQUAL(write_fill(a, 4 * FAR, 0x22), 0);
	CU_ASSERT_TRUE(reads_fill(a, 4 * FAR, 0x22));
	before = blocklist_entries();
	hl_origin_close(a);
	CU_ASSERT_EQUAL(blocklist_entries(), before);
	unlink(conf_short);
}

/* TOOL ARGS (rbd, ceph) on the test cluster: its exit status is 0 */
static void cluster_cmd(const char *tool, const char *args)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "%s --conf %s %s >/dev/null 2>&1", tool, conf, args);
	CU_ASSERT_FATAL(system(cmd) == 0);
}

static void rbd_cmd(const char *args)
{
	cluster_cmd("rbd", args);
}

/*
 * rev22: a pool's or an image's own rbd_cache=true wins over the client's
 * false, and librbd would then acknowledge writes from its write-back
 * cache: a writable open is refused; a snapshot or read-only open, which
 * writes nothing, is not; an image-level false (the remedy the error
 * names) opens again. On the old code every open succeeded. The check's
 * option list starts at 16 entries and librbd lists 77 (16.2): every open
 * here goes through its -ERANGE growth, or rbd_cache would go unseen.
 */
static void test_rbd_cache_on_refused(void)
{
	struct hl_origin_opts opts = {.rbd_conf = conf};
	struct hl_origin *o = NULL;

	rbd_cmd("config pool set rbd rbd_cache true");
	CU_ASSERT_NOT_EQUAL(hl_origin_open("rbd:rbd/origin", &opts, &o), 0);
	CU_ASSERT_PTR_NULL(o);
	opts.read_only = true;
	CU_ASSERT_EQUAL(hl_origin_open("rbd:rbd/origin", &opts, &o), 0);
	hl_origin_close(o);
	o = NULL;
	opts.read_only = false;
	rbd_cmd("config image set rbd/origin rbd_cache false");
	CU_ASSERT_EQUAL(hl_origin_open("rbd:rbd/origin", &opts, &o), 0);
	hl_origin_close(o);
	o = NULL;
	rbd_cmd("config pool rm rbd rbd_cache");
	rbd_cmd("config image set rbd/origin rbd_cache true");
	CU_ASSERT_NOT_EQUAL(hl_origin_open("rbd:rbd/origin", &opts, &o), 0);
	CU_ASSERT_PTR_NULL(o);
	rbd_cmd("config image rm rbd/origin rbd_cache");
	CU_ASSERT_EQUAL(hl_origin_open("rbd:rbd/origin", &opts, &o), 0);
	hl_origin_close(o);
}

/* How many mark snapshots (hotlun-...) image rbd/img has, -1: cannot tell. */
static int marks_of(const char *img)
{
	char cmd[512], line[512];
	int n = 0;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "rbd --conf %s snap ls rbd/%s 2>/dev/null", conf, img);
	p = popen(cmd, "r");
	if (!p)
		return -1;
	while (fgets(line, sizeof(line), p))
		if (strstr(line, " hotlun-"))
			n++;
	return pclose(p) == 0 ? n : -1;
}

/*
 * rev22 F2, the simple half: once a write of this client timed out (the
 * OSD stood still: it may apply it later, with the snapshot context it was
 * sent with), no new mark is made, for such a write landing after the mark
 * would show in no diff from it; the mark made before it stays the proof.
 * A new client (after the close that fenced the old one) marks again. On
 * the old code the second final proof_take made a mark.
 */
static void test_no_mark_after_unsure_write(void)
{
	char conf_short[160], p0[HL_ORIGIN_PROOF_MAX], p1[HL_ORIGIN_PROOF_MAX];
	struct hl_origin_opts opts = {.rbd_conf = conf_short};
	struct hl_origin *a = NULL;
	int marks;

	a = open_lone_short(conf_short, sizeof(conf_short), "rbd:rbd/origin", 5 * FAR);
	CU_ASSERT_EQUAL(a->ops->proof_take(a, "f2", true, p0, sizeof(p0)), 0);
	marks = marks_of("origin");
	CU_ASSERT(marks > 0);
	CU_ASSERT(write_while_osd_stopped(a, 5 * FAR, 0xc3) < 0);
	CU_ASSERT_EQUAL(a->ops->proof_take(a, "f2", true, p1, sizeof(p1)), -EAGAIN);
	CU_ASSERT_EQUAL(marks_of("origin"), marks); /* none made */
	CU_ASSERT_EQUAL(a->ops->proof_take(a, "f2", false, p1, sizeof(p1)), 0);
	CU_ASSERT_STRING_EQUAL(p1, p0); /* the run's mark, made before that write */
	hl_origin_close(a);             /* blocklists its client (the unsure write) */
	CU_ASSERT_EQUAL_FATAL(hl_origin_open("rbd:rbd/origin", &opts, &a), 0);
	CU_ASSERT_EQUAL(a->ops->proof_take(a, "f2", true, p1, sizeof(p1)), 0);
	CU_ASSERT_STRING_NOT_EQUAL(p1, p0);
	a->ops->proof_release(a, "f2", p1); /* p0's mark goes */
	CU_ASSERT_EQUAL(marks_of("origin"), marks);
	hl_origin_close(a);
	unlink(conf_short);
}

struct bg_write {
	struct hl_origin *o;
	uint64_t off;
	uint8_t v;
	int rc;
};

static void *bg_write_run(void *arg)
{
	struct bg_write *b = arg;

	b->rc = write_fill(b->o, b->off, b->v);
	return NULL;
}

/*
 * rev22 F2 itself: a mark made while a write is out, which then times out
 * and lands after the mark. The image keeps its data in a pool of its own
 * whose placement groups are made inactive (min_size above what one OSD
 * gives): the write waits at the OSD, librados gives up on it after 3 s,
 * the mark (a snapshot, in the header's pool) is made meanwhile, and the
 * write is applied once the pool is active again, with the snapshot
 * context from before the mark: the OSD keeps no copy for the mark, and
 * the mark's diff does not list the block. The mark must be dropped. On
 * the old code proof_take returned the mark (its diff missing the write is
 * printed).
 */
static void test_mark_straddled_by_late_write(void)
{
	char conf_short[160], p0[HL_ORIGIN_PROOF_MAX], p1[HL_ORIGIN_PROOF_MAX];
	char why[HL_ORIGIN_WHY_MAX];
	struct bg_write b = {.off = 0, .v = 0x22};
	struct changed c0 = {0}, c1 = {0};
	struct hl_origin *a;
	bool landed = false;
	pthread_t t;
	uint64_t t0;
	int marks, rc;

	cluster_cmd("ceph", "osd pool create hlf2 8");
	cluster_cmd("ceph", "osd pool set hlf2 size 2 --yes-i-really-mean-it");
	cluster_cmd("ceph", "osd pool set hlf2 min_size 1");
	cluster_cmd("ceph", "osd pool application enable hlf2 rbd");
	cluster_cmd("rbd", "create --size 16M --data-pool hlf2 rbd/f2");
	a = open_lone_short(conf_short, sizeof(conf_short), "rbd:rbd/f2", 0);
	CU_ASSERT_EQUAL(a->ops->proof_take(a, "f2", true, p0, sizeof(p0)), 0);
	marks = marks_of("f2");
	cluster_cmd("ceph", "osd pool set hlf2 min_size 2"); /* the data pool stops */
	b.o = a;
	CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, bg_write_run, &b), 0);
	usleep(500000); /* the write is out */
	t0 = hl_now_ns();
	rc = a->ops->proof_take(a, "f2", true, p1, sizeof(p1));
	printf("\n    a mark while a write was out: %s after %.0f ms", rc ? strerror(-rc) : "made",
	       ms_since(t0));
	pthread_join(t, NULL);
	printf("; the write: %s", strerror(-b.rc));
	CU_ASSERT(b.rc < 0);
	CU_ASSERT_EQUAL(rc, -EAGAIN);
	CU_ASSERT_EQUAL(marks_of("f2"), marks); /* dropped */
	cluster_cmd("ceph", "osd pool set hlf2 min_size 1");
	for (int i = 0; i < 100 && !landed; i++) {
		landed = reads_fill(a, 0, 0x22);
		if (!landed)
			usleep(100000);
	}
	printf("\n    the timed-out write %s", landed ? "landed later" : "never landed");
	if (rc == 0 && landed &&
	    a->ops->proof_check(a, "f2", p1, changed_cb, &c1, why, sizeof(why)) == 0)
		printf("; the mark made meanwhile %s it (%s)", c1.has_0 ? "lists" : "MISSES", why);
	CU_ASSERT_EQUAL(a->ops->proof_check(a, "f2", p0, changed_cb, &c0, why, sizeof(why)), 0);
	if (landed)
		CU_ASSERT_TRUE(c0.has_0); /* the mark before it sees it */
	hl_origin_close(a);
	cluster_cmd("rbd", "snap purge rbd/f2");
	cluster_cmd("rbd", "rm rbd/f2");
	unlink(conf_short);
}

static void count_changed(void *arg, struct hl_origin *o, enum hl_origin_event ev,
                          uint64_t old_size)
{
	(void)o;
	(void)old_size;
	if (ev == HL_ORIGIN_CHANGED)
		atomic_fetch_add((atomic_uint *)arg, 1);
}

/*
 * rev22: a lone gateway's exclusive lock removed without a blocklist (an
 * admin's `rbd lock rm` with rbd_blocklist_on_break_lock off), and another
 * client writes the image. The fence probe sees the lock lost and says
 * HL_ORIGIN_CHANGED at once (the cache drops the disk), for the other
 * client may have written behind the cache. On the old code the probe
 * tried for 15 s to take the lock back (librbd does not), then fenced:
 * the cache served its old blocks all that time.
 */
static void test_lock_lost_unfenced_drops(void)
{
	struct hl_origin_opts opts = {.rbd_conf = conf};
	struct hl_origin *a = NULL;
	char cmd[1024], locker[128] = "", id[128] = "";
	atomic_uint changed = 0;
	uint64_t t0;
	FILE *p;

	CU_ASSERT_EQUAL_FATAL(hl_origin_open("rbd:rbd/origin", &opts, &a), 0);
	hl_origin_listen(a, count_changed, &changed);
	CU_ASSERT_EQUAL(write_fill(a, 6 * FAR, 0x11), 0);
	snprintf(
	    cmd, sizeof(cmd),
	    "rbd --conf %s lock ls rbd/origin --format json | python3 -c "
	    "'import json,sys; l=json.load(sys.stdin)[0]; print(l[\"locker\"]); print(l[\"id\"])'",
	    conf);
	p = popen(cmd, "r");
	CU_ASSERT_FATAL(p != NULL);
	if (!fgets(locker, sizeof(locker), p) || !fgets(id, sizeof(id), p))
		locker[0] = id[0] = '\0';
	pclose(p);
	locker[strcspn(locker, "\n")] = id[strcspn(id, "\n")] = '\0';
	CU_ASSERT_FATAL(locker[0] && id[0]);
	snprintf(cmd, sizeof(cmd), "lock rm --rbd_blocklist_on_break_lock=false rbd/origin '%s' %s",
	         id, locker);
	cluster_cmd("rbd", cmd);
	cluster_cmd("rbd", "bench --io-type write --io-size 4K --io-total 4K rbd/origin");
	t0 = hl_now_ns();
	for (int i = 0; i < 100 && !atomic_load(&changed); i++)
		usleep(100000);
	printf("\n    the disk dropped %.0f ms after the other client's write",
	       atomic_load(&changed) ? ms_since(t0) : -1.0);
	CU_ASSERT(atomic_load(&changed) > 0);
	hl_origin_close(a); /* librbd does not take it back: fenced meanwhile, or at close */
}

/*
 * A read-only shared disk: only an image that cannot change (a snapshot) may
 * be served by every gateway; a read-only open of the live image takes no
 * lock, so another client may write it behind every gateway's cache, and
 * it cannot take part in ownership either: refused, with a clear error.
 */
static void test_read_only_shared(void)
{
	struct hl_origin_opts opts = {.rbd_conf = conf, .gateway = 1, .read_only = true};
	struct hl_origin *o = NULL;
	char cmd[512];

	CU_ASSERT_NOT_EQUAL(hl_origin_open("rbd:rbd/origin", &opts, &o), 0);
	CU_ASSERT_PTR_NULL(o);
	if (o)
		hl_origin_close(o);
	o = NULL;
	snprintf(cmd, sizeof(cmd), "rbd --conf %s snap create rbd/origin@ro-ut >/dev/null 2>&1",
	         conf);
	CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
	CU_ASSERT_EQUAL(hl_origin_open("rbd:rbd/origin@ro-ut", &opts, &o), 0);
	if (o) {
		CU_ASSERT_TRUE(o->immutable);
		CU_ASSERT_TRUE(o->read_only);
		hl_origin_close(o);
	}
	o = NULL;
	opts.read_only = false; /* a snapshot is read-only and immutable however it is asked for */
	CU_ASSERT_EQUAL(hl_origin_open("rbd:rbd/origin@ro-ut", &opts, &o), 0);
	if (o) {
		CU_ASSERT_TRUE(o->immutable);
		hl_origin_close(o);
	}
	CU_ASSERT_FALSE(g1->immutable); /* the live image */
	snprintf(cmd, sizeof(cmd), "rbd --conf %s snap rm rbd/origin@ro-ut >/dev/null 2>&1", conf);
	CU_ASSERT_EQUAL(system(cmd), 0);
}

static void test_close(void)
{
	uint64_t t0 = hl_now_ns();

	hl_origin_close(g1);
	hl_origin_close(g2);
	g1 = g2 = NULL;
	printf("\n    closed both in %.1f ms", ms_since(t0));
}

static const struct hl_test tests[] = {
    {"open as a gateway takes nothing; only reads pass", test_open_takes_nothing},
    {"acquire; a second one without force: -EBUSY at once", test_acquire_and_refuse},
    {"a standby's peek sees the owner's heartbeat", test_peek_sees_heartbeat},
    {"librbd's \"not the lock owner\" alone does not fence", test_lock_dropped_is_no_fence},
    {"a standby's request reaches the owner's renew", test_request_reaches_owner},
    {"planned release, then acquire without force", test_release_then_acquire},
    {"forced takeover blocklists the old owner", test_forced_takeover},
    {"a fenced gateway comes back as a standby", test_fenced_comes_back},
    {"a standby checks a proof the owner took", test_standby_checks_proof},
    {"two processes with one gateway id are told apart", test_same_id_two_processes},
    {"the watch on the record tells acquire, request and release", test_watch_tells_moves},
    {"every watcher answers a notice on the record: no notify lingers", test_watch_acks},
    {"a release after a write of unknown outcome fences the old owner",
     test_release_unsure_write_fences},
    {"a release that could not fence itself, then a close: the taker fences it",
     test_release_unfenced_then_close},
    {"a release that could not fence itself, then a close while the taker waits: fenced",
     test_release_unfenced_close_while_waited},
    {"a taker that cannot read the ownership record does not take the disk",
     test_record_unreadable_not_taken},
    {"a lone gateway closing after a write of unknown outcome fences itself",
     test_lone_close_unsure_write_fences},
    {"rbd_cache on in the pool's or the image's config: a writable open is refused",
     test_rbd_cache_on_refused},
    {"no new mark after a write of unknown outcome", test_no_mark_after_unsure_write},
    {"a mark a timed-out write may land after is dropped", test_mark_straddled_by_late_write},
    {"a lone gateway's lock removed without a blocklist: the disk is dropped at once",
     test_lock_lost_unfenced_drops},
    {"a read-only shared image must be a snapshot", test_read_only_shared},
    {"close", test_close},
    {NULL, NULL},
};

/* a fatal assertion left them open: close before the cluster goes */
static void close_left(void)
{
	hl_origin_close(g1);
	hl_origin_close(g2);
}

int main(void)
{
	return ceph_ut_main("rbd_own", tests, close_left);
}
