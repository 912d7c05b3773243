#!/usr/bin/env bash
# The test suite against LibTorch 2.x: PyPI's torch wheel (tools/fetch_torch.sh; the version
# below unless ACCEL_TORCH_VERSION says another, 2.7 or later), built in build-torch2/. Run after
# tools/setup.sh, which installs the rest (and the 1.13 Python reference the tests compare with).
# Usage: tools/test_torch2.sh [--all] [ctest arguments...]
#
# By default it runs the tests whose code can behave differently on another LibTorch: everything
# but the labels `pure` (no LibTorch in the process: the configuration, launch-plan and other pure
# logic, the `accel config` tests), `binding` (the Rust, Go and Julia bindings sit on the C ABI
# alone, the same on both lines; their tests run on the 1.13 line), `bench` (the benchmark
# harness's smoke run: it measures nothing, and its programs make the examples' library calls),
# `slow` (the two-epoch accuracy bars) and `one_line` (a run whose library calls another test of
# this tier makes: tests/examples/CMakeLists.txt says which). The fault suite runs quick
# (ACCEL_FAULTS_QUICK=1: every fault kind, ~200 injections instead of ~375; the 1.13 line runs
# them all). --all runs every test, the whole fault suite included, as tools/test.sh --all does.
set -euo pipefail
cd "$(dirname "$0")/.."
torch_dir=$(tools/fetch_torch.sh "${ACCEL_TORCH_VERSION:-2.11.0}")
if [ -f build-torch2/CMakeCache.txt ] &&
   ! grep -qx "ACCEL_TORCH:PATH=$torch_dir" build-torch2/CMakeCache.txt; then
  cmake -S . -B build-torch2 -DACCEL_TORCH="$torch_dir" >/dev/null
fi
[ "${1:-}" = --all ] || export ACCEL_FAULTS_QUICK=${ACCEL_FAULTS_QUICK:-1}
ACCEL_COST_SEED=torch2 ACCEL_TEST_EXCLUDE='^(pure|binding|bench|slow|one_line)$' ACCEL_BUILD_DIR=build-torch2 ACCEL_TORCH="$torch_dir" \
  exec tools/test.sh "$@"
