/*
 * cache_trace.c - the optional binary trace of the cache's device I/O and
 * records (cache_trace.h): one shared, memory-mapped file per process,
 * appended to lock-free from every thread.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache/engine/cache_trace.h"
#include "hotlun/log.h"

#define TRACE_MAGIC    "HLCTRACE"
#define TRACE_HDR      64
#define TRACE_BYTES    (256ull << 20) /* 5.5 M records; sparse until written */
#define TRACE_ENV      "HOTLUN_CACHE_TRACE"

struct cache_trace_file {
	char magic[8];
	uint32_t version;
	uint32_t rec_size;
	_Atomic uint64_t used;
	uint64_t cap;
};

_Static_assert(sizeof(struct cache_trace_file) <= TRACE_HDR, "trace header fits 64 bytes");

struct cache_trace_file *cache_trace_on;
static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t trace_pid; /* getpid() is a system call: once, at open */

/*
 * Open dir/name for the trace. The daemon runs as root and obeys the
 * environment variable, so the file must be its own: the folder writable
 * by nobody else (else anyone could plant the name first), the name no
 * symbolic link (O_NOFOLLOW) nor a hard link to another file (one link,
 * this user's). Only then is it truncated: O_TRUNC would have cut a
 * planted file before any check. It is the owner's alone (0600, a file an
 * older hotlund left 0644 too): it lists which blocks of which disk were
 * read and when, the tenants' access pattern. @return the descriptor or -errno.
 */
static int trace_file_open(const char *dir, const char *name)
{
	struct stat st;
	int dfd, fd, rc;

	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	if (fstat(dfd, &st) != 0) {
		rc = -errno;
		close(dfd);
		return rc;
	}
	if ((st.st_mode & (S_IWGRP | S_IWOTH)) || (st.st_uid != 0 && st.st_uid != geteuid())) {
		HL_WARN("cache", "%s: a folder others may write (mode %04o, owner %u): no trace there",
		        dir, (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid);
		close(dfd);
		return -EPERM;
	}
	fd = openat(dfd, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	rc = fd < 0 ? -errno : 0;
	close(dfd);
	if (rc)
		return rc;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 ||
	    st.st_uid != geteuid()) {
		close(fd);
		return -EPERM;
	}
	if (fchmod(fd, 0600) != 0 || ftruncate(fd, 0) != 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}

int cache_trace_open(const char *dir)
{
	char name[64];
	struct cache_trace_file *f;
	void *m;
	int fd, rc = 0;

	pthread_mutex_lock(&trace_lock);
	if (cache_trace_on)
		goto out;
	snprintf(name, sizeof(name), "cache-trace.%d", (int)getpid());
	fd = trace_file_open(dir, name);
	if (fd < 0) {
		rc = fd;
		goto out;
	}
	if (ftruncate(fd, (off_t)TRACE_BYTES) != 0) {
		rc = -errno;
		close(fd);
		goto out;
	}
	m = mmap(NULL, TRACE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED) {
		rc = -errno;
		goto out;
	}
	f = m;
	memcpy(f->magic, TRACE_MAGIC, 8);
	f->version = 1;
	f->rec_size = sizeof(struct cache_trace_rec);
	f->cap = (TRACE_BYTES - TRACE_HDR) / sizeof(struct cache_trace_rec);
	atomic_store(&f->used, 0);
	trace_pid = (uint32_t)getpid();
	cache_trace_on = f;
	HL_NOTICE("cache", "tracing the cache's device I/O into %s/%s", dir, name);
out:
	pthread_mutex_unlock(&trace_lock);
	return rc;
}

void cache_trace_init(void)
{
	const char *dir = getenv(TRACE_ENV);
	int rc;

	if (!dir || !*dir || cache_trace_on)
		return;
	rc = cache_trace_open(dir);
	if (rc)
		HL_WARN("cache", "%s=%s: cannot trace: %s", TRACE_ENV, dir, strerror(-rc));
}

void cache_trace_close(void)
{
	pthread_mutex_lock(&trace_lock);
	if (cache_trace_on) {
		munmap(cache_trace_on, TRACE_BYTES);
		cache_trace_on = NULL;
	}
	pthread_mutex_unlock(&trace_lock);
}

void cache_trace_put(enum cache_trace_ev ev, unsigned kind, unsigned lun, uint32_t slot,
                     uint32_t aux, uint64_t block, uint64_t a, uint64_t b)
{
	struct cache_trace_file *f = cache_trace_on;
	struct cache_trace_rec *r;
	struct timespec ts;
	uint64_t i;

	if (!f)
		return;
	i = atomic_fetch_add_explicit(&f->used, 1, memory_order_relaxed);
	if (i >= f->cap)
		return; /* full: the first records are the ones kept */
	r = (struct cache_trace_rec *)((char *)f + TRACE_HDR) + i;
	r->pid = trace_pid;
	r->ev = (uint8_t)ev;
	r->kind = (uint8_t)kind;
	r->lun = (uint16_t)lun;
	r->slot = slot;
	r->aux = aux;
	r->block = block;
	r->a = a;
	r->b = b;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	atomic_thread_fence(memory_order_release);
	r->ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
