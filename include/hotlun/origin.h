/*
 * origin.h - the backing store behind a disk, and the stack of origins that
 * the SCSI layer reads and writes through.
 *
 * Backends: one ops table each (file, iscsi, rbd) in an explicit list
 * (src/origin/origin.c, hl_origin_backends), opened by URI scheme with
 * hl_origin_open(); no constructor magic.
 *
 * Stacks: a disk's LU talks to ONE hl_origin, the top of a stack that the
 * daemon builds per disk from its config (src/daemon/runtime.c), bottom up:
 *
 *     counted   per-disk command counters and latency (hl_origin_count_wrap, origin/)
 *     cache     the read cache engine (hl_cache_attach, cache/engine/), if the disk has one
 *     throttle  lab budget: IOPS, bandwidth, latency (hl_origin_throttle_wrap, origin/)
 *     backend   file | iscsi | rbd (hl_origin_open)
 *
 * Every wrapper is made by hl_origin_wrap(): it copies the inner origin's
 * geometry and flags, forwards its events, and takes it over, so closing
 * the top closes the whole stack, each layer after its own close op. A
 * wrapper overrides only what it changes: submit always; proof and identity
 * ops it does not define are passed to the origin it wraps (a throttle or a
 * counter changes timing, never content). The ownership ops (own_*) are a
 * backend's alone: the ownership module calls them on the backend, which
 * the daemon keeps a pointer to (hl_origin_base finds it too).
 *
 * Threading: hl_origin_submit() is called on a reactor thread and the
 * completion runs later on that same reactor thread, never inside submit.
 * Several I/Os may be in flight on one origin from several reactors.
 */
#ifndef HOTLUN_ORIGIN_H
#define HOTLUN_ORIGIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>

struct hl_origin;
struct hl_origin_io;

enum hl_io_op {
	HL_IO_READ = 0,
	HL_IO_WRITE,
	HL_IO_FLUSH,        /* make every completed write durable */
	HL_IO_DISCARD,      /* deallocate; reads return zeroes afterwards when zeroes_after_discard */
	HL_IO_WRITE_ZEROES, /* range reads back as zeroes */
};

/*
 * Warm a cache with [offset, offset+length); no data moves (iov unused).
 * The cached origin (hotlun/cache_engine.h) reads the range from its origin
 * and admits it; origins without a cache refuse it at submit (-EINVAL),
 * which the caller treats as "nothing to warm" (PRE-FETCH still succeeds).
 * Kept out of the enum so the backends' exhaustive switches need no case.
 */
#define HL_IO_PREFETCH ((enum hl_io_op)(HL_IO_WRITE_ZEROES + 1))

/*
 * Atomically compare [offset, offset+length) with the first `length` bytes
 * of iov and, only when equal, write the next `length` bytes there (iov
 * carries 2 x length). Result -EILSEQ on a miscompare, with
 * miscompare_offset set to the offset of the first differing byte from the
 * start of the compare data. Forwarded by the iscsi origin (COMPARE AND
 * WRITE) when the SAN supports it; the file and throttle origins refuse it
 * at submit (-EOPNOTSUPP), and the SCSI layer then emulates it under its
 * range lock. Outside the enum so that the backends' exhaustive switches
 * need no case (WRITE_ZEROES + 1 is HL_IO_PREFETCH).
 */
#define HL_IO_COMPARE_AND_WRITE ((enum hl_io_op)(HL_IO_WRITE_ZEROES + 2))

/* hl_origin_io.flags */
#define HL_IO_FUA 0x1u /* write durable before completion */

/**
 * Where a READ's data came from (hl_origin_io.source): a cache sets it on
 * the request it completes; the counting wrapper files the read's latency
 * under it (docs/metrics.md).
 */
enum hl_io_source {
	HL_IO_SRC_UNCACHED = 0, /* no cache looked at it (none, pass-through, not a read) */
	HL_IO_SRC_HIT,          /* every byte from the cache */
	HL_IO_SRC_PARTIAL,      /* some bytes from the cache, the rest from the origin */
	HL_IO_SRC_MISS,         /* every byte from the origin, through the cache */
	HL_IO_SRC_N,
};

/**
 * One request. Caller-owned and caller-kept: the memory (and iov) must stay
 * valid until cb runs. Offsets and lengths are in bytes and multiples of the
 * disk's logical block size.
 */
struct hl_origin_io {
	enum hl_io_op op;
	unsigned flags;
	uint64_t offset;
	uint64_t length;
	struct iovec *iov; /* READ / WRITE only; total length == length */
	int iovcnt;
	/** READ: set by a cache before cb (enum hl_io_source); 0 (uncached) otherwise. */
	uint8_t source;
	/**
	 * A write-type request that failed: set by the backend before cb when
	 * a copy of it may still be run by the origin later (an iscsi://
	 * command out on a session that was lost and not yet reinstated). It
	 * may land until hl_origin_unfenced() says none can any more (0) or
	 * the process restarts; a later write that succeeds does not order
	 * it. false on a failure the origin answered (nothing left to run),
	 * and on one refused before it was sent (iscsi clears it first thing
	 * in submit: a wrapper may report that refusal through cb).
	 */
	bool may_land;
	/** Completion: result 0 or -errno (-EIO, -ENOSPC, ...). Runs on the submitting reactor. */
	void (*cb)(struct hl_origin_io *io, int result);
	void *arg;         /* for the caller */
	/** COMPARE_AND_WRITE: set by the backend before cb(-EILSEQ). */
	uint64_t miscompare_offset;
	/**
	 * READ, optional (NULL: the caller wants only cb): the first `bytes`
	 * bytes of the data are in iov and final, they will not change before
	 * cb (which may still report an error for the rest). An origin that
	 * supports it calls it zero or more times with growing values below
	 * length, on the submitting reactor, never inside submit and never
	 * after cb. An origin that does not simply never calls it; a wrapper
	 * that forwards the request forwards it (or drops it). Lets a transport
	 * send the leading data of a big read while the rest is still read.
	 */
	void (*ready)(struct hl_origin_io *io, uint64_t bytes);
	/* Backend-private scratch, so backends need no allocation per I/O. */
	uint64_t priv[9];
};

/**
 * Fill io (zeroed first) as a copy of the request fields of outer (op,
 * flags, offset, length, iov) with its own completion: what a wrapper sends
 * to the origin it wraps. outer's iov stays outer's (valid until its cb).
 */
static inline void hl_origin_io_forward(struct hl_origin_io *io, const struct hl_origin_io *outer,
                                        void (*cb)(struct hl_origin_io *io, int result),
                                        void *arg)
{
	memset(io, 0, sizeof(*io));
	io->op = outer->op;
	io->flags = outer->flags;
	io->offset = outer->offset;
	io->length = outer->length;
	io->iov = outer->iov;
	io->iovcnt = outer->iovcnt;
	io->cb = cb;
	io->arg = arg;
}

/** Options from the [disk] section that backends may use. */
struct hl_origin_opts {
	bool read_only;
	bool direct;       /* file: O_DIRECT (default off: the page cache is the origin's cache) */
	uint32_t block_size; /* the disk's logical block size, 0 = unknown; iscsi: open fails
	                        (-EINVAL) unless it is a multiple of the SAN's */
	const char *rbd_conf;  /* rbd: ceph.conf path (NULL: /etc/ceph/ceph.conf) */
	const char *rbd_id;    /* rbd: cephx user id without "client." (NULL: admin) */
	bool eof_error;        /* file: a read that reaches EOF fails (-EIO) instead of
	                          reading zeroes past it (a cache device that shrank) */
	const char *chap_user;   /* iscsi: CHAP toward the SAN when the URL has no user%secret@ */
	const char *chap_secret; /* (open copies them; NULL: none) */
	const char *mutual_user; /* iscsi: mutual CHAP: the SAN must answer with these */
	const char *mutual_secret;
	bool exclusive;        /* file: a regular file is locked (flock) like a writable
	                          block device is (O_EXCL): -EBUSY while another process
	                          holds it, after waiting as for a busy block device */
	uint16_t gateway;      /* [global] gateway: one of several gateways serving this
	                          origin. Ownership (the own_* ops) is then driven by the
	                          ownership module (hotlun/owner.h): open takes nothing
	                          (no lock, no reservation) and I/O other than reads for
	                          proofs happens only while the origin is ours. 0: a lone
	                          gateway (open takes what it needs, as always) */
	uint32_t gateway_lease_ms; /* with gateway: this gateway's lease ([global]
	                          gateway_lease_ms), published where the origin can (rbd:
	                          the ownership record) so that a taker waits the owner's
	                          lease, not only its own (hl_own_info.lease_ms) */
	const char *disk;      /* iscsi: the disk's name in the config and ... */
	const char *state_dir; /* ... where its ISID slots are kept: with both, each session's
	                          ISID is the same at every start, so a restart reinstates
	                          (fences) what a dead run left at the SAN (iscsi_isid.c).
	                          NULL: random ISIDs per open */
	bool sole_writer;      /* [disk] exclusive = yes: the admin declares that nobody
	                          else writes the origin while hotlund is down, so an
	                          origin that cannot prove it unchanged is trusted
	                          anyway (hl_origin_proof_take) */
};

/** What an origin reports between I/Os, to the layer that listens (hl_origin_listen). */
enum hl_origin_event {
	/** o->size changed (it already holds the new size; the listener gets the old one). */
	HL_ORIGIN_RESIZED = 1,
	/**
	 * The origin shut this gateway out (Ceph: blocklisted, exclusive lock
	 * lost): other clients may now write it, and its I/O fails with
	 * -ESHUTDOWN until it is reopened. Reported once.
	 */
	HL_ORIGIN_FENCED,
	/**
	 * The origin may have changed anywhere in a way the backend cannot
	 * bound (rbd: header changes it cannot explain, which may hide a
	 * shrink and a grow back): a cache drops every block of the disk.
	 * The size is unchanged (or came with its own HL_ORIGIN_RESIZED).
	 */
	HL_ORIGIN_CHANGED,
};

/**
 * An origin event listener. Runs on a thread of the backend (never inside
 * submit, never on a reactor that serves connections), one event at a time
 * per origin: it must be thread-safe, take only short locks and never wait
 * for I/O. old_size is the size before HL_ORIGIN_RESIZED (else o->size).
 */
typedef void (*hl_origin_event_fn)(void *arg, struct hl_origin *o, enum hl_origin_event ev,
                                   uint64_t old_size);

/*
 * Warm restart proofs (docs/cache-engine.md, "Proving the origin unchanged").
 * A cache keeps blocks across a stop only if the origin can show that
 * nobody else wrote it meanwhile. While running, and last at close, the
 * cache asks the origin for a proof (a short token it stores durably with
 * its metadata); at the next start it hands the token back and the origin
 * says what may have changed since: nothing, some byte ranges, or "cannot
 * tell" (then every cached block of the disk is dropped).
 */

/** Room for a proof token, terminating NUL included. */
#define HL_ORIGIN_PROOF_MAX 192

/** Room for the reason hl_origin_proof_check() gives. */
#define HL_ORIGIN_WHY_MAX 96

/** A byte range that may have changed (hl_origin_proof_check). */
typedef void (*hl_origin_changed_fn)(void *arg, uint64_t offset, uint64_t length);

/*
 * Ownership among gateways (docs/gateways.md). With several gateways on one
 * origin, at most one owns it: only the owner writes it and serves cached
 * data. The cluster behind the origin decides and enforces it (rbd: the
 * image's exclusive lock, a break blocklists the old owner; a SAN LUN: a
 * SCSI-3 persistent reservation, a takeover preempts the old owner's key).
 * The ownership module (hotlun/owner.h) drives these ops from its own
 * thread; they may block on the cluster (a few seconds at most).
 */

/** What one gateway can see of a disk's ownership (own_peek, own_renew). */
struct hl_own_info {
	uint16_t owner;     /* gateway id of the owner, 0: none or unknown */
	uint64_t epoch;     /* the owner's epoch (each acquisition counts one up), 0: unknown */
	uint64_t beat;      /* the owner's heartbeat: changes while it is alive and renews */
	bool has_beat;      /* the owner publishes a heartbeat (rbd: always; SAN: once the
	                       standby saw the counter in the holder's key move); without
	                       one a standby never takes over on silence, only on request */
	bool released;      /* the last owner handed the disk back (planned): take it */
	bool fence;         /* (own_peek, with released) it handed it back with writes whose
	                       outcome it does not know (timed out, in flight), or the
	                       cluster cannot tell a release from a lock that vanished
	                       under a live owner (a SAN's reservation cleared or lost):
	                       take it only by force, which fences the old owner first
	                       and waits out its lease */
	uint16_t requester; /* (own_renew) a gateway that asked for the disk, 0: none; our
	                       own id: another process running with our id asks */
	bool refused;       /* (own_peek) this gateway asked for the disk (own_request) and
	                       the owner refused (own_refuse): do not take it by force */
	bool this_run;      /* the owner is this very process (its run's key, its client),
	                       not only its gateway id: owner == our id without it is
	                       another process with our id (an earlier run, or a duplicate) */
	uint32_t lease_ms;  /* the owner's lease as it published it (rbd: in its record),
	                       0: unknown (a SAN, an older owner): a taker assumes its own */
};

/*
 * A record every gateway of an origin shares, kept by the cluster behind it
 * (rbd: a RADOS object beside the image): the initiators' persistent
 * reservations of the disk (hotlun/scsi.h, hl_lu_pr_store; the daemon
 * connects the two). The backend knows nothing of SCSI: it keeps an opaque
 * text under a sequence number, replaces it only from the sequence number
 * the writer read, and tells every gateway of each replacement.
 */

/**
 * The shared record may have changed (pr_start): a notice of a commit
 * (cookie != 0, to be answered through pr_applied) or the backend's own
 * periodic check (cookie 0). Runs on a thread of the backend; may block
 * (it reads the record back with pr_load).
 */
typedef void (*hl_origin_pr_changed_fn)(void *arg, uint64_t cookie);

/*
 * The owner's hot set, for the standbys' shadow (docs/gateways.md, "Warm
 * standby"): which cache blocks the owner holds and how hot each is, never
 * data, kept by the cluster behind the origin (rbd: a RADOS object beside
 * the image, written with the owner's own client, so a fenced owner cannot
 * write it) with a mark the owner made (a proof token, as proof_take
 * gives) that standbys prove their shadow against.
 */

/** One block of a hot set. */
struct hl_hot_ent {
	uint64_t block; /* number, in units of hl_hot_set.block_size */
	uint32_t freq;  /* the owner's frequency score: higher is hotter */
};

/** A byte range of an origin. */
struct hl_hot_range {
	uint64_t off, len;
};

/**
 * Byte ranges as an hl_origin_changed_fn reports them (hl_range_list_add):
 * a range that starts where the last one ends extends it. `over` is set
 * once more than `max` entries (0: no limit) would be needed or memory ran
 * out; the list then no longer says everything that changed. Free v.
 */
struct hl_range_list {
	struct hl_hot_range *v;
	size_t n, cap, max;
	bool over;
};

/** An hl_origin_changed_fn: add [off, off + len) to the hl_range_list arg. */
void hl_range_list_add(void *arg, uint64_t off, uint64_t len);

/** A hot set as a standby reads it (hl_origin_hot_fetch); free v and chg with free(). */
struct hl_hot_set {
	uint16_t owner;    /* gateway id of the publisher */
	uint64_t seq;      /* counts the owner's publications */
	uint64_t age_ms;   /* how long ago it was written (the object's mtime) */
	uint32_t block_size; /* bytes per block number */
	char mark[HL_ORIGIN_PROOF_MAX]; /* a proof token of a mark the owner made before
	                                  this publication, "" none: every read made after
	                                  the publication was read is newer than the mark */
	uint32_t n;        /* entries, hottest first */
	struct hl_hot_ent *v;
	/*
	 * The owner's own diff: prev (a proof token, "" none) is the mark
	 * before `mark`, and chg[0..nchg-1] every range written since prev
	 * up to after `mark` was made. A standby whose proof is prev moves to
	 * `mark` by dropping chg instead of diffing the image itself.
	 */
	char prev[HL_ORIGIN_PROOF_MAX];
	uint32_t nchg;
	struct hl_hot_range *chg;
};

/** A backend. Members are mandatory unless marked optional. */
struct hl_origin_ops {
	const char *name;   /* "file" */
	const char *scheme; /* URI prefix it claims, e.g. "file:"; NULL for a wrapper */
	size_t priv_size;   /* bytes of private state allocated behind struct hl_origin */
	/**
	 * Open `target` (the URI with the scheme removed). Sets o->size and,
	 * when known, o->phys_block_size, o->can_discard, o->zeroes_after_discard.
	 * Runs on the main thread before reactors start. @return 0 or -errno.
	 * NULL for a wrapper (made by hl_origin_wrap, never by URI).
	 */
	int (*open)(struct hl_origin *o, const char *target, const struct hl_origin_opts *opts);
	/**
	 * Release everything; no I/O is in flight. A wrapper's close must not
	 * close its inner origin: hl_origin_close() does that right after,
	 * unless the close set o->inner to NULL (it keeps the inner origin:
	 * a thread it could not stop may still use it).
	 */
	void (*close)(struct hl_origin *o);
	/**
	 * Optional. Called by hl_origin_close() on every layer before any layer
	 * closes: end each I/O the origin still holds (against the contract of
	 * close) with its one callback, on its reactor, while the wrappers its
	 * callbacks pass through are still open; refuse submits from then on.
	 * The iscsi origin uses it; its close does the same if it was skipped.
	 */
	void (*shut)(struct hl_origin *o);
	/** Asynchronous submit; see struct hl_origin_io. @return 0 (cb runs once) or -errno (cb never runs). */
	int (*submit)(struct hl_origin *o, struct hl_origin_io *io);
	/**
	 * Optional (missing: the origin can prove nothing; in a wrapper: its
	 * inner origin's). Record the origin's
	 * state now, for proof_check at a later start. `tag` names this
	 * gateway's cache and disk ([A-Za-z0-9._-], < 64 bytes): a backend that
	 * keeps a mark inside the origin (an rbd snapshot) names it from the
	 * tag. `final`: the last proof before close; no I/O is in flight and
	 * every write completed; the backend makes its writes durable and may
	 * wait (a few seconds at most) for an exact proof. Writes that complete
	 * after the proof is taken must make proof_check report them (or
	 * "cannot tell"). On 0 `proof` holds a token without blanks, which the
	 * caller stores durably before it calls proof_release.
	 * Blocking: main or metadata thread, never a reactor.
	 * @return 0; -EAGAIN: no exact proof now (keep the previous one, try
	 * again later); -EOPNOTSUPP: this origin never proves anything.
	 */
	int (*proof_take)(struct hl_origin *o, const char *tag, bool final, char *proof,
	                  size_t len);
	/**
	 * Optional. At start, before any cached block is trusted: calls
	 * changed(arg, ...) for every byte range that may have changed since
	 * `proof` (a token proof_take made) and returns 0 (the rest is proven
	 * unchanged), or returns -ESTALE (cannot tell: drop everything).
	 * `why` gets a short reason either way. Blocking; main thread.
	 */
	int (*proof_check)(struct hl_origin *o, const char *tag, const char *proof,
	                   hl_origin_changed_fn changed, void *arg, char *why, size_t whylen);
	/**
	 * Optional. `proof` is stored durably now: forget marks that only older
	 * proofs needed (rbd: remove their snapshots). Blocking.
	 */
	void (*proof_release)(struct hl_origin *o, const char *tag, const char *proof);
	/**
	 * Optional (missing: a request never completes with may_land; in a
	 * wrapper: its inner origin's). How many failed requests reported
	 * with may_land the origin cannot rule out yet: 0 once no copy of
	 * any of them can run any more (iscsi: each one's session logged in
	 * again, a reinstatement that ends the old session's tasks at the
	 * SAN). Any thread, never blocks.
	 */
	uint64_t (*unfenced)(struct hl_origin *o);
	/**
	 * Optional. A text that names the origin's data the same way on every
	 * gateway that reaches it, and never names other data (rbd: cluster
	 * fsid, pool id, image id, snapshot); the daemon derives the LU's
	 * identity (VPD 80h/83h) from it, so gateways of one image agree.
	 * Main thread, after open. @return 0 or -EOPNOTSUPP.
	 */
	int (*identity)(struct hl_origin *o, char *buf, size_t len);
	/**
	 * Optional. A text that names the data this origin reads, read from
	 * the origin itself at open, so that two spellings of one origin get
	 * the same text and two origins never do (file: device and inode;
	 * iscsi: the LUN's VPD 83h logical unit designator; rbd: identity
	 * above, which stands in when a stack has no data_id). Unlike
	 * identity it never feeds the LU's own identity. The daemon refuses
	 * a second disk on one origin when a write through one would leave a
	 * cache of the other stale, and "exclusive = yes" proofs carry it
	 * when *lasting is set: the text names the same data after a restart
	 * (a SAN's designator does; a file's device number does not on NFS or
	 * FUSE, which number their devices at mount). Any thread, no I/O.
	 * @return 0 or -EOPNOTSUPP (the origin has none).
	 */
	int (*data_id)(struct hl_origin *o, char *buf, size_t len, bool *lasting);

	/* ---- ownership among gateways (all optional, all or none) ---- */
	/**
	 * Become the owner as gateway `gw` with `epoch`. Without force: only
	 * when nobody owns the origin (free, or released). With force: take it
	 * from a live-looking owner too, fencing that owner through the cluster
	 * (blocklist, PR preempt) so that its later writes are refused. On 0
	 * the cluster refuses writes from every other gateway. `why` gets a
	 * short reason on failure. @return 0, -EBUSY (owned, no force),
	 * -ESHUTDOWN (this gateway is fenced itself), or -errno.
	 */
	int (*own_acquire)(struct hl_origin *o, uint16_t gw, uint64_t epoch, bool force, char *why,
	                   size_t whylen);
	/**
	 * The owner, every lease/4: prove through a round trip to the cluster
	 * that the origin is still ours (and publish the heartbeat); fills info
	 * (requester: a peer's request to hand over). @return 0, or -ESHUTDOWN:
	 * fenced, only with proof from the cluster (this client shut out, or
	 * the origin held by another), or -errno (cluster unreachable, or the
	 * lock's state unsure: the lease runs out unless a later renew succeeds).
	 */
	int (*own_renew)(struct hl_origin *o, uint16_t gw, uint64_t epoch, struct hl_own_info *info);
	/**
	 * Hand the origin over: every write that completed is durable; after
	 * this another gateway may take it (info.released). A backend that
	 * cannot rule out a write of this owner landing later (it timed out,
	 * or is still out) either fences this owner now or makes the taker
	 * fence it first (info.fence), so that no such write lands after the
	 * next owner's writes.
	 */
	int (*own_release)(struct hl_origin *o, uint16_t gw, uint64_t epoch);
	/** A standby: who owns the origin now. @return 0 or -errno. */
	int (*own_peek)(struct hl_origin *o, struct hl_own_info *info);
	/**
	 * A standby asks the owner to hand over (it sees the request at its
	 * next own_renew). Optional: without it a request is a forced acquire.
	 */
	int (*own_request)(struct hl_origin *o, uint16_t gw);
	/**
	 * Optional. Call wake(arg) whenever another gateway changes who owns
	 * the origin or asks for it (a release, an acquire, a request), as the
	 * cluster tells it (rbd: a notify on the ownership record), so that a
	 * standby learns a release, and an owner a request, at once rather
	 * than at its next look. wake runs on a thread of the cluster library:
	 * it must not block nor call into the origin. wake NULL: no wake runs
	 * after this returns. Best effort: a lost notice only costs time.
	 * @return 0 or -errno.
	 */
	int (*own_watch)(struct hl_origin *o, void (*wake)(void *arg), void *arg);

	/* ---- the record the gateways share (all optional, all or none; see above) ---- */
	/**
	 * Find (or create, empty, sequence number 0) the shared record of this
	 * origin, as gateway `self` of `gateways` (every gateway's id, self
	 * included: a commit waits for each of them). Main thread, after open.
	 * @return 0, -EOPNOTSUPP (not shared between gateways), or -errno.
	 */
	int (*pr_open)(struct hl_origin *o, uint16_t self, const uint16_t *gateways, unsigned n);
	/**
	 * Start telling changed(arg, ...) of changes: every commit by any
	 * gateway, and what the periodic check finds. @return 0 or -errno.
	 */
	int (*pr_start)(struct hl_origin *o, hl_origin_pr_changed_fn changed, void *arg);
	/** See hl_lu_pr_store.load. Blocking. */
	int (*pr_load)(struct hl_origin *o, char **text, size_t *len);
	/**
	 * See hl_lu_pr_store.commit: replace the record (sequence number
	 * old_seq -> new_seq) atomically, then notify every gateway and wait
	 * for their answers; for a gateway that does not answer, wait until
	 * its pr_current can no longer vouch for an older copy. Blocking.
	 */
	int (*pr_commit)(struct hl_origin *o, uint64_t old_seq, uint64_t new_seq, const char *text,
	                 size_t len);
	/** See hl_lu_pr_store.applied: answers the notice of cookie if seq covers it. */
	void (*pr_applied)(struct hl_origin *o, uint64_t cookie, uint64_t seq);
	/**
	 * See hl_lu_pr_store.current: did a check sent less than the
	 * backend's bound ago find the record at seq or older? Must not block.
	 */
	bool (*pr_current)(struct hl_origin *o, uint64_t seq);
	/**
	 * Stop telling of changes (no changed() runs after this returns);
	 * later pr_load and pr_commit fail (-ESHUTDOWN). The origin's close
	 * frees what is left. Main thread.
	 */
	void (*pr_close)(struct hl_origin *o);
	/**
	 * Optional. The owner `gw` refuses the request of gateway `requester`
	 * (it moved less than the hold ago, or it is handing over or taking
	 * over right now): the request is withdrawn, and the asker's own_peek
	 * says info.refused, so that an asker which cannot tell a slow owner
	 * from a dead one (no heartbeat: a SAN owner without it) does not take the disk by
	 * force. Without it a request stays pending until the owner honours it
	 * (rbd: the asker never forces on a live heartbeat anyway).
	 */
	int (*own_refuse)(struct hl_origin *o, uint16_t gw, uint16_t requester);

	/* ---- the owner's hot set (both optional, both or none; see above) ---- */
	/**
	 * The owner: publish v[0..n-1] (hottest first, blocks of block_size
	 * bytes), replacing the last publication, and make a new mark when the
	 * last is older than the backend's period. Only while the origin is
	 * ours. Blocking (a round trip to the cluster); not a reactor that
	 * serves connections. @return 0, -EAGAIN (not ours now), -errno.
	 */
	int (*hot_publish)(struct hl_origin *o, uint32_t block_size, const struct hl_hot_ent *v,
	                   uint32_t n);
	/**
	 * A standby: read the owner's last publication into *out (out->v
	 * allocated, the caller frees it). Blocking. @return 0, -ENOENT (none
	 * yet), -errno.
	 */
	int (*hot_fetch)(struct hl_origin *o, struct hl_hot_set *out);
};

struct hl_origin {
	const struct hl_origin_ops *ops;
	char *uri;                  /* as configured, secret masked (hl_uri_redact); owned */
	uint64_t size;              /* bytes */
	uint32_t phys_block_size;   /* hint, 0 when unknown */
	bool read_only;
	bool can_discard;
	bool zeroes_after_discard;
	bool sole_writer;           /* hl_origin_opts.sole_writer */
	bool immutable;             /* its data cannot change while it is open (rbd: a snapshot):
	                               several gateways may all serve it, without ownership */
	struct hl_origin *inner;    /* a wrapper: the origin it wraps (owned); a backend: NULL */
	/* the one listener of this origin's events (hl_origin_listen); atomics */
	hl_origin_event_fn listener;
	void *listener_arg;
	int telling; /* calls of the listener under way (atomic): hl_origin_close waits for them */
	/* backend private state follows (ops->priv_size bytes) */
	_Alignas(16) unsigned char priv[];
};

/** Backend private state, typed by the backend's own accessor. */
static inline void *hl_origin_priv(struct hl_origin *o)
{
	return o->priv;
}

/**
 * Find the backend for `uri` by scheme and open it. A bare path (no scheme)
 * is taken as "file:". @return 0 or -errno (-ENOENT, -EPROTONOSUPPORT for an
 * unknown scheme, ...). *out is owned by the caller; free with hl_origin_close().
 */
int hl_origin_open(const char *uri, const struct hl_origin_opts *opts, struct hl_origin **out);

/**
 * Close the backend and free o (NULL is harmless). No I/O may be in flight.
 * First every layer of the stack stops listening and any call of a
 * listener under way returns (an event's listener may run long: the
 * cache's drops in chunks let its lock go), so no event handler still
 * runs on a layer, or reaches one above, once it is freed. Never call it
 * from a listener of the same stack.
 */
void hl_origin_close(struct hl_origin *o);

/** See hl_origin_ops.submit. */
static inline int hl_origin_submit(struct hl_origin *o, struct hl_origin_io *io)
{
	return o->ops->submit(o, io);
}

/**
 * See hl_origin_ops.proof_take. An origin that cannot prove anything
 * (no proof_take, or -EOPNOTSUPP) still gets a proof when the admin
 * declared it sole_writer ("excl:SIZE"). @return 0, -EAGAIN, -EOPNOTSUPP.
 */
int hl_origin_proof_take(struct hl_origin *o, const char *tag, bool final, char *proof,
                         size_t len);

/**
 * See hl_origin_ops.proof_check; also checks the "excl:" proofs of
 * hl_origin_proof_take (still sole_writer, same size). A NULL or empty
 * proof, or a backend without proof_check, gives -ESTALE. `why` is
 * always set. @return 0 or -ESTALE.
 */
int hl_origin_proof_check(struct hl_origin *o, const char *tag, const char *proof,
                          hl_origin_changed_fn changed, void *arg, char *why, size_t whylen);

/**
 * See hl_origin_ops.unfenced: failed requests of o's stack reported with
 * may_land that may still run. A stack without the op never sets may_land:
 * 0. Any thread.
 */
uint64_t hl_origin_unfenced(struct hl_origin *o);

/** See hl_origin_ops.identity. @return 0 or -EOPNOTSUPP (none, or it does not fit). */
int hl_origin_identity(struct hl_origin *o, char *buf, size_t len);

/**
 * The identity o's "exclusive = yes" proofs carry (excl:SIZE:IDENT, from a
 * lasting data_id), so that a cache can find its proofs of o's data under
 * another URL (hl_cache_disown). Any thread. @return 0 or -EOPNOTSUPP (none).
 */
int hl_origin_excl_ident(struct hl_origin *o, char *buf, size_t len);

/** Is proof (any token, or NULL) an "excl:SIZE:IDENT" proof of ident (hl_origin_excl_ident)? */
bool hl_origin_proof_names(const char *proof, const char *ident);

/** Room for hl_origin_data_id's and hl_origin_alias_key's texts, terminating NUL included. */
#define HL_ORIGIN_ID_MAX 512

/**
 * See hl_origin_ops.data_id: the first layer of o's stack with data_id,
 * else with identity (lasting). lasting may be NULL. @return 0 or
 * -EOPNOTSUPP (none, or it does not fit).
 */
int hl_origin_data_id(struct hl_origin *o, char *buf, size_t len, bool *lasting);

/**
 * What an origin URI names, from its text alone (no login, no cluster): the
 * config-time half of the alias check (docs/cache-engine.md, "Disk names,
 * LUN ids and origin identity"). Two URIs get the same key when they are
 * spellings of one origin that the text shows: a file by device and inode
 * (a block device by its number; by its path when it does not exist); an
 * iscsi:// LUN by portal (host in lower case, an IPv6 address in one form,
 * port 3260 when absent), target name (case-insensitive) and LUN, without
 * credentials or query options; an rbd image by pool, image and snapshot.
 * A URI the backends cannot parse gets its text. @return 0, or
 * -ENAMETOOLONG when the key does not fit in len.
 */
int hl_origin_alias_key(const char *uri, char *buf, size_t len);

/** See hl_origin_ops.hot_publish. @return -EOPNOTSUPP when no layer has it. */
int hl_origin_hot_publish(struct hl_origin *o, uint32_t block_size, const struct hl_hot_ent *v,
                          uint32_t n);

/** See hl_origin_ops.hot_fetch. @return -EOPNOTSUPP when no layer has it. */
int hl_origin_hot_fetch(struct hl_origin *o, struct hl_hot_set *out);

/** Whether some layer of o's stack publishes hot sets (an rbd origin with gateways). */
bool hl_origin_has_hot_set(struct hl_origin *o);

/** See hl_origin_ops.proof_release (nothing when the backend has none). */
void hl_origin_proof_release(struct hl_origin *o, const char *tag, const char *proof);

/**
 * Make fn(arg, ...) the listener of o's events (NULL: none), replacing any
 * earlier one. The layer directly above o registers (the LU, or a wrapper
 * that forwards). Call before I/O starts or while no event can be delivered
 * (an event raised while it changes may reach either listener). Any thread.
 */
void hl_origin_listen(struct hl_origin *o, hl_origin_event_fn fn, void *arg);

/**
 * For backends: o's size is now new_size (stored atomically) or o was
 * fenced; tell the listener, if any. Runs the listener on the calling thread,
 * so call it from the backend's own service thread (see hl_origin_event_fn).
 * A resize to the current size reports nothing.
 */
void hl_origin_notify(struct hl_origin *o, enum hl_origin_event ev, uint64_t new_size);

/**
 * For wrappers: listen to inner and pass each event up to outer, copying
 * inner's new size into outer first (what hl_origin_wrap sets up). outer
 * must outlive the forwarding (it is closed with inner).
 */
void hl_origin_forward_events(struct hl_origin *inner, struct hl_origin *outer);

/**
 * Make a wrapper around `inner`, the one way a stack grows (see the head
 * comment). The wrapper gets ops->priv_size zeroed bytes of private state
 * (hl_origin_priv), the uri "LABEL:<inner's uri>" (label NULL: inner's
 * uri), inner's size, phys_block_size, read_only, can_discard,
 * zeroes_after_discard, sole_writer and immutable, and inner's events (a
 * wrapper with size logic of its own replaces the forwarding with
 * hl_origin_listen on inner). On 0 the wrapper owns inner:
 * hl_origin_close(*out) runs ops->close, then closes inner. On error the caller keeps inner.
 * Main thread, before I/O reaches the wrapper. @return 0, -EINVAL or -ENOMEM.
 */
int hl_origin_wrap(struct hl_origin *inner, const struct hl_origin_ops *ops, const char *label,
                   struct hl_origin **out);

/** The backend at the bottom of o's stack (o itself for a backend). */
static inline struct hl_origin *hl_origin_base(struct hl_origin *o)
{
	while (o->inner)
		o = o->inner;
	return o;
}

/**
 * Wrap `inner` in a throttle that models a slow SAN: at most `iops` requests
 * and `mbps` MB/s (0 = unlimited each), each completing at least
 * `latency_ms` after submission. The wrapper takes ownership of inner (closing
 * the wrapper closes it). @return 0 or -errno.
 *
 * Details: MB is 10^6 bytes and counts READ/WRITE payload only; FLUSH,
 * DISCARD and WRITE_ZEROES count as one request each. Budgets are global to
 * the wrapper (all reactors share them); requests start in arrival order and
 * wait on timers of the submitting reactor, so submit must run on a reactor
 * thread (else -EINVAL). On error the caller keeps inner.
 */
int hl_origin_throttle_wrap(struct hl_origin *inner, uint32_t iops, uint32_t mbps,
			    uint32_t latency_ms, struct hl_origin **out);

#define HL_ORIGIN_LAT_BUCKETS 24 /* bucket i: latency < 2^i microseconds (last: the rest) */

/** The latency bucket of a request that took ns nanoseconds (see HL_ORIGIN_LAT_BUCKETS). */
static inline unsigned hl_origin_lat_bucket(uint64_t ns)
{
	uint64_t us = ns / 1000;
	/* the bit length of us: one instruction on the I/O path, not a loop */
	unsigned b = us ? 64u - (unsigned)__builtin_clzll(us) : 0;

	return b < HL_ORIGIN_LAT_BUCKETS - 1 ? b : HL_ORIGIN_LAT_BUCKETS - 1;
}

/** The live counters of one counting wrapper (opaque; hl_origin_counters_read). */
struct hl_origin_stats;

/**
 * Block commands of one disk as the layer above the counting wrapper
 * issued them (hl_origin_count_wrap): a snapshot summed over the threads
 * that count (hl_origin_counters_read). Counts and bytes are of completed
 * commands; a failed read or write counts in *_cmds and errors, not bytes.
 */
struct hl_origin_counters {
	uint64_t read_cmds, write_cmds, other_cmds;
	uint64_t read_bytes, write_bytes;
	uint64_t errors;
	uint64_t read_lat[HL_ORIGIN_LAT_BUCKETS];  /* every read: the sum of read_src_lat */
	uint64_t write_lat[HL_ORIGIN_LAT_BUCKETS];
	/* reads by where their data came from (enum hl_io_source) */
	uint64_t read_src_lat[HL_IO_SRC_N][HL_ORIGIN_LAT_BUCKETS];
	uint64_t read_src_ns[HL_IO_SRC_N]; /* their summed latency, nanoseconds */
	uint64_t read_ns, write_ns;        /* summed latency of every read, of every write */
	bool timed;                        /* latency recorded (off: HOTLUN_COUNT_NO_LATENCY) */
};

/**
 * Put a counting wrapper on `inner` (which it takes, as hl_origin_wrap):
 * the top of a disk's stack, right under the LU, so it sees every block
 * command for the disk (hits and misses alike) and times it. Each thread
 * counts into its own shard (no shared atomics on the I/O path); readers
 * sum them. *stats lives as long as the wrapper. The environment variable
 * HOTLUN_COUNT_NO_LATENCY=1 (for cost measurements, docs/benchmarks.md)
 * turns the clock and the histograms off. On error the caller keeps inner.
 * @return 0 or -ENOMEM.
 */
int hl_origin_count_wrap(struct hl_origin *inner, struct hl_origin **out,
                         struct hl_origin_stats **stats);

/**
 * A snapshot of s, summed over its shards. Each counter is read atomically,
 * not all at one instant: counters of commands completing meanwhile may
 * differ by those commands. Any thread.
 */
void hl_origin_counters_read(const struct hl_origin_stats *s, struct hl_origin_counters *out);

/** The explicit list of compiled-in backends, NULL-terminated (for --version and errors). */
extern const struct hl_origin_ops *const hl_origin_backends[];

#endif
