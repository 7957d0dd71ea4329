/*
 * control_edit.c - the control commands' parsing (control_edit.h): paths,
 * request arguments, and the edited copy of the configuration that set,
 * create and delete ask for. Acting on it (checking and applying the copy)
 * is control.c's; the daemon's state is seen only through struct ctl_view.
 */
#include "config.h"

#include "daemon/control_edit.h"

#include "hotlun/scsi.h"
#include "hotlun/util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Write the message into err. @return rc. */
static int edit_fail(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int edit_fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return rc;
}

const char *ctl_arg_str(json_t *args, const char *key)
{
	return json_string_value(json_object_get(args, key));
}

bool ctl_arg_force(json_t *args)
{
	return json_is_true(json_object_get(args, "force"));
}

/* ---- paths ---- */

/* Split a path into at most 8 components; "" and "." are skipped. */
static int split(const char *path, char parts[8][256])
{
	int n = 0;
	const char *p = path;

	while (*p) {
		while (*p == '/')
			p++;
		if (!*p)
			break;
		const char *e = strchr(p, '/');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		if (n == 8 || len >= 256)
			return -EINVAL;
		memcpy(parts[n], p, len);
		parts[n][len] = '\0';
		if (strcmp(parts[n], ".") != 0)
			n++;
		p += len;
	}
	return n;
}

int ctl_parse_path(const struct ctl_view *v, const char *path, struct node *nd, char *err,
                   size_t errlen)
{
	char parts[8][256];
	int n = split(path, parts);

	memset(nd, 0, sizeof(*nd));
	if (n < 0)
		return edit_fail(err, errlen, -EINVAL, "path too long: %.64s", path);
	if (n == 0) {
		nd->kind = N_ROOT;
		return 0;
	}
	if (strcmp(parts[0], "disks") == 0 && n <= 2) {
		nd->kind = n == 1 ? N_DISKS : N_DISK;
		if (n == 2) {
			if (!hl_conf_find_disk(v->conf, parts[1]))
				return edit_fail(err, errlen, -ENOENT, "no disk %s", parts[1]);
			hl_strlcpy(nd->name, parts[1], sizeof(nd->name));
		}
		return 0;
	}
	if (strcmp(parts[0], "caches") == 0 && n <= 2) {
		nd->kind = n == 1 ? N_CACHES : N_CACHE;
		if (n == 2) {
			if (!hl_conf_find_cache(v->conf, parts[1]))
				return edit_fail(err, errlen, -ENOENT, "no cache %s", parts[1]);
			hl_strlcpy(nd->name, parts[1], sizeof(nd->name));
		}
		return 0;
	}
	if (strcmp(parts[0], "sessions") == 0 && n == 1) {
		nd->kind = N_SESSIONS;
		return 0;
	}
	if (strcmp(parts[0], "sessions") == 0 && n == 2) {
		nd->kind = N_SESSION;
		hl_strlcpy(nd->name, parts[1], sizeof(nd->name));
		if (!v->session_exists(v->arg, nd->name))
			return edit_fail(err, errlen, -ENOENT,
			                 "no session %s (ls /sessions lists them)", parts[1]);
		return 0;
	}
	if (strcmp(parts[0], "iscsi") != 0)
		return edit_fail(err, errlen, -ENOENT, "no such path: %.200s", path);
	if (n == 1) {
		nd->kind = N_ISCSI;
		return 0;
	}
	const struct hl_conf_target *t = hl_conf_find_target(v->conf, parts[1]);
	if (!t)
		return edit_fail(err, errlen, -ENOENT, "no target %s", parts[1]);
	hl_strlcpy(nd->name, parts[1], sizeof(nd->name));
	if (n == 2) {
		nd->kind = N_TARGET;
		return 0;
	}
	if (strcmp(parts[2], "tpg1") != 0)
		return edit_fail(err, errlen, -ENOENT, "no such path: %.200s (only tpg1 exists)",
		                 path);
	if (n == 3) {
		nd->kind = N_TPG;
		return 0;
	}
	if (n > 5)
		return edit_fail(err, errlen, -ENOENT, "no such path: %.200s", path);
	if (n == 5)
		hl_strlcpy(nd->leaf, parts[4], sizeof(nd->leaf));
	if (strcmp(parts[3], "luns") == 0) {
		nd->kind = n == 4 ? N_LUNS : N_LUN;
		if (n == 5) {
			uint64_t lun;
			if (strncmp(nd->leaf, "lun", 3) || hl_parse_u64(nd->leaf + 3, &lun))
				return edit_fail(err, errlen, -ENOENT,
				                 "LUNs are named lunN, not %s", nd->leaf);
			char key[32];
			snprintf(key, sizeof(key), "lun.%" PRIu64, lun);
			bool found = false;
			for (size_t i = 0; i < t->n_luns; i++)
				found |= t->luns[i].lun == lun;
			if (!found)
				return edit_fail(err, errlen, -ENOENT, "target %s has no %s",
				                 t->name, nd->leaf);
		}
		return 0;
	}
	if (strcmp(parts[3], "acls") == 0) {
		nd->kind = n == 4 ? N_ACLS : N_ACL;
		if (n == 5) {
			bool found = (strcmp(nd->leaf, "ALL") == 0 && t->allow_all);
			for (size_t i = 0; i < t->n_allow; i++)
				found |= strcmp(t->allow[i], nd->leaf) == 0;
			if (!found)
				return edit_fail(err, errlen, -ENOENT, "target %s has no ACL %s",
				                 t->name, nd->leaf);
		}
		return 0;
	}
	if (strcmp(parts[3], "portals") == 0) {
		nd->kind = n == 4 ? N_PORTALS : N_PORTAL;
		if (n == 5) {
			bool found = false;
			for (size_t i = 0; i < v->conf->n_portals; i++)
				found |= strcmp(v->conf->portals[i], nd->leaf) == 0;
			if (!found)
				return edit_fail(err, errlen, -ENOENT, "no portal %s", nd->leaf);
		}
		return 0;
	}
	return edit_fail(err, errlen, -ENOENT, "no such path: %.200s", path);
}

/*
 * Every path is head, the node's name, tail and its leaf, in that order; a
 * kind says which of the two it has. One row a kind, so a new kind is one
 * line here and one in ctl_parse_path.
 */
static const struct node_spelling {
	const char *head;
	bool name;
	const char *tail;
	bool leaf;
} spelling[] = {
    [N_ROOT] = {"/", false, "", false},
    [N_DISKS] = {"/disks", false, "", false},
    [N_DISK] = {"/disks/", true, "", false},
    [N_CACHES] = {"/caches", false, "", false},
    [N_CACHE] = {"/caches/", true, "", false},
    [N_ISCSI] = {"/iscsi", false, "", false},
    [N_TARGET] = {"/iscsi/", true, "", false},
    [N_TPG] = {"/iscsi/", true, "/tpg1", false},
    [N_LUNS] = {"/iscsi/", true, "/tpg1/luns", false},
    [N_LUN] = {"/iscsi/", true, "/tpg1/luns/", true},
    [N_ACLS] = {"/iscsi/", true, "/tpg1/acls", false},
    [N_ACL] = {"/iscsi/", true, "/tpg1/acls/", true},
    [N_PORTALS] = {"/iscsi/", true, "/tpg1/portals", false},
    [N_PORTAL] = {"/iscsi/", true, "/tpg1/portals/", true},
    [N_SESSIONS] = {"/sessions", false, "", false},
    [N_SESSION] = {"/sessions/", true, "", false},
};
_Static_assert(HL_ARRAY_SIZE(spelling) == N_SESSION + 1, "a spelling for every node kind");

/* Canonical form of a parsed node's path. */
void ctl_node_path(const struct node *nd, char *out, size_t len)
{
	const struct node_spelling *s = &spelling[nd->kind];

	snprintf(out, len, "%s%s%s%s", s->head, s->name ? nd->name : "", s->tail,
	         s->leaf ? nd->leaf : "");
}

/* ---- changes ---- */

/*
 * The start of a create or delete: path resolved into *nd and *next a copy of
 * the running configuration to change (the caller hands it to edit_done).
 */
static int edit_begin(const struct ctl_view *v, const char *path, struct node *nd,
                      struct hl_conf **next, char *err, size_t errlen)
{
	int rc = ctl_parse_path(v, path, nd, err, errlen);

	return rc ? rc : hl_conf_dup(v->conf, next);
}

/* The end of every change: next to *out when rc is 0, else freed. @return rc */
static int edit_done(struct hl_conf *next, int rc, struct hl_conf **out)
{
	if (rc) {
		hl_conf_free(next);
		return rc;
	}
	*out = next;
	return 0;
}

/* A JSON scalar as the config file would spell it. */
static int value_text(json_t *v, char *buf, size_t len)
{
	if (json_is_string(v))
		snprintf(buf, len, "%s", json_string_value(v));
	else if (json_is_integer(v) && json_integer_value(v) >= 0)
		snprintf(buf, len, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
	else if (json_is_boolean(v))
		snprintf(buf, len, "%s", json_is_true(v) ? "yes" : "no");
	else
		return -EINVAL;
	return 0;
}

static enum hl_conf_kind section_of(const struct node *nd, const char **name)
{
	*name = nd->name;
	switch (nd->kind) {
	case N_DISK:
		return HL_CONF_DISK;
	case N_CACHE:
		return HL_CONF_CACHE;
	case N_TARGET:
		return HL_CONF_TARGET;
	default:
		*name = NULL;
		return HL_CONF_GLOBAL;
	}
}

static int set_params(struct hl_conf *next, enum hl_conf_kind kind, const char *name,
                      json_t *params, char *err, size_t errlen)
{
	const char *key;
	json_t *v;

	json_object_foreach(params, key, v)
	{
		char text[1100];
		int rc;
		if (json_is_null(v)) {
			rc = hl_conf_unset(next, kind, name, key, NULL, err, errlen);
		} else {
			if (value_text(v, text, sizeof(text)))
				return edit_fail(
				    err, errlen, -EINVAL,
				    "%s: expected a string, a whole number or a boolean", key);
			rc = hl_conf_set(next, kind, name, key, text, err, errlen);
			explicit_bzero(text, sizeof(text)); /* it may be a secret */
		}
		if (rc)
			return rc;
	}
	return 0;
}

#define SECRET_SHOWN "********" /* how get shows a secret that is set */

/*
 * params without the secrets given back as get shows them: a secret shown as
 * ******** and set to that is kept, so what get printed can be set back
 * without turning every secret into eight asterisks. Where no secret is set,
 * the asterisks are refused rather than taken as one. *out: a new reference.
 */
static int without_masked_secrets(const struct ctl_view *v, const struct node *nd, json_t *params,
                                  json_t **out, char *err, size_t errlen)
{
	json_t *shown = NULL, *val;
	const char *key;
	int rc;

	*out = json_copy(params);
	if (!*out)
		return -ENOMEM;
	json_object_foreach(params, key, val)
	{
		if (!json_is_string(val) || strcmp(json_string_value(val), SECRET_SHOWN) != 0)
			continue;
		if (!shown && (rc = v->shown(v->arg, nd, &shown, err, errlen)) != 0) {
			json_decref(*out);
			return rc;
		}
		const char *now = json_string_value(json_object_get(shown, key));
		if (!now || strcmp(now, SECRET_SHOWN) != 0) {
			json_decref(shown);
			json_decref(*out);
			return edit_fail(err, errlen, -EINVAL,
			                 "%s: %s is how get shows a secret that "
			                 "is set, not a secret",
			                 key, SECRET_SHOWN);
		}
		json_object_del(*out, key);
	}
	json_decref(shown);
	return 0;
}

/* set disk=NAME on .../luns/lunN: the lun.N key of its target (what get there shows). */
static int set_lun(const struct ctl_view *v, const struct node *nd, json_t *params,
                   struct hl_conf **out, char *err, size_t errlen)
{
	const char *key, *disk = NULL;
	char lun_key[300];
	struct hl_conf *next;
	json_t *val;
	int rc;

	json_object_foreach(params, key, val)
	{
		if (strcmp(key, "disk") != 0)
			return edit_fail(err, errlen, -EINVAL,
			                 "a LUN has only disk (the [disk] it serves), "
			                 "not %s",
			                 key);
		if (!json_is_string(val))
			return edit_fail(err, errlen, -EINVAL, "disk: expected a disk name");
		disk = json_string_value(val);
	}
	if (!disk)
		return 0;
	snprintf(lun_key, sizeof(lun_key), "lun.%s", nd->leaf + 3);
	rc = hl_conf_dup(v->conf, &next);
	if (rc)
		return rc;
	rc = hl_conf_unset(next, HL_CONF_TARGET, nd->name, lun_key, NULL, err, errlen);
	if (rc == 0)
		rc = hl_conf_set(next, HL_CONF_TARGET, nd->name, lun_key, disk, err, errlen);
	return edit_done(next, rc, out);
}

int ctl_edit_set(const struct ctl_view *v, json_t *args, struct hl_conf **out, char *err,
                 size_t errlen)
{
	const char *path = ctl_arg_str(args, "path"), *name;
	json_t *params = json_object_get(args, "params");
	struct hl_conf *next = NULL; /* edit_done frees it if the copy failed */
	struct node nd;
	int rc;

	*out = NULL;
	if (!path || !json_is_object(params))
		return edit_fail(err, errlen, -EINVAL,
		                 "set needs path (string) and params (object)");
	rc = ctl_parse_path(v, path, &nd, err, errlen);
	if (rc)
		return rc;
	if (nd.kind == N_LUN)
		return set_lun(v, &nd, params, out, err, errlen);
	if (nd.kind != N_ROOT && nd.kind != N_DISK && nd.kind != N_CACHE && nd.kind != N_TARGET)
		return edit_fail(err, errlen, -EINVAL, "nothing to set on %s", path);
	enum hl_conf_kind kind = section_of(&nd, &name);
	if (json_object_get(params, "portal"))
		return edit_fail(err, errlen, -EINVAL,
		                 "portals are created and deleted under .../tpg1/portals");
	/* what get shows beside the configuration: a clear word instead of "unknown key" */
	static const char *const shown_only[] = {"size_bytes", "blocks", "sessions"};
	for (size_t i = 0; i < HL_ARRAY_SIZE(shown_only); i++) {
		if (json_object_get(params, shown_only[i]))
			return edit_fail(err, errlen, -EINVAL,
			                 "%s is read-only (a run-time value, not a "
			                 "configuration key)",
			                 shown_only[i]);
	}
	json_t *todo = NULL;
	rc = without_masked_secrets(v, &nd, params, &todo, err, errlen);
	if (rc)
		return rc;
	rc = hl_conf_dup(v->conf, &next);
	if (rc == 0)
		rc = set_params(next, kind, name, todo, err, errlen);
	json_decref(todo);
	return edit_done(next, rc, out);
}

static int next_free_lun(const struct hl_conf_target *t)
{
	for (int n = 0; n < HL_SCSI_MAX_LUNS; n++) {
		bool used = false;
		for (size_t i = 0; i < t->n_luns; i++)
			used |= t->luns[i].lun == (uint32_t)n;
		if (!used)
			return n;
	}
	return -1;
}

int ctl_edit_create(const struct ctl_view *v, json_t *args, struct hl_conf **out, char *created,
                    size_t clen, char *err, size_t errlen)
{
	const char *path = ctl_arg_str(args, "path"), *name = ctl_arg_str(args, "name");
	json_t *params = json_object_get(args, "params");
	struct hl_conf *next;
	struct node nd;
	int rc;

	*out = NULL;
	if (!path || !name)
		return edit_fail(err, errlen, -EINVAL, "create needs path and name (strings)");
	if (params && !json_is_object(params))
		return edit_fail(err, errlen, -EINVAL, "params: expected an object");
	rc = edit_begin(v, path, &nd, &next, err, errlen);
	if (rc)
		return rc;

	created[0] = '\0';
	switch (nd.kind) {
	case N_DISKS:
	case N_CACHES:
	case N_ISCSI: {
		enum hl_conf_kind kind = nd.kind == N_DISKS    ? HL_CONF_DISK
		                         : nd.kind == N_CACHES ? HL_CONF_CACHE
		                                               : HL_CONF_TARGET;
		rc = hl_conf_section_add(next, kind, name, err, errlen);
		if (!rc && params)
			rc = set_params(next, kind, name, params, err, errlen);
		if (kind == HL_CONF_TARGET &&
		    !rc) /* like targetcli: the portal group comes with it */
			snprintf(created, clen, "/iscsi/%s", name);
		else
			snprintf(created, clen, "%s/%s",
			         kind == HL_CONF_DISK ? "/disks" : "/caches", name);
		break;
	}
	case N_LUNS: {
		/* name: "/disks/NAME" or "NAME"; params.lun picks the number */
		const char *disk = strncmp(name, "/disks/", 7) == 0 ? name + 7 : name;
		const struct hl_conf_target *t = hl_conf_find_target(next, nd.name);
		json_t *jl = params ? json_object_get(params, "lun") : NULL;
		uint64_t given = UINT64_MAX;
		int lun = next_free_lun(t);
		if (jl) {
			/* a number, or a string of digits as hotlunctl's lun=N sends it */
			if (json_is_integer(jl) && json_integer_value(jl) >= 0)
				given = (uint64_t)json_integer_value(jl);
			else if (json_is_string(jl) && hl_parse_u64(json_string_value(jl), &given))
				given = UINT64_MAX;
			lun = given < HL_SCSI_MAX_LUNS ? (int)given : -1;
		}
		if (lun < 0 || lun >= HL_SCSI_MAX_LUNS) {
			rc = edit_fail(err, errlen, -EINVAL, "lun: expected 0..%d",
			               HL_SCSI_MAX_LUNS - 1);
			break;
		}
		char key[32];
		snprintf(key, sizeof(key), "lun.%d", lun);
		rc = hl_conf_set(next, HL_CONF_TARGET, nd.name, key, disk, err, errlen);
		snprintf(created, clen, "/iscsi/%s/tpg1/luns/lun%d", nd.name, lun);
		break;
	}
	case N_ACLS:
		rc = hl_conf_set(next, HL_CONF_TARGET, nd.name, "allow", name, err, errlen);
		snprintf(created, clen, "/iscsi/%s/tpg1/acls/%s", nd.name, name);
		break;
	case N_PORTALS:
		rc = hl_conf_set(next, HL_CONF_GLOBAL, NULL, "portal", name, err, errlen);
		snprintf(created, clen, "/iscsi/%s/tpg1/portals/%s", nd.name, name);
		break;
	default:
		rc = edit_fail(err, errlen, -EINVAL, "nothing can be created under %s", path);
	}
	return edit_done(next, rc, out);
}

int ctl_edit_delete(const struct ctl_view *v, json_t *args, struct hl_conf **out, char *err,
                    size_t errlen)
{
	const char *path = ctl_arg_str(args, "path"), *name;
	struct hl_conf *next;
	struct node nd;
	int rc;

	*out = NULL;
	if (!path)
		return edit_fail(err, errlen, -EINVAL, "delete needs path (string)");
	rc = edit_begin(v, path, &nd, &next, err, errlen);
	if (rc)
		return rc;
	switch (nd.kind) {
	case N_DISK:
	case N_CACHE:
	case N_TARGET: {
		enum hl_conf_kind kind = section_of(&nd, &name);
		if (kind == HL_CONF_TARGET && !ctl_arg_force(args) &&
		    v->target_sessions(v->arg, name)) {
			rc = edit_fail(err, errlen, -EBUSY,
			               "target %s has %u session(s); add force to close them", name,
			               v->target_sessions(v->arg, name));
			break;
		}
		rc = hl_conf_section_remove(next, kind, name, err, errlen);
		break;
	}
	case N_LUN: {
		char key[300];
		snprintf(key, sizeof(key), "lun.%s", nd.leaf + 3);
		rc = hl_conf_unset(next, HL_CONF_TARGET, nd.name, key, NULL, err, errlen);
		break;
	}
	case N_ACL:
		rc = hl_conf_unset(next, HL_CONF_TARGET, nd.name, "allow", nd.leaf, err, errlen);
		break;
	case N_PORTAL:
		rc = hl_conf_unset(next, HL_CONF_GLOBAL, NULL, "portal", nd.leaf, err, errlen);
		break;
	default:
		rc = edit_fail(err, errlen, -EINVAL, "%s cannot be deleted", path);
	}
	return edit_done(next, rc, out);
}
