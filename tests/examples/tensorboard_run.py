#!/usr/bin/env python3
"""A two-process run of the C Fashion-MNIST example with every tracker on, read back by TensorBoard's
own EventAccumulator (PyPI tensorboard) and Python's json:

    tensorboard_run.py ACCEL_CLI PROGRAM

Only the main process writes (one event file); every scalar the example logs (loss, lr, samples_per_s
every 10 steps, accuracy at the end) reads back with its tag and step, TensorBoard's values are the
JSON lines' as 32-bit floats, and the accuracy is the one the program printed. Needs
ACCEL_TEST_ACCELERATE_PYTHON with tensorboard (tools/setup.sh); exits 77 (skipped) without it.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tracker_readers import SKIPPED, accumulator, f32, python_with, rerun  # noqa: E402

STEPS = 40


def check(run_dir, printed_accuracy):
    events = [n for n in os.listdir(run_dir) if "tfevents" in n]
    assert len(events) == 1, "one event file (the main process's) expected: %s" % events
    acc = accumulator(run_dir)
    assert sorted(acc.Tags()["scalars"]) == ["accuracy", "loss", "lr", "samples_per_s"], acc.Tags()
    lines = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
    by_step = {}
    for line in lines:
        by_step.setdefault(line["step"], {}).update(line["values"])
    for tag in ("loss", "lr", "samples_per_s"):
        got = acc.Scalars(tag)
        assert [e.step for e in got] == list(range(10, STEPS + 1, 10)), (tag, got)
        for e in got:
            assert e.value == f32(by_step[e.step][tag]), (tag, e, by_step[e.step])
    loss = [e.value for e in acc.Scalars("loss")]
    assert all(0 < v < 3 for v in loss) and loss[-1] < loss[0], loss
    accuracy = acc.Scalars("accuracy")
    assert [e.step for e in accuracy] == [STEPS], accuracy
    assert "%.4f" % by_step[STEPS]["accuracy"] == printed_accuracy, (by_step[STEPS], printed_accuracy)
    hparams = json.load(open(os.path.join(run_dir, "hparams.json")))
    assert hparams == {"lr": 0.001, "batch_size": 32, "processes": 2,
                       "gradient_accumulation_steps": 1}, hparams
    print("tensorboard_run: %d scalars of a 2-process run read back by EventAccumulator"
          % sum(len(acc.Scalars(t)) for t in acc.Tags()["scalars"]))


def main():
    if os.environ.get("TENSORBOARD_RUN_CHILD"):
        check(sys.argv[1], sys.argv[2])
        return 0
    cli, program = sys.argv[1], sys.argv[2]
    python = python_with(["tensorboard"])
    if python is None:
        return SKIPPED
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, ACCEL_LOG_WITH="all", ACCEL_LOGGING_DIR=tmp)
        run = subprocess.run([cli, "launch", "-n", "2", program, "--max-steps", str(STEPS),
                              "--batch-size", "32"], env=env, capture_output=True, text=True)
        sys.stdout.write(run.stdout + run.stderr)
        if run.returncode != 0:
            return 1
        printed = re.search(r"test accuracy ([0-9.]+)", run.stdout)
        assert printed, "the program printed no accuracy"
        return rerun(python, __file__, "TENSORBOARD_RUN_CHILD",
                     [os.path.join(tmp, "train_fashion_mnist"), printed.group(1)])


if __name__ == "__main__":
    sys.exit(main())
