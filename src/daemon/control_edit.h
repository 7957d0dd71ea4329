/*
 * control_edit.h - the control commands' parsing, apart from their acting
 * (control_edit.c): a request's path resolved against the running
 * configuration, and the edited copy of that configuration a set, create
 * or delete asks for. No daemon state is touched here: what parsing needs
 * of the running daemon comes through struct ctl_view, and applying the
 * copy is the caller's (control.c: hl_conf_check, daemon_apply). Fuzzed by
 * tests/fuzz/fuzz_ctl.c.
 */
#ifndef HOTLUN_DAEMON_CONTROL_EDIT_H
#define HOTLUN_DAEMON_CONTROL_EDIT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "hotlun/conf.h"

/* What a path names (docs/control.md, the object tree). */
enum node_kind {
	N_ROOT,
	N_DISKS,
	N_DISK,
	N_CACHES,
	N_CACHE,
	N_ISCSI,
	N_TARGET,
	N_TPG,
	N_LUNS,
	N_LUN,
	N_ACLS,
	N_ACL,
	N_PORTALS,
	N_PORTAL,
	N_SESSIONS,
	N_SESSION,
};

struct node {
	enum node_kind kind;
	char name[256]; /* disk/cache/target name */
	char leaf[256]; /* lunN, acl name, portal */
};

/* What parsing may look at besides the configuration. */
struct ctl_view {
	const struct hl_conf *conf;
	/* /sessions/<tsih>: does the session exist? */
	bool (*session_exists)(void *arg, const char *tsih);
	/* sessions of a target (delete without force refuses a busy one) */
	unsigned (*target_sessions)(void *arg, const char *target);
	/* the parameters get shows for nd (secrets as ********): a new reference */
	int (*shown)(void *arg, const struct node *nd, json_t **out, char *err, size_t errlen);
	void *arg;
};

/* args' string member key, or NULL. */
const char *ctl_arg_str(json_t *args, const char *key);
/* Is args' "force" true? */
bool ctl_arg_force(json_t *args);

/* Resolve path into *nd. @return 0, -EINVAL (too long) or -ENOENT, with a message in err. */
int ctl_parse_path(const struct ctl_view *v, const char *path, struct node *nd, char *err,
                   size_t errlen);
/* The canonical spelling of nd's path. */
void ctl_node_path(const struct node *nd, char *out, size_t len);

/*
 * The configuration a set / create / delete request asks for: *next a
 * checked-nothing-yet copy of v->conf with the change (the caller checks
 * and applies it, or frees it), or NULL with 0 when there is nothing to
 * change. create names what it made in created. @return 0 or -errno with
 * a message in err.
 */
int ctl_edit_set(const struct ctl_view *v, json_t *args, struct hl_conf **next, char *err,
                 size_t errlen);
int ctl_edit_create(const struct ctl_view *v, json_t *args, struct hl_conf **next, char *created,
                    size_t clen, char *err, size_t errlen);
int ctl_edit_delete(const struct ctl_view *v, json_t *args, struct hl_conf **next, char *err,
                    size_t errlen);

#endif
