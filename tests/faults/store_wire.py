"""The rendezvous store's wire protocol from a client's side, for fault group j (faults_store.py):
the handshake, request frames, a raw connection from this process (Raw), the script of a client
that is killed mid-request in its own process, and the ports a round's store may take."""

import hashlib
import hmac
import os
import select
import socket
import struct
import time

from faultlib import free_port

SERVER_HELLO = b"ACCELST1"
CLIENT_HELLO = b"ACCELCL1"
HANDSHAKE_S = 0.8  # the store's documented handshake deadline (docs/security.md)
ANSWER_S = 0.5  # a client that proved the token is answered within this
OP_SET, OP_GET, OP_ADD = 1, 2, 3

# A client holding the token, in its own process: handshake, part of a request, "sent", then it
# waits to be SIGKILLed.
KILLED_CLIENT = r"""
import hashlib, hmac, os, socket, struct, sys, time
port, mode = int(sys.argv[1]), sys.argv[2]
token = os.environ["J_TOKEN"].encode()
s = socket.create_connection(("127.0.0.1", port), timeout=5)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
def exact(n):
    b = b""
    while len(b) < n:
        d = s.recv(n - len(b))
        if not d:
            print("closed after %d bytes" % len(b), flush=True)
            sys.exit(1)
        b += d
    return b
def mac(label, a, b):
    return hmac.new(token, label + a + b, hashlib.sha256).digest()
hello = exact(24)
sn, cn = hello[8:], os.urandom(16)
mine = b"ACCELCL1" + cn + mac(b"accel store client ", sn, cn)
if mode == "hello":
    partial = mine[:30]
else:
    s.sendall(mine)
    if exact(32) != mac(b"accel store server ", cn, sn):
        print("bad server proof", flush=True)
        sys.exit(1)
    key, value = b"faults/j/killed", b"v" * 24
    body = bytes([1]) + struct.pack("<I", len(key)) + key + struct.pack("<I", len(value)) + value
    req = struct.pack("<I", len(body)) + body
    if mode == "next":
        s.sendall(req)
        exact(struct.unpack("<I", exact(4))[0])
    partial = {"len2": req[:2], "len": req[:4]}.get(mode, req[:4 + len(body) // 2])
s.sendall(partial)
print("sent %d %d" % (s.getsockname()[1], len(partial)), flush=True)
time.sleep(60)
"""


def frame(body):
    return struct.pack("<I", len(body)) + body


def s_field(b):
    return struct.pack("<I", len(b)) + b


def mac(token, label, a, b):
    return hmac.new(token, label + a + b, hashlib.sha256).digest()


def store_ports(n, rng):
    """n free ports below the kernel's ephemeral range: no connection of this machine (ours, the
    ranks', another job's) is given one of them by connect() before a round binds it."""
    low = 32768
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    if low <= 12000:
        return [free_port() for _ in range(n)]
    out = []
    while len(out) < n:
        port = rng.randrange(10000, low)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            s.close()
        if port not in out:
            out.append(port)
    return out


def listening(port):
    """Whether something listens on 127.0.0.1:port (from /proc/net/tcp: no connection made)."""
    want = "0100007F:%04X" % port
    try:
        with open("/proc/net/tcp") as f:
            for line in f:
                p = line.split()
                if len(p) > 3 and p[1] == want and p[3] == "0A":
                    return True
    except OSError:
        pass
    return False


class Raw:
    """A raw store connection from this process."""

    def __init__(self, port, token):
        self.token = token
        self.s = socket.create_connection(("127.0.0.1", port), timeout=2)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.local = self.s.getsockname()[1]
        self.t_connect = time.monotonic()
        self.closed_at = None
        self.got = b""
        self.by = None  # a deadline for every answer (a burst's)

    def exact(self, n, timeout=2.0):
        """n bytes, or raises OSError naming what came."""
        deadline = time.monotonic() + timeout
        if self.by is not None:
            deadline = min(deadline, self.by)
        b = b""
        while len(b) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise OSError("no answer within %.1f s (%d of %d bytes)" % (timeout, len(b), n))
            self.s.settimeout(left)
            try:
                d = self.s.recv(n - len(b))
            except socket.timeout:
                continue
            if not d:
                raise OSError("the store closed the connection (%d of %d bytes)" % (len(b), n))
            b += d
        return b

    def hello(self):
        h = self.exact(24)
        if h[:8] != SERVER_HELLO:
            raise OSError("the store greeted with %r" % h[:8])
        return h[8:]

    def client_hello(self, server_nonce, token=None):
        cn = os.urandom(16)
        self.cnonce, self.snonce = cn, server_nonce
        return CLIENT_HELLO + cn + mac(token or self.token, b"accel store client ", server_nonce,
                                       cn)

    def prove(self):
        """The whole handshake; raises OSError when the store refuses or proves wrongly."""
        self.s.sendall(self.client_hello(self.hello()))
        if self.exact(32) != mac(self.token, b"accel store server ", self.cnonce, self.snonce):
            raise OSError("the store's proof of the token is wrong")

    def request(self, body, timeout=ANSWER_S * 4):
        self.s.sendall(frame(body))
        n = struct.unpack("<I", self.exact(4, timeout))[0]
        return self.exact(n, timeout)

    def add(self, key, delta):
        reply = self.request(bytes([OP_ADD]) + s_field(key) + struct.pack("<q", delta))
        if len(reply) != 9 or reply[0] != 0:
            raise OSError("add answered %r" % reply[:40])
        return struct.unpack("<q", reply[1:])[0]

    def poll_closed(self):
        """Whether the peer closed (reads and drops whatever it sent)."""
        if self.closed_at is not None:
            return True
        while True:
            r, _w, _x = select.select([self.s], [], [], 0)
            if not r:
                return False
            try:
                self.s.setblocking(False)
                d = self.s.recv(65536)
            except BlockingIOError:
                return False
            except OSError:
                d = b""
            finally:
                try:
                    self.s.setblocking(True)
                except OSError:
                    pass
            if not d:
                self.closed_at = time.monotonic()
                return True
            self.got += d

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass
