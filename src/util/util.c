/*
 * util.c - number, size and address parsing shared by the config parser,
 * the control socket and the tools; reading and wiping secrets.
 */
#include "hotlun/util.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

int hl_parse_u64(const char *s, uint64_t *out)
{
	uint64_t v = 0;

	if (!s || !*s)
		return -EINVAL;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -EINVAL;
		unsigned d = (unsigned)(*s - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

int hl_parse_percent(const char *s, uint32_t *out)
{
	char num[8];
	size_t n = s ? strlen(s) : 0;
	uint64_t v;
	int rc;

	if (n && s[n - 1] == '%')
		n--;
	if (n == 0 || n >= sizeof(num))
		return -EINVAL;
	memcpy(num, s, n);
	num[n] = 0;
	rc = hl_parse_u64(num, &v);
	if (rc)
		return rc;
	if (v > 100)
		return -ERANGE;
	*out = (uint32_t)v;
	return 0;
}

int hl_parse_size(const char *s, uint64_t *out)
{
	char num[32];
	size_t n = 0;
	unsigned shift = 0;
	uint64_t v;
	int rc;

	if (!s)
		return -EINVAL;
	while (s[n] >= '0' && s[n] <= '9') {
		if (n + 1 >= sizeof(num))
			return -ERANGE;
		num[n] = s[n];
		n++;
	}
	if (n == 0)
		return -EINVAL;
	num[n] = '\0';
	rc = hl_parse_u64(num, &v);
	if (rc)
		return rc;

	const char *suffix = s + n;
	switch (toupper((unsigned char)*suffix)) {
	case '\0':
		break;
	case 'K':
		shift = 10;
		break;
	case 'M':
		shift = 20;
		break;
	case 'G':
		shift = 30;
		break;
	case 'T':
		shift = 40;
		break;
	case 'B':
		if (suffix[1] != '\0')
			return -EINVAL;
		break;
	default:
		return -EINVAL;
	}
	if (shift) {
		suffix++;
		if (strcasecmp(suffix, "") != 0 && strcasecmp(suffix, "B") != 0 &&
		    strcasecmp(suffix, "iB") != 0)
			return -EINVAL;
		if (v > (UINT64_MAX >> shift))
			return -ERANGE;
		v <<= shift;
	}
	*out = v;
	return 0;
}

int hl_parse_naa(const char *s, uint8_t out[16])
{
	uint8_t v[16];

	if (!s)
		return -EINVAL;
	if (!strncasecmp(s, "naa.", 4))
		s += 4;
	if (strlen(s) != 32 || s[0] != '6')
		return -EINVAL;
	for (int i = 0; i < 32; i++) {
		int c = (unsigned char)s[i], d;
		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			d = c - 'A' + 10;
		else
			return -EINVAL;
		if (i % 2 == 0)
			v[i / 2] = (uint8_t)(d << 4);
		else
			v[i / 2] |= (uint8_t)d;
	}
	memcpy(out, v, 16);
	return 0;
}

bool hl_serial_valid(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n < 1 || n > 32)
		return false;
	for (size_t i = 0; i < n; i++)
		if (s[i] < 0x21 || s[i] > 0x7e)
			return false;
	return true;
}

int hl_parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = {"yes", "true", "on", "1"};
	static const char *const no[] = {"no", "false", "off", "0"};

	if (!s)
		return -EINVAL;
	for (size_t i = 0; i < HL_ARRAY_SIZE(yes); i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*out = true;
			return 0;
		}
		if (strcasecmp(s, no[i]) == 0) {
			*out = false;
			return 0;
		}
	}
	return -EINVAL;
}

/* One decimal CPU number at *s, below HL_CPU_LIST_MAX; advances *s. */
static int cpu_number(const char **s, unsigned *out)
{
	unsigned v = 0;
	const char *p = *s;

	if (*p < '0' || *p > '9')
		return -EINVAL;
	while (*p >= '0' && *p <= '9') {
		v = v * 10 + (unsigned)(*p++ - '0');
		if (v >= HL_CPU_LIST_MAX)
			return -EINVAL;
	}
	*s = p;
	*out = v;
	return 0;
}

int hl_parse_cpu_list(const char *s, unsigned *cpus, size_t max)
{
	uint64_t seen[HL_CPU_LIST_MAX / 64] = {0};
	size_t n = 0;

	if (!s || !*s)
		return -EINVAL;
	for (;;) {
		unsigned lo, hi;
		if (cpu_number(&s, &lo))
			return -EINVAL;
		hi = lo;
		if (*s == '-') {
			s++;
			if (cpu_number(&s, &hi) || hi < lo)
				return -EINVAL;
		}
		for (unsigned c = lo; c <= hi; c++) {
			if (n == max || (seen[c / 64] & (1ull << (c % 64))))
				return -EINVAL;
			seen[c / 64] |= 1ull << (c % 64);
			cpus[n++] = c;
		}
		if (*s == '\0')
			return (int)n;
		if (*s++ != ',')
			return -EINVAL;
	}
}

const char *hl_format_size(uint64_t v, char *buf, size_t len)
{
	static const char units[] = "KMGTPE";
	int u = -1;
	double d = (double)v;

	while (d >= 1024.0 && u < 5) {
		d /= 1024.0;
		u++;
	}
	if (u < 0)
		snprintf(buf, len, "%llu", (unsigned long long)v);
	else if (d == (double)(uint64_t)d)
		snprintf(buf, len, "%llu%c", (unsigned long long)d, units[u]);
	else
		snprintf(buf, len, "%.1f%c", d, units[u]);
	return buf;
}

size_t hl_strlcpy(char *dst, const char *src, size_t n)
{
	size_t len = strlen(src);

	if (n) {
		size_t c = len < n - 1 ? len : n - 1;
		memcpy(dst, src, c);
		dst[c] = '\0';
	}
	return len;
}

void hl_secret_free(char *s)
{
	if (s) {
		explicit_bzero(s, strlen(s));
		free(s);
	}
}

__attribute__((noinline)) void hl_secret_wipe_stack(void)
{
	char pad[64 * 1024];

	explicit_bzero(pad, sizeof(pad));
}

int hl_secret_file_read(const char *path, char *buf, size_t len, char *err, size_t errlen)
{
	char raw[2 * HL_SECRET_MAX + 2];
	struct stat st;
	ssize_t n;
	size_t sl;
	int fd, rc = 0;

	if (len < HL_SECRET_MAX + 1) {
		snprintf(err, errlen, "%s: no room for a secret", path);
		return -EINVAL;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return rc;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		snprintf(err, errlen, "%s is not a regular file", path);
		return -EINVAL;
	}
	if (st.st_mode & (S_IRWXG | S_IRWXO)) {
		close(fd);
		snprintf(err, errlen,
		         "%s is accessible to its group or others (mode %04o): chmod 600 it", path,
		         (unsigned)(st.st_mode & 07777));
		return -EPERM;
	}
	if (st.st_uid != geteuid()) {
		close(fd);
		snprintf(err, errlen, "%s belongs to uid %u, not to the user reading it (uid %u)",
		         path, (unsigned)st.st_uid, (unsigned)geteuid());
		return -EPERM;
	}
	n = read(fd, raw, sizeof(raw) - 1);
	if (n < 0)
		rc = -errno;
	close(fd);
	if (rc) {
		snprintf(err, errlen, "%s: %s", path, strerror(-rc));
		return rc;
	}
	raw[n] = '\0';
	sl = strcspn(raw, "\r\n");
	raw[sl] = '\0';
	for (size_t i = 0; i < sl && !rc; i++) {
		if ((unsigned char)raw[i] < 0x20 || raw[i] == 0x7f) {
			snprintf(err, errlen, "%s: the secret has a control character", path);
			rc = -EINVAL;
		}
	}
	if (!rc && (sl < 1 || sl > HL_SECRET_MAX)) {
		snprintf(err, errlen, "%s: the first line must hold the secret (1..%d bytes)", path,
		         HL_SECRET_MAX);
		rc = -EINVAL;
	}
	if (!rc)
		memcpy(buf, raw, sl + 1);
	explicit_bzero(raw, sizeof(raw));
	return rc;
}

/* Append [s, s+n) to buf at *o, keeping room for the terminator. */
static void append(char *buf, size_t len, size_t *o, const char *s, size_t n)
{
	size_t room = len - 1 - *o;

	if (n > room)
		n = room;
	memcpy(buf + *o, s, n);
	*o += n;
}

/*
 * The userinfo ends at the last '@' before the first '/' after "//": the
 * rule the iscsi origin's parser uses, so what it takes as the secret is
 * what is hidden here. No byte of a secret is ever copied, so a truncated
 * result cannot hold part of one.
 */
static void redact_once(const char *uri, bool strip, char *buf, size_t len)
{
	const char *p = uri;
	size_t o = 0;
	bool at_auth = false; /* p is where an authority starts (a userinfo was just hidden) */

	while (*p) {
		const char *auth = p, *end, *at = NULL;

		if (!at_auth) {
			const char *sep = strstr(p, "://");

			if (!sep) {
				append(buf, len, &o, p, strlen(p));
				break;
			}
			auth = sep + 3;
			append(buf, len, &o, p, (size_t)(auth - p));
		}
		/*
		 * What follows a hidden userinfo sits where an authority starts
		 * in the result: read it as one again, or a second pass (a map
		 * read back, a log line redacted twice) would find a "user%secret@"
		 * the first one let through.
		 */
		bool again = at_auth; /* its "***@" already stands for this one too */
		at_auth = false;
		end = auth + strcspn(auth, "/");
		for (const char *c = auth; c < end; c++) {
			if (*c == '@')
				at = c;
		}
		p = auth;
		if (!at) {
			/* "user%secret" that lost its '@' cannot be a host: hide it too */
			const char *pct = memchr(auth, '%', (size_t)(end - auth));
			/*
			 * ... and a secret with '/' in it (base64 has them) puts its
			 * '@' after the first '/': the parser refuses such a URL, but
			 * the refusal shows it, so hide up to that '@' (the last one
			 * before the next blank or "://"; no IQN holds an '@'), after
			 * "user%" or "user:" alike.
			 */
			bool sep = pct || memchr(auth, ':', (size_t)(end - auth));
			const char *late = NULL;
			for (const char *c = end;
			     sep && *c && !isspace((unsigned char)*c) && strncmp(c, "://", 3) != 0;
			     c++) {
				if (*c == '@')
					late = c;
			}
			if (late) {
				if (!strip && !again) {
					/* the user as the '@' case below keeps it: a second pass
					 * agrees */
					append(buf, len, &o, auth, strcspn(auth, "%:") + 1);
					append(buf, len, &o, "***@", 4);
				}
				p = late + 1;
				at_auth = true;
			} else if (pct) {
				/* (stripped: an identity without the secret, as with its '@') */
				if (!strip) {
					append(buf, len, &o, auth, (size_t)(pct - auth) + 1);
					append(buf, len, &o, "***", 3);
				}
				p = end;
			}
			continue;
		}
		if (!strip && !again) {
			size_t user = strcspn(auth, "%:");

			if (auth + user < at)
				append(buf, len, &o, auth, user + 1); /* the user and its separator */
			append(buf, len, &o, "***@", 4);
		}
		p = at + 1;
		at_auth = true;
	}
	buf[o] = '\0';
}

/*
 * One pass hides every secret it finds, but what it removes can join text
 * into a new "user%secret@" (the '@' a secret with '/' ends at is found up
 * to the next blank or "://", and those may be the bytes removed). Passes
 * run until one changes nothing, so the result is what a second redaction
 * would give: the cache map strips the origin it stores and again when it
 * reads it back, and the two must match; a log line redacted twice reads
 * the same.
 *
 * Stripped, every pass keeps a subsequence of its input, so a pass that
 * changes anything shortens it: at most strlen passes, and nothing else
 * would do (the result is the disk's identity in the cache map, which must
 * not collide with another disk's). Unstripped, "***" may stand for fewer
 * bytes than it hides, and a text built to hide one more byte a pass (e.g.
 * hundreds of "://" before an '@') would take a pass a byte: after
 * REDACT_PASSES_MAX passes such a text is shown as its scheme, "://" and "***",
 * which hides everything after it and is its own redaction.
 */
#define REDACT_PASSES_MAX 64

static void redact_fallback(const char *uri, char *buf, size_t len)
{
	const char *sep = strstr(uri, "://");
	size_t o = 0;

	if (sep) {
		append(buf, len, &o, uri, (size_t)(sep - uri));
		append(buf, len, &o, "://***", 6);
	} else {
		append(buf, len, &o, uri, strlen(uri)); /* (a pass changes nothing here) */
	}
	buf[o] = '\0';
}

const char *hl_uri_redact(const char *uri, bool strip, char *buf, size_t len)
{
	if (!len)
		return buf;
	redact_once(uri, strip, buf, len);
	size_t passes = strip ? strlen(buf) + 1 : REDACT_PASSES_MAX;
	for (size_t i = 1;; i++) {
		char *prev = strdup(buf);

		if (!prev) {
			if (!strip)
				redact_fallback(uri, buf, len); /* (certainly its own redaction) */
			break;
		}
		redact_once(prev, strip, buf, len);
		bool same = strcmp(prev, buf) == 0;
		explicit_bzero(prev, strlen(prev));
		free(prev);
		if (same)
			break;
		if (i >= passes) {
			redact_fallback(uri, buf, len);
			break;
		}
	}
	return buf;
}

uint64_t hl_hash64(const void *data, size_t len, uint64_t seed)
{
	const uint8_t *p = data;
	uint64_t h = 0xcbf29ce484222325ull ^ seed;

	for (size_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

int hl_parse_portal(const char *s, uint16_t default_port, struct sockaddr_storage *ss,
		    unsigned *sslen)
{
	char host[INET6_ADDRSTRLEN + 1];
	const char *port_str = NULL;
	uint64_t port = default_port;
	size_t hlen;

	if (!s || !*s)
		return -EINVAL;
	if (s[0] == '[') {
		const char *end = strchr(s, ']');
		if (!end)
			return -EINVAL;
		hlen = (size_t)(end - s - 1);
		if (hlen == 0 || hlen >= sizeof(host))
			return -EINVAL;
		memcpy(host, s + 1, hlen);
		host[hlen] = '\0';
		if (end[1] == ':')
			port_str = end + 2;
		else if (end[1] != '\0')
			return -EINVAL;
	} else {
		const char *colon = strchr(s, ':');
		if (colon && strchr(colon + 1, ':'))
			return -EINVAL; /* a bare IPv6 address needs brackets */
		hlen = colon ? (size_t)(colon - s) : strlen(s);
		if (hlen == 0 || hlen >= sizeof(host))
			return -EINVAL;
		memcpy(host, s, hlen);
		host[hlen] = '\0';
		if (colon)
			port_str = colon + 1;
	}
	if (port_str && (hl_parse_u64(port_str, &port) || port > 65535))
		return -EINVAL;

	memset(ss, 0, sizeof(*ss));
	struct sockaddr_in *sin = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;
	if (inet_pton(AF_INET, host, &sin->sin_addr) == 1) {
		sin->sin_family = AF_INET;
		sin->sin_port = htons((uint16_t)port);
		*sslen = sizeof(*sin);
		return 0;
	}
	if (inet_pton(AF_INET6, host, &sin6->sin6_addr) == 1) {
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons((uint16_t)port);
		*sslen = sizeof(*sin6);
		return 0;
	}
	return -EINVAL;
}

const char *hl_format_sockaddr(const struct sockaddr_storage *ss, char *buf, size_t len)
{
	char host[INET6_ADDRSTRLEN];

	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)ss;
		inet_ntop(AF_INET, &sin->sin_addr, host, sizeof(host));
		snprintf(buf, len, "%s:%u", host, ntohs(sin->sin_port));
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)ss;
		inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof(host));
		snprintf(buf, len, "[%s]:%u", host, ntohs(sin6->sin6_port));
	} else {
		snprintf(buf, len, "?");
	}
	return buf;
}
