/*
 * ctl_limits_ut.c - who the control server serves and how many (h33g):
 * only root and its own user, whatever the socket's mode lets connect (an
 * administrator who widens it to 0666 for a monitoring user hands that
 * user every command: none is read-only); and at most HL_CTL_MAX_CLIENTS
 * connections at once, the one over turned away with a message.
 */
#include "ctl_ut_lib.h"
#include "hotlun/log.h"

#include <errno.h>
#include <grp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static int runs; /* poke handlers run */

static int poke_fn(void *ctx, json_t *args, json_t **result, char *err, size_t errlen)
{
	(void)ctx, (void)args, (void)err, (void)errlen;
	__atomic_add_fetch(&runs, 1, __ATOMIC_SEQ_CST);
	*result = json_pack("{s:b}", "poked", 1);
	return 0;
}

static const struct hl_ctl_command cmds[] = {
	{"poke", "count a run", poke_fn},
	{NULL, NULL, NULL},
};

/* One request; the reply's "ok" (1, 0), or -1 when no reply came. */
static int poke(int fd, char *err, size_t errlen)
{
	json_t *reply = NULL;
	int ok = -1;

	if (hl_ctl_call(fd, "poke", NULL, &reply) == 0 && reply) {
		ok = json_is_true(json_object_get(reply, "ok"));
		const char *e = json_string_value(json_object_get(reply, "error"));
		snprintf(err, errlen, "%s", e ? e : "");
	}
	json_decref(reply);
	return ok;
}

/* A raw connection (hl_ctl_connect would refuse a server of another uid: not the case here). */
static int dial(void)
{
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/*
 * A process of uid 65534 connects (the mode lets it) and asks: it gets an
 * error and its request never runs. Before, it was served like root.
 */
static void test_other_user_refused(void)
{
	if (geteuid() != 0) {
		fprintf(stderr, "(not root: another uid cannot be tried)\n");
		return;
	}
	int before = __atomic_load_n(&runs, __ATOMIC_SEQ_CST);
	int pipefd[2];
	CU_ASSERT_FATAL(pipe(pipefd) == 0);
	pid_t pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (pid == 0) {
		/* system calls only: the parent has threads (no malloc after fork) */
		static const char req[] = "{\"cmd\":\"poke\"}\n";
		char got[256] = "-2 not run";
		close(pipefd[0]);
		if (setgroups(0, NULL) == 0 && setresgid(65534, 65534, 65534) == 0 &&
		    setresuid(65534, 65534, 65534) == 0) {
			int fd = dial();
			ssize_t n = -1;
			struct timeval tv = {.tv_sec = 3};
			/* until the server closes, or 3 s (a server that serves it keeps it open) */
			/* the send may find the server gone already (EPIPE): its line is still there */
			if (fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0) {
				(void)send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL);
				n = recv(fd, got, sizeof(got) - 1, MSG_WAITALL);
			}
			got[n > 0 ? n : 0] = '\0';
		}
		if (write(pipefd[1], got, strlen(got)) < 0)
			_exit(1);
		_exit(0);
	}
	close(pipefd[1]);
	char out[300] = "";
	ssize_t n = read(pipefd[0], out, sizeof(out) - 1);
	close(pipefd[0]);
	waitpid(pid, NULL, 0);
	out[n > 0 ? n : 0] = '\0';
	fprintf(stderr, "(uid 65534: %s)\n", out);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"ok\":false"));
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "may not use the control socket"));
	CU_ASSERT_PTR_NULL(strstr(out, "poked"));
	CU_ASSERT_EQUAL(__atomic_load_n(&runs, __ATOMIC_SEQ_CST), before);

	/* root still is */
	char err[256];
	int fd = dial();
	CU_ASSERT_TRUE_FATAL(fd >= 0);
	CU_ASSERT_EQUAL(poke(fd, err, sizeof(err)), 1);
	close(fd);
}

/* HL_CTL_MAX_CLIENTS held open: the next is turned away; one closed, one more gets in. */
static void test_connections_bounded(void)
{
	int fds[HL_CTL_MAX_CLIENTS];
	char err[256];

	for (int i = 0; i < HL_CTL_MAX_CLIENTS; i++) {
		fds[i] = dial();
		CU_ASSERT_TRUE_FATAL(fds[i] >= 0);
		CU_ASSERT_EQUAL_FATAL(poke(fds[i], err, sizeof(err)), 1);
	}
	int extra = dial();
	CU_ASSERT_TRUE_FATAL(extra >= 0);
	CU_ASSERT_EQUAL(poke(extra, err, sizeof(err)), 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "too many control connections"));
	close(extra);

	close(fds[0]);
	/* the server sees the close on its next turn: wait for it to count it */
	int ok = 0;
	for (int i = 0; i < 200 && ok != 1; i++) {
		int fd = dial();
		ok = fd >= 0 ? poke(fd, err, sizeof(err)) : -1;
		if (fd >= 0)
			close(fd);
		if (ok != 1)
			usleep(10000);
	}
	CU_ASSERT_EQUAL(ok, 1);
	for (int i = 1; i < HL_CTL_MAX_CLIENTS; i++)
		close(fds[i]);
}

static const struct hl_test tests[] = {
	{"another user is refused whatever the mode", test_other_user_refused},
	{"connections are bounded", test_connections_bounded},
	{NULL, NULL},
};

int main(void)
{
	hl_log_open(false, HL_LOG_ERR);
	/* Mode 0666: the socket's permissions let anyone connect; only the server's check is left. */
	return ctl_ut_run("ctl_limits", 0666, cmds, tests);
}
