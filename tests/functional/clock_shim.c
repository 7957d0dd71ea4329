/*
 * clock_shim.c - an LD_PRELOAD library that makes a process's clocks stand
 * still while it is stopped, as a paused VM's clocks do (docs/gateways.md,
 * "The bound on a split brain"). SIGSTOP alone does not reproduce a paused
 * VM: the stopped process's CLOCK_MONOTONIC runs on, so its lease runs out.
 *
 * The test stops the process, sleeps, adds the stopped time (ns, a native
 * int64) to the 8-byte file named by HL_CLOCK_SHIM, and continues it. From
 * then on clock_gettime() answers CLOCK_MONOTONIC (all its variants) minus
 * that offset: the process sees no time pass while it was stopped. With
 * HL_CLOCK_SHIM_BOOT=1, CLOCK_BOOTTIME stands still too (a VM whose
 * hypervisor freezes every clock); with it unset, BOOTTIME runs on (a
 * system suspend). CLOCK_REALTIME always runs on: the hypervisor's time sync
 * (or NTP) steps it forward after the pause.
 *
 * Timed waits on those clocks are kept consistent: a wait that the stop
 * interrupted goes on for what remained of it on the frozen clock, as it
 * would in a paused VM (the kernel's deadline is on the real clock).
 * Built by the test that uses it (cc -shared -fPIC ... -ldl).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile int64_t *shim_offset; /* ns; NULL: no file (the shim does nothing) */
static int shim_boot;
static pthread_once_t shim_once = PTHREAD_ONCE_INIT;

static void shim_init(void)
{
	const char *path = getenv("HL_CLOCK_SHIM"), *boot = getenv("HL_CLOCK_SHIM_BOOT");
	void *p;
	int fd;

	shim_boot = boot && *boot == '1';
	if (!path || !*path)
		return;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	p = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (p != MAP_FAILED)
		shim_offset = p;
}

static int64_t offset_now(void)
{
	pthread_once(&shim_once, shim_init);
	return shim_offset ? __atomic_load_n(shim_offset, __ATOMIC_RELAXED) : 0;
}

static int frozen(clockid_t id)
{
	switch (id) {
	case CLOCK_MONOTONIC:
	case CLOCK_MONOTONIC_RAW:
	case CLOCK_MONOTONIC_COARSE:
		return 1;
	case CLOCK_BOOTTIME:
		return shim_boot;
	default:
		return 0;
	}
}

static int64_t ts_ns(const struct timespec *ts)
{
	return (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

static struct timespec ns_ts(int64_t ns)
{
	struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};

	return ts;
}

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);
static clock_gettime_fn real_gettime;

static void real_init(void)
{
	real_gettime = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
}

/* The kernel's clock, never shifted (libc's clock_gettime: the vDSO). */
static int real_gettime_call(clockid_t id, struct timespec *ts)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, real_init);
	if (real_gettime)
		return real_gettime(id, ts);
	return (int)syscall(SYS_clock_gettime, id, ts);
}

static int64_t real_ns(clockid_t id)
{
	struct timespec ts;

	real_gettime_call(id, &ts);
	return ts_ns(&ts);
}

int clock_gettime(clockid_t id, struct timespec *ts)
{
	int rc = real_gettime_call(id, ts);

	if (rc == 0 && frozen(id)) {
		int64_t off = offset_now();
		if (off)
			*ts = ns_ts(ts_ns(ts) - off);
	}
	return rc;
}

/*
 * A wait until `abs` on a frozen clock: the kernel waits on the real one,
 * `abs` + the offset. When the offset grew while it waited (stopped and
 * continued), the frozen clock may not have reached `abs` yet: wait on.
 */
typedef int (*wait_fn)(void *a, const struct timespec *real_abs);

static int frozen_wait(clockid_t id, const struct timespec *abs, wait_fn fn, void *a, int timeout)
{
	for (;;) {
		int64_t off = offset_now();
		struct timespec real_abs = ns_ts(ts_ns(abs) + off);
		int rc = fn(a, &real_abs);

		if (rc != timeout || offset_now() == off || real_ns(id) - offset_now() >= ts_ns(abs))
			return rc;
	}
}

/* pthread_cond_timedwait: the condition's clock is not visible; a deadline near the
 * frozen monotonic clock (not near the epoch's seconds) is taken as one on it. */
typedef int (*cond_timedwait_fn)(pthread_cond_t *, pthread_mutex_t *, const struct timespec *);

struct cond_args {
	pthread_cond_t *c;
	pthread_mutex_t *m;
	cond_timedwait_fn real;
};

static int cond_wait_once(void *a, const struct timespec *real_abs)
{
	struct cond_args *x = a;

	return x->real(x->c, x->m, real_abs);
}

int pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *abs)
{
	static cond_timedwait_fn real;
	struct cond_args x = {c, m, NULL};
	int64_t mono, wall, t = ts_ns(abs);

	if (!real)
		real = (cond_timedwait_fn)dlvsym(RTLD_NEXT, "pthread_cond_timedwait", "GLIBC_2.3.2");
	if (!real)
		real = (cond_timedwait_fn)dlsym(RTLD_NEXT, "pthread_cond_timedwait");
	x.real = real;
	mono = real_ns(CLOCK_MONOTONIC) - offset_now();
	wall = real_ns(CLOCK_REALTIME);
	if (llabs(t - mono) >= llabs(t - wall))
		return real(c, m, abs);
	return frozen_wait(CLOCK_MONOTONIC, abs, cond_wait_once, &x, ETIMEDOUT);
}

typedef int (*cond_clockwait_fn)(pthread_cond_t *, pthread_mutex_t *, clockid_t,
                                 const struct timespec *);

struct clockwait_args {
	pthread_cond_t *c;
	pthread_mutex_t *m;
	clockid_t id;
	cond_clockwait_fn real;
};

static int clockwait_once(void *a, const struct timespec *real_abs)
{
	struct clockwait_args *x = a;

	return x->real(x->c, x->m, x->id, real_abs);
}

int pthread_cond_clockwait(pthread_cond_t *c, pthread_mutex_t *m, clockid_t id,
                           const struct timespec *abs)
{
	static cond_clockwait_fn real;
	struct clockwait_args x = {c, m, id, NULL};

	if (!real)
		real = (cond_clockwait_fn)dlsym(RTLD_NEXT, "pthread_cond_clockwait");
	if (!real)
		return EINVAL;
	x.real = real;
	if (!frozen(id))
		return real(c, m, id, abs);
	return frozen_wait(id, abs, clockwait_once, &x, ETIMEDOUT);
}

struct nanosleep_args {
	clockid_t id;
};

static int nanosleep_once(void *a, const struct timespec *real_abs)
{
	struct nanosleep_args *x = a;

	return (int)syscall(SYS_clock_nanosleep, x->id, TIMER_ABSTIME, real_abs, NULL) ? errno
	                                                                              : 0;
}

int clock_nanosleep(clockid_t id, int flags, const struct timespec *req, struct timespec *rem)
{
	struct nanosleep_args x = {id};
	int rc;

	if (!(flags & TIMER_ABSTIME) || !frozen(id)) {
		rc = (int)syscall(SYS_clock_nanosleep, id, flags, req, rem);
		return rc ? errno : 0;
	}
	rc = frozen_wait(id, req, nanosleep_once, &x, 0);
	return rc;
}
