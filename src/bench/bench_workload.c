/*
 * bench_workload.c - where the next I/O goes: uniform, zipf, hot-set,
 * sequential and trace replay over a byte range of the LUN, with fixed or
 * weighted mixed block sizes and a read/write ratio.
 *
 * Skewed workloads draw a popularity rank, then scatter ranks over the range
 * with a fixed bijection (rank * m + a mod n), so the hot blocks are spread
 * over the LUN the way a real working set is, not packed at LBA 0.
 */
#include "bench/bench_internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- zipf: rejection-inversion sampling (Hormann & Derflinger, 1996) ---- */

/* log1p(x) / x, stable near 0. */
static double helper1(double x)
{
	if (fabs(x) > 1e-8)
		return log1p(x) / x;
	return 1 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
}

/* expm1(x) / x, stable near 0. */
static double helper2(double x)
{
	if (fabs(x) > 1e-8)
		return expm1(x) / x;
	return 1 + x * 0.5 * (1 + x * (1.0 / 3.0) * (1 + 0.25 * x));
}

/* H(x): an antiderivative of h(x) = x^-s that is continuous in s (also at 1). */
static double zipf_H(double s, double x)
{
	double lx = log(x);
	return helper2((1 - s) * lx) * lx;
}

static double zipf_h(double s, double x)
{
	return exp(-s * log(x));
}

static double zipf_Hinv(double s, double x)
{
	double t = x * (1 - s);
	if (t < -1)
		t = -1; /* rounding guard: the true value is never below -1 */
	return exp(helper1(t) * x);
}

int bench_zipf_init(struct bench_zipf *z, uint64_t n, double s)
{
	if (n == 0 || !(s > 0) || !isfinite(s))
		return -EINVAL;
	z->n = n;
	z->s = s;
	z->hx1 = zipf_H(s, 1.5) - 1;
	z->hxn = zipf_H(s, (double)n + 0.5);
	z->sv = 2 - zipf_Hinv(s, zipf_H(s, 2.5) - zipf_h(s, 2));
	return 0;
}

uint64_t bench_zipf_next(const struct bench_zipf *z, struct bench_rng *r)
{
	for (;;) {
		double u = z->hxn + bench_rng_double(r) * (z->hx1 - z->hxn);
		double x = zipf_Hinv(z->s, u);
		double kd = floor(x + 0.5);
		uint64_t k;

		if (kd < 1)
			k = 1;
		else if (kd > (double)z->n)
			k = z->n;
		else
			k = (uint64_t)kd;
		if ((double)k - x <= z->sv ||
		    u >= zipf_H(z->s, (double)k + 0.5) - zipf_h(z->s, (double)k))
			return k;
	}
}

/* ---- argument parsing ---- */

int bench_workload_parse(const char *s, struct bench_workload_spec *spec, char *err, size_t errlen)
{
	char *end;

	if (strcmp(s, "uniform") == 0 || strcmp(s, "random") == 0) {
		spec->kind = BENCH_WL_UNIFORM;
		return 0;
	}
	if (strcmp(s, "seq") == 0 || strcmp(s, "sequential") == 0) {
		spec->kind = BENCH_WL_SEQ;
		return 0;
	}
	if (strncmp(s, "zipf:", 5) == 0) {
		errno = 0;
		double th = strtod(s + 5, &end);
		if (errno || end == s + 5 || *end || !(th > 0) || th > 100) {
			snprintf(err, errlen,
			         "zipf needs an exponent > 0, e.g. zipf:0.9 (got '%s')", s);
			return -EINVAL;
		}
		spec->kind = BENCH_WL_ZIPF;
		spec->theta = th;
		return 0;
	}
	if (strncmp(s, "hotset:", 7) == 0) {
		errno = 0;
		double io = strtod(s + 7, &end);
		if (errno || end == s + 7 || *end != '/')
			goto bad_hot;
		const char *p = end + 1;
		double space = strtod(p, &end);
		if (errno || end == p || *end)
			goto bad_hot;
		if (!(io >= 0 && io <= 100) || !(space > 0 && space < 100))
			goto bad_hot;
		spec->kind = BENCH_WL_HOTSET;
		spec->hot_io_pct = io;
		spec->hot_space_pct = space;
		return 0;
	bad_hot:
		snprintf(
		    err, errlen,
		    "hotset needs IO%%/SPACE%%, e.g. hotset:90/10 (0 <= IO <= 100, 0 < SPACE < "
		    "100; got '%s')",
		    s);
		return -EINVAL;
	}
	if (strncmp(s, "trace:", 6) == 0) {
		const char *p = s + 6;
		const char *colon = strchr(p, ':');
		enum bench_trace_fmt fmt = BENCH_TRACE_AUTO;

		if (colon) {
			char name[16];
			size_t n = (size_t)(colon - p);
			if (n < sizeof(name)) {
				memcpy(name, p, n);
				name[n] = '\0';
				if (bench_trace_fmt_parse(name, &fmt) == 0)
					p = colon + 1;
			}
		}
		if (!*p || strlen(p) >= sizeof(spec->trace_path)) {
			snprintf(err, errlen, "trace needs a file name: trace:[FMT:]FILE");
			return -EINVAL;
		}
		spec->kind = BENCH_WL_TRACE;
		spec->trace_fmt = fmt;
		strcpy(spec->trace_path, p);
		return 0;
	}
	snprintf(err, errlen,
	         "unknown workload '%s' (uniform, zipf:THETA, hotset:IO/SPACE, seq, trace:FILE)",
	         s);
	return -EINVAL;
}

int bench_bs_parse(const char *s, struct bench_workload_spec *spec, char *err, size_t errlen)
{
	char buf[256];
	unsigned n = 0, weighted = 0;
	char *save = NULL;

	if (strlen(s) >= sizeof(buf)) {
		snprintf(err, errlen, "--bs: too long");
		return -EINVAL;
	}
	strcpy(buf, s);
	for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		uint64_t size, w = 1;
		char *colon = strchr(tok, ':');

		if (n == BENCH_MAX_BS) {
			snprintf(err, errlen, "--bs: at most %d sizes", BENCH_MAX_BS);
			return -EINVAL;
		}
		if (colon) {
			*colon = '\0';
			char *end;
			errno = 0;
			unsigned long v = strtoul(colon + 1, &end, 10);
			if (errno || end == colon + 1 || *end || v == 0 || v > 1000000) {
				snprintf(err, errlen, "--bs: bad weight '%s'", colon + 1);
				return -EINVAL;
			}
			w = v;
			weighted++;
		}
		if (hl_parse_size(tok, &size) || size == 0 || size % 512 || size > (16u << 20)) {
			snprintf(err, errlen,
			         "--bs: '%s' is not a size that is a multiple of 512 up to 16M",
			         tok);
			return -EINVAL;
		}
		spec->bs[n].size = (uint32_t)size;
		spec->bs[n].weight = (uint32_t)w;
		n++;
	}
	if (n == 0) {
		snprintf(err, errlen, "--bs: no size given");
		return -EINVAL;
	}
	if (weighted && weighted != n) {
		snprintf(err, errlen, "--bs: give a weight to every size or to none");
		return -EINVAL;
	}
	spec->n_bs = n;
	return 0;
}

const char *bench_bs_format(const struct bench_workload_spec *spec, char *buf, size_t len)
{
	size_t used = 0;
	char sz[32];

	buf[0] = '\0';
	for (unsigned i = 0; i < spec->n_bs && used < len; i++) {
		bench_format_size(spec->bs[i].size, sz, sizeof(sz));
		int w;
		if (spec->n_bs == 1)
			w = snprintf(buf + used, len - used, "%s", sz);
		else
			w = snprintf(buf + used, len - used, "%s%s:%u", i ? "," : "", sz,
			             spec->bs[i].weight);
		if (w < 0)
			break;
		used += (size_t)w;
	}
	return buf;
}

const char *bench_workload_name(const struct bench_workload_spec *spec, char *buf, size_t len)
{
	switch (spec->kind) {
	case BENCH_WL_UNIFORM:
		snprintf(buf, len, "uniform");
		break;
	case BENCH_WL_ZIPF:
		snprintf(buf, len, "zipf:%g", spec->theta);
		break;
	case BENCH_WL_HOTSET:
		snprintf(buf, len, "hotset:%g/%g", spec->hot_io_pct, spec->hot_space_pct);
		break;
	case BENCH_WL_SEQ:
		snprintf(buf, len, "seq");
		break;
	case BENCH_WL_TRACE: {
		const char *base = strrchr(spec->trace_path, '/');
		snprintf(buf, len, "trace:%s", base ? base + 1 : spec->trace_path);
		break;
	}
	}
	return buf;
}

/* ---- the generator ---- */

static uint64_t gcd64(uint64_t a, uint64_t b)
{
	while (b) {
		uint64_t t = a % b;
		a = b;
		b = t;
	}
	return a;
}

int bench_workload_init(struct bench_workload *wl, const struct bench_workload_spec *spec,
                        uint32_t lun_block, uint64_t range_off, uint64_t range_len,
                        const struct bench_trace *trace, char *err, size_t errlen)
{
	memset(wl, 0, sizeof(*wl));
	wl->spec = *spec;
	wl->lun_block = lun_block;
	if (lun_block == 0 || lun_block % 512) {
		snprintf(err, errlen, "LUN block size %u is not a multiple of 512", lun_block);
		return -EINVAL;
	}
	if (range_off % lun_block || range_len % lun_block) {
		snprintf(err, errlen, "range is not a multiple of the LUN block size %u",
		         lun_block);
		return -EINVAL;
	}
	wl->range_off = range_off;
	wl->range_len = range_len;

	if (spec->kind == BENCH_WL_TRACE) {
		if (!trace || trace->n == 0) {
			snprintf(err, errlen, "trace workload without trace records");
			return -EINVAL;
		}
		wl->trace = trace;
		wl->unit = lun_block;
		for (size_t i = 0; i < trace->n; i++) {
			uint64_t l = BENCH_ALIGN_UP(trace->recs[i].len, lun_block);
			if (l > wl->max_len)
				wl->max_len = (uint32_t)BENCH_MIN(l, 16u << 20);
		}
		if (wl->max_len > range_len)
			wl->max_len = (uint32_t)range_len;
		if (wl->max_len == 0) {
			snprintf(err, errlen, "range smaller than one block");
			return -EINVAL;
		}
	} else {
		uint64_t g = 0;
		if (spec->n_bs == 0) {
			snprintf(err, errlen, "no block size");
			return -EINVAL;
		}
		for (unsigned i = 0; i < spec->n_bs; i++) {
			uint32_t sz = spec->bs[i].size;
			if (sz % lun_block) {
				snprintf(err, errlen,
				         "block size %u is not a multiple of the LUN block size %u",
				         sz, lun_block);
				return -EINVAL;
			}
			if (sz > range_len) {
				snprintf(err, errlen, "block size %u is larger than the range", sz);
				return -EINVAL;
			}
			g = gcd64(g, sz);
			if (sz > wl->max_len)
				wl->max_len = sz;
			wl->bs_total_weight += spec->bs[i].weight;
		}
		wl->unit = (uint32_t)g;
	}
	wl->nunits = range_len / wl->unit;
	if (wl->nunits == 0) {
		snprintf(err, errlen, "range smaller than one I/O");
		return -EINVAL;
	}

	/* A multiplier coprime with n makes rank -> unit a bijection. */
	uint64_t n = wl->nunits;
	uint64_t m = (uint64_t)((double)n * 0.6180339887498949) | 1;
	if (m >= n)
		m = 1;
	while (n > 1 && gcd64(m, n) != 1)
		m++;
	wl->perm_mul = n > 1 ? m : 1;
	wl->perm_add = n / 3;

	if (spec->kind == BENCH_WL_ZIPF && bench_zipf_init(&wl->zipf, n, spec->theta)) {
		snprintf(err, errlen, "bad zipf exponent %g", spec->theta);
		return -EINVAL;
	}
	return 0;
}

static uint64_t scatter(const struct bench_workload *wl, uint64_t rank)
{
	return (uint64_t)(((unsigned __int128)rank * wl->perm_mul + wl->perm_add) % wl->nunits);
}

static uint32_t pick_bs(const struct bench_workload *wl, struct bench_rng *r)
{
	if (wl->spec.n_bs == 1)
		return wl->spec.bs[0].size;
	uint64_t x = bench_rng_below(r, wl->bs_total_weight);
	for (unsigned i = 0; i < wl->spec.n_bs; i++) {
		if (x < wl->spec.bs[i].weight)
			return wl->spec.bs[i].size;
		x -= wl->spec.bs[i].weight;
	}
	return wl->spec.bs[wl->spec.n_bs - 1].size;
}

/* Byte offset (relative to the range) of unit u, aligned down to bs and kept inside. */
static uint64_t place(const struct bench_workload *wl, uint64_t u, uint32_t bs)
{
	uint64_t slots = wl->range_len / bs;
	uint64_t slot = u * wl->unit / bs;

	if (slot >= slots)
		slot = slots - 1;
	return slot * bs;
}

void bench_workload_next(struct bench_workload *wl, struct bench_rng *r, struct bench_io *io)
{
	uint64_t rel = 0;
	uint32_t bs;

	if (wl->spec.kind == BENCH_WL_TRACE) {
		const struct bench_trace_rec *rec = &wl->trace->recs[wl->trace_pos];
		uint64_t len = BENCH_ALIGN_UP(rec->len, wl->lun_block);

		if (++wl->trace_pos == wl->trace->n) {
			wl->trace_pos = 0;
			wl->trace_passes++;
		}
		if (len > wl->max_len)
			len = wl->max_len;
		rel = (rec->offset % wl->range_len) / wl->lun_block * wl->lun_block;
		if (rel + len > wl->range_len)
			rel = wl->range_len - len;
		io->offset = wl->range_off + rel;
		io->len = (uint32_t)len;
		io->write = rec->write;
		return;
	}

	bs = pick_bs(wl, r);
	switch (wl->spec.kind) {
	case BENCH_WL_UNIFORM:
		rel = bench_rng_below(r, wl->range_len / bs) * bs;
		break;
	case BENCH_WL_ZIPF:
		rel = place(wl, scatter(wl, bench_zipf_next(&wl->zipf, r) - 1), bs);
		break;
	case BENCH_WL_HOTSET: {
		uint64_t hot = (uint64_t)((double)wl->nunits * wl->spec.hot_space_pct / 100.0);
		uint64_t rank;
		if (hot == 0)
			hot = 1;
		if (hot >= wl->nunits || bench_rng_double(r) * 100.0 < wl->spec.hot_io_pct)
			rank = bench_rng_below(r, hot);
		else
			rank = hot + bench_rng_below(r, wl->nunits - hot);
		rel = place(wl, scatter(wl, rank), bs);
		break;
	}
	case BENCH_WL_SEQ:
		rel = BENCH_ALIGN_UP(wl->seq_next, bs);
		if (rel + bs > wl->range_len)
			rel = 0;
		wl->seq_next = rel + bs;
		break;
	case BENCH_WL_TRACE:
		break;
	}
	io->offset = wl->range_off + rel;
	io->len = bs;
	if (wl->spec.read_pct >= 100)
		io->write = false;
	else if (wl->spec.read_pct <= 0)
		io->write = true;
	else
		io->write = bench_rng_double(r) * 100.0 >= wl->spec.read_pct;
}
