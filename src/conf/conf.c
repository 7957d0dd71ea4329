/*
 * conf.c - the INI configuration: a line parser, one key table per section
 * kind, cross-reference checks, and the writer used by saveconfig.
 *
 * Syntax: "[section]" or "[kind NAME]", "key = value", comments start with
 * ';' or '#' at the beginning of a line or after whitespace; a value may be
 * double-quoted to keep such characters. Every error names FILE:LINE.
 */
#include "hotlun/conf.h"
#include "hotlun/log.h"
#include "hotlun/util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef HL_LOCALSTATEDIR
#define HL_LOCALSTATEDIR "/var" /* set by configure; this default serves the fuzz build */
#endif

#define CONF_MAX_LINE 4096
#define CONF_MAX_VALUE 1024 /* so a written (escaped) line always fits CONF_MAX_LINE */
#define CONF_MAX_ITEMS 4096 /* per list: disks, targets, luns, portals... */

enum section_kind { SEC_NONE, SEC_GLOBAL, SEC_DISK, SEC_CACHE, SEC_TARGET };

struct parser {
	const char *name;
	int line;
	char *err;
	size_t errlen;
	struct hl_conf *conf;
	enum section_kind kind;
	size_t index;  /* the current disk/cache/target, in its array */
	bool seen_global;
	int global_line; /* line of [global], for errors found after the file is read */
	bool dup;        /* hl_conf_dup: the text was written by us; no files, no warnings */
};

static int perr(struct parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int perr(struct parser *p, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (p->line > 0)
		snprintf(p->err, p->errlen, "%s:%d: %s", p->name, p->line, msg);
	else
		snprintf(p->err, p->errlen, "%s", msg);
	return -EINVAL;
}

/* Grow an array of `size`-byte items by one zeroed item. NULL on OOM or limit. */
static void *array_push(void **arr, size_t *n, size_t size)
{
	if (*n >= CONF_MAX_ITEMS)
		return NULL;
	void *a = realloc(*arr, (*n + 1) * size);
	if (!a)
		return NULL;
	*arr = a;
	void *item = (char *)a + *n * size;
	memset(item, 0, size);
	(*n)++;
	return item;
}

static int set_str(struct parser *p, char **dst, const char *v)
{
	if (strlen(v) > CONF_MAX_VALUE)
		return perr(p, "value longer than %d bytes", CONF_MAX_VALUE);
	char *s = strdup(v);
	if (!s)
		return perr(p, "out of memory");
	free(*dst);
	*dst = s;
	return 0;
}

static int push_str(struct parser *p, char ***arr, size_t *n, const char *v)
{
	if (strlen(v) > CONF_MAX_VALUE)
		return perr(p, "value longer than %d bytes", CONF_MAX_VALUE);
	char **slot = array_push((void **)arr, n, sizeof(char *));
	if (!slot)
		return perr(p, "too many values or out of memory");
	*slot = strdup(v);
	if (!*slot) {
		(*n)--;
		return perr(p, "out of memory");
	}
	return 0;
}

static int parse_u32(struct parser *p, const char *key, const char *v, uint32_t max, uint32_t *out)
{
	uint64_t x;
	if (hl_parse_u64(v, &x) || x > max)
		return perr(p, "%s: expected a whole number from 0 to %u, got '%s'", key, max, v);
	*out = (uint32_t)x;
	return 0;
}

static int parse_block_size(struct parser *p, const char *key, const char *v, uint64_t min,
			    uint64_t max, bool pow2, uint32_t *out)
{
	uint64_t x;
	if (hl_parse_size(v, &x) || x < min || x > max || (pow2 && (x & (x - 1))))
		return perr(p, "%s: '%s' is not a valid size here (%s%llu..%llu bytes)", key, v,
			    pow2 ? "power of two, " : "", (unsigned long long)min,
			    (unsigned long long)max);
	*out = (uint32_t)x;
	return 0;
}

static bool valid_name(const char *s)
{
	if (!*s || strlen(s) > 64)
		return false;
	for (; *s; s++) {
		if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_' && *s != '.')
			return false;
	}
	return true;
}

/* RFC 3720/7143 name forms: iqn.YYYY-MM.reverse.domain[:anything], eui.16HEX, naa.16|32HEX. */
static bool valid_iscsi_name(const char *s)
{
	size_t len = strlen(s);

	if (len < 5 || len > 223)
		return false;
	for (const char *c = s; *c; c++) {
		if (!isalnum((unsigned char)*c) && !strchr("-.:", *c))
			return false;
		if (isupper((unsigned char)*c))
			return false; /* names are normalised to lower case */
	}
	if (strncmp(s, "iqn.", 4) == 0) {
		return len > 12 && isdigit((unsigned char)s[4]) && isdigit((unsigned char)s[7]) &&
		       s[8] == '-' && isdigit((unsigned char)s[9]) && isdigit((unsigned char)s[10]) &&
		       s[11] == '.';
	}
	if (strncmp(s, "eui.", 4) == 0)
		return len == 20 && strspn(s + 4, "0123456789abcdef") == 16;
	if (strncmp(s, "naa.", 4) == 0)
		return (len == 20 || len == 36) && strspn(s + 4, "0123456789abcdef") == len - 4;
	return false;
}

/* ---- secrets ---- */

/*
 * A CHAP secret that an initiator could guess online: warn when it is
 * shorter than RFC 7143 asks (96 bits of randomness, 12 bytes at best). Not
 * for hl_conf_dup's copies, which would repeat it at every control change.
 */
static void warn_short_secret(struct parser *p, const char *what, const char *key, const char *v)
{
	if (p->dup || strlen(v) >= HL_CONF_CHAP_SECRET_MIN)
		return;
	if (p->line > 0)
		HL_WARN("conf", "%s:%d: %s%s%s is %zu bytes: RFC 7143 asks for at least %d bytes of "
		        "random (96 bits) against online guessing", p->name, p->line, what,
		        *what ? " " : "", key, strlen(v), HL_CONF_CHAP_SECRET_MIN);
	else
		HL_WARN("conf", "%s%s%s is %zu bytes: RFC 7143 asks for at least %d bytes of "
		        "random (96 bits) against online guessing", what, *what ? " " : "", key,
		        strlen(v), HL_CONF_CHAP_SECRET_MIN);
}

/*
 * Read a secret from `path`: a regular file owned by this process's user
 * and readable by nobody else; its first line is the secret (1..255 bytes,
 * printable). Checked on the open descriptor, so the file checked is the
 * file read.
 */
static int read_secret_file(struct parser *p, const char *key, const char *path, char **out)
{
	char buf[512];
	struct stat st;
	ssize_t n;
	size_t len;
	int fd;

	if (!*path || path[0] != '/')
		return perr(p, "%s: '%s' is not an absolute path", key, path);
	/* O_NONBLOCK: a FIFO there must not hang the control thread in open() */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return perr(p, "%s: %s: %s", key, path, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return perr(p, "%s: %s is not a regular file", key, path);
	}
	if (st.st_mode & (S_IRWXG | S_IRWXO)) {
		close(fd);
		return perr(p, "%s: %s is accessible to its group or others (mode %04o): "
		            "chmod 600 it", key, path, (unsigned)(st.st_mode & 07777));
	}
	if (st.st_uid != geteuid()) {
		close(fd);
		return perr(p, "%s: %s belongs to uid %u, not to hotlund's user (uid %u)", key, path,
		            (unsigned)st.st_uid, (unsigned)geteuid());
	}
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0)
		return perr(p, "%s: %s: %s", key, path, strerror(errno));
	buf[n] = '\0';
	len = strcspn(buf, "\r\n");
	buf[len] = '\0';
	for (size_t i = 0; i < len; i++) {
		if ((unsigned char)buf[i] < 0x20 || buf[i] == 0x7f) {
			explicit_bzero(buf, sizeof(buf));
			return perr(p, "%s: %s: the secret has a control character", key, path);
		}
	}
	if (len < 1 || len > 255) {
		explicit_bzero(buf, sizeof(buf));
		return perr(p, "%s: %s: the first line must hold the secret (1..255 bytes)", key,
		            path);
	}
	*out = strdup(buf);
	explicit_bzero(buf, sizeof(buf));
	return *out ? 0 : perr(p, "out of memory");
}

/* Free and forget a secret. */
static void free_secret(char **s)
{
	if (*s) {
		explicit_bzero(*s, strlen(*s));
		free(*s);
		*s = NULL;
	}
}

/*
 * A value is one line of the file: a control character (a newline above all)
 * would let a value set through the control socket become keys of its own
 * when saveconfig writes it, so no value may hold one, whichever way it came.
 */
static int check_value_chars(struct parser *p, const char *key, const char *v)
{
	for (const unsigned char *c = (const unsigned char *)v; *c; c++) {
		if (*c < 0x20 || *c == 0x7f)
			return perr(p, "%s: control character 0x%02x in the value (values are one "
				       "line of printable text)", key, *c);
	}
	return 0;
}

/* ---- [global] ---- */

/* gateways = 1,2[,...]: every gateway id of the cluster, sorted, no repeats */
static int parse_gateways(struct parser *p, const char *v)
{
	struct hl_conf *c = p->conf;
	const char *s = v;
	size_t n = 0;

	while (*s) {
		char *end;
		unsigned long g;

		while (*s == ' ' || *s == ',')
			s++;
		if (!*s)
			break;
		errno = 0;
		g = strtoul(s, &end, 10);
		if (end == s || errno || g == 0 || g > HL_CONF_GATEWAY_MAX || *s == '-' || *s == '+')
			return perr(p, "gateways: '%s' is not a list of gateway ids 1 to %u (e.g. 1,2)",
			            v, HL_CONF_GATEWAY_MAX);
		if (n == HL_CONF_GATEWAYS_MAX)
			return perr(p, "gateways: more than %u gateways", HL_CONF_GATEWAYS_MAX);
		for (size_t i = 0; i < n; i++)
			if (c->gateways[i] == g)
				return perr(p, "gateways: %lu is listed twice", g);
		c->gateways[n++] = (uint16_t)g;
		s = end;
		if (*s && *s != ',' && *s != ' ')
			return perr(p, "gateways: '%s' is not a list of gateway ids 1 to %u (e.g. 1,2)",
			            v, HL_CONF_GATEWAY_MAX);
	}
	for (size_t i = 1; i < n; i++) /* sorted: RTPG lists them in this order */
		for (size_t j = i; j > 0 && c->gateways[j - 1] > c->gateways[j]; j--) {
			uint16_t t = c->gateways[j];
			c->gateways[j] = c->gateways[j - 1];
			c->gateways[j - 1] = t;
		}
	c->n_gateways = n;
	return 0;
}

static int global_key(struct parser *p, const char *key, const char *v)
{
	struct hl_conf *c = p->conf;

	if (strcmp(key, "portal") == 0) {
		struct sockaddr_storage ss;
		unsigned len;
		if (hl_parse_portal(v, 3260, &ss, &len))
			return perr(p, "portal: '%s' is not ADDRESS[:PORT] (IPv6 as [::1]:3260)", v);
		return push_str(p, &c->portals, &c->n_portals, v);
	}
	if (strcmp(key, "state_dir") == 0)
		return set_str(p, &c->state_dir, v);
	if (strcmp(key, "control_socket") == 0)
		return set_str(p, &c->control_socket, v);
	if (strcmp(key, "log_level") == 0) {
		int l = hl_log_level_parse(v);
		if (l < 0)
			return perr(p, "log_level: '%s' is not err|warn|notice|info|debug", v);
		c->log_level = l;
		return 0;
	}
	if (strcmp(key, "threads") == 0)
		return parse_u32(p, key, v, 64, &c->threads);
	if (strcmp(key, "poll_us") == 0) {
		unsigned us = 0;
		int rc = parse_u32(p, key, v, HL_CONF_POLL_US_MAX, &us);
		if (rc == 0)
			c->poll_us = (int)us;
		return rc;
	}
	if (strcmp(key, "logout_timeout") == 0) {
		unsigned s = 0;
		int rc = parse_u32(p, key, v, HL_CONF_LOGOUT_TIMEOUT_MAX, &s);
		if (rc == 0)
			c->logout_timeout = (int)s;
		return rc;
	}
	if (strcmp(key, "write_buffer_limit") == 0) {
		uint64_t x;
		if (hl_parse_size(v, &x) || x < HL_CONF_WRITE_BUFFER_MIN || x > HL_CONF_WRITE_BUFFER_MAX)
			return perr(p,
				    "write_buffer_limit: '%s' is not a size of at least 32M (twice "
				    "the largest transfer)",
				    v);
		c->write_buffer_limit = x;
		return 0;
	}
	/* the caps on connections and sessions: 1 and up, or unset (derived) */
	unsigned *cap = NULL;
	if (strcmp(key, "max_pending_logins") == 0)
		cap = &c->max_pending_logins;
	else if (strcmp(key, "max_pending_logins_per_addr") == 0)
		cap = &c->max_pending_logins_per_addr;
	else if (strcmp(key, "max_sessions") == 0)
		cap = &c->max_sessions;
	else if (strcmp(key, "max_sessions_per_addr") == 0)
		cap = &c->max_sessions_per_addr;
	if (cap) {
		unsigned n = 0;
		int rc = parse_u32(p, key, v, HL_CONF_PENDING_LOGINS_MAX, &n);
		if (rc == 0 && n == 0)
			rc = perr(p, "%s: must be at least 1", key);
		if (rc == 0)
			*cap = n;
		return rc;
	}
	if (strcmp(key, "gateway") == 0) {
		unsigned g = 0;
		int rc = parse_u32(p, key, v, HL_CONF_GATEWAY_MAX, &g);
		if (rc == 0 && g == 0)
			rc = perr(p, "gateway: must be 1 to %u (leave it out for a lone gateway)",
			          HL_CONF_GATEWAY_MAX);
		if (rc == 0)
			c->gateway = g;
		return rc;
	}
	if (strcmp(key, "gateways") == 0)
		return parse_gateways(p, v);
	if (strcmp(key, "discovery_chap_user") == 0)
		return set_str(p, &c->discovery_chap_user, v);
	if (strcmp(key, "discovery_chap_secret") == 0) {
		if (c->discovery_chap_secret && strcmp(v, HL_CONF_SECRET_MASK) == 0)
			return 0; /* what get shows: unchanged */
		warn_short_secret(p, "", key, v);
		return set_str(p, &c->discovery_chap_secret, v);
	}
	return perr(p, "unknown key '%s' in [global]", key);
}

/* ---- [disk NAME] ---- */

static int disk_key(struct parser *p, const char *key, const char *v)
{
	struct hl_conf_disk *d = &p->conf->disks[p->index];

	if (strcmp(key, "origin") == 0) {
		if (!*v)
			return perr(p, "origin: empty");
		if (strstr(v, "%***@") || strstr(v, ":***@")) {
			/* what get shows for a URL with credentials: the running one, unchanged */
			char shown[2 * CONF_MAX_VALUE + 16];
			if (d->origin && strcmp(hl_uri_redact(d->origin, false, shown, sizeof(shown)),
			                        v) == 0)
				return 0;
			return perr(p, "origin: '***' stands for a secret that is not shown: give the "
			               "secret, or use origin_chap_user and origin_chap_secret");
		}
		d->origin_line = p->line;
		return set_str(p, &d->origin, v);
	}
	if (strcmp(key, "origin_chap_user") == 0)
		return set_str(p, &d->ochap.user, v);
	if (strcmp(key, "origin_chap_secret") == 0) {
		if (d->ochap.secret && strcmp(v, HL_CONF_SECRET_MASK) == 0)
			return 0; /* what get shows: unchanged */
		free_secret(&d->ochap.secret);
		return set_str(p, &d->ochap.secret, v);
	}
	if (strcmp(key, "origin_chap_secret_file") == 0) {
		char *secret = NULL;
		int rc;
		if (!p->dup && (rc = read_secret_file(p, key, v, &secret)))
			return rc;
		rc = set_str(p, &d->ochap.secret_file, v);
		if (rc) {
			free_secret(&secret);
			return rc;
		}
		free_secret(&d->ochap.file_secret);
		d->ochap.file_secret = secret;
		return 0;
	}
	if (strcmp(key, "origin_mutual_user") == 0)
		return set_str(p, &d->ochap.mutual_user, v);
	if (strcmp(key, "origin_mutual_secret") == 0) {
		if (d->ochap.mutual_secret && strcmp(v, HL_CONF_SECRET_MASK) == 0)
			return 0;
		free_secret(&d->ochap.mutual_secret);
		return set_str(p, &d->ochap.mutual_secret, v);
	}
	if (strcmp(key, "block_size") == 0) {
		uint64_t x;
		if (hl_parse_size(v, &x) || (x != 512 && x != 4096))
			return perr(p, "block_size: must be 512 or 4096, got '%s'", v);
		d->block_size = (uint32_t)x;
		return 0;
	}
	if (strcmp(key, "read_only") == 0) {
		if (hl_parse_bool(v, &d->read_only))
			return perr(p, "read_only: expected yes or no, got '%s'", v);
		return 0;
	}
	if (strcmp(key, "cache") == 0)
		return set_str(p, &d->cache, v);
	if (strcmp(key, "cache_quota") == 0) {
		if (hl_parse_size(v, &d->cache_quota))
			return perr(p, "cache_quota: '%s' is not a size (e.g. 512M)", v);
		return 0;
	}
	if (strcmp(key, "origin_iops") == 0)
		return parse_u32(p, key, v, 10000000, &d->origin_iops);
	if (strcmp(key, "origin_mbps") == 0)
		return parse_u32(p, key, v, 1000000, &d->origin_mbps);
	if (strcmp(key, "origin_latency_ms") == 0)
		return parse_u32(p, key, v, 60000, &d->origin_latency_ms);
	if (strcmp(key, "rbd_conf") == 0)
		return set_str(p, &d->rbd_conf, v);
	if (strcmp(key, "rbd_id") == 0)
		return set_str(p, &d->rbd_id, v);
	if (strcmp(key, "exclusive") == 0) {
		if (hl_parse_bool(v, &d->exclusive))
			return perr(p, "exclusive: expected yes or no, got '%s'", v);
		return 0;
	}
	if (strcmp(key, "serial") == 0) {
		if (!hl_serial_valid(v))
			return perr(p, "serial: expected 1 to 32 printable ASCII characters "
			               "without blanks, got '%s'", v);
		return set_str(p, &d->serial, v);
	}
	if (strcmp(key, "naa") == 0) {
		uint8_t naa[16];
		if (hl_parse_naa(v, naa))
			return perr(p, "naa: expected 32 hex digits starting with 6 (NAA 6, IEEE "
			               "registered extended), got '%s'", v);
		return set_str(p, &d->naa, v);
	}
	return perr(p, "unknown key '%s' in [disk %s]", key, d->name);
}

/* ---- [cache NAME] ---- */

static int cache_key(struct parser *p, const char *key, const char *v)
{
	struct hl_conf_cache *c = &p->conf->caches[p->index];

	if (strcmp(key, "device") == 0) {
		c->device_line = p->line;
		return set_str(p, &c->device, v);
	}
	if (strcmp(key, "size") == 0) {
		if (hl_parse_size(v, &c->size) || c->size == 0)
			return perr(p, "size: '%s' is not a size (e.g. 2G)", v);
		c->size_line = p->line;
		return 0;
	}
	if (strcmp(key, "block_size") == 0)
		return parse_block_size(p, key, v, 4096, 1 << 20, true, &c->block_size);
	if (strcmp(key, "admission") == 0) {
		uint64_t n;
		if (strcmp(v, "frequency") && strcmp(v, "always") &&
		    !(strncmp(v, "nhit:", 5) == 0 && !hl_parse_u64(v + 5, &n) && n >= 1 && n <= 15))
			return perr(p, "admission: must be frequency, always or nhit:N (N 1..15), got '%s'", v);
		return set_str(p, &c->admission, v);
	}
	if (strcmp(key, "write_policy") == 0) {
		if (strcmp(v, "update") && strcmp(v, "invalidate"))
			return perr(p, "write_policy: must be update or invalidate, got '%s'", v);
		return set_str(p, &c->write_policy, v);
	}
	if (strcmp(key, "update_buffer") == 0) {
		uint64_t x;
		if (strcmp(v, "off") == 0)
			x = 0;
		else if (hl_parse_size(v, &x) || x % 4096 || x > (4ull << 30))
			return perr(p, "update_buffer: must be 0 (off) or a multiple of 4K up to 4G "
			               "(e.g. 16M), got '%s'", v);
		c->update_buffer = x;
		c->update_buffer_set = true;
		return 0;
	}
	if (strcmp(key, "write_budget") == 0) {
		uint32_t x;

		if (strcmp(v, "off") == 0)
			x = 0;
		else if (hl_parse_percent(v, &x))
			return perr(p, "write_budget: must be a percentage 0..100 (e.g. 25%%; 0 or "
			               "off: never relax admission), got '%s'", v);
		c->write_budget = x;
		c->write_budget_set = true;
		return 0;
	}
	return perr(p, "unknown key '%s' in [cache %s]", key, c->name);
}

/* ---- [target IQN] ---- */

static int target_allow(struct parser *p, struct hl_conf_target *t, const char *v)
{
	char buf[CONF_MAX_LINE];
	char *save = NULL;

	hl_strlcpy(buf, v, sizeof(buf));
	for (char *tok = strtok_r(buf, ", \t", &save); tok; tok = strtok_r(NULL, ", \t", &save)) {
		if (strcmp(tok, "ALL") == 0) {
			t->allow_all = true;
			continue;
		}
		if (!valid_iscsi_name(tok))
			return perr(p, "allow: '%s' is not ALL or an iSCSI name (iqn./eui./naa.)", tok);
		int rc = push_str(p, &t->allow, &t->n_allow, tok);
		if (rc)
			return rc;
	}
	return 0;
}

static int target_key(struct parser *p, const char *key, const char *v)
{
	struct hl_conf_target *t = &p->conf->targets[p->index];

	if (strncmp(key, "lun.", 4) == 0) {
		uint64_t n;
		if (hl_parse_u64(key + 4, &n) || n > 255)
			return perr(p, "'%s': LUN numbers go from lun.0 to lun.255", key);
		for (size_t i = 0; i < t->n_luns; i++) {
			if (t->luns[i].lun == n)
				return perr(p, "lun.%llu is defined twice (first at line %d)",
					    (unsigned long long)n, t->luns[i].line);
		}
		if (!*v)
			return perr(p, "%s: names no disk", key);
		struct hl_conf_lun *l = array_push((void **)&t->luns, &t->n_luns, sizeof(*l));
		if (!l)
			return perr(p, "too many LUNs or out of memory");
		l->lun = (uint32_t)n;
		l->line = p->line;
		return set_str(p, &l->disk, v);
	}
	if (strcmp(key, "allow") == 0)
		return target_allow(p, t, v);
	if (strcmp(key, "alias") == 0) {
		if (strlen(v) > 255)
			return perr(p, "alias: longer than 255 bytes");
		return set_str(p, &t->alias, v);
	}
	if (strcmp(key, "chap_user") == 0)
		return set_str(p, &t->chap_user, v);
	if (strcmp(key, "chap_secret") == 0) {
		if (t->chap_secret && strcmp(v, HL_CONF_SECRET_MASK) == 0)
			return 0; /* what get shows: unchanged */
		warn_short_secret(p, t->name, key, v);
		return set_str(p, &t->chap_secret, v);
	}
	if (strcmp(key, "mutual_user") == 0)
		return set_str(p, &t->mutual_user, v);
	if (strcmp(key, "mutual_secret") == 0) {
		if (t->mutual_secret && strcmp(v, HL_CONF_SECRET_MASK) == 0)
			return 0;
		warn_short_secret(p, t->name, key, v);
		return set_str(p, &t->mutual_secret, v);
	}
	if (strcmp(key, "allow_target_reset") == 0) {
		if (hl_parse_bool(v, &t->allow_target_reset))
			return perr(p, "allow_target_reset: expected yes or no, got '%s'", v);
		return 0;
	}
	return perr(p, "unknown key '%s' in [target %s]", key, t->name);
}

/* ---- sections ---- */

static int open_section(struct parser *p, char *hdr)
{
	struct hl_conf *c = p->conf;
	char *kind = hdr, *name;

	while (isspace((unsigned char)*kind))
		kind++;
	name = kind;
	while (*name && !isspace((unsigned char)*name))
		name++;
	if (*name) {
		*name++ = '\0';
		while (isspace((unsigned char)*name))
			name++;
		char *end = name + strlen(name);
		while (end > name && isspace((unsigned char)end[-1]))
			*--end = '\0';
	}

	if (strcmp(kind, "global") == 0) {
		if (*name)
			return perr(p, "[global] takes no name");
		if (p->seen_global)
			return perr(p, "[global] appears twice");
		p->seen_global = true;
		p->global_line = p->line;
		p->kind = SEC_GLOBAL;
		return 0;
	}
	if (!*name)
		return perr(p, "[%s] needs a name, e.g. [%s NAME]", kind, kind);

	if (strcmp(kind, "disk") == 0) {
		if (!valid_name(name))
			return perr(p, "disk name '%s': use letters, digits, '-', '_', '.' (max 64)",
				    name);
		if (hl_conf_find_disk(c, name))
			return perr(p, "[disk %s] is defined twice", name);
		struct hl_conf_disk *d = array_push((void **)&c->disks, &c->n_disks, sizeof(*d));
		if (!d || !(d->name = strdup(name)))
			return perr(p, "out of memory");
		d->line = p->line;
		p->kind = SEC_DISK;
		p->index = c->n_disks - 1;
		return 0;
	}
	if (strcmp(kind, "cache") == 0) {
		if (!valid_name(name))
			return perr(p, "cache name '%s': use letters, digits, '-', '_', '.' (max 64)",
				    name);
		if (hl_conf_find_cache(c, name))
			return perr(p, "[cache %s] is defined twice", name);
		struct hl_conf_cache *k = array_push((void **)&c->caches, &c->n_caches, sizeof(*k));
		if (!k || !(k->name = strdup(name)))
			return perr(p, "out of memory");
		k->line = p->line;
		p->kind = SEC_CACHE;
		p->index = c->n_caches - 1;
		return 0;
	}
	if (strcmp(kind, "target") == 0) {
		if (!valid_iscsi_name(name))
			return perr(p, "'%s' is not a valid iSCSI name (lower-case iqn.YYYY-MM.domain[:id], eui. or naa.)",
				    name);
		for (size_t i = 0; i < c->n_targets; i++) {
			if (strcmp(c->targets[i].name, name) == 0)
				return perr(p, "[target %s] is defined twice", name);
		}
		struct hl_conf_target *t = array_push((void **)&c->targets, &c->n_targets, sizeof(*t));
		if (!t || !(t->name = strdup(name)))
			return perr(p, "out of memory");
		t->line = p->line;
		p->kind = SEC_TARGET;
		p->index = c->n_targets - 1;
		return 0;
	}
	return perr(p, "unknown section [%s] (expected global, disk, cache or target)", kind);
}

/* Strip an inline comment (';' or '#' after whitespace) and surrounding blanks; unquote. */
static int clean_value(struct parser *p, char *v)
{
	char *s = v, *end;

	while (isspace((unsigned char)*s))
		s++;
	if (*s == '"') {
		/* Quoted: \" and \\ are the only escapes; the rest is literal. */
		char *w = v, *r = s + 1;
		for (; *r && *r != '"'; r++) {
			if (*r == '\\' && (r[1] == '"' || r[1] == '\\'))
				r++;
			*w++ = *r;
		}
		if (*r != '"')
			return perr(p, "unterminated quoted value");
		char *rest = r + 1;
		while (isspace((unsigned char)*rest))
			rest++;
		if (*rest && *rest != ';' && *rest != '#')
			return perr(p, "text after the closing quote");
		*w = '\0';
		return 0;
	}
	for (end = s; *end; end++) {
		if ((*end == ';' || *end == '#') && (end == s || isspace((unsigned char)end[-1]))) {
			*end = '\0';
			break;
		}
	}
	end = s + strlen(s);
	while (end > s && isspace((unsigned char)end[-1]))
		*--end = '\0';
	memmove(v, s, strlen(s) + 1);
	return 0;
}

static int parse_line(struct parser *p, char *line)
{
	char *s = line;

	while (isspace((unsigned char)*s))
		s++;
	if (!*s || *s == ';' || *s == '#')
		return 0;
	if (*s == '[') {
		char *close = strchr(s, ']');
		if (!close)
			return perr(p, "section header without ']'");
		char *rest = close + 1;
		while (isspace((unsigned char)*rest))
			rest++;
		if (*rest && *rest != ';' && *rest != '#')
			return perr(p, "text after the section header");
		*close = '\0';
		return open_section(p, s + 1);
	}
	char *eq = strchr(s, '=');
	if (!eq)
		return perr(p, "expected 'key = value' or a [section]");
	char *key = s, *kend = eq;
	while (kend > key && isspace((unsigned char)kend[-1]))
		kend--;
	*kend = '\0';
	if (!*key)
		return perr(p, "missing key before '='");
	char *val = eq + 1;
	int rc = clean_value(p, val);
	if (rc)
		return rc;
	rc = check_value_chars(p, key, val);
	if (rc)
		return rc;

	switch (p->kind) {
	case SEC_GLOBAL:
		return global_key(p, key, val);
	case SEC_DISK:
		return disk_key(p, key, val);
	case SEC_CACHE:
		return cache_key(p, key, val);
	case SEC_TARGET:
		return target_key(p, key, val);
	case SEC_NONE:
	default:
		return perr(p, "'%s' outside any section (start with [global])", key);
	}
}

/* ---- checks across sections ---- */

static int check_chap(struct parser *p, const char *what, const char *user, const char *secret)
{
	if (!user != !secret)
		return perr(p, "%s_user and %s_secret go together", what, what);
	if (secret && (strlen(secret) < 1 || strlen(secret) > 255))
		return perr(p, "%s_secret must be 1..255 bytes", what);
	if (user && strlen(user) > 255)
		return perr(p, "%s_user must be at most 255 bytes", what);
	return 0;
}

/* The [disk] origin_chap_* / origin_mutual_* keys, against the origin URL. */
static int check_origin_chap(struct parser *p, const struct hl_conf_disk *d)
{
	const struct hl_conf_origin_chap *o = &d->ochap;
	bool keys = o->user || o->secret || o->secret_file || o->mutual_user || o->mutual_secret;
	bool url_creds, chap;
	char bare[2 * CONF_MAX_VALUE + 16];

	if (!keys)
		return 0;
	if (strncasecmp(d->origin, "iscsi:", 6) != 0)
		return perr(p, "[disk %s]: origin_chap_* and origin_mutual_* are for iscsi: origins",
		            d->name);
	url_creds = strcmp(hl_uri_redact(d->origin, true, bare, sizeof(bare)), d->origin) != 0;
	if (o->secret && o->secret_file)
		return perr(p, "[disk %s]: origin_chap_secret and origin_chap_secret_file: give one",
		            d->name);
	if (!o->user != !(o->secret || o->secret_file))
		return perr(p, "[disk %s]: origin_chap_user and origin_chap_secret (or "
		            "origin_chap_secret_file) go together", d->name);
	if (o->user && url_creds)
		return perr(p, "[disk %s]: the origin URL has credentials (user%%secret@) and "
		            "origin_chap_user is set: use one of them", d->name);
	if ((o->user && strlen(o->user) > 255) || (o->secret && strlen(o->secret) > 255))
		return perr(p, "[disk %s]: origin_chap_user and _secret are at most 255 bytes",
		            d->name);
	chap = o->user || url_creds;
	if (!o->mutual_user != !o->mutual_secret)
		return perr(p, "[disk %s]: origin_mutual_user and origin_mutual_secret go together",
		            d->name);
	if (o->mutual_user && !chap)
		return perr(p, "[disk %s]: mutual CHAP toward the origin needs origin_chap_user "
		            "and a secret too", d->name);
	if (o->mutual_user && (strlen(o->mutual_user) > 255 || strlen(o->mutual_secret) > 255))
		return perr(p, "[disk %s]: origin_mutual_user and _secret are at most 255 bytes",
		            d->name);
	return 0;
}

static int check(struct parser *p)
{
	struct hl_conf *c = p->conf;
	int rc;

	for (size_t i = 0; i < c->n_disks; i++) {
		struct hl_conf_disk *d = &c->disks[i];
		p->line = d->line;
		if (!d->origin)
			return perr(p, "[disk %s] has no origin", d->name);
		if (!d->block_size)
			d->block_size = 512;
		if (d->cache && !hl_conf_find_cache(c, d->cache))
			return perr(p, "[disk %s] uses cache '%s', which no [cache] section defines",
				    d->name, d->cache);
		if ((rc = check_origin_chap(p, d)))
			return rc;
	}
	for (size_t i = 0; i < c->n_caches; i++) {
		struct hl_conf_cache *k = &c->caches[i];
		p->line = k->line;
		if (!k->device)
			return perr(p, "[cache %s] has no device", k->name);
		if (!k->block_size)
			k->block_size = 64 * 1024;
		if (!k->size)
			return perr(p, "[cache %s] has no size", k->name);
		if (k->size < (uint64_t)k->block_size * 16)
			return perr(p, "[cache %s] size must hold at least 16 blocks", k->name);
	}
	for (size_t i = 0; i < c->n_targets; i++) {
		struct hl_conf_target *t = &c->targets[i];
		p->line = t->line;
		for (size_t j = 0; j < t->n_luns; j++) {
			if (!hl_conf_find_disk(c, t->luns[j].disk)) {
				p->line = t->luns[j].line;
				return perr(p, "lun.%u names disk '%s', which no [disk] section defines",
					    t->luns[j].lun, t->luns[j].disk);
			}
		}
		p->line = t->line;
		if ((rc = check_chap(p, "chap", t->chap_user, t->chap_secret)))
			return rc;
		if ((rc = check_chap(p, "mutual", t->mutual_user, t->mutual_secret)))
			return rc;
		if (t->mutual_user && !t->chap_user)
			return perr(p, "[target %s]: mutual CHAP needs chap_user/chap_secret too",
				    t->name);
		if (t->mutual_secret && t->chap_secret && strcmp(t->mutual_secret, t->chap_secret) == 0)
			return perr(p, "[target %s]: mutual_secret must differ from chap_secret (RFC 7143 9.2.1)",
				    t->name);
	}
	p->line = p->global_line; /* 0 for a configuration built at run time: no FILE:LINE then */
	if (c->n_gateways && !c->gateway)
		return perr(p, "gateways: set gateway = N too (this gateway's id in the list)");
	if (c->gateway) {
		bool listed = false;
		for (size_t i = 0; i < c->n_gateways; i++)
			listed |= c->gateways[i] == c->gateway;
		if (!listed)
			return perr(p, "gateway = %u is not in gateways (list every gateway, this one "
			               "included, e.g. gateways = 1,2)",
			            c->gateway);
	}
	if ((rc = check_chap(p, "discovery_chap", c->discovery_chap_user, c->discovery_chap_secret)))
		return rc;

	if (c->n_portals == 0 && push_str(p, &c->portals, &c->n_portals, "0.0.0.0:3260"))
		return -ENOMEM;
	if (!c->state_dir && set_str(p, &c->state_dir, HL_LOCALSTATEDIR "/lib/hotlun"))
		return -ENOMEM;
	if (!c->control_socket) {
		char buf[4096];
		snprintf(buf, sizeof(buf), "%s/hotlund.sock", c->state_dir);
		if (set_str(p, &c->control_socket, buf))
			return -ENOMEM;
	}
	return 0;
}

static int parse_text(const char *text, size_t len, const char *name, bool dup,
                      struct hl_conf **out, char *err, size_t errlen)
{
	struct parser p = {.name = name, .err = err, .errlen = errlen, .dup = dup};
	char line[CONF_MAX_LINE];
	size_t pos = 0;
	int rc = 0;

	if (errlen)
		err[0] = '\0';
	p.conf = calloc(1, sizeof(*p.conf));
	if (!p.conf)
		return -ENOMEM;
	p.conf->log_level = HL_LOG_NOTICE;
	p.conf->poll_us = -1;
	p.conf->logout_timeout = -1;
	p.conf->path = strdup(name);
	if (!p.conf->path) {
		free(p.conf);
		return -ENOMEM;
	}

	while (pos < len) {
		size_t n = 0;
		p.line++;
		while (pos < len && text[pos] != '\n') {
			if (text[pos] == '\0') {
				rc = perr(&p, "NUL byte in the file");
				goto out;
			}
			if (n + 1 >= sizeof(line)) {
				rc = perr(&p, "line longer than %d bytes", CONF_MAX_LINE - 1);
				goto out;
			}
			line[n++] = text[pos++];
		}
		pos++; /* the newline */
		if (n && line[n - 1] == '\r')
			n--;
		line[n] = '\0';
		rc = parse_line(&p, line);
		if (rc)
			goto out;
	}
	rc = check(&p);
out:
	if (rc) {
		hl_conf_free(p.conf);
		return rc;
	}
	*out = p.conf;
	return 0;
}

int hl_conf_parse(const char *text, size_t len, const char *name, struct hl_conf **out, char *err,
		  size_t errlen)
{
	return parse_text(text, len, name, false, out, err, errlen);
}

int hl_conf_load(const char *path, struct hl_conf **out, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	char *buf = NULL;
	size_t len = 0, cap = 0;
	int rc;

	if (!f) {
		rc = -errno;
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return rc;
	}
	for (;;) {
		if (cap - len < 4096) {
			if (cap > (16u << 20)) {
				fclose(f);
				free(buf);
				snprintf(err, errlen, "%s: larger than 16 MiB", path);
				return -EFBIG;
			}
			cap = cap ? cap * 2 : 8192;
			char *b = realloc(buf, cap);
			if (!b) {
				fclose(f);
				free(buf);
				return -ENOMEM;
			}
			buf = b;
		}
		size_t n = fread(buf + len, 1, cap - len, f);
		len += n;
		if (n == 0)
			break;
	}
	if (ferror(f)) {
		rc = -EIO;
		snprintf(err, errlen, "%s: read error", path);
		fclose(f);
		free(buf);
		return rc;
	}
	fclose(f);
	rc = hl_conf_parse(buf, len, path, out, err, errlen);
	free(buf);
	return rc;
}

static void free_strv(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

static void free_disk(struct hl_conf_disk *d)
{
	free(d->name);
	free(d->origin);
	free(d->cache);
	free(d->rbd_conf);
	free(d->rbd_id);
	free(d->ochap.user);
	free_secret(&d->ochap.secret);
	free(d->ochap.secret_file);
	free_secret(&d->ochap.file_secret);
	free(d->ochap.mutual_user);
	free_secret(&d->ochap.mutual_secret);
	free(d->serial);
	free(d->naa);
}

static void free_cache(struct hl_conf_cache *k)
{
	free(k->name);
	free(k->device);
	free(k->admission);
	free(k->write_policy);
}

static void free_target(struct hl_conf_target *t)
{
	free(t->name);
	free(t->alias);
	for (size_t j = 0; j < t->n_luns; j++)
		free(t->luns[j].disk);
	free(t->luns);
	free_strv(t->allow, t->n_allow);
	free(t->chap_user);
	free(t->chap_secret);
	free(t->mutual_user);
	free(t->mutual_secret);
}

void hl_conf_free(struct hl_conf *c)
{
	if (!c)
		return;
	free(c->path);
	free_strv(c->portals, c->n_portals);
	free(c->state_dir);
	free(c->control_socket);
	free(c->discovery_chap_user);
	free(c->discovery_chap_secret);
	for (size_t i = 0; i < c->n_disks; i++)
		free_disk(&c->disks[i]);
	free(c->disks);
	for (size_t i = 0; i < c->n_caches; i++)
		free_cache(&c->caches[i]);
	free(c->caches);
	for (size_t i = 0; i < c->n_targets; i++)
		free_target(&c->targets[i]);
	free(c->targets);
	free(c);
}

const struct hl_conf_disk *hl_conf_find_disk(const struct hl_conf *c, const char *name)
{
	for (size_t i = 0; i < c->n_disks; i++) {
		if (strcmp(c->disks[i].name, name) == 0)
			return &c->disks[i];
	}
	return NULL;
}

const struct hl_conf_cache *hl_conf_find_cache(const struct hl_conf *c, const char *name)
{
	for (size_t i = 0; i < c->n_caches; i++) {
		if (strcmp(c->caches[i].name, name) == 0)
			return &c->caches[i];
	}
	return NULL;
}

/* ---- writer ---- */

/* Quote a value when the parser would otherwise strip, split or unquote it. */
static void put_kv(FILE *f, const char *key, const char *v)
{
	bool quote = !*v || isspace((unsigned char)v[0]) || isspace((unsigned char)v[strlen(v) - 1]) ||
		     strpbrk(v, ";#\"\\");

	if (!quote) {
		fprintf(f, "%s = %s\n", key, v);
		return;
	}
	fprintf(f, "%s = \"", key);
	for (const char *c = v; *c; c++) {
		if (*c == '"' || *c == '\\')
			fputc('\\', f);
		fputc(*c, f);
	}
	fputs("\"\n", f);
}

/* A size as people write it: "2G", "64K", or plain bytes when not a whole unit. */
static void put_size(FILE *f, const char *key, uint64_t v)
{
	static const char units[] = "KMGT";
	int u = -1;

	while (u < 3 && v && v % 1024 == 0) {
		v /= 1024;
		u++;
	}
	if (u < 0)
		fprintf(f, "%s = %llu\n", key, (unsigned long long)v);
	else
		fprintf(f, "%s = %llu%c\n", key, (unsigned long long)v, units[u]);
}

static void put_opt(FILE *f, const char *key, const char *v)
{
	if (v)
		put_kv(f, key, v);
}

int hl_conf_write(const struct hl_conf *c, FILE *f)
{
	char num[32];
	static const char *const levels[] = {[HL_LOG_ERR] = "err",   [HL_LOG_WARN] = "warn",
					     [HL_LOG_NOTICE] = "notice", [HL_LOG_INFO] = "info",
					     [HL_LOG_DEBUG] = "debug"};

	fprintf(f, "[global]\n");
	for (size_t i = 0; i < c->n_portals; i++)
		put_kv(f, "portal", c->portals[i]);
	put_opt(f, "state_dir", c->state_dir);
	put_opt(f, "control_socket", c->control_socket);
	if (c->log_level >= HL_LOG_ERR && c->log_level <= HL_LOG_DEBUG)
		put_kv(f, "log_level", levels[c->log_level]);
	if (c->threads) {
		snprintf(num, sizeof(num), "%u", c->threads);
		put_kv(f, "threads", num);
	}
	if (c->poll_us >= 0) {
		snprintf(num, sizeof(num), "%d", c->poll_us);
		put_kv(f, "poll_us", num);
	}
	if (c->write_buffer_limit)
		put_size(f, "write_buffer_limit", c->write_buffer_limit);
	if (c->logout_timeout >= 0) {
		snprintf(num, sizeof(num), "%d", c->logout_timeout);
		put_kv(f, "logout_timeout", num);
	}
	if (c->max_pending_logins)
		fprintf(f, "max_pending_logins = %u\n", c->max_pending_logins);
	if (c->max_pending_logins_per_addr)
		fprintf(f, "max_pending_logins_per_addr = %u\n", c->max_pending_logins_per_addr);
	if (c->max_sessions)
		fprintf(f, "max_sessions = %u\n", c->max_sessions);
	if (c->max_sessions_per_addr)
		fprintf(f, "max_sessions_per_addr = %u\n", c->max_sessions_per_addr);
	if (c->gateway)
		fprintf(f, "gateway = %u\n", c->gateway);
	if (c->n_gateways) {
		fprintf(f, "gateways = ");
		for (size_t i = 0; i < c->n_gateways; i++)
			fprintf(f, "%s%u", i ? "," : "", c->gateways[i]);
		fprintf(f, "\n");
	}
	put_opt(f, "discovery_chap_user", c->discovery_chap_user);
	put_opt(f, "discovery_chap_secret", c->discovery_chap_secret);

	for (size_t i = 0; i < c->n_caches; i++) {
		const struct hl_conf_cache *k = &c->caches[i];
		fprintf(f, "\n[cache %s]\n", k->name);
		put_kv(f, "device", k->device);
		put_size(f, "size", k->size);
		put_size(f, "block_size", k->block_size);
		put_opt(f, "admission", k->admission);
		put_opt(f, "write_policy", k->write_policy);
		if (k->update_buffer_set)
			put_size(f, "update_buffer", k->update_buffer);
		if (k->write_budget_set)
			fprintf(f, "write_budget = %u%%\n", k->write_budget);
	}
	for (size_t i = 0; i < c->n_disks; i++) {
		const struct hl_conf_disk *d = &c->disks[i];
		fprintf(f, "\n[disk %s]\n", d->name);
		put_kv(f, "origin", d->origin);
		fprintf(f, "block_size = %u\n", d->block_size);
		if (d->read_only)
			fprintf(f, "read_only = yes\n");
		put_opt(f, "cache", d->cache);
		if (d->cache_quota)
			put_size(f, "cache_quota", d->cache_quota);
		if (d->origin_iops)
			fprintf(f, "origin_iops = %u\n", d->origin_iops);
		if (d->origin_mbps)
			fprintf(f, "origin_mbps = %u\n", d->origin_mbps);
		if (d->origin_latency_ms)
			fprintf(f, "origin_latency_ms = %u\n", d->origin_latency_ms);
		put_opt(f, "rbd_conf", d->rbd_conf);
		put_opt(f, "rbd_id", d->rbd_id);
		put_opt(f, "origin_chap_user", d->ochap.user);
		put_opt(f, "origin_chap_secret", d->ochap.secret);
		put_opt(f, "origin_chap_secret_file", d->ochap.secret_file); /* the path, not the secret */
		put_opt(f, "origin_mutual_user", d->ochap.mutual_user);
		put_opt(f, "origin_mutual_secret", d->ochap.mutual_secret);
		if (d->exclusive)
			fprintf(f, "exclusive = yes\n");
		put_opt(f, "serial", d->serial);
		put_opt(f, "naa", d->naa);
	}
	for (size_t i = 0; i < c->n_targets; i++) {
		const struct hl_conf_target *t = &c->targets[i];
		fprintf(f, "\n[target %s]\n", t->name);
		put_opt(f, "alias", t->alias);
		for (size_t j = 0; j < t->n_luns; j++)
			fprintf(f, "lun.%u = %s\n", t->luns[j].lun, t->luns[j].disk);
		if (t->allow_all)
			fprintf(f, "allow = ALL\n");
		for (size_t j = 0; j < t->n_allow; j++)
			put_kv(f, "allow", t->allow[j]);
		put_opt(f, "chap_user", t->chap_user);
		put_opt(f, "chap_secret", t->chap_secret);
		put_opt(f, "mutual_user", t->mutual_user);
		put_opt(f, "mutual_secret", t->mutual_secret);
		if (t->allow_target_reset)
			fprintf(f, "allow_target_reset = yes\n");
	}
	return ferror(f) ? -EIO : 0;
}

bool hl_conf_same(const struct hl_conf *a, const struct hl_conf *b)
{
	char *ta = NULL, *tb = NULL;
	size_t la = 0, lb = 0;
	FILE *fa = open_memstream(&ta, &la), *fb = open_memstream(&tb, &lb);
	bool same = false;

	if (fa && fb && hl_conf_write(a, fa) == 0 && hl_conf_write(b, fb) == 0) {
		fflush(fa);
		fflush(fb);
		same = la == lb && memcmp(ta, tb, la) == 0;
	}
	if (fa)
		fclose(fa);
	if (fb)
		fclose(fb);
	free(ta);
	free(tb);
	return same;
}

/* ---- changes at run time (control socket, reload) ---- */

static const char *const kind_names[] = {
	[HL_CONF_GLOBAL] = "global",
	[HL_CONF_DISK] = "disk",
	[HL_CONF_CACHE] = "cache",
	[HL_CONF_TARGET] = "target",
};

const struct hl_conf_target *hl_conf_find_target(const struct hl_conf *c, const char *name)
{
	for (size_t i = 0; i < c->n_targets; i++) {
		if (strcmp(c->targets[i].name, name) == 0)
			return &c->targets[i];
	}
	return NULL;
}

/* Point the parser at section (kind, name). @return 0 or -ENOENT with a message. */
static int select_section(struct parser *p, enum hl_conf_kind kind, const char *name)
{
	const void *found = NULL;

	switch (kind) {
	case HL_CONF_GLOBAL:
		p->kind = SEC_GLOBAL;
		return 0;
	case HL_CONF_DISK:
		found = hl_conf_find_disk(p->conf, name);
		p->kind = SEC_DISK;
		if (found)
			p->index = (size_t)((const struct hl_conf_disk *)found - p->conf->disks);
		break;
	case HL_CONF_CACHE:
		found = hl_conf_find_cache(p->conf, name);
		p->kind = SEC_CACHE;
		if (found)
			p->index = (size_t)((const struct hl_conf_cache *)found - p->conf->caches);
		break;
	case HL_CONF_TARGET:
		found = hl_conf_find_target(p->conf, name);
		p->kind = SEC_TARGET;
		if (found)
			p->index = (size_t)((const struct hl_conf_target *)found - p->conf->targets);
		break;
	}
	if (!found) {
		perr(p, "no %s named '%s'", kind_names[kind], name ? name : "");
		return -ENOENT;
	}
	return 0;
}

int hl_conf_dup(const struct hl_conf *c, struct hl_conf **out)
{
	char *buf = NULL, err[512];
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	int rc;

	if (!f)
		return -ENOMEM;
	rc = hl_conf_write(c, f);
	fclose(f);
	if (rc == 0)
		rc = parse_text(buf, len, c->path, true, out, err, sizeof(err));
	if (buf)
		explicit_bzero(buf, len); /* it held the secrets */
	free(buf);
	/* Secrets read from files are not in the text: the copy takes them as read. */
	for (size_t i = 0; rc == 0 && i < (*out)->n_disks; i++) {
		struct hl_conf_disk *d = &(*out)->disks[i];
		const struct hl_conf_disk *src = hl_conf_find_disk(c, d->name);
		if (src && src->ochap.file_secret && d->ochap.secret_file &&
		    !(d->ochap.file_secret = strdup(src->ochap.file_secret))) {
			hl_conf_free(*out);
			*out = NULL;
			rc = -ENOMEM;
		}
	}
	return rc;
}

int hl_conf_section_add(struct hl_conf *c, enum hl_conf_kind kind, const char *name, char *err,
			size_t errlen)
{
	struct parser p = {.name = "config", .err = err, .errlen = errlen, .conf = c};
	char hdr[512];

	if (kind == HL_CONF_GLOBAL || !name || strlen(name) > 300)
		return perr(&p, "bad section");
	p.seen_global = true;
	snprintf(hdr, sizeof(hdr), "%s %s", kind_names[kind], name);
	return open_section(&p, hdr);
}

int hl_conf_section_remove(struct hl_conf *c, enum hl_conf_kind kind, const char *name, char *err,
			   size_t errlen)
{
	struct parser p = {.name = "config", .err = err, .errlen = errlen, .conf = c};
	int rc = select_section(&p, kind, name);

	if (rc)
		return rc;
	switch (kind) {
	case HL_CONF_DISK:
		for (size_t i = 0; i < c->n_targets; i++) {
			for (size_t j = 0; j < c->targets[i].n_luns; j++) {
				if (strcmp(c->targets[i].luns[j].disk, name) == 0)
					return perr(&p, "disk %s is lun.%u of target %s: remove that LUN first",
						    name, c->targets[i].luns[j].lun, c->targets[i].name);
			}
		}
		free_disk(&c->disks[p.index]);
		memmove(&c->disks[p.index], &c->disks[p.index + 1],
			(c->n_disks - p.index - 1) * sizeof(*c->disks));
		c->n_disks--;
		return 0;
	case HL_CONF_CACHE:
		for (size_t i = 0; i < c->n_disks; i++) {
			if (c->disks[i].cache && strcmp(c->disks[i].cache, name) == 0)
				return perr(&p, "cache %s is used by disk %s: detach it first", name,
					    c->disks[i].name);
		}
		free_cache(&c->caches[p.index]);
		memmove(&c->caches[p.index], &c->caches[p.index + 1],
			(c->n_caches - p.index - 1) * sizeof(*c->caches));
		c->n_caches--;
		return 0;
	case HL_CONF_TARGET:
		free_target(&c->targets[p.index]);
		memmove(&c->targets[p.index], &c->targets[p.index + 1],
			(c->n_targets - p.index - 1) * sizeof(*c->targets));
		c->n_targets--;
		return 0;
	case HL_CONF_GLOBAL:
	default:
		return perr(&p, "[global] cannot be removed");
	}
}

int hl_conf_set(struct hl_conf *c, enum hl_conf_kind kind, const char *name, const char *key,
		const char *value, char *err, size_t errlen)
{
	struct parser p = {.name = "config", .err = err, .errlen = errlen, .conf = c};
	int rc = select_section(&p, kind, name);

	if (rc)
		return rc;
	if (strlen(value) > CONF_MAX_VALUE)
		return perr(&p, "%s: value longer than %d bytes", key, CONF_MAX_VALUE);
	rc = check_value_chars(&p, key, value);
	if (rc)
		return rc;
	switch (p.kind) {
	case SEC_GLOBAL:
		return global_key(&p, key, value);
	case SEC_DISK:
		return disk_key(&p, key, value);
	case SEC_CACHE:
		return cache_key(&p, key, value);
	case SEC_TARGET:
		return target_key(&p, key, value);
	default:
		return perr(&p, "bad section");
	}
}

/* Remove one string from a list; @return true when found. */
static bool strv_remove(char **v, size_t *n, const char *s)
{
	for (size_t i = 0; i < *n; i++) {
		if (strcmp(v[i], s) == 0) {
			free(v[i]);
			memmove(&v[i], &v[i + 1], (*n - i - 1) * sizeof(*v));
			(*n)--;
			return true;
		}
	}
	return false;
}

static int unset_str(char **field)
{
	free(*field);
	*field = NULL;
	return 0;
}

int hl_conf_unset(struct hl_conf *c, enum hl_conf_kind kind, const char *name, const char *key,
		  const char *value, char *err, size_t errlen)
{
	struct parser p = {.name = "config", .err = err, .errlen = errlen, .conf = c};
	int rc = select_section(&p, kind, name);

	if (rc)
		return rc;
	if (p.kind == SEC_GLOBAL) {
		if (strcmp(key, "portal") == 0) {
			if (!value || !strv_remove(c->portals, &c->n_portals, value))
				return perr(&p, "no portal %s", value ? value : "(none given)");
			return 0;
		}
		if (strcmp(key, "discovery_chap_user") == 0 || strcmp(key, "discovery_chap_secret") == 0) {
			unset_str(&c->discovery_chap_user);
			return unset_str(&c->discovery_chap_secret);
		}
		if (strcmp(key, "threads") == 0) {
			c->threads = 0;
			return 0;
		}
		if (strcmp(key, "poll_us") == 0) {
			c->poll_us = -1;
			return 0;
		}
		if (strcmp(key, "write_buffer_limit") == 0) {
			c->write_buffer_limit = 0;
			return 0;
		}
		if (strcmp(key, "logout_timeout") == 0) {
			c->logout_timeout = -1;
			return 0;
		}
		if (strcmp(key, "gateway") == 0) {
			c->gateway = 0;
			return 0;
		}
		if (strcmp(key, "gateways") == 0) {
			c->n_gateways = 0;
			return 0;
		}
		if (strcmp(key, "max_pending_logins") == 0) {
			c->max_pending_logins = 0;
			return 0;
		}
		if (strcmp(key, "max_pending_logins_per_addr") == 0) {
			c->max_pending_logins_per_addr = 0;
			return 0;
		}
		if (strcmp(key, "max_sessions") == 0) {
			c->max_sessions = 0;
			return 0;
		}
		if (strcmp(key, "max_sessions_per_addr") == 0) {
			c->max_sessions_per_addr = 0;
			return 0;
		}
		return perr(&p, "%s cannot be unset", key);
	}
	if (p.kind == SEC_DISK) {
		struct hl_conf_disk *d = &c->disks[p.index];
		if (strcmp(key, "cache") == 0)
			return unset_str(&d->cache);
		if (strcmp(key, "rbd_conf") == 0)
			return unset_str(&d->rbd_conf);
		if (strcmp(key, "rbd_id") == 0)
			return unset_str(&d->rbd_id);
		if (strcmp(key, "origin_chap_user") == 0 || strcmp(key, "origin_chap_secret") == 0 ||
		    strcmp(key, "origin_chap_secret_file") == 0) {
			if (d->ochap.mutual_user)
				return perr(&p, "unset origin_mutual_user first");
			unset_str(&d->ochap.user);
			free_secret(&d->ochap.secret);
			free_secret(&d->ochap.file_secret);
			return unset_str(&d->ochap.secret_file);
		}
		if (strcmp(key, "origin_mutual_user") == 0 || strcmp(key, "origin_mutual_secret") == 0) {
			unset_str(&d->ochap.mutual_user);
			free_secret(&d->ochap.mutual_secret);
			return 0;
		}
		if (strcmp(key, "serial") == 0)
			return unset_str(&d->serial);
		if (strcmp(key, "naa") == 0)
			return unset_str(&d->naa);
		if (strcmp(key, "cache_quota") == 0)
			d->cache_quota = 0;
		else if (strcmp(key, "origin_iops") == 0)
			d->origin_iops = 0;
		else if (strcmp(key, "origin_mbps") == 0)
			d->origin_mbps = 0;
		else if (strcmp(key, "origin_latency_ms") == 0)
			d->origin_latency_ms = 0;
		else if (strcmp(key, "read_only") == 0)
			d->read_only = false;
		else if (strcmp(key, "exclusive") == 0)
			d->exclusive = false;
		else
			return perr(&p, "%s cannot be unset", key);
		return 0;
	}
	if (p.kind == SEC_CACHE) {
		struct hl_conf_cache *k = &c->caches[p.index];
		if (strcmp(key, "admission") == 0)
			return unset_str(&k->admission);
		if (strcmp(key, "write_policy") == 0)
			return unset_str(&k->write_policy);
		if (strcmp(key, "update_buffer") == 0) {
			k->update_buffer = 0;
			k->update_buffer_set = false;
			return 0;
		}
		if (strcmp(key, "write_budget") == 0) {
			k->write_budget = 0;
			k->write_budget_set = false;
			return 0;
		}
		return perr(&p, "%s cannot be unset", key);
	}
	struct hl_conf_target *t = &c->targets[p.index];
	if (strcmp(key, "allow") == 0) {
		if (value && strcmp(value, "ALL") == 0 && t->allow_all) {
			t->allow_all = false;
			return 0;
		}
		if (!value || !strv_remove(t->allow, &t->n_allow, value))
			return perr(&p, "target %s does not allow %s", t->name, value ? value : "(none given)");
		return 0;
	}
	if (strncmp(key, "lun.", 4) == 0) {
		uint64_t n;
		if (hl_parse_u64(key + 4, &n))
			return perr(&p, "%s: not a LUN key", key);
		for (size_t i = 0; i < t->n_luns; i++) {
			if (t->luns[i].lun == n) {
				free(t->luns[i].disk);
				memmove(&t->luns[i], &t->luns[i + 1], (t->n_luns - i - 1) * sizeof(*t->luns));
				t->n_luns--;
				return 0;
			}
		}
		return perr(&p, "target %s has no LUN %llu", t->name, (unsigned long long)n);
	}
	if (strcmp(key, "alias") == 0)
		return unset_str(&t->alias);
	if (strcmp(key, "chap_user") == 0 || strcmp(key, "chap_secret") == 0) {
		if (t->mutual_user)
			return perr(&p, "unset mutual CHAP first");
		unset_str(&t->chap_user);
		return unset_str(&t->chap_secret);
	}
	if (strcmp(key, "mutual_user") == 0 || strcmp(key, "mutual_secret") == 0) {
		unset_str(&t->mutual_user);
		return unset_str(&t->mutual_secret);
	}
	if (strcmp(key, "allow_target_reset") == 0) {
		t->allow_target_reset = false;
		return 0;
	}
	return perr(&p, "%s cannot be unset", key);
}

int hl_conf_check(struct hl_conf *c, char *err, size_t errlen)
{
	struct parser p = {.name = c->path, .err = err, .errlen = errlen, .conf = c};
	return check(&p);
}
