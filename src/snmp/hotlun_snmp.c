/*
 * hotlun_snmp.c - hotlun-snmp, the AgentX subagent: options, the link to
 * hotlund's control socket (polled on a timer, reconnected when it
 * drops), and net-snmp's main loop. net-snmp code runs only in this
 * process, never in hotlund's data path.
 *
 *   hotlun-snmp [--socket CONTROL_SOCKET | --config FILE] [--agentx AGENTX_SOCKET]
 *
 * Each poll asks hotlund for "version", "stats", each cache's settings and
 * the iSCSI portals and targets (for ISCSI-MIB), builds a new snapshot
 * (snmp_model.c), compares it with the previous one for notifications,
 * and swaps it in; requests are served from the snapshot until the next
 * poll (snmp_agent.c).
 */
#include "config.h"

#include "hotlun/ctl.h"
#include "hotlun/log.h"
#include "snmp/snmp_internal.h"

#include <net-snmp/net-snmp-config.h>
#include <net-snmp/net-snmp-includes.h>
#include <net-snmp/agent/net-snmp-agent-includes.h>

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_CONFIG HL_SYSCONFDIR "/hotlun/hotlun.conf"
#define DEFAULT_SOCKET HL_LOCALSTATEDIR "/lib/hotlun/hotlund.sock"
#define DEFAULT_AGENTX "/var/agentx/master" /* net-snmp's standard AgentX socket */
#define CTL_TIMEOUT_S  2

static volatile sig_atomic_t g_stop;
static const char *g_socket;
static int g_fd = -1;
static bool g_was_up = true; /* so the first failure is logged */
static struct snmp_snapshot g_snap_store[2];
static struct snmp_snapshot *g_snap = &g_snap_store[0];
static struct snmp_watch g_watch;
static unsigned g_poll_ms = 1000;
static int64_t g_connected_at; /* hlCountersResetAt: counters may have restarted then */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void ctl_close(void)
{
	if (g_fd >= 0)
		close(g_fd);
	g_fd = -1;
}

static int ctl_open(char *err, size_t errlen);

/* One request; the "result" member (new reference) or NULL, with err set. */
static json_t *ctl_result(const char *cmd, json_t *args, char *err, size_t errlen)
{
	json_t *reply = NULL, *res;
	int rc = hl_ctl_call(g_fd, cmd, args, &reply);

	if (rc == -ENOTCONN) {
		/* a poll interval over hotlund's idle timeout: it closed us, nothing was sent */
		ctl_close();
		rc = ctl_open(err, errlen) ? -ENOTCONN : hl_ctl_call(g_fd, cmd, args, &reply);
	}
	json_decref(args);
	if (rc) {
		snprintf(err, errlen, "%s: %s", cmd, strerror(-rc));
		ctl_close();
		return NULL;
	}
	if (!json_is_true(json_object_get(reply, "ok"))) {
		const char *e = json_string_value(json_object_get(reply, "error"));
		snprintf(err, errlen, "%s: %s", cmd, e ? e : "failed");
		json_decref(reply);
		return NULL;
	}
	res = json_incref(json_object_get(reply, "result"));
	json_decref(reply);
	if (!res)
		snprintf(err, errlen, "%s: no result", cmd);
	return res;
}

static int ctl_open(char *err, size_t errlen)
{
	struct timeval tv = {.tv_sec = CTL_TIMEOUT_S};

	if (g_fd >= 0)
		return 0;
	g_fd = hl_ctl_connect(g_socket);
	if (g_fd < 0) {
		snprintf(err, errlen, "cannot connect to %s: %s", g_socket, strerror(-g_fd));
		g_fd = -1;
		return -1;
	}
	g_connected_at = (int64_t)time(NULL);
	/* A stuck hotlund must not stall the master's requests for long. */
	setsockopt(g_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(g_fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	return 0;
}

/*
 * The ISCSI-MIB side: portals (from the global parameters) and targets
 * with their aliases. A refused request only leaves those tables empty;
 * -1 with err set, and g_fd < 0 when the link broke.
 */
static int fetch_iscsi(struct snmp_snapshot *out, char *err, size_t errlen)
{
	json_t *global, *tree, *targets = json_object(), *child;
	size_t i;
	int rc = -1;

	global = ctl_result("get", json_pack("{s:s}", "path", "/"), err, errlen);
	if (!global)
		goto out;
	tree = ctl_result("ls", json_pack("{s:s}", "path", "/iscsi"), err, errlen);
	if (!tree)
		goto out;
	json_array_foreach(json_object_get(tree, "children"), i, child)
	{
		const char *iqn = json_string_value(json_object_get(child, "name"));
		char path[512];
		json_t *t;
		if (!iqn)
			continue;
		snprintf(path, sizeof(path), "/iscsi/%s", iqn);
		t = ctl_result("get", json_pack("{s:s}", "path", path), err, errlen);
		if (!t && g_fd < 0)
			break;
		json_object_set_new(targets, iqn, t ? t : json_object());
	}
	json_decref(tree);
	if (g_fd >= 0 && snmp_snapshot_add_iscsi(out, global, targets) == 0)
		rc = 0;
out:
	json_decref(global);
	json_decref(targets);
	return rc;
}

/* Ask hotlund for everything a snapshot needs; 0 or -1 with err set. */
static int fetch(struct snmp_snapshot *out, char *err, size_t errlen)
{
	json_t *version = NULL, *stats = NULL, *confs = json_object(), *v;
	const char *name;
	int rc = -1;

	if (ctl_open(err, errlen))
		goto out;
	version = ctl_result("version", NULL, err, errlen);
	if (!version)
		goto out;
	stats = ctl_result("stats", NULL, err, errlen);
	if (!stats)
		goto out;
	json_object_foreach(json_object_get(stats, "caches"), name, v)
	{
		char path[512];
		json_t *c;
		snprintf(path, sizeof(path), "/caches/%s", name);
		c = ctl_result("get", json_pack("{s:s}", "path", path), err, errlen);
		if (!c) {
			if (g_fd < 0)
				goto out; /* the link broke; a refused get is only a missing field
				           */
			continue;
		}
		json_object_set_new(confs, name, c);
	}
	if (snmp_snapshot_build(stats, version, confs, out)) {
		snprintf(err, errlen, "stats: unexpected reply");
		goto out;
	}
	if (fetch_iscsi(out, err, errlen) && g_fd < 0) {
		snmp_snapshot_free(out);
		goto out;
	}
	out->connected_at = g_connected_at;
	rc = 0;
out:
	json_decref(version);
	json_decref(stats);
	json_decref(confs);
	return rc;
}

static void poll_once(unsigned int reg, void *arg)
{
	struct snmp_snapshot *next =
	    g_snap == &g_snap_store[0] ? &g_snap_store[1] : &g_snap_store[0];
	char err[512] = "";

	(void)reg;
	(void)arg;
	snmp_snapshot_free(next);
	if (fetch(next, err, sizeof(err)) == 0) {
		if (!g_was_up)
			HL_NOTICE("snmp", "connected to hotlund %s at %s", next->version, g_socket);
		g_was_up = true;
		snmp_watch_update(&g_watch, next, now_s(), snmp_agent_notify, NULL);
	} else {
		if (g_was_up)
			HL_WARN("snmp", "hotlund unreachable (%s); retrying every poll", err);
		g_was_up = false;
		snmp_snapshot_free(next); /* unreachable: empty tables */
	}
	/* Between requests (alarms never run inside a PDU): safe to swap. */
	g_snap = next;
	snmp_snapshot_free(next == &g_snap_store[0] ? &g_snap_store[1] : &g_snap_store[0]);
}

static void on_signal(int sig)
{
	(void)sig;
	g_stop = 1;
}

/*
 * net-snmp's own messages through our sink, so that in syslog and the
 * journal they carry a priority and this program's name like ours do.
 */
static int netsnmp_log(int major, int minor, void *server_arg, void *client_arg)
{
	const struct snmp_log_message *m = server_arg;
	int level = m->priority < HL_LOG_ERR ? HL_LOG_ERR : m->priority;
	size_t len = strlen(m->msg);

	(void)major, (void)minor, (void)client_arg;
	while (len && (m->msg[len - 1] == '\n' || m->msg[len - 1] == '\r'))
		len--;
	if (len && level <= hl_log_level)
		hl_log_write(level, "net-snmp", "%.*s", (int)len, m->msg);
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "Usage: hotlun-snmp [options]\n"
	           "An AgentX subagent serving HOTLUN-MIB from hotlund's control socket.\n"
	           "  --socket PATH     hotlund's control socket (default: control_socket of\n"
	           "                    the config file, else " DEFAULT_SOCKET ")\n"
	           "  --config FILE     hotlund's config file (default " DEFAULT_CONFIG ")\n"
	           "  --agentx SOCKET   the master's AgentX socket (default " DEFAULT_AGENTX ";\n"
	           "                    also tcp:HOST:PORT)\n"
	           "  --interval MS     poll hotlund every MS milliseconds (default 1000)\n"
	           "  --ping SECONDS    check the master every SECONDS, reconnect (default 5)\n"
	           "  --log-level L     err, warning, notice, info, debug (default notice)\n"
	           "  --syslog          log to syslog instead of stderr\n"
	           "  --no-iscsi-mib    serve HOTLUN-MIB only, not the standard ISCSI-MIB\n"
	           "  --help, --version\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"socket", required_argument, NULL, 's'},
	    {"config", required_argument, NULL, 'c'},
	    {"agentx", required_argument, NULL, 'x'},
	    {"interval", required_argument, NULL, 'i'},
	    {"ping", required_argument, NULL, 'p'},
	    {"log-level", required_argument, NULL, 'l'},
	    {"syslog", no_argument, NULL, 'S'},
	    {"no-iscsi-mib", no_argument, NULL, 'I'},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {NULL, 0, NULL, 0},
	};
	const char *config = NULL, *agentx = DEFAULT_AGENTX;
	char *from_conf = NULL, *end;
	int level = HL_LOG_NOTICE, ping = 5, c;
	bool use_syslog = false, iscsi_mib = true;
	long n;

	while ((c = getopt_long(argc, argv, "s:c:x:i:p:l:SIhV", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			g_socket = optarg;
			break;
		case 'c':
			config = optarg;
			break;
		case 'x':
			agentx = optarg;
			break;
		case 'i':
			n = strtol(optarg, &end, 10);
			if (*end || n < 100 || n > 3600000) {
				fprintf(stderr, "hotlun-snmp: --interval: 100..3600000 ms\n");
				return 2;
			}
			g_poll_ms = (unsigned)n;
			break;
		case 'p':
			n = strtol(optarg, &end, 10);
			if (*end || n < 1 || n > 3600) {
				fprintf(stderr, "hotlun-snmp: --ping: 1..3600 s\n");
				return 2;
			}
			ping = (int)n;
			break;
		case 'l':
			level = hl_log_level_parse(optarg);
			if (level < 0) {
				fprintf(stderr, "hotlun-snmp: unknown log level %s\n", optarg);
				return 2;
			}
			break;
		case 'S':
			use_syslog = true;
			break;
		case 'I':
			iscsi_mib = false;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("hotlun-snmp %s\n", PACKAGE_VERSION);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		usage(stderr);
		return 2;
	}
	/* its own name in syslog and the journal, not the daemon's */
	hl_log_set_ident("hotlun-snmp");
	hl_log_open(use_syslog, level);
	if (!g_socket) {
		char err[512];
		from_conf =
		    hl_ctl_socket_from_config(config ? config : DEFAULT_CONFIG, err, sizeof(err));
		g_socket = from_conf ? from_conf : DEFAULT_SOCKET;
		if (err[0])
			HL_WARN("snmp", "%s; watching %s", err, g_socket);
	}

	struct sigaction sa = {.sa_handler = on_signal}; /* no SA_RESTART: wake the select */
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	/* The subagent needs no MIB files; don't let net-snmp look for any. */
	setenv("MIBS", "", 1);
	if (use_syslog || hl_log_stderr_is_journal()) {
		snmp_register_callback(SNMP_CALLBACK_LIBRARY, SNMP_CALLBACK_LOGGING, netsnmp_log,
				       NULL);
		snmp_enable_calllog();
	} else
		snmp_enable_stderrlog();
	netsnmp_ds_set_boolean(NETSNMP_DS_APPLICATION_ID, NETSNMP_DS_AGENT_ROLE, 1);
	netsnmp_ds_set_string(NETSNMP_DS_APPLICATION_ID, NETSNMP_DS_AGENT_X_SOCKET, agentx);
	init_agent("hotlun-snmp");
	/*
	 * Alarms (the poll) must run from the main loop, never from SIGALRM in
	 * the middle of a request: the snapshot swap relies on it. init_agent
	 * sets this already; say it here, where the reliance is.
	 */
	netsnmp_ds_set_boolean(NETSNMP_DS_LIBRARY_ID, NETSNMP_DS_LIB_ALARM_DONT_USE_SIG, 1);
	/*
	 * Ping the master and reopen the session when it went away. After
	 * init_agent, which sets its own default (15 s); an agentxPingInterval
	 * line in hotlun-snmp.conf, read by init_snmp, still wins.
	 */
	netsnmp_ds_set_int(NETSNMP_DS_APPLICATION_ID, NETSNMP_DS_AGENT_AGENTX_PING_INTERVAL, ping);
	if (snmp_agent_register(&g_snap, &g_poll_ms, iscsi_mib)) {
		HL_ERR("snmp", "cannot register HOTLUN-MIB with the agent library");
		return 1;
	}
	init_snmp("hotlun-snmp");
	HL_NOTICE("snmp", "hotlun-snmp %s: control socket %s, AgentX %s, poll every %u ms",
	          PACKAGE_VERSION, g_socket, agentx, g_poll_ms);

	poll_once(0, NULL);
	struct timeval iv = {.tv_sec = g_poll_ms / 1000, .tv_usec = (g_poll_ms % 1000) * 1000};
	snmp_alarm_register_hr(iv, SA_REPEAT, poll_once, NULL);

	while (!g_stop)
		agent_check_and_process(1);

	HL_NOTICE("snmp", "stopping");
	snmp_shutdown("hotlun-snmp");
	ctl_close();
	snmp_snapshot_free(&g_snap_store[0]);
	snmp_snapshot_free(&g_snap_store[1]);
	snmp_watch_free(&g_watch);
	free(from_conf);
	return 0;
}
