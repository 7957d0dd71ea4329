/*
 * pr_shared.c - persistent reservations kept in a store that every gateway
 * of a disk shares (hl_lu_set_pr_store, scsi.h): the LU's copy of the
 * record, the transactions that change the record, applying a change that
 * any gateway made, and the transport's aborter.
 *
 * The record is pr_text.c's text form (version 2): the state, its
 * sequence number, and the last SCSI_PR_HISTORY changes with their side
 * effects, so that a gateway that learns of a change late (or of several
 * at once) still queues the right unit attentions and aborts the right
 * tasks. A gateway that missed more changes than the history holds
 * compares the old and the new state instead (registration gone:
 * REGISTRATIONS PREEMPTED; reservation changed: RESERVATIONS RELEASED).
 *
 * Transactions (PERSISTENT RESERVE OUT, RESERVE/RELEASE, a PERSISTENT
 * RESERVE IN whose copy is not current, and the end of an SPC-2 reservation
 * at a LUN reset or the holder's nexus loss) block on the cluster, so they
 * run on the LU's own thread (lu->pr_thread), one at a time, and complete
 * the command back on its reactor: read the record, apply the rules, write
 * it back if nobody changed it meanwhile (else read again), and let the
 * store tell every gateway before the command completes. The gateway that
 * made the change hears of it like the others (hl_lu_pr_changed), so its
 * own unit attentions and aborts are applied the same way, before its store
 * answers for it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "hotlun/event.h"
#include "hotlun/log.h"
#include "scsi/scsi_internal.h"

/* a change that keeps losing the race to other gateways' changes gives up (BUSY) */
#define PR_COMMIT_TRIES 64

/* ---- the transport's aborter ---- */

static pthread_rwlock_t aborter_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct hl_scsi_aborter aborter; /* guarded by aborter_lock */
static bool have_aborter;              /* guarded by aborter_lock */

void hl_scsi_set_aborter(const struct hl_scsi_aborter *a)
{
	pthread_rwlock_wrlock(&aborter_lock);
	have_aborter = a != NULL;
	if (a)
		aborter = *a;
	pthread_rwlock_unlock(&aborter_lock);
}

/* Abort the tasks of ids[0..n) on lu, then done(arg); at once when there is nothing to abort. */
static void abort_then(struct hl_lu *lu, const uint64_t *ids, unsigned n, void (*done)(void *),
                       void *arg)
{
	int rc = -ENOSYS;

	if (n) {
		pthread_rwlock_rdlock(&aborter_lock);
		if (have_aborter)
			rc = aborter.abort(aborter.arg, lu, ids, n, done, arg);
		pthread_rwlock_unlock(&aborter_lock);
		if (rc == 0)
			return;
		HL_WARN(SCSI_COMPONENT,
		        "%s: the tasks of %u preempted I_T nexus(es) are not aborted: %s", lu->name,
		        n, strerror(-rc));
	}
	done(arg);
}

/* ---- the record ---- */

struct pr_record {
	struct scsi_pr_state st;
	struct scsi_pr_change ch[SCSI_PR_HISTORY]; /* oldest first */
	unsigned n_ch;
};

static void record_init(struct pr_record *rec)
{
	scsi_pr_state_init(&rec->st);
	rec->n_ch = 0;
}

static void record_fini(struct pr_record *rec)
{
	for (unsigned i = 0; i < rec->n_ch; i++)
		scsi_pr_change_fini(&rec->ch[i]);
	rec->n_ch = 0;
	scsi_pr_state_fini(&rec->st);
}

/* Blocking: the store's record. @return 0, -EBADMSG (damaged: logged) or -errno. */
static int record_load(struct hl_lu *lu, struct pr_record *rec)
{
	char *text = NULL;
	size_t len = 0;
	int rc;

	record_init(rec);
	rc = lu->pr_store->load(lu->pr_store_arg, &text, &len);
	if (rc)
		return rc;
	rc = scsi_pr_parse(text, len, &rec->st, rec->ch, &rec->n_ch);
	free(text);
	if (rc == -EBADMSG)
		HL_ERR_RL(SCSI_COMPONENT,
		          "%s: the shared persistent reservation record is damaged; reservation "
		          "commands fail until it is repaired",
		          lu->name);
	return rc;
}

/* Append c (taken over) as the newest change, dropping the oldest beyond the history. */
static void record_push(struct pr_record *rec, struct scsi_pr_change *c)
{
	if (rec->n_ch == SCSI_PR_HISTORY) {
		scsi_pr_change_fini(&rec->ch[0]);
		memmove(&rec->ch[0], &rec->ch[1], (SCSI_PR_HISTORY - 1) * sizeof(rec->ch[0]));
		rec->n_ch--;
	}
	rec->ch[rec->n_ch++] = *c;
	memset(c, 0, sizeof(*c));
}

/* A gateway that missed changes beyond the history: tell its nexuses what changed for them. */
static void missed_changes(struct hl_lu *lu, const struct scsi_pr_state *old,
                           const struct scsi_pr_state *cur)
{
	struct scsi_lu_nexus *n;

	hl_list_for_each_entry(n, &lu->nexuses, link)
	{
		struct scsi_pr_who who = {n->initiator_port, n->rel_port};
		int was = scsi_pr_find(old, &who), is = scsi_pr_find(cur, &who);
		if (was >= 0 && is < 0)
			scsi_ua_push(n, SCSI_ASC_REGISTRATIONS_PREEMPTED);
		else if (is >= 0 && old->type &&
		         (old->type != cur->type ||
		          scsi_pr_is_holder(old, was) != scsi_pr_is_holder(cur, is)))
			scsi_ua_push(n, SCSI_ASC_RESERVATIONS_RELEASED);
	}
}

/*
 * Make rec the LU's copy if it is newer than the copy: the changes this
 * gateway has not applied yet are applied to its nexuses (unit attentions
 * now; the nexuses whose tasks go are returned in *ids, n of them,
 * malloc'ed). rec's state is taken over. Any thread; takes lu->lock.
 */
static void install(struct hl_lu *lu, struct pr_record *rec, uint64_t **ids, unsigned *n)
{
	struct scsi_lu_nexus *nx;
	unsigned cap = 0;
	bool others = false;

	*ids = NULL;
	*n = 0;
	pthread_mutex_lock(&lu->lock);
	if (lu->pr_loaded && rec->st.seq <= lu->pr.seq) {
		pthread_mutex_unlock(&lu->lock);
		return;
	}
	hl_list_for_each_entry(nx, &lu->nexuses, link) cap++;
	if (lu->pr_loaded && cap) {
		uint64_t next = lu->pr.seq + 1;
		unsigned first = rec->n_ch;
		for (unsigned i = 0; i < rec->n_ch; i++) {
			if (rec->ch[i].seq == next) {
				first = i;
				break;
			}
		}
		/* the history must hold every change since our copy, in order */
		bool whole = first < rec->n_ch && rec->ch[rec->n_ch - 1].seq == rec->st.seq &&
		             rec->n_ch - first == rec->st.seq - lu->pr.seq;
		*ids = calloc(cap, sizeof(**ids));
		if (whole) {
			for (unsigned i = first; i < rec->n_ch; i++) {
				if (rec->ch[i].lost)
					HL_WARN(SCSI_COMPONENT,
					        "%s: a persistent reservation change was recorded "
					        "without all its unit attentions",
					        lu->name);
				scsi_pr_fx_local(lu, &rec->ch[i], *ids ? *ids : NULL, n,
				                 *ids ? cap : 0, &others);
			}
		} else {
			HL_NOTICE(SCSI_COMPONENT,
			          "%s: %llu persistent reservation change(s) learned late; unit "
			          "attentions derived from the states",
			          lu->name, (unsigned long long)(rec->st.seq - lu->pr.seq));
			missed_changes(lu, &lu->pr, &rec->st);
		}
	}
	scsi_pr_state_fini(&lu->pr);
	lu->pr = rec->st;
	scsi_pr_state_init(&rec->st);
	lu->pr_loaded = true;
	pthread_mutex_unlock(&lu->lock);
	if (!*n) {
		free(*ids);
		*ids = NULL;
	}
}

/* ---- changes made elsewhere (the store's thread) ---- */

struct pr_applied {
	struct hl_lu *lu;
	uint64_t cookie, seq;
	uint64_t *ids;
};

static void applied_done(void *arg)
{
	struct pr_applied *a = arg;

	a->lu->pr_store->applied(a->lu->pr_store_arg, a->cookie, a->seq);
	free(a->ids);
	free(a);
}

void hl_lu_pr_changed(struct hl_lu *lu, uint64_t cookie)
{
	struct pr_record rec;
	struct pr_applied *a;
	unsigned n = 0;

	if (!lu->pr_store)
		return;
	int rc = record_load(lu, &rec);
	if (rc) {
		if (rc != -EBADMSG)
			HL_WARN_RL(SCSI_COMPONENT,
			           "%s: cannot read the shared persistent reservations: %s",
			           lu->name, strerror(-rc));
		/* not applied: the store does not answer for this gateway */
		lu->pr_store->applied(lu->pr_store_arg, cookie, 0);
		return;
	}
	a = calloc(1, sizeof(*a));
	uint64_t seq = rec.st.seq;
	uint64_t *ids;
	install(lu, &rec, &ids, &n);
	record_fini(&rec);
	pthread_mutex_lock(&lu->lock);
	if (lu->pr.seq > seq)
		seq = lu->pr.seq;
	pthread_mutex_unlock(&lu->lock);
	if (!a) {
		free(ids);
		lu->pr_store->applied(lu->pr_store_arg, cookie, seq);
		return;
	}
	a->lu = lu;
	a->cookie = cookie;
	a->seq = seq;
	a->ids = ids;
	if (n)
		HL_NOTICE(SCSI_COMPONENT,
		          "%s: PREEMPT AND ABORT through another gateway: aborting the tasks of %u "
		          "preempted nexus(es) here",
		          lu->name, n);
	abort_then(lu, ids, n, applied_done, a);
}

/* ---- transactions (the LU's store thread) ---- */

enum pr_job_kind {
	JOB_PR_OUT,
	JOB_PR_IN,
	JOB_RESERVE,
	JOB_RELEASE,
	JOB_RSV2_END, /* background: an SPC-2 reservation ends (nexus loss, LUN reset) */
};

struct pr_job {
	struct hl_lu *lu;
	struct hl_scsi_cmd *cmd;    /* NULL: background */
	struct hl_reactor *reactor; /* where cmd completes (NULL: on the store thread) */
	enum pr_job_kind kind;
	struct scsi_pr_req req;
	uint8_t *param; /* owned copy of the parameter list (req.param) */
	char port[SCSI_PR_PORT_MAX];
	uint16_t rel;
	bool anyone; /* JOB_RSV2_END: whoever holds it */
	uint8_t in_sa;
	uint8_t *in_buf;
	int in_len;
	uint64_t scratch; /* bytes of param and in_buf charged to the scratch budget */
	struct scsi_pr_verdict v;
	int err;
	uint64_t *ids;
	uint64_t t0_ns;
};

static void job_free(struct pr_job *job)
{
	scsi_scratch_give(job->scratch);
	free(job->param);
	free(job->in_buf);
	free(job->ids);
	free(job);
}

/* On cmd's reactor: the answer. */
static void job_complete(void *arg)
{
	struct pr_job *job = arg;
	struct hl_scsi_cmd *cmd = job->cmd;

	if (job->err == -EBUSY) {
		cmd->status = HL_SAM_BUSY;
		cmd->sense_len = 0;
	} else if (job->err) {
		/* the cluster did not answer (or the record is damaged): try again later */
		hl_scsi_set_sense(cmd, HL_SK_ABORTED_COMMAND, SCSI_ASC_LU_COMM_FAILURE);
	} else if (job->kind == JOB_PR_IN) {
		if (job->in_len < 0)
			scsi_sense_invalid_cdb(cmd, 1, 4);
		else
			scsi_data_in(cmd, job->in_buf, (uint32_t)job->in_len,
			             hl_get_be16(cmd->cdb + 7));
	} else {
		scsi_pr_verdict_set(cmd, &job->v);
	}
	if (job->kind == JOB_PR_OUT && !job->err)
		HL_DEBUG(SCSI_COMPONENT,
		         "%s: PERSISTENT RESERVE OUT %u through the shared store: %llu us",
		         job->lu->name, job->req.sa,
		         (unsigned long long)((hl_now_ns() - job->t0_ns) / 1000));
	job_free(job);
	scsi_cmd_complete(cmd);
}

/* Any thread, once the aborts the change started are done: hand the answer back. */
static void job_finish(void *arg)
{
	struct pr_job *job = arg;

	if (!job->cmd) {
		job_free(job);
		return;
	}
	if (!job->reactor) {
		job_complete(job);
		return;
	}
	while (hl_reactor_call(job->reactor, job_complete, job) < 0) {
		HL_ERR_RL(SCSI_COMPONENT,
		          "out of memory handing back a reservation command; retrying");
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
}

/* Apply the job's command to st. @return whether st changed (fx: its side effects). */
static bool job_apply(struct pr_job *job, struct scsi_pr_state *st, struct scsi_pr_change *fx)
{
	struct scsi_pr_who who = {job->port, job->rel};
	bool changed = false;

	switch (job->kind) {
	case JOB_PR_OUT:
		scsi_pr_apply(st, &job->req, &who, fx, &job->v, &changed);
		break;
	case JOB_RESERVE:
		scsi_pr_rsv2_reserve(st, &who, &job->v, &changed);
		break;
	case JOB_RELEASE:
	case JOB_RSV2_END:
		scsi_pr_rsv2_release(st, job->anyone ? NULL : &who, &changed);
		job->v.status = HL_SAM_GOOD;
		break;
	case JOB_PR_IN:
		break;
	}
	return changed;
}

static void job_run(void *arg)
{
	struct pr_job *job = arg;
	struct hl_lu *lu = job->lu;
	struct scsi_pr_caps caps = {.ptpl_c = true};
	struct scsi_pr_who by = {job->port, job->rel};
	unsigned n = 0;
	int rc;

	for (unsigned tries = 0;; tries++) {
		struct pr_record rec;
		struct scsi_pr_change fx;
		char *text = NULL;
		size_t len = 0;

		rc = record_load(lu, &rec);
		if (rc) {
			record_fini(&rec);
			break;
		}
		if (job->kind == JOB_PR_IN) {
			if (scsi_scratch_take(scsi_pr_in_max())) {
				job->scratch += scsi_pr_in_max();
				job->in_buf = malloc(scsi_pr_in_max());
			}
			if (!job->in_buf)
				rc = -EBUSY;
			else
				job->in_len =
				    scsi_pr_in_build(&rec.st, job->in_sa, &caps, job->in_buf);
			install(lu, &rec, &job->ids, &n);
			record_fini(&rec);
			break;
		}
		scsi_pr_change_init(&fx, &by);
		if (!job_apply(job, &rec.st, &fx)) {
			/* decided against the current record; the copy catches up on the way */
			scsi_pr_change_fini(&fx);
			install(lu, &rec, &job->ids, &n);
			record_fini(&rec);
			break;
		}
		uint64_t old = rec.st.seq;
		rec.st.seq = fx.seq = old + 1;
		record_push(&rec, &fx);
		rc = scsi_pr_format(&rec.st, rec.ch, rec.n_ch, &text, &len);
		if (rc == 0)
			rc = lu->pr_store->commit(lu->pr_store_arg, old, old + 1, text, len);
		free(text);
		if (rc == -ECANCELED && tries + 1 < PR_COMMIT_TRIES) {
			record_fini(&rec);
			continue; /* another gateway's change came first: decide again */
		}
		if (rc == -ECANCELED)
			rc = -EBUSY;
		if (rc == 0)
			install(lu, &rec, &job->ids, &n); /* usually done already: our own notice */
		record_fini(&rec);
		break;
	}
	if (rc) {
		job->err = rc;
		if (rc != -EBADMSG)
			HL_WARN_RL(SCSI_COMPONENT, "%s: shared persistent reservations: %s",
			           lu->name, strerror(-rc));
	}
	abort_then(lu, job->ids, n, job_finish, job);
}

/* Queue job on the LU's store thread. @return 0 or -errno (job not queued). */
static int job_queue(struct pr_job *job)
{
	job->t0_ns = hl_now_ns();
	return hl_reactor_call(job->lu->pr_thread, job_run, job);
}

static struct pr_job *job_new(struct hl_lu *lu, struct hl_scsi_cmd *cmd, enum pr_job_kind kind)
{
	struct pr_job *job = calloc(1, sizeof(*job));

	if (!job)
		return NULL;
	job->lu = lu;
	job->cmd = cmd;
	job->kind = kind;
	if (cmd) {
		struct scsi_pr_who who = scsi_pr_who_of(cmd);
		hl_strlcpy(job->port, who.port, sizeof(job->port));
		job->rel = who.rel;
		job->reactor = cmd->reactor;
	}
	return job;
}

/* Run cmd's reservation command as a transaction; SCSI_PENDING, or BUSY at once. */
static enum scsi_exec_result job_start(struct pr_job *job, struct hl_scsi_cmd *cmd)
{
	if (!job || job_queue(job) < 0) {
		if (job)
			job_free(job);
		cmd->status = HL_SAM_BUSY;
		cmd->sense_len = 0;
		return SCSI_DONE;
	}
	return SCSI_PENDING;
}

enum scsi_exec_result scsi_pr_shared_out(struct hl_scsi_cmd *cmd, const struct scsi_pr_req *req)
{
	struct pr_job *job = job_new(cmd->lu, cmd, JOB_PR_OUT);

	if (job) {
		job->req = *req;
		if (scsi_scratch_take(req->plen)) {
			job->scratch = req->plen;
			job->param = malloc(req->plen);
		}
		if (!job->param) {
			job_free(job);
			job = NULL;
		} else {
			memcpy(job->param, req->param, req->plen);
			job->req.param = job->param;
		}
	}
	return job_start(job, cmd);
}

enum scsi_exec_result scsi_pr_shared_in(struct hl_scsi_cmd *cmd)
{
	struct pr_job *job = job_new(cmd->lu, cmd, JOB_PR_IN);

	if (job)
		job->in_sa = cmd->cdb[1] & 0x1f;
	return job_start(job, cmd);
}

enum scsi_exec_result scsi_pr_shared_rsv2(struct hl_scsi_cmd *cmd, bool reserve)
{
	return job_start(job_new(cmd->lu, cmd, reserve ? JOB_RESERVE : JOB_RELEASE), cmd);
}

void scsi_pr_shared_rsv2_end(struct hl_lu *lu, const struct scsi_pr_who *who)
{
	struct pr_job *job = job_new(lu, NULL, JOB_RSV2_END);

	if (!job) {
		HL_ERR(SCSI_COMPONENT, "%s: no memory to end an SPC-2 reservation", lu->name);
		return;
	}
	if (who) {
		hl_strlcpy(job->port, who->port, sizeof(job->port));
		job->rel = who->rel;
	} else {
		job->anyone = true;
	}
	if (job_queue(job) < 0) {
		HL_ERR(SCSI_COMPONENT, "%s: no memory to end an SPC-2 reservation", lu->name);
		job_free(job);
	}
}

bool scsi_pr_shared_current(struct hl_lu *lu)
{
	return lu->pr_store->current(lu->pr_store_arg, lu->pr.seq);
}

/* ---- set-up ---- */

void scsi_pr_shared_stop(struct hl_lu *lu)
{
	if (lu->pr_thread) {
		hl_reactor_stop(lu->pr_thread); /* after what is queued */
		hl_reactor_destroy(lu->pr_thread);
		lu->pr_thread = NULL;
	}
	lu->pr_store = NULL;
	lu->pr_store_arg = NULL;
}

int hl_lu_set_pr_store(struct hl_lu *lu, const struct hl_lu_pr_store *ops, void *arg)
{
	struct pr_record rec;
	uint64_t *ids;
	unsigned n;
	int rc;

	scsi_pr_shared_stop(lu);
	if (!ops)
		return 0;
	rc = hl_reactor_create(&lu->pr_thread, "pr");
	if (rc == 0) {
		rc = hl_reactor_start(lu->pr_thread);
		if (rc) {
			hl_reactor_destroy(lu->pr_thread);
			lu->pr_thread = NULL;
		}
	}
	if (rc)
		return rc;
	pthread_mutex_lock(&lu->lock);
	if (lu->pr.n_regs)
		HL_WARN(SCSI_COMPONENT,
		        "%s: the persistent reservations kept in state_dir are not used: the "
		        "gateways share the ones their cluster keeps",
		        lu->name);
	scsi_pr_state_fini(&lu->pr);
	lu->rsv2_holder = 0;
	lu->pr_loaded = false;
	lu->pr_store_arg = arg;
	lu->pr_store = ops;
	pthread_mutex_unlock(&lu->lock);
	rc = record_load(lu, &rec);
	if (rc) {
		/* the store's own check reads it again; commands wait for that (BUSY) */
		HL_WARN(SCSI_COMPONENT, "%s: cannot read the shared persistent reservations: %s",
		        lu->name, strerror(-rc));
		record_fini(&rec);
		return 0;
	}
	install(lu, &rec, &ids, &n);
	free(ids);
	record_fini(&rec);
	HL_NOTICE(SCSI_COMPONENT,
	          "%s: persistent reservations shared by the gateways (%u registration(s)%s)",
	          lu->name, lu->pr.n_regs, lu->pr.type ? ", reserved" : "");
	return 0;
}

void hl_lu_pr_unshared(struct hl_lu *lu)
{
	lu->pr_unshared = true;
	HL_NOTICE(SCSI_COMPONENT,
	          "%s: several gateways, and no shared record for initiators' persistent "
	          "reservations: PERSISTENT RESERVE IN/OUT and RESERVE/RELEASE are not offered",
	          lu->name);
}

bool scsi_lu_pr_avail(const struct hl_lu *lu)
{
	return !lu->pr_unshared;
}
