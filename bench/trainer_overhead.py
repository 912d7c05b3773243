#!/usr/bin/env python3
"""The Trainer's cost per step against the same loop written by hand (issue 52: at most 1 % more).

Runs bench/trainer_bench.c (built: cmake --build build --target trainer_bench accel_cli) for each
model on 1 process and on 2 (accel launch), each run alternating hand and Trainer rounds on the
same objects; a round's time is its slowest rank's. Prints, per setup, the median step time of
each, the median of the rounds' trainer / hand ratios, the same on CPU time (every rank's) and on
the whole calls (the Trainer's start and end of train() included). Run on demand, never as a test:

    bench/trainer_overhead.py [--rounds N] [--models mlp,cnn] [--processes 1,2] [--build build]

The machine's load average is printed before and after each setup: a round disturbed by other
work shows as a ratio far from the others (rerun then)."""
import argparse
import collections
import datetime
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Timed steps, warm-up steps and rounds: the MLP's ~1.2-2 ms steps make short rounds, many of
# them (a burst of other work on the machine then spoils few); the CNN's ~90 ms steps fewer. Both
# stay inside one epoch of 2 x 64 (468 steps) so no round crosses an epoch's end.
# "linear" (--models linear) is one layer: its step is short enough for the Trainer's own
# microseconds to show.
PLAN = {"mlp": (200, 20, 21), "cnn": (60, 5, 7), "linear": (400, 20, 21)}


def run(args, model, procs):
    steps, warmup, rounds = PLAN[model]
    steps, rounds = args.steps or steps, args.rounds or rounds
    bindir = os.path.join(ROOT, args.build, "bin")
    cmd = [os.path.join(bindir, "trainer_bench"), "--model", model, "--steps", str(steps),
           "--warmup", str(warmup), "--rounds", str(rounds), "--threads", "1"]
    if procs > 1:
        cmd = [os.path.join(bindir, "accel"), "launch", "-n", str(procs)] + cmd
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               ACCELERATE_LOG_LEVEL="warning")
    out = subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
    records = [json.loads(l[len("BENCH "):]) for l in out.splitlines() if l.startswith("BENCH ")]
    # A round's time is its slowest rank's: the job runs at that pace.
    # Its CPU time is every rank's together.
    timed, call, cpu = (collections.defaultdict(float) for _ in range(3))
    for rec in records:
        key = (rec["round"], rec["impl"])
        timed[key] = max(timed[key], rec["timed_s"])
        call[key] = max(call[key], rec["call_s"])
        cpu[key] += rec["cpu_s"]
    done = sorted({r for r, _ in timed})
    if len(records) != 2 * procs * rounds:
        sys.exit("expected %d BENCH lines, got:\n%s" % (2 * procs * rounds, out))
    per_step = {impl: [timed[(r, impl)] / steps for r in done] for impl in ("hand", "trainer")}
    ratios = [timed[(r, "trainer")] / timed[(r, "hand")] for r in done]
    call_ratios = [call[(r, "trainer")] / call[(r, "hand")] for r in done]
    cpu_ratios = [cpu[(r, "trainer")] / cpu[(r, "hand")] for r in done]
    return {"model": model, "processes": procs, "steps": steps, "warmup": warmup,
            "hand_ms": statistics.median(per_step["hand"]) * 1e3,
            "trainer_ms": statistics.median(per_step["trainer"]) * 1e3,
            "ratio": statistics.median(ratios), "ratios": ratios,
            "call_ratio": statistics.median(call_ratios), "call_ratios": call_ratios,
            "cpu_ratio": statistics.median(cpu_ratios), "cpu_ratios": cpu_ratios,
            "rounds": {impl: per_step[impl] for impl in per_step}}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=0, help="rounds of each (default per model)")
    p.add_argument("--models", default="mlp,cnn")
    p.add_argument("--processes", default="1,2")
    p.add_argument("--steps", type=int, default=0, help="timed steps a round (default per model)")
    p.add_argument("--build", default="build")
    p.add_argument("--json", default=os.path.join(ROOT, "build", "bench", "trainer_overhead.json"))
    args = p.parse_args()
    results = []
    print("%-5s %5s %6s %10s %10s %8s %8s %8s  %s" % (
        "model", "procs", "steps", "hand ms", "trainer ms", "ratio", "cpu", "call",
        "load before/after"))
    for model in args.models.split(","):
        for procs in (int(n) for n in args.processes.split(",")):
            before = os.getloadavg()[0]
            res = run(args, model, procs)
            res["load"] = [before, os.getloadavg()[0]]
            results.append(res)
            print("%-5s %5d %6d %10.3f %10.3f %8.4f %8.4f %8.4f  %.2f / %.2f" % (
                model, procs, res["steps"], res["hand_ms"], res["trainer_ms"], res["ratio"],
                res["cpu_ratio"], res["call_ratio"], res["load"][0], res["load"][1]), flush=True)
            print("      rounds' ratios: %s" % " ".join("%.4f" % r for r in res["ratios"]),
                  flush=True)
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                   "results": results}, f, indent=1)
    print("ratio: median of the rounds' trainer / hand wall times over the timed steps (the "
          "slowest rank's); cpu: the same on the ranks' CPU time; call: wall time of the whole "
          "round. JSON: %s" % args.json)


if __name__ == "__main__":
    main()
