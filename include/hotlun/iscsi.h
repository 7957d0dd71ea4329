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
	/** Write buffer budget in bytes, 0 = the default (see hl_iscsi_server_set_write_limit). */
	uint64_t write_buffer_limit;
};

/* Write buffer budget bounds ([global] write_buffer_limit, hotlun.conf(5)). */
#define HL_ISCSI_WRITE_LIMIT_MIN         (32ull << 20) /* twice the largest transfer */
#define HL_ISCSI_WRITE_LIMIT_DEFAULT_MIN (256ull << 20)
#define HL_ISCSI_WRITE_LIMIT_DEFAULT_MAX (8ull << 30)

/** @return 0 or -errno. */
int hl_iscsi_server_create(const struct hl_iscsi_server_config *cfg, struct hl_iscsi_server **out);

/**
 * Replace the discovery CHAP credentials (empty user: no authentication).
 * Any thread; applies to discovery logins that start afterwards, a login
 * under way keeps the credentials it started with.
 */
void hl_iscsi_server_set_discovery_chap(struct hl_iscsi_server *srv,
                                        const struct hl_iscsi_chap *chap);

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

/**
 * Bytes of WRITE data that unfinished commands of all connections may hold
 * together; 0 = 1/8 of physical memory within [256 MiB, 8 GiB]; values
 * below HL_ISCSI_WRITE_LIMIT_MIN are raised to it. One connection may hold
 * a quarter of it (at least one largest transfer, at most 256 MiB). Any
 * thread; commands already admitted keep what they hold.
 */
void hl_iscsi_server_set_write_limit(struct hl_iscsi_server *srv, uint64_t bytes);

/** What the write buffer budget shows (control socket stats). */
struct hl_iscsi_write_stats {
	uint64_t limit;         /* bytes */
	uint64_t conn_limit;    /* bytes one connection may claim */
	uint64_t held;          /* bytes charged by unfinished WRITEs now */
	uint64_t peak;          /* highest held since start */
	uint64_t waiting;       /* WRITEs whose R2Ts wait for budget now */
	uint64_t waiting_bytes; /* bytes those hold (their unsolicited data) */
	uint64_t r2t_deferred;  /* WRITEs that had to wait, since start */
	uint64_t task_set_full; /* WRITEs answered TASK SET FULL, since start */
	uint64_t window_closed; /* responses whose MaxCmdSN was held back, since start */
};

/** Any thread. */
void hl_iscsi_write_stats(struct hl_iscsi_server *srv, struct hl_iscsi_write_stats *out);

/** Close portals, end every session (waiting for in-flight commands), free. Main thread. */
void hl_iscsi_server_destroy(struct hl_iscsi_server *srv);

#endif
