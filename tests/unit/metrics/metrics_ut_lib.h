/*
 * metrics_ut_lib.h - what the metrics unit tests share: a stats object (JSON
 * text) rendered as Prometheus text, and the test of one whole line in it.
 */
#ifndef HOTLUN_TESTS_METRICS_UT_LIB_H
#define HOTLUN_TESTS_METRICS_UT_LIB_H

#include "hl_test.h"
#include "hotlun/metrics.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* hl_metrics_render of the object in stats; the caller frees the text. */
static char *render_text(const char *stats)
{
	json_error_t je;
	json_t *o = json_loads(stats, 0, &je);
	char *text = NULL;
	size_t len = 0;

	CU_ASSERT_PTR_NOT_NULL_FATAL(o);
	CU_ASSERT_EQUAL_FATAL(hl_metrics_render(o, &text, &len), 0);
	CU_ASSERT_EQUAL(strlen(text), len);
	json_decref(o);
	return text;
}

/* Whether text holds line as a whole line. */
static bool has_line(const char *text, const char *line)
{
	size_t n = strlen(line);

	for (const char *p = text; (p = strstr(p, line)); p++)
		if ((p == text || p[-1] == '\n') && (p[n] == '\n' || !p[n]))
			return true;
	return false;
}

#endif
