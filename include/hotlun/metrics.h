/*
 * metrics.h - the Prometheus endpoint: the control socket's "stats" object
 * rendered as Prometheus text (exposition format 0.0.4), and an HTTP
 * server (libmicrohttpd) that serves it at /metrics. One source, three
 * views: hotlunctl and hotlun-snmp read the same stats object through the
 * control socket. Metric names and labels: docs/metrics.md.
 */
#ifndef HOTLUN_METRICS_H
#define HOTLUN_METRICS_H

#include <jansson.h>
#include <stddef.h>

struct hl_reactor;
struct hl_metrics;

/**
 * Render a stats object (the "stats" command's result, docs/control.md)
 * as Prometheus text: every family with HELP and TYPE, its samples
 * together, counters in base units with _total, histograms in seconds.
 * Members the object lacks are left out, never invented. Caller keeps
 * stats; *text is malloc'ed (the caller frees it). @return 0 or -ENOMEM.
 */
int hl_metrics_render(json_t *stats, char **text, size_t *len);

/**
 * Build the stats object now: called on the reactor given to
 * hl_metrics_start (the daemon's control reactor, where its state may be
 * read without locks). @return a new reference, or NULL (the scrape gets 503).
 */
typedef json_t *(*hl_metrics_snapshot_fn)(void *arg);

/** What the endpoint serves and where. */
struct hl_metrics_config {
	const char *listen;   /* "ADDRESS:PORT" ("[::1]:9520" for IPv6); copied */
	struct hl_reactor *r; /* where snapshot runs; never a data-path reactor */
	hl_metrics_snapshot_fn snapshot;
	void *arg;
};

/* Limits that keep abuse off the daemon (docs/metrics.md, "Limits"). */
#define HL_METRICS_MAX_CONNS      32   /* connections at once; more are refused */
#define HL_METRICS_MAX_CONNS_ADDR 8    /* of those, from one address */
#define HL_METRICS_TIMEOUT_S      10   /* an idle or slow connection is closed after this */
#define HL_METRICS_REQUEST_MAX    8192 /* bytes of request line and headers; more: 431 */
#define HL_METRICS_PENDING_MAX    4    /* snapshots asked of the reactor at once; more: 503 */

/**
 * Listen on cfg->listen and serve GET /metrics (and HEAD) from a thread
 * of the HTTP library: the snapshot is asked of cfg->r with
 * hl_reactor_call and the connection waits suspended meanwhile, so neither
 * that thread nor any data-path reactor blocks on the other. Any other
 * path: 404; other methods: 405. @return 0, or -errno with a message in
 * err (a bad address, a port in use).
 */
int hl_metrics_start(const struct hl_metrics_config *cfg, struct hl_metrics **out, char *err,
                     size_t errlen);

/**
 * Stop listening, answer scrapes still waiting for a snapshot with 503,
 * close every connection and free m (NULL is harmless). Any thread but
 * the HTTP library's; snapshots already posted to the reactor run later
 * and are thrown away.
 */
void hl_metrics_stop(struct hl_metrics *m);

/** The address m listens on, as configured. */
const char *hl_metrics_listen(const struct hl_metrics *m);

#endif
