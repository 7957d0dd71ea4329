/*
 * session_ut_lib.h - what session_ut and session_flow_ut share (each one
 * program that includes this once): the real connection, login and full-feature code of
 * src/iscsi driven over a socketpair, with the scsi layer replaced by a fake
 * defined here (hl_scsi_cmd_exec & co). Covers the login state machine
 * (stages, continuation, errors, CHAP), Data-In segmentation and
 * residuals, R2T generation, unsolicited data, the CmdSN window, NOP,
 * Reject, TMF, SendTargets and Logout.
 */
#ifndef HOTLUN_TESTS_SESSION_UT_LIB_H
#define HOTLUN_TESTS_SESSION_UT_LIB_H

/* each program uses part of what is here */
#define HL_UT_UNUSED __attribute__((unused))

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
static HL_UT_UNUSED struct fake_lu_tag fake_lu_mem;
static HL_UT_UNUSED struct hl_lu *fake_lu = (struct hl_lu *)&fake_lu_mem;

static HL_UT_UNUSED struct hl_scsi_cmd *pending[256];
static HL_UT_UNUSED int npending;
static HL_UT_UNUSED bool defer_exec;        /* keep commands until the test completes them */
static HL_UT_UNUSED uint32_t fake_xfer_len; /* 0: xfer_len = data_len */
static HL_UT_UNUSED uint8_t last_write[65536];
static HL_UT_UNUSED uint32_t last_write_len;
static HL_UT_UNUSED int lu_resets, nexus_gone;
static HL_UT_UNUSED int nexec_total; /* commands that reached the fake scsi layer */

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

static HL_UT_UNUSED void fake_complete(struct hl_scsi_cmd *cmd)
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
static HL_UT_UNUSED uint64_t luns_changed_nexus[4];
static HL_UT_UNUSED const struct hl_scsi_lun_map *luns_changed_map;
static HL_UT_UNUSED unsigned n_luns_changed;

unsigned hl_scsi_luns_changed(const struct hl_scsi_lun_map *m, const struct hl_scsi_nexus *nexus)
{
	if (n_luns_changed < 4)
		luns_changed_nexus[n_luns_changed] = nexus->id;
	n_luns_changed++;
	luns_changed_map = m;
	return 1;
}

/* ------------------------------------------------------------------ */
/* Fake reactor: cross-reactor calls queue up and run in run_calls().  */

#include "fake_reactor.h"

/* No reactor turns here: a connection sends at once (hl_turn_hook_queue refuses). */
#include "turn_hook_stub.h"

/* ------------------------------------------------------------------ */
/* Harness: a server, and up to two initiators over socketpairs.       */

static HL_UT_UNUSED struct hl_iscsi_server *srv;
static HL_UT_UNUSED struct hl_scsi_lun_map map;
static HL_UT_UNUSED bool rx_hd, rx_dd;

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
static HL_UT_UNUSED struct peer peers[2];
static HL_UT_UNUSED struct peer *P = &peers[0];
/* the tests speak through the current peer */
#define conn      (P->p_conn)
#define cfd       (P->p_fd)
#define rcv       (P->p_rcv)
#define got       (P->p_got)
#define ngot      (P->p_ngot)
#define cmdsn     (P->p_cmdsn)
#define itt       (P->p_itt)
#define expstatsn (P->p_expstatsn)

static HL_UT_UNUSED int rcv_header(void *ctx, struct iscsi_rx *rx)
{
	return 0;
}

static HL_UT_UNUSED int rcv_pdu(void *ctx, struct iscsi_rx *rx)
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

static HL_UT_UNUSED const struct iscsi_rx_ops rcv_ops = {.header = rcv_header, .pdu = rcv_pdu};

static HL_UT_UNUSED void peer_open(struct peer *p)
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

static HL_UT_UNUSED void setup(void)
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

static HL_UT_UNUSED bool peer_alive(const struct peer *p)
{
	bool alive = false;
	struct iscsi_conn *c;
	pthread_mutex_lock(&srv->lock);
	hl_list_for_each_entry(c, &srv->conns, srv_link) if (c == p->p_conn) alive = true;
	pthread_mutex_unlock(&srv->lock);
	return alive;
}

static HL_UT_UNUSED bool conn_alive(void)
{
	return peer_alive(P);
}

static HL_UT_UNUSED void teardown(void)
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
static HL_UT_UNUSED void pump(void)
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

static HL_UT_UNUSED void send_raw(const void *p, size_t n)
{
	CU_ASSERT_EQUAL_FATAL(write(cfd, p, n), (ssize_t)n);
}

static HL_UT_UNUSED void put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static HL_UT_UNUSED void send_pdu(struct iscsi_bhs *h, const void *data, uint32_t len)
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
 * An immediate request header (NOP-Out, Logout, Text, TMF): opcode op, byte 1
 * flags, ITT tag, bytes 20..23 word20 (a TTT or referenced task tag; 0 where
 * the opcode has none) and the current CmdSN, which it does not consume.
 */
static HL_UT_UNUSED void imm_req(struct iscsi_bhs *h, uint8_t op, uint8_t flags, uint32_t tag,
                                 uint32_t word20)
{
	memset(h, 0, sizeof(*h));
	h->b[0] = op | ISCSI_FLAG_IMMEDIATE;
	h->b[1] = flags;
	bhs_set_itt(h, tag);
	bhs_put32(h, 20, word20);
	bhs_put32(h, 24, cmdsn);
}

/*
 * An immediate TMF request for function fn (ISCSI_TMF_*) on the task whose
 * ITT is ref (ISCSI_RSVD_TAG for none), with the next ITT; the caller sends it.
 */
static HL_UT_UNUSED void tmf_req(struct iscsi_bhs *h, uint8_t fn, uint32_t ref)
{
	imm_req(h, ISCSI_OP_TMF_REQ, ISCSI_FLAG_FINAL | fn, ++itt, ref);
}

/* key=value\0 list from "k=v|k=v" */
static HL_UT_UNUSED size_t kv(uint8_t *out, const char *spec)
{
	size_t n = 0;
	for (const char *p = spec; *p; p++)
		out[n++] = *p == '|' ? 0 : (uint8_t)*p;
	out[n++] = 0;
	return n;
}

static HL_UT_UNUSED bool has_kv(const struct rpdu *p, const char *pair)
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

static HL_UT_UNUSED const char *get_kv(const struct rpdu *p, const char *key)
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

static HL_UT_UNUSED const uint8_t isid[6] = {0x80, 0x12, 0x34, 0x56, 0x00, 0x01};

/* A Login Request header with flags (T, C, CSG, NSG), the test's ISID and P's ITT and SNs. */
static HL_UT_UNUSED void login_bhs(struct iscsi_bhs *h, uint8_t flags)
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
static HL_UT_UNUSED void send_login(struct iscsi_bhs *h, const char *spec)
{
	uint8_t data[16384];
	size_t n = spec ? kv(data, spec) : 0;

	send_pdu(h, data, (uint32_t)n);
}

static HL_UT_UNUSED void login_pdu(uint8_t flags, const char *spec)
{
	struct iscsi_bhs h;

	login_bhs(&h, flags);
	send_login(&h, spec);
}

static HL_UT_UNUSED uint16_t login_status(const struct rpdu *p)
{
	return (uint16_t)(p->bhs.b[36] << 8 | p->bhs.b[37]);
}

#define OPS_KEYS                                                                                   \
	"MaxRecvDataSegmentLength=8192|InitialR2T=Yes|ImmediateData=Yes|"                          \
	"MaxBurstLength=16384|FirstBurstLength=8192|MaxOutstandingR2T=2|"                          \
	"HeaderDigest=None|DataDigest=None|ErrorRecoveryLevel=0"

/* Operational-stage-only login straight to FFP. */
static HL_UT_UNUSED void login_ok(const char *extra_ops)
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

static HL_UT_UNUSED void scsi_cmd(uint8_t flags, uint8_t cdb0, uint32_t edtl, const void *imm, uint32_t imm_len)
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

static HL_UT_UNUSED void data_out(uint32_t ttt, uint32_t datasn, uint32_t off, const uint8_t *d, uint32_t len,
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

/* ---- shared by both programs ---- */

/* got holds one PDU, an R2T for len bytes at offset off: @return its TTT; got is emptied. */
static HL_UT_UNUSED uint32_t r2t_got(uint32_t off, uint32_t len)
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

/* Log peer p in as a second initiator ("<INI>-b", another ISID) to TGT. */
static HL_UT_UNUSED void login_second_initiator(struct peer *p)
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

/* The one task of the connection still collecting data, or NULL. */
static HL_UT_UNUSED struct iscsi_task *dout_task(void)
{
	struct iscsi_task *t, *w = NULL;

	hl_list_for_each_entry(t, &conn->tasks, link) if (t->state == TASK_DATA_OUT) w = t;
	return w;
}

/* A 4 KiB WRITE (all immediate data) that the fake LU keeps (defer_exec): @return its ITT. */
static HL_UT_UNUSED uint32_t held_write(void)
{
	uint8_t data[4096];
	uint32_t tag = itt;
	int before = npending;

	memset(data, 0x77, sizeof(data));
	scsi_cmd(ISCSI_FLAG_FINAL | ISCSI_CMD_WRITE, 0x2a, sizeof(data), data, sizeof(data));
	itt++;
	pump();
	CU_ASSERT_EQUAL_FATAL(npending, before + 1);
	return tag;
}

/* Complete the held command whose ITT is tag. */
static HL_UT_UNUSED void held_complete(uint32_t tag)
{
	for (int i = 0; i < npending; i++) {
		if (pending[i]->tag != tag) /* the ITT */
			continue;
		struct hl_scsi_cmd *cmd = pending[i];
		pending[i] = pending[--npending];
		fake_complete(cmd);
		pump();
		return;
	}
	CU_FAIL("no such command held");
}

#endif
