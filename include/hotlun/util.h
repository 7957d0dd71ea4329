/*
 * util.h - small helpers every module may use: an intrusive list, big-endian
 * field accessors for wire formats, size and number parsing, array length.
 */
#ifndef HOTLUN_UTIL_H
#define HOTLUN_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define HL_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define HL_MIN(a, b)     ((a) < (b) ? (a) : (b))
#define HL_MAX(a, b)     ((a) > (b) ? (a) : (b))
#define HL_DIV_ROUND_UP(n, d) (((n) + (d)-1) / (d))
#define HL_ALIGN_UP(n, a)     (HL_DIV_ROUND_UP(n, a) * (a))
#define hl_container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))
#define HL_UNUSED __attribute__((unused))
#define hl_likely(x)   __builtin_expect(!!(x), 1)
#define hl_unlikely(x) __builtin_expect(!!(x), 0)

/* ---- intrusive doubly linked list (circular, with a head node) ---- */

struct hl_list {
	struct hl_list *next, *prev;
};

#define HL_LIST_INIT(name) { &(name), &(name) }

static inline void hl_list_init(struct hl_list *h)
{
	h->next = h->prev = h;
}

static inline bool hl_list_empty(const struct hl_list *h)
{
	return h->next == h;
}

static inline void hl_list_insert_(struct hl_list *n, struct hl_list *prev, struct hl_list *next)
{
	next->prev = n;
	n->next = next;
	n->prev = prev;
	prev->next = n;
}

/** Append n at the tail of h. */
static inline void hl_list_add_tail(struct hl_list *h, struct hl_list *n)
{
	hl_list_insert_(n, h->prev, h);
}

/** Insert n at the head of h. */
static inline void hl_list_add(struct hl_list *h, struct hl_list *n)
{
	hl_list_insert_(n, h, h->next);
}

/** Unlink n and make it an empty list (so a second del is harmless). */
static inline void hl_list_del(struct hl_list *n)
{
	n->next->prev = n->prev;
	n->prev->next = n->next;
	n->next = n->prev = n;
}

#define hl_list_entry(ptr, type, member) hl_container_of(ptr, type, member)
#define hl_list_first(h, type, member)   hl_list_entry((h)->next, type, member)

#define hl_list_for_each_entry(pos, head, member)                                                  \
	for (pos = hl_list_entry((head)->next, __typeof__(*pos), member); &pos->member != (head);   \
	     pos = hl_list_entry(pos->member.next, __typeof__(*pos), member))

#define hl_list_for_each_entry_safe(pos, tmp, head, member)                                        \
	for (pos = hl_list_entry((head)->next, __typeof__(*pos), member),                           \
	    tmp = hl_list_entry(pos->member.next, __typeof__(*pos), member);                        \
	     &pos->member != (head);                                                               \
	     pos = tmp, tmp = hl_list_entry(tmp->member.next, __typeof__(*tmp), member))

/* ---- big-endian wire accessors (SCSI and iSCSI are big-endian) ---- */

static inline uint16_t hl_get_be16(const void *p)
{
	const uint8_t *b = p;
	return (uint16_t)(b[0] << 8 | b[1]);
}

static inline uint32_t hl_get_be24(const void *p)
{
	const uint8_t *b = p;
	return (uint32_t)b[0] << 16 | (uint32_t)b[1] << 8 | b[2];
}

static inline uint32_t hl_get_be32(const void *p)
{
	const uint8_t *b = p;
	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

static inline uint64_t hl_get_be64(const void *p)
{
	const uint8_t *b = p;
	return (uint64_t)hl_get_be32(b) << 32 | hl_get_be32(b + 4);
}

static inline void hl_put_be16(void *p, uint16_t v)
{
	uint8_t *b = p;
	b[0] = (uint8_t)(v >> 8);
	b[1] = (uint8_t)v;
}

static inline void hl_put_be24(void *p, uint32_t v)
{
	uint8_t *b = p;
	b[0] = (uint8_t)(v >> 16);
	b[1] = (uint8_t)(v >> 8);
	b[2] = (uint8_t)v;
}

static inline void hl_put_be32(void *p, uint32_t v)
{
	uint8_t *b = p;
	b[0] = (uint8_t)(v >> 24);
	b[1] = (uint8_t)(v >> 16);
	b[2] = (uint8_t)(v >> 8);
	b[3] = (uint8_t)v;
}

static inline void hl_put_be64(void *p, uint64_t v)
{
	hl_put_be32(p, (uint32_t)(v >> 32));
	hl_put_be32((uint8_t *)p + 4, (uint32_t)v);
}

/* ---- parsing ---- */

/**
 * Parse a size with an optional binary suffix: "4096", "64K", "2G", "1T"
 * (K/M/G/T, optional "iB"/"B"). @return 0 or -EINVAL/-ERANGE.
 */
int hl_parse_size(const char *s, uint64_t *out);

/** Parse a whole unsigned decimal number (no sign, no junk). @return 0 or -EINVAL/-ERANGE. */
int hl_parse_u64(const char *s, uint64_t *out);

/** Parse a whole percentage 0..100, "25" or "25%". @return 0 or -EINVAL/-ERANGE. */
int hl_parse_percent(const char *s, uint32_t *out);

/** Parse "yes|no|true|false|on|off|1|0". @return 0 or -EINVAL. */
int hl_parse_bool(const char *s, bool *out);

#define HL_CPU_LIST_MAX 1024 /* CPU numbers in a list are below this */

/**
 * Parse a CPU list as taskset and /proc/irq/N/smp_affinity_list write
 * them: "1", "0,2", "0-3,8-11" (no spaces). Stores up to @max CPU numbers
 * in @cpus, in the order given. @return how many (>= 1), or -EINVAL (bad
 * syntax, a CPU of HL_CPU_LIST_MAX or more, a range that runs backwards, a
 * CPU twice, more than @max CPUs).
 */
int hl_parse_cpu_list(const char *s, unsigned *cpus, size_t max);

/**
 * Parse an NAA 6 (IEEE Registered Extended) designator: 32 hex digits, the
 * first one 6 (NAA 6, then the 24-bit IEEE company id, 36 bits vendor
 * specific, 64 bits extension), optionally after "naa." as Linux shows it.
 * @return 0 (out filled, 16 bytes) or -EINVAL.
 */
int hl_parse_naa(const char *s, uint8_t out[16]);

/**
 * A VPD 80h unit serial number the config may set: 1 to 32 printable ASCII
 * characters, no blank (SPC-4 wants ASCII; a blank would be trimmed by
 * tools that compare serials). @return true when s is one.
 */
bool hl_serial_valid(const char *s);

/** Format a byte count with a binary suffix ("64K", "1.5G") into buf. */
const char *hl_format_size(uint64_t v, char *buf, size_t len);

/** strdup that aborts on failure is NOT provided: allocation failures are -ENOMEM. */

/** Copy at most n-1 bytes and always terminate. @return strlen(src). */
size_t hl_strlcpy(char *dst, const char *src, size_t n);

/**
 * An origin URI fit to leave the process (control replies, SNMP, logs,
 * errors, files in state_dir): every "SCHEME://USERINFO@" in uri (wrappers
 * such as "throttle(...):iscsi://..." nest several) loses its secret.
 * USERINFO is "user%secret" or "user:secret" and becomes "user%***" or
 * "user:***"; without a separator all of it is taken as secret ("***").
 * With strip, the whole "USERINFO@" is dropped instead (an identity that
 * does not change with the credentials). Truncates to len - 1 bytes.
 * Redacting the result again changes nothing (the cache map relies on it
 * with strip; a log line redacted twice reads the same). Unstripped, a text
 * built so that each pass would hide one byte more is shown as its scheme
 * and "://" followed by "***".
 * @return buf.
 */
const char *hl_uri_redact(const char *uri, bool strip, char *buf, size_t len);

/* ---- secrets ---- */

/** Longest secret (CHAP: RFC 7143 allows 255 bytes; hl_secret_file_read's buffer needs one more).
 */
#define HL_SECRET_MAX 255

/** Wipe the string s (explicit_bzero, which the compiler keeps) and free it. NULL is fine. */
void hl_secret_free(char *s);

/**
 * Read a secret from the file at path: a regular file owned by the effective
 * user with no group or other permission bits (chmod 600); its first line is
 * the secret, 1..HL_SECRET_MAX bytes without a control character. The checks
 * are made on the opened descriptor (the file checked is the file read), and
 * a FIFO cannot make the open hang. Every copy but buf is wiped.
 * @param buf   receives the secret; at least HL_SECRET_MAX + 1 bytes
 * @param err   on failure, why, starting with path ("PATH is accessible to ...")
 * @return 0, or -errno (-EPERM for the ownership and mode checks, -EINVAL for
 *         the content) with err set.
 */
int hl_secret_file_read(const char *path, char *buf, size_t len, char *err, size_t errlen);

/**
 * Overwrite 64 KiB of the calling thread's stack below the caller's frame.
 * The dead frames of the configuration parser, of printf (writing a
 * configuration) and of control handlers keep copies of the secrets they
 * handled until something deeper reuses them; call this from a shallow
 * frame once such work is done (hotlund after start, the control thread
 * after each request).
 */
void hl_secret_wipe_stack(void);

/** 64-bit FNV-1a, for stable identifiers derived from names. */
uint64_t hl_hash64(const void *data, size_t len, uint64_t seed);

/*
 * A time read before a lock, made to never go back under it: *latest is the
 * latest time passed in (kept under the caller's lock). Callers that read
 * the clock and then take a lock shared by several reactors may bring a
 * time earlier than one another reactor stored meanwhile; unsigned
 * differences against that stored time would wrap.
 */
static inline uint64_t hl_time_forward(uint64_t *latest, uint64_t now)
{
	if (now < *latest)
		return *latest;
	*latest = now;
	return now;
}

/** A strong 64-bit mixer (the splitmix64 finaliser): hash of an integer key. */
static inline uint64_t hl_mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

/**
 * Parse "host:port", "[v6]:port", "host" (default_port used) into a sockaddr.
 * Numeric addresses only (no DNS on the target). @return 0 or -EINVAL.
 */
struct sockaddr_storage;
int hl_parse_portal(const char *s, uint16_t default_port, struct sockaddr_storage *ss,
		    unsigned *sslen);

/** Format an address as "1.2.3.4:3260" or "[::1]:3260". */
const char *hl_format_sockaddr(const struct sockaddr_storage *ss, char *buf, size_t len);

#endif
