/*
 * source.c - one source of connections: an IPv4 address, an IPv6 /64 (or a
 * whole IPv6 address where it must not be shared). See source.h.
 */
#include "iscsi/source.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

/* the prefix flag lives in the family byte's top bit: a /64 and a whole address never match */
#define SOURCE_V6_PREFIX 0x80

void iscsi_source_of(const struct sockaddr_storage *ss, bool whole_v6, struct iscsi_source *out)
{
	memset(out, 0, sizeof(*out));
	if (ss->ss_family == AF_INET) {
		out->b[0] = AF_INET;
		memcpy(out->b + 1, &((const struct sockaddr_in *)ss)->sin_addr, 4);
	} else if (ss->ss_family == AF_INET6) {
		const uint8_t *a = ((const struct sockaddr_in6 *)ss)->sin6_addr.s6_addr;
		static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

		if (memcmp(a, v4mapped, sizeof(v4mapped)) == 0) {
			out->b[0] = AF_INET;
			memcpy(out->b + 1, a + 12, 4);
		} else if (whole_v6) {
			out->b[0] = AF_INET6;
			memcpy(out->b + 1, a, 16);
		} else {
			out->b[0] = AF_INET6 | SOURCE_V6_PREFIX;
			memcpy(out->b + 1, a, 8);
		}
	} else {
		out->b[0] = (uint8_t)ss->ss_family;
	}
}

const char *iscsi_source_str(const struct iscsi_source *s, char *buf, size_t len)
{
	char a[INET6_ADDRSTRLEN];
	int fam = s->b[0] & ~SOURCE_V6_PREFIX;

	if ((fam != AF_INET && fam != AF_INET6) || !inet_ntop(fam, s->b + 1, a, sizeof(a)))
		snprintf(buf, len, "(family %u)", s->b[0]);
	else
		snprintf(buf, len, "%s%s", a, s->b[0] & SOURCE_V6_PREFIX ? "/64" : "");
	return buf;
}
