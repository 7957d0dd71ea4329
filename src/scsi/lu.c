/*
 * lu.c - logical unit lifetime, the task management events the SCSI layer
 * must see (LUN reset, nexus loss), and what the origin reports about itself
 * (a new capacity: CAPACITY DATA HAS CHANGED to every I_T nexus), and the
 * access provider that gives its ALUA states (the gating itself is in cmd.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hotlun/log.h"
#include "scsi/scsi_internal.h"

/* Every live LU, for EXTENDED COPY target descriptors (matched by NAA). */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct hl_list registry = {&registry, &registry}; /* guarded by registry_lock */

struct hl_lu *scsi_lu_find_by_naa(const uint8_t naa[16])
{
	struct hl_lu *lu, *found = NULL;

	pthread_mutex_lock(&registry_lock);
	hl_list_for_each_entry(lu, &registry, registry_link)
	{
		if (memcmp(lu->cfg.naa, naa, 16) == 0) {
			found = lu;
			found->holds++;
			break;
		}
	}
	pthread_mutex_unlock(&registry_lock);
	return found;
}

void scsi_lu_release(struct hl_lu *lu)
{
	pthread_mutex_lock(&registry_lock);
	lu->holds--;
	pthread_mutex_unlock(&registry_lock);
}

/* SPC-4: the unit attention after the medium's capacity changed */
#define SCSI_ASC_CAPACITY_CHANGED 0x2a, 0x09

/*
 * The origin's events (origin.h: on the origin's own thread, not a reactor).
 * A new size becomes the LU's block count at once, so READ CAPACITY answers
 * it and I/O past the new end gets LBA OUT OF RANGE (the range checks read
 * num_blocks, an aligned 64-bit word); every nexus that knows the LU gets
 * the unit attention, and nexuses that meet it later start with POWER ON.
 */
static void lu_origin_event(void *arg, struct hl_origin *o, enum hl_origin_event ev,
                            uint64_t old_size)
{
	struct hl_lu *lu = arg;
	uint64_t size = __atomic_load_n(&o->size, __ATOMIC_ACQUIRE);

	if (ev == HL_ORIGIN_FENCED) {
		HL_ERR(SCSI_COMPONENT,
		       "%s: the origin shut this gateway out (fenced); its I/O fails", lu->name);
		return;
	}
	if (ev != HL_ORIGIN_RESIZED)
		return;
	uint64_t blocks = size / lu->block_size;
	if (size % lu->block_size)
		HL_WARN(SCSI_COMPONENT,
		        "%s: new origin size %llu is not a multiple of %u; the last partial block "
		        "is not exported",
		        lu->name, (unsigned long long)size, lu->block_size);
	if (blocks == __atomic_load_n(&lu->num_blocks, __ATOMIC_ACQUIRE))
		return;
	HL_NOTICE(SCSI_COMPONENT, "%s: capacity changed: %llu -> %llu bytes (%llu blocks)",
	          lu->name, (unsigned long long)old_size, (unsigned long long)size,
	          (unsigned long long)blocks);
	__atomic_store_n(&lu->num_blocks, blocks, __ATOMIC_RELEASE);
	scsi_ua_queue_all(lu, 0, SCSI_ASC_CAPACITY_CHANGED);
}

int hl_lu_create(const struct hl_lu_config *cfg, struct hl_origin *origin, struct hl_lu **out)
{
	if (!cfg || !origin || !out)
		return -EINVAL;
	if (cfg->block_size != 512 && cfg->block_size != 4096) {
		HL_ERR(SCSI_COMPONENT, "%s: block size %u is not 512 or 4096",
		       cfg->name ? cfg->name : "?", cfg->block_size);
		return -EINVAL;
	}
	if (origin->size == 0 || origin->size % cfg->block_size) {
		HL_ERR(SCSI_COMPONENT, "%s: origin size %llu is not a positive multiple of %u",
		       cfg->name ? cfg->name : "?", (unsigned long long)origin->size,
		       cfg->block_size);
		return -EINVAL;
	}

	struct hl_lu *lu = calloc(1, sizeof(*lu));
	if (!lu)
		return -ENOMEM;
	lu->name = strdup(cfg->name ? cfg->name : "lu");
	if (!lu->name) {
		free(lu);
		return -ENOMEM;
	}
	int rc = pthread_mutex_init(&lu->lock, NULL);
	if (rc) {
		free(lu->name);
		free(lu);
		return -rc;
	}
	if (cfg->state_dir) {
		lu->state_dir = strdup(cfg->state_dir);
		if (!lu->state_dir) {
			pthread_mutex_destroy(&lu->lock);
			free(lu->name);
			free(lu);
			return -ENOMEM;
		}
	}
	lu->cfg = *cfg;
	lu->cfg.name = lu->name;
	lu->cfg.state_dir = lu->state_dir;
	lu->cfg.serial[sizeof(lu->cfg.serial) - 1] = '\0';
	/* a write-protected origin makes a write-protected LU */
	lu->cfg.read_only = cfg->read_only || origin->read_only;
	lu->origin = origin;
	lu->thin = origin->can_discard && !lu->cfg.read_only;
	lu->lbprz = lu->thin && origin->zeroes_after_discard;
	lu->block_size = cfg->block_size;
	lu->num_blocks = origin->size / cfg->block_size;
	lu->lbppbe = 0;
	if (origin->phys_block_size > cfg->block_size &&
	    origin->phys_block_size % cfg->block_size == 0) {
		uint32_t ratio = origin->phys_block_size / cfg->block_size;
		/* only a power of two is expressible; otherwise report nothing */
		if ((ratio & (ratio - 1)) == 0) {
			while ((1u << lu->lbppbe) < ratio && lu->lbppbe < 15)
				lu->lbppbe++;
		}
	}
	hl_list_init(&lu->nexuses);
	scsi_pr_state_init(&lu->pr);
	scsi_range_init(lu);
	hl_list_init(&lu->xcopy_results);
	rc = scsi_pr_load(lu);
	if (rc) {
		scsi_rsv_fini(lu);
		pthread_mutex_destroy(&lu->lock);
		free(lu->state_dir);
		free(lu->name);
		free(lu);
		return rc;
	}
	pthread_mutex_lock(&registry_lock);
	hl_list_add_tail(&registry, &lu->registry_link);
	pthread_mutex_unlock(&registry_lock);
	hl_origin_listen(origin, lu_origin_event, lu);
	*out = lu;
	return 0;
}

void hl_lu_destroy(struct hl_lu *lu)
{
	if (!lu)
		return;
	/*
	 * Out of the registry first, so no new copy finds it; then wait for the
	 * EXTENDED COPY commands of other LUs that still use it (bounded: a copy
	 * moves at most its segments' blocks).
	 */
	pthread_mutex_lock(&registry_lock);
	hl_list_del(&lu->registry_link);
	while (lu->holds) {
		pthread_mutex_unlock(&registry_lock);
		usleep(1000);
		pthread_mutex_lock(&registry_lock);
	}
	pthread_mutex_unlock(&registry_lock);
	/* no transaction on a shared reservation record may outlive the LU (or its origin) */
	scsi_pr_shared_stop(lu);
	/* first: once the origin is closed no event of it can reach this LU (lu_origin_event) */
	hl_origin_close(lu->origin);
	scsi_xcopy_fini(lu);
	scsi_ua_fini(lu);
	scsi_rsv_fini(lu);
	pthread_mutex_destroy(&lu->lock);
	free(lu->state_dir);
	free(lu->name);
	free(lu);
}

const char *hl_lu_name(const struct hl_lu *lu)
{
	return lu->name;
}

uint64_t hl_lu_num_blocks(const struct hl_lu *lu)
{
	return __atomic_load_n(&lu->num_blocks, __ATOMIC_ACQUIRE);
}

uint32_t hl_lu_block_size(const struct hl_lu *lu)
{
	return lu->block_size;
}

void hl_lu_set_access(struct hl_lu *lu, const struct hl_lu_access *ops, void *arg)
{
	pthread_mutex_lock(&lu->lock);
	if (ops)
		__atomic_store_n(&lu->access_arg, arg, __ATOMIC_RELAXED);
	/* release: a reactor that sees ops sees its arg */
	__atomic_store_n(&lu->access, ops, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&lu->lock);
	HL_DEBUG(SCSI_COMPONENT, "%s: ALUA access provider %s", lu->name, ops ? "set" : "removed");
}

bool scsi_lu_has_access(const struct hl_lu *lu)
{
	return scsi_lu_access(lu) != NULL;
}

void hl_lu_access_changed(struct hl_lu *lu)
{
	if (!lu)
		return;
	/* queued once: scsi_ua_push drops a duplicate still pending */
	scsi_ua_queue_all(lu, 0, SCSI_ASC_ALUA_CHANGED);
}

unsigned hl_lu_busy(const struct hl_lu *lu)
{
	/*
	 * Pairs with the full barrier of the increment in cmd.c, which comes
	 * before the command reads its group's state: the provider changed the
	 * state before it calls this, so either the command sees the new state
	 * or this load sees the command.
	 */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return __atomic_load_n(&lu->busy, __ATOMIC_SEQ_CST);
}

void hl_lu_reset(struct hl_lu *lu, const struct hl_scsi_nexus *by)
{
	if (!lu)
		return;
	HL_NOTICE(SCSI_COMPONENT, "%s: logical unit reset", lu->name);
	/* SAM-5: every I_T nexus, including the one that asked */
	scsi_ua_queue_all(lu, 0, SCSI_ASC_LUN_RESET);
	scsi_rsv_reset(lu);
}

void hl_scsi_nexus_gone(const struct hl_scsi_lun_map *map, const struct hl_scsi_nexus *nexus)
{
	if (!map || !nexus)
		return;
	for (unsigned i = 0; i < HL_SCSI_MAX_LUNS; i++) {
		if (map->lu[i]) {
			scsi_ua_nexus_gone(map->lu[i], nexus->id);
			scsi_rsv_nexus_gone(map->lu[i], nexus);
			scsi_xcopy_nexus_gone(map->lu[i], nexus->id);
		}
	}
}
