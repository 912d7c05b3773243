#!/usr/bin/env python3
"""same_weights.py TOLERANCE -- CMD1... -- CMD2...: runs both commands, each with the word {save} in
it replaced by a fresh directory of its own (where the program saves its model with save_model),
then reads both model.safetensors files and fails unless they hold the same tensor names, shapes
and dtypes, and every float tensor agrees within TOLERANCE times its largest magnitude (integer
tensors exactly). Prints the largest relative difference found. For the MiniLM example's
equivalence checks (1 x 16 against 2 x 8, ZeRO stage 3 against stage 0). Exits 77 (skipped) when
the file ACCEL_TEST_REQUIRE names (the model folder's weights) is missing."""
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64,
          "I32": np.int32, "U8": np.uint8}


def read_safetensors(path):
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(data[begin:end], dtype=DTYPES[info["dtype"]]).reshape(
            info["shape"])
    return out


def run(cmd, save):
    cmd = [save if word == "{save}" else word for word in cmd]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    sys.stdout.write(done.stdout)
    files = [f for f in os.listdir(save) if f.endswith(".safetensors")]
    if len(files) != 1:
        sys.exit(f"{' '.join(cmd)} saved {files} in {save}, not one safetensors file")
    return read_safetensors(os.path.join(save, files[0]))


def main():
    required = os.environ.get("ACCEL_TEST_REQUIRE")
    if required and not os.path.exists(required):
        print(f"skipped: {required} is missing (tools/fetch_minilm.sh)")
        return 77
    args = sys.argv[1:]
    tolerance = float(args[0])
    first = args.index("--", 1)
    second = args.index("--", first + 1)
    with tempfile.TemporaryDirectory() as tmp:
        a = run(args[first + 1:second], os.path.join(tmp, "a"))
        b = run(args[second + 1:], os.path.join(tmp, "b"))
    if sorted(a) != sorted(b):
        sys.exit(f"different tensors: {sorted(set(a) ^ set(b))}")
    worst, worst_name, diffs = 0.0, "", []
    for name in sorted(a):
        x, y = a[name], b[name]
        if x.shape != y.shape or x.dtype != y.dtype:
            sys.exit(f"{name}: {x.dtype}{list(x.shape)} against {y.dtype}{list(y.shape)}")
        if not np.issubdtype(x.dtype, np.floating):
            if not np.array_equal(x, y):
                sys.exit(f"{name} differs")
            continue
        scale = max(float(np.abs(x).max()), 1e-30)
        diff = float(np.abs(x.astype(np.float64) - y.astype(np.float64)).max()) / scale
        diffs.append((diff, name))
        if diff > worst:
            worst, worst_name = diff, name
    print(f"{len(a)} tensors; largest difference {worst:.3e} of the tensor's largest magnitude "
          f"({worst_name or 'none'})")
    for diff, name in sorted(diffs, reverse=True)[:5]:
        print(f"  {diff:.3e} {name}")
    if worst > tolerance:
        sys.exit(f"{worst_name} differs by {worst:.3e} > {tolerance}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
