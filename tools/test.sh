#!/usr/bin/env bash
# Builds what changed and runs the whole test suite (unit, C ABI, multi-process, install).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build/CMakeCache.txt ] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build
# No user configuration may leak into the tests.
export HF_HOME="$PWD/build/no-hf-home"
ctest --test-dir build --output-on-failure -j2 "$@"
