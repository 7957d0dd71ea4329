/*
 * rbd_codec_ut.c - what the gateways of an rbd image read from each other
 * (src/origin/rbd_codec.c), without a cluster: the hot set object, the
 * ownership record and the hand-over request as their writers print them
 * are read back; damaged or foreign ones are refused whole, and so are
 * numbers sscanf alone would take as another value (a sign, 2^32 + 1 as 1,
 * a counter at its maximum that wraps at the next step).
 */
#include "config.h"

#include "hl_test.h"
#include "origin/rbd_codec.h"

#include <errno.h>
#include <stdint.h>

/* A hot set object: header hdr, then n entries and nchg ranges of counting bytes. */
static size_t hot_obj(uint8_t *buf, const char *hdr, unsigned n, unsigned nchg)
{
	size_t h = strlen(hdr);

	memcpy(buf, hdr, h);
	buf[h++] = '\n';
	for (size_t i = 0; i < (size_t)n * RBD_HOT_ENT + (size_t)nchg * RBD_CHG_ENT; i++)
		buf[h++] = (uint8_t)(i + 1);
	return h;
}

static void test_hot_good(void)
{
	uint8_t buf[1024];
	struct hl_hot_set hs;
	size_t len = hot_obj(
	    buf, "hotlun-hot 2 gw=3 seq=17 bs=65536 n=2 mark=rbd:abc:5:m1 prev=- nchg=1", 2, 1);

	CU_ASSERT_EQUAL_FATAL(rbd_hot_decode(buf, len, &hs), 0);
	CU_ASSERT_EQUAL(hs.owner, 3);
	CU_ASSERT_EQUAL(hs.seq, 17);
	CU_ASSERT_EQUAL(hs.block_size, 65536);
	CU_ASSERT_EQUAL(hs.n, 2);
	CU_ASSERT_EQUAL(hs.nchg, 1);
	CU_ASSERT_STRING_EQUAL(hs.mark, "rbd:abc:5:m1");
	CU_ASSERT_STRING_EQUAL(hs.prev, "");
	/* little-endian: block bytes 1..8, freq 9..12 */
	CU_ASSERT_EQUAL(hs.v[0].block, 0x0807060504030201ull);
	CU_ASSERT_EQUAL(hs.v[0].freq, 0x0c0b0a09u);
	CU_ASSERT_EQUAL(hs.chg[0].off, 0x201f1e1d1c1b1a19ull);
	free(hs.v);
	free(hs.chg);

	len = hot_obj(buf, "hotlun-hot 2 gw=1 seq=0 bs=512 n=0 mark=- prev=- nchg=0", 0, 0);
	CU_ASSERT_EQUAL(rbd_hot_decode(buf, len, &hs), 0);
	CU_ASSERT_PTR_NULL(hs.v);
	CU_ASSERT_PTR_NULL(hs.chg);
}

static void test_hot_bad(void)
{
	static const char *const bad[] = {
	    /* a gateway id past 16 bits (was read as 4464) */
	    "hotlun-hot 2 gw=70000 seq=1 bs=4096 n=0 mark=- prev=- nchg=0",
	    /* 2^32 + 3: sscanf's %u gives 3 */
	    "hotlun-hot 2 gw=4294967299 seq=1 bs=4096 n=0 mark=- prev=- nchg=0",
	    /* a sign, a blank, a leading zero: not how a writer prints */
	    "hotlun-hot 2 gw=+3 seq=1 bs=4096 n=0 mark=- prev=- nchg=0",
	    "hotlun-hot 2 gw=3 seq=-1 bs=4096 n=0 mark=- prev=- nchg=0",
	    "hotlun-hot 2 gw= 3 seq=1 bs=4096 n=0 mark=- prev=- nchg=0",
	    "hotlun-hot 2 gw=3 seq=1 bs=04096 n=0 mark=- prev=- nchg=0",
	    /* n=2^32 (read as 0, the size then matched an empty set) */
	    "hotlun-hot 2 gw=3 seq=1 bs=4096 n=4294967296 mark=- prev=- nchg=0",
	    "hotlun-hot 2 gw=3 seq=1 bs=4095 n=0 mark=- prev=- nchg=0",
	    "hotlun-hot 2 gw=3 seq=1 bs=4096 n=0 mark=- prev=- nchg=0 extra",
	    "hotlun-hot 3 gw=3 seq=1 bs=4096 n=0 mark=- prev=- nchg=0",
	};
	uint8_t buf[1024];
	struct hl_hot_set hs;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		size_t len = hot_obj(buf, bad[i], 0, 0);
		CU_ASSERT_EQUAL(rbd_hot_decode(buf, len, &hs), -EBADMSG);
		CU_ASSERT_PTR_NULL(hs.v);
	}
	/* sizes that do not match the counts, one byte either way */
	size_t len = hot_obj(buf, "hotlun-hot 2 gw=3 seq=1 bs=4096 n=2 mark=- prev=- nchg=0", 2, 0);
	CU_ASSERT_EQUAL(rbd_hot_decode(buf, len - 1, &hs), -EBADMSG);
	buf[len] = 0;
	CU_ASSERT_EQUAL(rbd_hot_decode(buf, len + 1, &hs), -EBADMSG);
	/* no end of header within its room, a NUL inside it */
	memset(buf, 'a', sizeof(buf));
	CU_ASSERT_EQUAL(rbd_hot_decode(buf, sizeof(buf), &hs), -EBADMSG);
	len = hot_obj(buf, "hotlun-hot 2 gw=3 seq=1 bs=4096 n=0 mark=- prev=- nchg=0", 0, 0);
	buf[20] = '\0';
	CU_ASSERT_EQUAL(rbd_hot_decode(buf, len, &hs), -EBADMSG);
	CU_ASSERT_EQUAL(rbd_hot_decode(buf, 0, &hs), -EBADMSG);
}

static void test_own_record(void)
{
	struct rbd_own_record rec;

	CU_ASSERT_EQUAL(rbd_own_record_decode("owner=2 epoch=7 beat=99 state=owned done=4 "
	                                      "addr=10.0.0.1:0/123 lease=5000\n",
	                                      &rec),
	                0);
	CU_ASSERT_EQUAL(rec.owner, 2);
	CU_ASSERT_EQUAL(rec.epoch, 7);
	CU_ASSERT_EQUAL(rec.beat, 99);
	CU_ASSERT_EQUAL(rec.done, 4);
	CU_ASSERT_EQUAL(rec.lease_ms, 5000);
	CU_ASSERT_STRING_EQUAL(rec.addr, "10.0.0.1:0/123");
	CU_ASSERT_FALSE(rec.released);
	/* an older writer: no lease */
	CU_ASSERT_EQUAL(rbd_own_record_decode(
	                    "owner=1 epoch=1 beat=1 state=released-fence done=0 addr=-\n", &rec),
	                0);
	CU_ASSERT_TRUE(rec.released && rec.fence);
	CU_ASSERT_EQUAL(rec.lease_ms, 0);
	/* empty: a standby made it to watch it */
	CU_ASSERT_EQUAL(rbd_own_record_decode("", &rec), 0);
	CU_ASSERT_EQUAL(rec.owner, 0);
	/* a lease sscanf would wrap (2^32 + 5): not said, not 5 ms */
	CU_ASSERT_EQUAL(rbd_own_record_decode("owner=1 epoch=1 beat=1 state=owned done=0 addr=- "
	                                      "lease=4294967301\n",
	                                      &rec),
	                0);
	CU_ASSERT_EQUAL(rec.lease_ms, 0);

	static const char *const bad[] = {
	    /* 2^32 + 1 was read as gateway 1 */
	    "owner=4294967297 epoch=1 beat=1 state=owned done=0 addr=- lease=5000\n",
	    "owner=-1 epoch=1 beat=1 state=owned done=0 addr=-\n",
	    "owner=1 epoch=+1 beat=1 state=owned done=0 addr=-\n",
	    "owner=1 epoch=1 beat=1 state=owned done=00 addr=-\n",
	    /* counters that wrap at their next step */
	    "owner=1 epoch=18446744073709551615 beat=1 state=owned done=0 addr=-\n",
	    "owner=1 epoch=1 beat=18446744073709551615 state=owned done=0 addr=-\n",
	    "owner=1 epoch=1 beat=1 state=owned done=18446744073709551615 addr=-\n",
	    /* sscanf saturates what does not fit */
	    "owner=1 epoch=99999999999999999999999 beat=1 state=owned done=0 addr=-\n",
	    "owner=1 epoch=1 beat=1 state=stolen done=0 addr=-\n",
	    "owner=1 epoch=1 beat=1 state=owned\n",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		CU_ASSERT_EQUAL(rbd_own_record_decode(bad[i], &rec), -EBADMSG);
		CU_ASSERT_EQUAL(rec.owner, 0);
	}
}

static void test_own_request(void)
{
	uint16_t gw;
	uint64_t seq;

	CU_ASSERT_EQUAL(rbd_own_request_decode("gw=4 seq=12\n", &gw, &seq), 0);
	CU_ASSERT_EQUAL(gw, 4);
	CU_ASSERT_EQUAL(seq, 12);
	/* 2^32 + 4 was read as gateway 4 */
	CU_ASSERT_EQUAL(rbd_own_request_decode("gw=4294967300 seq=12\n", &gw, &seq), -EBADMSG);
	CU_ASSERT_EQUAL(gw, 0);
	/* the next request would be number 0: never pending */
	CU_ASSERT_EQUAL(rbd_own_request_decode("gw=4 seq=18446744073709551615\n", &gw, &seq),
	                -EBADMSG);
	CU_ASSERT_EQUAL(rbd_own_request_decode("gw=4 seq=-1\n", &gw, &seq), -EBADMSG);
	CU_ASSERT_EQUAL(seq, 0);
	CU_ASSERT_EQUAL(rbd_own_request_decode("gw=70000 seq=1\n", &gw, &seq), -EBADMSG);
	CU_ASSERT_EQUAL(rbd_own_request_decode("", &gw, &seq), -EBADMSG);
}

static void test_pr_payloads(void)
{
	uint64_t seq;
	uint16_t gw;

	CU_ASSERT_EQUAL(rbd_pr_notice_decode("seq=42", 6, &seq), 0);
	CU_ASSERT_EQUAL(seq, 42);
	CU_ASSERT_EQUAL(rbd_pr_answer_decode("gw=3", 4, &gw), 0);
	CU_ASSERT_EQUAL(gw, 3);
	/* 2^32 + 3 was read as an answer of gateway 3: its copy was taken as current */
	CU_ASSERT_EQUAL(rbd_pr_answer_decode("gw=4294967299", 13, &gw), -EBADMSG);
	CU_ASSERT_EQUAL(gw, 0);
	CU_ASSERT_EQUAL(rbd_pr_answer_decode("gw=70000", 8, &gw), -EBADMSG);
	CU_ASSERT_EQUAL(rbd_pr_answer_decode("gw=3x", 5, &gw), -EBADMSG);
	CU_ASSERT_EQUAL(rbd_pr_notice_decode("seq=-1", 6, &seq), -EBADMSG);
	CU_ASSERT_EQUAL(rbd_pr_notice_decode("seq=99999999999999999999", 24, &seq), -EBADMSG);
	CU_ASSERT_EQUAL(seq, 0);
	/* an empty payload (librados may hand NULL for it), a longer one than any writer's */
	CU_ASSERT_EQUAL(rbd_pr_notice_decode(NULL, 0, &seq), -EBADMSG);
	CU_ASSERT_EQUAL(rbd_pr_answer_decode(NULL, 0, &gw), -EBADMSG);
	CU_ASSERT_EQUAL(rbd_pr_notice_decode("seq=1                                   ", 40, &seq),
	                -EBADMSG);
}

static const struct hl_test tests[] = {
    {"a hot set as the owner writes it", test_hot_good},
    {"a damaged or foreign hot set is refused whole", test_hot_bad},
    {"the ownership record, strictly", test_own_record},
    {"the hand-over request, strictly", test_own_request},
    {"the shared reservation notices and answers, strictly", test_pr_payloads},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("origin_rbd_codec", tests);
}
