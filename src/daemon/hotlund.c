/*
 * hotlund.c - the daemon: reads the config, opens origins, creates logical
 * units and targets, starts the reactors and portals, and waits for signals.
 *
 * Signals are blocked in every thread and taken synchronously here with
 * sigwaitinfo(), so no handler ever runs inside the data path.
 */
#include "config.h"

#include "hotlun/cache_engine.h"
#include "hotlun/conf.h"
#include "hotlun/ctl.h"
#include "hotlun/event.h"
#include "hotlun/iscsi.h"
#include "hotlun/log.h"
#include "hotlun/origin.h"
#include "hotlun/scsi.h"
#include "hotlun/util.h"

#include "daemon/daemon_internal.h"
#include "daemon/service.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/*
 * On SIGTERM: the Time2Wait the Logout Responses ask initiators to wait
 * before they come back (a restart of hotlund takes well under a second);
 * how long they get to log out is [global] logout_timeout.
 */
#define DRAIN_TIME2WAIT_S 1
/* A planned stop with peers: how long to wait for a peer to take the disks (a standby
 * looks every 250 ms and records its ownership before it diffs its cache). */
#define OWNER_HANDOVER_WAIT_MS 3000
/* ... and how long it then answers as a standby before it asks its sessions to log out */
#define OWNER_LINGER_MS 2500

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: hotlund --config FILE [--log-level LEVEL] [--syslog]\n"
		"       hotlund --check-config FILE\n"
		"       hotlund --demo DIR [--portal ADDR:PORT] [--metrics ADDR:PORT]\n"
		"       hotlund --version | --help\n"
		"\n"
		"  -c, --config FILE        run the target described by FILE (foreground)\n"
		"  -t, --check-config FILE  check FILE, print the first error as FILE:LINE, exit\n"
		"      --demo DIR           run a demo target from the built-in configuration,\n"
		"                           keeping its origin file and state under DIR\n"
		"      --portal ADDR:PORT   with --demo: where to listen (default 127.0.0.1:3260)\n"
		"      --metrics ADDR:PORT  with --demo: serve Prometheus metrics there (default off)\n"
		"  -l, --log-level LEVEL    err, warn, notice (default), info or debug\n"
		"      --syslog             log to syslog instead of stderr\n"
		"  -V, --version            print the version and the compiled-in backends\n"
		"\n"
		"SIGTERM or SIGINT stops the daemon cleanly; SIGHUP reloads the configuration file.\n");
}

static void print_version(void)
{
	printf("hotlund %s\norigin backends:", PACKAGE_VERSION);
	for (const struct hl_origin_ops *const *b = hl_origin_backends; *b; b++)
		printf(" %s", (*b)->name);
	printf("\n");
#ifndef HAVE_RBD
	printf("rbd: not built (configure found no librbd; install librbd-dev and rebuild)\n");
#endif
#ifdef HAVE_LIBSYSTEMD
	printf("systemd: sd_notify (readiness, reload, watchdog, status)\n");
#else
	printf("systemd: not built (configure found no libsystemd; install libsystemd-dev)\n");
#endif
}

/* ---- the demo: a built-in config with its files under one folder ---- */

/* A sparse file of 1 GiB, created on first use and kept afterwards. */
static int demo_origin_file(const char *dir, const char *name)
{
	char path[4096];
	struct stat st;
	int fd, rc = 0;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = -errno;
		fprintf(stderr, "hotlund: %s: %s\n", path, strerror(-rc));
		return rc;
	}
	if (fstat(fd, &st) == 0 && st.st_size == 0 && ftruncate(fd, 1ll << 30) < 0) {
		rc = -errno;
		fprintf(stderr, "hotlund: %s: %s\n", path, strerror(-rc));
	}
	close(fd);
	return rc;
}

/*
 * The demo shows what hotlun is for: LUN 0 is a slow origin (throttled to
 * 200 IOPS, a SATA-class SAN LUN) behind a 256 MiB cache file with 4 KiB
 * blocks; LUN 1 is the same kind of origin with no cache, to compare with.
 * The two origins are separate files: two disks on one file would be two
 * writers the cache knows nothing about.
 */
static int demo_prepare(const char *dir, const char *portal, const char *metrics, char **out_text)
{
	int rc;

	if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
		fprintf(stderr, "hotlund: cannot create %s: %s\n", dir, strerror(errno));
		return -errno;
	}
	/* its files are created by name, as the user who runs the demo (root, often) */
	char why[4096 + 128];
	if ((rc = daemon_dir_check(dir, why, sizeof(why)))) {
		fprintf(stderr,
		        "hotlund: --demo %s: %s: another user could make hotlund write through its "
		        "links; use a folder of your own\n",
		        dir, why);
		return rc;
	}
	if ((rc = demo_origin_file(dir, "demo-origin.img")) ||
	    (rc = demo_origin_file(dir, "demo-origin-direct.img")))
		return rc;
	if (asprintf(out_text,
		     "[global]\n"
		     "portal = %s\n"
		     "state_dir = %s\n"
		     "%s%s%s"
		     "\n"
		     "[cache demo-ssd]\n"
		     "device = %s/demo-cache.img\n"
		     "size = 256M\n"
		     "block_size = 4K\n"
		     "\n"
		     "[disk demo]\n"
		     "origin = file:%s/demo-origin.img\n"
		     "origin_iops = 200\n"
		     "cache = demo-ssd\n"
		     "\n"
		     "[disk direct]\n"
		     "origin = file:%s/demo-origin-direct.img\n"
		     "origin_iops = 200\n"
		     "\n"
		     "[target iqn.2026-11.io.hotlun:demo]\n"
		     "lun.0 = demo\n"
		     "lun.1 = direct\n"
		     "allow = ALL\n",
		     portal, dir, metrics ? "metrics_listen = " : "", metrics ? metrics : "",
		     metrics ? "\n" : "", dir, dir, dir) < 0)
		return -ENOMEM;
	return 0;
}

/* ---- start and stop ---- */

/*
 * Every session and every disk takes a descriptor; the usual soft limit of
 * 1,024 is far below what a target serves (a config of ~1,010 disks did not
 * start). Raise the soft limit to the hard one before anything opens, and
 * say how much room that leaves. Nothing in hotlund uses select(), so
 * descriptors above 1,023 are fine.
 */
static void raise_nofile_limit(void)
{
	struct rlimit rl;
	rlim_t was;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0) {
		HL_WARN("daemon", "getrlimit(RLIMIT_NOFILE): %s", strerror(errno));
		return;
	}
	was = rl.rlim_cur;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
			HL_WARN("daemon", "cannot raise the open-file limit from %llu to %llu: %s",
				(unsigned long long)was, (unsigned long long)rl.rlim_max,
				strerror(errno));
			rl.rlim_cur = was;
		}
	}
	/* what portals leave free for the daemon's own files (hl_iscsi_fd_reserve) */
	unsigned reserve = hl_iscsi_fd_reserve(rl.rlim_cur > UINT32_MAX / 2 ? UINT32_MAX / 2
	                                                                    : (unsigned)rl.rlim_cur);
	unsigned long long room =
	    rl.rlim_cur > reserve ? (unsigned long long)(rl.rlim_cur - reserve) : 0;
	if (rl.rlim_cur != was)
		HL_NOTICE("daemon",
			  "open-file limit raised from %llu to %llu (the hard limit): room for about "
			  "%llu sessions and disks together",
			  (unsigned long long)was, (unsigned long long)rl.rlim_cur, room);
	else
		HL_NOTICE("daemon",
			  "open-file limit %llu (the hard limit): room for about %llu sessions and "
			  "disks together",
			  (unsigned long long)rl.rlim_cur, room);
}

/* Reactors, workers and the (empty) iSCSI server; reads loaded, does not keep it. */
static int start_threads(struct daemon *d, const struct hl_conf *loaded)
{
	struct hl_iscsi_server_config sc;
	int rc;

	rc = daemon_state_dir_init(loaded->state_dir, &d->install_id);
	if (rc)
		return rc;

	/*
	 * [global] cpus pins reactor i to the i-th CPU of the list (round
	 * robin): e.g. onto the CPUs that take the cache device's completion
	 * interrupts, so that a hit's read completes on its reactor's CPU
	 * (docs/service.md, "CPUs and interrupts").
	 */
	unsigned cpus[HL_CPU_LIST_MAX];
	int n_cpus = loaded->cpus ? hl_parse_cpu_list(loaded->cpus, cpus, HL_ARRAY_SIZE(cpus)) : 0;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	if (n_cpus < 0)
		return n_cpus; /* the parser checked it: not reached */
	d->n_reactors = loaded->threads ? loaded->threads
	                : n_cpus        ? (unsigned)n_cpus
	                                : (unsigned)(ncpu > 0 ? ncpu : 1);
	d->reactors = calloc(d->n_reactors, sizeof(*d->reactors));
	if (!d->reactors)
		return -ENOMEM;
	for (unsigned i = 0; i < d->n_reactors; i++) {
		char name[24];
		snprintf(name, sizeof(name), "reactor%u", i);
		rc = hl_reactor_create(&d->reactors[i], name);
		if (rc)
			return rc;
		hl_reactor_set_poll_us(d->reactors[i], daemon_poll_us(loaded));
		if (!n_cpus) {
			rc = hl_reactor_start(d->reactors[i]);
		} else {
			rc = hl_reactor_start_on(d->reactors[i], cpus[i % (unsigned)n_cpus]);
			if (rc == -EINVAL)
				HL_ERR("daemon", "cpus = %s: %s cannot run on CPU %u (offline, or not "
				       "allowed to hotlund)",
				       loaded->cpus, name, cpus[i % (unsigned)n_cpus]);
		}
		if (rc)
			return rc;
	}
	if (n_cpus)
		HL_NOTICE("daemon", "%u reactors on CPUs %s", d->n_reactors, loaded->cpus);
	rc = hl_workers_start(4);
	if (rc)
		return rc;

	memset(&sc, 0, sizeof(sc));
	sc.reactors = d->reactors;
	sc.n_reactors = d->n_reactors;
	sc.nop_interval_s = 30;
	sc.nop_timeout_s = 30;
	daemon_login_limits(loaded, &sc.limits);
	daemon_discovery_chap(loaded, &sc.discovery_chap);
	sc.write_buffer_limit = loaded->write_buffer_limit;
	sc.send_uring = daemon_send_uring(loaded);
	sc.gateway = (uint16_t)loaded->gateway; /* ALUA: each gateway one target port group */
	rc = hl_iscsi_server_create(&sc, &d->server);
	explicit_bzero(&sc.discovery_chap, sizeof(sc.discovery_chap)); /* the server has its copy */
	if (rc == 0) {
		/* the previous process's listening sockets, from systemd's fd store */
		int fds[64];
		unsigned n = daemon_service_listen_fds(fds, 64);
		hl_iscsi_server_inherit(d->server, fds, n);
		/* a PREEMPT AND ABORT through another gateway aborts tasks here (hotlun/scsi.h) */
		hl_scsi_set_aborter(&(struct hl_scsi_aborter){hl_iscsi_abort_nexuses, d->server});
	}
	if (rc == 0) {
		struct hl_iscsi_write_stats ws;
		hl_iscsi_write_stats(d->server, &ws);
		HL_NOTICE("daemon",
		          "write buffer limit %llu MiB for unfinished WRITEs (%llu MiB per "
		          "connection)%s",
		          (unsigned long long)(ws.limit >> 20), (unsigned long long)(ws.conn_limit >> 20),
		          sc.write_buffer_limit ? "" : ", the default from physical memory");
		hl_scsi_scratch_set_limit(loaded->scratch_buffer_limit);
		HL_NOTICE("daemon", "scratch buffer limit %llu MiB for per-command buffers%s",
		          (unsigned long long)(daemon_scratch_limit(loaded) >> 20),
		          loaded->scratch_buffer_limit ? "" : " (the default)");
	}
	return rc;
}

/* Takes loaded. */
static int start(struct daemon *d, struct hl_conf *loaded, bool print_url)
{
	char err[1024];
	int rc;

	/*
	 * Before anything is opened: a second hotlund given the same control
	 * socket would take the path from the one that runs (and delete it when
	 * it stops), leaving that one without hotlunctl or SNMP.
	 */
	rc = daemon_control_dir_check(loaded->control_socket, true);
	if (rc) {
		hl_conf_free(loaded);
		return rc;
	}
	rc = hl_ctl_socket_in_use(loaded->control_socket);
	if (rc) {
		if (rc > 0)
			HL_ERR("daemon", "control socket %s answers: another hotlund runs with it; "
			       "not starting (stop that one, or give this one its own "
			       "control_socket)", loaded->control_socket);
		else
			HL_ERR("daemon", "control socket %s: %s", loaded->control_socket,
			       rc == -EEXIST ? "exists and is not a socket" : strerror(-rc));
		hl_conf_free(loaded);
		return rc > 0 ? -EADDRINUSE : rc;
	}
	rc = start_threads(d, loaded);
	if (rc) {
		HL_ERR("daemon", "start-up: %s", strerror(-rc));
		hl_conf_free(loaded);
		return rc;
	}
	/* The running state starts empty; the file is applied like any later change. */
	d->conf = daemon_conf_skeleton(loaded);
	if (!d->conf) {
		hl_conf_free(loaded);
		return -ENOMEM;
	}
	rc = daemon_apply(d, loaded, false, err, sizeof(err));
	daemon_closes_start(d, NULL, false, rc, err);   /* nothing to close yet; in line if so */
	hl_iscsi_server_inherit_done(d->server); /* sockets no portal took */
	if (rc) {
		HL_ERR("daemon", "%s", err);
		return rc;
	}
	hl_iscsi_server_check_room(d->server); /* disks and portals are open: what is left */
	if (print_url && d->conf->n_targets && d->conf->n_portals) {
		printf("iSCSI target ready: iscsi://%s/%s/0\n", d->conf->portals[0],
		       d->conf->targets[0].name);
		fflush(stdout);
	}
	/*
	 * From daemon_control_start() on, d->conf belongs to the control thread:
	 * a client may apply a change (and free the old conf) at once. Copy what
	 * the start-up notice needs before that.
	 */
	char ctl_path[1024];
	hl_strlcpy(ctl_path, d->conf->control_socket ? d->conf->control_socket : "(none)",
		   sizeof(ctl_path));
	rc = daemon_control_start(d);
	if (rc == 0) {
		HL_NOTICE("daemon", "hotlund %s running (%u reactor thread(s), control socket %s)",
			  PACKAGE_VERSION, d->n_reactors, ctl_path);
		/* daemon_apply opened every cache and portal synchronously */
		daemon_service_ready(d);
		daemon_exporter_start(d);
	}
	return rc;
}

/* How long a stop waits for the caches' requests in flight (fills, write-backs). */
static void stop(struct daemon *d)
{
	daemon_exporter_stop(d);
	/* disks a change removed: their closes answer on the control reactor */
	daemon_closes_wait(d);
	daemon_control_stop(d);
	hl_scsi_set_aborter(NULL); /* returns once no abort reaches the server any more */
	if (d->server)
		hl_iscsi_server_destroy(d->server);
	/*
	 * No initiator is left, but the caches may still write fills of reads
	 * that replied: those finish on the reactors, so before they stop
	 * (a ring closed with I/O in it never calls back; the requests leak).
	 */
	daemon_caches_drain(hl_cache_drain_bound_ms()); /* 15 s; what is left is abandoned */
	for (unsigned i = 0; i < d->n_reactors; i++) {
		if (d->reactors[i]) {
			hl_reactor_stop(d->reactors[i]);
			hl_reactor_join(d->reactors[i]);
		}
	}
	daemon_caches_quiesce(); /* no cache posts to a reactor about to be destroyed */
	/*
	 * Bounded like the drain: a worker whose call does not return (a file
	 * origin or device that stopped answering) may still use its origin and
	 * post to its reactor, so then nothing is freed: the process exits with
	 * the reactors, disks and caches as they are. A cache not closed keeps
	 * the records of its last sync, as after a crash, which the restart
	 * handles like one (ARCHITECTURE.md invariant 5; docs/cache-format.md).
	 */
	unsigned stuck = hl_workers_stop_within(hl_cache_drain_bound_ms());
	if (stuck) {
		HL_WARN("daemon",
		        "stop: %u worker thread(s) stuck in a call: the disks, caches and reactors "
		        "are left to the process exit (nothing freed under them)",
		        stuck);
		return;
	}
	for (unsigned i = 0; i < d->n_reactors; i++)
		hl_reactor_destroy(d->reactors[i]);
	free(d->reactors);
	daemon_release(d);
	daemon_caches_close();
	hl_conf_free(d->conf);
	free(d->config_path);
}

/* The signals the main thread takes (blocked everywhere else). */
static void signal_set(sigset_t *set, bool test_hook)
{
	sigemptyset(set);
	sigaddset(set, SIGTERM);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGHUP);
	if (test_hook)
		sigaddset(set, SIGUSR1);
}

static int wait_for_signals(struct daemon *d, bool test_hook)
{
	sigset_t set;
	siginfo_t si;

	signal_set(&set, test_hook);
	for (;;) {
		/* between signals: the watchdog and status line (service.c) */
		daemon_service_tick(d);
		int ms = daemon_service_tick_ms(), sig;
		if (ms < 0) {
			sig = sigwaitinfo(&set, &si);
		} else {
			struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
			sig = sigtimedwait(&set, &si, &ts);
		}
		if (sig < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -errno;
		}
		if (sig == SIGUSR1) {
			daemon_service_test_toggle_stall(d);
			continue;
		}
		if (sig == SIGHUP) {
			if (!d->config_path)
				HL_NOTICE("daemon", "SIGHUP: no configuration file to reload");
			else
				daemon_service_reload(d, daemon_reload);
			continue;
		}
		HL_NOTICE("daemon", "%s: stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
		daemon_service_stopping();
		return 0;
	}
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"config", required_argument, NULL, 'c'},
		{"check-config", required_argument, NULL, 't'},
		{"demo", required_argument, NULL, 'D'},
		{"portal", required_argument, NULL, 'P'},
		{"metrics", required_argument, NULL, 'M'},
		{"log-level", required_argument, NULL, 'l'},
		{"syslog", no_argument, NULL, 'S'},
		{"version", no_argument, NULL, 'V'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *config = NULL, *check = NULL, *demo = NULL, *portal = "127.0.0.1:3260";
	const char *metrics = NULL;
	int log_level = -1, opt, rc;
	bool use_syslog = false;
	char err[1024];
	struct daemon d;
	struct hl_conf *loaded = NULL;

	/*
	 * The configuration holds CHAP secrets: no core dump of this process
	 * (one held the secret five times), and no ptrace or /proc/PID/mem by
	 * another process of its user (its /proc files become root's). Before
	 * anything is read. Freed JSON (control requests) is wiped.
	 */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		fprintf(stderr, "hotlund: prctl(PR_SET_DUMPABLE): %s\n", strerror(errno));
	hl_ctl_json_wipe();
	/*
	 * Nothing hotlund creates is for other users: the APTPL files hold
	 * reservation keys and initiator names, the cache maps every origin's
	 * path, a demo's origins the initiators' data. hotlund.service sets
	 * UMask=0027; started by hand under 022 they were all 0644.
	 */
	umask(umask(0) | 077);

	while ((opt = getopt_long(argc, argv, "c:t:l:Vh", longopts, NULL)) != -1) {
		switch (opt) {
		case 'c':
			config = optarg;
			break;
		case 't':
			check = optarg;
			break;
		case 'D':
			demo = optarg;
			break;
		case 'P':
			portal = optarg;
			break;
		case 'M':
			metrics = optarg;
			break;
		case 'l':
			log_level = hl_log_level_parse(optarg);
			if (log_level < 0) {
				fprintf(stderr, "hotlund: unknown log level '%s'\n", optarg);
				return 2;
			}
			break;
		case 'S':
			use_syslog = true;
			break;
		case 'V':
			print_version();
			return 0;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc || (!!config + !!check + !!demo) != 1) {
		usage(stderr);
		return 2;
	}

	memset(&d, 0, sizeof(d));
	hl_list_init(&d.disks);
	hl_list_init(&d.targets);
	hl_list_init(&d.retired_disks);
	hl_list_init(&d.retired_targets);
	hl_list_init(&d.closing);
	pthread_mutex_init(&d.close_mu, NULL);
	pthread_cond_init(&d.close_cv, NULL);
	hl_log_set_ident("hotlund");
	hl_log_open(false, HL_LOG_WARN);
	if (demo) {
		char *text = NULL;
		if (demo_prepare(demo, portal, metrics, &text))
			return 1;
		rc = hl_conf_parse(text, strlen(text), "<demo>", &loaded, err, sizeof(err));
		free(text);
		if (rc == 0 && asprintf(&d.config_path, "%s/hotlun.conf", demo) < 0)
			rc = -ENOMEM;
	} else {
		rc = daemon_conf_file_load(check ? check : config, &loaded, err, sizeof(err));
		if (rc == 0 && config && !(d.config_path = realpath(config, NULL))) {
			rc = -errno;
			snprintf(err, sizeof(err), "%s: %s", config, strerror(errno));
			hl_conf_free(loaded);
		}
	}
	/* what start-up would trip over in the files it names, with FILE:LINE, before it starts */
	if (rc == 0 && (rc = daemon_preflight(loaded, err, sizeof(err))) != 0)
		hl_conf_free(loaded);
	if (rc) {
		/* an error priority in the journal, so -p err shows why a start failed */
		fprintf(stderr, "%shotlund: %s\n", hl_log_stderr_is_journal() ? "<3>" : "", err);
		return 1;
	}
	if (check) {
		printf("%s: OK (%zu disk(s), %zu cache(s), %zu target(s), %zu portal(s))\n", check,
		       loaded->n_disks, loaded->n_caches, loaded->n_targets, loaded->n_portals);
		hl_conf_free(loaded);
		return 0;
	}

	if (log_level >= 0)
		loaded->log_level = log_level;
	hl_log_open(use_syslog, loaded->log_level);
	raise_nofile_limit();
	bool test_hook = daemon_service_init();

	/* Block the signals we wait for in every thread created from here on. */
	sigset_t set;
	signal_set(&set, test_hook);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);

	unsigned gateway = loaded->gateway; /* not changed at run time (docs/gateways.md) */
	rc = start(&d, loaded, demo != NULL);
	hl_secret_wipe_stack(); /* the parser's frames held the file's secrets */
	if (rc == 0)
		rc = wait_for_signals(&d, test_hook); /* d.conf is the control thread's now */
	if (rc == 0) {
		/*
		 * A planned stop: every initiator is asked to log out and come
		 * back, so a restart (an upgrade) costs them a pause, not an I/O
		 * error; the commands they have in flight finish first. Under
		 * systemd the listening sockets go to its fd store first: the
		 * initiators' reconnects wait in their backlog for the next
		 * process instead of being refused and backing off.
		 */
		/*
		 * With peers, first hand every disk this gateway owns to one of
		 * them (its commands finish, the peer's cache is made coherent),
		 * so initiators move paths instead of waiting for us.
		 */
		if (gateway && daemon_owners_handover(&d, OWNER_HANDOVER_WAIT_MS)) {
			/*
			 * Stay a standby a moment before the sessions are asked to
			 * leave: an initiator that saw "transitioning" re-reads the
			 * states (Linux's scsi_dh_alua after 2 s) and finds the peer
			 * active instead of a closed connection.
			 */
			struct timespec ts = {OWNER_LINGER_MS / 1000, (OWNER_LINGER_MS % 1000) * 1000000L};
			nanosleep(&ts, NULL);
		}
		int fds[64];
		unsigned nfds = hl_iscsi_server_listen_fds(d.server, fds, 64);
		bool kept = daemon_service_store_fds(fds, nfds);
		unsigned t = atomic_load(&d.logout_timeout_s);
		if (t)
			hl_iscsi_server_drain(d.server, t, DRAIN_TIME2WAIT_S, kept);
	}
	stop(&d);
	return rc ? 1 : 0;
}
