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

mode=${ACCEL_INSTALL_TEST_MODE:-both}

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
fi
echo "install test ($mode) passed"
