/*
 * ua.c - unit attention conditions (SAM-5 5.14, SPC-4 5.14): a small queue
 * per LU per I_T nexus, kept in struct scsi_lu_nexus under lu->lock.
 *
 * A nexus the LU has not seen before starts with POWER ON, RESET, OR BUS
 * DEVICE RESET OCCURRED: from its point of view the LU has just appeared.
 * When the queue is full the newest condition replaces the last one, so the
 * initiator still learns that something happened (SPC-4 allows reporting the
 * most important one).
 *
 * REPORTED LUNS DATA HAS CHANGED belongs to the target's LUN inventory, not
 * to one LU: it is queued on every LU of the nexus's LUN map and, once
 * reported on any of them (or once the nexus ran REPORT LUNS), cleared on
 * all of them (SPC-4's LUICLR behaviour), so an initiator hears it once.
 */
#include <errno.h>
#include <stdlib.h>

#include "hotlun/log.h"
#include "hotlun/util.h"
#include "scsi/scsi_internal.h"

/*
 * The LU's nexuses by id: every command looks its own up (its unit
 * attentions), so a list walk cost O(sessions) per command (74% of the
 * daemon's CPU with 4,096 sessions on one LU). Open addressing with linear
 * probing, at most half full, backward-shift deletion. lu->lock held.
 */
static uint32_t ix_home(const struct hl_lu *lu, uint64_t id)
{
	return (uint32_t)(hl_mix64(id) & (lu->nexus_ix_cap - 1));
}

static struct scsi_lu_nexus *nexus_find(struct hl_lu *lu, uint64_t nexus_id)
{
	if (!lu->nexus_ix_cap)
		return NULL;
	for (uint32_t i = ix_home(lu, nexus_id);; i = (i + 1) & (lu->nexus_ix_cap - 1)) {
		struct scsi_lu_nexus *n = lu->nexus_ix[i];
		if (!n || n->nexus_id == nexus_id)
			return n;
	}
}

static void ix_put(struct hl_lu *lu, struct scsi_lu_nexus *n)
{
	uint32_t i = ix_home(lu, n->nexus_id);

	while (lu->nexus_ix[i])
		i = (i + 1) & (lu->nexus_ix_cap - 1);
	lu->nexus_ix[i] = n;
}

/* Make room for one more. @return 0 or -ENOMEM (the index is unchanged). */
static int ix_reserve(struct hl_lu *lu)
{
	uint32_t cap = lu->nexus_ix_cap ? lu->nexus_ix_cap : 16;
	struct scsi_lu_nexus **old = lu->nexus_ix;
	uint32_t old_cap = lu->nexus_ix_cap;

	while ((lu->nexus_ix_n + 1) * 2 > cap)
		cap *= 2;
	if (cap == old_cap)
		return 0;
	struct scsi_lu_nexus **tab = calloc(cap, sizeof(*tab));
	if (!tab)
		return -ENOMEM;
	lu->nexus_ix = tab;
	lu->nexus_ix_cap = cap;
	for (uint32_t i = 0; i < old_cap; i++) {
		if (old[i])
			ix_put(lu, old[i]);
	}
	free(old);
	return 0;
}

static void ix_remove(struct hl_lu *lu, struct scsi_lu_nexus *n)
{
	uint32_t mask = lu->nexus_ix_cap - 1, i = ix_home(lu, n->nexus_id);

	while (lu->nexus_ix[i] != n)
		i = (i + 1) & mask;
	/* backward shift: move up every later entry whose home is at or before the hole */
	for (uint32_t j = (i + 1) & mask; lu->nexus_ix[j]; j = (j + 1) & mask) {
		uint32_t h = ix_home(lu, lu->nexus_ix[j]->nexus_id);
		if (((j - h) & mask) >= ((j - i) & mask)) {
			lu->nexus_ix[i] = lu->nexus_ix[j];
			i = j;
		}
	}
	lu->nexus_ix[i] = NULL;
	lu->nexus_ix_n--;
}

void scsi_ua_push(struct scsi_lu_nexus *n, uint8_t asc, uint8_t ascq)
{
	for (unsigned i = 0; i < n->n_ua; i++) {
		if (n->ua[i].asc == asc && n->ua[i].ascq == ascq)
			return;
	}
	if (n->n_ua == SCSI_UA_MAX)
		n->n_ua--;
	n->ua[n->n_ua].asc = asc;
	n->ua[n->n_ua].ascq = ascq;
	n->n_ua++;
}

/* lu->lock held. NULL only when out of memory. */
static struct scsi_lu_nexus *nexus_get(struct hl_lu *lu, const struct hl_scsi_nexus *nexus)
{
	uint64_t id = nexus ? nexus->id : 0;
	struct scsi_lu_nexus *n = nexus_find(lu, id);

	if (n)
		return n;
	if (ix_reserve(lu))
		return NULL;
	n = calloc(1, sizeof(*n));
	if (!n)
		return NULL;
	n->nexus_id = id;
	if (nexus) {
		hl_strlcpy(n->initiator_port, nexus->initiator_port, sizeof(n->initiator_port));
		n->rel_port = nexus->port ? nexus->port->rel_port_id : 0;
		n->tpg_id = nexus->port ? nexus->port->tpg_id : 0;
	}
	scsi_ua_push(n, SCSI_ASC_POWER_ON_RESET);
	hl_list_add_tail(&lu->nexuses, &n->link);
	ix_put(lu, n);
	lu->nexus_ix_n++;
	return n;
}

bool scsi_ua_take(struct hl_lu *lu, const struct hl_scsi_nexus *nexus, uint8_t *asc, uint8_t *ascq)
{
	bool found = false;

	pthread_mutex_lock(&lu->lock);
	struct scsi_lu_nexus *n = nexus_get(lu, nexus);
	if (!n) {
		/* Without memory to remember the nexus, report the power-on UA every time. */
		*asc = 0x29;
		*ascq = 0x00;
		found = true;
	} else if (n->n_ua) {
		*asc = n->ua[0].asc;
		*ascq = n->ua[0].ascq;
		n->n_ua--;
		for (unsigned i = 0; i < n->n_ua; i++)
			n->ua[i] = n->ua[i + 1];
		found = true;
	}
	pthread_mutex_unlock(&lu->lock);
	return found;
}

bool scsi_ua_report(struct hl_scsi_cmd *cmd, uint8_t *asc, uint8_t *ascq)
{
	if (!scsi_ua_take(cmd->lu, cmd->nexus, asc, ascq))
		return false;
	/* an inventory change is heard once per nexus, not once per LU */
	if (*asc == 0x3f && *ascq == 0x0e && cmd->nexus)
		scsi_ua_clear_map(cmd->map, cmd->lu, cmd->nexus->id,
		                  SCSI_ASC_REPORTED_LUNS_CHANGED);
	return true;
}

void scsi_ua_queue_all(struct hl_lu *lu, uint64_t except_id, uint8_t asc, uint8_t ascq)
{
	struct scsi_lu_nexus *n;

	pthread_mutex_lock(&lu->lock);
	hl_list_for_each_entry(n, &lu->nexuses, link)
	{
		if (n->nexus_id != except_id)
			scsi_ua_push(n, asc, ascq);
	}
	pthread_mutex_unlock(&lu->lock);
}

/* lu->lock held: drop a pending asc/ascq from n (no-op when absent). */
static void ua_remove(struct scsi_lu_nexus *n, uint8_t asc, uint8_t ascq)
{
	for (unsigned i = 0; i < n->n_ua; i++) {
		if (n->ua[i].asc != asc || n->ua[i].ascq != ascq)
			continue;
		n->n_ua--;
		for (unsigned j = i; j < n->n_ua; j++)
			n->ua[j] = n->ua[j + 1];
		return;
	}
}

/* Drop asc/ascq pending for nexus_id on lu, if any. */
static void ua_clear(struct hl_lu *lu, uint64_t nexus_id, uint8_t asc, uint8_t ascq)
{
	pthread_mutex_lock(&lu->lock);
	struct scsi_lu_nexus *n = nexus_find(lu, nexus_id);
	if (n)
		ua_remove(n, asc, ascq);
	pthread_mutex_unlock(&lu->lock);
}

void scsi_ua_clear_map(const struct hl_scsi_lun_map *map, struct hl_lu *lu, uint64_t nexus_id,
                       uint8_t asc, uint8_t ascq)
{
	/* lu too: it may have left the map since the command was addressed to it */
	if (lu)
		ua_clear(lu, nexus_id, asc, ascq);
	for (unsigned i = 0; map && i < HL_SCSI_MAX_LUNS; i++) {
		struct hl_lu *l = __atomic_load_n(&map->lu[i], __ATOMIC_ACQUIRE);
		if (l && l != lu)
			ua_clear(l, nexus_id, asc, ascq);
	}
}

unsigned hl_scsi_luns_changed(const struct hl_scsi_lun_map *map, const struct hl_scsi_nexus *nexus)
{
	unsigned n_lu = 0;

	if (!map || !nexus)
		return 0;
	for (unsigned i = 0; i < HL_SCSI_MAX_LUNS; i++) {
		struct hl_lu *lu = __atomic_load_n(&map->lu[i], __ATOMIC_ACQUIRE);
		if (!lu)
			continue;
		pthread_mutex_lock(&lu->lock);
		/* a nexus new to this LU starts with POWER ON, then hears of the inventory */
		struct scsi_lu_nexus *n = nexus_get(lu, nexus);
		if (n) {
			scsi_ua_push(n, SCSI_ASC_REPORTED_LUNS_CHANGED);
			n_lu++;
		}
		pthread_mutex_unlock(&lu->lock);
	}
	return n_lu;
}

void scsi_ua_nexus_gone(struct hl_lu *lu, uint64_t nexus_id)
{
	pthread_mutex_lock(&lu->lock);
	struct scsi_lu_nexus *n = nexus_find(lu, nexus_id);
	if (n) {
		ix_remove(lu, n);
		hl_list_del(&n->link);
		free(n);
	}
	pthread_mutex_unlock(&lu->lock);
}

void scsi_ua_fini(struct hl_lu *lu)
{
	struct scsi_lu_nexus *n, *tmp;

	hl_list_for_each_entry_safe(n, tmp, &lu->nexuses, link)
	{
		hl_list_del(&n->link);
		free(n);
	}
	free(lu->nexus_ix);
	lu->nexus_ix = NULL;
	lu->nexus_ix_cap = lu->nexus_ix_n = 0;
}
