/*
 * server.c - the iSCSI server object: targets, portals (listening sockets on
 * the first reactor), accepting and handing connections to reactors round
 * robin, the session registry (TSIH, reinstatement) and an orderly
 * shutdown that reaches each reactor through hl_reactor_call and waits.
 *
 * Accepting is where the network can exhaust the process (issues 19, 24):
 * - Before each accept the portal asks limits.c whether a descriptor can
 *   be spent on a connection and still leave the daemon its reserve; if
 *   not, or when accept itself runs out (EMFILE, ENFILE, ENOBUFS, ENOMEM;
 *   the listening socket stays readable and retrying at once would spin
 *   the reactor), the portal stops being watched and a timer retries every
 *   ISCSI_ACCEPT_RETRY_MS; the waiting peers sit in the listen backlog
 *   meanwhile. One line is logged when it starts and one when accepting
 *   works again.
 * - A connection that has not finished login is counted against the
 *   pending-login caps (limits.c): a source over its cap is closed at once,
 *   a full portal closes its least active pending connection instead.
 * - Logged-in sessions are counted against the session caps when they
 *   register here (limits.c).
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "hotlun/iscsi.h"
#include "hotlun/log.h"
#include "iscsi/iscsi_internal.h"

#define DESTROY_WAIT_S 15

static atomic_uint_fast64_t nexus_ids = 1;

uint64_t iscsi_nexus_id_next(void)
{
	return atomic_fetch_add(&nexus_ids, 1);
}

int hl_iscsi_server_create(const struct hl_iscsi_server_config *cfg, struct hl_iscsi_server **out)
{
	struct hl_iscsi_server *srv;

	if (!cfg || !cfg->reactors || cfg->n_reactors == 0 || cfg->gateway > 255)
		return -EINVAL;
	srv = calloc(1, sizeof(*srv));
	if (!srv)
		return -ENOMEM;
	srv->reactors = calloc(cfg->n_reactors, sizeof(*srv->reactors));
	if (!srv->reactors) {
		free(srv);
		return -ENOMEM;
	}
	memcpy(srv->reactors, cfg->reactors, cfg->n_reactors * sizeof(*srv->reactors));
	srv->n_reactors = cfg->n_reactors;
	srv->nop_interval_s = cfg->nop_interval_s;
	srv->nop_timeout_s = cfg->nop_timeout_s;
	srv->gateway = (uint16_t)cfg->gateway;
	atomic_store(&srv->send_uring, cfg->send_uring);
	srv->discovery_chap = cfg->discovery_chap;
	iscsi_limits_init(srv, &cfg->limits);
	iscsi_params_limits_default(&srv->lim);
	chap_guard_init(&srv->chap_guard);
	iscsi_wb_init(&srv->wb, cfg->write_buffer_limit);
	pthread_mutex_init(&srv->lock, NULL);
	/* destroy's bounded wait (wait_idle) must not move with the wall clock */
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&srv->cond, &ca);
	pthread_condattr_destroy(&ca);
	hl_list_init(&srv->targets);
	hl_list_init(&srv->targets_retired);
	hl_list_init(&srv->portals);
	hl_list_init(&srv->sessions);
	hl_list_init(&srv->lingering);
	for (size_t i = 0; i < ISCSI_IT_BUCKETS; i++)
		hl_list_init(&srv->it_index[i]);
	hl_list_init(&srv->conns);
	srv->next_tsih = (uint16_t)(time(NULL) & 0xfff) + 1;
	*out = srv;
	return 0;
}

void hl_iscsi_auth_stats_get(struct hl_iscsi_server *srv, struct hl_iscsi_auth_stats *out)
{
	chap_guard_counters(&srv->chap_guard, &out->chap_failures, &out->chap_throttled);
}

void hl_iscsi_conn_stats(struct hl_iscsi_server *srv, struct hl_iscsi_conn_stats *out)
{
	struct iscsi_portal *p;

	memset(out, 0, sizeof(*out));
	out->logins = atomic_load(&srv->st_logins);
	out->login_failures = atomic_load(&srv->st_login_failures);
	out->connections = atomic_load(&srv->n_conn_fds);
	out->fd_limit = atomic_load(&srv->fd_limit);
	pthread_mutex_lock(&srv->lock);
	hl_list_for_each_entry(p, &srv->portals, link)
		out->pending += p->n_pending;
	out->sessions = srv->n_sessions;
	out->evicted = srv->st_evicted;
	out->refused_pending = srv->st_refused_pending;
	out->refused_sessions = srv->st_refused_sessions;
	out->fd_pauses = srv->st_fd_pauses;
	pthread_mutex_unlock(&srv->lock);
}

/* ---- targets ---- */

void iscsi_target_free(struct iscsi_target *t)
{
	for (size_t i = 0; i < t->n_allow; i++)
		free(t->allow[i]);
	free(t->allow);
	/* explicit_bzero: a memset before free is a dead store the compiler may drop */
	explicit_bzero(&t->chap, sizeof(t->chap));
	explicit_bzero(&t->mutual, sizeof(t->mutual));
	free(t);
}

struct iscsi_target *iscsi_target_new(const struct hl_iscsi_target_config *cfg)
{
	struct iscsi_target *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	hl_list_init(&t->link);
	hl_strlcpy(t->name, cfg->name, sizeof(t->name));
	if (cfg->alias)
		hl_strlcpy(t->alias, cfg->alias, sizeof(t->alias));
	t->luns = cfg->luns;
	t->allow_all = cfg->allow_all;
	t->chap = cfg->chap;
	t->mutual = cfg->mutual;
	t->allow_target_reset = cfg->allow_target_reset;
	if (cfg->n_allow) {
		t->allow = calloc(cfg->n_allow, sizeof(char *));
		if (!t->allow) {
			iscsi_target_free(t);
			return NULL;
		}
		for (size_t i = 0; i < cfg->n_allow; i++) {
			t->allow[i] = strdup(cfg->allow[i]);
			if (!t->allow[i]) {
				t->n_allow = i;
				iscsi_target_free(t);
				return NULL;
			}
		}
		t->n_allow = cfg->n_allow;
	}
	return t;
}

int hl_iscsi_target_add(struct hl_iscsi_server *srv, const struct hl_iscsi_target_config *cfg)
{
	struct iscsi_target *t;

	if (!cfg->name || !cfg->name[0] || strlen(cfg->name) > HL_ISCSI_NAME_MAX || !cfg->luns)
		return -EINVAL;
	t = iscsi_target_new(cfg);
	if (!t)
		return -ENOMEM;
	pthread_mutex_lock(&srv->lock);
	struct iscsi_target *o;
	hl_list_for_each_entry(o, &srv->targets, link)
	{
		if (strcasecmp(o->name, t->name) == 0) {
			pthread_mutex_unlock(&srv->lock);
			iscsi_target_free(t);
			return -EEXIST;
		}
	}
	hl_list_add_tail(&srv->targets, &t->link);
	pthread_mutex_unlock(&srv->lock);
	return 0;
}

struct iscsi_target *iscsi_target_find(struct hl_iscsi_server *srv, const char *name)
{
	struct iscsi_target *t, *found = NULL;

	pthread_mutex_lock(&srv->lock);
	hl_list_for_each_entry(t, &srv->targets, link)
	{
		if (strcasecmp(t->name, name) == 0) {
			found = t;
			break;
		}
	}
	pthread_mutex_unlock(&srv->lock);
	return found; /* targets live as long as the server */
}

struct iscsi_target *iscsi_target_find_login(struct hl_iscsi_server *srv, const char *name,
                                             struct hl_iscsi_chap *chap,
                                             struct hl_iscsi_chap *mutual)
{
	struct iscsi_target *t, *found = NULL;

	pthread_mutex_lock(&srv->lock);
	hl_list_for_each_entry(t, &srv->targets, link)
	{
		if (strcasecmp(t->name, name) == 0) {
			found = t;
			break;
		}
	}
	if (found && chap)
		*chap = found->chap;
	if (found && mutual)
		*mutual = found->mutual;
	pthread_mutex_unlock(&srv->lock);
	return found;
}

/*
 * Guessing is throttled per secret (chap_guard.c), and one secret is often
 * every target's (and discovery's): the budget is named after the first
 * that checks with it, discovery ("") first, then the targets in order, so
 * a back-off opened through one target holds for all of them.
 */
void iscsi_chap_scope(struct hl_iscsi_server *srv, const char *secret, const char *own,
                      char *out, size_t len)
{
	struct iscsi_target *t;

	hl_strlcpy(out, own, len);
	pthread_mutex_lock(&srv->lock);
	if (srv->discovery_chap.user[0] && strcmp(srv->discovery_chap.secret, secret) == 0) {
		out[0] = '\0';
	} else {
		hl_list_for_each_entry(t, &srv->targets, link)
		{
			if (t->chap.user[0] && strcmp(t->chap.secret, secret) == 0) {
				hl_strlcpy(out, t->name, len);
				break;
			}
		}
	}
	pthread_mutex_unlock(&srv->lock);
}

bool iscsi_target_allows(const struct iscsi_target *t, const char *initiator)
{
	if (t->allow_all)
		return true;
	for (size_t i = 0; i < t->n_allow; i++)
		if (strcasecmp(t->allow[i], initiator) == 0)
			return true;
	return false;
}

/* ---- sessions ---- */

void iscsi_call_done(struct hl_iscsi_server *srv)
{
	pthread_mutex_lock(&srv->lock);
	srv->pending_calls--;
	pthread_cond_broadcast(&srv->cond);
	pthread_mutex_unlock(&srv->lock);
}

/*
 * On the session's reactor. The session is alive: only this thread frees
 * it, and iscsi_session_free takes back a kill still queued.
 */
static void kill_session_cb(void *arg)
{
	struct iscsi_session *o = arg;
	struct iscsi_conn *c = o->conn;
	struct hl_iscsi_server *srv = c->srv;
	const char *why;

	pthread_mutex_lock(&srv->lock);
	why = o->kill_why;
	pthread_mutex_unlock(&srv->lock);
	/* closing may free the session and its connection: nothing of them is read after */
	if (c->state != CONN_CLOSED)
		HL_NOTICE(ISCSI_LOG, "%s: closing the session: %s", c->peer_str, why);
	iscsi_conn_close(c, why);
	iscsi_call_done(srv);
}

/* o left srv->sessions, but its connection (and commands) may live on. */
static void session_linger_locked(struct hl_iscsi_server *srv, struct iscsi_session *o)
{
	if (hl_list_empty(&o->linger_link) && o->type == ISCSI_SESSION_NORMAL)
		hl_list_add_tail(&srv->lingering, &o->linger_link);
}

/* o leaves the registered sessions (its connection and commands may live on). */
static void session_unlink_locked(struct hl_iscsi_server *srv, struct iscsi_session *o)
{
	hl_list_del(&o->link);
	hl_list_del(&o->it_link);
	srv->tsih_used[o->tsih / 64] &= ~(1ull << (o->tsih % 64));
	o->registered = false;
	session_linger_locked(srv, o);
}

/*
 * Nothing here allocates (the post is the session's own), so a kill cannot
 * be lost: the session is off the list, and its connection is closed on
 * its reactor, which a reinstating login's fence then waits for.
 */
void iscsi_session_kill_locked(struct hl_iscsi_server *srv, struct iscsi_session *o,
                               const char *why)
{
	session_unlink_locked(srv, o);
	iscsi_sessions_uncount_locked(srv, o);
	o->kill_why = why;
	hl_reactor_post_init(&o->kill, kill_session_cb, o);
	srv->pending_calls++;
	if (hl_reactor_post(o->reactor, &o->kill) < 0)
		srv->pending_calls--; /* queued already (cannot be: it left the list) */
}

void iscsi_session_forget(struct hl_iscsi_server *srv, struct iscsi_session *s)
{
	pthread_mutex_lock(&srv->lock);
	if (hl_reactor_post_cancel(s->reactor, &s->kill)) {
		srv->pending_calls--;
		pthread_cond_broadcast(&srv->cond);
	}
	hl_list_del(&s->linger_link);
	pthread_mutex_unlock(&srv->lock);
}

/* Hash name caseless into h. */
static uint64_t hash_caseless(const char *name, uint64_t h)
{
	char low[64];
	size_t n = 0;

	for (const char *p = name;; p++) {
		if (n == sizeof(low) || !*p) {
			h = hl_hash64(low, n, h);
			n = 0;
		}
		if (!*p)
			return h;
		low[n++] = (char)tolower((unsigned char)*p);
	}
}

uint64_t iscsi_it_hash(const char *initiator, const uint8_t *isid, const char *target_name)
{
	uint64_t h = hl_hash64(isid, 6, 0x69746e78);

	return hash_caseless(target_name, hash_caseless(initiator, h));
}

bool iscsi_same_it_name(const struct iscsi_session *o, const char *initiator, const uint8_t *isid,
                        const char *target_name)
{
	return o->type == ISCSI_SESSION_NORMAL && o->target &&
	       strcasecmp(o->target->name, target_name) == 0 && memcmp(o->isid, isid, 6) == 0 &&
	       strcasecmp(o->initiator_name, initiator) == 0;
}

bool iscsi_same_it(const struct iscsi_session *o, const char *initiator, const uint8_t *isid,
                   const struct iscsi_target *target)
{
	/* by name: a target updated at run time is a new object with the same name */
	return target && iscsi_same_it_name(o, initiator, isid, target->name);
}

int iscsi_session_check_tsih(struct hl_iscsi_server *srv, uint16_t tsih, const char *initiator,
                             const uint8_t *isid, const struct iscsi_target *target, uint16_t cid)
{
	struct iscsi_session *o;
	int rc = -ENOENT;
	uint64_t h = target ? iscsi_it_hash(initiator, isid, target->name) : 0;

	pthread_mutex_lock(&srv->lock);
	hl_list_for_each_entry(o, iscsi_it_chain(srv, h), it_link)
	{
		if (o->tsih == tsih && o->it_hash == h &&
		    iscsi_same_it(o, initiator, isid, target)) {
			rc = o->cid == cid ? 0 : -EBUSY;
			break;
		}
	}
	pthread_mutex_unlock(&srv->lock);
	return rc;
}

int iscsi_session_register(struct hl_iscsi_server *srv, struct iscsi_session *s, uint16_t want_tsih,
                           const char **why)
{
	struct iscsi_session *o, *tmp;
	struct hl_list *chain;

	s->it_hash = s->target ? iscsi_it_hash(s->initiator_name, s->isid, s->target->name) : 0;
	chain = iscsi_it_chain(srv, s->it_hash);
	pthread_mutex_lock(&srv->lock);
	if (srv->stopping || srv->draining) {
		pthread_mutex_unlock(&srv->lock);
		return -ESHUTDOWN;
	}
	if (want_tsih) {
		/* the session to reinstate must exist before anything is counted */
		int rc = -ENOENT;
		hl_list_for_each_entry(o, chain, it_link)
		{
			if (o->tsih == want_tsih && iscsi_same_nexus(o, s)) {
				rc = o->cid == s->cid ? 0 : -EBUSY;
				break;
			}
		}
		if (rc < 0) {
			pthread_mutex_unlock(&srv->lock);
			return rc;
		}
	}
	/* the caps, before a reinstatement closes anything (the replaced ones do not count) */
	int crc = iscsi_sessions_admit_locked(srv, s, why);
	if (crc < 0) {
		pthread_mutex_unlock(&srv->lock);
		return crc;
	}
	if (want_tsih) {
		/* connection reinstatement at ERL 0: the old session (checked above) goes, its
		 * TSIH stays */
		hl_list_for_each_entry_safe(o, tmp, chain, it_link)
		{
			if (o->tsih == want_tsih && iscsi_same_nexus(o, s)) {
				iscsi_session_kill_locked(srv, o, "connection reinstatement");
				s->fence_needed = true;
				break;
			}
		}
		s->tsih = want_tsih;
	} else {
		/* TSIH: nonzero, unique among live sessions */
		for (unsigned tries = 0;; tries++) {
			bool used = false;
			if (tries > 65536) {
				iscsi_sessions_uncount_locked(srv, s);
				pthread_mutex_unlock(&srv->lock);
				return -EBUSY;
			}
			if (++srv->next_tsih == 0)
				srv->next_tsih = 1;
			used =
			    srv->tsih_used[srv->next_tsih / 64] & (1ull << (srv->next_tsih % 64));
			if (!used)
				break;
		}
		s->tsih = srv->next_tsih;
	}
	if (s->type == ISCSI_SESSION_NORMAL) {
		hl_list_for_each_entry_safe(o, tmp, chain, it_link)
		{
			if (iscsi_same_nexus(o, s)) {
				iscsi_session_kill_locked(srv, o, "session reinstatement");
				s->fence_needed = true;
			}
		}
		/*
		 * The fence waits for the commands of every other session of this
		 * I_T nexus, those of closed connections too; with none lingering
		 * (the first login of an ISID, the common case) there is nothing to
		 * wait for, and a login storm skips a walk of every connection
		 */
		hl_list_for_each_entry(o, &srv->lingering, linger_link)
		{
			if (s->fence_needed)
				break;
			s->fence_needed = iscsi_same_nexus(o, s);
		}
	}
	s->since = (int64_t)time(NULL);
	if (s->conn) {
		const struct iscsi_params *pr = &s->conn->params;
		hl_format_sockaddr(&s->conn->local, s->portal, sizeof(s->portal));
		hl_format_sockaddr(&s->conn->peer, s->peer, sizeof(s->peer));
		s->neg = (struct hl_iscsi_negotiated){
			.header_digest = pr->header_digest,
			.data_digest = pr->data_digest,
			.max_recv_dsl_initiator = pr->max_recv_dsl_initiator,
			.max_recv_dsl_target = pr->max_recv_dsl_target,
			.max_connections = pr->max_connections,
			.initial_r2t = pr->initial_r2t,
			.immediate_data = pr->immediate_data,
			.max_burst_length = pr->max_burst_length,
			.first_burst_length = pr->first_burst_length,
			.default_time2wait = pr->default_time2wait,
			.default_time2retain = pr->default_time2retain,
			.max_outstanding_r2t = pr->max_outstanding_r2t,
			.data_pdu_in_order = pr->data_pdu_in_order,
			.data_sequence_in_order = pr->data_sequence_in_order,
			.error_recovery_level = pr->error_recovery_level,
		};
	}
	hl_list_add_tail(&srv->sessions, &s->link);
	if (s->type == ISCSI_SESSION_NORMAL) /* (a discovery session is of no I_T nexus) */
		hl_list_add_tail(chain, &s->it_link);
	srv->tsih_used[s->tsih / 64] |= 1ull << (s->tsih % 64);
	s->registered = true;
	pthread_mutex_unlock(&srv->lock);
	return 0;
}

void iscsi_session_unregister(struct hl_iscsi_server *srv, struct iscsi_session *s)
{
	pthread_mutex_lock(&srv->lock);
	if (s->registered) {
		session_unlink_locked(srv, s);
		iscsi_sessions_uncount_locked(srv, s);
	}
	pthread_mutex_unlock(&srv->lock);
}

/* ---- connections ---- */

void iscsi_conn_unlink(struct iscsi_conn *c)
{
	struct hl_iscsi_server *srv = c->srv;

	pthread_mutex_lock(&srv->lock);
	iscsi_limits_conn_gone_locked(c);
	if (!hl_list_empty(&c->srv_link)) {
		hl_list_del(&c->srv_link);
		srv->n_conns--;
		pthread_cond_broadcast(&srv->cond);
	}
	pthread_mutex_unlock(&srv->lock);
}

/* ---- portals ---- */

static void conn_start_checked(void *arg)
{
	struct iscsi_conn *c = arg;
	bool stopping;

	pthread_mutex_lock(&c->srv->lock);
	stopping = c->srv->stopping;
	pthread_mutex_unlock(&c->srv->lock);
	if (stopping) {
		iscsi_conn_close(c, "server stopping");
		return;
	}
	iscsi_conn_start(c);
}

static void portal_accept(struct hl_event *ev, uint32_t revents);

/*
 * Out of descriptors (err), or into the reserve kept for the daemon (err 0,
 * in_use of them held): stop watching the portal, retry from a timer.
 */
static void portal_pause(struct iscsi_portal *p, int err, unsigned in_use, unsigned reserve)
{
	char buf[80];

	hl_event_del(&p->ev);
	hl_timer_start(hl_reactor_current(), &p->retry, ISCSI_ACCEPT_RETRY_MS);
	p->fd_reserve = !err;
	if (p->fd_paused)
		return;
	p->fd_paused = true;
	pthread_mutex_lock(&p->srv->lock);
	p->srv->st_fd_pauses++;
	bool starts = iscsi_episode_hit(&p->fd_short, hl_now_ns());
	pthread_mutex_unlock(&p->srv->lock);
	if (!starts)
		return; /* logged when the episode started; its end says how many pauses */
	struct rlimit rl = {0};
	getrlimit(RLIMIT_NOFILE, &rl);
	hl_format_sockaddr(&p->addr, buf, sizeof(buf));
	if (err)
		HL_WARN(ISCSI_LOG,
		        "portal %s: accept: %s (open-file limit %llu); not accepting until a "
		        "descriptor is free",
		        buf, strerror(err), (unsigned long long)rl.rlim_cur);
	else
		HL_WARN(ISCSI_LOG,
		        "portal %s: %u descriptors of the open-file limit %llu in use, the last %u "
		        "are kept for the daemon (control socket, cache maps, origin reconnects); "
		        "new connections wait in the listen backlog until some close",
		        buf, in_use, (unsigned long long)rl.rlim_cur, reserve);
}

/* Accepting again: the episode's end is logged by server_tick once it stays so. */
static void portal_resumed(struct iscsi_portal *p)
{
	if (!p->fd_paused)
		return;
	p->fd_paused = false;
	pthread_mutex_lock(&p->srv->lock);
	p->fd_short.last_ns = hl_now_ns();
	pthread_mutex_unlock(&p->srv->lock);
}

/*
 * Watch the portal again; after a pause at the reserve, only once
 * descriptors are back out of it (else look again later, unwatched), and
 * from then on it is accepting again, not only from its next connection: a
 * pause that came after the last connection of a burst would otherwise
 * never end (nor its episode be logged as over). A pause of accept itself
 * (EMFILE & co.) ends at the next connection accepted, as it had one
 * waiting.
 */
static void portal_retry(struct hl_timer *t)
{
	struct iscsi_portal *p = t->arg;
	unsigned in_use, reserve;

	if (p->fd_reserve && !iscsi_fd_room(p->srv, &in_use, &reserve)) {
		hl_timer_start(hl_reactor_current(), &p->retry, ISCSI_ACCEPT_RETRY_MS);
		return;
	}
	hl_event_init(&p->ev, p->fd, portal_accept, p);
	if (hl_event_add(hl_reactor_current(), &p->ev, EPOLLIN) < 0) {
		hl_timer_start(hl_reactor_current(), &p->retry, ISCSI_ACCEPT_RETRY_MS);
		return;
	}
	if (p->fd_reserve)
		portal_resumed(p);
}

static bool accept_out_of_fds(int err)
{
	return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
}

static void portal_accept(struct hl_event *ev, uint32_t revents)
{
	struct iscsi_portal *p = ev->arg;
	struct hl_iscsi_server *srv = p->srv;
	unsigned in_use, reserve;

	(void)revents;
	for (int i = 0; i < 64; i++) {
		struct sockaddr_storage peer;
		socklen_t plen = sizeof(peer);
		if (!iscsi_fd_room(srv, &in_use, &reserve)) {
			portal_pause(p, 0, in_use, reserve);
			return;
		}
		int fd =
		    accept4(p->fd, (struct sockaddr *)&peer, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (accept_out_of_fds(errno))
				portal_pause(p, errno, 0, 0);
			else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
			         errno != ECONNABORTED)
				HL_WARN_RL(ISCSI_LOG, "accept: %s", strerror(errno));
			return;
		}
		atomic_fetch_add(&srv->n_conn_fds, 1);
		portal_resumed(p);
		const char *why = NULL;
		struct iscsi_peer *pe = iscsi_pending_admit(srv, p, &peer, &why);
		struct iscsi_conn *c = NULL;
		if (!pe || iscsi_conn_create(srv, fd, p->tpgt, p->wildcard, &c) < 0) {
			if (pe)
				iscsi_pending_cancel(srv, p, pe);
			close(fd); /* the peer sees a plain close */
			atomic_fetch_sub(&srv->n_conn_fds, 1);
			continue;
		}
		c->fd_counted = true;
		pthread_mutex_lock(&srv->lock);
		iscsi_pending_attach_locked(c, p, pe, hl_now_ns());
		if (srv->stopping) {
			pthread_mutex_unlock(&srv->lock);
			iscsi_conn_close(c, "server stopping");
			continue;
		}
		struct hl_reactor *r = srv->reactors[srv->rr++ % srv->n_reactors];
		/* set before the connection is published: other threads compare it under the lock
		 */
		c->reactor = r;
		hl_list_add_tail(&srv->conns, &c->srv_link);
		srv->n_conns++;
		pthread_mutex_unlock(&srv->lock);
		if (r == hl_reactor_current()) {
			iscsi_conn_start(c);
		} else if (hl_reactor_call(r, conn_start_checked, c) < 0) {
			iscsi_conn_close(c, "no memory");
		}
	}
}

/* reactors[0], every second: a CHAP summary that is due, the end of the limits' episodes. */
static void server_tick(struct hl_timer *t)
{
	struct hl_iscsi_server *srv = t->arg;

	iscsi_chap_log(srv);
	iscsi_limits_tick(srv, hl_now_ns());
	hl_timer_start(hl_reactor_current(), &srv->tick, 1000);
}

static void portal_arm(void *arg)
{
	struct iscsi_portal *p = arg;

	hl_event_init(&p->ev, p->fd, portal_accept, p);
	hl_timer_init(&p->retry, portal_retry, p);
	if (hl_event_add(hl_reactor_current(), &p->ev, EPOLLIN) < 0)
		HL_ERR(ISCSI_LOG, "cannot watch a portal socket");
	if (!p->srv->tick_on) {
		p->srv->tick_on = true;
		hl_timer_init(&p->srv->tick, server_tick, p->srv);
		hl_timer_start(hl_reactor_current(), &p->srv->tick, 1000);
	}
	iscsi_call_done(p->srv);
}

static bool addr_is_wildcard(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return ((const struct sockaddr_in *)ss)->sin_addr.s_addr == htonl(INADDR_ANY);
	if (ss->ss_family == AF_INET6)
		return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)ss)->sin6_addr);
	return false;
}

/* ---- listening sockets handed over by the previous process ---- */

static bool same_sockaddr(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	if (a->ss_family != b->ss_family)
		return false;
	if (a->ss_family == AF_INET) {
		const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
		return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
	}
	if (a->ss_family == AF_INET6) {
		const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
		return x->sin6_port == y->sin6_port &&
		       memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr)) == 0;
	}
	return false;
}

void hl_iscsi_server_inherit(struct hl_iscsi_server *srv, const int *fds, unsigned n)
{
	for (unsigned i = 0; i < n && srv->n_inherited < ISCSI_INHERITED_MAX; i++) {
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);
		int listening = 0;
		socklen_t ll = sizeof(listening);

		if (getsockname(fds[i], (struct sockaddr *)&ss, &len) < 0 ||
		    getsockopt(fds[i], SOL_SOCKET, SO_ACCEPTCONN, &listening, &ll) < 0 || !listening) {
			close(fds[i]); /* not a listening socket of ours */
			continue;
		}
		fcntl(fds[i], F_SETFD, FD_CLOEXEC);
		fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
		srv->inherited[srv->n_inherited].fd = fds[i];
		srv->inherited[srv->n_inherited].addr = ss;
		srv->n_inherited++;
	}
}

/* An inherited listening socket on ss, taken out of the list, or -1. */
static int inherited_take(struct hl_iscsi_server *srv, const struct sockaddr_storage *ss)
{
	for (unsigned i = 0; i < srv->n_inherited; i++) {
		if (!same_sockaddr(&srv->inherited[i].addr, ss))
			continue;
		int fd = srv->inherited[i].fd;
		srv->inherited[i] = srv->inherited[--srv->n_inherited];
		return fd;
	}
	return -1;
}

void hl_iscsi_server_inherit_done(struct hl_iscsi_server *srv)
{
	char buf[80];

	for (unsigned i = 0; i < srv->n_inherited; i++) {
		HL_NOTICE(ISCSI_LOG, "listening socket %s handed over is not a portal any more; closed",
		          hl_format_sockaddr(&srv->inherited[i].addr, buf, sizeof(buf)));
		close(srv->inherited[i].fd);
	}
	srv->n_inherited = 0;
}

unsigned hl_iscsi_server_listen_fds(struct hl_iscsi_server *srv, int *fds, unsigned max)
{
	struct iscsi_portal *p;
	unsigned n = 0;

	pthread_mutex_lock(&srv->lock);
	hl_list_for_each_entry(p, &srv->portals, link)
	{
		if (n < max)
			fds[n++] = p->fd;
	}
	pthread_mutex_unlock(&srv->lock);
	return n;
}

int hl_iscsi_portal_add(struct hl_iscsi_server *srv, const char *portal, uint16_t tpgt, char *bound,
                        size_t bound_len)
{
	struct sockaddr_storage ss;
	unsigned sslen = sizeof(ss);
	int one = 1, fd, rc;
	bool handed_over = false;

	if (!portal || hl_parse_portal(portal, HL_ISCSI_DEFAULT_PORT, &ss, &sslen) < 0)
		return -EINVAL;
	/*
	 * The previous process's socket (a restart under systemd, its fd store):
	 * connections made while no process ran wait in its backlog, instead of
	 * being refused, and are accepted now.
	 */
	fd = inherited_take(srv, &ss);
	if (fd >= 0) {
		handed_over = true;
	} else {
		fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (ss.ss_family == AF_INET6)
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
		if (bind(fd, (struct sockaddr *)&ss, sslen) < 0 || listen(fd, 128) < 0) {
			rc = -errno;
			close(fd);
			return rc;
		}
	}
	struct iscsi_portal *p = calloc(1, sizeof(*p));
	if (!p) {
		close(fd);
		return -ENOMEM;
	}
	socklen_t bl = sizeof(p->addr);
	getsockname(fd, (struct sockaddr *)&p->addr, &bl);
	p->srv = srv;
	p->fd = fd;
	p->tpgt = tpgt ? tpgt : 1;
	p->wildcard = addr_is_wildcard(&p->addr);
	hl_list_init(&p->link);
	hl_list_init(&p->pending);
	if (bound && bound_len)
		hl_format_sockaddr(&p->addr, bound, bound_len);
	pthread_mutex_lock(&srv->lock);
	hl_list_add_tail(&srv->portals, &p->link);
	srv->pending_calls++;
	pthread_mutex_unlock(&srv->lock);
	rc = hl_reactor_call(srv->reactors[0], portal_arm, p);
	if (rc < 0) {
		pthread_mutex_lock(&srv->lock);
		hl_list_del(&p->link);
		srv->pending_calls--;
		pthread_mutex_unlock(&srv->lock);
		close(fd);
		free(p);
		return rc;
	}
	char buf[80];
	HL_NOTICE(ISCSI_LOG, "listening on %s (tpgt %u)%s",
	          hl_format_sockaddr(&p->addr, buf, sizeof(buf)), p->tpgt,
	          handed_over ? ", the socket the previous process handed over" : "");
	return 0;
}

/* ---- shutdown ---- */

/*
 * Stop watching every portal's listening socket (connections wait in the
 * backlog). With stop_listening (a drain) the socket is also shut down: it
 * resets its backlog and answers SYNs with a reset, so an initiator that
 * logs out and reconnects is refused at once instead of waiting unanswered
 * until the process exits, and retries against the next process.
 */
static void portals_quiesce(struct hl_iscsi_server *srv, bool stop_listening)
{
	struct iscsi_portal *p;

	pthread_mutex_lock(&srv->lock);
	hl_list_for_each_entry(p, &srv->portals, link)
	{
		if (p->ev.reactor)
			hl_event_del(&p->ev);
		hl_timer_stop(&p->retry);
		if (stop_listening)
			shutdown(p->fd, SHUT_RDWR);
	}
	pthread_mutex_unlock(&srv->lock);
	if (srv->tick_on) {
		hl_timer_stop(&srv->tick);
		srv->tick_on = false;
	}
	iscsi_call_done(srv);
}

static void portals_disarm(void *arg)
{
	portals_quiesce(arg, false);
}

static void portals_stop_listening(void *arg)
{
	portals_quiesce(arg, true);
}

static struct iscsi_conn **reactor_conns(struct hl_iscsi_server *srv, size_t *n);

static void reactor_shutdown(void *arg)
{
	struct hl_iscsi_server *srv = arg;
	size_t n = 0;
	struct iscsi_conn **victims = reactor_conns(srv, &n);

	for (size_t i = 0; i < n; i++)
		iscsi_conn_close(victims[i], "server stopping");
	free(victims);
	iscsi_call_done(srv);
}

/* Wait for pending calls and connections; false on timeout. Caller holds the lock. */
static bool wait_idle(struct hl_iscsi_server *srv, bool conns_too)
{
	struct timespec ts;

	/* srv->cond's clock: a wall clock step neither ends the wait at once nor stretches it */
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += DESTROY_WAIT_S;
	while (srv->pending_calls || (conns_too && srv->n_conns)) {
		if (pthread_cond_timedwait(&srv->cond, &srv->lock, &ts) == ETIMEDOUT)
			return false;
	}
	return true;
}

/*
 * The live connections of the calling reactor, in an array the caller frees
 * (NULL, *n = 0 without any or without memory). Only this reactor frees
 * them, so they stay valid on it after the lock is dropped.
 */
static struct iscsi_conn **reactor_conns(struct hl_iscsi_server *srv, size_t *n)
{
	struct hl_reactor *me = hl_reactor_current();
	struct iscsi_conn **v = NULL, *c;
	size_t cap = 0;

	*n = 0;
	pthread_mutex_lock(&srv->lock);
	hl_list_for_each_entry(c, &srv->conns, srv_link)
	{
		if (c->reactor != me || c->state == CONN_CLOSED)
			continue;
		if (*n == cap) {
			size_t nc = cap ? cap * 2 : 16;
			struct iscsi_conn **nv = realloc(v, nc * sizeof(*nv));
			if (!nv)
				break;
			v = nv;
			cap = nc;
		}
		v[(*n)++] = c;
	}
	pthread_mutex_unlock(&srv->lock);
	return v;
}

/* ---- drain: every initiator asked to log out, for a restart ---- */

uint16_t iscsi_server_time2wait(struct hl_iscsi_server *srv)
{
	return (uint16_t)atomic_load(&srv->time2wait_s);
}

struct drain_req {
	struct hl_iscsi_server *srv;
	uint16_t within_s;
};

static void request_logouts(void *arg)
{
	struct drain_req *q = arg;
	struct hl_iscsi_server *srv = q->srv;
	size_t n = 0;
	struct iscsi_conn **conns = reactor_conns(srv, &n);

	/* only this reactor frees its connections: they stay valid here */
	for (size_t i = 0; i < n; i++) {
		iscsi_conn_enter(conns[i]);
		if (iscsi_conn_request_logout(conns[i], q->within_s) == 0)
			iscsi_conn_flush(conns[i]);
		iscsi_conn_leave(conns[i]);
	}
	free(conns);
	iscsi_call_done(srv);
	free(q);
}

static unsigned normal_sessions_locked(struct hl_iscsi_server *srv)
{
	struct iscsi_session *o;
	unsigned n = 0;

	hl_list_for_each_entry(o, &srv->sessions, link)
		n += o->type == ISCSI_SESSION_NORMAL;
	return n;
}

unsigned hl_iscsi_server_drain(struct hl_iscsi_server *srv, unsigned timeout_s,
                               unsigned time2wait_s, bool keep_listening)
{
	struct timespec now, end;
	unsigned left, asked;

	if (!srv)
		return 0;
	atomic_store(&srv->time2wait_s, time2wait_s > 3600 ? 3600 : time2wait_s);
	pthread_mutex_lock(&srv->lock);
	srv->pending_calls++;
	srv->draining = true; /* a login still under way is refused (service unavailable) */
	asked = normal_sessions_locked(srv);
	pthread_mutex_unlock(&srv->lock);
	/*
	 * No new connections: an initiator that logs out must not come back to
	 * us. Refused at once, or (keep_listening: the sockets go to the next
	 * process) left waiting in the backlog for the next process to accept.
	 */
	if (hl_reactor_call(srv->reactors[0],
	                    keep_listening ? portals_disarm : portals_stop_listening, srv) < 0)
		iscsi_call_done(srv);
	for (unsigned i = 0; i < srv->n_reactors; i++) {
		struct drain_req *q = malloc(sizeof(*q));
		if (!q)
			break;
		q->srv = srv;
		q->within_s = (uint16_t)(timeout_s > 3600 ? 3600 : timeout_s);
		pthread_mutex_lock(&srv->lock);
		srv->pending_calls++;
		pthread_mutex_unlock(&srv->lock);
		if (hl_reactor_call(srv->reactors[i], request_logouts, q) < 0) {
			iscsi_call_done(srv);
			free(q);
		}
	}
	if (asked)
		HL_NOTICE(ISCSI_LOG, "asked %u session(s) to log out (within %u s, back after %u s)",
		          asked, timeout_s, time2wait_s);
	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += timeout_s;
	for (;;) {
		pthread_mutex_lock(&srv->lock);
		left = normal_sessions_locked(srv);
		pthread_mutex_unlock(&srv->lock);
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (left == 0 || now.tv_sec > end.tv_sec ||
		    (now.tv_sec == end.tv_sec && now.tv_nsec >= end.tv_nsec))
			break;
		struct timespec nap = {0, 10 * 1000 * 1000};
		nanosleep(&nap, NULL);
	}
	if (left)
		HL_WARN(ISCSI_LOG, "%u of %u session(s) did not log out within %u s; closing them",
		        left, asked, timeout_s);
	else if (asked)
		HL_NOTICE(ISCSI_LOG, "all %u session(s) logged out", asked);
	return left;
}

void hl_iscsi_server_set_discovery_chap(struct hl_iscsi_server *srv,
                                        const struct hl_iscsi_chap *chap)
{
	pthread_mutex_lock(&srv->lock);
	srv->discovery_chap = *chap;
	pthread_mutex_unlock(&srv->lock);
}

void hl_iscsi_server_destroy(struct hl_iscsi_server *srv)
{
	bool ok;

	if (!srv)
		return;
	pthread_mutex_lock(&srv->lock);
	srv->stopping = true;
	srv->pending_calls++;
	pthread_mutex_unlock(&srv->lock);
	if (hl_reactor_call(srv->reactors[0], portals_disarm, srv) < 0)
		iscsi_call_done(srv);
	pthread_mutex_lock(&srv->lock);
	ok = wait_idle(srv, false);
	pthread_mutex_unlock(&srv->lock);
	if (ok) {
		for (unsigned i = 0; i < srv->n_reactors; i++) {
			pthread_mutex_lock(&srv->lock);
			srv->pending_calls++;
			pthread_mutex_unlock(&srv->lock);
			if (hl_reactor_call(srv->reactors[i], reactor_shutdown, srv) < 0)
				iscsi_call_done(srv);
		}
		pthread_mutex_lock(&srv->lock);
		ok = wait_idle(srv, true);
		pthread_mutex_unlock(&srv->lock);
	}
	if (!ok) {
		/* reactors not running: memory they may still touch is leaked, not freed */
		HL_WARN(ISCSI_LOG, "shutdown timed out (%u connections left); leaking the server",
		        srv->n_conns);
		return;
	}
	while (!hl_list_empty(&srv->portals)) {
		struct iscsi_portal *p = hl_list_first(&srv->portals, struct iscsi_portal, link);
		hl_list_del(&p->link);
		close(p->fd);
		free(p);
	}
	while (!hl_list_empty(&srv->targets)) {
		struct iscsi_target *t = hl_list_first(&srv->targets, struct iscsi_target, link);
		hl_list_del(&t->link);
		iscsi_target_free(t);
	}
	while (!hl_list_empty(&srv->targets_retired)) {
		struct iscsi_target *t =
		    hl_list_first(&srv->targets_retired, struct iscsi_target, link);
		hl_list_del(&t->link);
		iscsi_target_free(t);
	}
	iscsi_wb_fini(&srv->wb);
	pthread_mutex_destroy(&srv->lock);
	pthread_cond_destroy(&srv->cond);
	chap_guard_fini(&srv->chap_guard);
	explicit_bzero(&srv->discovery_chap, sizeof(srv->discovery_chap));
	free(srv->reactors);
	free(srv);
}

void hl_iscsi_server_set_send_uring(struct hl_iscsi_server *srv, bool on)
{
	atomic_store(&srv->send_uring, on);
}
