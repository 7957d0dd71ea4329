"""netutil.py - socket helpers the functional tests' Python shares.

alive(s): whether the peer still holds s open.
"""


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
