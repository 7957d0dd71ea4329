/*
 * conf_check.c - the checks across sections that run once a whole text is
 * read (every name a section refers to exists, CHAP keys that go together,
 * gateway ids), and the defaults that are filled in then (block sizes,
 * portal, state directory, control socket). hl_conf_check runs the same on
 * a configuration changed at run time.
 */
#include "conf/conf_internal.h"
#include "hotlun/conf.h"
#include "hotlun/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#ifndef HL_LOCALSTATEDIR
#define HL_LOCALSTATEDIR "/var" /* set by configure; this default serves the fuzz build */
#endif

/* ---- checks across sections ---- */

static int check_chap(struct conf_parser *p, const char *what, const char *user, const char *secret)
{
	if (!user != !secret)
		return conf_perr(p, "%s_user and %s_secret go together", what, what);
	if (secret && (strlen(secret) < 1 || strlen(secret) > 255))
		return conf_perr(p, "%s_secret must be 1..255 bytes", what);
	if (user && strlen(user) > 255)
		return conf_perr(p, "%s_user must be at most 255 bytes", what);
	return 0;
}

static int strp_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/*
 * A target answers the mutual challenge of any initiator that passed its own
 * CHAP, and the challenge is the initiator's choice: if its mutual_secret
 * authenticated initiators somewhere (a chap_secret of any target, or the
 * discovery secret), an initiator that knows this target's secret gets it
 * to compute the answer to that other target's challenge (CHAP
 * reflection; RFC 7143 12.1.3: a secret for initiator authentication MUST
 * NOT be configured for authentication of any target). The secrets are
 * sorted once: 4096 targets stay a few milliseconds.
 */
static int check_reflection(struct conf_parser *p, const struct hl_conf *c)
{
	const char **init = calloc(c->n_targets + 1, sizeof(*init));
	size_t n = 0;
	int rc = 0;

	if (!init)
		return -ENOMEM;
	for (size_t i = 0; i < c->n_targets; i++)
		if (c->targets[i].chap_secret)
			init[n++] = c->targets[i].chap_secret;
	if (c->discovery_chap_secret)
		init[n++] = c->discovery_chap_secret;
	qsort(init, n, sizeof(*init), strp_cmp);
	for (size_t i = 0; i < c->n_targets && !rc; i++) {
		const struct hl_conf_target *t = &c->targets[i];
		if (!t->mutual_secret || !bsearch(&t->mutual_secret, init, n, sizeof(*init), strp_cmp))
			continue;
		p->line = t->line;
		rc = conf_perr(p,
		               "[target %s]: mutual_secret must differ from chap_secret, from "
		               "every other target's chap_secret and from discovery_chap_secret "
		               "(RFC 7143 12.1.3): initiators could make this target answer "
		               "the challenges of the target that checks it",
		               t->name);
	}
	free(init);
	return rc;
}

/* The [disk] origin_chap_* / origin_mutual_* keys, against the origin URL. */
static int check_origin_chap(struct conf_parser *p, const struct hl_conf_disk *d)
{
	const struct hl_conf_origin_chap *o = &d->ochap;
	bool keys = o->user || o->secret || o->secret_file || o->mutual_user || o->mutual_secret;
	bool url_creds, chap;
	char bare[2 * CONF_MAX_VALUE + 16];

	if (!keys)
		return 0;
	if (strncasecmp(d->origin, "iscsi:", 6) != 0)
		return conf_perr(
		    p, "[disk %s]: origin_chap_* and origin_mutual_* are for iscsi: origins",
		    d->name);
	url_creds = strcmp(hl_uri_redact(d->origin, true, bare, sizeof(bare)), d->origin) != 0;
	if (o->secret && o->secret_file)
		return conf_perr(
		    p, "[disk %s]: origin_chap_secret and origin_chap_secret_file: give one",
		    d->name);
	if (!o->user != !(o->secret || o->secret_file))
		return conf_perr(p,
		                 "[disk %s]: origin_chap_user and origin_chap_secret (or "
		                 "origin_chap_secret_file) go together",
		                 d->name);
	if (o->user && url_creds)
		return conf_perr(p,
		                 "[disk %s]: the origin URL has credentials (user%%secret@) and "
		                 "origin_chap_user is set: use one of them",
		                 d->name);
	if ((o->user && strlen(o->user) > 255) || (o->secret && strlen(o->secret) > 255))
		return conf_perr(p, "[disk %s]: origin_chap_user and _secret are at most 255 bytes",
		                 d->name);
	chap = o->user || url_creds;
	if (!o->mutual_user != !o->mutual_secret)
		return conf_perr(
		    p, "[disk %s]: origin_mutual_user and origin_mutual_secret go together",
		    d->name);
	if (o->mutual_user && !chap)
		return conf_perr(p,
		                 "[disk %s]: mutual CHAP toward the origin needs origin_chap_user "
		                 "and a secret too",
		                 d->name);
	if (o->mutual_user && (strlen(o->mutual_user) > 255 || strlen(o->mutual_secret) > 255))
		return conf_perr(
		    p, "[disk %s]: origin_mutual_user and _secret are at most 255 bytes", d->name);
	return 0;
}

int conf_check(struct conf_parser *p)
{
	struct hl_conf *c = p->conf;
	int rc;

	for (size_t i = 0; i < c->n_disks; i++) {
		struct hl_conf_disk *d = &c->disks[i];
		p->line = d->line;
		if (!d->origin)
			return conf_perr(p, "[disk %s] has no origin", d->name);
		if (!d->block_size)
			d->block_size = 512;
		if (d->cache && !hl_conf_find_cache(c, d->cache))
			return conf_perr(
			    p, "[disk %s] uses cache '%s', which no [cache] section defines",
			    d->name, d->cache);
		if ((rc = check_origin_chap(p, d)))
			return rc;
	}
	for (size_t i = 0; i < c->n_caches; i++) {
		struct hl_conf_cache *k = &c->caches[i];
		p->line = k->line;
		if (!k->device)
			return conf_perr(p, "[cache %s] has no device", k->name);
		if (!k->block_size)
			k->block_size = 64 * 1024;
		if (!k->size)
			return conf_perr(p, "[cache %s] has no size", k->name);
		if (k->size < (uint64_t)k->block_size * 16)
			return conf_perr(p, "[cache %s] size must hold at least 16 blocks",
			                 k->name);
	}
	for (size_t i = 0; i < c->n_targets; i++) {
		struct hl_conf_target *t = &c->targets[i];
		p->line = t->line;
		for (size_t j = 0; j < t->n_luns; j++) {
			if (!hl_conf_find_disk(c, t->luns[j].disk)) {
				p->line = t->luns[j].line;
				return conf_perr(
				    p, "lun.%u names disk '%s', which no [disk] section defines",
				    t->luns[j].lun, t->luns[j].disk);
			}
		}
		p->line = t->line;
		if ((rc = check_chap(p, "chap", t->chap_user, t->chap_secret)))
			return rc;
		if ((rc = check_chap(p, "mutual", t->mutual_user, t->mutual_secret)))
			return rc;
		if (t->mutual_user && !t->chap_user)
			return conf_perr(
			    p, "[target %s]: mutual CHAP needs chap_user/chap_secret too", t->name);
	}
	p->line = p->global_line; /* 0 for a configuration built at run time: no FILE:LINE then */
	if (c->n_gateways && !c->gateway)
		return conf_perr(p,
		                 "gateways: set gateway = N too (this gateway's id in the list)");
	if (c->gateway) {
		bool listed = false;
		for (size_t i = 0; i < c->n_gateways; i++)
			listed |= c->gateways[i] == c->gateway;
		if (!listed)
			return conf_perr(
			    p,
			    "gateway = %u is not in gateways (list every gateway, this one "
			    "included, e.g. gateways = 1,2)",
			    c->gateway);
	}
	if (c->gateway_lease_ms || c->gateway_dead_ms) {
		unsigned lease = c->gateway_lease_ms ? c->gateway_lease_ms : HL_CONF_GATEWAY_LEASE_MS;
		unsigned dead = c->gateway_dead_ms ? c->gateway_dead_ms : HL_CONF_GATEWAY_DEAD_MS;
		if (dead < lease + HL_CONF_GATEWAY_MARGIN_MS) {
			p->line = c->gateway_dead_ms ? c->gateway_dead_line : c->gateway_lease_line;
			return conf_perr(
			    p,
			    "gateway_dead_ms (%u%s) must be at least gateway_lease_ms (%u%s) + %u: a "
			    "standby would take a disk whose silent owner may still serve it "
			    "(docs/gateways.md, \"The bound on a split brain\")",
			    dead, c->gateway_dead_ms ? "" : ", the default", lease,
			    c->gateway_lease_ms ? "" : ", the default", HL_CONF_GATEWAY_MARGIN_MS);
		}
		p->line = p->global_line;
	}
	if ((rc =
	         check_chap(p, "discovery_chap", c->discovery_chap_user, c->discovery_chap_secret)))
		return rc;
	if ((rc = check_reflection(p, c)))
		return rc;

	if (c->n_portals == 0 && conf_push_str(p, &c->portals, &c->n_portals, "0.0.0.0:3260"))
		return -ENOMEM;
	if (!c->state_dir && conf_set_str(p, &c->state_dir, HL_LOCALSTATEDIR "/lib/hotlun"))
		return -ENOMEM;
	if (!c->control_socket) {
		char buf[4096];
		snprintf(buf, sizeof(buf), "%s/hotlund.sock", c->state_dir);
		if (conf_set_str(p, &c->control_socket, buf))
			return -ENOMEM;
	}
	return 0;
}

int hl_conf_check(struct hl_conf *c, char *err, size_t errlen)
{
	struct conf_parser p = {.name = c->path, .err = err, .errlen = errlen, .conf = c};
	return conf_check(&p);
}
