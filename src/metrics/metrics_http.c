/*
 * metrics_http.c - the HTTP side of the Prometheus endpoint
 * (hl_metrics_start): libmicrohttpd serves the connections from one
 * thread of its own (epoll); hotlund writes no HTTP by hand.
 *
 * A scrape needs the daemon's state, which only its control reactor may
 * read. So the request is suspended, a snapshot job is posted to that
 * reactor (hl_reactor_call), and the job resumes the connection with the
 * stats object; the text is rendered back on the HTTP thread. Nothing
 * waits on anything: a slow control reactor delays scrapes, never the
 * HTTP thread, and the data path never sees either.
 *
 * A job may outlive the endpoint (stopped while the job waits in the
 * reactor's queue): jobs and the endpoint meet under one lock (g_lock),
 * where the endpoint's stop cuts every pending job loose (scrape.m =
 * NULL) before it frees anything; a loose job only drops its reference.
 */
#include "config.h"

#include "hotlun/event.h"
#include "hotlun/log.h"
#include "hotlun/metrics.h"
#include "hotlun/util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

enum scrape_state { S_NEW, S_WAIT, S_DONE, S_FAILED };

struct scrape {
	atomic_int refs;      /* the connection's, and the posted job's */
	struct hl_metrics *m; /* g_lock; NULL: the endpoint stopped */
	struct MHD_Connection *conn;
	enum scrape_state state; /* g_lock */
	json_t *snap;            /* S_DONE: the stats object (taken by the reply) */
	struct scrape *next;     /* m->pending while S_WAIT; g_lock */
};

/*
 * One accepted connection (the library's socket context). The library
 * refuses at accept only when every slot is taken, and then the refused
 * one could be anybody's: a few addresses parking half a request on
 * every slot kept scrapes out. So hotlund lets the library take one more
 * than HL_METRICS_MAX_CONNS and trims back itself, as iSCSI does with
 * pending logins: a source (IPv4 address, IPv6 /64) over its share loses
 * the new connection; else, when over the total, the source holding the
 * most loses its oldest connection without a request in progress.
 * Touched only on the library's thread.
 */
struct slot {
	struct slot *next;
	int fd;
	uint8_t src[16]; /* IPv4 address (v4-mapped), or the /64 of an IPv6 one */
	bool busy;       /* a scrape in progress (request and body in, not yet completed) */
	bool cut;        /* shut down by the trim; the library closes it next */
};

struct hl_metrics {
	struct MHD_Daemon *mhd;
	struct slot *slots; /* newest first */
	char *listen;
	struct hl_reactor *r;
	hl_metrics_snapshot_fn snapshot;
	void *arg;
	struct scrape *pending; /* g_lock */
	unsigned n_pending;     /* g_lock */
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static struct slot *slot_of(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	return ci ? ci->socket_context : NULL;
}

static void scrape_unref(struct scrape *s)
{
	if (atomic_fetch_sub(&s->refs, 1) != 1)
		return;
	json_decref(s->snap);
	free(s);
}

/* Unlink s from m's pending list. Under g_lock. */
static void pending_del(struct hl_metrics *m, struct scrape *s)
{
	for (struct scrape **p = &m->pending; *p; p = &(*p)->next) {
		if (*p == s) {
			*p = s->next;
			m->n_pending--;
			return;
		}
	}
}

/* On the control reactor: take the snapshot and wake the connection. */
static void snapshot_job(void *arg)
{
	struct scrape *s = arg;
	hl_metrics_snapshot_fn fn = NULL;
	void *fn_arg = NULL;
	json_t *snap = NULL;

	pthread_mutex_lock(&g_lock);
	if (s->m) {
		fn = s->m->snapshot;
		fn_arg = s->m->arg;
	}
	pthread_mutex_unlock(&g_lock);
	if (fn)
		snap = fn(fn_arg);
	pthread_mutex_lock(&g_lock);
	if (s->m) {
		pending_del(s->m, s);
		s->snap = snap;
		s->state = snap ? S_DONE : S_FAILED;
		snap = NULL;
		MHD_resume_connection(s->conn);
	}
	pthread_mutex_unlock(&g_lock);
	json_decref(snap); /* the endpoint stopped meanwhile */
	scrape_unref(s);
}

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, const char *text)
{
	struct MHD_Response *rsp =
	    MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
	enum MHD_Result rc;

	if (!rsp)
		return MHD_NO;
	MHD_add_response_header(rsp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
	if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
		MHD_add_response_header(rsp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
	rc = MHD_queue_response(conn, status, rsp);
	MHD_destroy_response(rsp);
	return rc;
}

static enum MHD_Result reply_metrics(struct MHD_Connection *conn, json_t *snap)
{
	struct MHD_Response *rsp;
	enum MHD_Result rc;
	char *text = NULL;
	size_t len = 0;

	if (hl_metrics_render(snap, &text, &len))
		return reply(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "out of memory\n");
	rsp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
	if (!rsp) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(rsp, MHD_HTTP_HEADER_CONTENT_TYPE, CONTENT_TYPE);
	MHD_add_response_header(rsp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	rc = MHD_queue_response(conn, MHD_HTTP_OK, rsp);
	MHD_destroy_response(rsp);
	return rc;
}

/* Post the snapshot job for s; the connection waits suspended. */
static enum MHD_Result ask_snapshot(struct hl_metrics *m, struct scrape *s)
{
	bool full;

	pthread_mutex_lock(&g_lock);
	full = m->n_pending >= HL_METRICS_PENDING_MAX;
	if (!full) {
		/* Suspended before the job can run: its resume never comes first. */
		MHD_suspend_connection(s->conn);
		s->state = S_WAIT;
		s->next = m->pending;
		m->pending = s;
		m->n_pending++;
		atomic_fetch_add(&s->refs, 1);
	}
	pthread_mutex_unlock(&g_lock);
	if (full)
		return reply(s->conn, MHD_HTTP_SERVICE_UNAVAILABLE,
		             "too many scrapes at once; try again\n");
	if (hl_reactor_call(m->r, snapshot_job, s) == 0)
		return MHD_YES;
	pthread_mutex_lock(&g_lock);
	if (s->state == S_WAIT) {
		pending_del(m, s);
		s->state = S_FAILED;
		MHD_resume_connection(s->conn);
	}
	pthread_mutex_unlock(&g_lock);
	scrape_unref(s); /* the job's reference: it will never run */
	return MHD_YES;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls)
{
	struct hl_metrics *m = cls;
	struct scrape *s = *con_cls;
	enum scrape_state st;

	(void)version;
	(void)upload;
	if (!s) {
		/* The headers are in: refuse what is not a scrape before any body. */
		if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD))
			return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD\n");
		if (!strcmp(url, "/"))
			return reply(conn, MHD_HTTP_OK,
			             "hotlund: Prometheus metrics at /metrics (docs/metrics.md)\n");
		if (strcmp(url, "/metrics"))
			return reply(conn, MHD_HTTP_NOT_FOUND, "not found: try /metrics\n");
		s = calloc(1, sizeof(*s));
		if (!s)
			return MHD_NO;
		atomic_init(&s->refs, 1);
		s->m = m;
		s->conn = conn;
		s->state = S_NEW;
		*con_cls = s;
		return MHD_YES;
	}
	if (*upload_size) { /* a GET with a body: read and ignore it */
		*upload_size = 0;
		return MHD_YES;
	}
	pthread_mutex_lock(&g_lock);
	st = s->state;
	pthread_mutex_unlock(&g_lock);
	switch (st) {
	case S_NEW: {
		/*
		 * The whole request is in: the trim leaves it alone until it
		 * completes. Not before: a GET announcing a body it never ends
		 * would hold its slot beyond the trim's reach.
		 */
		struct slot *x = slot_of(conn);
		if (x)
			x->busy = true;
		return ask_snapshot(m, s);
	}
	case S_WAIT:
		return MHD_YES; /* cannot be: a waiting connection is suspended */
	case S_DONE:
		return reply_metrics(conn, s->snap);
	case S_FAILED:
		break;
	}
	return reply(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "no snapshot (hotlund is stopping?)\n");
}

/* ---- slots ---- */

static void source_key(const struct sockaddr *sa, uint8_t key[16])
{
	memset(key, 0, 16);
	if (sa && sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)sa;
		key[10] = key[11] = 0xff;
		memcpy(key + 12, &in->sin_addr, 4);
	} else if (sa && sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)sa;
		/* a host has a whole /64 to connect from; a v4-mapped one is the address */
		if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr))
			memcpy(key, &in6->sin6_addr, 16);
		else
			memcpy(key, &in6->sin6_addr, 8);
	}
}

/* Connections of src not yet cut. */
static unsigned source_held(const struct hl_metrics *m, const uint8_t src[16])
{
	unsigned n = 0;

	for (const struct slot *x = m->slots; x; x = x->next)
		n += !x->cut && !memcmp(x->src, src, 16);
	return n;
}

/* Close a connection from under the library: it sees the end at its next poll. */
static void slot_cut(struct slot *x)
{
	x->cut = true;
	shutdown(x->fd, SHUT_RDWR);
}

/* A new connection s is in: keep the per-source share and the total. */
static void slots_trim(struct hl_metrics *m, struct slot *s)
{
	unsigned total = 0;

	if (source_held(m, s->src) > HL_METRICS_MAX_CONNS_ADDR) {
		slot_cut(s);
		return;
	}
	for (const struct slot *x = m->slots; x; x = x->next)
		total += !x->cut;
	if (total <= HL_METRICS_MAX_CONNS)
		return;
	/* the oldest idle connection of the source holding the most (ties: older) */
	struct slot *victim = NULL;
	unsigned most = 0;
	for (struct slot *x = m->slots; x; x = x->next) {
		if (x->cut || x->busy)
			continue;
		unsigned n = source_held(m, x->src);
		if (n >= most) {
			most = n;
			victim = x;
		}
	}
	/* nobody holds more than the newcomer's source: the newcomer goes */
	if (!victim || most < source_held(m, s->src))
		victim = s;
	slot_cut(victim);
}

static void notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                   enum MHD_ConnectionNotificationCode why)
{
	struct hl_metrics *m = cls;
	struct slot *s = *socket_context;

	if (why == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *fd =
		    MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
		const union MHD_ConnectionInfo *addr =
		    MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
		s = calloc(1, sizeof(*s));
		if (!s || !fd) {
			free(s); /* no room to count it: it may not stay */
			if (fd)
				shutdown(fd->connect_fd, SHUT_RDWR);
			return;
		}
		s->fd = fd->connect_fd;
		source_key(addr ? addr->client_addr : NULL, s->src);
		s->next = m->slots;
		m->slots = s;
		*socket_context = s;
		slots_trim(m, s);
		return;
	}
	if (!s)
		return;
	for (struct slot **p = &m->slots; *p; p = &(*p)->next) {
		if (*p == s) {
			*p = s->next;
			break;
		}
	}
	free(s);
	*socket_context = NULL;
}

static void completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                      enum MHD_RequestTerminationCode why)
{
	struct slot *x = slot_of(conn);

	(void)cls;
	(void)why;
	if (x)
		x->busy = false;
	if (*con_cls)
		scrape_unref(*con_cls);
	*con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	char msg[256];

	(void)cls;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	msg[strcspn(msg, "\n")] = '\0';
	/* what a client got wrong is its business: debug, rate-limited by level */
	HL_DEBUG("metrics", "http: %s", msg);
}

/* Bind the listening socket ourselves: a port in use gets its own errno and message. */
static int listen_on(const char *addr, int *fd, char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	unsigned len;
	int one = 1, s, rc;

	if (hl_parse_portal(addr, 9520, &ss, &len)) {
		snprintf(err, errlen, "metrics_listen: '%s' is not ADDRESS:PORT", addr);
		return -EINVAL;
	}
	s = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s < 0) {
		rc = -errno;
		snprintf(err, errlen, "metrics_listen %s: %s", addr, strerror(-rc));
		return rc;
	}
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ss.ss_family == AF_INET6)
		setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (bind(s, (struct sockaddr *)&ss, len) || listen(s, 64)) {
		rc = -errno;
		snprintf(err, errlen, "metrics_listen %s: %s", addr, strerror(-rc));
		close(s);
		return rc;
	}
	*fd = s;
	return 0;
}

int hl_metrics_start(const struct hl_metrics_config *cfg, struct hl_metrics **out, char *err,
                     size_t errlen)
{
	struct hl_metrics *m;
	int fd = -1, rc;

	if (!cfg->listen || !cfg->r || !cfg->snapshot) {
		snprintf(err, errlen, "metrics: no address, reactor or snapshot");
		return -EINVAL;
	}
	m = calloc(1, sizeof(*m));
	if (!m || !(m->listen = strdup(cfg->listen))) {
		free(m);
		snprintf(err, errlen, "metrics: out of memory");
		return -ENOMEM;
	}
	m->r = cfg->r;
	m->snapshot = cfg->snapshot;
	m->arg = cfg->arg;
	rc = listen_on(cfg->listen, &fd, err, errlen);
	if (rc) {
		free(m->listen);
		free(m);
		return rc;
	}
	m->mhd = MHD_start_daemon(
	    MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
	        MHD_USE_ERROR_LOG,
	    0, NULL, NULL, handle, m, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
	    MHD_OPTION_CONNECTION_LIMIT, (unsigned)HL_METRICS_MAX_CONNS + 1,
	    MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)HL_METRICS_MAX_CONNS_ADDR,
	    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HL_METRICS_TIMEOUT_S,
	    MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HL_METRICS_REQUEST_MAX,
	    MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_NOTIFY_CONNECTION, notify, m,
	    MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_END);
	if (!m->mhd) {
		close(fd);
		free(m->listen);
		free(m);
		snprintf(err, errlen, "metrics_listen %s: the HTTP server did not start",
		         cfg->listen);
		return -EIO;
	}
	*out = m;
	return 0;
}

void hl_metrics_stop(struct hl_metrics *m)
{
	if (!m)
		return;
	pthread_mutex_lock(&g_lock);
	while (m->pending) {
		struct scrape *s = m->pending;
		m->pending = s->next;
		s->m = NULL;
		s->state = S_FAILED;
		MHD_resume_connection(s->conn);
	}
	m->n_pending = 0;
	pthread_mutex_unlock(&g_lock);
	MHD_stop_daemon(m->mhd); /* closes the socket and every connection */
	free(m->listen);
	free(m);
}

const char *hl_metrics_listen(const struct hl_metrics *m)
{
	return m->listen;
}
