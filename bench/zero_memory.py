#!/usr/bin/env python3
"""Model-state memory per rank under ZeRO, against ZeRO's formulas, beside PyTorch: libaccel's
stages (bench/zero_memory.c, chosen as Accelerate's launcher chooses them) and PyTorch 1.13's DDP
with AdamW and with ZeroRedundancyOptimizer (bench/zero_memory_ref.py), the same MLP (16 layers
of 2896 and a head: 134M parameters), AdamW, fp32, on 2 and 4 processes, one after another. Run
on demand, never as a test:

    bench/zero_memory.py [--processes 2,4] [--steps 4] [--layers 16] [--width 2896]

For each run (glibc told to return blocks above 1 MB to the kernel, for all alike: see command()):
the largest rank's growth from before the model to its peak (VmHWM - VmRSS), that over Psi, the
formula (fp32 AdamW, in bytes per parameter: stage 0 16, stage 1 8 + 8/N, stage 2 4 + 12/N,
stage 3 16/N plus the unit being gathered: one layer (DeepSpeed's stage 3 makes a unit of each),
its parameters and, in backward, its whole gradient before the reduce-scatter (FSDP holds both
for a unit too): 8 bytes per parameter of the largest layer; plus the buckets in flight; PyTorch's DDP without
gradient_as_bucket_view keeps a copy of the gradients in its buckets: 20, and 12 + 8/N beside
ZeroRedundancyOptimizer), their ratio, and samples/s (the job's slowest rank).
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("ACCEL_BENCH_BIN", os.path.join(ROOT, "build", "bin"))
PYTHON = "/usr/bin/python3"  # Debian's, with python3-torch


def formula(impl, n, unit):
    """`unit`: the largest unit's parameters and gradient (fp32) over the parameter count."""
    return {"libaccel stage 0": 16.0, "libaccel stage 1": 8.0 + 8.0 / n,
            "libaccel stage 2": 4.0 + 12.0 / n, "libaccel stage 3": 16.0 / n + unit,
            "torch DDP": 20.0, "torch DDP + ZeRO-1": 12.0 + 8.0 / n}[impl]


def command(impl, n, args):
    launch = [os.path.join(BIN, "accel"), "launch", "-n", str(n)]
    sizes = ["--steps", str(args.steps), "--layers", str(args.layers), "--width", str(args.width)]
    # glibc returns every block above 1 MB to the kernel when freed, for every implementation
    # alike: otherwise the peak measures how much freed memory malloc keeps (libaccel's own tuning
    # keeps up to 64 MB of heap top and serves blocks up to 32 MB from the heap, for speed; with
    # 16 x 33.5 MB layers that retention was ~400 MB of a 2.1 GB peak), not the model states.
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               MALLOC_MMAP_THRESHOLD_="1048576")
    for k in ("ACCELERATE_USE_DEEPSPEED", "ACCELERATE_DEEPSPEED_ZERO_STAGE"):
        env.pop(k, None)
    if impl.startswith("libaccel"):
        env.update(ACCELERATE_USE_DEEPSPEED="true", ACCELERATE_DEEPSPEED_ZERO_STAGE=impl[-1])
        return launch + [os.path.join(BIN, "zero_memory")] + sizes, env
    which = "zero1" if "ZeRO" in impl else "ddp"
    return launch + [PYTHON, os.path.join(ROOT, "bench", "zero_memory_ref.py"), which] + sizes, env


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--processes", default="2,4")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--width", type=int, default=2896)
    p.add_argument("--json", help="where to write the results")
    p.add_argument("--only", help="run only the implementations whose name contains this")
    args = p.parse_args()
    impls = ["libaccel stage 0", "libaccel stage 1", "libaccel stage 2", "libaccel stage 3",
             "torch DDP", "torch DDP + ZeRO-1"]
    impls = [i for i in impls if not args.only or args.only in i]
    results = []
    for n in [int(x) for x in args.processes.split(",")]:
        for impl in impls:
            cmd, env = command(impl, n, args)
            out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True, timeout=1800)
            ranks = [json.loads(l[6:]) for l in out.stdout.splitlines() if l.startswith("BENCH ")]
            if out.returncode != 0 or len(ranks) != n:
                sys.exit("%s on %d processes failed:\n%s" % (impl, n, out.stdout[-3000:]))
            psi = ranks[0]["params"]
            unit = 8.0 * (args.width * args.width + args.width) / psi
            grown = max(r["peak_mb"] - r["rss_before_mb"] for r in ranks) * 2**20
            entry = {"impl": impl, "processes": n, "params": psi,
                     "bytes_per_param": grown / psi, "formula": formula(impl, n, unit),
                     "samples_per_s": min(r["samples_per_s"] for r in ranks), "ranks": ranks}
            entry["ratio"] = entry["bytes_per_param"] / entry["formula"]
            results.append(entry)
            print("%d procs  %-20s %6.2f B/param (formula %5.2f, ratio %.3f)  %7.2f samples/s"
                  % (n, impl, entry["bytes_per_param"], entry["formula"], entry["ratio"],
                     entry["samples_per_s"]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
