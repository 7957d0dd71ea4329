/*
 * origin_internal.h - what the files of src/origin share: the backend ops
 * tables listed in origin.c, the allocator every backend's origin goes
 * through, and test hooks of the file and iscsi backends.
 */
#ifndef HOTLUN_ORIGIN_INTERNAL_H
#define HOTLUN_ORIGIN_INTERNAL_H

#include "hotlun/origin.h"

#include <stdatomic.h>

extern const struct hl_origin_ops origin_file_ops;
extern const struct hl_origin_ops origin_iscsi_ops;
#ifdef HAVE_RBD
extern const struct hl_origin_ops origin_rbd_ops;
/** Split "POOL/IMAGE[@SNAP]" (rbd.c). @return 0, -EINVAL, -ENAMETOOLONG. */
int origin_rbd_parse(const char *target, char *pool, size_t pool_len, char *image,
		     size_t image_len, char *snap, size_t snap_len);
#endif

/**
 * Allocate a zeroed origin with ops->priv_size bytes of private state and a
 * copy of `uri`. Does not call ops->open. @return 0 or -ENOMEM.
 */
int origin_alloc(const struct hl_origin_ops *ops, const char *uri, struct hl_origin **out);

/** Free what origin_alloc() made (does not call ops->close). */
void origin_free(struct hl_origin *o);

/**
 * Check an I/O against the origin before it is queued: known op, iovecs
 * present and summing to length for READ/WRITE, range inside o->size, no
 * writes to a read-only origin. @return 0, -EINVAL or -EROFS; -EOPNOTSUPP
 * for HL_IO_COMPARE_AND_WRITE (a backend that forwards it checks it itself).
 */
int origin_io_check(const struct hl_origin *o, const struct hl_origin_io *io);

/*
 * File backend knobs, for unit tests and benchmarks (set them before the
 * first I/O of a thread; a thread keeps the ring it made).
 */

/** Force the worker-pool path (as if io_uring setup had failed). */
extern bool origin_file_force_workers;

/** How long opening a busy writable block device waits for it (ms; a crashed user's I/O drains). */
extern int origin_file_excl_wait_ms;

/** How often a regular file's size is looked at (ms, file_watch.c); 0: files opened now are not watched (tests). */
extern unsigned origin_file_watch_ms;

/** Extra IORING_SETUP_* flags for new rings (default chosen by measurement, see file_uring.c). */
extern unsigned origin_file_ring_flags;

/** Reads and writes of memory-filesystem files done inline so far (all threads). For tests. */
extern atomic_ulong origin_file_inline_ios;

/** Register no I/O buffers with new rings (READV / WRITEV only; for A/B runs and tests). */
extern bool origin_file_no_fixed;

/** Register them even under a finite RLIMIT_MEMLOCK without CAP_IPC_LOCK (tests of ENOMEM). */
extern bool origin_file_fixed_any_limit;

/** Reads and writes sent as READ_FIXED / WRITE_FIXED so far (all threads). For tests. */
extern atomic_ulong origin_file_fixed_ios;

/** Tear down this thread's ring now (no I/O may be in flight on it). For tests. */
void origin_file_thread_fini(void);

/**
 * Where the iscsi origin's reservation keys get their random run part
 * (iscsi_pr.c; getrandom by default). Tests replace it to force a draw.
 */
extern uint32_t (*origin_iscsi_run_draw)(void);

/** What the kernel records about a regular file that any change moves (file_proof.c). */
struct file_stamp {
	uint64_t dev, ino, size;
	int64_t ctime_s;
	long ctime_ns;
};

/** The proof token of s ("file:DEV:INO:SIZE:SEC.NSEC"). @return 0 or -ENAMETOOLONG. */
int origin_file_stamp_format(const struct file_stamp *s, char *buf, size_t len);
/** Parse what origin_file_stamp_format wrote. @return 0 or -EINVAL. */
int origin_file_stamp_parse(const char *text, struct file_stamp *s);
/** NULL when equal, else what differs ("file changed: ctime", ...). */
const char *origin_file_stamp_diff(const struct file_stamp *was, const struct file_stamp *now);


/*
 * iscsi backend (iscsi.c, iscsi_pr.c; URL and sense mapping in iscsi_url.c):
 * the parts unit tests reach.
 */
#define ORIGIN_ISCSI_DEFAULT_PORT 3260
#define ORIGIN_ISCSI_DEFAULT_TIMEOUT_S 30
#define ORIGIN_ISCSI_DEFAULT_QD 128
#define ORIGIN_ISCSI_QD_MAX 1024
#define ORIGIN_ISCSI_LUN_MAX 16383 /* SAM flat space addressing */
#define ORIGIN_ISCSI_HOST_MAX 256
#define ORIGIN_ISCSI_NAME_MAX 224 /* iSCSI names are at most 223 bytes */

/** iscsi://[user%secret@]host[:port]/target/lun[?initiator=IQN&timeout=S&qd=N], parsed. */
struct origin_iscsi_url {
	char host[ORIGIN_ISCSI_HOST_MAX]; /* without the brackets of an IPv6 address */
	bool ipv6;                        /* host was in brackets */
	uint16_t port;                    /* 3260 when absent */
	char target[ORIGIN_ISCSI_NAME_MAX];
	uint32_t lun;
	char user[256], secret[256];      /* CHAP, both empty when absent */
	char initiator[ORIGIN_ISCSI_NAME_MAX]; /* empty: the default name */
	uint32_t timeout_s;               /* retry limit for I/O while the SAN is away */
	uint32_t qd;                      /* commands in flight per session */
};

/**
 * Parse what follows "iscsi:" (it starts with "//"). Fills defaults for
 * what is absent. @return 0 or -EINVAL (bad syntax, empty or oversized
 * field, port 0 or > 65535, LUN > 16383, unknown query key).
 */
int origin_iscsi_url_parse(const char *target, struct origin_iscsi_url *u);

/** The default initiator name, iqn.2026-11.io.hotlun:origin:<hostname> (lower case). */
void origin_iscsi_default_initiator(char *buf, size_t len);

/** What a SCSI sense buffer says (fixed or descriptor format). */
struct origin_iscsi_sense {
	int key, asc, ascq;
	bool info_valid;
	uint64_t info; /* INFORMATION field (miscompare offset for COMPARE AND WRITE) */
};

/** Parse sense data (without the 2-byte iSCSI length prefix). @return 0 or -EINVAL. */
int origin_iscsi_sense_parse(const uint8_t *b, size_t len, struct origin_iscsi_sense *out);

/**
 * Sense key/ASC/ASCQ -> 0 (recovered), -EAGAIN (transient: the backend
 * repeats the command), or the -errno the I/O completes with (-EIO,
 * -ENOSPC, -EROFS, -EILSEQ for a miscompare, -EOPNOTSUPP, -EINVAL, ...).
 */
int origin_iscsi_sense_errno(int key, int asc, int ascq);

/**
 * The alias key of an iscsi:// URL (what follows "iscsi:"; see
 * hl_origin_alias_key): "iscsi://HOST:PORT/TARGET/LUN" with host and
 * target in lower case, an IPv6 address in brackets in its one textual
 * form, port 3260 when absent, no credentials or query options.
 * @return 0, -EINVAL (not a URL origin_iscsi_url_parse takes), -ENAMETOOLONG.
 */
int origin_iscsi_url_key(const char *target, char *buf, size_t len);

/**
 * The logical unit's designator in a VPD page 83h (INQUIRY data, size
 * bytes as the SAN returned them) as "scsi-lu:KIND:HEX" (KIND naa, eui64,
 * uuid or name, the best the page has with association "logical unit").
 * @return 0, -ENOENT (none; not a page 83h), -ENAMETOOLONG.
 */
int origin_iscsi_lu_designator(const uint8_t *page, size_t size, char *buf, size_t len);

/**
 * Length of uri's RFC 3986 scheme with its ':' (ALPHA *( ALPHA / DIGIT /
 * "+" / "-" / "." ) ":", "file:" 5), 0 when it has none (alias_key.c).
 */
size_t origin_scheme_len(const char *uri);

struct stat;
/** "blk:MAJ:MIN" for a block device, "file:DEV:INO" for anything else (alias_key.c). */
int origin_file_stat_key(const struct stat *st, char *buf, size_t len);

/** libiscsi command status (not CHECK CONDITION) -> 0, -EAGAIN, -EBADE, -ENOTCONN (session lost). */
int origin_iscsi_status_errno(int status);

/** Sessions of an iscsi origin that are logged in now (any thread; a snapshot, for tests). */
unsigned origin_iscsi_sessions_up(struct hl_origin *o);

#endif
