#!/usr/bin/env python3
"""notify_listener.py - a stand-in for systemd's notification socket.

Binds an AF_UNIX datagram socket at PATH (what NOTIFY_SOCKET names) and
appends one line per datagram to LOG:

    <seconds since start> <field>|<field>|...  [portal=open|closed]

The portal check runs when a datagram says READY=1: the listener connects
to HOST:PORT at once, so the line tells whether the portal accepted a
connection by the time the daemon declared itself ready. Runs until
SIGTERM or --timeout seconds.
"""
import argparse
import os
import socket
import sys
import time


def portal_open(hostport):
    host, port = hostport.rsplit(":", 1)
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=2):
            return True
    except OSError:
        return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("log")
    ap.add_argument("--portal", help="HOST:PORT to connect to on READY=1")
    ap.add_argument("--timeout", type=float, default=120)
    a = ap.parse_args()

    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        os.unlink(a.path)
    except FileNotFoundError:
        pass
    s.bind(a.path)
    s.settimeout(0.5)
    t0 = time.monotonic()
    with open(a.log, "a", buffering=1) as out:
        out.write("0.000 LISTENING\n")
        while time.monotonic() - t0 < a.timeout:
            try:
                data = s.recv(4096)
            except socket.timeout:
                continue
            fields = data.decode("utf-8", "replace").strip("\n").split("\n")
            line = "%.3f %s" % (time.monotonic() - t0, "|".join(fields))
            if a.portal and "READY=1" in fields:
                line += " portal=" + ("open" if portal_open(a.portal) else "closed")
            out.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
