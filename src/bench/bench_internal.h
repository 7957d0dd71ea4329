/*
 * bench_internal.h - what the files of hotlun-bench share: the random number
 * generator, the latency histogram, the workload generators, the trace
 * readers, the verify pattern, the per-second series (CSV), the SVG plot, the
 * multipath decisions (pure: bench_path.c), and the state of a run with the
 * multipath glue around those decisions (libiscsi: bench_mpath.c).
 *
 * hotlun-bench is a program, not part of libhotlun; these declarations are
 * private to src/bench and its unit tests. Nothing here blocks or allocates
 * behind the caller's back except where a function says so.
 */
#ifndef HOTLUN_BENCH_INTERNAL_H
#define HOTLUN_BENCH_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "hotlun/util.h"

#define BENCH_ALIGN_UP(n, a) ((((uint64_t)(n) + (a)-1) / (a)) * (a))
#define BENCH_MIN(a, b)      ((uint64_t)(a) < (uint64_t)(b) ? (uint64_t)(a) : (uint64_t)(b))

/* ---- parsing helpers (bench_util.c) ---- */

/* Byte sizes ("4K", "64KiB", "1G") are parsed by hl_parse_size() (hotlun/util.h). */

/** Format a byte count compactly ("4K", "64K", "1M", "1536"). Returns buf. */
const char *bench_format_size(uint64_t v, char *buf, size_t len);

/* ---- random numbers (xoshiro256**, seeded through splitmix64) ---- */

struct bench_rng {
	uint64_t s[4];
};

/** Seed deterministically: the same seed gives the same sequence. */
void bench_rng_seed(struct bench_rng *r, uint64_t seed);

/** Next 64 random bits. */
uint64_t bench_rng_next(struct bench_rng *r);

/** Uniform double in [0, 1). */
double bench_rng_double(struct bench_rng *r);

/** Uniform integer in [0, n); n == 0 returns 0. Unbiased (rejection). */
uint64_t bench_rng_below(struct bench_rng *r, uint64_t n);

/** splitmix64 finaliser: a good 64-bit mixing function. */
static inline uint64_t bench_mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ULL;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* ---- latency histogram (bench_hist.c) ---- */

/*
 * Log-linear ("HDR-style") histogram of nanosecond values: values below
 * 2 * BENCH_HIST_SUB are exact; above that each power of two is split into
 * BENCH_HIST_SUB / 2 linear buckets, so a bucket is at most 1/64 (1.6 %) of
 * its value wide: two significant digits over the whole 64-bit range.
 */
#define BENCH_HIST_SUB_BITS 7
#define BENCH_HIST_SUB      (1u << BENCH_HIST_SUB_BITS)
#define BENCH_HIST_HALF     (BENCH_HIST_SUB / 2)
#define BENCH_HIST_NBUCKETS ((64 - BENCH_HIST_SUB_BITS + 2) * BENCH_HIST_HALF)

struct bench_hist {
	uint64_t count;
	uint64_t sum;
	uint64_t min;
	uint64_t max;
	uint64_t buckets[BENCH_HIST_NBUCKETS];
};

/** Empty the histogram (the caller owns the storage). */
void bench_hist_reset(struct bench_hist *h);

/** Record one value. O(1), no allocation. */
void bench_hist_add(struct bench_hist *h, uint64_t v);

/** Add every value of src into dst. */
void bench_hist_merge(struct bench_hist *dst, const struct bench_hist *src);

/**
 * Value at percentile p (0 < p <= 100): the midpoint of the bucket that holds
 * the ceil(p/100 * count)-th smallest value, clamped to [min, max].
 * Returns 0 for an empty histogram.
 */
uint64_t bench_hist_percentile(const struct bench_hist *h, double p);

/** Mean of the recorded values (exact), 0 when empty. */
double bench_hist_mean(const struct bench_hist *h);

/** Bucket index of a value, and the smallest / largest value of a bucket. */
unsigned bench_hist_index(uint64_t v);
uint64_t bench_hist_bucket_low(unsigned idx);
uint64_t bench_hist_bucket_high(unsigned idx);

/* ---- traces (bench_trace.c) ---- */

enum bench_trace_fmt {
	BENCH_TRACE_AUTO = 0,
	BENCH_TRACE_VSCSI, /* vscsi v1 (32-byte) or v2 (40-byte) records */
	BENCH_TRACE_MSR,   /* MSR Cambridge CSV */
	BENCH_TRACE_BLOCKS /* one block number per line, read of one block */
};

struct bench_trace_rec {
	uint64_t offset; /* bytes */
	uint32_t len;    /* bytes, > 0 */
	uint8_t write;
};

struct bench_trace {
	struct bench_trace_rec *recs; /* owned; freed by bench_trace_free() */
	size_t n, cap;
	uint64_t max_end; /* largest offset + len seen */
	uint64_t reads, writes;
	uint64_t skipped; /* records that are neither read nor write, or malformed */
	enum bench_trace_fmt fmt;
};

/**
 * Read a whole trace file into memory. fmt AUTO looks at the content.
 * block_size is the size of one block of a BLOCKS trace (and its I/O size).
 * On error returns -errno and writes a message naming the file (and line)
 * into err. The caller frees t with bench_trace_free() in every case.
 */
int bench_trace_load(const char *path, enum bench_trace_fmt fmt, uint32_t block_size,
                     struct bench_trace *t, char *err, size_t errlen);

/** Parse an in-memory trace (same rules as bench_trace_load()). */
int bench_trace_parse(const void *buf, size_t len, enum bench_trace_fmt fmt, uint32_t block_size,
                      struct bench_trace *t, char *err, size_t errlen);

/** Guess the format of a trace from its first bytes. */
enum bench_trace_fmt bench_trace_detect(const void *buf, size_t len);

/** Parse "vscsi", "msr", "blocks", "auto"; returns -EINVAL for anything else. */
int bench_trace_fmt_parse(const char *s, enum bench_trace_fmt *out);

const char *bench_trace_fmt_name(enum bench_trace_fmt fmt);

void bench_trace_free(struct bench_trace *t);

/* ---- workloads (bench_workload.c) ---- */

enum bench_wl_kind {
	BENCH_WL_UNIFORM = 0,
	BENCH_WL_ZIPF,
	BENCH_WL_HOTSET,
	BENCH_WL_SEQ,
	BENCH_WL_TRACE,
};

#define BENCH_MAX_BS 8

struct bench_bs_choice {
	uint32_t size;   /* bytes */
	uint32_t weight; /* relative share of I/Os */
};

struct bench_workload_spec {
	enum bench_wl_kind kind;
	double theta;         /* zipf exponent, > 0 */
	double hot_io_pct;    /* hotset: share of I/O that goes to the hot set */
	double hot_space_pct; /* hotset: size of the hot set, % of the range */
	char trace_path[1024];
	enum bench_trace_fmt trace_fmt;
	struct bench_bs_choice bs[BENCH_MAX_BS];
	unsigned n_bs;
	double read_pct; /* 0..100 */
};

/**
 * Parse a --workload argument: "uniform", "zipf:0.9", "hotset:90/10", "seq",
 * "trace:FILE" or "trace:FMT:FILE" (FMT vscsi|msr|blocks). Fills kind and
 * its parameters. @return 0 or -EINVAL with a message in err.
 */
int bench_workload_parse(const char *s, struct bench_workload_spec *spec, char *err, size_t errlen);

/**
 * Parse a --bs argument: "4K", "4K,64K" (equal shares) or "4K:70,64K:30".
 * @return 0 or -EINVAL with a message in err.
 */
int bench_bs_parse(const char *s, struct bench_workload_spec *spec, char *err, size_t errlen);

/** Format the block-size list back ("4K", "4K:70,64K:30"). */
const char *bench_bs_format(const struct bench_workload_spec *spec, char *buf, size_t len);

/** Zipf sampler (rejection-inversion; O(1) per sample, any exponent > 0). */
struct bench_zipf {
	uint64_t n;
	double s;
	double hx1, hxn, sv;
};

/** Prepare a sampler over ranks 1..n with exponent s. @return 0 or -EINVAL. */
int bench_zipf_init(struct bench_zipf *z, uint64_t n, double s);

/** One rank in 1..n; rank 1 is the most popular. */
uint64_t bench_zipf_next(const struct bench_zipf *z, struct bench_rng *r);

/** One planned I/O: a byte range of the LUN and a direction. */
struct bench_io {
	uint64_t offset;
	uint32_t len;
	bool write;
};

struct bench_workload {
	struct bench_workload_spec spec;
	uint64_t range_off; /* bytes: the part of the LUN the workload uses */
	uint64_t range_len;
	uint32_t unit;               /* bytes: smallest I/O size and alignment */
	uint64_t nunits;             /* range_len / unit */
	uint64_t perm_mul, perm_add; /* rank -> unit scatter (a bijection) */
	uint32_t bs_total_weight;
	struct bench_zipf zipf;
	uint64_t seq_next;               /* bytes, relative to range_off */
	const struct bench_trace *trace; /* caller keeps; must outlive the workload */
	size_t trace_pos;
	uint64_t trace_passes;
	uint32_t lun_block;
	uint32_t max_len; /* largest I/O this workload plans, bytes */
};

/**
 * Prepare a generator over [range_off, range_off + range_len) of a LUN with
 * blocks of lun_block bytes. Every I/O is a multiple of lun_block and aligned
 * to its own size (trace I/Os: aligned to lun_block). trace is required for a
 * trace workload (caller keeps it). @return 0 or -EINVAL with a message.
 */
int bench_workload_init(struct bench_workload *wl, const struct bench_workload_spec *spec,
                        uint32_t lun_block, uint64_t range_off, uint64_t range_len,
                        const struct bench_trace *trace, char *err, size_t errlen);

/** Plan the next I/O. Uses (and advances) the caller's rng. */
void bench_workload_next(struct bench_workload *wl, struct bench_rng *r, struct bench_io *io);

/** Name of a workload for reports ("zipf:0.9", "hotset:90/10", ...). */
const char *bench_workload_name(const struct bench_workload_spec *spec, char *buf, size_t len);

/* ---- verify pattern (bench_pattern.c) ---- */

#define BENCH_PATTERN_SECTOR 512u
#define BENCH_PATTERN_MAGIC  0x484c42454e434831ULL /* "HLBENCH1" */

enum bench_pattern_status {
	BENCH_PAT_OK = 0,
	BENCH_PAT_ZERO,      /* all zeros: never written */
	BENCH_PAT_GARBAGE,   /* no pattern header at all */
	BENCH_PAT_WRONG_LBA, /* a valid pattern for another place (misdirected I/O) */
	BENCH_PAT_STALE,     /* a valid pattern of another generation */
	BENCH_PAT_CORRUPT,   /* right header, damaged payload */
};

struct bench_pattern_result {
	enum bench_pattern_status status;
	uint64_t sector;       /* byte offset / 512 of the first bad sector */
	uint64_t found_sector; /* what that sector's header says */
	uint64_t found_gen;
	uint32_t bad_word; /* index of the first bad 8-byte word in the sector */
};

/**
 * Fill buf (len a multiple of 512) with the pattern of the bytes at LUN byte
 * offset `offset` for generation gen (gen != 0).
 */
void bench_pattern_fill(void *buf, size_t len, uint64_t offset, uint64_t gen);

/**
 * Check buf, read from LUN byte offset `offset`. expect_gen 0 accepts any
 * generation (the payload must still match its own header). allow_foreign
 * accepts sectors without a pattern header (zeroes or other data: a block
 * whose content nobody knows); a sector that has the header is always
 * checked. Stops at the first bad sector.
 * @return BENCH_PAT_OK or the status also stored in res.
 */
enum bench_pattern_status bench_pattern_check(const void *buf, size_t len, uint64_t offset,
                                              uint64_t expect_gen, bool allow_foreign,
                                              struct bench_pattern_result *res);

const char *bench_pattern_status_str(enum bench_pattern_status st);

/*
 * Writes sent on a path that was lost before they were answered. The target
 * may still hold such a write (in its socket, queued for the disk) and
 * execute it after the copy sent again on another path, and even after a
 * later write to the same blocks: nothing orders commands across I_T
 * nexuses, and hotlun-bench, like dm-multipath and ESXi, sends again without
 * a fence. A read that finds one of these generations where a newer one
 * was written sees that late landing, not a target that lost data: --verify
 * counts it apart (late_writes=), each record at most once.
 */
#define BENCH_LOST_MAX 4096 /* records kept; the oldest go first */

struct bench_lost_set {
	struct {
		uint64_t unit;
		uint32_t gen; /* write counter of the lost attempt; 0 free */
	} v[BENCH_LOST_MAX];
	unsigned next; /* where the next record goes when every one is in use */
	unsigned used;
};

/** Record that the write of generation gen (write counter) to units [first, first + n) was lost. */
void bench_lost_add(struct bench_lost_set *ls, uint64_t first, uint64_t n, uint32_t gen);

/** Was gen lost on its way to unit? If so the record goes (a write lands once). */
bool bench_lost_take(struct bench_lost_set *ls, uint64_t unit, uint32_t gen);

/* ---- per-second series and CSV (bench_series.c) ---- */

struct bench_sample {
	double t;   /* seconds since the start of the run (end of the interval) */
	char phase; /* 'w' warm-up, 'm' measured */
	double iops, mbps;
	double read_iops, write_iops;
	double p50_us, p99_us, p999_us, max_us;
	uint64_t errors;
};

struct bench_series {
	char label[128];
	struct bench_sample *s; /* owned */
	size_t n, cap;
};

/** Append a copy of smp. @return 0 or -ENOMEM. */
int bench_series_append(struct bench_series *se, const struct bench_sample *smp);

void bench_series_free(struct bench_series *se);

/** Write the CSV comment block and column header. meta is one "# ..." line (may be NULL). */
int bench_csv_write_header(FILE *f, const char *label, const char *meta);

/** Write one row (flushes, so a killed run keeps its rows). */
int bench_csv_write_row(FILE *f, const struct bench_sample *smp);

/**
 * Read a CSV written by hotlun-bench (columns found by name; '#' lines are
 * comments, "# label=" sets the label, else the file's base name is used).
 * @return 0 or -errno with a message in err.
 */
int bench_csv_read(const char *path, struct bench_series *se, char *err, size_t errlen);

/* ---- SVG chart (bench_svg.c) ---- */

/**
 * Write a self-contained SVG: IOPS over time (top) and p50 / p99 latency over
 * time on a log scale (bottom), one colour per run, legend, warm-up shaded.
 * @return 0 or -errno (write error).
 */
int bench_svg_write(FILE *f, const struct bench_series *runs, size_t nruns, const char *title);

/** bench_svg_write() to a file path (written to path.tmp, then renamed). */
int bench_svg_write_file(const char *path, const struct bench_series *runs, size_t nruns,
                         const char *title);

/* ---- multipath decisions (bench_path.c) ---- */

/*
 * A path's ALUA state as REPORT TARGET PORT GROUPS gives it (SPC-4 6.37), and
 * two of ours: not known yet, and no connection.
 */
enum bench_path_state {
	BENCH_PATH_AO = 0x0,
	BENCH_PATH_ANO = 0x1,
	BENCH_PATH_STANDBY = 0x2,
	BENCH_PATH_UNAVAILABLE = 0x3,
	BENCH_PATH_TRANSITIONING = 0xf,
	BENCH_PATH_UNKNOWN = 0x10,
	BENCH_PATH_DOWN = 0x11,
};

#define BENCH_BACKOFF_MIN_NS (50ULL * 1000000ULL)  /* first wait without a usable path */
#define BENCH_BACKOFF_MAX_NS (500ULL * 1000000ULL) /* the wait doubles up to this */
#define BENCH_STPG_GAP_NS    1000000000ULL         /* at most one STPG a second per path */
#define BENCH_STPG_PARAM_LEN 8                     /* 4 reserved bytes, one descriptor */

/** What the decisions need to know of one path. */
struct bench_path_view {
	enum bench_path_state state;
	bool reported;      /* state from this path's own REPORT TARGET PORT GROUPS */
	bool explicit_alua; /* may be asked: INQUIRY TPGS explicit, group known, connected */
	bool stpg_busy;     /* an STPG on it is unanswered */
	uint64_t stpg_ns;   /* when the last STPG went out on it (ns), 0 never */
};

/** A session's stretch without a usable path, and its retry rounds. */
struct bench_failover {
	uint64_t since;      /* no usable path since then (ns), 0 while there is one */
	uint64_t longest_ns; /* the longest stretch that has ended */
	uint64_t backoff_ns; /* the wait after the next round */
	uint64_t round_ns;   /* the next round starts then */
	uint64_t round;      /* rounds so far (I/O parked in round r goes again in r + 1) */
};

enum bench_path_verdict {
	BENCH_PATH_SEND, /* send it on the session's path */
	BENCH_PATH_WAIT, /* keep it parked */
	BENCH_PATH_FAIL, /* no usable path for too long: it fails */
};

const char *bench_path_state_str(enum bench_path_state st);

/** Preference of a state, lower is better; DOWN is 99 (never chosen). */
int bench_path_rank(enum bench_path_state st);

/** AO, ANO or not known yet: I/O goes there without waiting. */
bool bench_path_usable(enum bench_path_state st);

/**
 * May a retry round send I/O to this path: usable, transitioning (the
 * transition ends by itself), or refused only by sense while the path's own
 * report says nothing (the I/O is the probe).
 */
bool bench_path_may_try(const struct bench_path_view *v);

/**
 * Most recently used: the active path while it is usable, else the best
 * ranked one (the next after active first on a tie). The result is DOWN only
 * when every path is.
 */
unsigned bench_path_choose(const struct bench_path_view *v, unsigned n, unsigned active);

/**
 * Which path to send SET TARGET PORT GROUPS on (asking its own group to
 * become active/optimized), or -1: only when no path is active/optimized or
 * transitioning, to the best standby or active/non-optimized path that takes
 * explicit ALUA, not within BENCH_STPG_GAP_NS of the last one on it.
 */
int bench_path_stpg_pick(const struct bench_path_view *v, unsigned n, unsigned active,
                         uint64_t now);

/**
 * Tell whether the session has a usable path at @now. The first "no" starts a
 * stretch and schedules round 1 at now + BENCH_BACKOFF_MIN_NS; a "yes" ends
 * the stretch (its length counts towards the longest) and resets the backoff.
 */
void bench_failover_note(struct bench_failover *f, bool usable, uint64_t now);

/**
 * During a stretch: @return true when a retry round is due (the caller then
 * reads the paths' states again); the next one is scheduled, the wait
 * doubling up to BENCH_BACKOFF_MAX_NS.
 */
bool bench_failover_round(struct bench_failover *f, uint64_t now);

/** The longest stretch without a usable path, the current one included. */
uint64_t bench_failover_longest(const struct bench_failover *f, uint64_t now);

/**
 * What happens to an I/O on the session's path @active: sent when the path is
 * usable; else parked until a round after @parked_round, then failed when the
 * stretch is @timeout_ns old (0: never), else sent if the path may be tried.
 */
enum bench_path_verdict bench_path_decide(const struct bench_failover *f,
                                          const struct bench_path_view *active,
                                          uint64_t parked_round, uint64_t now, uint64_t timeout_ns);

/** Standard INQUIRY's TPGS field (byte 5 bits 5:4; bit 5 set: explicit ALUA). */
unsigned bench_inquiry_tpgs(const uint8_t *d, size_t size);

/** VPD 83h's target port group designator, or -1. */
int bench_vpd83_tpg(const uint8_t *d, size_t size);

/**
 * The state of target port group @group in REPORT TARGET PORT GROUPS data
 * (length-only header). States I/O cannot use (offline, LBA dependent) come
 * back unavailable. @return false when the group is not listed.
 */
bool bench_rtpg_state(const uint8_t *d, size_t size, int group, enum bench_path_state *st);

/** SET TARGET PORT GROUPS asking @group to become active/optimized. */
void bench_stpg_build(uint8_t cdb[12], uint8_t param[BENCH_STPG_PARAM_LEN], int group);

/* ---- a run's state: options, sessions, paths, slots (hotlun_bench.c, bench_mpath.c) ---- */

struct iscsi_context;
struct scsi_task;

#define BENCH_MAX_SESSIONS 4096 /* a scale check logs in thousands (tests/bench/sessions_scale.sh) */
#define BENCH_MAX_COMPARE  15
#define BENCH_MAX_PATHS    8

struct bench_opts {
	struct bench_workload_spec spec;
	unsigned qd, sessions;
	double time_s, warmup_s;
	uint64_t count;
	uint64_t range_off, range_len; /* range_len 0: to the end of the LUN */
	const char *csv, *svg, *label, *title, *url, *initiator;
	const char *compare[BENCH_MAX_COMPARE]; /* --compare CSVs drawn with this run */
	unsigned ncompare;
	bool verify, quiet;
	uint64_t seed;
	bool seed_set;
	const char *paths[BENCH_MAX_PATHS - 1]; /* --path: more portals of the same target */
	unsigned npaths;
	double path_timeout_s;     /* a path whose oldest I/O is older than this is down */
	double failover_timeout_s; /* I/O without a usable path this long fails (0 never) */
};

struct bench;

struct bench_slot {
	struct bench_session *sess;
	uint8_t *buf; /* max I/O size; the data of the write or the read (owned) */
	struct bench_io io;
	uint64_t t0;      /* submit time, ns (the first one: a command sent again keeps it) */
	uint64_t t_sent;  /* when this attempt went out */
	bool resend;      /* the next submit sends the same command again */
	uint64_t gen;     /* --verify: generation a write carries */
	bool planned;     /* io is chosen but not started (verify lock busy, or a retry) */
	bool busy;        /* sent, not answered */
	unsigned path;    /* the path it was sent on */
	unsigned retries; /* unit attentions in a row for this I/O */
	/* no usable path: it goes again after this retry round (bench_path_decide) */
	uint64_t parked_round;
};

struct bench_path {
	char portal[256];
	struct bench_session *sess;
	struct iscsi_context *iscsi; /* NULL while down and not logging in again */
	enum bench_path_state state;
	bool reported;      /* state from its own REPORT TARGET PORT GROUPS */
	int tpg;            /* target port group (VPD 83h), -1 unknown */
	bool explicit_alua; /* INQUIRY TPGS bit 5: takes SET TARGET PORT GROUPS */
	uint64_t rtpg_ns;   /* a REPORT TARGET PORT GROUPS sent then is unanswered, 0 none */
	bool stpg_busy;     /* a SET TARGET PORT GROUPS is unanswered */
	uint64_t stpg_ns;   /* when the last one went out, 0 never */
	/* its data-out: libiscsi points at it until the callback */
	uint8_t stpg_param[BENCH_STPG_PARAM_LEN];
	bool relogin;         /* iscsi is a login again of a down path */
	bool connecting;      /* ... still under way */
	int login_status;     /* its result, seen after iscsi_service returns */
	uint64_t next_try_ns; /* a down path logs in again from then on */
};

struct bench_session {
	struct bench *b;
	struct iscsi_context *iscsi;
	int lun;
	struct bench_slot *slots;
	unsigned *idle; /* stack of idle slot indices */
	unsigned nidle;
	unsigned inflight;
	uint64_t reconnect_ns; /* last time libiscsi was seen reconnecting (0: never) */
	int last_fd;           /* the socket changes when libiscsi reconnects */
	/* path 0 is the URL's portal; iscsi == the active one's */
	struct bench_path paths[BENCH_MAX_PATHS];
	unsigned npaths, active;
	struct bench_failover fo; /* the stretch without a usable path, its retry rounds */
};

enum bench_phase { BENCH_PH_WARMUP, BENCH_PH_MEASURE, BENCH_PH_DRAIN };

struct bench_counters {
	uint64_t reads, writes, bytes, errors;
};

struct bench {
	struct bench_opts o;
	struct bench_session sess[BENCH_MAX_SESSIONS];
	unsigned nsess;
	uint32_t lun_block;
	uint64_t lun_bytes;
	struct bench_trace trace;
	struct bench_workload wl;
	struct bench_rng rng;
	bool has_writes;

	enum bench_phase phase;
	bool stop_issue;
	uint64_t t_start, t_measure, t_end, t_tick;
	struct bench_hist sec_hist, all_hist;
	struct bench_counters sec, all;
	uint64_t inflight;
	uint64_t measured_done; /* completions in the measure phase */
	uint64_t ua_retries;    /* commands run again after a unit attention */
	uint64_t failovers;     /* moves of a session to another path */
	uint64_t path_retries;  /* commands sent again on another path */
	uint64_t stpgs;         /* SET TARGET PORT GROUPS sent */
	/* for logins on --path portals */
	char target[256], user[256], passwd[256];

	/* --verify */
	uint32_t *gen_map;  /* per workload unit: last good write counter, 0 unknown */
	uint8_t *lock_map;  /* per workload unit: 1 while an I/O covers it */
	uint32_t run_stamp; /* high half of every generation this run writes */
	uint32_t write_counter;
	uint64_t verify_errors;
	uint64_t verify_checked;
	uint64_t late_writes;       /* reads that found a lost path's write landed late */
	struct bench_lost_set lost; /* writes in flight on a path that was lost */

	FILE *csv;
	struct bench_series series;
	struct bench_series compare[BENCH_MAX_COMPARE]; /* read before the run starts */
	bool progress;
	int fatal;
};

/** CLOCK_MONOTONIC in nanoseconds (bench_util.c). */
uint64_t bench_now_ns(void);

/*
 * ---- multipath (bench_mpath.c): the paths of a session around the decisions of bench_path.c ----
 *
 * A session with --path portals has one path per portal, uses one at a time
 * (most recently used, as ESXi's MRU policy does) and learns each path's
 * ALUA state from REPORT TARGET PORT GROUPS, asked without blocking. All of
 * it runs on the one thread of hotlun-bench, from its poll loop.
 */

/** What the decisions of bench_path.c see of a path. */
struct bench_path_view bench_mpath_view(const struct bench_path *p);

/** Can any path of s take I/O now? */
bool bench_mpath_usable(const struct bench_session *s);

/**
 * Most recently used: s stays on its path while that path can take I/O,
 * and moves (to the best state, the next path first on a tie) only when it
 * cannot; s->iscsi follows. @return false when no path is left at all.
 */
bool bench_mpath_choose(struct bench *b, struct bench_session *s, const char *why);

/** Take path i of s down: move s off it, then drop its connection (its commands come back). */
void bench_mpath_down(struct bench *b, struct bench_session *s, unsigned i, const char *why);

/**
 * A new libiscsi context for the URL's target (the caller's, or NULL without
 * memory); with several paths (multipath), without libiscsi's reconnect.
 */
struct iscsi_context *bench_mpath_context(struct bench *b, bool multipath);

/**
 * Log ctx in to portal (blocking, at setup). With several paths, without the
 * TEST UNIT READY that a standby gateway would fail; the unit attentions a
 * new nexus starts with are taken instead. @return 0 or -1.
 */
int bench_mpath_connect_sync(struct iscsi_context *ctx, const char *portal, int lun,
                             bool multipath);

/** The ALUA state that task's sense data puts its path in, if any (NOT READY 04h/0Ah..0Ch). */
bool bench_mpath_alua_sense(const struct scsi_task *task, enum bench_path_state *st);

/**
 * After a poll round: log in again on down paths, finish the logins that
 * ended; while no path is usable, read the states again once per retry round
 * and ask for active/optimized (STPG); take down a path that leaves a command
 * unanswered for --path-timeout.
 */
void bench_mpath_tend(struct bench *b, struct bench_session *s, uint64_t now);

/**
 * At setup, blocking: log in on the --path portals of session idx (path 0 is
 * the URL's, already logged in or down), read their groups and states, and
 * start on the best one. @return 0, -ENOMEM, or -ECONNREFUSED when no path
 * logs in.
 */
int bench_mpath_open(struct bench *b, struct bench_session *s, unsigned idx);

/** No path has been usable for --failover-timeout: the parked I/O of slot sl fails. */
void bench_mpath_fail_parked(struct bench *b, struct bench_session *s, struct bench_slot *sl);

#endif
