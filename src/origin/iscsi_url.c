/*
 * iscsi_url.c - what the "iscsi:" origin (iscsi.c) needs that is pure
 * text and numbers, apart from the sessions: the origin URL and its query
 * keys (the syntax is in iscsi.c's header comment), the default initiator
 * name, and the mapping of SCSI status and sense data to -errno
 * (origin_internal.h). Unit-tested in tests/unit/origin/iscsi_ut.c.
 */
#include "config.h"

#include "hotlun/util.h"
#include "origin/origin_internal.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- URL ---- */

static int parse_uint(const char *s, size_t n, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;

	if (n == 0 || n > 20)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (!isdigit((unsigned char)s[i]))
			return -EINVAL;
		v = v * 10 + (uint64_t)(s[i] - '0');
		if (v > max)
			return -EINVAL;
	}
	*out = v;
	return 0;
}

/* Copy [s, s+n) into dst (size dstlen) if it fits and has no control characters or spaces. */
static int copy_field(char *dst, size_t dstlen, const char *s, size_t n)
{
	if (n == 0 || n >= dstlen)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if ((unsigned char)s[i] <= ' ' || s[i] == 0x7f)
			return -EINVAL;
	}
	memcpy(dst, s, n);
	dst[n] = '\0';
	return 0;
}

static int parse_query(const char *q, struct origin_iscsi_url *u)
{
	if (!*q)
		return -EINVAL; /* a '?' with nothing after it */
	for (;;) {
		const char *amp = strchr(q, '&');
		size_t n = amp ? (size_t)(amp - q) : strlen(q);
		const char *eq = memchr(q, '=', n);
		size_t klen, vlen;
		const char *v;
		uint64_t num;

		if (!eq)
			return -EINVAL;
		klen = (size_t)(eq - q);
		v = eq + 1;
		vlen = n - klen - 1;
		if (klen == 9 && !strncmp(q, "initiator", 9)) {
			if (copy_field(u->initiator, sizeof(u->initiator), v, vlen))
				return -EINVAL;
		} else if (klen == 7 && !strncmp(q, "timeout", 7)) {
			if (parse_uint(v, vlen, 3600, &num) || num == 0)
				return -EINVAL;
			u->timeout_s = (uint32_t)num;
		} else if (klen == 2 && !strncmp(q, "qd", 2)) {
			if (parse_uint(v, vlen, ORIGIN_ISCSI_QD_MAX, &num) || num == 0)
				return -EINVAL;
			u->qd = (uint32_t)num;
		} else {
			return -EINVAL;
		}
		if (!amp)
			return 0;
		q = amp + 1; /* "k=v&" with nothing after: refused as an empty key */
	}
}

int origin_iscsi_url_parse(const char *target, struct origin_iscsi_url *u)
{
	const char *auth, *auth_end, *at, *host, *host_end, *p, *slash, *lun_end;
	uint64_t num;

	memset(u, 0, sizeof(*u));
	u->port = ORIGIN_ISCSI_DEFAULT_PORT;
	u->timeout_s = ORIGIN_ISCSI_DEFAULT_TIMEOUT_S;
	u->qd = ORIGIN_ISCSI_DEFAULT_QD;
	if (!target || strncmp(target, "//", 2))
		return -EINVAL;
	auth = target + 2;
	auth_end = strchr(auth, '/');
	if (!auth_end)
		return -EINVAL;

	/* userinfo: the last '@' of the authority ends it */
	at = NULL;
	for (p = auth; p < auth_end; p++) {
		if (*p == '@')
			at = p;
	}
	host = auth;
	if (at) {
		const char *pct = memchr(auth, '%', (size_t)(at - auth));

		if (!pct || copy_field(u->user, sizeof(u->user), auth, (size_t)(pct - auth)) ||
		    copy_field(u->secret, sizeof(u->secret), pct + 1, (size_t)(at - pct - 1)))
			return -EINVAL;
		host = at + 1;
	}

	/* host, [v6] or name/v4, then an optional :port */
	if (*host == '[') {
		const char *rb = memchr(host, ']', (size_t)(auth_end - host));

		if (!rb || rb == host + 1)
			return -EINVAL;
		for (p = host + 1; p < rb; p++) {
			if (!isxdigit((unsigned char)*p) && *p != ':' && *p != '.')
				return -EINVAL;
		}
		if (copy_field(u->host, sizeof(u->host), host + 1, (size_t)(rb - host - 1)))
			return -EINVAL;
		u->ipv6 = true;
		host_end = rb + 1;
		if (host_end != auth_end && *host_end != ':')
			return -EINVAL;
	} else {
		host_end = memchr(host, ':', (size_t)(auth_end - host));
		if (!host_end)
			host_end = auth_end;
		for (p = host; p < host_end; p++) {
			if (!isalnum((unsigned char)*p) && *p != '-' && *p != '.' && *p != '_')
				return -EINVAL;
		}
		if (copy_field(u->host, sizeof(u->host), host, (size_t)(host_end - host)))
			return -EINVAL;
	}
	if (host_end != auth_end) {
		if (parse_uint(host_end + 1, (size_t)(auth_end - host_end - 1), 65535, &num) ||
		    num == 0)
			return -EINVAL;
		u->port = (uint16_t)num;
	}

	/* /target/lun */
	p = auth_end + 1;
	slash = strchr(p, '/');
	if (!slash || copy_field(u->target, sizeof(u->target), p, (size_t)(slash - p)))
		return -EINVAL;
	p = slash + 1;
	lun_end = p + strcspn(p, "?");
	if (parse_uint(p, (size_t)(lun_end - p), ORIGIN_ISCSI_LUN_MAX, &num))
		return -EINVAL;
	u->lun = (uint32_t)num;
	if (*lun_end == '?')
		return parse_query(lun_end + 1, u);
	return 0;
}

void origin_iscsi_default_initiator(char *buf, size_t len)
{
	char host[256] = "localhost";
	size_t n = 0;

	if (gethostname(host, sizeof(host) - 1) != 0 || !host[0])
		strcpy(host, "localhost");
	host[sizeof(host) - 1] = '\0';
	/* iSCSI names are lower case letters, digits, '-', '.' and ':' */
	for (char *c = host; *c; c++) {
		*c = (char)tolower((unsigned char)*c);
		if (!isalnum((unsigned char)*c) && *c != '-' && *c != '.')
			*c = '-';
		n++;
	}
	snprintf(buf, len, "iqn.2026-11.io.hotlun:origin:%s", n ? host : "localhost");
}

/* ---- sense data and status -> errno ---- */

int origin_iscsi_sense_parse(const uint8_t *b, size_t len, struct origin_iscsi_sense *out)
{
	uint8_t code;

	memset(out, 0, sizeof(*out));
	if (!b || len < 2)
		return -EINVAL;
	code = b[0] & 0x7f;
	if (code == 0x70 || code == 0x71) { /* fixed format */
		if (len < 3)
			return -EINVAL;
		out->key = b[2] & 0x0f;
		if (len >= 14) {
			out->asc = b[12];
			out->ascq = b[13];
		}
		if ((b[0] & 0x80) && len >= 7) {
			out->info_valid = true;
			out->info = hl_get_be32(b + 3);
		}
		return 0;
	}
	if (code == 0x72 || code == 0x73) { /* descriptor format */
		size_t end, off = 8;

		if (len < 4)
			return -EINVAL;
		out->key = b[1] & 0x0f;
		out->asc = b[2];
		out->ascq = b[3];
		end = len >= 8 ? HL_MIN(len, (size_t)8 + b[7]) : len;
		while (off + 2 <= end) {
			uint8_t type = b[off], dlen = b[off + 1];

			if (off + 2 + dlen > end)
				break;
			if (type == 0x00 && dlen >= 0x0a && (b[off + 2] & 0x80)) {
				out->info_valid = true;
				out->info = hl_get_be64(b + off + 4);
			}
			off += 2 + (size_t)dlen;
		}
		return 0;
	}
	return -EINVAL;
}

int origin_iscsi_sense_errno(int key, int asc, int ascq)
{
	switch (key) {
	case 0x0: /* NO SENSE */
	case 0x1: /* RECOVERED ERROR: the command completed */
		return 0;
	case 0x2: /* NOT READY */
		if (asc == 0x04 &&
		    (ascq == 0x01 || ascq == 0x07 || ascq == 0x0a || ascq == 0x11 || ascq == 0x14))
			return -EAGAIN; /* becoming ready, in progress, ALUA transition */
		if (asc == 0x3a)
			return -ENOMEDIUM;
		return -EIO;
	case 0x3: /* MEDIUM ERROR */
	case 0x4: /* HARDWARE ERROR */
		return -EIO;
	case 0x5: /* ILLEGAL REQUEST */
		if (asc == 0x20)
			return -EOPNOTSUPP; /* invalid command operation code */
		if (asc == 0x25)
			return -ENXIO; /* logical unit not supported */
		if (asc == 0x27)
			return ascq == 0x07 ? -ENOSPC : -EROFS;
		return -EINVAL; /* LBA out of range, invalid field in CDB/parameter list */
	case 0x6:               /* UNIT ATTENTION: the command was not executed */
		return -EAGAIN;
	case 0x7: /* DATA PROTECT */
		if (asc == 0x27 && ascq == 0x07)
			return -ENOSPC; /* space allocation failed (thin pool full) */
		if (asc == 0x27)
			return -EROFS; /* write protected */
		return -EACCES;
	case 0xb: /* ABORTED COMMAND */
		return -EAGAIN;
	case 0xd: /* VOLUME OVERFLOW */
		return -ENOSPC;
	case 0xe: /* MISCOMPARE */
		return -EILSEQ;
	default:
		return -EIO;
	}
}

int origin_iscsi_status_errno(int status)
{
	switch (status) {
	case SCSI_STATUS_GOOD:
	case SCSI_STATUS_CONDITION_MET:
		return 0;
	case SCSI_STATUS_BUSY:
	case SCSI_STATUS_TASK_SET_FULL:
	case SCSI_STATUS_TASK_ABORTED:
	case SCSI_STATUS_ACA_ACTIVE:
		return -EAGAIN;
	case SCSI_STATUS_RESERVATION_CONFLICT:
		return -EBADE;
	case SCSI_STATUS_CANCELLED:
	case SCSI_STATUS_TIMEOUT:
	case SCSI_STATUS_ERROR:
		return -ENOTCONN;
	default:
		return -EIO;
	}
}

/* ---- identity: the URL's key, the LUN's designator ---- */

int origin_iscsi_url_key(const char *target, char *buf, size_t len)
{
	struct origin_iscsi_url u;
	char host[ORIGIN_ISCSI_HOST_MAX];
	unsigned char addr[sizeof(struct in6_addr)];
	int n;

	if (origin_iscsi_url_parse(target, &u))
		return -EINVAL;
	explicit_bzero(u.secret, sizeof(u.secret)); /* never part of a key */
	/* one spelling per address: "::1" and "0:0::1" are one host */
	if (u.ipv6 && inet_pton(AF_INET6, u.host, addr) == 1 &&
	    inet_ntop(AF_INET6, addr, host, sizeof(host)))
		hl_strlcpy(u.host, host, sizeof(u.host));
	/* host names are case-insensitive (RFC 4343), and so are iSCSI names (RFC 3722) */
	for (char *c = u.host; *c; c++)
		*c = (char)tolower((unsigned char)*c);
	for (char *c = u.target; *c; c++)
		*c = (char)tolower((unsigned char)*c);
	n = snprintf(buf, len, u.ipv6 ? "iscsi://[%s]:%u/%s/%u" : "iscsi://%s:%u/%s/%u", u.host,
	             u.port, u.target, u.lun);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/*
 * Designator types of VPD page 83h that name one logical unit everywhere
 * (SPC-4 7.8.6), best first. T10 vendor ID (1) and vendor specific (0)
 * are left out: SANs fill them with per-target numbers that repeat across
 * SANs (tgt's "IET 00010001"), and a repeat would refuse a disk for
 * another SAN's LUN.
 */
static const struct {
	uint8_t type;
	const char *name;
} lu_kinds[] = {{0x3, "naa"}, {0x2, "eui64"}, {0xa, "uuid"}, {0x8, "name"}};

int origin_iscsi_lu_designator(const uint8_t *page, size_t size, char *buf, size_t len)
{
	size_t end, best_off = 0, best_rank = HL_ARRAY_SIZE(lu_kinds);
	int n;

	if (!page || size < 4 || page[1] != 0x83)
		return -ENOENT;
	end = HL_MIN(size, (size_t)4 + hl_get_be16(page + 2));
	for (size_t off = 4; off + 4 <= end; off += 4 + (size_t)page[off + 3]) {
		uint8_t assoc = (page[off + 1] >> 4) & 0x3, type = page[off + 1] & 0xf;

		if (off + 4 + page[off + 3] > end)
			break; /* cut short: what is left is not a whole designator */
		if (assoc != 0 || page[off + 3] == 0)
			continue; /* a port's or the target's, not the logical unit's */
		for (size_t k = 0; k < best_rank; k++) {
			if (lu_kinds[k].type == type) {
				best_rank = k;
				best_off = off;
				break;
			}
		}
	}
	if (best_rank == HL_ARRAY_SIZE(lu_kinds))
		return -ENOENT;
	/* hex of the bytes: a name string's case and padding stay part of it, as the SAN sent it */
	n = snprintf(buf, len, "scsi-lu:%s:", lu_kinds[best_rank].name);
	if (n < 0 || (size_t)n + 2u * page[best_off + 3] >= len)
		return -ENAMETOOLONG;
	for (size_t i = 0; i < page[best_off + 3]; i++)
		n += snprintf(buf + n, len - (size_t)n, "%02x", page[best_off + 4 + i]);
	return 0;
}
