/*
 * wbudget.c - the write buffer budget: how many bytes of WRITE data all
 * connections of the server together may hold in commands that have not
 * finished, and who waits when that is spent.
 *
 * A WRITE asks for its whole transfer (rounded to 4 KiB) when it arrives.
 * Granted, it keeps that charge until it leaves the data-collecting and
 * executing states, so a command that was let in can always finish: what it
 * still needs was set aside when it started. Not granted, it may wait while
 * charging only the bytes the initiator sends without being asked
 * (immediate and unsolicited data, at most FirstBurstLength); its R2Ts are
 * sent once the rest is granted. Waiters together may charge at most a
 * quarter of the budget, which with a budget of at least twice the largest
 * transfer leaves room for the oldest waiter once the granted commands are
 * done: the budget cannot fill up with commands that all wait for each
 * other. What neither fits nor may wait is answered TASK SET FULL.
 *
 * Waiters are served in arrival order: a newcomer (or a later waiter) is
 * granted only if what the oldest waiter still needs fits beside it.
 * One mutex guards everything here; it is taken once when a WRITE arrives
 * and once when it leaves, never while another lock is held.
 */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "hotlun/log.h"
#include "iscsi/iscsi_internal.h"

static uint64_t round4k(uint64_t n)
{
	return (n + 4095) & ~(uint64_t)4095;
}

uint64_t iscsi_wb_default_limit(uint64_t phys)
{
	uint64_t l = phys / 8;

	if (l < HL_ISCSI_WRITE_LIMIT_DEFAULT_MIN)
		l = HL_ISCSI_WRITE_LIMIT_DEFAULT_MIN;
	if (l > HL_ISCSI_WRITE_LIMIT_DEFAULT_MAX)
		l = HL_ISCSI_WRITE_LIMIT_DEFAULT_MAX;
	return l;
}

uint64_t iscsi_wb_conn_limit_for(uint64_t limit)
{
	uint64_t l = limit / 4;

	if (l < HL_SCSI_MAX_XFER)
		l = HL_SCSI_MAX_XFER;
	if (l > ISCSI_CONN_BUF_MAX)
		l = ISCSI_CONN_BUF_MAX;
	return l;
}

static uint64_t physical_memory(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);

	if (pages <= 0 || size <= 0)
		return 0;
	return (uint64_t)pages * (uint64_t)size;
}

/* b->lock held. */
static void set_limit_locked(struct iscsi_wbudget *b, uint64_t limit)
{
	if (limit == 0)
		limit = iscsi_wb_default_limit(physical_memory());
	if (limit < HL_ISCSI_WRITE_LIMIT_MIN)
		limit = HL_ISCSI_WRITE_LIMIT_MIN;
	b->limit = limit;
	b->conn_limit = iscsi_wb_conn_limit_for(limit);
	atomic_store(&b->buf_cache_max, limit / 2);
}

/* b->lock held: is the budget nearly spent (or is someone waiting)? */
static void update_pressure(struct iscsi_wbudget *b)
{
	bool p = b->n_waiting > 0 || b->used >= b->limit - b->limit / 8;

	atomic_store_explicit(&b->pressure, p, memory_order_relaxed);
}

void iscsi_wb_init(struct iscsi_wbudget *b, uint64_t limit)
{
	pthread_mutex_init(&b->lock, NULL);
	hl_list_init(&b->waiters);
	b->used = b->peak = b->wait_charged = 0;
	b->n_waiting = 0;
	b->deferred = b->task_set_full = 0;
	atomic_init(&b->window_closed, 0);
	atomic_init(&b->pressure, false);
	atomic_init(&b->buf_cache_total, 0);
	atomic_init(&b->buf_cache_max, 0);
	set_limit_locked(b, limit);
}

void iscsi_wb_fini(struct iscsi_wbudget *b)
{
	pthread_mutex_destroy(&b->lock);
}

void iscsi_wb_set_limit(struct iscsi_wbudget *b, uint64_t limit)
{
	pthread_mutex_lock(&b->lock);
	set_limit_locked(b, limit);
	update_pressure(b);
	pthread_mutex_unlock(&b->lock);
}

/*
 * b->lock held. Does `more` fit for claim `cl` (NULL: a newcomer)? Unless
 * cl is the oldest waiter, the oldest waiter's remainder is kept free. The
 * oldest waiter always fits once no granted command holds anything (only
 * waiters' unsolicited data): after the limit was lowered below what the
 * waiters hold, the queue still drains, one command at a time.
 */
static bool fits(const struct iscsi_wbudget *b, const struct iscsi_wb_claim *cl, uint64_t more)
{
	uint64_t keep = 0;

	if (!hl_list_empty(&b->waiters)) {
		const struct iscsi_wb_claim *head =
		    hl_list_first(&b->waiters, struct iscsi_wb_claim, link);
		if (head != cl)
			keep = head->need - head->charged;
		else if (b->used == b->wait_charged)
			return true;
	}
	return b->used + keep + more <= b->limit;
}

static void charge(struct iscsi_wbudget *b, struct iscsi_wb_claim *cl, uint64_t n)
{
	cl->charged += n;
	b->used += n;
	if (b->used > b->peak)
		b->peak = b->used;
}

enum iscsi_wb_verdict iscsi_wb_admit(struct iscsi_wbudget *b, struct iscsi_wb_claim *cl,
                                     uint64_t conn_promised, uint64_t need, uint64_t unasked,
                                     uint64_t *conn_limit)
{
	enum iscsi_wb_verdict v;

	need = round4k(need);
	unasked = round4k(unasked);
	if (unasked > need)
		unasked = need;
	cl->need = need;
	cl->charged = 0;
	cl->waiting = false;
	pthread_mutex_lock(&b->lock);
	if (conn_promised + need > b->conn_limit) {
		v = ISCSI_WB_FULL;
	} else if (fits(b, NULL, need)) {
		charge(b, cl, need);
		v = ISCSI_WB_GO;
	} else if (unasked < need && b->wait_charged + unasked <= b->limit / 4 &&
	           b->used + unasked <= b->limit) {
		charge(b, cl, unasked);
		cl->waiting = true;
		hl_list_add_tail(&b->waiters, &cl->link);
		b->n_waiting++;
		b->wait_charged += unasked;
		b->deferred++;
		v = ISCSI_WB_WAIT;
	} else {
		v = ISCSI_WB_FULL;
	}
	if (v == ISCSI_WB_FULL) {
		b->task_set_full++;
		cl->need = 0;
	}
	if (conn_limit)
		*conn_limit = b->conn_limit;
	update_pressure(b);
	pthread_mutex_unlock(&b->lock);
	return v;
}

/* b->lock held. */
static void unwait(struct iscsi_wbudget *b, struct iscsi_wb_claim *cl)
{
	hl_list_del(&cl->link);
	cl->waiting = false;
	b->n_waiting--;
	b->wait_charged -= cl->charged;
}

bool iscsi_wb_grant(struct iscsi_wbudget *b, struct iscsi_wb_claim *cl)
{
	bool ok = false;

	pthread_mutex_lock(&b->lock);
	if (!cl->waiting) {
		ok = true;
	} else if (fits(b, cl, cl->need - cl->charged)) {
		unwait(b, cl);
		charge(b, cl, cl->need - cl->charged);
		ok = true;
	}
	update_pressure(b);
	pthread_mutex_unlock(&b->lock);
	return ok;
}

bool iscsi_wb_is_head(struct iscsi_wbudget *b, const struct iscsi_wb_claim *cl)
{
	pthread_mutex_lock(&b->lock);
	bool head = cl->waiting && !hl_list_empty(&b->waiters) &&
	            hl_list_first(&b->waiters, struct iscsi_wb_claim, link) == cl;
	pthread_mutex_unlock(&b->lock);
	return head;
}

void iscsi_wb_release(struct iscsi_wbudget *b, struct iscsi_wb_claim *cl)
{
	if (!cl->charged && !cl->waiting)
		return;
	pthread_mutex_lock(&b->lock);
	if (cl->waiting)
		unwait(b, cl);
	b->used -= cl->charged;
	cl->charged = 0;
	update_pressure(b);
	pthread_mutex_unlock(&b->lock);
}

uint64_t iscsi_wb_conn_limit(struct iscsi_wbudget *b)
{
	pthread_mutex_lock(&b->lock);
	uint64_t l = b->conn_limit;
	pthread_mutex_unlock(&b->lock);
	return l;
}

void iscsi_wb_stats(struct iscsi_wbudget *b, struct hl_iscsi_write_stats *out)
{
	pthread_mutex_lock(&b->lock);
	out->limit = b->limit;
	out->conn_limit = b->conn_limit;
	out->held = b->used;
	out->peak = b->peak;
	out->waiting = b->n_waiting;
	out->waiting_bytes = b->wait_charged;
	out->r2t_deferred = b->deferred;
	out->task_set_full = b->task_set_full;
	pthread_mutex_unlock(&b->lock);
	out->window_closed = atomic_load(&b->window_closed);
}

/* ---- the server's public face ---- */

void hl_iscsi_server_set_write_limit(struct hl_iscsi_server *srv, uint64_t bytes)
{
	iscsi_wb_set_limit(&srv->wb, bytes);
}

void hl_iscsi_write_stats(struct hl_iscsi_server *srv, struct hl_iscsi_write_stats *out)
{
	iscsi_wb_stats(&srv->wb, out);
}
