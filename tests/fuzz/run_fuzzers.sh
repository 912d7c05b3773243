#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (address and undefined-behaviour sanitizers) and runs each
# for a bounded time. On demand, not part of ctest: tests/fuzz/run_fuzzers.sh [seconds per target]
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-60}
CXX=${CXX:-$(command -v clang++ || command -v clang++-14 || true)}
if [ -z "$CXX" ]; then
  echo "clang++ not found: apt-get install clang libclang-rt-14-dev"; exit 2
fi
out=build/fuzz
mkdir -p "$out"
flags=(-std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -Isrc)
"$CXX" "${flags[@]}" tests/fuzz/safetensors_header_fuzz.cpp src/checkpoint/safetensors.cpp \
  -o "$out/safetensors_header_fuzz"
"$CXX" "${flags[@]}" tests/fuzz/manifest_fuzz.cpp src/checkpoint/manifest.cpp -lz \
  -o "$out/manifest_fuzz"
for target in safetensors_header_fuzz manifest_fuzz; do
  mkdir -p "$out/corpus_$target"
  echo "== $target, ${seconds}s"
  "$out/$target" -max_total_time="$seconds" -print_final_stats=1 "$out/corpus_$target" 2>&1 |
    grep -E "stat::number_of_executed_units|ERROR|SUMMARY|crash-" || true
done
