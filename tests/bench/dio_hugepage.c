/*
 * dio_hugepage.c - the cache device alone: random O_DIRECT reads of BS bytes
 * at queue depth QD through io_uring into buffers of 4 KiB pages or of 2 MiB
 * transparent huge pages, for SECONDS; prints the IOPS. It shows what the
 * huge-page data buffers (src/iscsi/buf.c) change at the device itself:
 * one physically contiguous segment per read instead of BS / 4 KiB.
 * fio cannot use transparent huge pages for its buffers (only hugetlbfs).
 *
 *   cc -O2 -o dio_hugepage tests/bench/dio_hugepage.c -luring
 *   dio_hugepage FILE HUGE(0|1) SECONDS [BS_KIB=1024] [QD=8]
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define HUGE (2u << 20)
#define QD_MAX 64

static void prep(struct io_uring *r, int fd, void *buf, size_t bs, off_t nblk, int i)
{
	struct io_uring_sqe *s = io_uring_get_sqe(r);

	io_uring_prep_read(s, fd, buf, (unsigned)bs, (off_t)(random() % nblk) * (off_t)bs);
	s->user_data = (unsigned)i;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: %s FILE HUGE(0|1) SECONDS [BS_KIB] [QD]\n", argv[0]);
		return 2;
	}
	int huge = atoi(argv[2]), secs = atoi(argv[3]);
	size_t bs = (argc > 4 ? (size_t)atoi(argv[4]) : 1024) << 10;
	int qd = argc > 5 ? atoi(argv[5]) : 8;
	int fd = open(argv[1], O_RDONLY | O_DIRECT);
	void *buf[QD_MAX];
	struct io_uring r;
	struct timespec t0, t1;
	long n = 0;

	if (fd < 0 || qd < 1 || qd > QD_MAX || bs == 0) {
		perror(argv[1]);
		return 2;
	}
	off_t nblk = lseek(fd, 0, SEEK_END) / (off_t)bs;
	if (nblk < 1 || io_uring_queue_init(QD_MAX, &r, 0) < 0)
		return 2;
	for (int i = 0; i < qd; i++) {
		size_t len = huge ? (bs + HUGE - 1) / HUGE * HUGE : bs;
		if (posix_memalign(&buf[i], huge ? HUGE : 4096, len) != 0)
			return 2;
		if (huge)
			madvise(buf[i], len, MADV_HUGEPAGE);
		memset(buf[i], 1, len); /* fault it in before timing */
	}
	for (int i = 0; i < qd; i++)
		prep(&r, fd, buf[i], bs, nblk, i);
	io_uring_submit(&r);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct io_uring_cqe *c;
		if (io_uring_wait_cqe(&r, &c) < 0)
			return 1;
		int i = (int)c->user_data;
		if (c->res != (int)bs) {
			fprintf(stderr, "read: %d\n", c->res);
			return 1;
		}
		io_uring_cqe_seen(&r, c);
		n++;
		clock_gettime(CLOCK_MONOTONIC, &t1);
		if (t1.tv_sec - t0.tv_sec >= secs)
			break;
		prep(&r, fd, buf[i], bs, nblk, i);
		io_uring_submit(&r);
	}
	double el = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("huge=%d bs=%zuK qd=%d: %.0f IOPS\n", huge, bs >> 10, qd, (double)n / el);
	return 0;
}
