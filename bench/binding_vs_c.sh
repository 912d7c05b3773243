#!/usr/bin/env bash
# A binding's cost: its Fashion-MNIST example against the C one, same model, data, schedule and
# threads, in one run, interleaved C B / B C per round so drift hits both alike. `cpp` is the C++
# example, whose model is a torch::nn::Module of its own (the host-owned tensors path); `tch` the
# Rust tch-rs one (a VarStore), against the C example of build-torch2/, the same LibTorch 2.11.
#   bench/binding_vs_c.sh rust|go|julia|cpp|tch [rounds (5)] [steps (300)] [processes (2)]
# Per run: the training rate from step 100 to the last step (computed from the example's own
# cumulative samples/s lines, so start-up, compilation and the first 100 steps are left out: Julia
# compiles its loop during step 1), and the seconds the run spent outside training (start-up,
# compilation, evaluation: wall time minus training time). Prints the medians and the ratio B / C.
set -euo pipefail
cd "$(dirname "$0")/.."
lang=${1:-} rounds=${2:-5} steps=${3:-300} procs=${4:-2}
dir=build
[ "$lang" = tch ] && dir=build-torch2
if [ ! -f $dir/CMakeCache.txt ]; then
  echo "$dir/ is not configured: run tools/setup.sh (and for tch tools/test_torch2.sh) first (README.md)" >&2
  exit 2
fi
if ((steps < 200)); then echo "steps must be at least 200" >&2; exit 2; fi
cmake --build $dir --target accel accel_cli train_fashion_mnist >/dev/null
export HF_HOME=$PWD/build/no-hf-home
case $lang in
  rust)
    ACCEL_LIB_DIR=$PWD/build/lib cargo build --quiet --release --examples \
      --manifest-path bindings/rust/Cargo.toml --target-dir build/rust
    binding=(build/rust/release/examples/train_fashion_mnist) name=Rust ;;
  go)
    (cd bindings/go && PKG_CONFIG_PATH=$PWD/../../build/uninstalled \
      go build -o ../../build/go/train_fashion_mnist ./examples/train_fashion_mnist)
    binding=(build/go/train_fashion_mnist) name=Go ;;
  julia)
    export ACCEL_LIBRARY=$PWD/build/lib/libaccel.so JULIA_DEPOT_PATH=$PWD/build/julia/depot
    julia --project=bindings/julia/Accel -e 'using Accel'   # precompiled once, outside the runs
    binding=(julia --project=bindings/julia/Accel bindings/julia/Accel/examples/train_fashion_mnist.jl)
    name=Julia ;;
  cpp)
    cmake --build build --target train_fashion_mnist_cpp >/dev/null
    binding=(build/bin/train_fashion_mnist_cpp) name=C++ ;;
  tch)
    torch=$(tools/fetch_torch.sh 2.11.0)
    export LIBTORCH=$torch/torch LIBTORCH_CXX11_ABI=1 LD_LIBRARY_PATH=$torch/torch/lib
    ACCEL_LIB_DIR=$PWD/build-torch2/lib cargo build --quiet --release --features tch \
      --example train_fashion_mnist_tch --manifest-path bindings/rust/Cargo.toml \
      --target-dir build-torch2/rust
    binding=(build-torch2/rust/release/examples/train_fashion_mnist_tch) name=tch ;;
  *) echo "usage: $0 rust|go|julia|cpp|tch [rounds] [steps] [processes]" >&2; exit 2 ;;
esac
c=($dir/bin/train_fashion_mnist)

run() {  # program... -> "steady-rate outside-seconds"
  local start end out
  start=$(date +%s.%N)
  out=$($dir/bin/accel launch -n "$procs" "$@" --max-steps "$steps" --workers 1 2>&1)  # the log is on stderr
  end=$(date +%s.%N)
  awk -v start="$start" -v end="$end" -v world="$procs" '
    / step [0-9]+\/[0-9]+ / {
      for (i = 1; i <= NF; ++i) {
        if ($i == "step") { split($(i + 1), s, "/"); k = s[1] }
        if ($i == "samples/s") r = $(i - 1)
      }
      elapsed[k] = k * 64 * world / r; last = k
    }
    END {
      printf "%.1f %.1f\n", (last - 100) * 64 * world / (elapsed[last] - elapsed[100]), end - start - elapsed[last]
    }' <<<"$out"
}
c_rates=() b_rates=() c_out=() b_out=()
for ((r = 1; r <= rounds; ++r)); do
  if ((r % 2)); then a=$(run "${c[@]}"); b=$(run "${binding[@]}")
  else b=$(run "${binding[@]}"); a=$(run "${c[@]}"); fi
  c_rates+=("${a% *}") c_out+=("${a#* }") b_rates+=("${b% *}") b_out+=("${b#* }")
  echo "round $r: C ${a% *} samples/s (${a#* }s outside training), $name ${b% *} samples/s (${b#* }s outside training)"
done
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
mc=$(median "${c_rates[@]}") mb=$(median "${b_rates[@]}") oc=$(median "${c_out[@]}") ob=$(median "${b_out[@]}")
awk -v c="$mc" -v b="$mb" -v oc="$oc" -v ob="$ob" -v n="$rounds" -v p="$procs" -v s="$steps" -v name="$name" 'BEGIN {
  printf "median of %d rounds, %d processes, steps 100-%d of 64: C %.0f samples/s, %s %.0f samples/s, %s/C %.3f\n", n, p, s, c, name, b, name, b / c
  printf "outside training (start-up, compilation, evaluation): C %.1fs, %s %.1fs\n", oc, name, ob }'
