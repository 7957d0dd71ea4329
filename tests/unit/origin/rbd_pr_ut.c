/*
 * rbd_pr_ut.c - the record the gateways of an rbd image share (rbd_pr.c,
 * origin.h pr_*) against a real single-node Ceph that this test starts and
 * stops itself (tests/functional/mini_ceph.sh; exit 77, skipped, where Ceph
 * is not installed). One image opened twice, as gateways 1 and 2, each
 * with a client of its own. Each gateway's "LU" here reads the record back
 * when told of a change and answers at once (or, for gateway 2, when the
 * test lets it), as hl_lu_pr_changed does.
 *
 * Prints the time of a commit that both gateways answer and of one that a
 * silent gateway makes wait (MEASURE lines).
 */
#include "config.h"

#include "ceph_ut_util.h"
#include "hl_test.h"
#include "hotlun/event.h"
#include "hotlun/origin.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static struct hl_origin *g[2];
static const uint16_t gws[2] = {1, 2};

/* what one gateway's LU saw */
static struct seen {
	pthread_mutex_t mu;
	unsigned notices, checks;
	uint64_t seq; /* the sequence number of the text it read last */
	char text[64];
	bool hold;     /* gateway 2: do not answer (a slow or stuck LU) */
	uint64_t held; /* the cookie held */
} seen[2] = {{PTHREAD_MUTEX_INITIALIZER}, {PTHREAD_MUTEX_INITIALIZER}};

static void changed(void *arg, uint64_t cookie)
{
	struct seen *s = arg;
	struct hl_origin *o = g[s - seen];
	char *text = NULL;
	size_t len = 0;
	uint64_t seq = 0;

	if (o->ops->pr_load(o, &text, &len) == 0 && len)
		sscanf(text, "seq %" SCNu64, &seq);
	pthread_mutex_lock(&s->mu);
	if (cookie)
		s->notices++;
	else
		s->checks++;
	s->seq = seq;
	snprintf(s->text, sizeof(s->text), "%s", text ? text : "");
	bool hold = s->hold && cookie;
	if (hold)
		s->held = cookie;
	pthread_mutex_unlock(&s->mu);
	free(text);
	if (!hold)
		o->ops->pr_applied(o, cookie, seq);
}

static double ms_since(uint64_t t0)
{
	return (double)(hl_now_ns() - t0) / 1e6;
}

static struct hl_origin *open_gw(uint16_t gw)
{
	struct hl_origin_opts opts = {.rbd_conf = conf, .gateway = gw};
	struct hl_origin *o = NULL;

	CU_ASSERT_EQUAL_FATAL(hl_origin_open("rbd:rbd/origin", &opts, &o), 0);
	return o;
}

/* A record "seq N" (what the scsi layer writes starts so; the store does not care). */
static int commit(struct hl_origin *o, uint64_t old, uint64_t seq, double *ms)
{
	char text[64];
	int n = snprintf(text, sizeof(text), "seq %" PRIu64 "\nfrom %s\n", seq,
	                 o == g[0] ? "gw1" : "gw2");
	uint64_t t0 = hl_now_ns();
	int rc = o->ops->pr_commit(o, old, seq, text, (size_t)n);

	if (ms)
		*ms = ms_since(t0);
	return rc;
}

static bool wait_seen(int i, uint64_t seq)
{
	for (int k = 0; k < 3000; k++) {
		pthread_mutex_lock(&seen[i].mu);
		bool ok = seen[i].seq >= seq;
		pthread_mutex_unlock(&seen[i].mu);
		if (ok)
			return true;
		usleep(1000);
	}
	return false;
}

/* leaves: both open, the record empty at sequence number 0, both told of changes */
static void test_open_empty(void)
{
	char *text = NULL;
	size_t len = 1;

	for (int i = 0; i < 2; i++) {
		g[i] = open_gw(gws[i]);
		CU_ASSERT_PTR_NOT_NULL_FATAL(g[i]->ops->pr_open);
		CU_ASSERT_EQUAL(g[i]->ops->pr_open(g[i], gws[i], gws, 2), 0);
	}
	CU_ASSERT_EQUAL(g[0]->ops->pr_load(g[0], &text, &len), 0);
	CU_ASSERT_EQUAL(len, 0);
	free(text);
	CU_ASSERT_FALSE(g[0]->ops->pr_current(g[0], 0)); /* no check yet */
	for (int i = 0; i < 2; i++)
		CU_ASSERT_EQUAL(g[i]->ops->pr_start(g[i], changed, &seen[i]), 0);
	usleep(300000);
	CU_ASSERT_TRUE(g[0]->ops->pr_current(g[0], 0));
	CU_ASSERT_TRUE(g[1]->ops->pr_current(g[1], 0));
}

/* leaves: sequence number 2 */
static void test_commit_reaches_both(void)
{
	double ms;

	CU_ASSERT_EQUAL(commit(g[0], 0, 1, &ms), 0);
	printf("\n    MEASURE commit answered by both gateways: %.1f ms", ms);
	CU_ASSERT(ms < 2000);
	/* answered: both read it before the commit returned */
	CU_ASSERT_EQUAL(seen[0].seq, 1);
	CU_ASSERT_EQUAL(seen[1].seq, 1);
	CU_ASSERT_TRUE(strstr(seen[1].text, "from gw1") != NULL);
	CU_ASSERT_TRUE(seen[1].notices >= 1);
	CU_ASSERT_EQUAL(commit(g[1], 1, 2, &ms), 0);
	printf("\n    MEASURE the same through the other gateway: %.1f ms", ms);
	CU_ASSERT_EQUAL(seen[0].seq, 2);
	/* a copy at 1 is no longer current anywhere once 2 is known; 2 is */
	usleep(600000);
	CU_ASSERT_FALSE(g[0]->ops->pr_current(g[0], 1));
	CU_ASSERT_TRUE(g[0]->ops->pr_current(g[0], 2));
}

/* leaves: sequence number 2 */
static void test_commit_from_old_seq_refused(void)
{
	char *text = NULL;
	size_t len = 0;

	CU_ASSERT_EQUAL(commit(g[0], 1, 2, NULL), -ECANCELED);
	CU_ASSERT_EQUAL(commit(g[1], 0, 1, NULL), -ECANCELED);
	CU_ASSERT_EQUAL(g[0]->ops->pr_load(g[0], &text, &len), 0);
	CU_ASSERT_TRUE(text && strstr(text, "seq 2\nfrom gw2") == text);
	free(text);
}

struct racer {
	struct hl_origin *o;
	unsigned won, lost;
};

static void *race_main(void *arg)
{
	struct racer *r = arg;

	for (int i = 0; i < 40; i++) {
		char *text = NULL;
		size_t len = 0;
		uint64_t seq = 0;
		if (r->o->ops->pr_load(r->o, &text, &len) == 0 && len)
			sscanf(text, "seq %" SCNu64, &seq);
		free(text);
		int rc = commit(r->o, seq, seq + 1, NULL);
		if (rc == 0)
			r->won++;
		else if (rc == -ECANCELED)
			r->lost++;
	}
	return NULL;
}

/* Both gateways committing at once: each commit one step, none lost. leaves: seq 2 + wins */
static void test_racing_commits(void)
{
	struct racer r[2] = {{g[0], 0, 0}, {g[1], 0, 0}};
	pthread_t t[2];
	char *text = NULL;
	size_t len = 0;
	uint64_t seq = 0;

	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, race_main, &r[i]);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	CU_ASSERT_EQUAL(r[0].won + r[0].lost + r[1].won + r[1].lost, 80);
	CU_ASSERT_EQUAL(g[1]->ops->pr_load(g[1], &text, &len), 0);
	if (text)
		sscanf(text, "seq %" SCNu64, &seq);
	free(text);
	CU_ASSERT_EQUAL(seq, 2 + r[0].won + r[1].won);
	printf("\n    %u + %u commits won, %u + %u lost the race", r[0].won, r[1].won, r[0].lost,
	       r[1].lost);
	CU_ASSERT_TRUE(wait_seen(0, seq));
	CU_ASSERT_TRUE(wait_seen(1, seq));
}

/*
 * A gateway that does not answer: the commit waits until that gateway's
 * copy is no longer current (PR_FRESH_MS + PR_MARGIN_MS after the commit).
 */
static void test_silent_gateway(void)
{
	char *text = NULL;
	size_t len = 0;
	uint64_t seq = 0;
	double ms;

	CU_ASSERT_EQUAL(g[0]->ops->pr_load(g[0], &text, &len), 0);
	if (text)
		sscanf(text, "seq %" SCNu64, &seq);
	free(text);
	usleep(600000);
	CU_ASSERT_TRUE(g[1]->ops->pr_current(g[1], seq));
	pthread_mutex_lock(&seen[1].mu);
	seen[1].hold = true;
	pthread_mutex_unlock(&seen[1].mu);
	CU_ASSERT_EQUAL(commit(g[0], seq, seq + 1, &ms), 0);
	printf("\n    MEASURE commit with a silent gateway: %.1f ms", ms);
	CU_ASSERT(ms >= 2400);
	CU_ASSERT(ms < 6000);
	/* by then its old copy is not current (its check found seq + 1) */
	CU_ASSERT_FALSE(g[1]->ops->pr_current(g[1], seq));
	pthread_mutex_lock(&seen[1].mu);
	seen[1].hold = false;
	uint64_t held = seen[1].held;
	pthread_mutex_unlock(&seen[1].mu);
	g[1]->ops->pr_applied(g[1], held, seq + 1); /* late: harmless */
	/* a gateway that is gone altogether: its watch closed */
	g[1]->ops->pr_close(g[1]);
	CU_ASSERT_EQUAL(commit(g[0], seq + 1, seq + 2, &ms), 0);
	printf("\n    MEASURE commit with a gateway gone: %.1f ms", ms);
	CU_ASSERT(ms >= 2400);
}

static void test_close(void)
{
	for (int i = 0; i < 2; i++) {
		hl_origin_close(g[i]); /* closes the record's thread and watch too */
		g[i] = NULL;
	}
}

static const struct hl_test tests[] = {
    {"open: an empty record at 0, current after the first check", test_open_empty},
    {"a commit is read by both gateways before it returns", test_commit_reaches_both},
    {"a commit from an old sequence number is refused", test_commit_from_old_seq_refused},
    {"racing commits: one history, none lost", test_racing_commits},
    {"a silent gateway: the commit waits out its copy", test_silent_gateway},
    {"close", test_close},
    {NULL, NULL},
};

/* a fatal assertion left them open: close before the cluster goes */
static void close_left(void)
{
	for (int i = 0; i < 2; i++)
		hl_origin_close(g[i]);
}

int main(void)
{
	return ceph_ut_main("rbd_pr", tests, close_left);
}
