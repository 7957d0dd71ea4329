/*
 * origin_rbd.h - what the three files of the rbd origin share: the origin and
 * its per-request state, and the calls between rbd.c (connection, open/close,
 * I/O, the service thread and its watch), rbd_own.c (who may write the image:
 * the exclusive lock, the fence, the gateways' ownership record and
 * requests), rbd_proof.c (mark snapshots and diffs for warm restarts, the
 * image's identity) and rbd_pr.c (the persistent reservation record the
 * gateways share). Built only with librbd (HAVE_RBD).
 */
#ifndef HOTLUN_ORIGIN_RBD_H
#define HOTLUN_ORIGIN_RBD_H

#include "hotlun/event.h"
#include "origin/origin_internal.h"

#include <pthread.h>
#include <rados/librados.h>
#include <rbd/librbd.h>
#include <stdatomic.h>
#include <sys/types.h>

#define RBD_LOG "origin"

struct rbd_origin {
	rados_t cluster;
	rados_ioctx_t ioctx;
	rbd_image_t image;
	char pool[128];
	char name[256];
	char snap[256];
	struct hl_reactor *svc; /* service thread: size checks, event delivery */
	uint64_t watch_handle;
	bool watching;
	atomic_bool check_queued; /* a size check is queued on svc */
	/*
	 * Header changes (rbd_size_check): notes counts the update watch's
	 * callbacks, one per change; the service thread explains each by what
	 * it sees changed (the size, the set of snapshots) and tells the cache
	 * to drop everything when it cannot (a shrink and a grow back look
	 * like no change at all).
	 */
	atomic_uint notes;
	atomic_uint own_snap_ops; /* snapshots this process made or removed (marks) */
	unsigned notes_seen; /* svc: notes explained or dropped for */
	unsigned own_seen;   /* svc: own_snap_ops at the last check */
	unsigned carry;      /* svc: a change seen before its note (0 or 1) */
	uint64_t *snap_ids;  /* svc: the snapshot ids at the last check, sorted */
	int nsnap_ids;       /* svc: how many; -1 unknown */
	uint32_t test_check_delay_ms; /* HOTLUN_TEST_RBD_CHECK_DELAY_MS: a slow service thread */
	atomic_bool fenced;       /* the cluster shut us out: I/O fails with -ESHUTDOWN */
	bool locked;              /* we hold the exclusive lock in exclusive mode */
	struct hl_timer probe;    /* svc: the periodic fence probe */
	char image_id[128];       /* rbd_get_id; "" when unknown */
	/* the proof of the mark this run made (proofs are taken on one thread at a time) */
	char mark_proof[HL_ORIGIN_PROOF_MAX];
	/*
	 * Marks and writes of unknown outcome (origin_rbd_mark_create): a
	 * write that timed out before a mark and reaches its OSD after it
	 * carries the older snapshot context, so the OSD keeps no copy for the
	 * mark and no diff from the mark lists it. Writes are counted by the
	 * era they were sent in (era_out, on librbd's thread as they finish);
	 * a mark moves to the next era once its snapshot exists and waits for
	 * the old era's writes. unsure_total counts the writes of unknown
	 * outcome (never reset), unsure_base its value when this ownership
	 * began (rbd_own.c: the writes before it were fenced): a mark is kept
	 * only while they are equal.
	 */
	pthread_mutex_t mark_lock; /* one mark at a time (proofs and shadow marks) */
	bool mark_lock_init;
	atomic_uint mark_era;
	atomic_uint era_out[2];
	atomic_uint unsure_total;
	atomic_uint unsure_base;
	/* for the reconnect (owned strings) */
	char *conf;
	char *id;
	/*
	 * Several gateways (gateway != 0). The reconnect after a blocklist
	 * replaces cluster, ioctx and image: everything else that uses them
	 * holds `handles` for reading meanwhile (a reactor only around an
	 * rbd_aio_* call), the reconnect holds it for writing only to swap
	 * them. gen counts the connections: a late result of an old one (its
	 * I/O completing as it closes) fences nothing.
	 */
	uint16_t gateway;
	uint32_t lease_ms; /* hl_origin_opts.gateway_lease_ms: written in the ownership record */
	pthread_rwlock_t handles;
	bool handles_init;
	atomic_uint gen;   /* written under handles (write) */
	atomic_bool owned; /* own_acquire succeeded; no release or fence since */
	atomic_uint writes_out;    /* gateway: writes handed to librbd, not yet finished */
	atomic_uint unsure_writes; /* gateway: writes since own_acquire whose outcome is
	                              unknown (timed out, failed): they may land later */
	/* the ownership thread's own (the own_* ops run on one thread) */
	uint64_t beat;     /* the last heartbeat we wrote */
	uint64_t done_seq; /* the last hand-over request (hotlun_request) dealt with */
	uint16_t own_gw;
	uint64_t own_epoch;
	char own_addr[128]; /* our lock owner address, as the cluster reports it */
	/* the watch on the ownership record (own_watch; rbd_own.c) */
	pthread_mutex_t own_wake_lock; /* guards own_wake, own_wake_arg */
	bool own_wake_init;
	void (*own_wake)(void *arg);
	void *own_wake_arg;
	uint64_t own_watch_handle;     /* under handles: a watch of connection own_watch_gen */
	bool own_watching;
	unsigned own_watch_gen;
	atomic_bool own_watch_lost;    /* the cluster said the watch failed: register again */
	struct own_ack {               /* notices to answer (own_wake_lock): the notifier's */
		uint64_t notify_id;    /* notify completes once every watcher answered, */
		uint64_t handle;       /* instead of lingering at the OSD for its timeout */
	} own_acks[8];
	unsigned own_nacks;
	struct own_notice *own_notices; /* own_wake_lock: notifies still out (rbd_own.c) */
	/* the owner's hot set (rbd_hotset.c; the thread that publishes, one at a time) */
	char shadow_proof[HL_ORIGIN_PROOF_MAX]; /* the last shadow mark, "" none */
	uint64_t shadow_mark_s;                 /* when it was made (CLOCK_MONOTONIC s) */
	uint64_t shadow_epoch;                  /* the ownership epoch it was made in */
	unsigned shadow_gen;                    /* ... and the connection */
	uint64_t hot_seq;                       /* publications */
	uint64_t hot_digest;                    /* of the last one written, 0: none */
	unsigned hot_digest_gen;                /* ... and its connection */
	char shadow_prev[HL_ORIGIN_PROOF_MAX];  /* the mark before shadow_proof, "" none ... */
	struct hl_hot_range *shadow_chg;        /* ... and what changed since it (owned) */
	uint32_t shadow_nchg;
	/* the record the gateways share (rbd_pr.c), NULL until pr_open; main thread sets it */
	struct rbd_pr *pr;
};

/* Per-request state, kept in io->priv (this backend is always the bottom of its stack). */
struct rbd_io {
	struct hl_origin *origin;
	struct hl_reactor *reactor;
	rbd_completion_t completion;
	void *bounce; /* compare-and-write: flat copy of compare + write data */
	ssize_t result;
	unsigned retries; /* times refused for the exclusive lock and resubmitted */
	unsigned gen;     /* rbd_origin.gen at submit */
	bool in_era;      /* a write counted in era_out[era] until librbd is done with it */
	uint8_t era;
};

_Static_assert(sizeof(struct rbd_io) <= sizeof(((struct hl_origin_io *)0)->priv),
               "rbd_io must fit in hl_origin_io.priv");

static inline struct rbd_origin *ro_of(struct hl_origin *o)
{
	return hl_origin_priv(o);
}

static inline struct rbd_io *rio_of(struct hl_origin_io *io)
{
	return (struct rbd_io *)io->priv;
}

/* Several gateways: keep the connection from being replaced (a lone gateway never replaces it). */
static inline void handles_read(struct rbd_origin *r)
{
	if (r->gateway)
		pthread_rwlock_rdlock(&r->handles);
}

static inline void handles_done(struct rbd_origin *r)
{
	if (r->gateway)
		pthread_rwlock_unlock(&r->handles);
}

/*
 * A snapshot this process made or removed (a mark): it explains a header
 * change (rbd_size_check) even when made and removed between two looks.
 */
static inline void own_snap_op(struct rbd_origin *r)
{
	atomic_fetch_add(&r->own_snap_ops, 1);
}

/* ---- rbd_proof.c ---- */
/**
 * The image's snapshots into *out (free it with origin_rbd_snaps_free),
 * grown until librbd stops saying -ERANGE. @return how many, or -errno
 * (*out NULL).
 */
int origin_rbd_snaps_list(rbd_image_t image, rbd_snap_info_t **out);
void origin_rbd_snaps_free(rbd_snap_info_t *snaps);
/**
 * Make the mark snapshot `name` (what: "mark" or "shadow mark", for the
 * log) and say its id, unless a write of unknown outcome may reach the
 * image after it: then no mark is left (-EAGAIN). Under `handles`.
 * @return 0 or -errno.
 */
int origin_rbd_mark_create(struct hl_origin *o, const char *name, const char *what, uint64_t *id);
/** The ids of the image's snapshots, sorted, into *ids (free it). @return how many or -errno. */
int origin_rbd_snap_ids(rbd_image_t image, uint64_t **ids);
/**
 * Every extent written since snapshot `name` (to the head), narrowed to the
 * exact extents inside each changed object where the cluster allows it.
 * Blocking. @return >= 0 or -errno.
 */
int origin_rbd_diff_since(rbd_image_t image, const char *name, uint64_t size,
                          hl_origin_changed_fn changed, void *arg);

/* ---- rbd_hotset.c: see hl_origin_ops.hot_publish / hot_fetch ---- */
int origin_rbd_hot_publish(struct hl_origin *o, uint32_t block_size, const struct hl_hot_ent *v,
                           uint32_t n);
int origin_rbd_hot_fetch(struct hl_origin *o, struct hl_hot_set *out);

/* ---- rbd.c ---- */

/**
 * A client of our own (r->conf, r->id) and the image opened through it:
 * the three handles, or nothing on failure. `target` names the disk in
 * errors. @return 0 or -errno.
 */
int origin_rbd_connect(struct rbd_origin *r, const char *target, bool read_only, rados_t *cluster,
                       rados_ioctx_t *ioctx, rbd_image_t *image);

/** Close what origin_rbd_connect made (any of them may be NULL). */
void origin_rbd_disconnect(rados_t cluster, rados_ioctx_t ioctx, rbd_image_t image);

/** The update watch's callback (a librbd thread; arg: the origin): queues a size check. */
void origin_rbd_watch_cb(void *arg);

/* ---- rbd_own.c ---- */

/**
 * Fence once: later I/O fails with -ESHUTDOWN (a lone gateway reports
 * HL_ORIGIN_FENCED from the service thread). Any thread, without `handles`.
 * why: -ESHUTDOWN (blocklisted) or -EROFS (the lock is elsewhere); gen: the
 * connection that saw it (several gateways: an old one's news is stale).
 */
void origin_rbd_fence(struct hl_origin *o, int why, unsigned gen);

/**
 * Take the exclusive lock and wait until librbd says it is ours, asking
 * every 250 ms for up to wait_s. @return 0 once ours, else the last error
 * (-EROFS: not ours; -ESHUTDOWN: blocklisted).
 */
int origin_rbd_lock_take(struct rbd_origin *r, int wait_s, bool retry_errors,
                         const char *waiting_for);

/** The service thread: is this client still welcome (lock, blocklist)? @return true when fenced. */
bool origin_rbd_fence_probe(struct hl_origin *o);

/** See hl_origin_ops.own_acquire .. own_request (the ownership thread). */
int origin_rbd_own_acquire(struct hl_origin *o, uint16_t gw, uint64_t epoch, bool force, char *why,
                           size_t whylen);
int origin_rbd_own_renew(struct hl_origin *o, uint16_t gw, uint64_t epoch,
                         struct hl_own_info *info);
int origin_rbd_own_release(struct hl_origin *o, uint16_t gw, uint64_t epoch);
int origin_rbd_own_peek(struct hl_origin *o, struct hl_own_info *info);
int origin_rbd_own_request(struct hl_origin *o, uint16_t gw);
int origin_rbd_own_watch(struct hl_origin *o, void (*wake)(void *arg), void *arg);
/* rbd_close_all, before the connection goes: no wake runs after this */
void origin_rbd_own_close(struct rbd_origin *r);
/*
 * origin_rbd_disconnect of a connection (rbd_close_all, the reconnect's old
 * client), after waiting up to 1.5 s for the notifies on the ownership
 * record that went out on it; those still out then are freed once it is
 * shut down (a shut down client never completes them). Without `handles`.
 */
void origin_rbd_own_disconnect(struct rbd_origin *r, rados_t cluster, rados_ioctx_t ioctx,
                               rbd_image_t image);

/*
 * Before a writable image's client goes (close, a reload's reopen, a stop):
 * writes of unknown outcome (timed out, still out) of this client are shut
 * out (blocklist, then the OSD map awaited), since the image's next client
 * is not ordered after them. rbd_own.c.
 */
void origin_rbd_close_fence(struct hl_origin *o);

/* ---- rbd_proof.c ---- */

/** See hl_origin_ops.proof_take, proof_check, proof_release and identity. */
int origin_rbd_proof_take(struct hl_origin *o, const char *tag, bool final, char *proof,
                          size_t len);
int origin_rbd_proof_check(struct hl_origin *o, const char *tag, const char *proof,
                           hl_origin_changed_fn changed, void *arg, char *why, size_t whylen);
void origin_rbd_proof_release(struct hl_origin *o, const char *tag, const char *proof);
int origin_rbd_identity(struct hl_origin *o, char *buf, size_t len);

/* ---- rbd_pr.c ---- */

/** See hl_origin_ops.pr_open .. pr_close (the record the gateways share). */
int origin_rbd_pr_open(struct hl_origin *o, uint16_t self, const uint16_t *gateways, unsigned n);
int origin_rbd_pr_start(struct hl_origin *o, hl_origin_pr_changed_fn changed, void *arg);
int origin_rbd_pr_load(struct hl_origin *o, char **text, size_t *len);
int origin_rbd_pr_commit(struct hl_origin *o, uint64_t old_seq, uint64_t new_seq, const char *text,
                         size_t len);
void origin_rbd_pr_applied(struct hl_origin *o, uint64_t cookie, uint64_t seq);
bool origin_rbd_pr_current(struct hl_origin *o, uint64_t seq);
void origin_rbd_pr_close(struct hl_origin *o);
/** pr_close, then free the record's state (origin close). */
void origin_rbd_pr_fini(struct hl_origin *o);

#endif
