/*
 * conf_internal.h - what the files of src/conf share: the parser's state (one
 * per text parsed, or per change made at run time), its limits, and the
 * functions one file offers another (prefix conf_). Nothing here is exported.
 *
 *   conf.c        the parser: lines, sections, each section's keys, FILE:LINE
 *                 errors; freeing and looking up what it built
 *   conf_check.c  the checks across sections once a text is read, and defaults
 *   conf_write.c  the writer (saveconfig, hl_conf_same, hl_conf_dup) and the
 *                 changes at run time (sections added/removed, keys set/unset)
 */
#ifndef HL_CONF_INTERNAL_H
#define HL_CONF_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "hotlun/conf.h"

#define CONF_MAX_LINE  4096
#define CONF_MAX_VALUE 1024 /* so a written (escaped) line always fits CONF_MAX_LINE */
#define CONF_MAX_ITEMS 4096 /* per list: disks, targets, luns, portals... */

enum conf_section_kind { SEC_NONE, SEC_GLOBAL, SEC_DISK, SEC_CACHE, SEC_TARGET };

struct conf_parser {
	const char *name;
	int line;
	char *err;
	size_t errlen;
	struct hl_conf *conf;
	enum conf_section_kind kind;
	size_t index; /* the current disk/cache/target, in its array */
	bool seen_global;
	int global_line; /* line of [global], for errors found after the file is read */
	bool dup;        /* hl_conf_dup: the text was written by us; no files, no warnings */
};

/* ---- conf.c: the parser ---- */
/** Write "NAME:LINE: message" (the message alone when p->line is 0) into p->err. @return -EINVAL */
int conf_perr(struct conf_parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/** Replace *dst with a copy of v (at most CONF_MAX_VALUE bytes). @return 0 or conf_perr's. */
int conf_set_str(struct conf_parser *p, char **dst, const char *v);
/** Append a copy of v to a list of strings (CONF_MAX_ITEMS at most). @return 0 or conf_perr's. */
int conf_push_str(struct conf_parser *p, char ***arr, size_t *n, const char *v);
/** Free and forget a secret (its bytes are wiped first). */
void conf_free_secret(char **s);
/**
 * buf (used of old_cap bytes) moved to a new block of cap bytes, the old one
 * wiped and freed: a configuration's text holds its secrets, and realloc
 * would leave them in the block it frees. NULL when out of memory (buf is
 * gone then too).
 */
char *conf_grow_wiped(char *buf, size_t used, size_t old_cap, size_t cap);
/** Free what a section owns (not the section itself: it lives in its conf's array). */
void conf_free_disk(struct hl_conf_disk *d);
void conf_free_cache(struct hl_conf_cache *k);
void conf_free_target(struct hl_conf_target *t);
/** Refuse a value with a control character: a value is one line of the file. */
int conf_check_value_chars(struct conf_parser *p, const char *key, const char *v);
/** One key of the section p points at (p->index), with the file's rules. @return 0 or -errno. */
int conf_global_key(struct conf_parser *p, const char *key, const char *v);
int conf_disk_key(struct conf_parser *p, const char *key, const char *v);
int conf_cache_key(struct conf_parser *p, const char *key, const char *v);
int conf_target_key(struct conf_parser *p, const char *key, const char *v);
/** Open "[kind NAME]" (hdr is "kind NAME", changed in place): a new section p then points at. */
int conf_open_section(struct conf_parser *p, char *hdr);
/**
 * Parse a whole text into *out (the caller's, freed with hl_conf_free), then conf_check it.
 * dup: the text was written by hl_conf_write (hl_conf_dup): no secret files read, no warnings.
 */
int conf_parse_text(const char *text, size_t len, const char *name, bool dup, struct hl_conf **out,
                    char *err, size_t errlen);

/* ---- conf_check.c ---- */
/** The checks across sections, and the defaults that depend on them. @return 0 or -errno. */
int conf_check(struct conf_parser *p);

#endif
