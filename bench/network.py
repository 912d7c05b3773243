"""The collectives between two machines: two network namespaces joined by a veth pair (the
fixture of tests/cluster), one rank in each, libaccel's TCP ring against LibTorch's Gloo
(collective_transport), in one run. Part of bench/run.py; needs root and iproute2."""

import json
import os
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "cluster"))

OPS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast"]
TRANSPORTS = ["gloo", "tcp"]  # before, after


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_machines(net, bin_dir, argv, env, timeout):
    """accel launch in each namespace, one process each; rank 0's BENCH records, or an error."""
    port = free_port()
    procs = []
    for i in (0, 1):
        cmd = [os.path.join(bin_dir, "accel"), "launch", "--num_machines", "2", "--machine_rank",
               str(i), "--main_process_ip", net.addr[0], "--main_process_port", str(port),
               "-n", "2"] + argv
        procs.append(net.popen(i, cmd, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True))
    outs = []
    try:
        outs = [p.communicate(timeout=timeout) for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        return None, "timed out after %d s" % timeout
    for p, (_, err) in zip(procs, outs):
        if p.returncode != 0:
            return None, "exit %d: %s" % (p.returncode, (err.strip().splitlines() or ["?"])[-1])
    records = [json.loads(l[6:]) for l in outs[0][0].splitlines() if l.startswith("BENCH ")]
    return [r for r in records if r["rank"] == 0], None


def network(args, results, bin_dir):
    """Fills results["network"]: per transport, op and size, rank 0's median ms."""
    import netns_fixture
    reason = netns_fixture.why_unavailable()
    if reason:
        results["network_skipped"] = reason
        print("  two namespaces: skipped (%s)" % reason, flush=True)
        return
    env = dict(os.environ)
    for key in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[key] = "1"
    env["ACCEL_JOB_TOKEN"] = "bench-%d" % os.getpid()
    env["HF_HOME"] = "/nonexistent-hf-home"
    with netns_fixture.NetnsPair() as net:
        for rnd in range(args.network_rounds):
            for transport in (TRANSPORTS if rnd % 2 == 0 else TRANSPORTS[::-1]):
                env["ACCEL_COLLECTIVE_TRANSPORT"] = transport
                argv = [os.path.join(bin_dir, "collectives_bench"), "--steps",
                        str(args.network_steps), "--numel", args.network_sizes, "--ops",
                        ",".join(OPS)]
                records, error = _two_machines(net, bin_dir, argv, env, args.timeout)
                if error:
                    results["failures"].append({"run": ["network", transport], "error": error})
                    print("  two namespaces, %s: FAILED %s" % (transport, error), flush=True)
                    continue
                for r in records:
                    results["network"].append({"transport": transport, "round": rnd,
                                               "op": r["op"], "numel": r["numel"],
                                               "bytes": r["bytes"], "ms": r["ms"]})
                print("  two namespaces, round %d, %s: %d figures" % (rnd + 1, transport,
                                                                    len(records)), flush=True)


def _median(values):
    values = sorted(values)
    n = len(values)
    return None if not n else values[n // 2] if n % 2 else 0.5 * (values[n // 2 - 1] +
                                                                     values[n // 2])


def print_network(results):
    rows = results.get("network") or []
    if not rows:
        if results.get("network_skipped"):
            print("\nTwo namespaces: skipped (%s)" % results["network_skipped"])
        return
    print()
    print("Collectives between two network namespaces (veth), one rank each, fp32 (median ms "
          "over rounds; GB/s = tensor bytes / time); before: Gloo, after: libaccel's TCP ring")
    print("%-15s %11s %10s %10s %10s %10s %9s" % ("op", "elements", "gloo ms", "tcp ms",
                                                   "gloo GB/s", "tcp GB/s", "tcp/gloo"))
    derived = results.setdefault("derived", {})
    sizes = sorted({r["numel"] for r in rows})
    for op in OPS:
        for numel in sizes:
            ms = {t: _median([r["ms"] for r in rows if (r["transport"], r["op"], r["numel"]) ==
                              (t, op, numel)]) for t in TRANSPORTS}
            if not all(ms.values()):
                continue
            gbs = {t: numel * 4 / ms[t] / 1e6 for t in TRANSPORTS}
            derived["network_%s_%d_throughput_ratio" % (op, numel)] = gbs["tcp"] / gbs["gloo"]
            print("%-15s %11d %10.2f %10.2f %10.2f %10.2f %8.2fx" % (
                op, numel, ms["gloo"], ms["tcp"], gbs["gloo"], gbs["tcp"], gbs["tcp"] / gbs["gloo"]))
    print("(Gloo has no CPU reduce-scatter in LibTorch 1.13: its row is the all-reduce the "
          "communicator does there instead.)")
