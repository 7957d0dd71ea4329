/*
 * exporter.c - the daemon's side of the Prometheus endpoint: starts,
 * moves and stops it as [global] metrics_listen says (at start-up and on
 * every change of the running configuration), and gives it daemon_stats
 * as its snapshot, taken on the control reactor like a control request.
 * The HTTP server itself is src/metrics/ (hotlun/metrics.h).
 */
#include "config.h"

#include "daemon/daemon_internal.h"

#include "hotlun/event.h"
#include "hotlun/log.h"
#include "hotlun/metrics.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/*
 * The running endpoint. Changed on the control thread (start, changes)
 * and at shutdown on the main thread: the lock keeps those two apart.
 */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct hl_metrics *g_metrics;

static json_t *snapshot(void *arg)
{
	return daemon_stats(arg);
}

/* "off", "no", "none" or empty: no endpoint. */
static bool listen_off(const char *v)
{
	return !v || !*v || !strcmp(v, "off") || !strcmp(v, "no") || !strcmp(v, "none");
}

/* Replace the endpoint with one on `listen` (off: none). Control thread. */
static void exporter_set(struct daemon *d, const char *listen)
{
	struct hl_metrics_config cfg = {
	    .listen = listen, .r = d->ctl_reactor, .snapshot = snapshot, .arg = d};
	struct hl_metrics *m = NULL, *old;
	char err[256];
	int rc = 0;

	pthread_mutex_lock(&g_lock);
	old = g_metrics;
	g_metrics = NULL;
	/* the old one first: a move to the same port must find it free */
	hl_metrics_stop(old);
	if (!listen_off(listen)) {
		rc = hl_metrics_start(&cfg, &m, err, sizeof(err));
		if (rc)
			HL_ERR("daemon", "%s: no metrics endpoint", err);
		else
			HL_NOTICE("daemon", "metrics: http://%s/metrics", listen);
		g_metrics = m;
	} else if (old) {
		HL_NOTICE("daemon", "metrics endpoint stopped");
	}
	pthread_mutex_unlock(&g_lock);
}

static void start_cb(void *arg)
{
	struct daemon *d = arg;

	exporter_set(d, d->conf->metrics_listen);
}

void daemon_exporter_start(struct daemon *d)
{
	if (d->ctl_reactor && hl_reactor_call(d->ctl_reactor, start_cb, d))
		HL_ERR("daemon", "metrics endpoint: out of memory");
}

void daemon_exporter_apply(struct daemon *d, const struct hl_conf *cur, const struct hl_conf *next)
{
	const char *a = listen_off(cur->metrics_listen) ? NULL : cur->metrics_listen;
	const char *b = listen_off(next->metrics_listen) ? NULL : next->metrics_listen;

	if (!d->ctl_reactor || daemon_str_eq(a, b))
		return;
	exporter_set(d, b);
}

void daemon_exporter_stop(struct daemon *d)
{
	(void)d;
	pthread_mutex_lock(&g_lock);
	hl_metrics_stop(g_metrics);
	g_metrics = NULL;
	pthread_mutex_unlock(&g_lock);
}
