#!/usr/bin/env bash
# A C program outside the tree, built against the installed prefix as README.md says: with
# `pkg-config --cflags --libs accel` alone, or with CMake's find_package(accel). Each runs alone and
# on two ranks under the installed `accel launch`, with no LD_LIBRARY_PATH: what the .pc file or
# the CMake package gives must be enough to find libaccel at run time too.
set -euo pipefail
prefix=$1 source=$2 work=$3 mode=$4 with_torch=${5:-OFF}
rm -rf "$work" && mkdir -p "$work"
unset LD_LIBRARY_PATH
export HF_HOME=$work/no-hf-home
header=$prefix/include/accel/accel.h
major=$(sed -n 's/^#define ACCEL_VERSION_MAJOR \([0-9]*\)$/\1/p' "$header")
minor=$(sed -n 's/^#define ACCEL_VERSION_MINOR \([0-9]*\)$/\1/p' "$header")

if [ "$mode" = pkgconfig ]; then
  pc=$(dirname "$(find "$prefix" -name accel.pc | head -n 1)")
  flags=$(PKG_CONFIG_PATH=$pc pkg-config --cflags --libs accel)
  echo "pkg-config: $flags"
  gcc -std=c99 -Wall -Wextra -pedantic -Werror "$source/tests/install/consumer/consumer.c" \
    $flags -o "$work/consumer_pc"
  "$work/consumer_pc"
  "$prefix/bin/accel" launch -n 2 "$work/consumer_pc"
  # The installed `accel test` finds its self-test in libexec and that finds the installed library.
  "$prefix/bin/accel" test -n 2 | tee "$work/accel_test.log"
  grep -q "Test is a success" "$work/accel_test.log"
elif [ "$mode" = cmake ]; then
  cmake -S "$source/tests/install/consumer" -B "$work/cmake_build" -DCMAKE_PREFIX_PATH="$prefix" \
    -DACCEL_CONSUMER_TORCH="$with_torch" > "$work/cmake_configure.log"
  cmake --build "$work/cmake_build" > "$work/cmake_build.log"
  "$work/cmake_build/consumer"
  "$prefix/bin/accel" launch -n 2 "$work/cmake_build/consumer"
  "$prefix/bin/accel" launch -n 2 "$work/cmake_build/consumer_cpp"
  if [ "$with_torch" = ON ]; then
    "$prefix/bin/accel" launch -n 2 "$work/cmake_build/consumer_torch"
  fi
  # Another ABI's version must not be accepted by the package.
  other=$major.$((minor - 1))
  [ "$major" = 0 ] || other=$((major - 1)).0
  if cmake -S "$source/tests/install/consumer" -B "$work/cmake_old" -DCMAKE_PREFIX_PATH="$prefix" \
       -DACCEL_WANTED_VERSION="$other" > "$work/cmake_old.log" 2>&1; then
    echo "find_package(accel $other) accepted version $major.$minor"; exit 1
  fi
else
  echo "unknown mode '$mode'"; exit 2
fi
echo "install test ($mode) passed"
