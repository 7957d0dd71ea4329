/*
 * fail_malloc.h - an allocation-failure switch for a test program linked
 * with -Wl,--wrap=malloc: while fail_malloc is set, every malloc() made by
 * the objects linked into the program (the code under test) returns NULL.
 * Libraries (libc, CUnit) keep their own malloc. Include once per program.
 */
#ifndef HOTLUN_TESTS_FAIL_MALLOC_H
#define HOTLUN_TESTS_FAIL_MALLOC_H

#include <stddef.h>

static int fail_malloc;         /* atomically: the test's threads and the loop's */
static unsigned failed_mallocs; /* how many were refused */

void *__real_malloc(size_t n);
void *__wrap_malloc(size_t n);

void *__wrap_malloc(size_t n)
{
	if (__atomic_load_n(&fail_malloc, __ATOMIC_RELAXED)) {
		__atomic_fetch_add(&failed_mallocs, 1, __ATOMIC_RELAXED);
		return NULL;
	}
	return __real_malloc(n);
}

static inline void fail_malloc_set(int on)
{
	__atomic_store_n(&fail_malloc, on, __ATOMIC_RELAXED);
}

#endif
