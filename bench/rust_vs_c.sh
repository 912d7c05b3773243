#!/usr/bin/env bash
# The Rust binding's cost: the Rust Fashion-MNIST example against the C one, same model, data,
# schedule and threads, in one run, interleaved C R / R C per round so drift hits both alike.
#   bench/rust_vs_c.sh [rounds (5)] [steps (300)] [processes (2)]
# Prints each run's training rate (the example's own samples/s at its last step, which excludes
# start-up and evaluation), the medians, and the ratio Rust / C.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5} steps=${2:-300} procs=${3:-2}
if [ ! -f build/CMakeCache.txt ]; then
  echo "build/ is not configured: run tools/setup.sh first (README.md)" >&2
  exit 2
fi
cmake --build build --target accel_cli train_fashion_mnist >/dev/null
ACCEL_LIB_DIR=$PWD/build/lib cargo build --quiet --release --examples \
  --manifest-path bindings/rust/Cargo.toml --target-dir build/rust
c=build/bin/train_fashion_mnist
rust=build/rust/release/examples/train_fashion_mnist
export HF_HOME=$PWD/build/no-hf-home

rate() {  # program -> samples/s at the last step
  build/bin/accel launch -n "$procs" "$1" --max-steps "$steps" --workers 1 |
    awk '/samples\/s/ { for (i = 1; i <= NF; ++i) if ($i == "samples/s") r = $(i - 1) } END { print r }'
}
c_rates=() rust_rates=()
for ((r = 1; r <= rounds; ++r)); do
  if ((r % 2)); then
    c_rates+=("$(rate $c)"); rust_rates+=("$(rate $rust)")
  else
    rust_rates+=("$(rate $rust)"); c_rates+=("$(rate $c)")
  fi
  echo "round $r: C ${c_rates[-1]} samples/s, Rust ${rust_rates[-1]} samples/s"
done
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
mc=$(median "${c_rates[@]}") mr=$(median "${rust_rates[@]}")
awk -v c="$mc" -v r="$mr" -v n="$rounds" -v p="$procs" -v s="$steps" 'BEGIN {
  printf "median of %d rounds, %d processes, %d steps of 64: C %.0f samples/s, Rust %.0f samples/s, Rust/C %.3f\n", n, p, s, c, r, r / c }'
