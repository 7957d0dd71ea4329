/*
 * cache_irqs_ut.c - daemon_cache_irq_cpus (cache_irqs.c) over a made-up
 * sysfs and procfs: a virtio disk whose one queue interrupts CPU 1, the
 * same through a partition, an NVMe-like device with a queue per CPU, and
 * the cases with nothing to say (no block device, no MSI interrupts).
 */
#include "hl_test.h"
#include "daemon/daemon_internal.h"
#include "hotlun/log.h"

/* The unit under test is part of the daemon, not the library. */
#include "../../../src/daemon/cache_irqs.c"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

static char root[1024], sys_root[PATH_MAX], proc_root[PATH_MAX], file[PATH_MAX];

static void run(const char *cmd)
{
	CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
}

/* A file in the scratch folder stands for the cache; its st_dev names the device. */
static void setup(void)
{
	char cmd[3 * PATH_MAX];
	struct stat st;

	/* in the build folder: a tmpfs /tmp has no block device behind it */
	snprintf(root, sizeof(root), "cache_irqs_ut.XXXXXX");
	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(root));
	CU_ASSERT_PTR_NOT_NULL_FATAL(realpath(root, cmd));
	CU_ASSERT_FATAL(strlen(cmd) < sizeof(root));
	memcpy(root, cmd, strlen(cmd) + 1);
	snprintf(sys_root, sizeof(sys_root), "%s/sys", root);
	snprintf(proc_root, sizeof(proc_root), "%s/proc", root);
	snprintf(file, sizeof(file), "%s/cache.img", root);
	int fd = open(file, O_WRONLY | O_CREAT, 0600);
	CU_ASSERT_FATAL(fd >= 0);
	close(fd);
	CU_ASSERT_EQUAL_FATAL(stat(file, &st), 0);
	/* a PCI function with MSI interrupts 35 and 36, a virtio device under it, its disk vda */
	snprintf(
	    cmd, sizeof(cmd),
	    "set -e; cd %s; mkdir -p sys/dev/block sys/devices/pci0/fn/msi_irqs/35 "
	    "sys/devices/pci0/fn/msi_irqs/36 sys/devices/pci0/fn/virtio1/block/vda/vda1 "
	    "proc/irq/35 proc/irq/36; touch sys/devices/pci0/fn/virtio1/block/vda/vda1/partition; "
	    "ln -s ../../.. sys/devices/pci0/fn/virtio1/block/vda/device; "
	    "echo 1 >proc/irq/35/effective_affinity_list; "
	    "echo 1 >proc/irq/36/effective_affinity_list; "
	    "ln -s ../../devices/pci0/fn/virtio1/block/vda sys/dev/block/%u:%u",
	    root, major(st.st_dev), minor(st.st_dev));
	run(cmd);
}

static void teardown(void)
{
	char cmd[PATH_MAX + 16];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	run(cmd);
}

/* Point the file's device at DIR (relative to sys/devices/pci0/fn). */
static void link_dev(const char *dir)
{
	char cmd[3 * PATH_MAX];
	struct stat st;

	CU_ASSERT_EQUAL_FATAL(stat(file, &st), 0);
	snprintf(cmd, sizeof(cmd), "cd %s/sys/dev/block && ln -sfn ../../devices/pci0/fn/%s %u:%u",
	         root, dir, major(st.st_dev), minor(st.st_dev));
	run(cmd);
}

static void test_virtio_one_queue(void)
{
	char out[64];

	setup();
	CU_ASSERT_EQUAL(daemon_cache_irq_cpus(sys_root, proc_root, file, out, sizeof(out)), 0);
	CU_ASSERT_STRING_EQUAL(out, "1");
	teardown();
}

static void test_partition(void)
{
	char out[64];

	setup();
	link_dev("virtio1/block/vda/vda1");
	CU_ASSERT_EQUAL(daemon_cache_irq_cpus(sys_root, proc_root, file, out, sizeof(out)), 0);
	CU_ASSERT_STRING_EQUAL(out, "1");
	teardown();
}

static void test_queue_per_cpu(void)
{
	char cmd[2 * PATH_MAX], out[64];

	setup();
	/* interrupts 40-43 on CPUs 0, 1, 2 and 5; 36 without an effective list: its smp list */
	snprintf(cmd, sizeof(cmd),
	         "set -e; cd %s; for i in 0:40 1:41 2:42 5:43; do mkdir -p proc/irq/${i#*:} "
	         "sys/devices/pci0/fn/msi_irqs/${i#*:}; echo ${i%%:*} "
	         ">proc/irq/${i#*:}/effective_affinity_list; done; rm proc/irq/36/*; "
	         "echo 7-8 >proc/irq/36/smp_affinity_list",
	         root);
	run(cmd);
	CU_ASSERT_EQUAL(daemon_cache_irq_cpus(sys_root, proc_root, file, out, sizeof(out)), 0);
	CU_ASSERT_STRING_EQUAL(out, "0-2,5,7-8");
	CU_ASSERT_EQUAL(daemon_cache_irq_cpus(sys_root, proc_root, file, out, 4), 0);
	CU_ASSERT_STRING_EQUAL(out, "0-2"); /* cut short at a whole entry */
	teardown();
}

static void test_nothing_to_say(void)
{
	char cmd[2 * PATH_MAX], out[64];

	setup();
	CU_ASSERT_EQUAL(
	    daemon_cache_irq_cpus(sys_root, proc_root, "/nonexistent/x", out, sizeof(out)),
	    -ENOENT);
	/* no MSI interrupts up the device path */
	snprintf(cmd, sizeof(cmd), "rm -r %s/sys/devices/pci0/fn/msi_irqs", root);
	run(cmd);
	CU_ASSERT_EQUAL(daemon_cache_irq_cpus(sys_root, proc_root, file, out, sizeof(out)),
	                -ENODEV);
	/* no such block device in sysfs */
	snprintf(cmd, sizeof(cmd), "rm %s/sys/dev/block/*", root);
	run(cmd);
	CU_ASSERT_EQUAL(daemon_cache_irq_cpus(sys_root, proc_root, file, out, sizeof(out)),
	                -ENODEV);
	teardown();
}

static const struct hl_test tests[] = {
    {"a virtio disk with one queue", test_virtio_one_queue},
    {"a partition: its disk's interrupts", test_partition},
    {"a queue per CPU", test_queue_per_cpu},
    {"nothing to say", test_nothing_to_say},
    {NULL, NULL},
};

int main(void)
{
	hl_log_open(false, HL_LOG_ERR);
	return hl_test_run("daemon-cache-irqs", tests);
}
