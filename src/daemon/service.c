/*
 * service.c - hotlund under systemd: READY=1, RELOADING=1, STOPPING=1,
 * STATUS= and the watchdog (sd_notify(3)); see service.h.
 *
 * The watchdog proves that every reactor thread goes round its loop, not
 * only that the process exists: the main thread (never a reactor, so a
 * stuck reactor cannot hide itself) reads each reactor's heartbeat, a count
 * of loop passes. An idle reactor sleeps in epoll_wait and would not count,
 * so the main thread also posts it an empty call, which wakes it once; a
 * reactor that is stuck inside a callback leaves that call pending and its
 * heartbeat still. WATCHDOG=1 goes out only when every reactor moved within
 * half the watchdog interval, so systemd restarts a daemon whose reactor
 * hangs (WatchdogSec= in hotlund.service).
 *
 * The status line needs the running configuration, which belongs to the
 * control reactor (daemon_internal.h): it is built there, on a posted call.
 */
#include "config.h"

#include "daemon/service.h"

#include "daemon/caches.h"
#include "daemon/daemon_internal.h"
#include "hotlun/event.h"
#include "hotlun/iscsi.h"
#include "hotlun/log.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>
#endif

#define STATUS_PERIOD_NS (5ull * 1000000000ull)
#define HOOK_OFF         (-2)
#define HOOK_CTL         (-1)

/* What the main thread knows of one reactor between two watchdog checks. */
struct reactor_watch {
	uint64_t seen;        /* heartbeat at the last check */
	uint64_t progress_ns; /* when it last changed */
	bool poked;           /* an empty call is pending on it */
	bool stuck_logged;
};

static bool g_notify;          /* NOTIFY_SOCKET is set (and libsystemd built in) */
static uint64_t g_watchdog_ns; /* WATCHDOG_USEC, 0: no watchdog */
static uint64_t g_next_dog_ns, g_next_status_ns;
static struct reactor_watch *g_watch;
static unsigned g_nwatch;
static atomic_bool g_status_pending; /* a status call is queued on the control reactor */

static int g_stall_index = HOOK_OFF; /* test hook: which reactor SIGUSR1 stalls */
static atomic_bool g_stalled;

static void notify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void notify(const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	if (!g_notify)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
#ifdef HAVE_LIBSYSTEMD
	int rc = sd_notify(0, msg);
	if (rc < 0)
		HL_DEBUG("daemon", "sd_notify: %s", strerror(-rc));
#endif
}

bool daemon_service_init(void)
{
#ifdef HAVE_LIBSYSTEMD
	uint64_t usec = 0;

	g_notify = getenv("NOTIFY_SOCKET") != NULL;
	if (g_notify && sd_watchdog_enabled(0, &usec) > 0 && usec > 0)
		g_watchdog_ns = usec * 1000ull;
#endif
	const char *hook = getenv("HL_TEST_STALL_REACTOR");
	if (hook && *hook) {
		g_stall_index = strcmp(hook, "ctl") == 0 ? HOOK_CTL : atoi(hook);
		HL_NOTICE("daemon", "test hook: SIGUSR1 stalls reactor %s", hook);
	}
	if (g_watchdog_ns)
		HL_INFO("daemon", "watchdog: ping every %llu ms while every reactor makes progress",
			(unsigned long long)(g_watchdog_ns / 4000000));
	return g_stall_index != HOOK_OFF;
}

/* ---- the status line (on the control reactor) ---- */

static void count_session(void *arg, const struct hl_iscsi_session_info *info)
{
	(void)info;
	(*(unsigned *)arg)++;
}

static void status_line(struct daemon *d, char *buf, size_t len)
{
	unsigned sessions = 0;
	uint64_t from_cache = 0, read = 0;
	json_t *caches = daemon_cache_stats_json(), *c;
	const char *name;
	size_t n_caches = caches ? json_object_size(caches) : 0;

	if (d->server)
		hl_iscsi_sessions_list(d->server, count_session, &sessions);
	json_object_foreach(caches, name, c) {
		from_cache += (uint64_t)json_integer_value(json_object_get(c, "bytes_read_cache"));
		read += (uint64_t)json_integer_value(json_object_get(c, "bytes_read"));
	}
	json_decref(caches);

	int n = snprintf(buf, len, "%u session%s, %zu disk%s", sessions, sessions == 1 ? "" : "s",
			 d->conf->n_disks, d->conf->n_disks == 1 ? "" : "s");
	if (n < 0 || (size_t)n >= len)
		return;
	if (!n_caches)
		snprintf(buf + n, len - (size_t)n, ", no cache");
	else if (!read)
		snprintf(buf + n, len - (size_t)n, ", cache hit ratio - (no reads yet)");
	else
		snprintf(buf + n, len - (size_t)n, ", cache hit ratio %.1f%%",
			 100.0 * (double)from_cache / (double)read);
}

static void status_cb(void *arg)
{
	char line[256];

	status_line(arg, line, sizeof(line));
	notify("STATUS=%s", line);
	atomic_store(&g_status_pending, false);
}

static void ready_cb(void *arg)
{
	char line[256];

	status_line(arg, line, sizeof(line));
	notify("READY=1\nSTATUS=%s", line);
}

void daemon_service_ready(struct daemon *d)
{
	if (!g_notify)
		return;
	g_next_status_ns = hl_now_ns() + STATUS_PERIOD_NS;
	if (hl_reactor_call(d->ctl_reactor, ready_cb, d) < 0)
		notify("READY=1");
}

/*
 * What a posted reload runs. One for the process, filled before the first
 * post (the queue's lock orders that write before the control thread's
 * reads) and never written again; nothing is allocated that a stop could
 * strand in the control reactor's queue.
 */
static struct reload_job {
	struct daemon *d;
	bool (*reload)(struct daemon *d);
} g_reload_job;

static void reload_cb(void *arg)
{
	struct reload_job *job = arg;

	if (!job->reload(job->d))
		ready_cb(job->d);
	/* else the disks it removed are closing: daemon_service_reloaded follows */
}

void daemon_service_reloaded(struct daemon *d)
{
	ready_cb(d);
}

void daemon_service_reload(struct daemon *d, bool (*reload)(struct daemon *d))
{
	/* MONOTONIC_USEC: systemd 253+ wants it with RELOADING=1; older ones ignore it */
	notify("RELOADING=1\nMONOTONIC_USEC=%llu", (unsigned long long)(hl_now_ns() / 1000));
	if (!g_reload_job.d) {
		g_reload_job.d = d;
		g_reload_job.reload = reload;
	}
	/* every change runs on the control thread, one at a time */
	if (hl_reactor_call(d->ctl_reactor, reload_cb, &g_reload_job) == 0)
		return;
	HL_ERR("daemon", "SIGHUP: out of memory, not reloaded");
	notify("READY=1");
}

void daemon_service_stopping(void)
{
	atomic_store(&g_stalled, false);
	notify("STOPPING=1\nSTATUS=stopping");
}

/* ---- listening sockets across a restart (systemd's fd store) ---- */

unsigned daemon_service_listen_fds(int *fds, unsigned max)
{
	unsigned n = 0;
#ifdef HAVE_LIBSYSTEMD
	int got = sd_listen_fds(1); /* unsets LISTEN_*: children do not see them */

	for (int i = 0; i < got; i++) {
		if ((unsigned)i < max)
			fds[n++] = SD_LISTEN_FDS_START + i;
		else
			close(SD_LISTEN_FDS_START + i);
	}
	if (n)
		HL_NOTICE("daemon", "%u listening socket(s) handed over by the service manager", n);
#endif
	(void)fds;
	(void)max;
	return n;
}

bool daemon_service_store_fds(const int *fds, unsigned n)
{
#ifdef HAVE_LIBSYSTEMD
	if (!g_notify || !n)
		return false;
	int rc = sd_pid_notify_with_fds(0, 0, "FDSTORE=1\nFDNAME=portal", fds, n);
	if (rc <= 0) {
		HL_INFO("daemon", "listening sockets not handed to the service manager: %s",
			rc < 0 ? strerror(-rc) : "no NOTIFY_SOCKET");
		return false;
	}
	HL_INFO("daemon", "%u listening socket(s) handed to the service manager for the next start",
		n);
	return true;
#else
	(void)fds;
	(void)n;
	return false;
#endif
}

/* ---- the watchdog (main thread) ---- */

static void poke_cb(void *arg)
{
	(void)arg; /* the loop pass that runs this is what counts */
}

static struct hl_reactor *watched(struct daemon *d, unsigned i)
{
	return i < d->n_reactors ? d->reactors[i] : d->ctl_reactor;
}

/* True when every reactor's loop went round within half the watchdog interval. */
static bool reactors_alive(struct daemon *d, uint64_t now)
{
	bool alive = true;

	if (!g_watch) {
		g_nwatch = d->n_reactors + 1;
		g_watch = calloc(g_nwatch, sizeof(*g_watch));
		if (!g_watch)
			return true; /* cannot watch: do not get a healthy daemon killed */
		for (unsigned i = 0; i < g_nwatch; i++) {
			g_watch[i].seen = hl_reactor_heartbeat(watched(d, i));
			g_watch[i].progress_ns = now;
		}
	}
	for (unsigned i = 0; i < g_nwatch; i++) {
		struct reactor_watch *w = &g_watch[i];
		struct hl_reactor *r = watched(d, i);
		uint64_t hb = hl_reactor_heartbeat(r);

		if (hb != w->seen) {
			w->seen = hb;
			w->progress_ns = now;
			w->poked = false;
			if (w->stuck_logged)
				HL_NOTICE("daemon", "%s makes progress again", hl_reactor_name(r));
			w->stuck_logged = false;
		}
		if (!w->poked && hl_reactor_call(r, poke_cb, NULL) == 0)
			w->poked = true;
		if (now - w->progress_ns > g_watchdog_ns / 2) {
			alive = false;
			if (!w->stuck_logged)
				HL_ERR("daemon",
				       "%s has made no progress for %llu ms: watchdog pings stop, "
				       "systemd will restart the service",
				       hl_reactor_name(r),
				       (unsigned long long)((now - w->progress_ns) / 1000000));
			w->stuck_logged = true;
		}
	}
	return alive;
}

int daemon_service_tick_ms(void)
{
	if (!g_notify)
		return -1;
	uint64_t now = hl_now_ns(), next = g_next_status_ns;
	if (g_watchdog_ns && g_next_dog_ns < next)
		next = g_next_dog_ns;
	if (next <= now)
		return 0;
	return (int)((next - now + 999999) / 1000000);
}

void daemon_service_tick(struct daemon *d)
{
	if (!g_notify || !d->ctl_reactor)
		return;
	uint64_t now = hl_now_ns();
	if (g_watchdog_ns && now >= g_next_dog_ns) {
		g_next_dog_ns = now + g_watchdog_ns / 4;
		if (reactors_alive(d, now))
			notify("WATCHDOG=1");
	}
	if (now >= g_next_status_ns) {
		g_next_status_ns = now + STATUS_PERIOD_NS;
		if (!atomic_exchange(&g_status_pending, true) &&
		    hl_reactor_call(d->ctl_reactor, status_cb, d) < 0)
			atomic_store(&g_status_pending, false);
	}
}

/* ---- test hook ---- */

static void stall_cb(void *arg)
{
	struct hl_reactor *r = arg;

	HL_WARN("daemon", "test hook: %s stalls until the next SIGUSR1", hl_reactor_name(r));
	while (atomic_load(&g_stalled))
		usleep(10000);
	HL_WARN("daemon", "test hook: %s released", hl_reactor_name(r));
}

void daemon_service_test_toggle_stall(struct daemon *d)
{
	struct hl_reactor *r;

	if (g_stall_index == HOOK_OFF)
		return;
	if (atomic_exchange(&g_stalled, false))
		return; /* the stalled reactor sees it and returns */
	if (g_stall_index == HOOK_CTL)
		r = d->ctl_reactor;
	else if (g_stall_index >= 0 && (unsigned)g_stall_index < d->n_reactors)
		r = d->reactors[g_stall_index];
	else
		r = NULL;
	if (!r) {
		HL_WARN("daemon", "test hook: no reactor %d", g_stall_index);
		return;
	}
	atomic_store(&g_stalled, true);
	if (hl_reactor_call(r, stall_cb, r) < 0)
		atomic_store(&g_stalled, false);
}
