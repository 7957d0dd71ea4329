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


def pump(src, dst):
    try:
        while True:
            b = src.recv(65536)
            if not b:
                break
            dst.sendall(b)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def main():
    port = int(sys.argv[1])
    host, tport = sys.argv[2].rsplit(":", 1)
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(16)
    print("ready", flush=True)
    while True:
        c, _ = ls.accept()
        try:
            u = socket.create_connection((host, int(tport)))
        except OSError:
            c.close()
            continue
        for s in (c, u):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=pump, args=(c, u), daemon=True).start()
        threading.Thread(target=pump, args=(u, c), daemon=True).start()


if __name__ == "__main__":
    main()
