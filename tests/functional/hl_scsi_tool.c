/*
 * hl_scsi_tool.c - a small libiscsi (sync API) client for the functional
 * tests of the SCSI layer's hypervisor commands: it owns the COMPARE AND
 * WRITE hammer (caw_concurrency.sh) and one-shot persistent reservation
 * commands (pr_restart.sh). Built as a check program; never installed.
 *
 *   hl_scsi_tool caw URL[,URL2] CLIENTS ITERATIONS
 *       CLIENTS threads, each with its own session (alternating between the
 *       URLs), increment a counter in LBA 16 with COMPARE AND WRITE (read,
 *       CAW old -> old + 1, retry on MISCOMPARE) while writing their own
 *       neighbouring block (15, 17, 14, 18, ...) on every round. Checks: the
 *       counter equals the number of successful CAWs, no MISCOMPARE when the
 *       block still held the compared value (the counter only grows, so an
 *       unchanged block proves the miscompare false), each neighbour holds
 *       its owner's last write. Exit 0 when all hold, 1 otherwise.
 *
 *   hl_scsi_tool pr URL ISID OP [ARGS]
 *       One command in a fresh session whose initiator port is fixed by
 *       ISID (a number), so that separate runs are the same I_T nexus.
 *       OP: register KEY SAKEY APTPL | register-all KEY SAKEY (ALL_TG_PT) |
 *           register-ignore SAKEY APTPL | reserve KEY TYPE |
 *           release KEY TYPE | preempt KEY SAKEY TYPE |
 *           preempt-abort KEY SAKEY TYPE | clear KEY | read-keys |
 *           read-rsv | read-full | caps | write LBA | read LBA |
 *           prefetch LBA BLOCKS | read-range LBA BLOCKS |
 *           hammer OTHER N | rtpg
 *       Prints one line: GOOD, CONFLICT, BUSY or CHECK <key>/<asc>/<ascq>
 *       for OUT commands and writes (OUT commands: then " ms=N", the time
 *       it took); for IN commands "gen G keys K1 K2 ...", "gen G type T key
 *       K" (or "gen G none"), "ptpl_c C ptpl_a A sip_c S", read-full
 *       "gen G" then " KEY@REL[*]" per registration (REL 0: all target
 *       ports; * the holder); rtpg (REPORT TARGET PORT GROUPS, extended
 *       header) "format F transition T" then " TPG:STATE" per group.
 *       hammer: N rounds of REGISTER AND IGNORE EXISTING KEY (a new key),
 *       RESERVE (Write Exclusive) and PREEMPT of the key that the nexus
 *       ISID OTHER registered in the same round, then a last REGISTER AND
 *       IGNORE with key 0xf0000 + ISID; prints "hammer good=G gen_ok=1"
 *       where G counts the REGISTER AND IGNOREs and PREEMPTs that
 *       succeeded (each changes PRgeneration by one) and gen_ok says that
 *       every generation it read after one of its own changes was higher
 *       than the one before.
 *       Exit 0 when the command completed (whatever its status), 2 on a
 *       usage or connection error.
 *
 *   hl_scsi_tool lbprz URL LBA
 *       What LBPRZ promises (a LUN of 512-byte blocks): 0xAA over 256
 *       blocks from LBA, WRITE SAME (16) UNMAP of zero data over 8 of them
 *       and UNMAP of 5 others (small, unaligned), then every block reads
 *       back as it must: zeroes where unmapped, 0xAA around. Exit 0 when it
 *       holds, 1 when not, 77 when the LUN does not report LBPRZ.
 *
 *   hl_scsi_tool dump URL LBA BYTES FILE
 *       One READ (16) of BYTES at LBA (512-byte blocks), its data written to
 *       FILE; prints GOOD or CHECK <key>/<asc>/<ascq> and the bytes the
 *       initiator got ("got N"). Exit 0 when the command completed (whatever
 *       its status), 2 on a usage, connection or file error.
 *
 *   hl_scsi_tool xcopy URL INAME NAA from|to OTHER_LBA OWN_LBA BLOCKS
 *       One EXTENDED COPY in a session of initiator INAME to URL's LUN (the
 *       "own" LU): target descriptor 0 is the own LU (its NAA from VPD
 *       83h), 1 the LU named by NAA (32 hex digits); one block-to-block
 *       segment of BLOCKS 512-byte blocks from the other LU at OTHER_LBA to
 *       the own LU at OWN_LBA ("from"), or the other way ("to"). Prints
 *       GOOD or CHECK <key>/<asc>/<ascq> (docs/security.md: a copy target
 *       must be an LU the session may address). Exit 0 when the command
 *       completed (whatever its status), 2 on a usage or connection error.
 *
 *   hl_scsi_tool verify-burst URL CLIENTS BLOCKS
 *       CLIENTS threads, each with its own session, send one VERIFY (16)
 *       with BYTCHK=0 of BLOCKS blocks at once (a barrier after the
 *       logins; client i at LBA i x BLOCKS); a client answered BUSY sends
 *       it again every 100 ms, in the same session, until it is GOOD (at
 *       most 300 times). Prints "first_good G first_busy B busy_total T
 *       good N errors E": G and B count the first answers, T every BUSY,
 *       N the clients that ended GOOD, E other answers or failures. Exit 0
 *       when every client ended GOOD, 1 otherwise, 2 on a usage error.
 *
 *   hl_scsi_tool cached URL
 *       Cache coherence of the commands that change blocks behind the read
 *       path: for UNMAP, WRITE SAME (with and without UNMAP), EXTENDED COPY,
 *       COMPARE AND WRITE and ORWRITE, a 64 KiB range is written and read
 *       until warm (three reads, 200 ms apart, so the cache admits it), then
 *       changed by the command and read back: it must hold the new data.
 *       Prints one line per command; exit 0 when all hold, 1 otherwise.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>

#define CAW_LBA 16
#define BS_MAX  4096

static const char *urls[2];
static int n_urls;
static int block_size = 512;

/* Log in to url as initiator `iname` (ISID from isid when non-zero); NULL on failure. */
static struct iscsi_context *login(const char *url, const char *iname, uint32_t isid, int *lun)
{
	struct iscsi_context *iscsi = iscsi_create_context(iname);
	struct iscsi_url *u;

	if (!iscsi)
		return NULL;
	u = iscsi_parse_full_url(iscsi, url);
	if (!u) {
		fprintf(stderr, "bad URL %s: %s\n", url, iscsi_get_error(iscsi));
		iscsi_destroy_context(iscsi);
		return NULL;
	}
	if (isid)
		iscsi_set_isid_random(iscsi, isid, 0);
	iscsi_set_targetname(iscsi, u->target);
	iscsi_set_session_type(iscsi, ISCSI_SESSION_NORMAL);
	iscsi_set_header_digest(iscsi, ISCSI_HEADER_DIGEST_NONE_CRC32C);
	*lun = u->lun;
	/*
	 * No LUN here: libiscsi would send TEST UNIT READY and fail the login
	 * on a standby gateway's NOT READY; clear_ua() does that part, and PR
	 * commands run on standby paths too.
	 */
	if (iscsi_full_connect_sync(iscsi, u->portal, -1) != 0) {
		fprintf(stderr, "login to %s failed: %s\n", url, iscsi_get_error(iscsi));
		iscsi_destroy_url(u);
		iscsi_destroy_context(iscsi);
		return NULL;
	}
	iscsi_destroy_url(u);
	return iscsi;
}

static void logout(struct iscsi_context *iscsi)
{
	iscsi_logout_sync(iscsi);
	iscsi_destroy_context(iscsi);
}

/* Clear the unit attentions a new session starts with. */
static void clear_ua(struct iscsi_context *iscsi, int lun)
{
	for (int i = 0; i < 8; i++) {
		struct scsi_task *t = iscsi_testunitready_sync(iscsi, lun);
		bool ua = t && t->status == SCSI_STATUS_CHECK_CONDITION &&
		          t->sense.key == SCSI_SENSE_UNIT_ATTENTION;
		if (t)
			scsi_free_scsi_task(t);
		if (!ua)
			return;
	}
}

/* ---------------------------------------------------------------- caw */

struct client {
	pthread_t thread;
	int id;
	int iterations;
	uint64_t lba; /* the neighbour block it owns */
	/* results */
	unsigned long cas_ok, miscompares, false_miscompares, errors;
	uint64_t last_seq;
};

static void fill_pattern(uint8_t *b, int id, uint64_t seq)
{
	for (int i = 0; i < block_size; i += 16) {
		memcpy(b + i, &seq, 8);
		uint64_t tag = 0x484c000000000000ull | (uint64_t)id << 32 | (uint32_t)i;
		memcpy(b + i + 8, &tag, 8);
	}
}

static bool read_block(struct iscsi_context *iscsi, int lun, uint64_t lba, uint8_t *out)
{
	struct scsi_task *t =
	    iscsi_read16_sync(iscsi, lun, lba, (uint32_t)block_size, block_size, 0, 0, 0, 0, 0);
	bool ok = t && t->status == SCSI_STATUS_GOOD && t->datain.size == block_size;

	if (ok)
		memcpy(out, t->datain.data, (size_t)block_size);
	if (t)
		scsi_free_scsi_task(t);
	return ok;
}

static void *client_run(void *arg)
{
	struct client *c = arg;
	char iname[128];
	int lun;
	uint8_t cur[BS_MAX], buf[2 * BS_MAX], nb[BS_MAX];

	snprintf(iname, sizeof(iname), "iqn.2026-11.io.hotlun.test:caw-%d", c->id);
	struct iscsi_context *iscsi = login(urls[c->id % n_urls], iname, 0, &lun);
	if (!iscsi) {
		c->errors++;
		return NULL;
	}
	clear_ua(iscsi, lun);
	for (int it = 0; it < c->iterations && c->errors < 10;) {
		/* a plain write next door, racing the other clients' CAWs */
		fill_pattern(nb, c->id, (uint64_t)it + 1);
		struct scsi_task *t = iscsi_write16_sync(
		    iscsi, lun, c->lba, nb, (uint32_t)block_size, block_size, 0, 0, 0, 0, 0);
		if (!t || t->status != SCSI_STATUS_GOOD)
			c->errors++;
		else
			c->last_seq = (uint64_t)it + 1;
		if (t)
			scsi_free_scsi_task(t);

		if (!read_block(iscsi, lun, CAW_LBA, cur)) {
			c->errors++;
			continue;
		}
		uint64_t v;
		memcpy(&v, cur, 8);
		memcpy(buf, cur, (size_t)block_size);
		memcpy(buf + block_size, cur, (size_t)block_size);
		uint64_t nv = v + 1;
		memcpy(buf + block_size, &nv, 8);
		buf[block_size + 8] = (uint8_t)c->id;
		t = iscsi_compareandwrite_sync(iscsi, lun, CAW_LBA, buf, 2u * (uint32_t)block_size,
		                               block_size, 0, 0, 0, 0, 0);
		if (t && t->status == SCSI_STATUS_GOOD) {
			c->cas_ok++;
			it++;
		} else if (t && t->status == SCSI_STATUS_CHECK_CONDITION &&
		           t->sense.key == SCSI_SENSE_MISCOMPARE) {
			c->miscompares++;
			uint8_t now[BS_MAX];
			uint64_t nowv;
			/* the counter only grows: if it still reads v, nobody changed it */
			if (read_block(iscsi, lun, CAW_LBA, now)) {
				memcpy(&nowv, now, 8);
				if (nowv == v)
					c->false_miscompares++;
			}
		} else {
			fprintf(stderr, "client %d: COMPARE AND WRITE status %d sense %x/%04x\n",
			        c->id, t ? t->status : -1, t ? t->sense.key : 0,
			        t ? t->sense.ascq : 0);
			c->errors++;
		}
		if (t)
			scsi_free_scsi_task(t);
	}
	logout(iscsi);
	return NULL;
}

/* ---- verify-burst ---- */

struct burst {
	pthread_t thread;
	int id;
	uint32_t blocks;
	int first;  /* SCSI status of the first answer, -1: none */
	int busy;   /* BUSY answers */
	bool good;  /* ended GOOD */
	bool error; /* another answer, or no session */
};

static pthread_barrier_t burst_go;

static int verify16_bytchk0(struct iscsi_context *iscsi, int lun, uint64_t lba, uint32_t blocks)
{
	unsigned char cdb[16] = {0x8f}; /* BYTCHK 0: no data-out, the target reads the range */
	struct scsi_task *t;
	int status;

	for (int i = 0; i < 8; i++)
		cdb[2 + i] = (unsigned char)(lba >> (56 - 8 * i));
	for (int i = 0; i < 4; i++)
		cdb[10 + i] = (unsigned char)(blocks >> (24 - 8 * i));
	t = scsi_create_task(16, cdb, SCSI_XFER_NONE, 0);
	if (!t)
		return -1;
	if (!iscsi_scsi_command_sync(iscsi, lun, t, NULL)) {
		scsi_free_scsi_task(t);
		return -1;
	}
	status = t->status;
	scsi_free_scsi_task(t);
	return status;
}

static void *burst_run(void *arg)
{
	struct burst *b = arg;
	char iname[96];
	int lun;

	snprintf(iname, sizeof(iname), "iqn.2026-11.io.hotlun.test:burst-%d", b->id);
	struct iscsi_context *iscsi = login(urls[0], iname, 0, &lun);
	if (iscsi)
		clear_ua(iscsi, lun);
	pthread_barrier_wait(&burst_go);
	if (!iscsi) {
		b->error = true;
		return NULL;
	}
	for (int tries = 0; tries < 300; tries++) {
		int st = verify16_bytchk0(iscsi, lun, (uint64_t)b->id * b->blocks, b->blocks);
		if (b->first == -1)
			b->first = st;
		if (st == SCSI_STATUS_GOOD) {
			b->good = true;
			break;
		}
		if (st != SCSI_STATUS_BUSY) {
			b->error = true;
			break;
		}
		b->busy++;
		usleep(100000);
	}
	logout(iscsi);
	return NULL;
}

static int cmd_verify_burst(int nclients, uint32_t blocks)
{
	struct burst b[64];
	int first_good = 0, first_busy = 0, busy = 0, good = 0, errors = 0;

	if (nclients < 1 || nclients > 64 || blocks < 1)
		return 2;
	pthread_barrier_init(&burst_go, NULL, (unsigned)nclients);
	for (int i = 0; i < nclients; i++) {
		memset(&b[i], 0, sizeof(b[i]));
		b[i].id = i;
		b[i].blocks = blocks;
		b[i].first = -1;
		if (pthread_create(&b[i].thread, NULL, burst_run, &b[i]) != 0)
			return 2;
	}
	for (int i = 0; i < nclients; i++) {
		pthread_join(b[i].thread, NULL);
		first_good += b[i].first == SCSI_STATUS_GOOD;
		first_busy += b[i].first == SCSI_STATUS_BUSY;
		busy += b[i].busy;
		good += b[i].good;
		errors += b[i].error;
	}
	pthread_barrier_destroy(&burst_go);
	printf("first_good %d first_busy %d busy_total %d good %d errors %d\n", first_good,
	       first_busy, busy, good, errors);
	return good == nclients && errors == 0 ? 0 : 1;
}

static int cmd_caw(int nclients, int iterations)
{
	struct client cl[64];
	uint8_t zero[BS_MAX] = {0}, b[BS_MAX];
	int lun, rc = 0;

	if (nclients < 1 || nclients > 64 || iterations < 1)
		return 2;
	struct iscsi_context *iscsi =
	    login(urls[0], "iqn.2026-11.io.hotlun.test:caw-main", 0, &lun);
	if (!iscsi)
		return 2;
	clear_ua(iscsi, lun);
	struct scsi_task *t = iscsi_readcapacity16_sync(iscsi, lun);
	if (t && t->status == SCSI_STATUS_GOOD) {
		struct scsi_readcapacity16 *rc16 = scsi_datain_unmarshall(t);
		if (rc16 && rc16->block_length <= BS_MAX)
			block_size = (int)rc16->block_length;
	}
	if (t)
		scsi_free_scsi_task(t);
	/* the counter starts at 0 */
	t = iscsi_write16_sync(iscsi, lun, CAW_LBA, zero, (uint32_t)block_size, block_size, 0, 0, 0,
	                       0, 0);
	if (!t || t->status != SCSI_STATUS_GOOD) {
		fprintf(stderr, "cannot zero the counter block\n");
		return 2;
	}
	scsi_free_scsi_task(t);

	for (int i = 0; i < nclients; i++) {
		memset(&cl[i], 0, sizeof(cl[i]));
		cl[i].id = i;
		cl[i].iterations = iterations;
		cl[i].lba =
		    i % 2 == 0 ? CAW_LBA - 1 - (uint64_t)i / 2 : CAW_LBA + 1 + (uint64_t)i / 2;
		if (pthread_create(&cl[i].thread, NULL, client_run, &cl[i]) != 0)
			return 2;
	}
	unsigned long ok = 0, mis = 0, fmis = 0, err = 0;
	for (int i = 0; i < nclients; i++) {
		pthread_join(cl[i].thread, NULL);
		ok += cl[i].cas_ok;
		mis += cl[i].miscompares;
		fmis += cl[i].false_miscompares;
		err += cl[i].errors;
	}
	uint64_t v = 0;
	if (!read_block(iscsi, lun, CAW_LBA, b)) {
		fprintf(stderr, "cannot read the counter\n");
		rc = 1;
	}
	memcpy(&v, b, 8);
	printf("clients %d successful_caw %lu miscompares %lu false_miscompares %lu errors %lu "
	       "counter %" PRIu64 "\n",
	       nclients, ok, mis, fmis, err, v);
	if (v != ok || ok != (unsigned long)nclients * (unsigned long)iterations) {
		fprintf(stderr, "LOST UPDATE: counter %" PRIu64 ", successful CAWs %lu\n", v, ok);
		rc = 1;
	}
	if (fmis || err)
		rc = 1;
	for (int i = 0; i < nclients; i++) {
		uint8_t want[BS_MAX];
		fill_pattern(want, i, cl[i].last_seq);
		if (!read_block(iscsi, lun, cl[i].lba, b) || memcmp(b, want, (size_t)block_size)) {
			fprintf(stderr,
			        "neighbour block %" PRIu64 " of client %d is not its last write\n",
			        cl[i].lba, i);
			rc = 1;
		}
	}
	logout(iscsi);
	return rc;
}

/* ---------------------------------------------------------------- cached */

#define COH_BLOCKS 128

static struct iscsi_context *coh_iscsi;
static void print_status(const struct scsi_task *t);
static int coh_lun;

static bool coh_status(struct scsi_task *t, const char *what)
{
	bool ok = t && t->status == SCSI_STATUS_GOOD;

	if (!ok)
		fprintf(stderr, "%s: status %d sense %x/%04x\n", what, t ? t->status : -1,
		        t ? t->sense.key : 0, t ? t->sense.ascq : 0);
	if (t)
		scsi_free_scsi_task(t);
	return ok;
}

static bool coh_write(uint64_t lba, uint8_t v, uint32_t n)
{
	uint8_t *b = malloc((size_t)n * 512);
	if (!b)
		return false;
	memset(b, v, (size_t)n * 512);
	bool ok =
	    coh_status(iscsi_write16_sync(coh_iscsi, coh_lun, lba, b, n * 512, 512, 0, 0, 0, 0, 0),
	               "WRITE(16)");
	free(b);
	return ok;
}

/* Read [lba, +n) and check every byte is v. */
static bool coh_check(uint64_t lba, uint8_t v, uint32_t n)
{
	struct scsi_task *t =
	    iscsi_read16_sync(coh_iscsi, coh_lun, lba, n * 512, 512, 0, 0, 0, 0, 0);
	bool ok = t && t->status == SCSI_STATUS_GOOD && t->datain.size == (int)(n * 512);

	for (int i = 0; ok && i < t->datain.size; i++) {
		if (t->datain.data[i] != v) {
			fprintf(stderr, "LBA %" PRIu64 " byte %d: 0x%02x, want 0x%02x (stale?)\n",
			        lba + (uint64_t)i / 512, i % 512, t->datain.data[i], v);
			ok = false;
		}
	}
	if (t)
		scsi_free_scsi_task(t);
	return ok;
}

static bool coh_warm(uint64_t lba, uint8_t v, uint32_t n)
{
	for (int i = 0; i < 3; i++) {
		if (!coh_check(lba, v, n))
			return false;
		usleep(200 * 1000);
	}
	return true;
}

static bool coh_report(const char *what, bool ok)
{
	printf("%s %s\n", what, ok ? "coherent" : "STALE-OR-ERROR");
	return ok;
}

/* The LU's NAA designator from VPD 83 (16 bytes); false when there is none. */
static bool coh_naa(uint8_t *naa)
{
	struct scsi_task *t = iscsi_inquiry_sync(coh_iscsi, coh_lun, 1, 0x83, 255);
	bool found = false;

	if (t && t->status == SCSI_STATUS_GOOD) {
		const uint8_t *d = t->datain.data;
		int len = t->datain.size;
		for (int off = 4; off + 4 <= len && !found; off += 4 + d[off + 3]) {
			if ((d[off + 1] & 0x3f) == 0x03 && d[off + 3] == 16 && off + 20 <= len) {
				memcpy(naa, d + off + 4, 16);
				found = true;
			}
		}
	}
	if (t)
		scsi_free_scsi_task(t);
	return found;
}

static int cmd_cached(void)
{
	uint8_t blk[512], caw[1024], naa[16];
	int fails = 0;

	coh_iscsi = login(urls[0], "iqn.2026-11.io.hotlun.test:cached", 0, &coh_lun);
	if (!coh_iscsi)
		return 2;
	clear_ua(coh_iscsi, coh_lun);

	/* UNMAP: the LU reports LBPRZ, so unmapped blocks read back as zeroes */
	uint64_t r = 2048;
	bool ok = coh_write(r, 0xa1, COH_BLOCKS) && coh_warm(r, 0xa1, COH_BLOCKS);
	struct unmap_list ul = {.lba = r, .num = COH_BLOCKS};
	ok = ok && coh_status(iscsi_unmap_sync(coh_iscsi, coh_lun, 0, 0, &ul, 1), "UNMAP");
	fails += !coh_report("UNMAP", ok && coh_check(r, 0x00, COH_BLOCKS));

	/* WRITE SAME(16), data */
	r += 2048;
	memset(blk, 0xb2, sizeof(blk));
	ok = coh_write(r, 0xa2, COH_BLOCKS) && coh_warm(r, 0xa2, COH_BLOCKS);
	ok = ok && coh_status(iscsi_writesame16_sync(coh_iscsi, coh_lun, r, blk, 512, COH_BLOCKS, 0,
	                                             0, 0, 0),
	                      "WRITE SAME(16)");
	fails += !coh_report("WRITE_SAME", ok && coh_check(r, 0xb2, COH_BLOCKS));

	/* WRITE SAME(16) with UNMAP and a zero block */
	r += 2048;
	memset(blk, 0, sizeof(blk));
	ok = coh_write(r, 0xa3, COH_BLOCKS) && coh_warm(r, 0xa3, COH_BLOCKS);
	ok = ok && coh_status(iscsi_writesame16_sync(coh_iscsi, coh_lun, r, blk, 512, COH_BLOCKS, 0,
	                                             1, 0, 0),
	                      "WRITE SAME(16) UNMAP");
	fails += !coh_report("WRITE_SAME_UNMAP", ok && coh_check(r, 0x00, COH_BLOCKS));

	/* EXTENDED COPY into a warm destination */
	r += 2048;
	uint64_t src = r + 1024;
	ok = coh_naa(naa) && coh_write(src, 0xc4, COH_BLOCKS) && coh_write(r, 0xa4, COH_BLOCKS) &&
	     coh_warm(r, 0xa4, COH_BLOCKS);
	if (ok) {
		uint8_t par[16 + 32 + 28];
		memset(par, 0, sizeof(par));
		par[1] = 2 << 3; /* list identifier usage 10b: no results held */
		par[3] = 32;
		par[11] = 28;
		par[16] = 0xe4;
		par[20] = 0x01;
		par[21] = 0x03;
		par[23] = 16;
		memcpy(par + 24, naa, 16);
		par[46] = 0x02; /* block size 512 */
		uint8_t *sd = par + 48;
		sd[0] = 0x02;
		sd[3] = 0x18;
		sd[10] = COH_BLOCKS >> 8;
		sd[11] = COH_BLOCKS & 0xff;
		for (int i = 0; i < 8; i++) {
			sd[12 + i] = (uint8_t)(src >> (56 - 8 * i));
			sd[20 + i] = (uint8_t)(r >> (56 - 8 * i));
		}
		struct iscsi_data data = {.size = sizeof(par), .data = par};
		ok = coh_status(iscsi_extended_copy_sync(coh_iscsi, coh_lun, &data),
		                "EXTENDED COPY");
	}
	fails += !coh_report("EXTENDED_COPY", ok && coh_check(r, 0xc4, COH_BLOCKS));

	/* COMPARE AND WRITE on a warm block */
	r += 2048;
	memset(caw, 0xa5, 512);
	memset(caw + 512, 0xb5, 512);
	ok = coh_write(r, 0xa5, 1) && coh_warm(r, 0xa5, 1);
	ok = ok && coh_status(iscsi_compareandwrite_sync(coh_iscsi, coh_lun, r, caw, 1024, 512, 0,
	                                                 0, 0, 0, 0),
	                      "COMPARE AND WRITE");
	fails += !coh_report("COMPARE_AND_WRITE", ok && coh_check(r, 0xb5, 1));

	/* ORWRITE on a warm range */
	r += 2048;
	ok = coh_write(r, 0x0f, COH_BLOCKS) && coh_warm(r, 0x0f, COH_BLOCKS);
	if (ok) {
		uint8_t *b = malloc(COH_BLOCKS * 512);
		ok = b != NULL;
		if (b) {
			memset(b, 0x30, COH_BLOCKS * 512);
			ok = coh_status(iscsi_orwrite_sync(coh_iscsi, coh_lun, r, b,
			                                   COH_BLOCKS * 512, 512, 0, 0, 0, 0, 0),
			                "ORWRITE");
			free(b);
		}
	}
	fails += !coh_report("ORWRITE", ok && coh_check(r, 0x3f, COH_BLOCKS));

	logout(coh_iscsi);
	return fails ? 1 : 0;
}

/* ---------------------------------------------------------------- xcopy */

static void put_be64(uint8_t *d, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		d[i] = (uint8_t)(v >> (56 - 8 * i));
}

/* EXTENDED COPY target descriptor (E4h): the LU with this NAA, 512-byte blocks. */
static void put_target(uint8_t *d, const uint8_t *naa)
{
	memset(d, 0, 32);
	d[0] = 0xe4;
	d[4] = 0x01; /* binary */
	d[5] = 0x03; /* LU association, NAA */
	d[7] = 16;
	memcpy(d + 8, naa, 16);
	d[30] = 0x02; /* block size 512 */
}

static bool parse_naa(const char *hex, uint8_t *naa)
{
	if (strlen(hex) != 32)
		return false;
	for (int i = 0; i < 16; i++) {
		unsigned v;
		if (sscanf(hex + 2 * i, "%2x", &v) != 1)
			return false;
		naa[i] = (uint8_t)v;
	}
	return true;
}

static int cmd_xcopy(const char *iname, const char *naa_hex, bool from, uint64_t other_lba,
                     uint64_t own_lba, uint32_t blocks)
{
	uint8_t other[16], own[16], par[16 + 64 + 28];

	if (!parse_naa(naa_hex, other) || blocks > 0xffff) {
		fprintf(stderr, "bad NAA or block count\n");
		return 2;
	}
	coh_iscsi = login(urls[0], iname, 0, &coh_lun);
	if (!coh_iscsi)
		return 2;
	clear_ua(coh_iscsi, coh_lun);
	if (!coh_naa(own)) {
		fprintf(stderr, "no NAA designator in VPD 83h\n");
		logout(coh_iscsi);
		return 2;
	}
	memset(par, 0, sizeof(par));
	par[1] = 2 << 3; /* list identifier usage 10b: no results held */
	par[3] = 64;
	par[11] = 28;
	put_target(par + 16, own);
	put_target(par + 48, other);
	uint8_t *sd = par + 80;
	sd[0] = 0x02;
	sd[3] = 0x18;
	sd[4 + 1] = from ? 1 : 0; /* source descriptor */
	sd[6 + 1] = from ? 0 : 1; /* destination descriptor */
	sd[10] = (uint8_t)(blocks >> 8);
	sd[11] = (uint8_t)blocks;
	put_be64(sd + 12, from ? other_lba : own_lba);
	put_be64(sd + 20, from ? own_lba : other_lba);
	struct iscsi_data data = {.size = sizeof(par), .data = par};
	struct scsi_task *t = iscsi_extended_copy_sync(coh_iscsi, coh_lun, &data);
	print_status(t);
	if (t)
		scsi_free_scsi_task(t);
	logout(coh_iscsi);
	return t ? 0 : 2;
}

/* ---------------------------------------------------------------- pr */

static void print_status(const struct scsi_task *t)
{
	if (!t)
		printf("ERROR\n");
	else if (t->status == SCSI_STATUS_GOOD)
		printf("GOOD\n");
	else if (t->status == SCSI_STATUS_RESERVATION_CONFLICT)
		printf("CONFLICT\n");
	else if (t->status == SCSI_STATUS_BUSY)
		printf("BUSY\n");
	else if (t->status == SCSI_STATUS_CHECK_CONDITION)
		printf("CHECK %x/%02x/%02x\n", t->sense.key, (t->sense.ascq >> 8) & 0xff,
		       t->sense.ascq & 0xff);
	else
		printf("STATUS %d\n", t->status);
}

static uint64_t num(const char *s)
{
	return strtoull(s, NULL, 0);
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint32_t be32(const uint8_t *d)
{
	return (uint32_t)d[0] << 24 | (uint32_t)d[1] << 16 | (uint32_t)d[2] << 8 | d[3];
}

static uint64_t be64(const uint8_t *d)
{
	return (uint64_t)be32(d) << 32 | be32(d + 4);
}

static bool is_ua(const struct scsi_task *t)
{
	return t && t->status == SCSI_STATUS_CHECK_CONDITION &&
	       t->sense.key == SCSI_SENSE_UNIT_ATTENTION;
}

/*
 * PERSISTENT RESERVE OUT, again after a unit attention (the other client's
 * changes queue them for this nexus: REGISTRATIONS PREEMPTED...); NULL on
 * a transport error.
 */
static struct scsi_task *prout(struct iscsi_context *iscsi, int lun, int sa, int type, uint64_t key,
                               uint64_t sa_key, bool all_tg_pt)
{
	struct scsi_persistent_reserve_out_basic p;
	struct scsi_task *t = NULL;

	memset(&p, 0, sizeof(p));
	p.reservation_key = key;
	p.service_action_reservation_key = sa_key;
	p.all_tg_pt = all_tg_pt;
	for (int i = 0; i < 8; i++) {
		if (t)
			scsi_free_scsi_task(t);
		t = iscsi_persistent_reserve_out_sync(iscsi, lun, sa, 0, type, &p);
		if (!is_ua(t))
			break;
	}
	return t;
}

/* PRgeneration by READ KEYS (again after a unit attention), or -1. */
static int64_t generation(struct iscsi_context *iscsi, int lun)
{
	struct scsi_task *t = NULL;
	int64_t g = -1;

	for (int i = 0; i < 8; i++) {
		if (t)
			scsi_free_scsi_task(t);
		t = iscsi_persistent_reserve_in_sync(iscsi, lun, SCSI_PERSISTENT_RESERVE_READ_KEYS,
		                                     8);
		if (!is_ua(t))
			break;
	}
	if (t && t->status == SCSI_STATUS_GOOD && t->datain.size >= 4)
		g = be32(t->datain.data);
	if (t)
		scsi_free_scsi_task(t);
	return g;
}

/* hammer: see the file comment. */
static int pr_hammer(struct iscsi_context *iscsi, int lun, uint32_t isid, uint32_t other, int n)
{
	unsigned good = 0, errors = 0;
	int64_t last = -1;
	bool gen_ok = true;

	for (int i = 0; i < n; i++) {
		uint64_t mine = (uint64_t)isid << 32 | (uint64_t)(i + 1);
		uint64_t theirs = (uint64_t)other << 32 | (uint64_t)(i + 1);
		int sas[3] = {SCSI_PERSISTENT_RESERVE_REGISTER_AND_IGNORE_EXISTING_KEY,
		              SCSI_PERSISTENT_RESERVE_RESERVE, SCSI_PERSISTENT_RESERVE_PREEMPT};
		for (int k = 0; k < 3; k++) {
			struct scsi_task *t = prout(iscsi, lun, sas[k], k ? 1 : 0, k ? mine : 0,
			                            k == 0   ? mine
			                            : k == 2 ? theirs
			                                     : 0,
			                            false);
			if (!t) {
				errors++;
				continue;
			}
			bool changes = k != 1 && t->status == SCSI_STATUS_GOOD;
			if (t->status != SCSI_STATUS_GOOD &&
			    t->status != SCSI_STATUS_RESERVATION_CONFLICT &&
			    t->status != SCSI_STATUS_BUSY) {
				fprintf(stderr, "round %d, service action %d: ", i, sas[k]);
				fflush(stdout);
				print_status(t);
				errors++;
			}
			scsi_free_scsi_task(t);
			if (!changes)
				continue;
			good++;
			int64_t g = generation(iscsi, lun);
			if (g <= last)
				gen_ok = false;
			last = g;
		}
	}
	struct scsi_task *t =
	    prout(iscsi, lun, SCSI_PERSISTENT_RESERVE_REGISTER_AND_IGNORE_EXISTING_KEY, 0, 0,
	          0xf0000 + isid, false);
	if (t && t->status == SCSI_STATUS_GOOD)
		good++;
	else
		errors++;
	if (t)
		scsi_free_scsi_task(t);
	printf("hammer good=%u gen_ok=%d errors=%u\n", good, gen_ok ? 1 : 0, errors);
	return 0;
}

static int cmd_pr(uint32_t isid, int argc, char **argv)
{
	char iname[128];
	int lun;

	if (argc < 1)
		return 2;
	snprintf(iname, sizeof(iname), "iqn.2026-11.io.hotlun.test:pr-%" PRIu32, isid);
	struct iscsi_context *iscsi = login(urls[0], iname, isid, &lun);
	if (!iscsi)
		return 2;
	clear_ua(iscsi, lun);

	const char *op = argv[0];
	struct scsi_persistent_reserve_out_basic p;
	struct scsi_task *t = NULL;
	int sa = -1, type = 0;

	memset(&p, 0, sizeof(p));
	bool all_tg_pt = false;
	if (!strcmp(op, "hammer") && argc == 3) {
		int rc = pr_hammer(iscsi, lun, isid, (uint32_t)num(argv[1]), (int)num(argv[2]));
		logout(iscsi);
		return rc;
	}
	if (!strcmp(op, "register-all") && argc == 3) {
		sa = SCSI_PERSISTENT_RESERVE_REGISTER;
		p.reservation_key = num(argv[1]);
		p.service_action_reservation_key = num(argv[2]);
		all_tg_pt = true;
	} else if (!strcmp(op, "register") && argc == 4) {
		sa = SCSI_PERSISTENT_RESERVE_REGISTER;
		p.reservation_key = num(argv[1]);
		p.service_action_reservation_key = num(argv[2]);
		p.aptpl = (uint8_t)num(argv[3]);
	} else if (!strcmp(op, "register-ignore") && argc == 3) {
		sa = SCSI_PERSISTENT_RESERVE_REGISTER_AND_IGNORE_EXISTING_KEY;
		p.service_action_reservation_key = num(argv[1]);
		p.aptpl = (uint8_t)num(argv[2]);
	} else if ((!strcmp(op, "reserve") || !strcmp(op, "release")) && argc == 3) {
		sa = !strcmp(op, "reserve") ? SCSI_PERSISTENT_RESERVE_RESERVE
		                            : SCSI_PERSISTENT_RESERVE_RELEASE;
		p.reservation_key = num(argv[1]);
		type = (int)num(argv[2]);
	} else if ((!strcmp(op, "preempt") || !strcmp(op, "preempt-abort")) && argc == 4) {
		sa = !strcmp(op, "preempt") ? SCSI_PERSISTENT_RESERVE_PREEMPT
		                            : SCSI_PERSISTENT_RESERVE_PREEMPT_AND_ABORT;
		p.reservation_key = num(argv[1]);
		p.service_action_reservation_key = num(argv[2]);
		type = (int)num(argv[3]);
	} else if (!strcmp(op, "clear") && argc == 2) {
		sa = SCSI_PERSISTENT_RESERVE_CLEAR;
		p.reservation_key = num(argv[1]);
	}
	if (sa >= 0) {
		p.all_tg_pt = all_tg_pt;
		uint64_t t0 = mono_ms();
		t = iscsi_persistent_reserve_out_sync(iscsi, lun, sa, 0, type, &p);
		uint64_t ms = mono_ms() - t0;
		if (t && t->status == SCSI_STATUS_GOOD)
			printf("GOOD ms=%" PRIu64 "\n", ms);
		else
			print_status(t);
	} else if (!strcmp(op, "read-full")) {
		t = iscsi_persistent_reserve_in_sync(iscsi, lun, 3, 4096);
		if (!t || t->status != SCSI_STATUS_GOOD) {
			print_status(t);
		} else {
			const uint8_t *d = t->datain.data;
			uint32_t n = (uint32_t)t->datain.size, len = n >= 8 ? be32(d + 4) : 0;
			printf("gen %" PRIu32, n >= 4 ? be32(d) : 0);
			for (uint32_t o = 8; o + 24 <= 8 + len && o + 24 <= n;) {
				const uint8_t *x = d + o;
				printf(" 0x%" PRIx64 "@%u%s", be64(x),
				       (unsigned)(x[18] << 8 | x[19]), x[12] & 1 ? "*" : "");
				o += 24 + be32(x + 20);
			}
			printf("\n");
		}
	} else if (!strcmp(op, "read-keys") || !strcmp(op, "read-rsv") || !strcmp(op, "caps")) {
		int in_sa = !strcmp(op, "read-keys")  ? SCSI_PERSISTENT_RESERVE_READ_KEYS
		            : !strcmp(op, "read-rsv") ? SCSI_PERSISTENT_RESERVE_READ_RESERVATION
		                                      : SCSI_PERSISTENT_RESERVE_REPORT_CAPABILITIES;
		t = iscsi_persistent_reserve_in_sync(iscsi, lun, in_sa, 1024);
		if (!t || t->status != SCSI_STATUS_GOOD) {
			print_status(t);
		} else {
			const uint8_t *d = t->datain.data;
			int n = t->datain.size;
			uint32_t gen = n >= 4 ? (uint32_t)d[0] << 24 | (uint32_t)d[1] << 16 |
			                            (uint32_t)d[2] << 8 | d[3]
			                      : 0;
			uint32_t len = n >= 8 ? (uint32_t)d[4] << 24 | (uint32_t)d[5] << 16 |
			                            (uint32_t)d[6] << 8 | d[7]
			                      : 0;
			if (!strcmp(op, "caps")) {
				printf("ptpl_c %d ptpl_a %d sip_c %d\n", n > 2 ? d[2] & 1 : -1,
				       n > 3 ? d[3] & 1 : -1, n > 2 ? (d[2] >> 3) & 1 : -1);
			} else if (!strcmp(op, "read-keys")) {
				printf("gen %" PRIu32 " keys", gen);
				for (uint32_t o = 8; o + 8 <= 8 + len && (int)o + 8 <= n; o += 8) {
					uint64_t k = 0;
					for (int i = 0; i < 8; i++)
						k = k << 8 | d[o + (uint32_t)i];
					printf(" 0x%" PRIx64, k);
				}
				printf("\n");
			} else if (len >= 16 && n >= 24) {
				uint64_t k = 0;
				for (int i = 0; i < 8; i++)
					k = k << 8 | d[8 + i];
				printf("gen %" PRIu32 " type %d key 0x%" PRIx64 "\n", gen,
				       d[21] & 0x0f, k);
			} else {
				printf("gen %" PRIu32 " none\n", gen);
			}
		}
	} else if (!strcmp(op, "rtpg") && argc == 1) {
		/* REPORT TARGET PORT GROUPS, extended header (MAINTENANCE IN / 0Ah, format 001b) */
		unsigned char cdb[12] = {0xa3, 0x2a, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0};
		t = scsi_create_task(sizeof(cdb), cdb, SCSI_XFER_READ, 1024);
		if (t && !iscsi_scsi_command_sync(iscsi, lun, t, NULL)) {
			scsi_free_scsi_task(t);
			t = NULL;
		}
		if (t && t->status != SCSI_STATUS_GOOD) {
			print_status(t);
		} else if (t) {
			const uint8_t *d = t->datain.data;
			int n = t->datain.size;
			if (n < 8) {
				printf("short %d\n", n);
			} else {
				printf("format %u transition %u", (unsigned)(d[4] >> 4 & 7), d[5]);
				for (int off = 8; off + 8 <= n; off += 8 + 4 * d[off + 7])
					printf(" %u:%u", (unsigned)(d[off + 2] << 8 | d[off + 3]),
					       d[off] & 0x0f);
				printf("\n");
			}
		}
	} else if (!strcmp(op, "prefetch") && argc == 3) {
		t = iscsi_prefetch16_sync(iscsi, lun, num(argv[1]), (int)num(argv[2]), 0, 0);
		print_status(t);
	} else if (!strcmp(op, "read-range") && argc == 3) {
		uint32_t n = (uint32_t)num(argv[2]);
		t = iscsi_read16_sync(iscsi, lun, num(argv[1]), n * 512, 512, 0, 0, 0, 0, 0);
		print_status(t);
	} else if ((!strcmp(op, "write") || !strcmp(op, "read")) && argc == 2) {
		uint8_t b[BS_MAX];
		memset(b, 0x5a, sizeof(b));
		if (!strcmp(op, "write"))
			t = iscsi_write16_sync(iscsi, lun, num(argv[1]), b, 512, 512, 0, 0, 0, 0,
			                       0);
		else
			t = iscsi_read16_sync(iscsi, lun, num(argv[1]), 512, 512, 0, 0, 0, 0, 0);
		print_status(t);
	} else {
		fprintf(stderr, "unknown pr operation or wrong arguments: %s\n", op);
		logout(iscsi);
		return 2;
	}
	int rc = t ? 0 : 2;
	if (!t)
		fprintf(stderr, "%s: %s\n", op, iscsi_get_error(iscsi));
	if (t)
		scsi_free_scsi_task(t);
	logout(iscsi);
	return rc;
}

/* ---------------------------------------------------------------- lbprz */

/* The first byte of buf[0, n) that is not c, or -1. */
static long first_not(const uint8_t *buf, size_t n, uint8_t c)
{
	for (size_t i = 0; i < n; i++)
		if (buf[i] != c)
			return (long)i;
	return -1;
}

/*
 * What LBPRZ promises: blocks deallocated by WRITE SAME(16) UNMAP (zero
 * data) and by UNMAP read back as zeroes, however small and unaligned the
 * range, and the blocks around them keep their data. 0xAA is written over
 * 256 blocks from lba; then WRITE SAME unmaps blocks lba+3 .. +10, UNMAP
 * unmaps lba+67 .. +71, and all 256 are read back.
 */
static int cmd_lbprz(uint64_t lba)
{
	enum { N = 256, BS = 512 };
	static uint8_t data[N * BS], zero[BS];
	struct unmap_list ul = {.lba = lba + 67, .num = 5};
	int lun, rc = 0;
	struct iscsi_context *iscsi = login(urls[0], "iqn.2024-01.org.hotlun:tool-lbprz", 0, &lun);
	struct scsi_task *t;

	if (!iscsi)
		return 2;
	clear_ua(iscsi, lun);
	t = iscsi_readcapacity16_sync(iscsi, lun);
	struct scsi_readcapacity16 *rc16 = t ? scsi_datain_unmarshall(t) : NULL;
	if (!rc16 || !rc16->lbprz || rc16->block_length != BS) {
		printf("not an LBPRZ LUN of 512-byte blocks\n");
		rc = 77;
	}
	if (t)
		scsi_free_scsi_task(t);
	if (rc) {
		logout(iscsi);
		return rc;
	}
	memset(data, 0xaa, sizeof(data));
	t = iscsi_write16_sync(iscsi, lun, lba, data, sizeof(data), BS, 0, 0, 0, 0, 0);
	printf("write: ");
	print_status(t);
	rc = !t || t->status != SCSI_STATUS_GOOD;
	if (t)
		scsi_free_scsi_task(t);
	t = iscsi_writesame16_sync(iscsi, lun, lba + 3, zero, BS, 8, 0, 1, 0, 0);
	printf("write same unmap: ");
	print_status(t);
	rc |= !t || t->status != SCSI_STATUS_GOOD;
	if (t)
		scsi_free_scsi_task(t);
	t = iscsi_unmap_sync(iscsi, lun, 0, 0, &ul, 1);
	printf("unmap: ");
	print_status(t);
	rc |= !t || t->status != SCSI_STATUS_GOOD;
	if (t)
		scsi_free_scsi_task(t);
	t = iscsi_read16_sync(iscsi, lun, lba, sizeof(data), BS, 0, 0, 0, 0, 0);
	if (!t || t->status != SCSI_STATUS_GOOD || t->datain.size != (int)sizeof(data)) {
		printf("read back failed\n");
		rc = 1;
	} else {
		/* [0, 3) aa, [3, 11) zero, [11, 67) aa, [67, 72) zero, [72, 256) aa */
		static const struct {
			unsigned from, to;
			uint8_t c;
		} want[] = {{0, 3, 0xaa}, {3, 11, 0}, {11, 67, 0xaa}, {67, 72, 0}, {72, N, 0xaa}};
		for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
			long at = first_not(t->datain.data + (size_t)want[i].from * BS,
			                    (size_t)(want[i].to - want[i].from) * BS, want[i].c);
			if (at >= 0) {
				printf("blocks %u..%u: byte %ld is not 0x%02x\n", want[i].from,
				       want[i].to - 1, at, want[i].c);
				rc = 1;
			}
		}
	}
	if (t)
		scsi_free_scsi_task(t);
	printf("%s\n", rc ? "lbprz FAILED" : "lbprz ok");
	logout(iscsi);
	return rc;
}

/* ---------------------------------------------------------------- dump */

static int cmd_dump(uint64_t lba, uint32_t bytes, const char *path)
{
	int lun;
	struct iscsi_context *iscsi = login(urls[0], "iqn.2024-01.org.hotlun:tool-dump", 0, &lun);
	struct scsi_task *t;
	FILE *f;
	int rc = 0;

	if (!iscsi)
		return 2;
	clear_ua(iscsi, lun);
	t = iscsi_read16_sync(iscsi, lun, lba, bytes, 512, 0, 0, 0, 0, 0);
	if (!t) {
		fprintf(stderr, "read: %s\n", iscsi_get_error(iscsi));
		logout(iscsi);
		return 2;
	}
	print_status(t);
	printf("got %d\n", t->datain.size);
	f = fopen(path, "wb");
	if (!f || (t->datain.size > 0 &&
	           fwrite(t->datain.data, 1, (size_t)t->datain.size, f) != (size_t)t->datain.size))
		rc = 2;
	if (f && fclose(f))
		rc = 2;
	scsi_free_scsi_task(t);
	logout(iscsi);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc >= 3) {
		char *u = strdup(argv[2]);
		char *comma = u ? strchr(u, ',') : NULL;
		if (!u)
			return 2;
		urls[0] = u;
		n_urls = 1;
		if (comma) {
			*comma = '\0';
			urls[1] = comma + 1;
			n_urls = 2;
		}
		if (!strcmp(argv[1], "caw") && argc == 5)
			return cmd_caw(atoi(argv[3]), atoi(argv[4]));
		if (!strcmp(argv[1], "verify-burst") && argc == 5)
			return cmd_verify_burst(atoi(argv[3]), (uint32_t)num(argv[4]));
		if (!strcmp(argv[1], "cached") && argc == 3)
			return cmd_cached();
		if (!strcmp(argv[1], "xcopy") && argc == 9 &&
		    (!strcmp(argv[5], "from") || !strcmp(argv[5], "to")))
			return cmd_xcopy(argv[3], argv[4], !strcmp(argv[5], "from"), num(argv[6]),
			                 num(argv[7]), (uint32_t)num(argv[8]));
		if (!strcmp(argv[1], "lbprz") && argc == 4)
			return cmd_lbprz(num(argv[3]));
		if (!strcmp(argv[1], "dump") && argc == 6)
			return cmd_dump(num(argv[3]), (uint32_t)num(argv[4]), argv[5]);
		if (!strcmp(argv[1], "pr") && argc >= 5)
			return cmd_pr((uint32_t)num(argv[3]), argc - 4, argv + 4);
	}
	fprintf(stderr,
	        "usage: %s caw URL[,URL2] CLIENTS ITERATIONS\n"
	        "       %s pr URL ISID OP [ARGS]\n"
	        "       %s verify-burst URL CLIENTS BLOCKS\n"
	        "       %s cached URL\n"
	        "       %s dump URL LBA BYTES FILE\n"
	        "       %s lbprz URL LBA\n"
	        "       %s xcopy URL INAME NAA from|to OTHER_LBA OWN_LBA BLOCKS\n",
	        argv[0], argv[0], argv[0], argv[0], argv[0], argv[0], argv[0]);
	return 2;
}
