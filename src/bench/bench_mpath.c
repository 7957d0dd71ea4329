/*
 * bench_mpath.c - the paths of a hotlun-bench session (--path): logins on
 * every portal, each path's ALUA state from REPORT TARGET PORT GROUPS (asked
 * without blocking, again in every retry round while no path is usable),
 * I/O on one path at a time with a move on connection loss, ALUA sense or a
 * path that stops answering (as ESXi's MRU policy does), SET TARGET PORT
 * GROUPS sent to a standby gateway, logins again on down paths, and the
 * parked I/O that fails after --failover-timeout. The decisions themselves
 * are bench_path.c's (pure, unit-tested); this is the libiscsi glue.
 */
#include "bench/bench_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
#include <stdio.h>
#include <string.h>

/* What the decisions of bench_path.c see of a path. */
struct bench_path_view bench_mpath_view(const struct bench_path *p)
{
	return (struct bench_path_view){
	    .state = p->state,
	    .reported = p->reported,
	    .explicit_alua = p->explicit_alua && p->tpg >= 0 && p->iscsi && !p->relogin,
	    .stpg_busy = p->stpg_busy,
	    .stpg_ns = p->stpg_ns,
	};
}

static void path_views(const struct bench_session *s, struct bench_path_view *v)
{
	for (unsigned i = 0; i < s->npaths; i++)
		v[i] = bench_mpath_view(&s->paths[i]);
}

bool bench_mpath_usable(const struct bench_session *s)
{
	for (unsigned i = 0; i < s->npaths; i++)
		if (bench_path_usable(s->paths[i].state))
			return true;
	return false;
}

/*
 * Most recently used: a session stays on its path while that path can take
 * I/O, and moves (to the best state, the next path first on a tie) only when
 * it cannot. @return false when no path is left at all.
 */
bool bench_mpath_choose(struct bench *b, struct bench_session *s, const char *why)
{
	struct bench_path_view v[BENCH_MAX_PATHS];
	unsigned best;

	path_views(s, v);
	best = bench_path_choose(v, s->npaths, s->active);
	if (best != s->active) {
		fprintf(stderr, "\npath: session %u moves from %s to %s (%s; %s there)\n",
		        (unsigned)(s - b->sess), s->paths[s->active].portal, s->paths[best].portal,
		        why, bench_path_state_str(s->paths[best].state));
		s->active = best;
		b->failovers++;
	}
	s->iscsi = s->paths[best].state != BENCH_PATH_DOWN ? s->paths[best].iscsi : NULL;
	return s->iscsi != NULL;
}

/* Take a path down: move the session off it, then drop its connection. */
void bench_mpath_down(struct bench *b, struct bench_session *s, unsigned i, const char *why)
{
	struct bench_path *p = &s->paths[i];
	struct iscsi_context *ctx = p->iscsi;

	if (p->state != BENCH_PATH_DOWN)
		fprintf(stderr, "\npath: session %u: %s is down (%s)\n", (unsigned)(s - b->sess),
		        p->portal, why);
	p->state = BENCH_PATH_DOWN;
	p->iscsi = NULL;
	p->relogin = false;
	p->connecting = false;
	p->next_try_ns = bench_now_ns() + 1000000000ULL;
	if (i == s->active)
		bench_mpath_choose(b, s, why);
	/* its commands come back CANCELLED and go out again on the active path */
	if (ctx)
		iscsi_destroy_context(ctx);
	p->reported = false;
	p->rtpg_ns = 0;
	p->stpg_busy = false;
}

/* A context for the URL's target; with several paths, without libiscsi's reconnect. */
struct iscsi_context *bench_mpath_context(struct bench *b, bool multipath)
{
	struct iscsi_context *ctx = iscsi_create_context(b->o.initiator);

	if (!ctx)
		return NULL;
	iscsi_set_targetname(ctx, b->target);
	iscsi_set_session_type(ctx, ISCSI_SESSION_NORMAL);
	iscsi_set_header_digest(ctx, ISCSI_HEADER_DIGEST_NONE_CRC32C);
	if (b->user[0])
		iscsi_set_initiator_username_pwd(ctx, b->user, b->passwd);
	/* a lost connection is a failed path: its commands move, libiscsi does not retry */
	if (multipath)
		iscsi_set_noautoreconnect(ctx, 1);
	return ctx;
}

static void path_login_done(struct iscsi_context *iscsi, int status, void *data, void *private)
{
	struct bench_path *p = private;

	(void)iscsi;
	(void)data;
	p->connecting = false;
	p->login_status = status == SCSI_STATUS_GOOD ? 0 : -1;
}

/*
 * A path logs in without libiscsi's TEST UNIT READY (iscsi_full_connect):
 * a standby gateway answers it NOT READY (04h/0Bh) and the login would
 * fail, yet a standby path is one to keep: it reports states and takes SET
 * TARGET PORT GROUPS. Unit attentions come with the first commands instead.
 */
int bench_mpath_connect_sync(struct iscsi_context *ctx, const char *portal, int lun, bool multipath)
{
	if (!multipath)
		return iscsi_full_connect_sync(ctx, portal, lun);
	if (iscsi_connect_sync(ctx, portal) != 0 || iscsi_login_sync(ctx) != 0)
		return -1;
	/* the unit attentions a new nexus starts with (POWER ON), whatever the path's state */
	for (int i = 0; i < 4; i++) {
		struct scsi_task *t = iscsi_testunitready_sync(ctx, lun);
		bool ua = t && t->status == SCSI_STATUS_CHECK_CONDITION &&
		          t->sense.key == SCSI_SENSE_UNIT_ATTENTION;
		if (t)
			scsi_free_scsi_task(t);
		if (!ua)
			break;
	}
	return 0;
}

static void path_connected(struct iscsi_context *iscsi, int status, void *data, void *private)
{
	struct bench_path *p = private;

	(void)data;
	if (status != SCSI_STATUS_GOOD || iscsi_login_async(iscsi, path_login_done, p) != 0)
		path_login_done(iscsi, SCSI_STATUS_ERROR, NULL, p);
}

/* ---- what each path's gateway says (ALUA), asked without blocking ---- */

/* A session with several paths: which state sense data puts a path in, if any. */
bool bench_mpath_alua_sense(const struct scsi_task *task, enum bench_path_state *st)
{
	if (!task || task->sense.key != SCSI_SENSE_NOT_READY)
		return false;
	switch (task->sense.ascq) {
	case 0x040a:
		*st = BENCH_PATH_TRANSITIONING;
		return true;
	case 0x040b:
		*st = BENCH_PATH_STANDBY;
		return true;
	case 0x040c:
		*st = BENCH_PATH_UNAVAILABLE;
		return true;
	}
	return false;
}

/*
 * The callbacks below also run for a context being destroyed (bench_mpath_down,
 * teardown) with SCSI_STATUS_CANCELLED: they clear their flag, and use the
 * answer only when it came from the path's current connection.
 */
static void path_rtpg_done(struct iscsi_context *iscsi, int status, void *command_data,
                           void *private)
{
	struct bench_path *p = private;
	struct scsi_task *t = command_data;
	enum bench_path_state st;

	p->rtpg_ns = 0;
	if (p->iscsi == iscsi && p->state != BENCH_PATH_DOWN) {
		p->reported = status == SCSI_STATUS_GOOD && t &&
		              bench_rtpg_state(t->datain.data, (size_t)t->datain.size, p->tpg, &st);
		if (p->reported)
			p->state = st;
	}
	if (t)
		scsi_free_scsi_task(t);
}

/* REPORT TARGET PORT GROUPS on path p: its state from its own gateway (one at a time). */
static void path_ask_state(struct bench_path *p, uint64_t now)
{
	unsigned char cdb[12] = {0xa3, 0x0a, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0};
	struct scsi_task *t;

	if (!p->iscsi || p->state == BENCH_PATH_DOWN || p->rtpg_ns)
		return;
	t = scsi_create_task(12, cdb, SCSI_XFER_READ, 4096);
	if (!t)
		return;
	if (iscsi_scsi_command_async(p->iscsi, p->sess->lun, t, path_rtpg_done, NULL, p) != 0) {
		scsi_free_scsi_task(t);
		return;
	}
	p->rtpg_ns = now;
}

static void path_inquiry_done(struct iscsi_context *iscsi, int status, void *command_data,
                              void *private)
{
	struct bench_path *p = private;
	struct scsi_task *t = command_data;

	if (p->iscsi == iscsi && status == SCSI_STATUS_GOOD && t) {
		if (t->cdb[1] & 1) /* EVPD: page 83h */
			p->tpg = bench_vpd83_tpg(t->datain.data, (size_t)t->datain.size);
		else
			p->explicit_alua =
			    bench_inquiry_tpgs(t->datain.data, (size_t)t->datain.size) & 2;
	}
	if (t)
		scsi_free_scsi_task(t);
}

/* A path that logged in again: what it is (explicit ALUA? its group) and its state. */
static void path_ask_all(struct bench_path *p, uint64_t now)
{
	/* one that cannot be sent leaves what was known: the path is only not asked with STPG */
	(void)iscsi_inquiry_task(p->iscsi, p->sess->lun, 0, 0, 255, path_inquiry_done, p);
	if (p->tpg < 0)
		(void)iscsi_inquiry_task(p->iscsi, p->sess->lun, 1, 0x83, 1024, path_inquiry_done,
		                         p);
	path_ask_state(p, now);
}

static void path_stpg_done(struct iscsi_context *iscsi, int status, void *command_data,
                           void *private)
{
	struct bench_path *p = private;
	struct scsi_task *t = command_data;
	struct bench *b = p->sess->b;
	static unsigned shown;

	p->stpg_busy = false;
	if (p->iscsi == iscsi && status == SCSI_STATUS_CHECK_CONDITION && t) {
		/* refused (ABORTED COMMAND 67h/0Ah) or not taken: waiting goes on */
		if (shown++ < 10)
			fprintf(stderr, "\npath: session %u: %s answers STPG with %s, %s\n",
			        (unsigned)(p->sess - b->sess), p->portal,
			        scsi_sense_key_str(t->sense.key),
			        scsi_sense_ascq_str(t->sense.ascq));
		if (t->sense.key == SCSI_SENSE_ILLEGAL_REQUEST)
			p->explicit_alua = false; /* it does not take STPG after all */
	} else if (p->iscsi == iscsi && status == SCSI_STATUS_GOOD) {
		path_ask_state(p, bench_now_ns()); /* the move has begun: see it start */
	}
	if (t)
		scsi_free_scsi_task(t);
}

/*
 * Explicit ALUA, as scsi_dh_alua and ESXi activate a standby path: with no
 * active/optimized path, ask the best standby (or non-optimized) path's
 * gateway to make its own group active/optimized; at most once a second.
 */
static void path_maybe_stpg(struct bench *b, struct bench_session *s, uint64_t now)
{
	struct bench_path_view v[BENCH_MAX_PATHS];
	uint8_t cdb[12];
	struct scsi_task *t;
	int i;

	path_views(s, v);
	i = bench_path_stpg_pick(v, s->npaths, s->active, now);
	if (i < 0 || b->phase == BENCH_PH_DRAIN)
		return;
	struct bench_path *p = &s->paths[i];
	struct iscsi_data d = {.size = BENCH_STPG_PARAM_LEN, .data = p->stpg_param};

	p->stpg_ns = now; /* also when it cannot be sent: tried again in a second */
	bench_stpg_build(cdb, p->stpg_param, p->tpg);
	t = scsi_create_task(12, cdb, SCSI_XFER_WRITE, BENCH_STPG_PARAM_LEN);
	if (!t)
		return;
	if (iscsi_scsi_command_async(p->iscsi, s->lun, t, path_stpg_done, &d, p) != 0) {
		scsi_free_scsi_task(t);
		return;
	}
	p->stpg_busy = true;
	b->stpgs++;
	fprintf(stderr, "\npath: session %u asks %s to become active/optimized (STPG)\n",
	        (unsigned)(s - b->sess), p->portal);
}

/*
 * After a poll round: log in again on down paths, finish the logins that
 * ended; while no path is usable, read the states again once per retry round
 * and ask for active/optimized; fail a path that leaves a command unanswered.
 */
void bench_mpath_tend(struct bench *b, struct bench_session *s, uint64_t now)
{
	for (unsigned i = 0; i < s->npaths; i++) {
		struct bench_path *p = &s->paths[i];
		if (p->state != BENCH_PATH_DOWN || p->connecting)
			continue;
		if (p->iscsi && p->relogin) { /* a login just ended */
			p->relogin = false;
			if (p->login_status == 0) {
				p->state = BENCH_PATH_UNKNOWN;
				p->reported = false;
				fprintf(stderr, "\npath: session %u: %s is back\n",
				        (unsigned)(s - b->sess), p->portal);
				path_ask_all(p, now);
				if (!s->iscsi)
					bench_mpath_choose(b, s, "a path came back");
				continue;
			}
			iscsi_destroy_context(p->iscsi);
			p->iscsi = NULL;
			p->next_try_ns = now + 2000000000ULL;
			continue;
		}
		if (now < p->next_try_ns || b->phase == BENCH_PH_DRAIN)
			continue;
		p->iscsi = bench_mpath_context(b, true);
		if (!p->iscsi)
			continue;
		p->relogin = true;
		p->connecting = true;
		p->login_status = -1;
		if (iscsi_connect_async(p->iscsi, p->portal, path_connected, p) != 0) {
			iscsi_destroy_context(p->iscsi);
			p->iscsi = NULL;
			p->relogin = false;
			p->connecting = false;
			p->next_try_ns = now + 2000000000ULL;
		}
	}
	/* states may have changed (answers, reports): the best path, and is there one? */
	if (!bench_path_usable(s->paths[s->active].state))
		bench_mpath_choose(b, s, "ALUA state");
	bench_failover_note(&s->fo, bench_mpath_usable(s), now);
	if (bench_failover_round(&s->fo, now))
		for (unsigned i = 0; i < s->npaths; i++)
			path_ask_state(&s->paths[i], now);
	path_maybe_stpg(b, s, now);

	if (b->o.path_timeout_s <= 0)
		return;
	/* a path whose oldest command went unanswered too long is down (a hung gateway) */
	uint64_t limit = (uint64_t)(b->o.path_timeout_s * 1e9);
	for (unsigned j = 0; j < b->o.qd; j++) {
		const struct bench_slot *sl = &s->slots[j];
		if (sl->busy && sl->path < s->npaths &&
		    s->paths[sl->path].state != BENCH_PATH_DOWN && now - sl->t_sent > limit) {
			bench_mpath_down(b, s, sl->path, "a command unanswered for too long");
			break;
		}
	}
	for (unsigned i = 0; i < s->npaths; i++) {
		const struct bench_path *p = &s->paths[i];
		if (p->state != BENCH_PATH_DOWN && ((p->rtpg_ns && now - p->rtpg_ns > limit) ||
		                                    (p->stpg_busy && now - p->stpg_ns > limit)))
			bench_mpath_down(b, s, i, "a command unanswered for too long");
	}
}

/* VPD 83h's target port group designator, or -1. */
static int path_read_tpg(struct iscsi_context *ctx, int lun)
{
	struct scsi_task *t = iscsi_inquiry_sync(ctx, lun, 1, 0x83, 1024);
	int tpg = -1;

	if (t && t->status == SCSI_STATUS_GOOD)
		tpg = bench_vpd83_tpg(t->datain.data, (size_t)t->datain.size);
	if (t)
		scsi_free_scsi_task(t);
	return tpg;
}

/* Standard INQUIRY: does the target take SET TARGET PORT GROUPS (TPGS explicit)? */
static bool path_read_explicit(struct iscsi_context *ctx, int lun)
{
	struct scsi_task *t = iscsi_inquiry_sync(ctx, lun, 0, 0, 255);
	bool explicit_alua = false;

	if (t && t->status == SCSI_STATUS_GOOD)
		explicit_alua = bench_inquiry_tpgs(t->datain.data, (size_t)t->datain.size) & 2;
	if (t)
		scsi_free_scsi_task(t);
	return explicit_alua;
}

/* REPORT TARGET PORT GROUPS through ctx (at setup): each path's state from its group's. */
static void paths_read_states(struct bench_session *s, struct iscsi_context *ctx)
{
	unsigned char cdb[12] = {0xa3, 0x0a, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0};
	struct scsi_task *t = scsi_create_task(12, cdb, SCSI_XFER_READ, 4096);

	if (!t)
		return;
	if (iscsi_scsi_command_sync(ctx, s->lun, t, NULL) && t->status == SCSI_STATUS_GOOD) {
		for (unsigned i = 0; i < s->npaths; i++) {
			struct bench_path *p = &s->paths[i];
			enum bench_path_state st;
			if (p->state != BENCH_PATH_DOWN &&
			    bench_rtpg_state(t->datain.data, (size_t)t->datain.size, p->tpg, &st)) {
				p->state = st;
				p->reported = true;
			}
		}
	}
	scsi_free_scsi_task(t);
}

/*
 * No path has been usable for --failover-timeout: a parked I/O fails. It is
 * not in flight and holds no verify lock (requeue let go of both; a write
 * among them is unknown there until written again).
 */
void bench_mpath_fail_parked(struct bench *b, struct bench_session *s, struct bench_slot *sl)
{
	static unsigned shown;

	if (shown++ < 10)
		fprintf(stderr, "\n%s at lba %" PRIu64 " failed: no usable path for %.1f s\n",
		        sl->io.write ? "write" : "read", sl->io.offset / b->lun_block,
		        (double)(bench_now_ns() - s->fo.since) / 1e9);
	if (b->phase != BENCH_PH_DRAIN) {
		b->sec.errors++;
		if (b->phase == BENCH_PH_MEASURE) {
			b->all.errors++;
			b->measured_done++;
		}
	}
	sl->planned = false;
	sl->resend = false;
	sl->parked_round = s->fo.round; /* its successor waits for the next round */
}

/* The --path portals of a session: log in on each, read the ALUA states, pick one. */
int bench_mpath_open(struct bench *b, struct bench_session *s, unsigned idx)
{
	unsigned live = 0;

	s->npaths = 1 + b->o.npaths;
	for (unsigned k = 0; k < s->npaths; k++) {
		struct bench_path *p = &s->paths[k];
		if (k > 0)
			snprintf(p->portal, sizeof(p->portal), "%s", b->o.paths[k - 1]);
		p->sess = s;
		p->tpg = -1;
		p->state = BENCH_PATH_UNKNOWN;
		if (k == 0) { /* the URL's, logged in already (or down from the start) */
			p->iscsi = s->iscsi;
			if (!p->iscsi) {
				p->state = BENCH_PATH_DOWN;
				p->next_try_ns = bench_now_ns() + 1000000000ULL;
				continue;
			}
		} else {
			p->iscsi = bench_mpath_context(b, true);
			if (!p->iscsi)
				return -ENOMEM;
			if (bench_mpath_connect_sync(p->iscsi, p->portal, s->lun, true) != 0) {
				fprintf(stderr,
				        "hotlun-bench: session %u: login to %s failed: %s\n", idx,
				        p->portal, iscsi_get_error(p->iscsi));
				iscsi_destroy_context(p->iscsi);
				p->iscsi = NULL;
				p->state = BENCH_PATH_DOWN;
				p->next_try_ns = bench_now_ns() + 1000000000ULL;
				continue;
			}
		}
		p->tpg = path_read_tpg(p->iscsi, s->lun);
		p->explicit_alua = path_read_explicit(p->iscsi, s->lun);
		live++;
	}
	if (!live)
		return -ECONNREFUSED;
	for (unsigned k = 0; k < s->npaths; k++)
		if (s->paths[k].iscsi) {
			paths_read_states(s, s->paths[k].iscsi);
			break;
		}
	/* start on the best path: active/optimized first */
	s->active = 0;
	int br = bench_path_rank(s->paths[0].state);
	for (unsigned k = 1; k < s->npaths; k++)
		if (bench_path_rank(s->paths[k].state) < br) {
			br = bench_path_rank(s->paths[k].state);
			s->active = k;
		}
	s->iscsi = s->paths[s->active].iscsi;
	for (unsigned k = 0; k < s->npaths; k++)
		fprintf(stderr,
		        "hotlun-bench: session %u path %u %s: target port group %d, %s%s%s\n", idx,
		        k, s->paths[k].portal, s->paths[k].tpg,
		        bench_path_state_str(s->paths[k].state), k == s->active ? " (in use)" : "",
		        s->paths[k].explicit_alua ? ", explicit ALUA" : "");
	return 0;
}
