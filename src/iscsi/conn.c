/*
 * conn.c - one iSCSI connection on its reactor: non-blocking socket, the
 * receive loop (one buffer, many PDUs per read), the send queue written with
 * writev, StatSN/ExpCmdSN/MaxCmdSN bookkeeping, Reject, login and NOP
 * timers, and the connection's lifetime (it is freed only once no task is
 * left inside the scsi layer).
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "hotlun/log.h"
#include "iscsi/iscsi_internal.h"

#define RX_READS_PER_EVENT 4 /* fairness: at most this many full buffers per wakeup */
#define TX_POOL_MAX        256

static void conn_event(struct hl_event *ev, uint32_t revents);
static void conn_maybe_free(struct iscsi_conn *c);
static void conn_rx_kick(struct iscsi_conn *c);
static bool conn_tx_full(const struct iscsi_conn *c);

static void conn_enter(struct iscsi_conn *c)
{
	c->busy++;
}

/*
 * Reading stops while the send queue is full (conn_tx_full), and the
 * WRITE data not read meanwhile may already be in the socket: that
 * silence is ours, not the initiator's. Note when reading stops and
 * starts again (at the end of each entry point, where it can change);
 * the Data-Out timer judges nothing in between (iscsi_dout_tick).
 */
static void conn_rx_pause_note(struct iscsi_conn *c)
{
	bool full = conn_tx_full(c);
	uint64_t now;

	if (full == (c->rx_paused_ns != 0))
		return;
	now = hl_now_ns();
	if (full) {
		c->rx_paused_ns = now ? now : 1;
	} else {
		iscsi_dout_resume(c, now - c->rx_paused_ns);
		c->rx_paused_ns = 0;
	}
}

/*
 * An entry point ends: what it queued is sent at the end of the reactor
 * turn, with whatever the turn's other completions queue (one sendmsg for
 * a burst of hits instead of one each); outside a running reactor, now.
 */
static void conn_leave(struct iscsi_conn *c)
{
	if (c->busy > 1) {
		c->busy--;
		return;
	}
	/* still busy while flushing: a close inside must not free under us */
	if (c->state != CONN_CLOSED &&
	    (hl_list_empty(&c->txq) || hl_turn_hook_queue(c->reactor, &c->tx_hook))) {
		iscsi_conn_flush(c);
		conn_rx_kick(c);
	}
	if (c->state == CONN_FFP)
		conn_rx_pause_note(c);
	c->busy = 0;
	conn_maybe_free(c);
}

static void conn_turn_end(struct hl_turn_hook *h)
{
	struct iscsi_conn *c = h->arg;

	c->busy++;
	if (c->state != CONN_CLOSED) {
		iscsi_conn_flush(c);
		conn_rx_kick(c);
	}
	if (c->state == CONN_FFP)
		conn_rx_pause_note(c);
	c->busy--;
	conn_maybe_free(c);
}

/* ---- receive ---- */

static int rx_header_cb(void *ctx, struct iscsi_rx *rx)
{
	struct iscsi_conn *c = ctx;

	if (c->state == CONN_FFP)
		return iscsi_ffp_header(c, rx);
	return 0;
}

/*
 * Has the connection as much on its way out as it may: read data
 * (ISCSI_TX_HIGH), or PDUs of any size (ISCSI_TX_PDUS_HIGH)?
 */
static bool conn_tx_full(const struct iscsi_conn *c)
{
	return c->tx_bytes + c->rd_inflight > ISCSI_TX_HIGH || c->tx_pdus > ISCSI_TX_PDUS_HIGH;
}

/* May the connection take another PDU in this reactor turn? */
static bool conn_may_take(const struct iscsi_conn *c)
{
	return !conn_tx_full(c) && c->rd_started - c->rd_turn_mark < ISCSI_RX_READ_PER_TURN;
}

static int rx_pdu_cb(void *ctx, struct iscsi_rx *rx)
{
	struct iscsi_conn *c = ctx;
	int rc;

	c->last_rx_ns = hl_now_ns();
	c->nop_outstanding = false;
	rc = iscsi_conn_handle_pdu(c, rx);
	/*
	 * The rest of the received bytes wait (conn_rx_kick): until the initiator
	 * reads, or for the next turn when this one started enough READ data.
	 */
	if (rc == 0 && !conn_may_take(c))
		iscsi_rx_yield(rx);
	return rc;
}

static const struct iscsi_rx_ops conn_rx_ops = {
    .header = rx_header_cb,
    .pdu = rx_pdu_cb,
};

int iscsi_conn_handle_pdu(struct iscsi_conn *c, struct iscsi_rx *rx)
{
	uint8_t op = bhs_opcode(&rx->bhs);

	HL_DEBUG(ISCSI_LOG, "%s: rx %s itt 0x%x dsl %u", c->peer_str, iscsi_opcode_name(op),
	         bhs_itt(&rx->bhs), rx->dsl);
	switch (c->state) {
	case CONN_LOGIN:
		/* progress: a full portal evicts the connection that shows the least (server.c) */
		atomic_store_explicit(&c->login_pdu_ns, hl_now_ns(), memory_order_relaxed);
		if (op != ISCSI_OP_LOGIN_REQ) {
			HL_NOTICE(ISCSI_LOG, "%s: %s during login, closing", c->peer_str,
			          iscsi_opcode_name(op));
			return -EPROTO;
		}
		return iscsi_login_handle(c, rx);
	case CONN_FFP:
		if (op != ISCSI_OP_NOP_OUT) /* answering pings keeps no discovery session busy */
			c->active_ns = hl_now_ns();
		return iscsi_ffp_handle(c, rx);
	default:
		return 0; /* logged out or closing: ignore the rest */
	}
}

/*
 * Feed the received bytes not yet taken. @return true when all were taken;
 * false when the rx yielded (the rest stays in rbuf) or the connection closed.
 */
static bool conn_feed(struct iscsi_conn *c)
{
	long rc = iscsi_rx_feed(&c->rx, c->rbuf + c->rbuf_off, c->rbuf_len - c->rbuf_off);

	if (rc < 0) {
		if (c->state != CONN_CLOSED)
			HL_NOTICE(ISCSI_LOG, "%s: receive error (%s), closing", c->peer_str,
			          rc == -EBADMSG ? "header digest" : strerror((int)-rc));
		iscsi_conn_close(c, "protocol error");
		return false;
	}
	c->rbuf_off += (uint32_t)rc;
	if (c->rbuf_off < c->rbuf_len)
		return false;
	c->rbuf_off = c->rbuf_len = 0;
	return c->state != CONN_CLOSED;
}

static void conn_read(struct iscsi_conn *c)
{
	c->rd_turn_mark = c->rd_started;
	/* bytes left over from a yield go first, in order */
	if (c->rbuf_off < c->rbuf_len && !conn_feed(c))
		return;
	for (int i = 0; i < RX_READS_PER_EVENT && c->state != CONN_CLOSED && conn_may_take(c);
	     i++) {
		ssize_t n = recv(c->fd, c->rbuf, ISCSI_RBUF_SIZE, 0);
		if (n == 0) {
			iscsi_conn_close(c, "peer closed");
			return;
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return;
			iscsi_conn_close(c, "recv error");
			return;
		}
		c->rbuf_off = 0;
		c->rbuf_len = (uint32_t)n;
		if (!conn_feed(c) || (size_t)n < ISCSI_RBUF_SIZE)
			return;
	}
}

/* The connection yielded with bytes left in rbuf and may take PDUs again: feed them. */
static void rx_resume(struct hl_timer *t)
{
	struct iscsi_conn *c = t->arg;

	conn_enter(c);
	c->rd_turn_mark = c->rd_started;
	if (c->state != CONN_CLOSED && c->rbuf_off < c->rbuf_len && !conn_tx_full(c))
		conn_feed(c);
	conn_leave(c);
}

/*
 * Called when an entry point ends: leftover bytes are fed from a timer on
 * the next reactor turn, not from here, so a connection that yielded takes
 * its turn after the others (and never inside another connection's call).
 */
static void conn_rx_kick(struct iscsi_conn *c)
{
	if (c->rbuf_off < c->rbuf_len && !conn_tx_full(c) && !hl_timer_pending(&c->rx_timer) &&
	    c->reactor)
		hl_timer_start(c->reactor, &c->rx_timer, 0);
}

static void conn_set_mask(struct iscsi_conn *c, uint32_t mask)
{
	if (c->state == CONN_CLOSED || c->ev_mask == mask)
		return;
	if (hl_event_mod(&c->ev, mask) == 0)
		c->ev_mask = mask;
}

/*
 * What to watch: EPOLLOUT while something waits to be sent and no send is in
 * flight through io_uring (which polls the socket itself); EPOLLIN
 * only while the read data on its way out is below the high-water mark and
 * nothing received waits in rbuf, so an initiator that does not read its
 * responses cannot make us queue (or read from the cache) without bound.
 */
static uint32_t conn_wanted_mask(const struct iscsi_conn *c)
{
	uint32_t m = conn_tx_full(c) || c->rbuf_off < c->rbuf_len ? 0 : EPOLLIN;

	if (!hl_list_empty(&c->txq) && !c->tx_inflight)
		m |= EPOLLOUT;
	return m;
}

static bool out_defer(void)
{
	static _Atomic int v = -1;
	int x = atomic_load_explicit(&v, memory_order_relaxed);

	if (x < 0) {
		const char *e = getenv("HOTLUN_OUT_DEFER");
		x = !(e && e[0] == '0');
		atomic_store_explicit(&v, x, memory_order_relaxed);
	}
	return x;
}

static void conn_event(struct hl_event *ev, uint32_t revents)
{
	struct iscsi_conn *c = ev->arg;

	conn_enter(c);
	if ((revents & EPOLLOUT) && (!c->reactor || !out_defer()))
		iscsi_conn_flush(c);
	if (c->state != CONN_CLOSED && (revents & (EPOLLIN | EPOLLHUP | EPOLLERR)) &&
	    !conn_tx_full(c))
		conn_read(c);
	conn_leave(c);
}

/* ---- send ---- */

static struct iscsi_tx *tx_alloc(struct iscsi_conn *c)
{
	struct iscsi_tx *tx;

	if (!hl_list_empty(&c->tx_free)) {
		tx = hl_list_first(&c->tx_free, struct iscsi_tx, link);
		hl_list_del(&tx->link);
		c->tx_nfree--;
	} else {
		tx = malloc(sizeof(*tx));
		if (!tx)
			return NULL;
	}
	tx->task = NULL;
	tx->owned = NULL;
	tx->close_after = false;
	return tx;
}

static void tx_release(struct iscsi_conn *c, struct iscsi_tx *tx)
{
	struct iscsi_task *t = tx->task;

	free(tx->owned);
	if (c->tx_nfree < TX_POOL_MAX) {
		hl_list_add(&c->tx_free, &tx->link);
		c->tx_nfree++;
	} else {
		free(tx);
	}
	if (t)
		iscsi_task_put(t);
}

static void put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

int iscsi_conn_queue(struct iscsi_conn *c, const struct iscsi_bhs *bhs, const void *data,
                     uint32_t len, struct iscsi_task *task, void *owned, bool close_after)
{
	if (c->state == CONN_CLOSED) {
		free(owned);
		return -ENOTCONN;
	}
	struct iscsi_tx *tx = tx_alloc(c);
	if (!tx) {
		free(owned);
		return -ENOMEM;
	}
	memcpy(tx->hdr, bhs->b, ISCSI_BHS_LEN);
	tx->hdr[4] = 0;
	hl_put_be24(&tx->hdr[5], len);
	tx->hdr_len = ISCSI_BHS_LEN;
	if (c->tx_hdigest) {
		put_le32(&tx->hdr[ISCSI_BHS_LEN], iscsi_crc32c(0, tx->hdr, ISCSI_BHS_LEN));
		tx->hdr_len += ISCSI_DIGEST_LEN;
	}
	tx->data = data;
	tx->data_len = len;
	tx->trailer_len = 0;
	if (len) {
		uint32_t pad = iscsi_pad4(len);
		memset(tx->trailer, 0, pad);
		tx->trailer_len = pad;
		if (c->tx_ddigest) {
			uint32_t crc = iscsi_crc32c(0, data, len);
			if (pad)
				crc = iscsi_crc32c(crc, tx->trailer, pad);
			put_le32(&tx->trailer[pad], crc);
			tx->trailer_len += ISCSI_DIGEST_LEN;
		}
	}
	tx->owned = owned;
	tx->close_after = close_after;
	if (task) {
		task->refs++;
		tx->task = task;
	}
	c->tx_bytes += tx->hdr_len + tx->data_len + tx->trailer_len;
	c->tx_pdus++;
	hl_list_add_tail(&c->txq, &tx->link);
	HL_DEBUG(ISCSI_LOG, "%s: tx %s itt 0x%x dsl %u", c->peer_str,
	         iscsi_opcode_name(bhs_opcode(bhs)), bhs_itt(bhs), len);
	return 0;
}

/* Close the socket (if still open) and give back its descriptor count. */
static void conn_close_fd(struct iscsi_conn *c)
{
	if (c->fd < 0)
		return;
	close(c->fd);
	c->fd = -1;
	if (c->fd_counted)
		atomic_fetch_sub(&c->srv->n_conn_fds, 1);
	c->fd_counted = false;
}

/* The iovecs of what txq holds from tx_off on, at most ISCSI_IOV_MAX. @return their count. */
static int tx_fill_iov(struct iscsi_conn *c, struct iovec *iov)
{
	uint32_t skip = c->tx_off;
	struct iscsi_tx *tx;
	int cnt = 0;

	hl_list_for_each_entry(tx, &c->txq, link)
	{
		const void *parts[3] = {tx->hdr, tx->data, tx->trailer};
		uint32_t lens[3] = {tx->hdr_len, tx->data_len, tx->trailer_len};
		for (int i = 0; i < 3 && cnt < ISCSI_IOV_MAX; i++) {
			if (skip >= lens[i]) {
				skip -= lens[i];
				continue;
			}
			iov[cnt].iov_base = (uint8_t *)parts[i] + skip;
			iov[cnt].iov_len = lens[i] - skip;
			skip = 0;
			cnt++;
		}
		if (cnt >= ISCSI_IOV_MAX - 3)
			break;
	}
	return cnt;
}

/*
 * n bytes of txq went out: release the entries sent whole. @return true when
 * one of them closes the connection (closed here).
 */
static bool tx_consume(struct iscsi_conn *c, size_t n)
{
	size_t left = n + c->tx_off;
	bool close_now = false;

	c->tx_bytes -= n;
	c->tx_off = 0;
	while (!hl_list_empty(&c->txq)) {
		struct iscsi_tx *tx = hl_list_first(&c->txq, struct iscsi_tx, link);
		size_t total = tx->hdr_len + tx->data_len + tx->trailer_len;
		if (left < total) {
			c->tx_off = (uint32_t)left;
			break;
		}
		left -= total;
		hl_list_del(&tx->link);
		c->tx_pdus--;
		if (tx->close_after)
			close_now = true;
		tx_release(c, tx);
	}
	if (close_now)
		iscsi_conn_close(c, "done");
	return close_now;
}

static void tx_release_all(struct iscsi_conn *c)
{
	while (!hl_list_empty(&c->txq)) {
		struct iscsi_tx *tx = hl_list_first(&c->txq, struct iscsi_tx, link);
		hl_list_del(&tx->link);
		tx_release(c, tx);
	}
	c->tx_off = 0;
	c->tx_bytes = 0;
	c->tx_pdus = 0;
}

/*
 * Write what the socket takes, up to ISCSI_TX_PER_TURN bytes: a connection
 * whose peer reads fast does not keep the reactor from the others either;
 * EPOLLOUT stays on while anything is left and brings us back. With
 * send_uring the whole of it (up to ISCSI_IOV_MAX iovecs) goes as one SQE
 * instead, and iscsi_conn_send_done goes on from its CQE.
 */
/* HOTLUN_TX_PER_TURN (bytes): ISCSI_TX_PER_TURN for A/B runs. */
static size_t tx_per_turn(void)
{
	static _Atomic int64_t v = -1;
	int64_t x = atomic_load_explicit(&v, memory_order_relaxed);

	if (x < 0) {
		const char *e = getenv("HOTLUN_TX_PER_TURN");
		x = e && *e ? (int64_t)strtoull(e, NULL, 10) : 0;
		if (x <= 0 || x > (1ll << 30))
			x = ISCSI_TX_PER_TURN;
		atomic_store_explicit(&v, x, memory_order_relaxed);
	}
	return (size_t)x;
}

/* Cut iov[0..cnt) to at most max bytes (at least one byte). @return the new count. */
static int iov_trim(struct iovec *iov, int cnt, size_t max)
{
	size_t total = 0;

	for (int i = 0; i < cnt; i++) {
		if (total + iov[i].iov_len >= max) {
			iov[i].iov_len = HL_MAX(max - total, (size_t)1);
			return i + 1;
		}
		total += iov[i].iov_len;
	}
	return cnt;
}

void iscsi_conn_flush(struct iscsi_conn *c)
{
	struct iovec local_iov[ISCSI_IOV_MAX];
	struct iovec *iov = c->txu ? c->txu->iov : local_iov;
	size_t sent = 0;

	if (c->tx_inflight)
		return; /* its CQE goes on from here (the kernel reads txq) */
	if (c->txu && c->reactor && c->tx_turn == hl_reactor_heartbeat(c->reactor) &&
	    c->tx_turn_sent >= tx_per_turn()) {
		/* sent its share of this turn: EPOLLOUT brings it back on the next */
		conn_set_mask(c, conn_wanted_mask(c));
		return;
	}
	while (c->state != CONN_CLOSED && !hl_list_empty(&c->txq) && sent < tx_per_turn()) {
		int cnt = tx_fill_iov(c, iov);
		if (!c->txu)
			cnt = iov_trim(iov, cnt, tx_per_turn() - sent);
		/* sendmsg, not writev: MSG_NOSIGNAL keeps a peer reset from raising SIGPIPE */
		struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)cnt};
		if (c->txu && iscsi_tx_uring_send(c, &msg) == 0)
			break;
		ssize_t n = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				conn_set_mask(c, conn_wanted_mask(c));
				return;
			}
			HL_DEBUG(ISCSI_LOG, "%s: send error: %s", c->peer_str, strerror(errno));
			iscsi_conn_close(c, "send error");
			return;
		}
		sent += (size_t)n;
		if (tx_consume(c, (size_t)n))
			return;
		if (c->tx_off)
			break; /* partial write: the socket is full */
	}
	if (c->state == CONN_CLOSED)
		return;
	conn_set_mask(c, conn_wanted_mask(c));
}

void iscsi_conn_send_done(struct iscsi_conn *c, int res)
{
	conn_enter(c);
	c->tx_inflight = false;
	if (c->state == CONN_CLOSED) {
		tx_release_all(c); /* kept for the kernel until now (iscsi_conn_close) */
		conn_close_fd(c);  /* ... as was the socket's number */
	} else if (res == -EINTR || res == -EAGAIN) {
		/* nothing sent: conn_leave queues the send again */
	} else if (res < 0) {
		HL_DEBUG(ISCSI_LOG, "%s: send error: %s", c->peer_str, strerror(-res));
		iscsi_conn_close(c, "send error");
	} else {
		/* the next send may go in this same turn: count what this one took */
		uint64_t turn = hl_reactor_heartbeat(c->reactor);
		if (c->tx_turn != turn) {
			c->tx_turn = turn;
			c->tx_turn_sent = 0;
		}
		c->tx_turn_sent += (size_t)res;
		if (!tx_consume(c, (size_t)res))
			conn_set_mask(c, conn_wanted_mask(c));
	}
	conn_leave(c);
}

uint32_t iscsi_conn_max_cmd_sn(struct iscsi_conn *c)
{
	uint32_t exp = c->sess ? c->sess->exp_cmd_sn : 0;
	unsigned used = HL_MIN(c->nactive, (unsigned)ISCSI_QUEUE_DEPTH);
	/* a window of zero (MaxCmdSN = ExpCmdSN - 1) is legal and closes the queue */
	return exp + (uint32_t)(ISCSI_QUEUE_DEPTH - used) - 1;
}

uint32_t iscsi_conn_window_end(struct iscsi_conn *c)
{
	uint32_t max = iscsi_conn_max_cmd_sn(c);

	if (c->max_cmd_sn_told && sn_lt(max, c->max_cmd_sn_sent))
		return c->max_cmd_sn_sent;
	return max;
}

void iscsi_conn_fill_sn(struct iscsi_conn *c, struct iscsi_bhs *h, bool advance)
{
	bhs_put32(h, 24, c->stat_sn);
	if (advance)
		c->stat_sn++;
	if (c->sess) {
		uint32_t max = iscsi_conn_max_cmd_sn(c);
		bool closed = iscsi_wb_window_closed(c);
		if (closed) {
			/*
			 * No new slots while its writes hold the budget: a zero window
			 * now, which the initiator reads as "no more than before" (it
			 * ignores a MaxCmdSN below one it has seen). What was advertised
			 * stays valid (iscsi_conn_window_end).
			 */
			max = c->sess->exp_cmd_sn - 1;
			if (!c->wb_window_closed)
				atomic_fetch_add(&c->srv->wb.window_closed, 1);
		}
		c->wb_window_closed = closed;
		bhs_put32(h, 28, c->sess->exp_cmd_sn);
		bhs_put32(h, 32, max);
		if (!c->max_cmd_sn_told || sn_lt(c->max_cmd_sn_sent, max)) {
			c->max_cmd_sn_sent = max;
			c->max_cmd_sn_told = true;
		}
	} else if (c->login) {
		bhs_put32(h, 28, c->login->cmd_sn);
		bhs_put32(h, 32, c->login->cmd_sn);
	}
}

void iscsi_conn_send_reject(struct iscsi_conn *c, const struct iscsi_bhs *bad, uint8_t reason)
{
	iscsi_conn_send_reject_close(c, bad, reason, false);
}

void iscsi_conn_send_reject_close(struct iscsi_conn *c, const struct iscsi_bhs *bad, uint8_t reason,
                                  bool close_after)
{
	struct iscsi_bhs h;
	uint8_t *copy = malloc(ISCSI_BHS_LEN);

	if (!copy)
		return;
	memcpy(copy, bad->b, ISCSI_BHS_LEN);
	memset(&h, 0, sizeof(h));
	h.b[0] = ISCSI_OP_REJECT;
	h.b[1] = ISCSI_FLAG_FINAL;
	h.b[2] = reason;
	bhs_set_itt(&h, ISCSI_RSVD_TAG);
	iscsi_conn_fill_sn(c, &h, true);
	HL_INFO(ISCSI_LOG, "%s: reject %s itt 0x%x reason 0x%02x", c->peer_str,
	        iscsi_opcode_name(bhs_opcode(bad)), bhs_itt(bad), reason);
	iscsi_conn_queue(c, &h, copy, ISCSI_BHS_LEN, NULL, copy, close_after);
}

/* ---- timers ---- */

static void login_timeout(struct hl_timer *t)
{
	struct iscsi_conn *c = t->arg;

	conn_enter(c);
	if (c->state == CONN_LOGIN) {
		HL_NOTICE(ISCSI_LOG, "%s: login timed out", c->peer_str);
		iscsi_conn_close(c, "login timeout");
	}
	conn_leave(c);
}

static void nop_tick(struct hl_timer *t)
{
	struct iscsi_conn *c = t->arg;
	struct hl_iscsi_server *srv = c->srv;
	uint64_t now = hl_now_ns();
	uint64_t interval = (uint64_t)srv->nop_interval_s * 1000000000ull;
	uint64_t timeout =
	    (uint64_t)(srv->nop_timeout_s ? srv->nop_timeout_s : srv->nop_interval_s) *
	    1000000000ull;

	conn_enter(c);
	/* (a WRITE whose data is late closes the connection from c->dout_timer) */
	if (c->state == CONN_FFP) {
		if (c->nop_outstanding && now - c->nop_sent_ns >= timeout) {
			HL_NOTICE(ISCSI_LOG, "%s: NOP-In ping unanswered for %us, closing",
			          c->peer_str, (unsigned)(timeout / 1000000000ull));
			iscsi_conn_close(c, "nop timeout");
		} else if (!c->nop_outstanding && now - c->last_rx_ns >= interval) {
			struct iscsi_bhs h;
			iscsi_conn_buf_trim(c); /* idle for an interval: give the kept buffers back */
			memset(&h, 0, sizeof(h));
			h.b[0] = ISCSI_OP_NOP_IN;
			h.b[1] = ISCSI_FLAG_FINAL;
			bhs_set_itt(&h, ISCSI_RSVD_TAG);
			c->nop_ttt = c->next_ttt++;
			if (c->nop_ttt == ISCSI_RSVD_TAG)
				c->nop_ttt = c->next_ttt++;
			bhs_put32(&h, 20, c->nop_ttt);
			iscsi_conn_fill_sn(c, &h, false);
			if (iscsi_conn_queue(c, &h, NULL, 0, NULL, NULL, false) == 0) {
				c->nop_outstanding = true;
				c->nop_sent_ns = now;
			}
		}
	}
	if (c->state != CONN_CLOSED) {
		uint64_t next_ms = c->nop_outstanding ? HL_MIN(timeout, interval) / 1000000ull
		                                      : interval / 1000000ull;
		hl_timer_start(c->reactor, &c->nop_timer, next_ms ? next_ms : 1000);
	}
	conn_leave(c);
}

/*
 * A discovery session has one job (SendTargets); one that sits idle holds a
 * descriptor for nothing, and an attacker holding hundreds of them took
 * every descriptor. Idle for HL_ISCSI_DISCOVERY_IDLE_S (no PDU but
 * NOP-Outs): asked to log out within ISCSI_DISCOVERY_LOGOUT_S (Async
 * Message, event 1), closed when it is still there ISCSI_DISCOVERY_GRACE_S
 * later.
 */
static void idle_tick(struct hl_timer *t)
{
	struct iscsi_conn *c = t->arg;
	uint64_t now = hl_now_ns(), idle_ns = (uint64_t)HL_ISCSI_DISCOVERY_IDLE_S * 1000000000ull;
	uint64_t next_ms = 1000;

	conn_enter(c);
	if (c->state != CONN_FFP || !c->sess || c->sess->type != ISCSI_SESSION_DISCOVERY) {
		conn_leave(c);
		return;
	}
	if (c->idle_asked_ns) {
		if (now - c->idle_asked_ns >= (uint64_t)ISCSI_DISCOVERY_GRACE_S * 1000000000ull) {
			HL_NOTICE_RL(ISCSI_LOG,
			             "%s: discovery session idle and still there %u s after it was "
			             "asked to log out; closing",
			             c->peer_str, ISCSI_DISCOVERY_GRACE_S);
			iscsi_conn_close(c, "discovery session idle");
			conn_leave(c);
			return;
		}
	} else if (now - c->active_ns >= idle_ns) {
		HL_INFO(ISCSI_LOG, "%s: discovery session idle for %u s: asking it to log out",
		        c->peer_str, HL_ISCSI_DISCOVERY_IDLE_S);
		if (iscsi_conn_send_async_logout(c, ISCSI_DISCOVERY_LOGOUT_S) == 0)
			c->idle_asked_ns = now;
	} else {
		next_ms = (idle_ns - (now - c->active_ns)) / 1000000ull + 1;
	}
	hl_timer_start(c->reactor, &c->idle_timer, next_ms);
	conn_leave(c);
}

int iscsi_conn_send_async_logout(struct iscsi_conn *c, uint16_t within_s)
{
	struct iscsi_bhs h;

	memset(&h, 0, sizeof(h));
	h.b[0] = ISCSI_OP_ASYNC_MSG;
	h.b[1] = ISCSI_FLAG_FINAL;
	bhs_set_itt(&h, 0xffffffffu);
	iscsi_conn_fill_sn(c, &h, true);
	h.b[36] = ISCSI_ASYNC_LOGOUT_REQUEST;
	hl_put_be16(&h.b[42], within_s); /* Parameter3: log out within this many seconds */
	return iscsi_conn_queue(c, &h, NULL, 0, NULL, NULL, false);
}

int iscsi_conn_request_logout(struct iscsi_conn *c, uint16_t within_s)
{
	if (c->state != CONN_FFP || !c->sess || c->sess->type != ISCSI_SESSION_NORMAL)
		return -ENOTCONN;
	HL_INFO(ISCSI_LOG, "%s: asking %s to log out within %u s", c->peer_str,
	        c->sess->initiator_name, within_s);
	return iscsi_conn_send_async_logout(c, within_s);
}

/* ---- lifetime ---- */

int iscsi_conn_create(struct hl_iscsi_server *srv, int fd, uint16_t tpgt, bool wildcard,
                      struct iscsi_conn **out)
{
	struct iscsi_conn *c = calloc(1, sizeof(*c));
	socklen_t sl;

	if (!c)
		return -ENOMEM;
	c->rbuf = malloc(ISCSI_RBUF_SIZE);
	if (!c->rbuf) {
		free(c);
		return -ENOMEM;
	}
	c->srv = srv;
	c->fd = fd;
	c->tpgt = tpgt;
	c->local_wildcard = wildcard;
	c->state = CONN_LOGIN;
	hl_list_init(&c->srv_link);
	hl_list_init(&c->pend_link);
	hl_list_init(&c->evict_link);
	hl_list_init(&c->txq);
	hl_list_init(&c->tx_free);
	hl_list_init(&c->tasks);
	hl_list_init(&c->task_free);
	hl_list_init(&c->tmfs);
	for (unsigned i = 0; i < ISCSI_ITT_HASH; i++)
		hl_list_init(&c->itt_hash[i]);
	c->lim = srv->lim;
	iscsi_params_init(&c->params);
	/*
	 * Until login ends the default MaxRecvDataSegmentLength holds (RFC 7143
	 * 13.12): a peer that has proven nothing gets 8 KiB of receive buffer,
	 * not the 256 KiB a session may negotiate (1024 connections in login
	 * held 340 MiB that way); iscsi_conn_params_applied raises it.
	 */
	iscsi_rx_init(&c->rx, &conn_rx_ops, c, ISCSI_LOGIN_DSL);
	c->next_ttt = 0x10000;
	c->text.ttt = ISCSI_RSVD_TAG;
	hl_timer_init(&c->login_timer, login_timeout, c);
	hl_timer_init(&c->nop_timer, nop_tick, c);
	hl_turn_hook_init(&c->tx_hook, conn_turn_end, c);
	hl_timer_init(&c->wb_timer, iscsi_wb_tick, c);
	hl_timer_init(&c->dout_timer, iscsi_dout_tick, c);
	hl_timer_init(&c->rx_timer, rx_resume, c);
	hl_timer_init(&c->idle_timer, idle_tick, c);
	hl_timer_init(&c->fence_timer, iscsi_login_fence_timeout, c);
	if (fd >= 0) {
		sl = sizeof(c->local);
		getsockname(fd, (struct sockaddr *)&c->local, &sl);
		sl = sizeof(c->peer);
		getpeername(fd, (struct sockaddr *)&c->peer, &sl);
		hl_format_sockaddr(&c->peer, c->peer_str, sizeof(c->peer_str));
	} else {
		hl_strlcpy(c->peer_str, "test", sizeof(c->peer_str));
	}
	*out = c;
	return 0;
}

void iscsi_conn_name_session(struct iscsi_conn *c)
{
	const struct iscsi_session *s = c->sess;
	char addr[64];

	if (!s)
		return;
	hl_strlcpy(addr, c->peer_str, sizeof(addr));
	snprintf(c->peer_str, sizeof(c->peer_str), "%s %s -> %s", addr, s->initiator_name,
		 s->target ? s->target->name : "discovery");
}

void iscsi_conn_start(void *arg)
{
	struct iscsi_conn *c = arg;
	int one = 1;

	if (!c->reactor) /* the accepting portal sets it; unit tests start connections directly */
		c->reactor = hl_reactor_current() ? hl_reactor_current() : c->srv->reactors[0];
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	hl_event_init(&c->ev, c->fd, conn_event, c);
	if (atomic_load(&c->srv->send_uring) && !c->txu)
		c->txu = calloc(1, sizeof(*c->txu)); /* NULL: sendmsg, as without the switch */
	c->ev_mask = EPOLLIN;
	if (hl_event_add(c->reactor, &c->ev, EPOLLIN) < 0) {
		HL_ERR(ISCSI_LOG, "%s: cannot watch the socket", c->peer_str);
		c->busy++;
		iscsi_conn_close(c, "setup");
		conn_leave(c);
		return;
	}
	c->started = true;
	if (iscsi_conn_evict_queued(c)) { /* while its start was on its way here */
		c->busy++;
		iscsi_conn_close(c, ISCSI_EVICTED_WHY);
		conn_leave(c);
		return;
	}
	c->last_rx_ns = hl_now_ns();
	hl_timer_start(c->reactor, &c->login_timer, ISCSI_LOGIN_TIMEOUT_MS);
	HL_INFO(ISCSI_LOG, "%s: connected", c->peer_str);
}

void iscsi_conn_params_applied(struct iscsi_conn *c)
{
	/* called once the final login response is queued: from now on digests apply */
	c->rx.header_digest = c->params.header_digest;
	c->rx.data_digest = c->params.data_digest;
	c->tx_hdigest = c->params.header_digest;
	c->tx_ddigest = c->params.data_digest;
	c->rx.max_dsl = HL_MAX(c->params.max_recv_dsl_target, c->lim.max_recv_dsl);
	hl_timer_stop(&c->login_timer);
	iscsi_conn_pending_release(c);
	if (c->srv->nop_interval_s && c->sess && c->reactor)
		hl_timer_start(c->reactor, &c->nop_timer, (uint64_t)c->srv->nop_interval_s * 1000);
	if (c->sess && c->sess->type == ISCSI_SESSION_DISCOVERY && c->reactor) {
		c->active_ns = hl_now_ns();
		hl_timer_start(c->reactor, &c->idle_timer, HL_ISCSI_DISCOVERY_IDLE_S * 1000);
	}
}

void iscsi_conn_close(struct iscsi_conn *c, const char *why)
{
	if (c->state == CONN_CLOSED)
		return;
	HL_INFO(ISCSI_LOG, "%s: closing connection (%s)", c->peer_str, why);
	c->state = CONN_CLOSED;
	c->busy++;
	if (c->ev.reactor)
		hl_event_del(&c->ev);
	if (c->fd >= 0) {
		if (c->tx_inflight) {
			/*
			 * A send SQE names the socket by number and may not even be
			 * submitted yet (that waits for the turn's end): closing now
			 * would let an accept reuse the number and the send go to
			 * another initiator. The send ends with an error now; the
			 * socket is closed at its CQE (iscsi_conn_send_done).
			 */
			shutdown(c->fd, SHUT_RDWR);
		} else {
			conn_close_fd(c);
		}
	}
	hl_timer_stop(&c->login_timer);
	hl_timer_stop(&c->nop_timer);
	hl_timer_stop(&c->idle_timer);
	hl_timer_stop(&c->wb_timer);
	hl_timer_stop(&c->dout_timer);
	hl_timer_stop(&c->rx_timer);
	iscsi_login_fence_cancel(c);
	hl_turn_hook_cancel(&c->tx_hook);
	c->rbuf_off = c->rbuf_len = 0;
	iscsi_conn_pending_release(c);
	if (!c->tx_inflight) /* else the kernel may still read them: at its CQE */
		tx_release_all(c);
	iscsi_ffp_abort_all(c);
	if (c->sess && c->sess->registered)
		iscsi_session_unregister(c->srv, c->sess);
	c->busy--;
	conn_maybe_free(c);
}

static void conn_maybe_free(struct iscsi_conn *c)
{
	if (c->state != CONN_CLOSED || c->busy || c->nexec || c->ntasks || c->tx_inflight ||
	    hl_turn_hook_queued(&c->tx_hook))
		return;
	if (c->sess) {
		iscsi_session_free(c->sess);
		c->sess = NULL;
	}
	if (c->login) {
		iscsi_login_free(c->login);
		c->login = NULL;
	}
	free(c->text.rsp);
	free(c->text.req);
	while (!hl_list_empty(&c->tx_free)) {
		struct iscsi_tx *tx = hl_list_first(&c->tx_free, struct iscsi_tx, link);
		hl_list_del(&tx->link);
		free(tx);
	}
	while (!hl_list_empty(&c->task_free)) {
		struct iscsi_task *t = hl_list_first(&c->task_free, struct iscsi_task, link);
		hl_list_del(&t->link);
		free(t);
	}
	conn_close_fd(c); /* closed already, unless a send SQE held it (iscsi_conn_close) */
	iscsi_conn_buf_trim(c);
	iscsi_rx_fini(&c->rx);
	free(c->rbuf);
	free(c->txu);
	iscsi_conn_unlink(c);
	free(c);
}

/* Task references: a task is freed (back to the pool) when the last one goes. */
void iscsi_task_put(struct iscsi_task *t)
{
	struct iscsi_conn *c = t->conn;

	if (--t->refs > 0)
		return;
	iscsi_task_wb_release(t); /* normally gone already (iscsi_task_deactivate) */
	hl_list_del(&t->link);
	if (t->cmd.data)
		iscsi_buf_put(c, t->cmd.data, t->buf_len);
	t->cmd.data = NULL;
	c->buf_bytes -= t->buf_len;
	t->buf_len = 0;
	c->ntasks--;
	if (c->task_nfree < 2 * ISCSI_QUEUE_DEPTH) {
		hl_list_add(&c->task_free, &t->link);
		c->task_nfree++;
	} else {
		free(t);
	}
	if (c->state == CONN_CLOSED && !c->busy)
		conn_maybe_free(c);
}

/* Entry points for other files that run outside the event handler. */
void iscsi_conn_enter(struct iscsi_conn *c)
{
	conn_enter(c);
}

void iscsi_conn_leave(struct iscsi_conn *c)
{
	conn_leave(c);
}
