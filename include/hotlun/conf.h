/*
 * conf.h - the INI configuration file: parsing into plain structs, the
 * checks across sections, writing it back (saveconfig: hl_conf_write), and
 * changing it at run time with the file's own rules (hl_conf_set & co., for
 * the control socket and reload). Errors name FILE:LINE and what is wrong;
 * unknown sections and keys are errors.
 *
 * Sections: [global], [disk NAME], [cache NAME], [target IQN]. Their keys,
 * defaults and limits are listed in one place, hotlun.conf(5)
 * (docs/hotlun.conf.5): a key added to the parser is added there, not here.
 *
 * Ownership: a struct hl_conf from hl_conf_load, hl_conf_parse or
 * hl_conf_dup is the caller's, freed with hl_conf_free, which frees every
 * string and array in it (the origin CHAP secrets are wiped first). Every
 * char * in it is a heap copy that the conf owns: change them through
 * hl_conf_set / hl_conf_unset (which free what they replace), never point
 * them at memory of your own. Pointers into a conf (hl_conf_find_*, an
 * element of disks/caches/targets, a string, hl_conf_origin_secret) are
 * borrowed: valid until the conf is freed or changed where they point
 * (adding or removing a section moves its kind's array; setting or unsetting
 * a key frees the string it replaces or moves its list). Arguments (text,
 * path, name, key, value) stay the caller's and are copied where kept; err
 * is the caller's buffer; the FILE given to hl_conf_write is neither closed
 * nor rewound.
 *
 * Threads: no locks and no global state (warnings go to the log), so calls
 * on different confs may run on any threads at once, and several threads may
 * read one conf (the functions that take it const) at once; a function that
 * changes a conf (hl_conf_set, _unset, _section_add, _section_remove,
 * hl_conf_check, hl_conf_free) needs it to itself. hl_conf_load and the
 * keys that name a secret file (hl_conf_parse, hl_conf_set) read files
 * synchronously: not for a reactor that serves I/O. hotlund loads on its
 * main thread at start-up; from then on its running conf belongs to the
 * control thread, which edits a copy and applies it (daemon_internal.h).
 */
#ifndef HOTLUN_CONF_H
#define HOTLUN_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/** What the control plane shows instead of a secret (and takes back as "unchanged"). */
#define HL_CONF_SECRET_MASK "********"

/** RFC 7143 asks for secrets of at least 96 bits of randomness: shorter ones get a warning. */
#define HL_CONF_CHAP_SECRET_MIN 12

/**
 * CHAP credentials of an iscsi: origin given as [disk] keys instead of in
 * the URL (user%secret@). All NULL when unset.
 */
struct hl_conf_origin_chap {
	char *user;        /* origin_chap_user */
	char *secret;      /* origin_chap_secret (written back by saveconfig) */
	char *secret_file; /* origin_chap_secret_file: a file only its owner (root) can read */
	char *file_secret; /* what secret_file held when the file was read; never written */
	char *mutual_user, *mutual_secret; /* origin_mutual_*: what the SAN must answer with */
};

/** The origin's CHAP secret from the keys (origin_chap_secret or its file), or NULL. */
static inline const char *hl_conf_origin_secret(const struct hl_conf_origin_chap *o)
{
	return o->secret ? o->secret : o->file_secret;
}

/* [disk] shadow_rate when not set: 8 MiB/s (docs/gateways.md, "Warm standby") */
#define HL_CONF_SHADOW_RATE_DEFAULT (8ull << 20)

struct hl_conf_disk {
	char *name;
	char *origin;          /* URI: file:/path, iscsi://..., or a bare path */
	uint32_t block_size;   /* 512 (default) or 4096 */
	bool read_only;
	char *cache;           /* name of a [cache] section, or NULL */
	uint64_t cache_quota;  /* bytes, 0 = shared pool */
	uint32_t origin_iops;  /* throttle, 0 = none */
	uint32_t origin_mbps;
	uint32_t origin_latency_ms;
	char *rbd_conf;        /* rbd: origins: ceph.conf path, or NULL */
	char *rbd_id;          /* rbd: origins: cephx user id, or NULL */
	struct hl_conf_origin_chap ochap; /* iscsi: origins: CHAP toward the SAN as keys */
	bool exclusive;        /* nobody else writes the origin while hotlund is down
	                          (hl_origin_opts.sole_writer) */
	char *serial;          /* LU identity (VPD 80h), or NULL: derived (hl_serial_valid) */
	char *naa;             /* LU identity (VPD 83h NAA 6), or NULL: derived (hl_parse_naa) */
	uint64_t shadow_rate;  /* warm standby pre-read rate, bytes/s, 0 = off; when
	                          shadow_rate_set (else HL_CONF_SHADOW_RATE_DEFAULT) */
	bool shadow_rate_set;
	int line;              /* line of the section header, for errors */
	int origin_line;       /* line of origin =, 0 when not from a file */
};

struct hl_conf_cache {
	char *name;
	char *device;
	uint64_t size;
	uint32_t block_size;
	char *admission;       /* "frequency" (default), "always", "nhit:N" */
	char *write_policy;    /* "update" (default) or "invalidate" */
	uint64_t update_buffer; /* RAM update buffer bytes, 0 = off; when update_buffer_set */
	bool update_buffer_set; /* false: the cache's default (16 MiB) */
	uint32_t write_budget;  /* percent 0..100 (rule 10); when write_budget_set */
	bool write_budget_set;  /* false: the cache's default (25%) */
	int line;
	int device_line, size_line; /* lines of device = and size =, 0 when not from a file */
};

struct hl_conf_lun {
	uint32_t lun;
	char *disk;
	int line;
};

struct hl_conf_target {
	char *name;
	char *alias;
	struct hl_conf_lun *luns;
	size_t n_luns;
	bool allow_all;
	char **allow;
	size_t n_allow;
	char *chap_user, *chap_secret;
	char *mutual_user, *mutual_secret;
	bool allow_target_reset; /* TARGET WARM/COLD RESET accepted (default: refused) */
	int line;
};

/* [global] poll_us when unset: see hl_reactor_set_poll_us and hotlun.conf(5). */
#define HL_CONF_POLL_US_DEFAULT 50
#define HL_CONF_POLL_US_MAX     1000
/* [global] write_buffer_limit: at least twice the largest transfer (HL_ISCSI_WRITE_LIMIT_MIN) */
#define HL_CONF_WRITE_BUFFER_MIN (32ull << 20)
#define HL_CONF_WRITE_BUFFER_MAX (1ull << 50)
/*
 * [global] scratch_buffer_limit: the daemon-wide budget for per-command
 * scratch buffers (HL_SCSI_SCRATCH_DEFAULT when unset); at least the
 * largest single buffer, HL_SCSI_MAX_XFER, so any command fits alone
 */
#define HL_CONF_SCRATCH_BUFFER_MIN (16ull << 20)
#define HL_CONF_SCRATCH_BUFFER_MAX (1ull << 50)
/* [global] control_idle_timeout: seconds a control connection may send no request (0: no limit) */
#define HL_CONF_CONTROL_IDLE_DEFAULT 60
#define HL_CONF_CONTROL_IDLE_MAX     86400
/* [global] logout_timeout: seconds initiators get to log out on a planned stop */
#define HL_CONF_LOGOUT_TIMEOUT_DEFAULT 5
#define HL_CONF_LOGOUT_TIMEOUT_MAX     600
/*
 * [global] max_pending_logins{,_per_addr}, max_sessions{,_per_addr}: 1 .. this
 * (unset: derived from the open-file limit, see hl_iscsi_login_limits)
 */
#define HL_CONF_PENDING_LOGINS_MAX 1000000
/* [global] gateway / gateways: ids 1 .. this, at most HL_CONF_GATEWAYS_MAX of them */
#define HL_CONF_GATEWAY_MAX  255
#define HL_CONF_GATEWAYS_MAX 16
/*
 * [global] gateway_lease_ms / gateway_dead_ms (docs/gateways.md, "The bound
 * on a split brain"): each 200 ms to 60 s, and the safety rule
 * dead >= lease + HL_CONF_GATEWAY_MARGIN_MS (a standby must never take a
 * disk whose silent owner may still believe in its lease; the margin is the
 * one a forced takeover waits on top of the lease, owner.c).
 */
#define HL_CONF_GATEWAY_MS_MIN     200
#define HL_CONF_GATEWAY_MS_MAX     60000
#define HL_CONF_GATEWAY_MARGIN_MS  500
#define HL_CONF_GATEWAY_LEASE_MS   2000 /* the defaults (hotlun/owner.h) */
#define HL_CONF_GATEWAY_DEAD_MS    4000

struct hl_conf {
	char *path;            /* file it came from, or "<builtin>" */
	char **portals;
	size_t n_portals;
	char *state_dir;
	char *control_socket;
	int log_level;         /* HL_LOG_* */
	unsigned threads;      /* reactor threads, 0 = one per core (one per CPU of cpus, if set) */
	char *cpus;            /* CPU list the reactors run on, one CPU each in turn; NULL: unpinned */
	int poll_us;           /* reactors' busy-poll window (us), -1: unset (the default) */
	int send_uring;        /* iSCSI sends through io_uring: 1 yes, 0 no, -1: unset (no) */
	uint64_t write_buffer_limit; /* bytes of unfinished WRITE data, 0: unset (from RAM) */
	uint64_t scratch_buffer_limit; /* bytes of per-command scratch buffers, 0: unset (256M) */
	int logout_timeout;    /* planned stop: seconds to wait for logouts, -1: unset */
	int control_idle_timeout; /* control connections: seconds without a request, -1: unset */
	unsigned max_pending_logins;          /* per portal, 0: unset (the iscsi default) */
	unsigned max_pending_logins_per_addr; /* per source address, 0: unset */
	unsigned max_sessions;                /* logged-in sessions, 0: unset */
	unsigned max_sessions_per_addr;       /* ... per source address, 0: unset */
	char *discovery_chap_user, *discovery_chap_secret;
	char *metrics_listen;  /* Prometheus endpoint ADDRESS:PORT, NULL: off (docs/metrics.md) */
	/*
	 * Several gateways, one LUN (docs/gateways.md): this gateway's id (its
	 * ALUA target port group), 0: a lone gateway; and the ids of every
	 * gateway that serves the same disks, this one included (sorted).
	 */
	unsigned gateway;
	uint16_t gateways[HL_CONF_GATEWAYS_MAX];
	size_t n_gateways;
	/* an owner serves this long after its last renew was sent; a standby takes a
	   disk whose owner's heartbeat stood still this long (0: the defaults) */
	unsigned gateway_lease_ms, gateway_dead_ms;
	int gateway_lease_line, gateway_dead_line; /* where they were set, for errors */
	struct hl_conf_disk *disks;
	size_t n_disks;
	struct hl_conf_cache *caches;
	size_t n_caches;
	struct hl_conf_target *targets;
	size_t n_targets;
};

/**
 * Parse and check a file. On error returns -errno (-EINVAL for content) and
 * writes "FILE:LINE: message" into err. *out is owned by the caller.
 */
int hl_conf_load(const char *path, struct hl_conf **out, char *err, size_t errlen);

/**
 * Same, from an open file (read to its end; the caller keeps fd): what a
 * caller that checked the file it opened (fstat) parses, so that the file
 * checked is the file read. `name` is used in error messages.
 */
int hl_conf_read_fd(int fd, const char *name, struct hl_conf **out, char *err, size_t errlen);

/** Same, from memory; `name` is used in error messages. */
int hl_conf_parse(const char *text, size_t len, const char *name, struct hl_conf **out, char *err,
		  size_t errlen);

void hl_conf_free(struct hl_conf *conf);

/** Look up by name; NULL when absent. */
const struct hl_conf_disk *hl_conf_find_disk(const struct hl_conf *conf, const char *name);
const struct hl_conf_cache *hl_conf_find_cache(const struct hl_conf *conf, const char *name);

/** Write conf back as INI text that hl_conf_parse reads to the same structs. @return 0 or -errno. */
int hl_conf_write(const struct hl_conf *conf, FILE *f);

/**
 * True when a and b are the same configuration: the writer (which writes
 * every key that differs from its default) gives the same text for both.
 * saveconfig uses it to check that the file it wrote reads back as what runs.
 */
bool hl_conf_same(const struct hl_conf *a, const struct hl_conf *b);

/* ---- changes at run time: the control socket and reload edit a copy, check it, apply it ---- */

enum hl_conf_kind {
	HL_CONF_GLOBAL = 0,
	HL_CONF_DISK,
	HL_CONF_CACHE,
	HL_CONF_TARGET,
};

const struct hl_conf_target *hl_conf_find_target(const struct hl_conf *conf, const char *name);

/** Deep copy (through the writer and the parser, so the copy is checked too). @return 0 or -errno. */
int hl_conf_dup(const struct hl_conf *conf, struct hl_conf **out);

/** Add an empty [kind name] section, with the parser's name rules. @return 0 or -EINVAL. */
int hl_conf_section_add(struct hl_conf *conf, enum hl_conf_kind kind, const char *name, char *err,
			size_t errlen);

/** Remove a section; refused (-EINVAL) while something refers to it. -ENOENT when absent. */
int hl_conf_section_remove(struct hl_conf *conf, enum hl_conf_kind kind, const char *name,
			   char *err, size_t errlen);

/**
 * Set key = value in a section with exactly the file's rules (name NULL for
 * [global]). Scalar keys are replaced; list keys (portal, allow, lun.N) add.
 * @return 0, -ENOENT (no such section) or -EINVAL with a message.
 */
int hl_conf_set(struct hl_conf *conf, enum hl_conf_kind kind, const char *name, const char *key,
		const char *value, char *err, size_t errlen);

/** Reset a scalar key, or remove one value of a list key (portal, allow, lun.N). */
int hl_conf_unset(struct hl_conf *conf, enum hl_conf_kind kind, const char *name, const char *key,
		  const char *value, char *err, size_t errlen);

/** The cross-section checks the parser runs at the end of a file (and its defaults). */
int hl_conf_check(struct hl_conf *conf, char *err, size_t errlen);

#endif
