"""The injections of fault group j (faults_store.py): misbehaving clients of rank 0's store,
each with its expectations (a client killed mid-request, one stalled mid-message, a burst of
64 clients at once)."""

import os
import re
import struct
import sys
import time

from faultlib import Proc, base_env, vlog
from store_wire import (ANSWER_S, CLIENT_HELLO, HANDSHAKE_S, KILLED_CLIENT, OP_GET, OP_SET, Raw,
                        frame, mac, s_field)

G_KILL = "j. store client killed mid-request"
G_BURST = "j. store: 64 clients at once"
G_STALL = "j. store client stalled mid-message"

CLOSE_MARGIN = 0.5  # a refused stranger is closed within this of becoming refusable
NAME_S = 1.0  # and named in rank 0's log within this
BURST_S = 3.0  # every answer of a burst (a store that hangs costs no more)

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
