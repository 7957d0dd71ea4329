/*
 * log.c - the logging sink: stderr with a timestamp, stderr for journald
 * (a "<N>" priority prefix and no timestamp, the sd-daemon(3) convention),
 * or syslog under the program's own name.
 */
#include "config.h" /* _GNU_SOURCE: program_invocation_short_name */

#include "hotlun/log.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

int hl_log_level = HL_LOG_NOTICE;
static bool log_to_syslog;
static bool log_to_journal;
/* openlog() keeps the pointer, so the name lives here; empty: the program's file name */
static char log_ident[32];

static const char *const level_names[] = {
	[HL_LOG_ERR] = "err",     [HL_LOG_WARN] = "warn",   [HL_LOG_NOTICE] = "notice",
	[HL_LOG_INFO] = "info",   [HL_LOG_DEBUG] = "debug",
};

void hl_log_set_ident(const char *ident)
{
	snprintf(log_ident, sizeof(log_ident), "%s", ident ? ident : "");
}

bool hl_log_stderr_is_journal(void)
{
	/*
	 * systemd sets JOURNAL_STREAM=DEV:INO when it connects stdout/stderr to
	 * journald. Compare with stderr itself: a child whose stderr was
	 * redirected inherits the variable but not the stream.
	 */
	const char *env = getenv("JOURNAL_STREAM");
	uintmax_t dev, ino;
	struct stat st;
	char extra;

	if (!env || sscanf(env, "%ju:%ju%c", &dev, &ino, &extra) != 2)
		return false;
	if (fstat(STDERR_FILENO, &st) < 0)
		return false;
	return (uintmax_t)st.st_dev == dev && (uintmax_t)st.st_ino == ino;
}

void hl_log_open(bool use_syslog, int level)
{
	if (!log_ident[0])
		hl_log_set_ident(program_invocation_short_name);
	if (log_to_syslog && !use_syslog)
		closelog();
	log_to_syslog = use_syslog;
	log_to_journal = !use_syslog && hl_log_stderr_is_journal();
	if (use_syslog)
		openlog(log_ident, LOG_PID | LOG_NDELAY, LOG_DAEMON);
	hl_log_level = level;
}

const char *hl_log_level_name(int level)
{
	return level >= HL_LOG_ERR && level <= HL_LOG_DEBUG ? level_names[level] : NULL;
}

int hl_log_level_parse(const char *name)
{
	for (int l = HL_LOG_ERR; l <= HL_LOG_DEBUG; l++) {
		if (strcasecmp(name, level_names[l]) == 0)
			return l;
	}
	if (strcasecmp(name, "error") == 0)
		return HL_LOG_ERR;
	if (strcasecmp(name, "warning") == 0)
		return HL_LOG_WARN;
	return -EINVAL;
}

void hl_log_write(int level, const char *component, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	int saved_errno = errno;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);

	if (level < HL_LOG_ERR)
		level = HL_LOG_ERR;
	if (level > HL_LOG_DEBUG)
		level = HL_LOG_DEBUG;

	if (log_to_syslog) {
		syslog(level, "%s: %s", component, msg);
	} else if (log_to_journal) {
		/* journald reads the priority from the prefix and stamps the time itself */
		fprintf(stderr, "<%d>%s: %s\n", level, component, msg);
	} else {
		struct timespec ts;
		struct tm tm;
		char when[32];

		clock_gettime(CLOCK_REALTIME, &ts);
		localtime_r(&ts.tv_sec, &tm);
		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
		/* One fprintf per line: stdio locks the stream, so threads don't interleave. */
		fprintf(stderr, "%s.%03ld %-6s %s: %s\n", when, ts.tv_nsec / 1000000,
			level_names[level], component, msg);
	}
	errno = saved_errno;
}

bool hl_log_rl_allow(struct hl_log_rl *rl, int level)
{
	/* Racy across threads by design: a lost update only changes how many lines pass. */
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;

	/*
	 * Another thread may have started a window after this one read the
	 * clock: that is no new window (an unsigned age would wrap, and each
	 * such moment let 5 more lines through). A signed age keeps it.
	 */
	if ((int64_t)(now - rl->window_start_ns) >= 1000000000ll) {
		uint32_t suppressed = rl->suppressed;
		rl->window_start_ns = now;
		rl->printed = 0;
		rl->suppressed = 0;
		/* at the call site's level: a debug flood must not surface as a warning */
		if (suppressed)
			hl_log_write(level, "log", "%u similar messages suppressed", suppressed);
	}
	if (rl->printed < 5) {
		rl->printed++;
		return true;
	}
	rl->suppressed++;
	return false;
}
