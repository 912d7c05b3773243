#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (address and undefined-behaviour sanitizers) and runs them
# side by side (one core each), each for a bounded time. On demand, not part of ctest:
# tests/fuzz/run_fuzzers.sh [seconds per target] (tools/sanitize.sh fuzz runs it too).
#
# Needs clang and libFuzzer: installs Debian's clang-14 and libclang-rt-14-dev when absent (sudo
# when not root, as tools/setup.sh). Exits non-zero when a fuzzer finds a crash, a sanitizer report
# (UBSan included: -fno-sanitize-recover), a leak, a timeout or an out-of-memory input; the input
# that did it is kept under build/fuzz/artifacts/ and the command that replays it is printed.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-60}

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# A C++ compiler that links -fsanitize=fuzzer: $CXX if set, else clang++ or clang++-14, installed
# from Debian when missing (clang-14 alone lacks the runtime libraries: libclang-rt-14-dev).
links_fuzzer() {
  echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' |
    "$1" -x c++ -fsanitize=fuzzer,address,undefined - -o /dev/null 2>/dev/null
}
CXX=${CXX:-$(command -v clang++ || command -v clang++-14 || true)}
if [ -z "$CXX" ] || ! links_fuzzer "$CXX"; then
  missing=()
  for p in clang-14 libclang-rt-14-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "run_fuzzers: installing ${missing[*]}"
    as_root apt-get update
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      "${missing[@]}"
  fi
  CXX=$(command -v clang++ || command -v clang++-14 || true)
  if [ -z "$CXX" ] || ! links_fuzzer "$CXX"; then
    echo "run_fuzzers: no clang++ that links -fsanitize=fuzzer (apt-get install clang-14 libclang-rt-14-dev)"
    exit 2
  fi
fi
echo "run_fuzzers: $CXX ($("$CXX" --version | head -n 1))"

out=build/fuzz
mkdir -p "$out/artifacts"
# -fno-sanitize-recover: an undefined-behaviour report aborts, so libFuzzer keeps the input and fails.
flags=(-std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Isrc)
# The two targets build, then run, side by side: each fuzzer is one process on one core.
"$CXX" "${flags[@]}" tests/fuzz/safetensors_header_fuzz.cpp src/checkpoint/safetensors.cpp \
  -o "$out/safetensors_header_fuzz" &
build1=$!
"$CXX" "${flags[@]}" tests/fuzz/manifest_fuzz.cpp src/checkpoint/manifest.cpp -lz \
  -o "$out/manifest_fuzz" &
build2=$!
wait $build1
wait $build2

targets=(safetensors_header_fuzz manifest_fuzz)
# Runs one target for $seconds; its exit code is the fuzzer's.
fuzz() {  # target
  local target=$1 corpus=$out/corpus_$1
  mkdir -p "$corpus"
  rm -f "$out"/artifacts/"$target"-*
  # The checked-in seeds are read, never written; new inputs go to the corpus under build/.
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$out/$target" -max_total_time="$seconds" -print_final_stats=1 \
    -artifact_prefix="$out/artifacts/$target-" "$corpus" "tests/fuzz/seeds/$target" \
    > "$out/$target.log" 2>&1
}
pids=()
for target in "${targets[@]}"; do
  echo "== $target, ${seconds}s (seeds: tests/fuzz/seeds/$target, log: $out/$target.log)"
  fuzz "$target" &
  pids+=($!)
done

failed=()
for i in "${!targets[@]}"; do
  target=${targets[$i]}
  log=$out/$target.log
  rc=0
  wait "${pids[$i]}" || rc=$?
  echo "== $target:"
  grep -E "stat::number_of_executed_units|stat::new_units_added|ERROR|SUMMARY|runtime error|Test unit written|==[0-9]+== ERROR" "$log" || true
  if [ $rc -ne 0 ]; then
    echo "!! $target FAILED (exit code $rc); the report:"
    sed -n '/==[0-9]*==\(ERROR\|WARNING\)\|runtime error\|deadly signal\|uncaught exception/,$p' "$log" | head -n 80
    for a in "$out"/artifacts/"$target"-*; do
      [ -e "$a" ] && echo "   reproduce: $out/$target $a"
    done
    failed+=("$target")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "run_fuzzers: FAILED: ${failed[*]}"
  exit 1
fi
echo "run_fuzzers: no crash in ${seconds}s per target"
