/*
 * iscsi_ua.c - the iscsi origin and the SAN's unit attentions.
 *
 * A UNIT ATTENTION tells an initiator that something about the LUN changed
 * behind its back; the command that met it was not executed, and task_cb
 * repeats it (-EAGAIN). Some also call for action here, taken once per
 * origin on a service thread of its own ("iscsi-ua"): origin events must
 * not leave from a reactor that serves connections (origin.h). That
 * thread keeps a nexus of its own, the poll nexus (ISID qualifier
 * ISC_UA_QUAL, logged in at open), sends TEST UNIT READY on it every
 * ISC_UA_POLL_MS and reads the capacity there: a data session hears a unit
 * attention only with its next command, and a gateway whose reads all hit
 * the cache sends none for as long as they do. What each one does (SPC-4 /
 * SAM-5):
 *
 *   29/xx POWER ON, RESET, BUS DEVICE RESET, I_T NEXUS LOSS: the medium
 *         keeps its data; a reset may clear other pending unit attentions
 *         (SAM-5), a capacity change among them, so the capacity is read
 *         again: a new size is a resize and a drop (what changed is not
 *         bounded), the same size keeps the cache.
 *   2A/09 CAPACITY DATA HAS CHANGED: the capacity is read again (READ
 *         CAPACITY 16, else 10) and a new size reported (HL_ORIGIN_RESIZED:
 *         the LU shows it and queues 2A/09 to its own initiators). The
 *         cache drops the disk (HL_ORIGIN_CHANGED) whatever the answer: a
 *         nexus holds one capacity unit attention however many changes
 *         came, so a shrink and a grow (back, or further) look like one
 *         change, or none, and the blocks between the lowest size and the
 *         new one may be zeroes now.
 *   2A/01 MODE PARAMETERS CHANGED: logged and repeated (the write-protect
 *         bit read at open stays; the SAN refuses writes itself).
 *   2A/03 RESERVATIONS PREEMPTED, 2A/04 RESERVATIONS RELEASED, 2A/05
 *         REGISTRATIONS PREEMPTED: for a gateway (hl_origin_opts.gateway) the
 *         registrants-only reservation that kept other initiators from
 *         writing may be gone: the cache drops the disk (another initiator
 *         may have written), and the warm restart proof, built on
 *         PRgeneration, which every one of these moved, proves nothing
 *         since; the ownership thread's next renew says whether we are
 *         fenced. Without gateways nobody here relies on a reservation:
 *         repeated.
 *   3F/03 INQUIRY DATA HAS CHANGED, 3F/0E REPORTED LUNS DATA HAS CHANGED:
 *         the LUN number may name another logical unit now: the cache drops
 *         the disk and the capacity is read again. (The VPD 83h designator
 *         read at open, the data_id op, is not read again here: a same
 *         designator could keep the cache, which only costs a refill now.)
 *   anything else (3F/01 microcode changed, 2A/06 ALUA state, ...): repeated.
 *
 * A unit attention comes once per I_T nexus: the poll nexus and each data
 * session (one per reactor) meet their own copy of it:
 * every action is safe to take again (a resize to the current size reports
 * nothing, a second drop drops what was filled since), and copies that come
 * while a check is queued ride on it (ua_pending). A read that was in
 * flight on another session when the cache dropped the disk completes into
 * a fill the engine no longer installs (the drop moves the disk's
 * generation, engine_origin_event). A session that reconnects asks for the
 * reset check (ISC_UA_RESET): libiscsi's login clears what the new nexus
 * is told (its TEST UNIT READY takes the unit attentions), a capacity
 * change among them.
 */
#include "config.h"

#include "hotlun/event.h"
#include "hotlun/log.h"
#include "hotlun/util.h"
#include "origin/origin_iscsi.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define ISC_UA_QUAL      ISC_QUAL_UA /* the poll nexus: sessions use 1..N, ownership 0 */
#define ISC_UA_TIMEOUT_S 5
#define ISC_UA_POLL_MS   1000 /* TEST UNIT READY on the poll nexus */
#define ISC_UA_TRIES     16   /* READ CAPACITY behind the unit attentions queued before it */

unsigned origin_iscsi_ua_class(int asc, int ascq)
{
	switch (asc) {
	case 0x29: /* power on, reset, I_T nexus loss */
		return ISC_UA_RESET;
	case 0x2a:
		if (ascq == 0x09)
			return ISC_UA_CAPACITY;
		if (ascq == 0x03 || ascq == 0x04 || ascq == 0x05)
			return ISC_UA_PR;
		return 0; /* 2A/01 mode parameters, 2A/06 ALUA, ... */
	case 0x3f:
		if (ascq == 0x03 || ascq == 0x0e)
			return ISC_UA_IDENTITY;
		return 0; /* microcode changed, ... */
	default:
		return 0;
	}
}

/*
 * The poll nexus (service thread): logged in on first use and again after
 * a failure. A new login's TEST UNIT READY takes what the SAN had queued
 * for the nexus, so a login after the first asks for the reset check.
 */
static void ua_watch(struct isc_origin *io);

static struct iscsi_context *ua_ctx_get(struct hl_origin *o)
{
	struct isc_origin *io = io_of(o);
	struct iscsi_context *ctx;

	if (io->ua_ctx)
		return io->ua_ctx;
	ctx = origin_iscsi_context_make(io, ISC_UA_QUAL);
	if (!ctx)
		return NULL;
	iscsi_set_timeout(ctx, ISC_UA_TIMEOUT_S);
	if (iscsi_full_connect_sync(ctx, io->portal, (int)io->url.lun) != 0) {
		HL_DEBUG(ISC_COMPONENT, "%s: poll session: cannot log in: %s", o->uri,
		         iscsi_get_error(ctx));
		iscsi_destroy_context(ctx);
		return NULL;
	}
	if (io->ua_ctx_was)
		atomic_fetch_or(&io->ua_pending, ISC_UA_RESET);
	io->ua_ctx = ctx;
	ua_watch(io);
	return ctx;
}

static void ua_ctx_drop(struct isc_origin *io)
{
	hl_event_del(&io->ua_ev); /* before the context closes its socket */
	if (io->ua_ctx)
		iscsi_destroy_context(io->ua_ctx);
	io->ua_ctx = NULL;
}

/* The poll nexus's socket as libiscsi wants it watched (svc). */
static void ua_events_update(struct isc_origin *io)
{
	uint32_t want = EPOLLIN;

	if (iscsi_which_events(io->ua_ctx) & POLLOUT)
		want |= EPOLLOUT;
	if (want != io->ua_ev.events && hl_event_mod(&io->ua_ev, want))
		ua_ctx_drop(io); /* logged in again at the next poll */
}

/*
 * The poll nexus's socket between polls (svc). What the SAN sends unasked is
 * answered at once: a SAN stopping asks every session to log out and waits
 * for them (hotlund up to 5 s); answered only at the next poll, our poll
 * nexus alone kept a restarting SAN away up to a second longer, and the
 * data sessions' I/O waited that much more.
 */
static void ua_event(struct hl_event *ev, uint32_t revents)
{
	struct isc_origin *io = ev->arg;

	if (!io->ua_ctx ||
	    iscsi_service(io->ua_ctx, (int)(revents & (EPOLLIN | EPOLLOUT | EPOLLERR | EPOLLHUP))) <
	            0 ||
	    iscsi_get_fd(io->ua_ctx) != ev->fd) {
		ua_ctx_drop(io); /* gone, or logged out: logged in again at the next poll */
		return;
	}
	ua_events_update(io);
}

/* Watch the poll nexus from svc; at open (no svc yet), ua_tick_start does. */
static void ua_watch(struct isc_origin *io)
{
	int fd;

	if (!io->svc || !io->ua_ctx || io->ua_ev.reactor || hl_reactor_current() != io->svc)
		return;
	fd = iscsi_get_fd(io->ua_ctx);
	hl_event_init(&io->ua_ev, fd, ua_event, io);
	if (fd < 0 || hl_event_add(io->svc, &io->ua_ev, EPOLLIN)) {
		ua_ctx_drop(io);
		return;
	}
	ua_events_update(io);
}

/* What a unit attention met on the poll nexus asks for (0: none, or not one). */
static unsigned ua_of_task(const struct isc_origin *io, const struct scsi_task *t)
{
	unsigned what;

	if (!t || t->status != SCSI_STATUS_CHECK_CONDITION ||
	    t->sense.key != SCSI_SENSE_UNIT_ATTENTION)
		return 0;
	what = origin_iscsi_ua_class(t->sense.ascq >> 8, t->sense.ascq & 0xff);
	return what == ISC_UA_PR && !io->pr_key ? 0 : what;
}

/*
 * READ CAPACITY on the poll nexus (service thread). Unit attentions met
 * there are added to *what. @return 0 or -errno.
 */
static int ua_read_capacity(struct hl_origin *o, uint64_t *nblocks, uint32_t *bs, unsigned *what)
{
	struct isc_origin *io = io_of(o);
	struct iscsi_context *ctx = ua_ctx_get(o);
	struct scsi_task *t;
	int rc = -EIO;

	if (!ctx)
		return -ENOTCONN;
	for (int tries = 0; tries < ISC_UA_TRIES && rc; tries++) {
		t = iscsi_readcapacity16_sync(ctx, (int)io->url.lun);
		if (t && t->status == SCSI_STATUS_GOOD && t->datain.size >= 12) {
			*nblocks = hl_get_be64(t->datain.data) + 1;
			*bs = hl_get_be32(t->datain.data + 8);
			rc = 0;
		} else if (t && t->status == SCSI_STATUS_CHECK_CONDITION &&
		           t->sense.key == SCSI_SENSE_UNIT_ATTENTION) {
			*what |= ua_of_task(io, t);
		} else if (t && t->status == SCSI_STATUS_CHECK_CONDITION) {
			scsi_free_scsi_task(t);
			t = iscsi_readcapacity10_sync(ctx, (int)io->url.lun, 0, 0);
			if (t && t->status == SCSI_STATUS_GOOD && t->datain.size >= 8) {
				*nblocks = (uint64_t)hl_get_be32(t->datain.data) + 1;
				*bs = hl_get_be32(t->datain.data + 4);
				rc = 0;
			} else {
				*what |= ua_of_task(io, t);
			}
		} else {
			tries = ISC_UA_TRIES; /* the session is gone */
		}
		scsi_free_scsi_task(t);
	}
	if (rc) {
		HL_WARN(ISC_COMPONENT, "%s: capacity check: READ CAPACITY failed: %s", o->uri,
		        iscsi_get_error(ctx));
		ua_ctx_drop(io);
	}
	return rc;
}

/* "capacity, reset" for the log. */
static const char *ua_names(unsigned what, char *buf, size_t len)
{
	static const struct {
		unsigned bit;
		const char *name;
	} names[] = {{ISC_UA_CAPACITY, "capacity"},
	             {ISC_UA_PR, "reservations"},
	             {ISC_UA_IDENTITY, "inquiry/LUNs"},
	             {ISC_UA_RESET, "reset"}};
	size_t n = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if ((what & names[i].bit) && n < len)
			n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? ", " : "",
			                      names[i].name);
	}
	return buf;
}

/* On io->svc: act on the unit attentions met since the last check. */
static void ua_check(void *arg)
{
	struct hl_origin *o = arg;
	struct isc_origin *io = io_of(o);
	unsigned what = atomic_exchange(&io->ua_pending, 0); /* later ones queue another check */
	uint64_t old = __atomic_load_n(&o->size, __ATOMIC_ACQUIRE), nblocks = 0, size = old;
	uint32_t bs = 0;
	char names[64];
	bool drop;
	int rc;

	if (!what || atomic_load(&io->closing))
		return; /* the poll took them first */
	rc = ua_read_capacity(o, &nblocks, &bs, &what);
	drop = what & (ISC_UA_CAPACITY | ISC_UA_PR | ISC_UA_IDENTITY);
	if (rc == 0 && (bs != io->bs || !nblocks || nblocks > UINT64_MAX / bs)) {
		HL_ERR(ISC_COMPONENT,
		       "%s: the SAN now reports %llu blocks of %u bytes (was %u-byte blocks): "
		       "not followed; the cache drops the disk",
		       o->uri, (unsigned long long)nblocks, bs, io->bs);
		drop = true;
	} else if (rc == 0) {
		size = nblocks * bs;
	} else {
		drop = true; /* the size is unknown: nothing cached can be bounded */
	}
	if (size != old) {
		HL_NOTICE(ISC_COMPONENT, "%s: the SAN LUN was resized: %llu -> %llu bytes", o->uri,
		          (unsigned long long)old, (unsigned long long)size);
		hl_origin_notify(o, HL_ORIGIN_RESIZED, size);
		drop = true;
	}
	if (drop && !o->immutable) {
		HL_NOTICE(ISC_COMPONENT,
		          "%s: unit attention (%s): the LUN may have changed anywhere; the cache "
		          "drops the disk",
		          o->uri, ua_names(what, names, sizeof(names)));
		hl_origin_notify(o, HL_ORIGIN_CHANGED, size);
	}
}

void origin_iscsi_ua_note(struct hl_origin *o, unsigned what)
{
	struct isc_origin *io = io_of(o);
	int rc = 0;

	if (!what)
		return;
	/*
	 * Under io->lock, which ua_stop takes once closing is set before it
	 * stops the service thread: a session's reactor that saw closing
	 * unset has queued its call by then, and none queues one on a
	 * reactor being destroyed (its wake-up write went to a closed fd).
	 */
	pthread_mutex_lock(&io->lock);
	/* with ua_pending already set, a check is queued: it takes these too */
	if (io->svc && !atomic_load(&io->closing) && !atomic_fetch_or(&io->ua_pending, what))
		rc = hl_reactor_call(io->svc, ua_check, o);
	pthread_mutex_unlock(&io->lock);
	if (rc < 0) {
		atomic_store(&io->ua_pending, 0); /* the next unit attention tries again */
		HL_ERR_RL(ISC_COMPONENT, "%s: out of memory: a unit attention is not acted on",
		          o->uri);
	}
}

void origin_iscsi_ua_seen(struct isc_session *s, int asc, int ascq)
{
	struct isc_origin *io = io_of(s->o);
	unsigned what = origin_iscsi_ua_class(asc, ascq);

	if (what == ISC_UA_PR && !io->pr_key)
		what = 0; /* no reservation of ours to lose */
	if (what)
		HL_INFO(ISC_COMPONENT, "iscsi://%s/%s/%u: session %u: unit attention %02x/%02x",
		        io->portal, io->url.target, io->url.lun, s->qual, asc, ascq);
	else
		HL_DEBUG(ISC_COMPONENT,
		         "iscsi://%s/%s/%u: session %u: unit attention %02x/%02x: repeated",
		         io->portal, io->url.target, io->url.lun, s->qual, asc, ascq);
	origin_iscsi_ua_note(s->o, what);
}

/*
 * Every ISC_UA_POLL_MS on the service thread: TEST UNIT READY on the poll
 * nexus. The data sessions hear a unit attention only with their next
 * command, and a gateway whose reads all hit the cache sends none: the
 * poll nexus gets its own copy of each, whatever the traffic.
 */
static void ua_tick(struct hl_timer *tm)
{
	struct hl_origin *o = tm->arg;
	struct isc_origin *io = io_of(o);
	struct iscsi_context *ctx;
	struct scsi_task *t;

	if (atomic_load(&io->closing))
		return;
	ctx = ua_ctx_get(o);
	if (ctx) {
		t = iscsi_testunitready_sync(ctx, (int)io->url.lun);
		if (!t ||
		    (t->status != SCSI_STATUS_GOOD && t->status != SCSI_STATUS_CHECK_CONDITION &&
		     t->status != SCSI_STATUS_BUSY && t->status != SCSI_STATUS_TASK_SET_FULL))
			ua_ctx_drop(io); /* logged in again next time (a reset check) */
		else
			atomic_fetch_or(&io->ua_pending, ua_of_task(io, t));
		scsi_free_scsi_task(t);
	}
	if (atomic_load(&io->ua_pending))
		ua_check(o);
	hl_timer_start(io->svc, &io->ua_tick, ISC_UA_POLL_MS);
}

static void ua_tick_start(void *arg)
{
	struct hl_origin *o = arg;
	struct isc_origin *io = io_of(o);

	ua_watch(io);
	hl_timer_start(io->svc, &io->ua_tick, ISC_UA_POLL_MS);
}

int origin_iscsi_ua_start(struct hl_origin *o)
{
	struct isc_origin *io = io_of(o);
	uint64_t nblocks = 0;
	uint32_t bs = 0;
	unsigned what = 0;
	int rc;

	/*
	 * The poll nexus logs in now, from open (no service thread yet): a
	 * change between the capacity open() read and this login would reach
	 * no nexus of ours. One more look closes that window.
	 */
	if (!ua_ctx_get(o))
		HL_WARN(ISC_COMPONENT, "%s: poll session: cannot log in (tried again each second)",
		        o->uri);
	else if (ua_read_capacity(o, &nblocks, &bs, &what) == 0 && bs == io->bs &&
	         nblocks != io->nblocks && nblocks && nblocks <= UINT64_MAX / bs) {
		HL_NOTICE(ISC_COMPONENT, "%s: the SAN LUN was resized while opening: %llu bytes",
		          o->uri, (unsigned long long)(nblocks * bs));
		io->nblocks = nblocks;
		o->size = nblocks * bs; /* nobody listens yet */
	}
	io->ua_ctx_was = true; /* any later login is a reset check */
	rc = hl_reactor_create(&io->svc, "iscsi-ua");
	if (rc) {
		ua_ctx_drop(io);
		return rc;
	}
	hl_timer_init(&io->ua_tick, ua_tick, o);
	rc = hl_reactor_start(io->svc);
	if (rc == 0)
		rc = hl_reactor_call(io->svc, ua_tick_start, o);
	if (rc) {
		hl_reactor_stop(io->svc);
		hl_reactor_join(io->svc);
		hl_reactor_destroy(io->svc);
		io->svc = NULL;
		ua_ctx_drop(io);
	}
	return rc;
}

void origin_iscsi_ua_stop(struct hl_origin *o)
{
	struct isc_origin *io = io_of(o);
	struct hl_reactor *svc;

	pthread_mutex_lock(&io->lock); /* origin_iscsi_ua_note: no call is being queued now */
	svc = io->svc;
	pthread_mutex_unlock(&io->lock);
	if (!svc)
		return;
	hl_reactor_stop(svc); /* a check under way ends first; queued ones see closing */
	hl_reactor_join(svc);
	hl_timer_stop(&io->ua_tick); /* joined: its timer heap is ours to touch */
	hl_timer_stop(&io->sweep_t);
	ua_ctx_drop(io);
	pthread_mutex_lock(&io->lock);
	io->svc = NULL;
	pthread_mutex_unlock(&io->lock);
	hl_reactor_destroy(svc);
}
