/*
 * lu.c - logical unit lifetime and the task management events the SCSI
 * layer must see (LUN reset, nexus loss).
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
	hl_list_init(&lu->pr_regs);
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
	scsi_xcopy_fini(lu);
	scsi_ua_fini(lu);
	scsi_rsv_fini(lu);
	pthread_mutex_destroy(&lu->lock);
	hl_origin_close(lu->origin);
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
	return lu->num_blocks;
}

uint32_t hl_lu_block_size(const struct hl_lu *lu)
{
	return lu->block_size;
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
			scsi_rsv_nexus_gone(map->lu[i], nexus->id);
			scsi_xcopy_nexus_gone(map->lu[i], nexus->id);
		}
	}
}
