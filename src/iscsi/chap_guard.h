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

/* Wrong CHAP responses in a row that cost nothing; each further one opens a back-off. */
#define CHAP_GUARD_FREE_FAILURES 3
#define CHAP_GUARD_DELAY_MIN_MS  1000  /* the first back-off; doubles with each failure */
#define CHAP_GUARD_DELAY_MAX_MS  30000 /* ... up to this */
#define CHAP_GUARD_FORGET_S      900   /* an entry without a failure for this long is dropped */
#define CHAP_GUARD_SLOTS         1024  /* entries per table (initiator names, addresses) */

/** One initiator name or source address that failed CHAP recently. */
struct chap_guard_entry {
	uint64_t key;          /* hl_hash64 of the name or address; 0 = free */
	uint32_t failures;     /* wrong responses in a row */
	uint64_t last_fail_ns; /* when the last one came */
	uint64_t until_ns;     /* attempts before this are refused unchecked */
};

/** The guard of one server: two bounded tables and counters, under lock. */
struct chap_guard {
	pthread_mutex_t lock;
	struct chap_guard_entry names[CHAP_GUARD_SLOTS]; /* lock */
	struct chap_guard_entry addrs[CHAP_GUARD_SLOTS]; /* lock */
	uint64_t failures;  /* lock: wrong CHAP responses, ever */
	uint64_t throttled; /* lock: attempts refused unchecked (in a back-off) */
};

/** What check/failed tell the caller (for its log line and the initiator). */
struct chap_guard_verdict {
	uint32_t name_failures, addr_failures; /* in a row, after this attempt */
	uint64_t wait_ms;                      /* until the next attempt is checked; 0: now */
};

void chap_guard_init(struct chap_guard *g);
void chap_guard_fini(struct chap_guard *g);

/*
 * `scope` names the secret being tried (the target's name, "" for
 * discovery): counts are per secret, so a right answer for one target
 * never clears the failures against another.
 */

/**
 * Before a CHAP response is checked: may it be? false while the initiator
 * name or the source address (IPv6: its /64) is in a back-off; that
 * attempt counts as throttled and must be refused without checking it.
 */
bool chap_guard_allow(struct chap_guard *g, const char *scope, const char *initiator,
                      const struct sockaddr_storage *peer, uint64_t now_ns,
                      struct chap_guard_verdict *v);

/** A wrong CHAP response: count it for the name and the address; maybe start a back-off. */
void chap_guard_failed(struct chap_guard *g, const char *scope, const char *initiator,
                       const struct sockaddr_storage *peer, uint64_t now_ns,
                       struct chap_guard_verdict *v);

/**
 * A right one: the name and the address start afresh for this secret (whoever
 * answers right knows it: there is nothing left to guess).
 */
void chap_guard_passed(struct chap_guard *g, const char *scope, const char *initiator,
                       const struct sockaddr_storage *peer);

/** Counters, for stats. */
void chap_guard_counters(struct chap_guard *g, uint64_t *failures, uint64_t *throttled);

#endif
