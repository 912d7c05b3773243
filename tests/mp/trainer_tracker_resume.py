"""The Trainer's tracker records on resume: a 2-process run killed inside step 138 (SIGKILL,
mid-window) and resumed from its latest checkpoint (step 125) leaves metrics.jsonl and
metrics.csv holding the uninterrupted run's records (wall times aside: every record but its wall
time is equal, in order), and TensorBoard's own reader (the venv's tensorboard) sees the same
scalars at the same steps: the records the killed run wrote after step 125 are dropped (jsonl,
csv) or purged by a SessionLog START (TensorBoard).

Usage: trainer_tracker_resume.py ACCEL_CLI TRAINER_PROGRAM
"""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tracker_readers  # noqa: E402

SETTINGS = "max_steps=300,logging_steps=10,save_steps=25,speed_metrics=false"
TB_SCALARS = r'''
import json, sys
from tensorboard.backend.event_processing import event_accumulator as ea
acc = ea.EventAccumulator(sys.argv[1], size_guidance={k: 0 for k in ea.DEFAULT_SIZE_GUIDANCE})
acc.Reload()
print(json.dumps({t: [[e.step, e.value] for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}))
'''


def launch(cli, program, out, extra="", env=None):
    settings = SETTINGS + ",output_dir=" + out + "/run" + extra
    return subprocess.run([cli, "launch", "-n", "2", program, "trainer", out, "2", settings],
                          capture_output=True, text=True, env=env)


def without_wall_time(path, csv):
    with open(path) as f:
        lines = f.read().splitlines()
    if csv:
        return [l.split(",", 1)[1] for l in lines]
    return [re.sub(r'"wall_time": [^,]*, ', "", l) for l in lines]


def main():
    cli, program = sys.argv[1:3]
    env = dict(os.environ, TRAINER_LOG_WITH="all")
    with tempfile.TemporaryDirectory() as tmp:
        a, b = tmp + "/a", tmp + "/b"
        os.makedirs(a)
        os.makedirs(b)
        whole = launch(cli, program, a, env=env)
        if whole.returncode != 0:
            print(whole.stdout, whole.stderr)
            return 1
        killed = launch(cli, program, b, env=dict(env, TRAINER_KILL_AT="137"))
        if killed.returncode == 0:
            print("the run was not killed")
            return 1
        written = without_wall_time(b + "/logs/trainer/metrics.jsonl", False)
        if not any('"step": 130' in l for l in written):
            print("the killed run should have logged step 130 before dying:", written[-2:])
            return 1
        resumed = launch(cli, program, b, ",resume_from_checkpoint=latest", env=env)
        if resumed.returncode != 0:
            print(resumed.stdout, resumed.stderr)
            return 1
        failures = 0
        for name, csv in (("metrics.jsonl", False), ("metrics.csv", True)):
            want = without_wall_time(a + "/logs/trainer/" + name, csv)
            got = without_wall_time(b + "/logs/trainer/" + name, csv)
            if want != got:
                failures += 1
                print(f"{name}: {len(got)} records against {len(want)}; first difference:",
                      next(((w, g) for w, g in zip(want, got) if w != g), None))
            else:
                print(f"{name}: {len(got)} records equal")
        python = tracker_readers.python_with(["tensorboard"])
        if python:
            tb = [json.loads(subprocess.run([python, "-c", TB_SCALARS, d + "/logs/trainer"],
                                            capture_output=True, text=True, check=True).stdout)
                  for d in (a, b)]
            if tb[0] != tb[1]:
                failures += 1
                print("TensorBoard's reader sees other scalars:",
                      {t: (len(tb[0].get(t, [])), len(tb[1].get(t, []))) for t in tb[0]})
            else:
                print("TensorBoard: %d tags, %d loss points, equal" %
                      (len(tb[0]), len(tb[0].get("train/loss", []))))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
