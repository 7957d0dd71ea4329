/*
 * admin.c - changes to a running server: replace or remove targets, close
 * portals, list sessions. Used by the daemon's control socket and reload.
 *
 * Published target objects are never modified: an update builds a new
 * object and swaps it into srv->targets; the old one moves to
 * srv->targets_retired, because sessions and logins in progress may still
 * point at it (they keep the settings they logged in with). Retired
 * objects are freed with the server; their CHAP secrets are wiped at once
 * (retire()): logins copy them when they find the target, sessions never
 * read them, and an old secret must not outlive its change in memory.
 */
#include "iscsi/iscsi_internal.h"

#include "hotlun/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* srv->lock held */
static struct iscsi_target *find_locked(struct hl_iscsi_server *srv, const char *name)
{
	struct iscsi_target *t;

	hl_list_for_each_entry(t, &srv->targets, link) {
		if (strcasecmp(t->name, name) == 0)
			return t;
	}
	return NULL;
}

/* Move t (already off srv->targets) to the retired list. srv->lock held. */
static void retire(struct hl_iscsi_server *srv, struct iscsi_target *t)
{
	explicit_bzero(&t->chap, sizeof(t->chap));
	explicit_bzero(&t->mutual, sizeof(t->mutual));
	hl_list_add_tail(&srv->targets_retired, &t->link);
}

/* srv->lock held */
static unsigned sessions_of(struct hl_iscsi_server *srv, const char *name)
{
	struct iscsi_session *s;
	unsigned n = 0;

	hl_list_for_each_entry(s, &srv->sessions, link) {
		if (s->type == ISCSI_SESSION_NORMAL && s->target &&
		    strcasecmp(s->target->name, name) == 0)
			n++;
	}
	return n;
}

int hl_iscsi_target_update(struct hl_iscsi_server *srv, const struct hl_iscsi_target_config *cfg)
{
	struct iscsi_target *t, *old;

	if (!cfg->name || !cfg->luns)
		return -EINVAL;
	t = iscsi_target_new(cfg);
	if (!t)
		return -ENOMEM;
	pthread_mutex_lock(&srv->lock);
	old = find_locked(srv, cfg->name);
	if (!old) {
		pthread_mutex_unlock(&srv->lock);
		iscsi_target_free(t);
		return -ENOENT;
	}
	/* keep the order SendTargets reports */
	hl_list_add(&old->link, &t->link);
	hl_list_del(&old->link);
	retire(srv, old);
	pthread_mutex_unlock(&srv->lock);
	return 0;
}

int hl_iscsi_target_remove(struct hl_iscsi_server *srv, const char *name, bool force)
{
	struct iscsi_target *t;
	struct iscsi_session *s, *tmp;

	pthread_mutex_lock(&srv->lock);
	t = find_locked(srv, name);
	if (!t) {
		pthread_mutex_unlock(&srv->lock);
		return -ENOENT;
	}
	if (sessions_of(srv, name) && !force) {
		pthread_mutex_unlock(&srv->lock);
		return -EBUSY;
	}
	hl_list_del(&t->link);
	retire(srv, t);
	hl_list_for_each_entry_safe(s, tmp, &srv->sessions, link) {
		if (s->type == ISCSI_SESSION_NORMAL && s->target &&
		    strcasecmp(s->target->name, name) == 0)
			iscsi_session_kill_locked(srv, s, "target removed by the administrator");
	}
	pthread_mutex_unlock(&srv->lock);
	return 0;
}

unsigned hl_iscsi_target_luns_changed(struct hl_iscsi_server *srv, const char *name)
{
	struct iscsi_session *s;
	unsigned n = 0;

	/*
	 * Under srv->lock a listed session's nexus is alive: it is unlisted
	 * before hl_scsi_nexus_gone runs, so no UA state outlives its nexus.
	 */
	pthread_mutex_lock(&srv->lock);
	hl_list_for_each_entry(s, &srv->sessions, link) {
		if (s->type != ISCSI_SESSION_NORMAL || !s->target ||
		    strcasecmp(s->target->name, name) != 0)
			continue;
		hl_scsi_luns_changed(s->target->luns, &s->nexus);
		n++;
	}
	pthread_mutex_unlock(&srv->lock);
	return n;
}

unsigned hl_iscsi_target_sessions(struct hl_iscsi_server *srv, const char *name)
{
	pthread_mutex_lock(&srv->lock);
	unsigned n = sessions_of(srv, name);
	pthread_mutex_unlock(&srv->lock);
	return n;
}

int hl_iscsi_sessions_list(struct hl_iscsi_server *srv,
			   void (*fn)(void *arg, const struct hl_iscsi_session_info *info), void *arg)
{
	struct iscsi_session *s;
	int n = 0;

	pthread_mutex_lock(&srv->lock);
	hl_list_for_each_entry(s, &srv->sessions, link) {
		struct hl_iscsi_session_info info;

		memset(&info, 0, sizeof(info));
		hl_strlcpy(info.initiator, s->initiator_name, sizeof(info.initiator));
		if (s->target)
			hl_strlcpy(info.target, s->target->name, sizeof(info.target));
		snprintf(info.isid, sizeof(info.isid), "%02x%02x%02x%02x%02x%02x", s->isid[0],
			 s->isid[1], s->isid[2], s->isid[3], s->isid[4], s->isid[5]);
		info.tsih = s->tsih;
		info.tpgt = s->tpgt;
		info.nexus_id = s->nexus.id;
		info.since = s->since;
		hl_strlcpy(info.portal, s->portal, sizeof(info.portal));
		hl_strlcpy(info.peer, s->peer, sizeof(info.peer));
		info.cid = s->cid;
		info.neg = s->neg;
		fn(arg, &info);
		n++;
	}
	pthread_mutex_unlock(&srv->lock);
	return n;
}

struct portal_close {
	struct hl_iscsi_server *srv;
	struct iscsi_portal *p;
};

static void portal_close_cb(void *arg)
{
	struct portal_close *pc = arg;

	hl_event_del(&pc->p->ev);
	hl_timer_stop(&pc->p->retry);
	close(pc->p->fd);
	free(pc->p);
	iscsi_call_done(pc->srv);
	free(pc);
}

static bool same_addr(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	if (a->ss_family != b->ss_family)
		return false;
	if (a->ss_family == AF_INET) {
		const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
		return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
	}
	const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
	return x->sin6_port == y->sin6_port &&
	       memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr)) == 0;
}

int hl_iscsi_portal_remove(struct hl_iscsi_server *srv, const char *portal)
{
	struct sockaddr_storage ss;
	unsigned sslen;
	struct iscsi_portal *p, *found = NULL;

	if (!portal || hl_parse_portal(portal, HL_ISCSI_DEFAULT_PORT, &ss, &sslen) < 0)
		return -EINVAL;
	struct portal_close *pc = malloc(sizeof(*pc));
	if (!pc)
		return -ENOMEM;
	pthread_mutex_lock(&srv->lock);
	hl_list_for_each_entry(p, &srv->portals, link) {
		if (same_addr(&p->addr, &ss)) {
			found = p;
			break;
		}
	}
	if (!found) {
		pthread_mutex_unlock(&srv->lock);
		free(pc);
		return -ENOENT;
	}
	hl_list_del(&found->link);
	iscsi_portal_forget_locked(srv, found);
	srv->pending_calls++;
	pthread_mutex_unlock(&srv->lock);
	pc->srv = srv;
	pc->p = found;
	/* The listening event lives on reactors[0]; only that thread may touch it. */
	if (hl_reactor_call(srv->reactors[0], portal_close_cb, pc) < 0) {
		pthread_mutex_lock(&srv->lock);
		hl_list_add_tail(&srv->portals, &found->link);
		srv->pending_calls--;
		pthread_mutex_unlock(&srv->lock);
		free(pc);
		return -ENOMEM;
	}
	HL_NOTICE(ISCSI_LOG, "portal %s closed (connections made through it stay up)", portal);
	return 0;
}
