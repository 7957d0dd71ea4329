/*
 * bench_path.c - the decisions of hotlun-bench as a multipath client, kept
 * free of libiscsi and of the clock so that unit tests can drive them: which
 * path a session uses (most recently used), whether an I/O goes out, waits
 * for the next retry round or fails while no path is usable, on which path to
 * ask for active/optimized with SET TARGET PORT GROUPS, and the parsing of
 * the ALUA bits of INQUIRY, VPD 83h and REPORT TARGET PORT GROUPS.
 */
#include "bench/bench_internal.h"

#include <string.h>

const char *bench_path_state_str(enum bench_path_state st)
{
	switch (st) {
	case BENCH_PATH_AO:
		return "active/optimized";
	case BENCH_PATH_ANO:
		return "active/non-optimized";
	case BENCH_PATH_STANDBY:
		return "standby";
	case BENCH_PATH_UNAVAILABLE:
		return "unavailable";
	case BENCH_PATH_TRANSITIONING:
		return "transitioning";
	case BENCH_PATH_UNKNOWN:
		return "unknown";
	case BENCH_PATH_DOWN:
		return "down";
	}
	return "?";
}

int bench_path_rank(enum bench_path_state st)
{
	switch (st) {
	case BENCH_PATH_AO:
		return 0;
	case BENCH_PATH_ANO:
		return 1;
	case BENCH_PATH_UNKNOWN:
		return 2;
	case BENCH_PATH_TRANSITIONING:
		return 3;
	case BENCH_PATH_STANDBY:
		return 4;
	case BENCH_PATH_UNAVAILABLE:
		return 5;
	case BENCH_PATH_DOWN:
		break;
	}
	return 99;
}

bool bench_path_usable(enum bench_path_state st)
{
	/* unknown counts: the first I/O on it tells, and most targets are not ALUA */
	return st == BENCH_PATH_AO || st == BENCH_PATH_ANO || st == BENCH_PATH_UNKNOWN;
}

bool bench_path_may_try(const struct bench_path_view *v)
{
	if (bench_path_usable(v->state) || v->state == BENCH_PATH_TRANSITIONING)
		return true;
	/*
	 * Standby or unavailable as the path's own REPORT TARGET PORT GROUPS
	 * says: I/O would only be refused; the next report tells when that
	 * changes. Said by sense alone (the target reports no state for it):
	 * an I/O is the only way to find out.
	 */
	return v->state != BENCH_PATH_DOWN && !v->reported;
}

unsigned bench_path_choose(const struct bench_path_view *v, unsigned n, unsigned active)
{
	unsigned best = active;
	int br = bench_path_rank(v[active].state);

	if (bench_path_usable(v[active].state))
		return active;
	for (unsigned k = 1; k < n; k++) {
		unsigned i = (active + k) % n;
		int r = bench_path_rank(v[i].state);
		if (r < br) {
			best = i;
			br = r;
		}
	}
	return best;
}

int bench_path_stpg_pick(const struct bench_path_view *v, unsigned n, unsigned active, uint64_t now)
{
	int best = -1;

	for (unsigned i = 0; i < n; i++)
		/* a path that is active/optimized needs nobody asked; a move under way ends by
		 * itself */
		if (v[i].state == BENCH_PATH_AO || v[i].state == BENCH_PATH_TRANSITIONING)
			return -1;
	for (unsigned k = 0; k < n; k++) {
		unsigned i = (active + k) % n;
		if (!v[i].explicit_alua ||
		    (v[i].state != BENCH_PATH_STANDBY && v[i].state != BENCH_PATH_ANO))
			continue;
		if (best < 0 || bench_path_rank(v[i].state) < bench_path_rank(v[best].state))
			best = (int)i;
	}
	/*
	 * The one path to ask is the best one; while it waits out its gap no
	 * other is asked instead, so two gateways are never asked at once.
	 */
	if (best < 0 || v[best].stpg_busy ||
	    (v[best].stpg_ns && now - v[best].stpg_ns < BENCH_STPG_GAP_NS))
		return -1;
	return best;
}

/* ---- a session without a usable path ---- */

void bench_failover_note(struct bench_failover *f, bool usable, uint64_t now)
{
	if (usable) {
		if (f->since) {
			uint64_t len = now - f->since;
			if (len > f->longest_ns)
				f->longest_ns = len;
		}
		f->since = 0;
		f->backoff_ns = 0;
		f->round_ns = 0;
		return;
	}
	if (!f->since) {
		f->since = now ? now : 1;
		f->round_ns = now + BENCH_BACKOFF_MIN_NS;
		f->backoff_ns = 2 * BENCH_BACKOFF_MIN_NS;
	}
}

bool bench_failover_round(struct bench_failover *f, uint64_t now)
{
	if (!f->since || now < f->round_ns)
		return false;
	f->round++;
	f->round_ns = now + f->backoff_ns;
	f->backoff_ns =
	    f->backoff_ns * 2 > BENCH_BACKOFF_MAX_NS ? BENCH_BACKOFF_MAX_NS : f->backoff_ns * 2;
	return true;
}

uint64_t bench_failover_longest(const struct bench_failover *f, uint64_t now)
{
	uint64_t cur = f->since && now > f->since ? now - f->since : 0;

	return cur > f->longest_ns ? cur : f->longest_ns;
}

enum bench_path_verdict bench_path_decide(const struct bench_failover *f,
                                          const struct bench_path_view *active,
                                          uint64_t parked_round, uint64_t now, uint64_t timeout_ns)
{
	if (bench_path_usable(active->state))
		return BENCH_PATH_SEND;
	if (parked_round >= f->round)
		return BENCH_PATH_WAIT; /* once per round: the backoff */
	if (timeout_ns && f->since && now - f->since >= timeout_ns)
		return BENCH_PATH_FAIL;
	return bench_path_may_try(active) ? BENCH_PATH_SEND : BENCH_PATH_WAIT;
}

/* ---- the ALUA bits of the target's answers ---- */

unsigned bench_inquiry_tpgs(const uint8_t *d, size_t size)
{
	return size > 5 ? (d[5] >> 4) & 3 : 0;
}

int bench_vpd83_tpg(const uint8_t *d, size_t size)
{
	int tpg = -1;

	if (size < 4)
		return -1;
	size_t len = 4 + ((size_t)d[2] << 8 | d[3]);
	if (len > size)
		len = size;
	for (size_t off = 4; off + 4 <= len; off += 4 + d[off + 3]) {
		unsigned assoc = (d[off + 1] >> 4) & 3, type = d[off + 1] & 0xf;
		/* target port group designator: associated with the target port, type 5 */
		if (assoc == 1 && type == 5 && d[off + 3] >= 4 && off + 8 <= len)
			tpg = d[off + 6] << 8 | d[off + 7];
	}
	return tpg;
}

bool bench_rtpg_state(const uint8_t *d, size_t size, int group, enum bench_path_state *st)
{
	if (size < 4 || group < 0)
		return false;
	size_t len = 4 + ((size_t)d[0] << 24 | (size_t)d[1] << 16 | (size_t)d[2] << 8 | d[3]);

	if (len > size)
		len = size;
	/* the length-only header (PARAMETER DATA FORMAT 000b, as asked), then the groups */
	for (size_t off = 4; off + 8 <= len; off += 8 + 4 * (size_t)d[off + 7]) {
		if ((d[off + 2] << 8 | d[off + 3]) != group)
			continue;
		unsigned s = d[off] & 0x0f;
		switch (s) {
		case BENCH_PATH_AO:
		case BENCH_PATH_ANO:
		case BENCH_PATH_STANDBY:
		case BENCH_PATH_UNAVAILABLE:
		case BENCH_PATH_TRANSITIONING:
			*st = (enum bench_path_state)s;
			return true;
		default: /* logical block dependent, offline: nothing I/O can use */
			*st = BENCH_PATH_UNAVAILABLE;
			return true;
		}
	}
	return false;
}

void bench_stpg_build(uint8_t cdb[12], uint8_t param[BENCH_STPG_PARAM_LEN], int group)
{
	memset(cdb, 0, 12);
	cdb[0] = 0xa4; /* MAINTENANCE OUT */
	cdb[1] = 0x0a; /* SET TARGET PORT GROUPS */
	cdb[9] = BENCH_STPG_PARAM_LEN;
	memset(param, 0, BENCH_STPG_PARAM_LEN);
	param[4] = BENCH_PATH_AO;
	param[6] = (uint8_t)(group >> 8);
	param[7] = (uint8_t)group;
}
