/*
 * ctl_ut.c - the control socket: dispatch, validation, oversized requests,
 * deadlines (issue 24 item 6: a request its client gave up on never runs).
 */
#include "ctl_ut_lib.h"
#include "hotlun/log.h"
#include "hotlun/util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static int calls;
static int echo_calls; /* echo handlers run (the deadline tests count them) */
static int hold;       /* block_fn waits while set */
static int blocking;   /* block_fn is running */

static int echo_fn(void *ctx, json_t *args, json_t **result, char *err, size_t errlen)
{
	json_t *n = json_object_get(args, "n");
	(void)ctx;
	calls++;
	__atomic_add_fetch(&echo_calls, 1, __ATOMIC_SEQ_CST);
	if (n && !json_is_integer(n)) {
		snprintf(err, errlen, "n: expected an integer");
		return -EINVAL;
	}
	*result = json_pack("{s:I}", "n", n ? json_integer_value(n) : 0);
	return 0;
}

/* Holds the control thread while `hold` is set, as a long request does (at most 10 s). */
static int block_fn(void *ctx, json_t *args, json_t **result, char *err, size_t errlen)
{
	(void)ctx, (void)args, (void)result, (void)err, (void)errlen;
	__atomic_store_n(&blocking, 1, __ATOMIC_SEQ_CST);
	for (int i = 0; i < 10000 && __atomic_load_n(&hold, __ATOMIC_SEQ_CST); i++)
		usleep(1000);
	__atomic_store_n(&blocking, 0, __ATOMIC_SEQ_CST);
	return 0;
}

/* A request that takes 300 ms once started. */
static int slow_fn(void *ctx, json_t *args, json_t **result, char *err, size_t errlen)
{
	(void)ctx, (void)args, (void)err, (void)errlen;
	usleep(300000);
	*result = json_pack("{s:b}", "slow", 1);
	return 0;
}

static struct hl_ctl_later *pending; /* control thread: later_fn's deferred reply */

/* Defers its reply: answer_later (posted to the control thread) sends it. */
static int later_fn(void *ctx, json_t *args, json_t **result, char *err, size_t errlen)
{
	(void)ctx, (void)args, (void)result, (void)err, (void)errlen;
	pending = hl_ctl_defer(srv);
	return pending ? HL_CTL_DEFERRED : -ENOMEM;
}

static void answer_later(void *arg)
{
	(void)arg;
	if (pending)
		hl_ctl_reply_later(pending, 0, json_pack("{s:b}", "later", 1), NULL);
	pending = NULL;
}

static const struct hl_ctl_command cmds[] = {
	{"echo", "return args.n", echo_fn},
	{"later", "answer when the test says so (hl_ctl_defer)", later_fn},
	{"block", "hold the control thread while the test says so", block_fn},
	{"slow", "take 300 ms", slow_fn},
	{NULL, NULL, NULL},
};

static json_t *call(int fd, const char *cmd, json_t *args)
{
	json_t *reply = NULL;
	CU_ASSERT_EQUAL(hl_ctl_call(fd, cmd, args, &reply), 0);
	json_decref(args);
	return reply;
}

/* Send raw bytes, read one reply line. */
static json_t *raw(int fd, const char *bytes, size_t len)
{
	char buf[4096];
	size_t have = 0;
	CU_ASSERT_EQUAL(send(fd, bytes, len, MSG_NOSIGNAL), (ssize_t)len);
	while (have < sizeof(buf)) {
		ssize_t n = recv(fd, buf + have, sizeof(buf) - have, 0);
		if (n <= 0)
			return NULL;
		have += (size_t)n;
		if (memchr(buf, '\n', have))
			break;
	}
	return json_loadb(buf, (size_t)((char *)memchr(buf, '\n', have) - buf), 0, NULL);
}

static void expect_error(json_t *reply, const char *substr)
{
	CU_ASSERT_PTR_NOT_NULL_FATAL(reply);
	CU_ASSERT_TRUE(json_is_false(json_object_get(reply, "ok")));
	const char *msg = json_string_value(json_object_get(reply, "error"));
	CU_ASSERT_PTR_NOT_NULL(msg);
	if (msg && !strstr(msg, substr)) {
		fprintf(stderr, "error '%s' lacks '%s'\n", msg, substr);
		CU_FAIL("error message");
	}
	json_decref(reply);
}

static void test_good_request_and_socket_mode(void)
{
	struct stat st;
	int fd = hl_ctl_connect(path);
	CU_ASSERT_TRUE_FATAL(fd >= 0);
	CU_ASSERT_EQUAL(stat(path, &st), 0);
	CU_ASSERT_EQUAL(st.st_mode & 0777, 0600);
	json_t *reply = call(fd, "echo", json_pack("{s:i}", "n", 7));
	CU_ASSERT_TRUE(json_is_true(json_object_get(reply, "ok")));
	CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(reply, "result"), "n")), 7);
	json_decref(reply);
	reply = call(fd, "help", NULL);
	CU_ASSERT_EQUAL(json_array_size(json_object_get(reply, "result")), 5);
	json_decref(reply);
	close(fd);
}

static void test_bad_requests_get_errors_and_connection_survives(void)
{
	int fd = hl_ctl_connect(path);
	CU_ASSERT_TRUE_FATAL(fd >= 0);
	expect_error(raw(fd, "{not json\n", 10), "malformed JSON");
	expect_error(raw(fd, "[1,2]\n", 6), "JSON object");
	expect_error(raw(fd, "{\"cmd\":5}\n", 10), "\"cmd\"");
	expect_error(raw(fd, "{\"cmd\":\"echo\",\"args\":3}\n", 24), "\"args\"");
	expect_error(raw(fd, "{\"cmd\":\"echo\",\"x\":1}\n", 21), "unknown request member");
	expect_error(raw(fd, "{\"cmd\":\"nope\"}\n", 15), "unknown command");
	expect_error(call(fd, "echo", json_pack("{s:s}", "n", "x")), "expected an integer");
	/* still usable */
	json_t *reply = call(fd, "echo", NULL);
	CU_ASSERT_TRUE(json_is_true(json_object_get(reply, "ok")));
	json_decref(reply);
	close(fd);
}

static void test_oversized_request_is_refused(void)
{
	int fd = hl_ctl_connect(path);
	size_t len = HL_CTL_MAX_REQUEST + 100000;
	char *big = malloc(len);
	CU_ASSERT_TRUE_FATAL(fd >= 0 && big);
	memset(big, 'a', len);
	int before = calls;
	/* The server answers and closes once it has seen too much. */
	size_t off = 0;
	while (off < len) {
		ssize_t n = send(fd, big + off, len - off, MSG_NOSIGNAL);
		if (n <= 0)
			break;
		off += (size_t)n;
	}
	char buf[256];
	ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
	CU_ASSERT_TRUE(n > 0);
	if (n > 0) {
		buf[n] = '\0';
		CU_ASSERT_PTR_NOT_NULL(strstr(buf, "too large"));
	}
	CU_ASSERT_EQUAL(calls, before);
	free(big);
	close(fd);
	/* the server still serves others */
	fd = hl_ctl_connect(path);
	json_t *reply = call(fd, "echo", NULL);
	CU_ASSERT_TRUE(json_is_true(json_object_get(reply, "ok")));
	json_decref(reply);
	close(fd);
}

static int64_t now_wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t now_mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Send one request line with a deadline (ms since 1970). */
static void send_with_deadline(int fd, const char *cmd, int64_t deadline)
{
	char line[128];
	int n = snprintf(line, sizeof(line), "{\"cmd\":\"%s\",\"deadline\":%lld}\n", cmd,
	                 (long long)deadline);
	CU_ASSERT_EQUAL(send(fd, line, (size_t)n, MSG_NOSIGNAL), n);
}

/* Read one line (the test's replies are short). */
static json_t *read_reply(int fd)
{
	char buf[1024];
	size_t have = 0;
	while (have < sizeof(buf) - 1) {
		ssize_t n = recv(fd, buf + have, 1, 0);
		if (n <= 0)
			return NULL;
		if (buf[have++] == '\n')
			break;
	}
	return json_loadb(buf, have - 1, 0, NULL);
}

static void expect_started(json_t *line)
{
	CU_ASSERT_PTR_NOT_NULL_FATAL(line);
	CU_ASSERT_TRUE(json_is_true(json_object_get(line, "started")));
	CU_ASSERT_PTR_NULL(json_object_get(line, "ok"));
	json_decref(line);
}

static void test_deadline_checked_at_its_turn(void)
{
	int fd = hl_ctl_connect(path);
	int before = __atomic_load_n(&echo_calls, __ATOMIC_SEQ_CST);
	CU_ASSERT_TRUE_FATAL(fd >= 0);

	/* passed: refused, not run */
	send_with_deadline(fd, "echo", now_wall_ms() - 1500);
	expect_error(read_reply(fd),
	             "timed out before it ran; nothing was changed (its deadline passed");
	CU_ASSERT_EQUAL(__atomic_load_n(&echo_calls, __ATOMIC_SEQ_CST), before);
	/* ahead: "started", then the reply */
	send_with_deadline(fd, "echo", now_wall_ms() + 10000);
	expect_started(read_reply(fd));
	json_t *reply = read_reply(fd);
	CU_ASSERT_TRUE(json_is_true(json_object_get(reply, "ok")));
	json_decref(reply);
	CU_ASSERT_EQUAL(__atomic_load_n(&echo_calls, __ATOMIC_SEQ_CST), before + 1);
	/* not a whole number of ms */
	static const char *const bad[] = {"{\"cmd\":\"echo\",\"deadline\":\"soon\"}\n",
	                                  "{\"cmd\":\"echo\",\"deadline\":-5}\n",
	                                  "{\"cmd\":\"echo\",\"deadline\":1.5}\n"};
	for (size_t i = 0; i < HL_ARRAY_SIZE(bad); i++)
		expect_error(raw(fd, bad[i], strlen(bad[i])), "\"deadline\" must be");
	/* without one: no "started" line, as before */
	reply = call(fd, "echo", NULL);
	CU_ASSERT_TRUE(json_is_true(json_object_get(reply, "ok")));
	json_decref(reply);
	close(fd);
}

/*
 * While the control thread is held: a client that sent a request and closed
 * its connection, one that gave up through hl_ctl_call_timed (-ETIMEDOUT
 * after its timeout, connection still open) and one that shut down its
 * sending side before its deadline are not run when the thread is free.
 * The last reads "started" (sent before the check), then the refusal.
 */
static void test_given_up_requests_never_run(void)
{
	int holder = hl_ctl_connect(path), gone = hl_ctl_connect(path),
	    timed = hl_ctl_connect(path);
	int quit = hl_ctl_connect(path);
	CU_ASSERT_TRUE_FATAL(holder >= 0 && gone >= 0 && timed >= 0 && quit >= 0);
	int before = __atomic_load_n(&echo_calls, __ATOMIC_SEQ_CST);

	__atomic_store_n(&hold, 1, __ATOMIC_SEQ_CST);
	CU_ASSERT_EQUAL(send(holder, "{\"cmd\":\"block\"}\n", 16, MSG_NOSIGNAL), 16);
	for (int i = 0; i < 500 && !__atomic_load_n(&blocking, __ATOMIC_SEQ_CST); i++)
		usleep(10000);
	CU_ASSERT_TRUE_FATAL(__atomic_load_n(&blocking, __ATOMIC_SEQ_CST));

	CU_ASSERT_EQUAL(send(gone, "{\"cmd\":\"echo\"}\n", 15, MSG_NOSIGNAL), 15);
	close(gone);
	send_with_deadline(quit, "echo", now_wall_ms() + 60000);
	shutdown(quit, SHUT_WR);
	json_t *reply = NULL;
	int64_t t0 = now_mono_ms();
	CU_ASSERT_EQUAL(hl_ctl_call_timed(timed, "echo", NULL, 200, &reply), -ETIMEDOUT);
	int64_t waited = now_mono_ms() - t0;
	CU_ASSERT_TRUE(waited >= 190 && waited < 2000);

	__atomic_store_n(&hold, 0, __ATOMIC_SEQ_CST);
	reply = read_reply(holder);
	CU_ASSERT_TRUE(json_is_true(json_object_get(reply, "ok")));
	json_decref(reply);
	/* its deadline passed before its turn (or, if the turn came first, it gave up) */
	reply = read_reply(timed);
	if (reply && json_object_get(reply, "started")) {
		json_decref(reply);
		reply = read_reply(timed);
	}
	expect_error(reply, "timed out before it ran; nothing was changed");
	expect_started(read_reply(quit));
	expect_error(read_reply(quit),
	             "timed out before it ran; nothing was changed (its client gave up");
	close(timed);
	close(quit);
	/* one more round trip: everything queued before it has had its turn */
	reply = call(holder, "help", NULL);
	json_decref(reply);
	CU_ASSERT_EQUAL(__atomic_load_n(&echo_calls, __ATOMIC_SEQ_CST), before);
	close(holder);
}

/* Started in time but slower than the timeout: -EINPROGRESS, then hl_ctl_wait_reply. */
static void test_call_timed_in_progress(void)
{
	int fd = hl_ctl_connect(path);
	json_t *reply = NULL;
	CU_ASSERT_TRUE_FATAL(fd >= 0);

	CU_ASSERT_EQUAL(hl_ctl_call_timed(fd, "slow", NULL, 100, &reply), -EINPROGRESS);
	CU_ASSERT_EQUAL(hl_ctl_wait_reply(fd, 5000, &reply), 0);
	CU_ASSERT_TRUE(json_is_true(json_object_get(json_object_get(reply, "result"), "slow")));
	json_decref(reply);
	/* in time: the reply, the connection usable; timeout 0 is hl_ctl_call */
	json_t *args = json_pack("{s:i}", "n", 5);
	CU_ASSERT_EQUAL(hl_ctl_call_timed(fd, "echo", args, 2000, &reply), 0);
	CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(reply, "result"), "n")),
	                5);
	json_decref(reply);
	CU_ASSERT_EQUAL(hl_ctl_call_timed(fd, "echo", args, 0, &reply), 0);
	CU_ASSERT_TRUE(json_is_true(json_object_get(reply, "ok")));
	json_decref(reply);
	json_decref(args);
	close(fd);
}

/* A socket file at p that nobody listens on (what a killed server leaves). @return its inode. */
static ino_t stale_socket(const char *p)
{
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	struct stat st;
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", p);
	CU_ASSERT_EQUAL(bind(fd, (struct sockaddr *)&sun, sizeof(sun)), 0);
	close(fd);
	CU_ASSERT_EQUAL(stat(p, &st), 0);
	return st.st_ino;
}

/* issue 19 item 6: the path belongs to the server that answers on it */
static void test_socket_ownership(void)
{
	struct hl_reactor *r2 = NULL;
	struct hl_ctl_server *other = NULL;
	char p2[80];
	struct stat st;

	/* a live server: reported, and a second server does not take its path */
	CU_ASSERT_EQUAL(hl_ctl_socket_in_use(path), 1);
	CU_ASSERT_EQUAL(hl_ctl_server_create(r, path, 0600, cmds, NULL, &other), -EADDRINUSE);
	int fd = hl_ctl_connect(path);
	CU_ASSERT_TRUE(fd >= 0);
	json_t *reply = call(fd, "echo", NULL);
	CU_ASSERT_TRUE(json_is_true(json_object_get(reply, "ok")));
	json_decref(reply);
	close(fd);

	/* a stale file is taken over; nothing there is free; a regular file is not ours */
	snprintf(p2, sizeof(p2), "%s.2", path);
	unlink(p2);
	CU_ASSERT_EQUAL(hl_ctl_socket_in_use(p2), 0);
	stale_socket(p2);
	CU_ASSERT_EQUAL(hl_ctl_socket_in_use(p2), 0);
	CU_ASSERT_EQUAL_FATAL(hl_reactor_create(&r2, "ctl2"), 0); /* never started: destroy is ours */
	CU_ASSERT_EQUAL_FATAL(hl_ctl_server_create(r2, p2, 0600, cmds, NULL, &other), 0);
	CU_ASSERT_EQUAL(hl_ctl_socket_in_use(p2), 1);

	/* someone else's socket at the path by the time it stops: left alone */
	unlink(p2);
	ino_t theirs = stale_socket(p2);
	hl_ctl_server_destroy(other);
	CU_ASSERT_EQUAL(stat(p2, &st), 0);
	CU_ASSERT_EQUAL(st.st_ino, theirs);
	unlink(p2);

	/* its own socket is removed */
	CU_ASSERT_EQUAL_FATAL(hl_ctl_server_create(r2, p2, 0600, cmds, NULL, &other), 0);
	hl_ctl_server_destroy(other);
	CU_ASSERT_NOT_EQUAL(stat(p2, &st), 0);

	FILE *f = fopen(p2, "w");
	if (f)
		fclose(f);
	CU_ASSERT_EQUAL(hl_ctl_socket_in_use(p2), -EEXIST);
	CU_ASSERT_EQUAL(hl_ctl_server_create(r2, p2, 0600, cmds, NULL, &other), -EEXIST);
	unlink(p2);
	hl_reactor_destroy(r2);
}

/* Write text to a temporary config file; its path into p. */
static void write_conf(char *p, size_t len, const char *text)
{
	snprintf(p, len, "/tmp/hl-ctl-ut-%d.conf", (int)getpid());
	FILE *f = fopen(p, "w");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	fputs(text, f);
	fclose(f);
}

/* Where a client finds the socket: the config's control_socket, its default, or why not. */
static void test_socket_from_config(void)
{
	char p[64], err[256];
	char *s;

	write_conf(p, sizeof(p), "[global]\ncontrol_socket = /run/x/hotlund.sock\n");
	s = hl_ctl_socket_from_config(p, err, sizeof(err));
	CU_ASSERT_STRING_EQUAL(s, "/run/x/hotlund.sock");
	CU_ASSERT_STRING_EQUAL(err, "");
	free(s);
	/* not set: the default beside the state folder */
	write_conf(p, sizeof(p), "[global]\nstate_dir = /var/tmp/hl\n");
	s = hl_ctl_socket_from_config(p, err, sizeof(err));
	CU_ASSERT_STRING_EQUAL(s, "/var/tmp/hl/hotlund.sock");
	free(s);
	/* a file that does not load: no socket, and why */
	write_conf(p, sizeof(p), "[global]\nno_such_key = 1\n");
	s = hl_ctl_socket_from_config(p, err, sizeof(err));
	CU_ASSERT_PTR_NULL(s);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "no_such_key"));
	/* no file: no socket, and nothing to say */
	unlink(p);
	s = hl_ctl_socket_from_config(p, err, sizeof(err));
	CU_ASSERT_PTR_NULL(s);
	CU_ASSERT_STRING_EQUAL(err, "");
}

/* Read n reply lines from fd (5 s at most); parsed into out[]. @return how many came. */
static int read_lines(int fd, json_t **out, int n, int timeout_ms)
{
	char buf[8192];
	size_t have = 0;
	int got = 0;
	struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	while (got < n && have < sizeof(buf)) {
		char *nl;
		ssize_t k = recv(fd, buf + have, sizeof(buf) - have, 0);
		if (k <= 0)
			break;
		have += (size_t)k;
		while (got < n && (nl = memchr(buf, '\n', have))) {
			out[got++] = json_loadb(buf, (size_t)(nl - buf), 0, NULL);
			have -= (size_t)(nl + 1 - buf);
			memmove(buf, nl + 1, have);
		}
	}
	return got;
}

/*
 * A deferred reply (hl_ctl_defer): other clients are answered meanwhile,
 * the deferring client's next request waits behind it and is answered
 * after it, in order; a client that closed before its deferred reply
 * costs nothing.
 */
static void test_deferred_reply(void)
{
	static const char two[] = "{\"cmd\":\"later\"}\n{\"cmd\":\"echo\",\"args\":{\"n\":2}}\n";
	int fd1 = hl_ctl_connect(path), fd2 = hl_ctl_connect(path), fd3;
	json_t *lines[2] = {NULL, NULL};

	CU_ASSERT_TRUE_FATAL(fd1 >= 0 && fd2 >= 0);
	CU_ASSERT_EQUAL(send(fd1, two, sizeof(two) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(two) - 1);
	usleep(100000);
	json_t *reply = call(fd2, "echo", json_pack("{s:i}", "n", 5)); /* not blocked by fd1's */
	CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(reply, "result"), "n")), 5);
	json_decref(reply);
	CU_ASSERT_EQUAL(read_lines(fd1, lines, 1, 200), 0); /* neither reply yet */
	CU_ASSERT_EQUAL_FATAL(hl_reactor_call(r, answer_later, NULL), 0);
	CU_ASSERT_EQUAL(read_lines(fd1, lines, 2, 5000), 2);
	CU_ASSERT_TRUE(json_is_true(json_object_get(json_object_get(lines[0], "result"), "later")));
	CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(lines[1], "result"), "n")),
	                2);
	json_decref(lines[0]);
	json_decref(lines[1]);
	/* its client gone before the reply: dropped, the server goes on */
	fd3 = hl_ctl_connect(path);
	CU_ASSERT_TRUE_FATAL(fd3 >= 0);
	CU_ASSERT_EQUAL(send(fd3, two, 16, MSG_NOSIGNAL), 16);
	usleep(100000);
	close(fd3);
	CU_ASSERT_EQUAL_FATAL(hl_reactor_call(r, answer_later, NULL), 0);
	reply = call(fd2, "echo", json_pack("{s:i}", "n", 6));
	CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(reply, "result"), "n")), 6);
	json_decref(reply);
	close(fd1);
	close(fd2);
}

static const struct hl_test tests[] = {
	{"socket from a config file", test_socket_from_config},
	{"deferred reply", test_deferred_reply},
	{"socket ownership", test_socket_ownership},
	{"good request, socket mode", test_good_request_and_socket_mode},
	{"bad requests get errors", test_bad_requests_get_errors_and_connection_survives},
	{"oversized request refused", test_oversized_request_is_refused},
	{"deadline checked at its turn", test_deadline_checked_at_its_turn},
	{"given-up requests never run", test_given_up_requests_never_run},
	{"timed call in progress", test_call_timed_in_progress},
	{NULL, NULL},
};

int main(void)
{
	hl_ctl_json_wipe();
	hl_log_open(false, HL_LOG_ERR);
	return ctl_ut_run("ctl", 0600, cmds, tests);
}
