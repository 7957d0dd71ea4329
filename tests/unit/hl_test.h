/*
 * hl_test.h - the one runner every CUnit unit test uses:
 *
 *   static const struct hl_test tests[] = {
 *       { "parses sizes", test_parse_size },
 *       { NULL, NULL },
 *   };
 *   int main(void) { return hl_test_run("util", tests); }
 *
 * Exit status is 0 only when every test ran and passed (automake's harness
 * reads it); CUnit's basic interface prints the per-test lines and summary.
 * HL_TEST_ONLY=text runs only the tests whose name contains text (to chase
 * one test, e.g. in a loop under load).
 */
#ifndef HL_TEST_H
#define HL_TEST_H

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct hl_test {
	const char *name;
	void (*fn)(void);
};

static inline int hl_test_run(const char *suite_name, const struct hl_test *tests)
{
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 99;
	CU_pSuite suite = CU_add_suite(suite_name, NULL, NULL);
	if (!suite)
		return 99;
	const char *only = getenv("HL_TEST_ONLY");

	for (const struct hl_test *t = tests; t->name; t++) {
		if (only && *only && !strstr(t->name, only))
			continue;
		if (!CU_add_test(suite, t->name, t->fn))
			return 99;
	}
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
	unsigned ran = CU_get_number_of_tests_run();
	CU_cleanup_registry();
	if (ran == 0)
		return 99;
	return failed ? 1 : 0;
}

#endif
