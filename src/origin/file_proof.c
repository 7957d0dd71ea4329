/*
 * file_proof.c - warm restart proofs of a file origin: a regular file proves
 * itself unchanged by what the kernel stamps in its inode (device, inode,
 * size, change time), where the filesystem's change times can be trusted.
 * A block device proves nothing by itself: exclusive = yes is the admin's
 * word that nobody else writes it, and its proof then names the device
 * behind the path and its size ("blk:"), so that a path that names another
 * device at the next start (/dev/sdX renumbered, a symbolic link moved)
 * is cold, never served the first device's blocks. And data_id: what the
 * open file is (device and inode), for the daemon's alias check.
 */
#include "config.h"

#include "hotlun/log.h"
#include "origin/origin_file.h"

#include <errno.h>
#include <inttypes.h>
#include <linux/loop.h>
#include <linux/magic.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

/*
 * Local filesystems whose ctime the kernel itself stamps on every change
 * (overlayfs reports the ctime of the real upper or lower inode, which the
 * kernel stamps too; a copy-up changes the inode number: cold). Elsewhere
 * (NFS: the server's clock and attribute caching; FUSE: whatever the daemon
 * reports) a file cannot prove itself unchanged: cold unless exclusive = yes.
 */
bool origin_file_stamp_trusted(long type)
{
	switch ((unsigned long)type) {
	case EXT4_SUPER_MAGIC: /* also ext2 and ext3 */
	case XFS_SUPER_MAGIC:
	case BTRFS_SUPER_MAGIC:
	case F2FS_SUPER_MAGIC:
	case TMPFS_MAGIC:
	case OVERLAYFS_SUPER_MAGIC:
		return true;
	default:
		return false;
	}
}

void origin_file_stamp_of(const struct stat *st, struct file_stamp *s)
{
	s->dev = (uint64_t)st->st_dev;
	s->ino = (uint64_t)st->st_ino;
	s->size = (uint64_t)st->st_size;
	s->ctime_s = (int64_t)st->st_ctim.tv_sec;
	s->ctime_ns = st->st_ctim.tv_nsec;
}

/* ---- warm restart proofs ---- */

/*
 * A regular file proves itself unchanged by what the kernel records in its
 * inode: device, inode number, size and change time (ctime). Every write,
 * truncate, fallocate or chmod moves ctime to the current time, and no
 * system call sets it (utimes sets atime and mtime only). Two limits:
 *
 *  - ctime is the time of the change truncated to the filesystem's
 *    granularity (ns on ext4 with large inodes, xfs, btrfs, tmpfs; 1 s on
 *    ext4 with 128-byte inodes; 10 ms on FAT), and the kernel stamps it
 *    from a coarse clock (a timer tick, 1-10 ms). A change in the same
 *    granule as the one recorded would leave ctime as it was. So a proof
 *    is given only once the coarse clock has left the recorded granule
 *    ("settled"): any later change stamps a later time. The granule is
 *    guessed from the recorded nanoseconds (their trailing decimal zeros:
 *    .120000000 -> 10 ms, .000000000 -> 1 s), which errs towards waiting.
 *  - The clock is assumed not to step backwards by more than that across
 *    the downtime (NTP slews; an admin setting the clock back past the
 *    recorded ctime while another client writes is not covered), and the
 *    filesystem is assumed local (an NFS file's ctime is the server's).
 *
 * Writes by another process while hotlund runs are out of scope here (one
 * writer per LUN, ARCHITECTURE invariant 7); such a writer's changes after
 * the proof still move ctime, except stores through a shared mapping into
 * pages it dirtied before (the kernel stamps the first fault only).
 */

#define FILE_PROOF_WAIT_MS 3000 /* a final proof waits at most this long to settle */

/* 10^(trailing decimal zeros of ns), 1 s for a whole second: the granule ctime may be cut to. */
static long stamp_granule_ns(long ns)
{
	long g = 1;

	if (!ns)
		return 1000000000L;
	while (ns % (g * 10) == 0)
		g *= 10;
	return g;
}

/* True when a change from now on can no longer get ctime s's value. */
static bool stamp_settled(const struct file_stamp *s)
{
	struct timespec now;
	int64_t end_s = s->ctime_s;
	long end_ns = s->ctime_ns + stamp_granule_ns(s->ctime_ns);

	if (end_ns >= 1000000000L) {
		end_s += end_ns / 1000000000L;
		end_ns %= 1000000000L;
	}
	if (clock_gettime(CLOCK_REALTIME_COARSE, &now))
		return false;
	return (int64_t)now.tv_sec > end_s ||
	       ((int64_t)now.tv_sec == end_s && now.tv_nsec > end_ns);
}

static bool stamp_eq(const struct file_stamp *a, const struct file_stamp *b)
{
	return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
	       a->ctime_s == b->ctime_s && a->ctime_ns == b->ctime_ns;
}

int origin_file_stamp_format(const struct file_stamp *s, char *buf, size_t len)
{
	int n = snprintf(buf, len, "file:%" PRIu64 ":%" PRIu64 ":%" PRIu64 ":%" PRId64 ".%09ld",
	                 s->dev, s->ino, s->size, s->ctime_s, s->ctime_ns);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int origin_file_stamp_parse(const char *text, struct file_stamp *s)
{
	int n = -1;

	if (sscanf(text, "file:%" SCNu64 ":%" SCNu64 ":%" SCNu64 ":%" SCNd64 ".%9ld%n", &s->dev,
	           &s->ino, &s->size, &s->ctime_s, &s->ctime_ns, &n) != 5 ||
	    n < 0 || text[n] || s->ctime_ns < 0 || s->ctime_ns > 999999999L)
		return -EINVAL;
	return 0;
}

const char *origin_file_stamp_diff(const struct file_stamp *was, const struct file_stamp *now)
{
	if (was->dev != now->dev || was->ino != now->ino)
		return "file replaced (inode)";
	if (was->size != now->size)
		return "file changed: size";
	if (was->ctime_s != now->ctime_s || was->ctime_ns != now->ctime_ns)
		return "file changed: ctime";
	return NULL;
}

/* First line of sysfs file `name` of block device dev into buf (NUL-trimmed). @return length. */
static size_t sysfs_line(dev_t dev, const char *name, char *buf, size_t len)
{
	char path[128];
	size_t n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/%s", major(dev), minor(dev), name);
	f = fopen(path, "r");
	if (!f)
		return 0;
	if (fgets(buf, (int)len, f))
		n = strcspn(buf, "\n");
	fclose(f);
	buf[n] = '\0';
	return n;
}

/*
 * A loop device's backing file is the file, not its path: its device and
 * inode are appended, so a file put in the path's place (recreated,
 * restored from a copy) is another device. @return the length appended.
 */
static size_t loop_backing_ino(int fd, char *text, size_t len)
{
	struct loop_info64 li;
	size_t n = strlen(text);
	int w;

	if (ioctl(fd, LOOP_GET_STATUS64, &li))
		return 0;
	w = snprintf(text + n, len - n, ":%" PRIu64 ":%" PRIu64, (uint64_t)li.lo_device,
	             (uint64_t)li.lo_inode);
	return w > 0 && (size_t)w < len - n ? (size_t)w : 0;
}

/*
 * What the block device behind fo is, as a proof token part "KIND-HASH":
 * its disk's WWID (SCSI: device/wwid; NVMe namespace: wwid), its serial
 * (virtio), a partition: its disk's and its number, a device-mapper UUID,
 * a loop device's backing file; else only its numbers (weak: /dev/sdX
 * renumbered keeps them; said once in the log). Hashed: the proof is short.
 */
static int blkdev_ident(struct hl_origin *o, char *out, size_t len)
{
	static const struct {
		const char *kind, *file;
	} src[] = {{"wwid", "device/wwid"},  {"pwwid", "../device/wwid"}, {"nwwid", "wwid"},
	           {"pnwwid", "../wwid"},    {"serial", "serial"},        {"pserial", "../serial"},
	           {"dm", "dm/uuid"},         {"loop", "loop/backing_file"}};
	struct file_origin *fo = fo_of(o);
	char text[512] = "", part[16] = "";
	const char *kind = "dev";
	uint64_t h = 1469598103934665603ull; /* FNV-1a */
	struct stat st;

	if (fstat(fo->fd, &st))
		return -errno;
	for (size_t i = 0; i < sizeof(src) / sizeof(src[0]); i++) {
		if (sysfs_line(st.st_rdev, src[i].file, text, sizeof(text))) {
			kind = src[i].kind;
			break;
		}
	}
	if (!strcmp(kind, "loop") && !loop_backing_ino(fo->fd, text, sizeof(text)))
		return -EAGAIN; /* the path alone would name another file put there */
	if (!strcmp(kind, "dev")) {
		snprintf(text, sizeof(text), "%u:%u", major(st.st_rdev), minor(st.st_rdev));
		if (!fo->ident_weak_said) {
			fo->ident_weak_said = true;
			HL_WARN("origin",
			        "%s: exclusive = yes: the device reports no WWID, serial or "
			        "device-mapper UUID; its warm restart trusts the device numbers "
			        "%s (another disk that takes them at a reboot would be served "
			        "this one's cached blocks: use a /dev/disk/by-id path)",
			        o->uri, text);
		}
	}
	sysfs_line(st.st_rdev, "partition", part, sizeof(part));
	for (const char *p = text; *p; p++)
		h = (h ^ (uint8_t)*p) * 1099511628211ull;
	snprintf(out, len, "%s%s%s-%016" PRIx64, kind, *part ? "p" : "", part, h);
	return 0;
}

/* exclusive = yes on a block device: "blk:SIZE:IDENT" (blkdev_ident). */
static int blkdev_proof(struct hl_origin *o, char *proof, size_t len)
{
	char id[64];

	if (blkdev_ident(o, id, sizeof(id)))
		return -EAGAIN;
	if ((size_t)snprintf(proof, len, "blk:%" PRIu64 ":%s", o->size, id) >= len)
		return -EOPNOTSUPP;
	return 0;
}

int origin_file_proof_take(struct hl_origin *o, const char *tag, bool final, char *proof,
                           size_t len)
{
	struct file_origin *fo = fo_of(o);
	struct file_stamp s, again;
	struct stat st;
	int waited = 0;

	(void)tag;
	if (fo->blkdev && o->sole_writer)
		return blkdev_proof(o, proof, len);
	if (fo->blkdev || !fo->fs_stamps)
		return -EOPNOTSUPP; /* no change time (a block device), or untrusted */
	/* Last: our writes reach the disk with the inode that stamps them (power loss). */
	if (final && !o->read_only && fsync(fo->fd))
		return -EAGAIN;
	if (fstat(fo->fd, &st))
		return -EAGAIN;
	origin_file_stamp_of(&st, &s);
	while (!stamp_settled(&s)) {
		if (!final || waited >= FILE_PROOF_WAIT_MS)
			return -EAGAIN;
		usleep(1000);
		waited++;
		if (fstat(fo->fd, &st))
			return -EAGAIN;
		origin_file_stamp_of(&st, &again);
		if (!stamp_eq(&s, &again))
			s = again; /* changed meanwhile (not by us: no I/O in flight) */
	}
	return origin_file_stamp_format(&s, proof, len) ? -EOPNOTSUPP : 0;
}

int origin_file_proof_check(struct hl_origin *o, const char *tag, const char *proof,
                            hl_origin_changed_fn changed, void *arg, char *why, size_t whylen)
{
	struct file_origin *fo = fo_of(o);
	struct file_stamp was, now;
	const char *d;
	struct stat st;

	(void)tag;
	(void)changed;
	(void)arg;
	if (fo->blkdev && !strncmp(proof, "blk:", 4)) {
		char want[HL_ORIGIN_PROOF_MAX];
		if (!o->sole_writer) {
			snprintf(why, whylen, "exclusive = yes was removed");
			return -ESTALE;
		}
		if (blkdev_proof(o, want, sizeof(want)) || strcmp(proof, want)) {
			snprintf(why, whylen,
			         "another device or size behind the path (exclusive = yes)");
			return -ESTALE;
		}
		snprintf(why, whylen, "exclusive = yes");
		return 0;
	}
	if (fo->blkdev) {
		snprintf(why, whylen, "block device cannot prove it unchanged (exclusive = yes?)");
		return -ESTALE;
	}
	if (!fo->fs_stamps) {
		snprintf(why, whylen, "filesystem 0x%lx cannot prove it unchanged", fo->fs_type);
		return -ESTALE;
	}
	if (origin_file_stamp_parse(proof, &was)) {
		snprintf(why, whylen, "not a file proof");
		return -ESTALE;
	}
	/* As found at open, before this origin's own probe moved ctime ... */
	d = origin_file_stamp_diff(&was, &fo->opened);
	if (d) {
		snprintf(why, whylen, "%s", d);
		return -ESTALE;
	}
	/* ... and nobody changed it since. */
	if (fstat(fo->fd, &st)) {
		snprintf(why, whylen, "fstat: %s", strerror(errno));
		return -ESTALE;
	}
	origin_file_stamp_of(&st, &now);
	d = origin_file_stamp_diff(&fo->settled, &now);
	if (d) {
		snprintf(why, whylen, "%s since open", d);
		return -ESTALE;
	}
	snprintf(why, whylen, "file unchanged");
	return 0;
}

/* ---- identity: what the open file is (alias_key.c keys a path alike) ---- */

int origin_file_data_id(struct hl_origin *o, char *buf, size_t len, bool *lasting)
{
	struct stat st;

	*lasting = false; /* NFS and FUSE number their devices at mount */
	if (fstat(fo_of(o)->fd, &st))
		return -EOPNOTSUPP;
	return origin_file_stat_key(&st, buf, len) ? -EOPNOTSUPP : 0;
}
