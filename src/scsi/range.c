/*
 * range.c - LBA range locks that make COMPARE AND WRITE atomic against every
 * other write to its range, from any session on any reactor (ARCHITECTURE.md
 * invariant 3).
 *
 * Writes take their range shared (writes never wait for each other: SCSI
 * does not order them); COMPARE AND WRITE takes it exclusive. A request that
 * conflicts with a held range, or with an earlier waiter it overlaps (FIFO:
 * a stream of writes cannot starve a COMPARE AND WRITE), waits in
 * lu->rl_waiting. The fast path of a write, with no exclusive holder and no
 * waiter, is one lock and a list insert.
 *
 * A granted waiter resumes on the reactor its command started on, through
 * hl_reactor_call(), never inline inside another command's completion: that
 * keeps completion chains from recursing and done() on the right thread.
 * Without a reactor (unit tests, fuzzing) it resumes inline.
 */
#include "hotlun/event.h"
#include "hotlun/log.h"
#include "scsi/scsi_internal.h"

enum { RL_NONE = 0, RL_SHARED = 1, RL_EXCLUSIVE = 2 };

static bool overlap(const struct hl_scsi_cmd *a, const struct hl_scsi_cmd *b)
{
	return a->rl_lba < b->rl_lba + b->rl_count && b->rl_lba < a->rl_lba + a->rl_count;
}

static bool conflicts(const struct hl_scsi_cmd *a, const struct hl_scsi_cmd *b)
{
	return (a->rl_mode == RL_EXCLUSIVE || b->rl_mode == RL_EXCLUSIVE) && overlap(a, b);
}

/* Must cmd wait? Checks the holders and the waiters queued before `stop` (NULL: all). */
static bool must_wait(struct hl_lu *lu, const struct hl_scsi_cmd *cmd,
                      const struct hl_scsi_cmd *stop)
{
	struct hl_scsi_cmd *o;

	if (cmd->rl_mode == RL_SHARED && lu->rl_n_exclusive == 0 && hl_list_empty(&lu->rl_waiting))
		return false;
	hl_list_for_each_entry(o, &lu->rl_active, link)
	{
		if (conflicts(cmd, o))
			return true;
	}
	hl_list_for_each_entry(o, &lu->rl_waiting, link)
	{
		if (o == stop)
			break;
		if (conflicts(cmd, o))
			return true;
	}
	return false;
}

static void grant(struct hl_lu *lu, struct hl_scsi_cmd *cmd)
{
	hl_list_add_tail(&lu->rl_active, &cmd->link);
	if (cmd->rl_mode == RL_EXCLUSIVE)
		lu->rl_n_exclusive++;
}

bool scsi_range_lock(struct hl_scsi_cmd *cmd, uint64_t lba, uint64_t count, bool exclusive,
                     void (*resume)(struct hl_scsi_cmd *cmd))
{
	struct hl_lu *lu = cmd->lu;
	bool now;

	cmd->rl_lba = lba;
	cmd->rl_count = count;
	cmd->rl_mode = exclusive ? RL_EXCLUSIVE : RL_SHARED;
	cmd->rl_resume = resume;
	cmd->rl_next = NULL;
	pthread_mutex_lock(&lu->lock);
	now = !must_wait(lu, cmd, NULL);
	if (now)
		grant(lu, cmd);
	else
		hl_list_add_tail(&lu->rl_waiting, &cmd->link);
	pthread_mutex_unlock(&lu->lock);
	return now;
}

static void resume_call(void *arg)
{
	struct hl_scsi_cmd *cmd = arg;

	cmd->rl_resume(cmd);
}

void scsi_range_unlock(struct hl_scsi_cmd *cmd)
{
	struct hl_lu *lu = cmd->lu;
	struct hl_scsi_cmd *w, *tmp, *granted = NULL, **tail = &granted;

	if (cmd->rl_mode == RL_NONE)
		return;
	pthread_mutex_lock(&lu->lock);
	hl_list_del(&cmd->link);
	if (cmd->rl_mode == RL_EXCLUSIVE)
		lu->rl_n_exclusive--;
	cmd->rl_mode = RL_NONE;
	hl_list_for_each_entry_safe(w, tmp, &lu->rl_waiting, link)
	{
		if (must_wait(lu, w, w))
			continue;
		hl_list_del(&w->link);
		grant(lu, w);
		*tail = w;
		tail = &w->rl_next;
	}
	pthread_mutex_unlock(&lu->lock);

	while (granted) {
		w = granted;
		granted = w->rl_next;
		w->rl_next = NULL;
		if (!w->reactor) {
			w->rl_resume(w);
		} else if (hl_reactor_call(w->reactor, resume_call, w) != 0) {
			/* cannot queue the wakeup: resuming here is late-thread but never lost */
			HL_ERR_RL(SCSI_COMPONENT,
			          "%s: cannot wake a range lock waiter on its reactor", lu->name);
			w->rl_resume(w);
		}
	}
}

void scsi_range_init(struct hl_lu *lu)
{
	hl_list_init(&lu->rl_active);
	hl_list_init(&lu->rl_waiting);
	lu->rl_n_exclusive = 0;
}
