#!/usr/bin/env python3
"""net_attack.py - adaptive network attackers for the functional tests of
hotlund's network limits (docs/security.md). Each spreads itself over many
loopback source addresses (every address of 127.0.0.0/8 reaches a portal on
127.0.0.1: a socket bound to 127.a.b.c before connect() comes from there).
Uses pdu_client.py (same folder) for the PDUs. Python standard library only.

Subcommands (each prints one summary line, "KEY=VALUE ...", at the end):
  chapflood --portal H:P --target IQN --user U --seconds S [--sources N]
            [--name IQN | --name random] [--workers W] [--rate R] [--base B]
      wrong CHAP answers as fast as W threads can (or R a second), each
      from the next of N source addresses 127.B.x.y; counts the statuses
  idleflood --portal H:P --sources N --per-source K --seconds S [--base B]
      K silent TCP connections from each of N addresses, each reopened as
      soon as the target closes it (fills the pending-login caps)
  discohold --portal H:P --count N --sources K --seconds S [--base B]
            [--status FILE]
      N discovery sessions (no CHAP) spread over K addresses; each does one
      SendTargets, then idles answering NOP-In pings and ignoring logout
      requests; counts sessions refused, asked to log out, closed by the
      target; the status line is rewritten to FILE every 0.5 s
"""

import argparse
import os
import random
import select
import signal
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdu_client as p  # noqa: E402


def source(base, i):
    """The i-th loopback source address 127.base.x.y (y never 0 or 255)."""
    return "127.%d.%d.%d" % (base + i // (254 * 256), (i // 254) % 256, i % 254 + 1)


def split_portal(portal):
    host, _, port = portal.rpartition(":")
    return host.strip("[]"), int(port)


def status_of(e):
    """The login status an AssertionError carries ("0x0201"), or its kind."""
    s = str(e)
    i = s.find("status 0x")
    return s[i + 7:i + 13] if i >= 0 else type(e).__name__


# ---------------------------------------------------------------- chapflood

def cmd_chapflood(a):
    host, port = split_portal(a.portal)
    counts = {}
    lock = threading.Lock()
    nxt = [0]
    end = time.monotonic() + a.seconds
    period = a.workers / a.rate if a.rate else 0

    def worker():
        while time.monotonic() < end:
            t0 = time.monotonic()
            with lock:
                i = nxt[0]
                nxt[0] += 1
            name = a.name
            if name == "random":
                name = "iqn.2026-11.io.hotlun:guess-%08x" % random.getrandbits(32)
            try:
                c = p.Conn(host, port, timeout=5, source=source(a.base, i % a.sources))
            except OSError as e:
                st = "connect:" + type(e).__name__
            else:
                try:
                    c.login(a.target, initiator=name, chap=(a.user, "guess-%d" % i))
                    st = "0x0000"
                except AssertionError as e:
                    st = status_of(e)
                except (p.Closed, p.Timeout, OSError) as e:
                    st = type(e).__name__
                finally:
                    c.close()
            with lock:
                counts[st] = counts.get(st, 0) + 1
            if period:
                time.sleep(max(0.0, period - (time.monotonic() - t0)))

    ths = [threading.Thread(target=worker) for _ in range(a.workers)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    total = sum(counts.values())
    print("chapflood: attempts=%d sources=%d %s" % (
        total, min(a.sources, total),
        " ".join("%s=%d" % kv for kv in sorted(counts.items()))), flush=True)
    return 0


# ---------------------------------------------------------------- idleflood

def cmd_idleflood(a):
    host, port = split_portal(a.portal)
    slots = []          # [source, socket or None]
    for i in range(a.sources):
        for _ in range(a.per_source):
            slots.append([source(a.base, i), None])
    opened = closed = failed = 0
    end = time.monotonic() + a.seconds
    ready = False
    stop = []  # SIGTERM: end now (the test is done with us), still print the counts
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    while time.monotonic() < end and not stop:
        for s in slots:
            if s[1] is not None:
                continue
            sk = socket.socket(socket.AF_INET)
            sk.bind((s[0], 0))
            sk.settimeout(2)
            try:
                sk.connect((host, port))
            except OSError:
                failed += 1
                sk.close()
                continue
            sk.setblocking(False)
            s[1] = sk
            opened += 1
        if not ready:
            print("idleflood: ready: %d connections" % opened, flush=True)
            ready = True
        socks = [s[1] for s in slots if s[1] is not None]
        r, _, _ = select.select(socks, [], [], 0.05) if socks else ([], [], [])
        for sk in r:
            try:
                gone = sk.recv(1) == b""
            except BlockingIOError:
                gone = False
            except OSError:
                gone = True
            if gone:
                closed += 1
                sk.close()
                for s in slots:
                    if s[1] is sk:
                        s[1] = None
    for s in slots:
        if s[1] is not None:
            s[1].close()
    print("idleflood: opened=%d closed_by_target=%d connect_failed=%d" % (opened, closed, failed),
          flush=True)
    return 0


# ---------------------------------------------------------------- discohold

class Held:
    def __init__(self, conn):
        self.c = conn
        self.asked = False


def disco_login(host, port, src, timeout):
    c = p.Conn(host, port, timeout=timeout, source=src)
    try:
        c.login(None, initiator="iqn.2026-11.io.hotlun:holder-%s" % src.replace(".", "-"),
                session_type="Discovery")
        b = bytearray(48)
        b[0] = 0x40 | p.OP_TEXT
        b[1] = 0x80
        struct.pack_into(">I", b, 16, c.next_itt())
        struct.pack_into(">I", b, 20, 0xFFFFFFFF)
        struct.pack_into(">I", b, 24, c.cmdsn)
        struct.pack_into(">I", b, 28, c.exp_statsn)
        c.send(b, p.text_encode([("SendTargets", "All")]))
        while True:
            r = c.recv()
            if r.opcode == p.OP_TEXT_RSP:
                break
    except BaseException:
        c.close()
        raise
    return c


def cmd_discohold(a):
    host, port = split_portal(a.portal)
    st = {"established": 0, "refused": 0, "timeout": 0, "asked_logout": 0,
          "closed_by_target": 0, "held": 0}
    held = []
    end = time.monotonic() + a.seconds
    last = 0.0

    def report(final=False):
        line = "discohold: " + " ".join("%s=%d" % kv for kv in sorted(st.items()))
        if a.status:
            with open(a.status + ".tmp", "w") as f:
                f.write(line + "\n")
            os.replace(a.status + ".tmp", a.status)
        if final:
            print(line, flush=True)

    fails_in_row = 0
    for i in range(a.count):
        try:
            c = disco_login(host, port, source(a.base, i % a.sources), a.login_timeout)
        except AssertionError:
            st["refused"] += 1
            fails_in_row = 0
            continue
        except (p.Closed, p.Timeout, OSError):
            st["timeout"] += 1
            fails_in_row += 1
            if fails_in_row >= 3:
                break       # the target stopped answering: it is out of descriptors
            continue
        fails_in_row = 0
        st["established"] += 1
        held.append(Held(c))
        st["held"] = len(held)
        if time.monotonic() - last > 0.5:
            report()
            last = time.monotonic()
    report()
    while time.monotonic() < end and held:
        r, _, _ = select.select([h.c.sock for h in held], [], [], 0.5)
        for h in list(held):
            if h.c.sock not in r:
                continue
            try:
                pdu = h.c.recv(timeout=1)
            except (p.Closed, OSError):
                st["closed_by_target"] += 1
                h.c.close()
                held.remove(h)
                continue
            except p.Timeout:
                continue
            if pdu.opcode == p.OP_NOP_IN and pdu.u32(20) != 0xFFFFFFFF:
                h.c.nop_reply(pdu)
            elif pdu.opcode == p.OP_ASYNC and pdu.bhs[36] == 1 and not h.asked:
                h.asked = True
                st["asked_logout"] += 1
        st["held"] = len(held)
        if time.monotonic() - last > 0.5:
            report()
            last = time.monotonic()
    report(final=True)
    for h in held:
        h.c.close()
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["chapflood", "idleflood", "discohold"])
    ap.add_argument("--portal", required=True)
    ap.add_argument("--target")
    ap.add_argument("--user", default="alice")
    ap.add_argument("--name", default="random", help="chapflood: initiator name or 'random'")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--sources", type=int, default=2048)
    ap.add_argument("--base", type=int, default=10, help="source addresses 127.BASE.x.y")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--rate", type=float, default=0, help="chapflood: attempts a second (0: max)")
    ap.add_argument("--per-source", type=int, default=4)
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--login-timeout", type=float, default=2)
    ap.add_argument("--status")
    a = ap.parse_args()
    return {"chapflood": cmd_chapflood, "idleflood": cmd_idleflood,
            "discohold": cmd_discohold}[a.command](a)


if __name__ == "__main__":
    sys.exit(main())
