/*
 * engine_proof_ut.c - the cache engine's proofs of the origin (warm restarts
 * that are never stale, issue 17), ownership and revalidation at a takeover,
 * and the warm standby's shadow (fixture in engine_ut_lib.h).
 */
#include "engine_ut_lib.h"

/* ---- warm restart proofs (issue 17) ---- */

static void test_proof_changed_origin_cold(void)
{
	struct fake f;
	struct hl_cache_engine_stats st;

	proof_warm(&f, 21, "fake:proof");
	/* Another client writes one byte while the cache is down. */
	fake_external(&f, 5 * BS + 100, 1, 0xee);
	f.reads = 0;
	proof_restart(&f, "fake:proof", &st);
	CU_ASSERT_EQUAL(st.warm_kept, 0);
	CU_ASSERT_EQUAL(st.warm_dropped, 8);
	CU_ASSERT(strstr(st.warm_start, "kept 0, dropped 8 (fake changed)") != NULL);
	CU_ASSERT_EQUAL(st.core.bytes_read_cache, 0);
	CU_ASSERT(f.reads > 0);
	dev_remove();
	free(f.mem);
}

static void test_proof_unchanged_warm(void)
{
	struct fake f;
	struct hl_cache_engine_stats st;

	proof_warm(&f, 22, "fake:proof");
	/* the map records the proof the clean stop took */
	{
		char line[256];
		bool v3 = false, proof = false;
		FILE *m = fopen(g_map, "r");
		CU_ASSERT_PTR_NOT_NULL_FATAL(m);
		while (fgets(line, sizeof(line), m)) {
			v3 |= !strcmp(line, "hotlun-cache-map 3\n");
			proof |= !strcmp(line, "proof 0 fake:0\n");
		}
		fclose(m);
		CU_ASSERT(v3);
		CU_ASSERT(proof);
	}
	f.reads = 0;
	proof_restart(&f, "fake:proof", &st);
	CU_ASSERT_EQUAL(st.warm_kept, 8);
	CU_ASSERT_EQUAL(st.warm_dropped, 0);
	CU_ASSERT_EQUAL(st.core.bytes_read_cache, 8 * BS);
	CU_ASSERT_EQUAL(f.reads, 0);
	dev_remove();
	free(f.mem);
}

static void test_proof_diff_drops_changed_only(void)
{
	struct fake f;
	struct hl_cache_engine_stats st;

	proof_warm(&f, 23, "fake:proof");
	f.diff = true;
	fake_external(&f, 2 * BS + 4096, 8192, 0x5a); /* inside block 2 */
	fake_external(&f, 7 * BS, BS, 0x5b);          /* all of block 7 */
	f.reads = 0;
	proof_restart(&f, "fake:proof", &st);
	/* Block 2 keeps its other sectors (partly valid), block 7 is gone. */
	CU_ASSERT_EQUAL(st.warm_kept, 7);
	CU_ASSERT_EQUAL(st.warm_dropped, 1);
	CU_ASSERT(st.core.bytes_read_cache < 7 * BS);
	CU_ASSERT(st.core.bytes_read_cache >= 6 * BS);
	CU_ASSERT(f.reads > 0);
	dev_remove();
	free(f.mem);
}

/*
 * Several gateways (hotlun/owner.h): while the disk is another gateway's the
 * cache holds its proofs, so the last proof taken while it was ours stays
 * the mark; when it is ours again hl_cache_revalidate drops exactly what the
 * peer wrote meanwhile. Without the hold, the metadata thread would record a
 * proof of the peer's data (the origin being quiet) and the revalidation
 * would find nothing changed: block 3 would be served stale.
 */
static void test_ownership_hold_and_revalidate(void)
{
	struct fake f;
	struct hl_cache *c;
	struct hl_origin *o;
	struct hl_cache_engine_stats st;
	uint8_t *buf = malloc(8 * BS);

	o = fixture_up(&c, NULL, &f, 24, "fake:own");
	f.diff = true;
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, 8 * BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	/* quiet origin: the metadata thread records a proof (a fixed 200 ms was too
	 * short on a loaded machine: no proof, so the revalidation started cold) */
	CU_ASSERT_FATAL(wait_proof(c, 0));
	hl_cache_hold_proofs(o); /* handed over */
	fake_external(&f, 3 * BS, BS, 0x3c); /* the peer writes block 3 */
	usleep(300 * 1000); /* several metadata intervals, the origin quiet again */
	CU_ASSERT_EQUAL(hl_cache_revalidate(o), 0); /* ours again */
	CU_ASSERT_EQUAL(hl_cache_get_stats(c, "disk0", &st), 0);
	CU_ASSERT_EQUAL(st.warm_dropped, 1);
	CU_ASSERT_EQUAL(st.warm_kept, 7);
	CU_ASSERT(strstr(st.warm_start, "ownership: fake diff") != NULL);
	memset(buf, 0, 8 * BS);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, 8 * BS, buf), 0);
	CU_ASSERT(memcmp(buf, f.mem, 8 * BS) == 0); /* block 3 as the peer wrote it */
	CU_ASSERT(wait_inflight(c, 0));
	/* a held disk records no proof at close either */
	hl_cache_hold_proofs(o);
	fake_external(&f, 5 * BS, BS, 0x5c);
	cache_down(c, o);
	{
		char line[256];
		bool found = false;
		FILE *m = fopen(g_map, "r");
		CU_ASSERT_PTR_NOT_NULL_FATAL(m);
		while (fgets(line, sizeof(line), m))
			found |= !strncmp(line, "proof 0 fake:", 13) &&
			         strtoull(line + 13, NULL, 10) == __atomic_load_n(&f.gen, __ATOMIC_SEQ_CST);
		fclose(m);
		CU_ASSERT(!found);
	}
	dev_remove();
	free(f.mem);
	free(buf);
}

/*
 * hl_cache_disown while the disk is attached: a reload reopens it without
 * the cache (the new LU opens while the cached one still lives, and writes
 * once that one closed). With exclusive = yes (the size is the only proof)
 * the cached LU's final proof at its close vouched for the old blocks: the
 * next attach kept all 8 and served block 2 stale. Now the close records
 * none and the next attach is cold.
 */
static void test_disown_attached_no_final_proof(void)
{
	struct fake f;
	struct hl_cache *c;
	struct hl_origin *o;
	struct hl_cache_engine_stats st;
	uint8_t *buf = malloc(8 * BS);

	o = proven_disk(&c, &f, 25, "fake:blk", buf);
	CU_ASSERT_EQUAL(hl_cache_disown(c, o->inner), 0); /* the uncached LU opens */
	cache_down(c, o);                                 /* the cached one closes */
	fake_external(&f, 2 * BS, BS, 0x2d);              /* the uncached one writes */
	proof_restart(&f, "fake:blk", &st);               /* (fails on stale data itself) */
	CU_ASSERT_EQUAL(st.warm_kept, 0);
	CU_ASSERT(strstr(st.warm_start, "no proof recorded") != NULL);
	g_sole_writer = false;
	dev_remove();
	free(f.mem);
	free(buf);
}

/*
 * A run after the cached disk's: its LUN is served writable without the
 * cache under another spelling of the URL (case, port, credentials,
 * options). hl_cache_disown compared the map's URL text, kept the exclusive
 * proof, and the next attach served block 2 stale; the alias key matches.
 */
static void test_disown_other_spelling(void)
{
	const char *uri = "iscsi://san.example/iqn.2026-11.io.x:t/0";
	struct hl_cache_engine_stats st;
	struct hl_origin *o, *other;
	struct hl_cache *c;
	struct fake f;
	uint8_t *buf = malloc(8 * BS);

	o = proven_disk(&c, &f, 26, uri, buf);
	cache_down(c, o);
	reactor_up();
	c = cache_open(NULL);
	other = fake_origin(&f, "ISCSI://u%s3cret@SAN.example:3260/IQN.2026-11.io.x:t/0?qd=8");
	CU_ASSERT_EQUAL(hl_cache_disown(c, other), 0);
	reactor_down();
	hl_origin_close(other);
	hl_cache_close(c);
	fake_external(&f, 2 * BS, BS, 0x2e); /* written through the other spelling */
	proof_restart(&f, uri, &st);         /* (fails on stale data itself) */
	CU_ASSERT_EQUAL(st.warm_kept, 0);
	CU_ASSERT(strstr(st.warm_start, "no proof recorded") != NULL);
	g_sole_writer = false;
	dev_remove();
	free(f.mem);
	free(buf);
}

/* A fake SAN LUN: it names its data (VPD 83h) whatever URL reaches it. */
static int fake_lun_id(struct hl_origin *o, char *buf, size_t len, bool *lasting)
{
	(void)o;
	*lasting = true;
	return snprintf(buf, len, "scsi-lu:naa:600a0b0c") < (int)len ? 0 : -EOPNOTSUPP;
}

static const struct hl_origin_ops fake_lun_ops = {FAKE_OPS, .data_id = fake_lun_id};

/* f as a fake SAN LUN at uri, attached as disk0 of c; its 8 first blocks read (must equal f). */
static struct hl_origin *lun_attach_read(struct hl_cache *c, struct fake *f, const char *uri)
{
	struct hl_origin *in = fake_origin(f, uri), *o = NULL;
	uint8_t *buf = malloc(8 * BS);

	in->ops = &fake_lun_ops;
	CU_ASSERT_FATAL(hl_cache_attach(c, "disk0", 0, in, &o) == 0);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, 8 * BS, buf), 0);
	CU_ASSERT(memcmp(buf, f->mem, 8 * BS) == 0); /* never stale */
	CU_ASSERT(wait_inflight(c, 0));
	free(buf);
	return o;
}

/*
 * The same: the LUN served writable without the cache through the SAN's
 * other portal, which no URL rule joins to the first. The exclusive proof
 * names the LUN (excl:SIZE:IDENT), so disown finds it by that.
 */
static void test_disown_other_portal(void)
{
	const char *uri = "iscsi://san-a.example/iqn.2026-11.io.x:t/0";
	struct hl_cache_engine_stats st;
	struct hl_origin *o, *other;
	struct hl_cache *c;
	struct fake f;

	dev_name();
	fake_init(&f, LUN_SIZE, 27);
	f.no_proof = true;
	g_sole_writer = true;
	reactor_up();
	c = cache_open(NULL);
	o = lun_attach_read(c, &f, uri);
	CU_ASSERT_FATAL(wait_proof(c, 0));
	cache_down(c, o);
	reactor_up();
	c = cache_open(NULL);
	other = fake_origin(&f, "iscsi://san-b.example/iqn.2026-11.io.x:t/0");
	other->ops = &fake_lun_ops;
	CU_ASSERT_EQUAL(hl_cache_disown(c, other), 0);
	reactor_down();
	hl_origin_close(other);
	hl_cache_close(c);
	fake_external(&f, 2 * BS, BS, 0x2f); /* written through the other portal */
	reactor_up();
	c = cache_open(NULL);
	o = lun_attach_read(c, &f, uri);
	CU_ASSERT_EQUAL(hl_cache_get_stats(c, "disk0", &st), 0);
	CU_ASSERT_EQUAL(st.warm_kept, 0);
	CU_ASSERT(strstr(st.warm_start, "no proof recorded") != NULL);
	cache_down(c, o);
	/* and without the other portal's writes, the LUN's own proof keeps it warm */
	reactor_up();
	c = cache_open(NULL);
	o = lun_attach_read(c, &f, uri);
	CU_ASSERT_FATAL(wait_proof(c, 0));
	cache_down(c, o);
	reactor_up();
	c = cache_open(NULL);
	o = lun_attach_read(c, &f, uri);
	CU_ASSERT_EQUAL(hl_cache_get_stats(c, "disk0", &st), 0);
	CU_ASSERT_EQUAL(st.warm_kept, 8);
	cache_down(c, o);
	g_sole_writer = false;
	dev_remove();
	free(f.mem);
}

static void test_proof_none_cold_unless_sole_writer(void)
{
	struct fake f;
	struct hl_cache *c;
	struct hl_origin *o;
	struct hl_cache_engine_stats st;
	uint8_t *buf = malloc(8 * BS);

	/* No proof (a block device): cold, even though nothing changed. */
	dev_name();
	fake_init(&f, LUN_SIZE, 24);
	f.no_proof = true;
	o = cache_up(&c, NULL, &f, "fake:blk");
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, 8 * BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	cache_down(c, o);
	proof_restart(&f, "fake:blk", &st);
	CU_ASSERT_EQUAL(st.warm_kept, 0);
	CU_ASSERT(strstr(st.warm_start, "no proof recorded") != NULL);

	/* The admin declares the origin exclusive: warm. */
	g_sole_writer = true;
	o = cache_up(&c, NULL, &f, "fake:blk");
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, 8 * BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	cache_down(c, o);
	f.reads = 0;
	proof_restart(&f, "fake:blk", &st);
	CU_ASSERT_EQUAL(st.warm_kept, 8);
	CU_ASSERT_EQUAL(f.reads, 0);
	CU_ASSERT(strstr(st.warm_start, "exclusive = yes") != NULL);
	/* ... and takes it back: cold again. */
	g_sole_writer = false;
	proof_restart(&f, "fake:blk", &st);
	CU_ASSERT_EQUAL(st.warm_kept, 0);
	CU_ASSERT(strstr(st.warm_start, "exclusive = yes was removed") != NULL);
	dev_remove();
	free(f.mem);
	free(buf);
}

/* A map of version 1 (no proofs) is read, and its disks start cold. */
static void test_proof_old_map_cold(void)
{
	struct fake f;
	struct hl_cache_engine_stats st;
	char cmd[256];

	proof_warm(&f, 25, "fake:proof");
	snprintf(cmd, sizeof(cmd),
	         "sed -i -e 's/^hotlun-cache-map 3$/hotlun-cache-map 1/' -e '/^proof /d' "
	         "-e '/^device /d' %s",
	         g_map);
	CU_ASSERT_FATAL(system(cmd) == 0);
	proof_restart(&f, "fake:proof", &st);
	CU_ASSERT_EQUAL(st.warm_kept, 0);
	CU_ASSERT_EQUAL(st.warm_dropped, 8);
	CU_ASSERT(strstr(st.warm_start, "no proof recorded") != NULL);
	dev_remove();
	free(f.mem);
}

/* A crash: the proof recorded while running keeps it warm, any later write makes it cold. */
static void test_proof_crash(void)
{
	struct fake f;
	struct hl_cache *c;
	struct hl_origin *o;
	struct hl_cache_engine_stats st;
	uint8_t *buf = malloc(8 * BS), *w = malloc(BS);

	o = fixture_up(&c, NULL, &f, 26, "fake:crash");
	memset(w, 0x3c, BS);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_WRITE, 3 * BS, BS, w), 0);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, 8 * BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	/* the records, then the proof (recorded after two quiet ticks) */
	CU_ASSERT(wait_synced(c));
	for (int i = 0; i < 300; i++) {
		char want[32];
		snprintf(want, sizeof(want), "fake:%llu", (unsigned long long)f.gen);
		pthread_mutex_lock(&c->sync_lock);
		bool ok = c->ents[0]->proof && !strcmp(c->ents[0]->proof, want);
		pthread_mutex_unlock(&c->sync_lock);
		if (ok)
			break;
		usleep(10 * 1000);
	}
	CU_ASSERT(wait_synced(c));
	reactor_down();
	hl_origin_close(o);
	cache_crash(c);
	f.reads = 0;
	proof_restart(&f, "fake:crash", &st);
	CU_ASSERT_EQUAL(st.warm_kept, 8);
	CU_ASSERT_EQUAL(f.reads, 0);

	/* Crash again, another client writes meanwhile: cold. */
	o = cache_up(&c, NULL, &f, "fake:crash");
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, 8 * BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT(wait_synced(c));
	reactor_down();
	hl_origin_close(o);
	cache_crash(c);
	fake_external(&f, 0, 512, 0x77);
	proof_restart(&f, "fake:crash", &st);
	CU_ASSERT_EQUAL(st.warm_kept, 0);

	/*
	 * An origin that reports what changed (rbd): a crash after the first
	 * proof keeps what nobody wrote since, this gateway's own later writes
	 * and another client's are dropped.
	 */
	f.diff = true;
	o = cache_up(&c, NULL, &f, "fake:crash");
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, 8 * BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	for (int i = 0; i < 300; i++) {
		pthread_mutex_lock(&c->sync_lock);
		bool ok = c->ents[0]->proof != NULL;
		pthread_mutex_unlock(&c->sync_lock);
		if (ok)
			break;
		usleep(10 * 1000);
	}
	memset(w, 0x4d, BS);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_WRITE, 6 * BS, BS, w), 0); /* ours, after the proof */
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, 8 * BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT(wait_synced(c));
	reactor_down();
	hl_origin_close(o);
	cache_crash(c);
	fake_external(&f, 1 * BS, BS, 0x78); /* another client's */
	f.reads = 0;
	proof_restart(&f, "fake:crash", &st);
	/* block 1 dropped by the diff; block 6's update was never claimed (rule 4) or is dropped */
	CU_ASSERT_EQUAL(st.warm_kept, 6);
	CU_ASSERT(st.warm_dropped >= 1);
	CU_ASSERT(f.reads > 0);
	dev_remove();
	free(f.mem);
	free(buf);
	free(w);
}

static void test_crash_no_stale(void)
{
	struct fake f;
	struct hl_cache *c;
	struct hl_origin *o;
	uint8_t *buf = malloc(BS), *w = malloc(BS);

	o = fixture_up(&c, "invalidate", &f, 6, "fake:crash");
	memset(w, 0xa1, BS);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_WRITE, 4 * BS, BS, w), 0);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 4 * BS, BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	/* The next periodic metadata flush makes the record claim the block. */
	CU_ASSERT(wait_synced(c));
	CU_ASSERT(cnt_get(&c->meta_syncs) > 0);
	memset(w, 0xb2, BS);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_WRITE, 4 * BS, BS, w), 0);
	reactor_down();
	hl_origin_close(o);
	cache_crash(c); /* no clean shutdown */

	o = cache_up(&c, "invalidate", &f, "fake:crash");
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 4 * BS, BS, buf), 0);
	CU_ASSERT(buf[0] == 0xb2 && buf[BS - 1] == 0xb2);
	CU_ASSERT(wait_inflight(c, 0));
	fixture_down(c, o, &f);
	free(buf);
	free(w);
}


/*
 * The warm standby (engine_shadow.c) moves its disk's proof onto the owner's
 * newer mark, dropping the ranges of the owner's diff. A 4 KiB write inside
 * a cached 64 KiB block clears sectors and keeps the block: the records on
 * the device must stop claiming those sectors before the map names the new
 * mark, or a crash before the next metadata sync brings the old sectors
 * back valid under a mark that never lists that write again (a stale read
 * after restart and takeover). The metadata thread is stopped before the
 * roll, so only the roll itself can have written the records. Fails
 * without 941b49d (the roll synced only when whole blocks went).
 */
static void test_shadow_roll_partial_crash(void)
{
	const uint64_t chg_off = 2 * BS + 16 * K, chg_len = 4 * K;
	struct fake f;
	struct hl_cache *c;
	struct hl_origin *o, *inner;
	struct hl_cache_shadow_stats ss;
	struct hl_cache_engine_stats st;
	struct hl_hot_ent hot[3] = {{0, 9}, {1, 8}, {3, 7}}; /* cached; not block 2 */
	struct hl_hot_range chg = {chg_off, chg_len};
	struct hl_hot_set hs = {
	    .owner = 1, .seq = 1, .block_size = BS, .n = 3, .v = hot, .nchg = 1, .chg = &chg};
	uint8_t *buf = malloc(8 * BS), src = 0;
	bool moved = false;

	dev_name();
	fake_init(&f, LUN_SIZE, 27);
	f.diff = true;
	reactor_up();
	c = cache_open(NULL);
	inner = fake_hot_origin(&f, "fake:shadow");
	CU_ASSERT_FATAL(hl_cache_attach(c, "disk0", 0, inner, &o) == 0);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, 8 * BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	/* the records claim blocks 0..7, then a quiet origin's proof is recorded: fake:0 */
	CU_ASSERT(wait_synced(c));
	for (int i = 0; i < 300; i++) {
		pthread_mutex_lock(&c->sync_lock);
		bool ok = c->ents[0]->proof && !strcmp(c->ents[0]->proof, "fake:0");
		pthread_mutex_unlock(&c->sync_lock);
		if (ok)
			break;
		usleep(10 * 1000);
	}
	pthread_mutex_lock(&c->sync_lock);
	CU_ASSERT_FATAL(c->ents[0]->proof && !strcmp(c->ents[0]->proof, "fake:0"));
	snprintf(hs.prev, sizeof(hs.prev), "%s", c->ents[0]->proof);
	pthread_mutex_unlock(&c->sync_lock);
	CU_ASSERT(wait_synced(c));

	/* Handed over: a standby now. No metadata sync from here on but the roll's own. */
	hl_cache_hold_proofs(o);
	engine_meta_stop(c, false);
	/* The owner writes 4 KiB inside block 2, then makes a mark and publishes. */
	fake_external(&f, chg_off, chg_len, 0xc4);
	snprintf(hs.mark, sizeof(hs.mark), "fake:%llu",
	         (unsigned long long)__atomic_load_n(&f.gen, __ATOMIC_SEQ_CST));
	f.hot = &hs;
	CU_ASSERT_EQUAL_FATAL(hl_cache_shadow_config(o, 64 * M), 0);
	for (int i = 0; i < 500 && !moved; i++) { /* the first tick fetches and rolls: 20 ms */
		CU_ASSERT_EQUAL(hl_cache_shadow_stats(o, &ss), 0);
		moved = ss.marks >= 1;
		if (!moved)
			usleep(10 * 1000);
	}
	CU_ASSERT_FATAL(moved);
	CU_ASSERT(ss.supported && ss.standby);
	CU_ASSERT_EQUAL(ss.dropped, 0); /* no whole block went: sectors only */
	pthread_mutex_lock(&c->sync_lock);
	CU_ASSERT(c->ents[0]->proof && !strcmp(c->ents[0]->proof, hs.mark));
	pthread_mutex_unlock(&c->sync_lock);
	CU_ASSERT(map_holds(hs.mark)); /* the map on disk names the new mark */

	/* A crash: no clean shutdown, no metadata sync after the roll. */
	reactor_down();
	hl_origin_close(o); /* the shadow detaches; a held disk records no proof */
	engine_shadow_stop(c);
	cache_free(c);
	f.hot = NULL;

	/* Restart (then a takeover): warm under the new mark, the owner's 4 KiB from the origin. */
	f.reads = 0;
	f.read_bytes = 0;
	o = cache_up(&c, NULL, &f, "fake:shadow");
	stats(c, &st);
	CU_ASSERT_EQUAL(st.warm_kept, 8);
	CU_ASSERT(strstr(st.warm_start, "fake unchanged") != NULL);
	memset(buf, 0, BS);
	CU_ASSERT_EQUAL(do_read_src(o, chg_off, chg_len, buf, &src), 0);
	CU_ASSERT(buf[0] == 0xc4 && buf[chg_len - 1] == 0xc4); /* not the old sectors */
	/* every byte from the origin */
	CU_ASSERT_EQUAL(src, HL_IO_SRC_MISS);
	CU_ASSERT(f.reads > 0);
	CU_ASSERT(wait_inflight(c, 0));
	memset(buf, 0, 8 * BS);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, 8 * BS, buf), 0);
	CU_ASSERT(memcmp(buf, f.mem, 8 * BS) == 0);
	CU_ASSERT(hl_cache_revalidate(o) == 0); /* the takeover: nothing changed since the mark */
	memset(buf, 0, 8 * BS);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, 8 * BS, buf), 0);
	CU_ASSERT(memcmp(buf, f.mem, 8 * BS) == 0);
	stats(c, &st);
	CU_ASSERT(st.core.bytes_read_cache >= 7 * BS); /* the rest stayed warm */
	CU_ASSERT(wait_inflight(c, 0));
	fixture_down(c, o, &f);
	free(buf);
}

/*
 * A takeover's revalidation of one disk does not wait for another disk's
 * shadow step. Disk A's standby moves its proof to the owner's new mark by
 * diffing its origin itself (its proof is not the owner's previous mark),
 * and that diff takes 2 s; disk B's revalidation meanwhile answers at
 * once (a metadata sync and a map write: well under 1.3 s even on a loaded
 * machine). With one shadow lock per cache it waited for A's diff.
 */
static void test_shadow_revalidate_other_disk(void)
{
	struct fake fa, fb;
	struct hl_cache *c;
	struct hl_origin *oa, *ob;
	struct hl_cache_shadow_stats ss;
	struct hl_hot_ent hot[1] = {{0, 9}};
	struct hl_hot_set hs = {.owner = 1, .seq = 1, .block_size = BS, .n = 1, .v = hot};
	uint8_t *buf = malloc(BS);
	uint64_t t0, ms;
	bool moved = false;

	c = two_proven(&fa, &fb, 31, true, true, 1, buf, &oa, &ob);

	/* both handed over: standbys. The owner of A writes, marks and publishes. */
	hl_cache_hold_proofs(oa);
	hl_cache_hold_proofs(ob);
	peer_publishes(oa, &fa, &hs, 8 * BS, 2000);

	/* B's takeover while A's diff runs */
	t0 = hl_now_ns();
	CU_ASSERT_EQUAL(hl_cache_revalidate(ob), 0);
	ms = (hl_now_ns() - t0) / 1000000;
	CU_ASSERT(ms < 1300);
	if (ms >= 1300)
		fprintf(stderr, "disk B's revalidation took %llu ms\n", (unsigned long long)ms);

	/*
	 * A's own revalidation waits for its step; the step moved A's proof
	 * first. Its diff keeps A's shadow lock past the bound (500 ms): an
	 * origin call, not a stuck cache device (sync_lock is free), so the
	 * revalidation waits on and the cache stays in service.
	 */
	c->drain_ms = 500;
	t0 = hl_now_ns();
	CU_ASSERT_EQUAL(hl_cache_revalidate(oa), 0);
	ms = (hl_now_ns() - t0) / 1000000;
	CU_ASSERT(ms > 500); /* (else the lock was not held past the bound: proves little) */
	fprintf(stderr, "disk A's revalidation behind its step's diff took %llu ms (bound 500)\n",
	        (unsigned long long)ms);
	CU_ASSERT(!atomic_load(&c->meta_stuck));
	CU_ASSERT(!atomic_load(&c->failed));
	for (int i = 0; i < 300 && !moved; i++) {
		CU_ASSERT_EQUAL(hl_cache_shadow_stats(oa, &ss), 0);
		moved = ss.marks >= 1;
		if (!moved)
			usleep(10 * 1000);
	}
	CU_ASSERT(moved);
	fa.check_delay_ms = 0;
	two_disks_close(c, oa, ob, &fa, &fb);
	free(buf);
}

/*
 * A stop's drain is bounded even while a shadow step hangs (its origin's
 * diff takes 3 s here: a cluster or device that stopped answering): the
 * drain gives up at its bound and says how much it abandons, instead of
 * first waiting for the step; the close after it does not wait again.
 */
static void test_drain_bound_shadow_step(void)
{
	struct fake f;
	struct hl_cache *c;
	struct hl_origin *o;
	struct hl_hot_ent hot[1] = {{0, 9}};
	struct hl_hot_set hs = {.owner = 1, .seq = 1, .block_size = BS, .n = 1, .v = hot};
	uint8_t *buf = malloc(BS);
	uint64_t t0, ms;
	long left;

	dev_name();
	fake_init(&f, LUN_SIZE, 33);
	f.diff = true;
	reactor_up();
	c = cache_open(NULL);
	CU_ASSERT_FATAL(hl_cache_attach(c, "disk0", 0, fake_hot_origin(&f, "fake:a"), &o) == 0);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT_FATAL(wait_proof(c, 0));
	hl_cache_hold_proofs(o); /* a standby: its step diffs the origin to the owner's mark */
	fake_external(&f, 8 * BS, 4 * K, 0x5a);
	snprintf(hs.mark, sizeof(hs.mark), "fake:%llu",
	         (unsigned long long)__atomic_load_n(&f.gen, __ATOMIC_SEQ_CST));
	snprintf(hs.prev, sizeof(hs.prev), "fake:999");
	f.check_delay_ms = 3000;
	f.hot = &hs;
	CU_ASSERT_EQUAL_FATAL(hl_cache_shadow_config(o, 64 * M), 0);
	for (int i = 0; i < 300 && !__atomic_load_n(&f.checking, __ATOMIC_SEQ_CST); i++)
		usleep(10 * 1000);
	CU_ASSERT_FATAL(__atomic_load_n(&f.checking, __ATOMIC_SEQ_CST));

	t0 = hl_now_ns();
	left = hl_cache_drain(c, 300);
	ms = (hl_now_ns() - t0) / 1000000;
	CU_ASSERT(left >= 1); /* the step, abandoned */
	CU_ASSERT(ms >= 250 && ms < 1500);
	if (ms >= 1500)
		fprintf(stderr, "the drain took %llu ms for a bound of 300\n",
		        (unsigned long long)ms);
	CU_ASSERT(atomic_load(&c->drain_late));

	usleep(3200 * 1000); /* the step ends; nothing else runs */
	f.check_delay_ms = 0;
	reactor_down();
	hl_origin_close(o);
	CU_ASSERT_FALSE(atomic_load(&c->shadow_left));
	hl_cache_close(c);
	dev_remove();
	free(f.mem);
	free(buf);
}

/*
 * A hot set larger than the standby's cache is cut to the hottest blocks
 * that fit: pre-reading the rest would only evict what was pre-read before
 * (the blocks are all new to the standby's frequency counts), spending
 * origin reads on blocks that cannot stay. owner_bs: the owner's cache
 * block size; each entry names a different one of our 64 KiB blocks, so
 * an entry of a smaller owner block still takes one of our slots.
 */
static void shadow_hot_set_fits(uint32_t owner_bs)
{
	const uint32_t nhot = 512; /* 512 of our 64 KiB blocks (32 MiB); the cache holds 8 MiB */
	struct fake f;
	struct hl_cache *c;
	struct hl_origin *o;
	struct hl_cache_shadow_stats ss;
	struct hl_hot_ent *hot = calloc(nhot, sizeof(*hot));
	struct hl_hot_set hs = {.owner = 1, .seq = 1, .block_size = owner_bs, .n = nhot, .v = hot};
	uint8_t *buf = malloc(BS);
	uint64_t nslots;

	for (uint32_t i = 0; i < nhot; i++)
		hot[i] = (struct hl_hot_ent){i * (BS / owner_bs), nhot - i};
	dev_name();
	fake_init(&f, nhot * BS, 33);
	f.diff = true;
	reactor_up();
	c = cache_open(NULL);
	nslots = c->nslots;
	CU_ASSERT_FATAL(nslots > 0 && nslots < nhot);
	CU_ASSERT_FATAL(hl_cache_attach(c, "disk0", 0, fake_hot_origin(&f, "fake:fit"), &o) == 0);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	CU_ASSERT_FATAL(wait_proof(c, 0));
	hl_cache_hold_proofs(o);
	pthread_mutex_lock(&c->sync_lock);
	snprintf(hs.prev, sizeof(hs.prev), "%s", c->ents[0]->proof);
	snprintf(hs.mark, sizeof(hs.mark), "%s", c->ents[0]->proof);
	pthread_mutex_unlock(&c->sync_lock);
	f.hot = &hs;
	CU_ASSERT_EQUAL_FATAL(hl_cache_shadow_config(o, 256 * M), 0);
	/* at 256 MiB/s all 32 MiB would be read within ~0.2 s; give it 1.5 s */
	usleep(1500 * 1000);
	CU_ASSERT_EQUAL(hl_cache_shadow_stats(o, &ss), 0);
	CU_ASSERT_EQUAL(ss.hot_blocks, nslots);
	CU_ASSERT(ss.origin_reads <= nslots);
	pthread_mutex_lock(&c->lock);
	uint64_t held = hl_cache_core_lun_blocks(c->core, c->ents[0]->id);
	pthread_mutex_unlock(&c->lock);
	CU_ASSERT(held >= nslots * 9 / 10); /* what was pre-read stayed */
	if (ss.hot_blocks != nslots || ss.origin_reads > nslots)
		fprintf(stderr, "hot %llu, pre-read %llu, shadowed %llu, slots %llu\n",
		        (unsigned long long)ss.hot_blocks, (unsigned long long)ss.origin_reads,
		        (unsigned long long)ss.shadowed, (unsigned long long)nslots);
	reactor_down();
	hl_origin_close(o);
	hl_cache_close(c);
	dev_remove();
	free(f.mem);
	free(hot);
	free(buf);
}

static void test_shadow_hot_set_fits(void)
{
	shadow_hot_set_fits(BS);
}

static void test_shadow_hot_set_fits_small_blocks(void)
{
	shadow_hot_set_fits(4 * K);
}

/*
 * The same for a takeover (hl_cache_revalidate): the peer wrote 4 KiB
 * inside cached block 2 while the disk was not ours; the revalidation
 * clears those sectors and keeps the block. Its records must stop claiming
 * them before the disk is served: once the origin is quiet the metadata
 * thread records a proof newer than that write, and nothing else makes it
 * sync the records (an invalidation counts no change), so a crash would
 * bring the old sectors back valid under a proof that never lists the
 * write again.
 */
static void test_revalidate_partial_crash(void)
{
	const uint64_t chg_off = 2 * BS + 16 * K, chg_len = 4 * K;
	struct fake f;
	struct hl_cache *c;
	struct hl_origin *o;
	struct hl_cache_engine_stats st;
	uint8_t *buf = malloc(8 * BS), src = 0;
	char want[32];
	bool ok = false;

	o = fixture_up(&c, NULL, &f, 28, "fake:reval");
	f.diff = true;
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, 8 * BS, buf), 0);
	CU_ASSERT(wait_inflight(c, 0));
	/* the records claim blocks 0..7, then a quiet origin's proof is recorded: fake:0 */
	CU_ASSERT(wait_synced(c));
	for (int i = 0; i < 300 && !ok; i++) {
		pthread_mutex_lock(&c->sync_lock);
		ok = c->ents[0]->proof && !strcmp(c->ents[0]->proof, "fake:0");
		pthread_mutex_unlock(&c->sync_lock);
		if (!ok)
			usleep(10 * 1000);
	}
	CU_ASSERT_FATAL(ok);
	ok = false;
	hl_cache_hold_proofs(o);                    /* handed over */
	fake_external(&f, chg_off, chg_len, 0xd5);  /* the peer writes inside block 2 */
	CU_ASSERT_EQUAL(hl_cache_revalidate(o), 0); /* ours again */
	stats(c, &st);
	CU_ASSERT_EQUAL(st.warm_dropped, 0); /* sectors only, no whole block */
	/* quiet: the metadata thread records a proof of the origin as it is now */
	snprintf(want, sizeof(want), "fake:%llu",
	         (unsigned long long)__atomic_load_n(&f.gen, __ATOMIC_SEQ_CST));
	for (int i = 0; i < 300 && !ok; i++) {
		pthread_mutex_lock(&c->sync_lock);
		ok = c->ents[0]->proof && !strcmp(c->ents[0]->proof, want);
		pthread_mutex_unlock(&c->sync_lock);
		if (!ok)
			usleep(10 * 1000);
	}
	CU_ASSERT_FATAL(ok);
	reactor_down();
	hl_origin_close(o);
	cache_crash(c); /* no clean shutdown */

	o = cache_up(&c, NULL, &f, "fake:reval");
	stats(c, &st);
	CU_ASSERT_EQUAL(st.warm_kept, 8);
	memset(buf, 0, BS);
	CU_ASSERT_EQUAL(do_read_src(o, chg_off, chg_len, buf, &src), 0);
	CU_ASSERT(buf[0] == 0xd5 && buf[chg_len - 1] == 0xd5); /* not the old sectors */
	/* every byte from the origin */
	CU_ASSERT_EQUAL(src, HL_IO_SRC_MISS);
	CU_ASSERT(wait_inflight(c, 0));
	memset(buf, 0, 8 * BS);
	CU_ASSERT_EQUAL(do_io(o, HL_IO_READ, 0, 8 * BS, buf), 0);
	CU_ASSERT(memcmp(buf, f.mem, 8 * BS) == 0);
	CU_ASSERT(wait_inflight(c, 0));
	fixture_down(c, o, &f);
	free(buf);
}

int main(void)
{
	static const struct hl_test tests[] = {
	    {"proof: an origin written while down starts cold", test_proof_changed_origin_cold},
	    {"proof: an unchanged origin starts warm", test_proof_unchanged_warm},
	    {"proof: a diff drops only the changed blocks", test_proof_diff_drops_changed_only},
	    {"ownership: proofs held while not ours, revalidation drops the peer's writes", test_ownership_hold_and_revalidate},
	    {"proof: none is cold unless exclusive = yes", test_proof_none_cold_unless_sole_writer},
	    {"disown: an attached disk's final proof does not vouch", test_disown_attached_no_final_proof},
	    {"disown: another spelling of the origin's URL", test_disown_other_spelling},
	    {"disown: the same LUN through another portal (exclusive proof)",
	     test_disown_other_portal},
	    {"proof: a version 1 map starts cold", test_proof_old_map_cold},
	    {"proof: a crash is warm only while the origin is untouched", test_proof_crash},
	    {"a crash after a write serves no stale block", test_crash_no_stale},
	    {"shadow: a proof move past a 4 KiB write inside a block survives a crash", test_shadow_roll_partial_crash},
	    {"shadow: a takeover of one disk does not wait for another disk's diff", test_shadow_revalidate_other_disk},
	    {"shadow: a stop's drain is bounded while a shadow step hangs", test_drain_bound_shadow_step},
	    {"shadow: a hot set larger than the cache is cut to what fits", test_shadow_hot_set_fits},
	    {"shadow: ... also when the owner's blocks are smaller than ours", test_shadow_hot_set_fits_small_blocks},
	    {"ownership: a revalidation past a 4 KiB write inside a block survives a crash", test_revalidate_partial_crash},
	    {NULL, NULL},
	};

	return hl_test_run("engine_proof", tests);
}
