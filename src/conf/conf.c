/*
 * conf.c - the INI configuration's parser: lines, sections, one key table
 * per section kind (used by the file and by hl_conf_set alike), FILE:LINE
 * errors, secrets read from files; and freeing and looking up what it
 * built. The checks across sections are in conf_check.c, the writer and
 * the changes at run time in conf_write.c.
 *
 * Syntax: "[section]" or "[kind NAME]", "key = value", comments start with
 * ';' or '#' at the beginning of a line or after whitespace; a value may be
 * double-quoted to keep such characters. Every error names FILE:LINE.
 */
#include "conf/conf_internal.h"
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

int conf_perr(struct conf_parser *p, const char *fmt, ...)
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

int conf_set_str(struct conf_parser *p, char **dst, const char *v)
{
	if (strlen(v) > CONF_MAX_VALUE)
		return conf_perr(p, "value longer than %d bytes", CONF_MAX_VALUE);
	char *s = strdup(v);
	if (!s)
		return conf_perr(p, "out of memory");
	hl_secret_free(*dst); /* any value may be a secret: the old one is wiped */
	*dst = s;
	return 0;
}

int conf_push_str(struct conf_parser *p, char ***arr, size_t *n, const char *v)
{
	if (strlen(v) > CONF_MAX_VALUE)
		return conf_perr(p, "value longer than %d bytes", CONF_MAX_VALUE);
	char **slot = array_push((void **)arr, n, sizeof(char *));
	if (!slot)
		return conf_perr(p, "too many values or out of memory");
	*slot = strdup(v);
	if (!*slot) {
		(*n)--;
		return conf_perr(p, "out of memory");
	}
	return 0;
}

static int parse_u32(struct conf_parser *p, const char *key, const char *v, uint32_t max,
                     uint32_t *out)
{
	uint64_t x;
	if (hl_parse_u64(v, &x) || x > max)
		return conf_perr(p, "%s: expected a whole number from 0 to %u, got '%s'", key, max,
		                 v);
	*out = (uint32_t)x;
	return 0;
}

static int parse_block_size(struct conf_parser *p, const char *key, const char *v, uint64_t min,
                            uint64_t max, bool pow2, uint32_t *out)
{
	uint64_t x;
	if (hl_parse_size(v, &x) || x < min || x > max || (pow2 && (x & (x - 1))))
		return conf_perr(p, "%s: '%s' is not a valid size here (%s%llu..%llu bytes)", key,
		                 v, pow2 ? "power of two, " : "", (unsigned long long)min,
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
		       s[8] == '-' && isdigit((unsigned char)s[9]) &&
		       isdigit((unsigned char)s[10]) && s[11] == '.';
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
static void warn_short_secret(struct conf_parser *p, const char *what, const char *key,
                              const char *v)
{
	if (p->dup || strlen(v) >= HL_CONF_CHAP_SECRET_MIN)
		return;
	if (p->line > 0)
		HL_WARN("conf",
		        "%s:%d: %s%s%s is %zu bytes: RFC 7143 asks for at least %d bytes of "
		        "random (96 bits) against online guessing",
		        p->name, p->line, what, *what ? " " : "", key, strlen(v),
		        HL_CONF_CHAP_SECRET_MIN);
	else
		HL_WARN("conf",
		        "%s%s%s is %zu bytes: RFC 7143 asks for at least %d bytes of "
		        "random (96 bits) against online guessing",
		        what, *what ? " " : "", key, strlen(v), HL_CONF_CHAP_SECRET_MIN);
}

/* Read a secret from `path` (hl_secret_file_read: the file's owner only, checked on the fd). */
static int read_secret_file(struct conf_parser *p, const char *key, const char *path, char **out)
{
	char buf[HL_SECRET_MAX + 1], why[CONF_MAX_VALUE + 200];
	int rc;

	if (!*path || path[0] != '/')
		return conf_perr(p, "%s: '%s' is not an absolute path", key, path);
	rc = hl_secret_file_read(path, buf, sizeof(buf), why, sizeof(why));
	if (rc)
		return conf_perr(p, "%s: %s", key, why);
	*out = strdup(buf);
	explicit_bzero(buf, sizeof(buf));
	return *out ? 0 : conf_perr(p, "out of memory");
}

/* Free and forget a secret. */
void conf_free_secret(char **s)
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
int conf_check_value_chars(struct conf_parser *p, const char *key, const char *v)
{
	for (const unsigned char *c = (const unsigned char *)v; *c; c++) {
		if (*c < 0x20 || *c == 0x7f)
			return conf_perr(
			    p,
			    "%s: control character 0x%02x in the value (values are one "
			    "line of printable text)",
			    key, *c);
	}
	return 0;
}

/* ---- [global] ---- */

/* gateways = 1,2[,...]: every gateway id of the cluster, sorted, no repeats */
static int parse_gateways(struct conf_parser *p, const char *v)
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
		if (end == s || errno || g == 0 || g > HL_CONF_GATEWAY_MAX || *s == '-' ||
		    *s == '+')
			return conf_perr(
			    p, "gateways: '%s' is not a list of gateway ids 1 to %u (e.g. 1,2)", v,
			    HL_CONF_GATEWAY_MAX);
		if (n == HL_CONF_GATEWAYS_MAX)
			return conf_perr(p, "gateways: more than %u gateways",
			                 HL_CONF_GATEWAYS_MAX);
		for (size_t i = 0; i < n; i++)
			if (c->gateways[i] == g)
				return conf_perr(p, "gateways: %lu is listed twice", g);
		c->gateways[n++] = (uint16_t)g;
		s = end;
		if (*s && *s != ',' && *s != ' ')
			return conf_perr(
			    p, "gateways: '%s' is not a list of gateway ids 1 to %u (e.g. 1,2)", v,
			    HL_CONF_GATEWAY_MAX);
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

static int unset_metrics(struct hl_conf *c)
{
	free(c->metrics_listen);
	c->metrics_listen = NULL;
	return 0;
}

int conf_global_key(struct conf_parser *p, const char *key, const char *v)
{
	struct hl_conf *c = p->conf;

	if (strcmp(key, "portal") == 0) {
		struct sockaddr_storage ss;
		unsigned len;
		if (hl_parse_portal(v, 3260, &ss, &len))
			return conf_perr(
			    p, "portal: '%s' is not ADDRESS[:PORT] (IPv6 as [::1]:3260)", v);
		return conf_push_str(p, &c->portals, &c->n_portals, v);
	}
	if (strcmp(key, "state_dir") == 0)
		return conf_set_str(p, &c->state_dir, v);
	if (strcmp(key, "control_socket") == 0)
		return conf_set_str(p, &c->control_socket, v);
	if (strcmp(key, "metrics_listen") == 0) {
		struct sockaddr_storage ss;
		unsigned len;
		if (!strcmp(v, "off") || !strcmp(v, "no") || !strcmp(v, "none"))
			return unset_metrics(c);
		if (!strchr(v, ':') || hl_parse_portal(v, 9520, &ss, &len))
			return conf_perr(p,
			                 "metrics_listen: '%s' is not ADDRESS:PORT (e.g. "
			                 "127.0.0.1:9520, [::1]:9520) or off",
			                 v);
		return conf_set_str(p, &c->metrics_listen, v);
	}
	if (strcmp(key, "log_level") == 0) {
		int l = hl_log_level_parse(v);
		if (l < 0)
			return conf_perr(p, "log_level: '%s' is not err|warn|notice|info|debug", v);
		c->log_level = l;
		return 0;
	}
	if (strcmp(key, "threads") == 0)
		return parse_u32(p, key, v, 64, &c->threads);
	if (strcmp(key, "cpus") == 0) {
		unsigned cpus[HL_CPU_LIST_MAX];
		if (hl_parse_cpu_list(v, cpus, HL_ARRAY_SIZE(cpus)) < 0)
			return conf_perr(p,
			                 "cpus: '%s' is not a CPU list (e.g. 1, 0,2 or 0-3; each "
			                 "CPU once, below %d)",
			                 v, HL_CPU_LIST_MAX);
		return conf_set_str(p, &c->cpus, v);
	}
	if (strcmp(key, "poll_us") == 0) {
		unsigned us = 0;
		int rc = parse_u32(p, key, v, HL_CONF_POLL_US_MAX, &us);
		if (rc == 0)
			c->poll_us = (int)us;
		return rc;
	}
	if (strcmp(key, "send_uring") == 0) {
		bool b;
		if (hl_parse_bool(v, &b))
			return conf_perr(p, "send_uring: expected yes or no, got '%s'", v);
		c->send_uring = b;
		return 0;
	}
	if (strcmp(key, "control_idle_timeout") == 0) {
		unsigned s = 0;
		int rc = parse_u32(p, key, v, HL_CONF_CONTROL_IDLE_MAX, &s);
		if (rc == 0)
			c->control_idle_timeout = (int)s;
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
		if (hl_parse_size(v, &x) || x < HL_CONF_WRITE_BUFFER_MIN ||
		    x > HL_CONF_WRITE_BUFFER_MAX)
			return conf_perr(
			    p,
			    "write_buffer_limit: '%s' is not a size of at least 32M (twice "
			    "the largest transfer)",
			    v);
		c->write_buffer_limit = x;
		return 0;
	}
	if (strcmp(key, "scratch_buffer_limit") == 0) {
		uint64_t x;
		if (hl_parse_size(v, &x) || x < HL_CONF_SCRATCH_BUFFER_MIN ||
		    x > HL_CONF_SCRATCH_BUFFER_MAX)
			return conf_perr(
			    p,
			    "scratch_buffer_limit: '%s' is not a size of at least 16M (the "
			    "largest transfer)",
			    v);
		c->scratch_buffer_limit = x;
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
			rc = conf_perr(p, "%s: must be at least 1", key);
		if (rc == 0)
			*cap = n;
		return rc;
	}
	if (strcmp(key, "gateway") == 0) {
		unsigned g = 0;
		int rc = parse_u32(p, key, v, HL_CONF_GATEWAY_MAX, &g);
		if (rc == 0 && g == 0)
			rc = conf_perr(p,
			               "gateway: must be 1 to %u (leave it out for a lone gateway)",
			               HL_CONF_GATEWAY_MAX);
		if (rc == 0)
			c->gateway = g;
		return rc;
	}
	if (strcmp(key, "gateways") == 0)
		return parse_gateways(p, v);
	if (strcmp(key, "gateway_lease_ms") == 0 || strcmp(key, "gateway_dead_ms") == 0) {
		bool lease = key[8] == 'l';
		unsigned ms = 0;
		int rc = parse_u32(p, key, v, HL_CONF_GATEWAY_MS_MAX, &ms);
		if (rc == 0 && ms < HL_CONF_GATEWAY_MS_MIN)
			rc = conf_perr(p, "%s: must be %u to %u", key, HL_CONF_GATEWAY_MS_MIN,
			               HL_CONF_GATEWAY_MS_MAX);
		if (rc)
			return rc;
		*(lease ? &c->gateway_lease_ms : &c->gateway_dead_ms) = ms;
		*(lease ? &c->gateway_lease_line : &c->gateway_dead_line) = p->line;
		return 0;
	}
	if (strcmp(key, "discovery_chap_user") == 0)
		return conf_set_str(p, &c->discovery_chap_user, v);
	if (strcmp(key, "discovery_chap_secret") == 0) {
		if (c->discovery_chap_secret && strcmp(v, HL_CONF_SECRET_MASK) == 0)
			return 0; /* what get shows: unchanged */
		warn_short_secret(p, "", key, v);
		return conf_set_str(p, &c->discovery_chap_secret, v);
	}
	return conf_perr(p, "unknown key '%s' in [global]", key);
}

/* ---- [disk NAME] ---- */

int conf_disk_key(struct conf_parser *p, const char *key, const char *v)
{
	struct hl_conf_disk *d = &p->conf->disks[p->index];

	if (strcmp(key, "origin") == 0) {
		if (!*v)
			return conf_perr(p, "origin: empty");
		if (strstr(v, "%***@") || strstr(v, ":***@")) {
			/* what get shows for a URL with credentials: the running one, unchanged */
			char shown[2 * CONF_MAX_VALUE + 16];
			if (d->origin &&
			    strcmp(hl_uri_redact(d->origin, false, shown, sizeof(shown)), v) == 0)
				return 0;
			return conf_perr(
			    p, "origin: '***' stands for a secret that is not shown: give the "
			       "secret, or use origin_chap_user and origin_chap_secret");
		}
		d->origin_line = p->line;
		return conf_set_str(p, &d->origin, v);
	}
	if (strcmp(key, "origin_chap_user") == 0)
		return conf_set_str(p, &d->ochap.user, v);
	if (strcmp(key, "origin_chap_secret") == 0) {
		if (d->ochap.secret && strcmp(v, HL_CONF_SECRET_MASK) == 0)
			return 0; /* what get shows: unchanged */
		conf_free_secret(&d->ochap.secret);
		return conf_set_str(p, &d->ochap.secret, v);
	}
	if (strcmp(key, "origin_chap_secret_file") == 0) {
		char *secret = NULL;
		int rc;
		if (!p->dup && (rc = read_secret_file(p, key, v, &secret)))
			return rc;
		rc = conf_set_str(p, &d->ochap.secret_file, v);
		if (rc) {
			conf_free_secret(&secret);
			return rc;
		}
		conf_free_secret(&d->ochap.file_secret);
		d->ochap.file_secret = secret;
		return 0;
	}
	if (strcmp(key, "origin_mutual_user") == 0)
		return conf_set_str(p, &d->ochap.mutual_user, v);
	if (strcmp(key, "origin_mutual_secret") == 0) {
		if (d->ochap.mutual_secret && strcmp(v, HL_CONF_SECRET_MASK) == 0)
			return 0;
		conf_free_secret(&d->ochap.mutual_secret);
		return conf_set_str(p, &d->ochap.mutual_secret, v);
	}
	if (strcmp(key, "block_size") == 0) {
		uint64_t x;
		if (hl_parse_size(v, &x) || (x != 512 && x != 4096))
			return conf_perr(p, "block_size: must be 512 or 4096, got '%s'", v);
		d->block_size = (uint32_t)x;
		return 0;
	}
	if (strcmp(key, "read_only") == 0) {
		if (hl_parse_bool(v, &d->read_only))
			return conf_perr(p, "read_only: expected yes or no, got '%s'", v);
		return 0;
	}
	if (strcmp(key, "cache") == 0)
		return conf_set_str(p, &d->cache, v);
	if (strcmp(key, "cache_quota") == 0) {
		if (hl_parse_size(v, &d->cache_quota))
			return conf_perr(p, "cache_quota: '%s' is not a size (e.g. 512M)", v);
		return 0;
	}
	if (strcmp(key, "shadow_rate") == 0) {
		char num[40];
		size_t n = strlen(v);
		if (n >= 2 && !strcmp(v + n - 2, "/s"))
			n -= 2;
		if (n >= sizeof(num) || !n)
			return conf_perr(p, "shadow_rate: '%s' is not a rate (e.g. 8MiB/s, 0 = off)", v);
		memcpy(num, v, n);
		num[n] = '\0';
		if (hl_parse_size(num, &d->shadow_rate))
			return conf_perr(p, "shadow_rate: '%s' is not a rate (e.g. 8MiB/s, 0 = off)", v);
		d->shadow_rate_set = true;
		return 0;
	}
	if (strcmp(key, "origin_iops") == 0)
		return parse_u32(p, key, v, 10000000, &d->origin_iops);
	if (strcmp(key, "origin_mbps") == 0)
		return parse_u32(p, key, v, 1000000, &d->origin_mbps);
	if (strcmp(key, "origin_latency_ms") == 0)
		return parse_u32(p, key, v, 60000, &d->origin_latency_ms);
	if (strcmp(key, "rbd_conf") == 0)
		return conf_set_str(p, &d->rbd_conf, v);
	if (strcmp(key, "rbd_id") == 0)
		return conf_set_str(p, &d->rbd_id, v);
	if (strcmp(key, "exclusive") == 0) {
		if (hl_parse_bool(v, &d->exclusive))
			return conf_perr(p, "exclusive: expected yes or no, got '%s'", v);
		return 0;
	}
	if (strcmp(key, "serial") == 0) {
		if (!hl_serial_valid(v))
			return conf_perr(p,
			                 "serial: expected 1 to 32 printable ASCII characters "
			                 "without blanks, got '%s'",
			                 v);
		return conf_set_str(p, &d->serial, v);
	}
	if (strcmp(key, "naa") == 0) {
		uint8_t naa[16];
		if (hl_parse_naa(v, naa))
			return conf_perr(p,
			                 "naa: expected 32 hex digits starting with 6 (NAA 6, IEEE "
			                 "registered extended), got '%s'",
			                 v);
		return conf_set_str(p, &d->naa, v);
	}
	return conf_perr(p, "unknown key '%s' in [disk %s]", key, d->name);
}

/* ---- [cache NAME] ---- */

int conf_cache_key(struct conf_parser *p, const char *key, const char *v)
{
	struct hl_conf_cache *c = &p->conf->caches[p->index];

	if (strcmp(key, "device") == 0) {
		c->device_line = p->line;
		return conf_set_str(p, &c->device, v);
	}
	if (strcmp(key, "size") == 0) {
		if (hl_parse_size(v, &c->size) || c->size == 0)
			return conf_perr(p, "size: '%s' is not a size (e.g. 2G)", v);
		c->size_line = p->line;
		return 0;
	}
	if (strcmp(key, "block_size") == 0)
		return parse_block_size(p, key, v, 4096, 1 << 20, true, &c->block_size);
	if (strcmp(key, "admission") == 0) {
		uint64_t n;
		if (strcmp(v, "frequency") && strcmp(v, "always") &&
		    !(strncmp(v, "nhit:", 5) == 0 && !hl_parse_u64(v + 5, &n) && n >= 1 && n <= 15))
			return conf_perr(
			    p, "admission: must be frequency, always or nhit:N (N 1..15), got '%s'",
			    v);
		return conf_set_str(p, &c->admission, v);
	}
	if (strcmp(key, "write_policy") == 0) {
		if (strcmp(v, "update") && strcmp(v, "invalidate"))
			return conf_perr(p, "write_policy: must be update or invalidate, got '%s'",
			                 v);
		return conf_set_str(p, &c->write_policy, v);
	}
	if (strcmp(key, "update_buffer") == 0) {
		uint64_t x;
		if (strcmp(v, "off") == 0)
			x = 0;
		else if (hl_parse_size(v, &x) || x % 4096 || x > (4ull << 30))
			return conf_perr(
			    p,
			    "update_buffer: must be 0 (off) or a multiple of 4K up to 4G "
			    "(e.g. 16M), got '%s'",
			    v);
		c->update_buffer = x;
		c->update_buffer_set = true;
		return 0;
	}
	if (strcmp(key, "write_budget") == 0) {
		uint32_t x;

		if (strcmp(v, "off") == 0)
			x = 0;
		else if (hl_parse_percent(v, &x))
			return conf_perr(
			    p,
			    "write_budget: must be a percentage 0..100 (e.g. 25%%; 0 or "
			    "off: never relax admission), got '%s'",
			    v);
		c->write_budget = x;
		c->write_budget_set = true;
		return 0;
	}
	return conf_perr(p, "unknown key '%s' in [cache %s]", key, c->name);
}

/* ---- [target IQN] ---- */

static int target_allow(struct conf_parser *p, struct hl_conf_target *t, const char *v)
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
			return conf_perr(
			    p, "allow: '%s' is not ALL or an iSCSI name (iqn./eui./naa.)", tok);
		int rc = conf_push_str(p, &t->allow, &t->n_allow, tok);
		if (rc)
			return rc;
	}
	return 0;
}

int conf_target_key(struct conf_parser *p, const char *key, const char *v)
{
	struct hl_conf_target *t = &p->conf->targets[p->index];

	if (strncmp(key, "lun.", 4) == 0) {
		uint64_t n;
		if (hl_parse_u64(key + 4, &n) || n > 255)
			return conf_perr(p, "'%s': LUN numbers go from lun.0 to lun.255", key);
		for (size_t i = 0; i < t->n_luns; i++) {
			if (t->luns[i].lun == n)
				return conf_perr(p, "lun.%llu is defined twice (first at line %d)",
				                 (unsigned long long)n, t->luns[i].line);
		}
		if (!*v)
			return conf_perr(p, "%s: names no disk", key);
		struct hl_conf_lun *l = array_push((void **)&t->luns, &t->n_luns, sizeof(*l));
		if (!l)
			return conf_perr(p, "too many LUNs or out of memory");
		l->lun = (uint32_t)n;
		l->line = p->line;
		return conf_set_str(p, &l->disk, v);
	}
	if (strcmp(key, "allow") == 0)
		return target_allow(p, t, v);
	if (strcmp(key, "alias") == 0) {
		if (strlen(v) > 255)
			return conf_perr(p, "alias: longer than 255 bytes");
		return conf_set_str(p, &t->alias, v);
	}
	if (strcmp(key, "chap_user") == 0)
		return conf_set_str(p, &t->chap_user, v);
	if (strcmp(key, "chap_secret") == 0) {
		if (t->chap_secret && strcmp(v, HL_CONF_SECRET_MASK) == 0)
			return 0; /* what get shows: unchanged */
		warn_short_secret(p, t->name, key, v);
		return conf_set_str(p, &t->chap_secret, v);
	}
	if (strcmp(key, "mutual_user") == 0)
		return conf_set_str(p, &t->mutual_user, v);
	if (strcmp(key, "mutual_secret") == 0) {
		if (t->mutual_secret && strcmp(v, HL_CONF_SECRET_MASK) == 0)
			return 0;
		warn_short_secret(p, t->name, key, v);
		return conf_set_str(p, &t->mutual_secret, v);
	}
	if (strcmp(key, "allow_target_reset") == 0) {
		if (hl_parse_bool(v, &t->allow_target_reset))
			return conf_perr(p, "allow_target_reset: expected yes or no, got '%s'", v);
		return 0;
	}
	return conf_perr(p, "unknown key '%s' in [target %s]", key, t->name);
}

/* ---- sections ---- */

int conf_open_section(struct conf_parser *p, char *hdr)
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
			return conf_perr(p, "[global] takes no name");
		if (p->seen_global)
			return conf_perr(p, "[global] appears twice");
		p->seen_global = true;
		p->global_line = p->line;
		p->kind = SEC_GLOBAL;
		return 0;
	}
	if (!*name)
		return conf_perr(p, "[%s] needs a name, e.g. [%s NAME]", kind, kind);

	if (strcmp(kind, "disk") == 0) {
		if (!valid_name(name))
			return conf_perr(
			    p, "disk name '%s': use letters, digits, '-', '_', '.' (max 64)", name);
		if (hl_conf_find_disk(c, name))
			return conf_perr(p, "[disk %s] is defined twice", name);
		struct hl_conf_disk *d = array_push((void **)&c->disks, &c->n_disks, sizeof(*d));
		if (!d || !(d->name = strdup(name)))
			return conf_perr(p, "out of memory");
		d->line = p->line;
		p->kind = SEC_DISK;
		p->index = c->n_disks - 1;
		return 0;
	}
	if (strcmp(kind, "cache") == 0) {
		if (!valid_name(name))
			return conf_perr(
			    p, "cache name '%s': use letters, digits, '-', '_', '.' (max 64)",
			    name);
		if (hl_conf_find_cache(c, name))
			return conf_perr(p, "[cache %s] is defined twice", name);
		struct hl_conf_cache *k = array_push((void **)&c->caches, &c->n_caches, sizeof(*k));
		if (!k || !(k->name = strdup(name)))
			return conf_perr(p, "out of memory");
		k->line = p->line;
		p->kind = SEC_CACHE;
		p->index = c->n_caches - 1;
		return 0;
	}
	if (strcmp(kind, "target") == 0) {
		if (!valid_iscsi_name(name))
			return conf_perr(p,
			                 "'%s' is not a valid iSCSI name (lower-case "
			                 "iqn.YYYY-MM.domain[:id], eui. or naa.)",
			                 name);
		for (size_t i = 0; i < c->n_targets; i++) {
			if (strcmp(c->targets[i].name, name) == 0)
				return conf_perr(p, "[target %s] is defined twice", name);
		}
		struct hl_conf_target *t =
		    array_push((void **)&c->targets, &c->n_targets, sizeof(*t));
		if (!t || !(t->name = strdup(name)))
			return conf_perr(p, "out of memory");
		t->line = p->line;
		p->kind = SEC_TARGET;
		p->index = c->n_targets - 1;
		return 0;
	}
	return conf_perr(p, "unknown section [%s] (expected global, disk, cache or target)", kind);
}

/* Strip an inline comment (';' or '#' after whitespace) and surrounding blanks; unquote. */
static int clean_value(struct conf_parser *p, char *v)
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
			return conf_perr(p, "unterminated quoted value");
		char *rest = r + 1;
		while (isspace((unsigned char)*rest))
			rest++;
		if (*rest && *rest != ';' && *rest != '#')
			return conf_perr(p, "text after the closing quote");
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

static int parse_line(struct conf_parser *p, char *line)
{
	char *s = line;

	while (isspace((unsigned char)*s))
		s++;
	if (!*s || *s == ';' || *s == '#')
		return 0;
	if (*s == '[') {
		char *close = strchr(s, ']');
		if (!close)
			return conf_perr(p, "section header without ']'");
		char *rest = close + 1;
		while (isspace((unsigned char)*rest))
			rest++;
		if (*rest && *rest != ';' && *rest != '#')
			return conf_perr(p, "text after the section header");
		*close = '\0';
		return conf_open_section(p, s + 1);
	}
	char *eq = strchr(s, '=');
	if (!eq)
		return conf_perr(p, "expected 'key = value' or a [section]");
	char *key = s, *kend = eq;
	while (kend > key && isspace((unsigned char)kend[-1]))
		kend--;
	*kend = '\0';
	if (!*key)
		return conf_perr(p, "missing key before '='");
	char *val = eq + 1;
	int rc = clean_value(p, val);
	if (rc)
		return rc;
	rc = conf_check_value_chars(p, key, val);
	if (rc)
		return rc;

	switch (p->kind) {
	case SEC_GLOBAL:
		return conf_global_key(p, key, val);
	case SEC_DISK:
		return conf_disk_key(p, key, val);
	case SEC_CACHE:
		return conf_cache_key(p, key, val);
	case SEC_TARGET:
		return conf_target_key(p, key, val);
	case SEC_NONE:
	default:
		return conf_perr(p, "'%s' outside any section (start with [global])", key);
	}
}

int conf_parse_text(const char *text, size_t len, const char *name, bool dup, struct hl_conf **out,
                    char *err, size_t errlen)
{
	struct conf_parser p = {.name = name, .err = err, .errlen = errlen, .dup = dup};
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
	p.conf->control_idle_timeout = -1;
	p.conf->send_uring = -1;
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
				rc = conf_perr(&p, "NUL byte in the file");
				goto out;
			}
			if (n + 1 >= sizeof(line)) {
				rc = conf_perr(&p, "line longer than %d bytes", CONF_MAX_LINE - 1);
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
	rc = conf_check(&p);
out:
	explicit_bzero(line, sizeof(line)); /* a secret's line */
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
	return conf_parse_text(text, len, name, false, out, err, errlen);
}

char *conf_grow_wiped(char *buf, size_t used, size_t old_cap, size_t cap)
{
	char *b = malloc(cap);

	if (b && used)
		memcpy(b, buf, used);
	if (buf)
		explicit_bzero(buf, old_cap);
	free(buf);
	return b;
}

int hl_conf_read_fd(int fd, const char *name, struct hl_conf **out, char *err, size_t errlen)
{
	char *buf = NULL;
	size_t len = 0, cap = 0;
	int rc;

	/* read(2), no stdio: no buffer of its own to hold (and leave behind) the secrets */
	for (;;) {
		if (cap - len < 4096) {
			if (cap > (16u << 20)) {
				explicit_bzero(buf, cap);
				free(buf);
				snprintf(err, errlen, "%s: larger than 16 MiB", name);
				return -EFBIG;
			}
			size_t ncap = cap ? cap * 2 : 8192;
			buf = conf_grow_wiped(buf, len, cap, ncap);
			if (!buf)
				return -ENOMEM;
			cap = ncap;
		}
		ssize_t n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			snprintf(err, errlen, "%s: read error: %s", name, strerror(errno));
			explicit_bzero(buf, cap);
			free(buf);
			return rc;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	rc = hl_conf_parse(buf, len, name, out, err, errlen);
	explicit_bzero(buf, cap);
	free(buf);
	return rc;
}

int hl_conf_load(const char *path, struct hl_conf **out, char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	int rc;

	if (fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return rc;
	}
	rc = hl_conf_read_fd(fd, path, out, err, errlen);
	close(fd);
	return rc;
}

static void free_strv(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

void conf_free_disk(struct hl_conf_disk *d)
{
	free(d->name);
	free(d->origin);
	free(d->cache);
	free(d->rbd_conf);
	free(d->rbd_id);
	free(d->ochap.user);
	conf_free_secret(&d->ochap.secret);
	free(d->ochap.secret_file);
	conf_free_secret(&d->ochap.file_secret);
	free(d->ochap.mutual_user);
	conf_free_secret(&d->ochap.mutual_secret);
	free(d->serial);
	free(d->naa);
}

void conf_free_cache(struct hl_conf_cache *k)
{
	free(k->name);
	free(k->device);
	free(k->admission);
	free(k->write_policy);
}

void conf_free_target(struct hl_conf_target *t)
{
	free(t->name);
	free(t->alias);
	for (size_t j = 0; j < t->n_luns; j++)
		free(t->luns[j].disk);
	free(t->luns);
	free_strv(t->allow, t->n_allow);
	free(t->chap_user);
	conf_free_secret(&t->chap_secret);
	free(t->mutual_user);
	conf_free_secret(&t->mutual_secret);
}

void hl_conf_free(struct hl_conf *c)
{
	if (!c)
		return;
	free(c->path);
	free_strv(c->portals, c->n_portals);
	free(c->state_dir);
	free(c->control_socket);
	free(c->metrics_listen);
	free(c->cpus);
	free(c->discovery_chap_user);
	conf_free_secret(&c->discovery_chap_secret);
	for (size_t i = 0; i < c->n_disks; i++)
		conf_free_disk(&c->disks[i]);
	free(c->disks);
	for (size_t i = 0; i < c->n_caches; i++)
		conf_free_cache(&c->caches[i]);
	free(c->caches);
	for (size_t i = 0; i < c->n_targets; i++)
		conf_free_target(&c->targets[i]);
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

const struct hl_conf_target *hl_conf_find_target(const struct hl_conf *c, const char *name)
{
	for (size_t i = 0; i < c->n_targets; i++) {
		if (strcmp(c->targets[i].name, name) == 0)
			return &c->targets[i];
	}
	return NULL;
}
