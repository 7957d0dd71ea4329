/*
 * hotlun_sim.c - hotlun-sim: replay a block trace through the exact
 * src/cache policy core (device I/O replaced by accounting) and through the
 * simulator's reference policies, and report hit ratios and the bytes each
 * policy writes to the cache device.
 *
 *   hotlun-sim [--format vscsi|msr|blocks] --size 5%|2G[,...] --block 4K[,...]
 *              --policy default,lru,arc,s3fifo,belady [--json] TRACE
 *
 * Definitions (docs/cache-policy.md): a read request is a hit when every
 * 4 KiB sector it touches is in the cache when it arrives; the byte hit
 * ratio counts the bytes of read requests that came from the cache. Writes
 * are applied like the daemon applies them (write-through update of cached
 * blocks, or invalidate), and their cache-device bytes are counted too.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hotlun/cache.h"
#include "hotlun/util.h"
#include "sim/sim.h"

#define MAX_LIST 16

struct sim_opts {
	enum sim_format fmt;
	char *sizes[MAX_LIST];
	unsigned nsizes;
	uint32_t blocks[MAX_LIST];
	unsigned nblocks;
	char *policies[MAX_LIST];
	unsigned npolicies;
	bool json;
	uint64_t seq_bypass;
	enum hl_cache_write_mode write_mode;
	uint64_t window_bytes;
	uint64_t update_buffer; /* RAM update buffer bytes (0: off); the daemon's default */
	uint32_t write_budget;  /* percent (rule 10) */
	uint32_t promote_max;   /* a read's promotions per block (hotlund's; 0: the old model) */
	const char *trace;
};

struct sim_result {
	const char *policy;
	uint32_t block;
	uint64_t cache_blocks, footprint;
	double size_pct;
	uint64_t reads, hits, partial, bytes_read, bytes_hit, cache_write_bytes, writes;
	uint64_t cache_update_bytes;
	uint64_t admissions, rejections, evictions, bypass;
	double seconds;
	double ram_per_block;
	size_t admit_ram;
	uint64_t window_slots, bytes_hit_ram;
	uint64_t ub_pending; /* update-buffer bytes not written back by the end (charged) */
};

/* CPU time of this (single-threaded) process: speed is not skewed by other load. */
static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: hotlun-sim [--format vscsi|msr|blocks] --size 5%%|2G[,..] --block 4K[,..]\n"
	        "                  --policy default,lru,arc,s3fifo,belady[,always,nhit:N]\n"
	        "                  [--seq-bypass BYTES] [--write-mode update|invalidate]\n"
	        "                  [--window BYTES|auto] [--update-buffer BYTES]\n"
	        "                  [--write-budget PCT] [--promote-max N|any] [--json] TRACE\n"
	        "  --size   cache size in bytes or percent of the trace's read footprint\n"
	        "  default  hotlun's configured policy (freq admission, CLOCK, 1M seq bypass)\n"
	        "  --update-buffer  RAM for updates of cached blocks, written back oldest\n"
	        "           first (write coalescing; default 16M as in hotlund; 0: off).\n"
	        "           Bytes still buffered at the end count as cache writes.\n"
	        "  --write-budget  admission relaxes while the cache device wrote less than\n"
	        "           PCT%% of what an admit-all cache would (default 25; 0: never).\n"
	        "  --promote-max  window promotions a read of nb blocks may plan: N x nb\n"
	        "           (default %u, as hotlund's request array; any: 2 x the trace's\n"
	        "           largest read less nb, the model of earlier grids).\n",
	        HL_CACHE_PROMOTE_PER_MISS);
}

static int split_list(char *s, char **out, unsigned *n)
{
	for (char *save = NULL, *p = strtok_r(s, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
		if (*n == MAX_LIST)
			return -E2BIG;
		out[(*n)++] = p;
	}
	return 0;
}

/* Byte range of request r for block size bs. */
static inline void req_range(const struct sim_req *r, uint32_t bs, uint64_t *off, uint64_t *len)
{
	if (r->in_blocks) {
		*off = r->off * bs;
		*len = bs;
	} else {
		*off = r->off;
		*len = r->len;
	}
}

static inline uint64_t key_of(uint16_t lun, uint64_t b)
{
	return (uint64_t)lun << 48 | (b & ((1ull << 48) - 1));
}

/* Read block accesses in order and, for each, the index of the next read of that block. */
struct access_seq {
	uint64_t *next;
	uint64_t n;
	uint64_t footprint;
};

static int build_accesses(const struct sim_trace *t, uint32_t bs, struct access_seq *a)
{
	uint64_t n = 0, k;
	uint64_t *keys;
	struct sim_map last;

	for (size_t i = 0; i < t->n; i++) {
		uint64_t off, len;
		if (t->reqs[i].write)
			continue;
		req_range(&t->reqs[i], bs, &off, &len);
		n += (off + len - 1) / bs - off / bs + 1;
	}
	keys = malloc((n ? n : 1) * sizeof(*keys));
	a->next = malloc((n ? n : 1) * sizeof(*a->next));
	if (!keys || !a->next || sim_map_init(&last, 1024)) {
		free(keys);
		free(a->next);
		return -ENOMEM;
	}
	k = 0;
	for (size_t i = 0; i < t->n; i++) {
		uint64_t off, len;
		if (t->reqs[i].write)
			continue;
		req_range(&t->reqs[i], bs, &off, &len);
		for (uint64_t b = off / bs; b <= (off + len - 1) / bs; b++)
			keys[k++] = key_of(t->reqs[i].lun, b);
	}
	/* One backward pass; the map holds positions as u32 pairs would not fit, so use 2 maps. */
	for (uint64_t i = n; i-- > 0;) {
		uint32_t *v = sim_map_get(&last, keys[i]);
		/* Positions above 4G are not expected from real traces; cap them. */
		a->next[i] = v ? *v : UINT64_MAX;
		if (sim_map_put(&last, keys[i], (uint32_t)HL_MIN(i, (uint64_t)UINT32_MAX - 1))) {
			sim_map_fini(&last);
			free(keys);
			free(a->next);
			return -ENOMEM;
		}
	}
	a->n = n;
	a->footprint = last.count;
	sim_map_fini(&last);
	free(keys);
	return 0;
}

static int run_ref(const struct sim_ref_ops *ops, const struct sim_trace *t, uint32_t bs,
                   uint64_t cap, const struct access_seq *a, enum hl_cache_write_mode wm,
                   struct sim_result *res)
{
	struct sim_ref *r;
	uint64_t idx = 0;
	double t0 = now_s();
	int rc = ops->create(cap, &r);

	if (rc)
		return rc;
	for (size_t i = 0; i < t->n; i++) {
		const struct sim_req *q = &t->reqs[i];
		uint64_t off, len, b0, b1;
		req_range(q, bs, &off, &len);
		b0 = off / bs;
		b1 = (off + len - 1) / bs;
		if (!q->write) {
			uint64_t hit_bytes = 0;
			bool all = true;
			for (uint64_t b = b0; b <= b1; b++) {
				bool adm;
				bool hit =
				    ops->access(r, key_of(q->lun, b), idx, a->next[idx], &adm);
				idx++;
				if (hit) {
					uint64_t s = HL_MAX(off, b * bs),
					         e = HL_MIN(off + len, (b + 1) * bs);
					hit_bytes += e - s;
				} else {
					all = false;
				}
				if (adm)
					res->cache_write_bytes += bs;
			}
			res->reads++;
			res->bytes_read += len;
			res->bytes_hit += hit_bytes;
			if (all)
				res->hits++;
			else if (hit_bytes)
				res->partial++;
		} else {
			res->writes++;
			for (uint64_t b = b0; b <= b1; b++) {
				uint64_t key = key_of(q->lun, b);
				if (!ops->contains(r, key))
					continue;
				if (wm == HL_CACHE_WRITE_INVALIDATE) {
					ops->remove(r, key);
					continue;
				}
				/*
				 * The 4K sectors of the block that the write touches
				 * (partly written ones by read-modify-write, as hotlun).
				 */
				uint64_t s =
				    HL_MAX(off, b * bs) / HL_CACHE_SECTOR * HL_CACHE_SECTOR;
				uint64_t e =
				    HL_ALIGN_UP(HL_MIN(off + len, (b + 1) * bs), HL_CACHE_SECTOR);
				res->cache_write_bytes += e - s;
				res->cache_update_bytes += e - s;
			}
		}
	}
	res->seconds = now_s() - t0;
	ops->destroy(r);
	return 0;
}

static int run_hotlun(const char *policy, const struct sim_trace *t, uint32_t bs, uint64_t cap,
                      const struct sim_opts *o, struct sim_result *res)
{
	struct hl_cache_params p;
	struct hl_cache_core *c;
	struct hl_cache_stats st;
	struct hl_cache_core_info info;
	struct hl_cache_io *ios;
	uint32_t maxios = 2;
	uint16_t maxlun = 0;
	double t0;
	int rc;

	hl_cache_params_default(&p);
	p.block_size = bs;
	p.capacity = cap * bs;
	p.seq_bypass = o->seq_bypass;
	p.write_mode = o->write_mode;
	p.window_bytes = o->window_bytes;
	p.write_budget_pct = o->write_budget;
	if (strcmp(policy, "default") && hl_admit_parse(policy, &p.admit, &p.admit_param)) {
		fprintf(stderr, "hotlun-sim: unknown policy '%s'\n", policy);
		return -EINVAL;
	}
	for (size_t i = 0; i < t->n; i++) {
		uint64_t off, len;
		req_range(&t->reqs[i], bs, &off, &len);
		maxios = HL_MAX(maxios, (uint32_t)((off + len - 1) / bs - off / bs + 1));
		maxlun = HL_MAX(maxlun, t->reqs[i].lun);
	}
	/* room for window promotions: as hotlund's array, or the old model's 2 x */
	maxios = o->promote_max ? hl_cache_read_max_ios_per(maxios, o->promote_max) : maxios * 2;
	ios = calloc(maxios, sizeof(*ios));
	if (!ios)
		return -ENOMEM;
	rc = hl_cache_core_create(&p, &c);
	/* As hotlund: every hotlun policy has the buffer (update mode only writes into it). */
	if (!rc && o->update_buffer)
		rc = hl_cache_core_set_update_buffer(c, o->update_buffer);
	if (rc) {
		hl_cache_core_destroy(c);
		free(ios);
		fprintf(stderr, "hotlun-sim: cache create: %s\n", strerror(-rc));
		return rc;
	}
	for (uint32_t l = 0; l <= maxlun; l++)
		hl_cache_core_lun_add(c, (uint16_t)l, 0);
	t0 = now_s();
	for (size_t i = 0; i < t->n; i++) {
		const struct sim_req *q = &t->reqs[i];
		uint64_t off, len;
		int n;
		req_range(q, bs, &off, &len);
		if (!q->write) {
			/* As hotlund plans it: a read carries at most N x nb promotions. */
			uint32_t nb = (uint32_t)((off + len - 1) / bs - off / bs + 1);
			uint32_t max =
			    o->promote_max ? hl_cache_read_max_ios_per(nb, o->promote_max) : maxios;
			n = hl_cache_core_read(c, q->lun, off, len, ios, max);
			for (int k = 0; k < n; k++)
				hl_cache_core_io_end(c, q->lun, &ios[k], true);
		} else {
			n = hl_cache_core_write_begin(c, q->lun, off, len, ios, maxios);
			for (int k = 0; k < n; k++) {
				hl_cache_core_write_end(c, q->lun, &ios[k], true);
				if (ios[k].fill_nsect)
					hl_cache_core_io_end(c, q->lun, &ios[k], true);
			}
			struct hl_cache_io wb;
			uint16_t wl;
			while (n > 0 && hl_cache_core_ub_writeback(c, &wl, &wb))
				hl_cache_core_io_end(c, wl, &wb, true);
		}
		if (n < 0) {
			fprintf(stderr, "hotlun-sim: request %zu: %s\n", i, strerror(-n));
			rc = n;
			break;
		}
	}
	res->seconds = now_s() - t0;
	hl_cache_core_stats(c, -1, &st);
	hl_cache_core_info(c, &info);
	res->reads = st.read_reqs;
	res->hits = st.read_hits;
	res->partial = st.read_partial;
	res->bytes_read = st.bytes_read;
	res->bytes_hit = st.bytes_read_cache;
	res->cache_write_bytes = st.bytes_cache_write;
	res->cache_update_bytes = st.bytes_cache_update;
	res->writes = st.write_reqs;
	res->admissions = st.admissions;
	res->rejections = st.rejections;
	res->evictions = st.evictions;
	res->bypass = st.read_bypass;
	res->ram_per_block = info.ram_per_block;
	res->admit_ram = info.admit_ram_bytes;
	res->window_slots = info.window_slots;
	res->bytes_hit_ram = st.bytes_read_ram;
	for (uint64_t s = 0; o->update_buffer && s < info.nslots; s++)
		res->ub_pending += hl_cache_core_ub_pending(c, (uint32_t)s, NULL);
	/*
	 * The buffer only defers writes: what it still holds at the end is
	 * charged as if written back (an upper bound; some of it would be
	 * overwritten or evicted first). docs/cache-policy.md, "Definitions".
	 */
	res->cache_write_bytes += res->ub_pending;
	res->cache_update_bytes += res->ub_pending;
	hl_cache_core_destroy(c);
	free(ios);
	return rc;
}

static void print_json(const struct sim_result *r, const struct sim_opts *o, bool first)
{
	double req = (double)(r->reads + r->writes);
	printf("%s\n  {\"policy\": \"%s\", \"trace\": \"%s\", \"block_size\": %u, "
	       "\"cache_blocks\": %" PRIu64 ", \"cache_bytes\": %" PRIu64
	       ", \"footprint_blocks\": %" PRIu64 ", \"size_pct\": %.2f, "
	       "\"reads\": %" PRIu64 ", \"hits\": %" PRIu64 ", \"partial_hits\": %" PRIu64
	       ", \"writes\": %" PRIu64 ", \"read_hit_ratio\": %.6f, \"byte_hit_ratio\": %.6f, "
	       "\"bytes_read\": %" PRIu64 ", \"bytes_hit\": %" PRIu64
	       ", \"cache_write_bytes\": %" PRIu64 ", \"cache_update_bytes\": %" PRIu64,
	       first ? "" : ",", r->policy, o->trace, r->block, r->cache_blocks,
	       r->cache_blocks * r->block, r->footprint, r->size_pct, r->reads, r->hits, r->partial,
	       r->writes, r->reads ? (double)r->hits / (double)r->reads : 0.0,
	       r->bytes_read ? (double)r->bytes_hit / (double)r->bytes_read : 0.0, r->bytes_read,
	       r->bytes_hit, r->cache_write_bytes, r->cache_update_bytes);
	if (r->ram_per_block > 0)
		printf(", \"admissions\": %" PRIu64 ", \"rejections\": %" PRIu64
		       ", \"evictions\": %" PRIu64 ", \"seq_bypass_reads\": %" PRIu64
		       ", \"ram_bytes_per_block\": %.2f, \"admit_ram_bytes\": %zu"
		       ", \"window_blocks\": %" PRIu64 ", \"bytes_hit_ram\": %" PRIu64
		       ", \"update_buffer_pending_bytes\": %" PRIu64,
		       r->admissions, r->rejections, r->evictions, r->bypass, r->ram_per_block,
		       r->admit_ram, r->window_slots, r->bytes_hit_ram, r->ub_pending);
	printf(", \"seconds\": %.6f, \"requests_per_sec\": %.0f}", r->seconds,
	       r->seconds > 0 ? req / r->seconds : 0.0);
}

static void print_row(const struct sim_result *r)
{
	char cw[32], cs[32];
	double req = (double)(r->reads + r->writes);
	printf("%-10s %6uK %9" PRIu64 " %8s %6.1f%% %9" PRIu64 " %8.2f%% %8.2f%% %10s %10.0f\n",
	       r->policy, r->block / 1024, r->cache_blocks,
	       hl_format_size(r->cache_blocks * r->block, cs, sizeof(cs)), r->size_pct, r->reads,
	       r->reads ? 100.0 * (double)r->hits / (double)r->reads : 0.0,
	       r->bytes_read ? 100.0 * (double)r->bytes_hit / (double)r->bytes_read : 0.0,
	       hl_format_size(r->cache_write_bytes, cw, sizeof(cw)),
	       r->seconds > 0 ? req / r->seconds : 0.0);
}

static const struct sim_ref_ops *ref_ops(const char *name)
{
	static const struct sim_ref_ops *const all[] = {&sim_ref_lru, &sim_ref_arc, &sim_ref_s3fifo,
	                                                &sim_ref_belady};
	for (size_t i = 0; i < HL_ARRAY_SIZE(all); i++)
		if (!strcmp(all[i]->name, name))
			return all[i];
	return NULL;
}

int main(int argc, char **argv)
{
	static const struct option lopts[] = {
	    {"format", required_argument, NULL, 'f'},
	    {"size", required_argument, NULL, 's'},
	    {"block", required_argument, NULL, 'b'},
	    {"policy", required_argument, NULL, 'p'},
	    {"json", no_argument, NULL, 'j'},
	    {"seq-bypass", required_argument, NULL, 'q'},
	    {"write-mode", required_argument, NULL, 'w'},
	    {"window", required_argument, NULL, 'W'},
	    {"update-buffer", required_argument, NULL, 'U'},
	    {"write-budget", required_argument, NULL, 'B'},
	    {"promote-max", required_argument, NULL, 'P'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct sim_opts o = {.fmt = SIM_FMT_AUTO,
	                     .seq_bypass = 1024 * 1024,
	                     .window_bytes = HL_CACHE_WINDOW_AUTO,
	                     .update_buffer = HL_CACHE_UPDATE_BUFFER_DEFAULT,
	                     .write_budget = HL_CACHE_WRITE_BUDGET_DEFAULT,
	                     .promote_max = HL_CACHE_PROMOTE_PER_MISS};
	char *blist[MAX_LIST];
	unsigned nb = 0;
	struct sim_trace t;
	bool first = true;
	int opt, rc = 0;

	while ((opt = getopt_long(argc, argv, "f:s:b:p:jq:w:W:U:B:P:h", lopts, NULL)) != -1) {
		switch (opt) {
		case 'f':
			if (!strcmp(optarg, "vscsi"))
				o.fmt = SIM_FMT_VSCSI;
			else if (!strcmp(optarg, "msr"))
				o.fmt = SIM_FMT_MSR;
			else if (!strcmp(optarg, "blocks"))
				o.fmt = SIM_FMT_BLOCKS;
			else {
				fprintf(stderr, "hotlun-sim: unknown format '%s'\n", optarg);
				return 2;
			}
			break;
		case 's':
			if (split_list(optarg, o.sizes, &o.nsizes))
				goto bad;
			break;
		case 'b':
			if (split_list(optarg, blist, &nb))
				goto bad;
			break;
		case 'p':
			if (split_list(optarg, o.policies, &o.npolicies))
				goto bad;
			break;
		case 'j':
			o.json = true;
			break;
		case 'q':
			if (hl_parse_size(optarg, &o.seq_bypass)) {
				fprintf(stderr, "hotlun-sim: bad --seq-bypass '%s'\n", optarg);
				return 2;
			}
			break;
		case 'w':
			if (!strcmp(optarg, "update"))
				o.write_mode = HL_CACHE_WRITE_UPDATE;
			else if (!strcmp(optarg, "invalidate"))
				o.write_mode = HL_CACHE_WRITE_INVALIDATE;
			else {
				fprintf(stderr, "hotlun-sim: bad --write-mode '%s'\n", optarg);
				return 2;
			}
			break;
		case 'W':
			if (!strcmp(optarg, "auto"))
				o.window_bytes = HL_CACHE_WINDOW_AUTO;
			else if (hl_parse_size(optarg, &o.window_bytes)) {
				fprintf(stderr, "hotlun-sim: bad --window '%s'\n", optarg);
				return 2;
			}
			break;
		case 'U':
			if (hl_parse_size(optarg, &o.update_buffer)) {
				fprintf(stderr, "hotlun-sim: bad --update-buffer '%s'\n", optarg);
				return 2;
			}
			break;
		case 'B':
			if (hl_parse_percent(optarg, &o.write_budget)) {
				fprintf(stderr,
				        "hotlun-sim: bad --write-budget '%s' (0-100, percent)\n",
				        optarg);
				return 2;
			}
			break;
		case 'P': {
			char *end;
			unsigned long v = strtoul(optarg, &end, 10);
			if (!strcmp(optarg, "any"))
				o.promote_max = 0;
			else if (*optarg < '0' || *optarg > '9' || *end || !v || v > 64) {
				fprintf(stderr, "hotlun-sim: bad --promote-max '%s' (1-64 or any)\n",
				        optarg);
				return 2;
			} else
				o.promote_max = (uint32_t)v;
			break;
		}
		case 'h':
			usage(stdout);
			return 0;
		default:
			goto bad;
		}
	}
	if (optind != argc - 1)
		goto bad;
	o.trace = argv[optind];
	if (!o.nsizes) {
		fprintf(stderr, "hotlun-sim: --size is required\n");
		goto bad;
	}
	if (!nb)
		blist[nb++] = "4K";
	for (unsigned i = 0; i < nb; i++) {
		uint64_t v;
		if (hl_parse_size(blist[i], &v) || v < HL_CACHE_MIN_BLOCK ||
		    v > HL_CACHE_MAX_BLOCK || (v & (v - 1))) {
			fprintf(stderr, "hotlun-sim: bad --block '%s' (4K..1M, power of two)\n",
			        blist[i]);
			return 2;
		}
		o.blocks[o.nblocks++] = (uint32_t)v;
	}
	if (!o.npolicies)
		o.policies[o.npolicies++] = "default";
	for (unsigned i = 0; i < o.npolicies; i++) {
		enum hl_admit_kind k;
		uint32_t prm;
		if (!ref_ops(o.policies[i]) && strcmp(o.policies[i], "default") &&
		    hl_admit_parse(o.policies[i], &k, &prm)) {
			fprintf(stderr, "hotlun-sim: unknown policy '%s'\n", o.policies[i]);
			return 2;
		}
	}
	if (sim_trace_load(o.trace, o.fmt, &t))
		return 1;
	if (o.json)
		printf("[");
	else
		printf("%-10s %7s %9s %8s %7s %9s %9s %9s %10s %10s\n", "policy", "block",
		       "cblocks", "size", "of fp", "reads", "hit", "bytehit", "cachewr", "req/s");
	for (unsigned bi = 0; bi < o.nblocks && !rc; bi++) {
		uint32_t bs = o.blocks[bi];
		struct access_seq a;
		if (build_accesses(&t, bs, &a)) {
			fprintf(stderr, "hotlun-sim: out of memory\n");
			rc = 1;
			break;
		}
		for (unsigned si = 0; si < o.nsizes && !rc; si++) {
			const char *s = o.sizes[si];
			size_t sl = strlen(s);
			uint64_t cap;
			double pct;
			if (sl > 1 && s[sl - 1] == '%') {
				char *end;
				pct = strtod(s, &end);
				if (end != s + sl - 1 || pct <= 0 || pct > 100000) {
					fprintf(stderr, "hotlun-sim: bad --size '%s'\n", s);
					rc = 2;
					break;
				}
				cap = (uint64_t)((double)a.footprint * pct / 100.0 + 0.5);
			} else {
				uint64_t bytes;
				if (hl_parse_size(s, &bytes)) {
					fprintf(stderr, "hotlun-sim: bad --size '%s'\n", s);
					rc = 2;
					break;
				}
				cap = bytes / bs;
				pct = a.footprint ? 100.0 * (double)cap / (double)a.footprint : 0;
			}
			if (cap < 1)
				cap = 1;
			for (unsigned pi = 0; pi < o.npolicies && !rc; pi++) {
				struct sim_result res = {.policy = o.policies[pi],
				                         .block = bs,
				                         .cache_blocks = cap,
				                         .footprint = a.footprint,
				                         .size_pct = pct};
				const struct sim_ref_ops *ops = ref_ops(o.policies[pi]);
				if (ops)
					rc = run_ref(ops, &t, bs, cap, &a, o.write_mode, &res);
				else
					rc = run_hotlun(o.policies[pi], &t, bs, cap, &o, &res);
				if (rc) {
					rc = 1;
					break;
				}
				if (o.json)
					print_json(&res, &o, first);
				else
					print_row(&res);
				first = false;
			}
		}
		free(a.next);
	}
	if (o.json)
		printf("\n]\n");
	sim_trace_free(&t);
	return rc;
bad:
	usage(stderr);
	return 2;
}
