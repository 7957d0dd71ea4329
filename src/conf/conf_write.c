/*
 * conf_write.c - the configuration written back as INI text (saveconfig,
 * hl_conf_same, and hl_conf_dup's copy through the parser), and the changes
 * made at run time by the control socket and reload: sections added and
 * removed, keys set (with the parser's own key tables) and unset.
 */
#include "conf/conf_internal.h"
#include "hotlun/conf.h"
#include "hotlun/log.h"
#include "hotlun/util.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- writer ---- */

/* Quote a value when the parser would otherwise strip, split or unquote it. */
static void put_kv(FILE *f, const char *key, const char *v)
{
	bool quote = !*v || isspace((unsigned char)v[0]) ||
	             isspace((unsigned char)v[strlen(v) - 1]) || strpbrk(v, ";#\"\\");

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
	static const char *const levels[] = {[HL_LOG_ERR] = "err",
	                                     [HL_LOG_WARN] = "warn",
	                                     [HL_LOG_NOTICE] = "notice",
	                                     [HL_LOG_INFO] = "info",
	                                     [HL_LOG_DEBUG] = "debug"};

	fprintf(f, "[global]\n");
	for (size_t i = 0; i < c->n_portals; i++)
		put_kv(f, "portal", c->portals[i]);
	put_opt(f, "state_dir", c->state_dir);
	put_opt(f, "control_socket", c->control_socket);
	put_opt(f, "metrics_listen", c->metrics_listen);
	if (c->log_level >= HL_LOG_ERR && c->log_level <= HL_LOG_DEBUG)
		put_kv(f, "log_level", levels[c->log_level]);
	if (c->threads) {
		snprintf(num, sizeof(num), "%u", c->threads);
		put_kv(f, "threads", num);
	}
	put_opt(f, "cpus", c->cpus);
	if (c->poll_us >= 0) {
		snprintf(num, sizeof(num), "%d", c->poll_us);
		put_kv(f, "poll_us", num);
	}
	if (c->write_buffer_limit)
		put_size(f, "write_buffer_limit", c->write_buffer_limit);
	if (c->scratch_buffer_limit)
		put_size(f, "scratch_buffer_limit", c->scratch_buffer_limit);
	if (c->send_uring >= 0)
		put_kv(f, "send_uring", c->send_uring ? "yes" : "no");
	if (c->control_idle_timeout >= 0) {
		snprintf(num, sizeof(num), "%d", c->control_idle_timeout);
		put_kv(f, "control_idle_timeout", num);
	}
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
	if (c->gateway_lease_ms)
		fprintf(f, "gateway_lease_ms = %u\n", c->gateway_lease_ms);
	if (c->gateway_dead_ms)
		fprintf(f, "gateway_dead_ms = %u\n", c->gateway_dead_ms);
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
		if (d->shadow_rate_set)
			fprintf(f, "shadow_rate = %llu\n", (unsigned long long)d->shadow_rate);
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
		put_opt(f, "origin_chap_secret_file",
		        d->ochap.secret_file); /* the path, not the secret */
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

/*
 * hl_conf_write into memory: the text holds the secrets, so it is built
 * without open_memstream (whose buffer grows by realloc, leaving copies in
 * the blocks it frees) and through a stdio buffer of ours that is wiped.
 */
struct conf_text {
	char *buf;
	size_t len, cap;
};

static ssize_t conf_text_write(void *cookie, const char *data, size_t n)
{
	struct conf_text *t = cookie;

	if (t->cap - t->len < n + 1) {
		size_t cap = HL_MAX(t->cap * 2, t->len + n + 4096);
		char *b = conf_grow_wiped(t->buf, t->len, t->cap, cap);
		if (!b) {
			t->buf = NULL;
			t->len = t->cap = 0;
			return 0; /* a write error for stdio */
		}
		t->buf = b;
		t->cap = cap;
	}
	memcpy(t->buf + t->len, data, n);
	t->len += n;
	t->buf[t->len] = '\0';
	return (ssize_t)n;
}

static void conf_text_free(struct conf_text *t)
{
	if (t->buf)
		explicit_bzero(t->buf, t->cap);
	free(t->buf);
	t->buf = NULL;
	t->len = t->cap = 0;
}

/* c as the file would hold it, in t (conf_text_free it). @return 0 or -ENOMEM. */
static int conf_text(const struct hl_conf *c, struct conf_text *t)
{
	char iobuf[4096];
	cookie_io_functions_t io = {.write = conf_text_write};
	FILE *f;
	int rc;

	memset(t, 0, sizeof(*t));
	f = fopencookie(t, "w", io);
	if (!f)
		return -ENOMEM;
	setvbuf(f, iobuf, _IOFBF, sizeof(iobuf));
	rc = hl_conf_write(c, f);
	if (fclose(f) != 0 && rc == 0)
		rc = -ENOMEM;
	explicit_bzero(iobuf, sizeof(iobuf));
	if (rc == 0 && !t->buf) /* never empty ("[global]"): a failed write */
		rc = -ENOMEM;
	if (rc)
		conf_text_free(t);
	return rc;
}

bool hl_conf_same(const struct hl_conf *a, const struct hl_conf *b)
{
	struct conf_text ta, tb;
	bool same = false;

	if (conf_text(a, &ta) != 0)
		return false;
	if (conf_text(b, &tb) == 0) {
		same = ta.len == tb.len && memcmp(ta.buf, tb.buf, ta.len) == 0;
		conf_text_free(&tb);
	}
	conf_text_free(&ta);
	return same;
}

/* ---- changes at run time (control socket, reload) ---- */

static const char *const kind_names[] = {
    [HL_CONF_GLOBAL] = "global",
    [HL_CONF_DISK] = "disk",
    [HL_CONF_CACHE] = "cache",
    [HL_CONF_TARGET] = "target",
};

/* Point the parser at section (kind, name). @return 0 or -ENOENT with a message. */
static int select_section(struct conf_parser *p, enum hl_conf_kind kind, const char *name)
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
			p->index =
			    (size_t)((const struct hl_conf_target *)found - p->conf->targets);
		break;
	}
	if (!found) {
		conf_perr(p, "no %s named '%s'", kind_names[kind], name ? name : "");
		return -ENOENT;
	}
	return 0;
}

int hl_conf_dup(const struct hl_conf *c, struct hl_conf **out)
{
	struct conf_text text;
	char err[512];
	int rc = conf_text(c, &text);

	if (rc == 0) {
		rc = conf_parse_text(text.buf, text.len, c->path, true, out, err, sizeof(err));
		conf_text_free(&text);
	}
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
	struct conf_parser p = {.name = "config", .err = err, .errlen = errlen, .conf = c};
	char hdr[512];

	if (kind == HL_CONF_GLOBAL || !name || strlen(name) > 300)
		return conf_perr(&p, "bad section");
	p.seen_global = true;
	snprintf(hdr, sizeof(hdr), "%s %s", kind_names[kind], name);
	return conf_open_section(&p, hdr);
}

int hl_conf_section_remove(struct hl_conf *c, enum hl_conf_kind kind, const char *name, char *err,
                           size_t errlen)
{
	struct conf_parser p = {.name = "config", .err = err, .errlen = errlen, .conf = c};
	int rc = select_section(&p, kind, name);

	if (rc)
		return rc;
	switch (kind) {
	case HL_CONF_DISK:
		for (size_t i = 0; i < c->n_targets; i++) {
			for (size_t j = 0; j < c->targets[i].n_luns; j++) {
				if (strcmp(c->targets[i].luns[j].disk, name) == 0)
					return conf_perr(
					    &p,
					    "disk %s is lun.%u of target %s: remove that LUN first",
					    name, c->targets[i].luns[j].lun, c->targets[i].name);
			}
		}
		conf_free_disk(&c->disks[p.index]);
		memmove(&c->disks[p.index], &c->disks[p.index + 1],
		        (c->n_disks - p.index - 1) * sizeof(*c->disks));
		c->n_disks--;
		return 0;
	case HL_CONF_CACHE:
		for (size_t i = 0; i < c->n_disks; i++) {
			if (c->disks[i].cache && strcmp(c->disks[i].cache, name) == 0)
				return conf_perr(&p, "cache %s is used by disk %s: detach it first",
				                 name, c->disks[i].name);
		}
		conf_free_cache(&c->caches[p.index]);
		memmove(&c->caches[p.index], &c->caches[p.index + 1],
		        (c->n_caches - p.index - 1) * sizeof(*c->caches));
		c->n_caches--;
		return 0;
	case HL_CONF_TARGET:
		conf_free_target(&c->targets[p.index]);
		memmove(&c->targets[p.index], &c->targets[p.index + 1],
		        (c->n_targets - p.index - 1) * sizeof(*c->targets));
		c->n_targets--;
		return 0;
	case HL_CONF_GLOBAL:
	default:
		return conf_perr(&p, "[global] cannot be removed");
	}
}

int hl_conf_set(struct hl_conf *c, enum hl_conf_kind kind, const char *name, const char *key,
                const char *value, char *err, size_t errlen)
{
	struct conf_parser p = {.name = "config", .err = err, .errlen = errlen, .conf = c};
	int rc = select_section(&p, kind, name);

	if (rc)
		return rc;
	if (strlen(value) > CONF_MAX_VALUE)
		return conf_perr(&p, "%s: value longer than %d bytes", key, CONF_MAX_VALUE);
	rc = conf_check_value_chars(&p, key, value);
	if (rc)
		return rc;
	switch (p.kind) {
	case SEC_GLOBAL:
		return conf_global_key(&p, key, value);
	case SEC_DISK:
		return conf_disk_key(&p, key, value);
	case SEC_CACHE:
		return conf_cache_key(&p, key, value);
	case SEC_TARGET:
		return conf_target_key(&p, key, value);
	default:
		return conf_perr(&p, "bad section");
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
	struct conf_parser p = {.name = "config", .err = err, .errlen = errlen, .conf = c};
	int rc = select_section(&p, kind, name);

	if (rc)
		return rc;
	if (p.kind == SEC_GLOBAL) {
		if (strcmp(key, "portal") == 0) {
			if (!value || !strv_remove(c->portals, &c->n_portals, value))
				return conf_perr(&p, "no portal %s",
				                 value ? value : "(none given)");
			return 0;
		}
		if (strcmp(key, "discovery_chap_user") == 0 ||
		    strcmp(key, "discovery_chap_secret") == 0) {
			unset_str(&c->discovery_chap_user);
			return unset_str(&c->discovery_chap_secret);
		}
		if (strcmp(key, "threads") == 0) {
			c->threads = 0;
			return 0;
		}
		if (strcmp(key, "cpus") == 0)
			return unset_str(&c->cpus);
		if (strcmp(key, "poll_us") == 0) {
			c->poll_us = -1;
			return 0;
		}
		if (strcmp(key, "metrics_listen") == 0)
			return unset_str(&c->metrics_listen);
		if (strcmp(key, "write_buffer_limit") == 0) {
			c->write_buffer_limit = 0;
			return 0;
		}
		if (strcmp(key, "scratch_buffer_limit") == 0) {
			c->scratch_buffer_limit = 0;
			return 0;
		}
		if (strcmp(key, "control_idle_timeout") == 0) {
			c->control_idle_timeout = -1;
			return 0;
		}
		if (strcmp(key, "logout_timeout") == 0) {
			c->logout_timeout = -1;
			return 0;
		}
		if (strcmp(key, "send_uring") == 0) {
			c->send_uring = -1;
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
		if (strcmp(key, "gateway_lease_ms") == 0) {
			c->gateway_lease_ms = 0;
			return 0;
		}
		if (strcmp(key, "gateway_dead_ms") == 0) {
			c->gateway_dead_ms = 0;
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
		return conf_perr(&p, "%s cannot be unset", key);
	}
	if (p.kind == SEC_DISK) {
		struct hl_conf_disk *d = &c->disks[p.index];
		if (strcmp(key, "cache") == 0)
			return unset_str(&d->cache);
		if (strcmp(key, "rbd_conf") == 0)
			return unset_str(&d->rbd_conf);
		if (strcmp(key, "rbd_id") == 0)
			return unset_str(&d->rbd_id);
		if (strcmp(key, "origin_chap_user") == 0 ||
		    strcmp(key, "origin_chap_secret") == 0 ||
		    strcmp(key, "origin_chap_secret_file") == 0) {
			if (d->ochap.mutual_user)
				return conf_perr(&p, "unset origin_mutual_user first");
			unset_str(&d->ochap.user);
			conf_free_secret(&d->ochap.secret);
			conf_free_secret(&d->ochap.file_secret);
			return unset_str(&d->ochap.secret_file);
		}
		if (strcmp(key, "origin_mutual_user") == 0 ||
		    strcmp(key, "origin_mutual_secret") == 0) {
			unset_str(&d->ochap.mutual_user);
			conf_free_secret(&d->ochap.mutual_secret);
			return 0;
		}
		if (strcmp(key, "serial") == 0)
			return unset_str(&d->serial);
		if (strcmp(key, "naa") == 0)
			return unset_str(&d->naa);
		if (strcmp(key, "cache_quota") == 0)
			d->cache_quota = 0;
		else if (strcmp(key, "shadow_rate") == 0)
			d->shadow_rate_set = false;
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
			return conf_perr(&p, "%s cannot be unset", key);
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
		return conf_perr(&p, "%s cannot be unset", key);
	}
	struct hl_conf_target *t = &c->targets[p.index];
	if (strcmp(key, "allow") == 0) {
		if (value && strcmp(value, "ALL") == 0 && t->allow_all) {
			t->allow_all = false;
			return 0;
		}
		if (!value || !strv_remove(t->allow, &t->n_allow, value))
			return conf_perr(&p, "target %s does not allow %s", t->name,
			                 value ? value : "(none given)");
		return 0;
	}
	if (strncmp(key, "lun.", 4) == 0) {
		uint64_t n;
		if (hl_parse_u64(key + 4, &n))
			return conf_perr(&p, "%s: not a LUN key", key);
		for (size_t i = 0; i < t->n_luns; i++) {
			if (t->luns[i].lun == n) {
				free(t->luns[i].disk);
				memmove(&t->luns[i], &t->luns[i + 1],
				        (t->n_luns - i - 1) * sizeof(*t->luns));
				t->n_luns--;
				return 0;
			}
		}
		return conf_perr(&p, "target %s has no LUN %llu", t->name, (unsigned long long)n);
	}
	if (strcmp(key, "alias") == 0)
		return unset_str(&t->alias);
	if (strcmp(key, "chap_user") == 0 || strcmp(key, "chap_secret") == 0) {
		if (t->mutual_user)
			return conf_perr(&p, "unset mutual CHAP first");
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
	return conf_perr(&p, "%s cannot be unset", key);
}
