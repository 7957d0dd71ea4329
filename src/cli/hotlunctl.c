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
 */
#include "config.h"

#include "hotlun/ctl.h"
#include "hotlun/log.h"
#include "hotlun/util.h"

#include <editline/readline.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
static bool interactive;
static unsigned timeout_ms = DEFAULT_TIMEOUT_MS; /* 0: no limit */

/* ---- talking to the daemon ---- */

static int connect_daemon(void)
{
	if (ctl_fd >= 0)
		return 0;
	ctl_fd = hl_ctl_connect(socket_path);
	if (ctl_fd < 0) {
		fprintf(stderr, "hotlunctl: cannot connect to %s: %s\n", socket_path,
			strerror(-ctl_fd));
		return ctl_fd;
	}
	return 0;
}

/* Send a request (steals args); @return the result (new ref) or NULL after printing the error. */
static json_t *request(const char *cmd, json_t *args)
{
	json_t *reply = NULL;
	int rc;

	if (connect_daemon() < 0) {
		json_decref(args);
		return NULL;
	}
	rc = hl_ctl_call_timed(ctl_fd, cmd, args, timeout_ms, &reply);
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

/* Resolve p against the current folder into out. */
static void resolve(const char *p, char *out, size_t len)
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

static void print_json(json_t *v)
{
	char *s = json_dumps(v, JSON_INDENT(2) | JSON_SORT_KEYS);
	if (s) {
		printf("%s\n", s);
		free(s);
	}
}

/* ---- secrets ---- */

/* A key whose value is a secret: chap_secret, mutual_secret, origin_chap_secret, ... */
static bool secret_key(const char *key, size_t len)
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
	else if (secret_key(key, kl))
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
	r = request("ls", json_pack("{s:s}", "path", path));
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
	resolve(argc > 0 ? argv[0] : "/", target, sizeof(target));
	r = request("ls", json_pack("{s:s}", "path", target));
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
	json_t *r = request("create", json_pack("{s:s, s:s, s:o}", "path", path, "name", argv[0],
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
	json_t *r = request("delete", json_pack("{s:s, s:b}", "path", target, "force", force));
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
	json_t *r = request("set", json_pack("{s:s, s:o, s:b}", "path", path, "params", params,
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
	json_t *r = request("get", json_pack("{s:s}", "path", path));
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
	json_t *r = request("get", json_pack("{s:s}", "path", path));
	if (!r)
		return 1;
	printf("%s\n", path);
	print_json(r);
	json_decref(r);
	return 0;
}

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
	(void)sig;
	interrupted = 1;
}

static uint64_t jint(json_t *o, const char *k)
{
	return (uint64_t)json_integer_value(json_object_get(o, k));
}

/* Counter k of o minus the same counter of prev (NULL: since the start). */
static uint64_t jdelta(json_t *o, json_t *prev, const char *k)
{
	uint64_t now = jint(o, k), then = prev ? jint(prev, k) : 0;

	return now >= then ? now - then : now; /* a restart in between: since then */
}

/* The counters of disk in cache (NULL when either is). */
static json_t *cache_disk(json_t *caches, const char *cache, const char *disk)
{
	return cache ? json_object_get(json_object_get(json_object_get(caches, cache), "disks"),
	                               disk)
	             : NULL;
}

/* "n%" of part in whole, or "-" when whole is 0. */
static const char *pct(uint64_t part, uint64_t whole, char *buf, size_t len)
{
	if (!whole)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.1f%%", 100.0 * (double)part / (double)whole);
	return buf;
}

/* Bucket i of histogram key in o minus prev's (the same for every view: jdelta's rule). */
static uint64_t hist_delta(json_t *o, json_t *prev, const char *key, size_t i)
{
	json_t *a = json_object_get(o, key), *b = prev ? json_object_get(prev, key) : NULL;
	uint64_t now = (uint64_t)json_integer_value(json_array_get(a, i));
	uint64_t then = b ? (uint64_t)json_integer_value(json_array_get(b, i)) : 0;

	return now >= then ? now - then : now;
}

/*
 * The q-quantile, in microseconds, of the log2 histogram key (bucket i:
 * under 2^i us, the last: the rest) of o since prev: interpolated within
 * its bucket as Prometheus's histogram_quantile() does with the same
 * buckets (docs/metrics.md), so a terminal and a dashboard agree. *n gets
 * the count; -1 when it is 0.
 */
static double hist_quantile(json_t *o, json_t *prev, const char *key, double q, uint64_t *n)
{
	size_t nb = json_array_size(json_object_get(o, key));
	uint64_t total = 0, run = 0;

	for (size_t i = 0; i < nb; i++)
		total += hist_delta(o, prev, key, i);
	*n = total;
	if (!total)
		return -1;
	double rank = q * (double)total;
	for (size_t i = 0; i < nb; i++) {
		uint64_t c = hist_delta(o, prev, key, i);
		double lo = i ? (double)(1ull << (i - 1)) : 0, hi = (double)(1ull << i);
		if ((double)(run + c) >= rank && c) {
			if (i + 1 == nb) /* the open last bucket: its lower bound, as +Inf's rule */
				return lo;
			return lo + (hi - lo) * (rank - (double)run) / (double)c;
		}
		run += c;
	}
	return nb > 1 ? (double)(1ull << (nb - 2)) : 0;
}

/* Microseconds as "850us", "12.3ms", "1.20s"; "-" when negative (no data). */
static const char *fmt_us(double us, char *buf, size_t len)
{
	if (us < 0)
		snprintf(buf, len, "-");
	else if (us < 1000)
		snprintf(buf, len, "%.0fus", us);
	else if (us < 1e6)
		snprintf(buf, len, "%.2fms", us / 1e3);
	else
		snprintf(buf, len, "%.2fs", us / 1e6);
	return buf;
}

/* One latency row: p50, p99, p99.9 and the mean (sum_key in ns; NULL: no mean). */
static void latency_row(const char *disk, const char *what, json_t *o, json_t *prev,
                        const char *key, json_t *sums, json_t *psums, const char *sum_key)
{
	char p50[16], p99[16], p999[16], mean[16];
	uint64_t n = 0;
	double q50 = hist_quantile(o, prev, key, 0.5, &n);
	double q99 = hist_quantile(o, prev, key, 0.99, &n);
	double q999 = hist_quantile(o, prev, key, 0.999, &n);

	if (!n)
		return;
	fmt_us(sum_key ? (double)jdelta(sums, psums, sum_key) / 1e3 / (double)n : -1, mean,
	       sizeof(mean));
	printf("%-16s %-22s %10llu %8s %8s %8s %8s\n", disk, what, (unsigned long long)n,
	       fmt_us(q50, p50, sizeof(p50)), fmt_us(q99, p99, sizeof(p99)),
	       fmt_us(q999, p999, sizeof(p999)), mean);
}

/*
 * Read latency by where the data came from, write latency, and the
 * origin's as the cache sees it: a row each that has commands.
 */
static void print_latency(json_t *disks, json_t *pdisks, json_t *caches, json_t *pcaches)
{
	static const char *const srcs[][2] = {{"hit", "read, cache hit"},
	                                      {"partial", "read, partly cached"},
	                                      {"miss", "read, cache miss"},
	                                      {"uncached", "read, no cache"}};
	const char *name;
	json_t *disk;

	printf("\n%-16s %-22s %10s %8s %8s %8s %8s\n", "latency", "of", "commands", "p50", "p99",
	       "p99.9", "mean");
	json_object_foreach(disks, name, disk)
	{
		json_t *pd = json_object_get(pdisks, name);
		json_t *by = json_object_get(disk, "read_latency_by_source_log2_us");
		json_t *pby = json_object_get(pd, "read_latency_by_source_log2_us");
		json_t *ns = json_object_get(disk, "read_ns_by_source");
		json_t *pns = json_object_get(pd, "read_ns_by_source");
		const char *cname = json_string_value(json_object_get(disk, "cache"));
		json_t *cd = cache_disk(caches, cname, name),
		       *pcd = cache_disk(pcaches, cname, name);

		if (!by) { /* an older hotlund: every read together */
			latency_row(name, "read", disk, pd, "read_latency_log2_us", disk, pd,
			            "read_ns");
		} else {
			for (size_t i = 0; i < sizeof(srcs) / sizeof(srcs[0]); i++) {
				/* the rows' histograms sit one level down: wrap them */
				json_t *o =
				    json_pack("{s:O}", "h", json_object_get(by, srcs[i][0]));
				json_t *p =
				    pby ? json_pack("{s:O}", "h", json_object_get(pby, srcs[i][0]))
				        : NULL;
				latency_row(name, srcs[i][1], o, p, "h", ns, pns, srcs[i][0]);
				json_decref(o);
				json_decref(p);
			}
		}
		latency_row(name, "write", disk, pd, "write_latency_log2_us", disk, pd, "write_ns");
		if (cd) {
			latency_row(name, "origin read (by cache)", cd, pcd,
			            "origin_read_latency_log2_us", cd, pcd, "origin_read_ns");
			latency_row(name, "origin write (by cache)", cd, pcd,
			            "origin_write_latency_log2_us", cd, pcd, "origin_write_ns");
		}
	}
}

/*
 * The counters as text: a line per disk, a block per cache. With prev (a
 * --watch refresh, secs apart) the numbers are those of the last interval,
 * as rates where that reads better; the first screen counts since the start.
 */
static void print_stats_text(json_t *r, json_t *prev, int secs)
{
	const char *name;
	json_t *disk, *cache;
	json_t *disks = json_object_get(r, "disks"), *caches = json_object_get(r, "caches");
	json_t *pdisks = prev ? json_object_get(prev, "disks") : NULL;
	json_t *pcaches = prev ? json_object_get(prev, "caches") : NULL;
	char a[32], b[32], c[32], span[32] = "";

	if (prev)
		snprintf(span, sizeof(span), " in %d s", secs);
	printf("%s\n", prev ? "the last interval (the disks per second)" : "since hotlund started");
	printf("%-16s %8s %10s %10s %9s %9s %6s %-10s %7s\n", "disk", "size",
	       prev ? "reads/s" : "reads", prev ? "writes/s" : "writes",
	       prev ? "read MB/s" : "read MB", prev ? "wrt MB/s" : "write MB", "errors", "cache",
	       "hit %");
	json_object_foreach(disks, name, disk) {
		char sz[32];
		const char *cname = json_string_value(json_object_get(disk, "cache"));
		json_t *pd = json_object_get(pdisks, name);
		json_t *cd = cache_disk(caches, cname, name), *pcd = cache_disk(pcaches, cname, name);
		double div = prev && secs > 0 ? (double)secs : 1.0;

		hl_format_size(jint(disk, "size_bytes"), sz, sizeof(sz));
		printf("%-16s %8s %10.0f %10.0f %9.1f %9.1f %6llu %-10s %7s\n", name, sz,
		       (double)jdelta(disk, pd, "read_cmds") / div,
		       (double)jdelta(disk, pd, "write_cmds") / div,
		       (double)jdelta(disk, pd, "read_bytes") / 1e6 / div,
		       (double)jdelta(disk, pd, "write_bytes") / 1e6 / div,
		       (unsigned long long)jdelta(disk, pd, "errors"), cname ? cname : "-",
		       cd ? pct(jdelta(cd, pcd, "read_hits"), jdelta(cd, pcd, "read_reqs"), a,
		                sizeof(a))
		          : "-");
	}
	print_latency(disks, pdisks, caches, pcaches);
	json_object_foreach(disks, name, disk) {
		/* several gateways: who owns each shared disk (docs/gateways.md) */
		json_t *ow = json_object_get(disk, "ownership");
		if (!ow)
			continue;
		const char *problem = json_string_value(json_object_get(ow, "problem"));
		printf("  %-14s gateway %lld: %s, %s; owner gateway %lld, epoch %lld; %lld move(s), "
		       "%lld takeover(s); last: %s%s%s\n",
		       name, (long long)jint(ow, "gateway"),
		       json_string_value(json_object_get(ow, "state")),
		       json_string_value(json_object_get(ow, "alua")), (long long)jint(ow, "owner"),
		       (long long)jint(ow, "epoch"), (long long)jint(ow, "transitions"),
		       (long long)jint(ow, "takeovers"),
		       json_string_value(json_object_get(ow, "last")),
		       problem && *problem ? "; PROBLEM: " : "", problem && *problem ? problem : "");
		/* its warm standby (docs/gateways.md, "Warm standby") */
		json_t *sh = json_object_get(disk, "shadow");
		char ob[32], rt[32];
		if (!sh)
			continue;
		hl_format_size(jint(sh, "origin_bytes"), ob, sizeof(ob));
		hl_format_size(jint(sh, "rate"), rt, sizeof(rt));
		if (!strcmp(json_string_value(json_object_get(sh, "role")) ?: "", "standby"))
			printf("  %-14s shadow: %lld of %lld hot block(s) shadowed, %lld behind; "
			       "origin reads %lld (%s) at %s/s; %lld mark move(s), %lld dropped; %s\n",
			       "", (long long)jint(sh, "shadowed"), (long long)jint(sh, "hot_blocks"),
			       (long long)jint(sh, "behind"), (long long)jint(sh, "origin_reads"), ob,
			       rt, (long long)jint(sh, "marks"), (long long)jint(sh, "dropped"),
			       json_string_value(json_object_get(sh, "state")));
		else
			printf("  %-14s shadow: publishes %lld hot block(s) (%lld time(s)); origin "
			       "reads as standby %lld (%s); %s\n",
			       "", (long long)jint(sh, "hot_blocks"), (long long)jint(sh, "publishes"),
			       (long long)jint(sh, "origin_reads"), ob,
			       json_string_value(json_object_get(sh, "state")));
	}
	json_object_foreach(caches, name, cache) {
		json_t *pc = json_object_get(pcaches, name);
		uint64_t reqs = jdelta(cache, pc, "read_reqs");
		uint64_t bytes = jdelta(cache, pc, "bytes_read");
		uint64_t bs = jint(cache, "block_size"), rec = jint(cache, "recommended_block_size");
		char bsz[32], rsz[32], ub[32];

		printf("\ncache %s: %s, %llu blocks of %s", name,
		       json_is_true(json_object_get(cache, "passthrough"))
		           ? "PASS-THROUGH (device failed; disks served from their origins)"
		           : "ok",
		       (unsigned long long)jint(cache, "nslots"), hl_format_size(bs, bsz, sizeof(bsz)));
		if (rec && rec != bs)
			printf(" (the reads so far suggest %s blocks)",
			       hl_format_size(rec, rsz, sizeof(rsz)));
		printf("\n  reads    %llu%s: %s hits, %s partial, %s misses (%llu of all these "
		       "sequential, not admitted)\n",
		       (unsigned long long)reqs, span,
		       pct(jdelta(cache, pc, "read_hits"), reqs, a, sizeof(a)),
		       pct(jdelta(cache, pc, "read_partial"), reqs, b, sizeof(b)),
		       pct(jdelta(cache, pc, "read_misses"), reqs, c, sizeof(c)),
		       (unsigned long long)jdelta(cache, pc, "read_bypass"));
		printf("  bytes    %.1f MB read%s: %s from the cache (%s from RAM), %s from the origin\n",
		       (double)bytes / 1e6, span, pct(jdelta(cache, pc, "bytes_read_cache"), bytes, a, sizeof(a)),
		       pct(jdelta(cache, pc, "bytes_read_ram"), bytes, b, sizeof(b)),
		       pct(jdelta(cache, pc, "bytes_read_origin"), bytes, c, sizeof(c)));
		printf("  SSD      %llu of %llu blocks used, %.1f MB written%s; %llu admitted, "
		       "%llu rejected, %llu promoted from RAM, %llu evicted\n",
		       (unsigned long long)jint(cache, "used_slots"),
		       (unsigned long long)jint(cache, "nslots"),
		       (double)jdelta(cache, pc, "bytes_cache_write") / 1e6, span,
		       (unsigned long long)jdelta(cache, pc, "admissions"),
		       (unsigned long long)jdelta(cache, pc, "rejections"),
		       (unsigned long long)jdelta(cache, pc, "promotions"),
		       (unsigned long long)jdelta(cache, pc, "evictions"));
		{
			double ratio = json_real_value(json_object_get(cache, "write_ratio")) * 100;
			uint64_t budget = jint(cache, "write_budget_pct");

			printf("  wear     the SSD writes %.1f%% of what an admit-all cache would "
			       "(recently); budget %llu%%%s\n",
			       ratio, (unsigned long long)budget,
			       json_is_true(json_object_get(cache, "write_budget_open"))
			           ? ", so admission is relaxed"
			           : "");
		}
		printf("  RAM      window %llu of %llu blocks; update buffer %s, %llu write-backs\n",
		       (unsigned long long)jint(cache, "window_used_slots"),
		       (unsigned long long)jint(cache, "window_slots"),
		       hl_format_size(jint(cache, "update_buffer_bytes"), ub, sizeof(ub)),
		       (unsigned long long)jdelta(cache, pc, "update_buffer_writebacks"));
		{
			/* the lazy restore of the slot records after a warm start */
			const char *rst = json_string_value(json_object_get(cache, "restore_state"));
			if (rst && strcmp(rst, "none")) {
				printf("  restore  %s", rst);
				if (!strcmp(rst, "done"))
					printf(" in %.1f s", (double)jint(cache, "restore_ms") / 1000.0);
				printf(": %llu blocks restored, %llu records dropped (%llu written "
				       "while restoring), %llu of %llu record pages left\n",
				       (unsigned long long)jint(cache, "restore_restored"),
				       (unsigned long long)jint(cache, "restore_dropped"),
				       (unsigned long long)jint(cache, "restore_written"),
				       (unsigned long long)jint(cache, "restore_pages_left"),
				       (unsigned long long)jint(cache, "restore_pages"));
			}
		}
		if (jdelta(cache, pc, "dev_errors") || jdelta(cache, pc, "origin_errors"))
			printf("  errors   %llu of the cache device, %llu of origins\n",
			       (unsigned long long)jdelta(cache, pc, "dev_errors"),
			       (unsigned long long)jdelta(cache, pc, "origin_errors"));
		{
			/* what the last start kept of each disk's blocks, and why (issue 17) */
			json_t *cdisks = json_object_get(cache, "disks"), *cdisk;
			const char *dname;

			json_object_foreach(cdisks, dname, cdisk) {
				const char *ws =
				    json_string_value(json_object_get(cdisk, "warm_start"));
				if (ws && *ws)
					printf("  start    disk %s: %s\n", dname, ws);
			}
		}
	}
	printf("\nsessions: %llu\n", (unsigned long long)jint(r, "sessions"));
	json_t *is = json_object_get(r, "iscsi");
	if (is) {
		json_t *pis = prev ? json_object_get(prev, "iscsi") : NULL;
		printf("logins: %llu, %llu failed, %llu CHAP answers wrong, %llu refused unchecked%s; "
		       "connections %llu (%llu in login); refused %llu at accept, %llu at a session "
		       "cap; %llu silent ones evicted; accept paused %llu times (descriptors)\n",
		       (unsigned long long)jdelta(is, pis, "logins"),
		       (unsigned long long)jdelta(is, pis, "login_failures"),
		       (unsigned long long)jdelta(is, pis, "auth_failures"),
		       (unsigned long long)jdelta(is, pis, "auth_throttled"), span,
		       (unsigned long long)jint(is, "connections"),
		       (unsigned long long)jint(is, "pending_logins"),
		       (unsigned long long)jdelta(is, pis, "refused_pending"),
		       (unsigned long long)jdelta(is, pis, "refused_sessions"),
		       (unsigned long long)jdelta(is, pis, "pending_evicted"),
		       (unsigned long long)jdelta(is, pis, "accept_paused"));
	}
	json_t *wb = json_object_get(r, "write_buffers");
	if (wb) {
		json_t *pwb = prev ? json_object_get(prev, "write_buffers") : NULL;
		char held[32], peak[32], lim[32];
		printf("write buffers: %s held by unfinished WRITEs (peak %s) of %s; %llu waiting "
		       "for R2T; %llu deferred, %llu TASK SET FULL (%llu for a source's share); "
		       "%llu sources; connections closed: %llu too slow, %llu no data%s\n",
		       hl_format_size(jint(wb, "held_bytes"), held, sizeof(held)),
		       hl_format_size(jint(wb, "peak_bytes"), peak, sizeof(peak)),
		       hl_format_size(jint(wb, "limit"), lim, sizeof(lim)),
		       (unsigned long long)jint(wb, "waiting"),
		       (unsigned long long)jdelta(wb, pwb, "r2t_deferred"),
		       (unsigned long long)jdelta(wb, pwb, "task_set_full"),
		       (unsigned long long)jdelta(wb, pwb, "source_capped"),
		       (unsigned long long)jint(wb, "sources"),
		       (unsigned long long)jdelta(wb, pwb, "closed_slow"),
		       (unsigned long long)jdelta(wb, pwb, "closed_no_data"), span);
	}
}

static int cmd_stats(const char *path, int argc, char **argv)
{
	bool as_json = false;
	int watch = 0;

	(void)path;
	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0 || strcmp(argv[i], "json") == 0) {
			as_json = true;
		} else if (strcmp(argv[i], "--watch") == 0 || strcmp(argv[i], "watch") == 0) {
			watch = 1;
			if (i + 1 < argc && atoi(argv[i + 1]) > 0)
				watch = atoi(argv[++i]);
		} else {
			fprintf(stderr, "usage: stats [--json] [--watch [SECONDS]]\n");
			return 2;
		}
	}
	struct sigaction sa = {.sa_handler = on_sigint}, old;
	if (watch)
		sigaction(SIGINT, &sa, &old);
	interrupted = 0;
	json_t *prev = NULL;
	do {
		json_t *r = request("stats", NULL);
		if (!r) {
			json_decref(prev);
			return 1;
		}
		if (watch && isatty(STDOUT_FILENO))
			printf("\033[H\033[2J");
		if (as_json)
			print_json(r);
		else
			print_stats_text(r, prev, watch);
		json_decref(prev);
		prev = r;
		fflush(stdout);
		if (watch)
			sleep((unsigned)watch);
	} while (watch && !interrupted);
	json_decref(prev);
	if (watch)
		sigaction(SIGINT, &old, NULL);
	return 0;
}

static int cmd_simple(const char *cmd, json_t *args)
{
	json_t *r = request(cmd, args);
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
	json_t *r = request(verb, json_pack("{s:s}", "path", target));
	if (!r)
		return 1;
	printf("%s: %s, %s; owner gateway %lld, epoch %lld\n", target,
	       json_string_value(json_object_get(r, "state")),
	       json_string_value(json_object_get(r, "alua")), (long long)jint(r, "owner"),
	       (long long)jint(r, "epoch"));
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

struct command {
	const char *name;
	const char *usage;
	int (*fn)(const char *path, int argc, char **argv);
};

static const struct command commands[] = {
	{"ls", "ls [PATH]                 the tree under PATH, one line per object", cmd_ls},
	{"cd", "cd PATH                   move in the tree (.. and absolute paths work)", cmd_cd},
	{"pwd", "pwd                       where you are", cmd_pwd},
	{"create", "create NAME [key=value]   e.g. /disks create d1 origin=file:/srv/d1.img", cmd_create},
	{"delete", "delete [NAME] [force]      remove an object (force: even with sessions)", cmd_delete},
	{"set", "set key=value ... [force]  change parameters (key= resets one)", cmd_set},
	{"get", "get [key ...]             show parameters", cmd_get},
	{"info", "info                      everything known about this object", cmd_info},
	{"stats", "stats [--json] [--watch [S]]  counters (refreshing with --watch)", cmd_stats},
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
static const char *const global_params[] = {"log_level=",           "poll_us=",
                                            "write_buffer_limit=",  "logout_timeout=",
                                            "max_pending_logins=",  "max_pending_logins_per_addr=",
                                            "discovery_chap_user=", "discovery_chap_secret=",
                                            "metrics_listen=",      "send_uring=",
                                            NULL};

static const char *const lun_params[] = {"disk=", NULL};

static const char *const *params_for(const char *path)
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
	for (const struct command *c = commands; c->name; c++)
		printf("  %s\n", c->usage);
	const char *const *p = params_for(path);
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
static int run_words(int argc, char **argv)
{
	char path[1024];
	const char *cmd;

	if (argc == 0)
		return 0;
	if (argv[0][0] == '/' || argv[0][0] == '.') {
		resolve(argv[0], path, sizeof(path));
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
	for (const struct command *c = commands; c->name; c++) {
		if (strcmp(c->name, cmd) == 0)
			return c->fn(path, argc - 1, argv + 1);
	}
	fprintf(stderr, "error: unknown command '%s' (try help)\n", cmd);
	return 2;
}

/* Split a line on blanks; "double quotes" keep blanks. Modifies line. */
static int split_words(char *line, char **words, int max)
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

/* ---- completion ---- */

static char **completion_words;
static size_t n_completion_words;

static void completion_reset(void)
{
	for (size_t i = 0; i < n_completion_words; i++)
		free(completion_words[i]);
	free(completion_words);
	completion_words = NULL;
	n_completion_words = 0;
}

static void completion_add(const char *w)
{
	char **v = realloc(completion_words, (n_completion_words + 1) * sizeof(*v));
	if (!v)
		return;
	completion_words = v;
	completion_words[n_completion_words] = strdup(w);
	if (completion_words[n_completion_words])
		n_completion_words++;
}

static char *completion_gen(const char *text, int state)
{
	static size_t i;
	if (state == 0)
		i = 0;
	while (i < n_completion_words) {
		const char *w = completion_words[i++];
		if (strncmp(w, text, strlen(text)) == 0)
			return strdup(w);
	}
	return NULL;
}

/* Candidate paths for text: children of its folder part. */
static void complete_paths(const char *text)
{
	char dir[1024], base[1024];
	const char *slash = strrchr(text, '/');

	if (slash) {
		size_t dl = (size_t)(slash - text);
		char part[1024];
		snprintf(part, sizeof(part), "%.*s", (int)dl, text);
		resolve(dl ? part : "/", dir, sizeof(dir));
		snprintf(base, sizeof(base), "%.*s", (int)(dl + 1), text);
	} else {
		resolve(".", dir, sizeof(dir));
		base[0] = '\0';
	}
	json_t *r = request("ls", json_pack("{s:s}", "path", dir));
	if (!r)
		return;
	size_t i;
	json_t *child;
	json_array_foreach(json_object_get(r, "children"), i, child) {
		char w[1100];
		snprintf(w, sizeof(w), "%s%s/", base,
			 json_string_value(json_object_get(child, "name")));
		completion_add(w);
	}
	json_decref(r);
}

static char **complete(const char *text, int start, int end)
{
	char line[1024];
	char *words[32];
	(void)end;

	completion_reset();
	rl_attempted_completion_over = 1;
	snprintf(line, sizeof(line), "%.*s", start, rl_line_buffer);
	int n = split_words(line, words, 32);
	bool first_is_path = n > 0 && (words[0][0] == '/' || words[0][0] == '.');
	int cmd_pos = first_is_path ? 1 : 0;

	if (n == cmd_pos) {
		for (const struct command *c = commands; c->name; c++)
			completion_add(c->name);
		if (n == 0)
			complete_paths(text);
	} else {
		const char *cmd = words[cmd_pos];
		char path[1024];
		if (first_is_path)
			resolve(words[0], path, sizeof(path));
		else
			hl_strlcpy(path, cwd, sizeof(path));
		if (strcmp(cmd, "cd") == 0 || strcmp(cmd, "ls") == 0 || strcmp(cmd, "delete") == 0) {
			complete_paths(text);
		} else if (strcmp(cmd, "set") == 0 || strcmp(cmd, "create") == 0 ||
			   strcmp(cmd, "get") == 0) {
			const char *const *p = params_for(path);
			for (; p && *p; p++)
				completion_add(*p);
			if (strcmp(cmd, "create") == 0 && strstr(path, "/luns"))
				complete_paths(text);
		}
	}
	rl_completion_append_character = '\0';
	return rl_completion_matches(text, completion_gen);
}

/*
 * line as the history keeps it: the value of each secret KEY=VALUE word
 * masked as get shows it ("********", which set takes back as "unchanged"),
 * an origin URL's credentials as "user%***@"; KEY=- and KEY=@FILE hold no
 * secret and stay. Words are split as split_words does (quotes kept).
 */
static void history_line(const char *line, char *out, size_t len)
{
	size_t o = 0;
	const char *p = line;

	out[0] = '\0';
	while (*p && o + 1 < len) {
		if (*p == ' ' || *p == '\t') {
			out[o++] = *p++;
			continue;
		}
		const char *w = p;
		bool quoted = false;
		for (; *p && (quoted || (*p != ' ' && *p != '\t')); p++)
			quoted ^= *p == '"';
		size_t wl = (size_t)(p - w);
		const char *eq = memchr(w, '=', wl);
		char val[1100], shown[2200];
		const char *put = NULL;
		size_t put_len = wl;
		if (eq && !memchr(w, '"', (size_t)(eq - w))) {
			/* the value without its quotes, as split_words would give it */
			size_t vl = 0;
			for (const char *q = eq + 1; q < p && vl + 1 < sizeof(val); q++)
				if (*q != '"')
					val[vl++] = *q;
			val[vl] = '\0';
			if (secret_key(w, (size_t)(eq - w)) && vl && strcmp(val, "-") &&
			    val[0] != '@')
				put = "********";
			else if ((size_t)(eq - w) == 6 && memcmp(w, "origin", 6) == 0 &&
			         strcmp(hl_uri_redact(val, false, shown, sizeof(shown)), val))
				put = shown;
			explicit_bzero(val, sizeof(val));
		}
		if (put) {
			o +=
			    (size_t)snprintf(out + o, len - o, "%.*s%s", (int)(eq + 1 - w), w, put);
		} else {
			if (put_len > len - 1 - o)
				put_len = len - 1 - o;
			memcpy(out + o, w, put_len);
			o += put_len;
		}
		if (o >= len)
			o = len - 1;
		out[o] = '\0';
	}
	out[o < len ? o : len - 1] = '\0';
}

/* Write the history only its owner can read (it names the whole tree). */
static void save_history(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);

	if (fd < 0)
		return;
	fchmod(fd, 0600); /* a file an older hotlunctl left readable by others */
	close(fd);
	write_history(path);
}

static void run_shell(void)
{
	char prompt[1100], hist[PATH_MAX] = "";
	const char *home = getenv("HOME");

	interactive = true;
	rl_attempted_completion_function = complete;
	using_history();
	if (home) {
		snprintf(hist, sizeof(hist), "%s/.hotlunctl_history", home);
		read_history(hist);
	}
	printf("hotlunctl %s: connected to %s. Type help for commands, Tab to complete.\n",
	       PACKAGE_VERSION, socket_path);
	for (;;) {
		snprintf(prompt, sizeof(prompt), "hotlun:%s> ", cwd);
		char *line = readline(prompt);
		if (!line) {
			putchar('\n');
			break;
		}
		char *words[64], kept[4096];
		size_t len = strlen(line);
		if (*line) {
			history_line(line, kept, sizeof(kept));
			add_history(kept);
		}
		int n = split_words(line, words, 64);
		if (n == 1 && (strcmp(words[0], "exit") == 0 || strcmp(words[0], "quit") == 0)) {
			free(line);
			break;
		}
		run_words(n, words);
		fflush(stdout);
		explicit_bzero(line, len); /* a secret typed inline */
		free(line);
	}
	if (hist[0])
		save_history(hist);
	completion_reset();
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
	for (const struct command *c = commands; c->name; c++)
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
		rc = run_words(argc - optind, argv + optind);
	else if (isatty(STDIN_FILENO))
		run_shell();
	else {
		/* commands on stdin, one per line (scripts) */
		char line[4096];
		while (fgets(line, sizeof(line), stdin)) {
			char *words[64];
			line[strcspn(line, "\n")] = '\0';
			int n = split_words(line, words, 64);
			int r = run_words(n, words);
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
