#!/usr/bin/env python3
"""hold_proxy.py LISTEN_PORT UPSTREAM_HOST UPSTREAM_PORT

A TCP relay that plays a host that dies without a word: while a client is
connected, bytes go both ways; when the client's end goes (a process killed
with SIGKILL, whose kernel sends FIN), the upstream connection is kept open
and silent, as when a host loses power or its network: the upstream (a SAN)
keeps the session and whatever it still has in flight for it. Prints
"ready" once listening. Runs until killed.
"""
import socket
import sys
import threading

from netutil import pump, relay

held = []  # upstream sockets of vanished clients: never closed, never written


def pump_then(src, dst, gone):
    pump(src, dst)
    gone()


def start(client, up):
    def client_gone():
        held.append(up)  # the SAN's end stays up: no FIN, no RST
        try:
            client.close()
        except OSError:
            pass

    def upstream_gone():
        try:
            client.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    threading.Thread(target=pump_then, args=(client, up, client_gone), daemon=True).start()
    threading.Thread(target=pump_then, args=(up, client, upstream_gone), daemon=True).start()


def main():
    listen_port, host, port = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    relay(listen_port, 64, lambda: socket.create_connection((host, port)), start)


if __name__ == "__main__":
    main()
