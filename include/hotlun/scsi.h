/*
 * scsi.h - SCSI logical units (SPC-4 / SBC-3 disk emulation) and the command
 * interface a transport (src/iscsi) uses. Nothing here knows about iSCSI.
 *
 * A transport fills a struct hl_scsi_cmd, calls hl_scsi_cmd_exec() on a
 * reactor thread, and gets cmd->done() exactly once on that same thread
 * (possibly before hl_scsi_cmd_exec returns, for commands that need no I/O).
 * SCSI failures travel as status + sense data, never as C errors.
 *
 * An LU may be used by sessions on several reactors at once: its shared
 * state (unit attentions, reservations, range locks) is guarded by lu->lock.
 */
#ifndef HOTLUN_SCSI_H
#define HOTLUN_SCSI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hotlun/origin.h"
#include "hotlun/util.h"

struct hl_lu;
struct hl_reactor;

/* SAM status codes */
enum {
	HL_SAM_GOOD = 0x00,
	HL_SAM_CHECK_CONDITION = 0x02,
	HL_SAM_CONDITION_MET = 0x04,
	HL_SAM_BUSY = 0x08,
	HL_SAM_RESERVATION_CONFLICT = 0x18,
	HL_SAM_TASK_SET_FULL = 0x28,
	HL_SAM_TASK_ABORTED = 0x40,
};

/* Sense keys */
enum {
	HL_SK_NO_SENSE = 0x0,
	HL_SK_RECOVERED_ERROR = 0x1,
	HL_SK_NOT_READY = 0x2,
	HL_SK_MEDIUM_ERROR = 0x3,
	HL_SK_HARDWARE_ERROR = 0x4,
	HL_SK_ILLEGAL_REQUEST = 0x5,
	HL_SK_UNIT_ATTENTION = 0x6,
	HL_SK_DATA_PROTECT = 0x7,
	HL_SK_ABORTED_COMMAND = 0xb,
	HL_SK_MISCOMPARE = 0xe,
};

/* Task attributes (SAM), as carried by the transport */
enum {
	HL_TASK_UNTAGGED = 0,
	HL_TASK_SIMPLE = 1,
	HL_TASK_ORDERED = 2,
	HL_TASK_HEAD_OF_QUEUE = 3,
	HL_TASK_ACA = 4,
};

#define HL_CDB_MAX        32
#define HL_SENSE_MAX      96
#define HL_SCSI_MAX_LUNS  256            /* LUN numbers 0..255 (peripheral addressing) */
#define HL_SCSI_MAX_XFER  (16u << 20)    /* largest data buffer a command may use */

/** Identity and options of one logical unit (one exported disk). Copied by hl_lu_create. */
struct hl_lu_config {
	const char *name;      /* disk name from the config, for logs */
	uint32_t block_size;   /* logical block size: 512 or 4096 */
	uint8_t naa[16];       /* NAA-6 registered extended designator (VPD 83), stable across restarts */
	char serial[33];       /* unit serial number (VPD 80), printable ASCII */
	bool read_only;        /* write protect: writes get DATA PROTECT */
	bool write_cache;      /* WCE reported in the caching mode page (true for buffered file origins) */
	/**
	 * Daemon state directory (copied; NULL: none). Persistent reservations
	 * registered with APTPL = 1 are kept there (pr-<NAA>) and reloaded by
	 * hl_lu_create; without it APTPL is refused (PTPL_C = 0).
	 */
	const char *state_dir;
};

/** A SCSI target port, for VPD 83 target port / relative port / TPG designators. */
struct hl_scsi_port {
	const char *name;      /* e.g. "iqn.2026-11.io.hotlun:demo,t,0x0001"; caller keeps */
	uint16_t rel_port_id;  /* relative target port identifier, >= 1 */
	uint16_t tpg_id;       /* target port group, >= 1 */
};

/**
 * The ids of the SCSI target port behind portal group tag `tpgt` on gateway
 * `gateway` ([global] gateway, 1..255; 0: a lone gateway). With a gateway
 * id: target port group = gateway, relative port id = (gateway << 8) |
 * (tpgt & 0xff), so ports are unique across the gateways serving one LU and
 * every gateway can name a peer's twin of a port; without one, both are the
 * TPGT (1 for 0, which neither id may be). The one place this numbering is
 * written: the transport names its sessions' ports with it, and REPORT
 * TARGET PORT GROUPS names the ports of other gateways with it.
 */
static inline void hl_scsi_port_ids(uint16_t gateway, uint16_t tpgt, uint16_t *rel_port_id,
                                    uint16_t *tpg_id)
{
	if (gateway) {
		*tpg_id = gateway;
		*rel_port_id = (uint16_t)(gateway << 8 | (tpgt & 0xff));
		return;
	}
	*rel_port_id = tpgt ? tpgt : 1;
	*tpg_id = tpgt ? tpgt : 1;
}

/**
 * An I_T nexus (for iSCSI: one session). Owned by the transport; valid
 * until hl_scsi_nexus_gone() returns.
 */
struct hl_scsi_nexus {
	uint64_t id;                  /* unique for the daemon's lifetime, never 0 */
	char initiator_port[272];     /* "<initiator name>,i,0x<isid>" */
	const char *initiator_name;   /* points into the transport's session */
	const struct hl_scsi_port *port;
};

/** The LUNs one target exposes; index = LUN number; NULL = no LU there. Transport owns. */
struct hl_scsi_lun_map {
	struct hl_lu *lu[HL_SCSI_MAX_LUNS];
};

/** Preempted nexuses a PREEMPT AND ABORT lists (hl_scsi_cmd.abort_nexus). */
#define HL_SCSI_ABORT_NEXUS_MAX 16

/** One SCSI command. The transport owns it; the scsi layer uses the private part. */
struct hl_scsi_cmd {
	/* ---- in: filled by the transport ---- */
	const struct hl_scsi_lun_map *map; /* for REPORT LUNS and LU lookup */
	uint64_t lun;                      /* decoded LUN number */
	struct hl_lu *lu;                  /* map->lu[lun] or NULL; the transport resolves it */
	const struct hl_scsi_nexus *nexus;
	uint8_t cdb[HL_CDB_MAX];
	uint8_t cdb_len;
	uint8_t task_attr;
	uint64_t tag;
	/**
	 * Data buffer, owned by the transport, valid until done():
	 * data_out: the bytes received from the initiator (data_len of them);
	 * data_in: room for data_len bytes (the initiator's expected length).
	 */
	uint8_t *data;
	uint32_t data_len;
	bool data_out;
	bool data_in;

	/* ---- out: set by the scsi layer before done() ---- */
	uint32_t data_in_len;  /* bytes of data-in placed in data (<= data_len) */
	uint32_t xfer_len;     /* bytes the CDB itself transfers (for residuals); 0 if none */
	uint8_t status;        /* HL_SAM_* */
	uint8_t sense_len;
	uint8_t sense[HL_SENSE_MAX];
	/**
	 * A PERSISTENT RESERVE OUT / PREEMPT AND ABORT that succeeded: the I_T
	 * nexuses (hl_scsi_nexus.id) it preempted, whose tasks on cmd->lu the
	 * transport must abort as ABORT TASK SET would (SPC-4 5.12.11.2.4) and
	 * wait for before it reports this command's status: a preempted
	 * initiator's write still in flight must not land after the new holder
	 * was told it owns the LU. abort_others: more nexuses than fit here, so
	 * abort the tasks of every nexus but the issuer's.
	 */
	uint64_t abort_nexus[HL_SCSI_ABORT_NEXUS_MAX];
	uint8_t n_abort_nexus;
	bool abort_others;

	void (*done)(struct hl_scsi_cmd *cmd);
	void *arg;             /* for the transport */
	/**
	 * Optional (NULL: data only at done()), set by the transport before
	 * exec: a READ whose data arrives in pieces says that data[0, bytes)
	 * is final (it will not change before done()), so the transport may
	 * send it at once. Called zero or more times with growing values, on
	 * the reactor exec ran on, never from inside hl_scsi_cmd_exec and never
	 * after done(). done() still reports the status and data_in_len, which
	 * may be an error after some data was handed over (SCSI allows Data-In
	 * followed by CHECK CONDITION), or data_in_len 0 with sense.
	 */
	void (*data_ready)(struct hl_scsi_cmd *cmd, uint32_t bytes);

	/* ---- private to the scsi layer ---- */
	struct hl_origin_io io;
	bool stream; /* the READ in io passes its partial data to data_ready */
	struct iovec iov[2];
	struct hl_list link;
	uint32_t state;
	uint64_t priv[4];
	/* range lock (src/scsi/range.c): writes share, COMPARE AND WRITE excludes */
	uint64_t rl_lba;
	uint64_t rl_count;
	uint8_t rl_mode;
	struct hl_reactor *reactor;                /* where exec ran: waiters resume there */
	void (*rl_resume)(struct hl_scsi_cmd *cmd); /* run once a waited-for lock is granted */
	struct hl_scsi_cmd *rl_next;
};

/**
 * Create an LU over `origin` (the LU takes ownership of origin and closes it
 * in hl_lu_destroy). @return 0 or -errno (-EINVAL for a bad block size or an
 * origin whose size is not a multiple of it).
 *
 * The LU listens to the origin's events (hl_origin_listen): when the origin
 * reports a new size, the LU's block count follows (hl_lu_num_blocks, READ
 * CAPACITY, the LBA range checks) and every I_T nexus gets the unit
 * attention CAPACITY DATA HAS CHANGED (2Ah/09h).
 */
int hl_lu_create(const struct hl_lu_config *cfg, struct hl_origin *origin, struct hl_lu **out);

/** Destroy an LU with no command in flight. */
void hl_lu_destroy(struct hl_lu *lu);

const char *hl_lu_name(const struct hl_lu *lu);
/** Current capacity in logical blocks; changes when the origin is resized (any thread). */
uint64_t hl_lu_num_blocks(const struct hl_lu *lu);
uint32_t hl_lu_block_size(const struct hl_lu *lu);

/*
 * Asymmetric logical unit access (SPC-4 5.15). Without an access provider an
 * LU has one target port group per portal group, all active/optimized (a
 * lone gateway). With one (hl_lu_set_access: several gateways, the ownership
 * module decides), each gateway is one target port group and the provider
 * gives every group's state for this LU; the scsi layer answers REPORT
 * TARGET PORT GROUPS from it, refuses media access on a port whose group is
 * standby/unavailable/transitioning with the matching NOT READY sense, and
 * passes SET TARGET PORT GROUPS to it.
 */
enum hl_alua_state {
	HL_ALUA_AO = 0x0,            /* active/optimized */
	HL_ALUA_ANO = 0x1,           /* active/non-optimized */
	HL_ALUA_STANDBY = 0x2,
	HL_ALUA_UNAVAILABLE = 0x3,
	HL_ALUA_OFFLINE = 0xe,
	HL_ALUA_TRANSITIONING = 0xf,
};

/** One target port group as REPORT TARGET PORT GROUPS lists it. */
struct hl_alua_group {
	uint16_t id;               /* target port group id (the gateway id), >= 1 */
	enum hl_alua_state state;  /* for this LU */
	bool pref;                 /* PREF bit: the preferred group */
	uint8_t status;            /* RTPG status code: 0 none, 1 changed by STPG, 2 implicit */
};

#define HL_ALUA_GROUPS_MAX 16

/** What an LU asks its access provider. Called on reactors (and the control thread): must not block. */
struct hl_lu_access {
	/** Fill up to max groups (every gateway's, sorted by id). @return how many. */
	unsigned (*groups)(void *arg, struct hl_alua_group *g, unsigned max);
	/** The state of group tpg for this LU (a group it does not know: HL_ALUA_UNAVAILABLE). */
	enum hl_alua_state (*state)(void *arg, uint16_t tpg);
	/**
	 * SET TARGET PORT GROUPS asked group tpg to become `state`, through a
	 * port of group `via`. The provider starts what it does (asking for
	 * ownership) and returns at once. @return 0 (accepted: GOOD), -EBUSY
	 * (refused now, e.g. the rule against ownership ping-pong: SET TARGET
	 * PORT GROUPS COMMAND FAILED), -EINVAL (a state it cannot set: INVALID
	 * FIELD IN PARAMETER LIST).
	 */
	int (*set)(void *arg, uint16_t via, uint16_t tpg, enum hl_alua_state state);
	/**
	 * Optional: may a media command that passed the access check still
	 * complete with its data (this gateway still owns the LU, its lease
	 * running)? Asked when a command that read data completes; false: its
	 * data is not sent (NOT READY, 04h/0Ah). NULL: as state() says now.
	 */
	bool (*serving)(void *arg);
	/**
	 * Optional: after set() accepted making group tpg active, hold the SET
	 * TARGET PORT GROUPS until that group is active, so that the state the
	 * initiator reads next is the new one, not TRANSITIONING (Linux's
	 * scsi_dh_alua waits seconds before it asks again). done(cookie) runs
	 * once, on any thread, when the group is active or the provider's bound
	 * ran out (the command then answers GOOD all the same: the move goes
	 * on). @return 0 (done will run), or < 0: nothing to wait for, answer now.
	 */
	int (*settle)(void *arg, uint16_t tpg, void (*done)(void *cookie), void *cookie);
	/**
	 * Optional: the implicit transition time for the extended RTPG header
	 * now, seconds (0: unspecified); it may change (the ownership module
	 * learns the peers' leases). Must not block. NULL: transition_time_s.
	 */
	uint8_t (*transition_time)(void *arg);
	/** A fixed implicit transition time, seconds (0: unspecified), without transition_time. */
	uint8_t transition_time_s;
};

/**
 * Give lu an access provider (NULL ops: none; back to all active/optimized).
 * ops and arg must outlive the LU or the next call. Set before the LU is in
 * a target's map.
 */
void hl_lu_set_access(struct hl_lu *lu, const struct hl_lu_access *ops, void *arg);

/**
 * The provider's states changed: every I_T nexus of lu gets ASYMMETRIC
 * ACCESS STATE CHANGED (2Ah/06h) once. Any thread; takes lu->lock.
 */
void hl_lu_access_changed(struct hl_lu *lu);

/**
 * Media access commands (those an access state can refuse) of lu that
 * passed the access check and have not completed yet: a planned handover
 * waits for 0 after its group went TRANSITIONING. Any thread.
 * Counted only while lu has a provider. A command is counted before it asks
 * state(), so once state() answers TRANSITIONING to every caller (the new
 * state stored before this is called), a 0 here means no media command of
 * lu is left to come through that group.
 */
unsigned hl_lu_busy(const struct hl_lu *lu);

/*
 * Persistent reservations shared by the gateways of a disk (docs/gateways.md,
 * "Persistent reservations"). A lone gateway's LU keeps its reservation
 * state itself (and in state_dir with APTPL). With a store (several gateways
 * on a cluster that can keep a shared record: rbd), the state is one record
 * in the cluster: every PERSISTENT RESERVE OUT, RESERVE and RELEASE through
 * any gateway reads it, applies the SPC-4 rules and writes it back only if
 * nobody changed it meanwhile (retrying otherwise), and completes once
 * every gateway applied the change (its unit attentions queued, the tasks
 * a PREEMPT AND ABORT preempted aborted there) or can no longer trust what
 * it had. Commands are checked against the LU's copy of the record, and
 * only while the store vouches that this copy is current; otherwise they
 * get BUSY (retry) until it is.
 *
 * The LU runs the blocking part on a thread of its own, never on a reactor.
 * The store (the daemon connects it to the origin, hotlun/origin.h pr_*)
 * knows nothing of SCSI: it keeps an opaque text and a sequence number.
 */
struct hl_lu_pr_store {
	/**
	 * Read the record: *text is malloc'ed and NUL-terminated (the caller
	 * frees it), *len 0 when it was never written. Blocking. @return 0 or
	 * -errno.
	 */
	int (*load)(void *arg, char **text, size_t *len);
	/**
	 * Replace the record by text (len bytes) whose sequence number is
	 * new_seq, only if its sequence number is still old_seq (0: never
	 * written); then tell every gateway (hl_lu_pr_changed there) and return
	 * once each applied it, or once a gateway that did not answer can no
	 * longer pass a command checked against an older copy. Blocking.
	 * @return 0, -ECANCELED (the record moved on: read it again), or -errno
	 * (the change may or may not have been made).
	 */
	int (*commit)(void *arg, uint64_t old_seq, uint64_t new_seq, const char *text, size_t len);
	/**
	 * The LU applied the record up to seq after hl_lu_pr_changed(cookie)
	 * (cookie 0: nothing to answer). Any thread; must not block.
	 */
	void (*applied)(void *arg, uint64_t cookie, uint64_t seq);
	/**
	 * May commands be checked against the copy whose sequence number is
	 * seq now (the store saw nothing newer, recently enough)? Reactors:
	 * must not block.
	 */
	bool (*current)(void *arg, uint64_t seq);
};

/**
 * Keep lu's persistent reservations in a store (NULL ops: back to the
 * LU's own state, stopping the LU's store thread). Reads the record once
 * (blocking). The LU's own state and APTPL file are not used meanwhile.
 * Main thread, before the LU is in a target's map; ops and arg must
 * outlive the LU or the next call. @return 0 or -errno.
 */
int hl_lu_set_pr_store(struct hl_lu *lu, const struct hl_lu_pr_store *ops, void *arg);

/**
 * For the store: the record may have changed (a notice from another
 * gateway, cookie != 0, or the store's own check, cookie 0). The LU reads
 * it, applies what it missed (unit attentions, aborts of preempted
 * nexuses' tasks) and then calls ops->applied(cookie, seq), maybe from
 * another thread later. Blocking; the store's thread.
 */
void hl_lu_pr_changed(struct hl_lu *lu, uint64_t cookie);

/**
 * lu is served by several gateways but its reservations cannot be kept
 * where all of them see them (a SAN origin: the SAN's own reservations
 * decide which gateway writes): PERSISTENT RESERVE IN/OUT and RESERVE/
 * RELEASE are not offered (INVALID COMMAND OPERATION CODE, left out of
 * REPORT SUPPORTED OPERATION CODES), rather than kept per gateway where a
 * failover would lose them. Main thread, before the LU is in a map.
 */
void hl_lu_pr_unshared(struct hl_lu *lu);

/**
 * The transport's way to abort tasks outside a command: a PREEMPT AND
 * ABORT made through another gateway preempted I_T nexuses of this one.
 * abort() aborts the tasks of nexuses ids[0..n) on lu (as ABORT TASK SET
 * would, no response: TAS = 0) and calls done(done_arg) once they have left
 * the scsi layer (any thread, perhaps before it returns); ids is the
 * caller's. @return 0, or -errno (done is never called).
 */
struct hl_scsi_aborter {
	int (*abort)(void *arg, struct hl_lu *lu, const uint64_t *ids, unsigned n,
	             void (*done)(void *done_arg), void *done_arg);
	void *arg;
};

/*
 * The daemon-wide budget for per-command scratch buffers (src/scsi/scratch.c):
 * bounce buffers, EXTENDED COPY jobs, shared reservation parameter copies.
 * A command that finds it spent is answered BUSY. The minimum lets the
 * largest single buffer (HL_SCSI_MAX_XFER) in when nothing else holds any.
 */
#define HL_SCSI_SCRATCH_DEFAULT (256ull << 20)
#define HL_SCSI_SCRATCH_MIN     ((uint64_t)HL_SCSI_MAX_XFER)

struct hl_scsi_scratch_stats {
	uint64_t limit;   /* bytes */
	uint64_t used;    /* bytes held now */
	uint64_t peak;    /* most ever held at once */
	uint64_t refused; /* commands answered BUSY for want of budget */
};

/** Set the budget in bytes (0: HL_SCSI_SCRATCH_DEFAULT). Any thread, any time. */
void hl_scsi_scratch_set_limit(uint64_t bytes);

/** Read the budget's counters (each exact; any thread). */
void hl_scsi_scratch_stats(struct hl_scsi_scratch_stats *out);

/**
 * Install the transport's aborter (NULL: none; the preempted tasks then run
 * on). Returns once no call of the previous one is running. Any thread.
 */
void hl_scsi_set_aborter(const struct hl_scsi_aborter *a);

/** Execute cmd; see the file comment. Reactor thread only. */
void hl_scsi_cmd_exec(struct hl_scsi_cmd *cmd);

/**
 * Task management that the SCSI layer must see (the transport itself
 * handles aborting tasks it owns and waits for in-flight ones).
 * LUN RESET / TARGET RESET: establishes the reset unit attention (29/03)
 * for every nexus, the requesting one included (SAM-5 6.3.3; libiscsi's
 * MultipathIO.Reset checks it), and releases RESERVE(6/10) reservations.
 * Persistent reservations survive. `by` may be NULL.
 */
void hl_lu_reset(struct hl_lu *lu, const struct hl_scsi_nexus *by);

/**
 * The LUN inventory of a target changed (an LU added to, removed from or
 * replaced in map, which already shows the new inventory): establish
 * REPORTED LUNS DATA HAS CHANGED (3Fh/0Eh, SPC-4 6.33) for nexus on every
 * LU now in map, so its next command to any LUN of the target reports it.
 * A nexus that had not used one of those LUs yet gets POWER ON first there.
 * Reported once per nexus: reporting it on one LU, or a REPORT LUNS, clears
 * it on all of them. A map with no LU left holds no unit attention (SPC-4:
 * commands to an LUN without LU get LOGICAL UNIT NOT SUPPORTED instead).
 * Any thread; takes each LU's lock. @return the number of LUs it was queued on.
 */
unsigned hl_scsi_luns_changed(const struct hl_scsi_lun_map *map, const struct hl_scsi_nexus *nexus);

/** The nexus ended (session closed): drop its per-LU state in every LU of map. */
void hl_scsi_nexus_gone(const struct hl_scsi_lun_map *map, const struct hl_scsi_nexus *nexus);

/** Fill fixed-format sense (18 bytes) into cmd and set CHECK CONDITION. */
void hl_scsi_set_sense(struct hl_scsi_cmd *cmd, uint8_t key, uint8_t asc, uint8_t ascq);

#endif
