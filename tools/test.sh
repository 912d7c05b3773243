#!/usr/bin/env bash
# Builds what changed and runs the test suite (unit, C ABI, multi-process, faults, cluster engines,
# install, the bindings). Usage: tools/test.sh [--all] [ctest arguments...]
#
# Tiers (labels; docs/testing.md): the default runs every test but those labelled `slow` (the
# two-epoch accuracy bars of the four Fashion-MNIST examples, ~95 s each on both cores; shorter
# learning checks of the same programs stay in the default). --all runs those too.
# ACCEL_TEST_EXCLUDE (a ctest label regex) replaces the default exclusion: tools/test_torch2.sh
# uses it to skip what is the same on both LibTorch lines.
# ACCEL_BUILD_DIR (default build) and ACCEL_TORCH (the LibTorch, when that tree is first
# configured; see cmake/AccelTorch.cmake) run it on another build tree: tools/test_torch2.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
exclude=${ACCEL_TEST_EXCLUDE-^slow$}
if [ "${1:-}" = --all ]; then
  exclude=
  shift
fi
build=${ACCEL_BUILD_DIR:-build}
[ -f "$build/CMakeCache.txt" ] ||
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${ACCEL_TORCH:+-DACCEL_TORCH="$ACCEL_TORCH"}
cmake --build "$build"
# ctest starts the costliest tests first when it knows their costs (its CTestCostData.txt, kept
# from earlier runs). A new build tree gets the costs CI measured (tests/ctest_costs/, by tier:
# ACCEL_COST_SEED), so that long tests overlap the many short ones instead of running alone at the
# end; the seeds only order the tests.
seed_costs() {  # build dir, seed name
  local costs=$1/Testing/Temporary/CTestCostData.txt
  [ -f "$costs" ] || { mkdir -p "${costs%/*}" && cp "tests/ctest_costs/$2.txt" "$costs"; }
}
seed_costs "$build" "${ACCEL_COST_SEED:-plain}"
# No user configuration may leak into the tests.
export HF_HOME="$PWD/$build/no-hf-home"
ctest --test-dir "$build" --output-on-failure -j2 ${exclude:+-LE "$exclude"} "$@"
