// fuzz-sources: src/scsi/pr_text.c src/scsi/pr_state.c src/util/util.c src/log/log.c
// fuzz-libs: -pthread
// fuzz-args: -max_len=65536
/*
 * fuzz_pr_text.c - harness for scsi_pr_parse (src/scsi/pr_text.c), the
 * reader of the persistent reservation text in both its forms: version 1,
 * the APTPL file hotlund reads back from state_dir at start, and version 2,
 * the record the gateways of a shared disk keep in the cluster and read
 * from each other (pr_shared.c). The first byte says whether the reader
 * keeps the changes (the shared record's reader) or not (the file's).
 *
 * Besides crashes, leaks and UB: a refused text leaves the state and the
 * changes empty; an accepted one is a state the rules can work on (the
 * holder a registration when the type has one, every registration with a
 * key and a name, no two alike (port, target port, ALL_TG_PT), at most
 * SCSI_PR_MAX_REGS, at most SCSI_PR_HISTORY changes of at most
 * SCSI_PR_FX_MAX side effects each, a seq whose next one does not wrap)
 * and reads back the same after
 * scsi_pr_format (written, read, written again: the same text).
 */
#include "scsi/scsi_internal.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static void state_check(const struct scsi_pr_state *st, const struct scsi_pr_change *ch, unsigned n)
{
	if (st->n_regs > SCSI_PR_MAX_REGS || n > SCSI_PR_HISTORY || st->seq == UINT64_MAX)
		abort();
	if (st->type && !scsi_pr_type_valid(st->type))
		abort();
	if (st->type && !scsi_pr_type_all_registrants(st->type) &&
	    (st->holder < 0 || st->holder >= (int)st->n_regs))
		abort();
	for (unsigned i = 0; i < st->n_regs; i++) {
		const struct scsi_pr_reg *r = &st->regs[i];
		if (!r->key || !r->initiator_port[0])
			abort();
		for (unsigned j = 0; j < i; j++) {
			const struct scsi_pr_reg *q = &st->regs[j];
			/* one nexus registered twice alike: which key does it hold? */
			if (q->all_tg_pt == r->all_tg_pt &&
			    (q->all_tg_pt || q->rel_port == r->rel_port) &&
			    strcasecmp(q->initiator_port, r->initiator_port) == 0)
				abort();
		}
	}
	for (unsigned k = 0; k < n; k++)
		if (ch[k].n > SCSI_PR_FX_MAX)
			abort();
}

static void changes_fini(struct scsi_pr_change *ch, unsigned n)
{
	for (unsigned k = 0; k < n; k++)
		scsi_pr_change_fini(&ch[k]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct scsi_pr_change ch[SCSI_PR_HISTORY], ch2[SCSI_PR_HISTORY];
	struct scsi_pr_state st, st2;
	unsigned n = 0, n2 = 0;
	char *out = NULL, *out2 = NULL;
	size_t len = 0, len2 = 0;

	if (size < 1)
		return 0;
	bool keep = data[0] & 1;
	const char *text = (const char *)data + 1;

	scsi_pr_state_init(&st);
	scsi_pr_state_init(&st2);
	int rc = scsi_pr_parse(text, size - 1, &st, keep ? ch : NULL, keep ? &n : NULL);
	if (rc) {
		if (rc != -EBADMSG || st.n_regs || st.regs || st.type || n)
			abort();
		return 0;
	}
	state_check(&st, ch, n);
	/* the file's form (no changes) or the record's (with them, even none) */
	bool v2 = keep && size > 12 && !memcmp(text, "hotlun-pr 2\n", 12);
	if (scsi_pr_format(&st, v2 ? ch : NULL, n, &out, &len) == 0) {
		if (scsi_pr_parse(out, len, &st2, v2 ? ch2 : NULL, v2 ? &n2 : NULL))
			abort();
		state_check(&st2, ch2, n2);
		if (scsi_pr_format(&st2, v2 ? ch2 : NULL, n2, &out2, &len2) || len2 != len ||
		    memcmp(out, out2, len))
			abort();
	}
	free(out);
	free(out2);
	changes_fini(ch, n);
	changes_fini(ch2, n2);
	scsi_pr_state_fini(&st);
	scsi_pr_state_fini(&st2);
	return 0;
}
