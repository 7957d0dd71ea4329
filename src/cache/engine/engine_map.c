/*
 * engine_map.c - a cache's disk map file: which disk (name, origin
 * identity, size, quota) owns which LUN id of the core, the disks' warm
 * restart proofs, and the state of the on-device metadata (open, clean,
 * failed). LUN ids only mean something with the map, so a map that is
 * missing, unreadable, "failed" or of another geometry makes hl_cache_open
 * format the device. Also the disk entries (struct map_ent) themselves.
 *
 * Shared state: engine_internal.h.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache/engine/engine_internal.h"
#include "hotlun/log.h"
#include "hotlun/util.h"

/*
 * Version 2 adds the proof lines; a version 1 map is read, its disks have
 * no proof. Version 3 adds the device line; a map of version 1 or 2 is
 * read unchecked (engine_map_device_ok) and rewritten as version 3 at open.
 */
#define MAP_MAGIC   "hotlun-cache-map "
#define MAP_VERSION 3

/*
 * Text, rewritten atomically (tmp + fsync + rename):
 *   hotlun-cache-map 3
 *   state open|clean|failed
 *   geometry BLOCK_SIZE NSLOTS DEVICE_SIZE
 *   device UUID SEQ           (version 3: 32 hex digits, decimal)
 *   next ID
 *   disk ID QUOTA SIZE NAME IDENT...
 *   proof ID TOKEN            (version 2; absent: no proof)
 * A missing or unreadable map, a "failed" state or another geometry make
 * hl_cache_open format the device: LUN ids are only meaningful with it.
 * Writers hold sync_lock (or run alone: open, close).
 *
 * The device line names the superblock the map was written against: its
 * uuid and its seq, which every superblock write bumps (cache_meta.c).
 * Each map write comes after the superblock write it names has returned,
 * and every superblock write is followed by a map write: at open (the
 * load marks it open, or the format), at close (clean), and for the ones
 * in between (a lazy restore's pending notes and their end) the next
 * proof tick (engine_map_lags), or any map write before it. So a start
 * meets a device whose seq is the map's, or one ahead (a crash between a
 * superblock write and its map write); anything else is a map of another
 * device or of another time (engine_map_device_ok).
 * A "failed" map (a seal) has no device line: it is never read past its
 * state.
 *
 * Every write is bounded (c->drain_ms): the state file system may stop
 * answering (a hung NFS, a dying disk under /var/lib/hotlun), and a
 * write that waited for it for ever hung the control reactor (an attach),
 * the stop (the final proofs, the save, the seals) and the metadata
 * thread (its proofs, holding sync_lock: the writes behind its syncs).
 * One write at a time: the caller takes map_busy (map_begin), snapshots
 * the text under its own locks (map_text) and hands it to a thread of its
 * own (map_run). A write given up on keeps map_busy until it returns, so
 * no later write can be overtaken by it (its rename landing last), and
 * the next writers fail at once. What it writes is what was true when it
 * began: its rename may land late or never, and either map is one a start
 * may trust (proofs are released from the origin only once a write
 * returned 0). A seal that comes meanwhile is owed: the write still out
 * writes "failed" after its own when it returns. A seal that does not land
 * (the file system answers with an error, or an allocation failed) is never
 * dropped: a map left "open" with its proofs let a start trust records that
 * writes in pass-through had made stale (killed went on without it). Its
 * writer keeps map_busy and tries again until it lands (map_failed); the
 * stop's last try removes the map instead (a start without a map formats).
 * The thread uses c (its map_mu and flags) at its end: a close with
 * map_busy set parks the cache.
 */
static int map_file_write(struct hl_cache *c, const char *text);
static int map_file_remove(struct hl_cache *c);

/*
 * The map's text: with disks, every disk and proof (the caller holds
 * sync_lock, or runs alone); without, the state and the geometry only,
 * "next 0" (a sealed map's next start formats: ids start again from 0).
 * @return a malloc'd string, or NULL without memory.
 */
static char *map_text(struct hl_cache *c, const char *state, bool disks)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f)
		return NULL;
	fprintf(f, "%s%d\nstate %s\ngeometry %u %llu %llu\ndevice ", MAP_MAGIC, MAP_VERSION, state,
	        c->bs, (unsigned long long)c->nslots, (unsigned long long)c->dev->size);
	for (int i = 0; i < 16; i++)
		fprintf(f, "%02x", c->layout.uuid[i]);
	fprintf(f, " %llu\nnext %u\n", (unsigned long long)c->layout.sb_seq,
	        disks ? c->next_id : 0);
	for (size_t i = 0; disks && i < c->n_ents; i++) {
		struct map_ent *e = c->ents[i];
		fprintf(f, "disk %u %llu %llu %s %s\n", e->id, (unsigned long long)e->quota,
		        (unsigned long long)e->size, e->name, e->ident);
	}
	for (size_t i = 0; disks && i < c->n_ents; i++)
		if (c->ents[i]->proof)
			fprintf(f, "proof %u %s\n", c->ents[i]->id, c->ents[i]->proof);
	if (fclose(f)) {
		free(text);
		return NULL;
	}
	return text;
}

/*
 * Take map_busy, waiting at most c->drain_ms for the write under way; at
 * once when the one under way was given up on (map_left: it may never
 * return). seal: a sealed map is no reason to refuse, and a seal that
 * cannot take it is owed by the write under way (seal_owed).
 * @return 0 (taken), -ECANCELED (sealed), -ETIMEDOUT (a write still out;
 * for a seal: owed).
 */
static int map_begin(struct hl_cache *c, bool seal)
{
	uint64_t deadline = hl_now_ns() + (uint64_t)c->drain_ms * 1000000u;
	struct timespec ts = {0, 1000000};
	int rc;

	for (;;) {
		bool late = atomic_load(&c->map_left) || hl_now_ns() >= deadline;

		pthread_mutex_lock(&c->map_mu);
		if (!seal && atomic_load(&c->map_sealed))
			rc = -ECANCELED;
		else if (!atomic_load(&c->map_busy))
			rc = 0;
		else
			rc = late ? -ETIMEDOUT : -EAGAIN;
		if (rc == 0) {
			atomic_store(&c->map_busy, true);
			c->map_gen++;
		} else if (rc == -ETIMEDOUT && seal)
			atomic_store(&c->seal_owed, true);
		pthread_mutex_unlock(&c->map_mu);
		if (rc != -EAGAIN)
			break;
		nanosleep(&ts, NULL);
	}
	if (rc == -ETIMEDOUT)
		HL_WARN_RL("cache",
		           "cache %s: %s not written: a write of it does not end (its file system "
		           "is not answering?)%s",
		           c->name, c->map_path,
		           seal ? "; it writes \"failed\" when it returns" : "");
	return rc;
}

/* Give map_busy back: no write of this caller's is out. */
static void map_end(struct hl_cache *c)
{
	pthread_mutex_lock(&c->map_mu);
	atomic_store(&c->map_busy, false);
	pthread_mutex_unlock(&c->map_mu);
}

/* A seal's "failed" is durable (or the map is gone): killed (engine_meta_kill's promise). */
static void seal_written(struct hl_cache *c, bool removed)
{
	if (!removed)
		HL_WARN("cache", "cache %s: %s says failed: the next start formats the device",
		        c->name, c->map_path);
	atomic_store(&c->map_failed, true);
	/*
	 * As good as engine_meta_kill for a restart: writes in pass-through
	 * need not wait for a kill the stuck metadata thread may never do, nor
	 * those queued before (a metadata thread waiting for sync_lock behind
	 * an attach's sync given up on held them until the stop).
	 */
	atomic_store(&c->killed, true);
	if (c->on_sealed)
		c->on_sealed(c);
}

/*
 * One try at making the seal durable: "failed" written (its text built on
 * the stack: a seal is not lost for want of memory), or, once the stop
 * said so (seal_last), the map removed. @return 0 (durable) or -errno.
 */
static int seal_try(struct hl_cache *c)
{
	char text[256];
	int rc;

	snprintf(text, sizeof(text), "%s%d\nstate failed\ngeometry %u %llu %llu\nnext 0\n",
	         MAP_MAGIC, MAP_VERSION, c->bs, (unsigned long long)c->nslots,
	         (unsigned long long)c->dev->size);
	rc = map_file_write(c, text);
	if (rc && atomic_load(&c->seal_last) && map_file_remove(c) == 0) {
		HL_ERR("cache",
		       "cache %s: %s cannot say \"failed\" (%s): removed instead; the next start "
		       "formats the device",
		       c->name, c->map_path, strerror(-rc));
		seal_written(c, true);
		return 0;
	}
	if (rc == 0)
		seal_written(c, false);
	return rc;
}

/*
 * Wait before the next try of a seal that failed: back off from 10 ms to
 * 1 s, cut short when the stop says seal_last (it waits for the next try).
 */
static void seal_backoff(struct hl_cache *c, unsigned *ms)
{
	struct timespec ts = {0, 10000000};
	bool last = atomic_load(&c->seal_last);

	for (unsigned t = 0; t < *ms; t += 10) {
		if (t && atomic_load(&c->seal_last) != last)
			break;
		nanosleep(&ts, NULL);
	}
	*ms = *ms * 2 > 1000 ? 1000 : *ms * 2;
}

/* The writer's own: what it writes. c is the parked cache's if it is given up on. */
struct map_job {
	struct hl_cache *c;
	char *text;
	bool seal;
};

static int map_job_main(void *arg)
{
	struct map_job *j = arg;
	struct hl_cache *c = j->c;
	int rc = j->seal ? seal_try(c) : map_file_write(c, j->text);
	/* the seal is this writer's to land: its own, or one it took on below */
	bool mine = j->seal;
	bool retry = rc != 0; /* (the seal's own try failed: back off first) */
	unsigned backoff = 10;

	free(j->text);
	if (j->seal)
		atomic_store(&c->seal_rc, rc); /* (engine_map_seal's caller stops waiting) */
	/*
	 * A seal came while this write was out (seal_owed), or this write was
	 * given up on and the map sealed since, or this is a seal that did not
	 * land: "failed" is this writer's to write, after its own, until it
	 * lands. (A writer not given up on leaves a seal waiting in map_begin
	 * to write it itself.)
	 */
	for (;;) {
		pthread_mutex_lock(&c->map_mu);
		mine = atomic_load(&c->map_sealed) && !atomic_load(&c->map_failed) &&
		       (atomic_exchange(&c->seal_owed, false) || mine || atomic_load(&c->map_left));
		if (!mine) {
			atomic_store(&c->seal_owed, false);
			atomic_store(&c->map_left, false); /* (it was this one) */
			atomic_store(&c->map_busy, false);
			pthread_mutex_unlock(&c->map_mu);
			break;
		}
		pthread_mutex_unlock(&c->map_mu);
		if (retry)
			seal_backoff(c, &backoff);
		retry = seal_try(c) != 0;
	}
	return rc;
}

/* engine_run_within_until: the seal's first try failed (it goes on, retrying). */
static bool seal_tried(void *arg)
{
	struct map_job *j = arg;

	return atomic_load(&j->c->seal_rc) < 0;
}

/*
 * Write text (taken) with map_busy held (map_begin), within c->drain_ms;
 * map_busy goes with the write's end. @return the write's result, or
 * -ETIMEDOUT: given up on (map_left), it goes on and may land later.
 */
static int map_run(struct hl_cache *c, char *text, bool seal)
{
	struct map_job *j = malloc(sizeof(*j));
	uint64_t gen;
	int rc;

	pthread_mutex_lock(&c->map_mu);
	gen = c->map_gen; /* this write's: map_busy is ours */
	pthread_mutex_unlock(&c->map_mu);
	if (!j && seal) {
		/* one try in line, unbounded (as run_within without a thread); the stop retries */
		rc = seal_try(c);
		map_end(c);
		return rc;
	}
	if (!j) {
		map_end(c);
		free(text);
		return -ENOMEM;
	}
	j->c = c;
	j->text = text;
	j->seal = seal;
	atomic_store(&c->seal_rc, 1);
	if (engine_run_within_until(c->drain_ms, map_job_main, j, &rc, seal ? seal_tried : NULL))
		return rc;
	/* (unless it returned meanwhile: then map_busy is free, or another write's) */
	pthread_mutex_lock(&c->map_mu);
	if (atomic_load(&c->map_busy) && c->map_gen == gen)
		atomic_store(&c->map_left, true);
	pthread_mutex_unlock(&c->map_mu);
	rc = atomic_load(&c->seal_rc);
	if (seal && rc < 0) {
		HL_ERR("cache",
		       "cache %s: %s does not say \"failed\" (%s): tried again until it does (no "
		       "map write meanwhile)",
		       c->name, c->map_path, strerror(-rc));
		return rc;
	}
	HL_ERR("cache",
	       "cache %s: writing %s did not end within %u ms (its file system is not "
	       "answering?): given up on; no map write until it returns",
	       c->name, c->map_path, c->drain_ms);
	return -ETIMEDOUT;
}

int engine_map_write(struct hl_cache *c, const char *state)
{
	uint64_t seq = c->layout.sb_seq; /* (what map_text names: sync_lock held, or alone) */
	char *text;
	int rc = map_begin(c, false);

	if (rc == -ETIMEDOUT)
		atomic_store(&c->map_stale, true);
	if (rc)
		return rc; /* -ECANCELED: sealed, it stays "failed" */
	text = map_text(c, state, true);
	if (!text) {
		map_end(c);
		atomic_store(&c->map_stale, true);
		return -ENOMEM;
	}
	rc = map_run(c, text, false);
	atomic_store(&c->map_stale, rc != 0);
	if (rc == 0)
		c->map_seq = seq;
	/* the map says what RAM does: a disown refused earlier is over (sync_lock held) */
	for (size_t i = 0; rc == 0 && i < c->n_ents; i++)
		if (c->ents[i]->disown_undo)
			c->ents[i]->disowned = c->ents[i]->disown_undo = false;
	return rc;
}

int engine_map_seal(struct hl_cache *c)
{
	int rc;

	/* From now on no other write begins (map_begin): the map stays "failed". */
	atomic_store(&c->map_sealed, true);
	rc = map_begin(c, true);
	if (rc)
		return rc; /* owed: the write still out writes it */
	/*
	 * Without the disks (seal_try): the sealer holds neither sync_lock nor
	 * c->lock (the device failed while their holder is stuck in a device
	 * call), and the start that reads a "failed" map formats and forgets
	 * them.
	 */
	return map_run(c, NULL, true);
}

bool engine_map_seal_last(struct hl_cache *c)
{
	uint64_t deadline = hl_now_ns() + (uint64_t)c->drain_ms * 1000000u;
	struct timespec ts = {0, 1000000};

	if (!atomic_load(&c->map_sealed) || atomic_load(&c->map_failed))
		return true;
	atomic_store(&c->seal_last, true);
	/* no writer out (the seal could not start one): one now; else the one retrying */
	if (!atomic_load(&c->map_busy) && engine_map_seal(c) == 0)
		return true;
	while (!atomic_load(&c->map_failed) && hl_now_ns() < deadline)
		nanosleep(&ts, NULL);
	if (atomic_load(&c->map_failed))
		return true;
	HL_ERR("cache",
	       "cache %s: %s could be neither sealed \"failed\" nor removed (its file system "
	       "fails or does not answer): remove it before the next start, which would "
	       "trust the device's records",
	       c->name, c->map_path);
	return false;
}

/*
 * Make the map file's directory durable (a rename or an unlink in it). A
 * file system that cannot sync a directory (EINVAL) orders it itself.
 * No allocation: a seal relies on it. @return 0 or -errno.
 */
static int map_dir_sync(struct hl_cache *c)
{
	char dir[PATH_MAX];
	int fd, rc = 0;

	if (snprintf(dir, sizeof(dir), "%s", c->map_path) >= (int)sizeof(dir))
		return -ENAMETOOLONG;
	fd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || (fsync(fd) && errno != EINVAL))
		rc = -errno;
	if (fd >= 0)
		close(fd);
	return rc;
}

/* Write text into the map file atomically (tmp + fsync + rename, then the directory). */
static int map_file_write(struct hl_cache *c, const char *text)
{
	char tmp[PATH_MAX];
	FILE *f;
	int rc = 0;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", c->map_path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	f = fopen(tmp, "w");
	if (!f) {
		rc = -errno;
		goto out;
	}
	fputs(text, f);
	if (fflush(f) || fsync(fileno(f)))
		rc = -errno;
	if (fclose(f) && !rc)
		rc = -errno;
	if (!rc && rename(tmp, c->map_path))
		rc = -errno;
	/*
	 * The rename is durable once its directory is: until then a crash may
	 * bring the old map back (a seal's "failed" undone: stale).
	 */
	if (!rc)
		rc = map_dir_sync(c);
out:
	if (rc) {
		/* (rate-limited: a seal that does not land tries again every second) */
		HL_ERR_RL("cache", "cache %s: cannot write %s: %s", c->name, c->map_path,
		          strerror(-rc));
		unlink(tmp);
	}
	return rc;
}

/* Remove the map file (the stop's last word on a seal that cannot be written), durably. */
static int map_file_remove(struct hl_cache *c)
{
	if (unlink(c->map_path) && errno != ENOENT)
		return -errno;
	return map_dir_sync(c);
}

void engine_ent_free(struct map_ent *e)
{
	if (!e)
		return;
	free(e->name);
	free(e->ident);
	free(e->proof);
	free(e->cand);
	pthread_mutex_destroy(&e->shadow_mu);
	free(e);
}

void engine_ent_retire(struct hl_cache *c, struct map_ent *e)
{
	struct map_ent **v;

	engine_orph_reap(c);
	if (!atomic_load(&e->inflight)) {
		engine_ent_free(e);
		return;
	}
	v = realloc(c->orph, (c->n_orph + 1) * sizeof(*v));
	if (!v)
		return; /* leaked: a late fill still reads it */
	c->orph = v;
	c->orph[c->n_orph++] = e;
}

void engine_orph_reap(struct hl_cache *c)
{
	for (size_t i = 0; i < c->n_orph;) {
		if (atomic_load(&c->orph[i]->inflight)) {
			i++;
			continue;
		}
		engine_ent_free(c->orph[i]);
		c->orph[i] = c->orph[--c->n_orph];
	}
}

struct map_ent *engine_ent_new(uint16_t id, uint64_t quota, uint64_t size, const char *name,
                               const char *ident)
{
	struct map_ent *e = calloc(1, sizeof(*e));

	if (!e)
		return NULL;
	e->id = id;
	e->quota = quota;
	e->size = size;
	e->name = strdup(name);
	e->ident = strdup(ident);
	hl_list_init(&e->wlist);
	pthread_mutex_init(&e->shadow_mu, NULL);
	if (!e->name || !e->ident) {
		engine_ent_free(e);
		return NULL;
	}
	return e;
}

int engine_ent_add(struct hl_cache *c, struct map_ent *e)
{
	struct map_ent **n = realloc(c->ents, (c->n_ents + 1) * sizeof(*n));

	if (!n)
		return -ENOMEM;
	c->ents = n;
	c->ents[c->n_ents++] = e;
	return 0;
}

/*
 * The origin's identity: its URI without throttle(...) wrappers (lab knobs,
 * not identity) and without credentials ("user%secret@": not identity
 * either, and the map must never hold a secret). Maps written before
 * credentials were dropped from it are read through this same function, so
 * their disks still match; the map is rewritten at open without them.
 */
const char *engine_origin_ident(const char *uri, char *buf, size_t len)
{
	while (!strncmp(uri, "throttle(", 9)) {
		const char *p = strstr(uri, "):");
		if (!p)
			break;
		uri = p + 2;
	}
	return hl_uri_redact(uri, true, buf, len);
}

/* "hotlun-cache-map N": a version this code reads (1 to 3). */
static bool map_version(const char *line, int *version)
{
	int n = 0;

	if (strncmp(line, MAP_MAGIC, strlen(MAP_MAGIC)) ||
	    sscanf(line + strlen(MAP_MAGIC), "%d", &n) != 1 || n < 1 || n > MAP_VERSION)
		return false;
	*version = n;
	return true;
}

static int hexval(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	return -1;
}

/*
 * "device UUID SEQ": 32 lowercase hex digits and a decimal number (what
 * map_text writes, nothing else: no sign, no blank but one, no overflow).
 */
static bool map_device(const char *line, uint8_t uuid[16], uint64_t *seq)
{
	const char *p = line + 7;
	uint64_t v = 0;

	if (strncmp(line, "device ", 7))
		return false;
	for (int i = 0; i < 16; i++, p += 2) {
		int hi = hexval(p[0]), lo = hi < 0 ? -1 : hexval(p[1]);
		if (hi < 0 || lo < 0)
			return false;
		uuid[i] = (uint8_t)(hi << 4 | lo);
	}
	if (*p++ != ' ' || *p < '0' || *p > '9')
		return false;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
			return false;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (*p && strcmp(p, "\n"))
		return false;
	*seq = v;
	return true;
}

/* engine_map_read's read: its own buffer, so that a read given up on may finish late. */
struct map_read {
	char *path;
	char *text;
	size_t len;
};

/* A map is a few KiB (a 4 KiB line a disk at most): anything far larger is not one. */
#define MAP_READ_MAX (64u << 20)

static int map_read_main(void *arg)
{
	struct map_read *m = *(struct map_read **)arg;
	FILE *f = fopen(m->path, "r");
	size_t cap = 0;
	int rc = 0;

	if (!f)
		return -errno;
	for (;;) {
		char *t;
		size_t n;

		if (m->len == cap) {
			cap = cap ? cap * 2 : 8192;
			if (cap > MAP_READ_MAX || !(t = realloc(m->text, cap + 1))) {
				rc = cap > MAP_READ_MAX ? -EFBIG : -ENOMEM;
				break;
			}
			m->text = t;
		}
		n = fread(m->text + m->len, 1, cap - m->len, f);
		m->len += n;
		if (n == 0) {
			rc = ferror(f) ? -EIO : 0;
			break;
		}
	}
	fclose(f);
	if (m->text)
		m->text[m->len] = '\0';
	return rc;
}

int engine_map_read(struct hl_cache *c)
{
	struct map_read **arg = malloc(sizeof(*arg));
	struct map_read *m = calloc(1, sizeof(*m));
	int rc;

	free(c->map_text);
	c->map_text = NULL;
	c->map_len = 0;
	c->map_read = false;
	if (!arg || !m || !(m->path = strdup(c->map_path))) {
		free(arg);
		free(m);
		return -ENOMEM;
	}
	*arg = m;
	if (!c->drain_ms) { /* (no bound: a harness without a cache's open) */
		rc = map_read_main(arg);
		free(arg);
	} else if (!engine_run_within(c->drain_ms, map_read_main, arg, &rc)) {
		/* m stays the read's (never freed: its file system may never answer) */
		HL_ERR("cache",
		       "cache %s: reading %s did not end within %u ms (its file system is not "
		       "answering?): the cache is not opened",
		       c->name, c->map_path, c->drain_ms);
		return -ETIMEDOUT;
	}
	if (rc == 0 && m->len) {
		c->map_text = m->text;
		c->map_len = m->len;
		m->text = NULL;
	}
	c->map_read = true;
	free(m->text);
	free(m->path);
	free(m);
	return rc;
}

/* The map as read (engine_map_read, once: a read of a hung file system is bounded), or NULL. */
static FILE *map_fopen(struct hl_cache *c)
{
	if (!c->map_read && engine_map_read(c) == -ETIMEDOUT)
		return NULL;
	return c->map_text ? fmemopen(c->map_text, c->map_len, "r") : NULL;
}

/* @return true when the map is usable for this device (else: format). */
bool engine_map_load(struct hl_cache *c)
{
	FILE *f = map_fopen(c);
	char line[4096], state[32] = "", name[256], ident[4096];
	unsigned bs = 0, next = 0, id;
	unsigned long long nslots = 0, devsize = 0, quota, size;
	bool ok = false;
	int pos, version;

	/* (read once: what the start goes by; a later load reads the file again) */
	c->map_read = false;
	if (!f) {
		free(c->map_text);
		c->map_text = NULL;
		return false;
	}
	if (!fgets(line, sizeof(line), f) || !map_version(line, &version))
		goto out;
	if (!fgets(line, sizeof(line), f) || sscanf(line, "state %31s", state) != 1 ||
	    !strcmp(state, "failed"))
		goto out;
	if (!fgets(line, sizeof(line), f) ||
	    sscanf(line, "geometry %u %llu %llu", &bs, &nslots, &devsize) != 3 || bs != c->bs ||
	    nslots != c->nslots || devsize != c->dev->size)
		goto out;
	c->map_dev_known = version >= 3;
	if (version >= 3 &&
	    (!fgets(line, sizeof(line), f) || !map_device(line, c->map_dev_uuid, &c->map_dev_seq)))
		goto out;
	if (!fgets(line, sizeof(line), f) || sscanf(line, "next %u", &next) != 1 || next > 0xffff)
		goto out;
	c->next_id = (uint16_t)next;
	while (fgets(line, sizeof(line), f)) {
		struct map_ent *e;
		line[strcspn(line, "\n")] = 0;
		if (version >= 2 && !strncmp(line, "proof ", 6)) {
			if (sscanf(line, "proof %u %n", &id, &pos) != 1 || !line[pos] ||
			    strlen(line + pos) >= HL_ORIGIN_PROOF_MAX || strpbrk(line + pos, " \t"))
				goto out;
			for (size_t i = 0; i < c->n_ents; i++) {
				if (c->ents[i]->id != id)
					continue;
				free(c->ents[i]->proof);
				c->ents[i]->proof = strdup(line + pos); /* NULL: no proof, cold */
			}
			continue;
		}
		/*
		 * Two disks with one id or one name: never written (ids and names
		 * are unique in the map hotlund keeps), and ambiguous (a proof line
		 * names an id, so it would vouch for both): damaged, formatted.
		 */
		if (sscanf(line, "disk %u %llu %llu %255s %n", &id, &quota, &size, name, &pos) !=
		        4 ||
		    id > 0xffff || engine_ent_by_id(c, (uint16_t)id) || engine_ent_find(c, name))
			goto out;
		e = engine_ent_new((uint16_t)id, quota, size, name,
		                   engine_origin_ident(line + pos, ident, sizeof(ident)));
		if (!e || engine_ent_add(c, e)) {
			engine_ent_free(e);
			goto out;
		}
	}
	ok = true;
out:
	fclose(f);
	free(c->map_text);
	c->map_text = NULL;
	if (!ok) {
		for (size_t i = 0; i < c->n_ents; i++)
			engine_ent_free(c->ents[i]);
		c->n_ents = 0;
		c->next_id = 0;
		c->map_dev_known = false;
	}
	return ok;
}

static void uuid_hex(const uint8_t uuid[16], char out[33])
{
	for (int i = 0; i < 16; i++)
		snprintf(out + 2 * i, 3, "%02x", uuid[i]);
}

bool engine_map_device_ok(struct hl_cache *c, const uint8_t uuid[16], uint64_t seq)
{
	char mu[33], du[33];
	const char *why;

	if (!c->map_dev_known)
		return true; /* (version 1 or 2: rewritten as 3 at open) */
	if (memcmp(c->map_dev_uuid, uuid, 16))
		why = "another device (replaced, or formatted since)";
	else if (seq == c->map_dev_seq || seq == c->map_dev_seq + 1)
		return true; /* (one ahead: a crash between a superblock write and its map write) */
	else if (seq > c->map_dev_seq)
		why = "a map older than the device (restored from a backup?)";
	else
		why = "a device older than the map (restored from an image?)";
	uuid_hex(c->map_dev_uuid, mu);
	uuid_hex(uuid, du);
	HL_WARN("cache",
	        "cache %s: %s was written for cache device %s seq %llu, but %s is device %s seq "
	        "%llu: %s; its cached blocks are dropped and the device is formatted",
	        c->name, c->map_path, mu, (unsigned long long)c->map_dev_seq, c->device, du,
	        (unsigned long long)seq, why);
	for (size_t i = 0; i < c->n_ents; i++)
		engine_ent_free(c->ents[i]);
	c->n_ents = 0;
	c->next_id = 0;
	c->map_dev_known = false;
	return false;
}

bool engine_map_lags(struct hl_cache *c)
{
	return atomic_load(&c->map_stale) || c->map_seq != c->layout.sb_seq;
}

struct map_ent *engine_ent_find(struct hl_cache *c, const char *name)
{
	for (size_t i = 0; i < c->n_ents; i++)
		if (!strcmp(c->ents[i]->name, name))
			return c->ents[i];
	return NULL;
}

struct map_ent *engine_ent_by_id(struct hl_cache *c, uint16_t id)
{
	for (size_t i = 0; i < c->n_ents; i++)
		if (c->ents[i]->id == id)
			return c->ents[i];
	return NULL;
}

static bool id_used(struct hl_cache *c, uint16_t id)
{
	return engine_ent_by_id(c, id) != NULL;
}

/*
 * A LUN id no disk of the map has (ids only grow, wrapping after 65535).
 * After a wrap it may be one a forgotten disk had, so a record of that disk
 * could still name it on the device, and a restart would restore such a
 * record as the new disk's block once the map names the id (and the new
 * disk's proof holds). Why that never happens:
 * - a disk leaves the map at attach (another origin or quota, or forgotten
 *   for room) only after hl_cache_meta_sync rewrote its dropped blocks'
 *   records, or, during a lazy restore, wrote the superblock "restore
 *   pending" with every block of the id in its list (its removal noted
 *   them all), so that a crash drops its records not loaded yet;
 * - a disk the core refuses at open leaves the map at once, its records
 *   still on the device: the loader drops them in RAM as stale claims, and
 *   only a later sync rewrites them. So hl_cache_attach syncs before the
 *   map names any freshly allocated id (the same sync; it writes nothing
 *   when no record is dirty): no record of an earlier holder of the id is
 *   left to restore, or the device is marked pending (the new id is noted
 *   while restoring). engine_ut: "a LUN id handed out again never serves
 *   the old disk's records".
 * Slots carry a LUN index, not the id (cache_keys), and an index is reused
 * only once no slot carries it, so in-flight fills of a removed disk never
 * change keys either.
 */
int engine_ent_id_alloc(struct hl_cache *c, uint16_t *out)
{
	for (uint32_t tries = 0; tries < HL_CACHE_MAX_LUNS; tries++) {
		uint16_t id = c->next_id++;
		if (!id_used(c, id)) {
			*out = id;
			return 0;
		}
	}
	return -ENOSPC;
}

/*
 * Before the device is opened (which extends a regular file to its size):
 * a file shorter than the device its map describes was truncated, and its
 * records may claim slots whose data is gone (a hole reads as zeroes).
 * Refuse it rather than extend it and serve the holes as data. A map that
 * says "failed", or none, formats the device anyway. @return 0 or -EIO.
 */
int engine_map_device_shrank(struct hl_cache *c)
{
	char line[256], state[32] = "";
	unsigned long long devsize = 0;
	unsigned bs;
	unsigned long long nslots;
	struct stat st;
	bool claims = false;
	int version;
	FILE *f;

	if (stat(c->device, &st) || !S_ISREG(st.st_mode))
		return 0;
	f = map_fopen(c);
	if (!f)
		return 0;
	if (fgets(line, sizeof(line), f) && map_version(line, &version) &&
	    fgets(line, sizeof(line), f) && sscanf(line, "state %31s", state) == 1 &&
	    strcmp(state, "failed") && fgets(line, sizeof(line), f) &&
	    sscanf(line, "geometry %u %llu %llu", &bs, &nslots, &devsize) == 3)
		claims = true;
	fclose(f);
	if (!claims || (uint64_t)st.st_size >= devsize)
		return 0;
	HL_ERR("cache",
	       "cache %s: %s is %llu bytes, smaller than the %llu bytes its map %s describes "
	       "(truncated?): refusing the cache; delete the map to format the device",
	       c->name, c->device, (unsigned long long)st.st_size, devsize, c->map_path);
	return -EIO;
}
