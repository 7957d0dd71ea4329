/*
 * chap_guard.c - throttles online CHAP guessing. What is guessed is a
 * secret (a target's, or discovery's), so the budget belongs to the secret:
 * after CHAP_GUARD_FREE_FAILURES wrong responses in a row, each further one
 * opens a back-off of 1 s, 2 s, 4 s ... up to 30 s during which every CHAP
 * response for that secret is refused at once with login status 0x0201
 * (authentication failure), without being checked. Neither the initiator
 * name nor the source address changes that: an attacker picks both (any
 * name passes an `allow = ALL` ACL, and one host can bind thousands of
 * addresses), so a limit per name or per address holds only against an
 * attacker who does not vary them. Whatever the spread, a secret gets about
 * 9 checks in the first minute and then one per 30 s.
 *
 * Such a budget alone would let anyone lock everybody out by guessing. So a
 * host that has proved it knows the secret (a right response under its
 * initiator name from its address, IPv6 counted whole) is remembered as
 * known and gets a budget of its own, same numbers, that only its own
 * failures touch: a known host that mistypes is back at once with the right
 * secret, whatever the guessing around it. A host that has never logged in
 * (or was forgotten: CHAP_GUARD_KNOWN hosts are remembered, and nothing
 * across a restart) shares the budget with the guessers. Only a right
 * response makes a host known, so no guesser can fill or flush that table.
 *
 * Refusing rather than delaying the answer keeps the reactor and the
 * connection limits out of it; the price is that a right secret sent during
 * a back-off is refused too, which the initiator's normal login retry
 * outlasts. Two responses checked at the same time on two reactors could
 * both slip into a back-off that the first of them opens: a response that
 * could open one marks its budget as being checked, and the others wait.
 *
 * A right response resets the host's own budget only: it never gives the
 * guessers' budget new free tries. Budgets are forgotten CHAP_GUARD_FORGET_S
 * after their last failure. Memory is fixed (~250 KiB per server): one
 * budget per secret (open addressing; a slot is reused once its budget is
 * forgotten, never taken from a live one, and a response for a secret that
 * finds no slot is refused) and CHAP_GUARD_KNOWN known hosts.
 *
 * The guard also decides what is logged: the first CHAP_GUARD_LOG_DETAIL
 * failures and refusals of an episode one by one, then one summary per
 * period (10 s, doubling up to 10 min), and one line when the episode ends
 * (CHAP_GUARD_LOG_QUIET_S without an event). A guesser at thousands of
 * attempts a second writes a handful of lines, not one per attempt.
 */
#include "iscsi/chap_guard.h"

#include "hotlun/util.h"
#include "iscsi/source.h"

#include <string.h>

#define NS_PER_MS 1000000ull
#define NS_PER_S  1000000000ull

void chap_guard_init(struct chap_guard *g)
{
	memset(g, 0, sizeof(*g));
	pthread_mutex_init(&g->lock, NULL);
}

void chap_guard_fini(struct chap_guard *g)
{
	pthread_mutex_destroy(&g->lock);
}

static uint64_t nonzero(uint64_t k)
{
	return k ? k : 1;
}

static uint64_t secret_key(const char *scope)
{
	return nonzero(hl_hash64(scope, strlen(scope), 0x73636f7065));
}

static uint64_t known_key(const char *scope, const char *name, const struct sockaddr_storage *ss)
{
	struct iscsi_source src;
	uint64_t seed = hl_hash64(scope, strlen(scope), 0x6b6e6f776e);

	seed = hl_hash64(name, strlen(name), seed);
	iscsi_source_of(ss, true, &src);
	return nonzero(hl_hash64(src.b, sizeof(src.b), seed));
}

/* A budget whose last failure is older than CHAP_GUARD_FORGET_S starts afresh. */
static void maybe_forget(struct chap_guard_budget *b, uint64_t now_ns)
{
	if (b->failures && now_ns - b->last_fail_ns > CHAP_GUARD_FORGET_S * NS_PER_S) {
		b->failures = 0;
		b->until_ns = 0;
	}
}

static bool forgotten(const struct chap_guard_budget *b, uint64_t now_ns)
{
	return !b->failures || now_ns - b->last_fail_ns > CHAP_GUARD_FORGET_S * NS_PER_S;
}

/*
 * The secrets' table, open addressing: a probe from key's home slot stops
 * at the key or at a slot never used. A slot stays keyed once used (so
 * probes keep passing it) and is reused by a new secret only once its own
 * budget is forgotten.
 */
static struct chap_guard_budget *secret_find(struct chap_guard *g, uint64_t key, uint64_t now_ns)
{
	for (size_t j = 0, i = key % CHAP_GUARD_SECRETS; j < CHAP_GUARD_SECRETS; j++) {
		struct chap_guard_budget *b = &g->secrets[(i + j) % CHAP_GUARD_SECRETS];

		if (b->key == key) {
			maybe_forget(b, now_ns);
			return b;
		}
		if (!b->key)
			return NULL;
	}
	return NULL;
}

/* The slot a new secret would take (not yet claimed), or NULL: none free. */
static struct chap_guard_budget *secret_free_slot(struct chap_guard *g, uint64_t key,
                                                  uint64_t now_ns)
{
	for (size_t j = 0, i = key % CHAP_GUARD_SECRETS; j < CHAP_GUARD_SECRETS; j++) {
		struct chap_guard_budget *b = &g->secrets[(i + j) % CHAP_GUARD_SECRETS];

		if (!b->key || (forgotten(b, now_ns) && !b->checking_ns))
			return b;
	}
	return NULL;
}

static struct chap_guard_budget *secret_take(struct chap_guard *g, uint64_t key, uint64_t now_ns)
{
	struct chap_guard_budget *b = secret_find(g, key, now_ns);

	if (b)
		return b;
	b = secret_free_slot(g, key, now_ns);
	if (b) {
		memset(b, 0, sizeof(*b));
		b->key = key;
	}
	return b;
}

static struct chap_guard_budget *known_find(struct chap_guard *g, uint64_t key, uint64_t now_ns)
{
	for (size_t i = 0; i < CHAP_GUARD_KNOWN; i++) {
		if (g->known[i].key == key) {
			maybe_forget(&g->known[i], now_ns);
			return &g->known[i];
		}
	}
	return NULL;
}

/* A slot for a host that just passed: a free one, else the one that passed least recently. */
static struct chap_guard_budget *known_take(struct chap_guard *g, uint64_t key, uint64_t now_ns)
{
	struct chap_guard_budget *b = known_find(g, key, now_ns), *oldest = &g->known[0];

	if (b)
		return b;
	for (size_t i = 0; i < CHAP_GUARD_KNOWN; i++) {
		if (!g->known[i].key) {
			oldest = &g->known[i];
			break;
		}
		if (g->known[i].passed_ns < oldest->passed_ns)
			oldest = &g->known[i];
	}
	memset(oldest, 0, sizeof(*oldest));
	oldest->key = key;
	return oldest;
}

static uint64_t wait_of(const struct chap_guard_budget *b, uint64_t now_ns)
{
	return b && b->until_ns > now_ns ? (b->until_ns - now_ns + NS_PER_MS - 1) / NS_PER_MS : 0;
}

/* Could one more failure against b open a back-off? */
static bool next_failure_costs(const struct chap_guard_budget *b)
{
	return b && b->failures + 1 >= CHAP_GUARD_FREE_FAILURES;
}

/* One event (failure, or refusal unchecked) of the episode: log it one by one? Lock held. */
static bool log_event(struct chap_guard *g, bool failed, const char *scope, const char *initiator,
                      const struct sockaddr_storage *peer, uint64_t now_ns)
{
	struct chap_guard_log *l = &g->log;

	if (!l->active) {
		memset(l, 0, sizeof(*l));
		l->active = true;
		l->start_ns = l->period_start_ns = now_ns;
		l->period_s = CHAP_GUARD_LOG_PERIOD_S;
		l->detail_left = CHAP_GUARD_LOG_DETAIL;
	}
	l->last_ns = now_ns;
	hl_strlcpy(l->last_initiator, initiator, sizeof(l->last_initiator));
	hl_strlcpy(l->last_scope, scope, sizeof(l->last_scope));
	l->last_peer = *peer;
	if (failed)
		l->ep_failed++;
	else
		l->ep_thr++;
	if (l->detail_left) {
		l->detail_left--;
		return true;
	}
	if (failed)
		l->quiet_failed++;
	else
		l->quiet_thr++;
	l->ep_quiet++;
	return false;
}

bool chap_guard_allow(struct chap_guard *g, const char *scope, const char *initiator,
                      const struct sockaddr_storage *peer, uint64_t now_ns,
                      struct chap_guard_verdict *v)
{
	uint64_t sk = secret_key(scope);
	struct chap_guard_budget *b;
	bool ok, busy;

	pthread_mutex_lock(&g->lock);
	now_ns = hl_time_forward(&g->clock_ns, now_ns); /* read before the lock */
	b = known_find(g, known_key(scope, initiator, peer), now_ns);
	v->known = b != NULL;
	if (!b)
		b = secret_find(g, sk, now_ns);
	v->failures = b ? b->failures : 0;
	v->wait_ms = wait_of(b, now_ns);
	v->log = false;
	/* another response that may open a back-off is being checked: wait for its verdict */
	busy = next_failure_costs(b) && b->checking_ns &&
	       now_ns - b->checking_ns < CHAP_GUARD_CHECKING_MS * NS_PER_MS;
	if (busy && !v->wait_ms)
		v->wait_ms =
		    (b->checking_ns + CHAP_GUARD_CHECKING_MS * NS_PER_MS - now_ns + NS_PER_MS - 1) /
		    NS_PER_MS;
	ok = v->wait_ms == 0;
	/* a secret that has no budget yet and no slot left for one: refused (fail closed) */
	if (ok && !b && !secret_free_slot(g, sk, now_ns))
		ok = false;
	if (!ok) {
		g->throttled++;
		v->log = log_event(g, false, scope, initiator, peer, now_ns);
	} else if (next_failure_costs(b)) {
		b->checking_ns = now_ns;
	}
	pthread_mutex_unlock(&g->lock);
	return ok;
}

/* One more failure for b: its back-off from now (none for the first few). */
static void count_failure(struct chap_guard_budget *b, uint64_t now_ns)
{
	uint64_t delay_ms = 0;

	if (b->failures < UINT32_MAX)
		b->failures++;
	b->last_fail_ns = now_ns;
	b->checking_ns = 0;
	if (b->failures >= CHAP_GUARD_FREE_FAILURES) {
		uint32_t shift = b->failures - CHAP_GUARD_FREE_FAILURES;

		delay_ms = shift >= 16 ? CHAP_GUARD_DELAY_MAX_MS
		                       : HL_MIN((uint64_t)CHAP_GUARD_DELAY_MIN_MS << shift,
		                                (uint64_t)CHAP_GUARD_DELAY_MAX_MS);
	}
	b->until_ns = now_ns + delay_ms * NS_PER_MS;
}

void chap_guard_failed(struct chap_guard *g, const char *scope, const char *initiator,
                       const struct sockaddr_storage *peer, uint64_t now_ns,
                       struct chap_guard_verdict *v)
{
	struct chap_guard_budget *b;

	pthread_mutex_lock(&g->lock);
	now_ns = hl_time_forward(&g->clock_ns, now_ns); /* read before the lock */
	g->failures++;
	b = known_find(g, known_key(scope, initiator, peer), now_ns);
	v->known = b != NULL;
	if (!b)
		b = secret_take(g, secret_key(scope), now_ns);
	if (b)
		count_failure(b, now_ns);
	v->failures = b ? b->failures : 0;
	v->wait_ms = wait_of(b, now_ns);
	v->log = log_event(g, true, scope, initiator, peer, now_ns);
	pthread_mutex_unlock(&g->lock);
}

void chap_guard_passed(struct chap_guard *g, const char *scope, const char *initiator,
                       const struct sockaddr_storage *peer, uint64_t now_ns)
{
	struct chap_guard_budget *b, *s;

	pthread_mutex_lock(&g->lock);
	now_ns = hl_time_forward(&g->clock_ns, now_ns); /* read before the lock */
	b = known_take(g, known_key(scope, initiator, peer), now_ns);
	b->failures = 0;
	b->until_ns = 0;
	b->checking_ns = 0;
	b->passed_ns = now_ns;
	/* its check is over (it may have come through the secret's budget) */
	s = secret_find(g, secret_key(scope), now_ns);
	if (s)
		s->checking_ns = 0;
	pthread_mutex_unlock(&g->lock);
}

bool chap_guard_log_due(struct chap_guard *g, uint64_t now_ns, struct chap_guard_summary *s)
{
	struct chap_guard_log *l = &g->log;
	bool due = false, quiet;

	pthread_mutex_lock(&g->lock);
	now_ns = hl_time_forward(&g->clock_ns, now_ns); /* read before the lock */
	if (!l->active)
		goto out;
	quiet = now_ns - l->last_ns >= CHAP_GUARD_LOG_QUIET_S * NS_PER_S;
	if (!quiet && now_ns - l->period_start_ns < (uint64_t)l->period_s * NS_PER_S)
		goto out;
	memset(s, 0, sizeof(*s));
	s->failed = l->quiet_failed;
	s->throttled = l->quiet_thr;
	s->period_s = (uint32_t)((now_ns - l->period_start_ns + NS_PER_S / 2) / NS_PER_S);
	s->ended = quiet;
	s->ep_failed = l->ep_failed;
	s->ep_thr = l->ep_thr;
	s->ep_s = (l->last_ns - l->start_ns + NS_PER_S / 2) / NS_PER_S;
	hl_strlcpy(s->initiator, l->last_initiator, sizeof(s->initiator));
	hl_strlcpy(s->scope, l->last_scope, sizeof(s->scope));
	s->peer = l->last_peer;
	due = s->failed || s->throttled;
	l->quiet_failed = l->quiet_thr = 0;
	if (quiet) {
		/* an episode whose every event was logged one by one needs no closing line */
		due = l->ep_quiet > 0;
		l->active = false;
	} else {
		l->period_start_ns = now_ns;
		l->period_s = HL_MIN(2 * l->period_s, (uint32_t)CHAP_GUARD_LOG_PERIOD_MAX);
	}
out:
	pthread_mutex_unlock(&g->lock);
	return due;
}

void chap_guard_counters(struct chap_guard *g, uint64_t *failures, uint64_t *throttled)
{
	pthread_mutex_lock(&g->lock);
	*failures = g->failures;
	*throttled = g->throttled;
	pthread_mutex_unlock(&g->lock);
}
