/*
 * chap_guard.c - throttles online CHAP guessing. After
 * CHAP_GUARD_FREE_FAILURES wrong responses in a row from one initiator name
 * or one source address, each further wrong response opens a back-off of
 * 1 s, 2 s, 4 s ... up to 30 s during which every CHAP response from that
 * name or address is refused at once with login status 0x0201
 * (authentication failure) without being checked: a guesser gets one
 * verdict per back-off, and no connection or timer is held meanwhile.
 * Refusing rather than delaying the answer keeps the reactor and the
 * connection limits out of it; the price is that a right secret sent during
 * a back-off is refused too, which the initiator's normal login retry
 * (seconds) outlasts.
 *
 * Names and addresses are tracked separately, so neither rotating names
 * from one host nor one name from many hosts escapes. IPv6 addresses count
 * by /64 (one host can take a whole /64). Both count per secret (the
 * target's, or discovery's): a right response resets that name and that
 * address for that secret only, so knowing one target's secret does not
 * buy more guesses at another's, and a host whose initiator mistyped a
 * secret is back to normal as soon as it logs in. Entries are forgotten
 * CHAP_GUARD_FORGET_S after their last failure; each table has
 * CHAP_GUARD_SLOTS entries and a full table gives up its oldest entry, so
 * memory stays bounded whatever arrives (~64 KiB per server).
 */
#include "iscsi/chap_guard.h"

#include "hotlun/util.h"

#include <netinet/in.h>
#include <string.h>

#define NS_PER_MS 1000000ull

void chap_guard_init(struct chap_guard *g)
{
	memset(g, 0, sizeof(*g));
	pthread_mutex_init(&g->lock, NULL);
}

void chap_guard_fini(struct chap_guard *g)
{
	pthread_mutex_destroy(&g->lock);
}

static uint64_t scope_seed(const char *scope)
{
	return hl_hash64(scope, strlen(scope), 0x73636f7065);
}

static uint64_t name_key(const char *scope, const char *name)
{
	uint64_t k = hl_hash64(name, strlen(name), scope_seed(scope) ^ 0x6e616d65);

	return k ? k : 1;
}

static uint64_t addr_key(const char *scope, const struct sockaddr_storage *ss)
{
	uint64_t seed = scope_seed(scope), k = seed;

	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
		k = hl_hash64(&a->sin_addr, sizeof(a->sin_addr), seed ^ 4);
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
		const uint8_t *b = a->sin6_addr.s6_addr;
		static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

		if (memcmp(b, v4mapped, 12) == 0)
			k = hl_hash64(b + 12, 4, seed ^ 4); /* the same host as its IPv4 form */
		else
			k = hl_hash64(b, 8, seed ^ 6); /* its /64 */
	}
	return k ? k : 1;
}

/* The entry of key in t, or NULL (an expired one is freed on the way). */
static struct chap_guard_entry *find(struct chap_guard_entry *t, uint64_t key, uint64_t now_ns)
{
	for (size_t i = 0; i < CHAP_GUARD_SLOTS; i++) {
		if (t[i].key != key)
			continue;
		if (now_ns - t[i].last_fail_ns > CHAP_GUARD_FORGET_S * 1000 * NS_PER_MS) {
			memset(&t[i], 0, sizeof(t[i]));
			return NULL;
		}
		return &t[i];
	}
	return NULL;
}

/* A slot for key: a free or expired one, else the one whose last failure is oldest. */
static struct chap_guard_entry *take(struct chap_guard_entry *t, uint64_t key, uint64_t now_ns)
{
	struct chap_guard_entry *e = find(t, key, now_ns), *oldest = &t[0];

	if (e)
		return e;
	for (size_t i = 0; i < CHAP_GUARD_SLOTS; i++) {
		if (!t[i].key || now_ns - t[i].last_fail_ns > CHAP_GUARD_FORGET_S * 1000 * NS_PER_MS) {
			oldest = &t[i];
			break;
		}
		if (t[i].last_fail_ns < oldest->last_fail_ns)
			oldest = &t[i];
	}
	memset(oldest, 0, sizeof(*oldest));
	oldest->key = key;
	return oldest;
}

static uint64_t wait_of(const struct chap_guard_entry *e, uint64_t now_ns)
{
	return e && e->until_ns > now_ns ? (e->until_ns - now_ns + NS_PER_MS - 1) / NS_PER_MS : 0;
}

bool chap_guard_allow(struct chap_guard *g, const char *scope, const char *initiator,
                      const struct sockaddr_storage *peer, uint64_t now_ns,
                      struct chap_guard_verdict *v)
{
	struct chap_guard_entry *n, *a;
	bool ok;

	pthread_mutex_lock(&g->lock);
	n = find(g->names, name_key(scope, initiator), now_ns);
	a = find(g->addrs, addr_key(scope, peer), now_ns);
	v->name_failures = n ? n->failures : 0;
	v->addr_failures = a ? a->failures : 0;
	/*
	 * An initiator name is no secret: a name's back-off binds only the
	 * addresses that failed too. Otherwise anyone could lock a host out by
	 * guessing under its name; this way the host, from a clean address, is
	 * still checked (and let in), and each new address an attacker uses
	 * gets one answer checked before the name's back-off holds it too.
	 */
	v->wait_ms = HL_MAX(v->addr_failures ? wait_of(n, now_ns) : 0, wait_of(a, now_ns));
	ok = v->wait_ms == 0;
	if (!ok)
		g->throttled++;
	pthread_mutex_unlock(&g->lock);
	return ok;
}

/* One more failure for e: its back-off from now (none for the first few). */
static void count_failure(struct chap_guard_entry *e, uint64_t now_ns)
{
	uint64_t delay_ms = 0;

	if (e->failures < UINT32_MAX)
		e->failures++;
	e->last_fail_ns = now_ns;
	if (e->failures >= CHAP_GUARD_FREE_FAILURES) {
		uint32_t shift = e->failures - CHAP_GUARD_FREE_FAILURES;

		delay_ms = shift >= 16 ? CHAP_GUARD_DELAY_MAX_MS
		                       : HL_MIN((uint64_t)CHAP_GUARD_DELAY_MIN_MS << shift,
		                                (uint64_t)CHAP_GUARD_DELAY_MAX_MS);
	}
	e->until_ns = now_ns + delay_ms * NS_PER_MS;
}

void chap_guard_failed(struct chap_guard *g, const char *scope, const char *initiator,
                       const struct sockaddr_storage *peer, uint64_t now_ns,
                       struct chap_guard_verdict *v)
{
	struct chap_guard_entry *n, *a;

	pthread_mutex_lock(&g->lock);
	g->failures++;
	n = take(g->names, name_key(scope, initiator), now_ns);
	count_failure(n, now_ns);
	a = take(g->addrs, addr_key(scope, peer), now_ns);
	count_failure(a, now_ns);
	v->name_failures = n->failures;
	v->addr_failures = a->failures;
	v->wait_ms = HL_MAX(wait_of(n, now_ns), wait_of(a, now_ns));
	pthread_mutex_unlock(&g->lock);
}

void chap_guard_passed(struct chap_guard *g, const char *scope, const char *initiator,
                       const struct sockaddr_storage *peer)
{
	uint64_t nk = name_key(scope, initiator), ak = addr_key(scope, peer);

	pthread_mutex_lock(&g->lock);
	for (size_t i = 0; i < CHAP_GUARD_SLOTS; i++) {
		if (g->names[i].key == nk)
			memset(&g->names[i], 0, sizeof(g->names[i]));
		if (g->addrs[i].key == ak)
			memset(&g->addrs[i], 0, sizeof(g->addrs[i]));
	}
	pthread_mutex_unlock(&g->lock);
}

void chap_guard_counters(struct chap_guard *g, uint64_t *failures, uint64_t *throttled)
{
	pthread_mutex_lock(&g->lock);
	*failures = g->failures;
	*throttled = g->throttled;
	pthread_mutex_unlock(&g->lock);
}
