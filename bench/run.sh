#!/usr/bin/env bash
# One command for the benchmarks: builds what they need, then runs bench/run.py (see its --help).
#   bench/run.sh            full run (~5 minutes on 2 cores)
#   bench/run.sh --quick    a smoke run of the harness (seconds)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build/CMakeCache.txt ]; then
  echo "build/ is not configured: run tools/setup.sh first (README.md)" >&2
  exit 2
fi
cmake --build build --target accel_cli train_bench grad_sync_bench allreduce_bench
exec /usr/bin/python3 bench/run.py "$@"
