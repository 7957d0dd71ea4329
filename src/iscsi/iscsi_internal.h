/*
 * iscsi_internal.h - what the files of src/iscsi share: the server, target,
 * portal, connection, session and task structures, and the functions one
 * file offers another (prefix iscsi_). Nothing here is exported.
 *
 * Ownership in one picture: the server owns targets and portals; a
 * connection is owned by the reactor it was handed to and owns its session
 * (one connection per session at ERL 0, MaxConnections=1), its tasks, its
 * send queue. The server's lock guards only the shared lists (targets,
 * sessions for reinstatement, live connections) and counters.
 */
#ifndef HL_ISCSI_INTERNAL_H
#define HL_ISCSI_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "hotlun/event.h"
#include "hotlun/iscsi.h"
#include "hotlun/scsi.h"
#include "hotlun/util.h"
#include "iscsi/chap_guard.h"
#include "iscsi/iscsi_text.h"
#include "iscsi/pdu.h"
#include "iscsi/source.h"

#define ISCSI_LOG "iscsi"
/* a socket address, the initiator's and the target's names: the log prefix of a connection */
#define HL_ISCSI_PEER_STR_LEN  (64 + 2 * (HL_ISCSI_NAME_MAX + 1) + 16)

/* Tunables (not negotiated). */
#define ISCSI_QUEUE_DEPTH      128 /* commands in flight per session (CmdSN window) */
/*
 * SCSI commands sent immediate (I bit) take no CmdSN and no window slot: a
 * connection may run this many of them besides its window; one more is
 * answered TASK SET FULL. Without a bound an initiator kept any number in
 * the scsi layer, each holding a task and what its command holds meanwhile.
 */
#define ISCSI_IMMEDIATE_MAX    ISCSI_QUEUE_DEPTH
#define ISCSI_MAX_R2T          4   /* our cap on outstanding R2Ts per task */
#define ISCSI_RBUF_SIZE        (128 * 1024)
#define ISCSI_LOGIN_TIMEOUT_MS 30000
#define ISCSI_INHERITED_MAX    64 /* listening sockets handed over at start */
/*
 * A WRITE whose data the initiator owes (unsolicited data, or an R2T it was
 * sent) and that saw none of it for this long: the connection is closed (at
 * ERL 0 nothing else can end the task), so an initiator that takes write
 * budget and never finishes its WRITEs holds it for 30 s at most.
 */
#define ISCSI_DATAOUT_TIMEOUT_S 30
/*
 * ... and one that sends some, but slowly: all its data must be in within
 * ISCSI_WRITE_GRACE_S plus its size at ISCSI_WRITE_FLOOR_BPS (30 s + 4 s for
 * 1 MiB, + 64 s for the largest, 16 MiB), counted from when its R2Ts may
 * go out (its budget granted; the unsolicited part from its arrival), or
 * the connection is closed. Why these numbers: a WRITE late by them is one
 * a real initiator has given up on already (Linux fails a command after
 * 30 s, and aborts it); a 16 MiB WRITE needs 13 s on a 10 Mbit/s WAN link;
 * and an initiator that trickles 512 bytes every 20 s used to hold its
 * budget for as long as it liked.
 */
#define ISCSI_WRITE_GRACE_S   30
/*
 * The most a WRITE is given back in all for our read pauses (reading stops
 * while the send queue is full: iscsi_dout_resume). The queue is the
 * initiator's to drain: one that stops reading our Data-In, reads a little
 * before its NOP-In timeout and sends more READs would otherwise stop the
 * clocks of its WRITEs for ever and hold their write budget.
 */
#define ISCSI_PAUSE_CREDIT_MAX_NS (2ull * ISCSI_WRITE_GRACE_S * 1000000000ull)
#define ISCSI_WRITE_FLOOR_BPS (256u << 10)
/*
 * A normal login's final response waits until every command of an earlier
 * session of its I_T nexus (the one it reinstates, or one whose connection
 * closed with commands still in the LU) has left the scsi layer (tmf.c,
 * the reinstatement fence); past this bound the login fails with 0x0301
 * (service unavailable) instead of succeeding unfenced. 4 s: under the
 * login timeouts of ESXi (5 s by default), of our own iscsi origin (10 s)
 * and of open-iscsi (15 s), so each hears the status rather than timing
 * out; all of them retry, and the retry waits again.
 */
#define ISCSI_FENCE_TIMEOUT_S 4
#define ISCSI_LOGIN_DSL        8192 /* data segment limit before MaxRecvDataSegmentLength is known */
#define ISCSI_IOV_MAX          64
#define ISCSI_ITT_HASH         256
/*
 * Read data a connection may have on its way out: queued to send (tx_bytes)
 * plus READs in the scsi layer (rd_inflight). Above it the connection takes
 * no further PDU (even from what it has already received) until its
 * initiator reads, so one that never reads costs the reactor at most this
 * much work, and a burst of large READs is spread over reactor turns.
 */
#define ISCSI_TX_HIGH (32u << 20)
/*
 * ... and the PDUs queued to send, whatever their bytes: a 48-byte SCSI
 * Response takes a 120-byte queue entry, one with sense keeps its task
 * (over 1 KiB) until sent, so under ISCSI_TX_HIGH alone an initiator that
 * never read kept ~470,000 of them (600 MiB). This many PDUs hold at most
 * ~20 MiB. Data-In bites on it only at a MaxRecvDataSegmentLength under
 * 2 KiB (16384 PDUs of 512 bytes are 8 MiB on their way out).
 */
#define ISCSI_TX_PDUS_HIGH 16384u
/* At most this many bytes are written per flush; the rest on the next EPOLLOUT. */
#define ISCSI_TX_PER_TURN (4u << 20)
/*
 * READ data a connection may start per reactor turn (at least one command):
 * the data of a READ may be copied on the reactor (page-cache hits complete
 * inside the submit), so a burst of large READs is spread over turns.
 */
#define ISCSI_RX_READ_PER_TURN (4u << 20)
#define ISCSI_CONN_BUF_MAX     (256u << 20) /* data buffers one connection may hold */
#define ISCSI_BUF_CLASSES      13           /* 4 KiB .. 16 MiB */
/*
 * How often a connection's deferred R2Ts ask the write budget again: every
 * 10 ms while one of them is the oldest waiter (everyone else keeps room
 * for it), otherwise backing off to 80 ms, so thousands of waiting
 * connections cost little CPU.
 */
#define ISCSI_WB_RETRY_MS     10
#define ISCSI_WB_RETRY_MAX_MS 80
/*
 * Free data buffers a connection keeps for reuse, per size class and in all:
 * enough for 64 reads of 1 MiB in flight (with fewer, 1 MiB reads at queue
 * depth 16 or 32 paid a fresh, page-faulting allocation for most commands
 * and ran at 0.55-0.65x the speed of queue depth 8). An idle connection
 * gives them back (iscsi_conn_buf_trim, from its NOP timer).
 */
#define ISCSI_BUF_CACHE_DEPTH  64
#define ISCSI_BUF_CACHE_MAX    (64u << 20)
/*
 * Data buffers from this size up to 1 MiB are carved from 2 MiB transparent
 * huge pages (buf.c), of which a connection has at most ISCSI_BUF_CHUNKS
 * (past them, and for larger buffers, plain pages).
 */
#define ISCSI_BUF_HUGE_MIN     (1u << 20)
#define ISCSI_BUF_CHUNKS       32

/* A 2 MiB huge-page chunk cut into buffers of 4 KiB << k (buf.c). */
struct iscsi_buf_chunk {
	uint8_t *base;
	uint32_t free; /* bit i: piece i is free (kept) */
	uint8_t k;
};

struct iscsi_conn;
struct iscsi_task;

/*
 * The write buffer budget (wbudget.c): bytes of WRITE data held by commands
 * that have not finished, over all connections and reactors.
 */
/*
 * One source of connections (source.h) as the budget sees it: what its
 * WRITEs promise, so that one host cannot take more than its share. Lives
 * while it has claims, or while it counts as refused (budget lock).
 */
struct iscsi_wb_source {
	struct hl_list link;         /* budget->sources[] */
	struct hl_list refused_link; /* budget->refused while listed */
	struct iscsi_source key;
	unsigned claims;     /* claims charged to it, granted or waiting */
	uint64_t promised;   /* their need */
	unsigned n_waiting;  /* of them waiting */
	uint64_t refused_ns; /* listed: when a WRITE of it last found the budget spent */
	bool listed;         /* on budget->refused */
};

struct iscsi_wb_claim {
	struct hl_list link;         /* budget->waiters while waiting (budget lock) */
	struct iscsi_wb_source *src; /* its source while it has a claim (budget lock) */
	uint64_t need;               /* the whole transfer, 4 KiB rounded (0: no claim) */
	uint64_t charged;            /* bytes counted in budget->used (budget lock) */
	bool waiting;                /* queued for the rest of need (budget lock) */
};

#define ISCSI_WB_SOURCE_BUCKETS 256
/*
 * A source whose WRITE found the budget spent counts as wanting some for
 * this long: initiators retry BUSY and TASK SET FULL within it, and meanwhile
 * the sources that hold budget are held to their share.
 */
#define ISCSI_WB_CONTEND_MS 5000

struct iscsi_wbudget {
	pthread_mutex_t lock;
	uint64_t limit;         /* lock */
	uint64_t conn_limit;    /* lock: what one connection's unfinished writes may claim */
	uint64_t used;          /* lock: bytes charged */
	uint64_t peak;          /* lock */
	uint64_t wait_charged;  /* lock: bytes charged by waiting claims (<= limit / 4) */
	unsigned n_waiting;     /* lock */
	struct hl_list waiters; /* lock: claims waiting for R2T budget, oldest first */
	uint64_t deferred;      /* lock: WRITEs whose R2Ts waited */
	uint64_t task_set_full; /* lock: WRITEs answered TASK SET FULL (or BUSY) */
	uint64_t source_capped; /* lock: ... of them because their source had its share */
	struct hl_list sources[ISCSI_WB_SOURCE_BUCKETS]; /* lock: struct iscsi_wb_source */
	/* lock: sources refused in the last ISCSI_WB_CONTEND_MS, oldest first */
	struct hl_list refused;
	unsigned n_refused;      /* lock: on refused */
	unsigned n_refused_idle; /* lock: ... of them promising nothing */
	unsigned n_active;       /* lock: sources promising something */
	unsigned n_wait_src;     /* lock: sources with a waiting claim */
	uint64_t clock_ns;       /* lock: the latest time passed in; time never goes back */
	atomic_uint_fast64_t window_closed; /* responses that held MaxCmdSN back */
	atomic_uint_fast64_t closed_slow;   /* connections closed: a WRITE past its deadline */
	atomic_uint_fast64_t closed_silent; /* connections closed: a WRITE's data stopped */
	atomic_bool pressure;               /* someone waits, or 7/8 of the limit is spent */
	/* data buffers kept for reuse by all connections (conn.c): at most half the limit */
	atomic_uint_fast64_t buf_cache_total;
	atomic_uint_fast64_t buf_cache_max;
};

enum iscsi_wb_verdict {
	ISCSI_WB_GO = 0, /* the whole transfer is charged */
	ISCSI_WB_WAIT,   /* the unasked part is charged; R2Ts wait for iscsi_wb_grant */
	ISCSI_WB_FULL,   /* nothing charged: answer TASK SET FULL */
	ISCSI_WB_SHARE,  /* nothing charged: its source has its share; TASK SET FULL */
};

/** What iscsi_wb_admit saw, for the caller's log line. */
struct iscsi_wb_admit_info {
	uint64_t conn_limit;      /* the per-connection cap */
	uint64_t source_promised; /* what the WRITE's source promised before it */
	uint64_t source_cap;      /* what it may promise now */
	unsigned sources;         /* sources that hold, wait or were refused */
};

/** limit 0: the default from physical memory. */
void iscsi_wb_init(struct iscsi_wbudget *b, uint64_t limit);
void iscsi_wb_fini(struct iscsi_wbudget *b);
/** Change the limit (0: default); claims already charged stay. */
void iscsi_wb_set_limit(struct iscsi_wbudget *b, uint64_t limit);
/** 1/8 of phys, clamped to [HL_ISCSI_WRITE_LIMIT_DEFAULT_MIN, ..._DEFAULT_MAX]. */
uint64_t iscsi_wb_default_limit(uint64_t phys);
/** The per-connection cap for a budget: limit / 4 within [HL_SCSI_MAX_XFER, ISCSI_CONN_BUF_MAX]. */
uint64_t iscsi_wb_conn_limit_for(uint64_t limit);
/** A WRITE's deadline (from its grant) for `bytes`: ISCSI_WRITE_GRACE_S + bytes / floor rate. */
uint64_t iscsi_wb_deadline_ns(uint64_t bytes);
/**
 * What one source may promise when `contending` sources want budget (1: no
 * other does): limit / max(2, contending), at least HL_SCSI_MAX_XFER.
 */
uint64_t iscsi_wb_source_cap(uint64_t limit, unsigned contending);
/**
 * A WRITE of `need` bytes arrives from source src (caller keeps it), of
 * which the initiator sends `unasked` without R2T; its connection's claims
 * already promise `conn_promised` bytes; now_ns: the monotonic clock. Fills
 * cl (caller keeps it; it must stay put while charged) and info (NULL: not wanted).
 */
enum iscsi_wb_verdict iscsi_wb_admit(struct iscsi_wbudget *b, struct iscsi_wb_claim *cl,
                                     const struct iscsi_source *src, uint64_t conn_promised,
                                     uint64_t need, uint64_t unasked, uint64_t now_ns,
                                     struct iscsi_wb_admit_info *info);
/** A waiting claim asks again. @return true when the whole need is charged now (or was). */
bool iscsi_wb_grant(struct iscsi_wbudget *b, struct iscsi_wb_claim *cl);
/** Is cl the oldest waiter? */
bool iscsi_wb_is_head(struct iscsi_wbudget *b, const struct iscsi_wb_claim *cl);
/** Give back what cl charged (and leave the queue). Idempotent. */
void iscsi_wb_release(struct iscsi_wbudget *b, struct iscsi_wb_claim *cl);
uint64_t iscsi_wb_conn_limit(struct iscsi_wbudget *b);
void iscsi_wb_stats(struct iscsi_wbudget *b, struct hl_iscsi_write_stats *out);
/** Cheap, unlocked: is the budget under pressure (close windows of connections holding data)? */
static inline bool iscsi_wb_pressure(struct iscsi_wbudget *b)
{
	return atomic_load_explicit(&b->pressure, memory_order_relaxed);
}

struct iscsi_target {
	struct hl_list link; /* srv->targets, under srv->lock */
	char name[HL_ISCSI_NAME_MAX + 1];
	char alias[256];
	const struct hl_scsi_lun_map *luns;
	bool allow_all;
	char **allow;
	size_t n_allow;
	/* wiped when the target is retired (admin.c): logins copy them first */
	struct hl_iscsi_chap chap;
	struct hl_iscsi_chap mutual;
	bool allow_target_reset; /* TARGET WARM/COLD RESET accepted */
};

/*
 * A condition a peer can make come and go (a cap refusing, a portal short of
 * descriptors): logged once when it starts, and once when it has not
 * happened for ISCSI_EPISODE_QUIET_S (server_tick notices), with how often
 * and how long. Ending it at the first success instead let a peer that
 * hovers at a cap write two lines per connection.
 */
#define ISCSI_EPISODE_QUIET_S 10
struct iscsi_episode {
	bool on;
	uint64_t start_ns, last_ns;
	unsigned long count;
};

/** It happened (again) at now_ns. @return true when this starts an episode (log it). */
static inline bool iscsi_episode_hit(struct iscsi_episode *e, uint64_t now_ns)
{
	bool starts = !e->on;

	if (starts) {
		e->on = true;
		e->start_ns = now_ns;
		e->count = 0;
	}
	e->last_ns = now_ns;
	e->count++;
	return starts;
}

/*
 * @return true once, when it has not happened for ISCSI_EPISODE_QUIET_S (log
 * the end). now_ns may be earlier than last_ns: server_tick reads the clock
 * before it takes srv->lock, and a login on another reactor may have hit
 * the episode meanwhile; the unsigned age would wrap and end it mid-flood.
 */
static inline bool iscsi_episode_over(struct iscsi_episode *e, uint64_t now_ns)
{
	if (!e->on || now_ns < e->last_ns ||
	    now_ns - e->last_ns < ISCSI_EPISODE_QUIET_S * 1000000000ull)
		return false;
	e->on = false;
	return true;
}

/* How long a portal stops accepting when the process is out of descriptors. */
#define ISCSI_ACCEPT_RETRY_MS 100
#define ISCSI_PEER_BUCKETS    256
/*
 * Counting the open descriptors (/proc/self/fd) costs ~10 ms at tens of
 * thousands: near the reserve at most every second, otherwise every 5 s.
 * (The connections' own are counted exactly; the rest moves slowly, and the
 * reserve absorbs what it does meanwhile.)
 */
#define ISCSI_FD_COUNT_NEAR_MS 1000
#define ISCSI_FD_COUNT_FAR_MS  5000
/* An idle discovery session gets this long to log out after it was asked to. */
#define ISCSI_DISCOVERY_LOGOUT_S 2
#define ISCSI_DISCOVERY_GRACE_S  5

struct iscsi_portal {
	struct hl_list link; /* srv->portals */
	struct hl_iscsi_server *srv;
	int fd;
	struct hl_event ev;           /* on srv->reactors[0] */
	struct sockaddr_storage addr; /* bound address */
	uint16_t tpgt;
	bool wildcard;
	/* out of descriptors: not watched, retried from a timer (reactors[0] only) */
	struct hl_timer retry;
	bool fd_paused;
	bool fd_reserve; /* the pause is the reserve's (not accept's EMFILE & co.) */
	struct iscsi_episode fd_short; /* srv->lock: paused for want of descriptors */
	/* connections accepted here that have not finished login (srv->lock) */
	struct hl_list pending; /* srv->lock: iscsi_conn.pend_link */
	unsigned n_pending;
	bool removed;           /* srv->lock: forgotten (iscsi_portal_forget_locked), to be freed */
	struct iscsi_episode refusing; /* srv->lock: the per-source cap closes connections */
	struct iscsi_episode evicting; /* srv->lock: full: the least active one makes room */
};

/*
 * One source (an IPv4 address, an IPv6 /64): its connections that have
 * not finished login and its logged-in sessions (srv->lock). Freed when
 * both are 0.
 */
struct iscsi_peer {
	struct hl_list link; /* srv->peers[] */
	struct iscsi_source src;
	unsigned n_pending;
	unsigned n_sessions;
};

#define ISCSI_IT_BUCKETS 4096 /* sessions by I_T nexus (srv->it_index) */

struct hl_iscsi_server {
	struct hl_reactor **reactors;
	unsigned n_reactors;
	uint32_t nop_interval_s;
	uint32_t nop_timeout_s;
	uint16_t gateway; /* hl_iscsi_server_config.gateway: port ids (hl_scsi_port_ids) */
	struct hl_iscsi_chap discovery_chap; /* guarded by lock once the server runs */
	struct chap_guard chap_guard;        /* its own lock: throttles CHAP guessing */
	struct iscsi_params_limits lim;

	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct hl_list targets;         /* lock */
	struct hl_list targets_retired; /* lock: replaced or removed at run time (admin.c);
	                                 * sessions may still point at them, freed at destroy */
	struct hl_list portals;         /* lock */
	struct hl_list sessions;        /* lock: normal sessions in FFP */
	/* lock: the same sessions by I_T nexus (a login finds the ones it replaces without a
	 * walk of all), and the TSIHs they hold */
	struct hl_list it_index[ISCSI_IT_BUCKETS];
	uint64_t tsih_used[65536 / 64];
	struct hl_list lingering;       /* lock: normal sessions out of it, connection alive */
	struct hl_list conns;           /* lock: every live connection */
	unsigned n_conns;               /* lock */
	unsigned rr;                    /* lock: next reactor */
	uint16_t next_tsih;             /* lock */
	bool stopping;                  /* lock */
	bool draining;                  /* lock: hl_iscsi_server_drain ran: no new sessions */
	/* listening sockets the previous process handed over (main thread, before portals) */
	struct {
		int fd;
		struct sockaddr_storage addr;
	} inherited[ISCSI_INHERITED_MAX];
	unsigned n_inherited;
	_Atomic unsigned time2wait_s;   /* Time2Wait in Logout Responses: set while draining */
	_Atomic bool send_uring;        /* new connections send through io_uring (tx_uring.c) */
	unsigned pending_calls;         /* lock: destroy waits for these */
	struct iscsi_wbudget wb;        /* its own lock */
	struct hl_iscsi_login_limits caps;              /* lock: as configured (0: derived) */
	struct hl_list peers[ISCSI_PEER_BUCKETS];       /* lock: struct iscsi_peer */
	unsigned n_sessions, n_disc_sessions;           /* lock: registered */
	/* lock: since start, for stats (hl_iscsi_conn_stats) */
	uint64_t st_evicted;            /* silent pending logins closed to make room */
	uint64_t st_refused_pending;    /* connections closed at accept: a pending-login cap */
	uint64_t st_refused_sessions;   /* logins refused (0x0302): a session cap */
	uint64_t st_fd_pauses;          /* times a portal stopped accepting: descriptors short */
	_Atomic uint64_t st_logins;     /* sessions established (normal and discovery) */
	_Atomic uint64_t st_login_failures; /* logins answered with a failure status */
	struct iscsi_episode sess_refusing;             /* lock: a session cap refuses logins */
	struct hl_list evict;                           /* lock: conns for their reactor to close */
	/* descriptors: the limit, the reserve, what connections hold and what the rest does */
	_Atomic unsigned fd_limit;      /* the soft RLIMIT_NOFILE, refreshed when counting */
	_Atomic unsigned n_conn_fds;    /* sockets of accepted connections still open */
	unsigned fd_room_at_start;      /* lock: room for connections once started (0: not yet) */
	unsigned fd_other;              /* reactors[0]: other open descriptors, last counted */
	uint64_t fd_other_ns;           /* reactors[0]: when */
	struct hl_timer tick;           /* reactors[0]: CHAP log summaries, every second */
	bool tick_on;                   /* reactors[0] */
};

/* One entry of a connection's send queue: header, data, pad+digest. */
struct iscsi_tx {
	struct hl_list link;
	uint8_t hdr[ISCSI_BHS_LEN + ISCSI_DIGEST_LEN];
	uint32_t hdr_len;
	const uint8_t *data;
	uint32_t data_len;
	uint8_t trailer[3 + ISCSI_DIGEST_LEN];
	uint32_t trailer_len;
	struct iscsi_task *task; /* holds a reference while queued, or NULL */
	void *owned;             /* freed once sent */
	bool close_after;        /* close the connection once sent */
};

enum iscsi_task_state {
	TASK_DATA_OUT = 0, /* collecting immediate / unsolicited / solicited data */
	TASK_EXEC,         /* in the scsi layer */
	TASK_DONE,         /* response queued (or discarded) */
};

struct iscsi_r2t {
	bool active;
	uint32_t ttt;
	uint32_t r2tsn;
	uint32_t offset;
	uint32_t len;
	uint32_t received;
	uint32_t next_datasn;
};

struct iscsi_tmf;
struct iscsi_xreset;
struct iscsi_xwait;

struct iscsi_task {
	struct hl_scsi_cmd cmd;
	struct iscsi_conn *conn;
	struct hl_list link;      /* conn->tasks (or conn->task_free) */
	struct hl_list hash_link; /* conn->itt_hash[] while active */
	int refs;
	enum iscsi_task_state state;
	struct iscsi_bhs req; /* the SCSI Command BHS */
	uint32_t itt;
	uint32_t cmd_sn;
	uint32_t edtl;
	uint64_t lun_raw;
	bool aborted;                /* by a TMF or connection close: discard the response */
	bool in_window;              /* counted in conn->nactive (the CmdSN window) */
	bool immediate;              /* counted in conn->nimmediate instead */
	uint64_t seq;                /* order of arrival on its connection (TMF scopes) */
	/*
	 * The cross-session aborts (resets, PREEMPT AND ABORTs, fences) waiting
	 * for this task: the first here, any more in xreset_more (tmf.c).
	 */
	struct iscsi_xreset *xreset;
	struct iscsi_xwait *xreset_more;
	/* write side */
	uint32_t imm_len;   /* immediate data bytes */
	uint32_t received;  /* data bytes placed in the buffer */
	uint32_t unsol_len; /* bytes of unsolicited data expected (after immediate) */
	uint32_t unsol_received;
	uint32_t unsol_next_datasn;
	bool unsol_done;
	uint64_t dout_ns;         /* last sign of its data: the command, an R2T sent, a Data-Out */
	uint64_t paused_credit_ns; /* time given back for our read pauses (iscsi_dout_resume) */
	uint64_t wb_since_ns;     /* when the data it owes was asked for (its arrival, its grant) */
	uint64_t wb_deadline_ns;  /* all that data in by then (iscsi_wb_deadline_ns; 0: none) */
	uint32_t r2t_next_offset; /* first byte not yet solicited */
	uint32_t r2tsn;
	unsigned r2t_active;
	struct iscsi_r2t r2t[ISCSI_MAX_R2T];
	/* read side */
	uint32_t rd_charge;       /* bytes counted in conn->rd_inflight while in the scsi layer */
	uint32_t datasn;          /* next Data-In DataSN */
	uint32_t din_off;         /* Data-In bytes queued (some may go before the status) */
	uint32_t din_burst;       /* ... of them in the current sequence (MaxBurstLength) */
	uint32_t buf_len;         /* bytes allocated for cmd.data */
	struct iscsi_wb_claim wb; /* write budget (need 0: none) */
	uint8_t sense_buf[2 + HL_SENSE_MAX];
};

struct iscsi_tmf {
	struct hl_list link; /* conn->tmfs */
	struct iscsi_bhs req;
	/*
	 * Tasks in its scope still in the scsi layer: every one it found there
	 * (those an earlier TMF aborted too: SAM answers a TMF only once all
	 * are gone), plus the other sessions' resets it waits for.
	 */
	unsigned waiting;
	uint64_t task_seq; /* it waits for tasks older than this (iscsi_task.seq) */
	uint8_t function;
	uint8_t response;
	uint64_t lun;           /* the request's LUN, for the log */
	struct hl_lu *reset_lu; /* hl_lu_reset after the tasks are gone */
	bool reset_target;
	bool cold;
};

struct iscsi_session {
	struct hl_list link; /* srv->sessions, under srv->lock (normal sessions) */
	struct hl_list
	    it_link;      /* srv->it_index[it_hash % ...], under srv->lock, while registered */
	uint64_t it_hash; /* iscsi_it_hash of its I_T nexus, set at registration */
	bool registered;
	/*
	 * srv->lingering, under srv->lock (empty otherwise): out of
	 * srv->sessions (killed, replaced or its connection closed) while its
	 * connection lives, so commands of it may still be in the LU
	 */
	struct hl_list linger_link;
	/* a login's final response waits for a fence (tmf.c): another session of its I_T
	 * nexus was registered or lingering when it registered */
	bool fence_needed;
	enum iscsi_session_type type;
	struct iscsi_target *target; /* NULL for discovery */
	char initiator_name[HL_ISCSI_NAME_MAX + 1];
	uint8_t isid[6];
	uint16_t tsih;
	uint16_t tpgt;
	uint16_t cid; /* of its one connection */
	uint32_t exp_cmd_sn;
	struct hl_scsi_nexus nexus;
	char port_name[HL_ISCSI_NAME_MAX + 16];
	struct hl_scsi_port port;
	struct iscsi_conn *conn;
	struct hl_reactor *reactor;
	bool nexus_used; /* a command reached the scsi layer */
	/* for the control socket, set once at registration */
	int64_t since;   /* login time (epoch seconds) */
	char portal[64]; /* local address:port */
	char peer[64];   /* initiator address:port */
	struct hl_iscsi_negotiated neg; /* what login negotiated */
	struct iscsi_peer *source;      /* srv->lock: counted in while registered */
	/*
	 * The kill (iscsi_session_kill_locked), posted to the session's reactor
	 * under srv->lock without allocating, so that no shortage can leave a
	 * replaced session's connection in full feature phase; taken back under
	 * srv->lock when the session is freed first (iscsi_session_free).
	 */
	struct hl_reactor_post kill;
	const char *kill_why; /* srv->lock; a static string */
};

enum iscsi_auth_state {
	AUTH_START = 0,
	AUTH_CHAP_WAIT_A, /* AuthMethod=CHAP agreed; waiting for CHAP_A */
	AUTH_CHAP_WAIT_R, /* challenge sent; waiting for CHAP_N/CHAP_R */
	AUTH_DONE,
};

struct iscsi_login {
	bool first_seen;
	bool tpgt_sent;
	uint8_t isid[6];
	uint16_t tsih;
	uint32_t itt;
	uint16_t cid;
	uint32_t cmd_sn;
	int cur_stage; /* stage we are in */
	char initiator_name[HL_ISCSI_NAME_MAX + 1];
	char target_name[HL_ISCSI_NAME_MAX + 1];
	enum iscsi_session_type type;
	bool type_seen;
	struct iscsi_target *target;
	/*
	 * The login's CHAP credentials: a normal login's copied with its target
	 * (iscsi_target_find_login), a discovery login's from the server at
	 * first use. Copies, because they may change meanwhile, and a retired
	 * target's are wiped. Wiped with the login.
	 */
	struct hl_iscsi_chap chap, mutual;
	bool disc_chap_taken;
	/* request continuation (C bit) */
	uint8_t *req;
	size_t req_len;
	/* response continuation */
	struct iscsi_textbuf rsp;
	size_t rsp_off;
	uint8_t rsp_flags; /* T/CSG/NSG of the final piece */
	bool rsp_ffp;      /* the final piece moves to FFP */
	/* authentication */
	bool auth_required;
	bool auth_chap; /* CHAP was chosen */
	enum iscsi_auth_state auth;
	int chap_alg;
	uint8_t chap_id;
	uint8_t chap_c[32];
	size_t chap_c_len;
	unsigned decl_mask;
	bool decl_sent;
};

struct iscsi_text_state {
	uint32_t itt;
	uint32_t ttt; /* while a response continues */
	uint8_t *rsp;
	size_t rsp_len, rsp_off;
	uint8_t *req; /* request continuation (C bit) */
	size_t req_len;
};

enum iscsi_conn_state {
	CONN_LOGIN = 0,
	CONN_FFP,
	CONN_LOGOUT, /* logout response queued: nothing more is read */
	CONN_CLOSED, /* socket gone; waiting for tasks in the scsi layer */
};

/* What a send in flight through io_uring reads (tx_uring.c): alive until its CQE. */
struct iscsi_txu {
	struct msghdr msg;
	struct iovec iov[ISCSI_IOV_MAX];
};

struct iscsi_conn {
	struct hl_list srv_link; /* srv->conns, under srv->lock */
	struct hl_iscsi_server *srv;
	struct hl_reactor *reactor;
	struct hl_event ev;
	int fd;
	uint32_t ev_mask;
	struct sockaddr_storage local, peer;
	/* "ADDR:PORT" while logging in, then "ADDR:PORT INITIATOR -> TARGET": log prefix */
	char peer_str[HL_ISCSI_PEER_STR_LEN];
	uint16_t tpgt;
	bool local_wildcard; /* accepted on a wildcard portal */
	enum iscsi_conn_state state;
	/* counted against the pending-login caps until login ends (srv->lock) */
	struct iscsi_portal *pend_portal;
	struct iscsi_peer *pend_peer;
	struct hl_list pend_link;       /* srv->lock: pend_portal->pending */
	uint64_t accept_ns;             /* srv->lock: when it was accepted */
	_Atomic uint64_t login_pdu_ns;  /* its last login PDU (0: it has sent none) */
	struct hl_list evict_link;      /* srv->lock: srv->evict while queued there */
	bool started;                   /* iscsi_conn_start ran (its reactor's thread only) */
	bool fd_counted;                /* its socket counts in srv->n_conn_fds */
	/* discovery sessions: the last PDU but a NOP-Out, and the logout asked of it when idle */
	uint64_t active_ns;
	uint64_t idle_asked_ns;
	struct hl_timer idle_timer;

	struct iscsi_rx rx;
	uint8_t *rbuf;
	uint32_t rbuf_off, rbuf_len; /* received bytes not yet fed to rx (it yielded) */
	struct hl_timer rx_timer;    /* feeds them once the connection may take PDUs again */
	struct hl_turn_hook tx_hook; /* flushes txq at the end of the reactor turn */
	uint64_t rd_inflight;        /* EDTL of READs in the scsi layer (see ISCSI_TX_HIGH) */
	uint64_t rd_started;         /* EDTL of every READ started (ISCSI_RX_READ_PER_TURN) */
	uint64_t rd_turn_mark;       /* rd_started when this turn's receive began */

	struct hl_list txq;
	struct hl_list tx_free;
	unsigned tx_nfree;
	uint32_t tx_off; /* bytes of the head entry already sent */
	struct iscsi_txu *txu; /* sends through io_uring ([global] send_uring), NULL: sendmsg */
	bool tx_inflight;      /* a send SQE awaits its CQE: txq, txu and c stay alive */
	uint64_t tx_turn;      /* send_uring: the reactor turn (heartbeat) tx_turn_sent counts */
	size_t tx_turn_sent;   /* ... bytes sent in it, capped at ISCSI_TX_PER_TURN */
	bool close_after_send;

	struct iscsi_params params;
	struct iscsi_params_limits lim;
	uint32_t stat_sn;
	uint32_t exp_stat_sn;
	uint32_t max_cmd_sn_sent; /* highest MaxCmdSN advertised in FFP (when max_cmd_sn_told) */
	bool max_cmd_sn_told;
	uint16_t cid;

	struct iscsi_login *login;
	struct iscsi_session *sess;
	struct iscsi_text_state text;
	/* the login's final response waits for the replaced sessions' commands (tmf.c) */
	struct iscsi_xreset *fence;
	struct hl_timer fence_timer; /* ISCSI_FENCE_TIMEOUT_S: fail the login (login.c) */

	struct hl_list tasks;
	struct hl_list itt_hash[ISCSI_ITT_HASH]; /* active tasks (DATA_OUT, EXEC) by ITT */
	unsigned ntasks;                         /* tasks alive (any state) */
	uint64_t task_seq;                       /* the last task's iscsi_task.seq */
	unsigned nactive;           /* tasks in DATA_OUT or EXEC: they fill the CmdSN window */
	unsigned nimmediate;        /* ... sent immediate: no window slot (ISCSI_IMMEDIATE_MAX) */
	struct iscsi_task *rx_task; /* SCSI Command whose immediate data is arriving */
	struct iscsi_task *rx_dout; /* Data-Out destination task, NULL = drop silently */
	int rx_dout_r2t;            /* R2T slot, -1 = unsolicited */
	uint8_t rx_dout_reject;     /* reject reason for a bad Data-Out, 0 = ok */
	unsigned nexec;             /* tasks inside the scsi layer */
	struct hl_list task_free;
	unsigned task_nfree;
	struct hl_list tmfs;
	uint32_t next_ttt;

	struct hl_timer login_timer;
	struct hl_timer nop_timer;
	uint64_t last_rx_ns;
	bool nop_outstanding;
	uint32_t nop_ttt;
	uint64_t nop_sent_ns;

	bool tx_hdigest, tx_ddigest; /* digests on what we send (on after login) */
	unsigned busy;               /* entry points running: defer free and flush */
	uint64_t tx_bytes;           /* bytes queued, not yet sent */
	unsigned tx_pdus;            /* PDUs queued, not yet sent whole (ISCSI_TX_PDUS_HIGH) */
	uint64_t buf_bytes;          /* data buffers held by this connection's tasks */
	uint64_t wb_promised;        /* write budget claimed by this connection's tasks */
	uint64_t wb_conn_limit;      /* the budget's per-connection cap, as of the last WRITE */
	bool rx_wb_full;             /* the arriving SCSI Command was refused write budget */
	unsigned wb_waiting;         /* its tasks waiting for write budget (R2T deferred) */
	bool wb_window_closed;       /* last MaxCmdSN sent was held back */
	struct hl_timer wb_timer;    /* retries the waiting tasks while wb_waiting */
	struct hl_timer dout_timer;  /* closes it when a WRITE's data is late (iscsi_dout_tick) */
	uint64_t rx_paused_ns;       /* reading stopped for a full send queue since (0: not) */
	unsigned wb_retry_ms;        /* its current period */
	/* recently freed data buffers by size class (4 KiB << k): reused without page faults */
	void *buf_cache[ISCSI_BUF_CLASSES][ISCSI_BUF_CACHE_DEPTH];
	uint8_t buf_cached[ISCSI_BUF_CLASSES];
	uint64_t buf_cache_bytes;    /* kept: the cached buffers and the chunks' free pieces */
	unsigned buf_regions;        /* of them announced as regions I/O targets (buf.c) */
	struct iscsi_buf_chunk chunks[ISCSI_BUF_CHUNKS];
	unsigned nchunks;

	/* a closing Logout waits for the commands still executing (nexec) */
	unsigned n_deferred; /* PREEMPT AND ABORTs out of the scsi layer, answered by xreset_done */
	bool logout_pending;
	uint8_t logout_response;
	uint32_t logout_itt;
};

/* ---- conn.c ---- */
int iscsi_conn_create(struct hl_iscsi_server *srv, int fd, uint16_t tpgt, bool wildcard,
                      struct iscsi_conn **out);
/** Start on the calling reactor (the one it was handed to). */
void iscsi_conn_start(void *arg);
/** Close now: socket gone, tasks aborted; freed when no task is in the scsi layer. */
void iscsi_conn_close(struct iscsi_conn *c, const char *why);
/**
 * Login succeeded: from now on c's log lines name its session's initiator
 * and target ("ADDR:PORT INITIATOR -> TARGET", or "-> discovery").
 */
void iscsi_conn_name_session(struct iscsi_conn *c);
/** Queue a PDU; bhs is copied, data stays the caller's (task ref) or is owned. @return 0/-ENOMEM.
 */
int iscsi_conn_queue(struct iscsi_conn *c, const struct iscsi_bhs *bhs, const void *data,
                     uint32_t len, struct iscsi_task *task, void *owned, bool close_after);
/** Write what can be written. */
void iscsi_conn_flush(struct iscsi_conn *c);
/** The CQE of c's send SQE (tx_uring.c): res bytes sent, or -errno. */
void iscsi_conn_send_done(struct iscsi_conn *c, int res);

/* ---- tx_uring.c ---- */
/**
 * Send msg (its iovecs in c->txu->iov) as an SQE on the ring of c's reactor,
 * submitted at the end of the turn; iscsi_conn_send_done gets the result.
 * @return 0, or -errno (nothing queued: send with sendmsg): -EAGAIN off c's
 * reactor thread, -ENOSYS without io_uring, -EBUSY ring full.
 */
int iscsi_tx_uring_send(struct iscsi_conn *c, const struct msghdr *msg);
/** Fill StatSN (advance when `advance`), ExpCmdSN, MaxCmdSN at offsets 24/28/32. */
void iscsi_conn_fill_sn(struct iscsi_conn *c, struct iscsi_bhs *h, bool advance);
/** MaxCmdSN from the free window slots: ExpCmdSN + (ISCSI_QUEUE_DEPTH - active) - 1. */
uint32_t iscsi_conn_max_cmd_sn(struct iscsi_conn *c);
/**
 * The last CmdSN the initiator may send: the highest MaxCmdSN ever advertised on this
 * connection, or the current one if higher. An initiator ignores a MaxCmdSN lower than one it
 * has seen (RFC 7143 4.2.2.1), so a command up to this one is never dropped for the window.
 */
uint32_t iscsi_conn_window_end(struct iscsi_conn *c);
void iscsi_conn_send_reject(struct iscsi_conn *c, const struct iscsi_bhs *bad, uint8_t reason);
/**
 * Ask the initiator to log out within `within_s` seconds (Async Message, event 1).
 * Reactor of c. @return 0, -ENOTCONN (not a normal session in FFP), -ENOMEM.
 */
int iscsi_conn_request_logout(struct iscsi_conn *c, uint16_t within_s);
/**
 * Send an Async Message asking the initiator to log out within `within_s`
 * seconds (event 1), whatever the session type. Reactor of c. @return 0, -ENOMEM.
 */
int iscsi_conn_send_async_logout(struct iscsi_conn *c, uint16_t within_s);
/** Time2Wait for Logout Responses (seconds; 0 unless the server is draining). */
uint16_t iscsi_server_time2wait(struct hl_iscsi_server *srv);
/** Reject, then close the connection once it is sent when `close_after`. */
void iscsi_conn_send_reject_close(struct iscsi_conn *c, const struct iscsi_bhs *bad, uint8_t reason,
                                  bool close_after);
/** Handle one received PDU (dispatch by phase and opcode). */
int iscsi_conn_handle_pdu(struct iscsi_conn *c, struct iscsi_rx *rx);
void iscsi_conn_params_applied(struct iscsi_conn *c);
/** Bracket an entry point that may close the connection (defers free, flushes once at the end). */
void iscsi_conn_enter(struct iscsi_conn *c);
void iscsi_conn_leave(struct iscsi_conn *c);
void iscsi_task_put(struct iscsi_task *t);
/**
 * A 4 KiB-aligned data buffer of at least len bytes (len <= HL_SCSI_MAX_XFER)
 * from the connection's cache or the allocator; *cap receives its real size,
 * to give back to iscsi_buf_put. @return NULL on ENOMEM.
 */
void *iscsi_buf_get(struct iscsi_conn *c, uint32_t len, uint32_t *cap);
void iscsi_buf_put(struct iscsi_conn *c, void *p, uint32_t cap);
/** Free the buffers kept for reuse (those in use stay, and the huge-page chunks they are in). */
void iscsi_conn_buf_trim(struct iscsi_conn *c);

/* ---- write_data.c: a WRITE's data (write budget, R2T, Data-Out, deadlines) ---- */
/**
 * A WRITE asks the budget for its transfer. `final`: the F bit (no
 * unsolicited Data-Out follows), `imm`: immediate data bytes. What the
 * initiator sends unasked must be taken or the command refused; the rest
 * arrives only when we send R2Ts, so the command may wait for it
 * (ISCSI_WB_WAIT: c->wb_timer asks again). ISCSI_WB_FULL: answer TASK SET FULL.
 */
enum iscsi_wb_verdict iscsi_write_admit(struct iscsi_conn *c, struct iscsi_task *t, bool final,
                                        uint32_t imm);
/**
 * Grant the connection's deferred tasks in their order, as far as the budget
 * goes. @return true when a task that is still waiting is the oldest waiter.
 */
bool iscsi_write_retry(struct iscsi_conn *c);
/** A task has just started to owe data: make sure c->dout_timer runs. */
void iscsi_dout_arm(struct iscsi_conn *c);
/**
 * c reads again after `paused_ns` of not reading for a full send queue:
 * the data its WRITEs owe may have waited unread in the socket, so the
 * pause counts neither as their silence nor against their deadlines.
 */
void iscsi_dout_resume(struct iscsi_conn *c, uint64_t paused_ns);
/** t's data collection moved on: run the command (iscsi_task_exec) or send R2Ts. */
void iscsi_task_data_progress(struct iscsi_conn *c, struct iscsi_task *t);
/** iscsi_ffp_header for a Data-Out PDU: where its data goes, if anywhere. @return 0 */
int iscsi_data_out_header(struct iscsi_conn *c, struct iscsi_rx *rx);
/** A received Data-Out PDU: counted into its task, or rejected / dropped. @return 0 */
int iscsi_data_out_handle(struct iscsi_conn *c, struct iscsi_rx *rx);
/** Give back the task's write budget claim (idempotent). */
void iscsi_task_wb_release(struct iscsi_task *t);
/** Should MaxCmdSN stop opening (the connection holds much write data, or the budget is short)? */
bool iscsi_wb_window_closed(struct iscsi_conn *c);
/** c->wb_timer: ask the budget again for the connection's deferred R2Ts. */
void iscsi_wb_tick(struct hl_timer *tm);
/**
 * c->dout_timer: close c when one of its WRITEs saw no data for
 * ISCSI_DATAOUT_TIMEOUT_S or missed its deadline (iscsi_wb_deadline_ns);
 * else run again when the next is due. Armed (iscsi_dout_arm) when a WRITE
 * starts to owe data. Judges nothing while c->rx_paused_ns.
 */
void iscsi_dout_tick(struct hl_timer *tm);

/* ---- login.c ---- */
int iscsi_login_handle(struct iscsi_conn *c, struct iscsi_rx *rx);
/**
 * The commands c's login waited for are gone (or, `missed`, some could not
 * be waited for: no memory): send its final response (or fail it 0x0301).
 */
void iscsi_login_fenced(struct iscsi_conn *c, bool missed);
/** c->fence_timer: the replaced session's commands did not end in time: fail the login. */
void iscsi_login_fence_timeout(struct hl_timer *tm);
/** Log the CHAP summary that is due, if any (chap_guard_log_due). Any thread. */
void iscsi_chap_log(struct hl_iscsi_server *srv);
void iscsi_login_free(struct iscsi_login *l);

/* ---- session.c (full feature phase) ---- */
int iscsi_ffp_header(struct iscsi_conn *c, struct iscsi_rx *rx);
int iscsi_ffp_handle(struct iscsi_conn *c, struct iscsi_rx *rx);
/** Abort every task of the connection (it is closing); frees the ones not in scsi. */
void iscsi_ffp_abort_all(struct iscsi_conn *c);
/**
 * Drop the tasks still collecting data and the TMFs; the commands inside the
 * scsi layer run on and answer (a closing logout waits for them).
 */
void iscsi_ffp_drop_unfinished(struct iscsi_conn *c);
void iscsi_session_free(struct iscsi_session *s);
/** Is c's session a discovery session? */
bool iscsi_session_is_discovery(const struct iscsi_conn *c);
/**
 * Check a PDU's CmdSN against the window, advancing ExpCmdSN for a non-immediate one.
 * @return true to process the PDU, false when it was dropped (outside the window: no answer).
 */
bool iscsi_cmdsn_accept(struct iscsi_conn *c, const struct iscsi_bhs *h);
/** c's active task (collecting data or in the scsi layer) with this ITT, or NULL. */
struct iscsi_task *iscsi_task_find(struct iscsi_conn *c, uint32_t itt);
/** The task leaves the active set (CmdSN slot, write budget) before its response is built. */
void iscsi_task_deactivate(struct iscsi_task *t);
/** Response queued, or dropped: leave the active set and drop the active reference. */
void iscsi_task_finish(struct iscsi_task *t);
/** Queue the task's Data-In and/or SCSI Response from its finished command. */
void iscsi_task_respond(struct iscsi_conn *c, struct iscsi_task *t);
/** Hand the task, its data all in, to the scsi layer. */
void iscsi_task_exec(struct iscsi_task *t);
/** Answer a command ourselves (no scsi layer involved) with CHECK CONDITION; t is finished. */
void iscsi_task_check_condition(struct iscsi_conn *c, struct iscsi_task *t, uint8_t key,
                                uint8_t asc, uint8_t ascq);

/* ---- nop_text_logout.c: NOP-Out, Text, Logout in the full feature phase ---- */
/** A NOP-Out: answered with a NOP-In unless its ITT is reserved. @return 0 or -ENOMEM */
int iscsi_nop_out_handle(struct iscsi_conn *c, struct iscsi_rx *rx);
/** A Text Request, or the initiator's ask for the next piece of an answer. @return 0 or -ENOMEM */
int iscsi_text_handle(struct iscsi_conn *c, struct iscsi_rx *rx);
/**
 * A Logout Request: answered now, or once c's commands in the scsi layer are
 * (iscsi_logout_maybe_respond). @return 0 or -errno
 */
int iscsi_logout_handle(struct iscsi_conn *c, struct iscsi_rx *rx);
/** A closing logout's deferred Logout Response goes once no command of c is left to answer. */
void iscsi_logout_maybe_respond(struct iscsi_conn *c);

/* ---- tmf.c (task management, cross-session aborts) ---- */
/** A Task Management Function Request in the full feature phase. @return 0 or -ENOMEM. */
int iscsi_tmf_handle(struct iscsi_conn *c, struct iscsi_rx *rx);
/**
 * An aborted task (by a TMF, a reset, its connection's close) left the scsi layer: finish it
 * without a response and tell the TMF or cross-session reset that waits for it. Reactor of c.
 */
void iscsi_task_finish_aborted(struct iscsi_conn *c, struct iscsi_task *t);
/**
 * t's PERSISTENT RESERVE OUT preempted with abort (t->cmd.n_abort_nexus, abort_others): abort
 * the preempted nexuses' tasks on its LU in every session and answer t once they are gone (the
 * caller counts it in c->n_deferred). @return false without memory: answer t at once.
 */
bool iscsi_preempt_abort_start(struct iscsi_conn *c, struct iscsi_task *t);

/**
 * c's normal login is about to succeed as c->sess (registered): wait until
 * every task of the other sessions of its I_T nexus (initiator, ISID,
 * target), closed ones included, has left the scsi layer, then call
 * iscsi_login_fenced (on c's reactor, unless iscsi_login_fence_cancel ran
 * first). @return 0, or -ENOMEM (nothing started).
 */
int iscsi_login_fence_start(struct iscsi_conn *c);
/** c's login stops waiting (it failed or closed). Idempotent. */
void iscsi_login_fence_cancel(struct iscsi_conn *c);

/* ---- discovery.c ---- */
/**
 * Build the SendTargets answer for `value` ("All", "" or a target name) as
 * key=value pairs into tb. In a normal session (sess->target != NULL) only
 * that target is reported. @return 0, -ENOMEM, or -EINVAL for a value that
 * is not All, empty or an iSCSI name (answered with SendTargets=Reject).
 */
int iscsi_sendtargets(struct iscsi_conn *c, const char *value, struct iscsi_textbuf *tb);

/* ---- server.c ---- */
struct iscsi_target *iscsi_target_find(struct hl_iscsi_server *srv, const char *name);
/*
 * iscsi_target_find for a login: also copies the target's CHAP credentials
 * (either may be NULL) under the same hold of srv->lock, so they are the
 * found target's, never those of one retired (and wiped) meanwhile.
 */
struct iscsi_target *iscsi_target_find_login(struct hl_iscsi_server *srv, const char *name,
                                             struct hl_iscsi_chap *chap,
                                             struct hl_iscsi_chap *mutual);

/** A cross-reactor call of the server finished (pending_calls--, wake destroy). */
void iscsi_call_done(struct hl_iscsi_server *srv);

/**
 * Unregister session o and have its reactor close its connection (srv->lock
 * held; o may live on another reactor).
 */
void iscsi_session_kill_locked(struct hl_iscsi_server *srv, struct iscsi_session *o,
                               const char *why);

/**
 * s is about to be freed (s's reactor; its connection has no command left):
 * take back its kill if still queued, and take it off srv->lingering, in
 * one hold of srv->lock (so a kill being posted meanwhile is seen).
 */
void iscsi_session_forget(struct hl_iscsi_server *srv, struct iscsi_session *s);

/** Build a target object from cfg (not yet published). @return NULL on OOM. */
struct iscsi_target *iscsi_target_new(const struct hl_iscsi_target_config *cfg);
void iscsi_target_free(struct iscsi_target *t);
bool iscsi_target_allows(const struct iscsi_target *t, const char *initiator);
/** The name of the CHAP guard's budget for secret: the first of discovery ("") and the
 * targets that checks with it, else own. */
void iscsi_chap_scope(struct hl_iscsi_server *srv, const char *secret, const char *own,
                      char *out, size_t len);
/**
 * Register a session and close an older one with the same I_T (session
 * reinstatement). want_tsih 0: assign a new TSIH. Otherwise the initiator
 * reinstates the connection of the live session want_tsih (same I_T and
 * CID): that session is closed and the new one takes over its TSIH.
 * The session caps (max_sessions, its discovery share, max_sessions_per_addr)
 * count the sessions a reinstatement replaces as gone.
 * @return 0, -ENOENT (no such session: 0x020a), -EBUSY (another CID: too
 * many connections), -ESHUTDOWN, -EUSERS (a session cap: 0x0302).
 */
int iscsi_session_register(struct hl_iscsi_server *srv, struct iscsi_session *s, uint16_t want_tsih,
                           const char **why);
/** Hash of an I_T nexus (initiator and target names caseless, as iscsi_same_it compares). */
uint64_t iscsi_it_hash(const char *initiator, const uint8_t *isid, const char *target_name);
/** The srv->it_index chain of the registered sessions of I_T hash h (srv->lock). */
static inline struct hl_list *iscsi_it_chain(struct hl_iscsi_server *srv, uint64_t h)
{
	return &srv->it_index[h % ISCSI_IT_BUCKETS];
}
/** Is o a normal session of this I_T nexus (initiator, ISID, target by name)? */
bool iscsi_same_it(const struct iscsi_session *o, const char *initiator, const uint8_t *isid,
                   const struct iscsi_target *target);
/** Is o (registered or lingering) of the same I_T nexus as s (both with it_hash set)? */
static inline bool iscsi_same_nexus(const struct iscsi_session *o, const struct iscsi_session *s)
{
	return o->it_hash == s->it_hash && iscsi_same_it(o, s->initiator_name, s->isid, s->target);
}
/** iscsi_same_it with the target's name. */
bool iscsi_same_it_name(const struct iscsi_session *o, const char *initiator, const uint8_t *isid,
                        const char *target_name);
/** Does a live session want_tsih of this I_T exist? @return 0, -ENOENT or -EBUSY (other CID). */
int iscsi_session_check_tsih(struct hl_iscsi_server *srv, uint16_t tsih, const char *initiator,
                             const uint8_t *isid, const struct iscsi_target *target, uint16_t cid);
void iscsi_session_unregister(struct hl_iscsi_server *srv, struct iscsi_session *s);
uint64_t iscsi_nexus_id_next(void);
void iscsi_conn_unlink(struct iscsi_conn *c);

/* ---- limits.c ---- */
/** Caps as configured (0: derived), the sources' table, the descriptor limit. Before it runs. */
void iscsi_limits_init(struct hl_iscsi_server *srv, const struct hl_iscsi_login_limits *caps);
/** The caps in force, defaults filled in (srv->lock held). */
void iscsi_limits_locked(struct hl_iscsi_server *srv, struct hl_iscsi_limits *out);
/**
 * reactors[0]: may a portal take one more connection and still leave the
 * reserve free? *in_use and *reserve say how many descriptors, for the log.
 */
bool iscsi_fd_room(struct hl_iscsi_server *srv, unsigned *in_use, unsigned *reserve);
/**
 * Count a new connection from peer on portal p against the pending-login
 * caps; a full portal evicts its least active pending connection (closed
 * on its reactor). @return the source's entry, counted, or NULL: refused
 * (*why names the cap).
 */
struct iscsi_peer *iscsi_pending_admit(struct hl_iscsi_server *srv, struct iscsi_portal *p,
                                       const struct sockaddr_storage *peer, const char **why);
/** The admitted connection c exists: on p's pending list from now_ns (srv->lock held). */
void iscsi_pending_attach_locked(struct iscsi_conn *c, struct iscsi_portal *p,
                                 struct iscsi_peer *e, uint64_t now_ns);
#define ISCSI_EVICTED_WHY "evicted: the portal's pending logins are full"
/**
 * On c's reactor, as it starts: was c chosen for eviction before its start
 * got here? Then it is taken off the eviction queue (the caller closes it).
 */
bool iscsi_conn_evict_queued(struct iscsi_conn *c);
/** An admitted connection could not be made: give its counts back. */
void iscsi_pending_cancel(struct hl_iscsi_server *srv, struct iscsi_portal *p,
                          struct iscsi_peer *e);
/** The connection finished login or closed: it no longer counts against the pending caps. */
void iscsi_conn_pending_release(struct iscsi_conn *c);
/** c is being freed: out of every count and queue here (srv->lock held). */
void iscsi_limits_conn_gone_locked(struct iscsi_conn *c);
/** Portal p is being removed: no connection counts against it any more (srv->lock held). */
void iscsi_portal_forget_locked(struct hl_iscsi_server *srv, struct iscsi_portal *p);
/** Log the end of the episodes that are over (refusing, evicting, short of descriptors). */
void iscsi_limits_tick(struct hl_iscsi_server *srv, uint64_t now_ns);
/**
 * May session s register under the session caps (sessions of the same I_T,
 * which it replaces, do not count)? Counts it in. @return 0, or -EUSERS
 * (*why names the cap). srv->lock held.
 */
int iscsi_sessions_admit_locked(struct hl_iscsi_server *srv, struct iscsi_session *s,
                                const char **why);
/** s leaves the registry: out of the session counts (srv->lock held). */
void iscsi_sessions_uncount_locked(struct hl_iscsi_server *srv, struct iscsi_session *s);

#endif
