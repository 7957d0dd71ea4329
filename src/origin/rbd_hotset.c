/*
 * rbd_hotset.c - the owner's hot set of an rbd image, for the standbys'
 * shadow (docs/gateways.md, "Warm standby"): the owner writes which cache
 * blocks it holds and how hot each is (no data) into a RADOS object beside
 * the image, hotlun_hot.<image id>, and every SHADOW_MARK_S makes a mark
 * snapshot (hotlun-shadow-gN-NS) that the standbys prove their copies
 * against; standbys read the object. Who may write the image is
 * rbd_own.c's, the proofs' check (rbd_diff_iterate2) rbd_proof.c's.
 *
 * Why a blocklisted owner cannot mislead a standby: the object and the
 * marks are written with the owner's own client, which the cluster refuses
 * once it is fenced. A standby trusts nothing of the object but the block
 * numbers (what to read), the mark's name and, when the standby's proof is
 * the owner's previous mark, the owner's diff between the two: what it
 * read is proven by the diff since that mark, whoever wrote the image
 * after it. Writing the object takes write access to the pool, as writing
 * the image does; its sizes, counts and block size are checked on reading
 * and the ranges clamped to the disk by the cache.
 *
 * The object: one text line
 *   "hotlun-hot 2 gw=G seq=S bs=B n=N mark=PROOF prev=PROOF nchg=M\n"
 * then N entries of 12 bytes, little-endian (block: u64, freq: u32),
 * hottest first, at most HOT_MAX (1.5 MiB); then M ranges of 16 bytes
 * (offset, length: u64), at most CHG_MAX (1 MiB): what the owner's own
 * diff found written since the previous mark (prev), taken right after
 * it made `mark`: the owner diffs once for every standby, with the object
 * map its lock gives it (a standby's librbd has none loaded and would list
 * every object of the image).
 * Replaced whole (rados_write_full) at each publication: one atomic write.
 */
#include "config.h"

#include "origin/origin_rbd.h"
#include "origin/rbd_codec.h"

#include "hotlun/log.h"
#include "hotlun/util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HOT_PREFIX  "hotlun_hot."
/* the object's limits: rbd_codec.h, shared with its decoder */
#define HOT_MAX     RBD_HOT_MAX
#define HOT_ENT     RBD_HOT_ENT
#define HOT_HDR_MAX RBD_HOT_HDR_MAX
#define CHG_MAX     RBD_CHG_MAX
#define CHG_ENT     RBD_CHG_ENT
#define SHADOW_MARK "hotlun-shadow-"
/*
 * A new mark this often: what changed since the standby's mark is dropped
 * at a takeover, so a shorter period keeps more; each mark costs a
 * copy-on-write of every object on its first write after it. The owner
 * keeps the two newest marks: a standby has a whole period to move on.
 */
#define SHADOW_MARK_S 20

/* The mark period; HOTLUN_SHADOW_MARK_S overrides it (tests: 0 makes a mark at every publication). */
static uint64_t mark_period_s(void)
{
	const char *v = getenv("HOTLUN_SHADOW_MARK_S");
	char *end;
	unsigned long long s;

	if (!v || !*v)
		return SHADOW_MARK_S;
	s = strtoull(v, &end, 10);
	return *end ? SHADOW_MARK_S : (uint64_t)s;
}

static void hot_oid(const struct rbd_origin *r, char *oid, size_t len)
{
	snprintf(oid, len, HOT_PREFIX "%s", r->image_id);
}

static uint64_t now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec;
}

/* The image's snapshots whose name starts with SHADOW_MARK, newest (highest id) kept. */
static void marks_trim(struct hl_origin *o, struct rbd_origin *r, unsigned keep)
{
	rbd_snap_info_t *snaps;
	int n = origin_rbd_snaps_list(r->image, &snaps);

	if (n < 0)
		return;
	for (int i = 0; i < n; i++) {
		unsigned newer = 0;

		if (strncmp(snaps[i].name, SHADOW_MARK, strlen(SHADOW_MARK)))
			continue;
		for (int j = 0; j < n; j++)
			if (!strncmp(snaps[j].name, SHADOW_MARK, strlen(SHADOW_MARK)) &&
			    snaps[j].id > snaps[i].id)
				newer++;
		if (newer < keep)
			continue;
		int rc = rbd_snap_remove(r->image, snaps[i].name);
		if (rc < 0)
			HL_WARN(RBD_LOG, "%s: cannot remove the old shadow mark %s: %s", o->uri,
			        snaps[i].name, strerror(-rc));
		else
			own_snap_op(r);
	}
	origin_rbd_snaps_free(snaps);
}

/*
 * After a new mark: what changed since the mark before it (prev, a proof
 * token), by the owner's exact diff, into r->shadow_prev/shadow_chg; none
 * when there is no previous mark, the diff fails or lists too much.
 */
static void chg_take(struct rbd_origin *r, const char *prev)
{
	struct hl_range_list l = {.max = CHG_MAX};
	char name[160];
	unsigned long long id;
	char img[128];
	uint64_t size;

	free(r->shadow_chg);
	r->shadow_chg = NULL;
	r->shadow_nchg = 0;
	r->shadow_prev[0] = '\0';
	if (!prev[0] || sscanf(prev, "rbd:%127[^:]:%llu:%159s", img, &id, name) != 3 ||
	    rbd_get_size(r->image, &size) < 0 ||
	    origin_rbd_diff_since(r->image, name, size, hl_range_list_add, &l) < 0 || l.over) {
		free(l.v);
		return;
	}
	r->shadow_chg = l.v;
	r->shadow_nchg = (uint32_t)l.n;
	snprintf(r->shadow_prev, sizeof(r->shadow_prev), "%s", prev);
}

/* A new shadow mark into r->shadow_proof. @return 0 or -errno (the old one stays). */
static int mark_make(struct hl_origin *o, struct rbd_origin *r)
{
	char prev[HL_ORIGIN_PROOF_MAX], name[96], proof[HL_ORIGIN_PROOF_MAX];
	struct timespec now;
	uint64_t id;
	int rc;

	clock_gettime(CLOCK_REALTIME, &now);
	snprintf(name, sizeof(name), SHADOW_MARK "g%u-%lld%09ld", r->own_gw, (long long)now.tv_sec,
	         now.tv_nsec);
	rc = origin_rbd_mark_create(o, name, "shadow mark", &id);
	if (rc < 0)
		return rc;
	if ((size_t)snprintf(proof, sizeof(proof), "rbd:%s:%" PRIu64 ":%s", r->image_id, id,
	                     name) >= sizeof(proof))
		return -ENAMETOOLONG;
	memcpy(prev, r->shadow_proof, sizeof(prev));
	memcpy(r->shadow_proof, proof, sizeof(proof));
	r->shadow_mark_s = now_s();
	chg_take(r, prev); /* before the trim: prev must still exist */
	marks_trim(o, r, 2);
	HL_DEBUG(RBD_LOG, "%s: shadow mark %s", o->uri, name);
	return 0;
}

/* FNV-1a over len bytes, from h. */
static uint64_t fnv(uint64_t h, const void *p, size_t len)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < len; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

int origin_rbd_hot_publish(struct hl_origin *o, uint32_t block_size, const struct hl_hot_ent *v,
                           uint32_t n)
{
	struct rbd_origin *r = ro_of(o);
	char oid[160], hdr[HOT_HDR_MAX];
	uint8_t *buf;
	size_t len;
	int h, rc;

	if (!r->gateway || r->snap[0] || o->read_only || !r->image_id[0])
		return -EOPNOTSUPP;
	if (!atomic_load(&r->owned) || atomic_load(&r->fenced))
		return -EAGAIN;
	if (n > HOT_MAX)
		n = HOT_MAX;
	handles_read(r);
	if (!r->shadow_proof[0] || r->shadow_gen != atomic_load(&r->gen) ||
	    r->shadow_epoch != r->own_epoch || now_s() - r->shadow_mark_s >= mark_period_s()) {
		/* a new owner (epoch) or connection makes its own first: an old mark may be gone */
		if (r->shadow_epoch != r->own_epoch || r->shadow_gen != atomic_load(&r->gen))
			r->shadow_proof[0] = '\0';
		if (mark_make(o, r) == 0) {
			r->shadow_gen = atomic_load(&r->gen);
			r->shadow_epoch = r->own_epoch;
		}
	}
	/* the body first, at the end of room for the longest header */
	size_t body = (size_t)n * HOT_ENT + (size_t)r->shadow_nchg * CHG_ENT;
	uint8_t *room = malloc(HOT_HDR_MAX + body);
	if (!room) {
		handles_done(r);
		return -ENOMEM;
	}
	buf = room + HOT_HDR_MAX;
	for (uint32_t i = 0; i < n; i++) {
		uint8_t *p = buf + (size_t)i * HOT_ENT;
		for (int b = 0; b < 8; b++)
			p[b] = (uint8_t)(v[i].block >> (8 * b));
		for (int b = 0; b < 4; b++)
			p[8 + b] = (uint8_t)(v[i].freq >> (8 * b));
	}
	for (uint32_t i = 0; i < r->shadow_nchg; i++) {
		uint8_t *p = buf + (size_t)n * HOT_ENT + (size_t)i * CHG_ENT;
		for (int b = 0; b < 8; b++) {
			p[b] = (uint8_t)(r->shadow_chg[i].off >> (8 * b));
			p[8 + b] = (uint8_t)(r->shadow_chg[i].len >> (8 * b));
		}
	}
	/*
	 * An idle owner's hot set stays the same between marks: what the
	 * object holds already (this connection wrote it, same header but the
	 * sequence number, same entries) is not written again.
	 */
	h = snprintf(hdr, sizeof(hdr), "gw=%u epoch=%" PRIu64 " bs=%u n=%u mark=%s prev=%s nchg=%u",
	             r->own_gw, r->own_epoch, block_size, n, r->shadow_proof, r->shadow_prev,
	             r->shadow_nchg);
	h = h < 0 ? 0 : HL_MIN(h, (int)sizeof(hdr) - 1);
	uint64_t digest = fnv(fnv(0xcbf29ce484222325ull, hdr, (size_t)h), buf, body);
	if (r->hot_digest == digest && r->hot_digest_gen == atomic_load(&r->gen)) {
		handles_done(r);
		free(room);
		return 0;
	}
	h = snprintf(hdr, sizeof(hdr),
	             "hotlun-hot 2 gw=%u seq=%" PRIu64 " bs=%u n=%u mark=%s prev=%s nchg=%u\n",
	             r->own_gw, r->hot_seq + 1, block_size, n,
	             r->shadow_proof[0] ? r->shadow_proof : "-",
	             r->shadow_prev[0] ? r->shadow_prev : "-", r->shadow_nchg);
	if (h < 0 || (size_t)h >= sizeof(hdr)) {
		handles_done(r);
		free(room);
		return -ENAMETOOLONG;
	}
	buf -= h;
	memcpy(buf, hdr, (size_t)h);
	len = (size_t)h + body;
	hot_oid(r, oid, sizeof(oid));
	rc = rados_write_full(r->ioctx, oid, (const char *)buf, len);
	if (rc >= 0) {
		r->hot_seq++;
		r->hot_digest = digest;
		r->hot_digest_gen = atomic_load(&r->gen);
	} else {
		r->hot_digest = 0; /* what the object holds is unknown: write next time */
	}
	handles_done(r);
	free(room);
	return rc < 0 ? rc : 0;
}

int origin_rbd_hot_fetch(struct hl_origin *o, struct hl_hot_set *out)
{
	struct rbd_origin *r = ro_of(o);
	char oid[160];
	uint64_t size;
	time_t mtime;
	char *buf;
	int rc;

	if (!r->gateway || r->snap[0] || !r->image_id[0])
		return -EOPNOTSUPP;
	hot_oid(r, oid, sizeof(oid));
	handles_read(r);
	rc = rados_stat(r->ioctx, oid, &size, &mtime);
	if (rc < 0 || size > RBD_HOT_OBJ_MAX) {
		handles_done(r);
		return rc < 0 ? rc : -EBADMSG;
	}
	buf = malloc(size ? size : 1);
	if (!buf) {
		handles_done(r);
		return -ENOMEM;
	}
	rc = rados_read(r->ioctx, oid, buf, size, 0);
	handles_done(r);
	if (rc < 0) {
		free(buf);
		return rc;
	}
	rc = rbd_hot_decode(buf, (size_t)rc, out);
	free(buf);
	if (rc)
		return rc;
	out->age_ms = (uint64_t)(time(NULL) > mtime ? time(NULL) - mtime : 0) * 1000;
	return 0;
}
