/*
 * pr_state.c - the rules of persistent reservations (SPC-4 5.12: register,
 * reserve, release, clear, preempt, move) as functions of a state of their
 * own: an old state and one checked PERSISTENT RESERVE OUT give the new
 * state, the verdict and the side effects (which I_T nexuses get which unit
 * attention, whose tasks are aborted). Side effects name I_T nexus
 * *identities* (initiator port + relative target port), not sessions, so
 * that every gateway of a shared disk can apply them to the nexuses it has.
 * Also here: the conflict rules by type (SPC-4 table 63) and the PERSISTENT
 * RESERVE IN data; the text form of a state is pr_text.c's.
 *
 * No locks, no I/O, no LU: pr.c and pr_shared.c decide where a state lives
 * and who may change it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "scsi/scsi_internal.h"

#define PR_PARAM_LEN 24
/* REGISTER with SPEC_I_PT: room for 64 of the longest TransportIDs */
#define PR_SPEC_MAX (PR_PARAM_LEN + 4 + 64 * (4 + 256))

bool scsi_pr_type_valid(uint8_t t)
{
	return t == SCSI_PR_WE || t == SCSI_PR_EA || (t >= SCSI_PR_WE_RO && t <= SCSI_PR_EA_AR);
}

bool scsi_pr_type_all_registrants(uint8_t t)
{
	return t == SCSI_PR_WE_AR || t == SCSI_PR_EA_AR;
}

/* Types under which every registrant may access the medium. */
static bool type_registrants_access(uint8_t t)
{
	return t >= SCSI_PR_WE_RO && t <= SCSI_PR_EA_AR;
}

static bool type_write_exclusive(uint8_t t)
{
	return t == SCSI_PR_WE || t == SCSI_PR_WE_RO || t == SCSI_PR_WE_AR;
}

/* ---- state ---- */

void scsi_pr_state_init(struct scsi_pr_state *st)
{
	memset(st, 0, sizeof(*st));
	st->holder = -1;
}

void scsi_pr_state_fini(struct scsi_pr_state *st)
{
	free(st->regs);
	scsi_pr_state_init(st);
}

int scsi_pr_state_copy(struct scsi_pr_state *dst, const struct scsi_pr_state *src)
{
	struct scsi_pr_reg *regs = NULL;

	if (src->n_regs) {
		regs = malloc(src->n_regs * sizeof(*regs));
		if (!regs)
			return -ENOMEM;
		memcpy(regs, src->regs, src->n_regs * sizeof(*regs));
	}
	free(dst->regs);
	*dst = *src;
	dst->regs = regs;
	dst->cap = src->n_regs;
	return 0;
}

/* Room for `more` registrations beyond n_regs. @return false: over the limit or no memory. */
static bool regs_reserve(struct scsi_pr_state *st, unsigned more)
{
	unsigned want = st->n_regs + more;

	if (want > SCSI_PR_MAX_REGS)
		return false;
	if (want <= st->cap)
		return true;
	unsigned cap = st->cap ? st->cap : 8;
	while (cap < want)
		cap *= 2;
	struct scsi_pr_reg *r = realloc(st->regs, cap * sizeof(*r));
	if (!r)
		return false;
	st->regs = r;
	st->cap = cap;
	return true;
}

/* A new zeroed registration at the end (room reserved by the caller). */
static struct scsi_pr_reg *reg_append(struct scsi_pr_state *st)
{
	struct scsi_pr_reg *r = &st->regs[st->n_regs++];

	memset(r, 0, sizeof(*r));
	return r;
}

struct scsi_pr_reg *scsi_pr_reg_add(struct scsi_pr_state *st)
{
	return regs_reserve(st, 1) ? reg_append(st) : NULL;
}

/* Remove registration i; the holder index follows (a removed holder becomes -1). */
static void reg_del(struct scsi_pr_state *st, int i)
{
	memmove(&st->regs[i], &st->regs[i + 1],
	        (st->n_regs - (unsigned)i - 1) * sizeof(st->regs[0]));
	st->n_regs--;
	if (st->holder == i)
		st->holder = -1;
	else if (st->holder > i)
		st->holder--;
}

static void reservation_clear(struct scsi_pr_state *st)
{
	st->type = 0;
	st->holder = -1;
}

bool scsi_pr_port_matches(const char *reg_port, const char *port)
{
	/* iSCSI names compare without case (RFC 3722 folds them to lower case) */
	if (strcasecmp(reg_port, port) == 0)
		return true;
	if (strstr(reg_port, ",i,0x") || strstr(reg_port, ",I,0X"))
		return false;
	size_t n = strlen(reg_port);
	return n && strncasecmp(reg_port, port, n) == 0 && strncasecmp(port + n, ",i,0x", 5) == 0;
}

bool scsi_pr_reg_matches(const struct scsi_pr_reg *r, const char *port, uint16_t rel)
{
	return (r->all_tg_pt || r->rel_port == rel) &&
	       scsi_pr_port_matches(r->initiator_port, port);
}

int scsi_pr_find(const struct scsi_pr_state *st, const struct scsi_pr_who *who)
{
	for (unsigned i = 0; i < st->n_regs; i++) {
		if (scsi_pr_reg_matches(&st->regs[i], who->port, who->rel))
			return (int)i;
	}
	return -1;
}

bool scsi_pr_is_holder(const struct scsi_pr_state *st, int i)
{
	if (i < 0 || !st->type)
		return false;
	return scsi_pr_type_all_registrants(st->type) || st->holder == i;
}

bool scsi_pr_conflicts(const struct scsi_pr_state *st, const struct scsi_pr_who *who,
                       unsigned flags)
{
	if (!st->type || (flags & SCSI_F_PR_ALLOW))
		return false;
	int i = scsi_pr_find(st, who);
	if (scsi_pr_is_holder(st, i))
		return false;
	if (i >= 0 && type_registrants_access(st->type))
		return false;
	if ((flags & SCSI_F_PR_READ) && type_write_exclusive(st->type))
		return false;
	return true;
}

/* ---- side effects ---- */

void scsi_pr_change_init(struct scsi_pr_change *c, const struct scsi_pr_who *by)
{
	memset(c, 0, sizeof(*c));
	if (by) {
		hl_strlcpy(c->by_port, by->port, sizeof(c->by_port));
		c->by_rel = by->rel;
	}
}

void scsi_pr_change_fini(struct scsi_pr_change *c)
{
	free(c->fx);
	c->fx = NULL;
	c->n = c->cap = 0;
}

int scsi_pr_change_copy(struct scsi_pr_change *dst, const struct scsi_pr_change *src)
{
	*dst = *src;
	dst->fx = NULL;
	dst->cap = 0;
	if (!src->n)
		return 0;
	dst->fx = malloc(src->n * sizeof(*dst->fx));
	if (!dst->fx) {
		dst->n = 0;
		return -ENOMEM;
	}
	memcpy(dst->fx, src->fx, src->n * sizeof(*dst->fx));
	dst->cap = src->n;
	return 0;
}

void scsi_pr_fx_push(struct scsi_pr_change *c, uint8_t kind, const struct scsi_pr_reg *to,
                     uint8_t asc, uint8_t ascq)
{
	if (c->n == c->cap) {
		unsigned cap = c->cap ? 2 * c->cap : 8;
		struct scsi_pr_fx *fx = realloc(c->fx, cap * sizeof(*fx));
		if (!fx) {
			c->lost = true;
			return;
		}
		c->fx = fx;
		c->cap = cap;
	}
	struct scsi_pr_fx *f = &c->fx[c->n++];
	f->kind = kind;
	f->asc = asc;
	f->ascq = ascq;
	f->to = *to;
	f->to.key = 0;
}

static void ua_for_reg(struct scsi_pr_change *c, const struct scsi_pr_reg *r, uint8_t asc,
                       uint8_t ascq)
{
	scsi_pr_fx_push(c, SCSI_PR_FX_UA, r, asc, ascq);
}

/* A unit attention for every registrant's nexuses (the issuer's is left out when applied). */
static void ua_for_registrants(const struct scsi_pr_state *st, struct scsi_pr_change *c,
                               uint8_t asc, uint8_t ascq)
{
	for (unsigned i = 0; i < st->n_regs; i++)
		ua_for_reg(c, &st->regs[i], asc, ascq);
}

/* ---- verdicts ---- */

static void v_good(struct scsi_pr_verdict *v)
{
	memset(v, 0, sizeof(*v));
	v->status = HL_SAM_GOOD;
}

static void v_conflict(struct scsi_pr_verdict *v)
{
	memset(v, 0, sizeof(*v));
	v->status = HL_SAM_RESERVATION_CONFLICT;
}

static void v_sense(struct scsi_pr_verdict *v, uint8_t asc, uint8_t ascq)
{
	memset(v, 0, sizeof(*v));
	v->status = HL_SAM_CHECK_CONDITION;
	v->asc = asc;
	v->ascq = ascq;
}

static void v_field(struct scsi_pr_verdict *v, bool in_cdb, uint16_t byte, int bit)
{
	if (in_cdb)
		v_sense(v, SCSI_ASC_INVALID_FIELD_CDB);
	else
		v_sense(v, SCSI_ASC_INVALID_FIELD_PARAM);
	v->field = true;
	v->in_cdb = in_cdb;
	v->byte = byte;
	v->bit = (int8_t)bit;
}

/* ---- PERSISTENT RESERVE OUT ---- */

bool scsi_pr_out_parse(const uint8_t *cdb, const uint8_t *data, uint32_t dlen,
                       const struct scsi_pr_caps *caps, struct scsi_pr_req *req,
                       struct scsi_pr_verdict *v)
{
	uint32_t plen = hl_get_be32(cdb + 5);

	memset(req, 0, sizeof(*req));
	req->sa = cdb[1] & 0x1f;
	req->scope = cdb[2] >> 4;
	req->type = cdb[2] & 0x0f;
	if (req->sa > SCSI_PRO_REGISTER_MOVE) {
		/* REPLACE LOST RESERVATION and later service actions are not supported */
		v_field(v, true, 1, 4);
		return false;
	}
	if (req->sa == SCSI_PRO_REGISTER_MOVE ? plen < PR_PARAM_LEN + 4 || plen > 24 + 4 + 256
	                                      : plen < PR_PARAM_LEN || plen > PR_SPEC_MAX) {
		v_sense(v, SCSI_ASC_PARAM_LIST_LEN);
		return false;
	}
	if (dlen < plen) {
		v_sense(v, SCSI_ASC_INVALID_FIELD_IU);
		return false;
	}
	req->param = data;
	req->plen = plen;
	req->key = hl_get_be64(data);
	req->sa_key = hl_get_be64(data + 8);
	req->all_tg_pt = req->sa != SCSI_PRO_REGISTER_MOVE && (data[20] & 0x04);
	/* REGISTER AND MOVE has its own layout: APTPL in byte 17, no SPEC_I_PT */
	uint8_t flags = req->sa == SCSI_PRO_REGISTER_MOVE ? (uint8_t)(data[17] & 0x01) : data[20];
	req->spec_i_pt = flags & 0x08;
	if (req->spec_i_pt && req->sa != SCSI_PRO_REGISTER) {
		/* SPEC_I_PT names I_T nexuses to register: REGISTER only (SPC-4 6.16.3) */
		v_field(v, false, 20, 3);
		return false;
	}
	if (req->sa != SCSI_PRO_REGISTER_MOVE && !req->spec_i_pt && plen != PR_PARAM_LEN) {
		v_sense(v, SCSI_ASC_PARAM_LIST_LEN);
		return false;
	}
	if (req->spec_i_pt) {
		/* 24 bytes, the TransportID list's length, then the list; nothing after it */
		if (plen < PR_PARAM_LEN + 4) {
			v_sense(v, SCSI_ASC_PARAM_LIST_LEN);
			return false;
		}
		if (hl_get_be32(data + 24) != plen - 28) {
			v_field(v, false, 24, -1);
			return false;
		}
	}
	/* APTPL counts for the register service actions only (SPC-4 6.16.3) */
	req->reg_sa = req->sa == SCSI_PRO_REGISTER || req->sa == SCSI_PRO_REGISTER_IGNORE ||
	              req->sa == SCSI_PRO_REGISTER_MOVE;
	req->aptpl = (flags & 0x01) && req->reg_sa;
	if (req->aptpl && !caps->ptpl_c) { /* nowhere to keep it: PTPL_C = 0 */
		v_field(v, false, req->sa == SCSI_PRO_REGISTER_MOVE ? 17 : 20, 0);
		return false;
	}
	bool needs_type = req->sa == SCSI_PRO_RESERVE || req->sa == SCSI_PRO_RELEASE ||
	                  req->sa == SCSI_PRO_PREEMPT || req->sa == SCSI_PRO_PREEMPT_ABORT;
	if (needs_type && req->scope != 0) {
		v_field(v, true, 2, 7);
		return false;
	}
	if (needs_type && !scsi_pr_type_valid(req->type)) {
		v_field(v, true, 2, 3);
		return false;
	}
	return true;
}

/* Registration i goes, releasing what it held. */
static void reg_remove(struct scsi_pr_state *st, int i, struct scsi_pr_change *c)
{
	bool was_holder = st->type && st->holder == i;

	reg_del(st, i);
	if (!st->type)
		return;
	if (was_holder) {
		/* SPC-4 5.12.11.2: releasing an RO reservation tells the other registrants */
		if (st->type == SCSI_PR_WE_RO || st->type == SCSI_PR_EA_RO)
			ua_for_registrants(st, c, SCSI_ASC_RESERVATIONS_RELEASED);
		reservation_clear(st);
	} else if (scsi_pr_type_all_registrants(st->type) && st->n_regs == 0) {
		reservation_clear(st);
	}
}

static uint32_t transport_id(const uint8_t *tid, uint32_t room, uint32_t base, bool bare_ok,
                             char *port, size_t len, struct scsi_pr_verdict *v);

/* Is the I_T nexus (port, rel) (every port of it: all) registered already? */
static bool registered(const struct scsi_pr_state *st, const char *port, uint16_t rel, bool all)
{
	for (unsigned j = 0; j < st->n_regs; j++) {
		const struct scsi_pr_reg *r = &st->regs[j];
		if (strcasecmp(r->initiator_port, port) == 0 &&
		    (all || r->all_tg_pt || r->rel_port == rel))
			return true;
	}
	return false;
}

/*
 * Register port (at relative port rel) with key; NULL, with the sense for a
 * full table set in v, when the table cannot grow.
 */
static struct scsi_pr_reg *reg_new(struct scsi_pr_state *st, const char *port, uint16_t rel,
                                   bool all_tg_pt, uint64_t key, struct scsi_pr_verdict *v)
{
	struct scsi_pr_reg *r = scsi_pr_reg_add(st);

	if (!r) {
		v_sense(v, SCSI_ASC_NO_REG_RESOURCES);
		return NULL;
	}
	hl_strlcpy(r->initiator_port, port, sizeof(r->initiator_port));
	r->rel_port = rel;
	r->all_tg_pt = all_tg_pt;
	r->key = key;
	return r;
}

/*
 * REGISTER with SPEC_I_PT (SPC-4 5.12.7): the issuer and every I_T nexus a
 * TransportID names (that initiator port with the issuer's target port, or
 * every target port with ALL_TG_PT) get the service action key, all or
 * none. A nexus registered already, or named twice, is an invalid field.
 */
static void register_specified(struct scsi_pr_state *st, const struct scsi_pr_req *req,
                               const struct scsi_pr_who *who, struct scsi_pr_verdict *v)
{
	const uint8_t *d = req->param;
	uint32_t off = PR_PARAM_LEN + 4;
	unsigned first = st->n_regs;

	if (!reg_new(st, who->port, who->rel, req->all_tg_pt, req->sa_key, v))
		return;
	while (off < req->plen) {
		char port[SCSI_PR_PORT_MAX];
		uint32_t n =
		    transport_id(d + off, req->plen - off, off, true, port, sizeof(port), v);
		if (!n)
			break;
		if (registered(st, port, who->rel, req->all_tg_pt)) {
			v_field(v, false, (uint16_t)HL_MIN(off, 0xffffu), -1);
			break;
		}
		if (!reg_new(st, port, who->rel, req->all_tg_pt, req->sa_key, v))
			break;
		off += n;
	}
	if (v->status != HL_SAM_GOOD)
		st->n_regs = first; /* all or none */
}

static void pr_register(struct scsi_pr_state *st, const struct scsi_pr_req *req,
                        const struct scsi_pr_who *who, struct scsi_pr_change *c,
                        struct scsi_pr_verdict *v, bool *changed)
{
	int i = scsi_pr_find(st, who);

	if (i < 0) {
		if (req->sa == SCSI_PRO_REGISTER && req->key != 0) {
			v_conflict(v);
			return;
		}
		v_good(v);
		if (req->sa_key == 0)
			return; /* unregistering what is not registered: nothing to do */
		if (req->spec_i_pt) {
			register_specified(st, req, who, v);
			if (v->status != HL_SAM_GOOD)
				return;
		} else if (!reg_new(st, who->port, who->rel, req->all_tg_pt, req->sa_key, v)) {
			return;
		}
		st->generation++;
		*changed = true;
		return;
	}
	if (req->spec_i_pt) {
		/* a registered I_T nexus may not name others (SPC-4 5.12.7) */
		v_sense(v, SCSI_ASC_INVALID_FIELD_CDB);
		return;
	}
	if (req->sa == SCSI_PRO_REGISTER && req->key != st->regs[i].key) {
		v_conflict(v);
		return;
	}
	v_good(v);
	st->generation++;
	*changed = true;
	if (req->sa_key == 0)
		reg_remove(st, i, c);
	else
		st->regs[i].key = req->sa_key;
}

static void pr_reserve(struct scsi_pr_state *st, const struct scsi_pr_req *req, int i,
                       struct scsi_pr_verdict *v, bool *changed)
{
	if (st->type) {
		/* the holder asking again for what it has is GOOD; anything else conflicts */
		if (scsi_pr_is_holder(st, i) && st->type == req->type)
			v_good(v);
		else
			v_conflict(v);
		return;
	}
	st->type = req->type;
	st->holder = scsi_pr_type_all_registrants(req->type) ? -1 : i;
	*changed = true;
	v_good(v);
}

static void pr_release(struct scsi_pr_state *st, const struct scsi_pr_req *req, int i,
                       struct scsi_pr_change *c, struct scsi_pr_verdict *v, bool *changed)
{
	if (!st->type || !scsi_pr_is_holder(st, i)) {
		v_good(v); /* nothing of ours to release */
		return;
	}
	if (st->type != req->type) {
		v_sense(v, SCSI_ASC_INVALID_RELEASE);
		return;
	}
	/* other registrants learn that an RO/AR reservation they could use is gone */
	if (type_registrants_access(st->type))
		ua_for_registrants(st, c, SCSI_ASC_RESERVATIONS_RELEASED);
	reservation_clear(st);
	*changed = true;
	v_good(v);
}

static void pr_clear(struct scsi_pr_state *st, struct scsi_pr_change *c, struct scsi_pr_verdict *v,
                     bool *changed)
{
	ua_for_registrants(st, c, SCSI_ASC_RESERVATIONS_PREEMPTED);
	reservation_clear(st);
	st->n_regs = 0;
	st->generation++;
	*changed = true;
	v_good(v);
}

/*
 * Remove every registration but *keep that `all` or key names, with
 * REGISTRATIONS PREEMPTED for their nexuses and, for PREEMPT AND ABORT,
 * their tasks aborted. *keep follows the shifts. @return how many.
 */
static unsigned preempt_regs(struct scsi_pr_state *st, int *keep, bool all, uint64_t key,
                             bool abort, struct scsi_pr_change *c)
{
	unsigned n = 0;

	if (abort) {
		/* listed before anything goes: the transport aborts these nexuses' tasks */
		for (unsigned j = 0; j < st->n_regs; j++) {
			if ((int)j != *keep && (all || st->regs[j].key == key))
				scsi_pr_fx_push(c, SCSI_PR_FX_ABORT, &st->regs[j], 0, 0);
		}
	}
	for (int j = 0; j < (int)st->n_regs;) {
		if (j == *keep || (!all && st->regs[j].key != key)) {
			j++;
			continue;
		}
		ua_for_reg(c, &st->regs[j], SCSI_ASC_REGISTRATIONS_PREEMPTED);
		reg_del(st, j);
		if (*keep > j)
			(*keep)--;
		n++;
	}
	return n;
}

static void pr_preempt(struct scsi_pr_state *st, const struct scsi_pr_req *req, int i,
                       struct scsi_pr_change *c, struct scsi_pr_verdict *v, bool *changed)
{
	bool abort = req->sa == SCSI_PRO_PREEMPT_ABORT;

	if (st->type && scsi_pr_type_all_registrants(st->type) && req->sa_key == 0) {
		/* SPC-4 5.12.11.4.3: preempting an all-registrants reservation removes everyone */
		preempt_regs(st, &i, true, 0, abort, c);
		st->type = req->type;
		st->holder = scsi_pr_type_all_registrants(req->type) ? -1 : i;
		st->generation++;
		*changed = true;
		v_good(v);
		return;
	}
	if (req->sa_key == 0) { /* no registration has key 0 */
		v_field(v, false, 8, -1);
		return;
	}
	if (st->type && !scsi_pr_type_all_registrants(st->type) &&
	    st->regs[st->holder].key == req->sa_key) {
		/* preempting the holder: its key's registrations go, the reservation is ours */
		uint8_t old_type = st->type;
		preempt_regs(st, &i, false, req->sa_key, abort, c);
		st->type = req->type;
		st->holder = scsi_pr_type_all_registrants(req->type) ? -1 : i;
		if (old_type != req->type)
			ua_for_registrants(st, c, SCSI_ASC_RESERVATIONS_RELEASED);
		st->generation++;
		*changed = true;
		v_good(v);
		return;
	}
	/* no reservation, or another key: those registrations go, the reservation stays */
	if (preempt_regs(st, &i, false, req->sa_key, abort, c) == 0) {
		c->n = 0;
		v_conflict(v);
		return;
	}
	if (st->type && scsi_pr_type_all_registrants(st->type) && st->n_regs == 0)
		reservation_clear(st);
	st->generation++;
	*changed = true;
	v_good(v);
}

/*
 * A TransportID (SPC-4 7.6.4.6, iSCSI) at tid, at most room bytes: the
 * initiator port name into port (format 01b "name,i,0xISID"; format 00b,
 * a bare name, only when bare_ok). @return its length in bytes, 0 when
 * malformed (v set, field pointers relative to base).
 */
static uint32_t transport_id(const uint8_t *tid, uint32_t room, uint32_t base, bool bare_ok,
                             char *port, size_t len, struct scsi_pr_verdict *v)
{
	if (room < 4 || ((tid[0] & 0x0f) != 0x05) || (tid[0] & 0x30) ||
	    ((tid[0] & 0xc0) != 0x40 && (!bare_ok || (tid[0] & 0xc0) != 0x00))) {
		v_field(v, false, (uint16_t)base, -1);
		return 0;
	}
	bool bare = (tid[0] & 0xc0) == 0x00;
	uint32_t n = hl_get_be16(tid + 2);
	if (n + 4 > room || n == 0 || n >= len) {
		v_field(v, false, (uint16_t)(base + 2), -1);
		return 0;
	}
	memcpy(port, tid + 4, n);
	port[n] = '\0';
	size_t l = strlen(port);
	bool ok = l > 0;
	for (size_t k = 0; k < l && ok; k++)
		ok = port[k] > 0x20 && port[k] < 0x7f; /* what a login accepts as a name */
	if (ok)
		ok = bare ? !strchr(port, ',') : strstr(port, ",i,0x") != NULL;
	if (!ok) {
		v_field(v, false, (uint16_t)(base + 4), -1);
		return 0;
	}
	return 4 + n;
}

/*
 * REGISTER AND MOVE (SPC-4 5.12.9): the holder registers another I_T nexus
 * (TransportID + relative target port) with the service action key and hands
 * it the reservation, same type; UNREG drops the holder's own registration.
 */
static void pr_register_move(struct scsi_pr_state *st, const struct scsi_pr_req *req, int i,
                             const struct scsi_pr_who *who, struct scsi_pr_verdict *v,
                             bool *changed)
{
	const uint8_t *d = req->param;
	uint32_t tid_len = hl_get_be32(d + 20);
	bool unreg = d[17] & 0x02;
	uint16_t rel = hl_get_be16(d + 18);
	char port[SCSI_PR_PORT_MAX];

	if (!st->type || scsi_pr_type_all_registrants(st->type) || !scsi_pr_is_holder(st, i)) {
		v_conflict(v);
		return;
	}
	if (req->sa_key == 0) {
		v_field(v, false, 8, -1);
		return;
	}
	if (tid_len < 4) {
		v_field(v, false, 24, -1);
		return;
	}
	if (!transport_id(d + 24, HL_MIN(tid_len, req->plen - 24), 24, false, port, sizeof(port),
	                  v))
		return;
	if (rel == 0) {
		v_field(v, false, 18, -1);
		return;
	}
	if (strcasecmp(port, who->port) == 0 && rel == who->rel) {
		v_field(v, false, 28, -1); /* moving to itself */
		return;
	}
	int dst = -1;
	for (unsigned j = 0; j < st->n_regs; j++) {
		if (strcasecmp(st->regs[j].initiator_port, port) == 0 &&
		    (st->regs[j].all_tg_pt || st->regs[j].rel_port == rel)) {
			dst = (int)j;
			break;
		}
	}
	if (dst < 0) {
		if (!reg_new(st, port, rel, false, req->sa_key, v))
			return;
		dst = (int)st->n_regs - 1;
	}
	st->regs[dst].key = req->sa_key;
	st->holder = dst;
	if (unreg)
		reg_del(st, i); /* never dst: the move to itself was refused */
	if (unreg && dst > i)
		st->holder = dst - 1;
	st->generation++;
	*changed = true;
	v_good(v);
}

void scsi_pr_apply(struct scsi_pr_state *st, const struct scsi_pr_req *req,
                   const struct scsi_pr_who *who, struct scsi_pr_change *fx,
                   struct scsi_pr_verdict *v, bool *changed)
{
	*changed = false;
	if (req->sa == SCSI_PRO_REGISTER || req->sa == SCSI_PRO_REGISTER_IGNORE) {
		pr_register(st, req, who, fx, v, changed);
	} else {
		int i = scsi_pr_find(st, who);
		if (i < 0 || st->regs[i].key != req->key)
			v_conflict(v);
		else if (req->sa == SCSI_PRO_RESERVE)
			pr_reserve(st, req, i, v, changed);
		else if (req->sa == SCSI_PRO_RELEASE)
			pr_release(st, req, i, fx, v, changed);
		else if (req->sa == SCSI_PRO_CLEAR)
			pr_clear(st, fx, v, changed);
		else if (req->sa == SCSI_PRO_REGISTER_MOVE)
			pr_register_move(st, req, i, who, v, changed);
		else
			pr_preempt(st, req, i, fx, v, changed);
	}
	if (v->status != HL_SAM_GOOD) {
		fx->n = 0;
		*changed = false;
		return;
	}
	if (req->reg_sa && st->aptpl != req->aptpl) {
		st->aptpl = req->aptpl;
		*changed = true;
	}
}

/* ---- SPC-2 RESERVE / RELEASE on a shared state ---- */

void scsi_pr_rsv2_reserve(struct scsi_pr_state *st, const struct scsi_pr_who *who,
                          struct scsi_pr_verdict *v, bool *changed)
{
	*changed = false;
	/* CRH = 1: a RESERVE fails while any persistent registration exists */
	if (st->n_regs ||
	    (st->rsv2 && (strcasecmp(st->rsv2_port, who->port) != 0 || st->rsv2_rel != who->rel))) {
		v_conflict(v);
		return;
	}
	v_good(v);
	if (st->rsv2)
		return;
	st->rsv2 = true;
	hl_strlcpy(st->rsv2_port, who->port, sizeof(st->rsv2_port));
	st->rsv2_rel = who->rel;
	*changed = true;
}

void scsi_pr_rsv2_release(struct scsi_pr_state *st, const struct scsi_pr_who *who, bool *changed)
{
	*changed = false;
	if (!st->rsv2 ||
	    (who && (strcasecmp(st->rsv2_port, who->port) != 0 || st->rsv2_rel != who->rel)))
		return;
	st->rsv2 = false;
	st->rsv2_port[0] = '\0';
	st->rsv2_rel = 0;
	*changed = true;
}

/* ---- PERSISTENT RESERVE IN ---- */

size_t scsi_pr_in_max(void)
{
	/* READ FULL STATUS: 24 + TransportID (<= 4 + 256) per registration */
	return 8 + (size_t)SCSI_PR_MAX_REGS * (24 + 4 + 256);
}

/* iSCSI TransportID (SPC-4 7.6.4.6): the name string padded to 4; format 01b unless bare. */
static uint32_t put_transport_id(uint8_t *p, const char *iport)
{
	size_t n = strnlen(iport, 255);
	uint32_t len = (uint32_t)HL_ALIGN_UP(n + 1, 4);

	if (len < 20)
		len = 20;
	memset(p, 0, 4 + len);
	/* format 01b (name + ISID) or 00b (a bare name), protocol identifier iSCSI */
	p[0] = (uint8_t)(strstr(iport, ",i,0x") ? 0x40 | 0x05 : 0x05);
	hl_put_be16(p + 2, (uint16_t)len);
	memcpy(p + 4, iport, n);
	return 4 + len;
}

int scsi_pr_in_build(const struct scsi_pr_state *st, uint8_t sa, const struct scsi_pr_caps *caps,
                     uint8_t *buf)
{
	uint32_t off = 8;

	memset(buf, 0, 8);
	hl_put_be32(buf, st->generation);
	switch (sa) {
	case 0: /* READ KEYS */
		for (unsigned i = 0; i < st->n_regs; i++) {
			hl_put_be64(buf + off, st->regs[i].key);
			off += 8;
		}
		hl_put_be32(buf + 4, off - 8);
		return (int)off;
	case 1: /* READ RESERVATION */
		if (st->type) {
			uint64_t key =
			    scsi_pr_type_all_registrants(st->type) ? 0 : st->regs[st->holder].key;
			memset(buf + 8, 0, 16);
			hl_put_be64(buf + 8, key);
			buf[21] = st->type; /* scope 0: logical unit */
			off += 16;
		}
		hl_put_be32(buf + 4, off - 8);
		return (int)off;
	case 2: /* REPORT CAPABILITIES */
		hl_put_be16(buf, 8);
		/* CRH, SIP_C, ATP_C, PTPL_C when there is somewhere to keep the state */
		buf[2] = (uint8_t)(0x10 | 0x08 | 0x04 | (caps->ptpl_c ? 0x01 : 0));
		/* TMV; ALLOW COMMANDS 0: no information; PTPL_A */
		buf[3] = (uint8_t)(0x80 | (st->aptpl ? 0x01 : 0));
		buf[4] =
		    0x80 | 0x40 | 0x20 | 0x08 | 0x02; /* WR_EX_AR EX_AC_RO WR_EX_RO EX_AC WR_EX */
		buf[5] = 0x01;                        /* EX_AC_AR */
		return 8;
	case 3: /* READ FULL STATUS */
		for (unsigned i = 0; i < st->n_regs; i++) {
			const struct scsi_pr_reg *r = &st->regs[i];
			uint8_t *dsc = buf + off;
			memset(dsc, 0, 24);
			hl_put_be64(dsc, r->key);
			bool holder = scsi_pr_is_holder(st, (int)i);
			dsc[12] = (uint8_t)((r->all_tg_pt ? 0x02 : 0) | (holder ? 0x01 : 0));
			if (holder)
				dsc[13] = st->type;
			hl_put_be16(dsc + 18, r->all_tg_pt ? 0 : r->rel_port);
			uint32_t tid = put_transport_id(dsc + 24, r->initiator_port);
			hl_put_be32(dsc + 20, tid);
			off += 24 + tid;
		}
		hl_put_be32(buf + 4, off - 8);
		return (int)off;
	default:
		return -1;
	}
}
