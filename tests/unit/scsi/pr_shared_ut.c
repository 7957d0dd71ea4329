/*
 * pr_shared_ut.c - persistent reservations shared by two gateways
 * (src/scsi/pr_shared.c): two LUs, one per gateway (relative ports 257 and
 * 513), keep their reservations in one fake store that tells both LUs of
 * every commit and waits for their answers, as the rbd store does with
 * watch/notify. Commands run through hl_scsi_cmd_exec; the transactions
 * complete on each LU's store thread, so every command is waited for.
 */
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "scsi_ut_util.h"

enum { WE = 1, EA = 3, WE_RO = 5, EA_RO = 6, WE_AR = 7, EA_AR = 8 };
enum { REG = 0, RESV = 1, REL = 2, CLEAR = 3, PREEMPT = 4, PREEMPT_ABORT = 5, REG_IGNORE = 6 };
#define CONFLICT HL_SAM_RESERVATION_CONFLICT
#define GOOD     HL_SAM_GOOD

/* ---- the fake store ---- */

#define MAX_OUT 64

struct fake_store {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	char *text;
	size_t len;
	uint64_t seq;
	struct hl_lu *gw[2];
	bool deaf[2];          /* notices to gateway i are lost */
	bool stale;            /* current() says no to everyone */
	int fail;              /* load and commit fail with this */
	uint64_t out[MAX_OUT]; /* cookies not answered yet */
	uint64_t next_cookie;
	unsigned commits, cancels;
};

static struct fake_store store = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};

struct store_arg {
	int gw;
};
static struct store_arg args[2] = {{0}, {1}};

static int fs_load(void *arg, char **text, size_t *len)
{
	(void)arg;
	pthread_mutex_lock(&store.mu);
	int rc = store.fail;
	if (!rc) {
		*text = malloc(store.len + 1);
		if (*text) {
			memcpy(*text, store.text ? store.text : "", store.len);
			(*text)[store.len] = '\0';
			*len = store.len;
		} else {
			rc = -ENOMEM;
		}
	}
	pthread_mutex_unlock(&store.mu);
	return rc;
}

static bool outstanding(const uint64_t *mine, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		for (unsigned j = 0; j < MAX_OUT; j++)
			if (mine[i] && store.out[j] == mine[i])
				return true;
	return false;
}

static int fs_commit(void *arg, uint64_t old_seq, uint64_t new_seq, const char *text, size_t len)
{
	uint64_t mine[2] = {0, 0};

	(void)arg;
	pthread_mutex_lock(&store.mu);
	if (store.fail) {
		pthread_mutex_unlock(&store.mu);
		return store.fail;
	}
	if (store.seq != old_seq) {
		store.cancels++;
		pthread_mutex_unlock(&store.mu);
		return -ECANCELED;
	}
	free(store.text);
	store.text = malloc(len);
	memcpy(store.text, text, len);
	store.len = len;
	store.seq = new_seq;
	store.commits++;
	for (int g = 0; g < 2; g++) {
		if (!store.gw[g] || store.deaf[g])
			continue;
		mine[g] = ++store.next_cookie;
		for (unsigned j = 0; j < MAX_OUT; j++)
			if (!store.out[j]) {
				store.out[j] = mine[g];
				break;
			}
	}
	pthread_mutex_unlock(&store.mu);
	/* the notice, as a watch callback would get it (on another thread there) */
	for (int g = 0; g < 2; g++)
		if (mine[g])
			hl_lu_pr_changed(store.gw[g], mine[g]);
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 5;
	pthread_mutex_lock(&store.mu);
	while (outstanding(mine, 2))
		if (pthread_cond_timedwait(&store.cv, &store.mu, &dl))
			break;
	pthread_mutex_unlock(&store.mu);
	return 0;
}

static void fs_applied(void *arg, uint64_t cookie, uint64_t seq)
{
	(void)arg;
	(void)seq;
	pthread_mutex_lock(&store.mu);
	for (unsigned j = 0; j < MAX_OUT; j++)
		if (cookie && store.out[j] == cookie)
			store.out[j] = 0;
	pthread_cond_broadcast(&store.cv);
	pthread_mutex_unlock(&store.mu);
}

static bool fs_current(void *arg, uint64_t seq)
{
	(void)arg;
	pthread_mutex_lock(&store.mu);
	bool r = !store.stale && seq >= store.seq;
	pthread_mutex_unlock(&store.mu);
	return r;
}

static const struct hl_lu_pr_store fs_ops = {fs_load, fs_commit, fs_applied, fs_current};

/* ---- the aborter: records, answers at once or when told ---- */

static struct {
	pthread_mutex_t mu;
	bool hold;
	unsigned calls;
	struct hl_lu *lu;
	uint64_t ids[8];
	unsigned n;
	void (*done)(void *);
	void *done_arg;
} ab = {PTHREAD_MUTEX_INITIALIZER};

static int fake_abort(void *arg, struct hl_lu *l, const uint64_t *ids, unsigned n,
                      void (*done)(void *), void *done_arg)
{
	(void)arg;
	pthread_mutex_lock(&ab.mu);
	ab.calls++;
	ab.lu = l;
	ab.n = n < 8 ? n : 8;
	memcpy(ab.ids, ids, ab.n * sizeof(ids[0]));
	bool hold = ab.hold;
	if (hold) {
		ab.done = done;
		ab.done_arg = done_arg;
	}
	pthread_mutex_unlock(&ab.mu);
	if (!hold)
		done(done_arg);
	return 0;
}

static const struct hl_scsi_aborter aborter = {fake_abort, NULL};

/* ---- two gateways ---- */

static const struct hl_scsi_port gw1_port = {.name = "t,t,0x1", .rel_port_id = 257, .tpg_id = 1};
static const struct hl_scsi_port gw2_port = {.name = "t,t,0x1", .rel_port_id = 513, .tpg_id = 2};
/* initiator A through gateway 1 (and 2), initiator B through gateway 2 (and 1) */
static struct hl_scsi_nexus a1 = {
    .id = 11, .initiator_port = "iqn.2026-11.test:a,i,0x000000000001", .port = &gw1_port};
static struct hl_scsi_nexus a2 = {
    .id = 12, .initiator_port = "iqn.2026-11.test:a,i,0x000000000001", .port = &gw2_port};
static struct hl_scsi_nexus b1 = {
    .id = 21, .initiator_port = "iqn.2026-11.test:b,i,0x000000000002", .port = &gw1_port};
static struct hl_scsi_nexus b2 = {
    .id = 22, .initiator_port = "iqn.2026-11.test:b,i,0x000000000002", .port = &gw2_port};

static struct hl_lu *lu2;
static struct hl_origin *origin2;
static struct hl_scsi_lun_map map2;

static struct hl_lu *lu_of(const struct hl_scsi_nexus *n)
{
	return n->port == &gw1_port ? lu : lu2;
}

/* Run one CDB for n on its gateway's LU and wait for its answer. */
static void exec_wait(struct tcmd *t, const struct hl_scsi_nexus *n, const uint8_t *cdb,
                      unsigned cdb_len, uint8_t *buf, uint32_t len, bool out)
{
	struct hl_lu *l = lu_of(n);

	memset(t, 0, sizeof(*t));
	t->cmd.map = l == lu ? &map : &map2;
	t->cmd.lun = 0;
	t->cmd.lu = l;
	t->cmd.nexus = n;
	memcpy(t->cmd.cdb, cdb, cdb_len);
	t->cmd.cdb_len = 16 > cdb_len ? 16 : (uint8_t)cdb_len;
	t->cmd.data = buf;
	t->cmd.data_len = len;
	t->cmd.data_out = out && len;
	t->cmd.data_in = !out && len;
	t->cmd.done = tcmd_done;
	hl_scsi_cmd_exec(&t->cmd);
	for (int i = 0; i < 5000 && !__atomic_load_n(&t->done, __ATOMIC_ACQUIRE); i++) {
		fake_drain(l == lu ? origin : origin2);
		usleep(1000);
	}
	CU_ASSERT_EQUAL(__atomic_load_n(&t->done, __ATOMIC_ACQUIRE), 1);
}

static struct tcmd t;

static uint8_t pr_out_p(const struct hl_scsi_nexus *n, uint8_t sa, uint8_t type, uint64_t key,
                        uint64_t sa_key, uint8_t byte20)
{
	uint8_t cdb[10] = {0x5f, sa, type};
	uint8_t param[24] = {0};

	hl_put_be32(cdb + 5, 24);
	hl_put_be64(param, key);
	hl_put_be64(param + 8, sa_key);
	param[20] = byte20;
	exec_wait(&t, n, cdb, 10, param, sizeof(param), true);
	return t.cmd.status;
}

static uint8_t pr_out(const struct hl_scsi_nexus *n, uint8_t sa, uint8_t type, uint64_t key,
                      uint64_t sa_key)
{
	return pr_out_p(n, sa, type, key, sa_key, 0);
}

static void pr_in(const struct hl_scsi_nexus *n, uint8_t sa, uint8_t *buf, uint16_t alloc)
{
	uint8_t cdb[10] = {0x5e, sa};

	hl_put_be16(cdb + 7, alloc);
	memset(buf, 0, alloc);
	exec_wait(&t, n, cdb, 10, buf, alloc, false);
	CU_ASSERT_EQUAL(t.cmd.status, GOOD);
}

static uint8_t simple(const struct hl_scsi_nexus *n, uint8_t op)
{
	uint8_t cdb[16] = {op};

	exec_wait(&t, n, cdb, 16, NULL, 0, false);
	return t.cmd.status;
}

static uint8_t do_write(const struct hl_scsi_nexus *n)
{
	uint8_t cdb[10], buf[BS] = {0};

	cdb_rw10(cdb, 0x2a, 0, 1);
	exec_wait(&t, n, cdb, 10, buf, BS, true);
	return t.cmd.status;
}

static uint8_t do_read(const struct hl_scsi_nexus *n)
{
	uint8_t cdb[10], buf[BS];

	cdb_rw10(cdb, 0x28, 0, 1);
	exec_wait(&t, n, cdb, 10, buf, BS, false);
	return t.cmd.status;
}

static bool ua_is(const struct hl_scsi_nexus *n, uint8_t asc, uint8_t ascq)
{
	simple(n, 0x00);
	return sense_is(&t.cmd, HL_SK_UNIT_ATTENTION, asc, ascq);
}

/* Two gateways' LUs over one fresh store; every nexus has heard its POWER ON. */
static void setup(void)
{
	pthread_mutex_lock(&store.mu);
	free(store.text);
	store.text = NULL;
	store.len = 0;
	store.seq = 0;
	store.gw[0] = store.gw[1] = NULL;
	store.deaf[0] = store.deaf[1] = false;
	store.stale = false;
	store.fail = 0;
	memset(store.out, 0, sizeof(store.out));
	store.commits = store.cancels = 0;
	pthread_mutex_unlock(&store.mu);
	memset(&ab.ids, 0, sizeof(ab.ids));
	ab.calls = ab.n = 0;
	ab.hold = false;
	hl_scsi_set_aborter(&aborter);

	lu_setup_cfg(test_cfg(), (uint64_t)NBLOCKS * BS, 0);
	memset(&map2, 0, sizeof(map2));
	origin2 = fake_origin_new((uint64_t)NBLOCKS * BS, true);
	CU_ASSERT_PTR_NOT_NULL_FATAL(origin2);
	struct hl_lu_config cfg = test_cfg();
	cfg.name = "d0-gw2";
	CU_ASSERT_EQUAL_FATAL(hl_lu_create(&cfg, origin2, &lu2), 0);
	map2.lu[0] = lu2;
	CU_ASSERT_EQUAL_FATAL(hl_lu_set_pr_store(lu, &fs_ops, &args[0]), 0);
	CU_ASSERT_EQUAL_FATAL(hl_lu_set_pr_store(lu2, &fs_ops, &args[1]), 0);
	pthread_mutex_lock(&store.mu);
	store.gw[0] = lu;
	store.gw[1] = lu2;
	pthread_mutex_unlock(&store.mu);
	simple(&a1, 0x00);
	simple(&a2, 0x00);
	simple(&b1, 0x00);
	simple(&b2, 0x00);
}

static void teardown(void)
{
	pthread_mutex_lock(&store.mu);
	store.gw[0] = store.gw[1] = NULL;
	pthread_mutex_unlock(&store.mu);
	hl_lu_destroy(lu2);
	lu2 = NULL;
	origin2 = NULL;
	lu_teardown();
	hl_scsi_set_aborter(NULL);
}

/* Registrations through one gateway, the reservation and its effect seen through both. */
static void test_one_state_for_both_gateways(void)
{
	uint8_t buf[512];

	setup();
	CU_ASSERT_EQUAL(pr_out(&a1, REG, 0, 0, 0xa), GOOD);
	CU_ASSERT_EQUAL(pr_out(&b2, REG, 0, 0, 0xb), GOOD);
	CU_ASSERT_EQUAL(pr_out(&a1, RESV, WE, 0xa, 0), GOOD);
	/* READ KEYS and READ RESERVATION agree on both gateways */
	for (int g = 0; g < 2; g++) {
		pr_in(g ? &b2 : &b1, 0, buf, sizeof(buf));
		CU_ASSERT_EQUAL(hl_get_be32(buf), 2);
		CU_ASSERT_EQUAL(hl_get_be32(buf + 4), 16);
		CU_ASSERT_EQUAL(hl_get_be64(buf + 8), 0xa);
		CU_ASSERT_EQUAL(hl_get_be64(buf + 16), 0xb);
		pr_in(g ? &b2 : &b1, 1, buf, sizeof(buf));
		CU_ASSERT_EQUAL(hl_get_be64(buf + 8), 0xa);
		CU_ASSERT_EQUAL(buf[21], WE);
	}
	/* READ FULL STATUS through gateway 2 names gateway 1's relative port for A */
	pr_in(&b2, 3, buf, sizeof(buf));
	CU_ASSERT_EQUAL(hl_get_be16(buf + 8 + 18), 257);
	CU_ASSERT_EQUAL(buf[8 + 12] & 1, 1);
	const uint8_t *d = buf + 8 + 24 + hl_get_be32(buf + 8 + 20);
	CU_ASSERT_EQUAL(hl_get_be16(d + 18), 513);
	/* the holder is A through gateway 1 only: A through gateway 2 is not registered */
	CU_ASSERT_EQUAL(do_write(&a1), GOOD);
	CU_ASSERT_EQUAL(do_write(&a2), CONFLICT);
	CU_ASSERT_EQUAL(do_write(&b2), CONFLICT);
	CU_ASSERT_EQUAL(do_read(&b2), GOOD);
	/* the reservation is released through gateway 1; B may write on gateway 2 */
	CU_ASSERT_EQUAL(pr_out(&a1, REL, WE, 0xa, 0), GOOD);
	CU_ASSERT_EQUAL(do_write(&b2), GOOD);
	/* a CLEAR through gateway 2 reaches A's nexus on gateway 1 */
	CU_ASSERT_EQUAL(pr_out(&b2, CLEAR, 0, 0xb, 0), GOOD);
	CU_ASSERT_TRUE(ua_is(&a1, 0x2a, 0x03));
	CU_ASSERT_FALSE(ua_is(&b2, 0x2a, 0x03)); /* not the issuer */
	pr_in(&a1, 0, buf, sizeof(buf));
	CU_ASSERT_EQUAL(hl_get_be32(buf + 4), 0);
	teardown();
}

/* ALL_TG_PT: one registration for both gateways' ports; every type's access through both. */
static void test_all_target_ports(void)
{
	setup();
	CU_ASSERT_EQUAL(pr_out_p(&a1, REG, 0, 0, 0xa, 0x04), GOOD); /* ALL_TG_PT */
	CU_ASSERT_EQUAL(pr_out(&b1, REG, 0, 0, 0xb), GOOD);
	CU_ASSERT_EQUAL(pr_out(&a2, RESV, EA_RO, 0xa, 0), GOOD); /* through the other gateway */
	CU_ASSERT_EQUAL(do_write(&a1), GOOD);
	CU_ASSERT_EQUAL(do_write(&a2), GOOD);
	CU_ASSERT_EQUAL(do_write(&b1), GOOD);    /* registrants only: B registered on gw 1 */
	CU_ASSERT_EQUAL(do_read(&b2), CONFLICT); /* ... not on gw 2 */
	CU_ASSERT_EQUAL(pr_out(&b1, PREEMPT, WE_AR, 0xb, 0xa), GOOD);
	CU_ASSERT_TRUE(ua_is(&a1, 0x2a, 0x05));
	CU_ASSERT_TRUE(ua_is(&a2, 0x2a, 0x05));
	CU_ASSERT_EQUAL(do_write(&a2), CONFLICT);
	CU_ASSERT_EQUAL(do_read(&a2), GOOD);
	teardown();
}

/*
 * PREEMPT AND ABORT through gateway 2: A's tasks are aborted on gateway 1
 * and the command completes only after they are gone.
 */
static void test_preempt_and_abort_across(void)
{
	struct tcmd pa;
	uint8_t cdb[10] = {0x5f, PREEMPT_ABORT, EA}, param[24] = {0};

	setup();
	CU_ASSERT_EQUAL(pr_out(&a1, REG, 0, 0, 0xa), GOOD);
	CU_ASSERT_EQUAL(pr_out(&b2, REG, 0, 0, 0xb), GOOD);
	CU_ASSERT_EQUAL(pr_out(&a1, RESV, WE, 0xa, 0), GOOD);
	CU_ASSERT_EQUAL(ab.calls, 0);
	ab.hold = true;
	hl_put_be32(cdb + 5, 24);
	hl_put_be64(param, 0xb);
	hl_put_be64(param + 8, 0xa);
	memset(&pa, 0, sizeof(pa));
	pa.cmd.map = &map2;
	pa.cmd.lu = lu2;
	pa.cmd.nexus = &b2;
	memcpy(pa.cmd.cdb, cdb, 10);
	pa.cmd.cdb_len = 16;
	pa.cmd.data = param;
	pa.cmd.data_len = 24;
	pa.cmd.data_out = true;
	pa.cmd.done = tcmd_done;
	hl_scsi_cmd_exec(&pa.cmd);
	for (int i = 0; i < 2000; i++) {
		pthread_mutex_lock(&ab.mu);
		bool called = ab.done != NULL;
		pthread_mutex_unlock(&ab.mu);
		if (called)
			break;
		usleep(1000);
	}
	pthread_mutex_lock(&ab.mu);
	CU_ASSERT_EQUAL(ab.calls, 1);
	CU_ASSERT_PTR_EQUAL(ab.lu, lu);
	CU_ASSERT_EQUAL(ab.n, 1);
	CU_ASSERT_EQUAL(ab.ids[0], a1.id);
	void (*done)(void *) = ab.done;
	void *done_arg = ab.done_arg;
	ab.done = NULL;
	pthread_mutex_unlock(&ab.mu);
	usleep(100000);
	CU_ASSERT_EQUAL(__atomic_load_n(&pa.done, __ATOMIC_ACQUIRE), 0); /* waits for the abort */
	CU_ASSERT_PTR_NOT_NULL_FATAL(done);
	done(done_arg);
	for (int i = 0; i < 5000 && !__atomic_load_n(&pa.done, __ATOMIC_ACQUIRE); i++)
		usleep(1000);
	CU_ASSERT_EQUAL(pa.done, 1);
	CU_ASSERT_EQUAL(pa.cmd.status, GOOD);
	CU_ASSERT_EQUAL(pa.cmd.n_abort_nexus, 0); /* aborted through the aborter, not the list */
	ab.hold = false;
	CU_ASSERT_TRUE(ua_is(&a1, 0x2a, 0x05));
	CU_ASSERT_EQUAL(do_write(&a1), CONFLICT);
	CU_ASSERT_EQUAL(do_write(&b2), GOOD);
	teardown();
}

/* A copy the store does not vouch for: media commands BUSY, PR IN reads the record. */
static void test_stale_copy(void)
{
	uint8_t buf[64];

	setup();
	CU_ASSERT_EQUAL(pr_out(&a1, REG, 0, 0, 0xa), GOOD);
	CU_ASSERT_EQUAL(pr_out(&a1, RESV, EA, 0xa, 0), GOOD);
	/* gateway 2 misses a change: the RELEASE made through gateway 1 */
	pthread_mutex_lock(&store.mu);
	store.deaf[1] = true;
	pthread_mutex_unlock(&store.mu);
	CU_ASSERT_EQUAL(pr_out(&a1, REL, EA, 0xa, 0), GOOD);
	CU_ASSERT_EQUAL(do_read(&b2), HL_SAM_BUSY); /* its copy still says reserved */
	CU_ASSERT_EQUAL(simple(&b2, 0x00), GOOD);   /* INFO commands need no current copy */
	pr_in(&b2, 1, buf, sizeof(buf));            /* from the record: not reserved */
	CU_ASSERT_EQUAL(hl_get_be32(buf + 4), 0);
	CU_ASSERT_EQUAL(do_read(&b2), GOOD); /* the PR IN brought the copy up to date */
	/* the store's own check catches up the same way */
	CU_ASSERT_EQUAL(pr_out(&a1, RESV, WE, 0xa, 0), GOOD);
	CU_ASSERT_EQUAL(do_write(&b2), HL_SAM_BUSY);
	hl_lu_pr_changed(lu2, 0);
	CU_ASSERT_EQUAL(do_write(&b2), CONFLICT);
	/* a store that vouches for nobody */
	pthread_mutex_lock(&store.mu);
	store.stale = true;
	pthread_mutex_unlock(&store.mu);
	CU_ASSERT_EQUAL(do_write(&a1), HL_SAM_BUSY);
	teardown();
}

/* A gateway that missed more changes than the history holds still hears what changed for it. */
static void test_missed_history(void)
{
	setup();
	CU_ASSERT_EQUAL(pr_out(&a1, REG, 0, 0, 0xa), GOOD);
	pthread_mutex_lock(&store.mu);
	store.deaf[0] = true;
	pthread_mutex_unlock(&store.mu);
	CU_ASSERT_EQUAL(pr_out(&b2, REG, 0, 0, 0xb), GOOD);
	for (int i = 0; i < SCSI_PR_HISTORY + 2; i++)
		CU_ASSERT_EQUAL(pr_out(&b2, REG, 0, 0xb + (uint64_t)i, 0xb + (uint64_t)i + 1),
		                GOOD);
	CU_ASSERT_EQUAL(pr_out(&b2, PREEMPT, WE, 0xb + SCSI_PR_HISTORY + 2, 0xa), GOOD);
	hl_lu_pr_changed(lu, 0);
	CU_ASSERT_TRUE(ua_is(&a1, 0x2a, 0x05));
	CU_ASSERT_EQUAL(do_write(&a1), GOOD); /* current again; nothing reserved */
	/* and within the history, from the recorded effects: B preempted through gateway 1 */
	pthread_mutex_lock(&store.mu);
	store.deaf[0] = false;
	store.deaf[1] = true;
	pthread_mutex_unlock(&store.mu);
	CU_ASSERT_EQUAL(pr_out(&a1, REG, 0, 0, 0xaa), GOOD);
	CU_ASSERT_EQUAL(pr_out(&a1, PREEMPT, EA, 0xaa, 0xb + SCSI_PR_HISTORY + 2), GOOD);
	hl_lu_pr_changed(lu2, 0);
	CU_ASSERT_TRUE(ua_is(&b2, 0x2a, 0x05));
	CU_ASSERT_FALSE(ua_is(&b2, 0x2a, 0x05));
	teardown();
}

/* SPC-2 RESERVE through one gateway bars the other's nexuses; nexus loss ends it. */
static void test_reserve6_across(void)
{
	setup();
	CU_ASSERT_EQUAL(simple(&a1, 0x16), GOOD);
	CU_ASSERT_EQUAL(do_read(&b2), CONFLICT);
	CU_ASSERT_EQUAL(do_read(&a2), CONFLICT); /* another I_T nexus of A */
	CU_ASSERT_EQUAL(simple(&b2, 0x16), CONFLICT);
	CU_ASSERT_EQUAL(do_read(&a1), GOOD);
	/* persistent registrations conflict with it, and it with them (CRH) */
	CU_ASSERT_EQUAL(pr_out(&b2, REG, 0, 0, 0xb), CONFLICT);
	hl_scsi_nexus_gone(&map, &a1);
	for (int i = 0; i < 2000 && do_read(&b2) != GOOD; i++)
		usleep(1000);
	CU_ASSERT_EQUAL(do_read(&b2), GOOD);
	CU_ASSERT_EQUAL(simple(&b2, 0x16), GOOD);
	hl_lu_reset(lu, NULL); /* a LUN reset through the other gateway ends it too */
	bool held = true;
	for (int i = 0; i < 2000 && held; i++) {
		pthread_mutex_lock(&lu2->lock);
		held = lu2->pr.rsv2;
		pthread_mutex_unlock(&lu2->lock);
		usleep(1000);
	}
	CU_ASSERT_FALSE(held);
	while (simple(&b1, 0x00) != GOOD) /* the reset's unit attention */
		;
	CU_ASSERT_EQUAL(do_read(&b1), GOOD);
	CU_ASSERT_EQUAL(pr_out(&b2, REG, 0, 0, 0xb), GOOD);
	CU_ASSERT_EQUAL(simple(&a2, 0x16), CONFLICT);
	teardown();
}

/* The store failing: ABORTED COMMAND, LOGICAL UNIT COMMUNICATION FAILURE; nothing changes. */
static void test_store_failure(void)
{
	uint8_t buf[64];

	setup();
	pthread_mutex_lock(&store.mu);
	store.fail = -ETIMEDOUT;
	pthread_mutex_unlock(&store.mu);
	pr_out(&a1, REG, 0, 0, 0xa);
	CU_ASSERT_TRUE(sense_is(&t.cmd, HL_SK_ABORTED_COMMAND, 0x08, 0x00));
	pthread_mutex_lock(&store.mu);
	store.fail = 0;
	pthread_mutex_unlock(&store.mu);
	pr_in(&a2, 0, buf, sizeof(buf));
	CU_ASSERT_EQUAL(hl_get_be32(buf + 4), 0);
	teardown();
}

/*
 * A record at seq 2^64 - 1 (damaged): its next change would be seq 0, which
 * neither gateway takes as newer than its copy. The change is refused with
 * an error and the store keeps the record as it was.
 */
static void test_record_seq_at_max(void)
{
	static const char rec[] = "hotlun-pr 2\nseq 18446744073709551615\ngeneration 1\n"
	                          "type 0 -1\naptpl 0\nend\n";

	setup();
	pthread_mutex_lock(&store.mu);
	store.text = malloc(sizeof(rec) - 1);
	memcpy(store.text, rec, sizeof(rec) - 1);
	store.len = sizeof(rec) - 1;
	store.seq = UINT64_MAX;
	pthread_mutex_unlock(&store.mu);
	CU_ASSERT_NOT_EQUAL(pr_out(&a1, REG, 0, 0, 0xa), GOOD);
	CU_ASSERT_EQUAL(t.cmd.status, HL_SAM_CHECK_CONDITION);
	pthread_mutex_lock(&store.mu);
	CU_ASSERT_EQUAL(store.commits, 0);
	CU_ASSERT_EQUAL(store.seq, UINT64_MAX);
	CU_ASSERT_TRUE(store.len == sizeof(rec) - 1 && !memcmp(store.text, rec, store.len));
	pthread_mutex_unlock(&store.mu);
	teardown();
}

struct hammer {
	const struct hl_scsi_nexus *n;
	int id;
	unsigned good;
};

/* One client on one gateway: a run of REGISTER AND IGNORE / RESERVE / PREEMPT of the other. */
static void *hammer_main(void *arg)
{
	struct hammer *h = arg;
	struct tcmd c;
	uint8_t param[24];

	for (int i = 0; i < 100; i++) {
		uint8_t sa = i % 3 == 0 ? REG_IGNORE : i % 3 == 1 ? RESV : PREEMPT;
		uint8_t cdb[10] = {0x5f, sa, sa == REG_IGNORE ? 0 : WE};
		uint64_t mine = (uint64_t)(h->id + 1) << 32 | (uint64_t)(i / 3 + 1);
		memset(param, 0, sizeof(param));
		hl_put_be32(cdb + 5, 24);
		if (sa == REG_IGNORE) {
			hl_put_be64(param + 8, mine);
		} else {
			hl_put_be64(param, mine);
			hl_put_be64(param + 8, (uint64_t)(2 - h->id) << 32 | (uint64_t)(i / 3 + 1));
		}
		memset(&c, 0, sizeof(c));
		c.cmd.lu = lu_of(h->n);
		c.cmd.map = c.cmd.lu == lu ? &map : &map2;
		c.cmd.nexus = h->n;
		memcpy(c.cmd.cdb, cdb, 10);
		c.cmd.cdb_len = 16;
		c.cmd.data = param;
		c.cmd.data_len = 24;
		c.cmd.data_out = true;
		c.cmd.done = tcmd_done;
		hl_scsi_cmd_exec(&c.cmd);
		while (!__atomic_load_n(&c.done, __ATOMIC_ACQUIRE))
			usleep(200);
		h->good += c.cmd.status == GOOD;
	}
	return NULL;
}

/*
 * Concurrent PERSISTENT RESERVE OUT through both gateways: one history
 * (every change one commit, the generation counting each registration
 * change), and no registration lost.
 */
static void test_concurrent_changes(void)
{
	struct hammer h[2] = {{&a1, 0, 0}, {&b2, 1, 0}};
	pthread_t th[2];
	uint8_t buf[64];

	setup();
	for (int i = 0; i < 2; i++)
		CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, hammer_main, &h[i]), 0);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	/*
	 * A PREEMPT of one hammer after the other's last command leaves that
	 * nexus a unit attention (registrations or reservations preempted),
	 * which its next command, PERSISTENT RESERVE IN too, reports first
	 * (SPC-4): take them with TEST UNIT READY.
	 */
	for (int i = 0; i < 8 && simple(&a1, 0x00) != GOOD; i++)
		;
	for (int i = 0; i < 8 && simple(&b2, 0x00) != GOOD; i++)
		;
	pr_in(&a1, 0, buf, sizeof(buf));
	uint32_t gen = hl_get_be32(buf);
	pthread_mutex_lock(&store.mu);
	unsigned commits = store.commits;
	uint64_t seq = store.seq;
	pthread_mutex_unlock(&store.mu);
	/* one history: each change one commit, one step of the sequence number */
	CU_ASSERT_EQUAL(seq, commits);
	CU_ASSERT_TRUE(commits >= 60); /* the REGISTER AND IGNOREs at least */
	CU_ASSERT_TRUE(gen <= commits);
	CU_ASSERT_TRUE(commits <= h[0].good + h[1].good);
	/* both gateways answer the same generation */
	pr_in(&b2, 0, buf + 32, 32);
	CU_ASSERT_EQUAL(hl_get_be32(buf + 32), gen);
	/* no registration lost: both register last keys, both are there */
	CU_ASSERT_EQUAL(pr_out(&a1, REG_IGNORE, 0, 0, 0xaaaa), GOOD);
	CU_ASSERT_EQUAL(pr_out(&b2, REG_IGNORE, 0, 0, 0xbbbb), GOOD);
	pr_in(&b2, 0, buf, sizeof(buf));
	CU_ASSERT_EQUAL(hl_get_be32(buf + 4), 16);
	CU_ASSERT_EQUAL(hl_get_be64(buf + 8) + hl_get_be64(buf + 16), 0xaaaa + 0xbbbb);
	teardown();
}

/* A disk whose gateways cannot share reservations does not offer them. */
static void test_unshared(void)
{
	lu_setup();
	hl_lu_pr_unshared(lu);
	uint8_t cdb[10] = {0x5e, 0, 0, 0, 0, 0, 0, 0, 64, 0}, buf[64];
	run(&t, cdb, 10, buf, 64, false);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x20, 0x00);
	uint8_t res[6] = {0x16};
	run(&t, res, 6, NULL, 0, false);
	ASSERT_SENSE(t, HL_SK_ILLEGAL_REQUEST, 0x20, 0x00);
	uint8_t tur[6] = {0};
	run(&t, tur, 6, NULL, 0, false);
	ASSERT_GOOD(t);
	lu_teardown();
}

static const struct hl_test tests[] = {
    {"one state for both gateways", test_one_state_for_both_gateways},
    {"ALL_TG_PT across gateways", test_all_target_ports},
    {"PREEMPT AND ABORT across gateways", test_preempt_and_abort_across},
    {"a stale copy: BUSY, PR IN from the record", test_stale_copy},
    {"changes missed beyond the history", test_missed_history},
    {"RESERVE(6) across gateways", test_reserve6_across},
    {"the store failing", test_store_failure},
    {"a record whose next change would wrap", test_record_seq_at_max},
    {"concurrent changes through both gateways", test_concurrent_changes},
    {"unshared: reservation commands not offered", test_unshared},
    {NULL, NULL},
};

int main(void)
{
	hl_log_level = HL_LOG_ERR - 1;
	return hl_test_run("scsi-pr-shared", tests);
}
