/*
 * iscsi_pr_key_ut.c - the arithmetic of the gateways' reservation keys on a
 * SAN LUN (src/origin/iscsi_pr_key.h): the heartbeat counter inside a key,
 * one run whatever its counter, and the warm restart proof's rule that
 * PRgeneration may move only as much as the holder's heartbeats did,
 * including when the 8-bit counter wraps.
 */
#include "config.h"

#include "hl_test.h"
#include "origin/iscsi_pr_key.h"

/* gateway 2, run 0xabcd, heartbeat 0 */
#define K 0x686c75abcd000002ull

static void test_fields(void)
{
	CU_ASSERT_EQUAL(pr_key_gateway(K), 2);
	CU_ASSERT_EQUAL(pr_key_beat(K), 0);
	CU_ASSERT_EQUAL(pr_key_with_beat(K, 0x7f), 0x686c75abcd7f0002ull);
	CU_ASSERT_EQUAL(pr_key_beat(pr_key_with_beat(K, 0x7f)), 0x7f);
	CU_ASSERT_EQUAL(pr_key_next_beat(K), 0x686c75abcd010002ull);
	/* the counter wraps inside its byte: run and gateway stay */
	CU_ASSERT_EQUAL(pr_key_next_beat(pr_key_with_beat(K, 0xff)), K);
	CU_ASSERT_EQUAL(pr_key_gateway(pr_key_with_beat(K, 0xff)), 2);
	/* not ours: another initiator's key names no gateway */
	CU_ASSERT_EQUAL(pr_key_gateway(0x1122334455660002ull), 0);
	/* an older version's key ("hlun" + 0000 + id) is still gateway 3's */
	CU_ASSERT_EQUAL(pr_key_gateway(0x686c756e00000003ull), 3);
}

static void test_same_run(void)
{
	CU_ASSERT_TRUE(pr_key_same_run(K, K));
	CU_ASSERT_TRUE(pr_key_same_run(K, pr_key_with_beat(K, 0x42)));
	CU_ASSERT_TRUE(pr_key_same_run(pr_key_with_beat(K, 0xff), pr_key_with_beat(K, 0x01)));
	CU_ASSERT_FALSE(pr_key_same_run(K, K ^ 0x0000000100000000ull)); /* another run */
	CU_ASSERT_FALSE(pr_key_same_run(K, K ^ 0x0000000000000003ull)); /* another gateway */
	CU_ASSERT_FALSE(pr_key_same_run(K, 0));
	CU_ASSERT_FALSE(pr_key_same_run(0, 0)); /* no key is nobody's run */
}

static void test_explained(void)
{
	uint64_t k5 = pr_key_with_beat(K, 5);

	/* nothing moved */
	CU_ASSERT_TRUE(pr_gen_explained(k5, 100, k5, 100));
	/* three heartbeats, three moves */
	CU_ASSERT_TRUE(pr_gen_explained(k5, 100, pr_key_with_beat(K, 8), 103));
	/* three heartbeats and one other move (a write marker, a request): cold */
	CU_ASSERT_FALSE(pr_gen_explained(k5, 100, pr_key_with_beat(K, 8), 104));
	/* one move without a heartbeat */
	CU_ASSERT_FALSE(pr_gen_explained(k5, 100, k5, 101));
	/* fewer moves than heartbeats cannot be (another SAN state): cold */
	CU_ASSERT_FALSE(pr_gen_explained(k5, 100, pr_key_with_beat(K, 8), 102));
	/* another run holds it now */
	CU_ASSERT_FALSE(pr_gen_explained(k5, 100, k5 ^ 0x0000000100000000ull, 100));
	CU_ASSERT_FALSE(pr_gen_explained(k5, 100, 0, 100));
}

static void test_explained_wrap(void)
{
	uint64_t kfe = pr_key_with_beat(K, 0xfe);

	/* the counter wraps 0xfe -> 0x01: three heartbeats */
	CU_ASSERT_TRUE(pr_gen_explained(kfe, 7, pr_key_with_beat(K, 0x01), 10));
	CU_ASSERT_FALSE(pr_gen_explained(kfe, 7, pr_key_with_beat(K, 0x01), 11));
	/* a whole round (256 heartbeats) looks like none: PRgeneration says 256, cold */
	CU_ASSERT_FALSE(pr_gen_explained(kfe, 7, kfe, 7 + 256));
	/* 259 heartbeats (the counter says 3): cold */
	CU_ASSERT_FALSE(pr_gen_explained(kfe, 7, pr_key_with_beat(K, 0x01), 7 + 259));
	/* PRgeneration itself wraps (32 bits) */
	CU_ASSERT_TRUE(pr_gen_explained(kfe, 0xffffffffu, pr_key_with_beat(K, 0x01), 2));
	CU_ASSERT_FALSE(pr_gen_explained(kfe, 0xffffffffu, pr_key_with_beat(K, 0x01), 3));
	/* an older proof (heartbeat 0, no moves since) */
	CU_ASSERT_TRUE(pr_gen_explained(K, 42, K, 42));
}

static const struct hl_test tests[] = {
    {"a key's run, heartbeat and gateway", test_fields},
    {"keys of one run with any heartbeat are one owner", test_same_run},
    {"PRgeneration moved by the heartbeats and nothing else", test_explained},
    {"the counter's and PRgeneration's wrap", test_explained_wrap},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("origin_iscsi_pr_key", tests);
}
