/*
 * snmp_agent.c - the net-snmp side of hotlun-snmp: registers the
 * HOTLUN-MIB scalars and tables with the agent library (the table
 * iterator helper over the current snapshot's row arrays) and sends the
 * notifications through the AgentX master (no Counter64 in them, so that
 * SNMPv1 trap sinks get them too).
 *
 * Every table is described by one struct table_def (its OID, columns,
 * how to list rows and read a column), and one handler serves them all.
 * The snapshot is swapped only between requests (the poll runs as an
 * alarm in the agent's main loop, never inside a PDU), so the row
 * pointers the iterator hands to the handler stay valid for the request.
 */
#include "snmp/snmp_internal.h"

#include <net-snmp/net-snmp-config.h>
#include <net-snmp/net-snmp-includes.h>
#include <net-snmp/agent/net-snmp-agent-includes.h>

#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

/* HOTLUN-MIB: enterprises.99999 is a placeholder (see contrib/HOTLUN-MIB.txt). */
#define HL_MIB 1, 3, 6, 1, 4, 1, 99999
static const oid agent_oid[] = {HL_MIB, 1, 1};
static const oid disk_oid[] = {HL_MIB, 1, 2};
static const oid cache_oid[] = {HL_MIB, 1, 3};
static const oid session_oid[] = {HL_MIB, 1, 4};
static const oid lat_oid[] = {HL_MIB, 1, 5};
static const oid notif_oid[] = {HL_MIB, 0};
static const oid trap_oid_oid[] = {1, 3, 6, 1, 6, 3, 1, 1, 4, 1, 0}; /* snmpTrapOID.0 */

#define ADMIN_STRING_MAX 255 /* SnmpAdminString is at most 255 octets */

static struct snmp_snapshot *const *g_cur;
static const unsigned *g_poll_ms;

/* One column value, whatever its type. */
struct value {
	u_char type;
	uint64_t n;
	const char *s; /* ASN_OCTET_STR: the bytes (not owned) */
	size_t len;
	u_char buf[11]; /* DateAndTime */
};

static void num(struct value *v, u_char type, uint64_t n)
{
	v->type = type;
	v->n = n;
}

static void text(struct value *v, const char *s)
{
	v->type = ASN_OCTET_STR;
	v->s = s ? s : "";
	v->len = strlen(v->s);
	if (v->len > ADMIN_STRING_MAX)
		v->len = ADMIN_STRING_MAX;
}

static void date_and_time(struct value *v, int64_t unix_s)
{
	struct tm tm;
	time_t t = (time_t)unix_s;

	gmtime_r(&t, &tm);
	v->type = ASN_OCTET_STR;
	v->buf[0] = (u_char)((tm.tm_year + 1900) >> 8);
	v->buf[1] = (u_char)(tm.tm_year + 1900);
	v->buf[2] = (u_char)(tm.tm_mon + 1);
	v->buf[3] = (u_char)tm.tm_mday;
	v->buf[4] = (u_char)tm.tm_hour;
	v->buf[5] = (u_char)tm.tm_min;
	v->buf[6] = (u_char)tm.tm_sec;
	v->buf[7] = 0;
	v->buf[8] = '+';
	v->buf[9] = 0;
	v->buf[10] = 0;
	v->s = (const char *)v->buf;
	v->len = 11;
}

static void set_value(netsnmp_variable_list *vb, const struct value *v)
{
	if (v->type == ASN_COUNTER64) {
		struct counter64 c = {.high = (u_long)(v->n >> 32),
		                      .low = (u_long)(v->n & 0xffffffffu)};
		snmp_set_var_typed_value(vb, ASN_COUNTER64, &c, sizeof(c));
	} else if (v->type == ASN_OCTET_STR || v->type == ASN_OBJECT_ID) {
		snmp_set_var_typed_value(vb, v->type, v->s, v->len);
	} else {
		snmp_set_var_typed_integer(vb, v->type, (long)v->n);
	}
}

#define TRUTH(b) ((b) ? 1 : 2) /* TruthValue */

/* ---- the tables ---- */

struct table_def {
	const char *name;
	const oid *base;
	size_t base_len;
	unsigned min_col, max_col; /* readable columns; value() may skip some (-1) */
	unsigned n_index;          /* Unsigned32 index parts: 1 to 3 */
	size_t (*count)(const struct snmp_snapshot *s);
	const void *(*row)(const struct snmp_snapshot *s, size_t i);
	void (*index)(const void *row, uint32_t idx[3]);
	int (*value)(const void *row, unsigned col, struct value *v); /* 0 or -1: no such column */
};

static size_t disk_count(const struct snmp_snapshot *s)
{
	return s->n_disks;
}

static const void *disk_row(const struct snmp_snapshot *s, size_t i)
{
	return &s->disks[i];
}

static void disk_index(const void *row, uint32_t idx[3])
{
	idx[0] = ((const struct snmp_disk *)row)->index;
}

static int disk_value(const void *row, unsigned col, struct value *v)
{
	const struct snmp_disk *d = row;

	switch (col) {
	case 2:
		text(v, d->name);
		break;
	case 3:
		text(v, d->origin);
		break;
	case 4:
		num(v, ASN_COUNTER64, d->size);
		break;
	case 5:
		num(v, ASN_UNSIGNED, d->block_size);
		break;
	case 6:
		num(v, ASN_INTEGER, TRUTH(d->read_only));
		break;
	case 7:
		num(v, ASN_INTEGER, (uint64_t)d->origin_state);
		break;
	case 8:
		text(v, d->cache);
		break;
	case 9:
		num(v, ASN_COUNTER64, d->read_cmds);
		break;
	case 10:
		num(v, ASN_COUNTER64, d->write_cmds);
		break;
	case 11:
		num(v, ASN_COUNTER64, d->other_cmds);
		break;
	case 12:
		num(v, ASN_COUNTER64, d->read_bytes);
		break;
	case 13:
		num(v, ASN_COUNTER64, d->write_bytes);
		break;
	case 14:
		num(v, ASN_COUNTER64, d->errors);
		break;
	case 15:
		num(v, ASN_COUNTER64, d->hits);
		break;
	case 16:
		num(v, ASN_COUNTER64, d->partial_hits);
		break;
	case 17:
		num(v, ASN_COUNTER64, d->misses);
		break;
	case 18:
		num(v, ASN_GAUGE, d->hit_ratio);
		break;
	case 19:
		num(v, ASN_COUNTER64, d->bytes_from_cache);
		break;
	case 20:
		num(v, ASN_COUNTER64, d->bytes_from_origin);
		break;
	case 21:
		num(v, ASN_GAUGE, d->read_p50);
		break;
	case 22:
		num(v, ASN_GAUGE, d->read_p99);
		break;
	case 23:
		num(v, ASN_GAUGE, d->write_p50);
		break;
	case 24:
		num(v, ASN_GAUGE, d->write_p99);
		break;
	case 25:
		num(v, ASN_INTEGER, (uint64_t)d->alua);
		break;
	case 26:
		num(v, ASN_UNSIGNED, d->owner_gw);
		break;
	case 27:
		num(v, ASN_UNSIGNED, d->owner_epoch);
		break;
	case 28:
		num(v, ASN_COUNTER64, d->owner_moves);
		break;
	case 29:
		num(v, ASN_COUNTER64, d->takeovers);
		break;
	case 30:
		num(v, ASN_COUNTER64, d->shadow_hot);
		break;
	case 31:
		num(v, ASN_COUNTER64, d->shadowed);
		break;
	case 32:
		num(v, ASN_COUNTER64, d->shadow_behind);
		break;
	case 33:
		num(v, ASN_COUNTER64, d->shadow_reads);
		break;
	case 34:
		num(v, ASN_COUNTER64, d->shadow_bytes);
		break;
	default:
		return -1;
	}
	return 0;
}

static size_t cache_count(const struct snmp_snapshot *s)
{
	return s->n_caches;
}

static const void *cache_row(const struct snmp_snapshot *s, size_t i)
{
	return &s->caches[i];
}

static void cache_index(const void *row, uint32_t idx[3])
{
	idx[0] = ((const struct snmp_cache *)row)->index;
}

static int cache_value(const void *row, unsigned col, struct value *v)
{
	const struct snmp_cache *c = row;

	switch (col) {
	case 2:
		text(v, c->name);
		break;
	case 3:
		text(v, c->device);
		break;
	case 4:
		num(v, ASN_COUNTER64, c->size);
		break;
	case 5:
		num(v, ASN_COUNTER64, c->used);
		break;
	case 6:
		num(v, ASN_UNSIGNED, c->block_size);
		break;
	case 7:
		text(v, c->admission);
		break;
	case 8:
		num(v, ASN_INTEGER, (uint64_t)c->state);
		break;
	case 9:
		num(v, ASN_COUNTER64, c->read_reqs);
		break;
	case 10:
		num(v, ASN_COUNTER64, c->hits);
		break;
	case 11:
		num(v, ASN_COUNTER64, c->misses);
		break;
	case 12:
		num(v, ASN_COUNTER64, c->admissions);
		break;
	case 13:
		num(v, ASN_COUNTER64, c->rejections);
		break;
	case 14:
		num(v, ASN_COUNTER64, c->evictions);
		break;
	case 15:
		num(v, ASN_COUNTER64, c->dev_bytes_written);
		break;
	case 16:
		num(v, ASN_COUNTER64, c->bytes_from_cache);
		break;
	case 17:
		num(v, ASN_COUNTER64, c->bytes_from_origin);
		break;
	case 18:
		num(v, ASN_COUNTER64, c->dev_errors);
		break;
	case 19:
		num(v, ASN_GAUGE, c->hit_ratio);
		break;
	case 20:
		num(v, ASN_GAUGE, c->write_ratio);
		break;
	case 21:
		num(v, ASN_UNSIGNED, c->write_budget);
		break;
	case 22:
		num(v, ASN_COUNTER64, c->invalidations);
		break;
	case 23:
		num(v, ASN_COUNTER64, c->fills_dropped);
		break;
	case 24:
		num(v, ASN_COUNTER64, c->orphan_drops);
		break;
	case 25:
		num(v, ASN_COUNTER64, c->origin_errors);
		break;
	case 26:
		num(v, ASN_COUNTER64, c->hit_retries);
		break;
	case 27:
		num(v, ASN_COUNTER64, c->hit_streams);
		break;
	case 28:
		num(v, ASN_COUNTER64, c->passthrough_ios);
		break;
	case 29:
		num(v, ASN_COUNTER64, c->bypass_reads);
		break;
	case 30:
		num(v, ASN_INTEGER, (uint64_t)c->restore_state);
		break;
	case 31:
		num(v, ASN_COUNTER64, c->restore_pages_left);
		break;
	default:
		return -1;
	}
	return 0;
}

static size_t session_count(const struct snmp_snapshot *s)
{
	return s->n_sessions;
}

static const void *session_row(const struct snmp_snapshot *s, size_t i)
{
	return &s->sessions[i];
}

static void session_index(const void *row, uint32_t idx[3])
{
	idx[0] = ((const struct snmp_iscsi_session *)row)->tsih;
}

static int session_value(const void *row, unsigned col, struct value *v)
{
	const struct snmp_iscsi_session *s = row;

	switch (col) {
	case 2:
		text(v, s->initiator);
		break;
	case 3:
		text(v, s->isid);
		break;
	case 4:
		text(v, s->target);
		break;
	case 5:
		text(v, s->portal);
		break;
	case 6:
		text(v, s->peer);
		break;
	case 7:
		date_and_time(v, s->since);
		break;
	case 8:
		num(v, ASN_UNSIGNED, s->tpgt);
		break;
	default:
		return -1;
	}
	return 0;
}

static size_t lat_count(const struct snmp_snapshot *s)
{
	return s->n_lat;
}

static const void *lat_row(const struct snmp_snapshot *s, size_t i)
{
	return &s->lat[i];
}

static void lat_index(const void *row, uint32_t idx[3])
{
	const struct snmp_lat_row *r = row;

	idx[0] = r->disk->index;
	idx[1] = r->bucket;
}

static int lat_value(const void *row, unsigned col, struct value *v)
{
	const struct snmp_lat_row *r = row;
	unsigned b = r->bucket - 1;

	switch (col) {
	case 2:
		num(v, ASN_UNSIGNED, snmp_lat_bound(b, r->disk->n_lat));
		break;
	case 3:
		num(v, ASN_COUNTER64, r->disk->read_lat[b]);
		break;
	case 4:
		num(v, ASN_COUNTER64, r->disk->write_lat[b]);
		break;
	default:
		return -1;
	}
	return 0;
}

/*
 * ISCSI-MIB (RFC 4544, revised by RFC 7147) under mib-2.142: the parts
 * that describe the instance, its portals, its target nodes and their
 * sessions, as far as hotlund's control socket knows them. Columns whose
 * facts hotlund does not export (negotiation preferences, login and
 * session-failure counters, discontinuity times) are not served: a GET
 * answers noSuchInstance and a walk skips them. One instance, index 1.
 */
#define ISCSI_MIB 1, 3, 6, 1, 2, 1, 142
static const oid iscsi_inst_oid[] = {ISCSI_MIB, 1, 1, 1};      /* iscsiInstanceAttributesTable */
static const oid iscsi_portal_oid[] = {ISCSI_MIB, 1, 2, 1};    /* iscsiPortalAttributesTable */
static const oid iscsi_tgtportal_oid[] = {ISCSI_MIB, 1, 3, 1}; /* iscsiTgtPortalAttributesTable */
static const oid iscsi_node_oid[] = {ISCSI_MIB, 1, 5, 1};      /* iscsiNodeAttributesTable */
static const oid iscsi_ssn_oid[] = {ISCSI_MIB, 1, 10, 1};      /* iscsiSessionAttributesTable */
#define ISCSI_INSTANCE   1
#define ISCSI_PORTAL_TAG 1 /* one portal group, shared by every target */

static size_t inst_count(const struct snmp_snapshot *s)
{
	return s->reachable ? 1 : 0;
}

static const void *inst_row(const struct snmp_snapshot *s, size_t i)
{
	return s;
}

static void inst_index(const void *row, uint32_t idx[3])
{
	idx[0] = ISCSI_INSTANCE;
}

static int inst_value(const void *row, unsigned col, struct value *v)
{
	const struct snmp_snapshot *s = row;

	switch (col) {
	case 2: /* iscsiInstDescr */
		text(v, "hotlun iSCSI target with an SSD read cache");
		break;
	case 3: /* VersionMin: RFC 7143 is version 0 */
		num(v, ASN_UNSIGNED, 0);
		break;
	case 4: /* VersionMax */
		num(v, ASN_UNSIGNED, 0);
		break;
	case 5: /* VendorID */
		text(v, "hotlun project");
		break;
	case 6: /* VendorVersion */
		text(v, s->version);
		break;
	case 7: /* PortalNumber */
		num(v, ASN_UNSIGNED, s->n_portals);
		break;
	case 8: /* NodeNumber */
		num(v, ASN_UNSIGNED, s->n_nodes);
		break;
	case 9: /* SessionNumber */
		num(v, ASN_UNSIGNED, s->n_sessions);
		break;
	default:
		return -1;
	}
	return 0;
}

static size_t portal_count(const struct snmp_snapshot *s)
{
	return s->n_portals;
}

static const void *portal_row(const struct snmp_snapshot *s, size_t i)
{
	return &s->portals[i];
}

static void portal_index(const void *row, uint32_t idx[3])
{
	idx[0] = ISCSI_INSTANCE;
	idx[1] = ((const struct snmp_portal *)row)->index;
	idx[2] = 0; /* iscsiTgtPortalNodeIndexOrZero: the tag is the same for every node */
}

static int portal_value(const void *row, unsigned col, struct value *v)
{
	const struct snmp_portal *p = row;
	static const char target_role = (char)0x80; /* BITS { targetTypePortal(0) } */

	switch (col) {
	case 2: /* iscsiPortalRowStatus: active */
		num(v, ASN_INTEGER, 1);
		break;
	case 3: /* iscsiPortalRoles */
		v->type = ASN_OCTET_STR;
		v->s = &target_role;
		v->len = 1;
		break;
	case 4: /* AddrType */
		num(v, ASN_INTEGER, (uint64_t)p->addr_type);
		break;
	case 5: /* Addr */
		v->type = ASN_OCTET_STR;
		v->s = p->addr_type == 16 ? p->host : (const char *)p->addr;
		v->len = p->addr_len;
		break;
	case 6: /* Protocol: TCP */
		num(v, ASN_UNSIGNED, 6);
		break;
	case 13: /* StorageType: readOnly (from the config) */
		num(v, ASN_INTEGER, 5);
		break;
	case 14: /* Descr */
		text(v, p->text);
		break;
	default:
		return -1;
	}
	return 0;
}

static int tgtportal_value(const void *row, unsigned col, struct value *v)
{
	const struct snmp_portal *p = row;

	switch (col) {
	case 2: /* iscsiTgtPortalPort */
		num(v, ASN_UNSIGNED, p->port);
		break;
	case 3: /* iscsiTgtPortalTag */
		num(v, ASN_UNSIGNED, ISCSI_PORTAL_TAG);
		break;
	default:
		return -1;
	}
	return 0;
}

static size_t node_count(const struct snmp_snapshot *s)
{
	return s->n_nodes;
}

static const void *node_row(const struct snmp_snapshot *s, size_t i)
{
	return &s->nodes[i];
}

static void node_index(const void *row, uint32_t idx[3])
{
	idx[0] = ISCSI_INSTANCE;
	idx[1] = ((const struct snmp_node *)row)->index;
}

static int node_value(const void *row, unsigned col, struct value *v)
{
	const struct snmp_node *n = row;
	static const char target_role = (char)0x80; /* BITS { targetTypeNode(0) } */
	static const oid zero_dot_zero[] = {0, 0};

	switch (col) {
	case 2: /* iscsiNodeName */
		text(v, n->name);
		break;
	case 3: /* iscsiNodeAlias */
		text(v, n->alias);
		break;
	case 4: /* iscsiNodeRoles */
		v->type = ASN_OCTET_STR;
		v->s = &target_role;
		v->len = 1;
		break;
	case 5: /* iscsiNodeTransportType: no SCSI-MIB row to point at */
		v->type = ASN_OBJECT_ID;
		v->s = (const char *)zero_dot_zero;
		v->len = sizeof(zero_dot_zero);
		break;
	default:
		return -1;
	}
	return 0;
}

/* Session rows need the snapshot (for the node index): rows are its sessions. */
static const struct snmp_snapshot *ssn_snap(void);

static void ssn_index(const void *row, uint32_t idx[3])
{
	const struct snmp_iscsi_session *s = row;

	idx[0] = ISCSI_INSTANCE;
	idx[1] = snmp_node_index(ssn_snap(), s->target); /* 0: discovery session */
	idx[2] = s->tsih;
}

static int ssn_value(const void *row, unsigned col, struct value *v)
{
	const struct snmp_iscsi_session *s = row;
	unsigned i;

	switch (col) {
	case 3: /* iscsiSsnDirection: inboundSession */
		num(v, ASN_INTEGER, 1);
		break;
	case 4: /* iscsiSsnInitiatorName */
		text(v, s->initiator);
		break;
	case 5: /* iscsiSsnTargetName: empty when inbound */
		text(v, "");
		break;
	case 6: /* iscsiSsnTSIH */
		num(v, ASN_UNSIGNED, s->tsih);
		break;
	case 7: /* iscsiSsnISID: 6 octets from hex */
		if (strlen(s->isid) != 12)
			return -1;
		for (i = 0; i < 6; i++) {
			unsigned byte;
			if (sscanf(s->isid + 2 * i, "%2x", &byte) != 1)
				return -1;
			v->buf[i] = (u_char)byte;
		}
		v->type = ASN_OCTET_STR;
		v->s = (const char *)v->buf;
		v->len = 6;
		break;
	default:
		return -1;
	}
	return 0;
}

static const struct table_def tables[] = {
    {"hlDiskTable", disk_oid, OID_LENGTH(disk_oid), 2, 34, 1, disk_count, disk_row, disk_index,
     disk_value},
    {"hlCacheTable", cache_oid, OID_LENGTH(cache_oid), 2, 31, 1, cache_count, cache_row,
     cache_index, cache_value},
    {"hlSessionTable", session_oid, OID_LENGTH(session_oid), 2, 8, 1, session_count, session_row,
     session_index, session_value},
    {"hlDiskLatencyTable", lat_oid, OID_LENGTH(lat_oid), 2, 4, 2, lat_count, lat_row, lat_index,
     lat_value},
    {"iscsiInstanceAttributesTable", iscsi_inst_oid, OID_LENGTH(iscsi_inst_oid), 2, 9, 1,
     inst_count, inst_row, inst_index, inst_value},
    {"iscsiPortalAttributesTable", iscsi_portal_oid, OID_LENGTH(iscsi_portal_oid), 2, 14, 2,
     portal_count, portal_row, portal_index, portal_value},
    {"iscsiTgtPortalAttributesTable", iscsi_tgtportal_oid, OID_LENGTH(iscsi_tgtportal_oid), 2, 3, 3,
     portal_count, portal_row, portal_index, tgtportal_value},
    {"iscsiNodeAttributesTable", iscsi_node_oid, OID_LENGTH(iscsi_node_oid), 2, 5, 2, node_count,
     node_row, node_index, node_value},
    {"iscsiSessionAttributesTable", iscsi_ssn_oid, OID_LENGTH(iscsi_ssn_oid), 3, 7, 3,
     session_count, session_row, ssn_index, ssn_value},
};

static const struct snmp_snapshot *ssn_snap(void)
{
	return *g_cur;
}

/*
 * Iterator hooks: the loop context is the next row's position (+1, so the
 * first row is not NULL), the data context the row itself.
 */
static netsnmp_variable_list *iter_at(size_t pos, void **loop_ctx, void **data_ctx,
                                      netsnmp_variable_list *idx, const struct table_def *t)
{
	const struct snmp_snapshot *s = *g_cur;
	uint32_t ix[3] = {0, 0, 0};
	const void *row;

	if (!s || pos >= t->count(s))
		return NULL;
	row = t->row(s, pos);
	t->index(row, ix);
	netsnmp_variable_list *v = idx;
	for (unsigned k = 0; k < t->n_index && v; k++, v = v->next_variable)
		snmp_set_var_typed_integer(v, ASN_UNSIGNED, (long)ix[k]);
	*loop_ctx = (void *)(uintptr_t)(pos + 1);
	*data_ctx = (void *)row;
	return idx;
}

static netsnmp_variable_list *iter_first(void **loop_ctx, void **data_ctx,
                                         netsnmp_variable_list *idx, netsnmp_iterator_info *ii)
{
	return iter_at(0, loop_ctx, data_ctx, idx, ii->myvoid);
}

static netsnmp_variable_list *iter_next(void **loop_ctx, void **data_ctx,
                                        netsnmp_variable_list *idx, netsnmp_iterator_info *ii)
{
	return iter_at((size_t)(uintptr_t)*loop_ctx, loop_ctx, data_ctx, idx, ii->myvoid);
}

static int table_handler(netsnmp_mib_handler *handler, netsnmp_handler_registration *reg,
                         netsnmp_agent_request_info *reqinfo, netsnmp_request_info *requests)
{
	const struct table_def *t = handler->myvoid;

	if (reqinfo->mode != MODE_GET)
		return SNMP_ERR_NOERROR;
	for (netsnmp_request_info *r = requests; r; r = r->next) {
		const void *row = netsnmp_extract_iterator_context(r);
		netsnmp_table_request_info *ti = netsnmp_extract_table_info(r);
		struct value v = {0};

		if (r->processed)
			continue;
		if (!row || !ti || t->value(row, ti->colnum, &v)) {
			netsnmp_set_request_error(reqinfo, r, SNMP_NOSUCHINSTANCE);
			continue;
		}
		set_value(r->requestvb, &v);
	}
	return SNMP_ERR_NOERROR;
}

static int register_table(const struct table_def *t)
{
	netsnmp_handler_registration *reg;
	netsnmp_table_registration_info *ti;
	netsnmp_iterator_info *ii;

	reg = netsnmp_create_handler_registration(t->name, table_handler, t->base, t->base_len,
	                                          HANDLER_CAN_RONLY);
	ti = SNMP_MALLOC_TYPEDEF(netsnmp_table_registration_info);
	ii = SNMP_MALLOC_TYPEDEF(netsnmp_iterator_info);
	if (!reg || !ti || !ii) {
		SNMP_FREE(ti);
		SNMP_FREE(ii);
		return -ENOMEM;
	}
	reg->handler->myvoid = (void *)t;
	if (t->n_index == 3)
		netsnmp_table_helper_add_indexes(ti, ASN_UNSIGNED, ASN_UNSIGNED, ASN_UNSIGNED, 0);
	else if (t->n_index == 2)
		netsnmp_table_helper_add_indexes(ti, ASN_UNSIGNED, ASN_UNSIGNED, 0);
	else
		netsnmp_table_helper_add_indexes(ti, ASN_UNSIGNED, 0);
	ti->min_column = t->min_col;
	ti->max_column = t->max_col;
	ii->get_first_data_point = iter_first;
	ii->get_next_data_point = iter_next;
	ii->table_reginfo = ti;
	ii->myvoid = (void *)t;
	return netsnmp_register_table_iterator2(reg, ii) == MIB_REGISTERED_OK ? 0 : -EEXIST;
}

/* ---- scalars (hlAgent) ---- */

/*
 * hlAgent.6 onwards: one number of the snapshot each, by sub-identifier.
 * CounterBasedGauge64 (HCNUM-TC) travels as Counter64; a Gauge32 is
 * clamped, never wrapped. While hotlund is unreachable they read 0.
 */
#define AGENT_N(sub, asn, field) [sub] = {asn, offsetof(struct snmp_snapshot, field)}
static const struct agent_num {
	u_char type; /* 0: not a number of this table */
	size_t off;
} agent_nums[] = {
    AGENT_N(6, ASN_COUNTER64, auth_failures),
    AGENT_N(7, ASN_COUNTER64, auth_throttled),
    /* hlAgentGroup2: the write buffer budget */
    AGENT_N(8, ASN_COUNTER64, wb_limit),
    AGENT_N(9, ASN_COUNTER64, wb_held),
    AGENT_N(10, ASN_COUNTER64, wb_peak),
    AGENT_N(11, ASN_GAUGE, wb_waiting),
    AGENT_N(12, ASN_COUNTER64, wb_deferred),
    AGENT_N(13, ASN_COUNTER64, wb_task_set_full),
    /* hlAgentGroup3: logins, connections and what the limits refused */
    AGENT_N(14, ASN_COUNTER64, logins),
    AGENT_N(15, ASN_COUNTER64, login_failures),
    AGENT_N(16, ASN_GAUGE, connections),
    AGENT_N(17, ASN_GAUGE, pending_logins),
    AGENT_N(18, ASN_COUNTER64, pending_evicted),
    AGENT_N(19, ASN_COUNTER64, refused_pending),
    AGENT_N(20, ASN_COUNTER64, refused_sessions),
    AGENT_N(21, ASN_COUNTER64, accept_paused),
    /* ... and the rest of the write buffer budget */
    AGENT_N(22, ASN_COUNTER64, wb_conn_limit),
    AGENT_N(23, ASN_COUNTER64, wb_waiting_bytes),
    AGENT_N(24, ASN_COUNTER64, wb_window_closed),
    AGENT_N(25, ASN_COUNTER64, wb_source_limit),
    AGENT_N(26, ASN_GAUGE, wb_sources),
    AGENT_N(27, ASN_COUNTER64, wb_source_capped),
    AGENT_N(28, ASN_COUNTER64, wb_closed_slow),
    AGENT_N(29, ASN_COUNTER64, wb_closed_no_data),
    /* hlAgentGroup4: the per-command scratch buffer budget */
    AGENT_N(30, ASN_COUNTER64, scratch_limit),
    AGENT_N(31, ASN_COUNTER64, scratch_used),
    AGENT_N(32, ASN_COUNTER64, scratch_peak),
    AGENT_N(33, ASN_COUNTER64, scratch_refused),
};
#define AGENT_LAST (sizeof(agent_nums) / sizeof(agent_nums[0]) - 1)

static int scalar_handler(netsnmp_mib_handler *handler, netsnmp_handler_registration *reg,
                          netsnmp_agent_request_info *reqinfo, netsnmp_request_info *requests)
{
	const struct snmp_snapshot *s = *g_cur;

	if (reqinfo->mode != MODE_GET)
		return SNMP_ERR_NOERROR;
	for (netsnmp_request_info *r = requests; r; r = r->next) {
		struct value v = {0};
		bool up = s && s->reachable;
		oid sub;

		/* hlAgent.N.0 (the scalar helpers move rootoid; read our own position). */
		if (r->requestvb->name_length <= OID_LENGTH(agent_oid)) {
			netsnmp_set_request_error(reqinfo, r, SNMP_NOSUCHOBJECT);
			continue;
		}
		sub = r->requestvb->name[OID_LENGTH(agent_oid)];
		switch (sub) {
		case 1:
			num(&v, ASN_INTEGER, TRUTH(up));
			break;
		case 2:
			text(&v, up ? s->version : "");
			break;
		case 3:
			num(&v, ASN_GAUGE, up ? s->n_sessions_total : 0);
			break;
		case 4:
			num(&v, ASN_UNSIGNED, *g_poll_ms);
			break;
		case 5:
			if (!up) {
				netsnmp_set_request_error(reqinfo, r, SNMP_NOSUCHINSTANCE);
				continue;
			}
			date_and_time(&v, s->connected_at);
			break;
		default:
			if (sub > AGENT_LAST || !agent_nums[sub].type) {
				netsnmp_set_request_error(reqinfo, r, SNMP_NOSUCHOBJECT);
				continue;
			} else {
				const struct agent_num *a = &agent_nums[sub];
				uint64_t n = up ? *(const uint64_t *)((const char *)s + a->off) : 0;

				if (a->type == ASN_GAUGE && n > UINT32_MAX)
					n = UINT32_MAX;
				num(&v, a->type, n);
			}
			break;
		}
		set_value(r->requestvb, &v);
	}
	return SNMP_ERR_NOERROR;
}

int snmp_agent_register(struct snmp_snapshot *const *cur, const unsigned *poll_ms, bool iscsi_mib)
{
	netsnmp_handler_registration *reg;
	int rc;

	g_cur = cur;
	g_poll_ms = poll_ms;
	reg = netsnmp_create_handler_registration("hlAgent", scalar_handler, agent_oid,
	                                          OID_LENGTH(agent_oid), HANDLER_CAN_RONLY);
	if (!reg)
		return -ENOMEM;
	if (netsnmp_register_scalar_group(reg, 1, (oid)AGENT_LAST) != MIB_REGISTERED_OK)
		return -EEXIST;
	for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++) {
		if (!iscsi_mib && !strncmp(tables[i].name, "iscsi", 5))
			continue; /* ISCSI-MIB left to another subagent */
		if ((rc = register_table(&tables[i])))
			return rc;
	}
	return 0;
}

/* ---- notifications ---- */

/* Append column `col` of row `index` of table `t` with value v to *vars. */
static void add_column(netsnmp_variable_list **vars, const oid *base, size_t base_len, unsigned col,
                       uint32_t index, const struct value *v)
{
	oid name[MAX_OID_LEN];
	netsnmp_variable_list *vb;

	memcpy(name, base, base_len * sizeof(oid));
	name[base_len] = 1; /* the entry */
	name[base_len + 1] = col;
	name[base_len + 2] = index;
	vb = snmp_varlist_add_variable(vars, name, base_len + 3, ASN_NULL, NULL, 0);
	if (vb)
		set_value(vb, v);
}

void snmp_agent_notify(void *ctx, enum snmp_event ev, const void *row)
{
	netsnmp_variable_list *vars = NULL;
	oid which[MAX_OID_LEN];
	size_t n = OID_LENGTH(notif_oid);
	struct value v;

	(void)ctx;
	memcpy(which, notif_oid, sizeof(notif_oid));
	switch (ev) {
	case SNMP_EV_CACHE_FAILED:
		which[n] = 1;
		break;
	case SNMP_EV_CACHE_RECOVERED:
		which[n] = 2;
		break;
	case SNMP_EV_ORIGIN_LOST:
		which[n] = 3;
		break;
	case SNMP_EV_ORIGIN_RECOVERED:
		which[n] = 4;
		break;
	case SNMP_EV_ALUA_CHANGED:
		which[n] = 5;
		break;
	}
	snmp_varlist_add_variable(&vars, trap_oid_oid, OID_LENGTH(trap_oid_oid), ASN_OBJECT_ID,
	                          (const u_char *)which, (n + 1) * sizeof(oid));
	if (ev == SNMP_EV_CACHE_FAILED || ev == SNMP_EV_CACHE_RECOVERED) {
		const struct snmp_cache *c = row;
		static const unsigned cols[] = {2, 3, 8}; /* name, device, state */
		for (size_t i = 0; i < sizeof(cols) / sizeof(cols[0]); i++) {
			cache_value(c, cols[i], &v);
			add_column(&vars, cache_oid, OID_LENGTH(cache_oid), cols[i], c->index, &v);
		}
		snmp_log(LOG_WARNING, "hotlun-snmp: cache %s %s\n", c->name,
		         ev == SNMP_EV_CACHE_FAILED ? "failed: pass-through" : "active again");
	} else if (ev == SNMP_EV_ALUA_CHANGED) {
		const struct snmp_disk *d = row;
		static const unsigned cols[] = {2, 25, 26, 27}; /* name, ALUA state, owner, epoch */
		for (size_t i = 0; i < sizeof(cols) / sizeof(cols[0]); i++) {
			disk_value(d, cols[i], &v);
			add_column(&vars, disk_oid, OID_LENGTH(disk_oid), cols[i], d->index, &v);
		}
		snmp_log(LOG_NOTICE, "hotlun-snmp: disk %s: ALUA state %d, owner gateway %u\n",
		         d->name, d->alua, (unsigned)d->owner_gw);
	} else {
		const struct snmp_disk *d = row;
		static const unsigned cols[] = {2, 3, 7}; /* name, origin, origin state */
		for (size_t i = 0; i < sizeof(cols) / sizeof(cols[0]); i++) {
			disk_value(d, cols[i], &v);
			add_column(&vars, disk_oid, OID_LENGTH(disk_oid), cols[i], d->index, &v);
		}
		snmp_log(LOG_WARNING, "hotlun-snmp: disk %s: origin %s\n", d->name,
		         ev == SNMP_EV_ORIGIN_LOST ? "failing" : "ok again");
	}
	send_v2trap(vars);
	snmp_free_varbind(vars);
}
