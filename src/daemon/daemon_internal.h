/*
 * daemon_internal.h - what the files of the daemon share: the state folder,
 * stable disk identities, origin wrapping.
 */
#ifndef HL_DAEMON_INTERNAL_H
#define HL_DAEMON_INTERNAL_H

#include <stdint.h>

#include "hotlun/conf.h"
#include "hotlun/origin.h"

/**
 * Create state_dir (and parents) if needed and read its install id, making
 * one (random, persisted in state_dir/install-id) on first start.
 * @return 0 or -errno (logged).
 */
int daemon_state_dir_init(const char *state_dir, uint64_t *install_id);

/**
 * The stable identity of a disk: a NAA-6 registered extended designator
 * (16 bytes) and a unit serial number, both derived from the install id and
 * the disk's name, so they survive restarts and are the same on every portal.
 */
void daemon_disk_identity(uint64_t install_id, const char *disk_name, uint8_t naa[16],
			  char serial[33]);

/** Wrap *origin with the throttle when the [disk] section asks for one. @return 0 or -errno. */
int daemon_wrap_origin(const struct hl_conf_disk *disk, struct hl_origin **origin);

#endif
