#!/usr/bin/python3
"""libaccel against PyTorch DDP, side by side, in one run.

Run through bench/run.sh (it builds the programs first). The PyTorch side is always Debian's
python3-torch (1.13); the libaccel side is whichever LibTorch the build tree was configured with
(bench/run.sh --build build-torch2 for 2.x: the 2.x wheel's Python package does not import without
its CUDA libraries, so it cannot be the reference). For each round, every (model, setup)
pair runs both implementations back to back, the order alternating between rounds (A B, B A, ...),
so drift on the machine hits both alike; the table reports medians over the rounds. Then the
gradient-synchronisation micro-benchmark. Prints a table and writes the same as JSON.
"""

import argparse
import datetime
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time

import network

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("ACCEL_BENCH_BIN", os.path.join(ROOT, "build", "bin"))
PYTHON = "/usr/bin/python3"  # Debian's interpreter, the one python3-torch is installed for
SETUPS = [("1x2", 1, 2), ("1x1", 1, 1), ("2x1", 2, 1)]  # (name, processes, threads per process)
MODELS = ["mlp", "cnn"]
IMPLS = ["libaccel", "pytorch"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pinned_env(threads):
    """Both sides get the same thread counts for LibTorch's OpenMP pool and for OpenBLAS."""
    env = dict(os.environ)
    for key in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[key] = str(threads)
    env.pop("ACCEL_NUM_THREADS", None)
    return env


def command(impl, model, procs, threads, steps, warmup):
    args = ["--model", model, "--threads", str(threads), "--steps", str(steps),
            "--warmup", str(warmup)]
    if impl == "libaccel":
        program = [os.path.join(BIN, "train_bench")] + args
        return ([os.path.join(BIN, "accel"), "launch", "-n", "2"] + program) if procs > 1 else program
    program = [os.path.join(ROOT, "bench", "train_ref.py")] + args
    if procs > 1:
        # torch.distributed.run itself, through the wrapper that fixes its start on Python 3.11.
        return [PYTHON, os.path.join(ROOT, "bench", "torchrun.py"), "--nproc_per_node", "2",
                "--master_port", str(free_port())] + program
    return [PYTHON] + program


def run(cmd, env, timeout):
    """Runs one benchmark program; returns (the launch time, its BENCH records, an error or None)."""
    started = time.time()
    try:
        done = subprocess.run(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return started, [], "timed out after %d s" % timeout
    records = []
    for line in done.stdout.splitlines():
        if line.startswith("BENCH "):
            try:
                records.append(json.loads(line[6:]))
            except ValueError:
                return started, records, "unreadable report line: %s" % line[:200]
    if done.returncode != 0 or not records:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return started, records, "exit %d: %s" % (done.returncode, tail)
    return started, records, None


def summarise_training(records, started):
    by_rank = sorted(records, key=lambda r: r["rank"])
    return {
        # Every rank times the same synchronised steps; rank 0's figure stands for the job.
        "samples_per_s": by_rank[0]["samples_per_s"],
        "launch_to_first_step_s": max(r["first_step_wall"] for r in by_rank) - started,
        "launch_to_main_s": max(r["main_wall"] for r in by_rank) - started,
        "launch_to_ready_s": max(r["ready_wall"] for r in by_rank) - started,
        "peak_rss_mb": max(r["peak_rss_kb"] for r in by_rank) / 1024.0,
        # At the end (not the peak): the process's own memory vs. shared library pages.
        "rss_anon_mb": max(r.get("rss_anon_kb", -1) for r in by_rank) / 1024.0,
        "rss_file_mb": max(r.get("rss_file_kb", -1) for r in by_rank) / 1024.0,
        # Proportional set size at the end: shared pages divided among the processes sharing them.
        "pss_mb": max(r.get("pss_kb", -1) for r in by_rank) / 1024.0,
        "pss_anon_mb": max(r.get("pss_anon_kb", -1) for r in by_rank) / 1024.0,
        "pss_file_mb": max(r.get("pss_file_kb", -1) for r in by_rank) / 1024.0,
        "pss_shmem_mb": max(r.get("pss_shmem_kb", -1) for r in by_rank) / 1024.0,
        "blas": by_rank[0]["blas"],
    }


def median_of(runs, key):
    values = [r[key] for r in runs if r is not None]
    return statistics.median(values) if values else None


def training(args, results):
    steps = {"mlp": (args.mlp_steps, args.mlp_warmup), "cnn": (args.cnn_steps, args.cnn_warmup)}
    runs = {}
    for round_index in range(args.rounds):
        order = IMPLS if round_index % 2 == 0 else IMPLS[::-1]
        for model in args.models:
            for setup, procs, threads in SETUPS:
                for impl in order:
                    cmd = command(impl, model, procs, threads, *steps[model])
                    started, records, error = run(cmd, pinned_env(threads), args.timeout)
                    key = (model, setup, impl)
                    if error:
                        print("  round %d %s %s %s: FAILED %s" % (round_index + 1, model, setup,
                                                                impl, error), flush=True)
                        runs.setdefault(key, []).append(None)
                        results["failures"].append({"run": list(key), "error": error,
                                                    "command": cmd})
                        continue
                    summary = summarise_training(records, started)
                    runs.setdefault(key, []).append(summary)
                    print("  round %d %-3s %s %-8s %9.0f samples/s" % (
                        round_index + 1, model, setup, impl, summary["samples_per_s"]),
                        flush=True)
    for (model, setup, impl), summaries in runs.items():
        entry = {"model": model, "setup": setup, "impl": impl,
                 "rounds": [s for s in summaries if s is not None]}
        for key in ("samples_per_s", "launch_to_first_step_s", "launch_to_main_s",
                    "launch_to_ready_s", "peak_rss_mb", "rss_anon_mb", "rss_file_mb", "pss_mb",
                    "pss_anon_mb", "pss_file_mb", "pss_shmem_mb"):
            entry[key] = median_of(summaries, key)
        entry["blas"] = next((s["blas"] for s in summaries if s), None)
        results["training"].append(entry)


def grad_sync(args, results):
    """Synced vs local micro-steps and the bare all-reduce, over shared memory (libaccel's default
    on one machine), over libaccel's TCP ring (as between machines) and over Gloo's TCP (before
    the ring; as PyTorch DDP on CPU), each over the loopback address."""
    launch = [os.path.join(BIN, "accel"), "launch", "-n", "2"]
    steps = str(args.sync_steps)
    for transport in ("shm", "tcp", "gloo"):
        env = pinned_env(1)
        env["ACCEL_SHARED_MEMORY_ALLREDUCE"] = "true" if transport == "shm" else "false"
        env["ACCEL_COLLECTIVE_TRANSPORT"] = "gloo" if transport == "gloo" else "tcp"
        _, records, error = run(launch + [os.path.join(BIN, "grad_sync_bench"), "--steps", steps,
                                          "--models", args.sync_models], env, args.timeout)
        if error:
            results["failures"].append({"run": ["grad_sync", transport], "error": error})
            print("  grad sync over %s: FAILED %s" % (transport, error), flush=True)
            continue
        models = [r for r in records if r["rank"] == 0]
        numel = ",".join(str(m["params"]) for m in models)
        _, bare, error = run(launch + [os.path.join(BIN, "collectives_bench"), "--steps", steps,
                                       "--numel", numel], env, args.timeout)
        if error:
            results["failures"].append({"run": ["allreduce", transport], "error": error})
            print("  bare all-reduce over %s: FAILED %s" % (transport, error), flush=True)
        bare_ms = {r["numel"]: r["ms"] for r in bare if r["rank"] == 0}
        for m in models:
            results["grad_sync"].append({
                "transport": transport, "model": m["model"], "params": m["params"],
                "grad_bytes": m["grad_bytes"], "batch_per_process": m["batch"],
                "sync_ms": m["sync_ms"], "local_ms": m["local_ms"],
                "allreduce_ms": bare_ms.get(m["params"])})
            print("  %-4s %-5s synced %8.2f ms, local %8.2f ms, bare all-reduce %s ms" % (
                transport, m["model"], m["sync_ms"], m["local_ms"],
                fmt(bare_ms.get(m["params"]), ".2f")), flush=True)


def find(results, model, setup, impl):
    for e in results["training"]:
        if (e["model"], e["setup"], e["impl"]) == (model, setup, impl):
            return e
    return None


def ratio(a, b):
    return a / b if a is not None and b else None


def derive(results):
    """The ratios the targets are stated in, from the medians."""
    derived = {}
    for model in MODELS:
        for setup, _, _ in SETUPS:
            ours, ref = find(results, model, setup, "libaccel"), find(results, model, setup,
                                                                      "pytorch")
            if ours and ref:
                derived["%s_%s_speedup" % (model, setup)] = ratio(ours["samples_per_s"],
                                                                  ref["samples_per_s"])
        for impl in IMPLS:
            two, one = find(results, model, "2x1", impl), find(results, model, "1x1", impl)
            if two and one and one["samples_per_s"]:
                derived["%s_%s_scaling" % (model, impl)] = ratio(two["samples_per_s"],
                                                                 2 * one["samples_per_s"])
    for model in MODELS:
        ours, ref = find(results, model, "2x1", "libaccel"), find(results, model, "2x1", "pytorch")
        if ours and ref:
            derived["%s_launch_speedup" % model] = ratio(ref["launch_to_first_step_s"],
                                                         ours["launch_to_first_step_s"])
            derived["%s_rss_ratio" % model] = ratio(ours["peak_rss_mb"], ref["peak_rss_mb"])
            derived["%s_rss_anon_ratio" % model] = ratio(ours["rss_anon_mb"], ref["rss_anon_mb"])
            derived["%s_pss_ratio" % model] = ratio(ours["pss_mb"], ref["pss_mb"])
            derived["%s_ready_after_main_s" % model] = (ours["launch_to_ready_s"] -
                                                        ours["launch_to_main_s"])
            derived["%s_first_step_after_main_s" % model] = (ours["launch_to_first_step_s"] -
                                                             ours["launch_to_main_s"])
    results["derived"] = derived


def libtorch_of_libaccel():
    """The LibTorch the programs under BIN were built against, as `accel env` reports it."""
    out = subprocess.run([os.path.join(BIN, "accel"), "env"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("- LibTorch version:"):
            return line.split(":", 1)[1].strip()
    return None


def fmt(value, spec):
    return format(value, spec) if value is not None else "-"


def print_table(results):
    d = results["derived"]
    print()
    print("Training throughput (samples/s, median of %d rounds; batch 64 per process, AdamW, fp32); "
          "libaccel on LibTorch %s, PyTorch on torch %s" % (
              results["settings"]["rounds"], results["settings"].get("libtorch_libaccel"),
              results["settings"].get("torch_pytorch")))
    print("%-5s %-6s %12s %12s %8s %10s %10s %9s %9s" % (
        "model", "setup", "libaccel", "pytorch", "ratio", "first-step", "first-step",
        "RSS MB", "RSS MB"))
    print("%-5s %-6s %12s %12s %8s %10s %10s %9s %9s" % (
        "", "", "", "", "", "libaccel", "pytorch", "libaccel", "pytorch"))
    for model in MODELS:
        for setup, _, _ in SETUPS:
            ours, ref = find(results, model, setup, "libaccel"), find(results, model, setup,
                                                                      "pytorch")
            if not ours and not ref:
                continue
            ours, ref = ours or {}, ref or {}
            print("%-5s %-6s %12s %12s %8s %9ss %9ss %9s %9s" % (
                model, setup, fmt(ours.get("samples_per_s"), ".0f"),
                fmt(ref.get("samples_per_s"), ".0f"),
                fmt(d.get("%s_%s_speedup" % (model, setup)), ".2f"),
                fmt(ours.get("launch_to_first_step_s"), ".2f"),
                fmt(ref.get("launch_to_first_step_s"), ".2f"),
                fmt(ours.get("peak_rss_mb"), ".0f"), fmt(ref.get("peak_rss_mb"), ".0f")))
    print()
    for model in MODELS:
        if "%s_libaccel_scaling" % model in d or "%s_pytorch_scaling" % model in d:
            print("2-process scaling efficiency, %s: libaccel %s, pytorch %s  "
                  "(2x1 samples/s / (2 x 1x1 samples/s))" % (
                      model, fmt(d.get("%s_libaccel_scaling" % model), ".1%"),
                      fmt(d.get("%s_pytorch_scaling" % model), ".1%")))
    for model in MODELS:
        if "%s_launch_speedup" % model in d:
            ours = find(results, model, "2x1", "libaccel")
            ref = find(results, model, "2x1", "pytorch")
            print("launch-to-first-step, 2 processes, %s: `accel launch` %.2f s (ranks in main "
                  "at %.2f s, ready at %.2f s), torch.distributed.run %.2f s: %.1fx faster" % (
                      model, ours["launch_to_first_step_s"], ours["launch_to_main_s"],
                      ours["launch_to_ready_s"], ref["launch_to_first_step_s"],
                      d["%s_launch_speedup" % model]))
            print("  after the last rank reached main: libaccel ready to train %.3f s, first step "
                  "done %.3f s" % (d["%s_ready_after_main_s" % model],
                                   d["%s_first_step_after_main_s" % model]))
            print("peak RSS per rank, 2 processes, %s: %.0f MB vs %.0f MB, %.2fx PyTorch's; at the "
                  "end, anonymous %.0f vs %.0f MB (%.2fx), file pages (libraries, mapped data) "
                  "%.0f vs %.0f MB" % (
                      model, ours["peak_rss_mb"], ref["peak_rss_mb"], d["%s_rss_ratio" % model],
                      ours["rss_anon_mb"], ref["rss_anon_mb"], d["%s_rss_anon_ratio" % model],
                      ours["rss_file_mb"], ref["rss_file_mb"]))
            print("  proportional (PSS, shared pages divided among their sharers) at the end: "
                  "%s vs %s MB, %sx (anonymous %s vs %s, file %s vs %s, shmem %s vs %s)" % (
                      fmt(ours.get("pss_mb"), ".0f"), fmt(ref.get("pss_mb"), ".0f"),
                      fmt(d.get("%s_pss_ratio" % model), ".2f"),
                      fmt(ours.get("pss_anon_mb"), ".0f"), fmt(ref.get("pss_anon_mb"), ".0f"),
                      fmt(ours.get("pss_file_mb"), ".0f"), fmt(ref.get("pss_file_mb"), ".0f"),
                      fmt(ours.get("pss_shmem_mb"), ".0f"), fmt(ref.get("pss_shmem_mb"), ".0f")))
    if results["grad_sync"]:
        print()
        print("Gradient synchronisation, 2 processes x 1 thread, forward+backward micro-step, "
              "batch 32 per process (median ms)")
        print("%-9s %-6s %11s %9s %9s %10s %10s %16s %9s" % (
            "transport", "model", "params", "grad MB", "local", "synced", "sync cost",
            "bare all-reduce", "cost/bare"))
        for g in results["grad_sync"]:
            cost = g["sync_ms"] - g["local_ms"]
            print("%-9s %-6s %11d %9.1f %9.2f %10.2f %10.2f %16s %8s" % (
                g["transport"], g["model"], g["params"], g["grad_bytes"] / 1e6, g["local_ms"],
                g["sync_ms"], cost, fmt(g["allreduce_ms"], ".2f"),
                fmt(ratio(cost, g["allreduce_ms"]), ".2f") + "x"))
    print()
    s = results["settings"]
    print("Pinned: %s; BLAS libaccel %s, pytorch %s; 2-process PyTorch runs launched by %s" % (
        s["pinning"], s.get("blas_libaccel"), s.get("blas_pytorch"), s["pytorch_launcher"]))
    if results["failures"]:
        print("FAILED runs: %d (see the JSON)" % len(results["failures"]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", default="mlp,cnn")
    parser.add_argument("--mlp-steps", type=int, default=1500)
    parser.add_argument("--mlp-warmup", type=int, default=50)
    parser.add_argument("--cnn-steps", type=int, default=60)
    parser.add_argument("--cnn-warmup", type=int, default=5)
    parser.add_argument("--sync-steps", type=int, default=10)
    parser.add_argument("--sync-models", default="0.3M,10M,50M")
    parser.add_argument("--no-grad-sync", action="store_true")
    parser.add_argument("--no-training", action="store_true",
                        help="skip the training comparison (the communication tables only)")
    parser.add_argument("--no-network", action="store_true",
                        help="skip the collectives between two network namespaces")
    parser.add_argument("--network-rounds", type=int, default=3)
    parser.add_argument("--network-steps", type=int, default=10)
    parser.add_argument("--network-sizes", default="1000000,10000000,50000000")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per program run")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: one round, few steps, small models (checks the harness)")
    parser.add_argument("--json", help="where to write the results (default build/bench/...)")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.mlp_steps, args.mlp_warmup = 1, 20, 2
        args.cnn_steps, args.cnn_warmup, args.sync_steps, args.sync_models = 2, 1, 2, "0.3M"
        args.network_rounds, args.network_steps, args.network_sizes = 1, 2, "1000000"
    args.models = [m for m in args.models.split(",") if m]
    for m in args.models:
        if m not in MODELS:
            parser.error("unknown model %s (mlp, cnn)" % m)

    began = time.time()
    results = {
        "when": datetime.datetime.now().isoformat(timespec="seconds"),
        "host": {"name": platform.node(), "cpus": os.cpu_count(), "kernel": platform.release()},
        "settings": {
            "rounds": args.rounds, "batch_per_process": 64, "optimizer": "AdamW lr 1e-3",
            "dtype": "fp32", "mlp_steps": args.mlp_steps, "mlp_warmup": args.mlp_warmup,
            "cnn_steps": args.cnn_steps, "cnn_warmup": args.cnn_warmup,
            "pinning": "OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = MKL_NUM_THREADS = threads per "
                       "process, set for both sides; libaccel's num_threads and PyTorch's "
                       "torch.set_num_threads get the same count",
            "pytorch_launcher": "torch.distributed.run through bench/torchrun.py (fixes its "
                                "Python 3.11 start-up error); ranks end with a barrier and "
                                "os._exit",
            "python": PYTHON,
        },
        "training": [], "grad_sync": [], "network": [], "failures": [],
    }
    results["settings"]["libtorch_libaccel"] = libtorch_of_libaccel()
    results["settings"]["torch_pytorch"] = subprocess.run(
        [PYTHON, "-c", "import torch; print(torch.__version__)"], capture_output=True,
        text=True).stdout.strip() or None
    print("libaccel on LibTorch %s; PyTorch DDP on torch %s" % (
        results["settings"]["libtorch_libaccel"], results["settings"]["torch_pytorch"]), flush=True)
    if not args.no_training:
        print("Training runs (%d rounds):" % args.rounds, flush=True)
        training(args, results)
    for impl in IMPLS:
        blas = {e["blas"] for e in results["training"] if e["impl"] == impl and e["blas"]}
        results["settings"]["blas_" + impl] = ", ".join(sorted(blas)) or None
    if not args.no_grad_sync:
        print("Gradient synchronisation micro-benchmark:", flush=True)
        grad_sync(args, results)
    if not args.no_network:
        print("Collectives between two network namespaces:", flush=True)
        network.network(args, results, BIN)
    derive(results)
    results["duration_s"] = time.time() - began
    print_table(results)
    network.print_network(results)

    path = args.json or os.path.join(
        ROOT, "build", "bench", "bench-%s.json" % time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as out:
        json.dump(results, out, indent=1)
    print("\nResults: %s (%.0f s)" % (path, results["duration_s"]))
    return 1 if results["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
