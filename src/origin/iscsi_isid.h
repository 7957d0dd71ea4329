/*
 * iscsi_isid.h - the ISIDs of an iscsi:// disk's sessions, the same at
 * every start of hotlund for the same disk (iscsi_isid.c), and the slot
 * files that tell a live instance from a dead one. No libiscsi here: the
 * unit test drives it on a temporary folder.
 */
#ifndef HOTLUN_ORIGIN_ISCSI_ISID_H
#define HOTLUN_ORIGIN_ISCSI_ISID_H

#include <stdbool.h>
#include <stdint.h>

/*
 * Instances of one disk identity alive at once in one state_dir (a reload
 * opens the new origin before the old one has closed; hotlund started twice
 * by mistake): each takes its own slot, i.e. its own ISIDs.
 */
#define ISC_ISID_SLOTS 4

/* ISID qualifiers: the open probe and the ownership session, the data sessions 1..N, the poll */
#define ISC_QUAL_CTL 0
#define ISC_QUAL_UA  0xffff
/* a record that cannot be read back: every data qualifier a run can use (one
 * session per reactor, threads <= 64), so the sweep misses none */
#define ISC_ISID_USED_MAX 65

/* What one instance holds of its disk's slots. */
struct isc_isid {
	uint64_t ident;                /* origin_iscsi_isid_ident(); 0: no stable ISIDs (random) */
	int slot;                      /* ours; -1: none taken */
	int fd[ISC_ISID_SLOTS];        /* slot files locked: ours while open, others while swept */
	unsigned used[ISC_ISID_SLOTS]; /* each locked slot's record as found: 0 clean, else
	                                  1 + the highest data qualifier its holder used */
	unsigned noted;                /* ours: the record written since */
	unsigned mine;                 /* ours: 1 + the highest data qualifier this run noted */
};

/**
 * What names a disk's sessions toward the SAN: the disk's name in the
 * config, the SAN target and LUN, the gateway id. Never 0. Pure.
 */
uint64_t origin_iscsi_isid_ident(const char *disk, const char *target, unsigned lun,
                                 uint16_t gateway);

/** The 24-bit random-format part of the ISIDs of `slot` of ident (the qualifier is apart). Pure. */
uint32_t origin_iscsi_isid_base(uint64_t ident, unsigned slot);

/**
 * The 6 bytes of an ISID as sent (RFC 7143 11.12.5, type 10b "random":
 * 0x80, the 24-bit part, the 16-bit qualifier). Pure.
 */
void origin_iscsi_isid_bytes(uint32_t base, uint16_t qual, uint8_t out[6]);

/**
 * Take the first slot of ident in dir that no live instance holds (its
 * file is locked with flock, which a process's death releases), and lock
 * every other slot that nobody holds either, with what its last holder
 * recorded (st->used[]): the caller sweeps those then calls
 * origin_iscsi_isid_release(). Writes our slot's record as "in use".
 * @return 0, -EBUSY (every slot is held live: st->slot stays -1) or -errno.
 */
int origin_iscsi_isid_claim(struct isc_isid *st, const char *dir, uint64_t ident);

/** A session with data qualifier qual is about to log in: recorded before it does. */
void origin_iscsi_isid_note(struct isc_isid *st, unsigned qual);

/** The caller fenced what slot's last holder left: ours is recorded as fresh, others released. */
void origin_iscsi_isid_swept(struct isc_isid *st, unsigned slot);

/** Unlock a slot locked by claim; clean: first record that nothing of it can be in flight. */
void origin_iscsi_isid_release(struct isc_isid *st, unsigned slot, bool clean);

#endif
