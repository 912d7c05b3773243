"""Fault group i of the fault-injection suite (fault_suite.py): ZeRO stages 1-3 under
`accel launch -n 2`, their sharded checkpoints killed while being written and damaged after.

The ranks run zero_fault_program (beside fault_program): an MLP with Adam whose optimizer state
is sharded across the ranks; each rank writes its own random_states_<r> and
optimizer_0.rank_<r>.safetensors, the main process then model_0.safetensors, optimizer_0.json,
scheduler_0.json, training_state.json, custom_0.bin, config.yaml and manifest.json, and renames the
directory into place. Each stage is chosen as a program would: stage 1 by the program's setters
(distributed_type DEEPSPEED, deepspeed_config {zero_stage: 1}), stage 2 by Accelerate's launcher
variables (ACCELERATE_USE_DEEPSPEED, ACCELERATE_DEEPSPEED_ZERO_STAGE=2), stage 3 by FSDP2's
(ACCELERATE_USE_FSDP, FSDP_VERSION=2, FSDP_RESHARD_AFTER_FORWARD=true, SHARDED_STATE_DICT).

Kills (every file of each stage; --quick: one drawn stage, a per-rank file, a main-process file
and a FIFO hold): a chain of runs of the stage in one project, each SIGKILLed inside a save at a
chosen file. The first trains 4 steps uninterrupted from scratch, saving checkpoint_0 (B) at step
2 and printing the checksum of the parameters at steps 2 and 4 (the reference: both ranks agree,
B is complete and sharded, and the stage is in effect: at stage 3 the parameters another rank
owns are refused between steps, at 1 and 2 none are), and is killed in its save at step 4; each
next run resumes, trains 2 steps, prints the checksum and is killed in its save. The kills:
  - inside the first write(2) to optimizer_0.rank_<r>, model_0, optimizer_0.json,
    scheduler_0.json, training_state.json or custom_0.bin of that save, with a drawn share of the
    write's bytes on disk (kill_at_write.so, group g's preload, in the rank that writes the file);
    a kill at optimizer_0.rank_<r> with nothing written is the kill right after random_states_<r>
    (libstdc++ writes it, config.yaml and manifest.json with writev(2), which the preload does
    not see);
  - at config.yaml, at manifest.json and at the rename (after manifest.json, while the directory
    is synced): the program's save callback puts a FIFO under that name (for the rename, an extra
    entry) into the directory being written, so the main process blocks there for good (seen in
    /proc as a FIFO open) and is killed there.
After each kill: the launcher returns non-zero within 30 s naming the killed rank, no process of
the job is alive 2 s later, every directory under a final checkpoint name is complete per its
manifest and none but checkpoint_0 exists; the next run resumes from the newest complete
checkpoint (the step it holds) and its checksum after 2 steps is the uninterrupted run's at step
4. The last run of the chain saves to the end (checkpoint_1, complete).

Damage (the last run goes on, its live state that of checkpoint_1): copies of B with one per-rank
file truncated, a byte flipped, removed (from the disk, or from the disk and the manifest),
replaced by the same-named shard of another run (3 processes, ZeRO-2, seed 2) as is, or with the
manifest rewritten to match: its optimizer_0.rank_0 (the same parameters, other values) or its
optimizer_0.rank_1 (other parameters), or a manifest saying num_processes 1 (rank 1's shard left
out) (--quick: three of them). Each load must fail on both ranks with ACCEL_ERR_IO, _STATE, _SHAPE
or _DTYPE and a message naming the damaged file, and change nothing: the checksum and a save after
it equal those before it (checkpoint_1 is loaded again after a load that succeeded). Then B itself
must load: step 2, B's checksum, and a save of it equal to B file for file (but config.yaml and
manifest.json, which name the project).
"""

import json
import os
import re
import shutil
import time

from faultlib import (Launched, SetupError, base_env, checkpoints_in, list_files, log, steps_of,
                      verify_checkpoint, vlog, write_manifest_entry)

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
                "FSDP_RESHARD_AFTER_FORWARD": "true",
                "FSDP_STATE_DICT_TYPE": "SHARDED_STATE_DICT"}),
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

CLEAR_STATUSES = {5: "ACCEL_ERR_IO", 6: "ACCEL_ERR_SHAPE", 7: "ACCEL_ERR_DTYPE",
                  11: "ACCEL_ERR_STATE"}
# Files that name the project (config.yaml) or list their checksums (manifest.json).
PROJECT_FILES = ("config.yaml", "manifest.json")
SHARDS = ("optimizer_0.rank_0.safetensors", "optimizer_0.rank_1.safetensors")
RNG_FILES = ("random_states_0.safetensors", "random_states_1.safetensors")

ANSWER = re.compile(r"^r(\d+) (\d+) (ok|err)(?: (.*))?$")


def names_rank(text, rank):
    return re.search(r"\branks?(?:\(s\))? (?:\d+, )*%d\b" % rank, text) is not None


class RankJob(Launched):
    """`accel launch -n N zero_fault_program STAGE SEED PROJECT COMMAND...` with its processes
    tracked; the answers of every rank to every command."""

    def __init__(self, ctx, stage, seed, project, cmds, n=2, extra_env=None):
        super().__init__()
        self.cmds = cmds
        arg, stage_env = STAGES[stage]
        env = base_env(dict(stage_env, OMP_NUM_THREADS="1", **(extra_env or {})))
        self.start_launcher(ctx.suite, n, [ctx.program, arg, str(seed), project] + cmds, env)

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

    def err_tail(self, n=4):
        return " | ".join(self.launcher.err_lines()[-n:])


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
        return "no %s" % os.path.basename(d)
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
        self.foreign = None

    def tally(self, group, case, problems):
        vlog("i: %s | %s%s" % (group, case, "" if not problems else " PROBLEMS %s" % problems))
        self.suite.tally.record(group, case, problems)

    # --------------------------------------------------------------------------------------------

    def foreign_run(self):
        """Another run's checkpoint: 3 processes, ZeRO-2, seed 2, saved at step 4."""
        project = os.path.join(self.suite.newdir("i-foreign", fast=True), "p")
        job = RankJob(self, 2, 2, project, ["train:4", "save:-"], n=3)
        rc = job.launcher.wait(60)
        job.launcher.drain(5)
        job.finish()
        ck = checkpoints_in(project)
        if rc != 0 or 0 not in ck or verify_checkpoint(ck[0]):
            raise SetupError("group i: the 3-process run of seed 2 failed (code %s): %s" % (
                rc, job.err_tail()))
        self.foreign = ck[0]

    def chain(self, stage, points, kinds):
        """The runs of `stage` in one project: the first trains 4 steps uninterrupted, saving
        checkpoint_0 (B) at step 2, and is killed in its save at step 4; each next one resumes and
        is killed in its save; the last resumes, saves to the end and loads damaged copies of B."""
        project = os.path.join(self.suite.newdir("i-zero%d" % stage, fast=True), "p")
        ref = None
        previous = None
        for k, point in enumerate(points):
            case = self.kill_once(stage, project, point, k, ref, previous)
            if ref is None:
                ref = self.reference(stage, project)
                if ref is None:
                    return
            previous = case
        self.final_run(stage, project, ref, previous, kinds)

    def reference(self, stage, project):
        """What the first run of the chain says: the checksums at steps 2 and 4 of an
        uninterrupted run, checkpoint_0 complete and sharded, the stage in effect."""
        job = self.first_job
        cmds = job.cmds
        problems = []
        sums = {1: set(), 4: set()}
        released = 0
        for r in (0, 1):
            a = job.answers(r)
            bad = [(cmds[i], a.get(i)) for i in range(5) if a.get(i, (None,))[0] != 0]
            if bad:
                problems.append(("the uninterrupted part of the first run failed",
                                 "rank %d: %s; %s" % (r, bad[:2], job.err_tail(2))))
            for i in sums:
                if a.get(i, (None,))[0] == 0:
                    sums[i].add(a[i][1])
            for l in job.lines(r):
                m = re.match(r"^released (\d+) of (\d+)$", l)
                if m:
                    released += int(m.group(1))
        if not problems and (len(sums[1]) != 1 or len(sums[4]) != 1):
            problems.append(("the ranks disagree on the parameters", str(sums)))
        B = checkpoints_in(project).get(0)
        if not problems:
            why = verify_checkpoint(B) if B else "no checkpoint_0"
            if why:
                problems.append(("checkpoint_0 is incomplete", why))
            else:
                with open(os.path.join(B, "manifest.json")) as f:
                    listed = [e["path"] for e in json.load(f)["files"]]
                if not set(SHARDS) <= set(listed):
                    problems.append(("the optimizer state is not sharded (stage not in effect)",
                                     "files: %s" % listed))
            if (stage == 3) != (released > 0):
                problems.append(("the stage is not in effect",
                                 "%d parameters refused between steps (stage 3: some; 1, 2: none)"
                                 % released))
        how = "setter deepspeed_config {zero_stage: 1}" if stage == 1 else " ".join(
            "%s=%s" % kv for kv in sorted(STAGES[stage][1].items()))
        self.tally(G_REF, "ZeRO-%d (%s): checksums %s at step 2, %s at step 4; %d parameter(s) "
                   "released between steps" % (stage, how, sums[1], sums[4], released), problems)
        if problems:
            return None
        return {"B": B, "sum2": sums[1].pop(), "sum4": sums[4].pop()}

    def check_resume(self, job, expect, ref, case):
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
            elif expect == 2 and a.get(2) != (0, ref["sum4"]):
                problems.append(("parameters differ from the uninterrupted run",
                                 "rank %d: %s, want %s" % (r, a.get(2), ref["sum4"])))
        self.tally(G_RESUME, case, problems)

    def kill_once(self, stage, project, point, k, ref, previous):
        """One run of the chain, killed at `point` of its last save. The first run (ref None)
        trains from scratch and saves twice, the others resume and save once."""
        label, how, rank, match, keep = point
        if keep is None:
            keep = round(self.rng.uniform(0.05, 0.95), 3)
        ck = checkpoints_in(project)
        expect = steps_of(ck[max(ck)]) if ck else None
        report = os.path.join(os.path.dirname(project), "kill-report-%d" % k)
        if ref is None:
            cmds, nth = ["train:2", "sum", "save:-", "train:2", "sum", "save:-"], 2
        else:
            cmds, nth = ["resume", "train:2", "sum", "save:-"], 1
        if how == "write":
            extra = {"LD_PRELOAD": self.preload, "KILL_AT_WRITE_MATCH": match,
                     "KILL_AT_WRITE_N": str(nth), "KILL_AT_WRITE_KEEP": str(keep),
                     "KILL_AT_WRITE_RANK": str(rank), "KILL_AT_WRITE_REPORT": report}
        else:
            extra = {"ZERO_FAULT_HOLD": match, "ZERO_FAULT_HOLD_SAVE": str(nth)}
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
        final = checkpoints_in(project)
        for n, d in sorted(final.items()):
            why = verify_checkpoint(d)
            if why:
                problems.append(("an incomplete checkpoint under a final name",
                                 "%s: %s" % (d, why)))
        # The killed save is always checkpoint_1's (the first run's second save, or the save
        # after a resume from checkpoint_0); the first run's first save makes checkpoint_0.
        if landed and sorted(final) != [0]:
            problems.append(("a save killed before its rename made a checkpoint",
                             "before %s, after %s" % (sorted(ck), sorted(final))))
        partial = os.path.join(project, "checkpoints", "checkpoint_1.partial")
        if how == "hold" and landed and match == "rename" and verify_checkpoint(partial):
            problems.append(("killed at the rename but the manifest is not complete",
                             verify_checkpoint(partial)))
        case = "ZeRO-%d at %s: %s; code %s; left %s" % (
            stage, label, landed or "no kill", rc, listing(partial))
        job.finish()
        if ref is None:
            self.first_job = job
        else:
            self.check_resume(job, expect, ref, "%s; then resumed" % previous)
        self.tally(G_KILL, case, problems)
        if landed is None:
            # No kill: the save may have completed; go on from checkpoint_0.
            for n, d in checkpoints_in(project).items():
                if n != 0:
                    shutil.rmtree(d, ignore_errors=True)
        if not self.suite.keep and os.path.exists(report):
            os.remove(report)
        return case

    # --------------------------------------------------------------------------------------------

    def damage_cases(self, B, kinds, work):
        """Copies of B, each with one kind of damage: [(label, dir, names, forged)]."""
        out = []
        for kind in kinds:
            d = os.path.join(work, "d%02d-%s" % (len(out), kind))
            shutil.copytree(B, d)
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
            elif kind == "copied-in":
                f = self.rng.choice(SHARDS)
                shutil.copyfile(os.path.join(self.foreign, f), os.path.join(d, f))
                out.append(("%s replaced by another run's (seed 2, 3 processes, ZeRO-2), as is"
                            % f, d, (f,), False))
            elif kind == "other-run":
                f = SHARDS[0]
                write_manifest_entry(d, f, read(os.path.join(self.foreign, f)))
                out.append(("%s replaced by another run's (seed 2, 3 processes, ZeRO-2, step 4; "
                            "the same parameters), manifest rewritten" % f, d, (f,), True))
            elif kind == "other-world":
                f = SHARDS[1]
                write_manifest_entry(d, f, read(os.path.join(self.foreign, f)))
                out.append(("%s replaced by a 3-process save's (other parameters), manifest "
                            "rewritten" % f, d, (f,), True))
            elif kind == "fewer-processes":
                edit_manifest(d, lambda m: m.__setitem__("num_processes", 1))
                out.append(("manifest.json says num_processes 1 (optimizer_0.rank_1 left out)",
                            d, ("manifest.json", SHARDS[1]), True))
            else:
                raise SetupError("unknown damage kind %s" % kind)
        return out

    def final_run(self, stage, project, ref, previous, kinds):
        """Resumes and saves to the end (checkpoint_1, live state G); then loads each damaged copy
        of B (restoring G after any that loads); then B itself."""
        B = ref["B"]
        work = self.suite.newdir("i-damage%d" % stage, fast=True)
        cases = self.damage_cases(B, kinds, work)
        G = os.path.join(project, "checkpoints", "checkpoint_1")
        before = os.path.join(work, "before")
        cmds = ["resume", "train:2", "sum", "save:-", "save:" + before]
        at = []
        for i, (_label, d, _names, _forged) in enumerate(cases):
            at.append(len(cmds))
            cmds += ["load:" + d, "sum", "save:" + os.path.join(work, "after%02d" % i),
                     "load:" + G]
        b_at = len(cmds)
        b2 = os.path.join(work, "B-resaved")
        cmds += ["load:" + B, "sum", "save:" + b2]
        ck = checkpoints_in(project)
        expect = steps_of(ck[max(ck)]) if ck else None
        job = RankJob(self, stage, 1, project, cmds)
        rc = job.launcher.wait(120)
        job.launcher.drain(5)
        ans = {r: job.answers(r) for r in (0, 1)}
        self.check_resume(job, expect, ref, "%s; then resumed" % previous)
        problems = []
        if any(ans[r].get(i, (None,))[0] != 0 for r in (0, 1) for i in (3, 4)):
            problems.append(("the resumed run's saves failed", "%s %s; %s" % (
                ans[0].get(3), ans[1].get(3), job.err_tail(2))))
        else:
            why = verify_checkpoint(G)
            if why:
                problems.append(("the resumed run's checkpoint is incomplete", why))
        self.tally(G_RESUME, "ZeRO-%d: the last run saves checkpoint_1 to the end" % stage,
                   problems)
        setup_ok = not problems
        for (label, d, names, forged), i in zip(cases, at):
            group = G_FORGED if forged else G_DAMAGE
            case = "ZeRO-%d: %s" % (stage, label)
            problems = []
            if not setup_ok:
                self.tally(group, case, [("the live state could not be set up", "")])
                continue
            loads = [ans[r].get(i) for r in (0, 1)]
            sums = [ans[r].get(i + 1) for r in (0, 1)]
            saves = [ans[r].get(i + 2) for r in (0, 1)]
            if None in loads or None in sums or None in saves:
                self.tally(group, case, [("the ranks died or hung at the damaged load",
                                          "code %s; answers %s; %s" % (
                                              rc, loads, job.err_tail(3)))])
                continue
            after = os.path.join(work, "after%02d" % at.index(i))
            if all(l[0] == 0 for l in loads):
                if saves[0][0] != 0:
                    state = "the live state could not be saved"
                elif not files_differ(after, B):
                    state = "the live state is B's"
                else:
                    state = "against B: %s" % files_differ(after, B)
                    lost = sorted(state_names(B) - state_names(after))
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
                        continue
                    if st not in CLEAR_STATUSES:
                        problems.append(("the refusal's status is not IO, STATE, SHAPE or DTYPE",
                                         "rank %d: %s %s" % (r, st, msg)))
                    if not any(n in msg for n in names):
                        problems.append(("the message does not name the damaged file (%s)" %
                                         " or ".join(names), "rank %d: %s" % (r, msg)))
                    if sums[r] != (0, ref["sum4"]):
                        problems.append(("the parameters differ after the failed load",
                                         "rank %d: %s, before %s" % (r, sums[r], ref["sum4"])))
                if saves[0][0] != 0:
                    problems.append(("save after the failed load failed", str(saves[0])))
                else:
                    dd = files_differ(before, after, exclude=())
                    if dd:
                        problems.append(("a failed load altered the live state", dd))
                outcome = "refused %s" % loads[0][1][:240]
            self.tally(group, "%s -> %s" % (case, outcome), problems)
        # The intact checkpoint still loads.
        problems = []
        got = [ans[r].get(b_at) for r in (0, 1)]
        if got != [(0, "step=2")] * 2:
            problems.append(("the intact checkpoint did not load after the refusals",
                             "%s; %s" % (got, job.err_tail(2))))
        elif [ans[r].get(b_at + 1) for r in (0, 1)] != [(0, ref["sum2"])] * 2:
            problems.append(("after loading the intact checkpoint the parameters are not its",
                             "%s, want %s" % ([ans[r].get(b_at + 1) for r in (0, 1)],
                                              ref["sum2"])))
        elif ans[0].get(b_at + 2, (None,))[0] != 0:
            problems.append(("save after loading the intact checkpoint failed",
                             str(ans[0].get(b_at + 2))))
        else:
            dd = files_differ(B, b2)
            if dd:
                problems.append(("the intact checkpoint loaded and saved again differs", dd))
        if rc != 0:
            problems.append(("the last run did not end well", "code %s: %s" % (
                rc, job.err_tail(3))))
        left = job.tracker.wait_gone(2.0)
        if left:
            problems.append(("processes left after the last run", str(left)))
        job.finish()
        self.tally(G_INTACT, "ZeRO-%d: after %d damaged loads, B loads: step 2, its checksum, a "
                   "save equal to B" % (stage, len(cases)), problems)
        self.suite.discard(work)

    # --------------------------------------------------------------------------------------------

    def run(self):
        quick = self.suite.quick
        for g in (G_REF, G_KILL, G_RESUME, G_DAMAGE, G_FORGED, G_INTACT):
            self.suite.tally.group(g)  # the table's order
        stages = [self.rng.choice([1, 2, 3])] if quick else [1, 2, 3]
        self.foreign_run()
        have_preload = os.path.isfile(self.preload)
        if not have_preload:
            self.suite.tally.violations.append((
                G_KILL, "-", "could not run: %s is missing (target kill_at_write)" % self.preload,
                "the kills inside writes were skipped; only the FIFO holds ran"))
        for s in stages:
            if quick:
                points = [self.rng.choice(KILL_POINTS[:4]), self.rng.choice(KILL_POINTS[4:9]),
                          self.rng.choice(KILL_POINTS[9:])]
                kinds = [self.rng.choice(["truncate", "flip"]),
                         self.rng.choice(["remove", "remove-listed", "copied-in"]),
                         self.rng.choice(["other-run", "other-world", "fewer-processes"])]
            else:
                points = list(KILL_POINTS)
                kinds = ["truncate", "flip", "remove", "remove-listed", "copied-in", "other-run",
                         "other-world", "fewer-processes"]
            if not have_preload:
                points = [p for p in points if p[1] != "write"]
            t = time.monotonic()
            self.chain(s, points, kinds)
            log("i: ZeRO-%d: %d kills, %d damaged loads in %.1f s" % (
                s, len(points), len(kinds), time.monotonic() - t))


def run(suite):
    ZeroFaults(suite).run()
