/*
 * evict_ut.c - a full portal's evictions against connections whose start
 * is still on its way to their reactor: the real accept loop (portal_accept,
 * through the portal's event) on two fake reactors, a burst of loopback
 * connections over max_pending_logins, then every queued call in order.
 *
 * A connection accepted for the other reactor is published (pending list,
 * eviction candidate) before its start runs there. An eviction call queued
 * there for an earlier victim took the later ones too, started or not:
 * closed and freed before its start, which then ran on freed memory (a
 * "double free or corruption" abort of hotlund in net_pending_fair.sh under
 * load). Built with AddressSanitizer, so the old code fails here every time.
 */
#include "session_ut_lib.h"

#include <netinet/in.h>

/* the server is not torn down: leaks are not what this program looks for */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "detect_leaks=0";
}

static int fake_r1_mem;
static struct hl_reactor *r1 = (struct hl_reactor *)&fake_r1_mem;

static struct iscsi_portal *only_portal(void)
{
	CU_ASSERT_FATAL(!hl_list_empty(&srv->portals));
	return hl_list_first(&srv->portals, struct iscsi_portal, link);
}

static int connect_to(const struct sockaddr_storage *ss)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	CU_ASSERT_FATAL(fd >= 0);
	CU_ASSERT_FATAL(connect(fd, (const struct sockaddr *)ss, sizeof(struct sockaddr_in)) == 0);
	return fd;
}

static unsigned conns_now(void)
{
	unsigned n;

	pthread_mutex_lock(&srv->lock);
	n = srv->n_conns;
	pthread_mutex_unlock(&srv->lock);
	return n;
}

static void test_evict_before_start(void)
{
	struct hl_reactor *rs[2] = {reactor, r1};
	struct hl_iscsi_server_config sc = {.reactors = rs, .n_reactors = 2};
	struct hl_iscsi_login_limits lim = {.max_pending_logins = 2,
	                                    .max_pending_logins_per_addr = 64,
	                                    .max_sessions = 64,
	                                    .max_sessions_per_addr = 64};
	enum { N = 12 };
	int fds[N];
	char bound[80];
	struct iscsi_portal *p;

	CU_ASSERT_FATAL(hl_iscsi_server_create(&sc, &srv) == 0);
	hl_iscsi_server_set_login_limits(srv, &lim);
	CU_ASSERT_FATAL(hl_iscsi_portal_add(srv, "127.0.0.1:0", 1, bound, sizeof(bound)) == 0);
	run_calls(); /* the portal is watched on reactor 0 */
	p = only_portal();
	CU_ASSERT_PTR_NOT_NULL_FATAL(p->ev.fn);

	/* all connected before one is accepted: one accept burst takes them all */
	for (int i = 0; i < N; i++)
		fds[i] = connect_to(&p->addr);
	fake_current = reactor;
	p->ev.fn(&p->ev, EPOLLIN);
	fake_current = NULL;
	/*
	 * Round robin: every other connection's start is queued for reactor 1,
	 * and each new one over the cap evicted the oldest: reactor 1's
	 * connections were evicted before their start ran there.
	 */
	CU_ASSERT_TRUE(ncalls >= N / 2);
	run_calls();
	/* the cap holds: only the last two are left, both started */
	CU_ASSERT_EQUAL(conns_now(), 2);
	pthread_mutex_lock(&srv->lock);
	{
		struct iscsi_conn *c;
		hl_list_for_each_entry(c, &srv->conns, srv_link)
		{
			CU_ASSERT_TRUE(c->started);
			CU_ASSERT_EQUAL(c->state, CONN_LOGIN);
			CU_ASSERT_TRUE(hl_list_empty(&c->evict_link));
		}
	}
	pthread_mutex_unlock(&srv->lock);
	CU_ASSERT_EQUAL(srv->pending_calls, 0); /* every eviction call ran */

	/* the evicted ones were closed: their peers read EOF */
	for (int i = 0; i < N - 2; i++) {
		char b;
		CU_ASSERT_EQUAL(recv(fds[i], &b, 1, MSG_DONTWAIT), 0);
	}
	for (int i = 0; i < N; i++)
		close(fds[i]);

	/* closing what is left, as the daemon's stop does */
	for (;;) {
		struct iscsi_conn *c = NULL;
		pthread_mutex_lock(&srv->lock);
		if (!hl_list_empty(&srv->conns))
			c = hl_list_first(&srv->conns, struct iscsi_conn, srv_link);
		pthread_mutex_unlock(&srv->lock);
		if (!c)
			break;
		fake_current = c->reactor;
		iscsi_conn_close(c, "test end");
		fake_current = NULL;
		run_calls();
	}
	CU_ASSERT_EQUAL(conns_now(), 0);
}

static const struct hl_test tests[] = {
    {"a connection evicted before its start reached its reactor", test_evict_before_start},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("iscsi_evict", tests);
}
