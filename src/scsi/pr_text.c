/*
 * pr_text.c - the text form of a persistent reservation state: version 1
 * is the APTPL file in state_dir (generation, type, holder, registrations;
 * written by pr.c, read back at start), version 2 the record the gateways
 * of a shared disk keep (also the sequence number, APTPL, the SPC-2 holder
 * and the last changes with their side effects, pr_shared.c). One line per
 * item, names without blanks (a login accepts no other), so a damaged or
 * foreign text is refused whole, never half read.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "scsi/scsi_internal.h"

#define PR_MAGIC_V1 "hotlun-pr 1"
#define PR_MAGIC_V2 "hotlun-pr 2"

struct textbuf {
	char *p;
	size_t len, cap;
	bool failed;
};

static void tb_printf(struct textbuf *tb, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void tb_printf(struct textbuf *tb, const char *fmt, ...)
{
	va_list ap;

	if (tb->failed)
		return;
	for (;;) {
		size_t room = tb->cap - tb->len;
		va_start(ap, fmt);
		int n = vsnprintf(tb->p ? tb->p + tb->len : NULL, tb->p ? room : 0, fmt, ap);
		va_end(ap);
		if (n < 0) {
			tb->failed = true;
			return;
		}
		if (tb->p && (size_t)n < room) {
			tb->len += (size_t)n;
			return;
		}
		size_t cap = tb->cap ? tb->cap : 1024;
		while (cap < tb->len + (size_t)n + 1)
			cap *= 2;
		char *p = realloc(tb->p, cap);
		if (!p) {
			tb->failed = true;
			return;
		}
		tb->p = p;
		tb->cap = cap;
	}
}

/* A name that the line format can carry (no blanks, printable); "" is written as "-". */
static bool name_ok(const char *s)
{
	for (; *s; s++)
		if (*s <= 0x20 || *s >= 0x7f)
			return false;
	return true;
}

int scsi_pr_format(const struct scsi_pr_state *st, const struct scsi_pr_change *changes, unsigned n,
                   char **out, size_t *len)
{
	struct textbuf tb = {0};
	bool v2 = changes != NULL;

	for (unsigned i = 0; i < st->n_regs; i++)
		if (!st->regs[i].initiator_port[0] || !name_ok(st->regs[i].initiator_port))
			return -EINVAL;
	if (!name_ok(st->rsv2_port))
		return -EINVAL;
	if (v2)
		tb_printf(&tb,
		          "%s\nseq %" PRIu64 "\ngeneration %" PRIu32 "\ntype %u %d\naptpl %d\n",
		          PR_MAGIC_V2, st->seq, st->generation, st->type,
		          st->type ? st->holder : -1, st->aptpl ? 1 : 0);
	else
		tb_printf(&tb, "%s\ngeneration %" PRIu32 "\ntype %u %d\n", PR_MAGIC_V1,
		          st->generation, st->type, st->type ? st->holder : -1);
	if (v2 && st->rsv2)
		tb_printf(&tb, "rsv2 %u %s\n", st->rsv2_rel,
		          st->rsv2_port[0] ? st->rsv2_port : "-");
	for (unsigned i = 0; i < st->n_regs; i++) {
		const struct scsi_pr_reg *r = &st->regs[i];
		tb_printf(&tb, "reg %016" PRIx64 " %u %u %s\n", r->key, r->rel_port,
		          r->all_tg_pt ? 1 : 0, r->initiator_port);
	}
	for (unsigned k = 0; v2 && k < n; k++) {
		const struct scsi_pr_change *c = &changes[k];
		if (!name_ok(c->by_port))
			continue;
		tb_printf(&tb, "change %" PRIu64 " %u %s%s\n", c->seq, c->by_rel,
		          c->by_port[0] ? c->by_port : "-", c->lost ? " lost" : "");
		for (unsigned j = 0; j < c->n; j++) {
			const struct scsi_pr_fx *f = &c->fx[j];
			if (!f->to.initiator_port[0] || !name_ok(f->to.initiator_port))
				continue;
			tb_printf(&tb, "fx %c %02x %02x %u %u %s\n",
			          f->kind == SCSI_PR_FX_ABORT ? 'a' : 'u', f->asc, f->ascq,
			          f->to.rel_port, f->to.all_tg_pt ? 1 : 0, f->to.initiator_port);
		}
	}
	tb_printf(&tb, "end\n");
	if (tb.failed) {
		free(tb.p);
		return -ENOMEM;
	}
	*out = tb.p;
	*len = tb.len;
	return 0;
}

/* The next line of text into line (NUL-terminated, without '\n'). @return false at the end. */
static bool next_line(const char **pos, const char *end, char *line, size_t room, bool *toolong)
{
	const char *p = *pos, *nl;

	if (p >= end)
		return false;
	nl = memchr(p, '\n', (size_t)(end - p));
	size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
	*pos = nl ? nl + 1 : end;
	if (n >= room) {
		*toolong = true;
		n = room - 1;
	}
	memcpy(line, p, n);
	line[n] = '\0';
	return true;
}

/* "PORT" at the end of a line (after %n): a name, "-" for the empty one. */
static bool tail_port(const char *s, char *port, size_t len, bool dash_ok)
{
	if (!*s || strlen(s) >= len || !name_ok(s))
		return false;
	if (dash_ok && strcmp(s, "-") == 0)
		s = "";
	hl_strlcpy(port, s, len);
	return true;
}

/*
 * Is the last registration one of the others again (same port, target port
 * and ALL_TG_PT)? The rules never make one (a nexus registered already is
 * changed, not added), and which key would that nexus hold?
 */
static bool reg_twice(const struct scsi_pr_state *st)
{
	const struct scsi_pr_reg *r = &st->regs[st->n_regs - 1];

	for (unsigned i = 0; i + 1 < st->n_regs; i++) {
		const struct scsi_pr_reg *q = &st->regs[i];
		if (q->all_tg_pt == r->all_tg_pt && (q->all_tg_pt || q->rel_port == r->rel_port) &&
		    strcasecmp(q->initiator_port, r->initiator_port) == 0)
			return true;
	}
	return false;
}

int scsi_pr_parse(const char *text, size_t len, struct scsi_pr_state *st,
                  struct scsi_pr_change *changes, unsigned *n_changes)
{
	const char *pos = text, *end = text + len;
	char line[640];
	bool toolong = false, ok = false, v2;
	unsigned type = 0, nch = 0;
	int rc = -EBADMSG;
	int holder = -1;
	struct scsi_pr_change *cur = NULL;

	scsi_pr_state_fini(st);
	if (n_changes)
		*n_changes = 0;
	if (len == 0)
		return 0;
	if (!next_line(&pos, end, line, sizeof(line), &toolong))
		goto bad;
	if (strcmp(line, PR_MAGIC_V1) == 0)
		v2 = false;
	else if (strcmp(line, PR_MAGIC_V2) == 0)
		v2 = true;
	else
		goto bad;
	/*
	 * The next change is seq + 1: at 2^64 - 1 it would be 0, which every
	 * gateway takes as older than its copy, and none would apply it.
	 */
	if (v2 && (!next_line(&pos, end, line, sizeof(line), &toolong) ||
	           sscanf(line, "seq %" SCNu64, &st->seq) != 1 || st->seq == UINT64_MAX))
		goto bad;
	if (!next_line(&pos, end, line, sizeof(line), &toolong) ||
	    sscanf(line, "generation %" SCNu32, &st->generation) != 1)
		goto bad;
	if (!next_line(&pos, end, line, sizeof(line), &toolong) ||
	    sscanf(line, "type %u %d", &type, &holder) != 2)
		goto bad;
	if (type && !scsi_pr_type_valid((uint8_t)type))
		goto bad;
	if (v2) {
		int aptpl;
		if (!next_line(&pos, end, line, sizeof(line), &toolong) ||
		    sscanf(line, "aptpl %d", &aptpl) != 1 || aptpl < 0 || aptpl > 1)
			goto bad;
		st->aptpl = aptpl;
	} else {
		st->aptpl = true; /* the file exists only while APTPL is on */
	}
	while (next_line(&pos, end, line, sizeof(line), &toolong)) {
		uint64_t key;
		unsigned rel, all, a, b;
		int at = 0;
		char kind;

		if (toolong)
			goto bad;
		if (strcmp(line, "end") == 0) {
			ok = true;
			break;
		}
		if (strncmp(line, "reg ", 4) == 0 && !cur) {
			if (sscanf(line, "reg %" SCNx64 " %u %u %n", &key, &rel, &all, &at) != 3 ||
			    !at || rel > 0xffff || all > 1 || key == 0 ||
			    st->n_regs >= SCSI_PR_MAX_REGS)
				goto bad;
			struct scsi_pr_reg *r = scsi_pr_reg_add(st);
			if (!r) {
				rc = -ENOMEM;
				goto bad;
			}
			if (!tail_port(line + at, r->initiator_port, sizeof(r->initiator_port),
			               false))
				goto bad;
			r->rel_port = (uint16_t)rel;
			r->all_tg_pt = all;
			r->key = key;
			if (reg_twice(st))
				goto bad;
		} else if (v2 && strncmp(line, "rsv2 ", 5) == 0 && !cur) {
			if (sscanf(line, "rsv2 %u %n", &rel, &at) != 1 || !at || rel > 0xffff ||
			    !tail_port(line + at, st->rsv2_port, sizeof(st->rsv2_port), true))
				goto bad;
			st->rsv2 = true;
			st->rsv2_rel = (uint16_t)rel;
		} else if (v2 && strncmp(line, "change ", 7) == 0) {
			uint64_t seq;
			if (sscanf(line, "change %" SCNu64 " %u %n", &seq, &rel, &at) != 2 || !at ||
			    rel > 0xffff)
				goto bad;
			char *lost = strstr(line + at, " lost");
			if (lost)
				*lost = '\0';
			if (!changes || nch == SCSI_PR_HISTORY) {
				cur = NULL; /* not kept: its fx lines are skipped */
				continue;
			}
			cur = &changes[nch++];
			scsi_pr_change_init(cur, NULL);
			cur->seq = seq;
			cur->by_rel = (uint16_t)rel;
			cur->lost = lost != NULL;
			if (!tail_port(line + at, cur->by_port, sizeof(cur->by_port), true))
				goto bad;
		} else if (v2 && strncmp(line, "fx ", 3) == 0) {
			struct scsi_pr_reg to = {0};
			if (sscanf(line, "fx %c %x %x %u %u %n", &kind, &a, &b, &rel, &all, &at) !=
			        5 ||
			    !at || (kind != 'a' && kind != 'u') || a > 0xff || b > 0xff ||
			    rel > 0xffff || all > 1 ||
			    !tail_port(line + at, to.initiator_port, sizeof(to.initiator_port),
			               false))
				goto bad;
			if (!cur)
				continue;
			if (cur->n >= SCSI_PR_FX_MAX)
				goto bad;
			to.rel_port = (uint16_t)rel;
			to.all_tg_pt = all;
			scsi_pr_fx_push(cur, kind == 'a' ? SCSI_PR_FX_ABORT : SCSI_PR_FX_UA, &to,
			                (uint8_t)a, (uint8_t)b);
		} else {
			goto bad;
		}
	}
	if (!ok ||
	    (type && !scsi_pr_type_all_registrants((uint8_t)type) &&
	     (holder < 0 || holder >= (int)st->n_regs)) ||
	    (type && st->n_regs == 0))
		goto bad;
	st->type = (uint8_t)type;
	st->holder = type && !scsi_pr_type_all_registrants(st->type) ? holder : -1;
	if (n_changes)
		*n_changes = nch;
	return 0;
bad:
	for (unsigned k = 0; k < nch; k++)
		scsi_pr_change_fini(&changes[k]);
	scsi_pr_state_fini(st);
	return rc;
}
