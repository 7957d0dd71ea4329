/*
 * rbd_pr.c - the record the gateways of an rbd image share (origin.h pr_*):
 * the initiators' persistent reservations of the disk, kept in the cluster
 * so that every gateway, owner or standby, reads and changes the same one.
 *
 * One RADOS object beside the image, hotlun_pr.IMAGEID (.SNAP for a
 * snapshot), in the image's pool: its data is the record (an opaque text to
 * this file), its xattr hotlun.seq the record's sequence number. A commit
 * is one atomic write op: compare hotlun.seq with the sequence number the
 * writer read (cmpxattr; a mismatch is -ECANCELED: somebody else's change
 * came first, read again), write the data, set the new number. Nothing of
 * our own runs between the gateways: the OSD serializes the writers.
 *
 * Then the writer notifies the object (rados_notify2, payload "seq=N") and
 * waits. Every gateway watches it (rados_watch2): the notice goes to this
 * file's thread, which has the LU read the record and apply the change
 * (unit attentions, aborted tasks) and answers with its gateway id once
 * that is done (rados_notify_ack, payload "gw=G"). The writer returns when
 * every configured gateway answered.
 *
 * A gateway that did not answer (dead, frozen, cut off from the cluster,
 * its watch lost) may still hold an older copy. The rule that bounds it:
 * a gateway checks commands against its copy only while a check of the
 * record's sequence number that it sent less than PR_FRESH_MS ago found no
 * newer one (pr_current; the thread checks every PR_CHECK_MS). The OSD
 * applied such a check before the commit (or the check would have seen the
 * commit), so once the writer's clock shows PR_FRESH_MS + PR_MARGIN_MS
 * since the commit completed, that gateway's copy is no longer trusted by
 * it (it answers BUSY until it has read the record again). The writer waits
 * that long for any gateway that did not answer. Like the ownership lease
 * (docs/gateways.md) this rests on the gateways' clocks running at the
 * same rate, with PR_MARGIN_MS of margin. What it does not bound: a command
 * that passed the check on the silent gateway before the change and is
 * still running (its origin I/O slow or stuck) when the writer gives up
 * waiting; a PREEMPT AND ABORT cannot abort a task on a gateway it cannot
 * reach.
 *
 * A blocklisted client (this gateway was fenced as an owner) cannot read or
 * write the object; the ownership thread reconnects it as a standby
 * (rbd_own.c), and the thread here watches again on the new client.
 */
#include "config.h"

#include "origin/origin_rbd.h"
#include "origin/rbd_codec.h"

#include "hotlun/event.h"
#include "hotlun/log.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <rados/librados.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PR_OBJ       "hotlun_pr."
#define PR_SEQ_XATTR "hotlun.seq"
#define PR_CHECK_MS  500  /* the thread reads the sequence number this often */
#define PR_FRESH_MS  2000 /* a copy is trusted this long after a check found it current */
#define PR_MARGIN_MS 500  /* the writer's margin over PR_FRESH_MS for a silent gateway */
/*
 * How long a commit waits for the gateways' answers. A gateway answers once
 * its unit attentions are queued and the tasks a PREEMPT AND ABORT aborted
 * there have left it (a write to a slow origin may take seconds): that is
 * worth waiting for. The OSD counts whole seconds. A dead gateway's watch
 * lingers until osd_client_watch_timeout (30 s by default), and every
 * commit meanwhile waits this long for it.
 */
#define PR_NOTIFY_MS 5000
#define PR_PENDING   64 /* notices being applied at once */
#define PR_GATEWAYS  16

struct rbd_pr {
	struct hl_origin *o;
	char oid[sizeof(PR_OBJ) + 128 + 1 + 256];
	uint16_t self;
	uint16_t gws[PR_GATEWAYS];
	unsigned n_gws;
	hl_origin_pr_changed_fn changed;
	void *arg;
	pthread_t thread;
	bool started;
	atomic_bool closed; /* pr_close ran: loads and commits fail, memory stays until fini */

	pthread_mutex_t lock; /* guards what follows */
	pthread_cond_t cond;
	bool stop;
	bool kick;          /* read the record now */
	bool watching;      /* a watch is registered on the connection of watch_gen */
	bool watch_lost;    /* its error callback ran */
	unsigned watch_gen; /* rbd_origin.gen of the watch's connection */
	uint64_t watch;     /* the watch's handle */
	uint64_t applied;   /* the newest sequence number the LU applied */
	uint64_t next_cookie;
	struct pr_notice {
		uint64_t cookie; /* 0: free; ~0: queued, no cookie yet */
		uint64_t notify_id, handle, seq;
		unsigned gen;
	} pend[PR_PENDING];
	/* freshness: the last check's result and when it was sent */
	uint64_t checked_seq;
	uint64_t checked_at_ns;
	bool checked;
};

static uint64_t mono_ms_to_ns(unsigned ms)
{
	return (uint64_t)ms * 1000000u;
}

/* Under handles: the record's sequence number. A missing object reads as 0. */
static int seq_read(struct rbd_origin *r, const char *oid, uint64_t *seq)
{
	char buf[32];
	int rc = rados_getxattr(r->ioctx, oid, PR_SEQ_XATTR, buf, sizeof(buf) - 1);

	*seq = 0;
	if (rc == -ENOENT || rc == -ENODATA)
		return 0;
	if (rc < 0)
		return rc;
	buf[rc] = '\0';
	char *end;
	*seq = strtoull(buf, &end, 10);
	return end == buf ? -EBADMSG : 0;
}

/* Under handles: make the object exist with sequence number 0, unless it does. */
static int obj_create(struct rbd_origin *r, const char *oid)
{
	rados_write_op_t op = rados_create_write_op();
	int rc;

	if (!op)
		return -ENOMEM;
	rados_write_op_create(op, LIBRADOS_CREATE_EXCLUSIVE, NULL);
	rados_write_op_setxattr(op, PR_SEQ_XATTR, "0", 1);
	rc = rados_write_op_operate(op, r->ioctx, oid, NULL, 0);
	rados_release_write_op(op);
	return rc == -EEXIST ? 0 : rc;
}

/* A blocklisted client: fenced, so the ownership thread reconnects it. */
static int fence_if_shut(struct hl_origin *o, int rc, unsigned gen)
{
	if (rc == -ESHUTDOWN)
		origin_rbd_fence(o, rc, gen);
	return rc;
}

int origin_rbd_pr_open(struct hl_origin *o, uint16_t self, const uint16_t *gateways, unsigned n)
{
	struct rbd_origin *r = ro_of(o);
	struct rbd_pr *pr;
	unsigned gen;
	int rc;

	if (!r->gateway || !r->image_id[0] || !self || n == 0 || n > PR_GATEWAYS)
		return -EOPNOTSUPP;
	if (r->pr)
		return 0;
	pr = calloc(1, sizeof(*pr));
	if (!pr)
		return -ENOMEM;
	pr->o = o;
	pr->self = self;
	memcpy(pr->gws, gateways, n * sizeof(gateways[0]));
	pr->n_gws = n;
	snprintf(pr->oid, sizeof(pr->oid), "%s%s%s%s", PR_OBJ, r->image_id, r->snap[0] ? "." : "",
	         r->snap);
	pthread_mutex_init(&pr->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&pr->cond, &ca);
	pthread_condattr_destroy(&ca);
	handles_read(r);
	gen = atomic_load(&r->gen);
	rc = obj_create(r, pr->oid);
	handles_done(r);
	if (rc) {
		HL_ERR(RBD_LOG, "%s: cannot create %s for the shared persistent reservations: %s",
		       o->uri, pr->oid, strerror(-rc));
		fence_if_shut(o, rc, gen);
		pthread_cond_destroy(&pr->cond);
		pthread_mutex_destroy(&pr->lock);
		free(pr);
		return rc;
	}
	r->pr = pr;
	return 0;
}

int origin_rbd_pr_load(struct hl_origin *o, char **text, size_t *len)
{
	struct rbd_origin *r = ro_of(o);
	struct rbd_pr *pr = r->pr;
	size_t cap = 64 << 10;
	unsigned gen;
	int rc;

	if (!pr)
		return -EOPNOTSUPP;
	if (atomic_load(&pr->closed))
		return -ESHUTDOWN;
	for (;;) {
		char *buf = malloc(cap + 1);
		if (!buf)
			return -ENOMEM;
		handles_read(r);
		gen = atomic_load(&r->gen);
		rc = rados_read(r->ioctx, pr->oid, buf, cap, 0);
		handles_done(r);
		if (rc == -ENOENT)
			rc = 0;
		if (rc < 0) {
			free(buf);
			return fence_if_shut(o, rc, gen);
		}
		if ((size_t)rc == cap && cap < (64u << 20)) {
			free(buf); /* perhaps more: one read of the whole, larger */
			cap *= 4;
			continue;
		}
		buf[rc] = '\0';
		*text = buf;
		*len = (size_t)rc;
		return 0;
	}
}

/* Which configured gateways answered the notify (reply from rados_notify2)? */
static unsigned acks_from(const struct rbd_pr *pr, char *reply, size_t reply_len, bool *acked)
{
	struct notify_ack_t *acks = NULL;
	struct notify_timeout_t *tos = NULL;
	size_t n_acks = 0, n_tos = 0;
	unsigned n = 0;

	if (!reply || rados_decode_notify_response(reply, reply_len, &acks, &n_acks, &tos, &n_tos))
		return 0;
	for (size_t i = 0; i < n_acks; i++) {
		uint16_t gw;
		if (rbd_pr_answer_decode(acks[i].payload, acks[i].payload_len, &gw))
			continue;
		for (unsigned g = 0; g < pr->n_gws; g++) {
			if (pr->gws[g] == gw && !acked[g]) {
				acked[g] = true;
				n++;
			}
		}
	}
	rados_free_notify_response(acks, n_acks, tos);
	return n;
}

int origin_rbd_pr_commit(struct hl_origin *o, uint64_t old_seq, uint64_t new_seq, const char *text,
                         size_t len)
{
	struct rbd_origin *r = ro_of(o);
	struct rbd_pr *pr = r->pr;
	char oldv[24], newv[24], note[48];
	bool acked[PR_GATEWAYS] = {false};
	char *reply = NULL;
	size_t reply_len = 0;
	unsigned gen;
	int rc;

	if (!pr)
		return -EOPNOTSUPP;
	if (atomic_load(&pr->closed))
		return -ESHUTDOWN;
	rados_write_op_t op = rados_create_write_op();
	if (!op)
		return -ENOMEM;
	snprintf(oldv, sizeof(oldv), "%" PRIu64, old_seq);
	snprintf(newv, sizeof(newv), "%" PRIu64, new_seq);
	/* the whole change or nothing, and only from the record the writer read */
	rados_write_op_cmpxattr(op, PR_SEQ_XATTR, LIBRADOS_CMPXATTR_OP_EQ, oldv, strlen(oldv));
	rados_write_op_write_full(op, text, len);
	rados_write_op_setxattr(op, PR_SEQ_XATTR, newv, strlen(newv));
	handles_read(r);
	gen = atomic_load(&r->gen);
	rc = rados_write_op_operate(op, r->ioctx, pr->oid, NULL, 0);
	handles_done(r);
	rados_release_write_op(op);
	uint64_t done_ns = hl_now_ns();
	if (rc == -ENOENT || rc == -ENODATA)
		rc = -ECANCELED; /* the object went away (an admin): read it again, made anew */
	if (rc) {
		if (rc == -ECANCELED) {
			handles_read(r);
			obj_create(r, pr->oid);
			handles_done(r);
		}
		return fence_if_shut(o, rc, gen);
	}
	int n = snprintf(note, sizeof(note), "seq=%" PRIu64, new_seq);
	handles_read(r);
	gen = atomic_load(&r->gen);
	int nrc = rados_notify2(r->ioctx, pr->oid, note, n, PR_NOTIFY_MS, &reply, &reply_len);
	handles_done(r);
	unsigned answered = acks_from(pr, reply, reply_len, acked);
	if (reply)
		rados_buffer_free(reply);
	fence_if_shut(o, nrc, gen);
	if (answered == pr->n_gws)
		return 0;
	/* somebody did not answer: wait until no copy older than this one is trusted */
	char silent[96] = "";
	for (unsigned g = 0, l = 0; g < pr->n_gws && l < sizeof(silent) - 8; g++)
		if (!acked[g])
			l += (unsigned)snprintf(silent + l, sizeof(silent) - l, "%s%u",
			                        l ? "," : "", pr->gws[g]);
	uint64_t until = done_ns + mono_ms_to_ns(PR_FRESH_MS + PR_MARGIN_MS);
	uint64_t now = hl_now_ns();
	HL_NOTICE(RBD_LOG,
	          "%s: persistent reservation change %" PRIu64
	          ": gateway(s) %s did not answer (%s); waiting %llu ms until they cannot "
	          "go on with an older copy",
	          o->uri, new_seq, silent, nrc ? strerror(-nrc) : "no answer",
	          (unsigned long long)(until > now ? (until - now) / 1000000 : 0));
	while ((now = hl_now_ns()) < until) {
		struct timespec ts = {(time_t)((until - now) / 1000000000u),
		                      (long)((until - now) % 1000000000u)};
		nanosleep(&ts, NULL);
	}
	return 0;
}

bool origin_rbd_pr_current(struct hl_origin *o, uint64_t seq)
{
	struct rbd_pr *pr = ro_of(o)->pr;
	bool ok;

	if (!pr)
		return false;
	pthread_mutex_lock(&pr->lock);
	ok = pr->checked && seq >= pr->checked_seq &&
	     hl_now_ns() - pr->checked_at_ns < mono_ms_to_ns(PR_FRESH_MS);
	pthread_mutex_unlock(&pr->lock);
	return ok;
}

void origin_rbd_pr_applied(struct hl_origin *o, uint64_t cookie, uint64_t seq)
{
	struct rbd_origin *r = ro_of(o);
	struct rbd_pr *pr = r->pr;
	struct pr_notice n = {0};
	char ack[16];

	if (!pr)
		return;
	pthread_mutex_lock(&pr->lock);
	if (seq > pr->applied)
		pr->applied = seq;
	for (unsigned i = 0; cookie && i < PR_PENDING; i++) {
		if (pr->pend[i].cookie == cookie) {
			n = pr->pend[i];
			pr->pend[i].cookie = 0;
			break;
		}
	}
	pthread_mutex_unlock(&pr->lock);
	/* an answer says "applied": a notice the LU could not cover goes unanswered */
	if (!n.cookie || seq < n.seq)
		return;
	int l = snprintf(ack, sizeof(ack), "gw=%u", pr->self);
	handles_read(r);
	if (n.gen == atomic_load(&r->gen))
		rados_notify_ack(r->ioctx, pr->oid, n.notify_id, n.handle, ack, l);
	handles_done(r);
}

/* ---- the thread: notices, checks, the watch ---- */

/* A librados thread: queue the notice for our thread (never call back into librados here). */
static void pr_watch_cb(void *arg, uint64_t notify_id, uint64_t handle, uint64_t notifier_id,
                        void *data, size_t data_len)
{
	struct rbd_pr *pr = arg;
	uint64_t seq;
	bool queued = false;

	(void)notifier_id;
	/* damaged: seq 0, the record is read all the same */
	(void)rbd_pr_notice_decode(data, data_len, &seq);
	pthread_mutex_lock(&pr->lock);
	for (unsigned i = 0; i < PR_PENDING; i++) {
		if (!pr->pend[i].cookie) {
			pr->pend[i] =
			    (struct pr_notice){~0ull, notify_id, handle, seq, pr->watch_gen};
			queued = true;
			break;
		}
	}
	pr->kick |= !queued; /* too many at once: unanswered, but read the record */
	pthread_cond_signal(&pr->cond);
	pthread_mutex_unlock(&pr->lock);
}

static void pr_watch_err(void *arg, uint64_t cookie, int err)
{
	struct rbd_pr *pr = arg;

	(void)cookie;
	pthread_mutex_lock(&pr->lock);
	pr->watch_lost = true;
	pthread_cond_signal(&pr->cond);
	pthread_mutex_unlock(&pr->lock);
	HL_WARN_RL(RBD_LOG, "%s: the watch of %s failed (%s): watching it again", pr->o->uri,
	           pr->oid, strerror(-err));
}

/* The thread: (re)register the watch on the current connection; then read the record. */
static void rewatch(struct rbd_pr *pr)
{
	struct rbd_origin *r = ro_of(pr->o);
	uint64_t h;
	unsigned gen;
	int rc;

	handles_read(r);
	gen = atomic_load(&r->gen);
	pthread_mutex_lock(&pr->lock);
	bool same = pr->watching && pr->watch_gen == gen;
	pthread_mutex_unlock(&pr->lock);
	/* a watch of an old connection went with it (rbd_own.c closed that client) */
	if (same)
		rados_unwatch2(r->ioctx, pr->watch);
	obj_create(r, pr->oid);
	rc = rados_watch2(r->ioctx, pr->oid, &h, pr_watch_cb, pr_watch_err, pr);
	handles_done(r);
	pthread_mutex_lock(&pr->lock);
	pr->watching = rc == 0;
	pr->watch_lost = false;
	pr->watch_gen = gen;
	pr->watch = h;
	pr->kick = true; /* notices may have been missed meanwhile */
	pthread_mutex_unlock(&pr->lock);
	if (rc) {
		HL_WARN_RL(RBD_LOG, "%s: cannot watch %s: %s", pr->o->uri, pr->oid, strerror(-rc));
		fence_if_shut(pr->o, rc, gen);
	}
}

/* The thread: read the sequence number; the LU reads the record when it moved on. */
static void check(struct rbd_pr *pr)
{
	struct rbd_origin *r = ro_of(pr->o);
	uint64_t sent = hl_now_ns(), seq;
	unsigned gen;

	handles_read(r);
	gen = atomic_load(&r->gen);
	int rc = seq_read(r, pr->oid, &seq);
	handles_done(r);
	if (rc) {
		HL_WARN_RL(RBD_LOG,
		           "%s: cannot read the persistent reservations' sequence number: %s",
		           pr->o->uri, strerror(-rc));
		fence_if_shut(pr->o, rc, gen);
		return;
	}
	pthread_mutex_lock(&pr->lock);
	pr->checked = true;
	pr->checked_seq = seq;
	pr->checked_at_ns = sent;
	bool behind = seq > pr->applied;
	pthread_mutex_unlock(&pr->lock);
	if (behind)
		pr->changed(pr->arg, 0);
}

static void *pr_main(void *arg)
{
	struct rbd_pr *pr = arg;
	struct rbd_origin *r = ro_of(pr->o);
	uint64_t next_check = 0;

	pthread_mutex_lock(&pr->lock);
	while (!pr->stop) {
		uint64_t now = hl_now_ns();
		bool queued = false;
		for (unsigned i = 0; i < PR_PENDING && !queued; i++)
			queued = pr->pend[i].cookie == ~0ull;
		if (!queued && !pr->kick && !pr->watch_lost && now < next_check &&
		    (!pr->watching || pr->watch_gen == atomic_load(&r->gen))) {
			struct timespec ts;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			uint64_t d = next_check - now;
			ts.tv_sec += (time_t)(d / 1000000000u);
			ts.tv_nsec += (long)(d % 1000000000u);
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&pr->cond, &pr->lock, &ts);
			continue;
		}
		bool again =
		    pr->watch_lost || !pr->watching || pr->watch_gen != atomic_load(&r->gen);
		pthread_mutex_unlock(&pr->lock);
		if (again)
			rewatch(pr);
		/* the notices, oldest slot first: each is answered once the LU applied it */
		for (;;) {
			uint64_t cookie = 0;
			pthread_mutex_lock(&pr->lock);
			for (unsigned i = 0; i < PR_PENDING; i++) {
				if (pr->pend[i].cookie == ~0ull) {
					cookie = pr->pend[i].cookie = ++pr->next_cookie;
					break;
				}
			}
			pthread_mutex_unlock(&pr->lock);
			if (!cookie)
				break;
			pr->changed(pr->arg, cookie);
		}
		pthread_mutex_lock(&pr->lock);
		bool kick = pr->kick;
		pr->kick = false;
		pthread_mutex_unlock(&pr->lock);
		if (kick || hl_now_ns() >= next_check) {
			next_check = hl_now_ns() + mono_ms_to_ns(PR_CHECK_MS);
			check(pr);
		}
		pthread_mutex_lock(&pr->lock);
	}
	pthread_mutex_unlock(&pr->lock);
	return NULL;
}

int origin_rbd_pr_start(struct hl_origin *o, hl_origin_pr_changed_fn changed, void *arg)
{
	struct rbd_pr *pr = ro_of(o)->pr;
	int rc;

	if (!pr)
		return -EOPNOTSUPP;
	if (pr->started)
		return -EALREADY;
	pr->changed = changed;
	pr->arg = arg;
	pr->kick = true;
	rc = -pthread_create(&pr->thread, NULL, pr_main, pr);
	if (rc)
		return rc;
	pr->started = true;
	return 0;
}

void origin_rbd_pr_close(struct hl_origin *o)
{
	struct rbd_origin *r = ro_of(o);
	struct rbd_pr *pr = r->pr;

	if (!pr || atomic_exchange(&pr->closed, true))
		return;
	if (pr->started) {
		pthread_mutex_lock(&pr->lock);
		pr->stop = true;
		pthread_cond_signal(&pr->cond);
		pthread_mutex_unlock(&pr->lock);
		pthread_join(pr->thread, NULL);
		pr->started = false;
	}
	handles_read(r);
	if (pr->watching && pr->watch_gen == atomic_load(&r->gen)) {
		rados_unwatch2(r->ioctx, pr->watch);
		rados_watch_flush(r->cluster); /* no callback of ours runs after this */
	}
	pr->watching = false;
	handles_done(r);
}

void origin_rbd_pr_fini(struct hl_origin *o)
{
	struct rbd_origin *r = ro_of(o);
	struct rbd_pr *pr = r->pr;

	if (!pr)
		return;
	/*
	 * Apart from close: an LU's transaction may still be in a commit after
	 * pr_close (the daemon closes the notices first, then the LU, then the
	 * origin); its memory must outlive that.
	 */
	origin_rbd_pr_close(o);
	pthread_cond_destroy(&pr->cond);
	pthread_mutex_destroy(&pr->lock);
	r->pr = NULL;
	free(pr);
}
