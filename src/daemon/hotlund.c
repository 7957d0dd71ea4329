/*
 * hotlund.c - the daemon: reads the config, opens origins, creates logical
 * units and targets, starts the reactors and portals, and waits for signals.
 *
 * Signals are blocked in every thread and taken synchronously here with
 * sigwaitinfo(), so no handler ever runs inside the data path.
 */
#include "config.h"

#include "hotlun/conf.h"
#include "hotlun/event.h"
#include "hotlun/iscsi.h"
#include "hotlun/log.h"
#include "hotlun/origin.h"
#include "hotlun/scsi.h"
#include "hotlun/util.h"

#include "daemon/daemon_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct disk_rt {
	const struct hl_conf_disk *conf;
	struct hl_lu *lu;
};

struct daemon {
	struct hl_conf *conf;
	uint64_t install_id;
	struct disk_rt *disks;
	size_t n_disks;
	struct hl_scsi_lun_map *maps; /* one per target */
	struct hl_reactor **reactors;
	unsigned n_reactors;
	struct hl_iscsi_server *server;
};

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: hotlund --config FILE [--log-level LEVEL] [--syslog]\n"
		"       hotlund --check-config FILE\n"
		"       hotlund --demo DIR [--portal ADDR:PORT]\n"
		"       hotlund --version | --help\n"
		"\n"
		"  -c, --config FILE        run the target described by FILE (foreground)\n"
		"  -t, --check-config FILE  check FILE, print the first error as FILE:LINE, exit\n"
		"      --demo DIR           run a demo target from the built-in configuration,\n"
		"                           keeping its origin file and state under DIR\n"
		"      --portal ADDR:PORT   with --demo: where to listen (default 127.0.0.1:3260)\n"
		"  -l, --log-level LEVEL    err, warn, notice (default), info or debug\n"
		"      --syslog             log to syslog instead of stderr\n"
		"  -V, --version            print the version and the compiled-in backends\n"
		"\n"
		"SIGTERM or SIGINT stops the daemon cleanly; SIGHUP is reserved for reloading.\n");
}

static void print_version(void)
{
	printf("hotlund %s\norigin backends:", PACKAGE_VERSION);
	for (const struct hl_origin_ops *const *b = hl_origin_backends; *b; b++)
		printf(" %s", (*b)->name);
	printf("\n");
}

/* ---- the demo: a built-in config with its files under one folder ---- */

static int demo_prepare(const char *dir, const char *portal, char **out_text)
{
	char path[4096];
	int fd, rc;

	if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
		fprintf(stderr, "hotlund: cannot create %s: %s\n", dir, strerror(errno));
		return -errno;
	}
	snprintf(path, sizeof(path), "%s/demo-origin.img", dir);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = -errno;
		fprintf(stderr, "hotlund: %s: %s\n", path, strerror(errno));
		return rc;
	}
	struct stat st;
	if (fstat(fd, &st) == 0 && st.st_size == 0 && ftruncate(fd, 1ll << 30) < 0) {
		rc = -errno;
		close(fd);
		fprintf(stderr, "hotlund: %s: %s\n", path, strerror(-rc));
		return rc;
	}
	close(fd);
	if (asprintf(out_text,
		     "[global]\n"
		     "portal = %s\n"
		     "state_dir = %s\n"
		     "\n"
		     "[disk demo]\n"
		     "origin = file:%s/demo-origin.img\n"
		     "\n"
		     "[target iqn.2026-11.io.hotlun:demo]\n"
		     "lun.0 = demo\n"
		     "allow = ALL\n",
		     portal, dir, dir) < 0)
		return -ENOMEM;
	return 0;
}

/* ---- building the runtime objects ---- */

static int open_disk(struct daemon *d, struct disk_rt *rt)
{
	const struct hl_conf_disk *cd = rt->conf;
	struct hl_origin_opts opts = {.read_only = cd->read_only};
	struct hl_origin *origin;
	struct hl_lu_config lc;
	int rc;

	rc = hl_origin_open(cd->origin, &opts, &origin);
	if (rc) {
		HL_ERR("daemon", "%s:%d: disk %s: cannot open origin %s: %s", d->conf->path,
		       cd->line, cd->name, cd->origin, strerror(-rc));
		return rc;
	}
	rc = daemon_wrap_origin(cd, &origin);
	if (rc) {
		HL_ERR("daemon", "disk %s: %s", cd->name, strerror(-rc));
		hl_origin_close(origin);
		return rc;
	}
	memset(&lc, 0, sizeof(lc));
	lc.name = cd->name;
	lc.block_size = cd->block_size;
	lc.read_only = cd->read_only || origin->read_only;
	lc.write_cache = true; /* buffered origins: SYNCHRONIZE CACHE and FUA matter */
	daemon_disk_identity(d->install_id, cd->name, lc.naa, lc.serial);
	rc = hl_lu_create(&lc, origin, &rt->lu);
	if (rc) {
		HL_ERR("daemon", "%s:%d: disk %s: %s (origin size %llu, block size %u)",
		       d->conf->path, cd->line, cd->name, strerror(-rc),
		       (unsigned long long)origin->size, cd->block_size);
		hl_origin_close(origin);
		return rc;
	}
	HL_NOTICE("daemon", "disk %s: %s, %llu blocks of %u bytes%s", cd->name, cd->origin,
		  (unsigned long long)hl_lu_num_blocks(rt->lu), cd->block_size,
		  lc.read_only ? ", read-only" : "");
	return 0;
}

static struct hl_lu *find_lu(struct daemon *d, const char *name)
{
	for (size_t i = 0; i < d->n_disks; i++) {
		if (strcmp(d->disks[i].conf->name, name) == 0)
			return d->disks[i].lu;
	}
	return NULL;
}

static void fill_chap(struct hl_iscsi_chap *c, const char *user, const char *secret)
{
	memset(c, 0, sizeof(*c));
	if (user && secret) {
		hl_strlcpy(c->user, user, sizeof(c->user));
		hl_strlcpy(c->secret, secret, sizeof(c->secret));
	}
}

static int add_targets(struct daemon *d)
{
	struct hl_conf *c = d->conf;

	d->maps = calloc(c->n_targets ? c->n_targets : 1, sizeof(*d->maps));
	if (!d->maps)
		return -ENOMEM;
	for (size_t i = 0; i < c->n_targets; i++) {
		const struct hl_conf_target *t = &c->targets[i];
		struct hl_iscsi_target_config tc;
		int rc;

		for (size_t j = 0; j < t->n_luns; j++)
			d->maps[i].lu[t->luns[j].lun] = find_lu(d, t->luns[j].disk);
		memset(&tc, 0, sizeof(tc));
		tc.name = t->name;
		tc.alias = t->alias;
		tc.luns = &d->maps[i];
		tc.allow_all = t->allow_all;
		tc.allow = (const char *const *)t->allow;
		tc.n_allow = t->n_allow;
		fill_chap(&tc.chap, t->chap_user, t->chap_secret);
		fill_chap(&tc.mutual, t->mutual_user, t->mutual_secret);
		rc = hl_iscsi_target_add(d->server, &tc);
		if (rc) {
			HL_ERR("daemon", "%s:%d: target %s: %s", c->path, t->line, t->name,
			       strerror(-rc));
			return rc;
		}
		HL_NOTICE("daemon", "target %s: %zu LUN(s)%s%s", t->name, t->n_luns,
			  t->chap_user ? ", CHAP" : "", t->mutual_user ? " (mutual)" : "");
	}
	return 0;
}

static int start(struct daemon *d, const char *url_note)
{
	struct hl_conf *c = d->conf;
	struct hl_iscsi_server_config sc;
	int rc;

	rc = daemon_state_dir_init(c->state_dir, &d->install_id);
	if (rc)
		return rc;

	d->disks = calloc(c->n_disks ? c->n_disks : 1, sizeof(*d->disks));
	if (!d->disks)
		return -ENOMEM;
	for (size_t i = 0; i < c->n_disks; i++) {
		d->disks[i].conf = &c->disks[i];
		rc = open_disk(d, &d->disks[i]);
		if (rc)
			return rc;
		d->n_disks++;
	}

	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	d->n_reactors = c->threads ? c->threads : (unsigned)(ncpu > 0 ? ncpu : 1);
	d->reactors = calloc(d->n_reactors, sizeof(*d->reactors));
	if (!d->reactors)
		return -ENOMEM;
	for (unsigned i = 0; i < d->n_reactors; i++) {
		char name[24];
		snprintf(name, sizeof(name), "reactor%u", i);
		rc = hl_reactor_create(&d->reactors[i], name);
		if (rc)
			return rc;
		rc = hl_reactor_start(d->reactors[i]);
		if (rc)
			return rc;
	}
	rc = hl_workers_start(4);
	if (rc)
		return rc;

	memset(&sc, 0, sizeof(sc));
	sc.reactors = d->reactors;
	sc.n_reactors = d->n_reactors;
	sc.nop_interval_s = 30;
	sc.nop_timeout_s = 30;
	fill_chap(&sc.discovery_chap, c->discovery_chap_user, c->discovery_chap_secret);
	rc = hl_iscsi_server_create(&sc, &d->server);
	if (rc)
		return rc;
	rc = add_targets(d);
	if (rc)
		return rc;

	for (size_t i = 0; i < c->n_portals; i++) {
		char bound[128];
		rc = hl_iscsi_portal_add(d->server, c->portals[i], 1, bound, sizeof(bound));
		if (rc) {
			HL_ERR("daemon", "portal %s: %s", c->portals[i], strerror(-rc));
			return rc;
		}
		HL_NOTICE("daemon", "listening on %s", bound);
		if (url_note && c->n_targets) {
			printf("iSCSI target ready: iscsi://%s/%s/0\n", bound, c->targets[0].name);
			fflush(stdout);
		}
	}
	return 0;
}

static void stop(struct daemon *d)
{
	if (d->server)
		hl_iscsi_server_destroy(d->server);
	for (unsigned i = 0; i < d->n_reactors; i++) {
		if (d->reactors[i]) {
			hl_reactor_stop(d->reactors[i]);
			hl_reactor_join(d->reactors[i]);
		}
	}
	hl_workers_stop();
	for (unsigned i = 0; i < d->n_reactors; i++)
		hl_reactor_destroy(d->reactors[i]);
	free(d->reactors);
	for (size_t i = 0; i < d->n_disks; i++)
		hl_lu_destroy(d->disks[i].lu);
	free(d->disks);
	free(d->maps);
}

static int wait_for_signals(void)
{
	sigset_t set;
	siginfo_t si;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	for (;;) {
		int sig = sigwaitinfo(&set, &si);
		if (sig < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (sig == SIGHUP) {
			HL_NOTICE("daemon", "SIGHUP: reloading is not implemented yet; ignored");
			continue;
		}
		HL_NOTICE("daemon", "%s: stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
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
		{"log-level", required_argument, NULL, 'l'},
		{"syslog", no_argument, NULL, 'S'},
		{"version", no_argument, NULL, 'V'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *config = NULL, *check = NULL, *demo = NULL, *portal = "127.0.0.1:3260";
	int log_level = -1, opt, rc;
	bool use_syslog = false;
	char err[1024];
	struct daemon d;

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
	hl_log_open(false, HL_LOG_WARN);
	if (demo) {
		char *text = NULL;
		if (demo_prepare(demo, portal, &text))
			return 1;
		rc = hl_conf_parse(text, strlen(text), "<demo>", &d.conf, err, sizeof(err));
		free(text);
	} else {
		rc = hl_conf_load(check ? check : config, &d.conf, err, sizeof(err));
	}
	if (rc) {
		fprintf(stderr, "hotlund: %s\n", err);
		return 1;
	}
	if (check) {
		printf("%s: OK (%zu disk(s), %zu cache(s), %zu target(s), %zu portal(s))\n", check,
		       d.conf->n_disks, d.conf->n_caches, d.conf->n_targets, d.conf->n_portals);
		hl_conf_free(d.conf);
		return 0;
	}

	hl_log_open(use_syslog, log_level >= 0 ? log_level : d.conf->log_level);

	/* Block the signals we wait for in every thread created from here on. */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);

	rc = start(&d, demo);
	if (rc == 0) {
		HL_NOTICE("daemon", "hotlund %s running (%u reactor thread(s))", PACKAGE_VERSION,
			  d.n_reactors);
		rc = wait_for_signals();
	}
	stop(&d);
	hl_conf_free(d.conf);
	return rc ? 1 : 0;
}
