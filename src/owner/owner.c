/*
 * owner.c - which gateway owns a disk (hotlun/owner.h, docs/gateways.md).
 *
 * One thread per shared disk runs a small state machine over the origin's
 * cluster operations (hl_origin_ops.own_*):
 *
 *   STANDBY --(released / nobody / owner silent for dead_ms / asked)--> ACQUIRING
 *   ACQUIRING --(the cluster says ours, the fence waited out, cache made coherent)--> OWNER
 *   OWNER --(a peer asked / planned stop)--> RELEASING --> STANDBY
 *   OWNER --(renew: fenced)--> STANDBY
 *
 * Reactors read the result through the LU's access provider (the ALUA
 * state of each gateway's group): a few atomics and two clock reads, no
 * lock. The lease is what keeps a hung owner from serving stale data: an
 * owner passes media commands only while its last successful renew was sent
 * less than lease_ms ago, and a gateway that takes the disk by force (the
 * old owner silent for dead_ms, then fenced by the cluster) waits lease_ms
 * and a margin before it serves, so whatever the old owner may still
 * believe has run out by then (clocks need only run at the same rate).
 *
 * Clocks (docs/gateways.md, "Limits and assumptions"). The lease runs on
 * CLOCK_BOOTTIME, which counts a system suspend (CLOCK_MONOTONIC does
 * not); condition waits stay on CLOCK_MONOTONIC (the only other clock a
 * pthread condition takes) and only decide when to wake. A paused VM is
 * worse: on common hypervisors (kvmclock, VMware, Hyper-V) MONOTONIC and
 * BOOTTIME both stand still while it is paused, so a thawed owner would
 * believe its lease still runs. What can be seen is seen:
 *  - the owner's thread notices a nap that overslept, or a renew whose
 *    round trip took longer than the lease: the lease is void at once, and
 *    only a renew sent after that counts;
 *  - the hypervisor's time sync (or NTP) steps CLOCK_REALTIME forward after
 *    a pause: the reactors compare REALTIME - BOOTTIME with its value when
 *    the last renew that counted was sent, and serve nothing while it moved
 *    forward by more than WALL_JUMP_MS, until a renew sent after the jump
 *    succeeds.
 * What remains: a pause after which nothing corrects REALTIME, or a command
 * served in the moment between the thaw and the correction, is not seen
 * here; it is bounded only by the thawed owner's next renew (lease_ms/4),
 * which finds it fenced.
 */
#include "hotlun/owner.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hotlun/conf.h"
#include "hotlun/log.h"
#include "hotlun/util.h"

#define OWN_LOG "owner"

/* How often a standby looks at the owner, and a forced takeover's margin on the lease. */
#define PEEK_MS        250
#define FENCE_MARGIN_MS 500
_Static_assert(FENCE_MARGIN_MS == HL_CONF_GATEWAY_MARGIN_MS &&
                   HL_OWNER_LEASE_MS == HL_CONF_GATEWAY_LEASE_MS &&
                   HL_OWNER_DEAD_MS == HL_CONF_GATEWAY_DEAD_MS,
               "conf_check's safety rule is the one the owner relies on");
/*
 * A request (STPG, hotlunctl) unanswered by an owner without heartbeat (a
 * SAN owner of an older version, or on a SAN that refuses the heartbeat's
 * REGISTER) for a lease, at least this long: force. A live owner sees it at its
 * next renew (every lease/4) and hands over or refuses; waiting four of
 * those is generous, and forcing a live one is safe anyway (it is fenced,
 * and its lease waited out), only slower than its handover.
 */
#define REQUEST_WAIT_MIN_MS 1000
/* A planned handover waits at most this long for the commands in flight. */
#define DRAIN_MS       30000
/* SET TARGET PORT GROUPS held until this gateway serves, at most this many at once. */
#define SETTLE_MAX     16
/* A problem that lasts is logged again this often. */
#define PROBLEM_LOG_MS 30000
/* REALTIME moved this much ahead of BOOTTIME since the last renew: a paused VM (see above). */
#define WALL_JUMP_MS   250

/* What hl_owner_status.problem says; each clears only its own kind. */
enum problem_kind {
	PROB_NONE = 0,
	PROB_PEEK,    /* a standby cannot read who owns the disk */
	PROB_RENEW,   /* the owner cannot renew */
	PROB_ACQUIRE, /* taking the disk failed (not "owned by another") */
	PROB_RELEASE, /* handing it back failed */
	PROB_DUP,     /* another process runs with our id */
};

enum own_state {
	ST_STANDBY = 0,
	ST_ACQUIRING,
	ST_OWNER,
	ST_RELEASING,
};

static const char *const state_names[] = {
	[ST_STANDBY] = "standby",
	[ST_ACQUIRING] = "acquiring",
	[ST_OWNER] = "owner",
	[ST_RELEASING] = "releasing",
};

struct hl_owner {
	char *disk;
	uint16_t gw;
	uint16_t gws[HL_ALUA_GROUPS_MAX];
	unsigned n_gws;
	unsigned lease_ms, dead_ms, hold_ms;
	unsigned request_wait_ms;      /* see REQUEST_WAIT_MIN_MS */
	struct hl_origin *backend;
	struct hl_lu *lu;
	struct hl_owner_hooks hooks;
	struct hl_lu_access access;

	/* read by reactors */
	_Atomic int state;             /* enum own_state */
	_Atomic int64_t lease_until;   /* ms, CLOCK_BOOTTIME: the owner serves before this */
	_Atomic int64_t wall_ref;      /* REALTIME - BOOTTIME (ms) when the renew that set
	                                  lease_until was sent: a jump forward is a pause */
	_Atomic uint16_t owner_seen;   /* the owner as last seen (us when we own it) */
	_Atomic int64_t asking_until;  /* ms: a standby that asked for the disk reports
	                                  transitioning until it owns it, at most this long */
	_Atomic unsigned transition_s; /* the implicit transition time now (transition_time) */

	pthread_t thread;
	bool started;
	bool watching;                 /* own_watch registered cluster_wake */
	pthread_mutex_t lock;          /* guards what follows; never held over cluster calls */
	pthread_cond_t cond;
	bool stop;
	bool kick;                     /* wake the thread now (a request, a handover, stop) */
	bool want;                     /* asked for the disk (STPG, hotlunctl) */
	bool give;                     /* asked to hand the disk over (planned) */
	uint64_t give_seq, given_seq;  /* handover requests and completions */
	uint64_t epoch;
	uint64_t transitions, takeovers;
	int64_t last_move;             /* ms of the last gain or loss, 0: never */
	char last[96];
	char problem[112];             /* hl_owner_status.problem, "" none */
	int problem_kind;              /* enum problem_kind of problem */
	bool released_self;            /* the last move was our own planned release */
	struct settle {                /* SET TARGET PORT GROUPS held (access_settle) */
		void (*done)(void *cookie); /* NULL: a free slot */
		void *cookie;
		int64_t until;              /* answered by then whatever happened */
	} settle[SETTLE_MAX];
	bool ever_owned;               /* owner thread: this process owned the disk once */
	unsigned peer_lease[HL_ALUA_GROUPS_MAX + 1]; /* owner thread: the lease each peer (gws[i];
	                                  the last: one not in gws) published when last seen
	                                  owning the disk, 0: never seen */
	int64_t dup_log;               /* owner thread: when the last duplicate id was logged */
};

static int64_t ts_ms(const struct timespec *ts)
{
	return (int64_t)ts->tv_sec * 1000 + ts->tv_nsec / 1000000;
}

/* The lease's clock: it counts a suspend (a paused VM's may still stand still: see above). */
static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return ts_ms(&ts);
}

/*
 * REALTIME - BOOTTIME in ms, and BOOTTIME in *now. BOOTTIME is read between
 * two REALTIME reads, which are taken again if they lie apart (this thread
 * was preempted between them, or REALTIME was stepped right then): a late
 * read must not look like a jump.
 */
static int64_t wall_off_ms(int64_t *now)
{
	struct timespec b, w1, w2;

	for (int i = 0;; i++) {
		clock_gettime(CLOCK_REALTIME, &w1);
		clock_gettime(CLOCK_BOOTTIME, &b);
		clock_gettime(CLOCK_REALTIME, &w2);
		if (ts_ms(&w2) - ts_ms(&w1) <= 5 || i == 3)
			break;
	}
	*now = ts_ms(&b);
	return ts_ms(&w1) - *now;
}

/*
 * The owner's lease runs: its last counted renew was sent less than lease_ms
 * ago on BOOTTIME, and REALTIME has not jumped ahead of BOOTTIME since (a
 * paused VM whose clock the hypervisor's time sync stepped forward).
 */
static bool lease_runs(struct hl_owner *ow)
{
	int64_t now, off = wall_off_ms(&now);

	return now < atomic_load(&ow->lease_until) &&
	       off - atomic_load(&ow->wall_ref) <= WALL_JUMP_MS;
}

/* ---- the LU's access provider (reactors; no lock) ---- */

static enum hl_alua_state own_group_state(struct hl_owner *ow)
{
	switch (atomic_load(&ow->state)) {
	case ST_OWNER:
		/* an owner whose lease ran out serves nothing until a renew succeeds */
		return lease_runs(ow) ? HL_ALUA_AO : HL_ALUA_TRANSITIONING;
	case ST_RELEASING:
		return HL_ALUA_TRANSITIONING;
	case ST_ACQUIRING:
		/*
		 * Taking the disk over (the lease wait, the cache's revalidation):
		 * still the standby it was, unless asked (below). Linux's
		 * scsi_dh_alua, activating this path after the owner's failed,
		 * reads standby and sends SET TARGET PORT GROUPS, which is held
		 * until this gateway serves (access_settle), and then reads
		 * active/optimized at once; reading transitioning instead it
		 * polls every 2 s and re-reads 2 s after the unit attention that
		 * says the group changed (measured: 6.2 s instead of 3.5 s).
		 */
	default:
		/*
		 * Asked for the disk (STPG): transitioning, not standby, until it is
		 * ours. An initiator that sent SET TARGET PORT GROUPS reads the
		 * states again at once; Linux's scsi_dh_alua takes a standby answer
		 * as "done, usable", sends its I/O, gets 04h/0Bh and fails the path,
		 * while transitioning (04h/0Ah) makes it wait and retry.
		 */
		return now_ms() < atomic_load(&ow->asking_until) ? HL_ALUA_TRANSITIONING
		                                                  : HL_ALUA_STANDBY;
	}
}

/*
 * A command that started while we served may finish with its data while we
 * still own the disk with a running lease: also during a planned release
 * (the drain), not after the lease ran out (a freeze: another gateway may
 * have written since).
 */
static bool access_serving(void *arg)
{
	struct hl_owner *ow = arg;
	int st = atomic_load(&ow->state);

	return (st == ST_OWNER || st == ST_RELEASING) && lease_runs(ow);
}

static enum hl_alua_state access_state(void *arg, uint16_t tpg)
{
	struct hl_owner *ow = arg;

	if (tpg == ow->gw)
		return own_group_state(ow);
	for (unsigned i = 0; i < ow->n_gws; i++) {
		if (ow->gws[i] != tpg)
			continue;
		/* a peer: active/optimized when it is the owner as we last saw it */
		if (atomic_load(&ow->state) != ST_OWNER && atomic_load(&ow->owner_seen) == tpg)
			return HL_ALUA_AO;
		return HL_ALUA_STANDBY;
	}
	return HL_ALUA_UNAVAILABLE;
}

static unsigned access_groups(void *arg, struct hl_alua_group *g, unsigned max)
{
	struct hl_owner *ow = arg;
	unsigned n = 0;

	for (unsigned i = 0; i < ow->n_gws && n < max; i++, n++) {
		memset(&g[n], 0, sizeof(g[n]));
		g[n].id = ow->gws[i];
		g[n].state = access_state(ow, ow->gws[i]);
	}
	return n;
}

static int access_set(void *arg, uint16_t via, uint16_t tpg, enum hl_alua_state state)
{
	struct hl_owner *ow = arg;

	(void)via;
	if (state != HL_ALUA_AO && state != HL_ALUA_ANO)
		return 0; /* only "make this group active" moves anything; others are noted */
	if (tpg != ow->gw)
		return 0; /* a peer's group: that gateway acts on its own STPG */
	int rc = hl_owner_request(ow);
	return rc == -EALREADY ? 0 : rc;
}

/*
 * The owner's lease as a taker must wait it out: the longer of ours and the
 * one it published (rbd writes it in its record; 0: not said). Gateways
 * should run the same timers, but one that does not must not make a
 * takeover shorter than the old owner's lease.
 */
static unsigned owner_lease(const struct hl_owner *ow, const struct hl_own_info *info)
{
	return HL_MAX(ow->lease_ms, info->lease_ms);
}

/* How long the owner's heartbeat must stand still before it is dead: its lease runs out first. */
static int64_t owner_dead(const struct hl_owner *ow, const struct hl_own_info *info)
{
	return HL_MAX((int64_t)ow->dead_ms, (int64_t)info->lease_ms + FENCE_MARGIN_MS);
}

/*
 * The longest a takeover takes when the longest lease among the gateways is
 * lease ms (ours or a peer's): the owner silent or not answering (a silent
 * owner is dead only after its lease and the margin: owner_dead), a peek to
 * see it, then its lease and the margin (owner_lease); rounded up, and a
 * second for the cache's revalidation (8 s with the defaults). Reported as
 * the implicit transition time; a SET TARGET PORT GROUPS is held up to this
 * less FENCE_MARGIN_MS.
 */
static unsigned transition_time(const struct hl_owner *ow, unsigned lease)
{
	const struct hl_own_info peer = {.lease_ms = lease}; /* the takeover's own formulas */
	int64_t wait_ms = HL_MAX(owner_dead(ow, &peer), (int64_t)ow->request_wait_ms) + PEEK_MS;

	return (unsigned)HL_MIN((wait_ms + owner_lease(ow, &peer) + FENCE_MARGIN_MS + 999) / 1000 + 1,
	                        (int64_t)255);
}

/*
 * The owner thread saw gateway gw own the disk with a published lease of
 * lease_ms (rbd's record; 0: not said). A taker waits the longer of its own
 * lease and the owner's (owner_lease, owner_dead), so the transition time
 * this gateway reports follows the longest lease among it and the peers it
 * has seen: an initiator is never told a move ends before it can. A peer's
 * lease is known once it owned the disk while this gateway watched
 * (docs/gateways.md, "same timers everywhere").
 */
static void peer_lease_seen(struct hl_owner *ow, uint16_t gw, unsigned lease_ms)
{
	unsigned i, lease = ow->lease_ms;

	if (!gw || gw == ow->gw || !lease_ms)
		return;
	for (i = 0; i < ow->n_gws && ow->gws[i] != gw; i++)
		;
	if (i == ow->n_gws)
		lease_ms = HL_MAX(lease_ms, ow->peer_lease[i]); /* peers not in gws share one */
	ow->peer_lease[i] = lease_ms;
	for (i = 0; i <= ow->n_gws; i++)
		lease = HL_MAX(lease, ow->peer_lease[i]);
	unsigned t = transition_time(ow, lease);
	if (atomic_exchange(&ow->transition_s, t) != t)
		HL_NOTICE(OWN_LOG, "disk %s: implicit transition time %u s (the longest lease of "
		          "this gateway and its peers: %u ms)", ow->disk, t, lease);
}

/* hl_lu_access.transition_time: REPORT TARGET PORT GROUPS' implicit transition time. */
static uint8_t access_transition_time(void *arg)
{
	return (uint8_t)atomic_load(&((struct hl_owner *)arg)->transition_s);
}

/*
 * SET TARGET PORT GROUPS asked for our group: answer it once we serve, so
 * that the initiator's next REPORT TARGET PORT GROUPS reads active/optimized,
 * not transitioning. Linux's scsi_dh_alua holds its I/O while a group is
 * transitioning and asks again only every 2 s (a unit attention cannot
 * reach it: no command is sent meanwhile), so a transitioning answer costs
 * up to 2 s more than the move itself. A handover from a live owner (told
 * through the cluster's watch) takes a round trip or two; a takeover from a
 * silent one takes dead_ms and the lease. Bounded as asking is: by the
 * implicit transition time REPORT TARGET PORT GROUPS reports (far below the
 * 60 s Linux gives an STPG); then answered GOOD all the same, the move
 * going on (transitioning).
 */
static int access_settle(void *arg, uint16_t tpg, void (*done)(void *cookie), void *cookie)
{
	struct hl_owner *ow = arg;
	int rc = -ENOSPC;

	if (tpg != ow->gw || (atomic_load(&ow->state) == ST_OWNER && lease_runs(ow)))
		return -EALREADY;
	pthread_mutex_lock(&ow->lock);
	for (unsigned i = 0; i < SETTLE_MAX && !ow->stop; i++) {
		if (ow->settle[i].done)
			continue;
		ow->settle[i].done = done;
		ow->settle[i].cookie = cookie;
		ow->settle[i].until =
		    now_ms() + (int64_t)atomic_load(&ow->transition_s) * 1000 - FENCE_MARGIN_MS;
		ow->kick = true;
		pthread_cond_broadcast(&ow->cond);
		rc = 0;
		break;
	}
	pthread_mutex_unlock(&ow->lock);
	return rc;
}

/* The owner's thread: answer the held SET TARGET PORT GROUPS that are due (all: every one). */
static void settle_due(struct hl_owner *ow, bool all)
{
	struct settle due[SETTLE_MAX];
	unsigned n = 0;
	bool serving = atomic_load(&ow->state) == ST_OWNER && lease_runs(ow);
	int64_t now = now_ms();

	pthread_mutex_lock(&ow->lock);
	for (unsigned i = 0; i < SETTLE_MAX; i++) {
		if (ow->settle[i].done && (all || serving || now >= ow->settle[i].until)) {
			due[n++] = ow->settle[i];
			ow->settle[i].done = NULL;
		}
	}
	pthread_mutex_unlock(&ow->lock);
	for (unsigned i = 0; i < n; i++)
		due[i].done(due[i].cookie);
}

/* The earliest bound of a held SET TARGET PORT GROUPS, in ms from now (INT64_MAX: none). */
static int64_t settle_next(struct hl_owner *ow)
{
	int64_t next = INT64_MAX, now = now_ms();

	pthread_mutex_lock(&ow->lock);
	for (unsigned i = 0; i < SETTLE_MAX; i++) {
		if (ow->settle[i].done && ow->settle[i].until - now < next)
			next = HL_MAX(ow->settle[i].until - now, (int64_t)0);
	}
	pthread_mutex_unlock(&ow->lock);
	return next;
}

/* ---- the state machine (the owner's thread) ---- */

static void set_last(struct hl_owner *ow, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void set_last(struct hl_owner *ow, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&ow->lock);
	va_start(ap, fmt);
	vsnprintf(ow->last, sizeof(ow->last), fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&ow->lock);
}

static void set_problem(struct hl_owner *ow, int kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A problem an admin must see (hotlunctl stats); the caller logs it. */
static void set_problem(struct hl_owner *ow, int kind, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&ow->lock);
	va_start(ap, fmt);
	vsnprintf(ow->problem, sizeof(ow->problem), fmt, ap);
	va_end(ap);
	ow->problem_kind = kind;
	pthread_mutex_unlock(&ow->lock);
}

/* The problem of this kind is over (another kind stays until it is over too). */
static void clear_problem(struct hl_owner *ow, int kind)
{
	pthread_mutex_lock(&ow->lock);
	if (ow->problem_kind == kind) {
		ow->problem[0] = '\0';
		ow->problem_kind = PROB_NONE;
	}
	pthread_mutex_unlock(&ow->lock);
}

/*
 * Our group's state changed: when what it reports changed, every nexus
 * hears ASYMMETRIC ACCESS STATE CHANGED (a standby that starts a takeover
 * still reports standby: no unit attention for that).
 */
static void set_state(struct hl_owner *ow, enum own_state st)
{
	enum hl_alua_state before = own_group_state(ow);

	if (atomic_exchange(&ow->state, st) != (int)st && ow->lu && own_group_state(ow) != before)
		hl_lu_access_changed(ow->lu);
}

static void moved(struct hl_owner *ow, bool forced, bool released)
{
	pthread_mutex_lock(&ow->lock);
	ow->released_self = released;
	ow->transitions++;
	if (forced)
		ow->takeovers++;
	ow->last_move = now_ms();
	pthread_mutex_unlock(&ow->lock);
}

/* ms from now on the monotonic clock (ow->cond waits on it). */
static struct timespec mono_after(int64_t ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	return ts;
}

/*
 * This thread was away far longer than it asked (a suspend, a stopped
 * process, a starved host): whatever the lease still says, it is void now;
 * the next renew, sent after this, decides again.
 */
static void lease_void(struct hl_owner *ow, const char *what, int64_t late_ms)
{
	if (atomic_exchange(&ow->lease_until, 0) == 0)
		return;
	HL_WARN(OWN_LOG, "disk %s: %s %lld ms late (this gateway was paused or starved): "
	        "serving nothing until a renew sent now succeeds", ow->disk, what,
	        (long long)late_ms);
}

/* Sleep up to ms, or until kicked. @return false when asked to stop. */
static bool nap(struct hl_owner *ow, int64_t ms)
{
	struct timespec ts = mono_after(ms < 1 ? 1 : ms);
	int64_t t0 = now_ms(), late;
	bool go;

	pthread_mutex_lock(&ow->lock);
	if (!ow->stop && !ow->kick)
		pthread_cond_timedwait(&ow->cond, &ow->lock, &ts);
	ow->kick = false;
	go = !ow->stop;
	pthread_mutex_unlock(&ow->lock);
	late = now_ms() - t0 - ms;
	if (late > ow->lease_ms)
		lease_void(ow, "woke", late);
	return go;
}

/*
 * A renew: the lease runs from the moment it was sent, and the wall clock's
 * offset then is what a later jump is measured from. A renew that took
 * longer than the lease proves nothing about now. @return the op's result.
 */
static int renew(struct hl_owner *ow, struct hl_own_info *info)
{
	int64_t sent, off = wall_off_ms(&sent), took;
	int rc;

	memset(info, 0, sizeof(*info));
	rc = ow->backend->ops->own_renew(ow->backend, ow->gw, ow->epoch, info);
	took = now_ms() - sent;
	if (rc == 0 && took > ow->lease_ms) {
		lease_void(ow, "a renew came back", took - ow->lease_ms);
	} else if (rc == 0) {
		atomic_store(&ow->wall_ref, off);
		atomic_store(&ow->lease_until, sent + ow->lease_ms);
	}
	return rc;
}

/*
 * A peer asks for the disk while this gateway will not hand it over (it
 * moved less than hold_ms ago, or it is taking it over or handing it over
 * right now): say no through the cluster, where it can (own_refuse), so an
 * asker that cannot tell a slow owner from a dead one (a SAN, no
 * heartbeat) does not take it by force. Then it may ask again later.
 */
static void refuse(struct hl_owner *ow, const struct hl_own_info *info, uint16_t keep_for,
                   const char *why)
{
	uint16_t r = info->requester;

	if (!r || r == ow->gw || r == keep_for || !ow->backend->ops->own_refuse)
		return;
	int rc = ow->backend->ops->own_refuse(ow->backend, ow->gw, r);
	if (rc)
		HL_WARN(OWN_LOG, "disk %s: cannot refuse gateway %u's request (%s): %s", ow->disk, r,
		        why, strerror(-rc));
	else
		HL_NOTICE(OWN_LOG, "disk %s: gateway %u asked for it; refused (%s)", ow->disk, r, why);
}

/* The cache's revalidation, on a thread of its own while the owner's thread renews. */
struct gain_job {
	struct hl_owner *ow;
	int rc;
	bool done; /* under ow->lock */
};

static void *gain_main(void *arg)
{
	struct gain_job *job = arg;
	struct hl_owner *ow = job->ow;
	int rc = ow->hooks.gained(ow->hooks.arg);

	pthread_mutex_lock(&ow->lock);
	job->rc = rc;
	job->done = true;
	ow->kick = true;
	pthread_cond_broadcast(&ow->cond);
	pthread_mutex_unlock(&ow->lock);
	return NULL;
}

/*
 * Make the cache coherent (hooks.gained: an rbd diff may take a while on a
 * large image) while renewing every lease/4, so that the peers keep seeing
 * a heartbeat and do not take the disk by force meanwhile. @return the
 * hook's result, or -ESHUTDOWN when the cluster fenced us in between.
 */
static int gain(struct hl_owner *ow)
{
	struct gain_job job = {.ow = ow};
	struct hl_own_info info;
	pthread_t t;
	bool fenced = false, done = false;

	if (!ow->hooks.gained)
		return 0;
	if (pthread_create(&t, NULL, gain_main, &job))
		return ow->hooks.gained(ow->hooks.arg);
	while (!done) {
		struct timespec next = mono_after(ow->lease_ms / 4);
		int rc = renew(ow, &info);
		fenced |= rc == -ESHUTDOWN;
		if (rc == 0)
			refuse(ow, &info, 0, "taking it over");
		pthread_mutex_lock(&ow->lock);
		/* gain_main broadcasts when done; other wake-ups just wait on */
		while (!job.done && pthread_cond_timedwait(&ow->cond, &ow->lock, &next) != ETIMEDOUT)
			;
		done = job.done;
		pthread_mutex_unlock(&ow->lock);
	}
	pthread_join(t, NULL);
	return fenced ? -ESHUTDOWN : job.rc;
}

/*
 * Hand a disk we just acquired back to the cluster without serving it. A
 * release that fails leaves the cluster saying we own it: no peer takes it
 * until it looks dead (rbd) or asks (SAN). Said, not swallowed.
 */
static void give_back(struct hl_owner *ow)
{
	int rc = ow->backend->ops->own_release(ow->backend, ow->gw, ow->epoch);

	atomic_store(&ow->asking_until, 0);
	if (ow->hooks.lost)
		ow->hooks.lost(ow->hooks.arg);
	atomic_store(&ow->lease_until, 0);
	set_state(ow, ST_STANDBY);
	if (rc) {
		set_problem(ow, PROB_RELEASE, "gave it back unused, but the release failed: %s",
		            strerror(-rc));
		HL_WARN(OWN_LOG, "disk %s: gave it back unused, but the release failed (%s): peers "
		        "take it only once it looks dead or they ask", ow->disk, strerror(-rc));
	} else {
		clear_problem(ow, PROB_RELEASE);
	}
}

/*
 * Take the disk. force: the owner looks dead (or ignored a request it
 * could not answer): the cluster fences it, and we wait out its lease.
 */
static void acquire(struct hl_owner *ow, const struct hl_own_info *seen, bool force,
                    const char *why)
{
	struct hl_own_info info;
	char err[96] = "";
	int64_t t0 = now_ms();
	uint64_t epoch = (seen->epoch > ow->epoch ? seen->epoch : ow->epoch) + 1;
	int rc;

	set_state(ow, ST_ACQUIRING);
	rc = ow->backend->ops->own_acquire(ow->backend, ow->gw, epoch, force, err, sizeof(err));
	if (rc) {
		atomic_store(&ow->asking_until, 0);
		set_state(ow, ST_STANDBY);
		if (rc != -EBUSY) {
			set_problem(ow, PROB_ACQUIRE, "cannot take ownership: %s%s%s", strerror(-rc),
			            *err ? ": " : "", err);
			HL_WARN(OWN_LOG, "disk %s: cannot take ownership (%s): %s%s%s", ow->disk, why,
			        strerror(-rc), *err ? ": " : "", err);
		}
		return;
	}
	clear_problem(ow, PROB_ACQUIRE);
	ow->epoch = epoch;
	atomic_store(&ow->owner_seen, ow->gw);
	if (force) {
		/*
		 * The old owner may still believe in its lease for its lease_ms
		 * after its last renew, which was sent before the fence: wait that
		 * out (renewing, so that a third gateway sees us alive).
		 */
		int64_t until = now_ms() + owner_lease(ow, seen) + FENCE_MARGIN_MS;
		while (now_ms() < until) {
			if (renew(ow, &info) == 0)
				refuse(ow, &info, 0, "taking it over");
			settle_due(ow, false);
			if (!nap(ow, HL_MIN(HL_MIN((int64_t)ow->lease_ms / 4, until - now_ms()),
			                    settle_next(ow)))) {
				give_back(ow); /* stopping: never serve before the wait is over */
				return;
			}
		}
	}
	rc = gain(ow);
	if (rc == 0)
		rc = renew(ow, &info);
	if (rc) {
		HL_ERR(OWN_LOG, "disk %s: took ownership but cannot serve (%s): giving it back",
		       ow->disk, strerror(-rc));
		give_back(ow);
		return;
	}
	pthread_mutex_lock(&ow->lock);
	ow->want = false;
	pthread_mutex_unlock(&ow->lock);
	ow->ever_owned = true;
	moved(ow, force, false);
	atomic_store(&ow->asking_until, 0);
	set_state(ow, ST_OWNER);
	settle_due(ow, false); /* the held SET TARGET PORT GROUPS: active now */
	set_last(ow, "gained (%s) epoch %llu in %lld ms", why, (unsigned long long)epoch,
	         (long long)(now_ms() - t0));
	HL_NOTICE(OWN_LOG, "disk %s: this gateway (%u) owns it now (%s), epoch %llu, after %lld ms",
	          ow->disk, ow->gw, why, (unsigned long long)epoch, (long long)(now_ms() - t0));
}

/*
 * Planned: stop serving, let the commands in flight finish, record the
 * proof, release. for_gw: the peer that asked (its request stands), 0.
 */
static void release(struct hl_owner *ow, const char *why, uint16_t for_gw)
{
	int64_t t0 = now_ms(), deadline = t0 + DRAIN_MS;

	set_state(ow, ST_RELEASING);
	/* the commands in flight finish; the heartbeat goes on meanwhile */
	int64_t renewed = now_ms();
	while (ow->lu && hl_lu_busy(ow->lu) && now_ms() < deadline) {
		if (now_ms() - renewed >= ow->lease_ms / 4) {
			struct hl_own_info info;
			renewed = now_ms();
			if (renew(ow, &info) == 0)
				refuse(ow, &info, for_gw, "handing it over");
		}
		struct timespec ts = {0, 2 * 1000000};
		nanosleep(&ts, NULL);
	}
	if (ow->lu && hl_lu_busy(ow->lu))
		HL_WARN(OWN_LOG, "disk %s: %u command(s) still running after %d s; releasing anyway",
		        ow->disk, hl_lu_busy(ow->lu), DRAIN_MS / 1000);
	if (ow->hooks.releasing)
		ow->hooks.releasing(ow->hooks.arg);
	int rc = ow->backend->ops->own_release(ow->backend, ow->gw, ow->epoch);
	if (ow->hooks.lost)
		ow->hooks.lost(ow->hooks.arg);
	atomic_store(&ow->lease_until, 0);
	atomic_store(&ow->owner_seen, 0);
	moved(ow, false, true);
	set_state(ow, ST_STANDBY);
	set_last(ow, "handed over (%s) in %lld ms", why, (long long)(now_ms() - t0));
	if (rc) {
		set_problem(ow, PROB_RELEASE, "handed over, but the release failed: %s",
		            strerror(-rc));
		HL_WARN(OWN_LOG, "disk %s: handed over (%s) in %lld ms, but the release failed (%s): "
		        "peers take it only once it looks dead or they ask", ow->disk, why,
		        (long long)(now_ms() - t0), strerror(-rc));
	} else {
		clear_problem(ow, PROB_RELEASE);
		HL_NOTICE(OWN_LOG, "disk %s: handed over (%s) in %lld ms", ow->disk, why,
		          (long long)(now_ms() - t0));
	}
}

/* The cluster gave the disk to another gateway while we owned it. */
static void fenced(struct hl_owner *ow, const struct hl_own_info *info)
{
	atomic_store(&ow->lease_until, 0);
	if (ow->hooks.lost)
		ow->hooks.lost(ow->hooks.arg);
	atomic_store(&ow->owner_seen, info->owner);
	moved(ow, false, false);
	set_state(ow, ST_STANDBY);
	set_last(ow, "lost: fenced by the cluster");
	HL_ERR(OWN_LOG,
	       "disk %s: another gateway took it (this one was fenced): serving nothing until it "
	       "is ours again",
	       ow->disk);
}

/*
 * Another process runs with this gateway's id (a misconfiguration, or a
 * restarted gateway whose old process lives on, cut off): the cluster tells
 * the two apart (a key per run, a client per process), the peers cannot.
 * Said loudly, at most every 30 s; this one never fights it for the disk.
 */
static void duplicate(struct hl_owner *ow, const char *what)
{
	if (ow->dup_log && now_ms() - ow->dup_log < PROBLEM_LOG_MS)
		return;
	ow->dup_log = now_ms();
	set_last(ow, "another process runs as gateway %u (%s)", ow->gw, what);
	set_problem(ow, PROB_DUP, "another process runs as gateway %u (%s)", ow->gw, what);
	HL_ERR(OWN_LOG,
	       "disk %s: another process runs as gateway %u (%s): two gateways must not share "
	       "one id ([global] gateway); this one does not take the disk from it",
	       ow->disk, ow->gw, what);
}

static void *owner_main(void *arg)
{
	struct hl_owner *ow = arg;
	struct hl_own_info info;
	uint64_t last_beat = 0;
	uint16_t last_owner = 0;
	bool last_released = false;
	int64_t beat_seen = now_ms(); /* when the owner's heartbeat last moved, or it released */
	int64_t asked = 0;            /* when we asked the owner for the disk, 0: not yet */
	int64_t refused_log = 0;
	int64_t peek_warned = 0;      /* when a failing peek was last logged, 0: it works */
	uint16_t lease_warned_gw = 0; /* a peer's other lease, logged once per value */
	uint32_t lease_warned = 0;
	bool renew_failing = false;

	for (;;) {
		pthread_mutex_lock(&ow->lock);
		bool stop = ow->stop, want = ow->want, give = ow->give_seq != ow->given_seq;
		int64_t last_move = ow->last_move;
		bool released_self = ow->released_self;
		pthread_mutex_unlock(&ow->lock);
		if (stop)
			break;
		settle_due(ow, false);

		if (atomic_load(&ow->state) == ST_OWNER) {
			if (give) {
				release(ow, "planned", 0);
				pthread_mutex_lock(&ow->lock);
				ow->given_seq = ow->give_seq;
				pthread_cond_broadcast(&ow->cond);
				pthread_mutex_unlock(&ow->lock);
				continue;
			}
			int64_t now, jump = wall_off_ms(&now) - atomic_load(&ow->wall_ref);
			if (jump > WALL_JUMP_MS && now < atomic_load(&ow->lease_until))
				HL_WARN(OWN_LOG, "disk %s: the wall clock jumped %lld ms ahead of the "
				        "boot clock (a paused VM whose time was corrected?): serving "
				        "nothing until a renew sent now succeeds", ow->disk,
				        (long long)jump);
			int rc = renew(ow, &info);
			if (rc == -ESHUTDOWN) {
				fenced(ow, &info);
				beat_seen = now_ms();
				continue;
			}
			if (rc && !renew_failing) {
				set_problem(ow, PROB_RENEW, "cannot renew ownership: %s", strerror(-rc));
				HL_WARN(OWN_LOG, "disk %s: cannot renew ownership: %s (the lease runs out "
				        "in %lld ms)", ow->disk, strerror(-rc),
				        (long long)(atomic_load(&ow->lease_until) - now_ms()));
			}
			if (rc == 0 && renew_failing)
				clear_problem(ow, PROB_RENEW);
			renew_failing = rc != 0;
			if (rc == 0 && info.requester == ow->gw)
				duplicate(ow, "it asks for the disk this one owns");
			if (rc == 0 && info.requester && info.requester != ow->gw) {
				if (now_ms() - last_move >= ow->hold_ms) {
					char why[32];
					snprintf(why, sizeof(why), "gateway %u asked", info.requester);
					release(ow, why, info.requester);
					continue;
				}
				if (ow->backend->ops->own_refuse) {
					char why[48];
					snprintf(why, sizeof(why), "it moved %lld ms ago",
					         (long long)(now_ms() - last_move));
					refuse(ow, &info, 0, why);
				} else if (now_ms() - refused_log > 5000) {
					refused_log = now_ms();
					HL_NOTICE(OWN_LOG, "disk %s: gateway %u asks for it; kept for %lld ms "
					          "more (moves at most every %u ms)", ow->disk, info.requester,
					          (long long)(ow->hold_ms - (now_ms() - last_move)), ow->hold_ms);
				}
			}
			nap(ow, ow->lease_ms / 4);
			continue;
		}

		if (give) { /* nothing to hand over */
			atomic_store(&ow->asking_until, 0);
			pthread_mutex_lock(&ow->lock);
			ow->given_seq = ow->give_seq;
			ow->want = false;
			pthread_cond_broadcast(&ow->cond);
			pthread_mutex_unlock(&ow->lock);
			continue;
		}
		/*
		 * Standby. What a peek shows was true somewhere between its send
		 * and its return: silence is proven from the return of the peek
		 * that first saw the current heartbeat to the send of the latest
		 * one, so a slow cluster (or a slow standby) never makes a healthy
		 * owner look dead.
		 */
		memset(&info, 0, sizeof(info));
		int64_t sent = now_ms();
		int rc = ow->backend->ops->own_peek(ow->backend, &info);
		if (rc) {
			/*
			 * Every standby failing here (permissions, no image id) means
			 * nobody ever serves the disk: an admin must hear of it.
			 */
			if (!peek_warned || now_ms() - peek_warned >= PROBLEM_LOG_MS) {
				peek_warned = now_ms();
				set_problem(ow, PROB_PEEK, "cannot see who owns it: %s", strerror(-rc));
				HL_WARN(OWN_LOG, "disk %s: cannot see who owns it: %s (this gateway "
				        "cannot take it over until it can)", ow->disk, strerror(-rc));
			}
			nap(ow, PEEK_MS);
			continue;
		}
		if (peek_warned) {
			peek_warned = 0;
			clear_problem(ow, PROB_PEEK);
			HL_NOTICE(OWN_LOG, "disk %s: sees who owns it again", ow->disk);
		}
		if (info.epoch > ow->epoch)
			ow->epoch = info.epoch;
		peer_lease_seen(ow, info.owner, info.lease_ms);
		if (info.lease_ms && info.lease_ms != ow->lease_ms && info.owner != ow->gw &&
		    (info.owner != lease_warned_gw || info.lease_ms != lease_warned)) {
			lease_warned_gw = info.owner;
			lease_warned = info.lease_ms;
			HL_WARN(OWN_LOG,
			        "disk %s: gateway %u runs with gateway_lease_ms = %u, this one with %u: "
			        "a takeover from it waits the longer lease; set the same timers on "
			        "every gateway (docs/gateways.md)",
			        ow->disk, info.owner, info.lease_ms, ow->lease_ms);
		}
		/* the cluster names our id as the owner, but not this process */
		bool other_self = info.owner == ow->gw && !info.released && !info.this_run;
		if (!other_self)
			clear_problem(ow, PROB_DUP);
		if (other_self && info.has_beat && last_owner == info.owner && last_beat &&
		    info.beat != last_beat)
			duplicate(ow, "its heartbeat goes on");
		/*
		 * A release counts as a sign of life: "released, but the lock
		 * stayed" is judged on the silence after it. An owner whose
		 * heartbeat stood still (renews failing, its thread starved: its
		 * lease void) that then hands over stopped serving before it
		 * released: taken as released, not forced (a fence and a lease
		 * wait for nothing). One that died between its two steps stops
		 * beating then: forced dead_ms after the release is seen.
		 */
		if (info.owner != last_owner || info.beat != last_beat ||
		    info.released != last_released) {
			last_owner = info.owner;
			last_beat = info.beat;
			last_released = info.released;
			beat_seen = now_ms();
		}
		if (atomic_exchange(&ow->owner_seen, info.released ? 0 : info.owner) !=
		        (info.released ? 0 : info.owner) && ow->lu)
			hl_lu_access_changed(ow->lu); /* the peers' groups changed */
		if (other_self && !info.has_beat && !ow->ever_owned &&
		    sent - beat_seen >= ow->lease_ms) {
			/*
			 * The cluster says the disk is our id's from an earlier run (a
			 * SAN reservation kept across a crash or power loss), and its
			 * key has not moved for a lease (four heartbeats of a live
			 * one; an older version's never moves): take it as from a
			 * silent owner, lease wait included (it is fenced: its key is
			 * preempted). Only before this process owned the disk: one
			 * that took it from us since is a duplicate. One whose key
			 * moves is alive (has_beat): left alone, as on rbd.
			 */
			acquire(ow, &info, true, "held by this gateway's earlier run");
			asked = 0;
		} else if (other_self && !info.has_beat && !ow->ever_owned) {
			/* looking a lease long whether its heartbeat moves */
		} else if (other_self && !info.has_beat && !want) {
			duplicate(ow, "it took the disk from this one");
		} else if (!info.owner || info.released) {
			/*
			 * A disk we handed over ourselves is left to the peer that asked
			 * (or that takes over from a stopping gateway) for hold_ms,
			 * unless somebody asks us for it; one a peer released is taken.
			 */
			bool ours = !info.owner || info.owner == ow->gw;
			if (want || !released_self || !ours || now_ms() - last_move >= ow->hold_ms) {
				/*
				 * Released in the record, yet the cluster may still hold the
				 * lock for the old owner (it died between the two steps):
				 * once its heartbeat has been still for dead_ms, force. A
				 * release with writes of unknown outcome asks to be fenced
				 * (info.fence), as does a release the cluster cannot tell
				 * from a lock that vanished under a live owner (a SAN's
				 * reservation cleared or lost): force at once, the cluster
				 * fences it first, and its lease is waited out.
				 */
				bool stuck = info.released && info.has_beat &&
				             sent - beat_seen >= owner_dead(ow, &info);
				bool fence = info.released && info.fence;
				acquire(ow, &info, stuck || fence,
				        fence   ? "released, not known to be planned: fenced"
				        : stuck ? "released, but the lock stayed with the old owner"
				        : info.owner ? "released" : "nobody owned it");
				asked = 0;
			}
		} else if (info.has_beat && sent - beat_seen >= owner_dead(ow, &info)) {
			char why[64];
			snprintf(why, sizeof(why), "gateway %u silent for %lld ms", info.owner,
			         (long long)(sent - beat_seen));
			HL_WARN(OWN_LOG, "disk %s: owner %s: taking over", ow->disk, why);
			acquire(ow, &info, true, why);
			beat_seen = now_ms();
			asked = 0;
		} else if (want && asked && info.refused) {
			/*
			 * The owner answered: not now (it moved less than its hold ago,
			 * or is moving the disk). Stop asking; an initiator that still
			 * needs this path asks again (SET TARGET PORT GROUPS).
			 */
			HL_NOTICE(OWN_LOG, "disk %s: gateway %u refused to hand it over (it moved a "
			          "moment ago, or is moving it)", ow->disk, info.owner);
			set_last(ow, "asked gateway %u for it: refused", info.owner);
			atomic_store(&ow->asking_until, 0);
			pthread_mutex_lock(&ow->lock);
			ow->want = false;
			pthread_mutex_unlock(&ow->lock);
			asked = 0;
		} else if (want) {
			if (!asked) {
				asked = now_ms();
				if (ow->backend->ops->own_request &&
				    ow->backend->ops->own_request(ow->backend, ow->gw) == 0)
					HL_NOTICE(OWN_LOG, "disk %s: asked gateway %u to hand it over",
					          ow->disk, info.owner);
				else
					asked = 1; /* no way to ask: force at once */
			}
			/*
			 * No heartbeat to tell a dead owner from a slow one: the
			 * request decides, once a peek sent request_wait_ms after it
			 * still shows neither a release nor a refusal.
			 */
			if (!info.has_beat && sent - asked >= ow->request_wait_ms) {
				acquire(ow, &info, true, "requested; the owner did not answer");
				asked = 0;
			}
		} else {
			asked = 0;
		}
		if (atomic_load(&ow->state) != ST_OWNER)
			nap(ow, HL_MIN((int64_t)PEEK_MS, settle_next(ow)));
	}
	settle_due(ow, true);
	return NULL;
}

/* ---- API ---- */

int hl_owner_create(const struct hl_owner_config *cfg, struct hl_origin *backend,
                    struct hl_lu *lu, const struct hl_owner_hooks *hooks, struct hl_owner **out)
{
	const struct hl_origin_ops *ops = backend ? backend->ops : NULL;
	struct hl_owner *ow;
	pthread_condattr_t ca;

	if (!cfg || !backend || !out || !cfg->gateway || !cfg->n_gateways ||
	    cfg->n_gateways > HL_ALUA_GROUPS_MAX)
		return -EINVAL;
	if (!ops->own_acquire || !ops->own_renew || !ops->own_release || !ops->own_peek)
		return -EOPNOTSUPP;
	ow = calloc(1, sizeof(*ow));
	if (!ow)
		return -ENOMEM;
	ow->disk = strdup(cfg->disk ? cfg->disk : "?");
	if (!ow->disk) {
		free(ow);
		return -ENOMEM;
	}
	ow->gw = cfg->gateway;
	ow->n_gws = cfg->n_gateways;
	memcpy(ow->gws, cfg->gateways, cfg->n_gateways * sizeof(ow->gws[0]));
	ow->lease_ms = cfg->lease_ms ? cfg->lease_ms : HL_OWNER_LEASE_MS;
	ow->dead_ms = cfg->dead_ms ? cfg->dead_ms : HL_OWNER_DEAD_MS;
	ow->hold_ms = cfg->hold_ms ? cfg->hold_ms : HL_OWNER_HOLD_MS;
	if (ow->dead_ms < ow->lease_ms + FENCE_MARGIN_MS)
		ow->dead_ms = ow->lease_ms + FENCE_MARGIN_MS; /* a silent owner's lease runs out first
		                                                 (conf_check refuses less) */
	ow->backend = backend;
	ow->lu = lu;
	if (hooks)
		ow->hooks = *hooks;
	if (ow->hooks.lost)
		ow->hooks.lost(ow->hooks.arg); /* a standby until the cluster says otherwise */
	snprintf(ow->last, sizeof(ow->last), "started as standby");
	pthread_mutex_init(&ow->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&ow->cond, &ca);
	pthread_condattr_destroy(&ca);
	ow->access.groups = access_groups;
	ow->access.state = access_state;
	ow->access.set = access_set;
	ow->access.serving = access_serving;
	ow->access.settle = access_settle;
	ow->access.transition_time = access_transition_time;
	ow->request_wait_ms = HL_MAX(ow->lease_ms, (unsigned)REQUEST_WAIT_MIN_MS);
	/* our own lease until a peer's longer one is seen (peer_lease_seen) */
	atomic_store(&ow->transition_s, transition_time(ow, ow->lease_ms));
	if (lu)
		hl_lu_set_access(lu, &ow->access, ow);
	*out = ow;
	return 0;
}

/*
 * The cluster says another gateway moved the disk or asked for it
 * (own_watch): look now rather than at the next peek or renew. On a thread
 * of the cluster's library: only the condition variable.
 */
static void cluster_wake(void *arg)
{
	struct hl_owner *ow = arg;

	pthread_mutex_lock(&ow->lock);
	ow->kick = true;
	pthread_cond_broadcast(&ow->cond);
	pthread_mutex_unlock(&ow->lock);
}

int hl_owner_start(struct hl_owner *ow)
{
	int rc;

	if (ow->backend->ops->own_watch &&
	    ow->backend->ops->own_watch(ow->backend, cluster_wake, ow) == 0)
		ow->watching = true;
	rc = pthread_create(&ow->thread, NULL, owner_main, ow);
	if (rc) {
		if (ow->watching)
			ow->backend->ops->own_watch(ow->backend, NULL, NULL);
		ow->watching = false;
		return -rc;
	}
	ow->started = true;
	return 0;
}

int hl_owner_request(struct hl_owner *ow)
{
	int rc = 0;

	if (atomic_load(&ow->state) == ST_OWNER)
		return -EALREADY;
	pthread_mutex_lock(&ow->lock);
	if (ow->last_move && now_ms() - ow->last_move < ow->hold_ms)
		rc = -EBUSY; /* moved a moment ago: no ping-pong */
	else {
		/* transitioning while asking, bounded by the transition time we report */
		atomic_store(&ow->asking_until,
		             now_ms() + (int64_t)atomic_load(&ow->transition_s) * 1000 -
		                 FENCE_MARGIN_MS);
		ow->want = true;
		ow->kick = true;
		pthread_cond_broadcast(&ow->cond);
	}
	pthread_mutex_unlock(&ow->lock);
	return rc;
}

int hl_owner_handover(struct hl_owner *ow, unsigned wait_ms)
{
	int64_t deadline = now_ms() + wait_ms;
	struct hl_own_info info;
	uint64_t seq;

	if (!ow->started)
		return 0;
	pthread_mutex_lock(&ow->lock);
	seq = ++ow->give_seq;
	ow->kick = true;
	pthread_cond_broadcast(&ow->cond);
	while (ow->given_seq < seq && !ow->stop)
		pthread_cond_wait(&ow->cond, &ow->lock);
	pthread_mutex_unlock(&ow->lock);
	/* released; a peer polls every PEEK_MS: wait until one owns it */
	while (now_ms() < deadline) {
		if (atomic_load(&ow->state) == ST_OWNER)
			return 0; /* taken back (nobody else wanted it) */
		if (ow->backend->ops->own_peek(ow->backend, &info) == 0 && info.owner &&
		    info.owner != ow->gw && !info.released) {
			atomic_store(&ow->owner_seen, info.owner);
			return 0;
		}
		struct timespec ts = {0, 50 * 1000000};
		nanosleep(&ts, NULL);
	}
	return -ETIMEDOUT;
}

const struct hl_lu_access *hl_owner_access(struct hl_owner *ow)
{
	return &ow->access;
}

void hl_owner_status(struct hl_owner *ow, struct hl_owner_status *st)
{
	memset(st, 0, sizeof(*st));
	st->state = state_names[atomic_load(&ow->state)];
	st->alua = own_group_state(ow);
	st->owner = atomic_load(&ow->owner_seen);
	st->lease_left_ms = atomic_load(&ow->state) == ST_OWNER
	                            ? atomic_load(&ow->lease_until) - now_ms()
	                            : 0;
	pthread_mutex_lock(&ow->lock);
	st->epoch = ow->epoch;
	st->transitions = ow->transitions;
	st->takeovers = ow->takeovers;
	snprintf(st->last, sizeof(st->last), "%s", ow->last);
	snprintf(st->problem, sizeof(st->problem), "%s", ow->problem);
	pthread_mutex_unlock(&ow->lock);
}

void hl_owner_destroy(struct hl_owner *ow)
{
	if (!ow)
		return;
	if (ow->started) {
		if (atomic_load(&ow->state) == ST_OWNER)
			hl_owner_handover(ow, 0);
		pthread_mutex_lock(&ow->lock);
		ow->stop = true;
		ow->kick = true;
		pthread_cond_broadcast(&ow->cond);
		pthread_mutex_unlock(&ow->lock);
		pthread_join(ow->thread, NULL);
	}
	if (ow->watching)
		ow->backend->ops->own_watch(ow->backend, NULL, NULL); /* no cluster_wake after this */
	pthread_mutex_lock(&ow->lock);
	ow->stop = true; /* no SET TARGET PORT GROUPS held from here on */
	pthread_mutex_unlock(&ow->lock);
	settle_due(ow, true);
	if (ow->lu)
		hl_lu_set_access(ow->lu, NULL, NULL);
	pthread_cond_destroy(&ow->cond);
	pthread_mutex_destroy(&ow->lock);
	free(ow->disk);
	free(ow);
}
