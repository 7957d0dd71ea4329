/* state_ut.c - install id persistence and stable disk identities. */
#include "hl_test.h"
#include "daemon/daemon_internal.h"
#include "hotlun/log.h"

/* The unit under test is part of the daemon, not the library. */
#include "../../../src/daemon/state.c"

#include <stdlib.h>
#include <string.h>

static void test_install_id_persists(void)
{
	char dir[] = "/tmp/hl-state-ut-XXXXXX";
	char sub[128];
	uint64_t a = 0, b = 1;

	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
	snprintf(sub, sizeof(sub), "%s/deep/er", dir);
	CU_ASSERT_EQUAL(daemon_state_dir_init(sub, &a), 0);
	CU_ASSERT_EQUAL(daemon_state_dir_init(sub, &b), 0);
	CU_ASSERT_EQUAL(a, b);
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "echo garbage > %s/install-id", sub);
	CU_ASSERT_EQUAL(system(cmd), 0);
	CU_ASSERT_EQUAL(daemon_state_dir_init(sub, &b), -EINVAL);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CU_ASSERT_EQUAL(system(cmd), 0);
}

static void test_disk_identity_stable_and_distinct(void)
{
	uint8_t n1[16], n2[16], n3[16];
	char s1[33], s2[33], s3[33];

	daemon_disk_identity(42, "vm-store", n1, s1);
	daemon_disk_identity(42, "vm-store", n2, s2);
	daemon_disk_identity(42, "other", n3, s3);
	CU_ASSERT_EQUAL(memcmp(n1, n2, 16), 0);
	CU_ASSERT_STRING_EQUAL(s1, s2);
	CU_ASSERT_NOT_EQUAL(memcmp(n1, n3, 16), 0);
	CU_ASSERT_STRING_NOT_EQUAL(s1, s3);
	CU_ASSERT_EQUAL(n1[0] >> 4, 6); /* NAA 6: IEEE registered extended */
	CU_ASSERT_EQUAL(strlen(s1), 16);
	daemon_disk_identity(43, "vm-store", n3, s3);
	CU_ASSERT_NOT_EQUAL(memcmp(n1, n3, 16), 0);
}

static const struct hl_test tests[] = {
	{"install id persists", test_install_id_persists},
	{"disk identity stable and distinct", test_disk_identity_stable_and_distinct},
	{NULL, NULL},
};

int main(void)
{
	hl_log_open(false, HL_LOG_ERR - 1);
	return hl_test_run("daemon-state", tests);
}
