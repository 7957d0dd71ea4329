/*
 * pr.c - reservations on an LU: RESERVE/RELEASE(6/10) (SPC-2, held by one
 * I_T nexus) and persistent reservations (SPC-4 5.12, PERSISTENT RESERVE
 * IN/OUT): the commands, the conflict check every command passes, and where
 * the state lives. The rules themselves are pr_state.c's.
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
 * With several gateways on a cluster that keeps a shared record, the LU's
 * state is a copy of that record instead, and the commands that change it
 * run as transactions on the record (pr_shared.c); the APTPL file is not
 * used then (the record outlives every gateway).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "hotlun/log.h"
#include "scsi/scsi_internal.h"

static uint64_t nexus_id(const struct hl_scsi_cmd *cmd)
{
	return cmd->nexus ? cmd->nexus->id : 0;
}

struct scsi_pr_who scsi_pr_who_of(const struct hl_scsi_cmd *cmd)
{
	struct scsi_pr_who w = {"", 0};

	if (cmd->nexus) {
		w.port = cmd->nexus->initiator_port;
		w.rel = cmd->nexus->port ? cmd->nexus->port->rel_port_id : 0;
	}
	return w;
}

static void set_conflict(struct hl_scsi_cmd *cmd)
{
	cmd->status = HL_SAM_RESERVATION_CONFLICT;
	cmd->sense_len = 0;
}

void scsi_pr_verdict_set(struct hl_scsi_cmd *cmd, const struct scsi_pr_verdict *v)
{
	if (v->status == HL_SAM_GOOD)
		scsi_set_good(cmd);
	else if (v->status == HL_SAM_RESERVATION_CONFLICT)
		set_conflict(cmd);
	else if (v->field && v->in_cdb)
		scsi_sense_invalid_cdb(cmd, v->byte, v->bit);
	else if (v->field)
		scsi_sense_invalid_param(cmd, v->byte, v->bit);
	else
		hl_scsi_set_sense(cmd, HL_SK_ILLEGAL_REQUEST, v->asc, v->ascq);
}

void scsi_pr_fx_local(struct hl_lu *lu, const struct scsi_pr_change *c, uint64_t *ids,
                      unsigned *n_ids, unsigned max, bool *others)
{
	struct scsi_lu_nexus *n;

	for (unsigned i = 0; i < c->n; i++) {
		const struct scsi_pr_fx *f = &c->fx[i];
		hl_list_for_each_entry(n, &lu->nexuses, link)
		{
			/* the issuer hears nothing of its own command */
			if (n->rel_port == c->by_rel &&
			    strcasecmp(n->initiator_port, c->by_port) == 0)
				continue;
			if (!scsi_pr_reg_matches(&f->to, n->initiator_port, n->rel_port))
				continue;
			if (f->kind == SCSI_PR_FX_UA) {
				scsi_ua_push(n, f->asc, f->ascq);
				continue;
			}
			bool dup = false;
			for (unsigned k = 0; k < *n_ids; k++)
				dup |= ids[k] == n->nexus_id;
			if (dup)
				continue;
			if (*n_ids == max)
				*others = true;
			else
				ids[(*n_ids)++] = n->nexus_id;
		}
	}
}

/* ---- APTPL: the PR state in state_dir ---- */

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
	char *text = NULL;
	size_t len = 0;
	int rc;
	FILE *f;

	if (!lu->state_dir)
		return 0;
	pr_path(lu, path, sizeof(path), "");
	if (!lu->pr.aptpl) {
		if (unlink(path) == 0)
			fsync_dir(lu->state_dir);
		else if (errno != ENOENT)
			HL_WARN(SCSI_COMPONENT, "%s: cannot remove %s: %s", lu->name, path,
			        strerror(errno));
		return 0;
	}
	rc = scsi_pr_format(&lu->pr, NULL, 0, &text, &len);
	if (rc) {
		errno = -rc;
		goto fail;
	}
	pr_path(lu, tmp, sizeof(tmp), ".tmp");
	f = fopen(tmp, "we");
	if (!f)
		goto fail;
	if (fwrite(text, 1, len, f) != len || fflush(f) != 0 || fsync(fileno(f)) != 0) {
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
	free(text);
	fsync_dir(lu->state_dir);
	return 0;
fail:
	rc = errno ? -errno : -EIO;
	free(text);
	HL_ERR(SCSI_COMPONENT, "%s: cannot save persistent reservations to %s: %s", lu->name, path,
	       strerror(-rc));
	return rc;
}

/* The whole of a small file, NUL-terminated (caller frees). @return 0 or -errno. */
static int read_small(const char *path, size_t max, char **out, size_t *len)
{
	FILE *f = fopen(path, "re");
	size_t cap = 4096, n = 0;
	char *buf;

	if (!f)
		return -errno;
	buf = malloc(cap + 1);
	while (buf) {
		size_t got = fread(buf + n, 1, cap - n, f);
		n += got;
		if (n < cap || cap >= max)
			break;
		char *b = realloc(buf, 2 * cap + 1);
		if (!b) {
			free(buf);
			buf = NULL;
			break;
		}
		buf = b;
		cap *= 2;
	}
	bool err = ferror(f);
	fclose(f);
	if (!buf)
		return -ENOMEM;
	if (err) {
		free(buf);
		return -EIO;
	}
	buf[n] = '\0';
	*out = buf;
	*len = n;
	return 0;
}

int scsi_pr_load(struct hl_lu *lu)
{
	char path[4096], *text = NULL;
	size_t len = 0;
	int rc;

	if (!lu->state_dir)
		return 0;
	pr_path(lu, path, sizeof(path), "");
	rc = read_small(path, 1u << 20, &text, &len);
	if (rc) {
		if (rc != -ENOENT)
			HL_WARN(SCSI_COMPONENT, "%s: cannot read %s: %s", lu->name, path,
			        strerror(-rc));
		return rc == -ENOMEM ? rc : 0;
	}
	rc = scsi_pr_parse(text, len, &lu->pr, NULL, NULL);
	free(text);
	if (rc == -ENOMEM)
		return rc;
	if (rc || len == 0) {
		scsi_pr_state_fini(&lu->pr);
		HL_WARN(SCSI_COMPONENT,
		        "%s: %s is damaged; starting without persistent reservations", lu->name,
		        path);
		return 0;
	}
	lu->pr.aptpl = true;
	HL_NOTICE(SCSI_COMPONENT, "%s: %u persistent reservation registration(s) restored%s",
	          lu->name, lu->pr.n_regs, lu->pr.type ? " with a reservation" : "");
	return 0;
}

/* ---- conflicts ---- */

/* Does who hold the shared SPC-2 reservation? lu->lock held. */
static bool rsv2_held_by(const struct hl_lu *lu, const struct scsi_pr_who *who)
{
	return lu->pr.rsv2 && lu->pr.rsv2_rel == who->rel &&
	       strcasecmp(lu->pr.rsv2_port, who->port) == 0;
}

bool scsi_rsv_conflict(struct hl_scsi_cmd *cmd, const struct scsi_cmd_desc *d)
{
	struct hl_lu *lu = cmd->lu;
	struct scsi_pr_who who = scsi_pr_who_of(cmd);
	bool conflict, stale = false;

	pthread_mutex_lock(&lu->lock);
	if (lu->pr_store) {
		/*
		 * A copy the store does not vouch for may miss a reservation made
		 * through another gateway: what it would decide cannot be trusted
		 * (SPC-2 reservations, which INFO commands also honour, are not
		 * waited for: a legacy that clusters fence with SCSI-3 instead).
		 */
		stale = !(d->flags & SCSI_F_PR_ALLOW) && !scsi_pr_shared_current(lu);
		if (lu->pr.rsv2 && !rsv2_held_by(lu, &who))
			conflict = !(d->flags & SCSI_F_RSV2_ALLOW);
		else
			conflict = scsi_pr_conflicts(&lu->pr, &who, d->flags);
	} else if (lu->rsv2_holder && lu->rsv2_holder != nexus_id(cmd)) {
		conflict = !(d->flags & SCSI_F_RSV2_ALLOW);
	} else {
		conflict = scsi_pr_conflicts(&lu->pr, &who, d->flags);
	}
	pthread_mutex_unlock(&lu->lock);
	if (stale) {
		HL_DEBUG(SCSI_COMPONENT, "%s: shared reservations not current: BUSY", lu->name);
		cmd->status = HL_SAM_BUSY;
		cmd->sense_len = 0;
		return true;
	}
	if (conflict)
		set_conflict(cmd);
	return conflict;
}

void scsi_rsv_reset(struct hl_lu *lu)
{
	bool shared_held;

	pthread_mutex_lock(&lu->lock);
	lu->rsv2_holder = 0;
	shared_held = lu->pr_store && lu->pr.rsv2;
	/*
	 * The record changes in the background; this gateway's copy at once,
	 * so that its next command (the reset's initiator often sends one at
	 * once) finds it ended. Its later changes run after this one (one
	 * thread per LU), so none of them finds it held either.
	 */
	lu->pr.rsv2 = false;
	pthread_mutex_unlock(&lu->lock);
	if (shared_held)
		scsi_pr_shared_rsv2_end(lu, NULL);
}

void scsi_rsv_nexus_gone(struct hl_lu *lu, const struct hl_scsi_nexus *nexus)
{
	struct scsi_pr_who who = {nexus->initiator_port,
	                          nexus->port ? nexus->port->rel_port_id : 0};
	bool shared_held;

	pthread_mutex_lock(&lu->lock);
	if (lu->rsv2_holder == nexus->id)
		lu->rsv2_holder = 0;
	shared_held = lu->pr_store && rsv2_held_by(lu, &who);
	if (shared_held)
		lu->pr.rsv2 = false; /* as at a reset: the copy at once, the record soon */
	pthread_mutex_unlock(&lu->lock);
	if (shared_held)
		scsi_pr_shared_rsv2_end(lu, &who);
}

void scsi_rsv_fini(struct hl_lu *lu)
{
	scsi_pr_state_fini(&lu->pr);
}

/* ---- RESERVE / RELEASE (6 and 10) ---- */

enum scsi_exec_result spc_reserve(struct hl_scsi_cmd *cmd)
{
	struct hl_lu *lu = cmd->lu;
	uint64_t id = nexus_id(cmd);

	if (lu->pr_store)
		return scsi_pr_shared_rsv2(cmd, true);
	pthread_mutex_lock(&lu->lock);
	if (lu->pr.n_regs || (lu->rsv2_holder && lu->rsv2_holder != id)) {
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

	if (lu->pr_store)
		return scsi_pr_shared_rsv2(cmd, false);
	/* releasing what another nexus holds, or nothing, is GOOD and changes nothing */
	pthread_mutex_lock(&lu->lock);
	if (lu->rsv2_holder == nexus_id(cmd))
		lu->rsv2_holder = 0;
	pthread_mutex_unlock(&lu->lock);
	scsi_set_good(cmd);
	return SCSI_DONE;
}

/* ---- PERSISTENT RESERVE IN / OUT ---- */

static struct scsi_pr_caps lu_caps(const struct hl_lu *lu)
{
	/* APTPL is kept in state_dir, or by the shared store whatever it says */
	struct scsi_pr_caps caps = {.ptpl_c = lu->state_dir != NULL || lu->pr_store};

	return caps;
}

enum scsi_exec_result spc_pr_in(struct hl_scsi_cmd *cmd)
{
	struct hl_lu *lu = cmd->lu;
	struct scsi_pr_caps caps = lu_caps(lu);
	uint32_t alloc = hl_get_be16(cmd->cdb + 7);
	uint8_t *buf = scsi_bounce_get(cmd, scsi_pr_in_max(), false);
	int len;

	if (!buf)
		return SCSI_DONE; /* BUSY */
	pthread_mutex_lock(&lu->lock);
	if (lu->pr_store && !scsi_pr_shared_current(lu)) {
		/* the copy may be behind another gateway's change: ask the record itself */
		pthread_mutex_unlock(&lu->lock);
		scsi_bounce_put(buf);
		return scsi_pr_shared_in(cmd);
	}
	len = scsi_pr_in_build(&lu->pr, cmd->cdb[1] & 0x1f, &caps, buf);
	pthread_mutex_unlock(&lu->lock);
	if (len < 0)
		scsi_sense_invalid_cdb(cmd, 1, 4);
	else
		scsi_data_in(cmd, buf, (uint32_t)len, alloc);
	scsi_bounce_put(buf);
	return SCSI_DONE;
}

enum scsi_exec_result spc_pr_out(struct hl_scsi_cmd *cmd)
{
	struct hl_lu *lu = cmd->lu;
	struct scsi_pr_caps caps = lu_caps(lu);
	struct scsi_pr_who who = scsi_pr_who_of(cmd);
	struct scsi_pr_verdict v;
	struct scsi_pr_change fx;
	struct scsi_pr_req req;
	bool changed;

	if ((cmd->cdb[1] & 0x1f) <= SCSI_PRO_REGISTER_MOVE)
		cmd->xfer_len = hl_get_be32(cmd->cdb + 5);
	if (!scsi_pr_out_parse(cmd->cdb, cmd->data, scsi_dout_len(cmd), &caps, &req, &v)) {
		scsi_pr_verdict_set(cmd, &v);
		return SCSI_DONE;
	}
	if (lu->pr_store)
		return scsi_pr_shared_out(cmd, &req);
	scsi_pr_change_init(&fx, &who);
	pthread_mutex_lock(&lu->lock);
	bool was_aptpl = lu->pr.aptpl;
	scsi_pr_apply(&lu->pr, &req, &who, &fx, &v, &changed);
	if (v.status == HL_SAM_GOOD) {
		/*
		 * PREEMPT AND ABORT lists the preempted nexuses here, whose tasks the
		 * transport aborts before it answers (hl_scsi_cmd.abort_nexus)
		 */
		unsigned n = 0;
		scsi_pr_fx_local(lu, &fx, cmd->abort_nexus, &n, HL_SCSI_ABORT_NEXUS_MAX,
		                 &cmd->abort_others);
		cmd->n_abort_nexus = (uint8_t)n;
		if (changed && (lu->pr.aptpl || was_aptpl) && pr_persist(lu) != 0 && lu->pr.aptpl)
			HL_WARN(SCSI_COMPONENT, "%s: PR state changed but not saved", lu->name);
	}
	pthread_mutex_unlock(&lu->lock);
	scsi_pr_change_fini(&fx);
	scsi_pr_verdict_set(cmd, &v);
	return SCSI_DONE;
}
