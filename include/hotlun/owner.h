/*
 * owner.h - which gateway owns a disk (docs/gateways.md).
 *
 * With several gateways serving one origin ([global] gateway/gateways),
 * each disk has an ownership object: a thread that asks the origin's
 * cluster (hl_origin_ops.own_*) whether this gateway owns the disk, keeps
 * the ownership alive with a lease, takes it over when the owner is gone
 * or hands it over on request, and maps all of that to the ALUA states the
 * LU reports (hl_lu_access). Nothing here decides ownership by itself: the
 * cluster (rbd exclusive lock + blocklist, SCSI-3 PR on a SAN) does.
 *
 * Rules (docs/gateways.md, "Rules"):
 *  - media commands pass only while this gateway owns the disk and its
 *    lease runs (the last successful renew was sent less than lease_ms ago);
 *  - a standby takes the disk (a) when the owner released it, (b) when the
 *    owner's heartbeat (rbd: an object; SAN: a counter in its reservation
 *    key) stopped for dead_ms (forced: the cluster fences the
 *    old owner), then serves only lease_ms + a margin after the fence, or
 *    (c) on SET TARGET PORT GROUPS or hotlunctl, by asking the owner;
 *  - I/O to a standby never moves ownership, and a request-driven move is
 *    refused for hold_ms after the last move (no ping-pong);
 *  - on gaining the disk the cache is made coherent first (hooks.gained:
 *    the origin's diff since the last proof, or cold).
 */
#ifndef HOTLUN_OWNER_H
#define HOTLUN_OWNER_H

#include <stdbool.h>
#include <stdint.h>

#include "hotlun/origin.h"
#include "hotlun/scsi.h"

struct hl_owner;

/* defaults (docs/gateways.md: the bound on a split brain) */
#define HL_OWNER_LEASE_MS 2000 /* an owner serves this long after its last renew was sent */
#define HL_OWNER_DEAD_MS  4000 /* a standby waits this long for a silent owner's heartbeat */
#define HL_OWNER_HOLD_MS  10000 /* a requested move is refused this long after the last move */

/** What the ownership object asks the layers around it (all run on its thread, may block). */
struct hl_owner_hooks {
	/**
	 * About to serve as owner: drop what the cache must not trust (the
	 * origin's changes since the last proof, or everything). @return 0, or
	 * -errno to give the disk back.
	 */
	int (*gained)(void *arg);
	/**
	 * About to hand the disk over: no media command is in flight; record
	 * a proof (the mark the next gain diffs against).
	 */
	void (*releasing)(void *arg);
	/**
	 * The disk is not ours any more (handed over, or fenced): until the
	 * next gained, the cache must record no proof of it (the origin
	 * changes under it; a proof taken then would vouch for blocks that
	 * are stale by the time it is ours again). Also called at create.
	 */
	void (*lost)(void *arg);
	void *arg;
};

struct hl_owner_config {
	const char *disk;          /* name, for logs and stats (copied) */
	uint16_t gateway;          /* this gateway's id (its target port group) */
	const uint16_t *gateways;  /* every gateway's id, sorted (copied) */
	unsigned n_gateways;
	unsigned lease_ms, dead_ms, hold_ms; /* 0: the defaults above */
};

/** The state hotlunctl and stats show. */
struct hl_owner_status {
	const char *state;         /* "owner", "standby", "acquiring", "releasing", "fenced" */
	enum hl_alua_state alua;   /* this gateway's group for the disk */
	uint16_t owner;            /* the owner's gateway id as last seen, 0: none known */
	uint64_t epoch;            /* the owner's epoch as last seen */
	uint64_t transitions;      /* times this gateway gained or lost the disk */
	uint64_t takeovers;        /* of those: forced takeovers of a silent owner */
	int64_t lease_left_ms;     /* owner: time left on the lease (negative: expired) */
	char last[96];             /* the last transition and why */
	char problem[112];         /* "" or what keeps this gateway from doing its part right
	                              now (it cannot see the owner, a release failed, another
	                              process runs with its id): also logged, at WARN or ERR */
};

/**
 * Create the ownership object for a disk served as lu over `backend` (the
 * origin with the own_* ops; the LU's origin may wrap it). Registers itself
 * as lu's access provider. Starts in standby; hl_owner_start begins.
 * @return 0, -EOPNOTSUPP (the backend cannot share ownership: a file),
 * or -errno.
 */
int hl_owner_create(const struct hl_owner_config *cfg, struct hl_origin *backend,
                    struct hl_lu *lu, const struct hl_owner_hooks *hooks, struct hl_owner **out);

/** Start the thread (after the LU is in its target's map). */
int hl_owner_start(struct hl_owner *ow);

/**
 * Ask for the disk (hotlunctl, STPG): @return 0 (asked), -EALREADY (ours),
 * -EBUSY (refused by the hold rule).
 */
int hl_owner_request(struct hl_owner *ow);

/**
 * Planned handover: stop serving (TRANSITIONING), wait for the commands in
 * flight, record the proof, release the disk to the cluster, and wait up to
 * wait_ms for a peer to own it. The object stays a standby afterwards.
 * Blocking. @return 0, or -ETIMEDOUT (released, nobody took it yet).
 */
int hl_owner_handover(struct hl_owner *ow, unsigned wait_ms);

void hl_owner_status(struct hl_owner *ow, struct hl_owner_status *st);

/** The LU access provider this object registered (its arg is ow): what the scsi layer calls. */
const struct hl_lu_access *hl_owner_access(struct hl_owner *ow);

/** Stop the thread (a planned handover first when owner); then free. */
void hl_owner_destroy(struct hl_owner *ow);

#endif
