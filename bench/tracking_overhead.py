#!/usr/bin/env python3
"""What logging every step costs the MLP benchmark: bench/train_bench.c on 2 processes, with and
without --log-every-step (loss read, loss/lr/samples_per_s to the trackers of --log-with,
tensorboard by default, a debug message the default level drops), the two interleaved in one run so that the
machine's drift hits both alike. Run on demand, never as a test:

    bench/tracking_overhead.py [--rounds 7] [--steps 1500] [--processes 2] [--log-with all]

Prints each run's samples/s, the median of the paired rounds' step-time ratios (with / without)
and, measured inside the logging runs, the share of rank 0's timed steps spent in the logging
calls themselves (the part that does not depend on the machine's noise)."""
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
        env.update(ACCEL_LOG_WITH=args.log_with, ACCEL_LOGGING_DIR=logdir)
    cmd = [os.path.join(BUILD, "bin", "accel"), "launch", "-n", str(args.processes),
           os.path.join(BUILD, "bin", "train_bench"), "--model", "mlp", "--steps",
           str(args.steps), "--warmup", str(args.warmup), "--threads", "1"]
    if log:
        cmd.append("--log-every-step")
    out = subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
    lines = [json.loads(l[len("BENCH "):]) for l in out.splitlines() if l.startswith("BENCH ")]
    if len(lines) != args.processes:
        sys.exit("expected %d BENCH lines, got:\n%s" % (args.processes, out))
    main = next(l for l in lines if l["rank"] == 0)
    # The job runs at its slowest rank's pace; rank 0 is the one that writes.
    return min(l["samples_per_s"] for l in lines), main["logging_s"] / main["timed_s"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--log-with", default="tensorboard", help="the trackers (log_with) to write")
    args = p.parse_args()
    without, with_log, shares = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            first, second = (False, True) if r % 2 == 0 else (True, False)
            for log in (first, second):
                rate, share = run(args, log, os.path.join(tmp, "round%d" % r))
                (with_log if log else without).append(rate)
                if log:
                    shares.append(share)
                print("round %d %-7s %.1f samples/s" % (r, "logging" if log else "plain", rate),
                      flush=True)
        steps = args.steps + args.warmup
        from_tb = os.path.join(tmp, "round0", "train_bench")
        logged = len(os.listdir(from_tb))  # files written by the trackers
    plain, logging = statistics.median(without), statistics.median(with_log)
    paired = statistics.median(p / w for p, w in zip(without, with_log))
    print("median samples/s: plain %.1f, logging every step to %s %.1f (%d steps a run, %d files)"
          % (plain, args.log_with, logging, steps, logged))
    print("step time with / without logging, median of the paired rounds: %.4f (%+.2f %%)"
          % (paired, 100 * (paired - 1)))
    print("rank 0's timed steps spent in the logging calls: %.3f %% (median; max %.3f %%)"
          % (100 * statistics.median(shares), 100 * max(shares)))


if __name__ == "__main__":
    main()
