/*
 * scsi_internal.h - what the files of src/scsi share: the logical unit's
 * private layout, the device-type command table, sense helpers, unit
 * attentions and the one block I/O entry point.
 *
 * Command execution: cmd.c looks the CDB up in the disk command table
 * (sbc_ops.c), applies the generic checks every command shares (LU present,
 * CDB length, reserved bits against the usage mask, unit attentions), then
 * calls the handler. A handler returns SCSI_DONE after setting status (cmd.c
 * then calls cmd->done), or SCSI_PENDING when it submitted I/O and will call
 * scsi_cmd_complete() itself from the completion.
 */
#ifndef HOTLUN_SCSI_INTERNAL_H
#define HOTLUN_SCSI_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "hotlun/scsi.h"
#include "hotlun/util.h"

#define SCSI_COMPONENT "scsi"

/* ---- logical unit ---- */

/* pending unit attentions kept per nexus; when full, the newest replaces the last */
#define SCSI_UA_MAX 4

/** Per-LU, per-nexus state: pending unit attentions and who the nexus is. */
struct scsi_lu_nexus {
	struct hl_list link; /* in hl_lu.nexuses */
	uint64_t nexus_id;
	char initiator_port[272]; /* copied from the nexus, to match PR registrations */
	uint16_t rel_port;        /* relative target port identifier, 0 when unknown */
	uint16_t tpg_id;          /* its target port group (ALUA), 0 when unknown */
	uint8_t n_ua;
	struct {
		uint8_t asc, ascq;
	} ua[SCSI_UA_MAX]; /* oldest first */
};

/* ---- pr_state.c: the persistent reservation rules on a state of their own ---- */

/* reservation types (SPC-4 6.15.3.4) */
enum {
	SCSI_PR_WE = 1,    /* write exclusive */
	SCSI_PR_EA = 3,    /* exclusive access */
	SCSI_PR_WE_RO = 5, /* write exclusive, registrants only */
	SCSI_PR_EA_RO = 6, /* exclusive access, registrants only */
	SCSI_PR_WE_AR = 7, /* write exclusive, all registrants */
	SCSI_PR_EA_AR = 8, /* exclusive access, all registrants */
};

#define SCSI_PR_MAX_REGS 256
#define SCSI_PR_PORT_MAX 272 /* an initiator port name with its NUL ("name,i,0xISID") */

/**
 * One persistent reservation registration (SPC-4 5.12.6): an I_T nexus
 * identity and its key. initiator_port is "name,i,0xISID"; a bare name
 * (registered through a SPEC_I_PT TransportID of format 00b) stands for
 * every port of that initiator. rel_port is the relative target port
 * (gateway << 8 | TPGT with several gateways), unused when all_tg_pt.
 */
struct scsi_pr_reg {
	char initiator_port[SCSI_PR_PORT_MAX];
	uint16_t rel_port;
	bool all_tg_pt; /* registered through every target port */
	uint64_t key;
};

/**
 * The persistent reservation state of one LU: what every gateway of a
 * shared disk must agree on. Plain data (the regs array is owned); copied
 * with scsi_pr_state_copy, freed with scsi_pr_state_fini.
 */
struct scsi_pr_state {
	uint64_t seq;        /* shared store: changes committed so far (0: none); else 0 */
	uint32_t generation; /* PRgeneration */
	uint8_t type;        /* the reservation's type, 0: not reserved */
	int holder;          /* regs index of a non all-registrants type's holder, else -1 */
	bool aptpl;          /* the last valid APTPL bit */
	unsigned n_regs, cap;
	struct scsi_pr_reg *regs;
	/*
	 * A shared disk's SPC-2 RESERVE(6/10) holder, by I_T nexus identity
	 * (a lone gateway keeps it by nexus id in the LU, hl_lu.rsv2_holder).
	 */
	bool rsv2;
	char rsv2_port[SCSI_PR_PORT_MAX];
	uint16_t rsv2_rel;
};

/** An I_T nexus identity: initiator port name and relative target port. Pointers: caller's. */
struct scsi_pr_who {
	const char *port;
	uint16_t rel;
};

/** One side effect of a change, for the nexuses of the registration-like identity `to`. */
struct scsi_pr_fx {
	uint8_t kind; /* SCSI_PR_FX_* */
	uint8_t asc, ascq;
	struct scsi_pr_reg to; /* initiator_port, rel_port, all_tg_pt; key unused */
};
enum { SCSI_PR_FX_UA = 1, SCSI_PR_FX_ABORT = 2 };

/**
 * The side effects of one committed change, in the order they happened:
 * unit attentions and (PREEMPT AND ABORT) task aborts for the I_T nexuses
 * each entry names, except the issuer's own nexus (by). Every gateway
 * applies them to the nexuses it has.
 */
struct scsi_pr_change {
	uint64_t seq; /* the state's seq after the change */
	char by_port[SCSI_PR_PORT_MAX];
	uint16_t by_rel;
	bool lost; /* out of memory while listing: some entries are missing */
	unsigned n, cap;
	struct scsi_pr_fx *fx; /* owned */
};

/** A PERSISTENT RESERVE OUT, decoded and checked (scsi_pr_out_parse). */
struct scsi_pr_req {
	uint8_t sa, scope, type;
	uint64_t key, sa_key;
	bool all_tg_pt, aptpl, spec_i_pt;
	bool reg_sa;          /* a register service action: APTPL counts */
	const uint8_t *param; /* the whole parameter list (plen bytes; caller keeps) */
	uint32_t plen;
};

/** PERSISTENT RESERVE OUT service actions */
enum {
	SCSI_PRO_REGISTER = 0,
	SCSI_PRO_RESERVE = 1,
	SCSI_PRO_RELEASE = 2,
	SCSI_PRO_CLEAR = 3,
	SCSI_PRO_PREEMPT = 4,
	SCSI_PRO_PREEMPT_ABORT = 5,
	SCSI_PRO_REGISTER_IGNORE = 6,
	SCSI_PRO_REGISTER_MOVE = 7,
};

/**
 * How a reservation command ends: status, and for CHECK CONDITION the
 * ILLEGAL REQUEST asc/ascq, with a field pointer when `field` (into the CDB
 * when in_cdb, else into the parameter list; bit -1: none).
 */
struct scsi_pr_verdict {
	uint8_t status;
	uint8_t asc, ascq;
	bool field, in_cdb;
	uint16_t byte;
	int8_t bit;
};

/** What the LU offers, for REPORT CAPABILITIES and the APTPL check. */
struct scsi_pr_caps {
	bool ptpl_c; /* APTPL can be kept (a state_dir, or a shared store) */
};

void scsi_pr_state_init(struct scsi_pr_state *st);
void scsi_pr_state_fini(struct scsi_pr_state *st);
/** dst := src (dst initialized, its old content freed). @return 0 or -ENOMEM (dst unchanged). */
int scsi_pr_state_copy(struct scsi_pr_state *dst, const struct scsi_pr_state *src);

void scsi_pr_change_init(struct scsi_pr_change *c, const struct scsi_pr_who *by);
void scsi_pr_change_fini(struct scsi_pr_change *c);
/** dst := src (dst initialized). @return 0 or -ENOMEM. */
int scsi_pr_change_copy(struct scsi_pr_change *dst, const struct scsi_pr_change *src);

bool scsi_pr_type_valid(uint8_t type);
bool scsi_pr_type_all_registrants(uint8_t type);
/** A new zeroed registration at the end of st; NULL over SCSI_PR_MAX_REGS or without memory. */
struct scsi_pr_reg *scsi_pr_reg_add(struct scsi_pr_state *st);
/** Append one side effect to c (out of memory: c->lost). */
void scsi_pr_fx_push(struct scsi_pr_change *c, uint8_t kind, const struct scsi_pr_reg *to,
                     uint8_t asc, uint8_t ascq);

/** Does a registration's port name stand for initiator port `port`? (bare names: every ISID) */
bool scsi_pr_port_matches(const char *reg_port, const char *port);
/** Is the I_T nexus (port, rel) one of registration r's? */
bool scsi_pr_reg_matches(const struct scsi_pr_reg *r, const char *port, uint16_t rel);
/** The registration of who, or -1. */
int scsi_pr_find(const struct scsi_pr_state *st, const struct scsi_pr_who *who);
/** Does registration i hold the reservation (every registrant of an all-registrants type)? */
bool scsi_pr_is_holder(const struct scsi_pr_state *st, int i);

/**
 * Does the persistent reservation bar who from a command with flags
 * (SCSI_F_PR_ALLOW, SCSI_F_PR_READ)? SPC-4 table 63 by type.
 */
bool scsi_pr_conflicts(const struct scsi_pr_state *st, const struct scsi_pr_who *who,
                       unsigned flags);

/**
 * Decode and check a PERSISTENT RESERVE OUT's CDB and parameter list
 * (data, dlen bytes delivered): everything that does not depend on the
 * state. @return true (req filled; param points into data), or false with
 * v set (CHECK CONDITION).
 */
bool scsi_pr_out_parse(const uint8_t *cdb, const uint8_t *data, uint32_t dlen,
                       const struct scsi_pr_caps *caps, struct scsi_pr_req *req,
                       struct scsi_pr_verdict *v);

/**
 * Apply one checked PERSISTENT RESERVE OUT from who to st. On GOOD st is
 * the new state and fx lists the side effects (fx->by is who); otherwise
 * st is unchanged and fx empty. *changed: whether st changed (a RESERVE of
 * what the holder has already, an unregister of nothing, are GOOD without
 * a change). st->seq is not touched.
 */
void scsi_pr_apply(struct scsi_pr_state *st, const struct scsi_pr_req *req,
                   const struct scsi_pr_who *who, struct scsi_pr_change *fx,
                   struct scsi_pr_verdict *v, bool *changed);

/**
 * PERSISTENT RESERVE IN service action sa of st into buf (room for
 * scsi_pr_in_max bytes). @return the length, or -1 for an unknown
 * service action.
 */
int scsi_pr_in_build(const struct scsi_pr_state *st, uint8_t sa, const struct scsi_pr_caps *caps,
                     uint8_t *buf);
/** Room scsi_pr_in_build needs at most. */
size_t scsi_pr_in_max(void);

/** RESERVE(6/10) on a shared disk's state: GOOD (maybe changed) or RESERVATION CONFLICT. */
void scsi_pr_rsv2_reserve(struct scsi_pr_state *st, const struct scsi_pr_who *who,
                          struct scsi_pr_verdict *v, bool *changed);
/** RELEASE(6/10), or the holder's I_T nexus loss: ends it when who holds it. */
void scsi_pr_rsv2_release(struct scsi_pr_state *st, const struct scsi_pr_who *who, bool *changed);

/* ---- pr_text.c: the text form of a state ---- */

/* the change history a shared record keeps, so a gateway that missed a notice catches up */
#define SCSI_PR_HISTORY 16
/*
 * Side effects of one change at most: a PREEMPT AND ABORT, the largest,
 * lists an abort and a unit attention per registration and one more per
 * registrant left; a record that says more is damaged (its reader would
 * allocate for it: 64 MiB of "fx" lines were over a GiB).
 */
#define SCSI_PR_FX_MAX (4 * SCSI_PR_MAX_REGS)

/**
 * The text form of st: version 1 (the APTPL file: generation, type,
 * holder, registrations) when changes is NULL, else version 2 (also seq,
 * APTPL, the SPC-2 holder and the last n changes). *out is malloc'ed,
 * NUL-terminated; *len excludes the NUL. @return 0, -ENOMEM, or -EINVAL (a
 * port name with a blank: cannot be written).
 */
int scsi_pr_format(const struct scsi_pr_state *st, const struct scsi_pr_change *changes, unsigned n,
                   char **out, size_t *len);

/**
 * Parse a text form (version 1 or 2) into st (initialized; replaced) and,
 * for version 2, up to SCSI_PR_HISTORY changes into changes[] (initialized
 * by the caller; *n set). An empty text is the empty state. @return 0,
 * -EBADMSG (damaged: st and changes are left empty) or -ENOMEM.
 */
int scsi_pr_parse(const char *text, size_t len, struct scsi_pr_state *st,
                  struct scsi_pr_change *changes, unsigned *n);

struct scsi_xcopy_result;

struct hl_lu {
	char *name;
	struct hl_list registry_link; /* in the daemon-wide LU list (lu.c), guarded by its mutex */
	unsigned holds;               /* references from hl_lu_find_by_naa; guarded by that mutex */
	struct hl_lu_config cfg;      /* cfg.name points at name */
	struct hl_origin *origin;
	uint64_t num_blocks;
	uint32_t block_size;
	uint8_t lbppbe;  /* logical blocks per physical block exponent */
	bool thin;       /* the origin can deallocate: logical block provisioning (LBPME) */
	bool lbprz;      /* deallocated blocks read back as zeroes */
	char *state_dir; /* owned copy of cfg.state_dir, or NULL (then APTPL is refused) */

	pthread_mutex_t lock;    /* guards everything below */
	struct hl_list nexuses;  /* struct scsi_lu_nexus; guarded by lock */
	/* the same nexuses by id (ua.c: open addressing, at most half full); guarded by lock */
	struct scsi_lu_nexus **nexus_ix;
	uint32_t nexus_ix_cap, nexus_ix_n;
	uint64_t rsv2_holder;    /* RESERVE(6/10) holder's nexus id, 0 = none; guarded by lock */
	struct scsi_pr_state pr; /* persistent reservations (pr.c); guarded by lock */
	bool pr_loaded;          /* shared store: pr holds a record read from it; guarded by lock */
	struct hl_list rl_active;  /* commands holding an LBA range; guarded by lock */
	struct hl_list rl_waiting; /* commands waiting for one, FIFO; guarded by lock */
	unsigned rl_n_exclusive;   /* exclusive holders in rl_active; guarded by lock */
	struct hl_list
	    xcopy_results; /* struct scsi_xcopy_result, held per nexus; guarded by lock */

	/*
	 * ALUA access provider (hl_lu_set_access), NULL: none, every port
	 * active/optimized. Written under lock (access_arg first, then access
	 * with release); read on reactors with one acquire load of access.
	 */
	const struct hl_lu_access *access;
	void *access_arg;
	/* media commands that passed the access check and are running (hl_lu_busy); atomic */
	unsigned busy;

	/*
	 * Persistent reservations in a store the gateways share (pr_shared.c,
	 * hl_lu_set_pr_store), NULL: pr is the LU's own. Set before the LU is
	 * in a map, then read without the lock.
	 */
	const struct hl_lu_pr_store *pr_store;
	void *pr_store_arg;
	struct hl_reactor *pr_thread; /* runs the store's blocking transactions */
	bool pr_unshared;             /* hl_lu_pr_unshared: reservation commands are not offered */
};

/** lu's access provider (NULL: none); its arg is lu->access_arg. Any thread. */
static inline const struct hl_lu_access *scsi_lu_access(const struct hl_lu *lu)
{
	return __atomic_load_n(&lu->access, __ATOMIC_ACQUIRE);
}

/** Does lu have an access provider (SET TARGET PORT GROUPS is offered then)? */
bool scsi_lu_has_access(const struct hl_lu *lu);

/** hl_scsi_cmd.state bits */
#define SCSI_CMD_BUSY 0x1u /* counted in lu->busy: scsi_cmd_complete uncounts it */

/* ---- command table ---- */

enum scsi_exec_result {
	SCSI_DONE = 0,    /* status is set; cmd.c calls cmd->done */
	SCSI_PENDING = 1, /* the handler calls scsi_cmd_complete() later */
};

typedef enum scsi_exec_result (*scsi_exec_fn)(struct hl_scsi_cmd *cmd);

/* scsi_cmd_desc.flags */
#define SCSI_F_NO_LU      0x01u /* runs for a LUN with no LU (INQUIRY, REPORT LUNS, REQUEST SENSE) */
#define SCSI_F_UA_PASS    0x02u /* not blocked by a pending unit attention */
#define SCSI_F_MEDIA      0x04u /* accesses the medium */
#define SCSI_F_DATA_OUT   0x08u /* takes data-out from the initiator */
#define SCSI_F_WRITE      0x10u /* modifies the medium: the handler calls scsi_write_protected() */
#define SCSI_F_PR_ALLOW   0x20u /* allowed whatever persistent reservation another nexus holds */
#define SCSI_F_PR_READ    0x40u /* read class: allowed under Write Exclusive reservations */
#define SCSI_F_RSV2_ALLOW 0x80u /* allowed while another nexus holds RESERVE(6/10) */
/*
 * ALUA (SPC-4 5.15.2.4), only with an access provider: what a port whose
 * target port group is not active may still run. Everything else is
 * refused with NOT READY, and SCSI_F_MEDIA commands that pass are counted
 * in hl_lu_busy until they complete.
 */
#define SCSI_F_ALUA_SB 0x100u /* allowed in standby */
#define SCSI_F_ALUA_UN 0x200u /* allowed in unavailable (and offline) */
#define SCSI_F_ALUA_TR 0x400u /* allowed while transitioning */
/*
 * While transitioning, refused as in standby (04h/0Bh), not with 04h/0Ah:
 * TEST UNIT READY, which path checkers send. A group transitions while a
 * standby takes the disk over (the lease wait) or asks for it, i.e. just
 * before it serves; multipathd's tur checker reads 04h/0Bh as a ghost
 * (usable, standby) but 04h/0Ah as a failed path, which would cost the I/O
 * a checker interval (5 s) once the group is active. Standby is what the
 * group still is; REPORT TARGET PORT GROUPS says transitioning.
 */
#define SCSI_F_ALUA_TR_SB 0x800u

#define SCSI_USAGE_MAX 16

/** One command (one opcode, or one service action of an opcode). */
struct scsi_cmd_desc {
	const char *name;
	scsi_exec_fn exec;
	uint16_t flags;
	uint16_t sa; /* service action (when the opcode has them) */
	uint8_t cdb_len;
	/**
	 * CDB usage data as REPORT SUPPORTED OPERATION CODES reports it: byte 0
	 * is the opcode, the service action field holds the service action,
	 * every other bit is 1 when the command uses it. cmd.c rejects CDBs
	 * with any other bit set, so what RSOC reports is what is enforced.
	 */
	uint8_t usage[SCSI_USAGE_MAX];
	/**
	 * Optional: whether this LU offers the command (NULL: every LU). An LU
	 * without it answers INVALID COMMAND OPERATION CODE and RSOC leaves it out.
	 */
	bool (*avail)(const struct hl_lu *lu);
};

/** One opcode of the device-type table: either one command or a list of service actions. */
struct scsi_opcode {
	const struct scsi_cmd_desc *cmd; /* NULL: see sa */
	const struct scsi_cmd_desc *sa;  /* service actions, n_sa of them */
	uint8_t n_sa;
};

/** The disk (SBC) device-type table, indexed by opcode; unsupported opcodes are all-NULL. */
extern const struct scsi_opcode scsi_disk_ops[256];

/** The service action of a CDB whose opcode has them (bits 4:0 of byte 1). */
static inline uint16_t scsi_cdb_sa(const uint8_t *cdb)
{
	return cdb[1] & 0x1f;
}

/** Find the command for opcode/sa; NULL when unsupported (by lu, when lu is not NULL). */
const struct scsi_cmd_desc *scsi_cmd_lookup(const struct hl_lu *lu, uint8_t opcode, uint16_t sa);

/** Does lu (NULL: any LU) offer command d? */
static inline bool scsi_cmd_avail(const struct scsi_cmd_desc *d, const struct hl_lu *lu)
{
	return d && (!lu || !d->avail || d->avail(lu));
}

/* ---- private per-command scratch (overlays hl_scsi_cmd.priv) ---- */

struct scsi_cmd_priv;
typedef void (*scsi_io_done_fn)(struct hl_scsi_cmd *cmd, int result);

struct scsi_cmd_priv {
	scsi_io_done_fn io_done; /* continuation of the block I/O in flight */
	uint8_t *bounce;         /* owned (scsi_bounce_get); freed by scsi_cmd_complete */
	uint64_t lba;            /* multi-step commands: next LBA */
	uint32_t count;          /* multi-step commands: blocks left */
	uint32_t aux;            /* command-specific */
};
_Static_assert(sizeof(struct scsi_cmd_priv) <= sizeof(((struct hl_scsi_cmd *)0)->priv),
               "scsi_cmd_priv must fit hl_scsi_cmd.priv");

static inline struct scsi_cmd_priv *scsi_priv(struct hl_scsi_cmd *cmd)
{
	return (struct scsi_cmd_priv *)cmd->priv;
}

/* ---- cmd.c ---- */

/**
 * May data a media command read leave now (the ALUA re-check that
 * scsi_cmd_complete makes before the transport sends anything)? For the
 * partial data of a READ (hl_scsi_cmd.data_ready).
 */
bool scsi_access_ok(const struct hl_scsi_cmd *cmd);

/**
 * For commands flagged SCSI_F_WRITE, after their CDB checks: true (with DATA
 * PROTECT, WRITE PROTECTED set) when the LU is write-protected.
 */
bool scsi_write_protected(struct hl_scsi_cmd *cmd);

/**
 * The checks a command with a parameter list of plen bytes (its CDB's
 * PARAMETER LIST LENGTH) makes before reading it, after its CDB checks: an
 * empty list is GOOD with nothing to do; data-out shorter than plen is
 * INVALID FIELD IN COMMAND INFORMATION UNIT; a list shorter than min_len
 * (its header) is PARAMETER LIST LENGTH ERROR. The caller sets xfer_len.
 * @return true when cmd->data holds a list of at least min_len bytes to
 * parse; false when the command is done (status set).
 */
bool scsi_param_list_start(struct hl_scsi_cmd *cmd, uint32_t plen, uint32_t min_len);

/* ---- scratch.c ---- */

/**
 * Charge n bytes to the scratch budget (any thread). @return false, and
 * the refusal counted, when that would pass the limit.
 */
bool scsi_scratch_take(uint64_t n);

/** Give back n bytes charged with scsi_scratch_take. */
void scsi_scratch_give(uint64_t n);

/**
 * A bounce buffer of n bytes for cmd (zeroed when `zero`), charged to the
 * scratch budget; kept in scsi_priv(cmd)->bounce by the caller, given back
 * by scsi_cmd_complete. @return NULL with cmd->status BUSY (no sense) when
 * the budget is spent or memory is short: nothing has started, the
 * initiator retries.
 */
uint8_t *scsi_bounce_get(struct hl_scsi_cmd *cmd, size_t n, bool zero);

/** Free a buffer of scsi_bounce_get and give its charge back; NULL is harmless. */
void scsi_bounce_put(uint8_t *b);

/** Finish a command a handler left pending: frees its bounce buffer and calls cmd->done. */
void scsi_cmd_complete(struct hl_scsi_cmd *cmd);

/** Bytes of data-in room the transport gave (0 when the command is not a read on the wire). */
static inline uint32_t scsi_din_cap(const struct hl_scsi_cmd *cmd)
{
	return cmd->data_in ? cmd->data_len : 0;
}

/** Bytes of data-out the transport delivered. */
static inline uint32_t scsi_dout_len(const struct hl_scsi_cmd *cmd)
{
	return cmd->data_out ? cmd->data_len : 0;
}

/**
 * Return `len` bytes of parameter data built in buf, cut to the CDB's
 * allocation length and to the transport's buffer; sets data_in_len,
 * xfer_len and GOOD status.
 */
void scsi_data_in(struct hl_scsi_cmd *cmd, const void *buf, uint32_t len, uint32_t alloc_len);

/* ---- sense.c ---- */

/** Fixed or descriptor sense with an optional INFORMATION field. */
void scsi_sense_build(uint8_t *sense, uint8_t *sense_len, bool desc, uint8_t key, uint8_t asc,
                      uint8_t ascq, bool info_valid, uint64_t info);

/** CHECK CONDITION, ILLEGAL REQUEST, INVALID FIELD IN CDB with a field pointer to byte/bit. */
void scsi_sense_invalid_cdb(struct hl_scsi_cmd *cmd, uint16_t byte, int bit);

/** CHECK CONDITION, ILLEGAL REQUEST, INVALID FIELD IN PARAMETER LIST with a field pointer. */
void scsi_sense_invalid_param(struct hl_scsi_cmd *cmd, uint16_t byte, int bit);

/** CHECK CONDITION with INFORMATION (VALID bit set). */
void scsi_sense_info(struct hl_scsi_cmd *cmd, uint8_t key, uint8_t asc, uint8_t ascq,
                     uint64_t info);

static inline void scsi_set_good(struct hl_scsi_cmd *cmd)
{
	cmd->status = HL_SAM_GOOD;
	cmd->sense_len = 0;
}

/* ASC/ASCQ pairs used in more than one file */
#define SCSI_ASC_INVALID_OPCODE          0x20, 0x00
#define SCSI_ASC_LBA_OUT_OF_RANGE        0x21, 0x00
#define SCSI_ASC_INVALID_FIELD_CDB       0x24, 0x00
#define SCSI_ASC_LU_NOT_SUPPORTED        0x25, 0x00
#define SCSI_ASC_INVALID_FIELD_PARAM     0x26, 0x00
#define SCSI_ASC_WRITE_PROTECTED         0x27, 0x00
#define SCSI_ASC_POWER_ON_RESET          0x29, 0x00
#define SCSI_ASC_LUN_RESET               0x29, 0x03
#define SCSI_ASC_SAVING_NOT_SUPP         0x39, 0x00
#define SCSI_ASC_INVALID_FIELD_IU        0x0e, 0x03
#define SCSI_ASC_WRITE_ERROR             0x0c, 0x00
#define SCSI_ASC_READ_ERROR              0x11, 0x00
#define SCSI_ASC_MISCOMPARE              0x1d, 0x00
#define SCSI_ASC_PARAM_LIST_LEN          0x1a, 0x00
#define SCSI_ASC_NO_ADDITIONAL           0x00, 0x00
#define SCSI_ASC_RESERVATIONS_PREEMPTED  0x2a, 0x03
#define SCSI_ASC_RESERVATIONS_RELEASED   0x2a, 0x04
#define SCSI_ASC_REGISTRATIONS_PREEMPTED 0x2a, 0x05
#define SCSI_ASC_INVALID_RELEASE         0x26, 0x04
#define SCSI_ASC_NO_REG_RESOURCES        0x55, 0x04
#define SCSI_ASC_REPORTED_LUNS_CHANGED   0x3f, 0x0e
#define SCSI_ASC_ALUA_TRANSITION         0x04, 0x0a
#define SCSI_ASC_ALUA_STANDBY            0x04, 0x0b
#define SCSI_ASC_ALUA_UNAVAILABLE        0x04, 0x0c
#define SCSI_ASC_ALUA_CHANGED            0x2a, 0x06
#define SCSI_ASC_STPG_FAILED             0x67, 0x0a
#define SCSI_ASC_LU_COMM_FAILURE         0x08, 0x00

/* ---- ua.c ---- */

/**
 * If `nexus` (NULL: an anonymous nexus 0) has a unit attention pending on lu,
 * remove the oldest and return true with it in asc and ascq. A nexus seen for
 * the first time starts with POWER ON, RESET, OR BUS DEVICE RESET OCCURRED.
 * Takes lu->lock.
 */
bool scsi_ua_take(struct hl_lu *lu, const struct hl_scsi_nexus *nexus, uint8_t *asc, uint8_t *ascq);

/**
 * scsi_ua_take for cmd's LU and nexus, reporting the condition to cmd's
 * nexus: REPORTED LUNS DATA HAS CHANGED is then cleared on every other LU
 * of cmd->map too (it concerns the target, and is reported once).
 */
bool scsi_ua_report(struct hl_scsi_cmd *cmd, uint8_t *asc, uint8_t *ascq);

/** Queue a unit attention for every known nexus of lu except `except_id` (0: none). */
void scsi_ua_queue_all(struct hl_lu *lu, uint64_t except_id, uint8_t asc, uint8_t ascq);

/**
 * Clear a pending asc/ascq for nexus_id on lu and on every LU of map (either
 * may be NULL): REPORTED LUNS DATA HAS CHANGED once the nexus heard it on one
 * LU or ran REPORT LUNS. Takes each LU's lock in turn.
 */
void scsi_ua_clear_map(const struct hl_scsi_lun_map *map, struct hl_lu *lu, uint64_t nexus_id,
                       uint8_t asc, uint8_t ascq);

/** Queue one unit attention on one nexus state; lu->lock held. */
void scsi_ua_push(struct scsi_lu_nexus *n, uint8_t asc, uint8_t ascq);

/** Drop the per-nexus state of nexus_id. */
void scsi_ua_nexus_gone(struct hl_lu *lu, uint64_t nexus_id);

/** Free all per-nexus state (LU teardown). */
void scsi_ua_fini(struct hl_lu *lu);

/* ---- pr.c: reservations (RESERVE/RELEASE and persistent reservations) ---- */

/** true (status RESERVATION CONFLICT set) when a reservation bars cmd (command d). */
bool scsi_rsv_conflict(struct hl_scsi_cmd *cmd, const struct scsi_cmd_desc *d);

/** LUN reset: RESERVE(6/10) reservations end; persistent ones stay. */
void scsi_rsv_reset(struct hl_lu *lu);

/** The nexus ended: a RESERVE(6/10) it held ends; its registrations stay (they persist). */
void scsi_rsv_nexus_gone(struct hl_lu *lu, const struct hl_scsi_nexus *nexus);

/** Free registrations (LU teardown). */
void scsi_rsv_fini(struct hl_lu *lu);

/** The I_T nexus identity of cmd (an anonymous nexus: "", 0). Valid while cmd->nexus is. */
struct scsi_pr_who scsi_pr_who_of(const struct hl_scsi_cmd *cmd);

/** Set cmd's status (and sense) from a verdict. */
void scsi_pr_verdict_set(struct hl_scsi_cmd *cmd, const struct scsi_pr_verdict *v);

/**
 * Apply a change's side effects to the I_T nexuses this LU knows, except
 * the issuer's: unit attentions are queued; the nexuses whose tasks go are
 * added to ids (n_ids of at most max; *others when more than fit).
 * lu->lock held.
 */
void scsi_pr_fx_local(struct hl_lu *lu, const struct scsi_pr_change *c, uint64_t *ids,
                      unsigned *n_ids, unsigned max, bool *others);

/* ---- pr_shared.c: persistent reservations in a store the gateways share ---- */

/** The reservation commands are offered (not hl_lu_pr_unshared). */
bool scsi_lu_pr_avail(const struct hl_lu *lu);

/** Shared store: may commands be checked against lu's copy now? lu->lock held. */
bool scsi_pr_shared_current(struct hl_lu *lu);

/** Shared store: run a checked PERSISTENT RESERVE OUT (req's param is copied). */
enum scsi_exec_result scsi_pr_shared_out(struct hl_scsi_cmd *cmd, const struct scsi_pr_req *req);

/** Shared store: PERSISTENT RESERVE IN from the record itself (the copy is not current). */
enum scsi_exec_result scsi_pr_shared_in(struct hl_scsi_cmd *cmd);

/** Shared store: RESERVE (reserve) or RELEASE (6/10). */
enum scsi_exec_result scsi_pr_shared_rsv2(struct hl_scsi_cmd *cmd, bool reserve);

/** Shared store, in the background: who's SPC-2 reservation ends (NULL: whoever holds it). */
void scsi_pr_shared_rsv2_end(struct hl_lu *lu, const struct scsi_pr_who *who);

/** Stop using the store: its transactions drain, the thread ends (LU teardown). */
void scsi_pr_shared_stop(struct hl_lu *lu);

/**
 * Load the persistent reservation state saved with APTPL = 1 from
 * lu->state_dir (LU creation, before any command). A missing file is no
 * state; a damaged one is logged and ignored. @return 0 or -errno (-ENOMEM).
 */
int scsi_pr_load(struct hl_lu *lu);

enum scsi_exec_result spc_reserve(struct hl_scsi_cmd *cmd);
enum scsi_exec_result spc_release(struct hl_scsi_cmd *cmd);
enum scsi_exec_result spc_pr_in(struct hl_scsi_cmd *cmd);
enum scsi_exec_result spc_pr_out(struct hl_scsi_cmd *cmd);

/* ---- lu.c: the daemon-wide LU registry (EXTENDED COPY finds its copy targets there) ---- */

/**
 * The LU whose NAA designator (VPD 83) is naa, with a hold taken (the LU is
 * not destroyed until scsi_lu_release); NULL when no LU has it.
 */
struct hl_lu *scsi_lu_find_by_naa(const uint8_t naa[16]);

/** Drop a hold taken by scsi_lu_find_by_naa. */
void scsi_lu_release(struct hl_lu *lu);

/* ---- xcopy.c: EXTENDED COPY (LID1), RECEIVE COPY RESULTS, VPD 8F ---- */

enum scsi_exec_result spc_extended_copy(struct hl_scsi_cmd *cmd);
enum scsi_exec_result spc_receive_copy_results(struct hl_scsi_cmd *cmd);

/** VPD 8F (third-party copy) into b; returns its length. */
uint32_t scsi_vpd_third_party_copy(uint8_t *b);

/** The nexus ended: drop the copy results held for it. */
void scsi_xcopy_nexus_gone(struct hl_lu *lu, uint64_t nexus_id);

/** Free held copy results (LU teardown). */
void scsi_xcopy_fini(struct hl_lu *lu);

/* ---- range.c: LBA range locks (COMPARE AND WRITE atomicity) ---- */

#define SCSI_CAW_MAX_BLOCKS 255 /* MAXIMUM COMPARE AND WRITE LENGTH (VPD B0) */

/**
 * Lock [lba, lba + count) of cmd->lu, shared for writes, exclusive for
 * COMPARE AND WRITE. @return true when granted now (the caller goes on);
 * false when queued: resume(cmd) runs later on cmd->reactor. The lock is
 * released by scsi_cmd_complete().
 */
bool scsi_range_lock(struct hl_scsi_cmd *cmd, uint64_t lba, uint64_t count, bool exclusive,
                     void (*resume)(struct hl_scsi_cmd *cmd));

/** Release cmd's range (if any) and wake the waiters it was blocking. */
void scsi_range_unlock(struct hl_scsi_cmd *cmd);

void scsi_range_init(struct hl_lu *lu);

/* ---- spc.c: primary commands ---- */

enum scsi_exec_result spc_inquiry(struct hl_scsi_cmd *cmd);
enum scsi_exec_result spc_report_luns(struct hl_scsi_cmd *cmd);
enum scsi_exec_result spc_request_sense(struct hl_scsi_cmd *cmd);
enum scsi_exec_result spc_test_unit_ready(struct hl_scsi_cmd *cmd);
enum scsi_exec_result spc_mode_sense(struct hl_scsi_cmd *cmd);
enum scsi_exec_result spc_mode_select(struct hl_scsi_cmd *cmd);
enum scsi_exec_result spc_report_opcodes(struct hl_scsi_cmd *cmd);
enum scsi_exec_result spc_report_tpgs(struct hl_scsi_cmd *cmd);
enum scsi_exec_result spc_set_tpgs(struct hl_scsi_cmd *cmd);

/* ---- sbc.c: block commands ---- */

enum scsi_exec_result sbc_read_capacity10(struct hl_scsi_cmd *cmd);
enum scsi_exec_result sbc_read_capacity16(struct hl_scsi_cmd *cmd);
enum scsi_exec_result sbc_read(struct hl_scsi_cmd *cmd);
enum scsi_exec_result sbc_write(struct hl_scsi_cmd *cmd);
enum scsi_exec_result sbc_verify(struct hl_scsi_cmd *cmd);
enum scsi_exec_result sbc_write_verify(struct hl_scsi_cmd *cmd);
enum scsi_exec_result sbc_sync_cache(struct hl_scsi_cmd *cmd);
enum scsi_exec_result sbc_compare_and_write(struct hl_scsi_cmd *cmd);
enum scsi_exec_result sbc_orwrite(struct hl_scsi_cmd *cmd);
enum scsi_exec_result sbc_prefetch(struct hl_scsi_cmd *cmd);
enum scsi_exec_result sbc_start_stop(struct hl_scsi_cmd *cmd);

/** A submit that returned rc < 0: BUSY for a transient shortage, else MEDIUM ERROR. */
void sbc_submit_failed(struct hl_scsi_cmd *cmd, int rc, bool write);

/** A completion with result < 0: MEDIUM ERROR (read/write error) or DATA PROTECT for -ENOSPC. */
void sbc_io_error(struct hl_scsi_cmd *cmd, int result, bool write);

/** false (LBA OUT OF RANGE set) unless [lba, lba + count) lies within the LU. */
bool sbc_lba_range_ok(struct hl_scsi_cmd *cmd, uint64_t lba, uint64_t count);

/* ---- lbp.c: logical block provisioning ---- */

/* MAXIMUM WRITE SAME LENGTH (VPD B0): as for any write, HL_SCSI_MAX_XFER worth of blocks */
#define SCSI_WS_MAX_BLOCKS(lu) (HL_SCSI_MAX_XFER / (lu)->block_size)
#define SCSI_UNMAP_MAX_BLOCKS  (1u << 20) /* MAXIMUM UNMAP LBA COUNT */
#define SCSI_UNMAP_MAX_DESC    256        /* MAXIMUM UNMAP BLOCK DESCRIPTOR COUNT */

/** The LU can deallocate (UNMAP, WRITE SAME with UNMAP, GET LBA STATUS; LBPME = 1). */
bool scsi_lu_thin(const struct hl_lu *lu);

/** UNMAP is offered: by thin LUs, and by write-protected ones (to answer DATA PROTECT). */
bool scsi_lu_unmap_avail(const struct hl_lu *lu);

enum scsi_exec_result sbc_write_same(struct hl_scsi_cmd *cmd);
enum scsi_exec_result sbc_unmap(struct hl_scsi_cmd *cmd);
enum scsi_exec_result sbc_get_lba_status(struct hl_scsi_cmd *cmd);

/**
 * The one path every block request takes to the storage below: lu's origin
 * stack. Fills cmd->io from the arguments (lba and nblocks in lu's blocks);
 * `done` runs once on the reactor when the I/O completes. No access or range
 * check: the caller made them. lu is cmd->lu but for EXTENDED COPY, whose
 * source and destination may be other LUs while cmd->lu stays the one the
 * command came to. @return 0 (done will run) or -errno (done never runs).
 */
int scsi_block_io_on(struct hl_scsi_cmd *cmd, struct hl_lu *lu, enum hl_io_op op, unsigned flags,
                     uint64_t lba, uint32_t nblocks, struct iovec *iov, int iovcnt,
                     scsi_io_done_fn done);

/** scsi_block_io_on the command's own LU. */
static inline int scsi_block_io(struct hl_scsi_cmd *cmd, enum hl_io_op op, unsigned flags,
                                uint64_t lba, uint32_t nblocks, struct iovec *iov, int iovcnt,
                                scsi_io_done_fn done)
{
	return scsi_block_io_on(cmd, cmd->lu, op, flags, lba, nblocks, iov, iovcnt, done);
}

#endif
