/*
 * snmp_model.c - hotlun-snmp's model: turns the control socket's JSON
 * (stats, version, cache settings) into a snapshot of table rows, and
 * watches successive snapshots for the state changes that become
 * notifications. No net-snmp code here: this is what the unit test drives.
 */
#include "hotlun/util.h"
#include "snmp/snmp_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

uint32_t snmp_name_index(const char *name)
{
	uint32_t h = 2166136261u;

	for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
		h ^= *p;
		h *= 16777619u;
	}
	h &= 0x7fffffffu;
	return h ? h : 1;
}

static uint64_t u64(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	if (json_is_integer(v))
		return json_integer_value(v) > 0 ? (uint64_t)json_integer_value(v) : 0;
	if (json_is_real(v))
		return json_real_value(v) > 0 ? (uint64_t)json_real_value(v) : 0;
	return 0;
}

static char *str(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return strdup(s ? s : "");
}

static uint32_t ratio(uint64_t part, uint64_t whole)
{
	if (!whole)
		return 0;
	return (uint32_t)((long double)part * 10000.0L / (long double)whole);
}

uint32_t snmp_lat_bound(unsigned b, unsigned n)
{
	if (b + 1 >= n || b >= 32)
		return UINT32_MAX;
	return (uint32_t)1 << b;
}

uint32_t snmp_lat_quantile(const uint64_t *hist, unsigned n, double q)
{
	uint64_t total = 0, run = 0;

	for (unsigned i = 0; i < n; i++)
		total += hist[i];
	if (!total)
		return 0;
	/* The smallest bucket whose running count reaches ceil(q * total). */
	uint64_t want = (uint64_t)((long double)q * (long double)total);
	if ((long double)want < (long double)q * (long double)total)
		want++;
	if (!want)
		want = 1;
	for (unsigned i = 0; i < n; i++) {
		run += hist[i];
		if (run >= want)
			return snmp_lat_bound(i, n);
	}
	return snmp_lat_bound(n - 1, n);
}

static unsigned hist_read(json_t *o, const char *key, uint64_t *out)
{
	json_t *a = json_object_get(o, key), *v;
	size_t i;

	if (!json_is_array(a))
		return 0;
	json_array_foreach(a, i, v)
	{
		if (i >= SNMP_LAT_BUCKETS)
			break;
		out[i] = json_is_integer(v) && json_integer_value(v) > 0
		             ? (uint64_t)json_integer_value(v)
		             : 0;
	}
	return json_array_size(a) < SNMP_LAT_BUCKETS ? (unsigned)json_array_size(a)
	                                             : SNMP_LAT_BUCKETS;
}

/*
 * Indexes come from the name's hash; a clash (rare) is settled by name
 * order so the result does not depend on JSON member order. Rows arrive
 * sorted by name; give each its hash, bumping past values already taken.
 */
static int by_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sorted names of an object's members (pointers into the object). */
static const char **sorted_keys(json_t *o, size_t *n)
{
	const char *k;
	json_t *v;
	size_t i = 0;
	const char **keys;

	*n = json_object_size(o);
	keys = calloc(*n ? *n : 1, sizeof(*keys));
	if (!keys)
		return NULL;
	json_object_foreach(o, k, v)
	{
		(void)v;
		keys[i++] = k;
	}
	qsort(keys, *n, sizeof(*keys), by_name);
	return keys;
}

static bool index_taken(const uint32_t *taken, size_t n, uint32_t x)
{
	for (size_t i = 0; i < n; i++)
		if (taken[i] == x)
			return true;
	return false;
}

static uint32_t unique_index(const char *name, const uint32_t *taken, size_t n)
{
	uint32_t x = snmp_name_index(name);

	while (index_taken(taken, n, x))
		x = x >= 0x7fffffffu ? 1 : x + 1;
	return x;
}

static int disk_cmp(const void *a, const void *b)
{
	return by_u32(&((const struct snmp_disk *)a)->index, &((const struct snmp_disk *)b)->index);
}

static int cache_cmp(const void *a, const void *b)
{
	return by_u32(&((const struct snmp_cache *)a)->index,
	              &((const struct snmp_cache *)b)->index);
}

static int session_cmp(const void *a, const void *b)
{
	return by_u32(&((const struct snmp_iscsi_session *)a)->tsih,
	              &((const struct snmp_iscsi_session *)b)->tsih);
}

/*
 * The origin as HOTLUN-MIB promises it, without credentials: hotlund masks
 * them already; this holds even for a daemon that would not.
 */
static char *origin_str(json_t *o)
{
	const char *s = json_string_value(json_object_get(o, "origin"));
	size_t n;
	char *buf;

	if (!s)
		s = "";
	n = 2 * strlen(s) + 16; /* "***" may be longer than a short secret */
	buf = malloc(n);
	return buf ? (char *)hl_uri_redact(s, false, buf, n) : NULL;
}

/* hotlund's "alua" text (control.c, alua_name) as its SPC-4 code. */
static int alua_code(const char *s)
{
	static const struct {
		const char *name;
		int code;
	} names[] = {
	    {"active/optimized", SNMP_ALUA_ACTIVE_OPTIMIZED},
	    {"active/non-optimized", SNMP_ALUA_ACTIVE_NON_OPTIMIZED},
	    {"standby", SNMP_ALUA_STANDBY},
	    {"unavailable", SNMP_ALUA_UNAVAILABLE},
	    {"offline", SNMP_ALUA_OFFLINE},
	    {"transitioning", SNMP_ALUA_TRANSITIONING},
	};

	for (size_t i = 0; s && i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(s, names[i].name))
			return names[i].code;
	/* A state this subagent does not know: not one that serves I/O. */
	return SNMP_ALUA_UNAVAILABLE;
}

/* The disk's "ownership" object: present only for a disk shared between gateways. */
static void build_ownership(struct snmp_disk *d, json_t *own)
{
	uint64_t gw, epoch;

	if (!json_is_object(own)) {
		d->alua = SNMP_ALUA_NOT_SHARED;
		return;
	}
	d->alua = alua_code(json_string_value(json_object_get(own, "alua")));
	gw = u64(own, "owner");
	d->owner_gw = gw <= 255 ? (uint32_t)gw : 0; /* gateway ids are 1..255 */
	epoch = u64(own, "epoch");
	d->owner_epoch = epoch < UINT32_MAX ? (uint32_t)epoch : UINT32_MAX;
	d->owner_moves = u64(own, "transitions");
	d->takeovers = u64(own, "takeovers");
}

/* The disk's "shadow" object (the warm standby): present only for a shared, cached disk. */
static void build_shadow(struct snmp_disk *d, json_t *sh)
{
	if (!json_is_object(sh))
		return;
	d->shadow_hot = u64(sh, "hot_blocks");
	d->shadowed = u64(sh, "shadowed");
	d->shadow_behind = u64(sh, "behind");
	d->shadow_reads = u64(sh, "origin_reads");
	d->shadow_bytes = u64(sh, "origin_bytes");
}

static int build_disk(struct snmp_disk *d, const char *name, json_t *o, json_t *caches)
{
	d->name = strdup(name);
	d->origin = origin_str(o);
	d->cache = str(o, "cache");
	if (!d->name || !d->origin || !d->cache)
		return -ENOMEM;
	d->size = u64(o, "size_bytes");
	d->block_size = (uint32_t)u64(o, "block_size");
	d->read_only = json_is_true(json_object_get(o, "read_only"));
	d->origin_state = SNMP_ORIGIN_OK;
	d->read_cmds = u64(o, "read_cmds");
	d->write_cmds = u64(o, "write_cmds");
	d->other_cmds = u64(o, "other_cmds");
	d->read_bytes = u64(o, "read_bytes");
	d->write_bytes = u64(o, "write_bytes");
	d->errors = u64(o, "errors");
	build_ownership(d, json_object_get(o, "ownership"));
	build_shadow(d, json_object_get(o, "shadow"));

	/* The cache's view of this disk, when it has a cache. */
	json_t *cd = NULL;
	if (d->cache[0])
		cd = json_object_get(json_object_get(json_object_get(caches, d->cache), "disks"),
		                     name);
	if (json_is_object(cd)) {
		d->hits = u64(cd, "read_hits");
		d->partial_hits = u64(cd, "read_partial");
		/*
		 * A sequential stream's reads (read_bypass) are looked up like
		 * any other and counted among hits, partials or misses already:
		 * adding them again made hits + partials + misses exceed the reads.
		 */
		d->misses = u64(cd, "read_misses");
		d->bytes_from_cache = u64(cd, "bytes_read_cache"); /* RAM window's included */
		d->bytes_from_origin = u64(cd, "bytes_read_origin");
	} else {
		d->misses = d->read_cmds;
		d->bytes_from_origin = d->read_bytes;
	}
	d->hit_ratio = ratio(d->bytes_from_cache, d->bytes_from_cache + d->bytes_from_origin);

	unsigned nr = hist_read(o, "read_latency_log2_us", d->read_lat);
	unsigned nw = hist_read(o, "write_latency_log2_us", d->write_lat);
	d->n_lat = nr > nw ? nr : nw;
	d->read_p50 = snmp_lat_quantile(d->read_lat, d->n_lat, 0.5);
	d->read_p99 = snmp_lat_quantile(d->read_lat, d->n_lat, 0.99);
	d->write_p50 = snmp_lat_quantile(d->write_lat, d->n_lat, 0.5);
	d->write_p99 = snmp_lat_quantile(d->write_lat, d->n_lat, 0.99);
	return 0;
}

/* stats restore_state as hlCacheRestoreState; what this subagent does not know reads none */
static int restore_state(const char *s)
{
	if (s && !strcmp(s, "running"))
		return SNMP_RESTORE_RUNNING;
	if (s && !strcmp(s, "done"))
		return SNMP_RESTORE_DONE;
	if (s && !strcmp(s, "stopped"))
		return SNMP_RESTORE_STOPPED;
	return SNMP_RESTORE_NONE;
}

static int build_cache(struct snmp_cache *c, const char *name, json_t *o, json_t *conf)
{
	c->name = strdup(name);
	c->device = str(o, "device");
	c->admission = str(conf, "admission");
	if (!c->name || !c->device || !c->admission)
		return -ENOMEM;
	c->block_size = (uint32_t)u64(o, "block_size");
	c->size = u64(o, "nslots") * c->block_size;
	c->used = u64(o, "used_slots") * c->block_size;
	c->state = json_is_true(json_object_get(o, "passthrough")) ? SNMP_CACHE_PASSTHROUGH
	                                                           : SNMP_CACHE_ACTIVE;
	c->read_reqs = u64(o, "read_reqs");
	c->hits = u64(o, "read_hits");
	c->misses = u64(o, "read_misses"); /* bypassed reads among them (see build_disk) */
	c->admissions = u64(o, "admissions");
	c->rejections = u64(o, "rejections");
	c->evictions = u64(o, "evictions");
	c->dev_bytes_written = u64(o, "bytes_cache_write");
	c->bytes_from_cache = u64(o, "bytes_read_cache"); /* RAM window's included */
	c->bytes_from_origin = u64(o, "bytes_read_origin");
	c->dev_errors = u64(o, "dev_errors");
	c->hit_ratio = ratio(c->bytes_from_cache, c->bytes_from_cache + c->bytes_from_origin);
	{
		double w = json_number_value(json_object_get(o, "write_ratio")) * 10000.0;

		c->write_ratio = w <= 0 ? 0 : w >= (double)UINT32_MAX ? UINT32_MAX : (uint32_t)(w + 0.5);
	}
	c->write_budget = (uint32_t)u64(o, "write_budget_pct");
	c->invalidations = u64(o, "invalidations");
	c->fills_dropped = u64(o, "fills_dropped");
	c->orphan_drops = u64(o, "orphan_drops");
	c->origin_errors = u64(o, "origin_errors");
	c->hit_retries = u64(o, "hit_retries");
	c->hit_streams = u64(o, "hit_streams");
	c->passthrough_ios = u64(o, "passthrough_ios");
	c->bypass_reads = u64(o, "read_bypass");
	c->restore_pages_left = u64(o, "restore_pages_left");
	c->restore_state = restore_state(json_string_value(json_object_get(o, "restore_state")));
	return 0;
}

static int build_session(struct snmp_iscsi_session *s, json_t *o)
{
	s->tsih = (uint32_t)u64(o, "tsih");
	s->tpgt = (uint32_t)u64(o, "tpgt");
	s->since = (int64_t)u64(o, "since");
	s->initiator = str(o, "initiator");
	s->isid = str(o, "isid");
	s->target = str(o, "target");
	s->portal = str(o, "portal");
	s->peer = str(o, "peer");
	if (!s->initiator || !s->isid || !s->target || !s->portal || !s->peer)
		return -ENOMEM;
	return 0;
}

/*
 * The service counters: stats' "iscsi", "write_buffers" and
 * "scratch_buffers" objects, read
 * member by member under the names hotlund gives them (control.c,
 * daemon_stats), as /metrics reads them: one source, renamed only.
 */
static void build_service(struct snmp_snapshot *out, json_t *iscsi, json_t *wb, json_t *scratch)
{
	out->auth_failures = u64(iscsi, "auth_failures");
	out->auth_throttled = u64(iscsi, "auth_throttled");
	out->logins = u64(iscsi, "logins");
	out->login_failures = u64(iscsi, "login_failures");
	out->connections = u64(iscsi, "connections");
	out->pending_logins = u64(iscsi, "pending_logins");
	out->pending_evicted = u64(iscsi, "pending_evicted");
	out->refused_pending = u64(iscsi, "refused_pending");
	out->refused_sessions = u64(iscsi, "refused_sessions");
	out->accept_paused = u64(iscsi, "accept_paused");

	out->wb_limit = u64(wb, "limit");
	out->wb_conn_limit = u64(wb, "conn_limit");
	out->wb_held = u64(wb, "held_bytes");
	out->wb_peak = u64(wb, "peak_bytes");
	out->wb_waiting = u64(wb, "waiting");
	out->wb_waiting_bytes = u64(wb, "waiting_bytes");
	out->wb_deferred = u64(wb, "r2t_deferred");
	out->wb_task_set_full = u64(wb, "task_set_full");
	out->wb_window_closed = u64(wb, "window_closed");
	out->wb_source_limit = u64(wb, "source_limit");
	out->wb_sources = u64(wb, "sources");
	out->wb_source_capped = u64(wb, "source_capped");
	out->wb_closed_slow = u64(wb, "closed_slow");
	out->wb_closed_no_data = u64(wb, "closed_no_data");

	out->scratch_limit = u64(scratch, "limit");
	out->scratch_used = u64(scratch, "used_bytes");
	out->scratch_peak = u64(scratch, "peak_bytes");
	out->scratch_refused = u64(scratch, "refused");
}

int snmp_snapshot_build(json_t *stats, json_t *version, json_t *cache_conf,
                        struct snmp_snapshot *out)
{
	json_t *disks, *caches, *list;
	const char **keys = NULL;
	uint32_t *taken = NULL;
	size_t n, i;
	int rc = -ENOMEM;

	memset(out, 0, sizeof(*out));
	if (!json_is_object(stats))
		return -EPROTO;
	disks = json_object_get(stats, "disks");
	caches = json_object_get(stats, "caches");
	list = json_object_get(stats, "session_list");
	out->reachable = true;
	out->version = str(version, "version");
	out->n_sessions_total = (uint32_t)u64(stats, "sessions");
	build_service(out, json_object_get(stats, "iscsi"), json_object_get(stats, "write_buffers"),
	              json_object_get(stats, "scratch_buffers"));
	if (!out->version)
		goto fail;

	/* Disks, in name order for the index tie-break, then by index. */
	keys = sorted_keys(json_is_object(disks) ? disks : NULL, &n);
	taken = calloc(n ? n : 1, sizeof(*taken));
	out->disks = calloc(n ? n : 1, sizeof(*out->disks));
	if (!keys || !taken || !out->disks)
		goto fail;
	for (i = 0; i < n; i++) {
		struct snmp_disk *d = &out->disks[i];
		out->n_disks++;
		if (build_disk(d, keys[i], json_object_get(disks, keys[i]), caches))
			goto fail;
		d->index = unique_index(keys[i], taken, i);
		taken[i] = d->index;
		out->n_lat += d->n_lat;
	}
	qsort(out->disks, out->n_disks, sizeof(*out->disks), disk_cmp);
	free(keys);
	free(taken);
	keys = NULL;
	taken = NULL;

	out->lat = calloc(out->n_lat ? out->n_lat : 1, sizeof(*out->lat));
	if (!out->lat)
		goto fail;
	n = 0;
	for (i = 0; i < out->n_disks; i++)
		for (unsigned b = 0; b < out->disks[i].n_lat; b++)
			out->lat[n++] = (struct snmp_lat_row){&out->disks[i], b + 1};

	keys = sorted_keys(json_is_object(caches) ? caches : NULL, &n);
	taken = calloc(n ? n : 1, sizeof(*taken));
	out->caches = calloc(n ? n : 1, sizeof(*out->caches));
	if (!keys || !taken || !out->caches)
		goto fail;
	for (i = 0; i < n; i++) {
		struct snmp_cache *c = &out->caches[i];
		out->n_caches++;
		if (build_cache(c, keys[i], json_object_get(caches, keys[i]),
		                json_object_get(cache_conf, keys[i])))
			goto fail;
		c->index = unique_index(keys[i], taken, i);
		taken[i] = c->index;
	}
	qsort(out->caches, out->n_caches, sizeof(*out->caches), cache_cmp);

	n = json_is_array(list) ? json_array_size(list) : 0;
	out->sessions = calloc(n ? n : 1, sizeof(*out->sessions));
	if (!out->sessions)
		goto fail;
	for (i = 0; i < n; i++) {
		struct snmp_iscsi_session s = {0};
		int brc = build_session(&s, json_array_get(list, i));
		/* TSIH 0 is never assigned; a duplicate would break the index. */
		bool dup = false;
		for (size_t j = 0; j < out->n_sessions; j++)
			dup = dup || out->sessions[j].tsih == s.tsih;
		out->sessions[out->n_sessions++] = s;
		if (brc)
			goto fail;
		if (s.tsih == 0 || s.tsih > 65535 || dup) {
			out->n_sessions--;
			free(s.initiator);
			free(s.isid);
			free(s.target);
			free(s.portal);
			free(s.peer);
		}
	}
	qsort(out->sessions, out->n_sessions, sizeof(*out->sessions), session_cmp);
	free(keys);
	free(taken);
	return 0;

fail:
	free(keys);
	free(taken);
	snmp_snapshot_free(out);
	return rc;
}

static int node_cmp(const void *a, const void *b)
{
	return by_u32(&((const struct snmp_node *)a)->index, &((const struct snmp_node *)b)->index);
}

static int portal_cmp(const void *a, const void *b)
{
	return by_u32(&((const struct snmp_portal *)a)->index,
	              &((const struct snmp_portal *)b)->index);
}

/* "1.2.3.4:3260", "[::1]:3260" or "host:3260" into address type, bytes and port. */
static int parse_portal(struct snmp_portal *p, const char *text)
{
	const char *colon = strrchr(text, ':');
	size_t hlen;
	char *end;

	p->text = strdup(text);
	if (!p->text)
		return -ENOMEM;
	if (!colon)
		colon = text + strlen(text);
	hlen = (size_t)(colon - text);
	if (hlen >= 2 && text[0] == '[' && text[hlen - 1] == ']') {
		text++;
		hlen -= 2;
	}
	p->host = strndup(text, hlen);
	if (!p->host)
		return -ENOMEM;
	p->port = *colon ? (uint32_t)strtoul(colon + 1, &end, 10) : 3260;
	if (inet_pton(AF_INET, p->host, p->addr) == 1) {
		p->addr_type = 1;
		p->addr_len = 4;
	} else if (inet_pton(AF_INET6, p->host, p->addr) == 1) {
		p->addr_type = 2;
		p->addr_len = 16;
	} else {
		p->addr_type = 16; /* dns: the name itself (SIZE 1..255) */
		p->addr_len = strlen(p->host);
	}
	return 0;
}

int snmp_snapshot_add_iscsi(struct snmp_snapshot *s, json_t *global, json_t *targets)
{
	json_t *portals = json_object_get(global, "portal");
	const char **keys;
	uint32_t *taken;
	size_t n, i;

	keys = sorted_keys(json_is_object(targets) ? targets : NULL, &n);
	taken = calloc(n ? n : 1, sizeof(*taken));
	s->nodes = calloc(n ? n : 1, sizeof(*s->nodes));
	if (!keys || !taken || !s->nodes)
		goto nomem;
	for (i = 0; i < n; i++) {
		struct snmp_node *nd = &s->nodes[i];
		s->n_nodes++;
		nd->name = strdup(keys[i]);
		nd->alias = str(json_object_get(targets, keys[i]), "alias");
		if (!nd->name || !nd->alias)
			goto nomem;
		nd->index = unique_index(keys[i], taken, i);
		taken[i] = nd->index;
	}
	qsort(s->nodes, s->n_nodes, sizeof(*s->nodes), node_cmp);
	free(keys);
	free(taken);
	keys = NULL;

	n = json_is_array(portals) ? json_array_size(portals) : 0;
	taken = calloc(n ? n : 1, sizeof(*taken));
	s->portals = calloc(n ? n : 1, sizeof(*s->portals));
	if (!taken || !s->portals)
		goto nomem;
	for (i = 0; i < n; i++) {
		const char *text = json_string_value(json_array_get(portals, i));
		struct snmp_portal *p = &s->portals[s->n_portals];
		if (!text)
			continue;
		s->n_portals++;
		if (parse_portal(p, text))
			goto nomem;
		p->index = unique_index(text, taken, s->n_portals - 1);
		taken[s->n_portals - 1] = p->index;
	}
	qsort(s->portals, s->n_portals, sizeof(*s->portals), portal_cmp);
	free(taken);
	return 0;

nomem:
	free(keys);
	free(taken);
	return -ENOMEM;
}

uint32_t snmp_node_index(const struct snmp_snapshot *s, const char *iqn)
{
	for (size_t i = 0; i < s->n_nodes; i++)
		if (!strcmp(s->nodes[i].name, iqn))
			return s->nodes[i].index;
	return 0;
}

void snmp_snapshot_free(struct snmp_snapshot *s)
{
	size_t i;

	for (i = 0; i < s->n_nodes; i++) {
		free(s->nodes[i].name);
		free(s->nodes[i].alias);
	}
	for (i = 0; i < s->n_portals; i++) {
		free(s->portals[i].text);
		free(s->portals[i].host);
	}
	free(s->nodes);
	free(s->portals);

	for (i = 0; i < s->n_disks; i++) {
		free(s->disks[i].name);
		free(s->disks[i].origin);
		free(s->disks[i].cache);
	}
	for (i = 0; i < s->n_caches; i++) {
		free(s->caches[i].name);
		free(s->caches[i].device);
		free(s->caches[i].admission);
	}
	for (i = 0; i < s->n_sessions; i++) {
		free(s->sessions[i].initiator);
		free(s->sessions[i].isid);
		free(s->sessions[i].target);
		free(s->sessions[i].portal);
		free(s->sessions[i].peer);
	}
	free(s->disks);
	free(s->caches);
	free(s->sessions);
	free(s->lat);
	free(s->version);
	memset(s, 0, sizeof(*s));
}

/* ---- the watcher ---- */

static struct snmp_watch_item *find_item(struct snmp_watch_item *v, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(v[i].name, name))
			return &v[i];
	return NULL;
}

/* Add items for names not yet known; mark which are present. */
static int track(struct snmp_watch_item **v, size_t *n, const char *const *names, size_t count)
{
	for (size_t i = 0; i < *n; i++)
		(*v)[i].seen = false;
	for (size_t i = 0; i < count; i++) {
		struct snmp_watch_item *it = find_item(*v, *n, names[i]);
		if (!it) {
			struct snmp_watch_item *nv = realloc(*v, (*n + 1) * sizeof(**v));
			if (!nv)
				return -ENOMEM;
			*v = nv;
			it = &nv[(*n)++];
			memset(it, 0, sizeof(*it));
			it->name = strdup(names[i]);
			if (!it->name) {
				(*n)--;
				return -ENOMEM;
			}
			it->state = -1; /* new: no baseline yet */
		}
		it->seen = true;
	}
	return 0;
}

static void forget_unseen(struct snmp_watch_item *v, size_t *n)
{
	size_t j = 0;

	for (size_t i = 0; i < *n; i++) {
		if (v[i].seen)
			v[j++] = v[i];
		else
			free(v[i].name);
	}
	*n = j;
}

int snmp_watch_update(struct snmp_watch *w, struct snmp_snapshot *s, double now_s, snmp_event_fn fn,
                      void *ctx)
{
	size_t n = s->n_disks > s->n_caches ? s->n_disks : s->n_caches;
	const char **names = calloc(n ? n : 1, sizeof(*names));
	size_t i;

	if (!names)
		return -ENOMEM;
	for (i = 0; i < s->n_disks; i++)
		names[i] = s->disks[i].name;
	if (track(&w->disks, &w->n_disks, names, s->n_disks))
		goto nomem;
	for (i = 0; i < s->n_caches; i++)
		names[i] = s->caches[i].name;
	if (track(&w->caches, &w->n_caches, names, s->n_caches))
		goto nomem;
	free(names);

	for (i = 0; i < s->n_disks; i++) {
		struct snmp_disk *d = &s->disks[i];
		struct snmp_watch_item *it = find_item(w->disks, w->n_disks, d->name);
		if (it->state < 0) {
			it->state = SNMP_ORIGIN_OK;
			it->errors = d->errors;
			it->alua = d->alua;
		} else if (d->errors != it->errors) {
			/* Grown (or reset by a restart of hotlund: a new baseline). */
			if (d->errors > it->errors) {
				it->last_error_s = now_s;
				if (it->state != SNMP_ORIGIN_FAILING) {
					it->state = SNMP_ORIGIN_FAILING;
					d->origin_state = it->state;
					fn(ctx, SNMP_EV_ORIGIN_LOST, d);
				}
			}
			it->errors = d->errors;
		} else if (it->state == SNMP_ORIGIN_FAILING &&
		           now_s - it->last_error_s >= SNMP_ORIGIN_QUIET_S) {
			it->state = SNMP_ORIGIN_OK;
			d->origin_state = it->state;
			fn(ctx, SNMP_EV_ORIGIN_RECOVERED, d);
		}
		d->origin_state = it->state;
		/*
		 * Every change seen between two polls; a move that passes through
		 * transitioning faster than a poll shows only its end state.
		 */
		if (d->alua != it->alua) {
			it->alua = d->alua;
			fn(ctx, SNMP_EV_ALUA_CHANGED, d);
		}
	}
	for (i = 0; i < s->n_caches; i++) {
		struct snmp_cache *c = &s->caches[i];
		struct snmp_watch_item *it = find_item(w->caches, w->n_caches, c->name);
		int before = it->state < 0 ? SNMP_CACHE_ACTIVE : it->state;
		it->state = c->state;
		if (before != c->state)
			fn(ctx,
			   c->state == SNMP_CACHE_PASSTHROUGH ? SNMP_EV_CACHE_FAILED
			                                      : SNMP_EV_CACHE_RECOVERED,
			   c);
	}
	forget_unseen(w->disks, &w->n_disks);
	forget_unseen(w->caches, &w->n_caches);
	return 0;

nomem:
	free(names);
	return -ENOMEM;
}

void snmp_watch_free(struct snmp_watch *w)
{
	for (size_t i = 0; i < w->n_disks; i++)
		free(w->disks[i].name);
	for (size_t i = 0; i < w->n_caches; i++)
		free(w->caches[i].name);
	free(w->disks);
	free(w->caches);
	memset(w, 0, sizeof(*w));
}
