#!/usr/bin/env python3
"""tcp_forward.py - a TCP forwarder for path-failure tests.

  tcp_forward.py LISTEN_PORT TARGET_HOST:TARGET_PORT

Listens on 127.0.0.1:LISTEN_PORT and copies bytes both ways between each
accepted connection and a new connection to the target. Killing it
(SIGKILL) fails every path through it at once; stopping it (SIGSTOP)
makes them hang, as a hung gateway would. SIGUSR1 holds what clients send
(answers still come back) and SIGUSR2 lets it go on, late: the commands of
a path that looked dead reach the target after all, even once the client
has closed. Prints "ready" once listening.
"""

import signal
import socket
import sys
import threading

from netutil import pump, relay

flowing = threading.Event()
flowing.set()


def pump_and_shut(src, dst, to_target=False):
    pump(src, dst, flowing if to_target else None)
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def start(c, u):
    for s in (c, u):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    threading.Thread(target=pump_and_shut, args=(c, u, True), daemon=True).start()
    threading.Thread(target=pump_and_shut, args=(u, c), daemon=True).start()


def main():
    port = int(sys.argv[1])
    host, tport = sys.argv[2].rsplit(":", 1)
    signal.signal(signal.SIGUSR1, lambda *_: flowing.clear())
    signal.signal(signal.SIGUSR2, lambda *_: flowing.set())
    relay(port, 16, lambda: socket.create_connection((host, int(tport))), start)


if __name__ == "__main__":
    main()
