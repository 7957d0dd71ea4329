/*
 * tx_uring.c - connection sends through io_uring ([global] send_uring,
 * hotlun.conf(5)): one ring per reactor thread, shared by the connections
 * of that reactor; a connection's turn-end send becomes one IORING_OP_SENDMSG
 * SQE, and every SQE of a turn reaches the kernel with one io_uring_enter
 * (a turn hook), after which the CQEs that completed inline are reaped at
 * once. A send the socket cannot take now is polled by io_uring itself (no
 * EPOLLOUT); its CQE comes later, seen through the ring's own descriptor in
 * the reactor's epoll set. The descriptor joins the set once and stays there,
 * idle or not, until the reactor is destroyed (a destroy call), the thread
 * ends, or an idle ring serves another reactor of the thread: leaving and
 * rejoining at every idle turn cost two epoll_ctl per QD1 I/O. A completion may
 * start the connection's next send in the same turn; as with sendmsg, a
 * connection sends at most ISCSI_TX_PER_TURN bytes a turn (conn.c counts
 * them from its CQEs, then waits for EPOLLOUT on the next turn).
 *
 * Lifetime hazards (conn.c keeps them): a connection has at most one send in
 * flight; until its CQE the msghdr, the iovecs and every queued buffer they
 * point at stay alive, and the connection is not freed (conn_maybe_free
 * waits on tx_inflight). A connection closed meanwhile shuts its socket down
 * first, which ends a send waiting for room with an error.
 *
 * Measured against the sendmsg path in docs/bench-hit-path.md ("The network
 * side ..."): off by default.
 */
#include "config.h"

#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hotlun/event_uring.h"
#include "hotlun/log.h"
#include "iscsi/iscsi_internal.h"

#define TXU_ENTRIES 256

struct tx_ring {
	struct io_uring ring;
	struct hl_uring_watch watch; /* the ring's fd in a reactor's epoll set (event_uring.h) */
	struct hl_turn_hook hook; /* io_uring_submit at the end of the turn */
	unsigned inflight; /* SQEs prepared and not yet reaped */
};

static __thread struct tx_ring *tl_txr;
static __thread bool tl_txr_failed;
static pthread_key_t txr_key;
static pthread_once_t txr_once = PTHREAD_ONCE_INIT;

/* The ring leaves its reactor: its hook must not stay queued there. */
static void txr_detach(struct hl_uring_watch *w)
{
	struct tx_ring *r = w->arg;

	hl_turn_hook_cancel(&r->hook);
}

static void txr_destroy(void *p)
{
	struct tx_ring *r = p;

	/*
	 * Thread exit. Still attached means the reactor lives (a destroyed one
	 * detached the ring first); closing the ring cancels what is left.
	 */
	if (!r)
		return;
	hl_uring_watch_detach(&r->watch);
	io_uring_queue_exit(&r->ring);
	free(r);
	tl_txr = NULL;
}

static void txr_key_make(void)
{
	pthread_key_create(&txr_key, txr_destroy);
}

static void txr_reap(struct tx_ring *r);

static void txr_event(struct hl_event *ev, uint32_t revents)
{
	(void)revents;
	txr_reap(ev->arg);
}

static void txr_submit(struct tx_ring *r)
{
	int rc;

	if (!io_uring_sq_ready(&r->ring))
		return;
	do
		rc = io_uring_submit(&r->ring);
	while (rc == -EINTR);
	if (rc < 0) {
		/* the SQEs stay queued; a later turn (any CQE or send) submits them */
		HL_WARN_RL(ISCSI_LOG, "io_uring_submit (sends): %s", strerror(-rc));
	}
	txr_reap(r);
}

static void txr_hook(struct hl_turn_hook *h)
{
	txr_submit(h->arg);
}

static struct tx_ring *txr_create(void)
{
	struct io_uring_params p;
	unsigned flags =
	    IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_SINGLE_ISSUER;
	struct tx_ring *r = calloc(1, sizeof(*r));
	int rc;

	if (!r)
		return NULL;
	for (;;) {
		memset(&p, 0, sizeof(p));
		p.flags = flags;
		rc = io_uring_queue_init_params(TXU_ENTRIES, &r->ring, &p);
		if (rc != -EINVAL || !flags)
			break;
		flags = 0; /* an older kernel: without the optional flags */
	}
	if (rc) {
		free(r);
		tl_txr_failed = true;
		HL_NOTICE(ISCSI_LOG, "io_uring for sends unavailable (%s): using sendmsg",
		          strerror(-rc));
		return NULL;
	}
	/* tests look for this line: the switch took effect on this thread */
	HL_NOTICE(ISCSI_LOG, "%s: iSCSI sends through io_uring",
	          hl_reactor_current() ? hl_reactor_name(hl_reactor_current()) : "-");
	hl_uring_watch_init(&r->watch, r->ring.ring_fd, txr_event, txr_detach, r);
	hl_turn_hook_init(&r->hook, txr_hook, r);
	pthread_once(&txr_once, txr_key_make);
	pthread_setspecific(txr_key, r);
	tl_txr = r;
	return r;
}

/* The thread's ring, watched by reactor re; NULL: send with sendmsg. */
static struct tx_ring *txr_get(struct hl_reactor *re)
{
	struct tx_ring *r = tl_txr;

	if (!r) {
		if (tl_txr_failed)
			return NULL;
		r = txr_create();
		if (!r)
			return NULL;
	}
	/* NULL when another reactor on this thread has sends in flight */
	if (hl_uring_watch_attach(&r->watch, re, r->inflight || io_uring_sq_ready(&r->ring)))
		return NULL;
	return r;
}

static void txr_cqe(void *ctx, void *data, int res)
{
	struct tx_ring *r = ctx;

	r->inflight--;
	iscsi_conn_send_done(data, res);
}

/*
 * Only what is there now (a completion may queue the connection's next
 * send); more connections in flight than the CQ holds: hl_uring_reap gets
 * the rest from the kernel.
 */
static void txr_reap(struct tx_ring *r)
{
	hl_uring_reap(&r->ring, false, txr_cqe, r);
}

int iscsi_tx_uring_send(struct iscsi_conn *c, const struct msghdr *msg)
{
	struct tx_ring *r;
	struct io_uring_sqe *sqe;

	if (!c->reactor || hl_reactor_current() != c->reactor || !c->txu)
		return -EAGAIN;
	r = txr_get(c->reactor);
	if (!r)
		return -ENOSYS;
	sqe = io_uring_get_sqe(&r->ring);
	if (!sqe) {
		txr_submit(r);
		sqe = io_uring_get_sqe(&r->ring);
		if (!sqe)
			return -EBUSY;
	}
	/* the kernel reads msghdr and iovecs at submit or later: both live in c->txu */
	c->txu->msg = *msg;
	io_uring_prep_sendmsg(sqe, c->fd, &c->txu->msg, MSG_NOSIGNAL);
	io_uring_sqe_set_data(sqe, c);
	r->inflight++;
	c->tx_inflight = true;
	hl_turn_hook_queue(c->reactor, &r->hook);
	return 0;
}
