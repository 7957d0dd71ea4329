/*
 * spc.c - the primary (SPC-4) commands a disk answers from its own state:
 * INQUIRY and its VPD pages (8Fh lives in xcopy.c), REPORT LUNS, REQUEST SENSE, TEST UNIT READY,
 * MODE SENSE(6/10), REPORT SUPPORTED OPERATION CODES, and REPORT / SET
 * TARGET PORT GROUPS (ALUA, with the LU's access provider when it has one).
 *
 * Every handler builds the full parameter data in a local buffer and lets
 * scsi_data_in() cut it to the allocation length and the transport's buffer,
 * so a short allocation length never changes what the data says.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "hotlun/event.h"
#include "scsi/scsi_internal.h"

#define VENDOR_ID  "HOTLUN  "
#define PRODUCT_ID "hotlun disk"
#define REVISION   "0001"

#define INQ_STD_LEN 96

static void put_padded(uint8_t *dst, const char *s, size_t n)
{
	size_t l = strlen(s);

	memset(dst, ' ', n);
	memcpy(dst, s, HL_MIN(l, n));
}

/* ---- INQUIRY ---- */

/* The asking port's group, and its state for cmd->lu (active/optimized without a provider). */
static uint16_t asking_tpg(const struct hl_scsi_cmd *cmd)
{
	return cmd->nexus && cmd->nexus->port ? cmd->nexus->port->tpg_id : 0;
}

static enum hl_alua_state asking_state(const struct hl_scsi_cmd *cmd)
{
	const struct hl_lu_access *acc = cmd->lu ? scsi_lu_access(cmd->lu) : NULL;

	if (!acc)
		return HL_ALUA_AO;
	return acc->state(__atomic_load_n(&cmd->lu->access_arg, __ATOMIC_RELAXED), asking_tpg(cmd));
}

/*
 * Byte 0 of INQUIRY data for an LU: peripheral qualifier 000b and a direct
 * access block device, or 001b (not accessible through this port now) when
 * the asking port's group is unavailable (SPC-4 5.15.2.4.5).
 */
static uint8_t inquiry_byte0(const struct hl_scsi_cmd *cmd)
{
	return asking_state(cmd) == HL_ALUA_UNAVAILABLE ? 0x20 : 0x00;
}

static uint32_t inquiry_standard(const struct hl_scsi_cmd *cmd, uint8_t *b)
{
	memset(b, 0, INQ_STD_LEN);
	/* no LU here: peripheral qualifier 011b, device type 1Fh */
	b[0] = cmd->lu ? inquiry_byte0(cmd) : 0x7f;
	b[2] = 0x06;        /* SPC-4 */
	b[3] = 0x10 | 0x02; /* HISUP, response data format 2 */
	b[4] = INQ_STD_LEN - 5;
	/*
	 * TPGS 01b: implicit ALUA only (REPORT TARGET PORT GROUPS); with an
	 * access provider 11b: implicit and explicit (SET TARGET PORT GROUPS).
	 * 3PC: EXTENDED COPY.
	 */
	b[5] = (cmd->lu && scsi_lu_access(cmd->lu) ? 0x30 : 0x10) | 0x08;
	b[7] = 0x02; /* CMDQUE */
	put_padded(b + 8, VENDOR_ID, 8);
	put_padded(b + 16, PRODUCT_ID, 16);
	put_padded(b + 32, REVISION, 4);
	hl_put_be16(b + 58, 0x00a0); /* SAM-5 */
	hl_put_be16(b + 60, 0x0460); /* SPC-4 */
	hl_put_be16(b + 62, 0x04c0); /* SBC-3 */
	return INQ_STD_LEN;
}

/* Pages listed in VPD 00, in ascending order: only fully implemented ones. */
/* Pages listed in VPD 00, in ascending order: only fully implemented ones. B2 only on thin LUs. */
static const uint8_t vpd_pages[] = {0x00, 0x80, 0x83, 0x8f, 0xb0, 0xb1, 0xb2};

static bool vpd_page_offered(const struct hl_lu *lu, uint8_t page)
{
	return page != 0xb2 || lu->thin;
}

static uint32_t vpd_supported(const struct hl_lu *lu, uint8_t *b)
{
	uint16_t n = 0;

	for (unsigned i = 0; i < sizeof(vpd_pages); i++) {
		if (vpd_page_offered(lu, vpd_pages[i]))
			b[4 + n++] = vpd_pages[i];
	}
	hl_put_be16(b + 2, n);
	return 4u + n;
}

static uint32_t vpd_serial(const struct hl_lu *lu, uint8_t *b)
{
	size_t n = strnlen(lu->cfg.serial, sizeof(lu->cfg.serial));

	memcpy(b + 4, lu->cfg.serial, n);
	hl_put_be16(b + 2, (uint16_t)n);
	return 4 + (uint32_t)n;
}

/* One designation descriptor header; returns the pointer to its designator. */
static uint8_t *designator(uint8_t *d, uint8_t code_set, uint8_t assoc, uint8_t type, uint8_t len)
{
	d[0] = code_set; /* protocol identifier 0, PIV 0 */
	d[1] = (uint8_t)(assoc << 4 | type);
	d[2] = 0;
	d[3] = len;
	return d + 4;
}

#define VPD83_MAX 512

static uint32_t vpd_device_id(const struct hl_scsi_cmd *cmd, uint8_t *b)
{
	const struct hl_lu *lu = cmd->lu;
	uint32_t off = 4;
	uint8_t *d;

	/* LU: NAA IEEE registered extended (NAA 6), binary */
	d = designator(b + off, 0x1, 0x0, 0x3, 16);
	memcpy(d, lu->cfg.naa, 16);
	off += 4 + 16;

	const struct hl_scsi_port *port = cmd->nexus ? cmd->nexus->port : NULL;
	if (port) {
		d = designator(b + off, 0x1, 0x1, 0x4, 4); /* relative target port */
		hl_put_be16(d + 2, port->rel_port_id);
		off += 8;
		d = designator(b + off, 0x1, 0x1, 0x5, 4); /* target port group */
		hl_put_be16(d + 2, port->tpg_id);
		off += 8;
		if (port->name && port->name[0]) {
			/* SCSI name string, UTF-8, NUL-terminated, padded to a multiple of 4 */
			size_t n = HL_MIN(strlen(port->name), (size_t)251);
			size_t padded = HL_ALIGN_UP(n + 1, 4);
			d = designator(b + off, 0x3, 0x1, 0x8, (uint8_t)padded);
			memset(d, 0, padded);
			memcpy(d, port->name, n);
			off += 4 + (uint32_t)padded;
		}
	}
	hl_put_be16(b + 2, (uint16_t)(off - 4));
	return off;
}

static uint32_t vpd_block_limits(const struct hl_lu *lu, uint8_t *b)
{
	hl_put_be16(b + 2, 0x3c);
	b[5] = SCSI_CAW_MAX_BLOCKS;                       /* maximum compare and write length */
	hl_put_be16(b + 6, (uint16_t)(1u << lu->lbppbe)); /* optimal transfer length granularity */
	hl_put_be32(b + 8, HL_SCSI_MAX_XFER / lu->block_size); /* maximum transfer length */
	b[4] = 0x01;                                           /* WSNZ */
	/* optimal transfer length: 0, not reported */
	if (lu->thin) {
		hl_put_be32(b + 20, SCSI_UNMAP_MAX_BLOCKS); /* maximum unmap LBA count */
		hl_put_be32(b + 24, SCSI_UNMAP_MAX_DESC); /* maximum unmap block descriptor count */
		hl_put_be32(b + 28, 1u << lu->lbppbe);    /* optimal unmap granularity */
	}
	hl_put_be64(b + 36, SCSI_WS_MAX_BLOCKS(lu)); /* maximum write same length */
	return 4 + 0x3c;
}

static uint32_t vpd_provisioning(const struct hl_lu *lu, uint8_t *b)
{
	hl_put_be16(b + 2, 4);
	/* LBPU, LBPWS, LBPWS10, LBPRZ; no anchors, no threshold */
	b[5] = 0x80 | 0x40 | 0x20 | (lu->lbprz ? 0x04 : 0);
	b[6] = 0x02; /* provisioning type: thin */
	return 8;
}

static uint32_t vpd_block_characteristics(const struct hl_lu *lu, uint8_t *b)
{
	hl_put_be16(b + 2, 0x3c);
	/* medium rotation rate 0: not reported (the origin may be anything); form factor 0 */
	return 4 + 0x3c;
}

enum scsi_exec_result spc_inquiry(struct hl_scsi_cmd *cmd)
{
	uint8_t buf[VPD83_MAX];
	uint32_t alloc = hl_get_be16(cmd->cdb + 3);
	uint8_t page = cmd->cdb[2];
	uint32_t len;

	memset(buf, 0, sizeof(buf));
	if (!(cmd->cdb[1] & 0x01)) {
		if (page) {
			scsi_sense_invalid_cdb(cmd, 2, 7);
			return SCSI_DONE;
		}
		len = inquiry_standard(cmd, buf);
		scsi_data_in(cmd, buf, len, alloc);
		return SCSI_DONE;
	}
	if (!cmd->lu) {
		hl_scsi_set_sense(cmd, HL_SK_ILLEGAL_REQUEST, SCSI_ASC_LU_NOT_SUPPORTED);
		return SCSI_DONE;
	}
	switch (page) {
	case 0x00:
		len = vpd_supported(cmd->lu, buf);
		break;
	case 0x80:
		len = vpd_serial(cmd->lu, buf);
		break;
	case 0x83:
		len = vpd_device_id(cmd, buf);
		break;
	case 0x8f:
		len = scsi_vpd_third_party_copy(buf);
		break;
	case 0xb0:
		len = vpd_block_limits(cmd->lu, buf);
		break;
	case 0xb1:
		len = vpd_block_characteristics(cmd->lu, buf);
		break;
	case 0xb2:
		if (!vpd_page_offered(cmd->lu, page)) {
			scsi_sense_invalid_cdb(cmd, 2, 7);
			return SCSI_DONE;
		}
		len = vpd_provisioning(cmd->lu, buf);
		break;
	default:
		scsi_sense_invalid_cdb(cmd, 2, 7);
		return SCSI_DONE;
	}
	buf[0] = inquiry_byte0(cmd); /* direct access block device */
	buf[1] = page;
	scsi_data_in(cmd, buf, len, alloc);
	return SCSI_DONE;
}

/* ---- REPORT LUNS ---- */

enum scsi_exec_result spc_report_luns(struct hl_scsi_cmd *cmd)
{
	uint8_t buf[8 + 8 * HL_SCSI_MAX_LUNS];
	uint32_t alloc = hl_get_be32(cmd->cdb + 6);
	uint8_t select = cmd->cdb[2];
	uint32_t n = 0;

	if (alloc < 16) {
		scsi_sense_invalid_cdb(cmd, 6, -1);
		return SCSI_DONE;
	}
	if (select != 0x00 && select != 0x01 && select != 0x02) {
		scsi_sense_invalid_cdb(cmd, 2, -1);
		return SCSI_DONE;
	}
	/*
	 * The nexus gets the new inventory (SAM-5 5.14, LUICLR in SPC-4): the
	 * condition is cleared before the map is read, so a change made meanwhile
	 * (its map stored before its unit attention is queued) is either in this
	 * list or reported again, never lost.
	 */
	if (cmd->nexus)
		scsi_ua_clear_map(cmd->map, cmd->lu, cmd->nexus->id,
		                  SCSI_ASC_REPORTED_LUNS_CHANGED);
	memset(buf, 0, sizeof(buf));
	/* select 1 asks for well known LUs only: there are none */
	if (select != 0x01) {
		for (unsigned lun = 0; lun < HL_SCSI_MAX_LUNS; lun++) {
			bool present =
			    cmd->map ? cmd->map->lu[lun] != NULL : (cmd->lu && cmd->lun == lun);
			if (!present)
				continue;
			/* peripheral device addressing: bus 0, LUN in byte 1 */
			buf[8 + 8 * n + 1] = (uint8_t)lun;
			n++;
		}
	}
	hl_put_be32(buf, 8 * n);
	scsi_data_in(cmd, buf, 8 + 8 * n, alloc);
	return SCSI_DONE;
}

/* ---- REQUEST SENSE ---- */

enum scsi_exec_result spc_request_sense(struct hl_scsi_cmd *cmd)
{
	uint8_t buf[HL_SENSE_MAX];
	uint8_t len = 0;
	bool desc = cmd->cdb[1] & 0x01;
	uint32_t alloc = cmd->cdb[4];
	uint8_t asc, ascq;

	memset(buf, 0, sizeof(buf));
	if (!cmd->lu) {
		scsi_sense_build(buf, &len, desc, HL_SK_ILLEGAL_REQUEST, SCSI_ASC_LU_NOT_SUPPORTED,
		                 false, 0);
	} else if (scsi_ua_report(cmd, &asc, &ascq)) {
		/* SPC-4 5.14: REQUEST SENSE reports and clears the oldest unit attention */
		scsi_sense_build(buf, &len, desc, HL_SK_UNIT_ATTENTION, asc, ascq, false, 0);
	} else {
		scsi_sense_build(buf, &len, desc, HL_SK_NO_SENSE, SCSI_ASC_NO_ADDITIONAL, false, 0);
	}
	scsi_data_in(cmd, buf, len, alloc);
	return SCSI_DONE;
}

enum scsi_exec_result spc_test_unit_ready(struct hl_scsi_cmd *cmd)
{
	scsi_set_good(cmd);
	return SCSI_DONE;
}

/* ---- MODE SENSE ---- */

enum { PC_CURRENT = 0, PC_CHANGEABLE = 1, PC_DEFAULT = 2, PC_SAVED = 3 };

/* Each builder writes its page at p and returns its length; changeable values are all 0. */
static uint32_t page_caching(const struct hl_lu *lu, int pc, uint8_t *p)
{
	p[0] = 0x08;
	p[1] = 0x12;
	if (pc != PC_CHANGEABLE)
		p[2] = lu->cfg.write_cache ? 0x04 : 0x00; /* WCE; RCD 0: reads may be cached */
	return 20;
}

static uint32_t page_control(const struct hl_lu *lu, int pc, uint8_t *p)
{
	p[0] = 0x0a;
	p[1] = 0x0a;
	if (pc != PC_CHANGEABLE) {
		p[3] = 0x10; /* QUEUE ALGORITHM MODIFIER 1: unrestricted reordering */
		hl_put_be16(p + 8, 0xffff); /* busy timeout period: unlimited */
	}
	return 12;
}

static uint32_t page_iec(const struct hl_lu *lu, int pc, uint8_t *p)
{
	p[0] = 0x1c;
	p[1] = 0x0a;
	/* no informational exceptions are reported: MRIE 0, everything off */
	return 12;
}

static const struct {
	uint8_t page;
	uint32_t (*build)(const struct hl_lu *lu, int pc, uint8_t *p);
} mode_pages[] = {
    {0x08, page_caching},
    {0x0a, page_control},
    {0x1c, page_iec},
};

enum scsi_exec_result spc_mode_sense(struct hl_scsi_cmd *cmd)
{
	const struct hl_lu *lu = cmd->lu;
	bool ten = cmd->cdb[0] == 0x5a;
	bool dbd = cmd->cdb[1] & 0x08;
	bool llbaa = ten && (cmd->cdb[1] & 0x10);
	int pc = cmd->cdb[2] >> 6;
	uint8_t page = cmd->cdb[2] & 0x3f;
	uint8_t subpage = cmd->cdb[3];
	uint32_t alloc = ten ? hl_get_be16(cmd->cdb + 7) : cmd->cdb[4];
	uint8_t buf[512];
	uint32_t hdr = ten ? 8 : 4;
	uint32_t off = hdr;
	bool found = false;

	if (pc == PC_SAVED) {
		hl_scsi_set_sense(cmd, HL_SK_ILLEGAL_REQUEST, SCSI_ASC_SAVING_NOT_SUPP);
		return SCSI_DONE;
	}
	/* no page here has subpages: only subpage 0 and "all subpages" exist */
	if (subpage != 0x00 && subpage != 0xff) {
		scsi_sense_invalid_cdb(cmd, 3, -1);
		return SCSI_DONE;
	}
	memset(buf, 0, sizeof(buf));
	if (!dbd) {
		uint64_t blocks = lu->num_blocks;
		uint8_t *bd = buf + off;
		if (llbaa) {
			hl_put_be64(bd, blocks);
			hl_put_be32(bd + 12, lu->block_size);
			off += 16;
		} else {
			hl_put_be32(bd, blocks > UINT32_MAX ? UINT32_MAX : (uint32_t)blocks);
			hl_put_be24(bd + 5, lu->block_size);
			off += 8;
		}
	}
	uint32_t bd_len = off - hdr;
	for (unsigned i = 0; i < HL_ARRAY_SIZE(mode_pages); i++) {
		if (page != 0x3f && page != mode_pages[i].page)
			continue;
		off += mode_pages[i].build(lu, pc, buf + off);
		found = true;
	}
	if (!found) {
		scsi_sense_invalid_cdb(cmd, 2, 5);
		return SCSI_DONE;
	}
	/* device-specific parameter: WP, DPOFUA (DPO and FUA are honoured) */
	uint8_t dsp = 0x10 | (lu->cfg.read_only ? 0x80 : 0);
	if (ten) {
		hl_put_be16(buf, (uint16_t)(off - 2));
		buf[3] = dsp;
		buf[4] = llbaa && !dbd ? 0x01 : 0x00; /* LONGLBA */
		hl_put_be16(buf + 6, (uint16_t)bd_len);
	} else {
		buf[0] = (uint8_t)(off - 1);
		buf[2] = dsp;
		buf[3] = (uint8_t)bd_len;
	}
	scsi_data_in(cmd, buf, off, alloc);
	return SCSI_DONE;
}

/* ---- MODE SELECT ---- */

/*
 * Nothing is changeable (MODE SENSE's changeable values are all 0): WCE
 * cannot be honoured off, buffered origins always cache writes until
 * SYNCHRONIZE CACHE or FUA. So MODE SELECT accepts exactly what MODE SENSE
 * reports as current (what an initiator writes back after reading it) and
 * rejects any change with INVALID FIELD IN PARAMETER LIST pointing at the
 * first byte that differs.
 */
enum scsi_exec_result spc_mode_select(struct hl_scsi_cmd *cmd)
{
	const struct hl_lu *lu = cmd->lu;
	bool ten = cmd->cdb[0] == 0x55;
	uint32_t plen = ten ? hl_get_be16(cmd->cdb + 7) : cmd->cdb[4];
	uint32_t hdr = ten ? 8 : 4;
	const uint8_t *d = cmd->data;
	uint8_t cur[64];

	cmd->xfer_len = plen;
	if (cmd->cdb[1] & 0x01) { /* SP: pages cannot be saved */
		scsi_sense_invalid_cdb(cmd, 1, 0);
		return SCSI_DONE;
	}
	if (!scsi_param_list_start(cmd, plen, hdr))
		return SCSI_DONE;
	/* header: MODE DATA LENGTH and the device-specific parameter are reserved here */
	uint32_t medium = ten ? 2 : 1;
	if (d[medium] != 0) {
		scsi_sense_invalid_param(cmd, (uint16_t)medium, -1);
		return SCSI_DONE;
	}
	bool longlba = ten && (d[4] & 0x01);
	uint32_t bd_len = ten ? hl_get_be16(d + 6) : d[3];
	uint32_t bd_size = longlba ? 16 : 8;
	if (bd_len % bd_size || bd_len > bd_size || hdr + bd_len > plen) {
		scsi_sense_invalid_param(cmd, (uint16_t)(ten ? 6 : 3), -1);
		return SCSI_DONE;
	}
	if (bd_len) {
		/* one block descriptor: the number of blocks may be 0 (unchanged) or the
		 * current one, the block length must be the current one */
		const uint8_t *bd = d + hdr;
		uint64_t nb = longlba ? hl_get_be64(bd) : hl_get_be32(bd);
		uint64_t cur_nb = longlba ? lu->num_blocks : HL_MIN(lu->num_blocks, UINT32_MAX);
		uint32_t bl = longlba ? hl_get_be32(bd + 12)
		                      : (uint32_t)bd[5] << 16 | (uint32_t)bd[6] << 8 | bd[7];
		if (nb != 0 && nb != cur_nb) {
			scsi_sense_invalid_param(cmd, (uint16_t)hdr, -1);
			return SCSI_DONE;
		}
		if (bl != lu->block_size) {
			scsi_sense_invalid_param(cmd, (uint16_t)(hdr + (longlba ? 12 : 5)), -1);
			return SCSI_DONE;
		}
	}
	for (uint32_t off = hdr + bd_len; off < plen;) {
		if (plen - off < 2) {
			hl_scsi_set_sense(cmd, HL_SK_ILLEGAL_REQUEST, SCSI_ASC_PARAM_LIST_LEN);
			return SCSI_DONE;
		}
		const uint8_t *pg = d + off;
		uint8_t code = pg[0] & 0x3f;
		uint32_t len = 2u + pg[1];
		uint32_t cur_len = 0;
		if (pg[0] & 0x40) { /* SPF: no page here has subpages */
			scsi_sense_invalid_param(cmd, (uint16_t)off, 6);
			return SCSI_DONE;
		}
		for (unsigned i = 0; i < HL_ARRAY_SIZE(mode_pages); i++) {
			if (mode_pages[i].page == code) {
				memset(cur, 0, sizeof(cur));
				cur_len = mode_pages[i].build(lu, PC_CURRENT, cur);
			}
		}
		if (!cur_len) {
			scsi_sense_invalid_param(cmd, (uint16_t)off, 5);
			return SCSI_DONE;
		}
		if (len != cur_len) {
			scsi_sense_invalid_param(cmd, (uint16_t)(off + 1), -1);
			return SCSI_DONE;
		}
		if (off + len > plen) {
			hl_scsi_set_sense(cmd, HL_SK_ILLEGAL_REQUEST, SCSI_ASC_PARAM_LIST_LEN);
			return SCSI_DONE;
		}
		/* byte 0 bit 7 (PS) is reserved in MODE SELECT: not compared */
		for (uint32_t i = 2; i < len; i++) {
			if (pg[i] != cur[i]) {
				scsi_sense_invalid_param(cmd, (uint16_t)(off + i), -1);
				return SCSI_DONE;
			}
		}
		off += len;
	}
	scsi_set_good(cmd);
	return SCSI_DONE;
}

/* ---- REPORT SUPPORTED OPERATION CODES ---- */

#define RSOC_TIMEOUTS_LEN 12

static uint32_t put_timeouts(uint8_t *p)
{
	memset(p, 0, RSOC_TIMEOUTS_LEN);
	hl_put_be16(p, 0x0a);
	/* nominal and recommended timeouts 0: not specified */
	return RSOC_TIMEOUTS_LEN;
}

static uint32_t put_all_descriptor(uint8_t *p, const struct scsi_cmd_desc *d, bool has_sa,
                                   bool rctd)
{
	memset(p, 0, 8);
	p[0] = d->usage[0];
	hl_put_be16(p + 2, has_sa ? d->sa : 0);
	p[5] = (uint8_t)((rctd ? 0x02 : 0) | (has_sa ? 0x01 : 0));
	hl_put_be16(p + 6, d->cdb_len);
	return 8 + (rctd ? put_timeouts(p + 8) : 0);
}

/* One-command format; d NULL: not supported. */
static uint32_t put_one_command(uint8_t *p, const struct scsi_cmd_desc *d, bool rctd)
{
	memset(p, 0, 4);
	if (!d) {
		p[1] = 0x01; /* not supported */
		return 4;
	}
	p[1] = (uint8_t)((rctd ? 0x80 : 0) | 0x03); /* supported, conforming to a standard */
	hl_put_be16(p + 2, d->cdb_len);
	memcpy(p + 4, d->usage, d->cdb_len);
	uint32_t len = 4 + d->cdb_len;
	if (rctd)
		len += put_timeouts(p + len);
	return len;
}

enum scsi_exec_result spc_report_opcodes(struct hl_scsi_cmd *cmd)
{
	uint8_t buf[2048];
	bool rctd = cmd->cdb[2] & 0x80;
	uint8_t options = cmd->cdb[2] & 0x07;
	uint8_t req_op = cmd->cdb[3];
	uint16_t req_sa = hl_get_be16(cmd->cdb + 4);
	uint32_t alloc = hl_get_be32(cmd->cdb + 6);
	const struct scsi_opcode *op = &scsi_disk_ops[req_op];
	const struct scsi_cmd_desc *d = NULL;
	uint32_t len;

	memset(buf, 0, sizeof(buf));
	switch (options) {
	case 0: {
		uint32_t off = 4;
		for (unsigned o = 0; o < 256; o++) {
			const struct scsi_opcode *e = &scsi_disk_ops[o];
			if (scsi_cmd_avail(e->cmd, cmd->lu))
				off += put_all_descriptor(buf + off, e->cmd, false, rctd);
			for (unsigned i = 0; i < e->n_sa; i++) {
				if (scsi_cmd_avail(&e->sa[i], cmd->lu))
					off += put_all_descriptor(buf + off, &e->sa[i], true, rctd);
			}
		}
		hl_put_be32(buf, off - 4);
		scsi_data_in(cmd, buf, off, alloc);
		return SCSI_DONE;
	}
	case 1: /* by opcode; an opcode with service actions needs option 2 */
		if (op->n_sa) {
			scsi_sense_invalid_cdb(cmd, 2, 2);
			return SCSI_DONE;
		}
		d = scsi_cmd_lookup(cmd->lu, req_op, 0);
		break;
	case 2: /* by opcode and service action; an opcode without them is an error */
		if (op->cmd) {
			scsi_sense_invalid_cdb(cmd, 2, 2);
			return SCSI_DONE;
		}
		d = scsi_cmd_lookup(cmd->lu, req_op, req_sa);
		break;
	case 3: /* either */
		d = (op->cmd && req_sa != 0) ? NULL : scsi_cmd_lookup(cmd->lu, req_op, req_sa);
		break;
	default:
		scsi_sense_invalid_cdb(cmd, 2, 2);
		return SCSI_DONE;
	}
	len = put_one_command(buf, d, rctd);
	scsi_data_in(cmd, buf, len, alloc);
	return SCSI_DONE;
}

/* ---- REPORT TARGET PORT GROUPS (MAINTENANCE IN / 0Ah) ---- */

#define RTPG_MAX_PORTS 64
/* SUP bits of a target port group descriptor: T_SUP, U_SUP, S_SUP, AN_SUP, AO_SUP */
#define RTPG_SUP_ALL 0x8f

struct rtpg_port {
	uint16_t tpg, rel;
};

/* The asking nexus's port first, then those of every other nexus the LU has seen. */
static unsigned rtpg_local_ports(struct hl_scsi_cmd *cmd, struct rtpg_port *ports)
{
	struct hl_lu *lu = cmd->lu;
	const struct hl_scsi_port *me = cmd->nexus ? cmd->nexus->port : NULL;
	struct scsi_lu_nexus *ln;
	unsigned n = 0;

	ports[n].tpg = me ? me->tpg_id : 1;
	ports[n].rel = me ? me->rel_port_id : 1;
	n++;
	pthread_mutex_lock(&lu->lock);
	hl_list_for_each_entry(ln, &lu->nexuses, link)
	{
		bool seen = !ln->tpg_id || !ln->rel_port;
		for (unsigned i = 0; i < n && !seen; i++)
			seen = ports[i].tpg == ln->tpg_id && ports[i].rel == ln->rel_port;
		if (!seen && n < RTPG_MAX_PORTS) {
			ports[n].tpg = ln->tpg_id;
			ports[n].rel = ln->rel_port;
			n++;
		}
	}
	pthread_mutex_unlock(&lu->lock);
	return n;
}

/*
 * Without an access provider (a lone gateway): one target port group per
 * iSCSI portal group (TPG id = TPGT, relative port id = TPGT), every port
 * active/optimized, the only state offered, so a host with paths through
 * several portals uses them all.
 */
static uint32_t rtpg_lone(const struct rtpg_port *ports, unsigned n, uint8_t *buf, uint32_t off)
{
	bool done[RTPG_MAX_PORTS] = {false};

	for (unsigned i = 0; i < n; i++) {
		if (done[i])
			continue;
		uint8_t *g = buf + off;
		g[0] = 0x00; /* PREF 0, asymmetric access state 0: active/optimized */
		g[1] = 0x01; /* AO_SUP */
		hl_put_be16(g + 2, ports[i].tpg);
		g[5] = 0x00; /* status code: no transition */
		off += 8;
		uint8_t count = 0;
		for (unsigned j = i; j < n; j++) {
			if (done[j] || ports[j].tpg != ports[i].tpg)
				continue;
			done[j] = true;
			hl_put_be16(buf + off + 2, ports[j].rel);
			off += 4;
			count++;
		}
		g[7] = count;
	}
	return off;
}

/*
 * With an access provider (several gateways): the groups it lists, one per
 * gateway, each with its state for this LU. A group lists the ports of this
 * gateway that the LU has seen in it; a group with none here (another
 * gateway's) lists one port, the asking port's twin there: the port that
 * gateway numbers (hl_scsi_port_ids) for the asking port's portal group tag
 * (the low byte of its relative port id), since every gateway runs the same
 * targets with the same portal group tags (docs/compliance.md, "ALUA").
 */
static uint32_t rtpg_groups(struct hl_scsi_cmd *cmd, const struct hl_lu_access *acc,
                            const struct rtpg_port *ports, unsigned n, uint8_t *buf, uint32_t off)
{
	struct hl_alua_group g[HL_ALUA_GROUPS_MAX];
	const struct hl_scsi_port *me = cmd->nexus ? cmd->nexus->port : NULL;
	uint16_t my_rel = me ? me->rel_port_id : 1;
	unsigned ng;

	memset(g, 0, sizeof(g));
	ng = acc->groups(__atomic_load_n(&cmd->lu->access_arg, __ATOMIC_RELAXED), g,
	                 HL_ALUA_GROUPS_MAX);
	ng = HL_MIN(ng, (unsigned)HL_ALUA_GROUPS_MAX);
	for (unsigned i = 0; i < ng; i++) {
		uint8_t *d = buf + off;
		d[0] = (uint8_t)((g[i].pref ? 0x80 : 0) | (g[i].state & 0x0f));
		d[1] = RTPG_SUP_ALL;
		hl_put_be16(d + 2, g[i].id);
		d[5] = g[i].status;
		off += 8;
		uint8_t count = 0;
		for (unsigned j = 0; j < n; j++) {
			if (ports[j].tpg != g[i].id)
				continue;
			hl_put_be16(buf + off + 2, ports[j].rel);
			off += 4;
			count++;
		}
		if (!count) {
			uint16_t twin_rel, twin_tpg;
			hl_scsi_port_ids(g[i].id, my_rel & 0xff, &twin_rel, &twin_tpg);
			hl_put_be16(buf + off + 2, twin_rel);
			off += 4;
			count++;
		}
		d[7] = count;
	}
	return off;
}

enum scsi_exec_result spc_report_tpgs(struct hl_scsi_cmd *cmd)
{
	const struct hl_lu_access *acc = scsi_lu_access(cmd->lu);
	bool extended = (cmd->cdb[1] >> 5) == 1;
	uint32_t alloc = hl_get_be32(cmd->cdb + 6);
	struct rtpg_port ports[RTPG_MAX_PORTS];
	uint8_t buf[8 + RTPG_MAX_PORTS * 12 + HL_ALUA_GROUPS_MAX * 12];
	uint32_t off = extended ? 8 : 4;
	unsigned n = rtpg_local_ports(cmd, ports);

	memset(buf, 0, sizeof(buf));
	off = acc ? rtpg_groups(cmd, acc, ports, n, buf, off) : rtpg_lone(ports, n, buf, off);
	hl_put_be32(buf, off - 4);
	if (extended) {
		void *arg = acc ? __atomic_load_n(&cmd->lu->access_arg, __ATOMIC_RELAXED) : NULL;
		buf[4] = 0x10; /* FORMAT TYPE 001b */
		/* implicit transition time, 0: none (the provider's, it may change) */
		buf[5] = !acc                   ? 0
		         : acc->transition_time ? acc->transition_time(arg)
		                                : acc->transition_time_s;
	}
	scsi_data_in(cmd, buf, off, alloc);
	return SCSI_DONE;
}

/* ---- SET TARGET PORT GROUPS (MAINTENANCE OUT / 0Ah) ---- */

static bool stpg_state_ok(uint8_t state)
{
	/* the primary states an initiator may ask for; offline (a port's) is not offered */
	return state == HL_ALUA_AO || state == HL_ALUA_ANO || state == HL_ALUA_STANDBY ||
	       state == HL_ALUA_UNAVAILABLE;
}

/* On the command's reactor: the group it asked for is active, or the provider stopped waiting. */
static void stpg_settled(void *arg)
{
	struct hl_scsi_cmd *cmd = arg;

	scsi_set_good(cmd);
	scsi_cmd_complete(cmd);
}

/* The provider's thread (hl_lu_access.settle): back to the command's reactor. */
static void stpg_done(void *cookie)
{
	struct hl_scsi_cmd *cmd = cookie;

	while (hl_reactor_call(cmd->reactor, stpg_settled, cmd) < 0) {
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
}

/*
 * Parameter list: 4 reserved bytes, then one 4-byte descriptor per group
 * (asymmetric access state in byte 0 bits 3:0, target port group in bytes
 * 2-3). Every descriptor is checked before the first reaches the provider,
 * so a malformed list changes nothing (a provider refusing a later one
 * does not undo an earlier one it accepted). The provider only starts the change (an
 * ownership request): the states move later, announced by
 * hl_lu_access_changed, and an initiator polls REPORT TARGET PORT GROUPS.
 */
enum scsi_exec_result spc_set_tpgs(struct hl_scsi_cmd *cmd)
{
	const struct hl_lu_access *acc = scsi_lu_access(cmd->lu);
	uint32_t plen = hl_get_be32(cmd->cdb + 6);
	const uint8_t *d = cmd->data;

	cmd->xfer_len = plen;
	if (!acc) { /* the provider went away after dispatch looked */
		hl_scsi_set_sense(cmd, HL_SK_ILLEGAL_REQUEST, SCSI_ASC_INVALID_OPCODE);
		return SCSI_DONE;
	}
	if (!scsi_param_list_start(cmd, plen, 4))
		return SCSI_DONE;
	if (plen % 4 || (plen - 4) / 4 > HL_ALUA_GROUPS_MAX) {
		hl_scsi_set_sense(cmd, HL_SK_ILLEGAL_REQUEST, SCSI_ASC_PARAM_LIST_LEN);
		return SCSI_DONE;
	}
	for (uint32_t off = 4; off < plen; off += 4) {
		if (d[off] & 0xf0) {
			scsi_sense_invalid_param(cmd, (uint16_t)off, 7);
			return SCSI_DONE;
		}
		if (!stpg_state_ok(d[off] & 0x0f)) {
			scsi_sense_invalid_param(cmd, (uint16_t)off, 3);
			return SCSI_DONE;
		}
		if (d[off + 1]) {
			scsi_sense_invalid_param(cmd, (uint16_t)(off + 1), -1);
			return SCSI_DONE;
		}
		/* one group named twice is an invalid list (SPC-4 6.45) */
		for (uint32_t prev = 4; prev < off; prev += 4) {
			if (hl_get_be16(d + prev + 2) == hl_get_be16(d + off + 2)) {
				scsi_sense_invalid_param(cmd, (uint16_t)(off + 2), -1);
				return SCSI_DONE;
			}
		}
	}
	void *arg = __atomic_load_n(&cmd->lu->access_arg, __ATOMIC_RELAXED);
	int hold = -1; /* the group asked to become active through its own port: held for */
	for (uint32_t off = 4; off < plen; off += 4) {
		uint16_t tpg = hl_get_be16(d + off + 2);
		enum hl_alua_state state = (enum hl_alua_state)(d[off] & 0x0f);
		int rc = acc->set(arg, asking_tpg(cmd), tpg, state);
		if (rc == -EINVAL) {
			/* a state this group cannot take, or a group the provider does not know */
			scsi_sense_invalid_param(cmd, (uint16_t)off, 3);
			return SCSI_DONE;
		}
		if (rc < 0) {
			/* -EBUSY: refused now (SPC-4 5.15.2.5: a failed explicit transition) */
			hl_scsi_set_sense(cmd, HL_SK_HARDWARE_ERROR, SCSI_ASC_STPG_FAILED);
			return SCSI_DONE;
		}
		if ((state == HL_ALUA_AO || state == HL_ALUA_ANO) && tpg == asking_tpg(cmd))
			hold = tpg;
	}
	/* answered once this gateway serves (bounded by the provider): no TRANSITIONING read next */
	if (hold >= 0 && acc->settle && cmd->reactor &&
	    acc->settle(arg, (uint16_t)hold, stpg_done, cmd) == 0)
		return SCSI_PENDING;
	scsi_set_good(cmd);
	return SCSI_DONE;
}
