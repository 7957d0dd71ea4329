/*
 * cli_stats.c - hotlunctl's stats command: hotlund's counters as text (a
 * line per disk, a block per cache, latency quantiles from the log2
 * histograms the way docs/metrics.md computes them) or as JSON, once or
 * refreshed with --watch, where each screen shows the last interval.
 */
#include "config.h"

#include "cli/cli_internal.h"
#include "hotlun/util.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
	(void)sig;
	interrupted = 1;
}

/* Counter k of o minus the same counter of prev (NULL: since the start). */
static uint64_t jdelta(json_t *o, json_t *prev, const char *k)
{
	uint64_t now = cli_jint(o, k), then = prev ? cli_jint(prev, k) : 0;

	return now >= then ? now - then : now; /* a restart in between: since then */
}

/* The counters of disk in cache (NULL when either is). */
static json_t *cache_disk(json_t *caches, const char *cache, const char *disk)
{
	return cache
	           ? json_object_get(json_object_get(json_object_get(caches, cache), "disks"), disk)
	           : NULL;
}

/* "n%" of part in whole, or "-" when whole is 0. */
static const char *pct(uint64_t part, uint64_t whole, char *buf, size_t len)
{
	if (!whole)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.1f%%", 100.0 * (double)part / (double)whole);
	return buf;
}

/* Bucket i of histogram key in o minus prev's (the same for every view: jdelta's rule). */
static uint64_t hist_delta(json_t *o, json_t *prev, const char *key, size_t i)
{
	json_t *a = json_object_get(o, key), *b = prev ? json_object_get(prev, key) : NULL;
	uint64_t now = (uint64_t)json_integer_value(json_array_get(a, i));
	uint64_t then = b ? (uint64_t)json_integer_value(json_array_get(b, i)) : 0;

	return now >= then ? now - then : now;
}

/*
 * The q-quantile, in microseconds, of the log2 histogram key (bucket i:
 * under 2^i us, the last: the rest) of o since prev: interpolated within
 * its bucket as Prometheus's histogram_quantile() does with the same
 * buckets (docs/metrics.md), so a terminal and a dashboard agree. *n gets
 * the count; -1 when it is 0.
 */
static double hist_quantile(json_t *o, json_t *prev, const char *key, double q, uint64_t *n)
{
	size_t nb = json_array_size(json_object_get(o, key));
	uint64_t total = 0, run = 0;

	for (size_t i = 0; i < nb; i++)
		total += hist_delta(o, prev, key, i);
	*n = total;
	if (!total)
		return -1;
	double rank = q * (double)total;
	for (size_t i = 0; i < nb; i++) {
		uint64_t c = hist_delta(o, prev, key, i);
		double lo = i ? (double)(1ull << (i - 1)) : 0, hi = (double)(1ull << i);
		if ((double)(run + c) >= rank && c) {
			if (i + 1 == nb) /* the open last bucket: its lower bound, as +Inf's rule */
				return lo;
			return lo + (hi - lo) * (rank - (double)run) / (double)c;
		}
		run += c;
	}
	return nb > 1 ? (double)(1ull << (nb - 2)) : 0;
}

/* Microseconds as "850us", "12.3ms", "1.20s"; "-" when negative (no data). */
static const char *fmt_us(double us, char *buf, size_t len)
{
	if (us < 0)
		snprintf(buf, len, "-");
	else if (us < 1000)
		snprintf(buf, len, "%.0fus", us);
	else if (us < 1e6)
		snprintf(buf, len, "%.2fms", us / 1e3);
	else
		snprintf(buf, len, "%.2fs", us / 1e6);
	return buf;
}

/* One latency row: p50, p99, p99.9 and the mean (sum_key in ns; NULL: no mean). */
static void latency_row(const char *disk, const char *what, json_t *o, json_t *prev,
                        const char *key, json_t *sums, json_t *psums, const char *sum_key)
{
	char p50[16], p99[16], p999[16], mean[16];
	uint64_t n = 0;
	double q50 = hist_quantile(o, prev, key, 0.5, &n);
	double q99 = hist_quantile(o, prev, key, 0.99, &n);
	double q999 = hist_quantile(o, prev, key, 0.999, &n);

	if (!n)
		return;
	fmt_us(sum_key ? (double)jdelta(sums, psums, sum_key) / 1e3 / (double)n : -1, mean,
	       sizeof(mean));
	printf("%-16s %-22s %10llu %8s %8s %8s %8s\n", disk, what, (unsigned long long)n,
	       fmt_us(q50, p50, sizeof(p50)), fmt_us(q99, p99, sizeof(p99)),
	       fmt_us(q999, p999, sizeof(p999)), mean);
}

/*
 * Read latency by where the data came from, write latency, and the
 * origin's as the cache sees it: a row each that has commands.
 */
static void print_latency(json_t *disks, json_t *pdisks, json_t *caches, json_t *pcaches)
{
	static const char *const srcs[][2] = {{"hit", "read, cache hit"},
	                                      {"partial", "read, partly cached"},
	                                      {"miss", "read, cache miss"},
	                                      {"uncached", "read, no cache"}};
	const char *name;
	json_t *disk;

	printf("\n%-16s %-22s %10s %8s %8s %8s %8s\n", "latency", "of", "commands", "p50", "p99",
	       "p99.9", "mean");
	json_object_foreach(disks, name, disk)
	{
		json_t *pd = json_object_get(pdisks, name);
		json_t *by = json_object_get(disk, "read_latency_by_source_log2_us");
		json_t *pby = json_object_get(pd, "read_latency_by_source_log2_us");
		json_t *ns = json_object_get(disk, "read_ns_by_source");
		json_t *pns = json_object_get(pd, "read_ns_by_source");
		const char *cname = json_string_value(json_object_get(disk, "cache"));
		json_t *cd = cache_disk(caches, cname, name),
		       *pcd = cache_disk(pcaches, cname, name);

		if (!by) { /* an older hotlund: every read together */
			latency_row(name, "read", disk, pd, "read_latency_log2_us", disk, pd,
			            "read_ns");
		} else {
			for (size_t i = 0; i < sizeof(srcs) / sizeof(srcs[0]); i++) {
				/* the rows' histograms sit one level down: wrap them */
				json_t *o =
				    json_pack("{s:O}", "h", json_object_get(by, srcs[i][0]));
				json_t *p =
				    pby ? json_pack("{s:O}", "h", json_object_get(pby, srcs[i][0]))
				        : NULL;
				latency_row(name, srcs[i][1], o, p, "h", ns, pns, srcs[i][0]);
				json_decref(o);
				json_decref(p);
			}
		}
		latency_row(name, "write", disk, pd, "write_latency_log2_us", disk, pd, "write_ns");
		if (cd) {
			latency_row(name, "origin read (by cache)", cd, pcd,
			            "origin_read_latency_log2_us", cd, pcd, "origin_read_ns");
			latency_row(name, "origin write (by cache)", cd, pcd,
			            "origin_write_latency_log2_us", cd, pcd, "origin_write_ns");
		}
	}
}

/*
 * The counters as text: a line per disk, a block per cache. With prev (a
 * --watch refresh, secs apart) the numbers are those of the last interval,
 * as rates where that reads better; the first screen counts since the start.
 */
static void print_stats_text(json_t *r, json_t *prev, int secs)
{
	const char *name;
	json_t *disk, *cache;
	json_t *disks = json_object_get(r, "disks"), *caches = json_object_get(r, "caches");
	json_t *pdisks = prev ? json_object_get(prev, "disks") : NULL;
	json_t *pcaches = prev ? json_object_get(prev, "caches") : NULL;
	char a[32], b[32], c[32], span[32] = "";

	if (prev)
		snprintf(span, sizeof(span), " in %d s", secs);
	printf("%s\n", prev ? "the last interval (the disks per second)" : "since hotlund started");
	printf("%-16s %8s %10s %10s %9s %9s %6s %-10s %7s\n", "disk", "size",
	       prev ? "reads/s" : "reads", prev ? "writes/s" : "writes",
	       prev ? "read MB/s" : "read MB", prev ? "wrt MB/s" : "write MB", "errors", "cache",
	       "hit %");
	json_object_foreach(disks, name, disk)
	{
		char sz[32];
		const char *cname = json_string_value(json_object_get(disk, "cache"));
		json_t *pd = json_object_get(pdisks, name);
		json_t *cd = cache_disk(caches, cname, name),
		       *pcd = cache_disk(pcaches, cname, name);
		double div = prev && secs > 0 ? (double)secs : 1.0;

		hl_format_size(cli_jint(disk, "size_bytes"), sz, sizeof(sz));
		printf("%-16s %8s %10.0f %10.0f %9.1f %9.1f %6llu %-10s %7s\n", name, sz,
		       (double)jdelta(disk, pd, "read_cmds") / div,
		       (double)jdelta(disk, pd, "write_cmds") / div,
		       (double)jdelta(disk, pd, "read_bytes") / 1e6 / div,
		       (double)jdelta(disk, pd, "write_bytes") / 1e6 / div,
		       (unsigned long long)jdelta(disk, pd, "errors"), cname ? cname : "-",
		       cd ? pct(jdelta(cd, pcd, "read_hits"), jdelta(cd, pcd, "read_reqs"), a,
		                sizeof(a))
		          : "-");
	}
	print_latency(disks, pdisks, caches, pcaches);
	json_object_foreach(disks, name, disk)
	{
		/* several gateways: who owns each shared disk (docs/gateways.md) */
		json_t *ow = json_object_get(disk, "ownership");
		if (!ow)
			continue;
		const char *problem = json_string_value(json_object_get(ow, "problem"));
		printf(
		    "  %-14s gateway %lld: %s, %s; owner gateway %lld, epoch %lld; %lld move(s), "
		    "%lld takeover(s); last: %s%s%s\n",
		    name, (long long)cli_jint(ow, "gateway"),
		    json_string_value(json_object_get(ow, "state")),
		    json_string_value(json_object_get(ow, "alua")),
		    (long long)cli_jint(ow, "owner"), (long long)cli_jint(ow, "epoch"),
		    (long long)cli_jint(ow, "transitions"), (long long)cli_jint(ow, "takeovers"),
		    json_string_value(json_object_get(ow, "last")),
		    problem && *problem ? "; PROBLEM: " : "", problem && *problem ? problem : "");
		/* its warm standby (docs/gateways.md, "Warm standby") */
		json_t *sh = json_object_get(disk, "shadow");
		char ob[32], rt[32];
		if (!sh)
			continue;
		hl_format_size(cli_jint(sh, "origin_bytes"), ob, sizeof(ob));
		hl_format_size(cli_jint(sh, "rate"), rt, sizeof(rt));
		if (!strcmp(json_string_value(json_object_get(sh, "role")) ?: "", "standby"))
			printf(
			    "  %-14s shadow: %lld of %lld hot block(s) shadowed, %lld behind; "
			    "origin reads %lld (%s) at %s/s; %lld mark move(s), %lld dropped; %s\n",
			    "", (long long)cli_jint(sh, "shadowed"),
			    (long long)cli_jint(sh, "hot_blocks"),
			    (long long)cli_jint(sh, "behind"),
			    (long long)cli_jint(sh, "origin_reads"), ob, rt,
			    (long long)cli_jint(sh, "marks"), (long long)cli_jint(sh, "dropped"),
			    json_string_value(json_object_get(sh, "state")));
		else
			printf("  %-14s shadow: publishes %lld hot block(s) (%lld time(s)); origin "
			       "reads as standby %lld (%s); %s\n",
			       "", (long long)cli_jint(sh, "hot_blocks"),
			       (long long)cli_jint(sh, "publishes"),
			       (long long)cli_jint(sh, "origin_reads"), ob,
			       json_string_value(json_object_get(sh, "state")));
	}
	json_object_foreach(caches, name, cache)
	{
		json_t *pc = json_object_get(pcaches, name);
		uint64_t reqs = jdelta(cache, pc, "read_reqs");
		uint64_t bytes = jdelta(cache, pc, "bytes_read");
		uint64_t bs = cli_jint(cache, "block_size"),
		         rec = cli_jint(cache, "recommended_block_size");
		char bsz[32], rsz[32], ub[32];

		printf("\ncache %s: %s, %llu blocks of %s", name,
		       json_is_true(json_object_get(cache, "passthrough"))
		           ? "PASS-THROUGH (device failed; disks served from their origins)"
		           : "ok",
		       (unsigned long long)cli_jint(cache, "nslots"),
		       hl_format_size(bs, bsz, sizeof(bsz)));
		if (rec && rec != bs)
			printf(" (the reads so far suggest %s blocks)",
			       hl_format_size(rec, rsz, sizeof(rsz)));
		printf("\n  reads    %llu%s: %s hits, %s partial, %s misses (%llu of all these "
		       "sequential, not admitted)\n",
		       (unsigned long long)reqs, span,
		       pct(jdelta(cache, pc, "read_hits"), reqs, a, sizeof(a)),
		       pct(jdelta(cache, pc, "read_partial"), reqs, b, sizeof(b)),
		       pct(jdelta(cache, pc, "read_misses"), reqs, c, sizeof(c)),
		       (unsigned long long)jdelta(cache, pc, "read_bypass"));
		printf("  bytes    %.1f MB read%s: %s from the cache (%s from RAM), %s from the "
		       "origin\n",
		       (double)bytes / 1e6, span,
		       pct(jdelta(cache, pc, "bytes_read_cache"), bytes, a, sizeof(a)),
		       pct(jdelta(cache, pc, "bytes_read_ram"), bytes, b, sizeof(b)),
		       pct(jdelta(cache, pc, "bytes_read_origin"), bytes, c, sizeof(c)));
		printf("  SSD      %llu of %llu blocks used, %.1f MB written%s; %llu admitted, "
		       "%llu rejected, %llu promoted from RAM, %llu evicted\n",
		       (unsigned long long)cli_jint(cache, "used_slots"),
		       (unsigned long long)cli_jint(cache, "nslots"),
		       (double)jdelta(cache, pc, "bytes_cache_write") / 1e6, span,
		       (unsigned long long)jdelta(cache, pc, "admissions"),
		       (unsigned long long)jdelta(cache, pc, "rejections"),
		       (unsigned long long)jdelta(cache, pc, "promotions"),
		       (unsigned long long)jdelta(cache, pc, "evictions"));
		{
			double ratio = json_real_value(json_object_get(cache, "write_ratio")) * 100;
			uint64_t budget = cli_jint(cache, "write_budget_pct");

			printf("  wear     the SSD writes %.1f%% of what an admit-all cache would "
			       "(recently); budget %llu%%%s\n",
			       ratio, (unsigned long long)budget,
			       json_is_true(json_object_get(cache, "write_budget_open"))
			           ? ", so admission is relaxed"
			           : "");
		}
		printf(
		    "  RAM      window %llu of %llu blocks; update buffer %s, %llu write-backs\n",
		    (unsigned long long)cli_jint(cache, "window_used_slots"),
		    (unsigned long long)cli_jint(cache, "window_slots"),
		    hl_format_size(cli_jint(cache, "update_buffer_bytes"), ub, sizeof(ub)),
		    (unsigned long long)jdelta(cache, pc, "update_buffer_writebacks"));
		{
			/* the lazy restore of the slot records after a warm start */
			const char *rst =
			    json_string_value(json_object_get(cache, "restore_state"));
			if (rst && strcmp(rst, "none")) {
				printf("  restore  %s", rst);
				if (!strcmp(rst, "done"))
					printf(" in %.1f s",
					       (double)cli_jint(cache, "restore_ms") / 1000.0);
				printf(": %llu blocks restored, %llu records dropped (%llu written "
				       "while restoring), %llu of %llu record pages left\n",
				       (unsigned long long)cli_jint(cache, "restore_restored"),
				       (unsigned long long)cli_jint(cache, "restore_dropped"),
				       (unsigned long long)cli_jint(cache, "restore_written"),
				       (unsigned long long)cli_jint(cache, "restore_pages_left"),
				       (unsigned long long)cli_jint(cache, "restore_pages"));
			}
		}
		if (jdelta(cache, pc, "dev_errors") || jdelta(cache, pc, "origin_errors"))
			printf("  errors   %llu of the cache device, %llu of origins\n",
			       (unsigned long long)jdelta(cache, pc, "dev_errors"),
			       (unsigned long long)jdelta(cache, pc, "origin_errors"));
		{
			/* what the last start kept of each disk's blocks, and why (issue 17) */
			json_t *cdisks = json_object_get(cache, "disks"), *cdisk;
			const char *dname;

			json_object_foreach(cdisks, dname, cdisk)
			{
				const char *ws =
				    json_string_value(json_object_get(cdisk, "warm_start"));
				if (ws && *ws)
					printf("  start    disk %s: %s\n", dname, ws);
			}
		}
	}
	printf("\nsessions: %llu\n", (unsigned long long)cli_jint(r, "sessions"));
	json_t *is = json_object_get(r, "iscsi");
	if (is) {
		json_t *pis = prev ? json_object_get(prev, "iscsi") : NULL;
		printf(
		    "logins: %llu, %llu failed, %llu CHAP answers wrong, %llu refused unchecked%s; "
		    "connections %llu (%llu in login); refused %llu at accept, %llu at a session "
		    "cap; %llu silent ones evicted; accept paused %llu times (descriptors)\n",
		    (unsigned long long)jdelta(is, pis, "logins"),
		    (unsigned long long)jdelta(is, pis, "login_failures"),
		    (unsigned long long)jdelta(is, pis, "auth_failures"),
		    (unsigned long long)jdelta(is, pis, "auth_throttled"), span,
		    (unsigned long long)cli_jint(is, "connections"),
		    (unsigned long long)cli_jint(is, "pending_logins"),
		    (unsigned long long)jdelta(is, pis, "refused_pending"),
		    (unsigned long long)jdelta(is, pis, "refused_sessions"),
		    (unsigned long long)jdelta(is, pis, "pending_evicted"),
		    (unsigned long long)jdelta(is, pis, "accept_paused"));
	}
	json_t *wb = json_object_get(r, "write_buffers");
	if (wb) {
		json_t *pwb = prev ? json_object_get(prev, "write_buffers") : NULL;
		char held[32], peak[32], lim[32];
		printf("write buffers: %s held by unfinished WRITEs (peak %s) of %s; %llu waiting "
		       "for R2T; %llu deferred, %llu TASK SET FULL (%llu for a source's share); "
		       "%llu sources; connections closed: %llu too slow, %llu no data%s\n",
		       hl_format_size(cli_jint(wb, "held_bytes"), held, sizeof(held)),
		       hl_format_size(cli_jint(wb, "peak_bytes"), peak, sizeof(peak)),
		       hl_format_size(cli_jint(wb, "limit"), lim, sizeof(lim)),
		       (unsigned long long)cli_jint(wb, "waiting"),
		       (unsigned long long)jdelta(wb, pwb, "r2t_deferred"),
		       (unsigned long long)jdelta(wb, pwb, "task_set_full"),
		       (unsigned long long)jdelta(wb, pwb, "source_capped"),
		       (unsigned long long)cli_jint(wb, "sources"),
		       (unsigned long long)jdelta(wb, pwb, "closed_slow"),
		       (unsigned long long)jdelta(wb, pwb, "closed_no_data"), span);
	}
	json_t *sb = json_object_get(r, "scratch_buffers");
	if (sb) {
		json_t *psb = prev ? json_object_get(prev, "scratch_buffers") : NULL;
		char used[32], peak[32], lim[32];
		printf(
		    "scratch buffers: %s held by running commands (peak %s) of %s; %llu commands "
		    "answered BUSY%s\n",
		    hl_format_size(cli_jint(sb, "used_bytes"), used, sizeof(used)),
		    hl_format_size(cli_jint(sb, "peak_bytes"), peak, sizeof(peak)),
		    hl_format_size(cli_jint(sb, "limit"), lim, sizeof(lim)),
		    (unsigned long long)jdelta(sb, psb, "refused"), span);
	}
}

int cli_cmd_stats(const char *path, int argc, char **argv)
{
	bool as_json = false;
	int watch = 0;

	(void)path;
	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0 || strcmp(argv[i], "json") == 0) {
			as_json = true;
		} else if (strcmp(argv[i], "--watch") == 0 || strcmp(argv[i], "watch") == 0) {
			watch = 1;
			if (i + 1 < argc && atoi(argv[i + 1]) > 0)
				watch = atoi(argv[++i]);
		} else {
			fprintf(stderr, "usage: stats [--json] [--watch [SECONDS]]\n");
			return 2;
		}
	}
	struct sigaction sa = {.sa_handler = on_sigint}, old;
	if (watch)
		sigaction(SIGINT, &sa, &old);
	interrupted = 0;
	json_t *prev = NULL;
	do {
		json_t *r = cli_request("stats", NULL);
		if (!r) {
			json_decref(prev);
			return 1;
		}
		if (watch && isatty(STDOUT_FILENO))
			printf("\033[H\033[2J");
		if (as_json)
			cli_print_json(r);
		else
			print_stats_text(r, prev, watch);
		json_decref(prev);
		prev = r;
		fflush(stdout);
		if (watch)
			sleep((unsigned)watch);
	} while (watch && !interrupted);
	json_decref(prev);
	if (watch)
		sigaction(SIGINT, &old, NULL);
	return 0;
}
