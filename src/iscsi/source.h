/*
 * source.h - what counts as one source of connections (source.c): the key
 * the per-address limits count under (pending logins, logged-in sessions)
 * and the one CHAP's known hosts are remembered by. Pure; shared by
 * server.c, chap_guard.c and their unit tests.
 */
#ifndef HOTLUN_ISCSI_SOURCE_H
#define HOTLUN_ISCSI_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/** A source: the address family, then the address bytes that count (the rest zero). */
struct iscsi_source {
	uint8_t b[17];
};

/**
 * The source of a peer address. An IPv4 address counts whole, and an
 * IPv4-mapped IPv6 address (::ffff:a.b.c.d) is the same source as its IPv4
 * form. An IPv6 address counts by its /64, since one host (SLAAC, privacy
 * addresses, a routed prefix) can take any address of its /64; with
 * whole_v6, by the whole address (for what must not be shared: a host that
 * proved it knows a secret). Other families: one source per family.
 */
void iscsi_source_of(const struct sockaddr_storage *ss, bool whole_v6, struct iscsi_source *out);

/** "192.0.2.1", "2001:db8:1:2::/64" or the whole IPv6 address, for log lines. */
const char *iscsi_source_str(const struct iscsi_source *s, char *buf, size_t len);

static inline bool iscsi_source_eq(const struct iscsi_source *a, const struct iscsi_source *b)
{
	for (size_t i = 0; i < sizeof(a->b); i++)
		if (a->b[i] != b->b[i])
			return false;
	return true;
}

#endif
