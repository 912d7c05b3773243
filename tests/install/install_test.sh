#!/usr/bin/env bash
# Installs the build into a fresh prefix, then builds a program outside the tree against it twice:
# with `pkg-config --cflags --libs accel` only, and with CMake's find_package(accel). Both run on
# two ranks under the installed `accel launch`.
set -euo pipefail
build=$1 source=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" > "$work/install.log"

pc=$(dirname "$(find "$prefix" -name accel.pc | head -n 1)")
libdir=$(dirname "$(find "$prefix" -name 'libaccel.so' | head -n 1)")
export LD_LIBRARY_PATH=$libdir HF_HOME=$work/no-hf-home

mode=${INSTALL_TEST_MODE:-both}  # tests/install/CMakeLists.txt runs one mode per test

# The ABI version policy (accel.h, "Versions"): while the major version is 0, the SONAME and the
# CMake package carry major.minor, so a 0.1 consumer never loads 0.2.
header=$prefix/include/accel/accel.h
major=$(sed -n 's/^#define ACCEL_VERSION_MAJOR \([0-9]*\)$/\1/p' "$header")
minor=$(sed -n 's/^#define ACCEL_VERSION_MINOR \([0-9]*\)$/\1/p' "$header")
abi=$major.$minor
[ "$major" = 0 ] || abi=$major
soname=$(readelf -d "$libdir/libaccel.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
if [ "$soname" != "libaccel.so.$abi" ]; then
  echo "SONAME is '$soname', expected libaccel.so.$abi"; exit 1
fi

if [ "$mode" = both ] || [ "$mode" = pkgconfig ]; then
  flags=$(PKG_CONFIG_PATH=$pc pkg-config --cflags --libs accel)
  echo "pkg-config: $flags"
  gcc -std=c99 -Wall -Wextra -pedantic -Werror "$source/tests/install/consumer/consumer.c" \
    $flags -o "$work/consumer_pc"
  "$work/consumer_pc"
  "$prefix/bin/accel" launch -n 2 "$work/consumer_pc"
fi
if [ "$mode" = both ] || [ "$mode" = cmake ]; then
  cmake -S "$source/tests/install/consumer" -B "$work/cmake_build" -DCMAKE_PREFIX_PATH="$prefix" \
    > "$work/cmake_configure.log"
  cmake --build "$work/cmake_build" > "$work/cmake_build.log"
  "$work/cmake_build/consumer"
  "$prefix/bin/accel" launch -n 2 "$work/cmake_build/consumer"
  "$prefix/bin/accel" launch -n 2 "$work/cmake_build/consumer_cpp"
  # Another ABI's version must not be accepted by the package.
  other=$major.$((minor - 1))
  [ "$major" = 0 ] || other=$((major - 1)).0
  if cmake -S "$source/tests/install/consumer" -B "$work/cmake_old" -DCMAKE_PREFIX_PATH="$prefix" \
       -DACCEL_WANTED_VERSION="$other" > "$work/cmake_old.log" 2>&1; then
    echo "find_package(accel $other) accepted version $major.$minor"; exit 1
  fi
fi
# The installed `accel test` finds its self-test in libexec and that finds the installed library.
if [ "$mode" = both ] || [ "$mode" = pkgconfig ]; then
  HF_HOME="$work/no-hf-home" "$prefix/bin/accel" test -n 2 | tee "$work/accel_test.log"
  grep -q "Test is a success" "$work/accel_test.log"
fi
echo "install test ($mode) passed"
