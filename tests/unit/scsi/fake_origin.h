/*
 * fake_origin.h - an in-memory origin for scsi unit tests and the CDB
 * fuzzer. Submissions are queued and run when the test drains the queue,
 * so completions are asynchronous as the real contract requires, and no
 * event loop is needed. Knobs inject errors and submit failures.
 */
#ifndef HL_FAKE_ORIGIN_H
#define HL_FAKE_ORIGIN_H

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>
#include <stdint.h>

#include "hotlun/event.h"
#include "hotlun/origin.h"

#define FAKE_QUEUE_MAX 64

struct fake_origin {
	uint8_t *mem;         /* NULL: size without backing store (capacity tests only) */
	pthread_mutex_t lock; /* guards queue and n_queued: submits may come from reactor threads */
	struct hl_origin_io *queue[FAKE_QUEUE_MAX];
	unsigned n_queued;
	int submit_rc;   /* returned by submit when nonzero (cb never runs) */
	int fail_result; /* completion result for every I/O when nonzero */
	unsigned n_read, n_write, n_flush, n_fua, n_discard, n_zeroes, n_caw, n_prefetch;
	bool caw_native;  /* performs HL_IO_COMPARE_AND_WRITE itself (else -EOPNOTSUPP at submit) */
	bool prefetch_ok; /* accepts HL_IO_PREFETCH (else -EINVAL at submit, like a cacheless
	                     origin) */
	uint64_t last_offset, last_length;
	unsigned n_ready_io; /* I/Os submitted with a partial-data hook (io->ready) */
};

static inline struct fake_origin *fake_of(struct hl_origin *o)
{
	return hl_origin_priv(o);
}

static int fake_open(struct hl_origin *o, const char *target, const struct hl_origin_opts *opts)
{
	return 0;
}

static void fake_close(struct hl_origin *o)
{
	pthread_mutex_destroy(&fake_of(o)->lock);
	free(fake_of(o)->mem);
}

static int fake_submit(struct hl_origin *o, struct hl_origin_io *io)
{
	struct fake_origin *f = fake_of(o);

	if (f->submit_rc)
		return f->submit_rc;
	if (io->op == HL_IO_COMPARE_AND_WRITE && !f->caw_native)
		return -EOPNOTSUPP;
	if (io->op == HL_IO_PREFETCH && !f->prefetch_ok)
		return -EINVAL;
	if (io->ready)
		f->n_ready_io++;
	/* priv[0]: the submitting reactor, so tests can complete the I/O there */
	io->priv[0] = (uint64_t)(uintptr_t)hl_reactor_current();
	pthread_mutex_lock(&f->lock);
	if (f->n_queued == FAKE_QUEUE_MAX) {
		pthread_mutex_unlock(&f->lock);
		return -EAGAIN;
	}
	f->queue[f->n_queued++] = io;
	pthread_mutex_unlock(&f->lock);
	return 0;
}

static const struct hl_origin_ops fake_origin_ops = {
    .name = "fake",
    .scheme = "fake:",
    .priv_size = sizeof(struct fake_origin),
    .open = fake_open,
    .close = fake_close,
    .submit = fake_submit,
};

/** A fake origin of `size` bytes (zero-filled), freed by hl_origin_close. */
static inline struct hl_origin *fake_origin_new(uint64_t size, bool backed)
{
	struct hl_origin *o = calloc(1, sizeof(*o) + sizeof(struct fake_origin));
	if (!o)
		return NULL;
	o->ops = &fake_origin_ops;
	o->uri = strdup("fake:");
	o->size = size;
	pthread_mutex_init(&fake_of(o)->lock, NULL);
	if (backed) {
		fake_of(o)->mem = calloc(1, size);
		if (!fake_of(o)->mem) {
			pthread_mutex_destroy(&fake_of(o)->lock);
			free(o->uri);
			free(o);
			return NULL;
		}
	}
	return o;
}

/* Perform one queued I/O against memory and complete it. */
static inline void fake_run_one(struct hl_origin *o, struct hl_origin_io *io)
{
	struct fake_origin *f = fake_of(o);
	int result = 0;

	f->last_offset = io->offset;
	f->last_length = io->length;
	if (io->flags & HL_IO_FUA)
		f->n_fua++;
	if (f->fail_result) {
		result = f->fail_result;
	} else if (io->op == HL_IO_FLUSH) {
		f->n_flush++;
	} else if (io->op == HL_IO_PREFETCH) {
		f->n_prefetch++;
	} else if (io->op == HL_IO_COMPARE_AND_WRITE && f->mem && io->iovcnt == 1 &&
	           io->iov[0].iov_len == 2 * io->length && io->offset <= o->size &&
	           io->length <= o->size - io->offset) {
		const uint8_t *d = io->iov[0].iov_base;
		f->n_caw++;
		result = 0;
		for (uint64_t i = 0; i < io->length; i++) {
			if (f->mem[io->offset + i] != d[i]) {
				io->miscompare_offset = i;
				result = -EILSEQ;
				break;
			}
		}
		if (result == 0)
			memcpy(f->mem + io->offset, d + io->length, io->length);
	} else if ((io->op == HL_IO_DISCARD || io->op == HL_IO_WRITE_ZEROES) && f->mem &&
	           io->offset <= o->size && io->length <= o->size - io->offset) {
		/* both read back as zeroes here (zeroes_after_discard) */
		memset(f->mem + io->offset, 0, io->length);
		if (io->op == HL_IO_DISCARD)
			f->n_discard++;
		else
			f->n_zeroes++;
	} else if (io->offset > o->size || io->length > o->size - io->offset || !f->mem) {
		result = -EINVAL;
	} else {
		uint64_t off = io->offset;
		uint64_t sum = 0;
		for (int i = 0; i < io->iovcnt; i++) {
			if (io->op == HL_IO_READ)
				memcpy(io->iov[i].iov_base, f->mem + off, io->iov[i].iov_len);
			else if (io->op == HL_IO_WRITE)
				memcpy(f->mem + off, io->iov[i].iov_base, io->iov[i].iov_len);
			off += io->iov[i].iov_len;
			sum += io->iov[i].iov_len;
		}
		if (sum != io->length)
			result = -EINVAL;
		if (io->op == HL_IO_READ)
			f->n_read++;
		else
			f->n_write++;
	}
	io->cb(io, result);
}

/** Take the oldest queued I/O off the queue (NULL when empty) without running it. */
static inline struct hl_origin_io *fake_pop(struct hl_origin *o)
{
	struct fake_origin *f = fake_of(o);
	struct hl_origin_io *io = NULL;

	pthread_mutex_lock(&f->lock);
	if (f->n_queued) {
		io = f->queue[0];
		f->n_queued--;
		memmove(f->queue, f->queue + 1, f->n_queued * sizeof(f->queue[0]));
	}
	pthread_mutex_unlock(&f->lock);
	return io;
}

/** Complete the oldest queued I/O, if any. @return 1 when one ran. */
static inline unsigned fake_step(struct hl_origin *o)
{
	struct hl_origin_io *io = fake_pop(o);

	if (!io)
		return 0;
	fake_run_one(o, io);
	return 1;
}

/** Complete queued I/O (and whatever those completions submit) until none is left. */
static inline unsigned fake_drain(struct hl_origin *o)
{
	unsigned n = 0;

	while (fake_step(o))
		n++;
	return n;
}

#endif
