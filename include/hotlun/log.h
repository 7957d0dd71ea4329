/*
 * log.h - leveled logging shared by every module.
 *
 * The level is checked before any formatting, so a disabled HL_DEBUG costs a
 * compare. Messages go to stderr (default, with a timestamp; when stderr is
 * journald's stream, with a "<N>" priority prefix instead) or syslog.
 * On the I/O path use the _RL variants: at most a few lines per second per
 * call site, with a count of what was suppressed.
 *
 * Levels (journalctl -p warning shows err and warn): err and warn are for
 * what an admin must act on (a failing origin or cache device, a config that
 * does not apply, a stuck reactor); what one initiator or connection does
 * (resets, logins, protocol slips) is notice or below.
 */
#ifndef HOTLUN_LOG_H
#define HOTLUN_LOG_H

#include <stdbool.h>
#include <stdint.h>

enum hl_log_level {
	HL_LOG_ERR = 3,
	HL_LOG_WARN = 4,
	HL_LOG_NOTICE = 5,
	HL_LOG_INFO = 6,
	HL_LOG_DEBUG = 7,
};

/** Current threshold; messages above it are dropped before formatting. */
extern int hl_log_level;

/**
 * Choose the sink and level. Safe to call again (e.g. after fork).
 * @param use_syslog  true: syslog(3) under the ident (hl_log_set_ident);
 *                    false: stderr, in journald's format when
 *                    hl_log_stderr_is_journal().
 */
void hl_log_open(bool use_syslog, int level);

/** The name hl_log_level_parse takes for level ("info"), NULL when out of range. */
const char *hl_log_level_name(int level);

/**
 * The name the program logs under in syslog (default: its file name, as
 * run). Call before hl_log_open(); the string is copied (at most 31 bytes).
 */
void hl_log_set_ident(const char *ident);

/** True when stderr is the journald stream systemd named in JOURNAL_STREAM. */
bool hl_log_stderr_is_journal(void);

/** Parse "err|warn|notice|info|debug"; returns the level or -EINVAL. */
int hl_log_level_parse(const char *name);

/** Write one message; prefer the HL_* macros, which check the level first. */
void hl_log_write(int level, const char *component, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/** Rate-limit state of one call site (static storage, zero-initialised). */
struct hl_log_rl {
	uint64_t window_start_ns;
	uint32_t printed;
	uint32_t suppressed;
};

/**
 * True when the call site may print now (at most 5 lines per second). The
 * count of lines it held back is logged at `level`, the site's own.
 */
bool hl_log_rl_allow(struct hl_log_rl *rl, int level);

#define HL_LOG(level, comp, ...)                                                                   \
	do {                                                                                       \
		if ((level) <= hl_log_level)                                                       \
			hl_log_write((level), (comp), __VA_ARGS__);                                \
	} while (0)

#define HL_ERR(comp, ...)    HL_LOG(HL_LOG_ERR, comp, __VA_ARGS__)
#define HL_WARN(comp, ...)   HL_LOG(HL_LOG_WARN, comp, __VA_ARGS__)
#define HL_NOTICE(comp, ...) HL_LOG(HL_LOG_NOTICE, comp, __VA_ARGS__)
#define HL_INFO(comp, ...)   HL_LOG(HL_LOG_INFO, comp, __VA_ARGS__)
#define HL_DEBUG(comp, ...)  HL_LOG(HL_LOG_DEBUG, comp, __VA_ARGS__)

/* Rate-limited variants for the I/O path. */
#define HL_LOG_RL(level, comp, ...)                                                                \
	do {                                                                                       \
		static struct hl_log_rl hl_rl_;                                                    \
		if ((level) <= hl_log_level && hl_log_rl_allow(&hl_rl_, (level)))                           \
			hl_log_write((level), (comp), __VA_ARGS__);                                \
	} while (0)

#define HL_ERR_RL(comp, ...)    HL_LOG_RL(HL_LOG_ERR, comp, __VA_ARGS__)
#define HL_WARN_RL(comp, ...)   HL_LOG_RL(HL_LOG_WARN, comp, __VA_ARGS__)
#define HL_NOTICE_RL(comp, ...) HL_LOG_RL(HL_LOG_NOTICE, comp, __VA_ARGS__)
#define HL_INFO_RL(comp, ...)   HL_LOG_RL(HL_LOG_INFO, comp, __VA_ARGS__)

#endif
