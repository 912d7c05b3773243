#!/usr/bin/env bash
# One command for the benchmarks: builds what they need, then runs bench/run.py (see its --help).
#   bench/run.sh                       full run (~5 minutes on 2 cores) of build/ (Debian's LibTorch)
#   bench/run.sh --build build-torch2  the same with a build tree on another LibTorch (2.x)
#   bench/run.sh --quick               a smoke run of the harness (seconds)
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
if [ "${1:-}" = --build ]; then
  build=${2:?--build needs a build directory}
  shift 2
fi
if [ ! -f "$build/CMakeCache.txt" ]; then
  echo "$build/ is not configured: run tools/setup.sh first (README.md; tools/test_torch2.sh for build-torch2)" >&2
  exit 2
fi
cmake --build "$build" --target accel_cli train_bench grad_sync_bench collectives_bench
ACCEL_BENCH_BIN="$(cd "$build" && pwd)/bin" exec /usr/bin/python3 bench/run.py "$@"
