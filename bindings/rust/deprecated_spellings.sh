#!/bin/bash
# Usage: deprecated_spellings.sh CARGO CRATE_DIR WORK_DIR TARGET_DIR EXPECTED...
# Builds the program in CRATE_DIR (libaccel/tests/deprecated) against the accel crate: it must
# build, its warnings must name each EXPECTED text, and it must run (the old spellings work). A
# copy in WORK_DIR is built, so that its Cargo.lock (bindings/rust's, pruned: the same `log`, so
# TARGET_DIR's crates are reused) stays out of the source tree.
set -u
cargo=$1 crate=$(cd "$2" && pwd) work=$3 target=$4
shift 4
rm -rf "$work" && mkdir -p "$work" || exit 1
cp -r "$crate/src" "$work/" && cp "$crate/../../../Cargo.lock" "$work/" || exit 1
sed "s|path = \"\.\./\.\.\"|path = \"$crate/../..\"|" "$crate/Cargo.toml" >"$work/Cargo.toml"
out=$("$cargo" build --offline --manifest-path "$work/Cargo.toml" --target-dir "$target" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || { echo "FAIL: the deprecated spellings no longer compile"; exit 1; }
for expected in "$@"; do
  grep -q -F -- "$expected" <<<"$out" || { echo "FAIL: no deprecation warning saying: $expected"; exit 1; }
done
LD_LIBRARY_PATH=${ACCEL_LIB_DIR:-}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
  "$target/debug/deprecated-spellings" || { echo "FAIL: the deprecated spellings do not run"; exit 1; }
echo "every deprecated spelling compiles, warns and works"
