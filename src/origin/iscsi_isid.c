/*
 * iscsi_isid.c - stable ISIDs for the iscsi origin's sessions, the slot
 * files that say which of them a live instance uses, and the sweep at open
 * that reinstates what a dead run left at the SAN.
 *
 * Why: an I_T nexus is (initiator name + ISID, target port). A process
 * that logs in with the ISID of a session the SAN still has reinstates it
 * (RFC 7143 6.3.5): the SAN ends that session and its tasks first. With
 * random ISIDs per process, a restarted hotlund was a new nexus to the
 * SAN, and a write the dead process left in flight there could land after
 * the new process had read and cached the block. Derived ISIDs make the
 * new process the old one's successor, nexus for nexus.
 *
 * Derivation: ident = a hash of the gateway id, the disk's name, the SAN
 * target's name (lower case: IQNs compare without case) and the LUN;
 * the 24-bit part of slot k = a mix of (ident, k); the qualifier names the
 * session (iscsi_isid.h). Not the host of the URL: a SAN reached under
 * another address is the same target. The gateway id keeps two gateways
 * apart even when an initiator= URL key gives them one initiator name
 * (today a gateway keeps random ISIDs: origin_iscsi_isid_choose says why).
 * Format 10b ("random"): we own no OUI or enterprise number, and RFC 7143
 * asks nothing of the random part but that one initiator port use it once
 * per target, which the slots below keep within a host.
 *
 * Slots: two live instances with one ISID would reinstate each other at
 * every reconnect, each login killing the other's session and tasks. So
 * each instance takes a slot, a file in state_dir locked with flock while
 * the origin is open: the kernel releases it when the process dies, how
 * ever it dies, so a free slot is one whose holder is known gone. An open
 * takes the first free slot and sweeps every free slot (its own
 * included) whose record says its last holder may have left commands at
 * the SAN: one login and logout per qualifier it used, which reinstates
 * (fences) whatever the SAN kept of it. A slot held by a live instance
 * (a reload's old origin still closing, hotlund started twice on one
 * state_dir) is never swept; its holder is alive and its writes are its
 * own business. A record is 1 + the highest data qualifier used, written
 * before that session logs in, and 0 after a clean close.
 *
 * A sweep that fails keeps the disk's data sessions from logging in
 * (io->unswept) and is retried on the origin's service thread until it
 * succeeds: a fill from the SAN while a dead run's write may still land
 * there would cache a block that write then changes.
 */
#include "config.h"

#include "origin/iscsi_isid.h"

#include "hotlun/log.h"
#include "hotlun/util.h"
#include "origin/origin_iscsi.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <unistd.h>

#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME  0x100000001b3ull

static uint64_t fnv_bytes(uint64_t h, const void *p, size_t n, bool fold)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < n; i++) {
		h ^= fold ? (unsigned char)tolower(b[i]) : b[i];
		h *= FNV_PRIME;
	}
	/* a separator: ("ab", "c") and ("a", "bc") differ */
	h ^= 0xff;
	return h * FNV_PRIME;
}

/* splitmix64's finalizer: every input bit moves about half the output bits */
static uint64_t mix(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

uint64_t origin_iscsi_isid_ident(const char *disk, const char *target, unsigned lun,
                                 uint16_t gateway)
{
	uint64_t h = FNV_OFFSET;
	uint8_t gw[2] = {(uint8_t)(gateway >> 8), (uint8_t)gateway};
	uint8_t l[4] = {(uint8_t)(lun >> 24), (uint8_t)(lun >> 16), (uint8_t)(lun >> 8),
	                (uint8_t)lun};

	h = fnv_bytes(h, gw, sizeof(gw), false);
	h = fnv_bytes(h, disk, strlen(disk), false);
	h = fnv_bytes(h, target, strlen(target), true);
	h = fnv_bytes(h, l, sizeof(l), false);
	return h ? h : 1;
}

uint32_t origin_iscsi_isid_base(uint64_t ident, unsigned slot)
{
	return (uint32_t)(mix(ident + 0x9e3779b97f4a7c15ull * (slot + 1)) >> 40);
}

void origin_iscsi_isid_bytes(uint32_t base, uint16_t qual, uint8_t out[6])
{
	out[0] = 0x80; /* T = 10b (random), A = 0 */
	out[1] = (uint8_t)(base >> 16);
	out[2] = (uint8_t)(base >> 8);
	out[3] = (uint8_t)base;
	out[4] = (uint8_t)(qual >> 8);
	out[5] = (uint8_t)qual;
}

/*
 * A record is 1 + the highest data qualifier its holder used (0: closed
 * cleanly), written as ISC_ISID_RECORD_LEN bytes in place, never truncated
 * first: an empty file was never written (its holder died before any
 * login, so nothing to fence), and a record cut short or garbled by a crash
 * is read as the most a run can have used, so the next open sweeps every
 * qualifier rather than none.
 */
#define ISC_ISID_RECORD_LEN 11 /* "%010u\n" */

/*
 * Records are written ahead, so that a reactor making a data session
 * (session_get, under io->lock) seldom waits for the write's fdatasync
 * (a slow or busy state_dir disk held that reactor's connections and
 * every other reactor's session lookup): the open writes the record
 * as 1 + ISC_ISID_AHEAD, which covers the first ISC_ISID_AHEAD data
 * sessions (one per reactor), and a session past it writes ISC_ISID_AHEAD
 * more. The cost is at the next open after a crash: the sweep logs in
 * with up to ISC_ISID_AHEAD qualifiers the dead run never used (a login
 * and a logout each, to a nexus the SAN does not have).
 */
#define ISC_ISID_AHEAD 8

static unsigned record_read(int fd)
{
	char buf[ISC_ISID_RECORD_LEN + 1], *end;
	ssize_t n = pread(fd, buf, sizeof(buf), 0);
	unsigned long v;

	if (n == 0)
		return 0;
	if (n != ISC_ISID_RECORD_LEN || buf[n - 1] != '\n')
		return ISC_ISID_USED_MAX;
	buf[n - 1] = '\0';
	v = strtoul(buf, &end, 10);
	if (*end || end == buf || v > ISC_ISID_USED_MAX)
		return ISC_ISID_USED_MAX;
	return (unsigned)v;
}

/* 0 when the record is on disk; a failure is logged by the caller. */
static int record_write(int fd, unsigned v)
{
	char buf[ISC_ISID_RECORD_LEN + 1];

	snprintf(buf, sizeof(buf), "%010u\n", v);
	if (pwrite(fd, buf, ISC_ISID_RECORD_LEN, 0) != ISC_ISID_RECORD_LEN || fdatasync(fd) != 0)
		return errno ? -errno : -EIO;
	return 0;
}

int origin_iscsi_isid_claim(struct isc_isid *st, const char *dir, uint64_t ident)
{
	int err = 0;

	st->ident = ident;
	st->slot = -1;
	st->noted = 0;
	st->mine = 0;
	for (unsigned k = 0; k < ISC_ISID_SLOTS; k++) {
		char path[4096];
		int fd;

		st->fd[k] = -1;
		st->used[k] = 0;
		if ((size_t)snprintf(path, sizeof(path), "%s/iscsi-isid-%016llx.%u", dir,
		                     (unsigned long long)ident, k) >= sizeof(path)) {
			err = -ENAMETOOLONG;
			continue;
		}
		fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (fd < 0) {
			err = -errno;
			continue;
		}
		if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
			close(fd); /* a live instance holds it */
			continue;
		}
		st->fd[k] = fd;
		st->used[k] = record_read(fd);
		if (st->slot < 0) {
			/*
			 * in use (probe, poll, and ahead the first data sessions: see
			 * ISC_ISID_AHEAD); what a dead holder used stays until swept
			 */
			unsigned noted = HL_MAX(st->used[k], 1 + ISC_ISID_AHEAD);
			int rc = record_write(fd, noted);

			if (rc) {
				/* an unrecorded ISID is not fenced after a crash */
				err = rc;
				close(fd);
				st->fd[k] = -1;
				continue;
			}
			st->slot = (int)k;
			st->noted = noted;
		}
	}
	if (st->slot >= 0)
		return 0;
	for (unsigned k = 0; k < ISC_ISID_SLOTS; k++)
		if (st->fd[k] >= 0)
			origin_iscsi_isid_release(st, k, false);
	return err ? err : -EBUSY;
}

void origin_iscsi_isid_note(struct isc_isid *st, unsigned qual)
{
	int rc;

	if (st->slot < 0)
		return;
	st->mine = HL_MAX(st->mine, qual + 1);
	if (qual + 1 <= st->noted)
		return;
	st->noted = HL_MIN(qual + 1 + ISC_ISID_AHEAD, ISC_ISID_USED_MAX);
	rc = record_write(st->fd[st->slot], st->noted);
	if (rc)
		HL_WARN(ISC_COMPONENT,
		        "ISID slot %d: cannot record qualifier %u (%s): a crash now would leave it "
		        "unfenced at the SAN",
		        st->slot, qual, strerror(-rc));
}

void origin_iscsi_isid_swept(struct isc_isid *st, unsigned slot)
{
	if ((int)slot != st->slot) {
		origin_iscsi_isid_release(st, slot, true);
		return;
	}
	/* fresh: what this run noted itself (sessions made while a retried sweep ran), and ahead */
	st->noted = HL_MAX(st->mine, 1 + ISC_ISID_AHEAD);
	(void)record_write(st->fd[slot], st->noted); /* failed: one more sweep next time */
}

void origin_iscsi_isid_release(struct isc_isid *st, unsigned slot, bool clean)
{
	if (slot >= ISC_ISID_SLOTS || st->fd[slot] < 0)
		return;
	if (clean)
		(void)record_write(st->fd[slot], 0); /* failed: one more sweep next time */
	close(st->fd[slot]); /* drops the lock */
	st->fd[slot] = -1;
	if ((int)slot == st->slot)
		st->slot = -1;
}

/* ---- the origin's side: which ISIDs, and the sweep at open ---- */

static void sweep_retry(struct hl_timer *t);

/*
 * The ISIDs' 24-bit part: the slot's derived one when the disk is named
 * and has a state_dir, else random, as every open had before: then a
 * restart is a new I_T nexus to the SAN and fences nothing.
 *
 * A gateway (io->gateway) keeps random ISIDs: its reservation fences a
 * dead run already (the new run's acquisition PREEMPTs AND ABORTs the old
 * run's key before it serves), and sharing the old run's nexuses breaks
 * that. Its ownership session would be the old holder's own nexus, so the
 * REGISTER moves the reservation to the new key and the PREEMPT of the old
 * key finds nobody (gateway_san.sh step 5 failed so: "preempted while
 * taking over"); and its data sessions would inherit the old run's
 * registrations and the REGISTRATIONS PREEMPTED our own takeover queues
 * for them, which drops the warm cache (iscsi_ua.c).
 */
void origin_iscsi_isid_choose(struct hl_origin *o, const struct hl_origin_opts *opts)
{
	struct isc_origin *io = io_of(o);
	uint32_t rnd = 0;
	int rc = 0;

	io->isid.slot = -1;
	io->isid.ident = 0; /* no slot files: open's failure path closes none */
	hl_timer_init(&io->sweep_t, sweep_retry, o); /* stopped by origin_iscsi_ua_stop */
	if (opts && opts->disk && opts->state_dir && !io->gateway) {
		rc = origin_iscsi_isid_claim(
		    &io->isid, opts->state_dir,
		    origin_iscsi_isid_ident(opts->disk, io->url.target, io->url.lun, io->gateway));
		if (rc == 0) {
			io->isid_rnd =
			    origin_iscsi_isid_base(io->isid.ident, (unsigned)io->isid.slot);
			HL_INFO(ISC_COMPONENT, "%s: ISIDs 80%06x.... (slot %d)", o->uri,
			        io->isid_rnd, io->isid.slot);
			return;
		}
		HL_WARN(ISC_COMPONENT,
		        "%s: random ISIDs: %s: a restart will not fence this run's commands at "
		        "the SAN",
		        o->uri,
		        rc == -EBUSY ? "every ISID slot of this disk is held by a live instance"
		                     : strerror(-rc));
	}
	if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
		rnd = (uint32_t)hl_now_ns() ^ (uint32_t)getpid();
	io->isid_rnd = rnd & 0xffffff;
}

/* HOTLUN_TEST_ISID_SWEEP_FAILS=N: the first N sweeps fail as if the SAN were too slow. */
static bool test_sweep_fails(void)
{
	static atomic_uint failed;
	const char *v = getenv("HOTLUN_TEST_ISID_SWEEP_FAILS");

	return v && atomic_fetch_add(&failed, 1) < strtoul(v, NULL, 10);
}

/*
 * Fence what the dead holders of free slots may have left at the SAN: log
 * in and out once with each ISID their record says they used, which makes
 * the SAN reinstate (end, with its tasks) any session it kept of them.
 * Our own slot's qualifier 0 was just reinstated by the probe. A slot
 * whose sweep fails stays locked with its record: sweep_retry tries it
 * again, and a crash meanwhile leaves it to the next open.
 *
 * Runs in open (retry false), then on svc (retry true: the poll nexus is
 * ours by then, logged in with our slot's qualifier 0xffff, which
 * reinstated the dead run's poll session itself; sweeping it again would
 * end our own). No data session is logged in while it runs (unswept).
 */
static bool sweep(struct hl_origin *o, bool retry)
{
	struct isc_origin *io = io_of(o);
	bool all = true;

	if (io->isid.slot >= 0 && test_sweep_fails()) {
		HL_WARN(ISC_COMPONENT, "%s: cannot fence the ISIDs of a previous run: test "
		                       "(HOTLUN_TEST_ISID_SWEEP_FAILS)", o->uri);
		return false;
	}
	for (unsigned k = 0; k < ISC_ISID_SLOTS && io->isid.slot >= 0; k++) {
		uint32_t base = origin_iscsi_isid_base(io->isid.ident, k);
		unsigned used = io->isid.used[k], n = 0;
		bool ours = (int)k == io->isid.slot, ok = true;

		if (io->isid.fd[k] < 0)
			continue; /* held by a live instance, or swept */
		for (unsigned i = ours ? 1 : 0; used && i <= used && ok; i++) {
			uint16_t qual = i == used ? ISC_QUAL_UA : (uint16_t)i;
			if (ours && qual == ISC_QUAL_UA && retry && io->ua_ctx)
				continue;
			struct iscsi_context *ctx = origin_iscsi_context_make_isid(io, base, qual);

			ok = ctx && (iscsi_set_timeout(ctx, 10), 1) &&
			     iscsi_connect_sync(ctx, io->portal) == 0 && iscsi_login_sync(ctx) == 0;
			if (!ok)
				HL_WARN(ISC_COMPONENT,
				        "%s: cannot fence ISID 80%06x%04x of a previous run: %s",
				        o->uri, base, qual,
				        ctx ? iscsi_get_error(ctx) : "no memory");
			else
				n++;
			if (ctx) {
				if (ok)
					iscsi_logout_sync(ctx);
				iscsi_destroy_context(ctx);
			}
		}
		if (n)
			HL_NOTICE(
			    ISC_COMPONENT,
			    "%s: logged in again as %u session(s) of a previous run (ISIDs "
			    "80%06x....): the SAN reinstates any it kept, ending their commands",
			    o->uri, n, base);
		if (!ok) {
			all = false;
			continue;
		}
		if (ours) {
			pthread_mutex_lock(&io->lock); /* isid.noted: sessions note under it */
			origin_iscsi_isid_swept(&io->isid, k);
			io->isid.used[k] = 0;
			pthread_mutex_unlock(&io->lock);
		} else {
			origin_iscsi_isid_swept(&io->isid, k);
		}
	}
	return all;
}

bool origin_iscsi_isid_sweep(struct hl_origin *o)
{
	struct isc_origin *io = io_of(o);

	if (sweep(o, false))
		return true;
	atomic_store(&io->unswept, true);
	HL_WARN(ISC_COMPONENT,
	        "%s: a previous run's sessions may still write at the SAN: no read or write "
	        "goes to the SAN (reads the cache holds are served) until they are fenced; "
	        "tried again in the background",
	        o->uri);
	return false;
}

#define ISC_SWEEP_RETRY_MIN_MS 1000
#define ISC_SWEEP_RETRY_MAX_MS 30000

/*
 * svc: one more sweep. Until one succeeds no data session logs in: a read
 * the cache misses, or a write, waits in its session's queue (and fails
 * after the URL's timeout, as with a SAN that cannot be reached), so no
 * block is filled from the SAN while a dead run's write may still land
 * there after it, and no write of ours may be overtaken by one of its.
 */
static void sweep_retry(struct hl_timer *t)
{
	struct hl_origin *o = t->arg;
	struct isc_origin *io = io_of(o);

	if (atomic_load(&io->closing))
		return;
	io->sweep_tries++;
	if (sweep(o, true)) {
		atomic_store(&io->unswept, false);
		HL_NOTICE(ISC_COMPONENT,
		          "%s: the previous run's sessions are fenced (try %u): reads and writes "
		          "go to the SAN again",
		          o->uri, io->sweep_tries + 1);
		return;
	}
	io->sweep_ms = HL_MIN(io->sweep_ms * 2, (unsigned)ISC_SWEEP_RETRY_MAX_MS);
	hl_timer_start(io->svc, &io->sweep_t, io->sweep_ms);
}

static void sweep_arm(void *arg)
{
	struct hl_origin *o = arg;
	struct isc_origin *io = io_of(o);

	hl_timer_start(io->svc, &io->sweep_t, io->sweep_ms);
}

int origin_iscsi_isid_sweep_later(struct hl_origin *o)
{
	struct isc_origin *io = io_of(o);

	io->sweep_ms = ISC_SWEEP_RETRY_MIN_MS;
	io->sweep_tries = 0;
	if (hl_reactor_call(io->svc, sweep_arm, o) == 0)
		return 0;
	HL_ERR(ISC_COMPONENT, "%s: out of memory: the sweep is not retried; the disk stays "
	                      "unserved until it is reopened", o->uri);
	return -ENOMEM;
}
