/*
 * tcp_floor.c - the least CPU a target can spend sending a read's data over
 * TCP on this machine: a server thread that answers each 48-byte request
 * with a 48-byte header and SIZE bytes of data from one buffer (2 MiB
 * transparent huge pages, as src/iscsi/buf.c uses for 1 MiB Data-In), and a
 * client thread that keeps QD requests in flight and reads every reply
 * into its own buffer, like an initiator. No disk, no iSCSI, no cache: what
 * is left is the kernel's send (the copy into the socket and, on loopback,
 * the delivery to the client's socket, which runs in the sender's context).
 * Prints the server's and the client's CPU microseconds per reply
 * (getrusage RUSAGE_THREAD), so that hotlund's CPU per 1 MiB hit can be
 * read against it (docs/bench-hit-device.md, "The floor of a 1 MiB send").
 *
 *   cc -O2 -pthread -o tcp_floor tests/bench/tcp_floor.c
 *   tcp_floor [SIZE_KIB=1024] [QD=8] [SECONDS=4] [SERVER_CPU CLIENT_CPU]
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define HDR 48
#define HUGE (2u << 20)

static size_t size;
static int qd, seconds, cpu_srv = -1, cpu_cli = -1;
static volatile int stop;
static double srv_us, cli_us;
static unsigned long replies;

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static void pin(int cpu)
{
	cpu_set_t set;

	if (cpu < 0)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set))
		die("pthread_setaffinity_np");
}

static double thread_cpu_us(void)
{
	struct rusage ru;

	getrusage(RUSAGE_THREAD, &ru);
	return ru.ru_utime.tv_sec * 1e6 + ru.ru_utime.tv_usec + ru.ru_stime.tv_sec * 1e6 +
	       ru.ru_stime.tv_usec;
}

static void *buffer(size_t len)
{
	size_t cap = (len + HUGE - 1) / HUGE * HUGE;
	void *p;

	if (posix_memalign(&p, HUGE, cap))
		die("posix_memalign");
	madvise(p, cap, MADV_HUGEPAGE);
	memset(p, 0x5a, cap);
	return p;
}

static int read_full(int fd, void *p, size_t len)
{
	while (len) {
		ssize_t n = recv(fd, p, len, 0);

		if (n <= 0)
			return -1;
		p = (char *)p + n;
		len -= (size_t)n;
	}
	return 0;
}

static int write_all(int fd, struct iovec *iov, int cnt)
{
	while (cnt) {
		ssize_t n = writev(fd, iov, cnt);

		if (n < 0)
			return -1;
		while (cnt && (size_t)n >= iov->iov_len) {
			n -= (ssize_t)iov->iov_len;
			iov++;
			cnt--;
		}
		if (cnt) {
			iov->iov_base = (char *)iov->iov_base + n;
			iov->iov_len -= (size_t)n;
		}
	}
	return 0;
}

static void *server(void *arg)
{
	int fd = *(int *)arg;
	char hdr[HDR], req[HDR];
	char *data = buffer(size);
	double t0;

	pin(cpu_srv);
	memset(hdr, 0, sizeof(hdr));
	t0 = thread_cpu_us();
	for (;;) {
		struct iovec iov[2] = { { hdr, HDR }, { data, size } };

		if (read_full(fd, req, HDR))
			break;
		if (write_all(fd, iov, 2))
			break;
	}
	srv_us = thread_cpu_us() - t0;
	return NULL;
}

static void *client(void *arg)
{
	int fd = *(int *)arg;
	char req[HDR], hdr[HDR];
	char *data = buffer(size);
	struct timespec end;
	double t0;
	int i;

	pin(cpu_cli);
	memset(req, 0, sizeof(req));
	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += seconds;
	t0 = thread_cpu_us();
	for (i = 0; i < qd; i++)
		if (send(fd, req, HDR, 0) != HDR)
			die("send");
	for (;;) {
		struct timespec now;

		if (read_full(fd, hdr, HDR) || read_full(fd, data, size))
			die("client read");
		replies++;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec > end.tv_sec || (now.tv_sec == end.tv_sec && now.tv_nsec >= end.tv_nsec))
			break;
		if (send(fd, req, HDR, 0) != HDR)
			die("send");
	}
	cli_us = thread_cpu_us() - t0;
	for (i = 1; i < qd; i++)
		if (read_full(fd, hdr, HDR) || read_full(fd, data, size))
			die("client drain");
	shutdown(fd, SHUT_WR);
	return NULL;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sa);
	pthread_t ts, tc;
	int lfd, cfd, sfd, one = 1;

	size = (size_t)(argc > 1 ? atoi(argv[1]) : 1024) * 1024;
	qd = argc > 2 ? atoi(argv[2]) : 8;
	seconds = argc > 3 ? atoi(argv[3]) : 4;
	if (argc > 5) {
		cpu_srv = atoi(argv[4]);
		cpu_cli = atoi(argv[5]);
	}
	if (!size || qd < 1 || seconds < 1) {
		fprintf(stderr, "usage: tcp_floor [SIZE_KIB] [QD] [SECONDS] [SERVER_CPU CLIENT_CPU]\n");
		return 2;
	}
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd, 1) ||
	    getsockname(lfd, (struct sockaddr *)&sa, &sl))
		die("listen");
	cfd = socket(AF_INET, SOCK_STREAM, 0);
	if (cfd < 0 || connect(cfd, (struct sockaddr *)&sa, sizeof(sa)))
		die("connect");
	sfd = accept(lfd, NULL, NULL);
	if (sfd < 0)
		die("accept");
	setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(sfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	pthread_create(&ts, NULL, server, &sfd);
	pthread_create(&tc, NULL, client, &cfd);
	pthread_join(tc, NULL);
	pthread_join(ts, NULL);
	printf("size_kib=%zu qd=%d replies=%lu per_s=%.0f mib_s=%.0f server_us_per_reply=%.1f "
	       "client_us_per_reply=%.1f\n",
	       size / 1024, qd, replies, replies / (double)seconds,
	       replies * (double)size / seconds / 1048576.0, srv_us / replies, cli_us / replies);
	return 0;
}
