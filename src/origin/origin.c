/*
 * origin.c - the explicit table of origin backends, URI scheme dispatch
 * (hl_origin_open/close), stacking (hl_origin_wrap), the checks every
 * backend applies to an I/O, the event path (resize, fencing) from a
 * backend up through its wrappers, and the warm restart proofs' common part
 * (passed down a stack to the first layer that has them; the
 * "exclusive = yes" fallback).
 */
#include "config.h"

#include "hotlun/util.h"
#include "origin/origin_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/*
 * Every backend that a URI can name. Wrappers (throttle, counters, the
 * cache) are not here: hl_origin_wrap() stacks them on an opened origin.
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
	/* o->uri is what the layers above show and log: never the secret (open gets it) */
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
	slen = origin_scheme_len(uri);
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

/* No listener on o any more, and no call of the one it had still running. */
static void unlisten(struct hl_origin *o)
{
	__atomic_store_n(&o->listener, NULL, __ATOMIC_SEQ_CST);
	/* (tell counts itself before it loads the listener: it sees NULL, or is seen here) */
	while (__atomic_load_n(&o->telling, __ATOMIC_SEQ_CST))
		usleep(1000);
}

void hl_origin_close(struct hl_origin *o)
{
	/*
	 * Events first: a backend's service thread may be inside the
	 * listeners (the cache's drop of a fenced disk, in chunks that let its
	 * lock go, then the LU's) while the layers above it are freed here.
	 */
	for (struct hl_origin *x = o; x; x = x->inner)
		unlisten(x);
	/* before any close: the callbacks of what an origin still holds pass the wrappers */
	for (struct hl_origin *x = o; x; x = x->inner) {
		if (x->ops->shut)
			x->ops->shut(x);
	}
	while (o) {
		struct hl_origin *inner;

		o->ops->close(o);
		inner = o->inner; /* read after: a close may keep it (NULL) */
		origin_free(o);
		o = inner; /* a wrapper owns the origin it wraps */
	}
}

int hl_origin_wrap(struct hl_origin *inner, const struct hl_origin_ops *ops, const char *label,
                   struct hl_origin **out)
{
	struct hl_origin *o;

	if (!inner || !ops || !ops->submit || !ops->close || !out)
		return -EINVAL;
	o = calloc(1, sizeof(*o) + ops->priv_size);
	if (!o)
		return -ENOMEM;
	/* inner's uri is already what logs may show (origin_alloc redacted it) */
	if (label ? asprintf(&o->uri, "%s:%s", label, inner->uri) < 0
	          : !(o->uri = strdup(inner->uri))) {
		free(o);
		return -ENOMEM;
	}
	o->ops = ops;
	o->size = inner->size;
	o->phys_block_size = inner->phys_block_size;
	o->read_only = inner->read_only;
	o->can_discard = inner->can_discard;
	o->zeroes_after_discard = inner->zeroes_after_discard;
	o->sole_writer = inner->sole_writer;
	o->immutable = inner->immutable;
	o->inner = inner;
	hl_origin_forward_events(inner, o); /* a resize or fence reaches the layer above */
	*out = o;
	return 0;
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
	hl_origin_event_fn fn;

	__atomic_add_fetch(&o->telling, 1, __ATOMIC_SEQ_CST); /* before the load: unlisten */
	fn = __atomic_load_n(&o->listener, __ATOMIC_SEQ_CST);
	if (fn)
		fn(__atomic_load_n(&o->listener_arg, __ATOMIC_ACQUIRE), o, ev, old_size);
	__atomic_sub_fetch(&o->telling, 1, __ATOMIC_SEQ_CST);
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
#define EXCL_IDENT_MAX 120 /* longer identities go in as a hash (HL_ORIGIN_PROOF_MAX) */

/*
 * The layer of o's stack that has the optional op at byte `member` of its
 * ops table (a wrapper without it passes it down), or NULL.
 */
static struct hl_origin *prover_of(struct hl_origin *o, size_t member)
{
	for (; o; o = o->inner) {
		void (*fn)(void);

		memcpy(&fn, (const char *)o->ops + member, sizeof(fn));
		if (fn)
			return o;
	}
	return NULL;
}

#define PROVER(o, op) prover_of((o), offsetof(struct hl_origin_ops, op))

/*
 * The identity an "excl:" proof carries (hl_origin_data_id, when it names
 * the same data after a restart), as a proof may hold it: the text itself
 * when it is short and has no blank, else a 128-bit hash of it.
 * @return 0 or -EOPNOTSUPP (the stack has none that lasts).
 */
static int excl_ident(struct hl_origin *o, char *out, size_t len)
{
	char id[HL_ORIGIN_ID_MAX];
	bool lasting;
	size_t n;

	if (hl_origin_data_id(o, id, sizeof(id), &lasting) || !lasting)
		return -EOPNOTSUPP;
	n = strlen(id);
	if (n && n < len && n <= EXCL_IDENT_MAX && !strpbrk(id, " \t\r\n")) {
		memcpy(out, id, n + 1);
		return 0;
	}
	snprintf(out, len, "h%016" PRIx64 "%016" PRIx64, hl_hash64(id, n, 0x65786331u),
	         hl_hash64(id, n, 0x65786332u));
	return 0;
}

int hl_origin_excl_ident(struct hl_origin *o, char *buf, size_t len)
{
	char ident[EXCL_IDENT_MAX + 1];

	if (excl_ident(o, ident, sizeof(ident)) || hl_strlcpy(buf, ident, len) >= len)
		return -EOPNOTSUPP;
	return 0;
}

bool hl_origin_proof_names(const char *proof, const char *ident)
{
	const char *id;

	if (!proof || !*ident || strncmp(proof, EXCL_PREFIX, strlen(EXCL_PREFIX)))
		return false;
	id = strchr(proof + strlen(EXCL_PREFIX), ':');
	return id && !strcmp(id + 1, ident);
}

/* "excl:SIZE" and, when the stack names its data, ":IDENT" (the admin's word holds for it only). */
static void excl_proof(struct hl_origin *o, char *proof, size_t len)
{
	char ident[EXCL_IDENT_MAX + 1];

	if (excl_ident(o, ident, sizeof(ident)) == 0)
		snprintf(proof, len, EXCL_PREFIX "%" PRIu64 ":%s", o->size, ident);
	else
		snprintf(proof, len, EXCL_PREFIX "%" PRIu64, o->size);
}

int hl_origin_proof_take(struct hl_origin *o, const char *tag, bool final, char *proof, size_t len)
{
	struct hl_origin *p = PROVER(o, proof_take);
	int rc = p ? p->ops->proof_take(p, tag, final, proof, len) : -EOPNOTSUPP;
	char want[HL_ORIGIN_PROOF_MAX];

	if (rc != -EOPNOTSUPP || !o->sole_writer)
		return rc;
	/* The admin's word: nobody else writes it. Size and identity still have to match. */
	excl_proof(o, want, sizeof(want));
	if (hl_strlcpy(proof, want, len) >= len)
		return -EOPNOTSUPP;
	return 0;
}

/* Why an "excl:" proof does not hold for o now, or NULL when it does. */
static const char *excl_mismatch(struct hl_origin *o, const char *proof)
{
	char want[HL_ORIGIN_PROOF_MAX], *p_id, *w_id;
	size_t p_len, w_len;

	if (!o->sole_writer)
		return "exclusive = yes was removed";
	excl_proof(o, want, sizeof(want));
	if (!strcmp(proof, want))
		return NULL;
	p_id = strchr(proof + strlen(EXCL_PREFIX), ':');
	w_id = strchr(want + strlen(EXCL_PREFIX), ':');
	p_len = p_id ? (size_t)(p_id - proof) : strlen(proof);
	w_len = w_id ? (size_t)(w_id - want) : strlen(want);
	if (p_len != w_len || strncmp(proof, want, p_len))
		return "origin size changed";
	if (!p_id)
		return "origin identity not recorded (older proof)";
	if (!w_id)
		return "origin has no identity now";
	return "origin identity changed";
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
		const char *bad = excl_mismatch(o, proof);

		snprintf(why, whylen, "%s", bad ? bad : "exclusive = yes");
		return bad ? -ESTALE : 0;
	}
	struct hl_origin *p = PROVER(o, proof_check);
	if (!p) {
		snprintf(why, whylen, "%s origin cannot prove it unchanged",
		         hl_origin_base(o)->ops->name);
		return -ESTALE;
	}
	return p->ops->proof_check(p, tag, proof, changed, arg, why, whylen) ? -ESTALE : 0;
}

void hl_origin_proof_release(struct hl_origin *o, const char *tag, const char *proof)
{
	struct hl_origin *p = PROVER(o, proof_release);

	if (p)
		p->ops->proof_release(p, tag, proof);
}

void hl_range_list_add(void *arg, uint64_t off, uint64_t len)
{
	struct hl_range_list *l = arg;

	if (l->over || !len)
		return;
	if (l->n && l->v[l->n - 1].off + l->v[l->n - 1].len == off) {
		l->v[l->n - 1].len += len; /* adjacent: one range */
		return;
	}
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 64;
		void *v;

		if (l->max && cap > l->max)
			cap = l->max; /* the last growth stops at max; past it: over */
		v = cap > l->n ? realloc(l->v, cap * sizeof(*l->v)) : NULL;
		if (!v) {
			l->over = true;
			return;
		}
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n].off = off;
	l->v[l->n].len = len;
	l->n++;
}

int hl_origin_hot_publish(struct hl_origin *o, uint32_t block_size, const struct hl_hot_ent *v,
                          uint32_t n)
{
	struct hl_origin *p = PROVER(o, hot_publish);

	return p ? p->ops->hot_publish(p, block_size, v, n) : -EOPNOTSUPP;
}

int hl_origin_hot_fetch(struct hl_origin *o, struct hl_hot_set *out)
{
	struct hl_origin *p = PROVER(o, hot_fetch);

	memset(out, 0, sizeof(*out));
	return p ? p->ops->hot_fetch(p, out) : -EOPNOTSUPP;
}

bool hl_origin_has_hot_set(struct hl_origin *o)
{
	return PROVER(o, hot_fetch) != NULL;
}

uint64_t hl_origin_unfenced(struct hl_origin *o)
{
	struct hl_origin *p = PROVER(o, unfenced);

	return p ? p->ops->unfenced(p) : 0;
}

int hl_origin_identity(struct hl_origin *o, char *buf, size_t len)
{
	struct hl_origin *p = PROVER(o, identity);

	return p ? p->ops->identity(p, buf, len) : -EOPNOTSUPP;
}

int hl_origin_data_id(struct hl_origin *o, char *buf, size_t len, bool *lasting)
{
	struct hl_origin *p = PROVER(o, data_id);
	bool dummy;

	if (!lasting)
		lasting = &dummy;
	*lasting = true; /* identity names data across gateways, so across restarts */
	if (p)
		return p->ops->data_id(p, buf, len, lasting);
	return hl_origin_identity(o, buf, len);
}
