/*
 * hotlunctl.c - the admin shell: a targetcli-style tree over hotlund's
 * control socket. Interactive (libedit: history, tab completion of
 * commands, paths and parameter names) or one command per invocation:
 *
 *   hotlunctl [--socket S] [--timeout SECONDS] [PATH] COMMAND [ARGS...]
 *
 * All knowledge of objects lives in the daemon; this program turns words
 * into control requests (docs/control.md) and replies into text. Two things
 * it does itself: a secret given as KEY=- or KEY=@FILE is read here, so it
 * is never in argv or the history (which masks one typed inline), and each
 * request waits at most --timeout for its turn, after which hotlund will
 * not run it.
 *
 * This file: the connection, paths, the commands that edit the tree and
 * main; the stats command's rendering is cli_stats.c, the interactive
 * shell (completion, history) cli_shell.c.
 */
#include "config.h"

#include "cli/cli_internal.h"
#include "hotlun/ctl.h"
#include "hotlun/log.h"
#include "hotlun/util.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_CONFIG HL_SYSCONFDIR "/hotlun/hotlun.conf"
/* How long a request may wait for its turn (--timeout): hotlund runs one at a time. */
#define DEFAULT_TIMEOUT_MS 5000
#define MAX_TIMEOUT_S      86400

static int ctl_fd = -1;
static const char *socket_path;
static char cwd[1024] = "/";
static unsigned timeout_ms = DEFAULT_TIMEOUT_MS; /* 0: no limit */

/* ---- talking to the daemon ---- */

static int connect_daemon(void)
{
	if (ctl_fd >= 0)
		return 0;
	ctl_fd = hl_ctl_connect(socket_path);
	if (ctl_fd == -EPERM) {
		fprintf(stderr,
			"hotlunctl: %s: its server runs as neither root nor you: not sending it "
			"anything\n",
			socket_path);
		return ctl_fd;
	}
	if (ctl_fd < 0) {
		fprintf(stderr, "hotlunctl: cannot connect to %s: %s\n", socket_path,
			strerror(-ctl_fd));
		return ctl_fd;
	}
	return 0;
}

/* Send a request (steals args); @return the result (new ref) or NULL after printing the error. */
json_t *cli_request(const char *cmd, json_t *args)
{
	json_t *reply = NULL;
	int rc;

	if (connect_daemon() < 0) {
		json_decref(args);
		return NULL;
	}
	rc = hl_ctl_call_timed(ctl_fd, cmd, args, timeout_ms, &reply);
	if (rc == -ENOTCONN) {
		/* the shell sat idle and hotlund closed the connection: nothing was sent */
		close(ctl_fd);
		ctl_fd = -1;
		if (connect_daemon() < 0) {
			json_decref(args);
			return NULL;
		}
		rc = hl_ctl_call_timed(ctl_fd, cmd, args, timeout_ms, &reply);
	}
	json_decref(args);
	if (rc == -EINPROGRESS) {
		/* it started in time: the change is under way whatever we do now */
		fprintf(stderr,
		        "hotlunctl: %s started and runs longer than %.3g s; waiting for its result "
		        "(Ctrl-C stops the waiting, not the %s)\n",
		        cmd, timeout_ms / 1000.0, cmd);
		rc = hl_ctl_wait_reply(ctl_fd, -1, &reply);
	}
	if (rc == -ETIMEDOUT) {
		fprintf(stderr,
		        "hotlunctl: no turn for %s within %.3g s (hotlund is busy with another "
		        "request, or stuck): timed out before it ran; nothing was changed\n",
		        cmd, timeout_ms / 1000.0);
		close(ctl_fd); /* shut for sending: the next request reconnects */
		ctl_fd = -1;
		return NULL;
	}
	if (rc < 0) {
		fprintf(stderr, "hotlunctl: %s: %s\n", socket_path, strerror(-rc));
		close(ctl_fd);
		ctl_fd = -1;
		return NULL;
	}
	if (!json_is_true(json_object_get(reply, "ok"))) {
		const char *msg = json_string_value(json_object_get(reply, "error"));
		fprintf(stderr, "error: %s\n", msg ? msg : "(no message)");
		json_decref(reply);
		return NULL;
	}
	json_t *result = json_object_get(reply, "result");
	result = result ? json_incref(result) : json_object();
	json_decref(reply);
	return result;
}

/* ---- paths ---- */

/* Resolve p against the folder dir into out: handles "..", ".", absolute. */
static void resolve_in(const char *dir, const char *p, char *out, size_t len)
{
	char buf[2048], *parts[64], *save = NULL;
	int n = 0;

	if (!p || !*p)
		p = ".";
	if (p[0] == '/')
		snprintf(buf, sizeof(buf), "%s", p);
	else
		snprintf(buf, sizeof(buf), "%s/%s", dir, p);
	for (char *tok = strtok_r(buf, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
		if (strcmp(tok, ".") == 0)
			continue;
		if (strcmp(tok, "..") == 0) {
			if (n)
				n--;
			continue;
		}
		if (n < 64)
			parts[n++] = tok;
	}
	size_t off = 0;
	out[0] = '\0';
	for (int i = 0; i < n && off < len; i++)
		off += (size_t)snprintf(out + off, len - off, "/%s", parts[i]);
	if (n == 0)
		snprintf(out, len, "/");
}

const char *cli_cwd(void)
{
	return cwd;
}

/* Resolve p against the current folder into out. */
void cli_resolve(const char *p, char *out, size_t len)
{
	resolve_in(cwd, p, out, len);
}

/* ---- output ---- */

static void print_tree(json_t *node, const char *prefix, bool last, bool root)
{
	const char *name = json_string_value(json_object_get(node, "name"));
	const char *summary = json_string_value(json_object_get(node, "summary"));
	json_t *children = json_object_get(node, "children");
	char line[512];
	int w;

	w = snprintf(line, sizeof(line), "%so- %s ", prefix, name ? name : "?");
	if (w < 0)
		return;
	printf("%s", line);
	if (summary && *summary) {
		for (int i = w; i < 60; i++)
			putchar('.');
		printf(" [%s]", summary);
	}
	putchar('\n');

	char sub[512];
	snprintf(sub, sizeof(sub), "%s%s", prefix, root ? "  " : (last ? "  " : "| "));
	size_t n = json_array_size(children);
	for (size_t i = 0; i < n; i++)
		print_tree(json_array_get(children, i), sub, i + 1 == n, false);
}

void cli_print_json(json_t *v)
{
	char *s = json_dumps(v, JSON_INDENT(2) | JSON_SORT_KEYS);
	if (s) {
		printf("%s\n", s);
		free(s);
	}
}

/* ---- secrets ---- */

/* A key whose value is a secret: chap_secret, mutual_secret, origin_chap_secret, ... */
bool cli_secret_key(const char *key, size_t len)
{
	static const char sfx[] = "_secret";

	return len >= sizeof(sfx) - 1 &&
	       memcmp(key + len - (sizeof(sfx) - 1), sfx, sizeof(sfx) - 1) == 0;
}

static volatile sig_atomic_t prompt_interrupted;

static void on_prompt_sigint(int sig)
{
	(void)sig;
	prompt_interrupted = 1;
}

/*
 * KEY=-: the secret is the next line of standard input. On a terminal,
 * asked for with echo off (Ctrl-C gives up and restores the terminal).
 * @return 0 with the secret in buf, or -1 after a message.
 */
static int secret_from_stdin(const char *key, char *buf, size_t len)
{
	bool tty = isatty(STDIN_FILENO);
	struct termios old, quiet;
	struct sigaction sa = {.sa_handler = on_prompt_sigint}, old_sa;
	bool restore = false;
	char *got;

	if (tty) {
		fprintf(stderr, "%s (not shown): ", key);
		fflush(stderr);
		if (tcgetattr(STDIN_FILENO, &old) == 0) {
			quiet = old;
			quiet.c_lflag &= ~(tcflag_t)ECHO;
			restore = tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet) == 0;
		}
		prompt_interrupted = 0;
		sigaction(SIGINT, &sa, &old_sa); /* no SA_RESTART: fgets returns */
	}
	got = fgets(buf, (int)len, stdin);
	if (tty) {
		sigaction(SIGINT, &old_sa, NULL);
		if (restore)
			tcsetattr(STDIN_FILENO, TCSAFLUSH, &old);
		fputc('\n', stderr);
	}
	if (!got || prompt_interrupted) {
		clearerr(stdin);
		explicit_bzero(buf, len);
		fprintf(stderr, "error: %s: no secret on standard input\n", key);
		return -1;
	}
	size_t n = strcspn(buf, "\r\n");
	bool whole = buf[n] != '\0' || feof(stdin);
	buf[n] = '\0';
	if (!whole) { /* longer than buf: the rest of the line is not another command */
		int ch;
		while ((ch = getchar()) != EOF && ch != '\n')
			;
	}
	if (!whole || n > HL_SECRET_MAX || n == 0) {
		explicit_bzero(buf, len);
		fprintf(stderr, "error: %s: %s\n", key,
		        n == 0 && whole ? "no secret on standard input"
		                        : "a secret is 1..255 bytes");
		return -1;
	}
	return 0;
}

/*
 * The value of KEY=VALUE for a secret key: "-" reads standard input, "@FILE"
 * reads a file that only its owner may read (the rules of the configuration
 * file's origin_chap_secret_file); anything else is the secret itself.
 * @return a new JSON string (NULL after a message).
 */
static json_t *secret_value(const char *key, const char *v)
{
	char buf[HL_SECRET_MAX + 2], why[PATH_MAX + 128];
	json_t *j;

	if (strcmp(v, "-") == 0) {
		if (secret_from_stdin(key, buf, sizeof(buf)))
			return NULL;
		v = buf;
	} else if (v[0] == '@') {
		if (hl_secret_file_read(v + 1, buf, sizeof(buf), why, sizeof(why))) {
			fprintf(stderr, "error: %s: %s\n", key, why);
			return NULL;
		}
		v = buf;
	}
	j = json_string(v);
	if (v == buf)
		explicit_bzero(buf, sizeof(buf));
	if (!j)
		fprintf(stderr, "error: %s: not valid UTF-8\n", key);
	return j;
}

/* ---- commands ---- */

static int parse_kv(json_t *params, const char *word)
{
	const char *eq = strchr(word, '=');
	if (!eq || eq == word) {
		fprintf(stderr, "error: expected key=value, got '%s'\n", word);
		return -EINVAL;
	}
	char key[256];
	size_t kl = (size_t)(eq - word);
	if (kl >= sizeof(key)) {
		fprintf(stderr, "error: key too long\n");
		return -EINVAL;
	}
	memcpy(key, word, kl);
	key[kl] = '\0';
	/* key= with nothing unsets the key */
	json_t *v;
	if (!eq[1])
		v = json_null();
	else if (cli_secret_key(key, kl))
		v = secret_value(key, eq + 1); /* says what was wrong */
	else if (!(v = json_string(eq + 1)))
		fprintf(stderr, "error: %s: not valid UTF-8\n", key);
	if (!v)
		return -EINVAL;
	json_object_set_new(params, key, v);
	return 0;
}

static int cmd_ls(const char *path, int argc, char **argv)
{
	json_t *r;
	(void)argc, (void)argv;
	r = cli_request("ls", json_pack("{s:s}", "path", path));
	if (!r)
		return 1;
	print_tree(r, "", true, true);
	json_decref(r);
	return 0;
}

static int cmd_cd(const char *path, int argc, char **argv)
{
	char target[1024];
	json_t *r;

	(void)path;
	cli_resolve(argc > 0 ? argv[0] : "/", target, sizeof(target));
	r = cli_request("ls", json_pack("{s:s}", "path", target));
	if (!r)
		return 1;
	json_decref(r);
	hl_strlcpy(cwd, target, sizeof(cwd));
	return 0;
}

static int cmd_create(const char *path, int argc, char **argv)
{
	json_t *params = json_object();
	if (argc < 1) {
		fprintf(stderr, "usage: [PATH] create NAME [key=value ...]\n");
		json_decref(params);
		return 2;
	}
	for (int i = 1; i < argc; i++) {
		if (parse_kv(params, argv[i])) {
			json_decref(params);
			return 2;
		}
	}
	json_t *r = cli_request("create", json_pack("{s:s, s:s, s:o}", "path", path, "name", argv[0],
						"params", params));
	if (!r)
		return 1;
	const char *created = json_string_value(json_object_get(r, "created"));
	if (created)
		printf("Created %s.\n", created);
	json_decref(r);
	return 0;
}

static int cmd_delete(const char *path, int argc, char **argv)
{
	char target[1024];
	bool force = false;
	const char *what = NULL;

	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "force") == 0 || strcmp(argv[i], "--force") == 0)
			force = true;
		else
			what = argv[i];
	}
	if (what)
		resolve_in(path, what, target, sizeof(target));
	else
		hl_strlcpy(target, path, sizeof(target));
	json_t *r = cli_request("delete", json_pack("{s:s, s:b}", "path", target, "force", force));
	if (!r)
		return 1;
	printf("Deleted %s.\n", target);
	json_decref(r);
	return 0;
}

static int cmd_set(const char *path, int argc, char **argv)
{
	json_t *params = json_object();
	bool force = false;

	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "force") == 0 || strcmp(argv[i], "--force") == 0) {
			force = true;
			continue;
		}
		if (parse_kv(params, argv[i])) {
			json_decref(params);
			return 2;
		}
	}
	if (json_object_size(params) == 0) {
		fprintf(stderr, "usage: [PATH] set key=value [...] [force]\n");
		json_decref(params);
		return 2;
	}
	json_t *r = cli_request("set", json_pack("{s:s, s:o, s:b}", "path", path, "params", params,
					     "force", force));
	if (!r)
		return 1;
	json_decref(r);
	return 0;
}

static void print_param(const char *key, json_t *v)
{
	if (json_is_string(v))
		printf("%s=%s\n", key, json_string_value(v));
	else if (json_is_null(v))
		printf("%s=\n", key);
	else {
		char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
		printf("%s=%s\n", key, s ? s : "?");
		free(s);
	}
}

static int cmd_get(const char *path, int argc, char **argv)
{
	json_t *r = cli_request("get", json_pack("{s:s}", "path", path));
	const char *key;
	json_t *v;

	if (!r)
		return 1;
	if (argc == 0) {
		json_object_foreach(r, key, v)
			print_param(key, v);
	}
	for (int i = 0; i < argc; i++) {
		v = json_object_get(r, argv[i]);
		if (!v) {
			fprintf(stderr, "error: no parameter %s here\n", argv[i]);
			json_decref(r);
			return 1;
		}
		print_param(argv[i], v);
	}
	json_decref(r);
	return 0;
}

static int cmd_info(const char *path, int argc, char **argv)
{
	(void)argc, (void)argv;
	json_t *r = cli_request("get", json_pack("{s:s}", "path", path));
	if (!r)
		return 1;
	printf("%s\n", path);
	cli_print_json(r);
	json_decref(r);
	return 0;
}

static int cmd_simple(const char *cmd, json_t *args)
{
	json_t *r = cli_request(cmd, args);
	if (!r)
		return 1;
	const char *file = json_string_value(json_object_get(r, "file"));
	if (file)
		printf("Configuration saved to %s.\n", file);
	json_decref(r);
	return 0;
}

static int cmd_saveconfig(const char *path, int argc, char **argv)
{
	(void)path;
	return cmd_simple("saveconfig", argc ? json_pack("{s:s}", "file", argv[0]) : NULL);
}

static int cmd_reload(const char *path, int argc, char **argv)
{
	(void)path, (void)argc, (void)argv;
	return cmd_simple("reload", NULL);
}

/* handover / takeover [DISK]: a shared disk moves between gateways (docs/gateways.md) */
static int cmd_move(const char *verb, const char *path, int argc, char **argv)
{
	char target[1024];

	if (argc > 0)
		resolve_in(path, argv[0], target, sizeof(target));
	else
		hl_strlcpy(target, path, sizeof(target));
	json_t *r = cli_request(verb, json_pack("{s:s}", "path", target));
	if (!r)
		return 1;
	printf("%s: %s, %s; owner gateway %lld, epoch %lld\n", target,
	       json_string_value(json_object_get(r, "state")),
	       json_string_value(json_object_get(r, "alua")), (long long)cli_jint(r, "owner"),
	       (long long)cli_jint(r, "epoch"));
	const char *w = json_string_value(json_object_get(r, "warning"));
	if (w)
		printf("warning: %s\n", w);
	json_decref(r);
	return 0;
}

static int cmd_handover(const char *path, int argc, char **argv)
{
	return cmd_move("handover", path, argc, argv);
}

static int cmd_takeover(const char *path, int argc, char **argv)
{
	return cmd_move("takeover", path, argc, argv);
}

static int cmd_pwd(const char *path, int argc, char **argv)
{
	(void)path, (void)argc, (void)argv;
	printf("%s\n", cwd);
	return 0;
}

static int cmd_help(const char *path, int argc, char **argv);

const struct cli_command cli_commands[] = {
	{"ls", "ls [PATH]                 the tree under PATH, one line per object", cmd_ls},
	{"cd", "cd PATH                   move in the tree (.. and absolute paths work)", cmd_cd},
	{"pwd", "pwd                       where you are", cmd_pwd},
	{"create", "create NAME [key=value]   e.g. /disks create d1 origin=file:/srv/d1.img", cmd_create},
	{"delete", "delete [NAME] [force]      remove an object (force: even with sessions)", cmd_delete},
	{"set", "set key=value ... [force]  change parameters (key= resets one)", cmd_set},
	{"get", "get [key ...]             show parameters", cmd_get},
	{"info", "info                      everything known about this object", cmd_info},
	{"stats", "stats [--json] [--watch [S]]  counters (refreshing with --watch)", cli_cmd_stats},
	{"saveconfig", "saveconfig [FILE]         write the running configuration", cmd_saveconfig},
	{"reload", "reload                    re-read the configuration file", cmd_reload},
	{"handover", "handover [DISK]           hand a shared disk to a peer gateway (planned)",
	 cmd_handover},
	{"takeover", "takeover [DISK]           ask the owner of a shared disk to hand it here",
	 cmd_takeover},
	{"help", "help                      this list", cmd_help},
	{NULL, NULL, NULL},
};

/* Parameters each kind of node takes, for completion and help. */
static const char *const disk_params[] = {"origin=", "block_size=", "read_only=", "cache=",
					  "cache_quota=", "origin_iops=", "origin_mbps=",
					  "origin_latency_ms=", "exclusive=", "serial=", "naa=", NULL};
static const char *const cache_params[] = {"device=", "size=", "block_size=", "admission=",
					   "write_policy=", "update_buffer=", "write_budget=", NULL};
static const char *const target_params[] = {"alias=", "chap_user=", "chap_secret=",
					    "mutual_user=", "mutual_secret=",
					    "allow_target_reset=", NULL};
static const char *const global_params[] = {"log_level=",
                                            "poll_us=",
                                            "write_buffer_limit=",
                                            "logout_timeout=",
                                            "max_pending_logins=",
                                            "max_pending_logins_per_addr=",
                                            "discovery_chap_user=",
                                            "discovery_chap_secret=",
                                            "metrics_listen=",
                                            "send_uring=",
                                            "control_idle_timeout=",
                                            "scratch_buffer_limit=",
                                            NULL};

static const char *const lun_params[] = {"disk=", NULL};

const char *const *cli_params_for(const char *path)
{
	if (strncmp(path, "/iscsi/", 7) == 0 && strstr(path, "/tpg1/luns/lun"))
		return lun_params;
	if (strncmp(path, "/disks", 6) == 0)
		return disk_params;
	if (strncmp(path, "/caches", 7) == 0)
		return cache_params;
	if (strncmp(path, "/iscsi/", 7) == 0 && !strstr(path, "/tpg1"))
		return target_params;
	if (strcmp(path, "/") == 0)
		return global_params;
	return NULL;
}

static int cmd_help(const char *path, int argc, char **argv)
{
	(void)argc, (void)argv;
	printf("Commands (run at the current path, or give a path first: /disks ls):\n");
	for (const struct cli_command *c = cli_commands; c->name; c++)
		printf("  %s\n", c->usage);
	const char *const *p = cli_params_for(path);
	if (p) {
		printf("Parameters at %s:", path);
		for (; *p; p++)
			printf(" %.*s", (int)strlen(*p) - 1, *p);
		printf("\n");
	}
	printf("Tree: /disks, /caches, /iscsi/<iqn>/tpg1/{luns,acls,portals}, /sessions\n");
	return 0;
}

/* Run one command line already split in words: [PATH] COMMAND ARGS. */
int cli_run_words(int argc, char **argv)
{
	char path[1024];
	const char *cmd;

	if (argc == 0)
		return 0;
	if (argv[0][0] == '/' || argv[0][0] == '.') {
		cli_resolve(argv[0], path, sizeof(path));
		argc--, argv++;
		if (argc == 0)
			return cmd_cd(NULL, 1, (char *[]){path});
	} else {
		hl_strlcpy(path, cwd, sizeof(path));
	}
	cmd = argv[0];
	/* "ls PATH" is common enough to accept */
	if (strcmp(cmd, "ls") == 0 && argc > 1) {
		char dir[1024];
		hl_strlcpy(dir, path, sizeof(dir));
		resolve_in(dir, argv[1], path, sizeof(path));
		argc = 1;
	}
	for (const struct cli_command *c = cli_commands; c->name; c++) {
		if (strcmp(c->name, cmd) == 0)
			return c->fn(path, argc - 1, argv + 1);
	}
	fprintf(stderr, "error: unknown command '%s' (try help)\n", cmd);
	return 2;
}

/* Split a line on blanks; "double quotes" keep blanks. Modifies line. */
int cli_split_words(char *line, char **words, int max)
{
	int n = 0;
	char *p = line;

	while (*p && n < max) {
		while (*p == ' ' || *p == '\t')
			p++;
		if (!*p)
			break;
		char *w = p, *o = p;
		bool quoted = false;
		for (; *p && (quoted || (*p != ' ' && *p != '\t')); p++) {
			if (*p == '"') {
				quoted = !quoted;
				continue;
			}
			*o++ = *p;
		}
		if (*p)
			p++;
		*o = '\0';
		words[n++] = w;
	}
	return n;
}

/* "5", "0.5", "0": seconds (0: no limit) into ms. @return 0 or -EINVAL. */
static int parse_timeout(const char *s, unsigned *ms)
{
	char *end;
	double v;

	if (!*s || strspn(s, "0123456789.") != strlen(s))
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno || *end || v < 0 || v > MAX_TIMEOUT_S)
		return -EINVAL;
	*ms = (unsigned)(v * 1000 + 0.5);
	if (*ms == 0 && v > 0)
		*ms = 1;
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
	        "Usage: hotlunctl [--socket PATH | --config FILE] [--timeout SECONDS] [PATH] "
	        "[COMMAND [ARGS...]]\n"
	        "Without a command: an interactive shell. A request that has not started "
	        "within\n--timeout (default %d s; 0: no limit) is given up and never runs. "
	        "KEY=- reads a\nsecret from standard input, KEY=@FILE from a file "
	        "(chmod 600). Commands:\n",
	        DEFAULT_TIMEOUT_MS / 1000);
	for (const struct cli_command *c = cli_commands; c->name; c++)
		fprintf(f, "  %s\n", c->usage);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"socket", required_argument, NULL, 's'},
		{"config", required_argument, NULL, 'c'},
		{"timeout", required_argument, NULL, 't'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	const char *config = NULL;
	char *from_conf = NULL;
	int opt;

	hl_ctl_json_wipe(); /* requests may hold a secret */
	hl_log_open(false, HL_LOG_ERR);
	/* "+": stop at the first word, so "stats --json" keeps its flag */
	while ((opt = getopt_long(argc, argv, "+s:c:t:hV", longopts, NULL)) != -1) {
		switch (opt) {
		case 's':
			socket_path = optarg;
			break;
		case 'c':
			config = optarg;
			break;
		case 't':
			if (parse_timeout(optarg, &timeout_ms)) {
				fprintf(stderr,
				        "hotlunctl: --timeout '%s': expected seconds, 0 to %d "
				        "(0: no limit; a fraction like 0.5 is fine)\n",
				        optarg, MAX_TIMEOUT_S);
				return 2;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("hotlunctl %s\n", PACKAGE_VERSION);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!socket_path) {
		char err[512];
		from_conf =
		    hl_ctl_socket_from_config(config ? config : DEFAULT_CONFIG, err, sizeof(err));
		socket_path = from_conf ? from_conf : HL_LOCALSTATEDIR "/lib/hotlun/hotlund.sock";
		if (err[0])
			fprintf(stderr, "hotlunctl: warning: %s; trying %s\n", err, socket_path);
	}
	signal(SIGPIPE, SIG_IGN);

	int rc = 0;
	if (optind < argc)
		rc = cli_run_words(argc - optind, argv + optind);
	else if (isatty(STDIN_FILENO))
		cli_shell_run(socket_path);
	else {
		/* commands on stdin, one per line (scripts) */
		char line[4096];
		while (fgets(line, sizeof(line), stdin)) {
			char *words[64];
			line[strcspn(line, "\n")] = '\0';
			int n = cli_split_words(line, words, 64);
			int r = cli_run_words(n, words);
			if (r)
				rc = r;
		}
		explicit_bzero(line, sizeof(line));
	}
	if (ctl_fd >= 0)
		close(ctl_fd);
	free(from_conf);
	return rc;
}
