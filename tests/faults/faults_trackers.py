"""Fault group g of the fault-injection suite (fault_suite.py): SIGKILL of the main process at
every write of each tracker, then a resume in the same directory.

fault_program trains on 2 processes under `accel launch`, saves a checkpoint after every step and
then logs loss = 1/(n+1) and a text of TEXT_BYTES bytes at step n (FAULT_LOG_TEXT) to every tracker:
TensorBoard, JSONL and CSV (log_with all) and a custom one of its own (custom-<pid>.log). Rank 0
runs with kill_at_write.so preloaded, which kills it inside its k-th write to the tracker's files
(the metrics and the hparams files) after a random part of that write reached the file. For each
tracker, k = 1, 2, ... until a run ends without being killed (every write was hit once; --quick:
two writes of each, drawn). The run then resumes in the same project: alternately by the
launcher itself (--max_restarts 1) and by a fresh `accel launch`. After the resumed run:
  - the launcher returned in time (137 for the killed run alone, 0 once resumed), and no process
    of the job is alive 2 s after;
  - every line of metrics.jsonl parses, every row of metrics.csv has the header's four fields,
    every record of each event file is whole (a cut record only at the end of a file the killed
    run wrote), every line of the custom file ends with its newline but the killed run's last;
  - every step whose accel_log returned ("r0 logged n", either run) is in each of the four once,
    with its values exact, and no step is in any of them twice;
  - what the killed run left of metrics.jsonl and metrics.csv up to their last newline is an exact
    prefix of the files now; a cut last line went whole to <file>.torn-<n> and rank 0's log has
    the WARNING naming it.
Then the issue's own form, 4 times (--quick: once): texts of 2 MB, rank 0 SIGKILLed from outside as
soon as metrics.jsonl or metrics.csv grows past a drawn point inside a record (a thread watches its
size), a fresh launch resumes; the same checks.
"""

import csv
import glob
import io
import json
import os
import struct
import sys
import time

from faultlib import Job, SetupError, log, vlog

STEPS = 3
TEXT_BYTES = 3000
BIG_TEXT_BYTES = 2000000  # the outside kills: a text of 2 MB, a record of each file being written for ~1 ms
csv.field_size_limit(sys.maxsize)  # the large texts' fields
PROJECT = "faults"  # fault_program's init_trackers project: the run directory's name
MATCHES = {
    "tensorboard": "events.out.tfevents.,hparams.yml",
    "jsonl": "metrics.jsonl,hparams.json",
    "csv": "metrics.csv,hparams.csv",
    "custom": "custom-",
}
MAX_WRITES = 40  # more writes than this for one tracker would mean a runaway loop


def expected_text(n, size):
    """fault_program's tracker_text."""
    head = "%d:" % n
    return head + "".join(chr(ord("a") + (n + i) % 26) for i in range(len(head), size))


# ------------------------------------------------------------------------------------------------
# TensorBoard's event files, read with the standard library
# ------------------------------------------------------------------------------------------------


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


CRC32C = _crc32c_table()


def masked_crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = CRC32C[(c ^ b) & 0xFF] ^ (c >> 8)
    c ^= 0xFFFFFFFF
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def proto_fields(data):
    """(field number, wire type, value) of a protobuf message: ints for varints and fixed, bytes
    for length-delimited fields."""
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        num, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
        elif wire == 1:
            value, at = data[at:at + 8], at + 8
        elif wire == 5:
            value, at = data[at:at + 4], at + 4
        elif wire == 2:
            size, at = _varint(data, at)
            value, at = data[at:at + size], at + size
        else:
            raise ValueError("wire type %d" % wire)
        yield num, wire, value


def _varint(data, at):
    value = shift = 0
    while True:
        b = data[at]
        at += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, at


def event_records(path):
    """(the records' payloads, the bytes after the last whole record) of an event file; raises
    ValueError for a record whose CRC does not match."""
    data = open(path, "rb").read()
    at, out = 0, []
    while at + 12 <= len(data):
        (length,) = struct.unpack_from("<Q", data, at)
        if struct.unpack_from("<I", data, at + 8)[0] != masked_crc32c(data[at:at + 8]):
            raise ValueError("bad length CRC at byte %d" % at)
        end = at + 12 + length + 4
        if end > len(data):
            break
        payload = data[at + 12:end - 4]
        if struct.unpack_from("<I", data, end - 4)[0] != masked_crc32c(payload):
            raise ValueError("bad data CRC at byte %d" % at)
        out.append(payload)
        at = end
    return out, len(data) - at


def event_values(payload):
    """[(step, tag, float or None)] of one Event: scalars with their value, other summaries
    (texts) with None."""
    step, values = 0, []
    for num, _wire, value in proto_fields(payload):
        if num == 2:
            step = value
        elif num == 5:
            for vnum, _w, v in proto_fields(value):
                if vnum != 1:
                    continue
                tag, number = None, None
                for fnum, fwire, f in proto_fields(v):
                    if fnum == 1:
                        tag = f.decode()
                    elif fnum == 2 and fwire == 5:
                        number = struct.unpack("<f", f)[0]
                values.append((tag, number))
    return [(step, tag, number) for tag, number in values]


# ------------------------------------------------------------------------------------------------
# Reading a run back
# ------------------------------------------------------------------------------------------------


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


class Seen:
    """Which (step, tag) each reader found, how often, and what was wrong with it."""

    def __init__(self, what):
        self.what = what
        self.count = {}
        self.problems = []

    def add(self, step, tag, ok=True, detail=""):
        self.count[(step, tag)] = self.count.get((step, tag), 0) + 1
        if not ok:
            self.problems.append(("a value read back differs",
                                  "%s step %s %s: %s" % (self.what, step, tag, detail)))

    def check(self, promised, tags):
        out = list(self.problems)
        for key, n in sorted(self.count.items()):
            if n > 1:
                out.append(("a step is in a file more than once",
                            "%s step %s %s: %d times" % (self.what, key[0], key[1], n)))
        for s in sorted(promised):
            for tag in tags:
                if (s, tag) not in self.count:
                    out.append(("a logged step was lost",
                                "%s has no %s at step %d" % (self.what, tag, s)))
        return out


def read_jsonl(path, size):
    seen, problems = Seen("metrics.jsonl"), []
    data = open(path, "rb").read() if os.path.exists(path) else b""
    if data and not data.endswith(b"\n"):
        problems.append(("a torn record in the middle or at the end", "metrics.jsonl ends without "
                         "a newline after the resumed run"))
    for n, line in enumerate(data.split(b"\n")[:-1] if data else []):
        try:
            rec = json.loads(line)
            step, values = rec["step"], rec["values"]
            if not isinstance(step, int) or not isinstance(values, dict):
                raise TypeError("step %r, values %r" % (step, type(values).__name__))
        except (ValueError, KeyError, TypeError) as e:
            problems.append(("a line of metrics.jsonl does not parse",
                             "line %d (%s): %r" % (n + 1, e, line[:120])))
            continue
        seen.add(step, "loss", values.get("loss") == 1.0 / (step + 1), values.get("loss"))
        seen.add(step, "text", values.get("text") == expected_text(step, size),
                 (values.get("text") or "")[:40])
    return seen, problems


def read_csv(path, size):
    seen, problems = Seen("metrics.csv"), []
    data = open(path, "rb").read().decode() if os.path.exists(path) else ""
    if data and not data.endswith("\n"):
        problems.append(("a torn record in the middle or at the end", "metrics.csv ends without "
                         "a newline after the resumed run"))
    rows = list(csv.reader(io.StringIO(data)))
    if not rows or rows[0] != ["wall_time", "step", "tag", "value"]:
        problems.append(("metrics.csv lost its header", repr(rows[:1])))
    for n, row in enumerate(rows[1:]):
        if len(row) != 4:
            problems.append(("a row of metrics.csv does not have the header's fields",
                             "row %d: %d fields: %r" % (n + 2, len(row), str(row)[:120])))
            continue
        try:
            step, tag, value = int(row[1]), row[2], row[3]
            ok = float(value) == 1.0 / (step + 1) if tag == "loss" else (
                value == expected_text(step, size))
        except ValueError as e:
            problems.append(("a row of metrics.csv does not parse", "row %d: %s" % (n + 2, e)))
            continue
        seen.add(step, tag, ok, value[:40])
    return seen, problems


def read_events(run_dir, before_resume):
    """Every event file of the run directory; a cut record is allowed at the end of a file that
    existed before the resume (the killed run's)."""
    seen, problems = Seen("TensorBoard"), []
    for path in sorted(glob.glob(os.path.join(run_dir, "events.out.tfevents.*"))):
        name = os.path.basename(path)
        try:
            records, tail = event_records(path)
        except ValueError as e:
            problems.append(("an event file has a damaged record", "%s: %s" % (name, e)))
            continue
        if tail and name not in before_resume:
            problems.append(("a torn record in the middle or at the end",
                             "%s (written after the resume) ends in %d bytes of a cut record" % (
                                 name, tail)))
        for payload in records[1:]:  # the first is the file version
            for step, tag, number in event_values(payload):
                if tag == "loss":
                    seen.add(step, tag, number == f32(1.0 / (step + 1)), number)
                elif tag and tag.startswith("text"):
                    seen.add(step, "text")
    return seen, problems


def read_custom(project, size):
    seen, problems = Seen("the custom tracker"), []
    for path in sorted(glob.glob(os.path.join(project, "custom-*.log"))):
        data = open(path).read()
        # The program's own file: its last line may be cut by the kill (not libaccel's to mend).
        for line in data.split("\n")[:-1]:
            parts = line.split()
            if len(parts) != 6 or parts[0] != "step":
                problems.append(("a line of the custom tracker's file is damaged", repr(line[:80])))
                continue
            try:
                step = int(parts[1])
                seen.add(step, "loss", float(parts[3]) == 1.0 / (step + 1), parts[3])
                seen.add(step, "text", int(parts[5]) == size, parts[5])
            except ValueError:
                problems.append(("a line of the custom tracker's file is damaged", repr(line[:80])))
    return seen, problems


def check_repairs(run_dir, snapshot, err_lines):
    """What the killed run left of each appended file, up to its last newline, is a prefix of the
    file now; a cut last line is in a .torn file, named by a warning."""
    problems = []
    for name, before in snapshot.items():
        path = os.path.join(run_dir, name)
        now = open(path, "rb").read() if os.path.exists(path) else b""
        whole = before[:before.rfind(b"\n") + 1]
        if not now.startswith(whole):
            problems.append(("the earlier bytes of a file changed",
                             "%s: the killed run's %d whole bytes are not a prefix" % (
                                 name, len(whole))))
        tail = before[len(whole):]
        if not tail:
            continue
        aside = [p for p in glob.glob(path + ".torn-*") if open(p, "rb").read() == tail]
        if not aside:
            problems.append(("a torn record was not kept aside",
                             "%s: no %s.torn-<n> holds its %d cut bytes" % (name, name, len(tail))))
            continue
        if not any("WARNING" in l and aside[0] in l for l in err_lines):
            problems.append(("the repair was not said through the logger",
                             "no WARNING naming %s on rank 0's stderr" % aside[0]))
    return problems


def check_hparams(run_dir):
    problems = []
    try:
        json.load(open(os.path.join(run_dir, "hparams.json")))
        with open(os.path.join(run_dir, "hparams.csv")) as f:
            if f.readline() != "key,value\n":
                raise ValueError("hparams.csv header")
        if not open(os.path.join(run_dir, "hparams.yml")).read().endswith("\n"):
            raise ValueError("hparams.yml is cut")
    except (OSError, ValueError) as e:
        problems.append(("the resumed run's hparams files are not whole", str(e)))
    return problems


# ------------------------------------------------------------------------------------------------
# The group
# ------------------------------------------------------------------------------------------------


def check_run(project, promised, before, snapshot, err, size, steps):
    """The files of a killed and resumed run (see the module's docstring)."""
    run_dir = os.path.join(project, PROJECT)
    problems = []
    for seen, read_problems in (read_jsonl(os.path.join(run_dir, "metrics.jsonl"), size),
                                read_csv(os.path.join(run_dir, "metrics.csv"), size),
                                read_events(run_dir, before), read_custom(project, size)):
        problems += read_problems + seen.check(promised, ("loss", "text"))
    problems += check_repairs(run_dir, snapshot, err) + check_hparams(run_dir)
    # A kill after a step's save and before its log returned leaves that step unlogged (the
    # resumed run starts after it); every other step was logged by one run or the other.
    if len(promised) < steps - 1 or not promised <= set(range(1, steps + 1)):
        problems.append(("the resumed run did not log to the end",
                         "steps logged: %s" % sorted(promised)))
    return problems


def killed_attempts_files(job, run_dir):
    """The event files of a restarted job's first attempt: named with its rank 0's pid."""
    pids = [l.split()[0][4:] for l in job.lines() if l.endswith(" rank=0 ready")]
    names = os.listdir(run_dir) if os.path.isdir(run_dir) else []
    return {n for n in names if pids and ".%s." % pids[0] in n}


def logged_steps(job):
    return {int(l.split()[1]) for l in job.lines(0) if l.startswith("logged ")}


def process_problems(job, rc):
    """A launcher that did not return, processes of the job alive 2 s after it did."""
    problems = []
    if rc is None:
        problems.append(("the launcher did not return within 60 s", " ".join(job.launcher.argv)))
    left = job.tracker.wait_gone(2.0)
    if left:
        problems.append(("processes left 2 s after the launcher returned",
                         "; ".join("pid %d (%s, state %s)" % x for x in left)))
    job.launcher.drain(3)
    job.finish()
    return problems


def run_job(suite, project, env, launch_flags=(), steps=STEPS):
    """A job to its end; (job, return code or None, problems with its processes)."""
    job = Job(suite, project, steps, extra_env=env, rounds=0, save_every=1,
              launch_flags=launch_flags)
    rc = job.launcher.wait(60)
    return job, rc, process_problems(job, rc)


def one_case(suite, tracker, k, restart):
    """Kill at write k of `tracker`'s files, resume, check. Returns (killed, problems, case)."""
    project = suite.newdir("g-%s-%d" % (tracker, k))
    report = os.path.join(project, "kill-report")
    keep = suite.rng.choice([0.0, 1.0, suite.rng.random(), suite.rng.random()])
    env = {"ACCEL_LOG_WITH": "all", "FAULT_LOG_TEXT": str(TEXT_BYTES),
           "LD_PRELOAD": os.path.join(os.path.dirname(suite.program), "kill_at_write.so"),
           "KILL_AT_WRITE_MATCH": MATCHES[tracker], "KILL_AT_WRITE_N": str(k),
           "KILL_AT_WRITE_KEEP": "%.4f" % keep, "KILL_AT_WRITE_RANK": "0",
           "KILL_AT_WRITE_REPORT": report}
    flags = ("--max_restarts", "1") if restart else ()
    job, rc, problems = run_job(suite, project, env, flags)
    run_dir = os.path.join(project, PROJECT)
    if not os.path.exists(report):
        suite.discard(project)
        if rc != 0 or problems:
            problems.append(("a run without a kill failed", "code %s: %s" % (
                rc, " | ".join(job.err_lines()[-3:]))))
        return False, problems, "%s: no write %d" % (tracker, k)
    hit = open(report).read().split()
    case = "%s: killed in write %s of %s after %s of %s bytes, resumed by %s" % (
        tracker, hit[1], hit[0], hit[2], hit[3], "--max_restarts" if restart else "a fresh launch")
    promised = logged_steps(job)
    err = job.err_lines()
    if restart:
        if rc != 0:
            problems.append(("the restarted job failed", "code %s: %s" % (rc, " | ".join(err[-3:]))))
        # The files as the killed attempt left them are gone by now: the prefix check needs the
        # fresh-launch cases, which run the two attempts apart.
        snapshot = {}
        before = killed_attempts_files(job, run_dir)
    else:
        if rc != 137:
            problems.append(("the killed run's launcher's exit code is not 137", "code %s" % rc))
        before = set(os.listdir(run_dir)) if os.path.isdir(run_dir) else set()
        snapshot = {n: open(os.path.join(run_dir, n), "rb").read()
                    for n in ("metrics.jsonl", "metrics.csv") if n in before}
        os.unlink(report)
        env2 = {k2: v for k2, v in env.items() if not k2.startswith(("KILL_AT", "LD_PRELOAD"))}
        job2, rc2, problems2 = run_job(suite, project, env2)
        problems += problems2
        if rc2 != 0:
            problems.append(("the resumed run failed", "code %s: %s" % (
                rc2, " | ".join(job2.err_lines()[-3:]))))
        promised |= logged_steps(job2)
        err = err + job2.err_lines()
    if not problems:
        problems = check_run(project, promised, before, snapshot, err, TEXT_BYTES, STEPS)
    if not problems:
        suite.discard(project)
    return True, problems, "%s: %s" % (project, case)


def outside_kill_case(suite, n):
    """The issue's own form: a large text logged every step, rank 0 SIGKILLed from outside while
    it writes some step's record (a thread watches the file grow), a fresh launch resumes."""
    steps, size = 4, BIG_TEXT_BYTES
    project = suite.newdir("g-outside-%d" % n)
    env = {"ACCEL_LOG_WITH": "all", "FAULT_LOG_TEXT": str(size)}
    watched = ("metrics.jsonl", "metrics.csv")[n % 2]
    after = suite.rng.randrange(1, steps - 1)  # steps logged whole before the kill
    # The kill comes once the file holds that many records and part of the next.
    threshold = after * (size + 100) + int(suite.rng.uniform(0.05, 0.95) * size)
    path = os.path.join(project, PROJECT, watched)
    job = Job(suite, project, steps, extra_env=env, rounds=0, save_every=1)
    job.ready.wait(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and job.launcher.wait(0) is None:
        try:
            if os.stat(path).st_size > threshold:
                job.kill_rank(0)
                break
        except OSError:
            pass
        time.sleep(0.00005)
    rc = job.launcher.wait(60)
    problems = process_problems(job, rc)
    case = "%s: rank 0 killed once %s passed %d bytes (%d records and part of one)" % (
        project, watched, threshold, after)
    if rc != 137:
        return problems + [("the kill did not come", "code %s" % rc)], case
    run_dir = os.path.join(project, PROJECT)
    before = set(os.listdir(run_dir))
    snapshot = {n: open(os.path.join(run_dir, n), "rb").read()
                for n in ("metrics.jsonl", "metrics.csv") if n in before}
    job2, rc2, problems2 = run_job(suite, project, env, steps=steps)
    problems += problems2
    if rc2 != 0:
        problems.append(("the resumed run failed", "code %s: %s" % (
            rc2, " | ".join(job2.err_lines()[-3:]))))
    if not problems:
        problems = check_run(project, logged_steps(job) | logged_steps(job2), before, snapshot,
                             job.err_lines() + job2.err_lines(), size, steps)
    torn = [n for n, b in snapshot.items() if b and not b.endswith(b"\n")]
    case += ", torn: %s" % (", ".join(torn) or "none")
    if not problems:
        suite.discard(project)
    return problems, case


def run(suite):
    if not os.path.exists(os.path.join(os.path.dirname(suite.program), "kill_at_write.so")):
        raise SetupError("g: kill_at_write.so is not beside %s" % suite.program)
    group = "g. SIGKILL at a tracker's write, resumed"
    case_no = 0
    for tracker in ("tensorboard", "jsonl", "csv", "custom"):
        ks = range(1, MAX_WRITES + 1)
        if suite.quick:  # two writes, drawn among the first few (a tracker writes at least STEPS + 1 times)
            ks = sorted(suite.rng.sample(range(1, STEPS + 2), 2))
        hits = 0
        for k in ks:
            case_no += 1
            killed, problems, case = one_case(suite, tracker, k, restart=case_no % 2 == 0)
            if not killed:
                if problems:
                    suite.tally.record("%s / %s" % (group, tracker), case, problems)
                break
            hits += 1
            vlog("g: " + case + (" OK" if not problems else " PROBLEMS %s" % problems))
            suite.tally.record("%s / %s" % (group, tracker), case, problems)
        else:
            if not suite.quick:
                suite.tally.violations.append((group, tracker, "a run never ended unkilled",
                                               "more than %d writes" % MAX_WRITES))
        if hits == 0:  # the preload no longer reaches the tracker's writes: nothing was injected
            suite.tally.violations.append((group, tracker, "no write of the tracker was hit",
                                           "kill_at_write.so saw none of %s" % MATCHES[tracker]))
        log("g: %s: %d writes hit" % (tracker, hits))
    torn = 0
    for n in range(1 if suite.quick else 4):
        problems, case = outside_kill_case(suite, n)
        torn += "torn: none" not in case
        vlog("g: " + case + (" OK" if not problems else " PROBLEMS %s" % problems))
        suite.tally.record("g. SIGKILL from outside mid-log (large text), resumed", case, problems)
    log("g: %d outside kills tore a file" % torn)
