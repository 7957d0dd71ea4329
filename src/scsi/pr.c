/*
 * pr.c - reservations: RESERVE/RELEASE(6/10) (SPC-2, held by one I_T nexus)
 * and persistent reservations (SPC-4 5.9, PERSISTENT RESERVE IN/OUT).
 *
 * Persistent registrations belong to an I_T nexus *identity* (initiator
 * port name + relative target port), not to a session: they survive the
 * session and apply to the next one with the same identity. When the last
 * REGISTER carried APTPL = 1 they also survive a restart: the whole PR state
 * of the LU is written to state_dir/pr-<NAA> (temp file, fsync, rename,
 * fsync of the directory) after every change, and read back by hl_lu_create.
 * The write happens on the reactor under lu->lock: PR OUT is rare and small,
 * and doing it before status is returned is what makes GOOD mean "kept".
 * Without a state_dir APTPL is refused (PTPL_C = 0).
 *
 * Compatible reservation handling (CRH = 1): RESERVE fails with RESERVATION
 * CONFLICT while any persistent registration exists, RELEASE then completes
 * with GOOD and does nothing.
 *
 * All state lives in the LU under lu->lock; every entry point here takes it.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "hotlun/log.h"
#include "scsi/scsi_internal.h"

enum {
	PR_WE = 1,    /* write exclusive */
	PR_EA = 3,    /* exclusive access */
	PR_WE_RO = 5, /* write exclusive, registrants only */
	PR_EA_RO = 6, /* exclusive access, registrants only */
	PR_WE_AR = 7, /* write exclusive, all registrants */
	PR_EA_AR = 8, /* exclusive access, all registrants */
};

enum {
	PRO_REGISTER = 0,
	PRO_RESERVE = 1,
	PRO_RELEASE = 2,
	PRO_CLEAR = 3,
	PRO_PREEMPT = 4,
	PRO_PREEMPT_ABORT = 5,
	PRO_REGISTER_IGNORE = 6,
	PRO_REGISTER_MOVE = 7,
};

#define PR_PARAM_LEN 24

static bool type_valid(uint8_t t)
{
	return t == PR_WE || t == PR_EA || (t >= PR_WE_RO && t <= PR_EA_AR);
}

static bool type_all_registrants(uint8_t t)
{
	return t == PR_WE_AR || t == PR_EA_AR;
}

/* Types under which every registrant may access the medium. */
static bool type_registrants_access(uint8_t t)
{
	return t >= PR_WE_RO && t <= PR_EA_AR;
}

static bool type_write_exclusive(uint8_t t)
{
	return t == PR_WE || t == PR_WE_RO || t == PR_WE_AR;
}

static const char *nexus_port_name(const struct hl_scsi_cmd *cmd)
{
	return cmd->nexus ? cmd->nexus->initiator_port : "";
}

static uint16_t nexus_rel_port(const struct hl_scsi_cmd *cmd)
{
	return cmd->nexus && cmd->nexus->port ? cmd->nexus->port->rel_port_id : 0;
}

static uint64_t nexus_id(const struct hl_scsi_cmd *cmd)
{
	return cmd->nexus ? cmd->nexus->id : 0;
}

static bool reg_matches(const struct scsi_pr_reg *r, const char *iport, uint16_t rel_port)
{
	return (r->all_tg_pt || r->rel_port == rel_port) && strcmp(r->initiator_port, iport) == 0;
}

/* The registration of cmd's nexus, or NULL. lu->lock held. */
static struct scsi_pr_reg *reg_find(struct hl_lu *lu, const struct hl_scsi_cmd *cmd)
{
	struct scsi_pr_reg *r;
	const char *iport = nexus_port_name(cmd);
	uint16_t rel = nexus_rel_port(cmd);

	hl_list_for_each_entry(r, &lu->pr_regs, link)
	{
		if (reg_matches(r, iport, rel))
			return r;
	}
	return NULL;
}

static bool is_holder(const struct hl_lu *lu, const struct scsi_pr_reg *r)
{
	if (!r || !lu->pr_type)
		return false;
	return type_all_registrants(lu->pr_type) || lu->pr_holder == r;
}

/* Queue a UA on every known nexus whose identity matches r, except `except`. lu->lock held. */
static void ua_for_reg(struct hl_lu *lu, const struct scsi_pr_reg *r, uint64_t except, uint8_t asc,
                       uint8_t ascq)
{
	struct scsi_lu_nexus *n;

	hl_list_for_each_entry(n, &lu->nexuses, link)
	{
		if (n->nexus_id != except && reg_matches(r, n->initiator_port, n->rel_port))
			scsi_ua_push(n, asc, ascq);
	}
}

/* UA to every registrant's nexuses except the one issuing the command. lu->lock held. */
static void ua_for_registrants(struct hl_lu *lu, uint64_t except, uint8_t asc, uint8_t ascq)
{
	struct scsi_pr_reg *r;

	hl_list_for_each_entry(r, &lu->pr_regs, link) ua_for_reg(lu, r, except, asc, ascq);
}

static void reservation_clear(struct hl_lu *lu)
{
	lu->pr_type = 0;
	lu->pr_holder = NULL;
}

/* Remove one registration, releasing what it held. lu->lock held. */
static void reg_remove(struct hl_lu *lu, struct scsi_pr_reg *r, uint64_t by)
{
	hl_list_del(&r->link);
	lu->pr_n_regs--;
	if (lu->pr_type) {
		if (lu->pr_holder == r) {
			/* SPC-4 5.9.11.2: releasing an RO reservation tells the other registrants
			 */
			if (lu->pr_type == PR_WE_RO || lu->pr_type == PR_EA_RO)
				ua_for_registrants(lu, by, SCSI_ASC_RESERVATIONS_RELEASED);
			reservation_clear(lu);
		} else if (type_all_registrants(lu->pr_type) && lu->pr_n_regs == 0) {
			reservation_clear(lu);
		}
	}
	free(r);
}

/* ---- APTPL: the PR state in state_dir ---- */

#define PR_FILE_MAGIC "hotlun-pr 1"

static void pr_path(const struct hl_lu *lu, char *buf, size_t n, const char *suffix)
{
	char hex[33];

	for (unsigned i = 0; i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", lu->cfg.naa[i]);
	snprintf(buf, n, "%s/pr-%s%s", lu->state_dir, hex, suffix);
}

static void fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd >= 0) {
		(void)fsync(fd);
		close(fd);
	}
}

/*
 * Make the file match the state: written when APTPL is on, removed when it
 * is off. lu->lock held. @return 0 or -errno (logged).
 */
static int pr_persist(struct hl_lu *lu)
{
	char path[4096], tmp[4112];
	struct scsi_pr_reg *r;
	int idx = 0, holder = -1;
	FILE *f;

	if (!lu->state_dir)
		return 0;
	pr_path(lu, path, sizeof(path), "");
	if (!lu->pr_aptpl) {
		if (unlink(path) == 0)
			fsync_dir(lu->state_dir);
		else if (errno != ENOENT)
			HL_WARN(SCSI_COMPONENT, "%s: cannot remove %s: %s", lu->name, path,
			        strerror(errno));
		return 0;
	}
	pr_path(lu, tmp, sizeof(tmp), ".tmp");
	f = fopen(tmp, "we");
	if (!f)
		goto fail;
	hl_list_for_each_entry(r, &lu->pr_regs, link)
	{
		if (r == lu->pr_holder)
			holder = idx;
		idx++;
	}
	fprintf(f, "%s\ngeneration %" PRIu32 "\ntype %u %d\n", PR_FILE_MAGIC, lu->pr_generation,
	        lu->pr_type, holder);
	hl_list_for_each_entry(r, &lu->pr_regs, link)
	{
		fprintf(f, "reg %016" PRIx64 " %u %u %s\n", r->key, r->rel_port,
		        r->all_tg_pt ? 1 : 0, r->initiator_port);
	}
	fputs("end\n", f);
	if (fflush(f) != 0 || fsync(fileno(f)) != 0) {
		int e = errno;
		fclose(f);
		unlink(tmp);
		errno = e;
		goto fail;
	}
	if (fclose(f) != 0 || rename(tmp, path) != 0) {
		int e = errno;
		unlink(tmp);
		errno = e;
		goto fail;
	}
	fsync_dir(lu->state_dir);
	return 0;
fail:;
	int rc = -errno;
	HL_ERR(SCSI_COMPONENT, "%s: cannot save persistent reservations to %s: %s", lu->name, path,
	       strerror(-rc));
	return rc;
}

int scsi_pr_load(struct hl_lu *lu)
{
	char path[4096], line[512];
	unsigned type = 0, n = 0;
	int holder = -1;
	uint32_t gen = 0;
	bool ok = false;
	FILE *f;

	if (!lu->state_dir)
		return 0;
	pr_path(lu, path, sizeof(path), "");
	f = fopen(path, "re");
	if (!f) {
		if (errno != ENOENT)
			HL_WARN(SCSI_COMPONENT, "%s: cannot read %s: %s", lu->name, path,
			        strerror(errno));
		return 0;
	}
	if (!fgets(line, sizeof(line), f) || strncmp(line, PR_FILE_MAGIC "\n", 12) != 0)
		goto bad;
	if (!fgets(line, sizeof(line), f) || sscanf(line, "generation %" SCNu32, &gen) != 1)
		goto bad;
	if (!fgets(line, sizeof(line), f) || sscanf(line, "type %u %d", &type, &holder) != 2)
		goto bad;
	if (type && !type_valid((uint8_t)type))
		goto bad;
	while (fgets(line, sizeof(line), f)) {
		uint64_t key;
		unsigned rel, all;
		int pos = 0;

		if (strcmp(line, "end\n") == 0) {
			ok = true;
			break;
		}
		if (sscanf(line, "reg %" SCNx64 " %u %u %n", &key, &rel, &all, &pos) != 3 || !pos ||
		    rel > 0xffff || all > 1 || key == 0 || n >= SCSI_PR_MAX_REGS)
			goto bad;
		char *iport = line + pos;
		iport[strcspn(iport, "\n")] = '\0';
		if (!*iport || strlen(iport) >= sizeof(((struct scsi_pr_reg *)0)->initiator_port))
			goto bad;
		struct scsi_pr_reg *r = calloc(1, sizeof(*r));
		if (!r) {
			fclose(f);
			scsi_rsv_fini(lu);
			return -ENOMEM;
		}
		hl_strlcpy(r->initiator_port, iport, sizeof(r->initiator_port));
		r->rel_port = (uint16_t)rel;
		r->all_tg_pt = all;
		r->key = key;
		hl_list_add_tail(&lu->pr_regs, &r->link);
		if ((int)n == holder)
			lu->pr_holder = r;
		n++;
	}
	if (!ok || (type && !type_all_registrants((uint8_t)type) && !lu->pr_holder) ||
	    (type && n == 0))
		goto bad;
	fclose(f);
	lu->pr_n_regs = n;
	lu->pr_generation = gen;
	lu->pr_type = (uint8_t)type;
	if (type_all_registrants(lu->pr_type))
		lu->pr_holder = NULL;
	lu->pr_aptpl = true;
	HL_NOTICE(SCSI_COMPONENT, "%s: %u persistent reservation registration(s) restored%s",
	          lu->name, n, type ? " with a reservation" : "");
	return 0;
bad:
	fclose(f);
	scsi_rsv_fini(lu);
	HL_WARN(SCSI_COMPONENT, "%s: %s is damaged; starting without persistent reservations",
	        lu->name, path);
	return 0;
}

/* ---- conflicts ---- */

bool scsi_rsv_conflict(struct hl_scsi_cmd *cmd, const struct scsi_cmd_desc *d)
{
	struct hl_lu *lu = cmd->lu;
	bool conflict = false;

	pthread_mutex_lock(&lu->lock);
	if (lu->rsv2_holder && lu->rsv2_holder != nexus_id(cmd)) {
		conflict = !(d->flags & SCSI_F_RSV2_ALLOW);
	} else if (lu->pr_type && !(d->flags & SCSI_F_PR_ALLOW)) {
		struct scsi_pr_reg *r = reg_find(lu, cmd);
		if (!is_holder(lu, r)) {
			if (r && type_registrants_access(lu->pr_type))
				conflict = false;
			else if ((d->flags & SCSI_F_PR_READ) && type_write_exclusive(lu->pr_type))
				conflict = false;
			else
				conflict = true;
		}
	}
	pthread_mutex_unlock(&lu->lock);
	if (conflict) {
		cmd->status = HL_SAM_RESERVATION_CONFLICT;
		cmd->sense_len = 0;
	}
	return conflict;
}

void scsi_rsv_reset(struct hl_lu *lu)
{
	pthread_mutex_lock(&lu->lock);
	lu->rsv2_holder = 0;
	pthread_mutex_unlock(&lu->lock);
}

void scsi_rsv_nexus_gone(struct hl_lu *lu, uint64_t id)
{
	pthread_mutex_lock(&lu->lock);
	if (lu->rsv2_holder == id)
		lu->rsv2_holder = 0;
	pthread_mutex_unlock(&lu->lock);
}

void scsi_rsv_fini(struct hl_lu *lu)
{
	struct scsi_pr_reg *r, *tmp;

	hl_list_for_each_entry_safe(r, tmp, &lu->pr_regs, link)
	{
		hl_list_del(&r->link);
		free(r);
	}
	lu->pr_n_regs = 0;
	reservation_clear(lu);
}

static void set_conflict(struct hl_scsi_cmd *cmd)
{
	cmd->status = HL_SAM_RESERVATION_CONFLICT;
	cmd->sense_len = 0;
}

/* ---- RESERVE / RELEASE (6 and 10) ---- */

enum scsi_exec_result spc_reserve(struct hl_scsi_cmd *cmd)
{
	struct hl_lu *lu = cmd->lu;
	uint64_t id = nexus_id(cmd);

	pthread_mutex_lock(&lu->lock);
	if (lu->pr_n_regs || (lu->rsv2_holder && lu->rsv2_holder != id)) {
		set_conflict(cmd);
	} else {
		lu->rsv2_holder = id;
		scsi_set_good(cmd);
	}
	pthread_mutex_unlock(&lu->lock);
	return SCSI_DONE;
}

enum scsi_exec_result spc_release(struct hl_scsi_cmd *cmd)
{
	struct hl_lu *lu = cmd->lu;

	/* releasing what another nexus holds, or nothing, is GOOD and changes nothing */
	pthread_mutex_lock(&lu->lock);
	if (lu->rsv2_holder == nexus_id(cmd))
		lu->rsv2_holder = 0;
	pthread_mutex_unlock(&lu->lock);
	scsi_set_good(cmd);
	return SCSI_DONE;
}

/* ---- PERSISTENT RESERVE IN ---- */

/* iSCSI TransportID, initiator port format (SPC-4 7.6.4.6): the name string padded to 4. */
static uint32_t put_transport_id(uint8_t *p, const char *iport)
{
	size_t n = strnlen(iport, 255);
	uint32_t len = (uint32_t)HL_ALIGN_UP(n + 1, 4);

	if (len < 20)
		len = 20;
	memset(p, 0, 4 + len);
	p[0] = 0x40 | 0x05; /* format 01b (name + ISID), protocol identifier iSCSI */
	hl_put_be16(p + 2, (uint16_t)len);
	memcpy(p + 4, iport, n);
	return 4 + len;
}

enum scsi_exec_result spc_pr_in(struct hl_scsi_cmd *cmd)
{
	struct hl_lu *lu = cmd->lu;
	uint8_t sa = cmd->cdb[1] & 0x1f;
	uint32_t alloc = hl_get_be16(cmd->cdb + 7);
	/* READ FULL STATUS: 24 + TransportID (<= 4 + 256) per registration */
	size_t cap = 8 + (size_t)SCSI_PR_MAX_REGS * (24 + 4 + 256);
	uint8_t *buf = calloc(1, cap);
	uint32_t off = 8;
	struct scsi_pr_reg *r;

	if (!buf) {
		cmd->status = HL_SAM_BUSY;
		return SCSI_DONE;
	}
	pthread_mutex_lock(&lu->lock);
	hl_put_be32(buf, lu->pr_generation);
	switch (sa) {
	case 0: /* READ KEYS */
		hl_list_for_each_entry(r, &lu->pr_regs, link)
		{
			hl_put_be64(buf + off, r->key);
			off += 8;
		}
		hl_put_be32(buf + 4, off - 8);
		break;
	case 1: /* READ RESERVATION */
		if (lu->pr_type) {
			uint64_t key = type_all_registrants(lu->pr_type) ? 0 : lu->pr_holder->key;
			hl_put_be64(buf + 8, key);
			buf[21] = lu->pr_type; /* scope 0: logical unit */
			off += 16;
		}
		hl_put_be32(buf + 4, off - 8);
		break;
	case 2: /* REPORT CAPABILITIES */
		hl_put_be16(buf, 8);
		/* CRH, ATP_C, PTPL_C when there is somewhere to keep the state; no SIP_C */
		buf[2] = (uint8_t)(0x10 | 0x04 | (lu->state_dir ? 0x01 : 0));
		/* TMV; ALLOW COMMANDS 0: no information; PTPL_A */
		buf[3] = (uint8_t)(0x80 | (lu->pr_aptpl ? 0x01 : 0));
		buf[4] =
		    0x80 | 0x40 | 0x20 | 0x08 | 0x02; /* WR_EX_AR EX_AC_RO WR_EX_RO EX_AC WR_EX */
		buf[5] = 0x01;                        /* EX_AC_AR */
		off = 8;
		break;
	case 3: /* READ FULL STATUS */
		hl_list_for_each_entry(r, &lu->pr_regs, link)
		{
			uint8_t *dsc = buf + off;
			hl_put_be64(dsc, r->key);
			dsc[12] =
			    (uint8_t)((r->all_tg_pt ? 0x02 : 0) | (is_holder(lu, r) ? 0x01 : 0));
			if (is_holder(lu, r))
				dsc[13] = lu->pr_type;
			hl_put_be16(dsc + 18, r->all_tg_pt ? 0 : r->rel_port);
			uint32_t tid = put_transport_id(dsc + 24, r->initiator_port);
			hl_put_be32(dsc + 20, tid);
			off += 24 + tid;
		}
		hl_put_be32(buf + 4, off - 8);
		break;
	default:
		pthread_mutex_unlock(&lu->lock);
		free(buf);
		scsi_sense_invalid_cdb(cmd, 1, 4);
		return SCSI_DONE;
	}
	pthread_mutex_unlock(&lu->lock);
	scsi_data_in(cmd, buf, off, alloc);
	free(buf);
	return SCSI_DONE;
}

/* ---- PERSISTENT RESERVE OUT ---- */

struct pr_params {
	uint8_t sa, scope, type;
	uint64_t key, sa_key;
	bool all_tg_pt;
};

static void pr_register(struct hl_scsi_cmd *cmd, const struct pr_params *p)
{
	struct hl_lu *lu = cmd->lu;
	struct scsi_pr_reg *r = reg_find(lu, cmd);

	if (!r) {
		if (p->sa == PRO_REGISTER && p->key != 0) {
			set_conflict(cmd);
			return;
		}
		scsi_set_good(cmd);
		if (p->sa_key == 0)
			return; /* unregistering what is not registered: nothing to do */
		if (lu->pr_n_regs >= SCSI_PR_MAX_REGS) {
			hl_scsi_set_sense(cmd, HL_SK_ILLEGAL_REQUEST, SCSI_ASC_NO_REG_RESOURCES);
			return;
		}
		r = calloc(1, sizeof(*r));
		if (!r) {
			hl_scsi_set_sense(cmd, HL_SK_ILLEGAL_REQUEST, SCSI_ASC_NO_REG_RESOURCES);
			return;
		}
		hl_strlcpy(r->initiator_port, nexus_port_name(cmd), sizeof(r->initiator_port));
		r->rel_port = nexus_rel_port(cmd);
		r->all_tg_pt = p->all_tg_pt;
		r->key = p->sa_key;
		hl_list_add_tail(&lu->pr_regs, &r->link);
		lu->pr_n_regs++;
		lu->pr_generation++;
		return;
	}
	if (p->sa == PRO_REGISTER && p->key != r->key) {
		set_conflict(cmd);
		return;
	}
	scsi_set_good(cmd);
	lu->pr_generation++;
	if (p->sa_key == 0)
		reg_remove(lu, r, nexus_id(cmd));
	else
		r->key = p->sa_key;
}

static void pr_reserve(struct hl_scsi_cmd *cmd, const struct pr_params *p, struct scsi_pr_reg *r)
{
	struct hl_lu *lu = cmd->lu;

	if (lu->pr_type) {
		/* the holder asking again for what it has is GOOD; anything else conflicts */
		if (is_holder(lu, r) && lu->pr_type == p->type)
			scsi_set_good(cmd);
		else
			set_conflict(cmd);
		return;
	}
	lu->pr_type = p->type;
	lu->pr_holder = type_all_registrants(p->type) ? NULL : r;
	scsi_set_good(cmd);
}

static void pr_release(struct hl_scsi_cmd *cmd, const struct pr_params *p, struct scsi_pr_reg *r)
{
	struct hl_lu *lu = cmd->lu;

	if (!lu->pr_type || !is_holder(lu, r)) {
		scsi_set_good(cmd); /* nothing of ours to release */
		return;
	}
	if (lu->pr_type != p->type) {
		hl_scsi_set_sense(cmd, HL_SK_ILLEGAL_REQUEST, SCSI_ASC_INVALID_RELEASE);
		return;
	}
	/* other registrants learn that an RO/AR reservation they could use is gone */
	if (type_registrants_access(lu->pr_type))
		ua_for_registrants(lu, nexus_id(cmd), SCSI_ASC_RESERVATIONS_RELEASED);
	reservation_clear(lu);
	scsi_set_good(cmd);
}

static void pr_clear(struct hl_scsi_cmd *cmd)
{
	struct hl_lu *lu = cmd->lu;
	struct scsi_pr_reg *r, *tmp;

	ua_for_registrants(lu, nexus_id(cmd), SCSI_ASC_RESERVATIONS_PREEMPTED);
	reservation_clear(lu);
	hl_list_for_each_entry_safe(r, tmp, &lu->pr_regs, link)
	{
		hl_list_del(&r->link);
		free(r);
	}
	lu->pr_n_regs = 0;
	lu->pr_generation++;
	scsi_set_good(cmd);
}

/* Remove every registration with `key` except `keep`; returns how many. lu->lock held. */
static unsigned remove_key(struct hl_lu *lu, uint64_t key, const struct scsi_pr_reg *keep,
                           uint64_t by)
{
	struct scsi_pr_reg *r, *tmp;
	unsigned n = 0;

	hl_list_for_each_entry_safe(r, tmp, &lu->pr_regs, link)
	{
		if (r == keep || r->key != key)
			continue;
		ua_for_reg(lu, r, by, SCSI_ASC_REGISTRATIONS_PREEMPTED);
		if (lu->pr_holder == r)
			lu->pr_holder = NULL;
		hl_list_del(&r->link);
		lu->pr_n_regs--;
		free(r);
		n++;
	}
	return n;
}

/*
 * PREEMPT AND ABORT: list in cmd the known nexuses (other than the issuer's)
 * of the registrations about to go: every one but keep (all == true), or
 * those with key. The transport aborts their tasks on the LU before it
 * answers (hl_scsi_cmd.abort_nexus). lu->lock held.
 */
static void collect_preempted(struct hl_lu *lu, struct hl_scsi_cmd *cmd,
                              const struct scsi_pr_reg *keep, bool all, uint64_t key)
{
	uint64_t by = nexus_id(cmd);
	struct scsi_pr_reg *r;
	struct scsi_lu_nexus *n;

	hl_list_for_each_entry(r, &lu->pr_regs, link)
	{
		if (r == keep || (!all && r->key != key))
			continue;
		hl_list_for_each_entry(n, &lu->nexuses, link)
		{
			bool dup = false;
			if (n->nexus_id == by || !reg_matches(r, n->initiator_port, n->rel_port))
				continue;
			for (unsigned i = 0; i < cmd->n_abort_nexus; i++)
				dup |= cmd->abort_nexus[i] == n->nexus_id;
			if (dup)
				continue;
			if (cmd->n_abort_nexus == HL_SCSI_ABORT_NEXUS_MAX)
				cmd->abort_others = true;
			else
				cmd->abort_nexus[cmd->n_abort_nexus++] = n->nexus_id;
		}
	}
}

static void pr_preempt(struct hl_scsi_cmd *cmd, const struct pr_params *p, struct scsi_pr_reg *r)
{
	struct hl_lu *lu = cmd->lu;
	uint64_t by = nexus_id(cmd);
	bool abort = p->sa == PRO_PREEMPT_ABORT;

	if (lu->pr_type && type_all_registrants(lu->pr_type) && p->sa_key == 0) {
		/* SPC-4 5.9.11.4.3: preempting an all-registrants reservation removes everyone else
		 */
		struct scsi_pr_reg *o, *tmp;
		if (abort)
			collect_preempted(lu, cmd, r, true, 0);
		hl_list_for_each_entry_safe(o, tmp, &lu->pr_regs, link)
		{
			if (o == r)
				continue;
			ua_for_reg(lu, o, by, SCSI_ASC_REGISTRATIONS_PREEMPTED);
			hl_list_del(&o->link);
			lu->pr_n_regs--;
			free(o);
		}
		lu->pr_type = p->type;
		lu->pr_holder = type_all_registrants(p->type) ? NULL : r;
		lu->pr_generation++;
		scsi_set_good(cmd);
		return;
	}
	if (p->sa_key == 0) { /* no registration has key 0 */
		scsi_sense_invalid_param(cmd, 8, -1);
		return;
	}
	if (lu->pr_type && !type_all_registrants(lu->pr_type) && lu->pr_holder->key == p->sa_key) {
		/* preempting the holder: its key's registrations go, the reservation becomes ours
		 */
		uint8_t old_type = lu->pr_type;
		if (abort)
			collect_preempted(lu, cmd, r, false, p->sa_key);
		remove_key(lu, p->sa_key, r, by);
		lu->pr_type = p->type;
		lu->pr_holder = type_all_registrants(p->type) ? NULL : r;
		if (old_type != p->type)
			ua_for_registrants(lu, by, SCSI_ASC_RESERVATIONS_RELEASED);
		lu->pr_generation++;
		scsi_set_good(cmd);
		return;
	}
	/* no reservation, or another key: remove those registrations, the reservation stays */
	if (abort)
		collect_preempted(lu, cmd, r, false, p->sa_key);
	if (remove_key(lu, p->sa_key, r, by) == 0) {
		cmd->n_abort_nexus = 0;
		cmd->abort_others = false;
		set_conflict(cmd);
		return;
	}
	if (lu->pr_type && type_all_registrants(lu->pr_type) && lu->pr_n_regs == 0)
		reservation_clear(lu);
	lu->pr_generation++;
	scsi_set_good(cmd);
}

/*
 * REGISTER AND MOVE (SPC-4 5.9.9): the holder registers another I_T nexus
 * (TransportID + relative target port) with the service action key and hands
 * it the reservation, same type; UNREG drops the holder's own registration.
 * lu->lock held; d is the whole parameter list (plen bytes).
 */
static void pr_register_move(struct hl_scsi_cmd *cmd, const struct pr_params *p,
                             struct scsi_pr_reg *r, const uint8_t *d, uint32_t plen)
{
	struct hl_lu *lu = cmd->lu;
	uint32_t tid_len = hl_get_be32(d + 20);
	bool unreg = d[17] & 0x02;
	uint16_t rel = hl_get_be16(d + 18);
	char iport[272];

	if (!lu->pr_type || type_all_registrants(lu->pr_type) || !is_holder(lu, r)) {
		set_conflict(cmd);
		return;
	}
	if (p->sa_key == 0) {
		scsi_sense_invalid_param(cmd, 8, -1);
		return;
	}
	/* iSCSI TransportID, initiator port format: "name,i,0xISID", NUL-terminated */
	const uint8_t *tid = d + 24;
	if (tid_len < 4 || (tid[0] & 0xcf) != 0x45) {
		scsi_sense_invalid_param(cmd, 24, -1);
		return;
	}
	uint32_t n = hl_get_be16(tid + 2);
	if (n + 4 > tid_len || n + 4 > plen - 24 || n == 0 || n >= sizeof(iport)) {
		scsi_sense_invalid_param(cmd, 26, -1);
		return;
	}
	memcpy(iport, tid + 4, n);
	iport[n] = '\0';
	if (!strstr(iport, ",i,0x") || rel == 0) {
		scsi_sense_invalid_param(cmd, rel == 0 ? 18 : 28, -1);
		return;
	}
	if (strcasecmp(iport, nexus_port_name(cmd)) == 0 && rel == nexus_rel_port(cmd)) {
		scsi_sense_invalid_param(cmd, 28, -1); /* moving to itself */
		return;
	}
	struct scsi_pr_reg *dst = NULL, *o;
	hl_list_for_each_entry(o, &lu->pr_regs, link)
	{
		if (strcasecmp(o->initiator_port, iport) == 0 &&
		    (o->all_tg_pt || o->rel_port == rel)) {
			dst = o;
			break;
		}
	}
	if (!dst) {
		if (lu->pr_n_regs >= SCSI_PR_MAX_REGS || !(dst = calloc(1, sizeof(*dst)))) {
			hl_scsi_set_sense(cmd, HL_SK_ILLEGAL_REQUEST, SCSI_ASC_NO_REG_RESOURCES);
			return;
		}
		hl_strlcpy(dst->initiator_port, iport, sizeof(dst->initiator_port));
		dst->rel_port = rel;
		hl_list_add_tail(&lu->pr_regs, &dst->link);
		lu->pr_n_regs++;
	}
	dst->key = p->sa_key;
	lu->pr_holder = dst;
	if (unreg) {
		hl_list_del(&r->link);
		lu->pr_n_regs--;
		free(r);
	}
	lu->pr_generation++;
	scsi_set_good(cmd);
}

enum scsi_exec_result spc_pr_out(struct hl_scsi_cmd *cmd)
{
	struct hl_lu *lu = cmd->lu;
	struct pr_params p;
	uint32_t plen = hl_get_be32(cmd->cdb + 5);
	const uint8_t *d = cmd->data;

	p.sa = cmd->cdb[1] & 0x1f;
	p.scope = cmd->cdb[2] >> 4;
	p.type = cmd->cdb[2] & 0x0f;
	if (p.sa > PRO_REGISTER_MOVE) {
		/* REPLACE LOST RESERVATION and later service actions are not supported */
		scsi_sense_invalid_cdb(cmd, 1, 4);
		return SCSI_DONE;
	}
	cmd->xfer_len = plen;
	if (p.sa == PRO_REGISTER_MOVE ? plen < PR_PARAM_LEN + 4 || plen > 24 + 4 + 256
	                              : plen != PR_PARAM_LEN) {
		hl_scsi_set_sense(cmd, HL_SK_ILLEGAL_REQUEST, SCSI_ASC_PARAM_LIST_LEN);
		return SCSI_DONE;
	}
	if (scsi_dout_len(cmd) < plen) {
		hl_scsi_set_sense(cmd, HL_SK_ILLEGAL_REQUEST, SCSI_ASC_INVALID_FIELD_IU);
		return SCSI_DONE;
	}
	p.key = hl_get_be64(d);
	p.sa_key = hl_get_be64(d + 8);
	p.all_tg_pt = p.sa != PRO_REGISTER_MOVE && (d[20] & 0x04);
	/* REGISTER AND MOVE has its own layout: APTPL in byte 17, no SPEC_I_PT */
	uint8_t flags = p.sa == PRO_REGISTER_MOVE ? (uint8_t)(d[17] & 0x01) : d[20];
	if (flags & 0x08) { /* SPEC_I_PT: not supported (SIP_C = 0) */
		scsi_sense_invalid_param(cmd, 20, 3);
		return SCSI_DONE;
	}
	/* APTPL counts for the register service actions only (SPC-4 6.16.3) */
	bool reg_sa =
	    p.sa == PRO_REGISTER || p.sa == PRO_REGISTER_IGNORE || p.sa == PRO_REGISTER_MOVE;
	bool aptpl = (flags & 0x01) && reg_sa;
	if (aptpl && !lu->state_dir) { /* nowhere to keep it: PTPL_C = 0 */
		scsi_sense_invalid_param(cmd, p.sa == PRO_REGISTER_MOVE ? 17 : 20, 0);
		return SCSI_DONE;
	}
	bool needs_type = p.sa == PRO_RESERVE || p.sa == PRO_RELEASE || p.sa == PRO_PREEMPT ||
	                  p.sa == PRO_PREEMPT_ABORT;
	if (needs_type && p.scope != 0) {
		scsi_sense_invalid_cdb(cmd, 2, 7);
		return SCSI_DONE;
	}
	if (needs_type && !type_valid(p.type)) {
		scsi_sense_invalid_cdb(cmd, 2, 3);
		return SCSI_DONE;
	}

	pthread_mutex_lock(&lu->lock);
	if (p.sa == PRO_REGISTER || p.sa == PRO_REGISTER_IGNORE) {
		pr_register(cmd, &p);
	} else {
		struct scsi_pr_reg *r = reg_find(lu, cmd);
		if (!r || r->key != p.key) {
			set_conflict(cmd);
		} else if (p.sa == PRO_RESERVE) {
			pr_reserve(cmd, &p, r);
		} else if (p.sa == PRO_RELEASE) {
			pr_release(cmd, &p, r);
		} else if (p.sa == PRO_CLEAR) {
			pr_clear(cmd);
		} else if (p.sa == PRO_REGISTER_MOVE) {
			pr_register_move(cmd, &p, r, d, plen);
		} else {
			/* PREEMPT AND ABORT: the same state change; pr_preempt lists the
			 * preempted nexuses, whose tasks the transport aborts before it answers */
			pr_preempt(cmd, &p, r);
		}
	}
	if (cmd->status == HL_SAM_GOOD) {
		bool was = lu->pr_aptpl;
		if (reg_sa)
			lu->pr_aptpl = aptpl;
		if ((lu->pr_aptpl || was) && pr_persist(lu) != 0 && lu->pr_aptpl)
			HL_WARN(SCSI_COMPONENT, "%s: PR state changed but not saved", lu->name);
	}
	pthread_mutex_unlock(&lu->lock);
	return SCSI_DONE;
}
