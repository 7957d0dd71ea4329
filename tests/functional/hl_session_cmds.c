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
 * Each prints one line and flushes: "GOOD" (rc16: "GOOD blocks=N bs=B",
 * read: "GOOD first=XX", the block's first byte in hex),
 * "CHECK <key>/<asc>/<ascq>" in hex, or "STATUS <n>" for another status.
 * Exit 0 at end of input, 2 on a usage or connection error.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>

static void print_task(struct scsi_task *task)
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
			printf("GOOD\n");
		}
	} else if (task->status == SCSI_STATUS_CHECK_CONDITION) {
		printf("CHECK %x/%02x/%02x\n", task->sense.key, (task->sense.ascq >> 8) & 0xff,
		       task->sense.ascq & 0xff);
	} else {
		printf("STATUS %d\n", task->status);
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
	uint32_t bs = 512;

	if (argc != 2) {
		fprintf(stderr, "usage: hl_session_cmds iscsi://HOST:PORT/IQN/LUN\n");
		return 2;
	}
	iscsi = iscsi_create_context("iqn.2026-11.io.hotlun:test-session");
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
	/* the connect clears the power-on unit attention with TEST UNIT READY */
	if (iscsi_full_connect_sync(iscsi, url->portal, url->lun) != 0) {
		fprintf(stderr, "login failed: %s\n", iscsi_get_error(iscsi));
		return 2;
	}
	while (fgets(line, sizeof(line), stdin)) {
		uint64_t lba = 0;
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
