/*
 * wbudget.c - the write buffer budget: how many bytes of WRITE data all
 * connections of the server together may hold in commands that have not
 * finished, who waits when that is spent, and how much of it one source
 * of connections may take.
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
 *
 * Sources (an IPv4 address, an IPv6 /64: source.h). A granted WRITE is
 * only bounded in time by its deadline (write_data.c), so an initiator that
 * sends its data as slowly as that allows, or reconnects once closed,
 * would otherwise keep the whole budget and leave every other host BUSY.
 * So the WRITEs of one source may promise (granted or waiting) at most
 * half the budget, and while another source wants some (it waits, or was
 * refused for want of budget in the last ISCSI_WB_CONTEND_MS) at most
 * 1/N of it, N counting the sources that hold, wait or were refused; never
 * less than one largest transfer. Beyond it, its WRITE is answered TASK SET
 * FULL: the budget it already holds comes back as its WRITEs finish (or
 * miss their deadline), and what it may take again is its share. The
 * check is made when a WRITE arrives, so the queue stays one FIFO and the
 * argument above about the oldest waiter holds unchanged.
 *
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

uint64_t iscsi_wb_deadline_ns(uint64_t bytes)
{
	return (uint64_t)ISCSI_WRITE_GRACE_S * 1000000000ull +
	       bytes * 1000000000ull / ISCSI_WRITE_FLOOR_BPS;
}

uint64_t iscsi_wb_source_cap(uint64_t limit, unsigned contending)
{
	uint64_t cap = limit / (contending > 2 ? contending : 2);

	return cap < HL_SCSI_MAX_XFER ? HL_SCSI_MAX_XFER : cap;
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
	for (unsigned i = 0; i < ISCSI_WB_SOURCE_BUCKETS; i++)
		hl_list_init(&b->sources[i]);
	hl_list_init(&b->refused);
	b->n_refused = b->n_refused_idle = b->n_active = b->n_wait_src = 0;
	b->used = b->peak = b->wait_charged = 0;
	b->n_waiting = 0;
	b->clock_ns = 0;
	b->deferred = b->task_set_full = b->source_capped = 0;
	atomic_init(&b->closed_slow, 0);
	atomic_init(&b->closed_silent, 0);
	atomic_init(&b->window_closed, 0);
	atomic_init(&b->pressure, false);
	atomic_init(&b->buf_cache_total, 0);
	atomic_init(&b->buf_cache_max, 0);
	set_limit_locked(b, limit);
}

void iscsi_wb_fini(struct iscsi_wbudget *b)
{
	/* every claim is gone by now: what is left are sources remembered as refused */
	for (unsigned i = 0; i < ISCSI_WB_SOURCE_BUCKETS; i++) {
		while (!hl_list_empty(&b->sources[i])) {
			struct iscsi_wb_source *s =
			    hl_list_first(&b->sources[i], struct iscsi_wb_source, link);
			hl_list_del(&s->link);
			free(s);
		}
	}
	pthread_mutex_destroy(&b->lock);
}

void iscsi_wb_set_limit(struct iscsi_wbudget *b, uint64_t limit)
{
	pthread_mutex_lock(&b->lock);
	set_limit_locked(b, limit);
	update_pressure(b);
	pthread_mutex_unlock(&b->lock);
}

/* ---- sources (b->lock held throughout) ---- */

static unsigned source_bucket(const struct iscsi_source *k)
{
	uint32_t h = 2166136261u; /* FNV-1a: cheap, and the table only spreads lookups */

	for (size_t i = 0; i < sizeof(k->b); i++)
		h = (h ^ k->b[i]) * 16777619u;
	return h % ISCSI_WB_SOURCE_BUCKETS;
}

/* The source's entry, made when it has none. @return NULL without memory. */
static struct iscsi_wb_source *source_get(struct iscsi_wbudget *b, const struct iscsi_source *k)
{
	struct hl_list *bucket = &b->sources[source_bucket(k)];
	struct iscsi_wb_source *s;

	hl_list_for_each_entry(s, bucket, link)
	{
		if (iscsi_source_eq(&s->key, k))
			return s;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->key = *k;
	hl_list_init(&s->refused_link);
	hl_list_add_tail(bucket, &s->link);
	return s;
}

/* An entry that neither has claims nor is remembered as refused is forgotten. */
static void source_maybe_free(struct iscsi_wb_source *s)
{
	if (s->claims || s->listed)
		return;
	hl_list_del(&s->link);
	free(s);
}

/* s's promise changes by +add -sub: the counts of sources promising something follow. */
static void source_promise(struct iscsi_wbudget *b, struct iscsi_wb_source *s, uint64_t add,
                           uint64_t sub)
{
	bool was = s->promised > 0;

	s->promised = s->promised + add - sub;
	if (was == (s->promised > 0))
		return;
	if (was) {
		b->n_active--;
		if (s->listed)
			b->n_refused_idle++;
	} else {
		b->n_active++;
		if (s->listed)
			b->n_refused_idle--;
	}
}

static void source_unlist(struct iscsi_wbudget *b, struct iscsi_wb_source *s)
{
	hl_list_del(&s->refused_link);
	hl_list_init(&s->refused_link);
	s->listed = false;
	b->n_refused--;
	if (!s->promised)
		b->n_refused_idle--;
}

/* s was refused for want of budget: it wants some, for ISCSI_WB_CONTEND_MS. */
static void source_refused(struct iscsi_wbudget *b, struct iscsi_wb_source *s, uint64_t now_ns)
{
	if (s->listed)
		source_unlist(b, s); /* to the tail: the list stays in time order */
	s->listed = true;
	s->refused_ns = now_ns;
	hl_list_add_tail(&b->refused, &s->refused_link);
	b->n_refused++;
	if (!s->promised)
		b->n_refused_idle++;
}

/* Forget the refusals older than ISCSI_WB_CONTEND_MS. */
static void sources_expire(struct iscsi_wbudget *b, uint64_t now_ns)
{
	while (!hl_list_empty(&b->refused)) {
		struct iscsi_wb_source *s =
		    hl_list_first(&b->refused, struct iscsi_wb_source, refused_link);
		if (now_ns - s->refused_ns < ISCSI_WB_CONTEND_MS * 1000000ull)
			break;
		source_unlist(b, s);
		source_maybe_free(s);
	}
}

/*
 * What s may promise now: half the budget, or its 1/N share while another
 * source wants budget (N: the sources that hold, wait or were refused,
 * s among them).
 */
static uint64_t source_cap(const struct iscsi_wbudget *b, const struct iscsi_wb_source *s)
{
	bool others =
	    b->n_wait_src > (s->n_waiting ? 1u : 0u) || b->n_refused > (s->listed ? 1u : 0u);
	unsigned n = b->n_active + b->n_refused_idle + (s->promised || s->listed ? 0 : 1);

	return iscsi_wb_source_cap(b->limit, others ? n : 1);
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
                                     const struct iscsi_source *src, uint64_t conn_promised,
                                     uint64_t need, uint64_t unasked, uint64_t now_ns,
                                     struct iscsi_wb_admit_info *info)
{
	enum iscsi_wb_verdict v;
	struct iscsi_wb_source *s;

	need = round4k(need);
	unasked = round4k(unasked);
	if (unasked > need)
		unasked = need;
	cl->need = need;
	cl->charged = 0;
	cl->waiting = false;
	cl->src = NULL;
	pthread_mutex_lock(&b->lock);
	/*
	 * Read before the lock: one may bring a time earlier than a refusal
	 * another reactor stored meanwhile, whose age would wrap and be
	 * forgotten at once. Time here never goes back; refused stays in order.
	 */
	now_ns = hl_time_forward(&b->clock_ns, now_ns);
	sources_expire(b, now_ns);
	s = source_get(b, src);
	if (info) {
		info->conn_limit = b->conn_limit;
		info->source_promised = s ? s->promised : 0;
		info->source_cap = s ? source_cap(b, s) : 0;
		info->sources = b->n_active + b->n_refused_idle;
	}
	if (!s || conn_promised + need > b->conn_limit) {
		v = ISCSI_WB_FULL;
	} else if (s->promised + need > source_cap(b, s)) {
		b->source_capped++;
		v = ISCSI_WB_SHARE;
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
		if (!s->n_waiting++)
			b->n_wait_src++;
		v = ISCSI_WB_WAIT;
	} else {
		/* the budget is spent for everyone: s wants its share (source_cap) */
		source_refused(b, s, now_ns);
		v = ISCSI_WB_FULL;
	}
	if (v == ISCSI_WB_FULL || v == ISCSI_WB_SHARE) {
		b->task_set_full++;
		cl->need = 0;
		if (s)
			source_maybe_free(s);
	} else {
		cl->src = s;
		s->claims++;
		source_promise(b, s, need, 0);
	}
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
	if (cl->src && !--cl->src->n_waiting)
		b->n_wait_src--;
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
	if (!cl->src)
		return;
	pthread_mutex_lock(&b->lock);
	if (cl->waiting)
		unwait(b, cl);
	b->used -= cl->charged;
	cl->charged = 0;
	source_promise(b, cl->src, 0, cl->need);
	cl->src->claims--;
	source_maybe_free(cl->src);
	cl->src = NULL;
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
	out->source_limit = iscsi_wb_source_cap(b->limit, 1);
	out->sources = b->n_active;
	out->source_capped = b->source_capped;
	pthread_mutex_unlock(&b->lock);
	out->window_closed = atomic_load(&b->window_closed);
	out->closed_slow = atomic_load(&b->closed_slow);
	out->closed_silent = atomic_load(&b->closed_silent);
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
