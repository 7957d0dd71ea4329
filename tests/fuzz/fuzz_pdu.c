// clang-format off
// fuzz-sources: src/iscsi/pdu.c src/iscsi/conn.c src/iscsi/buf.c src/iscsi/login.c src/iscsi/session.c src/iscsi/write_data.c src/iscsi/nop_text_logout.c src/iscsi/tmf.c src/iscsi/discovery.c src/iscsi/server.c src/iscsi/limits.c src/iscsi/wbudget.c src/iscsi/text.c src/iscsi/params.c src/iscsi/chap.c src/iscsi/chap_guard.c src/iscsi/source.c src/iscsi/crc32c.c src/event/mem_region.c src/log/log.c src/util/util.c
// fuzz-libs: -lcrypto -pthread
// clang-format on
/*
 * fuzz_pdu.c - libFuzzer harness for the iSCSI receive path: the PDU
 * state machine alone, and the whole connection (login, full feature
 * phase, Data-Out, TMF, Text...) over a socketpair with a fake scsi layer.
 *
 * Input: byte 0 chooses the mode:
 *   bit 0..1 = 0: the rest is fed to iscsi_rx alone (digest flags from bit 2/3)
 *   bit 0..1 = 1: the rest is a byte stream into a fresh connection (login phase)
 *   bit 0..1 = 2/3: a valid login is done first; the rest hits the full
 *                   feature phase (bit 2: digests on; bit 3: scsi completes later)
 * byte 1 is the chunk size used to feed the stream (0 = all at once).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "hotlun/log.h"
#include "iscsi/iscsi_internal.h"

/* ---- fake scsi layer ---- */

static struct hl_scsi_cmd *held[256];
static int nheld;
static bool defer;
static int fake_lu_storage;

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

static void complete(struct hl_scsi_cmd *cmd)
{
	if (cmd->cdb[0] & 1) {
		hl_scsi_set_sense(cmd, HL_SK_ILLEGAL_REQUEST, 0x20, 0);
	} else {
		cmd->status = HL_SAM_GOOD;
		cmd->xfer_len = cmd->cdb[1] ? (uint32_t)cmd->cdb[1] * 512 : cmd->data_len;
		if (cmd->data_in) {
			cmd->data_in_len =
			    cmd->data_len < cmd->xfer_len ? cmd->data_len : cmd->xfer_len;
			if (cmd->data_in_len)
				memset(cmd->data, 0x5a, cmd->data_in_len);
		}
	}
	cmd->done(cmd);
}

void hl_scsi_cmd_exec(struct hl_scsi_cmd *cmd)
{
	if (defer && nheld < 256) {
		held[nheld++] = cmd;
		return;
	}
	complete(cmd);
}

void hl_lu_reset(struct hl_lu *lu, const struct hl_scsi_nexus *by)
{
}

void hl_scsi_nexus_gone(const struct hl_scsi_lun_map *map, const struct hl_scsi_nexus *nexus)
{
}

/* ---- fake reactor: calls queue up and run in pump() ---- */

#include "../unit/iscsi/fake_reactor.h"

/* End-of-turn hooks: "not this thread's reactor", so the caller does the work at once. */
#include "../unit/iscsi/turn_hook_stub.h"

/* ---- rx-only mode ---- */

static int rx_hdr(void *ctx, struct iscsi_rx *rx)
{
	/* exercise the accessors the connection uses on every header */
	volatile uint64_t sink = bhs_lun(&rx->bhs) ^ bhs_itt(&rx->bhs) ^ bhs_w20(&rx->bhs) ^
	                         iscsi_lun_decode(bhs_lun(&rx->bhs));
	(void)sink;
	if (bhs_opcode(&rx->bhs) == ISCSI_OP_DATA_OUT)
		rx->discard = true;
	return bhs_opcode(&rx->bhs) == 0x3e ? -EPROTO : 0;
}

static int rx_pdu(void *ctx, struct iscsi_rx *rx)
{
	volatile uint8_t sink = 0;
	if (rx->data)
		for (uint32_t i = 0; i < rx->dsl; i++)
			sink ^= rx->data[i];
	(void)sink;
	return 0;
}

static const struct iscsi_rx_ops rx_ops = {.header = rx_hdr, .pdu = rx_pdu};

/* ---- connection mode ---- */

static struct hl_iscsi_server *srv;
static struct hl_scsi_lun_map map;

static void init_once(void)
{
	struct hl_iscsi_server_config sc = {0};
	struct hl_iscsi_target_config tc = {0};
	static const char *acl[] = {"iqn.fuzz:allowed"};

	hl_log_open(false, HL_LOG_ERR - 1); /* silent */
	signal(SIGPIPE, SIG_IGN);           /* our own writes into a closed socketpair */
	map.lu[0] = (struct hl_lu *)&fake_lu_storage;
	sc.reactors = &reactor;
	sc.n_reactors = 1;
	if (hl_iscsi_server_create(&sc, &srv) < 0)
		abort();
	tc.name = "iqn.fuzz:t";
	tc.luns = &map;
	tc.allow_all = true;
	hl_iscsi_target_add(srv, &tc);
	tc.name = "iqn.fuzz:chap";
	strcpy(tc.chap.user, "u");
	strcpy(tc.chap.secret, "secretsecret");
	strcpy(tc.mutual.user, "m");
	strcpy(tc.mutual.secret, "mutualsecret");
	hl_iscsi_target_add(srv, &tc);
	memset(&tc.chap, 0, sizeof(tc.chap));
	memset(&tc.mutual, 0, sizeof(tc.mutual));
	tc.name = "iqn.fuzz:acl";
	tc.allow_all = false;
	tc.allow = acl;
	tc.n_allow = 1;
	hl_iscsi_target_add(srv, &tc);
}

static bool alive(struct iscsi_conn *c)
{
	struct iscsi_conn *x;
	bool found = false;

	pthread_mutex_lock(&srv->lock);
	hl_list_for_each_entry(x, &srv->conns, srv_link) if (x == c) found = true;
	pthread_mutex_unlock(&srv->lock);
	return found;
}

static void drain(int fd)
{
	uint8_t buf[65536];
	while (read(fd, buf, sizeof(buf)) > 0)
		;
}

static void pump(struct iscsi_conn *c, int fd)
{
	for (int i = 0; i < 4 && alive(c); i++) {
		c->ev.fn(&c->ev, EPOLLIN | EPOLLOUT);
		run_calls();
		drain(fd);
	}
	run_calls();
}

static size_t login_pdu(uint8_t *out, bool digests)
{
	static const char keys_plain[] = "InitiatorName=iqn.fuzz:i\0TargetName=iqn.fuzz:t\0"
	                                 "MaxRecvDataSegmentLength=4096\0MaxBurstLength=8192\0"
	                                 "FirstBurstLength=4096\0ImmediateData=Yes\0"
	                                 "MaxOutstandingR2T=2\0";
	static const char keys_dig[] = "HeaderDigest=CRC32C\0DataDigest=CRC32C\0";
	size_t n = 48, dl = sizeof(keys_plain) - 1;

	memset(out, 0, 48);
	out[0] = ISCSI_OP_LOGIN_REQ | ISCSI_FLAG_IMMEDIATE;
	out[1] = ISCSI_LOGIN_TRANSIT | (1 << 2) | 3;
	out[8] = 0x80;
	memcpy(out + n, keys_plain, dl);
	if (digests) {
		memcpy(out + n + dl, keys_dig, sizeof(keys_dig) - 1);
		dl += sizeof(keys_dig) - 1;
	}
	hl_put_be24(&out[5], (uint32_t)dl);
	n += dl;
	while (n & 3)
		out[n++] = 0;
	return n;
}

static void run_conn(const uint8_t *data, size_t size, int mode, bool digests, size_t chunk)
{
	int sv[2];
	struct iscsi_conn *c;

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		return;
	fcntl(sv[0], F_SETFL, O_NONBLOCK);
	fcntl(sv[1], F_SETFL, O_NONBLOCK);
	if (iscsi_conn_create(srv, sv[0], 1, false, &c) < 0) {
		close(sv[0]);
		close(sv[1]);
		return;
	}
	pthread_mutex_lock(&srv->lock);
	hl_list_add_tail(&srv->conns, &c->srv_link);
	srv->n_conns++;
	pthread_mutex_unlock(&srv->lock);
	iscsi_conn_start(c);
	if (mode >= 2) {
		uint8_t lp[512];
		size_t n = login_pdu(lp, digests);
		if (write(sv[1], lp, n) != (ssize_t)n)
			abort();
		pump(c, sv[1]);
	}
	for (size_t off = 0; off < size && alive(c);) {
		size_t n = chunk ? chunk : size;
		if (n > size - off)
			n = size - off;
		ssize_t w = write(sv[1], data + off, n);
		if (w <= 0)
			break;
		off += (size_t)w;
		pump(c, sv[1]);
		/* let deferred commands finish in the middle of the stream, too */
		if (nheld && (off & 1))
			complete(held[--nheld]);
	}
	pump(c, sv[1]);
	while (nheld)
		complete(held[--nheld]);
	run_calls();
	if (alive(c))
		iscsi_conn_close(c, "fuzz end");
	run_calls();
	if (alive(c) || srv->pending_calls)
		abort(); /* a connection with no task in flight must be freed on close */
	close(sv[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool inited;

	if (!inited) {
		init_once();
		inited = true;
	}
	if (size < 2)
		return 0;
	int mode = data[0] & 3;
	bool digests = data[0] & 4;
	size_t chunk = data[1];
	data += 2;
	size -= 2;

	if (mode == 0) {
		struct iscsi_rx rx;
		iscsi_rx_init(&rx, &rx_ops, NULL, 16384);
		rx.header_digest = digests;
		rx.data_digest = data[-2] & 8;
		for (size_t off = 0; off < size;) {
			size_t n = chunk ? chunk : size;
			if (n > size - off)
				n = size - off;
			if (iscsi_rx_feed(&rx, data + off, n) < 0)
				break;
			off += n;
		}
		iscsi_rx_fini(&rx);
		return 0;
	}
	defer = (data[-2] & 8) != 0;
	run_conn(data, size, mode, digests, chunk);
	defer = false;
	return 0;
}
