"""Fault group h of the fault-injection suite (fault_suite.py): a stream dataloader killed mid-epoch,
resumed on another number of processes: nothing lost, nothing repeated.

stream_fault_program (its header says what it prints) iterates over a stream of N samples whose
ids are known: the callback stream (accel_dataset_from_stream) or a text file's lines
(accel_dataset_from_text_lines), with dispatch_batches on (the main process reads and sends every
rank its rows) or off (every rank reads the whole stream and takes its slice), gathers each
global batch's ids onto rank 0, which prints them, and saves the state (automatic checkpoint
naming) after every batch. Each case (12, 4 with --quick: both semantics, 1, 2 and 3 processes
each way, split_batches, drop_last, a reading thread, one or two epochs, sizes with and without a
remainder) runs it under `accel launch -n P`, SIGKILLs one rank (drawn) at a drawn batch (in a run
of two epochs, half the time at the first batch of the second), just after the rank asks for it
(in accel_dataloader_next and the gather), in the few milliseconds of work after it, or just
after the rank enters accel_save_state, then resumes the project with `accel launch -n P'`
(P' != P), which loads the newest checkpoint with accel_load_state(NULL). Checked:
  - the killed run's launcher returns within 60 s, with 137, and names the killed rank; no
    process of the job is alive 2 s after (by pid, by parent, by the ranks' process groups); every
    directory under a final checkpoint name is complete per its manifest;
  - the resumed run returns 0 within 60 s on every rank, nothing left 2 s after; it loaded the
    newest checkpoint: its counter of batches k and its cursor (epoch, samples) are those of the
    killed run after its k-th batch;
  - every batch of either run is the one the documented rules give (accel.h,
    accel_dataset_from_stream: global batches of batch_size x P, or batch_size with
    split_batches, read from the cursor on; the last one dropped with drop_last, else completed
    from the epoch's first global batch: without dispatch to a whole global batch, cycling that
    first batch; with dispatch, when P does not divide its rows, with that batch's first P rows,
    one more row per rank; one process takes it short, unpadded);
  - over the killed run's first k batches (those the resumed run's checkpoint holds: rank 0
    prints a batch before it saves it) and the resumed run's batches, every sample of every epoch
    appears exactly once, but for the copies the documented completion of an epoch's last batch
    adds and the samples drop_last documents as dropped: "a sample was lost", "a sample was
    repeated" (more copies than documented), "a sample the documentation drops ... was delivered",
    "an epoch's last batch is not completed as documented" (fewer copies than documented).
When a kill comes after the last batch (the run had ended), the case is drawn again (a note), at
most twice.
"""

import os
import re
import signal
import time

from faultlib import (Launched, SetupError, base_env, checkpoints_in, log, steps_of,
                      verify_checkpoint, vlog)

ID_BASE = 1000000  # a sample's id: epoch * ID_BASE + position
WORK_MS = 4  # a step's work in stream_fault_program: where a kill aimed at a step may land

# (P, P', source, N, batch_size, dispatch, split, drop_last, num_workers, epochs). Sizes with a
# remainder unless noted; P' != P always.
CASES = [
    (2, 1, "callback", 24, 2, 1, 0, 0, 0, 1),  # divisible by every global batch
    (1, 2, "callback", 25, 3, 1, 0, 0, 1, 1),
    (2, 3, "callback", 25, 2, 1, 0, 0, 0, 2),
    (3, 2, "callback", 29, 2, 1, 0, 0, 1, 2),
    (3, 1, "callback", 20, 6, 1, 1, 0, 0, 1),  # split_batches
    (1, 3, "callback", 26, 2, 1, 0, 1, 0, 1),  # drop_last
    (2, 3, "callback", 25, 2, 0, 0, 0, 0, 2),  # IterableDatasetShard
    (3, 2, "callback", 23, 2, 0, 0, 1, 1, 1),
    (2, 1, "text", 23, 3, 1, 0, 0, 0, 2),
    (1, 2, "text", 21, 2, 0, 0, 0, 1, 1),
    (3, 2, "callback", 22, 6, 0, 1, 0, 0, 1),  # IterableDatasetShard, split_batches
    (2, 3, "callback", 27, 2, 1, 0, 1, 1, 2),
]
QUICK = [CASES[2], CASES[7], CASES[8], CASES[9]]


class Cfg:
    def __init__(self, case):
        (self.P, self.P2, self.source, self.N, self.B, self.dispatch, self.split, self.drop,
         self.workers, self.epochs) = case

    def text(self):
        return "%s N=%d batch_size=%d%s%s%s%s, %d epoch%s, %d -> %d processes" % (
            "text lines" if self.source == "text" else "callback stream", self.N, self.B,
            " dispatch" if self.dispatch else " shard", " split_batches" if self.split else "",
            " drop_last" if self.drop else "", " num_workers=%d" % self.workers if self.workers else "",
            self.epochs, "s" if self.epochs > 1 else "", self.P, self.P2)

    def group(self):
        return "h. stream, %s, killed, resumed on %s processes" % (
            "dispatched" if self.dispatch else "sharded", "more" if self.P2 > self.P else "fewer")


# ------------------------------------------------------------------------------------------------
# The documented rules (accel.h, accel_dataset_from_stream), as a model
# ------------------------------------------------------------------------------------------------


def take(cfg, P, chunk, first, last):
    """The global batch (positions, in rank order) made of `chunk`, or [] when it is dropped."""
    G = cfg.B if cfg.split else cfg.B * P
    if cfg.dispatch and P > 1:
        if cfg.drop and len(chunk) < G:
            return []
        rows = list(chunk)
        share = len(rows) // P
        if not cfg.drop and last and len(rows) % P:
            rows += first[:P]
            share += 1
        return rows[:min(len(rows), P * share)]
    if len(chunk) < G:
        if cfg.drop:
            return []
        if P == 1:
            return list(chunk)
        padded = list(chunk)
        while len(padded) < G:
            padded += first
        return padded[:G]
    return list(chunk)


def simulate(cfg, P, epoch, start):
    """[(epoch, positions, cursor after)] from cursor (epoch, start) to the end of the run."""
    G = cfg.B if cfg.split else cfg.B * P
    out = []
    e, s = epoch, start
    while e < cfg.epochs:
        first = list(range(min(G, cfg.N)))
        chunks = []
        begin = s
        while begin < cfg.N:
            chunks.append(list(range(begin, min(cfg.N, begin + G))))
            begin += len(chunks[-1])
        for i, chunk in enumerate(chunks):
            rows = take(cfg, P, chunk, first, i == len(chunks) - 1)
            if not rows:
                break
            out.append((e, rows, (e, chunk[-1] + 1)))
        e, s = e + 1, 0
    return out


# ------------------------------------------------------------------------------------------------
# Runs
# ------------------------------------------------------------------------------------------------


class Run(Launched):
    """`accel launch -n P stream_fault_program ...` with its processes tracked; `trigger`:
    (line, delay_s, rank to kill)."""

    def __init__(self, suite, program, cfg, P, project, data, trigger=None):
        super().__init__()
        self.trigger = trigger
        self.fired = None
        self.proc = self.start_launcher(suite, P, [
            program, project, data, str(cfg.N), str(cfg.B), str(cfg.epochs), str(cfg.dispatch),
            str(cfg.split), str(cfg.drop), str(cfg.workers), str(WORK_MS)], base_env())

    def on_line(self, t, line):
        trig = self.trigger
        if trig and self.fired is None and line == trig[0]:
            target = t + trig[1]
            while time.monotonic() < target:
                pass
            self.fired = time.monotonic()
            pid = self.rank_pid.get(trig[2])
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            self.tracker.scan()

    def end(self, timeout, what):
        """Waits for the launcher; returns (code, problems) with the hang and leftover checks."""
        rc = self.proc.wait(timeout)
        returned = time.monotonic()
        problems = []
        if rc is None:
            problems.append(("the launcher %s did not return within %d s" % (what, timeout),
                             " | ".join(self.proc.err_lines()[-4:])))
        left = self.tracker.wait_gone(max(0.0, returned + 2.0 - time.monotonic()))
        if left:
            problems.append(("processes of the %s left 2 s after the launcher returned" % what,
                             "; ".join("pid %d (%s, state %s)" % x for x in left)))
        self.finish(3)
        return rc, problems

    def batches(self):
        """{k: [(epoch, position)]} of rank 0's "batch k ..." lines."""
        out = {}
        for l in self.lines(0):
            if l.startswith("batch "):
                f = [int(x) for x in l.split()[1:]]
                out[f[0]] = [(v // ID_BASE, v % ID_BASE) for v in f[1:]]
        return out


def names_rank(text, rank):
    return re.search(r"\branks?(?:\(s\))? (?:\d+, )*%d\b" % rank, text) is not None


def show(batch):
    return " ".join("%d:%d" % x for x in batch)


def check_batches(got, expect, first_step, what):
    """Compares rank 0's batches from `first_step` with the model's; returns problems."""
    problems = []
    steps = sorted(got)
    want = list(range(first_step, first_step + len(expect)))
    for k, (e, rows, _cursor) in zip(want, expect):
        mine = got.get(k)
        if mine is None:
            continue  # counted by the caller (missing batches are lost samples)
        if mine != [(e, p) for p in rows]:
            problems.append(("a batch differs from the documented sharding",
                             "%s batch %d: %s; documented: %s" % (
                                 what, k, show(mine), show([(e, p) for p in rows]))))
            break
    extra = [k for k in steps if k not in want]
    if extra:
        problems.append(("batches beyond the documented epochs",
                         "%s batches %s: %s" % (what, extra, show(got[extra[0]]))))
    return problems


def account(cfg, actual, documented):
    """Per epoch and position, the copies delivered against the copies documented."""
    problems = []
    have, want = {}, {}
    for x in actual:
        have[x] = have.get(x, 0) + 1
    for x in documented:
        want[x] = want.get(x, 0) + 1
    lost = sorted(x for x in want if x not in have)
    more = sorted(x for x in have if x in want and have[x] > want[x])
    stray = sorted(x for x in have if x not in want)
    fewer = sorted(x for x in want if 0 < have.get(x, 0) < want[x])
    if lost:
        problems.append(("a sample was lost", "%d samples (epoch:position): %s" % (
            len(lost), " ".join("%d:%d" % x for x in lost[:20]))))
    if more:
        problems.append(("a sample was repeated", "%d samples (epoch:position x delivered/"
                         "documented): %s" % (len(more), " ".join(
                             "%d:%d x%d/%d" % (x + (have[x], want[x])) for x in more[:20]))))
    if stray:
        problems.append(("a sample the documentation drops (or no sample of the epoch) was "
                         "delivered", "%d (epoch:position x delivered): %s" % (len(stray), " ".join(
                             "%d:%d x%d" % (x + (have[x],)) for x in stray[:20]))))
    if fewer:
        problems.append(("an epoch's last batch is not completed as documented",
                         " ".join("%d:%d x%d/%d" % (x + (have[x], want[x])) for x in fewer[:20])))
    return problems


def landed(last):
    """Where the killed rank was, from the last line it printed."""
    word = last.split(" ")[0]
    return {"step": "next+gather", "batch": "the work", "work": "the work",
            "saving": "save_state", "saved": "between steps", "epoch": "between steps",
            "loading": "load_state", "loaded": "between steps"}.get(word, "startup")


def draw_kill(suite, cfg, full):
    """(victim rank, trigger line, delay): a batch k of the killed run and where in it to kill
    its victim: just after it asks for batch k (in accel_dataloader_next and the gather), in the
    work that follows, or just after it enters accel_save_state. Never the last batch; in a run
    of two epochs, half the time the first batch of the second (so that the newest checkpoint
    holds the cursor at the end of the first)."""
    victim = suite.rng.randrange(cfg.P)
    ends = [i for i in range(1, len(full)) if full[i][0] != full[i - 1][0]]
    if ends and suite.rng.random() < 0.5:
        k = ends[0]
    else:
        k = suite.rng.randrange(1, max(2, len(full) - 1))
    phase = suite.rng.choice(["next", "work", "save"])
    if phase == "next":
        return victim, "r%d step %d" % (victim, k), suite.rng.uniform(0, 0.001)
    if phase == "work":
        return victim, "r%d work %d" % (victim, k), suite.rng.uniform(0, WORK_MS / 1000.0)
    return victim, "r%d saving %d" % (victim, k + 1), suite.rng.uniform(0, 0.001)


def one(suite, program, cfg):
    """One case: kill (again, up to 3 times, when a kill came after the last batch), resume,
    check; records one injection."""
    full = simulate(cfg, cfg.P, 0, 0)
    for attempt in range(3):
        project = suite.newdir("h", fast=True)
        data = "callback"
        if cfg.source == "text":
            data = os.path.join(project, "lines.txt")
            with open(data, "w") as f:
                for p in range(cfg.N):
                    f.write("%d %s\n" % (p, "x" * ((p * 7) % 13)))
        victim, line, delay = draw_kill(suite, cfg, full)
        killed = Run(suite, program, cfg, cfg.P, project, data, trigger=(line, delay, victim))
        rc, problems = killed.end(60, "of the killed run")
        last = (killed.lines(victim) or ["(nothing)"])[-1]
        where = landed(last)
        ckpts = checkpoints_in(project)
        late = killed.fired is not None and (rc == 0 or last == "done" or (
            ckpts and max(ckpts) + 1 >= len(full)))
        if late and attempt < 2 and not problems:
            suite.tally.note("h: the kill after %r came after the last batch (%s); drawn again" % (
                line, cfg.text()))
            suite.discard(project)
            continue
        break
    case = "%s; %s: SIGKILL of rank %d %.1f ms after %r, landed in %s (its last line: %r)" % (
        project, cfg.text(), victim, delay * 1000, line, where, last)
    if killed.fired is None:
        problems.append(("the killed run ended before the kill", "code %s: %s" % (
            rc, " | ".join(killed.proc.err_lines()[-4:]))))
    elif rc is not None:
        if rc != 137:
            problems.append(("the killed run's launcher's exit code is not 137 (the killed rank's "
                             "code)", "code %s" % rc))
        named = [l for l in killed.proc.err_lines()
                 if l.startswith("accel launch:") and names_rank(l, victim)]
        if not named:
            problems.append(("the launcher's stderr does not name the killed rank %d" % victim,
                             " | ".join(l for l in killed.proc.err_lines()
                                        if l.startswith("accel launch:")) or "(nothing)"))
    for _n, d in sorted(ckpts.items()):
        why = verify_checkpoint(d)
        if why:
            problems.append(("an incomplete checkpoint under a final name", "%s: %s" % (d, why)))
    try:
        k = steps_of(ckpts[max(ckpts)]) if ckpts else 0
    except (OSError, ValueError) as e:
        problems.append(("the newest checkpoint's counter is unreadable", str(e)))
        k = 0
    before = killed.batches()
    problems += check_batches(before, full, 0, "killed run")
    missing = [s for s in range(k) if s not in before]
    if missing:
        problems.append(("a checkpointed batch of the killed run was not printed",
                         "batches %s of %d" % (missing, k)))
    # The resume, on another number of processes.
    cursor = full[k - 1][2] if k else (0, 0)
    rest = simulate(cfg, cfg.P2, cursor[0], cursor[1])
    resumed = Run(suite, program, cfg, cfg.P2, project, data)
    rc2, more = resumed.end(60, "of the resumed run")
    problems += more
    if rc2 is not None and rc2 != 0:
        problems.append(("the resumed run failed", "code %s: %s" % (
            rc2, " | ".join(resumed.proc.err_lines()[-4:]))))
    for r in range(cfg.P2):
        lines = resumed.lines(r)
        loaded = [l for l in lines if l.startswith("loaded ")]
        want = ["loaded steps=%d epoch=%d samples=%d" % ((k,) + cursor)] if k else []
        if loaded != want:
            problems.append(("the resumed run did not continue at the newest checkpoint",
                             "rank %d: %s; want %s (checkpoint with %d batches)" % (
                                 r, loaded or "no load", want or "no load", k)))
        if rc2 == 0 and "done" not in lines:
            problems.append(("a rank of the resumed run did not finish", "rank %d" % r))
    after = resumed.batches()
    problems += check_batches(after, rest, k, "resumed run")
    # Nothing lost, nothing repeated: every epoch's samples over both runs, against the model.
    actual = [x for s in range(k) for x in before.get(s, [])]
    actual += [x for s in sorted(after) for x in after[s]]
    documented = [(e, p) for e, rows, _c in full[:k] + rest for p in rows]
    problems += account(cfg, actual, documented)
    padding = len(documented) - len(set(documented))
    dropped = cfg.epochs * cfg.N - len(set(documented))
    case += "; resumed at batch %d of %d, cursor %d:%d, %d batches after; documented: %d " \
            "padding, %d dropped" % (k, len(full), cursor[0], cursor[1], len(rest), padding,
                                     dropped)
    vlog("h: %s: %s" % (case, "OK" if not problems else problems))
    suite.tally.record(cfg.group(), case, problems)
    suite.discard(project)


def run(suite):
    program = os.path.join(os.path.dirname(suite.program), "stream_fault_program")
    if not (os.path.isfile(program) and os.access(program, os.X_OK)):
        raise SetupError("%s is not an executable file (build target stream_fault_program)" % program)
    cases = QUICK if suite.quick else CASES
    t = time.monotonic()
    for case in cases:
        one(suite, program, Cfg(case))
    log("h: %d cases in %.1f s" % (len(cases), time.monotonic() - t))
