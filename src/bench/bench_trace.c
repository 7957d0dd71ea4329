/*
 * bench_trace.c - readers for the block traces hotlun-bench replays: vscsi
 * (VMware vscsiStats-style binary, versions 1 and 2), MSR Cambridge CSV, and
 * plain text with one block number per line. A trace becomes an array of
 * (offset, length, direction) records in memory; timing is not replayed.
 *
 * Every reader checks lengths before it reads and names the file and the
 * record or line when it rejects input.
 */
#include "bench/bench_internal.h"
#include "hotlun/vscsi.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

static int trace_push(struct bench_trace *t, uint64_t off, uint32_t len, bool write)
{
	if (t->n == t->cap) {
		size_t ncap = t->cap ? t->cap * 2 : 4096;
		struct bench_trace_rec *n = realloc(t->recs, ncap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		t->recs = n;
		t->cap = ncap;
	}
	t->recs[t->n].offset = off;
	t->recs[t->n].len = len;
	t->recs[t->n].write = write;
	t->n++;
	if (write)
		t->writes++;
	else
		t->reads++;
	if (off + len > t->max_end)
		t->max_end = off + len;
	return 0;
}

/* How many of the first records look like vscsi version `ver` records. */
static int vscsi_votes(const uint8_t *b, size_t len, int ver)
{
	size_t rs = hl_vscsi_rec_size(ver);
	int votes = 0;

	for (size_t i = 0; i < 4 && (i + 1) * rs <= len; i++) {
		if (!hl_vscsi_is_version(b + i * rs, ver))
			return 0;
		votes++;
	}
	return votes;
}

enum bench_trace_fmt bench_trace_detect(const void *buf, size_t len)
{
	const uint8_t *b = buf;

	if (vscsi_votes(b, len, 1) > 0 || vscsi_votes(b, len, 2) > 0)
		return BENCH_TRACE_VSCSI;

	/* Text: look at the first line that is neither blank nor a comment. */
	size_t i = 0;
	while (i < len) {
		size_t e = i;
		while (e < len && b[e] != '\n')
			e++;
		size_t j = i;
		while (j < e && isspace(b[j]))
			j++;
		if (j < e && b[j] != '#') {
			bool comma = memchr(b + j, ',', e - j) != NULL;
			if (comma)
				return BENCH_TRACE_MSR;
			for (size_t k = j; k < e; k++)
				if (!isdigit(b[k]) && !isspace(b[k]))
					return BENCH_TRACE_AUTO;
			return BENCH_TRACE_BLOCKS;
		}
		i = e + 1;
	}
	return BENCH_TRACE_AUTO;
}

static int parse_vscsi(const uint8_t *b, size_t len, struct bench_trace *t, char *err,
                       size_t errlen)
{
	int ver = vscsi_votes(b, len, 1) ? 1 : vscsi_votes(b, len, 2) ? 2 : 0;
	size_t rs = hl_vscsi_rec_size(ver);

	if (!ver) {
		snprintf(err, errlen, "not a vscsi v1/v2 trace");
		return -EINVAL;
	}
	for (size_t i = 0; i + rs <= len; i += rs) {
		struct hl_vscsi_rec r;

		hl_vscsi_decode(b + i, ver, &r);
		if (r.version >> 8 != (unsigned)ver) {
			snprintf(err, errlen, "record %zu: version field 0x%04x is not v%d", i / rs,
			         r.version, ver);
			return -EINVAL;
		}
		enum hl_trace_dir dir = hl_trace_scsi_dir(r.op & 0xff);
		if (dir == HL_TRACE_OTHER || r.nbytes == 0 || r.lba > (UINT64_MAX >> 10)) {
			t->skipped++;
			continue;
		}
		int rc = trace_push(t, r.lba * 512, r.nbytes, dir == HL_TRACE_WRITE);
		if (rc)
			return rc;
	}
	if (len % rs)
		t->skipped++; /* a torn last record */
	return 0;
}

/* Parse one unsigned decimal field; advances *p past it. */
static bool parse_u64_field(const char **p, const char *end, uint64_t *out)
{
	const char *s = *p;
	uint64_t v = 0;

	while (s < end && (*s == ' ' || *s == '\t'))
		s++;
	const char *start = s;
	while (s < end && *s >= '0' && *s <= '9') {
		unsigned d = (unsigned)(*s - '0');
		if (v > (UINT64_MAX - d) / 10)
			return false;
		v = v * 10 + d;
		s++;
	}
	if (s == start)
		return false;
	while (s < end && (*s == ' ' || *s == '\t' || *s == '\r'))
		s++;
	*p = s;
	*out = v;
	return true;
}

/* Split an MSR line into its comma-separated fields (at most max). */
static unsigned split_fields(const char *s, const char *end, const char **f, size_t *fl,
                             unsigned max)
{
	unsigned n = 0;

	while (n < max) {
		const char *c = memchr(s, ',', (size_t)(end - s));
		const char *fe = c ? c : end;
		f[n] = s;
		fl[n] = (size_t)(fe - s);
		n++;
		if (!c)
			break;
		s = c + 1;
	}
	return n;
}

static int parse_text(const char *b, size_t len, enum bench_trace_fmt fmt, uint32_t block_size,
                      struct bench_trace *t, char *err, size_t errlen)
{
	size_t lineno = 0;
	const char *end = b + len;

	while (b < end) {
		const char *e = memchr(b, '\n', (size_t)(end - b));
		if (!e)
			e = end;
		lineno++;
		const char *s = b;
		b = e + 1;
		while (s < e && isspace((unsigned char)*s))
			s++;
		const char *le = e;
		while (le > s && isspace((unsigned char)le[-1]))
			le--;
		if (s == le || *s == '#')
			continue;

		if (fmt == BENCH_TRACE_BLOCKS) {
			uint64_t blk;
			const char *p = s;
			if (!parse_u64_field(&p, le, &blk) || p != le) {
				snprintf(err, errlen, "line %zu: not a block number", lineno);
				return -EINVAL;
			}
			if (blk > UINT64_MAX / block_size - 1) {
				snprintf(err, errlen, "line %zu: block number too large", lineno);
				return -ERANGE;
			}
			int rc = trace_push(t, blk * block_size, block_size, false);
			if (rc)
				return rc;
			continue;
		}

		/* MSR: Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime */
		const char *f[8];
		size_t fl[8];
		unsigned nf = split_fields(s, le, f, fl, 8);
		uint64_t ts, off, size;
		const char *p = f[0];

		if (!parse_u64_field(&p, f[0] + fl[0], &ts) || p != f[0] + fl[0]) {
			if (lineno == 1) /* a header line */
				continue;
			snprintf(err, errlen, "line %zu: timestamp is not a number", lineno);
			return -EINVAL;
		}
		if (nf < 6) {
			snprintf(err, errlen, "line %zu: %u fields, MSR has 7", lineno, nf);
			return -EINVAL;
		}
		bool write;
		if (fl[3] == 4 && strncasecmp(f[3], "Read", 4) == 0) {
			write = false;
		} else if (fl[3] == 5 && strncasecmp(f[3], "Write", 5) == 0) {
			write = true;
		} else {
			snprintf(err, errlen, "line %zu: type is neither Read nor Write", lineno);
			return -EINVAL;
		}
		p = f[4];
		if (!parse_u64_field(&p, f[4] + fl[4], &off) || p != f[4] + fl[4]) {
			snprintf(err, errlen, "line %zu: offset is not a number", lineno);
			return -EINVAL;
		}
		p = f[5];
		if (!parse_u64_field(&p, f[5] + fl[5], &size) || p != f[5] + fl[5]) {
			snprintf(err, errlen, "line %zu: size is not a number", lineno);
			return -EINVAL;
		}
		if (size == 0 || size > UINT32_MAX || off > UINT64_MAX - size) {
			t->skipped++;
			continue;
		}
		int rc = trace_push(t, off, (uint32_t)size, write);
		if (rc)
			return rc;
	}
	return 0;
}

int bench_trace_parse(const void *buf, size_t len, enum bench_trace_fmt fmt, uint32_t block_size,
                      struct bench_trace *t, char *err, size_t errlen)
{
	if (fmt == BENCH_TRACE_AUTO)
		fmt = bench_trace_detect(buf, len);
	t->fmt = fmt;
	switch (fmt) {
	case BENCH_TRACE_VSCSI:
		return parse_vscsi(buf, len, t, err, errlen);
	case BENCH_TRACE_MSR:
		return parse_text(buf, len, fmt, block_size, t, err, errlen);
	case BENCH_TRACE_BLOCKS:
		if (block_size == 0) {
			snprintf(err, errlen, "a blocks trace needs a block size");
			return -EINVAL;
		}
		return parse_text(buf, len, fmt, block_size, t, err, errlen);
	default:
		snprintf(err, errlen, "unknown trace format (not vscsi, MSR CSV or block list)");
		return -EINVAL;
	}
}

int bench_trace_load(const char *path, enum bench_trace_fmt fmt, uint32_t block_size,
                     struct bench_trace *t, char *err, size_t errlen)
{
	char msg[256] = "";
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	int rc = 0;

	if (fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return rc;
	}
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		close(fd);
		return rc;
	}
	size_t len = (size_t)st.st_size;
	char *buf = malloc(len ? len : 1);
	if (!buf) {
		close(fd);
		snprintf(err, errlen, "%s: out of memory", path);
		return -ENOMEM;
	}
	size_t got = 0;
	while (got < len) {
		ssize_t n = read(fd, buf + got, len - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -errno : -EIO;
			snprintf(err, errlen, "%s: read failed", path);
			break;
		}
		got += (size_t)n;
	}
	close(fd);
	if (!rc) {
		rc = bench_trace_parse(buf, len, fmt, block_size, t, msg, sizeof(msg));
		if (rc)
			snprintf(err, errlen, "%s: %s", path, msg);
		else if (t->n == 0) {
			snprintf(err, errlen, "%s: no read or write records", path);
			rc = -EINVAL;
		}
	}
	free(buf);
	return rc;
}

int bench_trace_fmt_parse(const char *s, enum bench_trace_fmt *out)
{
	static const char *const names[] = {"auto", "vscsi", "msr", "blocks"};

	for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (strcmp(s, names[i]) == 0) {
			*out = (enum bench_trace_fmt)i;
			return 0;
		}
	}
	return -EINVAL;
}

const char *bench_trace_fmt_name(enum bench_trace_fmt fmt)
{
	switch (fmt) {
	case BENCH_TRACE_VSCSI:
		return "vscsi";
	case BENCH_TRACE_MSR:
		return "msr";
	case BENCH_TRACE_BLOCKS:
		return "blocks";
	default:
		return "auto";
	}
}

void bench_trace_free(struct bench_trace *t)
{
	free(t->recs);
	memset(t, 0, sizeof(*t));
}
