/*
 * bench_series.c - the per-second time series of a run and its CSV form.
 * hotlun-bench writes one row per second while it runs (flushed, so a run
 * that is interrupted keeps what it measured) and reads the same files back
 * to overlay several runs in one plot. Columns are found by name, so files
 * stay readable when a column is added.
 */
#include "bench/bench_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define CSV_COLUMNS "t_s,phase,iops,mbps,read_iops,write_iops,p50_us,p99_us,p999_us,max_us,errors"

int bench_series_append(struct bench_series *se, const struct bench_sample *smp)
{
	if (se->n == se->cap) {
		size_t ncap = se->cap ? se->cap * 2 : 64;
		struct bench_sample *n = realloc(se->s, ncap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		se->s = n;
		se->cap = ncap;
	}
	se->s[se->n++] = *smp;
	return 0;
}

void bench_series_free(struct bench_series *se)
{
	free(se->s);
	se->s = NULL;
	se->n = se->cap = 0;
}

int bench_csv_write_header(FILE *f, const char *label, const char *meta)
{
	fprintf(f, "# hotlun-bench per-second series\n");
	if (label && *label)
		fprintf(f, "# label=%s\n", label);
	if (meta && *meta)
		fprintf(f, "# %s\n", meta);
	fprintf(f, "%s\n", CSV_COLUMNS);
	return fflush(f) == 0 && !ferror(f) ? 0 : -EIO;
}

int bench_csv_write_row(FILE *f, const struct bench_sample *s)
{
	fprintf(f, "%.3f,%c,%.1f,%.3f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%llu\n", s->t,
	        s->phase ? s->phase : 'm', s->iops, s->mbps, s->read_iops, s->write_iops, s->p50_us,
	        s->p99_us, s->p999_us, s->max_us, (unsigned long long)s->errors);
	return fflush(f) == 0 && !ferror(f) ? 0 : -EIO;
}

enum col {
	C_T,
	C_PHASE,
	C_IOPS,
	C_MBPS,
	C_RIOPS,
	C_WIOPS,
	C_P50,
	C_P99,
	C_P999,
	C_MAX,
	C_ERR,
	C_N
};

static const char *const col_names[C_N] = {"t_s",       "phase",      "iops",   "mbps",
                                           "read_iops", "write_iops", "p50_us", "p99_us",
                                           "p999_us",   "max_us",     "errors"};

static void chomp(char *s)
{
	size_t n = strlen(s);
	while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' '))
		s[--n] = '\0';
}

int bench_csv_read(const char *path, struct bench_series *se, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	char line[1024];
	int map[32];
	unsigned ncols = 0;
	size_t lineno = 0;
	int rc = 0;

	memset(se, 0, sizeof(*se));
	if (!f) {
		rc = -errno;
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return rc;
	}
	const char *base = strrchr(path, '/');
	snprintf(se->label, sizeof(se->label), "%s", base ? base + 1 : path);
	char *dot = strrchr(se->label, '.');
	if (dot && strcmp(dot, ".csv") == 0)
		*dot = '\0';

	while (fgets(line, sizeof(line), f)) {
		lineno++;
		chomp(line);
		if (line[0] == '\0')
			continue;
		if (line[0] == '#') {
			const char *p = line + 1;
			while (*p == ' ')
				p++;
			if (strncmp(p, "label=", 6) == 0 && p[6])
				snprintf(se->label, sizeof(se->label), "%s", p + 6);
			continue;
		}
		if (ncols == 0) {
			/* The column header. */
			char *save = NULL;
			for (char *tok = strtok_r(line, ",", &save); tok && ncols < 32;
			     tok = strtok_r(NULL, ",", &save)) {
				map[ncols] = -1;
				for (int c = 0; c < C_N; c++)
					if (strcmp(tok, col_names[c]) == 0)
						map[ncols] = c;
				ncols++;
			}
			bool have_t = false, have_iops = false;
			for (unsigned i = 0; i < ncols; i++) {
				have_t |= map[i] == C_T;
				have_iops |= map[i] == C_IOPS;
			}
			if (!have_t || !have_iops) {
				snprintf(err, errlen, "%s:%zu: no t_s/iops column header", path,
				         lineno);
				rc = -EINVAL;
				break;
			}
			continue;
		}
		struct bench_sample s = {.phase = 'm'};
		unsigned i = 0;
		char *p = line;
		for (;;) {
			char *comma = strchr(p, ',');
			if (comma)
				*comma = '\0';
			if (i < ncols && map[i] >= 0) {
				char *end;
				double v = 0;
				if (map[i] == C_PHASE) {
					s.phase = *p == 'w' ? 'w' : 'm';
				} else {
					v = strtod(p, &end);
					if (end == p || *end) {
						snprintf(err, errlen,
						         "%s:%zu: column %u is not a number", path,
						         lineno, i + 1);
						rc = -EINVAL;
						goto out;
					}
				}
				switch (map[i]) {
				case C_T:
					s.t = v;
					break;
				case C_IOPS:
					s.iops = v;
					break;
				case C_MBPS:
					s.mbps = v;
					break;
				case C_RIOPS:
					s.read_iops = v;
					break;
				case C_WIOPS:
					s.write_iops = v;
					break;
				case C_P50:
					s.p50_us = v;
					break;
				case C_P99:
					s.p99_us = v;
					break;
				case C_P999:
					s.p999_us = v;
					break;
				case C_MAX:
					s.max_us = v;
					break;
				case C_ERR:
					s.errors = (uint64_t)v;
					break;
				default:
					break;
				}
			}
			i++;
			if (!comma)
				break;
			p = comma + 1;
		}
		if (bench_series_append(se, &s)) {
			snprintf(err, errlen, "%s: out of memory", path);
			rc = -ENOMEM;
			break;
		}
	}
out:
	if (!rc && ncols == 0) {
		snprintf(err, errlen, "%s: no column header (not a hotlun-bench CSV?)", path);
		rc = -EINVAL;
	}
	fclose(f);
	if (rc)
		bench_series_free(se);
	return rc;
}
