/*
 * sim_trace.c - trace readers for hotlun-sim: vscsi version 1 (32-byte
 * records) and version 2 (40-byte records), MSR Cambridge CSV, and
 * "blocks" (one cache block number per line, each a read of one block).
 * Every reader checks lengths and fields and names the bad line/record.
 */
#include "hotlun/cache.h"
#include "hotlun/vscsi.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"

const char *sim_format_name(enum sim_format f)
{
	switch (f) {
	case SIM_FMT_VSCSI:
		return "vscsi";
	case SIM_FMT_MSR:
		return "msr";
	case SIM_FMT_BLOCKS:
		return "blocks";
	default:
		return "auto";
	}
}

/* Requests a real trace cannot hold (garbage records) are skipped, not replayed. */
#define SIM_MAX_REQ (256u << 20)
#define SIM_MAX_OFF (1ull << 56)

static bool plausible(uint64_t off, uint64_t len)
{
	return len && len <= SIM_MAX_REQ && off < SIM_MAX_OFF && off + len <= SIM_MAX_OFF;
}

static int push(struct sim_trace *t, uint64_t off, uint32_t len, uint16_t lun, bool write,
                bool in_blocks)
{
	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 65536;
		struct sim_req *r = realloc(t->reqs, cap * sizeof(*r));
		if (!r)
			return -ENOMEM;
		t->reqs = r;
		t->cap = cap;
	}
	t->reqs[t->n++] = (struct sim_req){
	    .off = off, .len = len, .lun = lun, .write = write, .in_blocks = in_blocks};
	if (write)
		t->nwrites++;
	else
		t->nreads++;
	return 0;
}

static int load_vscsi(FILE *f, const char *path, struct sim_trace *t)
{
	uint8_t hdr[HL_VSCSI2_REC * 4], rec[HL_VSCSI2_REC];
	size_t got = fread(hdr, 1, sizeof(hdr), f);
	int v1 = 0, v2 = 0, ver, rc;
	size_t rsz;
	uint64_t skipped = 0, nrec = 0;

	/* Tell the versions apart by the version field of the first records. */
	for (size_t i = 0; i < 4; i++) {
		if ((i + 1) * HL_VSCSI1_REC <= got && hl_vscsi_is_version(hdr + i * HL_VSCSI1_REC, 1))
			v1++;
		if ((i + 1) * HL_VSCSI2_REC <= got && hl_vscsi_is_version(hdr + i * HL_VSCSI2_REC, 2))
			v2++;
	}
	if (!v1 && !v2) {
		fprintf(stderr, "hotlun-sim: %s: not a vscsi v1/v2 trace\n", path);
		return -EINVAL;
	}
	ver = v1 >= v2 ? 1 : 2;
	rsz = hl_vscsi_rec_size(ver);
	rewind(f);
	while ((got = fread(rec, 1, rsz, f)) == rsz) {
		struct hl_vscsi_rec r;
		nrec++;
		hl_vscsi_decode(rec, ver, &r);
		enum hl_trace_dir dir = hl_trace_scsi_dir(r.op);
		if (r.version >> 8 != ver) {
			fprintf(stderr, "hotlun-sim: %s: record %" PRIu64 ": bad version 0x%x\n",
			        path, nrec, r.version);
			return -EINVAL;
		}
		if (dir == HL_TRACE_OTHER || r.lba > (UINT64_MAX >> 10) ||
		    !plausible(r.lba * 512, r.nbytes)) {
			skipped++;
			continue;
		}
		rc = push(t, r.lba * 512, r.nbytes, 0, dir == HL_TRACE_WRITE, false);
		if (rc)
			return rc;
	}
	if (got) {
		fprintf(stderr, "hotlun-sim: %s: truncated last record (%zu bytes)\n", path, got);
		return -EINVAL;
	}
	if (skipped)
		fprintf(stderr,
		        "hotlun-sim: %s: skipped %" PRIu64
		        " records (not read/write, or implausible length/offset)\n",
		        path, skipped);
	return 0;
}

/* Lun ids for MSR (hostname, disk) pairs, in order of appearance. */
struct msr_lun {
	char host[32];
	uint64_t disk;
};

static int load_msr(FILE *f, const char *path, struct sim_trace *t)
{
	char line[512];
	struct msr_lun luns[256];
	unsigned nluns = 0;
	uint64_t lineno = 0;
	int rc;

	while (fgets(line, sizeof(line), f)) {
		char *fld[8], *save = NULL, *p;
		int nf = 0;
		lineno++;
		if (!strchr(line, '\n') && !feof(f)) {
			fprintf(stderr, "hotlun-sim: %s:%" PRIu64 ": line too long\n", path,
			        lineno);
			return -EINVAL;
		}
		line[strcspn(line, "\r\n")] = 0;
		if (!line[0])
			continue;
		for (p = strtok_r(line, ",", &save); p && nf < 8; p = strtok_r(NULL, ",", &save))
			fld[nf++] = p;
		if (nf < 6) {
			fprintf(stderr, "hotlun-sim: %s:%" PRIu64 ": expected 7 fields\n", path,
			        lineno);
			return -EINVAL;
		}
		char *end;
		uint64_t disk = strtoull(fld[2], &end, 10);
		if (*end) {
			if (lineno == 1)
				continue; /* a header line */
			fprintf(stderr, "hotlun-sim: %s:%" PRIu64 ": bad disk number\n", path,
			        lineno);
			return -EINVAL;
		}
		bool write;
		if (!strcasecmp(fld[3], "Read"))
			write = false;
		else if (!strcasecmp(fld[3], "Write"))
			write = true;
		else {
			fprintf(stderr, "hotlun-sim: %s:%" PRIu64 ": bad type '%s'\n", path, lineno,
			        fld[3]);
			return -EINVAL;
		}
		uint64_t off = strtoull(fld[4], &end, 10);
		if (*end) {
			fprintf(stderr, "hotlun-sim: %s:%" PRIu64 ": bad offset\n", path, lineno);
			return -EINVAL;
		}
		uint64_t size = strtoull(fld[5], &end, 10);
		if (*end || size > UINT32_MAX) {
			fprintf(stderr, "hotlun-sim: %s:%" PRIu64 ": bad size\n", path, lineno);
			return -EINVAL;
		}
		if (!size)
			continue;
		if (!plausible(off, size)) {
			fprintf(stderr, "hotlun-sim: %s:%" PRIu64 ": implausible offset/size\n",
			        path, lineno);
			return -EINVAL;
		}
		unsigned l;
		for (l = 0; l < nluns; l++)
			if (luns[l].disk == disk && !strncmp(luns[l].host, fld[1], 31))
				break;
		if (l == nluns) {
			if (nluns == 256) {
				fprintf(stderr, "hotlun-sim: %s: more than 256 disks\n", path);
				return -EINVAL;
			}
			snprintf(luns[l].host, sizeof(luns[l].host), "%s", fld[1]);
			luns[l].disk = disk;
			nluns++;
		}
		rc = push(t, off, (uint32_t)size, (uint16_t)l, write, false);
		if (rc)
			return rc;
	}
	return 0;
}

static int load_blocks(FILE *f, const char *path, struct sim_trace *t)
{
	char line[128];
	uint64_t lineno = 0;
	int rc;

	while (fgets(line, sizeof(line), f)) {
		char *end, *p = line;
		lineno++;
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p == '#' || *p == '\n' || *p == '\r' || !*p)
			continue;
		errno = 0;
		uint64_t b = strtoull(p, &end, 10);
		while (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n')
			end++;
		if (errno || end == p || *end || *p == '-' || b > (1ull << 40)) {
			fprintf(stderr, "hotlun-sim: %s:%" PRIu64 ": not a block number\n", path,
			        lineno);
			return -EINVAL;
		}
		if (b > HL_CACHE_MAX_CACHED_NR) {
			/* hotlund never caches these: a replay would count them as misses silently */
			fprintf(stderr,
			        "hotlun-sim: %s:%" PRIu64 ": block %" PRIu64 " is past the %llu blocks "
			        "of a disk that a cache holds (docs/cache-engine.md)\n",
			        path, lineno, b, HL_CACHE_MAX_CACHED_NR + 1);
			return -EINVAL;
		}
		rc = push(t, b, 1, 0, false, true);
		if (rc)
			return rc;
	}
	return 0;
}

int sim_trace_load(const char *path, enum sim_format fmt, struct sim_trace *t)
{
	FILE *f = fopen(path, "rb");
	int rc;

	memset(t, 0, sizeof(*t));
	if (!f) {
		rc = -errno;
		fprintf(stderr, "hotlun-sim: %s: %s\n", path, strerror(errno));
		return rc;
	}
	if (fmt == SIM_FMT_AUTO) {
		uint8_t buf[256];
		size_t n = fread(buf, 1, sizeof(buf), f);
		bool text = true, comma = false;
		for (size_t i = 0; i < n; i++) {
			if (buf[i] == ',')
				comma = true;
			if (buf[i] < 9 || (buf[i] > 13 && buf[i] < 32) || buf[i] > 126)
				text = false;
		}
		fmt = !text ? SIM_FMT_VSCSI : comma ? SIM_FMT_MSR : SIM_FMT_BLOCKS;
		rewind(f);
	}
	t->fmt = fmt;
	switch (fmt) {
	case SIM_FMT_VSCSI:
		rc = load_vscsi(f, path, t);
		break;
	case SIM_FMT_MSR:
		rc = load_msr(f, path, t);
		break;
	default:
		rc = load_blocks(f, path, t);
		break;
	}
	if (!rc && ferror(f)) {
		fprintf(stderr, "hotlun-sim: %s: read error\n", path);
		rc = -EIO;
	}
	fclose(f);
	if (!rc && !t->n) {
		fprintf(stderr, "hotlun-sim: %s: no requests\n", path);
		rc = -EINVAL;
	}
	if (rc)
		sim_trace_free(t);
	return rc;
}

void sim_trace_free(struct sim_trace *t)
{
	free(t->reqs);
	t->reqs = NULL;
	t->n = t->cap = 0;
}
