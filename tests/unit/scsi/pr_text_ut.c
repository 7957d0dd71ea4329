/*
 * pr_text_ut.c - the persistent reservation text as a reader takes it
 * (src/scsi/pr_text.c): the APTPL file in state_dir and the record the
 * gateways of a shared disk read from each other. A text the writer would
 * never write is refused whole: a registration listed twice, a change with
 * more side effects than any change has (the reader allocates for each), a
 * sequence number whose next one wraps.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hl_test.h"
#include "scsi/scsi_internal.h"

static int parse(const char *text, struct scsi_pr_state *st, struct scsi_pr_change *ch, unsigned *n)
{
	scsi_pr_state_init(st);
	return scsi_pr_parse(text, strlen(text), st, ch, n);
}

static void test_round_trip(void)
{
	static struct scsi_pr_change ch[SCSI_PR_HISTORY];
	const char *text = "hotlun-pr 2\nseq 9\ngeneration 4\ntype 1 1\naptpl 0\n"
	                   "reg 00000000000000aa 1 0 iqn.2026-12.test:a,i,0x000000000001\n"
	                   "reg 00000000000000bb 1 1 iqn.2026-12.test:b,i,0x000000000001\n"
	                   "change 9 1 iqn.2026-12.test:b,i,0x000000000001\n"
	                   "fx u 2a 04 1 0 iqn.2026-12.test:a,i,0x000000000001\n"
	                   "end\n";
	struct scsi_pr_state st;
	unsigned n = 0;
	char *out = NULL;
	size_t len = 0;

	CU_ASSERT_EQUAL_FATAL(parse(text, &st, ch, &n), 0);
	CU_ASSERT_EQUAL(st.n_regs, 2);
	CU_ASSERT_EQUAL(st.holder, 1);
	CU_ASSERT_EQUAL(n, 1);
	CU_ASSERT_EQUAL(ch[0].n, 1);
	CU_ASSERT_EQUAL_FATAL(scsi_pr_format(&st, ch, n, &out, &len), 0);
	CU_ASSERT_EQUAL(len, strlen(text));
	CU_ASSERT_NSTRING_EQUAL(out, text, len);
	free(out);
	scsi_pr_change_fini(&ch[0]);
	scsi_pr_state_fini(&st);
}

static void test_twice_refused(void)
{
	struct scsi_pr_state st;

	/* the same nexus twice (names compare without case) */
	CU_ASSERT_EQUAL(parse("hotlun-pr 1\ngeneration 1\ntype 0 -1\n"
	                      "reg 1 1 0 iqn.a,i,0x1\nreg 2 1 0 IQN.A,i,0x1\nend\n",
	                      &st, NULL, NULL),
	                -EBADMSG);
	CU_ASSERT_EQUAL(st.n_regs, 0);
	CU_ASSERT_PTR_NULL(st.regs);
	/* ALL_TG_PT twice, whatever target port each names */
	CU_ASSERT_EQUAL(parse("hotlun-pr 1\ngeneration 1\ntype 0 -1\n"
	                      "reg 1 1 1 iqn.a\nreg 2 2 1 iqn.a\nend\n",
	                      &st, NULL, NULL),
	                -EBADMSG);
	/* what the rules do make: one port on two target ports, one for all beside one for one */
	CU_ASSERT_EQUAL(parse("hotlun-pr 1\ngeneration 1\ntype 0 -1\n"
	                      "reg 1 1 0 iqn.a\nreg 2 2 0 iqn.a\nreg 3 1 1 iqn.a\nend\n",
	                      &st, NULL, NULL),
	                0);
	CU_ASSERT_EQUAL(st.n_regs, 3);
	scsi_pr_state_fini(&st);
}

/* A v2 record with one change of nfx "fx" lines (malloc'ed). */
static char *record_with_fx(unsigned nfx)
{
	size_t cap = 256 + (size_t)nfx * 32, len = 0;
	char *t = malloc(cap);

	len += (size_t)snprintf(t + len, cap - len,
	                        "hotlun-pr 2\nseq 2\ngeneration 1\ntype 0 -1\naptpl 0\n"
	                        "change 2 1 -\n");
	for (unsigned i = 0; i < nfx; i++)
		len += (size_t)snprintf(t + len, cap - len, "fx u 2a 03 1 0 iqn.x%u\n", i);
	snprintf(t + len, cap - len, "end\n");
	return t;
}

static void test_fx_bounded(void)
{
	static struct scsi_pr_change ch[SCSI_PR_HISTORY];
	struct scsi_pr_state st;
	unsigned n = 0;
	char *t = record_with_fx(SCSI_PR_FX_MAX);

	CU_ASSERT_EQUAL(parse(t, &st, ch, &n), 0);
	CU_ASSERT_EQUAL(n, 1);
	CU_ASSERT_EQUAL(ch[0].n, SCSI_PR_FX_MAX);
	scsi_pr_change_fini(&ch[0]);
	scsi_pr_state_fini(&st);
	free(t);
	/* one more than any change lists: damaged, nothing kept */
	t = record_with_fx(SCSI_PR_FX_MAX + 1);
	CU_ASSERT_EQUAL(parse(t, &st, ch, &n), -EBADMSG);
	CU_ASSERT_EQUAL(n, 0);
	CU_ASSERT_PTR_NULL(ch[0].fx);
	free(t);
}

static void test_seq_wrap_refused(void)
{
	static struct scsi_pr_change ch[SCSI_PR_HISTORY];
	struct scsi_pr_state st;
	unsigned n = 0;

	/* the next commit would be seq 0, older than every gateway's copy: none applies it */
	CU_ASSERT_EQUAL(parse("hotlun-pr 2\nseq 18446744073709551615\ngeneration 1\ntype 0 -1\n"
	                      "aptpl 0\nend\n",
	                      &st, ch, &n),
	                -EBADMSG);
	CU_ASSERT_EQUAL(parse("hotlun-pr 2\nseq 18446744073709551614\ngeneration 1\ntype 0 -1\n"
	                      "aptpl 0\nend\n",
	                      &st, ch, &n),
	                0);
	CU_ASSERT_EQUAL(st.seq, UINT64_MAX - 1);
	scsi_pr_state_fini(&st);
}

static const struct hl_test tests[] = {
    {"a record reads back as it was written", test_round_trip},
    {"a registration listed twice is refused", test_twice_refused},
    {"a change's side effects are bounded", test_fx_bounded},
    {"a record whose next change would wrap is refused", test_seq_wrap_refused},
    {NULL, NULL},
};

int main(void)
{
	return hl_test_run("scsi_pr_text", tests);
}
