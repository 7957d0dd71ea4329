/*
 * chap_guard.h - throttling of online CHAP guessing (chap_guard.c), shared
 * by the login code and its unit test. Pure: the caller passes the time.
 */
#ifndef HOTLUN_ISCSI_CHAP_GUARD_H
#define HOTLUN_ISCSI_CHAP_GUARD_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "hotlun/iscsi.h"

/* Wrong CHAP responses in a row that cost nothing; each further one opens a back-off. */
#define CHAP_GUARD_FREE_FAILURES 3
#define CHAP_GUARD_DELAY_MIN_MS  1000  /* the first back-off; doubles with each failure */
#define CHAP_GUARD_DELAY_MAX_MS  30000 /* ... up to this */
#define CHAP_GUARD_FORGET_S      900   /* a budget without a failure for this long starts afresh */
/* One budget per secret: every target (at most 4096 in a configuration) and discovery. */
#define CHAP_GUARD_SECRETS 4097
#define CHAP_GUARD_KNOWN   1024 /* hosts remembered as having passed (least recent goes) */
/* A response let through is being checked: others that could open a back-off wait for it. */
#define CHAP_GUARD_CHECKING_MS 1000
/* Logging: the first few events of an episode one by one, then a summary per period. */
#define CHAP_GUARD_LOG_DETAIL     5
#define CHAP_GUARD_LOG_PERIOD_S   10  /* the first summary; each next period doubles ... */
#define CHAP_GUARD_LOG_PERIOD_MAX 600 /* ... up to this */
#define CHAP_GUARD_LOG_QUIET_S    10  /* an episode ends after this long without an event */

/** Failures in a row against one budget and the back-off they opened. */
struct chap_guard_budget {
	uint64_t key;          /* hl_hash64 of what it belongs to; 0 = free slot */
	uint32_t failures;     /* wrong responses in a row */
	uint64_t last_fail_ns; /* when the last one came */
	uint64_t until_ns;     /* responses before this are refused unchecked */
	uint64_t checking_ns;  /* a response let through at this time is being checked (0: none) */
	uint64_t passed_ns;    /* known hosts: when it last passed (the least recent one goes) */
};

/** Logging state of the current guessing episode (any secret). */
struct chap_guard_log {
	bool active;
	uint64_t start_ns, last_ns;                 /* first and latest event */
	uint64_t period_start_ns;                   /* the current summary period */
	uint32_t period_s;                          /* its length */
	uint32_t detail_left;                       /* events still to be logged one by one */
	uint64_t quiet_failed, quiet_thr;           /* this period: not logged one by one */
	uint64_t ep_failed, ep_thr;                 /* the whole episode */
	uint64_t ep_quiet;                          /* ... of which not logged one by one */
	char last_initiator[HL_ISCSI_NAME_MAX + 1]; /* the latest event's, for the summary */
	char last_scope[HL_ISCSI_NAME_MAX + 1];
	struct sockaddr_storage last_peer;
};

/** The guard of one server: bounded tables and counters, under lock. */
struct chap_guard {
	pthread_mutex_t lock;
	struct chap_guard_budget secrets[CHAP_GUARD_SECRETS]; /* lock: hosts not known */
	struct chap_guard_budget known[CHAP_GUARD_KNOWN];     /* lock: (secret, name, address) */
	uint64_t failures;                                    /* lock: wrong CHAP responses, ever */
	uint64_t throttled;        /* lock: attempts refused unchecked (in a back-off) */
	struct chap_guard_log log; /* lock */
	uint64_t clock_ns;         /* lock: the latest time passed in; time never goes back */
};

/** What allow/failed tell the caller (for its log line and the initiator). */
struct chap_guard_verdict {
	bool known;        /* the host passed this secret before under this name: its own budget */
	uint32_t failures; /* in a row against the budget that applies, after this attempt */
	uint64_t wait_ms;  /* until the next attempt against that budget is checked; 0: now */
	bool log;          /* log this attempt one by one (false: it goes into a summary) */
};

/** A summary line due (chap_guard_log_due). */
struct chap_guard_summary {
	uint64_t failed, throttled; /* not logged one by one, over the last period_s */
	uint32_t period_s;
	bool ended; /* the episode is over: the totals follow */
	uint64_t ep_failed, ep_thr, ep_s;
	char initiator[HL_ISCSI_NAME_MAX + 1]; /* the latest event */
	char scope[HL_ISCSI_NAME_MAX + 1];
	struct sockaddr_storage peer;
};

void chap_guard_init(struct chap_guard *g);
void chap_guard_fini(struct chap_guard *g);

/*
 * `scope` names the secret being tried (the target's name, "" for
 * discovery). Each secret has one budget for every host that has not
 * passed it before, whatever its initiator name and address: an attacker
 * chooses both. A host that passed it (same initiator name, same address,
 * IPv6 whole) is "known" and has a budget of its own, which nobody else's
 * failures touch.
 */

/**
 * Before a CHAP response is checked: may it be? false while the budget that
 * applies is in a back-off (or another response that could open one is
 * being checked); that attempt counts as throttled and must be refused
 * without checking it. true: the caller checks it and must then call
 * chap_guard_failed or chap_guard_passed.
 */
bool chap_guard_allow(struct chap_guard *g, const char *scope, const char *initiator,
                      const struct sockaddr_storage *peer, uint64_t now_ns,
                      struct chap_guard_verdict *v);

/** A wrong CHAP response: count it against its budget; maybe start a back-off. */
void chap_guard_failed(struct chap_guard *g, const char *scope, const char *initiator,
                       const struct sockaddr_storage *peer, uint64_t now_ns,
                       struct chap_guard_verdict *v);

/**
 * A right one: this host becomes (or stays) known for this secret under this
 * name, with its own budget afresh. The budget of hosts not known is left as
 * it is (a legitimate login must not hand an attacker new free tries).
 */
void chap_guard_passed(struct chap_guard *g, const char *scope, const char *initiator,
                       const struct sockaddr_storage *peer, uint64_t now_ns);

/**
 * Is a summary line due (a period of the episode ended with events not logged
 * one by one, or the episode ended)? Fills s. Called after each event and
 * from a timer.
 */
bool chap_guard_log_due(struct chap_guard *g, uint64_t now_ns, struct chap_guard_summary *s);

/** Counters, for stats. */
void chap_guard_counters(struct chap_guard *g, uint64_t *failures, uint64_t *throttled);

#endif
