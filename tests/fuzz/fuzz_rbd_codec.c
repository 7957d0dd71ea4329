// fuzz-sources: src/origin/rbd_codec.c
// fuzz-args: -max_len=8192
/*
 * fuzz_rbd_codec.c - harness for what a gateway of an rbd image reads from
 * the cluster that another gateway wrote (src/origin/rbd_codec.c): the
 * owner's hot set object, the ownership record, the hand-over request, the
 * shared reservation record's notices and answers. The first byte picks
 * the decoder, the rest is the object. Besides crashes,
 * leaks and UB: whatever a decoder accepts is exactly what a writer prints
 * for the values it returned (rbd_hotset.c's and rbd_own.c's formats), so
 * no two objects read as one state and no garbled number reads as another;
 * an accepted hot set's counts match its size.
 */
#include "origin/rbd_codec.h"

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The hot set as rbd_hotset.c's publish writes it, compared with the input. */
static void hot_check(const uint8_t *d, size_t n, const struct hl_hot_set *hs)
{
	char hdr[RBD_HOT_HDR_MAX];
	int h = snprintf(hdr, sizeof(hdr),
	                 "hotlun-hot 2 gw=%u seq=%" PRIu64 " bs=%u n=%u mark=%s prev=%s nchg=%u\n",
	                 hs->owner, hs->seq, hs->block_size, hs->n, hs->mark[0] ? hs->mark : "-",
	                 hs->prev[0] ? hs->prev : "-", hs->nchg);
	size_t len = (size_t)h + (size_t)hs->n * RBD_HOT_ENT + (size_t)hs->nchg * RBD_CHG_ENT;

	if (h < 0 || (size_t)h >= sizeof(hdr) || len != n || memcmp(hdr, d, (size_t)h))
		abort();
	const uint8_t *p = d + h;
	for (uint32_t i = 0; i < hs->n; i++, p += RBD_HOT_ENT)
		for (int b = 0; b < 8; b++)
			if (p[b] != (uint8_t)(hs->v[i].block >> (8 * b)) ||
			    (b < 4 && p[8 + b] != (uint8_t)(hs->v[i].freq >> (8 * b))))
				abort();
	for (uint32_t i = 0; i < hs->nchg; i++, p += RBD_CHG_ENT)
		for (int b = 0; b < 8; b++)
			if (p[b] != (uint8_t)(hs->chg[i].off >> (8 * b)) ||
			    p[8 + b] != (uint8_t)(hs->chg[i].len >> (8 * b)))
				abort();
	if (hs->block_size < 512 || hs->block_size > (1u << 20) ||
	    (hs->block_size & (hs->block_size - 1)))
		abort();
}

static void own_check(const char *s, const struct rbd_own_record *rec)
{
	char want[RBD_OWN_RECORD_MAX + 64];
	int h;

	if (!s[0]) {
		if (rec->owner || rec->epoch || rec->addr[0])
			abort();
		return;
	}
	h = snprintf(want, sizeof(want),
	             "owner=%u epoch=%" PRIu64 " beat=%" PRIu64 " state=%s done=%" PRIu64
	             " addr=%s",
	             rec->owner, rec->epoch, rec->beat,
	             rec->fence      ? "released-fence"
	             : rec->released ? "released"
	                             : "owned",
	             rec->done, rec->addr);
	if (strncmp(want, s, (size_t)h) || rec->epoch == UINT64_MAX || rec->beat == UINT64_MAX ||
	    rec->done == UINT64_MAX || rec->lease_ms > 3600000)
		abort();
	if (rec->lease_ms) {
		char lease[32];
		int l = snprintf(lease, sizeof(lease), " lease=%u", rec->lease_ms);
		if (strncmp(lease, s + h, (size_t)l))
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	uint8_t which = data[0] % 5;
	const uint8_t *d = data + 1;
	size_t n = size - 1;

	if (which >= 3) {
		/* a payload: exactly what its writer sends ("seq=%llu", "gw=%u"), no NUL */
		char want[64];
		uint64_t seq;
		uint16_t gw;
		int h, rc = which == 3 ? rbd_pr_notice_decode(n ? d : NULL, n, &seq)
		                       : rbd_pr_answer_decode(n ? d : NULL, n, &gw);
		if (rc) {
			if (rc != -EBADMSG || (which == 3 ? seq != 0 : gw != 0))
				abort();
			return 0;
		}
		h = which == 3 ? snprintf(want, sizeof(want), "seq=%" PRIu64, seq)
		               : snprintf(want, sizeof(want), "gw=%u", gw);
		if ((size_t)h != n || memcmp(want, d, n))
			abort();
		return 0;
	}

	if (which == 0) {
		struct hl_hot_set hs;
		int rc = rbd_hot_decode(d, n, &hs);
		if (rc == 0) {
			hot_check(d, n, &hs);
			free(hs.v);
			free(hs.chg);
		} else if (rc != -EBADMSG || hs.v || hs.chg) {
			abort();
		}
		return 0;
	}
	/* the record and the request are read as text, at most their buffer's worth */
	char s[RBD_OWN_RECORD_MAX];
	size_t l = n < sizeof(s) - 1 ? n : sizeof(s) - 1;
	memcpy(s, d, l);
	s[l] = '\0';
	if (which == 1) {
		struct rbd_own_record rec;
		int rc = rbd_own_record_decode(s, &rec);
		if (rc == 0)
			own_check(s, &rec);
		else if (rc != -EBADMSG || rec.owner || rec.addr[0])
			abort();
	} else {
		char want[64];
		uint16_t gw;
		uint64_t seq;
		int rc = rbd_own_request_decode(s, &gw, &seq);
		if (rc == 0) {
			int h = snprintf(want, sizeof(want), "gw=%u seq=%" PRIu64, gw, seq);
			if (strncmp(want, s, (size_t)h) || seq == UINT64_MAX)
				abort();
		} else if (rc != -EBADMSG || gw || seq) {
			abort();
		}
	}
	return 0;
}
