/*
 * bench_svg.c - the picture: a self-contained SVG (no scripts, no external
 * fonts or style sheets) with IOPS over time on top and p50 / p99 latency
 * over time below on a log scale, one colour per run so several runs (a cold
 * and a warm cache, hotlund and tgt) can be compared in one image.
 */
#include "bench/bench_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define W        960.0
#define PLOT_L   90.0
#define PLOT_R   930.0
#define P1_TOP   0.0 /* set from the legend height */
#define P_HEIGHT 230.0
#define P_GAP    70.0

static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                      "#9467bd", "#8c564b", "#e377c2", "#17becf"};

static void xml_text(FILE *f, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '&':
			fputs("&amp;", f);
			break;
		case '<':
			fputs("&lt;", f);
			break;
		case '>':
			fputs("&gt;", f);
			break;
		case '"':
			fputs("&quot;", f);
			break;
		default:
			if ((unsigned char)*s >= 0x20 || *s == '\t')
				fputc(*s, f);
		}
	}
}

/* A "nice" step (1, 2 or 5 times a power of ten) giving about n ticks over range. */
static double nice_step(double range, int n)
{
	if (!(range > 0))
		return 1;
	double raw = range / n;
	double p = pow(10, floor(log10(raw)));
	double m = raw / p;
	double step = m < 1.5 ? 1 : m < 3 ? 2 : m < 7 ? 5 : 10;
	return step * p;
}

static void fmt_count(char *buf, size_t len, double v)
{
	if (v >= 1e6)
		snprintf(buf, len, "%gM", v / 1e6);
	else if (v >= 1e4)
		snprintf(buf, len, "%gk", v / 1e3);
	else
		snprintf(buf, len, "%g", v);
}

static void fmt_us(char *buf, size_t len, double us)
{
	if (us >= 1e6)
		snprintf(buf, len, "%g s", us / 1e6);
	else if (us >= 1e3)
		snprintf(buf, len, "%g ms", us / 1e3);
	else
		snprintf(buf, len, "%g \xc2\xb5s", us);
}

struct frame {
	double top, bottom;
	double tmax;
	double ymin, ymax; /* linear, or log10 of the value for a log panel */
	bool log;
	bool us; /* values are microseconds (else counts) */
};

static double fx(const struct frame *fr, double t)
{
	return PLOT_L + (PLOT_R - PLOT_L) * (fr->tmax > 0 ? t / fr->tmax : 0);
}

static double fy(const struct frame *fr, double v)
{
	double y = fr->log ? log10(v) : v;
	double r = (y - fr->ymin) / (fr->ymax - fr->ymin);
	if (r < 0)
		r = 0;
	if (r > 1)
		r = 1;
	return fr->bottom - (fr->bottom - fr->top) * r;
}

static void axes(FILE *f, const struct frame *fr, const char *ylabel, double warm_end)
{
	char buf[32];

	if (warm_end > 0) {
		double x1 = fx(fr, warm_end);
		fprintf(f,
		        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
		        "fill=\"#eeeeee\"/>\n",
		        PLOT_L, fr->top, x1 - PLOT_L, fr->bottom - fr->top);
		fprintf(f,
		        "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" "
		        "fill=\"#888888\">warm-up</text>\n",
		        PLOT_L + 4, fr->bottom - 6);
	}
	fprintf(f,
	        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
	        "stroke=\"#444444\"/>\n",
	        PLOT_L, fr->top, PLOT_R - PLOT_L, fr->bottom - fr->top);

	/* y grid and labels */
	if (fr->log) {
		/* label 2 and 5 too when there are few decades to show */
		bool fine = fr->ymax - fr->ymin <= 2.01;
		for (int d = (int)floor(fr->ymin); d <= (int)ceil(fr->ymax); d++) {
			for (int m = 1; m < 10; m++) {
				double v = m * pow(10, d);
				double lv = log10(v);
				if (lv < fr->ymin - 1e-9 || lv > fr->ymax + 1e-9)
					continue;
				double y = fy(fr, v);
				fprintf(f,
				        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
				        "stroke=\"%s\"/>\n",
				        PLOT_L, y, PLOT_R, y, m == 1 ? "#cccccc" : "#f0f0f0");
				if (m == 1 || (fine && (m == 2 || m == 5))) {
					if (fr->us)
						fmt_us(buf, sizeof(buf), v);
					else
						fmt_count(buf, sizeof(buf), v);
					fprintf(f,
					        "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" "
					        "text-anchor=\"end\">%s</text>\n",
					        PLOT_L - 6, y + 4, buf);
				}
			}
		}
	} else {
		double step = nice_step(fr->ymax - fr->ymin, 5);
		for (double v = fr->ymin; v <= fr->ymax + step * 1e-6; v += step) {
			double y = fy(fr, v);
			fprintf(f,
			        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
			        "stroke=\"#dddddd\"/>\n",
			        PLOT_L, y, PLOT_R, y);
			fmt_count(buf, sizeof(buf), v);
			fprintf(f,
			        "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" "
			        "text-anchor=\"end\">%s</text>\n",
			        PLOT_L - 6, y + 4, buf);
		}
	}
	/* x ticks */
	double xs = nice_step(fr->tmax, 10);
	for (double t = 0; t <= fr->tmax + xs * 1e-6; t += xs) {
		double x = fx(fr, t);
		fprintf(
		    f,
		    "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444444\"/>\n",
		    x, fr->bottom, x, fr->bottom + 5);
		fprintf(f,
		        "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" "
		        "text-anchor=\"middle\">%g</text>\n",
		        x, fr->bottom + 18, t);
	}
	fprintf(f,
	        "<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\" text-anchor=\"middle\" "
	        "transform=\"rotate(-90 %.1f %.1f)\">",
	        24.0, (fr->top + fr->bottom) / 2, 24.0, (fr->top + fr->bottom) / 2);
	xml_text(f, ylabel);
	fprintf(f, "</text>\n");
	fprintf(f,
	        "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\">time "
	        "(s)</text>\n",
	        (PLOT_L + PLOT_R) / 2, fr->bottom + 34);
}

enum metric { M_IOPS, M_P50, M_P99 };

static double metric(const struct bench_sample *s, enum metric m)
{
	switch (m) {
	case M_IOPS:
		return s->iops;
	case M_P50:
		return s->p50_us;
	case M_P99:
		return s->p99_us;
	}
	return 0;
}

static void series_line(FILE *f, const struct frame *fr, const struct bench_series *se,
                        enum metric m, const char *color, const char *dash, double width)
{
	bool open = false;
	size_t npts = 0;

	for (size_t i = 0; i < se->n; i++) {
		double v = metric(&se->s[i], m);
		if (fr->log && !(v > 0)) {
			/* no completions that second: break the line */
			if (open)
				fprintf(f, "\"/>\n");
			open = false;
			continue;
		}
		if (!open) {
			fprintf(f,
			        "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%.1f\" "
			        "stroke-linejoin=\"round\"%s%s%s points=\"",
			        color, width, dash ? " stroke-dasharray=\"" : "", dash ? dash : "",
			        dash ? "\"" : "");
			open = true;
		}
		fprintf(f, "%.1f,%.1f ", fx(fr, se->s[i].t), fy(fr, v));
		npts++;
	}
	if (open)
		fprintf(f, "\"/>\n");
	if (npts == 1) {
		for (size_t i = 0; i < se->n; i++) {
			double v = metric(&se->s[i], m);
			if (!fr->log || v > 0)
				fprintf(f,
				        "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n",
				        fx(fr, se->s[i].t), fy(fr, v), color);
		}
	}
}

int bench_svg_write(FILE *f, const struct bench_series *runs, size_t nruns, const char *title)
{
	double tmax = 0, imax = 0, imin = INFINITY, lmin = INFINITY, lmax = 0, warm_end = 0;

	for (size_t r = 0; r < nruns; r++) {
		for (size_t i = 0; i < runs[r].n; i++) {
			const struct bench_sample *s = &runs[r].s[i];
			if (s->t > tmax)
				tmax = s->t;
			if (s->iops > imax)
				imax = s->iops;
			if (s->iops > 0 && s->iops < imin)
				imin = s->iops;
			if (s->p50_us > 0 && s->p50_us < lmin)
				lmin = s->p50_us;
			if (s->p99_us > lmax)
				lmax = s->p99_us;
			if (s->p50_us > lmax)
				lmax = s->p50_us;
			if (s->phase == 'w' && s->t > warm_end)
				warm_end = s->t;
		}
	}
	if (tmax <= 0)
		tmax = 1;
	if (imax <= 0)
		imax = 1;
	if (!isfinite(lmin) || lmax <= 0) {
		lmin = 100;
		lmax = 1000;
	}

	/* legend layout: entries flow left to right and wrap */
	double lx = PLOT_L, ly = 56;
	double legend_x[64], legend_y[64];
	for (size_t r = 0; r < nruns && r < 64; r++) {
		double w = 40 + 7.2 * (double)strlen(runs[r].label);
		if (lx + w > PLOT_R && lx > PLOT_L) {
			lx = PLOT_L;
			ly += 20;
		}
		legend_x[r] = lx;
		legend_y[r] = ly;
		lx += w + 16;
	}

	struct frame p1 = {.top = ly + 22, .tmax = tmax, .ymin = 0, .log = false};
	p1.bottom = p1.top + P_HEIGHT;
	if (isfinite(imin) && imax / imin >= 50) {
		/*
		 * A cold and a warm cache (200 against 20,000 IOPS) on one linear
		 * axis leave the slow run flat on the floor: use decades instead.
		 */
		p1.log = true;
		p1.ymin = floor(log10(imin));
		p1.ymax = ceil(log10(imax));
		if (p1.ymax <= p1.ymin)
			p1.ymax = p1.ymin + 1;
	} else {
		double step = nice_step(imax * 1.05, 5);
		p1.ymax = ceil(imax * 1.05 / step) * step;
	}

	struct frame p2 = {.top = p1.bottom + P_GAP, .tmax = tmax, .log = true, .us = true};
	p2.bottom = p2.top + P_HEIGHT;
	p2.ymin = floor(log10(lmin));
	p2.ymax = ceil(log10(lmax));
	if (p2.ymax <= p2.ymin)
		p2.ymax = p2.ymin + 1;

	double H = p2.bottom + 50;

	fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
	fprintf(f,
	        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
	        "viewBox=\"0 0 %.0f %.0f\" font-family=\"DejaVu Sans, Arial, Helvetica, "
	        "sans-serif\">\n",
	        W, H, W, H);
	fprintf(f, "<title>");
	xml_text(f, title && *title ? title : "hotlun-bench");
	fprintf(f, "</title>\n");
	fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"#ffffff\"/>\n", W,
	        H);
	fprintf(f, "<text x=\"%.1f\" y=\"28\" font-size=\"17\" font-weight=\"bold\">", PLOT_L);
	xml_text(f, title && *title ? title : "hotlun-bench");
	fprintf(f, "</text>\n");

	for (size_t r = 0; r < nruns && r < 64; r++) {
		const char *c = palette[r % (sizeof(palette) / sizeof(palette[0]))];
		fprintf(f,
		        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
		        "stroke-width=\"3\"/>\n",
		        legend_x[r], legend_y[r] - 4, legend_x[r] + 28, legend_y[r] - 4, c);
		fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\">", legend_x[r] + 34,
		        legend_y[r]);
		xml_text(f, runs[r].label);
		fprintf(f, "</text>\n");
	}

	axes(f, &p1, p1.log ? "IOPS (log scale)" : "IOPS", warm_end);
	fprintf(f,
	        "<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\" font-weight=\"bold\">IOPS</text>\n",
	        PLOT_R - 40, p1.top - 6);
	for (size_t r = 0; r < nruns; r++)
		series_line(f, &p1, &runs[r], M_IOPS,
		            palette[r % (sizeof(palette) / sizeof(palette[0]))], NULL, 2.0);

	axes(f, &p2, "latency (log scale)", warm_end);
	fprintf(f,
	        "<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\" text-anchor=\"end\"><tspan "
	        "font-weight=\"bold\">latency</tspan>  solid: p50   dashed: p99</text>\n",
	        PLOT_R, p2.top - 6);
	for (size_t r = 0; r < nruns; r++) {
		const char *c = palette[r % (sizeof(palette) / sizeof(palette[0]))];
		series_line(f, &p2, &runs[r], M_P99, c, "6,4", 1.5);
		series_line(f, &p2, &runs[r], M_P50, c, NULL, 2.0);
	}
	fprintf(f, "</svg>\n");
	return ferror(f) ? -EIO : 0;
}

int bench_svg_write_file(const char *path, const struct bench_series *runs, size_t nruns,
                         const char *title)
{
	char tmp[4096];
	int rc;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	FILE *f = fopen(tmp, "w");
	if (!f)
		return -errno;
	rc = bench_svg_write(f, runs, nruns, title);
	if (fclose(f) != 0 && !rc)
		rc = -errno;
	if (!rc && rename(tmp, path) != 0)
		rc = -errno;
	if (rc)
		unlink(tmp);
	return rc;
}
