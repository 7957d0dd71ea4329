"""netutil.py - socket helpers the functional tests' Python shares.

alive(s): whether the peer still holds s open. relay(listen_port, backlog,
upstream, start): the accept loop of a loopback TCP relay (tcp_forward.py,
hold_proxy.py). pump(src, dst[, gate]): copy one direction until EOF or an error (each chunk
waiting for an Event, when given).
"""
import socket


def alive(s):
    """False once the peer closed s (EOF or reset); leaves s blocking, 5 s timeout."""
    s.setblocking(False)
    try:
        return s.recv(1) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        s.settimeout(5)


def pump(src, dst, gate=None):
    """Copy src to dst until src ends or either fails; what to do then is the caller's.
    With gate (a threading.Event), each chunk waits until the gate is set."""
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            if gate is not None:
                gate.wait()
            dst.sendall(data)
    except OSError:
        pass


def relay(listen_port, backlog, upstream, start):
    """Listen on 127.0.0.1:listen_port, print "ready", then for each client
    connect upstream() and call start(client, up) (a client whose upstream
    cannot be reached is closed). Runs until killed."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", listen_port))
    srv.listen(backlog)
    print("ready", flush=True)
    while True:
        client, _ = srv.accept()
        try:
            up = upstream()
        except OSError:
            client.close()
            continue
        start(client, up)
