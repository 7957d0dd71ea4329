#!/usr/bin/env python3
"""tcp_forward.py - a TCP forwarder for path-failure tests.

  tcp_forward.py LISTEN_PORT TARGET_HOST:TARGET_PORT

Listens on 127.0.0.1:LISTEN_PORT and copies bytes both ways between each
accepted connection and a new connection to the target. Killing it
(SIGKILL) fails every path through it at once; stopping it (SIGSTOP)
makes them hang, as a hung gateway would. Prints "ready" once listening.
"""

import socket
import sys
import threading

from netutil import pump, relay


def pump_and_shut(src, dst):
    pump(src, dst)
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def start(c, u):
    for s in (c, u):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    threading.Thread(target=pump_and_shut, args=(c, u), daemon=True).start()
    threading.Thread(target=pump_and_shut, args=(u, c), daemon=True).start()


def main():
    port = int(sys.argv[1])
    host, tport = sys.argv[2].rsplit(":", 1)
    relay(port, 16, lambda: socket.create_connection((host, int(tport))), start)


if __name__ == "__main__":
    main()
