/*
 * cache_irqs.c - which CPUs take the completion interrupts of a cache
 * device, so that hotlund can say where its hits complete (docs/service.md,
 * "CPUs and interrupts").
 *
 * A hit's device read completes in the interrupt of the device's queue. An
 * NVMe drive has a queue per CPU and completes where the read was
 * submitted; a device with fewer queues (a virtio disk, one AHCI
 * interrupt) completes on the CPUs its interrupts are routed to, and a
 * reactor elsewhere reaps its reads from another CPU while whatever runs
 * there pays for them (docs/bench-hit-device.md, "What bounds 4K QD64
 * hits"). The way there: the block device that holds the cache (the file's
 * file system, or the device itself), its whole disk when it is a
 * partition, up its device path to the first device with MSI interrupts
 * (a PCI function), and each interrupt's effective affinity. Anything this
 * walk does not find (a tmpfs file, a loop device, a device without MSI)
 * is -ENODEV: nothing to say.
 */
#include "daemon/daemon_internal.h"
#include "hotlun/util.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define IRQ_WALK_UP_MAX 8 /* device path levels searched for msi_irqs */

typedef uint64_t cpu_bits[HL_CPU_LIST_MAX / 64];

static bool is_dir(const char *dir, const char *name)
{
	char p[PATH_MAX];
	struct stat st;

	return (size_t)snprintf(p, sizeof(p), "%s/%s", dir, name) < sizeof(p) &&
	       stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Add the CPUs of /proc/irq/IRQ/effective_affinity_list to bits. */
static void irq_cpus(const char *proc, const char *irq, cpu_bits bits)
{
	static const char *const files[] = {"effective_affinity_list", "smp_affinity_list"};
	unsigned cpus[HL_CPU_LIST_MAX];
	char p[PATH_MAX], line[4096];

	for (size_t i = 0; i < HL_ARRAY_SIZE(files); i++) {
		FILE *f;
		int n = -1;
		if ((size_t)snprintf(p, sizeof(p), "%s/irq/%s/%s", proc, irq, files[i]) >=
		    sizeof(p))
			return;
		f = fopen(p, "re");
		if (!f)
			continue;
		if (fgets(line, sizeof(line), f)) {
			line[strcspn(line, "\n")] = '\0';
			n = hl_parse_cpu_list(line, cpus, HL_ARRAY_SIZE(cpus));
		}
		fclose(f);
		for (int c = 0; c < n; c++)
			bits[cpus[c] / 64] |= 1ull << (cpus[c] % 64);
		if (n > 0)
			return;
	}
}

/* bits as a CPU list ("0-3,8") in out. */
static void format_cpus(const cpu_bits bits, char *out, size_t len)
{
	size_t used = 0;

	out[0] = '\0';
	for (unsigned c = 0; c < HL_CPU_LIST_MAX; c++) {
		unsigned e = c;
		if (!(bits[c / 64] & (1ull << (c % 64))))
			continue;
		while (e + 1 < HL_CPU_LIST_MAX && (bits[(e + 1) / 64] & (1ull << ((e + 1) % 64))))
			e++;
		int n = e > c ? snprintf(out + used, len - used, "%s%u-%u", used ? "," : "", c, e)
		              : snprintf(out + used, len - used, "%s%u", used ? "," : "", c);
		if (n < 0 || (size_t)n >= len - used)
			return; /* cut short: still a list of what fitted */
		used += (size_t)n;
		c = e;
	}
}

int daemon_cache_irq_cpus(const char *sys, const char *proc, const char *path, char *out,
                          size_t len)
{
	char p[PATH_MAX], dev[PATH_MAX];
	cpu_bits bits = {0};
	struct stat st;
	DIR *d;

	if (stat(path, &st))
		return -errno;
	dev_t id = S_ISBLK(st.st_mode) ? st.st_rdev : st.st_dev;
	if (major(id) == 0) /* tmpfs and other file systems without a block device */
		return -ENODEV;
	if ((size_t)snprintf(p, sizeof(p), "%s/dev/block/%u:%u", sys, major(id), minor(id)) >=
	        sizeof(p) ||
	    !realpath(p, dev))
		return -ENODEV;
	if ((size_t)snprintf(p, sizeof(p), "%s/partition", dev) < sizeof(p) && access(p, F_OK) == 0)
		*strrchr(dev, '/') = '\0'; /* a partition's folder is inside its disk's */
	if ((size_t)snprintf(p, sizeof(p), "%s/device", dev) >= sizeof(p) || !realpath(p, dev))
		return -ENODEV;
	for (int up = 0; !is_dir(dev, "msi_irqs"); up++) {
		char *slash = strrchr(dev, '/');
		if (up == IRQ_WALK_UP_MAX || !slash || slash == dev)
			return -ENODEV;
		*slash = '\0';
	}
	if ((size_t)snprintf(p, sizeof(p), "%s/msi_irqs", dev) >= sizeof(p))
		return -ENODEV;
	d = opendir(p);
	if (!d)
		return -ENODEV;
	for (struct dirent *e; (e = readdir(d));)
		if (e->d_name[0] >= '0' && e->d_name[0] <= '9')
			irq_cpus(proc, e->d_name, bits);
	closedir(d);
	format_cpus(bits, out, len);
	return out[0] ? 0 : -ENODEV;
}
