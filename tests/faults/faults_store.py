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

The store's wire protocol is in store_wire.py, the injections in store_injections.py; this module
holds the job, the plan of its rounds and the group's run.
"""

import os
import random
import re
import secrets
import struct
import time

from faultlib import ALL_TRACKERS, Proc, SetupError, Tracker, base_env, log, vlog
from store_injections import KILL_MODES, STALL_MODES, Burst, Killed, Stalled
from store_wire import listening, store_ports

G_JOB = "j. store-fault job ends as computed"

# A rank's store work may take this much longer than unfaulted: less than the store's handshake
# deadline (store_wire.HANDSHAKE_S).
DELAY_MARGIN = 0.5
ROUND_TIMEOUT = 8.0  # a round's accel_init (rendezvous timeout 5 s), reduce and barrier
ELEMS = 8


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
