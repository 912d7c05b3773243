#!/usr/bin/env python3
"""What logging every step costs the MLP benchmark: bench/train_bench.c on 2 processes, with and
without --log-every-step (loss read, loss/lr/samples_per_s to the tensorboard, jsonl and csv
trackers, a debug message the default level drops), the two interleaved in one run so that the
machine's drift hits both alike. Run on demand, never as a test:

    bench/tracking_overhead.py [--rounds 7] [--steps 1500] [--processes 2]

Prints each run's samples/s and the ratio of the medians' step times (with / without)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, "build")


def run(args, log, logdir):
    env = dict(os.environ)
    env.pop("ACCEL_LOG_WITH", None)
    if log:
        env.update(ACCEL_LOG_WITH="all", ACCEL_LOGGING_DIR=logdir)
    cmd = [os.path.join(BUILD, "bin", "accel"), "launch", "-n", str(args.processes),
           os.path.join(BUILD, "bin", "train_bench"), "--model", "mlp", "--steps",
           str(args.steps), "--warmup", str(args.warmup), "--threads", "1"]
    if log:
        cmd.append("--log-every-step")
    out = subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
    rates = [json.loads(l[len("BENCH "):])["samples_per_s"]
             for l in out.splitlines() if l.startswith("BENCH ")]
    if len(rates) != args.processes:
        sys.exit("expected %d BENCH lines, got:\n%s" % (args.processes, out))
    return min(rates)  # the job runs at its slowest rank's pace


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--processes", type=int, default=2)
    args = p.parse_args()
    without, with_log = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            first, second = (False, True) if r % 2 == 0 else (True, False)
            for log in (first, second):
                rate = run(args, log, os.path.join(tmp, "round%d" % r))
                (with_log if log else without).append(rate)
                print("round %d %-7s %.1f samples/s" % (r, "logging" if log else "plain", rate),
                      flush=True)
        steps = args.steps + args.warmup
        with open(os.path.join(tmp, "round0", "train_bench", "metrics.jsonl")) as f:
            logged = sum(1 for _ in f)
    plain, logging = statistics.median(without), statistics.median(with_log)
    ratio = plain / logging  # step time with / step time without
    print("median samples/s: plain %.1f, logging every step %.1f" % (plain, logging))
    print("step time with / without logging: %.4f (%+.2f %%); %d of %d steps logged per run"
          % (ratio, 100 * (ratio - 1), logged, steps))


if __name__ == "__main__":
    main()
