#!/usr/bin/env bash
# The package's two ways to find libaccel, and its compile-time ABI check:
#  - -tags accel_nopkgconfig with CGO_CFLAGS/CGO_LDFLAGS only (no pkg-config at all) builds and
#    runs the collectives example;
#  - an accel.h of another ABI (0.3) does not compile, with the package's own message.
# Usage: ci/build_modes.sh <include dir> <lib dir>   (run in bindings/go)
set -euo pipefail
include=$1 lib=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

env -u PKG_CONFIG_PATH PKG_CONFIG=/bin/false CGO_CFLAGS="-I$include" \
  CGO_LDFLAGS="-L$lib -Wl,-rpath,$lib" \
  go build -tags accel_nopkgconfig -o "$work/collectives" ./examples/collectives
"$work/collectives" | grep -qx "gather                   shape \[2\] values 0 1"
echo "ok: -tags accel_nopkgconfig builds and runs"

mkdir -p "$work/include/accel"
sed 's/^#define ACCEL_VERSION_MINOR 2$/#define ACCEL_VERSION_MINOR 3/' "$include/accel/accel.h" \
  >"$work/include/accel/accel.h"
grep -q '^#define ACCEL_VERSION_MINOR 3$' "$work/include/accel/accel.h"
if out=$(env -u PKG_CONFIG_PATH CGO_CFLAGS="-I$work/include" CGO_LDFLAGS="-L$lib" \
  go build -tags accel_nopkgconfig ./accel 2>&1); then
  echo "FAIL: the package compiled against an accel.h of ABI 0.3" >&2
  exit 1
fi
grep -q "package accel binds libaccel's ABI 0.2" <<<"$out" || {
  echo "FAIL: the build failed without the ABI message:" >&2
  echo "$out" >&2
  exit 1
}
echo "ok: an accel.h of ABI 0.3 is refused at compile time"
