/*
 * hl_session_cmds.c - one iSCSI session that runs commands read from stdin,
 * so that a functional test can change something behind the target (resize
 * an RBD image, blocklist the gateway) while the session stays logged in and
 * see what the *next* command on that same I_T nexus gets. Built as a check
 * program for origin_rbd.sh; never installed.
 *
 *   hl_session_cmds URL          (iscsi://host:port/IQN/LUN)
 *
 * Commands, one per line:
 *   tur            TEST UNIT READY
 *   rc16           READ CAPACITY(16)
 *   read LBA       READ(16) of one block
 *   write LBA      WRITE(16) of one block (0x5a bytes)
 *   register KEY               PERSISTENT RESERVE OUT / REGISTER (hex key)
 *   reserve KEY TYPE           ... / RESERVE (type: 1 WE, 3 EA, ...)
 *   preempt-abort KEY SAKEY TYPE   ... / PREEMPT AND ABORT
 *   awrite LBA     WRITE(16) of one block (0x3c bytes) left running: "QUEUED"
 *   wait MS        serve the session for MS ms, printing "ASYNC <result>" for
 *                  each awrite that completes, then "WAITED pending=N"
 * Each prints one line and flushes: "GOOD" (rc16: "GOOD blocks=N bs=B",
 * read: "GOOD first=XX", the block's first byte in hex),
 * "CHECK <key>/<asc>/<ascq>" in hex, or "STATUS <n>" for another status;
 * PR OUT results end with " ms=N", the time the command took.
 * HL_INITIATOR names the initiator (default iqn.2026-11.io.hotlun:test-session).
 * Exit 0 at end of input, 2 on a usage or connection error.
 */
#include <inttypes.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>

static void print_task_suffix(struct scsi_task *task, const char *suffix);

static void print_task(struct scsi_task *task)
{
	print_task_suffix(task, "");
}

static int pending; /* awrites not answered yet */

static void async_done(struct iscsi_context *iscsi, int status, void *data, void *priv)
{
	(void)iscsi;
	(void)status;
	(void)priv;
	pending--;
	printf("ASYNC ");
	print_task(data);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Serve the session for ms milliseconds (async completions print as they come). */
static void serve(struct iscsi_context *iscsi, int ms)
{
	uint64_t end = now_ms() + (uint64_t)ms;

	for (uint64_t t = now_ms(); t < end; t = now_ms()) {
		struct pollfd pfd = {.fd = iscsi_get_fd(iscsi),
		                     .events = (short)iscsi_which_events(iscsi)};
		if (poll(&pfd, 1, (int)(end - t)) < 0)
			break;
		if (iscsi_service(iscsi, pfd.revents) < 0)
			break;
	}
}

static void pr_out(struct iscsi_context *iscsi, int lun, enum scsi_persistent_out_sa sa,
                   uint64_t key, uint64_t sa_key, int type)
{
	struct scsi_persistent_reserve_out_basic p = {.reservation_key = key,
	                                              .service_action_reservation_key = sa_key};
	uint64_t t0 = now_ms();
	struct scsi_task *t =
	    iscsi_persistent_reserve_out_sync(iscsi, lun, sa, SCSI_PERSISTENT_RESERVE_SCOPE_LU,
	                                      (enum scsi_persistent_out_type)type, &p);
	char suffix[32];

	snprintf(suffix, sizeof(suffix), " ms=%llu", (unsigned long long)(now_ms() - t0));
	print_task_suffix(t, suffix);
}

static void print_task_suffix(struct scsi_task *task, const char *suffix)
{
	if (!task) {
		printf("ERROR\n");
	} else if (task->status == SCSI_STATUS_GOOD) {
		if (task->cdb[0] == 0x9e) {
			struct scsi_readcapacity16 *rc = scsi_datain_unmarshall(task);
			if (rc)
				printf("GOOD blocks=%" PRIu64 " bs=%u\n", rc->returned_lba + 1,
				       rc->block_length);
			else
				printf("GOOD (unparsable)\n");
		} else if (task->cdb[0] == 0x88 && task->datain.size > 0) {
			/* a read: its first byte, so a test can tell old data from new or zeroes */
			printf("GOOD first=%02x\n", task->datain.data[0]);
		} else {
			printf("GOOD%s\n", suffix);
		}
	} else if (task->status == SCSI_STATUS_CHECK_CONDITION) {
		printf("CHECK %x/%02x/%02x%s\n", task->sense.key, (task->sense.ascq >> 8) & 0xff,
		       task->sense.ascq & 0xff, suffix);
	} else {
		printf("STATUS %d%s\n", task->status, suffix);
	}
	fflush(stdout);
	if (task)
		scsi_free_scsi_task(task);
}

int main(int argc, char **argv)
{
	struct iscsi_context *iscsi;
	struct iscsi_url *url;
	char line[256];
	unsigned char buf[4096];
	static unsigned char abuf[4096]; /* an awrite's data, kept while it runs */
	uint32_t bs = 512;

	if (argc != 2) {
		fprintf(stderr, "usage: hl_session_cmds iscsi://HOST:PORT/IQN/LUN\n");
		return 2;
	}
	const char *ini = getenv("HL_INITIATOR");

	iscsi = iscsi_create_context(ini && *ini ? ini : "iqn.2026-11.io.hotlun:test-session");
	if (!iscsi)
		return 2;
	url = iscsi_parse_full_url(iscsi, argv[1]);
	if (!url) {
		fprintf(stderr, "bad URL: %s\n", iscsi_get_error(iscsi));
		return 2;
	}
	iscsi_set_session_type(iscsi, ISCSI_SESSION_NORMAL);
	iscsi_set_header_digest(iscsi, ISCSI_HEADER_DIGEST_NONE);
	iscsi_set_targetname(iscsi, url->target);
	/*
	 * No LUN for the connect: libiscsi's TEST UNIT READY would fail the
	 * login on a standby gateway (NOT READY). The unit attentions a new
	 * session starts with are cleared here instead; any other answer ends
	 * that.
	 */
	if (iscsi_full_connect_sync(iscsi, url->portal, -1) != 0) {
		fprintf(stderr, "login failed: %s\n", iscsi_get_error(iscsi));
		return 2;
	}
	for (int i = 0; i < 8; i++) {
		struct scsi_task *t = iscsi_testunitready_sync(iscsi, url->lun);
		bool ua = t && t->status == SCSI_STATUS_CHECK_CONDITION &&
		          t->sense.key == SCSI_SENSE_UNIT_ATTENTION;
		if (t)
			scsi_free_scsi_task(t);
		if (!ua)
			break;
	}
	while (fgets(line, sizeof(line), stdin)) {
		uint64_t lba = 0, key = 0, sa_key = 0;
		int type = 0, ms = 0;
		if (!strncmp(line, "tur", 3)) {
			print_task(iscsi_testunitready_sync(iscsi, url->lun));
		} else if (!strncmp(line, "rc16", 4)) {
			struct scsi_task *t = iscsi_readcapacity16_sync(iscsi, url->lun);
			if (t && t->status == SCSI_STATUS_GOOD) {
				struct scsi_readcapacity16 *rc = scsi_datain_unmarshall(t);
				if (rc && rc->block_length && rc->block_length <= sizeof(buf))
					bs = rc->block_length;
			}
			print_task(t);
		} else if (sscanf(line, "read %" SCNu64, &lba) == 1) {
			print_task(iscsi_read16_sync(iscsi, url->lun, lba, bs, bs, 0, 0, 0, 0, 0));
		} else if (sscanf(line, "write %" SCNu64, &lba) == 1) {
			memset(buf, 0x5a, bs);
			print_task(
			    iscsi_write16_sync(iscsi, url->lun, lba, buf, bs, bs, 0, 0, 0, 0, 0));
		} else if (sscanf(line, "register %" SCNx64, &key) == 1) {
			pr_out(iscsi, url->lun, SCSI_PERSISTENT_RESERVE_REGISTER, 0, key, 0);
		} else if (sscanf(line, "reserve %" SCNx64 " %d", &key, &type) == 2) {
			pr_out(iscsi, url->lun, SCSI_PERSISTENT_RESERVE_RESERVE, key, 0, type);
		} else if (sscanf(line, "preempt-abort %" SCNx64 " %" SCNx64 " %d", &key, &sa_key,
		                  &type) == 3) {
			pr_out(iscsi, url->lun, SCSI_PERSISTENT_RESERVE_PREEMPT_AND_ABORT, key,
			       sa_key, type);
		} else if (sscanf(line, "awrite %" SCNu64, &lba) == 1) {
			memset(abuf, 0x3c, bs);
			if (iscsi_write16_task(iscsi, url->lun, lba, abuf, bs, bs, 0, 0, 0, 0, 0,
			                       async_done, NULL)) {
				pending++;
				printf("QUEUED\n");
			} else {
				printf("ERROR\n");
			}
			fflush(stdout);
			serve(iscsi, 50); /* let it leave */
		} else if (sscanf(line, "wait %d", &ms) == 1) {
			serve(iscsi, ms);
			printf("WAITED pending=%d\n", pending);
			fflush(stdout);
		} else {
			printf("UNKNOWN\n");
			fflush(stdout);
		}
	}
	iscsi_logout_sync(iscsi);
	iscsi_destroy_url(url);
	iscsi_destroy_context(iscsi);
	return 0;
}
