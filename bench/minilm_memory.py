#!/usr/bin/env python3
"""Peak memory and time of loading the real model, sentence-transformers' all-MiniLM-L6-v2
(build/minilm/model, tools/fetch_minilm.sh; a BERT of 22.7 M parameters, 86.7 MiB of fp32), by
libaccel and by Python's routes, and of running it dispatched with disk offload. Run on demand,
never as a test:

    bench/minilm_memory.py [--model build/minilm/model] [--runs 3]

(after `cmake --build build --target minilm_cpp minilm_dispatch accel_cli`). Rows:
- libaccel: `minilm_cpp load MODEL` (examples/cpp/minilm): the C++ example's encoder (a
  torch::nn::Module) built, emptied with accel::to_meta (init_empty_weights) and filled by
  load_pretrained; once more with glibc's mmap threshold at 1 MB, as bench/load_memory.py runs;
- libaccel under ZeRO stage 3: `accel launch -n 2 minilm_cpp load_prepared MODEL` with FSDP's
  FULL_SHARD and fsdp_cpu_ram_efficient_loading: the encoder built, prepared, then loaded (a
  collective, each rank reading what it holds); the worse rank's figures, against the issue's
  per-rank bound model / 2 + largest unit (the embeddings') + 64 MB. A host module cannot be
  prepared empty and stage 3 keeps its tensors whole on every rank, so each rank holds it whole;
- transformers' `BertModel.from_pretrained(MODEL)` (the test venv, transformers 4.40.2);
- `safetensors.torch.load_file` + `load_state_dict` into a `BertModel(config)` built as usual;
- `cat model.safetensors > /dev/null`: reading the file, for scale;
- the dispatched TorchScript MiniLM (tests/examples' minilm_dispatch: transformers' BertModel traced,
  accel_dispatch_model with 25 % of it as the cpu budget, the rest on disk): peak anonymous memory
  of its forwards against budget + largest offloaded unit + activations + 64 MB.

How start-up is counted: each loading row's "start-up" is the process's resident size once it is
ready to work and before the model is built (C++: on entering main, LibTorch and libaccel mapped
and initialised; Python: after `import torch, transformers`); the peak is VmHWM from there on
(reset through /proc/self/clear_refs), over building and loading; the growth is peak - start-up,
which the issue bounds by model + largest tensor + 64 MB with empty initialisation. Medians of
--runs runs per row; every run of a row is one new process. The file is in the page cache (warm).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("ACCEL_BENCH_BIN", os.path.join(ROOT, "build", "bin"))
VENV = os.path.join(ROOT, "build", "accelerate-venv", "bin", "python")
MB = 2**20

# The Python routes, run in the venv by this same file (`--ref ROUTE MODEL`).
REF = r"""
import json, os, sys, time
import torch, transformers
from transformers import BertConfig, BertModel
def mb(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
route, model_dir = sys.argv[1:3]
start = mb("VmRSS")
open("/proc/self/clear_refs", "w").write("5")
t0 = time.monotonic()
if route == "transformers":
    model = BertModel.from_pretrained(model_dir)
    load_s = time.monotonic() - t0
else:
    from safetensors.torch import load_file
    model = BertModel(BertConfig.from_pretrained(model_dir))
    t1 = time.monotonic()
    # position_ids is not persistent in transformers 4.40: unexpected, hence strict=False.
    model.load_state_dict(load_file(os.path.join(model_dir, "model.safetensors")), strict=False)
    load_s = time.monotonic() - t1
seconds = time.monotonic() - t0
print("BENCH " + json.dumps({"start_mb": start, "peak_mb": mb("VmHWM"), "seconds": seconds,
                             "load_seconds": load_s}))
"""


def env_for(extra=None):
    # One thread for LibTorch and OpenBLAS alike; no Hugging Face cache or hub; glibc as it is
    # unless a row says otherwise.
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HOME="/nonexistent-hf-home",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    for k in list(env):
        if k.startswith(("ACCELERATE_", "FSDP_", "MALLOC_")):
            del env[k]
    env.update(extra or {})
    return env


def run(cmd, env):
    return subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout


def minilm_cpp(model_dir, env):
    out = run([os.path.join(BIN, "minilm_cpp"), "load", model_dir], env)
    m = re.search(r"load ([0-9.]+) s \(build and empty ([0-9.]+) s, load_pretrained ([0-9.]+) s\); "
                  r"resident ([0-9.]+) MB at start-up, peak ([0-9.]+) MB building, ([0-9.]+) MB "
                  r"loading", out)
    if not m:
        sys.exit("minilm_cpp load printed: " + out)
    seconds, build, load, start, build_peak, load_peak = map(float, m.groups())
    return {"start_mb": start, "peak_mb": max(build_peak, load_peak), "seconds": seconds,
            "load_seconds": load}


def minilm_zero3(model_dir, env):
    out = run([os.path.join(BIN, "accel"), "launch", "-n", "2", os.path.join(BIN, "minilm_cpp"),
               "load_prepared", model_dir], env)
    ranks = re.findall(
        r"rank [0-9]+ of 2 \(FSDP\): load_pretrained ([0-9.]+) s \(accelerator, build and prepare "
        r"([0-9.]+) s\); resident ([0-9.]+) MB at start-up, peak ([0-9.]+) MB starting the "
        r"accelerator, ([0-9.]+) MB building, ([0-9.]+) MB preparing \(([0-9.]+) MB after\), "
        r"([0-9.]+) MB loading", out)
    if len(ranks) != 2:
        sys.exit("accel launch -n 2 minilm_cpp load_prepared printed: " + out)
    rows = []
    for r in ranks:
        load, before, start, acc, build, prepare, prepared, load_peak = map(float, r)
        rows.append({"start_mb": start, "peak_mb": max(acc, build, prepare, load_peak),
                     "seconds": before + load, "load_seconds": load, "accelerator_peak_mb": acc,
                     "build_peak_mb": build, "prepare_peak_mb": prepare,
                     "after_prepare_mb": prepared, "load_peak_mb": load_peak})
    return max(rows, key=lambda r: r["peak_mb"] - r["start_mb"])


def python_route(route, model_dir, env):
    out = run([VENV, "-c", REF, route, model_dir], env)
    return [json.loads(l[6:]) for l in out.splitlines() if l.startswith("BENCH ")][0]


def dispatched(model_dir):
    out = run([os.path.join(BIN, "minilm_dispatch"), VENV,
               os.path.join(ROOT, "tests", "examples", "minilm_trace.py"), model_dir,
               "/usr/share/games/fortunes/food"], env_for())
    nums = lambda pattern: [float(x) for x in re.search(pattern, out).groups()]
    budget, unit, activations, bound = nums(
        r"cpu budget ([0-9.]+) MB \(25 %\), largest offloaded unit ([0-9.]+) MB, activations "
        r"([0-9.]+) MB .*bound \(these \+ 64 MB\) ([0-9.]+) MB")
    start, after, first, peak = nums(
        r"anonymous memory: ([0-9.]+) MB at start-up, ([0-9.]+) MB after dispatch, peak ([0-9.]+) "
        r"MB during the first forward .*, peak ([0-9.]+) MB during")
    device_map = re.search(r"device map for .*?: (.*)", out).group(1)
    return {"budget_mb": budget, "largest_unit_mb": unit, "activations_mb": activations,
            "bound_mb": bound, "start_anon_mb": start, "anon_after_dispatch_mb": after,
            "first_forward_peak_mb": first, "peak_anon_mb": peak, "device_map": device_map,
            "bitwise_equal": "bitwise equal" in out}


def safetensors_sizes(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    sizes = [v["data_offsets"][1] - v["data_offsets"][0] for k, v in header.items()
             if k != "__metadata__"]
    embeddings = sum(v["data_offsets"][1] - v["data_offsets"][0] for k, v in header.items()
                     if k.startswith("embeddings."))
    return sum(sizes), max(sizes), embeddings


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=os.path.join(ROOT, "build", "minilm", "model"))
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    st = os.path.join(args.model, "model.safetensors")
    if not os.path.exists(st):
        sys.exit("no %s: run tools/fetch_minilm.sh" % st)
    model_b, largest_b, unit_b = safetensors_sizes(st)
    model_mb, largest_mb, unit_mb = model_b / MB, largest_b / MB, unit_b / MB

    routes = [("libaccel `minilm_cpp load` (accel::to_meta + load_pretrained)",
               lambda: minilm_cpp(args.model, env_for())),
              ("libaccel, the same with glibc's mmap threshold at 1 MB (as bench/load_memory.py)",
               lambda: minilm_cpp(args.model, env_for({"MALLOC_MMAP_THRESHOLD_": "1048576"}))),
              ("libaccel under ZeRO stage 3, 2 ranks: `minilm_cpp load_prepared` (built, prepared, "
               "then load_pretrained), the worse rank",
               lambda: minilm_zero3(args.model, env_for({
                   "ACCELERATE_USE_FSDP": "true", "FSDP_SHARDING_STRATEGY": "FULL_SHARD",
                   "FSDP_CPU_RAM_EFFICIENT_LOADING": "true"})))]
    if os.path.exists(VENV):
        routes += [("transformers `BertModel.from_pretrained(folder)`",
                    lambda: python_route("transformers", args.model, env_for())),
                   ("`safetensors.torch.load_file` + `load_state_dict` into a built `BertModel`",
                    lambda: python_route("safetensors", args.model, env_for()))]
    rows = []
    for name, measure in routes:
        runs = [measure() for _ in range(args.runs)]
        rows.append((name, runs))
    cats = []
    for _ in range(args.runs):
        t0 = time.monotonic()
        subprocess.run("cat '%s' > /dev/null" % st, shell=True, check=True)
        cats.append(time.monotonic() - t0)
    dispatch = dispatched(args.model) if os.path.exists(VENV) else None

    med = lambda runs, key: statistics.median(r[key] for r in runs)
    bound = model_mb + largest_mb + 64
    print("MiniLM: model %.1f MB (fp32), largest tensor %.1f MB (word embeddings); growth bound "
          "model + largest tensor + 64 = %.1f MB; medians of %d runs" %
          (model_mb, largest_mb, bound, args.runs))
    print("| route | start-up RSS (MB) | peak RSS (MB) | growth (MB) | seconds (build + load) | "
          "of which the load (s) |")
    print("|---|---|---|---|---|---|")
    for name, runs in rows:
        start, peak = med(runs, "start_mb"), med(runs, "peak_mb")
        growth = statistics.median(r["peak_mb"] - r["start_mb"] for r in runs)
        print("| %s | %.0f | %.0f | %.0f | %.3f | %.3f |" %
              (name, start, peak, growth, med(runs, "seconds"), med(runs, "load_seconds")))
    print("| `cat model.safetensors > /dev/null` | - | - | - | %.3f | - |" %
          statistics.median(cats))
    zero3 = next(runs for name, runs in rows if "ZeRO stage 3" in name)
    print("ZeRO stage 3, 2 ranks, the worse rank: growth %.0f MB against the per-rank bound "
          "model / 2 + largest unit (embeddings, %.1f MB) + 64 = %.1f MB; peaks %.0f MB starting "
          "the accelerator, %.0f building, %.0f preparing (%.0f after), %.0f loading (each rank "
          "holds the host's encoder whole: stage 3 keeps a host module's tensors on every rank)" %
          (statistics.median(r["peak_mb"] - r["start_mb"] for r in zero3), unit_mb,
           model_mb / 2 + unit_mb + 64, med(zero3, "accelerator_peak_mb"),
           med(zero3, "build_peak_mb"), med(zero3, "prepare_peak_mb"),
           med(zero3, "after_prepare_mb"), med(zero3, "load_peak_mb")))
    if dispatch:
        d = dispatch
        print("dispatched TorchScript MiniLM, cpu budget 25 %% (%.1f MB), map %s, largest "
              "offloaded unit %.1f MB, activations %.1f MB: peak anonymous memory of the forwards "
              "%.1f MB (%.1f MB at start-up, %.1f MB after dispatch; the first forward, "
              "TorchScript's profiling run, %.1f MB), bound (budget + unit + activations + 64) "
              "%.1f MB; outputs %s" %
              (d["budget_mb"], d["device_map"], d["largest_unit_mb"], d["activations_mb"],
               d["peak_anon_mb"], d["start_anon_mb"], d["anon_after_dispatch_mb"],
               d["first_forward_peak_mb"], d["bound_mb"],
               "bitwise equal to the whole model's" if d["bitwise_equal"] else "DIFFER"))
    print(json.dumps({"model_mb": model_mb, "largest_mb": largest_mb, "embeddings_mb": unit_mb,
                      "rows": {name: runs for name, runs in rows}, "cat_seconds": cats,
                      "dispatch": dispatch}))


if __name__ == "__main__":
    main()
