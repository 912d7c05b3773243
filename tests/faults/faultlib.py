"""What the fault-injection suite's groups share: the tally and its report, the processes a job
owns (found through /proc, killed at the end), children whose output lines are read as they
come, the environment a job starts with, checkpoint files, and launched training jobs of
fault_program. Python 3 standard library only."""

import ctypes
import json
import os
import re
import signal
import socket
import struct
import subprocess
import threading
import time
import zlib


class SetupError(Exception):
    """A fault's preparation failed: the fault is reported as not run."""


class ReplDied(Exception):
    """The repl process exited or stopped answering."""


ACCEL_OK = 0
ACCEL_ERR_IO = 5
CKPT_RE = re.compile(r"^checkpoint_(\d+)$")

# ------------------------------------------------------------------------------------------------
# Bookkeeping
# ------------------------------------------------------------------------------------------------


# The report's columns besides "lost": a problem whose kind says a process outlived its job, or
# that something did not end in time (whole words: "changed" is no hang).
LEFTOVER_RE = re.compile(r"\b(left|alive|still runs|outlived)\b")
HANG_RE = re.compile(r"\b(did not return|did not exit|hung|took longer|hangs?|past its deadline)\b")


def problem_column(kind):
    """'leftovers', 'hangs' or 'lost': where a problem of `kind` is counted."""
    k = kind.lower()
    if LEFTOVER_RE.search(k):
        return "leftovers"
    if HANG_RE.search(k):
        return "hangs"
    return "lost"


class Tally:
    """Per group: injections, injections observed as expected, injections with a problem of each
    column (lost: anything but a leftover process or a hang), and the violations."""

    COLUMNS = ("lost", "leftovers", "hangs")

    def __init__(self):
        self.groups = []  # display order
        self.injected = {}
        self.observed = {}
        self.counts = {}  # group -> {column: injections with such a problem}
        self.violations = []  # (group, case, kind, detail)
        self.notes = []

    def group(self, name):
        if name not in self.injected:
            self.groups.append(name)
            self.injected[name] = 0
            self.observed[name] = 0
            self.counts[name] = dict.fromkeys(self.COLUMNS, 0)

    def record(self, name, case, problems):
        """One injection of group `name`; `problems` is a list of (kind, detail)."""
        self.group(name)
        self.injected[name] += 1
        if not problems:
            self.observed[name] += 1
        for column in set(problem_column(kind) for kind, _detail in problems):
            self.counts[name][column] += 1
        for kind, detail in problems:
            self.violations.append((name, case, kind, detail))

    def note(self, text):
        self.notes.append(text)
        log("note: " + text)


T0 = time.monotonic()
VERBOSE = False


def log(text):
    print("[%7.2fs] %s" % (time.monotonic() - T0, text), flush=True)


def vlog(text):
    if VERBOSE:
        log(text)


# ------------------------------------------------------------------------------------------------
# Processes: /proc, tracking, cleanup
# ------------------------------------------------------------------------------------------------


def proc_stat(pid):
    """(state, ppid, pgid, starttime) of `pid`, or None when there is no such process."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read().decode("ascii", "replace")
    except OSError:
        return None
    rest = data[data.rindex(")") + 2:].split()
    return rest[0], int(rest[1]), int(rest[2]), int(rest[19])


def all_processes():
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = proc_stat(int(name))
            if st:
                out[int(name)] = st
    return out


class Tracker:
    """Every process a job owns: the pids its ranks print, the launcher's children, and every
    process in a rank's process group. A process counts as gone once it has exited (a zombie, or
    its pid reused by a process with another start time)."""

    def __init__(self):
        self.procs = {}  # pid -> (starttime, why)
        self.rank_pids = set()
        self.parents = set()

    def add(self, pid, why):
        st = proc_stat(pid)
        if st and pid not in self.procs:
            self.procs[pid] = (st[3], why)

    def scan(self):
        for pid, (state, ppid, pgid, start) in all_processes().items():
            if pid in self.procs:
                continue
            if ppid in self.parents:
                self.procs[pid] = (start, "child of pid %d" % ppid)
            elif pgid in self.rank_pids:
                self.procs[pid] = (start, "in the process group of rank pid %d" % pgid)

    def alive(self):
        """[(pid, why, state)] of tracked processes that still run (zombies do not)."""
        reap(list(self.procs))
        out = []
        for pid, (start, why) in list(self.procs.items()):  # reader threads may add meanwhile
            st = proc_stat(pid)
            if st and st[3] == start and st[0] not in "ZX":
                out.append((pid, why, st[0]))
        return out

    def wait_gone(self, seconds):
        """Scans once more, then waits up to `seconds` for every tracked process to be gone;
        returns those still alive."""
        self.scan()
        deadline = time.monotonic() + seconds
        while True:
            left = self.alive()
            if not left or time.monotonic() >= deadline:
                return left
            time.sleep(0.02)

    def kill_all(self):
        for pid, (start, _why) in list(self.procs.items()):
            st = proc_stat(pid)
            if st and st[3] == start and st[0] not in "ZX":
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        time.sleep(0.05)
        reap(self.procs)


ALL_TRACKERS = []


def reap(pids):
    """Reaps the zombies among `pids` that are our children (we are a subreaper: orphaned ranks
    of a killed launcher become our children)."""
    for pid in list(pids):
        try:
            os.waitpid(pid, os.WNOHANG)
        except OSError:
            pass


def become_subreaper():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_CHILD_SUBREAPER = 36
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except Exception:  # noqa: BLE001 - not Linux, or no libc: orphans go to init
        return False


class Proc:
    """A child process whose stdout and stderr lines are read as they come, with the time each
    arrived; `on_line(t, line)` runs on the reader thread for every stdout line."""

    def __init__(self, argv, env, on_line=None, stdin=False, preexec=None):
        self.argv = argv
        self.out = []
        self.err = []
        self.cond = threading.Condition()
        self.open_streams = 2
        self.on_line = on_line
        self.p = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=preexec,
        )
        self.pid = self.p.pid
        self.started = time.monotonic()
        for stream, store, cb in ((self.p.stdout, self.out, on_line), (self.p.stderr, self.err, None)):
            threading.Thread(target=self._read, args=(stream, store, cb), daemon=True).start()

    def _read(self, stream, store, cb):
        fd = stream.fileno()
        buf = b""
        while True:
            try:
                data = os.read(fd, 65536)
            except OSError:
                data = b""
            if not data:
                break
            t = time.monotonic()
            buf += data
            while b"\n" in buf:
                raw, buf = buf.split(b"\n", 1)
                line = raw.decode("utf-8", "replace")
                with self.cond:
                    store.append((t, line))
                    self.cond.notify_all()
                if cb:
                    try:
                        cb(t, line)
                    except Exception as e:  # noqa: BLE001 - a driver bug must not hang the run
                        log("internal error in a line callback: %r" % e)
        if buf:
            with self.cond:
                store.append((time.monotonic(), buf.decode("utf-8", "replace")))
        with self.cond:
            self.open_streams -= 1
            self.cond.notify_all()

    def wait_line(self, pred, timeout, start=0):
        """The first stdout (t, line) from index `start` with pred(line), or None."""
        deadline = time.monotonic() + timeout
        with self.cond:
            i = start
            while True:
                while i < len(self.out):
                    if pred(self.out[i][1]):
                        return self.out[i]
                    i += 1
                left = deadline - time.monotonic()
                if left <= 0 or (self.open_streams == 0):
                    return None
                self.cond.wait(min(left, 0.1))

    def wait(self, timeout):
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def drain(self, timeout):
        """Waits up to `timeout` for both pipes to reach EOF (every writer gone)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while self.open_streams > 0 and time.monotonic() < deadline:
                self.cond.wait(0.05)
            return self.open_streams == 0

    def out_lines(self):
        with self.cond:
            return [l for _t, l in self.out]

    def err_lines(self):
        with self.cond:
            return [l for _t, l in self.err]

    def kill(self):
        try:
            self.p.kill()
        except OSError:
            pass
        self.wait(5)


# ------------------------------------------------------------------------------------------------
# Environment and files
# ------------------------------------------------------------------------------------------------


def base_env(extra=None):
    env = {
        k: v
        for k, v in os.environ.items()
        if not (k.startswith("ACCEL") or k.startswith("ACCELERATE") or k.startswith("MALLOC_"))
        and k
        not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                "GROUP_RANK", "ROLE_RANK", "TORCHELASTIC_RUN_ID", "OMP_NUM_THREADS", "HF_HOME",
                "XDG_CACHE_HOME", "LD_PRELOAD")
    }
    env["HF_HOME"] = "/nonexistent-hf-home"
    env["ACCEL_RENDEZVOUS_TIMEOUT"] = "10"
    env["ACCEL_COLLECTIVE_TIMEOUT"] = "5"
    if extra:
        env.update(extra)
    return env


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def list_files(d):
    """{relative path: bytes} of every regular file below d."""
    out = {}
    for root, _dirs, files in os.walk(d):
        for name in files:
            p = os.path.join(root, name)
            with open(p, "rb") as f:
                out[os.path.relpath(p, d)] = f.read()
    return out


def diff_dirs(a, b):
    """'' when the two trees hold the same files with the same bytes; else what differs."""
    fa, fb = list_files(a), list_files(b)
    problems = []
    for name in sorted(set(fa) | set(fb)):
        if name not in fa:
            problems.append("%s only in the second" % name)
        elif name not in fb:
            problems.append("%s only in the first" % name)
        elif fa[name] != fb[name]:
            problems.append("%s differs" % name)
    return ", ".join(problems)


def verify_checkpoint(d):
    """'' when `d` is complete per its manifest (every file's size and CRC-32), else why not."""
    try:
        with open(os.path.join(d, "manifest.json"), "rb") as f:
            m = json.loads(f.read())
        for e in m["files"]:
            with open(os.path.join(d, e["path"]), "rb") as f:
                data = f.read()
            if len(data) != e["size"] or (zlib.crc32(data) & 0xFFFFFFFF) != e["crc32"]:
                return "%s does not match the manifest" % e["path"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        return "%s: %s" % (type(e).__name__, e)
    return ""


def without_save_ids(name, data):
    """A checkpoint file's bytes as compared across saves of the same state: a safetensors file's
    header without the libaccel_* metadata that ties a per-rank file to its save (its save's id,
    rank and number of processes), parsed, and its data."""
    if not name.endswith(".safetensors") or len(data) < 8:
        return data
    (length,) = struct.unpack_from("<Q", data, 0)
    try:
        header = json.loads(data[8:8 + length])
    except ValueError:
        return data
    meta = {k: v for k, v in header.get("__metadata__", {}).items()
            if not k.startswith("libaccel_")}
    header["__metadata__"] = meta
    return json.dumps(header, sort_keys=True).encode() + data[8 + length:]


def write_manifest_entry(d, fname, data):
    """Writes `data` to d/fname and updates its size and CRC-32 in d/manifest.json."""
    p = os.path.join(d, fname)
    with open(p, "r+b") as f:
        f.truncate(0)
        f.write(data)
    mp = os.path.join(d, "manifest.json")
    with open(mp) as f:
        m = json.load(f)
    for e in m["files"]:
        if e["path"] == fname:
            e["size"] = len(data)
            e["crc32"] = zlib.crc32(data) & 0xFFFFFFFF
    with open(mp, "r+") as f:
        f.truncate(0)
        f.write(json.dumps(m, indent=2) + "\n")


def checkpoints_in(project):
    """{n: path} of the directories named checkpoint_<n> under project/checkpoints."""
    d = os.path.join(project, "checkpoints")
    out = {}
    if os.path.isdir(d):
        for name in os.listdir(d):
            m = CKPT_RE.match(name)
            if m:
                out[int(m.group(1))] = os.path.join(d, name)
    return out


def steps_of(ckpt_dir):
    with open(os.path.join(ckpt_dir, "custom_0.bin"), "rb") as f:
        return int(f.read().decode())


# ------------------------------------------------------------------------------------------------
# Launched training jobs
# ------------------------------------------------------------------------------------------------

RANK_LINE = re.compile(r"^pid=(\d+) rank=(\d+) ready$")


class Launched:
    """Processes a fault group starts, tracked: `accel launch -n N --grace_period G PROGRAM ...`
    (start_launcher) or ranks started directly (start_rank). A rank that prints RANK_LINE is
    recorded in rank_pid and tracked (rank_ready then runs); every other stdout line goes to
    on_line, on the reader thread. The one launch helper of Job, faults_stream.Run and
    faults_zero.RankJob: a subclass sets what its on_line reads before it starts anything."""

    def __init__(self):
        self.tracker = Tracker()
        ALL_TRACKERS.append(self.tracker)
        self.rank_pid = {}
        self.procs = []
        self.launcher = None

    def start_launcher(self, suite, n, argv, env, launch_flags=()):
        """`accel launch -n n --grace_period <suite.grace> [launch_flags] argv...`."""
        full = [suite.cli, "launch", "-n", str(n), "--grace_period", str(suite.grace)] + list(
            launch_flags) + list(argv)
        self.launcher = Proc(full, env, on_line=self._line)
        self.tracker.parents.add(self.launcher.pid)
        self.tracker.add(self.launcher.pid, "the launcher")
        self.procs.append(self.launcher)
        return self.launcher

    def start_rank(self, rank, argv, env):
        """One rank started directly (its environment in `env`)."""
        p = Proc(argv, env, on_line=self._line)
        self.procs.append(p)
        self.tracker.add(p.pid, "rank %d (started directly)" % rank)
        return p

    def _line(self, t, line):
        m = RANK_LINE.match(line)
        if m:
            pid, rank = int(m.group(1)), int(m.group(2))
            self.rank_pid[rank] = pid
            self.tracker.rank_pids.add(pid)
            self.tracker.add(pid, "rank %d" % rank)
            self.rank_ready(rank)
            return
        self.on_line(t, line)

    def rank_ready(self, rank):
        pass

    def on_line(self, t, line):
        pass

    def lines(self, rank=None):
        """Every stdout line; with `rank`, that rank's "r<rank> " lines without the prefix."""
        out = []
        for p in self.procs:
            out.extend(p.out_lines())
        if rank is None:
            return out
        prefix = "r%d " % rank
        return [l[len(prefix):] for l in out if l.startswith(prefix)]

    def err_lines(self):
        out = []
        for p in self.procs:
            out.extend(p.err_lines())
        return out

    def kill_rank(self, rank, sig=signal.SIGKILL):
        pid = self.rank_pid.get(rank)
        if pid:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
            self.tracker.scan()  # after the signal, so that it does not delay it

    def finish(self, drain_s=2):
        """Kills whatever is left (only processes this started) and reads their last lines."""
        self.tracker.kill_all()
        for p in self.procs:
            if p.wait(0) is None:
                p.kill()
            p.drain(drain_s)


class Job(Launched):
    """`accel launch -n 2 fault_program train ...` with its ranks tracked.

    `trigger`: (line, delay_s, action) - when rank 1 prints `line`, `action(job)` runs after
    `delay_s` on the reader thread (busy-waiting the last 2 ms, so the delay is precise)."""

    def __init__(self, suite, project, steps, extra_env=None, trigger=None, launcher=True,
                 rounds=None, kind="mixed", model=None, save_every=None, launch_flags=()):
        super().__init__()
        self.suite = suite
        self.trigger = trigger
        self.fired = None  # monotonic time of the action
        self.fired_event = threading.Event()
        self.ready = threading.Event()
        args = ["train", str(steps), str(save_every or suite.save_every), project,
                str(suite.rounds if rounds is None else rounds), kind] + ([model] if model else [])
        env = base_env(extra_env)
        if launcher:
            self.start_launcher(suite, 2, [suite.program] + args, env, launch_flags)
        else:
            port = str(free_port())
            for r in (0, 1):
                self.start_rank(r, [suite.program] + args,
                                dict(env, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(r),
                                     WORLD_SIZE="2", LOCAL_RANK=str(r), LOCAL_WORLD_SIZE="2"))

    def rank_ready(self, rank):
        if len(self.rank_pid) == 2:
            self.ready.set()

    def on_line(self, t, line):
        trig = self.trigger
        if trig and self.fired is None and line == trig[0]:
            target = t + trig[1]
            while True:
                left = target - time.monotonic()
                if left <= 0:
                    break
                if left > 0.002:
                    time.sleep(left - 0.002)
            self.fired = time.monotonic()
            trig[2](self)
            self.fired_event.set()


def classify(r1_lines):
    """Where rank 1 was when it died, from the last line it printed."""
    if not r1_lines:
        return "startup"
    last = r1_lines[-1]
    if last.startswith("saving "):
        return "save"
    if last == "loading":
        return "load"
    if last.startswith("collective "):
        return "collective"
    # "step n", "loaded ...", "saved n", "collectives done n": inside the training loop
    return "train"


def report(tally, seconds, seed):
    print()
    print("fault-injection suite: seed %d, %.0f s" % (seed, seconds))
    width = max([len(g) for g in tally.groups] + [5])
    cols = ("injected", "observed") + Tally.COLUMNS
    print("%-*s  %s" % (width, "fault", "  ".join("%9s" % c for c in cols)))
    print("-" * (width + 2 + 11 * len(cols)))
    totals = dict.fromkeys(cols, 0)
    for g in tally.groups:
        row = dict(tally.counts[g], injected=tally.injected[g], observed=tally.observed[g])
        for c in cols:
            totals[c] += row[c]
        print("%-*s  %s" % (width, g, "  ".join("%9d" % row[c] for c in cols)))
    print("-" * (width + 2 + 11 * len(cols)))
    print("%-*s  %s" % (width, "total", "  ".join("%9d" % totals[c] for c in cols)))
    if tally.notes:
        print("\nnotes:")
        for n in tally.notes:
            print("  " + n)
    if not tally.violations:
        print("\nno violations")
        return
    print("\nviolations (%d), by group and kind, with examples:" % len(tally.violations))
    kinds = {}
    for group, case, kind, detail in tally.violations:
        kinds.setdefault((group, kind), []).append((case, detail))
    for (group, kind), items in kinds.items():
        print("\n  [%s] %s: %d" % (group, kind, len(items)))
        for case, detail in items[:3]:
            print("      case:   %s" % case)
            if detail:
                print("      detail: %s" % detail[:600])
        if len(items) > 3:
            print("      ... and %d more" % (len(items) - 3))
