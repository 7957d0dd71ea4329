/*
 * ctl.c - the control socket server and client: line framing, JSON
 * validation, dispatch through the caller's command table, request
 * deadlines (a request its client gave up on never runs), wiping what
 * may hold a secret (request buffers, JSON values) before it is freed;
 * and where a client finds the socket when it is not told (the daemon's
 * config file).
 */
#include "hotlun/ctl.h"
#include "hotlun/conf.h"
#include "hotlun/event.h"
#include "hotlun/log.h"
#include "hotlun/util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <malloc.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

struct ctl_client {
	struct hl_list link;
	struct hl_ctl_server *srv;
	struct hl_event ev;
	char *in;             /* bytes received, not yet a full line */
	size_t in_len, in_cap;
	char *out;            /* reply bytes not yet sent */
	size_t out_len, out_off;
	bool closing;         /* close once out is flushed */
	struct hl_ctl_later *later; /* its request's reply is deferred (hl_ctl_defer) */
	struct hl_timer idle; /* armed while it has no request running: closes it when it fires */
	char who[64];         /* "pid N uid N" of the peer (SO_PEERCRED), for logs */
};

/* Out of descriptors, the listening socket is not watched and retried this often. */
#define CTL_ACCEPT_RETRY_MS 100

struct hl_ctl_server {
	struct hl_reactor *reactor;
	struct hl_event listen_ev;
	struct hl_timer accept_retry; /* armed while accept is paused (out of descriptors) */
	bool accept_paused;           /* logged once per episode */
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	dev_t dev; /* the socket file bind() made: destroy unlinks path only while it is still it */
	ino_t ino;
	const struct hl_ctl_command *cmds;
	void *ctx;
	struct hl_list clients;
	unsigned n_clients;           /* at most HL_CTL_MAX_CLIENTS */
	const char *caller;   /* the client whose request runs now (hl_ctl_caller) */
	struct ctl_client *running; /* the client whose handler runs now (hl_ctl_defer) */
	unsigned idle_ms;           /* a connection with no request this long is closed; 0: never */
};

/* A reply a handler deferred: sent by hl_ctl_reply_later, or dropped with its client. */
struct hl_ctl_later {
	struct ctl_client *client; /* NULL once the client is gone (closed, server destroyed) */
};

static void client_close(struct ctl_client *c)
{
	if (c->later)
		c->later->client = NULL; /* its reply, when it comes, goes nowhere */
	hl_timer_stop(&c->idle);
	hl_event_del(&c->ev);
	close(c->ev.fd);
	hl_list_del(&c->link);
	c->srv->n_clients--;
	/* requests may carry secrets (set chap_secret=...) */
	if (c->in)
		explicit_bzero(c->in, c->in_cap);
	free(c->in);
	free(c->out);
	free(c);
}

/* Wall clock in ms since 1970: the clock a request's deadline is given in (hl_ctl_call_timed). */
static int64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * What the peer has shut down, seen without reading: its whole connection
 * (POLLHUP: closed, or killed), or with sending too, only its sending side
 * (POLLRDHUP: a client that gave up waiting, hl_ctl_call_timed).
 */
static bool peer_shut(int fd, bool sending)
{
	struct pollfd p = {.fd = fd, .events = POLLRDHUP};

	if (poll(&p, 1, 0) != 1)
		return false;
	return (p.revents & (POLLHUP | POLLERR)) || (sending && (p.revents & POLLRDHUP));
}

static void client_update_events(struct ctl_client *c)
{
	uint32_t want = c->out_len > c->out_off ? EPOLLOUT : (c->closing ? 0 : EPOLLIN);
	if (hl_event_mod(&c->ev, want ? want : EPOLLOUT) < 0)
		c->closing = true;
}

/* Queue one JSON reply line; steals `reply`. */
static void client_reply(struct ctl_client *c, json_t *reply)
{
	char *text = json_dumps(reply, JSON_COMPACT);
	json_decref(reply);
	if (!text) {
		c->closing = true;
		return;
	}
	size_t len = strlen(text);
	char *o = realloc(c->out, c->out_len + len + 1);
	if (!o) {
		free(text);
		c->closing = true;
		return;
	}
	c->out = o;
	memcpy(c->out + c->out_len, text, len);
	c->out[c->out_len + len] = '\n';
	c->out_len += len + 1;
	free(text);
}

static json_t *error_reply(const char *msg)
{
	return json_pack("{s:b, s:s}", "ok", 0, "error", msg);
}

static int cmd_help(struct hl_ctl_server *srv, json_t **result)
{
	json_t *list = json_array();
	if (!list)
		return -ENOMEM;
	json_array_append_new(list, json_pack("{s:s, s:s}", "cmd", "help", "help",
					      "list the commands"));
	for (const struct hl_ctl_command *c = srv->cmds; c && c->name; c++)
		json_array_append_new(list, json_pack("{s:s, s:s}", "cmd", c->name, "help", c->help));
	*result = list;
	return 0;
}

static void client_flush(struct ctl_client *c);

/*
 * Tell a client that its request with a deadline starts now, before it
 * runs. Sent (earlier replies first) straight into the socket: a client
 * that gives up shuts down its sending side and then reads what is there,
 * so either it sees this line (and knows the request may run) or the check
 * that follows sees its shutdown (and the request does not run). @return
 * whether the line was delivered whole.
 */
static bool send_started(struct ctl_client *c)
{
	static const char line[] = "{\"started\":true}\n";
	size_t len = sizeof(line) - 1;

	client_flush(c);
	if (c->out_len > c->out_off)
		return false; /* the client does not read its replies: it cannot be told */
	ssize_t n = send(c->ev.fd, line, len, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (n == (ssize_t)len)
		return true;
	if (n > 0) { /* keep the framing: the rest goes out before the reply */
		char *o = malloc(len - (size_t)n);
		if (o) {
			memcpy(o, line + n, len - (size_t)n);
			free(c->out);
			c->out = o;
			c->out_len = len - (size_t)n;
			c->out_off = 0;
		} else {
			c->closing = true;
		}
	}
	return false;
}

#define NOT_RUN "timed out before it ran; nothing was changed"

/* A request's "deadline": a whole number of ms since 1970, or absent (*ms = -1). */
static int parse_deadline(json_t *req, int64_t *ms)
{
	json_t *v = json_object_get(req, "deadline");

	*ms = -1;
	if (!v)
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -EINVAL;
	*ms = (int64_t)json_integer_value(v);
	return 0;
}

static json_t *result_reply(int rc, json_t *result, const char *err);

static json_t *dispatch(struct ctl_client *cl, const char *line, size_t len)
{
	struct hl_ctl_server *srv = cl->srv;
	json_error_t jerr;
	json_t *req = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr), *result = NULL;
	char err[512] = "";
	int64_t deadline;
	int rc;

	if (!req) {
		snprintf(err, sizeof(err), "malformed JSON at column %d: %s", jerr.column, jerr.text);
		return error_reply(err);
	}
	if (!json_is_object(req)) {
		json_decref(req);
		return error_reply("a request must be a JSON object");
	}
	json_t *cmd = json_object_get(req, "cmd");
	json_t *args = json_object_get(req, "args");
	if (!json_is_string(cmd)) {
		json_decref(req);
		return error_reply("missing \"cmd\" (a string)");
	}
	if (args && !json_is_object(args)) {
		json_decref(req);
		return error_reply("\"args\" must be an object");
	}
	const char *key;
	json_t *val;
	json_object_foreach(req, key, val) {
		if (strcmp(key, "cmd") && strcmp(key, "args") && strcmp(key, "deadline")) {
			snprintf(err, sizeof(err), "unknown request member \"%.64s\"", key);
			json_decref(req);
			return error_reply(err);
		}
	}
	if (parse_deadline(req, &deadline)) {
		json_decref(req);
		return error_reply("\"deadline\" must be a whole number of milliseconds since "
		                   "1970-01-01 UTC");
	}
	const char *name = json_string_value(cmd);
	const struct hl_ctl_command *c = NULL;
	if (strcmp(name, "help") != 0) {
		for (c = srv->cmds; c && c->name; c++) {
			if (strcmp(c->name, name) == 0)
				break;
		}
		if (!c || !c->name) {
			snprintf(err, sizeof(err), "unknown command \"%.64s\" (try \"help\")", name);
			json_decref(req);
			return error_reply(err);
		}
	}
	/*
	 * Its turn has come. With a deadline: too late, or its client gave up
	 * (hl_ctl_call_timed shuts down its sending side): it does not run.
	 */
	if (deadline >= 0) {
		int64_t late = wall_ms() - deadline;
		const char *why = NULL;
		char late_s[96] = "";
		if (late > 0) {
			snprintf(late_s, sizeof(late_s),
			         "its deadline passed %" PRId64 " ms before its turn", late);
			why = late_s;
		} else if (!send_started(cl)) {
			why = "its client does not read its replies";
		} else if (peer_shut(cl->ev.fd, true)) {
			why = "its client gave up waiting";
		}
		if (why) {
			HL_NOTICE("ctl", "%.64s from %s not run: %s", name, cl->who, why);
			snprintf(err, sizeof(err), NOT_RUN " (%s)", why);
			json_decref(req);
			return error_reply(err);
		}
	}
	json_t *empty = NULL;
	if (!args)
		args = empty = json_object();
	if (!c) {
		rc = cmd_help(srv, &result);
	} else {
		srv->caller = cl->who;
		srv->running = cl;
		rc = c->fn(srv->ctx, args, &result, err, sizeof(err));
		srv->running = NULL;
		srv->caller = NULL;
	}
	json_decref(empty);
	json_decref(req);
	if (rc == HL_CTL_DEFERRED && cl->later) {
		json_decref(result);
		return NULL; /* hl_ctl_reply_later answers it */
	}
	if (cl->later) { /* deferred, then answered at once after all */
		free(cl->later);
		cl->later = NULL;
	}
	if (rc == HL_CTL_DEFERRED)
		rc = -EIO; /* a handler that returns it without hl_ctl_defer: a bug */
	return result_reply(rc, result, err);
}

/* The reply line of a handler's return: steals result. */
static json_t *result_reply(int rc, json_t *result, const char *err)
{
	char buf[512];

	if (rc) {
		json_decref(result);
		if (!err || !err[0]) {
			snprintf(buf, sizeof(buf), "%s", strerror(-rc));
			err = buf;
		}
		return error_reply(err);
	}
	json_t *reply = json_pack("{s:b}", "ok", 1);
	if (result)
		json_object_set_new(reply, "result", result);
	return reply;
}

static void client_flush(struct ctl_client *c)
{
	while (c->out_off < c->out_len) {
		ssize_t n = send(c->ev.fd, c->out + c->out_off, c->out_len - c->out_off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return;
			c->closing = true;
			c->out_off = c->out_len;
			return;
		}
		c->out_off += (size_t)n;
	}
	c->out_len = c->out_off = 0;
}

/*
 * A request whose client has closed its connection is not run when its turn
 * comes: nobody waits for it (a hotlunctl killed by Ctrl-C or by timeout(1)
 * while the control thread was busy). Its line is still parsed for the log.
 */
static bool client_gone(struct ctl_client *c, const char *line, size_t len)
{
	if (!peer_shut(c->ev.fd, false))
		return false;
	json_t *req = json_loadb(line, len, 0, NULL);
	const char *cmd = json_string_value(json_object_get(req, "cmd"));
	HL_NOTICE("ctl", "%.64s from %s not run: its client closed the connection before its turn",
	          cmd ? cmd : "a request", c->who);
	json_decref(req);
	return true;
}

/*
 * The idle clock of c starts again: after each request it was answered
 * (and when it connected). Not while a request of its runs (a deferred
 * reply: a long command is not idleness), nor for a part of a line (a
 * client that trickles bytes without ever ending a request is idle).
 */
static void idle_restart(struct ctl_client *c)
{
	if (c->later || !c->srv->idle_ms)
		hl_timer_stop(&c->idle);
	else
		hl_timer_start(c->srv->reactor, &c->idle, c->srv->idle_ms);
}

/*
 * Before closing a connection we told why: end our side, then read and drop
 * what it sent (up to one request's worth). A Unix socket closed with
 * unread data resets its peer, which would then see ECONNRESET instead of
 * the line.
 */
static void end_and_drain(int fd)
{
	char sink[4096];

	shutdown(fd, SHUT_WR);
	for (size_t got = 0; got <= HL_CTL_MAX_REQUEST;) {
		ssize_t r = recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
}

/*
 * Its idle time is up: say why in a line (if the socket takes it now) and
 * close, whatever it still had to read of an earlier reply; its place
 * under HL_CTL_MAX_CLIENTS is free again.
 */
static void client_idle(struct hl_timer *t)
{
	struct ctl_client *c = t->arg;
	char msg[160];

	if (c->later)
		return; /* its reply re-arms the clock */
	HL_NOTICE("ctl", "control connection of %s closed: no request for %g s", c->who,
	          c->srv->idle_ms / 1000.0);
	snprintf(msg, sizeof(msg), "idle for %g s with no request: closed", c->srv->idle_ms / 1000.0);
	json_t *line = error_reply(msg);
	/* marked: a client may reconnect and send its next request there (send_request) */
	if (line)
		json_object_set_new(line, "closed", json_string("idle"));
	client_reply(c, line);
	client_flush(c);
	end_and_drain(c->ev.fd);
	client_close(c);
}

/*
 * Serve every complete line received. A deferred reply (hl_ctl_defer) stops
 * it: the lines after wait, unread from the socket too, until that reply
 * is sent, so a client's replies keep the order of its requests.
 */
static void serve_lines(struct ctl_client *c)
{
	size_t start = 0;

	while (!c->later && !c->closing) {
		char *nl = memchr(c->in + start, '\n', c->in_len - start);
		if (!nl)
			break;
		size_t len = (size_t)(nl - (c->in + start));
		if (len > HL_CTL_MAX_REQUEST) {
			client_reply(c, error_reply("request too large"));
			c->closing = true;
			return;
		}
		if (len && !(len == 1 && c->in[start] == '\r')) {
			if (client_gone(c, c->in + start, len)) {
				c->closing = true;
				start = c->in_len; /* the rest is not run either */
				break;
			}
			json_t *reply = dispatch(c, c->in + start, len);
			if (reply)
				client_reply(c, reply);
			hl_secret_wipe_stack(); /* what the handler's frames held */
			idle_restart(c);
		}
		start += len + 1;
	}
	memmove(c->in, c->in + start, c->in_len - start);
	explicit_bzero(c->in + c->in_len - start, start); /* what was served */
	c->in_len -= start;
	if (c->in_len > HL_CTL_MAX_REQUEST) {
		client_reply(c, error_reply("request too large"));
		c->closing = true;
	}
}

static void client_read(struct ctl_client *c)
{
	for (;;) {
		if (c->in_cap - c->in_len < 4096) {
			size_t cap = c->in_cap ? c->in_cap * 2 : 8192;
			if (cap > HL_CTL_MAX_REQUEST + 8192)
				cap = HL_CTL_MAX_REQUEST + 8192;
			/* not realloc: the old block, wiped, must not keep a secret */
			char *b = cap > c->in_cap ? malloc(cap) : NULL;
			if (!b) {
				client_reply(c, error_reply("request too large"));
				c->closing = true;
				return;
			}
			if (c->in) {
				memcpy(b, c->in, c->in_len);
				explicit_bzero(c->in, c->in_cap);
				free(c->in);
			}
			c->in = b;
			c->in_cap = cap;
		}
		ssize_t n = recv(c->ev.fd, c->in + c->in_len, c->in_cap - c->in_len, MSG_DONTWAIT);
		if (n == 0) {
			c->closing = true;
			return;
		}
		if (n < 0) {
			if (errno != EAGAIN && errno != EINTR)
				c->closing = true;
			return;
		}
		c->in_len += (size_t)n;
		serve_lines(c);
		if (c->closing || c->later || c->out_len)
			return; /* answer before reading more: a client can't flood us */
	}
}

/* After a turn of c's: close it, or watch what it waits for (nothing while a reply is deferred). */
static void client_settle(struct ctl_client *c)
{
	client_flush(c);
	if (c->closing && c->out_off >= c->out_len && !c->later) {
		client_close(c);
		return;
	}
	if (c->later) {
		/* not even EPOLLHUP (always reported): a hang-up would spin the loop */
		hl_event_del(&c->ev);
		return;
	}
	client_update_events(c);
}

static void client_event(struct hl_event *ev, uint32_t revents)
{
	struct ctl_client *c = ev->arg;

	if (revents & (EPOLLIN | EPOLLHUP | EPOLLERR))
		if (!c->closing)
			client_read(c);
	client_settle(c);
}

struct hl_ctl_later *hl_ctl_defer(struct hl_ctl_server *srv)
{
	struct ctl_client *c = srv->running;
	struct hl_ctl_later *l;

	if (!c || c->later)
		return NULL;
	l = calloc(1, sizeof(*l));
	if (!l)
		return NULL;
	l->client = c;
	c->later = l;
	hl_timer_stop(&c->idle); /* the daemon is working for it */
	return l;
}

void hl_ctl_reply_later(struct hl_ctl_later *l, int rc, json_t *result, const char *err)
{
	struct ctl_client *c = l->client;

	free(l);
	if (!c) {
		json_decref(result);
		return;
	}
	c->later = NULL;
	client_reply(c, result_reply(rc, result, err));
	idle_restart(c);
	if (hl_event_add(c->srv->reactor, &c->ev, EPOLLOUT) < 0)
		c->closing = true;
	if (!c->closing) {
		serve_lines(c); /* what it sent meanwhile */
		hl_secret_wipe_stack();
	}
	client_settle(c);
}

static void listen_event(struct hl_event *ev, uint32_t revents);

/* Tell a connection we will not serve why (one line, if the socket takes it), and close it. */
static void turn_away(int fd, const char *why)
{
	char line[256];
	int n = snprintf(line, sizeof(line), "{\"ok\":false,\"error\":\"%s\"}\n", why);

	if (n > 0 && (size_t)n < sizeof(line) &&
	    send(fd, line, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
		HL_DEBUG("ctl", "turned away: %s", strerror(errno));
	end_and_drain(fd);
	close(fd);
}

/*
 * Whether the peer may use the socket: root or this process's user. The
 * socket's mode (0600) already says so; this holds too when someone widens
 * it (chmod 666 for a monitoring user: every command here is an
 * administrator's, none is read-only) or hands its descriptor on.
 */
static bool peer_allowed(const struct ucred *cred)
{
	return cred->uid == 0 || cred->uid == geteuid();
}

static void accept_retry(struct hl_timer *t)
{
	struct hl_ctl_server *srv = t->arg;

	if (hl_event_add(srv->reactor, &srv->listen_ev, EPOLLIN) < 0)
		hl_timer_start(srv->reactor, &srv->accept_retry, CTL_ACCEPT_RETRY_MS);
}

static void listen_event(struct hl_event *ev, uint32_t revents)
{
	struct hl_ctl_server *srv = ev->arg;

	(void)revents;
	for (;;) {
		int fd = accept4(ev->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
				/*
				 * The socket stays readable: retrying now would spin the
				 * reactor. Stop watching it; the client waits in the backlog.
				 */
				if (!srv->accept_paused)
					HL_WARN("ctl", "accept: %s; not accepting until a descriptor is free",
						strerror(errno));
				srv->accept_paused = true;
				hl_event_del(&srv->listen_ev);
				hl_timer_start(srv->reactor, &srv->accept_retry, CTL_ACCEPT_RETRY_MS);
			} else if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
				HL_WARN_RL("ctl", "accept: %s", strerror(errno));
			}
			return;
		}
		if (srv->accept_paused) {
			srv->accept_paused = false;
			HL_NOTICE("ctl", "accepting control connections again");
		}
		struct ucred cred;
		socklen_t cl = sizeof(cred);
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0) {
			HL_WARN_RL("ctl", "a control connection without credentials: %s",
			           strerror(errno));
			close(fd);
			continue;
		}
		if (!peer_allowed(&cred)) {
			HL_WARN_RL("ctl", "control connection of pid %d uid %u refused: only root "
			                  "and uid %u may use %s",
			           (int)cred.pid, (unsigned)cred.uid, (unsigned)geteuid(), srv->path);
			turn_away(fd, "this user may not use the control socket");
			continue;
		}
		/*
		 * Each client costs a descriptor (the portals stop accepting near
		 * the reserve) and up to a request line of memory: a script that
		 * leaks connections must not take those from the initiators.
		 */
		if (srv->n_clients >= HL_CTL_MAX_CLIENTS) {
			char why[200];
			HL_WARN_RL("ctl",
			           "control connection of pid %d uid %u refused: %u open, the most "
			           "hotlund holds (a script that leaves connections open?); each "
			           "closes after %g s without a request",
			           (int)cred.pid, (unsigned)cred.uid, srv->n_clients,
			           srv->idle_ms / 1000.0);
			int n = snprintf(why, sizeof(why),
			                 "too many control connections open (%u, the most hotlund "
			                 "holds); ",
			                 srv->n_clients);
			if (srv->idle_ms)
				snprintf(why + n, sizeof(why) - (size_t)n,
				         "an idle one is closed after %g s: try again then",
				         srv->idle_ms / 1000.0);
			else
				snprintf(why + n, sizeof(why) - (size_t)n,
				         "close the ones a script left open");
			turn_away(fd, why);
			continue;
		}
		struct ctl_client *c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			continue;
		}
		c->srv = srv;
		snprintf(c->who, sizeof(c->who), "pid %d uid %u", (int)cred.pid,
		         (unsigned)cred.uid);
		hl_timer_init(&c->idle, client_idle, c);
		hl_event_init(&c->ev, fd, client_event, c);
		if (hl_event_add(srv->reactor, &c->ev, EPOLLIN) < 0) {
			close(fd);
			free(c);
			continue;
		}
		hl_list_add_tail(&srv->clients, &c->link);
		srv->n_clients++;
		idle_restart(c);
	}
}

void hl_ctl_server_set_idle_timeout(struct hl_ctl_server *srv, unsigned ms)
{
	srv->idle_ms = ms;
}

const char *hl_ctl_caller(const struct hl_ctl_server *srv)
{
	return srv && srv->caller ? srv->caller : NULL;
}

int hl_ctl_socket_in_use(const char *path)
{
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	struct stat st;
	int fd, rc;

	if (strlen(path) >= sizeof(sun.sun_path))
		return -ENAMETOOLONG;
	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISSOCK(st.st_mode))
		return -EEXIST;
	hl_strlcpy(sun.sun_path, path, sizeof(sun.sun_path));
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/*
	 * Someone listens there: connect succeeds, or (backlog full) EAGAIN.
	 * Nobody does: ECONNREFUSED, the file of a server that is gone.
	 */
	rc = connect(fd, (struct sockaddr *)&sun, sizeof(sun));
	if (rc < 0)
		rc = errno == ECONNREFUSED ? 0 : errno == EAGAIN ? 1 : -errno;
	else
		rc = 1;
	close(fd);
	return rc;
}

int hl_ctl_server_create(struct hl_reactor *r, const char *path, mode_t mode,
			 const struct hl_ctl_command *cmds, void *ctx, struct hl_ctl_server **out)
{
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	struct stat st;
	int fd, rc;

	if (strlen(path) >= sizeof(sun.sun_path))
		return -ENAMETOOLONG;
	rc = hl_ctl_socket_in_use(path);
	if (rc > 0)
		return -EADDRINUSE; /* a live server: never take its path away */
	if (rc < 0)
		return rc;
	if (lstat(path, &st) == 0)
		unlink(path); /* a stale socket from an earlier run */
	struct hl_ctl_server *srv = calloc(1, sizeof(*srv));
	if (!srv)
		return -ENOMEM;
	hl_strlcpy(srv->path, path, sizeof(srv->path));
	hl_strlcpy(sun.sun_path, path, sizeof(sun.sun_path));
	srv->reactor = r;
	srv->cmds = cmds;
	srv->ctx = ctx;
	srv->idle_ms = HL_CTL_IDLE_TIMEOUT_MS;
	hl_list_init(&srv->clients);

	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		rc = -errno;
		free(srv);
		return rc;
	}
	/* Create the socket with no access, then open it up to `mode`: no window where it is wider. */
	mode_t old = umask(0777);
	rc = bind(fd, (struct sockaddr *)&sun, sizeof(sun));
	umask(old);
	if (rc < 0) {
		/* EADDRINUSE: another server bound it since the check; the path is its */
		rc = -errno;
		close(fd);
		free(srv);
		return rc;
	}
	if (lstat(path, &st) < 0 || chmod(path, mode) < 0 || listen(fd, 16) < 0) {
		rc = -errno;
		close(fd);
		unlink(path);
		free(srv);
		return rc;
	}
	srv->dev = st.st_dev;
	srv->ino = st.st_ino;
	hl_event_init(&srv->listen_ev, fd, listen_event, srv);
	hl_timer_init(&srv->accept_retry, accept_retry, srv);
	rc = hl_event_add(r, &srv->listen_ev, EPOLLIN);
	if (rc) {
		close(fd);
		unlink(path);
		free(srv);
		return rc;
	}
	*out = srv;
	return 0;
}

void hl_ctl_server_destroy(struct hl_ctl_server *srv)
{
	struct ctl_client *c, *tmp;

	if (!srv)
		return;
	hl_list_for_each_entry_safe(c, tmp, &srv->clients, link)
		client_close(c);
	hl_event_del(&srv->listen_ev);
	hl_timer_stop(&srv->accept_retry);
	/*
	 * Not a path another server has bound since (a stale-socket takeover
	 * after a hang, a file removed by hand). Compared before the close: our
	 * bound socket holds its inode, so no other file can have its number.
	 */
	struct stat st;
	bool ours = lstat(srv->path, &st) == 0 && st.st_dev == srv->dev && st.st_ino == srv->ino;
	close(srv->listen_ev.fd);
	if (ours)
		unlink(srv->path);
	free(srv);
}

/* ---- client ---- */

int hl_ctl_connect(const char *path)
{
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	int fd, rc;

	if (strlen(path) >= sizeof(sun.sun_path))
		return -ENAMETOOLONG;
	hl_strlcpy(sun.sun_path, path, sizeof(sun.sun_path));
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	/*
	 * Requests carry secrets (set chap_secret=...): only a server of root's or
	 * of our own user gets them, never a socket another user put at the path.
	 */
	struct ucred cred;
	socklen_t cl = sizeof(cred);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0 ||
	    (cred.uid != 0 && cred.uid != geteuid())) {
		close(fd);
		return -EPERM;
	}
	return fd;
}

char *hl_ctl_socket_from_config(const char *path, char *err, size_t errlen)
{
	struct hl_conf *c;
	char *s;

	if (errlen)
		err[0] = '\0';
	if (access(path, R_OK) != 0)
		return NULL;
	if (hl_conf_load(path, &c, err, errlen) != 0)
		return NULL;
	/* hl_conf_load always sets it; a NULL here would be its bug, not a crash of ours */
	s = c->control_socket ? strdup(c->control_socket) : NULL;
	if (c->control_socket && !s)
		snprintf(err, errlen, "%s: %s", path, strerror(ENOMEM));
	hl_conf_free(c);
	return s;
}

/* Monotonic ms, for the client's own waiting. */
static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Send req (cmd, args, ...) as one line; the text is wiped (it may hold a secret). */
/*
 * Between requests the server sends nothing, except the line with which it
 * closes an idle connection (client_idle): anything to read, or the end,
 * before a request is sent means the server is gone from this connection.
 */
static bool server_left(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	return poll(&p, 1, 0) == 1 && (p.revents & (POLLIN | POLLHUP | POLLERR));
}

static int read_line(int fd, uint64_t until, json_t **out);

/*
 * The server spoke before our request. Its idle close ("closed": "idle", or
 * the end alone): nothing was sent, the caller may reconnect and send it
 * there. Anything else is a refusal at accept (too many connections,
 * another user): that is the answer, and a new connection would get it
 * too. @return 1 with *early set (the refusal), or -ENOTCONN.
 */
static int server_spoke(int fd, json_t **early)
{
	json_t *line = NULL;

	if (read_line(fd, mono_ms(), &line) == 0 && line && !json_object_get(line, "closed")) {
		*early = line;
		return 1;
	}
	json_decref(line);
	return -ENOTCONN;
}

/* @return 0 (sent), 1 (not sent: the server's refusal in *early), or -errno. */
static int send_request(int fd, json_t *req, json_t **early)
{
	char *text;
	size_t len, off = 0;
	int rc = 0;

	if (server_left(fd))
		return server_spoke(fd, early);
	text = json_dumps(req, JSON_COMPACT);
	if (!text)
		return -ENOMEM;
	len = strlen(text);
	text[len++] = '\n'; /* json_dumps leaves room: the NUL becomes the newline */
	while (off < len) {
		ssize_t n = send(fd, text + off, len - off, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			break;
		}
		off += (size_t)n;
	}
	explicit_bzero(text, len);
	free(text);
	return rc;
}

/*
 * Read one line and parse it. Waits for its first byte until `until`
 * (mono_ms; 0: no limit) and returns -ETIMEDOUT then; a line that has
 * begun is read to its end. Bytes past the newline stay in the socket
 * (peeked, then taken up to the newline): the next line may be the next
 * call's. Replies can be large (stats of many disks).
 */
static int read_line(int fd, uint64_t until, json_t **out)
{
	size_t cap = 65536, have = 0;
	char *buf = NULL;
	int rc;

	for (;;) {
		if (have == 0 && until) {
			uint64_t now = mono_ms();
			struct pollfd p = {.fd = fd, .events = POLLIN};
			int wait = now >= until ? 0 : (int)HL_MIN(until - now, (uint64_t)INT32_MAX);
			int n = poll(&p, 1, wait);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0) {
				rc = -errno;
				break;
			}
			if (n == 0) {
				rc = -ETIMEDOUT;
				break;
			}
		}
		if (!buf || have == cap) {
			if (buf && cap >= (64u << 20)) {
				rc = -E2BIG;
				break;
			}
			size_t ncap = buf ? cap * 2 : cap;
			char *b = realloc(buf, ncap);
			if (!b) {
				rc = -ENOMEM;
				break;
			}
			buf = b;
			cap = ncap;
		}
		ssize_t n = recv(fd, buf + have, cap - have, MSG_PEEK);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n == 0 ? -ECONNRESET : -errno;
			break;
		}
		char *nl = memchr(buf + have, '\n', (size_t)n);
		size_t take = nl ? (size_t)(nl - (buf + have)) + 1 : (size_t)n;
		ssize_t got = recv(fd, buf + have, take, MSG_WAITALL);
		if (got != (ssize_t)take) {
			rc = got < 0 ? -errno : -ECONNRESET;
			break;
		}
		have += take;
		if (nl) {
			json_error_t jerr;
			*out = json_loadb(buf, have - 1, 0, &jerr);
			rc = *out ? 0 : -EPROTO;
			break;
		}
	}
	free(buf);
	return rc;
}

/* A reply's first line for a request with a deadline: {"started": true}. */
static bool is_started(json_t *line)
{
	return json_is_true(json_object_get(line, "started")) && !json_object_get(line, "ok");
}

int hl_ctl_call(int fd, const char *cmd, json_t *args, json_t **reply)
{
	json_t *req = json_pack("{s:s}", "cmd", cmd);
	int rc;

	if (!req)
		return -ENOMEM;
	if (args)
		json_object_set(req, "args", args);
	rc = send_request(fd, req, reply);
	json_decref(req);
	if (rc == 1)
		return 0;
	return rc ? rc : read_line(fd, 0, reply);
}

int hl_ctl_call_timed(int fd, const char *cmd, json_t *args, unsigned timeout_ms, json_t **reply)
{
	json_t *req, *line = NULL;
	bool started = false;
	int rc;

	if (!timeout_ms)
		return hl_ctl_call(fd, cmd, args, reply);
	uint64_t until = mono_ms() + timeout_ms;
	req = json_pack("{s:s, s:I}", "cmd", cmd, "deadline", (json_int_t)(wall_ms() + timeout_ms));
	if (!req)
		return -ENOMEM;
	if (args)
		json_object_set(req, "args", args);
	rc = send_request(fd, req, reply);
	json_decref(req);
	if (rc == 1)
		return 0;
	while (rc == 0) {
		rc = read_line(fd, until, &line);
		if (rc == -ETIMEDOUT && started)
			return -EINPROGRESS;
		if (rc == -ETIMEDOUT) {
			/*
			 * Give up: the server sends "started" before it checks for this
			 * shutdown, so what is in the socket now decides. Nothing: the
			 * request will not run. "started": it may (hl_ctl_wait_reply).
			 */
			shutdown(fd, SHUT_WR);
			rc = read_line(fd, mono_ms(), &line);
			if (rc == -ETIMEDOUT || rc == -ECONNRESET)
				return -ETIMEDOUT;
			if (rc == 0 && is_started(line)) {
				json_decref(line);
				return -EINPROGRESS;
			}
		}
		if (rc)
			return rc;
		if (!is_started(line)) {
			*reply = line;
			return 0;
		}
		json_decref(line);
		started = true;
	}
	return rc;
}

int hl_ctl_wait_reply(int fd, int timeout_ms, json_t **reply)
{
	uint64_t until = timeout_ms < 0 ? 0 : mono_ms() + (uint64_t)timeout_ms;
	json_t *line;
	int rc;

	for (;;) {
		rc = read_line(fd, until, &line);
		if (rc)
			return rc;
		if (!is_started(line)) {
			*reply = line;
			return 0;
		}
		json_decref(line); /* read before the caller's timeout */
	}
}

/* jansson's free, wiping the block first (its usable size: jansson does not pass one). */
static void wiping_free(void *p)
{
	if (p) {
		explicit_bzero(p, malloc_usable_size(p));
		free(p);
	}
}

void hl_ctl_json_wipe(void)
{
	json_set_alloc_funcs(malloc, wiping_free);
}
