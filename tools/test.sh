#!/usr/bin/env bash
# Builds what changed and runs the whole test suite (unit, C ABI, multi-process, install).
# ACCEL_BUILD_DIR (default build) and ACCEL_TORCH (the LibTorch, when that tree is first
# configured; see cmake/AccelTorch.cmake) run it on another build tree: tools/test_torch2.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${ACCEL_BUILD_DIR:-build}
[ -f "$build/CMakeCache.txt" ] ||
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${ACCEL_TORCH:+-DACCEL_TORCH="$ACCEL_TORCH"}
cmake --build "$build"
# No user configuration may leak into the tests.
export HF_HOME="$PWD/$build/no-hf-home"
ctest --test-dir "$build" --output-on-failure -j2 "$@"
