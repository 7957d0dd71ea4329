// clang-format off
// fuzz-sources: src/metrics/metrics_text.c src/util/util.c src/log/log.c
// fuzz-libs: -lmicrohttpd -ljansson -pthread
// fuzz-args: -max_len=20000 -timeout=20 -detect_leaks=0
// clang-format on
/*
 * fuzz_metrics_http.c - libFuzzer harness for the Prometheus endpoint's
 * request handling (src/metrics/metrics_http.c): the real endpoint
 * (hl_metrics_start, libmicrohttpd's thread with the daemon's limits) on
 * 127.0.0.1, a port of its own, its snapshots taken by a stand-in control
 * reactor (a thread of the harness); the input is what one client, or
 * several at once, send on a TCP connection.
 *
 * Input: byte 0 flags: bit 0 the reactor refuses the job (hl_reactor_call
 * fails), bit 1 the snapshot fails (NULL), bit 2 the reactor holds the
 * jobs until every connection got its turn (scrapes pile up against
 * HL_METRICS_PENDING_MAX), bit 3 six connections send the same bytes
 * at once; byte 1 the size of the pieces the bytes are sent in (0: at
 * once); the rest the bytes, then the client reads and closes.
 *
 * Checked: a connection is answered, closed, or left waiting for the rest
 * of its request (then the client gives up on it after 30 ms); an answer
 * starts "HTTP/1.x NNN" with a status the endpoint may give (200,
 * 400, 404, 405, 413, 414, 431, 500, 501, 503, 505); a request whose line
 * and headers exceed HL_METRICS_REQUEST_MAX never gets 200; a 200 to GET
 * /metrics carries the rendered text; never more snapshots pending than
 * HL_METRICS_PENDING_MAX, and with the jobs held, no more connections
 * answered with metrics than that; after the connections closed nothing is
 * pending and every scrape was freed (ASan: no overrun in the endpoint's
 * own code; LSan at exit: no scrape lost. Not per input: libmicrohttpd's
 * thread allocates and frees on its own time, and libFuzzer would run
 * every input twice to look for a leak).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "hotlun/log.h"

/* The endpoint's handler and state (static) are what is fuzzed: one unit with it. */
#include "metrics/metrics_http.c"

#define IDLE_MS   30 /* (giving up is no failure: no check needs an answer) */
#define NCONN_MAX 6  /* more than HL_METRICS_PENDING_MAX, fewer than _MAX_CONNS_ADDR */

/* ---- a stand-in control reactor ---- */

static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_cond = PTHREAD_COND_INITIALIZER;
static struct job {
	hl_call_fn fn;
	void *arg;
} q[64];
static unsigned q_n, q_running;
static bool q_refuse, q_hold, snap_fail;
static struct hl_metrics *ep;

int hl_reactor_call(struct hl_reactor *r, hl_call_fn fn, void *arg)
{
	(void)r;
	/* The endpoint counts the job as pending before it posts it (g_lock is free here). */
	pthread_mutex_lock(&g_lock);
	unsigned pending = ep ? ep->n_pending : 0;
	pthread_mutex_unlock(&g_lock);
	if (pending > HL_METRICS_PENDING_MAX) {
		fprintf(stderr, "%u snapshots pending (at most %u)\n", pending,
		        HL_METRICS_PENDING_MAX);
		abort();
	}
	pthread_mutex_lock(&q_lock);
	if (q_refuse || q_n == HL_ARRAY_SIZE(q)) {
		pthread_mutex_unlock(&q_lock);
		return -1;
	}
	q[q_n].fn = fn;
	q[q_n].arg = arg;
	q_n++;
	pthread_cond_signal(&q_cond);
	pthread_mutex_unlock(&q_lock);
	return 0;
}

static void *reactor_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&q_lock);
	for (;;) {
		while (!q_n || q_hold)
			pthread_cond_wait(&q_cond, &q_lock);
		struct job j = q[0];
		memmove(q, q + 1, (q_n - 1) * sizeof(q[0]));
		q_n--;
		q_running++;
		pthread_mutex_unlock(&q_lock);
		j.fn(j.arg);
		pthread_mutex_lock(&q_lock);
		q_running--;
		pthread_cond_broadcast(&q_cond);
	}
	return NULL;
}

static const char stats_text[] =
    "{\"version\": \"9.9\", \"disks\": {\"d0\": {\"origin\": \"file:/x/d0\", \"read_cmds\": 7,"
    " \"write_cmds\": 3, \"read_bytes\": 28672, \"cache\": \"c0\"}},"
    " \"caches\": {\"c0\": {\"device\": \"/dev/x\", \"nslots\": 10, \"used_slots\": 4,"
    "   \"disks\": {\"d0\": {\"read_hits\": 5, \"read_misses\": 1}}}},"
    " \"sessions\": 1, \"targets\": {\"iqn.t\": {\"sessions\": 1}},"
    " \"process\": {\"open_fds\": 12, \"max_fds\": 1024}}";

static json_t *snapshot(void *arg)
{
	(void)arg;
	if (snap_fail)
		return NULL;
	return json_loads(stats_text, 0, NULL);
}

/* ---- the endpoint ---- */

static struct sockaddr_in ep_addr;

static void init(void)
{
	static int r_dummy;
	struct hl_metrics_config cfg = {
	    .listen = "127.0.0.1:0",
	    .r = (struct hl_reactor *)&r_dummy,
	    .snapshot = snapshot,
	};
	socklen_t len = sizeof(ep_addr);
	char err[256];
	pthread_t t;

	if (ep)
		return;
	hl_log_level = getenv("HL_FUZZ_VERBOSE") ? HL_LOG_DEBUG : HL_LOG_ERR - 1;
	if (pthread_create(&t, NULL, reactor_main, NULL))
		abort();
	pthread_detach(t);
	if (hl_metrics_start(&cfg, &ep, err, sizeof(err))) {
		fprintf(stderr, "fuzz_metrics_http: %s\n", err);
		abort();
	}
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(ep->mhd, MHD_DAEMON_INFO_LISTEN_FD);
	if (!di || getsockname(di->listen_fd, (struct sockaddr *)&ep_addr, &len))
		abort();
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

struct conn {
	int fd;
	char *in;
	size_t len, cap;
	bool eof;
};

/* Read what is there (wait up to ms for something). @return false at EOF or error. */
static bool conn_read(struct conn *c, int ms)
{
	struct pollfd p = {.fd = c->fd, .events = POLLIN};

	if (c->eof)
		return false;
	if (poll(&p, 1, ms) <= 0)
		return true;
	if (c->cap - c->len < 4096) {
		c->cap = c->cap ? c->cap * 2 : 16384;
		c->in = realloc(c->in, c->cap);
		if (!c->in)
			abort();
	}
	ssize_t n = recv(c->fd, c->in + c->len, c->cap - c->len, MSG_DONTWAIT);
	if (n > 0) {
		c->len += (size_t)n;
		return true;
	}
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return true;
	c->eof = true; /* closed (or reset: a refusal) */
	return false;
}

static bool status_allowed(int s)
{
	static const int ok[] = {200, 400, 404, 405, 413, 414, 431, 500, 501, 503, 505};

	for (size_t i = 0; i < HL_ARRAY_SIZE(ok); i++)
		if (s == ok[i])
			return true;
	return false;
}

/*
 * Bytes of the first request's line and headers (up to the empty line), or
 * len if none ends. libmicrohttpd (0.9.75) also ends the headers at a line
 * with an empty field name (": x"): what follows is the next request on the
 * connection, answered on its own (414/431 when it is too long, then
 * closed), so the first request's head ends there.
 */
static size_t head_len(const uint8_t *d, size_t len)
{
	for (size_t i = 0; i + 1 < len; i++) {
		if (d[i] == '\n' && (d[i + 1] == '\n' || d[i + 1] == ':'))
			return i;
		if (i + 3 < len && !memcmp(d + i, "\r\n\r\n", 4))
			return i;
		if (i + 2 < len && !memcmp(d + i, "\r\n:", 3))
			return i;
	}
	return len;
}

static void check_answer(const struct conn *c, const uint8_t *req, size_t len)
{
	int status;

	if (!c->len)
		return; /* closed without an answer: a refusal */
	if (c->len < 12 || memcmp(c->in, "HTTP/1.", 7) || c->in[8] != ' ' ||
	    sscanf(c->in + 9, "%3d", &status) != 1) {
		fprintf(stderr, "an answer that is no HTTP status line: %.*s\n",
		        (int)HL_MIN(c->len, (size_t)80), c->in);
		abort();
	}
	if (!status_allowed(status)) {
		fprintf(stderr, "status %d\n", status);
		abort();
	}
	if (status == 200 && head_len(req, len) > HL_METRICS_REQUEST_MAX) {
		fprintf(stderr, "200 to a request with %zu bytes of line and headers\n",
		        head_len(req, len));
		abort();
	}
	if (status == 200 && len > 17 && !memcmp(req, "GET /metrics HTTP", 17) &&
	    !memmem(c->in, c->len, "hotlun_", 7)) {
		fprintf(stderr, "200 to GET /metrics without the metrics\n");
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct conn cs[NCONN_MAX];
	unsigned nconn;
	size_t piece;
	uint64_t t0;
	bool held_all = false; /* every connection had its turn while the jobs were held */
	unsigned scraped = 0;  /* connections that got the metrics */

	init();
	if (size < 2)
		return 0;
	pthread_mutex_lock(&q_lock);
	q_refuse = data[0] & 1;
	q_hold = data[0] & 4;
	pthread_mutex_unlock(&q_lock);
	snap_fail = data[0] & 2;
	nconn = data[0] & 8 ? NCONN_MAX : 1;
	piece = data[1] ? data[1] : size;
	data += 2;
	size -= 2;

	memset(cs, 0, sizeof(cs));
	for (unsigned i = 0; i < nconn; i++) {
		cs[i].fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (cs[i].fd < 0 || connect(cs[i].fd, (struct sockaddr *)&ep_addr, sizeof(ep_addr)))
			abort();
	}
	/* Send, in pieces, each connection in turn; a refused one stops taking bytes. */
	for (size_t off = 0; off < size; off += piece) {
		size_t n = HL_MIN(piece, size - off);
		for (unsigned i = 0; i < nconn; i++) {
			if (send(cs[i].fd, data + off, n, MSG_NOSIGNAL) < 0)
				cs[i].eof = true;
			conn_read(&cs[i], 0);
		}
	}
	/* Held jobs: let every connection have its turn (suspended or answered), then run them. */
	if (q_hold) {
		t0 = now_ms();
		for (;;) {
			unsigned waiting = 0;
			pthread_mutex_lock(&g_lock);
			waiting = ep->n_pending;
			pthread_mutex_unlock(&g_lock);
			for (unsigned i = 0; i < nconn; i++)
				waiting += cs[i].len > 0 || cs[i].eof;
			if (waiting >= nconn) {
				held_all = true;
				break;
			}
			if (now_ms() - t0 > 200)
				break;
			for (unsigned i = 0; i < nconn; i++)
				conn_read(&cs[i], 1);
		}
		pthread_mutex_lock(&q_lock);
		q_hold = false;
		pthread_cond_broadcast(&q_cond);
		pthread_mutex_unlock(&q_lock);
		/* and their answers (a resumed connection that finds its client's EOF first is
		 * dropped) */
		t0 = now_ms();
		for (;;) {
			unsigned done = 0;
			for (unsigned i = 0; i < nconn; i++) {
				conn_read(&cs[i], 1);
				done += cs[i].len > 0 || cs[i].eof;
			}
			if (done >= nconn || now_ms() - t0 > 200)
				break;
		}
	}
	/*
	 * Read the answers: until the endpoint closes, or stays silent for
	 * IDLE_MS (it waits for a request the client never finished, or for
	 * the next one of a kept-alive connection); then the client closes.
	 * (It never half-closes first: under this harness, libmicrohttpd
	 * 0.9.75 in epoll mode kept a connection whose client half-closed
	 * within a request, and then closed, until its idle timeout,
	 * HL_METRICS_TIMEOUT_S (in poll mode it closed them at once); a run
	 * filled the endpoint's HL_METRICS_MAX_CONNS_ADDR with them and saw
	 * only refusals. Python clients doing the same to a real hotlund,
	 * 0.5 s or 0.02 s between half-close and close, found the slots free.)
	 */
	t0 = now_ms();
	for (unsigned i = 0; i < nconn; i++) {
		uint64_t last = now_ms();
		size_t seen = 0;
		while (conn_read(&cs[i], 20)) {
			if (cs[i].len != seen) {
				seen = cs[i].len;
				last = now_ms();
			} else if (now_ms() - last > IDLE_MS) {
				break;
			}
			if (now_ms() - t0 > 10000) {
				fprintf(stderr,
				        "connection %u: still sending after 10 s (%zu bytes in)\n",
				        i, cs[i].len);
				abort();
			}
		}
		if (getenv("HL_FUZZ_VERBOSE"))
			fprintf(stderr, "connection %u: %zu bytes: %.*s\n", i, cs[i].len,
			        (int)(cs[i].len ? strcspn(cs[i].in, "\r") : 0), cs[i].in);
		check_answer(&cs[i], data, size);
		scraped += cs[i].len && memmem(cs[i].in, cs[i].len, "\nhotlun_", 8) != NULL;
		close(cs[i].fd);
		free(cs[i].in);
	}
	if (held_all && scraped > HL_METRICS_PENDING_MAX) {
		fprintf(stderr, "%u scrapes answered from %u held snapshots at most\n", scraped,
		        HL_METRICS_PENDING_MAX);
		abort();
	}
	if (getenv("HL_FUZZ_VERBOSE")) {
		const union MHD_DaemonInfo *di =
		    MHD_get_daemon_info(ep->mhd, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
		fprintf(stderr, "endpoint: %u connections open\n", di ? di->num_connections : 0);
	}
	/* Every scrape done: nothing pending, no job left behind. */
	t0 = now_ms();
	for (;;) {
		pthread_mutex_lock(&g_lock);
		unsigned pending = ep->n_pending;
		pthread_mutex_unlock(&g_lock);
		pthread_mutex_lock(&q_lock);
		unsigned jobs = q_n + q_running;
		pthread_mutex_unlock(&q_lock);
		if (!pending && !jobs)
			break;
		if (now_ms() - t0 > 5000) {
			fprintf(stderr,
			        "%u scrapes pending, %u jobs queued after the connections closed\n",
			        pending, jobs);
			abort();
		}
		usleep(1000);
	}
	return 0;
}
