/*
 * control.c - the daemon's control commands: the object tree that hotlunctl
 * shows (/disks, /caches, /iscsi/<iqn>/tpg1/{luns,acls,portals}, /sessions),
 * changes to it, statistics, saveconfig and reload. Protocol: docs/control.md.
 *
 * Every change edits a copy of the running configuration with the config
 * file's own rules (hl_conf_set & co.), checks it, and hands it to
 * daemon_apply(): the control socket can say exactly what the file can say,
 * and `saveconfig` writes what runs.
 */
#include "config.h"

#include "daemon/control_edit.h"
#include "daemon/daemon_internal.h"

#include "hotlun/ctl.h"
#include "hotlun/event.h"
#include "hotlun/iscsi.h"
#include "hotlun/log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define SAVECONFIG_BACKUPS 5

struct session_query {
	uint64_t tsih;
	bool found;
	struct hl_iscsi_session_info *out;
};

static void session_find_cb(void *arg, const struct hl_iscsi_session_info *s)
{
	struct session_query *q = arg;

	if (!q->found && s->tsih == q->tsih) {
		*q->out = *s;
		q->found = true;
	}
}

/* The session /sessions/<tsih> names. @return 0 or -ENOENT. */
static int session_find(struct daemon *d, const char *tsih, struct hl_iscsi_session_info *out)
{
	struct session_query q = {.out = out};

	if (hl_parse_u64(tsih, &q.tsih) || q.tsih > UINT16_MAX)
		return -ENOENT;
	hl_iscsi_sessions_list(d->server, session_find_cb, &q);
	return q.found ? 0 : -ENOENT;
}

static void view_of(struct daemon *d, struct ctl_view *v);

static int parse_path(struct daemon *d, const char *path, struct node *nd, char *err, size_t errlen)
{
	struct ctl_view v;

	view_of(d, &v);
	return ctl_parse_path(&v, path, nd, err, errlen);
}

/* ---- reading the tree ---- */

static json_t *node_new(const char *name, const char *path, const char *summary)
{
	return json_pack("{s:s, s:s, s:s, s:[]}", "name", name, "path", path, "summary",
			 summary ? summary : "", "children");
}

static void add_child(json_t *parent, json_t *child)
{
	json_array_append_new(json_object_get(parent, "children"), child);
}

static const char *fmt_size(uint64_t v, char *buf, size_t len)
{
	return hl_format_size(v, buf, len);
}

static json_t *disk_node(struct daemon *d, const struct hl_conf_disk *cd)
{
	char path[512], summary[1024], sz[32] = "?", origin[2200];
	struct disk_rt *rt = daemon_disk_find(d, cd->name);
	unsigned users = 0;

	for (size_t i = 0; i < d->conf->n_targets; i++) {
		const struct hl_conf_target *t = &d->conf->targets[i];
		for (size_t j = 0; j < t->n_luns; j++)
			if (strcmp(t->luns[j].disk, cd->name) == 0)
				users += hl_iscsi_target_sessions(d->server, t->name);
	}
	if (rt)
		fmt_size(hl_lu_num_blocks(rt->lu) * hl_lu_block_size(rt->lu), sz, sizeof(sz));
	snprintf(path, sizeof(path), "/disks/%s", cd->name);
	char own[300] = "";
	if (rt && rt->owner) {
		struct hl_owner_status st;
		hl_owner_status(rt->owner, &st);
		if (st.owner)
			snprintf(own, sizeof(own), ", %s (owner: gateway %u, epoch %llu)%s%s", st.state,
				 st.owner, (unsigned long long)st.epoch, st.problem[0] ? "; problem: " : "",
				 st.problem);
		else
			snprintf(own, sizeof(own), ", %s (no owner)%s%s", st.state,
				 st.problem[0] ? "; problem: " : "", st.problem);
	}
	snprintf(summary, sizeof(summary), "%s, %s%s%s%s, %u session(s)%s", sz,
		 hl_uri_redact(cd->origin, false, origin, sizeof(origin)),
		 cd->read_only ? ", read-only" : "", cd->cache ? ", cache " : "",
		 cd->cache ? cd->cache : "", users, own);
	return node_new(cd->name, path, summary);
}

static json_t *cache_node(const struct hl_conf_cache *k)
{
	char path[512], summary[1024], sz[32], bs[32];

	snprintf(path, sizeof(path), "/caches/%s", k->name);
	snprintf(summary, sizeof(summary), "%s on %s, %s blocks, admission %s, writes %s",
		 fmt_size(k->size, sz, sizeof(sz)), k->device, fmt_size(k->block_size, bs, sizeof(bs)),
		 k->admission ? k->admission : "frequency",
		 k->write_policy ? k->write_policy : "update");
	return node_new(k->name, path, summary);
}

static json_t *target_node(struct daemon *d, const struct hl_conf_target *t)
{
	char path[512], sub[600], summary[512];
	unsigned sessions = hl_iscsi_target_sessions(d->server, t->name);

	snprintf(path, sizeof(path), "/iscsi/%s", t->name);
	snprintf(summary, sizeof(summary), "%zu LUN(s), %u session(s)%s%s", t->n_luns, sessions,
		 t->chap_user ? ", CHAP" : "", t->mutual_user ? " (mutual)" : "");
	json_t *tn = node_new(t->name, path, summary);

	snprintf(sub, sizeof(sub), "%s/tpg1", path);
	json_t *tpg = node_new("tpg1", sub, "portal group 1");
	add_child(tn, tpg);

	snprintf(sub, sizeof(sub), "%s/tpg1/luns", path);
	json_t *luns = node_new("luns", sub, NULL);
	for (size_t i = 0; i < t->n_luns; i++) {
		char name[32], lpath[700], s[512];
		snprintf(name, sizeof(name), "lun%u", t->luns[i].lun);
		snprintf(lpath, sizeof(lpath), "%s/%s", sub, name);
		snprintf(s, sizeof(s), "/disks/%s", t->luns[i].disk);
		add_child(luns, node_new(name, lpath, s));
	}
	add_child(tpg, luns);

	snprintf(sub, sizeof(sub), "%s/tpg1/acls", path);
	json_t *acls = node_new("acls", sub, NULL);
	if (t->allow_all) {
		char apath[700];
		snprintf(apath, sizeof(apath), "%s/ALL", sub);
		add_child(acls, node_new("ALL", apath, "any initiator"));
	}
	for (size_t i = 0; i < t->n_allow; i++) {
		char apath[1024];
		snprintf(apath, sizeof(apath), "%s/%s", sub, t->allow[i]);
		add_child(acls, node_new(t->allow[i], apath, NULL));
	}
	add_child(tpg, acls);

	snprintf(sub, sizeof(sub), "%s/tpg1/portals", path);
	json_t *portals = node_new("portals", sub, "shared by every target");
	for (size_t i = 0; i < d->conf->n_portals; i++) {
		char ppath[800];
		snprintf(ppath, sizeof(ppath), "%s/%s", sub, d->conf->portals[i]);
		add_child(portals, node_new(d->conf->portals[i], ppath, NULL));
	}
	add_child(tpg, portals);
	return tn;
}

static void session_cb(void *arg, const struct hl_iscsi_session_info *s)
{
	json_t *parent = arg;
	char name[32], path[64], summary[600];

	snprintf(name, sizeof(name), "%u", s->tsih);
	snprintf(path, sizeof(path), "/sessions/%u", s->tsih);
	snprintf(summary, sizeof(summary), "%s (isid %s) -> %s, tpgt %u", s->initiator, s->isid,
		 s->target, s->tpgt);
	add_child(parent, node_new(name, path, summary));
}

static void session_json_cb(void *arg, const struct hl_iscsi_session_info *s)
{
	json_array_append_new(arg, json_pack("{s:s, s:s, s:s, s:i, s:i, s:s, s:s, s:I}", "initiator",
					     s->initiator, "target", s->target, "isid", s->isid,
					     "tsih", (int)s->tsih, "tpgt", (int)s->tpgt, "portal",
					     s->portal, "peer", s->peer, "since", (json_int_t)s->since));
}

static json_t *tree(struct daemon *d)
{
	const struct hl_conf *c = d->conf;
	json_t *root = node_new("/", "/", "hotlun " PACKAGE_VERSION);
	char s[64];

	snprintf(s, sizeof(s), "%zu disk(s)", c->n_disks);
	json_t *disks = node_new("disks", "/disks", s);
	for (size_t i = 0; i < c->n_disks; i++)
		add_child(disks, disk_node(d, &c->disks[i]));
	add_child(root, disks);

	snprintf(s, sizeof(s), "%zu cache(s)", c->n_caches);
	json_t *caches = node_new("caches", "/caches", s);
	for (size_t i = 0; i < c->n_caches; i++)
		add_child(caches, cache_node(&c->caches[i]));
	add_child(root, caches);

	snprintf(s, sizeof(s), "%zu target(s)", c->n_targets);
	json_t *iscsi = node_new("iscsi", "/iscsi", s);
	for (size_t i = 0; i < c->n_targets; i++)
		add_child(iscsi, target_node(d, &c->targets[i]));
	add_child(root, iscsi);

	json_t *sessions = node_new("sessions", "/sessions", NULL);
	int n = hl_iscsi_sessions_list(d->server, session_cb, sessions);
	snprintf(s, sizeof(s), "%d session(s)", n);
	json_object_set_new(sessions, "summary", json_string(s));
	add_child(root, sessions);
	return root;
}

/* Find the subtree of `path` in the full tree. */
static json_t *subtree(json_t *node, const char *path)
{
	const char *p = json_string_value(json_object_get(node, "path"));
	if (p && strcmp(p, path) == 0)
		return node;
	size_t i;
	json_t *child;
	json_array_foreach(json_object_get(node, "children"), i, child) {
		json_t *hit = subtree(child, path);
		if (hit)
			return hit;
	}
	return NULL;
}

static int cmd_ls(void *ctx, json_t *args, json_t **result, char *err, size_t errlen)
{
	struct daemon *d = ctx;
	const char *path = ctl_arg_str(args, "path");
	struct node nd;
	char canon[1024];
	int rc;

	if (json_object_get(args, "path") && !path)
		return daemon_fail(err, errlen, -EINVAL, "path: expected a string");
	rc = parse_path(d, path ? path : "/", &nd, err, errlen);
	if (rc)
		return rc;
	ctl_node_path(&nd, canon, sizeof(canon));
	json_t *all = tree(d);
	json_t *sub = subtree(all, canon);
	*result = sub ? json_incref(sub) : json_pack("{s:s, s:s, s:[]}", "name", canon, "path",
						     canon, "children");
	json_decref(all);
	return 0;
}

/* ---- parameters of one object ---- */

static void put_str(json_t *o, const char *k, const char *v)
{
	json_object_set_new(o, k, v ? json_string(v) : json_null());
}

/* A secret as get shows it: set or not, never its value. */
static void put_secret(json_t *o, const char *k, const char *v)
{
	put_str(o, k, v ? HL_CONF_SECRET_MASK : NULL);
}

/* An origin URI as it may leave the process: credentials masked (hl_uri_redact). */
static void put_origin(json_t *o, const char *k, const char *uri)
{
	char shown[2200];

	put_str(o, k, uri ? hl_uri_redact(uri, false, shown, sizeof(shown)) : NULL);
}

static json_t *yes_no(bool v)
{
	return json_string(v ? "Yes" : "No");
}

/* A session as `get /sessions/<tsih>` shows it: who, where, and what login negotiated. */
static json_t *session_params(const struct hl_iscsi_session_info *s)
{
	const struct hl_iscsi_negotiated *n = &s->neg;
	json_t *neg = json_object(), *conn;

	json_object_set_new(neg, "MaxConnections", json_integer(n->max_connections));
	json_object_set_new(neg, "InitialR2T", yes_no(n->initial_r2t));
	json_object_set_new(neg, "ImmediateData", yes_no(n->immediate_data));
	json_object_set_new(neg, "MaxBurstLength", json_integer(n->max_burst_length));
	json_object_set_new(neg, "FirstBurstLength", json_integer(n->first_burst_length));
	json_object_set_new(neg, "DefaultTime2Wait", json_integer(n->default_time2wait));
	json_object_set_new(neg, "DefaultTime2Retain", json_integer(n->default_time2retain));
	json_object_set_new(neg, "MaxOutstandingR2T", json_integer(n->max_outstanding_r2t));
	json_object_set_new(neg, "DataPDUInOrder", yes_no(n->data_pdu_in_order));
	json_object_set_new(neg, "DataSequenceInOrder", yes_no(n->data_sequence_in_order));
	json_object_set_new(neg, "ErrorRecoveryLevel", json_integer(n->error_recovery_level));
	conn = json_pack("{s:i, s:s, s:s, s:s, s:s, s:I, s:I}", "cid", (int)s->cid, "portal",
			 s->portal, "peer", s->peer, "HeaderDigest",
			 n->header_digest ? "CRC32C" : "None", "DataDigest",
			 n->data_digest ? "CRC32C" : "None", "MaxRecvDataSegmentLength_initiator",
			 (json_int_t)n->max_recv_dsl_initiator, "MaxRecvDataSegmentLength_target",
			 (json_int_t)n->max_recv_dsl_target);
	return json_pack("{s:s, s:s, s:s, s:i, s:i, s:s, s:s, s:I, s:o, s:[o]}", "initiator",
			 s->initiator, "target", s->target, "isid", s->isid, "tsih", (int)s->tsih,
			 "tpgt", (int)s->tpgt, "portal", s->portal, "peer", s->peer, "since",
			 (json_int_t)s->since, "negotiated", neg, "connections", conn);
}

static int object_params(struct daemon *d, const struct node *nd, json_t **out, char *err,
			 size_t errlen)
{
	json_t *o = json_object();
	const struct hl_conf *c = d->conf;

	switch (nd->kind) {
	case N_ROOT: {
		json_t *portals = json_array();
		for (size_t i = 0; i < c->n_portals; i++)
			json_array_append_new(portals, json_string(c->portals[i]));
		json_object_set_new(o, "portal", portals);
		put_str(o, "state_dir", c->state_dir);
		put_str(o, "control_socket", c->control_socket);
		put_str(o, "metrics_listen", c->metrics_listen);
		json_object_set_new(o, "threads", json_integer(c->threads));
		put_str(o, "cpus", c->cpus);
		json_object_set_new(o, "poll_us", json_integer(daemon_poll_us(c)));
		json_object_set_new(o, "logout_timeout", json_integer(daemon_logout_timeout(c)));
		json_object_set_new(o, "control_idle_timeout",
		                    json_integer(daemon_control_idle_ms(c) / 1000));
		json_object_set_new(o, "send_uring", json_boolean(daemon_send_uring(c)));
		struct hl_iscsi_write_stats ws;
		hl_iscsi_write_stats(d->server, &ws);
		json_object_set_new(o, "write_buffer_limit", json_integer((json_int_t)ws.limit));
		json_object_set_new(o, "scratch_buffer_limit",
		                    json_integer((json_int_t)daemon_scratch_limit(c)));
		/* by name, as set and the file take it */
		put_str(o, "log_level", hl_log_level_name(c->log_level));
		put_str(o, "discovery_chap_user", c->discovery_chap_user);
		put_secret(o, "discovery_chap_secret", c->discovery_chap_secret);
		/* the caps in force: the defaults are derived from the open-file limit */
		struct hl_iscsi_limits lim;
		hl_iscsi_server_limits(d->server, &lim);
		json_object_set_new(o, "max_pending_logins",
				    json_integer(lim.caps.max_pending_logins));
		json_object_set_new(o, "max_pending_logins_per_addr",
				    json_integer(lim.caps.max_pending_logins_per_addr));
		json_object_set_new(o, "max_sessions", json_integer(lim.caps.max_sessions));
		json_object_set_new(o, "max_sessions_per_addr",
				    json_integer(lim.caps.max_sessions_per_addr));
		break;
	}
	case N_DISK: {
		const struct hl_conf_disk *k = hl_conf_find_disk(c, nd->name);
		struct disk_rt *rt = daemon_disk_find(d, nd->name);
		put_origin(o, "origin", k->origin);
		put_str(o, "origin_chap_user", k->ochap.user);
		put_secret(o, "origin_chap_secret", k->ochap.secret);
		put_str(o, "origin_chap_secret_file", k->ochap.secret_file);
		put_str(o, "origin_mutual_user", k->ochap.mutual_user);
		put_secret(o, "origin_mutual_secret", k->ochap.mutual_secret);
		json_object_set_new(o, "block_size", json_integer(k->block_size));
		json_object_set_new(o, "read_only", json_boolean(k->read_only));
		put_str(o, "cache", k->cache);
		json_object_set_new(o, "cache_quota", json_integer((json_int_t)k->cache_quota));
		json_object_set_new(o, "origin_iops", json_integer(k->origin_iops));
		json_object_set_new(o, "origin_mbps", json_integer(k->origin_mbps));
		json_object_set_new(o, "origin_latency_ms", json_integer(k->origin_latency_ms));
		json_object_set_new(o, "exclusive", json_boolean(k->exclusive)); /* issue 17 */
		put_str(o, "serial", k->serial);
		put_str(o, "naa", k->naa);
		if (rt) {
			json_object_set_new(o, "size_bytes",
					    json_integer((json_int_t)(hl_lu_num_blocks(rt->lu) *
								      hl_lu_block_size(rt->lu))));
			json_object_set_new(o, "blocks", json_integer((json_int_t)hl_lu_num_blocks(rt->lu)));
		}
		break;
	}
	case N_CACHE: {
		const struct hl_conf_cache *k = hl_conf_find_cache(c, nd->name);
		put_str(o, "device", k->device);
		json_object_set_new(o, "size", json_integer((json_int_t)k->size));
		json_object_set_new(o, "block_size", json_integer(k->block_size));
		put_str(o, "admission", k->admission ? k->admission : "frequency");
		put_str(o, "write_policy", k->write_policy ? k->write_policy : "update");
		json_object_set_new(o, "update_buffer",
				    json_integer((json_int_t)daemon_cache_update_buffer(k)));
		json_object_set_new(o, "write_budget", json_integer(daemon_cache_write_budget(k)));
		break;
	}
	case N_TARGET: {
		const struct hl_conf_target *t = hl_conf_find_target(c, nd->name);
		put_str(o, "alias", t->alias);
		put_str(o, "chap_user", t->chap_user);
		json_object_set_new(o, "chap_secret", t->chap_secret ? json_string("********") : json_null());
		put_str(o, "mutual_user", t->mutual_user);
		json_object_set_new(o, "mutual_secret",
				    t->mutual_secret ? json_string("********") : json_null());
		json_object_set_new(o, "allow_target_reset", json_boolean(t->allow_target_reset));
		json_object_set_new(o, "sessions",
				    json_integer(hl_iscsi_target_sessions(d->server, t->name)));
		break;
	}
	case N_LUN: {
		const struct hl_conf_target *t = hl_conf_find_target(c, nd->name);
		uint64_t lun = strtoull(nd->leaf + 3, NULL, 10);
		for (size_t i = 0; i < t->n_luns; i++)
			if (t->luns[i].lun == lun)
				put_str(o, "disk", t->luns[i].disk);
		break;
	}
	case N_SESSION: {
		struct hl_iscsi_session_info s;
		if (session_find(d, nd->name, &s)) {
			json_decref(o);
			return daemon_fail(err, errlen, -ENOENT, "no session %s", nd->name);
		}
		json_decref(o);
		o = session_params(&s);
		break;
	}
	default:
		json_decref(o);
		return daemon_fail(err, errlen, -EINVAL, "this node has no parameters");
	}
	*out = o;
	return 0;
}

static int cmd_get(void *ctx, json_t *args, json_t **result, char *err, size_t errlen)
{
	struct daemon *d = ctx;
	const char *path = ctl_arg_str(args, "path");
	struct node nd;
	int rc;

	if (!path)
		return daemon_fail(err, errlen, -EINVAL, "path: a string is required");
	rc = parse_path(d, path, &nd, err, errlen);
	if (rc)
		return rc;
	return object_params(d, &nd, result, err, errlen);
}

/* ---- changes ---- */

/* Name the control client asking for the change in daemon_apply's log lines. */
static void change_by_client(struct daemon *d, const char *what, bool force)
{
	const char *who = hl_ctl_caller(d->ctl);
	snprintf(d->change_by, sizeof(d->change_by), "%s from the control socket (%s)%s", what,
		 who ? who : "unknown peer", force ? " with force" : "");
}

/*
 * A change's reply: now, or, when it removed disks, once they are closed
 * (closing.c: off this reactor, which answers other clients meanwhile).
 */
static int change_reply(struct daemon *d, int rc, const char *err)
{
	struct hl_ctl_later *later;

	if (hl_list_empty(&d->closing))
		return rc;
	later = hl_ctl_defer(d->ctl);
	if (daemon_closes_start(d, later, false, rc, err) && later)
		return HL_CTL_DEFERRED;
	return rc; /* closed in line, or no handle (out of memory): answered now */
}

/* Check and apply an edited copy (which this takes). */
static int commit_change(struct daemon *d, struct hl_conf *next, bool force, char *err,
			 size_t errlen)
{
	int rc = hl_conf_check(next, err, errlen);
	if (rc) {
		hl_conf_free(next);
		return rc;
	}
	change_by_client(d, "a change", force);
	rc = daemon_apply(d, next, force, err, errlen);
	return change_reply(d, rc, err);
}

/* The daemon as control_edit.c's parsing sees it. */
static bool view_session_exists(void *arg, const char *tsih)
{
	struct hl_iscsi_session_info info;

	return session_find(arg, tsih, &info) == 0;
}

static unsigned view_target_sessions(void *arg, const char *target)
{
	struct daemon *d = arg;

	return hl_iscsi_target_sessions(d->server, target);
}

static int view_shown(void *arg, const struct node *nd, json_t **out, char *err, size_t errlen)
{
	return object_params(arg, nd, out, err, errlen);
}

static void view_of(struct daemon *d, struct ctl_view *v)
{
	*v = (struct ctl_view){
	    .conf = d->conf,
	    .session_exists = view_session_exists,
	    .target_sessions = view_target_sessions,
	    .shown = view_shown,
	    .arg = d,
	};
}

/* An edit that answers only with its status: set and delete. */
typedef int (*conf_edit_fn)(const struct ctl_view *v, json_t *args, struct hl_conf **next,
                            char *err, size_t errlen);

static int edit_and_commit(struct daemon *d, conf_edit_fn edit, json_t *args, char *err,
                           size_t errlen)
{
	struct hl_conf *next;
	struct ctl_view v;
	int rc;

	view_of(d, &v);
	rc = edit(&v, args, &next, err, errlen);
	if (rc || !next)
		return rc;
	return commit_change(d, next, ctl_arg_force(args), err, errlen);
}

static int cmd_set(void *ctx, json_t *args, json_t **result, char *err, size_t errlen)
{
	(void)result;
	return edit_and_commit(ctx, ctl_edit_set, args, err, errlen);
}

static int cmd_create(void *ctx, json_t *args, json_t **result, char *err, size_t errlen)
{
	struct daemon *d = ctx;
	char created[1024] = "";
	struct hl_conf *next;
	struct ctl_view v;
	int rc;

	view_of(d, &v);
	rc = ctl_edit_create(&v, args, &next, created, sizeof(created), err, errlen);
	if (rc || !next)
		return rc;
	rc = commit_change(d, next, ctl_arg_force(args), err, errlen);
	if (rc == 0)
		*result = json_pack("{s:s}", "created", created);
	return rc;
}

static int cmd_delete(void *ctx, json_t *args, json_t **result, char *err, size_t errlen)
{
	(void)result;
	return edit_and_commit(ctx, ctl_edit_delete, args, err, errlen);
}

/* ---- statistics ---- */

static const char *alua_name(enum hl_alua_state s)
{
	switch (s) {
	case HL_ALUA_AO:
		return "active/optimized";
	case HL_ALUA_ANO:
		return "active/non-optimized";
	case HL_ALUA_STANDBY:
		return "standby";
	case HL_ALUA_UNAVAILABLE:
		return "unavailable";
	case HL_ALUA_OFFLINE:
		return "offline";
	case HL_ALUA_TRANSITIONING:
		return "transitioning";
	}
	return "?";
}

/* A shared disk's ownership (docs/gateways.md): what stats and ls show. */
static json_t *owner_json(struct daemon *d, struct hl_owner *ow)
{
	struct hl_owner_status st;

	hl_owner_status(ow, &st);
	return json_pack("{s:i, s:s, s:s, s:i, s:I, s:I, s:I, s:I, s:s, s:s}", "gateway",
			 (int)d->conf->gateway, "state", st.state, "alua", alua_name(st.alua),
			 "owner", (int)st.owner, "epoch", (json_int_t)st.epoch, "transitions",
			 (json_int_t)st.transitions, "takeovers", (json_int_t)st.takeovers,
			 "lease_left_ms", (json_int_t)st.lease_left_ms, "last", st.last, "problem",
			 st.problem);
}

/* /disks/NAME handover | takeover: move a shared disk by hand. */
static int owner_of(struct daemon *d, json_t *args, struct disk_rt **out, char *err,
		    size_t errlen)
{
	const char *path = ctl_arg_str(args, "path");
	struct node nd;
	int rc;

	if (!path)
		return daemon_fail(err, errlen, -EINVAL, "needs path (string): /disks/NAME");
	rc = parse_path(d, path, &nd, err, errlen);
	if (rc)
		return rc;
	if (nd.kind != N_DISK)
		return daemon_fail(err, errlen, -EINVAL, "%s is not a disk (/disks/NAME)", path);
	*out = daemon_disk_find(d, nd.name);
	if (!*out || !(*out)->owner)
		return daemon_fail(
		    err, errlen, -EINVAL,
		    "disk %s is not shared between gateways ([global] gateway, an rbd or "
		    "iscsi origin)",
		    nd.name);
	return 0;
}

static int cmd_handover(void *ctx, json_t *args, json_t **result, char *err, size_t errlen)
{
	struct daemon *d = ctx;
	struct disk_rt *rt;
	struct hl_owner_status st;
	int rc = owner_of(d, args, &rt, err, errlen);

	if (rc)
		return rc;
	hl_owner_status(rt->owner, &st);
	if (strcmp(st.state, "owner"))
		return daemon_fail(err, errlen, -EALREADY,
		                   "disk %s: this gateway does not own it (%s)", rt->conf.name,
		                   st.state);
	HL_NOTICE("daemon", "disk %s: handover asked through the control socket", rt->conf.name);
	rc = hl_owner_handover(rt->owner, 5000);
	hl_owner_status(rt->owner, &st);
	*result = owner_json(d, rt->owner);
	if (rc == -ETIMEDOUT)
		json_object_set_new(*result, "warning",
				    json_string("released, but no peer took it within 5 s"));
	return 0;
}

static int cmd_takeover(void *ctx, json_t *args, json_t **result, char *err, size_t errlen)
{
	struct daemon *d = ctx;
	struct disk_rt *rt;
	int rc = owner_of(d, args, &rt, err, errlen);

	if (rc)
		return rc;
	rc = hl_owner_request(rt->owner);
	if (rc == -EALREADY)
		return daemon_fail(err, errlen, rc, "disk %s: this gateway owns it already",
		                   rt->conf.name);
	if (rc == -EBUSY)
		return daemon_fail(
		    err, errlen, rc,
		    "disk %s: ownership moved less than %u s ago; it moves at most that "
		    "often (no ping-pong)",
		    rt->conf.name, HL_OWNER_HOLD_MS / 1000);
	if (rc)
		return daemon_fail(err, errlen, rc, "disk %s: %s", rt->conf.name, strerror(-rc));
	HL_NOTICE("daemon", "disk %s: takeover asked through the control socket", rt->conf.name);
	*result = owner_json(d, rt->owner);
	return 0;
}

/* Descriptors open now and the soft limit: the room left for connections and origins. */
static json_t *process_json(void)
{
	struct rlimit rl = {0};
	json_int_t open_fds = 0;
	DIR *dir = opendir("/proc/self/fd");
	struct dirent *e;

	if (dir) {
		while ((e = readdir(dir)))
			open_fds += e->d_name[0] != '.';
		closedir(dir);
		open_fds--; /* the directory's own */
	}
	getrlimit(RLIMIT_NOFILE, &rl);
	return json_pack("{s:I, s:I}", "open_fds", open_fds, "max_fds",
	                 (json_int_t)(rl.rlim_cur == RLIM_INFINITY ? INT64_MAX : rl.rlim_cur));
}

static void session_target_cb(void *arg, const struct hl_iscsi_session_info *s)
{
	json_t *t = json_object_get(arg, s->target);

	if (t)
		json_object_set_new(
		    t, "sessions",
		    json_integer(json_integer_value(json_object_get(t, "sessions")) + 1));
}

/*
 * The stats object: what `stats` answers and what the Prometheus endpoint
 * renders (one source for hotlunctl, hotlun-snmp and /metrics). Each
 * cache's counters are read under its lock at once; disks, caches and the
 * service are read one after the other, so while I/O runs they may be
 * apart by the commands that completed in between. Control thread.
 */
json_t *daemon_stats(struct daemon *d)
{
	json_t *disks = json_object();
	struct disk_rt *rt;

	hl_list_for_each_entry(rt, &d->disks, link) {
		struct hl_origin_counters c;
		char shown[2200];
		json_t *o = json_pack("{s:s, s:I, s:i, s:b}", "origin",
				      hl_uri_redact(rt->conf.origin, false, shown, sizeof(shown)),
				      "size_bytes",
				      (json_int_t)(hl_lu_num_blocks(rt->lu) * hl_lu_block_size(rt->lu)),
				      "block_size", (int)hl_lu_block_size(rt->lu), "read_only",
				      rt->conf.read_only);
		hl_origin_counters_read(rt->counters, &c);
		json_object_set_new(o, "read_cmds", json_integer((json_int_t)c.read_cmds));
		json_object_set_new(o, "write_cmds", json_integer((json_int_t)c.write_cmds));
		json_object_set_new(o, "other_cmds", json_integer((json_int_t)c.other_cmds));
		json_object_set_new(o, "read_bytes", json_integer((json_int_t)c.read_bytes));
		json_object_set_new(o, "write_bytes", json_integer((json_int_t)c.write_bytes));
		json_object_set_new(o, "errors", json_integer((json_int_t)c.errors));
		json_t *rl = json_array(), *wl = json_array();
		for (int i = 0; i < HL_ORIGIN_LAT_BUCKETS; i++) {
			json_array_append_new(rl, json_integer((json_int_t)c.read_lat[i]));
			json_array_append_new(wl, json_integer((json_int_t)c.write_lat[i]));
		}
		json_object_set_new(o, "read_latency_log2_us", rl);
		json_object_set_new(o, "write_latency_log2_us", wl);
		/* reads by where their data came from (hotlun/origin.h, hl_io_source) */
		static const char *const src_name[HL_IO_SRC_N] = {"uncached", "hit", "partial",
		                                                  "miss"};
		json_t *bysrc = json_object(), *nssrc = json_object();
		for (int k = 0; k < HL_IO_SRC_N; k++) {
			json_t *a = json_array();
			for (int i = 0; i < HL_ORIGIN_LAT_BUCKETS; i++)
				json_array_append_new(
				    a, json_integer((json_int_t)c.read_src_lat[k][i]));
			json_object_set_new(bysrc, src_name[k], a);
			json_object_set_new(nssrc, src_name[k],
			                    json_integer((json_int_t)c.read_src_ns[k]));
		}
		json_object_set_new(o, "read_latency_by_source_log2_us", bysrc);
		json_object_set_new(o, "read_ns_by_source", nssrc);
		json_object_set_new(o, "read_ns", json_integer((json_int_t)c.read_ns));
		json_object_set_new(o, "write_ns", json_integer((json_int_t)c.write_ns));
		json_object_set_new(o, "latency_recorded", json_boolean(c.timed));
		if (rt->conf.cache)
			json_object_set_new(o, "cache", json_string(rt->conf.cache));
		if (rt->owner)
			json_object_set_new(o, "ownership", owner_json(d, rt->owner));
		json_t *sh = rt->owner ? daemon_shadow_json(rt->cached) : NULL;
		if (sh)
			json_object_set_new(o, "shadow", sh);
		json_object_set_new(disks, rt->conf.name, o);
	}
	json_t *list = json_array();
	int n = hl_iscsi_sessions_list(d->server, session_json_cb, list);
	struct hl_iscsi_auth_stats auth;
	hl_iscsi_auth_stats_get(d->server, &auth);
	struct hl_iscsi_write_stats ws;
	hl_iscsi_write_stats(d->server, &ws);
	json_t *wb = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "limit",
			       (json_int_t)ws.limit, "conn_limit", (json_int_t)ws.conn_limit,
			       "held_bytes", (json_int_t)ws.held, "peak_bytes", (json_int_t)ws.peak,
			       "waiting", (json_int_t)ws.waiting, "waiting_bytes",
			       (json_int_t)ws.waiting_bytes, "r2t_deferred",
			       (json_int_t)ws.r2t_deferred, "task_set_full",
			       (json_int_t)ws.task_set_full, "window_closed",
			       (json_int_t)ws.window_closed);
	/* issue 24: one source's share, and the WRITEs too slow to keep theirs */
	json_object_set_new(wb, "source_limit", json_integer((json_int_t)ws.source_limit));
	json_object_set_new(wb, "sources", json_integer((json_int_t)ws.sources));
	json_object_set_new(wb, "source_capped", json_integer((json_int_t)ws.source_capped));
	json_object_set_new(wb, "closed_slow", json_integer((json_int_t)ws.closed_slow));
	json_object_set_new(wb, "closed_no_data", json_integer((json_int_t)ws.closed_silent));
	/* the per-command scratch buffer budget (src/scsi/scratch.c) */
	struct hl_scsi_scratch_stats ss;
	hl_scsi_scratch_stats(&ss);
	json_t *scratch = json_pack("{s:I, s:I, s:I, s:I}", "limit", (json_int_t)ss.limit,
	                            "used_bytes", (json_int_t)ss.used, "peak_bytes",
	                            (json_int_t)ss.peak, "refused", (json_int_t)ss.refused);
	/*
	 * Sessions per target (every configured target, 0 included). More
	 * service counters (logins, pending logins) go into "iscsi" as the
	 * iSCSI server exports them (hl_iscsi_*_stats); docs/metrics.md lists
	 * the ones still to come.
	 */
	json_t *targets = json_object();
	for (size_t i = 0; i < d->conf->n_targets; i++)
		json_object_set_new(targets, d->conf->targets[i].name,
		                    json_pack("{s:i}", "sessions", 0));
	hl_iscsi_sessions_list(d->server, session_target_cb, targets);
	struct hl_iscsi_conn_stats cs;
	hl_iscsi_conn_stats(d->server, &cs);
	json_t *iscsi = json_pack(
	    "{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "auth_failures",
	    (json_int_t)auth.chap_failures, "auth_throttled", (json_int_t)auth.chap_throttled,
	    "logins", (json_int_t)cs.logins, "login_failures", (json_int_t)cs.login_failures,
	    "connections", (json_int_t)cs.connections, "pending_logins", (json_int_t)cs.pending,
	    "pending_evicted", (json_int_t)cs.evicted, "refused_pending",
	    (json_int_t)cs.refused_pending, "refused_sessions", (json_int_t)cs.refused_sessions);
	if (iscsi)
		json_object_set_new(iscsi, "accept_paused", json_integer((json_int_t)cs.fd_pauses));
	return json_pack("{s:s, s:i, s:o, s:i, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "version",
	                 PACKAGE_VERSION, "gateway", (int)d->conf->gateway, "disks", disks,
	                 "sessions", n, "session_list", list, "targets", targets, "caches",
	                 daemon_cache_stats_json(), "iscsi", iscsi, "write_buffers", wb,
	                 "scratch_buffers", scratch, "process", process_json());
}

static int cmd_stats(void *ctx, json_t *args, json_t **result, char *err, size_t errlen)
{
	(void)args;
	*result = daemon_stats(ctx);
	if (!*result)
		return daemon_fail(err, errlen, -ENOMEM, "out of memory");
	return 0;
}

/* ---- configuration file ---- */

/*
 * The numbered backups hold the old files' secrets. path.1 is the old file
 * itself (a hard link), with whatever mode it had (0644 before someone
 * noticed), and the older ones come from before saveconfig made them
 * private: every backup is made 0600, through a descriptor of the file
 * (not a link put there in its place).
 */
static void backups_private(const char *path)
{
	char name[PATH_MAX + 16];
	struct stat st;

	for (int i = 1; i <= SAVECONFIG_BACKUPS; i++) {
		snprintf(name, sizeof(name), "%s.%d", path, i);
		int fd = open(name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
		if (fd < 0)
			continue;
		if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 07177) &&
		    fchmod(fd, st.st_mode & 0600) < 0)
			HL_WARN("daemon", "saveconfig: backup %s stays mode %04o: %s", name,
			        (unsigned)(st.st_mode & 07777), strerror(errno));
		close(fd);
	}
}

int daemon_save_config(const struct hl_conf *conf, const char *path, char *err, size_t errlen)
{
	char tmp[PATH_MAX], from[PATH_MAX + 16], to[PATH_MAX + 16];
	FILE *f;
	int rc;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return daemon_fail(err, errlen, -ENAMETOOLONG, "%s: path too long", path);
	/*
	 * The file holds CHAP secrets: never readable by others, whatever the
	 * umask. It keeps the original's owner and group, and its group read
	 * bit if it had one (an admin group); a new file is 0600.
	 */
	struct stat ost;
	bool had = stat(path, &ost) == 0;
	mode_t mode = had ? (ost.st_mode & 0640) | 0600 : 0600;
	unlink(tmp); /* a leftover of a failed save */
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return daemon_fail(err, errlen, -errno, "%s: %s", tmp, strerror(errno));
	if (had && fchown(fd, ost.st_uid, ost.st_gid) < 0)
		HL_DEBUG("daemon", "saveconfig: %s keeps hotlund's owner: %s", tmp, strerror(errno));
	if (fchmod(fd, mode) < 0 || !(f = fdopen(fd, "w"))) {
		rc = -errno;
		close(fd);
		unlink(tmp);
		return daemon_fail(err, errlen, rc, "%s: %s", tmp, strerror(-rc));
	}
	/* our stdio buffer, wiped after: the text holds the secrets */
	char iobuf[4096];
	setvbuf(f, iobuf, _IOFBF, sizeof(iobuf));
	fprintf(f, "; written by hotlund %s (saveconfig)\n", PACKAGE_VERSION);
	rc = hl_conf_write(conf, f);
	if (rc == 0 && (fflush(f) != 0 || fsync(fileno(f)) != 0))
		rc = -errno;
	if (fclose(f) != 0 && rc == 0)
		rc = -errno;
	explicit_bzero(iobuf, sizeof(iobuf));
	if (rc) {
		unlink(tmp);
		return daemon_fail(err, errlen, rc, "%s: %s", tmp, strerror(-rc));
	}
	/*
	 * Read what was written with the parser that will read it at the next
	 * start: a value the writer could not keep on its line would otherwise
	 * become keys of its own there (or leave a file that no longer loads).
	 */
	struct hl_conf *back = NULL;
	char why[512];
	rc = hl_conf_load(tmp, &back, why, sizeof(why));
	if (rc == 0 && !hl_conf_same(conf, back))
		rc = -EPROTO;
	hl_conf_free(back);
	if (rc) {
		unlink(tmp);
		return daemon_fail(err, errlen, -EIO,
		                   "saveconfig: what was written does not read back as "
		                   "the running configuration (%s); %s left unchanged",
		                   rc == -EPROTO ? "it reads as a different one" : why, path);
	}
	/* numbered backups: path.N-1 -> path.N ... path -> path.1 (a hard link: path never vanishes) */
	for (int i = SAVECONFIG_BACKUPS - 1; i >= 1; i--) {
		snprintf(from, sizeof(from), "%s.%d", path, i);
		snprintf(to, sizeof(to), "%s.%d", path, i + 1);
		rename(from, to);
	}
	snprintf(to, sizeof(to), "%s.1", path);
	if (link(path, to) < 0 && errno != ENOENT)
		HL_WARN("daemon", "saveconfig: no backup %s: %s", to, strerror(errno));
	if (rename(tmp, path) < 0) {
		rc = -errno;
		unlink(tmp);
		return daemon_fail(err, errlen, rc, "%s: %s", path, strerror(-rc));
	}
	backups_private(path);
	return 0;
}

static int cmd_saveconfig(void *ctx, json_t *args, json_t **result, char *err, size_t errlen)
{
	struct daemon *d = ctx;
	const char *file = ctl_arg_str(args, "file");
	const char *path = file ? file : d->config_path;
	int rc;

	if (!path)
		return daemon_fail(err, errlen, -EINVAL, "no configuration file: give file");
	rc = daemon_save_config(d->conf, path, err, errlen);
	if (rc)
		return rc;
	HL_NOTICE("daemon", "configuration saved to %s", path);
	*result = json_pack("{s:s}", "file", path);
	return 0;
}

bool daemon_reload(struct daemon *d)
{
	struct hl_conf *next;
	char err[1024];
	int rc;

	rc = daemon_conf_file_load(d->config_path, &next, err, sizeof(err));
	if (rc) {
		HL_ERR("daemon", "reload: %s (nothing changed)", err);
		return false;
	}
	snprintf(d->change_by, sizeof(d->change_by), "a reload (SIGHUP)");
	rc = daemon_apply(d, next, false, err, sizeof(err));
	if (rc)
		HL_ERR("daemon", "reload: %s", err);
	else
		HL_NOTICE("daemon", "reloaded %s", d->config_path);
	/* the disks it removed, in the background: READY=1 once they are closed */
	bool later = daemon_closes_start(d, NULL, true, rc, err) == 1;
	hl_secret_wipe_stack(); /* the parser's frames held the file's secrets */
	return later;
}

static int cmd_reload(void *ctx, json_t *args, json_t **result, char *err, size_t errlen)
{
	struct daemon *d = ctx;
	struct hl_conf *next;
	int rc;

	(void)result;
	if (!d->config_path)
		return daemon_fail(err, errlen, -EINVAL, "no configuration file to reload");
	rc = daemon_conf_file_load(d->config_path, &next, err, errlen);
	if (rc)
		return rc;
	change_by_client(d, "a reload", ctl_arg_force(args));
	rc = daemon_apply(d, next, ctl_arg_force(args), err, errlen);
	return change_reply(d, rc, err);
}

static int cmd_version(void *ctx, json_t *args, json_t **result, char *err, size_t errlen)
{
	json_t *backends = json_array();

	(void)ctx, (void)args, (void)err, (void)errlen;
	for (const struct hl_origin_ops *const *b = hl_origin_backends; *b; b++)
		json_array_append_new(backends, json_string((*b)->name));
	*result = json_pack("{s:s, s:o}", "version", PACKAGE_VERSION, "origin_backends", backends);
	return 0;
}

static const struct hl_ctl_command commands[] = {
	{"version", "version and compiled-in origin backends", cmd_version},
	{"ls", "the object tree under path (default /)", cmd_ls},
	{"get", "parameters of the object at path", cmd_get},
	{"set", "change parameters (params object) of the object at path", cmd_set},
	{"create", "create name under path (with params)", cmd_create},
	{"delete", "delete the object at path (force: even if in use)", cmd_delete},
	{"stats", "counters of every disk and cache", cmd_stats},
	{"handover", "hand the shared disk at path to a peer gateway (planned)", cmd_handover},
	{"takeover", "ask the owner of the shared disk at path to hand it here", cmd_takeover},
	{"saveconfig", "write the running configuration to its file (or file)", cmd_saveconfig},
	{"reload", "re-read the configuration file and apply the difference", cmd_reload},
	{NULL, NULL, NULL},
};

int daemon_control_dir_check(const char *path, bool missing_ok)
{
	/*
	 * Whoever may write the socket's folder could put a socket of its own at
	 * the path once ours is bound, and read what hotlunctl sends (secrets).
	 */
	char dir[PATH_MAX], why[PATH_MAX + 128];
	hl_strlcpy(dir, path, sizeof(dir));
	char *slash = strrchr(dir, '/');
	if (slash)
		*(slash == dir ? slash + 1 : slash) = '\0';
	struct stat st;
	if (missing_ok && stat(slash ? dir : ".", &st) < 0 && errno == ENOENT)
		return 0; /* state_dir, made (and checked) at start: checked again before the bind */
	int rc = daemon_dir_check(slash ? dir : ".", why, sizeof(why));
	if (rc)
		HL_ERR("daemon", "control socket %s: %s: another user could take its place; chown "
		                 "and chmod go-w the folder",
		       path, why);
	return rc;
}

int daemon_control_start(struct daemon *d)
{
	int rc = hl_reactor_create(&d->ctl_reactor, "control");
	if (rc)
		return rc;
	rc = daemon_control_dir_check(d->conf->control_socket, false);
	if (rc)
		return rc;
	/* Created here, before the thread runs, so start-up fails loudly on a bad path. */
	rc = hl_ctl_server_create(d->ctl_reactor, d->conf->control_socket, 0600, commands, d, &d->ctl);
	if (rc) {
		HL_ERR("daemon", "control socket %s: %s", d->conf->control_socket, strerror(-rc));
		return rc;
	}
	hl_ctl_server_set_idle_timeout(d->ctl, daemon_control_idle_ms(d->conf));
	return hl_reactor_start(d->ctl_reactor);
}

static void ctl_stop_cb(void *arg)
{
	struct daemon *d = arg;
	hl_ctl_server_destroy(d->ctl);
	d->ctl = NULL;
	hl_reactor_stop(d->ctl_reactor);
}

void daemon_control_stop(struct daemon *d)
{
	if (!d->ctl_reactor)
		return;
	if (hl_reactor_call(d->ctl_reactor, ctl_stop_cb, d) < 0)
		hl_reactor_stop(d->ctl_reactor);
	hl_reactor_join(d->ctl_reactor);
	if (d->ctl) /* the loop had not started: destroy here */
		hl_ctl_server_destroy(d->ctl);
	hl_reactor_destroy(d->ctl_reactor);
	d->ctl_reactor = NULL;
}
