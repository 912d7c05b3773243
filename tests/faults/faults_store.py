"""Fault group j of the fault-injection suite (fault_suite.py): libaccel's rendezvous store, rank
0's, next to misbehaving clients while the job's ranks use it.

The job: two ranks of store_fault_program started from the environment (MASTER_ADDR, RANK, ...,
and an ACCEL_JOB_TOKEN this group draws, so that its clients can prove it as a rank does). Every
round of the program is a fresh accel_init on a fresh port (rank 0's store; the census, Gloo's
rendezvous and the shared-memory all-reduce's setup: every store request a job makes), a reduce
and a barrier, each timed. The driver holds rank 1 before each round and rank 0 before it closes
its store: once rank 0's store of the round listens, the round's misbehaving clients connect,
then rank 1 is let go (its rendezvous runs with them), and rank 0's store closes only once every
expectation about them had its chance.

Injections (each recorded on its own; --quick puts the cases of one kind in one round):
  killed mid-request   a client holding the token (a Python subprocess) completes the handshake,
                       sends part of a request frame (2 of the 4 length bytes; the length only;
                       the length and half the body; one request answered, then half of the
                       next) or 30 of the 56 bytes of its hello, and is SIGKILLed (the kernel
                       closes its socket) just before or while rank 1 rendezvouses;
  64 clients at once   48 clients prove the token and each makes an add on one key, 16 strangers
                       (nothing sent, garbage, a wrong token, a request without the handshake,
                       half a hello then closed, closed at once) connect in one burst as rank 1
                       is let go;
  stalled mid-message  a stranger sends half a hello, a token holder 30 bytes of its hello, a
                       client that proved the token 2 length bytes, the length only, or the
                       length and half the body, and then holds the connection without a word;
  all at once          (full mode) one round with a kill, a stall and a burst together.
Checks, per injection: the ranks' rendezvous (rank 1's accel_init, and rank 0's from rank 1's
arrival) and their reduce and barrier take no longer than in the unfaulted rounds plus 0.5 s (less
than the store's 0.8 s handshake deadline: a store that waited on a misbehaving client would
show); every client that proved the token is answered within 0.5 s, the adds of a burst counting
1..48 with none lost; every misbehaving connection is named in rank 0's log by its address and
port: a stranger's (and a half-sent hello's) with the documented reason, closed by the store
within 0.5 s and logged within 1 s of when it became refusable (its bytes, or the 0.8 s handshake
deadline); a client killed mid-request within 1 s of the kill; a client stalled mid-request by the
time the store closes it (the latest it can be named). The job: both ranks exit 0 with the same
checksum of every reduced tensor as computed here, and none of its processes (nor a killed
client) is left 2 s after it ends. Every wait has a timeout.
"""

import hashlib
import hmac
import os
import random
import re
import secrets
import select
import socket
import struct
import sys
import time

from faultlib import ALL_TRACKERS, Proc, SetupError, Tracker, base_env, free_port, log, vlog

G_KILL = "j. store client killed mid-request"
G_BURST = "j. store: 64 clients at once"
G_STALL = "j. store client stalled mid-message"
G_JOB = "j. store-fault job ends as computed"

SERVER_HELLO = b"ACCELST1"
CLIENT_HELLO = b"ACCELCL1"
HANDSHAKE_S = 0.8  # the store's documented handshake deadline (docs/security.md)
DELAY_MARGIN = 0.5  # a rank's store work may take this much longer than unfaulted: < HANDSHAKE_S
CLOSE_MARGIN = 0.5  # a refused stranger is closed within this of becoming refusable
NAME_S = 1.0  # and named in rank 0's log within this
ANSWER_S = 0.5  # a client that proved the token is answered within this
BURST_S = 3.0  # every answer of a burst (a store that hangs costs no more)
ROUND_TIMEOUT = 8.0  # a round's accel_init (rendezvous timeout 5 s), reduce and barrier
OP_SET, OP_GET, OP_ADD = 1, 2, 3
ELEMS = 8

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

KILL_MODES = {
    "len2": "2 of the 4 length bytes of a request",
    "len": "a request's length, no body",
    "half": "a request's length and half its body",
    "next": "one request answered, then half of the next",
    "hello": "30 of the 56 bytes of its hello (holding the token)",
}
STALL_MODES = {
    "stranger": "a stranger: half a hello",
    "hello": "a token holder: 30 of the 56 bytes of its hello",
    "len2": "a client that proved the token: 2 of the 4 length bytes of a request",
    "len": "a client that proved the token: a request's length, no body",
    "half": "a client that proved the token: a request's length and half its body",
}
STRANGER_KINDS = {
    # kind: (what it does, the reason rank 0's log must give, whether it stalls)
    "nothing": ("sends nothing", "sent nothing within", True),
    "garbage": ("sends 64 random bytes", "not libaccel's handshake", False),
    "wrong token": ("proves a wrong token", "proof of the job token is wrong", False),
    "no handshake": ("sends a store request without the handshake", "not libaccel's handshake",
                     False),
    "half then closed": ("sends half a hello and closes", "bytes of a handshake and closed", False),
    "closed at once": ("connects and closes", "closed without a word", False),
}


def frame(body):
    return struct.pack("<I", len(body)) + body


def s_field(b):
    return struct.pack("<I", len(b)) + b


def mac(token, label, a, b):
    return hmac.new(token, label + a + b, hashlib.sha256).digest()


def fnv(h, data):
    for byte in data:
        h = ((h ^ byte) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def expected_checksum(rounds):
    """What both ranks print: FNV-1a 64 over every round's reduced f32 tensor, whose element k is
    (1 + 2) * (i + 1) + 2 k on two ranks."""
    h = 14695981039346656037
    for i in range(rounds):
        h = fnv(h, struct.pack("<%df" % ELEMS, *[3.0 * (i + 1) + 2 * k for k in range(ELEMS)]))
    return "%016x" % h


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


# ------------------------------------------------------------------------------------------------
# Injections
# ------------------------------------------------------------------------------------------------


class Injection:
    """One misbehaving client (or one burst). start() before rank 1 is let go, fire() right after,
    poll() until settled() or past deadline(), finish(t_release) once rank 0 freed its store."""

    group = ""

    def __init__(self, job):
        self.job = job
        self.problems = []

    def start(self):
        pass

    def fire(self):
        pass

    def poll(self):
        pass

    def settled(self):
        return True

    def deadline(self):
        return 0.0

    def finish(self, t_release):
        pass

    def cleanup(self):
        pass


class Killed(Injection):
    group = G_KILL

    def __init__(self, job, mode, before_go):
        Injection.__init__(self, job)
        self.mode = mode
        self.before_go = before_go
        self.case = "%s, killed %s rank 1's rendezvous" % (KILL_MODES[mode],
                                                          "before" if before_go else "during")
        self.proc = None
        self.local = None
        self.t_kill = None
        self.named = None

    def start(self):
        env = dict(base_env(), J_TOKEN=self.job.token)
        self.proc = Proc([sys.executable, "-c", KILLED_CLIENT, str(self.job.port), self.mode], env)
        self.job.tracker.add(self.proc.pid, "a store client to kill")
        got = self.proc.wait_line(lambda l: True, 10)
        m = re.match(r"^sent (\d+) (\d+)$", got[1]) if got else None
        if not m:
            self.problems.append(("the client to kill could not reach the store", "%s; %s" % (
                got[1] if got else "no line in 10 s", " | ".join(self.proc.err_lines()[-3:]))))
            self.proc.kill()
            return
        self.local = int(m.group(1))
        if self.before_go:
            self.kill()

    def fire(self):
        if self.local is not None and self.t_kill is None:
            time.sleep(self.job.rng.uniform(0.0, 0.015))
            self.kill()

    def kill(self):
        self.proc.kill()  # SIGKILL, then reaped
        self.t_kill = time.monotonic()

    def poll(self):
        if self.local is not None and self.named is None:
            self.named = self.job.named(self.local)

    def settled(self):
        return self.local is None or self.named is not None

    def deadline(self):
        return (self.t_kill or 0.0) + NAME_S

    def finish(self, t_release):
        if self.local is None:
            return
        # Where the kill landed, from rank 1's own clock readings (CLOCK_MONOTONIC, as ours).
        r1_start, r1_end = self.job.r1_span
        self.case = "%s, killed %s rank 1's rendezvous" % (
            KILL_MODES[self.mode], "before" if self.t_kill < r1_start else
            "during" if self.t_kill <= r1_end else "after")
        self.poll()
        if self.named is None or self.named[0] > self.t_kill + NAME_S:
            self.problems.append((
                "a client killed mid-request was not named in rank 0's log within %.0f s" % NAME_S,
                "127.0.0.1:%d (%s) killed at +%.2f s; %s" % (
                    self.local, KILL_MODES[self.mode], self.t_kill - self.job.t0,
                    "named %.2f s after the kill: %s" % (self.named[0] - self.t_kill,
                                                         self.named[1])
                    if self.named else "rank 0's store never mentioned it (its lines this round: "
                    "%s)" % self.job.round_log())))
        vlog("j: %s -> %s" % (self.case, self.named[1][:120] if self.named else "not named"))

    def cleanup(self):
        if self.proc:
            self.proc.kill()


class Stalled(Injection):
    group = G_STALL

    def __init__(self, job, mode):
        Injection.__init__(self, job)
        self.mode = mode
        self.case = STALL_MODES[mode] + ", then silence"
        self.conn = None
        self.named = None
        self.refusable = None  # strangers: the handshake deadline

    def start(self):
        try:
            c = self.conn = Raw(self.job.port, self.job.token.encode())
            if self.mode == "stranger":
                c.s.sendall(CLIENT_HELLO + os.urandom(20))
            elif self.mode == "hello":
                c.s.sendall(c.client_hello(c.hello())[:30])
            else:
                c.prove()
                key, value = b"faults/j/stalled", b"w" * 24
                req = frame(bytes([OP_SET]) + s_field(key) + s_field(value))
                c.s.sendall({"len2": req[:2], "len": req[:4]}.get(self.mode, req[:4 + 20]))
        except OSError as e:
            self.problems.append(("the stalling client could not reach the store", str(e)))
            self.conn = None
            return
        if self.mode in ("stranger", "hello"):
            self.refusable = c.t_connect + HANDSHAKE_S

    def poll(self):
        if self.conn is None:
            return
        self.conn.poll_closed()
        if self.named is None:
            self.named = self.job.named(self.conn.local)

    def settled(self):
        if self.conn is None:
            return True
        if self.refusable is not None:
            return self.named is not None and self.conn.closed_at is not None
        return False  # a client that proved the token: held until the store closes

    def deadline(self):
        if self.refusable is not None:
            return self.refusable + NAME_S
        # Held for the naming margin (a store with a deadline for a request's bytes names it by
        # then); a store without one names it when it closes it.
        return self.conn.t_connect + NAME_S if self.conn else 0.0

    def finish(self, t_release):
        c = self.conn
        if c is None:
            return
        end = t_release + NAME_S
        while time.monotonic() < end and (c.closed_at is None or self.named is None):
            self.poll()
            time.sleep(0.01)
        self.poll()
        where = "127.0.0.1:%d (%s)" % (c.local, STALL_MODES[self.mode])
        if self.refusable is not None:
            if c.closed_at is None or c.closed_at > self.refusable + CLOSE_MARGIN:
                self.problems.append((
                    "a stalled handshake was not closed by the store within %.1f s" % (
                        HANDSHAKE_S + CLOSE_MARGIN),
                    "%s: %s" % (where, "closed after %.2f s" % (c.closed_at - c.t_connect)
                                if c.closed_at else "still open when rank 0's store closed")))
            if self.named is None or self.named[0] > self.refusable + NAME_S:
                self.problems.append((
                    "a stalled handshake was not named in rank 0's log within %.1f s" % (
                        HANDSHAKE_S + NAME_S),
                    "%s: %s" % (where, "named after %.2f s" % (self.named[0] - c.t_connect)
                                if self.named else "never named; its lines: %s"
                                % self.job.round_log())))
            elif "not all of it" not in self.named[1]:
                self.problems.append(("a stalled handshake was named with the wrong reason",
                                      "%s: %s" % (where, self.named[1])))
        else:
            if c.closed_at is None:
                self.problems.append((
                    "a stalled connection stayed open after rank 0 closed its store",
                    "%s: still open %.1f s after rank 0 was let go" % (where, NAME_S)))
            if self.named is None:
                self.problems.append((
                    "a client stalled mid-request was never named in rank 0's log",
                    "%s: stalled from +%.2f s, held %.2f s until rank 0 closed its store%s; "
                    "its lines this round: %s" % (
                        where, c.t_connect - self.job.t0, t_release - c.t_connect,
                        " (which closed it)" if c.closed_at else "", self.job.round_log())))
        vlog("j: %s -> %s%s" % (self.case, "closed after %.2f s, " % (c.closed_at - c.t_connect)
                                 if c.closed_at else "", self.named[1][:120] if self.named
                                 else "not named"))

    def cleanup(self):
        if self.conn:
            self.conn.close()


class Burst(Injection):
    group = G_BURST

    def __init__(self, job, n_auth=48, n_strangers=16):
        Injection.__init__(self, job)
        self.n_auth, self.n_strangers = n_auth, n_strangers
        self.case = "%d clients proving the token (an add each) and %d strangers at once" % (
            n_auth, n_strangers)
        self.clients = []  # (kind, Raw); kind "auth" or a STRANGER_KINDS key
        self.refusable = {}  # Raw -> when it became refusable
        self.named = {}
        self.key = b"faults/j/burst/%d" % job.round

    def fire(self):
        kinds = ["auth"] * self.n_auth + [
            list(STRANGER_KINDS)[i % len(STRANGER_KINDS)] for i in range(self.n_strangers)]
        self.job.rng.shuffle(kinds)
        t = time.monotonic()
        for kind in kinds:  # every connection open at once, then every client speaks
            try:
                c = Raw(self.job.port, self.job.token.encode())
                c.by = t + BURST_S
                self.clients.append((kind, c))
            except OSError as e:
                self.problems.append(("a client of the burst could not connect", "%s: %s" % (
                    kind, e)))
        values, slow = [], []
        for kind, c in self.clients:
            try:
                if kind == "auth":
                    pass  # below, once every stranger has spoken
                elif kind == "garbage":
                    c.s.sendall(os.urandom(64))
                elif kind == "no handshake":
                    c.s.sendall(frame(bytes([OP_GET]) + s_field(b"census/0") + struct.pack(
                        "<q", 0)))
                elif kind == "half then closed":
                    c.s.sendall(CLIENT_HELLO + os.urandom(20))
                    c.s.close()
                elif kind == "closed at once":
                    c.s.close()
                elif kind == "wrong token":
                    c.s.sendall(c.client_hello(c.hello(), token=os.urandom(16)))
            except OSError as e:
                self.problems.append(("a stranger of the burst could not send", "%s: %s" % (
                    kind, e)))
            if kind != "auth":
                stalls = STRANGER_KINDS[kind][2]
                self.refusable[c] = c.t_connect + HANDSHAKE_S if stalls else time.monotonic()
        for kind, c in self.clients:
            if kind != "auth":
                continue
            try:
                c.s.sendall(c.client_hello(c.hello()))
            except OSError as e:
                self.problems.append(("a client that proves the token was refused", str(e)))
        for kind, c in self.clients:
            if kind != "auth":
                continue
            try:
                if c.exact(32) != mac(c.token, b"accel store server ", c.cnonce, c.snonce):
                    raise OSError("the store's proof of the token is wrong")
                t0 = time.monotonic()
                values.append(c.add(self.key, 1))
                if time.monotonic() - t0 > ANSWER_S:
                    slow.append(time.monotonic() - t0)
            except OSError as e:
                self.problems.append(("a client that proved the token was not served",
                                      "127.0.0.1:%d: %s" % (c.local, e)))
        self.t_burst = time.monotonic() - t
        if slow:
            self.problems.append(("an add of a client that proved the token took longer than "
                                  "%.1f s" % ANSWER_S, "%d of them, the slowest %.2f s" % (
                                      len(slow), max(slow))))
        if values and sorted(values) != list(range(1, len(values) + 1)):
            self.problems.append(("the burst's adds did not count 1..%d" % len(values),
                                  str(sorted(values))))
        total = None
        for kind, c in self.clients:
            if kind == "auth" and c.closed_at is None:
                try:
                    total = c.add(self.key, 0)
                except OSError:
                    continue
                break
        if total != self.n_auth:
            self.problems.append(("the store lost adds of the burst", "%d clients added 1, the "
                                  "key holds %s" % (self.n_auth, total)))
        for kind, c in self.clients:
            if kind == "auth":
                c.close()  # at a frame's end: a rank's own way to leave

    def strangers(self):
        return [(k, c) for k, c in self.clients if k != "auth"]

    def poll(self):
        for kind, c in self.strangers():
            if kind not in ("half then closed", "closed at once"):
                c.poll_closed()
            if c not in self.named:
                n = self.job.named(c.local)
                if n:
                    self.named[c] = n

    def settled(self):
        return all(c in self.named and (c.closed_at is not None or k in (
            "half then closed", "closed at once")) for k, c in self.strangers())

    def deadline(self):
        return max([t + NAME_S for t in self.refusable.values()] + [0.0])

    def finish(self, t_release):
        self.poll()
        for kind, c in self.strangers():
            where = "127.0.0.1:%d (%s)" % (c.local, STRANGER_KINDS[kind][0])
            due = self.refusable[c]
            if kind not in ("half then closed", "closed at once") and (
                    c.closed_at is None or c.closed_at > due + CLOSE_MARGIN):
                self.problems.append((
                    "a stranger of the burst was not closed by the store in time", "%s: %s" % (
                        where, "closed %.2f s after it became refusable" % (c.closed_at - due)
                        if c.closed_at else "open until rank 0 closed its store")))
            n = self.named.get(c)
            if n is None or n[0] > due + NAME_S:
                self.problems.append((
                    "a stranger of the burst was not named in rank 0's log within %.0f s" % NAME_S,
                    "%s: %s" % (where, "named %.2f s after it became refusable" % (n[0] - due)
                                if n else "never named")))
            elif STRANGER_KINDS[kind][1] not in n[1]:
                self.problems.append(("a stranger of the burst was named with the wrong reason",
                                      "%s: %s" % (where, n[1])))
        vlog("j: %s -> burst %.3f s, %d strangers named" % (self.case, self.t_burst,
                                                              len(self.named)))

    def cleanup(self):
        for _k, c in self.clients:
            c.close()


# ------------------------------------------------------------------------------------------------
# The job
# ------------------------------------------------------------------------------------------------


class StoreJob:
    def __init__(self, suite, program, rounds):
        self.suite = suite
        self.rng = suite.rng
        self.token = secrets.token_hex(32)
        # Drawn apart from the seed: two suites run with the same seed do not pick the same ports.
        self.ports = store_ports(rounds, random.SystemRandom())
        self.tracker = Tracker()
        ALL_TRACKERS.append(self.tracker)
        self.t0 = time.monotonic()
        env = base_env({"ACCEL_JOB_TOKEN": self.token, "ACCEL_RENDEZVOUS_TIMEOUT": "5",
                        "ACCEL_COLLECTIVE_TIMEOUT": "5", "OMP_NUM_THREADS": "1"})
        self.procs = []
        for r in (0, 1):
            e = dict(env, MASTER_ADDR="127.0.0.1", RANK=str(r), WORLD_SIZE="2",
                     LOCAL_RANK=str(r), LOCAL_WORLD_SIZE="2")
            p = Proc([program] + [str(x) for x in self.ports], e, stdin=True)
            self.procs.append(p)
            self.tracker.add(p.pid, "rank %d (started directly)" % r)
            self.tracker.rank_pids.add(p.pid)
        self.round = -1
        self.r1_span = (0.0, 0.0)
        self.port = None
        self.err_from = 0

    def line(self, rank, pred, timeout):
        p = self.procs[rank]
        got = p.wait_line(lambda l: l.startswith("r%d " % rank) and pred(l[3:]), timeout)
        return got[1][3:] if got else None

    def tell(self, rank):
        try:
            self.procs[rank].p.stdin.write(b"go\n")
            self.procs[rank].p.stdin.flush()
            return True
        except OSError:
            return False

    def named(self, local_port):
        """(time, line) of rank 0's first stderr line this round naming 127.0.0.1:local_port."""
        pat = re.compile(r"127\.0\.0\.1:%d(?!\d)" % local_port)
        p = self.procs[0]
        with p.cond:
            for t, l in p.err[self.err_from:]:
                if pat.search(l):
                    return t, l
        return None

    def round_log(self):
        p = self.procs[0]
        with p.cond:
            lines = [l for _t, l in p.err[self.err_from:]]
        return " | ".join(lines[-6:]) if lines else "none"

    def died(self):
        return ", ".join("rank %d exited %s (%s)" % (r, p.p.poll(), " | ".join(p.err_lines()[-2:]))
                         for r, p in enumerate(self.procs) if p.p.poll() is not None)

    def run_round(self, injections):
        """One round with `injections` at its store; returns (timings, problems of the round)."""
        self.round += 1
        i, self.port = self.round, self.ports[self.round]
        with self.procs[0].cond:
            self.err_from = len(self.procs[0].err)
        deadline = time.monotonic() + ROUND_TIMEOUT
        while not listening(self.port):
            if time.monotonic() > deadline or self.died():
                return None, [("rank 0's store of round %d did not listen within %.0f s" % (
                    i, ROUND_TIMEOUT), self.died() or "nothing on port %d" % self.port)]
            time.sleep(0.003)
        if self.line(1, lambda l: l == "wait %d" % i, ROUND_TIMEOUT) is None:
            return None, [("rank 1 did not reach round %d" % i, self.died())]
        for inj in injections:
            inj.start()
        if not self.tell(1):
            return None, [("rank 1 could not be let go", self.died())]
        for inj in injections:
            inj.fire()
        rounds = []
        for r in (0, 1):
            got = self.line(r, lambda l: l.startswith("round %d " % i), ROUND_TIMEOUT)
            if got is None:
                return None, [("rank %d did not return from round %d within %.0f s" % (
                    r, i, ROUND_TIMEOUT), self.died() or "both ranks still run")]
            f = got.split()
            rounds.append([float(x) for x in f[2:6]] + [float(f[6])])
        # The expectations that may come true while the store lives, then the store's end.
        end = max([inj.deadline() for inj in injections] + [0.0])
        while time.monotonic() < end and not all(inj.settled() for inj in injections):
            for inj in injections:
                inj.poll()
            time.sleep(0.01)
        for inj in injections:
            inj.poll()
        if self.line(0, lambda l: l == "hold %d" % i, ROUND_TIMEOUT) is None or not self.tell(0):
            return None, [("rank 0 did not reach the end of round %d" % i, self.died())]
        t_release = time.monotonic()
        self.r1_span = (rounds[1][0], rounds[1][1])
        for inj in injections:
            inj.finish(t_release)
        (a0, b0, c0, d0, s0), (a1, b1, c1, d1, s1) = rounds
        want = sum(3.0 * (i + 1) + 2 * k for k in range(ELEMS))
        problems = []
        if s0 != want or s1 != want:
            problems.append(("a reduce of round %d gave a wrong sum" % i, "rank 0 %s, rank 1 %s, "
                             "want %s" % (s0, s1, want)))
        # rank 1's rendezvous; rank 0's from rank 1's arrival; each one's reduce and barrier
        return {"init1": b1 - a1, "init0": b0 - a1, "coll0": d0 - b0, "coll1": d1 - b1}, problems

    def finish(self):
        """(problems of the job's end, checksums)."""
        problems = []
        for r, p in enumerate(self.procs):
            try:
                p.p.stdin.close()
            except OSError:
                pass
        codes = [p.wait(10) for p in self.procs]
        for p in self.procs:
            p.drain(5)
        ended = time.monotonic()
        for r, code in enumerate(codes):
            if code is None:
                problems.append(("rank %d did not exit within 10 s of its last round" % r, ""))
            elif code != 0:
                problems.append(("rank %d failed" % r, "code %s: %s" % (
                    code, " | ".join(self.procs[r].err_lines()[-3:]))))
        sums = [self.line(r, lambda l: l.startswith("checksum "), 0) for r in (0, 1)]
        left = self.tracker.wait_gone(max(0.0, ended + 2.0 - time.monotonic()))
        if left:
            problems.append(("a process of the job was left 2 s after it ended", ", ".join(
                "pid %d (%s, state %s)" % x for x in left)))
        self.tracker.kill_all()
        for p in self.procs:
            if p.wait(0) is None:
                p.kill()
        return problems, [s.split()[1] if s else None for s in sums]


# ------------------------------------------------------------------------------------------------
# The group
# ------------------------------------------------------------------------------------------------


def plan(suite):
    """The rounds: lists of injection makers (job -> Injection); [] is an unfaulted round."""
    rng = suite.rng

    def killed(mode):
        before = rng.random() < 0.3
        return lambda job: Killed(job, mode, before)

    def stalled(mode):
        return lambda job: Stalled(job, mode)

    def burst(job):
        return Burst(job)

    if suite.quick:
        faulted = [[killed(m) for m in ("len", "half", "next")],
                   [stalled(m) for m in ("stranger", "len2", "half")],
                   [burst]]
        refs = 1
    else:
        faulted = ([[killed(m)] for m in KILL_MODES] + [[stalled(m)] for m in STALL_MODES]
                   + [[burst] for _ in range(3)]
                   + [[killed(rng.choice(list(KILL_MODES))), stalled(rng.choice(
                       ["len", "half"])), burst]])
        refs = 2
    rng.shuffle(faulted)
    return [[] for _ in range(refs)] + faulted


def run(suite):
    program = os.path.join(os.path.dirname(suite.program), "store_fault_program")
    if not (os.path.isfile(program) and os.access(program, os.X_OK)):
        raise SetupError("group j needs %s (build the target store_fault_program)" % program)
    rounds = plan(suite)
    job = StoreJob(suite, program, len(rounds))
    job_problems = []
    ref = {}
    made = []
    try:
        for makers in rounds:
            injections = [m(job) for m in makers]
            made.extend(injections)
            try:
                timings, round_problems = job.run_round(injections)
            except Exception:
                for inj in injections:
                    inj.cleanup()
                raise
            if timings is None:  # the job is gone: this round's injections and the rest fail
                for inj in injections:
                    suite.tally.record(inj.group, inj.case, inj.problems + round_problems)
                job_problems.extend(round_problems)
                for inj in injections:
                    inj.cleanup()
                break
            if not injections:
                for k, v in timings.items():
                    ref[k] = max(ref.get(k, 0.0), v)
                job_problems.extend(round_problems)
                vlog("j: round %d unfaulted: %s" % (job.round, ", ".join(
                    "%s %.0f ms" % (k, v * 1000) for k, v in sorted(timings.items()))))
                continue
            for k, v in sorted(timings.items()):
                limit = ref.get(k, 0.0) + DELAY_MARGIN
                if v > limit:
                    round_problems.append((
                        {"init1": "rank 1's rendezvous", "init0": "rank 0's rendezvous",
                         "coll0": "rank 0's reduce and barrier",
                         "coll1": "rank 1's reduce and barrier"}[k]
                        + " took longer than its deadline",
                        "round %d: %.0f ms, unfaulted at most %.0f ms, deadline %.0f ms" % (
                            job.round, v * 1000, ref.get(k, 0.0) * 1000, limit * 1000)))
            for inj in injections:
                suite.tally.record(inj.group, inj.case, inj.problems + round_problems)
                inj.cleanup()
            vlog("j: round %d (%s): %s" % (job.round, "; ".join(i.case for i in injections),
                                            ", ".join("%s %.0f ms" % (k, v * 1000)
                                                      for k, v in sorted(timings.items()))))
        end_problems, sums = job.finish()
        job_problems.extend(end_problems)
        want = expected_checksum(len(rounds))
        if job.round == len(rounds) - 1 and sums != [want, want]:
            job_problems.append(("the job did not end with the computed checksum",
                                 "ranks printed %s, want %s" % (sums, want)))
    finally:
        for inj in made:
            inj.cleanup()
        job.tracker.kill_all()
    suite.tally.record(G_JOB, "%d rounds, %d injections: exit 0, checksum, nothing left" % (
        len(rounds), len(made)), job_problems)
    log("j: %d rounds, %d injections, %.1f s" % (len(rounds), len(made),
                                                 time.monotonic() - job.t0))
