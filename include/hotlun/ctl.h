/*
 * ctl.h - the control socket: a Unix stream socket where each request and
 * each reply is one line of JSON. Used by hotlunctl, hotlun-snmp and tests.
 *
 *   request:  {"cmd": "stats", "args": {...}}          ("args" optional)
 *   reply:    {"ok": true, "result": ...}
 *             {"ok": false, "error": "what was wrong"}
 *
 * Every request is validated; a bad one gets an error reply and the
 * connection stays usable, except a line over HL_CTL_MAX_REQUEST bytes,
 * which gets an error reply and then the connection is closed (its framing
 * can no longer be trusted). Handlers run on the control reactor's thread,
 * one request at a time; one may defer its reply (hl_ctl_defer) to work
 * off that thread, which serves the other clients meanwhile.
 *
 * A request waits for its turn while another runs. One whose client has
 * closed its connection meanwhile is not run. A request may carry
 * "deadline" (ms since 1970, wall clock): when its turn comes after it, or
 * after its client shut down its sending side (gave up), it is not run and
 * gets {"ok": false, "error": "timed out before it ran; nothing was
 * changed (...)"}; otherwise the reply is preceded by {"started": true},
 * sent just before it runs (hl_ctl_call_timed).
 */
#ifndef HOTLUN_CTL_H
#define HOTLUN_CTL_H

#include <jansson.h>
#include <stddef.h>
#include <sys/types.h>

struct hl_reactor;
struct hl_ctl_server;

#define HL_CTL_MAX_REQUEST (256 * 1024)

/*
 * Connections a server holds at once; one more gets {"ok": false, "error":
 * "too many control connections ..."} and is closed. Each holds a
 * descriptor and up to HL_CTL_MAX_REQUEST of buffer.
 */
#define HL_CTL_MAX_CLIENTS 64

/**
 * A command handler. `args` is the request's "args" object (never NULL: an
 * empty object when absent; borrowed). On success set *result (a new
 * reference, or NULL for no result) and return 0; on failure write a message
 * into err and return -errno (-EINVAL for bad arguments, -ENOENT for an
 * unknown object, ...).
 */
typedef int (*hl_ctl_fn)(void *ctx, json_t *args, json_t **result, char *err, size_t errlen);

struct hl_ctl_command {
	const char *name;
	const char *help;   /* one line, listed by the built-in "help" command */
	hl_ctl_fn fn;
};

/**
 * Whether a server answers on `path`: 1 when a connect succeeds (a live
 * server), 0 when nothing is there or only a stale socket file is,
 * -EEXIST when path is not a socket, other -errno when it cannot be told.
 */
int hl_ctl_socket_in_use(const char *path);

/*
 * A connection with no complete request for this long is closed (after an
 * error line saying so), so that connections a script leaked do not keep
 * the HL_CTL_MAX_CLIENTS places until a restart. A request the daemon
 * still runs (a deferred reply) is not idle time.
 */
#define HL_CTL_IDLE_TIMEOUT_MS 60000

/**
 * Listen on `path` with permissions `mode`, serving the NULL-terminated
 * table `cmds` (caller keeps) with `ctx`. A stale socket file there is
 * replaced; a live one (hl_ctl_socket_in_use) is -EADDRINUSE and is left
 * alone; anything else there is -EEXIST. Only root and the server's own
 * user are served, whatever `mode` lets connect (SO_PEERCRED): any other
 * gets an error line and is closed. @return 0 or -errno.
 */
int hl_ctl_server_create(struct hl_reactor *r, const char *path, mode_t mode,
			 const struct hl_ctl_command *cmds, void *ctx, struct hl_ctl_server **out);

/**
 * Change the idle timeout of srv's connections (ms, 0: never; default
 * HL_CTL_IDLE_TIMEOUT_MS). Open connections take it at their next request.
 * Control reactor thread only.
 */
void hl_ctl_server_set_idle_timeout(struct hl_ctl_server *srv, unsigned ms);

/**
 * Who sent the request whose handler runs now ("pid N uid N", from the
 * socket's peer credentials), for logs; NULL outside a handler. Control
 * reactor thread only.
 */
const char *hl_ctl_caller(const struct hl_ctl_server *srv);

/** A handler's return for "the reply comes later" (hl_ctl_defer). */
#define HL_CTL_DEFERRED 1

/** A reply a handler deferred (hl_ctl_defer), answered by hl_ctl_reply_later. */
struct hl_ctl_later;

/**
 * Inside a handler: its reply will be sent later, by hl_ctl_reply_later
 * (the handler then returns HL_CTL_DEFERRED). Meanwhile the control
 * reactor serves the other clients; this client's further requests wait
 * (its replies keep the order of its requests). @return the handle, or
 * NULL (out of memory, not in a handler): then answer now.
 */
struct hl_ctl_later *hl_ctl_defer(struct hl_ctl_server *srv);

/**
 * Send a deferred reply: rc, result (stolen) and err as a handler's return
 * would give them. Frees the handle; a client that closed meanwhile gets
 * nothing. Control reactor thread only (or any thread once the server is
 * destroyed: then it only frees the handle).
 */
void hl_ctl_reply_later(struct hl_ctl_later *l, int rc, json_t *result, const char *err);

/**
 * Close every client and the listening socket, and unlink the path if it is
 * still the socket this server bound (same device and inode). Call on r's
 * thread or after r stopped.
 */
void hl_ctl_server_destroy(struct hl_ctl_server *srv);

/**
 * Client side (hotlunctl, hotlun-snmp, tests): connect, send one request,
 * read one reply. @return 0 with *reply (new reference) or -errno; a
 * failed command is still 0 with {"ok": false, ...} in *reply. -ENOTCONN:
 * the server had closed the connection before (idle, HL_CTL_IDLE_TIMEOUT_MS)
 * and nothing was sent: connect again and send it there.
 */
/* hl_ctl_connect: -EPERM when the server runs as neither root nor our user. */
int hl_ctl_connect(const char *path);
int hl_ctl_call(int fd, const char *cmd, json_t *args, json_t **reply);

/**
 * Client side: the control socket the hotlund configuration file at path
 * names ([global] control_socket, or its default under state_dir), for a
 * client that was given no socket. A file this user cannot read (none
 * there, no permission: a host or a user without the daemon's config) is
 * no answer and no error: NULL with err "". A file that reads but does not
 * load is NULL with the reason in err: the caller falls back to its
 * default socket and should say why, since that may not be the daemon the
 * file describes. @return a string the caller frees, or NULL.
 */
char *hl_ctl_socket_from_config(const char *path, char *err, size_t errlen);

/**
 * hl_ctl_call that waits at most timeout_ms for the request to start (0: no
 * limit, as hl_ctl_call). The request carries a deadline timeout_ms ahead;
 * when it has not started by then, the client shuts down its sending side
 * and the server will not run it. `args`: caller keeps.
 * @return 0 with *reply (new reference); -ETIMEDOUT: it did not start and
 * will not run (close fd: it is shut for sending); -EINPROGRESS: it started
 * but had not finished after timeout_ms: hl_ctl_wait_reply() reads its
 * reply (it may have been refused at the last moment, as not run); other
 * -errno: the connection failed.
 */
int hl_ctl_call_timed(int fd, const char *cmd, json_t *args, unsigned timeout_ms, json_t **reply);

/**
 * The reply of a request hl_ctl_call_timed left running (-EINPROGRESS):
 * waits at most timeout_ms (-1: no limit). @return 0 with *reply, -ETIMEDOUT
 * (call again), or another -errno.
 */
int hl_ctl_wait_reply(int fd, int timeout_ms, json_t **reply);

/**
 * Make jansson wipe each block before it frees it: requests and replies
 * may hold secrets (set chap_secret=...) and a freed block keeps its bytes
 * (in a core, in the heap) until reused. Process-wide; call once at start,
 * before any JSON value exists (hotlund, hotlunctl).
 */
void hl_ctl_json_wipe(void);

#endif
