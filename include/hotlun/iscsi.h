/*
 * iscsi.h - the iSCSI target server (RFC 7143, ERL 0): portals, login and
 * negotiation, CHAP, discovery, sessions, connections, full-feature phase.
 *
 * The daemon creates one server over its reactors, adds targets, then opens
 * portals. Each accepted connection is handed to one reactor (round robin)
 * and stays there; all connections of a session live on the reactor of its
 * leading connection.
 */
#ifndef HOTLUN_ISCSI_H
#define HOTLUN_ISCSI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hotlun/scsi.h"

struct hl_reactor;
struct hl_iscsi_server;

#define HL_ISCSI_DEFAULT_PORT 3260
#define HL_ISCSI_NAME_MAX     223 /* RFC 7143 iSCSI name limit, bytes */

/** CHAP credentials: a user and a secret, both NUL-terminated; empty user = none. */
struct hl_iscsi_chap {
	char user[256];
	char secret[256];
};

/** One target as configured. Copied by hl_iscsi_target_add (strings and arrays). */
struct hl_iscsi_target_config {
	const char *name;                  /* iqn./eui./naa. name */
	const char *alias;                 /* TargetAlias, optional */
	const struct hl_scsi_lun_map *luns;/* LUs stay owned by the caller; must outlive the server */
	bool allow_all;                    /* ACL: any initiator */
	const char *const *allow;          /* ACL: initiator names (when !allow_all) */
	size_t n_allow;
	struct hl_iscsi_chap chap;         /* one-way CHAP (target authenticates initiator) */
	struct hl_iscsi_chap mutual;       /* mutual CHAP (initiator authenticates target) */
};

/** Server-wide options. */
struct hl_iscsi_server_config {
	struct hl_reactor **reactors;  /* caller keeps; connections are spread over them */
	unsigned n_reactors;
	uint32_t nop_interval_s;       /* target NOP-In ping interval, 0 = off */
	uint32_t nop_timeout_s;        /* drop the connection when a ping is unanswered */
	/** Discovery CHAP; empty = discovery without authentication. */
	struct hl_iscsi_chap discovery_chap;
	/** Connections that have not finished login, per portal and per source address (0: default). */
	unsigned max_pending_logins;
	unsigned max_pending_logins_per_addr;
};

/* Defaults of hl_iscsi_server_config.max_pending_logins{,_per_addr}; see hotlun.conf(5). */
#define HL_ISCSI_MAX_PENDING_LOGINS          1024
#define HL_ISCSI_MAX_PENDING_LOGINS_PER_ADDR 64

/** @return 0 or -errno. */
int hl_iscsi_server_create(const struct hl_iscsi_server_config *cfg, struct hl_iscsi_server **out);

/**
 * Replace the discovery CHAP credentials (empty user: no authentication).
 * Any thread; applies to discovery logins that start afterwards, a login
 * under way keeps the credentials it started with.
 */
void hl_iscsi_server_set_discovery_chap(struct hl_iscsi_server *srv,
                                        const struct hl_iscsi_chap *chap);

/**
 * Replace the pending-login caps (0: the default). Any thread; connections
 * already accepted stay, new ones are checked against the new values.
 */
void hl_iscsi_server_set_login_limits(struct hl_iscsi_server *srv, unsigned max_pending,
                                      unsigned max_pending_per_addr);

/** Add a target before or after portals open. @return 0, -EEXIST, -EINVAL, -ENOMEM. */
int hl_iscsi_target_add(struct hl_iscsi_server *srv, const struct hl_iscsi_target_config *cfg);

/**
 * Listen on a portal "127.0.0.1:3260", "[::1]:3260", "0.0.0.0:3260"; port 0
 * picks a free port. `tpgt` is the portal group tag (1 by default).
 * @param bound  optional: receives the bound address as "host:port".
 * @return 0 or -errno (-EADDRINUSE, -EINVAL for a malformed portal).
 */
int hl_iscsi_portal_add(struct hl_iscsi_server *srv, const char *portal, uint16_t tpgt,
			char *bound, size_t bound_len);

/* ---- changes at run time (control socket, reload) ---- */

/**
 * Replace a target's settings (alias, ACL, CHAP, LUN map pointer). New logins
 * see them at once; open sessions keep what they logged in with.
 * @return 0, -ENOENT, -ENOMEM.
 */
int hl_iscsi_target_update(struct hl_iscsi_server *srv, const struct hl_iscsi_target_config *cfg);

/**
 * Remove a target from discovery and logins. With sessions open: -EBUSY
 * unless force, which closes them. @return 0, -ENOENT, -EBUSY.
 */
int hl_iscsi_target_remove(struct hl_iscsi_server *srv, const char *name, bool force);

/** Normal sessions currently logged in to target `name`. */
unsigned hl_iscsi_target_sessions(struct hl_iscsi_server *srv, const char *name);

/** Stop listening on a portal given as in hl_iscsi_portal_add. @return 0, -ENOENT, -EINVAL. */
int hl_iscsi_portal_remove(struct hl_iscsi_server *srv, const char *portal);

/** What the control socket shows of a session. */
struct hl_iscsi_session_info {
	char initiator[HL_ISCSI_NAME_MAX + 1];
	char target[HL_ISCSI_NAME_MAX + 1];
	char isid[13];
	uint16_t tsih;
	uint16_t tpgt;
	uint64_t nexus_id;
	char portal[64];   /* local address:port the session logged in through */
	char peer[64];     /* initiator's address:port */
	int64_t since;     /* login time, seconds since the epoch */
};

/**
 * Call fn for every normal session (under the server's lock: fn must not
 * call back into the server). @return the number of sessions.
 */
int hl_iscsi_sessions_list(struct hl_iscsi_server *srv,
			   void (*fn)(void *arg, const struct hl_iscsi_session_info *info), void *arg);

/** Close portals, end every session (waiting for in-flight commands), free. Main thread. */
void hl_iscsi_server_destroy(struct hl_iscsi_server *srv);

#endif
