#!/usr/bin/env bash
# The install every test in tests/install builds against: `cmake --install` of the build into a
# fresh prefix, and the ABI version policy checked on what was installed (accel.h, "Versions":
# while the major version is 0 the SONAME carries major.minor, so a 0.1 program never loads 0.2).
set -euo pipefail
build=$1 prefix=$2
rm -rf "$prefix"
cmake --install "$build" --prefix "$prefix" > "$prefix.log"

header=$prefix/include/accel/accel.h
major=$(sed -n 's/^#define ACCEL_VERSION_MAJOR \([0-9]*\)$/\1/p' "$header")
minor=$(sed -n 's/^#define ACCEL_VERSION_MINOR \([0-9]*\)$/\1/p' "$header")
abi=$major.$minor
[ "$major" = 0 ] || abi=$major
libdir=$(dirname "$(find "$prefix" -name 'libaccel.so' | head -n 1)")
soname=$(readelf -d "$libdir/libaccel.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
if [ "$soname" != "libaccel.so.$abi" ]; then
  echo "SONAME is '$soname', expected libaccel.so.$abi"; exit 1
fi
echo "installed libaccel $major.$minor into $prefix"
