/*
 * count_cost.c - the instructions the counting wrapper (src/origin/counted.c)
 * adds to one I/O, without an event loop to blur them: N reads through the
 * wrapper over an origin that completes at once, tagged as cache hits.
 * tests/bench/metrics_cost.sh builds it against the library and runs it
 * under callgrind with the latency recording on and off
 * (HOTLUN_COUNT_NO_LATENCY=1).
 *
 *   count_cost N
 */
#include "config.h"

#include "origin/origin_internal.h"

#include <stdio.h>
#include <stdlib.h>

static int fake_submit(struct hl_origin *o, struct hl_origin_io *io)
{
	(void)o;
	io->source = HL_IO_SRC_HIT;
	io->cb(io, 0);
	return 0;
}

static void fake_close(struct hl_origin *o)
{
	(void)o;
}

static const struct hl_origin_ops fake_ops = {
    .name = "fake",
    .scheme = "fake:",
    .close = fake_close,
    .submit = fake_submit,
};

static unsigned long done;

static void cb(struct hl_origin_io *io, int result)
{
	(void)io;
	done += result == 0;
}

int main(int argc, char **argv)
{
	unsigned long n = argc > 1 ? strtoul(argv[1], NULL, 10) : 1000000;
	struct hl_origin *b = NULL, *o = NULL;
	struct hl_origin_stats *st = NULL;
	struct hl_origin_counters c;
	static char buf[4096];
	struct iovec iov = {buf, sizeof(buf)};

	if (origin_alloc(&fake_ops, "fake:x", &b) || (b->size = 1 << 30, 0) ||
	    hl_origin_count_wrap(b, &o, &st))
		return 1;
	for (unsigned long i = 0; i < n; i++) {
		struct hl_origin_io io = {.op = HL_IO_READ,
		                          .offset = (i % 1024) * 4096,
		                          .length = 4096,
		                          .iov = &iov,
		                          .iovcnt = 1,
		                          .cb = cb};
		if (hl_origin_submit(o, &io))
			return 1;
	}
	hl_origin_counters_read(st, &c);
	printf("reads=%llu done=%lu timed=%d\n", (unsigned long long)c.read_cmds, done, c.timed);
	hl_origin_close(o);
	return c.read_cmds == n ? 0 : 1;
}
