#!/usr/bin/env bash
# A binding's cost: its Fashion-MNIST example against the C one, same model, data, schedule and
# threads, in one run, interleaved C B / B C per round so drift hits both alike.
#   bench/binding_vs_c.sh rust|go [rounds (5)] [steps (300)] [processes (2)]
# Prints each run's training rate (the example's own samples/s at its last step, which excludes
# start-up and evaluation), the medians, and the ratio binding / C.
set -euo pipefail
cd "$(dirname "$0")/.."
lang=${1:-} rounds=${2:-5} steps=${3:-300} procs=${4:-2}
if [ ! -f build/CMakeCache.txt ]; then
  echo "build/ is not configured: run tools/setup.sh first (README.md)" >&2
  exit 2
fi
cmake --build build --target accel_cli train_fashion_mnist >/dev/null
case $lang in
  rust)
    ACCEL_LIB_DIR=$PWD/build/lib cargo build --quiet --release --examples \
      --manifest-path bindings/rust/Cargo.toml --target-dir build/rust
    binding=build/rust/release/examples/train_fashion_mnist name=Rust ;;
  go)
    (cd bindings/go && PKG_CONFIG_PATH=$PWD/../../build/uninstalled \
      go build -o ../../build/go/train_fashion_mnist ./examples/train_fashion_mnist)
    binding=build/go/train_fashion_mnist name=Go ;;
  *) echo "usage: $0 rust|go [rounds] [steps] [processes]" >&2; exit 2 ;;
esac
c=build/bin/train_fashion_mnist
export HF_HOME=$PWD/build/no-hf-home

rate() {  # program -> samples/s at the last step
  build/bin/accel launch -n "$procs" "$1" --max-steps "$steps" --workers 1 |
    awk '/samples\/s/ { for (i = 1; i <= NF; ++i) if ($i == "samples/s") r = $(i - 1) } END { print r }'
}
c_rates=() b_rates=()
for ((r = 1; r <= rounds; ++r)); do
  if ((r % 2)); then
    c_rates+=("$(rate $c)"); b_rates+=("$(rate $binding)")
  else
    b_rates+=("$(rate $binding)"); c_rates+=("$(rate $c)")
  fi
  echo "round $r: C ${c_rates[-1]} samples/s, $name ${b_rates[-1]} samples/s"
done
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
mc=$(median "${c_rates[@]}") mb=$(median "${b_rates[@]}")
awk -v c="$mc" -v b="$mb" -v n="$rounds" -v p="$procs" -v s="$steps" -v name="$name" 'BEGIN {
  printf "median of %d rounds, %d processes, %d steps of 64: C %.0f samples/s, %s %.0f samples/s, %s/C %.3f\n", n, p, s, c, name, b, name, b / c }'
