#!/usr/bin/env python3
"""Fault-injection suite for libaccel: real processes, real signals, real files.

    fault_suite.py --cli build/bin/accel --program build/bin/fault_program [--quick]
                   [--seed N] [--only a,b,...,j] [--tmp DIR] [--keep]

Faults (the docstring of each Suite.fault_<letter> method, and of each faults_*.py module, says
what it checks):
  a  SIGKILL of rank 1 under `accel launch -n 2` during a training step, inside save_state,
     inside load_state and inside a collective; then a fresh run resumes from the newest complete
     checkpoint and ends bitwise equal to an uninterrupted run
  b  the same kill inside a collective with ranks started from the environment alone (no
     launcher), shared-memory all-reduce on and off: rank 0 fails in time naming rank 1 and host
  c  SIGKILL of the launcher itself: no rank may outlive it
  d  SIGSTOP of rank 1 with collective_timeout 3: rank 0 fails naming rank 1, nothing left over
  e  a full disk while saving: RLIMIT_FSIZE, and a real tmpfs where one can be mounted:
     ACCEL_ERR_IO naming the path, previous checkpoint intact
  f  corrupted checkpoints (truncated, flipped, removed, a directory, unreadable, edited JSON,
     another model, another optimizer): all-or-nothing loads with messages naming the file;
     checkpoints of another number of processes (2 -> 1, 1 -> 2) load
  g  (faults_trackers.py) SIGKILL of the main process at every write of each tracker
     (TensorBoard, JSONL, CSV, a custom one), then a resume in the same directory
  h  (faults_stream.py) a stream dataloader killed mid-epoch, resumed on another number of
     processes: nothing lost, nothing repeated
  i  (faults_zero.py) ZeRO stages 1-3: save_state killed at each file of a sharded checkpoint;
     a shard damaged, missing or from another run: the load refuses, names it, changes nothing
  j  (faults_store.py) the rendezvous store: a client killed mid-request, 64 clients at once, a
     client that stalls mid-message: no other rank delayed past its deadline, every failure named

faultlib.py holds what the groups share. Python 3 standard library only. Prints one line per
fault group (injected | observed | lost | leftovers | hangs; lost: any other problem) and
every violation grouped by kind with examples. Exits 0 when every injection was observed as
expected, 1 when any expectation was violated or a fault could not be run, 2 on a usage error.
With --quick about 230 injections in about 1 minute, without about 540 in about 3.5 minutes (2
cores, an idle machine; groups a-f 104 s, g 36 s, h 22 s, i 28 s, j 20 s): every fault kind either
way, fewer repeats and sizes with --quick.
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import faults_store
import faults_stream
import faults_trackers
import faults_zero
import faultlib
from faultlib import (ACCEL_ERR_IO, ACCEL_OK, ALL_TRACKERS, CKPT_RE, Job, Proc, ReplDied,
                      SetupError, Tally, base_env, become_subreaper, checkpoints_in, classify,
                      diff_dirs, list_files, log, proc_stat, report, steps_of, verify_checkpoint,
                      vlog, without_save_ids, write_manifest_entry)


# ------------------------------------------------------------------------------------------------
# The suite
# ------------------------------------------------------------------------------------------------


class Suite:
    def __init__(self, args):
        self.cli = os.path.abspath(args.cli)
        self.program = os.path.abspath(args.program)
        self.quick = args.quick
        self.seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 10**9)
        self.rng = random.Random(self.seed)
        self.tmp = tempfile.mkdtemp(prefix="accel-faults-", dir=args.tmp)
        os.chmod(self.tmp, 0o755)  # the repl of f runs as nobody
        # The corruption cases save three times per case: on tmpfs, fsync costs nothing.
        self.fast_tmp = self.tmp
        if args.tmp is None and os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
            self.fast_tmp = tempfile.mkdtemp(prefix="accel-faults-", dir="/dev/shm")
            os.chmod(self.fast_tmp, 0o755)
        self.keep = args.keep
        self.tally = Tally()
        self.steps = 10
        self.save_every = 2
        self.rounds = 20
        self.grace = 2
        self.hostname = socket.gethostname()
        self.counter = 0
        self.ref_checksum = None
        self.spans = {}  # phase -> seconds rank 1 spent in it, every complete one seen

    def discard(self, d):
        if not self.keep:
            shutil.rmtree(d, ignore_errors=True)

    def newdir(self, tag, fast=False):
        self.counter += 1
        d = os.path.join(self.fast_tmp if fast else self.tmp, "%s-%03d" % (tag, self.counter))
        os.makedirs(d)
        return d

    # --------------------------------------------------------------------------------------------
    # a. SIGKILL of rank 1 under the launcher
    # --------------------------------------------------------------------------------------------

    def reference(self):
        """An uninterrupted run (its checksum and checkpoints), and a resumed one (load timing);
        the phase durations of rank 1 for the kill delays."""
        project = self.newdir("ref")
        job = Job(self, project, self.steps)
        rc = job.launcher.wait(60)
        job.launcher.drain(5)
        if rc != 0:
            job.finish()
            raise SetupError("setup: the uninterrupted reference run failed (code %s):\n%s\n%s" % (
                rc, "\n".join(job.lines()), "\n".join(job.err_lines())))
        sums = set(l.split()[1] for l in job.lines(0) + job.lines(1) if l.startswith("checksum "))
        if len(sums) != 1:
            raise SetupError("setup: the ranks of the reference run disagree: %s" % sums)
        self.ref_checksum = sums.pop()
        self.ref_project = project
        self.ref_ckpts = checkpoints_in(project)
        self.learn(job)
        # A resumed run: from the second checkpoint to the end must give the same parameters.
        project2 = self.newdir("ref-resume")
        self.seed_project(project2, 1)
        job2 = Job(self, project2, self.steps)
        rc = job2.launcher.wait(60)
        job2.launcher.drain(5)
        self.learn(job2)
        sums2 = set(l.split()[1] for l in job2.lines(0) + job2.lines(1) if l.startswith("checksum "))
        if rc != 0 or sums2 != {self.ref_checksum}:
            self.tally.record("a. resume bitwise equal (no kill)", "reference resume", [(
                "resumed run differs from the uninterrupted one",
                "code %s, checksums %s, want %s" % (rc, sums2, self.ref_checksum))])
        else:
            self.tally.record("a. resume bitwise equal (no kill)", "reference resume", [])
        log("reference: checksum %s; rank 1 phase medians (ms): %s" % (
            self.ref_checksum,
            ", ".join("%s %.1f" % (k, self.window(k) * 1000) for k in sorted(self.spans))))

    def learn(self, job):
        """Adds the phase durations of rank 1 in `job` to what the kill delays are drawn from."""
        timed = []
        for p in job.procs:
            with p.cond:
                timed += [(t, l[3:]) for t, l in p.out if l.startswith("r1 ")]
        for phase, spans in phase_durations(timed).items():
            self.spans.setdefault(phase, []).extend(spans)

    def window(self, phase, default=0.002):
        """The delay window for a kill in `phase`: the 25th percentile of its durations, so that
        most kills land inside (kills are classified by where they landed all the same)."""
        v = sorted(self.spans.get(phase, []))
        return max(v[len(v) // 4] if v else default, 0.0005)

    def seed_project(self, project, upto):
        """Copies the reference run's checkpoints 0..upto into `project`."""
        d = os.path.join(project, "checkpoints")
        os.makedirs(d, exist_ok=True)
        for n in range(upto + 1):
            shutil.copytree(self.ref_ckpts[n], os.path.join(d, "checkpoint_%d" % n))

    def fault_a(self):
        """SIGKILL of rank 1 under `accel launch -n 2`, aimed at a training step, a save_state, a
        load_state and the collective rounds (13 landed in each, 3 with --quick; each kill is
        counted where rank 1's last line shows it landed). Each run starts from a copy of some of
        the reference run's checkpoints. After each kill: the launcher exits 137 and names rank 1
        on stderr; every process of the job (printed pids, the launcher's children, the ranks'
        process groups) is gone within 2 s of the launcher's return; every directory under a
        final checkpoint name is complete per its manifest. After a kill in a save or a training
        step (--quick: the first training one only) a fresh run resumes from the newest complete
        checkpoint (the step it reports is the one stored there), finishes, and ends with the
        uninterrupted run's parameter checksum on both ranks."""
        group = "a. SIGKILL rank 1 (launcher)"
        target = 3 if self.quick else 13
        phases = ["train", "save", "load", "collective"]
        landed = {p: 0 for p in phases}
        attempts = {p: 0 for p in phases}
        n_ckpt = len(self.ref_ckpts)
        while True:
            wanted = [p for p in phases if landed[p] < target and attempts[p] < 3 * target]
            if not wanted:
                break
            low = min(landed[p] for p in wanted)
            phase = self.rng.choice([p for p in wanted if landed[p] == low])
            attempts[phase] += 1
            # Where the run starts: a copy of the first `seeded` reference checkpoints.
            if phase == "load":
                seeded = self.rng.randrange(0, n_ckpt - 1)
            else:
                seeded = self.rng.randrange(-1, n_ckpt - 2)
            start = (seeded + 1) * self.save_every
            if phase == "train":
                line = "r1 step %d" % self.rng.randrange(start, self.steps)
            elif phase == "collective":
                line = "r1 collective %d" % self.rng.randrange(start + 1, self.steps + 1)
            elif phase == "save":
                saves = list(range(start + self.save_every, self.steps + 1, self.save_every))
                line = "r1 saving %d" % self.rng.choice(saves)
            else:
                line = "r1 loading"
            delay = self.rng.uniform(0, self.window(phase))
            project = self.newdir("a-" + phase)
            if seeded >= 0:
                self.seed_project(project, seeded)
            job = Job(self, project, self.steps,
                      trigger=(line, delay, lambda j: j.kill_rank(1)))
            rc = job.launcher.wait(60)
            finished = time.monotonic()
            self.learn(job)
            if job.fired is None:
                job.finish()
                self.tally.note("a: trigger %r never came (code %s); attempt not counted" % (line, rc))
                continue
            problems = []
            if rc is None:
                problems.append(("launcher did not return within 60 s", ""))
            left = job.tracker.wait_gone(max(0.0, finished + 2.0 - time.monotonic()))
            if left:
                problems.append(("processes left 2 s after the launcher returned",
                                 "; ".join("pid %d (%s, state %s)" % x for x in left)))
            job.launcher.drain(3)
            actual = classify(job.lines(1))
            case = "%s: kill %.1f ms after %r, landed in %s" % (project, delay * 1000, line, actual)
            if rc is not None and rc != 137:
                problems.append(("launcher exit code is not 137", "code %s" % rc))
            named = [l for l in job.launcher.err_lines()
                     if l.startswith("accel launch:") and names_rank1(l)]
            if not named:
                problems.append(("launcher stderr does not name rank 1",
                                 " | ".join(l for l in job.launcher.err_lines()
                                            if l.startswith("accel launch:")) or "(nothing)"))
            problems += self.check_checkpoints(project)
            job.finish()
            landed[actual] = landed.get(actual, 0) + 1
            vlog("a: " + case + (" OK" if not problems else " PROBLEMS %s" % problems))
            self.tally.record("%s / %s" % (group, actual), case, problems)
            # After a kill in a save or a training step: resume from the newest complete
            # checkpoint, finish, and end with the uninterrupted run's parameters.
            # (--quick: after every save kill, and after the first train kill only.)
            if not problems and (actual == "save" or (actual == "train" and not (
                    self.quick and self.tally.injected.get(
                        "a. resume after a kill in train (bitwise)", 0) >= 1))):
                self.resume_after(project, actual, case)
            self.discard(project)
        # Kills are counted where they landed; a phase short of its target is a note, too few in
        # all (or next to none in a phase) a violation.
        total = sum(landed.get(p, 0) for p in phases)
        for p in phases:
            if landed.get(p, 0) < target:
                self.tally.note("a: %d of %d kills landed in %s after %d attempts aimed at it" % (
                    landed.get(p, 0), target, p, attempts[p]))
            if landed.get(p, 0) < max(1, target // 3):
                self.tally.violations.append((
                    "%s / %s" % (group, p), "-", "too few kills landed in this phase",
                    "%d of %d after %d attempts" % (landed.get(p, 0), target, attempts[p])))
        if total < 4 * target:
            self.tally.violations.append((group, "-", "too few kills in all",
                                          "%d of %d" % (total, 4 * target)))

    def check_checkpoints(self, project):
        """Every directory under a final checkpoint name must be complete."""
        problems = []
        for n, d in sorted(checkpoints_in(project).items()):
            why = verify_checkpoint(d)
            if why:
                problems.append(("an incomplete checkpoint under a final name", "%s: %s" % (d, why)))
        return problems

    def resume_after(self, project, phase, killed_case):
        group = "a. resume after a kill in %s (bitwise)" % phase
        ckpts = checkpoints_in(project)
        expect = steps_of(ckpts[max(ckpts)]) if ckpts else None
        partials = [n for n in os.listdir(os.path.join(project, "checkpoints"))
                    if not CKPT_RE.match(n)] if os.path.isdir(os.path.join(project, "checkpoints")) else []
        job = Job(self, project, self.steps)
        rc = job.launcher.wait(60)
        job.launcher.drain(5)
        problems = []
        if rc != 0:
            problems.append(("resumed run failed", "code %s: %s" % (
                rc, " | ".join(job.err_lines()[-4:]))))
        for r in (0, 1):
            lines = job.lines(r)
            loaded = [l for l in lines if l.startswith("loaded step=")]
            if expect is None:
                if loaded:
                    problems.append(("loaded although no complete checkpoint exists", loaded[0]))
            elif loaded != ["loaded step=%d" % expect]:
                problems.append(("did not resume from the newest complete checkpoint",
                                 "rank %d: %s; newest complete holds step %d; other entries: %s"
                                 % (r, loaded or "no load", expect, partials)))
            sums = [l.split()[1] for l in lines if l.startswith("checksum ")]
            if rc == 0 and sums != [self.ref_checksum]:
                problems.append(("parameters differ from the uninterrupted run",
                                 "rank %d: %s, want %s" % (r, sums, self.ref_checksum)))
        left = job.tracker.wait_gone(2.0)
        if left:
            problems.append(("processes left", str(left)))
        job.finish()
        self.tally.record(group, killed_case + "; resumed from step %s" % expect, problems)

    # --------------------------------------------------------------------------------------------
    # b. kill inside a collective without the launcher
    # --------------------------------------------------------------------------------------------

    def fault_b(self):
        """Ranks started from the environment alone (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE,
        LOCAL_RANK, LOCAL_WORLD_SIZE; rank 0 hosts the store), collective_timeout 5, shared-memory
        all-reduce on and off; SIGKILL of rank 1 inside the collectives. Rank 0 must exit non-zero
        within collective_timeout + 2 s with an error that names rank 1 and this host."""
        count = 1 if self.quick else 3
        timeout = 5.0
        # Shared memory on: rank 1 dies at the start of a training step (rank 0 then waits in the
        # gradient all-reduce, over shared memory) or inside reduce-only rounds. Off: inside
        # all-reduce and gather rounds, all over Gloo.
        for shm in ("true", "false"):
            group = "b. SIGKILL rank 1, no launcher, shared memory %s" % ("on" if shm == "true" else "off")
            done = tries = 0
            while done < count and tries < 4 * count:
                tries += 1
                n = self.rng.randrange(1, 4)
                if shm == "false":
                    kind, rounds = "mixed", 20
                    line, delay = "r1 collective %d" % n, self.rng.uniform(0, self.window("collective"))
                elif done % 2 == 0:
                    kind, rounds = "reduce", 200
                    line, delay = "r1 step %d" % n, self.rng.uniform(0, 0.0005)
                else:
                    kind, rounds = "reduce", 200
                    line, delay = "r1 collective %d" % n, self.rng.uniform(0, 0.005)
                project = self.newdir("b")
                job = Job(self, project, 200, launcher=False, rounds=rounds, kind=kind,
                          extra_env={"ACCEL_COLLECTIVE_TIMEOUT": "%g" % timeout,
                                     "ACCEL_SHARED_MEMORY_ALLREDUCE": shm},
                          trigger=(line, delay, lambda j: j.kill_rank(1)))
                r0, r1 = job.procs
                if not job.fired_event.wait(30):
                    job.finish()
                    self.tally.note("b: trigger %r never came; attempt not counted" % line)
                    continue
                r1.wait(5)
                rc0 = r0.wait(timeout + 10)
                elapsed = time.monotonic() - job.fired
                r0.drain(2)
                actual = classify(job.lines(1))
                case = "shm %s, %s rounds: kill %.1f ms after %r, landed in %s" % (
                    shm, kind, delay * 1000, line, actual)
                if actual not in ("collective", "train"):
                    job.finish()
                    vlog("b: missed the collectives (%s); again" % actual)
                    continue
                problems = []
                if rc0 is None:
                    problems.append(("rank 0 did not exit", "still running %.0f s after the kill" % elapsed))
                else:
                    if rc0 < 0:
                        problems.append(("rank 0 was killed by a signal instead of failing with an "
                                         "error", signal_name(-rc0)))
                    if rc0 == 0:
                        problems.append(("rank 0 exited with code 0", ""))
                    if elapsed > timeout + 2.0:
                        problems.append(("rank 0 took longer than collective_timeout + 2 s",
                                         "%.2f s" % elapsed))
                errors = [l for l in r0.err_lines() if l.startswith("r0 error ")]
                msg = errors[0] if errors else ""
                if not errors:
                    problems.append(("rank 0 printed no error", " | ".join(r0.err_lines()[-3:])))
                else:
                    text = msg.split(":", 1)[-1]
                    if not names_rank1(text):
                        problems.append(("rank 0's message does not name rank 1", msg))
                    if not names_host(text, self.hostname):
                        problems.append(("rank 0's message does not name the host %r" % self.hostname, msg))
                left = job.tracker.wait_gone(2.0)
                if left:
                    problems.append(("processes left", str(left)))
                job.finish()
                self.discard(project)
                vlog("b: %s -> %.2f s; %s" % (case, elapsed, msg))
                self.tally.record(group, "%s; rank 0 %s after %.2f s: %s" % (
                    case, "was killed by %s" % signal_name(-rc0) if rc0 is not None and rc0 < 0
                    else "exited with code %s" % rc0, elapsed, msg), problems)
                done += 1

    # --------------------------------------------------------------------------------------------
    # c. SIGKILL of the launcher
    # --------------------------------------------------------------------------------------------

    def fault_c(self):
        """SIGKILL of `accel launch` mid-training: 2 s later no rank may be alive (by pid, by the
        ranks' process groups, by the launcher's children recorded while it ran)."""
        group = "c. SIGKILL of the launcher"
        for _ in range(1 if self.quick else 3):
            n = self.rng.randrange(2, 6)
            delay = self.rng.uniform(0, 0.03)
            project = self.newdir("c")
            job = Job(self, project, 100000, rounds=20,
                      trigger=("r1 step %d" % n, delay, lambda j: j.tracker.scan() or
                               os.kill(j.launcher.pid, signal.SIGKILL)))
            if not job.fired_event.wait(30):
                job.finish()
                self.tally.note("c: the ranks never reached step %d" % n)
                continue
            job.launcher.wait(5)
            time.sleep(2.0)
            problems = []
            alive = job.tracker.alive()
            # Also by process group and by parent, scanned afresh.
            job.tracker.scan()
            alive = job.tracker.alive()
            if alive:
                problems.append(("ranks alive 2 s after the launcher was killed",
                                 "; ".join("pid %d (%s, state %s)" % x for x in alive)))
            job.finish()
            self.discard(project)
            case = "%s: launcher killed %.1f ms after rank 1's step %d" % (project, delay * 1000, n)
            vlog("c: %s: %s" % (case, "OK" if not problems else problems))
            self.tally.record(group, case, problems)

    # --------------------------------------------------------------------------------------------
    # d. SIGSTOP of rank 1
    # --------------------------------------------------------------------------------------------

    def fault_d(self):
        """SIGSTOP of rank 1 (at the start of a step: rank 0 waits in the gradient all-reduce; or
        inside gather rounds) with collective_timeout 3: rank 0 exits within 3 + 2 s with an
        error naming rank 1, the launcher returns non-zero, and nothing is left 2 s later (the
        stopped rank included)."""
        group = "d. SIGSTOP rank 1 (collective_timeout 3)"
        timeout = 3.0
        for i in range(1 if self.quick else 3):
            n = self.rng.randrange(2, 6)
            if i % 2 == 0:
                # Stopped at the start of a step: rank 0 waits in the gradient all-reduce
                # (shared memory).
                line, delay, kind = "r1 step %d" % n, self.rng.uniform(0, 0.0003), "mixed"
            else:
                # Stopped inside gather rounds: rank 0 waits in a Gloo all-gather.
                line, delay, kind = "r1 collective %d" % n, self.rng.uniform(0, 0.01), "gather"
            project = self.newdir("d")
            job = Job(self, project, 100000, rounds=20, kind=kind,
                      extra_env={"ACCEL_COLLECTIVE_TIMEOUT": "3"},
                      trigger=(line, delay, lambda j: j.kill_rank(1, signal.SIGSTOP)))
            if not job.fired_event.wait(30):
                job.finish()
                self.tally.note("d: the ranks never reached step %d" % n)
                continue
            problems = []
            pid0 = job.rank_pid[0]
            start0 = job.tracker.procs.get(pid0, (None,))[0]
            gone_at = None
            deadline = job.fired + timeout + 10
            while time.monotonic() < deadline:
                st = proc_stat(pid0)
                if not st or st[3] != start0 or st[0] in "ZX":
                    gone_at = time.monotonic()
                    break
                time.sleep(0.01)
            if gone_at is None:
                problems.append(("rank 0 still runs", "%.0f s after rank 1 stopped" % (timeout + 10)))
            elif gone_at - job.fired > timeout + 2.0:
                problems.append(("rank 0 took longer than collective_timeout + 2 s",
                                 "%.2f s" % (gone_at - job.fired)))
            rc = job.launcher.wait(timeout + self.grace + 10)
            finished = time.monotonic()
            if rc is None:
                problems.append(("the launcher did not return", ""))
            elif rc == 0:
                problems.append(("the launcher returned 0", ""))
            left = job.tracker.wait_gone(max(0.0, finished + 2.0 - time.monotonic()))
            if left:
                problems.append(("processes left 2 s after the launcher returned",
                                 "; ".join("pid %d (%s, state %s)" % x for x in left)))
            job.launcher.drain(3)
            errors = [l for l in job.err_lines() if l.startswith("r0 error ")]
            msg = errors[0] if errors else ""
            if not errors:
                problems.append(("rank 0 printed no error", ""))
            elif not names_rank1(msg.split(":", 1)[-1]):
                problems.append(("rank 0's message does not name rank 1", msg))
            job.finish()
            self.discard(project)
            case = "%s: stopped %.1f ms after %r; rank 0 %s; launcher %s; %s" % (
                project, delay * 1000, line,
                "exited after %.2f s" % (gone_at - job.fired) if gone_at else "hung", rc, msg)
            vlog("d: %s: %s" % (case, "OK" if not problems else problems))
            self.tally.record(group, case, problems)

    # --------------------------------------------------------------------------------------------
    # e, f: through the repl
    # --------------------------------------------------------------------------------------------

    def repl(self, as_nobody):
        pre = None
        argv = [self.program, "repl"]
        if as_nobody:
            argv = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"] + argv
        return Repl(Proc(argv, base_env({"OMP_NUM_THREADS": "1"}), stdin=True, preexec=pre))

    def fault_e(self):
        """A repl process with automatic checkpoint naming saves checkpoint_0, trains on, then
        saves with RLIMIT_FSIZE lowered (SIGXFSZ ignored, so writes fail with EFBIG) to limits
        below the size of the checkpoint's files: each save_state(NULL) must fail with
        ACCEL_ERR_IO naming the checkpoint's path, leave no directory under a checkpoint_<n>
        name but checkpoint_0, and leave checkpoint_0 byte for byte intact. A fresh process's
        load_state(NULL) then save must reproduce checkpoint_0 exactly; with the limit lifted
        the first process saves again."""
        group = "e. RLIMIT_FSIZE during save_state"
        base = self.newdir("e")
        os.chmod(base, 0o777)
        project = os.path.join(base, "project")
        rep = self.repl(False)
        try:
            for c in ("build mlp16 adam %s" % project, "train 2", "save -", "train 2"):
                r = rep.cmd(c)
                if r[0] != ACCEL_OK:
                    raise SetupError("setup of e failed: %s -> %s" % (c, r))
            first = checkpoints_in(project)
            if sorted(first) != [0]:
                raise SetupError("setup of e: expected checkpoint_0, found %s" % first)
            good = os.path.join(base, "checkpoint_0.copy")
            shutil.copytree(first[0], good)
            sizes = sorted(len(v) for v in list_files(good).values())
            biggest = sizes[-1]
            limits = {0, 1, biggest - 1, biggest // 2} | set(s - 1 for s in sizes if s > 1)
            while len(limits) < (6 if self.quick else 24):
                limits.add(self.rng.randrange(0, biggest))
            limits = sorted(limits)
            if self.quick:
                limits = sorted(self.rng.sample(limits, 6))
            want_path = os.path.join(project, "checkpoints", "checkpoint_1")
            for limit in limits:
                problems = []
                rep.cmd("fsize %d" % limit)
                st, msg = rep.cmd("save -")
                rep.cmd("fsize unlimited")
                if st != ACCEL_ERR_IO:
                    problems.append(("save_state did not fail with ACCEL_ERR_IO",
                                     "status %s: %s" % (st, msg)))
                elif want_path not in msg:
                    problems.append(("the message does not name the checkpoint path", msg))
                now = checkpoints_in(project)
                if sorted(now) != [0]:
                    problems.append(("a directory load_state(NULL) would pick",
                                     "checkpoints: %s" % sorted(now)))
                d = diff_dirs(good, first[0])
                if d:
                    problems.append(("the previous checkpoint changed", d))
                others = sorted(set(os.listdir(os.path.join(project, "checkpoints"))) - {"checkpoint_0"})
                self.tally.record(group, "limit %d bytes: %s %s%s" % (
                    limit, st, msg[:160], "; left: %s" % others if others else ""), problems)
            # A fresh process resumes from the previous checkpoint exactly.
            fresh = self.repl(False)
            try:
                problems = []
                after = os.path.join(base, "after-load")
                for c in ("build mlp16 adam %s" % project, "load -", "save %s" % after):
                    r = fresh.cmd(c)
                    if r[0] != ACCEL_OK:
                        problems.append(("fresh load of the previous checkpoint failed", "%s: %s" % (c, r)))
                        break
                else:
                    d = diff_dirs(good, after)
                    if d:
                        problems.append(("a fresh load is not the previous checkpoint", d))
                self.tally.record("e. previous checkpoint loadable after the failures",
                                  "fresh load_state(NULL) then save", problems)
            finally:
                fresh.close()
            # With the limit lifted, saving works again.
            st, msg = rep.cmd("save -")
            now = checkpoints_in(project)
            problems = []
            if st != ACCEL_OK or 1 not in now or verify_checkpoint(now[1]):
                problems.append(("save after the disk frees up failed", "%s %s %s" % (st, msg, sorted(now))))
            self.tally.record("e. previous checkpoint loadable after the failures",
                              "save_state after the limit is lifted", problems)
        finally:
            rep.close()
        self.fault_e_full_filesystem()

    def fault_e_full_filesystem(self):
        """A real full disk where one can be made (root may mount a tmpfs): checkpoint_0 fits,
        then the filesystem is remounted at sizes too small for a second checkpoint beside it.
        Each save_state(NULL) must fail with ACCEL_ERR_IO naming the checkpoint's path (ENOSPC),
        leave nothing load_state(NULL) would pick, and leave checkpoint_0 intact."""
        group = "e. full tmpfs during save_state"
        mnt = self.newdir("e-tmpfs")
        page = 4096
        if os.geteuid() != 0 or subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", mnt],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0:
            self.tally.note("e: no tmpfs could be mounted here (not root, or no mount "
                            "permission): the full disk is simulated with RLIMIT_FSIZE only")
            return
        rep = None
        try:
            project = os.path.join(mnt, "project")
            rep = self.repl(False)
            for c in ("build mlp16 adam %s" % project, "train 2", "save -", "train 2"):
                r = rep.cmd(c)
                if r[0] != ACCEL_OK:
                    raise SetupError("setup of e (tmpfs) failed: %s -> %s" % (c, r))
            first = checkpoints_in(project)
            good = os.path.join(self.newdir("e-tmpfs-copy"), "checkpoint_0")
            shutil.copytree(first[0], good)
            used = sum((len(v) + page - 1) // page * page for v in list_files(good).values())
            sizes = {used + page, used + used // 2, 2 * used - page}
            while len(sizes) < (3 if self.quick else 8):
                sizes.add(self.rng.randrange(used + page, 2 * used - page) // page * page)
            want_path = os.path.join(project, "checkpoints", "checkpoint_1")
            for size in sorted(sizes):
                problems = []
                r = subprocess.run(["mount", "-o", "remount,size=%d" % size, mnt],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                if r.returncode != 0:
                    raise SetupError("remounting the tmpfs failed: %s" % r.stderr.decode())
                st, msg = rep.cmd("save -")
                if st != ACCEL_ERR_IO:
                    problems.append(("save_state on a full disk did not fail with ACCEL_ERR_IO",
                                     "status %s: %s" % (st, msg)))
                elif want_path not in msg:
                    problems.append(("the message does not name the checkpoint path", msg))
                now = checkpoints_in(project)
                if sorted(now) != [0]:
                    problems.append(("a directory load_state(NULL) would pick",
                                     "checkpoints: %s" % sorted(now)))
                d = diff_dirs(good, first[0])
                if d:
                    problems.append(("the previous checkpoint changed", d))
                vlog("e: tmpfs of %d bytes: %s %s" % (size, st, msg[:200]))
                self.tally.record(group, "tmpfs of %d bytes (checkpoint %d): %s %s" % (
                    size, used, st, msg[:160]), problems)
            subprocess.run(["mount", "-o", "remount,size=4m", mnt])
            problems = []
            fresh = self.repl(False)
            try:
                after = os.path.join(self.newdir("e-tmpfs-after"), "after")
                for c in ("build mlp16 adam %s" % project, "load -", "save %s" % after):
                    r = fresh.cmd(c)
                    if r[0] != ACCEL_OK:
                        problems.append(("fresh load after the full disk failed", "%s: %s" % (c, r)))
                        break
                else:
                    d = diff_dirs(good, after)
                    if d:
                        problems.append(("a fresh load is not the previous checkpoint", d))
            finally:
                fresh.close()
            self.tally.record("e. previous checkpoint loadable after the failures",
                              "fresh load_state(NULL) after the full tmpfs", problems)
        finally:
            if rep:
                rep.close()
            subprocess.run(["umount", "-l", mnt], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)

    def fault_f(self):
        """Corrupted checkpoints, loaded by a repl process (as user nobody when we are root, so
        that unreadable files are unreadable). G is a checkpoint of state S_G; the live state is
        S_B (trained further). For every case, a fresh copy of G (or of a checkpoint of another
        model or optimizer) is damaged, the live state saved (it must be S_B), the copy loaded,
        the live state saved again: a load that succeeds must give exactly S_G (its save equals
        G's files byte for byte); a load that fails must name the damaged file (its base name)
        and leave the live state byte for byte as it was."""
        nobody = ids_of("nobody", "nogroup") if shutil.which("setpriv") else None
        as_nobody = os.geteuid() == 0 and nobody is not None
        unreadable_ok = os.geteuid() != 0 or as_nobody
        if not unreadable_ok:
            self.tally.note("f: running as root without setpriv/nobody/nogroup: the "
                            "'unreadable' cases are skipped (root reads any file)")
        base = self.newdir("f", fast=True)
        if as_nobody:
            os.chown(base, *nobody)
        self.f_uid = nobody if as_nobody else None
        self.f_rep = self.repl(as_nobody)
        try:
            self._fault_f(base, unreadable_ok)
        finally:
            self.f_rep.close()

    def own(self, path):
        if self.f_uid:
            for root, dirs, files in os.walk(path):
                os.chown(root, *self.f_uid)
                for n in files:
                    os.chown(os.path.join(root, n), *self.f_uid)

    def _fault_f(self, base, unreadable_ok):
        P = lambda name: os.path.join(base, name)  # noqa: E731

        def must(c):
            r = self.f_rep.cmd(c)
            if r[0] != ACCEL_OK:
                raise SetupError("setup of f failed: %s -> %s" % (c, r))

        for c in ("build mlp32 adam", "train 3", "save %s" % P("M32"),
                  "build mlp16 sgd", "train 3", "save %s" % P("SGD16"),
                  "build mlp16 adam", "train 3", "save %s" % P("G"), "train 3",
                  "save %s" % P("B1"), "save %s" % P("B2")):
            must(c)
        G, B1 = P("G"), P("B1")
        if diff_dirs(B1, P("B2")):
            raise SetupError("setup of f: two saves of one state differ: %s" % diff_dirs(B1, P("B2")))
        if not diff_dirs(G, B1):
            raise SetupError("setup of f: S_G and S_B are the same state")
        must("load %s" % G)
        must("save %s" % P("G2"))
        if diff_dirs(G, P("G2")):
            raise SetupError("setup of f: load G then save differs from G: %s" % diff_dirs(G, P("G2")))
        must("load %s" % B1)
        files = sorted(os.listdir(G))
        cases = []  # (group, label, damaged base names, damage function(dir), source dir)

        def add(kind, fname, label, fn, names=None, source=None):
            cases.append(("f. %s" % kind, "%s: %s" % (fname, label), names or [fname], fn,
                          source or G))

        for fname in files:
            size = os.path.getsize(os.path.join(G, fname))
            lengths = {0, 1, size // 2, size - 1} if size > 1 else {0}
            pool = list(range(2, size - 1))
            self.rng.shuffle(pool)
            lengths |= set(pool[:1 if self.quick else 6])
            for n in sorted(x for x in lengths if 0 <= x < size):
                add("truncated", fname, "to %d of %d bytes" % (n, size), truncate_fn(fname, n))
            for _ in range(2 if self.quick else 8):
                off = self.rng.randrange(size)
                mask = self.rng.randrange(1, 256)
                add("byte flipped", fname, "byte %d ^ 0x%02x" % (off, mask), flip_fn(fname, off, mask))
            add("removed", fname, "removed", remove_fn(fname))
            add("replaced by a directory", fname, "a directory", dir_fn(fname))
            if unreadable_ok:
                add("unreadable", fname, "mode 000", unreadable_fn(fname))
        # manifest.json edits: a field removed.
        with open(os.path.join(G, "manifest.json")) as f:
            manifest = json.load(f)
        for key in manifest:
            add("manifest field removed", "manifest.json", "no %r" % key, manifest_drop_fn([key]))
        for i, entry in enumerate(manifest["files"]):
            add("manifest field removed", "manifest.json", "no files[%d] (%s)" % (i, entry["path"]),
                manifest_drop_fn(["files", i]))
            for key in ("path", "size", "crc32"):
                add("manifest field removed", "manifest.json", "no files[%d].%s" % (i, key),
                    manifest_drop_fn(["files", i, key]))
        # JSON files with a field removed and the manifest updated to match.
        for fname in files:
            if not fname.endswith(".json") or fname == "manifest.json":
                continue
            with open(os.path.join(G, fname)) as f:
                doc = json.load(f)
            for path in json_paths(doc):
                add("field removed, manifest updated", fname, "no %s" % "/".join(map(str, path)),
                    json_drop_fn(fname, path))
        # Other contents under a consistent manifest.
        add("content replaced, manifest updated", "custom_0.bin", "'garbage'",
            replace_fn("custom_0.bin", lambda b: b"garbage"))
        add("content replaced, manifest updated", "config.yaml", "first line removed",
            replace_fn("config.yaml", lambda b: b.split(b"\n", 1)[1]))
        for fname in files:
            if fname.endswith(".safetensors"):
                with open(os.path.join(G, fname), "rb") as f:
                    names = tensor_names(f.read())
                for name in names:
                    add("content replaced, manifest updated", fname,
                        "tensor %r renamed in the header" % name,
                        replace_fn(fname, rename_tensor(name)))
        # Checkpoints of another model and of another optimizer.
        add("another model", "model_0.safetensors", "mlp32 loaded into mlp16", None,
            names=["model_0.safetensors", "optimizer_0.safetensors"], source=P("M32"))
        add("another optimizer", "optimizer_0.json", "sgd loaded into adam", None,
            names=["optimizer_0.json", "optimizer_0.safetensors"], source=P("SGD16"))

        log("f: %d corruption cases" % len(cases))
        state_is_b = True
        for i, (group, label, names, damage, source) in enumerate(cases):
            problems = []
            outcome = "?"
            d, before, after = P("case%d" % i), P("before%d" % i), P("after%d" % i)
            if not state_is_b:
                if self.f_rep.proc.wait(0) is not None:
                    # The process died on the previous case: a new one, back at S_B.
                    self.f_rep = self.repl(self.f_uid is not None)
                    must("build mlp16 adam")
                must("load %s" % B1)
                state_is_b = True
            shutil.copytree(source, d)
            self.own(d)
            if damage:
                damage(d)
            try:
                st, msg = self.f_rep.cmd("save %s" % before)
                if st != ACCEL_OK:
                    problems.append(("save before the load failed", msg))
                elif diff_dirs(B1, before):
                    problems.append(("the live state was not S_B before the load", diff_dirs(B1, before)))
                lst, lmsg = self.f_rep.cmd("load %s" % d)
                st, msg = self.f_rep.cmd("save %s" % after)
            except ReplDied as e:
                state_is_b = False
                self.f_rep.proc.kill()
                problems.append(("the process died or hung", str(e)))
                self.tally.record(group, "%s -> died" % label, problems)
                continue
            if st != ACCEL_OK:
                problems.append(("save after the load failed", msg))
                state_is_b = False
            elif lst == ACCEL_OK:
                dd = diff_dirs(G, after)
                state_is_b = False
                if dd:
                    problems.append(("load succeeded but the state is not S_G", dd))
                outcome = "loaded, state S_G" if not dd else "loaded, state differs"
            else:
                dd = diff_dirs(before, after)
                if dd:
                    state_is_b = False
                    problems.append(("a failed load changed the live state", "%s; load said %s %s" % (
                        dd, lst, lmsg)))
                if not any(n in lmsg for n in names):
                    problems.append(("the message does not name the damaged file (%s)" % "/".join(names),
                                     "%s %s" % (lst, lmsg)))
                outcome = "refused %s: %s" % (lst, lmsg[:200])
            if not self.keep:
                for x in (d, before, after):
                    shutil.rmtree(x, ignore_errors=True)
            vlog("f: %s | %s -> %s" % (group, label, outcome))
            self.tally.record(group, "%s -> %s" % (label, outcome), problems)
        self._fault_f_process_counts(base, G, must)

    def _fault_f_process_counts(self, base, G, must):
        """Checkpoints of another number of processes are not damage: each must load. A
        checkpoint saved by `accel launch -n 2` loads into the one-process repl, whose next save
        equals it file for file (the files that do not depend on the process count); the repl's
        one-process checkpoint G resumes a two-process run on both ranks."""
        group = "f. another number of processes"
        P = lambda name: os.path.join(base, name)  # noqa: E731
        # 2 -> 1: a short two-process run of the repl's model and optimizer.
        project = self.newdir("f-2to1")
        job = Job(self, project, 3, rounds=1, model="mlp16")
        rc = job.launcher.wait(60)
        job.launcher.drain(5)
        job.finish()
        problems = []
        saved = checkpoints_in(project)
        if rc != 0 or not saved:
            problems.append(("the two-process run that saves failed", "code %s: %s" % (
                rc, " | ".join(job.err_lines()[-3:]))))
        else:
            two = P("two_procs")
            shutil.copytree(saved[max(saved)], two)
            self.own(two)
            must("build mlp16 adam")
            st, msg = self.f_rep.cmd("load %s" % two)
            if st != ACCEL_OK:
                problems.append(("a two-process checkpoint did not load in one process", msg))
            else:
                must("save %s" % P("two_procs_resaved"))
                same = ["model_0.safetensors", "optimizer_0.safetensors", "optimizer_0.json",
                        "scheduler_0.json", "training_state.json", "custom_0.bin",
                        "random_states_0.safetensors"]
                for name in same:
                    with open(os.path.join(two, name), "rb") as a, \
                            open(P("two_procs_resaved/" + name), "rb") as b:
                        # The random states' metadata says which save and rank: they differ.
                        if without_save_ids(name, a.read()) != without_save_ids(name, b.read()):
                            problems.append(("loaded from two processes, %s differs" % name, two))
        self.tally.record(group, "saved by 2 processes, loaded by 1", problems)
        # 1 -> 2: G (the repl's, one process) resumes a two-process run.
        problems = []
        project = self.newdir("f-1to2")
        os.makedirs(os.path.join(project, "checkpoints"))
        shutil.copytree(G, os.path.join(project, "checkpoints", "checkpoint_0"))
        job = Job(self, project, 5, rounds=1, model="mlp16")
        rc = job.launcher.wait(60)
        job.launcher.drain(5)
        job.finish()
        loaded = [l for r in (0, 1) for l in job.lines(r) if l.startswith("loaded step=")]
        if rc != 0 or len(loaded) != 2:
            problems.append(("a one-process checkpoint did not resume two processes",
                             "code %s, %d ranks loaded: %s" % (rc, len(loaded),
                                                               " | ".join(job.err_lines()[-3:]))))
        self.tally.record(group, "saved by 1 process, loaded by 2", problems)


def signal_name(number):
    try:
        return signal.Signals(number).name
    except ValueError:
        return "signal %d" % number


def names_rank1(text):
    """Whether `text` names rank 1: "rank 1", "ranks 0, 1", "rank(s) 1"."""
    return re.search(r"\branks?(?:\(s\))? (?:\d+, )*1\b", text) is not None


def names_host(text, host):
    return re.search(r"(?<![\w.-])" + re.escape(host) + r"(?![\w-])", text) is not None


def json_paths(doc, prefix=()):
    """Every key path of a JSON document (objects' keys, arrays' indices)."""
    out = []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else []
    for k, v in items:
        out.append(prefix + (k,))
        out.extend(json_paths(v, prefix + (k,)))
    return out


def phase_durations(timed):
    """{phase: [seconds]} rank 1 spent in each complete phase, from its (time, line) pairs."""
    spans = {"train": [], "save": [], "load": [], "collective": []}
    for (t, line), (t2, _next) in zip(timed, timed[1:]):
        if line.startswith("step "):
            spans["train"].append(t2 - t)
        elif line.startswith("saving "):
            spans["save"].append(t2 - t)
        elif line == "loading":
            spans["load"].append(t2 - t)
        elif line.startswith("collective "):
            spans["collective"].append(t2 - t)
    return {k: v for k, v in spans.items() if v}


# Damage functions: each takes the directory of the copy to damage.


def truncate_fn(fname, n):
    def fn(d):
        with open(os.path.join(d, fname), "r+b") as f:
            f.truncate(n)
    return fn


def flip_fn(fname, off, mask):
    def fn(d):
        with open(os.path.join(d, fname), "r+b") as f:
            f.seek(off)
            b = f.read(1)
            f.seek(off)
            f.write(bytes([b[0] ^ mask]))
    return fn


def remove_fn(fname):
    return lambda d: os.remove(os.path.join(d, fname))


def dir_fn(fname):
    def fn(d):
        p = os.path.join(d, fname)
        st = os.stat(p)
        os.remove(p)
        os.mkdir(p)
        os.chown(p, st.st_uid, st.st_gid)
    return fn


def unreadable_fn(fname):
    return lambda d: os.chmod(os.path.join(d, fname), 0)


def drop(doc, path):
    for k in path[:-1]:
        doc = doc[k]
    del doc[path[-1]]


def manifest_drop_fn(path):
    def fn(d):
        mp = os.path.join(d, "manifest.json")
        with open(mp) as f:
            m = json.load(f)
        drop(m, path)
        with open(mp, "r+") as f:
            f.truncate(0)
            f.write(json.dumps(m, indent=2) + "\n")
    return fn


def json_drop_fn(fname, path):
    def fn(d):
        with open(os.path.join(d, fname)) as f:
            doc = json.load(f)
        drop(doc, list(path))
        write_manifest_entry(d, fname, json.dumps(doc, indent=2).encode())
    return fn


def replace_fn(fname, transform):
    def fn(d):
        with open(os.path.join(d, fname), "rb") as f:
            data = f.read()
        write_manifest_entry(d, fname, transform(data))
    return fn


def tensor_names(data):
    """The tensor names of a safetensors file, in header order."""
    n = int.from_bytes(data[:8], "little")
    return [k for k in json.loads(data[8:8 + n]) if k != "__metadata__"]


def rename_tensor(name):
    """Renames tensor `name` in a safetensors header (one bit of its last letter flipped, so the
    header keeps its length and the offsets stay valid)."""
    def transform(data):
        n = int.from_bytes(data[:8], "little")
        header = bytearray(data[8:8 + n])
        i = bytes(header).find(json.dumps(name).encode() + b":")
        if i >= 0:
            header[i + len(json.dumps(name)) - 2] ^= 0x01
        return data[:8] + bytes(header) + data[8 + n:]
    return transform


def ids_of(user, group):
    """(uid, gid) of `user` and `group`, or None when either does not exist here."""
    try:
        import grp
        import pwd
        return pwd.getpwnam(user).pw_uid, grp.getgrnam(group).gr_gid
    except (ImportError, KeyError):
        return None


class Repl:
    """fault_program repl: one command, one answer line."""

    def __init__(self, proc):
        self.proc = proc
        self.seen = 0

    def cmd(self, line, timeout=60):
        try:
            self.proc.p.stdin.write((line + "\n").encode())
            self.proc.p.stdin.flush()
        except OSError as e:
            raise ReplDied("the repl died (%s) before %r; code %s; stderr: %s" % (
                e, line, self.proc.wait(2), " | ".join(self.proc.err_lines()[-5:])))
        got = self.proc.wait_line(lambda l: True, timeout, start=self.seen)
        if got is None:
            raise ReplDied("the repl gave no answer to %r within %d s; code %s; stderr: %s" % (
                line, timeout, self.proc.wait(2), " | ".join(self.proc.err_lines()[-5:])))
        self.seen += 1
        answer = got[1]
        if answer == "ok" or answer.startswith("ok "):
            return ACCEL_OK, answer[3:]
        m = re.match(r"^err (\d+) ?(.*)$", answer)
        if not m:
            raise ReplDied("the repl answered %r to %r" % (answer, line))
        return int(m.group(1)), m.group(2)

    def close(self):
        try:
            self.cmd("quit", timeout=10)
        except ReplDied:
            pass
        if self.proc.wait(10) is None:
            self.proc.kill()


# ------------------------------------------------------------------------------------------------
# Main
# ------------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", required=True, help="the accel command line (build/bin/accel)")
    ap.add_argument("--program", required=True, help="fault_program")
    ap.add_argument("--quick", action="store_true",
                    default=os.environ.get("ACCEL_FAULTS_QUICK") == "1",
                    help="fewer injections (about 30 s instead of 2 minutes); the default when "
                    "ACCEL_FAULTS_QUICK=1 (tools/test_torch2.sh sets it)")
    ap.add_argument("--seed", type=int, help="random seed (printed; default: a random one)")
    ap.add_argument("--only", default="abcdefghij",
                    help="which faults, e.g. 'a,f,g' (default all)")
    ap.add_argument("--tmp", help="where the scratch directories go (default: $TMPDIR or /tmp, and "
                    "/dev/shm for the corruption cases, which save three times per case)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per injection")
    args = ap.parse_args()
    faultlib.VERBOSE = args.verbose
    for path in (args.cli, args.program):
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            print("fault_suite: %s is not an executable file" % path, file=sys.stderr)
            return 2
    only = set(args.only.replace(",", ""))
    suite = Suite(args)
    subreaper = become_subreaper()
    log("seed %d (rerun with --seed %d); scratch %s%s; host %s%s" % (
        suite.seed, suite.seed, suite.tmp,
        " and %s" % suite.fast_tmp if suite.fast_tmp != suite.tmp else "", suite.hostname,
        "" if subreaper else "; not a subreaper: orphaned ranks go to init"))
    started = time.monotonic()
    try:
        if only & set("abd"):
            try:
                suite.reference()
            except SetupError as e:
                suite.tally.violations.append(("a/b/d (reference run)", "-", "setup failed", str(e)))
                log(str(e))
                only -= set("abd")
        for letter, fn in (("a", suite.fault_a), ("b", suite.fault_b), ("c", suite.fault_c),
                           ("d", suite.fault_d), ("e", suite.fault_e), ("f", suite.fault_f),
                           ("g", lambda: faults_trackers.run(suite)),
                           ("h", lambda: faults_stream.run(suite)),
                           ("i", lambda: faults_zero.run(suite)),
                           ("j", lambda: faults_store.run(suite))):
            if letter in only:
                t = time.monotonic()
                try:
                    fn()
                except (SetupError, ReplDied) as e:
                    suite.tally.violations.append(("%s. (whole fault)" % letter, "-",
                                                   "could not run to the end", str(e)))
                    log("%s stopped: %s" % (letter, e))
                for tr in ALL_TRACKERS:
                    tr.kill_all()
                log("%s done in %.1f s" % (letter, time.monotonic() - t))
    finally:
        for tr in ALL_TRACKERS:
            tr.kill_all()
        if not suite.keep:
            shutil.rmtree(suite.tmp, ignore_errors=True)
            shutil.rmtree(suite.fast_tmp, ignore_errors=True)
    report(suite.tally, time.monotonic() - started, suite.seed)
    return 1 if suite.tally.violations else 0


if __name__ == "__main__":
    sys.exit(main())
