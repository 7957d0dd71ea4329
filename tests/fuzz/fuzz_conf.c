// fuzz-sources: src/conf/conf.c src/conf/conf_check.c src/conf/conf_write.c src/util/util.c src/log/log.c
/*
 * fuzz_conf.c - libFuzzer harness for the INI config parser: any bytes must
 * either parse (and then survive a write/parse round trip unchanged) or fail with a
 * FILE:LINE message, never crash or leak.
 */
#include "hotlun/conf.h"
#include "hotlun/log.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct hl_conf *c = NULL;
	char err[512];

	hl_log_level = HL_LOG_ERR - 1; /* silence warnings */
	if (hl_conf_parse((const char *)data, size, "fuzz.conf", &c, err, sizeof(err)) != 0) {
		if (strncmp(err, "fuzz.conf:", 10) != 0)
			abort(); /* every content error names file:line */
		return 0;
	}
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (f) {
		hl_conf_write(c, f);
		fclose(f);
		struct hl_conf *c2 = NULL;
		if (hl_conf_parse(buf, len, "rt.conf", &c2, err, sizeof(err)) != 0)
			abort(); /* what we write, we must read back */
		if (!hl_conf_same(c, c2))
			abort(); /* ... as the same configuration (what saveconfig checks) */
		hl_conf_free(c2);
		free(buf);
	}
	hl_conf_free(c);
	return 0;
}
