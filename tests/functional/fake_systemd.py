#!/usr/bin/env python3
"""fake_systemd.py - systemd's part in a restart with the fd store, for tests.

  fake_systemd.py LOG -- HOTLUND ARGS...

Runs HOTLUND ARGS with NOTIFY_SOCKET set and waits for READY=1; prints
"READY <pid>". On a line "restart" on stdin: SIGTERM to the daemon, keeps
the file descriptors it sends with FDSTORE=1 (as systemd with
FileDescriptorStoreMax= does), waits for it to exit, starts it again with
those descriptors as LISTEN_FDS (from fd 3, LISTEN_PID its own pid), waits
for READY=1 and prints "RESTARTED <pid> fds=N gap_ms=T" (T: SIGTERM to the
new READY=1). On "stop" or end of input: SIGTERM, wait, print "STOPPED rc",
exit. Every notification is appended to LOG.
"""

import array
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time


def main():
    log = open(sys.argv[1], "a", buffering=1)
    cmd = sys.argv[sys.argv.index("--") + 1:]
    tmp = tempfile.mkdtemp(prefix="hotlun-fake-systemd.")
    path = os.path.join(tmp, "notify")
    ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    ns.bind(path)
    ns.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    store = []

    def recv_until(pred, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ns.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                msg, anc, _, _ = ns.recvmsg(4096, socket.CMSG_SPACE(64 * 4))
            except socket.timeout:
                continue
            text = msg.decode(errors="replace")
            fds = array.array("i")
            for level, typ, data in anc:
                if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                    fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
            log.write("%.3f %s fds=%d\n" % (time.monotonic(), text.replace("\n", "|"), len(fds)))
            if "FDSTORE=1" in text:
                store.extend(fds)
            else:
                for fd in fds:
                    os.close(fd)
            if pred(text):
                return True
        return False

    def spawn(fds):
        def child():
            # the stored descriptors at 3, 4, ... as systemd passes them
            moved = [os.dup(fd) for fd in fds]
            for i, fd in enumerate(moved):
                os.dup2(fd, 3 + i)
                os.set_inheritable(3 + i, True)

        # LISTEN_PID must be the daemon's own pid: the shell's, which exec keeps
        env = dict(os.environ, NOTIFY_SOCKET=path, HL_NFDS=str(len(fds)))
        for k in ("LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES"):
            env.pop(k, None)
        return subprocess.Popen(
            ["/bin/sh", "-c",
             'if [ "$HL_NFDS" != 0 ]; then export LISTEN_FDS=$HL_NFDS LISTEN_PID=$$; fi; '
             'unset HL_NFDS; exec "$@"', "sh"] + cmd,
            env=env, preexec_fn=child, close_fds=False)

    proc = spawn([])
    if not recv_until(lambda t: "READY=1" in t, 60):
        print("NOT-READY", flush=True)
        proc.kill()
        return 1
    print("READY %d" % proc.pid, flush=True)
    for line in sys.stdin:
        line = line.strip()
        if line == "restart":
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            while proc.poll() is None:
                recv_until(lambda t: False, 0.05)
            recv_until(lambda t: False, 0.05)  # what it sent last
            fds = list(store)
            store.clear()
            proc = spawn(fds)
            for fd in fds:
                os.close(fd)
            ok = recv_until(lambda t: "READY=1" in t, 60)
            print("%s %d fds=%d gap_ms=%d" % ("RESTARTED" if ok else "NOT-READY", proc.pid,
                                              len(fds), (time.monotonic() - t0) * 1000),
                  flush=True)
        elif line == "stop":
            break
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait()
    print("STOPPED %d" % rc, flush=True)
    os.unlink(path)
    os.rmdir(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
