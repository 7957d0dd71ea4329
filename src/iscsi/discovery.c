/*
 * discovery.c - the SendTargets answer (RFC 7143 section 6.3 / appendix C):
 * TargetName and TargetAddress=<ip>:<port>,<tpgt> for each target the
 * initiator may see. A portal bound to a wildcard address is reported with
 * the address the initiator actually reached (the connection's local
 * address), IPv6 in brackets.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "iscsi/iscsi_internal.h"

/* IPv4 seen through an IPv6 socket (::ffff:a.b.c.d) is reported as plain IPv4. */
static void unmap_v4(struct sockaddr_storage *ss)
{
	if (ss->ss_family != AF_INET6)
		return;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
	if (!IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr))
		return;
	struct sockaddr_in s4;
	memset(&s4, 0, sizeof(s4));
	s4.sin_family = AF_INET;
	s4.sin_port = s6->sin6_port;
	memcpy(&s4.sin_addr, &s6->sin6_addr.s6_addr[12], 4);
	memset(ss, 0, sizeof(*ss));
	memcpy(ss, &s4, sizeof(s4));
}

static void set_port(struct sockaddr_storage *ss, uint16_t port_be)
{
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)ss)->sin_port = port_be;
	else if (ss->ss_family == AF_INET6)
		((struct sockaddr_in6 *)ss)->sin6_port = port_be;
}

static uint16_t get_port(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return ((const struct sockaddr_in *)ss)->sin_port;
	if (ss->ss_family == AF_INET6)
		return ((const struct sockaddr_in6 *)ss)->sin6_port;
	return 0;
}

/* Every portal address (deduplicated) as "addr:port,tpgt". Caller holds srv->lock. */
static int add_addresses(struct iscsi_conn *c, struct iscsi_textbuf *tb)
{
	char seen[16][80];
	unsigned nseen = 0;
	struct iscsi_portal *p;

	hl_list_for_each_entry(p, &c->srv->portals, link)
	{
		struct sockaddr_storage ss;
		char addr[80], val[96];
		bool dup = false;

		if (p->wildcard) {
			/* reachable at the address this connection came in on, if the family
			 * matches */
			if (p->addr.ss_family != c->local.ss_family)
				continue;
			ss = c->local;
			set_port(&ss, get_port(&p->addr));
		} else {
			ss = p->addr;
		}
		unmap_v4(&ss);
		hl_format_sockaddr(&ss, addr, sizeof(addr));
		snprintf(val, sizeof(val), "%s,%u", addr, p->tpgt);
		for (unsigned i = 0; i < nseen; i++)
			if (strcmp(seen[i], val) == 0)
				dup = true;
		if (dup)
			continue;
		if (nseen < HL_ARRAY_SIZE(seen))
			hl_strlcpy(seen[nseen++], val, sizeof(seen[0]));
		if (iscsi_textbuf_add(tb, "TargetAddress", val) < 0)
			return -ENOMEM;
	}
	return 0;
}

static bool is_iscsi_name(const char *v)
{
	return strncasecmp(v, "iqn.", 4) == 0 || strncasecmp(v, "eui.", 4) == 0 ||
	       strncasecmp(v, "naa.", 4) == 0;
}

static int add_target(struct iscsi_conn *c, const struct iscsi_target *t, struct iscsi_textbuf *tb)
{
	if (iscsi_textbuf_add(tb, "TargetName", t->name) < 0)
		return -ENOMEM;
	return add_addresses(c, tb);
}

int iscsi_sendtargets(struct iscsi_conn *c, const char *value, struct iscsi_textbuf *tb)
{
	struct hl_iscsi_server *srv = c->srv;
	struct iscsi_session *s = c->sess;
	bool all = strcmp(value, "All") == 0;
	int rc = 0;

	if (!all && value[0] && !is_iscsi_name(value))
		return -EINVAL;
	if (!all && !value[0] && s->type == ISCSI_SESSION_DISCOVERY)
		return -EINVAL; /* empty means "this session's target": none here */

	pthread_mutex_lock(&srv->lock);
	if (s->type == ISCSI_SESSION_NORMAL) {
		/* a normal session only learns about its own target */
		if (all || !value[0] || strcasecmp(value, s->target->name) == 0)
			rc = add_target(c, s->target, tb);
	} else {
		struct iscsi_target *t;
		hl_list_for_each_entry(t, &srv->targets, link)
		{
			if (!all && strcasecmp(value, t->name) != 0)
				continue;
			if (!iscsi_target_allows(t, s->initiator_name))
				continue;
			rc = add_target(c, t, tb);
			if (rc < 0)
				break;
		}
	}
	pthread_mutex_unlock(&srv->lock);
	return rc;
}
