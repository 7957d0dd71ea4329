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

	daemon_disk_identity(42, "vm-store", NULL, NULL, NULL, n1, s1);
	daemon_disk_identity(42, "vm-store", NULL, NULL, NULL, n2, s2);
	daemon_disk_identity(42, "other", NULL, NULL, NULL, n3, s3);
	CU_ASSERT_EQUAL(memcmp(n1, n2, 16), 0);
	CU_ASSERT_STRING_EQUAL(s1, s2);
	CU_ASSERT_NOT_EQUAL(memcmp(n1, n3, 16), 0);
	CU_ASSERT_STRING_NOT_EQUAL(s1, s3);
	CU_ASSERT_EQUAL(n1[0] >> 4, 6); /* NAA 6: IEEE registered extended */
	CU_ASSERT_EQUAL(strlen(s1), 16);
	daemon_disk_identity(43, "vm-store", NULL, NULL, NULL, n3, s3);
	CU_ASSERT_NOT_EQUAL(memcmp(n1, n3, 16), 0);
}

/* issue 17: two gateways (two install ids) agree when the origin or the config names the LU. */
static void test_disk_identity_shared(void)
{
	static const uint8_t want[16] = {0x60, 0x01, 0x40, 0x5a, 0xbc, 0xde, 0xf0, 0x12,
	                                 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x01};
	uint8_t n1[16], n2[16], n3[16];
	char s1[33], s2[33], s3[33];

	/* derived from the origin: the install id and the disk name do not matter */
	daemon_disk_identity(42, "a", "rbd:fsid:1:abc", NULL, NULL, n1, s1);
	daemon_disk_identity(43, "b", "rbd:fsid:1:abc", NULL, NULL, n2, s2);
	CU_ASSERT_EQUAL(memcmp(n1, n2, 16), 0);
	CU_ASSERT_STRING_EQUAL(s1, s2);
	CU_ASSERT_EQUAL(n1[0] >> 4, 6);
	/* ... but another image (or a snapshot of it) is another LU */
	daemon_disk_identity(42, "a", "rbd:fsid:1:abd", NULL, NULL, n3, s3);
	CU_ASSERT_NOT_EQUAL(memcmp(n1, n3, 16), 0);
	CU_ASSERT_STRING_NOT_EQUAL(s1, s3);
	daemon_disk_identity(42, "a", "rbd:fsid:1:abc@snap", NULL, NULL, n3, s3);
	CU_ASSERT_NOT_EQUAL(memcmp(n1, n3, 16), 0);
	/* set in the config: wins over both */
	daemon_disk_identity(42, "a", "rbd:fsid:1:abc", "SER-1", "naa.6001405abcdef0123456789abcdef001",
	                     n1, s1);
	daemon_disk_identity(43, "b", NULL, "SER-1", "6001405ABCDEF0123456789ABCDEF001", n2, s2);
	CU_ASSERT_EQUAL(memcmp(n1, want, 16), 0);
	CU_ASSERT_EQUAL(memcmp(n2, want, 16), 0);
	CU_ASSERT_STRING_EQUAL(s1, "SER-1");
	CU_ASSERT_STRING_EQUAL(s2, "SER-1");
	/* only one of them set: the other is derived as before */
	daemon_disk_identity(42, "vm-store", NULL, "S2", NULL, n1, s1);
	daemon_disk_identity(42, "vm-store", NULL, NULL, NULL, n2, s2);
	CU_ASSERT_EQUAL(memcmp(n1, n2, 16), 0);
	CU_ASSERT_STRING_EQUAL(s1, "S2");
}

static void test_naa_and_serial_syntax(void)
{
	uint8_t n[16];

	CU_ASSERT_EQUAL(hl_parse_naa("6001405abcdef0123456789abcdef001", n), 0);
	CU_ASSERT_EQUAL(n[0], 0x60);
	CU_ASSERT_EQUAL(n[15], 0x01);
	CU_ASSERT_EQUAL(hl_parse_naa("NAA.6001405abcdef0123456789abcdef001", n), 0);
	CU_ASSERT_EQUAL(hl_parse_naa("5001405abcdef0123456789abcdef001", n), -EINVAL); /* NAA 5 */
	CU_ASSERT_EQUAL(hl_parse_naa("36001405abcdef0123456789abcdef001", n), -EINVAL); /* wwid */
	CU_ASSERT_EQUAL(hl_parse_naa("6001405abcdef0123456789abcdef00", n), -EINVAL);
	CU_ASSERT_EQUAL(hl_parse_naa("6001405abcdef0123456789abcdef00g", n), -EINVAL);
	CU_ASSERT_EQUAL(hl_parse_naa("", n), -EINVAL);
	CU_ASSERT_EQUAL(hl_parse_naa(NULL, n), -EINVAL);
	CU_ASSERT(hl_serial_valid("A"));
	CU_ASSERT(hl_serial_valid("0123456789abcdef0123456789abcdef"));
	CU_ASSERT_FALSE(hl_serial_valid("0123456789abcdef0123456789abcdef0"));
	CU_ASSERT_FALSE(hl_serial_valid(""));
	CU_ASSERT_FALSE(hl_serial_valid("a b"));
	CU_ASSERT_FALSE(hl_serial_valid("caf\xc3\xa9"));
	CU_ASSERT_FALSE(hl_serial_valid(NULL));
}

static const struct hl_test tests[] = {
	{"install id persists", test_install_id_persists},
	{"disk identity stable and distinct", test_disk_identity_stable_and_distinct},
	{"disk identity shared by gateways", test_disk_identity_shared},
	{"naa and serial syntax", test_naa_and_serial_syntax},
	{NULL, NULL},
};

int main(void)
{
	hl_log_open(false, HL_LOG_ERR - 1);
	return hl_test_run("daemon-state", tests);
}
