/*
 * hotlun_bench.c - hotlun-bench, a load generator for any iSCSI target.
 *
 * Owns the command line, the sessions (libiscsi contexts driven through
 * get_fd / which_events / service from one poll loop), the run phases
 * (warm-up, measure, drain), per-second and overall statistics, the
 * --verify bookkeeping (a generation per block and a lock per block so that
 * no two in-flight I/Os overlap), and the reports: terminal progress, CSV,
 * SVG and the one-line summary that scripts parse. The paths of a multipath
 * session (--path) are bench_mpath.c's; the structures both use are in
 * bench_internal.h.
 */
#include "bench/bench_internal.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BENCH_VERSION      "0.1.0"
#define DEFAULT_INITIATOR  "iqn.2026-11.org.hotlun:bench"
#define MAX_QD             1024
#define MAX_VERIFY_REPORTS 20
#define VERIFY_MAX_UNITS   (512ULL << 20)

#define DRAIN_LIMIT_NS (10ULL * 1000000000ULL) /* how long the end waits for in-flight I/O */

static volatile sig_atomic_t got_signal;

static void on_signal(int sig)
{
	if (got_signal)
		_exit(130); /* second ^C: give up at once */
	got_signal = sig;
}


/* ---- --verify bookkeeping ---- */

static void unit_span(const struct bench *b, const struct bench_io *io, uint64_t *first,
                      uint64_t *n)
{
	uint64_t rel = io->offset - b->wl.range_off;
	*first = rel / b->wl.unit;
	*n = BENCH_ALIGN_UP(rel + io->len, b->wl.unit) / b->wl.unit - *first;
}

static bool verify_lock(struct bench *b, const struct bench_io *io)
{
	uint64_t first, n;

	unit_span(b, io, &first, &n);
	for (uint64_t i = 0; i < n; i++)
		if (b->lock_map[first + i])
			return false;
	memset(b->lock_map + first, 1, n);
	return true;
}

static void verify_unlock(struct bench *b, const struct bench_io *io)
{
	uint64_t first, n;

	unit_span(b, io, &first, &n);
	memset(b->lock_map + first, 0, n);
}

static void verify_report(struct bench *b, const struct bench_slot *sl,
                          const struct bench_pattern_result *res)
{
	const struct bench_io *io = &sl->io;

	b->verify_errors++;
	if (b->verify_errors > MAX_VERIFY_REPORTS) {
		if (b->verify_errors == MAX_VERIFY_REPORTS + 1)
			fprintf(stderr, "\nverify: more mismatches, not shown\n");
		return;
	}
	uint64_t byte = res->sector * BENCH_PATTERN_SECTOR;
	uint64_t lba = byte / b->lun_block;

	fprintf(stderr,
	        "\nverify: MISMATCH lba=%" PRIu64 " (byte offset %" PRIu64 ", sector %" PRIu64
	        " of a %u-byte read at lba %" PRIu64 "): %s",
	        lba, byte, res->sector - io->offset / BENCH_PATTERN_SECTOR, io->len,
	        io->offset / b->lun_block, bench_pattern_status_str(res->status));
	switch (res->status) {
	case BENCH_PAT_WRONG_LBA:
		fprintf(stderr, "; block holds the data of lba %" PRIu64,
		        res->found_sector * BENCH_PATTERN_SECTOR / b->lun_block);
		break;
	case BENCH_PAT_STALE:
		fprintf(stderr, "; found generation %08" PRIx64 ":%08" PRIx64, res->found_gen >> 32,
		        res->found_gen & 0xffffffffu);
		break;
	case BENCH_PAT_CORRUPT:
		fprintf(stderr, "; first bad byte at +%u", res->bad_word * 8);
		break;
	default:
		break;
	}
	/* When and where: a mismatch right after a reconnect points at the restart. */
	fprintf(stderr, " [session %u, issued %.1f ms before the check%s]\n",
	        (unsigned)(sl->sess - b->sess), (double)(bench_now_ns() - sl->t0) / 1e6,
	        sl->sess->reconnect_ns > sl->t0 ? ", re-sent after a reconnect" : "");
}

/*
 * Is this older generation, in the whole of the read's part of unit u, a
 * write of this run that was in flight on a lost path (bench_lost_add)? It
 * landed after the copy sent again: the unit holds it from now on.
 */
static bool verify_late(struct bench *b, const struct bench_slot *sl, uint64_t u, uint64_t s,
                        uint64_t e, const struct bench_pattern_result *res)
{
	struct bench_pattern_result again;
	uint32_t g = (uint32_t)res->found_gen;
	static unsigned shown;

	if (res->status != BENCH_PAT_STALE || res->found_gen >> 32 != b->run_stamp ||
	    bench_pattern_check(sl->buf + (s - sl->io.offset), e - s, s, res->found_gen, false,
	                        &again) != BENCH_PAT_OK ||
	    !bench_lost_take(&b->lost, u, g))
		return false;
	b->late_writes++;
	b->gen_map[u] = g;
	if (shown++ < 10)
		fprintf(stderr,
		        "\nverify: lba %" PRIu64 " holds write %08" PRIx64 ":%08x, sent on a path "
		        "that was lost and executed after the newer write there (counted in "
		        "late_writes, not a mismatch)\n",
		        s / b->lun_block, res->found_gen >> 32, g);
	return true;
}

/* Check a completed read unit by unit, each against what this run knows of it. */
static void verify_read(struct bench *b, const struct bench_slot *sl)
{
	uint64_t first, n;

	unit_span(b, &sl->io, &first, &n);
	for (uint64_t i = 0; i < n; i++) {
		uint64_t u = first + i;
		uint64_t ustart = b->wl.range_off + u * b->wl.unit;
		uint64_t s = ustart > sl->io.offset ? ustart : sl->io.offset;
		uint64_t e = BENCH_MIN(ustart + b->wl.unit, sl->io.offset + sl->io.len);
		uint32_t g = b->gen_map[u];
		uint64_t expect = g ? ((uint64_t)b->run_stamp << 32 | g) : 0;
		/*
		 * A block this run has not written may hold anything (zeroes, older
		 * data) unless the run only reads: a read-only verify pass checks a
		 * range that an earlier run filled, so every block must be ours.
		 */
		bool allow_foreign = !g && b->has_writes;
		struct bench_pattern_result res;

		b->verify_checked++;
		if (bench_pattern_check(sl->buf + (s - sl->io.offset), e - s, s, expect,
		                        allow_foreign, &res) == BENCH_PAT_OK)
			continue;
		if (!verify_late(b, sl, u, s, e, &res))
			verify_report(b, sl, &res);
	}
}

static void verify_wrote(struct bench *b, const struct bench_slot *sl, bool good)
{
	uint64_t first, n;

	unit_span(b, &sl->io, &first, &n);
	for (uint64_t i = 0; i < n; i++)
		b->gen_map[first + i] = good ? (uint32_t)sl->gen : 0;
}


/* ---- I/O ---- */

static void close_interval(struct bench *b, uint64_t now);
static int submit(struct bench *b, struct bench_session *s, struct bench_slot *sl);
static bool may_issue(const struct bench *b);

/* A slot whose I/O ended: its next I/O (or the same one again) goes out, else it waits idle. */
static void slot_next(struct bench *b, struct bench_session *s, struct bench_slot *sl)
{
	if (may_issue(b) && !b->fatal) {
		int rc = submit(b, s, sl);
		if (rc == 0)
			return;
		if (rc < 0)
			b->fatal = rc;
	}
	s->idle[s->nidle++] = (unsigned)(sl - s->slots);
}

/*
 * The command ended unexecuted, or its path was lost (lost: the target may
 * still execute it, at any later time): the same I/O is sent again.
 */
static void requeue(struct bench *b, struct bench_session *s, struct bench_slot *sl,
                    struct scsi_task *task, bool lost)
{
	if (b->o.verify) {
		if (sl->io.write) {
			verify_wrote(b, sl, false); /* it may or may not have been written */
			if (lost) {
				uint64_t first, n;
				unit_span(b, &sl->io, &first, &n);
				bench_lost_add(&b->lost, first, n, (uint32_t)sl->gen);
			}
		}
		verify_unlock(b, &sl->io);
	}
	if (task)
		scsi_free_scsi_task(task);
	s->inflight--;
	b->inflight--;
	sl->planned = true; /* the same I/O goes out again */
	sl->resend = true;  /* its latency counts from the first attempt */
	slot_next(b, s, sl);
}

static void io_done(struct iscsi_context *iscsi, int status, void *command_data, void *private)
{
	struct bench_slot *sl = private;
	struct bench_session *s = sl->sess;
	struct bench *b = s->b;
	struct scsi_task *task = command_data;
	uint64_t now = bench_now_ns();
	uint64_t lat = now - sl->t0;
	bool good = status == SCSI_STATUS_GOOD;

	sl->busy = false;
	if (status == SCSI_STATUS_CHECK_CONDITION && task &&
	    task->sense.key == SCSI_SENSE_UNIT_ATTENTION && sl->retries < 5) {
		/*
		 * A unit attention (the target restarted, the LUN changed) ends
		 * the command unexecuted: run it again, as any initiator would.
		 */
		if (b->ua_retries++ < 5)
			fprintf(stderr, "\nunit attention (%s): command retried\n",
			        scsi_sense_ascq_str(task->sense.ascq));
		sl->retries++;
		requeue(b, s, sl, task, false);
		return;
	}
	enum bench_path_state st;
	if (s->npaths > 1 && sl->path < s->npaths &&
	    (status == SCSI_STATUS_CANCELLED || status == SCSI_STATUS_ERROR ||
	     status == SCSI_STATUS_TIMEOUT ||
	     (status == SCSI_STATUS_CHECK_CONDITION && bench_mpath_alua_sense(task, &st)))) {
		/*
		 * The path failed this command (its connection is gone) or says it
		 * cannot take I/O (ALUA sense): the command goes out again on the
		 * session's path, another one if this one is not usable any more.
		 * With none usable it is parked until the next retry round
		 * (submit), and fails only when that lasts --failover-timeout.
		 */
		struct bench_path *p = &s->paths[sl->path];
		if (status == SCSI_STATUS_CHECK_CONDITION)
			p->state = st;
		else if (p->iscsi == iscsi)
			p->state =
			    BENCH_PATH_DOWN; /* its context goes after this round (paths_reap) */
		if (sl->path == s->active)
			bench_mpath_choose(b, s,
			            status == SCSI_STATUS_CHECK_CONDITION ? bench_path_state_str(st)
			                                                  : "connection lost");
		bench_failover_note(&s->fo, bench_mpath_usable(s), now);
		sl->parked_round = s->fo.round;
		b->path_retries++;
		requeue(b, s, sl, task, status != SCSI_STATUS_CHECK_CONDITION);
		return;
	}
	if (good && s->npaths > 1 && sl->path < s->npaths &&
	    !bench_path_usable(s->paths[sl->path].state) &&
	    s->paths[sl->path].state != BENCH_PATH_DOWN)
		s->paths[sl->path].state = BENCH_PATH_AO; /* it took I/O: the group has changed */
	sl->retries = 0;

	if (!good) {
		static unsigned shown;
		if (shown++ < 10) {
			if (status == SCSI_STATUS_CHECK_CONDITION && task)
				fprintf(stderr, "\n%s at lba %" PRIu64 ": %s, %s\n",
				        sl->io.write ? "write" : "read",
				        sl->io.offset / b->lun_block,
				        scsi_sense_key_str(task->sense.key),
				        scsi_sense_ascq_str(task->sense.ascq));
			else
				fprintf(stderr, "\n%s at lba %" PRIu64 " failed: status 0x%x %s\n",
				        sl->io.write ? "write" : "read",
				        sl->io.offset / b->lun_block, status,
				        iscsi_get_error(iscsi));
		}
	}
	if (b->o.verify) {
		if (sl->io.write)
			verify_wrote(b, sl, good);
		else if (good)
			verify_read(b, sl);
		verify_unlock(b, &sl->io);
	}
	if (b->phase != BENCH_PH_DRAIN) {
		struct bench_counters *c[2] = {&b->sec, &b->all};
		unsigned nc = b->phase == BENCH_PH_MEASURE ? 2 : 1;
		for (unsigned i = 0; i < nc; i++) {
			if (!good) {
				c[i]->errors++;
				continue;
			}
			if (sl->io.write)
				c[i]->writes++;
			else
				c[i]->reads++;
			c[i]->bytes += sl->io.len;
		}
		if (good) {
			bench_hist_add(&b->sec_hist, lat);
			if (b->phase == BENCH_PH_MEASURE)
				bench_hist_add(&b->all_hist, lat);
		}
		if (b->phase == BENCH_PH_MEASURE)
			b->measured_done++;
	}
	if (task)
		scsi_free_scsi_task(task);
	s->inflight--;
	b->inflight--;
	/*
	 * Reuse the slot at once: the new command goes out with the same
	 * poll round, as with any tight libiscsi loop, instead of waiting for
	 * the refill pass after iscsi_service() returns.
	 */
	slot_next(b, s, sl);
}

/* Start one I/O on an idle slot. @return 0 started, 1 must wait (verify lock), <0 fatal. */
static int submit(struct bench *b, struct bench_session *s, struct bench_slot *sl)
{
	struct scsi_task *task;

	if (!sl->planned) {
		bench_workload_next(&b->wl, &b->rng, &sl->io);
		sl->planned = true;
	}
	if (s->npaths > 1) {
		struct bench_path_view v = bench_mpath_view(&s->paths[s->active]);
		uint64_t timeout = (uint64_t)(b->o.failover_timeout_s * 1e9);
		switch (bench_path_decide(&s->fo, &v, sl->parked_round, bench_now_ns(), timeout)) {
		case BENCH_PATH_SEND:
			break;
		case BENCH_PATH_WAIT:
			return 1;
		case BENCH_PATH_FAIL:
			bench_mpath_fail_parked(b, s, sl);
			return 1;
		}
	}
	if (!s->iscsi)
		return 1; /* no path left: wait for one to come back */
	if (b->o.verify && !verify_lock(b, &sl->io))
		return 1;
	sl->planned = false;

	uint64_t lba = sl->io.offset / b->lun_block;
	if (sl->io.write && b->o.verify) {
		if (++b->write_counter == 0)
			b->write_counter = 1;
		sl->gen = b->write_counter;
		bench_pattern_fill(sl->buf, sl->io.len, sl->io.offset,
		                   (uint64_t)b->run_stamp << 32 | sl->gen);
	}
	sl->t_sent = bench_now_ns();
	if (!sl->resend)
		sl->t0 = sl->t_sent;
	sl->resend = false;
	if (sl->io.write)
		task = iscsi_write16_task(s->iscsi, s->lun, lba, sl->buf, sl->io.len,
		                          (int)b->lun_block, 0, 0, 0, 0, 0, io_done, sl);
	else
		task = iscsi_read16_task(s->iscsi, s->lun, lba, sl->io.len, (int)b->lun_block, 0, 0,
		                         0, 0, 0, io_done, sl);
	if (!task) {
		fprintf(stderr, "hotlun-bench: cannot queue I/O: %s\n", iscsi_get_error(s->iscsi));
		if (b->o.verify)
			verify_unlock(b, &sl->io);
		return -ENOMEM;
	}
	/*
	 * --verify: poison the buffer of a read first, so bytes the target never
	 * sent show up as garbage instead of as the previous I/O's data.
	 */
	if (!sl->io.write && b->o.verify)
		memset(sl->buf, 0xa5, sl->io.len);
	/* Data-In lands straight in our buffer: no copy, and --verify reads it there. */
	if (!sl->io.write && scsi_task_add_data_in_buffer(task, (int)sl->io.len, sl->buf) != 0) {
		fprintf(stderr, "hotlun-bench: cannot attach read buffer\n");
		return -ENOMEM;
	}
	s->inflight++;
	b->inflight++;
	sl->busy = true;
	sl->path = s->active;
	return 0;
}

static bool may_issue(const struct bench *b)
{
	if (b->stop_issue)
		return false;
	if (b->phase == BENCH_PH_MEASURE && b->o.count &&
	    b->measured_done + b->inflight >= b->o.count)
		return false;
	return true;
}

static int refill(struct bench *b, struct bench_session *s)
{
	/*
	 * Try every idle slot; one whose planned I/O waits for busy blocks
	 * (--verify) stays idle, the others start. Compacts in place: kept <= i.
	 */
	unsigned kept = 0, n = s->nidle;

	for (unsigned i = 0; i < n; i++) {
		unsigned idx = s->idle[i];
		int rc = may_issue(b) ? submit(b, s, &s->slots[idx]) : 1;
		if (rc < 0) {
			s->idle[kept++] = idx;
			for (unsigned j = i + 1; j < n; j++)
				s->idle[kept++] = s->idle[j];
			s->nidle = kept;
			return rc;
		}
		if (rc > 0)
			s->idle[kept++] = idx;
	}
	s->nidle = kept;
	return 0;
}

/* ---- statistics and reports ---- */

static void fill_sample(const struct bench *b, struct bench_sample *smp, double t, double secs,
                        const struct bench_hist *h, const struct bench_counters *c, char phase)
{
	memset(smp, 0, sizeof(*smp));
	smp->t = t;
	smp->phase = phase;
	if (secs <= 0)
		secs = 1e-9;
	smp->iops = (double)(c->reads + c->writes) / secs;
	smp->read_iops = (double)c->reads / secs;
	smp->write_iops = (double)c->writes / secs;
	smp->mbps = (double)c->bytes / secs / 1e6;
	smp->p50_us = (double)bench_hist_percentile(h, 50) / 1e3;
	smp->p99_us = (double)bench_hist_percentile(h, 99) / 1e3;
	smp->p999_us = (double)bench_hist_percentile(h, 99.9) / 1e3;
	smp->max_us = h->count ? (double)h->max / 1e3 : 0;
	smp->errors = c->errors;
}

/* Emit the row for [t_tick, now) and start a new interval. */
static void close_interval(struct bench *b, uint64_t now)
{
	double secs = (double)(now - b->t_tick) / 1e9;
	struct bench_sample smp;

	if (secs < 0.001 && b->sec.reads + b->sec.writes + b->sec.errors == 0)
		return;
	fill_sample(b, &smp, (double)(now - b->t_start) / 1e9, secs, &b->sec_hist, &b->sec,
	            b->phase == BENCH_PH_WARMUP ? 'w' : 'm');
	if (b->phase != BENCH_PH_DRAIN) {
		if (bench_series_append(&b->series, &smp) == 0 && b->csv &&
		    bench_csv_write_row(b->csv, &smp) != 0 && !b->fatal) {
			fprintf(stderr, "hotlun-bench: writing %s failed\n", b->o.csv);
			b->fatal = -EIO;
		}
		if (b->progress)
			fprintf(stderr,
			        "\r%7.1fs %-7s iops %9.0f  MB/s %8.1f  p50 %8.0fus  p99 %8.0fus  "
			        "err %" PRIu64 "  ",
			        smp.t, b->phase == BENCH_PH_WARMUP ? "warm-up" : "measure",
			        smp.iops, smp.mbps, smp.p50_us, smp.p99_us,
			        b->all.errors + b->sec.errors);
	}
	bench_hist_reset(&b->sec_hist);
	memset(&b->sec, 0, sizeof(b->sec));
	b->t_tick = now;
}

/* Advance the phase machine; called after every poll round. */
static void run_clock(struct bench *b, uint64_t now)
{
	/*
	 * Phase changes first: each closes the interval it ends, so the
	 * one-second tick below never leaves a sliver of a row behind.
	 */
	if (b->phase == BENCH_PH_WARMUP && (double)(now - b->t_start) >= b->o.warmup_s * 1e9) {
		close_interval(b, now);
		b->phase = BENCH_PH_MEASURE;
		b->t_measure = now;
	}
	if (b->phase == BENCH_PH_MEASURE) {
		bool end = false;
		if (got_signal)
			end = true;
		else if (b->o.count)
			end = b->measured_done >= b->o.count;
		else
			end = (double)(now - b->t_measure) >= b->o.time_s * 1e9;
		if (end) {
			close_interval(b, now);
			b->phase = BENCH_PH_DRAIN;
			b->t_end = now;
			b->stop_issue = true;
		}
	}
	if (b->phase == BENCH_PH_WARMUP && got_signal) {
		close_interval(b, now);
		b->phase = BENCH_PH_DRAIN;
		b->t_measure = b->t_end = now;
		b->stop_issue = true;
	}
	if (now - b->t_tick >= 1000000000ULL)
		close_interval(b, now);
}

static int run(struct bench *b)
{
	/* static: one run per process, and too large for a stack at the most sessions */
	static struct pollfd pfd[BENCH_MAX_SESSIONS * BENCH_MAX_PATHS];
	static struct iscsi_context *pctx[BENCH_MAX_SESSIONS * BENCH_MAX_PATHS];
	static struct bench_session *psess[BENCH_MAX_SESSIONS * BENCH_MAX_PATHS];

	b->t_start = b->t_tick = bench_now_ns();
	b->phase = b->o.warmup_s > 0 ? BENCH_PH_WARMUP : BENCH_PH_MEASURE;
	b->t_measure = b->t_start;

	for (;;) {
		for (unsigned i = 0; i < b->nsess; i++) {
			int rc = refill(b, &b->sess[i]);
			if (rc < 0)
				return rc;
		}
		if (b->phase == BENCH_PH_DRAIN && b->inflight == 0)
			break;
		/* A dead target never answers what is in flight: do not wait forever. */
		if (b->phase == BENCH_PH_DRAIN && bench_now_ns() - b->t_end > DRAIN_LIMIT_NS) {
			fprintf(stderr, "\nhotlun-bench: %u I/O(s) still unanswered %d s after the end; giving up\n",
			        (unsigned)b->inflight, (int)(DRAIN_LIMIT_NS / 1000000000ULL));
			return -ETIMEDOUT;
		}
		if (b->fatal)
			return b->fatal;

		/* every connection of every session: the active paths and the others */
		unsigned np = 0;
		for (unsigned i = 0; i < b->nsess; i++) {
			struct bench_session *s = &b->sess[i];
			if (s->npaths > 1) {
				for (unsigned k = 0; k < s->npaths; k++) {
					if (!s->paths[k].iscsi)
						continue;
					pctx[np] = s->paths[k].iscsi;
					psess[np] = s;
					pfd[np].fd = iscsi_get_fd(pctx[np]);
					pfd[np].events = (short)iscsi_which_events(pctx[np]);
					pfd[np].revents = 0;
					np++;
				}
				continue;
			}
			pctx[np] = s->iscsi;
			psess[np] = s;
			pfd[np].fd = iscsi_get_fd(s->iscsi);
			if (pfd[np].fd != s->last_fd) {
				if (s->last_fd)
					s->reconnect_ns = bench_now_ns();
				s->last_fd = pfd[np].fd;
			}
			pfd[np].events = (short)iscsi_which_events(s->iscsi);
			pfd[np].revents = 0;
			if (pfd[np].events == 0) {
				pfd[np].fd = -1; /* reconnecting: libiscsi asks us to wait */
				s->reconnect_ns = bench_now_ns();
			}
			np++;
		}
		uint64_t now = bench_now_ns();
		uint64_t next = b->t_tick + 1000000000ULL;
		int timeout = next > now ? (int)((next - now) / 1000000ULL) + 1 : 0;
		if (timeout > 100)
			timeout = 100;
		for (unsigned i = 0; i < b->nsess; i++) {
			const struct bench_failover *f = &b->sess[i].fo;
			if (f->since && f->round_ns > now &&
			    (f->round_ns - now) / 1000000ULL < (uint64_t)timeout)
				timeout = (int)((f->round_ns - now) / 1000000ULL) + 1;
		}
		int n = poll(pfd, np, timeout);
		if (n < 0 && errno != EINTR) {
			perror("hotlun-bench: poll");
			return -errno;
		}
		for (unsigned i = 0; i < np; i++) {
			/* idle round: let libiscsi run its timers (timeouts, reconnect) */
			if (n > 0 && !pfd[i].revents)
				continue;
			if (iscsi_service(pctx[i], n > 0 ? pfd[i].revents : 0) >= 0)
				continue;
			struct bench_session *s = psess[i];
			if (s->npaths <= 1) {
				fprintf(stderr, "\nhotlun-bench: session %u: %s\n",
				        (unsigned)(s - b->sess), iscsi_get_error(pctx[i]));
				return -EIO;
			}
			for (unsigned k = 0; k < s->npaths; k++)
				if (s->paths[k].iscsi == pctx[i])
					bench_mpath_down(b, s, k, iscsi_get_error(pctx[i]));
		}
		now = bench_now_ns();
		for (unsigned i = 0; i < b->nsess; i++) {
			struct bench_session *s = &b->sess[i];
			if (s->npaths <= 1)
				continue;
			/* paths_reap: contexts of paths that failed inside a callback */
			for (unsigned k = 0; k < s->npaths; k++)
				if (s->paths[k].state == BENCH_PATH_DOWN && s->paths[k].iscsi &&
				    !s->paths[k].relogin)
					bench_mpath_down(b, s, k, "connection lost");
			bench_mpath_tend(b, s, now);
		}
		run_clock(b, now);
	}
	if (b->o.count && b->t_end < b->t_measure)
		b->t_end = bench_now_ns();
	return 0;
}

/* ---- setup ---- */

static int session_open(struct bench *b, struct bench_session *s, unsigned idx)
{
	struct iscsi_context *parse = iscsi_create_context(b->o.initiator);
	struct iscsi_url *url;
	char portal[256];

	s->b = b;
	if (!parse) {
		fprintf(stderr, "hotlun-bench: cannot create an iSCSI context\n");
		return -ENOMEM;
	}
	url = iscsi_parse_full_url(parse, b->o.url);
	if (!url) {
		fprintf(stderr, "hotlun-bench: bad URL '%s': %s\n", b->o.url, iscsi_get_error(parse));
		iscsi_destroy_context(parse);
		return -EINVAL;
	}
	snprintf(b->target, sizeof(b->target), "%s", url->target);
	snprintf(b->user, sizeof(b->user), "%s", url->user);
	snprintf(b->passwd, sizeof(b->passwd), "%s", url->passwd);
	snprintf(portal, sizeof(portal), "%s", url->portal);
	s->lun = url->lun;
	iscsi_destroy_url(url);
	iscsi_destroy_context(parse);

	s->iscsi = bench_mpath_context(b, b->o.npaths > 0);
	if (!s->iscsi) {
		fprintf(stderr, "hotlun-bench: cannot create an iSCSI context\n");
		return -ENOMEM;
	}
	snprintf(s->paths[0].portal, sizeof(s->paths[0].portal), "%s", portal);
	if (bench_mpath_connect_sync(s->iscsi, portal, s->lun, b->o.npaths > 0) != 0) {
		fprintf(stderr, "hotlun-bench: session %u: login to %s failed: %s\n", idx, portal,
		        iscsi_get_error(s->iscsi));
		if (!b->o.npaths)
			return -ECONNREFUSED;
		/* another path may do */
		iscsi_destroy_context(s->iscsi);
		s->iscsi = NULL;
		s->paths[0].state = BENCH_PATH_DOWN;
	}
	return b->o.npaths ? bench_mpath_open(b, s, idx) : 0;
}

/* A command answered UNIT ATTENTION is sent again (a login without TEST UNIT READY meets them). */
static struct scsi_task *past_ua(struct scsi_task *task, struct iscsi_context *ctx, int lun,
                                 bool rc16)
{
	for (int i = 0; i < 5 && task && task->status == SCSI_STATUS_CHECK_CONDITION &&
	                task->sense.key == SCSI_SENSE_UNIT_ATTENTION;
	     i++) {
		scsi_free_scsi_task(task);
		task = rc16 ? iscsi_readcapacity16_sync(ctx, lun)
		            : iscsi_readcapacity10_sync(ctx, lun, 0, 0);
	}
	return task;
}

static int read_capacity(struct bench *b)
{
	struct bench_session *s = &b->sess[0];
	struct scsi_task *task = past_ua(iscsi_readcapacity16_sync(s->iscsi, s->lun), s->iscsi,
	                                 s->lun, true);

	if (task && task->status == SCSI_STATUS_GOOD) {
		struct scsi_readcapacity16 *rc16 = scsi_datain_unmarshall(task);
		if (rc16 && rc16->block_length) {
			b->lun_block = rc16->block_length;
			b->lun_bytes = (rc16->returned_lba + 1) * rc16->block_length;
		}
	}
	if (task)
		scsi_free_scsi_task(task);
	if (!b->lun_block) {
		task = past_ua(iscsi_readcapacity10_sync(s->iscsi, s->lun, 0, 0), s->iscsi, s->lun,
		               false);
		if (task && task->status == SCSI_STATUS_GOOD) {
			struct scsi_readcapacity10 *rc10 = scsi_datain_unmarshall(task);
			if (rc10 && rc10->block_size) {
				b->lun_block = rc10->block_size;
				b->lun_bytes = ((uint64_t)rc10->lba + 1) * rc10->block_size;
			}
		}
		if (task)
			scsi_free_scsi_task(task);
	}
	if (!b->lun_block || b->lun_block % 512) {
		fprintf(stderr, "hotlun-bench: READ CAPACITY failed: %s\n",
		        iscsi_get_error(s->iscsi));
		return -EIO;
	}
	return 0;
}

static int slots_alloc(struct bench *b, struct bench_session *s)
{
	s->slots = calloc(b->o.qd, sizeof(*s->slots));
	s->idle = calloc(b->o.qd, sizeof(*s->idle));
	if (!s->slots || !s->idle)
		return -ENOMEM;
	for (unsigned i = 0; i < b->o.qd; i++) {
		struct bench_slot *sl = &s->slots[i];
		void *p;
		if (posix_memalign(&p, 4096, BENCH_ALIGN_UP(b->wl.max_len, 4096)))
			return -ENOMEM;
		sl->buf = p;
		sl->sess = s;
		/* Without --verify, writes carry incompressible, non-zero data. */
		for (uint32_t w = 0; w + 8 <= b->wl.max_len; w += 8) {
			uint64_t x = bench_rng_next(&b->rng);
			memcpy(sl->buf + w, &x, 8);
		}
		s->idle[s->nidle++] = b->o.qd - 1 - i;
	}
	return 0;
}

static void teardown(struct bench *b)
{
	b->stop_issue = true; /* callbacks of cancelled commands must not start new ones */
	for (unsigned i = 0; i < b->nsess; i++) {
		struct bench_session *s = &b->sess[i];
		if (s->npaths > 1) {
			for (unsigned k = 0; k < s->npaths; k++) {
				struct bench_path *p = &s->paths[k];
				if (!p->iscsi)
					continue;
				if (s->inflight == 0 && p->state != BENCH_PATH_DOWN)
					iscsi_logout_sync(p->iscsi);
				iscsi_destroy_context(p->iscsi);
				p->iscsi = NULL;
			}
			s->iscsi = NULL;
		}
		if (s->iscsi) {
			if (s->inflight == 0)
				iscsi_logout_sync(s->iscsi);
			iscsi_destroy_context(s->iscsi);
		}
		if (s->slots)
			for (unsigned j = 0; j < b->o.qd; j++)
				free(s->slots[j].buf);
		free(s->slots);
		free(s->idle);
	}
	free(b->gen_map);
	free(b->lock_map);
	bench_trace_free(&b->trace);
	bench_series_free(&b->series);
	for (unsigned i = 0; i < BENCH_MAX_COMPARE; i++)
		bench_series_free(&b->compare[i]);
}

/* ---- command line ---- */

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: hotlun-bench [options] iscsi://[user%%pass@]host[:port]/IQN/LUN\n"
	        "       hotlun-bench --plot OUT.svg [--title T] RUN.csv [RUN.csv ...]\n"
	        "\n"
	        "workload:\n"
	        "  --workload W    uniform | zipf:THETA | hotset:IO/SPACE | seq |\n"
	        "                  trace:[vscsi:|msr:|blocks:]FILE      (default uniform)\n"
	        "  --bs LIST       4K | 4K,64K | 4K:70,64K:30            (default 4K)\n"
	        "  --read PCT      share of reads, 0..100                (default 100)\n"
	        "  --range SIZE    use only SIZE bytes of the LUN        (default all)\n"
	        "  --offset SIZE   ... starting at this byte offset      (default 0)\n"
	        "  --seed N        random seed                           (default from time)\n"
	        "load:\n"
	        "  --qd N          queue depth per session               (default 64)\n"
	        "  --sessions N    iSCSI sessions                        (default 1)\n"
	        "  --time S        measure for S seconds                 (default 30)\n"
	        "  --count N       measure exactly N I/Os (overrides --time)\n"
	        "  --warmup S      run S seconds before measuring        (default 0)\n"
	        "  --initiator IQN initiator name                        (default %s)\n"
	        "paths (one LUN through several portals, e.g. two gateways):\n"
	        "  --path H:P      another portal of the URL's target (repeatable, up to %d);\n"
	        "                  I/O goes to one path at a time, chosen from REPORT TARGET\n"
	        "                  PORT GROUPS (active/optimized first), and moves to another\n"
	        "                  on connection loss, ALUA sense (standby, transitioning,\n"
	        "                  unavailable) or an unanswered command (most recently used).\n"
	        "                  With no usable path, I/O waits (retries 50 ms .. 500 ms\n"
	        "                  apart, states read again each time) and a standby path of\n"
	        "                  an explicit-ALUA target is asked to become active/optimized\n"
	        "                  (SET TARGET PORT GROUPS, at most once a second)\n"
	        "  --path-timeout S  a command unanswered this long fails its path (default 5)\n"
	        "  --failover-timeout S  I/O fails after S seconds without a usable path\n"
	        "                  (default 60; 0 waits for ever)\n"
	        "output:\n"
	        "  --csv FILE      per-second series (IOPS, MB/s, p50/p99/p99.9 latency)\n"
	        "  --svg FILE      chart of this run (IOPS and latency over time)\n"
	        "  --compare CSV   also draw an earlier run in the --svg chart (repeatable)\n"
	        "  --label TEXT    name of this run in the chart legend and summary\n"
	        "  --title TEXT    chart title\n"
	        "  --quiet         no progress line on the terminal\n"
	        "checking:\n"
	        "  --verify        writes carry LBA + generation, reads are checked;\n"
	        "                  any mismatch is reported and the exit status is 1\n"
	        "\n"
	        "The last line printed is the summary: ... iops= mbps= p50_us= p99_us= ...\n"
	        "Exit status: 0 ok, 1 I/O errors or verify mismatches, 2 usage or setup error.\n",
	        DEFAULT_INITIATOR, BENCH_MAX_PATHS - 1);
}

enum {
	OPT_WORKLOAD = 256,
	OPT_BS,
	OPT_QD,
	OPT_SESSIONS,
	OPT_READ,
	OPT_TIME,
	OPT_COUNT,
	OPT_WARMUP,
	OPT_CSV,
	OPT_SVG,
	OPT_VERIFY,
	OPT_SEED,
	OPT_LABEL,
	OPT_TITLE,
	OPT_PLOT,
	OPT_RANGE,
	OPT_OFFSET,
	OPT_QUIET,
	OPT_COMPARE,
	OPT_INITIATOR,
	OPT_PATH,
	OPT_PATH_TIMEOUT,
	OPT_FAILOVER_TIMEOUT,
	OPT_HELP,
	OPT_VERSION,
};

static const struct option long_opts[] = {
    {"workload", required_argument, NULL, OPT_WORKLOAD},
    {"bs", required_argument, NULL, OPT_BS},
    {"qd", required_argument, NULL, OPT_QD},
    {"sessions", required_argument, NULL, OPT_SESSIONS},
    {"read", required_argument, NULL, OPT_READ},
    {"time", required_argument, NULL, OPT_TIME},
    {"count", required_argument, NULL, OPT_COUNT},
    {"warmup", required_argument, NULL, OPT_WARMUP},
    {"csv", required_argument, NULL, OPT_CSV},
    {"svg", required_argument, NULL, OPT_SVG},
    {"verify", no_argument, NULL, OPT_VERIFY},
    {"seed", required_argument, NULL, OPT_SEED},
    {"label", required_argument, NULL, OPT_LABEL},
    {"title", required_argument, NULL, OPT_TITLE},
    {"plot", required_argument, NULL, OPT_PLOT},
    {"range", required_argument, NULL, OPT_RANGE},
    {"offset", required_argument, NULL, OPT_OFFSET},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"compare", required_argument, NULL, OPT_COMPARE},
    {"initiator", required_argument, NULL, OPT_INITIATOR},
    {"path", required_argument, NULL, OPT_PATH},
    {"path-timeout", required_argument, NULL, OPT_PATH_TIMEOUT},
    {"failover-timeout", required_argument, NULL, OPT_FAILOVER_TIMEOUT},
    {"help", no_argument, NULL, OPT_HELP},
    {"version", no_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0},
};

static int bad_arg(const char *opt, const char *val)
{
	fprintf(stderr, "hotlun-bench: bad value '%s' for --%s (see --help)\n", val, opt);
	return 2;
}

static bool parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;
	errno = 0;
	if (!*s || *s == '-')
		return false;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return false;
	*out = v;
	return true;
}

static bool parse_double(const char *s, double min, double max, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= min && v <= max))
		return false;
	*out = v;
	return true;
}

static int plot_mode(const char *out, const char *title, int argc, char **argv)
{
	struct bench_series *runs;
	char err[512];
	int rc = 0, n = 0;

	if (argc < 1) {
		fprintf(stderr, "hotlun-bench: --plot needs at least one CSV file\n");
		return 2;
	}
	runs = calloc((size_t)argc, sizeof(*runs));
	if (!runs)
		return 2;
	for (int i = 0; i < argc; i++) {
		if (bench_csv_read(argv[i], &runs[i], err, sizeof(err)) != 0) {
			fprintf(stderr, "hotlun-bench: %s\n", err);
			rc = 2;
			goto out;
		}
		n++;
	}
	rc = bench_svg_write_file(out, runs, (size_t)n, title ? title : "hotlun-bench");
	if (rc) {
		fprintf(stderr, "hotlun-bench: writing %s: %s\n", out, strerror(-rc));
		rc = 2;
	} else {
		printf("wrote %s (%d run%s)\n", out, n, n == 1 ? "" : "s");
	}
out:
	for (int i = 0; i < n; i++)
		bench_series_free(&runs[i]);
	free(runs);
	return rc;
}

static void print_summary(struct bench *b)
{
	char wl[128], bs[128], label[128];
	double secs = (double)(b->t_end - b->t_measure) / 1e9;
	struct bench_sample all;

	fill_sample(b, &all, secs, secs, &b->all_hist, &b->all, 'm');
	snprintf(label, sizeof(label), "%s", b->o.label ? b->o.label : "run");
	for (char *p = label; *p; p++)
		if (*p == ' ' || *p == '\t' || *p == '=')
			*p = '_';
	bench_workload_name(&b->o.spec, wl, sizeof(wl));
	if (b->o.spec.kind == BENCH_WL_TRACE)
		snprintf(bs, sizeof(bs), "trace");
	else
		bench_bs_format(&b->o.spec, bs, sizeof(bs));

	if (b->progress)
		fputc('\n', stderr);
	printf("latency us: min %.1f  mean %.1f  p50 %.1f  p90 %.1f  p99 %.1f  p99.9 %.1f  "
	       "max %.1f\n",
	       b->all_hist.count ? (double)b->all_hist.min / 1e3 : 0.0,
	       bench_hist_mean(&b->all_hist) / 1e3, all.p50_us,
	       (double)bench_hist_percentile(&b->all_hist, 90) / 1e3, all.p99_us, all.p999_us,
	       all.max_us);
	if (b->o.verify && b->o.npaths)
		printf("verify: %" PRIu64 " blocks checked, %" PRIu64 " mismatches, %" PRIu64
		       " late writes of lost paths\n",
		       b->verify_checked, b->verify_errors, b->late_writes);
	else if (b->o.verify)
		printf("verify: %" PRIu64 " blocks checked, %" PRIu64 " mismatches\n",
		       b->verify_checked, b->verify_errors);
	char readpct[32];
	uint64_t ios = b->all.reads + b->all.writes;
	if (b->o.spec.kind == BENCH_WL_TRACE) /* the trace decides: report what it did */
		snprintf(readpct, sizeof(readpct), "%.0f",
		         ios ? 100.0 * (double)b->all.reads / (double)ios : 0.0);
	else
		snprintf(readpct, sizeof(readpct), "%g", b->o.spec.read_pct);
	printf("summary: label=%s workload=%s bs=%s qd=%u sessions=%u read=%s time_s=%.2f "
	       "ios=%" PRIu64 " reads=%" PRIu64 " writes=%" PRIu64 " iops=%.0f mbps=%.1f "
	       "p50_us=%.0f p99_us=%.0f p999_us=%.0f max_us=%.0f errors=%" PRIu64
	       " retries=%" PRIu64 " verify_errors=%" PRIu64,
	       label, wl, bs, b->o.qd, b->nsess, readpct, secs, ios, b->all.reads, b->all.writes,
	       all.iops, all.mbps, all.p50_us, all.p99_us, all.p999_us, all.max_us, b->all.errors,
	       b->ua_retries, b->verify_errors);
	if (b->o.npaths) {
		uint64_t no_path = 0;
		for (unsigned i = 0; i < b->nsess; i++) {
			uint64_t l = bench_failover_longest(&b->sess[i].fo, b->t_end);
			if (l > no_path)
				no_path = l;
		}
		printf(" paths=%u failovers=%" PRIu64 " path_retries=%" PRIu64 " stpg=%" PRIu64
		       " no_path_max_s=%.3f late_writes=%" PRIu64,
		       1 + b->o.npaths, b->failovers, b->path_retries, b->stpgs,
		       (double)no_path / 1e9, b->late_writes);
	}
	printf("\n");
	fflush(stdout);
}

int main(int argc, char **argv)
{
	static struct bench bench;
	struct bench *b = &bench;
	struct bench_opts *o = &b->o;
	const char *plot = NULL;
	char err[512];
	uint64_t v;
	int c, rc;

	o->qd = 64;
	o->sessions = 1;
	o->time_s = 30;
	o->spec.kind = BENCH_WL_UNIFORM;
	o->spec.read_pct = 100;
	o->spec.n_bs = 1;
	o->spec.bs[0].size = 4096;
	o->spec.bs[0].weight = 1;
	o->initiator = DEFAULT_INITIATOR;
	o->path_timeout_s = 5;
	o->failover_timeout_s = 60;

	while ((c = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
		switch (c) {
		case OPT_WORKLOAD:
			if (bench_workload_parse(optarg, &o->spec, err, sizeof(err))) {
				fprintf(stderr, "hotlun-bench: --workload: %s\n", err);
				return 2;
			}
			break;
		case OPT_BS:
			if (bench_bs_parse(optarg, &o->spec, err, sizeof(err))) {
				fprintf(stderr, "hotlun-bench: %s\n", err);
				return 2;
			}
			break;
		case OPT_QD:
			if (!parse_uint(optarg, 1, MAX_QD, &v))
				return bad_arg("qd", optarg);
			o->qd = (unsigned)v;
			break;
		case OPT_SESSIONS:
			if (!parse_uint(optarg, 1, BENCH_MAX_SESSIONS, &v))
				return bad_arg("sessions", optarg);
			o->sessions = (unsigned)v;
			break;
		case OPT_READ:
			if (!parse_double(optarg, 0, 100, &o->spec.read_pct))
				return bad_arg("read", optarg);
			break;
		case OPT_TIME:
			if (!parse_double(optarg, 0.001, 1e7, &o->time_s))
				return bad_arg("time", optarg);
			break;
		case OPT_COUNT:
			if (!parse_uint(optarg, 1, UINT64_MAX / 2, &o->count))
				return bad_arg("count", optarg);
			break;
		case OPT_WARMUP:
			if (!parse_double(optarg, 0, 1e7, &o->warmup_s))
				return bad_arg("warmup", optarg);
			break;
		case OPT_CSV:
			o->csv = optarg;
			break;
		case OPT_SVG:
			o->svg = optarg;
			break;
		case OPT_VERIFY:
			o->verify = true;
			break;
		case OPT_SEED:
			if (!parse_uint(optarg, 0, UINT64_MAX, &o->seed))
				return bad_arg("seed", optarg);
			o->seed_set = true;
			break;
		case OPT_LABEL:
			o->label = optarg;
			break;
		case OPT_TITLE:
			o->title = optarg;
			break;
		case OPT_PLOT:
			plot = optarg;
			break;
		case OPT_RANGE:
			if (hl_parse_size(optarg, &o->range_len) || o->range_len == 0)
				return bad_arg("range", optarg);
			break;
		case OPT_OFFSET:
			if (hl_parse_size(optarg, &o->range_off))
				return bad_arg("offset", optarg);
			break;
		case OPT_QUIET:
			o->quiet = true;
			break;
		case OPT_COMPARE:
			if (o->ncompare == BENCH_MAX_COMPARE) {
				fprintf(stderr, "hotlun-bench: at most %d --compare files\n",
				        BENCH_MAX_COMPARE);
				return 2;
			}
			o->compare[o->ncompare++] = optarg;
			break;
		case OPT_INITIATOR:
			o->initiator = optarg;
			break;
		case OPT_PATH:
			if (o->npaths >= BENCH_MAX_PATHS - 1 || !optarg[0] ||
			    strlen(optarg) >= 256) {
				fprintf(stderr, "hotlun-bench: --path: at most %d portals of up to 255 "
				                "characters\n", BENCH_MAX_PATHS - 1);
				return 2;
			}
			o->paths[o->npaths++] = optarg;
			break;
		case OPT_PATH_TIMEOUT: {
			char *end;
			double secs = strtod(optarg, &end);
			if (*end || end == optarg || secs < 0 || secs > 3600)
				return bad_arg("path-timeout", optarg);
			o->path_timeout_s = secs;
			break;
		}
		case OPT_FAILOVER_TIMEOUT:
			if (!parse_double(optarg, 0, 1e6, &o->failover_timeout_s))
				return bad_arg("failover-timeout", optarg);
			break;
		case 'h':
		case OPT_HELP:
			usage(stdout);
			return 0;
		case OPT_VERSION:
			printf("hotlun-bench %s\n", BENCH_VERSION);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (plot)
		return plot_mode(plot, o->title, argc - optind, argv + optind);
	if (optind != argc - 1) {
		usage(stderr);
		return 2;
	}
	o->url = argv[optind];

	if (!o->seed_set)
		o->seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	bench_rng_seed(&b->rng, o->seed);
	b->run_stamp = (uint32_t)(bench_rng_next(&b->rng) >> 32) | 1;

	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	rc = 2;
	if (o->ncompare && !o->svg) {
		fprintf(stderr, "hotlun-bench: --compare draws into the --svg chart: give --svg\n");
		goto out;
	}
	for (unsigned i = 0; i < o->ncompare; i++) {
		if (bench_csv_read(o->compare[i], &b->compare[i], err, sizeof(err)) != 0) {
			fprintf(stderr, "hotlun-bench: --compare %s\n", err);
			goto out;
		}
	}
	for (unsigned i = 0; i < o->sessions; i++) {
		if (session_open(b, &b->sess[i], i) != 0)
			goto out;
		b->nsess++;
	}
	if (read_capacity(b) != 0)
		goto out;

	if (o->spec.kind == BENCH_WL_TRACE) {
		if (bench_trace_load(o->spec.trace_path, o->spec.trace_fmt, o->spec.bs[0].size,
		                     &b->trace, err, sizeof(err)) != 0) {
			fprintf(stderr, "hotlun-bench: trace %s\n", err);
			goto out;
		}
		b->has_writes = b->trace.writes > 0;
	} else {
		b->has_writes = o->spec.read_pct < 100;
	}
	if (o->range_off >= b->lun_bytes) {
		fprintf(stderr,
		        "hotlun-bench: --offset is past the end of the LUN (%" PRIu64 " bytes)\n",
		        b->lun_bytes);
		goto out;
	}
	uint64_t range_len = o->range_len ? o->range_len : b->lun_bytes - o->range_off;
	if (o->range_off + range_len > b->lun_bytes) {
		fprintf(stderr,
		        "hotlun-bench: --offset + --range is past the end of the LUN (%" PRIu64
		        " bytes)\n",
		        b->lun_bytes);
		goto out;
	}
	range_len -= range_len % b->lun_block;
	if (bench_workload_init(&b->wl, &o->spec, b->lun_block, o->range_off, range_len, &b->trace,
	                        err, sizeof(err)) != 0) {
		fprintf(stderr, "hotlun-bench: %s\n", err);
		goto out;
	}
	if (o->verify) {
		if (b->wl.nunits > VERIFY_MAX_UNITS) {
			fprintf(
			    stderr,
			    "hotlun-bench: --verify tracks every block; use --range to verify at "
			    "most %llu blocks of %u bytes\n",
			    VERIFY_MAX_UNITS, b->wl.unit);
			goto out;
		}
		b->gen_map = calloc(b->wl.nunits, sizeof(*b->gen_map));
		b->lock_map = calloc(b->wl.nunits, 1);
		if (!b->gen_map || !b->lock_map) {
			fprintf(stderr, "hotlun-bench: out of memory for --verify maps\n");
			goto out;
		}
	}
	for (unsigned i = 0; i < b->nsess; i++) {
		if (slots_alloc(b, &b->sess[i]) != 0) {
			fprintf(stderr, "hotlun-bench: out of memory for I/O buffers\n");
			goto out;
		}
	}

	char wl[128], bs[128], meta[1024], size[32];
	bench_workload_name(&o->spec, wl, sizeof(wl));
	bench_bs_format(&o->spec, bs, sizeof(bs));
	snprintf(meta, sizeof(meta),
	         "url=%s workload=%s bs=%s read=%g qd=%u sessions=%u warmup=%g %s=%g seed=%" PRIu64
	         " lun_block=%u range=%" PRIu64 "+%" PRIu64 "%s",
	         o->url, wl, o->spec.kind == BENCH_WL_TRACE ? "trace" : bs, o->spec.read_pct, o->qd,
	         o->sessions, o->warmup_s, o->count ? "count" : "time",
	         o->count ? (double)o->count : o->time_s, o->seed, b->lun_block, o->range_off,
	         range_len, o->verify ? " verify" : "");
	if (o->csv) {
		b->csv = fopen(o->csv, "w");
		if (!b->csv) {
			fprintf(stderr, "hotlun-bench: %s: %s\n", o->csv, strerror(errno));
			goto out;
		}
		bench_csv_write_header(b->csv, o->label, meta);
	}
	snprintf(b->series.label, sizeof(b->series.label), "%s", o->label ? o->label : wl);

	b->progress = !o->quiet && isatty(STDERR_FILENO);
	bench_hist_reset(&b->sec_hist);
	bench_hist_reset(&b->all_hist);
	fprintf(stderr,
	        "hotlun-bench: %s, LUN %s in %u-byte blocks, range %s, %s, bs %s, read %g%%, "
	        "qd %u x %u session%s%s\n",
	        o->url, bench_format_size(b->lun_bytes, size, sizeof(size)), b->lun_block,
	        bench_format_size(range_len, meta, sizeof(meta)), wl,
	        o->spec.kind == BENCH_WL_TRACE ? "from trace" : bs, o->spec.read_pct, o->qd,
	        o->sessions, o->sessions == 1 ? "" : "s", o->verify ? ", verify" : "");
	if (o->spec.kind == BENCH_WL_TRACE)
		fprintf(stderr,
		        "hotlun-bench: trace %s: %zu records (%" PRIu64 " reads, %" PRIu64
		        " writes, %" PRIu64 " skipped), format %s\n",
		        o->spec.trace_path, b->trace.n, b->trace.reads, b->trace.writes,
		        b->trace.skipped, bench_trace_fmt_name(b->trace.fmt));

	int run_rc = run(b);
	if (run_rc != 0) {
		/* The measured part is still worth reporting; the status says it failed. */
		if (b->phase != BENCH_PH_DRAIN) {
			b->t_end = bench_now_ns();
			close_interval(b, b->t_end);
		}
		print_summary(b);
		rc = 2;
		goto out;
	}
	print_summary(b);
	rc = (b->all.errors || b->verify_errors) ? 1 : 0;

	if (o->svg) {
		char title[512];
		snprintf(title, sizeof(title), "%s", o->title ? o->title : "");
		if (!o->title)
			snprintf(title, sizeof(title), "hotlun-bench %s, bs %s, qd %u x %u", wl,
			         o->spec.kind == BENCH_WL_TRACE ? "trace" : bs, o->qd, o->sessions);
		/* earlier runs first, this run last (the last colour on top) */
		struct bench_series runs[BENCH_MAX_COMPARE + 1];
		for (unsigned i = 0; i < o->ncompare; i++)
			runs[i] = b->compare[i];
		runs[o->ncompare] = b->series;
		int src = bench_svg_write_file(o->svg, runs, o->ncompare + 1, title);
		if (src) {
			fprintf(stderr, "hotlun-bench: writing %s: %s\n", o->svg, strerror(-src));
			rc = 2;
		}
		/* the summary must stay the last line on stdout */
	}
out:
	if (b->csv && fclose(b->csv) != 0 && rc == 0) {
		fprintf(stderr, "hotlun-bench: closing %s failed\n", o->csv);
		rc = 2;
	}
	teardown(b);
	return rc;
}

