#!/usr/bin/env python3
"""same_params.py TOLERANCE -- CMD1... -- CMD2...: runs both commands, reads the lines
"param NAME v1 v2 ..." each prints, and fails unless they name the same tensors and every value of
a tensor agrees within TOLERANCE times that tensor's largest magnitude (as mp_test's data-parallel
checks)."""
import subprocess
import sys


def params(cmd):
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({run.returncode}):\n{run.stdout}{run.stderr}")
    out = {}
    for line in run.stdout.splitlines():
        if line.startswith("param "):
            name, *values = line[6:].split()
            out[name] = [float(v) for v in values]
    if not out:
        sys.exit(f"{' '.join(cmd)} printed no parameters:\n{run.stdout}{run.stderr}")
    return out


def main():
    args = sys.argv[1:]
    tolerance = float(args[0])
    first = args.index("--", 1)
    second = args.index("--", first + 1)
    a, b = params(args[first + 1:second]), params(args[second + 1:])
    if sorted(a) != sorted(b):
        sys.exit(f"different tensors: {sorted(a)} against {sorted(b)}")
    worst = 0.0
    for name, values in a.items():
        scale = max(abs(v) for v in values)
        diff = max(abs(x - y) for x, y in zip(values, b[name]))
        print(f"{name}: {len(values)} values, max difference {diff:.3g} (scale {scale:.3g})")
        if len(values) != len(b[name]) or diff > tolerance * scale:
            sys.exit(f"{name} differs beyond {tolerance} of its scale")
        worst = max(worst, diff / scale if scale else diff)
    print(f"same parameters: max relative difference {worst:.3g}")


main()
