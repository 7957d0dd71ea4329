/*
 * iscsi_pr.c - the iscsi origin among gateways: who owns the SAN LUN, decided
 * and enforced by a SCSI-3 persistent reservation (the own_* ops), the
 * registration of every I/O session of the owner, and the warm restart
 * proofs that rest on the reservation (proof_take/proof_check). Sessions,
 * I/O, open and close are in iscsi.c.
 *
 * Ownership (hl_origin_opts.gateway != 0, several gateways on one LUN): a
 * SCSI-3 persistent reservation on the SAN LUN decides and enforces it.
 * Each run of a gateway has a key of its own, "hlu" + 16 random bits + a
 * heartbeat counter + the gateway id (0x686c75RRRRBBGGGG; keys that differ
 * only in the counter are one run): every gateway can name the owner from
 * READ RESERVATION, and a process never takes the reservation of another
 * process with the same gateway id (an earlier run, or a duplicate left
 * alive but cut off) for its own: its renew then says fenced; a run still
 * registered at the SAN is not drawn (pr_run_fresh). (Keys of
 * older versions, "hlun" + 0000 + id, read as a run of that gateway.) The
 * owner holds a
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
 * which then fails the write with -ESHUTDOWN). Without a reservation a
 * registrants-only LUN accepts anyone's writes, so a new owner preempts
 * every other hotlun key it finds
 * (an old owner's sessions, requests); keys of other initiators are left
 * alone, and a reservation they hold is never taken. A standby asks for
 * the disk by registering its key on its ownership session (which never
 * writes); release is SYNCHRONIZE CACHE + RELEASE, and "no reservation"
 * is what peers read as released. The heartbeat is a counter in the key
 * (iscsi_pr_key.h): each renew of the owner moves it on the PR session's
 * nexus, which holds the reservation, and a standby's look sees the
 * holder's key move (has_beat once it saw it move: an owner of an older
 * version, or on a SAN that refuses it, never moves it, and is taken over
 * only on request, as before). No place for the epoch: peers see
 * PRgeneration as the epoch. Registrations
 * carry APTPL = 1 unless the SAN refuses it. While not the owner (or once
 * fenced) the origin refuses writes itself with -ESHUTDOWN.
 */
#include "config.h"

#include "hotlun/log.h"
#include "hotlun/util.h"
#include "origin/iscsi_pr_key.h"
#include "origin/origin_iscsi.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#define ISC_PR_TYPE       SCSI_PERSISTENT_RESERVE_TYPE_WRITE_EXCLUSIVE_REGISTRANTS_ONLY
#define ISC_CTL_TIMEOUT_S 5   /* a PR command of the ownership thread */
#define ISC_CTL_TRIES     5   /* unit attentions and one reconnect */
#define ISC_PR_KEYS_MAX   256 /* READ KEYS: registrations looked at */

/* ---- keys: "hlu" + a run + a heartbeat + the gateway id (iscsi_pr_key.h) ---- */

/* 32 random bits, of which a key takes 16 as its run. */
static uint32_t run_random(void)
{
	uint32_t r;

	if (getrandom(&r, sizeof(r), 0) != sizeof(r))
		r = (uint32_t)hl_now_ns() ^ ((uint32_t)getpid() << 8);
	return r;
}

uint32_t (*origin_iscsi_run_draw)(void) = run_random;

uint64_t origin_iscsi_pr_key(uint16_t gw)
{
	uint32_t run = 0;

	/* never 0 (a run of 0 would make every process of one gateway id one run) */
	while (!run)
		run = origin_iscsi_run_draw() & 0xffff;
	return ISC_PR_KEY_PREFIX | (uint64_t)run << 24 | gw; /* heartbeat 0 */
}

/* ---- gateway: the data sessions' registrations ---- */

/* A registration step ended (or was cancelled): nothing of it is in flight any more. */
static struct scsi_task *reg_end(struct isc_session *s)
{
	struct scsi_task *t = s->reg_task;

	s->reg_task = NULL;
	s->reg_busy = false;
	return t;
}

void origin_iscsi_reg_drop(struct isc_session *s)
{
	scsi_free_scsi_task(reg_end(s));
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
	if (pr_key_same_run(holder, io->pr_key)) { /* our run, whatever its heartbeat */
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
bool origin_iscsi_pr_ready(struct isc_session *s, enum hl_io_op op)
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

/* ---- ownership among gateways: SCSI-3 persistent reservations ---- */

/* The SAN's persistent reservation state, as READ RESERVATION and READ KEYS tell it. */
struct pr_state {
	uint32_t generation;
	bool held;
	uint64_t holder; /* the reservation key of the holder */
	uint8_t type;
	unsigned nkeys;
	uint64_t keys[ISC_PR_KEYS_MAX];
};

void origin_iscsi_ctl_drop(struct isc_origin *io)
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
	ctx = origin_iscsi_context_make(io, 0);
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
			origin_iscsi_ctl_drop(io);
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
	if (rc == 0)
		io->ctl_key = sa_key;
	return rc;
}

/* READ RESERVATION, and READ KEYS when `keys`. ctl_lock held. */
static int pr_read_now(struct hl_origin *o, struct pr_state *st, bool keys)
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

/*
 * A run that is still registered is not ours to take (iscsi_pr_key.h): a
 * restarted gateway draws its previous process's 16 bits once in 65535
 * starts, and would then read that process's leftover registrations and
 * reservation as its own (this_run; its acquisition takes a reservation of
 * the earlier run without force, or fails on its heartbeat counter; its
 * request reads, to itself, as the old holder's key left registered, so a
 * CLEAR under a live owner looks planned and is taken without the fence;
 * the old process, if alive, and this one each see the other's keys as
 * their own). So before the first PR command of this process, and before
 * any REGISTER of its key (own_acquire and own_request start here, data
 * sessions register only once owned): READ KEYS, and draw again while a
 * key of our run is registered. Keys of other gateway ids never match (the
 * id is part of the run). Once per process; a failed look is repeated by
 * the next PR command. ctl_lock held. @return 0 or pr_read_now's.
 */
static int pr_run_fresh(struct hl_origin *o)
{
	struct isc_origin *io = io_of(o);
	uint64_t key = io->pr_key, was = key;
	struct pr_state *st;
	unsigned draws = 0;
	bool used = true;
	int rc;

	if (!key || io->run_fresh)
		return 0;
	st = malloc(sizeof(*st));
	if (!st)
		return -ENOMEM;
	rc = pr_read_now(o, st, true);
	while (rc == 0 && used) {
		used = false;
		for (unsigned i = 0; i < st->nkeys; i++)
			used |= pr_key_same_run(st->keys[i], key);
		if (!used)
			break;
		if (++draws > 64) { /* 64 misses among at most 256 keys: a broken source */
			HL_WARN(ISC_COMPONENT,
			        "%s: gateway %u: no free run for a reservation key after %u draws: "
			        "keeping 0x%016llx, which another process of this id uses",
			        o->uri, io->gateway, draws - 1, (unsigned long long)key);
			break;
		}
		key = origin_iscsi_pr_key(io->gateway);
	}
	free(st);
	if (rc)
		return rc;
	if (key != was) {
		HL_NOTICE(
		    ISC_COMPONENT,
		    "%s: gateway %u: key 0x%016llx is registered at the SAN (an earlier process "
		    "of this id): this one uses 0x%016llx",
		    o->uri, io->gateway, (unsigned long long)was, (unsigned long long)key);
		atomic_store(&io->pr_key, key);
	}
	io->run_fresh = true;
	return 0;
}

/* pr_read_now(), after pr_run_fresh() (the first PR command of this process). ctl_lock held. */
static int pr_read(struct hl_origin *o, struct pr_state *st, bool keys)
{
	int rc = pr_run_fresh(o);

	return rc ? rc : pr_read_now(o, st, keys);
}

/*
 * pr_read() under ctl_lock into a new *st (256 keys: too big for the stack
 * of every caller). The caller frees *st, which is NULL only with -ENOMEM.
 */
static int pr_read_new(struct hl_origin *o, bool keys, struct pr_state **st)
{
	struct isc_origin *io = io_of(o);
	int rc;

	*st = malloc(sizeof(**st));
	if (!*st)
		return -ENOMEM;
	pthread_mutex_lock(&io->ctl_lock);
	rc = pr_read(o, *st, keys);
	pthread_mutex_unlock(&io->ctl_lock);
	return rc;
}

/*
 * Remove victim's registrations as the holder of the reservation, and abort
 * the commands its I_T nexuses still have queued in the SAN (PREEMPT AND
 * ABORT): a write an old owner left there (timed out on its side, or given
 * up by a drain) must not land after the new owner's writes. A SAN without
 * AND ABORT gets a plain PREEMPT, said once: such a write may then still
 * land. ctl_lock held. @return pr_out's.
 */
static int pr_preempt(struct hl_origin *o, uint64_t victim)
{
	struct isc_origin *io = io_of(o);
	int rc = pr_out(o, SCSI_PERSISTENT_RESERVE_PREEMPT_AND_ABORT, io->ctl_key, victim);

	if (rc == -EINVAL) {
		if (!atomic_exchange(&io->no_abort, true))
			HL_WARN(
			    ISC_COMPONENT,
			    "%s: the SAN refuses PREEMPT AND ABORT: taking over with PREEMPT, "
			    "a write an old owner left queued in the SAN may still land after it",
			    o->uri);
		rc = pr_out(o, SCSI_PERSISTENT_RESERVE_PREEMPT, io->ctl_key, victim);
	}
	return rc;
}

static void pr_info(const struct pr_state *st, uint64_t self, struct hl_own_info *info)
{
	memset(info, 0, sizeof(*info));
	info->owner = st->held ? pr_key_gateway(st->holder) : 0;
	/*
	 * PRgeneration less the holder's heartbeat counter: each heartbeat
	 * moves both by one, so the epoch peers show moves with what changes
	 * hands (acquisitions, requests, preempts), not four times a second;
	 * by 256 when the counter goes round. Never below 0 (an older
	 * version's key, whose counter bits are part of its run).
	 */
	uint8_t beat = st->held && pr_key_gateway(st->holder) ? pr_key_beat(st->holder) : 0;
	info->epoch = st->generation >= beat ? st->generation - beat : st->generation;
	info->has_beat = false; /* own_peek says whether the holder's key moves */
	info->released = !st->held;
	info->this_run = st->held && pr_key_same_run(st->holder, self);
	for (unsigned i = 0; i < st->nkeys; i++) {
		uint16_t gw = pr_key_gateway(st->keys[i]);

		/* the holder's run (its data sessions keep heartbeat 0) and we are not asking */
		if (gw && !pr_key_same_run(st->keys[i], self) &&
		    !(st->held && pr_key_same_run(st->keys[i], st->holder))) {
			info->requester = gw;
			break;
		}
	}
}

/* Remember a gateway's key holding the reservation: own_peek judges its vanishing by it. */
static void pr_seen_holder(struct isc_origin *io, const struct pr_state *st)
{
	if (st->held && pr_key_gateway(st->holder))
		io->last_holder = st->holder;
}

/*
 * No reservation: planned (RELEASE, which keeps the releaser's
 * registrations) or lost (PR OUT CLEAR, a SAN that restarted without
 * APTPL, a controller failover that dropped the PR state: every
 * registration went with it). A planned release leaves a key of the last
 * holder's run registered; anything else, and a holder this process never
 * saw, is taken as lost: the old owner may still serve from its cache
 * and have writes queued in the SAN, and does not know (its data sessions
 * hear of it only with their next command). The taker must fence and
 * wait its lease out (info.fence).
 */
static bool pr_vanished(const struct isc_origin *io, const struct pr_state *st)
{
	if (st->held)
		return false;
	for (unsigned i = 0; io->last_holder && i < st->nkeys; i++)
		if (pr_key_same_run(st->keys[i], io->last_holder))
			return false;
	return true;
}

static int own_check_gw(struct isc_origin *io, uint16_t gw)
{
	return io->pr_key && gw == io->gateway ? 0 : -EINVAL;
}

/*
 * Take the reservation: register, then RESERVE (free) or PREEMPT (force; a
 * holder with another key of our own gateway id is another process, an
 * earlier run or a duplicate: taken only by force, like any other owner).
 * Then drop every other registration of ours and of other gateways: stale
 * ones of an old owner's data sessions would still let it write, since a
 * registrants-only reservation lets every registrant write.
 */
int origin_iscsi_own_acquire(struct hl_origin *o, uint16_t gw, uint64_t epoch, bool force,
                             char *why, size_t whylen)
{
	struct isc_origin *io = io_of(o);
	struct pr_state *st;
	uint64_t from_key;
	uint32_t from_gen, moves = 0; /* PR OUT commands of ours that moved PRgeneration */
	bool mine;
	int rc;

	(void)epoch; /* nowhere to keep it on the SAN: PRgeneration is what peers see */
	if (own_check_gw(io, gw))
		return -EINVAL;
	st = malloc(sizeof(*st));
	if (!st)
		return -ENOMEM;
	pthread_mutex_lock(&io->ctl_lock);
	io->acq_exact = false;
	rc = pr_read(o, st, false);
	if (rc) {
		snprintf(why, whylen, "READ RESERVATION: %s", strerror(-rc));
		goto out;
	}
	/* what a proof of an earlier run is checked against (origin_iscsi_proof_check) */
	from_key = st->held ? st->holder : 0;
	from_gen = st->generation;
	mine = st->held && pr_key_same_run(st->holder, io->pr_key);
	if (st->held && !mine && !pr_key_gateway(st->holder)) {
		snprintf(why, whylen, "reserved by another initiator (key 0x%016llx)",
		         (unsigned long long)st->holder);
		rc = -EBUSY;
		goto out;
	}
	if (st->held && !mine && !force) {
		snprintf(why, whylen, "owned by gateway %u%s", pr_key_gateway(st->holder),
		         pr_key_gateway(st->holder) == gw ? " (another process with this id)" : "");
		rc = -EBUSY;
		goto out;
	}
	rc = pr_register(o, io->pr_key);
	if (rc) {
		snprintf(why, whylen, "REGISTER: %s", strerror(-rc));
		goto out;
	}
	moves++;
	if (!st->held) {
		rc = pr_out(o, SCSI_PERSISTENT_RESERVE_RESERVE, io->ctl_key, 0);
		if (rc == -EBADE) {
			snprintf(why, whylen, "another gateway reserved it first");
			/* our key left registered would read as a request to the new owner */
			if (!atomic_load(&io->requested))
				pr_register(o, 0);
			rc = -EBUSY;
			goto out;
		}
	} else if (!mine) {
		/*
		 * The fence: the holder's registrations go, the SAN refuses its
		 * writes; AND ABORT also drops the commands it has queued there, so
		 * none of its writes lands after this returns. (The old owner's
		 * data sessions keep its run's key with heartbeat 0: they go in the
		 * sweep below, before this returns.)
		 */
		uint64_t victim = st->holder;

		rc = pr_preempt(o, victim);
		moves += rc == 0;
		if (rc == -EBADE && pr_read(o, st, false) == 0 && st->held &&
		    pr_key_same_run(st->holder, victim) && st->holder != victim) {
			/*
			 * Its key moved since we looked: the owner renewed its
			 * heartbeat just now, it is alive. Not taken; our key left
			 * registered would read as a request.
			 */
			snprintf(why, whylen, "gateway %u is alive: its heartbeat moved",
			         pr_key_gateway(victim));
			if (!atomic_load(&io->requested))
				pr_register(o, 0);
			rc = -EBUSY;
			goto out;
		}
		if (rc == -EBADE) {
			/* our registration went in between: another gateway preempted us */
			snprintf(why, whylen, "preempted while taking over");
			rc = -ESHUTDOWN;
			goto out;
		}
		st->holder = victim; /* for the log */
		if (rc == 0 && pr_key_gateway(st->holder) == gw)
			HL_NOTICE(ISC_COMPONENT,
			          "%s: gateway %u preempted key 0x%016llx, another process (an "
			          "earlier run) with this gateway id",
			          o->uri, gw, (unsigned long long)st->holder);
		else if (rc == 0)
			HL_NOTICE(ISC_COMPONENT, "%s: gateway %u preempted gateway %u", o->uri, gw,
			          pr_key_gateway(st->holder));
	}
	if (rc) {
		snprintf(why, whylen, "RESERVE/PREEMPT: %s", strerror(-rc));
		goto out;
	}
	/*
	 * This nexus holds it now. Preempting our own key removes our other
	 * registrations (this run's sessions of an earlier ownership); every
	 * other gateway key goes too: after a planned release the old owner's
	 * sessions are still registered, and a write of theirs may still be
	 * queued in the SAN. With AND ABORT each time: nothing queued by
	 * anyone before this acquisition lands after it.
	 */
	rc = pr_preempt(o, io->pr_key);
	moves += rc == 0;
	if (rc == 0)
		rc = pr_read(o, st, true);
	for (unsigned i = 0; rc == 0 && i < st->nkeys; i++) {
		if (!pr_key_same_run(st->keys[i], io->pr_key) && pr_key_gateway(st->keys[i])) {
			bool seen = false;

			/* one entry per registration: a key's first PREEMPT removed them all */
			for (unsigned j = 0; j < i; j++)
				seen |= st->keys[j] == st->keys[i];
			if (!seen) {
				rc = pr_preempt(o, st->keys[i]);
				moves += rc == 0;
			}
			if (rc == -EBADE)
				rc = 0; /* gone meanwhile (it unregistered): nothing left to remove
				         */
		}
	}
	if (rc == 0)
		rc = pr_read(o, st, false); /* what it left: the generation proofs start from */
	if (rc == 0 && (!st->held || st->holder != io->ctl_key))
		rc = -ESHUTDOWN;
	if (rc) {
		snprintf(why, whylen, "%s",
		         rc == -EBADE || rc == -ESHUTDOWN ? "preempted while taking over"
		                                          : strerror(-rc));
		if (rc == -EBADE)
			rc = -ESHUTDOWN;
		goto out;
	}
	/*
	 * Nobody but us changed the PR state while we took it: the generation
	 * moved by exactly our own commands. Then a proof that matched the
	 * state we found still holds (a restart after a crash stays warm).
	 */
	pr_seen_holder(io, st);
	io->acq_from_key = from_key;
	io->acq_from_gen = from_gen;
	io->acq_gen = st->generation;
	io->acq_key = st->holder;
	io->proof_key = 0; /* a proof of an earlier ownership is never given again */
	io->proof_gen = 0;
	io->acq_exact = st->generation == from_gen + moves;
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

/*
 * Our key on the PR session is not what ctl_key says (a REGISTER whose
 * answer was lost landed, and its repeat conflicted): when our run holds
 * the reservation, its key is the PR session's (only that nexus reserves).
 * ctl_lock held. @return true when ctl_key changed.
 */
static bool ctl_resync(struct hl_origin *o)
{
	struct isc_origin *io = io_of(o);
	struct pr_state *st = malloc(sizeof(*st));
	bool moved = false;

	if (st && pr_read(o, st, false) == 0 && st->held &&
	    pr_key_same_run(st->holder, io->pr_key) && st->holder != io->ctl_key) {
		io->ctl_key = st->holder;
		moved = true;
	}
	free(st);
	return moved;
}

/*
 * The owner's heartbeat on the SAN (iscsi_pr_key.h): REGISTER, our current
 * key -> the next counter, on the PR session's nexus, which holds the
 * reservation; the reservation follows the key (SPC-4 5.12.7), and a
 * standby's look sees the holder's key move. A plain REGISTER, not AND
 * IGNORE EXISTING KEY: a nexus that was preempted is not registered, and
 * its heartbeat must not register it back (it would read as a request).
 * A SAN that refuses the first one gets none, said once: standbys then see
 * a key that never moves, as from an older owner, and take the disk only
 * when asked. A later failure fails the renew: the owner's lease then runs
 * out as its standbys see its heartbeat stop, instead of serving on
 * while they take it as dead. ctl_lock held.
 * @return 1 a heartbeat was taken, 0 none (none to give), -errno: failed.
 */
static int pr_beat(struct hl_origin *o)
{
	struct isc_origin *io = io_of(o);
	uint64_t was = io->ctl_key;
	int rc;

	if (!was || io->no_beat)
		return 0;
	rc = pr_out(o, SCSI_PERSISTENT_RESERVE_REGISTER, was, pr_key_next_beat(was));
	if (rc == 0) {
		io->ctl_key = pr_key_next_beat(was);
		io->beats_ok++;
		return 1;
	}
	if (rc == -EBADE) {
		/* not registered under that key: the next one starts from the key the SAN
		 * has, and the read that follows tells whether we were preempted */
		ctl_resync(o);
		return 0;
	}
	if (rc != -EINVAL || io->beats_ok)
		return rc;
	io->no_beat = true;
	HL_WARN(ISC_COMPONENT,
	        "%s: the SAN refuses to change the reservation key (REGISTER): no heartbeat; a "
	        "standby takes this disk from a silent owner only when an initiator asks it",
	        o->uri);
	return 0;
}

int origin_iscsi_own_renew(struct hl_origin *o, uint16_t gw, uint64_t epoch,
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
	int beat = atomic_load(&io->owned) && !atomic_load(&io->fenced) ? pr_beat(o) : 0;
	rc = beat < 0 ? beat : pr_read(o, st, true);
	if (!rc) {
		/*
		 * SPC-4 moves PRgeneration at every REGISTER; a proof counts our
		 * heartbeats by it (iscsi_pr_key.h). A SAN where a heartbeat left
		 * it where the last renew read it does not: from then on no proof
		 * counts heartbeats (any move of our key is a change: cold).
		 */
		if (beat > 0 && io->beat_gen_seen && st->generation == io->beat_gen &&
		    !atomic_exchange(&io->gen_static, true))
			HL_WARN(ISC_COMPONENT,
			        "%s: the SAN did not move PRgeneration for a REGISTER (SPC-4 says it "
			        "must): warm restarts of this disk after its key moved start cold",
			        o->uri);
		io->beat_gen = st->generation;
		io->beat_gen_seen = true;
	}
	pthread_mutex_unlock(&io->ctl_lock);
	if (rc)
		goto out;
	pr_info(st, io->pr_key, info);
	pr_seen_holder(io, st);
	ours = false;
	for (unsigned i = 0; st->held && pr_key_same_run(st->holder, io->pr_key) && i < st->nkeys;
	     i++)
		ours |= st->keys[i] == st->holder;
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
int origin_iscsi_own_release(struct hl_origin *o, uint16_t gw, uint64_t epoch)
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
		rc = pr_out(o, SCSI_PERSISTENT_RESERVE_RELEASE, io->ctl_key, 0);
	if (rc == -EBADE && ctl_resync(o)) /* our key moved (a heartbeat's lost answer) */
		rc = pr_out(o, SCSI_PERSISTENT_RESERVE_RELEASE, io->ctl_key, 0);
	if (rc == -EBADE)
		rc = 0; /* not registered any more: preempted, nothing of ours to release */
	pthread_mutex_unlock(&io->ctl_lock);
	return rc;
}

int origin_iscsi_own_peek(struct hl_origin *o, struct hl_own_info *info)
{
	struct isc_origin *io = io_of(o);
	struct pr_state *st;
	bool registered = false;
	int rc;

	if (!io->pr_key)
		return -EINVAL;
	rc = pr_read_new(o, true, &st);
	if (rc == 0) {
		pr_info(st, io->pr_key, info);
		pr_seen_holder(io, st);
		info->fence = pr_vanished(io, st);
		if (st->held && !info->owner)
			info->released =
			    false; /* another initiator's reservation: not ours to take */
		/* our request's registration gone while another holds it: refused */
		for (unsigned i = 0; i < st->nkeys; i++)
			registered |= pr_key_same_run(st->keys[i], io->pr_key);
		info->refused = atomic_load(&io->requested) && st->held &&
		                !pr_key_same_run(st->holder, io->pr_key) && !registered;
		/*
		 * The heartbeat: the holder's key is the beat. Only once we saw
		 * this run's key move does its standing still mean silence (an
		 * owner of an older version, or on a SAN that refuses the
		 * heartbeat, never moves it: then a request decides, owner.c).
		 */
		uint64_t h = st->held && info->owner ? st->holder : 0;
		if (!pr_key_same_run(h, io->peek_key))
			io->peek_beats = false;
		else if (h != io->peek_key)
			io->peek_beats = true;
		io->peek_key = h;
		info->has_beat = io->peek_beats;
		info->beat = h;
	}
	free(st);
	return rc;
}

/* Ask: our key, registered on the PR session's nexus, is what the owner's renew reports. */
int origin_iscsi_own_request(struct hl_origin *o, uint16_t gw)
{
	struct isc_origin *io = io_of(o);
	int rc;

	if (own_check_gw(io, gw))
		return -EINVAL;
	pthread_mutex_lock(&io->ctl_lock);
	rc = pr_run_fresh(o); /* before io->pr_key is read for the REGISTER */
	if (rc == 0)
		rc = pr_register(o, io->pr_key);
	if (rc == 0)
		atomic_store(&io->requested, true);
	pthread_mutex_unlock(&io->ctl_lock);
	return rc;
}

/*
 * Refuse a request: the asker's registrations (keys of its gateway id other
 * than the holder's) go, with a plain PREEMPT (its PR session has nothing
 * queued worth aborting); the asker's peek sees its key gone (info.refused)
 * and does not preempt us. Moves PRgeneration, as the request did.
 */
int origin_iscsi_own_refuse(struct hl_origin *o, uint16_t gw, uint16_t requester)
{
	struct isc_origin *io = io_of(o);
	struct pr_state *st;
	int rc;

	if (own_check_gw(io, gw) || !requester || requester == gw)
		return -EINVAL;
	st = malloc(sizeof(*st));
	if (!st)
		return -ENOMEM;
	pthread_mutex_lock(&io->ctl_lock);
	rc = pr_read(o, st, true);
	if (rc == 0 && (!st->held || !pr_key_same_run(st->holder, io->pr_key)))
		rc = -ESHUTDOWN; /* not ours: nothing to refuse */
	for (unsigned i = 0; rc == 0 && i < st->nkeys; i++) {
		bool seen = false;

		if (pr_key_gateway(st->keys[i]) != requester ||
		    pr_key_same_run(st->keys[i], st->holder))
			continue;
		for (unsigned j = 0; j < i; j++)
			seen |= st->keys[j] == st->keys[i];
		/* our PR session holds it: its key is the holder's, heartbeat and all */
		if (!seen)
			rc = pr_out(o, SCSI_PERSISTENT_RESERVE_PREEMPT, st->holder, st->keys[i]);
		if (rc == -EBADE)
			rc = 0; /* it unregistered meanwhile */
	}
	pthread_mutex_unlock(&io->ctl_lock);
	free(st);
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
 * origin_iscsi_pr_ready). So: still the proof's key (this run's, or an
 * earlier run's of this gateway id: a restart), same PRgeneration ->
 * unchanged; anything else -> cannot tell. A proof is not taken while a write is out:
 * it could complete after the proof without having moved PRgeneration.
 * A release ends what a proof can show (nothing is reserved then).
 */
#define ISC_PROOF_PREFIX "iscsi-pr:"

int origin_iscsi_proof_take(struct hl_origin *o, const char *tag, bool final, char *proof,
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
	st = malloc(sizeof(*st));
	if (!st)
		return -ENOMEM;
	/*
	 * The epoch only while the SAN says the reservation is still this
	 * run's: the bump makes every data session REGISTER AND IGNORE EXISTING
	 * KEY before its next write, and an owner preempted while frozen (its
	 * renew has not told it yet) would register its nexuses back in under
	 * the new owner's registrants-only reservation (a spurious request to
	 * it, and a write of ours that could land after the REGISTER).
	 */
	pthread_mutex_lock(&io->ctl_lock);
	rc = pr_read(o, st, false);
	pthread_mutex_unlock(&io->ctl_lock);
	if (rc || !st->held || !pr_key_same_run(st->holder, io->pr_key)) {
		free(st);
		return -EAGAIN; /* not ours (any more), or no answer: try again later */
	}
	/* first the epoch (later writes re-register), then the writes already out */
	atomic_fetch_add(&io->proof_epoch, 1);
	if (atomic_load(&io->writes_out)) {
		free(st);
		return -EAGAIN;
	}
	pthread_mutex_lock(&io->ctl_lock);
	rc = final ? ctl_run(o, CTL_SYNC, 0, 0, 0, NULL) : 0;
	if (rc == -EINVAL)
		rc = 0; /* no SYNCHRONIZE CACHE: no volatile cache */
	if (rc == 0)
		rc = pr_read(o, st, false);
	pthread_mutex_unlock(&io->ctl_lock);
	if (rc == 0 && (!st->held || !pr_key_same_run(st->holder, io->pr_key)))
		rc = -EAGAIN; /* not ours (any more): the ownership module will hear it */
	if (rc == 0) {
		/*
		 * The holder's key: its heartbeat counter explains later moves
		 * (proof_check). While only heartbeats moved PRgeneration since
		 * our last proof, that proof is given again: the cache records a
		 * proof it got twice in a row (a quiet disk), and a heartbeat
		 * every lease/4 must not look like a write. Renewed once the
		 * counter went half round, so that the recorded one is replaced
		 * well before 256 heartbeats make it unprovable.
		 */
		pthread_mutex_lock(&io->ctl_lock);
		if (!pr_gen_explained(io->proof_key, io->proof_gen, st->holder, st->generation) ||
		    (uint8_t)(pr_key_beat(st->holder) - pr_key_beat(io->proof_key)) >= 128) {
			io->proof_key = st->holder;
			io->proof_gen = st->generation;
		}
		uint64_t key = io->proof_key;
		uint32_t gen = io->proof_gen;
		pthread_mutex_unlock(&io->ctl_lock);
		n = snprintf(proof, len, ISC_PROOF_PREFIX "%016llx:%u:%llu",
		             (unsigned long long)key, gen, (unsigned long long)o->size);
		if (n < 0 || (size_t)n >= len)
			rc = -EOPNOTSUPP;
	} else if (rc != -EAGAIN) {
		rc = -EAGAIN; /* the SAN did not answer: try again later */
	}
	free(st);
	return rc;
}

int origin_iscsi_proof_check(struct hl_origin *o, const char *tag, const char *proof,
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
	if (pr_key_gateway(key) != io->gateway) {
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
	/*
	 * Taken over since by this run from exactly the proof's state, and left
	 * alone since: the reservation was held by the proof's key, or ours,
	 * throughout, with no registration but our acquisition's own.
	 */
	bool acquired = io->acq_exact && atomic_load(&io->owned) &&
	                pr_gen_explained(key, gen, io->acq_from_key, io->acq_from_gen);
	uint32_t acq_gen = io->acq_gen;
	uint64_t acq_key = io->acq_key;
	pthread_mutex_unlock(&io->ctl_lock);
	/* every move of PRgeneration since is one of the holder's heartbeats (iscsi_pr_key.h) */
	/*
	 * Each acquisition registers counter 0 again, so a proof of this
	 * run counts only when taken in its current ownership (PRgeneration at
	 * or after the acquisition's); one from before a release or a fence
	 * would read the reset as 256 - counter heartbeats.
	 */
	bool this_acq = !pr_key_same_run(key, io->pr_key) ||
	                (atomic_load(&io->owned) && (int32_t)(gen - acq_gen) >= 0);
	bool same = !rc && st->held && this_acq &&
	            (atomic_load(&io->gen_static)
	                 ? key == st->holder && gen == st->generation
	                 : pr_gen_explained(key, gen, st->holder, st->generation));
	bool since = !rc && st->held && acquired && pr_key_same_run(st->holder, io->pr_key);
	bool since_ok = since && pr_gen_explained(acq_key, acq_gen, st->holder, st->generation);

	if (rc)
		snprintf(why, whylen, "READ RESERVATION: %s", strerror(-rc));
	else if (!st->held)
		snprintf(why, whylen, "no reservation (released or lost)");
	else if (same)
		snprintf(why, whylen,
		         "our reservation held throughout (PRgeneration %u, %u now: "
		         "heartbeats)",
		         gen, st->generation);
	else if (since_ok)
		snprintf(
		    why, whylen,
		    "held by this gateway throughout (PRgeneration %u, %u after this run took it, "
		    "%u now: heartbeats)",
		    gen, acq_gen, st->generation);
	else if (since)
		snprintf(why, whylen, "PRgeneration %u, %u after this run took it", st->generation,
		         acq_gen);
	else if (!pr_key_same_run(st->holder, key))
		snprintf(why, whylen, "reserved by key 0x%016llx", (unsigned long long)st->holder);
	else
		snprintf(why, whylen, "PRgeneration %u, proof %u", st->generation, gen);
	rc = same || since_ok ? 0 : -ESTALE;
	free(st);
	return rc;
}
