#!/usr/bin/env python3
"""A run killed with SIGKILL while it logs keeps every step it reported as logged, in every
tracker, and no torn record:

    killed_mid_run.py TRACKER_REPLAY

tracker_replay --forever (log_with=all, one process) logs loss and lr at steps 0, 1, ... and
prints "logged N" after accel_log returned for step N. Once it printed N >= MIN_STEPS it is
killed; the last N it printed is the promise. The record or line being written when the kill
came may be cut at the end of a file (the kernel ends a write at a page boundary once SIGKILL is
pending); everything before it must be whole. Read back:
  - the event file: its records framed whole (length, CRCs: TensorBoard's masked CRC32C), and
    EventAccumulator's loss and lr at every step 0..M, as float32;
  - metrics.jsonl: ends with a newline, every line JSON, steps 0..M, values exact;
  - metrics.csv: ends with a newline, every row four fields, a loss and an lr row at each step.
M is the last printed step or the one after it (killed between accel_log and printf); never less.
Needs ACCEL_TEST_ACCELERATE_PYTHON with tensorboard (tools/setup.sh); exits 77 (skipped) without
it, saying so. It runs itself again under that Python.
"""
import csv
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tracker_readers import SKIPPED, accumulator, f32, python_with, rerun  # noqa: E402

PROJECT = "killed"
MIN_STEPS = 200


def loss(step):
    return 1.0 / (step + 1)


def lr(step):
    return 1e-3 * (step % 7)  # as tracker_replay.c computes them


def check_steps(what, steps, last):
    """Steps 0..M in order, M the last printed step or the next."""
    m = len(steps) - 1
    assert steps == list(range(m + 1)), "%s: steps not 0..%d in order: %s" % (
        what, m, [s for i, s in enumerate(steps) if s != i][:5])
    assert last <= m <= last + 1, "%s: steps 0..%d, but %d was printed as logged" % (what, m, last)
    return m


def check_event_file(path, last):
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    data = open(path, "rb").read()
    at = records = 0
    while at < len(data):
        # The kill may cut the record being written (the kernel stops a write at a page boundary
        # when SIGKILL is pending): allowed at the very end only; the steps check below still
        # needs every promised step, whole, before it.
        if at + 12 > len(data):
            break
        (length,) = struct.unpack_from("<Q", data, at)
        (length_crc,) = struct.unpack_from("<I", data, at + 8)
        assert length_crc == masked_crc32c(data[at:at + 8]), "event file: bad length CRC at %d" % at
        end = at + 12 + length + 4
        if end > len(data):
            break
        (data_crc,) = struct.unpack_from("<I", data, end - 4)
        assert data_crc == masked_crc32c(data[at + 12:end - 4]), "event file: bad CRC at %d" % at
        at, records = end, records + 1
    acc = accumulator(os.path.dirname(path))
    assert sorted(acc.Tags()["scalars"]) == ["loss", "lr"], acc.Tags()
    got_loss, got_lr = acc.Scalars("loss"), acc.Scalars("lr")
    m = check_steps("TensorBoard loss", [e.step for e in got_loss], last)
    # A cut record may leave the unpromised step's loss whole and its lr not.
    m = min(m, check_steps("TensorBoard lr", [e.step for e in got_lr], last))
    for e in got_loss:
        assert e.value == f32(loss(e.step)), ("TensorBoard loss", e)
    for e in got_lr:
        assert e.value == f32(lr(e.step)), ("TensorBoard lr", e)
    return m, records


def cut_tail(data):
    """The file without a last line the kill cut short (the line being written: the steps check
    still needs every promised step before it)."""
    return data if data.endswith(b"\n") else data[:data.rfind(b"\n") + 1]


def check_jsonl(path, last):
    data = cut_tail(open(path, "rb").read())
    lines = []
    for n, line in enumerate(data.decode().splitlines()):
        try:
            lines.append(json.loads(line))
        except ValueError as e:
            raise AssertionError("metrics.jsonl line %d is not JSON (%s): %r" % (n + 1, e, line))
    m = check_steps("metrics.jsonl", [l["step"] for l in lines], last)
    for l in lines:
        assert l["values"] == {"loss": loss(l["step"]), "lr": lr(l["step"])}, l
    return m


def check_csv(path, last):
    data = cut_tail(open(path, "rb").read())
    rows = list(csv.reader(data.decode().splitlines()))
    assert rows[0] == ["wall_time", "step", "tag", "value"], rows[0]
    if len(rows) % 2 == 0:
        rows.pop()  # the cut step's loss row, its lr row cut away: not a promised step
    for n, row in enumerate(rows[1:]):
        assert len(row) == 4 and all(row), "metrics.csv row %d incomplete: %r" % (n + 2, row)
    steps = [int(r[1]) for r in rows[1::2]]
    m = check_steps("metrics.csv", steps, last)
    want = []
    for s in range(m + 1):
        want += [[str(s), "loss", loss(s)], [str(s), "lr", lr(s)]]
    got = [[r[1], r[2], float(r[3])] for r in rows[1:]]
    assert got == want, "metrics.csv: first difference %s" % next(
        (g, w) for g, w in zip(got + [None] * len(want), want) if g != w)
    return m


def child(program):
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ACCEL_LOG")}
        env.update(ACCEL_LOG_WITH="all", ACCEL_LOGGING_DIR=tmp)
        err = open(os.path.join(tmp, "stderr"), "w+")
        proc = subprocess.Popen([program, "--forever", PROJECT], env=env, stdout=subprocess.PIPE,
                                stderr=err, text=True)
        # A program that hangs or never gets to MIN_STEPS fails the test instead of blocking it.
        watchdog = threading.Timer(60, proc.kill)
        watchdog.start()
        last, killed = -1, False
        for line in proc.stdout:
            if not line.endswith("\n"):
                break  # cut by the kill: not a promise
            assert line.startswith("logged "), "unexpected output: %r" % line
            last = int(line.split()[1])
            if last >= MIN_STEPS and not killed:
                os.kill(proc.pid, signal.SIGKILL)
                killed = True  # lines already in the pipe still count: they were promised
        proc.wait()
        watchdog.cancel()
        err.seek(0)
        if proc.returncode != -signal.SIGKILL or not killed:
            print("killed_mid_run: the program ended by itself (%s) after step %d:\n%s" % (
                proc.returncode, last, err.read()))
            return 1
        run_dir = os.path.join(tmp, PROJECT)
        events = [n for n in os.listdir(run_dir) if n.startswith("events.out.tfevents.")]
        assert len(events) == 1, events
        m_tb, records = check_event_file(os.path.join(run_dir, events[0]), last)
        m_json = check_jsonl(os.path.join(run_dir, "metrics.jsonl"), last)
        m_csv = check_csv(os.path.join(run_dir, "metrics.csv"), last)
    print("killed_mid_run: killed after step %d was printed; the files hold steps 0..%d "
          "(TensorBoard, %d whole records), 0..%d (jsonl), 0..%d (csv), each whole"
          % (last, m_tb, records, m_json, m_csv))
    return 0


def main():
    if os.environ.get("KILLED_MID_RUN_CHILD"):
        return child(sys.argv[1])
    python = python_with(["tensorboard"])
    if python is None:
        return SKIPPED
    return rerun(python, __file__, "KILLED_MID_RUN_CHILD", [sys.argv[1]])


if __name__ == "__main__":
    sys.exit(main())
