/*
 * origin_iscsi.h - what the two files of the iscsi origin share: the origin,
 * its per-reactor sessions and per-I/O state (iscsi.c: sessions, I/O,
 * open/close) and the gateways' SCSI-3 persistent reservations on the SAN
 * LUN with their warm restart proofs (iscsi_pr.c). Not for other files of
 * src/origin: what they reach of this backend is in origin_internal.h.
 */
#ifndef HOTLUN_ORIGIN_ISCSI_H
#define HOTLUN_ORIGIN_ISCSI_H

#include "hotlun/event.h"
#include "hotlun/util.h"
#include "origin/iscsi_isid.h"
#include "origin/origin_internal.h"

#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#define ISC_COMPONENT "origin"

struct isc_origin {
	struct origin_iscsi_url url;
	char portal[ORIGIN_ISCSI_HOST_MAX + 16];
	char initiator[ORIGIN_ISCSI_NAME_MAX];
	char mutual_user[256], mutual_secret[256]; /* mutual CHAP: what the SAN answers with */
	uint64_t id; /* never reused: keys the per-thread session cache */
	uint64_t timeout_ns;
	uint64_t probe_ns; /* silence with commands in flight before a NOP-Out, and its timeout */
	char lu_id[96];    /* the LUN's VPD 83h designator (data_id), "" when it has none */
	uint32_t bs;       /* the SAN's logical block size */
	uint64_t nblocks;
	uint64_t max_xfer;  /* bytes per READ/WRITE command, 0 = no limit */
	uint32_t max_unmap; /* blocks per UNMAP descriptor */
	uint32_t max_unmap_desc;
	uint32_t max_ws;       /* blocks per WRITE SAME */
	uint32_t max_caw;      /* blocks per COMPARE AND WRITE, 0 = unsupported */
	bool ws_unmap;         /* WRITE SAME with UNMAP=1 deallocates and reads back zeroes */
	atomic_bool no_ws;     /* WRITE SAME(16) was refused once: write zeroes */
	atomic_bool no_sync16; /* SYNCHRONIZE CACHE(16) was refused once: use (10) */
	atomic_bool no_sync;   /* neither exists: the SAN has no volatile cache to flush */
	atomic_bool no_caw;    /* COMPARE AND WRITE was refused once (B0 promised it) */
	atomic_bool closing;   /* close() began: submit refuses (-ESHUTDOWN), no new session */
	uint32_t isid_rnd;    /* the 24-bit part of every session's ISID (iscsi_isid.c) */
	struct isc_isid isid; /* its slot; isid.noted under lock */
	atomic_bool unclean;  /* a session closed with commands out: its slot record stays */
	/* writes failed with may_land whose session has not logged in again (iscsi_unfenced) */
	atomic_uint_fast64_t unfenced;
	atomic_bool unswept;  /* a dead run's ISIDs are not fenced yet: no data session logs
	                         in until the sweep, retried on svc, succeeds (iscsi_isid.c) */
	struct hl_timer sweep_t; /* that retry (svc) */
	unsigned sweep_ms, sweep_tries; /* its next delay, the tries so far (svc) */
	pthread_mutex_t lock; /* guards sessions and nsessions; svc while it goes (iscsi_ua.c) */
	struct hl_list sessions;
	unsigned nsessions;
	/* ownership among gateways (hl_origin_opts.gateway); see iscsi_pr.c */
	uint16_t gateway;
	/* origin_iscsi_pr_key(gateway): this run's; 0: a lone gateway. Drawn again once,
	   before our first PR command, while a key of that run is registered (ctl_lock;
	   read anywhere: atomic) */
	_Atomic uint64_t pr_key;
	bool run_fresh; /* no other key of pr_key's run was registered at that look (ctl_lock) */
	atomic_bool owned;        /* own_acquire succeeded; no release or fence since */
	atomic_bool fenced;       /* the SAN refused a write, or a check found another holder */
	atomic_uint own_gen;      /* counts acquisitions: each session registers once per value */
	atomic_bool no_aptpl;     /* the SAN refused APTPL = 1: registrations without it */
	atomic_bool no_abort;     /* the SAN refused PREEMPT AND ABORT once (logged) */
	atomic_bool requested;    /* own_request registered our key: a failed acquire keeps it */
	atomic_uint proof_epoch;  /* counts proof_take calls: a session's next write re-registers */
	atomic_uint writes_out;   /* gateway: writes submitted and not yet completed */
	pthread_mutex_t ctl_lock; /* guards ctl: the ownership thread's PR session */
	struct iscsi_context *ctl; /* ISID qualifier 0; NULL until the first own_* op */
	uint64_t ctl_key;          /* the key registered on ctl (0: none); moves with each
	                              heartbeat while ctl holds the reservation (ctl_lock) */
	bool no_beat;              /* the SAN refused the heartbeat's REGISTER: none (ctl_lock) */
	uint64_t beats_ok;         /* heartbeats the SAN took (ctl_lock) */
	uint32_t beat_gen;         /* PRgeneration at the last renew's read (ctl_lock) */
	bool beat_gen_seen;        /* beat_gen is set (ctl_lock) */
	atomic_bool gen_static;    /* a heartbeat did not move PRgeneration (not SPC-4): no
	                              proof may count heartbeats (proof_check) */
	uint64_t peek_key;         /* own_peek: the holder's key as last seen (ctl_lock) */
	bool peek_beats;           /* own_peek: that run's key moved since we first saw it */
	uint64_t last_holder;      /* the last gateway key seen holding the reservation, kept
	                              after it goes (0: none seen by this process; ctl_lock) */
	/* the last own_acquire, for proof_check (ctl_lock) */
	uint64_t acq_from_key; /* the holder it found (0: none) */
	uint32_t acq_from_gen; /* the PRgeneration it found */
	uint32_t acq_gen;      /* the PRgeneration it left */
	uint64_t acq_key;      /* the holder's key it left (ours, heartbeat as then) */
	/* the last proof proof_take gave (ctl_lock): given again while heartbeats explain all */
	uint64_t proof_key;
	uint32_t proof_gen;
	bool acq_exact;        /* only its own commands moved PRgeneration in between */
	/* the SAN's unit attentions (iscsi_ua.c) */
	struct hl_reactor *svc;  /* "iscsi-ua": the checks they ask for; events leave from it */
	atomic_uint ua_pending;  /* ISC_UA_* met and not yet checked (non-zero: one is queued) */
	struct hl_timer ua_tick;      /* the poll (svc) */
	struct iscsi_context *ua_ctx; /* the poll nexus, ISID qualifier 0xffff (svc) */
	struct hl_event ua_ev;        /* its socket between polls (svc) */
	bool ua_ctx_was;              /* it was logged in before (svc) */
};

enum isc_state {
	ISC_DOWN = 0,   /* no context; the retry timer will connect */
	ISC_CONNECTING, /* context made, login in progress */
	ISC_UP,
};

/* One per (origin, reactor). Everything but `link` is touched only on `reactor`'s thread. */
struct isc_session {
	struct hl_list link; /* in isc_origin.sessions, guarded by its lock */
	struct hl_origin *o;
	struct hl_reactor *reactor;
	struct iscsi_context *ctx; /* NULL while DOWN */
	enum isc_state state; /* written on reactor only; see set_state() */
	bool broken;    /* libiscsi reported the connection gone; torn down after it returns */
	bool in_lib;    /* inside a libiscsi call that may run our callbacks */
	bool logged_up; /* was UP at least once (for the log) */
	bool dead_logged;
	bool started;     /* tick armed, first connect begun */
	bool nop_pending; /* a NOP-Out probe is out */
	uint16_t qual;    /* ISID qualifier */
	bool reg_busy;    /* gateway: the registration of this I_T nexus is in progress */
	unsigned reg_want, reg_gen; /* own_gen being registered, own_gen registered */
	unsigned proof_want, proof_seen; /* the same for proof_epoch (writes only) */
	struct scsi_task *reg_task; /* its command in flight */
	struct hl_event ev;
	struct hl_timer tick;
	struct hl_timer retry;
	struct hl_timer done_t;
	/* registered on reactor while its events and timers may be armed there */
	struct hl_reactor_fini fini;
	/*
	 * fini is registered (the reactor is not destroyed): close() reads this,
	 * not fini's links, which the reactor rewrites as other calls come and go
	 */
	atomic_bool armed;
	struct hl_list waitq;    /* not sent yet (or sent and to be repeated) */
	struct hl_list inflight; /* given to libiscsi */
	struct hl_list doneq;    /* finished; callbacks run from done_t / the end of a handler */
	unsigned nwait, ninflight;
	uint32_t backoff_ms;
	uint64_t down_since_ns; /* 0 while UP */
	uint64_t connect_start_ns;
	uint64_t last_rx_ns; /* last completion or NOP-In while commands were in flight */
	uint64_t nop_sent_ns;
	/*
	 * Logins that succeeded. Each one after the first reinstates the
	 * session (same initiator name and ISID): the SAN ends the tasks the
	 * lost connection left before it answers the login (RFC 7143), so a
	 * command sent under an earlier login can no longer run.
	 */
	uint32_t logins;
	uint32_t unfenced; /* of isc_origin.unfenced: failed since the last login */
};

/*
 * state is written only on the session's reactor (plain reads there are
 * fine), but origin_iscsi_sessions_up() reads it from any thread: the store
 * is atomic so that read is not a data race (ThreadSanitizer, iscsi_ut).
 */
static inline void set_state(struct isc_session *s, enum isc_state st)
{
	__atomic_store_n(&s->state, st, __ATOMIC_RELAXED);
}

/* Per-I/O state in hl_origin_io.priv. */
struct isc_io {
	struct hl_list link; /* in one of the session's queues */
	struct isc_session *s;
	struct scsi_task *task;
	uint64_t deadline_ns;
	uint64_t done;           /* bytes finished by earlier commands of a split I/O */
	struct iovec *chunk_iov; /* heap: iovecs of the current piece of a split READ/WRITE */
	int result;
	uint32_t cur_blocks; /* blocks the command in flight moves */
	/*
	 * s->logins when a command of this I/O went to the SAN, 0 once the
	 * SAN answered it: a failure while it equals s->logins may still be
	 * run there (finish sets may_land).
	 */
	uint32_t out_login;
};
_Static_assert(sizeof(struct isc_io) <= sizeof(((struct hl_origin_io *)0)->priv),
               "isc_io must fit in hl_origin_io.priv");

static inline struct isc_io *iio_of(struct hl_origin_io *io)
{
	return (struct isc_io *)io->priv;
}

static inline struct hl_origin_io *io_of_link(struct hl_list *l)
{
	return (struct hl_origin_io *)((char *)l - offsetof(struct isc_io, link) -
	                               offsetof(struct hl_origin_io, priv));
}

static inline struct isc_origin *io_of(struct hl_origin *o)
{
	return hl_origin_priv(o);
}

/** A libiscsi context for io's SAN with ISID (10b, base, qual); NULL: logged. */
struct iscsi_context *origin_iscsi_context_make_isid(struct isc_origin *io, uint32_t base,
                                                     uint16_t qual);

/* ---- stable ISIDs (iscsi_isid.c) ---- */

/** open(): take a slot and set io->isid_rnd (derived, or random without disk and state_dir). */
void origin_iscsi_isid_choose(struct hl_origin *o, const struct hl_origin_opts *opts);

/**
 * open(), after the probe: reinstate every session dead holders of free
 * slots left at the SAN. @return true when every one was (or none was
 * left); false: the slots not fenced stay locked, for
 * origin_iscsi_isid_sweep_later().
 */
bool origin_iscsi_isid_sweep(struct hl_origin *o);

/**
 * open(), after a sweep that failed and once svc runs: io->unswept is set
 * (no data session logs in); the sweep is tried again on svc, with a
 * growing delay, until it succeeds (then unswept is cleared) or the origin
 * closes. @return 0 or -ENOMEM (not retried: the disk stays unserved).
 */
int origin_iscsi_isid_sweep_later(struct hl_origin *o);

/* ---- unit attentions (iscsi_ua.c) ---- */

/* What a unit attention asks for (origin_iscsi_ua_class); 0: repeat the command, nothing more. */
enum {
	ISC_UA_RESET = 1u,    /* 29/xx: read the capacity again (a reset may hide a change) */
	ISC_UA_CAPACITY = 2u, /* 2A/09: read it again and drop the cache */
	ISC_UA_PR = 4u,       /* 2A/03, 2A/04, 2A/05: a gateway's reservation may be gone: drop */
	ISC_UA_IDENTITY = 8u, /* 3F/03, 3F/0E: the LUN may be another one: drop */
};

/** ASC/ASCQ of a UNIT ATTENTION -> ISC_UA_* (one bit, or 0). Pure. */
unsigned origin_iscsi_ua_class(int asc, int ascq);

/** s met a UNIT ATTENTION (reactor thread of s): queue what it asks for. */
void origin_iscsi_ua_seen(struct isc_session *s, int asc, int ascq);

/** Queue a check for the ISC_UA_* bits in what (any thread; merged with one queued). */
void origin_iscsi_ua_note(struct hl_origin *o, unsigned what);

/** open(): start the service thread. @return 0 or -errno. */
int origin_iscsi_ua_start(struct hl_origin *o);

/** shut()/close(), after `closing` is set: stop it (a check under way ends first). */
void origin_iscsi_ua_stop(struct hl_origin *o);

/* ---- gateways: the data path's side of the reservation (iscsi_pr.c) ---- */

/* Ops that change the medium: what a registrants-only reservation refuses to non-registrants. */
static inline bool op_writes(enum hl_io_op op)
{
	return op != HL_IO_READ && op != HL_IO_FLUSH;
}

/*
 * Gateway mode refuses writes here (-ESHUTDOWN) while the origin is not
 * ours or was found fenced: the SAN would refuse them anyway while another
 * gateway holds the reservation, but not while nobody does.
 */
static inline bool pr_write_refused(const struct isc_origin *io, enum hl_io_op op)
{
	return io->pr_key && op_writes(op) &&
	       (!atomic_load_explicit(&io->owned, memory_order_acquire) ||
	        atomic_load_explicit(&io->fenced, memory_order_acquire));
}

/**
 * A reservation key for this run of gateway gw: "hlu", 16 random bits, a
 * heartbeat counter (0 here), the gateway id (0x686c75RRRR00GGGG;
 * iscsi_pr_key.h). Each process draws its own, so that two
 * processes with one gateway id never mistake each other's reservation for
 * their own; every gateway still reads the owner's id from the key. The
 * ownership thread's first PR command makes sure that no key of that run
 * is registered at the SAN yet (an earlier process's), and draws again
 * if one is (iscsi_pr.c, pr_run_fresh).
 */
uint64_t origin_iscsi_pr_key(uint16_t gw);

/**
 * Before s sends an op (reactor thread of s): registers our key on this
 * session's I_T nexus once per acquisition, and again before the first
 * write after each proof_take. @return true: send op now; false: a
 * registration step is out (or could not be queued: the next dispatch
 * asks again).
 */
bool origin_iscsi_pr_ready(struct isc_session *s, enum hl_io_op op);

/** Forget a registration step libiscsi will not call back (its context is gone); frees its task. */
void origin_iscsi_reg_drop(struct isc_session *s);

/** Close the ownership thread's PR session, if any (ctl_lock held, or no own_* op can run). */
void origin_iscsi_ctl_drop(struct isc_origin *io);

/** See hl_origin_ops.own_acquire .. own_refuse (the ownership thread; ctl_lock taken inside). */
int origin_iscsi_own_acquire(struct hl_origin *o, uint16_t gw, uint64_t epoch, bool force,
                             char *why, size_t whylen);
int origin_iscsi_own_renew(struct hl_origin *o, uint16_t gw, uint64_t epoch,
                           struct hl_own_info *info);
int origin_iscsi_own_release(struct hl_origin *o, uint16_t gw, uint64_t epoch);
int origin_iscsi_own_peek(struct hl_origin *o, struct hl_own_info *info);
int origin_iscsi_own_request(struct hl_origin *o, uint16_t gw);
int origin_iscsi_own_refuse(struct hl_origin *o, uint16_t gw, uint16_t requester);

/** See hl_origin_ops.proof_take / proof_check: "iscsi-pr:KEY:PRGENERATION:SIZE". */
int origin_iscsi_proof_take(struct hl_origin *o, const char *tag, bool final, char *proof,
                            size_t len);
int origin_iscsi_proof_check(struct hl_origin *o, const char *tag, const char *proof,
                             hl_origin_changed_fn changed, void *arg, char *why, size_t whylen);

/* ---- iscsi.c, for iscsi_pr.c ---- */

/** A libiscsi context for this origin's LUN, ISID qualifier qual, not connected (NULL: failed). */
struct iscsi_context *origin_iscsi_context_make(struct isc_origin *io, uint16_t qual);

#endif
