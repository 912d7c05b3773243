#!/usr/bin/env bash
# What one call costs in each language, in one run: C (bench/calls.c), Rust, Go and Julia (each
# binding's calls bench, the same loops), each under `accel launch -n 2` so the collective pairs
# up. Measures: a one-element f32 tensor made and freed the language's normal way; its element
# count; a sum of it across the two processes, the result freed. ns per call, the best of 5
# repetitions inside a program; the programs run in turn, `rounds` times (C first, then the
# bindings, then again), and the table gives each language's median and its ratio to C's.
#   bench/binding_calls.sh [rounds (3)] [iterations (200000)]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3} n=${2:-200000}
if [ ! -f build/CMakeCache.txt ]; then
  echo "build/ is not configured: run tools/setup.sh first (README.md)" >&2
  exit 2
fi
cmake --build build --target accel accel_cli calls_bench >/dev/null
export HF_HOME=$PWD/build/no-hf-home
ACCEL_LIB_DIR=$PWD/build/lib cargo build --quiet --release --example calls_bench \
  --manifest-path bindings/rust/Cargo.toml --target-dir build/rust
(cd bindings/go && PKG_CONFIG_PATH=$PWD/../../build/uninstalled \
  go build -o ../../build/go/calls_bench ./bench/calls)
export ACCEL_LIBRARY=$PWD/build/lib/libaccel.so JULIA_DEPOT_PATH=$PWD/build/julia/depot
julia --project=bindings/julia/Accel -e 'using Accel'   # precompiled once, outside the runs

declare -A program=(
  [C]="build/bin/calls_bench"
  [Rust]="build/rust/release/examples/calls_bench"
  [Go]="build/go/calls_bench"
  [Julia]="julia --project=bindings/julia/Accel bindings/julia/Accel/bench/calls.jl")
languages=(C Rust Go Julia)
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for ((r = 1; r <= rounds; ++r)); do
  for lang in "${languages[@]}"; do
    # shellcheck disable=SC2086  # the Julia entry is a command with arguments
    build/bin/accel launch -n 2 ${program[$lang]} "$n" | awk -v lang="$lang" \
      '$1 ~ /_ns$/ { print lang, $1, $2 }' >> "$results"
  done
done
python3 - "$results" "$rounds" "$n" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
medians = {}
for lang, measure, value in rows:
    medians.setdefault((lang, measure), []).append(float(value))
medians = {k: statistics.median(v) for k, v in medians.items()}
measures = [("create_free_ns", "tensor create + free"), ("query_ns", "element count"),
            ("allreduce_ns", "sum of 1 element, 2 processes")]
print(f"ns per call, median of {sys.argv[2]} runs (each the best of 5 loops; {sys.argv[3]} "
      "iterations, a 400th of them for the sum)\n")
print("| call | C | Rust | Go | Julia |")
print("|---|---:|---:|---:|---:|")
for key, label in measures:
    c = medians.get(("C", key))
    cells = []
    for lang in ("C", "Rust", "Go", "Julia"):
        v = medians.get((lang, key))
        if v is None:
            cells.append("missing")
        elif lang == "C" or not c:
            cells.append(f"{v:.0f}" if v >= 10 else f"{v:.1f}")
        else:
            cells.append((f"{v:.0f}" if v >= 10 else f"{v:.1f}") + f" ({v / c:.2f}x)")
    print(f"| {label} | " + " | ".join(cells) + " |")
PY
