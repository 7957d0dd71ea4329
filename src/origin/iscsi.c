/*
 * iscsi.c - the "iscsi:" origin: a LUN on a SAN, reached through libiscsi's
 * asynchronous API driven by hotlund's reactors.
 *
 *   origin = iscsi://[user%secret@]host[:port]/target-iqn/lun[?key=value&...]
 *
 * host may be a name, an IPv4 address or an IPv6 address in brackets; port
 * defaults to 3260; user%secret enables CHAP (no percent-decoding: the user
 * cannot contain '%', neither part '@' or '/'). The credentials may come
 * from the [disk] keys instead (hl_origin_opts.chap_*, which also carry
 * mutual CHAP: the SAN's answer is checked by libiscsi); o->uri, which the
 * layers above log and show, never holds the secret. Query keys:
 *   initiator=IQN  initiator name (default iqn.2026-11.io.hotlun:origin:<hostname>,
 *                  the same for every session, so one SAN ACL covers them all)
 *   timeout=S      how long an I/O may wait for a lost SAN before it fails
 *                  with -EIO (default 30 s; also how long a session may stay
 *                  down before new submissions fail at once)
 *   qd=N           commands in flight per session (default 128)
 *
 * Design: one libiscsi context, i.e. one iSCSI session, per (origin, reactor),
 * made lazily by the first submit on that reactor, like file_uring.c's per-thread
 * ring. A context is not thread-safe, and with one per reactor every call on
 * it runs on its owner's thread: no locks and no cross-thread hand-off on the
 * I/O path, completions naturally on the submitting reactor, and the load is
 * spread over N TCP connections. The alternative (one context on a dedicated
 * reactor, hl_reactor_call both ways) costs two thread hops per I/O and puts
 * every I/O of every reactor behind one socket. The price is N sessions per
 * origin on the SAN: all use the same initiator name (so ACLs work) and
 * distinct ISIDs (one 24-bit part, qualifier = session number), and a
 * session keeps its ISID across reconnects so the SAN reinstates it (and
 * drops the old one's tasks) instead of seeing a new I_T nexus. The 24-bit
 * part is derived from the gateway, the disk's name, the target and the
 * LUN, not drawn: a restarted process logs in as the dead one's nexuses,
 * and its open first logs in once with every ISID the dead run used, so
 * the SAN ends that run's commands before we read anything (a write left
 * queued there would otherwise land after our fill: a stale cache).
 * Two live instances must never share an ISID (each login would kill
 * the other's session): each open takes a slot locked in state_dir, a
 * reload's new origin another one than the old origin still closing
 * (iscsi_isid.c has the rules; docs/gateways.md what is not fenced). A
 * gateway keeps random ISIDs: its reservation's PREEMPT AND ABORT fences a
 * dead run, and shared nexuses would break that (iscsi_isid.c). SYNCHRONIZE
 * CACHE acts on the logical unit, so a FLUSH on one session covers writes
 * completed on the others.
 *
 * open() runs on the main thread before reactors exist: it logs in
 * synchronously once to read the capacity (READ CAPACITY 16, else 10), the
 * Block Limits and Logical Block Provisioning VPD pages, the LUN's designator
 * (VPD 83h: data_id, what names the LUN however its URL is spelled) and the
 * write-protect bit (MODE SENSE 6), then logs out.
 *
 * Mapping: READ/WRITE -> READ(16)/WRITE(16) (FUA kept), split at the SAN's
 * MAXIMUM TRANSFER LENGTH; FLUSH -> SYNCHRONIZE CACHE(16) (10 if 16 is not
 * supported); DISCARD -> UNMAP (when the SAN reports LBPU, else -EOPNOTSUPP);
 * WRITE_ZEROES -> WRITE SAME(16) of a zero block (UNMAP bit when the SAN
 * reads unmapped blocks as zeroes), WRITE(16) of zeroes where WRITE SAME is
 * refused; COMPARE_AND_WRITE -> COMPARE AND WRITE when the SAN reports a
 * maximum compare-and-write length (-EOPNOTSUPP otherwise, and from the
 * first time the SAN refuses the opcode anyway). The I/O's offset and length
 * must be multiples of the SAN's logical block size (else -EINVAL); with
 * hl_origin_opts.block_size set, open() refuses a disk block size that is not
 * a multiple of it.
 *
 * Failures: sense data becomes -errno (origin_iscsi_sense_errno); UNIT
 * ATTENTION (first acted on where it asks for it: iscsi_ua.c), BUSY, TASK
 * SET FULL, ABORTED COMMAND and NOT READY (becoming ready) are retried. A
 * session is lost on a socket error; when, with
 * commands out, the SAN completes nothing for min(timeout/2, 5 s) and then
 * does not answer a NOP-Out for as long (a hung SAN keeps TCP up); when a
 * login takes 5 s; and, as a backstop for a SAN that answers pings but never
 * completes, when a command is older than max(60 s, 2 x timeout). Command
 * age alone is no verdict: a busy SAN may hold queued commands long. A lost
 * session's context is destroyed, its I/Os go back to the session's queue (a
 * COMPARE AND WRITE that may have reached the SAN fails with -EIO instead:
 * repeating it could report a false miscompare), and the session reconnects
 * with exponential back-off from 100 ms to 5 s, forever. Queued I/Os are
 * retried after a reconnect until `timeout` after their submission, then
 * fail with -EIO. A write that fails so while a command of it is still out
 * on a lost connection that no login has reinstated since (or a COMPARE
 * AND WRITE failed at the loss) may yet be run by the SAN: it completes
 * with may_land, counted (hl_origin_unfenced) until its session's next
 * login, which ends the old connection's tasks at the SAN. While a session has been down longer than `timeout`,
 * submit fails at once with -EIO; the queue is bounded (-EAGAIN beyond).
 *
 * Ownership among gateways (hl_origin_opts.gateway != 0) is a SCSI-3
 * persistent reservation on the SAN LUN, kept by iscsi_pr.c with the warm
 * restart proofs built on it. This file only asks it before each command
 * (origin_iscsi_pr_ready: a session registers our key once per acquisition)
 * and refuses writes while the LUN is not ours (pr_write_refused).
 *
 * Lifetime: close() may run on any thread while the sessions' reactors run
 * (a reload closes on a thread of its own), or after they were destroyed
 * (a stop), not between their stop and their destroy. A session's events
 * and timers are only touched on its reactor: close() tears each session
 * down there (hl_reactor_call, and waits for it), and a session registers
 * a destroy call with its reactor that detaches it when the reactor goes
 * first. I/O still queued at close (against the contract) gets one
 * callback, -EIO, on its reactor, from shut(), which hl_origin_close() runs
 * before the wrappers above close; when that reactor is gone it is dropped
 * without one (there is no thread left to run it).
 */
#include "config.h"

#include "hotlun/event.h"
#include "hotlun/log.h"
#include "hotlun/util.h"
#include "origin/origin_iscsi.h"

#include <errno.h>
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ISC_WAIT_MAX           4096 /* I/Os queued per session while it cannot send */
#define ISC_BACKOFF_MIN_MS     100
#define ISC_BACKOFF_MAX_MS     1000 /* a SAN back from a restart is met within a second */
#define ISC_CONNECT_TIMEOUT_MS 5000 /* TCP connect + login + TEST UNIT READY */
#define ISC_CMD_TIMEOUT_MIN_S  60   /* backstop: a command older than this kills the session */
#define ISC_PROBE_MAX_MS       5000 /* no answer for this long: ping; then as long again: dead */
#define ISC_TICK_MS            250  /* libiscsi timeouts, queue deadlines, login timeout */
#define ISC_ZERO_BYTES         (1u << 20)  /* WRITE_ZEROES without WRITE SAME: bytes per WRITE */
#define ISC_WS_DEFAULT_BYTES   (64u << 20) /* WRITE SAME length when the SAN gives no limit */
#define ISC_UNMAP_MAX_DESC     64

_Static_assert(sizeof(struct iovec) == sizeof(struct scsi_iovec) &&
                   offsetof(struct iovec, iov_base) == offsetof(struct scsi_iovec, iov_base) &&
                   offsetof(struct iovec, iov_len) == offsetof(struct scsi_iovec, iov_len),
               "struct scsi_iovec must match struct iovec");

/* Read-only zeroes: the WRITE SAME block and the data of zero-filling writes. */
static unsigned char isc_zeroes[ISC_ZERO_BYTES];

static atomic_uint_fast64_t isc_next_id = 1;

/* ---- sessions: context, events, timers ---- */

static void session_event(struct hl_event *ev, uint32_t revents);
static void session_tick(struct hl_timer *t);
static void session_retry(struct hl_timer *t);
static void session_done_timer(struct hl_timer *t);
static void session_dispatch(struct isc_session *s);

struct iscsi_context *origin_iscsi_context_make_isid(struct isc_origin *io, uint32_t base,
                                                     uint16_t qual)
{
	struct iscsi_context *ctx = iscsi_create_context(io->initiator);

	if (!ctx)
		return NULL;
	if (iscsi_set_targetname(ctx, io->url.target) ||
	    iscsi_set_session_type(ctx, ISCSI_SESSION_NORMAL) ||
	    iscsi_set_header_digest(ctx, ISCSI_HEADER_DIGEST_NONE_CRC32C) ||
	    iscsi_set_isid_random(ctx, base, qual) ||
	    (io->url.user[0] &&
	     iscsi_set_initiator_username_pwd(ctx, io->url.user, io->url.secret)) ||
	    (io->mutual_user[0] &&
	     iscsi_set_target_username_pwd(ctx, io->mutual_user, io->mutual_secret))) {
		HL_ERR(ISC_COMPONENT, "iscsi://%s/%s: cannot set up a context: %s", io->portal,
		       io->url.target, iscsi_get_error(ctx));
		iscsi_destroy_context(ctx);
		return NULL;
	}
	/* We reconnect ourselves: libiscsi's reconnect would hide the outage and its length. */
	iscsi_set_noautoreconnect(ctx, 1);
	/*
	 * Liveness is judged by progress and NOP-Out (session_tick), not by
	 * command age: a busy SAN may hold a queued command long and still be
	 * healthy. This is only the backstop for one that answers pings forever.
	 */
	iscsi_set_timeout(ctx, (int)HL_MAX((uint32_t)ISC_CMD_TIMEOUT_MIN_S, 2 * io->url.timeout_s));
	iscsi_set_tcp_keepalive(ctx, 10, 3, 5);
	return ctx;
}

struct iscsi_context *origin_iscsi_context_make(struct isc_origin *io, uint16_t qual)
{
	return origin_iscsi_context_make_isid(io, io->isid_rnd, qual);
}

/*
 * io ends with result. A failed write whose command is still out under the
 * session's current login (the connection was lost, no login has
 * reinstated the session since) may yet be run by the SAN: may_land, and
 * counted until the next login (connect_cb) or the end of the origin.
 */
static void finish(struct isc_session *s, struct hl_origin_io *io, int result)
{
	struct isc_io *iio = iio_of(io);

	io->may_land = result && op_writes(io->op) && iio->out_login &&
	               iio->out_login == s->logins;
	if (io->may_land) {
		s->unfenced++;
		atomic_fetch_add(&io_of(s->o)->unfenced, 1);
	}
	free(iio->chunk_iov);
	iio->chunk_iov = NULL;
	iio->result = result;
	hl_list_add_tail(&s->doneq, &iio->link);
	if (!hl_timer_pending(&s->done_t))
		hl_timer_start(s->reactor, &s->done_t, 0);
}

/* Run the callbacks of finished I/Os. Never from submit; callbacks may submit again. */
static void drain_done(struct isc_session *s)
{
	while (!hl_list_empty(&s->doneq)) {
		struct hl_list *l = s->doneq.next;
		struct hl_origin_io *io = io_of_link(l);

		hl_list_del(l);
		if (io_of(s->o)->pr_key && op_writes(io->op))
			atomic_fetch_sub(&io_of(s->o)->writes_out, 1);
		io->cb(io, iio_of(io)->result);
	}
	hl_timer_stop(&s->done_t);
}

static void waitq_push(struct isc_session *s, struct hl_origin_io *io, bool front)
{
	if (front)
		hl_list_add(&s->waitq, &iio_of(io)->link);
	else
		hl_list_add_tail(&s->waitq, &iio_of(io)->link);
	s->nwait++;
}

/*
 * Queued PDUs are written when the reactor reports EPOLLOUT, not inline in
 * submit. Writing inline (a POLLOUT-only iscsi_service from dispatch) was
 * measured: front CPU per 4 KiB random read at qd 32 through two hotlund
 * tiers stayed at 7-8 us either way (2 busy vCPUs), so the simpler path stays.
 */
static void update_events(struct isc_session *s)
{
	uint32_t want;
	int ev;

	if (!s->ctx || !s->ev.reactor)
		return;
	ev = iscsi_which_events(s->ctx);
	want = EPOLLIN;
	if (ev & POLLOUT)
		want |= EPOLLOUT;
	if (want != s->ev.events && hl_event_mod(&s->ev, want))
		s->broken = true;
}

static void connect_cb(struct iscsi_context *ctx, int status, void *data, void *priv)
{
	struct isc_session *s = priv;
	struct isc_origin *io = io_of(s->o);

	(void)data;
	if (ctx != s->ctx)
		return;
	if (status != SCSI_STATUS_GOOD) {
		s->broken = true;
		return;
	}
	if (s->state != ISC_CONNECTING)
		return;
	set_state(s, ISC_UP);
	s->backoff_ms = ISC_BACKOFF_MIN_MS;
	/* a reinstatement: what earlier logins left at the SAN can no longer run */
	s->logins++;
	atomic_fetch_sub(&io->unfenced, s->unfenced);
	s->unfenced = 0;
	if (s->logged_up) {
		HL_NOTICE(ISC_COMPONENT, "iscsi://%s/%s/%u: session %u restored after %llu ms",
		          io->portal, io->url.target, io->url.lun, s->qual,
		          (unsigned long long)((hl_now_ns() - s->down_since_ns) / 1000000));
		/* the login's TEST UNIT READY took what the SAN told the nexus: look again */
		origin_iscsi_ua_note(s->o, ISC_UA_RESET);
	} else {
		HL_INFO(ISC_COMPONENT, "iscsi://%s/%s/%u: session %u logged in", io->portal,
		        io->url.target, io->url.lun, s->qual);
	}
	s->logged_up = true;
	s->dead_logged = false;
	s->down_since_ns = 0;
	s->nop_pending = false;
	s->last_rx_ns = hl_now_ns();
}

static void nop_cb(struct iscsi_context *ctx, int status, void *data, void *priv)
{
	struct isc_session *s = priv;

	(void)data;
	if (ctx != s->ctx) /* cancelled by a teardown */
		return;
	s->nop_pending = false;
	if (status == SCSI_STATUS_GOOD)
		s->last_rx_ns = hl_now_ns();
}

static void session_connect(struct isc_session *s)
{
	struct isc_origin *io = io_of(s->o);
	struct iscsi_context *ctx;
	int fd;

	/* a dead run's writes may still land at the SAN: none of ours, no fill (iscsi_isid.c) */
	if (atomic_load(&io->unswept))
		goto retry;
	ctx = origin_iscsi_context_make(io, s->qual);
	if (!ctx)
		goto retry;
	if (iscsi_full_connect_async(ctx, io->portal, (int)io->url.lun, connect_cb, s) != 0) {
		HL_DEBUG(ISC_COMPONENT, "iscsi://%s: connect: %s", io->portal,
		         iscsi_get_error(ctx));
		iscsi_destroy_context(ctx);
		goto retry;
	}
	fd = iscsi_get_fd(ctx);
	hl_event_init(&s->ev, fd, session_event, s);
	if (fd < 0 || hl_event_add(s->reactor, &s->ev, EPOLLIN | EPOLLOUT)) {
		iscsi_destroy_context(ctx);
		goto retry;
	}
	s->ctx = ctx;
	set_state(s, ISC_CONNECTING);
	s->connect_start_ns = hl_now_ns();
	update_events(s);
	return;
retry:
	set_state(s, ISC_DOWN);
	hl_timer_start(s->reactor, &s->retry, s->backoff_ms);
	s->backoff_ms = HL_MIN(s->backoff_ms * 2, (uint32_t)ISC_BACKOFF_MAX_MS);
}

/*
 * The connection is gone (or never came): destroy the context, put what was
 * in flight back on the queue, and schedule a reconnect. Not from inside a
 * libiscsi callback.
 */
/*
 * The session's libiscsi context goes: it cancels what libiscsi still
 * holds, and task_cb requeues or finishes each (s->ctx is NULL by then).
 */
static void session_drop_ctx(struct isc_session *s)
{
	struct iscsi_context *ctx = s->ctx;

	s->ctx = NULL;
	set_state(s, ISC_DOWN);
	if (ctx) {
		s->in_lib = true;
		iscsi_destroy_context(ctx);
		s->in_lib = false;
	}
}

/* The oldest I/O of s's inflight list, off it and without its libiscsi task. */
static struct hl_origin_io *inflight_take(struct isc_session *s)
{
	struct hl_origin_io *ioo = io_of_link(s->inflight.next);
	struct isc_io *iio = iio_of(ioo);

	hl_list_del(&iio->link);
	s->ninflight--;
	scsi_free_scsi_task(iio->task);
	iio->task = NULL;
	return ioo;
}

static void session_fail(struct isc_session *s, const char *why)
{
	struct isc_origin *io = io_of(s->o);
	struct iscsi_context *ctx = s->ctx;
	bool was_up = s->state == ISC_UP;
	char err[160];
	size_t n;

	/* libiscsi's last error says why a socket failed; for our own verdicts it is stale */
	bool lib_said = !strcmp(why, "connection") || !strcmp(why, "command timeout");

	hl_strlcpy(err, ctx && lib_said ? iscsi_get_error(ctx) : "-", sizeof(err));
	n = strcspn(err, "\r\n");
	err[n] = '\0';
	/* with our own reconnect, libiscsi's last word on a dropped socket is this */
	if (!strncmp(err, "iscsi_service_reconnect_if_loggedin", 35))
		hl_strlcpy(err, "closed or reset by the SAN", sizeof(err));
	if (was_up)
		HL_WARN(ISC_COMPONENT, "iscsi://%s/%s/%u: session %u lost (%s: %s); reconnecting",
		        io->portal, io->url.target, io->url.lun, s->qual, why, err);
	else
		HL_DEBUG(ISC_COMPONENT, "iscsi://%s: session %u: %s: %s", io->portal, s->qual, why,
		         err);
	/* Commands out when the session broke may still run at the SAN: should
	 * this run end before a reconnect reinstates the session, the next open
	 * must fence them, even if these fail or expire here meanwhile. */
	if (!hl_list_empty(&s->inflight))
		atomic_store(&io->unclean, true);
	hl_event_del(&s->ev);
	session_drop_ctx(s);
	/* Whatever libiscsi did not call back (it skips callbacks when not logged in). */
	while (!hl_list_empty(&s->inflight)) {
		struct hl_origin_io *ioo = inflight_take(s);

		if (ioo->op == HL_IO_COMPARE_AND_WRITE)
			finish(s, ioo, -EIO);
		else
			waitq_push(s, ioo, true);
	}
	/* a registration step that libiscsi did not call back: start over after the reconnect */
	origin_iscsi_reg_drop(s);
	s->broken = false;
	s->nop_pending = false;
	if (!s->down_since_ns)
		s->down_since_ns = hl_now_ns();
	if (was_up)
		s->backoff_ms = ISC_BACKOFF_MIN_MS;
	hl_timer_start(s->reactor, &s->retry, s->backoff_ms);
	s->backoff_ms = HL_MIN(s->backoff_ms * 2, (uint32_t)ISC_BACKOFF_MAX_MS);
}

/* After any libiscsi call that may have run callbacks: tear down, send more, run callbacks. */
static void session_after(struct isc_session *s, int rc, const char *why)
{
	if (s->ctx && (rc < 0 || s->broken))
		session_fail(s, why);
	session_dispatch(s);
	drain_done(s);
}

static void session_event(struct hl_event *ev, uint32_t revents)
{
	struct isc_session *s = ev->arg;
	int rc;

	s->in_lib = true;
	rc = iscsi_service(s->ctx, (int)(revents & (EPOLLIN | EPOLLOUT | EPOLLERR | EPOLLHUP)));
	s->in_lib = false;
	session_after(s, rc, "connection");
}

static void expire_waiting(struct isc_session *s, uint64_t now)
{
	struct hl_list *l = s->waitq.next;

	while (l != &s->waitq) {
		struct hl_list *next = l->next;
		struct hl_origin_io *ioo = io_of_link(l);

		if (iio_of(ioo)->deadline_ns <= now) {
			hl_list_del(l);
			s->nwait--;
			finish(s, ioo, -EIO);
		}
		l = next;
	}
}

static void session_tick(struct hl_timer *t)
{
	struct isc_session *s = t->arg;
	struct isc_origin *io = io_of(s->o);
	uint64_t now = hl_now_ns();
	int rc = 0;

	if (s->state == ISC_UP) {
		s->in_lib = true;
		rc = iscsi_service(s->ctx, 0); /* libiscsi's (backstop) command timeouts */
		s->in_lib = false;
		if (rc < 0 || s->broken) {
			session_fail(s, "command timeout");
			rc = 0;
		} else if (s->ninflight && s->nop_pending && now - s->nop_sent_ns > io->probe_ns) {
			session_fail(s, "no answer to commands or NOP-Out");
		} else if (s->ninflight && !s->nop_pending && now - s->last_rx_ns > io->probe_ns) {
			/* commands out and silence: is the SAN alive? */
			if (iscsi_nop_out_async(s->ctx, nop_cb, NULL, 0, s) == 0) {
				s->nop_pending = true;
				s->nop_sent_ns = now;
			}
		}
	} else if (s->state == ISC_CONNECTING &&
	           now - s->connect_start_ns > ISC_CONNECT_TIMEOUT_MS * 1000000ull) {
		session_fail(s, "login timed out");
	}
	now = hl_now_ns(); /* session_fail may have set down_since_ns after the first reading */
	if (s->state != ISC_UP && s->down_since_ns && now - s->down_since_ns > io->timeout_ns &&
	    !s->dead_logged) {
		s->dead_logged = true;
		HL_ERR(ISC_COMPONENT,
		       "iscsi://%s/%s/%u: session %u down for more than %u s: failing its I/O "
		       "until it is back",
		       io->portal, io->url.target, io->url.lun, s->qual, io->url.timeout_s);
	}
	expire_waiting(s, now);
	hl_timer_start(s->reactor, &s->tick, ISC_TICK_MS);
	session_after(s, rc, "connection");
}

static void session_retry(struct hl_timer *t)
{
	struct isc_session *s = t->arg;

	if (s->state == ISC_DOWN)
		session_connect(s);
	drain_done(s);
}

static void session_done_timer(struct hl_timer *t)
{
	drain_done(t->arg);
}

/* Nothing of s stays armed on its reactor (its thread, or after the reactor stopped). */
static void session_detach(struct isc_session *s)
{
	hl_reactor_on_destroy_cancel(&s->fini);
	hl_event_del(&s->ev);
	hl_timer_stop(&s->tick);
	hl_timer_stop(&s->retry);
	hl_timer_stop(&s->done_t);
}

/* The session's reactor is destroyed (a stop): close() frees the rest later. */
static void session_reactor_gone(struct hl_reactor_fini *f)
{
	struct isc_session *s = f->arg;

	session_detach(s);
	atomic_store(&s->armed, false);
}

/* Free what is left of a session whose reactor holds nothing of it any more. */
static void session_free(struct isc_session *s)
{
	if (!hl_list_empty(&s->inflight))
		atomic_store(&io_of(s->o)->unclean, true);
	if (s->ctx) {
		struct iscsi_context *ctx = s->ctx;

		s->ctx = NULL;
		s->in_lib = true;
		iscsi_destroy_context(ctx);
	}
	origin_iscsi_reg_drop(s);
	free(s);
}

/*
 * close() on the session's own reactor: detach, drop the connection, and
 * end every I/O the session still holds with one callback each (-EIO for
 * those not done), here, on the thread the contract promises. What
 * libiscsi cancels comes back through task_cb first (s->ctx is NULL: it
 * requeues or finishes it), so nothing is completed twice.
 */
static void session_close_here(struct isc_session *s)
{
	if (!hl_list_empty(&s->inflight)) /* they may still run at the SAN */
		atomic_store(&io_of(s->o)->unclean, true);
	session_detach(s); /* before the context closes its socket */
	session_drop_ctx(s);
	origin_iscsi_reg_drop(s);
	while (!hl_list_empty(&s->inflight)) /* not called back (not logged in) */
		finish(s, inflight_take(s), -EIO);
	while (!hl_list_empty(&s->waitq)) {
		struct hl_origin_io *ioo = io_of_link(s->waitq.next);

		hl_list_del(&iio_of(ioo)->link);
		s->nwait--;
		finish(s, ioo, -EIO);
	}
	drain_done(s); /* stops done_t, which finish() armed */
	free(s);
}

struct session_closer {
	struct isc_session *s;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool done;
};

static void session_close_call(void *arg)
{
	struct session_closer *c = arg;

	session_close_here(c->s);
	pthread_mutex_lock(&c->mu);
	c->done = true;
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

/* close() from another thread while s's reactor runs: close it there and wait. */
static void session_close_remote(struct isc_session *s)
{
	struct session_closer c = {.s = s};

	pthread_mutex_init(&c.mu, NULL);
	pthread_cond_init(&c.cv, NULL);
	while (hl_reactor_call(s->reactor, session_close_call, &c) < 0) {
		struct timespec ts = {0, 1000000}; /* its call queue cannot grow: retry */
		nanosleep(&ts, NULL);
	}
	pthread_mutex_lock(&c.mu);
	while (!c.done)
		pthread_cond_wait(&c.cv, &c.mu);
	pthread_mutex_unlock(&c.mu);
	pthread_cond_destroy(&c.cv);
	pthread_mutex_destroy(&c.mu);
}

/* ---- per-thread session lookup ---- */

#define TL_CACHE 8
static __thread struct {
	uint64_t id;
	struct isc_session *s;
} tl_cache[TL_CACHE];
static __thread unsigned tl_next;

static struct isc_session *session_get(struct hl_origin *o, struct hl_reactor *r)
{
	struct isc_origin *io = io_of(o);
	struct isc_session *s = NULL;

	for (unsigned i = 0; i < TL_CACHE; i++) {
		if (tl_cache[i].id == io->id && tl_cache[i].s->reactor == r)
			return tl_cache[i].s;
	}
	pthread_mutex_lock(&io->lock);
	for (struct hl_list *l = io->sessions.next; l != &io->sessions; l = l->next) {
		struct isc_session *c = (struct isc_session *)l;
		if (c->reactor == r) {
			s = c;
			break;
		}
	}
	if (!s) {
		s = calloc(1, sizeof(*s));
		if (s) {
			s->o = o;
			s->reactor = r;
			s->qual = (uint16_t)++io->nsessions;
			origin_iscsi_isid_note(&io->isid, s->qual); /* before it logs in */
			hl_list_init(&s->waitq);
			hl_list_init(&s->inflight);
			hl_list_init(&s->doneq);
			hl_event_init(&s->ev, -1, session_event, s);
			hl_timer_init(&s->tick, session_tick, s);
			hl_timer_init(&s->retry, session_retry, s);
			hl_timer_init(&s->done_t, session_done_timer, s);
			/* r's thread; under the lock, which close() takes to read it */
			hl_reactor_fini_init(&s->fini, session_reactor_gone, s);
			atomic_store(&s->armed, hl_reactor_on_destroy(r, &s->fini) == 0);
			s->backoff_ms = ISC_BACKOFF_MIN_MS;
			s->down_since_ns = hl_now_ns();
			hl_list_add_tail(&io->sessions, &s->link);
		}
	}
	pthread_mutex_unlock(&io->lock);
	if (!s)
		return NULL;
	if (!s->started) {
		/* new: first submit on this reactor (its owner), so start it here */
		s->started = true;
		hl_timer_start(r, &s->tick, ISC_TICK_MS);
		session_connect(s);
	}
	tl_cache[tl_next].id = io->id;
	tl_cache[tl_next].s = s;
	tl_next = (tl_next + 1) % TL_CACHE;
	return s;
}

/* ---- commands ---- */

/* Bytes the next command of io moves (READ/WRITE/WRITE_ZEROES/DISCARD), from iio->done on. */
static uint64_t chunk_len(const struct isc_origin *io, const struct hl_origin_io *ioo,
                          uint64_t done)
{
	uint64_t rest = ioo->length - done, cap;

	switch (ioo->op) {
	case HL_IO_READ:
	case HL_IO_WRITE:
		cap = io->max_xfer ? io->max_xfer : rest;
		break;
	case HL_IO_WRITE_ZEROES:
		if (atomic_load_explicit(&io->no_ws, memory_order_relaxed))
			cap = io->max_xfer ? HL_MIN(io->max_xfer, (uint64_t)ISC_ZERO_BYTES)
			                   : ISC_ZERO_BYTES;
		else
			cap = (uint64_t)io->max_ws * io->bs;
		break;
	case HL_IO_DISCARD:
		cap = (uint64_t)io->max_unmap * io->max_unmap_desc * io->bs;
		break;
	default:
		cap = rest;
		break;
	}
	/* cur_blocks counts a command in 32 bits */
	return HL_MIN(HL_MIN(rest, cap), (uint64_t)UINT32_MAX * io->bs);
}

/* iio->chunk_iov = the part [off, off+len) of io->iov. */
static int iov_slice(struct hl_origin_io *ioo, struct isc_io *iio, uint64_t off, uint64_t len,
                     int *cnt)
{
	int i = 0, n = 0;

	free(iio->chunk_iov);
	iio->chunk_iov = malloc(sizeof(struct iovec) * (size_t)ioo->iovcnt);
	if (!iio->chunk_iov)
		return -ENOMEM;
	while (i < ioo->iovcnt && off >= ioo->iov[i].iov_len)
		off -= ioo->iov[i++].iov_len;
	for (; i < ioo->iovcnt && len; i++) {
		size_t take = HL_MIN((uint64_t)ioo->iov[i].iov_len - off, len);

		iio->chunk_iov[n].iov_base = (char *)ioo->iov[i].iov_base + off;
		iio->chunk_iov[n].iov_len = take;
		n++;
		len -= take;
		off = 0;
	}
	*cnt = n;
	return 0;
}

static void task_cb(struct iscsi_context *ctx, int status, void *data, void *priv);

/* Hand io's next command to libiscsi. @return 0 or -errno (nothing queued). */
static int io_start(struct isc_session *s, struct hl_origin_io *ioo)
{
	struct isc_origin *io = io_of(s->o);
	struct isc_io *iio = iio_of(ioo);
	struct iscsi_context *ctx = s->ctx;
	int lun = (int)io->url.lun;
	uint64_t off = ioo->offset + iio->done;
	uint64_t lba = off / io->bs;
	uint64_t len = chunk_len(io, ioo, iio->done);
	int fua = (ioo->flags & HL_IO_FUA) ? 1 : 0;
	struct scsi_iovec *iov = (struct scsi_iovec *)ioo->iov;
	int iovcnt = ioo->iovcnt;
	struct scsi_task *task = NULL;

	if ((ioo->op == HL_IO_READ || ioo->op == HL_IO_WRITE) && len != ioo->length) {
		if (iov_slice(ioo, iio, iio->done, len, &iovcnt))
			return -ENOMEM;
		iov = (struct scsi_iovec *)iio->chunk_iov;
	}
	switch ((int)ioo->op) { /* int: COMPARE_AND_WRITE is outside the enum */
	case HL_IO_READ:
		task = iscsi_read16_iov_task(ctx, lun, lba, (uint32_t)len, (int)io->bs, 0, 0, 0, 0,
		                             0, task_cb, ioo, iov, iovcnt);
		break;
	case HL_IO_WRITE:
		task = iscsi_write16_iov_task(ctx, lun, lba, NULL, (uint32_t)len, (int)io->bs, 0, 0,
		                              fua, 0, 0, task_cb, ioo, iov, iovcnt);
		break;
	case HL_IO_FLUSH:
		if (!atomic_load_explicit(&io->no_sync16, memory_order_relaxed))
			task = iscsi_synchronizecache16_task(ctx, lun, 0, 0, 0, 0, task_cb, ioo);
		else
			task = iscsi_synchronizecache10_task(ctx, lun, 0, 0, 0, 0, task_cb, ioo);
		break;
	case HL_IO_DISCARD: {
		struct unmap_list list[ISC_UNMAP_MAX_DESC];
		uint64_t blocks = len / io->bs;
		int n = 0;

		while (blocks) {
			uint32_t take = (uint32_t)HL_MIN(blocks, (uint64_t)io->max_unmap);
			list[n].lba = lba;
			list[n].num = take;
			lba += take;
			blocks -= take;
			n++;
		}
		task = iscsi_unmap_task(ctx, lun, 0, 0, list, n, task_cb, ioo);
		break;
	}
	case HL_IO_WRITE_ZEROES:
		if (!atomic_load_explicit(&io->no_ws, memory_order_relaxed))
			task = iscsi_writesame16_task(ctx, lun, lba, isc_zeroes, io->bs,
			                              (uint32_t)(len / io->bs), 0, io->ws_unmap, 0,
			                              0, task_cb, ioo);
		else
			task = iscsi_write16_task(ctx, lun, lba, isc_zeroes, (uint32_t)len,
			                          (int)io->bs, 0, 0, fua, 0, 0, task_cb, ioo);
		break;
	case HL_IO_COMPARE_AND_WRITE:
		task = iscsi_compareandwrite_iov_task(ctx, lun, lba, NULL, (uint32_t)(2 * len),
		                                      (int)io->bs, 0, 0, fua, 0, 0, task_cb, ioo,
		                                      iov, iovcnt);
		break;
	default:
		return -EINVAL;
	}
	if (!task) {
		HL_WARN_RL(ISC_COMPONENT, "iscsi://%s: cannot queue a command: %s", io->portal,
		           iscsi_get_error(ctx));
		return -ENOMEM;
	}
	iio->task = task;
	iio->cur_blocks = (uint32_t)(len / io->bs);
	iio->out_login = s->logins;
	if (!s->ninflight)
		s->last_rx_ns = hl_now_ns(); /* silence is measured from here */
	hl_list_add_tail(&s->inflight, &iio->link);
	s->ninflight++;
	return 0;
}

static void session_dispatch(struct isc_session *s)
{
	struct isc_origin *io = io_of(s->o);
	uint64_t now;

	if (s->state != ISC_UP || s->broken || hl_list_empty(&s->waitq))
		goto out;
	now = hl_now_ns();
	while (s->ninflight < io->url.qd && !hl_list_empty(&s->waitq)) {
		struct hl_list *l = s->waitq.next;
		struct hl_origin_io *ioo = io_of_link(l);
		int rc;

		if (!origin_iscsi_pr_ready(s, ioo->op))
			break;
		hl_list_del(l);
		s->nwait--;
		if (iio_of(ioo)->deadline_ns <= now) {
			finish(s, ioo, -EIO);
			continue;
		}
		if (pr_write_refused(io, ioo->op)) {
			finish(s, ioo, -ESHUTDOWN);
			continue;
		}
		rc = io_start(s, ioo);
		if (rc)
			finish(s, ioo, rc == -ENOMEM ? -ENOMEM : -EIO);
	}
out:
	update_events(s);
}

/* Sense -> errno for a CHECK CONDITION; records a miscompare offset. */
static int check_condition(struct isc_session *s, struct hl_origin_io *ioo, struct scsi_task *task)
{
	struct isc_origin *io = io_of(s->o);
	struct origin_iscsi_sense sense;
	int rc;

	if (!task || task->datain.size < 4 ||
	    origin_iscsi_sense_parse(task->datain.data + 2, (size_t)task->datain.size - 2,
	                             &sense)) {
		HL_WARN_RL(ISC_COMPONENT, "iscsi://%s: CHECK CONDITION without usable sense data",
		           io->portal);
		return -EIO;
	}
	if (sense.key == SCSI_SENSE_UNIT_ATTENTION)
		origin_iscsi_ua_seen(s, sense.asc, sense.ascq); /* the command is repeated */
	rc = origin_iscsi_sense_errno(sense.key, sense.asc, sense.ascq);
	if (rc == -EILSEQ) {
		ioo->miscompare_offset = sense.info_valid ? sense.info : 0;
		return rc;
	}
	if (rc == -EOPNOTSUPP && ioo->op != HL_IO_READ && ioo->op != HL_IO_WRITE)
		return rc; /* task_cb falls back and says so once */
	if (rc && rc != -EAGAIN)
		HL_WARN_RL(ISC_COMPONENT,
		           "iscsi://%s/%s/%u: op %d at %llu+%llu: sense %x/%02x/%02x (%s)",
		           io->portal, io->url.target, io->url.lun, (int)ioo->op,
		           (unsigned long long)ioo->offset, (unsigned long long)ioo->length,
		           sense.key, sense.asc, sense.ascq, strerror(-rc));
	return rc;
}

static void task_cb(struct iscsi_context *ctx, int status, void *data, void *priv)
{
	struct hl_origin_io *ioo = priv;
	struct isc_io *iio = iio_of(ioo);
	struct isc_session *s = iio->s;
	struct isc_origin *io = io_of(s->o);
	struct scsi_task *task = iio->task;
	bool aborted = false;
	int rc;

	(void)ctx;
	(void)data;
	hl_list_del(&iio->link);
	s->ninflight--;
	if (status != SCSI_STATUS_CANCELLED && status != SCSI_STATUS_TIMEOUT &&
	    status != SCSI_STATUS_ERROR)
		s->last_rx_ns = hl_now_ns();
	iio->task = NULL;
	if (status == SCSI_STATUS_CHECK_CONDITION) {
		rc = check_condition(s, ioo, task);
		aborted = task && task->sense.key == SCSI_SENSE_COMMAND_ABORTED;
	} else {
		rc = origin_iscsi_status_errno(status);
	}
	scsi_free_scsi_task(task);
	if (rc != -ENOTCONN)
		iio->out_login = 0; /* answered: nothing of it is left at the SAN */
	if (rc == -EBADE && io->pr_key) {
		/* RESERVATION CONFLICT with our key registered: another gateway preempted it */
		if (!atomic_exchange(&io->fenced, true))
			HL_WARN(
			    ISC_COMPONENT,
			    "iscsi://%s/%s/%u: gateway %u: RESERVATION CONFLICT: fenced by another "
			    "gateway",
			    io->portal, io->url.target, io->url.lun, io->gateway);
		rc = -ESHUTDOWN;
	}

	if (rc == -EOPNOTSUPP && ioo->op == HL_IO_WRITE_ZEROES &&
	    !atomic_exchange(&io->no_ws, true)) {
		HL_NOTICE(ISC_COMPONENT, "iscsi://%s: no WRITE SAME(16): zeroes are written",
		          io->portal);
		rc = -EAGAIN;
	} else if (rc == -EOPNOTSUPP && ioo->op == HL_IO_FLUSH) {
		if (!atomic_exchange(&io->no_sync16, true)) {
			rc = -EAGAIN; /* try SYNCHRONIZE CACHE(10) */
		} else {
			if (!atomic_exchange(&io->no_sync, true))
				HL_NOTICE(
				    ISC_COMPONENT,
				    "iscsi://%s: no SYNCHRONIZE CACHE: taken as no volatile cache",
				    io->portal);
			rc = 0;
		}
	} else if (rc == -EOPNOTSUPP && ioo->op == HL_IO_WRITE_ZEROES) {
		rc = -EAGAIN; /* another session found out first; the retry writes zeroes */
	} else if (rc == -EOPNOTSUPP && ioo->op == HL_IO_COMPARE_AND_WRITE) {
		/* the caller emulates it; later ones are refused at submit */
		if (!atomic_exchange(&io->no_caw, true))
			HL_NOTICE(ISC_COMPONENT,
			          "iscsi://%s: the SAN refuses COMPARE AND WRITE (its Block Limits "
			          "page offers it): not forwarded any more",
			          io->portal);
	}

	switch (rc) {
	case 0:
		if (ioo->op != HL_IO_FLUSH && ioo->op != HL_IO_COMPARE_AND_WRITE) {
			iio->done += (uint64_t)iio->cur_blocks * io->bs;
			if (iio->done < ioo->length) {
				waitq_push(s, ioo, true);
				return;
			}
		}
		finish(s, ioo, 0);
		return;
	case -EAGAIN: /* not executed: repeat */
		if (ioo->op == HL_IO_COMPARE_AND_WRITE && aborted) {
			/* it may have been executed in part: repeating could report a false
			 * miscompare */
			finish(s, ioo, -EIO);
			return;
		}
		waitq_push(s, ioo, false);
		return;
	case -ENOTCONN: /* the session is gone; the SAN may or may not have done it */
		if (s->ctx)
			s->broken = true;
		if (ioo->op == HL_IO_COMPARE_AND_WRITE)
			finish(s, ioo, -EIO);
		else
			waitq_push(s, ioo, true);
		return;
	default:
		finish(s, ioo, rc);
		return;
	}
}

/* ---- ops ---- */

/* origin_io_check() for COMPARE_AND_WRITE: iovecs hold compare then write data (2 x length). */
static int caw_check(struct hl_origin *o, const struct hl_origin_io *ioo)
{
	struct isc_origin *io = io_of(o);
	uint64_t sum = 0;

	if (!io->max_caw || atomic_load_explicit(&io->no_caw, memory_order_relaxed))
		return -EOPNOTSUPP;
	if (!ioo->cb || ioo->iovcnt < 0 || ioo->iovcnt > IOV_MAX || (ioo->iovcnt && !ioo->iov))
		return -EINVAL;
	for (int i = 0; i < ioo->iovcnt; i++)
		sum += ioo->iov[i].iov_len;
	if (ioo->length > UINT64_MAX / 2 || sum != 2 * ioo->length)
		return -EINVAL;
	if (o->read_only)
		return -EROFS;
	if (ioo->offset > o->size || ioo->length > o->size - ioo->offset)
		return -EINVAL;
	if (ioo->length / io->bs > io->max_caw)
		return -EINVAL;
	return 0;
}

static int iscsi_submit(struct hl_origin *o, struct hl_origin_io *ioo)
{
	struct isc_origin *io = io_of(o);
	struct hl_reactor *r = hl_reactor_current();
	struct isc_io *iio = iio_of(ioo);
	struct isc_session *s;
	uint64_t now;
	int rc;

	/*
	 * First: a request refused here was never sent, and a wrapper
	 * (throttle) reports this refusal through the callback, where a
	 * may_land left by an earlier use of ioo would read as a write that
	 * may still land.
	 */
	ioo->may_land = false;
	if (!r)
		return -EINVAL;
	if (atomic_load_explicit(&io->closing, memory_order_relaxed))
		return -ESHUTDOWN; /* a callback of close()'s own failing I/O; nothing new */
	if (ioo->op == HL_IO_COMPARE_AND_WRITE) {
		rc = caw_check(o, ioo);
		if (rc)
			return rc;
	} else {
		rc = origin_io_check(o, ioo);
		if (rc)
			return rc;
	}
	if (ioo->offset % io->bs || ioo->length % io->bs) {
		HL_ERR_RL(ISC_COMPONENT,
		          "iscsi://%s: I/O at %llu+%llu is not aligned to the SAN's %u-byte blocks "
		          "(set the disk's block_size to a multiple of %u)",
		          io->portal, (unsigned long long)ioo->offset,
		          (unsigned long long)ioo->length, io->bs, io->bs);
		return -EINVAL;
	}
	if (ioo->op == HL_IO_DISCARD && !o->can_discard)
		return -EOPNOTSUPP;
	if (pr_write_refused(io, ioo->op))
		return -ESHUTDOWN;
	s = session_get(o, r);
	if (!s)
		return -ENOMEM;
	now = hl_now_ns();
	if (s->state != ISC_UP && s->down_since_ns && now - s->down_since_ns > io->timeout_ns)
		return -EIO;
	if (s->nwait >= ISC_WAIT_MAX)
		return -EAGAIN;

	memset(iio, 0, sizeof(*iio));
	iio->s = s;
	iio->deadline_ns = now + io->timeout_ns;
	if (io->pr_key && op_writes(ioo->op))
		atomic_fetch_add(&io->writes_out, 1); /* before dispatch reads proof_epoch */
	ioo->miscompare_offset = 0;
	if (ioo->length == 0 && ioo->op != HL_IO_FLUSH) {
		finish(s, ioo, 0);
		return 0;
	}
	waitq_push(s, ioo, false);
	/* Safe here: queueing a PDU runs no callback; failures go through doneq. */
	session_dispatch(s);
	return 0;
}

/* ---- open: one synchronous login to learn the LUN ---- */

static struct scsi_task *probe_vpd(struct iscsi_context *ctx, int lun, int page, int alloc)
{
	struct scsi_task *t = iscsi_inquiry_sync(ctx, lun, 1, page, alloc);

	if (t && t->status != SCSI_STATUS_GOOD) {
		scsi_free_scsi_task(t);
		return NULL;
	}
	return t;
}

/*
 * The LUN's own name (VPD 83h, association "logical unit"): what tells two
 * URLs of one LUN apart from two LUNs (data_id). Read once here: a SAN
 * does not rename a LUN under a session.
 */
static void probe_lu_id(struct hl_origin *o, struct iscsi_context *ctx)
{
	struct isc_origin *io = io_of(o);
	struct scsi_task *t = probe_vpd(ctx, (int)io->url.lun, 0x83, 1024);
	int rc = t ? origin_iscsi_lu_designator(t->datain.data, (size_t)t->datain.size, io->lu_id,
	                                        sizeof(io->lu_id))
	           : -ENOENT;

	scsi_free_scsi_task(t);
	if (rc) {
		io->lu_id[0] = '\0';
		HL_WARN(ISC_COMPONENT,
		        "%s: the LUN names no logical unit designator (VPD 83h): another "
		        "disk on it under another URL is not detected, and exclusive = yes "
		        "proofs hold for any LUN of this URL with its size",
		        o->uri);
	}
}

/* Writes that failed with may_land and whose session has not logged in again since. */
static uint64_t iscsi_unfenced(struct hl_origin *o)
{
	return atomic_load(&io_of(o)->unfenced);
}

static int iscsi_data_id(struct hl_origin *o, char *buf, size_t len, bool *lasting)
{
	struct isc_origin *io = io_of(o);

	*lasting = true; /* the SAN's name for the LUN, which it keeps */
	if (!io->lu_id[0] || hl_strlcpy(buf, io->lu_id, len) >= len)
		return -EOPNOTSUPP;
	return 0;
}

static int probe(struct hl_origin *o, struct iscsi_context *ctx)
{
	struct isc_origin *io = io_of(o);
	int lun = (int)io->url.lun;
	struct scsi_task *t;
	const uint8_t *d;
	bool has_b0 = false, has_b2 = false, lbpme = false, lbprz = false, lbpu = false;
	bool lbpws = false, wp = false;
	unsigned lbppbe = 0;

	/* device type */
	t = iscsi_inquiry_sync(ctx, lun, 0, 0, 96);
	if (!t || t->status != SCSI_STATUS_GOOD || t->datain.size < 1) {
		HL_ERR(ISC_COMPONENT, "%s: INQUIRY failed: %s", o->uri, iscsi_get_error(ctx));
		scsi_free_scsi_task(t);
		return -EIO;
	}
	if ((t->datain.data[0] & 0x1f) != 0x00 || (t->datain.data[0] >> 5) != 0) {
		HL_ERR(ISC_COMPONENT, "%s: LUN %u is not a connected direct-access device (0x%02x)",
		       o->uri, io->url.lun, t->datain.data[0]);
		scsi_free_scsi_task(t);
		return -ENODEV;
	}
	scsi_free_scsi_task(t);

	/* capacity */
	t = iscsi_readcapacity16_sync(ctx, lun);
	if (t && t->status == SCSI_STATUS_GOOD && t->datain.size >= 16) {
		d = t->datain.data;
		io->nblocks = hl_get_be64(d) + 1;
		io->bs = hl_get_be32(d + 8);
		lbppbe = d[13] & 0x0f;
		lbpme = d[14] & 0x80;
		lbprz = d[14] & 0x40;
	} else {
		scsi_free_scsi_task(t);
		t = iscsi_readcapacity10_sync(ctx, lun, 0, 0);
		if (!t || t->status != SCSI_STATUS_GOOD || t->datain.size < 8) {
			HL_ERR(ISC_COMPONENT, "%s: READ CAPACITY failed: %s", o->uri,
			       iscsi_get_error(ctx));
			scsi_free_scsi_task(t);
			return -EIO;
		}
		io->nblocks = (uint64_t)hl_get_be32(t->datain.data) + 1;
		io->bs = hl_get_be32(t->datain.data + 4);
	}
	scsi_free_scsi_task(t);
	if (io->bs < 512 || io->bs > 65536 || io->nblocks > UINT64_MAX / io->bs) {
		HL_ERR(ISC_COMPONENT, "%s: unusable capacity: %llu blocks of %u bytes", o->uri,
		       (unsigned long long)io->nblocks, io->bs);
		return -EIO;
	}

	/* VPD pages */
	t = probe_vpd(ctx, lun, 0x00, 255);
	if (t && t->datain.size >= 4) {
		size_t n =
		    HL_MIN((size_t)t->datain.size - 4, (size_t)hl_get_be16(t->datain.data + 2));
		for (size_t i = 0; i < n; i++) {
			has_b0 |= t->datain.data[4 + i] == 0xb0;
			has_b2 |= t->datain.data[4 + i] == 0xb2;
		}
	}
	scsi_free_scsi_task(t);
	io->max_unmap = 0;
	io->max_unmap_desc = 0;
	io->max_ws = 0;
	if (has_b0 && (t = probe_vpd(ctx, lun, 0xb0, 255)) != NULL) {
		d = t->datain.data;
		if (t->datain.size >= 16) {
			io->max_caw = d[5];
			io->max_xfer = (uint64_t)hl_get_be32(d + 8) * io->bs;
		}
		if (t->datain.size >= 28) {
			io->max_unmap = hl_get_be32(d + 20);
			io->max_unmap_desc = hl_get_be32(d + 24);
		}
		if (t->datain.size >= 44 && hl_get_be64(d + 36) <= UINT32_MAX)
			io->max_ws = (uint32_t)hl_get_be64(d + 36);
		scsi_free_scsi_task(t);
	}
	if (has_b2 && (t = probe_vpd(ctx, lun, 0xb2, 255)) != NULL) {
		if (t->datain.size >= 6) {
			lbpu = t->datain.data[5] & 0x80;
			lbpws = t->datain.data[5] & 0x40;
		}
		scsi_free_scsi_task(t);
	}

	probe_lu_id(o, ctx);

	/* write protect: DEVICE-SPECIFIC PARAMETER bit 7 of the mode parameter header */
	t = iscsi_modesense6_sync(ctx, lun, 1, SCSI_MODESENSE_PC_CURRENT,
	                          SCSI_MODEPAGE_RETURN_ALL_PAGES, 0, 255);
	if (t && t->status == SCSI_STATUS_GOOD && t->datain.size >= 4)
		wp = t->datain.data[2] & 0x80;
	scsi_free_scsi_task(t);

	o->size = io->nblocks * io->bs;
	o->phys_block_size = lbppbe < 16 ? io->bs << lbppbe : io->bs;
	if (wp)
		o->read_only = true;
	o->can_discard = !o->read_only && lbpme && lbpu;
	o->zeroes_after_discard = o->can_discard && lbprz;
	io->ws_unmap = lbpme && lbpws && lbprz;
	if (!io->max_xfer || io->max_xfer > (64u << 20)) /* none reported: 64 MiB commands */
		io->max_xfer = (64u << 20) - (64u << 20) % io->bs;
	if (!io->max_unmap || io->max_unmap == UINT32_MAX)
		io->max_unmap = UINT32_MAX;
	if (!io->max_unmap_desc || io->max_unmap_desc > ISC_UNMAP_MAX_DESC)
		io->max_unmap_desc = io->max_unmap_desc ? ISC_UNMAP_MAX_DESC : 1;
	if (!io->max_ws)
		io->max_ws = ISC_WS_DEFAULT_BYTES / io->bs;
	if (io->bs > sizeof(isc_zeroes))
		atomic_store(&io->no_ws, true);
	HL_INFO(ISC_COMPONENT,
	        "%s: %llu blocks of %u bytes (physical %u)%s%s%s%s, max transfer %llu bytes",
	        o->uri, (unsigned long long)io->nblocks, io->bs, o->phys_block_size,
	        wp ? ", write-protected" : "", o->can_discard ? ", unmap" : "",
	        o->zeroes_after_discard ? " (reads zeroes)" : "",
	        io->max_caw ? ", compare-and-write" : "", (unsigned long long)io->max_xfer);
	return 0;
}

static void wipe_credentials(struct isc_origin *io)
{
	explicit_bzero(io->url.secret, sizeof(io->url.secret));
	explicit_bzero(io->mutual_secret, sizeof(io->mutual_secret));
}

/* CHAP credentials from the [disk] keys (opts), when the URL has none. */
static int take_credentials(struct hl_origin *o, struct isc_origin *io,
                            const struct hl_origin_opts *opts)
{
	if (opts->chap_user) {
		if (io->url.user[0]) {
			HL_ERR(ISC_COMPONENT, "%s: CHAP credentials both in the URL and as keys", o->uri);
			return -EINVAL;
		}
		if (!opts->chap_secret || !*opts->chap_user || !*opts->chap_secret ||
		    hl_strlcpy(io->url.user, opts->chap_user, sizeof(io->url.user)) >=
		        sizeof(io->url.user) ||
		    hl_strlcpy(io->url.secret, opts->chap_secret, sizeof(io->url.secret)) >=
		        sizeof(io->url.secret)) {
			HL_ERR(ISC_COMPONENT, "%s: bad CHAP user or secret (1..255 bytes each)", o->uri);
			return -EINVAL;
		}
	}
	if (opts->mutual_user) {
		if (!io->url.user[0] || !opts->mutual_secret || !*opts->mutual_user ||
		    !*opts->mutual_secret ||
		    hl_strlcpy(io->mutual_user, opts->mutual_user, sizeof(io->mutual_user)) >=
		        sizeof(io->mutual_user) ||
		    hl_strlcpy(io->mutual_secret, opts->mutual_secret, sizeof(io->mutual_secret)) >=
		        sizeof(io->mutual_secret)) {
			HL_ERR(ISC_COMPONENT,
			       "%s: mutual CHAP needs CHAP credentials and a user and secret "
			       "(1..255 bytes each)", o->uri);
			return -EINVAL;
		}
	}
	return 0;
}

static int iscsi_open(struct hl_origin *o, const char *target, const struct hl_origin_opts *opts)
{
	struct isc_origin *io = io_of(o);
	struct iscsi_context *ctx;
	int rc;

	rc = origin_iscsi_url_parse(target, &io->url);
	if (rc) {
		HL_ERR(ISC_COMPONENT,
		       "%s: bad URL (iscsi://[user%%secret@]host[:port]/iqn/lun[?initiator=IQN&"
		       "timeout=S&qd=N])",
		       o->uri);
		return rc;
	}
	rc = take_credentials(o, io, opts);
	if (rc)
		return rc;
	if (io->url.ipv6)
		snprintf(io->portal, sizeof(io->portal), "[%s]:%u", io->url.host, io->url.port);
	else
		snprintf(io->portal, sizeof(io->portal), "%s:%u", io->url.host, io->url.port);
	if (io->url.initiator[0])
		hl_strlcpy(io->initiator, io->url.initiator, sizeof(io->initiator));
	else
		origin_iscsi_default_initiator(io->initiator, sizeof(io->initiator));
	io->id = atomic_fetch_add(&isc_next_id, 1);
	io->timeout_ns = (uint64_t)io->url.timeout_s * 1000000000ull;
	io->probe_ns = HL_MIN(io->timeout_ns / 2, ISC_PROBE_MAX_MS * 1000000ull);
	pthread_mutex_init(&io->lock, NULL);
	pthread_mutex_init(&io->ctl_lock, NULL);
	hl_list_init(&io->sessions);
	io->gateway = opts ? opts->gateway : 0;
	io->pr_key = io->gateway ? origin_iscsi_pr_key(io->gateway) : 0;
	origin_iscsi_isid_choose(o, opts);

	ctx = origin_iscsi_context_make(io, 0);
	if (!ctx) {
		rc = -ENOMEM;
		goto fail;
	}
	iscsi_set_timeout(ctx, 10);
	if (iscsi_full_connect_sync(ctx, io->portal, (int)io->url.lun) != 0) {
		const char *err = iscsi_get_error(ctx);

		HL_ERR(ISC_COMPONENT, "%s: cannot log in to %s as %s: %s", o->uri, io->portal,
		       io->initiator, err);
		/* libiscsi keeps the reason as text only; map the common ones for the caller */
		if (strstr(err, "timed out"))
			rc = -ETIMEDOUT;
		else if (strstr(err, "Authentication") || strstr(err, "Authorization"))
			rc = -EACCES;
		else
			rc = -ECONNREFUSED;
		iscsi_destroy_context(ctx);
		goto fail;
	}
	rc = probe(o, ctx);
	iscsi_logout_sync(ctx);
	iscsi_destroy_context(ctx);
	if (rc)
		goto fail;
	if (opts->block_size && opts->block_size % io->bs) {
		HL_ERR(ISC_COMPONENT,
		       "%s: the disk's block_size %u is not a multiple of the SAN's logical block "
		       "size %u",
		       o->uri, opts->block_size, io->bs);
		rc = -EINVAL;
		goto fail;
	}
	bool unswept = !origin_iscsi_isid_sweep(o); /* no data session logs in meanwhile */
	rc = origin_iscsi_ua_start(o);
	if (rc)
		goto fail;
	if (unswept)
		(void)origin_iscsi_isid_sweep_later(o);
	return 0;
fail:
	for (unsigned k = 0; k < ISC_ISID_SLOTS && io->isid.ident; k++)
		origin_iscsi_isid_release(&io->isid, k, false); /* records kept: not swept */
	pthread_mutex_destroy(&io->lock);
	pthread_mutex_destroy(&io->ctl_lock);
	wipe_credentials(io);
	return rc;
}

/*
 * Each session is torn down where its events and timers live: on its
 * reactor (in line when that is the current thread, else through a call
 * this waits for), or here once that reactor was destroyed (its destroy
 * call detached the session) or never armed anything. Freeing a session
 * from another thread while its reactor runs left its timers and socket
 * event there: a reload's close thread crashed the reactors. Runs before
 * the wrappers (counted, throttle) close, as the I/O's callbacks pass them.
 */
static void iscsi_shut(struct hl_origin *o)
{
	struct isc_origin *io = io_of(o);
	struct hl_reactor *cur = hl_reactor_current();
	struct hl_list all;

	atomic_store(&io->closing, true);
	origin_iscsi_ua_stop(o); /* no event leaves after this */
	hl_list_init(&all);
	pthread_mutex_lock(&io->lock);
	while (!hl_list_empty(&io->sessions)) {
		struct hl_list *l = io->sessions.next;

		hl_list_del(l);
		hl_list_add_tail(&all, l);
	}
	pthread_mutex_unlock(&io->lock);
	while (!hl_list_empty(&all)) {
		struct isc_session *s = (struct isc_session *)all.next;

		hl_list_del(&s->link);
		if (!atomic_load(&s->armed))
			session_free(s); /* its reactor is gone, or it never started */
		else if (s->reactor == cur)
			session_close_here(s);
		else
			session_close_remote(s);
	}
}

static void iscsi_close(struct hl_origin *o)
{
	struct isc_origin *io = io_of(o);

	iscsi_shut(o); /* nothing left when hl_origin_close() called it */
	pthread_mutex_destroy(&io->lock);
	origin_iscsi_ctl_drop(io);
	/* not swept yet: every record stays for the next open, ours (the dead run's in it) too */
	bool unswept = atomic_load(&io->unswept);
	for (unsigned k = 0; k < ISC_ISID_SLOTS && io->isid.ident; k++)
		if ((int)k != io->isid.slot)
			origin_iscsi_isid_release(&io->isid, k, false);
	if (io->isid.slot >= 0)
		origin_iscsi_isid_release(&io->isid, (unsigned)io->isid.slot,
		                          !atomic_load(&io->unclean) && !unswept);
	pthread_mutex_destroy(&io->ctl_lock);
	wipe_credentials(io);
	for (unsigned i = 0; i < TL_CACHE; i++) {
		if (tl_cache[i].id == io->id)
			tl_cache[i].id = 0;
	}
}

unsigned origin_iscsi_sessions_up(struct hl_origin *o)
{
	struct isc_origin *io = io_of(o);
	unsigned n = 0;

	pthread_mutex_lock(&io->lock);
	for (struct hl_list *l = io->sessions.next; l != &io->sessions; l = l->next)
		n += __atomic_load_n(&((struct isc_session *)l)->state, __ATOMIC_RELAXED) == ISC_UP;
	pthread_mutex_unlock(&io->lock);
	return n;
}

const struct hl_origin_ops origin_iscsi_ops = {
    .name = "iscsi",
    .scheme = "iscsi:",
    .priv_size = sizeof(struct isc_origin),
    .open = iscsi_open,
    .close = iscsi_close,
    .shut = iscsi_shut,
    .submit = iscsi_submit,
    .proof_take = origin_iscsi_proof_take,
    .proof_check = origin_iscsi_proof_check,
    .data_id = iscsi_data_id,
    .unfenced = iscsi_unfenced,
    .own_acquire = origin_iscsi_own_acquire,
    .own_renew = origin_iscsi_own_renew,
    .own_release = origin_iscsi_own_release,
    .own_peek = origin_iscsi_own_peek,
    .own_request = origin_iscsi_own_request,
    .own_refuse = origin_iscsi_own_refuse,
};
