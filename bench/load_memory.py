#!/usr/bin/env python3
"""Peak memory and time of loading a checkpoint into a model already built (fp32, LAYERS square
linear layers of WIDTH: 16 x 4096 = 1.07 GB by default), libaccel against PyTorch, and reading the
same file with `cat FILE > /dev/null`. Run on demand, never as a test:

    bench/load_memory.py [--layers 16] [--width 4096] [--dir /tmp/accel-load-bench]

Writes the checkpoint (one safetensors file, and a torch.save copy for torch.load) into --dir,
removed at the end. Rows: libaccel's accel_load_pretrained and accel_load_checkpoint_in_model on 1
process into a model built as usual and into one built empty (accel_model_new_empty, Accelerate's
init_empty_weights), and on 2 processes under ZeRO stage 3 (FSDP FULL_SHARD) with and without
fsdp_cpu_ram_efficient_loading, built empty and prepared empty under ZeRO stage 3 (each rank
allocating only its share; the peak then counts from before the build), and once with libaccel's
tensor allocator on (malloc_tuning, the default) (bench/load_memory.c); PyTorch 1.13's torch.load +
load_state_dict (Debian's python3) and safetensors.torch.load_file + load_state_dict (the test venv,
when present) (bench/load_memory_ref.py). For each: the resident size before the load, its peak
during the load alone (VmHWM reset just before the call), the growth (peak - before), the largest
rank's, and the load's throughput. The page cache is warm for every row (the file was just written
and read), so throughput compares in-memory work, not the disk. Last, the time and RSS growth of
building Accelerate's test_init_empty_weights_very_large_model empty (1000 x Linear(10000, 10000)),
and the peak anonymous memory of a forward through the model dispatched with disk offload
(accel_dispatch_model) with 25 % and 10 % of it as the cpu budget.
"""
import argparse
import json
import os
import shutil
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("ACCEL_BENCH_BIN", os.path.join(ROOT, "build", "bin"))
PYTHON = "/usr/bin/python3"  # Debian's, with python3-torch
VENV = os.path.join(ROOT, "build", "accelerate-venv", "bin", "python")


def env_for(extra=None):
    # glibc returns freed blocks above 1 MB to the kernel, for every implementation alike (as
    # bench/zero_memory.py): the resident size then measures live memory, not malloc's cache.
    # libaccel's tensor allocator is off (malloc_tuning false): it caches freed blocks until the
    # first optimizer step, so the parameters ZeRO stage 3 releases at prepare would stay resident.
    env = dict(os.environ, OMP_NUM_THREADS="1", MALLOC_MMAP_THRESHOLD_="1048576",
               HF_HOME="/nonexistent-hf-home", ACCEL_MALLOC_TUNING="false")
    for k in list(env):
        if k.startswith(("ACCELERATE_", "FSDP_")):
            del env[k]
    env.update(extra or {})
    return env


def bench_lines(cmd, env):
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return [json.loads(l[6:]) for l in out.splitlines() if l.startswith("BENCH ")]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--dir", default="/tmp/accel-load-bench")
    args = p.parse_args()
    sizes = [str(args.layers), str(args.width)]
    ckpt = os.path.join(args.dir, "ckpt")
    st = os.path.join(ckpt, "model.safetensors")
    pt = os.path.join(args.dir, "model.pt")
    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    prog = os.path.join(BIN, "load_memory")
    launch = [os.path.join(BIN, "accel"), "launch", "-n"]
    try:
        subprocess.run([prog, "write", ckpt] + sizes, env=env_for(), check=True)
        subprocess.run([PYTHON, os.path.join(ROOT, "bench", "load_memory_ref.py"), "convert", st,
                        pt], env=env_for(), check=True)
        model_mb = os.path.getsize(st) / 2**20
        largest_mb = args.width * args.width * 4 / 2**20
        t0 = time.monotonic()
        subprocess.run("cat '%s' > /dev/null" % st, shell=True, check=True)
        cat_s = time.monotonic() - t0
        rows = [("`cat FILE > /dev/null`", 1, [{"seconds": cat_s}])]
        fsdp = {"ACCELERATE_USE_FSDP": "true", "FSDP_SHARDING_STRATEGY": "FULL_SHARD"}
        for loader in ("pretrained", "checkpoint"):
            name = "accel_load_" + ("pretrained" if loader == "pretrained" else
                                    "checkpoint_in_model")
            rows.append(("libaccel %s" % name, 1,
                         bench_lines(launch + ["1", prog, "load", ckpt] + sizes + [loader],
                                     env_for())))
            rows.append(("libaccel %s into an empty model (accel_model_new_empty)" % name, 1,
                         bench_lines(launch + ["1", prog, "load", ckpt] + sizes +
                                     [loader, "empty"], env_for())))
            for efficient in ("true", "false"):
                extra = dict(fsdp, FSDP_CPU_RAM_EFFICIENT_LOADING=efficient)
                rows.append(("libaccel %s, ZeRO-3, cpu_ram_efficient_loading %s" % (name, efficient),
                             2, bench_lines(launch + ["2", prog, "load", ckpt] + sizes + [loader],
                                            env_for(extra))))
            # ZeRO-3 from an empty model: built empty, prepared (each rank allocates only its
            # share), then loaded; the peak from before the build, against model/N + largest + 64.
            rows.append(("libaccel %s, ZeRO-3 from an empty model (peak from before the build)"
                         % name, 2,
                         bench_lines(launch + ["2", prog, "load", ckpt] + sizes + [loader, "zero3"],
                                     env_for(fsdp))))
        # The resident size a stage-3 rank keeps after prepare with the tensor allocator on.
        extra = dict(fsdp, FSDP_CPU_RAM_EFFICIENT_LOADING="true", ACCEL_MALLOC_TUNING="true")
        rows.append(("libaccel accel_load_checkpoint_in_model, ZeRO-3, efficient loading, "
                     "malloc_tuning on", 2,
                     bench_lines(launch + ["2", prog, "load", ckpt] + sizes + ["checkpoint"],
                                 env_for(extra))))
        ref = os.path.join(ROOT, "bench", "load_memory_ref.py")
        rows.append(("PyTorch torch.load + load_state_dict", 1,
                     bench_lines([PYTHON, ref, "torch.load", pt] + sizes, env_for())))
        if os.path.exists(VENV):
            rows.append(("PyTorch safetensors load_file + load_state_dict", 1,
                         bench_lines([VENV, ref, "safetensors", st] + sizes, env_for())))
        huge = bench_lines([prog, "build", "1000", "10000"], env_for())[0]
        # Disk offload (accel_dispatch_model): an empty model with a quarter, then a tenth, of
        # itself as the cpu budget; its forward's peak against budget + largest unit + 64 MB.
        dispatch = [bench_lines([prog, "dispatch", ckpt] + sizes + [str(p)], env_for())[0]
                    for p in (25, 10)]
    finally:
        shutil.rmtree(args.dir, ignore_errors=True)
    print("model %.1f MB (%d x Linear(%d, %d), fp32), largest tensor %.1f MB" %
          (model_mb, args.layers, args.width, args.width, largest_mb))
    print("| route | processes | build (s) | RSS before (MB) | peak during the load (MB) | "
          "growth (MB) | growth target (MB) | seconds | GB/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, n, lines in rows:
        worst = max(lines, key=lambda l: l.get("peak_mb", 0) - l.get("rss_before_mb", 0))
        secs = max(l["seconds"] for l in lines)
        gbs = model_mb * 2**20 / 1e9 / secs
        build = ("%.3f" % max(l["build_seconds"] for l in lines)) if "build_seconds" in worst \
            else "-"
        if "peak_mb" not in worst:
            print("| %s | %d | - | - | - | - | - | %.3f | %.2f |" % (name, n, secs, gbs))
            continue
        growth = worst["peak_mb"] - worst["rss_before_mb"]
        # Empty initialisation: the largest tensor + 64 MB; ZeRO-3 from an empty model: model / N
        # + the largest unit (here one layer) + 64 MB.
        target = largest_mb + 64 + (model_mb / n if "from an empty model" in name else 0)
        print("| %s | %d | %s | %.0f | %.0f | %.0f | %.0f | %.3f | %.2f |" %
              (name, n, build, worst["rss_before_mb"], worst["peak_mb"], growth, target, secs,
               gbs))
    print("empty build of 1000 x Linear(10000, 10000) (100 B parameters): %.3f s, RSS +%.1f MB" %
          (huge["seconds"], huge["rss_growth_mb"]))
    for d in dispatch:
        print("dispatched forward, cpu budget %d %% (%.0f MB), largest unit %.0f MB: peak anonymous "
              "memory %.0f MB, bound (budget + unit + activations + 64) %.0f MB, %.3f s" %
              (d["dispatch_percent"], d["budget_mb"], d["largest_unit_mb"], d["peak_anon_mb"],
               d["bound_mb"], d["forward_seconds"]))
    print(json.dumps({"rows": {name: lines for name, n, lines in rows}, "empty_build": huge,
                      "dispatch": dispatch}))


if __name__ == "__main__":
    main()
