/*
 * origin.c - the explicit table of origin backends, URI scheme dispatch
 * (hl_origin_open/close), the checks every backend applies to an I/O, the
 * event path (resize, fencing) from a backend up through its wrappers, and
 * the warm restart proofs' common part (the "exclusive = yes" fallback).
 */
#include "config.h"

#include "hotlun/util.h"
#include "origin/origin_internal.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/*
 * Every backend that a URI can name. The throttle wrapper is not here: it is
 * stacked on an opened origin by hl_origin_throttle_wrap(), not named by URI.
 */
const struct hl_origin_ops *const hl_origin_backends[] = {
    &origin_file_ops,
    &origin_iscsi_ops,
#ifdef HAVE_RBD
    &origin_rbd_ops,
#endif
    NULL,
};

int origin_alloc(const struct hl_origin_ops *ops, const char *uri, struct hl_origin **out)
{
	struct hl_origin *o = calloc(1, sizeof(*o) + ops->priv_size);

	if (!o)
		return -ENOMEM;
	/* o->uri is what the layers above show and log: never the secret (the backend's open gets it) */
	size_t n = 2 * strlen(uri) + 16; /* "***" may be longer than a short secret */
	o->uri = malloc(n);
	if (o->uri)
		hl_uri_redact(uri, false, o->uri, n);
	if (!o->uri) {
		free(o);
		return -ENOMEM;
	}
	o->ops = ops;
	*out = o;
	return 0;
}

void origin_free(struct hl_origin *o)
{
	if (!o)
		return;
	free(o->uri);
	free(o);
}

int origin_io_check(const struct hl_origin *o, const struct hl_origin_io *io)
{
	uint64_t sum = 0;

	/* Only backends that forward it accept it, and they check it themselves. */
	if (io->op == HL_IO_COMPARE_AND_WRITE)
		return -EOPNOTSUPP;
	switch (io->op) {
	case HL_IO_READ:
	case HL_IO_WRITE:
		if (io->iovcnt < 0 || io->iovcnt > IOV_MAX || (io->iovcnt && !io->iov))
			return -EINVAL;
		for (int i = 0; i < io->iovcnt; i++)
			sum += io->iov[i].iov_len;
		if (sum != io->length)
			return -EINVAL;
		break;
	case HL_IO_FLUSH:
		break;
	case HL_IO_DISCARD:
	case HL_IO_WRITE_ZEROES:
		break;
	default:
		return -EINVAL;
	}
	if (!io->cb)
		return -EINVAL;
	if (io->op != HL_IO_READ && io->op != HL_IO_FLUSH && o->read_only)
		return -EROFS;
	if (io->op != HL_IO_FLUSH && (io->offset > o->size || io->length > o->size - io->offset))
		return -EINVAL;
	return 0;
}

/* RFC 3986 scheme: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) ":". Returns its length. */
static size_t scheme_len(const char *uri)
{
	size_t i = 0;

	if (!isalpha((unsigned char)uri[0]))
		return 0;
	while (isalnum((unsigned char)uri[i]) || uri[i] == '+' || uri[i] == '-' || uri[i] == '.')
		i++;
	return uri[i] == ':' ? i + 1 : 0;
}

int hl_origin_open(const char *uri, const struct hl_origin_opts *opts, struct hl_origin **out)
{
	static const struct hl_origin_opts defaults;
	const struct hl_origin_ops *ops = NULL;
	const char *target = uri;
	struct hl_origin *o;
	size_t slen;
	int rc;

	if (!uri || !*uri || !out)
		return -EINVAL;
	if (!opts)
		opts = &defaults;
	slen = scheme_len(uri);
	if (slen == 0) {
		ops = &origin_file_ops; /* a bare path */
	} else {
		for (const struct hl_origin_ops *const *b = hl_origin_backends; *b; b++) {
			if (strlen((*b)->scheme) == slen && !strncasecmp((*b)->scheme, uri, slen)) {
				ops = *b;
				break;
			}
		}
		if (!ops)
			return -EPROTONOSUPPORT;
		target = uri + slen;
	}
	if (!*target)
		return -EINVAL;

	rc = origin_alloc(ops, uri, &o);
	if (rc)
		return rc;
	o->read_only = opts->read_only;
	o->sole_writer = opts->sole_writer;
	rc = ops->open(o, target, opts);
	if (rc) {
		origin_free(o);
		return rc;
	}
	*out = o;
	return 0;
}

void hl_origin_close(struct hl_origin *o)
{
	if (!o)
		return;
	o->ops->close(o);
	origin_free(o);
}

/* ---- events ---- */

void hl_origin_listen(struct hl_origin *o, hl_origin_event_fn fn, void *arg)
{
	/* arg first: a notifier that sees the new fn must see its arg */
	__atomic_store_n(&o->listener_arg, arg, __ATOMIC_RELEASE);
	__atomic_store_n(&o->listener, fn, __ATOMIC_RELEASE);
}

static void tell(struct hl_origin *o, enum hl_origin_event ev, uint64_t old_size)
{
	hl_origin_event_fn fn = __atomic_load_n(&o->listener, __ATOMIC_ACQUIRE);

	if (fn)
		fn(__atomic_load_n(&o->listener_arg, __ATOMIC_ACQUIRE), o, ev, old_size);
}

void hl_origin_notify(struct hl_origin *o, enum hl_origin_event ev, uint64_t new_size)
{
	uint64_t old = __atomic_load_n(&o->size, __ATOMIC_ACQUIRE);

	if (ev == HL_ORIGIN_RESIZED) {
		if (new_size == old)
			return;
		/*
		 * Readers on the I/O path load o->size plainly: an aligned 64-bit
		 * store is not torn on the platforms hotlun builds for, and an I/O
		 * racing the change is checked against either size (the backend
		 * refuses what lies past its real end).
		 */
		__atomic_store_n(&o->size, new_size, __ATOMIC_RELEASE);
	}
	tell(o, ev, old);
}

static void forward(void *arg, struct hl_origin *inner, enum hl_origin_event ev, uint64_t old_size)
{
	struct hl_origin *outer = arg;

	(void)old_size;
	hl_origin_notify(outer, ev, __atomic_load_n(&inner->size, __ATOMIC_ACQUIRE));
}

void hl_origin_forward_events(struct hl_origin *inner, struct hl_origin *outer)
{
	hl_origin_listen(inner, forward, outer);
}

/* ---- warm restart proofs ---- */

#define EXCL_PREFIX "excl:"

int hl_origin_proof_take(struct hl_origin *o, const char *tag, bool final, char *proof,
                         size_t len)
{
	int rc = o->ops->proof_take ? o->ops->proof_take(o, tag, final, proof, len) : -EOPNOTSUPP;

	if (rc != -EOPNOTSUPP || !o->sole_writer)
		return rc;
	/* The admin's word: nobody else writes it. The size still has to match. */
	if ((size_t)snprintf(proof, len, EXCL_PREFIX "%" PRIu64, o->size) >= len)
		return -EOPNOTSUPP;
	return 0;
}

int hl_origin_proof_check(struct hl_origin *o, const char *tag, const char *proof,
                          hl_origin_changed_fn changed, void *arg, char *why, size_t whylen)
{
	snprintf(why, whylen, "%s", "");
	if (!proof || !*proof) {
		snprintf(why, whylen, "no proof recorded");
		return -ESTALE;
	}
	if (!strncmp(proof, EXCL_PREFIX, strlen(EXCL_PREFIX))) {
		char want[48];

		snprintf(want, sizeof(want), EXCL_PREFIX "%" PRIu64, o->size);
		if (!o->sole_writer) {
			snprintf(why, whylen, "exclusive = yes was removed");
			return -ESTALE;
		}
		if (strcmp(proof, want)) {
			snprintf(why, whylen, "origin size changed");
			return -ESTALE;
		}
		snprintf(why, whylen, "exclusive = yes");
		return 0;
	}
	if (!o->ops->proof_check) {
		snprintf(why, whylen, "%s origin cannot prove it unchanged", o->ops->name);
		return -ESTALE;
	}
	return o->ops->proof_check(o, tag, proof, changed, arg, why, whylen) ? -ESTALE : 0;
}

void hl_origin_proof_release(struct hl_origin *o, const char *tag, const char *proof)
{
	if (o->ops->proof_release)
		o->ops->proof_release(o, tag, proof);
}

int hl_origin_identity(struct hl_origin *o, char *buf, size_t len)
{
	return o->ops->identity ? o->ops->identity(o, buf, len) : -EOPNOTSUPP;
}
