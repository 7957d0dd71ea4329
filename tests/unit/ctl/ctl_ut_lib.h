/*
 * ctl_ut_lib.h - what the control socket's unit tests share: one server on
 * a reactor of its own, at a socket path named after the test and its pid,
 * up before the suite runs and destroyed after it.
 */
#ifndef HOTLUN_TESTS_CTL_UT_LIB_H
#define HOTLUN_TESTS_CTL_UT_LIB_H

#include "hl_test.h"
#include "hotlun/ctl.h"
#include "hotlun/event.h"

#include <stdio.h>
#include <sys/types.h>
#include <unistd.h>

static struct hl_reactor *r;
static struct hl_ctl_server *srv;
static char path[64];

static int start_rc = 1;
static mode_t srv_mode;
static const struct hl_ctl_command *srv_cmds;

static void start_server(void *arg)
{
	(void)arg;
	__atomic_store_n(&start_rc, hl_ctl_server_create(r, path, srv_mode, srv_cmds, NULL, &srv),
	                 __ATOMIC_SEQ_CST);
}

static void stop_server(void *arg)
{
	(void)arg;
	hl_ctl_server_destroy(srv);
	hl_reactor_stop(r);
}

/*
 * Serve cmds on /tmp/hl-<name>-ut-<pid>.sock with the socket's mode, run
 * the suite, stop the server. @return the suite's result, 99 when the
 * server did not start.
 */
static int ctl_ut_run(const char *name, mode_t mode, const struct hl_ctl_command *cmds,
                      const struct hl_test *tests)
{
	snprintf(path, sizeof(path), "/tmp/hl-%s-ut-%d.sock", name, (int)getpid());
	srv_mode = mode;
	srv_cmds = cmds;
	if (hl_reactor_create(&r, "ctl") || hl_reactor_start(r))
		return 99;
	hl_reactor_call(r, start_server, NULL);
	for (int i = 0; i < 500 && __atomic_load_n(&start_rc, __ATOMIC_SEQ_CST) == 1; i++)
		usleep(10000);
	if (start_rc) {
		fprintf(stderr, "ctl server did not start: %d\n", start_rc);
		return 99;
	}
	int rc = hl_test_run(name, tests);
	hl_reactor_call(r, stop_server, NULL);
	hl_reactor_join(r);
	hl_reactor_destroy(r);
	return rc;
}

#endif
