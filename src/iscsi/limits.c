/*
 * limits.c - who may hold a descriptor: the caps on connections that have
 * not finished login (per portal, per source) and on logged-in sessions
 * (in all, for discovery, per source), the reserve of descriptors kept for
 * the daemon's own files, and their defaults from the open-file limit.
 * A "source" is an IPv4 address or an IPv6 /64 (source.c): one host can
 * take a whole /64.
 *
 * What an initiator can hold without proving anything is bounded so that
 * it cannot keep others out:
 * - A portal full of connections that have not logged in closes the one
 *   that has shown the least progress (none at all first, the longest
 *   silent; else the one whose last login PDU is oldest) to take the new
 *   one, instead of refusing the new one: an attacker who keeps the table
 *   full with silent connections then only churns its own, while a real
 *   login, which sends its PDUs at once, goes through. A source over its
 *   own cap is refused (closed at accept).
 * - Logged-in sessions are capped in all and per source; discovery
 *   sessions (anyone may open them when discovery has no CHAP) get an
 *   eighth of the total, and conn.c logs out the idle ones. A login over a
 *   cap is refused with 0x0302 (out of resources: the initiator retries).
 * - A portal stops accepting while fewer than the reserve of descriptors
 *   are free (hl_iscsi_fd_reserve), so hotlunctl, saveconfig, a cache map
 *   or an origin's reconnect still get theirs; peers wait in the listen
 *   backlog. The descriptors the rest of the process holds are counted in
 *   /proc/self/fd (near the reserve every second at most, else every 5 s);
 *   the connections' own are counted as they open and close.
 *
 * All counts are under srv->lock; the descriptor count of the rest of the
 * process is the first reactor's (it runs the portals).
 */
#include <dirent.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>

#include "hotlun/log.h"
#include "iscsi/iscsi_internal.h"

unsigned hl_iscsi_fd_reserve(unsigned fd_limit)
{
	return HL_MIN(HL_MAX(64u, fd_limit / 16), fd_limit / 2);
}

static unsigned fd_limit_now(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return 1024;
	return rl.rlim_cur > UINT32_MAX / 2 ? UINT32_MAX / 2 : (unsigned)rl.rlim_cur;
}

/* Descriptors open in the process now; -EMFILE when not even the count can get one. */
static long count_open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	long n = 0;

	if (!d)
		return errno == EMFILE || errno == ENFILE ? -EMFILE : -errno;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n > 0 ? n - 1 : 0; /* less the directory's own */
}

static unsigned clampu(unsigned v, unsigned lo, unsigned hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

void iscsi_limits_locked(struct hl_iscsi_server *srv, struct hl_iscsi_limits *out)
{
	unsigned limit = atomic_load(&srv->fd_limit), r = hl_iscsi_fd_reserve(limit);
	unsigned base = srv->fd_room_at_start ? srv->fd_room_at_start : limit > r ? limit - r : 0;
	const struct hl_iscsi_login_limits *c = &srv->caps;

	out->fd_limit = limit;
	out->fd_reserve = r;
	out->caps.max_pending_logins = c->max_pending_logins
	                                   ? c->max_pending_logins
	                                   : clampu(base / 4, 16, HL_ISCSI_MAX_PENDING_LOGINS);
	out->caps.max_pending_logins_per_addr = c->max_pending_logins_per_addr
	                                            ? c->max_pending_logins_per_addr
	                                            : HL_ISCSI_MAX_PENDING_LOGINS_PER_ADDR;
	out->caps.max_sessions = c->max_sessions ? c->max_sessions : HL_MAX(base / 2, 16u);
	out->caps.max_sessions_per_addr = c->max_sessions_per_addr
	                                      ? c->max_sessions_per_addr
	                                      : clampu(out->caps.max_sessions / 8, 16, 1024);
	out->max_discovery_sessions = HL_MAX(out->caps.max_sessions / 8, 4u);
}

void hl_iscsi_server_limits(struct hl_iscsi_server *srv, struct hl_iscsi_limits *out)
{
	pthread_mutex_lock(&srv->lock);
	iscsi_limits_locked(srv, out);
	pthread_mutex_unlock(&srv->lock);
}

void iscsi_limits_init(struct hl_iscsi_server *srv, const struct hl_iscsi_login_limits *caps)
{
	srv->caps = *caps;
	for (unsigned i = 0; i < ISCSI_PEER_BUCKETS; i++)
		hl_list_init(&srv->peers[i]);
	hl_list_init(&srv->evict);
	atomic_store(&srv->fd_limit, fd_limit_now());
}

static void report_room(struct hl_iscsi_server *srv, bool at_start);

void hl_iscsi_server_set_login_limits(struct hl_iscsi_server *srv,
                                      const struct hl_iscsi_login_limits *lim)
{
	pthread_mutex_lock(&srv->lock);
	srv->caps = *lim;
	pthread_mutex_unlock(&srv->lock);
	report_room(srv, false);
}

/*
 * Log the room for connections and whether the caps fit in it. at_start:
 * the daemon's disks, caches and portals are open, and the defaults are
 * derived from the room left (not from the bare limit), so they fit.
 */
static void report_room(struct hl_iscsi_server *srv, bool at_start)
{
	struct hl_iscsi_limits lim;
	struct iscsi_portal *p;
	unsigned portals = 0, conns = atomic_load(&srv->n_conn_fds), limit = fd_limit_now();
	long open_now = count_open_fds();

	if (open_now < 0)
		return;
	unsigned other = (unsigned)open_now > conns ? (unsigned)open_now - conns : 0;
	unsigned reserve = hl_iscsi_fd_reserve(limit);
	unsigned room = limit > other + reserve ? limit - other - reserve : 0;
	atomic_store(&srv->fd_limit, limit);
	pthread_mutex_lock(&srv->lock);
	if (at_start)
		srv->fd_room_at_start = HL_MAX(room, 1u);
	iscsi_limits_locked(srv, &lim);
	hl_list_for_each_entry(p, &srv->portals, link)
	{
		portals++;
	}
	pthread_mutex_unlock(&srv->lock);
	uint64_t caps =
	    (uint64_t)lim.caps.max_pending_logins * HL_MAX(portals, 1u) + lim.caps.max_sessions;
	HL_NOTICE(
	    ISCSI_LOG,
	    "descriptors: %u of the open-file limit %u held by the daemon, %u kept for its own "
	    "files: room for %u connections (max_sessions %u, %u per address, %u for "
	    "discovery; max_pending_logins %u on each of %u portal(s))",
	    other, lim.fd_limit, lim.fd_reserve, room, lim.caps.max_sessions,
	    lim.caps.max_sessions_per_addr, lim.max_discovery_sessions, lim.caps.max_pending_logins,
	    portals);
	if (caps > room)
		HL_WARN(ISCSI_LOG,
		        "the caps allow %llu connections, more than the room for %u under the "
		        "open-file limit: when descriptors run short new connections wait in the "
		        "listen backlog instead (raise LimitNOFILE, or lower max_sessions or "
		        "max_pending_logins)",
		        (unsigned long long)caps, room);
}

void hl_iscsi_server_check_room(struct hl_iscsi_server *srv)
{
	report_room(srv, true);
}

bool iscsi_fd_room(struct hl_iscsi_server *srv, unsigned *in_use, unsigned *reserve)
{
	unsigned limit = atomic_load(&srv->fd_limit), conns = atomic_load(&srv->n_conn_fds);
	unsigned r = hl_iscsi_fd_reserve(limit);
	uint64_t now = hl_now_ns(), age = now - srv->fd_other_ns;
	bool near = (uint64_t)conns + srv->fd_other + 2ull * r >= limit;

	if (!srv->fd_other_ns ||
	    age >= (near ? ISCSI_FD_COUNT_NEAR_MS : ISCSI_FD_COUNT_FAR_MS) * 1000000ull) {
		long n = count_open_fds();

		limit = fd_limit_now();
		atomic_store(&srv->fd_limit, limit);
		r = hl_iscsi_fd_reserve(limit);
		conns = atomic_load(&srv->n_conn_fds);
		if (n == -EMFILE)
			srv->fd_other = limit; /* not even one to count with: no room */
		else if (n >= 0)
			srv->fd_other = (unsigned)n > conns ? (unsigned)n - conns : 0;
		srv->fd_other_ns = now;
	}
	*in_use = conns + srv->fd_other;
	*reserve = r;
	return (uint64_t)conns + srv->fd_other + r < limit;
}

/* ---- sources ---- */

static struct hl_list *peer_bucket(struct hl_iscsi_server *srv, const struct iscsi_source *s)
{
	uint32_t h = 2166136261u; /* FNV-1a */

	for (size_t i = 0; i < sizeof(s->b); i++)
		h = (h ^ s->b[i]) * 16777619u;
	return &srv->peers[h % ISCSI_PEER_BUCKETS];
}

/* The entry of peer's source (NULL when none and !create, or ENOMEM). Lock held. */
static struct iscsi_peer *peer_get(struct hl_iscsi_server *srv, const struct sockaddr_storage *peer,
                                   bool create)
{
	struct iscsi_source src;
	struct hl_list *b;
	struct iscsi_peer *e;

	iscsi_source_of(peer, false, &src);
	b = peer_bucket(srv, &src);
	hl_list_for_each_entry(e, b, link)
	{
		if (iscsi_source_eq(&e->src, &src))
			return e;
	}
	if (!create || !(e = calloc(1, sizeof(*e))))
		return NULL;
	e->src = src;
	hl_list_add_tail(b, &e->link);
	return e;
}

static void peer_maybe_free(struct iscsi_peer *e)
{
	if (e && !e->n_pending && !e->n_sessions) {
		hl_list_del(&e->link);
		free(e);
	}
}

/* ---- connections that have not finished login ---- */

/* c no longer counts as a pending login. Lock held. */
static void pending_release_locked(struct iscsi_conn *c)
{
	struct iscsi_portal *p = c->pend_portal;

	if (p) {
		hl_list_del(&c->pend_link);
		p->n_pending--;
	}
	if (c->pend_peer) {
		c->pend_peer->n_pending--;
		peer_maybe_free(c->pend_peer);
	}
	c->pend_portal = NULL;
	c->pend_peer = NULL;
}

/* How many connections in login c's source holds (0: none known). Lock held. */
static unsigned source_pending(const struct iscsi_conn *c)
{
	return c->pend_peer ? c->pend_peer->n_pending : 0;
}

/*
 * The connection of p to close for a new one: one that never sent a login
 * PDU, from the source holding the most connections in login (a flood
 * churns many of them; a real initiator has one or two, and on a loaded
 * host may not have sent its first PDU yet when a flood's connections are
 * younger than its own), the longest silent of that source; else the one
 * whose last login PDU is oldest. Lock held.
 */
static struct iscsi_conn *pending_victim(struct iscsi_portal *p)
{
	struct iscsi_conn *c, *silent = NULL, *stale = NULL;
	uint64_t stale_ns = UINT64_MAX;

	hl_list_for_each_entry(c, &p->pending, pend_link)
	{
		uint64_t t = atomic_load_explicit(&c->login_pdu_ns, memory_order_relaxed);

		if (!t) {
			unsigned n = source_pending(c), best = silent ? source_pending(silent) : 0;
			if (!silent || n > best || (n == best && c->accept_ns < silent->accept_ns))
				silent = c;
		} else if (t < stale_ns) {
			stale = c;
			stale_ns = t;
		}
	}
	return silent ? silent : stale;
}

/*
 * Close the connections queued on srv->evict that live on this reactor and
 * have started there. One not started yet has its start still queued
 * behind this call (a call queued for an earlier victim finds the later
 * ones too): closed now, the start that follows would run on freed memory
 * (a double free under connection churn, seen in net_pending_fair.sh). It
 * stays queued; iscsi_conn_start closes it.
 */
static void evict_run(void *arg)
{
	struct hl_iscsi_server *srv = arg;
	struct hl_reactor *me = hl_reactor_current();

	for (;;) {
		struct iscsi_conn *c, *found = NULL;

		pthread_mutex_lock(&srv->lock);
		hl_list_for_each_entry(c, &srv->evict, evict_link)
		{
			if (c->reactor == me && c->started) {
				found = c;
				break;
			}
		}
		if (found)
			hl_list_del(&found->evict_link);
		pthread_mutex_unlock(&srv->lock);
		if (!found)
			break;
		/* only this reactor frees it, so it is still there */
		if (found->state == CONN_LOGIN)
			iscsi_conn_close(found, ISCSI_EVICTED_WHY);
	}
	iscsi_call_done(srv);
}

bool iscsi_conn_evict_queued(struct iscsi_conn *c)
{
	bool queued;

	pthread_mutex_lock(&c->srv->lock);
	queued = !hl_list_empty(&c->evict_link);
	hl_list_del(&c->evict_link);
	pthread_mutex_unlock(&c->srv->lock);
	return queued;
}

struct iscsi_peer *iscsi_pending_admit(struct hl_iscsi_server *srv, struct iscsi_portal *p,
                                       const struct sockaddr_storage *peer, const char **why)
{
	struct hl_iscsi_limits lim;
	struct iscsi_peer *e;
	struct iscsi_conn *victim = NULL;
	char pbuf[80], abuf[80];
	uint64_t now = hl_now_ns();

	pthread_mutex_lock(&srv->lock);
	iscsi_limits_locked(srv, &lim);
	e = peer_get(srv, peer, false);
	if (e && e->n_pending >= lim.caps.max_pending_logins_per_addr) {
		*why = "max_pending_logins_per_addr";
	} else if (p->n_pending >= lim.caps.max_pending_logins && !(victim = pending_victim(p))) {
		*why = "max_pending_logins";
	} else if (!e && !(e = peer_get(srv, peer, true))) {
		*why = "no memory";
	} else {
		/* counted first: the victim may be the last one of this source */
		e->n_pending++;
		p->n_pending++;
		if (victim) {
			pending_release_locked(victim);
			hl_list_add_tail(&srv->evict, &victim->evict_link);
			srv->pending_calls++;
			srv->st_evicted++;
			if (iscsi_episode_hit(&p->evicting, now))
				HL_WARN(ISCSI_LOG,
				        "portal %s: %u connections have not finished login "
				        "(max_pending_logins %u): closing the one silent longest for "
				        "each new one",
				        hl_format_sockaddr(&p->addr, pbuf, sizeof(pbuf)), p->n_pending,
				        lim.caps.max_pending_logins);
		}
		struct hl_reactor *r = victim ? victim->reactor : NULL;
		pthread_mutex_unlock(&srv->lock);
		if (r && hl_reactor_call(r, evict_run, srv) < 0)
			iscsi_call_done(srv); /* stays queued; closed by its own timeout */
		return e;
	}
	srv->st_refused_pending++;
	if (iscsi_episode_hit(&p->refusing, now)) {
		hl_format_sockaddr(&p->addr, pbuf, sizeof(pbuf));
		if (e && strcmp(*why, "max_pending_logins_per_addr") == 0)
			HL_WARN(ISCSI_LOG,
			        "portal %s: %s has %u connections that have not finished login "
			        "(max_pending_logins_per_addr %u); closing the new ones of every "
			        "source over it",
			        pbuf, iscsi_source_str(&e->src, abuf, sizeof(abuf)), e->n_pending,
			        lim.caps.max_pending_logins_per_addr);
		else
			HL_WARN(ISCSI_LOG, "portal %s: %s; closing new connections", pbuf,
			        strcmp(*why, "no memory") == 0 ? "out of memory"
			                                       : "no connection in login to evict");
	}
	pthread_mutex_unlock(&srv->lock);
	return NULL;
}

void iscsi_pending_attach_locked(struct iscsi_conn *c, struct iscsi_portal *p, struct iscsi_peer *e,
                                 uint64_t now_ns)
{
	c->pend_peer = e;
	c->accept_ns = now_ns;
	if (p->removed)
		return; /* removed while this one was accepted: it counts for its source only */
	c->pend_portal = p;
	hl_list_add_tail(&p->pending, &c->pend_link);
}

void iscsi_pending_cancel(struct hl_iscsi_server *srv, struct iscsi_portal *p, struct iscsi_peer *e)
{
	pthread_mutex_lock(&srv->lock);
	if (!p->removed)
		p->n_pending--;
	e->n_pending--;
	peer_maybe_free(e);
	pthread_mutex_unlock(&srv->lock);
}

void iscsi_conn_pending_release(struct iscsi_conn *c)
{
	struct hl_iscsi_server *srv = c->srv;

	pthread_mutex_lock(&srv->lock);
	pending_release_locked(c);
	pthread_mutex_unlock(&srv->lock);
}

void iscsi_limits_conn_gone_locked(struct iscsi_conn *c)
{
	pending_release_locked(c);
	hl_list_del(&c->evict_link); /* empty unless queued: harmless */
}

/* A portal goes away: connections still in login stop counting against it. Lock held. */
void iscsi_portal_forget_locked(struct hl_iscsi_server *srv, struct iscsi_portal *p)
{
	(void)srv;
	while (!hl_list_empty(&p->pending)) {
		struct iscsi_conn *c = hl_list_first(&p->pending, struct iscsi_conn, pend_link);
		hl_list_del(&c->pend_link);
		c->pend_portal = NULL;
	}
	p->n_pending = 0;
	p->removed = true;
}

/* ---- logged-in sessions ---- */

int iscsi_sessions_admit_locked(struct hl_iscsi_server *srv, struct iscsi_session *s,
                                const char **why)
{
	struct hl_iscsi_limits lim;
	struct iscsi_peer *e = s->conn ? peer_get(srv, &s->conn->peer, true) : NULL;
	struct iscsi_session *o;
	unsigned replaced = 0, replaced_here = 0, cap = 0;
	char abuf[80];

	/* a reinstatement replaces the sessions of the same I_T: they do not count */
	hl_list_for_each_entry(o, iscsi_it_chain(srv, s->it_hash), it_link)
	{
		if (s->type != ISCSI_SESSION_NORMAL || !iscsi_same_nexus(o, s))
			continue;
		replaced++;
		replaced_here += o->source == e;
	}
	iscsi_limits_locked(srv, &lim);
	*why = NULL;
	if (s->type == ISCSI_SESSION_DISCOVERY &&
	    srv->n_disc_sessions >= lim.max_discovery_sessions) {
		*why = "the discovery share of max_sessions";
		cap = lim.max_discovery_sessions;
	} else if (srv->n_sessions - replaced >= lim.caps.max_sessions) {
		*why = "max_sessions";
		cap = lim.caps.max_sessions;
	} else if (e && e->n_sessions - replaced_here >= lim.caps.max_sessions_per_addr) {
		*why = "max_sessions_per_addr";
		cap = lim.caps.max_sessions_per_addr;
	}
	if (*why) {
		srv->st_refused_sessions++;
		if (iscsi_episode_hit(&srv->sess_refusing, hl_now_ns()))
			HL_WARN(ISCSI_LOG,
			        "sessions: %s (%u) reached%s%s; refusing logins with 0x0302 (out of "
			        "resources) until sessions end",
			        *why, cap, e ? " by " : "",
			        e ? iscsi_source_str(&e->src, abuf, sizeof(abuf)) : "");
		peer_maybe_free(e);
		return -EUSERS;
	}
	s->source = e;
	if (e)
		e->n_sessions++;
	srv->n_sessions++;
	srv->n_disc_sessions += s->type == ISCSI_SESSION_DISCOVERY;
	return 0;
}

void iscsi_sessions_uncount_locked(struct hl_iscsi_server *srv, struct iscsi_session *s)
{
	srv->n_sessions--;
	srv->n_disc_sessions -= s->type == ISCSI_SESSION_DISCOVERY;
	if (s->source) {
		s->source->n_sessions--;
		peer_maybe_free(s->source);
		s->source = NULL;
	}
}

/* ---- the end of an episode ---- */

static double secs(const struct iscsi_episode *e)
{
	return (double)(e->last_ns - e->start_ns) / 1e9;
}

void iscsi_limits_tick(struct hl_iscsi_server *srv, uint64_t now_ns)
{
	struct iscsi_portal *p;
	char pbuf[80];

	pthread_mutex_lock(&srv->lock);
	hl_list_for_each_entry(p, &srv->portals, link)
	{
		hl_format_sockaddr(&p->addr, pbuf, sizeof(pbuf));
		if (iscsi_episode_over(&p->refusing, now_ns))
			HL_NOTICE(ISCSI_LOG,
			          "portal %s: no connection closed at max_pending_logins_per_addr for "
			          "%u s (%lu closed over %.1f s)",
			          pbuf, ISCSI_EPISODE_QUIET_S, p->refusing.count, secs(&p->refusing));
		if (iscsi_episode_over(&p->evicting, now_ns))
			HL_NOTICE(ISCSI_LOG,
			          "portal %s: no connection evicted for %u s (%lu silent ones evicted "
			          "to make room over %.1f s)",
			          pbuf, ISCSI_EPISODE_QUIET_S, p->evicting.count, secs(&p->evicting));
		if (!p->fd_paused && iscsi_episode_over(&p->fd_short, now_ns))
			HL_NOTICE(ISCSI_LOG,
			          "portal %s: accepting again after %.1f s short of descriptors (%lu "
			          "pauses); none for %u s",
			          pbuf, secs(&p->fd_short), p->fd_short.count, ISCSI_EPISODE_QUIET_S);
	}
	if (iscsi_episode_over(&srv->sess_refusing, now_ns))
		HL_NOTICE(ISCSI_LOG,
		          "sessions: no login refused at the session caps for %u s (%lu refused over "
		          "%.1f s)",
		          ISCSI_EPISODE_QUIET_S, srv->sess_refusing.count, secs(&srv->sess_refusing));
	pthread_mutex_unlock(&srv->lock);
}
