/*
 * scratch.c - one daemon-wide budget for the buffers a SCSI command takes
 * besides the transport's data buffer: the bounce buffers of VERIFY,
 * WRITE AND VERIFY, COMPARE AND WRITE (emulated), ORWRITE, WRITE SAME and
 * a READ's partial last block, the job of an EXTENDED COPY, and the copies
 * a shared persistent reservation command keeps while its job runs.
 *
 * Why: each session may have its whole command window of these in flight
 * (ISCSI_QUEUE_DEPTH, plus as many immediate commands), and one VERIFY
 * with BYTCHK=0 or one EXTENDED COPY needs no data-out at all and holds
 * 1 MiB: with the defaults that was 256 MiB a session and, with the
 * session caps derived from LimitNOFILE=65536 (30720 sessions, 1024 per
 * address), up to 256 GiB from one address. Nothing bounded it but
 * malloc failing. With a budget a command that finds it spent is answered
 * BUSY at once (nothing was started, nothing is lost or closed) and the
 * initiator retries it later.
 *
 * Accounting is lock-free: a charge is a compare-and-swap that never lets
 * `used` pass the limit, so used <= limit at every instant (a lowered
 * limit aside, which only refuses until the use drains below it), and the
 * counters read by stats are exact.
 */
#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "scsi/scsi_internal.h"

static _Atomic uint64_t scratch_limit = HL_SCSI_SCRATCH_DEFAULT;
static _Atomic uint64_t scratch_used, scratch_peak, scratch_refused;

void hl_scsi_scratch_set_limit(uint64_t bytes)
{
	atomic_store(&scratch_limit, bytes ? bytes : HL_SCSI_SCRATCH_DEFAULT);
}

void hl_scsi_scratch_stats(struct hl_scsi_scratch_stats *out)
{
	out->limit = atomic_load(&scratch_limit);
	out->used = atomic_load(&scratch_used);
	out->peak = atomic_load(&scratch_peak);
	out->refused = atomic_load(&scratch_refused);
}

bool scsi_scratch_take(uint64_t n)
{
	uint64_t lim = atomic_load(&scratch_limit);
	uint64_t cur = atomic_load(&scratch_used);

	do {
		if (n > lim || cur > lim - n) {
			atomic_fetch_add(&scratch_refused, 1);
			return false;
		}
	} while (!atomic_compare_exchange_weak(&scratch_used, &cur, cur + n));
	uint64_t now = cur + n, peak = atomic_load(&scratch_peak);
	while (now > peak && !atomic_compare_exchange_weak(&scratch_peak, &peak, now))
		;
	return true;
}

void scsi_scratch_give(uint64_t n)
{
	atomic_fetch_sub(&scratch_used, n);
}

/*
 * A bounce buffer carries its size in front of it, so scsi_cmd_complete
 * gives back exactly what was charged (scsi_cmd_priv has no room left).
 */
struct bounce_head {
	alignas(max_align_t) size_t len;
};

uint8_t *scsi_bounce_get(struct hl_scsi_cmd *cmd, size_t n, bool zero)
{
	struct bounce_head *h;

	if (!scsi_scratch_take(n)) {
		cmd->status = HL_SAM_BUSY;
		cmd->sense_len = 0;
		return NULL;
	}
	h = zero ? calloc(1, sizeof(*h) + n) : malloc(sizeof(*h) + n);
	if (!h) {
		scsi_scratch_give(n);
		cmd->status = HL_SAM_BUSY;
		cmd->sense_len = 0;
		return NULL;
	}
	h->len = n;
	return (uint8_t *)(h + 1);
}

void scsi_bounce_put(uint8_t *b)
{
	struct bounce_head *h;

	if (!b)
		return;
	h = (struct bounce_head *)(void *)b - 1;
	scsi_scratch_give(h->len);
	free(h);
}
