/*
 * session_ut.c - the real connection, login and full-feature code of
 * src/iscsi driven over a socketpair, with the scsi layer replaced by a fake
 * defined here (hl_scsi_cmd_exec & co). Covers the login state machine
 * (stages, continuation, errors, CHAP), Data-In segmentation and
 * residuals, R2T generation, unsolicited data, the CmdSN window, NOP,
 * Reject, TMF, SendTargets and Logout.
 */
#include <errno.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "hl_test.h"
#include "iscsi/iscsi_internal.h"

#define TGT      "iqn.2026-11.io.hotlun:ut"
#define TGT_CHAP "iqn.2026-11.io.hotlun:chap"
#define TGT_ACL  "iqn.2026-11.io.hotlun:acl"
#define INI      "iqn.2026-11.io.hotlun:initiator"

/* ------------------------------------------------------------------ */
/* Fake scsi layer                                                     */

struct fake_lu_tag {
	int dummy;
};
static struct fake_lu_tag fake_lu_mem;
static struct hl_lu *fake_lu = (struct hl_lu *)&fake_lu_mem;

static struct hl_scsi_cmd *pending[256];
static int npending;
static bool defer_exec;        /* keep commands until the test completes them */
static uint32_t fake_xfer_len; /* 0: xfer_len = data_len */
static uint8_t last_write[65536];
static uint32_t last_write_len;
static int lu_resets, nexus_gone;
static int nexec_total; /* commands that reached the fake scsi layer */

void hl_scsi_set_sense(struct hl_scsi_cmd *cmd, uint8_t key, uint8_t asc, uint8_t ascq)
{
	memset(cmd->sense, 0, 18);
	cmd->sense[0] = 0x70;
	cmd->sense[2] = key;
	cmd->sense[7] = 10;
	cmd->sense[12] = asc;
	cmd->sense[13] = ascq;
	cmd->sense_len = 18;
	cmd->status = HL_SAM_CHECK_CONDITION;
}

static void fake_complete(struct hl_scsi_cmd *cmd)
{
	cmd->status = HL_SAM_GOOD;
	cmd->xfer_len = fake_xfer_len ? fake_xfer_len : cmd->data_len;
	if (cmd->data_in) {
		cmd->data_in_len = HL_MIN(cmd->data_len, cmd->xfer_len);
		for (uint32_t i = 0; i < cmd->data_in_len; i++)
			cmd->data[i] = (uint8_t)(i * 7 + 1);
	}
	if (cmd->data_out) {
		last_write_len = HL_MIN(cmd->data_len, (uint32_t)sizeof(last_write));
		memcpy(last_write, cmd->data, last_write_len);
	}
	cmd->done(cmd);
}

void hl_scsi_cmd_exec(struct hl_scsi_cmd *cmd)
{
	nexec_total++;
	if (defer_exec && npending < 256) {
		pending[npending++] = cmd;
		return;
	}
	fake_complete(cmd);
}

void hl_lu_reset(struct hl_lu *lu, const struct hl_scsi_nexus *by)
{
	lu_resets++;
}

void hl_scsi_nexus_gone(const struct hl_scsi_lun_map *map, const struct hl_scsi_nexus *nexus)
{
	nexus_gone++;
}

/* hl_iscsi_target_luns_changed's calls into the scsi layer, recorded */
static uint64_t luns_changed_nexus[4];
static const struct hl_scsi_lun_map *luns_changed_map;
static unsigned n_luns_changed;

unsigned hl_scsi_luns_changed(const struct hl_scsi_lun_map *m, const struct hl_scsi_nexus *nexus)
{
	if (n_luns_changed < 4)
		luns_changed_nexus[n_luns_changed] = nexus->id;
	n_luns_changed++;
	luns_changed_map = m;
	return 1;
}

/* ------------------------------------------------------------------ */
/* Fake reactor: events and timers are recorded, cross-reactor calls   */
/* queue up and run in pump(). The real event.c is not linked.         */

static int fake_reactor_mem;
static struct hl_reactor *reactor = (struct hl_reactor *)&fake_reactor_mem;
struct fake_call {
	hl_call_fn fn;
	void *arg;
};
static struct fake_call calls[256];
static int ncalls;

uint64_t hl_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

struct hl_reactor *hl_reactor_current(void)
{
	return reactor;
}

int hl_reactor_call(struct hl_reactor *r, hl_call_fn fn, void *arg)
{
	if (ncalls >= 256)
		return -ENOMEM;
	calls[ncalls].fn = fn;
	calls[ncalls].arg = arg;
	ncalls++;
	return 0;
}

static void run_calls(void)
{
	while (ncalls) {
		struct fake_call fc = calls[0];
		memmove(calls, calls + 1, (size_t)(--ncalls) * sizeof(calls[0]));
		fc.fn(fc.arg);
	}
}

void hl_event_init(struct hl_event *ev, int fd, hl_event_fn fn, void *arg)
{
	ev->fd = fd;
	ev->fn = fn;
	ev->arg = arg;
	ev->events = 0;
	ev->reactor = NULL;
}

int hl_event_add(struct hl_reactor *r, struct hl_event *ev, uint32_t events)
{
	ev->reactor = r;
	ev->events = events;
	return 0;
}

int hl_event_mod(struct hl_event *ev, uint32_t events)
{
	ev->events = events;
	return 0;
}

void hl_event_del(struct hl_event *ev)
{
	ev->reactor = NULL;
}

void hl_timer_init(struct hl_timer *t, hl_timer_fn fn, void *arg)
{
	t->fn = fn;
	t->arg = arg;
	t->heap_idx = (size_t)-1;
	t->reactor = NULL;
}

void hl_timer_start(struct hl_reactor *r, struct hl_timer *t, uint64_t delay_ms)
{
	t->reactor = r;
	t->deadline_ns = hl_now_ns() + delay_ms * 1000000ull;
	t->heap_idx = 0;
}

void hl_timer_stop(struct hl_timer *t)
{
	t->heap_idx = (size_t)-1;
}

/* No reactor turns here: a connection sends at once (hl_turn_hook_queue refuses). */
#include "turn_hook_stub.h"

/* ------------------------------------------------------------------ */
/* Harness: a server, and up to two initiators over socketpairs.       */

static struct hl_iscsi_server *srv;
static struct hl_scsi_lun_map map;
static bool rx_hd, rx_dd;

struct rpdu {
	struct iscsi_bhs bhs;
	uint32_t dsl;
	uint8_t data[65536];
};

struct peer {
	struct iscsi_conn *p_conn;
	int p_fd; /* the initiator's end */
	struct iscsi_rx p_rcv;
	struct rpdu p_got[64];
	int p_ngot;
	uint32_t p_cmdsn, p_itt, p_expstatsn;
	bool open;
};
static struct peer peers[2];
static struct peer *P = &peers[0];
/* the tests speak through the current peer */
#define conn      (P->p_conn)
#define cfd       (P->p_fd)
#define rcv       (P->p_rcv)
#define got       (P->p_got)
#define ngot      (P->p_ngot)
#define cmdsn     (P->p_cmdsn)
#define itt       (P->p_itt)
#define expstatsn (P->p_expstatsn)

static int rcv_header(void *ctx, struct iscsi_rx *rx)
{
	return 0;
}

static int rcv_pdu(void *ctx, struct iscsi_rx *rx)
{
	struct peer *p = ctx;
	if (p->p_ngot >= 64)
		return -ENOSPC;
	p->p_got[p->p_ngot].bhs = rx->bhs;
	p->p_got[p->p_ngot].dsl = rx->dsl;
	if (rx->dsl)
		memcpy(p->p_got[p->p_ngot].data, rx->data,
		       HL_MIN(rx->dsl, (uint32_t)sizeof(p->p_got[0].data)));
	p->p_ngot++;
	return 0;
}

static const struct iscsi_rx_ops rcv_ops = {.header = rcv_header, .pdu = rcv_pdu};

static void peer_open(struct peer *p)
{
	int sv[2];

	CU_ASSERT_FATAL(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	fcntl(sv[0], F_SETFL, O_NONBLOCK);
	fcntl(sv[1], F_SETFL, O_NONBLOCK);
	p->p_fd = sv[1];
	CU_ASSERT_FATAL(iscsi_conn_create(srv, sv[0], 1, false, &p->p_conn) == 0);
	pthread_mutex_lock(&srv->lock);
	hl_list_add_tail(&srv->conns, &p->p_conn->srv_link);
	srv->n_conns++;
	pthread_mutex_unlock(&srv->lock);
	iscsi_conn_start(p->p_conn);
	iscsi_rx_init(&p->p_rcv, &rcv_ops, p, 1 << 20);
	p->p_ngot = 0;
	p->p_cmdsn = 1;
	p->p_itt = 0x100;
	p->p_expstatsn = 0;
	p->open = true;
}

static void setup(void)
{
	struct hl_iscsi_server_config sc = {0};
	struct hl_iscsi_target_config tc = {0};
	static const char *acl[] = {"iqn.2026-11.io.hotlun:someone-else"};

	memset(&map, 0, sizeof(map));
	map.lu[0] = fake_lu;
	sc.reactors = &reactor;
	sc.n_reactors = 1;
	CU_ASSERT_FATAL(hl_iscsi_server_create(&sc, &srv) == 0);
	tc.name = TGT;
	tc.luns = &map;
	tc.allow_all = true;
	CU_ASSERT_FATAL(hl_iscsi_target_add(srv, &tc) == 0);
	CU_ASSERT_EQUAL(hl_iscsi_target_add(srv, &tc), -EEXIST);
	tc.name = TGT_CHAP;
	hl_strlcpy(tc.chap.user, "alice", sizeof(tc.chap.user));
	hl_strlcpy(tc.chap.secret, "alicesecret1", sizeof(tc.chap.secret));
	hl_strlcpy(tc.mutual.user, "tgt", sizeof(tc.mutual.user));
	hl_strlcpy(tc.mutual.secret, "targetsecret", sizeof(tc.mutual.secret));
	CU_ASSERT_FATAL(hl_iscsi_target_add(srv, &tc) == 0);
	memset(&tc.chap, 0, sizeof(tc.chap));
	memset(&tc.mutual, 0, sizeof(tc.mutual));
	tc.name = TGT_ACL;
	tc.allow_all = false;
	tc.allow = acl;
	tc.n_allow = 1;
	CU_ASSERT_FATAL(hl_iscsi_target_add(srv, &tc) == 0);

	ncalls = 0;
	P = &peers[0];
	peer_open(&peers[0]);
	rx_hd = rx_dd = false;
	npending = 0;
	nexec_total = 0;
	defer_exec = false;
	fake_xfer_len = 0;
	lu_resets = nexus_gone = 0;
	n_luns_changed = 0;
	luns_changed_map = NULL;
}

static bool peer_alive(const struct peer *p)
{
	bool alive = false;
	struct iscsi_conn *c;
	pthread_mutex_lock(&srv->lock);
	hl_list_for_each_entry(c, &srv->conns, srv_link) if (c == p->p_conn) alive = true;
	pthread_mutex_unlock(&srv->lock);
	return alive;
}

static bool conn_alive(void)
{
	return peer_alive(P);
}

static void teardown(void)
{
	for (int i = 0; i < 2; i++) {
		if (peers[i].open && peer_alive(&peers[i]))
			iscsi_conn_close(peers[i].p_conn, "test end");
	}
	/* complete what the fake still holds so the connections can go */
	while (npending)
		fake_complete(pending[--npending]);
	run_calls();
	CU_ASSERT_EQUAL(srv->n_conns, 0);
	CU_ASSERT_EQUAL(srv->pending_calls, 0);
	pthread_mutex_lock(&srv->lock);
	srv->stopping = true;
	pthread_mutex_unlock(&srv->lock);
	while (!hl_list_empty(&srv->targets)) {
		struct iscsi_target *t = hl_list_first(&srv->targets, struct iscsi_target, link);
		hl_list_del(&t->link);
		for (size_t i = 0; i < t->n_allow; i++)
			free(t->allow[i]);
		free(t->allow);
		free(t);
	}
	iscsi_wb_fini(&srv->wb); /* the sources remembered as refused (hog tests) */
	free(srv->reactors);
	free(srv);
	srv = NULL;
	for (int i = 0; i < 2; i++) {
		if (!peers[i].open)
			continue;
		close(peers[i].p_fd);
		iscsi_rx_fini(&peers[i].p_rcv);
		peers[i].open = false;
	}
	P = &peers[0];
}

/* Let the connections process what the initiators sent, run queued calls, collect answers. */
static void pump(void)
{
	uint8_t buf[65536];

	for (int round = 0; round < 8; round++) {
		for (int i = 0; i < 2; i++) {
			struct peer *p = &peers[i];
			if (!p->open)
				continue;
			if (peer_alive(p))
				p->p_conn->ev.fn(&p->p_conn->ev, EPOLLIN | EPOLLOUT);
			run_calls();
			for (;;) {
				ssize_t n = read(p->p_fd, buf, sizeof(buf));
				if (n <= 0)
					break;
				CU_ASSERT_EQUAL(iscsi_rx_feed(&p->p_rcv, buf, (size_t)n), n);
			}
		}
	}
}

static void send_raw(const void *p, size_t n)
{
	CU_ASSERT_EQUAL_FATAL(write(cfd, p, n), (ssize_t)n);
}

static void put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static void send_pdu(struct iscsi_bhs *h, const void *data, uint32_t len)
{
	uint8_t buf[70000];
	size_t n = ISCSI_BHS_LEN;

	bhs_set_dsl(h, len);
	memcpy(buf, h->b, ISCSI_BHS_LEN);
	if (rx_hd) {
		put_le32(buf + n, iscsi_crc32c(0, buf, ISCSI_BHS_LEN));
		n += 4;
	}
	size_t d0 = n;
	if (len)
		memcpy(buf + n, data, len);
	n += len;
	while (n & 3)
		buf[n++] = 0;
	if (rx_dd && len) {
		put_le32(buf + n, iscsi_crc32c(0, buf + d0, n - d0));
		n += 4;
	}
	send_raw(buf, n);
}

/*
 * An immediate TMF request for function fn (ISCSI_TMF_*) on the task whose
 * ITT is ref (ISCSI_RSVD_TAG for none), with the next ITT; the caller sends it.
 */
static void tmf_req(struct iscsi_bhs *h, uint8_t fn, uint32_t ref)
{
	memset(h, 0, sizeof(*h));
	h->b[0] = ISCSI_OP_TMF_REQ | ISCSI_FLAG_IMMEDIATE;
	h->b[1] = ISCSI_FLAG_FINAL | fn;
	bhs_set_itt(h, ++itt);
	bhs_put32(h, 20, ref);
	bhs_put32(h, 24, cmdsn);
}

/* key=value\0 list from "k=v|k=v" */
static size_t kv(uint8_t *out, const char *spec)
{
	size_t n = 0;
	for (const char *p = spec; *p; p++)
		out[n++] = *p == '|' ? 0 : (uint8_t)*p;
	out[n++] = 0;
	return n;
}

static bool has_kv(const struct rpdu *p, const char *pair)
{
	size_t l = strlen(pair);
	for (uint32_t off = 0; off < p->dsl;) {
		const char *s = (const char *)p->data + off;
		size_t sl = strnlen(s, p->dsl - off);
		if (sl == l && memcmp(s, pair, l) == 0)
			return true;
		off += (uint32_t)sl + 1;
	}
	return false;
}

static const char *get_kv(const struct rpdu *p, const char *key)
{
	size_t l = strlen(key);
	for (uint32_t off = 0; off < p->dsl;) {
		const char *s = (const char *)p->data + off;
		size_t sl = strnlen(s, p->dsl - off);
		if (sl > l && memcmp(s, key, l) == 0 && s[l] == '=')
			return s + l + 1;
		off += (uint32_t)sl + 1;
	}
	return NULL;
}

static const uint8_t isid[6] = {0x80, 0x12, 0x34, 0x56, 0x00, 0x01};

/* A Login Request header with flags (T, C, CSG, NSG), the test's ISID and P's ITT and SNs. */
static void login_bhs(struct iscsi_bhs *h, uint8_t flags)
{
	memset(h, 0, sizeof(*h));
	h->b[0] = ISCSI_OP_LOGIN_REQ | ISCSI_FLAG_IMMEDIATE;
	h->b[1] = flags;
	memcpy(&h->b[8], isid, 6);
	bhs_set_itt(h, itt);
	bhs_put32(h, 24, cmdsn);
	bhs_put32(h, 28, expstatsn);
}

/* Send the Login Request h with the keys of spec ("k=v|k=v", NULL: none). */
static void send_login(struct iscsi_bhs *h, const char *spec)
{
	uint8_t data[16384];
	size_t n = spec ? kv(data, spec) : 0;

	send_pdu(h, data, (uint32_t)n);
}

static void login_pdu(uint8_t flags, const char *spec)
{
	struct iscsi_bhs h;

	login_bhs(&h, flags);
	send_login(&h, spec);
}

static uint16_t login_status(const struct rpdu *p)
{
	return (uint16_t)(p->bhs.b[36] << 8 | p->bhs.b[37]);
}

#define OPS_KEYS                                                                                   \
	"MaxRecvDataSegmentLength=8192|InitialR2T=Yes|ImmediateData=Yes|"                          \
	"MaxBurstLength=16384|FirstBurstLength=8192|MaxOutstandingR2T=2|"                          \
	"HeaderDigest=None|DataDigest=None|ErrorRecoveryLevel=0"

/* Operational-stage-only login straight to FFP. */
static void login_ok(const char *extra_ops)
{
	char spec[2048];
	snprintf(spec, sizeof(spec), "InitiatorName=%s|TargetName=%s|SessionType=Normal|%s", INI,
	         TGT, extra_ops ? extra_ops : OPS_KEYS);
	login_pdu(ISCSI_LOGIN_TRANSIT | (1 << 2) | 3, spec);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_LOGIN_RSP);
	CU_ASSERT_EQUAL_FATAL(login_status(&got[0]), 0);
	CU_ASSERT_EQUAL(got[0].bhs.b[1], ISCSI_LOGIN_TRANSIT | (1 << 2) | 3);
	CU_ASSERT_NOT_EQUAL(hl_get_be16(&got[0].bhs.b[14]), 0);
	CU_ASSERT_TRUE(has_kv(&got[0], "TargetPortalGroupTag=1"));
	CU_ASSERT_EQUAL(conn->state, CONN_FFP);
	expstatsn = bhs_w24(&got[0].bhs) + 1;
	ngot = 0;
	itt++;
}

static void scsi_cmd(uint8_t flags, uint8_t cdb0, uint32_t edtl, const void *imm, uint32_t imm_len)
{
	struct iscsi_bhs h;

	memset(&h, 0, sizeof(h));
	h.b[0] = ISCSI_OP_SCSI_CMD;
	h.b[1] = flags | HL_TASK_SIMPLE;
	bhs_set_itt(&h, itt);
	bhs_put32(&h, 20, edtl);
	bhs_put32(&h, 24, cmdsn++);
	bhs_put32(&h, 28, expstatsn);
	h.b[32] = cdb0;
	send_pdu(&h, imm, imm_len);
}

static void data_out(uint32_t ttt, uint32_t datasn, uint32_t off, const uint8_t *d, uint32_t len,
                     bool final)
{
	struct iscsi_bhs h;

	memset(&h, 0, sizeof(h));
	h.b[0] = ISCSI_OP_DATA_OUT;
	h.b[1] = final ? ISCSI_FLAG_FINAL : 0;
	bhs_set_itt(&h, itt);
	bhs_put32(&h, 20, ttt);
	bhs_put32(&h, 28, expstatsn);
	bhs_put32(&h, 36, datasn);
	bhs_put32(&h, 40, off);
	send_pdu(&h, d, len);
}

/* ------------------------------------------------------------------ */
/* Login                                                               */

static void test_login_operational_only(void)
{
	setup();
	login_ok(NULL);
	CU_ASSERT_EQUAL(conn->params.max_recv_dsl_initiator, 8192);
	CU_ASSERT_EQUAL(conn->params.max_burst_length, 16384);
	teardown();
	CU_ASSERT_EQUAL(nexus_gone, 1);
}

/* The SCSI target port a session uses follows the gateway id (ALUA, several gateways). */
static void test_login_port_ids_follow_gateway(void)
{
	struct hl_iscsi_server_config sc = {0};
	struct hl_iscsi_server *bad = NULL;

	/* the numbering itself is hl_scsi_port_ids' (alua_ut); here: that logins use it */
	sc.reactors = &reactor;
	sc.n_reactors = 1;
	sc.gateway = 256;
	CU_ASSERT_EQUAL(hl_iscsi_server_create(&sc, &bad), -EINVAL);
	CU_ASSERT_PTR_NULL(bad);

	/* a lone gateway: the portal group tag (1 here) */
	setup();
	login_ok(NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(conn->sess);
	CU_ASSERT_EQUAL(conn->sess->port.rel_port_id, 1);
	CU_ASSERT_EQUAL(conn->sess->port.tpg_id, 1);
	CU_ASSERT_PTR_EQUAL(conn->sess->nexus.port, &conn->sess->port);
	teardown();
	/* gateway 7: group 7, relative port 0x0701 */
	setup();
	srv->gateway = 7;
	login_ok(NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(conn->sess);
	CU_ASSERT_EQUAL(conn->sess->port.rel_port_id, 0x0701);
	CU_ASSERT_EQUAL(conn->sess->port.tpg_id, 7);
	teardown();
}

static void test_login_security_then_operational(void)
{
	char spec[512];

	setup();
	snprintf(spec, sizeof(spec), "InitiatorName=%s|TargetName=%s|AuthMethod=None", INI, TGT);
	login_pdu(ISCSI_LOGIN_TRANSIT | (0 << 2) | 1, spec);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(login_status(&got[0]), 0);
	CU_ASSERT_TRUE(has_kv(&got[0], "AuthMethod=None"));
	CU_ASSERT_TRUE(has_kv(&got[0], "TargetPortalGroupTag=1"));
	CU_ASSERT_EQUAL(got[0].bhs.b[1], ISCSI_LOGIN_TRANSIT | 1);
	CU_ASSERT_EQUAL(hl_get_be16(&got[0].bhs.b[14]), 0); /* TSIH only in the last response */
	ngot = 0;
	login_pdu(ISCSI_LOGIN_TRANSIT | (1 << 2) | 3, OPS_KEYS);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(login_status(&got[0]), 0);
	CU_ASSERT_FALSE(has_kv(&got[0], "TargetPortalGroupTag=1"));
	CU_ASSERT_PTR_NOT_NULL(get_kv(&got[0], "MaxRecvDataSegmentLength"));
	CU_ASSERT_NOT_EQUAL(hl_get_be16(&got[0].bhs.b[14]), 0);
	CU_ASSERT_EQUAL(conn->state, CONN_FFP);
	teardown();
}

static void expect_login_fail(const char *spec, uint8_t flags, uint16_t status)
{
	setup();
	login_pdu(flags, spec);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(login_status(&got[0]), status);
	CU_ASSERT_FALSE(conn_alive()); /* closed once the answer went out */
	teardown();
}

static void test_login_errors(void)
{
	uint8_t op = ISCSI_LOGIN_TRANSIT | (1 << 2) | 3;
	expect_login_fail("InitiatorName=" INI "|SessionType=Normal", op,
	                  ISCSI_LOGIN_MISSING_PARAMETER);
	expect_login_fail("TargetName=" TGT, op, ISCSI_LOGIN_MISSING_PARAMETER);
	expect_login_fail("InitiatorName=" INI "|TargetName=iqn.2026-11.io.hotlun:none", op,
	                  ISCSI_LOGIN_NOT_FOUND);
	expect_login_fail("InitiatorName=" INI "|TargetName=" TGT_ACL, op,
	                  ISCSI_LOGIN_NOT_AUTHORIZED);
	expect_login_fail("InitiatorName=" INI "|TargetName=" TGT_CHAP, op,
	                  ISCSI_LOGIN_AUTH_FAILED);
	expect_login_fail("InitiatorName=" INI "|TargetName=" TGT "|SessionType=Bogus", op,
	                  ISCSI_LOGIN_SESSION_TYPE_UNSUPPORTED);
	expect_login_fail("InitiatorName=" INI "|TargetName=" TGT "|AuthMethod=None",
	                  ISCSI_LOGIN_TRANSIT | (1 << 2) | 3, ISCSI_LOGIN_INITIATOR_ERROR);
	expect_login_fail("InitiatorName=" INI "|TargetName=" TGT,
	                  ISCSI_LOGIN_TRANSIT | (1 << 2) | 1,
	                  ISCSI_LOGIN_INITIATOR_ERROR); /* NSG <= CSG */
	expect_login_fail("no-equals-sign", op, ISCSI_LOGIN_INITIATOR_ERROR);
	expect_login_fail("InitiatorName=" INI "|TargetName=" TGT "|TargetName=" TGT, op,
	                  ISCSI_LOGIN_INITIATOR_ERROR); /* a key twice */
	expect_login_fail("InitiatorName=iqn.x:evil\n2026 fake log line|TargetName=" TGT, op,
	                  ISCSI_LOGIN_INITIATOR_ERROR); /* names are printable, without spaces */

	/* unsupported version */
	setup();
	{
		struct iscsi_bhs h;
		login_bhs(&h, op);
		h.b[2] = 2; /* Version-max */
		h.b[3] = 1; /* Version-min */
		send_login(&h, "InitiatorName=" INI "|TargetName=" TGT);
	}
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(login_status(&got[0]), ISCSI_LOGIN_UNSUPPORTED_VERSION);
	teardown();

	/* TSIH of a session that does not exist */
	setup();
	{
		struct iscsi_bhs h;
		login_bhs(&h, op);
		hl_put_be16(&h.b[14], 0x4242);
		send_login(&h, "InitiatorName=" INI "|TargetName=" TGT);
	}
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(login_status(&got[0]), ISCSI_LOGIN_SESSION_DOES_NOT_EXIST);
	teardown();

	/* a non-login PDU before login closes the connection */
	setup();
	{
		struct iscsi_bhs h;
		memset(&h, 0, sizeof(h));
		h.b[0] = ISCSI_OP_NOP_OUT | ISCSI_FLAG_IMMEDIATE;
		send_pdu(&h, NULL, 0);
	}
	pump();
	CU_ASSERT_EQUAL(ngot, 0);
	CU_ASSERT_FALSE(conn_alive());
	teardown();
}

static void test_login_discovery(void)
{
	setup();
	login_pdu(ISCSI_LOGIN_TRANSIT | (1 << 2) | 3, "InitiatorName=" INI "|SessionType=Discovery|"
	                                              "MaxRecvDataSegmentLength=8192");
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(login_status(&got[0]), 0);
	CU_ASSERT_EQUAL(conn->sess->type, ISCSI_SESSION_DISCOVERY);
	expstatsn = bhs_w24(&got[0].bhs) + 1;
	ngot = 0;
	/* SendTargets=All lists what the initiator may see (not the ACL'd target) */
	struct iscsi_bhs h;
	uint8_t data[64];
	size_t n = kv(data, "SendTargets=All");
	memset(&h, 0, sizeof(h));
	h.b[0] = ISCSI_OP_TEXT_REQ | ISCSI_FLAG_IMMEDIATE;
	h.b[1] = ISCSI_FLAG_FINAL;
	bhs_set_itt(&h, ++itt);
	bhs_put32(&h, 20, ISCSI_RSVD_TAG);
	bhs_put32(&h, 24, cmdsn);
	send_pdu(&h, data, (uint32_t)n);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_TEXT_RSP);
	CU_ASSERT_EQUAL(got[0].bhs.b[1], ISCSI_FLAG_FINAL);
	CU_ASSERT_TRUE(has_kv(&got[0], "TargetName=" TGT));
	CU_ASSERT_TRUE(has_kv(&got[0], "TargetName=" TGT_CHAP));
	CU_ASSERT_FALSE(has_kv(&got[0], "TargetName=" TGT_ACL));
	/* bad values and keys fail */
	ngot = 0;
	n = kv(data, "SendTargets=Alle");
	bhs_set_itt(&h, ++itt);
	send_pdu(&h, data, (uint32_t)n);
	n = kv(data, "sENDtARGETS=aLL");
	bhs_set_itt(&h, ++itt);
	send_pdu(&h, data, (uint32_t)n);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 2);
	CU_ASSERT_TRUE(has_kv(&got[0], "SendTargets=Reject"));
	CU_ASSERT_TRUE(has_kv(&got[1], "sENDtARGETS=NotUnderstood"));
	/* the same key twice in one request is refused */
	ngot = 0;
	n = kv(data, "SendTargets=All|SendTargets=All");
	bhs_set_itt(&h, ++itt);
	send_pdu(&h, data, (uint32_t)n);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_REJECT);
	/* SCSI commands are not allowed in a discovery session */
	ngot = 0;
	scsi_cmd(ISCSI_FLAG_FINAL, 0x00, 0, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_REJECT);
	teardown();
}

static void test_login_continuation(void)
{
	setup();
	/* request split over two PDUs with C */
	login_pdu(ISCSI_LOGIN_CONTINUE | (1 << 2), "InitiatorName=" INI "|TargetName=" TGT);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(login_status(&got[0]), 0);
	CU_ASSERT_EQUAL(got[0].dsl, 0);
	ngot = 0;
	/* a response that does not fit in 8192 bytes: many unknown keys */
	char spec[16000];
	size_t off = 0;
	for (int i = 0; i < 420; i++)
		off += (size_t)snprintf(spec + off, sizeof(spec) - off, "X-k%03d=v|", i);
	spec[off - 1] = 0;
	login_pdu(ISCSI_LOGIN_TRANSIT | (1 << 2) | 3, spec);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(got[0].bhs.b[1] & (ISCSI_LOGIN_CONTINUE | ISCSI_LOGIN_TRANSIT),
	                ISCSI_LOGIN_CONTINUE);
	CU_ASSERT_EQUAL(got[0].dsl, 8192);
	CU_ASSERT_TRUE(has_kv(&got[0], "X-k000=NotUnderstood"));
	ngot = 0;
	login_pdu(ISCSI_LOGIN_TRANSIT | (1 << 2) | 3, NULL);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(got[0].bhs.b[1], ISCSI_LOGIN_TRANSIT | (1 << 2) | 3);
	CU_ASSERT_NOT_EQUAL(hl_get_be16(&got[0].bhs.b[14]), 0);
	CU_ASSERT_EQUAL(conn->state, CONN_FFP);
	teardown();
}

static void chap_login(const char *secret, bool mutual, bool reflect, uint16_t want_status)
{
	char spec[1024];

	setup();
	snprintf(spec, sizeof(spec), "InitiatorName=%s|TargetName=%s|AuthMethod=CHAP,None", INI,
	         TGT_CHAP);
	login_pdu((0 << 2) | ISCSI_LOGIN_TRANSIT | 1, spec);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_TRUE(has_kv(&got[0], "AuthMethod=CHAP"));
	CU_ASSERT_EQUAL(got[0].bhs.b[1] & ISCSI_LOGIN_TRANSIT, 0);
	ngot = 0;
	login_pdu(0, "CHAP_A=7,5");
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_TRUE(has_kv(&got[0], "CHAP_A=7"));
	const char *id_s = get_kv(&got[0], "CHAP_I"), *c_s = get_kv(&got[0], "CHAP_C");
	CU_ASSERT_FATAL(id_s && c_s);
	uint8_t ch[64], rsp[64];
	char hex[200], spec2[1024];
	int clen = iscsi_chap_decode(c_s, ch, sizeof(ch));
	CU_ASSERT_FATAL(clen > 0);
	CU_ASSERT_EQUAL(iscsi_chap_compute(ISCSI_CHAP_SHA256, (uint8_t)atoi(id_s), secret, ch,
	                                   (size_t)clen, rsp),
	                0);
	iscsi_chap_encode_hex(rsp, 32, hex, sizeof(hex));
	if (mutual)
		snprintf(spec2, sizeof(spec2), "CHAP_N=alice|CHAP_R=%s|CHAP_I=9|CHAP_C=%s", hex,
		         reflect ? c_s : "0x0102030405060708090a0b0c0d0e0f10");
	else
		snprintf(spec2, sizeof(spec2), "CHAP_N=alice|CHAP_R=%s", hex);
	ngot = 0;
	login_pdu((0 << 2) | ISCSI_LOGIN_TRANSIT | 1, spec2);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(login_status(&got[0]), want_status);
	if (want_status == 0) {
		CU_ASSERT_EQUAL(got[0].bhs.b[1], ISCSI_LOGIN_TRANSIT | 1);
		if (mutual) {
			uint8_t want[32], tch[16];
			char whex[100];
			CU_ASSERT_EQUAL(
			    iscsi_chap_decode("0x0102030405060708090a0b0c0d0e0f10", tch, 16), 16);
			iscsi_chap_compute(ISCSI_CHAP_SHA256, 9, "targetsecret", tch, 16, want);
			iscsi_chap_encode_hex(want, 32, whex, sizeof(whex));
			CU_ASSERT_TRUE(has_kv(&got[0], "CHAP_N=tgt"));
			CU_ASSERT_STRING_EQUAL(get_kv(&got[0], "CHAP_R"), whex);
		}
	}
	teardown();
}

static void test_login_chap(void)
{
	chap_login("alicesecret1", false, false, 0);
	chap_login("wrong-secret", false, false, ISCSI_LOGIN_AUTH_FAILED);
	chap_login("alicesecret1", true, false, 0);
	chap_login("alicesecret1", true, true, ISCSI_LOGIN_AUTH_FAILED); /* reflected challenge */
}

/* ------------------------------------------------------------------ */
/* Full feature phase                                                  */

static void test_read_segmentation(void)
{
	setup();
	login_ok(NULL); /* MaxRecvDSL 8192, MaxBurstLength 16384 */
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_READ, 0x28, 20000, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 3);
	uint32_t want_len[3] = {8192, 8192, 3616};
	for (int i = 0; i < 3; i++) {
		CU_ASSERT_EQUAL(bhs_opcode(&got[i].bhs), ISCSI_OP_DATA_IN);
		CU_ASSERT_EQUAL(got[i].dsl, want_len[i]);
		CU_ASSERT_EQUAL(bhs_w36(&got[i].bhs), (uint32_t)i);        /* DataSN */
		CU_ASSERT_EQUAL(bhs_w40(&got[i].bhs), (uint32_t)i * 8192); /* offset */
		CU_ASSERT_EQUAL(bhs_itt(&got[i].bhs), itt);
		CU_ASSERT_EQUAL(got[i].data[5], (uint8_t)((i * 8192 + 5) * 7 + 1));
	}
	CU_ASSERT_EQUAL(got[0].bhs.b[1], 0);
	CU_ASSERT_EQUAL(got[1].bhs.b[1], ISCSI_FLAG_FINAL); /* end of a 16 KiB burst */
	CU_ASSERT_EQUAL(got[2].bhs.b[1], ISCSI_FLAG_FINAL | ISCSI_DATAIN_STATUS);
	CU_ASSERT_EQUAL(got[2].bhs.b[3], HL_SAM_GOOD);
	CU_ASSERT_EQUAL(bhs_w24(&got[2].bhs), expstatsn); /* StatSN */
	CU_ASSERT_EQUAL(bhs_w28(&got[2].bhs), cmdsn);     /* ExpCmdSN */
	teardown();
}

/* The fake scsi layer's pattern in data[lo, hi) (as fake_complete writes it). */
static void fake_pattern(struct hl_scsi_cmd *cmd, uint32_t lo, uint32_t hi)
{
	for (uint32_t i = lo; i < hi; i++)
		cmd->data[i] = (uint8_t)(i * 7 + 1);
}

/*
 * A READ whose data the scsi layer hands over in pieces (data_ready): whole
 * PDUs go at once, cut where the final response cuts them (MaxRecvDSL 8192,
 * bursts of 16384), never the last one; the rest, with the status, at done.
 */
static void test_read_streamed(void)
{
	setup();
	login_ok(NULL); /* MaxRecvDSL 8192, MaxBurstLength 16384 */
	defer_exec = true;
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_READ, 0x28, 40000, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(npending, 1);
	struct hl_scsi_cmd *cmd = pending[0];
	CU_ASSERT_PTR_NOT_NULL_FATAL(cmd->data_ready);
	fake_pattern(cmd, 0, 20000);
	cmd->data_ready(cmd, 20000);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 2); /* [16384, 24576) is not all there */
	fake_pattern(cmd, 20000, 40000);
	cmd->data_ready(cmd, 24576);
	cmd->data_ready(cmd, 24576); /* nothing new */
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 3);
	cmd->data_ready(cmd, 39999); /* [24576, 32768) ends a burst; the last PDU waits */
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 4);
	npending = 0;
	fake_complete(cmd);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 5);
	uint32_t want_len[5] = {8192, 8192, 8192, 8192, 7232};
	uint8_t want_flags[5] = {0, ISCSI_FLAG_FINAL, 0, ISCSI_FLAG_FINAL,
	                         ISCSI_FLAG_FINAL | ISCSI_DATAIN_STATUS};
	for (int i = 0; i < 5; i++) {
		CU_ASSERT_EQUAL(bhs_opcode(&got[i].bhs), ISCSI_OP_DATA_IN);
		CU_ASSERT_EQUAL(got[i].dsl, want_len[i]);
		CU_ASSERT_EQUAL(got[i].bhs.b[1], want_flags[i]);
		CU_ASSERT_EQUAL(bhs_w36(&got[i].bhs), (uint32_t)i);        /* DataSN */
		CU_ASSERT_EQUAL(bhs_w40(&got[i].bhs), (uint32_t)i * 8192); /* offset */
		CU_ASSERT_EQUAL(got[i].data[5], (uint8_t)((i * 8192 + 5) * 7 + 1));
	}
	CU_ASSERT_EQUAL(got[4].bhs.b[3], HL_SAM_GOOD);
	CU_ASSERT_EQUAL(bhs_w24(&got[4].bhs), expstatsn);

	/* an error after some data: the Data-In sent, then a SCSI Response with sense */
	ngot = 0;
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_READ, 0x28, 40000, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(npending, 1);
	cmd = pending[0];
	fake_pattern(cmd, 0, 16384);
	cmd->data_ready(cmd, 16384);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 2);
	npending = 0;
	cmd->xfer_len = 40000;
	cmd->data_in_len = 0;
	hl_scsi_set_sense(cmd, 0x03, 0x11, 0x00); /* MEDIUM ERROR, UNRECOVERED READ ERROR */
	cmd->done(cmd);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 3);
	CU_ASSERT_EQUAL(bhs_opcode(&got[2].bhs), ISCSI_OP_SCSI_RSP);
	CU_ASSERT_EQUAL(got[2].bhs.b[3], HL_SAM_CHECK_CONDITION);
	CU_ASSERT_EQUAL(bhs_w36(&got[2].bhs), 2); /* ExpDataSN: the two Data-In sent */
	CU_ASSERT_EQUAL(bhs_w44(&got[2].bhs), 0); /* no residual: xfer_len == EDTL */

	/* aborted: nothing more leaves, and the TMF answers once the command is done */
	ngot = 0;
	uint32_t victim = itt;
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_READ, 0x28, 40000, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(npending, 1);
	cmd = pending[0];
	struct iscsi_bhs h;
	tmf_req(&h, ISCSI_TMF_ABORT_TASK, victim);
	send_pdu(&h, NULL, 0);
	pump();
	fake_pattern(cmd, 0, 40000);
	cmd->data_ready(cmd, 32768);
	pump();
	CU_ASSERT_EQUAL(ngot, 0);
	npending = 0;
	fake_complete(cmd);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_TMF_RSP);
	teardown();
}

/*
 * Data buffers come back for reuse up to 64 MiB per connection: 32 reads of
 * 1 MiB in flight reuse the same 32 buffers (with a cache of 8, 24 of them
 * were fresh allocations each time); the kept buffers can be given back.
 */
static void test_data_buffer_reuse(void)
{
	enum { N = 32 };
	void *p[N], *q[N];
	uint32_t cap[N];
	struct iscsi_conn *c;

	setup();
	login_ok(NULL);
	c = P->p_conn;
	for (int i = 0; i < N; i++) {
		p[i] = iscsi_buf_get(c, 1u << 20, &cap[i]);
		CU_ASSERT_PTR_NOT_NULL_FATAL(p[i]);
		CU_ASSERT_EQUAL(cap[i], 1u << 20);
	}
	for (int i = 0; i < N; i++)
		iscsi_buf_put(c, p[i], cap[i]);
	CU_ASSERT_EQUAL(c->buf_cache_bytes, (uint64_t)N << 20);
	int reused = 0;
	for (int i = 0; i < N; i++) {
		q[i] = iscsi_buf_get(c, 1u << 20, &cap[i]);
		for (int j = 0; j < N; j++)
			reused += q[i] == p[j];
	}
	CU_ASSERT_EQUAL(reused, N);
	CU_ASSERT_EQUAL(c->buf_cache_bytes, 0);
	for (int i = 0; i < N; i++)
		iscsi_buf_put(c, q[i], cap[i]);
	iscsi_conn_buf_trim(c);
	CU_ASSERT_EQUAL(c->buf_cache_bytes, 0);
	teardown();
}

/*
 * 1 MiB buffers are the two halves of a 2 MiB-aligned huge-page chunk; the
 * chunk stays while either half is in use (its free half counted as kept)
 * and goes back once both are free and the connection trims or closes.
 */
static void test_data_buffer_huge_chunks(void)
{
	uint32_t cap0, cap1, cap2;
	struct iscsi_conn *c;
	uint8_t *a, *b, *d;

	setup();
	login_ok(NULL);
	c = P->p_conn;
	a = iscsi_buf_get(c, 1u << 20, &cap0);
	b = iscsi_buf_get(c, 1u << 20, &cap1);
	CU_ASSERT_PTR_NOT_NULL_FATAL(a);
	CU_ASSERT_PTR_NOT_NULL_FATAL(b);
	CU_ASSERT_EQUAL(cap0, 1u << 20);
	CU_ASSERT_EQUAL((uintptr_t)a % (2u << 20), 0);
	CU_ASSERT_PTR_EQUAL(b, a + (1u << 20));
	CU_ASSERT_EQUAL(c->nchunks, 1);
	CU_ASSERT_EQUAL(c->buf_cache_bytes, 0);
	/* a 2 MiB buffer is plain pages (not a chunk) */
	d = iscsi_buf_get(c, 2u << 20, &cap2);
	CU_ASSERT_PTR_NOT_NULL_FATAL(d);
	CU_ASSERT_EQUAL(cap2, 2u << 20);
	CU_ASSERT_EQUAL(c->nchunks, 1);
	iscsi_buf_put(c, d, cap2);
	iscsi_buf_put(c, a, cap0);
	iscsi_conn_buf_trim(c);
	/* b still in use: its chunk stays, a's half counted as kept */
	CU_ASSERT_EQUAL(c->nchunks, 1);
	CU_ASSERT_EQUAL(c->buf_cache_bytes, 1u << 20);
	memset(b, 0xa5, 1u << 20); /* still ours */
	CU_ASSERT_PTR_EQUAL(iscsi_buf_get(c, 1u << 20, &cap0), a); /* the free half first */
	iscsi_buf_put(c, a, cap0);
	iscsi_buf_put(c, b, cap1);
	CU_ASSERT_EQUAL(c->buf_cache_bytes, 2u << 20);
	iscsi_conn_buf_trim(c);
	CU_ASSERT_EQUAL(c->nchunks, 0);
	CU_ASSERT_EQUAL(c->buf_cache_bytes, 0);
	teardown();
}

static void test_read_residuals(void)
{
	setup();
	login_ok(NULL);
	fake_xfer_len = 1024; /* the CDB asks for more than EDTL */
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_READ, 0x28, 512, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(got[0].dsl, 512);
	CU_ASSERT_EQUAL(got[0].bhs.b[1],
	                ISCSI_FLAG_FINAL | ISCSI_DATAIN_STATUS | ISCSI_DATAIN_OVERFLOW);
	CU_ASSERT_EQUAL(bhs_w44(&got[0].bhs), 512);
	ngot = 0;
	itt++;
	fake_xfer_len = 512; /* EDTL larger than the CDB */
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_READ, 0x28, 4096, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(got[0].dsl, 512);
	CU_ASSERT_EQUAL(got[0].bhs.b[1],
	                ISCSI_FLAG_FINAL | ISCSI_DATAIN_STATUS | ISCSI_DATAIN_UNDERFLOW);
	CU_ASSERT_EQUAL(bhs_w44(&got[0].bhs), 4096 - 512);
	ngot = 0;
	itt++;
	/* a no-data command with EDTL: SCSI Response with underflow */
	fake_xfer_len = 0;
	scsi_cmd(ISCSI_FLAG_FINAL, 0x00, 0, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_SCSI_RSP);
	CU_ASSERT_EQUAL(got[0].bhs.b[1], ISCSI_FLAG_FINAL);
	teardown();
}

static void test_edtl_too_large(void)
{
	setup();
	login_ok(NULL);
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_READ, 0x28, HL_SCSI_MAX_XFER + 512, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_SCSI_RSP);
	CU_ASSERT_EQUAL(got[0].bhs.b[3], HL_SAM_CHECK_CONDITION);
	CU_ASSERT_EQUAL(got[0].dsl, 2 + 18);
	CU_ASSERT_EQUAL(got[0].data[2 + 2], HL_SK_ILLEGAL_REQUEST);
	CU_ASSERT_EQUAL(got[0].data[2 + 12], 0x24);
	/*
	 * a connection that already holds its share of buffers is refused: BUSY
	 * while it has no other command in the task set (SAM-5), else TASK SET FULL
	 */
	ngot = 0;
	itt++;
	conn->buf_bytes = ISCSI_CONN_BUF_MAX - 100;
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_READ, 0x28, 4096, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(got[0].bhs.b[3], HL_SAM_BUSY);
	conn->buf_bytes = 0;
	ngot = 0;
	itt++;
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_READ, 0x28, 4096, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(got[0].bhs.b[3], HL_SAM_GOOD);
	CU_ASSERT_EQUAL(conn->buf_bytes, 0);
	teardown();
}

/* got holds one PDU, an R2T for len bytes at offset off: @return its TTT; got is emptied. */
static uint32_t r2t_got(uint32_t off, uint32_t len)
{
	uint32_t ttt;

	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_R2T);
	CU_ASSERT_EQUAL(bhs_w40(&got[0].bhs), off);
	CU_ASSERT_EQUAL(bhs_w44(&got[0].bhs), len);
	ttt = bhs_w20(&got[0].bhs);
	ngot = 0;
	return ttt;
}

/* got holds one PDU, a SCSI Response with status GOOD (kept for more checks). */
static void good_rsp_got(void)
{
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_SCSI_RSP);
	CU_ASSERT_EQUAL(got[0].bhs.b[3], HL_SAM_GOOD);
}

static void test_write_r2t(void)
{
	uint8_t buf[32768];

	for (unsigned i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i ^ (i >> 8));
	setup();
	login_ok(NULL); /* InitialR2T=Yes, MaxBurstLength 16384, MaxOutstandingR2T 2 */
	memset(last_write, 0, sizeof(last_write));
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_WRITE, 0x2a, 32768 + 8192, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 2);
	for (int i = 0; i < 2; i++) {
		CU_ASSERT_EQUAL(bhs_opcode(&got[i].bhs), ISCSI_OP_R2T);
		CU_ASSERT_EQUAL(bhs_w36(&got[i].bhs), (uint32_t)i);         /* R2TSN */
		CU_ASSERT_EQUAL(bhs_w40(&got[i].bhs), (uint32_t)i * 16384); /* offset */
		CU_ASSERT_EQUAL(bhs_w44(&got[i].bhs), 16384);               /* desired length */
	}
	uint32_t ttt0 = bhs_w20(&got[0].bhs), ttt1 = bhs_w20(&got[1].bhs);
	CU_ASSERT_NOT_EQUAL(ttt0, ttt1);
	ngot = 0;
	/* answer the second R2T first, in two PDUs of 8 KiB (MaxRecvDSL) */
	data_out(ttt1, 0, 16384, buf + 16384, 8192, false);
	data_out(ttt1, 1, 24576, buf + 24576, 8192, true);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1); /* the freed slot is used for the rest */
	CU_ASSERT_EQUAL(bhs_w36(&got[0].bhs), 2); /* R2TSN */
	uint32_t ttt2 = r2t_got(32768, 8192);
	data_out(ttt0, 0, 0, buf, 8192, false);
	data_out(ttt0, 1, 8192, buf + 8192, 8192, true);
	data_out(ttt2, 0, 32768, buf, 8192, true);
	pump();
	good_rsp_got();
	CU_ASSERT_EQUAL(last_write_len, 32768 + 8192);
	CU_ASSERT_EQUAL(memcmp(last_write, buf, 32768), 0);
	CU_ASSERT_EQUAL(memcmp(last_write + 32768, buf, 8192), 0);
	teardown();
}

static void test_write_immediate_unsolicited(void)
{
	uint8_t buf[16384];

	for (unsigned i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 13);
	setup();
	login_ok("MaxRecvDataSegmentLength=8192|InitialR2T=No|ImmediateData=Yes|"
	         "MaxBurstLength=16384|FirstBurstLength=8192|MaxOutstandingR2T=1");
	/* this target prefers InitialR2T=Yes (an OR key); force No to exercise unsolicited data */
	conn->params.initial_r2t = false;
	/* 4 KiB immediate + 4 KiB unsolicited (F=0 on the command), rest by R2T */
	scsi_cmd(ISCSI_CMD_WRITE, 0x2a, 16384, buf, 4096);
	pump();
	CU_ASSERT_EQUAL(ngot, 0);
	data_out(ISCSI_RSVD_TAG, 0, 4096, buf + 4096, 4096, true);
	pump();
	uint32_t ttt = r2t_got(8192, 8192);
	data_out(ttt, 0, 8192, buf + 8192, 8192, true);
	pump();
	good_rsp_got();
	CU_ASSERT_EQUAL(memcmp(last_write, buf, 16384), 0);
	teardown();
}

/* An immediate NOP-Out ping; @return the NOP-In's MaxCmdSN minus its ExpCmdSN, plus 1 (the window). */
static int32_t ping_window(void)
{
	struct iscsi_bhs h;

	memset(&h, 0, sizeof(h));
	h.b[0] = ISCSI_OP_NOP_OUT | ISCSI_FLAG_IMMEDIATE;
	h.b[1] = ISCSI_FLAG_FINAL;
	bhs_set_itt(&h, 0x7777);
	bhs_put32(&h, 20, ISCSI_RSVD_TAG);
	bhs_put32(&h, 24, cmdsn);
	bhs_put32(&h, 28, expstatsn);
	ngot = 0;
	send_pdu(&h, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_NOP_IN);
	int32_t w = (int32_t)(bhs_w32(&got[0].bhs) - bhs_w28(&got[0].bhs)) + 1;
	ngot = 0;
	return w;
}

/* The one task of the connection still collecting data, or NULL. */
static struct iscsi_task *dout_task(void)
{
	struct iscsi_task *t, *w = NULL;

	hl_list_for_each_entry(t, &conn->tasks, link) if (t->state == TASK_DATA_OUT) w = t;
	return w;
}

/* Write budget taken by a WRITE of another host (10.0.0.n) than the test's connection. */
static enum iscsi_wb_verdict hog_admit(struct iscsi_wb_claim *cl, unsigned n, uint64_t need)
{
	struct iscsi_source k;

	memset(&k, 0, sizeof(k));
	k.b[0] = 2; /* AF_INET */
	k.b[1] = 10;
	k.b[4] = (uint8_t)n;
	return iscsi_wb_admit(&srv->wb, cl, &k, 0, need, 0, hl_now_ns(), NULL);
}

static void test_write_budget(void)
{
	uint8_t buf[32768];
	struct iscsi_wb_claim hog1 = {0}, hog2 = {0};
	struct hl_iscsi_write_stats ws;

	for (unsigned i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 7);
	setup();
	hl_iscsi_server_set_write_limit(srv, 32u << 20);
	login_ok(NULL); /* InitialR2T=Yes, ImmediateData=Yes, FirstBurstLength 8192 */
	/* other connections hold the whole budget */
	CU_ASSERT_EQUAL(hog_admit(&hog1, 1, 16u << 20), ISCSI_WB_GO);
	CU_ASSERT_EQUAL(hog_admit(&hog2, 2, 16u << 20), ISCSI_WB_GO);
	/* immediate data with no room for it: refused, no R2T (BUSY: no other command here) */
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_WRITE, 0x2a, 8192, buf, 4096);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_SCSI_RSP);
	CU_ASSERT_EQUAL(got[0].bhs.b[3], HL_SAM_BUSY);
	ngot = 0;
	itt++;
	/* a write whose data all comes by R2T waits for the budget: no R2T yet */
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_WRITE, 0x2a, 32768, NULL, 0);
	pump();
	CU_ASSERT_EQUAL(ngot, 0);
	CU_ASSERT_TRUE(hl_timer_pending(&conn->wb_timer));
	hl_iscsi_write_stats(srv, &ws);
	CU_ASSERT_EQUAL(ws.waiting, 1);
	CU_ASSERT_EQUAL(ws.r2t_deferred, 1);
	CU_ASSERT_EQUAL(ws.task_set_full, 1);
	CU_ASSERT_EQUAL(ws.held, 32u << 20);
	/* meanwhile the connection is advertised no new command slots */
	CU_ASSERT_EQUAL(ping_window(), 0);
	conn->wb_timer.fn(&conn->wb_timer); /* still no room */
	pump();
	CU_ASSERT_EQUAL(ngot, 0);
	/* budget comes back: the retry sends the R2Ts; the WRITE's deadline starts now */
	iscsi_wb_release(&srv->wb, &hog1);
	uint64_t granted = hl_now_ns();
	conn->wb_timer.fn(&conn->wb_timer);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 2);
	CU_ASSERT_PTR_NOT_NULL_FATAL(dout_task());
	CU_ASSERT(dout_task()->wb_since_ns >= granted);
	CU_ASSERT_EQUAL(dout_task()->wb_deadline_ns - dout_task()->wb_since_ns,
	                iscsi_wb_deadline_ns(32768));
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_R2T);
	CU_ASSERT_EQUAL(bhs_opcode(&got[1].bhs), ISCSI_OP_R2T);
	uint32_t ttt0 = bhs_w20(&got[0].bhs), ttt1 = bhs_w20(&got[1].bhs);
	ngot = 0;
	data_out(ttt0, 0, 0, buf, 8192, false);
	data_out(ttt0, 1, 8192, buf + 8192, 8192, true);
	data_out(ttt1, 0, 16384, buf + 16384, 8192, false);
	data_out(ttt1, 1, 24576, buf + 24576, 8192, true);
	pump();
	good_rsp_got();
	CU_ASSERT_EQUAL(memcmp(last_write, buf, 32768), 0);
	/* its response reopened the window; only hog2 is held */
	CU_ASSERT(ping_window() > 1);
	hl_iscsi_write_stats(srv, &ws);
	CU_ASSERT_EQUAL(ws.waiting, 0);
	CU_ASSERT_EQUAL(ws.held, 16u << 20);
	CU_ASSERT_EQUAL(conn->wb_promised, 0);
	iscsi_wb_release(&srv->wb, &hog2);
	teardown();
}

static void test_write_budget_unsolicited_waits(void)
{
	uint8_t buf[16384];
	struct iscsi_wb_claim hog = {0}, hog2 = {0};
	struct hl_iscsi_write_stats ws;

	for (unsigned i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 31 + 5);
	setup();
	hl_iscsi_server_set_write_limit(srv, 32u << 20);
	login_ok("MaxRecvDataSegmentLength=8192|InitialR2T=No|ImmediateData=Yes|"
	         "MaxBurstLength=16384|FirstBurstLength=8192|MaxOutstandingR2T=1");
	conn->params.initial_r2t = false;
	/* 8 KiB left: room for the 8 KiB that comes unasked, not for the 16 KiB write */
	CU_ASSERT_EQUAL(hog_admit(&hog, 1, 16u << 20), ISCSI_WB_GO);
	CU_ASSERT_EQUAL(hog_admit(&hog2, 2, (16u << 20) - 8192), ISCSI_WB_GO);
	scsi_cmd(ISCSI_CMD_WRITE, 0x2a, 16384, buf, 4096);
	data_out(ISCSI_RSVD_TAG, 0, 4096, buf + 4096, 4096, true);
	pump();
	CU_ASSERT_EQUAL(ngot, 0); /* its unsolicited data is taken, no R2T for the rest */
	hl_iscsi_write_stats(srv, &ws);
	CU_ASSERT_EQUAL(ws.waiting, 1);
	CU_ASSERT_EQUAL(ws.waiting_bytes, 8192);
	CU_ASSERT_TRUE(conn->buf_bytes < 16384); /* a buffer for what came, not the transfer */
	iscsi_wb_release(&srv->wb, &hog);
	conn->wb_timer.fn(&conn->wb_timer);
	pump();
	uint32_t ttt = r2t_got(8192, 8192);
	data_out(ttt, 0, 8192, buf + 8192, 8192, true);
	pump();
	good_rsp_got();
	CU_ASSERT_EQUAL(last_write_len, 16384);
	CU_ASSERT_EQUAL(memcmp(last_write, buf, 16384), 0); /* what came first was moved along */
	iscsi_wb_release(&srv->wb, &hog2);
	hl_iscsi_write_stats(srv, &ws);
	CU_ASSERT_EQUAL(ws.held, 0);
	teardown();
}

static void test_write_budget_conn_close(void)
{
	struct iscsi_wb_claim hog = {0};
	struct hl_iscsi_write_stats ws;

	setup();
	hl_iscsi_server_set_write_limit(srv, 32u << 20);
	login_ok(NULL);
	CU_ASSERT_EQUAL(hog_admit(&hog, 1, 16u << 20), ISCSI_WB_GO);
	/* one write granted (16 MiB, its data never comes), one waiting */
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_WRITE, 0x2a, 16u << 20, NULL, 0);
	itt++;
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_WRITE, 0x2a, 1u << 20, NULL, 0);
	pump();
	hl_iscsi_write_stats(srv, &ws);
	CU_ASSERT_EQUAL(ws.held, 32u << 20);
	CU_ASSERT_EQUAL(ws.waiting, 0); /* its connection is at its cap: TASK SET FULL */
	CU_ASSERT_EQUAL(ws.task_set_full, 1);
	iscsi_wb_release(&srv->wb, &hog);
	/* the connection goes: what it held comes back */
	iscsi_conn_close(conn, "test");
	hl_iscsi_write_stats(srv, &ws);
	CU_ASSERT_EQUAL(ws.held, 0);
	CU_ASSERT_EQUAL(ws.peak, 32u << 20);
	teardown();
}

static void test_data_out_errors(void)
{
	uint8_t buf[8192] = {0};

	setup();
	login_ok(NULL);
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_WRITE, 0x2a, 8192, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	uint32_t ttt = bhs_w20(&got[0].bhs);
	ngot = 0;
	data_out(ttt, 5, 0, buf, 4096, false); /* wrong DataSN */
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_REJECT);
	CU_ASSERT_EQUAL(got[0].bhs.b[2], ISCSI_REJECT_PROTOCOL_ERROR);
	CU_ASSERT_EQUAL(got[0].dsl, ISCSI_BHS_LEN);
	ngot = 0;
	/* the task is gone: more data for it is dropped silently */
	data_out(ttt, 1, 4096, buf, 4096, true);
	pump();
	CU_ASSERT_EQUAL(ngot, 0);
	CU_ASSERT_EQUAL(conn->nactive, 0);
	/* the session still works */
	itt++;
	scsi_cmd(ISCSI_FLAG_FINAL, 0x00, 0, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_SCSI_RSP);
	teardown();
}

static void test_cmdsn_window(void)
{
	setup();
	login_ok(NULL);
	uint32_t exp = cmdsn;
	cmdsn = exp + 5; /* ahead of ExpCmdSN: dropped */
	scsi_cmd(ISCSI_FLAG_FINAL, 0x00, 0, NULL, 0);
	cmdsn = exp - 1; /* behind: dropped */
	itt++;
	scsi_cmd(ISCSI_FLAG_FINAL, 0x00, 0, NULL, 0);
	pump();
	CU_ASSERT_EQUAL(ngot, 0);
	cmdsn = exp;
	itt++;
	scsi_cmd(ISCSI_FLAG_FINAL, 0x00, 0, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_w28(&got[0].bhs), exp + 1);                         /* ExpCmdSN */
	CU_ASSERT_EQUAL(bhs_w32(&got[0].bhs), exp + 1 + ISCSI_QUEUE_DEPTH - 1); /* MaxCmdSN */
	/* commands held by the scsi layer narrow the window */
	ngot = 0;
	defer_exec = true;
	itt++;
	scsi_cmd(ISCSI_FLAG_FINAL, 0x00, 0, NULL, 0);
	/* an immediate NOP-Out does not consume a CmdSN and is answered while I/O is stalled */
	struct iscsi_bhs h;
	memset(&h, 0, sizeof(h));
	h.b[0] = ISCSI_OP_NOP_OUT | ISCSI_FLAG_IMMEDIATE;
	h.b[1] = ISCSI_FLAG_FINAL;
	bhs_set_itt(&h, ++itt);
	bhs_put32(&h, 20, ISCSI_RSVD_TAG);
	bhs_put32(&h, 24, cmdsn);
	send_pdu(&h, "ping", 4);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_NOP_IN);
	CU_ASSERT_EQUAL(bhs_itt(&got[0].bhs), itt);
	CU_ASSERT_EQUAL(got[0].dsl, 4);
	CU_ASSERT_EQUAL(memcmp(got[0].data, "ping", 4), 0);
	CU_ASSERT_EQUAL(bhs_w28(&got[0].bhs), exp + 2);
	CU_ASSERT_EQUAL(bhs_w32(&got[0].bhs), exp + 2 + ISCSI_QUEUE_DEPTH - 2);
	CU_ASSERT_EQUAL(npending, 1);
	ngot = 0;
	fake_complete(pending[--npending]);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_SCSI_RSP);
	teardown();
}

static void test_cmdsn_window_full(void)
{
	setup();
	login_ok(NULL);
	defer_exec = true;
	for (int i = 0; i < ISCSI_QUEUE_DEPTH - 1; i++) {
		scsi_cmd(ISCSI_FLAG_FINAL, 0x00, 0, NULL, 0);
		itt++;
	}
	/* the last slot taken by a write with immediate data (counted once, not twice) */
	static const uint8_t blk[512];
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_WRITE, 0x2a, 512, blk, 512);
	itt++;
	pump();
	CU_ASSERT_EQUAL(npending, ISCSI_QUEUE_DEPTH);
	/* the window is closed: MaxCmdSN = ExpCmdSN - 1, one more command is dropped */
	scsi_cmd(ISCSI_FLAG_FINAL, 0x00, 0, NULL, 0);
	itt++;
	struct iscsi_bhs h;
	memset(&h, 0, sizeof(h));
	h.b[0] = ISCSI_OP_NOP_OUT | ISCSI_FLAG_IMMEDIATE;
	h.b[1] = ISCSI_FLAG_FINAL;
	bhs_set_itt(&h, itt);
	bhs_put32(&h, 20, ISCSI_RSVD_TAG);
	bhs_put32(&h, 24, cmdsn);
	send_pdu(&h, NULL, 0);
	pump();
	CU_ASSERT_EQUAL(npending, ISCSI_QUEUE_DEPTH);
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_NOP_IN);
	uint32_t exp = bhs_w28(&got[0].bhs);
	CU_ASSERT_EQUAL(exp, cmdsn - 1); /* the dropped command did not count */
	CU_ASSERT_EQUAL(bhs_w32(&got[0].bhs), exp - 1);
	/* one completion reopens the window by one */
	ngot = 0;
	fake_complete(pending[0]);
	memmove(pending, pending + 1, (size_t)(--npending) * sizeof(pending[0]));
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_w32(&got[0].bhs), exp);
	teardown();
}

/*
 * An initiator that behaves like libiscsi 1.19 (Write10.Async): it keeps the highest
 * MaxCmdSN it has seen (RFC 7143 4.2.2.1: a lower one is ignored), sends every command
 * whose CmdSN is within it and queues the rest. 600 commands, mostly 4 KiB writes with
 * all their data immediate, against an LU that completes them late and out of order.
 * No command may be dropped: each is answered, MaxCmdSN never goes back and ExpCmdSN ends
 * one past the last CmdSN. Before the fix a write with immediate data that arrived in the
 * last free slot was counted before its CmdSN was checked, fell outside its own window,
 * was dropped, and every later command queued behind the gap forever.
 */
static void test_cmdsn_window_initiator_model(void)
{
	static uint8_t blk[4096];
	const int total = 600;
	int sent = 0, done = 0, stalls = 0, max_pending = 0;
	unsigned seed = 12345;

	setup();
	login_ok(NULL);
	uint32_t maxsn = bhs_w32(&got[0].bhs); /* the Login Response's MaxCmdSN */
	uint32_t first = cmdsn;
	defer_exec = true;
	while (done < total) {
		int progress = 0;
		/* send what the window allows, a few at a time so the socketpair never fills */
		for (int burst = 0; burst < 16 && sent < total && sn_le(cmdsn, maxsn); burst++) {
			if (sent % 5 == 4)
				scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_READ, 0x28, 4096, NULL, 0);
			else if (sent % 7 == 6)
				scsi_cmd(ISCSI_FLAG_FINAL, 0x00, 0, NULL, 0);
			else
				scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_WRITE, 0x2a, 4096, blk, 4096);
			itt++;
			sent++;
			progress++;
		}
		pump();
		max_pending = HL_MAX(max_pending, npending);
		/* the slow LU completes a few commands, not in arrival order */
		seed = seed * 1103515245u + 12345u;
		int n = npending ? (int)(seed >> 16) % 6 + (sent == total ? 8 : 1) : 0;
		for (int i = 0; i < n && npending; i++) {
			seed = seed * 1103515245u + 12345u;
			int k = (int)((seed >> 16) % (unsigned)npending);
			struct hl_scsi_cmd *cmd = pending[k];
			memmove(pending + k, pending + k + 1,
			        (size_t)(npending - k - 1) * sizeof(pending[0]));
			npending--;
			fake_complete(cmd);
			progress++;
		}
		pump();
		for (int i = 0; i < ngot; i++) {
			const struct iscsi_bhs *b = &got[i].bhs;
			uint32_t m = bhs_w32(b);
			uint8_t op = bhs_opcode(b);
			CU_ASSERT_TRUE(sn_le(maxsn, m)); /* MaxCmdSN never decreases */
			if (sn_lt(maxsn, m))
				maxsn = m;
			if (op == ISCSI_OP_SCSI_RSP ||
			    (op == ISCSI_OP_DATA_IN && (b->b[1] & ISCSI_DATAIN_STATUS)))
				done++;
			else if (op != ISCSI_OP_DATA_IN)
				CU_FAIL("unexpected PDU");
		}
		ngot = 0;
		if (!progress && ++stalls > 3) {
			CU_FAIL("initiator stalled: a command in the window was dropped");
			break;
		}
	}
	CU_ASSERT_EQUAL(done, total);
	CU_ASSERT_EQUAL(npending, 0);
	CU_ASSERT_EQUAL(max_pending, ISCSI_QUEUE_DEPTH); /* the window was really filled */
	CU_ASSERT_EQUAL(conn->sess->exp_cmd_sn, first + (uint32_t)total);
	CU_ASSERT_EQUAL(conn->nactive, 0);
	teardown();
}

/*
 * MaxCmdSN is a promise: once advertised, a command up to it is accepted even if the free
 * slots were to say otherwise (the initiator ignores a lower MaxCmdSN). White-box: slots are
 * taken behind the window's back, as an accounting slip would.
 */
static void test_cmdsn_window_promise(void)
{
	setup();
	login_ok(NULL);
	scsi_cmd(ISCSI_FLAG_FINAL, 0x00, 0, NULL, 0);
	itt++;
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	uint32_t max = bhs_w32(&got[0].bhs);
	CU_ASSERT_EQUAL(max, cmdsn + ISCSI_QUEUE_DEPTH - 1);
	ngot = 0;
	conn->nactive += 10;
	CU_ASSERT_TRUE(sn_lt(iscsi_conn_max_cmd_sn(conn), max));
	CU_ASSERT_EQUAL(iscsi_conn_window_end(conn), max);
	defer_exec = true;
	while (sn_le(cmdsn, max)) {
		for (int i = 0; i < 16 && sn_le(cmdsn, max); i++) {
			scsi_cmd(ISCSI_FLAG_FINAL, 0x00, 0, NULL, 0);
			itt++;
		}
		pump();
	}
	CU_ASSERT_EQUAL(npending, ISCSI_QUEUE_DEPTH);
	CU_ASSERT_EQUAL(conn->sess->exp_cmd_sn, max + 1);
	/* one past the promise is still dropped */
	scsi_cmd(ISCSI_FLAG_FINAL, 0x00, 0, NULL, 0);
	itt++;
	pump();
	CU_ASSERT_EQUAL(npending, ISCSI_QUEUE_DEPTH);
	CU_ASSERT_EQUAL(conn->sess->exp_cmd_sn, max + 1);
	conn->nactive -= 10;
	while (npending) {
		for (int i = 0; i < 32 && npending; i++)
			fake_complete(pending[--npending]);
		pump();
		ngot = 0;
	}
	CU_ASSERT_EQUAL(conn->nactive, 0);
	teardown();
}

static void test_reject_and_digests(void)
{
	setup();
	login_ok("MaxRecvDataSegmentLength=8192|HeaderDigest=CRC32C|DataDigest=CRC32C");
	CU_ASSERT_TRUE(conn->params.header_digest && conn->params.data_digest);
	rx_hd = rx_dd = true;
	rcv.header_digest = rcv.data_digest = true;
	struct iscsi_bhs h;
	memset(&h, 0, sizeof(h));
	h.b[0] = 0x1c; /* not an initiator opcode */
	h.b[1] = ISCSI_FLAG_FINAL;
	bhs_set_itt(&h, itt);
	send_pdu(&h, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_REJECT);
	CU_ASSERT_EQUAL(got[0].bhs.b[2], ISCSI_REJECT_CMD_NOT_SUPPORTED);
	CU_ASSERT_EQUAL(got[0].data[0], 0x1c);
	/* a read works with both digests */
	ngot = 0;
	itt++;
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_READ, 0x28, 1000, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(got[0].dsl, 1000);
	/* a corrupt header digest loses framing: the connection goes */
	ngot = 0;
	rx_hd = false;
	memset(&h, 0, sizeof(h));
	h.b[0] = ISCSI_OP_NOP_OUT | ISCSI_FLAG_IMMEDIATE;
	send_pdu(&h, NULL, 0);
	send_raw("\x01\x02\x03\x04", 4);
	pump();
	CU_ASSERT_FALSE(conn_alive());
	teardown();
}

/*
 * A data digest error discards the PDU (Reject 0x02). An immediate PDU takes no CmdSN and the
 * connection stays; a command at ExpCmdSN would leave a CmdSN hole every later command waits
 * behind, so at ERL 0 the connection closes after the Reject (and the write is not executed).
 */
static void test_digest_error_cmdsn_gap(void)
{
	static const uint8_t blk[512] = {0x5a};
	struct iscsi_bhs h;

	setup();
	login_ok("MaxRecvDataSegmentLength=8192|HeaderDigest=CRC32C|DataDigest=CRC32C");
	rx_hd = rx_dd = true;
	rcv.header_digest = rcv.data_digest = true;
	memset(&h, 0, sizeof(h));
	h.b[0] = ISCSI_OP_NOP_OUT | ISCSI_FLAG_IMMEDIATE;
	h.b[1] = ISCSI_FLAG_FINAL;
	bhs_set_itt(&h, itt);
	bhs_put32(&h, 20, ISCSI_RSVD_TAG);
	bhs_put32(&h, 24, cmdsn);
	rx_dd = false;
	send_pdu(&h, "ping", 4);
	send_raw("\x01\x02\x03\x04", 4); /* wrong data digest */
	rx_dd = true;
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_REJECT);
	CU_ASSERT_EQUAL(got[0].bhs.b[2], ISCSI_REJECT_DATA_DIGEST);
	CU_ASSERT_TRUE_FATAL(conn_alive());
	CU_ASSERT_EQUAL(conn->sess->exp_cmd_sn, cmdsn);
	ngot = 0;
	itt++;
	last_write_len = 0;
	rx_dd = false;
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_WRITE, 0x2a, 512, blk, 512);
	send_raw("\x01\x02\x03\x04", 4);
	rx_dd = true;
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_REJECT);
	CU_ASSERT_EQUAL(got[0].bhs.b[2], ISCSI_REJECT_DATA_DIGEST);
	CU_ASSERT_EQUAL(last_write_len, 0);
	CU_ASSERT_FALSE(conn_alive());
	teardown();
}

static void test_tmf_abort_waits(void)
{
	setup();
	login_ok(NULL);
	defer_exec = true;
	uint32_t victim = itt;
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_READ, 0x28, 4096, NULL, 0);
	pump();
	CU_ASSERT_EQUAL(npending, 1);
	struct iscsi_bhs h;
	tmf_req(&h, ISCSI_TMF_ABORT_TASK, victim);
	send_pdu(&h, NULL, 0);
	pump();
	CU_ASSERT_EQUAL(ngot, 0); /* the task is still in the scsi layer */
	fake_complete(pending[--npending]);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1); /* only the TMF response: the read's data is discarded */
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_TMF_RSP);
	CU_ASSERT_EQUAL(got[0].bhs.b[2], ISCSI_TMF_RSP_COMPLETE);
	/* an unknown task */
	ngot = 0;
	bhs_set_itt(&h, ++itt);
	bhs_put32(&h, 20, 0xabcdef);
	send_pdu(&h, NULL, 0);
	/* LUN reset with nothing running completes at once and resets the LU */
	h.b[1] = ISCSI_FLAG_FINAL | ISCSI_TMF_LUN_RESET;
	bhs_set_itt(&h, ++itt);
	send_pdu(&h, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 2);
	CU_ASSERT_EQUAL(got[0].bhs.b[2], ISCSI_TMF_RSP_NO_TASK);
	CU_ASSERT_EQUAL(got[1].bhs.b[2], ISCSI_TMF_RSP_COMPLETE);
	CU_ASSERT_EQUAL(lu_resets, 1);
	teardown();
}

static void test_logout(void)
{
	setup();
	login_ok(NULL);
	struct iscsi_bhs h;
	memset(&h, 0, sizeof(h));
	h.b[0] = ISCSI_OP_LOGOUT_REQ | ISCSI_FLAG_IMMEDIATE;
	h.b[1] = ISCSI_FLAG_FINAL | ISCSI_LOGOUT_CLOSE_SESSION;
	bhs_set_itt(&h, itt);
	bhs_put32(&h, 24, cmdsn);
	send_pdu(&h, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_LOGOUT_RSP);
	CU_ASSERT_EQUAL(got[0].bhs.b[2], ISCSI_LOGOUT_RSP_OK);
	CU_ASSERT_FALSE(conn_alive());
	teardown();
}

/*
 * A closing Logout with a command still in the scsi layer: the Logout
 * Response waits for that command's status, which comes first, with the
 * StatSN before the logout's; then the connection closes.
 */
static void test_logout_waits_for_commands(void)
{
	setup();
	login_ok(NULL);
	defer_exec = true;
	scsi_cmd(ISCSI_FLAG_FINAL, 0x00, 0, NULL, 0); /* TEST UNIT READY, held by the fake */
	pump();
	CU_ASSERT_EQUAL_FATAL(npending, 1);
	CU_ASSERT_EQUAL(ngot, 0);
	itt++;
	cmdsn++;
	struct iscsi_bhs h;
	memset(&h, 0, sizeof(h));
	h.b[0] = ISCSI_OP_LOGOUT_REQ | ISCSI_FLAG_IMMEDIATE;
	h.b[1] = ISCSI_FLAG_FINAL | ISCSI_LOGOUT_CLOSE_SESSION;
	bhs_set_itt(&h, itt);
	bhs_put32(&h, 24, cmdsn);
	send_pdu(&h, NULL, 0);
	pump();
	CU_ASSERT_EQUAL(ngot, 0); /* no Logout Response while the command runs */
	CU_ASSERT_TRUE(conn_alive());
	fake_complete(pending[--npending]);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 2);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_SCSI_RSP);
	CU_ASSERT_EQUAL(bhs_opcode(&got[1].bhs), ISCSI_OP_LOGOUT_RSP);
	CU_ASSERT_EQUAL(got[1].bhs.b[2], ISCSI_LOGOUT_RSP_OK);
	CU_ASSERT_EQUAL(bhs_w24(&got[1].bhs), bhs_w24(&got[0].bhs) + 1); /* StatSN order */
	CU_ASSERT_FALSE(conn_alive());
	teardown();
}

/* The Async Message asking for a logout: event 1, Parameter3, the next StatSN. */
static void test_request_logout(void)
{
	setup();
	login_ok(NULL);
	CU_ASSERT_EQUAL(iscsi_conn_request_logout(conn, 7), 0);
	iscsi_conn_flush(conn);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_ASYNC_MSG);
	CU_ASSERT_EQUAL(got[0].bhs.b[36], ISCSI_ASYNC_LOGOUT_REQUEST);
	CU_ASSERT_EQUAL(hl_get_be16(&got[0].bhs.b[42]), 7);
	CU_ASSERT_EQUAL(bhs_itt(&got[0].bhs), 0xffffffffu);
	CU_ASSERT_TRUE(conn_alive());
	teardown();
}

static void test_text_continuation(void)
{
	struct iscsi_portal fake[30];

	setup();
	/* portals put straight into the list (no listening socket needed) */
	memset(fake, 0, sizeof(fake));
	for (int i = 0; i < 30; i++) {
		struct sockaddr_in *sin = (struct sockaddr_in *)&fake[i].addr;
		sin->sin_family = AF_INET;
		sin->sin_port = htons(3260);
		sin->sin_addr.s_addr = htonl(0x0a000001 + (uint32_t)i);
		fake[i].tpgt = 1;
		hl_list_add_tail(&srv->portals, &fake[i].link);
	}
	/* a small MaxRecvDataSegmentLength makes the SendTargets answer span PDUs */
	login_ok("MaxRecvDataSegmentLength=512");
	struct iscsi_bhs h;
	uint8_t data[64];
	size_t n = kv(data, "SendTargets=All");
	memset(&h, 0, sizeof(h));
	h.b[0] = ISCSI_OP_TEXT_REQ | ISCSI_FLAG_IMMEDIATE;
	h.b[1] = ISCSI_FLAG_FINAL;
	bhs_set_itt(&h, itt);
	bhs_put32(&h, 20, ISCSI_RSVD_TAG);
	send_pdu(&h, data, (uint32_t)n);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(got[0].bhs.b[1], ISCSI_TEXT_CONTINUE);
	CU_ASSERT_EQUAL(got[0].dsl, 512);
	uint32_t ttt = bhs_w20(&got[0].bhs);
	CU_ASSERT_NOT_EQUAL(ttt, ISCSI_RSVD_TAG);
	/* a normal session only sees its own target */
	CU_ASSERT_TRUE(has_kv(&got[0], "TargetName=" TGT));
	CU_ASSERT_FALSE(has_kv(&got[0], "TargetName=" TGT_CHAP));
	CU_ASSERT_TRUE(has_kv(&got[0], "TargetAddress=10.0.0.1:3260,1"));
	ngot = 0;
	bhs_put32(&h, 20, ttt);
	send_pdu(&h, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(got[0].bhs.b[1], ISCSI_FLAG_FINAL);
	CU_ASSERT_EQUAL(bhs_w20(&got[0].bhs), ISCSI_RSVD_TAG);
	CU_ASSERT_TRUE(got[0].dsl > 0 && got[0].dsl < 512);
	hl_list_init(&srv->portals);
	/* keys in FFP: MaxRecvDataSegmentLength may be redeclared; others are refused */
	ngot = 0;
	n = kv(data, "MaxRecvDataSegmentLength=4096|InitialR2T=No|X-foo=1");
	bhs_set_itt(&h, ++itt);
	bhs_put32(&h, 20, ISCSI_RSVD_TAG);
	send_pdu(&h, data, (uint32_t)n);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(conn->params.max_recv_dsl_initiator, 4096);
	CU_ASSERT_TRUE(has_kv(&got[0], "InitialR2T=Reject"));
	CU_ASSERT_TRUE(has_kv(&got[0], "X-foo=NotUnderstood"));
	teardown();
}

static void test_nop_ping(void)
{
	setup();
	srv->nop_interval_s = 5;
	srv->nop_timeout_s = 10;
	login_ok(NULL);
	CU_ASSERT_TRUE(hl_timer_pending(&conn->nop_timer));
	/* idle long enough: the target pings */
	conn->last_rx_ns = hl_now_ns() - 6000000000ull;
	conn->nop_timer.fn(&conn->nop_timer);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_NOP_IN);
	CU_ASSERT_EQUAL(bhs_itt(&got[0].bhs), ISCSI_RSVD_TAG);
	uint32_t ttt = bhs_w20(&got[0].bhs);
	CU_ASSERT_NOT_EQUAL(ttt, ISCSI_RSVD_TAG);
	CU_ASSERT_EQUAL(bhs_w24(&got[0].bhs), expstatsn); /* StatSN not advanced by a ping */
	CU_ASSERT_TRUE(conn->nop_outstanding);
	/* the initiator answers: NOP-Out with ITT ffffffff and the ping's TTT, no reply to it */
	struct iscsi_bhs h;
	memset(&h, 0, sizeof(h));
	h.b[0] = ISCSI_OP_NOP_OUT | ISCSI_FLAG_IMMEDIATE;
	h.b[1] = ISCSI_FLAG_FINAL;
	bhs_set_itt(&h, ISCSI_RSVD_TAG);
	bhs_put32(&h, 20, ttt);
	bhs_put32(&h, 24, cmdsn);
	ngot = 0;
	send_pdu(&h, NULL, 0);
	pump();
	CU_ASSERT_EQUAL(ngot, 0);
	CU_ASSERT_FALSE(conn->nop_outstanding);
	/* a ping that stays unanswered past the timeout drops the connection */
	conn->last_rx_ns = hl_now_ns() - 6000000000ull;
	conn->nop_timer.fn(&conn->nop_timer);
	pump();
	CU_ASSERT_TRUE(conn->nop_outstanding);
	conn->nop_sent_ns = hl_now_ns() - 11000000000ull;
	conn->nop_timer.fn(&conn->nop_timer);
	CU_ASSERT_FALSE(conn_alive());
	teardown();
}

/*
 * The rest of a discovery login that chose CHAP, as user "disc" with secret
 * "discsecret12": CHAP_A, then the answer to the target's challenge.
 * @return the final Login Response's status.
 */
static int discovery_chap_answer(void)
{
	uint8_t ch[64], rsp[16];
	char hex[64], spec[256];

	ngot = 0;
	login_pdu(0, "CHAP_A=5");
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	const char *id_s = get_kv(&got[0], "CHAP_I"), *c_s = get_kv(&got[0], "CHAP_C");
	CU_ASSERT_FATAL(id_s && c_s);
	int clen = iscsi_chap_decode(c_s, ch, sizeof(ch));
	iscsi_chap_compute(ISCSI_CHAP_MD5, (uint8_t)atoi(id_s), "discsecret12", ch, (size_t)clen,
	                   rsp);
	iscsi_chap_encode_hex(rsp, 16, hex, sizeof(hex));
	snprintf(spec, sizeof(spec), "CHAP_N=disc|CHAP_R=%s", hex);
	ngot = 0;
	login_pdu(ISCSI_LOGIN_TRANSIT | (0 << 2) | 3, spec);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	return login_status(&got[0]);
}

static void test_discovery_chap(void)
{
	setup();
	hl_strlcpy(srv->discovery_chap.user, "disc", sizeof(srv->discovery_chap.user));
	hl_strlcpy(srv->discovery_chap.secret, "discsecret12", sizeof(srv->discovery_chap.secret));
	login_pdu(ISCSI_LOGIN_TRANSIT | (0 << 2) | 1,
	          "InitiatorName=" INI "|SessionType=Discovery|AuthMethod=None");
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(login_status(&got[0]), ISCSI_LOGIN_AUTH_FAILED);
	teardown();

	setup();
	hl_strlcpy(srv->discovery_chap.user, "disc", sizeof(srv->discovery_chap.user));
	hl_strlcpy(srv->discovery_chap.secret, "discsecret12", sizeof(srv->discovery_chap.secret));
	login_pdu(ISCSI_LOGIN_TRANSIT | (0 << 2) | 1,
	          "InitiatorName=" INI "|SessionType=Discovery|AuthMethod=CHAP");
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_TRUE(has_kv(&got[0], "AuthMethod=CHAP"));
	CU_ASSERT_EQUAL(discovery_chap_answer(), 0);
	CU_ASSERT_EQUAL(conn->state, CONN_FFP);
	CU_ASSERT_EQUAL(conn->sess->type, ISCSI_SESSION_DISCOVERY);
	teardown();
}

/*
 * Discovery CHAP changed while the server runs: a login under way keeps the
 * credentials it started with, a login that starts afterwards gets the new.
 */
static void test_discovery_chap_change(void)
{
	struct hl_iscsi_chap on = {0}, off = {0};

	hl_strlcpy(on.user, "disc", sizeof(on.user));
	hl_strlcpy(on.secret, "discsecret12", sizeof(on.secret));
	setup();
	hl_iscsi_server_set_discovery_chap(srv, &on);
	login_pdu(ISCSI_LOGIN_TRANSIT | (0 << 2) | 1,
	          "InitiatorName=" INI "|SessionType=Discovery|AuthMethod=CHAP,None");
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_TRUE(has_kv(&got[0], "AuthMethod=CHAP"));
	/* CHAP turned off in the middle: this login still completes CHAP with the old secret */
	hl_iscsi_server_set_discovery_chap(srv, &off);
	CU_ASSERT_EQUAL_FATAL(discovery_chap_answer(), 0);
	CU_ASSERT_EQUAL(conn->sess->type, ISCSI_SESSION_DISCOVERY);
	/* A new discovery login needs no authentication now... */
	P = &peers[1];
	peer_open(P);
	ngot = 0;
	login_pdu(ISCSI_LOGIN_TRANSIT | (0 << 2) | 3,
	          "InitiatorName=" INI "|SessionType=Discovery|AuthMethod=None");
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(login_status(&got[0]), 0);
	teardown();

	/* ...and when CHAP is turned on, one without it is refused. */
	setup();
	hl_iscsi_server_set_discovery_chap(srv, &on);
	login_pdu(ISCSI_LOGIN_TRANSIT | (0 << 2) | 3,
	          "InitiatorName=" INI "|SessionType=Discovery|AuthMethod=None");
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(login_status(&got[0]), ISCSI_LOGIN_AUTH_FAILED);
	teardown();
}

static void test_session_reinstatement(void)
{
	setup();
	login_ok(NULL);
	uint16_t tsih = conn->sess->tsih;
	/* a second login with the same ISID and initiator name replaces the session */
	P = &peers[1];
	peer_open(P);
	login_ok(NULL);
	CU_ASSERT_NOT_EQUAL(conn->sess->tsih, tsih);
	CU_ASSERT_TRUE(peer_alive(&peers[1]));
	CU_ASSERT_FALSE(peer_alive(&peers[0]));
	CU_ASSERT_EQUAL(nexus_gone, 1);
	/* a login naming the live session's TSIH (same CID) takes it over, keeping the TSIH */
	tsih = conn->sess->tsih;
	P = &peers[0];
	close(cfd);
	iscsi_rx_fini(&rcv);
	peer_open(P);
	{
		struct iscsi_bhs h;
		login_bhs(&h, ISCSI_LOGIN_TRANSIT | (1 << 2) | 3);
		hl_put_be16(&h.b[14], tsih);
		send_login(&h, "InitiatorName=" INI "|TargetName=" TGT "|" OPS_KEYS);
	}
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(login_status(&got[0]), 0);
	CU_ASSERT_EQUAL(hl_get_be16(&got[0].bhs.b[14]), tsih);
	CU_ASSERT_TRUE(peer_alive(&peers[0]));
	CU_ASSERT_FALSE(peer_alive(&peers[1]));
	teardown();
}

/* Log peer p in as a second initiator ("<INI>-b", another ISID) to TGT. */
static void login_second_initiator(struct peer *p)
{
	static const uint8_t isid2[6] = {0x80, 0x99, 0x99, 0x99, 0x00, 0x02};
	struct iscsi_bhs h;
	struct peer *saved = P;

	P = p;
	peer_open(P);
	login_bhs(&h, ISCSI_LOGIN_TRANSIT | (1 << 2) | 3);
	memcpy(&h.b[8], isid2, 6);
	send_login(&h, "InitiatorName=" INI "-b|TargetName=" TGT "|" OPS_KEYS);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(login_status(&got[0]), 0);
	expstatsn = bhs_w24(&got[0].bhs) + 1;
	ngot = 0;
	itt++;
	P = saved;
}

static void test_lun_reset_other_session(void)
{
	setup();
	defer_exec = true;
	/* session A (peer 1, another initiator) has a read in the scsi layer */
	login_second_initiator(&peers[1]);
	P = &peers[1];
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_READ, 0x28, 4096, NULL, 0);
	pump();
	CU_ASSERT_EQUAL_FATAL(npending, 1);
	/* session B (peer 0) resets the LUN: the answer waits for A's read */
	P = &peers[0];
	login_ok(NULL);
	struct iscsi_bhs h;
	tmf_req(&h, ISCSI_TMF_LUN_RESET, ISCSI_RSVD_TAG);
	send_pdu(&h, NULL, 0);
	pump();
	CU_ASSERT_EQUAL(ngot, 0);
	CU_ASSERT_EQUAL(peers[1].p_ngot, 0);
	fake_complete(pending[--npending]);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_TMF_RSP);
	CU_ASSERT_EQUAL(got[0].bhs.b[2], ISCSI_TMF_RSP_COMPLETE);
	CU_ASSERT_EQUAL(lu_resets, 1);
	CU_ASSERT_EQUAL(peers[1].p_ngot, 0); /* A's read was aborted: no response (TAS=0) */
	CU_ASSERT_TRUE(peer_alive(&peers[1]));
	CU_ASSERT_EQUAL(srv->pending_calls, 0);
	teardown();
}

static void send_target_reset(uint8_t fn)
{
	struct iscsi_bhs h;

	memset(&h, 0, sizeof(h));
	h.b[0] = ISCSI_OP_TMF_REQ | ISCSI_FLAG_IMMEDIATE;
	h.b[1] = ISCSI_FLAG_FINAL | fn;
	bhs_set_itt(&h, itt++);
	bhs_put32(&h, 20, ISCSI_RSVD_TAG);
	bhs_put32(&h, 24, cmdsn);
	bhs_put32(&h, 28, expstatsn);
	send_pdu(&h, NULL, 0);
}

/*
 * TARGET WARM/COLD RESET reach every initiator of the target: refused with
 * "function authorization failed" (6) unless the target allows them; then a
 * cold reset closes the other initiator's session too.
 */
static void test_target_reset_authorization(void)
{
	setup();
	login_second_initiator(&peers[1]);
	P = &peers[0];
	login_ok(NULL);
	send_target_reset(ISCSI_TMF_TARGET_COLD_RESET);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(bhs_opcode(&got[0].bhs), ISCSI_OP_TMF_RSP);
	CU_ASSERT_EQUAL(got[0].bhs.b[2], ISCSI_TMF_RSP_AUTH_FAILED);
	ngot = 0;
	send_target_reset(ISCSI_TMF_TARGET_WARM_RESET);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(got[0].bhs.b[2], ISCSI_TMF_RSP_AUTH_FAILED);
	CU_ASSERT_EQUAL(lu_resets, 0);
	CU_ASSERT_TRUE(peer_alive(&peers[0]));
	CU_ASSERT_TRUE(peer_alive(&peers[1]));
	CU_ASSERT_EQUAL(peers[1].p_ngot, 0);

	/* allowed (read when the request comes, so it applies to this session) */
	struct iscsi_target *t = iscsi_target_find(srv, TGT);
	CU_ASSERT_PTR_NOT_NULL_FATAL(t);
	t->allow_target_reset = true;
	ngot = 0;
	send_target_reset(ISCSI_TMF_TARGET_WARM_RESET);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(got[0].bhs.b[2], ISCSI_TMF_RSP_COMPLETE);
	CU_ASSERT_EQUAL(lu_resets, 1);
	CU_ASSERT_TRUE(peer_alive(&peers[1]));
	ngot = 0;
	send_target_reset(ISCSI_TMF_TARGET_COLD_RESET);
	pump();
	CU_ASSERT_EQUAL_FATAL(ngot, 1);
	CU_ASSERT_EQUAL(got[0].bhs.b[2], ISCSI_TMF_RSP_COMPLETE);
	CU_ASSERT_FALSE(peer_alive(&peers[1]));
	CU_ASSERT_FALSE(peer_alive(&peers[0]));
	teardown();
}

/* A LUN map change reaches every session of that target, and only those. */
static void test_luns_changed_sessions(void)
{
	setup();
	login_second_initiator(&peers[1]);
	P = &peers[0];
	login_ok(NULL);
	CU_ASSERT_EQUAL(hl_iscsi_target_luns_changed(srv, TGT_CHAP), 0);
	CU_ASSERT_EQUAL(n_luns_changed, 0);
	CU_ASSERT_EQUAL(hl_iscsi_target_luns_changed(srv, TGT), 2);
	CU_ASSERT_EQUAL_FATAL(n_luns_changed, 2);
	CU_ASSERT_PTR_EQUAL(luns_changed_map, &map);
	uint64_t a = peers[0].p_conn->sess->nexus.id, b = peers[1].p_conn->sess->nexus.id;
	CU_ASSERT_TRUE((luns_changed_nexus[0] == a && luns_changed_nexus[1] == b) ||
	               (luns_changed_nexus[0] == b && luns_changed_nexus[1] == a));
	/* a session that logged out is not told */
	iscsi_conn_close(peers[1].p_conn, "test");
	run_calls();
	n_luns_changed = 0;
	CU_ASSERT_EQUAL(hl_iscsi_target_luns_changed(srv, TGT), 1);
	CU_ASSERT_EQUAL(luns_changed_nexus[0], a);
	teardown();
}

/* What the reactor does for a due timer. */
static void fire_timer(struct hl_timer *t)
{
	t->heap_idx = (size_t)-1;
	t->fn(t);
}

/*
 * An initiator that sends READs and does not read its socket: the connection
 * starts one 16 MiB READ per turn (ISCSI_RX_READ_PER_TURN) and none while
 * more than ISCSI_TX_HIGH of READ data is on its way out; the commands it
 * has received wait, in order, and start once the initiator reads.
 */
static void test_slow_reader_parks(void)
{
	enum { N = 10 };
	const uint32_t len = 16u << 20;
	static uint8_t sink[1 << 16];

	setup();
	login_ok(NULL);
	struct iscsi_conn *c = P->p_conn;
	defer_exec = true;
	for (int i = 0; i < N; i++) {
		scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_READ, 0x28, len, NULL, 0);
		itt++;
	}
	c->ev.fn(&c->ev, EPOLLIN);
	CU_ASSERT_EQUAL(nexec_total, 1); /* one turn, one large READ */
	CU_ASSERT_TRUE(c->rbuf_off < c->rbuf_len);
	CU_ASSERT_TRUE_FATAL(hl_timer_pending(&c->rx_timer));
	CU_ASSERT_EQUAL(c->ev_mask & EPOLLIN, 0); /* received bytes wait: no more reading */
	fire_timer(&c->rx_timer);
	CU_ASSERT_EQUAL(nexec_total, 2);
	CU_ASSERT_TRUE_FATAL(hl_timer_pending(&c->rx_timer));
	fire_timer(&c->rx_timer);
	CU_ASSERT_EQUAL(nexec_total, 3); /* 48 MiB on its way out: over ISCSI_TX_HIGH */
	CU_ASSERT_FALSE(hl_timer_pending(&c->rx_timer));
	/* the READs complete; the initiator still reads nothing: nothing else starts */
	while (npending)
		fake_complete(pending[--npending]);
	CU_ASSERT_TRUE(c->tx_bytes > ISCSI_TX_HIGH / 2);
	c->ev.fn(&c->ev, EPOLLIN | EPOLLOUT);
	CU_ASSERT_EQUAL(nexec_total, 3);
	CU_ASSERT_FALSE(hl_timer_pending(&c->rx_timer));
	/* the initiator reads: the rest start, a bounded number per turn */
	for (int turn = 0; turn < 100000 && (nexec_total < N || npending || c->tx_bytes); turn++) {
		int before = nexec_total;
		while (read(cfd, sink, sizeof(sink)) > 0)
			;
		c->ev.fn(&c->ev, EPOLLOUT);
		if (hl_timer_pending(&c->rx_timer))
			fire_timer(&c->rx_timer);
		CU_ASSERT_TRUE(nexec_total - before <= 2);
		while (npending)
			fake_complete(pending[--npending]);
	}
	CU_ASSERT_EQUAL(nexec_total, N);
	CU_ASSERT_EQUAL(c->tx_bytes, 0);
	CU_ASSERT_EQUAL(c->rd_inflight, 0);
	CU_ASSERT_TRUE(conn_alive());
	teardown();
}

/*
 * A 16 KiB WRITE sent (InitialR2T=Yes, MaxBurstLength 16384) and its one R2T
 * received: @return its task, still collecting data; *ttt (when not NULL)
 * the R2T's Target Transfer Tag.
 */
static struct iscsi_task *write_r2t_sent(uint32_t *ttt)
{
	struct iscsi_task *w;
	uint32_t tag;

	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_WRITE, 0x2a, 16384, NULL, 0);
	pump();
	tag = r2t_got(0, 16384);
	if (ttt)
		*ttt = tag;
	w = dout_task();
	CU_ASSERT_PTR_NOT_NULL_FATAL(w);
	return w;
}

/*
 * The dout timer, due, closes the connection: counted as silent (no data for
 * ISCSI_DATAOUT_TIMEOUT_S) or slow (past its deadline), no budget left held.
 */
static void dout_closes(uint64_t silent, uint64_t slow)
{
	struct hl_iscsi_write_stats ws;

	fire_timer(&conn->dout_timer);
	run_calls();
	CU_ASSERT_FALSE(conn_alive());
	hl_iscsi_write_stats(srv, &ws);
	CU_ASSERT_EQUAL(ws.closed_silent, silent);
	CU_ASSERT_EQUAL(ws.closed_slow, slow);
	CU_ASSERT_EQUAL(ws.held, 0);
}

/*
 * A WRITE whose R2T went unanswered for ISCSI_DATAOUT_TIMEOUT_S closes its
 * connection (on its dout timer, armed by the R2T): an initiator cannot
 * hold write budget by never sending the data it was asked for. A recent
 * R2T keeps it open.
 */
static void test_dataout_timeout(void)
{
	struct iscsi_task *w;

	setup();
	login_ok(NULL); /* InitialR2T=Yes */
	CU_ASSERT_FALSE(hl_timer_pending(&conn->dout_timer));
	w = write_r2t_sent(NULL);
	CU_ASSERT_TRUE_FATAL(hl_timer_pending(&conn->dout_timer));
	fire_timer(&conn->dout_timer); /* the R2T is fresh: nothing happens, it runs again */
	CU_ASSERT_TRUE(conn_alive());
	CU_ASSERT_TRUE(hl_timer_pending(&conn->dout_timer));
	w->dout_ns = hl_now_ns() - (ISCSI_DATAOUT_TIMEOUT_S + 1) * 1000000000ull;
	dout_closes(1, 0);
	teardown();
}

/*
 * Issue 24: 512 bytes now and then keep the "no data" close away, but not
 * the deadline: 30 s + the transfer at 256 KiB/s after its R2Ts went out.
 */
static void test_dataout_deadline(void)
{
	uint8_t buf[512] = {0};
	struct iscsi_task *w;
	uint32_t ttt;
	uint64_t before = hl_now_ns();

	setup();
	login_ok(NULL); /* MaxBurstLength 16384: one R2T */
	w = write_r2t_sent(&ttt);
	CU_ASSERT(w->wb_since_ns >= before);
	CU_ASSERT_EQUAL(w->wb_deadline_ns - w->wb_since_ns, iscsi_wb_deadline_ns(16384));
	data_out(ttt, 0, 0, buf, sizeof(buf), false); /* a trickle */
	pump();
	CU_ASSERT_EQUAL(w->received, 512);
	fire_timer(&conn->dout_timer);
	CU_ASSERT_TRUE(conn_alive());
	/* its data has come, a little: only the deadline is past */
	w->wb_deadline_ns = hl_now_ns() - 1;
	dout_closes(0, 1);
	teardown();
}

/*
 * A login refused at a session cap stores its time under the server's lock
 * (any reactor); server_tick reads the clock before it takes that lock. A
 * tick whose time is earlier than the last refusal must not wrap its age
 * and end the episode in the middle of the refusals (after which the next
 * one logs its start again: two lines per tick under a flood).
 */
static void test_episode_time_read_before_the_lock(void)
{
	uint64_t t = hl_now_ns();

	setup();
	pthread_mutex_lock(&srv->lock);
	CU_ASSERT_TRUE(iscsi_episode_hit(&srv->sess_refusing, t - 1000000ull));
	/* refused on another reactor, at t + 1 ms */
	CU_ASSERT_FALSE(iscsi_episode_hit(&srv->sess_refusing, t + 1000000ull));
	pthread_mutex_unlock(&srv->lock);
	iscsi_limits_tick(srv, t); /* read at t, before the refusal took the lock */
	CU_ASSERT_TRUE(srv->sess_refusing.on);
	iscsi_limits_tick(srv, t + 1000000ull + ISCSI_EPISODE_QUIET_S * 1000000000ull - 1);
	CU_ASSERT_TRUE(srv->sess_refusing.on);
	iscsi_limits_tick(srv, t + 1000000ull + ISCSI_EPISODE_QUIET_S * 1000000000ull);
	CU_ASSERT_FALSE(srv->sess_refusing.on);
	CU_ASSERT_EQUAL(srv->sess_refusing.count, 2);
	teardown();
}

/*
 * The server's destroy waits a bounded time for its calls and connections
 * (wait_idle) on srv->cond: on the monotonic clock, so that a step of the
 * wall clock (NTP, a VM's time sync after a pause) neither ends that wait
 * at once nor stretches it. A monotonic deadline 200 ms ahead is waited.
 */
static void test_destroy_wait_is_monotonic(void)
{
	struct timespec ts;
	uint64_t t0;

	setup();
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_nsec += 200000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	t0 = hl_now_ns();
	pthread_mutex_lock(&srv->lock);
	CU_ASSERT_EQUAL(pthread_cond_timedwait(&srv->cond, &srv->lock, &ts), ETIMEDOUT);
	pthread_mutex_unlock(&srv->lock);
	CU_ASSERT_TRUE(hl_now_ns() - t0 >= 150000000ull);
	teardown();
}

static const struct hl_test tests[] = {
    {"a WRITE whose data never comes closes its connection", test_dataout_timeout},
    {"a WRITE whose data trickles closes its connection at its deadline", test_dataout_deadline},
    {"login: operational stage straight to FFP", test_login_operational_only},
    {"login: the SCSI port ids follow the gateway id", test_login_port_ids_follow_gateway},
    {"a connection that cannot send stops taking READs", test_slow_reader_parks},
    {"login: security then operational stage", test_login_security_then_operational},
    {"login: error statuses", test_login_errors},
    {"login: discovery session and SendTargets", test_login_discovery},
    {"login: request and response continuation", test_login_continuation},
    {"login: CHAP one-way, mutual, wrong secret, reflection", test_login_chap},
    {"read: Data-In segmentation, bursts, status", test_read_segmentation},
    {"read: data handed over in pieces goes out in whole PDUs", test_read_streamed},
    {"data buffers: 32 x 1 MiB reused, trimmed", test_data_buffer_reuse},
    {"data buffers: 1 MiB halves of huge-page chunks", test_data_buffer_huge_chunks},
    {"read: residual overflow/underflow", test_read_residuals},
    {"EDTL above the transfer cap; buffer share exhausted", test_edtl_too_large},
    {"write: R2T generation", test_write_r2t},
    {"write: immediate + unsolicited + R2T", test_write_immediate_unsolicited},
    {"write: budget spent: TASK SET FULL, R2T deferred, window held", test_write_budget},
    {"write: budget: unsolicited data taken while R2Ts wait", test_write_budget_unsolicited_waits},
    {"write: budget given back when the connection closes", test_write_budget_conn_close},
    {"write: bad DataSN rejected, session survives", test_data_out_errors},
    {"CmdSN window, NOP-Out during stalled I/O", test_cmdsn_window},
    {"CmdSN window closes when the queue is full", test_cmdsn_window_full},
    {"CmdSN window: libiscsi-like initiator, writes with immediate data, slow LU",
     test_cmdsn_window_initiator_model},
    {"CmdSN window: an advertised MaxCmdSN is honoured", test_cmdsn_window_promise},
    {"Reject, digests, framing loss", test_reject_and_digests},
    {"data digest error: Reject; a CmdSN hole closes the connection", test_digest_error_cmdsn_gap},
    {"TMF: abort waits for the task; LUN reset", test_tmf_abort_waits},
    {"logout closes", test_logout},
    {"logout waits for the commands still executing", test_logout_waits_for_commands},
    {"a target-requested logout: Async Message event 1", test_request_logout},
    {"text: SendTargets continuation in a normal session", test_text_continuation},
    {"NOP-In ping on idle, answer, timeout", test_nop_ping},
    {"discovery CHAP", test_discovery_chap},
    {"discovery CHAP changed while running", test_discovery_chap_change},
    {"session and connection reinstatement", test_session_reinstatement},
    {"LUN reset reaches other sessions and waits for them", test_lun_reset_other_session},
    {"TARGET WARM/COLD RESET: function authorization failed unless allowed",
     test_target_reset_authorization},
    {"LUN map changed: every session of the target is told", test_luns_changed_sessions},
    {"a limit episode never ends on a time read before the lock",
     test_episode_time_read_before_the_lock},
    {"the server's destroy waits on the monotonic clock", test_destroy_wait_is_monotonic},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("iscsi_session", tests);
}
