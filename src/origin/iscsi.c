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
 * made lazily by the first submit on that reactor, like file.c's per-thread
 * ring. A context is not thread-safe, and with one per reactor every call on
 * it runs on its owner's thread: no locks and no cross-thread hand-off on the
 * I/O path, completions naturally on the submitting reactor, and the load is
 * spread over N TCP connections. The alternative (one context on a dedicated
 * reactor, hl_reactor_call both ways) costs two thread hops per I/O and puts
 * every I/O of every reactor behind one socket. The price is N sessions per
 * origin on the SAN: all use the same initiator name (so ACLs work) and
 * distinct ISIDs (same random part, qualifier = session number), and a
 * session keeps its ISID across reconnects so the SAN reinstates it (and
 * drops the old one's tasks) instead of seeing a new I_T nexus. SYNCHRONIZE
 * CACHE acts on the logical unit, so a FLUSH on one session covers writes
 * completed on the others.
 *
 * open() runs on the main thread before reactors exist: it logs in
 * synchronously once to read the capacity (READ CAPACITY 16, else 10), the
 * Block Limits and Logical Block Provisioning VPD pages and the write-protect
 * bit (MODE SENSE 6), then logs out.
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
 * ATTENTION, BUSY, TASK SET FULL, ABORTED COMMAND and NOT READY (becoming
 * ready) are retried. A session is lost on a socket error; when, with
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
 * fail with -EIO. While a session has been down longer than `timeout`,
 * submit fails at once with -EIO; the queue is bounded (-EAGAIN beyond).
 *
 * Ownership (hl_origin_opts.gateway != 0, several gateways on one LUN): a
 * SCSI-3 persistent reservation on the SAN LUN decides and enforces it.
 * Each gateway's key is "hlun" + its id (0x686c756e0000GGGG), so every
 * gateway can name the owner from READ RESERVATION. The owner holds a
 * WRITE EXCLUSIVE - REGISTRANTS ONLY reservation: every I/O session is its
 * own I_T nexus (one ISID each), and registrants-only is the type that lets
 * all of them write while holding one reservation; plain WRITE EXCLUSIVE
 * would let only the one nexus that reserved write. The reservation is
 * made by a separate session of the ownership thread (ISID qualifier 0);
 * each I/O session registers our key before its first command after an
 * acquisition and checks (READ RESERVATION) that the reservation is still
 * ours, so a preempted gateway never registers itself back in. Since a
 * session keeps its ISID across reconnects, the nexus, its registration
 * and the reservation survive a reconnect. A takeover PREEMPTs (AND
 * ABORTs) the holder's key: the SAN removes all of its registrations,
 * drops its queued commands and refuses its writes (RESERVATION CONFLICT,
 * which then fails the write with -ESHUTDOWN). Without a reservation a registrants-only LUN accepts
 * anyone's writes, so a new owner preempts every other hotlun key it finds
 * (an old owner's sessions, requests); keys of other initiators are left
 * alone, and a reservation they hold is never taken. A standby asks for
 * the disk by registering its key on its ownership session (which never
 * writes); release is SYNCHRONIZE CACHE + RELEASE, and "no reservation"
 * is what peers read as released. PR has no heartbeat (has_beat false) and
 * no place for the epoch: peers see PRgeneration as the epoch. Registrations
 * carry APTPL = 1 unless the SAN refuses it. While not the owner (or once
 * fenced) the origin refuses writes itself with -ESHUTDOWN.
 *
 * Lifetime: close() must run either on the reactor thread of every session
 * (none in the daemon) or after those reactors stopped; it never touches a
 * reactor that is not the current one, since the daemon destroys reactors
 * before it closes origins. I/O still queued then (against the contract) is
 * dropped without a callback: the callers' reactors may be gone.
 */
#include "config.h"

#include "hotlun/event.h"
#include "hotlun/log.h"
#include "hotlun/util.h"
#include "origin/origin_internal.h"

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
#include <sys/random.h>
#include <unistd.h>

#define ISC_COMPONENT "origin"

#define ISC_WAIT_MAX           4096 /* I/Os queued per session while it cannot send */
#define ISC_BACKOFF_MIN_MS     100
#define ISC_BACKOFF_MAX_MS     5000
#define ISC_CONNECT_TIMEOUT_MS 5000 /* TCP connect + login + TEST UNIT READY */
#define ISC_CMD_TIMEOUT_MIN_S  60   /* backstop: a command older than this kills the session */
#define ISC_PROBE_MAX_MS       5000 /* no answer for this long: ping; then as long again: dead */
#define ISC_TICK_MS            250  /* libiscsi timeouts, queue deadlines, login timeout */
#define ISC_ZERO_BYTES         (1u << 20)  /* WRITE_ZEROES without WRITE SAME: bytes per WRITE */
#define ISC_WS_DEFAULT_BYTES   (64u << 20) /* WRITE SAME length when the SAN gives no limit */
#define ISC_UNMAP_MAX_DESC     64
#define ISC_PR_KEY_PREFIX      0x686c756e00000000ull /* "hlun": our keys; the gateway id below */
#define ISC_PR_KEY_MASK        0xffffffffffff0000ull
#define ISC_PR_TYPE            SCSI_PERSISTENT_RESERVE_TYPE_WRITE_EXCLUSIVE_REGISTRANTS_ONLY
#define ISC_CTL_TIMEOUT_S      5   /* a PR command of the ownership thread */
#define ISC_CTL_TRIES          5   /* unit attentions and one reconnect */
#define ISC_PR_KEYS_MAX        256 /* READ KEYS: registrations looked at */

_Static_assert(sizeof(struct iovec) == sizeof(struct scsi_iovec) &&
                   offsetof(struct iovec, iov_base) == offsetof(struct scsi_iovec, iov_base) &&
                   offsetof(struct iovec, iov_len) == offsetof(struct scsi_iovec, iov_len),
               "struct scsi_iovec must match struct iovec");

/* Read-only zeroes: the WRITE SAME block and the data of zero-filling writes. */
static unsigned char isc_zeroes[ISC_ZERO_BYTES];

static atomic_uint_fast64_t isc_next_id = 1;

struct isc_origin {
	struct origin_iscsi_url url;
	char portal[ORIGIN_ISCSI_HOST_MAX + 16];
	char initiator[ORIGIN_ISCSI_NAME_MAX];
	char mutual_user[256], mutual_secret[256]; /* mutual CHAP: what the SAN answers with */
	uint64_t id; /* never reused: keys the per-thread session cache */
	uint64_t timeout_ns;
	uint64_t probe_ns; /* silence with commands in flight before a NOP-Out, and its timeout */
	uint32_t bs;       /* the SAN's logical block size */
	uint64_t nblocks;
	uint64_t max_xfer;  /* bytes per READ/WRITE command, 0 = no limit */
	uint32_t max_unmap; /* blocks per UNMAP descriptor */
	uint32_t max_unmap_desc;
	uint32_t max_ws;       /* blocks per WRITE SAME */
	uint32_t max_caw;      /* blocks per COMPARE AND WRITE, 0 = unsupported */
	bool ws_unmap;         /* WRITE SAME with UNMAP=1 deallocates and reads back zeroes */
	atomic_bool no_ws;     /* WRITE SAME(16) was refused once: write zeroes */
	atomic_bool no_sync16; /* SYNCHRONIZE CACHE(16) was refused once: use (10) */
	atomic_bool no_sync;   /* neither exists: the SAN has no volatile cache to flush */
	atomic_bool no_caw;    /* COMPARE AND WRITE was refused once (B0 promised it) */
	uint32_t isid_rnd;
	pthread_mutex_t lock; /* guards sessions and nsessions */
	struct hl_list sessions;
	unsigned nsessions;
	/* ownership among gateways (hl_origin_opts.gateway); see "Ownership" above */
	uint16_t gateway;
	uint64_t pr_key;          /* ISC_PR_KEY_PREFIX | gateway; 0: a lone gateway, none of this */
	atomic_bool owned;        /* own_acquire succeeded; no release or fence since */
	atomic_bool fenced;       /* the SAN refused a write, or a check found another holder */
	atomic_uint own_gen;      /* counts acquisitions: each session registers once per value */
	atomic_bool no_aptpl;     /* the SAN refused APTPL = 1: registrations without it */
	atomic_bool requested;    /* own_request registered our key: a failed acquire keeps it */
	atomic_uint proof_epoch;  /* counts proof_take calls: a session's next write re-registers */
	atomic_uint writes_out;   /* gateway: writes submitted and not yet completed */
	pthread_mutex_t ctl_lock; /* guards ctl: the ownership thread's PR session */
	struct iscsi_context *ctl; /* ISID qualifier 0; NULL until the first own_* op */
};

enum isc_state {
	ISC_DOWN = 0,   /* no context; the retry timer will connect */
	ISC_CONNECTING, /* context made, login in progress */
	ISC_UP,
};

/* One per (origin, reactor). Everything but `link` is touched only on `reactor`'s thread. */
struct isc_session {
	struct hl_list link; /* in isc_origin.sessions, guarded by its lock */
	struct hl_origin *o;
	struct hl_reactor *reactor;
	struct iscsi_context *ctx; /* NULL while DOWN */
	enum isc_state state; /* written on reactor only; see set_state() */
	bool broken;    /* libiscsi reported the connection gone; torn down after it returns */
	bool in_lib;    /* inside a libiscsi call that may run our callbacks */
	bool logged_up; /* was UP at least once (for the log) */
	bool dead_logged;
	bool started;     /* tick armed, first connect begun */
	bool nop_pending; /* a NOP-Out probe is out */
	uint16_t qual;    /* ISID qualifier */
	bool reg_busy;    /* gateway: the registration of this I_T nexus is in progress */
	unsigned reg_want, reg_gen; /* own_gen being registered, own_gen registered */
	unsigned proof_want, proof_seen; /* the same for proof_epoch (writes only) */
	struct scsi_task *reg_task; /* its command in flight */
	struct hl_event ev;
	struct hl_timer tick;
	struct hl_timer retry;
	struct hl_timer done_t;
	struct hl_list waitq;    /* not sent yet (or sent and to be repeated) */
	struct hl_list inflight; /* given to libiscsi */
	struct hl_list doneq;    /* finished; callbacks run from done_t / the end of a handler */
	unsigned nwait, ninflight;
	uint32_t backoff_ms;
	uint64_t down_since_ns; /* 0 while UP */
	uint64_t connect_start_ns;
	uint64_t last_rx_ns; /* last completion or NOP-In while commands were in flight */
	uint64_t nop_sent_ns;
};

/*
 * state is written only on the session's reactor (plain reads there are
 * fine), but origin_iscsi_sessions_up() reads it from any thread: the store
 * is atomic so that read is not a data race (ThreadSanitizer, iscsi_ut).
 */
static inline void set_state(struct isc_session *s, enum isc_state st)
{
	__atomic_store_n(&s->state, st, __ATOMIC_RELAXED);
}

/* Per-I/O state in hl_origin_io.priv. */
struct isc_io {
	struct hl_list link; /* in one of the session's queues */
	struct isc_session *s;
	struct scsi_task *task;
	uint64_t deadline_ns;
	uint64_t done;           /* bytes finished by earlier commands of a split I/O */
	struct iovec *chunk_iov; /* heap: iovecs of the current piece of a split READ/WRITE */
	int result;
	uint32_t cur_blocks; /* blocks the command in flight moves */
};
_Static_assert(sizeof(struct isc_io) <= sizeof(((struct hl_origin_io *)0)->priv),
               "isc_io must fit in hl_origin_io.priv");

static inline struct isc_io *iio_of(struct hl_origin_io *io)
{
	return (struct isc_io *)io->priv;
}

static inline struct hl_origin_io *io_of_link(struct hl_list *l)
{
	return (struct hl_origin_io *)((char *)l - offsetof(struct isc_io, link) -
	                               offsetof(struct hl_origin_io, priv));
}

static inline struct isc_origin *io_of(struct hl_origin *o)
{
	return hl_origin_priv(o);
}

/* ---- sessions: context, events, timers ---- */

static void session_event(struct hl_event *ev, uint32_t revents);
static void session_tick(struct hl_timer *t);
static void session_retry(struct hl_timer *t);
static void session_done_timer(struct hl_timer *t);
static void session_dispatch(struct isc_session *s);
static uint64_t pr_key_of(uint16_t gw);
static bool op_writes(enum hl_io_op op);
static void ctl_drop(struct isc_origin *io);

/* A registration step ended (or was cancelled): nothing of it is in flight any more. */
static struct scsi_task *reg_end(struct isc_session *s)
{
	struct scsi_task *t = s->reg_task;

	s->reg_task = NULL;
	s->reg_busy = false;
	return t;
}

static struct iscsi_context *context_make(struct isc_origin *io, uint16_t qual)
{
	struct iscsi_context *ctx = iscsi_create_context(io->initiator);

	if (!ctx)
		return NULL;
	if (iscsi_set_targetname(ctx, io->url.target) ||
	    iscsi_set_session_type(ctx, ISCSI_SESSION_NORMAL) ||
	    iscsi_set_header_digest(ctx, ISCSI_HEADER_DIGEST_NONE_CRC32C) ||
	    iscsi_set_isid_random(ctx, io->isid_rnd, qual) ||
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

static void finish(struct isc_session *s, struct hl_origin_io *io, int result)
{
	struct isc_io *iio = iio_of(io);

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
	if (s->logged_up)
		HL_NOTICE(ISC_COMPONENT, "iscsi://%s/%s/%u: session %u restored after %llu ms",
		          io->portal, io->url.target, io->url.lun, s->qual,
		          (unsigned long long)((hl_now_ns() - s->down_since_ns) / 1000000));
	else
		HL_INFO(ISC_COMPONENT, "iscsi://%s/%s/%u: session %u logged in", io->portal,
		        io->url.target, io->url.lun, s->qual);
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

	ctx = context_make(io, s->qual);
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
	hl_event_del(&s->ev);
	s->ctx = NULL;
	set_state(s, ISC_DOWN);
	if (ctx) {
		/* Cancels what libiscsi still holds; task_cb requeues each (s->ctx is NULL now). */
		s->in_lib = true;
		iscsi_destroy_context(ctx);
		s->in_lib = false;
	}
	/* Whatever libiscsi did not call back (it skips callbacks when not logged in). */
	while (!hl_list_empty(&s->inflight)) {
		struct hl_origin_io *ioo = io_of_link(s->inflight.next);
		struct isc_io *iio = iio_of(ioo);

		hl_list_del(&iio->link);
		s->ninflight--;
		scsi_free_scsi_task(iio->task);
		iio->task = NULL;
		if (ioo->op == HL_IO_COMPARE_AND_WRITE)
			finish(s, ioo, -EIO);
		else
			waitq_push(s, ioo, true);
	}
	/* a registration step that libiscsi did not call back: start over after the reconnect */
	scsi_free_scsi_task(reg_end(s));
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

static void session_free(struct isc_session *s, bool detach)
{
	if (detach) {
		hl_event_del(&s->ev);
		hl_timer_stop(&s->tick);
		hl_timer_stop(&s->retry);
		hl_timer_stop(&s->done_t);
	}
	if (s->ctx) {
		struct iscsi_context *ctx = s->ctx;

		s->ctx = NULL;
		s->in_lib = true;
		iscsi_destroy_context(ctx);
	}
	scsi_free_scsi_task(reg_end(s));
	free(s);
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
			hl_list_init(&s->waitq);
			hl_list_init(&s->inflight);
			hl_list_init(&s->doneq);
			hl_event_init(&s->ev, -1, session_event, s);
			hl_timer_init(&s->tick, session_tick, s);
			hl_timer_init(&s->retry, session_retry, s);
			hl_timer_init(&s->done_t, session_done_timer, s);
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
	if (!s->ninflight)
		s->last_rx_ns = hl_now_ns(); /* silence is measured from here */
	hl_list_add_tail(&s->inflight, &iio->link);
	s->ninflight++;
	return 0;
}

/* ---- gateway: the data sessions' registrations ---- */

/* Ops that change the medium: what a reservation of ISC_PR_TYPE refuses to non-registrants. */
static bool op_writes(enum hl_io_op op)
{
	return op != HL_IO_READ && op != HL_IO_FLUSH;
}

/*
 * Gateway mode refuses writes here (-ESHUTDOWN) while the origin is not
 * ours or was found fenced: the SAN would refuse them anyway while another
 * gateway holds the reservation, but not while nobody does.
 */
static bool pr_write_refused(const struct isc_origin *io, enum hl_io_op op)
{
	return io->pr_key && op_writes(op) &&
	       (!atomic_load_explicit(&io->owned, memory_order_acquire) ||
	        atomic_load_explicit(&io->fenced, memory_order_acquire));
}

static struct scsi_task *pr_out_task(struct isc_session *s, int sa, uint64_t key, uint64_t sa_key,
                                     iscsi_command_cb cb)
{
	struct isc_origin *io = io_of(s->o);
	struct scsi_persistent_reserve_out_basic p = {
	    .reservation_key = key,
	    .service_action_reservation_key = sa_key,
	    .aptpl = !atomic_load_explicit(&io->no_aptpl, memory_order_relaxed),
	};

	/* libiscsi marshals p into the task's buffer: the stack copy may go */
	return iscsi_persistent_reserve_out_task(
	    s->ctx, (int)io->url.lun, sa, SCSI_PERSISTENT_RESERVE_SCOPE_LU, ISC_PR_TYPE, &p, cb, s);
}

static void reg_unregister_cb(struct iscsi_context *ctx, int status, void *data, void *priv)
{
	struct isc_session *s = priv;

	(void)ctx;
	(void)status;
	(void)data;
	scsi_free_scsi_task(reg_end(s));
}

/* READ RESERVATION after REGISTER: the reservation must be ours, else we just opened a hole. */
static void reg_check_cb(struct iscsi_context *ctx, int status, void *data, void *priv)
{
	struct isc_session *s = priv;
	struct isc_origin *io = io_of(s->o);
	struct scsi_task *t = reg_end(s);
	uint64_t holder = 0;

	(void)data;
	if (ctx != s->ctx || status != SCSI_STATUS_GOOD) {
		/* lost, or a unit attention: registered again from the start */
		scsi_free_scsi_task(t);
		return;
	}
	if (t->datain.size >= 24 && hl_get_be32(t->datain.data + 4) >= 16)
		holder = hl_get_be64(t->datain.data + 8);
	scsi_free_scsi_task(t);
	if (holder == io->pr_key) {
		s->reg_gen = s->reg_want;
		s->proof_seen = s->proof_want;
		return;
	}
	/*
	 * Preempted between the acquisition and this session's first write:
	 * under a registrants-only reservation our registration would let
	 * this nexus write into the new owner's disk. Take it back.
	 */
	if (!atomic_exchange(&io->fenced, true))
		HL_WARN(
		    ISC_COMPONENT,
		    "iscsi://%s/%s/%u: gateway %u: the reservation is held by key 0x%016llx, not "
		    "ours: fenced",
		    io->portal, io->url.target, io->url.lun, io->gateway,
		    (unsigned long long)holder);
	s->reg_task = pr_out_task(s, SCSI_PERSISTENT_RESERVE_REGISTER_AND_IGNORE_EXISTING_KEY, 0, 0,
	                          reg_unregister_cb);
	s->reg_busy = s->reg_task != NULL;
}

static void reg_register_cb(struct iscsi_context *ctx, int status, void *data, void *priv)
{
	struct isc_session *s = priv;
	struct scsi_task *t = reg_end(s);

	(void)data;
	scsi_free_scsi_task(t);
	if (ctx != s->ctx || status != SCSI_STATUS_GOOD)
		return; /* lost, or a unit attention: the next dispatch tries again */
	s->reg_task = iscsi_persistent_reserve_in_task(s->ctx, (int)io_of(s->o)->url.lun,
	                                               SCSI_PERSISTENT_RESERVE_READ_RESERVATION, 24,
	                                               reg_check_cb, s);
	s->reg_busy = s->reg_task != NULL;
}

/*
 * Registrations belong to an I_T nexus, and each session is one (its own
 * ISID): while the origin is ours, a session registers our key (REGISTER
 * AND IGNORE EXISTING KEY, then READ RESERVATION to see that we still hold
 * it) before it sends anything, once per acquisition. A reconnect keeps
 * the ISID, hence the nexus and its registration. The same registration,
 * repeated before the first write after each proof_take, moves the SAN's
 * PRgeneration: the write marker that makes proof_check see our own writes
 * after a proof. @return true: dispatch op now.
 */
static bool session_pr_ready(struct isc_session *s, enum hl_io_op op)
{
	struct isc_origin *io = io_of(s->o);
	unsigned gen, pe;

	if (!io->pr_key || !atomic_load_explicit(&io->owned, memory_order_acquire) ||
	    atomic_load_explicit(&io->fenced, memory_order_acquire))
		return true; /* writes are refused in dispatch; reads need no key */
	if (s->reg_busy)
		return false;
	gen = atomic_load(&io->own_gen);
	pe = atomic_load(&io->proof_epoch);
	if (s->reg_gen == gen && (!op_writes(op) || s->proof_seen == pe))
		return true;
	s->reg_want = gen;
	s->proof_want = pe;
	s->reg_task = pr_out_task(s, SCSI_PERSISTENT_RESERVE_REGISTER_AND_IGNORE_EXISTING_KEY, 0,
	                          io->pr_key, reg_register_cb);
	s->reg_busy = s->reg_task != NULL;
	return false; /* a failure to queue is tried again at the next dispatch (tick) */
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

		if (!session_pr_ready(s, ioo->op))
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

	if (!r)
		return -EINVAL;
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

static struct scsi_task *probe_vpd(struct iscsi_context *ctx, int lun, int page)
{
	struct scsi_task *t = iscsi_inquiry_sync(ctx, lun, 1, page, 255);

	if (t && t->status != SCSI_STATUS_GOOD) {
		scsi_free_scsi_task(t);
		return NULL;
	}
	return t;
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
	t = probe_vpd(ctx, lun, 0x00);
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
	if (has_b0 && (t = probe_vpd(ctx, lun, 0xb0)) != NULL) {
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
	if (has_b2 && (t = probe_vpd(ctx, lun, 0xb2)) != NULL) {
		if (t->datain.size >= 6) {
			lbpu = t->datain.data[5] & 0x80;
			lbpws = t->datain.data[5] & 0x40;
		}
		scsi_free_scsi_task(t);
	}

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
	uint32_t rnd = 0;
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
	if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
		rnd = (uint32_t)hl_now_ns() ^ (uint32_t)getpid();
	io->isid_rnd = rnd & 0xffffff;
	io->id = atomic_fetch_add(&isc_next_id, 1);
	io->timeout_ns = (uint64_t)io->url.timeout_s * 1000000000ull;
	io->probe_ns = HL_MIN(io->timeout_ns / 2, ISC_PROBE_MAX_MS * 1000000ull);
	pthread_mutex_init(&io->lock, NULL);
	pthread_mutex_init(&io->ctl_lock, NULL);
	hl_list_init(&io->sessions);
	io->gateway = opts ? opts->gateway : 0;
	io->pr_key = io->gateway ? pr_key_of(io->gateway) : 0;

	ctx = context_make(io, 0);
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
	return 0;
fail:
	pthread_mutex_destroy(&io->lock);
	pthread_mutex_destroy(&io->ctl_lock);
	wipe_credentials(io);
	return rc;
}

static void iscsi_close(struct hl_origin *o)
{
	struct isc_origin *io = io_of(o);
	struct hl_reactor *cur = hl_reactor_current();

	pthread_mutex_lock(&io->lock);
	while (!hl_list_empty(&io->sessions)) {
		struct isc_session *s = (struct isc_session *)io->sessions.next;

		hl_list_del(&s->link);
		session_free(s, cur && s->reactor == cur);
	}
	pthread_mutex_unlock(&io->lock);
	pthread_mutex_destroy(&io->lock);
	ctl_drop(io);
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

/* ---- ownership among gateways: SCSI-3 persistent reservations ---- */

static uint64_t pr_key_of(uint16_t gw)
{
	return ISC_PR_KEY_PREFIX | gw;
}

/* The gateway id in one of our keys, 0 for anything else (a key of another initiator). */
static uint16_t pr_key_gateway(uint64_t key)
{
	return (key & ISC_PR_KEY_MASK) == ISC_PR_KEY_PREFIX ? (uint16_t)key : 0;
}

/* The SAN's persistent reservation state, as READ RESERVATION and READ KEYS tell it. */
struct pr_state {
	uint32_t generation;
	bool held;
	uint64_t holder; /* the reservation key of the holder */
	uint8_t type;
	unsigned nkeys;
	uint64_t keys[ISC_PR_KEYS_MAX];
};

static void ctl_drop(struct isc_origin *io)
{
	if (io->ctl) {
		iscsi_destroy_context(io->ctl);
		io->ctl = NULL;
	}
}

/* The ownership thread's own session, ISID qualifier 0 (the data sessions use 1..N). ctl_lock held.
 */
static int ctl_get(struct hl_origin *o)
{
	struct isc_origin *io = io_of(o);
	struct iscsi_context *ctx;

	if (io->ctl)
		return 0;
	ctx = context_make(io, 0);
	if (!ctx)
		return -ENOMEM;
	iscsi_set_timeout(ctx, ISC_CTL_TIMEOUT_S);
	if (iscsi_full_connect_sync(ctx, io->portal, (int)io->url.lun) != 0) {
		HL_WARN_RL(ISC_COMPONENT, "%s: PR session: cannot log in: %s", o->uri,
		           iscsi_get_error(ctx));
		iscsi_destroy_context(ctx);
		return -ENOTCONN;
	}
	io->ctl = ctx;
	return 0;
}

enum ctl_cmd { CTL_PR_OUT, CTL_PR_IN, CTL_SYNC };

/*
 * One command on the PR session, synchronously: unit attentions (a preempt
 * or a reset queues them) and transient states are repeated, a lost
 * session is made again. On 0 with CTL_PR_IN, *out holds the task (the
 * caller frees it). ctl_lock held. @return 0, -EBADE (RESERVATION
 * CONFLICT), -EINVAL (ILLEGAL REQUEST), -ENOTCONN, -EIO.
 */
static int ctl_run(struct hl_origin *o, enum ctl_cmd cmd, int sa, uint64_t key, uint64_t sa_key,
                   struct scsi_task **out)
{
	struct isc_origin *io = io_of(o);
	int lun = (int)io->url.lun, rc = -ENOTCONN;

	for (int i = 0; i < ISC_CTL_TRIES; i++) {
		struct scsi_persistent_reserve_out_basic p = {
		    .reservation_key = key,
		    .service_action_reservation_key = sa_key,
		    .aptpl = !atomic_load_explicit(&io->no_aptpl, memory_order_relaxed),
		};
		struct scsi_task *t = NULL;

		rc = ctl_get(o);
		if (rc)
			return rc;
		switch (cmd) {
		case CTL_PR_OUT:
			t = iscsi_persistent_reserve_out_sync(
			    io->ctl, lun, sa, SCSI_PERSISTENT_RESERVE_SCOPE_LU, ISC_PR_TYPE, &p);
			break;
		case CTL_PR_IN:
			t = iscsi_persistent_reserve_in_sync(io->ctl, lun, sa,
			                                     (uint16_t)(8 + 8 * ISC_PR_KEYS_MAX));
			break;
		case CTL_SYNC:
			t = iscsi_synchronizecache10_sync(io->ctl, lun, 0, 0, 0, 0);
			break;
		}
		if (!t || t->status == SCSI_STATUS_CANCELLED || t->status == SCSI_STATUS_TIMEOUT ||
		    t->status == SCSI_STATUS_ERROR) {
			HL_DEBUG(ISC_COMPONENT, "%s: PR session: %s", o->uri,
			         iscsi_get_error(io->ctl));
			scsi_free_scsi_task(t);
			ctl_drop(io);
			rc = -ENOTCONN;
			continue;
		}
		if (t->status == SCSI_STATUS_CHECK_CONDITION)
			rc = origin_iscsi_sense_errno(t->sense.key, t->sense.ascq >> 8,
			                              t->sense.ascq & 0xff);
		else
			rc = origin_iscsi_status_errno(t->status);
		if (rc == -EOPNOTSUPP || (rc == -EIO && t->status == SCSI_STATUS_CHECK_CONDITION &&
		                          t->sense.key == SCSI_SENSE_ILLEGAL_REQUEST))
			rc = -EINVAL;
		if (rc == 0 && out)
			*out = t;
		else
			scsi_free_scsi_task(t);
		if (rc != -EAGAIN)
			return rc;
	}
	return rc;
}

static int pr_out(struct hl_origin *o, int sa, uint64_t key, uint64_t sa_key)
{
	return ctl_run(o, CTL_PR_OUT, sa, key, sa_key, NULL);
}

/*
 * Register sa_key on the PR session's I_T nexus (0: unregister it), with
 * APTPL = 1 (the reservation then survives a power loss of the SAN)
 * unless the SAN refuses it. ctl_lock held.
 */
static int pr_register(struct hl_origin *o, uint64_t sa_key)
{
	struct isc_origin *io = io_of(o);
	int rc = pr_out(o, SCSI_PERSISTENT_RESERVE_REGISTER_AND_IGNORE_EXISTING_KEY, 0, sa_key);

	if (rc == -EINVAL && !atomic_exchange(&io->no_aptpl, true)) {
		HL_NOTICE(ISC_COMPONENT,
		          "%s: the SAN refuses APTPL: the reservation does not survive its restart",
		          o->uri);
		rc = pr_out(o, SCSI_PERSISTENT_RESERVE_REGISTER_AND_IGNORE_EXISTING_KEY, 0, sa_key);
	}
	return rc;
}

/* READ RESERVATION, and READ KEYS when `keys`. ctl_lock held. */
static int pr_read(struct hl_origin *o, struct pr_state *st, bool keys)
{
	struct scsi_task *t = NULL;
	const uint8_t *d;
	uint32_t len;
	int rc;

	memset(st, 0, sizeof(*st));
	rc = ctl_run(o, CTL_PR_IN, SCSI_PERSISTENT_RESERVE_READ_RESERVATION, 0, 0, &t);
	if (rc)
		return rc;
	d = t->datain.data;
	if (t->datain.size < 8) {
		scsi_free_scsi_task(t);
		return -EIO;
	}
	st->generation = hl_get_be32(d);
	len = hl_get_be32(d + 4);
	if (len >= 16 && t->datain.size >= 24) {
		st->held = true;
		st->holder = hl_get_be64(d + 8);
		st->type = d[21] & 0x0f;
	}
	scsi_free_scsi_task(t);
	if (!keys)
		return 0;
	t = NULL;
	rc = ctl_run(o, CTL_PR_IN, SCSI_PERSISTENT_RESERVE_READ_KEYS, 0, 0, &t);
	if (rc)
		return rc;
	d = t->datain.data;
	if (t->datain.size >= 8) {
		len = HL_MIN(hl_get_be32(d + 4), (uint32_t)t->datain.size - 8);
		for (uint32_t off = 0; off + 8 <= len && st->nkeys < ISC_PR_KEYS_MAX; off += 8)
			st->keys[st->nkeys++] = hl_get_be64(d + 8 + off);
	}
	scsi_free_scsi_task(t);
	return 0;
}

static void pr_info(const struct pr_state *st, uint64_t self, struct hl_own_info *info)
{
	memset(info, 0, sizeof(*info));
	info->owner = st->held ? pr_key_gateway(st->holder) : 0;
	info->epoch = st->generation;
	info->has_beat = false; /* PR has no heartbeat: a standby takes over on request only */
	info->released = !st->held;
	for (unsigned i = 0; i < st->nkeys; i++) {
		uint16_t gw = pr_key_gateway(st->keys[i]);

		if (gw && st->keys[i] != self && st->keys[i] != st->holder) {
			info->requester = gw;
			break;
		}
	}
}

static int own_check_gw(struct isc_origin *io, uint16_t gw)
{
	return io->pr_key && gw == io->gateway ? 0 : -EINVAL;
}

/*
 * Take the reservation: register, then RESERVE (free) or PREEMPT (force,
 * or a holder with our own key: a previous life of this gateway, whose
 * PR session had another ISID). Then drop every other registration of
 * ours and of other gateways: stale ones of an old owner's data sessions
 * would still let it write, since a registrants-only reservation lets
 * every registrant write.
 */
static int iscsi_own_acquire(struct hl_origin *o, uint16_t gw, uint64_t epoch, bool force,
                             char *why, size_t whylen)
{
	struct isc_origin *io = io_of(o);
	struct pr_state *st;
	int rc;

	(void)epoch; /* nowhere to keep it on the SAN: PRgeneration is what peers see */
	if (own_check_gw(io, gw))
		return -EINVAL;
	st = malloc(sizeof(*st));
	if (!st)
		return -ENOMEM;
	pthread_mutex_lock(&io->ctl_lock);
	rc = pr_read(o, st, false);
	if (rc) {
		snprintf(why, whylen, "READ RESERVATION: %s", strerror(-rc));
		goto out;
	}
	if (st->held && st->holder != io->pr_key && !pr_key_gateway(st->holder)) {
		snprintf(why, whylen, "reserved by another initiator (key 0x%016llx)",
		         (unsigned long long)st->holder);
		rc = -EBUSY;
		goto out;
	}
	if (st->held && st->holder != io->pr_key && !force) {
		snprintf(why, whylen, "owned by gateway %u", pr_key_gateway(st->holder));
		rc = -EBUSY;
		goto out;
	}
	rc = pr_register(o, io->pr_key);
	if (rc) {
		snprintf(why, whylen, "REGISTER: %s", strerror(-rc));
		goto out;
	}
	if (!st->held) {
		rc = pr_out(o, SCSI_PERSISTENT_RESERVE_RESERVE, io->pr_key, 0);
		if (rc == -EBADE) {
			snprintf(why, whylen, "another gateway reserved it first");
			/* our key left registered would read as a request to the new owner */
			if (!atomic_load(&io->requested))
				pr_register(o, 0);
			rc = -EBUSY;
			goto out;
		}
	} else if (st->holder != io->pr_key) {
		/*
		 * The fence: the holder's registrations go, the SAN refuses its
		 * writes; AND ABORT also drops the commands it has queued there, so
		 * none of its writes lands after this returns. PREEMPT alone where
		 * the SAN lacks it (an old write may then still complete).
		 */
		rc = pr_out(o, SCSI_PERSISTENT_RESERVE_PREEMPT_AND_ABORT, io->pr_key, st->holder);
		if (rc == -EINVAL)
			rc = pr_out(o, SCSI_PERSISTENT_RESERVE_PREEMPT, io->pr_key, st->holder);
		if (rc == -EBADE) {
			/* our registration went in between: another gateway preempted us */
			snprintf(why, whylen, "preempted while taking over");
			rc = -ESHUTDOWN;
			goto out;
		}
		if (rc == 0)
			HL_NOTICE(ISC_COMPONENT, "%s: gateway %u preempted gateway %u", o->uri, gw,
			          pr_key_gateway(st->holder));
	}
	if (rc) {
		snprintf(why, whylen, "RESERVE/PREEMPT: %s", strerror(-rc));
		goto out;
	}
	/* this nexus holds it now; preempting our own key removes our other registrations */
	rc = pr_out(o, SCSI_PERSISTENT_RESERVE_PREEMPT, io->pr_key, io->pr_key);
	if (rc == 0)
		rc = pr_read(o, st, true);
	for (unsigned i = 0; rc == 0 && i < st->nkeys; i++) {
		if (st->keys[i] != io->pr_key && pr_key_gateway(st->keys[i])) {
			bool seen = false;

			/* one entry per registration: a key's first PREEMPT removed them all */
			for (unsigned j = 0; j < i; j++)
				seen |= st->keys[j] == st->keys[i];
			if (!seen)
				rc = pr_out(o, SCSI_PERSISTENT_RESERVE_PREEMPT, io->pr_key,
				            st->keys[i]);
			if (rc == -EBADE)
				rc = 0; /* gone meanwhile (it unregistered): nothing left to remove
				         */
		}
	}
	if (rc == 0 && (!st->held || st->holder != io->pr_key))
		rc = -ESHUTDOWN;
	if (rc) {
		snprintf(why, whylen, "%s",
		         rc == -EBADE || rc == -ESHUTDOWN ? "preempted while taking over"
		                                          : strerror(-rc));
		if (rc == -EBADE)
			rc = -ESHUTDOWN;
		goto out;
	}
	atomic_store(&io->fenced, false);
	atomic_store(&io->requested, false);
	atomic_fetch_add(&io->own_gen, 1);
	atomic_store(&io->owned, true);
	HL_INFO(ISC_COMPONENT, "%s: gateway %u holds the reservation (PRgeneration %u)", o->uri, gw,
	        st->generation);
out:
	pthread_mutex_unlock(&io->ctl_lock);
	free(st);
	return rc;
}

static int iscsi_own_renew(struct hl_origin *o, uint16_t gw, uint64_t epoch,
                           struct hl_own_info *info)
{
	struct isc_origin *io = io_of(o);
	struct pr_state *st;
	bool ours;
	int rc;

	(void)epoch;
	if (own_check_gw(io, gw))
		return -EINVAL;
	st = malloc(sizeof(*st));
	if (!st)
		return -ENOMEM;
	pthread_mutex_lock(&io->ctl_lock);
	rc = pr_read(o, st, true);
	pthread_mutex_unlock(&io->ctl_lock);
	if (rc)
		goto out;
	pr_info(st, io->pr_key, info);
	ours = false;
	for (unsigned i = 0; st->held && st->holder == io->pr_key && i < st->nkeys; i++)
		ours |= st->keys[i] == io->pr_key;
	if (!ours || atomic_load(&io->fenced)) {
		if (!atomic_exchange(&io->fenced, true))
			HL_WARN(ISC_COMPONENT, "%s: gateway %u lost the reservation (%s)", o->uri,
			        gw, st->held ? "preempted" : "released or cleared");
		atomic_store(&io->owned, false);
		rc = -ESHUTDOWN;
	}
out:
	free(st);
	return rc;
}

/*
 * Hand over: SYNCHRONIZE CACHE (durable), then RELEASE. No reservation is
 * what peers read as released. Our registrations stay (without a
 * reservation they grant nothing); the next owner preempts them.
 */
static int iscsi_own_release(struct hl_origin *o, uint16_t gw, uint64_t epoch)
{
	struct isc_origin *io = io_of(o);
	int rc;

	(void)epoch;
	if (own_check_gw(io, gw))
		return -EINVAL;
	atomic_store(&io->owned, false);
	pthread_mutex_lock(&io->ctl_lock);
	rc = ctl_run(o, CTL_SYNC, 0, 0, 0, NULL);
	if (rc == -EINVAL)
		rc = 0; /* no SYNCHRONIZE CACHE: no volatile cache */
	if (rc == 0)
		rc = pr_out(o, SCSI_PERSISTENT_RESERVE_RELEASE, io->pr_key, 0);
	if (rc == -EBADE)
		rc = 0; /* not registered any more: preempted, nothing of ours to release */
	pthread_mutex_unlock(&io->ctl_lock);
	return rc;
}

static int iscsi_own_peek(struct hl_origin *o, struct hl_own_info *info)
{
	struct isc_origin *io = io_of(o);
	struct pr_state *st;
	int rc;

	if (!io->pr_key)
		return -EINVAL;
	st = malloc(sizeof(*st));
	if (!st)
		return -ENOMEM;
	pthread_mutex_lock(&io->ctl_lock);
	rc = pr_read(o, st, true);
	pthread_mutex_unlock(&io->ctl_lock);
	if (rc == 0) {
		pr_info(st, io->pr_key, info);
		if (st->held && !info->owner)
			info->released =
			    false; /* another initiator's reservation: not ours to take */
	}
	free(st);
	return rc;
}

/* Ask: our key, registered on the PR session's nexus, is what the owner's renew reports. */
static int iscsi_own_request(struct hl_origin *o, uint16_t gw)
{
	struct isc_origin *io = io_of(o);
	int rc;

	if (own_check_gw(io, gw))
		return -EINVAL;
	pthread_mutex_lock(&io->ctl_lock);
	rc = pr_register(o, io->pr_key);
	if (rc == 0)
		atomic_store(&io->requested, true);
	pthread_mutex_unlock(&io->ctl_lock);
	return rc;
}

/*
 * Warm restart proofs, for a gateway (hl_origin_opts.gateway; a lone
 * gateway proves nothing: nothing on a SAN LUN tells whether another
 * initiator wrote it while hotlund was down, and the disk starts cold
 * unless the admin declares exclusive = yes, hl_origin_proof_take's
 * "excl:" proof). The token is "iscsi-pr:KEY:PRGENERATION:SIZE", taken
 * while our key holds the reservation (registrations with APTPL, so it
 * survives a power loss of the SAN). While our key holds a registrants-only
 * reservation only our nexuses can write, and every change of holder or
 * registrations moves PRgeneration; our own writes after the proof move it
 * too (each session re-registers before its first write after a proof,
 * session_pr_ready). So: still our key, same PRgeneration -> unchanged;
 * anything else -> cannot tell. A proof is not taken while a write is out:
 * it could complete after the proof without having moved PRgeneration.
 * A release ends what a proof can show (nothing is reserved then).
 */
#define ISC_PROOF_PREFIX "iscsi-pr:"

static int iscsi_proof_take(struct hl_origin *o, const char *tag, bool final, char *proof,
                            size_t len)
{
	struct isc_origin *io = io_of(o);
	struct pr_state *st;
	int rc, n;

	(void)tag;
	if (!io->pr_key)
		return -EOPNOTSUPP;
	/* not ours: no proof, and no epoch bump (it would make our sessions register again) */
	if (!atomic_load(&io->owned) || atomic_load(&io->fenced))
		return -EAGAIN;
	/* first the epoch (later writes re-register), then the writes already out */
	atomic_fetch_add(&io->proof_epoch, 1);
	if (atomic_load(&io->writes_out))
		return -EAGAIN;
	st = malloc(sizeof(*st));
	if (!st)
		return -ENOMEM;
	pthread_mutex_lock(&io->ctl_lock);
	rc = final ? ctl_run(o, CTL_SYNC, 0, 0, 0, NULL) : 0;
	if (rc == -EINVAL)
		rc = 0; /* no SYNCHRONIZE CACHE: no volatile cache */
	if (rc == 0)
		rc = pr_read(o, st, false);
	pthread_mutex_unlock(&io->ctl_lock);
	if (rc == 0 && (!st->held || st->holder != io->pr_key))
		rc = -EAGAIN; /* not ours (any more): the ownership module will hear it */
	if (rc == 0) {
		n = snprintf(proof, len, ISC_PROOF_PREFIX "%016llx:%u:%llu",
		             (unsigned long long)io->pr_key, st->generation,
		             (unsigned long long)o->size);
		if (n < 0 || (size_t)n >= len)
			rc = -EOPNOTSUPP;
	} else if (rc != -EAGAIN) {
		rc = -EAGAIN; /* the SAN did not answer: try again later */
	}
	free(st);
	return rc;
}

static int iscsi_proof_check(struct hl_origin *o, const char *tag, const char *proof,
                             hl_origin_changed_fn changed, void *arg, char *why, size_t whylen)
{
	struct isc_origin *io = io_of(o);
	unsigned long long key, size;
	unsigned gen;
	struct pr_state *st;
	int n = 0, rc;

	(void)tag;
	(void)changed;
	(void)arg;
	if (!proof || strncmp(proof, ISC_PROOF_PREFIX, strlen(ISC_PROOF_PREFIX)) ||
	    sscanf(proof + strlen(ISC_PROOF_PREFIX), "%16llx:%u:%llu%n", &key, &gen, &size, &n) !=
	        3 ||
	    proof[strlen(ISC_PROOF_PREFIX) + (size_t)n] != '\0') {
		snprintf(why, whylen, "not a reservation proof");
		return -ESTALE;
	}
	if (!io->pr_key) {
		snprintf(why, whylen, "iscsi origin without a gateway id proves nothing");
		return -ESTALE;
	}
	if (key != io->pr_key) {
		snprintf(why, whylen, "the proof is of another gateway's key");
		return -ESTALE;
	}
	if (size != o->size) {
		snprintf(why, whylen, "size changed");
		return -ESTALE;
	}
	st = malloc(sizeof(*st));
	if (!st) {
		snprintf(why, whylen, "out of memory");
		return -ESTALE;
	}
	pthread_mutex_lock(&io->ctl_lock);
	rc = pr_read(o, st, false);
	pthread_mutex_unlock(&io->ctl_lock);
	if (rc)
		snprintf(why, whylen, "READ RESERVATION: %s", strerror(-rc));
	else if (!st->held)
		snprintf(why, whylen, "no reservation (released or lost)");
	else if (st->holder != io->pr_key)
		snprintf(why, whylen, "reserved by key 0x%016llx", (unsigned long long)st->holder);
	else if (st->generation != gen)
		snprintf(why, whylen, "PRgeneration %u, proof %u", st->generation, gen);
	else
		snprintf(why, whylen, "our reservation held throughout (PRgeneration %u)", gen);
	rc = !rc && st->held && st->holder == io->pr_key && st->generation == gen ? 0 : -ESTALE;
	free(st);
	return rc;
}

const struct hl_origin_ops origin_iscsi_ops = {
    .name = "iscsi",
    .scheme = "iscsi:",
    .priv_size = sizeof(struct isc_origin),
    .open = iscsi_open,
    .close = iscsi_close,
    .submit = iscsi_submit,
    .proof_take = iscsi_proof_take,
    .proof_check = iscsi_proof_check,
    .own_acquire = iscsi_own_acquire,
    .own_renew = iscsi_own_renew,
    .own_release = iscsi_own_release,
    .own_peek = iscsi_own_peek,
    .own_request = iscsi_own_request,
};
