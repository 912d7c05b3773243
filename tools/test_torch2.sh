#!/usr/bin/env bash
# The whole test suite against LibTorch 2.x: PyPI's torch wheel (tools/fetch_torch.sh; the version
# below unless ACCEL_TORCH_VERSION says another, 2.7 or later), built in build-torch2/. Run after
# tools/setup.sh, which installs the rest (and the 1.13 Python reference the tests compare with).
set -euo pipefail
cd "$(dirname "$0")/.."
torch_dir=$(tools/fetch_torch.sh "${ACCEL_TORCH_VERSION:-2.11.0}")
if [ -f build-torch2/CMakeCache.txt ] &&
   ! grep -qx "ACCEL_TORCH:PATH=$torch_dir" build-torch2/CMakeCache.txt; then
  cmake -S . -B build-torch2 -DACCEL_TORCH="$torch_dir" >/dev/null
fi
ACCEL_BUILD_DIR=build-torch2 ACCEL_TORCH="$torch_dir" exec tools/test.sh "$@"
