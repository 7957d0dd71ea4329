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
	/**
	 * Accept TARGET WARM RESET and TARGET COLD RESET task management
	 * requests. They reach every initiator of the target (a cold reset
	 * closes their sessions), so by default they are refused with "function
	 * authorization failed" (RFC 7143 11.6.1, response 6). Read when the
	 * request arrives: a change applies to sessions already logged in.
	 */
	bool allow_target_reset;
};

/**
 * Caps on what initiators hold ([global] keys of hotlun.conf(5)); 0 takes
 * the default, derived from the open-file limit (hl_iscsi_server_limits
 * says what applies). A "source" is an IPv4 address or an IPv6 /64.
 */
struct hl_iscsi_login_limits {
	unsigned max_pending_logins;          /* per portal, connections that have not logged in */
	unsigned max_pending_logins_per_addr; /* ... per source */
	unsigned max_sessions;                /* logged-in sessions, normal and discovery */
	unsigned max_sessions_per_addr;       /* ... per source */
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
	/** Caps on connections and sessions (0: each derived from the open-file limit). */
	struct hl_iscsi_login_limits limits;
	/**
	 * This gateway's id when several gateways serve the same disks
	 * ([global] gateway, 1..255), 0: a lone gateway. It names the SCSI
	 * target ports of every session (hl_scsi_port_ids: target port group =
	 * gateway, relative target port id = (gateway << 8) | (TPGT & 0xff);
	 * with 0 both are the TPGT). @return of hl_iscsi_server_create: -EINVAL
	 * above 255.
	 */
	unsigned gateway;
	/** Connections send through an io_uring per reactor (hotlun.conf(5) send_uring). */
	bool send_uring;
};

/* Write buffer budget bounds ([global] write_buffer_limit, hotlun.conf(5)). */
#define HL_ISCSI_WRITE_LIMIT_MIN         (32ull << 20) /* twice the largest transfer */
#define HL_ISCSI_WRITE_LIMIT_DEFAULT_MIN (256ull << 20)
#define HL_ISCSI_WRITE_LIMIT_DEFAULT_MAX (8ull << 30)

/*
 * Defaults of hl_iscsi_login_limits (hotlun.conf(5)), from the room for
 * connections: the open-file limit less the descriptors kept for the
 * daemon's own files (hl_iscsi_fd_reserve) and, once
 * hl_iscsi_server_check_room ran at start, less those the daemon held then
 * (disks, caches, portals): pending logins a quarter of it per portal
 * within [16, 1024], 64 per source; sessions half of it (at least 16), an
 * eighth of them per source within [16, 1024]; discovery sessions at most
 * an eighth of max_sessions in all.
 */
#define HL_ISCSI_MAX_PENDING_LOGINS          1024
#define HL_ISCSI_MAX_PENDING_LOGINS_PER_ADDR 64
/* An idle discovery session (no PDU but NOP-Outs) is asked to log out, then closed. */
#define HL_ISCSI_DISCOVERY_IDLE_S 10

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
 * Replace the caps (0: the default). Any thread; connections and sessions
 * already there stay, new ones are checked against the new values.
 */
void hl_iscsi_server_set_login_limits(struct hl_iscsi_server *srv,
                                      const struct hl_iscsi_login_limits *lim);

/** What applies now: the caps (defaults filled in) and the descriptors. */
struct hl_iscsi_limits {
	struct hl_iscsi_login_limits caps; /* none 0 */
	unsigned max_discovery_sessions;   /* an eighth of caps.max_sessions (at least 4) */
	unsigned fd_limit;                 /* the soft open-file limit */
	unsigned fd_reserve;               /* hl_iscsi_fd_reserve(fd_limit) */
};

/** Any thread. */
void hl_iscsi_server_limits(struct hl_iscsi_server *srv, struct hl_iscsi_limits *out);

/**
 * Descriptors kept for the daemon's own files under an open-file limit:
 * portals stop accepting connections when fewer than this many are free,
 * so the control socket, saveconfig, cache maps and origin reconnects
 * still get one. max(64, limit / 16), at most half the limit.
 */
unsigned hl_iscsi_fd_reserve(unsigned fd_limit);

/**
 * Count the descriptors open now and log the room left for connections
 * (limit less those and the reserve), from which the default caps are
 * derived from now on; a warning when the caps allow more connections than
 * that. Any thread; at start, once the disks, caches and portals are open.
 */
void hl_iscsi_server_check_room(struct hl_iscsi_server *srv);

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
 * Replace a target's settings (alias, ACL, CHAP, LUN map pointer,
 * allow_target_reset). New logins see them at once; open sessions keep what
 * they logged in with, except allow_target_reset, which applies at once.
 * @return 0, -ENOENT, -ENOMEM.
 */
int hl_iscsi_target_update(struct hl_iscsi_server *srv, const struct hl_iscsi_target_config *cfg);

/**
 * Remove a target from discovery and logins. With sessions open: -EBUSY
 * unless force, which closes them. @return 0, -ENOENT, -EBUSY.
 */
int hl_iscsi_target_remove(struct hl_iscsi_server *srv, const char *name, bool force);

/**
 * The LUN map of target `name` changed (the caller already stored the new
 * inventory in it): every session of the target gets REPORTED LUNS DATA HAS
 * CHANGED on its next command (hl_scsi_luns_changed). Any thread.
 * @return the number of sessions told.
 */
unsigned hl_iscsi_target_luns_changed(struct hl_iscsi_server *srv, const char *name);

/** Normal sessions currently logged in to target `name`. */
unsigned hl_iscsi_target_sessions(struct hl_iscsi_server *srv, const char *name);

/** Stop listening on a portal given as in hl_iscsi_portal_add. @return 0, -ENOENT, -EINVAL. */
int hl_iscsi_portal_remove(struct hl_iscsi_server *srv, const char *portal);

/** What login negotiated for a session and its connection (RFC 7143 section 13). */
struct hl_iscsi_negotiated {
	bool header_digest, data_digest;  /* CRC32C, else None */
	uint32_t max_recv_dsl_initiator;  /* MaxRecvDataSegmentLength the initiator declared */
	uint32_t max_recv_dsl_target;     /* ... and the one hotlund declared */
	uint32_t max_connections;
	bool initial_r2t, immediate_data;
	uint32_t max_burst_length, first_burst_length;
	uint32_t default_time2wait, default_time2retain;
	uint32_t max_outstanding_r2t;
	bool data_pdu_in_order, data_sequence_in_order;
	uint32_t error_recovery_level;
};

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
	uint16_t cid;      /* of its one connection (MaxConnections is 1) */
	struct hl_iscsi_negotiated neg; /* as login left them */
};

/**
 * Call fn for every normal session (under the server's lock: fn must not
 * call back into the server). @return the number of sessions.
 */
int hl_iscsi_sessions_list(struct hl_iscsi_server *srv,
			   void (*fn)(void *arg, const struct hl_iscsi_session_info *info), void *arg);

/**
 * Before a planned stop (a restart, an upgrade): stop accepting connections,
 * ask every initiator to log out and come back (Async Message event 1, "target
 * requests logout", within timeout_s), and wait up to timeout_s for the
 * sessions to end. A session's Logout Response waits for the commands it
 * still has executing and tells the initiator to wait time2wait_s before it
 * logs in again. keep_listening: the listening sockets stay open (the next
 * process inherits them: reconnects wait in their backlog), else they are
 * shut down (reconnects are refused at once). Main thread. @return the
 * sessions still open at the end.
 */
unsigned hl_iscsi_server_drain(struct hl_iscsi_server *srv, unsigned timeout_s,
                               unsigned time2wait_s, bool keep_listening);

/**
 * Listening sockets the previous process handed over (systemd's fd store,
 * LISTEN_FDS): a later hl_iscsi_portal_add for the same address uses one
 * instead of binding a new socket. The server takes the fds (closes those
 * that are not listening sockets). Main thread, before the portals are added.
 */
void hl_iscsi_server_inherit(struct hl_iscsi_server *srv, const int *fds, unsigned n);

/** Close the handed-over sockets no portal took. Main thread, after the portals. */
void hl_iscsi_server_inherit_done(struct hl_iscsi_server *srv);

/** The portals' listening sockets (to hand over to the next process). @return how many. */
unsigned hl_iscsi_server_listen_fds(struct hl_iscsi_server *srv, int *fds, unsigned max);

/** Login authentication counters since the server started. */
struct hl_iscsi_auth_stats {
	uint64_t chap_failures;  /* wrong CHAP responses */
	uint64_t chap_throttled; /* CHAP responses refused unchecked during a back-off */
};

/** Read the authentication counters. Any thread. */
void hl_iscsi_auth_stats_get(struct hl_iscsi_server *srv, struct hl_iscsi_auth_stats *out);

/** Connections, logins and what the admission limits refused (docs/security.md). */
struct hl_iscsi_conn_stats {
	uint64_t logins;           /* sessions established since start (normal and discovery) */
	uint64_t login_failures;   /* logins answered with a failure status since start */
	uint64_t connections;      /* accepted connections open now */
	uint64_t pending;          /* of those, still in login (all portals) */
	uint64_t sessions;         /* sessions now */
	uint64_t evicted;          /* silent pending logins closed to make room, since start */
	uint64_t refused_pending;  /* connections closed at accept by a pending-login cap */
	uint64_t refused_sessions; /* logins refused at a session cap (0x0302) */
	uint64_t fd_pauses;        /* times a portal stopped accepting for want of descriptors */
	uint64_t fd_limit;         /* the open-file limit (soft), as last read */
};

/** Read the connection and login counters. Any thread. */
void hl_iscsi_conn_stats(struct hl_iscsi_server *srv, struct hl_iscsi_conn_stats *out);

/**
 * Bytes of WRITE data that unfinished commands of all connections may hold
 * together; 0 = 1/8 of physical memory within [256 MiB, 8 GiB]; values
 * below HL_ISCSI_WRITE_LIMIT_MIN are raised to it. One connection may hold
 * a quarter of it (at least one largest transfer, at most 256 MiB). Any
 * thread; commands already admitted keep what they hold.
 */
void hl_iscsi_server_set_write_limit(struct hl_iscsi_server *srv, uint64_t bytes);

/** Do connections accepted from now on send through io_uring? Any thread. */
void hl_iscsi_server_set_send_uring(struct hl_iscsi_server *srv, bool on);

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
	uint64_t source_limit;  /* bytes one source (address, IPv6 /64) may claim; less when
	                         * others want some: 1/N of the limit, at least 16 MiB */
	uint64_t sources;       /* sources whose WRITEs claim budget now */
	uint64_t source_capped; /* WRITEs refused because their source had its share, since
	                         * start (counted in task_set_full too) */
	uint64_t closed_slow;   /* connections closed: a WRITE's data not in by its deadline
	                         * (30 s + its size at 256 KiB/s), since start */
	uint64_t closed_silent; /* connections closed: no data for a WRITE for 30 s, since start */
};

/** Any thread. */
void hl_iscsi_write_stats(struct hl_iscsi_server *srv, struct hl_iscsi_write_stats *out);

/** Close portals, end every session (waiting for in-flight commands), free. Main thread. */
void hl_iscsi_server_destroy(struct hl_iscsi_server *srv);

/**
 * The server's hl_scsi_aborter (hotlun/scsi.h; arg: the server): abort the
 * tasks of the I_T nexuses ids[0..n) on lu in every session, without
 * responses (TAS = 0), and call done(done_arg) on a reactor once they have
 * left the scsi layer. A PREEMPT AND ABORT made through another gateway
 * preempted them. Any thread. @return 0, -ESHUTDOWN (the server stops) or
 * -ENOMEM (done is then never called). Unset it before
 * hl_iscsi_server_destroy.
 */
int hl_iscsi_abort_nexuses(void *srv, struct hl_lu *lu, const uint64_t *ids, unsigned n,
                           void (*done)(void *done_arg), void *done_arg);

#endif
