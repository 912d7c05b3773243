#!/usr/bin/env python3
"""The files of tracking_probe's run read back by readers that are not ours: TensorBoard's own
EventAccumulator (PyPI tensorboard), Python's json (NaN, Infinity) and csv modules.

    tracker_readback.py PROBE

Needs ACCEL_TEST_ACCELERATE_PYTHON, a Python with tensorboard (tools/setup.sh installs it in
build/accelerate-venv); exits 77 (skipped) without it. It runs itself again under that Python.
"""
import csv
import json
import math
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tracker_readers import SKIPPED, accumulator, f32, python_with, rerun  # noqa: E402


def expected():
    steps = [(s, 1.0 / (s + 1), s / 10.0) for s in range(10)]
    return steps


def check(run_dir):
    acc = accumulator(run_dir)
    tags = acc.Tags()
    assert sorted(tags["scalars"]) == ["accuracy", "grad_norm", "loss", "lr"], tags
    assert sorted(tags["tensors"]) == ["hparams/text_summary", "note/text_summary"], tags
    loss = acc.Scalars("loss")
    assert [e.step for e in loss] == list(range(11)), loss
    for (s, want_loss, want_acc), got_l, got_a in zip(expected(), loss, acc.Scalars("accuracy")):
        assert got_l.value == f32(want_loss), (s, got_l, want_loss)
        assert got_a.value == f32(want_acc), (s, got_a, want_acc)
    assert math.isnan(loss[10].value), loss[10]
    assert acc.Scalars("grad_norm")[0].value == math.inf and acc.Scalars("grad_norm")[0].step == 10
    assert acc.Scalars("lr")[0].value == -math.inf
    note = acc.Tensors("note/text_summary")[0]
    assert note.step == 10 and note.tensor_proto.string_val == [b"done, ok"], note
    table = acc.Tensors("hparams/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "| lr | 0.001 |" in table and "| model | cnn |" in table, table
    # Wall times increase and are now-ish.
    walls = [e.wall_time for e in loss]
    assert walls == sorted(walls) and abs(walls[0] - __import__("time").time()) < 600, walls

    lines = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
    assert [l["step"] for l in lines] == list(range(11)), lines
    for (s, want_loss, want_acc), line in zip(expected(), lines):
        assert line["values"] == {"loss": want_loss, "accuracy": want_acc}, line
    assert math.isnan(lines[10]["values"]["loss"]) and lines[10]["values"]["grad_norm"] == math.inf
    assert lines[10]["values"]["note"] == "done, ok"
    assert json.load(open(os.path.join(run_dir, "hparams.json"))) == {
        "lr": 0.001, "model": "cnn", "batch_size": 64}

    rows = list(csv.DictReader(open(os.path.join(run_dir, "metrics.csv"), newline="")))
    assert len(rows) == 24, rows
    losses = [(int(r["step"]), float(r["value"])) for r in rows if r["tag"] == "loss"]
    assert losses[:10] == [(s, l) for s, l, _ in expected()], losses
    assert math.isnan(losses[10][1])
    assert [r["value"] for r in rows if r["tag"] == "note"] == ["done, ok"]
    import yaml
    assert yaml.safe_load(open(os.path.join(run_dir, "hparams.yml"))) == {
        "lr": 0.001, "model": "cnn", "batch_size": 64}
    print("tracker_readback: TensorBoard, json, csv and yaml read every value back")


def main():
    probe = sys.argv[1]
    if os.environ.get("TRACKER_READBACK_CHILD"):
        check(sys.argv[2])
        return 0
    python = python_with(["tensorboard"])
    if python is None:
        return SKIPPED
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = os.path.join(tmp, "logs", "project")
        subprocess.run([probe, run_dir], check=True)
        return rerun(python, __file__, "TRACKER_READBACK_CHILD", [probe, run_dir])


if __name__ == "__main__":
    sys.exit(main())
