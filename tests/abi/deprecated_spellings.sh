#!/bin/bash
# Usage: deprecated_spellings.sh CXX INCLUDE_DIR SOURCE EXPECTED...
# The source must compile (warnings allowed) and its warnings must name each EXPECTED text.
set -u
cxx=$1 include=$2 source=$3
shift 3
out=$("$cxx" -std=c++17 -fsyntax-only -Wall -I"$include" "$source" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || { echo "FAIL: the deprecated spellings no longer compile"; exit 1; }
for expected in "$@"; do
  count=$(grep -c -F -- "$expected" <<<"$out")
  [ "$count" -gt 0 ] || { echo "FAIL: no deprecation warning saying: $expected"; exit 1; }
done
echo "every deprecated spelling compiles and warns"
