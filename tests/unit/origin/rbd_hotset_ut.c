/*
 * rbd_hotset_ut.c - the owner's hot set of an rbd image (rbd_hotset.c;
 * docs/gateways.md, "Warm standby") against a real single-node Ceph that
 * this test starts and stops itself (tests/functional/mini_ceph.sh; exit
 * 77, skipped, where Ceph is not installed). One image opened twice, as
 * gateways 1 and 2 (a client each, as two hosts):
 *  - only the owner publishes; a standby reads exactly what it published,
 *    and the mark it names proves the image unchanged since;
 *  - each new mark carries the owner's own diff since the previous one:
 *    exactly the 4 KiB written, not the object; the owner keeps two marks;
 *  - an owner the cluster fenced (a forced takeover blocklisted it) cannot
 *    write the hot set any more: standbys keep reading the last good one.
 * The tests run in order.
 */
#include "config.h"

#include "ceph_ut_util.h"
#include "origin_ut_util.h"

#include <sys/wait.h>

#define BLK 4096u
#define FAR (8u << 20) /* another rbd object than block 0's */

static struct hl_origin *g1, *g2;

static int write_fill(struct hl_origin *o, uint64_t off, uint8_t v)
{
	uint8_t buf[BLK];

	memset(buf, v, sizeof(buf));
	return ut_io(o, HL_IO_WRITE, off, buf, sizeof(buf));
}

static int acquire(struct hl_origin *o, uint16_t gw, uint64_t epoch, bool force)
{
	char why[HL_ORIGIN_WHY_MAX];
	int rc = o->ops->own_acquire(o, gw, epoch, force, why, sizeof(why));

	if (rc)
		printf("\n    gateway %u acquire: %s (%s)", gw, strerror(-rc), why);
	return rc;
}

static struct hl_origin *open_gw(uint16_t gw)
{
	struct hl_origin_opts opts = {.rbd_conf = conf, .gateway = gw};
	struct hl_origin *o = NULL;

	CU_ASSERT_EQUAL_FATAL(hl_origin_open("rbd:rbd/origin", &opts, &o), 0);
	return o;
}

/* how many shadow marks the image carries */
static int shadow_marks(void)
{
	char cmd[256];
	int n = -1;

	snprintf(cmd, sizeof(cmd), "rbd --conf %s snap ls rbd/origin 2>/dev/null | grep -c hotlun-shadow-",
	         conf);
	FILE *f = popen(cmd, "r");
	if (!f)
		return -1;
	if (fscanf(f, "%d", &n) != 1)
		n = -1;
	pclose(f);
	return n;
}

static void set_free(struct hl_hot_set *hs)
{
	free(hs->v);
	free(hs->chg);
	memset(hs, 0, sizeof(*hs));
}

static const struct hl_hot_ent hot3[] = {{7, 40}, {1, 9}, {1000, 1}};

struct changed {
	uint64_t extents, bytes;
};

static void changed_cb(void *arg, uint64_t off, uint64_t len)
{
	struct changed *c = arg;

	(void)off;
	c->extents++;
	c->bytes += len;
}

static char mark1[HL_ORIGIN_PROOF_MAX];

/* leaves: 1 owns the image (epoch 1) and has published hot3 with mark1 */
static void test_owner_publishes_standby_reads(void)
{
	struct hl_hot_set hs;
	struct changed c = {0};
	char why[HL_ORIGIN_WHY_MAX];

	g1 = open_gw(1);
	g2 = open_gw(2);
	CU_ASSERT_EQUAL(hl_origin_hot_publish(g1, 65536, hot3, 3), -EAGAIN); /* not ours */
	CU_ASSERT_EQUAL(hl_origin_hot_fetch(g2, &hs), -ENOENT);
	CU_ASSERT_EQUAL_FATAL(acquire(g1, 1, 1, false), 0);
	CU_ASSERT_EQUAL(write_fill(g1, FAR, 0x11), 0); /* the object exists before any mark */
	CU_ASSERT_EQUAL(hl_origin_hot_publish(g1, 65536, hot3, 3), 0);
	CU_ASSERT_EQUAL_FATAL(hl_origin_hot_fetch(g2, &hs), 0);
	CU_ASSERT_EQUAL(hs.owner, 1);
	CU_ASSERT_EQUAL(hs.block_size, 65536);
	CU_ASSERT_EQUAL_FATAL(hs.n, 3);
	for (int i = 0; i < 3; i++) {
		CU_ASSERT_EQUAL(hs.v[i].block, hot3[i].block);
		CU_ASSERT_EQUAL(hs.v[i].freq, hot3[i].freq);
	}
	CU_ASSERT_PTR_NOT_NULL(strstr(hs.mark, ":hotlun-shadow-g1-"));
	CU_ASSERT_STRING_EQUAL(hs.prev, "");
	CU_ASSERT_EQUAL(hs.nchg, 0);
	snprintf(mark1, sizeof(mark1), "%s", hs.mark);
	/* an idle owner: the same hot set again is not written (the object keeps its seq) */
	struct hl_hot_set hs2;
	struct hl_hot_ent hot3b[3];
	CU_ASSERT_EQUAL(hl_origin_hot_publish(g1, 65536, hot3, 3), 0);
	CU_ASSERT_EQUAL_FATAL(hl_origin_hot_fetch(g2, &hs2), 0);
	CU_ASSERT_EQUAL(hs2.seq, hs.seq);
	set_free(&hs2);
	/* one frequency changed: written (same mark) */
	memcpy(hot3b, hot3, sizeof(hot3b));
	hot3b[2].freq++;
	CU_ASSERT_EQUAL(hl_origin_hot_publish(g1, 65536, hot3b, 3), 0);
	CU_ASSERT_EQUAL_FATAL(hl_origin_hot_fetch(g2, &hs2), 0);
	CU_ASSERT_EQUAL(hs2.seq, hs.seq + 1);
	CU_ASSERT_EQUAL(hs2.v[2].freq, hot3b[2].freq);
	CU_ASSERT_STRING_EQUAL(hs2.mark, mark1);
	set_free(&hs2);
	/* the mark proves the image unchanged since (the standby checks it without the lock) */
	CU_ASSERT_EQUAL(hl_origin_proof_check(g2, "x", hs.mark, changed_cb, &c, why, sizeof(why)),
	                0);
	printf("\n    %s", why);
	CU_ASSERT_EQUAL(c.bytes, 0);
	set_free(&hs);
	CU_ASSERT_EQUAL(shadow_marks(), 1);
}

/* leaves: 1 owns; the image carries two shadow marks */
static void test_new_mark_carries_owner_diff(void)
{
	struct hl_hot_set hs;
	char mark2[HL_ORIGIN_PROOF_MAX];
	uint64_t bytes = 0;
	bool covers = false;

	setenv("HOTLUN_SHADOW_MARK_S", "0", 1); /* a mark at every publication */
	CU_ASSERT_EQUAL(write_fill(g1, FAR, 0x22), 0);
	CU_ASSERT_EQUAL(hl_origin_hot_publish(g1, 65536, hot3, 2), 0);
	CU_ASSERT_EQUAL_FATAL(hl_origin_hot_fetch(g2, &hs), 0);
	CU_ASSERT_EQUAL(hs.n, 2);
	CU_ASSERT_STRING_EQUAL(hs.prev, mark1);
	CU_ASSERT_STRING_NOT_EQUAL(hs.mark, mark1);
	CU_ASSERT(hs.nchg >= 1);
	for (uint32_t i = 0; i < hs.nchg; i++) {
		bytes += hs.chg[i].len;
		if (hs.chg[i].off <= FAR && hs.chg[i].off + hs.chg[i].len >= FAR + BLK)
			covers = true;
	}
	printf("\n    the owner's diff since the previous mark: %u range(s), %llu bytes", hs.nchg,
	       (unsigned long long)bytes);
	CU_ASSERT_TRUE(covers);
	CU_ASSERT(bytes < (4u << 20)); /* exact extents, not the 4 MiB object */
	snprintf(mark2, sizeof(mark2), "%s", hs.mark);
	set_free(&hs);
	/* a third mark: the oldest goes, two stay */
	CU_ASSERT_EQUAL(hl_origin_hot_publish(g1, 65536, hot3, 1), 0);
	CU_ASSERT_EQUAL_FATAL(hl_origin_hot_fetch(g2, &hs), 0);
	CU_ASSERT_STRING_EQUAL(hs.prev, mark2);
	CU_ASSERT_EQUAL(hs.nchg, 0); /* nothing written since mark2 */
	set_free(&hs);
	CU_ASSERT_EQUAL(shadow_marks(), 2);
	unsetenv("HOTLUN_SHADOW_MARK_S");
}

/* leaves: 2 owns the image (epoch 2); 1 fenced */
static void test_fenced_owner_cannot_publish(void)
{
	struct hl_hot_set hs, hs2;
	struct hl_own_info info;

	CU_ASSERT_EQUAL_FATAL(hl_origin_hot_fetch(g2, &hs), 0);
	CU_ASSERT_EQUAL_FATAL(acquire(g2, 2, 2, true), 0); /* 1 "hangs": broken and blocklisted */
	/* 1 still believes it owns the image: its publication is refused by the cluster */
	CU_ASSERT_NOT_EQUAL(hl_origin_hot_publish(g1, 65536, hot3, 3), 0);
	CU_ASSERT_EQUAL_FATAL(hl_origin_hot_fetch(g2, &hs2), 0);
	CU_ASSERT_EQUAL(hs2.seq, hs.seq);
	CU_ASSERT_EQUAL(hs2.owner, 1);
	set_free(&hs);
	set_free(&hs2);
	/* the new owner publishes; 1, back as a standby (a new client), reads it */
	CU_ASSERT_EQUAL(hl_origin_hot_publish(g2, 4096, hot3, 3), 0);
	CU_ASSERT_EQUAL(g1->ops->own_peek(g1, &info), 0);
	CU_ASSERT_EQUAL(info.owner, 2);
	CU_ASSERT_EQUAL_FATAL(hl_origin_hot_fetch(g1, &hs), 0);
	CU_ASSERT_EQUAL(hs.owner, 2);
	CU_ASSERT_EQUAL(hs.block_size, 4096);
	CU_ASSERT_PTR_NOT_NULL(strstr(hs.mark, ":hotlun-shadow-g2-"));
	set_free(&hs);
}

static void test_close(void)
{
	hl_origin_close(g1);
	hl_origin_close(g2);
	g1 = g2 = NULL;
}

static const struct hl_test tests[] = {
    {"only the owner publishes; a standby reads it and its mark", test_owner_publishes_standby_reads},
    {"a new mark carries the owner's exact diff; two marks kept", test_new_mark_carries_owner_diff},
    {"a fenced owner cannot publish", test_fenced_owner_cannot_publish},
    {"close", test_close},
    {NULL, NULL},
};

/* a fatal assertion left them open: close before the cluster goes */
static void close_left(void)
{
	hl_origin_close(g1);
	hl_origin_close(g2);
}

int main(void)
{
	return ceph_ut_main("rbd_hotset", tests, close_left);
}
