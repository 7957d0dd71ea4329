/*
 * origin_ut_util.h - helpers for the origin unit tests: run the real reactor
 * on the test thread until a number of completions arrived (or a deadline
 * passed), temp files with patterns, and a completion counter.
 */
#ifndef ORIGIN_UT_UTIL_H
#define ORIGIN_UT_UTIL_H

#include "hl_test.h"
#include "hotlun/event.h"
#include "hotlun/origin.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct hl_reactor *ut_r;
static int ut_count;       /* completions seen */
static int ut_target;      /* stop the reactor when ut_count reaches this */
static int ut_last_result; /* result of the last completion */
static bool ut_timed_out;

static void ut_timeout_fn(struct hl_timer *t)
{
	(void)t;
	ut_timed_out = true;
	hl_reactor_stop(hl_reactor_current());
}

/* Count a completion; stop the loop when the target is reached. */
static inline void ut_done(int result)
{
	ut_last_result = result;
	if (++ut_count >= ut_target && ut_target > 0)
		hl_reactor_stop(hl_reactor_current());
}

static void ut_cb(struct hl_origin_io *io, int result)
{
	(void)io;
	ut_done(result);
}

/*
 * Make a reactor, post fn(arg) to it, and run it on this thread until `want`
 * completions were counted by ut_done() or timeout_ms passed; then destroy
 * it (a stopped reactor is not run again). @return true when the target was
 * reached in time.
 */
static inline bool ut_run(hl_call_fn fn, void *arg, int want, uint64_t timeout_ms)
{
	struct hl_timer to;

	if (hl_reactor_create(&ut_r, "ut") != 0)
		return false;
	ut_count = 0;
	ut_target = want;
	ut_timed_out = false;
	ut_last_result = 12345;
	hl_timer_init(&to, ut_timeout_fn, NULL);
	hl_timer_start(ut_r, &to, timeout_ms);
	if (fn && hl_reactor_call(ut_r, fn, arg) != 0)
		return false;
	hl_reactor_run(ut_r);
	hl_timer_stop(&to);
	hl_reactor_destroy(ut_r);
	ut_r = NULL;
	return !ut_timed_out && ut_count >= want;
}

/* ---- one I/O of an origin on the test thread's reactor ---- */

struct ut_one_io {
	struct hl_origin *o;
	struct hl_origin_io io;
	struct iovec iov;
	int submit_rc;
};

static inline void ut_one_start(void *arg)
{
	struct ut_one_io *x = arg;
	int rc = hl_origin_submit(x->o, &x->io);

	if (rc) {
		x->submit_rc = rc;
		ut_done(rc);
	}
}

/* @return the submit's error or the completion's result (-ETIMEDOUT: neither in 30 s) */
static inline int ut_io(struct hl_origin *o, enum hl_io_op op, uint64_t off, void *buf,
                        size_t len)
{
	struct ut_one_io x = {.o = o};

	x.io.op = op;
	x.io.offset = off;
	x.io.length = len;
	x.iov.iov_base = buf;
	x.iov.iov_len = len;
	x.io.iov = &x.iov;
	x.io.iovcnt = 1;
	x.io.cb = ut_cb;
	x.io.arg = &x;
	if (!ut_run(ut_one_start, &x, 1, 30000))
		return -ETIMEDOUT;
	return x.submit_rc ? x.submit_rc : ut_last_result;
}

/* A temp file of `size` bytes filled with ut_pattern(offset). Returns its path (malloc'd). */
static inline uint8_t ut_pattern(uint64_t off, uint8_t seed)
{
	return (uint8_t)((off * 131 + (off >> 12) * 7 + seed) | 1); /* never 0 */
}

/* Where ut_tempfile makes its files (the memfs tests point it at /dev/shm). */
static const char *ut_temp_dir = "/tmp";

static inline char *ut_tempfile(uint64_t size, uint8_t seed)
{
	char tmpl[64];
	int fd;

	snprintf(tmpl, sizeof(tmpl), "%s/hl-origin-ut-XXXXXX", ut_temp_dir);
	fd = mkstemp(tmpl);
	uint8_t *buf;

	if (fd < 0)
		return NULL;
	buf = malloc(size ? size : 1);
	for (uint64_t i = 0; i < size; i++)
		buf[i] = ut_pattern(i, seed);
	if (size && pwrite(fd, buf, size, 0) != (ssize_t)size) {
		free(buf);
		close(fd);
		unlink(tmpl);
		return NULL;
	}
	free(buf);
	close(fd);
	return strdup(tmpl);
}

static inline bool ut_check_pattern(const uint8_t *buf, uint64_t off, uint64_t len, uint8_t seed)
{
	for (uint64_t i = 0; i < len; i++)
		if (buf[i] != ut_pattern(off + i, seed))
			return false;
	return true;
}

static inline bool ut_all(const uint8_t *buf, uint64_t len, uint8_t v)
{
	for (uint64_t i = 0; i < len; i++)
		if (buf[i] != v)
			return false;
	return true;
}

#endif
