/*
 * rbd_codec.c - the decoders of what the gateways of an rbd image write
 * into the cluster for each other: see rbd_codec.h. The formats are
 * described where they are written (rbd_hotset.c, rbd_own.c).
 *
 * sscanf takes " 1", "+1", "-1" (as UINT_MAX) and 4294967297 (as 1) for
 * %u: every decoder here prints the header back from what it read and
 * refuses the text unless it is the same, so only what a writer prints is
 * accepted.
 */
#include "config.h"

#include "origin/rbd_codec.h"

#include "hotlun/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rbd_hot_decode(const void *data, size_t size, struct hl_hot_set *out)
{
	const char *buf = data;
	char hdr[RBD_HOT_HDR_MAX], again[RBD_HOT_HDR_MAX];
	char mark[HL_ORIGIN_PROOF_MAX], prev[HL_ORIGIN_PROOF_MAX];
	unsigned gw, bs, n, nchg;
	unsigned long long seq;
	const char *nl;
	const uint8_t *p;
	int used = -1;

	memset(out, 0, sizeof(*out));
	if (size > RBD_HOT_OBJ_MAX)
		return -EBADMSG;
	nl = memchr(buf, '\n', HL_MIN(size, (size_t)RBD_HOT_HDR_MAX));
	if (!nl)
		return -EBADMSG;
	size_t hlen = (size_t)(nl - buf);
	memcpy(hdr, buf, hlen);
	hdr[hlen] = '\0';
	if (sscanf(hdr, "hotlun-hot 2 gw=%u seq=%llu bs=%u n=%u mark=%191s prev=%191s nchg=%u%n",
	           &gw, &seq, &bs, &n, mark, prev, &nchg, &used) != 7 ||
	    (size_t)used != hlen || gw > UINT16_MAX || n > RBD_HOT_MAX || nchg > RBD_CHG_MAX ||
	    bs < 512 || bs > (1u << 20) || (bs & (bs - 1)) ||
	    (uint64_t)hlen + 1 + (uint64_t)n * RBD_HOT_ENT + (uint64_t)nchg * RBD_CHG_ENT != size)
		return -EBADMSG;
	int h = snprintf(again, sizeof(again),
	                 "hotlun-hot 2 gw=%u seq=%llu bs=%u n=%u mark=%s prev=%s nchg=%u", gw, seq,
	                 bs, n, mark, prev, nchg);
	if (h < 0 || (size_t)h != hlen || memcmp(again, hdr, hlen))
		return -EBADMSG;
	out->v = n ? calloc(n, sizeof(*out->v)) : NULL;
	out->chg = nchg ? calloc(nchg, sizeof(*out->chg)) : NULL;
	if ((n && !out->v) || (nchg && !out->chg)) {
		free(out->v);
		free(out->chg);
		memset(out, 0, sizeof(*out));
		return -ENOMEM;
	}
	p = (const uint8_t *)nl + 1;
	for (uint32_t i = 0; i < n; i++, p += RBD_HOT_ENT) {
		uint64_t blk = 0;
		uint32_t f = 0;
		for (int b = 0; b < 8; b++)
			blk |= (uint64_t)p[b] << (8 * b);
		for (int b = 0; b < 4; b++)
			f |= (uint32_t)p[8 + b] << (8 * b);
		out->v[i].block = blk;
		out->v[i].freq = f;
	}
	for (uint32_t i = 0; i < nchg; i++, p += RBD_CHG_ENT) {
		uint64_t off = 0, len = 0;
		for (int b = 0; b < 8; b++) {
			off |= (uint64_t)p[b] << (8 * b);
			len |= (uint64_t)p[8 + b] << (8 * b);
		}
		out->chg[i].off = off;
		out->chg[i].len = len;
	}
	out->owner = (uint16_t)gw;
	out->seq = seq;
	out->block_size = bs;
	out->n = n;
	out->nchg = nchg;
	snprintf(out->mark, sizeof(out->mark), "%s", strcmp(mark, "-") ? mark : "");
	snprintf(out->prev, sizeof(out->prev), "%s", strcmp(prev, "-") ? prev : "");
	return 0;
}

/* " lease=MS" at s (since issue 26; absent in an older writer's record): 0 when absent or bad. */
static uint32_t own_lease(const char *s)
{
	char again[32];
	unsigned lease;
	int used = 0;

	if (strncmp(s, " lease=", 7) || sscanf(s, " lease=%u%n", &lease, &used) != 1 ||
	    lease > 3600000)
		return 0;
	snprintf(again, sizeof(again), " lease=%u", lease);
	return strlen(again) == (size_t)used && !strncmp(again, s, (size_t)used) ? lease : 0;
}

int rbd_own_record_decode(const char *text, struct rbd_own_record *rec)
{
	char state[16], again[RBD_OWN_RECORD_MAX + 64];
	unsigned owner;
	unsigned long long epoch, beat, done;
	int end = 0;

	memset(rec, 0, sizeof(*rec));
	if (!text[0])
		return 0; /* never written (a standby created it empty, to watch it) */
	if (sscanf(text, "owner=%u epoch=%llu beat=%llu state=%15s done=%llu addr=%127s%n", &owner,
	           &epoch, &beat, state, &done, rec->addr, &end) != 6 ||
	    owner > UINT16_MAX ||
	    (strcmp(state, "owned") && strcmp(state, "released") &&
	     strcmp(state, "released-fence")))
		goto bad;
	/* the counters go on from here: one that cannot count on is not one a writer wrote */
	if (epoch == UINT64_MAX || beat == UINT64_MAX || done == UINT64_MAX)
		goto bad;
	int h = snprintf(again, sizeof(again),
	                 "owner=%u epoch=%llu beat=%llu state=%s done=%llu addr=%s", owner, epoch,
	                 beat, state, done, rec->addr);
	if (h != end || strncmp(again, text, (size_t)end))
		goto bad;
	rec->lease_ms = own_lease(text + end);
	rec->owner = (uint16_t)owner;
	rec->epoch = epoch;
	rec->beat = beat;
	rec->done = done;
	rec->fence = !strcmp(state, "released-fence");
	rec->released = rec->fence || !strcmp(state, "released");
	return 0;
bad:
	memset(rec, 0, sizeof(*rec));
	return -EBADMSG;
}

int rbd_own_request_decode(const char *text, uint16_t *gw, uint64_t *seq)
{
	char again[64];
	unsigned g;
	unsigned long long n;
	int used = 0;

	*gw = 0;
	*seq = 0;
	if (sscanf(text, "gw=%u seq=%llu%n", &g, &n, &used) != 2 || g > UINT16_MAX ||
	    n == UINT64_MAX)
		return -EBADMSG;
	snprintf(again, sizeof(again), "gw=%u seq=%llu", g, n);
	if (strlen(again) != (size_t)used || strncmp(again, text, (size_t)used))
		return -EBADMSG;
	*gw = (uint16_t)g;
	*seq = n;
	return 0;
}

/* A payload of len bytes as a C string in buf (room bytes): false when longer. */
static bool payload_str(const void *data, size_t len, char *buf, size_t room)
{
	if (len >= room)
		return false;
	if (len)
		memcpy(buf, data, len);
	buf[len] = '\0';
	return true;
}

int rbd_pr_notice_decode(const void *data, size_t len, uint64_t *seq)
{
	char p[32], again[32];
	unsigned long long n;
	int used = 0;

	*seq = 0;
	if (!payload_str(data, len, p, sizeof(p)) || sscanf(p, "seq=%llu%n", &n, &used) != 1 ||
	    (size_t)used != len)
		return -EBADMSG;
	snprintf(again, sizeof(again), "seq=%llu", n);
	if (strcmp(again, p))
		return -EBADMSG;
	*seq = n;
	return 0;
}

int rbd_pr_answer_decode(const void *data, size_t len, uint16_t *gw)
{
	char p[32], again[32];
	unsigned g;
	int used = 0;

	*gw = 0;
	if (!payload_str(data, len, p, sizeof(p)) || sscanf(p, "gw=%u%n", &g, &used) != 1 ||
	    (size_t)used != len || g > UINT16_MAX)
		return -EBADMSG;
	snprintf(again, sizeof(again), "gw=%u", g);
	if (strcmp(again, p))
		return -EBADMSG;
	*gw = (uint16_t)g;
	return 0;
}
