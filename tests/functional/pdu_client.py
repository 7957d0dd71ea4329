#!/usr/bin/env python3
"""pdu_client.py - a small raw-socket iSCSI initiator for functional tests.

Owns: building and parsing iSCSI PDUs (RFC 7143) byte by byte, so tests can
send what no well-behaved initiator sends (truncated, oversized, reserved
opcodes, bad digests, out-of-window CmdSN, garbage login keys, wrong CHAP
responses) and check the protocol's answer. Python standard library only.

Subcommands:
  vpd83  --portal H:P --target IQN [--lun N]   print the VPD 0x83 designators as hex
  badinput --portal H:P --target IQN [--chap-user U --chap-secret S] [--source ADDR]
           run the bad-input battery; one line per case; exit 1 if any failed
  login  --portal H:P --target IQN [--chap-user U --chap-secret S] [--digest]
           [--source ADDR]
           log in, TEST UNIT READY, log out (exit 0 on success)
  idle   --portal H:P --count N --hold S [--source ADDR]
           open N TCP connections that never log in, print how many the
           target closed within a second, keep the rest open S seconds
  slowreader --portal H:P --target IQN [--reads N] [--ios N] [--max-ms MS]
           one session queues N READs of 16 MiB and never reads its socket;
           a second session then measures 4 KiB READ latency; exit 1 when the
           worst one exceeds MS (a connection that cannot send stalls others)
"""

import argparse
import hashlib
import os
import socket
import struct
import sys
import time

# ---------------------------------------------------------------- CRC32C

_CRC_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC_TABLE.append(_c)


def crc32c(data, crc=0):
    """CRC32C (Castagnoli) as iSCSI uses it (RFC 7143 Appendix B)."""
    crc ^= 0xFFFFFFFF
    tbl = _CRC_TABLE
    for b in data:
        crc = tbl[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283


def digest_bytes(data):
    # iSCSI sends the CRC least significant byte first.
    return struct.pack("<I", crc32c(data))


# ---------------------------------------------------------------- opcodes

OP_NOP_OUT, OP_SCSI_CMD, OP_TMF, OP_LOGIN, OP_TEXT, OP_DATA_OUT, OP_LOGOUT = (
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06)
OP_NOP_IN, OP_SCSI_RSP, OP_TMF_RSP, OP_LOGIN_RSP, OP_TEXT_RSP, OP_DATA_IN = (
    0x20, 0x21, 0x22, 0x23, 0x24, 0x25)
OP_LOGOUT_RSP, OP_R2T, OP_ASYNC, OP_REJECT = 0x26, 0x31, 0x32, 0x3F

OPNAMES = {
    0x20: "NOP-In", 0x21: "SCSI-Response", 0x22: "TMF-Response", 0x23: "Login-Response",
    0x24: "Text-Response", 0x25: "Data-In", 0x26: "Logout-Response", 0x31: "R2T",
    0x32: "Async", 0x3F: "Reject",
}

REJECT_REASONS = {
    0x02: "data digest error", 0x03: "SNACK reject", 0x04: "protocol error",
    0x05: "command not supported", 0x06: "immediate command reject",
    0x07: "task in progress", 0x08: "invalid data ack", 0x09: "invalid PDU field",
    0x0A: "long op reject", 0x0B: "deprecated", 0x0C: "waiting for logout",
}


class Closed(Exception):
    """The target closed (or reset) the connection."""


class Timeout(Exception):
    """No complete PDU arrived in time."""


class PDU:
    def __init__(self, bhs, data=b""):
        self.bhs = bytes(bhs)
        self.data = data

    @property
    def opcode(self):
        return self.bhs[0] & 0x3F

    @property
    def flags(self):
        return self.bhs[1]

    def u32(self, off):
        return struct.unpack_from(">I", self.bhs, off)[0]

    @property
    def itt(self):
        return self.u32(16)

    def name(self):
        return OPNAMES.get(self.opcode, "opcode 0x%02x" % self.opcode)

    def __repr__(self):
        s = self.name()
        if self.opcode == OP_REJECT:
            s += " reason 0x%02x (%s)" % (self.bhs[2], REJECT_REASONS.get(self.bhs[2], "?"))
        elif self.opcode == OP_LOGIN_RSP:
            s += " status 0x%02x%02x" % (self.bhs[36], self.bhs[37])
        elif self.opcode == OP_SCSI_RSP:
            s += " response %d status 0x%02x" % (self.bhs[2], self.bhs[3])
        return s


def text_encode(pairs):
    out = b""
    for k, v in pairs:
        out += ("%s=%s" % (k, v)).encode() + b"\0"
    return out


def text_decode(data):
    res = {}
    for item in data.split(b"\0"):
        if not item:
            continue
        k, _, v = item.partition(b"=")
        res[k.decode(errors="replace")] = v.decode(errors="replace")
    return res


def pad4(b):
    return b + b"\0" * (-len(b) % 4)


class Conn:
    """One TCP connection speaking raw iSCSI."""

    def __init__(self, host, port, timeout=10.0, source=None):
        self.sock = socket.create_connection((host, port), timeout=timeout,
                                             source_address=(source, 0) if source else None)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.hd = False   # header digest in use
        self.dd = False   # data digest in use
        self.itt = 0x1000
        self.cmdsn = 1
        self.exp_statsn = 0
        self.max_cmdsn = 1
        self.isid = bytes([0x80, 0x12, 0x34, 0x56]) + os.urandom(2)
        self.tsih = 0
        self.buf = b""
        self.target_keys = {}
        self.mrdsl = 8192     # target's MaxRecvDataSegmentLength (what we may send)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def next_itt(self):
        self.itt += 1
        return self.itt

    # ---- raw I/O
    def send_raw(self, b):
        try:
            self.sock.sendall(b)
        except (BrokenPipeError, ConnectionResetError) as e:
            raise Closed(str(e))

    def build(self, bhs, data=b"", bad_hd=False, bad_dd=False, dsl=None):
        bhs = bytearray(bhs)
        n = len(data) if dsl is None else dsl
        bhs[5:8] = struct.pack(">I", n)[1:]
        out = bytes(bhs)
        if self.hd:
            d = bytearray(digest_bytes(out))
            if bad_hd:
                d[0] ^= 0xFF
            out += bytes(d)
        if data:
            out += pad4(data)
            if self.dd:
                d = bytearray(digest_bytes(pad4(data)))
                if bad_dd:
                    d[0] ^= 0xFF
                out += bytes(d)
        return out

    def send(self, bhs, data=b"", **kw):
        self.send_raw(self.build(bhs, data, **kw))

    def _recv_exact(self, n, deadline):
        while len(self.buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Timeout("timed out waiting for %d bytes" % n)
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                raise Timeout("timed out")
            except (ConnectionResetError, BrokenPipeError) as e:
                raise Closed(str(e))
            if not chunk:
                raise Closed("EOF")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv(self, timeout=None):
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        bhs = self._recv_exact(48, deadline)
        ahs = bhs[4] * 4
        if ahs:
            self._recv_exact(ahs, deadline)
        if self.hd:
            d = self._recv_exact(4, deadline)
            if d != digest_bytes(bhs + b""):
                raise AssertionError("target sent a wrong header digest")
        dsl = struct.unpack(">I", b"\0" + bhs[5:8])[0]
        data = b""
        if dsl:
            data = self._recv_exact(dsl + (-dsl % 4), deadline)
            if self.dd:
                d = self._recv_exact(4, deadline)
                if d != digest_bytes(data):
                    raise AssertionError("target sent a wrong data digest")
            data = data[:dsl]
        p = PDU(bhs, data)
        # Track sequence numbers from every PDU that carries them.
        if p.opcode in (OP_SCSI_RSP, OP_NOP_IN, OP_TEXT_RSP, OP_LOGOUT_RSP, OP_REJECT,
                        OP_TMF_RSP, OP_LOGIN_RSP, OP_ASYNC) or (
                p.opcode == OP_DATA_IN and p.flags & 0x01):
            self.exp_statsn = (p.u32(24) + 1) & 0xFFFFFFFF
        if p.opcode in (OP_SCSI_RSP, OP_NOP_IN, OP_TEXT_RSP, OP_LOGOUT_RSP, OP_REJECT,
                        OP_TMF_RSP, OP_DATA_IN, OP_R2T, OP_ASYNC, OP_LOGIN_RSP):
            self.max_cmdsn = p.u32(32)
        return p

    def expect_closed(self, timeout=5.0):
        """True when the target closes the connection within timeout (data before EOF is read)."""
        deadline = time.monotonic() + timeout
        try:
            while True:
                self.recv(timeout=max(0.01, deadline - time.monotonic()))
        except Closed:
            return True
        except Timeout:
            return False

    # ---- login
    def login_bhs(self, csg, nsg, transit, cid=0, vmax=0, vmin=0, itt=None):
        b = bytearray(48)
        b[0] = 0x40 | OP_LOGIN
        b[1] = (0x80 if transit else 0) | (csg << 2) | (nsg if transit else 0)
        b[2], b[3] = vmax, vmin
        b[8:14] = self.isid
        struct.pack_into(">H", b, 14, self.tsih)
        struct.pack_into(">I", b, 16, self.itt if itt is None else itt)
        struct.pack_into(">H", b, 20, cid)
        struct.pack_into(">I", b, 24, self.cmdsn)
        struct.pack_into(">I", b, 28, self.exp_statsn)
        return b

    def login_step(self, csg, nsg, transit, pairs, raw=None, **kw):
        data = raw if raw is not None else text_encode(pairs)
        self.send(self.login_bhs(csg, nsg, transit), data, **kw)
        r = self.recv()
        if r.opcode == OP_LOGIN_RSP:
            self.target_keys.update(text_decode(r.data))
            self.tsih = struct.unpack_from(">H", r.bhs, 14)[0]
        return r

    def login(self, target, initiator="iqn.2026-11.io.hotlun:pdu-client", chap=None,
              digest=False, session_type="Normal", extra_op=(), mrdsl=262144, burst=262144):
        """Full login; returns the final Login Response. Raises on failure.
        mrdsl: our MaxRecvDataSegmentLength (the target's Data-In size), burst: MaxBurstLength."""
        sec = [("InitiatorName", initiator), ("SessionType", session_type)]
        if session_type == "Normal":
            sec.append(("TargetName", target))
        if chap:
            sec.append(("AuthMethod", "CHAP,None"))
            r = self.login_step(0, 1, False, sec)
            check_login_ok(r)
            r = self.login_step(0, 1, False, [("CHAP_A", "5")])
            check_login_ok(r)
            k = text_decode(r.data)
            resp = chap_response(k, chap[1])
            r = self.login_step(0, 1, True, [("CHAP_N", chap[0]), ("CHAP_R", resp)])
        else:
            sec.append(("AuthMethod", "None"))
            r = self.login_step(0, 1, True, sec)
        check_login_ok(r)
        if not (r.flags & 0x80):
            raise AssertionError("target did not transit out of security stage: %r" % r)
        d = "CRC32C,None" if digest else "None"
        ops = [("HeaderDigest", d), ("DataDigest", d), ("ErrorRecoveryLevel", "0"),
               ("InitialR2T", "Yes"), ("ImmediateData", "Yes"),
               ("MaxBurstLength", str(burst)), ("FirstBurstLength", str(min(65536, burst))),
               ("MaxRecvDataSegmentLength", str(mrdsl)), ("MaxConnections", "1"),
               ("DefaultTime2Wait", "2"), ("DefaultTime2Retain", "0"),
               ("MaxOutstandingR2T", "1"), ("DataPDUInOrder", "Yes"),
               ("DataSequenceInOrder", "Yes")] + list(extra_op)
        r = self.login_step(1, 3, True, ops)
        check_login_ok(r)
        for _ in range(4):   # the target may need more rounds before it transits
            if r.flags & 0x80 and (r.flags & 3) == 3:
                break
            r = self.login_step(1, 3, True, [])
            check_login_ok(r)
        else:
            raise AssertionError("target never transited to full feature phase")
        k = self.target_keys
        self.hd = k.get("HeaderDigest", "None") == "CRC32C"
        self.dd = k.get("DataDigest", "None") == "CRC32C"
        if digest and not (self.hd and self.dd):
            raise AssertionError("target did not accept CRC32C digests: %r" % k)
        if "MaxRecvDataSegmentLength" in k:
            self.mrdsl = int(k["MaxRecvDataSegmentLength"])
        self.cmdsn = r.u32(28)   # ExpCmdSN
        return r

    # ---- full feature phase
    def scsi_bhs(self, cdb, lun=0, read_len=0, write_len=0, itt=None, cmdsn=None,
                 final=True, immediate=False):
        b = bytearray(48)
        b[0] = OP_SCSI_CMD | (0x40 if immediate else 0)
        b[1] = (0x80 if final else 0) | (0x40 if read_len else 0) | (0x20 if write_len else 0) | 1
        struct.pack_into(">H", b, 8, lun if lun < 256 else (0x4000 | lun))
        struct.pack_into(">I", b, 16, self.next_itt() if itt is None else itt)
        struct.pack_into(">I", b, 20, read_len or write_len)
        struct.pack_into(">I", b, 24, self.cmdsn if cmdsn is None else cmdsn)
        struct.pack_into(">I", b, 28, self.exp_statsn)
        b[32:32 + len(cdb)] = cdb
        return b

    def scsi(self, cdb, lun=0, read_len=0, data=b"", timeout=None):
        """Send a command (write data as immediate data, must fit), return (status, data_in, sense)."""
        bhs = self.scsi_bhs(cdb, lun, read_len, len(data))
        itt = self.itt
        self.send(bhs, data)
        if not bhs[0] & 0x40:
            self.cmdsn += 1
        din = bytearray()
        while True:
            r = self.recv(timeout)
            if r.itt != itt:
                if r.opcode == OP_NOP_IN and r.u32(20) != 0xFFFFFFFF:
                    self.nop_reply(r)
                    continue
                if r.opcode in (OP_ASYNC,):
                    continue
                raise AssertionError("unexpected PDU %r (itt %x, waiting for %x)" % (r, r.itt, itt))
            if r.opcode == OP_DATA_IN:
                off = r.u32(40)
                if len(din) < off + len(r.data):
                    din.extend(b"\0" * (off + len(r.data) - len(din)))
                din[off:off + len(r.data)] = r.data
                if r.flags & 0x01:
                    return r.bhs[3], bytes(din), b""
                continue
            if r.opcode == OP_R2T:
                raise AssertionError("R2T: this client only sends immediate data")
            if r.opcode == OP_SCSI_RSP:
                sense = b""
                if len(r.data) >= 2:
                    sl = struct.unpack(">H", r.data[:2])[0]
                    sense = r.data[2:2 + sl]
                if r.bhs[2] != 0:
                    raise AssertionError("iSCSI response code %d" % r.bhs[2])
                return r.bhs[3], bytes(din), sense
            raise AssertionError("unexpected PDU %r" % r)

    def clear_ua(self, lun):
        """TEST UNIT READY until no unit attention is pending (max 4 tries)."""
        for _ in range(4):
            st, _, sense = self.scsi(bytes(6), lun=lun)
            if st == 0:
                return
            sk = sense_key(sense)
            if not sk or sk[0] != 0x06:
                raise AssertionError("TEST UNIT READY: status 0x%02x sense %s" % (st, sense.hex()))
        raise AssertionError("unit attention does not clear")

    def nop_reply(self, nopin):
        b = bytearray(48)
        b[0] = 0x40 | OP_NOP_OUT
        b[1] = 0x80
        b[8:16] = nopin.bhs[8:16]
        struct.pack_into(">I", b, 16, 0xFFFFFFFF)
        b[20:24] = nopin.bhs[20:24]
        struct.pack_into(">I", b, 24, self.cmdsn)
        struct.pack_into(">I", b, 28, self.exp_statsn)
        self.send(b)

    def nop_bhs(self, itt=None, immediate=True):
        b = bytearray(48)
        b[0] = (0x40 if immediate else 0) | OP_NOP_OUT
        b[1] = 0x80
        struct.pack_into(">I", b, 16, self.next_itt() if itt is None else itt)
        struct.pack_into(">I", b, 20, 0xFFFFFFFF)
        struct.pack_into(">I", b, 24, self.cmdsn)
        struct.pack_into(">I", b, 28, self.exp_statsn)
        return b

    def ping(self, data=b"", timeout=None):
        """Immediate NOP-Out; wait for the NOP-In that answers it."""
        b = self.nop_bhs()
        itt = self.itt
        self.send(b, data)
        while True:
            r = self.recv(timeout)
            if r.opcode == OP_NOP_IN and r.itt == itt:
                if r.data != data:
                    raise AssertionError("NOP-In echoed different data")
                return r
            if r.opcode == OP_NOP_IN and r.u32(20) != 0xFFFFFFFF:
                self.nop_reply(r)
                continue
            if r.opcode == OP_ASYNC:
                continue
            raise AssertionError("unexpected PDU while waiting for NOP-In: %r (itt %x)" % (r, r.itt))

    def logout(self):
        b = bytearray(48)
        b[0] = 0x40 | OP_LOGOUT
        b[1] = 0x80
        struct.pack_into(">I", b, 16, self.next_itt())
        struct.pack_into(">I", b, 24, self.cmdsn)
        struct.pack_into(">I", b, 28, self.exp_statsn)
        self.send(b)
        while True:
            r = self.recv()
            if r.opcode == OP_LOGOUT_RSP:
                if r.bhs[2] != 0:
                    raise AssertionError("logout response %d" % r.bhs[2])
                return
            if r.opcode in (OP_NOP_IN, OP_ASYNC):
                continue
            raise AssertionError("unexpected PDU while waiting for logout: %r" % r)


def check_login_ok(r):
    if r.opcode != OP_LOGIN_RSP:
        raise AssertionError("expected a Login Response, got %r" % r)
    if r.bhs[36] != 0:
        raise AssertionError("login failed: status 0x%02x%02x" % (r.bhs[36], r.bhs[37]))


def chap_response(keys, secret):
    if keys.get("CHAP_A") != "5" or "CHAP_I" not in keys or "CHAP_C" not in keys:
        raise AssertionError("target did not offer CHAP MD5: %r" % keys)
    ident = int(keys["CHAP_I"], 0)
    chal = keys["CHAP_C"]
    chal = bytes.fromhex(chal[2:]) if chal.lower().startswith("0x") else bytes.fromhex(chal)
    return "0x" + hashlib.md5(bytes([ident]) + secret.encode() + chal).hexdigest()


# ---------------------------------------------------------------- SCSI helpers

def cdb_inquiry(evpd=0, page=0, alloc=4096):
    return bytes([0x12, evpd, page]) + struct.pack(">H", alloc) + b"\0"


def cdb_read10(lba, blocks):
    return bytes([0x28, 0]) + struct.pack(">IBHB", lba, 0, blocks, 0)


def cdb_write10(lba, blocks):
    return bytes([0x2A, 0]) + struct.pack(">IBHB", lba, 0, blocks, 0)


def cdb_rc10():
    return bytes([0x25]) + b"\0" * 9


def sense_key(sense):
    """(key, asc, ascq) from fixed or descriptor format sense."""
    if len(sense) < 3:
        return None
    code = sense[0] & 0x7F
    if code in (0x70, 0x71) and len(sense) >= 14:
        return sense[2] & 0x0F, sense[12], sense[13]
    if code in (0x72, 0x73) and len(sense) >= 4:
        return sense[1] & 0x0F, sense[2], sense[3]
    return None


def designators(page):
    """Parse VPD 0x83: list of (code_set, assoc, type, bytes)."""
    out = []
    if len(page) < 4 or page[1] != 0x83:
        raise AssertionError("not a VPD 0x83 page")
    n = struct.unpack(">H", page[2:4])[0]
    body = page[4:4 + n]
    i = 0
    while i + 4 <= len(body):
        cs, b1, ln = body[i] & 0x0F, body[i + 1], body[i + 3]
        out.append((cs, (b1 >> 4) & 3, b1 & 0x0F, body[i + 4:i + 4 + ln]))
        i += 4 + ln
    return out


# ---------------------------------------------------------------- commands

def lun_args(doc):
    """An argument parser for a client of one LUN, with --portal, --target and
    --lun (0 unless given); doc (the script's docstring) is its help."""
    ap = argparse.ArgumentParser(description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--portal", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--lun", type=int, default=0)
    return ap


def connect(args, **kw):
    host, _, port = args.portal.rpartition(":")
    return Conn(host.strip("[]"), int(port), source=getattr(args, "source", None), **kw)


def chap_of(args):
    return (args.chap_user, args.chap_secret) if args.chap_user else None


def cmd_vpd83(args):
    c = connect(args)
    c.login(args.target, chap=chap_of(args))
    st, data, sense = c.scsi(cdb_inquiry(1, 0x83), lun=args.lun, read_len=4096)
    if st != 0:
        print("INQUIRY VPD 0x83 failed: status 0x%02x sense %s" % (st, sense.hex()))
        return 1
    for cs, assoc, typ, d in designators(data):
        print("designator type=%d assoc=%d codeset=%d %s" % (typ, assoc, cs, d.hex()))
    c.logout()
    c.close()
    return 0


def cmd_login(args):
    c = connect(args)
    c.login(args.target, chap=chap_of(args), digest=args.digest)
    st, _, sense = c.scsi(bytes(6), lun=args.lun)   # TEST UNIT READY
    c.ping(b"hello, digest" if args.digest else b"")
    c.logout()
    c.close()
    print("login ok: TEST UNIT READY status 0x%02x, HeaderDigest=%s DataDigest=%s" % (
        st, c.target_keys.get("HeaderDigest"), c.target_keys.get("DataDigest")))
    return 0 if st == 0 else 1


# ---------------------------------------------------------------- bad input battery

class Battery:
    def __init__(self, args):
        self.args = args
        self.failed = 0
        self.passed = 0

    def run(self, name, fn):
        t0 = time.monotonic()
        try:
            msg = fn()
            self.passed += 1
            print("ok   %-28s %s (%.2fs)" % (name, msg or "", time.monotonic() - t0), flush=True)
        except Exception as e:   # noqa: BLE001 - every failure is reported, none stops the battery
            self.failed += 1
            print("FAIL %-28s %s: %s (%.2fs)" % (name, type(e).__name__, e, time.monotonic() - t0),
                  flush=True)

    def conn(self, **kw):
        return connect(self.args, **kw)

    def logged_in(self, digest=False):
        c = self.conn()
        c.login(self.args.target, chap=chap_of(self.args), digest=digest)
        c.clear_ua(self.args.lun)
        return c

    def sec_keys(self, target=None, initiator="iqn.2026-11.io.hotlun:pdu-client"):
        k = [("InitiatorName", initiator), ("SessionType", "Normal"),
             ("TargetName", target or self.args.target)]
        k.append(("AuthMethod", "CHAP,None" if self.args.chap_user else "None"))
        return k


def expect_login_status(r, allowed, what):
    if r.opcode != OP_LOGIN_RSP:
        raise AssertionError("%s: expected a Login Response, got %r" % (what, r))
    st = (r.bhs[36] << 8) | r.bhs[37]
    ok = any(st == a if a > 0xFF else r.bhs[36] == a for a in allowed)
    if not ok:
        raise AssertionError("%s: login status 0x%04x, want %s" % (
            what, st, " or ".join("0x%04x" % a if a > 0xFF else "class %d" % a for a in allowed)))
    return "status 0x%04x" % st


def answer_or_close(c, allowed_reasons=(), login_classes=(), timeout=10.0):
    """The target answers a bad PDU with a Reject (one of allowed_reasons), a Login
    Response of one of login_classes, or by closing the connection. Returns a description."""
    try:
        r = c.recv(timeout)
    except Closed:
        return "connection closed"
    except Timeout:
        raise AssertionError("no answer and connection still open after %.0fs" % timeout)
    if r.opcode == OP_REJECT and r.bhs[2] in allowed_reasons:
        return "Reject reason 0x%02x" % r.bhs[2]
    if r.opcode == OP_LOGIN_RSP and r.bhs[36] in login_classes:
        return "login status 0x%02x%02x" % (r.bhs[36], r.bhs[37])
    raise AssertionError("unexpected answer %r" % r)


def cmd_badinput(args):
    B = Battery(args)
    chap = chap_of(args)
    L = args.lun

    # ---- positive control: the client itself is right
    def good_login():
        c = B.logged_in()
        c.ping()
        st, data, _ = c.scsi(cdb_inquiry(alloc=96), lun=L, read_len=96)
        if st != 0 or len(data) < 36:
            raise AssertionError("INQUIRY failed")
        c.logout()
        c.close()
        return "login, NOP, INQUIRY, logout"
    B.run("good_login", good_login)

    # ---- login phase
    def no_initiator_name():
        c = B.conn()
        k = [kv for kv in B.sec_keys() if kv[0] != "InitiatorName"]
        r = c.login_step(0, 1, True, k)
        return expect_login_status(r, [0x0207], "missing InitiatorName")
    B.run("login_no_initiatorname", no_initiator_name)

    def no_target_name():
        c = B.conn()
        k = [kv for kv in B.sec_keys() if kv[0] != "TargetName"]
        r = c.login_step(0, 1, True, k)
        return expect_login_status(r, [0x0207], "Normal session without TargetName")
    B.run("login_no_targetname", no_target_name)

    def unknown_target():
        c = B.conn()
        r = c.login_step(0, 1, True, B.sec_keys(target="iqn.2026-11.io.hotlun:no-such-target"))
        return expect_login_status(r, [0x0203], "unknown TargetName")
    B.run("login_unknown_target", unknown_target)

    def bad_version():
        c = B.conn()
        c.send(c.login_bhs(0, 1, True, vmax=0x10, vmin=0x10), text_encode(B.sec_keys()))
        return expect_login_status(c.recv(), [0x0205], "Version-min 0x10")
    B.run("login_bad_version", bad_version)

    def garbage_keys():
        c = B.conn()
        raw = text_encode(B.sec_keys()) + b"\xff\xfe no equals sign here\0=novalue\0"
        r = c.login_step(0, 1, True, [], raw=raw)
        return expect_login_status(r, [2], "malformed text")
    B.run("login_garbage_keys", garbage_keys)

    def unterminated_text():
        c = B.conn()
        raw = text_encode(B.sec_keys())[:-1] + b"X" * 3  # last pair without its NUL
        r = c.login_step(0, 1, True, [], raw=raw)
        return expect_login_status(r, [2], "text without terminating NUL")
    B.run("login_unterminated_text", unterminated_text)

    def duplicate_key():
        c = B.conn()
        r = c.login_step(0, 1, True, B.sec_keys() + [("SessionType", "Discovery")])
        return expect_login_status(r, [2], "key declared twice")
    B.run("login_duplicate_key", duplicate_key)

    def unknown_key():
        # An unknown key is answered key=NotUnderstood; the login goes on.
        c = B.conn()
        if chap:
            return "skipped with CHAP"
        r = c.login_step(0, 1, True, B.sec_keys() + [("FooBarKey", "1")])
        check_login_ok(r)
        v = text_decode(r.data).get("FooBarKey")
        if v != "NotUnderstood":
            raise AssertionError("FooBarKey answered %r, want NotUnderstood" % v)
        return "FooBarKey=NotUnderstood"
    B.run("login_unknown_key", unknown_key)

    def bad_number():
        c = B.conn()
        if chap:
            return "skipped with CHAP"
        check_login_ok(c.login_step(0, 1, True, B.sec_keys()))
        r = c.login_step(1, 3, True, [("MaxRecvDataSegmentLength", "lots")])
        if r.opcode == OP_LOGIN_RSP and r.bhs[36] == 0:
            v = text_decode(r.data).get("MaxRecvDataSegmentLength")
            if v != "Reject":
                raise AssertionError("answered MaxRecvDataSegmentLength=%r, want Reject" % v)
            return "MaxRecvDataSegmentLength=Reject"
        return expect_login_status(r, [2], "non-numeric value")
    B.run("login_bad_number", bad_number)

    def long_name():
        c = B.conn()
        r = c.login_step(0, 1, True, B.sec_keys(initiator="iqn.2026-11.x:" + "a" * 300))
        return expect_login_status(r, [2], "InitiatorName longer than 223 bytes")
    B.run("login_long_initiatorname", long_name)

    def long_key_name():
        c = B.conn()
        r = c.login_step(0, 1, True, B.sec_keys() + [("K" * 100, "1")])
        if r.opcode == OP_LOGIN_RSP and r.bhs[36] == 0:
            v = text_decode(r.data).get("K" * 100)
            if v not in ("NotUnderstood", "Reject"):
                raise AssertionError("100-byte key answered %r" % v)
            return "answered %s" % v
        return expect_login_status(r, [2], "100-byte key name")
    B.run("login_long_key_name", long_key_name)

    def oversized_login():
        c = B.conn()
        c.send_raw(c.build(c.login_bhs(0, 1, True), b"", dsl=16 * 1024 * 1024 - 4))
        return answer_or_close(c, login_classes=(2,))
    B.run("login_oversized_pdu", oversized_login)

    def first_pdu_not_login():
        c = B.conn()
        c.send(c.scsi_bhs(cdb_inquiry(), read_len=96))
        return answer_or_close(c, allowed_reasons=(0x04, 0x05, 0x09), login_classes=(2,))
    B.run("login_first_pdu_scsi", first_pdu_not_login)

    def truncated_bhs():
        c = B.conn()
        c.send_raw(bytes(c.login_bhs(0, 1, True))[:20])
        c.sock.shutdown(socket.SHUT_WR)
        if not c.expect_closed(10):
            raise AssertionError("target kept a half-sent PDU's connection open")
        return "connection closed"
    B.run("login_truncated_bhs", truncated_bhs)

    def truncated_data():
        c = B.conn()
        c.send_raw(c.build(c.login_bhs(0, 1, True), b"", dsl=1000) + b"InitiatorName=iq")
        c.sock.shutdown(socket.SHUT_WR)
        if not c.expect_closed(10):
            raise AssertionError("target kept the connection open after EOF")
        return "connection closed"
    B.run("login_truncated_data", truncated_data)

    def csg_ffp():
        c = B.conn()
        r = c.login_step(3, 3, True, B.sec_keys())
        return expect_login_status(r, [2], "CSG=3 (full feature) in a Login Request")
    B.run("login_csg_reserved", csg_ffp)

    # ---- CHAP (only when the target requires it)
    if chap:
        def chap_wrong_secret():
            c = B.conn()
            check_login_ok(c.login_step(0, 1, False, B.sec_keys()))
            r = c.login_step(0, 1, False, [("CHAP_A", "5")])
            check_login_ok(r)
            resp = chap_response(text_decode(r.data), chap[1] + "-wrong")
            r = c.login_step(0, 1, True, [("CHAP_N", chap[0]), ("CHAP_R", resp)])
            return expect_login_status(r, [0x0201], "wrong CHAP secret")
        B.run("chap_wrong_secret", chap_wrong_secret)

        def chap_wrong_user():
            c = B.conn()
            check_login_ok(c.login_step(0, 1, False, B.sec_keys()))
            r = c.login_step(0, 1, False, [("CHAP_A", "5")])
            check_login_ok(r)
            resp = chap_response(text_decode(r.data), chap[1])
            r = c.login_step(0, 1, True, [("CHAP_N", chap[0] + "x"), ("CHAP_R", resp)])
            return expect_login_status(r, [0x0201], "wrong CHAP user")
        B.run("chap_wrong_user", chap_wrong_user)

        def chap_garbage_response():
            c = B.conn()
            check_login_ok(c.login_step(0, 1, False, B.sec_keys()))
            check_login_ok(c.login_step(0, 1, False, [("CHAP_A", "5")]))
            r = c.login_step(0, 1, True, [("CHAP_N", chap[0]), ("CHAP_R", "0xZZ" + "q" * 600)])
            return expect_login_status(r, [0x0201, 0x0200], "CHAP_R not hex")
        B.run("chap_garbage_response", chap_garbage_response)

        def chap_short_response():
            c = B.conn()
            check_login_ok(c.login_step(0, 1, False, B.sec_keys()))
            check_login_ok(c.login_step(0, 1, False, [("CHAP_A", "5")]))
            r = c.login_step(0, 1, True, [("CHAP_N", chap[0]), ("CHAP_R", "0x00")])
            return expect_login_status(r, [0x0201, 0x0200], "1-byte CHAP_R")
        B.run("chap_short_response", chap_short_response)

        def chap_none_only():
            c = B.conn()
            k = [kv for kv in B.sec_keys() if kv[0] != "AuthMethod"] + [("AuthMethod", "None")]
            r = c.login_step(0, 1, True, k)
            if r.opcode == OP_LOGIN_RSP and r.bhs[36] == 0:
                v = text_decode(r.data).get("AuthMethod")
                if v != "Reject":
                    raise AssertionError("target accepted AuthMethod=None while CHAP is required")
                return "AuthMethod=Reject"
            return expect_login_status(r, [0x0201], "AuthMethod=None when CHAP is required")
        B.run("chap_none_only", chap_none_only)

        def chap_bad_algorithm():
            c = B.conn()
            check_login_ok(c.login_step(0, 1, False, B.sec_keys()))
            r = c.login_step(0, 1, False, [("CHAP_A", "99")])
            if r.opcode == OP_LOGIN_RSP and r.bhs[36] == 0:
                v = text_decode(r.data).get("CHAP_A")
                if v != "Reject":
                    raise AssertionError("CHAP_A=99 answered %r, want Reject" % v)
                return "CHAP_A=Reject"
            return expect_login_status(r, [0x0201, 0x0200], "CHAP_A=99")
        B.run("chap_bad_algorithm", chap_bad_algorithm)

        def chap_skip_response():
            # Transit to operational stage without ever answering the challenge.
            c = B.conn()
            check_login_ok(c.login_step(0, 1, False, B.sec_keys()))
            check_login_ok(c.login_step(0, 1, False, [("CHAP_A", "5")]))
            r = c.login_step(1, 3, True, [("HeaderDigest", "None")])
            return expect_login_status(r, [2], "skipping CHAP_N/CHAP_R")
        B.run("chap_skip_response", chap_skip_response)

        def chap_backoff_then_login():
            # The wrong responses above put this initiator and address in
            # hotlund's CHAP back-off (a few seconds): the right secret is
            # refused (0x0201) until it ends, then accepted.
            t0 = time.monotonic()
            refused = 0
            while True:
                try:
                    B.logged_in().close()
                    return "right secret accepted after %.1f s (%d refused)" % (
                        time.monotonic() - t0, refused)
                except AssertionError:
                    refused += 1
                    if time.monotonic() - t0 > 40:
                        raise
                    time.sleep(0.25)
        B.run("chap_backoff_then_login", chap_backoff_then_login)

    # ---- full feature phase
    def reserved_opcode():
        c = B.logged_in()
        b = bytearray(c.nop_bhs(immediate=True))
        b[0] = 0x40 | 0x1E   # reserved initiator opcode
        c.send(b)
        try:
            r = c.recv()
        except Closed:
            raise AssertionError("connection closed without a Reject PDU")
        if r.opcode != OP_REJECT or r.bhs[2] not in (0x04, 0x05):
            raise AssertionError("reserved opcode answered %r, want Reject 0x05 (or 0x04)" % r)
        if r.data[:48] != bytes(b[:48]):
            raise AssertionError("Reject does not carry the rejected header")
        try:   # the target may keep the connection (0x05) or close it (0x04)
            c.ping()
            c.logout()
            after = "connection still usable"
        except Closed:
            after = "then closed"
        return "Reject reason 0x%02x; %s" % (r.bhs[2], after)
    B.run("ffp_reserved_opcode", reserved_opcode)

    def bad_cdb():
        c = B.logged_in()
        st, _, sense = c.scsi(bytes([0xFF]) + bytes(15), lun=L, read_len=0)
        sk = sense_key(sense)
        if st != 0x02 or not sk or sk[0] != 0x05 or sk[1] != 0x20:
            raise AssertionError("opcode 0xff: status 0x%02x sense %s, want CHECK CONDITION "
                                 "ILLEGAL REQUEST/INVALID COMMAND OPERATION CODE" % (st, sense.hex()))
        c.logout()
        return "CHECK CONDITION 5/20/00"
    B.run("ffp_unknown_cdb", bad_cdb)

    def bad_lun():
        c = B.logged_in()
        st, _, sense = c.scsi(cdb_rc10(), lun=200, read_len=8)
        sk = sense_key(sense)
        if st != 0x02 or not sk or sk[0] != 0x05 or sk[1] != 0x25:
            raise AssertionError("LUN 200: status 0x%02x sense %s, want ILLEGAL REQUEST/LOGICAL "
                                 "UNIT NOT SUPPORTED" % (st, sense.hex()))
        c.logout()
        return "CHECK CONDITION 5/25/00"
    B.run("ffp_unknown_lun", bad_lun)

    def out_of_window():
        c = B.logged_in()
        bad_itt = 0xBAD0001
        c.send(c.scsi_bhs(cdb_read10(0, 1), lun=L, read_len=512, itt=bad_itt,
                          cmdsn=(c.cmdsn + 100000) & 0xFFFFFFFF))
        # Silently ignored (RFC 7143 3.2.2.1): the next immediate ping is answered,
        # the ignored command never is, and the window still works.
        r = c.ping()
        exp = r.u32(28)
        if exp != c.cmdsn:
            raise AssertionError("ExpCmdSN moved to %d (want %d) after an out-of-window command"
                                 % (exp, c.cmdsn))
        st, data, _ = c.scsi(cdb_read10(0, 1), lun=L, read_len=512)
        if st != 0 or len(data) != 512:
            raise AssertionError("in-window READ after the ignored one failed")
        try:
            r = c.recv(0.5)
            raise AssertionError("target answered the out-of-window command: %r" % r)
        except Timeout:
            pass
        c.logout()
        return "ignored; window intact"
    B.run("ffp_cmdsn_out_of_window", out_of_window)

    def oversized_ffp():
        c = B.logged_in()
        n = c.mrdsl + 4096
        c.send(c.scsi_bhs(cdb_write10(0, n // 512), lun=L, write_len=n), b"\0" * n)
        return answer_or_close(c, allowed_reasons=(0x04, 0x09))
    B.run("ffp_oversized_data", oversized_ffp)

    def dsl_huge():
        c = B.logged_in()
        c.send_raw(c.build(c.nop_bhs(), b"", dsl=0xFFFFFF))
        return answer_or_close(c, allowed_reasons=(0x04, 0x09))
    B.run("ffp_dsl_16mib", dsl_huge)

    def login_in_ffp():
        c = B.logged_in()
        c.send(c.login_bhs(0, 1, True), text_encode(B.sec_keys()))
        return answer_or_close(c, allowed_reasons=(0x04, 0x05, 0x09), login_classes=(2,))
    B.run("ffp_login_pdu", login_in_ffp)

    def truncated_ffp():
        c = B.logged_in()
        c.send_raw(c.build(c.scsi_bhs(cdb_write10(0, 8), lun=L, write_len=4096), b"", dsl=4096) + b"x" * 100)
        c.sock.shutdown(socket.SHUT_WR)
        if not c.expect_closed(10):
            raise AssertionError("target kept the connection open after EOF mid-PDU")
        return "connection closed"
    B.run("ffp_truncated_data", truncated_ffp)

    def dataout_unknown_ttt():
        # A Data-Out nobody asked for: Reject (0x04/0x09), silence, or close.
        # A ping right behind it tells silence from slowness.
        c = B.logged_in()
        b = bytearray(48)
        b[0] = OP_DATA_OUT
        b[1] = 0x80
        struct.pack_into(">I", b, 16, 0x77777777)
        struct.pack_into(">I", b, 20, 0x12345678)
        struct.pack_into(">I", b, 28, c.exp_statsn)
        c.send(b, b"\0" * 512)
        ping = c.nop_bhs()
        ping_itt = c.itt
        try:
            c.send(ping)
        except Closed:
            return "connection closed"
        rejected = None
        try:
            while True:
                r = c.recv()
                if r.opcode == OP_REJECT and r.bhs[2] in (0x04, 0x09):
                    rejected = r.bhs[2]
                elif r.opcode == OP_NOP_IN and r.itt == ping_itt:
                    break
                else:
                    raise AssertionError("stray Data-Out answered %r" % r)
        except Closed:
            return "connection closed" + (" after Reject 0x%02x" % rejected if rejected else "")
        c.logout()
        return ("Reject reason 0x%02x" % rejected if rejected else "ignored") + "; connection usable"
    B.run("ffp_dataout_unknown_ttt", dataout_unknown_ttt)

    def bad_data_digest():
        # RFC 7143 7.8: a payload digest error is answered with Reject reason
        # 0x02 and the PDU is discarded; at ERL 0 dropping the connection is
        # the other acceptable answer. Never silence, never execution.
        c = B.logged_in(digest=True)
        c.send(c.nop_bhs(), b"ping with a wrong data digest", bad_dd=True)
        try:
            r = c.recv()
        except Closed:
            return "connection closed"
        if r.opcode != OP_REJECT or r.bhs[2] != 0x02:
            raise AssertionError("bad data digest answered %r, want Reject reason 0x02" % r)
        c.ping(b"good data digest")
        c.logout()
        return "Reject reason 0x02; connection still usable"
    B.run("ffp_bad_data_digest", bad_data_digest)

    def bad_data_digest_write():
        probe_lba = 778
        c = B.logged_in(digest=True)
        st, before, _ = c.scsi(cdb_read10(probe_lba, 1), lun=L, read_len=512)
        pattern = b"\x3c" * 512 if before != b"\x3c" * 512 else b"\xc3" * 512
        c.send(c.scsi_bhs(cdb_write10(probe_lba, 1), lun=L, write_len=512), pattern, bad_dd=True)
        try:
            r = c.recv(2.0)
            if r.opcode == OP_SCSI_RSP and r.bhs[3] == 0:
                raise AssertionError("WRITE with a bad data digest got GOOD status")
            how = repr(r)
        except Closed:
            how = "connection closed"
        except Timeout:
            how = "discarded"
        c.close()
        c2 = B.logged_in()
        st, after, _ = c2.scsi(cdb_read10(probe_lba, 1), lun=L, read_len=512)
        if after == pattern:
            raise AssertionError("the write with a bad data digest was executed")
        c2.logout()
        return how + "; write not executed"
    B.run("ffp_bad_data_digest_write", bad_data_digest_write)

    def bad_header_digest():
        # A write whose header digest is wrong must not be executed; ERL 0
        # lets the target drop the connection (or discard the PDU).
        probe_lba = 777
        c = B.logged_in(digest=True)
        pattern = b"\xa5" * 512
        st, before, _ = c.scsi(cdb_read10(probe_lba, 1), lun=L, read_len=512)
        if before == pattern:
            pattern = b"\x5a" * 512
        c.send(c.scsi_bhs(cdb_write10(probe_lba, 1), lun=L, write_len=512), pattern, bad_hd=True)
        try:
            r = c.recv(2.0)
            raise AssertionError("answered a PDU with a bad header digest: %r" % r)
        except (Closed, Timeout) as e:
            how = "connection closed" if isinstance(e, Closed) else "discarded"
        c.close()
        c2 = B.logged_in()
        st, after, _ = c2.scsi(cdb_read10(probe_lba, 1), lun=L, read_len=512)
        if after == pattern:
            raise AssertionError("the write with a bad header digest was executed")
        c2.logout()
        return how + "; write not executed"
    B.run("ffp_bad_header_digest", bad_header_digest)

    def scsi_data_ok_after():
        c = B.logged_in(digest=True)
        blob = os.urandom(4096)
        st, _, sense = c.scsi(cdb_write10(64, 8), lun=L, data=blob)
        if st != 0:
            raise AssertionError("WRITE(10) with digests: status 0x%02x sense %s" % (st, sense.hex()))
        st, data, _ = c.scsi(cdb_read10(64, 8), lun=L, read_len=4096)
        if st != 0 or data != blob:
            raise AssertionError("read-back with digests differs")
        c.logout()
        return "write/read-back with CRC32C digests"
    B.run("digest_write_read", scsi_data_ok_after)

    print("%d passed, %d failed" % (B.passed, B.failed))
    return 1 if B.failed else 0


# ---------------------------------------------------------------- idle connections

def cmd_idle(args):
    """N connections that never send a PDU; report how many the target closes at once."""
    host, _, port = args.portal.rpartition(":")
    socks = []
    for _ in range(args.count):
        s = socket.socket(socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET)
        if args.source:
            s.bind((args.source, 0))
        s.settimeout(5)
        s.connect((host.strip("[]"), int(port)))
        socks.append(s)
    time.sleep(1.0)
    closed = 0
    for s in socks:
        s.setblocking(False)
        try:
            if s.recv(1) == b"":
                closed += 1
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
    print("idle: opened %d, closed by the target %d" % (args.count, closed), flush=True)
    time.sleep(args.hold)
    for s in socks:
        s.close()
    return 0


# ---------------------------------------------------------------- slow reader

def cmd_slowreader(args):
    """A session that queues large READs and never reads must not stall others."""
    import threading
    probe = connect(args)
    probe.login(args.target, initiator="iqn.2026-11.io.hotlun:latency-probe")
    probe.clear_ua(args.lun)
    big = connect(args)
    # a small receive buffer: the target's socket fills at once
    big.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    big.login(args.target, initiator="iqn.2026-11.io.hotlun:slow-reader")
    big.clear_ua(args.lun)
    lat = []
    err = []
    started = threading.Event()

    def probe_loop():
        t_end = time.monotonic() + args.seconds
        try:
            while len(lat) < args.ios and time.monotonic() < t_end:
                t0 = time.monotonic()
                st, _, sense = probe.scsi(cdb_read10((len(lat) * 8) % 4096, 8), lun=args.lun,
                                          read_len=4096, timeout=30)
                lat.append((time.monotonic() - t0) * 1000.0)
                if st != 0:
                    raise AssertionError("probe READ: status 0x%02x sense %s" % (st, sense.hex()))
                if len(lat) == 5:
                    started.set()
                time.sleep(0.005)
        except Exception as e:   # noqa: BLE001 - reported below
            err.append(e)
        started.set()

    th = threading.Thread(target=probe_loop)
    th.start()
    started.wait()
    blocks = (16 << 20) // 512
    for i in range(args.reads):
        lba = (i * blocks) % max(1, args.lba_span - blocks)
        big.send(big.scsi_bhs(cdb_read10(lba, blocks), lun=args.lun, read_len=16 << 20))
        big.cmdsn += 1
    # `big` is never read again
    th.join()
    if err:
        raise err[0]
    lat_sorted = sorted(lat)
    p50 = lat_sorted[len(lat) // 2]
    worst = lat_sorted[-1]
    print("slowreader: %d probe READs while %d x 16 MiB READs wait: p50 %.2f ms, max %.1f ms"
          " (worst five: %s)" % (len(lat), args.reads, p50, worst,
                                 " ".join("%.1f" % x for x in lat_sorted[-5:])))
    probe.logout()
    probe.close()
    big.close()
    if len(lat) < min(args.ios, 20):
        print("slowreader: only %d probe READs completed" % len(lat))
        return 1
    return 0 if worst <= args.max_ms else 1

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["vpd83", "badinput", "login", "slowreader", "idle"])
    ap.add_argument("--portal", required=True)
    ap.add_argument("--target")
    ap.add_argument("--count", type=int, default=10, help="idle: connections to open")
    ap.add_argument("--hold", type=float, default=10, help="idle: seconds to keep them")
    ap.add_argument("--lun", type=int, default=0)
    ap.add_argument("--chap-user")
    ap.add_argument("--chap-secret")
    ap.add_argument("--digest", action="store_true")
    ap.add_argument("--source", help="local address to connect from (e.g. 127.0.0.2)")
    ap.add_argument("--reads", type=int, default=32, help="slowreader: 16 MiB READs queued")
    ap.add_argument("--ios", type=int, default=200, help="slowreader: probe READs")
    ap.add_argument("--seconds", type=float, default=20, help="slowreader: probe time limit")
    ap.add_argument("--max-ms", type=float, default=200, help="slowreader: worst latency allowed")
    ap.add_argument("--lba-span", type=int, default=1 << 21, help="slowreader: blocks of the LUN")
    args = ap.parse_args()
    if args.command != "idle" and not args.target:
        ap.error("--target is required")
    try:
        return {"vpd83": cmd_vpd83, "badinput": cmd_badinput, "login": cmd_login,
                "slowreader": cmd_slowreader, "idle": cmd_idle}[args.command](args)
    except (AssertionError, Closed, Timeout, OSError) as e:
        print("error: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
