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

held = []  # upstream sockets of vanished clients: never closed, never written


def pump(src, dst, gone):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    gone()


def serve(client, host, port):
    try:
        up = socket.create_connection((host, port))
    except OSError:
        client.close()
        return

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

    threading.Thread(target=pump, args=(client, up, client_gone), daemon=True).start()
    threading.Thread(target=pump, args=(up, client, upstream_gone), daemon=True).start()


def main():
    listen_port, host, port = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", listen_port))
    srv.listen(64)
    print("ready", flush=True)
    while True:
        client, _ = srv.accept()
        serve(client, host, port)


if __name__ == "__main__":
    main()
