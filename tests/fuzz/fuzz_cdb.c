// clang-format off
// fuzz-sources: src/scsi/lu.c src/scsi/cmd.c src/scsi/disk.c src/scsi/spc.c src/scsi/sbc.c src/scsi/sense.c src/scsi/pr.c src/scsi/pr_state.c src/scsi/pr_text.c src/scsi/pr_shared.c src/scsi/range.c src/scsi/lbp.c src/scsi/xcopy.c src/scsi/scratch.c src/scsi/ua.c src/event/reactor.c src/log/log.c src/util/util.c
// fuzz-libs: -lpthread
// clang-format on
/*
 * fuzz_cdb.c - libFuzzer harness for the SCSI layer: arbitrary CDBs and
 * data through hl_scsi_cmd_exec() against LUs backed by the in-memory fake
 * origin (tests/unit/scsi/fake_origin.h). Whatever the input, the command
 * must complete exactly once, within its buffers, with coherent status and
 * sense; anything else aborts.
 *
 * Input layout:
 *   [0]      flags: bits 0-1 direction (1 in, 2 out, 3 both marked),
 *            bit 2 read-only LU, bit 3 LUN without LU, bit 4 LUN reset first,
 *            bit 5 nexus gone after, bit 6 origin I/O fails, bit 7 submit fails
 *   [1]      bits 0-5: CDB length (taken mod 33); bit 6: the origin does COMPARE AND WRITE
 *            and PRE-FETCH itself; bit 7: second nexus (another initiator)
 *   [2..33]  CDB bytes
 *   [34..35] transport buffer length (big-endian, capped at 64 KiB)
 *   [36..]   data-out bytes (zero-filled beyond the input)
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/scsi/fake_origin.h"
#include "hotlun/log.h"
#include "hotlun/scsi.h"

#define LU_SIZE (1u << 20)
#define BUF_MAX (64u << 10)

/* The real hl_origin_close lives in src/origin with every backend; the fake needs only this. */
void hl_origin_close(struct hl_origin *o)
{
	if (!o)
		return;
	o->ops->close(o);
	free(o->uri);
	free(o);
}

/* The LU listens to its origin's events (resize); the fake raises none. */
void hl_origin_listen(struct hl_origin *o, hl_origin_event_fn fn, void *arg)
{
	o->listener = fn;
	o->listener_arg = arg;
}

static struct hl_lu *lus[2];
static struct hl_origin *origins[2];
static struct hl_scsi_lun_map map;
static const struct hl_scsi_port port = {
    .name = "iqn.2026-11.io.hotlun:fuzz,t,0x0001",
    .rel_port_id = 1,
    .tpg_id = 1,
};
static uint8_t buf[BUF_MAX];
static unsigned done_calls;

static void setup(void)
{
	hl_log_level = HL_LOG_ERR - 1;
	for (int i = 0; i < 2; i++) {
		struct hl_lu_config cfg = {.name = i ? "ro" : "rw",
		                           .block_size = 512,
		                           .read_only = i == 1,
		                           .write_cache = true};
		memset(cfg.naa, 0x60 + i, sizeof(cfg.naa));
		strcpy(cfg.serial, "FUZZ");
		origins[i] = fake_origin_new(LU_SIZE, true);
		if (origins[i] && i == 0) {
			/* the writable LU is thin: UNMAP, WRITE SAME with UNMAP, GET LBA STATUS */
			origins[i]->can_discard = true;
			origins[i]->zeroes_after_discard = true;
		}
		if (!origins[i] || hl_lu_create(&cfg, origins[i], &lus[i]))
			abort();
	}
}

static void cmd_done(struct hl_scsi_cmd *cmd)
{
	done_calls++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct hl_scsi_nexus nexuses[2] = {
	    {.id = 1, .initiator_port = "iqn.2026-11.fuzz:a,i,0x1", .port = &port},
	    {.id = 2, .initiator_port = "iqn.2026-11.fuzz:b,i,0x2", .port = &port},
	};
	struct hl_scsi_cmd cmd;

	if (!lus[0])
		setup();
	if (size < 36)
		return 0;

	uint8_t flags = data[0];
	int which = (flags & 0x04) ? 1 : 0;
	struct hl_origin *o = origins[which];
	uint32_t len = HL_MIN((uint32_t)hl_get_be16(data + 34) * 2u, BUF_MAX);

	memset(&map, 0, sizeof(map));
	map.lu[0] = lus[which];
	map.lu[1] = lus[!which]; /* EXTENDED COPY reaches only the LUs of the map */
	memset(&cmd, 0, sizeof(cmd));
	cmd.map = &map;
	cmd.lun = (flags & 0x08) ? 3 : 0;
	cmd.lu = map.lu[cmd.lun];
	struct hl_scsi_nexus *nexus = &nexuses[data[1] >> 7];
	cmd.nexus = nexus;
	cmd.cdb_len = (data[1] & 0x3f) % (HL_CDB_MAX + 1);
	memcpy(cmd.cdb, data + 2, HL_CDB_MAX);
	memset(buf, 0, len);
	memcpy(buf, data + 36, HL_MIN(len, (uint32_t)(size - 36)));
	cmd.data = len ? buf : NULL;
	cmd.data_len = len;
	cmd.data_in = (flags & 1) != 0;
	cmd.data_out = (flags & 2) != 0;
	cmd.done = cmd_done;

	fake_of(o)->fail_result = (flags & 0x40) ? -EIO : 0;
	fake_of(o)->caw_native = (data[1] & 0x40) != 0;
	fake_of(o)->prefetch_ok = (data[1] & 0x40) != 0;
	fake_of(o)->submit_rc = (flags & 0x80) ? -ENOMEM : 0;
	if (flags & 0x10)
		hl_lu_reset(lus[which], NULL);

	done_calls = 0;
	hl_scsi_cmd_exec(&cmd);
	fake_drain(o);

	if (done_calls != 1)
		abort();
	if (cmd.data_in_len > cmd.data_len || (cmd.data_in_len && !cmd.data_in))
		abort();
	if (cmd.sense_len > HL_SENSE_MAX)
		abort();
	if (cmd.status == HL_SAM_CHECK_CONDITION && cmd.sense_len < 8)
		abort();
	if (cmd.status == HL_SAM_GOOD && cmd.sense_len)
		abort();
	if (flags & 0x20)
		hl_scsi_nexus_gone(&map, nexus);
	return 0;
}
