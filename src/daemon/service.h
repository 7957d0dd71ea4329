/*
 * service.h - hotlund under a service manager (src/daemon/service.c):
 * readiness, reload and stop notifications, a status line and the
 * watchdog, through sd_notify(3) when systemd started the daemon
 * (NOTIFY_SOCKET set). Without it, or built without libsystemd, every
 * call here does nothing and the main thread sleeps as before.
 *
 * Threads: everything here is called from the main thread (the one that
 * waits for signals), except what it posts to the control reactor.
 */
#ifndef HL_DAEMON_SERVICE_H
#define HL_DAEMON_SERVICE_H

#include <stdbool.h>

struct daemon;

/**
 * Read the service manager's environment (NOTIFY_SOCKET, WATCHDOG_USEC) and
 * the test hook HL_TEST_STALL_REACTOR. Before any thread starts.
 * @return true when the test hook asks for SIGUSR1 (the caller waits for it).
 */
bool daemon_service_init(void);

/**
 * Every portal listens, every cache is loaded and the control socket is up:
 * READY=1 with the first STATUS= line. After daemon_control_start().
 */
void daemon_service_ready(struct daemon *d);

/**
 * A SIGHUP arrived: RELOADING=1 now; READY=1 once the reload ran (posted).
 * reload returns true when the disks it removed still close in the
 * background: READY=1 then waits for daemon_service_reloaded.
 */
void daemon_service_reload(struct daemon *d, bool (*reload)(struct daemon *d));

/** The closes of a SIGHUP reload ended: READY=1 (control reactor). */
void daemon_service_reloaded(struct daemon *d);

/** SIGTERM/SIGINT: STOPPING=1, and release a reactor the test hook stalled. */
void daemon_service_stopping(void);

/**
 * Listening sockets the service manager passes (LISTEN_FDS: the previous
 * process's portals, kept in its fd store across a restart): up to max of
 * them into fds (the caller takes them). Before any thread starts.
 * @return how many.
 */
unsigned daemon_service_listen_fds(int *fds, unsigned max);

/**
 * Hand the portals' listening sockets to the service manager (FDSTORE=1;
 * hotlund.service has FileDescriptorStoreMax=), so that connections made
 * while hotlund restarts wait in their backlog for the next process.
 * @return true when the manager took them (the caller then keeps them
 * listening); false without a service manager.
 */
bool daemon_service_store_fds(const int *fds, unsigned n);

/**
 * How long the main thread may wait for a signal before the next
 * daemon_service_tick(), in milliseconds; -1: forever (nothing to do).
 */
int daemon_service_tick_ms(void);

/**
 * Periodic work on the main thread: WATCHDOG=1 when every reactor made
 * progress since the last check, a fresh STATUS= every few seconds.
 */
void daemon_service_tick(struct daemon *d);

/**
 * Test hook (HL_TEST_STALL_REACTOR=N set): SIGUSR1 makes reactor N (the
 * control reactor when N is "ctl") block in a callback until the next
 * SIGUSR1 or SIGTERM, so a test can see the watchdog pings stop.
 */
void daemon_service_test_toggle_stall(struct daemon *d);

#endif
