"""Fault group i of the fault-injection suite (fault_suite.py): ZeRO stages 1-3 under
`accel launch -n 2`, their sharded checkpoints killed while being written and damaged after.

The ranks run zero_fault_program (beside fault_program): an MLP with Adam whose optimizer state
is sharded across the ranks; each rank writes its own random_states_<r> and
optimizer_0.rank_<r>.safetensors, the main process then model_0.safetensors, optimizer_0.json,
scheduler_0.json, training_state.json, custom_0.bin, config.yaml and manifest.json, and renames the
directory into place. Each stage is chosen as a program would: stage 1 by the program's setters
(distributed_type DEEPSPEED, deepspeed_config {zero_stage: 1}), stage 2 by Accelerate's launcher
variables (ACCELERATE_USE_DEEPSPEED, ACCELERATE_DEEPSPEED_ZERO_STAGE=2), stage 3 by FSDP2's
(ACCELERATE_USE_FSDP, FSDP_VERSION=2, FSDP_RESHARD_AFTER_FORWARD=true, SHARDED_STATE_DICT). A
reference run of each stage (train 2, save checkpoint_0 = B, train 2, save checkpoint_1 = G) gives
the parameters an uninterrupted run ends with; it must show the stage in effect (per-rank
optimizer files; at stage 3 parameters another rank owns refused between steps, at 1 and 2 none).

Kills (every file of each stage; --quick: one stage, a per-rank file, a main-process file and a
FIFO hold): a chain of runs in one project seeded with B; each run resumes, trains 2 steps,
prints the parameters' checksum and saves, and is SIGKILLed inside that save at a chosen file:
  - inside the first write(2) to optimizer_0.rank_<r>, model_0, optimizer_0.json,
    scheduler_0.json, training_state.json or custom_0.bin, with a drawn share of that write's
    bytes on disk (kill_at_write.so, group g's preload, in the rank that writes it); a kill at
    optimizer_0.rank_<r> with nothing written is the kill right after random_states_<r>
    (libstdc++ writes it, config.yaml and manifest.json with writev(2), which the preload does
    not see);
  - at config.yaml, at manifest.json and at the rename (after manifest.json, while the directory
    is synced): the program's save callback puts a FIFO under that name (for the rename, an extra
    entry) into the directory being written, so the main process blocks there for good (seen in
    /proc as a FIFO open) and is killed there.
After each kill: the launcher returns non-zero within 30 s naming the killed rank, no process of
the job is alive 2 s later, every directory under a final checkpoint name is complete per its
manifest; the next run of the chain resumes from the newest complete checkpoint (the step it
holds) and its checksum after the 2 steps is the reference's. The last run saves to the end:
its checkpoint equals the reference's G file for file (all but config.yaml and manifest.json,
which name the project).

Damage (the last run of each chain goes on, live state B = the reference's checkpoint_0): copies
of G with one per-rank file truncated, a byte flipped, removed (from the disk, or from the disk
and the manifest), replaced by the same-named shard of another stage's earlier save (as is), of
another run (seed 2; manifest rewritten to match), or of a 3-process save (manifest rewritten), or
left out by a manifest saying num_processes 1 (--quick: three of them). Each load must fail on both
ranks with ACCEL_ERR_IO, _STATE, _SHAPE or _DTYPE and a message naming the damaged file, and change
nothing: the checksum and a save after it equal those before it. Then G itself must load, with
G's checksum, and a save of it must equal G file for file.
"""

import json
import os
import re
import shutil
import signal
import time
import zlib

from faultlib import (ALL_TRACKERS, Proc, SetupError, Tracker, base_env, checkpoints_in,
                      list_files, log, steps_of, verify_checkpoint, vlog)

G_REF = "i. ZeRO 1-3 reference runs (stage in effect)"
G_KILL = "i. ZeRO 1-3 SIGKILL at each file of save_state"
G_RESUME = "i. ZeRO 1-3 resume after the kill (bitwise)"
G_DAMAGE = "i. ZeRO 1-3 shard damaged, missing, copied in"
G_FORGED = "i. ZeRO 1-3 foreign shard, manifest rewritten"
G_INTACT = "i. ZeRO 1-3 intact checkpoint loads after"

# How each stage is chosen: the program's first argument and the environment.
STAGES = {
    1: ("1", {}),
    2: ("env", {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "2"}),
    3: ("env", {"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2",
                "FSDP_RESHARD_AFTER_FORWARD": "true", "FSDP_STATE_DICT_TYPE": "SHARDED_STATE_DICT"}),
}

# Kill points in the order a save reaches them: (label, how, rank, file name prefix, keep).
# keep: the share of the write that reaches the file (None: drawn).
KILL_POINTS = [
    ("after random_states_1", "write", 1, "optimizer_0.rank_1", 0.0),
    ("optimizer_0.rank_1", "write", 1, "optimizer_0.rank_1", None),
    ("after random_states_0", "write", 0, "optimizer_0.rank_0", 0.0),
    ("optimizer_0.rank_0", "write", 0, "optimizer_0.rank_0", None),
    ("model_0", "write", 0, "model_0", None),
    ("optimizer_0.json", "write", 0, "optimizer_0.json", None),
    ("scheduler_0.json", "write", 0, "scheduler_0.json", None),
    ("training_state.json", "write", 0, "training_state.json", None),
    ("custom_0.bin", "write", 0, "custom_0.bin", None),
    ("config.yaml", "hold", 0, "config.yaml", None),
    ("manifest.json", "hold", 0, "manifest.json", None),
    ("the rename", "hold", 0, "rename", None),
]

CLEAR_STATUSES = {5: "ACCEL_ERR_IO", 6: "ACCEL_ERR_SHAPE", 7: "ACCEL_ERR_DTYPE", 11: "ACCEL_ERR_STATE"}
# Files that name the project (config.yaml) or list their checksums (manifest.json).
PROJECT_FILES = ("config.yaml", "manifest.json")
SHARDS = ("optimizer_0.rank_0.safetensors", "optimizer_0.rank_1.safetensors")
RNG_FILES = ("random_states_0.safetensors", "random_states_1.safetensors")

READY = re.compile(r"^pid=(\d+) rank=(\d+) ready$")
ANSWER = re.compile(r"^r(\d+) (\d+) (ok|err)(?: (.*))?$")


def names_rank(text, rank):
    return re.search(r"\branks?(?:\(s\))? (?:\d+, )*%d\b" % rank, text) is not None


class RankJob:
    """`accel launch -n N zero_fault_program STAGE SEED PROJECT COMMAND...` with its processes
    tracked; the answers of every rank to every command."""

    def __init__(self, ctx, stage, seed, project, cmds, n=2, extra_env=None):
        self.tracker = Tracker()
        ALL_TRACKERS.append(self.tracker)
        self.rank_pid = {}
        self.cmds = cmds
        arg, stage_env = STAGES[stage]
        env = base_env(dict(stage_env, OMP_NUM_THREADS="1", **(extra_env or {})))
        argv = [ctx.suite.cli, "launch", "-n", str(n), "--grace_period", str(ctx.suite.grace),
                ctx.program, arg, str(seed), project] + cmds
        self.launcher = Proc(argv, env, on_line=self._line)
        self.tracker.parents.add(self.launcher.pid)
        self.tracker.add(self.launcher.pid, "the launcher")

    def _line(self, _t, line):
        m = READY.match(line)
        if m:
            pid, rank = int(m.group(1)), int(m.group(2))
            self.rank_pid[rank] = pid
            self.tracker.rank_pids.add(pid)
            self.tracker.add(pid, "rank %d" % rank)

    def answers(self, rank):
        """{command index: (status, text)} of `rank` (status 0: ok)."""
        out = {}
        for line in self.launcher.out_lines():
            m = ANSWER.match(line)
            if m and int(m.group(1)) == rank:
                text = m.group(4) or ""
                if m.group(3) == "ok":
                    out[int(m.group(2))] = (0, text)
                else:
                    st, _, rest = text.partition(" ")
                    out[int(m.group(2))] = (int(st) if st.isdigit() else -1, rest)
        return out

    def lines(self, rank):
        prefix = "r%d " % rank
        return [l[len(prefix):] for l in self.launcher.out_lines() if l.startswith(prefix)]

    def err_tail(self, n=4):
        return " | ".join(self.launcher.err_lines()[-n:])

    def kill_rank(self, rank):
        pid = self.rank_pid.get(rank)
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
            self.tracker.scan()

    def finish(self):
        self.tracker.kill_all()
        if self.launcher.wait(0) is None:
            self.launcher.kill()
        self.launcher.drain(2)


def files_differ(a, b, exclude=PROJECT_FILES):
    """'' when directories a and b hold the same files with the same bytes (but `exclude`)."""
    fa, fb = list_files(a), list_files(b)
    out = []
    for name in sorted((set(fa) | set(fb)) - set(exclude)):
        if name not in fa or name not in fb:
            out.append("%s only in %s" % (name, "the second" if name not in fa else "the first"))
        elif fa[name] != fb[name]:
            out.append("%s differs" % name)
    return ", ".join(out)


def listing(d):
    """'name(size)' of each entry of d; FIFOs marked."""
    if not os.path.isdir(d):
        return "-"
    out = []
    for name in sorted(os.listdir(d)):
        p = os.path.join(d, name)
        st = os.lstat(p)
        out.append("%s(%s)" % (name, "fifo" if (st.st_mode & 0o170000) == 0o010000 else st.st_size))
    return " ".join(out)


def blocked_in_fifo(pid):
    """True when a thread of `pid` waits in a FIFO open; None when /proc cannot tell."""
    try:
        names = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return False
    seen_any = False
    for tid in names:
        try:
            with open("/proc/%d/task/%s/wchan" % (pid, tid)) as f:
                w = f.read().strip()
        except OSError:
            continue
        if w and w != "0":
            seen_any = True
        if "wait_for_partner" in w or "fifo" in w:
            return True
    return False if seen_any else None


# Damage to a copy d of a checkpoint.

def rewrite_entry(d, fname, data):
    """Writes `data` to d/fname and puts its size and CRC-32 into d/manifest.json."""
    with open(os.path.join(d, fname), "wb") as f:
        f.write(data)
    mp = os.path.join(d, "manifest.json")
    with open(mp) as f:
        m = json.load(f)
    for e in m["files"]:
        if e["path"] == fname:
            e["size"] = len(data)
            e["crc32"] = zlib.crc32(data) & 0xFFFFFFFF
    with open(mp, "w") as f:
        f.write(json.dumps(m, indent=2) + "\n")


def edit_manifest(d, fn):
    mp = os.path.join(d, "manifest.json")
    with open(mp) as f:
        m = json.load(f)
    fn(m)
    with open(mp, "w") as f:
        f.write(json.dumps(m, indent=2) + "\n")


def state_names(d):
    """The tensor names in d's optimizer_0.rank_*.safetensors files."""
    out = set()
    for name in os.listdir(d):
        if name.startswith("optimizer_0.rank_") and name.endswith(".safetensors"):
            data = read(os.path.join(d, name))
            n = int.from_bytes(data[:8], "little")
            out |= set(k for k in json.loads(data[8:8 + n]) if k != "__metadata__")
    return out


def read(path):
    with open(path, "rb") as f:
        return f.read()


class ZeroFaults:
    def __init__(self, suite):
        self.suite = suite
        self.rng = suite.rng
        self.program = os.path.join(os.path.dirname(suite.program), "zero_fault_program")
        self.preload = os.path.join(os.path.dirname(suite.program), "kill_at_write.so")
        if not (os.path.isfile(self.program) and os.access(self.program, os.X_OK)):
            raise SetupError("group i needs %s (target zero_fault_program)" % self.program)
        self.refs = {}

    def tally(self, group, case, problems):
        vlog("i: %s | %s%s" % (group, case, "" if not problems else " PROBLEMS %s" % problems))
        self.suite.tally.record(group, case, problems)

    def run_job(self, stage, seed, project, cmds, n=2, timeout=60):
        job = RankJob(self, stage, seed, project, cmds, n=n)
        rc = job.launcher.wait(timeout)
        job.launcher.drain(5)
        job.finish()
        return job, rc

    # --------------------------------------------------------------------------------------------

    def reference(self, stage):
        """An uninterrupted run of `stage`: checkpoint_0 (B, step 2), checkpoint_1 (G, step 4)
        and the checksum at step 4."""
        project = os.path.join(self.suite.newdir("i-ref%d" % stage, fast=True), "p")
        cmds = ["train:2", "save:-", "train:2", "sum", "save:-"]
        job, rc = self.run_job(stage, 1, project, cmds)
        problems = []
        sums = set()
        for r in (0, 1):
            a = job.answers(r)
            bad = [(cmds[i], a.get(i)) for i in range(len(cmds)) if a.get(i, (None,))[0] != 0]
            if bad:
                problems.append(("the reference run failed", "rank %d: %s" % (r, bad[:2])))
            if 3 in a and a[3][0] == 0:
                sums.add(a[3][1])
        if rc != 0:
            problems.append(("the reference run failed", "code %s: %s" % (rc, job.err_tail())))
        if len(sums) != 1:
            problems.append(("the ranks of the reference run disagree", str(sums)))
        ck = checkpoints_in(project)
        released = 0
        for r in (0, 1):
            for l in job.lines(r):
                m = re.match(r"^released (\d+) of (\d+)$", l)
                if m:
                    released += int(m.group(1))
        if not problems:
            for n in (0, 1):
                why = verify_checkpoint(ck.get(n, os.path.join(project, "missing")))
                if why:
                    problems.append(("a reference checkpoint is incomplete", why))
            with open(os.path.join(ck[1], "manifest.json")) as f:
                listed = [e["path"] for e in json.load(f)["files"]]
            if not set(SHARDS) <= set(listed):
                problems.append(("the optimizer state is not sharded (stage not in effect)",
                                 "files: %s" % listed))
            if (stage == 3) != (released > 0):
                problems.append(("the stage is not in effect",
                                 "%d parameters refused between steps (stage 3: some; 1, 2: none)"
                                 % released))
        case = "ZeRO-%d (%s): checksum %s, %d parameter(s) released between steps" % (
            stage, STAGES[stage][0] if stage == 1 else " ".join(
                "%s=%s" % kv for kv in sorted(STAGES[stage][1].items())), sums, released)
        self.tally(G_REF, case, problems)
        if problems:
            return None
        return {"B": ck[0], "G": ck[1], "sum": sums.pop()}

    # --------------------------------------------------------------------------------------------

    def kill_chain(self, stage, points, damage):
        """The chain of killed runs of `stage` in one project, then the run that finishes and goes
        on with the `damage` cases."""
        ref = self.refs[stage]
        project = os.path.join(self.suite.newdir("i-kill%d" % stage, fast=True), "p")
        os.makedirs(os.path.join(project, "checkpoints"))
        shutil.copytree(ref["B"], os.path.join(project, "checkpoints", "checkpoint_0"))
        previous = "ZeRO-%d: the first run (checkpoint_0 copied in)" % stage
        for k, point in enumerate(points):
            previous = self.kill_once(stage, project, point, k, previous)
        self.final_run(stage, project, previous, damage)

    def expected_resume(self, project):
        ck = checkpoints_in(project)
        return steps_of(ck[max(ck)]) if ck else None

    def check_resume(self, job, expect, ref_sum, case):
        """The resume and the checksum of a chain run (commands 0 and 2)."""
        problems = []
        for r in (0, 1):
            a = job.answers(r)
            got = a.get(0)
            want = "step=%s" % expect if expect is not None else "none"
            if got != (0, want):
                problems.append(("did not resume from the newest complete checkpoint",
                                 "rank %d answered %s, want ok %s; %s" % (r, got, want,
                                                                          job.err_tail(2))))
            elif expect == 2 and a.get(2) != (0, ref_sum):
                problems.append(("parameters differ from the uninterrupted run",
                                 "rank %d: %s, want %s" % (r, a.get(2), ref_sum)))
        self.tally(G_RESUME, case, problems)

    def kill_once(self, stage, project, point, k, previous):
        label, how, rank, match, keep = point
        if keep is None:
            keep = round(self.rng.uniform(0.05, 0.95), 3)
        expect = self.expected_resume(project)
        report = os.path.join(os.path.dirname(project), "kill-report-%d" % k)
        cmds = ["resume", "train:2", "sum", "save:-"]
        if how == "write":
            extra = {"LD_PRELOAD": self.preload, "KILL_AT_WRITE_MATCH": match,
                     "KILL_AT_WRITE_N": "1", "KILL_AT_WRITE_KEEP": str(keep),
                     "KILL_AT_WRITE_RANK": str(rank), "KILL_AT_WRITE_REPORT": report}
        else:
            extra = {"ZERO_FAULT_HOLD": match}
        job = RankJob(self, stage, 1, project, cmds, extra_env=extra)
        landed = None
        problems = []
        if how == "hold":
            got = job.launcher.wait_line(lambda l: l.startswith("r0 hold"), 30)
            if got and got[1] == "r0 hold %s" % match:
                pid = job.rank_pid.get(0)
                deadline = time.monotonic() + 3
                blocked = None
                while pid and time.monotonic() < deadline:
                    blocked = blocked_in_fifo(pid)
                    if blocked is not False:
                        break
                    time.sleep(0.01)
                if blocked is None:
                    time.sleep(0.3)  # /proc does not say; a FIFO open never returns anyway
                if blocked is False:
                    problems.append(("the hold did not stop rank 0 at %s" % match,
                                     "no thread of pid %s waits in a FIFO open" % pid))
                landed = "rank 0 blocked at %s%s" % (
                    match, "" if blocked else " (as far as /proc tells)")
                job.kill_rank(0)
            else:
                problems.append(("the kill did not come: no hold at %s" % match,
                                 str(got[1] if got else "no line; " + job.err_tail(2))))
        rc = job.launcher.wait(30)
        finished = time.monotonic()
        if how == "write":
            try:
                with open(report) as f:
                    base, _n, kept, size = f.read().split()
                landed = "rank %d killed in its write of %s (%s of %s bytes written)" % (
                    rank, base, kept, size)
                if not base.startswith(match):
                    problems.append(("the kill landed in another file", base))
            except (OSError, ValueError):
                problems.append(("the kill did not come: no write of %s by rank %d" % (match, rank),
                                 "code %s; %s" % (rc, job.err_tail(2))))
        if rc is None:
            problems.append(("launcher did not return within 30 s of the kill", ""))
        left = job.tracker.wait_gone(max(0.0, finished + 2.0 - time.monotonic()))
        if left:
            problems.append(("processes left 2 s after the launcher returned",
                             "; ".join("pid %d (%s, state %s)" % x for x in left)))
        job.launcher.drain(3)
        if landed is not None and rc is not None:
            if rc == 0:
                problems.append(("launcher exit code 0 after a rank was killed", ""))
            named = [l for l in job.launcher.err_lines()
                     if l.startswith("accel launch:") and names_rank(l, rank)]
            if not named:
                problems.append(("launcher stderr does not name rank %d" % rank,
                                 " | ".join(l for l in job.launcher.err_lines()
                                            if l.startswith("accel launch:")) or "(nothing)"))
        for n, d in sorted(checkpoints_in(project).items()):
            why = verify_checkpoint(d)
            if why:
                problems.append(("an incomplete checkpoint under a final name", "%s: %s" % (d, why)))
        partial = os.path.join(project, "checkpoints", "checkpoint_1.partial")
        case = "ZeRO-%d at %s: %s; code %s; left %s" % (
            stage, label, landed or "no kill", rc, listing(partial) if os.path.isdir(partial)
            else sorted(os.listdir(os.path.join(project, "checkpoints"))))
        if how == "hold" and landed and os.path.isdir(partial):
            # Where it stopped: the entries before the hold complete, the hold a FIFO.
            if match == "rename" and verify_checkpoint(partial):
                problems.append(("killed at the rename but the manifest is not complete",
                                 verify_checkpoint(partial)))
        job.finish()
        self.check_resume(job, expect, self.refs[stage]["sum"], "%s; then resumed" % previous)
        self.tally(G_KILL, case, problems)
        if landed is None:
            # No kill: the save may have completed; start the chain over from checkpoint_0.
            for n, d in checkpoints_in(project).items():
                if n != 0:
                    shutil.rmtree(d, ignore_errors=True)
        if not self.suite.keep and os.path.exists(report):
            os.remove(report)
        return case

    # --------------------------------------------------------------------------------------------

    def damage_cases(self, stage, kinds, work):
        """Copies of G, each with one kind of damage: [(label, dir, names, forged)]."""
        ref = self.refs[stage]
        G = ref["G"]
        out = []
        for kind in kinds:
            d = os.path.join(work, "d%02d-%s" % (len(out), kind))
            shutil.copytree(G, d)
            if kind == "truncate":
                f = self.rng.choice(SHARDS + RNG_FILES)
                size = os.path.getsize(os.path.join(d, f))
                n = self.rng.randrange(0, size)
                with open(os.path.join(d, f), "r+b") as fh:
                    fh.truncate(n)
                out.append(("%s truncated to %d of %d bytes" % (f, n, size), d, (f,), False))
            elif kind == "flip":
                f = self.rng.choice(SHARDS + RNG_FILES)
                size = os.path.getsize(os.path.join(d, f))
                off, mask = self.rng.randrange(size), 1 << self.rng.randrange(8)
                with open(os.path.join(d, f), "r+b") as fh:
                    fh.seek(off)
                    b = fh.read(1)
                    fh.seek(off)
                    fh.write(bytes([b[0] ^ mask]))
                out.append(("%s byte %d xor 0x%02x" % (f, off, mask), d, (f,), False))
            elif kind == "remove":
                f = self.rng.choice(SHARDS + RNG_FILES)
                os.remove(os.path.join(d, f))
                out.append(("%s removed" % f, d, (f,), False))
            elif kind == "remove-listed":
                f = self.rng.choice(SHARDS)
                os.remove(os.path.join(d, f))
                edit_manifest(d, lambda m, f=f: m.__setitem__(
                    "files", [e for e in m["files"] if e["path"] != f]))
                out.append(("%s removed and dropped from the manifest" % f, d, (f,), False))
            elif kind == "other-stage":
                other = self.rng.choice([s for s in self.refs if s != stage] or [stage])
                f = self.rng.choice(SHARDS)
                shutil.copyfile(os.path.join(self.refs[other]["B"], f), os.path.join(d, f))
                out.append(("%s replaced by ZeRO-%d's of the save at step 2" % (f, other),
                            d, (f,), False))
            elif kind == "other-run":
                f = self.rng.choice(SHARDS)
                rewrite_entry(d, f, read(os.path.join(self.other_run, f)))
                out.append(("%s replaced by another run's (seed 2), manifest rewritten" % f,
                            d, (f,), True))
            elif kind == "other-world":
                f = self.rng.choice(SHARDS)
                rewrite_entry(d, f, read(os.path.join(self.other_world, f)))
                out.append(("%s replaced by a 3-process save's, manifest rewritten" % f,
                            d, (f,), True))
            elif kind == "fewer-processes":
                edit_manifest(d, lambda m: m.__setitem__("num_processes", 1))
                out.append(("manifest.json says num_processes 1 (optimizer_0.rank_1 left out)",
                            d, ("manifest.json", SHARDS[1]), True))
            else:
                raise SetupError("unknown damage kind %s" % kind)
        return out

    def final_run(self, stage, project, previous, kinds):
        """Resumes and saves to the end; then the damaged loads (live state B), then G."""
        ref = self.refs[stage]
        work = self.suite.newdir("i-damage%d" % stage, fast=True)
        cases = self.damage_cases(stage, kinds, work)
        cmds = ["resume", "train:2", "sum", "save:-"]
        before = os.path.join(work, "before")
        cmds += ["load:" + ref["B"], "sum", "save:" + before]
        at = []
        for i, (_label, d, _names, _forged) in enumerate(cases):
            at.append(len(cmds))
            cmds += ["load:" + d, "sum", "save:" + os.path.join(work, "after%02d" % i),
                     "load:" + ref["B"]]
        g_at = len(cmds)
        g2 = os.path.join(work, "G-resaved")
        cmds += ["load:" + ref["G"], "sum", "save:" + g2]
        expect = self.expected_resume(project)
        job, rc = self.run_job(stage, 1, project, cmds, timeout=120)
        ans = {r: job.answers(r) for r in (0, 1)}
        # The finished resume.
        self.check_resume(job, expect, ref["sum"], "%s; then resumed" % previous)
        problems = []
        if any(ans[r].get(3, (None,))[0] != 0 for r in (0, 1)):
            problems.append(("the resumed run's save failed", "%s %s" % (
                ans[0].get(3), ans[1].get(3))))
        else:
            ck = checkpoints_in(project)
            why = verify_checkpoint(ck[1]) if 1 in ck else "no checkpoint_1"
            if why:
                problems.append(("the resumed run's checkpoint is incomplete", why))
            else:
                d = files_differ(ck[1], ref["G"])
                if d:
                    problems.append(("the resumed run's checkpoint differs from the "
                                     "uninterrupted run's", d))
        self.tally(G_RESUME, "ZeRO-%d: the last run saves to the end; its checkpoint_1 against "
                   "the uninterrupted run's" % stage, problems)
        # The damaged loads.
        setup_ok = all(ans[r].get(i, (None,))[0] == 0 for r in (0, 1) for i in (4, 5, 6))
        sum_b = ans[0].get(5, (None, None))[1]
        for (label, d, names, forged), i in zip(cases, at):
            group = G_FORGED if forged else G_DAMAGE
            case = "ZeRO-%d: %s" % (stage, label)
            problems = []
            if not setup_ok:
                problems.append(("the live state could not be set up", "%s %s; %s" % (
                    ans[0].get(4), ans[0].get(6), job.err_tail(2))))
                self.tally(group, case, problems)
                continue
            loads = [ans[r].get(i) for r in (0, 1)]
            sums = [ans[r].get(i + 1) for r in (0, 1)]
            saves = [ans[r].get(i + 2) for r in (0, 1)]
            if None in loads or None in sums or None in saves:
                problems.append(("the ranks died or hung at the damaged load",
                                 "code %s; answers %s; %s" % (rc, loads, job.err_tail(3))))
                self.tally(group, case, problems)
                continue
            after = os.path.join(work, "after%02d" % (at.index(i)))
            if all(l[0] == 0 for l in loads):
                if saves[0][0] != 0:
                    state = "the live state could not be saved"
                elif not files_differ(after, ref["G"]):
                    state = "the live state is G's"
                else:
                    state = "against G: %s" % files_differ(after, ref["G"])
                    lost = sorted(state_names(ref["G"]) - state_names(after))
                    if lost:
                        state += "; optimizer state dropped: %s" % " ".join(lost)
                problems.append(("a damaged or foreign shard was accepted by load_state",
                                 "both ranks: ok; %s" % state))
                outcome = "loaded (%s)" % state
            else:
                for r in (0, 1):
                    st, msg = loads[r]
                    if st == 0:
                        problems.append(("one rank loaded, the other refused", "rank %d" % r))
                    elif st not in CLEAR_STATUSES:
                        problems.append(("the refusal's status is not IO, STATE, SHAPE or DTYPE",
                                         "rank %d: %s %s" % (r, st, msg)))
                    if st != 0 and not any(n in msg for n in names):
                        problems.append(("the message does not name the damaged file (%s)" %
                                         " or ".join(names), "rank %d: %s" % (r, msg)))
                outcome = "refused %s: %s" % (CLEAR_STATUSES.get(loads[0][0], loads[0][0]),
                                              loads[0][1][:200])
            for r in (0, 1):
                if loads[r][0] != 0 and sums[r] != (0, sum_b):
                    problems.append(("the parameters changed in the failed load",
                                     "rank %d: %s, before %s" % (r, sums[r], sum_b)))
            if saves[0][0] != 0:
                problems.append(("save after the load failed", str(saves[0])))
            elif loads[0][0] != 0:
                dd = files_differ(before, after, exclude=())
                if dd:
                    problems.append(("a failed load changed the live state", dd))
            self.tally(group, "%s -> %s" % (case, outcome), problems)
        # The intact checkpoint still loads.
        problems = []
        got = [ans[r].get(g_at) for r in (0, 1)]
        if got != [(0, "step=4")] * 2:
            problems.append(("the intact checkpoint did not load after the refusals",
                             "%s; %s" % (got, job.err_tail(2))))
        elif [ans[r].get(g_at + 1) for r in (0, 1)] != [(0, ref["sum"])] * 2:
            problems.append(("after loading the intact checkpoint the parameters are not its",
                             str([ans[r].get(g_at + 1) for r in (0, 1)])))
        elif ans[0].get(g_at + 2, (None,))[0] != 0:
            problems.append(("save after loading the intact checkpoint failed",
                             str(ans[0].get(g_at + 2))))
        else:
            dd = files_differ(ref["G"], g2)
            if dd:
                problems.append(("the intact checkpoint loaded, saved again, differs", dd))
        if rc != 0:
            problems.append(("the damage run did not end well", "code %s: %s" % (
                rc, job.err_tail(3))))
        left = job.tracker.wait_gone(2.0)
        if left:
            problems.append(("processes left after the damage run", str(left)))
        self.tally(G_INTACT, "ZeRO-%d: after %d refused loads, G loads, its checksum and a save "
                   "equal G" % (stage, len(cases)), problems)
        self.suite.discard(work)

    # --------------------------------------------------------------------------------------------

    def foreign(self, with_world):
        """Another run's checkpoint at step 4 (seed 2, ZeRO-1), and a 3-process save's."""
        project = os.path.join(self.suite.newdir("i-seed2", fast=True), "p")
        job, rc = self.run_job(1, 2, project, ["train:2", "save:-", "train:2", "save:-"])
        ck = checkpoints_in(project)
        if rc != 0 or 1 not in ck or verify_checkpoint(ck[1]):
            raise SetupError("group i: the run of seed 2 failed (code %s): %s" % (
                rc, job.err_tail()))
        self.other_run = ck[1]
        self.other_world = None
        if with_world:
            project = os.path.join(self.suite.newdir("i-world3", fast=True), "p")
            job, rc = self.run_job(2, 1, project, ["train:4", "save:-"], n=3)
            ck = checkpoints_in(project)
            if rc != 0 or 0 not in ck or verify_checkpoint(ck[0]):
                raise SetupError("group i: the 3-process run failed (code %s): %s" % (
                    rc, job.err_tail()))
            self.other_world = ck[0]

    def run(self):
        quick = self.suite.quick
        stages = [self.rng.choice([1, 2, 3])] if quick else [1, 2, 3]
        for s in stages:
            ref = self.reference(s)
            if ref:
                self.refs[s] = ref
        if not self.refs:
            raise SetupError("group i: no reference run succeeded")
        self.foreign(with_world=not quick)
        have_preload = os.path.isfile(self.preload)
        if not have_preload:
            self.suite.tally.violations.append((
                G_KILL, "-", "could not run: %s is missing (target kill_at_write)" % self.preload,
                "the kills inside writes were skipped; the FIFO holds ran"))
        for s in stages:
            if s not in self.refs:
                continue
            if quick:
                points = [self.rng.choice(KILL_POINTS[:4]), self.rng.choice(KILL_POINTS[4:9]),
                          self.rng.choice(KILL_POINTS[9:])]
                kinds = [self.rng.choice(["truncate", "flip"]),
                         self.rng.choice(["remove", "remove-listed", "other-stage"]),
                         self.rng.choice(["other-run", "fewer-processes"])]
            else:
                points = list(KILL_POINTS)
                kinds = ["truncate", "flip", "remove", "remove-listed", "other-stage",
                         "other-run", "other-world", "fewer-processes"]
            if not have_preload:
                points = [p for p in points if p[1] != "write"]
            t = time.monotonic()
            self.kill_chain(s, points, kinds)
            log("i: ZeRO-%d: %d kills, %d damaged loads in %.1f s" % (
                s, len(points), len(kinds), time.monotonic() - t))


def run(suite):
    ZeroFaults(suite).run()
