#!/usr/bin/env bash
# Runs a command; passes when it exits 0 and its output matches the extended regex $1.
set -uo pipefail
pattern=$1
shift
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ $rc -ne 0 ]; then echo "exit code $rc"; exit 1; fi
if ! printf '%s\n' "$out" | grep -Eq "$pattern"; then echo "output does not match: $pattern"; exit 1; fi
